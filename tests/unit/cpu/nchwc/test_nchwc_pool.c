/* test_nchwc_pool.c — the CPU provider's blocked pooling and per-channel
 * affine kernels (providers/cpu/cpu_nchwc_pool.c), compiled into the test
 * with a minimal host table, against plain NCHW loops written here: MaxPool
 * and AveragePool over kernels 1x1 to 3x3 (and a dilated 2x2), strides 1
 * to 3, symmetric and asymmetric pads, ceil_mode on and off,
 * count_include_pad on and off, channel counts short of, equal to and past
 * one and two blocks, windows that reach past the input (ceil_mode) and
 * windows that miss it (-inf / 0), NaN inputs for the maximum's order; the
 * output extents against ONNX's formula; the padded lanes (zero in X) give
 * what zeros give; the affine y = x * s + t (and its Relu) with the padded
 * lanes' s = t = 0 writing 0, in place too; blocks 8 and 16 on each path (scalar, AVX2,
 * AVX-512) forced in turn, with the pool stand-in and without. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_nchwc.h"
#include "cpu_nchwc_pool.h"
#include "cpu_util.h"

/* The host table, the pool stand-in and scratch (ctx_pool, scratch_free). */
#include "cpu_fake_host.h"

static uint32_t rng = 777;
static float uniform(void) { /* [-1, 1) */
  rng = rng * 1664525u + 1013904223u;
  return (float)((double)(rng >> 8) / (double)(1u << 23) - 1.0);
}

static size_t blocks(size_t c, size_t b) {
  return (c + b - 1) / b;
}

static size_t checked;

/* ONNX's pooled extent, written out: floor or ceil of (in + pads -
 * dilated kernel) / stride, + 1; with ceil_mode a last window that starts
 * at or past in + the leading pad is dropped. 0: the window does not fit. */
static size_t extent_ref(size_t in, size_t k, size_t s, size_t d, size_t p0, size_t p1, int ceil) {
  const long span = (long)(d * (k - 1) + 1), padded = (long)(in + p0 + p1);
  if (padded < span) return 0;
  const long rest = padded - span;
  long o = (ceil ? (rest + (long)s - 1) / (long)s : rest / (long)s) + 1;
  if (ceil && (o - 1) * (long)s >= (long)(in + p0)) o--;
  return (size_t)o;
}

typedef struct Case {
  size_t n, c, h, w, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  int ceil, cip, max, nan;
} Case;

static bool same_float(float a, float b) {
  return (isnan(a) && isnan(b)) || a == b;
}

static void check_pool(const Case* c, size_t b) {
  const size_t cb = blocks(c->c, b), hw = c->h * c->w;
  const size_t oh = extent_ref(c->h, c->kh, c->sh, c->dh, c->pt, c->pb, c->ceil);
  const size_t ow = extent_ref(c->w, c->kw, c->sw, c->dw, c->pl, c->pr, c->ceil);
  assert_true(oh > 0 && ow > 0);
  size_t koh = 0, kow = 0;
  assert_true(cpu_nchwc_pool_extent(c->h, c->kh, c->sh, c->dh, c->pt, c->pb, c->ceil != 0, &koh));
  assert_true(cpu_nchwc_pool_extent(c->w, c->kw, c->sw, c->dw, c->pl, c->pr, c->ceil != 0, &kow));
  assert_int_equal(koh, oh);
  assert_int_equal(kow, ow);
  const size_t xn = c->n * c->c * hw, xbn = c->n * cb * hw * b, yn = c->n * cb * oh * ow * b;
  float* x = malloc(xn * sizeof *x);
  float* xb = calloc(xbn, sizeof *xb); /* padded lanes zero, as ReorderInput writes them */
  float* y = malloc(yn * sizeof *y);
  float* y1 = malloc(yn * sizeof *y1);
  assert_non_null(x && xb && y && y1);
  for (size_t i = 0; i < xn; i++)
    x[i] = uniform();
  if (c->nan) /* every 7th value: the maximum keeps a NaN only where it is the first tap */
    for (size_t i = 0; i < xn; i += 7)
      x[i] = NAN;
  for (size_t i = 0; i < c->n; i++)
    for (size_t ch = 0; ch < c->c; ch++)
      for (size_t q = 0; q < hw; q++)
        xb[((i * cb + ch / b) * hw + q) * b + ch % b] = x[(i * c->c + ch) * hw + q];
  for (size_t i = 0; i < yn; i++)
    y[i] = y1[i] = 12345.0f;
  CpuNchwcPool p = {.x = xb,
                    .y = y,
                    .n = c->n,
                    .cb = cb,
                    .h = c->h,
                    .w = c->w,
                    .oh = oh,
                    .ow = ow,
                    .block = b,
                    .kh = c->kh,
                    .kw = c->kw,
                    .sh = c->sh,
                    .sw = c->sw,
                    .dh = c->dh,
                    .dw = c->dw,
                    .pt = c->pt,
                    .pl = c->pl,
                    .pb = c->pb,
                    .pr = c->pr,
                    .max = c->max != 0,
                    .count_include_pad = c->cip != 0};
  ctx_pool = (OnyxThreadPool*)&host;
  assert_null(cpu_nchwc_pool_run((OnyxKernelContext*)&host, &p));
  p.y = y1;
  ctx_pool = NULL;
  assert_null(cpu_nchwc_pool_run((OnyxKernelContext*)&host, &p));
  assert_memory_equal(y, y1, yn * sizeof *y);
  assert_int_equal(scratch_count, 0); /* the pools take no scratch */
  scratch_free();
  for (size_t i = 0; i < c->n; i++)
    for (size_t ch = 0; ch < cb * b; ch++)
      for (size_t oy = 0; oy < oh; oy++)
        for (size_t ox = 0; ox < ow; ox++) {
          float best = 0;
          double sum = 0;
          size_t valid = 0, padded = 0;
          for (size_t u = 0; u < c->kh; u++)
            for (size_t v = 0; v < c->kw; v++) {
              const long iy = (long)(oy * c->sh + u * c->dh) - (long)c->pt;
              const long ix = (long)(ox * c->sw + v * c->dw) - (long)c->pl;
              if (iy >= -(long)c->pt && iy < (long)(c->h + c->pb) && ix >= -(long)c->pl &&
                  ix < (long)(c->w + c->pr))
                padded++;
              if (iy < 0 || ix < 0 || iy >= (long)c->h || ix >= (long)c->w) continue;
              const float xv =
                  ch < c->c ? x[((i * c->c + ch) * c->h + (size_t)iy) * c->w + (size_t)ix] : 0.0f;
              if (!valid || xv > best) best = xv;
              sum += xv;
              valid++;
            }
          const size_t count = c->cip ? padded : valid;
          const float got = y[(((i * cb + ch / b) * oh + oy) * ow + ox) * b + ch % b];
          if (c->max) {
            const float want = valid ? best : -INFINITY;
            if (!same_float(got, want))
              fail_msg("max c %zu (of %zu) at %zu,%zu: %.9g, want %.9g", ch, c->c, oy, ox, got,
                       want);
          } else {
            const double want = count ? sum / (double)count : 0.0;
            if (fabs(got - want) > 2e-6 * (1 + fabs(want)))
              fail_msg("avg c %zu (of %zu) at %zu,%zu: %.9g, want %.9g", ch, c->c, oy, ox, got,
                       want);
          }
        }
  checked++;
  free(x);
  free(xb);
  free(y);
  free(y1);
}

static void pool_body(size_t b) {
  /* kh, kw, sh, sw, dh, dw, pt, pl, pb, pr */
  static const size_t SHAPES[][10] = {
      {1, 1, 1, 1, 1, 1, 0, 0, 0, 0}, {2, 2, 2, 2, 1, 1, 0, 0, 0, 0},
      {3, 3, 2, 2, 1, 1, 0, 0, 0, 0}, {3, 3, 2, 2, 1, 1, 1, 1, 1, 1},
      {3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, {2, 3, 1, 2, 1, 1, 1, 0, 0, 2},
      {3, 1, 2, 1, 1, 1, 0, 1, 2, 0}, {2, 2, 1, 1, 2, 2, 0, 0, 1, 1},
      {3, 3, 3, 3, 1, 1, 2, 2, 2, 2}, {1, 1, 1, 1, 1, 1, 2, 1, 2, 3}, /* windows that miss X */
  };
  static const size_t CS[] = {5, 8, 13, 16, 20, 33};
  size_t k = 0;
  for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
    for (int ceil = 0; ceil < 2; ceil++)
      for (int max = 0; max < 2; max++)
        for (int cip = 0; cip <= !max; cip++, k++) {
          const size_t* e = SHAPES[s];
          const Case c = {.n = 1 + k % 2,
                          .c = CS[k % 6],
                          .h = 1 + k % 7,
                          .w = 2 + k % 9,
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
                          .ceil = ceil,
                          .cip = cip,
                          .max = max,
                          .nan = max && k % 3 == 0};
          if (!extent_ref(c.h, c.kh, c.sh, c.dh, c.pt, c.pb, 0) ||
              !extent_ref(c.w, c.kw, c.sw, c.dw, c.pl, c.pr, 0))
            continue;
          check_pool(&c, b);
        }
}

static void affine_body(size_t b) {
  static const size_t CS[] = {1, 8, 13, 16, 20, 33};
  for (size_t k = 0; k < 12; k++) {
    const size_t n = 1 + k % 2, c = CS[k % 6], cb = blocks(c, b), hw = 1 + k * 5;
    const size_t xn = n * cb * hw * b;
    float* x = malloc(xn * sizeof *x);
    float* y = malloc(xn * sizeof *y);
    float* s = calloc(cb * b, sizeof *s);
    float* t = calloc(cb * b, sizeof *t);
    assert_non_null(x && y && s && t);
    for (size_t i = 0; i < xn; i++)
      x[i] = 3.0f * uniform(); /* the padded lanes too: finite values the affine zeroes */
    for (size_t ch = 0; ch < c; ch++)
      s[ch] = 2.0f * uniform(), t[ch] = uniform();
    const bool relu = k % 3 == 1;
    ctx_pool = k % 2 ? (OnyxThreadPool*)&host : NULL;
    cpu_nchwc_affine((OnyxKernelContext*)&host, x, s, t, y, n, cb, hw, b, relu);
    for (size_t i = 0; i < n; i++)
      for (size_t ch = 0; ch < cb * b; ch++)
        for (size_t q = 0; q < hw; q++) {
          const size_t at = ((i * cb + ch / b) * hw + q) * b + ch % b;
          double want = ch < c ? (double)x[at] * s[ch] + t[ch] : 0.0;
          if (relu && want < 0) want = 0;
          if (fabs(y[at] - want) > 1e-6 * (1 + fabs(want)))
            fail_msg("affine c %zu (of %zu): %.9g, want %.9g", ch, c, y[at], want);
        }
    float* in_place = malloc(xn * sizeof *in_place);
    assert_non_null(in_place);
    memcpy(in_place, x, xn * sizeof *x);
    cpu_nchwc_affine((OnyxKernelContext*)&host, in_place, s, t, in_place, n, cb, hw, b, relu);
    assert_memory_equal(in_place, y, xn * sizeof *y);
    checked++;
    free(in_place);
    free(x);
    free(y);
    free(s);
    free(t);
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

static void test_pools(void** state) {
  (void)state;
  for_each_path(pool_body);
}

static void test_affine(void** state) {
  (void)state;
  for_each_path(affine_body);
}

/* Extents: a window wider than the padded input does not fit; a ceil_mode
 * window that would start in the trailing pad is dropped. */
static void test_extents(void** state) {
  (void)state;
  size_t o = 0;
  assert_false(cpu_nchwc_pool_extent(2, 3, 1, 1, 0, 0, false, &o));
  assert_true(cpu_nchwc_pool_extent(3, 3, 1, 1, 0, 0, false, &o));
  assert_int_equal(o, 1);
  /* in 6, k 3, s 2: (6 - 3) / 2 = 1.5: floor 2 windows, ceil 3 */
  assert_true(cpu_nchwc_pool_extent(6, 3, 2, 1, 0, 0, false, &o));
  assert_int_equal(o, 2);
  assert_true(cpu_nchwc_pool_extent(6, 3, 2, 1, 0, 0, true, &o));
  assert_int_equal(o, 3);
  /* in 5, k 2, s 2, trailing pad 2: (5 + 2 - 2) / 2 = 2.5: ceil 4 windows
   * would start at 6, past in 5: dropped, 3 */
  assert_true(cpu_nchwc_pool_extent(5, 2, 2, 1, 0, 2, true, &o));
  assert_int_equal(o, 3);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_extents), cmocka_unit_test(test_pools),
                                     cmocka_unit_test(test_affine)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
