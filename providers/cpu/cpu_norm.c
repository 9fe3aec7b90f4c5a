/* cpu_norm.c — the CPU provider's normalization kernels and Softmax:
 * BatchNormalization, LayerNormalization and Softmax (float32 rows in
 * AVX-512 / AVX2 where the GEMM kernel runs them), and the
 * double-precision InstanceNormalization, GroupNormalization,
 * RMSNormalization, LpNormalization, MeanVarianceNormalization and LRN. */
#include "cpu_avx2.h"
#include "cpu_grad_bn.h"
#include "cpu_nn_common.h"
#include "cpu_nnop_util.h"
#include "cpu_types.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* BatchNormalization (inference; training mode from opset 14)              */
/* ======================================================================== */

typedef struct BatchNormState {
  const OnyxNode* node;
  double epsilon;
  int training;    /* opset 14+ training_mode: batch statistics */
  double momentum; /* running = running * momentum + batch * (1 - momentum) */
} BatchNormState;

/* How a version range of BatchNormalization says "training". */
typedef enum BnTraining { BN_BY_OUTPUTS, BN_BY_ATTR } BnTraining;
static const BnTraining BN_OUTPUTS = BN_BY_OUTPUTS, BN_ATTR = BN_BY_ATTR;

static OnyxStatus* bn_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  /* Opset 14+ says training through training_mode; before, a node asking
   * for the running/saved statistics outputs is a training node. */
  const int training = *(const BnTraining*)user_data == BN_BY_ATTR
                           ? cpu_host->node_attr_int(node, "training_mode", 0) != 0
                           : nn_has_output(node, 1) || nn_has_output(node, 2) ||
                                 nn_has_output(node, 3) || nn_has_output(node, 4);
  if (training && *(const BnTraining*)user_data != BN_BY_ATTR)
    return cpu_error(node, ONYX_NOT_IMPLEMENTED,
                     "training mode before opset 14 (saved statistics outputs) not supported");
  BatchNormState* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->node = node;
  s->epsilon = cpu_host->node_attr_float(node, "epsilon", 1e-5f);
  s->training = training;
  s->momentum = cpu_host->node_attr_float(node, "momentum", 0.9f);
  *state = s;
  return NULL;
}

static double load_real(const void* p, OnyxElemType t, size_t i) {
  return t == ONYX_ELEM_FLOAT32 ? ((const float*)p)[i] : ((const double*)p)[i];
}

typedef struct BnJob {
  const void* x;
  void* y;
  const double *a, *b; /* y = x * a + b, per channel or per element */
  size_t channels, inner;
  int per_element; /* opset < 9 with spatial = 0: parameters of shape (C, D1, ...) */
} BnJob;

#define DEFINE_BN(T)                                                                               \
  static void bn_planes_##T(void* user, size_t begin, size_t end) {                                \
    const BnJob* j = user;                                                                         \
    for (size_t p = begin; p < end; p++) {                                                         \
      const size_t c = p % j->channels;                                                            \
      const T* x = (const T*)j->x + p * j->inner;                                                  \
      T* y = (T*)j->y + p * j->inner;                                                              \
      if (j->per_element) {                                                                        \
        const double* a = j->a + c * j->inner;                                                     \
        const double* b = j->b + c * j->inner;                                                     \
        for (size_t i = 0; i < j->inner; i++)                                                      \
          y[i] = (T)(x[i] * a[i] + b[i]);                                                          \
      } else {                                                                                     \
        const T a = (T)j->a[c], b = (T)j->b[c];                                                    \
        for (size_t i = 0; i < j->inner; i++)                                                      \
          y[i] = x[i] * a + b;                                                                     \
      }                                                                                            \
    }                                                                                              \
  }
DEFINE_BN(float)
DEFINE_BN(double)

/* Folds scale, bias, mean and var into y = x * a + b. */
static OnyxStatus* bn_coefficients(const BatchNormState* s, OnyxKernelContext* ctx, size_t count,
                                   BnJob* job) {
  const OnyxElemType t = cpu_host->tensor_elem_type(cpu_host->ctx_input(ctx, 0));
  const void* p[4];
  for (size_t i = 0; i < 4; i++) {
    const OnyxTensor* in = cpu_host->ctx_input(ctx, i + 1);
    if (!in || cpu_host->tensor_elem_count(in) != count || cpu_host->tensor_elem_type(in) != t)
      return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                       "input %zu must have %zu elements of X's type", i + 1, count);
    p[i] = cpu_host->tensor_data(in);
  }
  double* a;
  OnyxStatus* st = nn_scratch(ctx, 2 * count * sizeof(double), (void**)&a);
  if (st) return st;
  for (size_t i = 0; i < count; i++) {
    a[i] = load_real(p[0], t, i) / sqrt(load_real(p[3], t, i) + s->epsilon);
    a[count + i] = load_real(p[1], t, i) - load_real(p[2], t, i) * a[i];
  }
  job->a = a, job->b = a + count;
  return NULL;
}

/* Training mode (opset 14+): normalizes with the batch's own mean and
 * (biased) variance per channel, and writes the updated running statistics
 * to the optional outputs 1 and 2. A task takes a range of channels,
 * computes their statistics and then writes their Y planes: one pass over
 * X for the mean, one for the variance about it, one for Y, each in memory
 * order (images, then the range's channels).
 *   float32: each plane's sums in float lanes about a reference value (0
 *     for the mean, the float32 mean for the variance), the planes' sums
 *     added in double (cpu_grad_bn.h); the variance is the second moment
 *     about the float32 mean less the square of that mean's residue (the
 *     first moment about it), i.e. the moment about the double mean. Y =
 *     X a + b in float32.
 *   float64: plain sums in double, two passes. */
typedef struct BnTrainJob {
  OnyxElemType t;
  const void *x, *scale, *bias;
  void* y;
  double *mean, *var, *r, *q; /* C each; r, q: float32 sums about the mean */
  size_t n, channels, inner;
  double epsilon;
} BnTrainJob;

/* Channels [begin, end): each pass walks the images in order and the
 * range's channels within each image, so memory is read in order. */
static void bn_train_channels(void* user, size_t begin, size_t end) {
  const BnTrainJob* j = user;
  const size_t C = j->channels, inner = j->inner;
  const double count = (double)(j->n * inner);
  double *mean = j->mean, *var = j->var;
  for (size_t c = begin; c < end; c++)
    mean[c] = var[c] = j->r[c] = j->q[c] = 0.0;
  if (j->t == ONYX_ELEM_FLOAT32) {
    const float* x = j->x;
    for (size_t n = 0; n < j->n; n++)
      for (size_t c = begin; c < end; c++)
        cpu_bn_moments(x + (n * C + c) * inner, inner, 0.0f, &mean[c], &var[c]);
    for (size_t c = begin; c < end; c++)
      mean[c] = count > 0 ? mean[c] / count : 0.0;
    for (size_t n = 0; n < j->n; n++)
      for (size_t c = begin; c < end; c++)
        cpu_bn_moments(x + (n * C + c) * inner, inner, (float)mean[c], &j->r[c], &j->q[c]);
    for (size_t c = begin; c < end; c++) {
      const double v = count > 0 ? (j->q[c] - j->r[c] * j->r[c] / count) / count : 0.0;
      var[c] = v > 0.0 ? v : 0.0;
    }
  } else {
    const double* x = j->x;
    for (size_t n = 0; n < j->n; n++)
      for (size_t c = begin; c < end; c++)
        for (size_t i = 0; i < inner; i++)
          mean[c] += x[(n * C + c) * inner + i];
    for (size_t c = begin; c < end; c++)
      mean[c] = count > 0 ? mean[c] / count : 0.0;
    for (size_t n = 0; n < j->n; n++)
      for (size_t c = begin; c < end; c++)
        for (size_t i = 0; i < inner; i++) {
          const double d = x[(n * C + c) * inner + i] - mean[c];
          var[c] += d * d;
        }
    for (size_t c = begin; c < end; c++)
      var[c] = count > 0 ? var[c] / count : 0.0;
  }
  /* y = x a + b; r and q now hold a and b */
  for (size_t c = begin; c < end; c++) {
    j->r[c] = load_real(j->scale, j->t, c) / sqrt(var[c] + j->epsilon);
    j->q[c] = load_real(j->bias, j->t, c) - mean[c] * j->r[c];
  }
  for (size_t n = 0; n < j->n; n++)
    for (size_t c = begin; c < end; c++) {
      const size_t at = (n * C + c) * inner;
      const double a = j->r[c], b = j->q[c];
      if (j->t == ONYX_ELEM_FLOAT32)
        cpu_bn_affine((const float*)j->x + at, (float*)j->y + at, inner, (float)a, (float)b);
      else
        for (size_t i = 0; i < inner; i++)
          ((double*)j->y)[at + i] = ((const double*)j->x)[at + i] * a + b;
    }
}

static OnyxStatus* bn_training(const BatchNormState* s, OnyxKernelContext* ctx, const OnyxTensor* x,
                               BnJob* job) {
  const OnyxElemType t = cpu_host->tensor_elem_type(x);
  const int64_t* dx = cpu_host->tensor_dims(x);
  const size_t C = job->channels, inner = job->inner, N = (size_t)dx[0];
  const void* p[4];
  for (size_t i = 0; i < 4; i++) {
    const OnyxTensor* in = cpu_host->ctx_input(ctx, i + 1);
    if (!in || cpu_host->tensor_elem_count(in) != C || cpu_host->tensor_elem_type(in) != t)
      return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                       "input %zu must have %zu elements of X's type", i + 1, C);
    p[i] = cpu_host->tensor_data(in);
  }
  double* a;
  OnyxStatus* st = nn_scratch(ctx, 4 * C * sizeof(double), (void**)&a);
  if (st) return st;
  double *mean = a, *var = a + C;
  BnTrainJob tj = {t,         job->x,    p[0], p[1], job->y, mean,      var,
                   a + 2 * C, a + 3 * C, N,    C,    inner,  s->epsilon};
  const size_t elems = N * C * inner;
  cpu_host->parallel_for(elems >= 32768 ? cpu_host->ctx_thread_pool(ctx) : NULL, C,
                         bn_train_channels, &tj);
  for (size_t o = 1; o <= 2; o++) { /* running_mean, running_var */
    if (cpu_host->ctx_output_count(ctx) <= o || !nn_has_output(s->node, o)) continue;
    OnyxTensor* r;
    int64_t dims[1] = {(int64_t)C};
    if ((st = cpu_host->ctx_output(ctx, o, dims, 1, &r))) return st;
    const void* prev = p[o + 1]; /* input 3: mean, input 4: var */
    const double* batch = o == 1 ? mean : var;
    for (size_t c = 0; c < C; c++) {
      double v = load_real(prev, t, c) * s->momentum + batch[c] * (1.0 - s->momentum);
      if (t == ONYX_ELEM_FLOAT32)
        ((float*)cpu_host->tensor_mutable_data(r))[c] = (float)v;
      else
        ((double*)cpu_host->tensor_mutable_data(r))[c] = v;
    }
  }
  return NULL;
}

static OnyxStatus* bn_compute(void* state, OnyxKernelContext* ctx) {
  const BatchNormState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const size_t r = cpu_host->tensor_rank(x);
  const int64_t* dx = cpu_host->tensor_dims(x);
  const OnyxElemType t = cpu_host->tensor_elem_type(x);
  if (r < 2 || (t != ONYX_ELEM_FLOAT32 && t != ONYX_ELEM_FLOAT64))
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                     "X must be float32/float64 of rank >= 2 (got type %d, rank %zu)", (int)t, r);
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, dx, r, &y);
  if (st) return st;
  BnJob job = {cpu_host->tensor_data(x),
               cpu_host->tensor_mutable_data(y),
               NULL,
               NULL,
               (size_t)dx[1],
               cpu_dims_product(dx, 2, r),
               0};
  /* spatial = 0 (opset < 9) gives parameters one per (C, D1, ...) element. */
  const OnyxTensor* scale = cpu_host->ctx_input(ctx, 1);
  job.per_element = scale && cpu_host->tensor_elem_count(scale) != job.channels &&
                    cpu_host->tensor_elem_count(scale) == job.channels * job.inner;
  if (s->training) /* statistics and Y, per channel */
    return bn_training(s, ctx, x, &job);
  if ((st = bn_coefficients(s, ctx, job.per_element ? job.channels * job.inner : job.channels,
                            &job))) {
    return st;
  }
  if (cpu_host->tensor_elem_count(y) == 0) return NULL;
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), (size_t)dx[0] * job.channels,
                         t == ONYX_ELEM_FLOAT32 ? bn_planes_float : bn_planes_double, &job);
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* AVX-512 and AVX2 rows for float32 Softmax and LayerNormalization          */
/* ------------------------------------------------------------------------ */

/* The GEMM kernel the machine runs (AVX-512 or AVX2) picks these. */
static int use_avx512(void) {
  return cpu_gemm_isa_level() == CPU_ISA_AVX512;
}

static int use_avx2(void) {
  return cpu_gemm_isa_level() == CPU_ISA_AVX2;
}

#if CPU_NN_X86
#define NN_AVX512 __attribute__((target("avx512f,avx512dq,fma")))

static inline NN_AVX512 __mmask16 tail_mask(size_t left) {
  return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

/* e^x, 16 lanes: x = n ln 2 + r with |r| <= ln 2 / 2, e^r by a degree-6
 * polynomial (relative error below 3e-7), 2^n by scalef. Where e^x is below
 * the smallest normal float (x < ln FLT_MIN = -87.34) the result is 0, never
 * a denormal; NaN stays NaN. */
static inline NN_AVX512 __m512 exp16(__m512 x) {
  const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33f), _CMP_NLT_UQ);
  x = _mm512_max_ps(_mm512_set1_ps(-87.0f), x); /* NaN kept (second operand) */
  x = _mm512_min_ps(_mm512_set1_ps(88.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_mov_ps(normal, _mm512_scalef_ps(p, n));
}

/* y = softmax(x) over n contiguous values; y may be x. */
static NN_AVX512 void softmax_row_avx512(const float* x, float* y, size_t n) {
  __m512 vm = _mm512_set1_ps(-INFINITY);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    vm = _mm512_max_ps(vm, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + i));
  }
  const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(vm));
  __m512 vs = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mx));
    _mm512_mask_storeu_ps(y + i, m, e);
    vs = _mm512_mask_add_ps(vs, m, vs, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vs));
  const __m512 tiny = _mm512_set1_ps(FLT_MIN);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), inv);
    /* Below FLT_MIN (not NaN): 0, as the scalar rows (SOFTMAX_TINY_float). */
    const __mmask16 keep = m & ~_mm512_cmp_ps_mask(v, tiny, _CMP_LT_OQ);
    _mm512_mask_storeu_ps(y + i, m, _mm512_maskz_mov_ps(keep, v));
  }
}

/* One LayerNormalization row: mean, then the variance about it (two passes,
 * as the scalar code), then y = (x - mean) * inv_std * scale + bias. */
static NN_AVX512 void ln_row_avx512(const float* x, float* y, const float* scale, const float* bias,
                                    size_t n, float eps, float* mean_out, float* inv_out) {
  __m512 acc = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16)
    acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(tail_mask(n - i), x + i));
  const float mean = _mm512_reduce_add_ps(acc) / (float)n;
  const __m512 vmean = _mm512_set1_ps(mean);
  acc = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + i), vmean);
    acc = _mm512_fmadd_ps(d, d, acc);
  }
  const float inv = 1.0f / sqrtf(_mm512_reduce_add_ps(acc) / (float)n + eps);
  const __m512 vinv = _mm512_set1_ps(inv);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmean), vinv);
    v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, scale + i));
    if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + i));
    _mm512_mask_storeu_ps(y + i, m, v);
  }
  *mean_out = mean;
  *inv_out = inv;
}
/* The same three with AVX2 (8 lanes; masked loads for the tails). */
#define NN_AVX2 __attribute__((target("avx2,fma,avx")))

static inline NN_AVX2 __m256i tail_mask8(size_t left) {
  const int n = left >= 8 ? 8 : (int)left;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline NN_AVX2 float hsum8(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_add_ss(a, _mm_movehdup_ps(a)));
}

static inline NN_AVX2 float hmax8(__m256 v) {
  __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_max_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_max_ss(a, _mm_movehdup_ps(a)));
}

/* exp16's method and rule on 8 lanes; 2^n is built in the exponent field
 * (n in [-126, 127] after the clamps, so p * 2^n is exact, as scalef). */
static inline NN_AVX2 __m256 exp8(__m256 x) {
  const __m256 normal = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33f), _CMP_NLT_UQ);
  x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x); /* NaN kept (second operand) */
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(normal, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

static NN_AVX2 void softmax_row_avx2(const float* x, float* y, size_t n) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  __m256 vm = ninf;
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
  if (i < n) {
    const __m256i m = tail_mask8(n - i);
    vm = _mm256_max_ps(
        vm, _mm256_blendv_ps(ninf, _mm256_maskload_ps(x + i, m), _mm256_castsi256_ps(m)));
  }
  const __m256 mx = _mm256_set1_ps(hmax8(vm));
  __m256 vs = _mm256_setzero_ps();
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mx));
    _mm256_storeu_ps(y + i, e);
    vs = _mm256_add_ps(vs, e);
  }
  if (i < n) {
    const __m256i m = tail_mask8(n - i);
    const __m256 e = _mm256_and_ps(_mm256_castsi256_ps(m),
                                   exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), mx)));
    cpu_store_first_avx2(y + i, e, n - i);
    vs = _mm256_add_ps(vs, e);
  }
  const __m256 inv = _mm256_set1_ps(1.0f / hsum8(vs));
  const __m256 tiny = _mm256_set1_ps(FLT_MIN);
  /* Below FLT_MIN (not NaN): 0, as the scalar rows (SOFTMAX_TINY_float).
   * Masked loads only for the tail, and no masked stores
   * (cpu_store_first_avx2). */
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(y + i), inv);
    _mm256_storeu_ps(y + i, _mm256_andnot_ps(_mm256_cmp_ps(v, tiny, _CMP_LT_OQ), v));
  }
  if (i < n) {
    const __m256i m = tail_mask8(n - i);
    const __m256 v = _mm256_mul_ps(_mm256_maskload_ps(y + i, m), inv);
    cpu_store_first_avx2(y + i, _mm256_andnot_ps(_mm256_cmp_ps(v, tiny, _CMP_LT_OQ), v), n - i);
  }
}

static NN_AVX2 void ln_row_avx2(const float* x, float* y, const float* scale, const float* bias,
                                size_t n, float eps, float* mean_out, float* inv_out) {
  __m256 acc = _mm256_setzero_ps();
  for (size_t i = 0; i < n; i += 8)
    acc = _mm256_add_ps(acc, _mm256_maskload_ps(x + i, tail_mask8(n - i)));
  const float mean = hsum8(acc) / (float)n;
  const __m256 vmean = _mm256_set1_ps(mean);
  acc = _mm256_setzero_ps();
  for (size_t i = 0; i < n; i += 8) {
    const __m256i m = tail_mask8(n - i);
    const __m256 d =
        _mm256_and_ps(_mm256_castsi256_ps(m), _mm256_sub_ps(_mm256_maskload_ps(x + i, m), vmean));
    acc = _mm256_fmadd_ps(d, d, acc);
  }
  const float inv = 1.0f / sqrtf(hsum8(acc) / (float)n + eps);
  const __m256 vinv = _mm256_set1_ps(inv);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) { /* no masked stores: see softmax_row_avx2 */
    __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmean), vinv);
    v = _mm256_mul_ps(v, _mm256_loadu_ps(scale + i));
    if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + i));
    _mm256_storeu_ps(y + i, v);
  }
  if (i < n) {
    const __m256i m = tail_mask8(n - i);
    __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), vmean), vinv);
    v = _mm256_mul_ps(v, _mm256_maskload_ps(scale + i, m));
    if (bias) v = _mm256_add_ps(v, _mm256_maskload_ps(bias + i, m));
    cpu_store_first_avx2(y + i, v, n - i);
  }
  *mean_out = mean;
  *inv_out = inv;
}
#endif

/* ======================================================================== */
/* LayerNormalization (opset 17)                                             */
/* ======================================================================== */

typedef struct LayerNormState {
  const OnyxNode* node;
  int64_t axis;
  double epsilon;
} LayerNormState;

static OnyxStatus* ln_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep, (void)user_data;
  LayerNormState* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->node = node;
  s->axis = cpu_host->node_attr_int(node, "axis", -1);
  s->epsilon = cpu_host->node_attr_float(node, "epsilon", 1e-5f);
  /* stash_type only sets the precision of mean/variance; we always use
   * double accumulators, which meets both float32 and float64 stashing. */
  *state = s;
  return NULL;
}

typedef struct LnJob {
  const void* x;
  void* y;
  const void* scale; /* inner elements, X's type */
  const void* bias;  /* inner elements, or NULL */
  float* mean;       /* optional outputs, one per row */
  float* inv_std;
  size_t inner;
  double epsilon;
} LnJob;

#define DEFINE_LN(T)                                                                               \
  static void ln_rows_##T(void* user, size_t begin, size_t end) {                                  \
    const LnJob* j = user;                                                                         \
    const T* scale = j->scale;                                                                     \
    const T* bias = j->bias;                                                                       \
    for (size_t r = begin; r < end; r++) {                                                         \
      const T* x = (const T*)j->x + r * j->inner;                                                  \
      T* y = (T*)j->y + r * j->inner;                                                              \
      double mean = 0, var = 0;                                                                    \
      for (size_t i = 0; i < j->inner; i++)                                                        \
        mean += x[i];                                                                              \
      mean /= (double)j->inner;                                                                    \
      for (size_t i = 0; i < j->inner; i++)                                                        \
        var += (x[i] - mean) * (x[i] - mean);                                                      \
      const double inv = 1.0 / sqrt(var / (double)j->inner + j->epsilon);                          \
      for (size_t i = 0; i < j->inner; i++)                                                        \
        y[i] = (T)((x[i] - mean) * inv * scale[i] + (bias ? bias[i] : 0));                         \
      if (j->mean) j->mean[r] = (float)mean;                                                       \
      if (j->inv_std) j->inv_std[r] = (float)inv;                                                  \
    }                                                                                              \
  }
DEFINE_LN(float)
DEFINE_LN(double)

#if CPU_NN_X86
/* Rows [begin, end) of a float32 LayerNormalization through one vector row. */
typedef void (*LnRowF32)(const float* x, float* y, const float* scale, const float* bias, size_t n,
                         float eps, float* mean_out, float* inv_out);

static inline void ln_rows_with(const LnJob* j, size_t begin, size_t end, LnRowF32 row) {
  for (size_t r = begin; r < end; r++) {
    float mean, inv;
    row((const float*)j->x + r * j->inner, (float*)j->y + r * j->inner, j->scale, j->bias, j->inner,
        (float)j->epsilon, &mean, &inv);
    if (j->mean) j->mean[r] = mean;
    if (j->inv_std) j->inv_std[r] = inv;
  }
}

static void ln_rows_avx512(void* user, size_t begin, size_t end) {
  ln_rows_with(user, begin, end, ln_row_avx512);
}

static void ln_rows_avx2(void* user, size_t begin, size_t end) {
  ln_rows_with(user, begin, end, ln_row_avx2);
}
#endif

/* Scale/B may broadcast (unidirectionally) to X's normalized dims; expand
 * them to a dense array then, so the row loop stays simple. */
static OnyxStatus* ln_param(const LayerNormState* s, OnyxKernelContext* ctx, size_t index,
                            const int64_t* dims, size_t rank, const void** out) {
  const OnyxTensor* p = cpu_host->ctx_input(ctx, index);
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const size_t pr = cpu_host->tensor_rank(p), inner = cpu_dims_product(dims, 0, rank);
  const int64_t* pd = cpu_host->tensor_dims(p);
  const OnyxElemType t = cpu_host->tensor_elem_type(x);
  int ok = pr <= rank && cpu_host->tensor_elem_type(p) == t;
  for (size_t i = 0; ok && i < pr; i++)
    ok = pd[i] == 1 || pd[i] == dims[rank - pr + i];
  if (!ok)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                     "input %zu (rank %zu) does not broadcast to the normalized shape", index, pr);
  *out = cpu_host->tensor_data(p);
  if (cpu_host->tensor_elem_count(p) == inner) return NULL;
  const size_t es = cpu_elem_size(t);
  char* dense;
  OnyxStatus* st = nn_scratch(ctx, inner * es, (void**)&dense);
  if (st) return st;
  int64_t c[MAX_RANK];
  for (size_t i = 0; i < inner; i++) {
    nn_unravel(i, dims, rank, c);
    size_t src = 0;
    for (size_t d = 0; d < pr; d++)
      src = src * (size_t)pd[d] + (pd[d] == 1 ? 0 : c[rank - pr + d]);
    memcpy(dense + i * es, (const char*)*out + src * es, es);
  }
  *out = dense;
  return NULL;
}

static OnyxStatus* ln_outputs(OnyxKernelContext* ctx, const int64_t* dx, size_t r, size_t axis,
                              LnJob* job) {
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, dx, r, &y);
  if (st) return st;
  job->y = cpu_host->tensor_mutable_data(y);
  int64_t stat[MAX_RANK];
  for (size_t i = 0; i < r; i++)
    stat[i] = i < axis ? dx[i] : 1;
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  float** dst[2] = {&job->mean, &job->inv_std};
  for (size_t i = 1; i <= 2; i++) {
    if (!node || !nn_has_output(node, i)) continue;
    OnyxTensor* t;
    if ((st = cpu_host->ctx_output(ctx, i, stat, r, &t))) return st;
    *dst[i - 1] = cpu_host->tensor_mutable_data(t);
  }
  return NULL;
}

static OnyxStatus* ln_compute(void* state, OnyxKernelContext* ctx) {
  const LayerNormState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const size_t r = cpu_host->tensor_rank(x);
  const int64_t* dx = cpu_host->tensor_dims(x);
  const int64_t axis = s->axis < 0 ? s->axis + (int64_t)r : s->axis;
  if (axis < 0 || axis >= (int64_t)r || r > MAX_RANK)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                     (long long)s->axis, r);
  LnJob job = {.x = cpu_host->tensor_data(x),
               .inner = cpu_dims_product(dx, (size_t)axis, r),
               .epsilon = s->epsilon};
  OnyxStatus* st = ln_outputs(ctx, dx, r, (size_t)axis, &job);
  if (st) return st;
  const size_t rows = cpu_dims_product(dx, 0, (size_t)axis);
  if (rows == 0 || job.inner == 0) return NULL;
  if ((st = ln_param(s, ctx, 1, dx + axis, r - (size_t)axis, &job.scale))) return st;
  if (cpu_host->ctx_input_count(ctx) > 2 && cpu_host->ctx_input(ctx, 2) &&
      (st = ln_param(s, ctx, 2, dx + axis, r - (size_t)axis, &job.bias)))
    return st;
  const int f32 = cpu_host->tensor_elem_type(x) == ONYX_ELEM_FLOAT32;
  void (*fn)(void*, size_t, size_t) = f32 ? ln_rows_float : ln_rows_double;
#if CPU_NN_X86
  if (f32 && use_avx512()) fn = ln_rows_avx512;
  if (f32 && use_avx2()) fn = ln_rows_avx2;
#endif
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), rows, fn, &job);
  return NULL;
}

/* ======================================================================== */
/* Softmax                                                                   */
/* ======================================================================== */

typedef struct SoftmaxState {
  const OnyxNode* node;
  int64_t axis;
  int coerce_2d; /* opset < 13: flatten to [prod(d[:axis]), prod(d[axis:])] */
} SoftmaxState;

static const int SOFTMAX_2D = 1, SOFTMAX_AXIS = 0;

static OnyxStatus* softmax_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  SoftmaxState* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->node = node;
  s->coerce_2d = *(const int*)user_data;
  s->axis = cpu_host->node_attr_int(node, "axis", s->coerce_2d ? 1 : -1);
  *state = s;
  return NULL;
}

/* x viewed as [outer, n, inner], softmax over n. `work` holds 2 * inner
 * values (running max and sum); out may equal x (in-place). */
typedef struct SoftmaxJob {
  const void* x;
  void* y;
  size_t n, inner;
  void* work;
} SoftmaxJob;

/* Probabilities below the smallest normal number are written as 0: a
 * denormal output costs nothing here but makes every consumer's arithmetic
 * on it (the attention MatMul after a Softmax) a hundred times slower on
 * x86 (bert_layer's probabilities x V product: 0.2 ms with normal inputs,
 * 7 ms with the denormals of its Softmax). The error is below 1.2e-38. */
#define SOFTMAX_TINY_float  FLT_MIN
#define SOFTMAX_TINY_double DBL_MIN
#define DEFINE_SOFTMAX(T)                                                                          \
  static void softmax_block_##T(const T* x, T* y, size_t n, size_t inner, T* mx, T* sum) {         \
    for (size_t i = 0; i < inner; i++)                                                             \
      mx[i] = x[i], sum[i] = 0;                                                                    \
    for (size_t k = 1; k < n; k++)                                                                 \
      for (size_t i = 0; i < inner; i++)                                                           \
        if (x[k * inner + i] > mx[i]) mx[i] = x[k * inner + i];                                    \
    for (size_t k = 0; k < n; k++)                                                                 \
      for (size_t i = 0; i < inner; i++) {                                                         \
        const T e = (T)exp(x[k * inner + i] - mx[i]);                                              \
        y[k * inner + i] = e;                                                                      \
        sum[i] += e;                                                                               \
      }                                                                                            \
    for (size_t i = 0; i < inner; i++)                                                             \
      sum[i] = (T)1 / sum[i];                                                                      \
    for (size_t k = 0; k < n; k++)                                                                 \
      for (size_t i = 0; i < inner; i++) {                                                         \
        const T v = y[k * inner + i] * sum[i];                                                     \
        y[k * inner + i] = v < SOFTMAX_TINY_##T ? 0 : v; /* NaN kept */                            \
      }                                                                                            \
  }                                                                                                \
  /* Rows of a contiguous (inner == 1) softmax, in parallel. */                                    \
  static void softmax_rows_##T(void* user, size_t begin, size_t end) {                             \
    const SoftmaxJob* j = user;                                                                    \
    for (size_t r = begin; r < end; r++) {                                                         \
      T mx, sum;                                                                                   \
      softmax_block_##T((const T*)j->x + r * j->n, (T*)j->y + r * j->n, j->n, 1, &mx, &sum);       \
    }                                                                                              \
  }                                                                                                \
  /* Strided softmax (inner > 1): blocks in sequence, sharing one work area. */                    \
  static void softmax_strided_##T(const SoftmaxJob* j, size_t outer) {                             \
    T* mx = j->work;                                                                               \
    for (size_t o = 0; o < outer; o++)                                                             \
      softmax_block_##T((const T*)j->x + o * j->n * j->inner, (T*)j->y + o * j->n * j->inner,      \
                        j->n, j->inner, mx, mx + j->inner);                                        \
  }
DEFINE_SOFTMAX(float)
DEFINE_SOFTMAX(double)

void cpu_softmax_row_f32(const float* x, float* y, size_t n) {
  if (n == 0) return;
#if CPU_NN_X86
  if (use_avx512()) {
    softmax_row_avx512(x, y, n);
    return;
  }
  if (use_avx2()) {
    softmax_row_avx2(x, y, n);
    return;
  }
#endif
  float mx, sum;
  softmax_block_float(x, y, n, 1, &mx, &sum);
}

#if CPU_NN_X86
static inline void softmax_rows_with(const SoftmaxJob* j, size_t begin, size_t end,
                                     void (*row)(const float*, float*, size_t)) {
  for (size_t r = begin; r < end; r++)
    row((const float*)j->x + r * j->n, (float*)j->y + r * j->n, j->n);
}

static void softmax_rows_avx512(void* user, size_t begin, size_t end) {
  softmax_rows_with(user, begin, end, softmax_row_avx512);
}

static void softmax_rows_avx2(void* user, size_t begin, size_t end) {
  softmax_rows_with(user, begin, end, softmax_row_avx2);
}
#endif

static OnyxStatus* softmax_compute(void* state, OnyxKernelContext* ctx) {
  const SoftmaxState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const size_t r = cpu_host->tensor_rank(x);
  const int64_t* dx = cpu_host->tensor_dims(x);
  const int64_t axis = s->axis < 0 ? s->axis + (int64_t)r : s->axis;
  if (axis < 0 || axis >= (int64_t)r)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                     (long long)s->axis, r);
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, dx, r, &y);
  if (st) return st;
  const size_t a = (size_t)axis, outer = cpu_dims_product(dx, 0, a);
  SoftmaxJob job = {cpu_host->tensor_data(x), cpu_host->tensor_mutable_data(y),
                    s->coerce_2d ? cpu_dims_product(dx, a, r) : (size_t)dx[a],
                    s->coerce_2d ? 1 : cpu_dims_product(dx, a + 1, r), NULL};
  if (outer == 0 || job.n == 0 || job.inner == 0) return NULL;
  const int f32 = cpu_host->tensor_elem_type(x) == ONYX_ELEM_FLOAT32;
  if (job.inner == 1) {
    void (*rows)(void*, size_t, size_t) = f32 ? softmax_rows_float : softmax_rows_double;
#if CPU_NN_X86
    if (f32 && use_avx512()) rows = softmax_rows_avx512;
    if (f32 && use_avx2()) rows = softmax_rows_avx2;
#endif
    cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), outer, rows, &job);
    return NULL;
  }
  if ((st = nn_scratch(ctx, 2 * job.inner * (f32 ? 4 : 8), &job.work))) return st;
  if (f32)
    softmax_strided_float(&job, outer);
  else
    softmax_strided_double(&job, outer);
  return NULL;
}

/* Output 0 with x's shape, for the element-wise normalizations. */
static OnyxStatus* out_like(OnyxKernelContext* ctx, const OnyxTensor* x, OnyxTensor** y) {
  return cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(x), cpu_host->tensor_rank(x), y);
}

/* ======================================================================== */
/* InstanceNormalization, GroupNormalization                                 */
/* ======================================================================== */

/* Group normalization over blocks of `cpg` channels x `inner` values (an
 * instance normalization is one channel per group); statistics in double,
 * data in float (float32, halves) or double, blocks split over the pool. */
typedef struct NormJob {
  const void* x;
  void* y;
  bool f32;
  size_t groups, cpg, inner;
  const double *sc, *b;
  bool per_channel; /* scale/bias per channel, else per group */
  double eps;
} NormJob;

#define DEFINE_NORM_BLOCKS(T)                                                                      \
  static void norm_blocks_##T(void* user, size_t begin, size_t end) {                              \
    const NormJob* j = user;                                                                       \
    const size_t len = j->cpg * j->inner;                                                          \
    for (size_t i = begin; i < end; i++) {                                                         \
      const T* x = (const T*)j->x + i * len;                                                       \
      T* y = (T*)j->y + i * len;                                                                   \
      double mean = 0, var = 0;                                                                    \
      for (size_t k = 0; k < len; k++)                                                             \
        mean += x[k];                                                                              \
      mean /= (double)len;                                                                         \
      for (size_t k = 0; k < len; k++)                                                             \
        var += ((double)x[k] - mean) * ((double)x[k] - mean);                                      \
      const double inv = 1.0 / sqrt(var / (double)len + j->eps);                                   \
      const size_t gi = i % j->groups;                                                             \
      for (size_t ch = 0; ch < j->cpg; ch++) {                                                     \
        const size_t p = j->per_channel ? gi * j->cpg + ch : gi;                                   \
        const double a = inv * j->sc[p], c = j->b[p] - mean * a;                                   \
        const T* xr = x + ch * j->inner;                                                           \
        T* yr = y + ch * j->inner;                                                                 \
        for (size_t k = 0; k < j->inner; k++)                                                      \
          yr[k] = (T)(xr[k] * a + c);                                                              \
      }                                                                                            \
    }                                                                                              \
  }
DEFINE_NORM_BLOCKS(float)
DEFINE_NORM_BLOCKS(double)

/* Runs a NormJob (x, y and f32 filled in here) for X of [n, groups*cpg, inner]. */
static OnyxStatus* norm_run(OnyxKernelContext* ctx, const OnyxTensor* x, OnyxTensor* y, size_t n,
                            NormJob* j) {
  const int32_t type = cpu_host->tensor_elem_type(x);
  const size_t total = n * j->groups * j->cpg * j->inner;
  OnyxStatus* st;
  j->f32 = type != ONYX_ELEM_FLOAT64;
  if (total == 0) return NULL;
  if (type == ONYX_ELEM_FLOAT32 || type == ONYX_ELEM_FLOAT64) {
    j->x = cpu_host->tensor_data(x);
    j->y = cpu_host->tensor_mutable_data(y);
  } else {
    float* xf;
    if ((st = nnop_load_f(ctx, x, &xf)) || (st = nnop_scratch(ctx, total * sizeof(float), &j->y)))
      return st;
    j->x = xf;
  }
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), n * j->groups,
                         j->f32 ? norm_blocks_float : norm_blocks_double, j);
  if (type != ONYX_ELEM_FLOAT32 && type != ONYX_ELEM_FLOAT64) nnop_store_f(y, j->y, total);
  return NULL;
}

static OnyxStatus* instnorm_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  OnyxStatus* st = nnop_need_rank(node, x, "input X", 2);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t r = cpu_host->tensor_rank(x), n = (size_t)d[0], c = (size_t)d[1];
  NormJob j = {.groups = c,
               .cpg = 1,
               .inner = cpu_dims_product(d, 2, r),
               .per_channel = true,
               .eps = cpu_host->node_attr_float(node, "epsilon", 1e-5f)};
  double *sc, *b;
  OnyxTensor* y;
  if ((st = nnop_load_param(ctx, node, 1, "scale", c, &sc)) ||
      (st = nnop_load_param(ctx, node, 2, "B", c, &b)) || (st = out_like(ctx, x, &y)))
    return st;
  j.sc = sc;
  j.b = b;
  return norm_run(ctx, x, y, n, &j);
}

static OnyxStatus* groupnorm_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  OnyxStatus* st = nnop_need_rank(node, x, "input X", 2);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t r = cpu_host->tensor_rank(x), n = (size_t)d[0], c = (size_t)d[1];
  const int64_t g = cpu_host->node_attr_int(node, "num_groups", 0);
  if (g < 1 || c % (size_t)g != 0)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "num_groups %lld must be >= 1 and divide the %zu channels", (long long)g, c);
  /* Opset 18: scale and bias per group; opset 21: per channel. */
  const bool per_channel = cpu_host->node_since_version(node) >= 21;
  NormJob j = {.groups = (size_t)g,
               .cpg = c / (size_t)g,
               .inner = cpu_dims_product(d, 2, r),
               .per_channel = per_channel,
               .eps = cpu_host->node_attr_float(node, "epsilon", 1e-5f)};
  const size_t np = per_channel ? c : (size_t)g;
  double *sc, *b;
  OnyxTensor* y;
  if ((st = nnop_load_param(ctx, node, 1, "scale", np, &sc)) ||
      (st = nnop_load_param(ctx, node, 2, "bias", np, &b)) || (st = out_like(ctx, x, &y)))
    return st;
  j.sc = sc;
  j.b = b;
  return norm_run(ctx, x, y, n, &j);
}

/* ======================================================================== */
/* RMSNormalization, LpNormalization, MeanVarianceNormalization, LRN         */
/* ======================================================================== */

static OnyxStatus* rmsnorm_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* sct = cpu_host->ctx_input(ctx, 1);
  OnyxStatus* st = nnop_need_rank(node, x, "input X", 1);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t r = cpu_host->tensor_rank(x);
  size_t axis;
  const int64_t a = cpu_host->node_attr_int(node, "axis", -1);
  if (!cpu_norm_axis(a, r, false, &axis))
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                     (long long)a, r);
  const double eps = cpu_host->node_attr_float(node, "epsilon", 1e-5f);
  /* scale broadcasts to the normalized dims d[axis:]. */
  const size_t nr = r - axis, sr = cpu_host->tensor_rank(sct);
  const int64_t* sd = cpu_host->tensor_dims(sct);
  if (sr > nr)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "scale has rank %zu; it must broadcast to the %zu normalized dims", sr, nr);
  int64_t sstride[CPU_MAX_RANK];
  int64_t acc = 1;
  for (size_t k = nr; k-- > 0;) {
    const size_t si = k + sr >= nr ? k + sr - nr : SIZE_MAX;
    const int64_t sdim = si == SIZE_MAX ? 1 : sd[si];
    if (sdim != 1 && sdim != d[axis + k])
      return cpu_error(node, ONYX_INVALID_ARGUMENT,
                       "scale dim %zu is %lld; it does not broadcast to input dim %zu (%lld)", si,
                       (long long)sdim, axis + k, (long long)d[axis + k]);
    sstride[k] = sdim == 1 ? 0 : acc;
    acc *= sdim;
  }
  const size_t outer = cpu_dims_product(d, 0, axis), inner = cpu_dims_product(d, axis, r);
  double *xv, *sv, *yv;
  OnyxTensor* y;
  if ((st = out_like(ctx, x, &y)) || (st = nnop_load_d(ctx, x, &xv)) ||
      (st = nnop_load_d(ctx, sct, &sv)) ||
      (st = nnop_scratch(ctx, outer * inner * sizeof(double), (void**)&yv)))
    return st;
  for (size_t o = 0; o < outer; o++) {
    const double* xr = xv + o * inner;
    double ss = 0;
    for (size_t i = 0; i < inner; i++)
      ss += xr[i] * xr[i];
    const double inv = 1.0 / sqrt(ss / (double)inner + eps);
    for (size_t i = 0; i < inner; i++) {
      size_t rem = i, soff = 0;
      for (size_t k = nr; k-- > 0;) {
        soff += (rem % (size_t)d[axis + k]) * (size_t)sstride[k];
        rem /= (size_t)d[axis + k];
      }
      yv[o * inner + i] = xr[i] * inv * sv[soff];
    }
  }
  nnop_store_d(y, yv, outer * inner);
  return NULL;
}

static OnyxStatus* lpnorm_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  OnyxStatus* st = nnop_need_rank(node, x, "input", 1);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t r = cpu_host->tensor_rank(x);
  size_t axis;
  const int64_t a = cpu_host->node_attr_int(node, "axis", -1);
  const int64_t p = cpu_host->node_attr_int(node, "p", 2);
  if (!cpu_norm_axis(a, r, false, &axis))
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                     (long long)a, r);
  if (p != 1 && p != 2)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "p must be 1 or 2, got %lld", (long long)p);
  const size_t outer = cpu_dims_product(d, 0, axis), n = (size_t)d[axis];
  const size_t inner = cpu_dims_product(d, axis + 1, r);
  double *xv, *yv;
  OnyxTensor* y;
  if ((st = out_like(ctx, x, &y)) || (st = nnop_load_d(ctx, x, &xv)) ||
      (st = nnop_scratch(ctx, outer * n * inner * sizeof(double), (void**)&yv)))
    return st;
  for (size_t o = 0; o < outer; o++)
    for (size_t i = 0; i < inner; i++) {
      const size_t base = o * n * inner + i;
      double norm = 0;
      for (size_t k = 0; k < n; k++) {
        const double v = xv[base + k * inner];
        norm += p == 1 ? fabs(v) : v * v;
      }
      if (p == 2) norm = sqrt(norm);
      for (size_t k = 0; k < n; k++)
        yv[base + k * inner] = norm == 0 ? 0 : xv[base + k * inner] / norm;
    }
  nnop_store_d(y, yv, outer * n * inner);
  return NULL;
}

static OnyxStatus* mvn_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  OnyxStatus* st = nnop_need_rank(node, x, "input X", 1);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t r = cpu_host->tensor_rank(x);
  size_t na = 0;
  const int64_t* axes = cpu_host->node_attr_ints(node, "axes", &na);
  static const int64_t def_axes[] = {0, 2, 3};
  if (!axes) {
    axes = def_axes;
    na = 3;
  }
  bool mark[CPU_MAX_RANK] = {false};
  for (size_t i = 0; i < na; i++) {
    size_t ax;
    if (!cpu_norm_axis(axes[i], r, false, &ax))
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                       (long long)axes[i], r);
    mark[ax] = true;
  }
  const size_t total = cpu_dims_product(d, 0, r);
  double *xv, *yv, *mean, *sq;
  size_t kept = 1, red = 1;
  for (size_t k = 0; k < r; k++)
    *(mark[k] ? &red : &kept) *= (size_t)d[k];
  OnyxTensor* y;
  if ((st = out_like(ctx, x, &y)) || (st = nnop_load_d(ctx, x, &xv)) ||
      (st = nnop_scratch(ctx, total * sizeof(double), (void**)&yv)) ||
      (st = nnop_scratch(ctx, kept * sizeof(double), (void**)&mean)) ||
      (st = nnop_scratch(ctx, kept * sizeof(double), (void**)&sq)))
    return st;
  if (total == 0) return NULL;
  /* Index of each element among the kept (not reduced) positions. */
  memset(mean, 0, kept * sizeof(double));
  memset(sq, 0, kept * sizeof(double));
  size_t* key;
  if ((st = nnop_scratch(ctx, total * sizeof(size_t), (void**)&key))) return st;
  for (size_t i = 0; i < total; i++) {
    size_t rem = i, k = 0, mul = 1;
    for (size_t a = r; a-- > 0;) {
      const size_t c = rem % (size_t)d[a];
      rem /= (size_t)d[a];
      if (!mark[a]) {
        k += c * mul;
        mul *= (size_t)d[a];
      }
    }
    key[i] = k;
    mean[k] += xv[i];
    sq[k] += xv[i] * xv[i];
  }
  for (size_t k = 0; k < kept; k++) {
    mean[k] /= (double)red;
    const double var = sq[k] / (double)red - mean[k] * mean[k];
    sq[k] = sqrt(var > 0 ? var : 0) + 1e-9;
  }
  for (size_t i = 0; i < total; i++)
    yv[i] = (xv[i] - mean[key[i]]) / sq[key[i]];
  nnop_store_d(y, yv, total);
  return NULL;
}

static OnyxStatus* lrn_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  OnyxStatus* st = nnop_need_rank(node, x, "input X", 2);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t r = cpu_host->tensor_rank(x), n = (size_t)d[0], c = (size_t)d[1];
  const size_t inner = cpu_dims_product(d, 2, r);
  const int64_t size = cpu_host->node_attr_int(node, "size", 0);
  const double alpha = cpu_host->node_attr_float(node, "alpha", 1e-4f);
  const double beta = cpu_host->node_attr_float(node, "beta", 0.75f);
  const double bias = cpu_host->node_attr_float(node, "bias", 1.0f);
  if (size < 1)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "size must be >= 1, got %lld", (long long)size);
  const int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  double *xv, *yv;
  OnyxTensor* y;
  if ((st = out_like(ctx, x, &y)) || (st = nnop_load_d(ctx, x, &xv)) ||
      (st = nnop_scratch(ctx, n * c * inner * sizeof(double), (void**)&yv)))
    return st;
  for (size_t b = 0; b < n; b++)
    for (int64_t ch = 0; ch < (int64_t)c; ch++)
      for (size_t i = 0; i < inner; i++) {
        double ss = 0;
        /* The window clipped to the channels, without forming ch - lo or
         * ch + hi (size may be as large as int64 holds). */
        const int64_t k0 = lo > ch ? 0 : ch - lo;
        const int64_t k1 = hi > (int64_t)c - 1 - ch ? (int64_t)c - 1 : ch + hi;
        for (int64_t k = k0; k <= k1; k++) {
          const double v = xv[(b * c + (size_t)k) * inner + i];
          ss += v * v;
        }
        const size_t at = (b * c + (size_t)ch) * inner + i;
        yv[at] = xv[at] / pow(bias + alpha / (double)size * ss, beta);
      }
  nnop_store_d(y, yv, n * c * inner);
  return NULL;
}

/* ======================================================================== */
/* Registration                                                              */
/* ======================================================================== */

static const OnyxTypeConstraint T_FLOATS[] = {{"T", cpu_types_float, 2}};
static const OnyxTypeConstraint T_BN14[] = {{"T", cpu_types_float, 2}, {"U", cpu_types_float, 2}};
static const OnyxTypeConstraint T_BN15[] = {
    {"T", cpu_types_float, 2}, {"T1", cpu_types_float, 2}, {"T2", cpu_types_float, 2}};
static const OnyxTypeConstraint T_LN[] = {{"T", cpu_types_float, 2}, {"U", cpu_types_f32, 1}};
static const OnyxTypeConstraint TC_T[] = {{"T", cpu_types_real, 4}};
static const OnyxTypeConstraint TC_RMS[] = {{"T", cpu_types_real, 4}, {"V", cpu_types_real, 4}};
/* Output 0 may reuse input 0's buffer: these kernels read each element
 * before writing it. */
static const OnyxAlias INPLACE[] = {{0, 0, ONYX_ALIAS_INPLACE}};

#define KDEF(op, since, end, tc, cr, comp, rel, ud)                                                \
  {                                                                                                \
    .op_type = op, .since_version = since, .end_version = end, .type_constraints = tc,             \
    .type_constraint_count = CPU_ARRAY_LEN(tc), .create = cr, .compute = comp, .release = rel,     \
    .user_data = (void*)(ud)                                                                       \
  }
/* The same, for kernels whose output 0 may reuse input 0's buffer. */
#define KDEF_INPLACE(op, since, end, tc, cr, comp, rel, ud)                                        \
  {                                                                                                \
    .op_type = op, .since_version = since, .end_version = end, .type_constraints = tc,             \
    .type_constraint_count = CPU_ARRAY_LEN(tc), .aliases = INPLACE, .alias_count = 1,              \
    .create = cr, .compute = comp, .release = rel, .user_data = (void*)(ud)                        \
  }
#define SPEC(op, since, end, tc, cr, comp, rel, ud)                                                \
  { op, since, end, tc, CPU_ARRAY_LEN(tc), cr, comp, rel, (void*)(ud) }
#define NODE_SPEC(op, since, end, tc, comp)                                                        \
  SPEC(op, since, end, tc, nnop_node_create, comp, NULL, NULL)

OnyxStatus* cpu_register_norm(OnyxKernelRegistry* r) {
  const int latest = ONYX_OPSET_LATEST;
  OnyxKernelDef defs[] = {
      KDEF_INPLACE("BatchNormalization", 1, 13, T_FLOATS, bn_create, bn_compute, cpu_free_state,
                   &BN_OUTPUTS),
      KDEF_INPLACE("BatchNormalization", 14, 14, T_BN14, bn_create, bn_compute, cpu_free_state,
                   &BN_ATTR),
      KDEF_INPLACE("BatchNormalization", 15, latest, T_BN15, bn_create, bn_compute, cpu_free_state,
                   &BN_ATTR),
      KDEF_INPLACE("LayerNormalization", 17, latest, T_LN, ln_create, ln_compute, cpu_free_state,
                   NULL),
      KDEF_INPLACE("Softmax", 1, 12, T_FLOATS, softmax_create, softmax_compute, cpu_free_state,
                   &SOFTMAX_2D),
      KDEF_INPLACE("Softmax", 13, latest, T_FLOATS, softmax_create, softmax_compute, cpu_free_state,
                   &SOFTMAX_AXIS),
  };
  for (size_t i = 0; i < CPU_ARRAY_LEN(defs); i++) {
    OnyxKernelDef* d = &defs[i];
    d->struct_size = sizeof *d;
    d->domain = "";
    OnyxStatus* st = cpu_host->register_kernel(r, d);
    if (st) return st;
  }
  const CpuKernelSpec specs[] = {
      NODE_SPEC("InstanceNormalization", 1, latest, TC_T, instnorm_compute),
      NODE_SPEC("GroupNormalization", 18, latest, TC_T, groupnorm_compute),
      NODE_SPEC("RMSNormalization", 23, latest, TC_RMS, rmsnorm_compute),
      NODE_SPEC("LpNormalization", 1, latest, TC_T, lpnorm_compute),
      NODE_SPEC("MeanVarianceNormalization", 9, latest, TC_T, mvn_compute),
      NODE_SPEC("LRN", 1, latest, TC_T, lrn_compute),
  };
  return cpu_register_specs(r, specs, CPU_ARRAY_LEN(specs));
}
