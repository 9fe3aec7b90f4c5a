/* gpu_kernels_body.h — what each GPU thread computes, for one element or one
 * row, written once in the subset of C that nvcc, hipcc and a C compiler all
 * accept. gpu_kernels.cu wraps these bodies in grid-stride __global__
 * kernels; gpu_emu.c (tests) runs the very same bodies in host loops, so the
 * ONNX suites can check them without a GPU. Only the tiled GEMM kernel has no
 * body here (its shared-memory tiles need real threads). */
#ifndef ONYX_GPU_KERNELS_BODY_H
#define ONYX_GPU_KERNELS_BODY_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gpu_kernels.h"

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
#include "gpu_vendor.h" /* the device intrinsics (__float_as_uint) */
#define GPU_FN static __device__ inline
#else
#define GPU_FN static inline
#endif

/* --- Storage types: float32, float16 (IEEE binary16) and bfloat16 ---------------------
 *
 * Kernels load their operands to float, compute and accumulate in float (or
 * double where a one-thread row sum needs it), and store in the tensor's own
 * type. The conversions are bit manipulations in portable C, so the device
 * kernels and the host emulation round identically: float -> float16 and
 * float -> bfloat16 round to nearest, ties to even; infinities stay
 * infinities, NaN stays a (quiet) NaN; float16 overflow (from 65520 up, the
 * midpoint past 65504) gives infinity; float16 subnormals are produced and
 * read exactly. */

/* A float's bits and back: the device's reinterpreting intrinsics (the same
 * names on CUDA and HIP), memcpy in C. */
GPU_FN uint32_t gpub_f32_bits(float f) {
#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
  return __float_as_uint(f);
#else
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  return x;
#endif
}

GPU_FN float gpub_bits_f32(uint32_t x) {
#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
  return __uint_as_float(x);
#else
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
#endif
}

GPU_FN float gpub_f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1Fu) return gpub_bits_f32(sign | 0x7F800000u | (m << 13)); /* inf, NaN */
  if (e) return gpub_bits_f32(sign | ((e + 112u) << 23) | (m << 13));   /* rebias 15 -> 127 */
  const float v = (float)m * 5.9604644775390625e-8f; /* subnormal: m * 2^-24, exact */
  return sign ? -v : v;
}

GPU_FN uint16_t gpub_f32_to_f16(float f) {
  const uint32_t x = gpub_f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) /* NaN: quiet, with the payload's top bits */
    return (uint16_t)(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
  if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* >= 65520 and inf: inf */
  if (ax < 0x38800000u) {                                   /* below 2^-14: subnormal or 0 */
    if (ax <= 0x33000000u) return (uint16_t)sign; /* <= 2^-25: 0 (2^-25 is a tie, to even) */
    const uint32_t e = ax >> 23, mant = (ax & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - e; /* value / 2^-24 = mant >> shift, shift in [14, 24] */
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++; /* may carry into the smallest normal */
    return (uint16_t)(sign | r);
  }
  const uint32_t rb = ax - 0x38000000u; /* exponent rebiased 127 -> 15 */
  uint32_t h = rb >> 13;
  const uint32_t rem = rb & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry steps the exponent */
  return (uint16_t)(sign | h);
}

GPU_FN float gpub_bf16_to_f32(uint16_t h) {
  return gpub_bits_f32((uint32_t)h << 16);
}

GPU_FN uint16_t gpub_f32_to_bf16(float f) {
  uint32_t x = gpub_f32_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  x += 0x7FFFu + ((x >> 16) & 1u); /* to nearest, ties to even; FLT_MAX rounds to inf */
  return (uint16_t)(x >> 16);
}

/* Element i of p, of storage type dt, as float. */
GPU_FN float gpub_ld(const void* p, int64_t i, int dt) {
  if (dt == GPU_F16) return gpub_f16_to_f32(((const uint16_t*)p)[i]);
  if (dt == GPU_BF16) return gpub_bf16_to_f32(((const uint16_t*)p)[i]);
  return ((const float*)p)[i];
}

/* Stores v as element i of p, of storage type dt. */
GPU_FN void gpub_st(void* p, int64_t i, int dt, float v) {
  if (dt == GPU_F16)
    ((uint16_t*)p)[i] = gpub_f32_to_f16(v);
  else if (dt == GPU_BF16)
    ((uint16_t*)p)[i] = gpub_f32_to_bf16(v);
  else
    ((float*)p)[i] = v;
}

/* A double rounded to float with round-to-odd (an inexact result gets an odd
 * last bit): rounding that float once more to float16 or bfloat16 (at least
 * 13 bits shorter) then equals rounding the double directly, with no double
 * rounding at a tie. */
GPU_FN float gpub_f64_to_f32_odd(double d) {
  const float f = (float)d;
  if ((double)f == d || f != f || f - f != 0.0f) return f; /* exact, NaN or overflowed */
  const uint32_t x = gpub_f32_bits(f);
  if (x & 1u) return f;
  /* f is the nearest float; d lies between f and the neighbour towards d,
   * and of the two the odd one is the round-to-odd result. */
  const int away = fabs(d) > fabs((double)f);
  return gpub_bits_f32(away ? x + 1u : x - 1u);
}

/* Saturating double -> integer (the device's conversion instructions
 * saturate; C's cast would be undefined out of range); NaN gives 0. */
GPU_FN int64_t gpub_sat(double v, double lo, double hi) {
  if (v != v) return 0;
  if (v <= lo) return (int64_t)lo;
  if (v >= hi) return (int64_t)hi;
  return (int64_t)v;
}

/* Whether Cast takes ONNX element type t: float32 (1), uint8 (2), int8 (3),
 * int32 (6), int64 (7), bool (9), float16 (10), float64 (11), bfloat16
 * (16). */
static inline int gpub_cast_type(int t) {
  return t == 1 || t == 2 || t == 3 || t == 6 || t == 7 || t == 9 || t == 10 || t == 11 || t == 16;
}

/* Element i of a Cast between two gpub_cast_type types: floating sources go
 * through double (exact for every source), integer sources through int64;
 * to float16 / bfloat16 rounds once, to nearest even; to an integer
 * saturates; to bool tests != 0. */
GPU_FN void gpub_cast_one(const void* in, int in_type, void* out, int out_type, int64_t i) {
  double d = 0.0;
  int64_t v = 0;
  int f = 1;
  switch (in_type) {
  case 1:
    d = ((const float*)in)[i];
    break;
  case 10:
    d = gpub_f16_to_f32(((const uint16_t*)in)[i]);
    break;
  case 16:
    d = gpub_bf16_to_f32(((const uint16_t*)in)[i]);
    break;
  case 11:
    d = ((const double*)in)[i];
    break;
  default:
    f = 0;
    switch (in_type) {
    case 2:
      v = ((const uint8_t*)in)[i];
      break;
    case 3:
      v = ((const int8_t*)in)[i];
      break;
    case 6:
      v = ((const int32_t*)in)[i];
      break;
    case 7:
      v = ((const int64_t*)in)[i];
      break;
    case 9:
      v = ((const uint8_t*)in)[i] != 0;
      break;
    default:
      break;
    }
  }
  switch (out_type) {
  case 1:
    ((float*)out)[i] = f ? (float)d : (float)v;
    break;
  case 10:
    ((uint16_t*)out)[i] = gpub_f32_to_f16(gpub_f64_to_f32_odd(f ? d : (double)v));
    break;
  case 16:
    ((uint16_t*)out)[i] = gpub_f32_to_bf16(gpub_f64_to_f32_odd(f ? d : (double)v));
    break;
  case 11:
    ((double*)out)[i] = f ? d : (double)v;
    break;
  case 2:
    ((uint8_t*)out)[i] = (uint8_t)(f ? gpub_sat(d, 0, 255) : v);
    break;
  case 3:
    ((int8_t*)out)[i] = (int8_t)(f ? gpub_sat(d, -128, 127) : v);
    break;
  case 6:
    ((int32_t*)out)[i] = (int32_t)(f ? gpub_sat(d, -2147483648.0, 2147483647.0) : v);
    break;
  case 7:
    ((int64_t*)out)[i] = f ? gpub_sat(d, -9223372036854775808.0, 9223372036854774784.0) : v;
    break;
  case 9:
    ((uint8_t*)out)[i] = f ? d != 0 : v != 0;
    break;
  default:
    break;
  }
}

/* Element offsets of operands [0, count) for linear index i. */
GPU_FN void gpub_offsets(const GpuIter* it, int64_t i, int count, int64_t* off) {
  for (int o = 0; o < count; o++)
    off[o] = it->offset[o];
  for (int d = it->rank - 1; d >= 0; d--) {
    int64_t c = i % it->dims[d];
    i /= it->dims[d];
    for (int o = 0; o < count; o++)
      off[o] += c * it->strides[o][d];
  }
}

GPU_FN float gpub_binary(int op, float a, float b) {
  switch (op) {
  case GPU_ADD:
    return a + b;
  case GPU_SUB:
    return a - b;
  case GPU_MUL:
    return a * b;
  case GPU_DIV:
    return a / b;
  case GPU_POW:
    return powf(a, b);
  case GPU_MAX2:
    return fmaxf(a, b);
  case GPU_MIN2:
    return fminf(a, b);
  default:
    return 0.0f;
  }
}

GPU_FN int gpub_compare(int op, float a, float b) {
  switch (op) {
  case GPU_EQUAL:
    return a == b;
  case GPU_LESS:
    return a < b;
  case GPU_GREATER:
    return a > b;
  case GPU_LESS_EQUAL:
    return a <= b;
  case GPU_GREATER_EQUAL:
    return a >= b;
  default:
    return 0;
  }
}

GPU_FN float gpub_sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

GPU_FN float gpub_unary(int op, float v, float alpha, float beta) {
  switch (op) {
  case GPU_RELU:
    return v > 0.0f ? v : 0.0f;
  case GPU_SIGMOID:
    return gpub_sigmoid(v);
  case GPU_TANH:
    return tanhf(v);
  case GPU_ERF:
    return erff(v);
  case GPU_GELU:
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  case GPU_GELU_TANH:
    return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
  case GPU_LEAKY_RELU:
    return v >= 0.0f ? v : alpha * v;
  case GPU_CLIP:
    return fminf(fmaxf(v, alpha), beta);
  case GPU_ABS:
    return fabsf(v);
  case GPU_NEG:
    return -v;
  case GPU_EXP:
    return expf(v);
  case GPU_LOG:
    return logf(v);
  case GPU_SQRT:
    return sqrtf(v);
  case GPU_RECIPROCAL:
    return 1.0f / v;
  case GPU_FLOOR:
    return floorf(v);
  case GPU_CEIL:
    return ceilf(v);
  case GPU_ELU:
    return v >= 0.0f ? v : alpha * (expf(v) - 1.0f);
  case GPU_HARD_SIGMOID:
    return fmaxf(0.0f, fminf(1.0f, alpha * v + beta));
  case GPU_SOFTPLUS:
    return v > 20.0f ? v : log1pf(expf(v));
  case GPU_SIN:
    return sinf(v);
  case GPU_COS:
    return cosf(v);
  case GPU_SILU:
    return v * gpub_sigmoid(v);
  default:
    return v;
  }
}

/* One element of a fused epilogue: act(v + bias + z). */
GPU_FN float gpub_epilogue(float v, float bias, float z, int act, float alpha, float lo, float hi) {
  v = v + bias + z;
  switch (act) {
  case GPU_ACT_RELU:
    return v > 0.0f ? v : 0.0f;
  case GPU_ACT_LEAKY_RELU:
    return v >= 0.0f ? v : alpha * v;
  case GPU_ACT_CLIP:
    return fminf(fmaxf(v, lo), hi);
  case GPU_ACT_GELU:
    return gpub_unary(GPU_GELU, v, 0.0f, 0.0f);
  default:
    return v;
  }
}

/* Softmax of row r of [outer, axis, inner] (r = o * inner + i), x and y of
 * storage type dt. */
GPU_FN void gpub_softmax_row(const void* x, void* y, int64_t r, int64_t axis, int64_t inner,
                             int log_softmax, int dt) {
  const int64_t base = (r / inner) * axis * inner + r % inner;
  float mx = -INFINITY;
  for (int64_t j = 0; j < axis; j++)
    mx = fmaxf(mx, gpub_ld(x, base + j * inner, dt));
  /* One thread sums the whole axis: in double, so that a long axis keeps
   * float precision (a float running sum drifts by ~1e-4 over 5000 terms). */
  double acc = 0.0;
  for (int64_t j = 0; j < axis; j++)
    acc += expf(gpub_ld(x, base + j * inner, dt) - mx);
  const float sum = (float)acc;
  if (log_softmax) {
    float ls = logf(sum);
    for (int64_t j = 0; j < axis; j++)
      gpub_st(y, base + j * inner, dt, gpub_ld(x, base + j * inner, dt) - mx - ls);
  } else {
    for (int64_t j = 0; j < axis; j++)
      gpub_st(y, base + j * inner, dt, expf(gpub_ld(x, base + j * inner, dt) - mx) / sum);
  }
}

/* LayerNormalization of row r: x, scale, bias and y of storage type dt,
 * mean_out and inv_std_out float32. */
GPU_FN void gpub_layernorm_row(const void* x, const void* scale, const void* bias, void* y,
                               float* mean_out, float* inv_std_out, int64_t r, int64_t cols,
                               float epsilon, int dt) {
  const int64_t base = r * cols;
  double mean = 0.0, var = 0.0;
  for (int64_t j = 0; j < cols; j++)
    mean += gpub_ld(x, base + j, dt);
  mean /= (double)cols;
  for (int64_t j = 0; j < cols; j++) {
    double d = gpub_ld(x, base + j, dt) - mean;
    var += d * d;
  }
  var /= (double)cols;
  float inv = (float)(1.0 / sqrt(var + (double)epsilon));
  for (int64_t j = 0; j < cols; j++) {
    float v = (float)(gpub_ld(x, base + j, dt) - mean) * inv * gpub_ld(scale, j, dt);
    gpub_st(y, base + j, dt, bias ? v + gpub_ld(bias, j, dt) : v);
  }
  if (mean_out) mean_out[r] = (float)mean;
  if (inv_std_out) inv_std_out[r] = inv;
}

/* Output element o of a reduction of x (storage type dt); the result in
 * float. */
GPU_FN float gpub_reduce_one(int op, const void* x, int64_t o, int64_t n_red, const GpuReduce* r,
                             int dt) {
  int64_t base = 0, rest = o;
  for (int d = r->kept_rank - 1; d >= 0; d--) {
    base += (rest % r->kept_dims[d]) * r->kept_strides[d];
    rest /= r->kept_dims[d];
  }
  float acc = op == GPU_REDUCE_MAX ? -INFINITY : op == GPU_REDUCE_MIN ? INFINITY : 0.0f;
  for (int64_t k = 0; k < n_red; k++) {
    int64_t off = base, kr = k;
    for (int d = r->red_rank - 1; d >= 0; d--) {
      off += (kr % r->red_dims[d]) * r->red_strides[d];
      kr /= r->red_dims[d];
    }
    float v = gpub_ld(x, off, dt);
    acc = op == GPU_REDUCE_MAX ? fmaxf(acc, v) : op == GPU_REDUCE_MIN ? fminf(acc, v) : acc + v;
  }
  if (op == GPU_REDUCE_MEAN) acc = n_red ? acc / (float)n_red : NAN;
  return acc;
}

/* A reduction over the middle dim of [outer, n_red, inner]: output r = o *
 * inner + i, whose elements are n_red apart by inner. */
GPU_FN float gpub_reduce_strided_one(int op, const void* x, int64_t r, int64_t n_red, int64_t inner,
                                     int dt) {
  const int64_t base = (r / inner) * n_red * inner + r % inner;
  float acc = op == GPU_REDUCE_MAX ? -INFINITY : op == GPU_REDUCE_MIN ? INFINITY : 0.0f;
  for (int64_t j = 0; j < n_red; j++) {
    float v = gpub_ld(x, base + j * inner, dt);
    acc = op == GPU_REDUCE_MAX ? fmaxf(acc, v) : op == GPU_REDUCE_MIN ? fminf(acc, v) : acc + v;
  }
  return op == GPU_REDUCE_MEAN ? acc / (float)n_red : acc;
}

/* --- Host-side layout tests of the launchers (gpu_kernels.cu picks its
 * kernels with them; gpu_emu.c takes the same branches, so the tests run
 * them without a GPU). */

/* Whether a reduction of the dense input is [outer, n_red] (inner = 1: the
 * reduced dims are the innermost) or [outer, n_red, inner] (the reduced dims
 * form one run with kept dims only before and after it): 1 with outer and
 * inner, else 0. Dims of size 1 are skipped; strides give the order of the
 * others (dense: each stride is the product of the sizes after it). */
static inline int gpub_reduce_layout(const GpuReduce* r, int64_t* outer, int64_t* inner) {
  int64_t size[2 * GPU_MAX_RANK], stride[2 * GPU_MAX_RANK];
  int red[2 * GPU_MAX_RANK];
  int nd = 0;
  for (int i = 0; i < r->kept_rank; i++)
    if (r->kept_dims[i] != 1) {
      size[nd] = r->kept_dims[i], stride[nd] = r->kept_strides[i], red[nd++] = 0;
    }
  for (int i = 0; i < r->red_rank; i++)
    if (r->red_dims[i] != 1) {
      size[nd] = r->red_dims[i], stride[nd] = r->red_strides[i], red[nd++] = 1;
    }
  for (int i = 1; i < nd; i++) /* insertion sort by stride, largest first */
    for (int j = i; j > 0 && stride[j - 1] < stride[j]; j--) {
      int64_t ts = size[j], tt = stride[j];
      int tr = red[j];
      size[j] = size[j - 1], stride[j] = stride[j - 1], red[j] = red[j - 1];
      size[j - 1] = ts, stride[j - 1] = tt, red[j - 1] = tr;
    }
  int64_t expect = 1;
  for (int i = nd - 1; i >= 0; i--) {
    if (stride[i] != expect) return 0; /* not dense in this order */
    expect *= size[i];
  }
  int i = 0; /* kept* reduced* kept*: the reduced run unbroken */
  int64_t before = 1, after = 1;
  while (i < nd && !red[i])
    before *= size[i++];
  while (i < nd && red[i])
    i++;
  while (i < nd && !red[i])
    after *= size[i++];
  if (i != nd) return 0;
  *outer = before;
  *inner = after;
  return 1;
}

enum { GPU_FLAT_NO, GPU_FLAT_DENSE, GPU_FLAT_SCALAR, GPU_FLAT_CYCLE };

/* How operand o is laid out over the iteration: dense (the output's own
 * row-major order), one value (every stride 0), a cycle (dense over the
 * innermost dims and repeated over the outer ones: a bias, a mask broadcast
 * over batch and heads; element i is at i % period), or none of these.
 * *period receives the cycle's length (the dense and scalar cases: the
 * iteration's size and 1). */
static inline int gpub_flat_layout(const GpuIter* it, int o, int64_t* period) {
  *period = 0;
  int64_t expect = 1;
  int d = it->rank - 1;
  for (; d >= 0; d--) { /* the dense innermost run */
    if (it->dims[d] == 1) continue;
    if (it->strides[o][d] != expect) break;
    expect *= it->dims[d];
  }
  const int64_t run = expect;
  for (; d >= 0; d--) { /* the rest: broadcast, or not a cycle */
    if (it->dims[d] != 1 && it->strides[o][d] != 0) return GPU_FLAT_NO;
    expect *= it->dims[d];
  }
  *period = run;
  return run == expect ? GPU_FLAT_DENSE : run == 1 ? GPU_FLAT_SCALAR : GPU_FLAT_CYCLE;
}

static inline int gpub_flat_operand(const GpuIter* it, int o) {
  int64_t period;
  return gpub_flat_layout(it, o, &period);
}

/* A binary op that needs no iteration space: a dense output, each input
 * dense, one value or a cycle, not both one value. */
static inline int gpub_flat_binary(const GpuIter* it) {
  int fa = gpub_flat_operand(it, 1), fb = gpub_flat_operand(it, 2);
  return gpub_flat_operand(it, 0) == GPU_FLAT_DENSE && fa != GPU_FLAT_NO && fb != GPU_FLAT_NO &&
         !(fa == GPU_FLAT_SCALAR && fb == GPU_FLAT_SCALAR);
}

/* The element of a flat operand that output element i reads. */
GPU_FN int64_t gpub_flat_index(int kind, int64_t i, int64_t period) {
  return kind == GPU_FLAT_SCALAR ? 0 : kind == GPU_FLAT_CYCLE ? i % period : i;
}

/* Source element of output element i of a Gather, or -1 (index out of
 * range: the output element is zero). `k` is the index value read for i. */
GPU_FN int64_t gpub_gather_source(int64_t i, int64_t k, int64_t axis_dim, int64_t inner,
                                  int64_t n_idx) {
  int64_t in = i % inner, o = i / (inner * n_idx);
  if (k < 0) k += axis_dim;
  if (k < 0 || k >= axis_dim) return -1;
  return (o * axis_dim + k) * inner + in;
}

/* Which index of the indices tensor output element i reads. */
GPU_FN int64_t gpub_gather_index(int64_t i, int64_t inner, int64_t n_idx) {
  return (i / inner) % n_idx;
}

#endif /* ONYX_GPU_KERNELS_BODY_H */
