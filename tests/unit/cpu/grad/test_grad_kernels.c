/* test_grad_kernels.c — the CPU provider's ConvGrad direct kernels
 * (providers/cpu/cpu_grad_conv_direct.c) and BatchNormalization's float32
 * plane loops (providers/cpu/cpu_grad_bn.c), compiled into the test with a
 * minimal host table, against plain loops written here in double:
 *
 * - dW and dX of 2-D convolutions with unit strides by the definition of
 *   Conv (every (n, m, output position, c, tap) visited): 16 channels on
 *   16 x 16 images (the ResNet-style CNN), channel counts that fill no tile
 *   (m 5, c 11, c 3), taps past the 3-tap block (5 x 5, 1 x 7), asymmetric
 *   pads and pads past the kernel's extent (outputs whose windows lie in
 *   the padding), rows past a 3-row block and columns past a 16-lane vector
 *   (20 and 37 wide), 1-row (1-D) images, 64 channels, and a group of a
 *   grouped conv read through channel offsets (the other channels of dX
 *   untouched); with the pool stand-in and without it, bitwise equal;
 *   skipped where the machine has no AVX-512;
 * - the forward conv through dX's kernel (cpu_grad_conv_fwd) on the same
 *   cases, by the definition of Conv;
 * - the BatchNormalization plane sums, the affine map and the dX map on
 *   each ISA path the machine has (AVX-512 forced, then the portable
 *   loops), plane lengths around the vector widths (1 to 70, 256), sums
 *   about a reference value far from the data (large offsets). */
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
#include "cpu_grad_bn.h"
#include "cpu_grad_conv_direct.h"

/* The host table, the pool stand-in and scratch (ctx_pool, scratch_free). */
#include "cpu_fake_host.h"

static uint32_t rng = 77;
static float uniform(void) { /* [-1, 1) */
  rng = rng * 1664525u + 1013904223u;
  return (float)((double)(rng >> 8) / (double)(1u << 23) - 1.0);
}

typedef struct Case {
  size_t n, c, m, ih, iw, kh, kw, pt, pl, pb, pr;
} Case;

/* dW (m, c, kh, kw) and dX (n, c, ih, iw) by the definition, in double,
 * with mag the sum of |terms| of each (its rounding scale). */
static void reference(const Case* k, size_t oh, size_t ow, const float* x, const float* w,
                      const float* dy, double* dw, double* dwmag, double* dx, double* dxmag) {
  const size_t kk = k->kh * k->kw;
  memset(dw, 0, k->m * k->c * kk * sizeof *dw);
  memset(dwmag, 0, k->m * k->c * kk * sizeof *dwmag);
  memset(dx, 0, k->n * k->c * k->ih * k->iw * sizeof *dx);
  memset(dxmag, 0, k->n * k->c * k->ih * k->iw * sizeof *dxmag);
  for (size_t n = 0; n < k->n; n++)
    for (size_t m = 0; m < k->m; m++)
      for (size_t oy = 0; oy < oh; oy++)
        for (size_t ox = 0; ox < ow; ox++) {
          const double g = dy[((n * k->m + m) * oh + oy) * ow + ox];
          for (size_t c = 0; c < k->c; c++)
            for (size_t ky = 0; ky < k->kh; ky++)
              for (size_t kx = 0; kx < k->kw; kx++) {
                const long iy = (long)(oy + ky) - (long)k->pt;
                const long ix = (long)(ox + kx) - (long)k->pl;
                if (iy < 0 || ix < 0 || iy >= (long)k->ih || ix >= (long)k->iw) continue;
                const size_t xi = ((n * k->c + c) * k->ih + (size_t)iy) * k->iw + (size_t)ix;
                const size_t wi = (m * k->c + c) * kk + ky * k->kw + kx;
                dw[wi] += g * x[xi];
                dwmag[wi] += fabs(g * x[xi]);
                dx[xi] += g * w[wi];
                dxmag[xi] += fabs(g * w[wi]);
              }
        }
}

static void check_close(const char* what, const Case* k, const float* got, const double* want,
                        const double* mag, size_t count) {
  for (size_t i = 0; i < count; i++)
    if (!(fabs((double)got[i] - want[i]) <= 1e-5 * mag[i] + 1e-6))
      fail_msg("%s: n %zu c %zu m %zu %zux%zu k %zux%zu pads %zu,%zu,%zu,%zu: [%zu] = %.9g, want "
               "%.9g",
               what, k->n, k->c, k->m, k->ih, k->iw, k->kh, k->kw, k->pt, k->pl, k->pb, k->pr, i,
               (double)got[i], want[i]);
}

static void run_case(const Case* k) {
  const size_t oh = k->ih + k->pt + k->pb - k->kh + 1, ow = k->iw + k->pl + k->pr - k->kw + 1;
  const size_t kk = k->kh * k->kw, nx = k->n * k->c * k->ih * k->iw, nw = k->m * k->c * kk;
  const size_t ny = k->n * k->m * oh * ow;
  float *x = malloc(nx * sizeof *x), *w = malloc(nw * sizeof *w), *dy = malloc(ny * sizeof *dy);
  double *rdw = malloc(nw * sizeof *rdw), *rdwm = malloc(nw * sizeof *rdwm);
  double *rdx = malloc(nx * sizeof *rdx), *rdxm = malloc(nx * sizeof *rdxm);
  float* dw[2] = {malloc(nw * sizeof(float)), malloc(nw * sizeof(float))};
  float* dx[2] = {malloc(nx * sizeof(float)), malloc(nx * sizeof(float))};
  assert_true(x && w && dy && rdw && rdwm && rdx && rdxm && dw[0] && dw[1] && dx[0] && dx[1]);
  for (size_t i = 0; i < nx; i++)
    x[i] = uniform();
  for (size_t i = 0; i < nw; i++)
    w[i] = uniform();
  for (size_t i = 0; i < ny; i++)
    dy[i] = uniform();
  reference(k, oh, ow, x, w, dy, rdw, rdwm, rdx, rdxm);
  const CpuGradConv2d g = {.n = k->n,
                           .c = k->c,
                           .m = k->m,
                           .xc = k->c,
                           .yc = k->m,
                           .ih = k->ih,
                           .iw = k->iw,
                           .oh = oh,
                           .ow = ow,
                           .kh = k->kh,
                           .kw = k->kw,
                           .pt = k->pt,
                           .pl = k->pl};
  size_t fw = 0, fx = 0;
  assert_true(cpu_grad_conv_dw_scratch(&g, &fw));
  assert_true(cpu_grad_conv_dx_scratch(&g, &fx));
  for (int p = 0; p < 2; p++) {
    OnyxThreadPool* pool = p ? (OnyxThreadPool*)&host : NULL;
    float* scratch = malloc((fw > fx ? fw : fx) * sizeof(float));
    assert_non_null(scratch);
    for (size_t i = 0; i < nw; i++)
      dw[p][i] = NAN; /* every output must be written */
    for (size_t i = 0; i < nx; i++)
      dx[p][i] = NAN;
    for (size_t i = 0; i < (fw > fx ? fw : fx); i++)
      scratch[i] = NAN; /* the kernels must not read scratch they did not write */
    cpu_grad_conv_dw(pool, &g, x, dy, dw[p], scratch, NULL);
    for (size_t i = 0; i < (fw > fx ? fw : fx); i++)
      scratch[i] = NAN;
    cpu_grad_conv_dx(pool, &g, dy, w, dx[p], scratch, NULL);
    free(scratch);
    check_close("dW", k, dw[p], rdw, rdwm, nw);
    check_close("dX", k, dx[p], rdx, rdxm, nx);
  }
  assert_memory_equal(dw[0], dw[1], nw * sizeof(float));
  assert_memory_equal(dx[0], dx[1], nx * sizeof(float));
  free(x), free(w), free(dy), free(rdw), free(rdwm), free(rdx), free(rdxm);
  free(dw[0]), free(dw[1]), free(dx[0]), free(dx[1]);
}

static bool have_avx512(void) {
  cpu_gemm_force_isa(-1);
  return cpu_grad_conv_direct_available();
}

/* n, c, m, ih, iw, kh, kw, pads top, left, bottom, right */
static const Case CASES[] = {
    {4, 16, 16, 16, 16, 3, 3, 1, 1, 1, 1}, /* the CNN's blocks (batch 4) */
    {3, 3, 16, 16, 16, 3, 3, 1, 1, 1, 1},  /* its stem: c 3 */
    {2, 11, 5, 9, 20, 3, 3, 1, 1, 1, 1},   /* m 5, c 11: partial tiles; 20 columns */
    {2, 8, 9, 7, 37, 5, 5, 2, 2, 2, 2},    /* 5x5: taps 3 + 2; 37 columns: 16 + 16 + 5 */
    {1, 4, 6, 6, 13, 3, 3, 0, 2, 1, 0},    /* asymmetric pads */
    {1, 5, 7, 5, 6, 3, 3, 3, 4, 3, 2},     /* pads past the kernel's extent */
    {2, 6, 10, 8, 8, 3, 3, 0, 0, 0, 0},    /* no padding: 6x6 outputs */
    {3, 7, 4, 1, 30, 1, 7, 0, 3, 0, 3},    /* 1-row images (a 1-D conv), 1x7 */
    {2, 5, 3, 11, 4, 4, 1, 2, 0, 1, 0},    /* 4x1, 4 columns */
    {1, 64, 64, 5, 5, 3, 3, 1, 1, 1, 1},   /* 64 channels */
    {1, 2, 2, 2, 2, 3, 3, 1, 1, 1, 1},     /* images smaller than the kernel */
};

static void test_conv(void** state) {
  (void)state;
  if (!have_avx512()) skip();
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
    run_case(&CASES[i]);
}

/* The forward conv through dX's kernel (cpu_grad_conv_fwd) against the
 * definition of Conv, on the cases whose start pads fit the kernel (the
 * others are refused); with and without the pool stand-in, bitwise
 * equal. */
static void test_forward(void** state) {
  (void)state;
  if (!have_avx512()) skip();
  for (size_t ci = 0; ci < sizeof CASES / sizeof CASES[0]; ci++) {
    const Case* k = &CASES[ci];
    const size_t oh = k->ih + k->pt + k->pb - k->kh + 1, ow = k->iw + k->pl + k->pr - k->kw + 1;
    const size_t kk = k->kh * k->kw, nx = k->n * k->c * k->ih * k->iw, nw = k->m * k->c * kk;
    const size_t ny = k->n * k->m * oh * ow;
    const CpuGradConv2d g = {.n = k->n,
                             .c = k->c,
                             .m = k->m,
                             .xc = k->c,
                             .yc = k->m,
                             .ih = k->ih,
                             .iw = k->iw,
                             .oh = oh,
                             .ow = ow,
                             .kh = k->kh,
                             .kw = k->kw,
                             .pt = k->pt,
                             .pl = k->pl};
    size_t fs = 0;
    const bool fits = k->pt < k->kh && k->pl < k->kw;
    assert_int_equal(cpu_grad_conv_fwd_scratch(&g, &fs), fits);
    if (!fits) continue;
    float *x = malloc(nx * sizeof *x), *w = malloc(nw * sizeof *w), *sc = malloc(fs * sizeof *sc);
    float* y[2] = {malloc(ny * sizeof(float)), malloc(ny * sizeof(float))};
    double *want = malloc(ny * sizeof *want), *mag = malloc(ny * sizeof *mag);
    assert_true(x && w && sc && y[0] && y[1] && want && mag);
    for (size_t i = 0; i < nx; i++)
      x[i] = uniform();
    for (size_t i = 0; i < nw; i++)
      w[i] = uniform();
    for (size_t n = 0; n < k->n; n++)
      for (size_t m = 0; m < k->m; m++)
        for (size_t oy = 0; oy < oh; oy++)
          for (size_t ox = 0; ox < ow; ox++) {
            double s = 0, a = 0;
            for (size_t c = 0; c < k->c; c++)
              for (size_t ky = 0; ky < k->kh; ky++)
                for (size_t kx = 0; kx < k->kw; kx++) {
                  const long iy = (long)(oy + ky) - (long)k->pt;
                  const long ix = (long)(ox + kx) - (long)k->pl;
                  if (iy < 0 || ix < 0 || iy >= (long)k->ih || ix >= (long)k->iw) continue;
                  const double p =
                      (double)x[((n * k->c + c) * k->ih + (size_t)iy) * k->iw + (size_t)ix] *
                      w[((m * k->c + c) * k->kh + ky) * k->kw + kx];
                  s += p;
                  a += fabs(p);
                }
            want[((n * k->m + m) * oh + oy) * ow + ox] = s;
            mag[((n * k->m + m) * oh + oy) * ow + ox] = a;
          }
    for (int p = 0; p < 2; p++) {
      for (size_t i = 0; i < ny; i++)
        y[p][i] = NAN;
      for (size_t i = 0; i < fs; i++)
        sc[i] = NAN;
      cpu_grad_conv_fwd(p ? (OnyxThreadPool*)&host : NULL, &g, x, w, y[p], sc, NULL);
      check_close("Y", k, y[p], want, mag, ny);
    }
    assert_memory_equal(y[0], y[1], ny * sizeof(float));
    free(x), free(w), free(sc), free(y[0]), free(y[1]), free(want), free(mag);
  }
}

/* One group of a grouped conv: X and dX with 6 channels, dY with 4, the
 * group's 3 and 2 starting at channels 3 and 2; the other channels of dX
 * keep their values. */
static void test_group(void** state) {
  (void)state;
  if (!have_avx512()) skip();
  const size_t n = 2, xc = 6, yc = 4, c = 3, m = 2, h = 5, wd = 7, kk = 9;
  float x[2 * 6 * 5 * 7], dy[2 * 4 * 5 * 7], w[2 * 3 * 9], dw[2 * 3 * 9], dx[2 * 6 * 5 * 7];
  for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
    x[i] = uniform();
  for (size_t i = 0; i < sizeof dy / sizeof dy[0]; i++)
    dy[i] = uniform();
  for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
    w[i] = uniform();
  for (size_t i = 0; i < sizeof dx / sizeof dx[0]; i++)
    dx[i] = 42.0f;
  const CpuGradConv2d g = {.n = n,
                           .c = c,
                           .m = m,
                           .xc = xc,
                           .yc = yc,
                           .ih = h,
                           .iw = wd,
                           .oh = h,
                           .ow = wd,
                           .kh = 3,
                           .kw = 3,
                           .pt = 1,
                           .pl = 1};
  size_t fw, fx;
  assert_true(cpu_grad_conv_dw_scratch(&g, &fw) && cpu_grad_conv_dx_scratch(&g, &fx));
  float* scratch = malloc((fw > fx ? fw : fx) * sizeof(float));
  assert_non_null(scratch);
  const float* xg = x + 3 * h * wd;
  const float* yg = dy + 2 * h * wd;
  cpu_grad_conv_dw(NULL, &g, xg, yg, dw, scratch, NULL);
  cpu_grad_conv_dx(NULL, &g, yg, w, dx + 3 * h * wd, scratch, NULL);
  free(scratch);
  for (size_t mi = 0; mi < m; mi++)
    for (size_t ci = 0; ci < c; ci++)
      for (size_t t = 0; t < kk; t++) {
        double s = 0, mag = 0;
        for (size_t ni = 0; ni < n; ni++)
          for (size_t oy = 0; oy < h; oy++)
            for (size_t ox = 0; ox < wd; ox++) {
              const long iy = (long)(oy + t / 3) - 1, ix = (long)(ox + t % 3) - 1;
              if (iy < 0 || ix < 0 || iy >= (long)h || ix >= (long)wd) continue;
              const double p = (double)dy[((ni * yc + 2 + mi) * h + oy) * wd + ox] *
                               x[((ni * xc + 3 + ci) * h + (size_t)iy) * wd + (size_t)ix];
              s += p;
              mag += fabs(p);
            }
        assert_true(fabs(dw[(mi * c + ci) * kk + t] - s) <= 1e-5 * mag + 1e-6);
      }
  for (size_t ni = 0; ni < n; ni++)
    for (size_t ch = 0; ch < xc; ch++)
      for (size_t iy = 0; iy < h; iy++)
        for (size_t ix = 0; ix < wd; ix++) {
          const float got = dx[((ni * xc + ch) * h + iy) * wd + ix];
          if (ch < 3 || ch >= 3 + c) {
            assert_true(got == 42.0f);
            continue;
          }
          double s = 0, mag = 0;
          for (size_t mi = 0; mi < m; mi++)
            for (size_t t = 0; t < kk; t++) {
              const long oy = (long)iy + 1 - (long)(t / 3), ox = (long)ix + 1 - (long)(t % 3);
              if (oy < 0 || ox < 0 || oy >= (long)h || ox >= (long)wd) continue;
              const double p = (double)w[(mi * c + ch - 3) * kk + t] *
                               dy[((ni * yc + 2 + mi) * h + (size_t)oy) * wd + (size_t)ox];
              s += p;
              mag += fabs(p);
            }
          assert_true(fabs(got - s) <= 1e-5 * mag + 1e-6);
        }
}

/* The BatchNormalization loops against double loops, on one ISA level. */
static void check_bn(int isa) {
  cpu_gemm_force_isa(isa);
  assert_int_equal(cpu_gemm_isa_level(), isa);
  static const size_t LENS[] = {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 64, 70, 256};
  static const float OFFSETS[] = {0.0f, 3.0f, -1000.0f};
  for (size_t li = 0; li < sizeof LENS / sizeof LENS[0]; li++)
    for (size_t oi = 0; oi < 3; oi++) {
      const size_t len = LENS[li];
      float x[256], dy[256], y[256], dx[256];
      for (size_t i = 0; i < len; i++) {
        x[i] = OFFSETS[oi] + uniform();
        dy[i] = uniform();
      }
      const float m = OFFSETS[oi] + 0.25f;
      double r1 = 0, r2 = 0, rb = 0, rs = 0, mag1 = 0, mag2 = 0, magb = 0, mags = 0;
      for (size_t i = 0; i < len; i++) {
        const double d = (double)x[i] - m;
        r1 += d, r2 += d * d, rb += dy[i], rs += dy[i] * d;
        mag1 += fabs(d), mag2 += d * d, magb += fabs(dy[i]), mags += fabs(dy[i] * d);
      }
      /* the running totals are added to */
      double s1 = 1.0, s2 = 2.0, sb = 3.0, ss = 4.0, t1 = 5.0, t2 = 6.0;
      cpu_bn_moments(x, len, m, &s1, &s2);
      assert_true(fabs(s1 - 1.0 - r1) <= 1e-6 * mag1 + 1e-9);
      assert_true(fabs(s2 - 2.0 - r2) <= 1e-6 * mag2 + 1e-9);
      cpu_bn_grad_sums(x, dy, len, m, &sb, &ss, &t1, &t2);
      assert_true(fabs(sb - 3.0 - rb) <= 1e-6 * magb + 1e-9);
      assert_true(fabs(ss - 4.0 - rs) <= 1e-6 * mags + 1e-9);
      assert_true(fabs(t1 - 5.0 - r1) <= 1e-6 * mag1 + 1e-9);
      assert_true(fabs(t2 - 6.0 - r2) <= 1e-6 * mag2 + 1e-9);
      sb = ss = 0;
      cpu_bn_grad_sums(x, dy, len, m, &sb, &ss, NULL, NULL);
      assert_true(fabs(sb - rb) <= 1e-6 * magb + 1e-9 && fabs(ss - rs) <= 1e-6 * mags + 1e-9);
      /* y = x a + b; the value past len is not written */
      if (len < 256) y[len] = 7.0f;
      cpu_bn_affine(x, y, len, 0.5f, -2.0f);
      for (size_t i = 0; i < len; i++) {
        const double want = (double)x[i] * 0.5 - 2.0;
        assert_true(fabs(y[i] - want) <= 1e-6 * (fabs((double)x[i] * 0.5) + 2.0));
      }
      if (len < 256) assert_true(y[len] == 7.0f);
      cpu_bn_grad_dx(x, dy, dx, len, 1.5f, 0.1f, m, 0.3f);
      for (size_t i = 0; i < len; i++) {
        const double want = 1.5 * ((double)dy[i] - 0.1 - ((double)x[i] - m) * 0.3);
        const double mag = 1.5 * (fabs(dy[i]) + 0.1 + fabs(((double)x[i] - m) * 0.3));
        assert_true(fabs(dx[i] - want) <= 1e-6 * mag);
      }
      /* in place: y over x */
      memcpy(y, x, len * sizeof(float));
      cpu_bn_affine(y, y, len, 0.5f, -2.0f);
      for (size_t i = 0; i < len; i++)
        assert_true(fabs(y[i] - ((double)x[i] * 0.5 - 2.0)) <=
                    1e-6 * (fabs((double)x[i] * 0.5) + 2.0));
    }
}

static void test_bn(void** state) {
  (void)state;
  cpu_gemm_force_isa(-1);
  const int best = cpu_gemm_isa_level();
  if (best == CPU_ISA_AVX512) check_bn(CPU_ISA_AVX512);
  check_bn(CPU_ISA_GENERIC);
  cpu_gemm_force_isa(-1);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_conv), cmocka_unit_test(test_forward),
                                     cmocka_unit_test(test_group), cmocka_unit_test(test_bn)};
  const int failed = cmocka_run_group_tests(tests, NULL, NULL);
  scratch_free(); /* the kernels take their scratch from the caller: none here */
  return failed;
}
