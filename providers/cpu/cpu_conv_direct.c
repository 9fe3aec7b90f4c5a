/* cpu_conv_direct.c — direct float32 2-D convolution with AVX-512 or AVX2
 * (see cpu_conv_direct.h).
 *
 * Y^T (positions x channels) = A x W^T, where row p of A is output position
 * p's window over the zero-padded input Xp (c, hp, wp): A[p][k] for k =
 * (c, i, j) is Xp[base(p) + off(k)] with base(p) = oh * sh * wp + ow * sw and
 * off(k) = (c * hp + i * dh) * wp + j * dw. A is never stored: the register
 * tile broadcasts it from Xp.
 *
 * Work items are (block of OCB output channels, chunk of CHUNK positions);
 * an item walks k in blocks of KC (the block's weight slice, 32 KiB with
 * AVX-512 and 16 KiB with AVX2, stays in L1 while every 6-position tile of
 * the chunk uses it), keeping
 * partial sums in a chunk buffer on the stack, and finally writes the
 * chunk transposed into Y (NCHW) with the bias and the activation. Items
 * of one channel block are consecutive, so a thread's weight block stays in
 * its L2 across chunks. */
#include "cpu_conv_direct.h"
#include "cpu_avx2.h"
#include "cpu_nn.h"
#include "cpu_util.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* AVX-512 */
#define OCB   64  /* output channels per block: 4 vectors */
#define NV    4   /* vectors per tile row */
#define TM    6   /* output positions per tile */
#define KC    128 /* k block: a KC x OCB weight slice is 32 KiB */
#define CHUNK 96  /* positions per work item (16 tiles): 24 KiB of partial sums */
/* AVX2: 6 positions x 16 channels (12 ymm accumulators, the GEMM's tile) */
#define OCB2   16
#define KC2    256 /* a KC2 x OCB2 weight slice is 16 KiB */
#define CHUNK2 144 /* 24 tiles: 9 KiB of partial sums */

static atomic_size_t runs_count, row_runs_count;

size_t cpu_conv_direct_runs(void) {
  return atomic_load(&runs_count);
}

size_t cpu_conv_direct_row_runs(void) {
  return atomic_load(&row_runs_count);
}

int cpu_conv_direct_kernel(void) {
  const char* e = getenv("ONYX_CPU_CONV_DIRECT");
  if (e && strcmp(e, "0") == 0) return CPU_CONV_DIRECT_NONE;
  const int isa = cpu_gemm_isa_level();
  return isa == CPU_ISA_AVX512 ? CPU_CONV_DIRECT_AVX512
         : isa == CPU_ISA_AVX2 ? CPU_CONV_DIRECT_AVX2
                               : CPU_CONV_DIRECT_NONE;
}

int cpu_conv_direct_available(void) {
  return cpu_conv_direct_kernel() != CPU_CONV_DIRECT_NONE;
}

/* At most this many output channels, an AVX-512 machine packs W for the
 * AVX2 kernel: the AVX-512 tile's 64 channels would be half or more zeros,
 * and 16-channel blocks fill the AVX2 tile and let a column-stride-2 conv
 * take the row kernel. The 3-channel stride-2 stems (node minima over 20
 * runs in the models, 1 thread): MobileNet-V2 (32 channels) 0.70 -> 0.42
 * ms, EfficientNet-B0 (32) 0.80 -> 0.53, MobileNet-V3-large (16) 0.58 ->
 * 0.24. */
#define SMALL_OC_AVX2 32

CpuConvDirect* cpu_conv_direct_create(const float* w, size_t oc, size_t ic, size_t kh, size_t kw) {
  int kernel = cpu_conv_direct_kernel();
  if (kernel == CPU_CONV_DIRECT_AVX512 && oc <= SMALL_OC_AVX2) kernel = CPU_CONV_DIRECT_AVX2;
  const size_t ocb = kernel == CPU_CONV_DIRECT_AVX2 ? OCB2 : OCB;
  const size_t k = ic * kh * kw, blocks = (oc + ocb - 1) / ocb;
  if (k == 0 || blocks == 0 || kernel == CPU_CONV_DIRECT_NONE) return NULL;
  CpuConvDirect* d = calloc(1, sizeof *d);
  if (!d) return NULL;
  d->w = cpu_gemm_alloc_packed(blocks * k * ocb);
  if (!d->w) {
    free(d);
    return NULL;
  }
  d->oc = oc, d->ic = ic, d->kh = kh, d->kw = kw, d->k = k, d->ocb = ocb, d->kernel = kernel;
  const char* e = getenv("ONYX_CPU_CONV_ROWS");
  d->rows = kernel == CPU_CONV_DIRECT_AVX2 && !(e && strcmp(e, "0") == 0);
  /* Each block is a k x ocb transpose of its ocb rows of W, written in
   * order; the source rows' current cache lines stay in L1 meanwhile. */
  for (size_t g = 0; g < blocks; g++) {
    float* dst = d->w + g * k * ocb;
    const size_t rows = oc - g * ocb < ocb ? oc - g * ocb : ocb;
    const float* src = w + g * ocb * k;
    for (size_t kk = 0; kk < k; kk++, dst += ocb) {
      for (size_t l = 0; l < rows; l++)
        dst[l] = src[l * k + kk];
      for (size_t l = rows; l < ocb; l++)
        dst[l] = 0.0f;
    }
  }
  return d;
}

void cpu_conv_direct_free(CpuConvDirect* d) {
  if (!d) return;
  free(d->w);
  free(d);
}

typedef struct Job {
  const CpuConvDirect* d;
  const CpuConvDirectRun* p;
  const float* xp;      /* padded X of the current image */
  const ptrdiff_t* off; /* K offsets into xp */
  float* y;             /* the current image's Y */
  const float* z;       /* the current image's Z, or NULL */
  size_t hp, wp, positions, chunk, chunks, blocks;
  size_t kc;     /* k block: at most KC, K split evenly */
  CpuStop* stop; /* the run's cancellation, polled per work item */
} Job;

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,fma,avx2,avx")))

/* How many of a tile's kc steps prefetch (lps lines each, npf in all): they
 * run in a loop of their own, ahead of the steps that only compute
 * (cpu_gemm.c's kernels, docs/performance.md "Instructions per FMA"). */
static inline size_t prefetch_steps(size_t kc, size_t npf, size_t lps) {
  const size_t q = lps ? (npf + lps - 1) / lps : 0;
  return q < kc ? q : kc;
}

/* kc steps of an R x 64 tile (R <= TM positions) over rows xb[r] of A;
 * part holds the tile's partial sums (R rows of OCB), read unless first.
 * Meanwhile the npf cache lines from pf are prefetched into L2, lps per
 * step (the next k block's weights, shared out among the chunk's tiles). */
AVX512 static inline __attribute__((always_inline)) void
tile_body(const int R, size_t kc, const float* const* xb, const ptrdiff_t* restrict off,
          const float* restrict w, float* restrict part, int first, const char* pf, size_t npf,
          size_t lps) {
  __m512 acc[TM][NV];
  const float* x[TM];
#pragma GCC unroll 6
  for (int r = 0; r < R; r++) {
    x[r] = xb[r];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
      acc[r][v] = first ? _mm512_setzero_ps() : _mm512_load_ps(part + r * OCB + 16 * v);
  }
#define STEP()                                                                                     \
  do {                                                                                             \
    const ptrdiff_t o = off[q];                                                                    \
    const __m512 b0 = _mm512_load_ps(w), b1 = _mm512_load_ps(w + 16);                              \
    const __m512 b2 = _mm512_load_ps(w + 32), b3 = _mm512_load_ps(w + 48);                         \
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {                                          \
      const __m512 a = _mm512_set1_ps(x[r][o]);                                                    \
      acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);                                               \
      acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);                                               \
      acc[r][2] = _mm512_fmadd_ps(a, b2, acc[r][2]);                                               \
      acc[r][3] = _mm512_fmadd_ps(a, b3, acc[r][3]);                                               \
    }                                                                                              \
  } while (0)
  const size_t qpf = prefetch_steps(kc, npf, lps);
  size_t q = 0;
#pragma GCC unroll 2
  for (; q < qpf; q++, w += OCB) {
    for (size_t u = 0; u < lps; u++)
      _mm_prefetch(pf + (q * lps + u) * 64, _MM_HINT_T1);
    STEP();
  }
#pragma GCC unroll 2
  for (; q < kc; q++, w += OCB)
    STEP();
#undef STEP
#pragma GCC unroll 6
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
      _mm512_store_ps(part + r * OCB + 16 * v, acc[r][v]);
}

#define DEFINE_TILE(R)                                                                             \
  AVX512 static void tile##R(size_t kc, const float* const* xb, const ptrdiff_t* off,              \
                             const float* w, float* part, int first, const char* pf, size_t npf,   \
                             size_t lps) {                                                         \
    tile_body(R, kc, xb, off, w, part, first, pf, npf, lps);                                       \
  }
DEFINE_TILE(1)
DEFINE_TILE(2)
DEFINE_TILE(3)
DEFINE_TILE(4)
DEFINE_TILE(5)
DEFINE_TILE(6)

typedef void (*TileFn)(size_t kc, const float* const* xb, const ptrdiff_t* off, const float* w,
                       float* part, int first, const char* pf, size_t npf, size_t lps);
/* by the number of rows: a last tile with fewer positions costs only those */
static const TileFn TILES[TM + 1] = {NULL, tile1, tile2, tile3, tile4, tile5, tile6};

/* Y[oc0 + l][p0 + t] = act(part[t][l] + bias[oc0 + l] (+ Z at the same
 * place)) for t < pn, l < ocn: 16 positions at a time gathered down a
 * column of part. */
AVX512 static void store_chunk(const Job* j, const float* part, size_t oc0, size_t ocn, size_t p0,
                               size_t pn) {
  const CpuConvDirectRun* p = j->p;
  const __m512i idx =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(OCB));
  const __m512 zero = _mm512_setzero_ps();
  for (size_t l = 0; l < ocn; l++) {
    float* yr = j->y + (oc0 + l) * j->positions + p0;
    const float* zr = j->z ? j->z + (oc0 + l) * j->positions + p0 : NULL;
    const __m512 b = _mm512_set1_ps(p->bias ? p->bias[oc0 + l] : 0.0f);
    for (size_t t = 0; t < pn; t += 16) {
      const __mmask16 m = pn - t >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (pn - t)) - 1);
      __m512 x = _mm512_mask_i32gather_ps(zero, m, idx, part + t * OCB + l, 4);
      x = _mm512_add_ps(x, b);
      if (zr) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, zr + t));
      /* max/min return their second operand on NaN: NaN is kept. */
      if (p->act == CPU_ACT_RELU) {
        x = _mm512_max_ps(zero, x);
      } else if (p->act == CPU_ACT_LEAKY_RELU) {
        x = _mm512_mask_mul_ps(x, _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), x,
                               _mm512_set1_ps(p->act_alpha));
      } else if (p->act == CPU_ACT_CLIP) {
        x = _mm512_min_ps(_mm512_set1_ps(p->act_max), _mm512_max_ps(_mm512_set1_ps(p->act_min), x));
      }
      _mm512_mask_storeu_ps(yr + t, m, x);
    }
  }
}

#define AVX2 __attribute__((target("avx2,fma,avx")))

/* tile_body with AVX2: an R x 16 tile (R <= TM), 2 weight vectors and R
 * broadcasts of X feeding 2R FMAs per step. */
AVX2 static inline __attribute__((always_inline)) void
tile2_body(const int R, size_t kc, const float* const* xb, const ptrdiff_t* restrict off,
           const float* restrict w, float* restrict part, int first, const char* pf, size_t npf,
           size_t lps) {
  __m256 acc[TM][2];
  const float* x[TM];
#pragma GCC unroll 6
  for (int r = 0; r < R; r++) {
    x[r] = xb[r];
    acc[r][0] = first ? _mm256_setzero_ps() : _mm256_load_ps(part + r * OCB2);
    acc[r][1] = first ? _mm256_setzero_ps() : _mm256_load_ps(part + r * OCB2 + 8);
  }
#define STEP()                                                                                     \
  do {                                                                                             \
    const ptrdiff_t o = off[q];                                                                    \
    const __m256 b0 = _mm256_load_ps(w), b1 = _mm256_load_ps(w + 8);                               \
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {                                          \
      const __m256 a = _mm256_broadcast_ss(x[r] + o);                                              \
      acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);                                               \
      acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);                                               \
    }                                                                                              \
  } while (0)
  const size_t qpf = prefetch_steps(kc, npf, lps);
  size_t q = 0;
#pragma GCC unroll 2
  for (; q < qpf; q++, w += OCB2) {
    for (size_t u = 0; u < lps; u++)
      _mm_prefetch(pf + (q * lps + u) * 64, _MM_HINT_T1);
    STEP();
  }
#pragma GCC unroll 2
  for (; q < kc; q++, w += OCB2)
    STEP();
#undef STEP
#pragma GCC unroll 6
  for (int r = 0; r < R; r++) {
    _mm256_store_ps(part + r * OCB2, acc[r][0]);
    _mm256_store_ps(part + r * OCB2 + 8, acc[r][1]);
  }
}

#define DEFINE_TILE2(R)                                                                            \
  AVX2 static void tile2_##R(size_t kc, const float* const* xb, const ptrdiff_t* off,              \
                             const float* w, float* part, int first, const char* pf, size_t npf,   \
                             size_t lps) {                                                         \
    tile2_body(R, kc, xb, off, w, part, first, pf, npf, lps);                                      \
  }
DEFINE_TILE2(1)
DEFINE_TILE2(2)
DEFINE_TILE2(3)
DEFINE_TILE2(4)
DEFINE_TILE2(5)
DEFINE_TILE2(6)

static const TileFn TILES2[TM + 1] = {NULL, tile2_1, tile2_2, tile2_3, tile2_4, tile2_5, tile2_6};

/* store_chunk with AVX2: 8 positions x 8 channels of part at a time,
 * transposed in registers, then each channel's 8 positions through the
 * bias, Z and the activation into its row of Y (a mask for the last). */
AVX2 static void store_chunk2(const Job* j, const float* part, size_t oc0, size_t ocn, size_t p0,
                              size_t pn) {
  const CpuConvDirectRun* p = j->p;
  const __m256 zero = _mm256_setzero_ps();
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (size_t t = 0; t < pn; t += 8) {
    const size_t nt = pn - t < 8 ? pn - t : 8;
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)nt), lane);
    for (size_t l0 = 0; l0 < ocn; l0 += 8) {
      __m256 r[8], c[8];
      for (size_t i = 0; i < 8; i++)
        r[i] = i < nt ? _mm256_load_ps(part + (t + i) * OCB2 + l0) : zero;
      /* c[l] holds positions t..t+7 of channel l0 + l */
      cpu_transpose8_avx2(r, c);
      const size_t nl = ocn - l0 < 8 ? ocn - l0 : 8;
      for (size_t l = 0; l < nl; l++) {
        const size_t ch = oc0 + l0 + l;
        float* yr = j->y + ch * j->positions + p0 + t;
        __m256 x = _mm256_add_ps(c[l], _mm256_set1_ps(p->bias ? p->bias[ch] : 0.0f));
        if (j->z) x = _mm256_add_ps(x, _mm256_maskload_ps(j->z + ch * j->positions + p0 + t, m));
        x = cpu_act_avx2(x, p->act, p->act_alpha, p->act_min, p->act_max);
        cpu_store_first_avx2(yr, x, nt);
      }
    }
  }
}
#endif

/* The work items (one chunk of positions for one block of output channels
 * each) with either kernel: AVX-512 items run block-major (a thread's
 * 64-channel weight block stays in its L2 across chunks), AVX2 ones
 * chunk-major (a chunk's windows stay in L2 while the small weight blocks
 * take turns). */
static void items(void* user, size_t begin, size_t end) {
  const Job* j = user;
#if defined(__x86_64__) && defined(__GNUC__)
  const CpuConvDirect* d = j->d;
  const CpuConvDirectRun* p = j->p;
  const int wide = d->kernel == CPU_CONV_DIRECT_AVX512;
  const TileFn* tile = wide ? TILES : TILES2;
  void (*store)(const Job*, const float*, size_t, size_t, size_t, size_t) =
      wide ? store_chunk : store_chunk2;
  const size_t ocb = d->ocb;
  float part[CHUNK * OCB > CHUNK2 * OCB2 ? CHUNK * OCB : CHUNK2 * OCB2]
      __attribute__((aligned(64)));
  const float* xb[CHUNK > CHUNK2 ? CHUNK : CHUNK2];
  size_t polled = 0;
  for (size_t it = begin; it < end; it++) {
    if (cpu_stop_seen(j->stop)) return; /* the k blocks below poll */
    const size_t g = wide ? it / j->chunks : it % j->blocks;
    const size_t c = wide ? it % j->chunks : it / j->blocks;
    const size_t oc0 = g * ocb, ocn = d->oc - oc0 < ocb ? d->oc - oc0 : ocb;
    const size_t p0 = c * j->chunk,
                 pn = j->positions - p0 < j->chunk ? j->positions - p0 : j->chunk;
    const float* wg = d->w + g * d->k * ocb;
    /* the chunk's rows of A: base pointers into Xp */
    for (size_t t = 0, oh = p0 / p->ow, ow = p0 % p->ow; t < pn; t++) {
      xb[t] = j->xp + oh * p->sh * j->wp + ow * p->sw;
      if (++ow == p->ow) ow = 0, oh++;
    }
    const size_t tiles = (pn + TM - 1) / TM;
    for (size_t k0 = 0; k0 < d->k; k0 += j->kc) {
      const size_t kc = d->k - k0 < j->kc ? d->k - k0 : j->kc;
      if (cpu_stop_poll(j->stop, &polled, pn * ocb * kc)) return;
      /* the next k block's weights: its lines shared out among the tiles */
      const size_t rest = d->k - k0 - kc, next = rest < j->kc ? rest : j->kc;
      const size_t lines = next * ocb * sizeof(float) / 64, per = (lines + tiles - 1) / tiles;
      const size_t lps = (per + kc - 1) / (kc ? kc : 1);
      const char* pf = (const char*)(wg + (k0 + kc) * ocb);
      for (size_t t = 0, i = 0; t < pn; t += TM, i++) {
        const size_t l0 = i * per < lines ? i * per : lines;
        const size_t ln = lines - l0 < per ? lines - l0 : per;
        tile[pn - t < TM ? pn - t : TM](kc, xb + t, j->off + k0, wg + k0 * ocb, part + t * ocb,
                                        k0 == 0, pf + l0 * 64, ln, lps ? lps : 1);
      }
    }
    store(j, part, oc0, ocn, p0, pn);
  }
#else
  (void)j, (void)begin, (void)end;
#endif
}

typedef struct PadJob {
  const CpuConvDirectRun* p;
  const float* x; /* one image */
  float* xp;
  size_t hp, wp;
} PadJob;

/* Channels [begin, end) of the image into Xp: zero outside X. */
static void pad_channels(void* user, size_t begin, size_t end) {
  const PadJob* j = user;
  const CpuConvDirectRun* p = j->p;
  for (size_t c = begin; c < end; c++) {
    const float* xc = j->x + c * p->h * p->w;
    float* dc = j->xp + c * j->hp * j->wp;
    for (size_t r = 0; r < j->hp; r++) {
      float* dr = dc + r * j->wp;
      const ptrdiff_t ih = (ptrdiff_t)r - (ptrdiff_t)p->pad_top;
      if (ih < 0 || ih >= (ptrdiff_t)p->h) {
        memset(dr, 0, j->wp * sizeof(float));
        continue;
      }
      /* columns [lo, hi) of the row come from X */
      const size_t lo = p->pad_left < j->wp ? p->pad_left : j->wp;
      const size_t hi = p->pad_left + p->w < j->wp ? p->pad_left + p->w : j->wp;
      memset(dr, 0, lo * sizeof(float));
      if (hi > lo) memcpy(dr + lo, xc + (size_t)ih * p->w, (hi - lo) * sizeof(float));
      const size_t from = hi > lo ? hi : lo;
      if (j->wp > from) memset(dr + from, 0, (j->wp - from) * sizeof(float));
    }
  }
}

/* Both kernels' run: per image, X into its zero-padded copy by `pad` (each
 * of its rows split into `phases` column phases of `width` floats: 1 for
 * the tile kernel's Xp, 2 for the row kernel's Xq), then `items` work
 * items of `fn`. off[k] for k = (channel, kernel row, kernel column) is
 * that window element's place relative to a window's origin. */
static OnyxStatus* run_padded(const CpuConvDirect* d, OnyxKernelContext* ctx,
                              const CpuConvDirectRun* p, Job* j, size_t phases, size_t width,
                              void (*pad)(void*, size_t, size_t), void (*fn)(void*, size_t, size_t),
                              size_t items) {
  size_t xp_floats, bytes;
  if (!cpu_mul_size(d->ic, j->hp, &xp_floats) || !cpu_mul_size(xp_floats, phases, &xp_floats) ||
      !cpu_mul_size(xp_floats, width, &xp_floats) ||
      !cpu_mul_size(xp_floats, sizeof(float), &bytes) ||
      !cpu_add_size(bytes, d->k * sizeof(ptrdiff_t) + 128, &bytes))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "integer overflow: the zero-padded input (%zu x %zu x %zu) does not fit "
                         "in memory (pads, dilations)",
                         d->ic, j->hp, width);
  char* mem = cpu_host->ctx_scratch(ctx, bytes);
  if (!mem)
    return cpu_ctx_error(ctx, ONYX_OUT_OF_MEMORY, "no scratch memory (%zu bytes)",
                         xp_floats * sizeof(float) + d->k * sizeof(ptrdiff_t));
  float* xp = (float*)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
  ptrdiff_t* off = (ptrdiff_t*)(((uintptr_t)(xp + xp_floats) + 63) & ~(uintptr_t)63);
  for (size_t c = 0, k = 0; c < d->ic; c++)
    for (size_t i = 0; i < d->kh; i++)
      for (size_t jj = 0; jj < d->kw; jj++, k++) {
        const size_t col = jj * p->dw; /* in the padded row; its phase, then its place */
        off[k] =
            (ptrdiff_t)(((c * j->hp + i * p->dh) * phases + col % phases) * width + col / phases);
      }
  j->off = off, j->xp = xp, j->wp = width;
  OnyxThreadPool* pool = cpu_host->ctx_thread_pool(ctx);
  for (size_t n = 0; n < p->n; n++) {
    PadJob pj = {p, p->x + n * d->ic * p->h * p->w, xp, j->hp, width};
    cpu_host->parallel_for(pool, d->ic, pad, &pj);
    j->y = p->y + n * d->oc * j->positions;
    j->z = p->z ? p->z + n * d->oc * j->positions : NULL;
    cpu_host->parallel_for(pool, items, fn, j);
    if (cpu_stop_seen(j->stop)) return cpu_cancelled(ctx, NULL);
  }
  return NULL;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The row kernel (AVX2, column stride 2, at least ROW_MIN_OW output
 * columns, K at most ROW_MAX_K: ResNet's stem): 16 (or 8) neighbouring output positions of one row
 * in the lanes of 2 (1) ymm, times R <= 6 output channels broadcast from the packed W (its
 * 16-channel blocks taken 6, 6 and 4 at a time). Xq, X's zero-padded copy with each row split into
 * its even and odd columns, makes a row of stride-2 windows read contiguous floats: per step, 2 row
 * loads and R broadcasts feed 2R FMAs, and the tile goes straight into Y's
 * rows (no transposes). Each output sums over k in the same order as the
 * tile kernel's, with the same FMAs: both give the same bits. The stem
 * (1x3x224x224, 64 channels, interleaved with the tile kernel): median
 * 4.96 -> 4.47 ms at 1 thread. ONYX_CPU_CONV_ROWS=0 (read when W is packed)
 * turns it off. */

/* Larger K: the tile kernel. Each channel group rereads the block's
 * K x 16 weights and the row's windows, from L2 once past L1: ResNet's
 * stride-2 3x3 convs (K = 576 .. 2304) ran 25-40% slower on it. */
#define ROW_MAX_K 256
#define RV        2 /* vectors per row tile */
#define RC        6 /* channels per row tile */
/* Narrower outputs waste most lanes: the tile kernel. */
#define ROW_MIN_OW 12
/* Xq rows of at most this many floats per column parity. */
#define ROW_WQ_MAX 1024

typedef void (*RowFn)(size_t k, const float* x, const ptrdiff_t* off, const float* w,
                      __m256 out[RC][RV]);

AVX2 static inline __attribute__((always_inline)) void
row_body(const int R, const int V, size_t k, const float* x, const ptrdiff_t* restrict off,
         const float* restrict w, __m256 out[RC][RV]) {
  __m256 acc[RC][RV];
#pragma GCC unroll 6
  for (int r = 0; r < R; r++)
#pragma GCC unroll 2
    for (int v = 0; v < V; v++)
      acc[r][v] = _mm256_setzero_ps();
#pragma GCC unroll 2
  for (size_t q = 0; q < k; q++, w += OCB2) {
    const float* xr = x + off[q];
    const __m256 x0 = _mm256_loadu_ps(xr);
    const __m256 x1 = V > 1 ? _mm256_loadu_ps(xr + 8) : x0;
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
      const __m256 b = _mm256_broadcast_ss(w + r);
      acc[r][0] = _mm256_fmadd_ps(b, x0, acc[r][0]);
      if (V > 1) acc[r][1] = _mm256_fmadd_ps(b, x1, acc[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; r++)
#pragma GCC unroll 2
    for (int v = 0; v < V; v++)
      out[r][v] = acc[r][v];
}

#define DEFINE_ROW(R, V)                                                                           \
  AVX2 static void row_##R##_##V(size_t k, const float* x, const ptrdiff_t* off, const float* w,   \
                                 __m256 out[RC][RV]) {                                             \
    row_body(R, V, k, x, off, w, out);                                                             \
  }
DEFINE_ROW(1, 1)
DEFINE_ROW(2, 1)
DEFINE_ROW(3, 1)
DEFINE_ROW(4, 1)
DEFINE_ROW(5, 1)
DEFINE_ROW(6, 1)
DEFINE_ROW(1, 2)
DEFINE_ROW(2, 2)
DEFINE_ROW(3, 2)
DEFINE_ROW(4, 2)
DEFINE_ROW(5, 2)
DEFINE_ROW(6, 2)

static const RowFn ROWS[RC + 1][RV + 1] = {{NULL, NULL, NULL},       {NULL, row_1_1, row_1_2},
                                           {NULL, row_2_1, row_2_2}, {NULL, row_3_1, row_3_2},
                                           {NULL, row_4_1, row_4_2}, {NULL, row_5_1, row_5_2},
                                           {NULL, row_6_1, row_6_2}};

/* Work items (output row, 16-channel block of W): each channel group of the
 * block along the row, 16 positions at a time, with the bias, Z and the
 * activation on the way into Y. */
AVX2 static void row_items(void* user, size_t begin, size_t end) {
  const Job* j = user;
  const CpuConvDirect* d = j->d;
  const CpuConvDirectRun* p = j->p;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256 out[RC][RV];
  size_t polled = 0;
  for (size_t it = begin; it < end; it++) {
    if (cpu_stop_poll(j->stop, &polled, p->ow * OCB2 * d->k)) return;
    const size_t oh = it / j->blocks, g = it % j->blocks;
    const float* wb = d->w + g * d->k * OCB2;
    const float* xrow = j->xp + oh * p->sh * 2 * j->wp;
    for (size_t l0 = 0; l0 < OCB2 && g * OCB2 + l0 < d->oc; l0 += RC) {
      size_t R = OCB2 - l0 < RC ? OCB2 - l0 : RC;
      if (d->oc - g * OCB2 - l0 < R) R = d->oc - g * OCB2 - l0;
      for (size_t ow0 = 0; ow0 < p->ow; ow0 += 8 * RV) {
        const size_t n = p->ow - ow0 < 8 * RV ? p->ow - ow0 : 8 * RV;
        const size_t V = n > 8 ? 2 : 1;
        ROWS[R][V](d->k, xrow + ow0, j->off, wb + l0, out);
        for (size_t r = 0; r < R; r++) {
          const size_t ch = g * OCB2 + l0 + r, at = ch * j->positions + oh * p->ow + ow0;
          const __m256 bias = _mm256_set1_ps(p->bias ? p->bias[ch] : 0.0f);
          for (size_t v = 0; v < V; v++) {
            const size_t cnt = n - 8 * v < 8 ? n - 8 * v : 8;
            const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)cnt), lane);
            __m256 x = _mm256_add_ps(out[r][v], bias);
            if (j->z)
              x = _mm256_add_ps(x, cnt == 8 ? _mm256_loadu_ps(j->z + at + 8 * v)
                                            : _mm256_maskload_ps(j->z + at + 8 * v, m));
            x = cpu_act_avx2(x, p->act, p->act_alpha, p->act_min, p->act_max);
            cpu_store_first_avx2(j->y + at + 8 * v, x, cnt);
          }
        }
      }
    }
  }
}

/* Xq's channels [begin, end) of one image: each of the hp padded rows as
 * its even, then its odd columns, wp (here: Xq's row width) floats each. */
AVX2 static void split_channels(void* user, size_t begin, size_t end) {
  const PadJob* j = user;
  const CpuConvDirectRun* p = j->p;
  const size_t wq = j->wp, wpad = 2 * wq; /* padded row: wpad floats */
  float row[2 * ROW_WQ_MAX + 16] __attribute__((aligned(32)));
  for (size_t c = begin; c < end; c++) {
    const float* xc = j->x + c * p->h * p->w;
    float* dc = j->xp + c * j->hp * wpad;
    for (size_t r = 0; r < j->hp; r++, dc += wpad) {
      const ptrdiff_t ih = (ptrdiff_t)r - (ptrdiff_t)p->pad_top;
      if (ih < 0 || ih >= (ptrdiff_t)p->h) {
        memset(dc, 0, wpad * sizeof(float));
        continue;
      }
      /* the padded row: columns [lo, hi) from X */
      const size_t lo = p->pad_left < wpad ? p->pad_left : wpad;
      const size_t hi = p->pad_left + p->w < wpad ? p->pad_left + p->w : wpad;
      memset(row, 0, lo * sizeof(float));
      if (hi > lo) memcpy(row + lo, xc + (size_t)ih * p->w, (hi - lo) * sizeof(float));
      memset(row + hi, 0, (wpad - hi + 16) * sizeof(float));
      /* even columns into dc[0, wq), odd ones into dc[wq, 2 wq) */
      for (size_t x = 0; x < wq; x += 8) {
        const __m256 a = _mm256_load_ps(row + 2 * x), b = _mm256_load_ps(row + 2 * x + 8);
        const __m256 e = _mm256_shuffle_ps(a, b, 0x88), o = _mm256_shuffle_ps(a, b, 0xDD);
        const __m256 ev = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8));
        const __m256 od = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xD8));
        cpu_store_first_avx2(dc + x, ev, wq - x);
        cpu_store_first_avx2(dc + wq + x, od, wq - x);
      }
    }
  }
}

/* cpu_conv_direct_run with the row kernel; j has hp, positions and blocks. */
static OnyxStatus* run_rows(const CpuConvDirect* d, OnyxKernelContext* ctx,
                            const CpuConvDirectRun* p, Job* j, size_t wq) {
  atomic_fetch_add(&row_runs_count, 1);
  return run_padded(d, ctx, p, j, 2, wq, split_channels, row_items, p->oh * j->blocks);
}
#endif

OnyxStatus* cpu_conv_direct_run(const CpuConvDirect* d, OnyxKernelContext* ctx,
                                const CpuConvDirectRun* p) {
  atomic_fetch_add(&runs_count, 1);
  if (p->oh == 0 || p->ow == 0 || p->n == 0) return NULL;
  CpuStop stop = {.ctx = ctx};
  Job j = {.d = d, .p = p, .stop = &stop};
  /* Xp covers every input position some window reads: rows [-pad_top,
   * (oh - 1) sh + (kh - 1) dh - pad_top], likewise columns. */
  size_t th, tw;
  if (!cpu_mul_size(p->oh - 1, p->sh, &j.hp) || !cpu_mul_size(d->kh - 1, p->dh, &th) ||
      !cpu_add_size(j.hp, th + 1, &j.hp) || !cpu_mul_size(p->ow - 1, p->sw, &j.wp) ||
      !cpu_mul_size(d->kw - 1, p->dw, &tw) || !cpu_add_size(j.wp, tw + 1, &j.wp))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "integer overflow: the padded extent of the input (strides, dilations)");
  j.positions = p->oh * p->ow;
  /* chunks of about equal size (a multiple of TM positions, at most CHUNK):
   * a short last chunk would stream a whole weight block for a few rows */
  const size_t chunk_max = d->kernel == CPU_CONV_DIRECT_AVX2 ? CHUNK2 : CHUNK;
  const size_t kc_max = d->kernel == CPU_CONV_DIRECT_AVX2 ? KC2 : KC;
  j.chunks = (j.positions + chunk_max - 1) / chunk_max;
  j.chunk = ((j.positions + j.chunks - 1) / j.chunks + TM - 1) / TM * TM;
  j.chunks = (j.positions + j.chunk - 1) / j.chunk;
  j.blocks = (d->oc + d->ocb - 1) / d->ocb;
#if defined(__x86_64__) && defined(__GNUC__)
  const size_t wq = (p->ow + 15) / 16 * 16 + (d->kw - 1) / 2;
  if (d->rows && p->sw == 2 && p->dw == 1 && p->ow >= ROW_MIN_OW && d->k <= ROW_MAX_K &&
      wq <= ROW_WQ_MAX)
    return run_rows(d, ctx, p, &j, wq);
#endif
  const size_t kblocks = (d->k + kc_max - 1) / kc_max;
  j.kc = (d->k + kblocks - 1) / kblocks;
  return run_padded(d, ctx, p, &j, 1, j.wp, pad_channels, items, j.blocks * j.chunks);
}
