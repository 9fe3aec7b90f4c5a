/* cpu_nn_ops.h — internal to the nn_ops kernel family of the CPU provider
 * (cpu_nn_ops*.c, cpu_rnn.c): element conversion into scratch buffers,
 * attribute helpers, and each file's registration function.
 *
 * Kernels of this family compute in double (float64 in, float64 out) or in
 * float (float32, float16, bfloat16: loaded to float32, stored back rounded
 * to nearest even), so one implementation serves every floating type. */
#ifndef CPU_NN_OPS_H
#define CPU_NN_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "cpu_kernels.h"
#include "cpu_util.h"

/* float32, float64, float16, bfloat16. */
extern const int32_t nnop_types_f[4];
/* The same plus every integer type (Resize, Upsample: nearest copies
 * elements exactly; linear/cubic results are rounded to nearest). */
extern const int32_t nnop_types_resize[12];

/* Scratch memory of the context (freed after compute); an error names the node. */
OnyxStatus* nnop_scratch(OnyxKernelContext* ctx, size_t bytes, void** out);
/* The elements of any numeric tensor as doubles / floats, in scratch memory. */
OnyxStatus* nnop_load_d(OnyxKernelContext* ctx, const OnyxTensor* t, double** out);
OnyxStatus* nnop_load_f(OnyxKernelContext* ctx, const OnyxTensor* t, float** out);
/* Stores n values into the dense numeric tensor y (integers: rounded to nearest). */
void nnop_store_d(OnyxTensor* y, const double* v, size_t n);
void nnop_store_f(OnyxTensor* y, const float* v, size_t n);
/* True when the node has output i (optional outputs may be absent). */
bool nnop_has_output(const OnyxNode* node, size_t i);
/* True when input i is given to the kernel. */
bool nnop_has_input(const OnyxKernelContext* ctx, size_t i);
/* The string attribute equals `value` (absent: `def` is compared). */
bool nnop_attr_is(const OnyxNode* node, const char* name, const char* def, const char* value);
/* Copies a string attribute into buf (absent: def); truncated to fit. */
const char* nnop_attr_str(const OnyxNode* node, const char* name, const char* def, char* buf,
                          size_t size);
/* A state holding just the node (kernels with no attributes to parse). */
OnyxStatus* nnop_node_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state);
/* A scalar input read as double (first element); false when absent or empty. */
bool nnop_scalar_d(const OnyxKernelContext* ctx, size_t i, double* out);

OnyxStatus* cpu_register_nn_ops_resize(OnyxKernelRegistry* r); /* cpu_resize.c */
OnyxStatus* cpu_register_nn_ops_conv(OnyxKernelRegistry* r);   /* cpu_conv_transpose.c */
OnyxStatus* cpu_register_rnn(OnyxKernelRegistry* r);           /* cpu_rnn.c */

#endif /* CPU_NN_OPS_H */
