/* test_options.c — session options in code: defaults, every setter's
 * argument checks, provider options, pins, and deep copies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include "ox_model.h" /* OX_DEFAULT_MAX_* */
#include "ox_options.h"

static OnyxSessionOptions* fresh(void) {
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  assert_non_null(o);
  return o;
}

static void expect_error(OnyxStatus* st, OnyxStatusCode code, const char* want) {
  assert_non_null(st);
  assert_int_equal(st->code, code);
  if (!strstr(st->message, want)) fprintf(stderr, "message: %s\nlacks: %s\n", st->message, want);
  assert_non_null(strstr(st->message, want));
  ox_status_free(st);
}

static void test_defaults(void** state) {
  (void)state;
  OnyxSessionOptions* o = fresh();
  assert_int_equal(o->threads, 0);
  assert_int_equal(o->log_severity, ONYX_LOG_WARNING);
  assert_int_equal(o->order, ONYX_ORDER_DEFAULT);
  assert_int_equal(o->opt_level, ONYX_OPT_ALL);
  assert_true(o->memory_pattern);
  assert_false(o->deterministic);
  assert_false(o->fallback_deny);
  assert_false(o->no_implicit_cpu);
  assert_int_equal(o->n_providers, 0);
  assert_int_equal(o->n_pins, 0);
  assert_null(o->profile_path);
  assert_null(o->log_fn);
  /* Safe limits by default (docs/security.md). */
  assert_int_equal(o->max_model_bytes, OX_DEFAULT_MAX_MODEL_BYTES);
  assert_int_equal(o->max_tensor_bytes, OX_DEFAULT_MAX_TENSOR_BYTES);
  assert_int_equal(o->max_nodes, OX_DEFAULT_MAX_NODES);
  assert_int_equal(o->max_graph_depth, OX_DEFAULT_MAX_GRAPH_DEPTH);
  onyx_session_options_release(o);
  onyx_session_options_release(NULL);
  expect_error(onyx_session_options_create(NULL), ONYX_INVALID_ARGUMENT, "out is NULL");
}

static void test_scalar_setters(void** state) {
  (void)state;
  OnyxSessionOptions* o = fresh();
  assert_null(onyx_session_options_set_threads(o, 6));
  assert_int_equal(o->threads, 6);
  expect_error(onyx_session_options_set_threads(o, -1), ONYX_INVALID_ARGUMENT,
               "threads must be >= 0 (0: one per core), got -1");
  assert_int_equal(o->threads, 6); /* unchanged by the refused call */
  assert_null(onyx_session_options_set_log_severity(o, ONYX_LOG_FATAL));
  assert_int_equal(o->log_severity, ONYX_LOG_FATAL);
  expect_error(onyx_session_options_set_log_severity(o, (OnyxLogSeverity)5), ONYX_INVALID_ARGUMENT,
               "unknown severity 5");
  assert_null(onyx_session_options_set_execution_order(o, ONYX_ORDER_PRIORITY));
  assert_int_equal(o->order, ONYX_ORDER_PRIORITY);
  expect_error(onyx_session_options_set_execution_order(o, (OnyxExecutionOrder)2),
               ONYX_INVALID_ARGUMENT, "unknown order 2");
  assert_null(onyx_session_options_set_optimization_level(o, ONYX_OPT_LAYOUT));
  assert_int_equal(o->opt_level, ONYX_OPT_LAYOUT);
  /* 4..98 lie between the known levels and are not levels. */
  expect_error(onyx_session_options_set_optimization_level(o, (OnyxOptimizationLevel)4),
               ONYX_INVALID_ARGUMENT, "unknown level 4");
  assert_int_equal(o->opt_level, ONYX_OPT_LAYOUT);
  assert_null(onyx_session_options_set_deterministic(o, 7));
  assert_true(o->deterministic);
  assert_null(onyx_session_options_set_fallback_deny(o, 1));
  assert_true(o->fallback_deny);
  assert_null(onyx_session_options_set_no_implicit_cpu(o, 1));
  assert_true(o->no_implicit_cpu);
  assert_null(onyx_session_options_set_no_implicit_cpu(o, 0));
  assert_false(o->no_implicit_cpu);
  onyx_session_options_release(o);
}

static void log_fn(void* user, OnyxLogSeverity s, const char* m) {
  (void)user, (void)s, (void)m;
}

static void test_log_callback(void** state) {
  (void)state;
  OnyxSessionOptions* o = fresh();
  int cookie;
  assert_null(onyx_session_options_set_log_callback(o, log_fn, &cookie));
  assert_ptr_equal(o->log_fn, log_fn);
  assert_ptr_equal(o->log_user, &cookie);
  assert_null(onyx_session_options_set_log_callback(o, NULL, &cookie));
  assert_null(o->log_fn);
  assert_null(o->log_user);
  onyx_session_options_release(o);
}

static void test_null_options_are_refused(void** state) {
  (void)state;
  expect_error(onyx_session_options_set_threads(NULL, 1), ONYX_INVALID_ARGUMENT,
               "onyx_session_options_set_threads: options is NULL");
  expect_error(onyx_session_options_add_provider(NULL, "x", NULL, 0, 1), ONYX_INVALID_ARGUMENT,
               "options is NULL");
  expect_error(onyx_session_options_add_pin(NULL, NULL, "Conv", "cpu"), ONYX_INVALID_ARGUMENT,
               "options is NULL");
}

static void test_add_provider(void** state) {
  (void)state;
  OnyxSessionOptions* o = fresh();
  assert_null(onyx_session_options_add_provider(o, "cuda", NULL, 1, 0));
  assert_null(onyx_session_options_add_provider(o, "acme", "/opt/libonyx_ep_acme.so", 0, 1));
  assert_int_equal(o->n_providers, 2);
  assert_string_equal(o->providers[0].name, "cuda");
  assert_null(o->providers[0].library);
  assert_int_equal(o->providers[0].device, 1);
  assert_false(o->providers[0].required);
  assert_string_equal(o->providers[1].library, "/opt/libonyx_ep_acme.so");
  assert_true(o->providers[1].required);
  expect_error(onyx_session_options_add_provider(o, "cuda", NULL, 0, 1), ONYX_INVALID_ARGUMENT,
               "provider 'cuda' is already added");
  expect_error(onyx_session_options_add_provider(o, "Cuda", NULL, 0, 1), ONYX_INVALID_ARGUMENT,
               "provider name 'Cuda' is invalid");
  expect_error(onyx_session_options_add_provider(o, "../x", NULL, 0, 1), ONYX_INVALID_ARGUMENT,
               "provider name '../x' is invalid");
  expect_error(onyx_session_options_add_provider(o, NULL, NULL, 0, 1), ONYX_INVALID_ARGUMENT,
               "provider name '(null)' is invalid");
  expect_error(onyx_session_options_add_provider(o, "x", NULL, -1, 1), ONYX_INVALID_ARGUMENT,
               "provider 'x': device must be >= 0, got -1");
  expect_error(onyx_session_options_add_provider(o, "x", "", 0, 1), ONYX_INVALID_ARGUMENT,
               "provider 'x': library path is empty");
  assert_int_equal(o->n_providers, 2);
  onyx_session_options_release(o);
}

static void test_provider_options(void** state) {
  (void)state;
  OnyxSessionOptions* o = fresh();
  expect_error(onyx_session_options_set_provider_option(o, "cuda", "k", "v"), ONYX_INVALID_ARGUMENT,
               "provider 'cuda' has not been added");
  assert_null(onyx_session_options_add_provider(o, "cuda", NULL, 0, 1));
  assert_null(onyx_session_options_set_provider_option(o, "cuda", "a", "1"));
  assert_null(onyx_session_options_set_provider_option(o, "cuda", "b", "2"));
  assert_null(onyx_session_options_set_provider_option(o, "cuda", "a", "3")); /* replaces */
  const OnyxOptions* opts = &o->providers[0].options;
  assert_int_equal(opts->count, 2);
  assert_string_equal(opts->keys[0], "a");
  assert_string_equal(opts->values[0], "3");
  assert_string_equal(opts->keys[1], "b");
  assert_string_equal(ox_options_get(opts, "b"), "2");
  assert_null(ox_options_get(opts, "c"));
  expect_error(onyx_session_options_set_provider_option(o, "cuda", "", "v"), ONYX_INVALID_ARGUMENT,
               "option key is empty");
  expect_error(onyx_session_options_set_provider_option(o, "cuda", "k", NULL),
               ONYX_INVALID_ARGUMENT, "option 'k' has a NULL value");
  onyx_session_options_release(o);
}

static void test_options_copy_and_growth(void** state) {
  (void)state;
  OnyxOptions a = {0}, b = {0};
  for (int i = 0; i < 40; i++) { /* well past the first allocation */
    char k[16], v[16];
    snprintf(k, sizeof k, "k%d", i);
    snprintf(v, sizeof v, "%d", i * i);
    assert_null(ox_options_set(&a, k, v));
  }
  assert_null(ox_options_set(&b, "stale", "x"));
  assert_null(ox_options_copy(&b, &a));
  assert_int_equal(b.count, 40);
  assert_null(ox_options_get(&b, "stale"));
  assert_string_equal(ox_options_get(&b, "k39"), "1521");
  assert_ptr_not_equal(b.values[0], a.values[0]); /* a deep copy */
  ox_options_clear(&a);
  assert_string_equal(ox_options_get(&b, "k7"), "49");
  ox_options_clear(&b);
  assert_int_equal(b.count, 0);
  ox_options_clear(NULL);
}

static void test_pins(void** state) {
  (void)state;
  OnyxSessionOptions* o = fresh();
  assert_null(onyx_session_options_add_provider(o, "fake", NULL, 0, 1));
  assert_null(onyx_session_options_add_pin(o, "conv1", NULL, "fake"));
  assert_null(onyx_session_options_add_pin(o, NULL, "Conv", "cpu")); /* the implicit CPU */
  assert_int_equal(o->n_pins, 2);
  assert_string_equal(o->pins[0].node_name, "conv1");
  assert_null(o->pins[0].op_type);
  assert_string_equal(o->pins[1].op_type, "Conv");
  assert_string_equal(o->pins[1].provider, "cpu");
  expect_error(onyx_session_options_add_pin(o, "n", "Conv", "fake"), ONYX_INVALID_ARGUMENT,
               "give exactly one of node_name and op_type");
  expect_error(onyx_session_options_add_pin(o, NULL, NULL, "fake"), ONYX_INVALID_ARGUMENT,
               "give exactly one of node_name and op_type");
  expect_error(onyx_session_options_add_pin(o, "", NULL, "fake"), ONYX_INVALID_ARGUMENT,
               "node is empty");
  expect_error(onyx_session_options_add_pin(o, NULL, "Relu", "cuda"), ONYX_INVALID_ARGUMENT,
               "op_type 'Relu' is pinned to provider 'cuda', which has not been added");
  expect_error(onyx_session_options_add_pin(o, NULL, "Conv", "fake"), ONYX_INVALID_ARGUMENT,
               "op_type 'Conv' is already pinned to provider 'cpu'");
  assert_null(onyx_session_options_set_no_implicit_cpu(o, 1));
  expect_error(onyx_session_options_add_pin(o, NULL, "Relu", "cpu"), ONYX_INVALID_ARGUMENT,
               "pinned to provider 'cpu', which has not been added");
  assert_int_equal(o->n_pins, 2);
  onyx_session_options_release(o);
}

static void test_clone_is_deep(void** state) {
  (void)state;
  OnyxSessionOptions* o = fresh();
  assert_null(onyx_session_options_set_threads(o, 5));
  assert_null(onyx_session_options_add_provider(o, "cuda", "/x/lib.so", 2, 0));
  assert_null(onyx_session_options_set_provider_option(o, "cuda", "k", "v"));
  assert_null(onyx_session_options_add_pin(o, "node", NULL, "cuda"));
  o->profile_path = strdup("trace.json");
  OnyxSessionOptions* c = NULL;
  assert_null(ox_session_options_clone(o, &c));
  onyx_session_options_release(o); /* the clone must not share anything */
  assert_int_equal(c->threads, 5);
  assert_int_equal(c->n_providers, 1);
  assert_string_equal(c->providers[0].name, "cuda");
  assert_string_equal(c->providers[0].library, "/x/lib.so");
  assert_int_equal(c->providers[0].device, 2);
  assert_false(c->providers[0].required);
  assert_string_equal(ox_options_get(&c->providers[0].options, "k"), "v");
  assert_int_equal(c->n_pins, 1);
  assert_string_equal(c->pins[0].node_name, "node");
  assert_string_equal(c->pins[0].provider, "cuda");
  assert_string_equal(c->profile_path, "trace.json");
  /* The clone keeps working as options. */
  assert_null(onyx_session_options_add_provider(c, "cpu", NULL, 0, 1));
  assert_int_equal(c->n_providers, 2);
  onyx_session_options_release(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_scalar_setters),
      cmocka_unit_test(test_log_callback),
      cmocka_unit_test(test_null_options_are_refused),
      cmocka_unit_test(test_add_provider),
      cmocka_unit_test(test_provider_options),
      cmocka_unit_test(test_options_copy_and_growth),
      cmocka_unit_test(test_pins),
      cmocka_unit_test(test_clone_is_deep),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
