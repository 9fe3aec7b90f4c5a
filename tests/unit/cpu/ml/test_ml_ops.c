/* test_ml_ops.c — the ai.onnx.ml linear, SVM and preprocessing kernels of
 * the CPU provider, through a session, one node per model. Expected values
 * are worked out by hand in the comments, or computed here in plain C from
 * the definitions (dot products, exp, the logistic); the pairwise coupling
 * of SVM probabilities is checked against the exact minimizer of its
 * quadratic form, solved here as a linear system. */
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

#define ML "ai.onnx.ml"

static void expect_floats(const OnyxValue* v, const float* want, size_t n, const int64_t* dims,
                          size_t rank, float tol) {
  const OnyxTensor* t = onyx_value_tensor(v);
  assert_non_null(t);
  assert_int_equal(onyx_tensor_elem_type(t), ONYX_ELEM_FLOAT32);
  assert_int_equal(onyx_tensor_rank(t), rank);
  assert_memory_equal(onyx_tensor_dims(t), dims, rank * sizeof *dims);
  assert_int_equal(onyx_tensor_elem_count(t), n);
  const float* got = onyx_tensor_data(t);
  for (size_t i = 0; i < n; i++)
    if (!(fabsf(got[i] - want[i]) <= tol + tol * fabsf(want[i])))
      fail_msg("element %zu: got %.9g, want %.9g", i, got[i], want[i]);
}

static void expect_ints(const OnyxValue* v, const int64_t* want, size_t n) {
  const OnyxTensor* t = onyx_value_tensor(v);
  assert_non_null(t);
  assert_int_equal(onyx_tensor_elem_type(t), ONYX_ELEM_INT64);
  assert_int_equal(onyx_tensor_elem_count(t), n);
  const int64_t* got = onyx_tensor_data(t);
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i])
      fail_msg("element %zu: got %lld, want %lld", i, (long long)got[i], (long long)want[i]);
}

static void expect_strings(const OnyxValue* v, const char* const* want, size_t n) {
  const OnyxTensor* t = onyx_value_tensor(v);
  assert_non_null(t);
  assert_int_equal(onyx_tensor_elem_type(t), ONYX_ELEM_STRING);
  assert_int_equal(onyx_tensor_elem_count(t), n);
  const char* const* got = onyx_tensor_data(t);
  for (size_t i = 0; i < n; i++)
    assert_string_equal(got[i], want[i]);
}

/* The status is an error whose message holds every one of the words. */
static void expect_error(OnyxStatus* st, const char* w1, const char* w2) {
  assert_non_null(st);
  const char* msg = onyx_status_message(st);
  if (!strstr(msg, w1) || (w2 && !strstr(msg, w2)))
    fail_msg("message '%s' lacks '%s' / '%s'", msg, w1, w2 ? w2 : "");
  onyx_status_release(st);
}

/* A model with one ai.onnx.ml node "n" reading x (elem, rank 2 [r, c]). */
static OxTestModel* ml_model(OxTestNode** node, const char* op, int elem, int64_t r, int64_t c,
                             const char* outputs) {
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, ML, 4);
  otm_input(m, "x", elem, 2, (int64_t[]){r, c});
  *node = otm_node(m, op, "n", "x", outputs);
  otm_node_domain(*node, ML);
  return m;
}

static double sigmoid(double x) {
  return 1.0 / (1.0 + exp(-x));
}

/* --- LinearClassifier ------------------------------------------------------------------------ */

/* Three classes, SOFTMAX: scores = X W^T + b. Row 0: [1, 2.5, 2] (label
 * 20); row 1: [0, -0.5, -2] (label 10). */
static void test_linear_classifier_softmax(void** state) {
  (void)state;
  OxTestNode* n;
  OxTestModel* m = ml_model(&n, "LinearClassifier", ONYX_ELEM_FLOAT32, 2, 2, "y,z");
  otm_output(m, "y", ONYX_ELEM_INT64, 1, (int64_t[]){2});
  otm_output(m, "z", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_attr_floats(n, "coefficients", 6, (const float[]){1, 0, 0, 1, 1, 1});
  otm_attr_floats(n, "intercepts", 3, (const float[]){0, 0.5f, -1});
  otm_attr_ints(n, "classlabels_ints", 3, (const int64_t[]){10, 20, 30});
  otm_attr_string(n, "post_transform", "SOFTMAX");
  static const float x[4] = {1, 2, 0, -1};
  OtsFeed f[] = {{"x", ONYX_ELEM_FLOAT32, 2, {2, 2}, x}};
  OnyxValue* got[2] = {0};
  assert_null(ots_run(m, f, 1, (const char*[]){"y", "z"}, 2, got));
  expect_ints(got[0], (const int64_t[]){20, 10}, 2);
  double s[2][3] = {{1, 2.5, 2}, {0, -0.5, -2}};
  float want[6];
  for (int r = 0; r < 2; r++) {
    double sum = exp(s[r][0]) + exp(s[r][1]) + exp(s[r][2]);
    for (int j = 0; j < 3; j++)
      want[r * 3 + j] = (float)(exp(s[r][j]) / sum);
  }
  expect_floats(got[1], want, 6, (int64_t[]){2, 3}, 2, 1e-6f);
  onyx_values_release(got, 2);
  otm_free(m);
}

/* One coefficient row, two string labels: "yes" where s > 0; Z = [1 - s, s]
 * of the raw score under NONE and LOGISTIC alike (ONNX Runtime's binary
 * rule). s = x0 - x1 + 0.5: 0.5 and -1.5. */
static void test_linear_classifier_binary(void** state) {
  (void)state;
  const char* posts[2] = {"NONE", "LOGISTIC"};
  for (int p = 0; p < 2; p++) {
    OxTestNode* n;
    OxTestModel* m = ml_model(&n, "LinearClassifier", ONYX_ELEM_FLOAT32, 2, 2, "y,z");
    otm_output(m, "y", ONYX_ELEM_STRING, 1, (int64_t[]){2});
    otm_output(m, "z", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2});
    otm_attr_floats(n, "coefficients", 2, (const float[]){1, -1});
    otm_attr_floats(n, "intercepts", 1, (const float[]){0.5f});
    otm_attr_strings(n, "classlabels_strings", 2, (const char*[]){"no", "yes"});
    otm_attr_string(n, "post_transform", posts[p]);
    static const float x[4] = {1, 1, 0, 2};
    OtsFeed f[] = {{"x", ONYX_ELEM_FLOAT32, 2, {2, 2}, x}};
    OnyxValue* got[2] = {0};
    assert_null(ots_run(m, f, 1, (const char*[]){"y", "z"}, 2, got));
    expect_strings(got[0], (const char*[]){"yes", "no"}, 2);
    expect_floats(got[1], (const float[]){0.5f, 0.5f, 2.5f, -1.5f}, 4, (int64_t[]){2, 2}, 2, 0);
    onyx_values_release(got, 2);
    otm_free(m);
  }
}

/* One row, no labels: 1 / 0 by the sign, Z [N, 1]; PROBIT maps 0.5 to 0 and
 * Phi(1) = 0.8413447 to about 1 (the erfinv approximation is good to ~2e-3). */
static void test_linear_classifier_single_probit(void** state) {
  (void)state;
  OxTestNode* n;
  OxTestModel* m = ml_model(&n, "LinearClassifier", ONYX_ELEM_FLOAT32, 2, 1, "y,z");
  otm_output(m, "y", ONYX_ELEM_INT64, 1, (int64_t[]){2});
  otm_output(m, "z", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 1});
  otm_attr_floats(n, "coefficients", 1, (const float[]){1});
  otm_attr_floats(n, "intercepts", 1, (const float[]){0});
  otm_attr_string(n, "post_transform", "PROBIT");
  static const float x[2] = {0.5f, 0.8413447f};
  OtsFeed f[] = {{"x", ONYX_ELEM_FLOAT32, 2, {2, 1}, x}};
  OnyxValue* got[2] = {0};
  assert_null(ots_run(m, f, 1, (const char*[]){"y", "z"}, 2, got));
  expect_ints(got[0], (const int64_t[]){1, 1}, 2);
  expect_floats(got[1], (const float[]){0.0f, 1.0f}, 2, (int64_t[]){2, 1}, 2, 3e-3f);
  onyx_values_release(got, 2);
  otm_free(m);
}

/* SOFTMAX_ZERO leaves a zero score out: scores [0, ln 2, ln 3] (one row,
 * input int64) give [~0, 2/5, 3/5]; LOGISTIC gives the sigmoids. */
static void test_linear_classifier_softmax_zero_logistic(void** state) {
  (void)state;
  const char* posts[2] = {"SOFTMAX_ZERO", "LOGISTIC"};
  double s[3] = {0, log(2.0), log(3.0)};
  for (int p = 0; p < 2; p++) {
    OxTestNode* n;
    OxTestModel* m = ml_model(&n, "LinearClassifier", ONYX_ELEM_INT64, 1, 1, "y,z");
    otm_output(m, "y", ONYX_ELEM_INT64, 1, (int64_t[]){1});
    otm_output(m, "z", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 3});
    otm_attr_floats(n, "coefficients", 3, (const float[]){0, (float)s[1], (float)s[2]});
    otm_attr_ints(n, "classlabels_ints", 3, (const int64_t[]){0, 1, 2});
    otm_attr_string(n, "post_transform", posts[p]);
    static const int64_t x[1] = {1};
    OtsFeed f[] = {{"x", ONYX_ELEM_INT64, 2, {1, 1}, x}};
    OnyxValue* got[2] = {0};
    assert_null(ots_run(m, f, 1, (const char*[]){"y", "z"}, 2, got));
    expect_ints(got[0], (const int64_t[]){2}, 1);
    float want[3];
    for (int j = 0; j < 3; j++)
      want[j] = p == 0 ? (j == 0 ? 0.0f : (float)(exp(s[j]) / 5.0)) : (float)sigmoid(s[j]);
    expect_floats(got[1], want, 3, (int64_t[]){1, 3}, 2, 1e-6f);
    onyx_values_release(got, 2);
    otm_free(m);
  }
}

/* Hostile attributes are refused when the session is made, naming the node
 * and the attribute. */
static void test_linear_classifier_errors(void** state) {
  (void)state;
  for (int c = 0; c < 3; c++) {
    OxTestNode* n;
    OxTestModel* m = ml_model(&n, "LinearClassifier", ONYX_ELEM_FLOAT32, 1, 2, "y,z");
    otm_output(m, "y", ONYX_ELEM_INT64, 1, (int64_t[]){1});
    otm_output(m, "z", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 2});
    otm_attr_floats(n, "coefficients", c == 0 ? 5 : 4, (const float[]){1, 2, 3, 4, 5});
    otm_attr_floats(n, "intercepts", 2, (const float[]){0, 0});
    otm_attr_ints(n, "classlabels_ints", c == 1 ? 3 : 2, (const int64_t[]){0, 1, 2});
    if (c == 2) otm_attr_string(n, "post_transform", "SQUASH");
    static const float x[2] = {1, 2};
    OtsFeed f[] = {{"x", ONYX_ELEM_FLOAT32, 2, {1, 2}, x}};
    OnyxValue* got[2] = {0};
    OnyxStatus* st = ots_run(m, f, 1, (const char*[]){"y", "z"}, 2, got);
    expect_error(st, "'n'", c == 0 ? "coefficients" : c == 1 ? "class labels" : "post_transform");
    otm_free(m);
  }
}

/* --- LinearRegressor ------------------------------------------------------------------------- */

/* Two targets: y = X W^T + b with W = [[1, 2], [-1, 0]], b = [0.5, 1]:
 * x = [3, 1] -> [5.5, -2]; with SOFTMAX the row's softmax. One target with
 * LOGISTIC stays raw (ONNX Runtime transforms one target under PROBIT only). */
static void test_linear_regressor(void** state) {
  (void)state;
  for (int p = 0; p < 3; p++) {
    OxTestNode* n;
    int64_t t = p == 2 ? 1 : 2;
    OxTestModel* m = ml_model(&n, "LinearRegressor", ONYX_ELEM_FLOAT64, 1, 2, "y");
    otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, t});
    otm_attr_floats(n, "coefficients", (size_t)(2 * t), (const float[]){1, 2, -1, 0});
    otm_attr_floats(n, "intercepts", (size_t)t, (const float[]){0.5f, 1});
    otm_attr_int(n, "targets", t);
    otm_attr_string(n, "post_transform", p == 1 ? "SOFTMAX" : p == 2 ? "LOGISTIC" : "NONE");
    static const double x[2] = {3, 1};
    OtsFeed f[] = {{"x", ONYX_ELEM_FLOAT64, 2, {1, 2}, x}};
    OnyxValue* got = NULL;
    assert_null(ots_run(m, f, 1, (const char*[]){"y"}, 1, &got));
    double e = exp(5.5) + exp(-2.0);
    float want[2] = {5.5f, -2.0f};
    if (p == 1) {
      want[0] = (float)(exp(5.5) / e);
      want[1] = (float)(exp(-2.0) / e);
    }
    expect_floats(got, want, (size_t)t, (int64_t[]){1, t}, 2, 1e-6f);
    onyx_value_release(got);
    otm_free(m);
  }
}

static void test_linear_regressor_errors(void** state) {
  (void)state;
  for (int c = 0; c < 2; c++) {
    OxTestNode* n;
    OxTestModel* m = ml_model(&n, "LinearRegressor", ONYX_ELEM_FLOAT32, 1, 2, "y");
    otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 2});
    otm_attr_floats(n, "coefficients", c == 0 ? 3 : 4, (const float[]){1, 2, 3, 4});
    otm_attr_floats(n, "intercepts", c == 1 ? 3 : 2, (const float[]){0, 0, 0});
    otm_attr_int(n, "targets", 2);
    static const float x[2] = {1, 2};
    OtsFeed f[] = {{"x", ONYX_ELEM_FLOAT32, 2, {1, 2}, x}};
    OnyxValue* got = NULL;
    expect_error(ots_run(m, f, 1, (const char*[]){"y"}, 1, &got), "'n'",
                 c == 0 ? "coefficients" : "intercepts");
    otm_free(m);
  }
  /* X's feature count against the model's. */
  OxTestNode* n;
  OxTestModel* m = ml_model(&n, "LinearRegressor", ONYX_ELEM_FLOAT32, 1, 3, "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 1});
  otm_attr_floats(n, "coefficients", 2, (const float[]){1, 2});
  static const float x[3] = {1, 2, 3};
  OtsFeed f[] = {{"x", ONYX_ELEM_FLOAT32, 2, {1, 3}, x}};
  OnyxValue* got = NULL;
  expect_error(ots_run(m, f, 1, (const char*[]){"y"}, 1, &got), "3 features", NULL);
  otm_free(m);
}

/* --- SVMRegressor ---------------------------------------------------------------------------- */

/* Support vectors s0 = [0, 0], s1 = [1, 1], coefficients [1, -2], rho 0.5,
 * kernel_params [gamma 0.5, coef0 1, degree 2]; x = [1, 0], x.s0 = 0,
 * x.s1 = 1, |x - s0|^2 = |x - s1|^2 = 1. */
static void test_svm_regressor_kernels(void** state) {
  (void)state;
  const char* kernels[4] = {"LINEAR", "POLY", "RBF", "SIGMOID"};
  double k0[4] = {0, pow(0.5 * 0 + 1, 2), exp(-0.5), tanh(0.5 * 0 + 1)};
  double k1[4] = {1, pow(0.5 * 1 + 1, 2), exp(-0.5), tanh(0.5 * 1 + 1)};
  for (int k = 0; k < 4; k++) {
    for (int one_class = 0; one_class < 2; one_class++) {
      OxTestNode* n;
      OxTestModel* m = ml_model(&n, "SVMRegressor", ONYX_ELEM_FLOAT32, 1, 2, "y");
      otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 1});
      otm_attr_floats(n, "support_vectors", 4, (const float[]){0, 0, 1, 1});
      otm_attr_floats(n, "coefficients", 2, (const float[]){1, -2});
      otm_attr_floats(n, "rho", 1, (const float[]){0.5f});
      otm_attr_floats(n, "kernel_params", 3, (const float[]){0.5f, 1, 2});
      otm_attr_int(n, "n_supports", 2);
      otm_attr_int(n, "one_class", one_class);
      otm_attr_string(n, "kernel_type", kernels[k]);
      static const float x[2] = {1, 0};
      OtsFeed f[] = {{"x", ONYX_ELEM_FLOAT32, 2, {1, 2}, x}};
      OnyxValue* got = NULL;
      assert_null(ots_run(m, f, 1, (const char*[]){"y"}, 1, &got));
      double y = k0[k] - 2 * k1[k] + 0.5;
      float want = one_class ? (y > 0 ? 1.0f : -1.0f) : (float)y;
      expect_floats(got, &want, 1, (int64_t[]){1, 1}, 2, 1e-6f);
      onyx_value_release(got);
      otm_free(m);
    }
  }
}

/* Linear mode (no n_supports): y = x.coef + rho = 2*1 + 3*(-1) + 0.25. */
static void test_svm_regressor_linear_mode(void** state) {
  (void)state;
  OxTestNode* n;
  OxTestModel* m = ml_model(&n, "SVMRegressor", ONYX_ELEM_INT32, 1, 2, "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 1});
  otm_attr_floats(n, "coefficients", 2, (const float[]){2, 3});
  otm_attr_floats(n, "rho", 1, (const float[]){0.25f});
  static const int32_t x[2] = {1, -1};
  OtsFeed f[] = {{"x", ONYX_ELEM_INT32, 2, {1, 2}, x}};
  OnyxValue* got = NULL;
  assert_null(ots_run(m, f, 1, (const char*[]){"y"}, 1, &got));
  expect_floats(got, (const float[]){-0.75f}, 1, (int64_t[]){1, 1}, 2, 0);
  onyx_value_release(got);
  otm_free(m);
}

static void test_svm_regressor_errors(void** state) {
  (void)state;
  for (int c = 0; c < 3; c++) {
    OxTestNode* n;
    OxTestModel* m = ml_model(&n, "SVMRegressor", ONYX_ELEM_FLOAT32, 1, 2, "y");
    otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 1});
    otm_attr_floats(n, "support_vectors", c == 0 ? 3 : 4, (const float[]){0, 0, 1, 1});
    otm_attr_floats(n, "coefficients", 2, (const float[]){1, -2});
    otm_attr_floats(n, "rho", 1, (const float[]){0.5f});
    otm_attr_int(n, "n_supports", 2);
    if (c == 1) otm_attr_string(n, "kernel_type", "CUBIC");
    if (c == 2) otm_attr_floats(n, "kernel_params", 2, (const float[]){1, 2});
    static const float x[2] = {1, 0};
    OtsFeed f[] = {{"x", ONYX_ELEM_FLOAT32, 2, {1, 2}, x}};
    OnyxValue* got = NULL;
    expect_error(ots_run(m, f, 1, (const char*[]){"y"}, 1, &got), "'n'",
                 c == 0   ? "support_vectors"
                 : c == 1 ? "kernel_type"
                          : "kernel_params");
    otm_free(m);
  }
}

/* --- SVMClassifier --------------------------------------------------------------------------- */

/* Three classes, one support vector each (s0 = [1, 0], s1 = [0, 1],
 * s2 = [-1, -1]), LINEAR kernel, coefficients [[1, -1, -1], [1, 1, -1]],
 * rho 0. Pair scores: (0,1) = c[0][0] K0 + c[0][1] K1, (0,2) = c[1][0] K0 +
 * c[0][2] K2, (1,2) = c[1][1] K1 + c[1][2] K2.
 * x = [2, 0]: K = [2, 0, -2]: scores [2, 4, 2], votes 0, 0, 1 -> class 0.
 * x = [0, 3]: K = [0, 3, -3]: scores [-3, 3, 6], votes 1, 0, 1 -> class 1. */
static OxTestModel* svc3_model(bool proba) {
  OxTestNode* n;
  OxTestModel* m = ml_model(&n, "SVMClassifier", ONYX_ELEM_FLOAT32, 2, 2, "y,z");
  otm_output(m, "y", ONYX_ELEM_INT64, 1, (int64_t[]){2});
  otm_output(m, "z", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_attr_floats(n, "support_vectors", 6, (const float[]){1, 0, 0, 1, -1, -1});
  otm_attr_ints(n, "vectors_per_class", 3, (const int64_t[]){1, 1, 1});
  otm_attr_floats(n, "coefficients", 6, (const float[]){1, -1, -1, 1, 1, -1});
  otm_attr_floats(n, "rho", 3, (const float[]){0, 0, 0});
  otm_attr_ints(n, "classlabels_ints", 3, (const int64_t[]){0, 1, 2});
  otm_attr_string(n, "kernel_type", "LINEAR");
  if (proba) {
    otm_attr_floats(n, "prob_a", 3, (const float[]){-0.5f, -0.25f, -1});
    otm_attr_floats(n, "prob_b", 3, (const float[]){0.1f, 0, -0.2f});
  }
  return m;
}

static void test_svm_classifier_votes(void** state) {
  (void)state;
  OxTestModel* m = svc3_model(false);
  static const float x[4] = {2, 0, 0, 3};
  OtsFeed f[] = {{"x", ONYX_ELEM_FLOAT32, 2, {2, 2}, x}};
  OnyxValue* got[2] = {0};
  assert_null(ots_run(m, f, 1, (const char*[]){"y", "z"}, 2, got));
  expect_ints(got[0], (const int64_t[]){0, 1}, 2);
  expect_floats(got[1], (const float[]){2, 4, 2, -3, 3, 6}, 6, (int64_t[]){2, 3}, 2, 1e-6f);
  onyx_values_release(got, 2);
  otm_free(m);
}

/* Solves the 4 x 4 system [Q e; e' 0] [p; b] = [0; 1] by Gaussian
 * elimination: the p minimizing p'Qp with sum p = 1, Q_ii = sum_{j != i}
 * r_ji^2, Q_ij = -r_ji r_ij (Wu, Lin and Weng 2004, method 2). */
static void couple_exact(const double r[3][3], double p[3]) {
  double a[4][5] = {{0}};
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 3; j++)
      if (j != i) {
        a[i][i] += r[j][i] * r[j][i];
        a[i][j] = -r[j][i] * r[i][j];
      }
    a[i][3] = 1;
    a[3][i] = 1;
  }
  a[3][4] = 1;
  for (int c = 0; c < 4; c++) {
    int piv = c;
    for (int k = c + 1; k < 4; k++)
      if (fabs(a[k][c]) > fabs(a[piv][c])) piv = k;
    for (int j = 0; j < 5; j++) {
      double t = a[c][j];
      a[c][j] = a[piv][j];
      a[piv][j] = t;
    }
    for (int k = 0; k < 4; k++)
      if (k != c) {
        double f = a[k][c] / a[c][c];
        for (int j = c; j < 5; j++)
          a[k][j] -= f * a[c][j];
      }
  }
  for (int i = 0; i < 3; i++)
    p[i] = a[i][4] / a[i][i];
}

/* With prob_a / prob_b: r_ij = 1 / (1 + exp(A s + B)) per pair, coupled.
 * libsvm's iteration stops within 0.005 / k of the optimum's condition, so
 * the probabilities agree with the exact minimizer to a few 1e-3. The label
 * is still the vote's. */
static void test_svm_classifier_probabilities(void** state) {
  (void)state;
  OxTestModel* m = svc3_model(true);
  static const float x[4] = {2, 0, 0, 3};
  OtsFeed f[] = {{"x", ONYX_ELEM_FLOAT32, 2, {2, 2}, x}};
  OnyxValue* got[2] = {0};
  assert_null(ots_run(m, f, 1, (const char*[]){"y", "z"}, 2, got));
  expect_ints(got[0], (const int64_t[]){0, 1}, 2);
  const double s[2][3] = {{2, 4, 2}, {-3, 3, 6}};
  const double A[3] = {-0.5, -0.25, -1}, B[3] = {0.1, 0, -0.2};
  float want[6];
  for (int row = 0; row < 2; row++) {
    double r[3][3] = {{0}}, p[3];
    int k = 0;
    for (int i = 0; i < 3; i++)
      for (int j = i + 1; j < 3; j++, k++) {
        r[i][j] = 1.0 / (1.0 + exp(A[k] * s[row][k] + B[k]));
        r[j][i] = 1.0 - r[i][j];
      }
    couple_exact(r, p);
    for (int i = 0; i < 3; i++)
      want[row * 3 + i] = (float)p[i];
  }
  expect_floats(got[1], want, 6, (int64_t[]){2, 3}, 2, 5e-3f);
  const float* z = onyx_tensor_data(onyx_value_tensor(got[1]));
  for (int row = 0; row < 2; row++)
    assert_true(fabsf(z[row * 3] + z[row * 3 + 1] + z[row * 3 + 2] - 1.0f) < 1e-5f);
  onyx_values_release(got, 2);
  otm_free(m);
}

/* Two classes, RBF (gamma 1), support vectors s0 = [0] (class 0) and
 * s1 = [2] (class 1), coefficients [1, -1], rho 0: s = K(x, s0) - K(x, s1).
 * x = 0: s = 1 - e^-4 > 0 -> class 0 ("a"); x = 2: s < 0 -> "b". Z under
 * NONE is [-s, s]. */
static void test_svm_classifier_binary(void** state) {
  (void)state;
  OxTestNode* n;
  OxTestModel* m = ml_model(&n, "SVMClassifier", ONYX_ELEM_FLOAT32, 2, 1, "y,z");
  otm_output(m, "y", ONYX_ELEM_STRING, 1, (int64_t[]){2});
  otm_output(m, "z", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2});
  otm_attr_floats(n, "support_vectors", 2, (const float[]){0, 2});
  otm_attr_ints(n, "vectors_per_class", 2, (const int64_t[]){1, 1});
  otm_attr_floats(n, "coefficients", 2, (const float[]){1, -1});
  otm_attr_floats(n, "rho", 1, (const float[]){0});
  otm_attr_floats(n, "kernel_params", 3, (const float[]){1, 0, 0});
  otm_attr_strings(n, "classlabels_strings", 2, (const char*[]){"a", "b"});
  otm_attr_string(n, "kernel_type", "RBF");
  static const float x[2] = {0, 2};
  OtsFeed f[] = {{"x", ONYX_ELEM_FLOAT32, 2, {2, 1}, x}};
  OnyxValue* got[2] = {0};
  assert_null(ots_run(m, f, 1, (const char*[]){"y", "z"}, 2, got));
  expect_strings(got[0], (const char*[]){"a", "b"}, 2);
  float s0 = (float)(1 - exp(-4.0)), s1 = (float)(exp(-4.0) - 1);
  expect_floats(got[1], (const float[]){-s0, s0, -s1, s1}, 4, (int64_t[]){2, 2}, 2, 1e-6f);
  onyx_values_release(got, 2);
  otm_free(m);
}

/* Linear mode, two classes: scores x.w_c + rho; some weights negative, so
 * the second label wins where the higher score is > 0. w0 = [1, 0],
 * w1 = [-1, 1], rho -0.5: x = [1, 0] -> [0.5, -1.5]: max 0.5 > 0 -> label 1;
 * x = [0, 0] -> [-0.5, -0.5]: max -0.5 -> the first max, label 0. */
static void test_svm_classifier_linear_mode(void** state) {
  (void)state;
  OxTestNode* n;
  OxTestModel* m = ml_model(&n, "SVMClassifier", ONYX_ELEM_FLOAT32, 2, 2, "y,z");
  otm_output(m, "y", ONYX_ELEM_INT64, 1, (int64_t[]){2});
  otm_output(m, "z", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2});
  otm_attr_floats(n, "coefficients", 4, (const float[]){1, 0, -1, 1});
  otm_attr_floats(n, "rho", 1, (const float[]){-0.5f});
  otm_attr_ints(n, "classlabels_ints", 2, (const int64_t[]){5, 6});
  static const float x[4] = {1, 0, 0, 0};
  OtsFeed f[] = {{"x", ONYX_ELEM_FLOAT32, 2, {2, 2}, x}};
  OnyxValue* got[2] = {0};
  assert_null(ots_run(m, f, 1, (const char*[]){"y", "z"}, 2, got));
  expect_ints(got[0], (const int64_t[]){6, 5}, 2);
  expect_floats(got[1], (const float[]){0.5f, -1.5f, -0.5f, -0.5f}, 4, (int64_t[]){2, 2}, 2, 0);
  onyx_values_release(got, 2);
  otm_free(m);
}

static void test_svm_classifier_errors(void** state) {
  (void)state;
  const char* words[4] = {"coefficients", "rho", "prob_a", "vectors_per_class"};
  for (int c = 0; c < 4; c++) {
    OxTestNode* n;
    OxTestModel* m = ml_model(&n, "SVMClassifier", ONYX_ELEM_FLOAT32, 1, 2, "y,z");
    otm_output(m, "y", ONYX_ELEM_INT64, 1, (int64_t[]){1});
    otm_output(m, "z", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 3});
    otm_attr_floats(n, "support_vectors", 6, (const float[]){1, 0, 0, 1, -1, -1});
    otm_attr_ints(n, "vectors_per_class", c == 3 ? 2 : 3, (const int64_t[]){1, 1, 1});
    otm_attr_floats(n, "coefficients", c == 0 ? 5 : 6, (const float[]){1, -1, -1, 1, 1, -1});
    otm_attr_floats(n, "rho", c == 1 ? 2 : 3, (const float[]){0, 0, 0});
    otm_attr_ints(n, "classlabels_ints", 3, (const int64_t[]){0, 1, 2});
    if (c == 2) {
      otm_attr_floats(n, "prob_a", 2, (const float[]){1, 1});
      otm_attr_floats(n, "prob_b", 2, (const float[]){1, 1});
    }
    static const float x[2] = {1, 2};
    OtsFeed f[] = {{"x", ONYX_ELEM_FLOAT32, 2, {1, 2}, x}};
    OnyxValue* got[2] = {0};
    expect_error(ots_run(m, f, 1, (const char*[]){"y", "z"}, 2, got), "'n'", words[c]);
    otm_free(m);
  }
}

/* --- Preprocessing -----------------------------------------------------------------------------
 */

/* Categories [3, 1, 7]: 1 -> [0 1 0], 7 -> [0 0 1], 5 (unknown) -> zeros,
 * 3 -> [1 0 0]; a float 1.9 truncates to 1. With zeros = 0 the unknown 5
 * is an error. */
static void test_one_hot_encoder(void** state) {
  (void)state;
  for (int zeros = 1; zeros >= 0; zeros--) {
    OxTestNode* n;
    OxTestModel* m = ml_model(&n, "OneHotEncoder", ONYX_ELEM_FLOAT32, 2, 2, "y");
    otm_output(m, "y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 2, 3});
    otm_attr_ints(n, "cats_int64s", 3, (const int64_t[]){3, 1, 7});
    otm_attr_int(n, "zeros", zeros);
    static const float x[4] = {1.9f, 7, 5, 3};
    OtsFeed f[] = {{"x", ONYX_ELEM_FLOAT32, 2, {2, 2}, x}};
    OnyxValue* got = NULL;
    OnyxStatus* st = ots_run(m, f, 1, (const char*[]){"y"}, 1, &got);
    if (zeros) {
      assert_null(st);
      static const float want[12] = {0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0};
      expect_floats(got, want, 12, (int64_t[]){2, 2, 3}, 3, 0);
      onyx_value_release(got);
    } else {
      expect_error(st, "'n'", "zeros");
    }
    otm_free(m);
  }
}

static void test_one_hot_encoder_strings(void** state) {
  (void)state;
  OxTestNode* n;
  OxTestModel* m = ml_model(&n, "OneHotEncoder", ONYX_ELEM_STRING, 1, 3, "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 3, 2});
  otm_attr_strings(n, "cats_strings", 2, (const char*[]){"red", "blue"});
  const char* x[3] = {"blue", "green", "red"};
  OtsFeed f[] = {{"x", ONYX_ELEM_STRING, 2, {1, 3}, x}};
  OnyxValue* got = NULL;
  assert_null(ots_run(m, f, 1, (const char*[]){"y"}, 1, &got));
  expect_floats(got, (const float[]){0, 1, 0, 0, 1, 0}, 6, (int64_t[]){1, 3, 2}, 3, 0);
  onyx_value_release(got);
  otm_free(m);
}

/* NaN cells take their column's value; with one imputed value every column
 * takes it. int64: replaced_value_int64 (-1) cells become 9. */
static void test_imputer(void** state) {
  (void)state;
  OxTestNode* n;
  OxTestModel* m = ml_model(&n, "Imputer", ONYX_ELEM_FLOAT32, 2, 2, "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2});
  otm_attr_floats(n, "imputed_value_floats", 2, (const float[]){10, 20});
  otm_attr_float(n, "replaced_value_float", NAN);
  const float x[4] = {NAN, 1, 2, NAN};
  OtsFeed f[] = {{"x", ONYX_ELEM_FLOAT32, 2, {2, 2}, x}};
  OnyxValue* got = NULL;
  assert_null(ots_run(m, f, 1, (const char*[]){"y"}, 1, &got));
  expect_floats(got, (const float[]){10, 1, 2, 20}, 4, (int64_t[]){2, 2}, 2, 0);
  onyx_value_release(got);
  otm_free(m);

  m = ml_model(&n, "Imputer", ONYX_ELEM_INT64, 1, 3, "y");
  otm_output(m, "y", ONYX_ELEM_INT64, 2, (int64_t[]){1, 3});
  otm_attr_ints(n, "imputed_value_int64s", 1, (const int64_t[]){9});
  otm_attr_int(n, "replaced_value_int64", -1);
  static const int64_t xi[3] = {-1, 4, -1};
  OtsFeed fi[] = {{"x", ONYX_ELEM_INT64, 2, {1, 3}, xi}};
  assert_null(ots_run(m, fi, 1, (const char*[]){"y"}, 1, &got));
  expect_ints(got, (const int64_t[]){9, 4, 9}, 3);
  onyx_value_release(got);
  otm_free(m);

  /* Three imputed values for two columns. */
  m = ml_model(&n, "Imputer", ONYX_ELEM_FLOAT32, 2, 2, "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2});
  otm_attr_floats(n, "imputed_value_floats", 3, (const float[]){1, 2, 3});
  expect_error(ots_run(m, f, 1, (const char*[]){"y"}, 1, &got), "'n'", "imputed_value_floats");
  otm_free(m);
}

/* Inputs [2, 3] and [2, 1] (int64; the inputs share one type), inputdimensions [2, 2]: the first
 * loses its third column, the second is padded with a zero. */
static void test_feature_vectorizer(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, ML, 1);
  otm_input(m, "a", ONYX_ELEM_INT64, 2, (int64_t[]){2, 3});
  otm_input(m, "b", ONYX_ELEM_INT64, 2, (int64_t[]){2, 1});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 4});
  OxTestNode* n = otm_node(m, "FeatureVectorizer", "n", "a,b", "y");
  otm_node_domain(n, ML);
  otm_attr_ints(n, "inputdimensions", 2, (const int64_t[]){2, 2});
  static const int64_t a[6] = {1, 2, 3, 4, 5, 6};
  static const int64_t b[2] = {7, 8};
  OtsFeed f[] = {{"a", ONYX_ELEM_INT64, 2, {2, 3}, a}, {"b", ONYX_ELEM_INT64, 2, {2, 1}, b}};
  OnyxValue* got = NULL;
  OnyxStatus* st = ots_run(m, f, 2, (const char*[]){"y"}, 1, &got);
  if (st) fail_msg("%s", onyx_status_message(st));
  expect_floats(got, (const float[]){1, 2, 7, 0, 4, 5, 8, 0}, 8, (int64_t[]){2, 4}, 2, 0);
  onyx_value_release(got);
  otm_free(m);
}

static void test_category_mapper(void** state) {
  (void)state;
  OxTestNode* n;
  OxTestModel* m = ml_model(&n, "CategoryMapper", ONYX_ELEM_STRING, 1, 3, "y");
  otm_output(m, "y", ONYX_ELEM_INT64, 2, (int64_t[]){1, 3});
  otm_attr_strings(n, "cats_strings", 2, (const char*[]){"cat", "dog"});
  otm_attr_ints(n, "cats_int64s", 2, (const int64_t[]){5, 9});
  otm_attr_int(n, "default_int64", 42);
  const char* x[3] = {"dog", "cow", "cat"};
  OtsFeed f[] = {{"x", ONYX_ELEM_STRING, 2, {1, 3}, x}};
  OnyxValue* got = NULL;
  assert_null(ots_run(m, f, 1, (const char*[]){"y"}, 1, &got));
  expect_ints(got, (const int64_t[]){9, 42, 5}, 3);
  onyx_value_release(got);
  otm_free(m);

  m = ml_model(&n, "CategoryMapper", ONYX_ELEM_INT64, 1, 3, "y");
  otm_output(m, "y", ONYX_ELEM_STRING, 2, (int64_t[]){1, 3});
  otm_attr_strings(n, "cats_strings", 2, (const char*[]){"cat", "dog"});
  otm_attr_ints(n, "cats_int64s", 2, (const int64_t[]){5, 9});
  static const int64_t xi[3] = {9, 1, 5};
  OtsFeed fi[] = {{"x", ONYX_ELEM_INT64, 2, {1, 3}, xi}};
  assert_null(ots_run(m, fi, 1, (const char*[]){"y"}, 1, &got));
  expect_strings(got, (const char*[]){"dog", "_Unused", "cat"}, 3);
  onyx_value_release(got);
  otm_free(m);

  m = ml_model(&n, "CategoryMapper", ONYX_ELEM_INT64, 1, 3, "y");
  otm_output(m, "y", ONYX_ELEM_STRING, 2, (int64_t[]){1, 3});
  otm_attr_strings(n, "cats_strings", 2, (const char*[]){"cat", "dog"});
  otm_attr_ints(n, "cats_int64s", 1, (const int64_t[]){5});
  expect_error(ots_run(m, fi, 1, (const char*[]){"y"}, 1, &got), "'n'", "cats_int64s");
  otm_free(m);
}

/* Normalizer on [-4, 2, 0]: MAX divides by the largest value 2 (ONNX
 * Runtime's rule: not the largest magnitude) -> [-2, 1, 0]; L1 by 6; L2 by
 * sqrt(20). A row of zeros stays zeros. */
static void test_normalizer(void** state) {
  (void)state;
  const char* norms[3] = {"MAX", "L1", "L2"};
  double d[3] = {2, 6, sqrt(20.0)};
  for (int k = 0; k < 3; k++) {
    OxTestNode* n;
    OxTestModel* m = ml_model(&n, "Normalizer", ONYX_ELEM_INT32, 2, 3, "y");
    otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
    otm_attr_string(n, "norm", norms[k]);
    static const int32_t x[6] = {-4, 2, 0, 0, 0, 0};
    OtsFeed f[] = {{"x", ONYX_ELEM_INT32, 2, {2, 3}, x}};
    OnyxValue* got = NULL;
    assert_null(ots_run(m, f, 1, (const char*[]){"y"}, 1, &got));
    float want[6] = {(float)(-4 / d[k]), (float)(2 / d[k]), 0, 0, 0, 0};
    expect_floats(got, want, 6, (int64_t[]){2, 3}, 2, 1e-6f);
    onyx_value_release(got);
    otm_free(m);
  }
}

/* Scaler: (x - offset) * scale per column; a scale of the wrong length is
 * refused naming the attribute. Binarizer: 1 where x > threshold. */
static void test_scaler_binarizer(void** state) {
  (void)state;
  OxTestNode* n;
  OxTestModel* m = ml_model(&n, "Scaler", ONYX_ELEM_FLOAT64, 1, 2, "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 2});
  otm_attr_floats(n, "offset", 2, (const float[]){1, -1});
  otm_attr_floats(n, "scale", 1, (const float[]){2});
  static const double x[2] = {3, 3};
  OtsFeed f[] = {{"x", ONYX_ELEM_FLOAT64, 2, {1, 2}, x}};
  OnyxValue* got = NULL;
  assert_null(ots_run(m, f, 1, (const char*[]){"y"}, 1, &got));
  expect_floats(got, (const float[]){4, 8}, 2, (int64_t[]){1, 2}, 2, 0);
  onyx_value_release(got);
  otm_free(m);

  m = ml_model(&n, "Scaler", ONYX_ELEM_FLOAT64, 1, 2, "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 2});
  otm_attr_floats(n, "scale", 3, (const float[]){1, 2, 3});
  expect_error(ots_run(m, f, 1, (const char*[]){"y"}, 1, &got), "'n'", "scale");
  otm_free(m);

  m = ml_model(&n, "Binarizer", ONYX_ELEM_FLOAT32, 1, 3, "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 3});
  otm_attr_float(n, "threshold", 1.5f);
  static const float xb[3] = {1.5f, 2, -3};
  OtsFeed fb[] = {{"x", ONYX_ELEM_FLOAT32, 2, {1, 3}, xb}};
  assert_null(ots_run(m, fb, 1, (const char*[]){"y"}, 1, &got));
  expect_floats(got, (const float[]){0, 1, 0}, 3, (int64_t[]){1, 3}, 2, 0);
  onyx_value_release(got);
  otm_free(m);
}

/* ArrayFeatureExtractor picks columns 2 and 0 of each row. */
static void test_array_feature_extractor(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, ML, 1);
  otm_input(m, "x", ONYX_ELEM_INT64, 2, (int64_t[]){2, 3});
  otm_input(m, "i", ONYX_ELEM_INT64, 1, (int64_t[]){2});
  otm_output(m, "y", ONYX_ELEM_INT64, 2, (int64_t[]){2, 2});
  OxTestNode* n = otm_node(m, "ArrayFeatureExtractor", "n", "x,i", "y");
  otm_node_domain(n, ML);
  static const int64_t x[6] = {1, 2, 3, 4, 5, 6}, idx[2] = {2, 0};
  OtsFeed f[] = {{"x", ONYX_ELEM_INT64, 2, {2, 3}, x}, {"i", ONYX_ELEM_INT64, 1, {2}, idx}};
  OnyxValue* got = NULL;
  assert_null(ots_run(m, f, 2, (const char*[]){"y"}, 1, &got));
  expect_ints(got, (const int64_t[]){3, 1, 6, 4}, 4);
  onyx_value_release(got);
  otm_free(m);
}

/* LabelEncoder 1 (classes_strings): a string maps to its index, unknown to
 * default_int64. */
static void test_label_encoder_v1(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, ML, 1);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){3});
  otm_output(m, "y", ONYX_ELEM_INT64, 1, (int64_t[]){3});
  OxTestNode* n = otm_node(m, "LabelEncoder", "n", "x", "y");
  otm_node_domain(n, ML);
  otm_attr_strings(n, "classes_strings", 3, (const char*[]){"a", "b", "c"});
  otm_attr_int(n, "default_int64", -7);
  const char* x[3] = {"c", "z", "a"};
  OtsFeed f[] = {{"x", ONYX_ELEM_STRING, 1, {3}, x}};
  OnyxValue* got = NULL;
  assert_null(ots_run(m, f, 1, (const char*[]){"y"}, 1, &got));
  expect_ints(got, (const int64_t[]){2, -7, 0}, 3);
  onyx_value_release(got);
  otm_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_linear_classifier_softmax),
      cmocka_unit_test(test_linear_classifier_binary),
      cmocka_unit_test(test_linear_classifier_single_probit),
      cmocka_unit_test(test_linear_classifier_softmax_zero_logistic),
      cmocka_unit_test(test_linear_classifier_errors),
      cmocka_unit_test(test_linear_regressor),
      cmocka_unit_test(test_linear_regressor_errors),
      cmocka_unit_test(test_svm_regressor_kernels),
      cmocka_unit_test(test_svm_regressor_linear_mode),
      cmocka_unit_test(test_svm_regressor_errors),
      cmocka_unit_test(test_svm_classifier_votes),
      cmocka_unit_test(test_svm_classifier_probabilities),
      cmocka_unit_test(test_svm_classifier_binary),
      cmocka_unit_test(test_svm_classifier_linear_mode),
      cmocka_unit_test(test_svm_classifier_errors),
      cmocka_unit_test(test_one_hot_encoder),
      cmocka_unit_test(test_one_hot_encoder_strings),
      cmocka_unit_test(test_imputer),
      cmocka_unit_test(test_feature_vectorizer),
      cmocka_unit_test(test_category_mapper),
      cmocka_unit_test(test_normalizer),
      cmocka_unit_test(test_scaler_binarizer),
      cmocka_unit_test(test_array_feature_extractor),
      cmocka_unit_test(test_label_encoder_v1),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
