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

#include "gpu_kernels.h"

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
#define GPU_FN static __device__ inline
#else
#define GPU_FN static inline
#endif

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

/* Softmax of row r of [outer, axis, inner] (r = o * inner + i). */
GPU_FN void gpub_softmax_row(const float* x, float* y, int64_t r, int64_t axis, int64_t inner,
                             int log_softmax) {
  int64_t o = r / inner, in = r % inner;
  const float* xp = x + o * axis * inner + in;
  float* yp = y + o * axis * inner + in;
  float mx = -INFINITY;
  for (int64_t j = 0; j < axis; j++)
    mx = fmaxf(mx, xp[j * inner]);
  /* One thread sums the whole axis: in double, so that a long axis keeps
   * float precision (a float running sum drifts by ~1e-4 over 5000 terms). */
  double acc = 0.0;
  for (int64_t j = 0; j < axis; j++)
    acc += expf(xp[j * inner] - mx);
  const float sum = (float)acc;
  if (log_softmax) {
    float ls = logf(sum);
    for (int64_t j = 0; j < axis; j++)
      yp[j * inner] = xp[j * inner] - mx - ls;
  } else {
    for (int64_t j = 0; j < axis; j++)
      yp[j * inner] = expf(xp[j * inner] - mx) / sum;
  }
}

GPU_FN void gpub_layernorm_row(const float* x, const float* scale, const float* bias, float* y,
                               float* mean_out, float* inv_std_out, int64_t r, int64_t cols,
                               float epsilon) {
  const float* xp = x + r * cols;
  float* yp = y + r * cols;
  double mean = 0.0, var = 0.0;
  for (int64_t j = 0; j < cols; j++)
    mean += xp[j];
  mean /= (double)cols;
  for (int64_t j = 0; j < cols; j++) {
    double d = xp[j] - mean;
    var += d * d;
  }
  var /= (double)cols;
  float inv = (float)(1.0 / sqrt(var + (double)epsilon));
  for (int64_t j = 0; j < cols; j++) {
    float v = (float)(xp[j] - mean) * inv * scale[j];
    yp[j] = bias ? v + bias[j] : v;
  }
  if (mean_out) mean_out[r] = (float)mean;
  if (inv_std_out) inv_std_out[r] = inv;
}

/* Output element o of a reduction. */
GPU_FN float gpub_reduce_one(int op, const float* x, int64_t o, int64_t n_red, const GpuReduce* r) {
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
    float v = x[off];
    acc = op == GPU_REDUCE_MAX ? fmaxf(acc, v) : op == GPU_REDUCE_MIN ? fminf(acc, v) : acc + v;
  }
  if (op == GPU_REDUCE_MEAN) acc = n_red ? acc / (float)n_red : NAN;
  return acc;
}

/* A reduction over the middle dim of [outer, n_red, inner]: output r = o *
 * inner + i, whose elements are n_red apart by inner. */
GPU_FN float gpub_reduce_strided_one(int op, const float* x, int64_t r, int64_t n_red,
                                     int64_t inner) {
  const float* xp = x + (r / inner) * n_red * inner + r % inner;
  float acc = op == GPU_REDUCE_MAX ? -INFINITY : op == GPU_REDUCE_MIN ? INFINITY : 0.0f;
  for (int64_t j = 0; j < n_red; j++) {
    float v = xp[j * inner];
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
