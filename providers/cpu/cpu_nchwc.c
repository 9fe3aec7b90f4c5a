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

/* The path enum counts as cpu_isa_level does: scalar, AVX2, AVX-512. */
_Static_assert((int)CPU_NCHWC_SCALAR == (int)CPU_ISA_GENERIC &&
                   (int)CPU_NCHWC_AVX2 == (int)CPU_ISA_AVX2 &&
                   (int)CPU_NCHWC_AVX512 == (int)CPU_ISA_AVX512,
               "the path enum follows cpu_isa_level");

static int machine_path(void) {
  return cpu_isa_level();
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

size_t cpu_nchwc_depthwise_floats(size_t c, size_t kh, size_t kw, size_t block) {
  size_t a, b, t;
  return cpu_mul_size(kh, kw, &t) && cpu_mul_size(blocks_of(c, block), t, &a) &&
                 cpu_mul_size(a, block, &b)
             ? b
             : 0;
}

size_t cpu_nchwc_set_blocks(size_t block) {
  return block == 16 ? 4 : 2;
}

/* The input blocks output block ob reads: those holding the input channels
 * of the groups of its output channels. */
static void nc_block_inputs(size_t ob, size_t m, size_t c, size_t group, size_t block, size_t* ib,
                            size_t* nib) {
  const size_t mpg = m / group, cpg = c / group;
  const size_t last = (ob + 1) * block < m ? (ob + 1) * block - 1 : m - 1;
  const size_t g0 = ob * block / mpg, g1 = last / mpg;
  const size_t c0 = g0 * cpg, c1 = (g1 + 1) * cpg;
  *ib = c0 / block;
  *nib = blocks_of(c1, block) - *ib;
}

size_t cpu_nchwc_conv_sets(size_t m, size_t c, size_t group, size_t kh, size_t kw, size_t block,
                           CpuNchwcSet* sets, size_t* floats) {
  const size_t mb = blocks_of(m, block), most = cpu_nchwc_set_blocks(block);
  size_t n = 0, total = 0, per = 0;
  bool ok = cpu_mul_size(kh, kw, &per) && cpu_mul_size(per, block * block, &per);
  for (size_t ob = 0; ob < mb; ob++) {
    size_t ib, nib;
    nc_block_inputs(ob, m, c, group, block, &ib, &nib);
    CpuNchwcSet* last = n ? &sets[n - 1] : NULL;
    if (last && last->nob < most && last->ib == ib && last->nib == nib) {
      last->nob++;
    } else {
      sets[n++] = (CpuNchwcSet){.ob = ob, .nob = 1, .ib = ib, .nib = nib, .wofs = total};
    }
    size_t f;
    ok = ok && cpu_mul_size(nib, per, &f) && cpu_add_size(total, f, &total);
  }
  *floats = ok && total <= SIZE_MAX / sizeof(float) ? total : 0;
  return n;
}

void cpu_nchwc_pack_conv(const float* w, size_t m, size_t c, size_t group, size_t kh, size_t kw,
                         size_t block, const CpuNchwcSet* sets, size_t nsets, float* out) {
  const size_t taps = kh * kw, mpg = m / group, cpg = c / group;
  for (size_t s = 0; s < nsets; s++) {
    const CpuNchwcSet* e = &sets[s];
    float* o = out + e->wofs;
    for (size_t ib = 0; ib < e->nib; ib++)
      for (size_t t = 0; t < taps; t++)
        for (size_t k = 0; k < block; k++)
          for (size_t ob = 0; ob < e->nob; ob++)
            for (size_t j = 0; j < block; j++, o++) {
              const size_t co = (e->ob + ob) * block + j, ci = (e->ib + ib) * block + k;
              const size_t g = co / mpg;
              *o = co < m && ci < c && ci / cpg == g ? w[(co * cpg + ci - g * cpg) * taps + t]
                                                     : 0.0f;
            }
  }
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

/* Units [u0, u1) of the reorders, each one channel block of one image
 * (u = image * cb + block). */
static void reorder_input_units(const float* x, float* y, size_t c, size_t hw, size_t block,
                                size_t u0, size_t u1) {
  const size_t cb = blocks_of(c, block);
  for (size_t u = u0; u < u1; u++) {
    const size_t i = u / cb, b = u % cb;
    float* yb = y + u * hw * block;
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

void cpu_nchwc_reorder_input(const float* x, float* y, size_t n, size_t c, size_t hw,
                             size_t block) {
  reorder_input_units(x, y, c, hw, block, 0, n * blocks_of(c, block));
}

static void reorder_output_units(const float* x, float* y, size_t c, size_t cb, size_t hw,
                                 size_t block, size_t u0, size_t u1) {
  for (size_t u = u0; u < u1; u++) {
    const size_t i = u / cb, b = u % cb;
    for (size_t p0 = 0; p0 < hw; p0 += REORDER_TILE) {
      const size_t p1 = p0 + REORDER_TILE < hw ? p0 + REORDER_TILE : hw;
      for (size_t ch = b * block; ch < c && ch < (b + 1) * block; ch++) {
        const float* xb = x + u * hw * block + ch % block;
        float* yc = y + (i * c + ch) * hw;
        for (size_t p = p0; p < p1; p++)
          yc[p] = xb[p * block];
      }
    }
  }
}

void cpu_nchwc_reorder_output(const float* x, float* y, size_t n, size_t c, size_t cb, size_t hw,
                              size_t block) {
  reorder_output_units(x, y, c, cb, hw, block, 0, n * cb);
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

/* The set holding output block ob. */
static const CpuNchwcSet* nc_set_of(const CpuNchwcConv* p, size_t ob) {
  size_t s = 0;
  while (s + 1 < p->nsets && p->sets[s + 1].ob <= ob)
    s++;
  return &p->sets[s];
}

/* Pointwise: pixels [p0, p0 + np) of output block ob of image i. */
static void pw_scalar(const CpuNchwcConv* p, size_t i, size_t ob, size_t p0, size_t np) {
  const size_t B = p->block, hw = p->h * p->w;
  const CpuNchwcSet* e = nc_set_of(p, ob);
  const float* w0 = p->wp + e->wofs + (ob - e->ob) * B;
  float* y = p->y + ((i * p->mb + ob) * hw + p0) * B;
  for (size_t q = 0; q < np; q++)
    for (size_t j = 0; j < B; j++) {
      float acc = p->bias ? p->bias[ob * B + j] : 0.0f;
      for (size_t ci = 0; ci < p->c; ci++)
        acc += p->x[((i * p->cb + ci / B) * hw + p0 + q) * B + ci % B] * w0[ci * e->nob * B + j];
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

/* Full: where input block ib of image i starts, and the strides of its
 * channels, rows and columns (X NCHW or blocked). */
static inline const float* full_block(const CpuNchwcConv* p, size_t i, size_t ib, size_t* ks,
                                      size_t* rs, size_t* cs) {
  const size_t hw = p->h * p->w;
  if (p->nchw_in) {
    *ks = hw, *rs = p->w, *cs = 1;
    return p->x + (i * p->c + ib * p->block) * hw;
  }
  *ks = 1, *rs = p->w * p->block, *cs = p->block;
  return p->x + (i * p->cb + ib) * hw * p->block;
}

/* Full: output row oy of the set's output blocks of image i, in the
 * vector paths' order of terms. */
static void full_scalar(const CpuNchwcConv* p, const CpuNchwcSet* e, size_t i, size_t oy) {
  const size_t B = p->block, taps = p->kh * p->kw, nob = e->nob;
  const int64_t iy0 = (int64_t)(oy * p->sh) - (int64_t)p->pt;
  for (size_t o = 0; o < nob; o++) {
    float* y = p->y + ((i * p->mb + e->ob + o) * p->oh + oy) * p->ow * B;
    for (size_t ox = 0; ox < p->ow; ox++) {
      const int64_t ix0 = (int64_t)(ox * p->sw) - (int64_t)p->pl;
      for (size_t j = 0; j < B; j++) {
        float acc = p->bias ? p->bias[(e->ob + o) * B + j] : 0.0f;
        for (size_t ib = 0; ib < e->nib; ib++) {
          size_t ks, rs, cs;
          const float* xb = full_block(p, i, e->ib + ib, &ks, &rs, &cs);
          const size_t kmax = p->c - (e->ib + ib) * B < B ? p->c - (e->ib + ib) * B : B;
          for (size_t u = 0; u < p->kh; u++) {
            const int64_t iy = iy0 + (int64_t)(u * p->dh);
            if (iy < 0 || iy >= (int64_t)p->h) continue;
            for (size_t v = 0; v < p->kw; v++) {
              const int64_t ix = ix0 + (int64_t)(v * p->dw);
              if (ix < 0 || ix >= (int64_t)p->w) continue;
              const float* wt = p->wp + e->wofs + ((ib * taps + u * p->kw + v) * B * nob + o) * B;
              const float* xp = xb + (size_t)iy * rs + (size_t)ix * cs;
              for (size_t k = 0; k < kmax; k++)
                acc += xp[k * ks] * wt[k * nob * B + j];
            }
          }
        }
        y[ox * B + j] = acc;
      }
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
      const CpuNchwcConv* p, const float* w0, size_t ws, size_t i, size_t ob, size_t p0,           \
      const int np, const int nob) {                                                               \
    const size_t hw = p->h * p->w;                                                                 \
    V acc[2][6];                                                                                   \
    _Pragma("GCC unroll 2") for (int o = 0; o < nob; o++) {                                        \
      const V b0 = p->bias ? LOAD(p->bias + (ob + (size_t)o) * B) : ZERO();                        \
      _Pragma("GCC unroll 6") for (int q = 0; q < np; q++) acc[o][q] = b0;                         \
    }                                                                                              \
    for (size_t ib = 0; ib < p->cb; ib++) {                                                        \
      const float* xb = p->x + ((i * p->cb + ib) * hw + p0) * B;                                   \
      const size_t kmax = p->c - ib * B < B ? p->c - ib * B : B;                                   \
      const float* wk = w0 + ib * B * ws;                                                          \
      for (size_t k = 0; k < kmax; k++, wk += ws) {                                                \
        const V wa = LOAD(wk);                                                                     \
        const V wb = nob > 1 ? LOAD(wk + B) : wa;                                                  \
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
    const CpuNchwcSet* e = nc_set_of(p, ob);                                                       \
    const float* w0 = p->wp + e->wofs + (ob - e->ob) * B;                                          \
    const size_t ws = e->nob * B;                                                                  \
    size_t q = p0;                                                                                 \
    if (nob == 2) {                                                                                \
      for (; q + 6 <= p1; q += 6)                                                                  \
        pw_tile_##SFX(p, w0, ws, i, ob, q, 6, 2);                                                  \
      for (; q < p1; q++)                                                                          \
        pw_tile_##SFX(p, w0, ws, i, ob, q, 1, 2);                                                  \
    } else {                                                                                       \
      for (; q + 6 <= p1; q += 6)                                                                  \
        pw_tile_##SFX(p, w0, ws, i, ob, q, 6, 1);                                                  \
      for (; q < p1; q++)                                                                          \
        pw_tile_##SFX(p, w0, ws, i, ob, q, 1, 1);                                                  \
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

/* The full loop's view of one output row of one set: where its input
 * blocks, weights, outputs and residual start, and the strides. */
typedef struct NcRow {
  const float *x0, *w, *z0;
  float* y0;
  size_t ibs, ks, rs, cs, ybs, nib, klast, taps;
  int64_t iy0;
  size_t u0, u1;   /* the kernel rows inside the image */
  size_t pu0, pu1; /* the kernel rows of this pass */
  bool first;      /* the pass starts the sums (else it adds to Y's) */
  bool last;       /* the pass ends them (Z and the activation) */
} NcRow;

/* cv_tile: np pixels (1..12) of one output row from ox by the set's nob
 * (1..4) blocks, over taps [v0, v1) of each kernel row: accumulators start
 * at the bias; per input block, tap and channel, nob adjacent weight
 * vectors and np broadcasts of the pixels' input values. cv_span: the
 * pixels [ox0, ox1) whose taps all lie in the row, NPM at a time, then one
 * tile of the rest. */
#define NC_DEFINE_FULL(SFX, TGT, V, B, LOAD, STORE, SET1, FMA, ZERO)                               \
  __attribute__((target(TGT), always_inline)) static inline void cv_tile_##SFX(                    \
      const CpuNchwcConv* p, const NcRow* r, size_t ob, size_t ox, size_t v0, size_t v1,           \
      const int nob, const int np) {                                                               \
    V acc[4][12];                                                                                  \
    _Pragma("GCC unroll 4") for (int o = 0; o < nob; o++) {                                        \
      const V b0 = p->bias ? LOAD(p->bias + (ob + (size_t)o) * B) : ZERO();                        \
      const float* yo = r->y0 + (size_t)o * r->ybs + ox * B;                                       \
      _Pragma("GCC unroll 12") for (int q = 0; q < np; q++) acc[o][q] =                            \
          r->first ? b0 : LOAD(yo + (size_t)q * B);                                                \
    }                                                                                              \
    const size_t ws = (size_t)nob * B, st = p->sw * r->cs, ks = r->ks;                             \
    const int64_t ix0 = (int64_t)(ox * p->sw) - (int64_t)p->pl;                                    \
    for (size_t ib = 0; ib < r->nib; ib++) {                                                       \
      const float* xb = r->x0 + ib * r->ibs;                                                       \
      const size_t kmax = ib + 1 == r->nib ? r->klast : B;                                         \
      const float* wb = r->w + ib * r->taps * B * ws;                                              \
      for (size_t u = r->pu0; u < r->pu1; u++) {                                                   \
        const float* xr = xb + (size_t)(r->iy0 + (int64_t)(u * p->dh)) * r->rs;                    \
        const float* wu = wb + u * p->kw * B * ws;                                                 \
        for (size_t v = v0; v < v1; v++) {                                                         \
          const float* xp = xr + (size_t)(ix0 + (int64_t)(v * p->dw)) * r->cs;                     \
          const float* wk = wu + v * B * ws;                                                       \
          for (size_t k = 0; k < kmax; k++, wk += ws, xp += ks) {                                  \
            V wv[4];                                                                               \
            _Pragma("GCC unroll 4") for (int o = 0; o < nob; o++) wv[o] =                          \
                LOAD(wk + (size_t)o * B);                                                          \
            _Pragma("GCC unroll 12") for (int q = 0; q < np; q++) {                                \
              const V xv = SET1(xp[(size_t)q * st]);                                               \
              _Pragma("GCC unroll 4") for (int o = 0; o < nob; o++) acc[o][q] =                    \
                  FMA(xv, wv[o], acc[o][q]);                                                       \
            }                                                                                      \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
    _Pragma("GCC unroll 4") for (int o = 0; o < nob; o++) {                                        \
      float* y = r->y0 + (size_t)o * r->ybs + ox * B;                                              \
      const float* z = r->z0 ? r->z0 + (size_t)o * r->ybs + ox * B : NULL;                         \
      if (r->last)                                                                                 \
        _Pragma("GCC unroll 12") for (int q = 0; q < np; q++)                                      \
            STORE(y + (size_t)q * B, epi_##SFX(p, acc[o][q], z ? z + (size_t)q * B : NULL));       \
      else                                                                                         \
        _Pragma("GCC unroll 12") for (int q = 0; q < np; q++) STORE(y + (size_t)q * B, acc[o][q]); \
    }                                                                                              \
  }                                                                                                \
  __attribute__((target(TGT), always_inline)) static inline void cv_span_##SFX(                    \
      const CpuNchwcConv* p, const NcRow* r, size_t ob, size_t ox0, size_t ox1, const int nob,     \
      const int NPM) {                                                                             \
    size_t ox = ox0;                                                                               \
    for (; ox + (size_t)NPM <= ox1; ox += (size_t)NPM)                                             \
      cv_tile_##SFX(p, r, ob, ox, 0, p->kw, nob, NPM);                                             \
    const size_t kw = p->kw;                                                                       \
    switch (ox1 - ox) {                                                                            \
    case 11:                                                                                       \
      if (NPM > 11) cv_tile_##SFX(p, r, ob, ox, 0, kw, nob, 11);                                   \
      break;                                                                                       \
    case 10:                                                                                       \
      if (NPM > 10) cv_tile_##SFX(p, r, ob, ox, 0, kw, nob, 10);                                   \
      break;                                                                                       \
    case 9:                                                                                        \
      if (NPM > 9) cv_tile_##SFX(p, r, ob, ox, 0, kw, nob, 9);                                     \
      break;                                                                                       \
    case 8:                                                                                        \
      if (NPM > 8) cv_tile_##SFX(p, r, ob, ox, 0, kw, nob, 8);                                     \
      break;                                                                                       \
    case 7:                                                                                        \
      if (NPM > 7) cv_tile_##SFX(p, r, ob, ox, 0, kw, nob, 7);                                     \
      break;                                                                                       \
    case 6:                                                                                        \
      if (NPM > 6) cv_tile_##SFX(p, r, ob, ox, 0, kw, nob, 6);                                     \
      break;                                                                                       \
    case 5:                                                                                        \
      if (NPM > 5) cv_tile_##SFX(p, r, ob, ox, 0, kw, nob, 5);                                     \
      break;                                                                                       \
    case 4:                                                                                        \
      if (NPM > 4) cv_tile_##SFX(p, r, ob, ox, 0, kw, nob, 4);                                     \
      break;                                                                                       \
    case 3:                                                                                        \
      if (NPM > 3) cv_tile_##SFX(p, r, ob, ox, 0, kw, nob, 3);                                     \
      break;                                                                                       \
    case 2:                                                                                        \
      if (NPM > 2) cv_tile_##SFX(p, r, ob, ox, 0, kw, nob, 2);                                     \
      break;                                                                                       \
    case 1:                                                                                        \
      if (NPM > 1) cv_tile_##SFX(p, r, ob, ox, 0, kw, nob, 1);                                     \
      break;                                                                                       \
    default:                                                                                       \
      break;                                                                                       \
    }                                                                                              \
  }                                                                                                \
  /* One pixel whose window leaves the row: its in-row taps only. */                               \
  __attribute__((target(TGT), always_inline)) static inline void cv_edge_##SFX(                    \
      const CpuNchwcConv* p, const NcRow* r, size_t ob, size_t ox, const int nob) {                \
    const int64_t ix0 = (int64_t)(ox * p->sw) - (int64_t)p->pl;                                    \
    size_t v0 = 0, v1 = 0;                                                                         \
    for (size_t v = 0; v < p->kw; v++) {                                                           \
      const int64_t ix = ix0 + (int64_t)(v * p->dw);                                               \
      if (ix < 0) v0 = v + 1;                                                                      \
      if (ix >= 0 && ix < (int64_t)p->w) v1 = v + 1;                                               \
    }                                                                                              \
    if (v1 < v0) v1 = v0;                                                                          \
    cv_tile_##SFX(p, r, ob, ox, v0, v1, nob, 1);                                                   \
  }

#define NC_FULL_CASE(SFX, NOB, NPM)                                                                \
  case NOB:                                                                                        \
    for (size_t ox = 0; ox < oa; ox++)                                                             \
      cv_edge_##SFX(p, &r, e->ob, ox, NOB);                                                        \
    cv_span_##SFX(p, &r, e->ob, oa, ob_, NOB, NPM);                                                \
    for (size_t ox = ob_; ox < p->ow; ox++)                                                        \
      cv_edge_##SFX(p, &r, e->ob, ox, NOB);                                                        \
    break;

/* full_pass: one pass over one output row of the set's blocks (r): the
 * pixels before and after the interior [oa, ob_) one at a time. */
#define NC_DEFINE_FULL_PASS(SFX, TGT, CASES)                                                       \
  __attribute__((target(TGT))) static void full_pass_##SFX(                                        \
      const CpuNchwcConv* p, const CpuNchwcSet* e, const NcRow* rp, size_t oa, size_t ob_) {       \
    const NcRow r = *rp;                                                                           \
    switch (e->nob) { CASES default : break; }                                                     \
  }

/* The row's inputs, weights and the kernel rows inside the image. */
static void nc_row(const CpuNchwcConv* p, const CpuNchwcSet* e, size_t i, size_t oy, NcRow* r) {
  const size_t B = p->block, ybs = p->oh * p->ow * B;
  r->x0 = full_block(p, i, e->ib, &r->ks, &r->rs, &r->cs);
  r->ibs = p->nchw_in ? B * p->h * p->w : p->h * p->w * B;
  r->w = p->wp + e->wofs;
  const size_t off = ((i * p->mb + e->ob) * p->oh + oy) * p->ow * B;
  r->y0 = p->y + off;
  r->z0 = p->z ? p->z + off : NULL;
  r->ybs = ybs;
  r->nib = e->nib;
  r->klast = p->c - (e->ib + e->nib - 1) * B < B ? p->c - (e->ib + e->nib - 1) * B : B;
  r->taps = p->kh * p->kw;
  r->iy0 = (int64_t)(oy * p->sh) - (int64_t)p->pt;
  r->u0 = r->u1 = 0;
  for (size_t u = 0; u < p->kh; u++) {
    const int64_t iy = r->iy0 + (int64_t)(u * p->dh);
    if (iy < 0) r->u0 = u + 1;
    if (iy >= 0 && iy < (int64_t)p->h) r->u1 = u + 1;
  }
  if (r->u1 < r->u0) r->u1 = r->u0;
}

/* The output columns [oa, ob_) whose every tap lies inside the row
 * (oa = ob_ = ow when none). */
static void nc_interior(const CpuNchwcConv* p, size_t* oa, size_t* ob_) {
  const size_t sw = p->sw, span = (p->kw - 1) * p->dw;
  size_t a = (p->pl + sw - 1) / sw, b = 0;
  if (p->w + p->pl >= span + 1) {
    b = (p->w + p->pl - span - 1) / sw + 1;
    if (b > p->ow) b = p->ow;
  }
  if (a >= b) a = b = p->ow;
  *oa = a, *ob_ = b;
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
/* Tile widths: 24 accumulators at most of AVX-512's 32 registers, 12 of
 * AVX2's 16, beside the set's weight vectors and the broadcast. */
NC_DEFINE_FULL_PASS(avx512, "avx512f",
                    NC_FULL_CASE(avx512, 1, 12) NC_FULL_CASE(avx512, 2, 12)
                        NC_FULL_CASE(avx512, 3, 8) NC_FULL_CASE(avx512, 4, 6))
NC_DEFINE_FULL_PASS(avx2, "avx2,fma", NC_FULL_CASE(avx2, 1, 12) NC_FULL_CASE(avx2, 2, 6))

typedef void (*NcPassFn)(const CpuNchwcConv*, const CpuNchwcSet*, const NcRow*, size_t, size_t);

/* Packed weights of one set up to this many bytes run each output row in
 * one pass over all input blocks and kernel rows, the sums in registers;
 * larger ones would stream from L2 (or beyond) for every tile, so the
 * rows [oy0, oy1) of a task run one pass per input block and kernel row,
 * each reading that pass's weights (at most 4 x 7 x 16 x 16 floats) from
 * L1 for every tile and adding to the partial sums in Y. */
#define NC_FULL_ONE_PASS_BYTES 16384

static void full_chunk(const CpuNchwcConv* p, const CpuNchwcSet* e, size_t i, size_t oy0,
                       size_t oy1, NcPassFn pass) {
  const size_t B = p->block, taps = p->kh * p->kw, per = taps * B * e->nob * B;
  size_t oa, ob_;
  nc_interior(p, &oa, &ob_);
  NcRow r;
  if (e->nib * per * sizeof(float) <= NC_FULL_ONE_PASS_BYTES) {
    for (size_t oy = oy0; oy < oy1; oy++) {
      nc_row(p, e, i, oy, &r);
      r.pu0 = r.u0, r.pu1 = r.u1, r.first = r.last = true;
      pass(p, e, &r, oa, ob_);
    }
  } else {
    for (size_t ib = 0; ib < e->nib; ib++)
      for (size_t u = 0; u < p->kh; u++)
        for (size_t oy = oy0; oy < oy1; oy++) {
          nc_row(p, e, i, oy, &r);
          if (u < r.u0 || u >= r.u1) {
            if (ib == 0 && u == 0 && r.u0 == r.u1) { /* no kernel row inside: the bias */
              r.pu0 = r.pu1 = 0, r.first = r.last = true;
              pass(p, e, &r, oa, ob_);
            }
            continue;
          }
          const size_t kb = p->c - (e->ib + ib) * B;
          r.x0 += ib * r.ibs;
          r.w += ib * per;
          r.nib = 1;
          r.klast = kb < B ? kb : B;
          r.pu0 = u, r.pu1 = u + 1;
          r.first = ib == 0 && u == r.u0;
          r.last = ib + 1 == e->nib && u + 1 == r.u1;
          pass(p, e, &r, oa, ob_);
        }
  }
  if (cpu_act_is_row(p->act))
    for (size_t oy = oy0; oy < oy1; oy++)
      for (size_t o = 0; o < e->nob; o++) {
        float* y = p->y + ((i * p->mb + e->ob + o) * p->oh + oy) * p->ow * B;
        cpu_act_row(y, y, p->ow * B, p->act, p->alpha, p->lo, p->hi);
      }
}
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
  size_t rows;         /* full: output rows per task */
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

/* Full: a task per set of output blocks and chunk of j->rows output rows
 * (the chunk's partial sums, up to 16 KB, stay in L1 between passes). */
static void full_tasks(void* user, size_t begin, size_t end) {
  NcJob* j = user;
  const CpuNchwcConv* p = j->p;
  const size_t chunks = blocks_of(p->oh, j->rows);
  size_t polled = 0;
  for (size_t t = begin; t < end; t++) {
    const size_t oy0 = t % chunks * j->rows, rest = t / chunks;
    const size_t oy1 = oy0 + j->rows < p->oh ? oy0 + j->rows : p->oh;
    const CpuNchwcSet* e = &p->sets[rest % p->nsets];
    const size_t i = rest / p->nsets;
    if (cpu_stop_poll(&j->stop, &polled, (oy1 - oy0) * p->ow * p->kh * p->kw * e->nib * p->block))
      return;
    switch (j->path) {
#if NC_X86
    case CPU_NCHWC_AVX512:
      full_chunk(p, e, i, oy0, oy1, full_pass_avx512);
      break;
    case CPU_NCHWC_AVX2:
      full_chunk(p, e, i, oy0, oy1, full_pass_avx2);
      break;
#endif
    default:
      for (size_t oy = oy0; oy < oy1; oy++) {
        full_scalar(p, e, i, oy);
        for (size_t o = 0; o < e->nob; o++) {
          const size_t off = ((i * p->mb + e->ob + o) * p->oh + oy) * p->ow * p->block;
          nc_epilogue(p, p->y + off, p->z ? p->z + off : NULL, p->ow * p->block);
        }
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
    const size_t px = 16384 / (cpu_nchwc_set_blocks(p->block) * p->block * sizeof(float));
    j.rows = px / p->ow ? px / p->ow : 1;
    if (!cpu_mul_size(p->n * p->nsets, blocks_of(p->oh, j.rows), &tasks))
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
  CpuNchwcSet* sets;
} NcState;

static void nc_release(void* state) {
  NcState* s = state;
  if (!s) return;
  free(s->wp);
  free(s->sets);
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
  const size_t m = (size_t)wd[0], g = (size_t)group;
  size_t cin = 0;
  if (!cpu_mul_size((size_t)wd[1], g, &cin) || m % g)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "group %lld does not divide W's %lld output channels", (long long)group,
                     (long long)wd[0]);
  if (depthwise) cin = g;
  NcState* ns = calloc(1, sizeof *ns);
  if (!ns) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  CpuActivation a;
  st = cpu_read_activation(node, &a);
  if (st) {
    free(ns);
    return st;
  }
  size_t floats = 0, nsets = 0;
  if (depthwise) {
    floats = cpu_nchwc_depthwise_floats(m, k[0], k[1], (size_t)block);
  } else {
    ns->sets = calloc(blocks_of(m, (size_t)block), sizeof *ns->sets);
    if (ns->sets)
      nsets = cpu_nchwc_conv_sets(m, cin, g, k[0], k[1], (size_t)block, ns->sets, &floats);
  }
  ns->wp = floats && (depthwise || ns->sets) ? malloc(floats * sizeof(float)) : NULL;
  if (!ns->wp) {
    nc_release(ns);
    return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory for the packed weights");
  }
  const float* w = cpu_host->tensor_data(wt);
  if (depthwise)
    cpu_nchwc_pack_depthwise(w, m, k[0], k[1], (size_t)block, ns->wp);
  else
    cpu_nchwc_pack_conv(w, m, cin, g, k[0], k[1], (size_t)block, ns->sets, nsets, ns->wp);
  ns->geo = (CpuNchwcConv){.c = cin,
                           .m = m,
                           .mb = blocks_of(m, (size_t)block),
                           .block = (size_t)block,
                           .depthwise = depthwise,
                           .full = !pointwise && !depthwise,
                           .sets = ns->sets,
                           .nsets = nsets,
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

/* The layout moves (reorders, global average, gate scale) split over the
 * thread pool by channel blocks of images: every unit writes its own part
 * of Y, so the result does not depend on the thread count. Tensors under
 * NC_MOVE_SERIAL floats run on the calling thread (waking the pool costs
 * more than the copy). */
#define NC_MOVE_SERIAL 16384
typedef enum { NC_MOVE_IN, NC_MOVE_OUT, NC_MOVE_GAP, NC_MOVE_SCALE } NcMoveKind;
typedef struct NcMove {
  NcMoveKind kind;
  const float* x;
  const float* s;
  float* y;
  size_t c, cb, hw, block;
} NcMove;

static void nc_move_tasks(void* user, size_t u0, size_t u1) {
  const NcMove* m = user;
  const size_t plane = m->hw * m->block;
  switch (m->kind) {
  case NC_MOVE_IN:
    reorder_input_units(m->x, m->y, m->c, m->hw, m->block, u0, u1);
    break;
  case NC_MOVE_OUT:
    reorder_output_units(m->x, m->y, m->c, m->cb, m->hw, m->block, u0, u1);
    break;
  case NC_MOVE_GAP:
    cpu_nchwc_global_average(m->x + u0 * plane, m->y + u0 * m->block, 1, u1 - u0, m->hw, m->block);
    break;
  case NC_MOVE_SCALE:
    cpu_nchwc_scale(m->x + u0 * plane, m->s + u0 * m->block, m->y + u0 * plane, 1, u1 - u0, m->hw,
                    m->block);
    break;
  }
}

/* n images of m->cb channel blocks (tensors that exist: the products fit). */
static void nc_move_run(OnyxKernelContext* ctx, NcMove* m, size_t n) {
  const size_t units = n * m->cb;
  if (!units) return;
  if (units < 2 || units * m->hw * m->block < NC_MOVE_SERIAL)
    nc_move_tasks(m, 0, units);
  else
    cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), units, nc_move_tasks, m);
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
  NcMove m = {.kind = NC_MOVE_IN,
              .x = cpu_host->tensor_data(x),
              .y = cpu_host->tensor_mutable_data(y),
              .c = c,
              .cb = blocks_of(c, (size_t)block),
              .hw = (size_t)d[2] * (size_t)d[3],
              .block = (size_t)block};
  nc_move_run(ctx, &m, (size_t)d[0]);
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
  NcMove m = {.kind = NC_MOVE_OUT,
              .x = cpu_host->tensor_data(x),
              .y = cpu_host->tensor_mutable_data(y),
              .c = (size_t)c,
              .cb = (size_t)d[1],
              .hw = (size_t)d[2] * (size_t)d[3],
              .block = (size_t)d[4]};
  nc_move_run(ctx, &m, (size_t)d[0]);
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
  NcMove m = {.kind = NC_MOVE_GAP,
              .x = cpu_host->tensor_data(x),
              .y = cpu_host->tensor_mutable_data(y),
              .cb = (size_t)d[1],
              .hw = (size_t)d[2] * (size_t)d[3],
              .block = (size_t)d[4]};
  nc_move_run(ctx, &m, (size_t)d[0]);
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
  NcMove m = {.kind = NC_MOVE_SCALE,
              .x = cpu_host->tensor_data(x),
              .s = cpu_host->tensor_data(sc),
              .y = cpu_host->tensor_mutable_data(y),
              .cb = (size_t)d[1],
              .hw = (size_t)d[2] * (size_t)d[3],
              .block = (size_t)d[4]};
  nc_move_run(ctx, &m, (size_t)d[0]);
  return NULL;
}

static const int32_t F32[] = {ONYX_ELEM_FLOAT32};
const OnyxTypeConstraint cpu_nchwc_tc_f32[1] = {{"T", F32, 1}};
const OnyxAlias cpu_nchwc_inplace[1] = {{0, 0, ONYX_ALIAS_INPLACE}};

OnyxStatus* cpu_nchwc_register_defs(OnyxKernelRegistry* r, const OnyxKernelDef* defs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    OnyxStatus* st = cpu_host->register_kernel(r, &defs[i]);
    if (st) return st;
  }
  return NULL;
}

OnyxStatus* cpu_register_nchwc(OnyxKernelRegistry* r) {
  /* NchwcScale's Y may take X's buffer. */
  const OnyxKernelDef defs[] = {
      CPU_NCHWC_DEF("NchwcConv", nc_conv_create, nc_conv_compute, nc_release, NULL, 0),
      CPU_NCHWC_DEF("ReorderInput", NULL, nc_reorder_input_compute, NULL, NULL, 0),
      CPU_NCHWC_DEF("ReorderOutput", NULL, nc_reorder_output_compute, NULL, NULL, 0),
      CPU_NCHWC_DEF("NchwcGlobalAveragePool", NULL, nc_gap_compute, NULL, NULL, 0),
      CPU_NCHWC_DEF("NchwcScale", NULL, nc_scale_compute, NULL, cpu_nchwc_inplace, 1),
  };
  return cpu_nchwc_register_defs(r, defs, sizeof defs / sizeof defs[0]);
}
