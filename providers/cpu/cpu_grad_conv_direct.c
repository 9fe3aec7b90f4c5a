/* cpu_grad_conv_direct.c — ConvGrad's direct float32 AVX-512 kernels for
 * small 2-D convolutions with unit strides (see cpu_grad_conv_direct.h).
 *
 * Both kernels first copy their windowed operand into zero-padded planes
 * (X for dW, dY for dX), so that every tap of every output position reads
 * memory inside the planes and the register tiles need no bounds: a row's
 * last partial vector of 16 columns is a masked load and store, whose
 * masked-off lanes read nothing. Rows, channels and taps past the operand's
 * end inside a tile repeat the last valid one and are not stored. */
#include "cpu_grad_conv_direct.h"

#include <stdint.h>
#include <string.h>

#include "cpu_gemm.h"

enum {
  DW_MB = 8, /* dW tile: output channels */
  DW_TB = 3, /* dW tile: taps of one kernel row */
  DX_RB = 3, /* dX tile: rows x input channels, 3 x 8 or 4 x 4 */
  DX_CB = 8,
  DX_RB4 = 4,
  DX_CB4 = 4,
  LANES = 16
};

bool cpu_grad_conv_direct_available(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  return cpu_gemm_isa_level() == CPU_ISA_AVX512;
#else
  return false;
#endif
}

static size_t min_z(size_t a, size_t b) {
  return a < b ? a : b;
}

static size_t ceil_div(size_t a, size_t b) {
  return a / b + (a % b != 0);
}

/* floats of planes (count) x rows x cols, false on overflow */
static bool planes_floats(size_t count, size_t rows, size_t cols, size_t* out) {
  return cpu_mul_size(count, rows, out) && cpu_mul_size(*out, cols, out) &&
         *out < SIZE_MAX / sizeof(float) / 2;
}

bool cpu_grad_conv_dw_scratch(const CpuGradConv2d* g, size_t* floats) {
  size_t planes;
  return cpu_mul_size(g->n, g->c, &planes) &&
         planes_floats(planes, g->oh + g->kh - 1, g->ow + g->kw - 1, floats);
}

bool cpu_grad_conv_dx_scratch(const CpuGradConv2d* g, size_t* floats) {
  size_t planes, wt;
  const size_t cp = ceil_div(g->c, DX_CB) * DX_CB;
  return cpu_mul_size(g->n, g->m, &planes) &&
         planes_floats(planes, g->ih + g->kh - 1, g->iw + g->kw - 1, floats) &&
         planes_floats(g->m, g->kh * g->kw, cp, &wt) && cpu_add_size(*floats, wt, floats) &&
         *floats < SIZE_MAX / sizeof(float) / 2;
}

/* ------------------------------------------------------------------------ */
/* Zero-padded planes                                                       */
/* ------------------------------------------------------------------------ */

/* dst plane p (rows x cols) holds src plane p (sh x sw) moved down by dr
 * rows and right by dc columns (either may be negative: leading rows or
 * columns of src fall outside), zeros elsewhere. Source plane p is at
 * src + (p / per_n) * src_n + (p % per_n) * sh * sw: per_n planes of an
 * image, src_n floats from one image to the next. */
typedef struct PadJob {
  const float* src;
  float* dst;
  size_t per_n, src_n, sh, sw, rows, cols;
  ptrdiff_t dr, dc;
  CpuStop* stop;
} PadJob;

static void pad_planes(void* user, size_t begin, size_t end) {
  const PadJob* j = user;
  size_t acc = 0;
  /* the columns q with q - dc in [0, sw), the same for every row */
  const ptrdiff_t q0 = j->dc > 0 ? j->dc : 0;
  ptrdiff_t q1 = j->dc + (ptrdiff_t)j->sw;
  if (q1 > (ptrdiff_t)j->cols) q1 = (ptrdiff_t)j->cols;
  for (size_t p = begin; p < end; p++) {
    if (cpu_stop_poll(j->stop, &acc, j->rows * j->cols + 1)) return;
    const float* s = j->src + p / j->per_n * j->src_n + p % j->per_n * j->sh * j->sw;
    float* d = j->dst + p * j->rows * j->cols;
    for (size_t r = 0; r < j->rows; r++, d += j->cols) {
      const ptrdiff_t sr = (ptrdiff_t)r - j->dr;
      if (sr < 0 || sr >= (ptrdiff_t)j->sh || q0 >= q1) {
        memset(d, 0, j->cols * sizeof(float));
        continue;
      }
      memset(d, 0, (size_t)q0 * sizeof(float));
      memcpy(d + q0, s + (size_t)sr * j->sw + (size_t)(q0 - j->dc),
             (size_t)(q1 - q0) * sizeof(float));
      memset(d + q1, 0, (j->cols - (size_t)q1) * sizeof(float));
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))

static __mmask16 lane_mask(size_t valid) {
  return (__mmask16)(valid >= LANES ? 0xFFFFu : (1u << valid) - 1u);
}

/* ------------------------------------------------------------------------ */
/* dW                                                                       */
/* ------------------------------------------------------------------------ */

typedef struct DwJob {
  const CpuGradConv2d* g;
  const float* xp; /* (n, c) planes of hp x wp */
  const float* dy;
  float* dw;
  size_t hp, wp, kblocks, mblocks;
  CpuStop* stop;
} DwJob;

/* Item (c, ky, tap block, channel block): dW[m0 .. m0 + 8, c, ky, kx0 ..
 * kx0 + 3]. Lane l of acc[i][t] sums dY[n, m0 + i, oy, x0 + l] .
 * Xp[n, c, oy + ky, x0 + l + kx0 + t] over n, oy and the row's chunks x0. */
AVX512 static void dw_item(const DwJob* j, size_t item) {
  const CpuGradConv2d* g = j->g;
  const size_t mb = item % j->mblocks, kb = item / j->mblocks % j->kblocks;
  const size_t ky = item / j->mblocks / j->kblocks % g->kh;
  const size_t c = item / j->mblocks / j->kblocks / g->kh;
  const size_t m0 = mb * DW_MB, mv = min_z(DW_MB, g->m - m0);
  const size_t kx0 = kb * DW_TB, tv = min_z(DW_TB, g->kw - kx0);
  const size_t os = g->oh * g->ow;
  size_t yo[DW_MB], xo[DW_TB];
  for (size_t i = 0; i < DW_MB; i++)
    yo[i] = (m0 + min_z(i, mv - 1)) * os;
  for (size_t t = 0; t < DW_TB; t++)
    xo[t] = kx0 + min_z(t, tv - 1);
  __m512 acc[DW_MB][DW_TB];
#pragma GCC unroll 8
  for (size_t i = 0; i < DW_MB; i++)
#pragma GCC unroll 3
    for (size_t t = 0; t < DW_TB; t++)
      acc[i][t] = _mm512_setzero_ps();
  for (size_t n = 0; n < g->n; n++) {
    const float* xr = j->xp + ((n * g->c + c) * j->hp + ky) * j->wp;
    const float* yr = j->dy + n * g->yc * os;
    for (size_t oy = 0; oy < g->oh; oy++, xr += j->wp, yr += g->ow)
      for (size_t x0 = 0; x0 < g->ow; x0 += LANES) {
        const __mmask16 k = lane_mask(g->ow - x0);
        __m512 xv[DW_TB];
#pragma GCC unroll 3
        for (size_t t = 0; t < DW_TB; t++)
          xv[t] = _mm512_maskz_loadu_ps(k, xr + x0 + xo[t]);
#pragma GCC unroll 8
        for (size_t i = 0; i < DW_MB; i++) {
          const __m512 d = _mm512_maskz_loadu_ps(k, yr + yo[i] + x0);
#pragma GCC unroll 3
          for (size_t t = 0; t < DW_TB; t++)
            acc[i][t] = _mm512_fmadd_ps(d, xv[t], acc[i][t]);
        }
      }
  }
  /* constant indices into acc (unrolled loops) keep it in registers */
  float* dw = j->dw + (m0 * g->c + c) * g->kh * g->kw + ky * g->kw + kx0;
  const size_t mstep = g->c * g->kh * g->kw;
#pragma GCC unroll 8
  for (size_t i = 0; i < DW_MB; i++)
#pragma GCC unroll 3
    for (size_t t = 0; t < DW_TB; t++)
      if (i < mv && t < tv) dw[i * mstep + t] = _mm512_reduce_add_ps(acc[i][t]);
}

static void dw_items(void* user, size_t begin, size_t end) {
  const DwJob* j = user;
  size_t acc = 0;
  for (size_t i = begin; i < end; i++) {
    if (cpu_stop_poll(j->stop, &acc, j->g->n * j->g->oh * j->g->ow + 1)) return;
    dw_item(j, i);
  }
}

/* ------------------------------------------------------------------------ */
/* dX                                                                       */
/* ------------------------------------------------------------------------ */

typedef struct DxJob {
  const CpuGradConv2d* g;
  const float* dp; /* (n, m) planes of hd x wd */
  const float* wt; /* (m, tap, cp): W[m, c, tap], zeros for c >= g->c */
  float* dx;
  size_t hd, wd, cp, cblocks, rblocks, xblocks;
  size_t rb; /* the tile: DX_RB x DX_CB or DX_RB4 x DX_CB4 */
  CpuStop* stop;
} DxJob;

/* Item (n, channel block, row block, column chunk) of an RB x CB tile:
 * dX[n, c0 .. c0 + CB, iy0 .. iy0 + RB, x0 .. x0 + 16] = sum over m, ky, kx
 * of Wt[m, tap, c] . Dp[n, m, iy + kh - 1 - ky, ix + kw - 1 - kx]. RB and CB
 * are constants where it is inlined (dx_item_3x8, dx_item_4x4), so the
 * accumulators stay in registers. */
AVX512 static inline __attribute__((always_inline)) void dx_tile(const DxJob* j, size_t item,
                                                                 const size_t RB, const size_t CB) {
  const CpuGradConv2d* g = j->g;
  const size_t xb = item % j->xblocks, rb = item / j->xblocks % j->rblocks;
  const size_t cb = item / j->xblocks / j->rblocks % j->cblocks;
  const size_t n = item / j->xblocks / j->rblocks / j->cblocks;
  const size_t c0 = cb * CB, cv = min_z(CB, g->c - c0);
  const size_t iy0 = rb * RB, rv = min_z(RB, g->ih - iy0), x0 = xb * LANES;
  const __mmask16 k = lane_mask(g->iw - x0);
  const size_t plane = j->hd * j->wd;
  size_t ro[DX_RB4];
#pragma GCC unroll 4
  for (size_t r = 0; r < RB; r++)
    ro[r] = min_z(r, rv - 1) * j->wd;
  __m512 acc[DX_RB4][DX_CB];
#pragma GCC unroll 4
  for (size_t r = 0; r < RB; r++)
#pragma GCC unroll 8
    for (size_t i = 0; i < CB; i++)
      acc[r][i] = _mm512_setzero_ps();
  const float* dpm = j->dp + n * g->m * plane + (iy0 + g->kh - 1) * j->wd + x0 + g->kw - 1;
  const float* wv = j->wt + c0;
  for (size_t m = 0; m < g->m; m++, dpm += plane)
    for (size_t ky = 0; ky < g->kh; ky++) {
      const float* d = dpm - ky * j->wd;
      for (size_t kx = 0; kx < g->kw; kx++, wv += j->cp, d--) {
        __m512 dv[DX_RB4];
#pragma GCC unroll 4
        for (size_t r = 0; r < RB; r++)
          dv[r] = _mm512_maskz_loadu_ps(k, d + ro[r]);
#pragma GCC unroll 8
        for (size_t i = 0; i < CB; i++) {
          const __m512 b = _mm512_set1_ps(wv[i]);
#pragma GCC unroll 4
          for (size_t r = 0; r < RB; r++)
            acc[r][i] = _mm512_fmadd_ps(dv[r], b, acc[r][i]);
        }
      }
    }
  /* constant indices into acc (unrolled loops) keep it in registers */
  float* dx = j->dx + ((n * g->xc + c0) * g->ih + iy0) * g->iw + x0;
  const size_t cstep = g->ih * g->iw;
#pragma GCC unroll 8
  for (size_t i = 0; i < CB; i++)
#pragma GCC unroll 4
    for (size_t r = 0; r < RB; r++)
      if (i < cv && r < rv) _mm512_mask_storeu_ps(dx + i * cstep + r * g->iw, k, acc[r][i]);
}

AVX512 static void dx_item_3x8(const DxJob* j, size_t item) {
  dx_tile(j, item, DX_RB, DX_CB);
}

AVX512 static void dx_item_4x4(const DxJob* j, size_t item) {
  dx_tile(j, item, DX_RB4, DX_CB4);
}

static void dx_items(void* user, size_t begin, size_t end) {
  const DxJob* j = user;
  size_t acc = 0;
  for (size_t i = begin; i < end; i++) {
    if (cpu_stop_poll(j->stop, &acc, j->g->m * j->g->kh * j->g->kw * j->rb * LANES + 1)) return;
    if (j->rb == DX_RB4)
      dx_item_4x4(j, i);
    else
      dx_item_3x8(j, i);
  }
}
#endif /* x86-64 */

void cpu_grad_conv_dw(OnyxThreadPool* pool, const CpuGradConv2d* g, const float* x, const float* dy,
                      float* dw, float* scratch, CpuStop* stop) {
#if defined(__x86_64__) && defined(__GNUC__)
  const size_t hp = g->oh + g->kh - 1, wp = g->ow + g->kw - 1;
  PadJob pj = {x,     scratch, g->c, g->xc * g->ih * g->iw, g->ih,
               g->iw, hp,      wp,   (ptrdiff_t)g->pt,      (ptrdiff_t)g->pl,
               stop};
  cpu_host->parallel_for(pool, g->n * g->c, pad_planes, &pj);
  if (cpu_stop_seen(stop)) return;
  DwJob j = {g, scratch, dy, dw, hp, wp, ceil_div(g->kw, DW_TB), ceil_div(g->m, DW_MB), stop};
  cpu_host->parallel_for(pool, g->c * g->kh * j.kblocks * j.mblocks, dw_items, &j);
#else
  (void)pool, (void)g, (void)x, (void)dy, (void)dw, (void)scratch, (void)stop;
#endif
}

void cpu_grad_conv_dx(OnyxThreadPool* pool, const CpuGradConv2d* g, const float* dy, const float* w,
                      float* dx, float* scratch, CpuStop* stop) {
#if defined(__x86_64__) && defined(__GNUC__)
  const size_t hd = g->ih + g->kh - 1, wd = g->iw + g->kw - 1, kk = g->kh * g->kw;
  const size_t cp = ceil_div(g->c, DX_CB) * DX_CB;
  float* wt = scratch + g->n * g->m * hd * wd;
  for (size_t m = 0; m < g->m; m++)
    for (size_t t = 0; t < kk; t++) {
      float* d = wt + (m * kk + t) * cp;
      for (size_t c = 0; c < cp; c++)
        d[c] = c < g->c ? w[(m * g->c + c) * kk + t] : 0.0f;
    }
  /* Dp[r][q] = dY[r - (kh - 1 - pt)][q - (kw - 1 - pl)] */
  PadJob pj = {dy,
               scratch,
               g->m,
               g->yc * g->oh * g->ow,
               g->oh,
               g->ow,
               hd,
               wd,
               (ptrdiff_t)g->kh - 1 - (ptrdiff_t)g->pt,
               (ptrdiff_t)g->kw - 1 - (ptrdiff_t)g->pl,
               stop};
  cpu_host->parallel_for(pool, g->n * g->m, pad_planes, &pj);
  if (cpu_stop_seen(stop)) return;
  /* the tile computing fewer rows x channels (3 x 8 on a tie: fewer loads
   * per FMA) */
  const size_t work3 = ceil_div(g->ih, DX_RB) * DX_RB * (cp / DX_CB) * DX_CB;
  const size_t work4 = ceil_div(g->ih, DX_RB4) * DX_RB4 * ceil_div(g->c, DX_CB4) * DX_CB4;
  const size_t rb = work4 < work3 ? DX_RB4 : DX_RB, cb = rb == DX_RB4 ? DX_CB4 : DX_CB;
  DxJob j = {g,
             scratch,
             wt,
             dx,
             hd,
             wd,
             cp,
             ceil_div(g->c, cb),
             ceil_div(g->ih, rb),
             ceil_div(g->iw, LANES),
             rb,
             stop};
  cpu_host->parallel_for(pool, g->n * j.cblocks * j.rblocks * j.xblocks, dx_items, &j);
#else
  (void)pool, (void)g, (void)dy, (void)w, (void)dx, (void)scratch, (void)stop;
#endif
}

/* The forward conv as dX's: dX's "dY" is X (channels m' = c, planes ih x
 * iw), its "dX" is Y (channels c' = m, planes oh x ow), its pads pt' =
 * kh - 1 - pt so that its padded copy of X is shifted by pt, and its W'
 * (c, m, tap) = W (m, c, kh kw - 1 - tap). */
static bool fwd_geometry(const CpuGradConv2d* g, CpuGradConv2d* t) {
  if (g->pt > g->kh - 1 || g->pl > g->kw - 1) return false;
  *t = (CpuGradConv2d){.n = g->n,
                       .c = g->m,
                       .m = g->c,
                       .xc = g->yc,
                       .yc = g->xc,
                       .ih = g->oh,
                       .iw = g->ow,
                       .oh = g->ih,
                       .ow = g->iw,
                       .kh = g->kh,
                       .kw = g->kw,
                       .pt = g->kh - 1 - g->pt,
                       .pl = g->kw - 1 - g->pl};
  return true;
}

bool cpu_grad_conv_fwd_scratch(const CpuGradConv2d* g, size_t* floats) {
  CpuGradConv2d t;
  size_t w2;
  return fwd_geometry(g, &t) && cpu_grad_conv_dx_scratch(&t, floats) &&
         planes_floats(g->m, g->c, g->kh * g->kw, &w2) && cpu_add_size(*floats, w2, floats) &&
         *floats < SIZE_MAX / sizeof(float) / 2;
}

void cpu_grad_conv_fwd(OnyxThreadPool* pool, const CpuGradConv2d* g, const float* x, const float* w,
                       float* y, float* scratch, CpuStop* stop) {
  CpuGradConv2d t;
  size_t fx;
  if (!fwd_geometry(g, &t) || !cpu_grad_conv_dx_scratch(&t, &fx)) return;
  const size_t kk = g->kh * g->kw;
  float* w2 = scratch + fx;
  for (size_t m = 0; m < g->m; m++)
    for (size_t c = 0; c < g->c; c++)
      for (size_t q = 0; q < kk; q++)
        w2[(c * g->m + m) * kk + q] = w[(m * g->c + c) * kk + kk - 1 - q];
  cpu_grad_conv_dx(pool, &t, x, w2, y, scratch, stop);
}
