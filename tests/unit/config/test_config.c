/* test_config.c — the JSON provider/session config (docs/config.md): good
 * files and each class of error, with the exact message. Line and column
 * numbers were counted by hand on the texts below. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ox_options.h"

#define ORIGIN "cfg.json"

static OnyxSessionOptions* fresh(void) {
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  return o;
}

static void load_ok(OnyxSessionOptions* o, const char* text) {
  OnyxStatus* st = onyx_session_options_load_config_text(o, text, strlen(text), ORIGIN);
  if (st) fprintf(stderr, "unexpected error: %s\n", st->message);
  assert_null(st);
}

/* Loads text into fresh options and checks the whole message. */
static void expect_config_error(const char* text, const char* want) {
  OnyxSessionOptions* o = fresh();
  OnyxStatus* st = onyx_session_options_load_config_text(o, text, strlen(text), ORIGIN);
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_INVALID_CONFIG);
  assert_string_equal(st->message, want);
  ox_status_free(st);
  onyx_session_options_release(o);
}

/* The same, for messages whose tail is jansson's wording. */
static void expect_config_error_prefix(const char* text, const char* prefix) {
  OnyxSessionOptions* o = fresh();
  OnyxStatus* st = onyx_session_options_load_config_text(o, text, strlen(text), ORIGIN);
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_INVALID_CONFIG);
  if (strncmp(st->message, prefix, strlen(prefix)) != 0)
    fprintf(stderr, "message: %s\nwanted prefix: %s\n", st->message, prefix);
  assert_true(strncmp(st->message, prefix, strlen(prefix)) == 0);
  ox_status_free(st);
  onyx_session_options_release(o);
}

/* --- Good configs ------------------------------------------------------------------------ */

/* The example of ARCHITECTURE.md §5. */
static const char* const k_example =
    "{\n"
    "  \"providers\": [\n"
    "    { \"name\": \"cuda\", \"device\": 0, \"options\": { \"arena_extend\": \"power_of_two\" } "
    "},\n"
    "    { \"name\": \"onednn\", \"required\": false },\n"
    "    { \"name\": \"cpu\", \"options\": { \"threads\": 2 } },\n"
    "    { \"name\": \"acme\", \"library\": \"/opt/acme/lib/libonyx_ep_acme.so\" }\n"
    "  ],\n"
    "  \"placement\": [ { \"op_type\": \"NonMaxSuppression\", \"provider\": \"cpu\" } ],\n"
    "  \"fallback\": \"allow\",\n"
    "  \"session\": { \"optimization_level\": \"all\", \"execution_order\": \"default\",\n"
    "               \"memory_pattern\": true, \"deterministic\": false,\n"
    "               \"log_severity\": \"warning\", \"profile\": \"trace.json\" }\n"
    "}\n";

static void test_architecture_example(void** state) {
  (void)state;
  OnyxSessionOptions* o = fresh();
  load_ok(o, k_example);
  assert_int_equal(o->n_providers, 4);
  const char* names[] = {"cuda", "onednn", "cpu", "acme"};
  const bool required[] = {true, false, true, true};
  for (size_t i = 0; i < 4; i++) {
    assert_string_equal(o->providers[i].name, names[i]);
    assert_int_equal(o->providers[i].required, required[i]);
    assert_int_equal(o->providers[i].device, 0);
  }
  assert_null(o->providers[0].library);
  assert_string_equal(o->providers[3].library, "/opt/acme/lib/libonyx_ep_acme.so");
  assert_int_equal(o->providers[0].options.count, 1);
  assert_string_equal(ox_options_get(&o->providers[0].options, "arena_extend"), "power_of_two");
  assert_string_equal(ox_options_get(&o->providers[2].options, "threads"), "2");
  assert_int_equal(o->providers[1].options.count, 0);
  assert_int_equal(o->n_pins, 1);
  assert_null(o->pins[0].node_name);
  assert_string_equal(o->pins[0].op_type, "NonMaxSuppression");
  assert_string_equal(o->pins[0].provider, "cpu");
  assert_false(o->fallback_deny);
  assert_false(o->no_implicit_cpu);
  assert_int_equal(o->opt_level, ONYX_OPT_ALL);
  assert_int_equal(o->order, ONYX_ORDER_DEFAULT);
  assert_true(o->memory_pattern);
  assert_false(o->deterministic);
  assert_int_equal(o->log_severity, ONYX_LOG_WARNING);
  assert_string_equal(o->profile_path, "trace.json");
  onyx_session_options_release(o);
}

static void test_every_session_key(void** state) {
  (void)state;
  OnyxSessionOptions* o = fresh();
  load_ok(o, "{\"session\": {\"optimization_level\": \"extended\", \"execution_order\": "
             "\"priority\", \"memory_pattern\": false, \"deterministic\": true, "
             "\"log_severity\": \"error\", \"threads\": 8, \"profile\": \"p.json\", "
             "\"limits\": {\"max_model_bytes\": 1000000, \"max_tensor_bytes\": 4096, "
             "\"max_nodes\": 77, \"max_graph_depth\": 12}}}");
  assert_int_equal(o->opt_level, ONYX_OPT_EXTENDED);
  assert_int_equal(o->order, ONYX_ORDER_PRIORITY);
  assert_false(o->memory_pattern);
  assert_true(o->deterministic);
  assert_int_equal(o->log_severity, ONYX_LOG_ERROR);
  assert_int_equal(o->threads, 8);
  assert_string_equal(o->profile_path, "p.json");
  assert_int_equal(o->max_model_bytes, 1000000);
  assert_int_equal(o->max_tensor_bytes, 4096);
  assert_int_equal(o->max_nodes, 77);
  assert_int_equal(o->max_graph_depth, 12);
  onyx_session_options_release(o);
}

static void test_enum_names(void** state) {
  (void)state;
  static const struct {
    const char* key;
    const char* name;
    int value;
  } cases[] = {
      {"optimization_level", "disabled", ONYX_OPT_DISABLED},
      {"optimization_level", "basic", ONYX_OPT_BASIC},
      {"optimization_level", "extended", ONYX_OPT_EXTENDED},
      {"optimization_level", "layout", ONYX_OPT_LAYOUT},
      {"optimization_level", "all", ONYX_OPT_ALL},
      {"execution_order", "default", ONYX_ORDER_DEFAULT},
      {"execution_order", "priority", ONYX_ORDER_PRIORITY},
      {"log_severity", "verbose", ONYX_LOG_VERBOSE},
      {"log_severity", "info", ONYX_LOG_INFO},
      {"log_severity", "warning", ONYX_LOG_WARNING},
      {"log_severity", "error", ONYX_LOG_ERROR},
      {"log_severity", "fatal", ONYX_LOG_FATAL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    OnyxSessionOptions* o = fresh();
    /* Start each from a value other than the expected one. */
    o->opt_level = (OnyxOptimizationLevel)-1;
    o->order = (OnyxExecutionOrder)-1;
    o->log_severity = (OnyxLogSeverity)-1;
    char text[128];
    snprintf(text, sizeof text, "{\"session\": {\"%s\": \"%s\"}}", cases[i].key, cases[i].name);
    load_ok(o, text);
    int got = strcmp(cases[i].key, "optimization_level") == 0 ? (int)o->opt_level
              : strcmp(cases[i].key, "execution_order") == 0  ? (int)o->order
                                                              : (int)o->log_severity;
    assert_int_equal(got, cases[i].value);
    onyx_session_options_release(o);
  }
}

static void test_option_values_become_text(void** state) {
  (void)state;
  OnyxSessionOptions* o = fresh();
  load_ok(o, "{\"providers\": [{\"name\": \"x\", \"options\": {\"s\": \"hello\", \"i\": 42, "
             "\"neg\": -3, \"half\": 0.5, \"two\": 2.0, \"tenth\": 0.1, \"big\": 1e20, "
             "\"t\": true, \"f\": false, \"empty\": \"\"}}]}");
  const OnyxOptions* opts = &o->providers[0].options;
  static const char* const want[][2] = {
      {"s", "hello"},   {"i", "42"},      {"neg", "-3"}, {"half", "0.5"}, {"two", "2.0"},
      {"tenth", "0.1"}, {"big", "1e+20"}, {"t", "true"}, {"f", "false"},  {"empty", ""},
  };
  assert_int_equal(opts->count, sizeof want / sizeof want[0]);
  for (size_t i = 0; i < opts->count; i++) { /* in file order */
    assert_string_equal(opts->keys[i], want[i][0]);
    assert_string_equal(opts->values[i], want[i][1]);
  }
  onyx_session_options_release(o);
}

static void test_provider_fields(void** state) {
  (void)state;
  OnyxSessionOptions* o = fresh();
  load_ok(o, "{\"providers\": [{\"name\": \"cuda\", \"device\": 3, \"required\": false, "
             "\"library\": \"/x/libonyx_ep_cuda.so\"}, {\"name\": \"cpu\"}], "
             "\"implicit_cpu\": false, \"fallback\": \"deny\"}");
  assert_int_equal(o->n_providers, 2);
  assert_int_equal(o->providers[0].device, 3);
  assert_false(o->providers[0].required);
  assert_string_equal(o->providers[0].library, "/x/libonyx_ep_cuda.so");
  assert_string_equal(o->providers[1].name, "cpu");
  assert_true(o->providers[1].required);
  assert_true(o->no_implicit_cpu);
  assert_true(o->fallback_deny);
  onyx_session_options_release(o);
}

static void test_pins(void** state) {
  (void)state;
  OnyxSessionOptions* o = fresh();
  load_ok(o, "{\"providers\": [{\"name\": \"fake\"}], \"placement\": ["
             "{\"node\": \"conv_1\", \"provider\": \"fake\"}, "
             "{\"op_type\": \"Conv\", \"provider\": \"cpu\"}, "
             "{\"node\": \"conv_2\", \"provider\": \"cpu\"}]}");
  assert_int_equal(o->n_pins, 3);
  assert_string_equal(o->pins[0].node_name, "conv_1");
  assert_null(o->pins[0].op_type);
  assert_string_equal(o->pins[0].provider, "fake");
  assert_string_equal(o->pins[1].op_type, "Conv");
  assert_null(o->pins[1].node_name);
  assert_string_equal(o->pins[1].provider, "cpu");
  assert_string_equal(o->pins[2].node_name, "conv_2");
  onyx_session_options_release(o);
}

/* Keys the file has override code; keys it lacks leave code's settings. */
static void test_file_overrides_code_settings(void** state) {
  (void)state;
  OnyxSessionOptions* o = fresh();
  assert_null(onyx_session_options_set_threads(o, 4));
  assert_null(onyx_session_options_set_deterministic(o, 1));
  assert_null(onyx_session_options_add_provider(o, "old", NULL, 0, 1));
  assert_null(onyx_session_options_add_pin(o, NULL, "Relu", "old"));
  load_ok(o, "{\"fallback\": \"deny\", \"session\": {\"threads\": 2}}");
  assert_int_equal(o->threads, 2);
  assert_true(o->deterministic);
  assert_true(o->fallback_deny);
  assert_int_equal(o->n_providers, 1);
  assert_string_equal(o->providers[0].name, "old");
  assert_int_equal(o->n_pins, 1);
  /* A providers list replaces code's list; so does placement. */
  load_ok(o, "{\"providers\": [{\"name\": \"new\"}], \"placement\": []}");
  assert_int_equal(o->n_providers, 1);
  assert_string_equal(o->providers[0].name, "new");
  assert_int_equal(o->n_pins, 0);
  load_ok(o, "{}");
  assert_int_equal(o->n_providers, 1);
  assert_int_equal(o->threads, 2);
  onyx_session_options_release(o);
}

static char g_dir[64];

static void write_file(const char* path, const char* text) {
  FILE* f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void test_load_from_file(void** state) {
  (void)state;
  char path[128];
  snprintf(path, sizeof path, "%s/providers.json", g_dir);
  write_file(path, k_example);
  OnyxSessionOptions* o = fresh();
  assert_null(onyx_session_options_load_config(o, path));
  assert_int_equal(o->n_providers, 4);
  assert_string_equal(o->providers[3].name, "acme");
  onyx_session_options_release(o);
  unlink(path);
}

/* --- Syntax errors: file, line, column ---------------------------------------------------- */

static void test_syntax_error_has_line_and_column(void** state) {
  (void)state;
  /* Line 3 is `    { "name": "cuda", }`: the stray '}' is its 23rd character. */
  const char* text = "{\n"
                     "  \"providers\": [\n"
                     "    { \"name\": \"cuda\", }\n"
                     "  ]\n"
                     "}\n";
  expect_config_error_prefix(text, ORIGIN ":3:23: ");
  char path[128], want[160];
  snprintf(path, sizeof path, "%s/providers.json", g_dir);
  write_file(path, text);
  OnyxSessionOptions* o = fresh();
  OnyxStatus* st = onyx_session_options_load_config(o, path);
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_INVALID_CONFIG);
  snprintf(want, sizeof want, "%s:3:23: ", path);
  assert_true(strncmp(st->message, want, strlen(want)) == 0);
  ox_status_free(st);
  onyx_session_options_release(o);
  unlink(path);
}

static void test_duplicate_json_key(void** state) {
  (void)state;
  /* The second "fallback" spans columns 23..32. */
  expect_config_error_prefix("{\"fallback\": \"allow\", \"fallback\": \"deny\"}",
                             ORIGIN ":1:32: duplicate object key");
}

static void test_missing_file(void** state) {
  (void)state;
  OnyxSessionOptions* o = fresh();
  OnyxStatus* st = onyx_session_options_load_config(o, "/nonexistent/providers.json");
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_NOT_FOUND);
  assert_string_equal(st->message,
                      "/nonexistent/providers.json: cannot open: No such file or directory");
  ox_status_free(st);
  onyx_session_options_release(o);
}

/* --- Unknown keys ----------------------------------------------------------------------- */

static void test_unknown_keys(void** state) {
  (void)state;
  expect_config_error("{\"fallbak\": \"deny\"}",
                      ORIGIN ": fallbak: unknown key; did you mean 'fallback'?");
  expect_config_error("{\"providers\": [{\"name\": \"a\"}, {\"name\": \"b\", \"optons\": {}}]}",
                      ORIGIN ": providers[1].optons: unknown key; did you mean 'options'?");
  expect_config_error("{\"session\": {\"limits\": {\"max_nodez\": 3}}}",
                      ORIGIN ": session.limits.max_nodez: unknown key; did you mean 'max_nodes'?");
  expect_config_error("{\"placement\": [{\"op\": \"Conv\", \"provider\": \"cpu\"}]}",
                      ORIGIN ": placement[0].op: unknown key (expected one of 'op_type', 'node', "
                             "'provider')");
  /* Far from every key (distance 6 to 'threads'): no guess, the list. */
  expect_config_error("{\"session\": {\"thread_count\": 4}}",
                      ORIGIN ": session.thread_count: unknown key (expected one of "
                             "'optimization_level', 'execution_order', 'memory_pattern', "
                             "'deterministic', 'log_severity', 'threads', 'profile', "
                             "'nvtx', 'cache_dir', 'node_priorities', 'limits')");
  expect_config_error("{\"session\": {\"zzz\": 1}}",
                      ORIGIN ": session.zzz: unknown key (expected one of 'optimization_level', "
                             "'execution_order', 'memory_pattern', 'deterministic', "
                             "'log_severity', 'threads', 'profile', 'nvtx', "
                             "'cache_dir', 'node_priorities', 'limits')");
}

/* --- Types and values ------------------------------------------------------------------------ */

static void test_wrong_types(void** state) {
  (void)state;
  expect_config_error("[]", ORIGIN ": the top level must be an object, got an array");
  expect_config_error("{\"providers\": {}}",
                      ORIGIN ": providers: expected an array, got an object");
  expect_config_error("{\"providers\": [\"cuda\"]}",
                      ORIGIN ": providers[0]: expected an object, got a string");
  expect_config_error("{\"providers\": [{\"name\": \"cuda\", \"device\": \"0\"}]}", ORIGIN
                      ": providers[0].device: expected a non-negative integer, got a string");
  expect_config_error("{\"providers\": [{\"name\": \"cuda\", \"device\": 1.0}]}",
                      ORIGIN ": providers[0].device: expected a non-negative integer, got a real "
                             "number");
  expect_config_error("{\"providers\": [{\"name\": \"cuda\", \"required\": \"no\"}]}",
                      ORIGIN ": providers[0].required: expected a boolean (true or false), got a "
                             "string");
  expect_config_error("{\"providers\": [{\"name\": 7}]}",
                      ORIGIN ": providers[0].name: expected a string, got an integer");
  expect_config_error("{\"providers\": [{\"name\": \"x\", \"options\": {\"k\": null}}]}",
                      ORIGIN ": providers[0].options.k: expected a string, number or boolean, got "
                             "null");
  expect_config_error("{\"providers\": [{\"name\": \"x\", \"options\": [1]}]}",
                      ORIGIN ": providers[0].options: expected an object, got an array");
  expect_config_error("{\"session\": {\"memory_pattern\": 1}}",
                      ORIGIN ": session.memory_pattern: expected a boolean (true or false), got an "
                             "integer");
  expect_config_error("{\"session\": []}", ORIGIN ": session: expected an object, got an array");
  expect_config_error("{\"session\": {\"profile\": \"\"}}",
                      ORIGIN ": session.profile: must not be empty");
  expect_config_error("{\"implicit_cpu\": \"no\"}",
                      ORIGIN ": implicit_cpu: expected a boolean (true or false), got a string");
}

static void test_out_of_range(void** state) {
  (void)state;
  expect_config_error("{\"session\": {\"threads\": -1}}",
                      ORIGIN ": session.threads: -1 is out of range (0 to 2147483647)");
  expect_config_error("{\"providers\": [{\"name\": \"a\", \"device\": 2147483648}]}",
                      ORIGIN ": providers[0].device: 2147483648 is out of range (0 to "
                             "2147483647)");
  expect_config_error("{\"session\": {\"limits\": {\"max_nodes\": -5}}}",
                      ORIGIN ": session.limits.max_nodes: -5 is out of range (0 to "
                             "18446744073709551615)");
}

static void test_bad_enum_values_list_the_allowed(void** state) {
  (void)state;
  expect_config_error("{\"session\": {\"optimization_level\": \"fast\"}}",
                      ORIGIN ": session.optimization_level: 'fast' is not one of 'disabled', "
                             "'basic', 'extended', 'layout', 'all'");
  expect_config_error("{\"session\": {\"log_severity\": \"warn\"}}",
                      ORIGIN ": session.log_severity: 'warn' is not one of 'verbose', 'info', "
                             "'warning', 'error', 'fatal'");
  expect_config_error("{\"session\": {\"execution_order\": 1}}",
                      ORIGIN ": session.execution_order: expected one of 'default', 'priority', "
                             "got an integer");
  expect_config_error("{\"fallback\": \"maybe\"}",
                      ORIGIN ": fallback: 'maybe' is not one of 'allow', 'deny'");
}

/* --- Providers and placement ------------------------------------------------------------------ */

static void test_provider_errors(void** state) {
  (void)state;
  expect_config_error("{\"providers\": [{\"device\": 0}]}",
                      ORIGIN ": providers[0]: missing required key 'name'");
  expect_config_error("{\"providers\": [{\"name\": \"CUDA\"}]}",
                      ORIGIN ": providers[0].name: 'CUDA' is not a valid provider name (use "
                             "lowercase letters, digits and '_')");
  expect_config_error("{\"providers\": [{\"name\": \"\"}]}",
                      ORIGIN ": providers[0].name: must not be empty");
  expect_config_error("{\"providers\": [{\"name\": \"cuda\"}, {\"name\": \"cpu\"}, "
                      "{\"name\": \"cuda\"}]}",
                      ORIGIN ": providers[2].name: provider 'cuda' is listed twice (first at "
                             "providers[0])");
  expect_config_error("{\"providers\": [{\"name\": \"a\", \"library\": \"\"}]}",
                      ORIGIN ": providers[0].library: must not be empty");
  expect_config_error("{\"providers\": [{\"name\": \"a\", \"options\": {\"\": 1}}]}",
                      ORIGIN ": providers[0].options: an option key is empty");
  expect_config_error("{\"implicit_cpu\": false}",
                      ORIGIN ": implicit_cpu: false, but 'providers' lists none: the session "
                             "would have no provider");
}

static void test_placement_errors(void** state) {
  (void)state;
  expect_config_error("{\"placement\": [{\"op_type\": \"Conv\", \"node\": \"n\", \"provider\": "
                      "\"cpu\"}]}",
                      ORIGIN ": placement[0]: give exactly one of 'op_type' and 'node'");
  expect_config_error("{\"placement\": [{\"provider\": \"cpu\"}]}",
                      ORIGIN ": placement[0]: give exactly one of 'op_type' and 'node'");
  expect_config_error("{\"placement\": [{\"op_type\": \"Conv\"}]}",
                      ORIGIN ": placement[0]: missing required key 'provider'");
  expect_config_error("{\"placement\": [{\"op_type\": \"Conv\", \"provider\": \"cuda\"}]}",
                      ORIGIN ": placement[0].provider: provider 'cuda' is not listed in "
                             "'providers'");
  expect_config_error("{\"providers\": [{\"name\": \"cuda\"}], \"implicit_cpu\": false, "
                      "\"placement\": [{\"op_type\": \"Conv\", \"provider\": \"cpu\"}]}",
                      ORIGIN ": placement[0].provider: provider 'cpu' is not available: "
                             "'implicit_cpu' is false and 'cpu' is not listed in 'providers'");
  expect_config_error("{\"placement\": [{\"op_type\": \"Conv\", \"provider\": \"cpu\"}, "
                      "{\"node\": \"a\", \"provider\": \"cpu\"}, "
                      "{\"op_type\": \"Conv\", \"provider\": \"cpu\"}]}",
                      ORIGIN ": placement[2]: op_type 'Conv' is already pinned by placement[0]");
  expect_config_error("{\"placement\": [{\"node\": 3, \"provider\": \"cpu\"}]}",
                      ORIGIN ": placement[0].node: expected a string, got an integer");
  expect_config_error("{\"placement\": {}}",
                      ORIGIN ": placement: expected an array, got an object");
}

/* A failed load leaves the options exactly as they were. */
static void test_error_leaves_options_unchanged(void** state) {
  (void)state;
  OnyxSessionOptions* o = fresh();
  assert_null(onyx_session_options_set_threads(o, 3));
  assert_null(onyx_session_options_add_provider(o, "mine", NULL, 1, 0));
  assert_null(onyx_session_options_set_provider_option(o, "mine", "k", "v"));
  const char* bad = "{\"session\": {\"threads\": 5, \"deterministic\": true},"
                    " \"fallback\": \"deny\", \"providers\": [{\"name\": \"cuda\"}],"
                    " \"placement\": [{\"op_type\": \"Conv\", \"provider\": \"nope\"}]}";
  OnyxStatus* st = onyx_session_options_load_config_text(o, bad, strlen(bad), ORIGIN);
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_INVALID_CONFIG);
  ox_status_free(st);
  assert_int_equal(o->threads, 3);
  assert_false(o->deterministic);
  assert_false(o->fallback_deny);
  assert_int_equal(o->n_providers, 1);
  assert_string_equal(o->providers[0].name, "mine");
  assert_int_equal(o->providers[0].device, 1);
  assert_string_equal(ox_options_get(&o->providers[0].options, "k"), "v");
  assert_int_equal(o->n_pins, 0);
  onyx_session_options_release(o);
}

static void test_null_arguments(void** state) {
  (void)state;
  OnyxSessionOptions* o = fresh();
  OnyxStatus* st = onyx_session_options_load_config_text(o, NULL, 0, ORIGIN);
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_INVALID_ARGUMENT);
  ox_status_free(st);
  st = onyx_session_options_load_config(NULL, "x.json");
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_INVALID_ARGUMENT);
  ox_status_free(st);
  /* No origin: messages still say where. */
  st = onyx_session_options_load_config_text(o, "{\"x\": 1}", 8, NULL);
  assert_non_null(st);
  assert_string_equal(st->message, "<config>: x: unknown key (expected one of 'providers', "
                                   "'placement', 'fallback', 'implicit_cpu', 'session')");
  ox_status_free(st);
  onyx_session_options_release(o);
}

static int make_dir(void** state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/onyx_test_config_XXXXXX");
  return mkdtemp(g_dir) ? 0 : -1;
}

static int remove_dir(void** state) {
  (void)state;
  return rmdir(g_dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_architecture_example),
      cmocka_unit_test(test_every_session_key),
      cmocka_unit_test(test_enum_names),
      cmocka_unit_test(test_option_values_become_text),
      cmocka_unit_test(test_provider_fields),
      cmocka_unit_test(test_pins),
      cmocka_unit_test(test_file_overrides_code_settings),
      cmocka_unit_test(test_load_from_file),
      cmocka_unit_test(test_syntax_error_has_line_and_column),
      cmocka_unit_test(test_duplicate_json_key),
      cmocka_unit_test(test_missing_file),
      cmocka_unit_test(test_unknown_keys),
      cmocka_unit_test(test_wrong_types),
      cmocka_unit_test(test_out_of_range),
      cmocka_unit_test(test_bad_enum_values_list_the_allowed),
      cmocka_unit_test(test_provider_errors),
      cmocka_unit_test(test_placement_errors),
      cmocka_unit_test(test_error_leaves_options_unchanged),
      cmocka_unit_test(test_null_arguments),
  };
  return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
