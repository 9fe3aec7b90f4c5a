/* ox_checked.h — checked integer arithmetic for shapes, sizes, strides,
 * pads, dilations, indices and counts (host, schemas). Every function
 * returns false on overflow (and leaves *out unspecified), so a caller turns
 * it into an error naming the node and the attribute. Providers, which see
 * only the SDK, keep their own copy (providers/cpu/cpu_util.h). */
#ifndef OX_CHECKED_H
#define OX_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool ox_add_i64(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}
static inline bool ox_sub_i64(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_sub_overflow(a, b, out);
}
static inline bool ox_mul_i64(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
static inline bool ox_add_size(size_t a, size_t b, size_t* out) {
  return !__builtin_add_overflow(a, b, out);
}
static inline bool ox_mul_size(size_t a, size_t b, size_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
/* a + b + c, each step checked. */
static inline bool ox_add3_i64(int64_t a, int64_t b, int64_t c, int64_t* out) {
  int64_t t;
  return ox_add_i64(a, b, &t) && ox_add_i64(t, c, out);
}
/* The extent a kernel of size k covers with dilation d: d * (k - 1) + 1. */
static inline bool ox_dilated_extent(int64_t k, int64_t d, int64_t* out) {
  int64_t t;
  return k >= 1 && d >= 1 && ox_mul_i64(d, k - 1, &t) && ox_add_i64(t, 1, out);
}
/* Floor division for b > 0 (C's / truncates toward zero). */
static inline int64_t ox_floor_div_i64(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}
/* Ceiling division for b > 0, without the overflow of (a + b - 1) / b. */
static inline int64_t ox_ceil_div_i64(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && a > 0) ? q + 1 : q;
}
/* A double that converts to int64 without undefined behaviour: finite and
 * within [-2^63, 2^63). */
static inline bool ox_double_to_i64(double v, int64_t* out) {
  if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) return false;
  *out = (int64_t)v;
  return true;
}

#endif /* OX_CHECKED_H */
