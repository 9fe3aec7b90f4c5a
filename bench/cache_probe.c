/* cache_probe.c — the latency of a dependent load (a random pointer chase,
 * one cache line per step, 2 MiB pages) over buffers from 256 KiB to 64
 * MiB: where the latency jumps from the L3's to memory's is the L3 this
 * process actually gets (docs/performance.md, "The machine").
 *
 *   cc -O2 bench/cache_probe.c -o /tmp/cache_probe && /tmp/cache_probe */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ns per step of a chase through `bytes` (a random cyclic order of its
 * cache lines), after one untimed lap; -1 without memory. */
static double chase(size_t bytes) {
  const size_t huge = (size_t)2 << 20, n = bytes / 64, mapped = (bytes + huge - 1) / huge * huge;
  size_t* a = aligned_alloc(huge, mapped);
  size_t* order = malloc(n * sizeof *order);
  if (!a || !order) {
    free(a);
    free(order);
    return -1;
  }
  (void)madvise(a, mapped, MADV_HUGEPAGE);
  for (size_t i = 0; i < n; i++)
    order[i] = i;
  uint64_t r = 88172645463325252u;
  for (size_t i = n - 1; i > 0; i--) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    const size_t j = r % (i + 1), t = order[i];
    order[i] = order[j], order[j] = t;
  }
  for (size_t i = 0; i < n; i++)
    a[order[i] * 8] = order[(i + 1) % n] * 8;
  size_t p = 0;
  for (size_t i = 0; i < n; i++)
    p = a[p];
  const size_t steps = 2000000;
  const double t0 = now();
  for (size_t i = 0; i < steps; i++)
    p = a[p];
  const double ns = (now() - t0) / (double)steps * 1e9;
  free(a);
  free(order);
  return p == (size_t)-1 ? -1 : ns; /* p is used */
}

int main(void) {
  const size_t kib[] = {256, 768, 1024, 2048, 3072, 4096, 6144, 8192, 16384, 65536};
  for (size_t i = 0; i < sizeof kib / sizeof kib[0]; i++)
    printf("%zu KiB %.0f ns%s", kib[i], chase(kib[i] << 10),
           i + 1 < sizeof kib / sizeof kib[0] ? "  " : "\n");
  return 0;
}
