/* cpu_contrib.c — the CPU provider's contrib kernel family. */
#include "cpu_kernels.h"
#include "cpu_util.h"

OnyxStatus* cpu_register_contrib(OnyxKernelRegistry* r) {
  (void)r;
  return NULL;
}
