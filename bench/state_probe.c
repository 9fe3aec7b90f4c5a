/* state_probe.c — which resources the shared machine's slow state slows
 * (docs/performance.md, "The machine"). For SECONDS seconds it repeats, in
 * one process on one core: the 1024^3 GEMM with B packed ahead (as
 * matmul_1024 runs), an FMA-only loop (10 independent ymm chains, 20 ms: one
 * window, not fma_peak's best of five), a cache-resident GEMM (48 x 48 x
 * 160 with both operands packed, 400 calls: the micro-kernel's loads from
 * L1 and L2), and sequential reads of 256 KiB (L2), 8 MiB (L3) and 128 MiB
 * (memory). One line per pass: the GEMM's ms and GFLOP/s, then the FMA
 * loop's and the small GEMM's GFLOP/s and the three bandwidths in GB/s.
 *
 *   cc -O3 -march=x86-64-v2 -I providers/cpu -I sdk/include bench/state_probe.c \
 *      providers/cpu/cpu_gemm.c -o /tmp/state_probe -lm
 *   taskset -c 0 /tmp/state_probe 100 > /tmp/probe.txt
 *
 * Group the lines by the big GEMM's time to compare the states. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemm_host.h"

#define CHAINS 10
__attribute__((target("avx2,fma"), noinline)) static float fma_loop(long iters) {
  __m256 c[CHAINS];
  for (int i = 0; i < CHAINS; i++)
    c[i] = _mm256_set1_ps((float)i);
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (long n = 0; n < iters; n++)
    for (int i = 0; i < CHAINS; i++)
      c[i] = _mm256_fmadd_ps(c[i], a, b);
  __m256 s = c[0];
  for (int i = 1; i < CHAINS; i++)
    s = _mm256_add_ps(s, c[i]);
  return _mm256_cvtss_f32(s);
}

__attribute__((target("avx2"), noinline)) static float read_floats(const float* p, size_t n,
                                                                   int reps) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (int r = 0; r < reps; r++)
    for (size_t i = 0; i < n; i += 32) {
      s0 = _mm256_add_ps(s0, _mm256_load_ps(p + i));
      s1 = _mm256_add_ps(s1, _mm256_load_ps(p + i + 8));
      s2 = _mm256_add_ps(s2, _mm256_load_ps(p + i + 16));
      s3 = _mm256_add_ps(s3, _mm256_load_ps(p + i + 24));
    }
  return _mm256_cvtss_f32(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}

int main(int argc, char** argv) {
  const double secs = argc > 1 ? atof(argv[1]) : 30;
  const size_t m = 1024, n = 1024, k = 1024, sm = 48, sn = 48, sk = 160;
  const size_t l2 = 64 << 10, l3 = 2 << 20, mem = 32 << 20; /* floats */
  const long fma_iters = 2000000;
  float* a = aligned_alloc(64, m * k * sizeof(float));
  float* b = aligned_alloc(64, k * n * sizeof(float));
  float* c = aligned_alloc(64, m * n * sizeof(float));
  float* buf = aligned_alloc(64, mem * sizeof(float));
  float* bp = cpu_gemm_alloc_packed(cpu_gemm_packed_b_floats(k, n));
  float* sbp = cpu_gemm_alloc_packed(cpu_gemm_packed_b_floats(sk, sn));
  float* sap = cpu_gemm_alloc_packed(cpu_gemm_packed_a_floats(sm, sk));
  if (!a || !b || !c || !buf || !bp || !sbp || !sap) return 1;
  for (size_t i = 0; i < m * k; i++) {
    a[i] = (float)(i % 7) - 3;
    b[i] = (float)(i % 5) - 2;
  }
  memset(buf, 0, mem * sizeof(float));
  cpu_gemm_pack_b(NULL, bp, b, n, 0, k, n);
  cpu_gemm_pack_b(NULL, sbp, b, sn, 0, sk, sn);
  cpu_gemm_pack_a(NULL, sap, a, sk, 0, sm, sk);
  const CpuGemm big = {.m = m,
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
  const CpuGemm small = {.m = sm,
                         .n = sn,
                         .k = sk,
                         .a = a,
                         .lda = sk,
                         .b = b,
                         .ldb = sn,
                         .c = c,
                         .ldc = sn,
                         .alpha = 1,
                         .packed_a = sap,
                         .packed_b = sbp};
  float sink = 0;
  printf("gemm_ms gemm_gflops fma_gflops small_gflops l2_gbs l3_gbs mem_gbs\n");
  for (const double end = now() + secs; now() < end;) {
    double t = now();
    cpu_gemm_f32(NULL, &big);
    const double tg = now() - t;
    t = now();
    sink += fma_loop(fma_iters);
    const double tf = now() - t;
    t = now();
    for (int r = 0; r < 400; r++)
      cpu_gemm_f32(NULL, &small);
    const double ts = now() - t;
    t = now();
    sink += read_floats(buf, l2, 100);
    const double t2 = now() - t;
    t = now();
    sink += read_floats(buf, l3, 4);
    const double t3 = now() - t;
    t = now();
    sink += read_floats(buf, mem, 1);
    const double tm = now() - t;
    printf("%.2f %.1f %.1f %.1f %.1f %.1f %.1f\n", tg * 1e3, 2.0 * m * n * k / tg / 1e9,
           2.0 * 8 * CHAINS * (double)fma_iters / tf / 1e9, 400 * 2.0 * sm * sn * sk / ts / 1e9,
           l2 * 4.0 * 100 / t2 / 1e9, l3 * 4.0 * 4 / t3 / 1e9, mem * 4.0 / tm / 1e9);
    fflush(stdout);
  }
  return sink == 12345.0f;
}
