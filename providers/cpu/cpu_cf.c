/* cpu_cf.c — the CPU provider's cf kernel family. */
#include "cpu_kernels.h"
#include "cpu_util.h"

OnyxStatus* cpu_register_cf(OnyxKernelRegistry* r) {
  (void)r;
  return NULL;
}
