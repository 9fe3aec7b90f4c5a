/* cpu_grad_bn.c — BatchNormalization's float32 plane loops (see
 * cpu_grad_bn.h): AVX-512 (two 16-lane accumulators per sum, 32 lanes)
 * when the provider's GEMM runs AVX-512, else 8 lanes of portable C. */
#include "cpu_grad_bn.h"

#include <stdbool.h>
#include <stddef.h>

#include "cpu_gemm.h"

enum { LANES_C = 8 };

static double lanes_sum(const float* acc, int n) {
  double s = 0;
  for (int l = 0; l < n; l++)
    s += acc[l];
  return s;
}

static void moments_c(const float* x, size_t len, float m, double* s1, double* s2) {
  float a1[LANES_C] = {0}, a2[LANES_C] = {0};
  size_t i = 0;
  for (; i + LANES_C <= len; i += LANES_C)
    for (int l = 0; l < LANES_C; l++) {
      const float d = x[i + (size_t)l] - m;
      a1[l] += d;
      a2[l] += d * d;
    }
  for (int l = 0; i < len; i++, l++) {
    const float d = x[i] - m;
    a1[l] += d;
    a2[l] += d * d;
  }
  *s1 += lanes_sum(a1, LANES_C);
  *s2 += lanes_sum(a2, LANES_C);
}

static void grad_sums_c(const float* x, const float* dy, size_t len, float m, double* sb,
                        double* ss, double* s1, double* s2) {
  float ab[LANES_C] = {0}, as[LANES_C] = {0}, a1[LANES_C] = {0}, a2[LANES_C] = {0};
  size_t i = 0;
  for (; i + LANES_C <= len; i += LANES_C)
    for (int l = 0; l < LANES_C; l++) {
      const float g = dy[i + (size_t)l], d = x[i + (size_t)l] - m;
      ab[l] += g;
      as[l] += g * d;
      a1[l] += d;
      a2[l] += d * d;
    }
  for (int l = 0; i < len; i++, l++) {
    const float g = dy[i], d = x[i] - m;
    ab[l] += g;
    as[l] += g * d;
    a1[l] += d;
    a2[l] += d * d;
  }
  *sb += lanes_sum(ab, LANES_C);
  *ss += lanes_sum(as, LANES_C);
  if (s1) {
    *s1 += lanes_sum(a1, LANES_C);
    *s2 += lanes_sum(a2, LANES_C);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BN_X86 1
#define AVX512 __attribute__((target("avx512f")))

static __mmask16 tail_mask(size_t n) {
  return (__mmask16)(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
}

/* The 32 float lanes of a[0], a[1] added in double: lanes l and l + 8 of
 * each vector, then the two vectors, then the 8 doubles (a fixed order). */
AVX512 static double lanes_sum_512(const __m512* a) {
  const __m512d lo0 = _mm512_cvtps_pd(_mm512_castps512_ps256(a[0]));
  const __m512d hi0 =
      _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[0]), 1)));
  const __m512d lo1 = _mm512_cvtps_pd(_mm512_castps512_ps256(a[1]));
  const __m512d hi1 =
      _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[1]), 1)));
  return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(lo0, hi0), _mm512_add_pd(lo1, hi1)));
}

/* 32 lanes: value i goes to lane i % 32 (the tail's values to the lanes of
 * their position too). */
AVX512 static void moments_512(const float* x, size_t len, float m, double* s1, double* s2) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512 a1[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  __m512 a2[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  for (size_t i = 0; i < len; i += 32)
    for (int h = 0; h < 2; h++) {
      const size_t at = i + (size_t)h * 16;
      if (at >= len) break;
      const __mmask16 k = tail_mask(len - at);
      const __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x + at), mv);
      a1[h] = _mm512_add_ps(a1[h], d);
      a2[h] = _mm512_fmadd_ps(d, d, a2[h]);
    }
  *s1 += lanes_sum_512(a1);
  *s2 += lanes_sum_512(a2);
}

AVX512 static void grad_sums_512(const float* x, const float* dy, size_t len, float m, double* sb,
                                 double* ss, double* s1, double* s2) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512 ab[2], as[2], a1[2], a2[2];
  for (int h = 0; h < 2; h++)
    ab[h] = as[h] = a1[h] = a2[h] = _mm512_setzero_ps();
  for (size_t i = 0; i < len; i += 32)
    for (int h = 0; h < 2; h++) {
      const size_t at = i + (size_t)h * 16;
      if (at >= len) break;
      const __mmask16 k = tail_mask(len - at);
      const __m512 g = _mm512_maskz_loadu_ps(k, dy + at);
      const __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x + at), mv);
      ab[h] = _mm512_add_ps(ab[h], g);
      as[h] = _mm512_fmadd_ps(g, d, as[h]);
      a1[h] = _mm512_add_ps(a1[h], d);
      a2[h] = _mm512_fmadd_ps(d, d, a2[h]);
    }
  *sb += lanes_sum_512(ab);
  *ss += lanes_sum_512(as);
  if (s1) {
    *s1 += lanes_sum_512(a1);
    *s2 += lanes_sum_512(a2);
  }
}

AVX512 static void affine_512(const float* x, float* y, size_t len, float a, float b) {
  const __m512 av = _mm512_set1_ps(a), bv = _mm512_set1_ps(b);
  for (size_t i = 0; i < len; i += 16) {
    const __mmask16 k = tail_mask(len - i);
    _mm512_mask_storeu_ps(y + i, k, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, x + i), av, bv));
  }
}

/* a (dy - mb - (x - mu) k), with the same roundings as the portable loop
 * (no contraction into FMAs) */
AVX512 static void grad_dx_512(const float* x, const float* dy, float* dx, size_t len, float a,
                               float mb, float mu, float k) {
  const __m512 av = _mm512_set1_ps(a), bv = _mm512_set1_ps(mb), uv = _mm512_set1_ps(mu),
               kv = _mm512_set1_ps(k);
  for (size_t i = 0; i < len; i += 16) {
    const __mmask16 m = tail_mask(len - i);
    const __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), uv), kv);
    const __m512 g = _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, dy + i), bv), xh);
    _mm512_mask_storeu_ps(dx + i, m, _mm512_mul_ps(av, g));
  }
}
#else
#define BN_X86 0
#endif

static bool use_512(void) {
#if BN_X86
  return cpu_gemm_isa_level() == CPU_ISA_AVX512;
#else
  return false;
#endif
}

void cpu_bn_moments(const float* x, size_t len, float m, double* s1, double* s2) {
#if BN_X86
  if (use_512()) {
    moments_512(x, len, m, s1, s2);
    return;
  }
#endif
  moments_c(x, len, m, s1, s2);
}

void cpu_bn_grad_sums(const float* x, const float* dy, size_t len, float m, double* sb, double* ss,
                      double* s1, double* s2) {
#if BN_X86
  if (use_512()) {
    grad_sums_512(x, dy, len, m, sb, ss, s1, s2);
    return;
  }
#endif
  grad_sums_c(x, dy, len, m, sb, ss, s1, s2);
}

void cpu_bn_affine(const float* x, float* y, size_t len, float a, float b) {
#if BN_X86
  if (use_512()) {
    affine_512(x, y, len, a, b);
    return;
  }
#endif
  for (size_t i = 0; i < len; i++)
    y[i] = x[i] * a + b;
}

void cpu_bn_grad_dx(const float* x, const float* dy, float* dx, size_t len, float a, float mb,
                    float mu, float k) {
#if BN_X86
  if (use_512()) {
    grad_dx_512(x, dy, dx, len, a, mb, mu, k);
    return;
  }
#endif
  for (size_t i = 0; i < len; i++)
    dx[i] = a * (dy[i] - mb - (x[i] - mu) * k);
}
