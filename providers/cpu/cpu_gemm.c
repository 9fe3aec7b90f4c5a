/* cpu_gemm.c — the CPU provider's fp32 GEMM: packed panels, register-blocked
 * FMA micro-kernels picked at run time (AVX-512, AVX2, portable C), cache
 * blocking over k, weight prepacking and tiles spread over the session pool.
 *
 * Layouts. op(A) is packed into panels of MR rows: panel q holds rows
 * q*MR .. q*MR+MR-1 as K x MR floats (k-major, zero rows past M). op(B) is
 * packed into panels of NR columns: panel p holds K x NR floats (zero columns
 * past N). A panel's slice for a k block [k0, k0+kc) starts at k0*MR (k0*NR)
 * and is contiguous, so one micro-kernel call streams both operands linearly.
 *
 * Micro-kernels. AVX-512: 8 x 32 (16 zmm accumulators; per k step two B
 * vectors and eight broadcasts feed 16 FMAs), with a 16-column variant for
 * a last panel that is mostly padding, and a store path without masks for
 * full tiles. AVX2: 6 x 16 (12 ymm accumulators), with an 8-column variant
 * and the same two store paths. Portable C: 6 x 16.
 *
 * Blocking. C is cut into tiles (a multiple of MR rows x a multiple of NR
 * columns), the units of parallel work. Inside a tile: for each k block (at
 * most KC, chosen so that a KC x NR B panel takes about two thirds of the L1
 * data cache), for each B panel (which stays in L1), for each A panel of the
 * tile (the tile's A block stays in L2): one micro-kernel call of kc rank-1
 * updates on an MR x NR register tile, then the epilogue (alpha, beta * C,
 * bias, activation) on store. A is packed once per call into a per-thread
 * buffer that is kept for the next call (or packed at kernel creation when
 * constant); B is used prepacked when the caller packed it (constant
 * weights, im2col), otherwise each tile packs its B panels into a stack
 * buffer per k block.
 *
 * Denormals. The tiles run with the SSE flush-to-zero and denormals-are-zero
 * modes on (x86; the caller's MXCSR is restored after): a subnormal operand
 * counts as zero and a subnormal result becomes zero. Without them every
 * product with a subnormal operand (tiny probabilities, saturated gates,
 * weights decayed to ~1e-40) costs a ~100-cycle microcode assist on Intel
 * cores: a 128 x 64 x 128 product of subnormal-laden A measured 100x
 * slower. The values changed are below 1.2e-38 in magnitude.
 *
 * Every element of C is summed over k in the same order whatever the tiling
 * or the thread count, so results do not depend on the pool size. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* madvise's MADV_HUGEPAGE */
#endif
#include "cpu_avx2.h"
#include "cpu_gemm.h"
#include "cpu_util.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GEMM_X86 1
#else
#define GEMM_X86 0
#endif

#ifndef KC_MAX
#define KC_MAX 256 /* the largest k block (stack buffers are sized for it) */
#endif
#define KC_MIN 64
#ifndef NR_MAX
#define NR_MAX 48 /* the widest B panel (-DNR_MAX=64 for the 6 x 64 experiment) */
#endif
#ifndef MR_MAX
#define MR_MAX 8
#endif
#ifndef TILE_ROWS
/* A tile is at most TILE_ROWS rows (rounded up to MR) tall ... (with B
 * prepacked). 64, not 128: its A block and C tile take half as much of a
 * 512 KiB L2 (Zen 3), and in the machine's slow state (docs/performance.md)
 * 1024^3 ran 1.2-3.0% faster in each of four interleaved runs of 200-300
 * rounds (bench/gemm_variants.c), within 1.1% over all rounds. On the Xeon
 * host's 2 MiB L2, 64 and 128 were within 1%. */
#define TILE_ROWS 64
#endif
/* ... except that an M of up to TILE_ROWS_ONE rows is one row tile: two
 * would each stream the weights from memory (bert_layer's M = 128). */
#define TILE_ROWS_ONE 128
#ifndef TILE_NR
#define TILE_NR 8 /* ... and TILE_NR B panels (at most TILE_COL columns) wide */
#endif
#ifndef TILE_COL
#define TILE_COL 512
#endif
#define TILES_PER_THREAD 4
/* Below this many multiply-adds a GEMM runs on the calling thread only. */
#define GEMM_INLINE_WORK (48 * 48 * 48)
/* Per-thread A buffers up to this size are kept between calls. */
#define SCRATCH_KEEP_BYTES ((size_t)64 << 20)

static size_t min_sz(size_t a, size_t b) {
  return a < b ? a : b;
}

/* ------------------------------------------------------------------------ */
/* Epilogue and micro-kernels                                                 */
/* ------------------------------------------------------------------------ */

/* What a micro-kernel does on store, for rows [0, mr) and columns [0, nr) of
 * its tile: C = alpha * acc + (beta ? beta * C : 0) + bias_row[r] +
 * bias_col[j], then the activation. beta == 0 never reads C. */
typedef struct Epi {
  float alpha, beta;
  const float* bias_row; /* offset to the tile's first row, or NULL */
  const float* bias_col; /* offset to the tile's first column, or NULL */
  int act;               /* CpuAct; CPU_ACT_NONE before the last k block */
  float act_alpha, act_min, act_max;
  /* Lines to prefetch into L2 meanwhile, one per k step (the x86 kernels;
   * the portable one ignores them): the next packed-B slice. */
  const char* pf;
  size_t npf;
} Epi;

/* The activations keep NaN. */
static inline float act_scalar(float v, const Epi* e) {
  return cpu_act_apply(v, e->act, e->act_alpha, e->act_min, e->act_max);
}

/* kc rank-1 updates of an MR x NR register tile from the packed slices a
 * (kc x MR) and b (kc x NR), stored to rows [0, mr) and columns [0, nr) of
 * c through the epilogue. */
typedef void (*KernelFn)(size_t kc, const float* a, const float* b, float* c, size_t ldc, size_t mr,
                         size_t nr, const Epi* e);

/* The scalar epilogue over an accumulator array acc[MR][ld]. */
static void epi_store(const float* acc, size_t ld, float* c, size_t ldc, size_t mr, size_t nr,
                      const Epi* e) {
  for (size_t r = 0; r < mr; r++) {
    float* cr = c + r * ldc;
    for (size_t j = 0; j < nr; j++) {
      float v = e->alpha * acc[r * ld + j];
      if (e->beta != 0.0f) v += e->beta * cr[j];
      if (e->bias_row) v += e->bias_row[r];
      if (e->bias_col) v += e->bias_col[j];
      cr[j] = act_scalar(v, e);
    }
  }
}

/* Portable kernel: 6 x 16, the AVX2 kernel's layout. */
#define GEN_MR 6
#define GEN_NR 16
static void kernel_generic(size_t kc, const float* restrict a, const float* restrict b, float* c,
                           size_t ldc, size_t mr, size_t nr, const Epi* e) {
  float acc[GEN_MR][GEN_NR] = {{0}};
  for (size_t p = 0; p < kc; p++, a += GEN_MR, b += GEN_NR)
    for (size_t r = 0; r < GEN_MR; r++)
      for (size_t j = 0; j < GEN_NR; j++)
        acc[r][j] += a[r] * b[j];
  epi_store(&acc[0][0], GEN_NR, c, ldc, mr, nr, e);
}

#if GEMM_X86
#define AVX512         __attribute__((target("avx512f,avx512vl,avx512dq,fma,avx2,avx")))
#define AVX2           __attribute__((target("avx2,fma,avx")))
#define GEMM_PRAGMA(x) _Pragma(#x)
#define UNROLL_ALL     GEMM_PRAGMA(GCC unroll 16)

/* The AVX-512 register tile. 8 x 32 (16 accumulators) measured as fast
 * as 6 x 64 and 12 x 32 (24 accumulators) in the driver on the benchmark
 * shapes, and wastes no rows on M = 64 or 128. -DK512_MR=6 -DK512_NR=64
 * -DNR_MAX=64 (or -DK512_MR=12 -DMR_MAX=12) builds the others for
 * experiments. */
#ifndef K512_MR
#define K512_MR 8
#endif
#ifndef K512_NR
#define K512_NR 32
#endif
_Static_assert(K512_NR <= NR_MAX && K512_MR <= MR_MAX, "stack buffers too small for the tile");

/* The AVX-512 store of one accumulator row (NV vectors) through the
 * epilogue; m[v] masks the columns of vector v that exist. */
AVX512 static inline __attribute__((always_inline)) void epi_row_avx512(const __m512* acc, int nv,
                                                                        const __mmask16* m,
                                                                        float* cr, const __m512* bc,
                                                                        size_t r, const Epi* e) {
  const __m512 zero = _mm512_setzero_ps(), alpha = _mm512_set1_ps(e->alpha);
  for (int v = 0; v < nv; v++) {
    __m512 x = _mm512_mul_ps(acc[v], alpha);
    if (e->beta != 0.0f)
      x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m[v], cr + 16 * v), _mm512_set1_ps(e->beta), x);
    if (e->bias_row) x = _mm512_add_ps(x, _mm512_set1_ps(e->bias_row[r]));
    x = _mm512_add_ps(x, bc[v]);
    /* max/min return their second operand on NaN: NaN is kept. */
    if (e->act == CPU_ACT_RELU) {
      x = _mm512_max_ps(zero, x);
    } else if (e->act == CPU_ACT_LEAKY_RELU) {
      x = _mm512_mask_mul_ps(x, _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), x,
                             _mm512_set1_ps(e->act_alpha));
    } else if (e->act == CPU_ACT_CLIP) {
      x = _mm512_min_ps(_mm512_set1_ps(e->act_max), _mm512_max_ps(_mm512_set1_ps(e->act_min), x));
    }
    _mm512_mask_storeu_ps(cr + 16 * v, m[v], x);
  }
}

/* The k loop of the x86 kernels around STEP_STMT (one k step): the steps
 * that prefetch the next B slice (e->pf, one line each), then the rest. One
 * loop with the test inside ran a quarter more instructions per FMA at -O2,
 * which costs that much whenever the core's other hardware thread is busy
 * (docs/performance.md, "Instructions per FMA"). */
#define GEMM_K_LOOP(STEP_STMT)                                                                     \
  do {                                                                                             \
    const char* pf = e->pf;                                                                        \
    const size_t npf = e->npf < kc ? e->npf : kc;                                                  \
    size_t p = 0;                                                                                  \
    GEMM_PRAGMA(GCC unroll 4)                                                                      \
    for (; p < npf; p++) {                                                                         \
      _mm_prefetch(pf + p * 64, _MM_HINT_T1);                                                      \
      STEP_STMT;                                                                                   \
    }                                                                                              \
    GEMM_PRAGMA(GCC unroll 4)                                                                      \
    for (; p < kc; p++)                                                                            \
      STEP_STMT;                                                                                   \
  } while (0)

/* One k step of the AVX-512 kernel: NV B vectors, K512_MR broadcasts. */
#define K512_STEP(NV, STRIDE)                                                                      \
  do {                                                                                             \
    __m512 bv[NV];                                                                                 \
    UNROLL_ALL for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_ps(b + 16 * v);                   \
    UNROLL_ALL for (int r = 0; r < K512_MR; r++) {                                                 \
      const __m512 av = _mm512_set1_ps(a[r]);                                                      \
      UNROLL_ALL for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);   \
    }                                                                                              \
    a += K512_MR;                                                                                  \
    b += STRIDE;                                                                                   \
  } while (0)

/* K512_MR rows x NV vectors of 16 columns from B panels K512_NR wide (a
 * narrower variant reads the first NV vectors of each B row). */
#define DEFINE_KERNEL_AVX512(NAME, NV, STRIDE)                                                     \
  AVX512 static void NAME(size_t kc, const float* restrict a, const float* restrict b, float* c,   \
                          size_t ldc, size_t mr, size_t nr, const Epi* e) {                        \
    __m512 acc[K512_MR][NV];                                                                       \
    UNROLL_ALL for (int r = 0; r < K512_MR; r++) UNROLL_ALL for (int v = 0; v < NV; v++)           \
        acc[r][v] = _mm512_setzero_ps();                                                           \
    GEMM_K_LOOP(K512_STEP(NV, STRIDE));                                                            \
    if (mr == K512_MR && nr >= 16 * NV && (e->act == CPU_ACT_NONE || e->act == CPU_ACT_RELU) &&    \
        e->alpha == 1.0f && (e->beta == 0.0f || e->beta == 1.0f)) {                                \
      /* the common full tiles, without masks: C = acc (+ C for a later k                          \
       * block) + bias_row + bias_col, Relu; the general path's order */                           \
      const int add_c = e->beta != 0.0f, relu = e->act == CPU_ACT_RELU;                            \
      __m512 bc[NV];                                                                               \
      UNROLL_ALL for (int v = 0; v < NV; v++) bc[v] =                                              \
          e->bias_col ? _mm512_loadu_ps(e->bias_col + 16 * v) : _mm512_setzero_ps();               \
      UNROLL_ALL for (int r = 0; r < K512_MR; r++) {                                               \
        const __m512 br = e->bias_row ? _mm512_set1_ps(e->bias_row[r]) : _mm512_setzero_ps();      \
        UNROLL_ALL for (int v = 0; v < NV; v++) {                                                  \
          float* cp = c + r * ldc + 16 * v;                                                        \
          __m512 x = acc[r][v];                                                                    \
          if (add_c) x = _mm512_add_ps(_mm512_loadu_ps(cp), x);                                    \
          if (e->bias_row) x = _mm512_add_ps(x, br);                                               \
          if (e->bias_col) x = _mm512_add_ps(x, bc[v]);                                            \
          if (relu) x = _mm512_max_ps(_mm512_setzero_ps(), x);                                     \
          _mm512_storeu_ps(cp, x);                                                                 \
        }                                                                                          \
      }                                                                                            \
      return;                                                                                      \
    }                                                                                              \
    __mmask16 m[NV];                                                                               \
    __m512 bc[NV];                                                                                 \
    for (int v = 0; v < NV; v++) {                                                                 \
      const size_t lo = 16 * (size_t)v;                                                            \
      m[v] = nr >= lo + 16 ? (__mmask16)0xFFFF                                                     \
             : nr <= lo    ? (__mmask16)0                                                          \
                           : (__mmask16)((1u << (nr - lo)) - 1);                                      \
      bc[v] = e->bias_col ? _mm512_maskz_loadu_ps(m[v], e->bias_col + lo) : _mm512_setzero_ps();   \
    }                                                                                              \
    /* constant row indices: a loop to mr kept acc in memory (16 spills) */                        \
    UNROLL_ALL for (int r = 0; r < K512_MR; r++) if ((size_t)r < mr)                               \
        epi_row_avx512(acc[r], NV, m, c + r * ldc, bc, (size_t)r, e);                              \
  }

#if K512_NR == 64
DEFINE_KERNEL_AVX512(kernel_avx512_x4, 4, K512_NR)
DEFINE_KERNEL_AVX512(kernel_avx512_x3, 3, K512_NR)
#endif
DEFINE_KERNEL_AVX512(kernel_avx512_x2, 2, K512_NR)
DEFINE_KERNEL_AVX512(kernel_avx512_x1, 1, K512_NR)
/* The wide variant: B panels of 48 columns, an 8 x 48 tile (24 accumulators:
 * 3 B vectors and 8 broadcasts per 24 FMAs). It runs only where n is a
 * multiple of 48 (isa_b), so every panel is full. */
#define WIDE_NR 48
DEFINE_KERNEL_AVX512(kernel_avx512_w, 3, WIDE_NR)
#undef K512_STEP

/* Picks the variant that covers nr columns: a last panel that is mostly
 * padding costs only the vectors it needs. */
static void kernel_avx512(size_t kc, const float* a, const float* b, float* c, size_t ldc,
                          size_t mr, size_t nr, const Epi* e) {
#if K512_NR == 64
  if (nr > 48) {
    kernel_avx512_x4(kc, a, b, c, ldc, mr, nr, e);
    return;
  }
  if (nr > 32) {
    kernel_avx512_x3(kc, a, b, c, ldc, mr, nr, e);
    return;
  }
#endif
  if (nr > 16)
    kernel_avx512_x2(kc, a, b, c, ldc, mr, nr, e);
  else
    kernel_avx512_x1(kc, a, b, c, ldc, mr, nr, e);
}

/* The AVX2 register tile: 6 x 16 (12 ymm accumulators; per k step two B
 * vectors and six broadcasts from memory feed 12 FMAs). */
#define K2_MR 6
#define K2_NR 16

/* The AVX2 store of one accumulator row (NV vectors of 8) through the
 * epilogue; m[v] has the lanes of vector v that exist, the first nr
 * (nv vectors cover them). No masked stores (cpu_store_first_avx2). */
AVX2 static inline __attribute__((always_inline)) void epi_row_avx2(const __m256* acc, int nv,
                                                                    const __m256i* m, size_t nr,
                                                                    float* cr, const __m256* bc,
                                                                    size_t r, const Epi* e) {
  const __m256 alpha = _mm256_set1_ps(e->alpha);
  for (int v = 0; v < nv; v++) {
    const size_t lo = 8 * (size_t)v, left = nr > lo ? nr - lo : 0; /* lanes of vector v */
    const int whole = left >= 8;
    __m256 x = _mm256_mul_ps(acc[v], alpha);
    if (e->beta != 0.0f)
      x = _mm256_fmadd_ps(whole ? _mm256_loadu_ps(cr + 8 * v)
                                : _mm256_maskload_ps(cr + 8 * v, m[v]),
                          _mm256_set1_ps(e->beta), x);
    if (e->bias_row) x = _mm256_add_ps(x, _mm256_set1_ps(e->bias_row[r]));
    x = _mm256_add_ps(x, bc[v]);
    x = cpu_act_avx2(x, e->act, e->act_alpha, e->act_min, e->act_max);
    cpu_store_first_avx2(cr + lo, x, left);
  }
}

/* One vector of the plain epilogue (any alpha, beta 0 or 1, at most a
 * column bias, no activation: every k block of a MatMul, Gemm or
 * FusedMatMul, attention's scaled scores), stored straight from an
 * accumulator: the other epilogues take the accumulators from the stack
 * (about 300 instructions a call more, 5% of matmul_1024's instructions and
 * 3.4% of its time). The general path's order: alpha * acc, then + C. */
AVX2 static inline __attribute__((always_inline)) void
plain_vec_avx2(float* cp, __m256 x, const float* alpha, int add_c, const float* bc, int off) {
  if (alpha) x = _mm256_mul_ps(x, _mm256_set1_ps(*alpha));
  if (add_c) x = _mm256_add_ps(_mm256_loadu_ps(cp), x);
  if (bc) x = _mm256_add_ps(x, _mm256_loadu_ps(bc + off));
  _mm256_storeu_ps(cp, x);
}

static inline int plain_epilogue(const Epi* e) {
  return !e->bias_row && e->act == CPU_ACT_NONE && (e->beta == 0.0f || e->beta == 1.0f);
}

/* The epilogues of an AVX2 tile (R rows x nv vectors of 8 in acc, rows
 * `stride` vectors apart) other than the plain one, which the kernels store
 * from their named accumulators: full tiles with a row bias or ReLU without
 * masks, in the general path's order (Conv), and the general path (alpha,
 * the other activations, masks at the edges). Not inlined: inlined, it kept
 * the 4 x 24 kernel's accumulators in memory inside its k loop. */
AVX2 static __attribute__((noinline)) void epi_tile_avx2(const __m256* acc, int stride, int R,
                                                         int nv, float* c, size_t ldc, size_t mr,
                                                         size_t nr, const Epi* e) {
  if (mr == (size_t)R && nr >= 8 * (size_t)nv &&
      (e->act == CPU_ACT_NONE || e->act == CPU_ACT_RELU) && e->alpha == 1.0f &&
      (e->beta == 0.0f || e->beta == 1.0f)) {
    const int add_c = e->beta != 0.0f, relu = e->act == CPU_ACT_RELU;
    __m256 bc[3];
    for (int v = 0; v < nv; v++)
      bc[v] = e->bias_col ? _mm256_loadu_ps(e->bias_col + 8 * v) : _mm256_setzero_ps();
    for (int r = 0; r < R; r++) {
      const __m256 br = e->bias_row ? _mm256_set1_ps(e->bias_row[r]) : _mm256_setzero_ps();
      for (int v = 0; v < nv; v++) {
        float* cp = c + r * ldc + 8 * v;
        __m256 x = acc[r * stride + v];
        if (add_c) x = _mm256_add_ps(_mm256_loadu_ps(cp), x);
        if (e->bias_row) x = _mm256_add_ps(x, br);
        if (e->bias_col) x = _mm256_add_ps(x, bc[v]);
        if (relu) x = _mm256_max_ps(_mm256_setzero_ps(), x);
        _mm256_storeu_ps(cp, x);
      }
    }
    return;
  }
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i m[3];
  __m256 bc[3];
  for (int v = 0; v < nv; v++) {
    const size_t lo = 8 * (size_t)v, have = nr <= lo ? 0 : nr - lo > 8 ? 8 : nr - lo;
    m[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)have), lane);
    bc[v] = e->bias_col ? _mm256_maskload_ps(e->bias_col + lo, m[v]) : _mm256_setzero_ps();
  }
  for (size_t r = 0; r < mr; r++)
    epi_row_avx2(acc + r * (size_t)stride, nv, m, nr, c + r * ldc, bc, r, e);
}

/* The first R rows of an MR-row tile x nv vectors of 8 columns, from A
 * panels MR wide and B panels NB wide (MR, NB, nv and R constants after
 * inlining): the 6 x 16 tile (nv 1-2, R 6, 4 or 2) and the 4 x 24 one (nv
 * 1-3, R 4 or 2). A last row panel of 2 or 4 rows (M = 128 or 64 on the
 * 6 x 16 tile) does only their FMAs. The accumulators are named variables
 * (GCC kept an array of them in memory, a store per FMA); those a tile does
 * not use are dead and dropped. The epilogue is vectorized like the AVX-512
 * one (a scalar store of the 96 results took about a fifth of a 256-deep
 * call). */
AVX2 static inline __attribute__((always_inline)) void
kernel_avx2_tile(size_t kc, const float* restrict a, const float* restrict b, float* c, size_t ldc,
                 size_t mr, size_t nr, const Epi* e, const int MR, const int NB, const int nv,
                 const int R) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
  __m256 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
  __m256 c40 = c00, c41 = c00, c42 = c00, c50 = c00, c51 = c00, c52 = c00;
#define ROW(r, x0, x1, x2)                                                                         \
  do {                                                                                             \
    const __m256 av = _mm256_broadcast_ss(a + r);                                                  \
    x0 = _mm256_fmadd_ps(av, b0, x0);                                                              \
    if (nv >= 2) x1 = _mm256_fmadd_ps(av, b1, x1);                                                 \
    if (nv == 3) x2 = _mm256_fmadd_ps(av, b2, x2);                                                 \
  } while (0)
#define STEP()                                                                                     \
  do {                                                                                             \
    const __m256 b0 = _mm256_loadu_ps(b), b1 = nv >= 2 ? _mm256_loadu_ps(b + 8) : b0;              \
    const __m256 b2 = nv == 3 ? _mm256_loadu_ps(b + 16) : b0;                                      \
    ROW(0, c00, c01, c02);                                                                         \
    ROW(1, c10, c11, c12);                                                                         \
    if (R > 2) {                                                                                   \
      ROW(2, c20, c21, c22);                                                                       \
      ROW(3, c30, c31, c32);                                                                       \
    }                                                                                              \
    if (R > 4) {                                                                                   \
      ROW(4, c40, c41, c42);                                                                       \
      ROW(5, c50, c51, c52);                                                                       \
    }                                                                                              \
    a += MR;                                                                                       \
    b += NB;                                                                                       \
  } while (0)
  GEMM_K_LOOP(STEP());
#undef STEP
#undef ROW
  if (mr == (size_t)R && nr >= 8 * (size_t)nv && plain_epilogue(e)) {
    const int add_c = e->beta != 0.0f;
    const float* bc = e->bias_col;
    const float* alpha = e->alpha != 1.0f ? &e->alpha : NULL;
#define OUT(r, x0, x1, x2)                                                                         \
  do {                                                                                             \
    plain_vec_avx2(c + (r)*ldc, x0, alpha, add_c, bc, 0);                                          \
    if (nv >= 2) plain_vec_avx2(c + (r)*ldc + 8, x1, alpha, add_c, bc, 8);                         \
    if (nv == 3) plain_vec_avx2(c + (r)*ldc + 16, x2, alpha, add_c, bc, 16);                       \
  } while (0)
    OUT(0, c00, c01, c02);
    OUT(1, c10, c11, c12);
    if (R > 2) {
      OUT(2, c20, c21, c22);
      OUT(3, c30, c31, c32);
    }
    if (R > 4) {
      OUT(4, c40, c41, c42);
      OUT(5, c50, c51, c52);
    }
#undef OUT
    return;
  }
  const __m256 acc[6 * 3] = {c00, c01, c02, c10, c11, c12, c20, c21, c22,
                             c30, c31, c32, c40, c41, c42, c50, c51, c52};
  epi_tile_avx2(acc, 3, R, nv, c, ldc, mr, nr, e);
}

/* The body for mr rows: 6, or 4 or 2 for a short last row panel. */
AVX2 static inline __attribute__((always_inline)) void
kernel_avx2_rows(size_t kc, const float* a, const float* b, float* c, size_t ldc, size_t mr,
                 size_t nr, const Epi* e, const int nv) {
  if (mr > 4)
    kernel_avx2_tile(kc, a, b, c, ldc, mr, nr, e, K2_MR, K2_NR, nv, 6);
  else if (mr > 2)
    kernel_avx2_tile(kc, a, b, c, ldc, mr, nr, e, K2_MR, K2_NR, nv, 4);
  else
    kernel_avx2_tile(kc, a, b, c, ldc, mr, nr, e, K2_MR, K2_NR, nv, 2);
}

AVX2 static void kernel_avx2_x2(size_t kc, const float* a, const float* b, float* c, size_t ldc,
                                size_t mr, size_t nr, const Epi* e) {
  kernel_avx2_rows(kc, a, b, c, ldc, mr, nr, e, 2);
}

AVX2 static void kernel_avx2_x1(size_t kc, const float* a, const float* b, float* c, size_t ldc,
                                size_t mr, size_t nr, const Epi* e) {
  kernel_avx2_rows(kc, a, b, c, ldc, mr, nr, e, 1);
}

/* A last panel of at most 8 columns costs only the vector it needs. */
static void kernel_avx2(size_t kc, const float* a, const float* b, float* c, size_t ldc, size_t mr,
                        size_t nr, const Epi* e) {
  if (nr > 8)
    kernel_avx2_x2(kc, a, b, c, ldc, mr, nr, e);
  else
    kernel_avx2_x1(kc, a, b, c, ldc, mr, nr, e);
}

/* The wide AVX2 register tile: 4 x 24 (12 accumulators; per k step three B
 * vectors and four broadcasts feed 12 FMAs: 7 loads against the 6 x 16
 * tile's 8, which counts when the core's other hardware thread shares the
 * load ports). Both run at the FMA peak from L1, and M = 64 or 128 (mlp,
 * bert_layer) leaves no short row panel. bench/pair.js against the 6 x 16
 * kernel, 1 thread: mlp 5.13 -> 4.98 ms, bert_layer 44.22 -> 43.62,
 * matmul_1024 24.12 -> 23.95. isa_b picks it for B of WIDE2_MIN_N columns
 * or more that the GEMM packs itself or that cpu_gemm_pack_b packed. */
#define KW_MR 4
#define KW_NR 24

/* The 4 x 24 kernel for mr rows (4, or 2 for a short last panel) and a
 * panel of nr columns (a last one of at most 8 or 16 costs only the
 * vectors it needs). */
#define KW_VARIANT(NAME, NV)                                                                       \
  AVX2 static void NAME(size_t kc, const float* a, const float* b, float* c, size_t ldc,           \
                        size_t mr, size_t nr, const Epi* e) {                                      \
    if (mr > 2)                                                                                    \
      kernel_avx2_tile(kc, a, b, c, ldc, mr, nr, e, KW_MR, KW_NR, NV, 4);                          \
    else                                                                                           \
      kernel_avx2_tile(kc, a, b, c, ldc, mr, nr, e, KW_MR, KW_NR, NV, 2);                          \
  }
KW_VARIANT(kernel_avx2w_x3, 3)
KW_VARIANT(kernel_avx2w_x2, 2)
KW_VARIANT(kernel_avx2w_x1, 1)
#undef KW_VARIANT

static void kernel_avx2_w(size_t kc, const float* a, const float* b, float* c, size_t ldc,
                          size_t mr, size_t nr, const Epi* e) {
  if (nr > 16)
    kernel_avx2w_x3(kc, a, b, c, ldc, mr, nr, e);
  else if (nr > 8)
    kernel_avx2w_x2(kc, a, b, c, ldc, mr, nr, e);
  else
    kernel_avx2w_x1(kc, a, b, c, ldc, mr, nr, e);
}
#endif

typedef struct Isa {
  const char* name;
  size_t mr, nr;
  KernelFn kernel;
} Isa;

static const Isa ISA_GENERIC = {"generic", GEN_MR, GEN_NR, kernel_generic};
#if GEMM_X86
static const Isa ISA_AVX2 = {"avx2", K2_MR, K2_NR, kernel_avx2};
static const Isa ISA_AVX2_W = {"avx2", KW_MR, KW_NR, kernel_avx2_w};
static const Isa ISA_AVX512 = {"avx512", K512_MR, K512_NR, kernel_avx512};
static const Isa ISA_AVX512_W = {"avx512", K512_MR, WIDE_NR, kernel_avx512_w};
#endif

static int forced_level = -1; /* tests only: cpu_gemm_force_isa */

/* ONYX_CPU_ISA=generic|avx2 caps the kernel (tests, comparisons); read once. */
static int env_cap(void) {
  static _Atomic int cap = -2; /* -2: not read yet; -1: no cap */
  int c = cap;
  if (c == -2) {
    const char* e = getenv("ONYX_CPU_ISA");
    c = !e ? -1 : !strcmp(e, "generic") ? 0 : !strcmp(e, "avx2") ? 1 : -1;
    cap = c;
  }
  return c;
}

static const Isa* isa(void) {
#if GEMM_X86
  int level = forced_level;
  if (level < 0) {
    /* __builtin_cpu_supports also checks that the OS saves the registers. */
    level = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                    __builtin_cpu_supports("avx512dq")
                ? 2
            : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1
                                                                              : 0;
  }
  const int cap = env_cap();
  if (cap >= 0 && level > cap) level = cap;
  if (level >= 2) return &ISA_AVX512;
  if (level == 1) return &ISA_AVX2;
#endif
  return &ISA_GENERIC;
}

/* The kernel for a B of n columns that the GEMM packs itself or that
 * cpu_gemm_pack_b packed: on AVX-512, the 8 x 48 tile where n is a multiple
 * of 48 from WIDE_MIN_N on (BERT's 768 and 3072: bert_layer 23.1 -> 21.3 ms
 * at 1 thread), else the 8 x 32 one (8 x 48 everywhere slowed mlp's 1024
 * columns at 2 threads by 18%). B packed by a caller in cpu_gemm_nr()'s
 * layout (Winograd's V, im2col panels) always runs the base kernel. On
 * AVX2, the 4 x 24 tile from WIDE2_MIN_N columns on (n = 1024, 768 and 3072
 * of the benchmark models). */
#define WIDE_MIN_N 384
#ifndef WIDE2_MIN_N /* -D for experiments (bench/gemm_variants.c) */
#define WIDE2_MIN_N 256
#endif
static const Isa* isa_b(const Isa* s, size_t n) {
#if GEMM_X86
  if (s == &ISA_AVX512 && n >= WIDE_MIN_N && n % WIDE_NR == 0) return &ISA_AVX512_W;
  if (s == &ISA_AVX2 && n >= WIDE2_MIN_N) return &ISA_AVX2_W;
#else
  (void)n;
#endif
  return s;
}

/* The k block for a B panel of nr columns: about two thirds of the L1 data
 * cache (the rest for the streamed A panel and C), a multiple of 16 in
 * [KC_MIN, KC_MAX]: 256 for the AVX-512 kernel on a 48 KiB L1, 160 on a
 * 32 KiB one. */
static size_t kc_for(size_t nr) {
  static _Atomic long l1 = -1;
  long sz = l1;
  if (sz < 0) {
#ifdef _SC_LEVEL1_DCACHE_SIZE /* glibc */
    sz = sysconf(_SC_LEVEL1_DCACHE_SIZE);
#else
    sz = 0;
#endif
    if (sz < 16 * 1024 || sz > 1024 * 1024) sz = 48 * 1024;
    l1 = sz;
  }
  size_t kc = (size_t)sz * 2 / 3 / (nr * sizeof(float)) / 16 * 16;
  return kc < KC_MIN ? KC_MIN : kc > KC_MAX ? KC_MAX : kc;
}

void cpu_gemm_force_isa(int level) {
  forced_level = level;
}

static int fail_alloc; /* tests only: cpu_gemm_test_fail_alloc */

void cpu_gemm_test_fail_alloc(int on) {
  fail_alloc = on;
}

const char* cpu_gemm_isa_name(void) {
  return isa()->name;
}

int cpu_gemm_isa_level(void) {
#if GEMM_X86
  const Isa* s = isa();
  return s == &ISA_AVX512 ? CPU_ISA_AVX512 : s == &ISA_AVX2 ? CPU_ISA_AVX2 : CPU_ISA_GENERIC;
#else
  return CPU_ISA_GENERIC;
#endif
}

/* ------------------------------------------------------------------------ */
/* Memory for packed operands                                                 */
/* ------------------------------------------------------------------------ */

#define HUGE_PAGE ((size_t)2 << 20)

float* cpu_gemm_alloc_packed(size_t floats) {
  if (floats > SIZE_MAX / sizeof(float) - HUGE_PAGE) return NULL;
  const size_t bytes = floats ? (floats * sizeof(float) + 63) / 64 * 64 : 64;
  void* p = NULL;
  if (bytes < HUGE_PAGE) return aligned_alloc(64, bytes);
  if (posix_memalign(&p, HUGE_PAGE, bytes) != 0) return NULL;
#ifdef MADV_HUGEPAGE
  /* advice only: without transparent huge pages it changes nothing */
  (void)madvise(p, bytes / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE);
#endif
  return p;
}

/* ------------------------------------------------------------------------ */
/* Per-thread packing buffer                                                  */
/* ------------------------------------------------------------------------ */

/* Each thread that packs A keeps its buffer for its next call (a fresh
 * large allocation per call is mmap'ed and costs a page fault per 4 KiB
 * touched). A nested call on a thread whose buffer is in use allocates its
 * own. Every buffer is also on a global list: it is freed when its thread
 * exits (the key's destructor) or, for the threads still alive (the host's
 * pool workers outlive the provider), when the provider is unloaded. */
typedef struct Scratch {
  float* buf;
  size_t bytes;
  _Atomic int busy;
  struct Scratch* next; /* the global list, under scratch_mu */
} Scratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;
static pthread_mutex_t scratch_mu = PTHREAD_MUTEX_INITIALIZER;
static Scratch* scratch_all;

static void scratch_free(Scratch* s) {
  free(s->buf);
  free(s);
}

/* The key's destructor: a thread exits. */
static void scratch_destroy(void* p) {
  Scratch* s = p;
  if (!s) return;
  pthread_mutex_lock(&scratch_mu);
  for (Scratch** at = &scratch_all; *at; at = &(*at)->next)
    if (*at == s) {
      *at = s->next;
      break;
    }
  pthread_mutex_unlock(&scratch_mu);
  scratch_free(s);
}

static void scratch_key_init(void) {
  scratch_key_ok = pthread_key_create(&scratch_key, scratch_destroy) == 0;
}

/* At dlclose (and process exit): drop the key, so that no thread exiting
 * later calls a destructor that is unmapped, and free every buffer not in
 * use (one in use, by a thread still in a GEMM at process exit, stays). */
__attribute__((destructor)) static void scratch_unload(void) {
  if (!scratch_key_ok) return;
  pthread_key_delete(scratch_key);
  scratch_key_ok = 0;
  pthread_mutex_lock(&scratch_mu);
  for (Scratch** at = &scratch_all; *at;) {
    Scratch* s = *at;
    if (s->busy) {
      at = &s->next;
    } else {
      *at = s->next;
      scratch_free(s);
    }
  }
  pthread_mutex_unlock(&scratch_mu);
}

/* A 64-byte aligned buffer of at least `bytes`: this thread's cached one
 * (*owner set; give it back with scratch_release) or a fresh allocation
 * (*owner NULL; free it). NULL without memory. */
static float* scratch_acquire(size_t bytes, Scratch** owner) {
  *owner = NULL;
  if (fail_alloc) return NULL;
  bytes = (bytes + 63) / 64 * 64;
  pthread_once(&scratch_once, scratch_key_init);
  Scratch* s = NULL;
  if (scratch_key_ok && bytes <= SCRATCH_KEEP_BYTES) {
    s = pthread_getspecific(scratch_key);
    if (!s && (s = calloc(1, sizeof *s))) {
      if (pthread_setspecific(scratch_key, s) != 0) {
        free(s);
        s = NULL;
      } else {
        pthread_mutex_lock(&scratch_mu);
        s->next = scratch_all;
        scratch_all = s;
        pthread_mutex_unlock(&scratch_mu);
      }
    }
  }
  if (!s || s->busy) return aligned_alloc(64, bytes);
  if (s->bytes < bytes) {
    /* grow with some headroom: sizes of one model's GEMMs vary */
    const size_t want =
        bytes + bytes / 4 > SCRATCH_KEEP_BYTES ? bytes : (bytes + bytes / 4 + 63) / 64 * 64;
    free(s->buf);
    s->buf = cpu_gemm_alloc_packed(want / sizeof(float));
    s->bytes = s->buf ? want : 0;
    if (!s->buf) return aligned_alloc(64, bytes);
  }
  s->busy = 1;
  *owner = s;
  return s->buf;
}

static void scratch_release(float* p, Scratch* owner) {
  if (owner)
    owner->busy = 0;
  else
    free(p);
}

/* ------------------------------------------------------------------------ */
/* Packing                                                                    */
/* ------------------------------------------------------------------------ */

static size_t packed_a_floats(const Isa* s, size_t m, size_t k) {
  return (m + s->mr - 1) / s->mr * s->mr * k;
}

size_t cpu_gemm_packed_a_floats(size_t m, size_t k) {
  return packed_a_floats(isa(), m, k);
}

size_t cpu_gemm_packed_b_floats(size_t k, size_t n) {
  const Isa* s = isa_b(isa(), n);
  return (n + s->nr - 1) / s->nr * s->nr * k;
}

#if GEMM_X86
/* A full 8-row panel of a row-major A: 8 x 8 blocks transposed in ymm
 * registers (~3x the scalar copy; packing A matters when n is small). */
AVX2 static void pack_a8_avx(float* restrict d, const float* a, size_t lda, size_t k, size_t ds) {
  const float *r0 = a, *r1 = r0 + lda, *r2 = r1 + lda, *r3 = r2 + lda;
  const float *r4 = r3 + lda, *r5 = r4 + lda, *r6 = r5 + lda, *r7 = r6 + lda;
  size_t p = 0;
  for (; p + 8 <= k; p += 8, d += 8 * ds) {
    const __m256 x[8] = {_mm256_loadu_ps(r0 + p), _mm256_loadu_ps(r1 + p), _mm256_loadu_ps(r2 + p),
                         _mm256_loadu_ps(r3 + p), _mm256_loadu_ps(r4 + p), _mm256_loadu_ps(r5 + p),
                         _mm256_loadu_ps(r6 + p), _mm256_loadu_ps(r7 + p)};
    __m256 c[8];
    cpu_transpose8_avx2(x, c);
    for (int q = 0; q < 8; q++)
      _mm256_storeu_ps(d + q * ds, c[q]);
  }
  for (; p < k; p++, d += ds) {
    d[0] = r0[p], d[1] = r1[p], d[2] = r2[p], d[3] = r3[p];
    d[4] = r4[p], d[5] = r5[p], d[6] = r6[p], d[7] = r7[p];
  }
}

/* A full R-row panel (R = 6: the 6 x 16 kernel's; 4: the 4 x 24 one's):
 * 8 x 8 transposes of the R rows and 8 - R zero rows, each column's R
 * values stored as 4 (+ 2) (a wider store would run into the next panel,
 * which another thread may be packing). */
AVX2 static inline __attribute__((always_inline)) void
pack_a_rows_avx(float* restrict d, const float* a, size_t lda, size_t k, const int R) {
  const __m256 z = _mm256_setzero_ps();
  size_t p = 0;
  for (; p + 8 <= k; p += 8, d += 8 * R) {
    __m256 x[8], c[8];
    for (int r = 0; r < 8; r++)
      x[r] = r < R ? _mm256_loadu_ps(a + r * lda + p) : z;
    /* column j (k step p + j): rows 0-3 in the low half of c[j], 4-5 next */
    cpu_transpose8_avx2(x, c);
    for (int j = 0; j < 8; j++) {
      _mm_storeu_ps(d + R * j, _mm256_castps256_ps128(c[j]));
      if (R == 6) _mm_storel_pi((__m64*)(d + 6 * j + 4), _mm256_extractf128_ps(c[j], 1));
    }
  }
  for (; p < k; p++, d += R)
    for (int r = 0; r < R; r++)
      d[r] = a[r * lda + p];
}

AVX2 static void pack_a6_avx(float* restrict d, const float* a, size_t lda, size_t k) {
  pack_a_rows_avx(d, a, lda, k, 6);
}

AVX2 static void pack_a4_avx(float* restrict d, const float* a, size_t lda, size_t k) {
  pack_a_rows_avx(d, a, lda, k, 4);
}
#endif

/* Panels [q0, q1) of op(A) (m x k; A is k x m when trans) into dst, alpha
 * applied later by the epilogue. */
static void pack_a_panels(const Isa* s, float* dst, const float* a, size_t lda, int trans, size_t m,
                          size_t k, size_t q0, size_t q1) {
  const size_t mr = s->mr;
  for (size_t q = q0; q < q1; q++) {
    float* d = dst + q * k * mr;
    const size_t i0 = q * mr, rows = min_sz(mr, m - i0);
    if (trans) {
      for (size_t p = 0; p < k; p++, d += mr) {
        const float* src = a + p * lda + i0;
        size_t r = 0;
        for (; r < rows; r++)
          d[r] = src[r];
        for (; r < mr; r++)
          d[r] = 0.0f;
      }
    } else if (rows == mr && mr == 6) {
#if GEMM_X86
      if (s == &ISA_AVX2) {
        pack_a6_avx(d, a + i0 * lda, lda, k);
        continue;
      }
#endif
      /* a full 6-row panel: 6 row streams read once, written contiguously */
      const float *r0 = a + i0 * lda, *r1 = r0 + lda, *r2 = r1 + lda, *r3 = r2 + lda;
      const float *r4 = r3 + lda, *r5 = r4 + lda;
      for (size_t p = 0; p < k; p++, d += 6) {
        d[0] = r0[p], d[1] = r1[p], d[2] = r2[p];
        d[3] = r3[p], d[4] = r4[p], d[5] = r5[p];
      }
#if GEMM_X86
    } else if (rows == mr && s == &ISA_AVX2_W) {
      pack_a4_avx(d, a + i0 * lda, lda, k); /* only the 4 x 24 kernel has 4-row panels */
#endif
    } else if (rows == mr && mr == 8) {
#if GEMM_X86
      if (s == &ISA_AVX512 || s == &ISA_AVX512_W) {
        pack_a8_avx(d, a + i0 * lda, lda, k, 8);
        continue;
      }
#endif
      const float *r0 = a + i0 * lda, *r1 = r0 + lda, *r2 = r1 + lda, *r3 = r2 + lda;
      const float *r4 = r3 + lda, *r5 = r4 + lda, *r6 = r5 + lda, *r7 = r6 + lda;
      for (size_t p = 0; p < k; p++, d += 8) {
        d[0] = r0[p], d[1] = r1[p], d[2] = r2[p], d[3] = r3[p];
        d[4] = r4[p], d[5] = r5[p], d[6] = r6[p], d[7] = r7[p];
      }
    } else {
      for (size_t r = 0; r < mr; r++) {
        if (r < rows) {
          const float* src = a + (i0 + r) * lda;
          for (size_t p = 0; p < k; p++)
            d[p * mr + r] = src[p];
        } else {
          for (size_t p = 0; p < k; p++)
            d[p * mr + r] = 0.0f;
        }
      }
    }
  }
}

/* Rows [i0, i0 + MR) and columns [k0, k1) of op(A) as one packed slice
 * ((k1 - k0) x MR): the on-the-fly path when A could not be packed whole. */
static void pack_a_slice(const Isa* s, float* dst, const float* a, size_t lda, int trans, size_t m,
                         size_t i0, size_t k0, size_t k1) {
  const size_t mr = s->mr, rows = min_sz(mr, m - i0);
  for (size_t p = k0; p < k1; p++, dst += mr)
    for (size_t r = 0; r < mr; r++)
      dst[r] = r >= rows ? 0.0f : trans ? a[p * lda + i0 + r] : a[(i0 + r) * lda + p];
}

/* Rows [k0, k1) of panel p of op(B) (k x n; B is n x k when trans) into dst,
 * (k1 - k0) x NR floats. */
static void pack_b_panel(const Isa* s, float* restrict dst, const float* b, size_t ldb, int trans,
                         size_t n, size_t p, size_t k0, size_t k1) {
  const size_t nr = s->nr, j0 = p * nr, cols = min_sz(nr, n - j0);
#if GEMM_X86
  if (trans && cols == nr && nr % 8 == 0 && s != &ISA_GENERIC) {
    /* B^T's rows are the panel's columns: 8 at a time through the 8 x 8
     * AVX transpose (attention's K^T: a scalar loop took most of the
     * scores GEMM) */
    for (size_t g = 0; g < nr; g += 8)
      pack_a8_avx(dst + g, b + (j0 + g) * ldb + k0, ldb, k1 - k0, nr);
    return;
  }
#endif
  if (trans) {
    for (size_t j = 0; j < nr; j++) {
      if (j < cols) {
        const float* src = b + (j0 + j) * ldb;
        for (size_t q = k0; q < k1; q++)
          dst[(q - k0) * nr + j] = src[q];
      } else {
        for (size_t q = k0; q < k1; q++)
          dst[(q - k0) * nr + j] = 0.0f;
      }
    }
    return;
  }
  if (cols == nr && (nr == 16 || nr == 24)) {
    /* the AVX2 kernels' panels: a copy of constant size the compiler inlines
     * (a memcpy call per 64-byte row took 4% of attention's time) */
    for (size_t q = k0; q < k1; q++, dst += nr)
      if (nr == 16)
        memcpy(dst, b + q * ldb + j0, 16 * sizeof(float));
      else
        memcpy(dst, b + q * ldb + j0, 24 * sizeof(float));
    return;
  }
  for (size_t q = k0; q < k1; q++, dst += nr) {
    const float* src = b + q * ldb + j0;
    if (cols == nr) {
      memcpy(dst, src, nr * sizeof(float));
    } else {
      size_t j = 0;
      for (; j < cols; j++)
        dst[j] = src[j];
      for (; j < nr; j++)
        dst[j] = 0.0f;
    }
  }
}

typedef struct PackJob {
  const Isa* s;
  float* dst;
  const float* src;
  size_t ld, rows, cols; /* op(src) is rows x cols */
  int trans;
} PackJob;

static void pack_a_task(void* user, size_t begin, size_t end) {
  const PackJob* j = user;
  pack_a_panels(j->s, j->dst, j->src, j->ld, j->trans, j->rows, j->cols, begin, end);
}

static void pack_b_task(void* user, size_t begin, size_t end) {
  const PackJob* j = user;
  for (size_t p = begin; p < end; p++)
    pack_b_panel(j->s, j->dst + p * j->rows * j->s->nr, j->src, j->ld, j->trans, j->cols, p, 0,
                 j->rows);
}

static void pack_a_with(const Isa* s, OnyxThreadPool* pool, float* dst, const float* a, size_t lda,
                        int trans_a, size_t m, size_t k) {
  PackJob j = {s, dst, a, lda, m, k, trans_a};
  const size_t panels = (m + s->mr - 1) / s->mr;
  if (pool && m * k >= 64 * 1024)
    cpu_host->parallel_for(pool, panels, pack_a_task, &j);
  else
    pack_a_task(&j, 0, panels);
}

void cpu_gemm_pack_a(OnyxThreadPool* pool, float* dst, const float* a, size_t lda, int trans_a,
                     size_t m, size_t k) {
  pack_a_with(isa(), pool, dst, a, lda, trans_a, m, k);
}

void cpu_gemm_pack_b(OnyxThreadPool* pool, float* dst, const float* b, size_t ldb, int trans_b,
                     size_t k, size_t n) {
  const Isa* s = isa_b(isa(), n);
  PackJob j = {s, dst, b, ldb, k, n, trans_b};
  const size_t panels = (n + s->nr - 1) / s->nr;
  if (pool && k * n >= 64 * 1024)
    cpu_host->parallel_for(pool, panels, pack_b_task, &j);
  else
    pack_b_task(&j, 0, panels);
}

size_t cpu_gemm_mr(void) {
  return isa()->mr;
}

size_t cpu_gemm_nr(void) {
  return isa()->nr;
}

/* ------------------------------------------------------------------------ */
/* Driver                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct GemmJob {
  const Isa* s;
  const CpuGemm* g;
  const float* ap; /* packed op(A), from row ap_row0 on */
  size_t tile_m, tile_n, tiles_n, kc, ap_row0;
} GemmJob;

/* The packed-B slice a tile uses `ahead` panels after panel j of k block
 * k0, in its order (the tile's columns, then the next k block), and its
 * rows; NULL past the tile's last. */
static const float* b_slice_ahead(const CpuGemm* g, size_t nr, size_t j0, size_t j1, size_t j,
                                  size_t k0, size_t kstep, size_t ahead, size_t* rows) {
  const size_t panels = (j1 - j0 + nr - 1) / nr, idx = (j - j0) / nr + ahead;
  const size_t kb = k0 + idx / panels * kstep;
  if (kb >= g->k) return NULL;
  *rows = min_sz(kstep, g->k - kb);
  return g->packed_b + (j0 / nr + idx % panels) * g->k * nr + kb * nr;
}

static void run_tile(const GemmJob* job, size_t i0, size_t i1, size_t j0, size_t j1) {
  const Isa* s = job->s;
  const CpuGemm* g = job->g;
  const size_t mr = s->mr, nr = s->nr, k = g->k;
  float bbuf[KC_MAX * NR_MAX] __attribute__((aligned(64)));
  float abuf[KC_MAX * MR_MAX] __attribute__((aligned(64))); /* A packed per slice (no memory) */
  float* c = g->c;
  /* k blocks of equal size (at most KC): no short last block, whose C
   * update would cost as much as its arithmetic. */
  const size_t blocks = (k + job->kc - 1) / job->kc, kstep = (k + blocks - 1) / blocks;
  size_t polled = 0;
  /* the row activations run over the tile once its last k block is stored */
  const int row_act = cpu_act_is_row(g->act);
  for (size_t k0 = 0; k0 < k; k0 += kstep) {
    const size_t kc = min_sz(kstep, k - k0);
    if (g->stop && cpu_stop_poll(g->stop, &polled, (i1 - i0) * (j1 - j0) * kc)) return;
    const int first = k0 == 0, last = k0 + kc >= k;
    Epi e = {(float)g->alpha,
             first ? (float)g->beta : 1.0f,
             NULL,
             NULL,
             last && !row_act ? g->act : 0,
             g->act_alpha,
             g->act_min,
             g->act_max,
             NULL,
             0};
    for (size_t j = j0; j < j1; j += nr) {
      const size_t p = j / nr, ncols = min_sz(nr, g->n - j);
      const float* bp;
      if (g->packed_b) {
        bp = g->packed_b + p * k * nr + k0 * nr;
      } else if (g->pack_b_fn) {
        g->pack_b_fn(g->pack_b_user, bbuf, p, k0, k0 + kc);
        bp = bbuf;
      } else {
        pack_b_panel(s, bbuf, g->b, g->ldb, g->trans_b, g->n, p, k0, k0 + kc);
        bp = bbuf;
      }
      e.bias_col = first && g->bias_col ? g->bias_col + j : NULL;
      /* A prepacked B (weights) is usually cold (read once per run, from
       * DRAM): its next slice is prefetched into L2 while this one is in
       * use, a share of it before each call, so the next panel's first
       * call does not wait on memory. */
      const char* next_b = NULL;
      size_t pf_lines = 0, pf_per_call = 0;
      if (g->packed_b) {
        size_t rows = 0;
        next_b = (const char*)b_slice_ahead(g, nr, j0, j1, j, k0, kstep, 1, &rows);
        pf_lines = rows * nr * sizeof(float) / 64;
        /* shared out among the calls, one line per k step inside the
         * kernel (bursts before a call stalled on the fill buffers; lines
         * past kc per call are left to the hardware) */
        pf_per_call =
            min_sz(kc, (pf_lines + (i1 - i0 + mr - 1) / mr - 1) / ((i1 - i0 + mr - 1) / mr));
      }
      for (size_t i = i0, pf = 0; i < i1; i += mr) {
        e.bias_row = first && g->bias_row ? g->bias_row + i : NULL;
        const float* ap = job->ap ? job->ap + ((i - job->ap_row0) / mr) * k * mr + k0 * mr : abuf;
        if (!job->ap) pack_a_slice(s, abuf, g->a, g->lda, g->trans_a, g->m, i, k0, k0 + kc);
        e.pf = next_b ? next_b + pf * 64 : NULL;
        e.npf = pf < pf_lines ? min_sz(pf_per_call, pf_lines - pf) : 0;
        pf += e.npf;
        s->kernel(kc, ap, bp, c + i * g->ldc + j, g->ldc, min_sz(mr, g->m - i), ncols, &e);
      }
    }
  }
  if (row_act)
    for (size_t i = i0; i < i1; i++)
      cpu_act_row(c + i * g->ldc + j0, c + i * g->ldc + j0, j1 - j0, g->act, g->act_alpha,
                  g->act_min, g->act_max);
  if (g->post_row)
    for (size_t i = i0; i < i1; i++)
      g->post_row(c + i * g->ldc + j0, c + i * g->ldc + j0, j1 - j0);
}

static void gemm_tasks(void* user, size_t begin, size_t end) {
  const GemmJob* job = user;
  const CpuGemm* g = job->g;
#if GEMM_X86
  /* flush-to-zero and denormals-are-zero for the arithmetic (file comment) */
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040u);
#endif
  for (size_t t = begin; t < end; t++) {
    const size_t i0 = (t / job->tiles_n) * job->tile_m, j0 = (t % job->tiles_n) * job->tile_n;
    run_tile(job, i0, min_sz(i0 + job->tile_m, g->m), j0, min_sz(j0 + job->tile_n, g->n));
  }
#if GEMM_X86
  _mm_setcsr(csr);
#endif
}

/* ------------------------------------------------------------------------ */
/* One column: C (m x 1) = alpha * A b, a dot product per row                 */
/* ------------------------------------------------------------------------ */

/* A B of one column (a squeeze-excite block's 1x1 conv on a 1x1 plane, a
 * matrix-vector product) would fill one column of each 16- or 32-wide
 * packed B panel and waste the rest of every FMA: here each row of A (row
 * major) is one dot product with the contiguous b, in a fixed order (lanes
 * of partial sums, combined pairwise), so results do not depend on the
 * thread count. */
static float dot_generic(const float* a, const float* b, size_t k) {
  float s[8] = {0};
  size_t p = 0;
  for (; p + 8 <= k; p += 8)
    for (size_t l = 0; l < 8; l++)
      s[l] += a[p + l] * b[p + l];
  float sum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; p < k; p++)
    sum += a[p] * b[p];
  return sum;
}

#if GEMM_X86
AVX512 static float dot_avx512(const float* a, const float* b, size_t k) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0;
  size_t p = 0;
  for (; p + 32 <= k; p += 32) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + p), _mm512_loadu_ps(b + p), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + p + 16), _mm512_loadu_ps(b + p + 16), s1);
  }
  for (; p + 16 <= k; p += 16)
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + p), _mm512_loadu_ps(b + p), s0);
  if (p < k) {
    const __mmask16 m = (__mmask16)((1u << (k - p)) - 1);
    s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + p), _mm512_maskz_loadu_ps(m, b + p), s1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

AVX2 static float dot_avx2(const float* a, const float* b, size_t k) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0;
  size_t p = 0;
  for (; p + 16 <= k; p += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p), _mm256_loadu_ps(b + p), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p + 8), _mm256_loadu_ps(b + p + 8), s1);
  }
  for (; p + 8 <= k; p += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p), _mm256_loadu_ps(b + p), s0);
  const __m256 s = _mm256_add_ps(s0, s1);
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
  float sum = _mm_cvtss_f32(_mm_add_ss(q, _mm_shuffle_ps(q, q, 1)));
  for (; p < k; p++)
    sum += a[p] * b[p];
  return sum;
}
#endif

typedef struct GemvJob {
  const CpuGemm* g;
  float (*dot)(const float* a, const float* b, size_t k);
} GemvJob;

static void gemv_rows(void* user, size_t begin, size_t end) {
  const GemvJob* j = user;
  const CpuGemm* g = j->g;
  const float* a = g->a;
  const float* b = g->b;
  float* c = g->c;
#if GEMM_X86
  const unsigned csr = _mm_getcsr(); /* flush-to-zero as the tiles (file comment) */
  _mm_setcsr(csr | 0x8040u);
#endif
  size_t polled = 0;
  for (size_t i = begin; i < end; i++) {
    if (g->stop && cpu_stop_poll(g->stop, &polled, g->k)) break;
    float v = (float)g->alpha * j->dot(a + i * g->lda, b, g->k);
    float* ci = c + i * g->ldc;
    if (g->beta != 0.0) v += (float)g->beta * *ci;
    if (g->bias_row) v += g->bias_row[i];
    if (g->bias_col) v += g->bias_col[0];
    *ci = cpu_act_apply(v, g->act, g->act_alpha, g->act_min, g->act_max);
  }
#if GEMM_X86
  _mm_setcsr(csr);
#endif
}

/* The column path's conditions: one column of B, contiguous; A row major
 * and given (a packed A alone is not read here). */
static int gemv_applies(const CpuGemm* g) {
  return g->n == 1 && g->a && !g->trans_a && g->b && !g->packed_b && !g->pack_b_fn &&
         !g->post_row && (g->trans_b || g->ldb == 1 || g->k == 1);
}

static void gemv_f32(OnyxThreadPool* pool, const CpuGemm* g) {
  GemvJob j = {g, dot_generic};
#if GEMM_X86
  const int level = cpu_gemm_isa_level();
  if (level == CPU_ISA_AVX512) j.dot = dot_avx512;
  if (level == CPU_ISA_AVX2) j.dot = dot_avx2;
#endif
  if (pool && (double)g->m * (double)g->k >= 64.0 * 1024.0)
    cpu_host->parallel_for(pool, g->m, gemv_rows, &j);
  else
    gemv_rows(&j, 0, g->m);
}

/* ------------------------------------------------------------------------ */
/* One row: C (1 x n) = alpha * a B with B packed                            */
/* ------------------------------------------------------------------------ */

/* A of one row against a packed B (a classifier's Gemm at batch 1, a
 * decoder's projections for one token) would fill one row of each MR-row
 * tile and waste the rest of every FMA: here each NR-column panel of B,
 * k rows of NR floats, is streamed once as sum over p of a[p] times row p,
 * NR columns per vector group, in four interleaved partial sums (p mod 4,
 * for the FMA latency; the k mod 4 last rows go to the first) combined as
 * (s0 + s1) + (s2 + s3). Panels are spread over the pool; each column is
 * summed by one thread in that fixed order, so results do not depend on
 * the thread count. */
static void row_panel_generic(const float* a, const float* bp, size_t k, size_t nr, float* out) {
  for (size_t j = 0; j < nr; j++) {
    float s[4] = {0};
    size_t p = 0;
    for (; p + 4 <= k; p += 4)
      for (size_t l = 0; l < 4; l++)
        s[l] += a[p + l] * bp[(p + l) * nr + j];
    for (; p < k; p++)
      s[0] += a[p] * bp[p * nr + j];
    out[j] = (s[0] + s[1]) + (s[2] + s[3]);
  }
}

#if GEMM_X86
/* V vectors of 16 columns (nr = 16 V). */
AVX512 static inline __attribute__((always_inline)) void
row_panel512(const float* a, const float* bp, size_t k, const size_t V, float* out) {
  __m512 s[4][3];
  for (size_t l = 0; l < 4; l++)
    for (size_t v = 0; v < V; v++)
      s[l][v] = _mm512_setzero_ps();
  const size_t nr = 16 * V;
  size_t p = 0;
  for (; p + 4 <= k; p += 4)
    for (size_t l = 0; l < 4; l++) {
      const __m512 av = _mm512_set1_ps(a[p + l]);
      for (size_t v = 0; v < V; v++)
        s[l][v] = _mm512_fmadd_ps(av, _mm512_loadu_ps(bp + (p + l) * nr + 16 * v), s[l][v]);
    }
  for (; p < k; p++)
    for (size_t v = 0; v < V; v++)
      s[0][v] =
          _mm512_fmadd_ps(_mm512_set1_ps(a[p]), _mm512_loadu_ps(bp + p * nr + 16 * v), s[0][v]);
  for (size_t v = 0; v < V; v++)
    _mm512_storeu_ps(out + 16 * v, _mm512_add_ps(_mm512_add_ps(s[0][v], s[1][v]),
                                                 _mm512_add_ps(s[2][v], s[3][v])));
}

AVX512 static void row_panel_avx512(const float* a, const float* bp, size_t k, size_t nr,
                                    float* out) {
  if (nr == 32)
    row_panel512(a, bp, k, 2, out);
  else if (nr == 48)
    row_panel512(a, bp, k, 3, out);
  else if (nr == 16)
    row_panel512(a, bp, k, 1, out);
  else
    row_panel_generic(a, bp, k, nr, out);
}

/* V vectors of 8 columns (nr = 8 V). */
AVX2 static inline __attribute__((always_inline)) void
row_panel256(const float* a, const float* bp, size_t k, const size_t V, float* out) {
  __m256 s[4][3];
  for (size_t l = 0; l < 4; l++)
    for (size_t v = 0; v < V; v++)
      s[l][v] = _mm256_setzero_ps();
  const size_t nr = 8 * V;
  size_t p = 0;
  for (; p + 4 <= k; p += 4)
    for (size_t l = 0; l < 4; l++) {
      const __m256 av = _mm256_set1_ps(a[p + l]);
      for (size_t v = 0; v < V; v++)
        s[l][v] = _mm256_fmadd_ps(av, _mm256_loadu_ps(bp + (p + l) * nr + 8 * v), s[l][v]);
    }
  for (; p < k; p++)
    for (size_t v = 0; v < V; v++)
      s[0][v] =
          _mm256_fmadd_ps(_mm256_set1_ps(a[p]), _mm256_loadu_ps(bp + p * nr + 8 * v), s[0][v]);
  for (size_t v = 0; v < V; v++)
    _mm256_storeu_ps(out + 8 * v, _mm256_add_ps(_mm256_add_ps(s[0][v], s[1][v]),
                                                _mm256_add_ps(s[2][v], s[3][v])));
}

AVX2 static void row_panel_avx2(const float* a, const float* bp, size_t k, size_t nr, float* out) {
  if (nr == 16)
    row_panel256(a, bp, k, 2, out);
  else if (nr == 24)
    row_panel256(a, bp, k, 3, out);
  else if (nr == 8)
    row_panel256(a, bp, k, 1, out);
  else
    row_panel_generic(a, bp, k, nr, out);
}
#endif

typedef struct RowJob {
  const CpuGemm* g;
  size_t nr;
  void (*panel)(const float* a, const float* bp, size_t k, size_t nr, float* out);
} RowJob;

static void row_panels(void* user, size_t begin, size_t end) {
  const RowJob* j = user;
  const CpuGemm* g = j->g;
  float* c = g->c;
  float sums[64]; /* nr <= 64 (row_applies) */
#if GEMM_X86
  const unsigned csr = _mm_getcsr(); /* flush-to-zero as the tiles (file comment) */
  _mm_setcsr(csr | 0x8040u);
#endif
  size_t polled = 0;
  for (size_t q = begin; q < end; q++) {
    if (g->stop && cpu_stop_poll(g->stop, &polled, g->k * j->nr)) break;
    j->panel(g->a, g->packed_b + q * g->k * j->nr, g->k, j->nr, sums);
    const size_t j0 = q * j->nr, cols = min_sz(j->nr, g->n - j0);
    for (size_t i = 0; i < cols; i++) {
      float v = (float)g->alpha * sums[i];
      float* ci = c + j0 + i;
      if (g->beta != 0.0) v += (float)g->beta * *ci;
      if (g->bias_row) v += g->bias_row[0];
      if (g->bias_col) v += g->bias_col[j0 + i];
      *ci = cpu_act_apply(v, g->act, g->act_alpha, g->act_min, g->act_max);
    }
  }
#if GEMM_X86
  _mm_setcsr(csr);
#endif
}

/* The panel width of g's packed B (cpu_gemm_pack_b's, or the base kernel's
 * for a caller's layout), as the tile path reads it. */
static size_t packed_b_nr(const CpuGemm* g) {
  return g->packed_b_base ? isa()->nr : isa_b(isa(), g->n)->nr;
}

/* The row path's conditions: one row of A, given, contiguous; B packed. */
static int row_applies(const CpuGemm* g) {
  return g->m == 1 && g->a && (!g->trans_a || g->lda == 1) && g->packed_b && !g->pack_b_fn &&
         !g->post_row && packed_b_nr(g) <= 64;
}

static void row_f32(OnyxThreadPool* pool, const CpuGemm* g) {
  RowJob j = {g, packed_b_nr(g), row_panel_generic};
#if GEMM_X86
  const int level = cpu_gemm_isa_level();
  if (level == CPU_ISA_AVX512) j.panel = row_panel_avx512;
  if (level == CPU_ISA_AVX2) j.panel = row_panel_avx2;
#endif
  const size_t panels = (g->n + j.nr - 1) / j.nr;
  if (pool && (double)g->n * (double)g->k >= 64.0 * 1024.0)
    cpu_host->parallel_for(pool, panels, row_panels, &j);
  else
    row_panels(&j, 0, panels);
}

/* k == 0: C = beta * C + biases, then the activation and post_row. */
static void gemm_no_k(const CpuGemm* g) {
  const Epi e = {1, 0, NULL, NULL, g->act, g->act_alpha, g->act_min, g->act_max, NULL, 0};
  for (size_t i = 0; i < g->m; i++) {
    float* c = (float*)g->c + i * g->ldc;
    for (size_t j = 0; j < g->n; j++) {
      float v = g->beta == 0.0 ? 0.0f : (float)g->beta * c[j];
      if (g->bias_row) v += g->bias_row[i];
      if (g->bias_col) v += g->bias_col[j];
      c[j] = act_scalar(v, &e);
    }
    if (g->post_row) g->post_row(c, c, g->n);
  }
}

void cpu_gemm_f32(OnyxThreadPool* pool, const CpuGemm* g) {
  if (g->m == 0 || g->n == 0) return;
  if (g->k == 0) {
    gemm_no_k(g);
    return;
  }
  if (gemv_applies(g)) {
    gemv_f32(pool, g);
    return;
  }
  if (row_applies(g)) {
    row_f32(pool, g);
    return;
  }
  /* A packed by the caller is in the base kernel's row panels: it keeps the
   * base kernel, unless B was packed by cpu_gemm_pack_b in the 4 x 24
   * kernel's panels, which then packs A again from `a`. */
  const Isa* base = isa();
  const Isa* s =
      g->pack_b_fn || g->packed_b_base || (g->packed_a && !g->packed_b) ? base : isa_b(base, g->n);
  const float* packed_a = g->packed_a && s->mr == base->mr ? g->packed_a : NULL;
  const int inline_only = (double)g->m * (double)g->n * (double)g->k < GEMM_INLINE_WORK;
  if (inline_only) pool = NULL;
  GemmJob job = {s, g, packed_a, 0, 0, 0, kc_for(s->nr), 0};
  /* Tiles: as large as the caches like, then split until every thread has
   * a few (a multiple of MR rows x a multiple of NR columns). */
  const size_t threads = pool ? cpu_host->thread_pool_size(pool) : 1;
  const size_t panels_m = (g->m + s->mr - 1) / s->mr, panels_n = (g->n + s->nr - 1) / s->nr;
  /* B packed per tile: tall tiles pack each B slice once (the A block,
   * up to 64 panels x KC, still fits in L2). Prepacked B: TILE_ROWS. */
  const size_t tile_mr = !g->packed_b            ? 64
                         : g->m <= TILE_ROWS_ONE ? panels_m
                                                 : (TILE_ROWS + s->mr - 1) / s->mr;
  const size_t tile_nr = min_sz(TILE_NR, TILE_COL / s->nr);
  size_t tm = min_sz(tile_mr, panels_m), tn = min_sz(tile_nr, panels_n);
  const size_t want = threads > 1 ? threads * TILES_PER_THREAD : 1;
#define TILES() (((panels_m + tm - 1) / tm) * ((panels_n + tn - 1) / tn))
  if (g->packed_b) {
    /* Packed weights stream from memory once per run: split the columns
     * first, so each slice of B is read by one tile only (a row split reads
     * it once per row block), and the rows only when the columns run out
     * (bert_layer at 2 threads: 13.5 -> 12.9 ms). */
    while (TILES() < want && tn > 1)
      tn = (tn + 1) / 2;
    while (TILES() < want && tm > 1)
      tm = (tm + 1) / 2;
  } else {
    /* Every tile row packs its own B slices: split the columns first, and
     * the rows only as far as two tiles per thread. */
    while (TILES() < want && tn > 1)
      tn = (tn + 1) / 2;
    while (TILES() < 2 * threads && tm > 1)
      tm = (tm + 1) / 2;
  }
#undef TILES
  job.tile_m = tm * s->mr;
  job.tile_n = tn * s->nr;
  job.tiles_n = (g->n + job.tile_n - 1) / job.tile_n;
  const size_t tiles = ((g->m + job.tile_m - 1) / job.tile_m) * job.tiles_n;
  float* apack = NULL;
  Scratch* owner = NULL;
  if (!job.ap && threads == 1 && g->m > job.tile_m) {
    /* One thread, several row blocks: each block's A is packed just before
     * its tiles, into a buffer the caches keep, instead of all of A at once
     * (which, past the L3, went out to memory and came back). */
    apack = scratch_acquire(packed_a_floats(s, job.tile_m, g->k) * sizeof(float), &owner);
    if (apack) {
      for (size_t r0 = 0; r0 < g->m; r0 += job.tile_m) {
        const size_t rows = min_sz(job.tile_m, g->m - r0);
        pack_a_with(s, NULL, apack, (const float*)g->a + (g->trans_a ? r0 : r0 * g->lda), g->lda,
                    g->trans_a, rows, g->k);
        job.ap = apack;
        job.ap_row0 = r0;
        const size_t t0 = r0 / job.tile_m * job.tiles_n;
        gemm_tasks(&job, t0, t0 + job.tiles_n);
      }
      scratch_release(apack, owner);
      return;
    }
  }
  if (!job.ap) {
    apack = scratch_acquire(packed_a_floats(s, g->m, g->k) * sizeof(float), &owner);
    /* Without memory for it, each tile packs A slices on the fly (slower,
     * same results). */
    if (apack) {
      pack_a_with(s, pool, apack, g->a, g->lda, g->trans_a, g->m, g->k);
      job.ap = apack;
    }
  }
  if (pool && tiles > 1)
    cpu_host->parallel_for(pool, tiles, gemm_tasks, &job);
  else
    gemm_tasks(&job, 0, tiles);
  if (apack) scratch_release(apack, owner);
}
