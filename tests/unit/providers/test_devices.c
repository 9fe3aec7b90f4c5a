/* test_devices.c — listing providers and devices (onyx.h, "Providers and
 * devices") and the loader's choice by score (ox_providers.h).
 *
 * The libraries: the fake and CPU providers, the broken ones of
 * tests/providers/broken, and the "scored", "twodev" and "zerodev" builds of
 * score_provider.c (tests/unit/providers/CMakeLists.txt). Expected values
 * come from those providers' sources and the contracts in onyx.h and
 * ox_providers.h, never from a run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ox_host_api.h"
#include "onyx/onyx.h"
#include "ox_providers.h"

#define BUF (2 * PATH_MAX)

static char g_lib[BUF];    /* ${CMAKE_BINARY_DIR}/lib, resolved */
static char g_broken[BUF]; /* .../lib/broken */
static char g_score[BUF];  /* .../lib/score */
static char g_tmp[BUF];    /* links made for these tests */

/* Paths of the libraries, resolved, as the list must report them. */
static char p_fake[BUF], p_cpu[BUF], p_nosym[BUF], p_initerr[BUF], p_abi2[BUF], p_misnamed[BUF];

/* snprintf that fails the test instead of cutting the text short. */
static void fmt(char* out, size_t cap, const char* f, ...) __attribute__((format(printf, 3, 4)));
static void fmt(char* out, size_t cap, const char* f, ...) {
  va_list ap;
  va_start(ap, f);
  int n = vsnprintf(out, cap, f, ap);
  va_end(ap);
  assert_true(n >= 0 && (size_t)n < cap);
}

static void make_link(const char* target, const char* folder, const char* name) {
  char link[BUF];
  fmt(link, sizeof link, "%s/%s/libonyx_ep_%s.so", g_tmp, folder, name);
  assert_int_equal(symlink(target, link), 0);
}

static void make_folder(const char* folder) {
  char dir[BUF];
  fmt(dir, sizeof dir, "%s/%s", g_tmp, folder);
  assert_int_equal(mkdir(dir, 0700), 0);
}

/* Keeps the vendor GPU providers (and so the runtimes they link) mapped for
 * the whole process, as test_gpu.c does: each listing loads and unloads
 * them, and the CUDA and HIP runtimes leak their one-time allocations on
 * every unload, which LeakSanitizer would report against an unknown module. */
static void keep_gpu_providers_mapped(void) {
  static const char* const gpus[] = {"cuda", "rocm"};
  for (size_t i = 0; i < sizeof gpus / sizeof *gpus; i++) {
    char path[BUF];
    fmt(path, sizeof path, "%s/libonyx_ep_%s.so", g_lib, gpus[i]);
    if (access(path, F_OK) == 0 && !dlopen(path, RTLD_NOW | RTLD_LOCAL))
      fprintf(stderr, "note: cannot keep %s mapped: %s\n", path, dlerror());
  }
}

static int setup(void** state) {
  (void)state;
  const char* bin = getenv("ONYX_BINARY_DIR");
  if (!bin) {
    fprintf(stderr, "ONYX_BINARY_DIR is not set (run through ctest)\n");
    return -1;
  }
  char dir[BUF];
  fmt(dir, sizeof dir, "%s/lib", bin);
  if (!realpath(dir, g_lib)) return -1;
  keep_gpu_providers_mapped();
  fmt(g_broken, sizeof g_broken, "%s/broken", g_lib);
  fmt(g_score, sizeof g_score, "%s/score", g_lib);
  fmt(p_fake, sizeof p_fake, "%s/libonyx_ep_fake.so", g_lib);
  fmt(p_cpu, sizeof p_cpu, "%s/libonyx_ep_cpu.so", g_lib);
  fmt(p_nosym, sizeof p_nosym, "%s/libonyx_ep_nosym.so", g_broken);
  fmt(p_initerr, sizeof p_initerr, "%s/libonyx_ep_initerr.so", g_broken);
  fmt(p_abi2, sizeof p_abi2, "%s/libonyx_ep_abi2.so", g_broken);
  fmt(p_misnamed, sizeof p_misnamed, "%s/libonyx_ep_misnamed.so", g_broken);
  fmt(g_tmp, sizeof g_tmp, "/tmp/onyx_test_devices_XXXXXX");
  if (!mkdtemp(g_tmp)) return -1;
  /* "mixed": working and broken libraries in one folder. */
  make_folder("mixed");
  make_link(p_fake, "mixed", "fake");
  make_link(p_cpu, "mixed", "cpu");
  make_link(p_nosym, "mixed", "nosym");
  make_link(p_initerr, "mixed", "initerr");
  make_link(p_abi2, "mixed", "abi2");
  make_link(p_misnamed, "mixed", "misnamed");
  /* "badscored": a "scored" library that does not load. */
  make_folder("badscored");
  make_link(p_nosym, "badscored", "scored");
  return 0;
}

static int teardown(void** state) {
  (void)state;
  const char* links[] = {"mixed/libonyx_ep_fake.so",
                         "mixed/libonyx_ep_cpu.so",
                         "mixed/libonyx_ep_nosym.so",
                         "mixed/libonyx_ep_initerr.so",
                         "mixed/libonyx_ep_abi2.so",
                         "mixed/libonyx_ep_misnamed.so",
                         "badscored/libonyx_ep_scored.so",
                         "mixed",
                         "badscored"};
  for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
    char p[BUF];
    fmt(p, sizeof p, "%s/%s", g_tmp, links[i]);
    remove(p);
  }
  rmdir(g_tmp);
  return 0;
}

static int reset(void** state) {
  (void)state;
  unsetenv("ONYX_PROVIDER_PATH");
  unsetenv("ONYX_FAKE_NO_DEVICE");
  return 0;
}

/* ONYX_PROVIDER_PATH from folders: "mixed" and "badscored" are under g_tmp,
 * "score/x" under g_score, anything else is taken as it is. */
static void set_path(const char* first, ...) {
  char env[8 * BUF] = "";
  va_list ap;
  va_start(ap, first);
  for (const char* f = first; f; f = va_arg(ap, const char*)) {
    char dir[BUF];
    if (!strcmp(f, "mixed") || !strcmp(f, "badscored"))
      fmt(dir, sizeof dir, "%s/%s", g_tmp, f);
    else if (!strncmp(f, "score/", 6))
      fmt(dir, sizeof dir, "%s/%s", g_score, f + 6);
    else
      fmt(dir, sizeof dir, "%s", f);
    size_t len = strlen(env);
    fmt(env + len, sizeof env - len, "%s%s", len ? ":" : "", dir);
  }
  va_end(ap);
  setenv("ONYX_PROVIDER_PATH", env, 1);
}

static void score_path(char* out, const char* folder, const char* name) {
  fmt(out, BUF, "%s/%s/libonyx_ep_%s.so", g_score, folder, name);
}

static bool is_loaded(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (h) dlclose(h);
  return h != NULL;
}

static bool contains(const char* s, const char* frag) {
  if (s && strstr(s, frag)) return true;
  fprintf(stderr, "text: %s\nlacks: %s\n", s ? s : "(null)", frag);
  return false;
}

static OnyxProviderInfo info_at(const OnyxProviderList* l, size_t i) {
  OnyxProviderInfo p = {.struct_size = sizeof p};
  OnyxStatus* st = onyx_provider_list_info(l, i, &p);
  if (st) fprintf(stderr, "%s\n", onyx_status_message(st));
  assert_null(st);
  return p;
}

static OnyxProviderDevice device_at(const OnyxProviderList* l, size_t i, size_t d) {
  OnyxProviderDevice dev = {.struct_size = sizeof dev};
  OnyxStatus* st = onyx_provider_list_device(l, i, d, &dev);
  if (st) fprintf(stderr, "%s\n", onyx_status_message(st));
  assert_null(st);
  return dev;
}

/* Index of the entry for `library` (resolved); fails when there is none or
 * more than one. */
static size_t find(const OnyxProviderList* l, const char* library) {
  size_t hit = SIZE_MAX;
  for (size_t i = 0; i < onyx_provider_list_count(l); i++) {
    OnyxProviderInfo p = info_at(l, i);
    if (p.library && !strcmp(p.library, library)) {
      assert_int_equal(hit, SIZE_MAX);
      hit = i;
    }
  }
  if (hit == SIZE_MAX) fprintf(stderr, "no entry for %s\n", library);
  assert_int_not_equal(hit, SIZE_MAX);
  return hit;
}

static void expect_not_loaded(const OnyxProviderList* l, const char* name, const char* library,
                              OnyxStatusCode code, const char* reason) {
  OnyxProviderInfo p = info_at(l, find(l, library));
  assert_string_equal(p.name, name);
  assert_int_equal(p.loaded, 0);
  assert_null(p.vendor);
  assert_null(p.version);
  assert_int_equal(p.selected, 0);
  assert_int_equal(p.device_count, 0);
  assert_int_equal(p.status, code);
  char named[2 * BUF];
  fmt(named, sizeof named, "provider library '%s'", library);
  assert_true(contains(p.message, named));
  assert_true(contains(p.message, reason));
}

/* --- The search path -------------------------------------------------------------------- */

static void test_search_path_lists_every_library(void** state) {
  (void)state;
  set_path("mixed", NULL);
  OnyxProviderList* l = NULL;
  assert_null(onyx_provider_list_create(&l));
  /* The folder's libraries in name order (links resolved), before those of
   * the install folder and the test's own folder. */
  const char* order[] = {p_abi2, p_cpu, p_fake, p_initerr, p_misnamed, p_nosym};
  const char* names[] = {"abi2", "cpu", "fake", "initerr", "misnamed", "nosym"};
  assert_true(onyx_provider_list_count(l) >= 6);
  for (size_t i = 0; i < 6; i++) {
    OnyxProviderInfo p = info_at(l, i);
    assert_string_equal(p.library, order[i]);
    assert_string_equal(p.name, names[i]);
  }

  OnyxProviderInfo fake = info_at(l, find(l, p_fake));
  assert_int_equal(fake.loaded, 1);
  assert_string_equal(fake.vendor, "Onyx tests");
  assert_string_equal(fake.version, "1.0");
  assert_int_equal(fake.score, 0); /* no score slot */
  assert_int_equal(fake.selected, 1);
  assert_int_equal(fake.status, ONYX_OK);
  assert_string_equal(fake.message, "");
  assert_int_equal(fake.device_count, 1);
  OnyxProviderDevice d = device_at(l, find(l, p_fake), 0);
  assert_int_equal(d.status, ONYX_OK);
  assert_string_equal(d.message, "");
  assert_string_equal(d.name, "Fake accelerator");
  assert_int_equal(d.memory.kind, ONYX_DEVICE_OTHER);
  assert_int_equal(d.memory.vendor_id, 0xFA4E); /* FAKE_VENDOR */
  assert_int_equal(d.memory.device_id, 0);
  assert_int_equal(d.memory.mem_type, ONYX_MEM_DEFAULT);
  assert_int_equal(d.memory.alignment, 64);
  assert_int_equal(d.memory_bytes, 0);
  assert_int_equal(d.property_count, 1);
  assert_string_equal(d.property_keys[0], "kind");
  assert_string_equal(d.property_values[0], "test");

  OnyxProviderInfo cpu = info_at(l, find(l, p_cpu));
  assert_int_equal(cpu.loaded, 1);
  assert_string_equal(cpu.vendor, "onyx");
  assert_int_equal(cpu.selected, 1);
  assert_int_equal(cpu.device_count, 1);
  d = device_at(l, find(l, p_cpu), 0);
  assert_string_equal(d.name, "host CPU");
  assert_int_equal(d.memory.kind, ONYX_DEVICE_CPU);
  assert_int_equal(d.memory.vendor_id, 0);
  assert_int_equal(d.property_count, 0);

  expect_not_loaded(l, "nosym", p_nosym, ONYX_FAIL, "has no entry symbol 'onyx_provider_init'");
  expect_not_loaded(l, "initerr", p_initerr, ONYX_NO_DEVICE,
                    "onyx_provider_init failed: no widget attached (broken on purpose)");
  char abi[128];
  fmt(abi, sizeof abi, "was built for Onyx ABI 2.0; this host implements ABI %d.%d",
      ONYX_ABI_VERSION_MAJOR, ONYX_ABI_VERSION_MINOR);
  expect_not_loaded(l, "abi2", p_abi2, ONYX_ABI_MISMATCH, abi);
  expect_not_loaded(l, "misnamed", p_misnamed, ONYX_INVALID_ARGUMENT,
                    "provides 'someone_else', not the requested 'misnamed'");

  /* The list holds copies: no library stays loaded for it. */
  assert_false(is_loaded(p_fake));
  assert_false(is_loaded(p_initerr));
  onyx_provider_list_release(l);
}

static void test_device_count_reasons(void** state) {
  (void)state;
  set_path("mixed", "score/misc", NULL);
  setenv("ONYX_FAKE_NO_DEVICE", "1", 1);
  OnyxProviderList* l = NULL;
  assert_null(onyx_provider_list_create(&l));
  /* The provider's own reason, as it gave it. */
  OnyxProviderInfo fake = info_at(l, find(l, p_fake));
  assert_int_equal(fake.loaded, 1);
  assert_int_equal(fake.device_count, 0);
  assert_int_equal(fake.status, ONYX_NO_DEVICE);
  assert_string_equal(fake.message, "fake device unplugged");
  /* Zero devices without an error: the host says so. */
  char path[BUF];
  score_path(path, "misc", "zerodev");
  OnyxProviderInfo zero = info_at(l, find(l, path));
  assert_int_equal(zero.loaded, 1);
  assert_int_equal(zero.device_count, 0);
  assert_int_equal(zero.status, ONYX_NO_DEVICE);
  assert_string_equal(zero.message, "the provider reports zero devices");
  /* No device_info: each device is the host CPU. */
  score_path(path, "misc", "twodev");
  size_t two = find(l, path);
  OnyxProviderInfo twodev = info_at(l, two);
  assert_string_equal(twodev.vendor, "score tests");
  assert_string_equal(twodev.version, "2");
  assert_int_equal(twodev.device_count, 2);
  assert_int_equal(twodev.status, ONYX_OK);
  for (size_t i = 0; i < 2; i++) {
    OnyxProviderDevice d = device_at(l, two, i);
    assert_string_equal(d.name, "host CPU");
    assert_int_equal(d.memory.kind, ONYX_DEVICE_CPU);
    assert_int_equal(d.memory.vendor_id, 0);
    assert_int_equal(d.memory.device_id, 0);
    assert_int_equal(d.memory_bytes, 0);
    assert_int_equal(d.property_count, 0);
  }
  onyx_provider_list_release(l);
}

static void test_reading_errors(void** state) {
  (void)state;
  set_path("mixed", NULL);
  OnyxProviderList* l = NULL;
  assert_null(onyx_provider_list_create(&l));
  size_t n = onyx_provider_list_count(l);
  OnyxProviderInfo p = {.struct_size = sizeof p};
  OnyxStatus* st = onyx_provider_list_info(l, n, &p);
  assert_int_equal(onyx_status_code(st), ONYX_INVALID_ARGUMENT);
  onyx_status_release(st);
  p.struct_size = sizeof(size_t);
  st = onyx_provider_list_info(l, 0, &p);
  assert_int_equal(onyx_status_code(st), ONYX_INVALID_ARGUMENT);
  assert_true(contains(onyx_status_message(st), "struct_size"));
  onyx_status_release(st);
  /* A device that does not exist: the error names the provider and library. */
  OnyxProviderDevice d = {.struct_size = sizeof d};
  st = onyx_provider_list_device(l, find(l, p_nosym), 0, &d);
  assert_int_equal(onyx_status_code(st), ONYX_INVALID_ARGUMENT);
  char want[2 * BUF];
  fmt(want, sizeof want, "provider 'nosym' (%s): device 0 does not exist (it has 0)", p_nosym);
  assert_string_equal(onyx_status_message(st), want);
  onyx_status_release(st);
  st = onyx_provider_list_device(l, find(l, p_fake), 1, &d);
  assert_int_equal(onyx_status_code(st), ONYX_INVALID_ARGUMENT);
  onyx_status_release(st);
  onyx_provider_list_release(l);
  assert_int_equal(onyx_provider_list_count(NULL), 0);
  onyx_provider_list_release(NULL);
  st = onyx_provider_list_create(NULL);
  assert_int_equal(onyx_status_code(st), ONYX_INVALID_ARGUMENT);
  onyx_status_release(st);
}

/* --- Scores ------------------------------------------------------------------------------- */

static void expect_chosen(const char* version) {
  OxProviderLib* lib = NULL;
  OnyxStatus* st = ox_provider_lib_acquire(ox_host_api(), "scored", NULL, &lib);
  if (st) fprintf(stderr, "%s\n", st->message);
  assert_null(st);
  assert_string_equal(lib->provider->version, version);
  char path[BUF];
  score_path(path, version, "scored");
  assert_string_equal(lib->path, path);
  ox_provider_lib_release(lib);
}

static void test_loader_keeps_the_highest_score(void** state) {
  (void)state;
  set_path("score/low", "score/high", NULL);
  expect_chosen("high");
  set_path("score/high", "score/low", NULL);
  expect_chosen("high");
  /* No score slot scores 0, below 1. */
  set_path("score/none", "score/low", NULL);
  expect_chosen("low");
  set_path("score/low", "score/none", NULL);
  expect_chosen("low");
  /* Equal scores: the first in search order. */
  set_path("score/high", "score/high2", NULL);
  expect_chosen("high");
  set_path("score/high2", "score/high", NULL);
  expect_chosen("high2");
  /* A negative score is never chosen, even alone with a 0. */
  set_path("score/neg", "score/none", NULL);
  expect_chosen("none");
  /* One that does not load is passed over for one that does. */
  set_path("badscored", "score/low", NULL);
  expect_chosen("low");
}

static void test_loader_unloads_the_others(void** state) {
  (void)state;
  set_path("score/low", "score/high", NULL);
  OxProviderLib* lib = NULL;
  assert_null(ox_provider_lib_acquire(ox_host_api(), "scored", NULL, &lib));
  char low[BUF], high[BUF];
  score_path(low, "low", "scored");
  score_path(high, "high", "scored");
  assert_true(is_loaded(high));
  assert_false(is_loaded(low));
  ox_provider_lib_release(lib);
  assert_false(is_loaded(high));
}

static void test_negative_score_refused(void** state) {
  (void)state;
  char neg[BUF], want[2 * BUF];
  score_path(neg, "neg", "scored");
  fmt(want, sizeof want, "provider library '%s' reports score -1: it cannot run on this machine",
      neg);
  /* Found by name, alone. */
  set_path("score/neg", NULL);
  OxProviderLib* lib = (OxProviderLib*)0x1;
  OnyxStatus* st = ox_provider_lib_acquire(ox_host_api(), "scored", NULL, &lib);
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_NO_DEVICE);
  assert_string_equal(st->message, want);
  assert_null(lib);
  ox_status_free(st);
  assert_false(is_loaded(neg));
  /* Named by path. */
  unsetenv("ONYX_PROVIDER_PATH");
  st = ox_provider_lib_acquire(ox_host_api(), "scored", neg, &lib);
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_NO_DEVICE);
  assert_string_equal(st->message, want);
  ox_status_free(st);
  /* A library of score 5 named by path is used. */
  char high[BUF];
  score_path(high, "high", "scored");
  assert_null(ox_provider_lib_acquire(ox_host_api(), "scored", high, &lib));
  ox_provider_lib_release(lib);
}

static void test_no_usable_candidate_names_each(void** state) {
  (void)state;
  set_path("badscored", "score/neg", NULL);
  char neg[BUF], want[4 * BUF];
  score_path(neg, "neg", "scored");
  fmt(want, sizeof want,
      "provider 'scored': none of the 2 libraries found can be used: provider library '%s' "
      "has no entry symbol 'onyx_provider_init' (not an Onyx provider, or built without "
      "ONYX_EXPORT); provider library '%s' reports score -1: it cannot run on this machine",
      p_nosym, neg);
  OnyxStatus* st = ox_provider_lib_acquire(ox_host_api(), "scored", NULL, &(OxProviderLib*){NULL});
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_FAIL); /* the first candidate's */
  assert_string_equal(st->message, want);
  ox_status_free(st);
}

static void test_listing_marks_the_selected_library(void** state) {
  (void)state;
  set_path("score/low", "score/neg", "score/high", "score/high2", NULL);
  OnyxProviderList* l = NULL;
  assert_null(onyx_provider_list_create(&l));
  static const struct {
    const char* folder;
    int32_t score;
    int32_t selected;
  } want[] = {{"low", 1, 0}, {"neg", -1, 0}, {"high", 5, 1}, {"high2", 5, 0}};
  for (size_t i = 0; i < 4; i++) {
    char path[BUF];
    score_path(path, want[i].folder, "scored");
    OnyxProviderInfo p = info_at(l, i); /* search order */
    assert_string_equal(p.library, path);
    assert_string_equal(p.name, "scored");
    assert_string_equal(p.version, want[i].folder);
    assert_int_equal(p.loaded, 1);
    assert_int_equal(p.score, want[i].score);
    assert_int_equal(p.selected, want[i].selected);
    if (want[i].score < 0) {
      assert_int_equal(p.status, ONYX_NO_DEVICE);
      assert_string_equal(p.message, "score -1: the provider cannot run on this machine");
      assert_int_equal(p.device_count, 0);
    } else {
      assert_int_equal(p.status, ONYX_OK);
      assert_int_equal(p.device_count, 1);
    }
  }
  onyx_provider_list_release(l);
}

/* --- Session options ---------------------------------------------------------------------- */

static void test_options_list_what_a_session_uses(void** state) {
  (void)state;
  set_path(g_lib, "score/low", "score/high", NULL);
  char neg[BUF];
  score_path(neg, "neg", "scored");
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  assert_null(onyx_session_options_add_provider(o, "fake", NULL, 0, 1));
  assert_null(onyx_session_options_add_provider(o, "scored", NULL, 0, 0));
  assert_null(onyx_session_options_add_provider(o, "twodev", neg, 0, 0));
  assert_null(onyx_session_options_add_provider(o, "nosuch", NULL, 0, 0));
  OnyxProviderList* l = NULL;
  assert_null(onyx_session_options_list_providers(o, &l));
  assert_int_equal(onyx_provider_list_count(l), 5); /* and the implicit CPU provider */

  OnyxProviderInfo p = info_at(l, 0);
  assert_string_equal(p.name, "fake");
  assert_string_equal(p.library, p_fake);
  assert_int_equal(p.selected, 1);
  assert_int_equal(p.device_count, 1);

  p = info_at(l, 1); /* the library of highest score */
  char high[BUF];
  score_path(high, "high", "scored");
  assert_string_equal(p.name, "scored");
  assert_string_equal(p.library, high);
  assert_int_equal(p.score, 5);
  assert_int_equal(p.selected, 1);

  p = info_at(l, 2); /* a library that provides another name */
  assert_string_equal(p.name, "twodev");
  assert_int_equal(p.loaded, 0);
  assert_null(p.library);
  assert_int_equal(p.status, ONYX_INVALID_ARGUMENT);
  assert_true(contains(p.message, "provides 'scored', not the requested 'twodev'"));

  p = info_at(l, 3);
  assert_string_equal(p.name, "nosuch");
  assert_int_equal(p.loaded, 0);
  assert_int_equal(p.status, ONYX_NOT_FOUND);
  assert_true(contains(p.message, "library libonyx_ep_nosuch.so not found; searched: "));

  p = info_at(l, 4);
  assert_string_equal(p.name, "cpu");
  assert_string_equal(p.library, p_cpu);
  assert_int_equal(p.device_count, 1);
  onyx_provider_list_release(l);

  /* Without the implicit CPU provider, and from a config. */
  static const char cfg[] = "{\"providers\": [{\"name\": \"twodev\"}], \"implicit_cpu\": false}";
  set_path("score/misc", NULL);
  assert_null(onyx_session_options_load_config_text(o, cfg, sizeof cfg - 1, "cfg"));
  assert_null(onyx_session_options_list_providers(o, &l));
  assert_int_equal(onyx_provider_list_count(l), 1);
  p = info_at(l, 0);
  assert_string_equal(p.name, "twodev");
  assert_int_equal(p.device_count, 2);
  onyx_provider_list_release(l);
  onyx_session_options_release(o);

  /* No options: the defaults, the CPU provider alone. */
  set_path(g_lib, NULL);
  assert_null(onyx_session_options_list_providers(NULL, &l));
  assert_int_equal(onyx_provider_list_count(l), 1);
  p = info_at(l, 0);
  assert_string_equal(p.name, "cpu");
  assert_int_equal(p.loaded, 1);
  onyx_provider_list_release(l);
}

/* --- GPU providers, where built ----------------------------------------------------------- */

/* Without a device a GPU provider loads and reports zero devices with its
 * reason; with one, every device is described. */
static void check_gpu(const char* name, uint32_t pci_vendor) {
  char path[BUF];
  fmt(path, sizeof path, "%s/libonyx_ep_%s.so", g_lib, name);
  if (access(path, F_OK) != 0) {
    fprintf(stderr, "note: %s not built; not checked\n", path);
    return;
  }
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  assert_null(onyx_session_options_add_provider(o, name, path, 0, 1));
  assert_null(onyx_session_options_set_no_implicit_cpu(o, 1));
  OnyxProviderList* l = NULL;
  assert_null(onyx_session_options_list_providers(o, &l));
  onyx_session_options_release(o);
  assert_int_equal(onyx_provider_list_count(l), 1);
  OnyxProviderInfo p = info_at(l, 0);
  if (!p.loaded) fprintf(stderr, "%s\n", p.message);
  assert_int_equal(p.loaded, 1);
  assert_string_equal(p.name, name);
  if (p.device_count == 0) {
    assert_int_equal(p.status, ONYX_NO_DEVICE);
    char prefix[32];
    fmt(prefix, sizeof prefix, "%s: no ", name); /* "cuda: no CUDA device (...)" */
    assert_true(contains(p.message, prefix));
    fprintf(stderr, "note: %s has no device: %s\n", name, p.message);
  } else {
    assert_int_equal(p.status, ONYX_OK);
    for (size_t i = 0; i < p.device_count; i++) {
      OnyxProviderDevice d = device_at(l, 0, i);
      assert_int_equal(d.status, ONYX_OK);
      assert_true(strlen(d.name) > 0);
      assert_int_equal(d.memory.kind, ONYX_DEVICE_GPU);
      assert_int_equal(d.memory.vendor_id, pci_vendor);
      assert_int_equal(d.memory.device_id, (int32_t)i);
      assert_true(d.memory_bytes > 0);
      assert_int_equal(d.property_count, 4);
      assert_string_equal(d.property_keys[0], "compute_capability");
      fprintf(stderr, "note: %s device %zu: %s, compute capability %s\n", name, i, d.name,
              d.property_values[0]);
    }
  }
  onyx_provider_list_release(l);
}

static void test_gpu_providers(void** state) {
  (void)state;
  /* The vendor runtimes keep memory memcheck reports (scripts/test.sh
   * leaves the GPU tests out of its valgrind run for the same reason). */
  if (getenv("ONYX_UNDER_VALGRIND")) {
    fprintf(stderr, "note: under valgrind: the GPU providers are not loaded\n");
    return;
  }
  check_gpu("cuda", 0x10DE);
  check_gpu("rocm", 0x1002);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_search_path_lists_every_library, reset),
      cmocka_unit_test_setup(test_device_count_reasons, reset),
      cmocka_unit_test_setup(test_reading_errors, reset),
      cmocka_unit_test_setup(test_loader_keeps_the_highest_score, reset),
      cmocka_unit_test_setup(test_loader_unloads_the_others, reset),
      cmocka_unit_test_setup(test_negative_score_refused, reset),
      cmocka_unit_test_setup(test_no_usable_candidate_names_each, reset),
      cmocka_unit_test_setup(test_listing_marks_the_selected_library, reset),
      cmocka_unit_test_setup(test_options_list_what_a_session_uses, reset),
      cmocka_unit_test_setup(test_gpu_providers, reset),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
