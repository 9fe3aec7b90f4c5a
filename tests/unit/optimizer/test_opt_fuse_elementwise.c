/* test_opt_fuse_elementwise.c — the fuse_elementwise pass
 * (host/optimizer/opt_fuse_elementwise.c) on sessions of [gpuemu, cpu] and
 * of the CPU provider alone; both providers register com.onyx
 * FusedElementwise.
 * - the GPT block's tanh-GELU after a projection (eight nodes) becomes one
 *   FusedElementwise node, on gpuemu and on the CPU provider, made by
 *   fuse_elementwise;
 * - a chain cut by a node gpuemu lacks (HardSwish, placed on the CPU
 *   provider) fuses only on the gpuemu side;
 * - a value read outside the chain (a graph output, or a ReduceSum's input)
 *   stays a node's output and the chain fuses from there on;
 * - inputs of three shapes that broadcast, and a constant scalar, fuse into
 *   one node of three inputs;
 * - the CPU provider's limits: no set of cheap ops only (Add + Relu), no
 *   4-D set at the layout level (left to layout_nchwc), which the extended
 *   level fuses.
 * Every output is checked against the model computed here in double, and
 * against the same session without optimization (float32 rounding). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "ox_session.h"
#include "ox_test_models.h"

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static void fill(float* x, size_t n, unsigned seed, float lo, float hi) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = lo + (hi - lo) * (float)((seed >> 8) % 10007) / 10006.0f;
  }
}

static OnyxSession* open_with(const uint8_t* bytes, size_t len, bool gpu,
                              OnyxOptimizationLevel level) {
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  const char* cfg = gpu ? "{\"providers\": [{\"name\": \"gpuemu\"}, {\"name\": \"cpu\"}]}"
                        : "{\"providers\": [{\"name\": \"cpu\"}]}";
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "fuse.json"));
  ok(onyx_session_options_set_optimization_level(o, level));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  if (st) fail_msg("session: %s", onyx_status_message(st));
  onyx_session_options_release(o);
  return s;
}

/* Nodes of op `op`; with ep non-NULL, each must be on that provider. */
static size_t count_op(const OnyxSession* s, const char* op, const char* ep) {
  size_t n = 0;
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
    const OxNode* nd = s->prog.graph->nodes[i];
    if (strcmp(nd->op_type, op)) continue;
    n++;
    if (ep) {
      assert_true(nd->ep >= 0);
      if (strcmp(s->prog.eps[nd->ep].name, ep))
        fail_msg("%s '%s' is on %s, not %s", op, nd->name, s->prog.eps[nd->ep].name, ep);
    }
  }
  return n;
}

/* The inputs of the one FusedElementwise node, by name, comma-separated. */
static void fused_inputs(const OnyxSession* s, char* out, size_t cap) {
  out[0] = 0;
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
    const OxNode* nd = s->prog.graph->nodes[i];
    if (strcmp(nd->op_type, "FusedElementwise")) continue;
    assert_string_equal(nd->domain, "com.onyx");
    for (size_t k = 0; k < nd->n_inputs; k++)
      snprintf(out + strlen(out), cap - strlen(out), "%s%s", k ? "," : "", nd->inputs[k]->name);
  }
}

typedef struct Feed {
  const char* name;
  const float* data;
  size_t rank;
  const int64_t* dims;
} Feed;

/* Output `out` (count floats) for the feeds. */
static void run(OnyxSession* s, const Feed* f, size_t n_f, const char* out, float* y,
                size_t count) {
  OnyxValue* v[4] = {NULL};
  const char* names[4];
  for (size_t i = 0; i < n_f; i++) {
    size_t n = 1;
    for (size_t d = 0; d < f[i].rank; d++)
      n *= (size_t)f[i].dims[d];
    names[i] = f[i].name;
    ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, f[i].dims, f[i].rank, f[i].data,
                                n * sizeof(float), &v[i]));
  }
  OnyxValue* r = NULL;
  ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)v, n_f, &out, 1, &r));
  const OnyxTensor* t = onyx_value_tensor(r);
  assert_int_equal(onyx_tensor_elem_count(t), count);
  memcpy(y, onyx_tensor_data(t), count * sizeof(float));
  onyx_value_release(r);
  for (size_t i = 0; i < n_f; i++)
    onyx_value_release(v[i]);
}

/* got against the double reference and against the unoptimized session. */
static void expect(const char* what, const float* got, const float* plain, const double* want,
                   size_t n) {
  for (size_t i = 0; i < n; i++) {
    const double tol = 1e-5 * (1.0 + fabs(want[i]));
    if (!(fabs(got[i] - want[i]) <= tol))
      fail_msg("%s: [%zu] = %.9g, want %.9g", what, i, got[i], want[i]);
    if (!(fabs(got[i] - plain[i]) <= tol))
      fail_msg("%s: [%zu] = %.9g fused, %.9g not", what, i, got[i], plain[i]);
  }
}

static void scalar(OxTestModel* m, const char* name, float v) {
  otm_initializer(m, name, ONYX_ELEM_FLOAT32, 0, NULL, &v);
}

static bool has_origin(const OnyxSession* s, const char* pass) {
  char* text = NULL;
  ok(onyx_session_explain(s, &text));
  char want[64];
  snprintf(want, sizeof want, "made by %s", pass);
  const bool found = strstr(text, want) != NULL;
  onyx_free(text);
  return found;
}

/* --- the GPT block's tanh-GELU ------------------------------------------------------------- */

enum { GB = 2, GS = 5, GK = 8, GN = 16 };

/* On [gpuemu, cpu] (gpu) or the CPU provider alone. */
static void gelu_case(bool gpu) {
  const char* ep = gpu ? "gpuemu" : "cpu";
  OxTestModel* m = otm_new(17);
  const int64_t xd[3] = {GB, GS, GK}, yd[3] = {GB, GS, GN};
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 3, xd);
  float w[GK * GN], b[GN], x[GB * GS * GK];
  fill(w, GK * GN, 3, -0.8f, 0.8f);
  fill(b, GN, 5, -1.0f, 1.0f);
  fill(x, GB * GS * GK, 7, -2.0f, 2.0f);
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 2, (int64_t[]){GK, GN}, w);
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 1, (int64_t[]){GN}, b);
  scalar(m, "three", 3.0f);
  scalar(m, "c", 0.044715f);
  scalar(m, "k", 0.7978845608028654f);
  scalar(m, "one", 1.0f);
  scalar(m, "half", 0.5f);
  otm_node(m, "MatMul", "mm", "X,W", "P");
  otm_node(m, "Add", "bias", "P,B", "H");
  otm_node(m, "Pow", "pow", "H,three", "H3");
  otm_node(m, "Mul", "mul_c", "H3,c", "CH3");
  otm_node(m, "Add", "inner", "H,CH3", "IN");
  otm_node(m, "Mul", "mul_k", "IN,k", "KIN");
  otm_node(m, "Tanh", "tanh", "KIN", "T");
  otm_node(m, "Add", "one_plus", "T,one", "OPT");
  otm_node(m, "Mul", "half_x", "H,half", "HH");
  otm_node(m, "Mul", "gelu", "HH,OPT", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, yd);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);

  OnyxSession* s = open_with(bytes, len, gpu, ONYX_OPT_ALL);
  assert_int_equal(count_op(s, "FusedElementwise", ep), 1);
  assert_int_equal(count_op(s, "Tanh", NULL), 0);
  assert_int_equal(count_op(s, "Pow", NULL), 0);
  assert_int_equal(count_op(s, "Mul", NULL), 0);
  assert_true(has_origin(s, "fuse_elementwise"));
  char ins[256];
  fused_inputs(s, ins, sizeof ins);
  assert_string_equal(ins, "H");               /* the constants are immediates */
  assert_int_equal(s->prog.graph->n_nodes, 2); /* FusedMatMul, FusedElementwise */

  enum { N = GB * GS * GN };
  double want[N];
  for (int r = 0; r < GB * GS; r++)
    for (int j = 0; j < GN; j++) {
      double h = b[j];
      for (int k = 0; k < GK; k++)
        h += (double)x[r * GK + k] * w[k * GN + j];
      want[r * GN + j] =
          0.5 * h * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (h + 0.044715 * h * h * h)));
    }
  const Feed f = {"X", x, 3, xd};
  float y[N], yp[N];
  run(s, &f, 1, "Y", y, N);
  OnyxSession* plain = open_with(bytes, len, gpu, ONYX_OPT_DISABLED);
  assert_int_equal(count_op(plain, "FusedElementwise", NULL), 0);
  run(plain, &f, 1, "Y", yp, N);
  expect(gpu ? "tanh-GELU on gpuemu" : "tanh-GELU on cpu", y, yp, want, N);
  onyx_session_release(plain);
  onyx_session_release(s);
  free(bytes);
}

static void test_gelu_tanh_fused(void** state) {
  (void)state;
  gelu_case(true);
  gelu_case(false);
}

/* --- not across providers ------------------------------------------------------------------ */

enum { CN = 37 };

/* Y = tanh(HardSwish(X + B) * 2): HardSwish has no gpuemu kernel. */
static void test_not_across_providers(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  const int64_t d[1] = {CN};
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, d);
  otm_input(m, "B", ONYX_ELEM_FLOAT32, 1, d);
  scalar(m, "two", 2.0f);
  otm_node(m, "Add", "add", "X,B", "A");
  otm_node(m, "HardSwish", "hs", "A", "S");
  otm_node(m, "Mul", "mul", "S,two", "M");
  otm_node(m, "Tanh", "tanh", "M", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 1, d);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);

  OnyxSession* s = open_with(bytes, len, true, ONYX_OPT_ALL);
  assert_int_equal(count_op(s, "HardSwish", "cpu"), 1);
  assert_int_equal(count_op(s, "FusedElementwise", "gpuemu"), 1);
  assert_int_equal(count_op(s, "Add", NULL), 1); /* alone on its side: left as it is */
  char ins[256];
  fused_inputs(s, ins, sizeof ins);
  assert_string_equal(ins, "S");

  float x[CN], bb[CN], y[CN], yp[CN];
  fill(x, CN, 11, -5.0f, 5.0f);
  fill(bb, CN, 13, -1.0f, 1.0f);
  double want[CN];
  for (int i = 0; i < CN; i++) {
    const double a = (double)x[i] + bb[i];
    const double hs = a * fmax(0.0, fmin(1.0, a / 6.0 + 0.5));
    want[i] = tanh(hs * 2.0);
  }
  const Feed f[2] = {{"X", x, 1, d}, {"B", bb, 1, d}};
  run(s, f, 2, "Y", y, CN);
  OnyxSession* plain = open_with(bytes, len, true, ONYX_OPT_DISABLED);
  run(plain, f, 2, "Y", yp, CN);
  expect("HardSwish between", y, yp, want, CN);
  onyx_session_release(plain);
  onyx_session_release(s);

  free(bytes);
}

/* --- a value read outside the chain -------------------------------------------------------- */

/* mode 0: A = X * 2 is also a graph output; Y = tanh(A) + 1.
 * mode 1: S = Sigmoid(X) is also read by ReduceSum (R); Y = -(S * X). */
static void outside_case(int mode) {
  OxTestModel* m = otm_new(17);
  const int64_t d[2] = {3, 7};
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, d);
  if (mode == 0) {
    scalar(m, "two", 2.0f);
    scalar(m, "one", 1.0f);
    otm_node(m, "Mul", "mul", "X,two", "A");
    otm_node(m, "Tanh", "tanh", "A", "T");
    otm_node(m, "Add", "add", "T,one", "Y");
    otm_output(m, "A", ONYX_ELEM_FLOAT32, 2, d);
  } else {
    otm_node(m, "Sigmoid", "sig", "X", "S");
    otm_node(m, "Mul", "mul", "S,X", "M");
    otm_node(m, "Neg", "neg", "M", "Y");
    otm_node(m, "ReduceSum", "sum", "S", "R");
    otm_output(m, "R", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 1});
  }
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, d);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);

  OnyxSession* s = open_with(bytes, len, true, ONYX_OPT_ALL);
  assert_int_equal(count_op(s, "FusedElementwise", "gpuemu"), 1);
  char ins[256];
  fused_inputs(s, ins, sizeof ins);
  if (mode == 0) {
    assert_int_equal(count_op(s, "Mul", "gpuemu"), 1);
    assert_string_equal(ins, "A");
  } else {
    assert_int_equal(count_op(s, "Sigmoid", "gpuemu"), 1);
    assert_string_equal(ins, "S,X");
  }
  enum { N = 21 };
  float x[N], y[N], yp[N];
  fill(x, N, 17 + (unsigned)mode, -3.0f, 3.0f);
  double want[N];
  for (int i = 0; i < N; i++)
    want[i] = mode == 0 ? tanh(2.0 * x[i]) + 1.0 : -(x[i] / (1.0 + exp(-(double)x[i])));
  const Feed f = {"X", x, 2, d};
  run(s, &f, 1, "Y", y, N);
  OnyxSession* plain = open_with(bytes, len, true, ONYX_OPT_DISABLED);
  run(plain, &f, 1, "Y", yp, N);
  expect(mode == 0 ? "graph output inside" : "ReduceSum reads inside", y, yp, want, N);
  if (mode == 0) { /* the kept value is right too */
    float a[N], ap[N];
    double wa[N];
    for (int i = 0; i < N; i++)
      wa[i] = 2.0 * x[i];
    run(s, &f, 1, "A", a, N);
    run(plain, &f, 1, "A", ap, N);
    expect("A", a, ap, wa, N);
  }
  onyx_session_release(plain);
  onyx_session_release(s);
  free(bytes);
}

static void test_read_outside(void** state) {
  (void)state;
  outside_case(0);
  outside_case(1);
}

/* --- broadcasting inputs ------------------------------------------------------------------- */

/* Y = Sigmoid(Relu(A + B) * C) - 0.25, A [2, 3, 4], B [4], C [2, 1, 1]. */
static void test_broadcast(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  const int64_t ad[3] = {2, 3, 4}, bd[1] = {4}, cd[3] = {2, 1, 1};
  otm_input(m, "A", ONYX_ELEM_FLOAT32, 3, ad);
  otm_input(m, "B", ONYX_ELEM_FLOAT32, 1, bd);
  otm_input(m, "C", ONYX_ELEM_FLOAT32, 3, cd);
  scalar(m, "q", 0.25f);
  otm_node(m, "Add", "add", "A,B", "S");
  otm_node(m, "Relu", "relu", "S", "R");
  otm_node(m, "Mul", "mul", "R,C", "M");
  otm_node(m, "Sigmoid", "sig", "M", "G");
  otm_node(m, "Sub", "sub", "G,q", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, ad);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);

  OnyxSession* s = open_with(bytes, len, true, ONYX_OPT_ALL);
  assert_int_equal(count_op(s, "FusedElementwise", "gpuemu"), 1);
  assert_int_equal(s->prog.graph->n_nodes, 1);
  char ins[256];
  fused_inputs(s, ins, sizeof ins);
  assert_string_equal(ins, "A,B,C");
  float a[24], b[4], c[2], y[24], yp[24];
  fill(a, 24, 19, -2.0f, 2.0f);
  fill(b, 4, 23, -1.0f, 1.0f);
  fill(c, 2, 29, -3.0f, 3.0f);
  double want[24];
  for (int i = 0; i < 24; i++) {
    const double sum = (double)a[i] + b[i % 4];
    const double r = sum > 0 ? sum : 0;
    want[i] = 1.0 / (1.0 + exp(-(r * c[i / 12]))) - 0.25;
  }
  const Feed f[3] = {{"A", a, 3, ad}, {"B", b, 1, bd}, {"C", c, 3, cd}};
  run(s, f, 3, "Y", y, 24);
  OnyxSession* plain = open_with(bytes, len, true, ONYX_OPT_DISABLED);
  run(plain, f, 3, "Y", yp, 24);
  expect("broadcast", y, yp, want, 24);
  onyx_session_release(plain);
  onyx_session_release(s);
  free(bytes);
}

/* --- the CPU provider's limits --------------------------------------------------------------- */

/* rank 3: Y = relu(X + B) (cheap only); rank 4: Y = tanh(X + B) * 0.5. */
static void cpu_case(int rank, bool heavy, OnyxOptimizationLevel level, bool gpu,
                     size_t want_fused) {
  OxTestModel* m = otm_new(17);
  const int64_t d4[4] = {2, 3, 4, 5};
  const int64_t* d = rank == 4 ? d4 : d4 + 1;
  otm_input(m, "X", ONYX_ELEM_FLOAT32, rank, d);
  otm_input(m, "B", ONYX_ELEM_FLOAT32, rank, d);
  scalar(m, "half", 0.5f);
  otm_node(m, "Add", "add", "X,B", "A");
  if (heavy) {
    otm_node(m, "Tanh", "tanh", "A", "T");
    otm_node(m, "Mul", "mul", "T,half", "Y");
  } else {
    otm_node(m, "Relu", "relu", "A", "Y");
  }
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, rank, d);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = open_with(bytes, len, gpu, level);
  if (count_op(s, "FusedElementwise", gpu ? "gpuemu" : "cpu") != want_fused)
    fail_msg("rank %d, %s, level %d, %s: %zu FusedElementwise, want %zu", rank,
             heavy ? "Tanh" : "cheap", (int)level, gpu ? "gpuemu" : "cpu",
             count_op(s, "FusedElementwise", NULL), want_fused);
  enum { N = 120 };
  const size_t n = rank == 4 ? 120 : 60;
  float x[N], b[N], y[N], yp[N];
  double want[N];
  fill(x, n, 31, -2.0f, 2.0f);
  fill(b, n, 37, -1.0f, 1.0f);
  for (size_t i = 0; i < n; i++) {
    const double a = (double)x[i] + b[i];
    want[i] = heavy ? tanh(a) * 0.5 : a > 0 ? a : 0;
  }
  const Feed f[2] = {{"X", x, (size_t)rank, d}, {"B", b, (size_t)rank, d}};
  run(s, f, 2, "Y", y, n);
  OnyxSession* plain = open_with(bytes, len, gpu, ONYX_OPT_DISABLED);
  run(plain, f, 2, "Y", yp, n);
  expect("cpu limits", y, yp, want, n);
  onyx_session_release(plain);
  onyx_session_release(s);
  free(bytes);
}

static void test_cpu_limits(void** state) {
  (void)state;
  cpu_case(3, false, ONYX_OPT_ALL, false, 0); /* Add + Relu: cheap */
  cpu_case(3, false, ONYX_OPT_ALL, true, 1);  /* on gpuemu it fuses */
  cpu_case(3, true, ONYX_OPT_ALL, false, 1);
  cpu_case(4, true, ONYX_OPT_ALL, false, 0); /* 4-D: layout_nchwc's */
  cpu_case(4, true, ONYX_OPT_EXTENDED, false, 1);
  cpu_case(4, true, ONYX_OPT_ALL, true, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gelu_tanh_fused), cmocka_unit_test(test_not_across_providers),
      cmocka_unit_test(test_read_outside),    cmocka_unit_test(test_broadcast),
      cmocka_unit_test(test_cpu_limits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
