/* cpu_conv_winograd.c — Winograd F(4x4, 3x3) (and F(2x2, 3x3) for small
 * images) float32 convolution.
 *
 * Each 4x4 output tile comes from a 6x6 input tile d and the 3x3 kernel g
 * as Y = A^T [ (G g G^T) .* (B^T d B) ] A, 36 multiplies per tile and
 * channel pair instead of 144. The 1-D F(4, 3) is Toom-Cook on the points
 * 0, 1, -1, 2, -2 and infinity (small integers keep B and A exact in
 * float32; the 1/6 and 1/24 of G are applied once to W in double):
 *
 *   A^T (4 x 6): row j holds p^j for the finite points p, and 1 in the
 *   infinity column of the last row only:
 *       [1  1  1  1  1  0]
 *       [0  1 -1  2 -2  0]
 *       [0  1  1  4  4  0]
 *       [0  1 -1  8 -8  1]
 *   G (6 x 3): row i = [1, p_i, p_i^2] / N_i with N_i = prod_{k != i}
 *   (p_i - p_k) over the finite points; the infinity row is [0 0 1]:
 *       [ 1/4     0     0  ]
 *       [-1/6  -1/6  -1/6  ]
 *       [-1/6   1/6  -1/6  ]
 *       [ 1/24  1/12  1/6  ]
 *       [ 1/24 -1/12  1/6  ]
 *       [ 0      0     1   ]
 *   B^T (6 x 6): row i = the ascending coefficients of prod_{k != i}
 *   (x - p_k) (the Lagrange basis numerators); the infinity row those of
 *   prod_k (x - p_k):
 *       [4  0 -5  0  1  0]
 *       [0 -4 -4  1  1  0]
 *       [0  4 -4 -1  1  0]
 *       [0 -2 -1  2  1  0]
 *       [0  2 -1 -2  1  0]
 *       [0  4  0 -5  0  1]
 * (checked against direct correlation in tests/unit/winograd). Small
 * images (too few 4x4 tiles to fill the GEMM) use F(2x2, 3x3) instead,
 * derived the same way on 0, 1, -1 and infinity (below).
 *
 * Run time, per block of tiles (all images' tiles in one sequence, a block
 * sized so its V and M stay near L2): the input transform writes
 * V[xi] (ic x tiles) straight in the GEMM's packed-B layout, 36 GEMMs
 * M[xi] = U[xi] V[xi] (oc x tiles), and the output transform adds the
 * bias, applies the activation and writes the valid part of each tile.
 * Each pool thread runs whole blocks (its buffers stay in its cache, no
 * barriers) for as many blocks as share out evenly; each remaining block
 * has its transforms split over the channels and its GEMMs over the 36
 * points, single-threaded each. Blocks do not depend on the pool. The
 * transforms work on 16 tiles at a time, one per vector lane (GCC vector
 * extensions). With AVX-512, masked gathers read the input tiles and each
 * output row of 16 tiles is put in tile order and stored run by run. With
 * AVX2 (whose gathers ran slower than scalar copies on Zen 3), X is first
 * copied with its zero padding, each 8 tiles of a tile row are read by
 * eight row loads per input row and de-interleaved in registers (their
 * lanes permuted, which the output's interleave undoes for free), and the
 * output rows are stored run by run as with AVX-512. Consecutive points'
 * V and M matrices are a cache line apart beyond their size (SKEW): at
 * multiples of 4 KiB the 36 stores of a tile vector hit one L1 set. (A
 * 64-channel 56x56 layer on Zen 3, 1 thread, interleaved with the portable
 * transforms: median 3.13 -> 2.40 ms.) Each
 * output depends only on its tile's data and fixed summation orders, so
 * results do not depend on the pool. */
#include "cpu_winograd.h"
#include "cpu_avx2.h"
#include "cpu_nn.h"
#include "cpu_util.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define WL         16 /* tiles per vector */
#define MAX_POINTS 36
/* V and M of one block: about this many bytes (measured on ResNet-18). */
#define BLOCK_BYTES (1024u * 1024u)
/* Fewer tiles than this (over all images) stay on im2col: the GEMM's
 * panels would be mostly padding and U is 4x the size of W (F(4x4)) or
 * 16/9 of it (F(2x2)). */
#define MIN_TILES 16
/* One cache line between consecutive points' V (and M) matrices: their
 * sizes are often multiples of 4 KiB, and the transforms' 36 stores (loads)
 * per tile vector would all map to one L1 set. */
#define SKEW 16

typedef float wv __attribute__((vector_size(WL * sizeof(float)), aligned(64)));

static atomic_size_t runs_count;

size_t cpu_winograd_runs(void) {
  return atomic_load(&runs_count);
}

int cpu_winograd_enabled(void) {
  const char* e = getenv("ONYX_CPU_WINOGRAD");
  return !(e && strcmp(e, "0") == 0);
}

int cpu_winograd_applies(size_t oc, size_t ic, size_t kh, size_t kw, size_t sh, size_t sw,
                         size_t dh, size_t dw, size_t group) {
  return kh == 3 && kw == 3 && sh == 1 && sw == 1 && dh == 1 && dw == 1 && group == 1 &&
         oc >= CPU_WINOGRAD_MIN_CHANNELS && ic >= CPU_WINOGRAD_MIN_CHANNELS;
}

/* ------------------------------------------------------------------------ */
/* Weights                                                                    */
/* ------------------------------------------------------------------------ */

static const double G4[6][3] = {{1.0 / 4, 0, 0},
                                {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                {0, 0, 1}};
static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};

size_t cpu_winograd_pick_tile(size_t n, size_t oh, size_t ow) {
  if (n * ((oh + 3) / 4) * ((ow + 3) / 4) >= MIN_TILES) return 4;
  if (n * ((oh + 1) / 2) * ((ow + 1) / 2) >= MIN_TILES) return 2;
  return 0;
}

/* plain[(i * alpha + j) * oc * ic + o * ic + c] = (G g_oc G^T)[i][j], in float over 64
 * input channels at a time (the loops over c vectorize; G's entries are exact or within an
 * ulp in float, far below the transform's own rounding). Inlined with alpha a constant (6
 * or 4). This runs once per Conv at session creation, over every weight (ResNet-18: 11 M). */
static inline __attribute__((always_inline)) void
transform_weights(const float* w, size_t oc, size_t ic, const double (*Gd)[3], const size_t alpha,
                  float* plain) {
  enum { CHUNK = 64 };
  const size_t plane = oc * ic;
  float G[6][3];
  for (size_t i = 0; i < alpha; i++)
    for (int k = 0; k < 3; k++)
      G[i][k] = (float)Gd[i][k];
  float gt[9][CHUNK], t[6][3][CHUNK], u[CHUNK];
  for (size_t o = 0; o < oc; o++)
    for (size_t c0 = 0; c0 < ic; c0 += CHUNK) {
      const size_t cn = ic - c0 < CHUNK ? ic - c0 : CHUNK;
      const float* g = w + (o * ic + c0) * 9;
      for (size_t c = 0; c < cn; c++)
        for (int k = 0; k < 9; k++)
          gt[k][c] = g[c * 9 + k];
      for (size_t i = 0; i < alpha; i++)
        for (int k = 0; k < 3; k++)
          for (size_t c = 0; c < cn; c++)
            t[i][k][c] = G[i][0] * gt[k][c] + G[i][1] * gt[3 + k][c] + G[i][2] * gt[6 + k][c];
      for (size_t i = 0; i < alpha; i++)
        for (size_t jj = 0; jj < alpha; jj++) {
          for (size_t c = 0; c < cn; c++)
            u[c] = t[i][0][c] * G[jj][0] + t[i][1][c] * G[jj][1] + t[i][2][c] * G[jj][2];
          memcpy(plain + (i * alpha + jj) * plane + o * ic + c0, u, cn * sizeof(float));
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same loops compiled for AVX2 (8 channels per instruction instead of
 * 4; FMA contraction may round the transformed weights differently from the
 * portable build, within the transform's own rounding). */
__attribute__((target("avx2,fma,avx"))) static void
transform_weights_avx2(const float* w, size_t oc, size_t ic, size_t m, float* plain) {
  if (m == 4)
    transform_weights(w, oc, ic, G4, 6, plain);
  else
    transform_weights(w, oc, ic, G2, 4, plain);
}
#define WINO_CREATE_AVX2 1
#endif

CpuWinograd* cpu_winograd_create(const float* w, size_t oc, size_t ic, size_t m) {
  if (m != 2 && m != 4) return NULL;
  const size_t alpha = m + 2, points = alpha * alpha;
  CpuWinograd* wg = calloc(1, sizeof *wg);
  float* plain = cpu_gemm_alloc_packed(points * oc * ic); /* huge pages: few faults */
  if (!wg || !plain) goto fail;
  wg->oc = oc, wg->ic = ic, wg->m = m, wg->points = points;
  wg->mr = cpu_gemm_mr(), wg->nr = cpu_gemm_nr();
  wg->u_floats = (cpu_gemm_packed_a_floats(oc, ic) + 15) / 16 * 16;
  wg->u = cpu_gemm_alloc_packed(points * wg->u_floats);
  if (!wg->u) goto fail;
  /* plain[xi] (oc x ic) = (G g G^T)[xi] */
  int done = 0;
#if WINO_CREATE_AVX2
  if (cpu_gemm_isa_level() != CPU_ISA_GENERIC) {
    transform_weights_avx2(w, oc, ic, m, plain);
    done = 1;
  }
#endif
  if (!done && m == 4)
    transform_weights(w, oc, ic, G4, 6, plain);
  else if (!done)
    transform_weights(w, oc, ic, G2, 4, plain);
  for (size_t xi = 0; xi < points; xi++)
    cpu_gemm_pack_a(NULL, wg->u + xi * wg->u_floats, plain + xi * oc * ic, ic, 0, oc, ic);
  free(plain);
  return wg;
fail:
  free(plain);
  cpu_winograd_free(wg);
  return NULL;
}

void cpu_winograd_free(CpuWinograd* wg) {
  if (!wg) return;
  free(wg->u);
  free(wg);
}

int cpu_winograd_pays(const CpuWinograd* wg, size_t n, size_t oh, size_t ow) {
  if (!wg) return 0;
  const size_t tiles = n * ((oh + wg->m - 1) / wg->m) * ((ow + wg->m - 1) / wg->m);
  return tiles >= MIN_TILES && wg->mr == cpu_gemm_mr() && wg->nr == cpu_gemm_nr() &&
         wg->nr % WL == 0;
}

/* ------------------------------------------------------------------------ */
/* Transforms on 16 tiles at a time                                           */
/* ------------------------------------------------------------------------ */

/* The vector type of in[0] (16 lanes, or 8 in the AVX2 transforms). */
#define WV_OF(in) __typeof__((in)[0] + 0.0f)

/* out[k * so] = (B^T in)[k] over in[k * si], k < 6. */
#define INPUT_1D(in, si, out, so)                                                                  \
  do {                                                                                             \
    const WV_OF(in) d0 = (in)[0], d1 = (in)[(si)], d2 = (in)[2 * (si)], d3 = (in)[3 * (si)];       \
    const WV_OF(in) d4 = (in)[4 * (si)], d5 = (in)[5 * (si)];                                      \
    const WV_OF(in) a = d4 - 4.0f * d2, b = d3 - 4.0f * d1, c = d4 - d2, e = 2.0f * (d3 - d1);     \
    (out)[0] = 4.0f * d0 - 5.0f * d2 + d4;                                                         \
    (out)[(so)] = a + b;                                                                           \
    (out)[2 * (so)] = a - b;                                                                       \
    (out)[3 * (so)] = c + e;                                                                       \
    (out)[4 * (so)] = c - e;                                                                       \
    (out)[5 * (so)] = 4.0f * d1 - 5.0f * d3 + d5;                                                  \
  } while (0)

/* out[k * so] = (A^T in)[k] over in[k * si], k < 4 outputs of 6 inputs. */
#define OUTPUT_1D(in, si, out, so)                                                                 \
  do {                                                                                             \
    const WV_OF(in) m0 = (in)[0], m1 = (in)[(si)], m2 = (in)[2 * (si)], m3 = (in)[3 * (si)];       \
    const WV_OF(in) m4 = (in)[4 * (si)], m5 = (in)[5 * (si)];                                      \
    const WV_OF(in) a = m1 + m2, b = m1 - m2, c = m3 + m4, e = m3 - m4;                            \
    (out)[0] = m0 + a + c;                                                                         \
    (out)[(so)] = b + 2.0f * e;                                                                    \
    (out)[2 * (so)] = a + 4.0f * c;                                                                \
    (out)[3 * (so)] = b + 8.0f * e + m5;                                                           \
  } while (0)

/* F(2, 3) on the points 0, 1, -1 and infinity, derived as above:
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 -1 0 1],
 *   G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1],
 *   A^T = [1 1 1 0; 0 1 -1 1]. */
#define INPUT2_1D(in, si, out, so)                                                                 \
  do {                                                                                             \
    const WV_OF(in) d0 = (in)[0], d1 = (in)[(si)], d2 = (in)[2 * (si)], d3 = (in)[3 * (si)];       \
    (out)[0] = d0 - d2;                                                                            \
    (out)[(so)] = d1 + d2;                                                                         \
    (out)[2 * (so)] = d2 - d1;                                                                     \
    (out)[3 * (so)] = d3 - d1;                                                                     \
  } while (0)

#define OUTPUT2_1D(in, si, out, so)                                                                \
  do {                                                                                             \
    const WV_OF(in) m0 = (in)[0], m1 = (in)[(si)], m2 = (in)[2 * (si)], m3 = (in)[3 * (si)];       \
    (out)[0] = m0 + m1 + m2;                                                                       \
    (out)[(so)] = m1 - m2 + m3;                                                                    \
  } while (0)

/* input_tile##S: v[i * 6 + j] = (B^T d B)[i][j] (columns, then rows);
 * output_tile##S: o[i * 4 + j] = (A^T m A)[i][j]; input_tile2##S and
 * output_tile2##S the same for F(2x2, 3x3) (d and v 4x4, m 4x4, o 2x2).
 * S names the vector type T (16 lanes, or 8 for the AVX2 transforms). */
#define DEFINE_TILES(S, T)                                                                         \
  static inline __attribute__((always_inline)) void input_tile##S(const T* d, T* v) {              \
    T t[36];                                                                                       \
    for (int j = 0; j < 6; j++)                                                                    \
      INPUT_1D(d + j, 6, t + j, 6);                                                                \
    for (int i = 0; i < 6; i++)                                                                    \
      INPUT_1D(t + i * 6, 1, v + i * 6, 1);                                                        \
  }                                                                                                \
  static inline __attribute__((always_inline)) void output_tile##S(const T* m, T* o) {             \
    T t[24];                                                                                       \
    for (int j = 0; j < 6; j++)                                                                    \
      OUTPUT_1D(m + j, 6, t + j, 6);                                                               \
    for (int i = 0; i < 4; i++)                                                                    \
      OUTPUT_1D(t + i * 6, 1, o + i * 4, 1);                                                       \
  }                                                                                                \
  static inline __attribute__((always_inline)) void input_tile2##S(const T* d, T* v) {             \
    T t[16];                                                                                       \
    for (int j = 0; j < 4; j++)                                                                    \
      INPUT2_1D(d + j, 4, t + j, 4);                                                               \
    for (int i = 0; i < 4; i++)                                                                    \
      INPUT2_1D(t + i * 4, 1, v + i * 4, 1);                                                       \
  }                                                                                                \
  static inline __attribute__((always_inline)) void output_tile2##S(const T* m, T* o) {            \
    T t[8];                                                                                        \
    for (int j = 0; j < 4; j++)                                                                    \
      OUTPUT2_1D(m + j, 4, t + j, 4);                                                              \
    for (int i = 0; i < 2; i++)                                                                    \
      OUTPUT2_1D(t + i * 4, 1, o + i * 2, 1);                                                      \
  }

typedef float wv8 __attribute__((vector_size(8 * sizeof(float)), aligned(32)));
DEFINE_TILES(, wv)
DEFINE_TILES(_8, wv8)

/* ------------------------------------------------------------------------ */
/* One run                                                                    */
/* ------------------------------------------------------------------------ */

/* Lanes of tiles [g, g + 16) of the block: the offset of each tile's
 * origin from the start of X (or Y) with the channel left out, and which
 * lanes have row (column) k of their tile inside rows (columns) [0, h)
 * ([0, w)). Lanes past the block's tiles have empty masks. */
typedef struct Lanes {
  int32_t base[WL];
  uint16_t row[6], col[6];
} Lanes;

/* Tiles [g, g + 16) of the block as runs of neighbours in one tile row of
 * Y: each run's output rows are contiguous (`floats` valid of M per tile,
 * `rows` valid rows) at `off` from the start of Y, channel left out. */
typedef struct Runs {
  int n;
  struct {
    int32_t off, x0;
    uint8_t l0, rows, floats;
  } r[WL];
} Runs;

/* AVX2: 8 tiles of the block (half a group) as segments of neighbours in
 * one tile row of Xp, X's zero-padded copy. Segment k's tiles are read by
 * row loads at `off` (channel left out) + 4 (or 2) floats per tile from
 * the half's first tile on, and land in the lanes of `mask` (lane order:
 * see seg_lane). Lanes of no segment (past the block's tiles) are 0. */
typedef struct Segs {
  int n;
  struct {
    ptrdiff_t off;
    uint8_t mask;
  } s[8];
} Segs;

typedef struct Job {
  const CpuWinograd* wg;
  const CpuWinogradConv* p;
  size_t tiles_w, tiles_img; /* tiles per row, per image */
  size_t tiles;              /* over all images */
  size_t t0, count;          /* this block: tiles [t0, t0 + count) */
  size_t cols;               /* count rounded up to nr: V's packed width */
  size_t v_stride, m_stride; /* V[xi] to V[xi + 1], M[xi] to M[xi + 1] (floats) */
  float* v;                  /* 36 packed-B matrices (ic x cols), ic * cols apart */
  float* m;                  /* 36 matrices oc x cols, oc * cols apart */
  /* per tile of the block: image, input row and column of its origin */
  size_t* img;
  int64_t* iy;
  int64_t* ix;
  int avx512;                  /* AVX-512 transforms: gathers and scatters with 32-bit offsets */
  int avx2;                    /* else AVX2: row loads from Xp and run stores when the */
  int segs;                    /* offsets fit (this flag), else the portable transforms */
  Lanes* lin;                  /* avx512: per 16 tiles of the block, their lanes in X */
  Segs* sin;                   /* segs: per 8 tiles of the block, their segments in Xp */
  Runs* lout;                  /* avx512, segs: per 16 tiles of the block, their runs in Y */
  const float* xp;             /* segs: Xp, (n * ic) planes of xp_h x xp_w floats */
  size_t xp_h, xp_w, xp_plane; /* Xp row r, column c: X's row r - pad_top, column c - pad_left */
  CpuStop* stop;               /* the run's cancellation, polled per block */
} Job;

/* Lane of the natural tile index i (0..7) of an 8-tile half for the AVX2
 * transforms: their row loads de-interleave 4-float (2-float) tiles into
 * lanes 0, 2, 4, 6, 1, 3, 5, 7 (0, 1, 4, 5, 2, 3, 6, 7), and the output's
 * interleave puts the lanes back in tile order. */
static int seg_lane(int m, int i) {
  static const int l4[8] = {0, 4, 1, 5, 2, 6, 3, 7}, l2[8] = {0, 1, 4, 5, 2, 3, 6, 7};
  return m == 4 ? l4[i] : l2[i];
}

static void segs_init(const Job* j, size_t h0, Segs* sg) {
  const int m = (int)j->wg->m;
  sg->n = 0;
  for (size_t i = 0; i < 8 && h0 + i < j->count; i++) {
    const size_t q = h0 + i;
    const uint8_t bit = (uint8_t)(1u << seg_lane(m, (int)i));
    if (i > 0 && j->img[q] == j->img[q - 1] && j->iy[q] == j->iy[q - 1] &&
        j->ix[q] == j->ix[q - 1] + m) {
      sg->s[sg->n - 1].mask |= bit;
      continue;
    }
    /* the tile's origin in Xp, less i tiles: the loads start at lane 0 */
    const ptrdiff_t y = (ptrdiff_t)j->iy[q] + (ptrdiff_t)j->p->pad_top;
    const ptrdiff_t x = (ptrdiff_t)j->ix[q] + (ptrdiff_t)j->p->pad_left;
    sg->s[sg->n].off = (ptrdiff_t)(j->img[q] * j->wg->ic * j->xp_plane) + y * (ptrdiff_t)j->xp_w +
                       x - (ptrdiff_t)i * m;
    sg->s[sg->n].mask = bit;
    sg->n++;
  }
}

static void lanes_init(const Job* j, size_t g, size_t planes, size_t h, size_t w, int64_t dy,
                       int64_t dx, int k, Lanes* ln) {
  memset(ln, 0, sizeof *ln);
  for (size_t l = 0; l < WL && g + l < j->count; l++) {
    const size_t q = g + l;
    const int64_t y0 = j->iy[q] + dy, x0 = j->ix[q] + dx;
    ln->base[l] = (int32_t)((int64_t)(j->img[q] * planes * h * w) + y0 * (int64_t)w + x0);
    for (int a = 0; a < k; a++) {
      if (y0 + a >= 0 && y0 + a < (int64_t)h) ln->row[a] |= (uint16_t)(1u << l);
      if (x0 + a >= 0 && x0 + a < (int64_t)w) ln->col[a] |= (uint16_t)(1u << l);
    }
  }
}

static void runs_init(const Job* j, size_t g, Runs* rs) {
  const CpuWinogradConv* p = j->p;
  const size_t m = j->wg->m, ohw = p->oh * p->ow;
  rs->n = 0;
  for (size_t l = 0; l < WL && g + l < j->count; l++) {
    const size_t q = g + l;
    const size_t y0 = (size_t)(j->iy[q] + (int64_t)p->pad_top);
    const size_t x0 = (size_t)(j->ix[q] + (int64_t)p->pad_left);
    if (l > 0 && j->img[q] == j->img[q - 1] && j->iy[q] == j->iy[q - 1] &&
        j->ix[q] == j->ix[q - 1] + (int64_t)m) {
      const size_t x = (size_t)rs->r[rs->n - 1].x0, len = l + 1 - rs->r[rs->n - 1].l0;
      rs->r[rs->n - 1].floats = (uint8_t)(m * len < p->ow - x ? m * len : p->ow - x);
      continue;
    }
    rs->r[rs->n].off = (int32_t)(j->img[q] * j->wg->oc * ohw + y0 * p->ow + x0);
    rs->r[rs->n].x0 = (int32_t)x0;
    rs->r[rs->n].l0 = (uint8_t)l;
    rs->r[rs->n].rows = (uint8_t)(p->oh - y0 < m ? p->oh - y0 : m);
    rs->r[rs->n].floats = (uint8_t)(p->ow - x0 < m ? p->ow - x0 : m);
    rs->n++;
  }
}

static void block_tiles(Job* j) {
  const CpuWinogradConv* p = j->p;
  const size_t m = j->wg->m;
  for (size_t q = 0; q < j->count; q++) {
    const size_t t = j->t0 + q, r = t % j->tiles_img;
    j->img[q] = t / j->tiles_img;
    j->iy[q] = (int64_t)((r / j->tiles_w) * m) - (int64_t)p->pad_top;
    j->ix[q] = (int64_t)((r % j->tiles_w) * m) - (int64_t)p->pad_left;
  }
  if (j->avx512 || j->segs)
    for (size_t g = 0; g < j->cols; g += WL) {
      if (j->avx512)
        lanes_init(j, g, j->wg->ic, p->h, p->w, 0, 0, (int)m + 2, &j->lin[g / WL]);
      else
        for (size_t h = 0; h < WL; h += 8)
          segs_init(j, g + h, &j->sin[(g + h) / 8]);
      runs_init(j, g, &j->lout[g / WL]);
    }
}

/* The bodies below take the output tile M (4 or 2) as a constant, so each
 * instance is fully unrolled; A = M + 2 is the input tile. */
#define TILE_IN(M) ((M) + 2)

static inline __attribute__((always_inline)) void input_body(const Job* j, size_t c0, size_t c1,
                                                             const int M) {
  const CpuWinogradConv* p = j->p;
  const int A = TILE_IN(M), P = A * A;
  const size_t ic = j->wg->ic, nr = j->wg->nr, h = p->h, w = p->w;
  const size_t plane = j->v_stride; /* one V[xi] */
  wv d[MAX_POINTS], v[MAX_POINTS];
  for (size_t c = c0; c < c1; c++)
    for (size_t g = 0; g < j->cols; g += WL) {
      float* df = (float*)d;
      for (size_t l = 0; l < WL; l++) {
        const size_t q = g + l;
        if (q >= j->count) {
          for (int k = 0; k < P; k++)
            df[k * WL + l] = 0.0f;
          continue;
        }
        const float* xs = p->x + (j->img[q] * ic + c) * h * w;
        const int64_t y0 = j->iy[q], x0 = j->ix[q];
        if (y0 >= 0 && x0 >= 0 && y0 + A <= (int64_t)h && x0 + A <= (int64_t)w) {
          const float* src = xs + (size_t)y0 * w + (size_t)x0;
          for (int a = 0; a < A; a++, src += w)
            for (int b = 0; b < A; b++)
              df[(a * A + b) * WL + l] = src[b];
        } else {
          for (int a = 0; a < A; a++) {
            const int64_t yy = y0 + a;
            const int row_ok = yy >= 0 && yy < (int64_t)h;
            for (int b = 0; b < A; b++) {
              const int64_t xx = x0 + b;
              df[(a * A + b) * WL + l] =
                  row_ok && xx >= 0 && xx < (int64_t)w ? xs[(size_t)yy * w + (size_t)xx] : 0.0f;
            }
          }
        }
      }
      if (M == 4)
        input_tile(d, v);
      else
        input_tile2(d, v);
      /* row c of packed panel g / nr, lanes at column g % nr */
      float* dst = j->v + (g / nr) * ic * nr + c * nr + g % nr;
      for (int k = 0; k < P; k++)
        memcpy(dst + (size_t)k * plane, &v[k], sizeof(wv));
    }
}

static inline __attribute__((always_inline)) float act(float x, const CpuWinogradConv* p) {
  return cpu_act_apply(x, p->act, p->act_alpha, p->act_min, p->act_max);
}

static inline __attribute__((always_inline)) void output_body(const Job* j, size_t o0, size_t o1,
                                                              const int M) {
  const CpuWinogradConv* p = j->p;
  const int A = TILE_IN(M), P = A * A;
  const size_t oc = j->wg->oc, oh = p->oh, ow = p->ow, plane = j->m_stride;
  const size_t mt = (size_t)M;
  wv m[MAX_POINTS], o[16];
  for (size_t oi = o0; oi < o1; oi++) {
    const float bias = p->bias ? p->bias[oi] : 0.0f;
    for (size_t g = 0; g < j->count; g += WL) {
      const float* src = j->m + oi * j->cols + g;
      for (int k = 0; k < P; k++)
        memcpy(&m[k], src + (size_t)k * plane, sizeof(wv));
      if (M == 4)
        output_tile(m, o);
      else
        output_tile2(m, o);
      const float* of = (const float*)o;
      const size_t lanes = j->count - g < WL ? j->count - g : WL;
      for (size_t l = 0; l < lanes; l++) {
        const size_t q = g + l;
        /* the tile's output origin is its input origin plus the padding */
        const size_t y0 = (size_t)(j->iy[q] + (int64_t)p->pad_top);
        const size_t x0 = (size_t)(j->ix[q] + (int64_t)p->pad_left);
        const size_t at = (j->img[q] * oc + oi) * oh * ow + y0 * ow + x0;
        float* dst = p->y + at;
        const float* zs = p->z ? p->z + at : NULL;
        const size_t rows = oh - y0 < mt ? oh - y0 : mt, cols = ow - x0 < mt ? ow - x0 : mt;
        /* the common cases without a per-value test (no unswitching at -O2) */
        for (size_t a = 0; a < rows; a++, dst += ow) {
          const float* src = of + a * mt * WL + l;
          if (zs) {
            const float* z = zs + a * ow;
            for (size_t b = 0; b < cols; b++)
              dst[b] = act(src[b * WL] + bias + z[b], p);
          } else if (p->act == CPU_ACT_RELU) {
            for (size_t b = 0; b < cols; b++) {
              const float v = src[b * WL] + bias;
              dst[b] = v < 0.0f ? 0.0f : v;
            }
          } else if (p->act == CPU_ACT_NONE) {
            for (size_t b = 0; b < cols; b++)
              dst[b] = src[b * WL] + bias;
          } else {
            for (size_t b = 0; b < cols; b++)
              dst[b] = act(src[b * WL] + bias, p);
          }
        }
      }
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define WINO_X86 1
#define AVX512   __attribute__((target("avx512f,avx512vl,avx512dq,fma,avx2,avx")))

/* Masked gathers (no access on masked-off lanes, so the padding reads 0). */
AVX512 static inline __attribute__((always_inline)) void input_x86(const Job* j, size_t c0,
                                                                   size_t c1, const int M) {
  const CpuWinogradConv* p = j->p;
  const int A = TILE_IN(M), P = A * A;
  const size_t ic = j->wg->ic, nr = j->wg->nr, hw = p->h * p->w, plane = j->v_stride;
  wv d[MAX_POINTS], v[MAX_POINTS];
  for (size_t g = 0; g < j->cols; g += WL) {
    const Lanes* ln = &j->lin[g / WL];
    const __m512i base = _mm512_loadu_si512(ln->base);
    for (size_t c = c0; c < c1; c++) {
      const float* xc = p->x + c * hw;
      for (int a = 0; a < A; a++) {
        const __m512i row = _mm512_add_epi32(base, _mm512_set1_epi32(a * (int32_t)p->w));
        for (int b = 0; b < A; b++)
          d[a * A + b] = (wv)_mm512_mask_i32gather_ps(
              _mm512_setzero_ps(), (__mmask16)(ln->row[a] & ln->col[b]),
              _mm512_add_epi32(row, _mm512_set1_epi32(b)), xc, 4);
      }
      if (M == 4)
        input_tile(d, v);
      else
        input_tile2(d, v);
      float* dst = j->v + (g / nr) * ic * nr + c * nr + g % nr;
      for (int k = 0; k < P; k++)
        _mm512_store_ps(dst + (size_t)k * plane, (__m512)v[k]);
    }
  }
}

/* out[16 k + 4 l + b] = v[b][4 k + l]: four vectors of 16 tiles into tile
 * order, M = 4 values per tile. */
AVX512 static inline __attribute__((always_inline)) void interleave4(const __m512* v, __m512* out) {
  const __m512 t0 = _mm512_unpacklo_ps(v[0], v[1]), t1 = _mm512_unpackhi_ps(v[0], v[1]);
  const __m512 t2 = _mm512_unpacklo_ps(v[2], v[3]), t3 = _mm512_unpackhi_ps(v[2], v[3]);
  /* 128-bit chunk c of u[k] holds tile 4 c + k */
  const __m512 u0 = _mm512_shuffle_ps(t0, t2, 0x44), u1 = _mm512_shuffle_ps(t0, t2, 0xEE);
  const __m512 u2 = _mm512_shuffle_ps(t1, t3, 0x44), u3 = _mm512_shuffle_ps(t1, t3, 0xEE);
  const __m512 w0 = _mm512_shuffle_f32x4(u0, u1, 0x44), w1 = _mm512_shuffle_f32x4(u2, u3, 0x44);
  const __m512 w2 = _mm512_shuffle_f32x4(u0, u1, 0xEE), w3 = _mm512_shuffle_f32x4(u2, u3, 0xEE);
  out[0] = _mm512_shuffle_f32x4(w0, w1, 0x88);
  out[1] = _mm512_shuffle_f32x4(w0, w1, 0xDD);
  out[2] = _mm512_shuffle_f32x4(w2, w3, 0x88);
  out[3] = _mm512_shuffle_f32x4(w2, w3, 0xDD);
}

/* The same for M = 2: out[16 k + 2 l + b] = v[b][8 k + l]. */
AVX512 static inline __attribute__((always_inline)) void interleave2(const __m512* v, __m512* out) {
  const __m512 lo = _mm512_unpacklo_ps(v[0], v[1]), hi = _mm512_unpackhi_ps(v[0], v[1]);
  const __m512 w0 = _mm512_shuffle_f32x4(lo, hi, 0x44), w1 = _mm512_shuffle_f32x4(lo, hi, 0xEE);
  out[0] = _mm512_shuffle_f32x4(w0, w0, 0xD8);
  out[1] = _mm512_shuffle_f32x4(w1, w1, 0xD8);
}

/* The activation act of x (NaN kept: max/min return their second operand
 * on NaN). */
AVX512 static inline __attribute__((always_inline)) __m512
act_x86(__m512 x, int act, __m512 zero, __m512 alpha, __m512 lo, __m512 hi) {
  if (act == CPU_ACT_RELU) return _mm512_max_ps(zero, x);
  if (act == CPU_ACT_LEAKY_RELU)
    return _mm512_mask_mul_ps(x, _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), x, alpha);
  if (act == CPU_ACT_CLIP) return _mm512_min_ps(hi, _mm512_max_ps(lo, x));
  return x;
}

/* Bias, activation, each output row of the 16 tiles put in tile order,
 * then copied run by run with masked stores of the valid part (Z, when
 * given, added there, and the activation after it). */
AVX512 static inline __attribute__((always_inline)) void output_x86(const Job* j, size_t o0,
                                                                    size_t o1, const int M) {
  const CpuWinogradConv* p = j->p;
  const int A = TILE_IN(M), P = A * A;
  const size_t ohw = p->oh * p->ow, ow = p->ow, plane = j->m_stride;
  const __m512 zero = _mm512_setzero_ps(), alpha = _mm512_set1_ps(p->act_alpha);
  const __m512 lo = _mm512_set1_ps(p->act_min), hi = _mm512_set1_ps(p->act_max);
  wv m[MAX_POINTS], o[16];
  float buf[4][64] __attribute__((aligned(64)));
  for (size_t g = 0; g < j->count; g += WL) {
    const Runs* rs = &j->lout[g / WL];
    for (size_t oi = o0; oi < o1; oi++) {
      const float* src = j->m + oi * j->cols + g;
      for (int k = 0; k < P; k++)
        m[k] = (wv)_mm512_load_ps(src + (size_t)k * plane);
      if (M == 4)
        output_tile(m, o);
      else
        output_tile2(m, o);
      const __m512 bias = _mm512_set1_ps(p->bias ? p->bias[oi] : 0.0f);
      /* with Z the activation waits until Z is added, at the store */
      const int act_now = p->z ? CPU_ACT_NONE : p->act;
      for (int a = 0; a < M; a++) {
        __m512 r[4], t[4];
        for (int b = 0; b < M; b++)
          r[b] = act_x86(_mm512_add_ps((__m512)o[a * M + b], bias), act_now, zero, alpha, lo, hi);
        if (M == 4)
          interleave4(r, t);
        else
          interleave2(r, t);
        for (int k = 0; k < M; k++)
          _mm512_store_ps(buf[a] + 16 * k, t[k]);
      }
      float* yc = p->y + oi * ohw;
      const float* zc = p->z ? p->z + oi * ohw : NULL;
      for (int q = 0; q < rs->n; q++) {
        const int n = rs->r[q].floats;
        for (int a = 0; a < rs->r[q].rows; a++) {
          const float* s = buf[a] + M * rs->r[q].l0;
          const size_t at = rs->r[q].off + (size_t)a * ow;
          float* d = yc + at;
          for (int f = 0; f < n; f += 16) {
            const __mmask16 k = n - f >= 16 ? 0xFFFF : (__mmask16)((1u << (n - f)) - 1);
            __m512 v = _mm512_maskz_loadu_ps(k, s + f);
            if (zc)
              v = act_x86(_mm512_add_ps(v, _mm512_maskz_loadu_ps(k, zc + at + f)), p->act, zero,
                          alpha, lo, hi);
            _mm512_mask_storeu_ps(d + f, k, v);
          }
        }
      }
    }
  }
}

AVX512 static void input_avx512(const Job* j, size_t c0, size_t c1) {
  if (j->wg->m == 4)
    input_x86(j, c0, c1, 4);
  else
    input_x86(j, c0, c1, 2);
}

AVX512 static void output_avx512(const Job* j, size_t o0, size_t o1) {
  if (j->wg->m == 4)
    output_x86(j, o0, o1, 4);
  else
    output_x86(j, o0, o1, 2);
}

/* Without AVX-512 (Zen 3's gathers ran slower than scalar copies): each
 * 8-tile half of a group is read from Xp by row loads per segment, the
 * tiles de-interleaved in registers (lanes as seg_lane), and the output
 * rows put back in tile order for the runs' stores as above. When the
 * offsets do not fit in 32 bits, the portable bodies compiled for AVX2. */
#define WINO_AVX2 __attribute__((target("avx2,fma,avx")))

/* Columns b < 6 of the 8 tiles of width 4 from row r: D[b] lane l holds
 * r[4 * seg_lane^-1(l) + b]; reads r[0 .. 36). */
WINO_AVX2 static inline __attribute__((always_inline)) void row_tiles4(const float* r, __m256* D) {
  const __m256 r0 = _mm256_loadu_ps(r), r1 = _mm256_loadu_ps(r + 8);
  const __m256 r2 = _mm256_loadu_ps(r + 16), r3 = _mm256_loadu_ps(r + 24);
  /* per 128-bit lane, a 4 x 4 transpose: the low lanes hold tiles 0, 2, 4,
   * 6 and the high lanes 1, 3, 5, 7 */
  const __m256 a0 = _mm256_unpacklo_ps(r0, r1), a1 = _mm256_unpackhi_ps(r0, r1);
  const __m256 a2 = _mm256_unpacklo_ps(r2, r3), a3 = _mm256_unpackhi_ps(r2, r3);
  D[0] = _mm256_shuffle_ps(a0, a2, 0x44);
  D[1] = _mm256_shuffle_ps(a0, a2, 0xEE);
  D[2] = _mm256_shuffle_ps(a1, a3, 0x44);
  D[3] = _mm256_shuffle_ps(a1, a3, 0xEE);
  /* columns 4 and 5: columns 0 and 1 of the next tile */
  const __m256 s0 = _mm256_loadu_ps(r + 4), s1 = _mm256_loadu_ps(r + 12);
  const __m256 s2 = _mm256_loadu_ps(r + 20), s3 = _mm256_loadu_ps(r + 28);
  const __m256 b0 = _mm256_unpacklo_ps(s0, s1), b2 = _mm256_unpacklo_ps(s2, s3);
  D[4] = _mm256_shuffle_ps(b0, b2, 0x44);
  D[5] = _mm256_shuffle_ps(b0, b2, 0xEE);
}

/* The same for tiles of width 2 (F(2x2)): columns b < 4; reads r[0 .. 18). */
WINO_AVX2 static inline __attribute__((always_inline)) void row_tiles2(const float* r, __m256* D) {
  const __m256 r0 = _mm256_loadu_ps(r), r1 = _mm256_loadu_ps(r + 8);
  const __m256 s0 = _mm256_loadu_ps(r + 2), s1 = _mm256_loadu_ps(r + 10);
  D[0] = _mm256_shuffle_ps(r0, r1, 0x88);
  D[1] = _mm256_shuffle_ps(r0, r1, 0xDD);
  D[2] = _mm256_shuffle_ps(s0, s1, 0x88);
  D[3] = _mm256_shuffle_ps(s0, s1, 0xDD);
}

WINO_AVX2 static inline __attribute__((always_inline)) void input_rows8(const Job* j, size_t c0,
                                                                        size_t c1, const int M) {
  const int A = TILE_IN(M), P = A * A;
  const size_t ic = j->wg->ic, nr = j->wg->nr, plane = j->v_stride, wp = j->xp_w;
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  wv8 d[MAX_POINTS], v[MAX_POINTS];
  /* both halves of a group (one line of each V row) back to back */
  for (size_t g = 0; g < j->cols; g += WL)
    for (size_t c = c0; c < c1; c++)
      for (size_t h0 = g; h0 < g + WL; h0 += 8) {
        const Segs* hs = &j->sin[h0 / 8];
        /* row c of packed panel h0 / nr, lanes at column h0 % nr */
        float* dst = j->v + (h0 / nr) * ic * nr + c * nr + h0 % nr;
        const float* xc = j->xp + c * j->xp_plane;
        for (int a = 0; a < A; a++) {
          __m256 acc[6], D[6];
          if (hs->n == 1 && hs->s[0].mask == 0xFF) {
            /* 8 neighbours: the common case */
            if (M == 4)
              row_tiles4(xc + hs->s[0].off + (ptrdiff_t)a * (ptrdiff_t)wp, acc);
            else
              row_tiles2(xc + hs->s[0].off + (ptrdiff_t)a * (ptrdiff_t)wp, acc);
          } else {
            for (int b = 0; b < A; b++)
              acc[b] = _mm256_setzero_ps();
            for (int k = 0; k < hs->n; k++) {
              const float* r = xc + hs->s[k].off + (ptrdiff_t)a * (ptrdiff_t)wp;
              if (M == 4)
                row_tiles4(r, D);
              else
                row_tiles2(r, D);
              const __m256i mb = _mm256_set1_epi32(hs->s[k].mask);
              const __m256 m =
                  _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(mb, bit), bit));
              for (int b = 0; b < A; b++)
                acc[b] = _mm256_blendv_ps(acc[b], D[b], m);
            }
          }
          for (int b = 0; b < A; b++)
            d[a * A + b] = (wv8)acc[b];
        }
        if (M == 4)
          input_tile_8(d, v);
        else
          input_tile2_8(d, v);
        for (int k = 0; k < P; k++)
          _mm256_store_ps(dst + (size_t)k * plane, (__m256)v[k]);
      }
}

/* Value b < M of the 8 tiles in r[b], lanes as seg_lane, into tile order:
 * out[k] holds tiles 2k and 2k + 1 (M = 4), or 4k .. 4k + 3 (M = 2). */
WINO_AVX2 static inline __attribute__((always_inline)) void interleave8(const __m256* r,
                                                                        __m256* out, const int M) {
  if (M == 2) {
    out[0] = _mm256_unpacklo_ps(r[0], r[1]);
    out[1] = _mm256_unpackhi_ps(r[0], r[1]);
    return;
  }
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  /* out[k]: lane k | lane 4 + k, i.e. tile 2k | tile 2k + 1 */
  out[0] = _mm256_shuffle_ps(t0, t2, 0x44);
  out[1] = _mm256_shuffle_ps(t0, t2, 0xEE);
  out[2] = _mm256_shuffle_ps(t1, t3, 0x44);
  out[3] = _mm256_shuffle_ps(t1, t3, 0xEE);
}

WINO_AVX2 static inline __attribute__((always_inline)) void output_runs8(const Job* j, size_t o0,
                                                                         size_t o1, const int M) {
  const CpuWinogradConv* p = j->p;
  const int A = TILE_IN(M), P = A * A;
  const size_t ohw = p->oh * p->ow, ow = p->ow, plane = j->m_stride;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  wv8 m[MAX_POINTS], o[16];
  /* one output row of the 16 tiles in tile order; 8 floats of slack for
   * the last run's full-vector loads */
  float buf[4][64 + 8] __attribute__((aligned(32)));
  for (size_t g = 0; g < j->count; g += WL) {
    const Runs* rs = &j->lout[g / WL];
    for (size_t oi = o0; oi < o1; oi++) {
      const __m256 bias = _mm256_set1_ps(p->bias ? p->bias[oi] : 0.0f);
      /* with Z the activation waits until Z is added, at the store */
      const int act_now = p->z ? CPU_ACT_NONE : p->act;
      /* a half past the block's tiles was not computed (GEMM n) */
      for (int h = 0; h < 2 && g + 8 * (size_t)h < j->count; h++) {
        const float* src = j->m + oi * j->cols + g + 8 * h;
        for (int k = 0; k < P; k++)
          m[k] = (wv8)_mm256_load_ps(src + (size_t)k * plane);
        if (M == 4)
          output_tile_8(m, o);
        else
          output_tile2_8(m, o);
        for (int a = 0; a < M; a++) {
          __m256 r[4], t[4];
          for (int b = 0; b < M; b++)
            r[b] = cpu_act_avx2(_mm256_add_ps((__m256)o[a * M + b], bias), act_now, p->act_alpha,
                                p->act_min, p->act_max);
          interleave8(r, t, M);
          for (int k = 0; k < M; k++)
            _mm256_store_ps(buf[a] + 8 * M * h + 8 * k, t[k]);
        }
      }
      float* yc = p->y + oi * ohw;
      const float* zc = p->z ? p->z + oi * ohw : NULL;
      for (int q = 0; q < rs->n; q++) {
        const int n = rs->r[q].floats;
        for (int a = 0; a < rs->r[q].rows; a++) {
          const float* s = buf[a] + M * rs->r[q].l0;
          const size_t at = rs->r[q].off + (size_t)a * ow;
          float* d = yc + at;
          for (int f = 0; f < n; f += 8) {
            __m256 v = _mm256_loadu_ps(s + f);
            if (n - f >= 8) {
              if (zc)
                v = cpu_act_avx2(_mm256_add_ps(v, _mm256_loadu_ps(zc + at + f)), p->act,
                                 p->act_alpha, p->act_min, p->act_max);
              _mm256_storeu_ps(d + f, v);
            } else {
              const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - f), lane);
              if (zc)
                v = cpu_act_avx2(_mm256_add_ps(v, _mm256_maskload_ps(zc + at + f, k)), p->act,
                                 p->act_alpha, p->act_min, p->act_max);
              cpu_store_first_avx2(d + f, v, (size_t)(n - f));
            }
          }
        }
      }
    }
  }
}

WINO_AVX2 static void input_avx2(const Job* j, size_t c0, size_t c1) {
  if (j->segs && j->wg->m == 4)
    input_rows8(j, c0, c1, 4);
  else if (j->segs)
    input_rows8(j, c0, c1, 2);
  else if (j->wg->m == 4)
    input_body(j, c0, c1, 4);
  else
    input_body(j, c0, c1, 2);
}

WINO_AVX2 static void output_avx2(const Job* j, size_t o0, size_t o1) {
  if (j->segs && j->wg->m == 4)
    output_runs8(j, o0, o1, 4);
  else if (j->segs)
    output_runs8(j, o0, o1, 2);
  else if (j->wg->m == 4)
    output_body(j, o0, o1, 4);
  else
    output_body(j, o0, o1, 2);
}
#else
#define WINO_X86 0
#endif

static void input_task(void* user, size_t c0, size_t c1) {
  const Job* j = user;
#if WINO_X86
  if (j->avx512) {
    input_avx512(j, c0, c1);
    return;
  }
  if (j->avx2) {
    input_avx2(j, c0, c1);
    return;
  }
#endif
  if (j->wg->m == 4)
    input_body(j, c0, c1, 4);
  else
    input_body(j, c0, c1, 2);
}

static void output_task(void* user, size_t o0, size_t o1) {
  const Job* j = user;
#if WINO_X86
  if (j->avx512) {
    output_avx512(j, o0, o1);
    return;
  }
  if (j->avx2) {
    output_avx2(j, o0, o1);
    return;
  }
#endif
  if (j->wg->m == 4)
    output_body(j, o0, o1, 4);
  else
    output_body(j, o0, o1, 2);
}

static size_t round_up(size_t a, size_t b) {
  return (a + b - 1) / b * b;
}

static void gemm_task(void* user, size_t x0, size_t x1) {
  const Job* j = user;
  const CpuWinograd* wg = j->wg;
  for (size_t xi = x0; xi < x1; xi++) {
    /* n: the block's tiles (the packed panels are zero past them); with
     * segs, every lane of the last half holding one */
    CpuGemm g = {.m = wg->oc,
                 .n = j->segs ? round_up(j->count, 8) : j->count,
                 .k = wg->ic,
                 .packed_a = wg->u + xi * wg->u_floats,
                 .packed_b = j->v + xi * j->v_stride,
                 .packed_b_base = 1, /* V is in cpu_gemm_nr()'s panels */
                 .c = j->m + xi * j->m_stride,
                 .ldc = j->cols,
                 .alpha = 1.0};
    cpu_gemm_f32(NULL, &g);
  }
}

/* One block: tiles [t0, t0 + bt) (fewer at the end), its transforms and
 * GEMMs split over `pool` (NULL: this thread). */
static void run_block(Job* j, size_t t0, size_t bt, OnyxThreadPool* pool) {
  j->t0 = t0;
  j->count = j->tiles - t0 < bt ? j->tiles - t0 : bt;
  j->cols = round_up(j->count, j->wg->nr);
  j->v_stride = j->wg->ic * j->cols + SKEW;
  j->m_stride = j->wg->oc * j->cols + SKEW;
  block_tiles(j);
  cpu_host->parallel_for(pool, j->wg->ic, input_task, j);
  cpu_host->parallel_for(pool, j->wg->points, gemm_task, j);
  cpu_host->parallel_for(pool, j->wg->oc, output_task, j);
}

/* Buffers of one block, `bytes` (a multiple of 64) from a 64-byte aligned
 * base. */
static size_t slot_bytes(const CpuWinograd* wg, size_t bt) {
  const size_t floats = wg->points * ((wg->ic + wg->oc) * bt + 2 * SKEW);
  return round_up(floats * sizeof(float) + bt * (sizeof(size_t) + 2 * sizeof(int64_t)) +
                      (bt / WL) * (sizeof(Lanes) + sizeof(Runs)) + (bt / 8) * sizeof(Segs),
                  64);
}

static void slot_init(Job* j, char* base, size_t bt) {
  j->v = (float*)base;
  j->m = j->v + j->wg->points * (j->wg->ic * bt + SKEW);
  j->img = (size_t*)(j->m + j->wg->points * (j->wg->oc * bt + SKEW));
  j->iy = (int64_t*)(j->img + bt);
  j->ix = j->iy + bt;
  j->sin = (Segs*)(j->ix + bt);
  j->lin = (Lanes*)(j->sin + bt / 8);
  j->lout = (Runs*)(j->lin + bt / WL);
}

/* Xp (segs): zero floats before the first plane and after the last, for
 * the row loads of a segment (from up to 7 tiles before its first tile to
 * 36 floats past its origin). */
#define XP_FRONT 32
#define XP_BACK  64

/* Planes [b, e) of X (all images) into Xp. */
static void pad_planes(void* user, size_t b, size_t e) {
  const Job* j = user;
  const CpuWinogradConv* p = j->p;
  const size_t lo = p->pad_left < j->xp_w ? p->pad_left : j->xp_w;
  const size_t hi = p->pad_left + p->w < j->xp_w ? p->pad_left + p->w : j->xp_w;
  for (size_t q = b; q < e; q++) {
    const float* x = p->x + q * p->h * p->w;
    float* d = (float*)j->xp + q * j->xp_plane;
    for (size_t r = 0; r < j->xp_h; r++, d += j->xp_w) {
      const ptrdiff_t ih = (ptrdiff_t)r - (ptrdiff_t)p->pad_top;
      if (ih < 0 || ih >= (ptrdiff_t)p->h) {
        memset(d, 0, j->xp_w * sizeof(float));
        continue;
      }
      memset(d, 0, lo * sizeof(float));
      memcpy(d + lo, x + (size_t)ih * p->w, (hi - lo) * sizeof(float));
      memset(d + hi, 0, (j->xp_w - hi) * sizeof(float));
    }
  }
}

/* Whole blocks per thread: each slot (one per thread, its own buffers)
 * claims blocks until none is left, single-threaded each. Claimed, not
 * dealt: on a shared machine one core often runs slower than the other
 * for a while, and the faster one then takes more blocks. */
typedef struct Blocks {
  const Job* tmpl;
  char* base;
  size_t slot_bytes, bt, blocks;
  atomic_size_t next;
} Blocks;

static void blocks_task(void* user, size_t s0, size_t s1) {
  Blocks* b = user;
  for (size_t s = s0; s < s1; s++) {
    Job j = *b->tmpl;
    slot_init(&j, b->base + s * b->slot_bytes, b->bt);
    size_t polled = 0;
    for (size_t k; (k = atomic_fetch_add(&b->next, 1)) < b->blocks;) {
      if (cpu_stop_poll(j.stop, &polled, CPU_STOP_INTERVAL)) return;
      run_block(&j, k * b->bt, b->bt, NULL);
    }
  }
}

OnyxStatus* cpu_winograd_conv(const CpuWinograd* wg, OnyxKernelContext* ctx,
                              const CpuWinogradConv* p) {
  atomic_fetch_add(&runs_count, 1);
  CpuStop stop = {.ctx = ctx};
  Job j = {.wg = wg, .p = p, .stop = &stop};
  j.tiles_w = (p->ow + wg->m - 1) / wg->m;
  j.tiles_img = j.tiles_w * ((p->oh + wg->m - 1) / wg->m);
  j.tiles = p->n * j.tiles_img;
  if (j.tiles == 0) return NULL;
  const size_t nr = wg->nr;
  /* Tiles per block: V and M near BLOCK_BYTES, a multiple of nr, and the
   * blocks of a run about equal. The blocks do not depend on the pool. */
  const size_t per_tile = wg->points * (wg->ic + wg->oc) * sizeof(float);
  size_t bt = BLOCK_BYTES / per_tile / nr * nr;
  if (bt < nr) bt = nr;
  const size_t all = round_up(j.tiles, nr);
  if (bt > all) bt = all;
  size_t blocks = (all + bt - 1) / bt;
  bt = round_up((j.tiles + blocks - 1) / blocks, nr);
  blocks = (j.tiles + bt - 1) / bt;

  /* the gathers' and the runs' offsets are 32-bit (Xp's are not, but the
   * runs share the condition) */
  const int fits = p->n * (wg->ic > wg->oc ? wg->ic : wg->oc) *
                       (p->h * p->w > p->oh * p->ow ? p->h * p->w : p->oh * p->ow) <
                   ((size_t)1 << 30);
  j.avx512 = cpu_gemm_isa_level() == CPU_ISA_AVX512 && fits;
  j.avx2 = !j.avx512 && cpu_gemm_isa_level() != CPU_ISA_GENERIC;
  j.segs = j.avx2 && fits;
  size_t xp_bytes = 0;
  if (j.segs) {
    j.xp_h = j.tiles_img / j.tiles_w * wg->m + 2;
    j.xp_w = j.tiles_w * wg->m + 2;
    j.xp_plane = j.xp_h * j.xp_w;
    xp_bytes = round_up((XP_FRONT + p->n * wg->ic * j.xp_plane + XP_BACK) * sizeof(float), 64);
  }
  OnyxThreadPool* pool = cpu_host->ctx_thread_pool(ctx);
  const size_t threads = cpu_host->thread_pool_size(pool);
  /* Whole blocks per thread (no barriers, each thread's buffers in its own
   * cache) for as many as would share out evenly; the rest (or all, when
   * there are fewer blocks than threads) each split over the pool. */
  const size_t slots = threads > 1 && blocks >= threads ? threads : 1;
  const size_t shared = slots > 1 ? blocks / slots * slots : 0;
  const size_t sb = slot_bytes(wg, bt);
  void* mem = cpu_host->ctx_scratch(ctx, slots * sb + xp_bytes + 64);
  if (!mem)
    return cpu_ctx_error(ctx, ONYX_OUT_OF_MEMORY, "no scratch memory (%zu bytes)",
                         slots * sb + xp_bytes);
  char* base = (char*)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
  if (j.segs) {
    float* xp = (float*)(base + slots * sb);
    memset(xp, 0, XP_FRONT * sizeof(float));
    memset(xp + XP_FRONT + p->n * wg->ic * j.xp_plane, 0, XP_BACK * sizeof(float));
    j.xp = xp + XP_FRONT;
    cpu_host->parallel_for(pool, p->n * wg->ic, pad_planes, &j);
  }
  if (shared) {
    Blocks b = {&j, base, sb, bt, shared, 0};
    atomic_init(&b.next, 0);
    cpu_host->parallel_for(pool, slots, blocks_task, &b);
  }
  if (cpu_stop_seen(&stop)) return cpu_cancelled(ctx, NULL);
  slot_init(&j, base, bt);
  for (size_t k = shared; k < blocks; k++) {
    if (cpu_should_stop(ctx)) return cpu_cancelled(ctx, NULL);
    run_block(&j, k * bt, bt, pool);
  }
  return NULL;
}
