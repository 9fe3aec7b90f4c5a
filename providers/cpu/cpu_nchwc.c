/* cpu_nchwc.c — see cpu_nchwc.h. The vector bodies are compiled for their
 * ISA with target attributes and called only after a cpuid check, so the
 * library still runs on machines without AVX2. */
#include "cpu_nchwc.h"

#include "cpu_gemm.h"
#include "cpu_nn.h"
#include "cpu_util.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define NC_X86 1
#include <immintrin.h>
#else
#define NC_X86 0
#endif

/* ------------------------------------------------------------------------ */
/* Path choice                                                               */
/* ------------------------------------------------------------------------ */

static _Atomic int forced_path = -1;

static int machine_path(void) {
  static _Atomic int cached = -1;
  int p = cached;
  if (p < 0) {
    p = CPU_NCHWC_SCALAR;
#if NC_X86
    if (__builtin_cpu_supports("avx512f"))
      p = CPU_NCHWC_AVX512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      p = CPU_NCHWC_AVX2;
    const char* cap = getenv("ONYX_CPU_ISA");
    if (cap && !strcmp(cap, "generic")) p = CPU_NCHWC_SCALAR;
    if (cap && !strcmp(cap, "avx2") && p > CPU_NCHWC_AVX2) p = CPU_NCHWC_AVX2;
#endif
    cached = p;
  }
  return p;
}

int cpu_nchwc_path(void) {
  const int m = machine_path(), f = forced_path;
  return f >= 0 && f < m ? f : m;
}

void cpu_nchwc_force_path(int path) {
  forced_path = path;
}

/* The vector body a run of this block takes (CPU_NCHWC_SCALAR: none). */
static int block_path(size_t block) {
  const int p = cpu_nchwc_path();
  if (block == 16 && p >= CPU_NCHWC_AVX512) return CPU_NCHWC_AVX512;
  if (block == 8 && p >= CPU_NCHWC_AVX2) return CPU_NCHWC_AVX2;
  return CPU_NCHWC_SCALAR;
}

/* ------------------------------------------------------------------------ */
/* Packing and reorders                                                      */
/* ------------------------------------------------------------------------ */

static size_t blocks_of(size_t c, size_t block) {
  return c / block + (c % block != 0);
}

size_t cpu_nchwc_pointwise_floats(size_t m, size_t c, size_t block) {
  size_t a, b;
  return cpu_mul_size(blocks_of(m, block), c, &a) && cpu_mul_size(a, block, &b) ? b : 0;
}

size_t cpu_nchwc_depthwise_floats(size_t c, size_t kh, size_t kw, size_t block) {
  size_t a, b, t;
  return cpu_mul_size(kh, kw, &t) && cpu_mul_size(blocks_of(c, block), t, &a) &&
                 cpu_mul_size(a, block, &b)
             ? b
             : 0;
}

void cpu_nchwc_pack_pointwise(const float* w, size_t m, size_t c, size_t block, float* out) {
  const size_t mb = blocks_of(m, block);
  for (size_t ob = 0; ob < mb; ob++)
    for (size_t ci = 0; ci < c; ci++)
      for (size_t j = 0; j < block; j++) {
        const size_t co = ob * block + j;
        out[(ob * c + ci) * block + j] = co < m ? w[co * c + ci] : 0.0f;
      }
}

size_t cpu_nchwc_full_floats(size_t m, size_t c, size_t kh, size_t kw, size_t block) {
  size_t t, a;
  return cpu_mul_size(kh, kw, &t) && cpu_mul_size(c, t, &a)
             ? cpu_nchwc_pointwise_floats(m, a, block)
             : 0;
}

void cpu_nchwc_pack_full(const float* w, size_t m, size_t c, size_t kh, size_t kw, size_t block,
                         float* out) {
  cpu_nchwc_pack_pointwise(w, m, c * kh * kw, block, out);
}

void cpu_nchwc_pack_depthwise(const float* w, size_t c, size_t kh, size_t kw, size_t block,
                              float* out) {
  const size_t cb = blocks_of(c, block), taps = kh * kw;
  for (size_t b = 0; b < cb; b++)
    for (size_t t = 0; t < taps; t++)
      for (size_t j = 0; j < block; j++) {
        const size_t ch = b * block + j;
        out[(b * taps + t) * block + j] = ch < c ? w[ch * taps + t] : 0.0f;
      }
}

/* Pixels per reorder tile: the tile's blocked rows (64 x 64 bytes at most)
 * stay in L1 while the block's channels are read into them, one
 * contiguous run of each channel at a time. */
#define REORDER_TILE 64

void cpu_nchwc_reorder_input(const float* x, float* y, size_t n, size_t c, size_t hw,
                             size_t block) {
  const size_t cb = blocks_of(c, block);
  for (size_t i = 0; i < n; i++)
    for (size_t b = 0; b < cb; b++) {
      float* yb = y + (i * cb + b) * hw * block;
      for (size_t p0 = 0; p0 < hw; p0 += REORDER_TILE) {
        const size_t p1 = p0 + REORDER_TILE < hw ? p0 + REORDER_TILE : hw;
        for (size_t j = 0; j < block; j++) {
          const size_t ch = b * block + j;
          if (ch >= c) {
            for (size_t p = p0; p < p1; p++)
              yb[p * block + j] = 0.0f;
            continue;
          }
          const float* xc = x + (i * c + ch) * hw;
          for (size_t p = p0; p < p1; p++)
            yb[p * block + j] = xc[p];
        }
      }
    }
}

void cpu_nchwc_reorder_output(const float* x, float* y, size_t n, size_t c, size_t cb, size_t hw,
                              size_t block) {
  for (size_t i = 0; i < n; i++)
    for (size_t b = 0; b < cb; b++)
      for (size_t p0 = 0; p0 < hw; p0 += REORDER_TILE) {
        const size_t p1 = p0 + REORDER_TILE < hw ? p0 + REORDER_TILE : hw;
        for (size_t ch = b * block; ch < c && ch < (b + 1) * block; ch++) {
          const float* xb = x + (i * cb + b) * hw * block + ch % block;
          float* yc = y + (i * c + ch) * hw;
          for (size_t p = p0; p < p1; p++)
            yc[p] = xb[p * block];
        }
      }
}

#if NC_X86
/* The global average and the gate's scale on one register of lanes: the
 * sums in double, pixel by pixel, as the scalar loops add them. */
__attribute__((target("avx512f"))) static void gap16(const float* x, float* y, size_t nb,
                                                     size_t hw) {
  for (size_t i = 0; i < nb; i++) {
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    const float* xb = x + i * hw * 16;
    for (size_t p = 0; p < hw; p++) {
      const __m512 v = _mm512_loadu_ps(xb + p * 16);
      lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
      hi = _mm512_add_pd(
          hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
    }
    const __m512d d = _mm512_set1_pd((double)hw);
    _mm256_storeu_ps(y + i * 16, _mm512_cvtpd_ps(_mm512_div_pd(lo, d)));
    _mm256_storeu_ps(y + i * 16 + 8, _mm512_cvtpd_ps(_mm512_div_pd(hi, d)));
  }
}
__attribute__((target("avx2,fma"))) static void gap8(const float* x, float* y, size_t nb,
                                                     size_t hw) {
  for (size_t i = 0; i < nb; i++) {
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    const float* xb = x + i * hw * 8;
    for (size_t p = 0; p < hw; p++) {
      const __m256 v = _mm256_loadu_ps(xb + p * 8);
      lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
      hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    }
    const __m256d d = _mm256_set1_pd((double)hw);
    _mm_storeu_ps(y + i * 8, _mm256_cvtpd_ps(_mm256_div_pd(lo, d)));
    _mm_storeu_ps(y + i * 8 + 4, _mm256_cvtpd_ps(_mm256_div_pd(hi, d)));
  }
}
__attribute__((target("avx512f"))) static void scale16(const float* x, const float* s, float* y,
                                                       size_t nb, size_t hw) {
  for (size_t i = 0; i < nb; i++) {
    const __m512 sv = _mm512_loadu_ps(s + i * 16);
    for (size_t p = 0; p < hw; p++)
      _mm512_storeu_ps(y + (i * hw + p) * 16,
                       _mm512_mul_ps(_mm512_loadu_ps(x + (i * hw + p) * 16), sv));
  }
}
__attribute__((target("avx2,fma"))) static void scale8(const float* x, const float* s, float* y,
                                                       size_t nb, size_t hw) {
  for (size_t i = 0; i < nb; i++) {
    const __m256 sv = _mm256_loadu_ps(s + i * 8);
    for (size_t p = 0; p < hw; p++)
      _mm256_storeu_ps(y + (i * hw + p) * 8,
                       _mm256_mul_ps(_mm256_loadu_ps(x + (i * hw + p) * 8), sv));
  }
}
#endif

void cpu_nchwc_global_average(const float* x, float* y, size_t n, size_t cb, size_t hw,
                              size_t block) {
#if NC_X86
  if (hw && block_path(block) == CPU_NCHWC_AVX512) {
    gap16(x, y, n * cb, hw);
    return;
  }
  if (hw && block_path(block) == CPU_NCHWC_AVX2) {
    gap8(x, y, n * cb, hw);
    return;
  }
#endif
  double acc[16];
  for (size_t i = 0; i < n * cb; i++) {
    const float* xb = x + i * hw * block;
    for (size_t j = 0; j < block; j++)
      acc[j] = 0.0;
    for (size_t p = 0; p < hw; p++)
      for (size_t j = 0; j < block; j++)
        acc[j] += xb[p * block + j];
    for (size_t j = 0; j < block; j++)
      y[i * block + j] = hw ? (float)(acc[j] / (double)hw) : NAN;
  }
}

void cpu_nchwc_scale(const float* x, const float* s, float* y, size_t n, size_t cb, size_t hw,
                     size_t block) {
#if NC_X86
  if (block_path(block) == CPU_NCHWC_AVX512) {
    scale16(x, s, y, n * cb, hw);
    return;
  }
  if (block_path(block) == CPU_NCHWC_AVX2) {
    scale8(x, s, y, n * cb, hw);
    return;
  }
#endif
  for (size_t i = 0; i < n * cb; i++) {
    const float* sb = s + i * block;
    const float* xb = x + i * hw * block;
    float* yb = y + i * hw * block;
    for (size_t p = 0; p < hw; p++)
      for (size_t j = 0; j < block; j++)
        yb[p * block + j] = xb[p * block + j] * sb[j];
  }
}

/* ------------------------------------------------------------------------ */
/* Epilogue                                                                  */
/* ------------------------------------------------------------------------ */

/* Z (added when given) and the activation over `count` stored floats. */
static void nc_epilogue(const CpuNchwcConv* p, float* y, const float* z, size_t count) {
  if (z)
    for (size_t i = 0; i < count; i++)
      y[i] += z[i];
  if (p->act != CPU_ACT_NONE) cpu_act_row(y, y, count, p->act, p->alpha, p->lo, p->hi);
}

/* ------------------------------------------------------------------------ */
/* Scalar reference path                                                     */
/* ------------------------------------------------------------------------ */

/* Pointwise: pixels [p0, p0 + np) of output block ob of image i. */
static void pw_scalar(const CpuNchwcConv* p, size_t i, size_t ob, size_t p0, size_t np) {
  const size_t B = p->block, hw = p->h * p->w;
  float* y = p->y + ((i * p->mb + ob) * hw + p0) * B;
  for (size_t q = 0; q < np; q++)
    for (size_t j = 0; j < B; j++) {
      float acc = p->bias ? p->bias[ob * B + j] : 0.0f;
      for (size_t ci = 0; ci < p->c; ci++)
        acc += p->x[((i * p->cb + ci / B) * hw + p0 + q) * B + ci % B] *
               p->wp[(ob * p->c + ci) * B + j];
      y[q * B + j] = acc;
    }
}

/* Depthwise: output row oy of channel block b of image i. */
static void dw_scalar(const CpuNchwcConv* p, size_t i, size_t b, size_t oy) {
  const size_t B = p->block, taps = p->kh * p->kw;
  const float* xb = p->x + (i * p->cb + b) * p->h * p->w * B;
  const float* wb = p->wp + b * taps * B;
  float* y = p->y + ((i * p->mb + b) * p->oh + oy) * p->ow * B;
  const int64_t iy0 = (int64_t)(oy * p->sh) - (int64_t)p->pt;
  for (size_t ox = 0; ox < p->ow; ox++) {
    const int64_t ix0 = (int64_t)(ox * p->sw) - (int64_t)p->pl;
    for (size_t j = 0; j < B; j++) {
      float acc = p->bias ? p->bias[b * B + j] : 0.0f;
      for (size_t u = 0; u < p->kh; u++) {
        const int64_t iy = iy0 + (int64_t)(u * p->dh);
        if (iy < 0 || iy >= (int64_t)p->h) continue;
        for (size_t v = 0; v < p->kw; v++) {
          const int64_t ix = ix0 + (int64_t)(v * p->dw);
          if (ix < 0 || ix >= (int64_t)p->w) continue;
          acc += xb[((size_t)iy * p->w + (size_t)ix) * B + j] * wb[(u * p->kw + v) * B + j];
        }
      }
      y[ox * B + j] = acc;
    }
  }
}

/* Full: X's channel ci of image i, with the strides of its rows and
 * columns (NCHW or blocked). */
static inline const float* full_plane(const CpuNchwcConv* p, size_t i, size_t ci, size_t* rs,
                                      size_t* cs) {
  if (p->nchw_in) {
    *rs = p->w, *cs = 1;
    return p->x + (i * p->c + ci) * p->h * p->w;
  }
  *rs = p->w * p->block, *cs = p->block;
  return p->x + (i * p->cb + ci / p->block) * p->h * p->w * p->block + ci % p->block;
}

/* Full: output row oy of output block ob of image i. */
static void full_scalar(const CpuNchwcConv* p, size_t i, size_t ob, size_t oy) {
  const size_t B = p->block, taps = p->kh * p->kw;
  float* y = p->y + ((i * p->mb + ob) * p->oh + oy) * p->ow * B;
  const int64_t iy0 = (int64_t)(oy * p->sh) - (int64_t)p->pt;
  for (size_t ox = 0; ox < p->ow; ox++) {
    const int64_t ix0 = (int64_t)(ox * p->sw) - (int64_t)p->pl;
    for (size_t j = 0; j < B; j++) {
      float acc = p->bias ? p->bias[ob * B + j] : 0.0f;
      for (size_t ci = 0; ci < p->c; ci++) {
        size_t rs, cs;
        const float* xc = full_plane(p, i, ci, &rs, &cs);
        const float* wc = p->wp + (ob * p->c + ci) * taps * B;
        for (size_t u = 0; u < p->kh; u++) {
          const int64_t iy = iy0 + (int64_t)(u * p->dh);
          if (iy < 0 || iy >= (int64_t)p->h) continue;
          for (size_t v = 0; v < p->kw; v++) {
            const int64_t ix = ix0 + (int64_t)(v * p->dw);
            if (ix < 0 || ix >= (int64_t)p->w) continue;
            acc += xc[(size_t)iy * rs + (size_t)ix * cs] * wc[(u * p->kw + v) * B + j];
          }
        }
      }
      y[ox * B + j] = acc;
    }
  }
}

/* ------------------------------------------------------------------------ */
/* Vector paths                                                              */
/* ------------------------------------------------------------------------ */

#if NC_X86
/* epi: Z added and Relu / Clip / LeakyRelu applied in registers (max, then
 * min, each returning its second operand, the value, on NaN, so NaN is
 * kept); the row activations run over the stored row or tile while it is
 * in cache (cpu_act_row). pw_tile: np pixels (1..6) by nob output blocks
 * (1 or 2) from pixel p0 and block ob: accumulators start at the bias; per
 * input channel, nob weight vectors and np broadcasts of the pixels' input
 * values. DW_BODY: one output row of one channel block, four pixels at
 * a time where every tap lies inside the row, one at a time with per-tap
 * bounds elsewhere. */
#define NC_DEFINE(SFX, TGT, V, B, LOAD, STORE, SET1, FMA, MAX, MIN, ZERO, ADD, MUL)                \
  __attribute__((target(TGT), always_inline)) static inline V epi_##SFX(const CpuNchwcConv* p,     \
                                                                        V v, const float* zp) {    \
    if (zp) v = ADD(v, LOAD(zp));                                                                  \
    switch (p->act) {                                                                              \
    case CPU_ACT_RELU:                                                                             \
      return MAX(ZERO(), v);                                                                       \
    case CPU_ACT_CLIP:                                                                             \
      return MIN(SET1(p->hi), MAX(SET1(p->lo), v));                                                \
    case CPU_ACT_LEAKY_RELU:                                                                       \
      return ADD(MAX(ZERO(), v), MUL(SET1(p->alpha), MIN(ZERO(), v)));                             \
    default:                                                                                       \
      return v;                                                                                    \
    }                                                                                              \
  }                                                                                                \
  __attribute__((target(TGT), always_inline)) static inline void pw_tile_##SFX(                    \
      const CpuNchwcConv* p, size_t i, size_t ob, size_t p0, const int np, const int nob) {        \
    const size_t hw = p->h * p->w, c = p->c;                                                       \
    V acc[2][6];                                                                                   \
    _Pragma("GCC unroll 2") for (int o = 0; o < nob; o++) {                                        \
      const V b0 = p->bias ? LOAD(p->bias + (ob + (size_t)o) * B) : ZERO();                        \
      _Pragma("GCC unroll 6") for (int q = 0; q < np; q++) acc[o][q] = b0;                         \
    }                                                                                              \
    const float* w0 = p->wp + ob * c * B;                                                          \
    for (size_t ib = 0; ib < p->cb; ib++) {                                                        \
      const float* xb = p->x + ((i * p->cb + ib) * hw + p0) * B;                                   \
      const size_t kmax = c - ib * B < B ? c - ib * B : B;                                         \
      const float* wk = w0 + ib * B * B;                                                           \
      for (size_t k = 0; k < kmax; k++, wk += B) {                                                 \
        const V wa = LOAD(wk);                                                                     \
        const V wb = nob > 1 ? LOAD(wk + c * B) : wa;                                              \
        _Pragma("GCC unroll 6") for (int q = 0; q < np; q++) {                                     \
          const V xv = SET1(xb[(size_t)q * B + k]);                                                \
          acc[0][q] = FMA(xv, wa, acc[0][q]);                                                      \
          if (nob > 1) acc[1][q] = FMA(xv, wb, acc[1][q]);                                         \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
    const int row = cpu_act_is_row(p->act);                                                        \
    _Pragma("GCC unroll 2") for (int o = 0; o < nob; o++) {                                        \
      const size_t off = ((i * p->mb + ob + (size_t)o) * hw + p0) * B;                             \
      float* y = p->y + off;                                                                       \
      const float* z = p->z ? p->z + off : NULL;                                                   \
      _Pragma("GCC unroll 6") for (int q = 0; q < np; q++)                                         \
          STORE(y + (size_t)q * B, epi_##SFX(p, acc[o][q], z ? z + (size_t)q * B : NULL));         \
      if (row) cpu_act_row(y, y, (size_t)np* B, p->act, p->alpha, p->lo, p->hi);                   \
    }                                                                                              \
  }                                                                                                \
  __attribute__((target(TGT))) static void pw_run_##SFX(                                           \
      const CpuNchwcConv* p, size_t i, size_t ob, size_t nob, size_t p0, size_t p1) {              \
    size_t q = p0;                                                                                 \
    if (nob == 2) {                                                                                \
      for (; q + 6 <= p1; q += 6)                                                                  \
        pw_tile_##SFX(p, i, ob, q, 6, 2);                                                          \
      for (; q < p1; q++)                                                                          \
        pw_tile_##SFX(p, i, ob, q, 1, 2);                                                          \
    } else {                                                                                       \
      for (; q + 6 <= p1; q += 6)                                                                  \
        pw_tile_##SFX(p, i, ob, q, 6, 1);                                                          \
      for (; q < p1; q++)                                                                          \
        pw_tile_##SFX(p, i, ob, q, 1, 1);                                                          \
    }                                                                                              \
  }                                                                                                \
  __attribute__((target(TGT))) static void dw_row_##SFX(const CpuNchwcConv* p, size_t i, size_t b, \
                                                        size_t oy) {                               \
    const size_t taps = p->kh * p->kw, W = p->w;                                                   \
    const float* xb = p->x + (i * p->cb + b) * p->h * W * B;                                       \
    const float* wb = p->wp + b * taps * B;                                                        \
    const size_t off = ((i * p->mb + b) * p->oh + oy) * p->ow * B;                                 \
    float* y = p->y + off;                                                                         \
    const float* z = p->z ? p->z + off : NULL;                                                     \
    const V bias = p->bias ? LOAD(p->bias + b * B) : ZERO();                                       \
    const int64_t iy0 = (int64_t)(oy * p->sh) - (int64_t)p->pt;                                    \
    size_t u0 = 0, u1 = 0;                                                                         \
    for (size_t u = 0; u < p->kh; u++) {                                                           \
      const int64_t iy = iy0 + (int64_t)(u * p->dh);                                               \
      if (iy < 0) u0 = u + 1;                                                                      \
      if (iy >= 0 && iy < (int64_t)p->h) u1 = u + 1;                                               \
    }                                                                                              \
    if (u1 < u0) u1 = u0;                                                                          \
    const int64_t span = (int64_t)((p->kw - 1) * p->dw);                                           \
    const int64_t sw = (int64_t)p->sw, pl = (int64_t)p->pl, dwv = (int64_t)p->dw;                  \
    size_t ox = 0;                                                                                 \
    while (ox < p->ow) {                                                                           \
      const int64_t ix0 = (int64_t)ox * sw - pl;                                                   \
      if (ox + 4 <= p->ow && ix0 >= 0 && ix0 + 3 * sw + span < (int64_t)W) {                       \
        V a0 = bias, a1 = bias, a2 = bias, a3 = bias;                                              \
        for (size_t u = u0; u < u1; u++) {                                                         \
          const float* row = xb + ((size_t)(iy0 + (int64_t)(u * p->dh)) * W) * B;                  \
          const float* wr = wb + u * p->kw * B;                                                    \
          for (size_t v = 0; v < p->kw; v++) {                                                     \
            const V wv = LOAD(wr + v * B);                                                         \
            const float* xp = row + (size_t)(ix0 + (int64_t)v * dwv) * B;                          \
            a0 = FMA(LOAD(xp), wv, a0);                                                            \
            a1 = FMA(LOAD(xp + (size_t)sw * B), wv, a1);                                           \
            a2 = FMA(LOAD(xp + 2 * (size_t)sw * B), wv, a2);                                       \
            a3 = FMA(LOAD(xp + 3 * (size_t)sw * B), wv, a3);                                       \
          }                                                                                        \
        }                                                                                          \
        STORE(y + ox * B, epi_##SFX(p, a0, z ? z + ox * B : NULL));                                \
        STORE(y + (ox + 1) * B, epi_##SFX(p, a1, z ? z + (ox + 1) * B : NULL));                    \
        STORE(y + (ox + 2) * B, epi_##SFX(p, a2, z ? z + (ox + 2) * B : NULL));                    \
        STORE(y + (ox + 3) * B, epi_##SFX(p, a3, z ? z + (ox + 3) * B : NULL));                    \
        ox += 4;                                                                                   \
        continue;                                                                                  \
      }                                                                                            \
      V a = bias;                                                                                  \
      for (size_t u = u0; u < u1; u++) {                                                           \
        const float* row = xb + ((size_t)(iy0 + (int64_t)(u * p->dh)) * W) * B;                    \
        const float* wr = wb + u * p->kw * B;                                                      \
        for (size_t v = 0; v < p->kw; v++) {                                                       \
          const int64_t ix = ix0 + (int64_t)v * dwv;                                               \
          if (ix < 0 || ix >= (int64_t)W) continue;                                                \
          a = FMA(LOAD(row + (size_t)ix * B), LOAD(wr + v * B), a);                                \
        }                                                                                          \
      }                                                                                            \
      STORE(y + ox * B, epi_##SFX(p, a, z ? z + ox * B : NULL));                                   \
      ox++;                                                                                        \
    }                                                                                              \
    if (cpu_act_is_row(p->act)) cpu_act_row(y, y, p->ow* B, p->act, p->alpha, p->lo, p->hi);       \
  }

/* full_row: one output row of nob (1 or 2) output blocks, six pixels at a
 * time where every tap lies inside the row, one at a time with per-tap
 * bounds elsewhere; each input value is broadcast once against the nob
 * weight vectors of its tap. */
#define NC_DEFINE_FULL(SFX, TGT, V, B, LOAD, STORE, SET1, FMA, ZERO)                               \
  __attribute__((target(TGT), always_inline)) static inline void full_body_##SFX(                  \
      const CpuNchwcConv* p, size_t i, size_t ob, size_t oy, const int nob) {                      \
    const size_t taps = p->kh * p->kw, W = p->w;                                                   \
    const int64_t iy0 = (int64_t)(oy * p->sh) - (int64_t)p->pt;                                    \
    size_t u0 = 0, u1 = 0;                                                                         \
    for (size_t u = 0; u < p->kh; u++) {                                                           \
      const int64_t iy = iy0 + (int64_t)(u * p->dh);                                               \
      if (iy < 0) u0 = u + 1;                                                                      \
      if (iy >= 0 && iy < (int64_t)p->h) u1 = u + 1;                                               \
    }                                                                                              \
    if (u1 < u0) u1 = u0;                                                                          \
    const int64_t span = (int64_t)((p->kw - 1) * p->dw);                                           \
    const int64_t sw = (int64_t)p->sw, pl = (int64_t)p->pl, dwv = (int64_t)p->dw;                  \
    V bias[2];                                                                                     \
    _Pragma("GCC unroll 2") for (int o = 0; o < nob; o++) bias[o] =                                \
        p->bias ? LOAD(p->bias + (ob + (size_t)o) * B) : ZERO();                                   \
    size_t ox = 0;                                                                                 \
    while (ox < p->ow) {                                                                           \
      const int64_t ix0 = (int64_t)ox * sw - pl;                                                   \
      const bool tile = ox + 6 <= p->ow && ix0 >= 0 && ix0 + 5 * sw + span < (int64_t)W;           \
      V a[2][6];                                                                                   \
      _Pragma("GCC unroll 2") for (int o = 0; o < nob; o++)                                        \
          _Pragma("GCC unroll 6") for (int q = 0; q < 6; q++) a[o][q] = bias[o];                   \
      for (size_t ci = 0; ci < p->c; ci++) {                                                       \
        size_t rs, cs;                                                                             \
        const float* xc = full_plane(p, i, ci, &rs, &cs);                                          \
        const float* wc = p->wp + (ob * p->c + ci) * taps * B;                                     \
        for (size_t u = u0; u < u1; u++) {                                                         \
          const float* row = xc + (size_t)(iy0 + (int64_t)(u * p->dh)) * rs;                       \
          const float* wr = wc + u * p->kw * B;                                                    \
          for (size_t v = 0; v < p->kw; v++) {                                                     \
            const V w0 = LOAD(wr + v * B);                                                         \
            const V w1 = nob > 1 ? LOAD(wr + v * B + p->c * taps * B) : w0;                        \
            const int64_t ix = ix0 + (int64_t)v * dwv;                                             \
            if (tile) {                                                                            \
              const float* xp = row + (size_t)ix * cs;                                             \
              const size_t st = (size_t)sw * cs;                                                   \
              _Pragma("GCC unroll 6") for (int q = 0; q < 6; q++) {                                \
                const V xv = SET1(xp[(size_t)q * st]);                                             \
                a[0][q] = FMA(xv, w0, a[0][q]);                                                    \
                if (nob > 1) a[1][q] = FMA(xv, w1, a[1][q]);                                       \
              }                                                                                    \
            } else if (ix >= 0 && ix < (int64_t)W) {                                               \
              const V xv = SET1(row[(size_t)ix * cs]);                                             \
              a[0][0] = FMA(xv, w0, a[0][0]);                                                      \
              if (nob > 1) a[1][0] = FMA(xv, w1, a[1][0]);                                         \
            }                                                                                      \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
      const size_t np = tile ? 6 : 1;                                                              \
      _Pragma("GCC unroll 2") for (int o = 0; o < nob; o++) {                                      \
        const size_t off = ((i * p->mb + ob + (size_t)o) * p->oh + oy) * p->ow * B;                \
        for (size_t q = 0; q < np; q++)                                                            \
          STORE(p->y + off + (ox + q) * B,                                                         \
                epi_##SFX(p, a[o][q], p->z ? p->z + off + (ox + q) * B : NULL));                   \
      }                                                                                            \
      ox += np;                                                                                    \
    }                                                                                              \
    if (cpu_act_is_row(p->act))                                                                    \
      for (int o = 0; o < nob; o++) {                                                              \
        float* y = p->y + ((i * p->mb + ob + (size_t)o) * p->oh + oy) * p->ow * B;                 \
        cpu_act_row(y, y, p->ow* B, p->act, p->alpha, p->lo, p->hi);                               \
      }                                                                                            \
  }                                                                                                \
  __attribute__((target(TGT))) static void full_row_##SFX(const CpuNchwcConv* p, size_t i,         \
                                                          size_t ob, size_t nob, size_t oy) {      \
    if (nob == 2)                                                                                  \
      full_body_##SFX(p, i, ob, oy, 2);                                                            \
    else                                                                                           \
      full_body_##SFX(p, i, ob, oy, 1);                                                            \
  }

#define NC512_ZERO() _mm512_setzero_ps()
#define NC256_ZERO() _mm256_setzero_ps()
NC_DEFINE(avx512, "avx512f", __m512, 16, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_set1_ps,
          _mm512_fmadd_ps, _mm512_max_ps, _mm512_min_ps, NC512_ZERO, _mm512_add_ps, _mm512_mul_ps)
NC_DEFINE(avx2, "avx2,fma", __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps,
          _mm256_fmadd_ps, _mm256_max_ps, _mm256_min_ps, NC256_ZERO, _mm256_add_ps, _mm256_mul_ps)
NC_DEFINE_FULL(avx512, "avx512f", __m512, 16, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_set1_ps,
               _mm512_fmadd_ps, NC512_ZERO)
NC_DEFINE_FULL(avx2, "avx2,fma", __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps,
               _mm256_fmadd_ps, NC256_ZERO)
#endif

/* ------------------------------------------------------------------------ */
/* The run                                                                   */
/* ------------------------------------------------------------------------ */

/* Pixels per pointwise task (a multiple of the 6-pixel tile). */
#define PW_TASK_PIXELS 96

typedef struct NcJob {
  const CpuNchwcConv* p;
  int path;
  size_t pairs, tiles; /* pointwise: output block pairs, pixel tasks per image */
  CpuStop stop;
} NcJob;

static void pw_tasks(void* user, size_t begin, size_t end) {
  NcJob* j = user;
  const CpuNchwcConv* p = j->p;
  const size_t hw = p->h * p->w;
  size_t polled = 0;
  for (size_t t = begin; t < end; t++) {
    if (cpu_stop_poll(&j->stop, &polled, PW_TASK_PIXELS * p->c)) return;
    const size_t tile = t % j->tiles, rest = t / j->tiles;
    const size_t pair = rest % j->pairs, i = rest / j->pairs;
    const size_t ob = pair * 2, nob = ob + 2 <= p->mb ? 2 : 1;
    const size_t p0 = tile * PW_TASK_PIXELS;
    const size_t p1 = p0 + PW_TASK_PIXELS < hw ? p0 + PW_TASK_PIXELS : hw;
    switch (j->path) {
#if NC_X86
    case CPU_NCHWC_AVX512:
      pw_run_avx512(p, i, ob, nob, p0, p1);
      break;
    case CPU_NCHWC_AVX2:
      pw_run_avx2(p, i, ob, nob, p0, p1);
      break;
#endif
    default:
      for (size_t o = 0; o < nob; o++) {
        pw_scalar(p, i, ob + o, p0, p1 - p0);
        const size_t off = ((i * p->mb + ob + o) * hw + p0) * p->block;
        nc_epilogue(p, p->y + off, p->z ? p->z + off : NULL, (p1 - p0) * p->block);
      }
    }
  }
}

static void dw_tasks(void* user, size_t begin, size_t end) {
  NcJob* j = user;
  const CpuNchwcConv* p = j->p;
  size_t polled = 0;
  for (size_t t = begin; t < end; t++) {
    if (cpu_stop_poll(&j->stop, &polled, p->ow * p->kh * p->kw)) return;
    const size_t oy = t % p->oh, rest = t / p->oh;
    const size_t b = rest % p->mb, i = rest / p->mb;
    switch (j->path) {
#if NC_X86
    case CPU_NCHWC_AVX512:
      dw_row_avx512(p, i, b, oy);
      break;
    case CPU_NCHWC_AVX2:
      dw_row_avx2(p, i, b, oy);
      break;
#endif
    default: {
      dw_scalar(p, i, b, oy);
      const size_t off = ((i * p->mb + b) * p->oh + oy) * p->ow * p->block;
      nc_epilogue(p, p->y + off, p->z ? p->z + off : NULL, p->ow * p->block);
    }
    }
  }
}

/* Full: a task per output row of a pair of output blocks (the last pair
 * may hold one). */
static void full_tasks(void* user, size_t begin, size_t end) {
  NcJob* j = user;
  const CpuNchwcConv* p = j->p;
  size_t polled = 0;
  for (size_t t = begin; t < end; t++) {
    if (cpu_stop_poll(&j->stop, &polled, p->ow * p->kh * p->kw * p->c)) return;
    const size_t oy = t % p->oh, rest = t / p->oh;
    const size_t ob = rest % j->pairs * 2, i = rest / j->pairs;
    const size_t nob = ob + 2 <= p->mb ? 2 : 1;
    switch (j->path) {
#if NC_X86
    case CPU_NCHWC_AVX512:
      full_row_avx512(p, i, ob, nob, oy);
      break;
    case CPU_NCHWC_AVX2:
      full_row_avx2(p, i, ob, nob, oy);
      break;
#endif
    default:
      for (size_t o = 0; o < nob; o++) {
        full_scalar(p, i, ob + o, oy);
        const size_t off = ((i * p->mb + ob + o) * p->oh + oy) * p->ow * p->block;
        nc_epilogue(p, p->y + off, p->z ? p->z + off : NULL, p->ow * p->block);
      }
    }
  }
}

OnyxStatus* cpu_nchwc_conv_run(OnyxKernelContext* ctx, const CpuNchwcConv* p) {
  if (p->block != 8 && p->block != 16)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "block %zu is not 8 or 16", p->block);
  if (p->n == 0 || p->mb == 0 || p->oh == 0 || p->ow == 0) return NULL;
  NcJob j = {.p = p, .path = block_path(p->block), .stop = {.ctx = ctx}};
  size_t tasks;
  if (p->full) {
    j.pairs = blocks_of(p->mb, 2);
    if (!cpu_mul_size(p->n * j.pairs, p->oh, &tasks))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "too many output rows");
    cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), tasks, full_tasks, &j);
  } else if (p->depthwise) { /* a task per output row */
    if (!cpu_mul_size(p->n * p->mb, p->oh, &tasks))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "too many output rows");
    cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), tasks, dw_tasks, &j);
  } else {
    const size_t hw = p->h * p->w;
    j.pairs = blocks_of(p->mb, 2);
    j.tiles = blocks_of(hw, PW_TASK_PIXELS);
    if (!cpu_mul_size(p->n * j.pairs, j.tiles, &tasks))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "too many output tiles");
    if (tasks) cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), tasks, pw_tasks, &j);
  }
  if (cpu_stop_seen(&j.stop)) return cpu_cancelled(ctx, NULL);
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct NcState {
  CpuNchwcConv geo; /* the attributes' part: block, window, activation */
  size_t pb, pr;    /* the bottom and right pads */
  float* wp;
} NcState;

static void nc_release(void* state) {
  NcState* s = state;
  if (!s) return;
  free(s->wp);
  free(s);
}

/* Window attribute `name` with `count` values in [lo, INT32_MAX]. */
static OnyxStatus* nc_ints(const OnyxNode* node, const char* name, size_t count, int64_t lo,
                           size_t* out) {
  size_t k = 0;
  const int64_t* v = cpu_host->node_attr_ints(node, name, &k);
  if (!v || k != count)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "attribute '%s' must have %zu values", name,
                     count);
  for (size_t i = 0; i < count; i++) {
    if (v[i] < lo || v[i] > INT32_MAX)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "attribute '%s' value %lld is out of range",
                       name, (long long)v[i]);
    out[i] = (size_t)v[i];
  }
  return NULL;
}

static OnyxStatus* nc_conv_create(OnyxEp* ep, const OnyxNode* node, void* ud, void** state) {
  (void)ep;
  (void)ud;
  size_t k[2], s[2], pads[4], d[2];
  OnyxStatus* st = nc_ints(node, "kernel_shape", 2, 1, k);
  if (!st) st = nc_ints(node, "strides", 2, 1, s);
  if (!st) st = nc_ints(node, "pads", 4, 0, pads);
  if (!st) st = nc_ints(node, "dilations", 2, 1, d);
  if (st) return st;
  const int64_t block = cpu_host->node_attr_int(node, "block", 0);
  const int64_t group = cpu_host->node_attr_int(node, "group", 1);
  if (block != 8 && block != 16)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "attribute 'block' must be 8 or 16");
  const OnyxValueInfo* wv = cpu_host->node_input(node, 1);
  const OnyxTensor* wt = wv ? cpu_host->value_constant(wv) : NULL;
  if (!wt || cpu_host->tensor_elem_type(wt) != ONYX_ELEM_FLOAT32 || cpu_host->tensor_rank(wt) != 4)
    return cpu_error(node, ONYX_NOT_IMPLEMENTED, "W must be a constant float32 4-D tensor");
  const int64_t* wd = cpu_host->tensor_dims(wt);
  if (wd[0] < 1 || wd[1] < 1 || wd[2] != (int64_t)k[0] || wd[3] != (int64_t)k[1] || group < 1 ||
      wd[0] > INT32_MAX || wd[1] > INT32_MAX || group > INT32_MAX)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "W's shape does not match the attributes");
  const bool pointwise = k[0] == 1 && k[1] == 1 && s[0] == 1 && s[1] == 1 && !pads[0] && !pads[1] &&
                         !pads[2] && !pads[3] && group == 1;
  const bool depthwise = wd[1] == 1 && group == wd[0] && group > 1;
  const bool full = !pointwise && !depthwise && group == 1;
  if (!pointwise && !depthwise && !full)
    return cpu_error(node, ONYX_NOT_IMPLEMENTED,
                     "grouped blocked convolutions other than depthwise (group = channels) are not "
                     "implemented");
  NcState* ns = calloc(1, sizeof *ns);
  if (!ns) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  CpuActivation a;
  st = cpu_read_activation(node, &a);
  if (st) {
    free(ns);
    return st;
  }
  const size_t m = (size_t)wd[0], cin = depthwise ? (size_t)group : (size_t)wd[1];
  const size_t floats = depthwise ? cpu_nchwc_depthwise_floats(m, k[0], k[1], (size_t)block)
                                  : cpu_nchwc_full_floats(m, cin, k[0], k[1], (size_t)block);
  ns->wp = floats && floats <= SIZE_MAX / sizeof(float) ? malloc(floats * sizeof(float)) : NULL;
  if (!ns->wp) {
    free(ns);
    return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory for the packed weights");
  }
  const float* w = cpu_host->tensor_data(wt);
  if (depthwise)
    cpu_nchwc_pack_depthwise(w, m, k[0], k[1], (size_t)block, ns->wp);
  else /* the pointwise packing is the full one of a 1x1 window */
    cpu_nchwc_pack_full(w, m, cin, k[0], k[1], (size_t)block, ns->wp);
  ns->geo = (CpuNchwcConv){.c = cin,
                           .m = m,
                           .mb = blocks_of(m, (size_t)block),
                           .block = (size_t)block,
                           .depthwise = depthwise,
                           .full = full,
                           .kh = k[0],
                           .kw = k[1],
                           .sh = s[0],
                           .sw = s[1],
                           .dh = d[0],
                           .dw = d[1],
                           .pt = pads[0],
                           .pl = pads[1],
                           .act = a.act,
                           .alpha = a.alpha,
                           .lo = a.min,
                           .hi = a.max};
  ns->pb = pads[2];
  ns->pr = pads[3];
  *state = ns;
  return NULL;
}

/* (in + p0 + p1 - dilated kernel) / stride + 1, or false. */
static bool nc_extent(size_t in, size_t k, size_t s, size_t d, size_t p0, size_t p1, size_t* out) {
  int64_t span, padded;
  if (!cpu_dilated_extent((int64_t)k, (int64_t)d, &span) ||
      !cpu_add3_i64((int64_t)in, (int64_t)p0, (int64_t)p1, &padded) || padded < span)
    return false;
  *out = (size_t)((padded - span) / (int64_t)s + 1);
  return true;
}

static OnyxStatus* nc_conv_compute(void* state, OnyxKernelContext* ctx) {
  const NcState* ns = state;
  CpuNchwcConv p = ns->geo;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const size_t n_in = cpu_host->ctx_input_count(ctx);
  const OnyxTensor* b = n_in > 2 ? cpu_host->ctx_input(ctx, 2) : NULL;
  const OnyxTensor* z = n_in > 3 ? cpu_host->ctx_input(ctx, 3) : NULL;
  const int64_t* xd = cpu_host->tensor_dims(x);
  const size_t rank = cpu_host->tensor_rank(x);
  if (rank == 4 && !p.depthwise) { /* NCHW X: the direct loop of full convs */
    if ((size_t)xd[1] != p.c)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "NCHW X has %lld channels, W reads %zu",
                           (long long)xd[1], p.c);
    p.nchw_in = p.full = true;
    p.cb = blocks_of(p.c, p.block);
  } else if (rank != 5 || xd[4] != (int64_t)p.block || (size_t)xd[1] != blocks_of(p.c, p.block)) {
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "X must be blocked 5-D holding %zu channels in blocks of %zu (or NCHW for "
                         "a group-1 conv)",
                         p.c, p.block);
  } else {
    p.cb = (size_t)xd[1];
  }
  p.n = (size_t)xd[0], p.h = (size_t)xd[2], p.w = (size_t)xd[3];
  if (!nc_extent(p.h, p.kh, p.sh, p.dh, p.pt, ns->pb, &p.oh) ||
      !nc_extent(p.w, p.kw, p.sw, p.dw, p.pl, ns->pr, &p.ow))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "the window does not fit the %zux%zu input",
                         p.h, p.w);
  const int64_t yd[5] = {xd[0], (int64_t)p.mb, (int64_t)p.oh, (int64_t)p.ow, (int64_t)p.block};
  if (b && (cpu_host->tensor_rank(b) != 1 || cpu_host->tensor_dims(b)[0] != (int64_t)p.m))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "B must hold %zu values", p.m);
  if (z) {
    const int64_t* zd = cpu_host->tensor_dims(z);
    bool same = cpu_host->tensor_rank(z) == 5;
    for (int i = 0; same && i < 5; i++)
      same = zd[i] == yd[i];
    if (!same) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "Z must have Y's blocked shape");
  }
  OnyxTensor* y = NULL;
  OnyxStatus* out_st = cpu_host->ctx_output(ctx, 0, yd, 5, &y);
  if (out_st) return out_st;
  float* bias = NULL;
  if (b) {
    bias = cpu_host->ctx_scratch(ctx, p.mb * p.block * sizeof(float));
    if (!bias) return cpu_oom(ctx);
    memset(bias, 0, p.mb * p.block * sizeof(float));
    memcpy(bias, cpu_host->tensor_data(b), p.m * sizeof(float));
  }
  p.x = cpu_host->tensor_data(x);
  p.wp = ns->wp;
  p.bias = bias;
  p.z = z ? cpu_host->tensor_data(z) : NULL;
  p.y = cpu_host->tensor_mutable_data(y);
  return cpu_nchwc_conv_run(ctx, &p);
}

static OnyxStatus* nc_reorder_input_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const int64_t block = cpu_host->node_attr_int(cpu_host->ctx_node(ctx), "block", 0);
  if (cpu_host->tensor_rank(x) != 4 || (block != 8 && block != 16))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X must be 4-D and block 8 or 16");
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t c = (size_t)d[1];
  const int64_t yd[5] = {d[0], (int64_t)blocks_of(c, (size_t)block), d[2], d[3], block};
  OnyxTensor* y = NULL;
  OnyxStatus* out_st = cpu_host->ctx_output(ctx, 0, yd, 5, &y);
  if (out_st) return out_st;
  cpu_nchwc_reorder_input(cpu_host->tensor_data(x), cpu_host->tensor_mutable_data(y), (size_t)d[0],
                          c, (size_t)d[2] * (size_t)d[3], (size_t)block);
  return NULL;
}

static OnyxStatus* nc_reorder_output_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const int64_t c = cpu_host->node_attr_int(cpu_host->ctx_node(ctx), "channels", 0);
  const int64_t* d = cpu_host->tensor_dims(x);
  if (cpu_host->tensor_rank(x) != 5 || (d[4] != 8 && d[4] != 16) || c < 1 || c > d[1] * d[4] ||
      c <= (d[1] - 1) * d[4])
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "X must be blocked 5-D holding attribute 'channels' %lld channels",
                         (long long)c);
  const int64_t yd[4] = {d[0], c, d[2], d[3]};
  OnyxTensor* y = NULL;
  OnyxStatus* out_st = cpu_host->ctx_output(ctx, 0, yd, 4, &y);
  if (out_st) return out_st;
  cpu_nchwc_reorder_output(cpu_host->tensor_data(x), cpu_host->tensor_mutable_data(y), (size_t)d[0],
                           (size_t)c, (size_t)d[1], (size_t)d[2] * (size_t)d[3], (size_t)d[4]);
  return NULL;
}

static OnyxStatus* nc_gap_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const int64_t* d = cpu_host->tensor_dims(x);
  if (cpu_host->tensor_rank(x) != 5 || (d[4] != 8 && d[4] != 16))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X must be blocked 5-D");
  const int64_t yd[5] = {d[0], d[1], 1, 1, d[4]};
  OnyxTensor* y = NULL;
  OnyxStatus* out_st = cpu_host->ctx_output(ctx, 0, yd, 5, &y);
  if (out_st) return out_st;
  cpu_nchwc_global_average(cpu_host->tensor_data(x), cpu_host->tensor_mutable_data(y), (size_t)d[0],
                           (size_t)d[1], (size_t)d[2] * (size_t)d[3], (size_t)d[4]);
  return NULL;
}

static OnyxStatus* nc_scale_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* sc = cpu_host->ctx_input(ctx, 1);
  const int64_t* d = cpu_host->tensor_dims(x);
  const int64_t* sd = cpu_host->tensor_dims(sc);
  if (cpu_host->tensor_rank(x) != 5 || cpu_host->tensor_rank(sc) != 5 || sd[0] != d[0] ||
      sd[1] != d[1] || sd[2] != 1 || sd[3] != 1 || sd[4] != d[4])
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "X must be blocked 5-D and S [N, C/block, 1, 1, block] of X's N and C");
  OnyxTensor* y = NULL;
  OnyxStatus* out_st = cpu_host->ctx_output(ctx, 0, d, 5, &y);
  if (out_st) return out_st;
  cpu_nchwc_scale(cpu_host->tensor_data(x), cpu_host->tensor_data(sc),
                  cpu_host->tensor_mutable_data(y), (size_t)d[0], (size_t)d[1],
                  (size_t)d[2] * (size_t)d[3], (size_t)d[4]);
  return NULL;
}

static const int32_t F32[] = {ONYX_ELEM_FLOAT32};
/* NchwcScale's Y may take X's buffer. */
static const OnyxAlias INPLACE[] = {{0, 0, ONYX_ALIAS_INPLACE}};
static const OnyxTypeConstraint TC_T[] = {{"T", F32, 1}};

#define NDEF(op, cr, comp, rel, al, nal)                                                           \
  {                                                                                                \
    .struct_size = sizeof(OnyxKernelDef), .domain = "com.onyx", .op_type = op, .since_version = 1, \
    .end_version = ONYX_OPSET_LATEST, .type_constraints = TC_T, .type_constraint_count = 1,        \
    .aliases = al, .alias_count = nal, .create = cr, .compute = comp, .release = rel               \
  }

OnyxStatus* cpu_register_nchwc(OnyxKernelRegistry* r) {
  const OnyxKernelDef defs[] = {
      NDEF("NchwcConv", nc_conv_create, nc_conv_compute, nc_release, NULL, 0),
      NDEF("ReorderInput", NULL, nc_reorder_input_compute, NULL, NULL, 0),
      NDEF("ReorderOutput", NULL, nc_reorder_output_compute, NULL, NULL, 0),
      NDEF("NchwcGlobalAveragePool", NULL, nc_gap_compute, NULL, NULL, 0),
      NDEF("NchwcScale", NULL, nc_scale_compute, NULL, INPLACE, 1),
  };
  for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
    OnyxStatus* st = cpu_host->register_kernel(r, &defs[i]);
    if (st) return st;
  }
  return NULL;
}
