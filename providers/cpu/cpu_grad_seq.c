/* cpu_grad_seq.c — the backward kernels of the recurrent ops, in the
 * com.onyx.training domain (docs/training.md, "Gradient ops"; schemas:
 * schemas/schemas_training_seq.c), float32 and float64:
 *
 *   RNNGrad(X, W, R, B?, sequence_lens?, initial_h?, dY?, dY_h?)
 *       -> dX?, dW?, dR?, dB?, d_initial_h?
 *   GRUGrad(X, W, R, B?, sequence_lens?, initial_h?, dY?, dY_h?)
 *       -> dX?, dW?, dR?, dB?, d_initial_h?                linear_before_reset
 *   LSTMGrad(X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?, dY?, dY_h?, dY_c?)
 *       -> dX?, dW?, dR?, dB?, d_initial_h?, d_initial_c?, dP?
 *   ResizeGrad(dY, X_shape, scales?) -> dX   (at the end of this file)
 *
 * with the forward op's hidden_size, direction and layout, and its default
 * activations (Tanh for RNN; Sigmoid and Tanh for GRU; Sigmoid, Tanh, Tanh
 * for LSTM), no clip and no input_forget (the gradient rules refuse the
 * others). Gate orders are ONNX's: GRU z, r, h; LSTM i, o, f, c; peepholes
 * P = [Pi, Po, Pf].
 *
 * Method, per direction, in the model's element type (cpu_grad_seq_body.h,
 * compiled once for float32 and once for float64):
 *  - The forward pass is recomputed (the gates are not saved by the forward
 *    op): the input projection X W^T of every step is one GEMM, then each
 *    step one GEMM H_{t-1} R^T over the batch, storing the gate activations,
 *    H_{t-1} and (LSTM) C_{t-1}, C_t of every step.
 *  - The backward pass walks the steps in reverse: dH (and dC) start at
 *    dY_h (dY_c); each active step adds dY[t], forms the gradients of the
 *    gates' pre-activations dG, and carries dH_{t-1} = dG R (a GEMM) plus the
 *    direct paths (GRU's z ⊙ dH, LSTM's f ⊙ dC and the peepholes).
 *    dR += dG^T H_{t-1} per step (a GEMM); dG of every step is kept, so
 *    dX += dG W and dW = dG^T X are one GEMM each over all steps.
 *  - A batch entry past its sequence length is inactive at that step: its
 *    state passes through unchanged (so does its gradient) and its gates
 *    get no gradient; like the forward kernel, direction reverse processes
 *    steps len-1 .. 0 of each entry.
 * The GEMMs are cpu_gemm_f32 (packed, vectorized) for float32 models and
 * cpu_gemm_f64 for float64 ones, on the session's pool; every sum runs in a
 * fixed order, so results do not depend on the number of threads. Polls
 * cancellation once per step of each pass. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_gemm.h"
#include "cpu_kernels.h"
#include "cpu_nn.h"
#include "cpu_nnop_util.h"
#include "cpu_util.h"

#define TRAINING "com.onyx.training"

static const int32_t T_LENS[] = {ONYX_ELEM_INT32};
static const OnyxTypeConstraint TC_T[] = {{"T", cpu_types_float, 2}, {"T1", T_LENS, 1}};
static const OnyxTypeConstraint TC_RZ[] = {{"T", cpu_types_float, 2}};

typedef enum SeqCell { SEQ_RNN, SEQ_GRU, SEQ_LSTM } SeqCell;

/* Input slots by cell. */
typedef struct SeqSlots {
  int b, lens, h0, c0, p, dy, dyh, dyc; /* -1: the cell has none */
  int o_dh0, o_dc0, o_dp;
} SeqSlots;

static const SeqSlots SLOTS[3] = {
    {3, 4, 5, -1, -1, 6, 7, -1, 4, -1, -1},
    {3, 4, 5, -1, -1, 6, 7, -1, 4, -1, -1},
    {3, 4, 5, 6, 7, 8, 9, 10, 4, 5, 6},
};

/* A present input (NULL when absent or empty-named). */
static const OnyxTensor* opt_in(OnyxKernelContext* ctx, int slot) {
  if (slot < 0 || (size_t)slot >= cpu_host->ctx_input_count(ctx)) return NULL;
  return cpu_host->ctx_input(ctx, (size_t)slot);
}

/* n elements of t as doubles into dst. */
static void to_double(const OnyxTensor* t, double* dst, size_t n) {
  const void* d = cpu_host->tensor_data(t);
  if (cpu_host->tensor_elem_type(t) == ONYX_ELEM_FLOAT32)
    for (size_t i = 0; i < n; i++)
      dst[i] = ((const float*)d)[i];
  else
    memcpy(dst, d, n * sizeof(double));
}

/* Whether tensor t has exactly the dims want[0..rank). */
static bool dims_are(const OnyxTensor* t, const int64_t* want, size_t rank) {
  const size_t r = cpu_host->tensor_rank(t);
  const int64_t* d = cpu_host->tensor_dims(t);
  if (r != rank) return false;
  for (size_t i = 0; i < rank; i++)
    if (d[i] != want[i]) return false;
  return true;
}

static OnyxStatus* shape_err(OnyxKernelContext* ctx, const char* what, const int64_t* want,
                             size_t rank) {
  char buf[96] = "";
  size_t o = 0;
  for (size_t i = 0; i < rank && o < sizeof buf - 24; i++)
    o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%lld", i ? ", " : "", (long long)want[i]);
  return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%s must have shape [%s]", what, buf);
}

/* Writes doubles src (n of them) to output tensor `out` of type `type`. */
static void from_double(OnyxTensor* out, int32_t type, const double* src, size_t n) {
  void* d = cpu_host->tensor_mutable_data(out);
  if (type == ONYX_ELEM_FLOAT32)
    for (size_t i = 0; i < n; i++)
      ((float*)d)[i] = (float)src[i];
  else
    memcpy(d, src, n * sizeof(double));
}

/* A validated recurrent gradient node: cpu_grad_seq_body.h's input. */
typedef struct SeqArgs {
  const OnyxNode* node;
  SeqCell cell;
  bool lbr, reverse;
  size_t S, N, I, H, G, GH, nd;
  int64_t layout;
  OnyxThreadPool* pool;
  const OnyxTensor *X, *W, *R, *B, *lens, *h0, *c0, *p, *dy, *dyh, *dyc;
  const int64_t* xd;
  int64_t wdims[3], rdims[3], bdims[2], hdims[3], pdims[2];
} SeqArgs;

#define SEQ_T    float
#define SEQ_S    f32
#define SEQ_EXP  expf
#define SEQ_TANH tanhf
#define SEQ_GEMM cpu_gemm_f32
#include "cpu_grad_seq_body.h"
#undef SEQ_T
#undef SEQ_S
#undef SEQ_EXP
#undef SEQ_TANH
#undef SEQ_GEMM
#define SEQ_T    double
#define SEQ_S    f64
#define SEQ_EXP  exp
#define SEQ_TANH tanh
#define SEQ_GEMM cpu_gemm_f64
#include "cpu_grad_seq_body.h"
#undef SEQ_T
#undef SEQ_S
#undef SEQ_EXP
#undef SEQ_TANH
#undef SEQ_GEMM

static OnyxStatus* seq_grad_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  const char* op = cpu_host->node_op_type(node);
  const SeqCell cell = !strcmp(op, "LSTMGrad")  ? SEQ_LSTM
                       : !strcmp(op, "GRUGrad") ? SEQ_GRU
                                                : SEQ_RNN;
  const SeqSlots* sl = &SLOTS[cell];
  const OnyxTensor* X = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* Wt = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* Rt = cpu_host->ctx_input(ctx, 2);
  const int32_t type = cpu_host->tensor_elem_type(X);
  if (type != ONYX_ELEM_FLOAT32 && type != ONYX_ELEM_FLOAT64)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X must be float32 or float64");
  const int64_t hidden = cpu_host->node_attr_int(node, "hidden_size", 0);
  if (hidden < 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "hidden_size must be >= 1, got %lld",
                         (long long)hidden);
  char dir[32];
  nnop_attr_str(node, "direction", "forward", dir, sizeof dir);
  size_t nd = 1;
  bool reverse = false;
  if (!strcmp(dir, "reverse"))
    reverse = true;
  else if (!strcmp(dir, "bidirectional"))
    nd = 2;
  else if (strcmp(dir, "forward"))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "unknown direction '%s'", dir);
  const int64_t layout = cpu_host->node_attr_int(node, "layout", 0);
  if (layout != 0 && layout != 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "layout must be 0 or 1, got %lld",
                         (long long)layout);
  const size_t xr = cpu_host->tensor_rank(X);
  const int64_t* xd = cpu_host->tensor_dims(X);
  if (xr != 3) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X must be 3-D, not %zu-D", xr);
  SeqArgs q = {.node = node,
               .cell = cell,
               .lbr = cpu_host->node_attr_int(node, "linear_before_reset", 0) != 0,
               .S = (size_t)(layout ? xd[1] : xd[0]),
               .N = (size_t)(layout ? xd[0] : xd[1]),
               .I = (size_t)xd[2],
               .H = (size_t)hidden,
               .G = cell == SEQ_RNN   ? 1
                    : cell == SEQ_GRU ? 3
                                      : 4,
               .nd = nd,
               .reverse = reverse,
               .pool = cpu_host->ctx_thread_pool(ctx)};
  if (!cpu_mul_size(q.G, q.H, &q.GH) || q.GH > (size_t)INT64_MAX / 2)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "hidden_size %lld is too large",
                         (long long)hidden);
  const int64_t S = (int64_t)q.S, N = (int64_t)q.N, I = (int64_t)q.I, H = hidden,
                GH = (int64_t)q.GH, D = (int64_t)nd;
  const int64_t wdims[3] = {D, GH, I}, rdims[3] = {D, GH, H}, bdims[2] = {D, 2 * GH},
                pdims[2] = {D, 3 * H}, ldims[1] = {N};
  const int64_t hdims[3] = {layout ? N : D, layout ? D : N, H};
  const int64_t ydims[4] = {layout ? N : S, layout ? S : D, layout ? D : N, H};
  if (!dims_are(Wt, wdims, 3)) return shape_err(ctx, "W", wdims, 3);
  if (!dims_are(Rt, rdims, 3)) return shape_err(ctx, "R", rdims, 3);
  const OnyxTensor* Bt = opt_in(ctx, sl->b);
  const OnyxTensor* Lt = opt_in(ctx, sl->lens);
  const OnyxTensor* H0 = opt_in(ctx, sl->h0);
  const OnyxTensor* C0 = opt_in(ctx, sl->c0);
  const OnyxTensor* Pt = opt_in(ctx, sl->p);
  const OnyxTensor* dY = opt_in(ctx, sl->dy);
  const OnyxTensor* dYh = opt_in(ctx, sl->dyh);
  const OnyxTensor* dYc = opt_in(ctx, sl->dyc);
  if (Bt && !dims_are(Bt, bdims, 2)) return shape_err(ctx, "B", bdims, 2);
  if (Lt && !dims_are(Lt, ldims, 1)) return shape_err(ctx, "sequence_lens", ldims, 1);
  if (H0 && !dims_are(H0, hdims, 3)) return shape_err(ctx, "initial_h", hdims, 3);
  if (C0 && !dims_are(C0, hdims, 3)) return shape_err(ctx, "initial_c", hdims, 3);
  if (Pt && !dims_are(Pt, pdims, 2)) return shape_err(ctx, "P", pdims, 2);
  if (dY && !dims_are(dY, ydims, 4)) return shape_err(ctx, "dY", ydims, 4);
  if (dYh && !dims_are(dYh, hdims, 3)) return shape_err(ctx, "dY_h", hdims, 3);
  if (dYc && !dims_are(dYc, hdims, 3)) return shape_err(ctx, "dY_c", hdims, 3);
  const OnyxTensor* same[] = {Wt, Rt, Bt, H0, C0, Pt, dY, dYh, dYc};
  for (size_t i = 0; i < CPU_ARRAY_LEN(same); i++)
    if (same[i] && (int32_t)cpu_host->tensor_elem_type(same[i]) != type)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "every float input must have X's type");

  q.layout = layout;
  q.X = X, q.W = Wt, q.R = Rt, q.B = Bt, q.lens = Lt, q.h0 = H0, q.c0 = C0, q.p = Pt;
  q.dy = dY, q.dyh = dYh, q.dyc = dYc, q.xd = xd;
  memcpy(q.wdims, wdims, sizeof wdims);
  memcpy(q.rdims, rdims, sizeof rdims);
  memcpy(q.bdims, bdims, sizeof bdims);
  memcpy(q.hdims, hdims, sizeof hdims);
  memcpy(q.pdims, pdims, sizeof pdims);
  return type == ONYX_ELEM_FLOAT32 ? seq_run_f32(ctx, &q) : seq_run_f64(ctx, &q);
}

/* ======================================================================== */
/* ResizeGrad                                                               */
/* ======================================================================== */

typedef enum RzCoord {
  RZ_HALF_PIXEL,
  RZ_HALF_PIXEL_SYM,
  RZ_PYTORCH_HALF_PIXEL,
  RZ_ALIGN_CORNERS,
  RZ_ASYMMETRIC
} RzCoord;
static const char* const RZ_COORD_NAMES[] = {"half_pixel", "half_pixel_symmetric",
                                             "pytorch_half_pixel", "align_corners", "asymmetric"};

/* The input coordinate of output coordinate x along an axis (Resize's
 * coordinate_transformation_mode, as the forward kernel computes it). */
static double rz_coord(RzCoord c, double x, double scale, int64_t in_len, int64_t out_len) {
  switch (c) {
  case RZ_HALF_PIXEL:
    return (x + 0.5) / scale - 0.5;
  case RZ_HALF_PIXEL_SYM: {
    const double adjustment = (double)out_len / (scale * (double)in_len);
    return (double)in_len / 2 * (1 - adjustment) + (x + 0.5) / scale - 0.5;
  }
  case RZ_PYTORCH_HALF_PIXEL:
    return out_len > 1 ? (x + 0.5) / scale - 0.5 : 0;
  case RZ_ALIGN_CORNERS:
    return out_len == 1 ? 0 : x * (double)(in_len - 1) / (scale * (double)in_len - 1);
  case RZ_ASYMMETRIC:
    return x / scale;
  }
  return 0;
}

static double rz_cubic(double x, double a) {
  x = fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

typedef struct RzPlan {
  RzCoord coord;
  bool cubic, exclude_outside;
  double a;
} RzPlan;

/* The transpose of one interpolation pass along axis `ax`: src has dims
 * `d` with d[ax] = out_len, dst the same with in_len (zeroed by the
 * caller); dst[o, taps(x), i] += w * src[o, x, i]. */
static bool rz_pass_t(const RzPlan* p, const double* src, double* dst, const int64_t* d,
                      size_t rank, size_t ax, int64_t in_len, double scale, CpuStop* stop) {
  size_t outer = 1, inner = 1;
  for (size_t i = 0; i < ax; i++)
    outer *= (size_t)d[i];
  for (size_t i = ax + 1; i < rank; i++)
    inner *= (size_t)d[i];
  const int64_t out_len = d[ax];
  const int64_t radius = p->cubic ? 2 : 1;
  const size_t taps = (size_t)(2 * radius + 1);
  size_t polled = 0;
  for (int64_t x = 0; x < out_len; x++) {
    if (cpu_stop_poll(stop, &polled, outer * inner * taps + 1)) return false;
    double c = rz_coord(p->coord, (double)x, scale, in_len, out_len);
    if (!isfinite(c)) c = 0;
    c = fmin(fmax(c, -(double)in_len - 8), 2.0 * (double)in_len + 8);
    const int64_t first = (int64_t)floor(c) - radius;
    double w[5], sum = 0;
    int64_t idx[5];
    for (size_t t = 0; t < taps; t++) {
      const int64_t j = first + (int64_t)t;
      const double arg = (double)j - c;
      double k = p->cubic ? rz_cubic(arg, p->a) : fmax(0.0, 1 - fabs(arg));
      if (p->exclude_outside && (j < 0 || j >= in_len)) k = 0;
      idx[t] = j < 0 ? 0 : (j >= in_len ? in_len - 1 : j);
      w[t] = k;
      sum += k;
    }
    if (p->exclude_outside && sum != 0)
      for (size_t t = 0; t < taps; t++)
        w[t] /= sum;
    for (size_t o = 0; o < outer; o++) {
      const double* sp = src + (o * (size_t)out_len + (size_t)x) * inner;
      for (size_t t = 0; t < taps; t++) {
        if (w[t] == 0) continue;
        double* dp = dst + (o * (size_t)in_len + (size_t)idx[t]) * inner;
        for (size_t i = 0; i < inner; i++)
          dp[i] += w[t] * sp[i];
      }
    }
  }
  return true;
}

/* ResizeGrad(dY, X_shape, scales?) -> dX: the transpose of Resize's linear
 * or cubic interpolation (mode, coordinate_transformation_mode other than
 * tf_crop_and_resize / tf_half_pixel_for_nn, cubic_coeff_a,
 * exclude_outside, axes; no antialias), one scatter-add pass per resized
 * axis in double, with the forward kernel's taps (cpu_resize.c), polling
 * cancellation once per output coordinate. A resized
 * axis's scale is scales' value, or dY's dim / X's dim without scales (the
 * forward's sizes input with the stretch policy). */
static OnyxStatus* resize_grad_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  const OnyxTensor* dY = cpu_host->ctx_input(ctx, 0);
  const int32_t type = cpu_host->tensor_elem_type(dY);
  if (type != ONYX_ELEM_FLOAT32 && type != ONYX_ELEM_FLOAT64)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "dY must be float32 or float64");
  char buf[40];
  RzPlan p = {.a = cpu_host->node_attr_float(node, "cubic_coeff_a", -0.75f),
              .exclude_outside = cpu_host->node_attr_int(node, "exclude_outside", 0) != 0};
  nnop_attr_str(node, "mode", "linear", buf, sizeof buf);
  if (!strcmp(buf, "cubic"))
    p.cubic = true;
  else if (strcmp(buf, "linear"))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "mode must be linear or cubic, not '%s'", buf);
  nnop_attr_str(node, "coordinate_transformation_mode", "half_pixel", buf, sizeof buf);
  size_t ci = 0;
  while (ci < CPU_ARRAY_LEN(RZ_COORD_NAMES) && strcmp(buf, RZ_COORD_NAMES[ci]))
    ci++;
  if (ci == CPU_ARRAY_LEN(RZ_COORD_NAMES))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "coordinate_transformation_mode '%s' is not supported", buf);
  p.coord = (RzCoord)ci;
  const size_t r = cpu_host->tensor_rank(dY);
  const int64_t* yd = cpu_host->tensor_dims(dY);
  int64_t xd[CPU_MAX_RANK];
  size_t xr = 0;
  OnyxStatus* st =
      cpu_read_ints(ctx, cpu_host->ctx_input(ctx, 1), "X_shape", xd, CPU_MAX_RANK, &xr);
  if (st) return st;
  if (xr != r)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X_shape has %zu values; dY has rank %zu", xr,
                         r);
  /* The resized axes and their scales. */
  bool resized[CPU_MAX_RANK] = {false};
  double scale[CPU_MAX_RANK];
  size_t na = 0;
  const int64_t* axes = cpu_host->node_attr_ints(node, "axes", &na);
  if (!axes) na = r;
  size_t ax_of[CPU_MAX_RANK];
  for (size_t i = 0; i < na; i++) {
    size_t a = i;
    if (axes && !cpu_norm_axis(axes[i], r, false, &a))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                           (long long)axes[i], r);
    if (resized[a]) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %zu is repeated", a);
    resized[a] = true;
    ax_of[i] = a;
  }
  for (size_t a = 0; a < r; a++) {
    if (xd[a] < 0) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X_shape[%zu] is negative", a);
    if (!resized[a] && xd[a] != yd[a])
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "dY's dim %zu (%lld) differs from X's (%lld) on an axis not resized", a,
                           (long long)yd[a], (long long)xd[a]);
    scale[a] = xd[a] ? (double)yd[a] / (double)xd[a] : 1.0;
  }
  const OnyxTensor* tsc = nnop_has_input(ctx, 2) ? cpu_host->ctx_input(ctx, 2) : NULL;
  if (tsc && cpu_host->tensor_elem_count(tsc) > 0) {
    double* sv;
    if ((st = nnop_load_d(ctx, tsc, &sv))) return st;
    if (cpu_host->tensor_elem_count(tsc) != na)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "scales has %zu values, expected %zu",
                           cpu_host->tensor_elem_count(tsc), na);
    for (size_t i = 0; i < na; i++) {
      if (!(sv[i] > 0) || !isfinite(sv[i]))
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "scales[%zu] = %g must be positive", i,
                             sv[i]);
      scale[ax_of[i]] = sv[i];
    }
  }
  OnyxTensor* dx;
  if ((st = cpu_host->ctx_output(ctx, 0, xd, r, &dx))) return st;
  size_t nx = 1, ny = 1, big = 1;
  for (size_t a = 0; a < r; a++) {
    nx *= (size_t)xd[a];
    ny *= (size_t)yd[a];
  }
  /* The largest intermediate: the passes run from the last axis to the
   * first, each taking one axis from dY's length to X's. */
  int64_t cur[CPU_MAX_RANK];
  memcpy(cur, yd, r * sizeof *cur);
  big = ny;
  for (size_t a = r; a-- > 0;) {
    if (!resized[a]) continue;
    cur[a] = xd[a];
    size_t c = 1;
    for (size_t i = 0; i < r; i++)
      if (!cpu_mul_size(c, (size_t)cur[i], &c))
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "the gradient is too large");
    if (c > big) big = c;
  }
  if (!nx) return NULL;
  double* b0 = malloc((big ? big : 1) * sizeof(double));
  double* b1 = malloc((big ? big : 1) * sizeof(double));
  if (!b0 || !b1) {
    free(b0);
    free(b1);
    return cpu_ctx_error(ctx, ONYX_OUT_OF_MEMORY, "out of memory");
  }
  to_double(dY, b0, ny);
  memcpy(cur, yd, r * sizeof *cur);
  CpuStop stop = {.ctx = ctx};
  for (size_t a = r; a-- > 0;) {
    if (!resized[a] ||
        (xd[a] == yd[a] && scale[a] == 1.0 && !p.cubic && p.coord != RZ_ALIGN_CORNERS))
      continue;
    size_t n = 1;
    for (size_t i = 0; i < r; i++)
      n *= i == a ? (size_t)xd[a] : (size_t)cur[i];
    memset(b1, 0, (n ? n : 1) * sizeof(double));
    if (n && !rz_pass_t(&p, b0, b1, cur, r, a, xd[a], scale[a], &stop)) {
      free(b0);
      free(b1);
      return cpu_cancelled(ctx, NULL);
    }
    cur[a] = xd[a];
    double* t = b0;
    b0 = b1;
    b1 = t;
  }
  from_double(dx, type, b0, nx);
  free(b0);
  free(b1);
  return NULL;
}

#define SDEF(op, fn, tc)                                                                           \
  {                                                                                                \
    .struct_size = sizeof(OnyxKernelDef), .domain = TRAINING, .op_type = op, .since_version = 1,   \
    .end_version = ONYX_OPSET_LATEST, .type_constraints = tc,                                      \
    .type_constraint_count = CPU_ARRAY_LEN(tc), .compute = fn                                      \
  }

OnyxStatus* cpu_register_grad_seq(OnyxKernelRegistry* r) {
  const OnyxKernelDef defs[] = {
      SDEF("RNNGrad", seq_grad_compute, TC_T), SDEF("GRUGrad", seq_grad_compute, TC_T),
      SDEF("LSTMGrad", seq_grad_compute, TC_T), SDEF("ResizeGrad", resize_grad_compute, TC_RZ)};
  for (size_t i = 0; i < CPU_ARRAY_LEN(defs); i++) {
    OnyxStatus* st = cpu_host->register_kernel(r, &defs[i]);
    if (st) return st;
  }
  return NULL;
}
