/* bench_gemm.c — the CPU provider's fp32 GEMM (providers/cpu/cpu_gemm.c) on
 * the benchmark models' shapes, single thread, against OpenBLAS's
 * cblas_sgemm when libopenblas.so.0 can be dlopen'ed (Debian:
 * libopenblas0-pthread), and against the machine's FMA peak if given.
 *
 *   cc -O2 -I providers/cpu -I sdk/include bench/bench_gemm.c \
 *      providers/cpu/cpu_gemm.c -o /tmp/bench_gemm -ldl -lm
 *   OPENBLAS_NUM_THREADS=1 /tmp/bench_gemm [PEAK_GFLOPS]
 *
 * One line per shape: GFLOP/s of Onyx with both operands packed ahead (as
 * Conv runs: weights packed at creation, im2col built packed), with B packed
 * ahead (a constant weight, as MatMul/Gemm get it), Onyx packing both per
 * call, and OpenBLAS; best of several timed repetitions. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cpu_nn.h"

static void inline_parallel_for(OnyxThreadPool* p, size_t n, void (*fn)(void*, size_t, size_t),
                                void* u) {
  (void)p;
  fn(u, 0, n);
}
static size_t pool_size(const OnyxThreadPool* p) {
  (void)p;
  return 1;
}
static OnyxHostApi host = {.parallel_for = inline_parallel_for, .thread_pool_size = pool_size};
const OnyxHostApi* cpu_host = &host;

typedef void (*SgemmFn)(int order, int ta, int tb, int m, int n, int k, float alpha, const float* a,
                        int lda, const float* b, int ldb, float beta, float* c, int ldc);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct Shape {
  const char* what;
  size_t m, n, k;
} Shape;

static const Shape SHAPES[] = {
    {"mlp fc1 64x1024x784", 64, 1024, 784},
    {"mlp fc2 64x1024x1024", 64, 1024, 1024},
    {"bert qkv/out 128x768x768", 128, 768, 768},
    {"bert ffn1 128x3072x768", 128, 3072, 768},
    {"bert ffn2 128x768x3072", 128, 768, 3072},
    {"bert QK^T 128x128x64", 128, 128, 64},
    {"matmul 1024^3", 1024, 1024, 1024},
    {"conv stem 64x12544x147", 64, 12544, 147},
    {"conv l1 3x3 64x3136x576", 64, 3136, 576},
    {"conv l2 3x3 128x784x1152", 128, 784, 1152},
    {"conv l3 3x3 256x196x2304", 256, 196, 2304},
    {"conv l4 3x3 512x49x4608", 512, 49, 4608},
    {"conv l3 transposed 196x256x2304", 196, 256, 2304},
    {"conv l4 transposed 49x512x4608", 49, 512, 4608},
};

/* Best seconds per call over `reps` timed calls after one warm-up. */
#define TIME_BEST(expr, out)                                                                       \
  do {                                                                                             \
    expr;                                                                                          \
    double best_ = 1e30;                                                                           \
    for (int r_ = 0; r_ < reps; r_++) {                                                            \
      const double t0_ = now();                                                                    \
      expr;                                                                                        \
      const double dt_ = now() - t0_;                                                              \
      if (dt_ < best_) best_ = dt_;                                                                \
    }                                                                                              \
    out = best_;                                                                                   \
  } while (0)

int main(int argc, char** argv) {
  const double peak = argc > 1 ? atof(argv[1]) : 0;
  void* lib = dlopen("libopenblas.so.0", RTLD_NOW);
  SgemmFn sgemm = lib ? (SgemmFn)dlsym(lib, "cblas_sgemm") : NULL;
  printf("# isa %s; OpenBLAS %s\n", cpu_gemm_isa_name(), sgemm ? "loaded" : "not found");
  printf("| shape | Onyx A and B packed ahead | Onyx B packed ahead | Onyx | OpenBLAS |%s\n",
         peak > 0 ? " Onyx B packed / peak |" : "");
  printf("|---|---|---|---|---|%s\n", peak > 0 ? "---|" : "");
  for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
    const size_t m = SHAPES[s].m, n = SHAPES[s].n, k = SHAPES[s].k;
    const double flops = 2.0 * (double)m * (double)n * (double)k;
    const int reps = flops > 1e9 ? 5 : flops > 1e8 ? 20 : 200;
    float* a = malloc(m * k * sizeof(float));
    float* b = malloc(k * n * sizeof(float));
    float* c = malloc(m * n * sizeof(float));
    float* bp = aligned_alloc(64, (cpu_gemm_packed_b_floats(k, n) * 4 + 63) / 64 * 64);
    float* ap = aligned_alloc(64, (cpu_gemm_packed_a_floats(m, k) * 4 + 63) / 64 * 64);
    if (!a || !b || !c || !bp || !ap) return 1;
    for (size_t i = 0; i < m * k; i++)
      a[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    for (size_t i = 0; i < k * n; i++)
      b[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
    cpu_gemm_pack_b(NULL, bp, b, n, 0, k, n);
    cpu_gemm_pack_a(NULL, ap, a, k, 0, m, k);
    const CpuGemm g = {
        .m = m, .n = n, .k = k, .a = a, .lda = k, .b = b, .ldb = n, .c = c, .ldc = n, .alpha = 1.0};
    CpuGemm gp = g;
    gp.packed_b = bp;
    CpuGemm gpp = gp;
    gpp.packed_a = ap;
    double t_pre, t_both, t_onyx, t_blas = 0;
    TIME_BEST(cpu_gemm_f32(NULL, &gp), t_pre);
    TIME_BEST(cpu_gemm_f32(NULL, &gpp), t_both);
    TIME_BEST(cpu_gemm_f32(NULL, &g), t_onyx);
    if (sgemm)
      TIME_BEST(
          sgemm(101, 111, 111, (int)m, (int)n, (int)k, 1.0f, a, (int)k, b, (int)n, 0.0f, c, (int)n),
          t_blas);
    printf("| %s | %.1f | %.1f | %.1f | ", SHAPES[s].what, flops / t_both * 1e-9,
           flops / t_pre * 1e-9, flops / t_onyx * 1e-9);
    if (sgemm)
      printf("%.1f |", flops / t_blas * 1e-9);
    else
      printf("- |");
    if (peak > 0) printf(" %.0f%% |", 100.0 * flops / t_pre * 1e-9 / peak);
    printf("\n");
    free(a);
    free(b);
    free(c);
    free(bp);
    free(ap);
  }
  if (lib) dlclose(lib);
  return 0;
}
