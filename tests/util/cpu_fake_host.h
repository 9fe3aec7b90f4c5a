/* cpu_fake_host.h — the host table for tests that link CPU provider
 * kernels (onyx_ep_cpu_static; tests/unit/cpu/conv): a pool stand-in that runs a range in chunks of
 * 3 on the calling thread (so the split across "workers" is exercised deterministically; pool NULL
 * runs it whole), and kernel-context scratch blocks kept until scratch_free(). Include it once per
 * test program, after the provider's headers: it defines the provider's `cpu_host`. Set `ctx_pool`
 * to what the kernel context's pool should be (NULL, or any non-NULL pointer such as &host). */
#ifndef CPU_FAKE_HOST_H
#define CPU_FAKE_HOST_H

#include <stdlib.h>

#include "onyx/onyx_ep.h"

static void fake_parallel_for(OnyxThreadPool* p, size_t n, void (*fn)(void*, size_t, size_t),
                              void* u) {
  if (!p) {
    fn(u, 0, n);
    return;
  }
  for (size_t i = 0; i < n; i += 3)
    fn(u, i, i + 3 < n ? i + 3 : n);
}
static size_t fake_pool_size(const OnyxThreadPool* p) {
  return p ? 4 : 1;
}

static void* scratch_blocks[16];
static size_t scratch_count;
static OnyxThreadPool* ctx_pool;
static void* fake_scratch(OnyxKernelContext* c, size_t bytes) {
  (void)c;
  if (scratch_count == 16) return NULL;
  return scratch_blocks[scratch_count++] = malloc(bytes);
}
static OnyxThreadPool* fake_ctx_pool(const OnyxKernelContext* c) {
  (void)c;
  return ctx_pool;
}
static void scratch_free(void) {
  for (size_t i = 0; i < scratch_count; i++)
    free(scratch_blocks[i]);
  scratch_count = 0;
}

static OnyxHostApi host = {.parallel_for = fake_parallel_for,
                           .thread_pool_size = fake_pool_size,
                           .ctx_scratch = fake_scratch,
                           .ctx_thread_pool = fake_ctx_pool};
const OnyxHostApi* cpu_host = &host;

#endif /* CPU_FAKE_HOST_H */
