/* test_nvtx.c — the NVTX ranges of sessions and runs (host/exec/ox_nvtx.h),
 * seen by a real NVTX tool: nvtx_inject.c, loaded by NVTX itself through
 * NVTX_INJECTION64_PATH (set in main before Onyx makes any NVTX call).
 *
 * The expected names are written out from the documented format
 * (docs/debugging.md, "NVTX ranges") and the plan each model must get: a
 * kernel is "<node> (<op>) [<provider>]", a copy "copy <value> <src>→<dst>",
 * a fused group "<group> [<provider>]". Skipped (77) when the build has no
 * NVTX headers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "nvtx_inject.h"
#include "onyx/onyx.h"
#include "ox_test_models.h"

#define MAX_EVENTS 4096
#define ARROW      "\xe2\x86\x92"

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static long my_tid(void) {
  return (long)syscall(SYS_gettid);
}

/* --- the tool's record -------------------------------------------------------------------- */
/* The tool's path: the one built here, or ONYX_TEST_NVTX_INJECT (a build
 * tree copied elsewhere, e.g. to a GPU machine). */
static const char* tool_path(void) {
  const char* p = getenv("ONYX_TEST_NVTX_INJECT");
  return p && *p ? p : NVTX_INJECT_PATH;
}

static void* tool(void) {
  return dlopen(tool_path(), RTLD_NOW | RTLD_NOLOAD);
}

/* The tool's events (NULL-free: an empty array when nothing was recorded). */
static NvtxInjectEvent* events(size_t* n, size_t* inits) {
  static NvtxInjectEvent ev[MAX_EVENTS];
  void* h = tool();
  assert_non_null(h);
  NvtxInjectEventsFn fn = (NvtxInjectEventsFn)dlsym(h, "nvtx_inject_events");
  assert_non_null(fn);
  *n = fn(ev, MAX_EVENTS, inits);
  assert_true(*n <= MAX_EVENTS);
  dlclose(h);
  return ev;
}

static void clear_events(void) {
  void* h = tool();
  if (!h) return;
  NvtxInjectClearFn fn = (NvtxInjectClearFn)dlsym(h, "nvtx_inject_clear");
  assert_non_null(fn);
  fn();
  dlclose(h);
}

/* The ranges of thread `tid` in the domain "onyx" as a text: "+name" per
 * push, "-" per pop, one per line. */
static char* trace_of(long tid) {
  size_t n, inits;
  NvtxInjectEvent* ev = events(&n, &inits);
  size_t cap = 1 + n * (sizeof ev->message + 2);
  char* t = calloc(1, cap);
  assert_non_null(t);
  size_t used = 0;
  for (size_t i = 0; i < n; i++) {
    if (ev[i].tid != tid || ev[i].kind == NVTX_INJECT_DOMAIN) continue;
    assert_string_equal(ev[i].domain, "onyx");
    used +=
        (size_t)snprintf(t + used, cap - used, "%s%s\n", ev[i].kind == NVTX_INJECT_PUSH ? "+" : "-",
                         ev[i].kind == NVTX_INJECT_PUSH ? ev[i].message : "");
  }
  return t;
}

static void expect_trace(long tid, const char* want) {
  char* got = trace_of(tid);
  if (strcmp(got, want)) fail_msg("NVTX ranges:\n%s\nexpected:\n%s", got, want);
  free(got);
}

/* --- the model: y = Relu(MatMul(x, W)), x float[2,3], W float[3,2] -------------------- */
static uint8_t* model_bytes(size_t* len) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 2}, (float[]){1, -1, 2, 0, -1, 1});
  otm_node(m, "MatMul", "matmul", "x,W", "m");
  otm_node(m, "Relu", "relu", "m", "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2});
  uint8_t* bytes;
  otm_serialize(m, &bytes, len);
  otm_free(m);
  return bytes;
}

/* A session over the model with the options of `config` (NULL: defaults)
 * and the switch set in code when set_nvtx >= 0. */
static OnyxStatus* try_session(const char* config, int set_nvtx, OnyxSession** out) {
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  if (config) ok(onyx_session_options_load_config_text(o, config, strlen(config), "test"));
  if (set_nvtx >= 0) ok(onyx_session_options_set_nvtx(o, set_nvtx));
  size_t len;
  uint8_t* bytes = model_bytes(&len);
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, out);
  free(bytes);
  onyx_session_options_release(o);
  return st;
}

static OnyxSession* session(const char* config, int set_nvtx) {
  OnyxSession* s = NULL;
  ok(try_session(config, set_nvtx, &s));
  return s;
}

/* One run; y is checked against MatMul and Relu computed here. */
static void run(OnyxSession* s, const char* tag) {
  static const float x[6] = {1, 2, 3, -4, 5, 6}, w[6] = {1, -1, 2, 0, -1, 1};
  OnyxRunOptions* r = NULL;
  if (tag) {
    ok(onyx_run_options_create(&r));
    ok(onyx_run_options_set_tag(r, tag));
  }
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){2, 3}, 2, x, sizeof x, &in));
  const char* in_name = "x";
  const char* out_name = "y";
  OnyxValue* y = NULL;
  ok(onyx_session_run(s, r, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &y));
  const float* got = onyx_tensor_data(onyx_value_tensor(y));
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      float acc = 0;
      for (int k = 0; k < 3; k++)
        acc += x[i * 3 + k] * w[k * 2 + j];
      assert_float_equal(got[i * 2 + j], acc > 0 ? acc : 0, 1e-6);
    }
  onyx_value_release(y);
  onyx_value_release(in);
  onyx_run_options_release(r);
}

#define CREATE_RANGES                                                                              \
  "+session create <memory>\n"                                                                     \
  "+load\n-\n+optimize\n-\n+partition\n-\n+fuse\n-\n+plan\n-\n"                                    \
  "-\n"
#define CPU_RUN(name) "+" name "\n+matmul (MatMul) [cpu]\n-\n+relu (Relu) [cpu]\n-\n-\n"

/* --- switch off: no NVTX call at all ---------------------------------------------------- */
static void test_off_makes_no_nvtx_call(void** state) {
  (void)state;
  OnyxSession* s = session(NULL, -1);
  run(s, NULL);
  run(s, "t");
  onyx_session_release(s);
  s = session("{\"session\": {\"nvtx\": false}}", -1);
  run(s, NULL);
  onyx_session_release(s);
  /* NVTX loads the tool at its first call: it was never made. */
  void* h = tool();
  if (h) dlclose(h);
  assert_null(h);
}

/* --- the config key: session creation, its phases, runs and nodes ------------------------ */
static void test_config_switch(void** state) {
  (void)state;
  clear_events();
  OnyxSession* s = session("{\"session\": {\"nvtx\": true}}", -1);
  run(s, NULL);
  run(s, "req-7");
  onyx_session_release(s);
  expect_trace(my_tid(), CREATE_RANGES CPU_RUN("run") CPU_RUN("run req-7"));
  size_t n, inits;
  NvtxInjectEvent* ev = events(&n, &inits);
  assert_int_equal(inits, 1);
  /* The domain was created once, named "onyx"; nodes are in category 3. */
  size_t domains = 0;
  for (size_t i = 0; i < n; i++) {
    if (ev[i].kind == NVTX_INJECT_DOMAIN) domains++;
    if (ev[i].kind == NVTX_INJECT_PUSH && strstr(ev[i].message, "[cpu]")) {
      assert_int_equal(ev[i].category, 3);
      assert_int_not_equal(ev[i].color, 0);
    }
  }
  assert_int_equal(domains, 1); /* the first NVTX call was this test's */
}

/* --- ONYX_NVTX=1, and the setter --------------------------------------------------------- */
static void test_env_and_setter(void** state) {
  (void)state;
  clear_events();
  setenv("ONYX_NVTX", "1", 1);
  OnyxSession* s = session(NULL, -1);
  unsetenv("ONYX_NVTX");
  run(s, NULL);
  onyx_session_release(s);
  s = session(NULL, 1);
  run(s, NULL);
  onyx_session_release(s);
  expect_trace(my_tid(), CREATE_RANGES CPU_RUN("run") CREATE_RANGES CPU_RUN("run"));
}

/* --- switch off once NVTX is initialized: nothing recorded -------------------------------- */
static void test_off_records_nothing(void** state) {
  (void)state;
  clear_events();
  OnyxSession* s = session(NULL, 0);
  run(s, NULL);
  onyx_session_release(s);
  s = session("{\"session\": {\"nvtx\": false}}", -1);
  run(s, "t");
  onyx_session_release(s);
  size_t n, inits;
  events(&n, &inits);
  assert_int_equal(n, 0);
  assert_int_equal(inits, 1);
}

/* --- a phase that fails: the ranges it left open are closed -------------------------------- */
static void test_failed_creation_unwinds(void** state) {
  (void)state;
  clear_events();
  /* The pins are checked in the optimize phase: "ghost" names no node. */
  OnyxSession* s = NULL;
  OnyxStatus* st = try_session("{\"session\": {\"nvtx\": true}, \"placement\": "
                               "[{\"node\": \"ghost\", \"provider\": \"cpu\"}]}",
                               -1, &s);
  assert_non_null(st);
  assert_int_equal(onyx_status_code(st), ONYX_INVALID_CONFIG);
  onyx_status_release(st);
  assert_null(s);
  expect_trace(my_tid(), "+session create <memory>\n+load\n-\n+optimize\n-\n-\n");
  /* The thread's ranges are balanced again: a later session nests from the top. */
  clear_events();
  s = session("{\"session\": {\"nvtx\": true}}", -1);
  run(s, NULL);
  onyx_session_release(s);
  expect_trace(my_tid(), CREATE_RANGES CPU_RUN("run"));
}

/* --- runs on several threads: each thread's ranges nest by themselves --------------------- */
#define N_THREADS 4
#define N_RUNS    5

typedef struct Worker {
  OnyxSession* s;
  long tid;
} Worker;

static void* worker(void* arg) {
  Worker* w = arg;
  w->tid = my_tid();
  for (int i = 0; i < N_RUNS; i++)
    run(w->s, NULL);
  return NULL;
}

static void test_threads(void** state) {
  (void)state;
  OnyxSession* s = session("{\"session\": {\"nvtx\": true, \"threads\": 2}}", -1);
  clear_events();
  Worker w[N_THREADS];
  pthread_t t[N_THREADS];
  for (int i = 0; i < N_THREADS; i++) {
    w[i] = (Worker){.s = s};
    assert_int_equal(pthread_create(&t[i], NULL, worker, &w[i]), 0);
  }
  for (int i = 0; i < N_THREADS; i++)
    assert_int_equal(pthread_join(t[i], NULL), 0);
  onyx_session_release(s);
  char want[1024] = "";
  for (int i = 0; i < N_RUNS; i++)
    strcat(want, CPU_RUN("run"));
  for (int i = 0; i < N_THREADS; i++)
    expect_trace(w[i].tid, want);
  /* Nothing on any other thread (the pool's workers push no range). */
  size_t n, inits;
  NvtxInjectEvent* ev = events(&n, &inits);
  assert_int_equal(n, (size_t)N_THREADS * N_RUNS * 6);
  for (size_t i = 0; i < n; i++) {
    bool known = false;
    for (int k = 0; k < N_THREADS; k++)
      known = known || ev[i].tid == w[k].tid;
    assert_true(known);
  }
}

/* --- copies and fused groups, with the fake provider ---------------------------------------- */
static void test_copies_and_groups(void** state) {
  (void)state;
  /* The fake device takes Relu (its default ops are Add, Mul, Relu), the CPU
   * MatMul: m is copied from the CPU to the fake device, and the graph
   * output y from the fake device back to host memory. */
  clear_events();
  OnyxSession* s =
      session("{\"providers\": [{\"name\": \"fake\"}], \"session\": {\"nvtx\": true}}", -1);
  clear_events();
  run(s, NULL);
  onyx_session_release(s);
  expect_trace(my_tid(), "+run\n"
                         "+matmul (MatMul) [cpu]\n-\n"
                         "+copy m cpu" ARROW "fake\n-\n"
                         "+relu (Relu) [fake]\n-\n"
                         "+copy y fake" ARROW "host\n-\n"
                         "-\n");
  /* With "fuse": "Relu" the fake device claims Relu as its group 0. */
  s = session("{\"providers\": [{\"name\": \"fake\", \"options\": {\"fuse\": \"Relu\"}}], "
              "\"session\": {\"nvtx\": true}}",
              -1);
  clear_events();
  run(s, NULL);
  onyx_session_release(s);
  expect_trace(my_tid(), "+run\n"
                         "+matmul (MatMul) [cpu]\n-\n"
                         "+copy m cpu" ARROW "fake\n-\n"
                         "+fake_group_0 [fake]\n-\n"
                         "+copy y fake" ARROW "host\n-\n"
                         "-\n");
}

/* --- a GPU provider: the test-only emulated GPU here, CUDA where it has a device ------------- */
/* The provider takes both nodes: x is copied from host memory to the device,
 * y back. Returns false (and says why) when the provider is not usable here. */
static bool gpu_ranges(const char* provider) {
  char config[256];
  snprintf(config, sizeof config,
           "{\"providers\": [{\"name\": \"%s\"}], \"session\": {\"nvtx\": true}}", provider);
  clear_events();
  OnyxSession* s = NULL;
  OnyxStatus* st = try_session(config, -1, &s);
  if (st) {
    if (onyx_status_code(st) != ONYX_NO_DEVICE && onyx_status_code(st) != ONYX_NOT_FOUND)
      fail_msg("%s: %s", provider, onyx_status_message(st));
    fprintf(stderr, "test_nvtx: %s not usable here: %s\n", provider, onyx_status_message(st));
    onyx_status_release(st);
    return false;
  }
  clear_events();
  run(s, NULL);
  onyx_session_release(s);
  char want[512];
  snprintf(want, sizeof want,
           "+run\n+copy x host" ARROW "%s\n-\n+matmul (MatMul) [%s]\n-\n+relu (Relu) [%s]\n-\n"
           "+copy y %s" ARROW "host\n-\n-\n",
           provider, provider, provider, provider);
  expect_trace(my_tid(), want);
  return true;
}

static void test_gpu_emulated(void** state) {
  (void)state;
  if (!gpu_ranges("gpuemu")) skip();
}

static void test_gpu_cuda(void** state) {
  (void)state;
  if (getenv("ONYX_UNDER_VALGRIND")) skip(); /* the vendor runtime, as for test_gpu_cuda */
  /* The provider stays mapped for the whole process, as in test_gpu_cuda:
   * the host unloads it with its last session, and the CUDA runtime's
   * one-time allocations would then be reported by LSan against an unknown
   * module. */
  const char* dir = getenv("ONYX_PROVIDER_PATH");
  char path[4096];
  snprintf(path, sizeof path, "%s/libonyx_ep_cuda.so", dir ? dir : ".");
  if (!dlopen(path, RTLD_NOW | RTLD_LOCAL)) skip(); /* no CUDA provider in this build */
  if (!gpu_ranges("cuda")) skip();
}

/* --- a build without NVTX ------------------------------------------------------------------ */
static void count_stub_warning(void* user, OnyxLogSeverity severity, const char* message) {
  if (severity == ONYX_LOG_WARNING && strstr(message, "no NVTX support")) ++*(int*)user;
}

/* The switch on in a build with the stubs: one warning, and the session works. */
static int check_stub_build(void) {
  int warnings = 0;
  OnyxSessionOptions* o = NULL;
  OnyxStatus* st = onyx_session_options_create(&o);
  if (!st) st = onyx_session_options_set_nvtx(o, 1);
  if (!st) st = onyx_session_options_set_log_callback(o, count_stub_warning, &warnings);
  size_t len;
  uint8_t* bytes = model_bytes(&len);
  OnyxSession* s = NULL;
  if (!st) st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  free(bytes);
  onyx_session_options_release(o);
  onyx_session_release(s);
  if (st || warnings != 1) {
    fprintf(stderr, "test_nvtx: a build without NVTX: %s; %d warnings (expected 1)\n",
            st ? onyx_status_message(st) : "session created", warnings);
    onyx_status_release(st);
    return 1;
  }
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_off_makes_no_nvtx_call),
      cmocka_unit_test(test_config_switch),
      cmocka_unit_test(test_env_and_setter),
      cmocka_unit_test(test_off_records_nothing),
      cmocka_unit_test(test_failed_creation_unwinds),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_copies_and_groups),
      cmocka_unit_test(test_gpu_emulated),
      cmocka_unit_test(test_gpu_cuda),
  };
  if (!ONYX_TEST_HAVE_NVTX) {
    if (check_stub_build()) return 1;
    fprintf(stderr, "test_nvtx: skipped: this build has no NVTX ranges (nvtx3/nvToolsExt.h was "
                    "not found at configure time, or ONYX_WITH_NVTX is OFF)\n");
    return 77;
  }
  /* Before Onyx's first NVTX call, which reads it. */
  setenv("NVTX_INJECTION64_PATH", tool_path(), 1);
  unsetenv("ONYX_NVTX");
  return cmocka_run_group_tests(tests, NULL, NULL);
}
