/* test_vmath_act.c — the float32 activations of cpu_vmath.c (Exp, Log,
 * Tanh, Sigmoid, SiLU, Softplus, Mish, HardSigmoid, HardSwish, Elu, Selu,
 * Celu)
 * against references computed here in double precision with libm: a sweep
 * over float bit patterns (every sign and exponent; 2^20 values, 2^14 under
 * valgrind), dense sweeps around the saturation points, signed zeros,
 * subnormals, infinities and NaN, every tail length, in-place calls. Each
 * op has a stated bound in float ULPs of the reference (the spacing of
 * floats at the reference's magnitude, 2^-149 in the subnormal range), the
 * one docs/providers/cpu.md gives. ctest runs the test as is and capped by
 * ONYX_CPU_ISA to AVX2 and to the scalar path, so every path is checked on
 * an AVX-512 machine. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_vmath.h"

typedef void (*Fn)(const float* x, float* y, size_t n);

static double sigmoid_d(double x) {
  return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
}
static double clamp01(double v) {
  return v < 0 ? 0 : v > 1 ? 1 : v;
}

#define HS_A 0.2f
#define HS_B 0.5f

static double ref_exp(double x) {
  return exp(x);
}
static double ref_log(double x) {
  return log(x);
}
static double ref_tanh(double x) {
  return tanh(x);
}
static double ref_sigmoid(double x) {
  return sigmoid_d(x);
}
static double ref_silu(double x) {
  return x * sigmoid_d(x);
}
static double ref_softplus(double x) {
  return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}
static double ref_mish(double x) {
  return x * tanh(ref_softplus(x));
}
static double ref_hardsigmoid(double x) {
  return clamp01((double)HS_A * x + (double)HS_B);
}
static double ref_hardswish(double x) {
  return x * clamp01(x / 6.0 + 0.5);
}
static void hardsigmoid_fn(const float* x, float* y, size_t n) {
  cpu_hardsigmoid_f32(x, y, n, HS_A, HS_B);
}
/* Elu with alpha 0.7, Selu with ONNX's default alpha and gamma, Celu with
 * alpha 1.5 (x / alpha is rounded: an argument not representable). */
#define ELU_A  0.7f
#define SELU_A 1.67326319217681884765625f
#define SELU_G 1.05070102214813232421875f
#define CELU_A 1.5f
static double ref_elu(double x) {
  return x < 0 ? (double)ELU_A * expm1(x) : x;
}
static double ref_selu(double x) {
  return x <= 0 ? (double)SELU_G * ((double)SELU_A * expm1(x)) : (double)SELU_G * x;
}
static double ref_celu(double x) {
  if (isnan(x)) return x;
  return (x > 0 ? x : 0) + fmin(0.0, (double)CELU_A * expm1(x / CELU_A));
}
static void elu_fn(const float* x, float* y, size_t n) {
  cpu_elu_f32(x, y, n, ELU_A);
}
static void selu_fn(const float* x, float* y, size_t n) {
  cpu_selu_f32(x, y, n, SELU_A, SELU_G);
}
static void celu_fn(const float* x, float* y, size_t n) {
  cpu_celu_f32(x, y, n, CELU_A);
}

/* abs_rel: an absolute allowance of abs_rel |x| beside the ULP bound.
 * SiLU and Mish: below x = -87.3, sigmoid(x) (Mish: e^x) is subnormal (its
 * absolute error up to 2^-150) before the product with x. HardSwish:
 * x / 6 + 1/2 near its zero at x = -3 keeps only the absolute accuracy of
 * its float rounding, whatever the path. `worst` is the largest error among
 * normal results, in ULP. */
typedef struct Op {
  const char* name;
  Fn fn;
  double (*ref)(double);
  double ulps;    /* the bound */
  double abs_rel; /* plus abs_rel * |x| absolute */
  double worst;   /* measured, normal results where the ULP part rules */
  double frac;    /* measured: the largest error / bound */
} Op;

static Op ops[] = {
    {"exp", cpu_exp_f32, ref_exp, 2, 0, 0, 0},
    {"log", cpu_log_f32, ref_log, 2, 0, 0, 0},
    {"tanh", cpu_tanh_f32, ref_tanh, 3, 0, 0, 0},
    {"sigmoid", cpu_sigmoid_f32, ref_sigmoid, 3, 0, 0, 0},
    {"silu", cpu_silu_f32, ref_silu, 4, 0x1p-149, 0, 0},
    {"softplus", cpu_softplus_f32, ref_softplus, 3, 0, 0, 0},
    {"hardsigmoid", hardsigmoid_fn, ref_hardsigmoid, 2, 0, 0, 0},
    {"hardswish", cpu_hardswish_f32, ref_hardswish, 2, 3e-8, 0, 0},
    {"mish", cpu_mish_f32, ref_mish, 5, 0x1p-149, 0, 0},
    {"elu", elu_fn, ref_elu, 3, 0, 0, 0},
    {"selu", selu_fn, ref_selu, 3, 0, 0, 0},
    {"celu", celu_fn, ref_celu, 3, 0, 0, 0},
};

/* The spacing of floats at |v| (the ULP of the float nearest v). */
static double ulp_at(double v) {
  const float f = (float)fabs(v);
  if (isinf(f)) return ldexp(1.0, 104); /* FLT_MAX's ULP */
  const float up = nextafterf(f, INFINITY);
  return isinf(up) ? ldexp(1.0, 104) : (double)up - (double)f;
}

/* Checks y against op's reference at x; records the worst ULP error. */
static void check(Op* op, float x, float got) {
  const double want = op->ref(x);
  if (isnan(want)) {
    if (!isnan(got)) fail_msg("%s(%.9g): got %.9g, want NaN", op->name, x, got);
    return;
  }
  if (isinf(want) || fabs(want) > 3.4028234663852886e38) {
    const double w = isinf(want) ? want : copysign(INFINITY, want);
    /* Past FLT_MAX the float result is inf (or FLT_MAX, rounded down). */
    if (!(got == w || fabs(got) == 3.40282347e38f))
      fail_msg("%s(%.9g): got %.9g, want %g", op->name, x, got, want);
    return;
  }
  if (isinf(got) || isnan(got)) fail_msg("%s(%.9g): got %.9g, want %.9g", op->name, x, got, want);
  const double err = fabs((double)got - want) / ulp_at(want);
  const double allow = op->ulps + op->abs_rel * fabs(x) / ulp_at(want);
  if (err > op->worst && fabs(want) >= 0x1p-126 && op->abs_rel * fabs(x) < 0.01 * ulp_at(want))
    op->worst = err;
  if (err / allow > op->frac) op->frac = err / allow;
  if (err > allow)
    fail_msg("%s(%.9g): got %.9g, want %.9g (%.2f ULP, bound %.2f)", op->name, x, got, want, err,
             allow);
}

static void run_all(Op* op, const float* x, size_t n, float* y) {
  op->fn(x, y, n);
  for (size_t i = 0; i < n; i++)
    check(op, x[i], y[i]);
}

/* 2^20 bit patterns spread over all 2^32 (every exponent, both signs),
 * NaNs included; then dense sweeps around each op's interesting points. */
static void test_sweeps(void** state) {
  (void)state;
  /* under memcheck (scripts/test.sh) 2^14 values per sweep keep it short */
  const uint32_t N = getenv("ONYX_UNDER_VALGRIND") ? 1u << 14 : 1u << 20;
  float* x = malloc(N * sizeof *x);
  float* y = malloc(N * sizeof *y);
  assert_non_null(x);
  assert_non_null(y);
  for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
    Op* op = &ops[k];
    const uint32_t stride = (uint32_t)(0x100000000ull / N);
    for (uint32_t i = 0; i < N; i++) { /* all exponents, varied mantissas */
      const uint32_t bits = i * stride + (i * 2654435761u) % stride;
      memcpy(&x[i], &bits, sizeof bits);
    }
    run_all(op, x, N, y);
    /* [-20, 20]: the polynomials' intervals, tanh's 0.625 cut, the
     * saturation of sigmoid/tanh, hardswish's +-3, hardsigmoid's -2.5/2.5 */
    for (uint32_t i = 0; i < N; i++)
      x[i] = -20.0f + 40.0f * (float)i / (float)(N - 1);
    run_all(op, x, N - 1, y); /* odd: a tail on every path */
    /* exp's overflow and underflow edges, sigmoid's subnormal tail */
    for (uint32_t i = 0; i < N; i++)
      x[i] = (i & 1 ? -1.0f : 1.0f) * (80.0f + 30.0f * (float)(i >> 1) / (float)(N / 2));
    run_all(op, x, N, y);
    /* small magnitudes: 1e-12 .. 1 */
    for (uint32_t i = 0; i < N; i++)
      x[i] = (i & 1 ? -1.0f : 1.0f) * (float)pow(10.0, -12.0 + 12.0 * (double)(i >> 1) / (N / 2));
    run_all(op, x, N, y);
    printf("%-12s worst %.3f ULP (bound %.0f%s; worst error / bound %.3f) on the %s path\n",
           op->name, op->worst, op->ulps, op->abs_rel ? " + abs_rel |x|" : "", op->frac,
           cpu_vmath_path());
  }
  free(x);
  free(y);
}

static void test_special_values(void** state) {
  (void)state;
  const float in[] = {0.0f,   -0.0f,   INFINITY, -INFINITY, NAN,     1e-45f,  -1e-45f,
                      1e-38f, -1e-38f, 88.72f,   88.73f,    -87.33f, -103.9f, -104.5f,
                      3.0f,   -3.0f,   2.5f,     -2.5f,     0.625f,  -0.625f, 9.0f,
                      -9.0f,  3.4e38f, -3.4e38f, 1.0f,      -1.0f,   20.0f,   -20.0f};
  enum { N = sizeof in / sizeof *in };
  float y[N];
  for (size_t k = 0; k < sizeof ops / sizeof *ops; k++)
    run_all(&ops[k], in, N, y);
  cpu_exp_f32(in, y, N);
  assert_true(y[0] == 1.0f && y[1] == 1.0f && y[2] == INFINITY && y[3] == 0.0f && isnan(y[4]));
  assert_true(y[10] == INFINITY && y[13] == 0.0f && y[12] > 0.0f); /* e^-103.9: subnormal */
  cpu_log_f32(in, y, N);
  assert_true(y[0] == -INFINITY && y[1] == -INFINITY && y[2] == INFINITY && isnan(y[3]));
  assert_true(isnan(y[25])); /* log(-1) */
  cpu_tanh_f32(in, y, N);
  assert_true(y[0] == 0.0f && !signbit(y[0]) && y[1] == 0.0f && signbit(y[1]));
  assert_true(y[2] == 1.0f && y[3] == -1.0f && isnan(y[4]) && y[5] == 1e-45f && y[6] == -1e-45f);
  assert_true(y[26] == 1.0f && y[27] == -1.0f);
  cpu_sigmoid_f32(in, y, N);
  assert_true(y[0] == 0.5f && y[1] == 0.5f && y[2] == 1.0f && y[3] == 0.0f && isnan(y[4]));
  assert_true(y[26] == 1.0f && y[27] > 0.0f && y[22] == 1.0f && y[23] == 0.0f);
  cpu_silu_f32(in, y, N);
  assert_true(y[0] == 0.0f && y[1] == 0.0f && signbit(y[1]) && y[2] == INFINITY && isnan(y[4]));
  assert_true(isnan(y[3])); /* -inf * 0, as Mul(x, Sigmoid(x)) gives */
  cpu_softplus_f32(in, y, N);
  assert_true(y[2] == INFINITY && y[3] == 0.0f && isnan(y[4]) && y[22] == 3.4e38f);
  assert_true(fabsf(y[0] - 0.69314718f) <= 1e-7f);
  cpu_mish_f32(in, y, N);
  assert_true(y[0] == 0.0f && y[2] == INFINITY && isnan(y[3]) && isnan(y[4]) && y[26] == 20.0f);
  assert_true(y[22] == 3.4e38f && y[23] == -0.0f);
  cpu_hardsigmoid_f32(in, y, N, HS_A, HS_B);
  assert_true(y[0] == 0.5f && y[2] == 1.0f && y[3] == 0.0f && isnan(y[4]));
  assert_true(y[16] == 1.0f && y[17] == 0.0f);
  cpu_elu_f32(in, y, N, ELU_A);
  assert_true(y[0] == 0.0f && y[2] == INFINITY && y[3] == -ELU_A && isnan(y[4]));
  cpu_selu_f32(in, y, N, SELU_A, SELU_G);
  assert_true(y[0] == 0.0f && y[2] == INFINITY && isnan(y[4]));
  assert_true(fabsf(y[3] + SELU_A * SELU_G) <= 2e-7f);
  cpu_celu_f32(in, y, N, CELU_A);
  assert_true(y[0] == 0.0f && y[2] == INFINITY && y[3] == -CELU_A && isnan(y[4]));
  cpu_hardswish_f32(in, y, N);
  assert_true(y[0] == 0.0f && y[14] == 3.0f && y[15] == 0.0f && y[2] == INFINITY && isnan(y[4]));
  assert_true(isnan(y[3])); /* -inf * 0, as the ONNX formula gives */
}

/* Every length 0..40 (each tail of 8- and 16-wide vectors), in place, the
 * element past the end untouched. */
static void test_lengths_in_place(void** state) {
  (void)state;
  for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
    for (size_t n = 0; n <= 40; n++) {
      float buf[41], ref[41];
      for (size_t i = 0; i < n; i++)
        buf[i] = ref[i] = (float)i * 0.37f - 6.0f + (float)k * 0.01f;
      buf[n] = 42.0f;
      if (!strcmp(ops[k].name, "log"))
        for (size_t i = 0; i < n; i++)
          buf[i] = ref[i] = fabsf(ref[i]) + 0.01f;
      ops[k].fn(buf, buf, n);
      for (size_t i = 0; i < n; i++)
        check(&ops[k], ref[i], buf[i]);
      assert_true(buf[n] == 42.0f);
    }
  }
}

int main(void) {
  const char* cap = getenv("ONYX_CPU_ISA");
  printf("vmath path: %s (ONYX_CPU_ISA=%s)\n", cpu_vmath_path(), cap ? cap : "unset");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sweeps),
      cmocka_unit_test(test_special_values),
      cmocka_unit_test(test_lengths_in_place),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
