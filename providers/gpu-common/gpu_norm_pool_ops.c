/* gpu_norm_pool_ops.c — the host side of the forward ops a training graph
 * needs besides the gradient ops: BatchNormalization (inference and
 * training mode: batch statistics and the running mean / var outputs) and
 * MaxPool with its optional Indices output (what MaxPoolGrad consumes).
 * Semantics are the CPU provider's (cpu_norm.c, cpu_pool.c and
 * cpu_nn_common.c's window geometry); the kernels are gpu_grad.h's
 * gpuk_batchnorm_fwd and gpuk_maxpool.
 *
 * The ROCm provider and gpuemu register these kernels (they have no DNN
 * library ops). The CUDA provider keeps cuDNN's BatchNormalization and
 * MaxPool kernels (built with ONYX_GPU_VENDOR_NORM_POOL) and calls
 * gpu_batchnorm_compute / gpu_maxpool_compute for what cuDNN does not do:
 * training mode, the Indices output, and the windows cuDNN's legacy pooling
 * cannot express (cuda_dnn.c). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "gpu_ep.h"
#include "gpu_grad.h"
#include "gpu_grad_ops.h"

#define H gpu_host

static bool wants_output(const OnyxNode* n, OnyxKernelContext* ctx, size_t i) {
  return H->ctx_output_count(ctx) > i && H->node_output(n, i);
}

/* --- BatchNormalization ------------------------------------------------------------ */

bool gpu_batchnorm_training(const OnyxNode* n) {
  return H->node_since_version(n) >= 14 && H->node_attr_int(n, "training_mode", 0) != 0;
}

OnyxStatus* gpu_batchnorm_compute(GpuKernel* k, OnyxKernelContext* ctx) {
  static const char* const names[] = {"X", "scale", "B", "input_mean", "input_var"};
  const OnyxNode* node = k->node;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const bool train = gpu_batchnorm_training(node);
  const bool stats_out = wants_output(node, ctx, 1) || wants_output(node, ctx, 2);
  if (!train && (stats_out || wants_output(node, ctx, 3) || wants_output(node, ctx, 4)))
    return gpu_node_error(node, ONYX_NOT_IMPLEMENTED,
                          "the statistics outputs need training_mode 1 (opset 14 and later)");
  const OnyxTensor* in[5];
  for (size_t i = 0; i < 5; i++) {
    in[i] = i < H->ctx_input_count(ctx) ? H->ctx_input(ctx, i) : NULL;
    if (!in[i] || H->tensor_elem_type(in[i]) != ONYX_ELEM_FLOAT32)
      return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "%s must be a float32 tensor", names[i]);
  }
  const size_t r = H->tensor_rank(in[0]);
  const int64_t* d = H->tensor_dims(in[0]);
  if (r < 2 || r > GPU_MAX_RANK)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "X has rank %zu; 2 to %d supported", r,
                          GPU_MAX_RANK);
  /* X's element count is bounded by its allocation, so sp's product of
   * its dims cannot overflow. */
  int64_t sp = 1;
  for (size_t i = 2; i < r; i++)
    sp *= d[i];
  const int64_t c = d[1];
  for (size_t i = 1; i < 5; i++)
    if ((int64_t)H->tensor_elem_count(in[i]) != c)
      return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                            "%s must hold one value per channel (%lld), not %zu", names[i],
                            (long long)c, H->tensor_elem_count(in[i]));
  const double eps = H->node_attr_float(node, "epsilon", 1e-5f);
  const double momentum = H->node_attr_float(node, "momentum", 0.9f);
  if (!(eps >= 0))
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "epsilon is %g; it must be >= 0", eps);
  OnyxTensor* y;
  st = H->ctx_output(ctx, 0, d, r, &y);
  if (st) return st;
  float* run[2] = {NULL, NULL};
  for (size_t o = 1; train && o <= 2; o++) {
    if (!wants_output(node, ctx, o)) continue;
    OnyxTensor* t;
    st = H->ctx_output(ctx, o, &c, 1, &t);
    if (st) return st;
    run[o - 1] = H->tensor_mutable_data(t);
  }
  const int err =
      gpuk_batchnorm_fwd(H->tensor_data(in[0]), H->tensor_data(in[1]), H->tensor_data(in[2]),
                         H->tensor_data(in[3]), H->tensor_data(in[4]), H->tensor_mutable_data(y),
                         run[0], run[1], d[0], c, sp, eps, momentum, train ? 1 : 0, s);
  return gpu_launch_status(node, err, "BatchNormalization kernel");
}

/* --- MaxPool -------------------------------------------------------------------------- */

enum { PAD_NOTSET, PAD_SAME_UPPER, PAD_SAME_LOWER, PAD_VALID };

static int auto_pad(const OnyxNode* n) {
  size_t len = 0;
  const char* a = H->node_attr_string(n, "auto_pad", &len);
  if (!a || !len || (len == 6 && !memcmp(a, "NOTSET", 6))) return PAD_NOTSET;
  if (len == 10 && !memcmp(a, "SAME_UPPER", 10)) return PAD_SAME_UPPER;
  if (len == 10 && !memcmp(a, "SAME_LOWER", 10)) return PAD_SAME_LOWER;
  if (len == 5 && !memcmp(a, "VALID", 5)) return PAD_VALID;
  return -1;
}

/* One attribute list: absent (count 0, each value dflt) or one value per
 * spatial dim (2 per dim for pads), each >= lo. */
static OnyxStatus* read_list(const OnyxNode* n, const char* name, size_t want, int64_t lo,
                             int64_t dflt, int64_t* out) {
  size_t c = 0;
  const int64_t* v = H->node_attr_ints(n, name, &c);
  if (c && c != want)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "attribute %s has %zu values; expected %zu",
                          name, c, want);
  for (size_t i = 0; i < want; i++) {
    out[i] = c ? v[i] : dflt;
    if (out[i] < lo)
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "attribute %s[%zu] = %lld < %lld", name, i,
                            (long long)out[i], (long long)lo);
  }
  return NULL;
}

/* The geometry of X's spatial dims xd[0..sp) as cpu_nn_common.c derives it
 * (auto_pad, ceil_mode with the last window dropped when it would start in
 * the end padding), padded to 3 dims with leading dims of 1. */
static OnyxStatus* pool_geometry(const OnyxNode* n, const int64_t* xd, size_t sp, GpuPoolGeom* g) {
  int64_t kernel[3], strides[3], dil[3], pads[6];
  size_t ck = 0;
  H->node_attr_ints(n, "kernel_shape", &ck);
  if (ck != sp)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "kernel_shape must have %zu values", sp);
  OnyxStatus* st = read_list(n, "kernel_shape", sp, 1, 1, kernel);
  if (!st) st = read_list(n, "strides", sp, 1, 1, strides);
  if (!st) st = read_list(n, "dilations", sp, 1, 1, dil);
  const int ap = auto_pad(n);
  if (ap < 0) return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "unknown auto_pad");
  if (!st) st = read_list(n, "pads", 2 * sp, 0, 0, pads);
  if (st) return st;
  const int64_t so = H->node_attr_int(n, "storage_order", 0);
  if (so != 0 && so != 1)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "storage_order must be 0 or 1, not %lld",
                          (long long)so);
  const bool ceil = H->node_attr_int(n, "ceil_mode", 0) != 0;
  memset(g, 0, sizeof *g);
  g->storage_order = (int32_t)so;
  const size_t off = 3 - sp;
  for (size_t i = 0; i < 3; i++) {
    g->in[i] = g->out[i] = g->kernel[i] = g->stride[i] = g->dil[i] = 1;
    g->pad[i] = 0;
  }
  g->in_size = g->out_size = 1;
  for (size_t i = 0; i < sp; i++) {
    const int64_t in = xd[i], s = strides[i];
    int64_t eff, pb = pads[i], pe = pads[i + sp], out = 0, t, lim;
    if (__builtin_mul_overflow(dil[i], kernel[i] - 1, &eff) || __builtin_add_overflow(eff, 1, &eff))
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                            "spatial dim %zu: the dilated kernel extent overflows", i);
    if (ap == PAD_SAME_UPPER || ap == PAD_SAME_LOWER) {
      out = in / s + (in % s != 0);
      int64_t total;
      if (__builtin_mul_overflow(out > 0 ? out - 1 : 0, s, &t) ||
          __builtin_add_overflow(t, eff, &t) || __builtin_sub_overflow(t, in, &total))
        return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                              "spatial dim %zu: the SAME padding overflows", i);
      if (total < 0) total = 0;
      pb = ap == PAD_SAME_UPPER ? total / 2 : total - total / 2;
      pe = total - pb;
    } else if (ap == PAD_VALID) {
      pb = pe = 0;
    }
    if (__builtin_add_overflow(in, pb, &t) || __builtin_add_overflow(t, pe, &t) ||
        __builtin_add_overflow(t, eff, &lim))
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                            "spatial dim %zu: input, pads and window extent overflow int64", i);
    if (ap != PAD_SAME_UPPER && ap != PAD_SAME_LOWER) {
      const int64_t span = t - eff;
      if (span < 0)
        return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                              "spatial dim %zu: the window (%lld) is larger than the padded "
                              "input (%lld)",
                              i, (long long)eff, (long long)t);
      out = (ceil ? span / s + (span % s != 0) : span / s) + 1;
      if (ceil && (out - 1 > INT64_MAX / s || (out - 1) * s >= in + pb)) out--;
    }
    g->in[off + i] = in;
    g->out[off + i] = out;
    g->kernel[off + i] = kernel[i];
    g->stride[off + i] = s;
    g->dil[off + i] = dil[i];
    g->pad[off + i] = pb;
    if (__builtin_mul_overflow(g->out_size, out, &g->out_size))
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "the output size overflows");
    g->in_size *= in; /* bounded by X's element count */
  }
  return NULL;
}

OnyxStatus* gpu_maxpool_compute(GpuKernel* k, OnyxKernelContext* ctx) {
  const OnyxNode* node = k->node;
  void* s;
  OnyxStatus* st = gpu_kernel_begin(k, ctx, &s);
  if (st) return st;
  const OnyxTensor* X = H->ctx_input(ctx, 0);
  if (!X || H->tensor_elem_type(X) != ONYX_ELEM_FLOAT32)
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "X must be a float32 tensor");
  const size_t r = H->tensor_rank(X);
  const int64_t* xd = H->tensor_dims(X);
  if (r < 3 || r > 5)
    return gpu_node_error(node, ONYX_NOT_IMPLEMENTED,
                          "X has rank %zu; 3 to 5 (1 to 3 spatial dims) supported", r);
  GpuPoolGeom g;
  st = pool_geometry(node, xd + 2, r - 2, &g);
  if (st) return st;
  if (__builtin_mul_overflow(xd[0], xd[1], &g.planes))
    return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "N x C overflows");
  int64_t yd[5] = {xd[0], xd[1]};
  for (size_t i = 2; i < r; i++)
    yd[i] = g.out[3 - (r - 2) + (i - 2)];
  OnyxTensor *Y, *I = NULL;
  st = H->ctx_output(ctx, 0, yd, r, &Y);
  if (!st && wants_output(node, ctx, 1)) st = H->ctx_output(ctx, 1, yd, r, &I);
  if (st) return st;
  const int err = gpuk_maxpool(H->tensor_data(X), H->tensor_mutable_data(Y),
                               I ? H->tensor_mutable_data(I) : NULL, &g, s);
  return gpu_launch_status(node, err, "MaxPool kernel");
}

/* --- registration (ROCm, gpuemu) --------------------------------------------------------- */

#ifndef ONYX_GPU_VENDOR_NORM_POOL
static OnyxStatus* bn_kernel(void* state, OnyxKernelContext* ctx) {
  return gpu_batchnorm_compute(state, ctx);
}

static OnyxStatus* maxpool_kernel(void* state, OnyxKernelContext* ctx) {
  return gpu_maxpool_compute(state, ctx);
}
#endif

OnyxStatus* gpu_register_norm_pool_kernels(OnyxKernelRegistry* r) {
#ifdef ONYX_GPU_VENDOR_NORM_POOL
  (void)r;
  return NULL;
#else
  const OnyxTypeConstraint t9[] = {{"T", gpu_float_types, 1}};
  const OnyxTypeConstraint t14[] = {{"T", gpu_float_types, 1}, {"U", gpu_float_types, 1}};
  const OnyxTypeConstraint t15[] = {
      {"T", gpu_float_types, 1}, {"T1", gpu_float_types, 1}, {"T2", gpu_float_types, 1}};
  OnyxStatus* st = gpu_register(r, "BatchNormalization", 9, 13, t9, 1, NULL, 0, NULL, bn_kernel, 0);
  if (!st) st = gpu_register(r, "BatchNormalization", 14, 14, t14, 2, NULL, 0, NULL, bn_kernel, 0);
  if (!st)
    st = gpu_register(r, "BatchNormalization", 15, ONYX_OPSET_LATEST, t15, 3, NULL, 0, NULL,
                      bn_kernel, 0);
  if (!st)
    st = gpu_register(r, "MaxPool", 1, ONYX_OPSET_LATEST, t9, 1, NULL, 0, NULL, maxpool_kernel, 0);
  return st;
#endif
}
