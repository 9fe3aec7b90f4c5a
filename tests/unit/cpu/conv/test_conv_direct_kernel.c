/* test_conv_direct_kernel.c — the CPU provider's direct float32 2-D conv
 * (providers/cpu/cpu_conv_direct.c), compiled into the test with the GEMM
 * core and a minimal host table, against a naive convolution written here
 * with double accumulation: ResNet's 7x7 stride-2 stem, 3x3 stride 1 and 2,
 * 1x3 and 5x1 kernels, dilation 2, asymmetric pads (also windows running
 * past the bottom/right edge), no padding, output channel counts that are
 * not multiples of 16 or 64, K past the k block, position counts around the
 * 6-position tile and the 96-position chunk, batch 2, with and without bias
 * and the residual Z, every activation (NaN kept), pool independence
 * (bitwise), the AVX2 row kernel (column stride 2) bit-identical to the
 * tile kernel (with AVX-512 too, where convs of at most 32 output channels
 * are packed for the AVX2 kernel), the run counter and the ONYX_CPU_CONV_DIRECT switch, on the
 * kernel the machine has (AVX-512, or AVX2: also run with ONYX_CPU_ISA=avx2,
 * so an AVX-512 machine checks both). Skipped where it has neither. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_conv_direct.h"
#include "cpu_nn.h"
#include "cpu_util.h"

/* The host table, the pool stand-in and scratch (ctx_pool, scratch_free). */
#include "cpu_fake_host.h"

static uint32_t rng = 4242;
static float uniform(void) { /* [-1, 1) */
  rng = rng * 1664525u + 1013904223u;
  return (float)((double)(rng >> 8) / (double)(1u << 23) - 1.0);
}

typedef struct Case {
  size_t n, ic, oc, h, w, kh, kw;
  size_t sh, sw, dh, dw;
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

static size_t out_h(const Case* c) {
  return (c->h + c->pt + c->pb - (c->kh - 1) * c->dh - 1) / c->sh + 1;
}
static size_t out_w(const Case* c) {
  return (c->w + c->pl + c->pr - (c->kw - 1) * c->dw - 1) / c->sw + 1;
}

/* Y by the definition of Conv, in double; mag gets sum |x * w| (+ |bias|,
 * |z|) per output, the scale of its rounding error. */
static void naive_conv(const Case* c, const float* x, const float* w, const float* bias,
                       const float* z, const Act* a, double* y, double* mag) {
  const size_t oh = out_h(c), ow = out_w(c);
  for (size_t n = 0; n < c->n; n++)
    for (size_t o = 0; o < c->oc; o++)
      for (size_t i = 0; i < oh; i++)
        for (size_t j = 0; j < ow; j++) {
          const size_t yi = ((n * c->oc + o) * oh + i) * ow + j;
          double s = bias ? bias[o] : 0.0, m = bias ? fabs(bias[o]) : 0.0;
          for (size_t ci = 0; ci < c->ic; ci++)
            for (size_t u = 0; u < c->kh; u++)
              for (size_t v = 0; v < c->kw; v++) {
                const long yy = (long)(i * c->sh + u * c->dh) - (long)c->pt;
                const long xx = (long)(j * c->sw + v * c->dw) - (long)c->pl;
                if (yy < 0 || xx < 0 || yy >= (long)c->h || xx >= (long)c->w) continue;
                const double p =
                    (double)x[((n * c->ic + ci) * c->h + (size_t)yy) * c->w + (size_t)xx] *
                    (double)w[((o * c->ic + ci) * c->kh + u) * c->kw + v];
                s += p;
                m += fabs(p);
              }
          if (z) s += z[yi], m += fabs(z[yi]);
          y[yi] = apply_act(s, a);
          mag[yi] = m;
        }
}

/* Runs the direct conv on random data (seeded by the current rng) and
 * checks every output against naive_conv: |y - want| <= 1e-4 * (sum |x w|)
 * + 1e-6. Returns Y (caller frees). */
static float* check_case(const Case* c, int with_bias, int with_z, const Act* a,
                         OnyxThreadPool* pool) {
  const size_t oh = out_h(c), ow = out_w(c);
  const size_t xn = c->n * c->ic * c->h * c->w, wn = c->oc * c->ic * c->kh * c->kw;
  const size_t yn = c->n * c->oc * oh * ow;
  float* x = malloc(xn * sizeof *x);
  float* w = malloc(wn * sizeof *w);
  float* bias = malloc(c->oc * sizeof *bias);
  float* z = malloc(yn * sizeof *z);
  float* y = malloc(yn * sizeof *y);
  double* want = malloc(yn * sizeof *want);
  double* mag = malloc(yn * sizeof *mag);
  assert_true(x && w && bias && z && y && want && mag);
  const float scale = 1.0f / sqrtf((float)(c->ic * c->kh * c->kw));
  for (size_t i = 0; i < xn; i++)
    x[i] = uniform();
  for (size_t i = 0; i < wn; i++)
    w[i] = uniform() * scale;
  for (size_t i = 0; i < c->oc; i++)
    bias[i] = uniform();
  for (size_t i = 0; i < yn; i++)
    z[i] = uniform();
  for (size_t i = 0; i < yn; i++)
    y[i] = NAN; /* every output must be written */
  CpuConvDirect* d = cpu_conv_direct_create(w, c->oc, c->ic, c->kh, c->kw);
  assert_non_null(d);
  assert_int_equal(d->k, c->ic * c->kh * c->kw);
  const CpuConvDirectRun p = {.x = x,
                              .y = y,
                              .bias = with_bias ? bias : NULL,
                              .z = with_z ? z : NULL,
                              .n = c->n,
                              .h = c->h,
                              .w = c->w,
                              .oh = oh,
                              .ow = ow,
                              .sh = c->sh,
                              .sw = c->sw,
                              .dh = c->dh,
                              .dw = c->dw,
                              .pad_top = c->pt,
                              .pad_left = c->pl,
                              .act = a->act,
                              .act_alpha = a->alpha,
                              .act_min = a->lo,
                              .act_max = a->hi};
  ctx_pool = pool;
  const size_t runs = cpu_conv_direct_runs();
  assert_null(cpu_conv_direct_run(d, (OnyxKernelContext*)&host, &p));
  assert_int_equal(cpu_conv_direct_runs(), runs + 1);
  scratch_free();
  naive_conv(c, x, w, with_bias ? bias : NULL, with_z ? z : NULL, a, want, mag);
  for (size_t i = 0; i < yn; i++)
    if (!(fabs((double)y[i] - want[i]) <= 1e-4 * mag[i] + 1e-6))
      fail_msg("n=%zu ic=%zu oc=%zu %zux%zu k %zux%zu s %zu,%zu d %zu,%zu pads %zu,%zu,%zu,%zu "
               "(out %zux%zu) bias=%d z=%d act=%d pool=%d: y[%zu] = %.9g, want %.9g",
               c->n, c->ic, c->oc, c->h, c->w, c->kh, c->kw, c->sh, c->sw, c->dh, c->dw, c->pt,
               c->pl, c->pb, c->pr, oh, ow, with_bias, with_z, a->act, pool != NULL, i, y[i],
               want[i]);
  cpu_conv_direct_free(d);
  free(x);
  free(w);
  free(bias);
  free(z);
  free(want);
  free(mag);
  return y;
}

/* n, ic, oc, h, w, kh, kw, sh, sw, dh, dw, pads t, l, b, r */
static const Case CASES[] = {
    {1, 3, 17, 37, 41, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3},   /* ResNet stem: 19x21 out */
    {1, 16, 70, 15, 15, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},  /* 3x3 s2: 8x8 */
    {2, 8, 5, 9, 11, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},     /* 3x3 s1, batch 2, oc 5 */
    {1, 6, 130, 8, 12, 1, 3, 1, 1, 1, 1, 0, 1, 0, 1},   /* 1x3, oc 130: 3 blocks */
    {1, 7, 17, 12, 6, 5, 1, 1, 1, 1, 1, 2, 0, 2, 0},    /* 5x1 */
    {1, 5, 20, 13, 14, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2},   /* dilation 2 */
    {1, 4, 9, 10, 11, 3, 3, 1, 2, 2, 1, 0, 2, 1, 0},    /* mixed stride/dilation */
    {1, 9, 33, 11, 13, 3, 3, 1, 1, 1, 1, 2, 1, 0, 0},   /* pad_top != pad_left */
    {1, 9, 33, 11, 13, 3, 3, 2, 2, 1, 1, 0, 0, 2, 1},   /* pads at the end only */
    {1, 9, 33, 12, 12, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0},   /* no padding: window stops short */
    {1, 1, 16, 10, 10, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   /* ic 1 */
    {1, 300, 70, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   /* K = 2700: many k blocks */
    {1, 130, 64, 5, 5, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0},   /* K = 1170, 9 positions */
    {1, 13, 64, 3, 3, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0},    /* 1 position */
    {1, 11, 20, 3, 7, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0},    /* 5 positions */
    {1, 11, 20, 4, 5, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0},    /* 6 positions: one tile */
    {1, 11, 20, 3, 9, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0},    /* 7 positions */
    {1, 10, 65, 7, 21, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0},   /* 95 positions (5x19) */
    {1, 10, 65, 10, 14, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0},  /* 96 positions: one chunk */
    {1, 10, 65, 99, 3, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0},   /* 97 positions (97x1) */
    {1, 10, 65, 10, 20, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},  /* 1x1 kernel, 200 positions */
    {2, 10, 130, 12, 20, 3, 3, 1, 1, 1, 1, 0, 1, 0, 1}, /* 200 positions, batch 2 */
    {1, 64, 128, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   /* ResNet-ish 7x7 layer */
    {1, 20, 24, 40, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},  /* 1600 positions: many chunks */
    /* column stride 2 and at least 12 output columns: the AVX2 row kernel */
    {1, 3, 64, 64, 64, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3},  /* stem-like: 32x32, two full tiles */
    {1, 16, 37, 30, 30, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1}, /* 15x15: a 7-lane second vector */
    {2, 8, 20, 25, 52, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},  /* batch 2, 13x26: 16 + 10 */
    {1, 5, 19, 20, 33, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0},  /* 1x1, 10x17: a 1-lane last tile */
    {1, 6, 22, 21, 40, 3, 3, 2, 2, 2, 1, 2, 1, 2, 0},  /* row dilation 2, uneven pads */
    {1, 7, 16, 26, 26, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0}}; /* no padding, exactly 12 columns */
/* The first of them. */
#define ROW_CASES 24
static const Act NONE = {CPU_ACT_NONE, 0, 0, 0};

static int skip_without_kernel(void) {
  if (cpu_conv_direct_available()) return 0;
  printf("skipped: no AVX-512 or AVX2 GEMM kernel on this machine (isa %s)\n", cpu_gemm_isa_name());
  return 1;
}

static void test_shapes(void** state) {
  (void)state;
  if (skip_without_kernel()) skip();
  for (size_t i = 0; i < CPU_ARRAY_LEN(CASES); i++)
    for (int b = 0; b < 2; b++) {
      free(check_case(&CASES[i], b, 0, &NONE, NULL));
      free(check_case(&CASES[i], b, 0, &NONE, (OnyxThreadPool*)&host));
    }
}

static void test_activations(void** state) {
  (void)state;
  if (skip_without_kernel()) skip();
  const Act acts[] = {{CPU_ACT_RELU, 0, 0, 0},
                      {CPU_ACT_LEAKY_RELU, 0.1f, 0, 0},
                      {CPU_ACT_CLIP, 0, -0.3f, 0.4f},
                      {CPU_ACT_CLIP, 0, 0.0f, 6.0f}};
  const size_t pick[] = {0, 2, 3, 7, 17, 21};
  for (size_t a = 0; a < CPU_ARRAY_LEN(acts); a++)
    for (size_t i = 0; i < CPU_ARRAY_LEN(pick); i++) {
      free(check_case(&CASES[pick[i]], 1, 0, &acts[a], NULL));
      free(check_case(&CASES[pick[i]], 0, 1, &acts[a], (OnyxThreadPool*)&host));
      free(check_case(&CASES[pick[i]], 1, 1, &acts[a], NULL));
    }
}

/* The same inputs (same seed) with and without a pool: bit-identical. */
static void test_pool_independent(void** state) {
  (void)state;
  if (skip_without_kernel()) skip();
  const Act leaky = {CPU_ACT_LEAKY_RELU, 0.2f, 0, 0};
  for (size_t i = 0; i < CPU_ARRAY_LEN(CASES); i++) {
    const Case* c = &CASES[i];
    const size_t yn = c->n * c->oc * out_h(c) * out_w(c);
    const uint32_t seed = rng;
    float* a = check_case(c, 1, 1, &leaky, NULL);
    rng = seed;
    float* b = check_case(c, 1, 1, &leaky, (OnyxThreadPool*)&host);
    assert_memory_equal(a, b, yn * sizeof(float));
    free(a);
    free(b);
  }
}

/* The AVX2 layout (16-channel blocks) that a conv's W gets packed in. */
static int packed_for_avx2(const Case* c) {
  float* w = calloc(c->oc * c->ic * c->kh * c->kw, sizeof(float));
  assert_non_null(w);
  CpuConvDirect* d = cpu_conv_direct_create(w, c->oc, c->ic, c->kh, c->kw);
  assert_non_null(d);
  const int avx2 = d->kernel == CPU_CONV_DIRECT_AVX2;
  assert_int_equal(d->ocb, avx2 ? 16 : 64);
  assert_int_equal(d->rows, avx2);
  cpu_conv_direct_free(d);
  free(w);
  return avx2;
}

/* The row kernel (AVX2 layout, column stride 2) against the tile kernel
 * (ONYX_CPU_CONV_ROWS=0 when W is packed), same inputs: the same bits, as
 * both sum each output in the same order with the same FMAs. With AVX-512
 * the convs of at most 32 output channels take the AVX2 layout (and so the
 * row kernel), the wider ones the AVX-512 tile. */
static void test_rows_match_tiles(void** state) {
  (void)state;
  if (skip_without_kernel()) skip();
  const Act leaky = {CPU_ACT_LEAKY_RELU, 0.2f, 0, 0};
  const int avx512 = cpu_conv_direct_kernel() == CPU_CONV_DIRECT_AVX512;
  float w1 = 1.0f;
  size_t compared = 0;
  for (size_t i = ROW_CASES; i < CPU_ARRAY_LEN(CASES); i++) {
    const Case* c = &CASES[i];
    /* the layout follows the output channels on AVX-512 only */
    assert_int_equal(packed_for_avx2(c), !avx512 || c->oc <= 32);
    if (!packed_for_avx2(c)) continue;
    compared++;
    const size_t yn = c->n * c->oc * out_h(c) * out_w(c);
    const uint32_t seed = rng;
    const size_t row_runs = cpu_conv_direct_row_runs();
    float* rows = check_case(c, 1, 1, &leaky, (OnyxThreadPool*)&host);
    assert_int_equal(cpu_conv_direct_row_runs(), row_runs + 1);
    rng = seed;
    setenv("ONYX_CPU_CONV_ROWS", "0", 1);
    CpuConvDirect* off = cpu_conv_direct_create(&w1, 1, 1, 1, 1);
    assert_non_null(off);
    assert_false(off->rows);
    cpu_conv_direct_free(off);
    float* tiles = check_case(c, 1, 1, &leaky, (OnyxThreadPool*)&host);
    unsetenv("ONYX_CPU_CONV_ROWS");
    assert_int_equal(cpu_conv_direct_row_runs(), row_runs + 1);
    assert_memory_equal(rows, tiles, yn * sizeof(float));
    free(rows);
    free(tiles);
  }
  assert_true(compared >= 3); /* the cases of 19, 20 and 22 channels on every machine */
}

/* NaN reaching an activation stays NaN: a NaN bias makes its whole channel
 * NaN after Relu, LeakyRelu and Clip; a NaN in X makes NaN exactly the
 * outputs whose window covers it; other outputs are finite and in range. */
static void test_nan_kept(void** state) {
  (void)state;
  if (skip_without_kernel()) skip();
  const size_t ic = 5, oc = 70, h = 9, w = 9; /* 3x3 s1 pad 1: 9x9 out */
  float* x = malloc(ic * h * w * sizeof(float));
  float* wt = malloc(oc * ic * 9 * sizeof(float));
  float* y = malloc(oc * h * w * sizeof(float));
  float bias[70];
  for (size_t i = 0; i < oc; i++)
    bias[i] = (float)i * 0.05f - 1.0f;
  bias[3] = NAN;
  bias[66] = NAN; /* in the second block of 64 */
  for (size_t i = 0; i < ic * h * w; i++)
    x[i] = uniform();
  x[2 * h * w + 4 * w + 0] = NAN; /* channel 2, row 4, column 0 */
  for (size_t i = 0; i < oc * ic * 9; i++)
    wt[i] = uniform() * 0.1f;
  CpuConvDirect* d = cpu_conv_direct_create(wt, oc, ic, 3, 3);
  assert_non_null(d);
  const int acts[] = {CPU_ACT_NONE, CPU_ACT_RELU, CPU_ACT_CLIP, CPU_ACT_LEAKY_RELU};
  for (int pl = 0; pl < 2; pl++)
    for (size_t a = 0; a < CPU_ARRAY_LEN(acts); a++) {
      const CpuConvDirectRun p = {.x = x,
                                  .y = y,
                                  .bias = bias,
                                  .n = 1,
                                  .h = h,
                                  .w = w,
                                  .oh = h,
                                  .ow = w,
                                  .sh = 1,
                                  .sw = 1,
                                  .dh = 1,
                                  .dw = 1,
                                  .pad_top = 1,
                                  .pad_left = 1,
                                  .act = acts[a],
                                  .act_alpha = 0.5f,
                                  .act_min = -0.5f,
                                  .act_max = 0.5f};
      ctx_pool = pl ? (OnyxThreadPool*)&host : NULL;
      assert_null(cpu_conv_direct_run(d, (OnyxKernelContext*)&host, &p));
      scratch_free();
      for (size_t o = 0; o < oc; o++)
        for (size_t i = 0; i < h; i++)
          for (size_t j = 0; j < w; j++) {
            const float v = y[(o * h + i) * w + j];
            /* output (i, j) reads rows i-1..i+1, columns j-1..j+1 */
            const int covers = i >= 3 && i <= 5 && j <= 1;
            if (o == 3 || o == 66 || covers) {
              if (!isnan(v)) fail_msg("act %d: y[%zu][%zu][%zu] = %g, want NaN", acts[a], o, i, j);
            } else {
              assert_false(isnan(v));
              if (acts[a] == CPU_ACT_RELU) assert_true(v >= 0.0f);
              if (acts[a] == CPU_ACT_CLIP) assert_true(v >= -0.5f && v <= 0.5f);
            }
          }
    }
  cpu_conv_direct_free(d);
  free(x);
  free(wt);
  free(y);
}

/* Empty outputs write nothing and still count as a run; bad sizes make no
 * weights. */
static void test_edges(void** state) {
  (void)state;
  if (skip_without_kernel()) skip();
  float w[2 * 3 * 9];
  for (size_t i = 0; i < CPU_ARRAY_LEN(w); i++)
    w[i] = 1.0f;
  assert_null(cpu_conv_direct_create(w, 0, 3, 3, 3));
  assert_null(cpu_conv_direct_create(w, 2, 0, 3, 3));
  CpuConvDirect* d = cpu_conv_direct_create(w, 2, 3, 3, 3);
  assert_non_null(d);
  float x[3 * 4 * 4] = {0}, y[2] = {-7.0f, -7.0f};
  const CpuConvDirectRun p = {
      .x = x, .y = y, .n = 0, .h = 4, .w = 4, .oh = 1, .ow = 1, .sh = 1, .sw = 1, .dh = 1, .dw = 1};
  ctx_pool = NULL;
  const size_t runs = cpu_conv_direct_runs();
  assert_null(cpu_conv_direct_run(d, (OnyxKernelContext*)&host, &p));
  assert_int_equal(cpu_conv_direct_runs(), runs + 1);
  assert_true(y[0] == -7.0f && y[1] == -7.0f);
  scratch_free();
  /* all-ones W and X, no pad, 4x4 in, stride 1: each output is 27 */
  for (size_t i = 0; i < CPU_ARRAY_LEN(x); i++)
    x[i] = 1.0f;
  float y4[2 * 4] = {0};
  const CpuConvDirectRun q = {.x = x,
                              .y = y4,
                              .n = 1,
                              .h = 4,
                              .w = 4,
                              .oh = 2,
                              .ow = 2,
                              .sh = 1,
                              .sw = 1,
                              .dh = 1,
                              .dw = 1};
  assert_null(cpu_conv_direct_run(d, (OnyxKernelContext*)&host, &q));
  scratch_free();
  for (size_t i = 0; i < 8; i++)
    assert_true(y4[i] == 27.0f);
  cpu_conv_direct_free(d);
  cpu_conv_direct_free(NULL);
}

/* ONYX_CPU_CONV_DIRECT=0 turns the path off; other values leave it as the
 * machine has it. */
static void test_env_switch(void** state) {
  (void)state;
  const int native =
      strcmp(cpu_gemm_isa_name(), "avx512") == 0 || strcmp(cpu_gemm_isa_name(), "avx2") == 0;
  unsetenv("ONYX_CPU_CONV_DIRECT");
  assert_int_equal(cpu_conv_direct_available(), native);
  setenv("ONYX_CPU_CONV_DIRECT", "0", 1);
  assert_int_equal(cpu_conv_direct_available(), 0);
  setenv("ONYX_CPU_CONV_DIRECT", "1", 1);
  assert_int_equal(cpu_conv_direct_available(), native);
  unsetenv("ONYX_CPU_CONV_DIRECT");
  assert_int_equal(cpu_conv_direct_available(), native);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_env_switch),
      cmocka_unit_test(test_shapes),
      cmocka_unit_test(test_activations),
      cmocka_unit_test(test_pool_independent),
      cmocka_unit_test(test_rows_match_tiles),
      cmocka_unit_test(test_nan_kept),
      cmocka_unit_test(test_edges),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
