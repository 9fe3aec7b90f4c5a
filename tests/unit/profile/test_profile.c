/* test_profile.c — the Chrome-trace profile (parsed back with jansson), the
 * `onyx run --profile` flag, and the debug dumps switched on by environment
 * variables (docs/debugging.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "onyx/onyx.h"
#include "ox_test_models.h"

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

/* y = Relu(x + b): x float[2,3], b float[3] = [1, -2, 0.5]. */
static OxTestModel* add_relu(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_initializer(m, "b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, (float[]){1, -2, 0.5f});
  otm_node(m, "Add", "add", "x,b", "s");
  otm_node(m, "Relu", "relu", "s", "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  return m;
}

static OnyxSession* session_with(const OnyxSessionOptions* o) {
  OxTestModel* m = add_relu();
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  free(bytes);
  return s;
}

static void run_once(OnyxSession* s, const OnyxRunOptions* r) {
  OnyxValue* x = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){2, 3}, 2,
                              (float[]){0, 1, 2, -3, 4, -5}, 6 * sizeof(float), &x));
  const char* in = "x";
  const char* out = "y";
  OnyxValue* y = NULL;
  ok(onyx_session_run(s, r, &in, (const OnyxValue* const*)&x, 1, &out, 1, &y));
  onyx_value_release(y);
  onyx_value_release(x);
}

static char* temp_path(const char* suffix) {
  char* p = malloc(256);
  snprintf(p, 256, "/tmp/onyx_test_profile_%d_%s", (int)getpid(), suffix);
  return p;
}

/* Events of category `cat` named `name`. */
static size_t count_events(const json_t* events, const char* cat, const char* name) {
  size_t n = 0, i;
  json_t* e;
  json_array_foreach(events, i, e) {
    const char* c = json_string_value(json_object_get(e, "cat"));
    const char* nm = json_string_value(json_object_get(e, "name"));
    if (c && !strcmp(c, cat) && (!name || (nm && !strcmp(nm, name)))) n++;
  }
  return n;
}

static const json_t* find_event(const json_t* events, const char* cat, const char* name) {
  size_t i;
  json_t* e;
  json_array_foreach(events, i, e) {
    const char* c = json_string_value(json_object_get(e, "cat"));
    const char* nm = json_string_value(json_object_get(e, "name"));
    if (c && nm && !strcmp(c, cat) && !strcmp(nm, name)) return e;
  }
  return NULL;
}

static json_t* load_trace(const char* path) {
  json_error_t err;
  json_t* root = json_load_file(path, 0, &err);
  if (!root) fail_msg("%s:%d: %s", path, err.line, err.text);
  return root;
}

static void check_complete(const json_t* e) {
  assert_non_null(e);
  assert_string_equal(json_string_value(json_object_get(e, "ph")), "X");
  assert_true(json_is_number(json_object_get(e, "ts")));
  assert_true(json_number_value(json_object_get(e, "dur")) >= 0);
  assert_true(json_is_integer(json_object_get(e, "pid")));
  assert_true(json_is_integer(json_object_get(e, "tid")));
}

static void test_profile_nodes_and_runs(void** state) {
  (void)state;
  char* path = temp_path("trace.json");
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_profile(o, path));
  OnyxSession* s = session_with(o);
  onyx_session_options_release(o);
  OnyxRunOptions* r = NULL;
  ok(onyx_run_options_create(&r));
  ok(onyx_run_options_set_tag(r, "req-42"));
  run_once(s, NULL);
  run_once(s, r);
  /* Valid after every event, before the session is released. */
  json_t* root = load_trace(path);
  const json_t* ev = json_object_get(root, "traceEvents");
  assert_true(json_is_array(ev));
  assert_int_equal(count_events(ev, "node", "add"), 2);
  assert_int_equal(count_events(ev, "node", "relu"), 2);
  assert_int_equal(count_events(ev, "run", NULL), 2);
  const json_t* add = find_event(ev, "node", "add");
  check_complete(add);
  const json_t* args = json_object_get(add, "args");
  assert_string_equal(json_string_value(json_object_get(args, "op")), "Add");
  assert_string_equal(json_string_value(json_object_get(args, "provider")), "cpu");
  const json_t* shapes = json_object_get(args, "input_shapes");
  assert_int_equal(json_array_size(shapes), 2);
  assert_string_equal(json_string_value(json_array_get(shapes, 0)), "float32[2,3]");
  assert_string_equal(json_string_value(json_array_get(shapes, 1)), "float32[3]");
  assert_string_equal(json_string_value(json_array_get(json_object_get(args, "output_shapes"), 0)),
                      "float32[2,3]");
  /* The tagged run: its run event is named by the tag, its nodes carry it. */
  const json_t* tagged = find_event(ev, "run", "req-42");
  check_complete(tagged);
  size_t i, tagged_nodes = 0;
  json_t* e;
  json_array_foreach(ev, i, e) {
    const char* t = json_string_value(json_object_get(json_object_get(e, "args"), "run_tag"));
    if (t && !strcmp(t, "req-42")) tagged_nodes++;
  }
  assert_int_equal(tagged_nodes, 3); /* add, relu and the run itself */
  /* Nodes lie inside their run. */
  double rs = json_number_value(json_object_get(tagged, "ts"));
  double re = rs + json_number_value(json_object_get(tagged, "dur"));
  json_array_foreach(ev, i, e) {
    const char* t = json_string_value(json_object_get(json_object_get(e, "args"), "run_tag"));
    if (!t) continue;
    double ts = json_number_value(json_object_get(e, "ts"));
    assert_true(ts >= rs && ts <= re);
  }
  json_decref(root);
  onyx_run_options_release(r);
  onyx_session_release(s);
  unlink(path);
  free(path);
}

/* The session's phases appear once the session build records them (see the
 * report: the recording calls live in session_create.c). */
static void test_profile_session_phases(void** state) {
  (void)state;
  char* path = temp_path("phases.json");
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_profile(o, path));
  OnyxSession* s = session_with(o);
  onyx_session_options_release(o);
  run_once(s, NULL);
  onyx_session_release(s);
  json_t* root = load_trace(path);
  const json_t* ev = json_object_get(root, "traceEvents");
  if (!count_events(ev, "session", NULL)) {
    json_decref(root);
    unlink(path);
    free(path);
    skip(); /* the phase hooks are not in session_create.c yet */
  }
  const char* phases[] = {"load", "partition", "plan"};
  for (size_t k = 0; k < 3; k++) {
    const json_t* p = find_event(ev, "session", phases[k]);
    if (!p) fail_msg("no session phase '%s' in the profile", phases[k]);
    check_complete(p);
  }
  /* Phases come before the first node. */
  double plan_end = json_number_value(json_object_get(find_event(ev, "session", "plan"), "ts"));
  assert_true(json_number_value(json_object_get(find_event(ev, "node", "add"), "ts")) >= plan_end);
  json_decref(root);
  unlink(path);
  free(path);
}

static void test_profile_unwritable_path_is_not_fatal(void** state) {
  (void)state;
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_log_severity(o, ONYX_LOG_FATAL)); /* quiet */
  ok(onyx_session_options_set_profile(o, "/nonexistent-dir/x/trace.json"));
  OnyxSession* s = session_with(o);
  onyx_session_options_release(o);
  run_once(s, NULL);
  onyx_session_release(s);
}

/* `onyx run MODEL --profile FILE` */
static void test_cli_profile(void** state) {
  (void)state;
  const char* bin = getenv("ONYX_BINARY_DIR");
  if (!bin) skip();
  char* model = temp_path("model.onnx");
  char* trace = temp_path("cli.json");
  OxTestModel* m = add_relu();
  otm_write(m, model);
  otm_free(m);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s/bin/onyx run %s --profile %s >/dev/null", bin, model, trace);
  assert_int_equal(system(cmd), 0);
  json_t* root = load_trace(trace);
  const json_t* ev = json_object_get(root, "traceEvents");
  assert_int_equal(count_events(ev, "node", "add"), 1);
  assert_int_equal(count_events(ev, "node", "relu"), 1);
  check_complete(find_event(ev, "node", "relu"));
  json_decref(root);
  unlink(model);
  unlink(trace);
  free(model);
  free(trace);
}

/* --- debug dumps --------------------------------------------------------------------- */
/* Runs f with stderr sent to a file; returns what was written. */
static char* capture_stderr(void (*f)(void)) {
  char* path = temp_path("stderr.txt");
  fflush(stderr);
  int saved = dup(2);
  int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
  assert_true(fd >= 0 && saved >= 0);
  dup2(fd, 2);
  close(fd);
  f();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  FILE* in = fopen(path, "rb");
  assert_non_null(in);
  char* text = calloc(1, 1 << 16);
  size_t n = fread(text, 1, (1 << 16) - 1, in);
  text[n] = '\0';
  fclose(in);
  unlink(path);
  free(path);
  return text;
}

static void session_and_run(void) {
  OnyxSession* s = session_with(NULL);
  run_once(s, NULL);
  run_once(s, NULL);
  onyx_session_release(s);
}

static void test_dump_nodes_filtered(void** state) {
  (void)state;
  setenv("ONYX_DUMP_NODES", "1", 1);
  setenv("ONYX_DUMP_OP_FILTER", "Add", 1);
  char* text = capture_stderr(session_and_run);
  unsetenv("ONYX_DUMP_NODES");
  unsetenv("ONYX_DUMP_OP_FILTER");
  /* x + b = [0+1, 1-2, 2+.5, -3+1, 4-2, -5+.5] */
  if (!strstr(text, "node 'add' (Add) on cpu: inputs"))
    fail_msg("no input dump of 'add' in:\n%s", text);
  assert_non_null(strstr(text, "input 0 'x': float32[2,3] = 0 1 2 -3 4 -5"));
  assert_non_null(strstr(text, "input 1 'b': float32[3] = 1 -2 0.5"));
  assert_non_null(strstr(text, "output 0 's': float32[2,3] = 1 -1 2.5 -2 2 -4.5"));
  assert_null(strstr(text, "'relu'")); /* filtered out by op type */
  free(text);
  setenv("ONYX_DUMP_NODES", "outputs", 1);
  setenv("ONYX_DUMP_NODE_FILTER", "relu", 1);
  setenv("ONYX_DUMP_MAX_VALUES", "2", 1);
  text = capture_stderr(session_and_run);
  unsetenv("ONYX_DUMP_NODES");
  unsetenv("ONYX_DUMP_NODE_FILTER");
  unsetenv("ONYX_DUMP_MAX_VALUES");
  assert_null(strstr(text, "'add'"));
  assert_null(strstr(text, ": inputs"));
  /* relu(s) = [1,0,2.5,0,2,0], two values shown */
  if (!strstr(text, "output 0 'y': float32[2,3] = 1 0 ... (6 values)"))
    fail_msg("no output dump of 'relu' in:\n%s", text);
  free(text);
}

static void test_dump_plans(void** state) {
  (void)state;
  setenv("ONYX_DUMP_PLAN", "1", 1);
  setenv("ONYX_DUMP_MEMORY_PLAN", "1", 1);
  char* text = capture_stderr(session_and_run);
  unsetenv("ONYX_DUMP_PLAN");
  unsetenv("ONYX_DUMP_MEMORY_PLAN");
  if (!strstr(text, "execution plan of <memory>: 2 steps"))
    fail_msg("no execution plan in:\n%s", text);
  assert_non_null(strstr(text, "kernel 'add' (Add) on cpu"));
  assert_non_null(strstr(text, "kernel 'relu' (Relu) on cpu"));
  assert_non_null(strstr(text, "memory plan of <memory>"));
  assert_non_null(strstr(text, "(graph input)"));
  assert_non_null(strstr(text, "(constant)"));
  /* Written once per session, although it ran twice. */
  const char* first = strstr(text, "execution plan of");
  assert_null(strstr(first + 1, "execution plan of"));
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_profile_nodes_and_runs),
      cmocka_unit_test(test_profile_session_phases),
      cmocka_unit_test(test_profile_unwritable_path_is_not_fatal),
      cmocka_unit_test(test_cli_profile),
      cmocka_unit_test(test_dump_nodes_filtered),
      cmocka_unit_test(test_dump_plans),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
