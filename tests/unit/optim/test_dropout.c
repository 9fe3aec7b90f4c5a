/* test_dropout.c — Dropout-12+ in training mode on the CPU provider,
 * through a session: output = x * mask * (1 / (1 - ratio)) exactly (each
 * element checked against that product computed here), the kept fraction
 * within five standard deviations of 1 - ratio on a large tensor, the same
 * masks for one seed with 1 and 4 threads and in two sessions, different
 * masks on the next run and without a seed, ratio 0 and training_mode
 * false as the identity, a ratio outside [0, 1) refused naming the node,
 * and DropoutGrad fed the mask giving dY * mask / (1 - ratio). */
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

#define F32 ONYX_ELEM_FLOAT32
#define F64 ONYX_ELEM_FLOAT64
#define N   200003

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

/* A session of Y, mask = Dropout(X, ratio, training_mode) (opset 13, node
 * "drop", seed attribute when seed >= 0), plus dX = DropoutGrad(dY, mask,
 * ratio) when with_grad. */
static OnyxSession* dropout_session(int elem, int64_t seed, int threads, bool with_grad) {
  OxTestModel* m = otm_new(13);
  const int64_t d[] = {N};
  otm_input(m, "X", elem, 1, d);
  otm_input(m, "ratio", F32, 0, NULL);
  otm_input(m, "training_mode", ONYX_ELEM_BOOL, 0, NULL);
  OxTestNode* node = otm_node(m, "Dropout", "drop", "X,ratio,training_mode", "Y,mask");
  if (seed >= 0) otm_attr_int(node, "seed", seed);
  otm_output(m, "Y", elem, 1, d);
  otm_output(m, "mask", ONYX_ELEM_BOOL, 1, d);
  if (with_grad) {
    otm_add_opset(m, "com.onyx.training", 1);
    otm_input(m, "dY", elem, 1, d);
    OxTestNode* g = otm_node(m, "DropoutGrad", "drop_grad", "dY,mask,ratio", "dX");
    otm_node_domain(g, "com.onyx.training");
    otm_output(m, "dX", elem, 1, d);
  }
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  if (threads > 0) ok(onyx_session_options_set_threads(o, threads));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  free(bytes);
  ok(st);
  return s;
}

static double xval(size_t i) {
  return sin((double)i * 0.37) * 3.0 + 0.25;
}

/* Runs once; got[0] = Y, got[1] = mask (got[2] = dX with grad). */
static OnyxStatus* dropout_run(OnyxSession* s, int elem, float ratio, bool training, bool with_grad,
                               OnyxValue** got) {
  const size_t es = elem == F32 ? 4 : 8;
  void* x = malloc(N * es);
  void* dy = malloc(N * es);
  for (size_t i = 0; i < N; i++) {
    if (elem == F32) {
      ((float*)x)[i] = (float)xval(i);
      ((float*)dy)[i] = (float)xval(i + 11);
    } else {
      ((double*)x)[i] = xval(i);
      ((double*)dy)[i] = xval(i + 11);
    }
  }
  const int64_t d[] = {N};
  const uint8_t tm = training;
  OnyxValue* in[4] = {0};
  ok(onyx_value_create_tensor((OnyxElemType)elem, d, 1, x, N * es, &in[0]));
  ok(onyx_value_create_tensor(F32, NULL, 0, &ratio, sizeof ratio, &in[1]));
  ok(onyx_value_create_tensor(ONYX_ELEM_BOOL, NULL, 0, &tm, 1, &in[2]));
  ok(onyx_value_create_tensor((OnyxElemType)elem, d, 1, dy, N * es, &in[3]));
  free(x);
  free(dy);
  const char* names[] = {"X", "ratio", "training_mode", "dY"};
  const char* outs[] = {"Y", "mask", "dX"};
  OnyxStatus* st = onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, with_grad ? 4 : 3,
                                    outs, with_grad ? 3 : 2, got);
  onyx_values_release(in, 4);
  return st;
}

static const uint8_t* mask_of(const OnyxValue* v) {
  return onyx_tensor_data(onyx_value_tensor(v));
}

/* Y (and dX) against x * mask * scale computed here, and the kept
 * fraction. */
static void check_values(int elem, float ratio, OnyxValue** got, bool with_grad) {
  const uint8_t* mk = mask_of(got[1]);
  const void* y = onyx_tensor_data(onyx_value_tensor(got[0]));
  const void* dx = with_grad ? onyx_tensor_data(onyx_value_tensor(got[2])) : NULL;
  const double scale = 1.0 / (1.0 - (double)ratio);
  size_t kept = 0;
  for (size_t i = 0; i < N; i++) {
    assert_true(mk[i] <= 1);
    kept += mk[i];
    if (elem == F32) {
      const float want = mk[i] ? (float)xval(i) * (float)scale : 0.0f;
      if (((const float*)y)[i] != want)
        fail_msg("Y[%zu] = %.9g, want %.9g", i, ((const float*)y)[i], want);
      if (dx) {
        const float wd = mk[i] ? (float)xval(i + 11) * (float)scale : 0.0f;
        if (((const float*)dx)[i] != wd)
          fail_msg("dX[%zu] = %.9g, want %.9g", i, ((const float*)dx)[i], wd);
      }
    } else {
      const double want = mk[i] ? xval(i) * scale : 0.0;
      if (((const double*)y)[i] != want)
        fail_msg("Y[%zu] = %.17g, want %.17g", i, ((const double*)y)[i], want);
    }
  }
  const double p = 1.0 - (double)ratio, frac = (double)kept / N;
  const double sigma = sqrt(p * (1 - p) / N);
  if (fabs(frac - p) > 5 * sigma)
    fail_msg("kept fraction %.5f, want %.5f +- %.5f", frac, p, 5 * sigma);
}

static void test_training_values(void** unused) {
  const float ratios[] = {0.1f, 0.3f, 0.5f, 0.9f};
  for (size_t r = 0; r < 4; r++) {
    OnyxSession* s = dropout_session(F32, 7, 0, true);
    OnyxValue* got[3] = {0};
    ok(dropout_run(s, F32, ratios[r], true, true, got));
    check_values(F32, ratios[r], got, true);
    onyx_values_release(got, 3);
    onyx_session_release(s);
  }
  OnyxSession* s = dropout_session(F64, 3, 0, false);
  OnyxValue* got[2] = {0};
  ok(dropout_run(s, F64, 0.25f, true, false, got));
  check_values(F64, 0.25f, got, false);
  onyx_values_release(got, 2);
  onyx_session_release(s);
}

/* The mask of the first (and, when twice, second) run of a fresh session. */
static uint8_t* first_mask(int64_t seed, int threads, bool twice) {
  OnyxSession* s = dropout_session(F32, seed, threads, false);
  OnyxValue* got[2] = {0};
  ok(dropout_run(s, F32, 0.5f, true, false, got));
  if (twice) {
    onyx_values_release(got, 2);
    ok(dropout_run(s, F32, 0.5f, true, false, got));
  }
  uint8_t* m = malloc(N);
  memcpy(m, mask_of(got[1]), N);
  onyx_values_release(got, 2);
  onyx_session_release(s);
  return m;
}

static void test_determinism(void** unused) {
  uint8_t* a = first_mask(1234, 1, false);
  uint8_t* b = first_mask(1234, 4, false);
  assert_memory_equal(a, b, N); /* one seed: one mask, whatever the thread count */
  uint8_t* c = first_mask(1234, 4, true);
  assert_memory_not_equal(a, c, N); /* the next run draws a new mask */
  uint8_t* d = first_mask(1234, 1, true);
  assert_memory_equal(c, d, N); /* ... the same in every session */
  uint8_t* e = first_mask(99, 1, false);
  assert_memory_not_equal(a, e, N); /* another seed */
  uint8_t* f = first_mask(-1, 1, false);
  uint8_t* g = first_mask(-1, 1, false);
  assert_memory_not_equal(f, g, N); /* no seed: a key per session */
  free(a);
  free(b);
  free(c);
  free(d);
  free(e);
  free(f);
  free(g);
}

/* ratio 0 in training and training_mode false: Y = X, mask all true. */
static void test_identity(void** unused) {
  const struct {
    float ratio;
    bool training;
  } cases[] = {{0.0f, true}, {0.5f, false}};
  for (size_t k = 0; k < 2; k++) {
    OnyxSession* s = dropout_session(F32, 5, 0, false);
    OnyxValue* got[2] = {0};
    ok(dropout_run(s, F32, cases[k].ratio, cases[k].training, false, got));
    const float* y = onyx_tensor_data(onyx_value_tensor(got[0]));
    const uint8_t* m = mask_of(got[1]);
    for (size_t i = 0; i < N; i++) {
      assert_true(y[i] == (float)xval(i));
      assert_int_equal(m[i], 1);
    }
    onyx_values_release(got, 2);
    onyx_session_release(s);
  }
}

static void test_bad_ratio(void** unused) {
  const float bad[] = {1.0f, -0.25f, 1.5f};
  for (size_t k = 0; k < 3; k++) {
    OnyxSession* s = dropout_session(F32, 5, 0, false);
    OnyxValue* got[2] = {0};
    OnyxStatus* st = dropout_run(s, F32, bad[k], true, false, got);
    assert_non_null(st);
    const char* msg = onyx_status_message(st);
    if (!strstr(msg, "drop") || !strstr(msg, "ratio"))
      fail_msg("error '%s' should name node 'drop' and its ratio", msg);
    onyx_status_release(st);
    onyx_session_release(s);
  }
}

/* float16 and bfloat16 with ratio 0.5: the factor is 2, so a kept normal
 * value's bits are x's with the exponent field one higher (exact), and a
 * dropped one is +0. */
static void test_half_types(void** unused) {
  const int types[] = {ONYX_ELEM_FLOAT16, ONYX_ELEM_BFLOAT16};
  for (size_t k = 0; k < 2; k++) {
    const bool f16 = types[k] == ONYX_ELEM_FLOAT16;
    const uint16_t exp_one = f16 ? 1u << 10 : 1u << 7;
    OnyxSession* s = dropout_session(types[k], 11, 0, false);
    uint16_t* x = malloc(N * sizeof *x);
    for (size_t i = 0; i < N; i++) {
      /* sign, an exponent in the middle of the range, any mantissa */
      const uint16_t mant = (uint16_t)(i * 7919u) & (uint16_t)(exp_one - 1);
      const uint16_t e = (uint16_t)(f16 ? 10 + i % 8 : 120 + i % 8);
      x[i] = (uint16_t)((i & 1 ? 0x8000u : 0) | (uint16_t)(e * exp_one) | mant);
    }
    const int64_t d[] = {N};
    const float ratio = 0.5f;
    const uint8_t tm = 1;
    OnyxValue* in[3] = {0};
    ok(onyx_value_create_tensor((OnyxElemType)types[k], d, 1, x, N * sizeof *x, &in[0]));
    ok(onyx_value_create_tensor(F32, NULL, 0, &ratio, sizeof ratio, &in[1]));
    ok(onyx_value_create_tensor(ONYX_ELEM_BOOL, NULL, 0, &tm, 1, &in[2]));
    const char* names[] = {"X", "ratio", "training_mode"};
    const char* outs[] = {"Y", "mask"};
    OnyxValue* got[2] = {0};
    ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, 3, outs, 2, got));
    const uint16_t* y = onyx_tensor_data(onyx_value_tensor(got[0]));
    const uint8_t* mk = mask_of(got[1]);
    size_t kept = 0;
    for (size_t i = 0; i < N; i++) {
      kept += mk[i];
      const uint16_t want = mk[i] ? (uint16_t)(x[i] + exp_one) : 0;
      if (y[i] != want) fail_msg("type %d: Y[%zu] = 0x%04x, want 0x%04x", types[k], i, y[i], want);
    }
    const double sigma = sqrt(0.25 / N);
    if (fabs((double)kept / N - 0.5) > 5 * sigma) fail_msg("kept fraction %.5f", (double)kept / N);
    onyx_values_release(got, 2);
    onyx_values_release(in, 3);
    free(x);
    onyx_session_release(s);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_training_values), cmocka_unit_test(test_determinism),
      cmocka_unit_test(test_identity),        cmocka_unit_test(test_bad_ratio),
      cmocka_unit_test(test_half_types),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
