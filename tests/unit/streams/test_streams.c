/* test_streams.c — work on two providers' streams overlaps, and the host
 * orders it with events. The fake provider (tests/providers/fake) runs here
 * in its asynchronous mode as two providers, "fake" and "fake2" (two builds
 * of one source with distinct device memories): each stream is a worker
 * thread, a kernel queues its work (sleep latency_ms, then compute) and
 * returns at once. Through the public API only; counters come back through
 * the fake's "stats_file" option. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "onyx/onyx.h"
#include "ox_test_models.h"

/* The branch latency of the overlap tests, in milliseconds. */
#define LATENCY_MS 200L

static const float X_DATA[6] = {1.0f, -2.0f, 0.5f, -1.0f, 3.0f, 0.25f};

typedef struct Model {
  uint8_t* bytes;
  size_t len;
} Model;

static Model model_finish(OxTestModel* m) {
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  Model out;
  otm_serialize(m, &out.bytes, &out.len);
  otm_free(m);
  return out;
}

static OxTestModel* model_start(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  return m;
}

/* X -> Relu (on fake) -> a; X -> Tanh (on fake2) -> b; Y = Sub(a, b) on the CPU. */
static Model two_branch_model(void) {
  OxTestModel* m = model_start();
  otm_node(m, "Relu", "relu1", "X", "a");
  otm_node(m, "Tanh", "tanh2", "X", "b");
  otm_node(m, "Sub", "join", "a,b", "Y");
  return model_finish(m);
}

static double two_branch_ref(double x) {
  return (x > 0 ? x : 0) - tanh(x);
}

/* X -> Relu (fake) -> Tanh (fake2) -> Y: a value crossing between the two. */
static Model chain_model(void) {
  OxTestModel* m = model_start();
  otm_node(m, "Relu", "relu1", "X", "a");
  otm_node(m, "Tanh", "tanh2", "a", "Y");
  return model_finish(m);
}

static double chain_ref(double x) {
  return tanh(x > 0 ? x : 0);
}

/* Back and forth between fake and the CPU: a = Relu(X), n = Neg(a) (CPU),
 * b = Add(n, X), c = Mul(b, a), Y = Sub(c, a) (CPU). `a` is read on the
 * fake's stream and, copied, by the host; n is produced by the host and read
 * on the stream. */
static Model back_and_forth_model(void) {
  OxTestModel* m = model_start();
  otm_node(m, "Relu", "relu1", "X", "a");
  otm_node(m, "Neg", "neg", "a", "n");
  otm_node(m, "Add", "add", "n,X", "b");
  otm_node(m, "Mul", "mul", "b,a", "c");
  otm_node(m, "Sub", "sub", "c,a", "Y");
  return model_finish(m);
}

static double back_and_forth_ref(double x) {
  double a = x > 0 ? x : 0, b = -a + x;
  return b * a - a;
}

/* k = Sigmoid(X) on fake (queued, with latency); n = Neg(X) and m = Abs(X)
 * on the CPU; b = Add(n, k) on fake; Y = Sub(b, m) on the CPU. The copy of
 * n to fake is queued behind the slow Sigmoid, so it reads n well after the
 * host ran past n's last use and computed m, which has n's size and could
 * take n's memory. */
static Model busy_stream_model(void) {
  OxTestModel* m = model_start();
  otm_node(m, "Sigmoid", "sigmoid", "X", "k");
  otm_node(m, "Neg", "neg", "X", "n");
  otm_node(m, "Add", "add", "n,k", "b");
  otm_node(m, "Abs", "abs", "X", "m");
  otm_node(m, "Sub", "sub", "b,m", "Y");
  return model_finish(m);
}

static double busy_stream_ref(double x) {
  return -x + 1.0 / (1.0 + exp(-x)) - fabs(x);
}

/* --- sessions ------------------------------------------------------------------------ */

typedef struct Ctx {
  char* dir;
  char stats[2][512]; /* fake, fake2 */
  char config[4096];
} Ctx;

static int ctx_setup(void** state) {
  Ctx* c = calloc(1, sizeof *c);
  if (!c) return -1;
  c->dir = otm_temp_dir();
  if (!c->dir) {
    free(c);
    return -1;
  }
  snprintf(c->stats[0], sizeof c->stats[0], "%s/fake.txt", c->dir);
  snprintf(c->stats[1], sizeof c->stats[1], "%s/fake2.txt", c->dir);
  *state = c;
  return 0;
}

static int ctx_teardown(void** state) {
  Ctx* c = *state;
  otm_remove_dir(c->dir);
  free(c->dir);
  free(c);
  return 0;
}

/* fake takes `ops1`, fake2 `ops2`; both with `async` and `latency_ms`;
 * `extra2` adds options to fake2 (may be ""). The CPU is appended. */
static const char* config(Ctx* c, bool async, long latency_ms, const char* ops1, const char* ops2,
                          const char* extra2) {
  snprintf(c->config, sizeof c->config,
           "{\"providers\": ["
           "{\"name\": \"fake\", \"options\": {\"stats_file\": \"%s\", \"async\": \"%d\", "
           "\"latency_ms\": \"%ld\", \"ops\": \"%s\"}},"
           "{\"name\": \"fake2\", \"options\": {\"stats_file\": \"%s\", \"async\": \"%d\", "
           "\"latency_ms\": \"%ld\", \"ops\": \"%s\"%s%s}}]}",
           c->stats[0], async, latency_ms, ops1, c->stats[1], async, latency_ms, ops2,
           extra2[0] ? ", " : "", extra2);
  return c->config;
}

static OnyxSession* session_ok(const char* cfg, const Model* model) {
  OnyxSessionOptions* opts = NULL;
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_options_create(&opts);
  if (!st) st = onyx_session_options_load_config_text(opts, cfg, strlen(cfg), "test config");
  /* Optimizations off: the nodes stay as built. */
  if (!st) st = onyx_session_options_set_optimization_level(opts, ONYX_OPT_DISABLED);
  if (!st) st = onyx_session_create_from_bytes(opts, model->bytes, model->len, NULL, &s);
  onyx_session_options_release(opts);
  if (st) fail_msg("session creation failed: %s", onyx_status_message(st));
  return s;
}

static size_t nodes_on(const OnyxSession* s, const char* provider) {
  for (size_t i = 0; i < onyx_session_provider_count(s); i++)
    if (strcmp(onyx_session_provider_name(s, i), provider) == 0)
      return onyx_session_provider_node_count(s, i);
  return SIZE_MAX;
}

/* Runs x (6 floats) through the session into y. */
static OnyxStatus* run_x(OnyxSession* s, const float* x, float* y) {
  OnyxValue* in = NULL;
  OnyxValue* out = NULL;
  const char* in_name = "X";
  const char* out_name = "Y";
  OnyxStatus* st =
      onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){2, 3}, 2, x, 6 * sizeof *x, &in);
  if (!st)
    st = onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &out);
  if (!st) {
    const OnyxTensor* t = onyx_value_tensor(out);
    if (!t || onyx_tensor_elem_count(t) != 6) fail_msg("the output is not 6 values");
    memcpy(y, onyx_tensor_data(t), 6 * sizeof *y);
  }
  onyx_values_release(&out, 1);
  onyx_value_release(in);
  return st;
}

static void run_check(OnyxSession* s, const float* x, double (*ref)(double)) {
  float y[6];
  OnyxStatus* st = run_x(s, x, y);
  if (st) fail_msg("run failed: %s", onyx_status_message(st));
  for (int i = 0; i < 6; i++)
    if (!(fabs((double)y[i] - ref((double)x[i])) <= 1e-5))
      fail_msg("element %d: got %.9g, reference %.9g", i, y[i], ref((double)x[i]));
}

/* Under memcheck every thread runs in turn on one core and host work is
 * many times slower: the timings are printed, not asserted. */
static bool timing_checked(void) {
  return !getenv("ONYX_UNDER_VALGRIND");
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* The value of `key` in the stats file provider `which` (0: fake, 1: fake2)
 * wrote at EP release. */
static long stat_of(const Ctx* c, int which, const char* key) {
  FILE* f = fopen(c->stats[which], "r");
  if (!f) fail_msg("the fake provider wrote no stats file at %s", c->stats[which]);
  char line[1024] = {0};
  char* got = fgets(line, sizeof line, f);
  fclose(f);
  assert_non_null(got);
  char pat[64];
  snprintf(pat, sizeof pat, "%s=", key);
  size_t n = strlen(pat);
  for (char* p = line; (p = strstr(p, pat)) != NULL; p += n)
    if (p == line || p[-1] == ' ') return strtol(p + n, NULL, 10);
  fail_msg("stats file has no '%s': %s", key, line);
  return -1;
}

/* Wall time of one run of the two-branch model (after one warm-up run). */
static double two_branch_ms(Ctx* c, bool async, int* runs) {
  Model model = two_branch_model();
  OnyxSession* s = session_ok(config(c, async, LATENCY_MS, "Relu", "Tanh", ""), &model);
  assert_int_equal(nodes_on(s, "fake"), 1);
  assert_int_equal(nodes_on(s, "fake2"), 1);
  assert_int_equal(nodes_on(s, "cpu"), 1);
  run_check(s, X_DATA, two_branch_ref);
  double t0 = now_ms();
  run_check(s, X_DATA, two_branch_ref);
  double ms = now_ms() - t0;
  *runs = 2;
  onyx_session_release(s);
  free(model.bytes);
  return ms;
}

/* --- tests ------------------------------------------------------------------------------- */

/* Two independent branches of latency L on two asynchronous providers take
 * about L, not 2L; the results are right; the host waited on events at the
 * crossings (one event per provider, created once and reused by the second
 * run) and synchronized each stream once per run, at its end. */
static void test_two_branches_overlap(void** state) {
  Ctx* c = *state;
  int runs = 0;
  double ms = two_branch_ms(c, true, &runs);
  print_message("two branches on two asynchronous providers, L = %ld ms: sum %ld ms, "
                "measured %.1f ms\n",
                LATENCY_MS, 2 * LATENCY_MS, ms);
  if (ms < 0.95 * LATENCY_MS) fail_msg("%.1f ms: faster than one branch's latency", ms);
  if (timing_checked() && ms >= 1.6 * LATENCY_MS)
    fail_msg("%.1f ms: the branches did not overlap (sum %ld ms)", ms, 2 * LATENCY_MS);
  for (int p = 0; p < 2; p++) {
    assert_int_equal(stat_of(c, p, "kernels_run"), runs);
    assert_int_equal(stat_of(c, p, "events"), 1);
    assert_int_equal(stat_of(c, p, "records"), runs);
    assert_int_equal(stat_of(c, p, "waits"), runs);
    assert_int_equal(stat_of(c, p, "syncs"), runs);
    assert_int_equal(stat_of(c, p, "live"), 0);
  }
}

/* The same graph with synchronous kernels (each blocks for its latency)
 * takes the sum: the baseline the overlap is measured against. */
static void test_two_branches_synchronous_baseline(void** state) {
  Ctx* c = *state;
  int runs = 0;
  double ms = two_branch_ms(c, false, &runs);
  print_message("two branches on two synchronous providers, L = %ld ms: measured %.1f ms\n",
                LATENCY_MS, ms);
  if (ms < 1.9 * LATENCY_MS) fail_msg("%.1f ms: less than the two latencies", ms);
}

/* A failure of queued work comes back from onyx_session_run (through the
 * event the host waits on), names the node and provider, and the session
 * stays usable (the next run reports it again rather than hanging). */
static void test_queued_error_surfaces(void** state) {
  Ctx* c = *state;
  Model model = two_branch_model();
  OnyxSession* s = session_ok(config(c, true, 20, "Relu", "Tanh", "\"fail\": \"queued\""), &model);
  for (int r = 0; r < 2; r++) {
    float y[6];
    OnyxStatus* st = run_x(s, X_DATA, y);
    assert_non_null(st);
    assert_int_equal(onyx_status_code(st), ONYX_RUNTIME_ERROR);
    const char* msg = onyx_status_message(st);
    if (!strstr(msg, "injected failure of queued work") || !strstr(msg, "tanh2") ||
        !strstr(msg, "fake2"))
      fail_msg("unexpected message: %s", msg);
    onyx_status_release(st);
  }
  onyx_session_release(s);
  free(model.bytes);
  assert_int_equal(stat_of(c, 0, "live"), 0);
  assert_int_equal(stat_of(c, 1, "live"), 0);
}

/* A value produced on fake's stream and read on fake2's (staged through host
 * memory) arrives complete. */
static void test_chain_between_streams(void** state) {
  Ctx* c = *state;
  Model model = chain_model();
  OnyxSession* s = session_ok(config(c, true, 20, "Relu", "Tanh", ""), &model);
  assert_int_equal(nodes_on(s, "fake"), 1);
  assert_int_equal(nodes_on(s, "fake2"), 1);
  for (int r = 0; r < 3; r++)
    run_check(s, X_DATA, chain_ref);
  onyx_session_release(s);
  free(model.bytes);
  assert_int_equal(stat_of(c, 0, "kernels_run"), 3);
  assert_int_equal(stat_of(c, 1, "kernels_run"), 3);
  assert_int_equal(stat_of(c, 0, "live"), 0);
}

/* Values going back and forth between an asynchronous stream and the host
 * thread, with memory freed and reused within and across runs. */
static void test_back_and_forth(void** state) {
  Ctx* c = *state;
  Model model = back_and_forth_model();
  OnyxSession* s = session_ok(config(c, true, 10, "Relu,Add,Mul", "Tanh", ""), &model);
  assert_int_equal(nodes_on(s, "fake"), 3);
  assert_int_equal(nodes_on(s, "cpu"), 2);
  float x[6];
  for (int r = 0; r < 4; r++) {
    for (int i = 0; i < 6; i++)
      x[i] = X_DATA[i] * (float)(r + 1);
    run_check(s, x, back_and_forth_ref);
  }
  onyx_session_release(s);
  free(model.bytes);
  assert_int_equal(stat_of(c, 0, "kernels_run"), 12);
  assert_int_equal(stat_of(c, 0, "live"), 0);
}

/* A host value that a stream reads later than the host's last use of it
 * keeps its memory until the stream is past the read. */
static void test_host_value_read_by_busy_stream(void** state) {
  Ctx* c = *state;
  Model model = busy_stream_model();
  OnyxSession* s = session_ok(config(c, true, 50, "Sigmoid,Add", "Tanh", ""), &model);
  assert_int_equal(nodes_on(s, "fake"), 2);
  assert_int_equal(nodes_on(s, "cpu"), 3);
  for (int r = 0; r < 3; r++)
    run_check(s, X_DATA, busy_stream_ref);
  onyx_session_release(s);
  free(model.bytes);
  assert_int_equal(stat_of(c, 0, "live"), 0);
}

/* Concurrent runs of one session share the streams but not the events. */
#define THREADS 4
#define RUNS    3

typedef struct Runner {
  OnyxSession* s;
  float scale;
  char error[512];
} Runner;

static void* runner_main(void* arg) {
  Runner* r = arg;
  for (int k = 0; k < RUNS && !r->error[0]; k++) {
    float x[6], y[6];
    for (int i = 0; i < 6; i++)
      x[i] = X_DATA[i] * r->scale * (float)(k + 1);
    OnyxStatus* st = run_x(r->s, x, y);
    if (st) {
      snprintf(r->error, sizeof r->error, "run failed: %s", onyx_status_message(st));
      onyx_status_release(st);
      break;
    }
    for (int i = 0; i < 6; i++)
      if (!(fabs((double)y[i] - two_branch_ref((double)x[i])) <= 1e-5))
        snprintf(r->error, sizeof r->error, "element %d: got %.9g, reference %.9g", i, y[i],
                 two_branch_ref((double)x[i]));
  }
  return NULL;
}

static void test_concurrent_runs(void** state) {
  Ctx* c = *state;
  Model model = two_branch_model();
  OnyxSession* s = session_ok(config(c, true, 20, "Relu", "Tanh", ""), &model);
  Runner r[THREADS];
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) {
    r[i] = (Runner){.s = s, .scale = 0.5f + (float)i};
    assert_int_equal(pthread_create(&t[i], NULL, runner_main, &r[i]), 0);
  }
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < THREADS; i++)
    if (r[i].error[0]) fail_msg("thread %d: %s", i, r[i].error);
  onyx_session_release(s);
  free(model.bytes);
  for (int p = 0; p < 2; p++) {
    assert_int_equal(stat_of(c, p, "kernels_run"), THREADS * RUNS);
    long events = stat_of(c, p, "events");
    if (events < 1 || events > THREADS) fail_msg("%ld events: expected 1 to %d", events, THREADS);
    assert_int_equal(stat_of(c, p, "live"), 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_two_branches_overlap, ctx_setup, ctx_teardown),
      cmocka_unit_test_setup_teardown(test_two_branches_synchronous_baseline, ctx_setup,
                                      ctx_teardown),
      cmocka_unit_test_setup_teardown(test_queued_error_surfaces, ctx_setup, ctx_teardown),
      cmocka_unit_test_setup_teardown(test_chain_between_streams, ctx_setup, ctx_teardown),
      cmocka_unit_test_setup_teardown(test_back_and_forth, ctx_setup, ctx_teardown),
      cmocka_unit_test_setup_teardown(test_host_value_read_by_busy_stream, ctx_setup, ctx_teardown),
      cmocka_unit_test_setup_teardown(test_concurrent_runs, ctx_setup, ctx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
