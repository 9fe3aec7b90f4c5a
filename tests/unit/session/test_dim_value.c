/* test_dim_value.c — onyx_session_options_set_dim_value (fixing a symbolic
 * input dim by name before planning) and onyx_session_input_dim_param. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include "onyx/onyx.h"
#include "ox_test_models.h"

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static void expect_error(OnyxStatus* st, OnyxStatusCode code, const char* phrase) {
  assert_non_null(st);
  assert_int_equal(onyx_status_code(st), code);
  if (!strstr(onyx_status_message(st), phrase))
    fail_msg("'%s' lacks '%s'", onyx_status_message(st), phrase);
  onyx_status_release(st);
}

/* x [N, 4] and b [N, 4] (dim_param "N"), t [T] ("T"): y = Exp(Relu(x) + b), z = t. */
static OnyxSession* open_model(const OnyxSessionOptions* o, OnyxStatus** err) {
  OxTestModel* m = otm_new(13);
  otm_input_s(m, "x", ONYX_ELEM_FLOAT32, "N,4");
  otm_input_s(m, "b", ONYX_ELEM_FLOAT32, "N,4");
  otm_input_s(m, "t", ONYX_ELEM_FLOAT32, "T");
  otm_node(m, "Relu", "relu0", "x", "r");
  otm_node(m, "Add", "add0", "r,b", "s");
  otm_node(m, "Exp", "exp0", "s", "y");
  otm_node(m, "Identity", "id0", "t", "z");
  otm_output_s(m, "y", ONYX_ELEM_FLOAT32, "N,4");
  otm_output_s(m, "z", ONYX_ELEM_FLOAT32, "T");
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  *err = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  free(bytes);
  return s;
}

/* Runs the model with N = n rows; returns the status. */
static OnyxStatus* run_rows(OnyxSession* s, int64_t n) {
  float* buf = calloc((size_t)n * 4 + 1, sizeof *buf);
  const int64_t dims[2] = {n, 4}, tdims[1] = {2};
  const float t[2] = {1, 2};
  OnyxValue* in[3] = {0};
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dims, 2, buf, (size_t)n * 16, &in[0]));
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dims, 2, buf, (size_t)n * 16, &in[1]));
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, tdims, 1, t, sizeof t, &in[2]));
  const char* names[3] = {"x", "b", "t"};
  const char* outs[1] = {"y"};
  OnyxValue* got[1] = {0};
  OnyxStatus* st = onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, 3, outs, 1, got);
  if (!st) {
    /* exp(relu(0) + 0) = 1 everywhere, and the rows fed */
    const OnyxTensor* y = onyx_value_tensor(got[0]);
    assert_int_equal(onyx_tensor_dims(y)[0], n);
    const float* d = onyx_tensor_data(y);
    for (int64_t i = 0; i < n * 4; i++)
      assert_true(d[i] == 1.0f);
  }
  onyx_values_release(got, 1);
  onyx_values_release(in, 3);
  free(buf);
  return st;
}

static char* explain(const OnyxSession* s) {
  char* text = NULL;
  ok(onyx_session_explain(s, &text));
  return text;
}

static void test_fixed_dim(void** state) {
  (void)state;
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_dim_value(o, "N", 7));
  ok(onyx_session_options_set_dim_value(o, "N", 32));         /* the last value counts */
  ok(onyx_session_options_set_dim_value(o, "unused_dim", 5)); /* no input uses it: ignored */
  OnyxStatus* err = NULL;
  OnyxSession* s = open_model(o, &err);
  onyx_session_options_release(o); /* the session keeps its own copy */
  ok(err);
  /* x and b: N fixed to 32, the name kept; t's T left symbolic. */
  for (size_t i = 0; i < 2; i++) {
    int32_t rank = 0;
    const int64_t* dims = NULL;
    ok(onyx_session_input_info(s, i, NULL, &rank, &dims));
    assert_int_equal(rank, 2);
    assert_int_equal(dims[0], 32);
    assert_int_equal(dims[1], 4);
    assert_string_equal(onyx_session_input_dim_param(s, i, 0), "N");
    assert_null(onyx_session_input_dim_param(s, i, 1));
  }
  const int64_t* tdims = NULL;
  ok(onyx_session_input_info(s, 2, NULL, NULL, &tdims));
  assert_true(tdims[0] < 0);
  assert_string_equal(onyx_session_input_dim_param(s, 2, 0), "T");
  assert_null(onyx_session_input_dim_param(s, 2, 1)); /* out of range */
  assert_null(onyx_session_input_dim_param(s, 3, 0));
  assert_null(onyx_session_input_dim_param(NULL, 0, 0));
  /* The planned values (the graph outputs y and z are not among them) are
   * r and s, [32, 4] float32 once N is fixed: 512 bytes each, both live at
   * add0, so the peak is 1 KiB and nothing is left to size at run time. */
  char* text = explain(s);
  if (!strstr(text, "planned peak on host (cpu): 1.0 KiB for 2 static values") ||
      !strstr(text, " 0 sized at run time"))
    fail_msg("explain: %s", text);
  onyx_free(text);
  ok(run_rows(s, 32));
  /* Another batch is refused, as for any static dim. */
  OnyxStatus* st = run_rows(s, 5);
  assert_non_null(st);
  onyx_status_release(st);
  onyx_session_release(s);
}

static void test_free_dim_by_default(void** state) {
  (void)state;
  OnyxStatus* err = NULL;
  OnyxSession* s = open_model(NULL, &err);
  ok(err);
  const int64_t* dims = NULL;
  ok(onyx_session_input_info(s, 0, NULL, NULL, &dims));
  assert_true(dims[0] < 0);
  assert_string_equal(onyx_session_input_dim_param(s, 0, 0), "N");
  char* text = explain(s);
  /* r and s depend on the free N: sized at run time. */
  if (!strstr(text, " 2 sized at run time")) fail_msg("explain: %s", text);
  onyx_free(text);
  ok(run_rows(s, 5));
  ok(run_rows(s, 3));
  onyx_session_release(s);
}

static void test_bad_arguments(void** state) {
  (void)state;
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  expect_error(onyx_session_options_set_dim_value(o, "", 3), ONYX_INVALID_ARGUMENT,
               "the dimension name is empty");
  expect_error(onyx_session_options_set_dim_value(o, NULL, 3), ONYX_INVALID_ARGUMENT,
               "the dimension name is empty");
  expect_error(onyx_session_options_set_dim_value(o, "N", -1), ONYX_INVALID_ARGUMENT,
               "dimension 'N': value -1 is negative");
  OnyxStatus* st = onyx_session_options_set_dim_value(NULL, "N", 1);
  assert_non_null(st);
  onyx_status_release(st);
  onyx_session_options_release(o);
}

int main(void) {
  /* The planned values checked are the chain's intermediates r and s:
   * fuse_elementwise would make the chain one node without them. */
  setenv("ONYX_OPT_DISABLE", "fuse_elementwise", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fixed_dim),
      cmocka_unit_test(test_free_dim_by_default),
      cmocka_unit_test(test_bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
