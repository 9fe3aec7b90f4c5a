/* cpu_math.c — the CPU provider's math kernel family. */
#include "cpu_kernels.h"
#include "cpu_util.h"

OnyxStatus* cpu_register_math(OnyxKernelRegistry* r) {
  (void)r;
  return NULL;
}
