/* cpu_conv_depthwise.c — see cpu_conv_depthwise.h. The vector bodies are
 * compiled for their ISA with target attributes and called only after a
 * cpuid check, so the library still runs on machines without AVX2. */
#include "cpu_conv_depthwise.h"

#include "cpu_nn.h"
#include "cpu_util.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define DW_X86 1
#include "cpu_avx2.h"
#include <immintrin.h>
#else
#define DW_X86 0
#endif

/* ------------------------------------------------------------------------ */
/* Path choice                                                               */
/* ------------------------------------------------------------------------ */

static _Atomic int forced_path = -1;

/* The path enum counts as cpu_isa_level does: scalar, AVX2, AVX-512. */
_Static_assert((int)CPU_DW_SCALAR == (int)CPU_ISA_GENERIC &&
                   (int)CPU_DW_AVX2 == (int)CPU_ISA_AVX2 &&
                   (int)CPU_DW_AVX512 == (int)CPU_ISA_AVX512,
               "the path enum follows cpu_isa_level");

static int machine_path(void) {
  return cpu_isa_level();
}

int cpu_conv_depthwise_path(void) {
  const int m = machine_path(), f = forced_path;
  return f >= 0 && f < m ? f : m;
}

void cpu_conv_depthwise_force_path(int path) {
  forced_path = path;
}

static _Atomic int forced_cblock = -1;

void cpu_conv_depthwise_force_cblock(int on) {
  forced_cblock = on;
}

/* ONYX_CPU_CONV_DW_CBLOCK=0 (read once) keeps every depthwise conv on the
 * column path; a test's cpu_conv_depthwise_force_cblock overrides it. */
static int cblock_mode(void) {
  static _Atomic int cached = -1;
  const int f = forced_cblock;
  if (f >= 0) return f;
  int on = cached;
  if (on < 0) {
    const char* e = getenv("ONYX_CPU_CONV_DW_CBLOCK");
    on = !(e && !strcmp(e, "0"));
    cached = on;
  }
  return on ? -1 : 0;
}

bool cpu_conv_depthwise_enabled(void) {
  static _Atomic int cached = -1;
  int on = cached;
  if (on < 0) {
    const char* e = getenv("ONYX_CPU_CONV_DEPTHWISE");
    on = !(e && !strcmp(e, "0"));
    cached = on;
  }
  return on != 0;
}

/* ------------------------------------------------------------------------ */
/* One plane                                                                 */
/* ------------------------------------------------------------------------ */

/* What every plane of a run shares, for the vector paths: a row of w zeros
 * that kernel rows above and below the input read instead (so every block
 * of output rows runs the same code), and the row's column segments:
 * blocks of nv full vectors of `lanes` columns whose reads all lie inside
 * the row, and border vectors (nv 0; their first n columns are outputs)
 * whose kernel column v reads lanes [lo[mask + v], hi[mask + v])
 * (dw_lohi). */
typedef struct DwSeg {
  int64_t ox, n;
  int nv;
  size_t mask;
} DwSeg;

typedef struct DwPlan {
  const float* zero;
  const DwSeg* seg;
  size_t nseg;
  const int32_t *lo, *hi;
} DwPlan;

/* One output plane (image, output channel) and the geometry, in int64 so
 * that the bounds below cannot overflow (the host bounds pads, strides and
 * dilations by 2^31 and the dims by what memory holds). */
typedef struct DwPlane {
  const float* x; /* the input plane, h x w */
  const float* k; /* its kh x kw weights (cg planes of them, in_plane and
                   * kh * kw apart, for a group of cg channels) */
  float* y;       /* the output plane, oh x ow */
  const float* z; /* Z's plane, or NULL */
  float bias;
  int64_t h, w, oh, ow, sh, sw, dh, dw, pt, pl, kh, kw, cg, in_plane;
  int act;
  float alpha, lo, hi;
  const DwPlan* plan; /* the vector paths' */
} DwPlane;

/* The kernel rows [*u0, *u1) of output row oy that fall inside the input. */
static void dw_rows(const DwPlane* q, int64_t oy, int64_t* base, int64_t* u0, int64_t* u1) {
  const int64_t b = oy * q->sh - q->pt;
  int64_t lo = b >= 0 ? 0 : (-b + q->dh - 1) / q->dh;
  int64_t hi = b > q->h - 1 ? 0 : (q->h - 1 - b) / q->dh + 1;
  if (hi > q->kh) hi = q->kh;
  if (lo > hi) lo = hi;
  *base = b, *u0 = lo, *u1 = hi;
}

/* Columns [lo, hi) of `lanes` output columns from ox on whose tap at input
 * column offset `off` (v * dw - pl) lies inside the row, for a gather-style
 * read ((ox + l) * sw + off). */
static void dw_lanes(const DwPlane* q, int64_t ox, int64_t off, int64_t lanes, int64_t* lo,
                     int64_t* hi) {
  const int64_t ix0 = ox * q->sw + off, s = q->sw;
  int64_t a = ix0 >= 0 ? 0 : (-ix0 + s - 1) / s;
  int64_t b = ix0 > q->w - 1 ? 0 : (q->w - 1 - ix0) / s + 1;
  if (b > lanes) b = lanes;
  if (a > b) a = b;
  *lo = a, *hi = b;
}

/* Raw input columns [lo, hi) of the `raw` floats read from ix0 on that lie
 * inside the row (the contiguous reads of strides 1 and 2). */
static void dw_raw(const DwPlane* q, int64_t ix0, int64_t raw, int64_t* lo, int64_t* hi) {
  int64_t a = ix0 >= 0 ? 0 : -ix0;
  int64_t b = ix0 > q->w - 1 ? 0 : q->w - ix0;
  if (b > raw) b = raw;
  if (a > b) a = b;
  *lo = a, *hi = b;
}

/* The output columns ox from which a full vector of `lanes` columns reads
 * only inside the row for every tap (contiguous reads of strides 1 and 2
 * span (lanes - 1) * sw + 1 floats; stride 2 loads one more): [*a, *b],
 * empty when *a > *b. */
static void dw_interior(const DwPlane* q, int64_t lanes, int64_t* a, int64_t* b) {
  const int64_t s = q->sw, extra = s == 2 ? 1 : 0;
  *a = (q->pl + s - 1) / s;
  const int64_t r = q->w - 1 + q->pl - (q->kw - 1) * q->dw - (lanes - 1) * s - extra;
  *b = r < 0 ? -1 : r / s;
  if (*b > q->ow - lanes) *b = q->ow - lanes;
}

/* Pointer arithmetic in integers: a masked read's base may lie before the
 * row (only its in-row lanes are accessed). */
static inline const float* dw_at(const float* row, int64_t i) {
  return (const float*)(uintptr_t)((uintptr_t)row + (uintptr_t)(i * (int64_t)sizeof(float)));
}

static void dw_plane_scalar(const DwPlane* q) {
  for (int64_t oy = 0; oy < q->oh; oy++) {
    int64_t base, u0, u1;
    dw_rows(q, oy, &base, &u0, &u1);
    float* yr = q->y + oy * q->ow;
    const float* zr = q->z ? q->z + oy * q->ow : NULL;
    for (int64_t ox = 0; ox < q->ow; ox++) {
      float acc = q->bias;
      for (int64_t ci = 0; ci < q->cg; ci++)
        for (int64_t u = u0; u < u1; u++) {
          const float* xr = q->x + ci * q->in_plane + (base + u * q->dh) * q->w;
          const float* kr = q->k + (ci * q->kh + u) * q->kw;
          int64_t lo, hi;
          /* taps v with 0 <= ox * sw - pl + v * dw < w */
          const int64_t ix0 = ox * q->sw - q->pl;
          lo = ix0 >= 0 ? 0 : (-ix0 + q->dw - 1) / q->dw;
          hi = ix0 > q->w - 1 ? 0 : (q->w - 1 - ix0) / q->dw + 1;
          if (hi > q->kw) hi = q->kw;
          for (int64_t v = lo; v < hi; v++)
            acc += xr[ix0 + v * q->dw] * kr[v];
        }
      if (zr) acc += zr[ox];
      yr[ox] = cpu_act_apply(acc, q->act, q->alpha, q->lo, q->hi);
    }
  }
}

/* The activations the vector epilogues apply; others (the scalar rule's
 * cases past these) are applied to the stored plane by cpu_act_row. */
static bool dw_vector_act(int act) {
  return act == CPU_ACT_NONE || act == CPU_ACT_RELU || act == CPU_ACT_LEAKY_RELU ||
         act == CPU_ACT_CLIP;
}

/* The stored plane through cpu_act_row (the row activations vectorized). */
static void dw_plane_act(const DwPlane* q) {
  const size_t n = (size_t)q->oh * (size_t)q->ow;
  cpu_act_row(q->y, q->y, n, q->act, q->alpha, q->lo, q->hi);
}

/* The lanes [*lo, *hi) that kernel column v reads inside the row for the
 * vector of n output columns from ox: raw input floats for strides 1 and 2
 * (S 1, 2), output lanes of a gather (S 0). */
static void dw_lohi(const DwPlane* q, int S, int64_t ox, int64_t v, int64_t n, int64_t* lo,
                    int64_t* hi) {
  const int64_t off = v * q->dw - q->pl;
  if (S == 0)
    dw_lanes(q, ox, off, n, lo, hi);
  else
    dw_raw(q, ox * q->sw + off, S == 1 ? n : 2 * n - 1, lo, hi);
}

/* The column segments of a row for vectors of `lanes` columns, into seg
 * (room for ow / lanes + 1) and, for border vectors, lo / hi (room for kw
 * per border vector); the count. Interior blocks hold up to 4 vectors. */
static size_t dw_segments(const DwPlane* q, int64_t lanes, int S, DwSeg* seg, int32_t* lo,
                          int32_t* hi) {
  int64_t a, b;
  dw_interior(q, lanes, &a, &b);
  size_t nseg = 0, mask = 0;
  for (int64_t ox = 0; ox < q->ow;) {
    DwSeg* sg = &seg[nseg++];
    sg->ox = ox;
    if (ox < a || ox > b) {
      sg->nv = 0;
      sg->n = q->ow - ox < lanes ? q->ow - ox : lanes;
      sg->mask = mask;
      for (int64_t v = 0; v < q->kw; v++, mask++) {
        int64_t l, h;
        dw_lohi(q, S, ox, v, sg->n, &l, &h);
        lo[mask] = (int32_t)l, hi[mask] = (int32_t)h;
      }
      ox += lanes;
    } else {
      const int64_t nv = (b - ox) / lanes + 1;
      sg->nv = nv > 4 ? 4 : (int)nv;
      sg->n = sg->nv * lanes;
      sg->mask = 0; /* no masks */
      ox += sg->n;
    }
  }
  return nseg;
}

#if DW_X86
#define T512 __attribute__((target("avx512f,avx2,fma,avx")))
#define T256 __attribute__((target("avx2,fma,avx")))
/* Instrumented builds (sanitizers, the fuzz targets) neither force the
 * specializations inline nor unroll them: with clang's instrumentation the
 * forced copies took minutes and gigabytes to compile, and speed is not what
 * those builds check. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DW_INSTRUMENTED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DW_INSTRUMENTED 1
#endif
#ifdef DW_INSTRUMENTED
#define INLINE static inline
#define DW_UNROLL
#else
#define INLINE    static inline __attribute__((always_inline))
/* The loops over the (at most 16) accumulators unrolled, so that they stay
 * in registers. */
#define DW_UNROLL _Pragma("GCC unroll 16")
#endif

/* ---------------------------------- AVX-512 ----------------------------- */

T512 INLINE __m512 act512(__m512 v, int act, float alpha, float lo, float hi) {
  const __m512 zero = _mm512_setzero_ps();
  /* max/min return their second operand on NaN: NaN is kept */
  if (act == CPU_ACT_RELU) return _mm512_max_ps(zero, v);
  if (act == CPU_ACT_LEAKY_RELU)
    return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, _mm512_set1_ps(alpha));
  if (act == CPU_ACT_CLIP)
    return _mm512_min_ps(_mm512_set1_ps(hi), _mm512_max_ps(_mm512_set1_ps(lo), v));
  return v;
}

/* Bits [lo, hi) of a 32-bit mask (0 <= lo <= hi <= 32). */
static inline uint32_t bits32(int64_t lo, int64_t hi) {
  const uint64_t below_hi = (1ull << hi) - 1, below_lo = (1ull << lo) - 1;
  return (uint32_t)(below_hi & ~below_lo);
}

/* The epilogue of nv vectors of output columns from ox: Z, activation,
 * store (the last vector's first `tail` lanes only when tail < 16). */
T512 INLINE void store512(const DwPlane* q, float* yr, const float* zr, int64_t ox, __m512* acc,
                          int nv, int64_t tail) {
  const bool vact = dw_vector_act(q->act);
  DW_UNROLL
  for (int j = 0; j < nv; j++) {
    const __mmask16 m = j == nv - 1 && tail < 16 ? (__mmask16)bits32(0, tail) : (__mmask16)0xFFFF;
    __m512 v = acc[j];
    if (zr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, zr + ox + 16 * j));
    if (vact) v = act512(v, q->act, q->alpha, q->lo, q->hi);
    _mm512_mask_storeu_ps(yr + ox + 16 * j, m, v);
  }
}

/* R output rows from oy (kernel rows outside the input read the plan's
 * zero row) x segment sg's columns, for column stride S (1, 2; 0: any, gathered): nv
 * vectors of 16 whose reads all lie inside the rows, or (nv 0) one border
 * vector read through masks (nothing outside the row is accessed). R
 * independent accumulators per vector hide the FMA latency where a row
 * holds a single vector (widths up to 16). */
T512 INLINE void kern512(const DwPlane* q, int64_t oy, int R, const DwSeg* sg, int nv, int S) {
  __m512 acc[16];
  const __m512 b = _mm512_set1_ps(q->bias);
  const int nacc = R * (nv ? nv : 1);
  DW_UNROLL
  for (int i = 0; i < nacc; i++)
    acc[i] = b;
  const int64_t kw = q->kw, dw = q->dw, sw = q->sw, w = q->w, ox = sg->ox;
  const int32_t* mlo = q->plan->lo + sg->mask;
  const int32_t* mhi = q->plan->hi + sg->mask;
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i idx =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(S == 0 ? (int)sw : 1));
  /* (channel, kernel row) pairs in order */
  for (int64_t ci = 0, u = 0; ci < q->cg; u = u + 1 == q->kh ? (ci++, 0) : u + 1) {
    const int64_t cu = ci * q->kh + u;
    const float* xr[4];
    DW_UNROLL
    for (int r = 0; r < R; r++) {
      const int64_t iy = (oy + r) * q->sh - q->pt + u * q->dh;
      xr[r] = iy >= 0 && iy < q->h ? q->x + ci * q->in_plane + iy * w : q->plan->zero;
    }
    const float* kr = q->k + cu * kw;
    for (int64_t v = 0; v < kw; v++) {
      const int64_t ix0 = ox * sw - q->pl + v * dw;
      const __m512 wv = _mm512_set1_ps(kr[v]);
      if (!nv) {
        if (mlo[v] >= mhi[v]) continue;
        const uint32_t m = bits32(mlo[v], mhi[v]);
        DW_UNROLL
        for (int r = 0; r < R; r++) {
          const float* p = dw_at(xr[r], ix0);
          __m512 x;
          if (S == 1)
            x = _mm512_maskz_loadu_ps((__mmask16)m, p);
          else if (S == 2)
            x = _mm512_permutex2var_ps(
                _mm512_maskz_loadu_ps((__mmask16)(m & 0xFFFF), p), even,
                _mm512_maskz_loadu_ps((__mmask16)(m >> 16), dw_at(xr[r], ix0 + 16)));
          else
            x = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), (__mmask16)m, idx, p, 4);
          acc[r] = _mm512_fmadd_ps(x, wv, acc[r]);
        }
      } else {
        DW_UNROLL
        for (int r = 0; r < R; r++) {
          const float* p = xr[r] + ix0;
          DW_UNROLL
          for (int j = 0; j < nv; j++) {
            __m512 x;
            if (S == 1)
              x = _mm512_loadu_ps(p + 16 * j);
            else if (S == 2)
              x = _mm512_permutex2var_ps(_mm512_loadu_ps(p + 32 * j), even,
                                         _mm512_loadu_ps(p + 32 * j + 16));
            else
              x = _mm512_i32gather_ps(idx, p + 16 * j * sw, 4);
            acc[r * nv + j] = _mm512_fmadd_ps(x, wv, acc[r * nv + j]);
          }
        }
      }
    }
  }
  const int per = nv ? nv : 1;
  DW_UNROLL
  for (int r = 0; r < R; r++)
    store512(q, q->y + (oy + r) * q->ow, q->z ? q->z + (oy + r) * q->ow : NULL, ox, &acc[r * per],
             per, nv ? 16 : sg->n);
}

/* R output rows from oy, segment by segment. */
T512 INLINE void rows512(const DwPlane* q, int64_t oy, int R, int S) {
  const DwPlan* pl = q->plan;
  for (size_t i = 0; i < pl->nseg; i++) {
    const DwSeg* sg = &pl->seg[i];
    switch (sg->nv) {
    case 0:
      kern512(q, oy, R, sg, 0, S);
      break;
    case 1:
      kern512(q, oy, R, sg, 1, S);
      break;
    case 2:
      kern512(q, oy, R, sg, 2, S);
      break;
    case 3:
      kern512(q, oy, R, sg, 3, S);
      break;
    default:
      kern512(q, oy, R, sg, 4, S);
      break;
    }
  }
}

/* Output rows 4 at a time, then the 1 to 3 left. */
T512 INLINE void plane512(const DwPlane* q, int S) {
  int64_t oy = 0;
  for (; oy + 4 <= q->oh; oy += 4)
    rows512(q, oy, 4, S);
  if (q->oh - oy == 3)
    rows512(q, oy, 3, S);
  else if (q->oh - oy == 2)
    rows512(q, oy, 2, S);
  else if (q->oh - oy == 1)
    rows512(q, oy, 1, S);
}

T512 static void dw_plane_avx512(const DwPlane* q) {
  if (q->sw == 1)
    plane512(q, 1);
  else if (q->sw == 2)
    plane512(q, 2);
  else
    plane512(q, 0);
}

/* ---------------------------------- AVX2 -------------------------------- */

T256 INLINE __m256i lanes8(int64_t lo, int64_t hi) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_and_si256(_mm256_cmpgt_epi32(lane, _mm256_set1_epi32((int)lo - 1)),
                          _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), lane));
}

/* The even lanes of the 16 floats e0, e1 in order. */
T256 INLINE __m256 even8(__m256 e0, __m256 e1) {
  const __m256 e = _mm256_shuffle_ps(e0, e1, _MM_SHUFFLE(2, 0, 2, 0));
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
}

T256 INLINE void store256(const DwPlane* q, float* yr, const float* zr, int64_t ox, __m256* acc,
                          int nv, int64_t tail) {
  const bool vact = dw_vector_act(q->act);
  DW_UNROLL
  for (int j = 0; j < nv; j++) {
    const int64_t n = j == nv - 1 ? tail : 8;
    __m256 v = acc[j];
    if (zr)
      v = _mm256_add_ps(v, n >= 8 ? _mm256_loadu_ps(zr + ox + 8 * j)
                                  : _mm256_maskload_ps(zr + ox + 8 * j, lanes8(0, n)));
    if (vact) v = cpu_act_avx2(v, q->act, q->alpha, q->lo, q->hi);
    cpu_store_first_avx2(yr + ox + 8 * j, v, (size_t)n);
  }
}

/* kern512 with vectors of 8 columns (R * nv <= 8 accumulators). */
T256 INLINE void kern256(const DwPlane* q, int64_t oy, int R, const DwSeg* sg, int nv, int S) {
  __m256 acc[8];
  const __m256 b = _mm256_set1_ps(q->bias);
  const int nacc = R * (nv ? nv : 1);
  DW_UNROLL
  for (int i = 0; i < nacc; i++)
    acc[i] = b;
  const int64_t kw = q->kw, dw = q->dw, sw = q->sw, w = q->w, ox = sg->ox;
  const int32_t* mlo = q->plan->lo + sg->mask;
  const int32_t* mhi = q->plan->hi + sg->mask;
  const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                         _mm256_set1_epi32(S == 0 ? (int)sw : 1));
  /* (channel, kernel row) pairs in order */
  for (int64_t ci = 0, u = 0; ci < q->cg; u = u + 1 == q->kh ? (ci++, 0) : u + 1) {
    const int64_t cu = ci * q->kh + u;
    const float* xr[4];
    DW_UNROLL
    for (int r = 0; r < R; r++) {
      const int64_t iy = (oy + r) * q->sh - q->pt + u * q->dh;
      xr[r] = iy >= 0 && iy < q->h ? q->x + ci * q->in_plane + iy * w : q->plan->zero;
    }
    const float* kr = q->k + cu * kw;
    for (int64_t v = 0; v < kw; v++) {
      const int64_t ix0 = ox * sw - q->pl + v * dw;
      const __m256 wv = _mm256_set1_ps(kr[v]);
      if (!nv) {
        if (mlo[v] >= mhi[v]) continue;
        const __m256i m0 = lanes8(mlo[v], mhi[v]);
        const __m256i m1 = lanes8(mlo[v] - 8, mhi[v] - 8);
        DW_UNROLL
        for (int r = 0; r < R; r++) {
          const float* p = dw_at(xr[r], ix0);
          __m256 x;
          if (S == 1)
            x = _mm256_maskload_ps(p, m0);
          else if (S == 2)
            x = even8(_mm256_maskload_ps(p, m0), _mm256_maskload_ps(dw_at(xr[r], ix0 + 8), m1));
          else
            x = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), p, idx, _mm256_castsi256_ps(m0), 4);
          acc[r] = _mm256_fmadd_ps(x, wv, acc[r]);
        }
      } else {
        DW_UNROLL
        for (int r = 0; r < R; r++) {
          const float* p = xr[r] + ix0;
          DW_UNROLL
          for (int j = 0; j < nv; j++) {
            __m256 x;
            if (S == 1)
              x = _mm256_loadu_ps(p + 8 * j);
            else if (S == 2)
              x = even8(_mm256_loadu_ps(p + 16 * j), _mm256_loadu_ps(p + 16 * j + 8));
            else
              x = _mm256_i32gather_ps(p + 8 * j * sw, idx, 4);
            acc[r * nv + j] = _mm256_fmadd_ps(x, wv, acc[r * nv + j]);
          }
        }
      }
    }
  }
  const int per = nv ? nv : 1;
  DW_UNROLL
  for (int r = 0; r < R; r++)
    store256(q, q->y + (oy + r) * q->ow, q->z ? q->z + (oy + r) * q->ow : NULL, ox, &acc[r * per],
             per, nv ? 8 : sg->n);
}

/* R output rows from oy, segment by segment; with R of 3 or 4 (8
 * accumulators at most) an interior block of 3 or 4 vectors runs as two. */
T256 INLINE void rows256(const DwPlane* q, int64_t oy, int R, int S) {
  const DwPlan* pl = q->plan;
  for (size_t i = 0; i < pl->nseg; i++) {
    const DwSeg* sg = &pl->seg[i];
    if (R > 2 && sg->nv > 2) {
      DwSeg half = *sg;
      kern256(q, oy, R, &half, 2, S);
      half.ox += 16;
      if (sg->nv == 3)
        kern256(q, oy, R, &half, 1, S);
      else
        kern256(q, oy, R, &half, 2, S);
      continue;
    }
    switch (sg->nv) {
    case 0:
      kern256(q, oy, R, sg, 0, S);
      break;
    case 1:
      kern256(q, oy, R, sg, 1, S);
      break;
    case 2:
      kern256(q, oy, R, sg, 2, S);
      break;
    case 3:
      kern256(q, oy, R < 3 ? R : 1, sg, 3, S); /* R 1 or 2 here */
      break;
    default:
      kern256(q, oy, R < 3 ? R : 1, sg, 4, S);
      break;
    }
  }
}

T256 INLINE void plane256(const DwPlane* q, int S) {
  int64_t oy = 0;
  for (; oy + 4 <= q->oh; oy += 4)
    rows256(q, oy, 4, S);
  if (q->oh - oy == 3)
    rows256(q, oy, 3, S);
  else if (q->oh - oy == 2)
    rows256(q, oy, 2, S);
  else if (q->oh - oy == 1)
    rows256(q, oy, 1, S);
}

T256 static void dw_plane_avx2(const DwPlane* q) {
  if (q->sw == 1)
    plane256(q, 1);
  else if (q->sw == 2)
    plane256(q, 2);
  else
    plane256(q, 0);
}
#endif /* DW_X86 */

/* ------------------------------------------------------------------------ */
/* Channel-blocked path                                                      */
/* ------------------------------------------------------------------------ */

/* Depthwise convs (one input channel per group, as many output channels as
 * input ones) on planes narrower than CB_MAX_OW columns (CB_MAX_OW_AVX2 on
 * the AVX2 path), or with windows of
 * at least CB_MIN_TAPS taps, run vectorized over channels instead of
 * columns: L channels (16 with AVX-512, 8 with AVX2)
 * of one image are transposed into a zero-padded block of (Hp x Wp) L-wide
 * pixels, each output pixel is L accumulators fed by one load and one FMA
 * per tap (no masks: the padding is in the block), and the results are
 * transposed back into Y's planes with Z and the activation. The column
 * path fills 7 of 16 lanes on a 7-wide plane; here every lane holds a
 * channel whatever the width. Per output pixel the sum is bias, then kernel
 * rows, then columns, as on the other paths. */
#define CB_MAX_OW 32
/* The AVX2 column kernel's 8-lane vectors run slower per tap than the
 * AVX-512 ones, and the channel-blocked kernel wins up to 56 columns there
 * (3x3, 144 channels 56x56: 309 against 346 us; 96 channels 112x112 stride
 * 2: 303 against 405) and ties at 112 (32 channels: 278 against 275). */
#define CB_MAX_OW_AVX2 64
/* Wider planes: the transposes cost about what the column path's partial
 * vectors waste with 3x3 windows (144 channels 56x56: 287 against 307 us,
 * 405 against 397 in another run; 16 channels 112x112: 139 against 108),
 * less than the larger windows' taps gain (5x5 at 56x56: 613 against 804
 * us; 7x7: 305 against 495). */
#define CB_MIN_TAPS 25
/* Column accumulators per register block. */
#define CB_COLS 8

typedef struct CbGeom {
  int64_t h, w, oh, ow, sh, sw, dh, dw, pt, pl, kh, kw, hp, wp;
  size_t block_floats; /* per task: padded block, output block, weights */
} CbGeom;

/* The padded block's extent and one task's floats; false when the block
 * would dwarf the input (pads or dilations far beyond it) or overflow. */
static bool cb_geom(const CpuDepthwiseRun* p, size_t lanes, CbGeom* g) {
  const CpuConvRun* r = &p->conv;
  *g = (CbGeom){.h = (int64_t)r->h,
                .w = (int64_t)r->w,
                .oh = (int64_t)r->oh,
                .ow = (int64_t)r->ow,
                .sh = (int64_t)r->sh,
                .sw = (int64_t)r->sw,
                .dh = (int64_t)r->dh,
                .dw = (int64_t)r->dw,
                .pt = (int64_t)r->pad_top,
                .pl = (int64_t)r->pad_left,
                .kh = (int64_t)p->kh,
                .kw = (int64_t)p->kw};
  int64_t hp, wp, t;
  /* rows and columns -pt .. (o - 1) s + (k - 1) d - pt of the input */
  if (!cpu_mul_i64(g->oh - 1, g->sh, &hp) || !cpu_dilated_extent(g->kh, g->dh, &t) ||
      !cpu_add_i64(hp, t, &hp) || !cpu_mul_i64(g->ow - 1, g->sw, &wp) ||
      !cpu_dilated_extent(g->kw, g->dw, &t) || !cpu_add_i64(wp, t, &wp))
    return false;
  g->hp = hp, g->wp = wp;
  size_t in_px, out_px, taps, total;
  if (!cpu_mul_size((size_t)hp, (size_t)wp, &in_px) || in_px > 4 * r->h * r->w + 4096 ||
      !cpu_mul_size((size_t)g->oh, (size_t)g->ow, &out_px) ||
      !cpu_mul_size((size_t)g->kh, (size_t)g->kw, &taps) || !cpu_add_size(in_px, out_px, &total) ||
      !cpu_add_size(total, taps, &total) || !cpu_mul_size(total, lanes, &total) ||
      !cpu_add_size(total, 15, &total))
    return false;
  g->block_floats = total / 16 * 16; /* each task's memory 64-byte aligned */
  return true;
}

typedef struct CbJob {
  const CpuDepthwiseRun* p;
  const OnyxKernelContext* ctx;
  CbGeom g;
  float* mem; /* tasks x g.block_floats */
  size_t blocks, cblocks, tasks;
  int path;
  _Atomic int stopped;
} CbJob;

#if DW_X86
/* Channels [c0, c0 + 8) (those below c) of image plane x, rows and columns
 * as read, into the padded block (pixels of `lanes` floats, these channels
 * at lane offset `half`): 8 x 8 transposes, the row tails loaded through
 * masks. The block was zeroed where the input does not reach. */
T256 static void cb_load8(const CbJob* j, const float* x, size_t c0, float* blk, size_t lanes,
                          size_t half) {
  const CbGeom* g = &j->g;
  const size_t c = j->p->c, in_plane = (size_t)(g->h * g->w);
  const int64_t rows = g->hp - g->pt < g->h ? g->hp - g->pt : g->h;
  const int64_t cols = g->wp - g->pl < g->w ? g->wp - g->pl : g->w;
  if (cols <= 0) return;
  for (int64_t iy = 0; iy < rows; iy++) {
    float* dst = blk + ((size_t)(iy + g->pt) * (size_t)g->wp + (size_t)g->pl) * lanes + half;
    for (int64_t ix = 0; ix < cols; ix += 8) {
      const int64_t n = cols - ix < 8 ? cols - ix : 8;
      const __m256i m = lanes8(0, n);
      __m256 r[8], t[8];
      for (size_t l = 0; l < 8; l++) {
        const float* src = x + (c0 + l) * in_plane + (size_t)(iy * g->w + ix);
        r[l] = c0 + l >= c ? _mm256_setzero_ps()
               : n == 8    ? _mm256_loadu_ps(src)
                           : _mm256_maskload_ps(src, m);
      }
      cpu_transpose8_avx2(r, t);
      for (int64_t q = 0; q < n; q++)
        _mm256_storeu_ps(dst + (size_t)(ix + q) * lanes, t[q]);
    }
  }
}

/* Output pixels of the block (`lanes` floats each, these 8 channels at lane
 * offset `half`) back into channels [c0, c0 + 8) of Y's image planes, with
 * Z added and the vector activations applied. */
T256 static void cb_store8(const CbJob* j, const float* out, size_t img, size_t c0, size_t lanes,
                           size_t half) {
  const CpuConvRun* r = &j->p->conv;
  const size_t c = j->p->c, plane = r->oh * r->ow;
  const bool vact = dw_vector_act(r->act);
  for (size_t p0 = 0; p0 < plane; p0 += 8) {
    const size_t n = plane - p0 < 8 ? plane - p0 : 8;
    __m256 v[8], t[8];
    for (size_t q = 0; q < 8; q++)
      v[q] = q < n ? _mm256_loadu_ps(out + (p0 + q) * lanes + half) : _mm256_setzero_ps();
    cpu_transpose8_avx2(v, t);
    for (size_t l = 0; l < 8 && c0 + l < c; l++) {
      const size_t at = (img * c + c0 + l) * plane + p0;
      __m256 y = t[l];
      if (r->z)
        y = _mm256_add_ps(y, n == 8 ? _mm256_loadu_ps(r->z + at)
                                    : _mm256_maskload_ps(r->z + at, lanes8(0, (int64_t)n)));
      if (vact) y = cpu_act_avx2(y, r->act, r->act_alpha, r->act_min, r->act_max);
      cpu_store_first_avx2(r->y + at, y, n);
    }
  }
}

/* One output row's columns [ox, ox + NC) for NC <= CB_COLS accumulators of
 * `lanes` channels, through the vector type's load / fma / store. */
#define CB_ROW(V, LOAD, FMA, STORE, L)                                                             \
  do {                                                                                             \
    V acc[CB_COLS];                                                                                \
    DW_UNROLL                                                                                      \
    for (int q = 0; q < NC; q++)                                                                   \
      acc[q] = LOAD(bias);                                                                         \
    for (int64_t u = 0; u < g->kh; u++) {                                                          \
      const float* xr = blk + (size_t)((oy * g->sh + u * g->dh) * g->wp + ox * g->sw) * (L);       \
      const float* wr = wk + (size_t)(u * g->kw) * (L);                                            \
      for (int64_t v = 0; v < g->kw; v++) {                                                        \
        const V wv = LOAD(wr + (size_t)v * (L));                                                   \
        const float* xv = xr + (size_t)(v * g->dw) * (L);                                          \
        DW_UNROLL                                                                                  \
        for (int q = 0; q < NC; q++)                                                               \
          acc[q] = FMA(LOAD(xv + (size_t)(q * g->sw) * (L)), wv, acc[q]);                          \
      }                                                                                            \
    }                                                                                              \
    float* o = out + (size_t)(oy * g->ow + ox) * (L);                                              \
    DW_UNROLL                                                                                      \
    for (int q = 0; q < NC; q++)                                                                   \
      STORE(o + (size_t)q * (L), acc[q]);                                                          \
  } while (0)

T512 INLINE void cb_row512(const CbGeom* g, const float* blk, const float* wk, const float* bias,
                           float* out, int64_t oy, int64_t ox, const int NC) {
  CB_ROW(__m512, _mm512_loadu_ps, _mm512_fmadd_ps, _mm512_storeu_ps, 16);
}

T256 INLINE void cb_row256(const CbGeom* g, const float* blk, const float* wk, const float* bias,
                           float* out, int64_t oy, int64_t ox, const int NC) {
  CB_ROW(__m256, _mm256_loadu_ps, _mm256_fmadd_ps, _mm256_storeu_ps, 8);
}

/* Every output pixel of the block, CB_COLS columns at a time, the row's
 * tail with as many accumulators as it has columns. */
#define CB_PLANE(ROW)                                                                              \
  do {                                                                                             \
    for (int64_t oy = 0; oy < g->oh; oy++) {                                                       \
      int64_t ox = 0;                                                                              \
      for (; ox + CB_COLS <= g->ow; ox += CB_COLS)                                                 \
        ROW(g, blk, wk, bias, out, oy, ox, CB_COLS);                                               \
      switch (g->ow - ox) {                                                                        \
      case 7:                                                                                      \
        ROW(g, blk, wk, bias, out, oy, ox, 7);                                                     \
        break;                                                                                     \
      case 6:                                                                                      \
        ROW(g, blk, wk, bias, out, oy, ox, 6);                                                     \
        break;                                                                                     \
      case 5:                                                                                      \
        ROW(g, blk, wk, bias, out, oy, ox, 5);                                                     \
        break;                                                                                     \
      case 4:                                                                                      \
        ROW(g, blk, wk, bias, out, oy, ox, 4);                                                     \
        break;                                                                                     \
      case 3:                                                                                      \
        ROW(g, blk, wk, bias, out, oy, ox, 3);                                                     \
        break;                                                                                     \
      case 2:                                                                                      \
        ROW(g, blk, wk, bias, out, oy, ox, 2);                                                     \
        break;                                                                                     \
      case 1:                                                                                      \
        ROW(g, blk, wk, bias, out, oy, ox, 1);                                                     \
        break;                                                                                     \
      default:                                                                                     \
        break;                                                                                     \
      }                                                                                            \
    }                                                                                              \
  } while (0)

T512 static void cb_plane512(const CbGeom* g, const float* blk, const float* wk, const float* bias,
                             float* out) {
  CB_PLANE(cb_row512);
}

T256 static void cb_plane256(const CbGeom* g, const float* blk, const float* wk, const float* bias,
                             float* out) {
  CB_PLANE(cb_row256);
}

/* Block b (image b / cblocks, channels from (b % cblocks) L) in task
 * memory mem: weights and bias packed L-wide (zero past c), X transposed
 * in, the plane computed, Y transposed out. The padding's zeros are
 * written for a task's first block only: the next ones overwrite the same
 * interior (every lane of it, channels past c as zeros). */
static void cb_block(const CbJob* j, size_t b, float* mem, bool first) {
  const CpuDepthwiseRun* p = j->p;
  const CpuConvRun* r = &p->conv;
  const CbGeom* g = &j->g;
  const size_t L = j->path == CPU_DW_AVX512 ? 16 : 8, c = p->c;
  const size_t img = b / j->cblocks, c0 = b % j->cblocks * L;
  const size_t in_px = (size_t)(g->hp * g->wp), out_px = (size_t)(g->oh * g->ow);
  const size_t taps = (size_t)(g->kh * g->kw);
  float* blk = mem;
  float* out = blk + in_px * L;
  float* wk = out + out_px * L;
  float bias[16];
  for (size_t l = 0; l < L; l++) {
    const bool in = c0 + l < c;
    bias[l] = in && r->bias ? r->bias[c0 + l] : 0.0f;
    for (size_t t = 0; t < taps; t++)
      wk[t * L + l] = in ? p->w[(c0 + l) * taps + t] : 0.0f;
  }
  /* the input covers the block but for its padding */
  if (first && (g->pt || g->pl || g->hp > g->pt + g->h || g->wp > g->pl + g->w))
    memset(blk, 0, in_px * L * sizeof(float));
  const float* x = r->x + img * c * (size_t)(g->h * g->w);
  for (size_t half = 0; half < L; half += 8)
    cb_load8(j, x, c0 + half, blk, L, half);
  if (L == 16)
    cb_plane512(g, blk, wk, bias, out);
  else
    cb_plane256(g, blk, wk, bias, out);
  for (size_t half = 0; half < L; half += 8)
    cb_store8(j, out, img, c0 + half, L, half);
  if (!dw_vector_act(r->act))
    for (size_t l = 0; l < L && c0 + l < c; l++) {
      float* y = r->y + (img * c + c0 + l) * out_px;
      cpu_act_row(y, y, out_px, r->act, r->act_alpha, r->act_min, r->act_max);
    }
}
#endif /* DW_X86 */

/* Tasks [begin, end): task t runs its share of the blocks in its memory. */
static void cb_tasks(void* user, size_t begin, size_t end) {
  CbJob* j = user;
  for (size_t t = begin; t < end; t++) {
    const size_t b0 = j->blocks * t / j->tasks, b1 = j->blocks * (t + 1) / j->tasks;
    for (size_t b = b0; b < b1; b++) {
      if (atomic_load_explicit(&j->stopped, memory_order_relaxed)) return;
      if (cpu_should_stop(j->ctx)) {
        atomic_store_explicit(&j->stopped, 1, memory_order_relaxed);
        return;
      }
#if DW_X86
      cb_block(j, b, j->mem + t * j->g.block_floats, b == b0);
#endif
    }
  }
}

/* Runs p on the channel-blocked path when it applies (vector path,
 * depthwise with m == c, ow < CB_MAX_OW (AVX2: CB_MAX_OW_AVX2) or kh kw >=
 * CB_MIN_TAPS, the
 * block's memory available):
 * true then, with *st the run's status. */
static bool cb_run(OnyxKernelContext* ctx, const CpuDepthwiseRun* p, int path, OnyxStatus** st) {
  const CpuConvRun* r = &p->conv;
  const int mode = cblock_mode(); /* 0 off, 1 forced on, -1 by width */
  if ((path != CPU_DW_AVX512 && path != CPU_DW_AVX2) || p->cg != 1 || p->m != p->c || mode == 0 ||
      (mode < 0 && r->ow >= (path == CPU_DW_AVX512 ? CB_MAX_OW : CB_MAX_OW_AVX2) &&
       p->kh * p->kw < CB_MIN_TAPS))
    return false;
  const size_t L = path == CPU_DW_AVX512 ? 16 : 8;
  CbJob j = {.p = p, .ctx = ctx, .path = path};
  if (!cb_geom(p, L, &j.g)) return false;
  j.cblocks = (p->c + L - 1) / L;
  j.blocks = r->n * j.cblocks;
  const size_t threads = cpu_host->thread_pool_size(cpu_host->ctx_thread_pool(ctx));
  j.tasks = threads < j.blocks ? threads : j.blocks;
  size_t bytes;
  if (j.tasks == 0 || !cpu_mul_size(j.tasks, j.g.block_floats, &bytes) ||
      !cpu_mul_size(bytes, sizeof(float), &bytes) || !cpu_add_size(bytes, 64, &bytes))
    return false;
  char* mem = cpu_host->ctx_scratch(ctx, bytes);
  if (!mem) return false;
  /* 64-byte aligned: a 16-channel pixel is one cache line */
  j.mem = (float*)(void*)(mem + (64 - (uintptr_t)mem % 64) % 64);
  atomic_init(&j.stopped, 0);
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), j.tasks, cb_tasks, &j);
  *st = atomic_load(&j.stopped) ? cpu_cancelled(ctx, NULL) : NULL;
  return true;
}

/* ------------------------------------------------------------------------ */
/* The run                                                                   */
/* ------------------------------------------------------------------------ */

/* Gathers index lanes as int32 (lane * stride): wider strides take the
 * scalar loop, as do rows wider than int32 offsets reach. */
#define DW_VECTOR_MAX_STRIDE ((int64_t)1 << 24)

typedef struct DwJob {
  const CpuDepthwiseRun* p;
  const OnyxKernelContext* ctx;
  int path;
  DwPlan plan;
  _Atomic int stopped;
} DwJob;

/* Plane i's geometry and pointers (the plan is the job's). */
static DwPlane dw_plane(const DwJob* j, size_t i) {
  const CpuDepthwiseRun* p = j->p;
  const CpuConvRun* r = &p->conv;
  /* output channel o: group o / mg, its cg input channels from there */
  const size_t mg = p->m / (p->c / p->cg), in_plane = r->h * r->w, out_plane = r->oh * r->ow;
  const size_t n = i / p->m, o = i % p->m;
  return (DwPlane){.x = r->x + (n * p->c + o / mg * p->cg) * in_plane,
                   .k = p->w + o * p->cg * p->kh * p->kw,
                   .y = r->y + i * out_plane,
                   .z = r->z ? r->z + i * out_plane : NULL,
                   .bias = r->bias ? r->bias[o] : 0.0f,
                   .h = (int64_t)r->h,
                   .w = (int64_t)r->w,
                   .oh = (int64_t)r->oh,
                   .ow = (int64_t)r->ow,
                   .sh = (int64_t)r->sh,
                   .sw = (int64_t)r->sw,
                   .dh = (int64_t)r->dh,
                   .dw = (int64_t)r->dw,
                   .pt = (int64_t)r->pad_top,
                   .pl = (int64_t)r->pad_left,
                   .kh = (int64_t)p->kh,
                   .kw = (int64_t)p->kw,
                   .cg = (int64_t)p->cg,
                   .in_plane = (int64_t)in_plane,
                   .act = r->act,
                   .alpha = r->act_alpha,
                   .lo = r->act_min,
                   .hi = r->act_max,
                   .plan = &j->plan};
}

static void dw_planes(void* user, size_t begin, size_t end) {
  DwJob* j = user;
  for (size_t i = begin; i < end; i++) {
    if (atomic_load_explicit(&j->stopped, memory_order_relaxed)) return;
    if (cpu_should_stop(j->ctx)) {
      atomic_store_explicit(&j->stopped, 1, memory_order_relaxed);
      return;
    }
    const DwPlane q = dw_plane(j, i);
#if DW_X86
    if (j->path == CPU_DW_AVX512 || j->path == CPU_DW_AVX2) {
      if (j->path == CPU_DW_AVX512)
        dw_plane_avx512(&q);
      else
        dw_plane_avx2(&q);
      if (!dw_vector_act(q.act)) dw_plane_act(&q);
      continue;
    }
#endif
    dw_plane_scalar(&q);
  }
}

/* The vector paths' plan in ctx's scratch memory; false when it does not
 * fit (the scalar loop runs instead). */
static bool dw_make_plan(OnyxKernelContext* ctx, DwJob* j) {
  const DwPlane q = dw_plane(j, 0);
  const int64_t lanes = j->path == CPU_DW_AVX512 ? 16 : 8;
  const int S = q.sw == 1 ? 1 : q.sw == 2 ? 2 : 0;
  const size_t nseg = (size_t)q.ow / (size_t)lanes + 1;
  size_t rows_b, seg_b, mask_b, total;
  /* the zero row, rounded up to keep what follows aligned */
  if (!cpu_mul_size(((size_t)q.w + 3) / 4 * 4, sizeof(float), &rows_b) ||
      !cpu_mul_size(nseg, sizeof(DwSeg), &seg_b) || !cpu_mul_size(nseg, (size_t)q.kw, &mask_b) ||
      !cpu_mul_size(mask_b, 2 * sizeof(int32_t), &mask_b) ||
      (total = rows_b + seg_b + mask_b) < rows_b || total < mask_b)
    return false;
  char* mem = cpu_host->ctx_scratch(ctx, total);
  if (!mem) return false;
  memset(mem, 0, rows_b);
  DwSeg* seg = (DwSeg*)(void*)(mem + rows_b);
  int32_t* lo = (int32_t*)(void*)(mem + rows_b + seg_b);
  int32_t* hi = lo + mask_b / (2 * sizeof(int32_t));
  j->plan.zero = (const float*)(void*)mem;
  j->plan.nseg = dw_segments(&q, lanes, S, seg, lo, hi);
  j->plan.seg = seg, j->plan.lo = lo, j->plan.hi = hi;
  return true;
}

OnyxStatus* cpu_conv_depthwise_run(OnyxKernelContext* ctx, const CpuDepthwiseRun* p) {
  const CpuConvRun* r = &p->conv;
  if (p->cg == 0 || p->c == 0 || p->c % p->cg != 0 || p->m % (p->c / p->cg) != 0)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "grouped conv: %zu input channels in groups of %zu do not divide %zu "
                         "output channels",
                         p->c, p->cg, p->m);
  const size_t planes = r->n * p->m;
  if (planes == 0 || r->oh == 0 || r->ow == 0) return NULL;
  OnyxStatus* st = NULL;
  if (cb_run(ctx, p, cpu_conv_depthwise_path(), &st)) return st;
  DwJob j = {.p = p, .ctx = ctx, .path = cpu_conv_depthwise_path()};
  if ((int64_t)r->sw > DW_VECTOR_MAX_STRIDE || r->w > (size_t)INT32_MAX / 2) j.path = CPU_DW_SCALAR;
  if (j.path != CPU_DW_SCALAR && !dw_make_plan(ctx, &j)) j.path = CPU_DW_SCALAR;
  atomic_init(&j.stopped, 0);
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), planes, dw_planes, &j);
  if (atomic_load(&j.stopped)) return cpu_cancelled(ctx, NULL);
  return NULL;
}
