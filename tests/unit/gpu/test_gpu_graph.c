/* test_gpu_graph.c — a GPU provider's enable_cuda_graph option (GPU_NAME:
 * "cuda", "rocm" or the test-only "gpuemu"; one executable each, like
 * test_gpu.c).
 *
 * Without a device: the option takes 0 / 1 (false / true) and required, and
 * rejects anything else with a message naming the option and its values;
 * the unknown-option error lists it.
 *
 * With a device: a small static model (MatMul, Add, Relu,
 * LayerNormalization: [16, 64] x [64, 64]) runs 10 times with its input and
 * output bound in device memory, new input data each run, on a session with
 * the option and on a plain session with host inputs and outputs; both
 * against a double-precision reference computed here, and against each
 * other. On a GPU (cuda, rocm) the second run is captured and the eight
 * after it are replays (counted in the session's log). gpuemu's kernels run
 * when launched, so it cannot capture: the capture fails once, with a
 * warning, every run still gives the plain session's results, and with
 * "required" the run that would capture fails. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ox_host_api.h"
#include "onyx/onyx.h"
#include "ox_options.h"
#include "ox_providers.h"
#include "ox_session.h"
#include "ox_test_models.h"

#if !defined(GPU_NAME) || !defined(GPU_LABEL)
#error "GPU_NAME and GPU_LABEL come from tests/unit/gpu/CMakeLists.txt"
#endif

#define ROWS 16
#define COLS 64
#define RUNS 10

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static void expect(OnyxStatus* st, OnyxStatusCode code, const char* frag1, const char* frag2) {
  if (!st) fail_msg("expected an error containing '%s'", frag1);
  if (st->code != code || !strstr(st->message, frag1) || (frag2 && !strstr(st->message, frag2)))
    fprintf(stderr, "message (code %d): %s\n", (int)st->code, st->message);
  assert_int_equal(st->code, code);
  assert_non_null(strstr(st->message, frag1));
  if (frag2) assert_non_null(strstr(st->message, frag2));
  ox_status_free(st);
}

static OxProviderLib* acquire(void) {
  OxProviderLib* lib = NULL;
  OnyxStatus* st = ox_provider_lib_acquire(ox_host_api(), GPU_NAME, NULL, &lib);
  if (st) fail_msg("loading %s: %s", GPU_NAME, st->message);
  return lib;
}

static bool have_device(void) {
  OxProviderLib* lib = acquire();
  size_t n = 0;
  OnyxStatus* why = lib->provider->device_count(lib->provider, &n);
  ox_status_free(why);
  ox_provider_lib_release(lib);
  return n > 0;
}

/* create_ep with one option on device 0. */
static OnyxStatus* create_with(const char* key, const char* value) {
  OxProviderLib* lib = acquire();
  OnyxOptions opts = {0};
  ok(ox_options_set(&opts, key, value));
  OnyxEpCreateArgs args = {.struct_size = sizeof args, .device_index = 0, .options = &opts};
  OnyxEp* ep = NULL;
  OnyxStatus* st = lib->provider->create_ep(lib->provider, &args, &ep);
  if (!st) {
    assert_non_null(ep);
    ep->release(ep);
  } else {
    assert_null(ep);
  }
  ox_options_clear(&opts);
  ox_provider_lib_release(lib);
  return st;
}

/* --- the option, without a device -------------------------------------------------------- */

static void test_graph_bad_values(void** state) {
  (void)state;
  static const char* const bad[] = {"2", "yes", "on", "-1", "TRUE", "Required", " 1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char want[96];
    snprintf(want, sizeof want, "option 'enable_cuda_graph' has value '%s'", bad[i]);
    expect(create_with("enable_cuda_graph", bad[i]), ONYX_INVALID_CONFIG, want,
           "expected 0 (off, the default), 1 (capture a run as a graph and replay it) or "
           "required");
  }
}

static void test_unknown_option_lists_graph(void** state) {
  (void)state;
  expect(create_with("enable_cuda_graphs", "1"), ONYX_INVALID_CONFIG,
         GPU_NAME ": unknown option 'enable_cuda_graphs' (known: ", "use_tf32, enable_cuda_graph");
}

static void test_graph_valid_values(void** state) {
  (void)state;
  static const char* const good[] = {"0", "1", "true", "false", "required"};
  bool dev = have_device();
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    OnyxStatus* st = create_with("enable_cuda_graph", good[i]);
    if (dev)
      ok(st);
    else
      expect(st, ONYX_NO_DEVICE, "no " GPU_LABEL " device", NULL);
  }
}

/* --- a static model, with a device ------------------------------------------------------- */

typedef struct Log {
  char text[1 << 17];
} Log;

static void on_log(void* user, OnyxLogSeverity sev, const char* msg) {
  Log* l = user;
  size_t used = strlen(l->text);
  if (used + 1 < sizeof l->text)
    snprintf(l->text + used, sizeof l->text - used, "[%d] %s\n", (int)sev, msg);
}

static int count(const char* text, const char* what) {
  int n = 0;
  for (const char* p = strstr(text, what); p; p = strstr(p + 1, what))
    n++;
  return n;
}

static float W[COLS * COLS], BIAS[COLS], SCALE[COLS], SHIFT[COLS];

static void fill_weights(void) {
  for (int i = 0; i < COLS * COLS; i++)
    W[i] = (float)((i * 37 % 23) - 11) / 64.0f;
  for (int j = 0; j < COLS; j++) {
    BIAS[j] = (float)(j % 7 - 3) / 8.0f;
    SCALE[j] = 0.5f + (float)(j % 5) / 4.0f;
    SHIFT[j] = (float)(j % 3 - 1) / 4.0f;
  }
}

static void input_of(int r, float* x) {
  for (int i = 0; i < ROWS * COLS; i++)
    x[i] = (float)((i * 13 + r * 29) % 31 - 15) / 16.0f;
}

/* Y = LayerNorm(Relu(X W + B)) over the last axis, in double. */
static void reference(const float* x, double* y) {
  for (int r = 0; r < ROWS; r++) {
    double h[COLS], mean = 0, var = 0;
    for (int j = 0; j < COLS; j++) {
      double acc = BIAS[j];
      for (int k = 0; k < COLS; k++)
        acc += (double)x[r * COLS + k] * W[k * COLS + j];
      h[j] = acc > 0 ? acc : 0;
      mean += h[j];
    }
    mean /= COLS;
    for (int j = 0; j < COLS; j++)
      var += (h[j] - mean) * (h[j] - mean);
    var /= COLS;
    for (int j = 0; j < COLS; j++)
      y[r * COLS + j] = (h[j] - mean) / sqrt(var + 1e-5) * SCALE[j] + SHIFT[j];
  }
}

static OnyxSession* model_session(const char* options, Log* log) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){ROWS, COLS});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 2, (int64_t[]){COLS, COLS}, W);
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 1, (int64_t[]){COLS}, BIAS);
  otm_initializer(m, "S", ONYX_ELEM_FLOAT32, 1, (int64_t[]){COLS}, SCALE);
  otm_initializer(m, "T", ONYX_ELEM_FLOAT32, 1, (int64_t[]){COLS}, SHIFT);
  otm_node(m, "MatMul", "mm", "X,W", "h");
  otm_node(m, "Add", "add", "h,B", "a");
  otm_node(m, "Relu", "relu", "a", "r");
  OxTestNode* ln = otm_node(m, "LayerNormalization", "ln", "r,S,T", "Y");
  otm_attr_int(ln, "axis", -1);
  otm_attr_float(ln, "epsilon", 1e-5f);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){ROWS, COLS});
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  char cfg[512];
  snprintf(cfg, sizeof cfg,
           "{\"providers\": [{\"name\": \"" GPU_NAME "\", \"options\": {%s}}, {\"name\": "
           "\"cpu\"}]}",
           options);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "graph.json"));
  ok(onyx_session_options_set_log_severity(o, ONYX_LOG_VERBOSE));
  ok(onyx_session_options_set_log_callback(o, on_log, log));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  free(bytes);
  ok(st);
  return s;
}

static int32_t gpu_ep_index(OnyxSession* s) {
  for (size_t e = 0; e < s->prog.n_eps; e++)
    if (!strcmp(s->prog.eps[e].name, GPU_NAME)) return (int32_t)e;
  fail_msg("no " GPU_NAME " provider in the session");
  return -1;
}

static void sync_ep(OnyxSession* s, int32_t ep) {
  if (s->prog.eps[ep].stream)
    ok(s->prog.eps[ep].ep->sync_stream(s->prog.eps[ep].ep, s->prog.eps[ep].stream));
}

/* A tensor in any memory of the session, copied to host floats. */
static void read_floats(OnyxSession* s, const OxTensor* t, float* out, size_t n) {
  assert_int_equal(t->count, n);
  OxTensor* h = NULL;
  ok(ox_tensor_new(t->type, t->dims, t->rank, &h));
  int32_t ep = ox_program_ep_for_memory(&s->prog, &t->device);
  ok(ox_copy_tensor(s, t, h, ep, -1));
  if (ep >= 0) sync_ep(s, ep);
  memcpy(out, h->data, n * sizeof *out);
  ox_tensor_free(h);
}

/* The plain session's Y for input x (host input and output). */
static void plain_run(OnyxSession* s, const float* x, float* y) {
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){ROWS, COLS}, 2, x,
                              ROWS * COLS * sizeof(float), &in));
  const char* in_name = "X";
  const char* out_name = "Y";
  OnyxValue* out = NULL;
  ok(onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &out));
  memcpy(y, onyx_tensor_data(onyx_value_tensor(out)), ROWS * COLS * sizeof(float));
  onyx_value_release(in);
  onyx_value_release(out);
}

/* RUNS runs of the graph session (options) with X and Y bound in device
 * memory, each against the plain session and the reference. Returns the
 * first run's error when fail_at is that run (1-based), else fails on any. */
static void graph_runs(const char* options, int fail_at, Log* log) {
  fill_weights();
  Log* plain_log = calloc(1, sizeof *plain_log);
  OnyxSession* plain = model_session("", plain_log);
  OnyxSession* s = model_session(options, log);
  int32_t ep = gpu_ep_index(s);
  OxTensor* dev = NULL;
  ok(ox_session_alloc_tensor(s, ep, ONYX_MEM_DEFAULT, ONYX_ELEM_FLOAT32, (int64_t[]){ROWS, COLS}, 2,
                             &dev));
  OnyxValue dv = {dev};
  OnyxIoBinding* b = NULL;
  ok(onyx_io_binding_create(s, &b));
  ok(onyx_io_binding_bind_input(b, "X", &dv));
  OnyxMemoryDevice m;
  ok(onyx_session_output_memory(s, 0, &m));
  assert_int_equal(m.kind, ONYX_DEVICE_GPU);
  ok(onyx_io_binding_bind_output_to_device(b, "Y", &m));
  float* x = malloc(ROWS * COLS * sizeof *x);
  float* want = malloc(ROWS * COLS * sizeof *want);
  float* got = malloc(ROWS * COLS * sizeof *got);
  double* ref = malloc(ROWS * COLS * sizeof *ref);
  OxTensor* hx = NULL;
  ok(ox_tensor_new(ONYX_ELEM_FLOAT32, (int64_t[]){ROWS, COLS}, 2, &hx));
  double worst_plain = 0, worst_ref = 0;
  for (int r = 1; r <= RUNS; r++) {
    input_of(r, x);
    memcpy(hx->data, x, ROWS * COLS * sizeof *x);
    ok(ox_copy_tensor(s, hx, dev, -1, ep));
    sync_ep(s, ep);
    OnyxStatus* st = onyx_session_run_with_binding(s, NULL, b);
    if (r == fail_at) {
      expect(st, ONYX_RUNTIME_ERROR, "capturing the run as a graph (required)", NULL);
      break;
    }
    ok(st);
    OnyxValue* y = NULL;
    ok(onyx_io_binding_get_outputs(b, &y, 1));
    assert_int_equal(onyx_tensor_memory(onyx_value_tensor(y))->kind, ONYX_DEVICE_GPU);
    read_floats(s, y->tensor, got, ROWS * COLS);
    onyx_value_release(y);
    plain_run(plain, x, want);
    reference(x, ref);
    for (int i = 0; i < ROWS * COLS; i++) {
      double dp = fabs((double)got[i] - want[i]), dr = fabs((double)got[i] - ref[i]);
      worst_plain = dp > worst_plain ? dp : worst_plain;
      worst_ref = dr > worst_ref ? dr : worst_ref;
      if (dp > 1e-5 || dr > 1e-4)
        fail_msg("run %d: Y[%d] = %.7g; the plain session gives %.7g, the reference %.7g", r, i,
                 (double)got[i], (double)want[i], ref[i]);
    }
  }
  if (!fail_at)
    fprintf(stderr,
            "[  INFO    ] " GPU_NAME " enable_cuda_graph: %d runs, %d captured, %d replayed; "
            "largest difference %.3g from the plain session, %.3g from the double reference\n",
            RUNS, count(log->text, "captured the run as a graph"),
            count(log->text, "replayed the run's graph"), worst_plain, worst_ref);
  ox_tensor_free(hx);
  free(x);
  free(want);
  free(got);
  free(ref);
  onyx_io_binding_release(b);
  ox_tensor_free(dev);
  onyx_session_release(s);
  onyx_session_release(plain);
  free(plain_log);
}

static void need_device(void) {
  if (!have_device()) {
    fprintf(stderr, "[  SKIP    ] no " GPU_LABEL " device on this machine: the graph tests "
                    "did not run (they need a GPU)\n");
    skip();
  }
}

static void test_graph_replays_match_plain(void** state) {
  (void)state;
  need_device();
  Log* log = calloc(1, sizeof *log);
  graph_runs("\"enable_cuda_graph\": \"1\"", 0, log);
  int captured = count(log->text, "captured the run as a graph");
  int replayed = count(log->text, "replayed the run's graph");
  int failed = count(log->text, "capturing the run as a graph failed");
#ifdef GPU_IS_EMU
  assert_int_equal(captured, 0);
  assert_int_equal(replayed, 0);
  assert_int_equal(failed, 1);
#else
  if (captured != 1 || replayed != RUNS - 2) fprintf(stderr, "%s", log->text);
  assert_int_equal(failed, 0);
  assert_int_equal(captured, 1);
  assert_int_equal(replayed, RUNS - 2);
#endif
  free(log);
}

#ifdef GPU_IS_EMU
/* Required: the warm-up run works, the run that would capture fails. */
static void test_graph_required_fails_on_emu(void** state) {
  (void)state;
  Log* log = calloc(1, sizeof *log);
  graph_runs("\"enable_cuda_graph\": \"required\"", 2, log);
  free(log);
}
#endif

/* Keeps the provider mapped for the whole process (see test_gpu.c). */
static int keep_mapped(void** state) {
  (void)state;
  const char* dir = getenv("ONYX_PROVIDER_PATH");
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/libonyx_ep_" GPU_NAME ".so", dir ? dir : ".");
  if (!dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
    return -1;
  }
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graph_bad_values),
      cmocka_unit_test(test_unknown_option_lists_graph),
      cmocka_unit_test(test_graph_valid_values),
      cmocka_unit_test(test_graph_replays_match_plain),
#ifdef GPU_IS_EMU
      cmocka_unit_test(test_graph_required_fails_on_emu),
#endif
  };
  return cmocka_run_group_tests_name("gpu_graph_" GPU_NAME, tests, keep_mapped, NULL);
}
