/* gpu_grad_ops.c — the host side of the GPU training kernels: argument and
 * shape checks, attributes, and the launches of gpu_grad.h's kernels on the
 * EP's stream. Semantics are the CPU provider's (cpu_grad.c, cpu_optim.c;
 * docs/training.md); scalars that steer a launch (DropoutGrad's ratio, the
 * optimizers' lr and step) are declared ONYX_MEM_HOST_ACCESSIBLE and read
 * here. Also Sum (ai.onnx), which the gradient builder adds a fan-out's
 * gradients with. Compiled into both GPU providers and gpuemu. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_ep.h"
#include "gpu_grad.h"
#include "gpu_grad_ops.h"

#define H        gpu_host
#define TRAINING "com.onyx.training"

static const int32_t g_f32[1] = {ONYX_ELEM_FLOAT32};
static const int32_t g_f32_f64[2] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64};
/* DropoutGrad (dY, mask, ratio) and the optimizers (lr, step, tensors...):
 * the scalars in host memory, the rest on the device. */
static const int32_t g_mem_dropout[3] = {ONYX_MEM_DEFAULT, ONYX_MEM_DEFAULT,
                                         ONYX_MEM_HOST_ACCESSIBLE};
/* SoftmaxCrossEntropyLossGrad (dY, log_prob, label, weight): all but
 * log_prob on the host, where the labels are checked and the per-sample
 * coefficients computed. */
static const int32_t g_mem_sce[4] = {ONYX_MEM_HOST_ACCESSIBLE, ONYX_MEM_DEFAULT,
                                     ONYX_MEM_HOST_ACCESSIBLE, ONYX_MEM_HOST_ACCESSIBLE};
static const int32_t g_index[2] = {ONYX_ELEM_INT32, ONYX_ELEM_INT64};
/* GatherGrad (X_shape, indices, dY): the shape and the indices on the
 * host, where they are checked and the indices sorted. */
static const int32_t g_mem_gather[2] = {ONYX_MEM_HOST_ACCESSIBLE, ONYX_MEM_HOST_ACCESSIBLE};
/* MaxPoolGrad (dY, Indices, X_shape): Indices and X_shape on the host. */
static const int32_t g_mem_maxpool[3] = {ONYX_MEM_DEFAULT, ONYX_MEM_HOST_ACCESSIBLE,
                                         ONYX_MEM_HOST_ACCESSIBLE};
static const int32_t g_mem_optim[2] = {ONYX_MEM_HOST_ACCESSIBLE, ONYX_MEM_HOST_ACCESSIBLE};
/* ClipGradNorm's code (the optimizers' codes are GpuOptKind). */
enum { CODE_CLIP = 16 };

static bool same_shape(const OnyxTensor* a, const OnyxTensor* b) {
  const size_t r = H->tensor_rank(a);
  return r == H->tensor_rank(b) &&
         (!r || !memcmp(H->tensor_dims(a), H->tensor_dims(b), r * sizeof(int64_t)));
}

static bool on_host(const OnyxTensor* t) {
  return H->tensor_memory(t)->kind == ONYX_DEVICE_CPU;
}

/* A float32 / float64 scalar in host memory as a double. */
static OnyxStatus* host_scalar(const OnyxNode* n, const OnyxTensor* t, const char* what,
                               double* out) {
  const int32_t ty = t ? (int32_t)H->tensor_elem_type(t) : ONYX_ELEM_UNDEFINED;
  if (!t || H->tensor_elem_count(t) != 1 || (ty != ONYX_ELEM_FLOAT32 && ty != ONYX_ELEM_FLOAT64))
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "%s must be a float32 or float64 scalar", what);
  if (!on_host(t)) return gpu_node_error(n, ONYX_RUNTIME_ERROR, "%s is not in host memory", what);
  const void* d = H->tensor_data(t);
  *out = ty == ONYX_ELEM_FLOAT64 ? *(const double*)d : (double)*(const float*)d;
  return NULL;
}

/* ---------------------------------------------------------------------------------- */
/* Element-wise grads, SoftmaxGrad / LogSoftmaxGrad, DropoutGrad                      */
/* ---------------------------------------------------------------------------------- */

enum {
  CODE_SOFTMAX_GRAD = 100,
  CODE_LOG_SOFTMAX_GRAD,
  CODE_DROPOUT_GRAD,
  CODE_LN_GRAD,
  CODE_BN_GRAD,
  CODE_SCE_GRAD,
  CODE_GATHER_GRAD,
  CODE_MAXPOOL_GRAD
};

/* GatherGrad's (row, position) pairs, sorted by row then position. */
typedef struct GgPair {
  int64_t row, j;
} GgPair;

static int gg_cmp(const void* a, const void* b) {
  const GgPair *x = a, *y = b;
  if (x->row != y->row) return x->row < y->row ? -1 : 1;
  return x->j < y->j ? -1 : x->j > y->j;
}

/* Sorts the n (target, position) pairs and writes gpuk_gather_grad's
 * table (positions, group starts, group rows: 3 n + 1 values at most);
 * returns the group count. */
static int64_t gg_table(GgPair* pairs, size_t n, int64_t* table) {
  if (n) qsort(pairs, n, sizeof *pairs, gg_cmp);
  int64_t n_groups = 0;
  for (size_t q = 0; q < n; q++)
    if (!q || pairs[q].row != pairs[q - 1].row) n_groups++;
  int64_t *js = table, *gstart = table + n, *grow = gstart + n_groups + 1;
  for (size_t q = 0, g = 0; q < n; q++) {
    js[q] = pairs[q].j;
    if (!q || pairs[q].row != pairs[q - 1].row) {
      gstart[g] = (int64_t)q;
      grow[g++] = pairs[q].row;
    }
  }
  gstart[n_groups] = (int64_t)n;
  return n_groups;
}

/* dY and the second input (X or Y): float32 tensors of one shape. */
static OnyxStatus* two_inputs(GpuKernel* k, OnyxKernelContext* ctx, const char* second,
                              const OnyxTensor** dy, const OnyxTensor** x) {
  *dy = H->ctx_input(ctx, 0);
  *x = H->ctx_input(ctx, 1);
  if (!*dy || !*x || H->tensor_elem_type(*dy) != ONYX_ELEM_FLOAT32 ||
      H->tensor_elem_type(*x) != ONYX_ELEM_FLOAT32)
    return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "dY and %s must be float32 tensors",
                          second);
  if (!same_shape(*dy, *x))
    return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "dY and %s must have the same shape",
                          second);
  return NULL;
}

static OnyxStatus* grad_unary_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const GpuGradOp op = (GpuGradOp)k->op;
  const bool reads_y = op == GPU_GRAD_SIGMOID || op == GPU_GRAD_TANH;
  const OnyxTensor *dy, *x;
  st = two_inputs(k, ctx, reads_y ? "Y" : "X", &dy, &x);
  if (st) return st;
  OnyxTensor* dx;
  st = H->ctx_output(ctx, 0, H->tensor_dims(dy), H->tensor_rank(dy), &dx);
  if (st) return st;
  const int err = gpuk_grad_unary(op, H->tensor_data(dy), H->tensor_data(x),
                                  H->tensor_mutable_data(dx), (int64_t)H->tensor_elem_count(dy), s);
  return gpu_launch_status(k->node, err, "gradient kernel");
}

static OnyxStatus* softmax_grad_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxTensor *dy, *y;
  st = two_inputs(k, ctx, "Y", &dy, &y);
  if (st) return st;
  const size_t rank = H->tensor_rank(y);
  const int64_t* d = H->tensor_dims(y);
  const int64_t axis_attr = H->node_attr_int(k->node, "axis", -1), r = (int64_t)rank;
  if (rank == 0 || axis_attr < -r || axis_attr >= r)
    return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                          (long long)axis_attr, rank);
  const size_t axis = (size_t)(axis_attr < 0 ? axis_attr + r : axis_attr);
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < axis; i++)
    outer *= d[i];
  for (size_t i = axis + 1; i < rank; i++)
    inner *= d[i];
  OnyxTensor* dx;
  st = H->ctx_output(ctx, 0, d, rank, &dx);
  if (st) return st;
  const int err =
      gpuk_softmax_grad(H->tensor_data(dy), H->tensor_data(y), H->tensor_mutable_data(dx), outer,
                        d[axis], inner, k->op == CODE_LOG_SOFTMAX_GRAD, s);
  return gpu_launch_status(k->node, err, "softmax gradient kernel");
}

static OnyxStatus* dropout_grad_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxTensor* dy = H->ctx_input(ctx, 0);
  const OnyxTensor* mask = H->ctx_input(ctx, 1);
  const OnyxTensor* ratio = H->ctx_input_count(ctx) > 2 ? H->ctx_input(ctx, 2) : NULL;
  if (!dy || H->tensor_elem_type(dy) != ONYX_ELEM_FLOAT32)
    return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "dY must be a float32 tensor");
  if (!mask || H->tensor_elem_type(mask) != ONYX_ELEM_BOOL || !same_shape(dy, mask))
    return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "mask must be bool with dY's shape");
  double rv = 0.5;
  if (ratio) {
    st = host_scalar(k->node, ratio, "ratio", &rv);
    if (st) return st;
  }
  if (!(rv >= 0.0 && rv < 1.0))
    return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "ratio %g is outside [0, 1)", rv);
  OnyxTensor* dx;
  st = H->ctx_output(ctx, 0, H->tensor_dims(dy), H->tensor_rank(dy), &dx);
  if (st) return st;
  const int err =
      gpuk_dropout_grad(H->tensor_data(dy), H->tensor_data(mask), H->tensor_mutable_data(dx),
                        (int64_t)H->tensor_elem_count(dy), (float)(1.0 / (1.0 - rv)), s);
  return gpu_launch_status(k->node, err, "DropoutGrad kernel");
}

static OnyxStatus* batchnorm_grad_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  static const char* const names[] = {"dY", "X", "scale", "mean", "inv_std_var"};
  const size_t n_in = H->ctx_input_count(ctx);
  const OnyxTensor* in[5];
  for (size_t i = 0; i < 5; i++)
    in[i] = i < n_in ? H->ctx_input(ctx, i) : NULL;
  if (!in[0] || !in[1] || !in[2])
    return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "dY, X and scale are required");
  if (!in[3] != !in[4])
    return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT,
                          "mean and inv_std_var must be given together or both left out");
  const bool stats = in[3] != NULL;
  for (size_t i = 0; i < (stats ? 5u : 3u); i++)
    if (H->tensor_elem_type(in[i]) != ONYX_ELEM_FLOAT32)
      return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "%s must be a float32 tensor",
                            names[i]);
  if (!same_shape(in[0], in[1]))
    return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "dY and X must have the same shape");
  const size_t rank = H->tensor_rank(in[1]);
  const int64_t* d = H->tensor_dims(in[1]);
  if (rank < 2)
    return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "X must be (N, C, ...), not %zu-D", rank);
  const int64_t c = d[1];
  const double eps = H->node_attr_float(k->node, "epsilon", 1e-5f);
  if (!stats && !(eps >= 0.0))
    return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "epsilon is %g; it must be >= 0", eps);
  for (size_t i = 2; i < (stats ? 5u : 3u); i++)
    if (H->tensor_rank(in[i]) != 1 || (int64_t)H->tensor_elem_count(in[i]) != c)
      return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "%s must be 1-D with %lld (C) values",
                            names[i], (long long)c);
  OnyxTensor* dx;
  st = H->ctx_output(ctx, 0, d, rank, &dx);
  if (st) return st;
  float* outs[2] = {NULL, NULL};
  for (size_t o = 1; o <= 2; o++) {
    if (H->ctx_output_count(ctx) <= o || !H->node_output(k->node, o)) continue;
    OnyxTensor* t;
    st = H->ctx_output(ctx, o, H->tensor_dims(in[2]), H->tensor_rank(in[2]), &t);
    if (st) return st;
    outs[o - 1] = H->tensor_mutable_data(t);
  }
  int64_t sp = 1;
  for (size_t i = 2; i < rank; i++)
    sp *= d[i];
  const int err = gpuk_batchnorm_grad(
      H->tensor_data(in[0]), H->tensor_data(in[1]), H->tensor_data(in[2]),
      stats ? H->tensor_data(in[3]) : NULL, stats ? H->tensor_data(in[4]) : NULL,
      H->tensor_mutable_data(dx), outs[0], outs[1], d[0], c, sp, eps, s);
  return gpu_launch_status(k->node, err, "BatchNormalizationGrad kernel");
}

static OnyxStatus* sce_grad_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  const OnyxNode* node = k->node;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const size_t n_in = H->ctx_input_count(ctx);
  const OnyxTensor* dy = H->ctx_input(ctx, 0);
  const OnyxTensor* lp = n_in > 1 ? H->ctx_input(ctx, 1) : NULL;
  const OnyxTensor* label = n_in > 2 ? H->ctx_input(ctx, 2) : NULL;
  const OnyxTensor* weight = n_in > 3 ? H->ctx_input(ctx, 3) : NULL;
  if (!dy || !lp || !label)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "dY, log_prob and label are required");
  if (H->tensor_elem_type(dy) != ONYX_ELEM_FLOAT32 ||
      H->tensor_elem_type(lp) != ONYX_ELEM_FLOAT32 ||
      (weight && H->tensor_elem_type(weight) != ONYX_ELEM_FLOAT32))
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                          "dY, log_prob and weight must be float32 tensors");
  const int32_t lt = (int32_t)H->tensor_elem_type(label);
  if (lt != ONYX_ELEM_INT32 && lt != ONYX_ELEM_INT64)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "label must be int32 or int64");
  if (!on_host(dy) || !on_host(label) || (weight && !on_host(weight)))
    return gpu_node_error(node, ONYX_RUNTIME_ERROR, "dY, label and weight are not in host memory");
  size_t len = 0;
  const char* rs = H->node_attr_string(node, "reduction", &len);
  int red = 0; /* mean */
  if (rs && len == 3 && !memcmp(rs, "sum", 3))
    red = 1;
  else if (rs && len == 4 && !memcmp(rs, "none", 4))
    red = 2;
  else if (rs && len && !(len == 4 && !memcmp(rs, "mean", 4)))
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                          "reduction '%.*s' is not one of mean, sum, none", (int)len, rs);
  const bool has_ignore = H->node_attr_type(node, "ignore_index") != ONYX_ATTR_UNDEFINED;
  const int64_t ignore = H->node_attr_int(node, "ignore_index", 0);
  const size_t r = H->tensor_rank(lp), lr = H->tensor_rank(label);
  const int64_t* d = H->tensor_dims(lp);
  const int64_t* ld = H->tensor_dims(label);
  if (r < 2)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "log_prob must be (N, C, ...), not %zu-D",
                          r);
  bool ok = lr == r - 1 && ld[0] == d[0];
  for (size_t i = 1; ok && i < lr; i++)
    ok = ld[i] == d[i + 1];
  if (!ok)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                          "label must have log_prob's shape without its class axis 1");
  const int64_t c = d[1];
  int64_t inner = 1;
  for (size_t i = 2; i < r; i++)
    inner *= d[i];
  const size_t samples = H->tensor_elem_count(label);
  if (red == 2 ? !same_shape(dy, label) : H->tensor_elem_count(dy) != 1)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                          red == 2 ? "dY must have label's shape for reduction 'none'"
                                   : "dY must be a scalar for reduction 'mean' or 'sum'");
  if (weight && (H->tensor_rank(weight) != 1 || (int64_t)H->tensor_elem_count(weight) != c))
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "weight must be 1-D with %lld (C) values",
                          (long long)c);
  OnyxTensor* dx;
  st = H->ctx_output(ctx, 0, d, r, &dx);
  if (st) return st;
  if (!H->tensor_elem_count(lp)) return NULL;
  if (samples > SIZE_MAX / 16)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "label has too many elements");
  double* coef = H->ctx_scratch(ctx, samples * 16);
  if (!coef) return gpu_node_error(node, ONYX_OUT_OF_MEMORY, "out of memory (%zu labels)", samples);
  int64_t* lab = (int64_t*)(void*)(coef + samples);
  const void* lraw = H->tensor_data(label);
  const float* w = weight ? H->tensor_data(weight) : NULL;
  const float* dyd = H->tensor_data(dy);
  double w_sum = 0;
  for (size_t i = 0; i < samples; i++) {
    const int64_t v = lt == ONYX_ELEM_INT32 ? ((const int32_t*)lraw)[i] : ((const int64_t*)lraw)[i];
    lab[i] = v;
    if (has_ignore && v == ignore) {
      coef[i] = 0;
      continue;
    }
    if (v < 0 || v >= c)
      return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                            "label[%zu] = %lld is outside the class range [0, %lld)", i,
                            (long long)v, (long long)c);
    coef[i] = w ? (double)w[v] : 1.0;
    w_sum += coef[i];
  }
  const double g = red == 2 ? 0 : red == 1 ? dyd[0] : w_sum != 0 ? dyd[0] / w_sum : 0;
  for (size_t i = 0; i < samples; i++)
    coef[i] *= red == 2 ? (double)dyd[i] : g;
  const int err =
      gpuk_sce_grad(H->tensor_data(lp), H->tensor_mutable_data(dx), coef, d[0], c, inner, s);
  return gpu_launch_status(node, err, "SoftmaxCrossEntropyLossGrad kernel");
}

static OnyxStatus* gather_grad_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  const OnyxNode* node = k->node;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxTensor* shape = H->ctx_input(ctx, 0);
  const OnyxTensor* indices = H->ctx_input(ctx, 1);
  const OnyxTensor* dy = H->ctx_input(ctx, 2);
  if (!shape || !indices || !dy || H->tensor_elem_type(dy) != ONYX_ELEM_FLOAT32)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                          "X_shape, indices and a float32 dY are required");
  const int32_t it = (int32_t)H->tensor_elem_type(indices);
  if (H->tensor_elem_type(shape) != ONYX_ELEM_INT64 || H->tensor_rank(shape) != 1)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "X_shape must be a 1-D int64 tensor");
  if (it != ONYX_ELEM_INT32 && it != ONYX_ELEM_INT64)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "indices must be int32 or int64");
  if (!on_host(shape) || !on_host(indices))
    return gpu_node_error(node, ONYX_RUNTIME_ERROR, "X_shape and indices are not in host memory");
  const size_t xr = H->tensor_elem_count(shape);
  if (xr == 0 || xr > GPU_MAX_RANK)
    return gpu_node_error(node, ONYX_NOT_IMPLEMENTED, "X_shape has %zu values; 1 to %d supported",
                          xr, GPU_MAX_RANK);
  int64_t xd[GPU_MAX_RANK];
  memcpy(xd, H->tensor_data(shape), xr * sizeof *xd);
  for (size_t i = 0; i < xr; i++)
    if (xd[i] < 0)
      return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "X_shape[%zu] is %lld (negative)", i,
                            (long long)xd[i]);
  const int64_t axis_attr = H->node_attr_int(node, "axis", 0), xr64 = (int64_t)xr;
  if (axis_attr < -xr64 || axis_attr >= xr64)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                          (long long)axis_attr, xr);
  const size_t axis = (size_t)(axis_attr < 0 ? axis_attr + xr64 : axis_attr);
  const size_t ir = H->tensor_rank(indices), yr = H->tensor_rank(dy);
  const int64_t* id = H->tensor_dims(indices);
  const int64_t* yd = H->tensor_dims(dy);
  bool ok = yr == xr - 1 + ir;
  for (size_t i = 0; ok && i < yr; i++) {
    const int64_t want = i < axis ? xd[i] : i < axis + ir ? id[i - axis] : xd[i - ir + 1];
    ok = yd[i] == want;
  }
  if (!ok)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                          "dY's shape must be X_shape[:axis] + indices' shape + X_shape[axis+1:]");
  /* The element count of X_shape, checked: dY's count bounds it only when
   * no index is given. */
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < xr; i++) {
    int64_t* p = i < axis ? &outer : &inner;
    if (i == axis) continue;
    if (xd[i] && *p > INT64_MAX / xd[i])
      return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "X_shape's element count overflows");
    *p *= xd[i];
  }
  const int64_t axis_len = xd[axis];
  if (outer && inner && axis_len > INT64_MAX / outer / inner)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "X_shape's element count overflows");
  OnyxTensor* dx;
  st = H->ctx_output(ctx, 0, xd, xr, &dx);
  if (st) return st;
  const size_t n_idx = H->tensor_elem_count(indices);
  if (n_idx > SIZE_MAX / 64)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "indices has too many elements");
  /* The pairs, then the table: positions, group starts, group rows. */
  GgPair* pairs = H->ctx_scratch(ctx, (n_idx ? n_idx : 1) * sizeof *pairs);
  int64_t* table = H->ctx_scratch(ctx, (3 * n_idx + 1) * sizeof *table);
  if (!pairs || !table)
    return gpu_node_error(node, ONYX_OUT_OF_MEMORY, "out of memory (%zu indices)", n_idx);
  const void* iraw = H->tensor_data(indices);
  for (size_t q = 0; q < n_idx; q++) {
    int64_t v = it == ONYX_ELEM_INT32 ? ((const int32_t*)iraw)[q] : ((const int64_t*)iraw)[q];
    const int64_t orig = v;
    if (v < 0) v += axis_len;
    if (v < 0 || v >= axis_len)
      return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                            "indices[%zu] = %lld is out of range for axis %zu of size %lld", q,
                            (long long)orig, axis, (long long)axis_len);
    pairs[q] = (GgPair){v, (int64_t)q};
  }
  const int64_t n_groups = gg_table(pairs, n_idx, table);
  const int err = gpuk_gather_grad(H->tensor_data(dy), H->tensor_mutable_data(dx), table,
                                   (int64_t)n_idx, n_groups, outer, axis_len, inner, s);
  return gpu_launch_status(node, err, "GatherGrad kernel");
}

/* MaxPoolGrad: dX[Indices[i]] += dY[i], a GatherGrad over the flat X with
 * one row per element (the indices checked and sorted on the host; each dX
 * element adds its dY values in the order of i, as the CPU provider). */
static OnyxStatus* maxpool_grad_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  const OnyxNode* node = k->node;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxTensor* dy = H->ctx_input(ctx, 0);
  const OnyxTensor* ind = H->ctx_input(ctx, 1);
  const OnyxTensor* shape = H->ctx_input(ctx, 2);
  if (!dy || !ind || !shape || H->tensor_elem_type(dy) != ONYX_ELEM_FLOAT32)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                          "a float32 dY, Indices and X_shape are required");
  if (H->node_attr_int(node, "storage_order", 0) != 0)
    return gpu_node_error(node, ONYX_NOT_IMPLEMENTED,
                          "storage_order 1 (column-major Indices) is not supported");
  if (H->tensor_elem_type(ind) != ONYX_ELEM_INT64 || !same_shape(ind, dy))
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "Indices must be int64 with dY's shape");
  const size_t xr = H->tensor_elem_count(shape);
  if (H->tensor_elem_type(shape) != ONYX_ELEM_INT64 || H->tensor_rank(shape) != 1 || xr < 3 ||
      xr > 5)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                          "X_shape must be 1-D with 3 to 5 values (N, C, spatial...)");
  if (!on_host(ind) || !on_host(shape))
    return gpu_node_error(node, ONYX_RUNTIME_ERROR, "Indices and X_shape are not in host memory");
  int64_t xd[5], xc = 1;
  memcpy(xd, H->tensor_data(shape), xr * sizeof *xd);
  for (size_t i = 0; i < xr; i++) {
    if (xd[i] < 0)
      return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "X_shape[%zu] is %lld (negative)", i,
                            (long long)xd[i]);
    if (xd[i] && xc > INT64_MAX / xd[i])
      return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "X_shape's element count overflows");
    xc *= xd[i];
  }
  OnyxTensor* dx;
  st = H->ctx_output(ctx, 0, xd, xr, &dx);
  if (st) return st;
  const size_t n = H->tensor_elem_count(dy);
  if (n > SIZE_MAX / 64)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "dY has too many elements");
  GgPair* pairs = H->ctx_scratch(ctx, (n ? n : 1) * sizeof *pairs);
  int64_t* table = H->ctx_scratch(ctx, (3 * n + 1) * sizeof *table);
  if (!pairs || !table)
    return gpu_node_error(node, ONYX_OUT_OF_MEMORY, "out of memory (%zu indices)", n);
  const int64_t* idx = H->tensor_data(ind);
  for (size_t i = 0; i < n; i++) {
    if (idx[i] < 0 || idx[i] >= xc)
      return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                            "Indices[%zu] = %lld is outside X's %lld elements", i,
                            (long long)idx[i], (long long)xc);
    pairs[i] = (GgPair){idx[i], (int64_t)i};
  }
  const int64_t n_groups = gg_table(pairs, n, table);
  const int err = gpuk_gather_grad(H->tensor_data(dy), H->tensor_mutable_data(dx), table,
                                   (int64_t)n, n_groups, 1, xc, 1, s);
  return gpu_launch_status(node, err, "MaxPoolGrad kernel");
}

static OnyxStatus* layernorm_grad_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  static const char* const names[] = {"dY", "X", "scale", "mean", "inv_std_var"};
  const OnyxTensor* in[5];
  for (size_t i = 0; i < 5; i++) {
    in[i] = i < H->ctx_input_count(ctx) ? H->ctx_input(ctx, i) : NULL;
    if (!in[i] || H->tensor_elem_type(in[i]) != ONYX_ELEM_FLOAT32)
      return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "%s must be a float32 tensor",
                            names[i]);
  }
  if (!same_shape(in[0], in[1]))
    return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "dY and X must have the same shape");
  const size_t rank = H->tensor_rank(in[1]);
  const int64_t* d = H->tensor_dims(in[1]);
  const int64_t axis_attr = H->node_attr_int(k->node, "axis", -1), r = (int64_t)rank;
  if (rank == 0 || axis_attr < -r || axis_attr >= r)
    return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                          (long long)axis_attr, rank);
  const size_t axis = (size_t)(axis_attr < 0 ? axis_attr + r : axis_attr);
  int64_t rows = 1, width = 1;
  for (size_t i = 0; i < rank; i++)
    *(i < axis ? &rows : &width) *= d[i];
  if ((int64_t)H->tensor_elem_count(in[2]) != width)
    return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT,
                          "scale must hold %lld values (X's dims from axis %zu on)",
                          (long long)width, axis);
  for (size_t i = 3; i < 5; i++)
    if ((int64_t)H->tensor_elem_count(in[i]) != rows)
      return gpu_node_error(k->node, ONYX_INVALID_ARGUMENT,
                            "%s must hold %lld values (X's dims before axis %zu)", names[i],
                            (long long)rows, axis);
  OnyxTensor* dx;
  st = H->ctx_output(ctx, 0, d, rank, &dx);
  if (st) return st;
  float* outs[2] = {NULL, NULL};
  for (size_t o = 1; o <= 2; o++) {
    if (H->ctx_output_count(ctx) <= o || !H->node_output(k->node, o)) continue;
    OnyxTensor* t;
    st = H->ctx_output(ctx, o, H->tensor_dims(in[2]), H->tensor_rank(in[2]), &t);
    if (st) return st;
    outs[o - 1] = H->tensor_mutable_data(t);
  }
  const int err = gpuk_layernorm_grad(
      H->tensor_data(in[0]), H->tensor_data(in[1]), H->tensor_data(in[2]), H->tensor_data(in[3]),
      H->tensor_data(in[4]), H->tensor_mutable_data(dx), outs[0], outs[1], rows, width, s);
  return gpu_launch_status(k->node, err, "LayerNormalizationGrad kernel");
}

/* ---------------------------------------------------------------------------------- */
/* Sum: what the gradient builder adds a fan-out's gradients with                     */
/* ---------------------------------------------------------------------------------- */

/* Dense strides of dims, and each input's strides over the output's dims
 * (0 where broadcast; numpy rules, inputs aligned at the last dim). */
static void dense(const int64_t* dims, size_t rank, int64_t* st) {
  int64_t v = 1;
  for (size_t d = rank; d-- > 0;) {
    st[d] = v;
    v *= dims[d];
  }
}

static void input_strides(const OnyxTensor* t, size_t rank, int64_t* st) {
  const size_t ri = H->tensor_rank(t);
  const int64_t* di = H->tensor_dims(t);
  int64_t own[GPU_MAX_RANK];
  dense(di, ri, own);
  for (size_t d = 0; d < rank; d++)
    st[d] = d < rank - ri || di[d - (rank - ri)] == 1 ? 0 : own[d - (rank - ri)];
}

/* Sum(X_1..X_n) -> Y with broadcasting: Y = X_1 + X_2, then Y += X_i in
 * input order (the CPU provider's order of additions), float32. */
static OnyxStatus* sum_compute(void* state, OnyxKernelContext* ctx) {
  GpuKernel* k = state;
  const OnyxNode* node = k->node;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const size_t n = H->ctx_input_count(ctx);
  if (!n) return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "needs at least one input");
  size_t rank = 0;
  for (size_t i = 0; i < n; i++) {
    const OnyxTensor* t = H->ctx_input(ctx, i);
    if (!t || H->tensor_elem_type(t) != ONYX_ELEM_FLOAT32)
      return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "input %zu must be a float32 tensor", i);
    if (H->tensor_rank(t) > GPU_MAX_RANK)
      return gpu_node_error(node, ONYX_NOT_IMPLEMENTED, "input %zu has rank %zu; %d supported", i,
                            H->tensor_rank(t), GPU_MAX_RANK);
    if (H->tensor_rank(t) > rank) rank = H->tensor_rank(t);
  }
  int64_t dims[GPU_MAX_RANK];
  for (size_t d = 0; d < rank; d++)
    dims[d] = 1;
  for (size_t i = 0; i < n; i++) {
    const OnyxTensor* t = H->ctx_input(ctx, i);
    const size_t ri = H->tensor_rank(t);
    for (size_t d = 0; d < ri; d++) {
      const int64_t v = H->tensor_dims(t)[d];
      int64_t* o = &dims[rank - ri + d];
      if (v == *o || v == 1) continue;
      if (*o != 1)
        return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                              "input %zu dim %zu is %lld, which does not broadcast with %lld", i, d,
                              (long long)v, (long long)*o);
      *o = v;
    }
  }
  OnyxTensor* y;
  st = H->ctx_output(ctx, 0, dims, rank, &y);
  if (st) return st;
  if (!H->tensor_elem_count(y)) return NULL;
  GpuIter it = {.rank = (int32_t)rank};
  memcpy(it.dims, dims, rank * sizeof *dims);
  dense(dims, rank, it.strides[0]);
  float* out = H->tensor_mutable_data(y);
  int err;
  if (n == 1) {
    input_strides(H->ctx_input(ctx, 0), rank, it.strides[1]);
    err = gpuk_copy(H->tensor_data(H->ctx_input(ctx, 0)), out, &it, (int)sizeof(float), s);
    return gpu_launch_status(node, err, "Sum copy");
  }
  input_strides(H->ctx_input(ctx, 0), rank, it.strides[1]);
  input_strides(H->ctx_input(ctx, 1), rank, it.strides[2]);
  err = gpuk_binary(GPU_ADD, H->tensor_data(H->ctx_input(ctx, 0)),
                    H->tensor_data(H->ctx_input(ctx, 1)), out, &it, s);
  /* Y += X_i: operand 1 is Y itself (dense), read and written at one index
   * by one thread. */
  memcpy(it.strides[1], it.strides[0], sizeof it.strides[0]);
  for (size_t i = 2; !err && i < n; i++) {
    input_strides(H->ctx_input(ctx, i), rank, it.strides[2]);
    err = gpuk_binary(GPU_ADD, out, H->tensor_data(H->ctx_input(ctx, i)), out, &it, s);
  }
  return gpu_launch_status(node, err, "Sum kernel");
}

/* ---------------------------------------------------------------------------------- */
/* The fused optimizers                                                               */
/* ---------------------------------------------------------------------------------- */

/* Kernel state of an optimizer: the shared GpuKernel first (released by
 * gpu_kernel_release's free) and the validated attributes. */
typedef struct GpuOptKernel {
  GpuKernel k;
  size_t n; /* tensors per group */
  double momentum, dampening, wd, beta1, beta2, eps;
  bool nesterov;
} GpuOptKernel;

static OnyxStatus* opt_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  GpuOptKernel* o = calloc(1, sizeof *o);
  if (!o) return gpu_node_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  o->k.ep = gpu_ep(ep);
  o->k.node = node;
  o->k.op = (int32_t)(intptr_t)user;
  o->k.since = H->node_since_version(node);
  const int64_t n = H->node_attr_int(node, "n", -1);
  const char* bad = NULL;
  if (n < 1 || (uint64_t)n > SIZE_MAX / 64) bad = "attribute n must be at least 1";
  o->n = n < 1 ? 0 : (size_t)n;
  if (o->k.op == GPU_OPT_SGD) {
    o->momentum = H->node_attr_float(node, "momentum", 0.0f);
    o->dampening = H->node_attr_float(node, "dampening", 0.0f);
    o->wd = H->node_attr_float(node, "weight_decay", 0.0f);
    const int64_t nest = H->node_attr_int(node, "nesterov", 0);
    o->nesterov = nest != 0;
    if (!(o->momentum >= 0)) bad = "momentum must be >= 0";
    if (!isfinite(o->dampening)) bad = "dampening must be finite";
    if (nest != 0 && nest != 1) bad = "nesterov must be 0 or 1";
    if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
      bad = "nesterov needs momentum > 0 and dampening 0";
  } else if (o->k.op == GPU_OPT_ADAMW || o->k.op == GPU_OPT_LAMB) {
    const bool lamb = o->k.op == GPU_OPT_LAMB;
    o->beta1 = H->node_attr_float(node, "beta1", 0.9f);
    o->beta2 = H->node_attr_float(node, "beta2", 0.999f);
    o->eps = H->node_attr_float(node, "epsilon", lamb ? 1e-6f : 1e-8f);
    o->wd = H->node_attr_float(node, "weight_decay", lamb ? 0.0f : 0.01f);
    if (!(o->beta1 >= 0 && o->beta1 < 1)) bad = "beta1 must be in [0, 1)";
    if (!(o->beta2 >= 0 && o->beta2 < 1)) bad = "beta2 must be in [0, 1)";
    if (!(o->eps >= 0) || !isfinite(o->eps)) bad = "epsilon must be finite and >= 0";
  }
  if (!(o->wd >= 0) || !isfinite(o->wd)) bad = "weight_decay must be finite and >= 0";
  if (bad) {
    free(o);
    return gpu_node_error(node, ONYX_INVALID_MODEL, "%s", bad);
  }
  *state = o;
  return NULL;
}

static OnyxStatus* opt_compute(void* state, OnyxKernelContext* ctx) {
  GpuOptKernel* o = state;
  const OnyxNode* node = o->k.node;
  static const char* const names[] = {"P", "G", "M", "V"};
  void* s;
  OnyxStatus* st = gpu_kernel_begin(&o->k, ctx, &s);
  if (st) return st;
  const bool sgd = o->k.op == GPU_OPT_SGD;
  const size_t groups = sgd ? (o->momentum != 0 ? 3 : 2) : 4, out_groups = groups - 1, n = o->n;
  const size_t n_in = H->ctx_input_count(ctx);
  if (n_in != 2 + groups * n)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                          "has %zu inputs; n = %zu needs %zu (2 scalars and %zu groups of n)", n_in,
                          n, 2 + groups * n, groups);
  if (H->ctx_output_count(ctx) > out_groups * n)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "has %zu outputs; n = %zu allows %zu",
                          H->ctx_output_count(ctx), n, out_groups * n);
  double lr = 0;
  st = host_scalar(node, H->ctx_input(ctx, 0), "lr", &lr);
  if (st) return st;
  if (!(lr >= 0) || !isfinite(lr))
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "lr is %g; it must be finite and >= 0", lr);
  const OnyxTensor* T = H->ctx_input(ctx, 1);
  if (!T || H->tensor_elem_type(T) != ONYX_ELEM_INT64 || H->tensor_elem_count(T) != 1)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "step must be an int64 scalar");
  if (!on_host(T)) return gpu_node_error(node, ONYX_RUNTIME_ERROR, "step is not in host memory");
  const int64_t step = *(const int64_t*)H->tensor_data(T);
  if (step < 0 || step == INT64_MAX)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                          "step is %lld; it must be in [0, 2^63 - 1) (the steps already taken)",
                          (long long)step);
  /* Host tables from the context's scratch: 4 input and 3 output groups of
   * n pointers, then n counts. */
  const size_t bytes = n * (7 * sizeof(void*) + sizeof(int64_t));
  unsigned char* mem = H->ctx_scratch(ctx, bytes);
  if (!mem) return gpu_node_error(node, ONYX_OUT_OF_MEMORY, "out of memory (%zu tables)", n);
  memset(mem, 0, bytes);
  const float** in[4] = {NULL};
  float** out[3] = {NULL};
  for (size_t g = 0; g < groups; g++)
    in[g] = (const float**)(void*)(mem + g * n * sizeof(void*));
  for (size_t g = 0; g < out_groups; g++)
    out[g] = (float**)(void*)(mem + (4 + g) * n * sizeof(void*));
  int64_t* count = (int64_t*)(void*)(mem + 7 * n * sizeof(void*));
  for (size_t t = 0; t < n; t++) {
    const OnyxTensor* P = H->ctx_input(ctx, 2 + t);
    if (!P || H->tensor_elem_type(P) != ONYX_ELEM_FLOAT32)
      return gpu_node_error(node, ONYX_NOT_IMPLEMENTED,
                            "P_%zu must be a float32 tensor (the GPU kernels are float32 only)",
                            t + 1);
    for (size_t g = 0; g < groups; g++) {
      const OnyxTensor* X = H->ctx_input(ctx, 2 + g * n + t);
      if (!X || H->tensor_elem_type(X) != ONYX_ELEM_FLOAT32)
        return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                              "%s_%zu must be a float32 tensor like P_1", names[g], t + 1);
      if (!same_shape(X, P))
        return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "%s_%zu must have P_%zu's shape",
                              names[g], t + 1, t + 1);
      in[g][t] = H->tensor_data(X);
    }
    for (size_t g = 0; g < out_groups; g++) {
      const size_t i = g * n + t;
      if (i >= H->ctx_output_count(ctx) || !H->node_output(node, i)) continue;
      OnyxTensor* Y;
      st = H->ctx_output(ctx, i, H->tensor_dims(P), H->tensor_rank(P), &Y);
      if (st) return st;
      out[g][t] = H->tensor_mutable_data(Y);
    }
    count[t] = (int64_t)H->tensor_elem_count(P);
  }
  /* Per-step scalars in float64 (as PyTorch's Python floats), then rounded
   * to float as the CPU provider's float32 kernels use them. */
  const double t1 = (double)step + 1.0;
  GpuOptParams q = {.kind = o->k.op, .lr = (float)lr, .wd = (float)o->wd};
  if (sgd) {
    q.has_m = groups == 3;
    q.first = step == 0;
    q.nesterov = o->nesterov;
    q.use_wd = o->wd != 0;
    q.momentum = (float)o->momentum;
    q.damp1 = (float)(1.0 - o->dampening);
  } else {
    const double bc1 = 1.0 - pow(o->beta1, t1), bc2 = 1.0 - pow(o->beta2, t1);
    q.decay = (float)(1.0 - lr * o->wd);
    q.w1 = (float)(1.0 - o->beta1);
    q.b2 = (float)o->beta2;
    q.w2 = (float)(1.0 - o->beta2);
    q.bc2s = (float)sqrt(bc2);
    q.eps = (float)o->eps;
    q.neg_step = (float)-(lr / bc1);
    q.b1 = (float)o->beta1;
    q.ibc1 = (float)(1.0 / bc1);
    q.ibc2 = (float)(1.0 / bc2);
    q.lr64 = lr;
  }
  const int err =
      o->k.op == GPU_OPT_LAMB
          ? gpuk_lamb(&q, n, count, (const float* const* const*)in, (float* const* const*)out, s)
          : gpuk_optimizer(&q, n, count, (const float* const* const*)in, (float* const* const*)out,
                           s);
  return gpu_launch_status(node, err, "optimizer kernel");
}

/* ClipGradNorm(max_norm, G_1..G_n) -> G'_1..G'_n, total_norm. */
static OnyxStatus* clip_compute(void* state, OnyxKernelContext* ctx) {
  GpuOptKernel* o = state;
  const OnyxNode* node = o->k.node;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(&o->k, ctx, &s);
  if (st) return st;
  const size_t n = o->n, n_in = H->ctx_input_count(ctx), n_out = H->ctx_output_count(ctx);
  if (n_in != 1 + n)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "has %zu inputs; n = %zu needs %zu", n_in, n,
                          1 + n);
  if (n_out > n + 1)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "has %zu outputs; n = %zu allows %zu", n_out,
                          n, n + 1);
  double max_norm = 0;
  st = host_scalar(node, H->ctx_input(ctx, 0), "max_norm", &max_norm);
  if (st) return st;
  /* +inf: no clipping (coef = inf >= 1), as on the CPU provider. */
  if (!(max_norm >= 0))
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                          "max_norm is %g; it must be a number (+inf: no clipping) and >= 0",
                          max_norm);
  const size_t bytes = n * (2 * sizeof(void*) + sizeof(int64_t));
  unsigned char* mem = H->ctx_scratch(ctx, bytes);
  if (!mem) return gpu_node_error(node, ONYX_OUT_OF_MEMORY, "out of memory (%zu tables)", n);
  memset(mem, 0, bytes);
  const float** g = (const float**)(void*)mem;
  float** out = (float**)(void*)(mem + n * sizeof(void*));
  int64_t* count = (int64_t*)(void*)(mem + 2 * n * sizeof(void*));
  for (size_t t = 0; t < n; t++) {
    const OnyxTensor* G = H->ctx_input(ctx, 1 + t);
    if (!G || H->tensor_elem_type(G) != ONYX_ELEM_FLOAT32)
      return gpu_node_error(node, ONYX_NOT_IMPLEMENTED,
                            "G_%zu must be a float32 tensor (the GPU kernels are float32 only)",
                            t + 1);
    g[t] = H->tensor_data(G);
    count[t] = (int64_t)H->tensor_elem_count(G);
    if (t >= n_out || !H->node_output(node, t)) continue;
    OnyxTensor* Y;
    st = H->ctx_output(ctx, t, H->tensor_dims(G), H->tensor_rank(G), &Y);
    if (st) return st;
    out[t] = H->tensor_mutable_data(Y);
  }
  float* total = NULL;
  if (n_out > n && H->node_output(node, n)) {
    OnyxTensor* T;
    st = H->ctx_output(ctx, n, NULL, 0, &T);
    if (st) return st;
    total = H->tensor_mutable_data(T);
  }
  const int err =
      gpuk_clip_grad_norm(n, count, (const float* const*)g, (float* const*)out, max_norm, total, s);
  return gpu_launch_status(node, err, "ClipGradNorm kernels");
}

/* ---------------------------------------------------------------------------------- */
/* Registration                                                                       */
/* ---------------------------------------------------------------------------------- */

static OnyxStatus* reg(OnyxKernelRegistry* r, const char* op, const OnyxTypeConstraint* tc,
                       size_t n_tc, const int32_t* mem, size_t n_mem,
                       OnyxStatus* (*create)(OnyxEp*, const OnyxNode*, void*, void**),
                       OnyxStatus* (*compute)(void*, OnyxKernelContext*), int32_t code) {
  OnyxKernelDef d = {.struct_size = sizeof d,
                     .domain = TRAINING,
                     .op_type = op,
                     .since_version = 1,
                     .end_version = ONYX_OPSET_LATEST,
                     .type_constraints = tc,
                     .type_constraint_count = n_tc,
                     .input_mem_types = mem,
                     .input_mem_type_count = n_mem,
                     .create = create ? create : gpu_kernel_create,
                     .compute = compute,
                     .release = gpu_kernel_release,
                     .user_data = (void*)(intptr_t)code};
  return H->register_kernel(r, &d);
}

#define TC(name, arr)                                                                              \
  { name, arr, sizeof arr / sizeof arr[0] }

OnyxStatus* gpu_register_grad_kernels(OnyxKernelRegistry* r) {
  const OnyxTypeConstraint tf[] = {TC("T", g_f32)};
  const OnyxTypeConstraint tdrop[] = {TC("T", g_f32), TC("T1", g_f32_f64)};
  const OnyxTypeConstraint tsce[] = {TC("T", g_f32), TC("Tind", g_index)};
  const OnyxTypeConstraint topt[] = {TC("T1", g_f32_f64), TC("T", g_f32)};
  static const struct {
    const char* op;
    int32_t code;
  } ew[] = {{"ReluGrad", GPU_GRAD_RELU},
            {"SigmoidGrad", GPU_GRAD_SIGMOID},
            {"TanhGrad", GPU_GRAD_TANH},
            {"GeluGrad", GPU_GRAD_GELU},
            {"FastGeluGrad", GPU_GRAD_FAST_GELU}};
  OnyxStatus* st = NULL;
  for (size_t i = 0; !st && i < sizeof ew / sizeof ew[0]; i++)
    st = reg(r, ew[i].op, tf, 1, NULL, 0, NULL, grad_unary_compute, ew[i].code);
  if (!st)
    st = reg(r, "SoftmaxGrad", tf, 1, NULL, 0, NULL, softmax_grad_compute, CODE_SOFTMAX_GRAD);
  if (!st)
    st =
        reg(r, "LogSoftmaxGrad", tf, 1, NULL, 0, NULL, softmax_grad_compute, CODE_LOG_SOFTMAX_GRAD);
  if (!st)
    st = reg(r, "LayerNormalizationGrad", tf, 1, NULL, 0, NULL, layernorm_grad_compute,
             CODE_LN_GRAD);
  if (!st)
    st = reg(r, "SoftmaxCrossEntropyLossGrad", tsce, 2, g_mem_sce, 4, NULL, sce_grad_compute,
             CODE_SCE_GRAD);
  if (!st)
    st =
        reg(r, "GatherGrad", tsce, 2, g_mem_gather, 2, NULL, gather_grad_compute, CODE_GATHER_GRAD);
  if (!st)
    st = reg(r, "MaxPoolGrad", tf, 1, g_mem_maxpool, 3, NULL, maxpool_grad_compute,
             CODE_MAXPOOL_GRAD);
  if (!st)
    st = reg(r, "BatchNormalizationGrad", tf, 1, NULL, 0, NULL, batchnorm_grad_compute,
             CODE_BN_GRAD);
  if (!st)
    st = reg(r, "DropoutGrad", tdrop, 2, g_mem_dropout, 3, NULL, dropout_grad_compute,
             CODE_DROPOUT_GRAD);
  if (!st)
    st = reg(r, "SGDOptimizer", topt, 2, g_mem_optim, 2, opt_create, opt_compute, GPU_OPT_SGD);
  if (!st)
    st = reg(r, "AdamWOptimizer", topt, 2, g_mem_optim, 2, opt_create, opt_compute, GPU_OPT_ADAMW);
  if (!st)
    st = reg(r, "LambOptimizer", topt, 2, g_mem_optim, 2, opt_create, opt_compute, GPU_OPT_LAMB);
  if (!st)
    st = reg(r, "ClipGradNorm", topt, 2, g_mem_optim, 1, opt_create, clip_compute, CODE_CLIP);
  if (!st) st = gpu_register(r, "Sum", 6, ONYX_OPSET_LATEST, tf, 1, NULL, 0, NULL, sum_compute, 0);
  if (!st) st = gpu_register_norm_pool_kernels(r); /* the training graph's forward ops */
  return st;
}
