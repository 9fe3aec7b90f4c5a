/* cpu_misc.c — the CPU provider's misc kernel family. */
#include "cpu_kernels.h"
#include "cpu_util.h"

OnyxStatus* cpu_register_misc(OnyxKernelRegistry* r) {
  (void)r;
  return NULL;
}
