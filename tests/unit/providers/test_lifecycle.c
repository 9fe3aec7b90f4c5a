/* test_lifecycle.c — provider libraries across sessions: a library stays
 * loaded while any session uses it and is closed only after every session
 * (and so every EP) is released; loading one provider twice is harmless;
 * sessions share one load; a provider learns its own path through
 * host->library_path; providers from several libraries live in one session.
 *
 * The providers are life_provider.c built as "life" (Relu) and "life2" (Neg),
 * plus the test-only "fake" provider (Add on its own device memory) and the
 * CPU provider. Expected values are worked out by hand in each test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_host_api.h"
#include "ox_session.h"
#include "ox_test_models.h"

static char g_life_dir[PATH_MAX];
static char g_orig_path[4 * PATH_MAX];

static int setup(void** state) {
  (void)state;
  if (!realpath(LIFE_DIR, g_life_dir)) {
    fprintf(stderr, "%s: missing (build the onyx_test_life_* targets)\n", LIFE_DIR);
    return -1;
  }
  const char* orig = getenv("ONYX_PROVIDER_PATH");
  if (!orig) {
    fprintf(stderr, "ONYX_PROVIDER_PATH is not set (run through ctest)\n");
    return -1;
  }
  snprintf(g_orig_path, sizeof g_orig_path, "%s", orig);
  return 0;
}

/* Every test: the life providers first in the search path, an empty log. */
static int reset(void** state) {
  (void)state;
  char path[sizeof g_orig_path + PATH_MAX + 2];
  snprintf(path, sizeof path, "%s:%s", g_life_dir, g_orig_path);
  setenv("ONYX_PROVIDER_PATH", path, 1);
  unsetenv("ONYX_TEST_LIFE_LOG");
  unsetenv("ONYX_TEST_LIFE_QUIET");
  return 0;
}

static const char* life_log(void) {
  const char* s = getenv("ONYX_TEST_LIFE_LOG");
  return s ? s : "";
}

static void life_path(char* out, size_t size, const char* name) {
  snprintf(out, size, "%s/libonyx_ep_%s.so", g_life_dir, name);
}

static bool is_loaded(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (h) dlclose(h);
  return h != NULL;
}

static void ok(OnyxStatus* st) {
  if (st) fprintf(stderr, "unexpected error: %s\n", onyx_status_message(st));
  assert_null(st);
}

/* X[2,3] -> Relu -> r -> Neg -> n; Add(n, X) -> a; Sigmoid(a) -> Y.
 * With X = [-2,-1,0,1,2,3]: r = [0,0,0,1,2,3], n = [0,0,0,-1,-2,-3],
 * a = n + X = [-2,-1,0,0,0,0], Y = sigmoid(a). */
static const float g_x[6] = {-2, -1, 0, 1, 2, 3};

static void chain_model(uint8_t** bytes, size_t* len) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_node(m, "Relu", "relu", "X", "r");
  otm_node(m, "Neg", "neg", "r", "n");
  otm_node(m, "Add", "add", "n,X", "a");
  otm_node(m, "Sigmoid", "sigmoid", "a", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_serialize(m, bytes, len);
  otm_free(m);
}

/* X[2,3] -> Relu -> Y: all on "life" when it is listed. */
static void relu_model(uint8_t** bytes, size_t* len) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_node(m, "Relu", "relu", "X", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_serialize(m, bytes, len);
  otm_free(m);
}

/* A session over `model` with the providers in `names` (comma-separated,
 * by name) and no implicit CPU unless "cpu" is listed. */
static OnyxSession* open_session(void (*model)(uint8_t**, size_t*), const char* names) {
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  char list[256];
  snprintf(list, sizeof list, "%s", names);
  for (char *save = NULL, *n = strtok_r(list, ",", &save); n; n = strtok_r(NULL, ",", &save))
    ok(onyx_session_options_add_provider(o, n, NULL, 0, 1));
  ok(onyx_session_options_set_no_implicit_cpu(o, 1));
  uint8_t* bytes = NULL;
  size_t len = 0;
  model(&bytes, &len);
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  free(bytes);
  onyx_session_options_release(o);
  return s;
}

/* Runs X = g_x and returns Y's 6 values. */
static void run6(OnyxSession* s, float* y) {
  OnyxValue* x = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){2, 3}, 2, g_x, sizeof g_x, &x));
  OnyxValue* out = NULL;
  ok(onyx_session_run(s, NULL, (const char*[]){"X"}, (const OnyxValue* const*)&x, 1,
                      (const char*[]){"Y"}, 1, &out));
  const OnyxTensor* t = onyx_value_tensor(out);
  assert_int_equal(onyx_tensor_elem_count(t), 6);
  memcpy(y, onyx_tensor_data(t), 6 * sizeof *y);
  onyx_value_release(out);
  onyx_value_release(x);
}

static void expect_relu(OnyxSession* s) {
  float y[6];
  run6(s, y);
  const float want[6] = {0, 0, 0, 1, 2, 3};
  for (int i = 0; i < 6; i++)
    assert_float_equal(y[i], want[i], 0);
}

/* --- Tests -------------------------------------------------------------------------------- */

static void test_two_sessions_share_one_library(void** state) {
  (void)state;
  char path[2 * PATH_MAX];
  life_path(path, sizeof path, "life");
  OnyxSession* a = open_session(relu_model, "life");
  OnyxSession* b = open_session(relu_model, "life");
  /* One load, one init, one registry; an EP per session. */
  assert_ptr_equal(a->prog.eps[0].lib, b->prog.eps[0].lib);
  assert_int_equal(a->prog.eps[0].lib->refs, 2);
  assert_ptr_not_equal(a->prog.eps[0].ep, b->prog.eps[0].ep);
  assert_string_equal(life_log(), "life:init;life:ep;life:ep;");
  expect_relu(a);
  expect_relu(b);
  onyx_session_release(a);
  /* The other session still uses it: only a's EP went. */
  assert_string_equal(life_log(), "life:init;life:ep;life:ep;life:ep_release;");
  assert_true(is_loaded(path));
  assert_int_equal(b->prog.eps[0].lib->refs, 1);
  expect_relu(b); /* kernels of a shared library outlive the sibling session */
  onyx_session_release(b);
  /* Every EP released, then the provider, then the library closed. */
  assert_string_equal(life_log(),
                      "life:init;life:ep;life:ep;life:ep_release;life:ep_release;life:release;");
  assert_false(is_loaded(path));
}

static void test_reopen_after_unload(void** state) {
  (void)state;
  char path[2 * PATH_MAX];
  life_path(path, sizeof path, "life");
  for (int i = 0; i < 3; i++) {
    OnyxSession* s = open_session(relu_model, "life");
    expect_relu(s);
    onyx_session_release(s);
    assert_false(is_loaded(path));
  }
  assert_string_equal(life_log(), "life:init;life:ep;life:ep_release;life:release;"
                                  "life:init;life:ep;life:ep_release;life:release;"
                                  "life:init;life:ep;life:ep_release;life:release;");
}

static void test_same_provider_twice_is_harmless(void** state) {
  (void)state;
  char path[2 * PATH_MAX];
  life_path(path, sizeof path, "life");
  /* By name, by name again, and by explicit path: one library, one init. */
  OxProviderLib *x = NULL, *y = NULL, *z = NULL;
  ok(ox_provider_lib_acquire(ox_host_api(), "life", NULL, &x));
  ok(ox_provider_lib_acquire(ox_host_api(), "life", NULL, &y));
  ok(ox_provider_lib_acquire(ox_host_api(), "life", path, &z));
  assert_ptr_equal(x, y);
  assert_ptr_equal(x, z);
  assert_int_equal(x->refs, 3);
  /* A session naming it through a config with "library" joins the same load. */
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  char cfg[4 * PATH_MAX];
  snprintf(cfg, sizeof cfg,
           "{\"providers\": [{\"name\": \"life\", \"library\": \"%s\"}], "
           "\"implicit_cpu\": false}",
           path);
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "inline"));
  uint8_t* bytes = NULL;
  size_t len = 0;
  relu_model(&bytes, &len);
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  assert_ptr_equal(s->prog.eps[0].lib, x);
  assert_int_equal(x->refs, 4);
  expect_relu(s);
  onyx_session_release(s);
  assert_string_equal(life_log(), "life:init;life:ep;life:ep_release;");

  /* Listing it twice in one session is refused up front, naming it; nothing
   * more is loaded or created. */
  OnyxStatus* st = onyx_session_options_add_provider(o, "life", NULL, 0, 1);
  assert_non_null(st);
  assert_non_null(strstr(onyx_status_message(st), "'life' is already added"));
  onyx_status_release(st);
  const char* twice = "{\"providers\": [{\"name\": \"life\"}, {\"name\": \"life\"}]}";
  st = onyx_session_options_load_config_text(o, twice, strlen(twice), "inline");
  assert_non_null(st);
  assert_int_equal(onyx_status_code(st), ONYX_INVALID_CONFIG);
  assert_non_null(strstr(onyx_status_message(st), "provider 'life' is listed twice"));
  onyx_status_release(st);
  assert_int_equal(x->refs, 3);
  onyx_session_options_release(o);
  free(bytes);

  ox_provider_lib_release(z);
  ox_provider_lib_release(y);
  assert_true(is_loaded(path));
  ox_provider_lib_release(x);
  assert_false(is_loaded(path));
  assert_string_equal(life_log(), "life:init;life:ep;life:ep_release;life:release;");
}

static void test_provider_learns_its_library_path(void** state) {
  (void)state;
  char path[2 * PATH_MAX];
  life_path(path, sizeof path, "life2");
  unsetenv("ONYX_TEST_LIFE_PATH_life2");
  OxProviderLib* lib = NULL;
  ok(ox_provider_lib_acquire(ox_host_api(), "life2", NULL, &lib));
  const char* seen = getenv("ONYX_TEST_LIFE_PATH_life2");
  assert_non_null(seen);
  char real[PATH_MAX];
  assert_non_null(realpath(seen, real)); /* the file the provider was loaded from */
  assert_string_equal(real, path);
  assert_string_equal(lib->path, path);
  ox_provider_lib_release(lib);
}

static void test_several_libraries_in_one_session(void** state) {
  (void)state;
  char life[2 * PATH_MAX], life2[2 * PATH_MAX];
  life_path(life, sizeof life, "life");
  life_path(life2, sizeof life2, "life2");
  OnyxSession* s = open_session(chain_model, "life,life2,fake,cpu");
  /* Each provider runs the node only it (first) has a kernel for. */
  assert_int_equal(onyx_session_provider_count(s), 4);
  const char* names[] = {"life", "life2", "fake", "cpu"};
  for (size_t i = 0; i < 4; i++) {
    assert_string_equal(onyx_session_provider_name(s, i), names[i]);
    assert_int_equal(onyx_session_provider_node_count(s, i), 1);
  }
  /* Four libraries, all distinct. */
  for (size_t i = 0; i < 4; i++)
    for (size_t j = i + 1; j < 4; j++)
      assert_ptr_not_equal(s->prog.eps[i].lib, s->prog.eps[j].lib);
  float y[6];
  run6(s, y);
  const float a[6] = {-2, -1, 0, 0, 0, 0};
  for (int i = 0; i < 6; i++) {
    double want = 1.0 / (1.0 + exp(-(double)a[i]));
    assert_float_equal(y[i], want, 1e-6);
  }
  assert_true(is_loaded(life) && is_loaded(life2));
  onyx_session_release(s);
  assert_false(is_loaded(life));
  assert_false(is_loaded(life2));
  /* Each EP went before its own provider, each provider exactly once. */
  assert_string_equal(life_log(), "life:init;life:ep;life2:init;life2:ep;"
                                  "life:ep_release;life2:ep_release;life:release;life2:release;");
}

/* Sessions created, run and released on several threads at once share the
 * one load; nothing is left loaded afterwards. */
#define THREADS 4
#define ROUNDS  6
/* 1 once host/session/session_create.c calls the provider's device_count and
 * create_ep through ox_provider_lib_device_count / ox_provider_lib_create_ep
 * (the lead's change; see the sdk report). */
#ifndef SESSIONS_SERIALIZE_PROVIDER_CALLS
#define SESSIONS_SERIALIZE_PROVIDER_CALLS 1
#endif
static void* session_worker(void* arg) {
  int* failures = arg;
  for (int i = 0; i < ROUNDS; i++) {
    OnyxSessionOptions* o = NULL;
    OnyxStatus* st = onyx_session_options_create(&o);
    if (!st) st = onyx_session_options_add_provider(o, "life", NULL, 0, 1);
    if (!st) st = onyx_session_options_set_no_implicit_cpu(o, 1);
    uint8_t* bytes = NULL;
    size_t len = 0;
    relu_model(&bytes, &len);
    OnyxSession* s = NULL;
    if (!st) st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
    free(bytes);
    onyx_session_options_release(o);
    OnyxValue *x = NULL, *out = NULL;
    if (!st)
      st = onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){2, 3}, 2, g_x, sizeof g_x, &x);
    if (!st)
      st = onyx_session_run(s, NULL, (const char*[]){"X"}, (const OnyxValue* const*)&x, 1,
                            (const char*[]){"Y"}, 1, &out);
    if (!st) {
      const float* y = onyx_tensor_data(onyx_value_tensor(out));
      if (y[0] != 0 || y[3] != 1 || y[5] != 3) (*failures)++;
    }
    if (st) (*failures)++;
    onyx_status_release(st);
    onyx_value_release(out);
    onyx_value_release(x);
    onyx_session_release(s);
  }
  return NULL;
}

static void test_concurrent_sessions_share_one_load(void** state) {
  (void)state;
  char path[2 * PATH_MAX];
  life_path(path, sizeof path, "life");
  /* Held here so init and release (which log) run on this thread only. */
  OxProviderLib* hold = NULL;
  ok(ox_provider_lib_acquire(ox_host_api(), "life", NULL, &hold));
  setenv("ONYX_TEST_LIFE_QUIET", "1", 1);
  /* Session creation must enter the provider's table one thread at a time
   * (create_ep through ox_provider_lib_create_ep): strict mode makes an
   * overlapping create_ep fail the session. */
  if (SESSIONS_SERIALIZE_PROVIDER_CALLS) setenv("ONYX_TEST_LIFE_STRICT", "1", 1);
  pthread_t t[THREADS];
  int failures[THREADS] = {0};
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, session_worker, &failures[i]), 0);
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(failures[i], 0);
  }
  unsetenv("ONYX_TEST_LIFE_QUIET");
  unsetenv("ONYX_TEST_LIFE_STRICT");
  assert_int_equal(hold->refs, 1);
  ox_provider_lib_release(hold);
  assert_false(is_loaded(path));
  assert_string_equal(life_log(), "life:init;life:release;");
}

/* The provider's slots are entered one thread at a time even when sessions
 * on several threads share the library (the provider, in strict mode,
 * refuses an overlapping create_ep). */
static void* create_ep_worker(void* arg) {
  OxProviderLib* lib = ((void**)arg)[0];
  int* failures = ((void**)arg)[1];
  for (int i = 0; i < ROUNDS; i++) {
    OnyxEpCreateArgs args = {.struct_size = sizeof args};
    OnyxEp* ep = NULL;
    OnyxStatus* st = ox_provider_lib_create_ep(lib, &args, &ep);
    if (st) {
      (*failures)++;
      fprintf(stderr, "%s\n", onyx_status_message(st));
      onyx_status_release(st);
    } else {
      ep->release(ep);
    }
  }
  return NULL;
}

static void test_provider_slots_are_serialized(void** state) {
  (void)state;
  OxProviderLib* lib = NULL;
  ok(ox_provider_lib_acquire(ox_host_api(), "life", NULL, &lib));
  size_t count = 0;
  ok(ox_provider_lib_device_count(lib, &count));
  assert_int_equal(count, 1);
  setenv("ONYX_TEST_LIFE_QUIET", "1", 1);
  setenv("ONYX_TEST_LIFE_STRICT", "1", 1);
  pthread_t t[THREADS];
  int failures[THREADS] = {0};
  void* args[THREADS][2];
  for (int i = 0; i < THREADS; i++) {
    args[i][0] = lib;
    args[i][1] = &failures[i];
    assert_int_equal(pthread_create(&t[i], NULL, create_ep_worker, args[i]), 0);
  }
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  unsetenv("ONYX_TEST_LIFE_STRICT");
  unsetenv("ONYX_TEST_LIFE_QUIET");
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(failures[i], 0);
  ox_provider_lib_release(lib);
}

/* The install's provider folder is found relative to the loader's own
 * folder (<dir>/onyx/providers), before the folder itself: a relocated
 * prefix finds its providers. This program lives in its own folder holding
 * "relorder" both in onyx/providers/ (version "rel") and beside it ("self"). */
static void test_install_folder_relative_to_libonyx(void** state) {
  (void)state;
  char folder[PATH_MAX], want[2 * PATH_MAX];
  snprintf(folder, sizeof folder, "%s/onyx/providers", ox_self_dir());
  snprintf(want, sizeof want, "%s/libonyx_ep_relorder.so", folder);
  const char* envs[] = {"/nonexistent/onyx", NULL};
  for (size_t i = 0; i < 2; i++) {
    if (envs[i])
      setenv("ONYX_PROVIDER_PATH", envs[i], 1);
    else
      unsetenv("ONYX_PROVIDER_PATH");
    OxProviderLib* lib = NULL;
    assert_null(ox_provider_lib_acquire(ox_host_api(), "relorder", NULL, &lib));
    assert_string_equal(lib->provider->version, "rel"); /* not "self", beside it */
    assert_string_equal(lib->path, want);
    ox_provider_lib_release(lib);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_two_sessions_share_one_library, reset),
      cmocka_unit_test_setup(test_reopen_after_unload, reset),
      cmocka_unit_test_setup(test_same_provider_twice_is_harmless, reset),
      cmocka_unit_test_setup(test_provider_learns_its_library_path, reset),
      cmocka_unit_test_setup(test_several_libraries_in_one_session, reset),
      cmocka_unit_test_setup(test_concurrent_sessions_share_one_load, reset),
      cmocka_unit_test_setup(test_provider_slots_are_serialized, reset),
      cmocka_unit_test_setup(test_install_folder_relative_to_libonyx, reset),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
