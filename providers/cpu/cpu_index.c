/* cpu_index.c — the CPU provider's index kernel family. */
#include "cpu_kernels.h"
#include "cpu_util.h"

OnyxStatus* cpu_register_index(OnyxKernelRegistry* r) {
  (void)r;
  return NULL;
}
