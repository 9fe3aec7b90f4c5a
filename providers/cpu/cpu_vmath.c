/* cpu_vmath.c — see cpu_vmath.h. The vector bodies are compiled for their
 * ISA with target attributes and called only after a cpuid check, so the
 * library still runs on machines without AVX2. */
#include "cpu_vmath.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(ONYX_HAVE_SLEEF) && (defined(__x86_64__) || defined(__i386__))
#define VMATH_X86 1
#include <immintrin.h>
/* SLEEF's functions used here. sleef.h declares its 256/512-bit functions
 * only when the whole file targets those ISAs, so they are declared here
 * (same signatures, with the ISA each one needs; the calls sit in functions
 * compiled for it). */
extern __attribute__((target("avx512f"))) __m512 Sleef_erff16_u10avx512f(__m512);
extern __attribute__((target("avx2,fma,avx"))) __m256 Sleef_erff8_u10avx2(__m256);
#else
#define VMATH_X86 0
#endif

enum { PATH_SCALAR, PATH_AVX2, PATH_AVX512 };

static int path(void) {
  static _Atomic int cached = -1;
  int p = cached;
  if (p < 0) {
    p = PATH_SCALAR;
#if VMATH_X86
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

static void gelu_scalar(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  }
}

#if VMATH_X86
#define T512 __attribute__((target("avx512f,avx2,fma,avx")))
#define T256 __attribute__((target("avx2,fma,avx")))

/* The tail goes through a zero-padded copy, so every call sees full vectors
 * (masked loads would do too; this keeps both ISAs alike). */
T512 static void erf_avx512(const float* x, float* y, size_t n, int gelu) {
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  const __m512 rsqrt2 = _mm512_set1_ps(0.70710678118654752f);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    __m512 r;
    if (gelu)
      r = _mm512_mul_ps(_mm512_mul_ps(half, v),
                        _mm512_add_ps(one, Sleef_erff16_u10avx512f(_mm512_mul_ps(v, rsqrt2))));
    else
      r = Sleef_erff16_u10avx512f(v);
    _mm512_storeu_ps(y + i, r);
  }
  if (i < n) {
    float buf[16] = {0};
    memcpy(buf, x + i, (n - i) * sizeof *buf);
    erf_avx512(buf, buf, 16, gelu);
    memcpy(y + i, buf, (n - i) * sizeof *buf);
  }
}

T256 static void erf_avx2(const float* x, float* y, size_t n, int gelu) {
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  const __m256 rsqrt2 = _mm256_set1_ps(0.70710678118654752f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    __m256 r;
    if (gelu)
      r = _mm256_mul_ps(_mm256_mul_ps(half, v),
                        _mm256_add_ps(one, Sleef_erff8_u10avx2(_mm256_mul_ps(v, rsqrt2))));
    else
      r = Sleef_erff8_u10avx2(v);
    _mm256_storeu_ps(y + i, r);
  }
  if (i < n) {
    float buf[8] = {0};
    memcpy(buf, x + i, (n - i) * sizeof *buf);
    erf_avx2(buf, buf, 8, gelu);
    memcpy(y + i, buf, (n - i) * sizeof *buf);
  }
}
#endif

void cpu_erf_f32(const float* x, float* y, size_t n) {
#if VMATH_X86
  switch (path()) {
  case PATH_AVX512:
    erf_avx512(x, y, n, 0);
    return;
  case PATH_AVX2:
    erf_avx2(x, y, n, 0);
    return;
  default:
    break;
  }
#endif
  erf_scalar(x, y, n);
}

void cpu_gelu_f32(const float* x, float* y, size_t n) {
#if VMATH_X86
  switch (path()) {
  case PATH_AVX512:
    erf_avx512(x, y, n, 1);
    return;
  case PATH_AVX2:
    erf_avx2(x, y, n, 1);
    return;
  default:
    break;
  }
#endif
  gelu_scalar(x, y, n);
}
