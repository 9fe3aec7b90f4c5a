/* cpu_misc.c — the CPU provider's misc kernel family: attention ops
 * (cpu_attention.c), and the string and ai.onnx.ml ops as they come. */
#include "cpu_kernels.h"
#include "cpu_util.h"

OnyxStatus* cpu_register_attention(OnyxKernelRegistry* r); /* cpu_attention.c */

OnyxStatus* cpu_register_misc(OnyxKernelRegistry* r) {
  return cpu_register_attention(r);
}
