/* bench_gemm.c — the CPU provider's fp32 GEMM (providers/cpu/cpu_gemm.c) on
 * the benchmark models' shapes, single thread, against the machine's FMA
 * peak measured in the same process, and against OpenBLAS's cblas_sgemm
 * when libopenblas.so.0 can be dlopen'ed (Debian: libopenblas0-pthread).
 *
 *   cc -O3 -I providers/cpu -I sdk/include bench/bench_gemm.c \
 *      providers/cpu/cpu_gemm.c -o /tmp/bench_gemm -ldl -lm
 *   OPENBLAS_NUM_THREADS=1 /tmp/bench_gemm [ROUNDS] [FILTER]
 *
 * The machines this runs on are shared and noisy (a busy SMT sibling halves
 * the FMA rate), so every figure is the best of ROUNDS (default 7) rounds,
 * and the peak is the best of an FMA loop run between the rounds (12
 * independent vfmadd231ps zmm chains, as /work/shared/peer/fma_peak.c; AVX2
 * ymm chains on a machine without AVX-512). FILTER keeps the shapes whose
 * name contains it.
 *
 * One line per shape: GFLOP/s and % of peak of Onyx with both operands
 * packed ahead (as Conv runs: weights packed at creation, im2col built
 * packed), with B packed ahead (a constant weight, as MatMul/Gemm get it),
 * Onyx packing both per call (MatMul of two activations), and OpenBLAS. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gemm_host.h"

typedef void (*SgemmFn)(int order, int ta, int tb, int m, int n, int k, float alpha, const float* a,
                        int lda, const float* b, int ldb, float beta, float* c, int ldc);

/* FMA peak: 12 independent accumulator chains (zeroed first: no subnormal
 * garbage), bound by FMA issue throughput. GFLOP/s of one short run. */
#if defined(__x86_64__) && defined(__GNUC__)
#define FMA12(R)                                                                                   \
  "vfmadd231ps %%" R "14, %%" R "15, %%" R "0\n vfmadd231ps %%" R "14, %%" R "15, %%" R            \
  "1\n vfmadd231ps %%" R "14, %%" R "15, %%" R "2\n vfmadd231ps %%" R "14, %%" R "15, %%" R        \
  "3\n vfmadd231ps %%" R "14, %%" R "15, %%" R "4\n vfmadd231ps %%" R "14, %%" R "15, %%" R        \
  "5\n vfmadd231ps %%" R "14, %%" R "15, %%" R "6\n vfmadd231ps %%" R "14, %%" R "15, %%" R        \
  "7\n vfmadd231ps %%" R "14, %%" R "15, %%" R "8\n vfmadd231ps %%" R "14, %%" R "15, %%" R        \
  "9\n vfmadd231ps %%" R "14, %%" R "15, %%" R "10\n vfmadd231ps %%" R "14, %%" R "15, %%" R       \
  "11\n"
#define CLOBBERS                                                                                   \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",         \
      "xmm11", "xmm14", "xmm15"
__attribute__((noinline, target("avx512f"))) static void fma_loop512(long iters) {
  __asm__ volatile("vpxord %%zmm0, %%zmm0, %%zmm0\n" ::: "xmm0");
  for (int i = 0; i < 1; i++)
    __asm__ volatile("vmovaps %%zmm0, %%zmm1\n vmovaps %%zmm0, %%zmm2\n vmovaps %%zmm0, %%zmm3\n"
                     "vmovaps %%zmm0, %%zmm4\n vmovaps %%zmm0, %%zmm5\n vmovaps %%zmm0, %%zmm6\n"
                     "vmovaps %%zmm0, %%zmm7\n vmovaps %%zmm0, %%zmm8\n vmovaps %%zmm0, %%zmm9\n"
                     "vmovaps %%zmm0, %%zmm10\n vmovaps %%zmm0, %%zmm11\n vmovaps %%zmm0, %%zmm14\n"
                     "vmovaps %%zmm0, %%zmm15\n" ::
                         : CLOBBERS);
  for (long n = 0; n < iters; n++)
    __asm__ volatile(FMA12("zmm")::: CLOBBERS);
}
__attribute__((noinline, target("avx2,fma"))) static void fma_loop256(long iters) {
  __asm__ volatile("vxorps %%ymm0, %%ymm0, %%ymm0\n vmovaps %%ymm0, %%ymm1\n"
                   "vmovaps %%ymm0, %%ymm2\n vmovaps %%ymm0, %%ymm3\n vmovaps %%ymm0, %%ymm4\n"
                   "vmovaps %%ymm0, %%ymm5\n vmovaps %%ymm0, %%ymm6\n vmovaps %%ymm0, %%ymm7\n"
                   "vmovaps %%ymm0, %%ymm8\n vmovaps %%ymm0, %%ymm9\n vmovaps %%ymm0, %%ymm10\n"
                   "vmovaps %%ymm0, %%ymm11\n vmovaps %%ymm0, %%ymm14\n"
                   "vmovaps %%ymm0, %%ymm15\n" ::
                       : CLOBBERS);
  for (long n = 0; n < iters; n++)
    __asm__ volatile(FMA12("ymm")::: CLOBBERS);
}
static double fma_peak_once(int avx512) {
  const long iters = 200000;
  const double t0 = now();
  if (avx512)
    fma_loop512(iters);
  else
    fma_loop256(iters);
  return 2.0 * (avx512 ? 16 : 8) * 12 * (double)iters / (now() - t0) * 1e-9;
}
#else
static double fma_peak_once(int avx512) {
  (void)avx512;
  return 0;
}
#endif

typedef struct Shape {
  const char* what;
  size_t m, n, k;
} Shape;

static const Shape SHAPES[] = {
    {"matmul 1024^3", 1024, 1024, 1024},
    {"bert qkv/out 128x768x768", 128, 768, 768},
    {"bert ffn1 128x3072x768", 128, 3072, 768},
    {"bert ffn2 128x768x3072", 128, 768, 3072},
    {"bert QK^T 128x128x64", 128, 128, 64},
    {"bert PV 128x64x128", 128, 64, 128},
    {"mlp fc1 64x1024x784", 64, 1024, 784},
    {"mlp fc2 64x1024x1024", 64, 1024, 1024},
    {"conv stem 64x12544x147", 64, 12544, 147},
    {"conv 64x3136x576", 64, 3136, 576},
    {"conv 128x784x1152", 128, 784, 1152},
    {"conv 256x196x2304", 256, 196, 2304},
    {"conv 512x49x4608", 512, 49, 4608},
    {"conv 128x3136x576", 128, 3136, 576},
    {"conv 256x784x1152", 256, 784, 1152},
    {"conv 512x196x2304", 512, 196, 2304},
    {"conv 196x256x2304 (transposed)", 196, 256, 2304},
    {"conv 49x512x4608 (transposed)", 49, 512, 4608},
};

int main(int argc, char** argv) {
  const int rounds = argc > 1 && atoi(argv[1]) > 0 ? atoi(argv[1]) : 7;
  const char* filter = argc > 2 ? argv[2] : NULL;
  void* lib = dlopen("libopenblas.so.0", RTLD_NOW);
  SgemmFn sgemm = lib ? (SgemmFn)dlsym(lib, "cblas_sgemm") : NULL;
  const int avx512 = strcmp(cpu_gemm_isa_name(), "avx512") == 0;
  printf("# isa %s (MR %zu, NR %zu); OpenBLAS %s; best of %d rounds\n", cpu_gemm_isa_name(),
         cpu_gemm_mr(), cpu_gemm_nr(), sgemm ? "loaded" : "not found", rounds);
  printf("| shape | A,B packed ahead | B packed ahead | Onyx packs both | OpenBLAS |\n");
  printf("|---|---|---|---|---|\n");
  double peak_all = 0;
  for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
    if (filter && !strstr(SHAPES[s].what, filter)) continue;
    const size_t m = SHAPES[s].m, n = SHAPES[s].n, k = SHAPES[s].k;
    const double flops = 2.0 * (double)m * (double)n * (double)k;
    const int reps = flops > 1e9 ? 2 : flops > 1e8 ? 8 : flops > 1e7 ? 40 : 200;
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
    const CpuGemm* variants[3] = {&gpp, &gp, &g};
    double best[4] = {0, 0, 0, 0};
    for (int r = 0; r < rounds; r++) {
      for (int v = 0; v < 4; v++) {
        if (v == 3 && !sgemm) break;
        const double p = fma_peak_once(avx512);
        if (p > peak_all) peak_all = p;
        if (v < 3)
          cpu_gemm_f32(NULL, variants[v]); /* warm */
        else
          sgemm(101, 111, 111, (int)m, (int)n, (int)k, 1.0f, a, (int)k, b, (int)n, 0.0f, c, (int)n);
        const double t0 = now();
        for (int i = 0; i < reps; i++) {
          if (v < 3)
            cpu_gemm_f32(NULL, variants[v]);
          else
            sgemm(101, 111, 111, (int)m, (int)n, (int)k, 1.0f, a, (int)k, b, (int)n, 0.0f, c,
                  (int)n);
        }
        const double gf = flops * reps / (now() - t0) * 1e-9;
        if (gf > best[v]) best[v] = gf;
      }
    }
    printf("| %s |", SHAPES[s].what);
    for (int v = 0; v < 4; v++) {
      if (v == 3 && !sgemm)
        printf(" - |");
      else if (peak_all > 0)
        printf(" %.1f (%.0f%%) |", best[v], 100.0 * best[v] / peak_all);
      else
        printf(" %.1f |", best[v]);
    }
    printf("\n");
    fflush(stdout);
    free(a);
    free(b);
    free(c);
    free(bp);
    free(ap);
  }
  printf("# FMA peak (best of the runs between rounds): %.1f GFLOP/s\n", peak_all);
  if (lib) dlclose(lib);
  return 0;
}
