/* fuzz_model_load.c — fuzzes the model loader through session creation:
 * bytes -> onyx_session_create_from_bytes (load, resolve, optimize,
 * partition, plan; never run). External data resolves against a scratch
 * folder holding one 4 KiB data file and a symlink pointing out of it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fuzz_common.h"

static OnyxSessionOptions* g_opts;
static char g_dir[64];

/* The scratch folder goes when the process exits (libFuzzer's fork mode
 * starts many). */
static void onyx_fuzz_remove_dir(void) {
  char path[128];
  snprintf(path, sizeof path, "%s/weights.bin", g_dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/outside", g_dir);
  unlink(path);
  rmdir(g_dir);
}

static void onyx_fuzz_make_dir(void) {
  char path[128];
  if (!mkdtemp(strcpy(path, "/tmp/onyx-fuzz-load-XXXXXX"))) {
    perror("fuzz: mkdtemp");
    abort();
  }
  snprintf(g_dir, sizeof g_dir, "%s", path);
  atexit(onyx_fuzz_remove_dir);
  snprintf(path, sizeof path, "%s/weights.bin", g_dir);
  FILE* f = fopen(path, "wb");
  for (int i = 0; f && i < 4096; i++)
    fputc(i & 0xff, f);
  if (f) fclose(f);
  snprintf(path, sizeof path, "%s/outside", g_dir);
  /* A way out of the folder the loader must refuse; without it the fuzzer
   * merely loses that path. */
  if (symlink("/etc/hostname", path) != 0) perror("fuzz: symlink");
}

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  onyx_fuzz_env();
  g_opts = onyx_fuzz_options();
  onyx_fuzz_make_dir();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(g_opts, data, size, g_dir, &s);
  if (st) {
    /* Every failure must say something. */
    const char* msg = onyx_status_message(st);
    if (!msg || !*msg) abort();
    onyx_status_release(st);
  }
  onyx_session_release(s);
  return 0;
}
