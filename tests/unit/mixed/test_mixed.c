/* test_mixed.c — mixed placement through the public API only: the fake
 * provider (tests/providers/fake) takes some nodes of a graph, the CPU the
 * rest. The fake device's allocator tracks its buffers and its kernels refuse
 * inputs outside them, so a run that succeeds proves the host inserted the
 * copies; the counters come back through the "stats_file" option.
 *
 * Messages are the host's; tests assert on key words (provider, node,
 * "convex"), not on sentences. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "onyx/onyx.h"
#include "ox_test_models.h"

/* --- the model: X[2,3] -> MatMul(W) -> Add(B) -> Relu -> Sigmoid [-> Tanh] -> Softmax --- */

static const float X_DATA[6] = {1.0f, -2.0f, 0.5f, -1.0f, 3.0f, 2.0f};
static const float W_DATA[12] = {0.5f,  -1.0f, 2.0f,  0.0f,  1.5f, 0.25f,
                                 -0.5f, 1.0f,  -2.0f, 0.75f, 1.0f, -0.3f};
static const float B_DATA[4] = {0.1f, -0.2f, 0.3f, -5.0f};

typedef struct Model {
  uint8_t* bytes;
  size_t len;
} Model;

static Model chain_model(bool with_tanh) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 4}, W_DATA);
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4}, B_DATA);
  otm_node(m, "MatMul", "matmul0", "X,W", "mm");
  otm_node(m, "Add", "add0", "mm,B", "sum"); /* trailing-dim broadcast [2,4] + [4] */
  otm_node(m, "Relu", "relu0", "sum", "r");
  otm_node(m, "Sigmoid", "sigmoid0", "r", "sg");
  if (with_tanh) otm_node(m, "Tanh", "tanh0", "sg", "th");
  otm_node(m, "Softmax", "softmax0", with_tanh ? "th" : "sg", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 4});
  Model out;
  otm_serialize(m, &out.bytes, &out.len);
  otm_free(m);
  return out;
}

/* X -> Add(B2) -> Relu -> Y: every node is one the fake device can run. */
static Model fake_only_model(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_initializer(m, "B2", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, (float[]){1.0f, -1.0f, 0.5f});
  otm_node(m, "Add", "add0", "X,B2", "sum");
  otm_node(m, "Relu", "relu0", "sum", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  Model out;
  otm_serialize(m, &out.bytes, &out.len);
  otm_free(m);
  return out;
}

/* The chain computed by hand, in double, independently of any provider. */
static void chain_reference(bool with_tanh, double y[8]) {
  for (int i = 0; i < 2; i++) {
    double row[4], max = -INFINITY, sum = 0;
    for (int j = 0; j < 4; j++) {
      double acc = B_DATA[j];
      for (int k = 0; k < 3; k++)
        acc += (double)X_DATA[i * 3 + k] * W_DATA[k * 4 + j];
      double v = 1.0 / (1.0 + exp(-(acc > 0 ? acc : 0)));
      row[j] = with_tanh ? tanh(v) : v;
      if (row[j] > max) max = row[j];
    }
    for (int j = 0; j < 4; j++)
      sum += exp(row[j] - max);
    for (int j = 0; j < 4; j++)
      y[i * 4 + j] = exp(row[j] - max) / sum;
  }
}

/* --- sessions ------------------------------------------------------------------------ */

typedef struct Log {
  char text[8192];
  int warnings;
} Log;

static void log_capture(void* user, OnyxLogSeverity sev, const char* message) {
  Log* log = user;
  if (sev >= ONYX_LOG_WARNING) log->warnings++;
  size_t used = strlen(log->text);
  snprintf(log->text + used, sizeof log->text - used, "%s\n", message);
}

/* config NULL: the CPU provider alone. Optimizations are off so that the
 * nodes the tests name stay as built (no MatMul+Add -> Gemm). */
static OnyxStatus* session_new(const char* config, const Model* model, Log* log,
                               OnyxSession** out) {
  OnyxSessionOptions* opts = NULL;
  OnyxStatus* st = onyx_session_options_create(&opts);
  if (!st && config)
    st = onyx_session_options_load_config_text(opts, config, strlen(config), "test config");
  if (!st) st = onyx_session_options_set_optimization_level(opts, ONYX_OPT_DISABLED);
  if (!st && log) st = onyx_session_options_set_log_callback(opts, log_capture, log);
  if (!st) st = onyx_session_create_from_bytes(opts, model->bytes, model->len, NULL, out);
  onyx_session_options_release(opts);
  return st;
}

static OnyxSession* session_ok(const char* config, const Model* model, Log* log) {
  OnyxSession* s = NULL;
  OnyxStatus* st = session_new(config, model, log, &s);
  if (st) fail_msg("session creation failed: %s", onyx_status_message(st));
  return s;
}

/* Runs X_DATA through the session; y receives `n` floats. */
static OnyxStatus* run_x(OnyxSession* s, float* y, size_t n) {
  OnyxValue* in = NULL;
  OnyxValue* out = NULL;
  const char* in_name = "X";
  const char* out_name = "Y";
  OnyxStatus* st =
      onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){2, 3}, 2, X_DATA, sizeof X_DATA, &in);
  if (!st)
    st = onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &out);
  if (!st) {
    const OnyxTensor* t = onyx_value_tensor(out);
    assert_non_null(t);
    assert_int_equal(onyx_tensor_elem_count(t), n);
    assert_int_equal(onyx_tensor_memory(t)->kind, ONYX_DEVICE_CPU);
    memcpy(y, onyx_tensor_data(t), n * sizeof *y);
  }
  onyx_values_release(&out, 1);
  onyx_value_release(in);
  return st;
}

static void run_ok(OnyxSession* s, float* y, size_t n) {
  OnyxStatus* st = run_x(s, y, n);
  if (st) fail_msg("run failed: %s", onyx_status_message(st));
}

static void cpu_outputs(const Model* model, float y[8]) {
  OnyxSession* s = session_ok(NULL, model, NULL);
  run_ok(s, y, 8);
  onyx_session_release(s);
}

static void assert_close(const float* got, const float* want, size_t n, double tol) {
  for (size_t i = 0; i < n; i++)
    if (!(fabs((double)got[i] - (double)want[i]) <= tol))
      fail_msg("element %zu: got %.9g, want %.9g", i, got[i], want[i]);
}

static void assert_close_ref(const float* got, const double* want, size_t n, double tol) {
  for (size_t i = 0; i < n; i++)
    if (!(fabs((double)got[i] - want[i]) <= tol))
      fail_msg("element %zu: got %.9g, reference %.9g", i, got[i], want[i]);
}

/* Nodes placed on `provider`; SIZE_MAX if the session does not use it. */
static size_t nodes_on(const OnyxSession* s, const char* provider) {
  for (size_t i = 0; i < onyx_session_provider_count(s); i++)
    if (strcmp(onyx_session_provider_name(s, i), provider) == 0)
      return onyx_session_provider_node_count(s, i);
  return SIZE_MAX;
}

static char* explain(const OnyxSession* s) {
  char* text = NULL;
  OnyxStatus* st = onyx_session_explain(s, &text);
  if (st) fail_msg("explain failed: %s", onyx_status_message(st));
  assert_non_null(text);
  return text;
}

/* Where the explain line of `node` starts ("  relu0  Relu  v14 -> fake"). */
static const char* explain_find(const char* text, const char* node) {
  size_t n = strlen(node);
  for (const char* p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    const char* q = p;
    while (*q == ' ')
      q++;
    if (strncmp(q, node, n) == 0 && q[n] == ' ') return p;
  }
  return NULL;
}

/* The explain line of `node`, copied into line; false if there is none. */
static bool explain_line(const char* text, const char* node, char* line, size_t cap) {
  const char* p = explain_find(text, node);
  if (!p) return false;
  size_t len = strcspn(p, "\n");
  snprintf(line, cap, "%.*s", (int)(len < cap ? len : cap - 1), p);
  return true;
}

/* The node's line and the more deeply indented lines under it (its
 * declines), copied into block. */
static bool explain_block(const char* text, const char* node, char* block, size_t cap) {
  const char* p = explain_find(text, node);
  if (!p) return false;
  const char* end = strchr(p, '\n');
  while (end && strncmp(end, "\n      ", 7) == 0)
    end = strchr(end + 1, '\n');
  size_t len = end ? (size_t)(end - p) : strlen(p);
  snprintf(block, cap, "%.*s", (int)(len < cap ? len : cap - 1), p);
  return true;
}

static void assert_placed(const char* text, const char* node, const char* provider) {
  char line[512], want[64];
  if (!explain_line(text, node, line, sizeof line))
    fail_msg("explain has no line for node '%s':\n%s", node, text);
  snprintf(want, sizeof want, "-> %s", provider);
  const char* at = strstr(line, want);
  char after = at ? at[strlen(want)] : '\0';
  if (!at || (after != '\0' && after != ' '))
    fail_msg("node '%s' is not placed on '%s': %s", node, provider, line);
}

/* The node count explain gives for `provider` ("  1. fake   2 nodes  [...]"). */
static long explain_node_count(const char* text, const char* provider) {
  for (const char* p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    char name[64];
    long count;
    if (sscanf(p, " %*u. %63s %ld nodes", name, &count) == 2 && strcmp(name, provider) == 0)
      return count;
  }
  return -1;
}

/* A line of the copies section that moves `value` from a memory of
 * provider `from` to one of provider `to`. */
static bool has_copy(const char* text, const char* value, const char* from, const char* to) {
  const char* sec = strstr(text, "\ncopies:");
  char quoted[128];
  snprintf(quoted, sizeof quoted, "'%s'", value);
  for (const char* p = sec; p && *p; p = strchr(p + 1, '\n')) {
    char line[512];
    size_t len = strcspn(p + 1, "\n");
    snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p + 1);
    char* arrow = strstr(line, "->");
    if (!arrow || !strstr(line, quoted)) continue;
    *arrow = '\0';
    if (strstr(line, from) && strstr(arrow + 2, to)) return true;
  }
  return false;
}

/* --- the fake provider's stats file ---------------------------------------------------- */

typedef struct Ctx {
  char* dir;
  char stats[512];
  char config[2048];
} Ctx;

static int ctx_setup(void** state) {
  Ctx* c = calloc(1, sizeof *c);
  if (!c) return -1;
  c->dir = otm_temp_dir();
  if (!c->dir) {
    free(c);
    return -1;
  }
  snprintf(c->stats, sizeof c->stats, "%s/stats.txt", c->dir);
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

/* A config with the fake provider (options as JSON members, may be ""),
 * then the CPU listed or appended implicitly, plus `extra` top-level members
 * (may be ""). */
static const char* fake_config_cpu(Ctx* c, const char* options, bool list_cpu, const char* extra) {
  snprintf(c->config, sizeof c->config,
           "{\"providers\": [{\"name\": \"fake\", \"options\": {\"stats_file\": \"%s\"%s%s}}%s]"
           "%s%s}",
           c->stats, options[0] ? ", " : "", options, list_cpu ? ", {\"name\": \"cpu\"}" : "",
           extra[0] ? ", " : "", extra);
  return c->config;
}

static const char* fake_config(Ctx* c, const char* options, const char* extra) {
  return fake_config_cpu(c, options, true, extra);
}

/* The value of `key` in the stats file the fake EP wrote at release. */
static long stat_of(const Ctx* c, const char* key) {
  FILE* f = fopen(c->stats, "r");
  if (!f) fail_msg("the fake provider wrote no stats file at %s", c->stats);
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

/* --- (a) the chain on fake + cpu equals the CPU alone ------------------------------------ */

static void test_chain_matches_cpu(void** state) {
  Ctx* c = *state;
  Model model = chain_model(false);
  float want[8], got[8];
  double ref[8];
  cpu_outputs(&model, want);
  chain_reference(false, ref);
  assert_close_ref(want, ref, 8, 1e-5);

  OnyxSession* s = session_ok(fake_config(c, "", ""), &model, NULL);
  /* Default ops are Add, Mul, Relu: add0 and relu0 on fake, the rest on cpu. */
  assert_int_equal(nodes_on(s, "fake"), 2);
  assert_int_equal(nodes_on(s, "cpu"), 3);
  char* text = explain(s);
  assert_placed(text, "matmul0", "cpu");
  assert_placed(text, "add0", "fake");
  assert_placed(text, "relu0", "fake");
  assert_placed(text, "sigmoid0", "cpu");
  assert_placed(text, "softmax0", "cpu");
  assert_int_equal(explain_node_count(text, "fake"), 2);
  assert_int_equal(explain_node_count(text, "cpu"), 3);
  if (!has_copy(text, "mm", "cpu", "fake") || !has_copy(text, "r", "fake", "cpu"))
    fail_msg("explain lacks the copies cpu -> fake of 'mm' and fake -> cpu of 'r':\n%s", text);
  if (!has_copy(text, "B", "", "fake")) fail_msg("constant 'B' is not copied to fake:\n%s", text);
  onyx_free(text);

  const int runs = 3;
  for (int r = 0; r < runs; r++) {
    memset(got, 0, sizeof got);
    run_ok(s, got, 8);
    assert_close(got, want, 8, 1e-6);
  }
  onyx_session_release(s);

  assert_int_equal(stat_of(c, "kernels_run"), 2 * runs);
  assert_true(stat_of(c, "copies_in") >= runs + 1); /* mm every run, B at least once */
  assert_true(stat_of(c, "copies_out") >= runs);    /* r every run */
  assert_int_equal(stat_of(c, "live"), 0);
  assert_int_equal(stat_of(c, "allocs"), stat_of(c, "frees"));
  assert_true(stat_of(c, "allocs") > 0);
  assert_int_equal(stat_of(c, "compiled_groups"), 0);
  /* The fake EP has streams: the host creates one and syncs it every run. */
  assert_int_equal(stat_of(c, "streams"), 1);
  assert_true(stat_of(c, "syncs") >= runs);
  free(model.bytes);
}

/* --- (b) a fused group compiled into one kernel ------------------------------------------- */

static void test_fused_group(void** state) {
  Ctx* c = *state;
  /* Without Add in "fuse", add0 runs singly beside the group; with it, the
   * group also takes add0 and with it the broadcast constant B as an input. */
  static const struct {
    const char* options;
    const char* group_members[4];
    long kernels_per_run;
  } cases[] = {
      {"\"fuse\": \"Relu,Sigmoid,Tanh\"", {"relu0", "sigmoid0", "tanh0", NULL}, 2},
      {"\"fuse\": \"Add,Relu,Sigmoid,Tanh\"", {"add0", "relu0", "sigmoid0", "tanh0"}, 1},
  };
  Model model = chain_model(true);
  float want[8], got[8];
  double ref[8];
  cpu_outputs(&model, want);
  chain_reference(true, ref);
  assert_close_ref(want, ref, 8, 1e-5);

  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    OnyxSession* s = session_ok(fake_config(c, cases[i].options, ""), &model, NULL);
    assert_int_equal(nodes_on(s, "fake"), 4);
    char* text = explain(s);
    assert_placed(text, "add0", "fake");
    assert_placed(text, "softmax0", "cpu");
    assert_non_null(strstr(text, "fused groups: 1"));
    for (size_t m = 0; m < 4 && cases[i].group_members[m]; m++) {
      char line[512];
      assert_placed(text, cases[i].group_members[m], "fake");
      assert_true(explain_line(text, cases[i].group_members[m], line, sizeof line));
      if (!strstr(line, "group")) fail_msg("node not in a group: %s", line);
    }
    onyx_free(text);

    run_ok(s, got, 8);
    assert_close(got, want, 8, 1e-6);
    run_ok(s, got, 8);
    assert_close(got, want, 8, 1e-6);
    onyx_session_release(s);

    assert_int_equal(stat_of(c, "compiled_groups"), 1);
    assert_int_equal(stat_of(c, "kernels_run"), 2 * cases[i].kernels_per_run);
    assert_int_equal(stat_of(c, "live"), 0);
    assert_int_equal(stat_of(c, "allocs"), stat_of(c, "frees"));
  }
  free(model.bytes);
}

/* --- (c) declines and their reasons --------------------------------------------------------- */

static void test_declines_explained(void** state) {
  Ctx* c = *state;
  Model model = chain_model(false);
  /* Softmax is asked for but the fake device has no kernel for it: the
   * decline carries the registry's reason after ours. */
  OnyxSession* s = session_ok(
      fake_config(c, "\"ops\": \"Add,Softmax\", \"decline_reason\": \"no silicon for this\"", ""),
      &model, NULL);
  char* text = explain(s);
  assert_placed(text, "add0", "fake");
  assert_placed(text, "relu0", "cpu");
  assert_placed(text, "softmax0", "cpu");
  const char* nodes[] = {"matmul0", "relu0", "sigmoid0", "softmax0"};
  char block[2048];
  for (size_t i = 0; i < 4; i++) {
    assert_true(explain_block(text, nodes[i], block, sizeof block));
    const char* decl = strstr(block, "fake");
    if (!decl || !strstr(decl, "no silicon for this"))
      fail_msg("node '%s' has no decline by fake with the reason:\n%s", nodes[i], text);
  }
  /* Softmax: ours, then the registry's reason in parentheses. */
  assert_true(explain_block(text, "softmax0", block, sizeof block));
  assert_non_null(strstr(block, "no silicon for this ("));
  /* add0 was taken: no decline under it. */
  assert_true(explain_block(text, "add0", block, sizeof block));
  assert_null(strstr(block, "no silicon"));
  onyx_free(text);
  onyx_session_release(s);
  free(model.bytes);
}

/* --- (d) a non-convex claim is refused ------------------------------------------------------- */

static void test_bad_group_refused(void** state) {
  Ctx* c = *state;
  Model model = chain_model(false);
  OnyxSession* s = NULL;
  OnyxStatus* st = session_new(fake_config(c, "\"bad_group\": \"1\"", ""), &model, NULL, &s);
  assert_non_null(st);
  assert_null(s);
  const char* msg = onyx_status_message(st);
  if (!strstr(msg, "fake") || !strstr(msg, "convex")) fail_msg("unexpected message: %s", msg);
  assert_int_equal(onyx_status_code(st), ONYX_PLACEMENT_ERROR);
  onyx_status_release(st);
  /* The refused session still released its EP cleanly. */
  assert_int_equal(stat_of(c, "live"), 0);
  free(model.bytes);
}

/* --- (e) failures ----------------------------------------------------------------------------- */

static void test_compute_failure_then_recovery(void** state) {
  Ctx* c = *state;
  Model model = chain_model(false);
  float want[8], got[8];
  cpu_outputs(&model, want);

  OnyxSession* s = session_ok(fake_config(c, "\"fail\": \"compute\"", ""), &model, NULL);
  OnyxStatus* st = run_x(s, got, 8);
  assert_non_null(st);
  const char* msg = onyx_status_message(st);
  if (!strstr(msg, "fake") || !strstr(msg, "add0")) fail_msg("unexpected message: %s", msg);
  onyx_status_release(st);
  /* The session survives a failed run: the next one fails the same way. */
  st = run_x(s, got, 8);
  assert_non_null(st);
  onyx_status_release(st);
  onyx_session_release(s);
  assert_int_equal(stat_of(c, "live"), 0); /* the failed runs freed what they took */
  assert_int_equal(stat_of(c, "kernels_run"), 0);

  s = session_ok(fake_config(c, "", ""), &model, NULL);
  run_ok(s, got, 8);
  assert_close(got, want, 8, 1e-6);
  onyx_session_release(s);
  assert_int_equal(stat_of(c, "kernels_run"), 2);
  free(model.bytes);
}

/* Each failure the provider injects while a session is created fails the
 * creation with a message naming the provider and the failing step, and
 * leaves no device memory behind. */
static void test_creation_failures(void** state) {
  Ctx* c = *state;
  static const struct {
    const char* options;
    const char* keyword;
  } cases[] = {
      {"\"fail\": \"create_ep\"", "create_ep"},
      {"\"fail\": \"get_capability\"", "get_capability"},
      {"\"fail\": \"compile\", \"fuse\": \"Relu\"", "compile"},
      {"\"fail\": \"alloc\"", "allocat"},
  };
  Model model = chain_model(false);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    remove(c->stats);
    OnyxSession* s = NULL;
    OnyxStatus* st = session_new(fake_config(c, cases[i].options, ""), &model, NULL, &s);
    if (!st) fail_msg("options {%s}: the session was created", cases[i].options);
    assert_null(s);
    const char* msg = onyx_status_message(st);
    if (!strstr(msg, "fake") || !strstr(msg, cases[i].keyword))
      fail_msg("options {%s}: message lacks 'fake' or '%s': %s", cases[i].options, cases[i].keyword,
               msg);
    onyx_status_release(st);
    assert_int_equal(stat_of(c, "live"), 0);
  }
  free(model.bytes);
}

static void test_unknown_option_refused(void** state) {
  Ctx* c = *state;
  Model model = chain_model(false);
  OnyxSession* s = NULL;
  OnyxStatus* st = session_new(fake_config(c, "\"colour\": \"blue\"", ""), &model, NULL, &s);
  assert_non_null(st);
  assert_int_equal(onyx_status_code(st), ONYX_INVALID_CONFIG);
  if (!strstr(onyx_status_message(st), "colour"))
    fail_msg("unexpected message: %s", onyx_status_message(st));
  onyx_status_release(st);
  free(model.bytes);
}

static void test_no_device_required(void** state) {
  Ctx* c = *state;
  Model model = chain_model(false);
  OnyxSession* s = NULL;
  OnyxStatus* st = session_new(fake_config(c, "\"no_device\": \"1\"", ""), &model, NULL, &s);
  assert_non_null(st);
  assert_null(s);
  assert_int_equal(onyx_status_code(st), ONYX_NO_DEVICE);
  const char* msg = onyx_status_message(st);
  if (!strstr(msg, "fake") || !strstr(msg, "unplugged")) fail_msg("unexpected message: %s", msg);
  onyx_status_release(st);
  free(model.bytes);
}

/* device_count receives no options, so the provider's device_count failure is
 * driven by the environment (see fake_provider.c). */
static void test_no_device_optional_runs_on_cpu(void** state) {
  (void)state;
  Model model = chain_model(false);
  float want[8], got[8];
  cpu_outputs(&model, want);
  setenv("ONYX_FAKE_NO_DEVICE", "1", 1);
  OnyxSession* s = NULL;
  OnyxStatus* st = session_new("{\"providers\": [{\"name\": \"fake\"}]}", &model, NULL, &s);
  assert_non_null(st); /* required by default: an error */
  assert_null(s);
  if (!strstr(onyx_status_message(st), "unplugged"))
    fail_msg("unexpected message: %s", onyx_status_message(st));
  onyx_status_release(st);

  const char* cfg = "{\"providers\": [{\"name\": \"fake\", \"required\": false},"
                    " {\"name\": \"cpu\"}]}";

  Log* log = calloc(1, sizeof *log);
  assert_non_null(log);
  st = session_new(cfg, &model, log, &s);
  unsetenv("ONYX_FAKE_NO_DEVICE");
  if (st) fail_msg("optional provider without device: %s", onyx_status_message(st));
  assert_true(nodes_on(s, "fake") == SIZE_MAX || nodes_on(s, "fake") == 0);
  assert_int_equal(nodes_on(s, "cpu"), 5);
  assert_true(log->warnings >= 1);
  if (!strstr(log->text, "fake") || !strstr(log->text, "unplugged"))
    fail_msg("no warning about the missing fake device in the log:\n%s", log->text);
  run_ok(s, got, 8);
  assert_close(got, want, 8, 1e-6);
  onyx_session_release(s);
  free(log);
  free(model.bytes);
}

/* --- (f) fallback "deny"
 * -------------------------------------------------------------------------- */

static void test_fallback_deny(void** state) {
  Ctx* c = *state;
  Model model = chain_model(false);
  OnyxSession* s = NULL;
  OnyxStatus* st =
      session_new(fake_config_cpu(c, "", false, "\"fallback\": \"deny\""), &model, NULL, &s);
  assert_non_null(st);
  assert_null(s);
  assert_int_equal(onyx_status_code(st), ONYX_PLACEMENT_ERROR);
  const char* msg = onyx_status_message(st);
  /* matmul0 is the first node only the CPU runs. */
  if (!strstr(msg, "matmul0") && !strstr(msg, "sigmoid0") && !strstr(msg, "softmax0"))
    fail_msg("the error names no node left to the CPU: %s", msg);
  onyx_status_release(st);
  free(model.bytes);

  /* A model the fake device runs entirely passes under "deny". */
  model = fake_only_model();
  s = session_ok(fake_config_cpu(c, "", false, "\"fallback\": \"deny\""), &model, NULL);
  assert_int_equal(nodes_on(s, "fake"), 2);
  float got[6];
  run_ok(s, got, 6);
  const float want[6] = {2.0f, 0.0f, 1.0f, 0.0f, 2.0f, 2.5f}; /* relu(X + [1,-1,0.5]) */
  assert_close(got, want, 6, 0.0);
  onyx_session_release(s);
  free(model.bytes);
}

/* --- (g) pins ------------------------------------------------------------------------------------
 */

static void test_pin_relu_to_cpu(void** state) {
  Ctx* c = *state;
  Model model = chain_model(false);
  float want[8], got[8];
  cpu_outputs(&model, want);
  OnyxSession* s = session_ok(
      fake_config(c, "", "\"placement\": [{\"op_type\": \"Relu\", \"provider\": \"cpu\"}]"), &model,
      NULL);
  assert_int_equal(nodes_on(s, "fake"), 1);
  char* text = explain(s);
  assert_placed(text, "add0", "fake");
  assert_placed(text, "relu0", "cpu");
  assert_true(has_copy(text, "sum", "fake", "cpu"));
  onyx_free(text);
  run_ok(s, got, 8);
  assert_close(got, want, 8, 1e-6);
  onyx_session_release(s);
  assert_int_equal(stat_of(c, "kernels_run"), 1);
  free(model.bytes);
}

/* A cheap node whose input lives on the CPU stays there (no ping-pong). */
static void test_cheap_relu_stays_on_cpu(void** state) {
  Ctx* c = *state;
  Model model = chain_model(false);
  OnyxSession* s =
      session_ok(fake_config(c, "\"ops\": \"Relu\", \"cheap_relu\": \"1\"", ""), &model, NULL);
  char* text = explain(s);
  assert_placed(text, "relu0", "cpu");
  onyx_free(text);
  onyx_session_release(s);
  assert_int_equal(stat_of(c, "copies_in") + stat_of(c, "copies_out"), 0);
  free(model.bytes);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_chain_matches_cpu, ctx_setup, ctx_teardown),
      cmocka_unit_test_setup_teardown(test_fused_group, ctx_setup, ctx_teardown),
      cmocka_unit_test_setup_teardown(test_declines_explained, ctx_setup, ctx_teardown),
      cmocka_unit_test_setup_teardown(test_bad_group_refused, ctx_setup, ctx_teardown),
      cmocka_unit_test_setup_teardown(test_compute_failure_then_recovery, ctx_setup, ctx_teardown),
      cmocka_unit_test_setup_teardown(test_creation_failures, ctx_setup, ctx_teardown),
      cmocka_unit_test_setup_teardown(test_unknown_option_refused, ctx_setup, ctx_teardown),
      cmocka_unit_test_setup_teardown(test_no_device_required, ctx_setup, ctx_teardown),
      cmocka_unit_test_setup_teardown(test_no_device_optional_runs_on_cpu, ctx_setup, ctx_teardown),
      cmocka_unit_test_setup_teardown(test_fallback_deny, ctx_setup, ctx_teardown),
      cmocka_unit_test_setup_teardown(test_pin_relu_to_cpu, ctx_setup, ctx_teardown),
      cmocka_unit_test_setup_teardown(test_cheap_relu_stays_on_cpu, ctx_setup, ctx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
