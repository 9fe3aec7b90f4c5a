/* noisy_neighbour.c — reproduces the shared machine's slow phases: sweeps a
 * buffer far larger than the L3 (default 64 MiB), reading and writing one
 * byte per cache line, for SECONDS seconds. Run it pinned to one core and
 * the benchmark pinned to the other (docs/performance.md, "The machine"):
 *
 *   cc -O2 bench/noisy_neighbour.c -o /tmp/noisy_neighbour
 *   taskset -c 1 /tmp/noisy_neighbour 200 &
 *   THREADS=1 ROUNDS=3 taskset -c 0 bench/run.sh /tmp/bm
 *
 * Usage: noisy_neighbour SECONDS [MIB] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile uint64_t sink;

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: noisy_neighbour SECONDS [MIB]\n");
    return 2;
  }
  const long seconds = atol(argv[1]), mib = argc > 2 ? atol(argv[2]) : 64;
  if (seconds <= 0 || mib <= 0) {
    fprintf(stderr, "noisy_neighbour: SECONDS and MIB must be positive\n");
    return 2;
  }
  const size_t n = (size_t)mib << 20;
  unsigned char* a = malloc(n);
  if (!a) {
    fprintf(stderr, "noisy_neighbour: cannot allocate %ld MiB\n", mib);
    return 1;
  }
  memset(a, 1, n);
  const time_t end = time(NULL) + seconds;
  uint64_t s = 0;
  while (time(NULL) < end)
    for (size_t i = 0; i < n; i += 64) {
      s += a[i];
      a[i] = (unsigned char)s;
    }
  sink = s; /* keeps the sweep */
  free(a);
  return 0;
}
