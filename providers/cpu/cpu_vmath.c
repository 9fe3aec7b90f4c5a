/* cpu_vmath.c — see cpu_vmath.h. The vector bodies are compiled for their
 * ISA with target attributes and called only after a cpuid check, so the
 * library still runs on machines without AVX2. */
#include "cpu_vmath.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define CPUID_X86 1 /* run-time ISA choice (Gelu's own polynomial) */
#include <immintrin.h>
#else
#define CPUID_X86 0
#endif

#if defined(ONYX_HAVE_SLEEF) && CPUID_X86
#define VMATH_X86 1
/* SLEEF's functions used here. sleef.h declares its 256/512-bit functions
 * only when the whole file targets those ISAs, so they are declared here
 * (same signatures, with the ISA each one needs; the calls sit in functions
 * compiled for it). */
extern __attribute__((target("avx512f"))) __m512 Sleef_logf16_u10avx512f(__m512);
extern __attribute__((target("avx2,fma,avx"))) __m256 Sleef_logf8_u10avx2(__m256);
extern __attribute__((target("avx512f"))) __m512 Sleef_log1pf16_u10avx512f(__m512);
extern __attribute__((target("avx2,fma,avx"))) __m256 Sleef_log1pf8_u10avx2(__m256);
extern __attribute__((target("avx512f"))) __m512 Sleef_expm1f16_u10avx512f(__m512);
extern __attribute__((target("avx2,fma,avx"))) __m256 Sleef_expm1f8_u10avx2(__m256);
#else
#define VMATH_X86 0
#endif

enum { PATH_SCALAR, PATH_AVX2, PATH_AVX512 };

static int path(void) {
  static _Atomic int cached = -1;
  int p = cached;
  if (p < 0) {
    p = PATH_SCALAR;
#if CPUID_X86
    if (__builtin_cpu_supports("avx512f"))
      p = PATH_AVX512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      p = PATH_AVX2;
    /* ONYX_CPU_ISA=generic|avx2 caps it, as it caps the GEMM's kernel. */
    const char* cap = getenv("ONYX_CPU_ISA");
    if (cap && !strcmp(cap, "generic")) p = PATH_SCALAR;
    if (cap && !strcmp(cap, "avx2") && p > PATH_AVX2) p = PATH_AVX2;
#endif
    cached = p;
  }
  return p;
}

const char* cpu_vmath_path(void) {
  static const char* const names[] = {"scalar", "avx2", "avx512"};
  return names[path()];
}

static void erf_scalar(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; i++)
    y[i] = erff(x[i]);
}

/* The negative side through erfc: 1 + erf(y) would cancel. */
static void gelu_scalar(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const float v = x[i], t = v * 0.70710678118654752f;
    if (isinf(v))
      y[i] = v > 0 ? v : 0.0f;
    else
      y[i] = t < 0 ? 0.5f * v * erfcf(-t) : 0.5f * v * (1.0f + erff(t));
  }
}

#if CPUID_X86
#define T512 __attribute__((target("avx512f,avx2,fma,avx")))
#define T256 __attribute__((target("avx2,fma,avx")))

/* Gelu's own polynomials (tools/fit_gelu.py fits and checks them): with
 * y = v / sqrt 2 and a = |y|, erf(y) = y P(a^2) for a < 0.5 (AVX-512); on
 * [0.5, 4) (AVX-512) or [0, 4) (AVX2) erfc(a) = Q_i(a - 0.5 i - 0.25) on
 * interval i = floor(2a), the coefficients of the lanes' intervals picked
 * with one permute each;
 * Gelu = v - v/2 erfc(a) for y > 0 and v/2 erfc(a) for y < 0 (no
 * cancellation in 1 + erf on the negative side); v, or 0, from a = 4 on.
 * About 2 ULP of erf, within 0.44 of the test bound (4e-7 |Gelu| + 1e-7)
 * over [-9, 9], and ~15x faster than SLEEF's erf. */
/* worst |error| / (4e-7 |gelu| + 1e-7) over [-9, 9]: 0.436, either path */
static const float GELU_SMALL[7] = {1.128379167e+00f,  -3.761263890e-01f, 1.128379146e-01f,
                                    -2.686611538e-02f, 5.223317432e-03f,  -8.508168024e-04f,
                                    1.084070032e-04f};
/* GELU_ERFC[k][i]: coefficient k of interval i (entry 0: the AVX2 path only) */
static const float GELU_ERFC[8][16] = {
    {7.236736109e-01f, 2.888443666e-01f, 7.709987125e-02f, 1.332832882e-02f, 1.462716632e-03f,
     1.006219218e-04f, 4.302780258e-06f, 1.137276195e-07f},
    {-1.060014116e+00f, -6.429310673e-01f, -2.365211355e-01f, -5.277499331e-02f, -7.142315856e-03f,
     -5.862776134e-04f, -2.918932898e-05f, -8.814727316e-07f},
    {2.650029701e-01f, 4.821981694e-01f, 2.956516945e-01f, 9.235621323e-02f, 1.607017946e-02f,
     1.612264477e-03f, 9.486589666e-05f, 3.305483573e-06f},
    {3.091690076e-01f, -2.678886299e-02f, -1.675341231e-01f, -9.015767598e-02f, -2.172497930e-02f,
     -2.760332520e-03f, -1.957640419e-04f, -7.963167352e-06f},
    {-1.269351961e-01f, -1.506760314e-01f, 6.134183948e-03f, 4.810503011e-02f, 1.908726660e-02f,
     3.257841698e-03f, 2.863252973e-04f, 1.381261315e-05f},
    {-7.998864949e-02f, 5.323357931e-02f, 4.712912834e-02f, -6.608933325e-03f, -1.064438619e-02f,
     -2.757941117e-03f, -3.153504988e-04f, -1.859252148e-05f},
    {3.934754456e-02f, 2.658712696e-02f, -2.062075780e-02f, -9.044168348e-03f, 2.790298734e-03f,
     1.666413512e-03f, 2.720348132e-04f, 2.038792290e-05f},
    {1.536793631e-02f, -1.803681842e-02f, -3.214712519e-03f, 5.844092460e-03f, 5.736655875e-04f,
     -6.199679846e-04f, -1.567958170e-04f, -1.453015686e-05f},
};

T512 static __m512 gelu16(__m512 v, const __m512* tab) {
  const __m512 hv = _mm512_mul_ps(_mm512_set1_ps(0.5f), v);
  const __m512 y = _mm512_mul_ps(v, _mm512_set1_ps(0.70710678118654752f));
  const __m512 a = _mm512_abs_ps(y);
  /* a < 0.5 */
  const __m512 u = _mm512_mul_ps(a, a);
  __m512 p = _mm512_set1_ps(GELU_SMALL[6]);
  for (int k = 5; k >= 0; k--)
    p = _mm512_fmadd_ps(p, u, _mm512_set1_ps(GELU_SMALL[k]));
  const __m512 g_small = _mm512_fmadd_ps(hv, _mm512_mul_ps(y, p), hv);
  /* 0.5 <= a < 4 */
  __m512i idx = _mm512_cvttps_epi32(_mm512_min_ps(_mm512_add_ps(a, a), _mm512_set1_ps(7.0f)));
  idx = _mm512_max_epi32(idx, _mm512_set1_epi32(1));
  const __m512 t = _mm512_sub_ps(
      a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(idx), _mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f)));
  __m512 q = _mm512_permutexvar_ps(idx, tab[7]);
  for (int k = 6; k >= 0; k--)
    q = _mm512_fmadd_ps(q, t, _mm512_permutexvar_ps(idx, tab[k]));
  const __mmask16 pos = _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_GT_OQ);
  __m512 g = _mm512_mask_blend_ps(pos, _mm512_mul_ps(hv, q), _mm512_fnmadd_ps(hv, q, v));
  /* a >= 4: erfc(a) < 1.6e-8 */
  const __mmask16 far = _mm512_cmp_ps_mask(a, _mm512_set1_ps(4.0f), _CMP_GE_OQ);
  g = _mm512_mask_blend_ps(far, g, _mm512_maskz_mov_ps(pos, v));
  /* NaN compares false everywhere: g_large's hv * q is NaN */
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(0.5f), _CMP_LT_OQ), g, g_small);
}

T512 static void gelu_avx512(const float* x, float* y, size_t n) {
  __m512 tab[8];
  for (int k = 0; k < 8; k++)
    tab[k] = _mm512_loadu_ps(GELU_ERFC[k]);
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, gelu16(_mm512_loadu_ps(x + i), tab));
  if (i < n) {
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i), tab));
  }
}

/* AVX2: one path for every lane, erfc(a) = Q_i(a - 0.5 i - 0.25) from
 * interval 0 ([0, 0.5)) on as well, instead of the small path of y P(a^2)
 * computed beside it and blended (a third fewer instructions: the ffn1
 * MatMul + Gelu of bert_layer, 128 x 3072, spent 6% of its time in Gelu). */
T256 static __m256 gelu8(__m256 v, const __m256* tab) {
  const __m256 hv = _mm256_mul_ps(_mm256_set1_ps(0.5f), v);
  const __m256 y = _mm256_mul_ps(v, _mm256_set1_ps(0.70710678118654752f));
  const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), y);
  /* NaN: min gives 7 (its second operand), then t and q are NaN */
  const __m256i idx = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_add_ps(a, a), _mm256_set1_ps(7.0f)));
  const __m256 t = _mm256_sub_ps(
      a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(idx), _mm256_set1_ps(0.5f), _mm256_set1_ps(0.25f)));
  __m256 q = _mm256_permutevar8x32_ps(tab[7], idx);
  for (int k = 6; k >= 0; k--)
    q = _mm256_fmadd_ps(q, t, _mm256_permutevar8x32_ps(tab[k], idx));
  const __m256 pos = _mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_GT_OQ);
  const __m256 g = _mm256_blendv_ps(_mm256_mul_ps(hv, q), _mm256_fnmadd_ps(hv, q, v), pos);
  /* a >= 4: erfc(a) < 1.6e-8 */
  const __m256 far = _mm256_cmp_ps(a, _mm256_set1_ps(4.0f), _CMP_GE_OQ);
  return _mm256_blendv_ps(g, _mm256_and_ps(pos, v), far);
}

T256 static void gelu_avx2(const float* x, float* y, size_t n) {
  __m256 tab[8];
  for (int k = 0; k < 8; k++)
    tab[k] = _mm256_loadu_ps(GELU_ERFC[k]);
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, gelu8(_mm256_loadu_ps(x + i), tab));
  if (i < n) {
    float buf[8] = {0};
    memcpy(buf, x + i, (n - i) * sizeof *buf);
    _mm256_storeu_ps(buf, gelu8(_mm256_loadu_ps(buf), tab));
    memcpy(y + i, buf, (n - i) * sizeof *buf);
  }
}
#endif

#if CPUID_X86
/* Erf's own polynomials, built on Gelu's: with a = |x|, erf(x) = x P(a^2)
 * for a < 0.5 and sign(x) (1 - erfc(a)) with erfc(a) = Q_i(a - 0.5 i - 0.25)
 * on [0.5, 4) (interval i = floor(2a), 1..7, the lanes' coefficients picked
 * with one permute each), sign(x) from a = 4 on (erfc(4) < 1.6e-8, below
 * half an ULP of 1). The largest error over every float, measured against
 * erf() in double by test_vmath, is within the 2 ULP that cpu_vmath.h
 * states, on either path; NaN stays NaN, erf(-0) = -0, erf(+-inf) = +-1. */
T512 static __m512 erf16(__m512 x, const __m512* tab) {
  const __m512 a = _mm512_abs_ps(x);
  const __m512 u = _mm512_mul_ps(a, a);
  __m512 p = _mm512_set1_ps(GELU_SMALL[6]);
  for (int k = 5; k >= 1; k--)
    p = _mm512_fmadd_ps(p, u, _mm512_set1_ps(GELU_SMALL[k]));
  /* |erf| from a, x's sign put on at the end (so erf(-0) = -0); the
   * leading term a c0 added last keeps tiny a exact to one rounding */
  const __m512 small =
      _mm512_fmadd_ps(a, _mm512_set1_ps(GELU_SMALL[0]), _mm512_mul_ps(_mm512_mul_ps(a, u), p));
  __m512i idx = _mm512_cvttps_epi32(_mm512_min_ps(_mm512_add_ps(a, a), _mm512_set1_ps(7.0f)));
  idx = _mm512_max_epi32(idx, _mm512_set1_epi32(1));
  const __m512 t = _mm512_sub_ps(
      a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(idx), _mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f)));
  __m512 q = _mm512_permutexvar_ps(idx, tab[7]);
  for (int k = 6; k >= 0; k--)
    q = _mm512_fmadd_ps(q, t, _mm512_permutexvar_ps(idx, tab[k]));
  __m512 large = _mm512_sub_ps(_mm512_set1_ps(1.0f), q);
  /* a >= 4 (inf too): 1; NaN compares false and keeps 1 - NaN */
  large = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(4.0f), _CMP_GE_OQ), large,
                               _mm512_set1_ps(1.0f));
  const __m512 r =
      _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(0.5f), _CMP_LT_OQ), large, small);
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign));
}

T512 static void erf_avx512(const float* x, float* y, size_t n) {
  __m512 tab[8];
  for (int k = 0; k < 8; k++)
    tab[k] = _mm512_loadu_ps(GELU_ERFC[k]);
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, erf16(_mm512_loadu_ps(x + i), tab));
  if (i < n) {
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, erf16(_mm512_maskz_loadu_ps(m, x + i), tab));
  }
}

/* AVX2: the same two polynomials, both computed and blended. */
T256 static __m256 erf8(__m256 x, const __m256* tab) {
  const __m256 sgn = _mm256_set1_ps(-0.0f);
  const __m256 a = _mm256_andnot_ps(sgn, x);
  const __m256 u = _mm256_mul_ps(a, a);
  __m256 p = _mm256_set1_ps(GELU_SMALL[6]);
  for (int k = 5; k >= 1; k--)
    p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(GELU_SMALL[k]));
  const __m256 small =
      _mm256_fmadd_ps(a, _mm256_set1_ps(GELU_SMALL[0]), _mm256_mul_ps(_mm256_mul_ps(a, u), p));
  /* NaN: min gives 7 (its second operand), then t and q are NaN */
  __m256i idx = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_add_ps(a, a), _mm256_set1_ps(7.0f)));
  idx = _mm256_max_epi32(idx, _mm256_set1_epi32(1));
  const __m256 t = _mm256_sub_ps(
      a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(idx), _mm256_set1_ps(0.5f), _mm256_set1_ps(0.25f)));
  __m256 q = _mm256_permutevar8x32_ps(tab[7], idx);
  for (int k = 6; k >= 0; k--)
    q = _mm256_fmadd_ps(q, t, _mm256_permutevar8x32_ps(tab[k], idx));
  __m256 large = _mm256_sub_ps(_mm256_set1_ps(1.0f), q);
  large = _mm256_blendv_ps(large, _mm256_set1_ps(1.0f),
                           _mm256_cmp_ps(a, _mm256_set1_ps(4.0f), _CMP_GE_OQ));
  const __m256 r =
      _mm256_blendv_ps(large, small, _mm256_cmp_ps(a, _mm256_set1_ps(0.5f), _CMP_LT_OQ));
  return _mm256_or_ps(r, _mm256_and_ps(sgn, x));
}

T256 static void erf_avx2(const float* x, float* y, size_t n) {
  __m256 tab[8];
  for (int k = 0; k < 8; k++)
    tab[k] = _mm256_loadu_ps(GELU_ERFC[k]);
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, erf8(_mm256_loadu_ps(x + i), tab));
  if (i < n) {
    float buf[8] = {0};
    memcpy(buf, x + i, (n - i) * sizeof *buf);
    _mm256_storeu_ps(buf, erf8(_mm256_loadu_ps(buf), tab));
    memcpy(y + i, buf, (n - i) * sizeof *buf);
  }
}
#endif

void cpu_erf_f32(const float* x, float* y, size_t n) {
#if CPUID_X86
  switch (path()) {
  case PATH_AVX512:
    erf_avx512(x, y, n);
    return;
  case PATH_AVX2:
    erf_avx2(x, y, n);
    return;
  default:
    break;
  }
#endif
  erf_scalar(x, y, n);
}

void cpu_gelu_f32(const float* x, float* y, size_t n) {
#if CPUID_X86
  switch (path()) {
  case PATH_AVX512:
    gelu_avx512(x, y, n);
    return;
  case PATH_AVX2:
    gelu_avx2(x, y, n);
    return;
  default:
    break;
  }
#endif
  gelu_scalar(x, y, n);
}

/* ------------------------------------------------------------------------------------------------
 * Exp, Sigmoid, SiLU, Tanh, Log, Softplus, HardSigmoid, HardSwish.
 *
 * exp(x) is the provider's own: n = round(x log2 e), r = x - n ln 2 in two
 * parts (Cody-Waite), e^r = 1 + r + r^2 P(r) with Cephes' degree-5 P on
 * |r| <= ln2 / 2, scaled by 2^n (AVX-512 scalef; AVX2 two exponent-field
 * multiplications, so results in the subnormal range round once). x is
 * clamped to [-104, 89] first: below, e^x rounds to 0; above, to +inf. NaN
 * passes through the clamps (min/max return their second operand on NaN).
 * Sigmoid, SiLU and Tanh are built on it in registers; Log and Softplus's
 * log1p are SLEEF's (1.0 ULP). test_vmath_act measures the bounds that
 * docs/providers/cpu.md states. */

typedef struct VParams {
  float a, b; /* HardSigmoid alpha, beta; Elu/Celu alpha; Selu alpha, gamma */
} VParams;

static double sigmoid_ref_d(double x) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  const double e = exp(x);
  return e / (1.0 + e);
}

static void exp_scalar(const float* x, float* y, size_t n, const VParams* p) {
  (void)p;
  for (size_t i = 0; i < n; i++)
    y[i] = expf(x[i]);
}
static void log_scalar(const float* x, float* y, size_t n, const VParams* p) {
  (void)p;
  for (size_t i = 0; i < n; i++)
    y[i] = logf(x[i]);
}
static void tanh_scalar(const float* x, float* y, size_t n, const VParams* p) {
  (void)p;
  for (size_t i = 0; i < n; i++)
    y[i] = tanhf(x[i]);
}
static void sigmoid_scalar(const float* x, float* y, size_t n, const VParams* p) {
  (void)p;
  for (size_t i = 0; i < n; i++)
    y[i] = (float)sigmoid_ref_d(x[i]);
}
/* x * sigmoid(x) as the unfused graph computes it: NaN at x = -inf. */
static void silu_scalar(const float* x, float* y, size_t n, const VParams* p) {
  (void)p;
  for (size_t i = 0; i < n; i++)
    y[i] = x[i] * (float)sigmoid_ref_d(x[i]);
}
static void softplus_scalar(const float* x, float* y, size_t n, const VParams* p) {
  (void)p;
  for (size_t i = 0; i < n; i++) {
    const double v = x[i];
    y[i] = (float)(v > 0 ? v + log1p(exp(-v)) : log1p(exp(v)));
  }
}
static double clamp01_d(double v) {
  return v < 0 ? 0 : v > 1 ? 1 : v;
}
static void hardsigmoid_scalar(const float* x, float* y, size_t n, const VParams* p) {
  for (size_t i = 0; i < n; i++)
    y[i] = (float)clamp01_d((double)p->a * x[i] + p->b);
}
static void hardswish_scalar(const float* x, float* y, size_t n, const VParams* p) {
  (void)p;
  for (size_t i = 0; i < n; i++)
    y[i] = (float)(x[i] * clamp01_d(x[i] / 6.0 + 0.5));
}

static void mish_scalar(const float* x, float* y, size_t n, const VParams* p) {
  (void)p;
  for (size_t i = 0; i < n; i++) {
    const double v = x[i], sp = v > 0 ? v + log1p(exp(-v)) : log1p(exp(v));
    y[i] = (float)(v * tanh(sp));
  }
}

/* Elu, Selu, Celu in double, through expm1 (e^x - 1 would round tiny x's
 * result to 0); Celu keeps NaN. */
static void elu_scalar(const float* x, float* y, size_t n, const VParams* p) {
  for (size_t i = 0; i < n; i++)
    y[i] = x[i] < 0 ? (float)(p->a * expm1((double)x[i])) : x[i];
}
static void selu_scalar(const float* x, float* y, size_t n, const VParams* p) {
  const double a = p->a, g = p->b;
  for (size_t i = 0; i < n; i++)
    y[i] = (float)(x[i] <= 0 ? g * (a * expm1((double)x[i])) : g * x[i]);
}
static void celu_scalar(const float* x, float* y, size_t n, const VParams* p) {
  const double a = p->a;
  for (size_t i = 0; i < n; i++) {
    const double v = x[i], e = a * expm1(v / a);
    y[i] = isnan(v) ? x[i] : (float)((v > 0 ? v : 0) + (e < 0 ? e : 0));
  }
}

#if CPUID_X86
/* Cephes expf: e^r = 1 + r + r^2 (E0 + E1 r + ... + E5 r^5) */
#define EXP_E5 1.9875691500e-4f
#define EXP_E4 1.3981999507e-3f
#define EXP_E3 8.3334519073e-3f
#define EXP_E2 4.1665795894e-2f
#define EXP_E1 1.6666665459e-1f
#define EXP_E0 5.0000001201e-1f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define EXP_LO -104.0f
#define EXP_HI 89.0f
/* Cephes tanhf on |x| < 0.625: x + x^3 (T0 + T1 x^2 + ... + T4 x^8) */
#define TANH_T4  -5.70498872745e-3f
#define TANH_T3  2.06390887954e-2f
#define TANH_T2  -5.37397155531e-2f
#define TANH_T1  1.33314422036e-1f
#define TANH_T0  -3.33332819422e-1f
#define TANH_CUT 0.625f

T512 static inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(EXP_LO), _mm512_min_ps(_mm512_set1_ps(EXP_HI), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
  __m512 p = _mm512_set1_ps(EXP_E5);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_E4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_E3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_E2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_E1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_E0));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
  return _mm512_scalef_ps(_mm512_add_ps(p, _mm512_set1_ps(1.0f)), n);
}

T256 static inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(EXP_LO), _mm256_min_ps(_mm256_set1_ps(EXP_HI), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
  __m256 p = _mm256_set1_ps(EXP_E5);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_E4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_E3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_E2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_E1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_E0));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
  /* 2^n as 2^n1 2^n2 with n1 = n >> 1: each factor is a normal float for
   * n in [-150, 128]. For NaN, p is NaN and so is the product. */
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* sigmoid(x) = 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0, with
 * e = exp(-|x|) in (0, 1]: nothing overflows and nothing cancels. */
T512 static inline __m512 sigmoid16(__m512 v) {
  const __m512 m = _mm512_castsi512_ps(
      _mm512_or_epi32(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u)));
  const __m512 e = exp16(m);
  const __m512 r = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  const __mmask16 neg = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_mul_ps(r, neg, e, r);
}

T256 static inline __m256 sigmoid8(__m256 v) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 e = exp8(_mm256_or_ps(v, sign));
  const __m256 r = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
  const __m256 neg = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ);
  return _mm256_blendv_ps(r, _mm256_mul_ps(e, r), neg);
}

/* tanh: Cephes' odd polynomial below |x| = 0.625; above, (1 - e) / (1 + e)
 * with e = exp(-2|x|) (1 - e >= 0.71: no cancellation) and x's sign. */
T512 static inline __m512 tanh16(__m512 v) {
  const __m512i sbit = _mm512_set1_epi32((int)0x80000000u);
  const __m512 a = _mm512_abs_ps(v);
  const __m512 z = _mm512_mul_ps(a, a);
  __m512 p = _mm512_set1_ps(TANH_T4);
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(TANH_T3));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(TANH_T2));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(TANH_T1));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(TANH_T0));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(a, z), p, a);
  const __m512 e = exp16(_mm512_mul_ps(a, _mm512_set1_ps(-2.0f)));
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 t = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
  const __mmask16 lo = _mm512_cmp_ps_mask(a, _mm512_set1_ps(TANH_CUT), _CMP_LT_OQ);
  /* |tanh| from either side, then x's sign (so tanh(-0) = -0) */
  const __m512 mag = _mm512_mask_blend_ps(lo, t, small);
  return _mm512_castsi512_ps(
      _mm512_or_epi32(_mm512_castps_si512(mag), _mm512_and_epi32(_mm512_castps_si512(v), sbit)));
}

T256 static inline __m256 tanh8(__m256 v) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 a = _mm256_andnot_ps(sign, v);
  const __m256 z = _mm256_mul_ps(a, a);
  __m256 p = _mm256_set1_ps(TANH_T4);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(TANH_T3));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(TANH_T2));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(TANH_T1));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(TANH_T0));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(a, z), p, a);
  const __m256 e = exp8(_mm256_mul_ps(a, _mm256_set1_ps(-2.0f)));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 t = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
  const __m256 lo = _mm256_cmp_ps(a, _mm256_set1_ps(TANH_CUT), _CMP_LT_OQ);
  return _mm256_or_ps(_mm256_blendv_ps(t, small, lo), _mm256_and_ps(v, sign));
}

/* clamp(a x + b, 0, 1); NaN stays (max and min return their second operand). */
T512 static inline __m512 hsig16(__m512 v, __m512 a, __m512 b) {
  const __m512 h = _mm512_fmadd_ps(v, a, b);
  return _mm512_min_ps(_mm512_set1_ps(1.0f), _mm512_max_ps(_mm512_setzero_ps(), h));
}
T256 static inline __m256 hsig8(__m256 v, __m256 a, __m256 b) {
  const __m256 h = _mm256_fmadd_ps(v, a, b);
  return _mm256_min_ps(_mm256_set1_ps(1.0f), _mm256_max_ps(_mm256_setzero_ps(), h));
}

/* Mish: x tanh(log(1 + e^x)) = x t / (t + 2) with t = n (n + 2), n = e^x
 * (no cancellation: every term is positive). From x = 20 on the ratio
 * rounds to 1, so n's argument stops there (t would overflow later). */
T512 static inline __m512 mish16(__m512 v) {
  const __m512 nn = exp16(_mm512_min_ps(_mm512_set1_ps(20.0f), v));
  const __m512 t = _mm512_mul_ps(nn, _mm512_add_ps(nn, _mm512_set1_ps(2.0f)));
  return _mm512_mul_ps(v, _mm512_div_ps(t, _mm512_add_ps(t, _mm512_set1_ps(2.0f))));
}
T256 static inline __m256 mish8(__m256 v) {
  const __m256 nn = exp8(_mm256_min_ps(_mm256_set1_ps(20.0f), v));
  const __m256 t = _mm256_mul_ps(nn, _mm256_add_ps(nn, _mm256_set1_ps(2.0f)));
  return _mm256_mul_ps(v, _mm256_div_ps(t, _mm256_add_ps(t, _mm256_set1_ps(2.0f))));
}

T512 static inline __m512 k16_mish(__m512 v, const VParams* p) {
  (void)p;
  return mish16(v);
}
T256 static inline __m256 k8_mish(__m256 v, const VParams* p) {
  (void)p;
  return mish8(v);
}
T512 static inline __m512 k16_exp(__m512 v, const VParams* p) {
  (void)p;
  return exp16(v);
}
T512 static inline __m512 k16_sigmoid(__m512 v, const VParams* p) {
  (void)p;
  return sigmoid16(v);
}
T512 static inline __m512 k16_silu(__m512 v, const VParams* p) {
  (void)p;
  return _mm512_mul_ps(v, sigmoid16(v));
}
T512 static inline __m512 k16_tanh(__m512 v, const VParams* p) {
  (void)p;
  return tanh16(v);
}
T512 static inline __m512 k16_hardsigmoid(__m512 v, const VParams* p) {
  return hsig16(v, _mm512_set1_ps(p->a), _mm512_set1_ps(p->b));
}
T512 static inline __m512 k16_hardswish(__m512 v, const VParams* p) {
  (void)p;
  return _mm512_mul_ps(v, hsig16(v, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f)));
}
T256 static inline __m256 k8_exp(__m256 v, const VParams* p) {
  (void)p;
  return exp8(v);
}
T256 static inline __m256 k8_sigmoid(__m256 v, const VParams* p) {
  (void)p;
  return sigmoid8(v);
}
T256 static inline __m256 k8_silu(__m256 v, const VParams* p) {
  (void)p;
  return _mm256_mul_ps(v, sigmoid8(v));
}
T256 static inline __m256 k8_tanh(__m256 v, const VParams* p) {
  (void)p;
  return tanh8(v);
}
T256 static inline __m256 k8_hardsigmoid(__m256 v, const VParams* p) {
  return hsig8(v, _mm256_set1_ps(p->a), _mm256_set1_ps(p->b));
}
T256 static inline __m256 k8_hardswish(__m256 v, const VParams* p) {
  (void)p;
  return _mm256_mul_ps(v, hsig8(v, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f)));
}

/* The array loops: full vectors, then the tail through a masked load and
 * store (AVX-512) or a zero-padded copy (AVX2). */
#define VLOOP512(op)                                                                               \
  T512 static void op##_avx512(const float* x, float* y, size_t n, const VParams* p) {             \
    size_t i = 0;                                                                                  \
    for (; i + 16 <= n; i += 16)                                                                   \
      _mm512_storeu_ps(y + i, k16_##op(_mm512_loadu_ps(x + i), p));                                \
    if (i < n) {                                                                                   \
      const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);                                        \
      _mm512_mask_storeu_ps(y + i, m, k16_##op(_mm512_maskz_loadu_ps(m, x + i), p));               \
    }                                                                                              \
  }
#define VLOOP256(op)                                                                               \
  T256 static void op##_avx2(const float* x, float* y, size_t n, const VParams* p) {               \
    size_t i = 0;                                                                                  \
    for (; i + 8 <= n; i += 8)                                                                     \
      _mm256_storeu_ps(y + i, k8_##op(_mm256_loadu_ps(x + i), p));                                 \
    if (i < n) {                                                                                   \
      float buf[8] = {0};                                                                          \
      memcpy(buf, x + i, (n - i) * sizeof *buf);                                                   \
      _mm256_storeu_ps(buf, k8_##op(_mm256_loadu_ps(buf), p));                                     \
      memcpy(y + i, buf, (n - i) * sizeof *buf);                                                   \
    }                                                                                              \
  }
VLOOP512(exp)
VLOOP512(sigmoid)
VLOOP512(silu)
VLOOP512(tanh)
VLOOP512(hardsigmoid)
VLOOP512(hardswish)
VLOOP512(mish)
VLOOP256(exp)
VLOOP256(sigmoid)
VLOOP256(silu)
VLOOP256(tanh)
VLOOP256(hardsigmoid)
VLOOP256(hardswish)
VLOOP256(mish)
#endif

#if VMATH_X86
T512 static inline __m512 k16_log(__m512 v, const VParams* p) {
  (void)p;
  return Sleef_logf16_u10avx512f(v);
}
/* softplus(x) = max(x, 0) + log1p(exp(-|x|)): exp's argument is <= 0. */
T512 static inline __m512 k16_softplus(__m512 v, const VParams* p) {
  (void)p;
  const __m512 m = _mm512_castsi512_ps(
      _mm512_or_epi32(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u)));
  return _mm512_add_ps(_mm512_max_ps(_mm512_setzero_ps(), v), Sleef_log1pf16_u10avx512f(exp16(m)));
}
T256 static inline __m256 k8_log(__m256 v, const VParams* p) {
  (void)p;
  return Sleef_logf8_u10avx2(v);
}
T256 static inline __m256 k8_softplus(__m256 v, const VParams* p) {
  (void)p;
  const __m256 m = _mm256_or_ps(v, _mm256_set1_ps(-0.0f));
  return _mm256_add_ps(_mm256_max_ps(_mm256_setzero_ps(), v), Sleef_log1pf8_u10avx2(exp8(m)));
}
/* Elu, Selu, Celu through SLEEF's expm1f (1 ULP; no cancellation near 0). */
T512 static inline __m512 k16_elu(__m512 v, const VParams* p) {
  const __mmask16 neg = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_mul_ps(v, neg, _mm512_set1_ps(p->a), Sleef_expm1f16_u10avx512f(v));
}
T512 static inline __m512 k16_selu(__m512 v, const VParams* p) {
  const __mmask16 le = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LE_OQ);
  const __m512 em = _mm512_mul_ps(_mm512_set1_ps(p->a), Sleef_expm1f16_u10avx512f(v));
  return _mm512_mul_ps(_mm512_set1_ps(p->b), _mm512_mask_blend_ps(le, v, em));
}
T512 static inline __m512 k16_celu(__m512 v, const VParams* p) {
  const __m512 a = _mm512_set1_ps(p->a), zero = _mm512_setzero_ps();
  const __m512 em = _mm512_mul_ps(a, Sleef_expm1f16_u10avx512f(_mm512_div_ps(v, a)));
  /* max(x, 0) + min(0, a expm1(x / a)); NaN from either operand stays */
  return _mm512_add_ps(_mm512_max_ps(zero, v), _mm512_min_ps(zero, em));
}
T256 static inline __m256 k8_elu(__m256 v, const VParams* p) {
  const __m256 neg = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ);
  const __m256 em = _mm256_mul_ps(_mm256_set1_ps(p->a), Sleef_expm1f8_u10avx2(v));
  return _mm256_blendv_ps(v, em, neg);
}
T256 static inline __m256 k8_selu(__m256 v, const VParams* p) {
  const __m256 le = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LE_OQ);
  const __m256 em = _mm256_mul_ps(_mm256_set1_ps(p->a), Sleef_expm1f8_u10avx2(v));
  return _mm256_mul_ps(_mm256_set1_ps(p->b), _mm256_blendv_ps(v, em, le));
}
T256 static inline __m256 k8_celu(__m256 v, const VParams* p) {
  const __m256 a = _mm256_set1_ps(p->a), zero = _mm256_setzero_ps();
  const __m256 em = _mm256_mul_ps(a, Sleef_expm1f8_u10avx2(_mm256_div_ps(v, a)));
  return _mm256_add_ps(_mm256_max_ps(zero, v), _mm256_min_ps(zero, em));
}
VLOOP512(log)
VLOOP512(softplus)
VLOOP512(elu)
VLOOP512(selu)
VLOOP512(celu)
VLOOP256(log)
VLOOP256(softplus)
VLOOP256(elu)
VLOOP256(selu)
VLOOP256(celu)
#endif

typedef void (*VFn)(const float* x, float* y, size_t n, const VParams* p);

/* The path's function of an op: avx512, avx2, scalar (NULL: not built). */
static void vrun(VFn f512, VFn f256, VFn fs, const float* x, float* y, size_t n, const VParams* p) {
  const int pa = path();
  if (pa == PATH_AVX512 && f512)
    f512(x, y, n, p);
  else if (pa >= PATH_AVX2 && f256)
    f256(x, y, n, p);
  else
    fs(x, y, n, p);
}

#if CPUID_X86
#define VFNS(op) op##_avx512, op##_avx2, op##_scalar
#else
#define VFNS(op) NULL, NULL, op##_scalar
#endif
#if VMATH_X86
#define VFNS_SLEEF(op) op##_avx512, op##_avx2, op##_scalar
#else
#define VFNS_SLEEF(op) NULL, NULL, op##_scalar
#endif

void cpu_exp_f32(const float* x, float* y, size_t n) {
  vrun(VFNS(exp), x, y, n, NULL);
}
void cpu_sigmoid_f32(const float* x, float* y, size_t n) {
  vrun(VFNS(sigmoid), x, y, n, NULL);
}
void cpu_silu_f32(const float* x, float* y, size_t n) {
  vrun(VFNS(silu), x, y, n, NULL);
}
void cpu_tanh_f32(const float* x, float* y, size_t n) {
  vrun(VFNS(tanh), x, y, n, NULL);
}
void cpu_hardsigmoid_f32(const float* x, float* y, size_t n, float alpha, float beta) {
  const VParams p = {alpha, beta};
  vrun(VFNS(hardsigmoid), x, y, n, &p);
}
void cpu_hardswish_f32(const float* x, float* y, size_t n) {
  vrun(VFNS(hardswish), x, y, n, NULL);
}
void cpu_mish_f32(const float* x, float* y, size_t n) {
  vrun(VFNS(mish), x, y, n, NULL);
}
void cpu_log_f32(const float* x, float* y, size_t n) {
  vrun(VFNS_SLEEF(log), x, y, n, NULL);
}
void cpu_softplus_f32(const float* x, float* y, size_t n) {
  vrun(VFNS_SLEEF(softplus), x, y, n, NULL);
}
void cpu_elu_f32(const float* x, float* y, size_t n, float alpha) {
  const VParams p = {alpha, 0};
  vrun(VFNS_SLEEF(elu), x, y, n, &p);
}
void cpu_selu_f32(const float* x, float* y, size_t n, float alpha, float gamma) {
  const VParams p = {alpha, gamma};
  vrun(VFNS_SLEEF(selu), x, y, n, &p);
}
void cpu_celu_f32(const float* x, float* y, size_t n, float alpha) {
  const VParams p = {alpha, 0};
  vrun(VFNS_SLEEF(celu), x, y, n, &p);
}
