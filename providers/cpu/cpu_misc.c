/* cpu_misc.c — the CPU provider's misc kernel family: attention ops
 * (cpu_attention.c), and the string and ai.onnx.ml ops as they come. */
#include "cpu_kernels.h"
#include "cpu_util.h"

OnyxStatus* cpu_register_attention(OnyxKernelRegistry* r); /* cpu_attention.c */
OnyxStatus* cpu_register_text(OnyxKernelRegistry* r);      /* cpu_text.c */
OnyxStatus* cpu_register_ml(OnyxKernelRegistry* r);        /* cpu_ml.c */
OnyxStatus* cpu_register_ml_tree(OnyxKernelRegistry* r);   /* cpu_ml_tree.c */
OnyxStatus* cpu_register_recurrent(OnyxKernelRegistry* r); /* cpu_stateful_seq.c */

OnyxStatus* cpu_register_misc(OnyxKernelRegistry* r) {
  OnyxStatus* st = cpu_register_attention(r);
  if (!st) st = cpu_register_text(r);
  if (!st) st = cpu_register_ml(r);
  if (!st) st = cpu_register_ml_tree(r);
  if (!st) st = cpu_register_recurrent(r);
  return st;
}
