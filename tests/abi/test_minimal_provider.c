/* test_minimal_provider.c — the minimal provider of onyx_ep.h's top comment
 * runs. CMake extracts the example from the header (extract_example.cmake)
 * and builds it, against sdk/include only, as libonyx_ep_mini.so in
 * MINIMAL_PROVIDER_DIR; here it is loaded by name through a config and
 * ONYX_PROVIDER_PATH, with no CPU provider behind it, and runs Relu models.
 * Expected values are Relu worked out by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "onyx/onyx.h"
#include "ox_test_models.h"

static char g_tmp[PATH_MAX];
static char g_config[PATH_MAX + 32];

static void ok(OnyxStatus* st) {
  if (st) fprintf(stderr, "unexpected error: %s\n", onyx_status_message(st));
  assert_null(st);
}

static int setup(void** state) {
  (void)state;
  char dir[PATH_MAX];
  if (!realpath(MINIMAL_PROVIDER_DIR, dir)) {
    fprintf(stderr, "%s: missing (build onyx_test_abi_minimal)\n", MINIMAL_PROVIDER_DIR);
    return -1;
  }
  /* Only the minimal provider's folder: nothing else can be found by name. */
  setenv("ONYX_PROVIDER_PATH", dir, 1);
  char* tmp = otm_temp_dir();
  if (!tmp) return -1;
  snprintf(g_tmp, sizeof g_tmp, "%s", tmp);
  free(tmp);
  snprintf(g_config, sizeof g_config, "%s/mini.json", g_tmp);
  static const char config[] = "{ \"providers\": [ { \"name\": \"mini\" } ], "
                               "\"implicit_cpu\": false }\n";
  return otm_write_file(g_config, config, sizeof config - 1) ? 0 : -1;
}

static int teardown(void** state) {
  (void)state;
  otm_remove_dir(g_tmp);
  return 0;
}

/* A model of one Relu at `opset`: X float [2, 3] -> Y. */
static void relu_model(int64_t opset, uint8_t** bytes, size_t* len) {
  OxTestModel* m = otm_new(opset);
  otm_input_s(m, "X", ONYX_ELEM_FLOAT32, "2,3");
  otm_output_s(m, "Y", ONYX_ELEM_FLOAT32, "2,3");
  otm_node(m, "Relu", "relu", "X", "Y");
  otm_serialize(m, bytes, len);
  otm_free(m);
}

static OnyxSession* create_session(int64_t opset) {
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_load_config(o, g_config));
  uint8_t* bytes = NULL;
  size_t len = 0;
  relu_model(opset, &bytes, &len);
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  free(bytes);
  onyx_session_options_release(o);
  ok(st);
  return s;
}

/* Runs s on x (2x3) and checks Y == want. */
static void run_and_check(OnyxSession* s, const float x[6], const float want[6]) {
  const int64_t dims[2] = {2, 3};
  OnyxValue* in = NULL;
  OnyxValue* out = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dims, 2, x, 6 * sizeof *x, &in));
  const char* in_name = "X";
  const char* out_name = "Y";
  ok(onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &out));
  const OnyxTensor* y = onyx_value_tensor(out);
  assert_non_null(y);
  assert_int_equal(onyx_tensor_elem_type(y), ONYX_ELEM_FLOAT32);
  assert_int_equal(onyx_tensor_rank(y), 2);
  assert_int_equal(onyx_tensor_dims(y)[0], 2);
  assert_int_equal(onyx_tensor_dims(y)[1], 3);
  const float* v = onyx_tensor_data(y);
  for (size_t i = 0; i < 6; i++)
    assert_true(v[i] == want[i]);
  onyx_value_release(out);
  onyx_value_release(in);
}

/* The Relu runs on "mini", the only provider of the session. */
static void test_relu_runs_on_the_minimal_provider(void** state) {
  (void)state;
  OnyxSession* s = create_session(14);
  assert_int_equal(onyx_session_provider_count(s), 1);
  assert_string_equal(onyx_session_provider_name(s, 0), "mini");
  assert_int_equal(onyx_session_provider_node_count(s, 0), 1);
  const float x[6] = {-2.0f, -0.5f, 0.0f, 0.25f, 1.0f, 3.5f};
  const float want[6] = {0.0f, 0.0f, 0.0f, 0.25f, 1.0f, 3.5f};
  run_and_check(s, x, want);
  onyx_session_release(s);
}

/* Each session gets its own EP (calloc'd by create, freed by release): two
 * sessions at once, of the kernel's first and a later opset, run and end
 * independently. */
static void test_two_sessions_two_eps(void** state) {
  (void)state;
  OnyxSession* a = create_session(6);
  OnyxSession* b = create_session(13);
  const float x[6] = {1.0f, -1.0f, 2.0f, -2.0f, 0.5f, -0.5f};
  const float want[6] = {1.0f, 0.0f, 2.0f, 0.0f, 0.5f, 0.0f};
  run_and_check(a, x, want);
  onyx_session_release(a);
  run_and_check(b, x, want);
  onyx_session_release(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_relu_runs_on_the_minimal_provider),
      cmocka_unit_test(test_two_sessions_two_eps),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
