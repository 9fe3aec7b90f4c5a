/* gemm_variants.c — builds of providers/cpu/cpu_gemm.c with different
 * blocking (its KC_MAX, TILE_ROWS, TILE_NR and TILE_COL can be set with -D),
 * timed call by call in rotating order in one process, so that every build
 * meets the shared machine's fast and slow states alike
 * (docs/performance.md, "GEMM kernels and their peak"). Each build is a shared library:
 *
 *   cc -O3 -fPIC -shared -march=x86-64-v2 -I providers/cpu -I sdk/include \
 *      [-DKC_MAX=128 ...] providers/cpu/cpu_gemm.c -o /tmp/v_NAME.so -lm
 *   cc -O2 -I providers/cpu -I sdk/include bench/gemm_variants.c \
 *      -o /tmp/gemm_variants -ldl -rdynamic
 *   taskset -c 0 /tmp/gemm_variants ROUNDS M N K /tmp/v_base.so /tmp/v_NAME.so ...
 *
 * B is packed ahead (a weight, as MatMul gets it). Per build: the median,
 * 10th and 90th percentile call in ms, the median per-round ratio to the
 * first build, and the median over the slow rounds: those whose median call
 * (over the builds) took more than SLOW_MS (default 27; the slow state of
 * matmul_1024). Selecting by one build's time would favour the others.
 * EVICT_MB=N reads N MiB between calls, untimed, so that B and C start cold
 * as in a model whose other layers stream their weights in between. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemm_host.h"

static int cmp(const void* x, const void* y) {
  const double a = *(const double*)x, b = *(const double*)y;
  return a < b ? -1 : a > b;
}

typedef void (*GemmFn)(OnyxThreadPool*, const CpuGemm*);
typedef void (*PackBFn)(OnyxThreadPool*, float*, const float*, size_t, int, size_t, size_t);
typedef size_t (*FloatsFn)(size_t, size_t);
typedef float* (*AllocFn)(size_t);

#define MAX_BUILDS 16

int main(int argc, char** argv) {
  if (argc < 6 || argc - 5 > MAX_BUILDS) {
    fprintf(stderr, "usage: gemm_variants ROUNDS M N K BUILD.so... (at most %d)\n", MAX_BUILDS);
    return 2;
  }
  const int rounds = atoi(argv[1]), nv = argc - 5;
  const size_t m = (size_t)atol(argv[2]), n = (size_t)atol(argv[3]), k = (size_t)atol(argv[4]);
  const double slow_ms = getenv("SLOW_MS") ? atof(getenv("SLOW_MS")) : 27.0;
  float* a = aligned_alloc(64, (m * k * sizeof(float) + 63) / 64 * 64);
  float* b = aligned_alloc(64, (k * n * sizeof(float) + 63) / 64 * 64);
  float* c = aligned_alloc(64, (m * n * sizeof(float) + 63) / 64 * 64);
  double* t = calloc((size_t)(rounds > 0 ? rounds : 1) * (size_t)nv, sizeof *t);
  double* col = calloc((size_t)(rounds > 0 ? rounds : 1), sizeof *col);
  double* slow = calloc((size_t)(rounds > 0 ? rounds : 1), sizeof *slow);
  if (rounds < 1 || !a || !b || !c || !t || !col || !slow) return 1;
  for (size_t i = 0; i < m * k; i++)
    a[i] = (float)(i % 7) - 3;
  for (size_t i = 0; i < k * n; i++)
    b[i] = (float)(i % 5) - 2;
  GemmFn fn[MAX_BUILDS];
  CpuGemm g[MAX_BUILDS];
  for (int v = 0; v < nv; v++) {
    void* h = dlopen(argv[5 + v], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      fprintf(stderr, "%s\n", dlerror());
      return 1;
    }
    fn[v] = (GemmFn)dlsym(h, "cpu_gemm_f32");
    AllocFn alloc = (AllocFn)dlsym(h, "cpu_gemm_alloc_packed");
    FloatsFn floats = (FloatsFn)dlsym(h, "cpu_gemm_packed_b_floats");
    PackBFn pack = (PackBFn)dlsym(h, "cpu_gemm_pack_b");
    if (!fn[v] || !alloc || !floats || !pack) {
      fprintf(stderr, "%s: not a build of cpu_gemm.c\n", argv[5 + v]);
      return 1;
    }
    float* bp = alloc(floats(k, n));
    if (!bp) return 1;
    pack(NULL, bp, b, n, 0, k, n);
    g[v] = (CpuGemm){.m = m,
                     .n = n,
                     .k = k,
                     .a = a,
                     .lda = k,
                     .b = b,
                     .ldb = n,
                     .c = c,
                     .ldc = n,
                     .alpha = 1,
                     .packed_b = bp};
    fn[v](NULL, &g[v]); /* warm */
  }
  /* EVICT_MB: read that many MiB between calls (untimed), as a model's other
   * layers stream their weights between two runs of one of its GEMMs */
  const size_t evict = getenv("EVICT_MB") ? (size_t)atol(getenv("EVICT_MB")) << 20 : 0;
  unsigned char* ev = evict ? malloc(evict) : NULL;
  if (ev) memset(ev, 1, evict);
  volatile unsigned sink = 0;
  for (int r = 0; r < rounds; r++)
    for (int q = 0; q < nv; q++) {
      const int v = (q + r) % nv;
      if (ev) {
        unsigned acc = 0;
        for (size_t i = 0; i < evict; i += 64)
          acc += ev[i];
        sink += acc;
      }
      const double t0 = now();
      fn[v](NULL, &g[v]);
      t[(size_t)r * nv + v] = (now() - t0) * 1e3;
    }
  char* is_slow = calloc((size_t)rounds, 1);
  if (!is_slow) return 1;
  for (int r = 0; r < rounds; r++) {
    double row[MAX_BUILDS];
    for (int v = 0; v < nv; v++)
      row[v] = t[(size_t)r * nv + v];
    qsort(row, (size_t)nv, sizeof *row, cmp);
    is_slow[r] = (nv % 2 ? row[nv / 2] : (row[nv / 2 - 1] + row[nv / 2]) / 2) > slow_ms;
  }
  for (int v = 0; v < nv; v++) {
    int ns = 0;
    for (int r = 0; r < rounds; r++) {
      col[r] = t[(size_t)r * nv + v];
      if (is_slow[r]) slow[ns++] = col[r];
    }
    qsort(col, (size_t)rounds, sizeof *col, cmp);
    qsort(slow, (size_t)ns, sizeof *slow, cmp);
    const double med = col[rounds / 2], p10 = col[rounds / 10], p90 = col[rounds * 9 / 10];
    for (int r = 0; r < rounds; r++)
      col[r] = t[(size_t)r * nv + v] / t[(size_t)r * nv];
    qsort(col, (size_t)rounds, sizeof *col, cmp);
    printf("%-24s median %.2f p10 %.2f p90 %.2f ratio %.4f | %d slow rounds: median %.2f\n",
           argv[5 + v], med, p10, p90, col[rounds / 2], ns, ns ? slow[ns / 2] : 0.0);
  }
  free(is_slow);
  free(ev);
  (void)sink;
  return 0;
}
