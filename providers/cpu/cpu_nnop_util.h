/* cpu_nnop_util.h — internal to the CPU provider: the helpers of its
 * double-precision NN kernels (cpu_nnop_util.c; used by cpu_norm.c,
 * cpu_pool.c, cpu_loss.c, cpu_nms.c, cpu_resize.c, cpu_conv_transpose.c,
 * cpu_rnn.c): element conversion into scratch buffers, attribute helpers.
 *
 * Kernels of this family compute in double (float64 in, float64 out) or in
 * float (float32, float16, bfloat16: loaded to float32, stored back rounded
 * to nearest even), so one implementation serves every floating type. */
#ifndef CPU_NNOP_UTIL_H
#define CPU_NNOP_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "cpu_kernels.h"
#include "cpu_util.h"

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

/* An error naming `what` unless t has rank min_rank .. CPU_MAX_RANK. */
OnyxStatus* nnop_need_rank(const OnyxNode* node, const OnyxTensor* t, const char* what,
                           size_t min_rank);
/* Input i, a per-channel parameter (scale, bias) of `want` elements, as
 * doubles in scratch memory; an error names `what`. */
OnyxStatus* nnop_load_param(OnyxKernelContext* ctx, const OnyxNode* node, size_t i,
                            const char* what, size_t want, double** out);

#endif /* CPU_NNOP_UTIL_H */
