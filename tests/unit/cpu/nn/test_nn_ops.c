/* test_nn_ops.c — the nn_ops family of the CPU provider through a session.
 * Expected values were computed independently with numpy from the ONNX
 * definitions (an LSTM over two steps with bias; a reverse GRU with
 * sequence_lens; Resize linear half_pixel and nearest asymmetric/floor; NMS
 * by hand-written greedy suppression; InstanceNormalization in float64;
 * GroupNormalization-21 per-channel scale; RMSNormalization in float16;
 * NegativeLogLikelihoodLoss with weights and ignore_index), plus bad input
 * that must be an error naming the node. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onyx/onyx.h"
#include "ox_test_models.h"
#include "ox_test_session.h"

static void check_shape(const OnyxTensor* t, const int64_t* dims, size_t rank) {
  assert_non_null(t);
  assert_int_equal(onyx_tensor_rank(t), rank);
  if (rank) assert_memory_equal(onyx_tensor_dims(t), dims, rank * sizeof *dims);
}

static void expect_floats(const OnyxValue* v, const float* want, size_t n, const int64_t* dims,
                          size_t rank, float tol) {
  const OnyxTensor* t = onyx_value_tensor(v);
  check_shape(t, dims, rank);
  assert_int_equal(onyx_tensor_elem_count(t), n);
  const float* got = onyx_tensor_data(t);
  for (size_t i = 0; i < n; i++)
    if (fabsf(got[i] - want[i]) > tol + tol * fabsf(want[i]))
      fail_msg("element %zu: got %.9g, want %.9g", i, got[i], want[i]);
}

/* Runs a model expected to fail; the message must name the node and `what`. */
static void expect_error(OxTestModel* m, const OtsFeed* f, size_t n, const char* out,
                         const char* node, const char* what) {
  OnyxValue* got[1] = {0};
  OnyxStatus* st = ots_run(m, f, n, (const char*[]){out}, 1, got);
  if (!st) {
    onyx_values_release(got, 1);
    fail_msg("expected an error mentioning '%s'", what);
  }
  const char* msg = onyx_status_message(st);
  if (!strstr(msg, node) || !strstr(msg, what))
    fail_msg("error '%s' should name node '%s' and mention '%s'", msg, node, what);
  onyx_status_release(st);
}

/* --- RNNs ------------------------------------------------------------------ */

static void test_lstm_two_steps(void** state) {
  (void)state;
  static const float x[4] = {0.5f, -1.0f, 0.25f, 2.0f};
  static const float w[16] = {0.1f, 0.2f,  0.3f, -0.1f, 0.0f,  0.4f, -0.2f, 0.1f,
                              0.5f, -0.3f, 0.2f, 0.2f,  -0.1f, 0.3f, 0.4f,  0.0f};
  static const float r[16] = {0.05f, -0.1f, 0.2f, 0.1f,  -0.3f, 0.0f, 0.1f,  0.1f,
                              0.0f,  0.2f,  0.3f, -0.2f, 0.1f,  0.0f, -0.1f, 0.2f};
  static const float b[16] = {0.1f, 0.0f, -0.1f, 0.2f,  0.0f, 0.1f, 0.05f, -0.05f,
                              0.0f, 0.1f, 0.0f,  -0.1f, 0.2f, 0.0f, 0.0f,  0.1f};
  OxTestModel* m = otm_new(14);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 1, 2});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 8, 2}, w);
  otm_initializer(m, "R", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 8, 2}, r);
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 16}, b);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){2, 1, 1, 2});
  otm_output(m, "Yc", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 1, 2});
  OxTestNode* n = otm_node(m, "LSTM", "lstm0", "X,W,R,B", "Y,,Yc");
  otm_attr_int(n, "hidden_size", 2);
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT32, 3, {2, 1, 2}, x}};
  OnyxValue* got[2] = {0};
  ots_ok(ots_run(m, f, 1, (const char*[]){"Y", "Yc"}, 2, got));
  static const float y[4] = {-0.0532591154f, 0.0677821983f, 0.185270066f, 0.0961187818f};
  static const float c[2] = {0.283145872f, 0.172560144f};
  expect_floats(got[0], y, 4, (int64_t[]){2, 1, 1, 2}, 4, 1e-5f);
  expect_floats(got[1], c, 2, (int64_t[]){1, 1, 2}, 3, 1e-5f);
  onyx_values_release(got, 2);
  otm_free(m);
}

static void test_gru_reverse_sequence_lens(void** state) {
  (void)state;
  static const float x[4] = {1.0f, 0.5f, -1.0f, 2.0f}; /* [seq 2, batch 2, 1] */
  static const float w[3] = {0.5f, -0.3f, 0.8f}, r[3] = {0.2f, 0.4f, -0.6f};
  static const int32_t lens[2] = {2, 1};
  OxTestModel* m = otm_new(14);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 2, 1});
  otm_input(m, "L", ONYX_ELEM_INT32, 1, (int64_t[]){2});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 3, 1}, w);
  otm_initializer(m, "R", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 3, 1}, r);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){2, 1, 2, 1});
  otm_output(m, "Yh", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 2, 1});
  OxTestNode* n = otm_node(m, "GRU", "gru0", "X,W,R,,L", "Y,Yh");
  otm_attr_int(n, "hidden_size", 1);
  otm_attr_string(n, "direction", "reverse");
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT32, 3, {2, 2, 1}, x}, {"L", ONYX_ELEM_INT32, 1, {2}, lens}};
  OnyxValue* got[2] = {0};
  ots_ok(ots_run(m, f, 2, (const char*[]){"Y", "Yh"}, 2, got));
  /* Batch 1 has length 1: its step 1 output is zero. */
  static const float y[4] = {0.0344619887f, 0.166350584f, -0.413335884f, 0.0f};
  static const float h[2] = {0.0344619887f, 0.166350584f};
  expect_floats(got[0], y, 4, (int64_t[]){2, 1, 2, 1}, 4, 1e-5f);
  expect_floats(got[1], h, 2, (int64_t[]){1, 2, 1}, 3, 1e-5f);
  onyx_values_release(got, 2);
  otm_free(m);
}

static void test_lstm_bad_weight_shape(void** state) {
  (void)state;
  float zeros[32] = {0};
  OxTestModel* m = otm_new(14);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 1, 2});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 6, 2}, zeros); /* 4*H = 8 */
  otm_initializer(m, "R", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 8, 2}, zeros);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 1, 1, 2});
  OxTestNode* n = otm_node(m, "LSTM", "bad_lstm", "X,W,R", "Y");
  otm_attr_int(n, "hidden_size", 2);
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT32, 3, {1, 1, 2}, zeros}};
  expect_error(m, f, 1, "Y", "bad_lstm", "W must be [1, 8, 2]");
  otm_free(m);
}

/* --- Resize ------------------------------------------------------------------- */

static void test_resize_linear_half_pixel(void** state) {
  (void)state;
  static const float x[4] = {1, 2, 3, 4}, scales[4] = {1, 1, 2, 2};
  OxTestModel* m = otm_new(13);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 1, 2, 2});
  otm_initializer(m, "S", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4}, scales);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 1, 4, 4});
  OxTestNode* n = otm_node(m, "Resize", "rs", "X,,S", "Y");
  otm_attr_string(n, "mode", "linear");
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT32, 4, {1, 1, 2, 2}, x}};
  OnyxValue* got[1] = {0};
  ots_ok(ots_run(m, f, 1, (const char*[]){"Y"}, 1, got));
  static const float y[16] = {1,    1.25f, 1.75f, 2,    1.5f, 1.75f, 2.25f, 2.5f,
                              2.5f, 2.75f, 3.25f, 3.5f, 3,    3.25f, 3.75f, 4};
  expect_floats(got[0], y, 16, (int64_t[]){1, 1, 4, 4}, 4, 1e-6f);
  onyx_values_release(got, 1);
  otm_free(m);
}

static void test_resize_nearest_sizes_axes(void** state) {
  (void)state;
  static const float x[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  static const int64_t sizes[2] = {2, 5};
  OxTestModel* m = otm_new(19);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 3});
  otm_initializer(m, "Z", ONYX_ELEM_INT64, 1, (int64_t[]){2}, sizes);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 5});
  OxTestNode* n = otm_node(m, "Resize", "rs", "X,,,Z", "Y");
  otm_attr_string(n, "coordinate_transformation_mode", "asymmetric");
  otm_attr_string(n, "nearest_mode", "floor");
  otm_attr_ints(n, "axes", 2, (int64_t[]){-2, -1});
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT32, 2, {3, 3}, x}};
  OnyxValue* got[1] = {0};
  ots_ok(ots_run(m, f, 1, (const char*[]){"Y"}, 1, got));
  static const float y[10] = {0, 0, 1, 1, 2, 3, 3, 4, 4, 5};
  expect_floats(got[0], y, 10, (int64_t[]){2, 5}, 2, 0);
  onyx_values_release(got, 1);
  otm_free(m);
}

static void test_resize_scales_and_sizes_both_given(void** state) {
  (void)state;
  static const float x[4] = {1, 2, 3, 4}, scales[2] = {2, 2};
  static const int64_t sizes[2] = {4, 4};
  OxTestModel* m = otm_new(13);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2});
  otm_initializer(m, "S", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2}, scales);
  otm_initializer(m, "Z", ONYX_ELEM_INT64, 1, (int64_t[]){2}, sizes);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){4, 4});
  otm_node(m, "Resize", "both_rs", "X,,S,Z", "Y");
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT32, 2, {2, 2}, x}};
  expect_error(m, f, 1, "Y", "both_rs", "exactly one of scales and sizes");
  otm_free(m);
}

/* --- NonMaxSuppression ------------------------------------------------------------ */

static void test_nms_suppression(void** state) {
  (void)state;
  static const float boxes[24] = {0, 0,  1, 1,  0, 0.1f,  1, 1.1f,  0, -0.1f, 1, 0.9f,
                                  0, 10, 1, 11, 0, 10.1f, 1, 11.1f, 0, 100,   1, 101};
  static const float scores[6] = {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f};
  static const int64_t max_out = 3;
  static const float iou = 0.5f, score_th = 0.4f;
  OxTestModel* m = otm_new(11);
  otm_input(m, "B", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 6, 4});
  otm_input(m, "S", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 1, 6});
  otm_initializer(m, "M", ONYX_ELEM_INT64, 1, (int64_t[]){1}, &max_out);
  otm_initializer(m, "I", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1}, &iou);
  otm_initializer(m, "T", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1}, &score_th);
  otm_output(m, "Y", ONYX_ELEM_INT64, 2, (int64_t[]){-1, 3});
  otm_node(m, "NonMaxSuppression", "nms", "B,S,M,I,T", "Y");
  OtsFeed f[] = {{"B", ONYX_ELEM_FLOAT32, 3, {1, 6, 4}, boxes},
                 {"S", ONYX_ELEM_FLOAT32, 3, {1, 1, 6}, scores}};
  OnyxValue* got[1] = {0};
  ots_ok(ots_run(m, f, 2, (const char*[]){"Y"}, 1, got));
  const OnyxTensor* t = onyx_value_tensor(got[0]);
  check_shape(t, (int64_t[]){2, 3}, 2);
  static const int64_t want[6] = {0, 0, 3, 0, 0, 0};
  assert_memory_equal(onyx_tensor_data(t), want, sizeof want);
  onyx_values_release(got, 1);
  otm_free(m);
}

/* --- Normalizations -------------------------------------------------------------- */

static void test_instancenorm_double(void** state) {
  (void)state;
  static const double x[6] = {1, 2, 4, 0, -1, 5}, sc[2] = {2, 0.5}, b[2] = {0.1, -1};
  OxTestModel* m = otm_new(6);
  otm_input(m, "X", ONYX_ELEM_FLOAT64, 3, (int64_t[]){1, 2, 3});
  otm_initializer(m, "S", ONYX_ELEM_FLOAT64, 1, (int64_t[]){2}, sc);
  otm_initializer(m, "B", ONYX_ELEM_FLOAT64, 1, (int64_t[]){2}, b);
  otm_output(m, "Y", ONYX_ELEM_FLOAT64, 3, (int64_t[]){1, 2, 3});
  otm_node(m, "InstanceNormalization", "in0", "X,S,B", "Y");
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT64, 3, {1, 2, 3}, x}};
  OnyxValue* got[1] = {0};
  ots_ok(ots_run(m, f, 1, (const char*[]){"Y"}, 1, got));
  static const double want[6] = {-2.0380830629005953, -0.43452076572514908, 2.7726038286257437,
                                 -1.2540000696455587, -1.4445001218797275,  -0.30149980847471369};
  const OnyxTensor* t = onyx_value_tensor(got[0]);
  check_shape(t, (int64_t[]){1, 2, 3}, 3);
  const double* y = onyx_tensor_data(t);
  for (size_t i = 0; i < 6; i++)
    if (fabs(y[i] - want[i]) > 1e-12)
      fail_msg("element %zu: got %.17g want %.17g", i, y[i], want[i]);
  onyx_values_release(got, 1);
  otm_free(m);
}

static void test_instancenorm_channel_mismatch(void** state) {
  (void)state;
  static const float x[6] = {0}, sc[3] = {1, 1, 1}, b[3] = {0};
  OxTestModel* m = otm_new(6);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 2, 3});
  otm_initializer(m, "S", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, sc);
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, b);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 2, 3});
  otm_node(m, "InstanceNormalization", "bad_in", "X,S,B", "Y");
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT32, 3, {1, 2, 3}, x}};
  expect_error(m, f, 1, "Y", "bad_in", "scale has 3 elements, expected 2");
  otm_free(m);
}

static void test_groupnorm21_per_channel(void** state) {
  (void)state;
  static const float x[8] = {1, 2, 3, 5, -1, 0, 2, 2.5f};
  static const float sc[4] = {1, 2, 0.5f, -1}, b[4] = {0, 1, 0, 2};
  OxTestModel* m = otm_new(21);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 4, 2});
  otm_initializer(m, "S", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4}, sc);
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4}, b);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 4, 2});
  OxTestNode* n = otm_node(m, "GroupNormalization", "gn", "X,S,B", "Y");
  otm_attr_int(n, "num_groups", 2);
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT32, 3, {1, 4, 2}, x}};
  OnyxValue* got[1] = {0};
  ots_ok(ots_run(m, f, 1, (const char*[]){"Y"}, 1, got));
  static const float y[8] = {-1.18321325f,  -0.507091394f, 1.33806093f, 4.04254836f,
                             -0.655276442f, -0.305795673f, 1.21366827f, 0.864187501f};
  expect_floats(got[0], y, 8, (int64_t[]){1, 4, 2}, 3, 1e-5f);
  onyx_values_release(got, 1);
  otm_free(m);
}

/* IEEE half from float for the feeds (exact for these values). */
static uint16_t to_half(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const int32_t exp = (int32_t)((u >> 23) & 0xff) - 127 + 15;
  const uint32_t mant = u & 0x7fffffu;
  if (f == 0) return (uint16_t)sign;
  return (uint16_t)(sign | ((uint32_t)exp << 10) | (mant >> 13));
}

static float from_half(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0 && mant == 0)
    u = sign;
  else
    u = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void test_rmsnorm_float16(void** state) {
  (void)state;
  static const float xf[6] = {1, 2, 3, -0.5f, 0.25f, 4}, sf[3] = {1, 0.5f, 2};
  uint16_t x[6], sc[3];
  for (int i = 0; i < 6; i++)
    x[i] = to_half(xf[i]);
  for (int i = 0; i < 3; i++)
    sc[i] = to_half(sf[i]);
  OxTestModel* m = otm_new(23);
  otm_input(m, "X", ONYX_ELEM_FLOAT16, 2, (int64_t[]){2, 3});
  otm_initializer(m, "S", ONYX_ELEM_FLOAT16, 1, (int64_t[]){3}, sc);
  otm_output(m, "Y", ONYX_ELEM_FLOAT16, 2, (int64_t[]){2, 3});
  otm_node(m, "RMSNormalization", "rms", "X,S", "Y");
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT16, 2, {2, 3}, x}};
  OnyxValue* got[1] = {0};
  ots_ok(ots_run(m, f, 1, (const char*[]){"Y"}, 1, got));
  const OnyxTensor* t = onyx_value_tensor(got[0]);
  check_shape(t, (int64_t[]){2, 3}, 2);
  static const float want[6] = {0.462890625f,  0.462890625f,  2.77734375f,
                                -0.214477539f, 0.0536193848f, 3.43164062f};
  const uint16_t* y = onyx_tensor_data(t);
  for (size_t i = 0; i < 6; i++)
    if (fabsf(from_half(y[i]) - want[i]) > 2e-3f * fabsf(want[i]))
      fail_msg("element %zu: got %.9g want %.9g", i, from_half(y[i]), want[i]);
  onyx_values_release(got, 1);
  otm_free(m);
}

/* --- Losses ------------------------------------------------------------------------ */

static void test_nll_mean_weight_ignore(void** state) {
  (void)state;
  static const float x[9] = {-1, -2, -3, -0.5f, -1.5f, -2.5f, -0.1f, -0.2f, -0.3f};
  static const float w[3] = {0.5f, 2, 1.5f};
  static const int64_t tgt[3] = {0, 1, 2};
  OxTestModel* m = otm_new(13);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 3});
  otm_input(m, "T", ONYX_ELEM_INT64, 1, (int64_t[]){3});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, w);
  otm_output(m, "L", ONYX_ELEM_FLOAT32, 0, NULL);
  OxTestNode* n = otm_node(m, "NegativeLogLikelihoodLoss", "nll", "X,T,W", "L");
  otm_attr_int(n, "ignore_index", 1);
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT32, 2, {3, 3}, x}, {"T", ONYX_ELEM_INT64, 1, {3}, tgt}};
  OnyxValue* got[1] = {0};
  ots_ok(ots_run(m, f, 2, (const char*[]){"L"}, 1, got));
  static const float want[1] = {0.475f};
  expect_floats(got[0], want, 1, NULL, 0, 1e-6f);
  onyx_values_release(got, 1);
  /* A class index outside [0, C) that is not ignore_index is an error. */
  static const int64_t bad[3] = {0, 3, 2};
  OtsFeed g[] = {f[0], {"T", ONYX_ELEM_INT64, 1, {3}, bad}};
  expect_error(m, g, 2, "L", "nll", "target value 3");
  otm_free(m);
}

/* --- Samplers ------------------------------------------------------------------------ */

static void test_gridsample_wrong_rank(void** state) {
  (void)state;
  static const float x[4] = {0}, grid[4] = {0};
  OxTestModel* m = otm_new(20);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 1, 2, 2});
  otm_input(m, "G", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 2, 2});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, -1, NULL);
  otm_node(m, "GridSample", "gs", "X,G", "Y");
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT32, 4, {1, 1, 2, 2}, x},
                 {"G", ONYX_ELEM_FLOAT32, 3, {1, 2, 2}, grid}};
  expect_error(m, f, 2, "Y", "gs", "grid must be");
  otm_free(m);
}

static void test_rnn_bidirectional_layout1(void** state) {
  (void)state;
  /* X [batch 2, seq 3, input 1]; forward LeakyRelu(alpha 0.1), reverse Tanh;
   * initial_h [batch, dirs, hidden] in layout 1. */
  static const float x[6] = {1.0f, 0.5f, -1.0f, 0.2f, -0.4f, 2.0f};
  static const float w[4] = {0.5f, -1.0f, 0.3f, 0.8f};
  static const float r[8] = {0.1f, 0.2f, -0.3f, 0.4f, 0.5f, -0.1f, 0.2f, 0.3f};
  static const float h0[8] = {0.1f, -0.2f, 0.0f, 0.3f, 0.2f, 0.2f, -0.1f, 0.0f};
  OxTestModel* m = otm_new(14);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 3, 1});
  otm_input(m, "H0", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 2, 2});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 2, 1}, w);
  otm_initializer(m, "R", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 2, 2}, r);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){2, 3, 2, 2});
  otm_output(m, "Yh", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 2, 2});
  OxTestNode* n = otm_node(m, "RNN", "rnn0", "X,W,R,,,H0", "Y,Yh");
  otm_attr_int(n, "hidden_size", 2);
  otm_attr_int(n, "layout", 1);
  otm_attr_string(n, "direction", "bidirectional");
  otm_attr_strings(n, "activations", 2, (const char*[]){"LeakyRelu", "Tanh"});
  otm_attr_floats(n, "activation_alpha", 1, (float[]){0.1f});
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT32, 3, {2, 3, 1}, x},
                 {"H0", ONYX_ELEM_FLOAT32, 3, {2, 2, 2}, h0}};
  OnyxValue* got[2] = {0};
  ots_ok(ots_run(m, f, 2, (const char*[]){"Y", "Yh"}, 2, got));
  static const float y[24] = {
      0.47f,         -0.111f,       0.301064422f, 0.694151939f, 0.2748f,       -0.06854f,
      0.0517609944f, 0.15190787f,   -0.0486228f,  0.890144f,    -0.318520777f, -0.610676833f,
      0.16f,         -0.018f,       0.073495055f, 0.182303502f, -0.01876f,     0.3448f,
      0.0383810532f, 0.0556271262f, 1.067084f,    -0.1856452f,  0.500520211f,  0.918601893f};
  static const float h[8] = {-0.0486228f, 0.890144f,   0.301064422f, 0.694151939f,
                             1.067084f,   -0.1856452f, 0.073495055f, 0.182303502f};
  expect_floats(got[0], y, 24, (int64_t[]){2, 3, 2, 2}, 4, 1e-5f);
  expect_floats(got[1], h, 8, (int64_t[]){2, 2, 2}, 3, 1e-5f);
  onyx_values_release(got, 2);
  otm_free(m);
}

static void test_convtranspose_double_group(void** state) {
  (void)state;
  static const double x[4] = {1, 2, 3, -1}, w[4] = {1, 0.5, 2, -1};
  OxTestModel* m = otm_new(11);
  otm_input(m, "X", ONYX_ELEM_FLOAT64, 3, (int64_t[]){1, 2, 2});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT64, 3, (int64_t[]){2, 1, 2}, w);
  otm_output(m, "Y", ONYX_ELEM_FLOAT64, 3, (int64_t[]){1, 2, 3});
  OxTestNode* n = otm_node(m, "ConvTranspose", "ct", "X,W", "Y");
  otm_attr_int(n, "group", 2);
  otm_attr_ints(n, "strides", 1, (int64_t[]){2});
  otm_attr_ints(n, "pads", 2, (int64_t[]){0, 1});
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT64, 3, {1, 2, 2}, x}};
  OnyxValue* got[1] = {0};
  ots_ok(ots_run(m, f, 1, (const char*[]){"Y"}, 1, got));
  const OnyxTensor* t = onyx_value_tensor(got[0]);
  check_shape(t, (int64_t[]){1, 2, 3}, 3);
  static const double want[6] = {1, 0.5, 2, 6, -3, -2};
  assert_memory_equal(onyx_tensor_data(t), want, sizeof want);
  onyx_values_release(got, 1);
  otm_free(m);
}

static void test_convtranspose_channel_mismatch(void** state) {
  (void)state;
  static const float x[6] = {0}, w[4] = {0};
  OxTestModel* m = otm_new(11);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 3, 2});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 1, 2}, w);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, -1, NULL);
  otm_node(m, "ConvTranspose", "bad_ct", "X,W", "Y");
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT32, 3, {1, 3, 2}, x}};
  expect_error(m, f, 1, "Y", "bad_ct", "X has 3 channels but W has 2 input channels");
  otm_free(m);
}

static void test_maxroipool_and_global_lppool(void** state) {
  (void)state;
  float x[16];
  for (int i = 0; i < 16; i++)
    x[i] = (float)i;
  static const float rois[5] = {0, 0, 0, 3, 3};
  OxTestModel* m = otm_new(11);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 1, 4, 4});
  otm_initializer(m, "R", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 5}, rois);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 1, 2, 2});
  OxTestNode* n = otm_node(m, "MaxRoiPool", "mrp", "X,R", "Y");
  otm_attr_ints(n, "pooled_shape", 2, (int64_t[]){2, 2});
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT32, 4, {1, 1, 4, 4}, x}};
  OnyxValue* got[1] = {0};
  ots_ok(ots_run(m, f, 1, (const char*[]){"Y"}, 1, got));
  static const float y[4] = {5, 7, 13, 15};
  expect_floats(got[0], y, 4, (int64_t[]){1, 1, 2, 2}, 4, 0);
  onyx_values_release(got, 1);
  otm_free(m);

  static const float xl[6] = {1, -2, 3, 0.5f, 0.5f, -4};
  m = otm_new(11);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 2, 3});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 2, 1});
  n = otm_node(m, "GlobalLpPool", "glp", "X", "Y");
  otm_attr_int(n, "p", 1);
  OtsFeed g[] = {{"X", ONYX_ELEM_FLOAT32, 3, {1, 2, 3}, xl}};
  ots_ok(ots_run(m, g, 1, (const char*[]){"Y"}, 1, got));
  static const float yl[2] = {6, 5};
  expect_floats(got[0], yl, 2, (int64_t[]){1, 2, 1}, 3, 1e-6f);
  onyx_values_release(got, 1);
  otm_free(m);
}

static void test_upsample7_scales_attribute(void** state) {
  (void)state;
  static const float x[4] = {1, 2, 3, 4};
  OxTestModel* m = otm_new(7);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 1, 2, 2});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 1, 4, 6});
  OxTestNode* n = otm_node(m, "Upsample", "up", "X", "Y");
  otm_attr_floats(n, "scales", 4, (float[]){1, 1, 2, 3});
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT32, 4, {1, 1, 2, 2}, x}};
  OnyxValue* got[1] = {0};
  ots_ok(ots_run(m, f, 1, (const char*[]){"Y"}, 1, got));
  static const float y[24] = {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2,
                              3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4};
  expect_floats(got[0], y, 24, (int64_t[]){1, 1, 4, 6}, 4, 0);
  onyx_values_release(got, 1);
  otm_free(m);
}

static void test_maxunpool_bad_index(void** state) {
  (void)state;
  static const float x[4] = {1, 2, 3, 4};
  static const int64_t idx[4] = {0, 3, 8, 99}; /* 99 is past the 4x4 unpooled plane */
  OxTestModel* m = otm_new(11);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 1, 2, 2});
  otm_input(m, "I", ONYX_ELEM_INT64, 4, (int64_t[]){1, 1, 2, 2});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 1, 4, 4});
  OxTestNode* n = otm_node(m, "MaxUnpool", "unpool", "X,I", "Y");
  otm_attr_ints(n, "kernel_shape", 2, (int64_t[]){2, 2});
  otm_attr_ints(n, "strides", 2, (int64_t[]){2, 2});
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT32, 4, {1, 1, 2, 2}, x},
                 {"I", ONYX_ELEM_INT64, 4, {1, 1, 2, 2}, idx}};
  expect_error(m, f, 2, "Y", "unpool", "index 99 in I");
  otm_free(m);
}

static void test_gridsample16_bilinear_center(void** state) {
  (void)state;
  /* Opset 16 (mode "bilinear"): the grid point (0, 0) without align_corners
   * is pixel (0.5, 0.5), the mean of the 2x2 input. */
  static const float x[4] = {1, 2, 3, 4}, grid[4] = {0, 0, -1, -1};
  OxTestModel* m = otm_new(16);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 1, 2, 2});
  otm_input(m, "G", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 1, 2, 2});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 1, 1, 2});
  otm_node(m, "GridSample", "gs16", "X,G", "Y");
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT32, 4, {1, 1, 2, 2}, x},
                 {"G", ONYX_ELEM_FLOAT32, 4, {1, 1, 2, 2}, grid}};
  OnyxValue* got[1] = {0};
  ots_ok(ots_run(m, f, 2, (const char*[]){"Y"}, 1, got));
  /* (-1, -1) is pixel (-0.5, -0.5): a quarter of pixel (0, 0), zeros padding. */
  static const float y[2] = {2.5f, 0.25f};
  expect_floats(got[0], y, 2, (int64_t[]){1, 1, 1, 2}, 4, 1e-6f);
  onyx_values_release(got, 1);
  otm_free(m);
}

static void test_empty_inputs(void** state) {
  (void)state;
  /* NonMaxSuppression over zero boxes: a [0, 3] result. */
  OxTestModel* m = otm_new(11);
  otm_input(m, "B", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 0, 4});
  otm_input(m, "S", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 1, 0});
  otm_output(m, "Y", ONYX_ELEM_INT64, 2, (int64_t[]){-1, 3});
  otm_node(m, "NonMaxSuppression", "nms_empty", "B,S", "Y");
  float none[1] = {0};
  OtsFeed f[] = {{"B", ONYX_ELEM_FLOAT32, 3, {1, 0, 4}, none},
                 {"S", ONYX_ELEM_FLOAT32, 3, {1, 1, 0}, none}};
  OnyxValue* got[2] = {0};
  ots_ok(ots_run(m, f, 2, (const char*[]){"Y"}, 1, got));
  check_shape(onyx_value_tensor(got[0]), (int64_t[]){0, 3}, 2);
  onyx_values_release(got, 1);
  otm_free(m);

  /* LSTM over a zero-length sequence: Y is empty and Y_h the initial state (zeros). */
  static const float w[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  m = otm_new(14);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 3, (int64_t[]){0, 1, 1});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 8, 1}, w);
  otm_initializer(m, "R", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 8, 2}, (float[16]){0});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){0, 1, 1, 2});
  otm_output(m, "Yh", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 1, 2});
  OxTestNode* n = otm_node(m, "LSTM", "lstm_empty", "X,W,R", "Y,Yh");
  otm_attr_int(n, "hidden_size", 2);
  OtsFeed g[] = {{"X", ONYX_ELEM_FLOAT32, 3, {0, 1, 1}, none}};
  ots_ok(ots_run(m, g, 1, (const char*[]){"Y", "Yh"}, 2, got));
  check_shape(onyx_value_tensor(got[0]), (int64_t[]){0, 1, 1, 2}, 4);
  static const float zeros[2] = {0, 0};
  expect_floats(got[1], zeros, 2, (int64_t[]){1, 1, 2}, 3, 0);
  onyx_values_release(got, 2);
  otm_free(m);

  /* Resize of a zero batch: an empty output of the resized shape. */
  static const float scales[4] = {1, 1, 2, 2};
  m = otm_new(13);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){0, 1, 2, 2});
  otm_initializer(m, "S", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4}, scales);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){0, 1, 4, 4});
  otm_node(m, "Resize", "rs_empty", "X,,S", "Y");
  OtsFeed h[] = {{"X", ONYX_ELEM_FLOAT32, 4, {0, 1, 2, 2}, none}};
  ots_ok(ots_run(m, h, 1, (const char*[]){"Y"}, 1, got));
  check_shape(onyx_value_tensor(got[0]), (int64_t[]){0, 1, 4, 4}, 4);
  onyx_values_release(got, 1);
  otm_free(m);
}

/* Conv whose weights are a graph input (never packed at session creation,
 * as in a training model): a sum checked by hand, a zero batch and zero
 * output channels (empty results), and zero input channels (zeros). */
static void test_conv_runtime_weights(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){-1, -1, 3, 3});
  otm_input(m, "W", ONYX_ELEM_FLOAT32, 4, (int64_t[]){-1, -1, 3, 3});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){-1, -1, 3, 3});
  OxTestNode* n = otm_node(m, "Conv", "conv_w_input", "X,W", "Y");
  otm_attr_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
  float ones[9];
  for (int i = 0; i < 9; i++)
    ones[i] = 1.0f;
  /* All ones, pad 1: each output counts the window's pixels inside X. */
  static const float y[9] = {4, 6, 4, 6, 9, 6, 4, 6, 4};
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT32, 4, {1, 1, 3, 3}, ones},
                 {"W", ONYX_ELEM_FLOAT32, 4, {1, 1, 3, 3}, ones}};
  OnyxValue* got[1] = {0};
  ots_ok(ots_run(m, f, 2, (const char*[]){"Y"}, 1, got));
  expect_floats(got[0], y, 9, (int64_t[]){1, 1, 3, 3}, 4, 0);
  onyx_values_release(got, 1);
  float none[1] = {0};
  OtsFeed e[] = {{"X", ONYX_ELEM_FLOAT32, 4, {0, 1, 3, 3}, none},
                 {"W", ONYX_ELEM_FLOAT32, 4, {1, 1, 3, 3}, ones}};
  ots_ok(ots_run(m, e, 2, (const char*[]){"Y"}, 1, got));
  check_shape(onyx_value_tensor(got[0]), (int64_t[]){0, 1, 3, 3}, 4);
  onyx_values_release(got, 1);
  OtsFeed z[] = {{"X", ONYX_ELEM_FLOAT32, 4, {1, 1, 3, 3}, ones},
                 {"W", ONYX_ELEM_FLOAT32, 4, {0, 1, 3, 3}, none}};
  ots_ok(ots_run(m, z, 2, (const char*[]){"Y"}, 1, got));
  check_shape(onyx_value_tensor(got[0]), (int64_t[]){1, 0, 3, 3}, 4);
  onyx_values_release(got, 1);
  /* No input channels: every output is an empty sum, 0. */
  static const float zeros[9] = {0};
  OtsFeed c0[] = {{"X", ONYX_ELEM_FLOAT32, 4, {1, 0, 3, 3}, none},
                  {"W", ONYX_ELEM_FLOAT32, 4, {1, 0, 3, 3}, none}};
  ots_ok(ots_run(m, c0, 2, (const char*[]){"Y"}, 1, got));
  expect_floats(got[0], zeros, 9, (int64_t[]){1, 1, 3, 3}, 4, 0);
  onyx_values_release(got, 1);
  otm_free(m);
}

static void test_resize_nearest_int64_exact(void** state) {
  (void)state;
  /* Nearest copies elements: int64 values beyond 2^53 survive exactly. */
  static const int64_t x[2] = {((int64_t)1 << 60) + 1, -3};
  static const float scales[2] = {1, 2};
  OxTestModel* m = otm_new(13);
  otm_input(m, "X", ONYX_ELEM_INT64, 2, (int64_t[]){1, 2});
  otm_initializer(m, "S", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2}, scales);
  otm_output(m, "Y", ONYX_ELEM_INT64, 2, (int64_t[]){1, 4});
  OxTestNode* n = otm_node(m, "Resize", "rs_i64", "X,,S", "Y");
  otm_attr_string(n, "coordinate_transformation_mode", "asymmetric");
  otm_attr_string(n, "nearest_mode", "floor");
  OtsFeed f[] = {{"X", ONYX_ELEM_INT64, 2, {1, 2}, x}};
  OnyxValue* got[1] = {0};
  ots_ok(ots_run(m, f, 1, (const char*[]){"Y"}, 1, got));
  const OnyxTensor* t = onyx_value_tensor(got[0]);
  check_shape(t, (int64_t[]){1, 4}, 2);
  const int64_t want[4] = {x[0], x[0], x[1], x[1]};
  assert_memory_equal(onyx_tensor_data(t), want, sizeof want);
  onyx_values_release(got, 1);
  otm_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lstm_two_steps),
      cmocka_unit_test(test_gru_reverse_sequence_lens),
      cmocka_unit_test(test_lstm_bad_weight_shape),
      cmocka_unit_test(test_resize_linear_half_pixel),
      cmocka_unit_test(test_resize_nearest_sizes_axes),
      cmocka_unit_test(test_resize_scales_and_sizes_both_given),
      cmocka_unit_test(test_nms_suppression),
      cmocka_unit_test(test_instancenorm_double),
      cmocka_unit_test(test_instancenorm_channel_mismatch),
      cmocka_unit_test(test_groupnorm21_per_channel),
      cmocka_unit_test(test_rmsnorm_float16),
      cmocka_unit_test(test_nll_mean_weight_ignore),
      cmocka_unit_test(test_gridsample_wrong_rank),
      cmocka_unit_test(test_rnn_bidirectional_layout1),
      cmocka_unit_test(test_convtranspose_double_group),
      cmocka_unit_test(test_convtranspose_channel_mismatch),
      cmocka_unit_test(test_maxroipool_and_global_lppool),
      cmocka_unit_test(test_upsample7_scales_attribute),
      cmocka_unit_test(test_maxunpool_bad_index),
      cmocka_unit_test(test_gridsample16_bilinear_center),
      cmocka_unit_test(test_empty_inputs),
      cmocka_unit_test(test_conv_runtime_weights),
      cmocka_unit_test(test_resize_nearest_int64_exact),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
