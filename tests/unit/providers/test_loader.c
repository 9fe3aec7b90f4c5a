/* test_loader.c — provider library loading: search order, sharing, and one
 * test per way a provider library can be broken (tests/providers/broken/).
 * Expected messages are written from the loader's contract in ox_providers.h
 * and the brief, never copied from a run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ox_host_api.h"
#include "ox_providers.h"

static char g_broken[PATH_MAX]; /* ${CMAKE_BINARY_DIR}/lib/broken, resolved */
/* Room for a path under g_broken plus some text, without -Wformat-truncation. */
#define BUF (2 * PATH_MAX)

static int setup(void** state) {
  (void)state;
  const char* bin = getenv("ONYX_BINARY_DIR");
  if (!bin) {
    fprintf(stderr, "ONYX_BINARY_DIR is not set (run through ctest)\n");
    return -1;
  }
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/lib/broken", bin);
  if (!realpath(dir, g_broken)) {
    fprintf(stderr, "%s: missing (build onyx_test_broken_providers)\n", dir);
    return -1;
  }
  return 0;
}

/* Every test starts from: providers searched in lib/broken only, empty log. */
static int reset(void** state) {
  (void)state;
  setenv("ONYX_PROVIDER_PATH", g_broken, 1);
  unsetenv("ONYX_TEST_RELEASE_LOG");
  return 0;
}

static const char* release_log(void) {
  const char* s = getenv("ONYX_TEST_RELEASE_LOG");
  return s ? s : "";
}

/* The resolved path of a broken library, as the loader must report it. */
static void lib_path(char* out, const char* folder, const char* name) {
  snprintf(out, BUF, "%s/libonyx_ep_%s.so", folder, name);
}

static bool is_loaded(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (h) dlclose(h);
  return h != NULL;
}

/* Checks code and that the message holds every given fragment, printing the
 * message when it does not. */
static void expect_error(OnyxStatus* st, OnyxStatusCode code, ...) {
  assert_non_null(st);
  if (st->code != code) fprintf(stderr, "message: %s\n", st->message);
  assert_int_equal(st->code, code);
  va_list ap;
  va_start(ap, code);
  for (const char* frag; (frag = va_arg(ap, const char*));) {
    if (!strstr(st->message, frag)) fprintf(stderr, "message: %s\nlacks: %s\n", st->message, frag);
    assert_non_null(strstr(st->message, frag));
  }
  va_end(ap);
  ox_status_free(st);
}

static void expect_load_error(const char* name, OnyxStatusCode code, const char* reason) {
  char path[BUF], named[2 * BUF];
  lib_path(path, g_broken, name);
  snprintf(named, sizeof named, "provider library '%s'", path);
  OxProviderLib* lib = (OxProviderLib*)0x1;
  expect_error(ox_provider_lib_acquire(ox_host_api(), name, NULL, &lib), code, named, reason, NULL);
  assert_null(lib);
  assert_false(is_loaded(path)); /* a failure unloads */
}

/* --- Working libraries -------------------------------------------------------------- */

static void test_good_loads_and_unloads(void** state) {
  (void)state;
  char path[BUF];
  lib_path(path, g_broken, "good");
  OxProviderLib* lib = NULL;
  assert_null(ox_provider_lib_acquire(ox_host_api(), "good", NULL, &lib));
  assert_non_null(lib);
  assert_string_equal(lib->path, path);
  assert_string_equal(lib->name, "good");
  assert_string_equal(lib->provider->version, "1");
  assert_int_equal(lib->refs, 1);
  assert_non_null(lib->handle);
  assert_non_null(lib->schemas);
  assert_non_null(lib->kernels);
  assert_int_equal(ox_kreg_count(lib->kernels), 1); /* its one Relu kernel */
  assert_string_equal(ox_kreg_at(lib->kernels, 0)->def.op_type, "Relu");
  assert_true(is_loaded(path));
  assert_string_equal(release_log(), "");
  ox_provider_lib_release(lib);
  assert_string_equal(release_log(), "good:1;");
  assert_false(is_loaded(path));
}

static void test_refcount_shares_one_library(void** state) {
  (void)state;
  char path[BUF];
  lib_path(path, g_broken, "good");
  OxProviderLib *a = NULL, *b = NULL, *c = NULL;
  assert_null(ox_provider_lib_acquire(ox_host_api(), "good", NULL, &a));
  assert_null(ox_provider_lib_acquire(ox_host_api(), "good", NULL, &b));
  /* An explicit path to the same file is the same library. */
  assert_null(ox_provider_lib_acquire(ox_host_api(), "good", path, &c));
  assert_ptr_equal(a, b);
  assert_ptr_equal(a, c);
  assert_int_equal(a->refs, 3);
  ox_provider_lib_release(c);
  ox_provider_lib_release(b);
  assert_int_equal(a->refs, 1);
  assert_true(is_loaded(path));
  assert_string_equal(release_log(), ""); /* not released while in use */
  ox_provider_lib_release(a);
  assert_string_equal(release_log(), "good:1;"); /* exactly once */
  assert_false(is_loaded(path));
  ox_provider_lib_release(NULL); /* harmless */
}

static void test_reload_after_unload(void** state) {
  (void)state;
  OxProviderLib* lib = NULL;
  assert_null(ox_provider_lib_acquire(ox_host_api(), "good", NULL, &lib));
  ox_provider_lib_release(lib);
  assert_null(ox_provider_lib_acquire(ox_host_api(), "good", NULL, &lib));
  assert_int_equal(lib->refs, 1);
  ox_provider_lib_release(lib);
  assert_string_equal(release_log(), "good:1;good:1;");
}

/* A table from an older minor ends before `release`: the host must not read
 * the slot (the library does fill it, so reading it would show in the log). */
static void test_short_table_is_accepted_and_release_not_read(void** state) {
  (void)state;
  char path[BUF];
  lib_path(path, g_broken, "short");
  OxProviderLib* lib = NULL;
  assert_null(ox_provider_lib_acquire(ox_host_api(), "short", NULL, &lib));
  assert_int_equal(lib->provider->struct_size, offsetof(OnyxProvider, create_ep) + sizeof(void*));
  ox_provider_lib_release(lib);
  assert_string_equal(release_log(), "");
  assert_false(is_loaded(path));
}

/* --- Search order ----------------------------------------------------------------------- */

static void load_order(const char* env, const char* want_version, const char* want_folder) {
  setenv("ONYX_PROVIDER_PATH", env, 1);
  OxProviderLib* lib = NULL;
  assert_null(ox_provider_lib_acquire(ox_host_api(), "order", NULL, &lib));
  char path[BUF];
  lib_path(path, want_folder, "order");
  assert_string_equal(lib->provider->version, want_version);
  assert_string_equal(lib->path, path);
  ox_provider_lib_release(lib);
}

static void test_search_order(void** state) {
  (void)state;
  char a[BUF], b[BUF], env[3 * BUF];
  snprintf(a, sizeof a, "%s/a", g_broken);
  snprintf(b, sizeof b, "%s/b", g_broken);
  snprintf(env, sizeof env, "%s:%s", a, b);
  load_order(env, "a", a);
  snprintf(env, sizeof env, "%s:%s", b, a);
  load_order(env, "b", b);
  /* Folders without the file and empty entries are passed over. */
  snprintf(env, sizeof env, "/nonexistent/onyx::%s:", b);
  load_order(env, "b", b);
  /* Not in ONYX_PROVIDER_PATH: found beside the program that holds the loader. */
  char self[BUF];
  assert_non_null(realpath("/proc/self/exe", self));
  *strrchr(self, '/') = '\0';
  assert_string_equal(ox_self_dir(), self);
  load_order("/nonexistent/onyx", "self", self);
  unsetenv("ONYX_PROVIDER_PATH");
  OxProviderLib* lib = NULL;
  assert_null(ox_provider_lib_acquire(ox_host_api(), "order", NULL, &lib));
  assert_string_equal(lib->provider->version, "self");
  ox_provider_lib_release(lib);
}

static void test_not_found_lists_every_folder(void** state) {
  (void)state;
  setenv("ONYX_PROVIDER_PATH", "/nonexistent/one:/nonexistent/two", 1);
  char want[4 * BUF];
  snprintf(want, sizeof want,
           "provider 'nothere': library libonyx_ep_nothere.so not found; searched: "
           "/nonexistent/one (ONYX_PROVIDER_PATH), /nonexistent/two (ONYX_PROVIDER_PATH), "
           "%s/onyx/providers (install folder, relative to libonyx), %s (install folder), "
           "%s (beside libonyx)",
           ox_self_dir(), EXPECT_INSTALL_DIR, ox_self_dir());
  OnyxStatus* st = ox_provider_lib_acquire(ox_host_api(), "nothere", NULL, &(OxProviderLib*){NULL});
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_NOT_FOUND);
  assert_string_equal(st->message, want);
  ox_status_free(st);
}

static void test_explicit_library_not_found(void** state) {
  (void)state;
  expect_error(ox_provider_lib_acquire(ox_host_api(), "acme", "/nonexistent/libonyx_ep_acme.so",
                                       &(OxProviderLib*){NULL}),
               ONYX_NOT_FOUND, "'/nonexistent/libonyx_ep_acme.so' not found",
               "No such file or directory", NULL);
}

static void test_invalid_names_are_refused(void** state) {
  (void)state;
  const char* bad[] = {"CUDA", "../evil", "a/b", "cu-da", "", "x y"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char frag[64];
    snprintf(frag, sizeof frag, "provider name '%s' is invalid", bad[i]);
    expect_error(ox_provider_lib_acquire(ox_host_api(), bad[i], NULL, &(OxProviderLib*){NULL}),
                 ONYX_INVALID_ARGUMENT, frag, NULL);
  }
  expect_error(ox_provider_lib_acquire(ox_host_api(), NULL, NULL, &(OxProviderLib*){NULL}),
               ONYX_INVALID_ARGUMENT, "invalid", NULL);
  expect_error(ox_provider_lib_acquire(ox_host_api(), "good", NULL, NULL), ONYX_INVALID_ARGUMENT,
               NULL);
}

/* --- Broken libraries ---------------------------------------------------------------------- */

static void test_no_entry_symbol(void** state) {
  (void)state;
  expect_load_error("nosym", ONYX_FAIL, "has no entry symbol 'onyx_provider_init'");
  assert_string_equal(release_log(), "");
}

static void test_init_error_keeps_code_and_message(void** state) {
  (void)state;
  expect_load_error("initerr", ONYX_NO_DEVICE,
                    "onyx_provider_init failed: no widget attached (broken on purpose)");
}

static void test_abi_major_mismatch(void** state) {
  (void)state;
  char path[BUF], want[2 * BUF];
  lib_path(path, g_broken, "abi2");
  snprintf(want, sizeof want,
           "provider library '%s' was built for Onyx ABI 2.0; this host implements ABI 1.1", path);
  OnyxStatus* st = ox_provider_lib_acquire(ox_host_api(), "abi2", NULL, &(OxProviderLib*){NULL});
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_ABI_MISMATCH);
  assert_string_equal(st->message, want);
  ox_status_free(st);
  assert_string_equal(release_log(), ""); /* a foreign table is never called */
  assert_false(is_loaded(path));
}

static void test_null_table(void** state) {
  (void)state;
  expect_load_error("nulltable", ONYX_FAIL, "returned no provider table");
}

static void test_missing_create_ep(void** state) {
  (void)state;
  expect_load_error("nocreate", ONYX_FAIL, "required provider slot 'create_ep' is NULL");
  assert_string_equal(release_log(), "");
}

static void test_name_mismatch(void** state) {
  (void)state;
  expect_load_error("misnamed", ONYX_INVALID_ARGUMENT,
                    "provides 'someone_else', not the requested 'misnamed'");
  /* Its table was valid, so it was released before being unloaded. */
  assert_string_equal(release_log(), "someone_else:1;");
}

static void test_tiny_table(void** state) {
  (void)state;
  char frag[64];
  snprintf(frag, sizeof frag, "struct_size %zu is too small", sizeof(size_t));
  expect_load_error("tiny", ONYX_ABI_MISMATCH, frag);
}

/* Registration fails after a valid init: the provider is released, then unloaded. */
static void test_register_kernels_failure(void** state) {
  (void)state;
  expect_load_error("regfail", ONYX_INVALID_ARGUMENT,
                    "register_kernels failed: kernel table is corrupt (broken on purpose)");
  assert_string_equal(release_log(), "regfail:1;");
}

static void test_dlopen_failure(void** state) {
  (void)state;
  char dir[] = "/tmp/onyx_test_loader_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[BUF];
  lib_path(path, dir, "garbage");
  FILE* f = fopen(path, "w");
  assert_non_null(f);
  fputs("this is not an ELF file\n", f);
  fclose(f);
  char real[PATH_MAX];
  assert_non_null(realpath(path, real));
  setenv("ONYX_PROVIDER_PATH", dir, 1);
  char named[2 * BUF];
  snprintf(named, sizeof named, "provider library '%s': dlopen failed: ", real);
  expect_error(ox_provider_lib_acquire(ox_host_api(), "garbage", NULL, &(OxProviderLib*){NULL}),
               ONYX_FAIL, named, NULL);
  unlink(path);
  rmdir(dir);
}

/* One file asked for under two names: the second request is refused. */
static void test_same_library_other_name(void** state) {
  (void)state;
  char path[BUF];
  lib_path(path, g_broken, "good");
  OxProviderLib* lib = NULL;
  assert_null(ox_provider_lib_acquire(ox_host_api(), "good", NULL, &lib));
  expect_error(ox_provider_lib_acquire(ox_host_api(), "other", path, &(OxProviderLib*){NULL}),
               ONYX_INVALID_ARGUMENT, "provides 'good', not the requested 'other'", NULL);
  assert_int_equal(lib->refs, 1);
  ox_provider_lib_release(lib);
  assert_string_equal(release_log(), "good:1;");
  /* And the other way round, when the library is not loaded yet. */
  expect_error(ox_provider_lib_acquire(ox_host_api(), "other", path, &(OxProviderLib*){NULL}),
               ONYX_INVALID_ARGUMENT, "provides 'good', not the requested 'other'", NULL);
  assert_string_equal(release_log(), "good:1;good:1;");
  assert_false(is_loaded(path));
}

/* --- Threads ------------------------------------------------------------------------------- */

static void* churn(void* arg) {
  (void)arg;
  for (int i = 0; i < 50; i++) {
    OxProviderLib* lib = NULL;
    OnyxStatus* st = ox_provider_lib_acquire(ox_host_api(), "good", NULL, &lib);
    if (st) {
      ox_status_free(st);
      return (void*)1;
    }
    ox_provider_lib_release(lib);
  }
  return NULL;
}

static void test_concurrent_acquire_release(void** state) {
  (void)state;
  OxProviderLib* keep = NULL; /* holds the library so the threads share it */
  assert_null(ox_provider_lib_acquire(ox_host_api(), "good", NULL, &keep));
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    assert_int_equal(pthread_create(&t[i], NULL, churn, NULL), 0);
  for (int i = 0; i < 4; i++) {
    void* failed = NULL;
    pthread_join(t[i], &failed);
    assert_null(failed);
  }
  assert_int_equal(keep->refs, 1);
  ox_provider_lib_release(keep);
  assert_string_equal(release_log(), "good:1;");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_good_loads_and_unloads, reset),
      cmocka_unit_test_setup(test_refcount_shares_one_library, reset),
      cmocka_unit_test_setup(test_reload_after_unload, reset),
      cmocka_unit_test_setup(test_short_table_is_accepted_and_release_not_read, reset),
      cmocka_unit_test_setup(test_search_order, reset),
      cmocka_unit_test_setup(test_not_found_lists_every_folder, reset),
      cmocka_unit_test_setup(test_explicit_library_not_found, reset),
      cmocka_unit_test_setup(test_invalid_names_are_refused, reset),
      cmocka_unit_test_setup(test_no_entry_symbol, reset),
      cmocka_unit_test_setup(test_init_error_keeps_code_and_message, reset),
      cmocka_unit_test_setup(test_abi_major_mismatch, reset),
      cmocka_unit_test_setup(test_null_table, reset),
      cmocka_unit_test_setup(test_missing_create_ep, reset),
      cmocka_unit_test_setup(test_name_mismatch, reset),
      cmocka_unit_test_setup(test_tiny_table, reset),
      cmocka_unit_test_setup(test_register_kernels_failure, reset),
      cmocka_unit_test_setup(test_dlopen_failure, reset),
      cmocka_unit_test_setup(test_same_library_other_name, reset),
      cmocka_unit_test_setup(test_concurrent_acquire_release, reset),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
