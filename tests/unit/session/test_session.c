/* test_session.c — sessions through the public API (onyx.h) with the CPU
 * provider: outputs of small models against hand-computed values, and the
 * bad-input catalogue of the spine: every case is a clear error, no crash,
 * no leak (run under ASan in CI). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "onyx/onyx.h"
#include "onyx/onyx_ep.h"
#include "ox_test_models.h"

static void expect_error(OnyxStatus* st, OnyxStatusCode code, const char* needle) {
  if (!st) fail_msg("expected an error containing '%s', got success", needle);
  if (code != ONYX_OK && onyx_status_code(st) != code)
    fail_msg("expected code %s, got %s: %s", onyx_status_code_name(code),
             onyx_status_code_name(onyx_status_code(st)), onyx_status_message(st));
  if (!strstr(onyx_status_message(st), needle))
    fail_msg("'%s' not in '%s'", needle, onyx_status_message(st));
  onyx_status_release(st);
}

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

/* y = Relu(x + b), x: float[2,3], b: float[3] (an initializer, broadcast). */
static OxTestModel* add_relu_model(int64_t opset) {
  OxTestModel* m = otm_new(opset);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_initializer(m, "b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, (float[]){1, -2, 0.5f});
  otm_node(m, "Add", "add", "x,b", "s");
  otm_node(m, "Relu", "relu", "s", "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  return m;
}

static OnyxSession* session_from(OxTestModel* m, const OnyxSessionOptions* o, OnyxStatus** err) {
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  OnyxSession* s = NULL;
  *err = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  free(bytes);
  return s;
}

static OnyxValue* f32(const int64_t* dims, size_t rank, const float* data, size_t n) {
  OnyxValue* v = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dims, rank, data, n * sizeof(float), &v));
  return v;
}

static const float X[6] = {0, 1, 2, -3, 4, -5};
static const float Y[6] = {1, 0, 2.5f, 0, 2, 0}; /* relu(X + [1,-2,.5]) by hand */

static void run_add_relu(OnyxSession* s) {
  OnyxValue* x = f32((int64_t[]){2, 3}, 2, X, 6);
  const char* in = "x";
  const char* out = "y";
  OnyxValue* y = NULL;
  ok(onyx_session_run(s, NULL, &in, (const OnyxValue* const*)&x, 1, &out, 1, &y));
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_elem_type(t), ONYX_ELEM_FLOAT32);
  assert_int_equal(onyx_tensor_rank(t), 2);
  assert_int_equal(onyx_tensor_dims(t)[0], 2);
  assert_int_equal(onyx_tensor_dims(t)[1], 3);
  const float* d = onyx_tensor_data(t);
  for (int i = 0; i < 6; i++)
    assert_float_equal(d[i], Y[i], 0);
  onyx_values_release(&y, 1);
  assert_null(y);
  onyx_value_release(x);
}

static void test_add_relu_runs_on_cpu(void** state) {
  (void)state;
  OxTestModel* m = add_relu_model(17);
  OnyxStatus* st;
  OnyxSession* s = session_from(m, NULL, &st);
  ok(st);
  assert_int_equal(onyx_session_provider_count(s), 1);
  assert_string_equal(onyx_session_provider_name(s, 0), "cpu");
  assert_int_equal(onyx_session_provider_node_count(s, 0), 2);
  assert_int_equal(onyx_session_input_count(s), 1);
  assert_string_equal(onyx_session_input_name(s, 0), "x");
  run_add_relu(s);
  run_add_relu(s); /* a session runs many times */
  char* text = NULL;
  ok(onyx_session_explain(s, &text));
  assert_non_null(strstr(text, "relu"));
  assert_non_null(strstr(text, "copies: 0"));
  onyx_free(text);
  onyx_session_release(s);
  otm_free(m);
}

/* --- the bad-input catalogue -------------------------------------------------------- */

static void test_truncated_model_file(void** state) {
  (void)state;
  OxTestModel* m = add_relu_model(17);
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  char* dir = otm_temp_dir();
  char path[512];
  snprintf(path, sizeof path, "%s/truncated.onnx", dir);
  assert_true(otm_write_file(path, bytes, len / 2));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create(NULL, path, &s);
  assert_null(s);
  expect_error(st, ONYX_INVALID_MODEL, "truncated.onnx");
  st = onyx_session_create(NULL, "/nonexistent/model.onnx", &s);
  expect_error(st, ONYX_OK, "/nonexistent/model.onnx");
  free(bytes);
  otm_remove_dir(dir);
  free(dir);
  otm_free(m);
}

static void test_unknown_op(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4});
  otm_node(m, "Frobnicate", "frob", "x", "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4});
  OnyxStatus* st;
  assert_null(session_from(m, NULL, &st));
  expect_error(st, ONYX_NOT_IMPLEMENTED, "'frob' (Frobnicate)");
  otm_free(m);
}

static void test_op_newer_than_model_opset(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13); /* LayerNormalization exists from opset 17 */
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 4});
  otm_initializer(m, "g", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4}, (float[]){1, 1, 1, 1});
  otm_node(m, "LayerNormalization", "ln", "x,g", "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 4});
  OnyxStatus* st;
  assert_null(session_from(m, NULL, &st));
  expect_error(st, ONYX_NOT_IMPLEMENTED, "17");
  otm_free(m);
}

static void test_model_opset_newer_than_onyx(void** state) {
  (void)state;
  OxTestModel* m = add_relu_model(99);
  OnyxStatus* st;
  assert_null(session_from(m, NULL, &st));
  expect_error(st, ONYX_OK, "99");
  otm_free(m);
}

static void test_feed_errors(void** state) {
  (void)state;
  OxTestModel* m = add_relu_model(17);
  OnyxStatus* st;
  OnyxSession* s = session_from(m, NULL, &st);
  ok(st);
  const char* out = "y";
  OnyxValue* y = NULL;
  /* missing input */
  expect_error(onyx_session_run(s, NULL, NULL, NULL, 0, &out, 1, &y), ONYX_INVALID_ARGUMENT,
               "'x' was not fed");
  assert_null(y);
  /* wrong element type */
  OnyxValue* xi = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_INT64, (int64_t[]){2, 3}, 2, NULL, 0, &xi));
  const char* in = "x";
  expect_error(onyx_session_run(s, NULL, &in, (const OnyxValue* const*)&xi, 1, &out, 1, &y),
               ONYX_INVALID_ARGUMENT, "expected element type float32, got int64");
  /* wrong shape */
  OnyxValue* xs = f32((int64_t[]){3, 2}, 2, X, 6);
  expect_error(onyx_session_run(s, NULL, &in, (const OnyxValue* const*)&xs, 1, &out, 1, &y),
               ONYX_INVALID_ARGUMENT, "expected shape float32[2,3], got float32[3,2]");
  /* unknown input and output names */
  const char* bad = "nope";
  expect_error(onyx_session_run(s, NULL, &bad, (const OnyxValue* const*)&xs, 1, &out, 1, &y),
               ONYX_INVALID_ARGUMENT, "unknown input 'nope'");
  OnyxValue* x = f32((int64_t[]){2, 3}, 2, X, 6);
  expect_error(onyx_session_run(s, NULL, &in, (const OnyxValue* const*)&x, 1, &bad, 1, &y),
               ONYX_INVALID_ARGUMENT, "unknown output 'nope'");
  assert_null(y);
  run_add_relu(s); /* the session still works */
  onyx_value_release(x);
  onyx_value_release(xi);
  onyx_value_release(xs);
  onyx_session_release(s);
  otm_free(m);
}

static void test_config_syntax_error(void** state) {
  (void)state;
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  const char* text = "{\n  \"providers\": [ { \"name\": \"cpu\" ]\n}\n";
  expect_error(onyx_session_options_load_config_text(o, text, strlen(text), "bad.json"), ONYX_OK,
               "bad.json:2:");
  onyx_session_options_release(o);
}

static void test_unknown_provider(void** state) {
  (void)state;
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_add_provider(o, "nosuchprovider", NULL, 0, 1));
  OxTestModel* m = add_relu_model(17);
  OnyxStatus* st;
  assert_null(session_from(m, o, &st));
  expect_error(st, ONYX_NOT_FOUND, "libonyx_ep_nosuchprovider.so");
  /* optional: the session runs on the CPU and says so */
  onyx_session_options_release(o);
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_add_provider(o, "nosuchprovider", NULL, 0, 0));
  OnyxSession* s = session_from(m, o, &st);
  ok(st);
  assert_int_equal(onyx_session_provider_count(s), 1);
  run_add_relu(s);
  onyx_session_release(s);
  onyx_session_options_release(o);
  otm_free(m);
}

static void test_bad_provider_option(void** state) {
  (void)state;
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  const char* cfg = "{\"providers\": [{\"name\": \"cpu\", \"options\": {\"bogus\": 1}}]}";
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "cfg.json"));
  OxTestModel* m = add_relu_model(17);
  OnyxStatus* st;
  assert_null(session_from(m, o, &st));
  char* msg = strdup(onyx_status_message(st));
  expect_error(st, ONYX_INVALID_CONFIG, "'bogus'");
  if (!strstr(msg, "libonyx_ep_cpu.so") || !strstr(msg, "provider 'cpu'"))
    fail_msg("the provider and its library are not named in '%s'", msg);
  free(msg);
  onyx_session_options_release(o);
  otm_free(m);
}

static void broken_lib(const char* file, OnyxStatusCode code, const char* needle) {
  char path[1024];
  snprintf(path, sizeof path, "%s/lib/broken/libonyx_ep_%s.so", getenv("ONYX_BINARY_DIR"), file);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_add_provider(o, file, path, 0, 1));
  OxTestModel* m = add_relu_model(17);
  OnyxStatus* st;
  assert_null(session_from(m, o, &st));
  char* msg = strdup(onyx_status_message(st));
  expect_error(st, code, needle);
  if (!strstr(msg, path)) fail_msg("the library path is not in '%s'", msg);
  free(msg);
  onyx_session_options_release(o);
  otm_free(m);
}

static void test_library_without_entry_symbol(void** state) {
  (void)state;
  broken_lib("nosym", ONYX_OK, "onyx_provider_init");
}

static void test_abi_major_mismatch(void** state) {
  (void)state;
  broken_lib("abi2", ONYX_ABI_MISMATCH, "2.0");
}

/* --- concurrency -------------------------------------------------------------------------- */
static void* run_many(void* arg) {
  for (int i = 0; i < 200; i++)
    run_add_relu(arg);
  return NULL;
}

static void test_concurrent_runs(void** state) {
  (void)state;
  OxTestModel* m = add_relu_model(17);
  OnyxStatus* st;
  OnyxSession* s = session_from(m, NULL, &st);
  ok(st);
  pthread_t th[4];
  for (int i = 0; i < 4; i++)
    assert_int_equal(pthread_create(&th[i], NULL, run_many, s), 0);
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  onyx_session_release(s);
  otm_free(m);
}

/* y = Relu(x + b) on [rows, 768] floats, every element checked. */
static void big_run(OnyxSession* s, int64_t rows, float shift, const float* b, OnyxValue** y) {
  const size_t n = (size_t)rows * 768;
  float* xd = malloc(n * sizeof *xd);
  assert_non_null(xd);
  for (size_t i = 0; i < n; i++)
    xd[i] = (float)(i % 7) - 3.0f + shift;
  OnyxValue* x = f32((int64_t[]){rows, 768}, 2, xd, n);
  const char* in = "x";
  const char* out = "y";
  ok(onyx_session_run(s, NULL, &in, (const OnyxValue* const*)&x, 1, &out, 1, y));
  const float* d = onyx_tensor_data(onyx_value_tensor(*y));
  for (size_t i = 0; i < n; i++) {
    const float want = xd[i] + b[i % 768] > 0 ? xd[i] + b[i % 768] : 0;
    if (d[i] != want) fail_msg("y[%zu] = %g, want %g", i, (double)d[i], (double)want);
  }
  onyx_value_release(x);
  free(xd);
}

/* Graph outputs of 2 MiB and more: a block freed by the caller serves the
 * next run's output of the same size (no fresh mmap and page zeroing per
 * run), never one still held, and is fully rewritten. */
static void test_large_outputs_reuse_blocks(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  float b[768];
  for (int i = 0; i < 768; i++)
    b[i] = (float)(i % 5) - 2.0f;
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){-1, 768});
  otm_initializer(m, "b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){768}, b);
  otm_node(m, "Add", "add", "x,b", "s");
  otm_node(m, "Relu", "relu", "s", "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){-1, 768});
  OnyxStatus* st;
  OnyxSession* s = session_from(m, NULL, &st);
  ok(st);
  OnyxSession* s2 = session_from(m, NULL, &st); /* a second holder of the cache */
  ok(st);
  OnyxValue *y1 = NULL, *y2 = NULL, *y3 = NULL;
  big_run(s, 1024, 0.0f, b, &y1); /* 3 MiB */
  big_run(s, 1024, 1.5f, b, &y2); /* y1 still held: another block */
  const void* p1 = onyx_tensor_data(onyx_value_tensor(y1));
  const void* p2 = onyx_tensor_data(onyx_value_tensor(y2));
  assert_ptr_not_equal(p1, p2);
  onyx_value_release(y1);
  big_run(s, 1024, -2.0f, b, &y3); /* y1's block, all of it rewritten */
  assert_ptr_equal(onyx_tensor_data(onyx_value_tensor(y3)), p1);
  onyx_value_release(y3);
  onyx_session_release(s);
  /* s2 still holds the cache: y1's block serves it; a smaller output
   * (1 MiB, not a cached size) does not take it */
  big_run(s2, 256, 0.5f, b, &y1);
  assert_ptr_not_equal(onyx_tensor_data(onyx_value_tensor(y1)), p1);
  big_run(s2, 1024, 0.25f, b, &y3);
  assert_ptr_equal(onyx_tensor_data(onyx_value_tensor(y3)), p1);
  onyx_value_release(y1);
  onyx_value_release(y3);
  onyx_session_release(s2);
  /* no session: y2 goes back to the system (ASan and valgrind check that
   * nothing is left behind) */
  onyx_value_release(y2);
  otm_free(m);
}

/* Asking for an output twice and for a graph input passed straight through. */
static void test_outputs_twice_and_passthrough(void** state) {
  (void)state;
  OxTestModel* m = add_relu_model(17);
  otm_output(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  OnyxStatus* st;
  OnyxSession* s = session_from(m, NULL, &st);
  ok(st);
  OnyxValue* x = f32((int64_t[]){2, 3}, 2, X, 6);
  const char* in = "x";
  const char* outs[3] = {"y", "x", "y"};
  OnyxValue* got[3] = {0};
  ok(onyx_session_run(s, NULL, &in, (const OnyxValue* const*)&x, 1, outs, 3, got));
  for (int k = 0; k < 3; k++) {
    const float* d = onyx_tensor_data(onyx_value_tensor(got[k]));
    for (int i = 0; i < 6; i++)
      assert_float_equal(d[i], k == 1 ? X[i] : Y[i], 0);
  }
  assert_ptr_not_equal(got[0], got[2]);
  onyx_values_release(got, 3);
  onyx_value_release(x);
  onyx_session_release(s);
  otm_free(m);
}

static void test_cancelled_run(void** state) {
  (void)state;
  OxTestModel* m = add_relu_model(17);
  OnyxStatus* st;
  OnyxSession* s = session_from(m, NULL, &st);
  ok(st);
  OnyxRunOptions* r = NULL;
  ok(onyx_run_options_create(&r));
  ok(onyx_run_options_set_tag(r, "job-7"));
  onyx_run_options_terminate(r);
  OnyxValue* x = f32((int64_t[]){2, 3}, 2, X, 6);
  const char* in = "x";
  const char* out = "y";
  OnyxValue* y = NULL;
  expect_error(onyx_session_run(s, r, &in, (const OnyxValue* const*)&x, 1, &out, 1, &y),
               ONYX_CANCELLED, "job-7");
  assert_null(y);
  onyx_run_options_release(r);
  onyx_value_release(x);
  onyx_session_release(s);
  otm_free(m);
}

/* --- an application's own provider, in process, with a custom-domain op ------------- */
static const OnyxHostApi* app_host;

/* com.example.Double: Y = 2 * X, float32, same shape. */
static OnyxStatus* double_infer(OnyxInferenceContext* c, void* user) {
  (void)user;
  const OnyxValueInfo* x = app_host->infer_input(c, 0);
  return app_host->infer_set_output(c, 0, app_host->value_elem_type(x), app_host->value_rank(x),
                                    app_host->value_dims(x));
}

static OnyxStatus* double_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxTensor* x = app_host->ctx_input(ctx, 0);
  OnyxTensor* y;
  OnyxStatus* st =
      app_host->ctx_output(ctx, 0, app_host->tensor_dims(x), app_host->tensor_rank(x), &y);
  if (st) return st;
  const float* a = app_host->tensor_data(x);
  float* b = app_host->tensor_mutable_data(y);
  for (size_t i = 0, n = app_host->tensor_elem_count(x); i < n; i++)
    b[i] = 2 * a[i];
  return NULL;
}

static const int32_t app_f32[] = {ONYX_ELEM_FLOAT32};
static const OnyxTypeConstraint app_T[] = {{"T", app_f32, 1}};

static OnyxStatus* app_schemas(const OnyxProvider* p, OnyxSchemaRegistry* r) {
  (void)p;
  static const OnyxFormalParam in[] = {{"X", "T", ONYX_PARAM_SINGLE}};
  static const OnyxFormalParam out[] = {{"Y", "T", ONYX_PARAM_SINGLE}};
  OnyxSchemaDef d = {.struct_size = sizeof d,
                     .domain = "com.example",
                     .op_type = "Double",
                     .since_version = 1,
                     .inputs = in,
                     .input_count = 1,
                     .outputs = out,
                     .output_count = 1,
                     .type_constraints = app_T,
                     .type_constraint_count = 1,
                     .infer = double_infer};
  return app_host->register_schema(r, &d);
}

static OnyxStatus* app_kernels(const OnyxProvider* p, OnyxKernelRegistry* r) {
  (void)p;
  OnyxKernelDef d = {.struct_size = sizeof d,
                     .domain = "com.example",
                     .op_type = "Double",
                     .since_version = 1,
                     .end_version = ONYX_OPSET_LATEST,
                     .type_constraints = app_T,
                     .type_constraint_count = 1,
                     .compute = double_compute};
  return app_host->register_kernel(r, &d);
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
  (void)a;
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
  app_host = host;
  *out = &app_provider;
  return NULL;
}

static void test_in_process_provider_with_custom_op(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "com.example", 1);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_node_domain(otm_node(m, "Double", "dbl", "x", "d"), "com.example");
  otm_node(m, "Relu", "relu", "d", "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_add_provider_init(o, "app", app_init, 1));
  OnyxStatus* st;
  OnyxSession* s = session_from(m, o, &st);
  ok(st);
  assert_int_equal(onyx_session_provider_count(s), 2);
  assert_string_equal(onyx_session_provider_name(s, 0), "app");
  assert_int_equal(onyx_session_provider_node_count(s, 0), 1); /* Double */
  assert_int_equal(onyx_session_provider_node_count(s, 1), 1); /* Relu, on the CPU */
  OnyxValue* x = f32((int64_t[]){2, 3}, 2, X, 6);
  const char* in = "x";
  const char* out = "y";
  OnyxValue* y = NULL;
  ok(onyx_session_run(s, NULL, &in, (const OnyxValue* const*)&x, 1, &out, 1, &y));
  const float* d = onyx_tensor_data(onyx_value_tensor(y));
  for (int i = 0; i < 6; i++)
    assert_float_equal(d[i], X[i] > 0 ? 2 * X[i] : 0, 0);
  onyx_values_release(&y, 1);
  onyx_value_release(x);
  onyx_session_release(s);
  /* Without the provider the custom op is unknown, and the error says so. */
  assert_null(session_from(m, NULL, &st));
  expect_error(st, ONYX_NOT_IMPLEMENTED, "'dbl' (Double)");
  onyx_session_options_release(o);
  otm_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_add_relu_runs_on_cpu),
      cmocka_unit_test(test_truncated_model_file),
      cmocka_unit_test(test_unknown_op),
      cmocka_unit_test(test_op_newer_than_model_opset),
      cmocka_unit_test(test_model_opset_newer_than_onyx),
      cmocka_unit_test(test_feed_errors),
      cmocka_unit_test(test_config_syntax_error),
      cmocka_unit_test(test_unknown_provider),
      cmocka_unit_test(test_bad_provider_option),
      cmocka_unit_test(test_library_without_entry_symbol),
      cmocka_unit_test(test_abi_major_mismatch),
      cmocka_unit_test(test_concurrent_runs),
      cmocka_unit_test(test_outputs_twice_and_passthrough),
      cmocka_unit_test(test_large_outputs_reuse_blocks),
      cmocka_unit_test(test_cancelled_run),
      cmocka_unit_test(test_in_process_provider_with_custom_op),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
