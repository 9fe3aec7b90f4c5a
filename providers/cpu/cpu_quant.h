/* cpu_quant.h — internal to the CPU provider's quant family (cpu_quant*.c,
 * cpu_signal.c, cpu_random.c): element access for the quantized types
 * (8/16-bit integers, packed 4- and 2-bit integers, float8, float4e2m1,
 * float8e8m0 scales) and the registration hooks of the family's files. */
#ifndef CPU_QUANT_H
#define CPU_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "cpu_kernels.h"

/* Bits per element of the packed sub-byte types (4 or 2), 0 for others.
 * Packed element i lives in byte i / (8 / bits), at bit (i % (8 / bits)) *
 * bits: the first element in the least significant bits. */
unsigned cpu_q_packed_bits(int32_t type);
/* Integer quantized types (int8..int32, uint8/16, int4/uint4, int2/uint2). */
bool cpu_q_is_int(int32_t type);
/* The float8 types and float4e2m1. */
bool cpu_q_is_small_float(int32_t type);
/* Range of an integer quantized type. */
void cpu_q_int_range(int32_t type, int64_t* lo, int64_t* hi);

/* Element i of an integer quantized type (sign-extended for packed types). */
int64_t cpu_q_load_int(int32_t type, const void* data, size_t i);
/* Stores v (already in range) as element i; packed types are updated in
 * place, so two threads must not write elements of the same byte. */
void cpu_q_store_int(int32_t type, void* data, size_t i, int64_t v);
/* Element i of any numeric type as a double: integers, float16/32/64,
 * bfloat16, the float8 types, float4e2m1, float8e8m0 (2^(e-127)). */
double cpu_q_load(int32_t type, const void* data, size_t i);

/* The float8 / float4e2m1 code of v, rounded to nearest even; out-of-range
 * values follow the ONNX tables for saturate on and off (float4e2m1 always
 * saturates, NaN giving 6). */
uint8_t cpu_q_small_float_encode(int32_t type, double v, bool saturate);
double cpu_q_small_float_decode(int32_t type, uint8_t code);

/* Stores v as element i of a float output (float16/32/64, bfloat16; others
 * are left alone). */
void cpu_q_store_float(int32_t type, void* data, size_t i, double v);

/* Rounds x to the precision of a scale / precision type (float32, float16,
 * bfloat16); other types leave it as it is. */
double cpu_q_round_to(int32_t type, double x);

/* 2-D MaxPool on 8-bit planes (cpu_qpool.c): `planes` planes of ih x iw
 * pixels of ch bytes (NCHW: ch 1; NHWC: a plane is an image, ch its
 * channels) into oh x ow, window kh x kw, strides, dilations and begin pads
 * as the geometry gives them (oh, ow already computed from them), int8 when
 * is_signed, else uint8; no Indices. A tap in the padding counts as the
 * type's lowest value. */
typedef struct CpuQMaxPool2d {
  size_t ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw;
  bool is_signed;
  size_t ch;
} CpuQMaxPool2d;
struct CpuStop;
/* Runs it over the context's pool: false (nothing written) when the sizes
 * do not suit it (a zero stride or dilation, a row that does not fit);
 * *oom when a worker could not get its row buffers. */
bool cpu_qmaxpool2d(OnyxKernelContext* ctx, const CpuQMaxPool2d* p, const uint8_t* x, uint8_t* y,
                    size_t planes, struct CpuStop* stop, bool* oom);

/* com.microsoft NhwcMaxPool's kernel (cpu_qpool.c). */
OnyxStatus* cpu_qmaxpool_nhwc_create(OnyxEp* ep, const OnyxNode* node, void* user_data,
                                     void** state);
OnyxStatus* cpu_qmaxpool_nhwc_compute(void* state, OnyxKernelContext* ctx);

/* Registration hooks called by cpu_register_quant (cpu_quant.c). */
OnyxStatus* cpu_register_quant_mm(OnyxKernelRegistry* r); /* cpu_quant_mm.c */

/* Registers an array of kernel definitions in the ai.onnx domain. */
OnyxStatus* cpu_q_register_defs(OnyxKernelRegistry* r, OnyxKernelDef* defs, size_t n);

#endif /* CPU_QUANT_H */
