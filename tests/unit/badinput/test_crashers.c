/* test_crashers.c — replays every input a fuzz target once failed on
 * (crashers/TARGET/, see docs/security.md) through the same API as the
 * target: each must now give a result or an error with a message, with no
 * crash, leak or undefined behaviour (the ASan/UBSan build checks that). A
 * new crasher needs no code here: drop the file in its target's folder. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "ox_model.h"
#include "onyx/onyx.h"

static void check(OnyxStatus* st, const char* file) {
  if (!st) return;
  if (!*onyx_status_message(st)) fail_msg("%s: an error without a message", file);
  onyx_status_release(st);
}

static void replay_model_load(const void* bytes, size_t len, const char* file) {
  OnyxSessionOptions* o = NULL;
  check(onyx_session_options_create(&o), file);
  check(onyx_session_options_set_threads(o, 1), file);
  check(onyx_session_options_set_log_severity(o, ONYX_LOG_FATAL), file);
  check(onyx_session_options_set_limits(o, (size_t)16 << 20, (size_t)16 << 20, 4096, 8), file);
  OnyxSession* s = NULL;
  check(onyx_session_create_from_bytes(o, bytes, len, NULL, &s), file);
  onyx_session_release(s);
  onyx_session_options_release(o);
}

static void replay_config(const void* bytes, size_t len, const char* file) {
  OnyxSessionOptions* o = NULL;
  check(onyx_session_options_create(&o), file);
  check(onyx_session_options_load_config_text(o, bytes, len, file), file);
  onyx_session_options_release(o);
}

static void replay_tensor_proto(const void* bytes, size_t len, const char* file) {
  OnyxValue* v = NULL;
  char* name = NULL;
  check(onyx_value_parse_tensor_proto(bytes, len, &v, &name), file);
  onyx_free(name);
  onyx_value_release(v);
}

static const struct {
  const char* dir;
  void (*replay)(const void* bytes, size_t len, const char* file);
} targets[] = {
    {"model_load", replay_model_load},
    {"config", replay_config},
    {"tensor_proto", replay_tensor_proto},
};

static void test_replay(void** state) {
  (void)state;
  const char* src = getenv("ONYX_SOURCE_DIR");
  assert_non_null(src);
  size_t total = 0;
  for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/unit/badinput/crashers/%s", src, targets[t].dir);
    DIR* d = opendir(dir);
    if (!d) continue;
    struct dirent* e;
    while ((e = readdir(d))) {
      if (e->d_name[0] == '.') continue;
      char path[4352];
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      void* bytes = NULL;
      size_t len = 0;
      OnyxStatus* st = ox_read_file(path, 0, &bytes, &len);
      if (st) fail_msg("%s: %s", path, onyx_status_message(st));
      targets[t].replay(bytes, len, path);
      free(bytes);
      total++;
    }
    closedir(d);
  }
  print_message("replayed %zu crashers\n", total);
  assert_true(total > 0); /* the folder is found and holds the known ones */
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_replay)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
