/* test_optimizer.c — the graph optimizer and the memory planner.
 *
 * Every transformer is checked the same way: a small model is run with the
 * optimizer disabled and at "all"; the outputs must agree, and the optimized
 * graph must hold the expected op counts (the fusion happened). Where the
 * result is easy to derive by hand, the test also checks it against a
 * reference computed here (naive loops), independent of any Onyx kernel. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "opt_internal.h"
#include "ox_memplan.h"
#include "ox_session.h"
#include "ox_test_models.h"

/* --- helpers ---------------------------------------------------------------------------- */

typedef struct Model {
  uint8_t* bytes;
  size_t len;
} Model;

static Model finish(OxTestModel* m) {
  Model r;
  otm_serialize(m, &r.bytes, &r.len);
  otm_free(m);
  return r;
}

static OnyxSession* open_with(const Model* m, OnyxOptimizationLevel level, size_t threads) {
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  assert_null(onyx_session_options_set_optimization_level(o, level));
  assert_null(onyx_session_options_set_threads(o, threads));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, m->bytes, m->len, NULL, &s);
  if (st) fail_msg("session: %s", onyx_status_message(st));
  onyx_session_options_release(o);
  return s;
}

/* Session creation with the default options must fail: its status (caller releases). */
static OnyxStatus* create_fails(const Model* m) {
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, m->bytes, m->len, NULL, &s);
  onyx_session_options_release(o);
  assert_non_null(st);
  assert_null(s);
  return st;
}

static OnyxSession* open_at(const Model* m, OnyxOptimizationLevel level) {
  return open_with(m, level, 1);
}

static size_t count_op(const OnyxSession* s, const char* op) {
  size_t n = 0;
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++)
    n += !strcmp(s->prog.graph->nodes[i]->op_type, op);
  return n;
}

/* Runs with float inputs (data[i] has counts[i] floats, shape from the
 * session's declared input) and returns output 0..n_out-1. */
static void run_f32(OnyxSession* s, const float* const* data, size_t n_in, OnyxValue** outs,
                    size_t n_out) {
  const char* in_names[4];
  OnyxValue* ins[4] = {0};
  for (size_t i = 0; i < n_in; i++) {
    OnyxElemType t;
    int32_t rank;
    const int64_t* dims;
    assert_null(onyx_session_input_info(s, i, &t, &rank, &dims));
    size_t count = 1;
    for (int32_t k = 0; k < rank; k++)
      count *= (size_t)dims[k];
    in_names[i] = onyx_session_input_name(s, i);
    assert_null(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dims, (size_t)rank, data[i],
                                         count * sizeof(float), &ins[i]));
  }
  const char* out_names[4];
  for (size_t i = 0; i < n_out; i++)
    out_names[i] = onyx_session_output_name(s, i);
  OnyxStatus* st = onyx_session_run(s, NULL, in_names, (const OnyxValue* const*)ins, n_in,
                                    out_names, n_out, outs);
  if (st) fail_msg("run: %s", onyx_status_message(st));
  for (size_t i = 0; i < n_in; i++)
    onyx_value_release(ins[i]);
}

static void expect_close(const OnyxValue* a, const float* want, size_t count, float tol) {
  const OnyxTensor* t = onyx_value_tensor(a);
  assert_int_equal(onyx_tensor_elem_count(t), count);
  const float* d = onyx_tensor_data(t);
  for (size_t i = 0; i < count; i++)
    if (!(fabsf(d[i] - want[i]) <= tol * (1.0f + fabsf(want[i]))))
      fail_msg("element %zu: %g, expected %g", i, (double)d[i], (double)want[i]);
}

/* Runs disabled vs all, compares every output within tol, returns the
 * optimized session for op counting (caller releases). */
static OnyxSession* compare_levels(const Model* m, const float* const* data, size_t n_in,
                                   size_t n_out, float tol) {
  OnyxSession* base = open_at(m, ONYX_OPT_DISABLED);
  OnyxSession* opt = open_at(m, ONYX_OPT_ALL);
  OnyxValue* a[4] = {0};
  OnyxValue* b[4] = {0};
  run_f32(base, data, n_in, a, n_out);
  run_f32(opt, data, n_in, b, n_out);
  for (size_t i = 0; i < n_out; i++) {
    const OnyxTensor* ta = onyx_value_tensor(a[i]);
    const OnyxTensor* tb = onyx_value_tensor(b[i]);
    assert_int_equal(onyx_tensor_rank(ta), onyx_tensor_rank(tb));
    for (size_t k = 0; k < onyx_tensor_rank(ta); k++)
      assert_int_equal(onyx_tensor_dims(ta)[k], onyx_tensor_dims(tb)[k]);
    expect_close(b[i], onyx_tensor_data(ta), onyx_tensor_elem_count(ta), tol);
  }
  onyx_values_release(a, n_out);
  onyx_values_release(b, n_out);
  onyx_session_release(base);
  return opt;
}

static void fill(float* x, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
  }
}

/* --- basic level ------------------------------------------------------------------------------ */

/* Identity and Dropout vanish, the duplicate Relu merges: Y = 2 relu(X). */
static void test_eliminate_and_cse(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_node(m, "Identity", "id", "X", "A");
  otm_node(m, "Relu", "r1", "A", "R1");
  otm_node(m, "Relu", "r2", "A", "R2");
  otm_node(m, "Add", "add", "R1,R2", "S");
  otm_node(m, "Dropout", "drop", "S", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  Model md = finish(m);
  float x[6] = {-1, 2, -3, 4, 0.5f, -0.25f};
  const float* in[] = {x};
  OnyxSession* s = compare_levels(&md, in, 1, 1, 0);
  assert_int_equal(count_op(s, "Identity"), 0);
  assert_int_equal(count_op(s, "Dropout"), 0);
  assert_int_equal(count_op(s, "Relu"), 1);
  assert_int_equal(s->prog.graph->n_nodes, 2);
  OnyxValue* y = NULL;
  run_f32(s, in, 1, &y, 1);
  const float want[6] = {0, 4, 0, 8, 1, 0};
  expect_close(y, want, 6, 0);
  assert_string_equal(onyx_session_output_name(s, 0), "Y");
  onyx_value_release(y);
  onyx_session_release(s);
  free(md.bytes);
}

/* An Identity whose output is a graph output: the producer writes it. */
static void test_identity_to_output(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4});
  otm_node(m, "Neg", "neg", "X", "A");
  otm_node(m, "Identity", "id", "A", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4});
  Model md = finish(m);
  float x[4] = {1, -2, 3, -4};
  const float* in[] = {x};
  OnyxSession* s = compare_levels(&md, in, 1, 1, 0);
  assert_int_equal(s->prog.graph->n_nodes, 1);
  assert_string_equal(s->prog.graph->nodes[0]->op_type, "Neg");
  assert_string_equal(s->prog.graph->nodes[0]->outputs[0]->name, "Y");
  onyx_session_release(s);
  free(md.bytes);
}

/* Shape -> Gather -> Unsqueeze -> Concat -> Reshape becomes a constant
 * shape, and Add of two initializers folds: Y = reshape(X) = X, Z = X * 3. */
static void test_fold_and_shapes(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_initializer(m, "one", ONYX_ELEM_INT64, 0, NULL, (int64_t[]){1});
  otm_initializer(m, "axes", ONYX_ELEM_INT64, 1, (int64_t[]){1}, (int64_t[]){0});
  otm_initializer(m, "minus1", ONYX_ELEM_INT64, 1, (int64_t[]){1}, (int64_t[]){-1});
  otm_initializer(m, "c1", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, (float[]){1, 1, 1});
  otm_initializer(m, "c2", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, (float[]){2, 2, 2});
  otm_node(m, "Shape", "shape", "X", "s");
  otm_node(m, "Gather", "gather", "s,one", "d1");
  otm_node(m, "Unsqueeze", "unsq", "d1,axes", "u");
  OxTestNode* cc = otm_node(m, "Concat", "concat", "minus1,u", "shp");
  otm_attr_int(cc, "axis", 0);
  otm_node(m, "Reshape", "reshape", "X,shp", "Y");
  otm_node(m, "Add", "wsum", "c1,c2", "w");
  otm_node(m, "Mul", "mul", "X,w", "Z");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_output(m, "Z", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  Model md = finish(m);
  float x[6] = {1, 2, 3, 4, 5, 6};
  const float* in[] = {x};
  OnyxSession* s = compare_levels(&md, in, 1, 2, 0);
  assert_int_equal(count_op(s, "Shape"), 0);
  assert_int_equal(count_op(s, "Gather"), 0);
  assert_int_equal(count_op(s, "Unsqueeze"), 0);
  assert_int_equal(count_op(s, "Concat"), 0);
  assert_int_equal(count_op(s, "Add"), 0);
  assert_int_equal(count_op(s, "Reshape"), 1);
  assert_int_equal(count_op(s, "Mul"), 1);
  OnyxValue* out[2] = {0};
  run_f32(s, in, 1, out, 2);
  const float want_z[6] = {3, 6, 9, 12, 15, 18};
  expect_close(out[0], x, 6, 0);
  expect_close(out[1], want_z, 6, 0);
  onyx_values_release(out, 2);
  onyx_session_release(s);
  free(md.bytes);
}

/* --- extended level ----------------------------------------------------------------------------
 */

static void naive_matmul_bias(const float* a, const float* b, const float* c, float* y, size_t m,
                              size_t k, size_t n) {
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      double acc = c[j];
      for (size_t p = 0; p < k; p++)
        acc += (double)a[i * k + p] * b[p * n + j];
      y[i * n + j] = (float)acc;
    }
}

static void matmul_add_case(int rank_a) {
  OxTestModel* m = otm_new(13);
  int64_t da3[3] = {2, 4, 3};
  const int64_t* da = rank_a == 3 ? da3 : da3 + 1;
  float b[15], c[5];
  fill(b, 15, 7);
  fill(c, 5, 9);
  otm_input(m, "A", ONYX_ELEM_FLOAT32, rank_a, da);
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 5}, b);
  otm_initializer(m, "C", ONYX_ELEM_FLOAT32, 1, (int64_t[]){5}, c);
  otm_node(m, "MatMul", "mm", "A,B", "P");
  otm_node(m, "Add", "add", "C,P", "Y"); /* bias first: either order fuses */
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, -1, NULL);
  Model md = finish(m);
  size_t rows = rank_a == 3 ? 8 : 4;
  float a[24], want[40];
  fill(a, rows * 3, 3);
  const float* in[] = {a};
  OnyxSession* s = compare_levels(&md, in, 1, 1, 1e-5f);
  assert_int_equal(count_op(s, "MatMul"), 0);
  assert_int_equal(count_op(s, "Add"), 0);
  assert_int_equal(count_op(s, rank_a == 2 ? "Gemm" : "FusedMatMul"), 1);
  OnyxValue* y = NULL;
  run_f32(s, in, 1, &y, 1);
  naive_matmul_bias(a, b, c, want, rows, 3, 5);
  expect_close(y, want, rows * 5, 1e-5f);
  onyx_value_release(y);
  onyx_session_release(s);
  free(md.bytes);
}

/* An activation after a matrix product joins it as com.onyx FusedMatMul's
 * `activation`: mode 0 Gemm (transB 1, C [N]) + Relu, mode 1 Gemm (transB 0,
 * C [1, N]) + Clip(-0.5, 0.7), mode 2 MatMul + Add on a 3-D A (first fused
 * into FusedMatMul) + LeakyRelu(0.2); mode 3 Gemm with alpha 2 + Relu stays
 * apart. The reference is computed here. */
static void matmul_act_case(int mode) {
  OxTestModel* m = otm_new(13);
  float b[15], c[5];
  fill(b, 15, 7);
  fill(c, 5, 9);
  int64_t da[3] = {2, 4, 3};
  const int rank = mode == 2 ? 3 : 2;
  otm_input(m, "A", ONYX_ELEM_FLOAT32, rank, rank == 3 ? da : da + 1);
  /* B as stored: [N, K] for transB 1, else [K, N] (b holds K x N row-major either way below) */
  float bt[15];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 5; j++)
      bt[j * 3 + i] = b[i * 5 + j];
  if (mode == 0)
    otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 2, (int64_t[]){5, 3}, bt);
  else
    otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 5}, b);
  if (mode == 1)
    otm_initializer(m, "C", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 5}, c);
  else
    otm_initializer(m, "C", ONYX_ELEM_FLOAT32, 1, (int64_t[]){5}, c);
  otm_initializer(m, "lo", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){-0.5f});
  otm_initializer(m, "hi", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){0.7f});
  if (mode == 2) {
    otm_node(m, "MatMul", "mm", "A,B", "P0");
    otm_node(m, "Add", "add", "P0,C", "P");
  } else {
    OxTestNode* g = otm_node(m, "Gemm", "gemm", "A,B,C", "P");
    if (mode == 0) otm_attr_int(g, "transB", 1);
    if (mode == 3) otm_attr_float(g, "alpha", 2.0f);
  }
  if (mode == 1)
    otm_node(m, "Clip", "act", "P,lo,hi", "Y");
  else if (mode == 2)
    otm_attr_float(otm_node(m, "LeakyRelu", "act", "P", "Y"), "alpha", 0.2f);
  else
    otm_node(m, "Relu", "act", "P", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, -1, NULL);
  Model md = finish(m);
  const size_t rows = rank == 3 ? 8 : 4;
  float a[24], want[40];
  fill(a, rows * 3, 3);
  const float* in[] = {a};
  OnyxSession* s = compare_levels(&md, in, 1, 1, 1e-5f);
  assert_int_equal(count_op(s, "FusedMatMul"), mode == 3 ? 0 : 1);
  assert_int_equal(s->prog.graph->n_nodes, mode == 3 ? 2 : 1);
  naive_matmul_bias(a, b, c, want, rows, 3, 5);
  for (size_t i = 0; i < rows * 5; i++) {
    if (mode == 3)
      want[i] = 0; /* recomputed below */
    else if (mode == 1)
      want[i] = want[i] < -0.5f ? -0.5f : want[i] > 0.7f ? 0.7f : want[i];
    else if (mode == 2)
      want[i] = want[i] < 0 ? 0.2f * want[i] : want[i];
    else
      want[i] = want[i] < 0 ? 0 : want[i];
  }
  if (mode == 3)
    for (size_t i = 0; i < rows; i++)
      for (size_t j = 0; j < 5; j++) {
        double acc = c[j];
        for (size_t p = 0; p < 3; p++)
          acc += 2.0 * a[i * 3 + p] * b[p * 5 + j];
        want[i * 5 + j] = acc < 0 ? 0.0f : (float)acc;
      }
  int clipped = 0;
  for (size_t i = 0; i < rows * 5; i++)
    clipped += want[i] <= 0.0f || want[i] == 0.7f;
  assert_true(clipped > 0 && clipped < (int)(rows * 5)); /* the activation matters */
  OnyxValue* y = NULL;
  run_f32(s, in, 1, &y, 1);
  expect_close(y, want, rows * 5, 1e-5f);
  onyx_value_release(y);
  onyx_session_release(s);
  free(md.bytes);
}

static void test_matmul_act(void** state) {
  (void)state;
  for (int mode = 0; mode < 4; mode++)
    matmul_act_case(mode);
}

static void test_matmul_add_gemm(void** state) {
  (void)state;
  matmul_add_case(2);
}

static void test_matmul_add_fused(void** state) {
  (void)state;
  matmul_add_case(3);
}

/* FusedMatMul with B a graph input (not packed at creation). */
static void test_matmul_add_fused_b_input(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  float c[4] = {1, -1, 0.5f, 2};
  otm_input(m, "A", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 3, 5});
  otm_input(m, "B", ONYX_ELEM_FLOAT32, 2, (int64_t[]){5, 4});
  otm_initializer(m, "C", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4}, c);
  otm_node(m, "MatMul", "mm", "A,B", "P");
  otm_node(m, "Add", "add", "P,C", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 3, 4});
  Model md = finish(m);
  float a[30], b[20], want[24];
  fill(a, 30, 51);
  fill(b, 20, 52);
  const float* in[] = {a, b};
  OnyxSession* s = compare_levels(&md, in, 2, 1, 1e-5f);
  assert_int_equal(count_op(s, "FusedMatMul"), 1);
  assert_int_equal(s->prog.graph->n_nodes, 1);
  OnyxValue* y = NULL;
  run_f32(s, in, 2, &y, 1);
  naive_matmul_bias(a, b, c, want, 6, 5, 4);
  expect_close(y, want, 24, 1e-5f);
  onyx_value_release(y);
  onyx_session_release(s);
  free(md.bytes);
}

/* A MatMul whose product is also a graph output is left alone. */
static void test_matmul_shared_product(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_input(m, "A", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2});
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2}, (float[]){1, 2, 3, 4});
  otm_initializer(m, "C", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2}, (float[]){1, 1});
  otm_node(m, "MatMul", "mm", "A,B", "P");
  otm_node(m, "Add", "add", "P,C", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2});
  otm_output(m, "P", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2});
  Model md = finish(m);
  float a[4] = {1, 0, 0, 1};
  const float* in[] = {a};
  OnyxSession* s = compare_levels(&md, in, 1, 2, 0);
  assert_int_equal(count_op(s, "MatMul"), 1);
  assert_int_equal(count_op(s, "Gemm"), 0);
  onyx_session_release(s);
  free(md.bytes);
}

/* Conv + BatchNormalization folds into the Conv; Conv + Relu/Clip/LeakyRelu
 * become FusedConv. */
static void conv_case(const char* act, int64_t group, int64_t stride, bool bn) {
  OxTestModel* m = otm_new(13);
  int64_t cin = 4, cout = 6;
  float w[6 * 4 * 9], b[6], sc[6], sh[6], mean[6], var[6];
  fill(w, (size_t)(cout * (cin / group) * 9), 11);
  fill(b, 6, 12);
  fill(sc, 6, 13);
  fill(sh, 6, 14);
  fill(mean, 6, 15);
  fill(var, 6, 16);
  for (int i = 0; i < 6; i++)
    var[i] = fabsf(var[i]) + 0.1f;
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){2, cin, 7, 6});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 4, (int64_t[]){cout, cin / group, 3, 3}, w);
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 1, (int64_t[]){cout}, b);
  OxTestNode* c = otm_node(m, "Conv", "conv", "X,W,B", "C");
  otm_attr_ints(c, "pads", 4, (int64_t[]){1, 0, 1, 1});
  otm_attr_ints(c, "strides", 2, (int64_t[]){stride, stride});
  otm_attr_int(c, "group", group);
  const char* cur = "C";
  if (bn) {
    otm_initializer(m, "sc", ONYX_ELEM_FLOAT32, 1, (int64_t[]){cout}, sc);
    otm_initializer(m, "sh", ONYX_ELEM_FLOAT32, 1, (int64_t[]){cout}, sh);
    otm_initializer(m, "mean", ONYX_ELEM_FLOAT32, 1, (int64_t[]){cout}, mean);
    otm_initializer(m, "var", ONYX_ELEM_FLOAT32, 1, (int64_t[]){cout}, var);
    OxTestNode* n = otm_node(m, "BatchNormalization", "bn", "C,sc,sh,mean,var", "N");
    otm_attr_float(n, "epsilon", 1e-3f);
    cur = "N";
  }
  if (!strcmp(act, "Relu")) {
    otm_node(m, "Relu", "act", cur, "Y");
  } else if (!strcmp(act, "Clip")) {
    otm_initializer(m, "lo", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){-0.5f});
    otm_initializer(m, "hi", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){0.75f});
    char ins[32];
    snprintf(ins, sizeof ins, "%s,lo,hi", cur);
    otm_node(m, "Clip", "act", ins, "Y");
  } else if (!strcmp(act, "LeakyRelu")) {
    otm_attr_float(otm_node(m, "LeakyRelu", "act", cur, "Y"), "alpha", 0.2f);
  } else {
    otm_node(m, "Identity", "act", cur, "Y");
  }
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, -1, NULL);
  Model md = finish(m);
  float x[2 * 4 * 7 * 6];
  fill(x, sizeof x / sizeof *x, 17);
  const float* in[] = {x};
  OnyxSession* s = compare_levels(&md, in, 1, 1, 1e-4f);
  assert_int_equal(count_op(s, "BatchNormalization"), 0);
  bool fused = strcmp(act, "none") != 0;
  assert_int_equal(count_op(s, "FusedConv"), fused ? 1 : 0);
  assert_int_equal(count_op(s, "Conv"), fused ? 0 : 1);
  assert_int_equal(s->prog.graph->n_nodes, 1);
  onyx_session_release(s);
  /* With conv_act turned off the activation stays a node of its own. */
  setenv("ONYX_OPT_DISABLE", "conv_act", 1);
  s = open_at(&md, ONYX_OPT_ALL);
  unsetenv("ONYX_OPT_DISABLE");
  assert_int_equal(count_op(s, "FusedConv"), 0);
  assert_int_equal(count_op(s, "BatchNormalization"), 0);
  assert_int_equal(s->prog.graph->n_nodes, fused ? 2 : 1);
  onyx_session_release(s);
  free(md.bytes);
}

/* FusedConv nodes that carry a Z (residual) input. */
static size_t count_conv_z(const OnyxSession* s) {
  size_t n = 0;
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
    const OxNode* nd = s->prog.graph->nodes[i];
    n += !strcmp(nd->op_type, "FusedConv") && nd->n_inputs > 3 && nd->inputs[3];
  }
  return n;
}

/* Conv + Add(Z) + activation, the ResNet residual, becomes one FusedConv
 * with Z (CPU provider alone). Each case picks a path of the CPU kernel:
 * `k`x`k` windows with stride `st` over a `hw` x `hw` input with `cin` ->
 * `cout` channels; the sum's inputs swapped when `z_first`; `zshape` 1
 * makes Z broadcast ([1, cout, 1, 1]), which must stay unfused; `shared`
 * makes the Conv's output a graph output too (unfused). Outputs are
 * compared with the unoptimized session's (Conv, Add and the activation as
 * nodes of their own). */
static void residual_case(int64_t cin, int64_t cout, int64_t hw, int64_t k, int64_t st,
                          const char* act, bool z_first, bool zshape, bool shared) {
  OxTestModel* m = otm_new(13);
  const int64_t pad = k / 2, oh = (hw + 2 * pad - k) / st + 1;
  const size_t nw = (size_t)(cout * cin * k * k);
  float* w = malloc(nw * sizeof(float));
  float* b = malloc((size_t)cout * sizeof(float));
  fill(w, nw, 21);
  fill(b, (size_t)cout, 22);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, cin, hw, hw});
  if (zshape)
    otm_input(m, "Z", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, cout, 1, 1});
  else
    otm_input(m, "Z", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, cout, oh, oh});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 4, (int64_t[]){cout, cin, k, k}, w);
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 1, (int64_t[]){cout}, b);
  OxTestNode* c = otm_node(m, "Conv", "conv", "X,W,B", "C");
  otm_attr_ints(c, "pads", 4, (int64_t[]){pad, pad, pad, pad});
  otm_attr_ints(c, "strides", 2, (int64_t[]){st, st});
  otm_node(m, "Add", "add", z_first ? "Z,C" : "C,Z", "S");
  if (!strcmp(act, "LeakyRelu"))
    otm_attr_float(otm_node(m, "LeakyRelu", "act", "S", "Y"), "alpha", 0.2f);
  else
    otm_node(m, act, "act", "S", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, -1, NULL);
  if (shared) otm_output(m, "C", ONYX_ELEM_FLOAT32, -1, NULL);
  Model md = finish(m);
  const size_t nx = (size_t)(cin * hw * hw), nz = (size_t)(zshape ? cout : cout * oh * oh);
  float* x = malloc(nx * sizeof(float));
  float* z = malloc(nz * sizeof(float));
  fill(x, nx, 23);
  fill(z, nz, 24);
  const float* in[] = {x, z};
  OnyxSession* s = compare_levels(&md, in, 2, shared ? 2 : 1, 1e-4f);
  const bool fused = !zshape && !shared;
  assert_int_equal(count_conv_z(s), fused ? 1 : 0);
  assert_int_equal(count_op(s, "Add"), fused ? 0 : 1);
  if (fused) assert_int_equal(s->prog.graph->n_nodes, 1);
  onyx_session_release(s);
  free(md.bytes);
  free(w), free(b), free(x), free(z);
}

static void test_conv_residual(void** state) {
  (void)state;
  /* the direct path (AVX-512 machines): 3x3 stride 2, 70 channels */
  residual_case(8, 70, 15, 3, 2, "Relu", false, false, false);
  residual_case(8, 70, 15, 3, 2, "LeakyRelu", true, false, false);
  /* Winograd: 3x3 stride 1, 6x6 tiles of 4x4 */
  residual_case(16, 20, 24, 3, 1, "Relu", false, false, false);
  /* F(2x2) Winograd or direct: a 7x7 output */
  residual_case(32, 64, 7, 3, 1, "Relu", true, false, false);
  /* pointwise: im2col's GEMM with C starting as Z */
  residual_case(16, 24, 9, 1, 1, "Relu", false, false, false);
  /* a 5x5 window on a small output, without the direct path: the
   * transposed GEMM (small outputs) or im2col */
  setenv("ONYX_CPU_CONV_DIRECT", "0", 1);
  residual_case(8, 70, 15, 3, 2, "Relu", false, false, false);
  residual_case(6, 10, 12, 5, 1, "LeakyRelu", false, false, false);
  unsetenv("ONYX_CPU_CONV_DIRECT");
  /* not fused: a broadcasting Z, a Conv output read elsewhere */
  residual_case(8, 16, 9, 3, 1, "Relu", false, true, false);
  residual_case(8, 16, 9, 3, 1, "Relu", false, false, true);
}

static void test_conv_bn(void** state) {
  (void)state;
  conv_case("none", 1, 1, true);
}
static void test_conv_bn_relu(void** state) {
  (void)state;
  conv_case("Relu", 2, 2, true);
}
static void test_conv_clip(void** state) {
  (void)state;
  conv_case("Clip", 1, 1, false);
}
static void test_conv_leaky(void** state) {
  (void)state;
  conv_case("LeakyRelu", 2, 1, false);
}

/* LayerNormalization from ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add. */
static void layernorm_case(int64_t opset) {
  OxTestModel* m = otm_new(opset);
  float g[8], bt[8];
  fill(g, 8, 21);
  fill(bt, 8, 22);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 3, 8});
  otm_initializer(m, "two", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){2});
  otm_initializer(m, "eps", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){1e-5f});
  otm_initializer(m, "g", ONYX_ELEM_FLOAT32, 1, (int64_t[]){8}, g);
  otm_initializer(m, "b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){8}, bt);
  otm_attr_ints(otm_node(m, "ReduceMean", "m1", "X", "mu"), "axes", 1, (int64_t[]){-1});
  otm_node(m, "Sub", "sub", "X,mu", "d");
  otm_node(m, "Pow", "pow", "d,two", "p");
  otm_attr_ints(otm_node(m, "ReduceMean", "m2", "p", "v"), "axes", 1, (int64_t[]){2});
  otm_node(m, "Add", "addeps", "v,eps", "e");
  otm_node(m, "Sqrt", "sqrt", "e", "sd");
  otm_node(m, "Div", "div", "d,sd", "n");
  otm_node(m, "Mul", "mul", "g,n", "sn");
  otm_node(m, "Add", "addb", "sn,b", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 3, 8});
  Model md = finish(m);
  float x[48];
  fill(x, 48, 23);
  const float* in[] = {x};
  OnyxSession* s = compare_levels(&md, in, 1, 1, 1e-4f);
  assert_int_equal(s->prog.graph->n_nodes, 1);
  assert_string_equal(s->prog.graph->nodes[0]->op_type, "LayerNormalization");
  assert_string_equal(s->prog.graph->nodes[0]->domain, opset >= 17 ? "" : "com.onyx");
  /* Independent reference. */
  float want[48];
  for (int r = 0; r < 6; r++) {
    double mu = 0, var = 0;
    for (int i = 0; i < 8; i++)
      mu += x[r * 8 + i];
    mu /= 8;
    for (int i = 0; i < 8; i++)
      var += (x[r * 8 + i] - mu) * (x[r * 8 + i] - mu);
    var /= 8;
    for (int i = 0; i < 8; i++)
      want[r * 8 + i] = (float)((x[r * 8 + i] - mu) / sqrt(var + 1e-5) * g[i] + bt[i]);
  }
  OnyxValue* y = NULL;
  run_f32(s, in, 1, &y, 1);
  expect_close(y, want, 48, 1e-4f);
  onyx_value_release(y);
  onyx_session_release(s);
  free(md.bytes);
}

static void test_layernorm_17(void** state) {
  (void)state;
  layernorm_case(17);
}
static void test_layernorm_13(void** state) {
  (void)state;
  layernorm_case(13);
}

/* Gelu from Erf, in the two orders exporters use. */
static void gelu_case(bool half_first) {
  OxTestModel* m = otm_new(13);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 5});
  otm_initializer(m, "sqrt2", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){1.4142135f});
  otm_initializer(m, "one", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){1});
  otm_initializer(m, "half", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){0.5f});
  otm_node(m, "Div", "div", "X,sqrt2", "d");
  otm_node(m, "Erf", "erf", "d", "e");
  otm_node(m, "Add", "add", "e,one", "a");
  if (half_first) {
    otm_node(m, "Mul", "h", "X,half", "hx");
    otm_node(m, "Mul", "m", "hx,a", "Y");
  } else {
    otm_node(m, "Mul", "m", "X,a", "xa");
    otm_node(m, "Mul", "h", "xa,half", "Y");
  }
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 5});
  Model md = finish(m);
  float x[15];
  fill(x, 15, 31);
  x[0] = -3;
  x[1] = 2.5f;
  const float* in[] = {x};
  OnyxSession* s = compare_levels(&md, in, 1, 1, 1e-5f);
  assert_int_equal(s->prog.graph->n_nodes, 1);
  assert_string_equal(s->prog.graph->nodes[0]->op_type, "Gelu");
  float want[15];
  for (int i = 0; i < 15; i++)
    want[i] = (float)(0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0))));
  OnyxValue* y = NULL;
  run_f32(s, in, 1, &y, 1);
  expect_close(y, want, 15, 1e-5f);
  onyx_value_release(y);
  onyx_session_release(s);
  free(md.bytes);
}

static void test_gelu(void** state) {
  (void)state;
  gelu_case(false);
  gelu_case(true);
}

/* A residual sum after a FusedMatMul joins it as its 4th input Z (the CPU
 * provider alone): Y = A B + Bias + Z. A [2, 5, 6] x B [6, 7] + Bias (a
 * FusedMatMul first); mode 0 Z a graph input (Y cannot take its buffer)
 * and a Relu after the sum (it joins too: Relu(A B + Bias + Z)), mode 1 Z
 * = Relu(Zin), which dies at the sum (Y may take its buffer), first in the
 * Add, as BERT writes x + f(x), mode 2 mode 1 with the Relu after the sum,
 * mode 3 Z of shape [7] (broadcast: the Add and the Relu stay). The
 * reference is computed here. */
static void matmul_residual_case(int mode) {
  OxTestModel* m = otm_new(13);
  float b[42], c[7], a[60], zin[70], want[70];
  fill(b, 42, 51);
  fill(c, 7, 53);
  fill(a, 60, 57);
  fill(zin, 70, 59);
  otm_input(m, "A", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 5, 6});
  if (mode == 3)
    otm_input(m, "Zin", ONYX_ELEM_FLOAT32, 1, (int64_t[]){7});
  else
    otm_input(m, "Zin", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 5, 7});
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 2, (int64_t[]){6, 7}, b);
  otm_initializer(m, "C", ONYX_ELEM_FLOAT32, 1, (int64_t[]){7}, c);
  otm_node(m, "MatMul", "mm", "A,B", "P0");
  otm_node(m, "Add", "bias", "P0,C", "P");
  const bool relu_z = mode == 1 || mode == 2, relu_y = mode != 1;
  if (relu_z) otm_node(m, "Relu", "zr", "Zin", "Z");
  if (mode == 1)
    otm_node(m, "Add", "res", "Z,P", relu_y ? "S" : "Y");
  else
    otm_node(m, "Add", "res", relu_z ? "P,Z" : "P,Zin", relu_y ? "S" : "Y");
  if (relu_y) otm_node(m, "Relu", "act", "S", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, -1, NULL);
  Model md = finish(m);
  naive_matmul_bias(a, b, c, want, 10, 6, 7);
  for (size_t i = 0; i < 70; i++) {
    float zv = mode == 3 ? zin[i % 7] : zin[i];
    if (relu_z) zv = zv < 0 ? 0 : zv;
    const float v = want[i] + zv;
    want[i] = relu_y && v < 0 ? 0 : v;
  }
  const float* in[] = {a, zin};
  OnyxSession* s = compare_levels(&md, in, 2, 1, 1e-5f);
  size_t with_z = 0;
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++)
    with_z += !strcmp(s->prog.graph->nodes[i]->op_type, "FusedMatMul") &&
              s->prog.graph->nodes[i]->n_inputs == 4;
  assert_int_equal(with_z, mode == 3 ? 0 : 1);
  assert_int_equal(count_op(s, "Add"), mode == 3 ? 1 : 0);
  assert_int_equal(count_op(s, "Relu"), mode == 0 ? 0 : 1);
  OnyxValue* y = NULL;
  run_f32(s, in, 2, &y, 1);
  expect_close(y, want, 70, 1e-5f);
  onyx_value_release(y);
  onyx_session_release(s);
  free(md.bytes);
}

static void test_matmul_residual(void** state) {
  (void)state;
  for (int mode = 0; mode < 4; mode++)
    matmul_residual_case(mode);
}

/* Gelu after a matrix product joins it as FusedMatMul's activation "Gelu"
 * (the CPU provider alone): mode 0 Gelu from Erf primitives after MatMul +
 * Add on a 2-D A (a Gemm first), mode 1 the same on a 3-D A (a FusedMatMul
 * first), mode 2 ONNX Gelu-20 after mode 1's product, mode 3 ONNX Gelu-20
 * with approximate "tanh", which stays apart. A is 130 x 70 and B 70 x 200
 * (several GEMM tiles, a partial row panel). The fused product gives the
 * same bits at 2 threads as at 1, and in mode 1 as FusedMatMul then
 * com.onyx Gelu (the same Gelu kernel, run per tile). */
static size_t count_matmul_gelu(const OnyxSession* s) {
  size_t n = 0;
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
    const OxNode* nd = s->prog.graph->nodes[i];
    const char* act = ox_node_attr_string(nd, "activation", "");
    n += !strcmp(nd->op_type, "FusedMatMul") && act && !strcmp(act, "Gelu");
  }
  return n;
}

static void matmul_gelu_case(int mode) {
  enum { M = 130, K = 70, N = 200 };
  OxTestModel* m = otm_new(mode < 2 ? 13 : 20);
  static float b[K * N], c[N], a[M * K], want[M * N];
  fill(b, K * N, 41);
  fill(c, N, 43);
  fill(a, M * K, 47);
  for (size_t i = 0; i < K * N; i++)
    b[i] *= 0.3f;
  if (mode == 0)
    otm_input(m, "A", ONYX_ELEM_FLOAT32, 2, (int64_t[]){M, K});
  else
    otm_input(m, "A", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, M / 2, K});
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 2, (int64_t[]){K, N}, b);
  otm_initializer(m, "C", ONYX_ELEM_FLOAT32, 1, (int64_t[]){N}, c);
  otm_node(m, "MatMul", "mm", "A,B", "P0");
  otm_node(m, "Add", "add", "P0,C", "P");
  if (mode < 2) {
    otm_initializer(m, "sqrt2", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){1.4142135f});
    otm_initializer(m, "one", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){1});
    otm_initializer(m, "half", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){0.5f});
    otm_node(m, "Div", "div", "P,sqrt2", "d");
    otm_node(m, "Erf", "erf", "d", "e");
    otm_node(m, "Add", "add1", "e,one", "e1");
    otm_node(m, "Mul", "mx", "P,e1", "xa");
    otm_node(m, "Mul", "mh", "xa,half", "Y");
  } else {
    OxTestNode* g = otm_node(m, "Gelu", "gelu", "P", "Y");
    if (mode == 3) otm_attr_string(g, "approximate", "tanh");
  }
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, -1, NULL);
  Model md = finish(m);
  naive_matmul_bias(a, b, c, want, M, K, N);
  for (size_t i = 0; i < M * N; i++) {
    const double x = want[i];
    want[i] =
        mode == 3
            ? (float)(0.5 * x *
                      (1.0 + tanh(sqrt(2.0 / 3.141592653589793) * (x + 0.044715 * x * x * x))))
            : (float)(0.5 * x * (1.0 + erf(x / sqrt(2.0))));
  }
  const float* in[] = {a};
  OnyxSession* s = compare_levels(&md, in, 1, 1, 1e-4f);
  assert_int_equal(count_matmul_gelu(s), mode == 3 ? 0 : 1);
  assert_int_equal(s->prog.graph->n_nodes, mode == 3 ? 2 : 1);
  OnyxValue* y = NULL;
  run_f32(s, in, 1, &y, 1);
  expect_close(y, want, M * N, 1e-4f);
  onyx_session_release(s);
  if (mode != 3) {
    /* apart (as close, and in mode 1 the same bits), and at 2 threads */
    setenv("ONYX_OPT_DISABLE", "conv_act", 1);
    OnyxSession* apart = open_with(&md, ONYX_OPT_ALL, 1);
    unsetenv("ONYX_OPT_DISABLE");
    assert_int_equal(count_matmul_gelu(apart), 0);
    assert_int_equal(count_op(apart, "Gelu"), 1);
    OnyxSession* two = open_with(&md, ONYX_OPT_ALL, 2);
    OnyxValue* y2[2] = {0};
    run_f32(apart, in, 1, &y2[0], 1);
    run_f32(two, in, 1, &y2[1], 1);
    const float* d = onyx_tensor_data(onyx_value_tensor(y));
    const float* d_apart = onyx_tensor_data(onyx_value_tensor(y2[0]));
    if (mode == 1) /* FusedMatMul and com.onyx Gelu apart */
      assert_memory_equal(d, d_apart, M * N * sizeof(float));
    else /* Gemm adds C in another order; ONNX Gelu is computed in double */
      expect_close(y2[0], d, M * N, 1e-5f);
    assert_memory_equal(d, onyx_tensor_data(onyx_value_tensor(y2[1])), M * N * sizeof(float));
    onyx_values_release(y2, 2);
    onyx_session_release(apart);
    onyx_session_release(two);
  }
  onyx_value_release(y);
  free(md.bytes);
}

/* A FusedMatMul with an activation its CPU kernel lacks fails session
 * creation with a message naming the node, the activation and the ones it
 * has. */
static void test_matmul_bad_activation(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  float b[6] = {1, 2, 3, 4, 5, 6}, c[3] = {0, 1, 2};
  otm_input(m, "A", ONYX_ELEM_FLOAT32, 2, (int64_t[]){4, 2});
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3}, b);
  otm_initializer(m, "C", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, c);
  otm_add_opset(m, "com.onyx", 1);
  OxTestNode* n = otm_node(m, "FusedMatMul", "fmm_swish", "A,B,C", "Y");
  otm_node_domain(n, "com.onyx");
  otm_attr_string(n, "activation", "Swish");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){4, 3});
  Model md = finish(m);
  OnyxStatus* st = create_fails(&md);
  const char* msg = onyx_status_message(st);
  assert_non_null(strstr(msg, "fmm_swish"));
  assert_non_null(strstr(msg, "'Swish'"));
  assert_non_null(strstr(msg, "Gelu"));
  onyx_status_release(st);
  free(md.bytes);
}

static void test_matmul_gelu(void** state) {
  (void)state;
  for (int mode = 0; mode < 4; mode++)
    matmul_gelu_case(mode);
}

/* Multi-head attention, B = 2, S = T = 5, H = 2 heads of D = 3, from separate q, k, v
 * inputs [B, S, H*D]: mode 0 divides the scores by sqrt(D) and adds a [B, 1, 1, T] mask
 * input; mode 1 multiplies by 0.25 with no mask; mode 2 takes the softmax over axis 2
 * (not the last one), and mode 3 is mode 1 with the scaled scores also a graph output:
 * neither may be fused. The reference is computed here. */
/* The BERT attention subgraph from values q, k, v ([B, S, H*D]) to Y (modes as below). */
static void add_attention_chain(OxTestModel* m, int mode, int64_t B, int64_t S, int64_t H,
                                int64_t D) {
  const int64_t HD = H * D;
  otm_initializer(m, "heads", ONYX_ELEM_INT64, 1, (int64_t[]){4}, (int64_t[]){B, S, H, D});
  otm_initializer(m, "merge", ONYX_ELEM_INT64, 1, (int64_t[]){3}, (int64_t[]){B, S, HD});
  otm_initializer(m, "c", ONYX_ELEM_FLOAT32, 0, NULL,
                  (float[]){mode == 1 || mode == 3 ? 0.25f : sqrtf((float)D)});
  otm_node(m, "Reshape", "rq", "q,heads", "q4");
  otm_node(m, "Reshape", "rk", "k,heads", "k4");
  otm_node(m, "Reshape", "rv", "v,heads", "v4");
  otm_attr_ints(otm_node(m, "Transpose", "tq", "q4", "qt"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  otm_attr_ints(otm_node(m, "Transpose", "tk", "k4", "kt"), "perm", 4, (int64_t[]){0, 2, 3, 1});
  otm_attr_ints(otm_node(m, "Transpose", "tv", "v4", "vt"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  otm_node(m, "MatMul", "qk", "qt,kt", "sc");
  otm_node(m, mode == 1 || mode == 3 ? "Mul" : "Div", "scale", "sc,c", "ss");
  if (mode == 0) otm_node(m, "Add", "addmask", "ss,mask", "sm_in");
  OxTestNode* sm = otm_node(m, "Softmax", "sm", mode == 0 ? "sm_in" : "ss", "p");
  if (mode == 2) otm_attr_int(sm, "axis", 2);
  otm_node(m, "MatMul", "pv", "p,vt", "ctx");
  otm_attr_ints(otm_node(m, "Transpose", "to", "ctx", "ctxt"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  otm_node(m, "Reshape", "ro", "ctxt,merge", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){B, S, HD});
  if (mode == 3) otm_output(m, "ss", ONYX_ELEM_FLOAT32, 4, (int64_t[]){B, H, S, S});
}

static void attention_case(int mode) {
  enum { B = 2, S = 5, H = 2, D = 3, HD = 6 };
  OxTestModel* m = otm_new(13);
  otm_input(m, "q", ONYX_ELEM_FLOAT32, 3, (int64_t[]){B, S, HD});
  otm_input(m, "k", ONYX_ELEM_FLOAT32, 3, (int64_t[]){B, S, HD});
  otm_input(m, "v", ONYX_ELEM_FLOAT32, 3, (int64_t[]){B, S, HD});
  if (mode == 0) otm_input(m, "mask", ONYX_ELEM_FLOAT32, 4, (int64_t[]){B, 1, 1, S});
  add_attention_chain(m, mode, B, S, H, D);
  Model md = finish(m);
  float q[B * S * HD], k[B * S * HD], v[B * S * HD], mask[B * S];
  fill(q, B * S * HD, 3);
  fill(k, B * S * HD, 5);
  fill(v, B * S * HD, 7);
  for (int i = 0; i < B * S; i++)
    mask[i] = i % 4 == 3 ? -10000.0f : 0.0f;
  const float* in[] = {q, k, v, mask};
  OnyxSession* s = compare_levels(&md, in, mode == 0 ? 4 : 3, mode == 3 ? 2 : 1, 1e-5f);
  assert_int_equal(count_op(s, "MultiHeadAttention"), mode >= 2 ? 0 : 1);
  if (mode < 2) {
    assert_int_equal(s->prog.graph->n_nodes, 1);
    /* The reference: per (b, h, s) a softmax over t, in double. */
    float want[B * S * HD];
    const double scale = mode == 1 ? 0.25 : 1.0 / sqrt((double)D);
    for (int b = 0; b < B; b++)
      for (int h = 0; h < H; h++)
        for (int i = 0; i < S; i++) {
          double sc[S], mx = -INFINITY, sum = 0;
          for (int t = 0; t < S; t++) {
            double dot = 0;
            for (int d = 0; d < D; d++)
              dot += (double)q[(b * S + i) * HD + h * D + d] * k[(b * S + t) * HD + h * D + d];
            sc[t] = dot * scale + (mode == 0 ? mask[b * S + t] : 0.0);
            mx = fmax(mx, sc[t]);
          }
          for (int t = 0; t < S; t++)
            sum += sc[t] = exp(sc[t] - mx);
          for (int d = 0; d < D; d++) {
            double acc = 0;
            for (int t = 0; t < S; t++)
              acc += sc[t] / sum * v[(b * S + t) * HD + h * D + d];
            want[(b * S + i) * HD + h * D + d] = (float)acc;
          }
        }
    OnyxValue* y = NULL;
    run_f32(s, in, mode == 0 ? 4 : 3, &y, 1);
    expect_close(y, want, B * S * HD, 1e-5f);
    onyx_value_release(y);
  }
  onyx_session_release(s);
  free(md.bytes);
}

static void test_attention(void** state) {
  (void)state;
  attention_case(0);
  attention_case(1);
  attention_case(2);
  attention_case(3);
}

/* The attention with q, k and v projected from one X by MatMul + bias: the optimizer makes
 * the three projections one FusedMatMul with [Wq | Wk | Wv] and the attention its packed form
 * (case 0; B = 2, S = 7, H = 2 heads of D = 4, with a [B, 1, 1, S] mask). Case 1 projects v
 * from another input and case 2 gives the k projection a second reader (a graph output):
 * neither may be merged. Each is checked against the unoptimized graph. */
static void qkv_case(int mcase) {
  enum { B = 2, S = 7, H = 2, D = 4, HD = 8 };
  OxTestModel* m = otm_new(13);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 3, (int64_t[]){B, S, HD});
  if (mcase == 1) otm_input(m, "x2", ONYX_ELEM_FLOAT32, 3, (int64_t[]){B, S, HD});
  otm_input(m, "mask", ONYX_ELEM_FLOAT32, 4, (int64_t[]){B, 1, 1, S});
  float w[3][HD * HD], b[3][HD];
  static const char* const names[3][5] = {
      {"wq", "bq", "pq", "q", "x"}, {"wk", "bk", "pk", "k", "x"}, {"wv", "bv", "pv_", "v", "x"}};
  for (int i = 0; i < 3; i++) {
    fill(w[i], HD * HD, 23 + (unsigned)i);
    fill(b[i], HD, 29 + (unsigned)i);
    otm_initializer(m, names[i][0], ONYX_ELEM_FLOAT32, 2, (int64_t[]){HD, HD}, w[i]);
    otm_initializer(m, names[i][1], ONYX_ELEM_FLOAT32, 1, (int64_t[]){HD}, b[i]);
    char in[16], add_in[16];
    snprintf(in, sizeof in, "%s,%s", i == 2 && mcase == 1 ? "x2" : names[i][4], names[i][0]);
    snprintf(add_in, sizeof add_in, "%s,%s", names[i][2], names[i][1]);
    otm_node(m, "MatMul", names[i][2], in, names[i][2]);
    otm_node(m, "Add", names[i][3], add_in, names[i][3]);
  }
  if (mcase == 2) otm_output(m, "k", ONYX_ELEM_FLOAT32, 3, (int64_t[]){B, S, HD});
  add_attention_chain(m, 0, B, S, H, D);
  Model md = finish(m);
  float x[B * S * HD], x2[B * S * HD], mask[B * S];
  fill(x, B * S * HD, 31);
  fill(x2, B * S * HD, 37);
  for (int i = 0; i < B * S; i++)
    mask[i] = i % 5 == 4 ? -10000.0f : 0.0f;
  const float* in1[] = {x, x2, mask};
  const float* in0[] = {x, mask};
  OnyxSession* s =
      compare_levels(&md, mcase == 1 ? in1 : in0, mcase == 1 ? 3 : 2, mcase == 2 ? 2 : 1, 1e-5f);
  assert_int_equal(count_op(s, "MultiHeadAttention"), 1);
  assert_int_equal(count_op(s, "FusedMatMul"), mcase == 0 ? 1 : 3);
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
    const OxNode* n = s->prog.graph->nodes[i];
    if (strcmp(n->op_type, "MultiHeadAttention") != 0) continue;
    const bool packed = !n->inputs[1] && !n->inputs[2];
    assert_int_equal(packed, mcase == 0);
    if (packed) {
      const OxNode* f = n->inputs[0]->producer;
      assert_non_null(f);
      assert_string_equal(f->op_type, "FusedMatMul");
      assert_int_equal(f->inputs[1]->dims[1], 3 * HD); /* [Wq | Wk | Wv] */
      assert_int_equal(n->inputs[0]->dims[2], 3 * HD);
    }
  }
  onyx_session_release(s);
  free(md.bytes);
}

static void test_qkv_packed(void** state) {
  (void)state;
  for (int c = 0; c < 3; c++)
    qkv_case(c);
}

/* The CPU provider's com.onyx MultiHeadAttention kernel itself, over the mask shapes it
 * broadcasts, against a softmax in double: B = 2, S = 13 queries, T = 20 keys, H = 2
 * heads of D = 4, scale 0.5 (full 6 x 16 GEMM tiles and partial ones). Case 0: no
 * mask; 1: [B, 1, 1, T] (one row for every query: the scores GEMM's column bias); 2:
 * [1, H, 1, T] (the same per head); 3: [S, T] (a row per query); 4: [B, H, S, 1] (one
 * value per query row, strided). */
static void mha_mask_case(int mcase) {
  enum { B = 2, S = 13, T = 20, H = 2, D = 4, HD = H * D };
  static const int64_t mdims[5][4] = {{0}, {B, 1, 1, T}, {1, H, 1, T}, {S, T}, {B, H, S, 1}};
  static const int mrank[5] = {0, 4, 4, 2, 4};
  OxTestModel* m = otm_new(13);
  otm_add_opset(m, "com.onyx", 1);
  otm_input(m, "q", ONYX_ELEM_FLOAT32, 3, (int64_t[]){B, S, HD});
  otm_input(m, "k", ONYX_ELEM_FLOAT32, 3, (int64_t[]){B, T, HD});
  otm_input(m, "v", ONYX_ELEM_FLOAT32, 3, (int64_t[]){B, T, HD});
  size_t mcount = 1;
  if (mcase) {
    otm_input(m, "mask", ONYX_ELEM_FLOAT32, mrank[mcase], mdims[mcase]);
    for (int i = 0; i < mrank[mcase]; i++)
      mcount *= (size_t)mdims[mcase][i];
  }
  OxTestNode* n = otm_node(m, "MultiHeadAttention", "mha", mcase ? "q,k,v,mask" : "q,k,v", "Y");
  otm_node_domain(n, "com.onyx");
  otm_attr_int(n, "num_heads", H);
  otm_attr_float(n, "scale", 0.5f);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){B, S, HD});
  Model md = finish(m);
  float q[B * S * HD], k[B * T * HD], v[B * T * HD], mask[B * H * S * T];
  fill(q, B * S * HD, 11);
  fill(k, B * T * HD, 13);
  fill(v, B * T * HD, 17);
  fill(mask, mcount, 19);
  for (size_t i = 0; i < mcount; i++)
    mask[i] *= 3.0f;
  /* the mask element for (b, h, s, t) */
  size_t st[4] = {0, 0, 0, 0}, stride = 1;
  for (int i = 3, r = mrank[mcase] - 1; r >= 0; i--, r--) {
    st[i] = mdims[mcase][r] == 1 ? 0 : stride;
    stride *= (size_t)mdims[mcase][r];
  }
  float want[B * S * HD];
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < S; i++) {
        double sc[T], mx = -INFINITY, sum = 0;
        for (int t = 0; t < T; t++) {
          double dot = 0;
          for (int d = 0; d < D; d++)
            dot += (double)q[(b * S + i) * HD + h * D + d] * k[(b * T + t) * HD + h * D + d];
          sc[t] = 0.5 * dot;
          if (mcase) sc[t] += mask[b * st[0] + h * st[1] + i * st[2] + t * st[3]];
          mx = fmax(mx, sc[t]);
        }
        for (int t = 0; t < T; t++)
          sum += sc[t] = exp(sc[t] - mx);
        for (int d = 0; d < D; d++) {
          double acc = 0;
          for (int t = 0; t < T; t++)
            acc += sc[t] / sum * v[(b * T + t) * HD + h * D + d];
          want[(b * S + i) * HD + h * D + d] = (float)acc;
        }
      }
  OnyxSession* s = open_at(&md, ONYX_OPT_ALL);
  const float* in[] = {q, k, v, mask};
  OnyxValue* y = NULL;
  run_f32(s, in, mcase ? 4 : 3, &y, 1);
  expect_close(y, want, B * S * HD, 1e-5f);
  onyx_value_release(y);
  onyx_session_release(s);
  free(md.bytes);
}

/* The packed form's errors at session creation, naming the node: K without V, and a packed
 * last dim that is not 3 x a multiple of num_heads. */
static void mha_bad_case(int with_k, int64_t last, const char* want) {
  OxTestModel* m = otm_new(13);
  otm_add_opset(m, "com.onyx", 1);
  otm_input(m, "q", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 4, last});
  if (with_k) otm_input(m, "k", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 4, last});
  OxTestNode* n = otm_node(m, "MultiHeadAttention", "bad_mha", with_k ? "q,k" : "q", "Y");
  otm_node_domain(n, "com.onyx");
  otm_attr_int(n, "num_heads", 2);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 4, -1});
  Model md = finish(m);
  OnyxStatus* st = create_fails(&md);
  const char* msg = onyx_status_message(st);
  if (!strstr(msg, "bad_mha") || !strstr(msg, want)) fail_msg("unexpected message: %s", msg);
  onyx_status_release(st);
  free(md.bytes);
}

static void test_mha_packed_errors(void** state) {
  (void)state;
  mha_bad_case(1, 12, "K and V must both be given");
  mha_bad_case(0, 10, "3 x a multiple of num_heads");
  mha_bad_case(0, 9, "3 x a multiple of num_heads"); /* 9 / 3 = 3 heads' worth for 2 heads */
}

static void test_mha_masks(void** state) {
  (void)state;
  for (int c = 0; c < 5; c++)
    mha_mask_case(c);
}

/* Levels: "basic" folds but does not fuse; "disabled" changes nothing. */
static void test_levels(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_input(m, "A", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2});
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2}, (float[]){1, 2, 3, 4});
  otm_initializer(m, "C", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2}, (float[]){1, 1});
  otm_node(m, "Identity", "id", "A", "A2");
  otm_node(m, "MatMul", "mm", "A2,B", "P");
  otm_node(m, "Add", "add", "P,C", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2});
  Model md = finish(m);
  OnyxSession* s0 = open_at(&md, ONYX_OPT_DISABLED);
  OnyxSession* s1 = open_at(&md, ONYX_OPT_BASIC);
  OnyxSession* s2 = open_at(&md, ONYX_OPT_EXTENDED);
  assert_int_equal(s0->prog.graph->n_nodes, 3);
  assert_int_equal(s1->prog.graph->n_nodes, 2);
  assert_int_equal(count_op(s1, "MatMul"), 1);
  assert_int_equal(s2->prog.graph->n_nodes, 1);
  assert_int_equal(count_op(s2, "Gemm"), 1);
  onyx_session_release(s0);
  onyx_session_release(s1);
  onyx_session_release(s2);
  free(md.bytes);
}

/* --- user transformers --------------------------------------------------------------------------
 */

/* Removes Neg(Neg(x)) pairs through the public graph API. */
static OnyxStatus* drop_double_neg(OnyxGraph* g, void* user, int* modified) {
  int* calls = user;
  (*calls)++;
  for (size_t i = 0; i < onyx_graph_node_count(g); i++) {
    if (strcmp(onyx_graph_node_op_type(g, i), "Neg")) continue;
    const char* mid = onyx_graph_node_output(g, i, 0);
    for (size_t k = 0; k < onyx_graph_node_count(g); k++) {
      if (strcmp(onyx_graph_node_op_type(g, k), "Neg") ||
          strcmp(onyx_graph_node_input(g, k, 0), mid) || onyx_graph_value_is_output(g, mid) ||
          onyx_graph_value_is_output(g, onyx_graph_node_output(g, k, 0)))
        continue;
      char* src = strdup(onyx_graph_node_input(g, i, 0));
      char* out = strdup(onyx_graph_node_output(g, k, 0));
      OnyxStatus* st = onyx_graph_replace_uses(g, out, src);
      free(src);
      free(out);
      if (st) return st;
      size_t hi = i > k ? i : k, lo = i > k ? k : i;
      if ((st = onyx_graph_remove_node(g, hi)) || (st = onyx_graph_remove_node(g, lo))) return st;
      *modified = 1;
      return NULL;
    }
  }
  return NULL;
}

static OnyxStatus* break_graph(OnyxGraph* g, void* user, int* modified) {
  (void)user;
  *modified = 1;
  return onyx_graph_remove_node(g, 0); /* leaves the graph output without a producer */
}

static void test_user_transformer(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3});
  otm_node(m, "Neg", "n1", "X", "a");
  otm_node(m, "Neg", "n2", "a", "b");
  otm_node(m, "Relu", "r", "b", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3});
  Model md = finish(m);
  int calls = 0;
  assert_null(onyx_register_transformer("double-neg", ONYX_OPT_EXTENDED, drop_double_neg, &calls));
  OnyxStatus* st = onyx_register_transformer("double-neg", ONYX_OPT_BASIC, drop_double_neg, NULL);
  assert_non_null(st);
  onyx_status_release(st);
  float x[3] = {-1, 2, -3};
  const float* in[] = {x};
  OnyxSession* s = compare_levels(&md, in, 1, 1, 0);
  assert_true(calls >= 2); /* once to change, once more to reach the fixed point */
  assert_int_equal(s->prog.graph->n_nodes, 1);
  assert_int_equal(count_op(s, "Neg"), 0);
  onyx_session_release(s);
  /* Below its level it does not run. */
  calls = 0;
  s = open_at(&md, ONYX_OPT_BASIC);
  assert_int_equal(calls, 0);
  assert_int_equal(count_op(s, "Neg"), 2);
  onyx_session_release(s);
  assert_null(onyx_unregister_transformer("double-neg"));
  st = onyx_unregister_transformer("double-neg");
  assert_non_null(st);
  onyx_status_release(st);
  /* A transformer that breaks the graph fails session creation, named. */
  assert_null(onyx_register_transformer("breaker", ONYX_OPT_BASIC, break_graph, NULL));
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  OnyxSession* bad = NULL;
  st = onyx_session_create_from_bytes(o, md.bytes, md.len, NULL, &bad);
  assert_non_null(st);
  assert_null(bad);
  assert_non_null(strstr(onyx_status_message(st), "breaker"));
  onyx_status_release(st);
  onyx_session_options_release(o);
  assert_null(onyx_unregister_transformer("breaker"));
  free(md.bytes);
}

/* --- saving
 * ------------------------------------------------------------------------------------------ */

static void test_save_optimized(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  float b[6] = {1, 2, 3, 4, 5, 6}, c[2] = {0.5f, -0.5f};
  otm_input(m, "A", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 2, 3});
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 2}, b);
  otm_initializer(m, "C", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2}, c);
  otm_initializer(m, "unused", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2}, c);
  otm_node(m, "MatMul", "mm", "A,B", "P");
  otm_node(m, "Add", "add", "P,C", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 2, 2});
  Model md = finish(m);
  OnyxSession* s = open_at(&md, ONYX_OPT_ALL);
  char* dir = otm_temp_dir();
  assert_non_null(dir);
  char path[4096];
  snprintf(path, sizeof path, "%s/opt.onnx", dir);
  assert_null(onyx_session_save_model(s, path));
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  assert_null(onyx_session_options_set_optimization_level(o, ONYX_OPT_DISABLED));
  OnyxSession* again = NULL;
  OnyxStatus* st = onyx_session_create(o, path, &again);
  if (st) fail_msg("%s", onyx_status_message(st));
  assert_int_equal(count_op(again, "FusedMatMul"), 1);
  assert_int_equal(again->prog.graph->n_nodes, 1);
  assert_null(ox_graph_find(again->prog.graph, "unused"));
  float a[12];
  fill(a, 12, 41);
  const float* in[] = {a};
  OnyxValue* y1 = NULL;
  OnyxValue* y2 = NULL;
  run_f32(s, in, 1, &y1, 1);
  run_f32(again, in, 1, &y2, 1);
  float want[8];
  naive_matmul_bias(a, b, c, want, 4, 3, 2);
  expect_close(y1, want, 8, 1e-5f);
  expect_close(y2, want, 8, 1e-5f);
  onyx_value_release(y1);
  onyx_value_release(y2);
  onyx_session_release(again);
  onyx_session_release(s);
  onyx_session_options_release(o);
  otm_remove_dir(dir);
  free(dir);
  free(md.bytes);
}

/* --- memory planner
 * ------------------------------------------------------------------------------- */

/* Hand-computed: A [0,1] 100 B, B [1,2] 200 B, C [2,3] 100 B, in 64-byte
 * units A = 128, B = 256, C = 128. A at 0, B at 128 (A still live), A is
 * free after step 1, so C takes offset 0. Block 384; live peak 384. */
static void test_memplan_assign(void** state) {
  (void)state;
  OxMemRequest r[3] = {
      {100, 0, 1, OX_MEMPLAN_NONE}, {200, 1, 2, OX_MEMPLAN_NONE}, {100, 2, 3, OX_MEMPLAN_NONE}};
  size_t off[3], block, live;
  assert_null(ox_memplan_assign(r, 3, off, &block, &live));
  assert_int_equal(off[0], 0);
  assert_int_equal(off[1], 128);
  assert_int_equal(off[2], 0);
  assert_int_equal(block, 384);
  assert_int_equal(live, 384);
  /* An in-place chain shares one offset: D [0,1], E = D in place [1,2],
   * F = E in place [2,3]; G [1,3] lives beside them. Block 64 + 128. */
  OxMemRequest q[4] = {
      {64, 0, 1, OX_MEMPLAN_NONE}, {64, 1, 2, 0}, {100, 1, 3, OX_MEMPLAN_NONE}, {64, 2, 3, 1}};
  size_t o2[4];
  assert_null(ox_memplan_assign(q, 4, o2, &block, &live));
  assert_int_equal(o2[0], 0);
  assert_int_equal(o2[1], 0);
  assert_int_equal(o2[3], 0);
  assert_int_equal(o2[2], 64);
  assert_int_equal(block, 192);
  assert_int_equal(live, 192);
  /* An alias that does not start where its target ends is a normal value. */
  OxMemRequest bad[2] = {{64, 0, 2, OX_MEMPLAN_NONE}, {64, 1, 3, 0}};
  size_t o3[2];
  assert_null(ox_memplan_assign(bad, 2, o3, &block, &live));
  assert_int_not_equal(o3[0], o3[1]);
  assert_int_equal(block, 128);
}

/* Gelu (com.onyx, ONYX_ALIAS_INPLACE) chain: X -> g1 -> g2 -> g3 -> Y. g1, g2
 * and g3 are intermediates of 1 KiB each; g2 takes g1's buffer in place, g3
 * g2's, so the whole chain needs one 1 KiB block. */
static void test_memplan_session(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_add_opset(m, "com.onyx", 1);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){16, 16});
  const char* names[][2] = {{"X", "g1"}, {"g1", "g2"}, {"g2", "g3"}};
  for (int i = 0; i < 3; i++)
    otm_node_domain(otm_node(m, "Gelu", NULL, names[i][0], names[i][1]), "com.onyx");
  otm_node(m, "Neg", "neg", "g3", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){16, 16});
  Model md = finish(m);
  OnyxSession* s = open_at(&md, ONYX_OPT_DISABLED);
  const OxMemPlan* p = ox_session_memplan(&s->prog);
  assert_non_null(p);
  assert_int_equal(p->n_devices, 1);
  assert_int_equal(p->devices[0].planned, 3);
  assert_int_equal(p->devices[0].inplace, 2);
  assert_int_equal(p->devices[0].block_bytes, 1024);
  assert_int_equal(p->devices[0].no_reuse, 3072);
  char* text = ox_memplan_summary(&s->prog);
  assert_non_null(text);
  assert_non_null(strstr(text, "planned peak on host (cpu): 1.0 KiB"));
  free(text);
  /* A run's block: g1, g2 and g3 land on the same bytes (in place). */
  size_t slot[3];
  const char* want[3] = {"g1", "g2", "g3"};
  for (int i = 0; i < 3; i++) {
    slot[i] = SIZE_MAX;
    for (size_t k = 0; k < s->prog.plan.n_slots; k++)
      if (!strcmp(s->prog.plan.slots[k].value->name, want[i])) slot[i] = k;
    assert_int_not_equal(slot[i], SIZE_MAX);
  }
  OxMemRun run;
  assert_null(ox_memplan_run_begin(&s->prog, &run));
  assert_int_equal(run.n_blocks, 1);
  int64_t dims[2] = {16, 16}, wrong[2] = {16, 8};
  OxTensor* t[3];
  for (int i = 0; i < 3; i++) {
    t[i] = ox_memplan_take(&s->prog, &run, slot[i], ONYX_ELEM_FLOAT32, dims, 2);
    assert_non_null(t[i]);
    assert_ptr_equal(t[i]->data, run.blocks[0]->data);
  }
  assert_null(ox_memplan_take(&s->prog, &run, slot[0], ONYX_ELEM_FLOAT32, wrong, 2));
  assert_null(ox_memplan_take(&s->prog, &run, slot[0], ONYX_ELEM_INT32, dims, 2));
  ((float*)t[0]->data)[255] = 7.0f;
  ox_memplan_run_end(&run); /* the taken tensors keep the block alive */
  assert_true(((float*)t[2]->data)[255] == 7.0f);
  for (int i = 0; i < 3; i++)
    ox_tensor_free(t[i]);
  onyx_session_release(s);
  free(md.bytes);
}

/* An in-process provider with one op, com.test.View: Y is a view of X
 * (ONYX_ALIAS_VIEW). The planner must keep X's bytes alive as long as Y is
 * read. */
static const OnyxHostApi* view_host;
static const int32_t view_f32[] = {ONYX_ELEM_FLOAT32};
static const OnyxTypeConstraint view_T[] = {{"T", view_f32, 1}};
static const OnyxAlias view_alias[] = {{0, 0, ONYX_ALIAS_VIEW}};

static OnyxStatus* view_infer(OnyxInferenceContext* ctx, void* user) {
  (void)user;
  const OnyxValueInfo* x = view_host->infer_input(ctx, 0);
  return view_host->infer_set_output(ctx, 0, view_host->value_elem_type(x),
                                     view_host->value_rank(x), view_host->value_dims(x));
}

static OnyxStatus* view_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxTensor* x = view_host->ctx_input(ctx, 0);
  OnyxTensor* y;
  return view_host->ctx_output_view(ctx, 0, 0, view_host->tensor_dims(x), view_host->tensor_rank(x),
                                    &y);
}

static OnyxStatus* view_schemas(const OnyxProvider* p, OnyxSchemaRegistry* r) {
  (void)p;
  static const OnyxFormalParam in[] = {{"X", "T", ONYX_PARAM_SINGLE}};
  static const OnyxFormalParam out[] = {{"Y", "T", ONYX_PARAM_SINGLE}};
  OnyxSchemaDef d = {.struct_size = sizeof d,
                     .domain = "com.test",
                     .op_type = "View",
                     .since_version = 1,
                     .inputs = in,
                     .input_count = 1,
                     .outputs = out,
                     .output_count = 1,
                     .type_constraints = view_T,
                     .type_constraint_count = 1,
                     .infer = view_infer};
  return view_host->register_schema(r, &d);
}

static OnyxStatus* view_kernels(const OnyxProvider* p, OnyxKernelRegistry* r) {
  (void)p;
  OnyxKernelDef d = {.struct_size = sizeof d,
                     .domain = "com.test",
                     .op_type = "View",
                     .since_version = 1,
                     .end_version = ONYX_OPSET_LATEST,
                     .type_constraints = view_T,
                     .type_constraint_count = 1,
                     .aliases = view_alias,
                     .alias_count = 1,
                     .compute = view_compute};
  return view_host->register_kernel(r, &d);
}

static OnyxStatus* view_count(const OnyxProvider* p, size_t* n) {
  (void)p;
  *n = 1;
  return NULL;
}
static void view_ep_release(OnyxEp* ep) {
  (void)ep;
}
static OnyxStatus* view_create(const OnyxProvider* p, const OnyxEpCreateArgs* a, OnyxEp** out) {
  (void)a;
  static OnyxEp ep = {.struct_size = sizeof ep, .release = view_ep_release};
  ep.provider = p;
  *out = &ep;
  return NULL;
}
static const OnyxProvider view_provider = {.struct_size = sizeof view_provider,
                                           .abi_major = ONYX_ABI_VERSION_MAJOR,
                                           .abi_minor = ONYX_ABI_VERSION_MINOR,
                                           .name = "viewprov",
                                           .vendor = "test",
                                           .version = "1",
                                           .device_count = view_count,
                                           .register_kernels = view_kernels,
                                           .register_schemas = view_schemas,
                                           .create_ep = view_create};
static OnyxStatus* view_init(const OnyxHostApi* host, const OnyxProvider** out) {
  view_host = host;
  *out = &view_provider;
  return NULL;
}

/* g1 = Gelu(X) (step 0); v = View(g1) (1); a = Gelu(X) (2); Y = Add(v, a) (3).
 * v reads g1's bytes at step 3, so g1 lives to step 3 and a gets other bytes. */
static void test_memplan_view(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_add_opset(m, "com.onyx", 1);
  otm_add_opset(m, "com.test", 1);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, (int64_t[]){64});
  otm_node_domain(otm_node(m, "Gelu", "g1", "X", "g1"), "com.onyx");
  otm_node_domain(otm_node(m, "View", "view", "g1", "v"), "com.test");
  otm_node_domain(otm_node(m, "Gelu", "g2", "X", "a"), "com.onyx");
  otm_node(m, "Add", "add", "v,a", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){64});
  Model md = finish(m);
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  assert_null(onyx_session_options_set_optimization_level(o, ONYX_OPT_DISABLED));
  assert_null(onyx_session_options_add_provider_init(o, "viewprov", view_init, 1));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, md.bytes, md.len, NULL, &s);
  if (st) fail_msg("%s", onyx_status_message(st));
  const OxMemPlan* p = ox_session_memplan(&s->prog);
  size_t g1 = SIZE_MAX, v = SIZE_MAX, a = SIZE_MAX;
  for (size_t k = 0; k < s->prog.plan.n_slots; k++) {
    const char* name = s->prog.plan.slots[k].value->name;
    if (!strcmp(name, "g1")) g1 = k;
    if (!strcmp(name, "v")) v = k;
    if (!strcmp(name, "a")) a = k;
  }
  assert_true(g1 != SIZE_MAX && v != SIZE_MAX && a != SIZE_MAX);
  assert_int_equal(p->offset[v], OX_MEMPLAN_NONE); /* a view owns no bytes */
  assert_int_not_equal(p->offset[g1], OX_MEMPLAN_NONE);
  assert_int_not_equal(p->offset[a], OX_MEMPLAN_NONE);
  assert_int_equal(p->last[g1], p->last[v]);
  assert_true(p->offset[g1] != p->offset[a] || p->device[g1] != p->device[a]);
  /* And the run agrees with a reference. */
  float x[64], want[64];
  fill(x, 64, 61);
  for (int i = 0; i < 64; i++)
    want[i] = (float)(x[i] * (1.0 + erf(x[i] / sqrt(2.0))));
  const float* in[] = {x};
  OnyxValue* y = NULL;
  run_f32(s, in, 1, &y, 1);
  expect_close(y, want, 64, 1e-5f);
  onyx_value_release(y);
  onyx_session_release(s);
  onyx_session_options_release(o);
  free(md.bytes);
}

/* --- fusions keep a node on the provider that would run it --------------------------------
 * "ownprov": an in-process provider with kernels for the heavy standard ops
 * of the fusions (never run: the tests only look at the optimized graph),
 * standing for a GPU provider without com.onyx kernels. With own_fused it
 * also registers com.onyx FusedConv. */
static bool own_fused; /* the host table is view_host (view_init and own_init set it) */

static OnyxStatus* own_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  (void)ctx;
  return view_host->status_create(ONYX_NOT_IMPLEMENTED, "ownprov: not run in these tests");
}

static OnyxStatus* own_kernels(const OnyxProvider* p, OnyxKernelRegistry* r) {
  (void)p;
  static const char* const ops[] = {"Conv",       "MatMul",    "Gemm", "Erf",
                                    "ReduceMean", "FusedConv", "Relu"};
  for (size_t i = 0; i < OX_ARRAY_LEN(ops); i++) {
    const bool contrib = !strcmp(ops[i], "FusedConv");
    if ((contrib || !strcmp(ops[i], "Relu")) && !own_fused) continue;
    OnyxKernelDef d = {.struct_size = sizeof d,
                       .domain = contrib ? "com.onyx" : "",
                       .op_type = ops[i],
                       .since_version = 1,
                       .end_version = ONYX_OPSET_LATEST,
                       .type_constraints = view_T,
                       .type_constraint_count = 1,
                       .compute = own_compute};
    OnyxStatus* st = view_host->register_kernel(r, &d);
    if (st) return st;
  }
  return NULL;
}

static const OnyxProvider own_provider = {.struct_size = sizeof own_provider,
                                          .abi_major = ONYX_ABI_VERSION_MAJOR,
                                          .abi_minor = ONYX_ABI_VERSION_MINOR,
                                          .name = "ownprov",
                                          .vendor = "test",
                                          .version = "1",
                                          .device_count = view_count,
                                          .register_kernels = own_kernels,
                                          .create_ep = view_create};
static OnyxStatus* own_init(const OnyxHostApi* host, const OnyxProvider** out) {
  view_host = host;
  *out = &own_provider;
  return NULL;
}

/* Five chains that the optimizer fuses for the CPU provider: Conv + Relu
 * (FusedConv), a rank-3 MatMul + row bias (FusedMatMul), Gemm + Relu
 * (FusedMatMul with an activation), the Erf form of Gelu (com.onyx Gelu) and
 * the primitive LayerNormalization (ONNX LayerNormalization-17). */
static Model fusable_model(void) {
  OxTestModel* m = otm_new(17);
  float w[2 * 3 * 3 * 3], wm[4 * 4], wg[4 * 4], bias[4], g[4], bt[4];
  fill(w, OX_ARRAY_LEN(w), 71);
  fill(wm, 16, 72);
  fill(wg, 16, 73);
  fill(bias, 4, 74);
  fill(g, 4, 75);
  fill(bt, 4, 76);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 3, 5, 5});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 4, (int64_t[]){2, 3, 3, 3}, w);
  otm_node(m, "Conv", "conv", "X,W", "c");
  otm_node(m, "Relu", "crelu", "c", "Yc");
  otm_output(m, "Yc", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 2, 3, 3});
  otm_input(m, "A", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 3, 4});
  otm_initializer(m, "Wm", ONYX_ELEM_FLOAT32, 2, (int64_t[]){4, 4}, wm);
  otm_initializer(m, "bias", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4}, bias);
  otm_node(m, "MatMul", "mm", "A,Wm", "p");
  otm_node(m, "Add", "mmadd", "p,bias", "Ym");
  otm_output(m, "Ym", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 3, 4});
  otm_input(m, "G", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 4});
  otm_initializer(m, "Wg", ONYX_ELEM_FLOAT32, 2, (int64_t[]){4, 4}, wg);
  otm_node(m, "Gemm", "gemm", "G,Wg,bias", "q");
  otm_node(m, "Relu", "grelu", "q", "Yg");
  otm_output(m, "Yg", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 4});
  otm_initializer(m, "sqrt2", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){1.4142135f});
  otm_initializer(m, "one", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){1});
  otm_initializer(m, "half", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){0.5f});
  otm_node(m, "Div", "div", "G,sqrt2", "d");
  otm_node(m, "Erf", "erf", "d", "e");
  otm_node(m, "Add", "add1", "e,one", "e1");
  otm_node(m, "Mul", "mx", "G,e1", "xe");
  otm_node(m, "Mul", "mh", "xe,half", "Ye");
  otm_output(m, "Ye", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 4});
  otm_initializer(m, "two", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){2});
  otm_initializer(m, "eps", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){1e-5f});
  otm_initializer(m, "g", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4}, g);
  otm_initializer(m, "bt", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4}, bt);
  otm_input(m, "L", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 4});
  otm_attr_ints(otm_node(m, "ReduceMean", "m1", "L", "mu"), "axes", 1, (int64_t[]){-1});
  otm_node(m, "Sub", "sub", "L,mu", "dl");
  otm_node(m, "Pow", "pow", "dl,two", "sq");
  otm_attr_ints(otm_node(m, "ReduceMean", "m2", "sq", "var"), "axes", 1, (int64_t[]){-1});
  otm_node(m, "Add", "addeps", "var,eps", "ve");
  otm_node(m, "Sqrt", "sqrt", "ve", "sd");
  otm_node(m, "Div", "ldiv", "dl,sd", "n");
  otm_node(m, "Mul", "lmul", "n,g", "sn");
  otm_node(m, "Add", "ladd", "sn,bt", "Yl");
  otm_output(m, "Yl", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 4});
  return finish(m);
}

static OnyxSession* open_providers(const Model* md, bool own_first) {
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  if (!own_first) assert_null(onyx_session_options_add_provider(o, "cpu", NULL, 0, 1));
  assert_null(onyx_session_options_add_provider_init(o, "ownprov", own_init, 1));
  if (own_first) assert_null(onyx_session_options_add_provider(o, "cpu", NULL, 0, 1));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, md->bytes, md->len, NULL, &s);
  if (st) fail_msg("%s", onyx_status_message(st));
  onyx_session_options_release(o);
  return s;
}

static void test_fusions_keep_provider(void** state) {
  (void)state;
  Model md = fusable_model();
  /* The CPU first: it has every com.onyx kernel, so all five chains fuse. */
  own_fused = false;
  OnyxSession* s = open_providers(&md, false);
  assert_int_equal(count_op(s, "FusedConv"), 1);
  assert_int_equal(count_op(s, "FusedMatMul"), 2);
  assert_int_equal(count_op(s, "Gelu"), 1);
  assert_int_equal(count_op(s, "LayerNormalization"), 1);
  assert_int_equal(count_op(s, "Conv") + count_op(s, "MatMul") + count_op(s, "Erf"), 0);
  onyx_session_release(s);
  /* ownprov first: it would run the Conv, MatMul, Gemm, Erf and ReduceMean
   * and has none of the fused ops, so nothing fuses away from it. */
  s = open_providers(&md, true);
  assert_int_equal(count_op(s, "FusedConv") + count_op(s, "FusedMatMul") + count_op(s, "Gelu") +
                       count_op(s, "LayerNormalization"),
                   0);
  assert_int_equal(count_op(s, "Conv"), 1);
  assert_int_equal(count_op(s, "MatMul"), 1);
  assert_int_equal(count_op(s, "Gemm"), 1);
  assert_int_equal(count_op(s, "Erf"), 1);
  assert_int_equal(count_op(s, "ReduceMean"), 2);
  onyx_session_release(s);
  /* With a FusedConv kernel of its own, and the Relu too (a fusion stays
   * inside one provider's nodes), ownprov's Conv + Relu fuse. */
  own_fused = true;
  s = open_providers(&md, true);
  assert_int_equal(count_op(s, "FusedConv"), 1);
  assert_int_equal(count_op(s, "Conv") + count_op(s, "FusedMatMul") + count_op(s, "Gelu"), 0);
  onyx_session_release(s);
  own_fused = false;
  free(md.bytes);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_eliminate_and_cse),
      cmocka_unit_test(test_identity_to_output),
      cmocka_unit_test(test_fold_and_shapes),
      cmocka_unit_test(test_matmul_add_gemm),
      cmocka_unit_test(test_matmul_add_fused),
      cmocka_unit_test(test_matmul_add_fused_b_input),
      cmocka_unit_test(test_matmul_shared_product),
      cmocka_unit_test(test_conv_bn),
      cmocka_unit_test(test_conv_bn_relu),
      cmocka_unit_test(test_conv_residual),
      cmocka_unit_test(test_conv_clip),
      cmocka_unit_test(test_conv_leaky),
      cmocka_unit_test(test_layernorm_17),
      cmocka_unit_test(test_layernorm_13),
      cmocka_unit_test(test_gelu),
      cmocka_unit_test(test_attention),
      cmocka_unit_test(test_mha_masks),
      cmocka_unit_test(test_qkv_packed),
      cmocka_unit_test(test_mha_packed_errors),
      cmocka_unit_test(test_matmul_act),
      cmocka_unit_test(test_matmul_gelu),
      cmocka_unit_test(test_matmul_bad_activation),
      cmocka_unit_test(test_matmul_residual),
      cmocka_unit_test(test_levels),
      cmocka_unit_test(test_user_transformer),
      cmocka_unit_test(test_save_optimized),
      cmocka_unit_test(test_memplan_assign),
      cmocka_unit_test(test_memplan_session),
      cmocka_unit_test(test_memplan_view),
      cmocka_unit_test(test_fusions_keep_provider),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
