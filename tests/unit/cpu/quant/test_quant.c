/* test_quant.c — the CPU provider's quantization, signal and random kernels
 * through the public API, on edge cases the ONNX node suite misses.
 *
 * Expected values: the quantization ones were computed with numpy
 * (np.clip(np.rint(x / scale) + zp, lo, hi)) or by hand from the ONNX float8
 * tables; the DFT ones with numpy.fft or, for long lengths, with the direct
 * O(n^2) definition evaluated here in long double. Random ops are checked
 * for shape, type, range and determinism under a seed only: their values
 * are Onyx's own (see cpu_random.c). */
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

/* --- helpers ----------------------------------------------------------------------- */

static OnyxStatus* session_from(OxTestModel* m, OnyxSession** out) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* opts = NULL;
  OnyxStatus* st = onyx_session_options_create(&opts);
  if (!st) st = onyx_session_options_set_optimization_level(opts, ONYX_OPT_DISABLED);
  if (!st) st = onyx_session_options_set_threads(opts, 2);
  if (!st) st = onyx_session_create_from_bytes(opts, bytes, len, NULL, out);
  onyx_session_options_release(opts);
  free(bytes);
  return st;
}

static OnyxSession* session_ok(OxTestModel* m) {
  OnyxSession* s = NULL;
  OnyxStatus* st = session_from(m, &s);
  if (st) fail_msg("session creation failed: %s", onyx_status_message(st));
  return s;
}

/* Runs a session without inputs; outputs "Y". */
static OnyxStatus* run_y(OnyxSession* s, OnyxValue** y) {
  const char* name = "Y";
  return onyx_session_run(s, NULL, NULL, NULL, 0, &name, 1, y);
}

static OnyxValue* run_ok(OnyxSession* s) {
  OnyxValue* y = NULL;
  OnyxStatus* st = run_y(s, &y);
  if (st) fail_msg("run failed: %s", onyx_status_message(st));
  return y;
}

/* Builds, runs and checks type and shape of Y; returns its tensor's value. */
static OnyxValue* build_run(OxTestModel* m, OnyxElemType type, size_t rank, const int64_t* dims) {
  OnyxSession* s = session_ok(m);
  OnyxValue* y = run_ok(s);
  onyx_session_release(s);
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_non_null(t);
  assert_int_equal(onyx_tensor_elem_type(t), type);
  assert_int_equal(onyx_tensor_rank(t), rank);
  for (size_t i = 0; i < rank; i++)
    assert_int_equal(onyx_tensor_dims(t)[i], dims[i]);
  return y;
}

static void assert_bytes(const OnyxValue* y, const uint8_t* want, size_t n) {
  const uint8_t* got = onyx_tensor_data(onyx_value_tensor(y));
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i]) fail_msg("byte %zu: got 0x%02x, want 0x%02x", i, got[i], want[i]);
}

static void assert_floats(const OnyxValue* y, const double* want, size_t n, double tol) {
  const float* got = onyx_tensor_data(onyx_value_tensor(y));
  for (size_t i = 0; i < n; i++)
    if (!(fabs((double)got[i] - want[i]) <= tol * (1.0 + fabs(want[i]))))
      fail_msg("element %zu: got %.9g, want %.9g", i, (double)got[i], want[i]);
}

/* A Y-producing model: node `op` over initializers named in `inputs`. */
static OxTestModel* model(int64_t opset) {
  OxTestModel* m = otm_new(opset);
  if (opset >= 21) otm_set_ir_version(m, 10);
  return m;
}

/* --- QuantizeLinear / DequantizeLinear ------------------------------------------------ */

static const float QX[8] = {-1000, -2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 1000};

/* Halves round to even; out-of-range values saturate. */
static void test_quantize_round_half_even(void** state) {
  (void)state;
  OxTestModel* m = model(13);
  otm_initializer(m, "x", ONYX_ELEM_FLOAT32, 1, (int64_t[]){8}, QX);
  otm_initializer(m, "s", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){1.0f});
  otm_initializer(m, "z", ONYX_ELEM_INT8, 0, NULL, (int8_t[]){0});
  otm_node(m, "QuantizeLinear", "q", "x,s,z", "Y");
  otm_output(m, "Y", ONYX_ELEM_INT8, 1, (int64_t[]){8});
  OnyxValue* y = build_run(m, ONYX_ELEM_INT8, 1, (int64_t[]){8});
  const int8_t want[8] = {-128, -2, -2, 0, 0, 2, 2, 127};
  assert_memory_equal(onyx_tensor_data(onyx_value_tensor(y)), want, sizeof want);
  onyx_value_release(y);

  m = model(10);
  otm_initializer(m, "x", ONYX_ELEM_FLOAT32, 1, (int64_t[]){8}, QX);
  otm_initializer(m, "s", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){0.5f});
  otm_initializer(m, "z", ONYX_ELEM_UINT8, 0, NULL, (uint8_t[]){128});
  otm_node(m, "QuantizeLinear", "q", "x,s,z", "Y");
  otm_output(m, "Y", ONYX_ELEM_UINT8, 1, (int64_t[]){8});
  y = build_run(m, ONYX_ELEM_UINT8, 1, (int64_t[]){8});
  assert_bytes(y, (const uint8_t[]){0, 123, 125, 127, 129, 131, 133, 255}, 8);
  onyx_value_release(y);
}

/* No zero point: uint8 output. */
static void test_quantize_default_uint8(void** state) {
  (void)state;
  OxTestModel* m = model(13);
  otm_initializer(m, "x", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, (float[]){-1.0f, 2.6f, 300.0f});
  otm_initializer(m, "s", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){1.0f});
  otm_node(m, "QuantizeLinear", "q", "x,s", "Y");
  otm_output(m, "Y", ONYX_ELEM_UINT8, 1, (int64_t[]){3});
  OnyxValue* y = build_run(m, ONYX_ELEM_UINT8, 1, (int64_t[]){3});
  assert_bytes(y, (const uint8_t[]){0, 3, 255}, 3);
  onyx_value_release(y);
}

/* Per-axis with a negative axis (-1 on a [2, 3] tensor). */
static void test_quantize_per_axis_negative(void** state) {
  (void)state;
  OxTestModel* m = model(13);
  otm_initializer(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3},
                  (float[]){0.1f, 1.7f, -3.2f, 2.5f, -0.4f, 9.9f});
  otm_initializer(m, "s", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, (float[]){0.1f, 0.5f, 2.0f});
  otm_initializer(m, "z", ONYX_ELEM_UINT8, 1, (int64_t[]){3}, (uint8_t[]){10, 20, 250});
  otm_attr_int(otm_node(m, "QuantizeLinear", "q", "x,s,z", "Y"), "axis", -1);
  otm_output(m, "Y", ONYX_ELEM_UINT8, 2, (int64_t[]){2, 3});
  OnyxValue* y = build_run(m, ONYX_ELEM_UINT8, 2, (int64_t[]){2, 3});
  assert_bytes(y, (const uint8_t[]){11, 23, 248, 35, 19, 255}, 6);
  onyx_value_release(y);
}

/* Blocked along an axis whose length (5) is not a multiple of the block (2). */
static void test_quantize_blocked_ragged(void** state) {
  (void)state;
  OxTestModel* m = model(21);
  otm_initializer(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 5},
                  (float[]){1, 2, 3, 4, 5, -1, -2, -3, -4, -5});
  otm_initializer(m, "s", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3},
                  (float[]){0.5f, 1, 2, 0.25f, 0.5f, 4});
  otm_initializer(m, "z", ONYX_ELEM_INT8, 2, (int64_t[]){2, 3}, (int8_t[]){0, 1, -1, 2, 0, 3});
  OxTestNode* n = otm_node(m, "QuantizeLinear", "q", "x,s,z", "Y");
  otm_attr_int(n, "axis", 1);
  otm_attr_int(n, "block_size", 2);
  otm_output(m, "Y", ONYX_ELEM_INT8, 2, (int64_t[]){2, 5});
  OnyxValue* y = build_run(m, ONYX_ELEM_INT8, 2, (int64_t[]){2, 5});
  const int8_t want[10] = {2, 4, 4, 5, 1, -2, -6, -6, -8, 2};
  assert_memory_equal(onyx_tensor_data(onyx_value_tensor(y)), want, sizeof want);
  onyx_value_release(y);
}

/* int4 with an odd element count: packed output, then dequantized back. */
static void test_int4_round_trip(void** state) {
  (void)state;
  OxTestModel* m = model(21);
  otm_initializer(m, "x", ONYX_ELEM_FLOAT32, 1, (int64_t[]){5},
                  (float[]){-9.0f, -3.3f, 0.2f, 4.4f, 20.0f});
  otm_initializer(m, "s", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){0.5f});
  otm_initializer(m, "z", ONYX_ELEM_INT4, 0, NULL, (uint8_t[]){0x01});
  otm_node(m, "QuantizeLinear", "q", "x,s,z", "q");
  otm_node(m, "DequantizeLinear", "dq", "q,s,z", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){5});
  OnyxValue* y = build_run(m, ONYX_ELEM_FLOAT32, 1, (int64_t[]){5});
  assert_floats(y, (const double[]){-4.5, -3.5, 0.0, 3.0, 3.0}, 5, 0);
  onyx_value_release(y);

  /* The packed bytes: q = [-8, -6, 1, 7, 7], low nibble first. */
  m = model(21);
  otm_initializer(m, "x", ONYX_ELEM_FLOAT32, 1, (int64_t[]){5},
                  (float[]){-9.0f, -3.3f, 0.2f, 4.4f, 20.0f});
  otm_initializer(m, "s", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){0.5f});
  otm_initializer(m, "z", ONYX_ELEM_INT4, 0, NULL, (uint8_t[]){0x01});
  otm_node(m, "QuantizeLinear", "q", "x,s,z", "Y");
  otm_output(m, "Y", ONYX_ELEM_INT4, 1, (int64_t[]){5});
  y = build_run(m, ONYX_ELEM_INT4, 1, (int64_t[]){5});
  assert_bytes(y, (const uint8_t[]){0xA8, 0x71, 0x07}, 3); /* the padding nibble is 0 */
  onyx_value_release(y);
}

/* float8e4m3fn: saturate on gives +-448; off gives NaN (0x7F / 0xFF). 464
 * is the tie between 448 and 480 and rounds to even (448); 465 rounds to
 * 480, beyond the range. -0 / 1 + 0 is +0 in IEEE arithmetic: code 0. */
static void run_f8(int saturate, int32_t type, const uint8_t* want) {
  OxTestModel* m = model(19);
  otm_initializer(m, "x", ONYX_ELEM_FLOAT32, 1, (int64_t[]){6},
                  (float[]){1000.0f, -1000.0f, 448.0f, 464.0f, 465.0f, -0.0f});
  otm_initializer(m, "s", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){1.0f});
  otm_initializer(m, "z", type, 0, NULL, (uint8_t[]){0});
  otm_attr_int(otm_node(m, "QuantizeLinear", "q", "x,s,z", "Y"), "saturate", saturate);
  otm_output(m, "Y", type, 1, (int64_t[]){6});
  OnyxValue* y = build_run(m, (OnyxElemType)type, 1, (int64_t[]){6});
  assert_bytes(y, want, 6);
  onyx_value_release(y);
}

static void test_float8_saturate(void** state) {
  (void)state;
  run_f8(1, ONYX_ELEM_FLOAT8E4M3FN, (const uint8_t[]){0x7E, 0xFE, 0x7E, 0x7E, 0x7E, 0x00});
  run_f8(0, ONYX_ELEM_FLOAT8E4M3FN, (const uint8_t[]){0x7F, 0xFF, 0x7E, 0x7E, 0x7F, 0x00});
  /* E5M2 without saturation overflows to infinity (0x7C / 0xFC). */
  run_f8(0, ONYX_ELEM_FLOAT8E5M2, (const uint8_t[]){0x64, 0xE4, 0x5F, 0x5F, 0x5F, 0x00});
  /* FNUZ: one zero (no -0) and max 240 for E4M3FNUZ. */
  run_f8(1, ONYX_ELEM_FLOAT8E4M3FNUZ, (const uint8_t[]){0x7F, 0xFF, 0x7F, 0x7F, 0x7F, 0x00});
}

static void test_float8_e5m2_inf(void** state) {
  (void)state;
  OxTestModel* m = model(19);
  otm_initializer(m, "x", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, (float[]){1e6f, -1e6f, 3.0f});
  otm_initializer(m, "s", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){1.0f});
  otm_initializer(m, "z", ONYX_ELEM_FLOAT8E5M2, 0, NULL, (uint8_t[]){0});
  otm_attr_int(otm_node(m, "QuantizeLinear", "q", "x,s,z", "Y"), "saturate", 0);
  otm_output(m, "Y", ONYX_ELEM_FLOAT8E5M2, 1, (int64_t[]){3});
  OnyxValue* y = build_run(m, ONYX_ELEM_FLOAT8E5M2, 1, (int64_t[]){3});
  /* 3.0 = 1.5 * 2^1: exponent 16, mantissa 2 -> 0_10000_10. */
  assert_bytes(y, (const uint8_t[]){0x7C, 0xFC, 0x42}, 3);
  onyx_value_release(y);
}

/* Per-axis DequantizeLinear of uint8 with float16 output (opset 23
 * output_dtype). */
static void test_dequantize_output_dtype(void** state) {
  (void)state;
  OxTestModel* m = model(23);
  otm_initializer(m, "x", ONYX_ELEM_UINT8, 2, (int64_t[]){2, 2}, (uint8_t[]){0, 255, 128, 3});
  otm_initializer(m, "s", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2}, (float[]){0.5f, 2.0f});
  otm_initializer(m, "z", ONYX_ELEM_UINT8, 1, (int64_t[]){2}, (uint8_t[]){128, 1});
  OxTestNode* n = otm_node(m, "DequantizeLinear", "dq", "x,s,z", "Y");
  otm_attr_int(n, "axis", 0);
  otm_attr_int(n, "output_dtype", ONYX_ELEM_FLOAT16);
  otm_output(m, "Y", ONYX_ELEM_FLOAT16, 2, (int64_t[]){2, 2});
  OnyxValue* y = build_run(m, ONYX_ELEM_FLOAT16, 2, (int64_t[]){2, 2});
  /* (x - z) * s: -64, 63.5, 254, 4 as IEEE halves. */
  const uint16_t want[4] = {0xD400, 0x53F0, 0x5BF0, 0x4400};
  assert_memory_equal(onyx_tensor_data(onyx_value_tensor(y)), want, sizeof want);
  onyx_value_release(y);
}

/* precision = float16 (opset 23): x / scale is rounded to half first, so
 * 1.4997 becomes 1.5 and then rounds to even (2); in float32 it gives 1. */
static void run_precision(int precision, const uint8_t* want) {
  OxTestModel* m = model(23);
  otm_initializer(m, "x", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2}, (float[]){1.4997f, 2.4997f});
  otm_initializer(m, "s", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){1.0f});
  OxTestNode* n = otm_node(m, "QuantizeLinear", "q", "x,s", "Y");
  if (precision) otm_attr_int(n, "precision", precision);
  otm_output(m, "Y", ONYX_ELEM_UINT8, 1, (int64_t[]){2});
  OnyxValue* y = build_run(m, ONYX_ELEM_UINT8, 1, (int64_t[]){2});
  assert_bytes(y, want, 2);
  onyx_value_release(y);
}

static void test_quantize_precision(void** state) {
  (void)state;
  run_precision(0, (const uint8_t[]){1, 2});
  run_precision(ONYX_ELEM_FLOAT16, (const uint8_t[]){2, 2});
}

/* A float8e8m0 scale (opset 24): 0x7E is 2^(126 - 127) = 0.5. */
static void test_dequantize_e8m0_scale(void** state) {
  (void)state;
  OxTestModel* m = model(24);
  otm_initializer(m, "x", ONYX_ELEM_INT8, 1, (int64_t[]){4}, (int8_t[]){1, -2, 3, 127});
  otm_initializer(m, "s", ONYX_ELEM_FLOAT8E8M0, 0, NULL, (uint8_t[]){0x7E});
  otm_attr_int(otm_node(m, "DequantizeLinear", "dq", "x,s", "Y"), "output_dtype",
               ONYX_ELEM_FLOAT16);
  otm_output(m, "Y", ONYX_ELEM_FLOAT16, 1, (int64_t[]){4});
  OnyxValue* y = build_run(m, ONYX_ELEM_FLOAT16, 1, (int64_t[]){4});
  const uint16_t want[4] = {0x3800, 0xBC00, 0x3E00, 0x53F0}; /* 0.5, -1, 1.5, 63.5 */
  assert_memory_equal(onyx_tensor_data(onyx_value_tensor(y)), want, sizeof want);
  onyx_value_release(y);
}

static void test_quantize_empty(void** state) {
  (void)state;
  OxTestModel* m = model(13);
  otm_initializer(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){0, 3}, NULL);
  otm_initializer(m, "s", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, (float[]){1, 1, 1});
  otm_node(m, "QuantizeLinear", "q", "x,s", "Y");
  otm_output(m, "Y", ONYX_ELEM_UINT8, 2, (int64_t[]){0, 3});
  OnyxValue* y = build_run(m, ONYX_ELEM_UINT8, 2, (int64_t[]){0, 3});
  onyx_value_release(y);
}

/* A per-axis scale of the wrong length is an error naming the node. */
static void test_quantize_bad_scale(void** state) {
  (void)state;
  OxTestModel* m = model(13);
  otm_initializer(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3}, NULL);
  otm_initializer(m, "s", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4}, (float[]){1, 1, 1, 1});
  otm_node(m, "QuantizeLinear", "bad_q", "x,s", "Y");
  otm_output(m, "Y", ONYX_ELEM_UINT8, 2, (int64_t[]){2, 3});
  OnyxSession* s = NULL;
  OnyxStatus* st = session_from(m, &s);
  OnyxValue* y = NULL;
  if (!st) st = run_y(s, &y);
  assert_non_null(st);
  assert_non_null(strstr(onyx_status_message(st), "bad_q"));
  assert_non_null(strstr(onyx_status_message(st), "scale"));
  onyx_status_release(st);
  onyx_value_release(y);
  onyx_session_release(s);
}

/* --- integer products --------------------------------------------------------------- */

/* MatMulInteger with a per-row a_zero_point and a broadcast batch. */
static void test_matmul_integer_per_row(void** state) {
  (void)state;
  OxTestModel* m = model(10);
  /* A [2, 2, 3] (batch 2), B [3, 2] (broadcast). */
  otm_initializer(m, "A", ONYX_ELEM_UINT8, 3, (int64_t[]){2, 2, 3},
                  (uint8_t[]){1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  otm_initializer(m, "B", ONYX_ELEM_INT8, 2, (int64_t[]){3, 2}, (int8_t[]){1, -1, 2, 0, -3, 4});
  otm_initializer(m, "az", ONYX_ELEM_UINT8, 1, (int64_t[]){2}, (uint8_t[]){1, 2});
  otm_initializer(m, "bz", ONYX_ELEM_INT8, 0, NULL, (int8_t[]){1});
  otm_node(m, "MatMulInteger", "mmi", "A,B,az,bz", "Y");
  otm_output(m, "Y", ONYX_ELEM_INT32, 3, (int64_t[]){2, 2, 2});
  OnyxValue* y = build_run(m, ONYX_ELEM_INT32, 3, (int64_t[]){2, 2, 2});
  /* numpy: np.matmul(A - az[:, None], B - 1) */
  const int32_t want[8] = {-7, 5, -13, 5, -25, 5, -31, 5};
  assert_memory_equal(onyx_tensor_data(onyx_value_tensor(y)), want, sizeof want);
  onyx_value_release(y);
}

/* QLinearMatMul with a per-column b_scale. */
static void test_qlinear_matmul_per_column(void** state) {
  (void)state;
  OxTestModel* m = model(10);
  otm_initializer(m, "a", ONYX_ELEM_UINT8, 2, (int64_t[]){2, 2}, (uint8_t[]){10, 20, 30, 40});
  otm_initializer(m, "as", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){0.1f});
  otm_initializer(m, "az", ONYX_ELEM_UINT8, 0, NULL, (uint8_t[]){10});
  otm_initializer(m, "b", ONYX_ELEM_INT8, 2, (int64_t[]){2, 3}, (int8_t[]){1, 2, 3, -4, 5, -6});
  otm_initializer(m, "bs", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, (float[]){1.0f, 0.5f, 2.0f});
  otm_initializer(m, "bz", ONYX_ELEM_INT8, 1, (int64_t[]){3}, (int8_t[]){0, 1, 0});
  otm_initializer(m, "ys", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){0.25f});
  otm_initializer(m, "yz", ONYX_ELEM_INT8, 0, NULL, (int8_t[]){-5});
  otm_node(m, "QLinearMatMul", "qmm", "a,as,az,b,bs,bz,ys,yz", "Y");
  otm_output(m, "Y", ONYX_ELEM_INT8, 2, (int64_t[]){2, 3});
  OnyxValue* y = build_run(m, ONYX_ELEM_INT8, 2, (int64_t[]){2, 3});
  /* numpy: C = (a - 10) @ (b - bz); clip(rint(C * 0.1 * bs / 0.25) - 5, -128, 127) */
  const int8_t want[6] = {-21, 3, -53, -45, 23, -101};
  assert_memory_equal(onyx_tensor_data(onyx_value_tensor(y)), want, sizeof want);
  onyx_value_release(y);
}

/* ConvInteger / QLinearConv: two groups, stride 2 x 1, asymmetric pads,
 * per-channel weight zero points (and scales, bias). */
static OxTestModel* conv_model(bool qlinear) {
  uint8_t x[32];
  for (int i = 0; i < 32; i++)
    x[i] = (uint8_t)((i * 7) % 11);
  OxTestModel* m = model(10);
  otm_initializer(m, "x", ONYX_ELEM_UINT8, 4, (int64_t[]){1, 2, 4, 4}, x);
  otm_initializer(m, "w", ONYX_ELEM_INT8, 4, (int64_t[]){2, 1, 2, 2},
                  (int8_t[]){1, -2, 3, 0, -1, 2, 1, 4});
  otm_initializer(m, "xz", ONYX_ELEM_UINT8, 0, NULL, (uint8_t[]){3});
  otm_initializer(m, "wz", ONYX_ELEM_INT8, 1, (int64_t[]){2}, (int8_t[]){1, -2});
  OxTestNode* n;
  if (qlinear) {
    otm_initializer(m, "xs", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){0.5f});
    otm_initializer(m, "ws", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2}, (float[]){0.25f, 2.0f});
    otm_initializer(m, "ys", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){1.5f});
    otm_initializer(m, "yz", ONYX_ELEM_UINT8, 0, NULL, (uint8_t[]){100});
    otm_initializer(m, "b", ONYX_ELEM_INT32, 1, (int64_t[]){2}, (int32_t[]){10, -20});
    n = otm_node(m, "QLinearConv", "qconv", "x,xs,xz,w,ws,wz,ys,yz,b", "Y");
    otm_output(m, "Y", ONYX_ELEM_UINT8, 4, (int64_t[]){1, 2, 2, 4});
  } else {
    n = otm_node(m, "ConvInteger", "iconv", "x,w,xz,wz", "Y");
    otm_output(m, "Y", ONYX_ELEM_INT32, 4, (int64_t[]){1, 2, 2, 4});
  }
  otm_attr_int(n, "group", 2);
  otm_attr_ints(n, "strides", 2, (int64_t[]){2, 1});
  otm_attr_ints(n, "pads", 4, (int64_t[]){1, 0, 0, 1});
  return m;
}

static void test_conv_integer_groups(void** state) {
  (void)state;
  OnyxValue* y = build_run(conv_model(false), ONYX_ELEM_INT32, 4, (int64_t[]){1, 2, 2, 4});
  /* numpy: explicit loops over the zero-point-shifted, padded input. */
  const int32_t want[16] = {-10, 8, -7, 14, -6, -9, -1, -6, 33, 30, -6, -6, 51, 28, 16, 1};
  assert_memory_equal(onyx_tensor_data(onyx_value_tensor(y)), want, sizeof want);
  onyx_value_release(y);
  y = build_run(conv_model(true), ONYX_ELEM_UINT8, 4, (int64_t[]){1, 2, 2, 4});
  assert_bytes(
      y,
      (const uint8_t[]){100, 102, 100, 102, 100, 100, 101, 100, 109, 107, 83, 83, 121, 105, 97, 87},
      16);
  onyx_value_release(y);
}

/* --- DFT ------------------------------------------------------------------------------ */

/* DFT-20 of x [1, n, c] along axis 1; attributes inverse / onesided. */
static OnyxValue* run_dft(const float* x, int64_t n, int64_t c, int64_t dft_len, int inverse,
                          int onesided, int64_t out_len, int64_t out_c) {
  OxTestModel* m = model(20);
  otm_initializer(m, "x", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, n, c}, x);
  otm_initializer(m, "axis", ONYX_ELEM_INT64, 0, NULL, (int64_t[]){1});
  if (dft_len > 0) otm_initializer(m, "len", ONYX_ELEM_INT64, 0, NULL, &dft_len);
  OxTestNode* node = otm_node(m, "DFT", "dft", dft_len > 0 ? "x,len,axis" : "x,,axis", "Y");
  otm_attr_int(node, "inverse", inverse);
  otm_attr_int(node, "onesided", onesided);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, out_len, out_c});
  return build_run(m, ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, out_len, out_c});
}

static void test_dft_numpy(void** state) {
  (void)state;
  float x7[7];
  for (int k = 0; k < 7; k++)
    x7[k] = (float)(k * k - 3 * k) + 0.5f;
  OnyxValue* y = run_dft(x7, 7, 1, 0, 0, 0, 7, 2);
  const double fft7[14] = {31.5,        0,           4.59179389, 29.0712996,  -8.27412668,
                           11.1646274,  -10.3176672, 3.19540864, -10.3176672, -3.19540864,
                           -8.27412668, -11.1646274, 4.59179389, -29.0712996};
  assert_floats(y, fft7, 14, 1e-5);
  onyx_value_release(y);
  /* Onesided: the first 7 / 2 + 1 = 4 bins. */
  y = run_dft(x7, 7, 1, 0, 0, 1, 4, 2);
  assert_floats(y, fft7, 8, 1e-5);
  onyx_value_release(y);

  /* Complex-to-real (numpy.fft.irfft) of 4 bins into 7 and 6 samples. */
  const float c4[8] = {1, 2, -0.5f, 0.25f, 3, -1, 0.75f, 0};
  y = run_dft(c4, 4, 2, 7, 1, 1, 7, 1);
  assert_floats(y,
                (const double[]){1.07142857, -0.107304089, -0.657612715, 0.503931635, 1.01267587,
                                 -0.270403734, -0.552715542},
                7, 1e-5);
  onyx_value_release(y);
  y = run_dft(c4, 4, 2, 6, 1, 1, 6, 1);
  assert_floats(
      y, (const double[]){1.125, -0.325160316, -0.485843918, 1.20833333, 0.235843918, -0.758173018},
      6, 1e-5);
  onyx_value_release(y);

  /* Complex inverse of 5 points (numpy.fft.ifft). */
  const float z5[10] = {1, 1, 2, -1, -3, 0.5f, 0.25f, -2, 4, 0};
  y = run_dft(z5, 5, 2, 0, 1, 0, 5, 2);
  assert_floats(y,
                (const double[]){0.85, -0.3, 0.912098417, -0.381581321, -0.347694432, 0.652170935,
                                 -1.53386505, -0.113974334, 1.11946106, 1.14338472},
                10, 1e-5);
  onyx_value_release(y);
  /* dft_length pads with zeros (8) or truncates (3). */
  y = run_dft(z5, 5, 2, 8, 0, 0, 8, 2);
  assert_floats(y,
                (const double[]){4.25, -1.5, -3.38388348, 3.11611652, 9, -1.25, -6.85875721,
                                 -4.29809704, -0.25, 4.5, -1.61611652, 4.88388348, 7, 2.25,
                                 -0.141242789, 0.298097039},
                16, 1e-5);
  onyx_value_release(y);
  y = run_dft(z5, 5, 2, 3, 0, 0, 3, 2);
  assert_floats(y, (const double[]){0, 0.5, 0.200961894, -3.08012702, 2.79903811, 5.58012702}, 6,
                1e-5);
  onyx_value_release(y);
}

/* Long lengths against the direct definition: primes above the largest
 * radix (Bluestein), odd composites, a power of two. */
static void check_long_dft(int64_t n, int inverse) {
  float* x = malloc((size_t)n * 2 * sizeof *x);
  double* want = malloc((size_t)n * 2 * sizeof *want);
  assert_non_null(x);
  assert_non_null(want);
  for (int64_t k = 0; k < n; k++) {
    x[2 * k] = (float)sin(0.37 * (double)k) + 0.01f * (float)(k % 7);
    x[2 * k + 1] = (float)cos(1.3 * (double)k * (double)k / (double)n);
  }
  const long double pi = 3.141592653589793238462643383279503L;
  for (int64_t q = 0; q < n; q++) {
    long double re = 0, im = 0;
    for (int64_t k = 0; k < n; k++) {
      const long double a = (inverse ? 2 : -2) * pi * (long double)((q * k) % n) / (long double)n;
      re += (long double)x[2 * k] * cosl(a) - (long double)x[2 * k + 1] * sinl(a);
      im += (long double)x[2 * k] * sinl(a) + (long double)x[2 * k + 1] * cosl(a);
    }
    want[2 * q] = (double)(inverse ? re / n : re);
    want[2 * q + 1] = (double)(inverse ? im / n : im);
  }
  OnyxValue* y = run_dft(x, n, 2, 0, inverse, 0, n, 2);
  const float* got = onyx_tensor_data(onyx_value_tensor(y));
  double err = 0, mag = 0;
  for (int64_t i = 0; i < 2 * n; i++) {
    err = fmax(err, fabs((double)got[i] - want[i]));
    mag = fmax(mag, fabs(want[i]));
  }
  if (err > 1e-5 * mag + 1e-6)
    fail_msg("n = %lld: max error %g (max magnitude %g)", (long long)n, err, mag);
  onyx_value_release(y);
  free(x);
  free(want);
}

static void test_dft_long_lengths(void** state) {
  (void)state;
  const int64_t lengths[] = {1, 2, 61, 67, 97, 100, 127, 243, 256, 1009, 2 * 503};
  for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++) {
    check_long_dft(lengths[i], 0);
    check_long_dft(lengths[i], 1);
  }
}

/* One session, lengths changing between runs (the kernel keeps its last
 * FFT plan): each run must match the direct definition. */
static void test_dft_plan_reuse(void** state) {
  (void)state;
  OxTestModel* m = model(20);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, -1, 2});
  otm_initializer(m, "axis", ONYX_ELEM_INT64, 0, NULL, (int64_t[]){1});
  otm_node(m, "DFT", "dft", "x,,axis", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, -1, 2});
  OnyxSession* s = session_ok(m);
  const int64_t lengths[] = {5, 67, 67, 5, 12};
  for (size_t r = 0; r < sizeof lengths / sizeof *lengths; r++) {
    const int64_t n = lengths[r];
    float x[2 * 67];
    for (int64_t k = 0; k < 2 * n; k++)
      x[k] = (float)((k * 37 + (int64_t)r * 11) % 23) - 11.0f;
    OnyxValue* in = NULL;
    OnyxValue* y = NULL;
    const char* in_name = "x";
    const char* out_name = "Y";
    OnyxStatus* st = onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){1, n, 2}, 3, x,
                                              (size_t)(2 * n) * sizeof(float), &in);
    if (!st)
      st = onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &y);
    if (st) fail_msg("run %zu failed: %s", r, onyx_status_message(st));
    const float* got = onyx_tensor_data(onyx_value_tensor(y));
    assert_int_equal(onyx_tensor_elem_count(onyx_value_tensor(y)), (size_t)(2 * n));
    for (int64_t q = 0; q < n; q++) {
      long double re = 0, im = 0;
      for (int64_t k = 0; k < n; k++) {
        const long double a =
            -2 * 3.141592653589793238462643383279503L * (long double)((q * k) % n) / n;
        re += x[2 * k] * cosl(a) - x[2 * k + 1] * sinl(a);
        im += x[2 * k] * sinl(a) + x[2 * k + 1] * cosl(a);
      }
      if (fabs(got[2 * q] - (double)re) > 1e-3 || fabs(got[2 * q + 1] - (double)im) > 1e-3)
        fail_msg("run %zu (n = %lld), bin %lld: got %g%+gi, want %g%+gi", r, (long long)n,
                 (long long)q, got[2 * q], got[2 * q + 1], (double)re, (double)im);
    }
    onyx_value_release(y);
    onyx_value_release(in);
  }
  onyx_session_release(s);
}

static void test_dft_bad_axis(void** state) {
  (void)state;
  OxTestModel* m = model(20);
  otm_initializer(m, "x", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 4, 1}, NULL);
  otm_initializer(m, "axis", ONYX_ELEM_INT64, 0, NULL, (int64_t[]){2}); /* the complex dim */
  otm_node(m, "DFT", "dft_bad", "x,,axis", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 4, 2});
  OnyxSession* s = NULL;
  OnyxStatus* st = session_from(m, &s);
  OnyxValue* y = NULL;
  if (!st) st = run_y(s, &y);
  assert_non_null(st);
  assert_non_null(strstr(onyx_status_message(st), "dft_bad"));
  assert_non_null(strstr(onyx_status_message(st), "axis"));
  onyx_status_release(st);
  onyx_value_release(y);
  onyx_session_release(s);
}

/* STFT, two-sided, with a window and an explicit frame_length: 3 frames of 4
 * (numpy: np.fft.fft(x[3f:3f+4] * w)). */
static void test_stft_two_sided(void** state) {
  (void)state;
  const float x[10] = {0.0f,         0.744217694f,  1.18544972f,   1.16320932f,  0.734988153f,
                       0.149216771f, -0.271575779f, -0.282452613f, 0.168733358f, 0.91681391f};
  OxTestModel* m = model(17);
  otm_initializer(m, "x", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 10, 1}, x);
  otm_initializer(m, "step", ONYX_ELEM_INT64, 0, NULL, (int64_t[]){3});
  otm_initializer(m, "w", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4}, (float[]){0.1f, 0.6f, 1.0f, 0.3f});
  otm_initializer(m, "len", ONYX_ELEM_INT64, 0, NULL, (int64_t[]){4});
  otm_attr_int(otm_node(m, "STFT", "stft", "x,step,w,len", "Y"), "onesided", 0);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 3, 4, 2});
  OnyxValue* y = build_run(m, ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 3, 4, 2});
  assert_floats(y, (const double[]){1.98094317,    0, -1.18544972,   -0.0975678265,
                                    0.389956266,   0, -1.18544972,   0.0975678265,
                                    0.625057884,   0, -0.0328958407, -0.522465661,
                                    -0.0939824805, 0, -0.0328958407, 0.522465661,
                                    0.247148376,   0, -0.195890937,  0.44451575,
                                    0.0360031836,  0, -0.195890937,  -0.44451575},
                24, 1e-5);
  onyx_value_release(y);
}

/* Windows: symmetric Hann of 5 points is [0, .5, 1, .5, 0]. */
static void test_hann_symmetric(void** state) {
  (void)state;
  OxTestModel* m = model(17);
  otm_initializer(m, "n", ONYX_ELEM_INT32, 0, NULL, (int32_t[]){5});
  OxTestNode* node = otm_node(m, "HannWindow", "hann", "n", "Y");
  otm_attr_int(node, "periodic", 0);
  otm_attr_int(node, "output_datatype", ONYX_ELEM_FLOAT64);
  otm_output(m, "Y", ONYX_ELEM_FLOAT64, 1, (int64_t[]){5});
  OnyxValue* y = build_run(m, ONYX_ELEM_FLOAT64, 1, (int64_t[]){5});
  const double* got = onyx_tensor_data(onyx_value_tensor(y));
  const double want[5] = {0, 0.5, 1, 0.5, 0};
  for (int i = 0; i < 5; i++)
    assert_true(fabs(got[i] - want[i]) < 1e-12);
  onyx_value_release(y);
}

/* --- random ---------------------------------------------------------------------------- */

static OxTestModel* uniform_model(float seed, float low, float high, OnyxElemType dtype) {
  OxTestModel* m = model(22);
  OxTestNode* n = otm_node(m, "RandomUniform", "ru", NULL, "Y");
  otm_attr_ints(n, "shape", 2, (int64_t[]){40, 50});
  otm_attr_float(n, "low", low);
  otm_attr_float(n, "high", high);
  otm_attr_float(n, "seed", seed);
  otm_attr_int(n, "dtype", dtype);
  otm_output(m, "Y", dtype, 2, (int64_t[]){40, 50});
  return m;
}

static void test_random_uniform(void** state) {
  (void)state;
  OnyxValue* a = build_run(uniform_model(7.0f, -2.0f, 3.0f, ONYX_ELEM_FLOAT32), ONYX_ELEM_FLOAT32,
                           2, (int64_t[]){40, 50});
  OnyxValue* b = build_run(uniform_model(7.0f, -2.0f, 3.0f, ONYX_ELEM_FLOAT32), ONYX_ELEM_FLOAT32,
                           2, (int64_t[]){40, 50});
  OnyxValue* c = build_run(uniform_model(8.0f, -2.0f, 3.0f, ONYX_ELEM_FLOAT32), ONYX_ELEM_FLOAT32,
                           2, (int64_t[]){40, 50});
  const float* av = onyx_tensor_data(onyx_value_tensor(a));
  const float* cv = onyx_tensor_data(onyx_value_tensor(c));
  double sum = 0, lo = 1e9, hi = -1e9;
  size_t differ = 0;
  for (size_t i = 0; i < 2000; i++) {
    assert_true(av[i] >= -2.0f && av[i] < 3.0f);
    sum += av[i];
    lo = fmin(lo, av[i]);
    hi = fmax(hi, av[i]);
    differ += av[i] != cv[i];
  }
  /* Same seed: same values in a new session; another seed: other values. */
  assert_memory_equal(av, onyx_tensor_data(onyx_value_tensor(b)), 2000 * sizeof(float));
  assert_true(differ > 1900);
  /* Uniform on [-2, 3): mean 0.5 (sd of the mean ~0.032), spread close to the ends. */
  assert_true(fabs(sum / 2000 - 0.5) < 0.15);
  assert_true(lo < -1.9 && hi > 2.9);
  onyx_value_release(a);
  onyx_value_release(b);
  onyx_value_release(c);

  /* float16 with a range whose top rounds: never reaches `high`. */
  OnyxValue* h = build_run(uniform_model(1.0f, 1.0f, 1.0005f, ONYX_ELEM_FLOAT16), ONYX_ELEM_FLOAT16,
                           2, (int64_t[]){40, 50});
  const uint16_t* hv = onyx_tensor_data(onyx_value_tensor(h));
  for (size_t i = 0; i < 2000; i++)
    assert_int_equal(hv[i], 0x3C00); /* 1.0: the only half in [1, 1.0005) */
  onyx_value_release(h);
}

static void test_random_normal_like(void** state) {
  (void)state;
  OxTestModel* m = model(22);
  otm_initializer(m, "x", ONYX_ELEM_INT32, 2, (int64_t[]){100, 30}, NULL);
  OxTestNode* n = otm_node(m, "RandomNormalLike", "rnl", "x", "Y");
  otm_attr_float(n, "mean", 10.0f);
  otm_attr_float(n, "scale", 2.0f);
  otm_attr_int(n, "dtype", ONYX_ELEM_FLOAT64);
  otm_output(m, "Y", ONYX_ELEM_FLOAT64, 2, (int64_t[]){100, 30});
  OnyxValue* y = build_run(m, ONYX_ELEM_FLOAT64, 2, (int64_t[]){100, 30});
  const double* v = onyx_tensor_data(onyx_value_tensor(y));
  double sum = 0, sq = 0;
  for (size_t i = 0; i < 3000; i++) {
    sum += v[i];
    sq += v[i] * v[i];
  }
  const double mean = sum / 3000, sd = sqrt(sq / 3000 - mean * mean);
  assert_true(fabs(mean - 10.0) < 0.25); /* sd of the mean: 0.037 */
  assert_true(fabs(sd - 2.0) < 0.2);
  onyx_value_release(y);
}

/* Bernoulli with p in {0, 1} is deterministic; Multinomial never picks a
 * class of probability 0 (logit -inf). */
static void test_bernoulli_multinomial(void** state) {
  (void)state;
  OxTestModel* m = model(22);
  otm_initializer(m, "p", ONYX_ELEM_FLOAT32, 1, (int64_t[]){6}, (float[]){0, 1, 1, 0, 0, 1});
  otm_attr_int(otm_node(m, "Bernoulli", "bern", "p", "Y"), "dtype", ONYX_ELEM_BOOL);
  otm_output(m, "Y", ONYX_ELEM_BOOL, 1, (int64_t[]){6});
  OnyxValue* y = build_run(m, ONYX_ELEM_BOOL, 1, (int64_t[]){6});
  assert_bytes(y, (const uint8_t[]){0, 1, 1, 0, 0, 1}, 6);
  onyx_value_release(y);

  m = model(22);
  otm_initializer(m, "l", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3},
                  (float[]){0.0f, -INFINITY, 0.0f, -INFINITY, -INFINITY, 5.0f});
  OxTestNode* n = otm_node(m, "Multinomial", "multi", "l", "Y");
  otm_attr_int(n, "sample_size", 200);
  otm_attr_int(n, "dtype", ONYX_ELEM_INT64);
  otm_attr_float(n, "seed", 3.0f);
  otm_output(m, "Y", ONYX_ELEM_INT64, 2, (int64_t[]){2, 200});
  y = build_run(m, ONYX_ELEM_INT64, 2, (int64_t[]){2, 200});
  const int64_t* v = onyx_tensor_data(onyx_value_tensor(y));
  size_t zeros = 0;
  for (size_t i = 0; i < 200; i++) {
    assert_true(v[i] == 0 || v[i] == 2);
    zeros += v[i] == 0;
    assert_int_equal(v[200 + i], 2);
  }
  assert_true(zeros > 60 && zeros < 140); /* p = 1/2 each */
  onyx_value_release(y);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_quantize_round_half_even),
      cmocka_unit_test(test_quantize_default_uint8),
      cmocka_unit_test(test_quantize_per_axis_negative),
      cmocka_unit_test(test_quantize_blocked_ragged),
      cmocka_unit_test(test_int4_round_trip),
      cmocka_unit_test(test_float8_saturate),
      cmocka_unit_test(test_float8_e5m2_inf),
      cmocka_unit_test(test_dequantize_output_dtype),
      cmocka_unit_test(test_quantize_precision),
      cmocka_unit_test(test_dequantize_e8m0_scale),
      cmocka_unit_test(test_quantize_empty),
      cmocka_unit_test(test_quantize_bad_scale),
      cmocka_unit_test(test_matmul_integer_per_row),
      cmocka_unit_test(test_qlinear_matmul_per_column),
      cmocka_unit_test(test_conv_integer_groups),
      cmocka_unit_test(test_dft_numpy),
      cmocka_unit_test(test_dft_long_lengths),
      cmocka_unit_test(test_dft_plan_reuse),
      cmocka_unit_test(test_dft_bad_axis),
      cmocka_unit_test(test_stft_two_sided),
      cmocka_unit_test(test_hann_symmetric),
      cmocka_unit_test(test_random_uniform),
      cmocka_unit_test(test_random_normal_like),
      cmocka_unit_test(test_bernoulli_multinomial),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
