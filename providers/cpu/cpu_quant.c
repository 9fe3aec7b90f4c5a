/* cpu_quant.c — the CPU provider's quant kernel family. */
#include "cpu_kernels.h"
#include "cpu_util.h"

OnyxStatus* cpu_register_quant(OnyxKernelRegistry* r) {
  (void)r;
  return NULL;
}
