/* test_winograd_kernel.c — the CPU provider's Winograd F(4x4, 3x3) conv
 * (providers/cpu/cpu_conv_winograd.c), compiled into the test with the GEMM
 * core and a minimal host table, against a direct convolution written here
 * with double accumulation: channel counts that are not multiples of 16,
 * outputs that are not multiples of 4 (7x7, 5x9, 13x13, 1x1), pads 0/1/2
 * (also asymmetric), batch 2, several blocks of tiles, with and without
 * bias, every activation, both tile sizes (F(4x4, 3x3) and F(2x2, 3x3)),
 * the AVX-512 and the portable transforms, pool independence, the applicability rules and
 * NaN kept by the activations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_nn.h"
#include "cpu_util.h"
#include "cpu_winograd.h"

/* The host table, the pool stand-in and scratch (ctx_pool, scratch_free). */
#include "cpu_fake_host.h"

static uint32_t rng = 12345;
static size_t tile = 4;      /* the output tile check_case creates for */
static float uniform(void) { /* [-1, 1) */
  rng = rng * 1664525u + 1013904223u;
  return (float)((double)(rng >> 8) / (double)(1u << 23) - 1.0);
}

typedef struct Case {
  size_t n, ic, oc, h, w;
  size_t pt, pl, pb, pr; /* pads: top, left, bottom, right */
} Case;

typedef struct Act {
  int act;
  float alpha, lo, hi;
} Act;

static double apply_act(double v, const Act* a) {
  switch (a->act) {
  case CPU_ACT_RELU:
    return v < 0 ? 0 : v;
  case CPU_ACT_LEAKY_RELU:
    return v < 0 ? v * a->alpha : v;
  case CPU_ACT_CLIP:
    return v < a->lo ? a->lo : v > a->hi ? a->hi : v;
  default:
    return v;
  }
}

/* Y (n, oc, oh, ow) by the definition of Conv, in double. */
static void direct_conv(const Case* c, const float* x, const float* w, const float* bias,
                        const Act* a, double* y, size_t oh, size_t ow) {
  for (size_t n = 0; n < c->n; n++)
    for (size_t o = 0; o < c->oc; o++)
      for (size_t i = 0; i < oh; i++)
        for (size_t j = 0; j < ow; j++) {
          double s = bias ? bias[o] : 0.0;
          for (size_t ci = 0; ci < c->ic; ci++)
            for (size_t u = 0; u < 3; u++)
              for (size_t v = 0; v < 3; v++) {
                const long yy = (long)(i + u) - (long)c->pt, xx = (long)(j + v) - (long)c->pl;
                if (yy < 0 || xx < 0 || yy >= (long)c->h || xx >= (long)c->w) continue;
                s += (double)x[((n * c->ic + ci) * c->h + (size_t)yy) * c->w + (size_t)xx] *
                     (double)w[((o * c->ic + ci) * 3 + u) * 3 + v];
              }
          y[((n * c->oc + o) * oh + i) * ow + j] = apply_act(s, a);
        }
}

/* Runs the Winograd conv on random data and checks every output against
 * direct_conv (rtol 1e-4, atol 1e-4 of the outputs' rms, ~3e-5; W scaled by
 * 1 / sqrt(9 ic) so that outputs are O(1)). Returns Y (caller frees) for further comparisons. */
static float* check_case(const Case* c, int with_bias, const Act* a, OnyxThreadPool* pool) {
  const size_t oh = c->h + c->pt + c->pb - 2, ow = c->w + c->pl + c->pr - 2;
  const size_t xn = c->n * c->ic * c->h * c->w, wn = c->oc * c->ic * 9;
  const size_t yn = c->n * c->oc * oh * ow;
  float* x = malloc(xn * sizeof *x);
  float* w = malloc(wn * sizeof *w);
  float* bias = malloc(c->oc * sizeof *bias);
  float* y = malloc(yn * sizeof *y);
  double* want = malloc(yn * sizeof *want);
  assert_true(x && w && bias && y && want);
  const float scale = 1.0f / sqrtf(9.0f * (float)c->ic);
  for (size_t i = 0; i < xn; i++)
    x[i] = uniform();
  for (size_t i = 0; i < wn; i++)
    w[i] = uniform() * scale;
  for (size_t i = 0; i < c->oc; i++)
    bias[i] = uniform();
  for (size_t i = 0; i < yn; i++)
    y[i] = NAN; /* every output must be written */
  CpuWinograd* wg = cpu_winograd_create(w, c->oc, c->ic, tile);
  assert_non_null(wg);
  assert_int_equal(wg->m, tile);
  assert_int_equal(wg->points, (tile + 2) * (tile + 2));
  const CpuWinogradConv p = {.x = x,
                             .y = y,
                             .bias = with_bias ? bias : NULL,
                             .n = c->n,
                             .h = c->h,
                             .w = c->w,
                             .oh = oh,
                             .ow = ow,
                             .pad_top = c->pt,
                             .pad_left = c->pl,
                             .act = a->act,
                             .act_alpha = a->alpha,
                             .act_min = a->lo,
                             .act_max = a->hi};
  ctx_pool = pool;
  const size_t runs = cpu_winograd_runs();
  assert_null(cpu_winograd_conv(wg, (OnyxKernelContext*)&host, &p));
  assert_int_equal(cpu_winograd_runs(), runs + 1);
  scratch_free();
  direct_conv(c, x, w, with_bias ? bias : NULL, a, want, oh, ow);
  /* F(4x4, 3x3) rounding grows with the output's scale (its transforms
   * reach 8x and 1/24 factors): atol 1e-4 of the outputs' rms, about 3e-5
   * here; F(2x2) stays ~30x below. */
  double ms = 0;
  for (size_t i = 0; i < yn; i++)
    ms += want[i] * want[i];
  const double atol = 1e-4 * sqrt(ms / (double)(yn ? yn : 1)) + 1e-7;
  for (size_t i = 0; i < yn; i++)
    if (!(fabs((double)y[i] - want[i]) <= atol + 1e-4 * fabs(want[i])))
      fail_msg("tile=%zu n=%zu ic=%zu oc=%zu %zux%zu pads %zu,%zu,%zu,%zu bias=%d act=%d: y[%zu] = "
               "%.9g, "
               "want %.9g",
               tile, c->n, c->ic, c->oc, c->h, c->w, c->pt, c->pl, c->pb, c->pr, with_bias, a->act,
               i, y[i], want[i]);
  cpu_winograd_free(wg);
  free(x);
  free(w);
  free(bias);
  free(want);
  return y;
}

static const Case CASES[] = {
    {1, 17, 19, 7, 7, 1, 1, 1, 1},    /* 7x7 output */
    {2, 16, 33, 5, 9, 1, 1, 1, 1},    /* 5x9, batch 2 */
    {1, 20, 24, 15, 15, 0, 0, 0, 0},  /* 13x13, no padding */
    {1, 24, 16, 3, 3, 0, 0, 0, 0},    /* 1x1 output */
    {2, 18, 21, 11, 13, 2, 2, 2, 2},  /* 13x15, pads 2 */
    {1, 19, 17, 9, 10, 0, 1, 2, 1},   /* asymmetric pads */
    {1, 40, 48, 40, 40, 1, 1, 1, 1},  /* several blocks of tiles */
    {2, 64, 64, 12, 12, 1, 1, 1, 1},  /* tiles of two images in one block */
    {1, 3, 2, 6, 6, 1, 1, 1, 1},      /* tiny channel counts still compute right */
    {1, 130, 20, 8, 8, 1, 1, 1, 1},   /* more input channels than a GEMM k block */
    {1, 96, 96, 46, 46, 1, 1, 1, 1}}; /* 5 blocks: 4 whole per pool thread, 1 split */
static const Act NONE = {CPU_ACT_NONE, 0, 0, 0};

static void test_shapes(void** state) {
  (void)state;
  for (tile = 4; tile >= 2; tile -= 2)
    for (size_t i = 0; i < CPU_ARRAY_LEN(CASES); i++)
      for (int b = 0; b < 2; b++)
        free(check_case(&CASES[i], b, &NONE, NULL));
  tile = 4;
}

static void test_activations(void** state) {
  (void)state;
  const Act acts[] = {{CPU_ACT_RELU, 0, 0, 0},
                      {CPU_ACT_LEAKY_RELU, 0.1f, 0, 0},
                      {CPU_ACT_CLIP, 0, -0.3f, 0.4f},
                      {CPU_ACT_CLIP, 0, 0.0f, 6.0f}};
  for (tile = 4; tile >= 2; tile -= 2)
    for (size_t a = 0; a < CPU_ARRAY_LEN(acts); a++) {
      free(check_case(&CASES[1], 1, &acts[a], NULL));
      free(check_case(&CASES[5], 0, &acts[a], NULL));
    }
  tile = 4;
}

/* The same inputs (same seed) with and without a pool: bit-identical. */
static void test_pool_independent(void** state) {
  (void)state;
  const Act relu = {CPU_ACT_RELU, 0, 0, 0};
  for (size_t i = 0; i < 2 * CPU_ARRAY_LEN(CASES); i++) {
    const Case* c = &CASES[i / 2];
    tile = i % 2 ? 2 : 4;
    const size_t yn = c->n * c->oc * (c->h + c->pt + c->pb - 2) * (c->w + c->pl + c->pr - 2);
    const uint32_t seed = rng;
    float* a = check_case(c, 1, &relu, NULL);
    rng = seed;
    float* b = check_case(c, 1, &relu, (OnyxThreadPool*)&host);
    assert_memory_equal(a, b, yn * sizeof(float));
    free(a);
    free(b);
  }
  tile = 4;
}

/* Every micro-kernel the machine has (the portable one also takes the
 * portable transforms); packing for one ISA does not pay on another. */
static void test_isas(void** state) {
  (void)state;
  const char* names[] = {"generic", "avx2", "avx512"};
  const char* native = cpu_gemm_isa_name();
  int have = 0;
  for (int l = 0; l < 3; l++)
    if (strcmp(native, names[l]) == 0) have = l;
  for (int l = 0; l <= have; l++) {
    cpu_gemm_force_isa(l);
    for (tile = 4; tile >= 2; tile -= 2)
      for (size_t i = 0; i < CPU_ARRAY_LEN(CASES); i++)
        free(check_case(&CASES[i], 1, &(Act){CPU_ACT_LEAKY_RELU, 0.2f, 0, 0}, NULL));
    tile = 4;
    float w[16 * 16 * 9] = {0};
    CpuWinograd* wg = cpu_winograd_create(w, 16, 16, 4);
    assert_non_null(wg);
    assert_true(cpu_winograd_pays(wg, 1, 56, 56));
    if (l != have) {
      cpu_gemm_force_isa(have); /* packed for another micro-kernel */
      if (cpu_gemm_mr() != wg->mr || cpu_gemm_nr() != wg->nr)
        assert_false(cpu_winograd_pays(wg, 1, 56, 56));
    }
    cpu_winograd_free(wg);
  }
  cpu_gemm_force_isa(-1);
}

static void test_applies(void** state) {
  (void)state;
  assert_true(cpu_winograd_applies(64, 64, 3, 3, 1, 1, 1, 1, 1));
  assert_true(cpu_winograd_applies(16, 16, 3, 3, 1, 1, 1, 1, 1));
  assert_false(cpu_winograd_applies(64, 15, 3, 3, 1, 1, 1, 1, 1)); /* few channels */
  assert_false(cpu_winograd_applies(15, 64, 3, 3, 1, 1, 1, 1, 1));
  assert_false(cpu_winograd_applies(64, 64, 3, 3, 2, 2, 1, 1, 1)); /* strided */
  assert_false(cpu_winograd_applies(64, 64, 3, 3, 1, 2, 1, 1, 1));
  assert_false(cpu_winograd_applies(64, 64, 3, 3, 1, 1, 2, 2, 1)); /* dilated */
  assert_false(cpu_winograd_applies(64, 64, 3, 3, 1, 1, 1, 1, 2)); /* grouped */
  assert_false(cpu_winograd_applies(64, 64, 1, 1, 1, 1, 1, 1, 1)); /* other kernels */
  assert_false(cpu_winograd_applies(64, 64, 5, 5, 1, 1, 1, 1, 1));
  assert_false(cpu_winograd_applies(64, 64, 3, 1, 1, 1, 1, 1, 1));
  float w[16 * 16 * 9] = {0};
  CpuWinograd* wg = cpu_winograd_create(w, 16, 16, 4);
  assert_non_null(wg);
  assert_true(cpu_winograd_pays(wg, 1, 56, 56));
  assert_true(cpu_winograd_pays(wg, 1, 14, 14)); /* 16 tiles */
  assert_false(cpu_winograd_pays(wg, 1, 7, 7));  /* 4 tiles of 4x4 */
  assert_true(cpu_winograd_pays(wg, 4, 7, 7));   /* 16 over the batch */
  assert_false(cpu_winograd_pays(NULL, 1, 56, 56));
  cpu_winograd_free(wg);
  wg = cpu_winograd_create(w, 16, 16, 2);
  assert_non_null(wg);
  assert_true(cpu_winograd_pays(wg, 1, 7, 7));  /* 16 tiles of 2x2 */
  assert_false(cpu_winograd_pays(wg, 1, 6, 6)); /* 9 */
  cpu_winograd_free(wg);
  assert_null(cpu_winograd_create(w, 16, 16, 3));
  assert_int_equal(cpu_winograd_pick_tile(1, 56, 56), 4);
  assert_int_equal(cpu_winograd_pick_tile(1, 14, 14), 4);
  assert_int_equal(cpu_winograd_pick_tile(1, 13, 13), 4);
  assert_int_equal(cpu_winograd_pick_tile(1, 12, 12), 2); /* 9 tiles of 4x4, 36 of 2x2 */
  assert_int_equal(cpu_winograd_pick_tile(1, 7, 7), 2);
  assert_int_equal(cpu_winograd_pick_tile(4, 7, 7), 4);
  assert_int_equal(cpu_winograd_pick_tile(1, 6, 6), 0);
}

/* NaN reaching an activation stays NaN (as in the GEMM epilogue): a NaN
 * bias makes its whole channel NaN after Relu and Clip; other channels are
 * finite. */
static void test_nan_kept(void** state) {
  (void)state;
  const size_t ic = 16, oc = 16, h = 8, w = 8;
  float* x = calloc(ic * h * w, sizeof(float));
  float* wt = calloc(oc * ic * 9, sizeof(float));
  float* y = calloc(oc * h * w, sizeof(float));
  float bias[16];
  for (size_t i = 0; i < oc; i++)
    bias[i] = (float)i - 8.0f;
  bias[3] = NAN;
  for (size_t i = 0; i < ic * h * w; i++)
    x[i] = uniform();
  for (size_t i = 0; i < oc * ic * 9; i++)
    wt[i] = uniform() * 0.1f;
  CpuWinograd* wg = cpu_winograd_create(wt, oc, ic, 4);
  assert_non_null(wg);
  const int acts[] = {CPU_ACT_RELU, CPU_ACT_CLIP, CPU_ACT_LEAKY_RELU};
  for (size_t a = 0; a < 3; a++) {
    const CpuWinogradConv p = {.x = x,
                               .y = y,
                               .bias = bias,
                               .n = 1,
                               .h = h,
                               .w = w,
                               .oh = h,
                               .ow = w,
                               .pad_top = 1,
                               .pad_left = 1,
                               .act = acts[a],
                               .act_alpha = 0.5f,
                               .act_min = -1.0f,
                               .act_max = 1.0f};
    ctx_pool = NULL;
    assert_null(cpu_winograd_conv(wg, (OnyxKernelContext*)&host, &p));
    scratch_free();
    for (size_t o = 0; o < oc; o++)
      for (size_t i = 0; i < h * w; i++) {
        const float v = y[o * h * w + i];
        if (o == 3)
          assert_true(isnan(v));
        else
          assert_false(isnan(v));
        if (acts[a] == CPU_ACT_RELU) assert_true(o == 3 || v >= 0.0f);
        if (acts[a] == CPU_ACT_CLIP) assert_true(o == 3 || (v >= -1.0f && v <= 1.0f));
      }
  }
  cpu_winograd_free(wg);
  free(x);
  free(wt);
  free(y);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shapes),           cmocka_unit_test(test_activations),
      cmocka_unit_test(test_pool_independent), cmocka_unit_test(test_isas),
      cmocka_unit_test(test_applies),          cmocka_unit_test(test_nan_kept),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
