/* test_gemm_act.c — the CPU provider's float32 GEMM (providers/cpu/cpu_gemm.c,
 * compiled in with a minimal host table) with the row activations
 * (HardSigmoid, HardSwish, Sigmoid, SiLU, Tanh) applied over each stored
 * tile, and its one-column path (n == 1: a dot product per row of A), on
 * every micro-kernel the machine has (portable, AVX2, AVX-512, forced in
 * turn up to what it has; the activations' own paths follow ONYX_CPU_ISA, which the ctest
 * variants cap). Shapes around the register tiles (m 1 to 37, n 1 to 70,
 * k 1 to 300, past one k block), alpha, beta, both biases, B transposed or
 * not, the pool stand-in splitting the work: each element against a
 * float64 reference computed here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_nn.h"
#include "cpu_util.h"

#include "cpu_fake_host.h"

static uint32_t rng = 12345;
static float uniform(void) { /* [-1, 1) */
  rng = rng * 1664525u + 1013904223u;
  return (float)((double)(rng >> 8) / (double)(1u << 23) - 1.0);
}

typedef struct Act {
  int act;
  float alpha, lo, hi;
} Act;

static const Act ACTS[] = {{CPU_ACT_NONE, 0, 0, 0},
                           {CPU_ACT_CLIP, 0, -0.5f, 2.0f},
                           {CPU_ACT_HARD_SIGMOID, 0.3f, 0.4f, 0},
                           {CPU_ACT_HARD_SWISH, 0, 0, 0},
                           {CPU_ACT_SIGMOID, 0, 0, 0},
                           {CPU_ACT_SILU, 0, 0, 0},
                           {CPU_ACT_TANH, 0, 0, 0}};

static double clamp01(double v) {
  return v < 0 ? 0 : v > 1 ? 1 : v;
}

static double act_ref(const Act* a, double v) {
  switch (a->act) {
  case CPU_ACT_CLIP:
    return v < a->lo ? a->lo : v > a->hi ? a->hi : v;
  case CPU_ACT_HARD_SIGMOID:
    return clamp01((double)a->alpha * v + (double)a->lo);
  case CPU_ACT_HARD_SWISH:
    return v * clamp01(v / 6.0 + 0.5);
  case CPU_ACT_SIGMOID:
    return 1.0 / (1.0 + exp(-v));
  case CPU_ACT_SILU:
    return v / (1.0 + exp(-v));
  case CPU_ACT_TANH:
    return tanh(v);
  default:
    return v;
  }
}

static void gemm_case(size_t m, size_t n, size_t k, int trans_b, float alpha, float beta, bool brow,
                      bool bcol, const Act* a, bool pool) {
  float* A = malloc(m * k * sizeof(float));
  float* B = malloc(k * n * sizeof(float));
  float* C = malloc(m * n * sizeof(float));
  float* C0 = malloc(m * n * sizeof(float));
  float* br = malloc(m * sizeof(float));
  float* bc = malloc(n * sizeof(float));
  assert_true(A && B && C && C0 && br && bc);
  const float scale = 4.0f / sqrtf((float)k); /* sums over about [-4, 4] */
  for (size_t i = 0; i < m * k; i++)
    A[i] = uniform() * scale;
  for (size_t i = 0; i < k * n; i++)
    B[i] = uniform();
  for (size_t i = 0; i < m * n; i++)
    C[i] = C0[i] = uniform();
  for (size_t i = 0; i < m; i++)
    br[i] = uniform();
  for (size_t i = 0; i < n; i++)
    bc[i] = uniform();
  const CpuGemm g = {.m = m,
                     .n = n,
                     .k = k,
                     .a = A,
                     .lda = k,
                     .b = B,
                     .ldb = trans_b ? k : n,
                     .trans_b = trans_b,
                     .c = C,
                     .ldc = n,
                     .alpha = alpha,
                     .beta = beta,
                     .bias_row = brow ? br : NULL,
                     .bias_col = bcol ? bc : NULL,
                     .act = a->act,
                     .act_alpha = a->alpha,
                     .act_min = a->lo,
                     .act_max = a->hi};
  cpu_gemm_f32(pool ? (OnyxThreadPool*)&host : NULL, &g);
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      double acc = 0;
      for (size_t p = 0; p < k; p++)
        acc += (double)A[i * k + p] * B[trans_b ? j * k + p : p * n + j];
      double v = alpha * acc + (beta != 0 ? (double)beta * C0[i * n + j] : 0.0);
      if (brow) v += br[i];
      if (bcol) v += bc[j];
      const double want = act_ref(a, v), got = C[i * n + j];
      if (!(fabs(got - want) <= 2e-5 * (1 + fabs(want))))
        fail_msg("%s: m %zu n %zu k %zu trans_b %d act %d: C[%zu][%zu] = %.9g, want %.9g",
                 cpu_gemm_isa_name(), m, n, k, trans_b, a->act, i, j, got, want);
    }
  free(A), free(B), free(C), free(C0), free(br), free(bc);
}

static const size_t MS[] = {1, 5, 8, 13, 37};
static const size_t NS[] = {1, 2, 17, 33, 70};
static const size_t KS[] = {1, 7, 16, 45, 300};

static void every_shape(void) {
  for (size_t a = 0; a < sizeof ACTS / sizeof *ACTS; a++)
    for (size_t mi = 0; mi < sizeof MS / sizeof *MS; mi++)
      for (size_t ni = 0; ni < sizeof NS / sizeof *NS; ni++)
        for (size_t ki = 0; ki < sizeof KS / sizeof *KS; ki++) {
          const size_t v = mi + ni + ki + a; /* vary the options with the shape */
          gemm_case(MS[mi], NS[ni], KS[ki], (int)(v % 2), v % 3 ? 1.0f : 0.75f,
                    v % 4 == 1   ? 1.0f
                    : v % 4 == 3 ? 0.5f
                                 : 0.0f,
                    v % 2 == 0, v % 3 == 1, &ACTS[a], v % 5 == 0);
        }
}

static void test_every_kernel(void** state) {
  (void)state;
  cpu_gemm_force_isa(-1);
  const int have = cpu_gemm_isa_level(); /* never more than the machine (and the cap) has */
  for (int level = 0; level <= have; level++) {
    cpu_gemm_force_isa(level);
    every_shape();
  }
  cpu_gemm_force_isa(-1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_kernel),
  };
  const int failed = cmocka_run_group_tests(tests, NULL, NULL);
  scratch_free();
  return failed;
}
