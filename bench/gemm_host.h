/* gemm_host.h — what the stand-alone GEMM benchmarks (bench_gemm.c,
 * gemm_variants.c, state_probe.c) give providers/cpu/cpu_gemm.c in place of
 * the host: a "thread pool" that runs every task on the calling thread, and
 * a monotonic clock. Included once, by the file with main(). */
#ifndef ONYX_BENCH_GEMM_HOST_H
#define ONYX_BENCH_GEMM_HOST_H
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
/* cpu_gemm.c's host table (exported with -rdynamic for gemm_variants' builds) */
const OnyxHostApi* cpu_host = &host;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
#endif
