/* test_nchwc_kernels.c — the CPU provider's blocked-channel kernels
 * (providers/cpu/cpu_nchwc.c), compiled into the test with a minimal host
 * table, against plain NCHW loops written here in double: the reorders
 * (channel counts short of, equal to and past one and two blocks; padded
 * lanes zero), the global average, the gate's scale (also in place), and
 * NchwcConv's pointwise and depthwise paths and its direct loop for
 * full and grouped convs (X blocked or NCHW; group widths 4 to 32, the
 * weights block-diagonal where a group is narrower than the block):
 * kernels 1x1 to 7x7, strides 1 and 2, dilations 1 and 2, asymmetric pads,
 * widths 1 to 31 around the 4-, 6-, 8- and 12-pixel tiles, pixel counts
 * around the 6-pixel tiles and the 96-pixel tasks, one to four output
 * blocks per tile, with and without bias and the
 * residual Z, every activation, blocks 8 and 16, on each path (scalar,
 * AVX2, AVX-512) forced in turn; the result is the same with the pool
 * stand-in and without. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_gemm.h"
#include "cpu_nchwc.h"
#include "cpu_util.h"

/* The host table, the pool stand-in and scratch (ctx_pool, scratch_free). */
#include "cpu_fake_host.h"

static uint32_t rng = 4242;
static float uniform(void) { /* [-1, 1) */
  rng = rng * 1664525u + 1013904223u;
  return (float)((double)(rng >> 8) / (double)(1u << 23) - 1.0);
}

static size_t blocks(size_t c, size_t b) {
  return (c + b - 1) / b;
}

/* The activation in double, as its definition reads. */
static double act_ref(double v, int act, double alpha, double lo, double hi) {
  switch (act) {
  case CPU_ACT_RELU:
    return v < 0 ? 0 : v;
  case CPU_ACT_LEAKY_RELU:
    return v < 0 ? alpha * v : v;
  case CPU_ACT_CLIP:
    return v < lo ? lo : v > hi ? hi : v;
  case CPU_ACT_HARD_SIGMOID: {
    const double t = alpha * v + lo;
    return t < 0 ? 0 : t > 1 ? 1 : t;
  }
  case CPU_ACT_HARD_SWISH: {
    const double t = v / 6 + 0.5;
    return v * (t < 0 ? 0 : t > 1 ? 1 : t);
  }
  case CPU_ACT_SIGMOID:
    return 1 / (1 + exp(-v));
  case CPU_ACT_SILU:
    return v / (1 + exp(-v));
  case CPU_ACT_TANH:
    return tanh(v);
  default:
    return v;
  }
}

typedef struct Act {
  int act;
  float alpha, lo, hi;
} Act;

static const Act ACTS[] = {{CPU_ACT_NONE, 0, 0, 0},
                           {CPU_ACT_RELU, 0, 0, 0},
                           {CPU_ACT_LEAKY_RELU, 0.1f, 0, 0},
                           {CPU_ACT_CLIP, 0, -0.5f, 0.75f},
                           {CPU_ACT_HARD_SIGMOID, 0.2f, 0.5f, 0},
                           {CPU_ACT_HARD_SWISH, 0, 0, 0},
                           {CPU_ACT_SIGMOID, 0, 0, 0},
                           {CPU_ACT_SILU, 0, 0, 0},
                           {CPU_ACT_TANH, 0, 0, 0}};
enum { N_ACTS = sizeof ACTS / sizeof ACTS[0] };

/* Blocked copy of an NCHW tensor, written here (padded lanes zero). */
static float* to_blocked(const float* x, size_t n, size_t c, size_t hw, size_t b) {
  const size_t cb = blocks(c, b);
  float* y = calloc(n * cb * hw * b, sizeof *y);
  assert_non_null(y);
  for (size_t i = 0; i < n; i++)
    for (size_t ch = 0; ch < c; ch++)
      for (size_t p = 0; p < hw; p++)
        y[((i * cb + ch / b) * hw + p) * b + ch % b] = x[(i * c + ch) * hw + p];
  return y;
}

typedef struct Case {
  size_t n, c, m, h, w, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  int depthwise;
  int full, nchw_in; /* through the direct loop; X NCHW */
  size_t group;      /* full: 0 or 1 for group 1 */
} Case;

static size_t ext(size_t in, size_t k, size_t s, size_t d, size_t p0, size_t p1) {
  return (in + p0 + p1 - (d * (k - 1) + 1)) / s + 1;
}

static size_t checked;

/* One convolution on random data against the NCHW loop in double:
 * |y - want| <= 1e-5 * sum |terms| + 1e-6 for every real channel. */
static void check_conv(const Case* c, size_t b, int with_bias, int with_z, const Act* a) {
  const size_t oh = ext(c->h, c->kh, c->sh, c->dh, c->pt, c->pb);
  const size_t ow = ext(c->w, c->kw, c->sw, c->dw, c->pl, c->pr);
  const size_t group = c->depthwise ? c->c : c->group ? c->group : 1;
  const size_t m = c->depthwise ? c->c : c->m, cw = c->c / group, mpg = m / group;
  const size_t hw = c->h * c->w, ohw = oh * ow, mb = blocks(m, b), cb = blocks(c->c, b);
  float* x = malloc(c->n * c->c * hw * sizeof *x);
  float* w = malloc(m * cw * c->kh * c->kw * sizeof *w);
  float* bias = malloc(mb * b * sizeof *bias);
  float* z = malloc(c->n * m * ohw * sizeof *z);
  assert_true(x && w && bias && z);
  for (size_t i = 0; i < c->n * c->c * hw; i++)
    x[i] = uniform();
  for (size_t i = 0; i < m * cw * c->kh * c->kw; i++)
    w[i] = uniform();
  for (size_t i = 0; i < mb * b; i++)
    bias[i] = i < m ? uniform() : 0.0f;
  for (size_t i = 0; i < c->n * m * ohw; i++)
    z[i] = uniform();
  float* xb = to_blocked(x, c->n, c->c, hw, b);
  float* zb = to_blocked(z, c->n, m, ohw, b);
  CpuNchwcSet* sets = calloc(mb, sizeof *sets);
  assert_non_null(sets);
  size_t floats = 0, nsets = 0;
  if (c->depthwise)
    floats = cpu_nchwc_depthwise_floats(m, c->kh, c->kw, b);
  else
    nsets = cpu_nchwc_conv_sets(m, c->c, group, c->kh, c->kw, b, sets, &floats);
  assert_true(floats > 0);
  float* wp = malloc(floats * sizeof *wp);
  const size_t yn = c->n * mb * ohw * b;
  float* y = malloc(yn * sizeof *y);
  float* y1 = malloc(yn * sizeof *y1);
  assert_true(wp && y && y1);
  if (c->depthwise)
    cpu_nchwc_pack_depthwise(w, m, c->kh, c->kw, b, wp);
  else
    cpu_nchwc_pack_conv(w, m, c->c, group, c->kh, c->kw, b, sets, nsets, wp);
  for (size_t i = 0; i < yn; i++)
    y[i] = y1[i] = NAN;
  CpuNchwcConv p = {.x = c->nchw_in ? x : xb,
                    .wp = wp,
                    .bias = with_bias ? bias : NULL,
                    .z = with_z ? zb : NULL,
                    .y = y,
                    .n = c->n,
                    .c = c->c,
                    .cb = cb,
                    .h = c->h,
                    .w = c->w,
                    .m = m,
                    .mb = mb,
                    .oh = oh,
                    .ow = ow,
                    .block = b,
                    .depthwise = c->depthwise != 0,
                    .full = c->full != 0,
                    .nchw_in = c->nchw_in != 0,
                    .sets = sets,
                    .nsets = nsets,
                    .kh = c->kh,
                    .kw = c->kw,
                    .sh = c->sh,
                    .sw = c->sw,
                    .dh = c->dh,
                    .dw = c->dw,
                    .pt = c->pt,
                    .pl = c->pl,
                    .act = a->act,
                    .alpha = a->alpha,
                    .lo = a->lo,
                    .hi = a->hi};
  ctx_pool = (OnyxThreadPool*)&host;
  assert_null(cpu_nchwc_conv_run((OnyxKernelContext*)&host, &p));
  p.y = y1;
  ctx_pool = NULL;
  assert_null(cpu_nchwc_conv_run((OnyxKernelContext*)&host, &p));
  assert_memory_equal(y, y1, yn * sizeof *y);
  scratch_free(); /* the run takes none: nothing to free */
  for (size_t i = 0; i < c->n; i++)
    for (size_t o = 0; o < m; o++)
      for (size_t oy = 0; oy < oh; oy++)
        for (size_t ox = 0; ox < ow; ox++) {
          double acc = with_bias ? bias[o] : 0, mag = fabs(acc);
          const size_t c0 = o / mpg * cw, c1 = c0 + cw;
          for (size_t ci = c0; ci < c1; ci++)
            for (size_t u = 0; u < c->kh; u++)
              for (size_t v = 0; v < c->kw; v++) {
                const long iy = (long)(oy * c->sh + u * c->dh) - (long)c->pt;
                const long ix = (long)(ox * c->sw + v * c->dw) - (long)c->pl;
                if (iy < 0 || ix < 0 || iy >= (long)c->h || ix >= (long)c->w) continue;
                const double t =
                    (double)x[((i * c->c + ci) * c->h + (size_t)iy) * c->w + (size_t)ix] *
                    w[((o * cw + (ci - c0)) * c->kh + u) * c->kw + v];
                acc += t;
                mag += fabs(t);
              }
          const size_t q = oy * ow + ox;
          if (with_z) acc += z[(i * m + o) * ohw + q], mag += 1;
          const double want = act_ref(acc, a->act, a->alpha, a->lo, a->hi);
          const float got = y[((i * mb + o / b) * ohw + q) * b + o % b];
          if (!(fabs((double)got - want) <= 1e-5 * mag + 1e-6))
            fail_msg("path %d block %zu %s%s c=%zu m=%zu %zux%zu k %zux%zu s %zu,%zu d %zu,%zu "
                     "group %zu pads %zu,%zu,%zu,%zu bias=%d z=%d act=%d: y[n%zu c%zu (%zu,%zu)] = "
                     "%.9g, want %.9g",
                     cpu_nchwc_path(), b,
                     c->depthwise ? "depthwise"
                     : c->full    ? "full"
                                  : "pointwise",
                     c->nchw_in ? " (NCHW X)" : "", c->c, m, c->h, c->w, c->kh, c->kw, c->sh, c->sw,
                     c->dh, c->dw, group, c->pt, c->pl, c->pb, c->pr, with_bias, with_z, a->act, i,
                     o, oy, ox, got, want);
        }
  checked++;
  free(x);
  free(w);
  free(bias);
  free(z);
  free(xb);
  free(zb);
  free(wp);
  free(sets);
  free(y);
  free(y1);
}

static void pointwise_body(size_t b) {
  /* channels in and out around one and two blocks; pixel counts around the
   * 6-pixel tiles and 96-pixel tasks */
  static const size_t CS[] = {1, 3, 8, 13, 16, 20, 33};
  static const size_t HW[][2] = {{1, 1}, {1, 5}, {2, 3}, {3, 5}, {7, 7}, {10, 10}, {1, 97}};
  size_t k = 0;
  for (size_t ci = 0; ci < sizeof CS / sizeof CS[0]; ci++)
    for (size_t mi = 0; mi < sizeof CS / sizeof CS[0]; mi++, k++) {
      const size_t* s = HW[k % (sizeof HW / sizeof HW[0])];
      const Case c = {.n = 1 + k % 2,
                      .c = CS[ci],
                      .m = CS[mi],
                      .h = s[0],
                      .w = s[1],
                      .kh = 1,
                      .kw = 1,
                      .sh = 1,
                      .sw = 1,
                      .dh = 1,
                      .dw = 1};
      check_conv(&c, b, (int)(k % 3 != 0), (int)(k % 4 == 1), &ACTS[k % N_ACTS]);
    }
}

static void depthwise_body(size_t b) {
  /* kh, kw, sh, sw, dh, dw, pt, pl, pb, pr */
  static const size_t SHAPES[][10] = {
      {3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, {3, 3, 2, 2, 1, 1, 1, 1, 1, 1},
      {3, 3, 2, 2, 1, 1, 0, 0, 1, 1}, {5, 5, 1, 1, 1, 1, 2, 2, 2, 2},
      {5, 5, 2, 2, 1, 1, 2, 2, 2, 2}, {3, 3, 1, 1, 2, 2, 2, 2, 2, 2},
      {1, 1, 1, 1, 1, 1, 0, 0, 0, 0}, {3, 1, 1, 2, 1, 1, 1, 0, 1, 0}};
  static const size_t CS[] = {1, 8, 13, 16, 24};
  size_t k = 0;
  for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
    for (size_t wd = 1; wd <= 19; wd += 2, k++) {
      const size_t* e = SHAPES[s];
      const size_t span = e[5] * (e[1] - 1) + 1;
      if (wd + e[7] + e[9] < span) continue;
      const Case c = {.n = 1 + k % 2,
                      .c = CS[k % 5],
                      .h = 3 + k % 5,
                      .w = wd,
                      .kh = e[0],
                      .kw = e[1],
                      .sh = e[2],
                      .sw = e[3],
                      .dh = e[4],
                      .dw = e[5],
                      .pt = e[6],
                      .pl = e[7],
                      .pb = e[8],
                      .pr = e[9],
                      .depthwise = 1};
      if (c.h + c.pt + c.pb < e[4] * (e[0] - 1) + 1) continue;
      check_conv(&c, b, (int)(k % 3 != 0), (int)(k % 4 == 1), &ACTS[k % N_ACTS]);
    }
}

/* Full convs (group 1) through the direct loop, X blocked and NCHW: the
 * depthwise shapes, few and many input channels, one and two output
 * blocks and a padded one. */
static void full_body(size_t b) {
  /* kh, kw, sh, sw, dh, dw, pt, pl, pb, pr */
  static const size_t SHAPES[][10] = {
      {3, 3, 2, 2, 1, 1, 1, 1, 1, 1}, {3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
      {3, 3, 2, 2, 1, 1, 0, 0, 1, 1}, {5, 5, 1, 2, 1, 1, 2, 2, 2, 2},
      {3, 3, 1, 1, 2, 2, 2, 2, 2, 2}, {1, 1, 2, 2, 1, 1, 0, 0, 0, 0},
      {1, 1, 1, 1, 1, 1, 0, 0, 0, 0}};
  static const size_t CS[][2] = {{3, 16}, {1, 5}, {4, 24}, {13, 8}, {3, 32}};
  size_t k = 0;
  for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
    for (size_t wd = 1; wd <= 17; wd += 4, k++) {
      const size_t* e = SHAPES[s];
      if (wd + e[7] + e[9] < e[5] * (e[1] - 1) + 1) continue;
      const size_t* cm = CS[k % 5];
      Case c = {.n = 1 + k % 2,
                .c = cm[0],
                .m = cm[1],
                .h = 2 + k % 6,
                .w = wd,
                .kh = e[0],
                .kw = e[1],
                .sh = e[2],
                .sw = e[3],
                .dh = e[4],
                .dw = e[5],
                .pt = e[6],
                .pl = e[7],
                .pb = e[8],
                .pr = e[9],
                .full = 1};
      if (c.h + c.pt + c.pb < e[4] * (e[0] - 1) + 1) continue;
      for (int nchw = 0; nchw < 2; nchw++) {
        c.nchw_in = nchw;
        check_conv(&c, b, (int)(k % 3 != 0), (int)(k % 4 == 1), &ACTS[k % N_ACTS]);
      }
    }
}

/* Full convs of many channels, X blocked and NCHW: channel counts short
 * of and past the block and the output block sets, kernels 1 to 7,
 * strides 1 and 2, dilation 2, asymmetric pads, widths around the
 * 6-, 8- and 12-pixel tiles; each activation, with and without Z. */
static void full_wide_body(size_t b) {
  /* kh, kw, sh, sw, dh, dw, pt, pl, pb, pr */
  static const size_t SHAPES[][10] = {
      {3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, {3, 3, 2, 2, 1, 1, 1, 1, 1, 1},
      {3, 3, 2, 2, 1, 1, 0, 0, 1, 1}, {5, 5, 1, 1, 1, 1, 2, 2, 2, 2},
      {7, 7, 2, 2, 1, 1, 3, 3, 3, 3}, {3, 3, 1, 1, 2, 2, 2, 2, 2, 2},
      {1, 1, 2, 2, 1, 1, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1, 0, 0, 0, 0},
      {3, 5, 1, 2, 1, 1, 0, 2, 1, 0}, {3, 3, 1, 1, 1, 1, 2, 0, 0, 1}};
  static const size_t CM[][2] = {{20, 40}, {37, 70}, {48, 17}, {16, 64}, {9, 33}, {64, 24}};
  static const size_t WD[] = {7, 14, 16, 26, 31};
  size_t k = 0;
  for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
    for (size_t wi = 0; wi < sizeof WD / sizeof WD[0]; wi++, k++) {
      const size_t* e = SHAPES[s];
      const size_t* cm = CM[k % 6];
      Case c = {.n = 1 + k % 2,
                .c = cm[0],
                .m = cm[1],
                .h = 3 + k % 5,
                .w = WD[wi],
                .kh = e[0],
                .kw = e[1],
                .sh = e[2],
                .sw = e[3],
                .dh = e[4],
                .dw = e[5],
                .pt = e[6],
                .pl = e[7],
                .pb = e[8],
                .pr = e[9],
                .full = 1};
      if (c.h + c.pt + c.pb < e[4] * (e[0] - 1) + 1) c.h = e[4] * (e[0] - 1) + 1;
      c.nchw_in = (int)(k % 7 == 3);
      check_conv(&c, b, (int)(k % 3 != 0), (int)(k % 4 == 1), &ACTS[k % N_ACTS]);
    }
}

/* Grouped convs (not depthwise) through the direct loop: group widths 4,
 * 8, 16 and 32, input and output widths equal or not, groups narrower
 * than, equal to and wider than the block, channel counts not multiples
 * of the block. */
static void grouped_body(size_t b) {
  /* c, m, group */
  static const size_t G[][3] = {{32, 32, 8}, {24, 48, 6}, {12, 12, 3}, {48, 48, 6},
                                {40, 40, 5}, {24, 24, 3}, {64, 64, 4}, {48, 96, 3},
                                {64, 64, 2}, {96, 96, 3}, {16, 8, 2},  {56, 56, 7}};
  /* kh, kw, sh, sw, dh, dw, pt, pl, pb, pr */
  static const size_t SHAPES[][10] = {{3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
                                      {3, 3, 2, 2, 1, 1, 1, 1, 1, 1},
                                      {1, 1, 1, 1, 1, 1, 0, 0, 0, 0},
                                      {3, 3, 1, 1, 2, 2, 2, 1, 2, 1}};
  size_t k = 0;
  for (size_t gi = 0; gi < sizeof G / sizeof G[0]; gi++)
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++, k++) {
      const size_t* e = SHAPES[s];
      Case c = {.n = 1 + k % 2,
                .c = G[gi][0],
                .m = G[gi][1],
                .group = G[gi][2],
                .h = 5 + k % 4,
                .w = 9 + k % 11,
                .kh = e[0],
                .kw = e[1],
                .sh = e[2],
                .sw = e[3],
                .dh = e[4],
                .dw = e[5],
                .pt = e[6],
                .pl = e[7],
                .pb = e[8],
                .pr = e[9],
                .full = 1};
      c.nchw_in = (int)(k % 5 == 2);
      check_conv(&c, b, (int)(k % 3 != 0), (int)(k % 4 == 1), &ACTS[k % N_ACTS]);
    }
}

static const char* const PATH_NAMES[] = {"scalar", "avx2", "avx512"};

static void for_each_path(void (*body)(size_t)) {
  for (int path = CPU_NCHWC_SCALAR; path <= CPU_NCHWC_AVX512; path++) {
    cpu_nchwc_force_path(path);
    if (cpu_nchwc_path() != path) {
      printf("  [%s path not on this machine or capped by ONYX_CPU_ISA: skipped]\n",
             PATH_NAMES[path]);
      continue;
    }
    const size_t before = checked;
    body(8);
    body(16);
    printf("  [%s path: %zu cases]\n", PATH_NAMES[path], checked - before);
  }
  cpu_nchwc_force_path(-1);
}

static void test_pointwise(void** state) {
  (void)state;
  for_each_path(pointwise_body);
}

static void test_depthwise(void** state) {
  (void)state;
  for_each_path(depthwise_body);
}

/* Reorders both ways, the global average and the gate's scale, against the
 * loops here. */
static void reorders_body(size_t b) {
  static const size_t CS[] = {1, 7, 8, 9, 16, 17, 33};
  for (size_t k = 0; k < sizeof CS / sizeof CS[0]; k++) {
    const size_t hws[] = {5 + k, 64 + k, 130};
    const size_t hw0 = hws[k % 3];
    const size_t n = 2, c = CS[k], hw = hw0, cb = blocks(c, b);
    float* x = malloc(n * c * hw * sizeof *x);
    float* y = malloc(n * cb * hw * b * sizeof *y);
    float* back = malloc(n * c * hw * sizeof *back);
    float* avg = malloc(n * cb * b * sizeof *avg);
    float* scaled = malloc(n * cb * hw * b * sizeof *scaled);
    assert_true(x && y && back && avg && scaled);
    for (size_t i = 0; i < n * c * hw; i++)
      x[i] = uniform();
    for (size_t i = 0; i < n * cb * hw * b; i++)
      y[i] = NAN; /* every lane must be written */
    cpu_nchwc_reorder_input(x, y, n, c, hw, b);
    for (size_t i = 0; i < n; i++)
      for (size_t ch = 0; ch < cb * b; ch++)
        for (size_t p = 0; p < hw; p++) {
          const float got = y[((i * cb + ch / b) * hw + p) * b + ch % b];
          const float want = ch < c ? x[(i * c + ch) * hw + p] : 0.0f;
          assert_true(got == want);
        }
    cpu_nchwc_reorder_output(y, back, n, c, cb, hw, b);
    assert_memory_equal(back, x, n * c * hw * sizeof *x);
    cpu_nchwc_global_average(y, avg, n, cb, hw, b);
    for (size_t i = 0; i < n; i++)
      for (size_t ch = 0; ch < c; ch++) {
        double s = 0;
        for (size_t p = 0; p < hw; p++)
          s += x[(i * c + ch) * hw + p];
        assert_true(fabs(avg[(i * cb + ch / b) * b + ch % b] - s / (double)hw) <= 1e-6);
      }
    /* the gate: every pixel's lanes times the image's averages */
    cpu_nchwc_scale(y, avg, scaled, n, cb, hw, b);
    for (size_t i = 0; i < n; i++)
      for (size_t ch = 0; ch < cb * b; ch++)
        for (size_t p = 0; p < hw; p++) {
          const size_t at = ((i * cb + ch / b) * hw + p) * b + ch % b;
          assert_true(scaled[at] == y[at] * avg[(i * cb + ch / b) * b + ch % b]);
        }
    cpu_nchwc_scale(y, avg, y, n, cb, hw, b); /* in place */
    assert_memory_equal(y, scaled, n * cb * hw * b * sizeof *y);
    free(scaled);
    checked++;
    free(x);
    free(y);
    free(back);
    free(avg);
  }
}

static void test_full(void** state) {
  (void)state;
  for_each_path(full_body);
}

static void test_full_wide(void** state) {
  (void)state;
  for_each_path(full_wide_body);
}

static void test_grouped(void** state) {
  (void)state;
  for_each_path(grouped_body);
}

static void test_reorders(void** state) {
  (void)state;
  for_each_path(reorders_body);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reorders),  cmocka_unit_test(test_pointwise),
      cmocka_unit_test(test_depthwise), cmocka_unit_test(test_full),
      cmocka_unit_test(test_full_wide), cmocka_unit_test(test_grouped)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
