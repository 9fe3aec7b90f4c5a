/* kernel_feed.c — the AVX2 4 x 24 micro-kernel's inner loop (as in
 * providers/cpu/cpu_gemm.c) fed three ways, to tell what costs the GEMM its
 * last 10% and what the machine's slow state slows (docs/performance.md,
 * "Tenth session"):
 *   l1   one A panel and one B slice, both in L1, run again and again: the
 *        loop alone (it reaches the FMA peak when nothing else interferes);
 *   l2   as run_tile runs a tile with B packed ahead: one B slice of KC x 24
 *        in L1 while ROWS / 4 A panels stream from L2, C updated after each
 *        call, the next B slice prefetched one line per k step;
 *   l2nopf  the same without the prefetch.
 *   cc -O2 -mavx2 -mfma bench/kernel_feed.c -o /tmp/kernel_feed
 *   taskset -c 0 /tmp/kernel_feed [KC (192)] [ROWS (128)]
 * Prints GFLOP/s per mode, best of 5 one-second runs each; compare with
 * ../shared/peer/fma_peak.c run right after on the same CPU. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define ROW(r, x0, x1, x2)                                                                         \
  do {                                                                                             \
    const __m256 av = _mm256_broadcast_ss(a + (r));                                                \
    x0 = _mm256_fmadd_ps(av, b0, x0);                                                              \
    x1 = _mm256_fmadd_ps(av, b1, x1);                                                              \
    x2 = _mm256_fmadd_ps(av, b2, x2);                                                              \
  } while (0)
#define STEP()                                                                                     \
  do {                                                                                             \
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8),                             \
                 b2 = _mm256_loadu_ps(b + 16);                                                     \
    ROW(0, c00, c01, c02);                                                                         \
    ROW(1, c10, c11, c12);                                                                         \
    ROW(2, c20, c21, c22);                                                                         \
    ROW(3, c30, c31, c32);                                                                         \
    a += 4;                                                                                        \
    b += 24;                                                                                       \
  } while (0)
#define OUT(r, x0, x1, x2)                                                                         \
  do {                                                                                             \
    float* cp = c + (r)*ldc;                                                                       \
    _mm256_storeu_ps(cp, _mm256_add_ps(_mm256_loadu_ps(cp), x0));                                  \
    _mm256_storeu_ps(cp + 8, _mm256_add_ps(_mm256_loadu_ps(cp + 8), x1));                          \
    _mm256_storeu_ps(cp + 16, _mm256_add_ps(_mm256_loadu_ps(cp + 16), x2));                        \
  } while (0)

/* One call: kc k steps of the 4 x 24 tile, the first npf of them with a
 * prefetch of one line of pf, then C += the tile. */
__attribute__((noinline)) static void kern(long kc, const float* restrict a,
                                           const float* restrict b, float* c, long ldc,
                                           const char* pf, long npf) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
  __m256 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
  long p = 0;
#pragma GCC unroll 4
  for (; p < npf; p++) {
    _mm_prefetch(pf + p * 64, _MM_HINT_T1);
    STEP();
  }
#pragma GCC unroll 4
  for (; p < kc; p++)
    STEP();
  OUT(0, c00, c01, c02);
  OUT(1, c10, c11, c12);
  OUT(2, c20, c21, c22);
  OUT(3, c30, c31, c32);
}

int main(int argc, char** argv) {
  const long kc = argc > 1 ? atol(argv[1]) : 192, rows = argc > 2 ? atol(argv[2]) : 128;
  const long ldc = 1024, panels = 8; /* the tile's B panels, as TILE_NR */
  if (kc < 4 || rows < 4 || rows % 4) {
    fprintf(stderr, "usage: kernel_feed [KC >= 4] [ROWS, a multiple of 4]\n");
    return 2;
  }
  float* A = aligned_alloc(64, (size_t)(rows * kc) * sizeof(float));
  float* B = aligned_alloc(64, (size_t)(panels * kc * 24) * sizeof(float));
  float* C = aligned_alloc(64, (size_t)(rows * ldc) * sizeof(float));
  if (!A || !B || !C) return 1;
  for (long i = 0; i < rows * kc; i++)
    A[i] = 1e-3f;
  for (long i = 0; i < panels * kc * 24; i++)
    B[i] = 1e-3f;
  for (long i = 0; i < rows * ldc; i++)
    C[i] = 0;
  static const char* const names[] = {"l1", "l2", "l2nopf"};
  for (int mode = 0; mode < 3; mode++) {
    double best = 0;
    for (int r = 0; r < 5; r++) {
      double flops = 0, t;
      const double t0 = now();
      do {
        for (long j = 0; j < panels; j++) {
          const float* bp = B + (mode ? j : 0) * kc * 24;
          const char* next = (const char*)(B + ((j + 1) % panels) * kc * 24);
          const long lines = kc * 24 * 4 / 64, calls = rows / 4;
          const long per = (lines + calls - 1) / calls;
          for (long i = 0, done = 0; i < rows; i += 4) {
            const long npf =
                mode == 1 && done < lines ? (per < lines - done ? per : lines - done) : 0;
            kern(kc, mode ? A + i * kc : A, bp, C + (mode ? i : 0) * ldc + j * 24, ldc,
                 next + done * 64, npf);
            done += npf;
          }
        }
        flops += (double)panels * (double)rows * (double)kc * 24 * 2;
        t = now() - t0;
      } while (t < 1.0);
      if (flops / t / 1e9 > best) best = flops / t / 1e9;
    }
    printf("%-7s kc %ld rows %ld: %.1f GFLOP/s\n", names[mode], kc, rows, best);
  }
  free(A);
  free(B);
  free(C);
  return 0;
}
