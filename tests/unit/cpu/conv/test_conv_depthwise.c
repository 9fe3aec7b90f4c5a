/* test_conv_depthwise.c — the CPU provider's direct depthwise float32 conv
 * (providers/cpu/cpu_conv_depthwise.c), compiled into the test with a
 * minimal host table, against a plain convolution loop written here with
 * double accumulation: kernels 1x1 to 7x7 (square and not), strides 1 to 3
 * per axis, dilations 1 and 2, asymmetric pads (also pads wider than the
 * input), output widths 1 to 67 (around the 8- and 16-lane vectors and the
 * 4-vector blocks), channel multipliers 1 and 2, batch 2, with and without
 * bias and the residual Z, every activation, NaN kept, pool independence
 * (bitwise), a 35-column kernel, groups of 3, 5 and 8 channels, and
 * the run's cancellation; on every path the machine has
 * (scalar, AVX2, AVX-512), forced in turn, the vector paths once on the
 * column kernel and once with every depthwise case on the channel-blocked
 * one (channel counts past and short of its 16- and 8-channel blocks),
 * also through the row activations HardSwish and SiLU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_conv_depthwise.h"
#include "cpu_nn.h"
#include "cpu_util.h"

/* The host table, the pool stand-in and scratch (ctx_pool, scratch_free). */
#include "cpu_fake_host.h"

static uint32_t rng = 777;
static float uniform(void) { /* [-1, 1) */
  rng = rng * 1664525u + 1013904223u;
  return (float)((double)(rng >> 8) / (double)(1u << 23) - 1.0);
}

/* c input channels in groups of cg (0 or 1: depthwise), mult output
 * channels per group. */
typedef struct Case {
  size_t n, c, mult, h, w, kh, kw;
  size_t sh, sw, dh, dw;
  size_t pt, pl, pb, pr; /* pads: top, left, bottom, right */
  size_t cg;
} Case;

static size_t group_size(const Case* c) {
  return c->cg ? c->cg : 1;
}
static size_t out_channels(const Case* c) {
  return c->c / group_size(c) * c->mult;
}

typedef struct Act {
  int act;
  float alpha, lo, hi;
} Act;

static const Act ACTS[] = {{CPU_ACT_NONE, 0, 0, 0},
                           {CPU_ACT_RELU, 0, 0, 0},
                           {CPU_ACT_LEAKY_RELU, 0.1f, 0, 0},
                           {CPU_ACT_CLIP, 0, -0.25f, 0.5f},
                           /* the row activations, applied after the store */
                           {CPU_ACT_HARD_SWISH, 0, 0, 0},
                           {CPU_ACT_SILU, 0, 0, 0}};

static double apply_act(double v, const Act* a) {
  switch (a->act) {
  case CPU_ACT_RELU:
    return v < 0 ? 0 : v;
  case CPU_ACT_LEAKY_RELU:
    return v < 0 ? v * a->alpha : v;
  case CPU_ACT_CLIP:
    return v < a->lo ? a->lo : v > a->hi ? a->hi : v;
  case CPU_ACT_HARD_SWISH: {
    const double g = v / 6 + 0.5;
    return v * (g < 0 ? 0 : g > 1 ? 1 : g);
  }
  case CPU_ACT_SILU:
    return v / (1 + exp(-v));
  default:
    return v;
  }
}

static size_t out_dim(size_t in, size_t pb, size_t pe, size_t k, size_t s, size_t d) {
  return (in + pb + pe - (k - 1) * d - 1) / s + 1;
}
static size_t out_h(const Case* c) {
  return out_dim(c->h, c->pt, c->pb, c->kh, c->sh, c->dh);
}
static size_t out_w(const Case* c) {
  return out_dim(c->w, c->pl, c->pr, c->kw, c->sw, c->dw);
}

/* Y by the definition of a grouped Conv with c / cg groups (output channel
 * o reads input channels (o / mult) * cg + ci, ci < cg), in double; mag
 * gets sum |x * w| (+ |bias|, |z|) per output, the scale of its rounding
 * error. */
static void naive_dw(const Case* c, const float* x, const float* w, const float* bias,
                     const float* z, const Act* a, double* y, double* mag) {
  const size_t oh = out_h(c), ow = out_w(c), m = out_channels(c), cg = group_size(c);
  for (size_t n = 0; n < c->n; n++)
    for (size_t o = 0; o < m; o++)
      for (size_t i = 0; i < oh; i++)
        for (size_t j = 0; j < ow; j++) {
          const size_t yi = ((n * m + o) * oh + i) * ow + j;
          double s = bias ? bias[o] : 0.0, mg = bias ? fabs(bias[o]) : 0.0;
          for (size_t ci = 0; ci < cg; ci++)
            for (size_t u = 0; u < c->kh; u++)
              for (size_t v = 0; v < c->kw; v++) {
                const long yy = (long)(i * c->sh + u * c->dh) - (long)c->pt;
                const long xx = (long)(j * c->sw + v * c->dw) - (long)c->pl;
                if (yy < 0 || xx < 0 || yy >= (long)c->h || xx >= (long)c->w) continue;
                const size_t xc = o / c->mult * cg + ci;
                const double p =
                    (double)x[((n * c->c + xc) * c->h + (size_t)yy) * c->w + (size_t)xx] *
                    (double)w[((o * cg + ci) * c->kh + u) * c->kw + v];
                s += p;
                mg += fabs(p);
              }
          if (z) s += z[yi], mg += fabs(z[yi]);
          y[yi] = apply_act(s, a);
          mag[yi] = mg;
        }
}

static CpuDepthwiseRun make_run(const Case* c, const float* x, const float* w, const float* bias,
                                const float* z, const Act* a, float* y) {
  return (CpuDepthwiseRun){.conv = {.x = x,
                                    .y = y,
                                    .bias = bias,
                                    .z = z,
                                    .n = c->n,
                                    .h = c->h,
                                    .w = c->w,
                                    .oh = out_h(c),
                                    .ow = out_w(c),
                                    .sh = c->sh,
                                    .sw = c->sw,
                                    .dh = c->dh,
                                    .dw = c->dw,
                                    .pad_top = c->pt,
                                    .pad_left = c->pl,
                                    .act = a->act,
                                    .act_alpha = a->alpha,
                                    .act_min = a->lo,
                                    .act_max = a->hi},
                           .w = w,
                           .c = c->c,
                           .m = out_channels(c),
                           .cg = group_size(c),
                           .kh = c->kh,
                           .kw = c->kw};
}

static size_t checked_cases;

/* Runs the depthwise conv on random data (with a NaN at x[nan_at] unless
 * nan_at is SIZE_MAX) through the pool stand-in and without a pool, checks
 * the two bitwise equal and every output against naive_dw: |y - want| <=
 * 1e-5 * (sum |x w|) + 1e-6, NaN exactly where want is NaN. */
static void check_case(const Case* c, int with_bias, int with_z, const Act* a, size_t nan_at) {
  const size_t oh = out_h(c), ow = out_w(c), m = out_channels(c);
  const size_t xn = c->n * c->c * c->h * c->w, wn = m * group_size(c) * c->kh * c->kw;
  const size_t yn = c->n * m * oh * ow;
  float* x = malloc(xn * sizeof *x);
  float* w = malloc(wn * sizeof *w);
  float* bias = malloc(m * sizeof *bias);
  float* z = malloc(yn * sizeof *z);
  float* y = malloc(yn * sizeof *y);
  float* y1 = malloc(yn * sizeof *y1);
  double* want = malloc(yn * sizeof *want);
  double* mag = malloc(yn * sizeof *mag);
  assert_true(x && w && bias && z && y && y1 && want && mag);
  for (size_t i = 0; i < xn; i++)
    x[i] = uniform();
  if (nan_at < xn) x[nan_at] = NAN;
  for (size_t i = 0; i < wn; i++)
    w[i] = uniform();
  for (size_t i = 0; i < m; i++)
    bias[i] = uniform();
  for (size_t i = 0; i < yn; i++)
    z[i] = uniform(), y[i] = NAN, y1[i] = NAN; /* every output must be written */
  const CpuDepthwiseRun p = make_run(c, x, w, with_bias ? bias : NULL, with_z ? z : NULL, a, y);
  ctx_pool = (OnyxThreadPool*)&host; /* chunks of 3 planes */
  assert_null(cpu_conv_depthwise_run((OnyxKernelContext*)&host, &p));
  CpuDepthwiseRun p1 = p;
  p1.conv.y = y1;
  ctx_pool = NULL;
  assert_null(cpu_conv_depthwise_run((OnyxKernelContext*)&host, &p1));
  assert_memory_equal(y, y1, yn * sizeof *y);
  scratch_free(); /* the kernel takes none: nothing to free */
  naive_dw(c, x, w, with_bias ? bias : NULL, with_z ? z : NULL, a, want, mag);
  for (size_t i = 0; i < yn; i++) {
    const int ok = isnan(want[i])
                       ? isnan(y[i])
                       : !isnan(y[i]) && fabs((double)y[i] - want[i]) <= 1e-5 * mag[i] + 1e-6;
    if (!ok)
      fail_msg("path %d: n=%zu c=%zu cg=%zu mult=%zu %zux%zu k %zux%zu s %zu,%zu d %zu,%zu pads "
               "%zu,%zu,%zu,%zu (out %zux%zu) bias=%d z=%d act=%d: y[%zu] = %.9g, want %.9g",
               cpu_conv_depthwise_path(), c->n, c->c, group_size(c), c->mult, c->h, c->w, c->kh,
               c->kw, c->sh, c->sw, c->dh, c->dw, c->pt, c->pl, c->pb, c->pr, oh, ow, with_bias,
               with_z, a->act, i, y[i], want[i]);
  }
  checked_cases++;
  free(x);
  free(w);
  free(bias);
  free(z);
  free(y);
  free(y1);
  free(want);
  free(mag);
}

static const char* const PATH_NAMES[] = {"scalar", "avx2", "avx512"};

/* Runs body once per path the machine has (each forced in turn); the
 * vector paths twice: on the column kernel alone, then with every
 * depthwise case it takes on the channel-blocked one, whatever the width. */
static void for_each_path(void (*body)(void)) {
  for (int path = CPU_DW_SCALAR; path <= CPU_DW_AVX512; path++) {
    cpu_conv_depthwise_force_path(path);
    if (cpu_conv_depthwise_path() != path) {
      printf("  [%s path not on this machine or capped by ONYX_CPU_ISA: skipped]\n",
             PATH_NAMES[path]);
      continue;
    }
    for (int cblock = 0; cblock <= (path == CPU_DW_SCALAR ? 0 : 1); cblock++) {
      cpu_conv_depthwise_force_cblock(cblock);
      const size_t before = checked_cases;
      body();
      printf("  [%s path%s: %zu cases]\n", PATH_NAMES[path], cblock ? ", channel-blocked" : "",
             checked_cases - before);
    }
  }
  cpu_conv_depthwise_force_path(-1);
  cpu_conv_depthwise_force_cblock(-1);
}

/* Output widths 1..67 for the shapes MobileNet-style nets use (3x3 and 5x5,
 * strides 1 and 2, "same" padding, asymmetric where TF-style exports pad
 * only at the end), each with bias and a fused activation. */
static void widths_body(void) {
  /* kh, kw, s, pads t, l, b, r */
  static const size_t SHAPES[][7] = {{3, 3, 1, 1, 1, 1, 1}, {3, 3, 2, 1, 1, 1, 1},
                                     {3, 3, 2, 0, 0, 1, 1}, {5, 5, 1, 2, 2, 2, 2},
                                     {5, 5, 2, 2, 2, 2, 2}, {7, 7, 1, 3, 3, 3, 3}};
  for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
    for (size_t ow = 1; ow <= 67; ow++) {
      const size_t* e = SHAPES[s];
      /* the input width giving ow output columns (at least 1) */
      const long win = (long)((ow - 1) * e[2] + e[1]) - (long)(e[4] + e[6]);
      if (win < 1) continue;
      const Case c = {1,    3, 1, 6,    (size_t)win, e[0], e[1], e[2],
                      e[2], 1, 1, e[3], e[4],        e[5], e[6], 1};
      assert_int_equal(out_w(&c), ow);
      check_case(&c, 1, 0, &ACTS[1 + ow % 3], SIZE_MAX);
    }
}

static void test_widths(void** state) {
  (void)state;
  for_each_path(widths_body);
}

/* Kernels 1..7 (and non-square), strides 1..3 per axis, dilations 1 and 2,
 * pads from 0 to past the kernel, channel counts not a multiple of any
 * vector width, multipliers 1 and 2. */
static void kernels_body(void) {
  for (size_t kh = 1; kh <= 7; kh++)
    for (size_t kw = 1; kw <= 7; kw++) {
      if (kh != kw && (kh + kw) % 3 != 0) continue; /* the square ones and a spread of others */
      for (size_t sh = 1; sh <= 3; sh++)
        for (size_t sw = 1; sw <= 3; sw++) {
          const size_t d = (kh + sw) % 4 == 0 ? 2 : 1;
          const size_t pt = (kh + sh) % 3, pb = kh / 2 + sw % 2;
          const size_t pl = (kw + sw) % 4, pr = (kw * 3 + sh) % 5;
          const size_t w = 11 + 9 * sw + kw * d, h = 3 + kh * d + sh;
          const Case c = {1 + (kw + sh) % 2,
                          5,
                          1 + (kh + kw) % 2,
                          h,
                          w,
                          kh,
                          kw,
                          sh,
                          sw,
                          d,
                          d,
                          pt,
                          pl,
                          pb,
                          pr,
                          (kh + sw) % 3 == 0 ? 5 : 1};
          check_case(&c, (kh + sw) % 2, (kw + sh) % 3 == 0, &ACTS[(kh + kw + sh + sw) % 4],
                     SIZE_MAX);
        }
    }
}

static void test_kernels(void** state) {
  (void)state;
  for_each_path(kernels_body);
}

/* Every bias / Z / activation combination on shapes with borders, tails
 * and interior blocks; pads wider than the input (whole rows and columns
 * of windows outside it: the bias alone); a mixed stride and dilation. */
static void epilogue_body(void) {
  static const Case CASES[] = {
      /* n, c, mult, h, w, kh, kw, sh, sw, dh, dw, pads t, l, b, r */
      {2, 7, 1, 9, 70, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},
      {1, 4, 2, 12, 45, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, 1},
      {1, 3, 1, 4, 3, 3, 3, 1, 1, 1, 1, 9, 10, 8, 11, 1},   /* pads past the input */
      {1, 3, 1, 10, 40, 3, 3, 2, 3, 2, 1, 1, 0, 2, 3, 1},   /* mixed strides */
      {1, 2, 3, 7, 7, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1},     /* no padding, mult 3 */
      {1, 5, 1, 1, 100, 1, 7, 1, 2, 1, 3, 0, 4, 0, 1, 1},   /* one row, dilation 3 */
      {1, 3, 1, 9, 50, 1, 35, 1, 1, 1, 1, 0, 17, 0, 17, 1}, /* a 35-column kernel */
      {1, 2, 2, 41, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},   /* tall: blocks of 4 rows and a rest */
      /* groups of several channels (RegNet: 8 in, 8 out) */
      {1, 16, 8, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 8},
      {2, 24, 3, 15, 29, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 3},
      {1, 10, 5, 9, 20, 5, 3, 1, 3, 2, 1, 2, 0, 1, 2, 5},
      /* channel counts past one and two 16-channel blocks, not multiples
       * of 8; narrow planes (MobileNet's 7x7 and 14x14) */
      {2, 37, 1, 14, 14, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, 1},
      {1, 21, 1, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},
      {1, 40, 1, 7, 7, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 1},
  };
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
    for (size_t a = 0; a < sizeof ACTS / sizeof ACTS[0]; a++)
      for (int bz = 0; bz < 4; bz++)
        check_case(&CASES[i], bz & 1, bz >> 1, &ACTS[a], SIZE_MAX);
}

static void test_epilogue(void** state) {
  (void)state;
  for_each_path(epilogue_body);
}

/* A NaN in X reaches the outputs whose windows cover it, through each
 * activation (checked against the reference's NaN pattern). */
static void nan_body(void) {
  const Case c = {1, 2, 1, 9, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  const Case s2 = {1, 2, 1, 9, 40, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1};
  for (size_t a = 0; a < sizeof ACTS / sizeof ACTS[0]; a++) {
    check_case(&c, 1, 0, &ACTS[a], 4 * 40 + 20); /* interior */
    check_case(&c, 1, 0, &ACTS[a], 9 * 40 + 39); /* channel 1, right border */
    check_case(&s2, 0, 1, &ACTS[a], 2 * 40 + 0); /* left border, stride 2 */
  }
}

static void test_nan(void** state) {
  (void)state;
  for_each_path(nan_body);
}

/* Cancellation: a host whose ctx_should_stop says stop gets ONYX_CANCELLED
 * back, on every path. */
static int stop_calls;
static int32_t fake_should_stop(const OnyxKernelContext* c) {
  (void)c;
  stop_calls++;
  return 1;
}
static const OnyxNode* fake_ctx_node(const OnyxKernelContext* c) {
  (void)c;
  return NULL;
}
static OnyxStatusCode last_code;
static char status_storage;
static OnyxStatus* fake_status_create(OnyxStatusCode code, const char* fmt, ...) {
  (void)fmt;
  last_code = code;
  return (OnyxStatus*)(void*)&status_storage;
}

static void cancel_body(void) {
  const Case c = {1, 4, 1, 8, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  float x[4 * 8 * 20] = {0}, w[4 * 9] = {0}, y[4 * 8 * 20];
  const Act none = {CPU_ACT_NONE, 0, 0, 0};
  const CpuDepthwiseRun p = make_run(&c, x, w, NULL, NULL, &none, y);
  host.struct_size = sizeof host;
  host.ctx_should_stop = fake_should_stop;
  host.ctx_node = fake_ctx_node;
  host.status_create = fake_status_create;
  stop_calls = 0;
  last_code = ONYX_OK;
  ctx_pool = (OnyxThreadPool*)&host;
  assert_ptr_equal(cpu_conv_depthwise_run((OnyxKernelContext*)&host, &p), &status_storage);
  assert_int_equal(last_code, ONYX_CANCELLED);
  assert_true(stop_calls >= 1 && stop_calls <= 2); /* the pool's chunks stop at once */
  host.struct_size = 0;
  host.ctx_should_stop = NULL;
  checked_cases++;
}

static void test_cancel(void** state) {
  (void)state;
  for_each_path(cancel_body);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_widths), cmocka_unit_test(test_kernels),
                                     cmocka_unit_test(test_epilogue), cmocka_unit_test(test_nan),
                                     cmocka_unit_test(test_cancel)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
