/* test_gpu_finite_check.c — the training session's check of accumulated
 * gradients in device memory (host/trainer/ox_finite_check.h): the check
 * model runs on the emulated GPU (its inputs are read in gpuemu memory, not
 * host memory) and gives exactly 0 for finite gradients, however large, and
 * NaN when any element is NaN, +Inf or -Inf. The expected values follow
 * from the definition (0 * x is 0 for finite x and NaN otherwise). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "onyx/onyx.h"
#include "ox_finite_check.h"

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

/* Two gradients, [3, 4] and [5], on gpuemu first, cpu second. */
static OnyxSession* check_session(void) {
  const int64_t d0[] = {3, 4}, d1[] = {5};
  const int64_t* dims[] = {d0, d1};
  const size_t ranks[] = {2, 1};
  void* bytes = NULL;
  size_t len = 0;
  ok(ox_finite_check_model(2, dims, ranks, &bytes, &len));
  const char* cfg = "{\"providers\": [{\"name\": \"gpuemu\"}, {\"name\": \"cpu\"}]}";
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "gpuemu-cpu.json"));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  free(bytes);
  ok(st);
  return s;
}

/* "bad" of the check fed g0 (12 floats) and g1 (5 floats). */
static float run_check(OnyxSession* s, const float* g0, const float* g1) {
  const int64_t d0[] = {3, 4}, d1[] = {5};
  float zero = 0.0f;
  OnyxValue* in[3] = {NULL, NULL, NULL};
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, NULL, 0, &zero, sizeof zero, &in[0]));
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, d0, 2, g0, 12 * sizeof *g0, &in[1]));
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, d1, 1, g1, 5 * sizeof *g1, &in[2]));
  const char* names[] = {"zero", "g0", "g1"};
  const char* out_name = "bad";
  OnyxValue* out = NULL;
  ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, 3, &out_name, 1, &out));
  const OnyxTensor* t = onyx_value_tensor(out);
  assert_non_null(t);
  assert_int_equal(onyx_tensor_elem_count(t), 1);
  float bad = *(const float*)onyx_tensor_data(t);
  onyx_values_release(in, 3);
  onyx_value_release(out);
  return bad;
}

static void test_inputs_on_device(void** state) {
  (void)state;
  OnyxSession* s = check_session();
  assert_int_equal(onyx_session_input_count(s), 3);
  assert_int_equal(onyx_session_output_count(s), 1);
  for (size_t i = 0; i < 3; i++) {
    OnyxMemoryDevice m;
    ok(onyx_session_input_memory(s, i, &m));
    assert_int_not_equal(m.kind, ONYX_DEVICE_CPU);
  }
  onyx_session_release(s);
}

static void test_finite_is_zero(void** state) {
  (void)state;
  OnyxSession* s = check_session();
  float g0[12], g1[5];
  for (int i = 0; i < 12; i++)
    g0[i] = (i % 2 ? -1.0f : 1.0f) * FLT_MAX; /* their plain sum overflows */
  for (int i = 0; i < 5; i++)
    g1[i] = (float)i * 0.25f - 3.0f;
  float bad = run_check(s, g0, g1);
  assert_true(bad == 0.0f);
  onyx_session_release(s);
}

static void test_nonfinite_is_nan(void** state) {
  (void)state;
  OnyxSession* s = check_session();
  const float specials[] = {NAN, INFINITY, -INFINITY};
  for (int k = 0; k < 3; k++) {
    for (int where = 0; where < 2; where++) {
      float g0[12] = {0}, g1[5] = {1, 2, 3, 4, 5};
      if (where == 0)
        g0[7] = specials[k];
      else
        g1[4] = specials[k];
      float bad = run_check(s, g0, g1);
      if (!isnan(bad))
        fail_msg("special %d in g%d: the check gave %g, expected NaN", k, where, (double)bad);
    }
  }
  onyx_session_release(s);
}

static void test_one_tensor(void** state) {
  (void)state;
  const int64_t d[] = {2};
  const int64_t* dims[] = {d};
  const size_t ranks[] = {1};
  void* bytes = NULL;
  size_t len = 0;
  ok(ox_finite_check_model(1, dims, ranks, &bytes, &len));
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s));
  free(bytes);
  float zero = 0.0f, g[2] = {1.5f, INFINITY};
  OnyxValue* in[2] = {NULL, NULL};
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, NULL, 0, &zero, sizeof zero, &in[0]));
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, d, 1, g, sizeof g, &in[1]));
  const char* names[] = {"zero", "g0"};
  const char* out_name = "bad";
  OnyxValue* out = NULL;
  ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, 2, &out_name, 1, &out));
  assert_true(isnan(*(const float*)onyx_tensor_data(onyx_value_tensor(out))));
  onyx_values_release(in, 2);
  onyx_value_release(out);
  onyx_session_release(s);
  OnyxStatus* st = ox_finite_check_model(0, NULL, NULL, &bytes, &len);
  assert_non_null(st);
  onyx_status_release(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_inputs_on_device),
      cmocka_unit_test(test_finite_is_zero),
      cmocka_unit_test(test_nonfinite_is_nan),
      cmocka_unit_test(test_one_tensor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
