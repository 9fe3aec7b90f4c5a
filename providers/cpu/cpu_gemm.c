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
 * Blocking. C is cut into tiles (a multiple of MR rows x a multiple of NR
 * columns), the units of parallel work. Inside a tile: for each k block of
 * KC, for each B panel (which stays in L1), for each A panel of the tile (the
 * tile's A block stays in L2): one micro-kernel call of kc rank-1 updates on
 * an MR x NR register tile, then the epilogue (alpha, beta * C, bias, Relu)
 * on store. A is packed once per call (or at kernel creation when constant);
 * B is used prepacked when the caller packed it (constant weights, im2col),
 * otherwise each tile packs its B panels into a stack buffer per k block.
 *
 * Every element of C is summed over k in the same order whatever the tiling
 * or the thread count, so results do not depend on the pool size. */
#include "cpu_nn.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GEMM_X86 1
#else
#define GEMM_X86 0
#endif

#ifndef KC
#define KC 256 /* k block: a KC x NR B panel (32 KiB at NR = 32) stays in L1 */
#endif
#define NR_MAX 32
#define MR_MAX 8
#ifndef TILE_MR
#define TILE_MR 16 /* a tile is at most TILE_MR A panels tall ... */
#endif
#define TILE_NR          8 /* ... and TILE_NR B panels wide */
#define TILES_PER_THREAD 4
/* Below this many multiply-adds a GEMM runs on the calling thread only. */
#define GEMM_INLINE_WORK (48 * 48 * 48)

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
} Epi;

/* The activations keep NaN. */
static inline float act_scalar(float v, const Epi* e) {
  switch (e->act) {
  case CPU_ACT_RELU:
    return v < 0.0f ? 0.0f : v;
  case CPU_ACT_LEAKY_RELU:
    return v < 0.0f ? v * e->act_alpha : v;
  case CPU_ACT_CLIP:
    return v < e->act_min ? e->act_min : v > e->act_max ? e->act_max : v;
  default:
    return v;
  }
}

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
#define AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,fma,avx2,avx")))
#define AVX2   __attribute__((target("avx2,fma,avx")))

/* 8 x 32: 16 zmm accumulators, two B vectors and a broadcast per row. */
AVX512 static void kernel_avx512(size_t kc, const float* restrict a, const float* restrict b,
                                 float* c, size_t ldc, size_t mr, size_t nr, const Epi* e) {
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  __m512 c60 = c00, c61 = c00, c70 = c00, c71 = c00;
#define ROW(r, x0, x1)                                                                             \
  do {                                                                                             \
    const __m512 av = _mm512_set1_ps(a[r]);                                                        \
    x0 = _mm512_fmadd_ps(av, b0, x0);                                                              \
    x1 = _mm512_fmadd_ps(av, b1, x1);                                                              \
  } while (0)
#pragma GCC unroll 4
  for (size_t p = 0; p < kc; p++) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    ROW(0, c00, c01);
    ROW(1, c10, c11);
    ROW(2, c20, c21);
    ROW(3, c30, c31);
    ROW(4, c40, c41);
    ROW(5, c50, c51);
    ROW(6, c60, c61);
    ROW(7, c70, c71);
    a += 8;
    b += 32;
  }
#undef ROW
  const __m512 acc[8][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31},
                            {c40, c41}, {c50, c51}, {c60, c61}, {c70, c71}};
  const __mmask16 m0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1);
  const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
  const __m512 alpha = _mm512_set1_ps(e->alpha), beta = _mm512_set1_ps(e->beta);
  const __m512 zero = _mm512_setzero_ps();
  __m512 bc0 = zero, bc1 = zero;
  if (e->bias_col) {
    bc0 = _mm512_maskz_loadu_ps(m0, e->bias_col);
    bc1 = _mm512_maskz_loadu_ps(m1, e->bias_col + 16);
  }
  for (size_t r = 0; r < mr; r++) {
    float* cr = c + r * ldc;
    __m512 v0 = _mm512_mul_ps(acc[r][0], alpha), v1 = _mm512_mul_ps(acc[r][1], alpha);
    if (e->beta != 0.0f) {
      v0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, cr), beta, v0);
      v1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, cr + 16), beta, v1);
    }
    if (e->bias_row) {
      const __m512 br = _mm512_set1_ps(e->bias_row[r]);
      v0 = _mm512_add_ps(v0, br);
      v1 = _mm512_add_ps(v1, br);
    }
    v0 = _mm512_add_ps(v0, bc0);
    v1 = _mm512_add_ps(v1, bc1);
    /* max/min return their second operand on NaN: NaN is kept. */
    if (e->act == CPU_ACT_RELU) {
      v0 = _mm512_max_ps(zero, v0);
      v1 = _mm512_max_ps(zero, v1);
    } else if (e->act == CPU_ACT_LEAKY_RELU) {
      const __m512 la = _mm512_set1_ps(e->act_alpha);
      v0 = _mm512_mask_mul_ps(v0, _mm512_cmp_ps_mask(v0, zero, _CMP_LT_OQ), v0, la);
      v1 = _mm512_mask_mul_ps(v1, _mm512_cmp_ps_mask(v1, zero, _CMP_LT_OQ), v1, la);
    } else if (e->act == CPU_ACT_CLIP) {
      const __m512 lo = _mm512_set1_ps(e->act_min), hi = _mm512_set1_ps(e->act_max);
      v0 = _mm512_min_ps(hi, _mm512_max_ps(lo, v0));
      v1 = _mm512_min_ps(hi, _mm512_max_ps(lo, v1));
    }
    _mm512_mask_storeu_ps(cr, m0, v0);
    _mm512_mask_storeu_ps(cr + 16, m1, v1);
  }
}

/* 6 x 16: 12 ymm accumulators. */
AVX2 static void kernel_avx2(size_t kc, const float* restrict a, const float* restrict b, float* c,
                             size_t ldc, size_t mr, size_t nr, const Epi* e) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
#define ROW(r, x0, x1)                                                                             \
  do {                                                                                             \
    const __m256 av = _mm256_broadcast_ss(a + r);                                                  \
    x0 = _mm256_fmadd_ps(av, b0, x0);                                                              \
    x1 = _mm256_fmadd_ps(av, b1, x1);                                                              \
  } while (0)
#pragma GCC unroll 4
  for (size_t p = 0; p < kc; p++) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    ROW(0, c00, c01);
    ROW(1, c10, c11);
    ROW(2, c20, c21);
    ROW(3, c30, c31);
    ROW(4, c40, c41);
    ROW(5, c50, c51);
    a += 6;
    b += 16;
  }
#undef ROW
  float acc[6][16] __attribute__((aligned(32)));
  _mm256_store_ps(acc[0], c00), _mm256_store_ps(acc[0] + 8, c01);
  _mm256_store_ps(acc[1], c10), _mm256_store_ps(acc[1] + 8, c11);
  _mm256_store_ps(acc[2], c20), _mm256_store_ps(acc[2] + 8, c21);
  _mm256_store_ps(acc[3], c30), _mm256_store_ps(acc[3] + 8, c31);
  _mm256_store_ps(acc[4], c40), _mm256_store_ps(acc[4] + 8, c41);
  _mm256_store_ps(acc[5], c50), _mm256_store_ps(acc[5] + 8, c51);
  epi_store(&acc[0][0], 16, c, ldc, mr, nr, e);
}
#endif

typedef struct Isa {
  const char* name;
  size_t mr, nr;
  KernelFn kernel;
} Isa;

static const Isa ISA_GENERIC = {"generic", GEN_MR, GEN_NR, kernel_generic};
#if GEMM_X86
static const Isa ISA_AVX2 = {"avx2", 6, 16, kernel_avx2};
static const Isa ISA_AVX512 = {"avx512", 8, 32, kernel_avx512};
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

/* ------------------------------------------------------------------------ */
/* Packing                                                                    */
/* ------------------------------------------------------------------------ */

size_t cpu_gemm_packed_a_floats(size_t m, size_t k) {
  const Isa* s = isa();
  return (m + s->mr - 1) / s->mr * s->mr * k;
}

size_t cpu_gemm_packed_b_floats(size_t k, size_t n) {
  const Isa* s = isa();
  return (n + s->nr - 1) / s->nr * s->nr * k;
}

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
    } else if (rows == mr && mr == 8) {
      /* the AVX-512 panel: 8 row streams read once, written contiguously */
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

void cpu_gemm_pack_a(OnyxThreadPool* pool, float* dst, const float* a, size_t lda, int trans_a,
                     size_t m, size_t k) {
  const Isa* s = isa();
  PackJob j = {s, dst, a, lda, m, k, trans_a};
  const size_t panels = (m + s->mr - 1) / s->mr;
  if (pool && m * k >= 64 * 1024)
    cpu_host->parallel_for(pool, panels, pack_a_task, &j);
  else
    pack_a_task(&j, 0, panels);
}

void cpu_gemm_pack_b(OnyxThreadPool* pool, float* dst, const float* b, size_t ldb, int trans_b,
                     size_t k, size_t n) {
  const Isa* s = isa();
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
  const float* ap; /* packed op(A) */
  size_t tile_m, tile_n, tiles_n;
} GemmJob;

static void run_tile(const GemmJob* job, size_t i0, size_t i1, size_t j0, size_t j1) {
  const Isa* s = job->s;
  const CpuGemm* g = job->g;
  const size_t mr = s->mr, nr = s->nr, k = g->k;
  float bbuf[KC * NR_MAX] __attribute__((aligned(64)));
  float abuf[KC * MR_MAX] __attribute__((aligned(64))); /* A packed per slice (no memory) */
  float* c = g->c;
  /* k blocks of equal size (at most KC): no short last block, whose C
   * update would cost as much as its arithmetic. */
  const size_t blocks = (k + KC - 1) / KC, kstep = (k + blocks - 1) / blocks;
  for (size_t k0 = 0; k0 < k; k0 += kstep) {
    const size_t kc = min_sz(kstep, k - k0);
    const int first = k0 == 0, last = k0 + kc >= k;
    Epi e = {(float)g->alpha,
             first ? (float)g->beta : 1.0f,
             NULL,
             NULL,
             last ? g->act : 0,
             g->act_alpha,
             g->act_min,
             g->act_max};
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
      for (size_t i = i0; i < i1; i += mr) {
        e.bias_row = first && g->bias_row ? g->bias_row + i : NULL;
        const float* ap = job->ap ? job->ap + (i / mr) * k * mr + k0 * mr : abuf;
        if (!job->ap) pack_a_slice(s, abuf, g->a, g->lda, g->trans_a, g->m, i, k0, k0 + kc);
        s->kernel(kc, ap, bp, c + i * g->ldc + j, g->ldc, min_sz(mr, g->m - i), ncols, &e);
      }
    }
  }
}

static void gemm_tasks(void* user, size_t begin, size_t end) {
  const GemmJob* job = user;
  const CpuGemm* g = job->g;
  for (size_t t = begin; t < end; t++) {
    const size_t i0 = (t / job->tiles_n) * job->tile_m, j0 = (t % job->tiles_n) * job->tile_n;
    run_tile(job, i0, min_sz(i0 + job->tile_m, g->m), j0, min_sz(j0 + job->tile_n, g->n));
  }
}

/* k == 0: C = beta * C + biases, then Relu. */
static void gemm_no_k(const CpuGemm* g) {
  const Epi e = {1, 0, NULL, NULL, g->act, g->act_alpha, g->act_min, g->act_max};
  for (size_t i = 0; i < g->m; i++) {
    float* c = (float*)g->c + i * g->ldc;
    for (size_t j = 0; j < g->n; j++) {
      float v = g->beta == 0.0 ? 0.0f : (float)g->beta * c[j];
      if (g->bias_row) v += g->bias_row[i];
      if (g->bias_col) v += g->bias_col[j];
      c[j] = act_scalar(v, &e);
    }
  }
}

void cpu_gemm_f32(OnyxThreadPool* pool, const CpuGemm* g) {
  if (g->m == 0 || g->n == 0) return;
  if (g->k == 0) {
    gemm_no_k(g);
    return;
  }
  const Isa* s = isa();
  const int inline_only = (double)g->m * (double)g->n * (double)g->k < GEMM_INLINE_WORK;
  if (inline_only) pool = NULL;
  GemmJob job = {s, g, g->packed_a, 0, 0, 0};
  float* apack = NULL;
  if (!job.ap) {
    apack = fail_alloc
                ? NULL
                : aligned_alloc(64, (cpu_gemm_packed_a_floats(g->m, g->k) * sizeof(float) + 63) /
                                        64 * 64);
    /* Without memory for it, each tile packs A slices on the fly (slower,
     * same results). */
    if (apack) {
      cpu_gemm_pack_a(pool, apack, g->a, g->lda, g->trans_a, g->m, g->k);
      job.ap = apack;
    }
  }
  /* Tiles: as large as the caches like, then split until every thread has
   * a few (a multiple of MR rows x a multiple of NR columns). */
  const size_t threads = pool ? cpu_host->thread_pool_size(pool) : 1;
  const size_t panels_m = (g->m + s->mr - 1) / s->mr, panels_n = (g->n + s->nr - 1) / s->nr;
  /* B packed per tile: tall tiles pack each B slice once (the A block,
   * up to 64 panels x KC, still fits in L2). */
  const size_t tile_mr = g->packed_b ? TILE_MR : 64;
  size_t tm = min_sz(tile_mr, panels_m), tn = min_sz(TILE_NR, panels_n);
  const size_t want = threads > 1 ? threads * TILES_PER_THREAD : 1;
#define TILES() (((panels_m + tm - 1) / tm) * ((panels_n + tn - 1) / tn))
  if (g->packed_b) {
    while (TILES() < want && (tm > 1 || tn > 1)) {
      if (tn > 1 && (tn >= tm / 2 || tm == 1))
        tn = (tn + 1) / 2;
      else
        tm = (tm + 1) / 2;
    }
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
  if (pool && tiles > 1)
    cpu_host->parallel_for(pool, tiles, gemm_tasks, &job);
  else
    gemm_tasks(&job, 0, tiles);
  free(apack);
}
