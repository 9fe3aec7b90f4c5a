/* cpu_types.h — internal to the CPU provider: the element-type tables the
 * kernel registrations name in their type constraints, defined once
 * (cpu_types.c). Each is declared with its length, so CPU_ARRAY_LEN(table)
 * gives the count. */
#ifndef CPU_TYPES_H
#define CPU_TYPES_H

#include <stdint.h>

#include "onyx/onyx_ep.h"

/* float32, float64. */
extern const int32_t cpu_types_float[2];
/* float32. */
extern const int32_t cpu_types_f32[1];
/* float32, float64, float16, bfloat16. */
extern const int32_t cpu_types_real[4];
/* int64. */
extern const int32_t cpu_types_int64[1];
/* int32, int64. */
extern const int32_t cpu_types_index[2];
/* bool. */
extern const int32_t cpu_types_bool[1];
/* The four floating types, then the signed and unsigned integers by width. */
extern const int32_t cpu_types_numeric[12];
/* cpu_types_numeric, then bool. */
extern const int32_t cpu_types_numeric_bool[13];
/* cpu_types_numeric_bool, then string: every type with an order. */
extern const int32_t cpu_types_sortable[14];
/* Every type a byte-copying kernel can move, strings included. */
extern const int32_t cpu_types_copyable[21];

#endif /* CPU_TYPES_H */
