/* test_vmath.c — cpu_erf_f32 and cpu_gelu_f32 against erf() in double
 * precision: a dense sweep over [-8, 8], a sweep over the whole float range
 * (every 61st bit pattern: ±0, subnormals, tiny, large, ±inf) with Erf's
 * 2 ULP bound asserted, signed zeros, infinities and NaN, lengths that
 * leave every tail size, and in-place calls. The
 * expected values come from libm's double erf, not from the code under test.
 * ctest runs it as is and capped to AVX2 and to the scalar path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_vmath.h"

/* Within 2 ULP of float at the value (the vector paths' bound, cpu_vmath.h;
 * libm's erff is within 1), plus a tiny absolute floor near zero. */
static void expect_close(float got, double want, const char* what, double x) {
  if (isnan(want)) {
    if (!isnan(got)) fail_msg("%s(%.9g): got %.9g, want NaN", what, x, got);
    return;
  }
  const double ulp =
      fabs(want) > 0 ? nextafterf((float)fabs(want), INFINITY) - (float)fabs(want) : 1e-45;
  if (fabs((double)got - want) > 2 * ulp + 1e-30)
    fail_msg("%s(%.9g): got %.9g, want %.9g (%.2f ulp)", what, x, got, want,
             fabs((double)got - want) / ulp);
}

static double gelu_ref(double x) {
  return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}

static void test_sweep(void** state) {
  (void)state;
  enum { N = 160001 }; /* odd: the vector paths take a tail */
  float* x = malloc(N * sizeof *x);
  float* y = malloc(N * sizeof *y);
  float* g = malloc(N * sizeof *g);
  assert_non_null(x);
  assert_non_null(y);
  assert_non_null(g);
  for (int i = 0; i < N; i++)
    x[i] = -8.0f + 16.0f * (float)i / (float)(N - 1);
  cpu_erf_f32(x, y, N);
  cpu_gelu_f32(x, g, N);
  for (int i = 0; i < N; i++) {
    expect_close(y[i], erf((double)x[i]), "erf", x[i]);
    /* Gelu rounds x/sqrt(2), the erf and the products in float: compare
     * with a relative bound of a few float ULPs, absolute near its zero. */
    const double want = gelu_ref(x[i]);
    if (fabs(g[i] - want) > 4e-7 * fabs(want) + 1e-7)
      fail_msg("gelu(%.9g): got %.9g, want %.9g", x[i], g[i], want);
  }
  free(x);
  free(y);
  free(g);
}

static void test_special_values(void** state) {
  (void)state;
  const float in[] = {0.0f,  -0.0f,  INFINITY, -INFINITY, NAN,  1e-30f, -1e-30f, 3.9f, -3.9f,
                      10.0f, -10.0f, 1e30f,    -1e30f,    0.5f, -0.5f,  1e-7f,   2.0f};
  const size_t n = sizeof in / sizeof *in;
  float y[sizeof in / sizeof *in], g[sizeof in / sizeof *in];
  cpu_erf_f32(in, y, n);
  cpu_gelu_f32(in, g, n);
  for (size_t i = 0; i < n; i++)
    expect_close(y[i], erf((double)in[i]), "erf", in[i]);
  assert_true(signbit(y[1])); /* erf(-0) = -0 */
  assert_true(y[2] == 1.0f && y[3] == -1.0f);
  assert_true(isnan(g[4]));
  assert_true(g[2] == INFINITY);                        /* gelu(+inf) = inf */
  assert_true(g[3] == 0.0f);                            /* gelu(-inf) = 0 (the limit) */
  assert_true(fabsf(g[10]) <= 1e-20f && g[10] <= 0.0f); /* gelu(-10) = -7.7e-23 */
  assert_true(fabsf(g[13] - (float)gelu_ref(0.5)) < 1e-7f);
}

/* Error of got in ULPs of float at want: |got - want| over the spacing of
 * floats at |float(want)| (2^-149 among the subnormals). */
static double ulps(float got, double want) {
  const float w = fabsf((float)want);
  const double u = w < 1.17549435e-38f ? 0x1p-149 : (double)(nextafterf(w, INFINITY) - w);
  return fabs((double)got - want) / u;
}

/* Every 61st float bit pattern (both signs, each binade, subnormals and the
 * edges of the polynomials' intervals alike) plus the special values: erf
 * within 2 ULP of erf() in double, exactly +-1 from |x| = 4 on, NaN for
 * NaN. The worst error seen is printed (about 1.6 ULP on the vector paths). */
static void test_erf_all_floats(void** state) {
  (void)state;
  enum { B = 4093 };
  float* x = malloc(B * sizeof *x);
  float* y = malloc(B * sizeof *y);
  assert_non_null(x);
  assert_non_null(y);
  static const float special[] = {0.0f,       -0.0f,          INFINITY,   -INFINITY, 0x1p-149f,
                                  -0x1p-149f, 0x1p-126f,      0.5f,       -0.5f,     4.0f,
                                  -4.0f,      0x1.fffffep-2f, 3.9999998f, FLT_MAX,   -FLT_MAX};
  double worst = 0.0;
  float worst_x = 0.0f;
  size_t k = 0;
  uint64_t bits = 0;
  size_t next_special = 0;
  const size_t n_special = sizeof special / sizeof *special;
  while (bits < (1ull << 32) || next_special < n_special) {
    if (next_special < n_special) {
      x[k++] = special[next_special++];
    } else {
      const uint32_t b = (uint32_t)bits;
      bits += 61;
      float f;
      memcpy(&f, &b, sizeof f);
      if (isnan(f)) continue;
      x[k++] = f;
    }
    if (k < B && (bits < (1ull << 32) || next_special < n_special)) continue;
    cpu_erf_f32(x, y, k);
    for (size_t i = 0; i < k; i++) {
      const double want = erf((double)x[i]);
      const double e = ulps(y[i], want);
      if (!(e <= 2.0))
        fail_msg("erf(%a): got %a, want %.17g (%.3f ulp)", (double)x[i], (double)y[i], want, e);
      if (fabsf(x[i]) >= 4.0f) assert_true(y[i] == copysignf(1.0f, x[i]));
      if (x[i] == 0.0f) assert_true(y[i] == 0.0f && signbit(y[i]) == signbit(x[i]));
      if (e > worst) {
        worst = e;
        worst_x = x[i];
      }
    }
    k = 0;
  }
  const float nan_in[3] = {NAN, -NAN, 1.0f};
  float nan_out[3];
  cpu_erf_f32(nan_in, nan_out, 3);
  assert_true(isnan(nan_out[0]) && isnan(nan_out[1]));
  printf("erf (%s): worst %.3f ulp at %a\n", cpu_vmath_path(), worst, (double)worst_x);
  free(x);
  free(y);
}

/* The negative tail, where 0.5 x (1 + erf(x / sqrt 2)) would lose every
 * digit to cancellation: relative accuracy against erfc in double. */
static void test_gelu_negative_tail(void** state) {
  (void)state;
  enum { N = 4001 };
  float x[N], g[N];
  for (int i = 0; i < N; i++)
    x[i] = -5.5f + 3.0f * (float)i / (float)(N - 1); /* [-5.5, -2.5] */
  cpu_gelu_f32(x, g, N);
  for (int i = 0; i < N; i++) {
    const double want = 0.5 * x[i] * erfc(-x[i] / sqrt(2.0));
    if (fabs(g[i] - want) > 2e-5 * fabs(want))
      fail_msg("gelu(%.9g): got %.9g, want %.9g (rel %.3g)", x[i], g[i], want,
               fabs(g[i] - want) / fabs(want));
  }
}

/* Every length 0..40 (all tail sizes of 8- and 16-wide vectors), in place. */
static void test_lengths_in_place(void** state) {
  (void)state;
  for (size_t n = 0; n <= 40; n++) {
    float buf[41], ref[41];
    for (size_t i = 0; i < n; i++)
      buf[i] = ref[i] = (float)i * 0.173f - 3.0f;
    buf[n] = 42.0f; /* the element past the end stays */
    cpu_erf_f32(buf, buf, n);
    for (size_t i = 0; i < n; i++)
      expect_close(buf[i], erf((double)ref[i]), "erf", ref[i]);
    assert_true(buf[n] == 42.0f);
    for (size_t i = 0; i < n; i++)
      buf[i] = ref[i];
    cpu_gelu_f32(buf, buf, n);
    for (size_t i = 0; i < n; i++)
      assert_true(fabs(buf[i] - gelu_ref(ref[i])) <= 4e-7 * fabs(gelu_ref(ref[i])) + 1e-7);
    assert_true(buf[n] == 42.0f);
  }
}

/* The path follows the build and ONYX_CPU_ISA. */
static void test_path(void** state) {
  (void)state;
  const char* p = cpu_vmath_path();
  const char* cap = getenv("ONYX_CPU_ISA");
  printf("vmath path: %s (ONYX_CPU_ISA=%s)\n", p, cap ? cap : "unset");
  if (cap && !strcmp(cap, "generic")) assert_string_equal(p, "scalar");
  if (cap && !strcmp(cap, "avx2")) assert_true(strcmp(p, "avx512") != 0);
#if defined(__x86_64__) && defined(__GNUC__)
  if (!cap && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    assert_true(strcmp(p, "scalar") != 0);
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sweep),
      cmocka_unit_test(test_special_values),
      cmocka_unit_test(test_erf_all_floats),
      cmocka_unit_test(test_gelu_negative_tail),
      cmocka_unit_test(test_lengths_in_place),
      cmocka_unit_test(test_path),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
