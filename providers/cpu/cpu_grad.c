/* cpu_grad.c — the CPU provider's kernels for the com.onyx.training
 * gradient ops (schemas/schemas_training.c; semantics in docs/training.md,
 * "Gradient ops"), float32 and float64: the elementwise activation grads,
 * SoftmaxGrad and LogSoftmaxGrad, SoftmaxCrossEntropyLossGrad,
 * BatchNormalizationGrad, LayerNormalizationGrad, GatherGrad and
 * DropoutGrad. ConvGrad and the pool grads are in cpu_grad_conv.c;
 * BatchNormalizationGrad's float32 plane loops in cpu_grad_bn.c.
 *
 * Every sum runs in a fixed order whatever the number of threads (work is
 * split by output element, row or column block, never by summand), so
 * results are deterministic. Loops over data poll the run's cancellation. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_gemm.h"
#include "cpu_grad_bn.h"
#include "cpu_kernels.h"
#include "cpu_util.h"
#include "cpu_vmath.h"

#define TRAINING "com.onyx.training"

static const int32_t T_FLOAT[] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64};
static const int32_t T_IND[] = {ONYX_ELEM_INT32, ONYX_ELEM_INT64};
static const OnyxTypeConstraint TC_T[] = {{"T", T_FLOAT, 2}};
static const OnyxTypeConstraint TC_T_IND[] = {{"T", T_FLOAT, 2}, {"Tind", T_IND, 2}};
static const OnyxTypeConstraint TC_T_T1[] = {{"T", T_FLOAT, 2}, {"T1", T_FLOAT, 2}};

/* Elements per parallel task of the elementwise loops, and below which a
 * loop runs on the calling thread. */
#define EW_CHUNK    4096
#define EW_PARALLEL 32768

static bool has_output(const OnyxNode* node, size_t i) {
  return node && i < cpu_host->node_output_count(node) && cpu_host->node_output(node, i) != NULL;
}

static bool same_shape(const OnyxTensor* a, const OnyxTensor* b) {
  const size_t r = cpu_host->tensor_rank(a);
  return r == cpu_host->tensor_rank(b) &&
         (r == 0 ||
          !memcmp(cpu_host->tensor_dims(a), cpu_host->tensor_dims(b), r * sizeof(int64_t)));
}

/* The float element type shared by the named inputs, or an error naming
 * the node. */
static OnyxStatus* float_type(OnyxKernelContext* ctx, const OnyxTensor* const* ts,
                              const char* const* names, size_t n, int32_t* out) {
  const int32_t t = cpu_host->tensor_elem_type(ts[0]);
  if (t != ONYX_ELEM_FLOAT32 && t != ONYX_ELEM_FLOAT64)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%s must be float32 or float64, not %s",
                         names[0], cpu_elem_name(t));
  for (size_t i = 1; i < n; i++)
    if (ts[i] && (int32_t)cpu_host->tensor_elem_type(ts[i]) != t)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%s must have %s's type %s, not %s",
                           names[i], names[0], cpu_elem_name(t),
                           cpu_elem_name(cpu_host->tensor_elem_type(ts[i])));
  *out = t;
  return NULL;
}

static OnyxThreadPool* pool_for(OnyxKernelContext* ctx, size_t work) {
  return work >= EW_PARALLEL ? cpu_host->ctx_thread_pool(ctx) : NULL;
}

/* ======================================================================== */
/* Elementwise grads: dX = f(dY, X or Y), chunked over the pool             */
/* ======================================================================== */

typedef enum EwOp { EW_RELU, EW_SIGMOID, EW_TANH, EW_GELU, EW_FAST_GELU } EwOp;

#define SQRT1_2      0.70710678118654752440
#define INV_SQRT_2PI 0.39894228040143267794
#define SQRT_2_PI    0.79788456080286535588 /* sqrt(2 / pi) */
#define GELU_C       0.044715

typedef struct EwJob {
  EwOp op;
  int32_t type;
  const void *dy, *x;
  void* dx;
  size_t count;
  CpuStop* stop;
} EwJob;

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* ReluGrad with AVX-512: dY's lanes where x > 0 (an ordered compare: NaN
 * gives 0), zeros elsewhere; the same bits as the portable loop. */
__attribute__((target("avx512f"))) static void relu_grad_f32_avx512(const float* dy, const float* x,
                                                                    float* dx, size_t n) {
  const __m512 zero = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 k = (__mmask16)(n - i >= 16 ? 0xFFFFu : (1u << (n - i)) - 1u);
    const __mmask16 pos =
        _mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, x + i), zero, _CMP_GT_OQ);
    _mm512_mask_storeu_ps(dx + i, k, _mm512_maskz_mov_ps(pos, _mm512_maskz_loadu_ps(k, dy + i)));
  }
}
#define RELU_GRAD_AVX512 1
#else
#define RELU_GRAD_AVX512 0
#endif

/* float32 chunk; the transcendental parts through the provider's vector
 * math (cpu_vmath.h) on a stack block. */
static void ew_chunk_f32(EwOp op, const float* restrict dy, const float* restrict x,
                         float* restrict dx, size_t n) {
  switch (op) {
  case EW_RELU:
#if RELU_GRAD_AVX512
    if (cpu_gemm_isa_level() == CPU_ISA_AVX512) {
      relu_grad_f32_avx512(dy, x, dx, n);
      return;
    }
#endif
    /* dY's bits under an all-ones mask where x > 0: no branch to mispredict
     * on mixed signs, and dY passes through unchanged (inf, NaN too). */
    for (size_t i = 0; i < n; i++) {
      uint32_t b;
      memcpy(&b, &dy[i], sizeof b);
      b &= 0u - (uint32_t)(x[i] > 0.0f);
      memcpy(&dx[i], &b, sizeof b);
    }
    return;
  case EW_SIGMOID:
    for (size_t i = 0; i < n; i++)
      dx[i] = dy[i] * x[i] * (1.0f - x[i]);
    return;
  case EW_TANH:
    for (size_t i = 0; i < n; i++)
      dx[i] = dy[i] * (1.0f - x[i] * x[i]);
    return;
  default:
    break;
  }
  enum { B = 512 };
  float a[B], b[B];
  for (size_t s = 0; s < n; s += B) {
    const size_t m = n - s < B ? n - s : B;
    const float* xs = x + s;
    if (op == EW_GELU) {
      /* d/dx x Phi(x) = Phi(x) + x phi(x) */
      for (size_t i = 0; i < m; i++) {
        a[i] = xs[i] * (float)SQRT1_2;
        b[i] = -0.5f * xs[i] * xs[i];
      }
      cpu_erf_f32(a, a, m);
      cpu_exp_f32(b, b, m);
      for (size_t i = 0; i < m; i++)
        dx[s + i] = dy[s + i] * (0.5f * (1.0f + a[i]) + xs[i] * (float)INV_SQRT_2PI * b[i]);
    } else { /* EW_FAST_GELU: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + c x^3) */
      for (size_t i = 0; i < m; i++)
        a[i] = (float)SQRT_2_PI * (xs[i] + (float)GELU_C * xs[i] * xs[i] * xs[i]);
      cpu_tanh_f32(a, a, m);
      for (size_t i = 0; i < m; i++) {
        const float t = a[i], x2 = xs[i] * xs[i];
        const float du = (float)SQRT_2_PI * (1.0f + 3.0f * (float)GELU_C * x2);
        dx[s + i] = dy[s + i] * (0.5f * (1.0f + t) + 0.5f * xs[i] * (1.0f - t * t) * du);
      }
    }
  }
}

static void ew_chunk_f64(EwOp op, const double* restrict dy, const double* restrict x,
                         double* restrict dx, size_t n) {
  if (op == EW_RELU) { /* as float32: a mask, no branch */
    for (size_t i = 0; i < n; i++) {
      uint64_t b;
      memcpy(&b, &dy[i], sizeof b);
      b &= UINT64_C(0) - (uint64_t)(x[i] > 0.0);
      memcpy(&dx[i], &b, sizeof b);
    }
    return;
  }
  for (size_t i = 0; i < n; i++) {
    const double v = x[i];
    switch (op) {
    case EW_RELU:
      dx[i] = v > 0.0 ? dy[i] : 0.0;
      break;
    case EW_SIGMOID:
      dx[i] = dy[i] * v * (1.0 - v);
      break;
    case EW_TANH:
      dx[i] = dy[i] * (1.0 - v * v);
      break;
    case EW_GELU:
      dx[i] = dy[i] * (0.5 * (1.0 + erf(v * SQRT1_2)) + v * INV_SQRT_2PI * exp(-0.5 * v * v));
      break;
    case EW_FAST_GELU: {
      const double t = tanh(SQRT_2_PI * (v + GELU_C * v * v * v));
      const double du = SQRT_2_PI * (1.0 + 3.0 * GELU_C * v * v);
      dx[i] = dy[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du);
      break;
    }
    }
  }
}

static void ew_tasks(void* user, size_t begin, size_t end) {
  const EwJob* j = user;
  size_t acc = 0;
  for (size_t t = begin; t < end; t++) {
    const size_t s = t * EW_CHUNK, n = j->count - s < EW_CHUNK ? j->count - s : EW_CHUNK;
    if (cpu_stop_poll(j->stop, &acc, n)) return;
    if (j->type == ONYX_ELEM_FLOAT32)
      ew_chunk_f32(j->op, (const float*)j->dy + s, (const float*)j->x + s, (float*)j->dx + s, n);
    else
      ew_chunk_f64(j->op, (const double*)j->dy + s, (const double*)j->x + s, (double*)j->dx + s, n);
  }
}

static OnyxStatus* ew_compute(void* state, OnyxKernelContext* ctx) {
  const EwOp op = (EwOp)(intptr_t)state;
  const OnyxTensor* dy = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 1);
  const char* second = op == EW_SIGMOID || op == EW_TANH ? "Y" : "X";
  const OnyxTensor* ts[] = {dy, x};
  const char* names[] = {"dY", second};
  int32_t type = ONYX_ELEM_FLOAT32;
  OnyxStatus* st = float_type(ctx, ts, names, 2, &type);
  if (st) return st;
  if (!same_shape(dy, x))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "dY and %s must have the same shape", second);
  OnyxTensor* dx = NULL;
  if ((st =
           cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(dy), cpu_host->tensor_rank(dy), &dx)))
    return st;
  const size_t count = cpu_host->tensor_elem_count(dy);
  if (!count) return NULL;
  CpuStop stop = {.ctx = ctx};
  EwJob j = {op,
             type,
             cpu_host->tensor_data(dy),
             cpu_host->tensor_data(x),
             cpu_host->tensor_mutable_data(dx),
             count,
             &stop};
  cpu_host->parallel_for(pool_for(ctx, count), (count + EW_CHUNK - 1) / EW_CHUNK, ew_tasks, &j);
  return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
}

/* ======================================================================== */
/* SoftmaxGrad, LogSoftmaxGrad along one axis                               */
/* ======================================================================== */

/* X seen as (outer, len, inner); one task per (outer, inner) line:
 *   SoftmaxGrad:    dX = Y (dY - sum(dY Y))
 *   LogSoftmaxGrad: dX = dY - exp(Y) sum(dY)
 * with the sum along the line, in double. */
typedef struct SmJob {
  int log;
  int32_t type;
  const void *dy, *y;
  void* dx;
  size_t len, inner;
  CpuStop* stop;
} SmJob;

#define SM_LINE(T, EXP)                                                                            \
  static void sm_line_##T(const SmJob* j, size_t line) {                                           \
    const size_t o = line / j->inner, i = line % j->inner, st = j->inner;                          \
    const size_t base = o * j->len * st + i;                                                       \
    const T* dy = (const T*)j->dy + base;                                                          \
    const T* y = (const T*)j->y + base;                                                            \
    T* dx = (T*)j->dx + base;                                                                      \
    double s = 0;                                                                                  \
    if (j->log) {                                                                                  \
      for (size_t k = 0; k < j->len; k++)                                                          \
        s += dy[k * st];                                                                           \
      for (size_t k = 0; k < j->len; k++)                                                          \
        dx[k * st] = (T)(dy[k * st] - EXP(y[k * st]) * (T)s);                                      \
    } else {                                                                                       \
      for (size_t k = 0; k < j->len; k++)                                                          \
        s += (double)dy[k * st] * (double)y[k * st];                                               \
      for (size_t k = 0; k < j->len; k++)                                                          \
        dx[k * st] = (T)(y[k * st] * (dy[k * st] - (T)s));                                         \
    }                                                                                              \
  }
SM_LINE(float, expf)
SM_LINE(double, exp)

static void sm_lines(void* user, size_t begin, size_t end) {
  const SmJob* j = user;
  size_t acc = 0;
  for (size_t l = begin; l < end; l++) {
    if (cpu_stop_poll(j->stop, &acc, j->len + 1)) return;
    if (j->type == ONYX_ELEM_FLOAT32)
      sm_line_float(j, l);
    else
      sm_line_double(j, l);
  }
}

static OnyxStatus* sm_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  const OnyxTensor* dy = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* y = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* ts[] = {dy, y};
  const char* names[] = {"dY", "Y"};
  int32_t type = ONYX_ELEM_FLOAT32;
  OnyxStatus* st = float_type(ctx, ts, names, 2, &type);
  if (st) return st;
  if (!same_shape(dy, y))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "dY and Y must have the same shape");
  const size_t rank = cpu_host->tensor_rank(y);
  const int64_t* d = cpu_host->tensor_dims(y);
  const int64_t axis_attr = cpu_host->node_attr_int(node, "axis", -1);
  size_t axis = 0;
  if (rank == 0 || !cpu_norm_axis(axis_attr, rank, false, &axis))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                         (long long)axis_attr, rank);
  OnyxTensor* dx = NULL;
  if ((st = cpu_host->ctx_output(ctx, 0, d, rank, &dx))) return st;
  const size_t count = cpu_host->tensor_elem_count(y);
  if (!count) return NULL;
  CpuStop stop = {.ctx = ctx};
  SmJob j = {(int)(intptr_t)state,
             type,
             cpu_host->tensor_data(dy),
             cpu_host->tensor_data(y),
             cpu_host->tensor_mutable_data(dx),
             (size_t)d[axis],
             cpu_dims_product(d, axis + 1, rank),
             &stop};
  const size_t lines = count / j.len;
  cpu_host->parallel_for(pool_for(ctx, count), lines, sm_lines, &j);
  return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
}

/* ======================================================================== */
/* SoftmaxCrossEntropyLossGrad                                              */
/* ======================================================================== */

/* log_prob (N, C, d...), label (N, d...), weight (C) or none. With
 * w_s = weight[label_s] (1 without weight; 0 for an ignored sample) and
 * g_s = dY / sum(w) (mean; 0 when that sum is 0), dY (sum) or dY[s]
 * (none): d_logits[n, c, d] = g_s w_s (exp(log_prob[n, c, d]) - [c == label_s]). */
typedef enum { RED_MEAN, RED_SUM, RED_NONE } Reduction;

typedef struct SceJob {
  int32_t type;
  const void* lp;
  void* dx;
  const double* coef; /* g_s w_s per sample (N * inner) */
  const int64_t* label;
  size_t c, inner;
  CpuStop* stop;
} SceJob;

static void sce_rows(void* user, size_t begin, size_t end) {
  const SceJob* j = user;
  size_t acc = 0;
  for (size_t n = begin; n < end; n++) { /* one sample batch row: C x inner values */
    if (cpu_stop_poll(j->stop, &acc, j->c * j->inner + 1)) return;
    for (size_t c = 0; c < j->c; c++)
      for (size_t i = 0; i < j->inner; i++) {
        const size_t s = n * j->inner + i, at = (n * j->c + c) * j->inner + i;
        const double g = j->coef[s];
        const double hot = j->label[s] == (int64_t)c ? 1.0 : 0.0;
        if (j->type == ONYX_ELEM_FLOAT32)
          ((float*)j->dx)[at] =
              g == 0.0 ? 0.0f : (float)(g * (exp(((const float*)j->lp)[at]) - hot));
        else
          ((double*)j->dx)[at] = g == 0.0 ? 0.0 : g * (exp(((const double*)j->lp)[at]) - hot);
      }
  }
}

static double load_f(int32_t type, const void* p, size_t i) {
  return type == ONYX_ELEM_FLOAT32 ? (double)((const float*)p)[i] : ((const double*)p)[i];
}

static OnyxStatus* sce_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  const size_t n_in = cpu_host->ctx_input_count(ctx);
  const OnyxTensor* dy = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* lp = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* label = cpu_host->ctx_input(ctx, 2);
  const OnyxTensor* weight = n_in > 3 ? cpu_host->ctx_input(ctx, 3) : NULL;
  const OnyxTensor* ts[] = {lp, dy, weight};
  const char* names[] = {"log_prob", "dY", "weight"};
  int32_t type = ONYX_ELEM_FLOAT32;
  OnyxStatus* st = float_type(ctx, ts, names, 3, &type);
  if (st) return st;
  size_t len = 0;
  const char* rs = cpu_host->node_attr_string(node, "reduction", &len);
  Reduction red = RED_MEAN;
  if (rs && len == 3 && !memcmp(rs, "sum", 3))
    red = RED_SUM;
  else if (rs && len == 4 && !memcmp(rs, "none", 4))
    red = RED_NONE;
  else if (rs && len && !(len == 4 && !memcmp(rs, "mean", 4)))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "reduction '%.*s' is not one of mean, sum, none", (int)len, rs);
  const bool has_ignore = cpu_host->node_attr_type(node, "ignore_index") != ONYX_ATTR_UNDEFINED;
  const int64_t ignore = cpu_host->node_attr_int(node, "ignore_index", 0);
  const size_t r = cpu_host->tensor_rank(lp);
  const int64_t* d = cpu_host->tensor_dims(lp);
  const size_t lr = cpu_host->tensor_rank(label);
  const int64_t* ld = cpu_host->tensor_dims(label);
  if (r < 2)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "log_prob must be (N, C, ...), not %zu-D", r);
  bool ok = lr == r - 1 && ld[0] == d[0];
  for (size_t i = 1; ok && i < lr; i++)
    ok = ld[i] == d[i + 1];
  if (!ok)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "label must have log_prob's shape without its class axis 1");
  const size_t nb = (size_t)d[0], c = (size_t)d[1], inner = cpu_dims_product(d, 2, r);
  const size_t samples = cpu_host->tensor_elem_count(label);
  if (red == RED_NONE ? !same_shape(dy, label) : cpu_host->tensor_elem_count(dy) != 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         red == RED_NONE ? "dY must have label's shape for reduction 'none'"
                                         : "dY must be a scalar for reduction 'mean' or 'sum'");
  if (weight && (cpu_host->tensor_rank(weight) != 1 || cpu_host->tensor_elem_count(weight) != c))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "weight must be 1-D with %zu (C) values", c);
  OnyxTensor* dx = NULL;
  if ((st = cpu_host->ctx_output(ctx, 0, d, r, &dx))) return st;
  if (!cpu_host->tensor_elem_count(lp)) return NULL;
  size_t bytes;
  if (!cpu_mul_size(samples, sizeof(double) + sizeof(int64_t), &bytes))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "label has too many elements");
  double* coef = cpu_host->ctx_scratch(ctx, bytes);
  if (!coef) return cpu_oom(ctx);
  int64_t* lab = (int64_t*)(coef + samples);
  const int32_t lt = cpu_host->tensor_elem_type(label);
  const void* lraw = cpu_host->tensor_data(label);
  const void* wraw = weight ? cpu_host->tensor_data(weight) : NULL;
  double w_sum = 0;
  for (size_t s = 0; s < samples; s++) {
    const int64_t v = lt == ONYX_ELEM_INT32 ? ((const int32_t*)lraw)[s] : ((const int64_t*)lraw)[s];
    lab[s] = v;
    if (has_ignore && v == ignore) {
      coef[s] = 0;
      continue;
    }
    if (v < 0 || (uint64_t)v >= c)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "label[%zu] = %lld is outside the class range [0, %zu)", s, (long long)v,
                           c);
    coef[s] = wraw ? load_f(type, wraw, (size_t)v) : 1.0;
    w_sum += coef[s];
  }
  const void* dyd = cpu_host->tensor_data(dy);
  const double g = red == RED_NONE  ? 0
                   : red == RED_SUM ? load_f(type, dyd, 0)
                   : w_sum != 0     ? load_f(type, dyd, 0) / w_sum
                                    : 0;
  for (size_t s = 0; s < samples; s++)
    coef[s] *= red == RED_NONE ? load_f(type, dyd, s) : g;
  CpuStop stop = {.ctx = ctx};
  SceJob j = {
      type, cpu_host->tensor_data(lp), cpu_host->tensor_mutable_data(dx), coef, lab, c, inner,
      &stop};
  cpu_host->parallel_for(pool_for(ctx, cpu_host->tensor_elem_count(lp)), nb, sce_rows, &j);
  return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
}

/* ======================================================================== */
/* BatchNormalizationGrad and LayerNormalizationGrad                        */
/* ======================================================================== */

/* BatchNormalizationGrad: X (N, C, spatial...), per channel c over its M =
 * N * spatial values, xhat = (x - mean[c]) inv[c]:
 *   dBias = sum dY, dScale = sum dY xhat,
 *   dX = scale[c] inv[c] (dY - dBias / M - xhat dScale / M).
 * Without the mean and inv_std_var inputs, the channel's batch statistics
 * come first, in double: mean = sum x / M, var = sum (x - mean)^2 / M (two
 * passes), inv = 1 / sqrt(var + epsilon). One task per channel. */
typedef struct BnJob {
  int32_t type;
  const void *dy, *x, *scale, *mean, *inv; /* mean, inv: NULL to compute */
  void *dx, *dscale, *dbias;
  size_t n, c, sp;
  double eps;
  CpuStop* stop;
  double* acc; /* float32: 6 C doubles of per-channel sums */
} BnJob;

#define BN_CHANNEL(T)                                                                              \
  static void bn_stats_##T(const BnJob* j, size_t c, double* mu, double* inv) {                    \
    const T* x = j->x;                                                                             \
    double s = 0, q = 0;                                                                           \
    for (size_t n = 0; n < j->n; n++) {                                                            \
      const T* p = x + (n * j->c + c) * j->sp;                                                     \
      for (size_t i = 0; i < j->sp; i++)                                                           \
        s += p[i];                                                                                 \
    }                                                                                              \
    const double m = s / (double)(j->n * j->sp);                                                   \
    for (size_t n = 0; n < j->n; n++) {                                                            \
      const T* p = x + (n * j->c + c) * j->sp;                                                     \
      for (size_t i = 0; i < j->sp; i++) {                                                         \
        const double d = (double)p[i] - m;                                                         \
        q += d * d;                                                                                \
      }                                                                                            \
    }                                                                                              \
    *mu = m;                                                                                       \
    *inv = 1.0 / sqrt(q / (double)(j->n * j->sp) + j->eps);                                        \
  }                                                                                                \
  static void bn_channel_##T(const BnJob* j, size_t c) {                                           \
    const T *dy = j->dy, *x = j->x;                                                                \
    double mu, inv;                                                                                \
    if (j->mean) {                                                                                 \
      mu = ((const T*)j->mean)[c];                                                                 \
      inv = ((const T*)j->inv)[c];                                                                 \
    } else                                                                                         \
      bn_stats_##T(j, c, &mu, &inv);                                                               \
    double sb = 0, ss = 0;                                                                         \
    for (size_t n = 0; n < j->n; n++) {                                                            \
      const size_t base = (n * j->c + c) * j->sp;                                                  \
      for (size_t i = 0; i < j->sp; i++) {                                                         \
        sb += dy[base + i];                                                                        \
        ss += (double)dy[base + i] * ((double)x[base + i] - mu) * inv;                             \
      }                                                                                            \
    }                                                                                              \
    if (j->dbias) ((T*)j->dbias)[c] = (T)sb;                                                       \
    if (j->dscale) ((T*)j->dscale)[c] = (T)ss;                                                     \
    const double m = (double)(j->n * j->sp), a = ((const T*)j->scale)[c] * inv;                    \
    const double mb = sb / m, ms = ss / m;                                                         \
    T* dx = j->dx;                                                                                 \
    for (size_t n = 0; n < j->n; n++) {                                                            \
      const size_t base = (n * j->c + c) * j->sp;                                                  \
      for (size_t i = 0; i < j->sp; i++) {                                                         \
        const double xh = ((double)x[base + i] - mu) * inv;                                        \
        dx[base + i] = (T)(a * ((double)dy[base + i] - mb - xh * ms));                             \
      }                                                                                            \
    }                                                                                              \
  }
BN_CHANNEL(double)

/* float32, channels [begin, end): each (n, c) plane summed in float
 * lanes, the plane sums added in double (cpu_grad_bn.h); dX in float. Each
 * pass walks the images in order and the range's channels within each
 * image (memory order); a channel's planes are summed in image order
 * whatever the range, so results do not depend on the thread count.
 * Without the statistics: the mean, then the second moment about it
 * together with the sums for dBias and dScale, then dX (X read three
 * times, dY twice). */
static void bn_range_float(const BnJob* j, size_t begin, size_t end) {
  const float *dy = j->dy, *x = j->x;
  const double cnt = (double)(j->n * j->sp);
  const size_t C = j->c;
  double *mu = j->acc, *inv = mu + C, *sb = inv + C, *ss = sb + C, *s1 = ss + C, *s2 = s1 + C;
  for (size_t c = begin; c < end; c++) {
    sb[c] = ss[c] = s1[c] = s2[c] = 0;
    if (j->mean) {
      mu[c] = ((const float*)j->mean)[c];
      inv[c] = ((const float*)j->inv)[c];
    } else
      mu[c] = inv[c] = 0;
  }
  if (!j->mean) {
    for (size_t n = 0; n < j->n; n++)
      for (size_t c = begin; c < end; c++)
        cpu_bn_moments(x + (n * C + c) * j->sp, j->sp, 0.0f, &mu[c], &inv[c]);
    for (size_t c = begin; c < end; c++)
      mu[c] /= cnt;
  }
  for (size_t n = 0; n < j->n; n++)
    for (size_t c = begin; c < end; c++) {
      const size_t base = (n * C + c) * j->sp;
      cpu_bn_grad_sums(x + base, dy + base, j->sp, (float)mu[c], &sb[c], &ss[c],
                       j->mean ? NULL : &s1[c], j->mean ? NULL : &s2[c]);
    }
  /* dX's coefficients replace channel c's sums: a in s1, k in s2, dBias / M
   * in sb */
  for (size_t c = begin; c < end; c++) {
    /* s1: the rounding residue of mu, removed from the variance */
    const double iv = j->mean ? inv[c] : 1.0 / sqrt((s2[c] - s1[c] * s1[c] / cnt) / cnt + j->eps);
    const double dsc = ss[c] * iv;
    if (j->dbias) ((float*)j->dbias)[c] = (float)sb[c];
    if (j->dscale) ((float*)j->dscale)[c] = (float)dsc;
    s1[c] = ((const float*)j->scale)[c] * iv;
    s2[c] = dsc / cnt * iv;
    sb[c] /= cnt;
  }
  float* dx = j->dx;
  for (size_t n = 0; n < j->n; n++)
    for (size_t c = begin; c < end; c++) {
      const size_t base = (n * C + c) * j->sp;
      cpu_bn_grad_dx(x + base, dy + base, dx + base, j->sp, (float)s1[c], (float)sb[c],
                     (float)mu[c], (float)s2[c]);
    }
}

static void bn_channels(void* user, size_t begin, size_t end) {
  const BnJob* j = user;
  if (j->type == ONYX_ELEM_FLOAT32) {
    size_t acc = 0;
    if (!cpu_stop_poll(j->stop, &acc, 5 * j->n * j->sp * (end - begin) + CPU_STOP_INTERVAL))
      bn_range_float(j, begin, end);
    return;
  }
  size_t acc = 0;
  for (size_t c = begin; c < end; c++) {
    if (cpu_stop_poll(j->stop, &acc, 4 * j->n * j->sp + 1)) return;
    bn_channel_double(j, c);
  }
}

/* Allocates dX (X's shape) and, when wanted, dScale and dBias (scale's
 * shape); *dscale / *dbias stay NULL when not. */
static OnyxStatus* norm_outputs(OnyxKernelContext* ctx, const OnyxTensor* x,
                                const OnyxTensor* scale, void** dx, void** dscale, void** dbias) {
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  OnyxTensor* t = NULL;
  OnyxStatus* st =
      cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(x), cpu_host->tensor_rank(x), &t);
  if (st) return st;
  *dx = cpu_host->tensor_mutable_data(t);
  void** outs[] = {dscale, dbias};
  for (size_t o = 1; o <= 2; o++) {
    *outs[o - 1] = NULL;
    if (cpu_host->ctx_output_count(ctx) <= o || !has_output(node, o)) continue;
    if ((st = cpu_host->ctx_output(ctx, o, cpu_host->tensor_dims(scale),
                                   cpu_host->tensor_rank(scale), &t)))
      return st;
    *outs[o - 1] = cpu_host->tensor_mutable_data(t);
  }
  return NULL;
}

static OnyxStatus* bn_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxTensor* in[5];
  const size_t n_in = cpu_host->ctx_input_count(ctx);
  for (size_t i = 0; i < 5; i++)
    in[i] = i < n_in ? cpu_host->ctx_input(ctx, i) : NULL;
  const char* names[] = {"dY", "X", "scale", "mean", "inv_std_var"};
  if (!in[0] || !in[1] || !in[2])
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "dY, X and scale are required");
  if (!in[3] != !in[4])
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "mean and inv_std_var must be given together or both left out");
  const bool stats = in[3] != NULL;
  int32_t type = ONYX_ELEM_FLOAT32;
  OnyxStatus* st = float_type(ctx, in, names, 5, &type);
  if (st) return st;
  if (!same_shape(in[0], in[1]))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "dY and X must have the same shape");
  const size_t r = cpu_host->tensor_rank(in[1]);
  const int64_t* d = cpu_host->tensor_dims(in[1]);
  if (r < 2)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X must be (N, C, ...), not %zu-D", r);
  const size_t c = (size_t)d[1];
  const double eps = cpu_host->node_attr_float(cpu_host->ctx_node(ctx), "epsilon", 1e-5f);
  if (!stats && !(eps >= 0.0))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "epsilon is %g; it must be >= 0", eps);
  for (size_t i = 2; i < (stats ? 5u : 3u); i++)
    if (cpu_host->tensor_rank(in[i]) != 1 || cpu_host->tensor_elem_count(in[i]) != c)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%s must be 1-D with %zu (C) values",
                           names[i], c);
  void *dx, *ds, *db;
  if ((st = norm_outputs(ctx, in[1], in[2], &dx, &ds, &db))) return st;
  const size_t n = (size_t)d[0], sp = cpu_dims_product(d, 2, r);
  if (!c) return NULL;
  if (!n || !sp) { /* no values: zero sums, empty dX */
    const size_t es = cpu_elem_size(type);
    if (ds) memset(ds, 0, c * es);
    if (db) memset(db, 0, c * es);
    return NULL;
  }
  CpuStop stop = {.ctx = ctx};
  BnJob j = {type,
             cpu_host->tensor_data(in[0]),
             cpu_host->tensor_data(in[1]),
             cpu_host->tensor_data(in[2]),
             stats ? cpu_host->tensor_data(in[3]) : NULL,
             stats ? cpu_host->tensor_data(in[4]) : NULL,
             dx,
             ds,
             db,
             n,
             c,
             sp,
             eps,
             &stop,
             NULL};
  size_t acc_bytes;
  if (type == ONYX_ELEM_FLOAT32 && (!cpu_mul_size(c, 6 * sizeof(double), &acc_bytes) ||
                                    !(j.acc = cpu_host->ctx_scratch(ctx, acc_bytes))))
    return cpu_oom(ctx);
  cpu_host->parallel_for(pool_for(ctx, cpu_host->tensor_elem_count(in[1])), c, bn_channels, &j);
  return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
}

/* LayerNormalizationGrad: X seen as (rows, width) with width the product
 * of dims [axis, rank); per row, xhat = (x - mean) inv and g = dY scale:
 *   dX = inv (g - mean(g) - xhat mean(g xhat)),
 * and per column dScale = sum_rows dY xhat, dBias = sum_rows dY. dX one
 * task per row; dScale and dBias one task per block of columns, each
 * summing the rows in order. */
typedef struct LnJob {
  int32_t type;
  const void *dy, *x, *scale, *mean, *inv;
  void *dx, *dscale, *dbias;
  size_t rows, width;
  CpuStop* stop;
} LnJob;

#define LN_KERNELS(T)                                                                              \
  static void ln_row_##T(const LnJob* j, size_t r) {                                               \
    const T* dy = (const T*)j->dy + r * j->width;                                                  \
    const T* x = (const T*)j->x + r * j->width;                                                    \
    const T* sc = j->scale;                                                                        \
    T* dx = (T*)j->dx + r * j->width;                                                              \
    const double mu = ((const T*)j->mean)[r], inv = ((const T*)j->inv)[r];                         \
    double sg = 0, sgx = 0;                                                                        \
    for (size_t i = 0; i < j->width; i++) {                                                        \
      const double g = (double)dy[i] * sc[i];                                                      \
      sg += g;                                                                                     \
      sgx += g * ((double)x[i] - mu) * inv;                                                        \
    }                                                                                              \
    const double w = (double)j->width, mg = sg / w, mgx = sgx / w;                                 \
    for (size_t i = 0; i < j->width; i++) {                                                        \
      const double xh = ((double)x[i] - mu) * inv;                                                 \
      dx[i] = (T)(inv * ((double)dy[i] * sc[i] - mg - xh * mgx));                                  \
    }                                                                                              \
  }                                                                                                \
  static void ln_cols_##T(const LnJob* j, size_t c0, size_t c1) {                                  \
    T* ds = j->dscale;                                                                             \
    T* db = j->dbias;                                                                              \
    double as[64], ab[64];                                                                         \
    for (size_t c = 0; c < c1 - c0; c++)                                                           \
      as[c] = ab[c] = 0;                                                                           \
    for (size_t r = 0; r < j->rows; r++) {                                                         \
      const T* dy = (const T*)j->dy + r * j->width;                                                \
      const T* x = (const T*)j->x + r * j->width;                                                  \
      const double mu = ((const T*)j->mean)[r], inv = ((const T*)j->inv)[r];                       \
      for (size_t c = c0; c < c1; c++) {                                                           \
        ab[c - c0] += dy[c];                                                                       \
        as[c - c0] += (double)dy[c] * ((double)x[c] - mu) * inv;                                   \
      }                                                                                            \
    }                                                                                              \
    for (size_t c = c0; c < c1; c++) {                                                             \
      if (ds) ds[c] = (T)as[c - c0];                                                               \
      if (db) db[c] = (T)ab[c - c0];                                                               \
    }                                                                                              \
  }
LN_KERNELS(float)
LN_KERNELS(double)

#define LN_COL_BLOCK 64

static void ln_rows(void* user, size_t begin, size_t end) {
  const LnJob* j = user;
  size_t acc = 0;
  for (size_t r = begin; r < end; r++) {
    if (cpu_stop_poll(j->stop, &acc, 2 * j->width + 1)) return;
    if (j->type == ONYX_ELEM_FLOAT32)
      ln_row_float(j, r);
    else
      ln_row_double(j, r);
  }
}

static void ln_col_blocks(void* user, size_t begin, size_t end) {
  const LnJob* j = user;
  size_t acc = 0;
  for (size_t b = begin; b < end; b++) {
    const size_t c0 = b * LN_COL_BLOCK,
                 c1 = j->width - c0 < LN_COL_BLOCK ? j->width : c0 + LN_COL_BLOCK;
    if (cpu_stop_poll(j->stop, &acc, j->rows * (c1 - c0) + 1)) return;
    if (j->type == ONYX_ELEM_FLOAT32)
      ln_cols_float(j, c0, c1);
    else
      ln_cols_double(j, c0, c1);
  }
}

static OnyxStatus* ln_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  const OnyxTensor* in[5];
  for (size_t i = 0; i < 5; i++)
    in[i] = cpu_host->ctx_input(ctx, i);
  const char* names[] = {"dY", "X", "scale", "mean", "inv_std_var"};
  int32_t type = ONYX_ELEM_FLOAT32;
  OnyxStatus* st = float_type(ctx, in, names, 5, &type);
  if (st) return st;
  if (!same_shape(in[0], in[1]))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "dY and X must have the same shape");
  const size_t r = cpu_host->tensor_rank(in[1]);
  const int64_t* d = cpu_host->tensor_dims(in[1]);
  const int64_t axis_attr = cpu_host->node_attr_int(node, "axis", -1);
  size_t axis = 0;
  if (r == 0 || !cpu_norm_axis(axis_attr, r, false, &axis))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                         (long long)axis_attr, r);
  const size_t rows = cpu_dims_product(d, 0, axis), width = cpu_dims_product(d, axis, r);
  if (cpu_host->tensor_elem_count(in[2]) != width)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "scale must hold %zu values (X's dims from axis %zu on)", width, axis);
  for (size_t i = 3; i < 5; i++)
    if (cpu_host->tensor_elem_count(in[i]) != rows)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "%s must hold %zu values (X's dims before axis %zu)", names[i], rows,
                           axis);
  void *dx, *ds, *db;
  if ((st = norm_outputs(ctx, in[1], in[2], &dx, &ds, &db))) return st;
  if (!width) return NULL;
  CpuStop stop = {.ctx = ctx};
  LnJob j = {type,
             cpu_host->tensor_data(in[0]),
             cpu_host->tensor_data(in[1]),
             cpu_host->tensor_data(in[2]),
             cpu_host->tensor_data(in[3]),
             cpu_host->tensor_data(in[4]),
             dx,
             ds,
             db,
             rows,
             width,
             &stop};
  OnyxThreadPool* pool = pool_for(ctx, cpu_host->tensor_elem_count(in[1]));
  if (rows) cpu_host->parallel_for(pool, rows, ln_rows, &j);
  if ((ds || db) && !cpu_stop_seen(&stop))
    cpu_host->parallel_for(pool, (width + LN_COL_BLOCK - 1) / LN_COL_BLOCK, ln_col_blocks, &j);
  return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
}

/* ======================================================================== */
/* GatherGrad: dX (X_shape) = 0, dX[o, idx[j], i] += dY[o, j, i]            */
/* ======================================================================== */

/* The indices sorted by (row, j) and cut into groups of one destination
 * row: tasks over (outer, group, block of inner columns), each adding its
 * group's dY rows in order j = 0, 1, ..., so the sums do not depend on the
 * threads, and no two tasks write one element. */
#define GG_BLOCK 1024

typedef struct GgPair {
  int64_t row; /* wrapped into [0, axis_len) */
  size_t j;    /* position in indices */
} GgPair;

static int gg_pair_cmp(const void* a, const void* b) {
  const GgPair *x = a, *y = b;
  if (x->row != y->row) return x->row < y->row ? -1 : 1;
  return x->j < y->j ? -1 : x->j > y->j;
}

typedef struct GgJob {
  int32_t type;
  const void* dy;
  void* dx;
  const GgPair* pairs;
  const size_t* group; /* n_groups + 1 starts into pairs */
  size_t n_idx, n_groups, axis_len, inner, blocks;
  CpuStop* stop;
} GgJob;

static void gg_tasks(void* user, size_t begin, size_t end) {
  const GgJob* j = user;
  size_t acc = 0;
  /* (o, gi, b) of task t, stepped along: a task may be a single element */
  size_t b = begin % j->blocks, gi = begin / j->blocks % j->n_groups,
         o = begin / j->blocks / j->n_groups;
  for (size_t t = begin; t < end; t++) {
    if (t > begin && ++b == j->blocks) {
      b = 0;
      if (++gi == j->n_groups) gi = 0, o++;
    }
    const size_t c0 = b * GG_BLOCK, c1 = j->inner - c0 < GG_BLOCK ? j->inner : c0 + GG_BLOCK;
    const size_t p0 = j->group[gi], p1 = j->group[gi + 1];
    if (cpu_stop_poll(j->stop, &acc, (p1 - p0) * (c1 - c0) + 1)) return;
    const size_t dst = (o * j->axis_len + (size_t)j->pairs[p0].row) * j->inner;
    for (size_t p = p0; p < p1; p++) {
      const size_t src = (o * j->n_idx + j->pairs[p].j) * j->inner;
      if (j->type == ONYX_ELEM_FLOAT32) {
        const float* sv = (const float*)j->dy + src;
        float* dd = (float*)j->dx + dst;
        for (size_t c = c0; c < c1; c++)
          dd[c] += sv[c];
      } else {
        const double* sv = (const double*)j->dy + src;
        double* dd = (double*)j->dx + dst;
        for (size_t c = c0; c < c1; c++)
          dd[c] += sv[c];
      }
    }
  }
}

static OnyxStatus* gg_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  const OnyxTensor* shape = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* indices = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* dy = cpu_host->ctx_input(ctx, 2);
  const OnyxTensor* ts[] = {dy};
  const char* names[] = {"dY"};
  int32_t type = ONYX_ELEM_FLOAT32;
  OnyxStatus* st = float_type(ctx, ts, names, 1, &type);
  if (st) return st;
  int64_t xd[CPU_MAX_RANK];
  size_t xr = 0;
  if ((st = cpu_read_ints(ctx, shape, "X_shape", xd, CPU_MAX_RANK, &xr))) return st;
  if (cpu_host->tensor_rank(shape) != 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X_shape must be 1-D");
  for (size_t i = 0; i < xr; i++)
    if (xd[i] < 0)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X_shape[%zu] is %lld (negative)", i,
                           (long long)xd[i]);
  const int64_t axis_attr = cpu_host->node_attr_int(node, "axis", 0);
  size_t axis = 0;
  if (xr == 0 || !cpu_norm_axis(axis_attr, xr, false, &axis))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                         (long long)axis_attr, xr);
  size_t x_count;
  if (!cpu_dims_count(xd, xr, &x_count))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X_shape's element count overflows");
  /* dY must be X_shape[:axis] + indices.shape + X_shape[axis+1:] */
  const size_t ir = cpu_host->tensor_rank(indices), yr = cpu_host->tensor_rank(dy);
  const int64_t* id = cpu_host->tensor_dims(indices);
  const int64_t* yd = cpu_host->tensor_dims(dy);
  bool ok = yr == xr - 1 + ir;
  for (size_t i = 0; ok && i < yr; i++) {
    const int64_t want = i < axis ? xd[i] : i < axis + ir ? id[i - axis] : xd[i - ir + 1];
    ok = yd[i] == want;
  }
  if (!ok)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "dY's shape must be X_shape[:axis] + indices' shape + X_shape[axis+1:]");
  OnyxTensor* dx = NULL;
  if ((st = cpu_host->ctx_output(ctx, 0, xd, xr, &dx))) return st;
  if (!x_count) return NULL;
  const size_t es = cpu_elem_size(type);
  memset(cpu_host->tensor_mutable_data(dx), 0, x_count * es);
  const size_t n_idx = cpu_host->tensor_elem_count(indices);
  const size_t axis_len = (size_t)xd[axis], outer = cpu_dims_product(xd, 0, axis),
               inner = cpu_dims_product(xd, axis + 1, xr);
  if (!n_idx || !inner || !outer) return NULL;
  size_t bytes;
  if (!cpu_mul_size(n_idx, sizeof(GgPair) + sizeof(size_t), &bytes) ||
      !cpu_add_size(bytes, sizeof(size_t), &bytes))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "indices has too many elements");
  GgPair* pairs = cpu_host->ctx_scratch(ctx, bytes);
  if (!pairs) return cpu_oom(ctx);
  size_t* group = (size_t*)(pairs + n_idx);
  const int32_t it = cpu_host->tensor_elem_type(indices);
  const void* iraw = cpu_host->tensor_data(indices);
  for (size_t k = 0; k < n_idx; k++) {
    int64_t v = it == ONYX_ELEM_INT32 ? ((const int32_t*)iraw)[k] : ((const int64_t*)iraw)[k];
    const int64_t orig = v;
    if (v < 0) v += (int64_t)axis_len;
    if (v < 0 || (uint64_t)v >= axis_len)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "indices[%zu] = %lld is out of range for axis %zu of size %zu", k,
                           (long long)orig, axis, axis_len);
    pairs[k] = (GgPair){v, k};
  }
  /* Sorted by (row, j): a counting sort (stable, j ascending within a row)
   * when the axis is not much longer than the indices, else qsort. */
  size_t* count = NULL;
  GgPair* sorted = NULL;
  if (axis_len <= 4 * n_idx + 4096) {
    count = cpu_host->ctx_scratch(ctx, (axis_len + 1) * sizeof *count);
    sorted = cpu_host->ctx_scratch(ctx, n_idx * sizeof *sorted);
  }
  if (count && sorted) {
    memset(count, 0, (axis_len + 1) * sizeof *count);
    for (size_t k = 0; k < n_idx; k++)
      count[pairs[k].row + 1]++;
    for (size_t r = 0; r < axis_len; r++)
      count[r + 1] += count[r];
    for (size_t k = 0; k < n_idx; k++)
      sorted[count[pairs[k].row]++] = pairs[k];
    memcpy(pairs, sorted, n_idx * sizeof *pairs);
  } else {
    qsort(pairs, n_idx, sizeof *pairs, gg_pair_cmp);
  }
  size_t n_groups = 0;
  for (size_t k = 0; k < n_idx; k++)
    if (!k || pairs[k].row != pairs[k - 1].row) group[n_groups++] = k;
  group[n_groups] = n_idx;
  CpuStop stop = {.ctx = ctx};
  GgJob j = {type,
             cpu_host->tensor_data(dy),
             cpu_host->tensor_mutable_data(dx),
             pairs,
             group,
             n_idx,
             n_groups,
             axis_len,
             inner,
             (inner + GG_BLOCK - 1) / GG_BLOCK,
             &stop};
  size_t tasks;
  if (!cpu_mul_size(outer, n_groups, &tasks) || !cpu_mul_size(tasks, j.blocks, &tasks))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "dY has too many elements");
  cpu_host->parallel_for(pool_for(ctx, cpu_host->tensor_elem_count(dy)), tasks, gg_tasks, &j);
  return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
}

/* ======================================================================== */
/* DropoutGrad: dX = dY mask / (1 - ratio)                                  */
/* ======================================================================== */

typedef struct DoJob {
  int32_t type;
  const void* dy;
  const uint8_t* mask;
  void* dx;
  double scale;
  size_t count;
  CpuStop* stop;
} DoJob;

static void do_tasks(void* user, size_t begin, size_t end) {
  const DoJob* j = user;
  size_t acc = 0;
  for (size_t t = begin; t < end; t++) {
    const size_t s = t * EW_CHUNK, n = j->count - s < EW_CHUNK ? j->count - s : EW_CHUNK;
    if (cpu_stop_poll(j->stop, &acc, n)) return;
    const uint8_t* restrict m = j->mask + s;
    if (j->type == ONYX_ELEM_FLOAT32) {
      const float* restrict dy = (const float*)j->dy + s;
      float* restrict dx = (float*)j->dx + s;
      const float sc = (float)j->scale;
      for (size_t i = 0; i < n; i++)
        dx[i] = m[i] ? dy[i] * sc : 0.0f;
    } else {
      const double* restrict dy = (const double*)j->dy + s;
      double* restrict dx = (double*)j->dx + s;
      for (size_t i = 0; i < n; i++)
        dx[i] = m[i] ? dy[i] * j->scale : 0.0;
    }
  }
}

static OnyxStatus* do_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const size_t n_in = cpu_host->ctx_input_count(ctx);
  const OnyxTensor* dy = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* mask = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* ratio = n_in > 2 ? cpu_host->ctx_input(ctx, 2) : NULL;
  const OnyxTensor* ts[] = {dy};
  const char* names[] = {"dY"};
  int32_t type = ONYX_ELEM_FLOAT32;
  OnyxStatus* st = float_type(ctx, ts, names, 1, &type);
  if (st) return st;
  if (cpu_host->tensor_elem_type(mask) != ONYX_ELEM_BOOL || !same_shape(dy, mask))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "mask must be bool with dY's shape");
  double r = 0.5;
  if (ratio) {
    const int32_t rt = cpu_host->tensor_elem_type(ratio);
    if (cpu_host->tensor_elem_count(ratio) != 1 ||
        (rt != ONYX_ELEM_FLOAT32 && rt != ONYX_ELEM_FLOAT64))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "ratio must be one float value");
    r = load_f(rt, cpu_host->tensor_data(ratio), 0);
  }
  if (!(r >= 0.0 && r < 1.0))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "ratio %g is outside [0, 1)", r);
  OnyxTensor* dx = NULL;
  if ((st =
           cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(dy), cpu_host->tensor_rank(dy), &dx)))
    return st;
  const size_t count = cpu_host->tensor_elem_count(dy);
  if (!count) return NULL;
  CpuStop stop = {.ctx = ctx};
  DoJob j = {type,
             cpu_host->tensor_data(dy),
             cpu_host->tensor_data(mask),
             cpu_host->tensor_mutable_data(dx),
             1.0 / (1.0 - r),
             count,
             &stop};
  cpu_host->parallel_for(pool_for(ctx, count), (count + EW_CHUNK - 1) / EW_CHUNK, do_tasks, &j);
  return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
}

/* ======================================================================== */
/* Registration                                                             */
/* ======================================================================== */

#define GDEF(op, tc, comp, ud)                                                                     \
  {                                                                                                \
    .struct_size = sizeof(OnyxKernelDef), .domain = TRAINING, .op_type = op, .since_version = 1,   \
    .end_version = ONYX_OPSET_LATEST, .type_constraints = tc,                                      \
    .type_constraint_count = sizeof(tc) / sizeof(tc[0]), .compute = comp, .user_data = ud          \
  }

OnyxStatus* cpu_register_grad(OnyxKernelRegistry* r) {
  const OnyxKernelDef defs[] = {
      GDEF("ReluGrad", TC_T, ew_compute, (void*)(intptr_t)EW_RELU),
      GDEF("SigmoidGrad", TC_T, ew_compute, (void*)(intptr_t)EW_SIGMOID),
      GDEF("TanhGrad", TC_T, ew_compute, (void*)(intptr_t)EW_TANH),
      GDEF("GeluGrad", TC_T, ew_compute, (void*)(intptr_t)EW_GELU),
      GDEF("FastGeluGrad", TC_T, ew_compute, (void*)(intptr_t)EW_FAST_GELU),
      GDEF("SoftmaxGrad", TC_T, sm_compute, (void*)(intptr_t)0),
      GDEF("LogSoftmaxGrad", TC_T, sm_compute, (void*)(intptr_t)1),
      GDEF("SoftmaxCrossEntropyLossGrad", TC_T_IND, sce_compute, NULL),
      GDEF("BatchNormalizationGrad", TC_T, bn_compute, NULL),
      GDEF("LayerNormalizationGrad", TC_T, ln_compute, NULL),
      GDEF("GatherGrad", TC_T_IND, gg_compute, NULL),
      GDEF("DropoutGrad", TC_T_T1, do_compute, NULL),
  };
  for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
    OnyxStatus* st = cpu_host->register_kernel(r, &defs[i]);
    if (st) return st;
  }
  return cpu_register_grad_conv(r);
}
