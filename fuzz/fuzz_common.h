/* fuzz_common.h — shared setup of the libFuzzer targets: the provider folder
 * of this build and session options with small limits, so a hostile input
 * meets an error instead of exhausting the fuzzer's memory. */
#ifndef ONYX_FUZZ_COMMON_H
#define ONYX_FUZZ_COMMON_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include "onyx/onyx.h"

#ifndef ONYX_FUZZ_PROVIDER_DIR
#define ONYX_FUZZ_PROVIDER_DIR "."
#endif

/* Finds libonyx_ep_cpu.so in this build unless the caller chose a folder,
 * and keeps it loaded for good: it is instrumented too, and libFuzzer reads
 * its coverage counters after every input, so a session that unloads it on
 * release must not unmap them. */
static inline void onyx_fuzz_env(void) {
  setenv("ONYX_PROVIDER_PATH", ONYX_FUZZ_PROVIDER_DIR, 0);
  char path[4096];
  snprintf(path, sizeof path, "%s/libonyx_ep_cpu.so", getenv("ONYX_PROVIDER_PATH"));
  if (!dlopen(path, RTLD_NOW | RTLD_NODELETE)) {
    fprintf(stderr, "fuzz: cannot load %s: %s\n", path, dlerror());
    abort();
  }
}

/* Options for fuzzed models: single-threaded, quiet, and limits far below
 * the defaults (16 MiB model, 16 MiB tensors, 4096 nodes, depth 8). */
static inline OnyxSessionOptions* onyx_fuzz_options(void) {
  OnyxSessionOptions* o = NULL;
  OnyxStatus* st = onyx_session_options_create(&o);
  if (!st) st = onyx_session_options_set_threads(o, 1);
  if (!st) st = onyx_session_options_set_log_severity(o, ONYX_LOG_FATAL);
  if (!st) st = onyx_session_options_set_limits(o, (size_t)16 << 20, (size_t)16 << 20, 4096, 8);
  if (st) abort(); /* setup, not input: a broken harness must stop loudly */
  return o;
}

#endif
