/* test_gradient_rules.c — every gradient rule of host/training against
 * central finite differences.
 *
 * Each case builds a tiny model: its differentiable inputs (random values),
 * the forward op(s) writing "Y", and the scalar loss L = sum(Y * R) with R a
 * fixed random tensor of Y's shape; a Gradient node asks dL/dx for every
 * input. The session's gradients are compared with (L(x + h) - L(x - h)) /
 * 2h, element by element, in float64 (h = 1e-6, tolerance 1e-5 relative to
 * max(1, |fd|)) unless the case says float32 (h = 1e-3, tolerance 2e-2).
 * Further tests: the stop-gradient on integer paths, the error for an op
 * without a rule (op, node and path), and broadcasting with shapes known
 * only at run time. Cases marked `contract` use the com.onyx.training
 * gradient kernels of the CPU provider. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onyx/onyx.h"
#include "ox_test_models.h"
#include "ox_training.h"

static const char* current_case = "";

static void ok(OnyxStatus* st) {
  if (st) fail_msg("%s: unexpected error: %s", current_case, onyx_status_message(st));
}

/* --- random values (a fixed LCG: the same cases every run) ------------------------- */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double urand(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng_state >> 11) / 9007199254740992.0;
}

enum { K_ANY = 0, K_POS = 1, K_AWAY = 2, K_LOW = 3, K_HIGH = 4, K_WIDE = 5, K_GT1 = 6 };

static double draw(int kind) {
  double u = urand();
  if (kind == K_POS) return 0.5 + 1.5 * u;
  if (kind == K_LOW) return -0.2 - 0.6 * u;
  if (kind == K_WIDE) return 10 * u - 5;
  if (kind == K_GT1) return 1.2 + 2 * u;
  if (kind == K_HIGH) return 0.2 + 0.6 * u;
  if (kind == K_AWAY) return (urand() < 0.5 ? -1 : 1) * (0.2 + 0.8 * u);
  return 2 * u - 1;
}

static size_t count_of(int rank, const int64_t* dims) {
  size_t c = 1;
  for (int i = 0; i < rank; i++)
    c *= (size_t)dims[i];
  return c;
}

/* n doubles stored as T (float32 or float64); malloc'd. */
static void* pack(OnyxElemType T, const double* v, size_t n) {
  void* p = malloc((n ? n : 1) * (T == ONYX_ELEM_FLOAT32 ? 4 : 8));
  for (size_t i = 0; i < n; i++)
    if (T == ONYX_ELEM_FLOAT32)
      ((float*)p)[i] = (float)v[i];
    else
      ((double*)p)[i] = v[i];
  return p;
}

/* A random initializer of element type T. */
static void init_rand(OxTestModel* m, const char* name, OnyxElemType T, int rank,
                      const int64_t* dims, int kind) {
  size_t n = count_of(rank, dims);
  double* v = malloc((n ? n : 1) * sizeof *v);
  for (size_t i = 0; i < n; i++)
    v[i] = draw(kind);
  void* p = pack(T, v, n);
  otm_initializer(m, name, T, rank, dims, p);
  free(p);
  free(v);
}

static void init_i64(OxTestModel* m, const char* name, int rank, const int64_t* dims,
                     const int64_t* v) {
  otm_initializer(m, name, ONYX_ELEM_INT64, rank, dims, v);
}

static void init_f(OxTestModel* m, const char* name, OnyxElemType T, int rank, const int64_t* dims,
                   const double* v) {
  void* p = pack(T, v, count_of(rank, dims));
  otm_initializer(m, name, T, rank, dims, p);
  free(p);
}

/* --- cases ------------------------------------------------------------------------- */
typedef struct CaseIn {
  const char* name;
  int rank;
  int64_t dims[5];
  int kind;
} CaseIn;

typedef struct Case {
  const char* name;
  int opset;
  void (*build)(OxTestModel* m, OnyxElemType T);
  int y_rank;
  int64_t y_dims[5];
  CaseIn in[4];
  bool f32;      /* the op has no float64 kernel: float32, looser check */
  bool contract; /* uses the com.onyx.training gradient kernels */
  double h;      /* the step (0: the default of the type) */
} Case;

static double L_of(OnyxSession* s, const Case* c, OnyxElemType T, double** x, size_t n_in) {
  OnyxValue* in[4] = {0};
  const char* names[4] = {0};
  for (size_t i = 0; i < n_in; i++) {
    const CaseIn* ci = &c->in[i];
    size_t n = count_of(ci->rank, ci->dims);
    void* p = pack(T, x[i], n);
    ok(onyx_value_create_tensor(T, ci->dims, (size_t)ci->rank, p, n * onyx_elem_type_size(T),
                                &in[i]));
    free(p);
    names[i] = ci->name;
  }
  const char* outs[1] = {"L"};
  OnyxValue* got[1] = {0};
  ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, n_in, outs, 1, got));
  const void* d = onyx_tensor_data(onyx_value_tensor(got[0]));
  double L = T == ONYX_ELEM_FLOAT32 ? *(const float*)d : *(const double*)d;
  onyx_values_release(got, 1);
  onyx_values_release(in, n_in);
  return L;
}

static OnyxSession* open_bytes(OxTestModel* m) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s);
  free(bytes);
  ok(st);
  return s;
}

/* dynamic: the inputs' dims are symbolic (only ranks are known before
 * run time), so every shape-dependent rule takes its run-time path. */
static void check_case(const Case* c, bool dynamic) {
  OnyxElemType T = c->f32 ? ONYX_ELEM_FLOAT32 : ONYX_ELEM_FLOAT64;
  /* Each case draws from its own seed (the case's name), so that adding a
   * case changes no other case's values. */
  rng_state = 0x9e3779b97f4a7c15ull;
  for (const char* p = c->name; *p; p++)
    rng_state = (rng_state ^ (uint8_t)*p) * 1099511628211ull;
  static char label[96];
  snprintf(label, sizeof label, "%s%s", c->name, dynamic ? " (symbolic dims)" : "");
  current_case = label;
  OxTestModel* m = otm_new(c->opset);
  otm_add_opset(m, "ai.onnx.preview.training", 1);
  size_t n_in = 0;
  while (n_in < 4 && c->in[n_in].name)
    n_in++;
  const int64_t sym[5] = {-1, -1, -1, -1, -1};
  for (size_t i = 0; i < n_in; i++)
    otm_input(m, c->in[i].name, T, c->in[i].rank, dynamic ? sym : c->in[i].dims);
  c->build(m, T);
  init_rand(m, "R", T, c->y_rank, c->y_dims, K_ANY);
  otm_node(m, "Mul", "loss_mul", "Y,R", "YR");
  OxTestNode* red = otm_node(m, "ReduceSum", "loss_sum", "YR", "L");
  otm_attr_int(red, "keepdims", 0);
  char outs[256] = "", xs_buf[4][32];
  const char* xs[4];
  for (size_t i = 0; i < n_in; i++) {
    snprintf(xs_buf[i], sizeof xs_buf[i], "d_%s", c->in[i].name);
    xs[i] = c->in[i].name;
    strcat(outs, i ? "," : "");
    strcat(outs, xs_buf[i]);
  }
  OxTestNode* g = otm_node(m, "Gradient", "grad", "", outs);
  otm_node_domain(g, "ai.onnx.preview.training");
  otm_attr_strings(g, "xs", n_in, xs);
  otm_attr_string(g, "y", "L");
  otm_output(m, "L", T, 0, NULL);
  for (size_t i = 0; i < n_in; i++)
    otm_output(m, xs_buf[i], T, c->in[i].rank, dynamic ? sym : c->in[i].dims);
  OnyxSession* s = open_bytes(m);

  double* x[4] = {0};
  for (size_t i = 0; i < n_in; i++) {
    size_t n = count_of(c->in[i].rank, c->in[i].dims);
    x[i] = malloc((n ? n : 1) * sizeof(double));
    for (size_t k = 0; k < n; k++) {
      x[i][k] = draw(c->in[i].kind);
      if (T == ONYX_ELEM_FLOAT32) x[i][k] = (float)x[i][k];
    }
  }
  /* The session's gradients. */
  OnyxValue* in[4] = {0};
  for (size_t i = 0; i < n_in; i++) {
    size_t n = count_of(c->in[i].rank, c->in[i].dims);
    void* p = pack(T, x[i], n);
    ok(onyx_value_create_tensor(T, c->in[i].dims, (size_t)c->in[i].rank, p,
                                n * onyx_elem_type_size(T), &in[i]));
    free(p);
  }
  const char* gnames[4];
  for (size_t i = 0; i < n_in; i++)
    gnames[i] = xs_buf[i];
  OnyxValue* got[4] = {0};
  ok(onyx_session_run(s, NULL, xs, (const OnyxValue* const*)in, n_in, gnames, n_in, got));
  double h = c->h ? c->h : T == ONYX_ELEM_FLOAT32 ? 1e-3 : 1e-6;
  double tol = T == ONYX_ELEM_FLOAT32 ? 2e-2 : 1e-5;
  for (size_t i = 0; i < n_in; i++) {
    const OnyxTensor* t = onyx_value_tensor(got[i]);
    assert_non_null(t);
    assert_int_equal(onyx_tensor_elem_type(t), T);
    size_t n = count_of(c->in[i].rank, c->in[i].dims);
    const void* d = onyx_tensor_data(t);
    for (size_t k = 0; k < n; k++) {
      double keep = x[i][k];
      x[i][k] = keep + h;
      double lp = L_of(s, c, T, x, n_in);
      x[i][k] = keep - h;
      double lm = L_of(s, c, T, x, n_in);
      x[i][k] = keep;
      double fd = (lp - lm) / (2 * h);
      double an = T == ONYX_ELEM_FLOAT32 ? ((const float*)d)[k] : ((const double*)d)[k];
      if (!(fabs(an - fd) <= tol * fmax(1.0, fabs(fd))))
        fail_msg("%s: d%s[%zu] = %.9g, finite difference %.9g", label, c->in[i].name, k, an, fd);
    }
  }
  onyx_values_release(got, n_in);
  onyx_values_release(in, n_in);
  for (size_t i = 0; i < n_in; i++)
    free(x[i]);
  onyx_session_release(s);
}

/* --- forward builders -------------------------------------------------------------- */
#define UNARY(fn, op)                                                                              \
  static void fn(OxTestModel* m, OnyxElemType T) {                                                 \
    (void)T;                                                                                       \
    otm_node(m, op, "n", "A", "Y");                                                                \
  }
#define BINARY(fn, op)                                                                             \
  static void fn(OxTestModel* m, OnyxElemType T) {                                                 \
    (void)T;                                                                                       \
    otm_node(m, op, "n", "A,B", "Y");                                                              \
  }
UNARY(b_neg, "Neg")
UNARY(b_identity, "Identity")
UNARY(b_exp, "Exp")
UNARY(b_log, "Log")
UNARY(b_sqrt, "Sqrt")
UNARY(b_erf, "Erf")
UNARY(b_abs, "Abs")
UNARY(b_reciprocal, "Reciprocal")
UNARY(b_relu, "Relu")
UNARY(b_sigmoid, "Sigmoid")
UNARY(b_tanh, "Tanh")
UNARY(b_global_avg, "GlobalAveragePool")
BINARY(b_add, "Add")
BINARY(b_sub, "Sub")
BINARY(b_mul, "Mul")
BINARY(b_div, "Div")
BINARY(b_pow, "Pow")
BINARY(b_matmul, "MatMul")

static void b_max3(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_node(m, "Max", "n", "A,B,C", "Y");
}
static void b_min3(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_node(m, "Min", "n", "A,B,C", "Y");
}
static void b_sum3(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_node(m, "Sum", "n", "A,B,C", "Y");
}
static void b_mean3(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_node(m, "Mean", "n", "A,B,C", "Y");
}

/* Fan-out: A feeds three nodes, whose gradients must add up. */
static void b_fanout(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_node(m, "Mul", "sq", "A,A", "A2");
  otm_node(m, "Exp", "e", "A", "E");
  otm_node(m, "Add", "y", "A2,E", "Y");
}

/* The integer path stops the gradient: Y = A * float(int(A)); int(A) is a
 * step function, so the finite difference sees the same constant factor. */
static void b_int_path(OxTestModel* m, OnyxElemType T) {
  OxTestNode* n = otm_node(m, "Mul", "scale", "A,S", "AS");
  (void)n;
  const double s = 3.0;
  init_f(m, "S", T, 0, NULL, &s);
  otm_attr_int(otm_node(m, "Cast", "to_int", "AS", "AI"), "to", ONYX_ELEM_INT64);
  otm_attr_int(otm_node(m, "Cast", "to_float", "AI", "AF"), "to", T);
  otm_node(m, "Mul", "y", "A,AF", "Y");
}

static void b_clip(OxTestModel* m, OnyxElemType T) {
  const double lo = -0.5, hi = 0.6;
  init_f(m, "lo", T, 0, NULL, &lo);
  init_f(m, "hi", T, 0, NULL, &hi);
  otm_node(m, "Clip", "n", "A,lo,hi", "Y");
}

static void b_clip_bounds(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_node(m, "Clip", "n", "A,B,C", "Y");
}

static void b_where(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const uint8_t c[6] = {1, 0, 0, 1, 1, 0};
  otm_initializer(m, "cond", ONYX_ELEM_BOOL, 2, (int64_t[]){2, 3}, c);
  otm_node(m, "Where", "n", "cond,A,B", "Y");
}

/* Cast to float32 and CastLike back to the input's type. */
static void b_cast(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_attr_int(otm_node(m, "Cast", "c1", "A", "A32"), "to", ONYX_ELEM_FLOAT32);
  otm_node(m, "CastLike", "c2", "A32,A", "Y");
}

static void b_cumsum(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t ax = 1;
  init_i64(m, "axis", 0, NULL, &ax);
  OxTestNode* n = otm_node(m, "CumSum", "n", "A,axis", "Y");
  otm_attr_int(n, "reverse", 1);
  otm_attr_int(n, "exclusive", 1);
}

static void b_gemm_t(OxTestModel* m, OnyxElemType T) {
  (void)T;
  OxTestNode* n = otm_node(m, "Gemm", "n", "A,B,C", "Y");
  otm_attr_int(n, "transA", 1);
  otm_attr_int(n, "transB", 1);
  otm_attr_float(n, "alpha", 0.75f);
  otm_attr_float(n, "beta", 1.5f);
}

static void b_gemm(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_node(m, "Gemm", "n", "A,B,C", "Y");
}

static void b_reduce_sum_in(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t ax[2] = {0, -1};
  init_i64(m, "axes", 1, (int64_t[]){2}, ax);
  otm_attr_int(otm_node(m, "ReduceSum", "n", "A,axes", "Y"), "keepdims", 0);
}

#define REDUCE_ATTR(fn, op, keep)                                                                  \
  static void fn(OxTestModel* m, OnyxElemType T) {                                                 \
    (void)T;                                                                                       \
    OxTestNode* n = otm_node(m, op, "n", "A", "Y");                                                \
    otm_attr_ints(n, "axes", 1, (const int64_t[]){1});                                             \
    otm_attr_int(n, "keepdims", keep);                                                             \
  }
REDUCE_ATTR(b_reduce_mean, "ReduceMean", 0)
REDUCE_ATTR(b_reduce_max, "ReduceMax", 1)
REDUCE_ATTR(b_reduce_min, "ReduceMin", 0)
REDUCE_ATTR(b_reduce_l2, "ReduceL2", 0)
REDUCE_ATTR(b_reduce_l1, "ReduceL1", 1)
REDUCE_ATTR(b_reduce_ss, "ReduceSumSquare", 0)
REDUCE_ATTR(b_reduce_lse, "ReduceLogSumExp", 0)

static void b_reduce_max18(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t ax[1] = {2};
  init_i64(m, "axes", 1, (int64_t[]){1}, ax);
  otm_attr_int(otm_node(m, "ReduceMax", "n", "A,axes", "Y"), "keepdims", 0);
}

static void b_einsum(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_attr_string(otm_node(m, "Einsum", "n", "A,B", "Y"), "equation", "bij,bjk->bik");
}

static void b_reshape(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t s[2] = {3, -1};
  init_i64(m, "shape", 1, (int64_t[]){2}, s);
  otm_node(m, "Reshape", "n", "A,shape", "Y");
}

static void b_squeeze_unsqueeze_flatten(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t a0[1] = {1}, a1[1] = {0};
  init_i64(m, "sq_axes", 1, (int64_t[]){1}, a0);
  init_i64(m, "un_axes", 1, (int64_t[]){1}, a1);
  otm_node(m, "Squeeze", "sq", "A,sq_axes", "S");
  otm_node(m, "Unsqueeze", "un", "S,un_axes", "U");
  otm_attr_int(otm_node(m, "Flatten", "fl", "U", "Y"), "axis", 2);
}

static void b_transpose(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_attr_ints(otm_node(m, "Transpose", "n", "A", "Y"), "perm", 3, (const int64_t[]){1, 2, 0});
}

static void b_concat(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_attr_int(otm_node(m, "Concat", "n", "A,B,C", "Y"), "axis", -1);
}

/* Split with two of its three outputs used, one of them twice. */
static void b_split(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t s[3] = {1, 2, 1};
  init_i64(m, "split", 1, (int64_t[]){3}, s);
  otm_attr_int(otm_node(m, "Split", "n", "A,split", "P,Q,Z"), "axis", 1);
  otm_node(m, "Mul", "pq", "Q,Q", "Q2");
  otm_attr_int(otm_node(m, "Concat", "c", "P,Q2,Q", "Y"), "axis", 1);
}

static void b_slice(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t st[2] = {-1, 1}, en[2] = {0, 100}, ax[2] = {0, 1}, sp[2] = {-1, 2};
  init_i64(m, "starts", 1, (int64_t[]){2}, st);
  init_i64(m, "ends", 1, (int64_t[]){2}, en);
  init_i64(m, "axes", 1, (int64_t[]){2}, ax);
  init_i64(m, "steps", 1, (int64_t[]){2}, sp);
  otm_node(m, "Slice", "n", "A,starts,ends,axes,steps", "Y");
}

/* Unit steps, constant bounds (the Pad rule): negative start and axis,
 * an end past the dim, an end counted from the back; no steps input. */
static void b_slice_unit(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t st[2] = {-3, 1}, en[2] = {INT64_MAX, -1}, ax[2] = {-1, 0};
  init_i64(m, "starts", 1, (int64_t[]){2}, st);
  init_i64(m, "ends", 1, (int64_t[]){2}, en);
  init_i64(m, "axes", 1, (int64_t[]){2}, ax);
  otm_node(m, "Slice", "n", "A,starts,ends,axes", "Y");
}

/* A chunked in two along its last axis (torch's chunk), the halves
 * multiplied: both Slices' gradients sum at A. */
static void b_slice_chunk(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t s0[1] = {0}, e0[1] = {2}, s1[1] = {2}, e1[1] = {4}, ax[1] = {2};
  init_i64(m, "s0", 1, (int64_t[]){1}, s0);
  init_i64(m, "e0", 1, (int64_t[]){1}, e0);
  init_i64(m, "s1", 1, (int64_t[]){1}, s1);
  init_i64(m, "e1", 1, (int64_t[]){1}, e1);
  init_i64(m, "ax", 1, (int64_t[]){1}, ax);
  otm_node(m, "Slice", "lo", "A,s0,e0,ax", "P");
  otm_node(m, "Slice", "hi", "A,s1,e1,ax", "Q");
  otm_node(m, "Mul", "n", "P,Q", "Y");
}

/* torch's chunk as exported: the bounds computed from Shape at run time
 * (the midpoint of the last axis), one end INT64_MAX. */
static void b_slice_runtime(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t last[1] = {-1}, two[1] = {2}, zero[1] = {0}, big[1] = {INT64_MAX};
  init_i64(m, "last", 1, (int64_t[]){1}, last);
  init_i64(m, "two", 1, (int64_t[]){1}, two);
  init_i64(m, "zero", 1, (int64_t[]){1}, zero);
  init_i64(m, "big", 1, (int64_t[]){1}, big);
  otm_node(m, "Shape", "sh", "A", "S");
  otm_node(m, "Gather", "d", "S,last", "D");
  otm_node(m, "Div", "half", "D,two", "H");
  otm_node(m, "Slice", "lo", "A,zero,H,last", "P");
  otm_node(m, "Slice", "hi", "A,H,big,last", "Q");
  otm_node(m, "Mul", "n", "P,Q", "Y");
}

static void b_gather(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t idx[4] = {2, -1, 0, 2};
  init_i64(m, "idx", 2, (int64_t[]){2, 2}, idx);
  otm_attr_int(otm_node(m, "Gather", "n", "A,idx", "Y"), "axis", 1);
}

static void b_gather_elements(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t idx[6] = {0, 2, 2, 1, 1, 1};
  init_i64(m, "idx", 2, (int64_t[]){2, 3}, idx);
  otm_attr_int(otm_node(m, "GatherElements", "n", "A,idx", "Y"), "axis", 1);
}

static void b_expand(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t s[3] = {2, 3, 4};
  init_i64(m, "shape", 1, (int64_t[]){3}, s);
  otm_node(m, "Expand", "n", "A,shape", "Y");
}

static void b_tile(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t r[2] = {2, 3};
  init_i64(m, "rep", 1, (int64_t[]){2}, r);
  otm_node(m, "Tile", "n", "A,rep", "Y");
}

static void b_pad(OxTestModel* m, OnyxElemType T) {
  const int64_t p[4] = {1, 0, 0, 2};
  init_i64(m, "pads", 1, (int64_t[]){4}, p);
  const double v = 0.25;
  init_f(m, "pv", T, 0, NULL, &v);
  otm_node(m, "Pad", "n", "A,pads,pv", "Y");
}

static void b_gelu(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_node(m, "Gelu", "n", "A", "Y");
}

static void b_gelu_tanh(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_attr_string(otm_node(m, "Gelu", "n", "A", "Y"), "approximate", "tanh");
}

static void b_softmax(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_attr_int(otm_node(m, "Softmax", "n", "A", "Y"), "axis", 1);
}

static void b_logsoftmax(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_attr_int(otm_node(m, "LogSoftmax", "n", "A", "Y"), "axis", 1);
}

static void b_sce(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t lab[3] = {1, 3, 0};
  init_i64(m, "lab", 1, (int64_t[]){3}, lab);
  otm_node(m, "SoftmaxCrossEntropyLoss", "n", "A,lab", "Y");
}

static void b_sce_weighted(OxTestModel* m, OnyxElemType T) {
  const int64_t lab[6] = {1, 3, 0, 2, 3, 1};
  init_i64(m, "lab", 2, (int64_t[]){3, 2}, lab);
  init_rand(m, "w", T, 1, (int64_t[]){4}, K_POS);
  OxTestNode* n = otm_node(m, "SoftmaxCrossEntropyLoss", "n", "A,lab,w", "Y,LP");
  otm_attr_string(n, "reduction", "sum");
  otm_attr_int(n, "ignore_index", 3);
}

static void b_nll(OxTestModel* m, OnyxElemType T) {
  const int64_t lab[6] = {1, 3, 0, 2, 3, 1};
  init_i64(m, "lab", 2, (int64_t[]){3, 2}, lab);
  init_rand(m, "w", T, 1, (int64_t[]){4}, K_POS);
  OxTestNode* n = otm_node(m, "NegativeLogLikelihoodLoss", "n", "A,lab,w", "Y");
  otm_attr_int(n, "ignore_index", 3);
}

static void b_nll_none(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t lab[3] = {1, 3, 0};
  init_i64(m, "lab", 1, (int64_t[]){3}, lab);
  otm_attr_string(otm_node(m, "NegativeLogLikelihoodLoss", "n", "A,lab", "Y"), "reduction", "none");
}

static void b_conv(OxTestModel* m, OnyxElemType T) {
  (void)T;
  OxTestNode* n = otm_node(m, "Conv", "n", "A,B,C", "Y");
  otm_attr_ints(n, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  otm_attr_ints(n, "strides", 2, (const int64_t[]){2, 2});
}

static void b_conv1d_group(OxTestModel* m, OnyxElemType T) {
  (void)T;
  OxTestNode* n = otm_node(m, "Conv", "n", "A,B", "Y");
  otm_attr_int(n, "group", 2);
  otm_attr_ints(n, "dilations", 1, (const int64_t[]){2});
}

static void b_maxpool(OxTestModel* m, OnyxElemType T) {
  (void)T;
  OxTestNode* n = otm_node(m, "MaxPool", "n", "A", "Y");
  otm_attr_ints(n, "kernel_shape", 2, (const int64_t[]){2, 2});
  otm_attr_ints(n, "strides", 2, (const int64_t[]){2, 2});
}

static void b_avgpool(OxTestModel* m, OnyxElemType T) {
  (void)T;
  OxTestNode* n = otm_node(m, "AveragePool", "n", "A", "Y");
  otm_attr_ints(n, "kernel_shape", 2, (const int64_t[]){3, 3});
  otm_attr_ints(n, "strides", 2, (const int64_t[]){2, 2});
  otm_attr_ints(n, "pads", 4, (const int64_t[]){1, 1, 1, 1});
}

static void b_bn_train(OxTestModel* m, OnyxElemType T) {
  init_rand(m, "mean", T, 1, (int64_t[]){2}, K_ANY);
  init_rand(m, "var", T, 1, (int64_t[]){2}, K_POS);
  OxTestNode* n = otm_node(m, "BatchNormalization", "n", "A,B,C,mean,var", "Y,rm,rv");
  otm_attr_int(n, "training_mode", 1);
}

static void b_bn_infer(OxTestModel* m, OnyxElemType T) {
  init_rand(m, "mean", T, 1, (int64_t[]){2}, K_ANY);
  init_rand(m, "var", T, 1, (int64_t[]){2}, K_POS);
  otm_node(m, "BatchNormalization", "n", "A,B,C,mean,var", "Y");
}

static void b_layernorm(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_attr_int(otm_node(m, "LayerNormalization", "n", "A,B,C", "Y"), "axis", 1);
}

static void b_dropout_infer(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_node(m, "Dropout", "n", "A", "Y");
}

static void b_layernorm_stats(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_node(m, "LayerNormalization", "n", "A,B,C", "Y,mu,isd");
}

static void b_maxpool_idx(OxTestModel* m, OnyxElemType T) {
  (void)T;
  OxTestNode* n = otm_node(m, "MaxPool", "n", "A", "Y,idx");
  otm_attr_ints(n, "kernel_shape", 2, (const int64_t[]){3, 3});
  otm_attr_ints(n, "strides", 2, (const int64_t[]){1, 2});
  otm_attr_ints(n, "pads", 4, (const int64_t[]){1, 0, 1, 1});
}

static void b_onyx_gelu(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_add_opset(m, "com.onyx", 1);
  otm_node_domain(otm_node(m, "Gelu", "n", "A", "Y"), "com.onyx");
}

static void b_fused_matmul(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_add_opset(m, "com.onyx", 1);
  OxTestNode* n = otm_node(m, "FusedMatMul", "n", "A,B,C,D", "Y");
  otm_node_domain(n, "com.onyx");
  otm_attr_string(n, "activation", "LeakyRelu");
  otm_attr_float(n, "alpha", 0.2f);
}

static void b_fused_matmul_gelu(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_add_opset(m, "com.onyx", 1);
  OxTestNode* n = otm_node(m, "FusedMatMul", "n", "A,B,C", "Y");
  otm_node_domain(n, "com.onyx");
  otm_attr_string(n, "activation", "Gelu");
}

static void b_fused_conv(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_add_opset(m, "com.onyx", 1);
  OxTestNode* n = otm_node(m, "FusedConv", "n", "A,B,C", "Y");
  otm_node_domain(n, "com.onyx");
  otm_attr_string(n, "activation", "Relu");
  otm_attr_ints(n, "pads", 4, (const int64_t[]){1, 1, 1, 1});
}

UNARY(b_atan, "Atan")
UNARY(b_elu, "Elu")
UNARY(b_selu, "Selu")
UNARY(b_softplus, "Softplus")
UNARY(b_softsign, "Softsign")
UNARY(b_hard_swish, "HardSwish")

static void b_leaky(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_attr_float(otm_node(m, "LeakyRelu", "n", "A", "Y"), "alpha", 0.3f);
}

static void b_celu(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_attr_float(otm_node(m, "Celu", "n", "A", "Y"), "alpha", 0.7f);
}

static void b_hard_sigmoid(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_attr_float(otm_node(m, "HardSigmoid", "n", "A", "Y"), "alpha", 0.25f);
}

static void b_thresholded(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_attr_float(otm_node(m, "ThresholdedRelu", "n", "A", "Y"), "alpha", 0.45f);
}

static void b_prelu(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_node(m, "PRelu", "n", "A,B", "Y");
}

/* Floor, Round, Ceil and Sign pass nothing back: Y = A * (floor(3A) +
 * round(2A) + ceil(A) + sign(A)), the second factor constant almost
 * everywhere. */
static void b_steps(OxTestModel* m, OnyxElemType T) {
  const double k3 = 3, k2 = 2;
  init_f(m, "k3", T, 0, NULL, &k3);
  init_f(m, "k2", T, 0, NULL, &k2);
  otm_node(m, "Mul", "m3", "A,k3", "A3");
  otm_node(m, "Mul", "m2", "A,k2", "A2");
  otm_node(m, "Floor", "fl", "A3", "F");
  otm_node(m, "Round", "ro", "A2", "R2");
  otm_node(m, "Ceil", "ce", "A", "C");
  otm_node(m, "Sign", "sg", "A", "S");
  otm_node(m, "Sum", "su", "F,R2,C,S", "FS");
  otm_node(m, "Mul", "y", "A,FS", "Y");
}

static void b_gather_nd(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t idx[6] = {0, 1, 2, 0, 0, 1};
  init_i64(m, "idx", 2, (int64_t[]){3, 2}, idx);
  otm_node(m, "GatherND", "n", "A,idx", "Y");
}

static void b_onyx_silu(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_add_opset(m, "com.onyx", 1);
  otm_node_domain(otm_node(m, "Silu", "n", "A", "Y"), "com.onyx");
}

static void b_conv_transpose(OxTestModel* m, OnyxElemType T) {
  (void)T;
  OxTestNode* n = otm_node(m, "ConvTranspose", "n", "A,B,C", "Y");
  otm_attr_ints(n, "strides", 2, (const int64_t[]){2, 1});
  otm_attr_ints(n, "pads", 4, (const int64_t[]){1, 0, 0, 1});
  otm_attr_ints(n, "output_padding", 2, (const int64_t[]){1, 0});
  otm_attr_int(n, "group", 2);
}

/* Whole models: the cases the rules exist for. */
static void b_mlp(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t lab[3] = {2, 0, 1};
  init_i64(m, "lab", 1, (int64_t[]){3}, lab);
  otm_node(m, "Gemm", "fc1", "A,B,C", "H");
  otm_node(m, "Relu", "relu", "H", "R1");
  otm_node(m, "MatMul", "fc2", "R1,D", "Z");
  otm_node(m, "SoftmaxCrossEntropyLoss", "loss", "Z,lab", "Y");
}

static void b_cnn(OxTestModel* m, OnyxElemType T) {
  const int64_t lab[2] = {1, 0};
  init_i64(m, "lab", 1, (int64_t[]){2}, lab);
  init_rand(m, "bn_b", T, 1, (int64_t[]){3}, K_ANY);
  init_rand(m, "bn_m", T, 1, (int64_t[]){3}, K_ANY);
  init_rand(m, "bn_v", T, 1, (int64_t[]){3}, K_POS);
  otm_attr_ints(otm_node(m, "Conv", "conv", "A,B", "C1"), "pads", 4, (const int64_t[]){1, 1, 1, 1});
  otm_attr_int(otm_node(m, "BatchNormalization", "bn", "C1,C,bn_b,bn_m,bn_v", "N1,rm,rv"),
               "training_mode", 1);
  otm_node(m, "Relu", "relu", "N1", "R1");
  OxTestNode* p = otm_node(m, "MaxPool", "pool", "R1", "P1");
  otm_attr_ints(p, "kernel_shape", 2, (const int64_t[]){2, 2});
  otm_attr_ints(p, "strides", 2, (const int64_t[]){2, 2});
  otm_node(m, "GlobalAveragePool", "gap", "P1", "G1");
  otm_node(m, "Flatten", "flat", "G1", "F1");
  otm_node(m, "MatMul", "fc", "F1,D", "Z");
  otm_node(m, "SoftmaxCrossEntropyLoss", "loss", "Z,lab", "Y");
}

/* Attention over [2, 3, 4]: LayerNorm, Q K^T / 2, Softmax, times V, plus
 * the residual, then Gelu. */
static void b_attention(OxTestModel* m, OnyxElemType T) {
  init_rand(m, "ln_s", T, 1, (int64_t[]){4}, K_POS);
  init_rand(m, "ln_b", T, 1, (int64_t[]){4}, K_ANY);
  const double half = 0.5;
  init_f(m, "half", T, 0, NULL, &half);
  otm_node(m, "LayerNormalization", "ln", "A,ln_s,ln_b", "L1");
  otm_node(m, "MatMul", "q", "L1,B", "Q");
  otm_node(m, "MatMul", "k", "L1,C", "K");
  otm_node(m, "MatMul", "v", "L1,D", "V");
  otm_attr_ints(otm_node(m, "Transpose", "kt", "K", "KT"), "perm", 3, (const int64_t[]){0, 2, 1});
  otm_node(m, "MatMul", "qk", "Q,KT", "S0");
  otm_node(m, "Mul", "scale", "S0,half", "S1");
  otm_attr_int(otm_node(m, "Softmax", "sm", "S1", "P"), "axis", -1);
  otm_node(m, "MatMul", "pv", "P,V", "O");
  otm_node(m, "Add", "res", "O,A", "RS");
  otm_node(m, "Gelu", "gelu", "RS", "Y");
}

static void b_mha(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_add_opset(m, "com.onyx", 1);
  OxTestNode* n = otm_node(m, "MultiHeadAttention", "n", "A,B,C,D", "Y");
  otm_node_domain(n, "com.onyx");
  otm_attr_int(n, "num_heads", 2);
  otm_attr_float(n, "scale", 0.5f);
}

static void b_mha_packed(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_add_opset(m, "com.onyx", 1);
  OxTestNode* n = otm_node(m, "MultiHeadAttention", "n", "A", "Y");
  otm_node_domain(n, "com.onyx");
  otm_attr_int(n, "num_heads", 2);
  otm_attr_float(n, "scale", 0.7f);
}

/* Both outputs of SoftmaxCrossEntropyLoss carry a gradient. */
static void b_sce_both(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t lab[3] = {1, 3, 0}, ax[1] = {1};
  init_i64(m, "lab", 1, (int64_t[]){3}, lab);
  init_i64(m, "ax", 1, (int64_t[]){1}, ax);
  OxTestNode* n = otm_node(m, "SoftmaxCrossEntropyLoss", "n", "A,lab", "L0,LP");
  otm_attr_string(n, "reduction", "none");
  otm_node(m, "Unsqueeze", "u", "L0,ax", "L1");
  otm_attr_int(otm_node(m, "Concat", "c", "L1,LP", "Y"), "axis", 1);
}

static void b_resize_nearest(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const float sc[4] = {1, 1, 2, 0.75f};
  otm_initializer(m, "scales", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4}, sc);
  OxTestNode* n = otm_node(m, "Resize", "n", "A,,scales", "Y");
  otm_attr_string(n, "coordinate_transformation_mode", "half_pixel");
  otm_attr_string(n, "nearest_mode", "round_prefer_ceil");
}

static void b_gather_nd_batch(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t idx[4] = {1, 1, 0, 1};
  init_i64(m, "idx", 3, (int64_t[]){2, 2, 1}, idx);
  otm_attr_int(otm_node(m, "GatherND", "n", "A,idx", "Y"), "batch_dims", 1);
}

UNARY(b_cos, "Cos")
UNARY(b_tan, "Tan")
UNARY(b_asin, "Asin")
UNARY(b_acos, "Acos")
UNARY(b_sinh, "Sinh")
UNARY(b_cosh, "Cosh")
UNARY(b_asinh, "Asinh")
UNARY(b_acosh, "Acosh")
UNARY(b_atanh, "Atanh")

static void b_depth_space(OxTestModel* m, OnyxElemType T) {
  (void)T;
  OxTestNode* d = otm_node(m, "DepthToSpace", "d2s", "A", "D");
  otm_attr_int(d, "blocksize", 2);
  otm_attr_string(d, "mode", "CRD");
  otm_node(m, "Mul", "sq", "D,D", "D2");
  otm_attr_int(otm_node(m, "SpaceToDepth", "s2d", "D2", "Y"), "blocksize", 2);
}

static void b_reverse_compress(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t lens[2] = {3, 1};
  init_i64(m, "lens", 1, (int64_t[]){2}, lens);
  const uint8_t keep[4] = {1, 0, 1, 1};
  otm_initializer(m, "keep", ONYX_ELEM_BOOL, 1, (int64_t[]){4}, keep);
  OxTestNode* r = otm_node(m, "ReverseSequence", "rev", "A,lens", "RV");
  otm_attr_int(r, "batch_axis", 1);
  otm_attr_int(r, "time_axis", 0);
  otm_attr_int(otm_node(m, "Compress", "cmp", "RV,keep", "Y"), "axis", 0);
}

static void b_pad_reflect_edge(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t p1[4] = {1, 2, 1, 0}, p2[4] = {0, 1, 2, 1};
  init_i64(m, "p1", 1, (int64_t[]){4}, p1);
  init_i64(m, "p2", 1, (int64_t[]){4}, p2);
  otm_attr_string(otm_node(m, "Pad", "reflect", "A,p1", "R1"), "mode", "reflect");
  otm_attr_string(otm_node(m, "Pad", "edge", "R1,p2", "Y"), "mode", "edge");
}

UNARY(b_global_max, "GlobalMaxPool")

static void b_instance_norm(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_attr_float(otm_node(m, "InstanceNormalization", "n", "A,B,C", "Y"), "epsilon", 1e-3f);
}

static void b_shrink(OxTestModel* m, OnyxElemType T) {
  (void)T;
  OxTestNode* n = otm_node(m, "Shrink", "n", "A", "Y");
  otm_attr_float(n, "lambd", 0.4f);
  otm_attr_float(n, "bias", 0.1f);
}

static void b_lp_norm(OxTestModel* m, OnyxElemType T) {
  (void)T;
  OxTestNode* n2 = otm_node(m, "LpNormalization", "l2", "A", "N2");
  otm_attr_int(n2, "axis", 1);
  OxTestNode* n1 = otm_node(m, "LpNormalization", "l1", "A", "N1");
  otm_attr_int(n1, "axis", 0);
  otm_attr_int(n1, "p", 1);
  otm_node(m, "Add", "y", "N1,N2", "Y");
}

static void b_topk(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t k[1] = {2};
  init_i64(m, "k", 1, (int64_t[]){1}, k);
  otm_attr_int(otm_node(m, "TopK", "n", "A,k", "Y,I"), "axis", 1);
}

UNARY(b_mish, "Mish")

static void b_group_norm(OxTestModel* m, OnyxElemType T) {
  (void)T;
  OxTestNode* n = otm_node(m, "GroupNormalization", "n", "A,B,C", "Y");
  otm_attr_int(n, "num_groups", 2);
  otm_attr_float(n, "epsilon", 1e-3f);
}

static void b_rms_norm(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_attr_int(otm_node(m, "RMSNormalization", "n", "A,B", "Y"), "axis", 1);
}

/* Hardmax passes nothing back: Y = A * Hardmax(A). */
static void b_hardmax(OxTestModel* m, OnyxElemType T) {
  (void)T;
  otm_node(m, "Hardmax", "h", "A", "H");
  otm_node(m, "Mul", "y", "A,H", "Y");
}

static void b_trilu(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t k = 1;
  init_i64(m, "k", 0, NULL, &k);
  otm_attr_int(otm_node(m, "Trilu", "n", "A,k", "Y"), "upper", 0);
}

static void b_scatter_elements(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t idx[4] = {2, 0, 1, 3};
  init_i64(m, "idx", 2, (int64_t[]){2, 2}, idx);
  otm_attr_int(otm_node(m, "ScatterElements", "n", "A,idx,B", "Y"), "axis", 1);
}

static void b_scatter_nd(OxTestModel* m, OnyxElemType T) {
  (void)T;
  const int64_t idx[2] = {2, 0};
  init_i64(m, "idx", 2, (int64_t[]){2, 1}, idx);
  otm_node(m, "ScatterND", "n", "A,idx,B", "Y");
}

#define IN(n, r, ...)                                                                              \
  { n, r, {__VA_ARGS__}, K_ANY }
#define INK(n, k, r, ...)                                                                          \
  { n, r, {__VA_ARGS__}, k }

/* --- If: the gradient through both branches ------------------------------------ */
/* A bool scalar initializer (the condition of an If). */
static void init_bool(OxTestModel* m, const char* name, bool v) {
  const uint8_t b = v;
  otm_initializer(m, name, ONYX_ELEM_BOOL, 0, NULL, &b);
}

static OxTestNode* if_node(OxTestModel* m, const char* name, const char* cond, const char* outs,
                           Onnx__GraphProto* then_g, Onnx__GraphProto* else_g) {
  OxTestNode* n = otm_node(m, "If", name, cond, outs);
  otm_attr_graph(n, "then_branch", then_g);
  otm_attr_graph(n, "else_branch", else_g);
  return n;
}

/* then: A * B; else: exp(A) - B. Both branches read A and B. */
static void b_if_common(OxTestModel* m, OnyxElemType T, bool cond) {
  init_bool(m, "c", cond);
  otm_begin_graph(m, "then");
  otm_node(m, "Mul", "t_mul", "A,B", "Yt");
  otm_output(m, "Yt", T, -1, NULL);
  Onnx__GraphProto* t = otm_end_graph(m);
  otm_begin_graph(m, "else");
  otm_node(m, "Exp", "e_exp", "A", "Ea");
  otm_node(m, "Sub", "e_sub", "Ea,B", "Ye");
  otm_output(m, "Ye", T, -1, NULL);
  Onnx__GraphProto* e = otm_end_graph(m);
  if_node(m, "if0", "c", "Y", t, e);
}
static void b_if_then(OxTestModel* m, OnyxElemType T) {
  b_if_common(m, T, true);
}
static void b_if_else(OxTestModel* m, OnyxElemType T) {
  b_if_common(m, T, false);
}

/* then reads only A (exp(A)), else only B (B * B): the branch that does not
 * read an x gives zeros for it. */
static void b_if_apart(OxTestModel* m, OnyxElemType T, bool cond) {
  init_bool(m, "c", cond);
  otm_begin_graph(m, "then");
  otm_node(m, "Exp", "t_exp", "A", "Yt");
  otm_output(m, "Yt", T, -1, NULL);
  Onnx__GraphProto* t = otm_end_graph(m);
  otm_begin_graph(m, "else");
  otm_node(m, "Mul", "e_mul", "B,B", "Ye");
  otm_output(m, "Ye", T, -1, NULL);
  Onnx__GraphProto* e = otm_end_graph(m);
  if_node(m, "if0", "c", "Y", t, e);
}
static void b_if_apart_then(OxTestModel* m, OnyxElemType T) {
  b_if_apart(m, T, true);
}
static void b_if_apart_else(OxTestModel* m, OnyxElemType T) {
  b_if_apart(m, T, false);
}

/* Two outputs, one of them an outer value passed through: then (A, A * B),
 * else (exp(B), A); Y = out0 * out1 + out0. */
static void b_if_pass(OxTestModel* m, OnyxElemType T, bool cond) {
  init_bool(m, "c", cond);
  otm_begin_graph(m, "then");
  otm_node(m, "Mul", "t_mul", "A,B", "Tm");
  otm_output(m, "A", T, -1, NULL);
  otm_output(m, "Tm", T, -1, NULL);
  Onnx__GraphProto* t = otm_end_graph(m);
  otm_begin_graph(m, "else");
  otm_node(m, "Exp", "e_exp", "B", "Eb");
  otm_output(m, "Eb", T, -1, NULL);
  otm_output(m, "A", T, -1, NULL);
  Onnx__GraphProto* e = otm_end_graph(m);
  if_node(m, "if0", "c", "O0,O1", t, e);
  otm_node(m, "Mul", "o_mul", "O0,O1", "P");
  otm_node(m, "Add", "o_add", "P,O0", "Y");
}
static void b_if_pass_then(OxTestModel* m, OnyxElemType T) {
  b_if_pass(m, T, true);
}
static void b_if_pass_else(OxTestModel* m, OnyxElemType T) {
  b_if_pass(m, T, false);
}

/* An If inside a branch: outer then = inner If(c2: A * B, exp(B)) * A, outer
 * else = A - B. The inner branches read A and B from two scopes out. */
static void b_if_nested(OxTestModel* m, OnyxElemType T, bool c2) {
  init_bool(m, "c", true);
  init_bool(m, "c2", c2);
  otm_begin_graph(m, "then");
  otm_begin_graph(m, "inner_then");
  otm_node(m, "Mul", "it_mul", "A,B", "It");
  otm_output(m, "It", T, -1, NULL);
  Onnx__GraphProto* it = otm_end_graph(m);
  otm_begin_graph(m, "inner_else");
  otm_node(m, "Exp", "ie_exp", "B", "Ie");
  otm_output(m, "Ie", T, -1, NULL);
  Onnx__GraphProto* ie = otm_end_graph(m);
  if_node(m, "if_inner", "c2", "I", it, ie);
  otm_node(m, "Mul", "t_mul", "I,A", "Yt");
  otm_output(m, "Yt", T, -1, NULL);
  Onnx__GraphProto* t = otm_end_graph(m);
  otm_begin_graph(m, "else");
  otm_node(m, "Sub", "e_sub", "A,B", "Ye");
  otm_output(m, "Ye", T, -1, NULL);
  Onnx__GraphProto* e = otm_end_graph(m);
  if_node(m, "if0", "c", "Y", t, e);
}
static void b_if_nested_then(OxTestModel* m, OnyxElemType T) {
  b_if_nested(m, T, true);
}
static void b_if_nested_else(OxTestModel* m, OnyxElemType T) {
  b_if_nested(m, T, false);
}

/* --- Scan: the gradient as a reverse Scan --------------------------------------- */
/* State A [3], scan input B [4, 3], outer C [3]: s' = s * x + C, y = exp(s');
 * Y = Ys + S_final. reverse: the scan input and output read backwards. */
static void b_scan(OxTestModel* m, OnyxElemType T, bool reverse) {
  otm_begin_graph(m, "body");
  otm_input(m, "s_in", T, 1, (int64_t[]){3});
  otm_input(m, "x_in", T, 1, (int64_t[]){3});
  otm_node(m, "Mul", "b_mul", "s_in,x_in", "sx");
  otm_node(m, "Add", "b_add", "sx,C", "s_out");
  otm_node(m, "Exp", "b_exp", "s_out", "y_out");
  otm_output(m, "s_out", T, 1, (int64_t[]){3});
  otm_output(m, "y_out", T, 1, (int64_t[]){3});
  Onnx__GraphProto* body = otm_end_graph(m);
  OxTestNode* n = otm_node(m, "Scan", "scan0", "A,B", "S,Ys");
  otm_attr_graph(n, "body", body);
  otm_attr_int(n, "num_scan_inputs", 1);
  if (reverse) {
    otm_attr_ints(n, "scan_input_directions", 1, (const int64_t[]){1});
    otm_attr_ints(n, "scan_output_directions", 1, (const int64_t[]){1});
  }
  otm_node(m, "Add", "o_add", "Ys,S", "Y");
}
/* B [3, 4] scanned along axis 1, Ys stacked along axis 1; Y = Ys * Ys, the
 * final state unread (its gradient: zeros). */
static void b_scan_axis1(OxTestModel* m, OnyxElemType T) {
  otm_begin_graph(m, "body");
  otm_input(m, "s_in", T, 1, (int64_t[]){3});
  otm_input(m, "x_in", T, 1, (int64_t[]){3});
  otm_node(m, "Mul", "b_mul", "s_in,x_in", "sx");
  otm_node(m, "Sub", "b_sub", "sx,C", "s_out");
  otm_node(m, "Mul", "b_y", "s_out,x_in", "y_out");
  otm_output(m, "s_out", T, 1, (int64_t[]){3});
  otm_output(m, "y_out", T, 1, (int64_t[]){3});
  Onnx__GraphProto* body = otm_end_graph(m);
  OxTestNode* n = otm_node(m, "Scan", "scan0", "A,B", "S,Ys");
  otm_attr_graph(n, "body", body);
  otm_attr_int(n, "num_scan_inputs", 1);
  otm_attr_ints(n, "scan_input_axes", 1, (const int64_t[]){1});
  otm_attr_ints(n, "scan_output_axes", 1, (const int64_t[]){1});
  otm_node(m, "Mul", "o_mul", "Ys,Ys", "Y");
}
static void b_scan_fwd(OxTestModel* m, OnyxElemType T) {
  b_scan(m, T, false);
}
static void b_scan_rev(OxTestModel* m, OnyxElemType T) {
  b_scan(m, T, true);
}

/* --- Loop: the gradient as a reverse Scan over the recorded iterations ------------ */
/* The body's iteration number and condition (inputs 0 and 1). */
static void loop_body_head(OxTestModel* m) {
  otm_input(m, "i", ONYX_ELEM_INT64, 0, NULL);
  otm_input(m, "c_in", ONYX_ELEM_BOOL, 0, NULL);
}

/* A scalar int64 / bool initializer. */
static void init_trips(OxTestModel* m, const char* name, int64_t v) {
  otm_initializer(m, name, ONYX_ELEM_INT64, 0, NULL, &v);
}

/* v <- v * W + C for M = 3 iterations (cond absent); Y = the final v. W and
 * C are outer-scope values the body reads. */
static void b_loop_affine(OxTestModel* m, OnyxElemType T) {
  init_trips(m, "M", 3);
  otm_begin_graph(m, "body");
  loop_body_head(m);
  otm_input(m, "v_in", T, 1, (int64_t[]){3});
  otm_node(m, "Identity", "b_c", "c_in", "c_out");
  otm_node(m, "Mul", "b_mul", "v_in,W", "vw");
  otm_node(m, "Add", "b_add", "vw,C", "v_out");
  otm_output(m, "c_out", ONYX_ELEM_BOOL, 0, NULL);
  otm_output(m, "v_out", T, 1, (int64_t[]){3});
  Onnx__GraphProto* body = otm_end_graph(m);
  otm_attr_graph(otm_node(m, "Loop", "loop0", "M,,A", "Y"), "body", body);
}

/* The same loop with a trip count of 0: Y = A, and no gradient reaches W or C. */
static void b_loop_zero(OxTestModel* m, OnyxElemType T) {
  init_trips(m, "M", 0);
  otm_begin_graph(m, "body");
  loop_body_head(m);
  otm_input(m, "v_in", T, 1, (int64_t[]){3});
  otm_node(m, "Identity", "b_c", "c_in", "c_out");
  otm_node(m, "Mul", "b_mul", "v_in,W", "vw");
  otm_node(m, "Add", "b_add", "vw,C", "v_out");
  otm_output(m, "c_out", ONYX_ELEM_BOOL, 0, NULL);
  otm_output(m, "v_out", T, 1, (int64_t[]){3});
  Onnx__GraphProto* body = otm_end_graph(m);
  otm_attr_graph(otm_node(m, "Loop", "loop0", "M,,A", "Y"), "body", body);
}

/* The same step with a scan output y_t = v_out * v_in, a condition given
 * (true, carried through unchanged) and M = 4; Y = Ys [4, 3] + the final v
 * (broadcast). */
static void b_loop_scan(OxTestModel* m, OnyxElemType T) {
  init_trips(m, "M", 4);
  bool yes = true;
  otm_initializer(m, "cond", ONYX_ELEM_BOOL, 0, NULL, &yes);
  otm_begin_graph(m, "body");
  loop_body_head(m);
  otm_input(m, "v_in", T, 1, (int64_t[]){3});
  otm_node(m, "Identity", "b_c", "c_in", "c_out");
  otm_node(m, "Mul", "b_mul", "v_in,W", "vw");
  otm_node(m, "Add", "b_add", "vw,C", "v_out");
  otm_node(m, "Mul", "b_y", "v_out,v_in", "y_out");
  otm_output(m, "c_out", ONYX_ELEM_BOOL, 0, NULL);
  otm_output(m, "v_out", T, 1, (int64_t[]){3});
  otm_output(m, "y_out", T, 1, (int64_t[]){3});
  Onnx__GraphProto* body = otm_end_graph(m);
  otm_attr_graph(otm_node(m, "Loop", "loop0", "M,cond,A", "V,Ys"), "body", body);
  otm_node(m, "Add", "o_add", "Ys,V", "Y");
}

/* An outer-scope weight matrix: h <- tanh(h W) for M = 3 iterations, h
 * [2, 3], W [3, 3]; Y = the final h. */
static void b_loop_weight(OxTestModel* m, OnyxElemType T) {
  init_trips(m, "M", 3);
  otm_begin_graph(m, "body");
  loop_body_head(m);
  otm_input(m, "h_in", T, 2, (int64_t[]){2, 3});
  otm_node(m, "Identity", "b_c", "c_in", "c_out");
  otm_node(m, "MatMul", "b_mm", "h_in,W", "hw");
  otm_node(m, "Tanh", "b_tanh", "hw", "h_out");
  otm_output(m, "c_out", ONYX_ELEM_BOOL, 0, NULL);
  otm_output(m, "h_out", T, 2, (int64_t[]){2, 3});
  Onnx__GraphProto* body = otm_end_graph(m);
  otm_attr_graph(otm_node(m, "Loop", "loop0", "M,,A", "Y"), "body", body);
}

/* The condition ends the loop: an int64 counter k is carried with v
 * (k <- k + 1, cond <- k < 4) under M = 10, so 4 iterations run; v <- v *
 * W + C, y_t = v_out. Y = Ys [4, 3] * the final v. */
static void b_loop_cond(OxTestModel* m, OnyxElemType T) {
  init_trips(m, "M", 10);
  init_trips(m, "k0", 0);
  bool yes = true;
  otm_initializer(m, "cond", ONYX_ELEM_BOOL, 0, NULL, &yes);
  otm_begin_graph(m, "body");
  loop_body_head(m);
  otm_input(m, "k_in", ONYX_ELEM_INT64, 0, NULL);
  otm_input(m, "v_in", T, 1, (int64_t[]){3});
  init_trips(m, "one", 1);
  init_trips(m, "four", 4);
  otm_node(m, "Add", "b_k", "k_in,one", "k_out");
  otm_node(m, "Less", "b_less", "k_out,four", "c_out");
  otm_node(m, "Mul", "b_mul", "v_in,W", "vw");
  otm_node(m, "Add", "b_add", "vw,C", "v_out");
  otm_node(m, "Identity", "b_y", "v_out", "y_out");
  otm_output(m, "c_out", ONYX_ELEM_BOOL, 0, NULL);
  otm_output(m, "k_out", ONYX_ELEM_INT64, 0, NULL);
  otm_output(m, "v_out", T, 1, (int64_t[]){3});
  otm_output(m, "y_out", T, 1, (int64_t[]){3});
  Onnx__GraphProto* body = otm_end_graph(m);
  otm_attr_graph(otm_node(m, "Loop", "loop0", "M,cond,k0,A", "K,V,Ys"), "body", body);
  otm_node(m, "Mul", "o_mul", "Ys,V", "Y");
}

static const Case cases[] = {
    {"Add", 17, b_add, 2, {2, 3}, {IN("A", 2, 2, 3), IN("B", 1, 3)}, .f32 = false},
    {"Sub", 17, b_sub, 3, {2, 4, 3}, {IN("A", 3, 2, 1, 3), IN("B", 2, 4, 1)}, .f32 = false},
    {"Mul", 17, b_mul, 2, {3, 4}, {IN("A", 2, 3, 4), IN("B", 2, 1, 4)}, .f32 = false},
    {"Div", 17, b_div, 2, {2, 3}, {IN("A", 2, 2, 3), INK("B", K_POS, 2, 2, 3)}, .f32 = false},
    {"Div_opset7", 7, b_div, 2, {2, 3}, {IN("A", 2, 2, 3), INK("B", K_POS, 1, 3)}, .f32 = false},
    {"Neg", 17, b_neg, 2, {2, 3}, {IN("A", 2, 2, 3)}, .f32 = false},
    {"Identity", 17, b_identity, 2, {2, 3}, {IN("A", 2, 2, 3)}, .f32 = false},
    {"Exp", 17, b_exp, 2, {2, 3}, {IN("A", 2, 2, 3)}, .f32 = false},
    {"Log", 17, b_log, 2, {2, 3}, {INK("A", K_POS, 2, 2, 3)}, .f32 = false},
    {"Sqrt", 17, b_sqrt, 2, {2, 3}, {INK("A", K_POS, 2, 2, 3)}, .f32 = false},
    {"Erf", 17, b_erf, 2, {2, 3}, {IN("A", 2, 2, 3)}, .f32 = false},
    {"Abs", 17, b_abs, 2, {2, 3}, {INK("A", K_AWAY, 2, 2, 3)}, .f32 = false},
    {"Reciprocal", 17, b_reciprocal, 2, {2, 3}, {INK("A", K_POS, 2, 2, 3)}, .f32 = false},
    {"Pow", 17, b_pow, 2, {2, 3}, {INK("A", K_POS, 2, 2, 3), IN("B", 1, 3)}, .f32 = false},
    {"Max",
     17,
     b_max3,
     2,
     {2, 3},
     {IN("A", 2, 2, 3), IN("B", 1, 3), IN("C", 2, 2, 1)},
     .f32 = false},
    {"Min",
     17,
     b_min3,
     2,
     {2, 3},
     {IN("A", 2, 2, 3), IN("B", 1, 3), IN("C", 2, 2, 1)},
     .f32 = false},
    {"Clip", 13, b_clip, 2, {3, 4}, {IN("A", 2, 3, 4)}, .f32 = false},
    {"Clip_bounds",
     13,
     b_clip_bounds,
     2,
     {3, 4},
     {IN("A", 2, 3, 4), INK("B", K_LOW, 0, 0), INK("C", K_HIGH, 0, 0)},
     .f32 = false},
    {"Where", 17, b_where, 2, {2, 3}, {IN("A", 2, 2, 3), IN("B", 1, 3)}, .f32 = false},
    {"Cast", 17, b_cast, 2, {2, 3}, {IN("A", 2, 2, 3)}, .h = 1e-2},
    {"Sum",
     17,
     b_sum3,
     2,
     {2, 3},
     {IN("A", 2, 2, 3), IN("B", 1, 3), IN("C", 2, 2, 1)},
     .f32 = false},
    {"Mean",
     17,
     b_mean3,
     2,
     {2, 3},
     {IN("A", 2, 2, 3), IN("B", 1, 3), IN("C", 2, 2, 1)},
     .f32 = false},
    {"CumSum", 17, b_cumsum, 2, {2, 4}, {IN("A", 2, 2, 4)}, .f32 = false},
    {"MatMul_2d", 17, b_matmul, 2, {3, 2}, {IN("A", 2, 3, 4), IN("B", 2, 4, 2)}, .f32 = false},
    {"MatMul_batch_bcast",
     17,
     b_matmul,
     4,
     {2, 3, 3, 2},
     {IN("A", 4, 2, 1, 3, 4), IN("B", 3, 3, 4, 2)},
     .f32 = false},
    /* a 2-D B under a batched A: dB by one Gemm over the folded batch */
    {"MatMul_3d_2d",
     17,
     b_matmul,
     3,
     {2, 3, 5},
     {IN("A", 3, 2, 3, 4), IN("B", 2, 4, 5)},
     .f32 = false},
    {"MatMul_4d_2d",
     17,
     b_matmul,
     4,
     {2, 2, 3, 5},
     {IN("A", 4, 2, 2, 3, 4), IN("B", 2, 4, 5)},
     .f32 = false},
    {"MatMul_1d_a", 17, b_matmul, 2, {2, 3}, {IN("A", 1, 4), IN("B", 3, 2, 4, 3)}, .f32 = false},
    {"MatMul_1d_b", 17, b_matmul, 2, {2, 3}, {IN("A", 3, 2, 3, 4), IN("B", 1, 4)}, .f32 = false},
    {"MatMul_dot", 17, b_matmul, 0, {0}, {IN("A", 1, 4), IN("B", 1, 4)}, .f32 = false},
    {"Gemm_trans",
     17,
     b_gemm_t,
     2,
     {3, 2},
     {IN("A", 2, 4, 3), IN("B", 2, 2, 4), IN("C", 1, 2)},
     .f32 = false},
    {"Gemm",
     17,
     b_gemm,
     2,
     {3, 2},
     {IN("A", 2, 3, 4), IN("B", 2, 4, 2), IN("C", 2, 3, 2)},
     .f32 = false},
    {"Gemm_opset9",
     9,
     b_gemm,
     2,
     {3, 2},
     {IN("A", 2, 3, 4), IN("B", 2, 4, 2), IN("C", 1, 2)},
     .f32 = false},
    {"ReduceSum_axes_input", 13, b_reduce_sum_in, 1, {3}, {IN("A", 3, 2, 3, 4)}, .f32 = false},
    {"ReduceMean", 17, b_reduce_mean, 2, {2, 4}, {IN("A", 3, 2, 3, 4)}, .f32 = false},
    {"ReduceMax", 17, b_reduce_max, 3, {2, 1, 4}, {IN("A", 3, 2, 3, 4)}, .f32 = false},
    {"ReduceMax_18", 18, b_reduce_max18, 2, {2, 3}, {IN("A", 3, 2, 3, 4)}, .f32 = false},
    {"ReduceMin", 17, b_reduce_min, 2, {2, 4}, {IN("A", 3, 2, 3, 4)}, .f32 = false},
    {"ReduceL2", 17, b_reduce_l2, 2, {2, 4}, {IN("A", 3, 2, 3, 4)}, .f32 = false},
    {"ReduceL1", 17, b_reduce_l1, 3, {2, 1, 4}, {INK("A", K_AWAY, 3, 2, 3, 4)}, .f32 = false},
    {"ReduceSumSquare", 17, b_reduce_ss, 2, {2, 4}, {IN("A", 3, 2, 3, 4)}, .f32 = false},
    {"ReduceLogSumExp", 17, b_reduce_lse, 2, {2, 4}, {IN("A", 3, 2, 3, 4)}, .f32 = false},
    {"Einsum",
     17,
     b_einsum,
     3,
     {2, 3, 2},
     {IN("A", 3, 2, 3, 4), IN("B", 3, 2, 4, 2)},
     .f32 = false},
    {"Reshape", 17, b_reshape, 2, {3, 4}, {IN("A", 3, 2, 3, 2)}, .f32 = false},
    {"Squeeze_Unsqueeze_Flatten",
     17,
     b_squeeze_unsqueeze_flatten,
     2,
     {3, 2},
     {IN("A", 3, 3, 1, 2)},
     .f32 = false},
    {"Transpose", 17, b_transpose, 3, {3, 4, 2}, {IN("A", 3, 2, 3, 4)}, .f32 = false},
    {"Concat",
     17,
     b_concat,
     2,
     {2, 6},
     {IN("A", 2, 2, 1), IN("B", 2, 2, 3), IN("C", 2, 2, 2)},
     .f32 = false},
    {"Split", 17, b_split, 2, {2, 5}, {IN("A", 2, 2, 4)}, .f32 = false},
    {"Slice", 17, b_slice, 2, {2, 2}, {IN("A", 2, 3, 4)}, .contract = true},
    {"Slice_unit_steps", 17, b_slice_unit, 3, {1, 4, 3}, {IN("A", 3, 3, 4, 5)}, .f32 = false},
    {"Slice_runtime_bounds",
     17,
     b_slice_runtime,
     3,
     {2, 3, 2},
     {IN("A", 3, 2, 3, 4)},
     .f32 = false},
    {"Slice_chunk", 17, b_slice_chunk, 3, {2, 3, 2}, {IN("A", 3, 2, 3, 4)}, .f32 = false},
    {"GatherElements", 17, b_gather_elements, 2, {2, 3}, {IN("A", 2, 2, 3)}, .contract = true},
    {"Expand", 17, b_expand, 3, {2, 3, 4}, {IN("A", 2, 3, 1)}, .f32 = false},
    {"Tile", 17, b_tile, 2, {4, 6}, {IN("A", 2, 2, 2)}, .f32 = false},
    {"Pad", 17, b_pad, 2, {3, 5}, {IN("A", 2, 2, 3)}, .f32 = false},
    {"GlobalAveragePool",
     17,
     b_global_avg,
     4,
     {2, 3, 1, 1},
     {IN("A", 4, 2, 3, 2, 2)},
     .f32 = false},
    {"Softmax_opset11", 11, b_softmax, 3, {2, 3, 4}, {IN("A", 3, 2, 3, 4)}, .f32 = false},
    {"NegativeLogLikelihoodLoss", 13, b_nll, 0, {0}, {IN("A", 3, 3, 4, 2)}, .f32 = false},
    {"NegativeLogLikelihoodLoss_none", 13, b_nll_none, 1, {3}, {IN("A", 2, 3, 4)}, .f32 = false},
    {"BatchNormalization_inference",
     15,
     b_bn_infer,
     4,
     {3, 2, 2, 2},
     {IN("A", 4, 3, 2, 2, 2), IN("B", 1, 2), IN("C", 1, 2)},
     .f32 = false},
    {"Dropout_inference", 13, b_dropout_infer, 2, {2, 3}, {IN("A", 2, 2, 3)}, .f32 = false},
    {"fan_out", 17, b_fanout, 2, {2, 3}, {IN("A", 2, 2, 3)}, .f32 = false},
    {"int_path_stops", 17, b_int_path, 2, {2, 3}, {IN("A", 2, 2, 3)}, .f32 = false},
    {"Atan", 17, b_atan, 2, {2, 3}, {INK("A", K_WIDE, 2, 2, 3)}, .f32 = false},
    {"LeakyRelu", 17, b_leaky, 2, {2, 3}, {INK("A", K_AWAY, 2, 2, 3)}, .f32 = false},
    {"Elu", 17, b_elu, 2, {2, 3}, {INK("A", K_AWAY, 2, 2, 3)}, .f32 = false},
    {"Selu", 17, b_selu, 2, {2, 3}, {INK("A", K_AWAY, 2, 2, 3)}, .f32 = false},
    {"Celu", 17, b_celu, 2, {2, 3}, {INK("A", K_AWAY, 2, 2, 3)}, .f32 = true},
    {"Softplus", 17, b_softplus, 2, {2, 3}, {INK("A", K_WIDE, 2, 2, 3)}, .f32 = false},
    {"Softsign", 17, b_softsign, 2, {2, 3}, {INK("A", K_AWAY, 2, 2, 3)}, .f32 = false},
    {"HardSigmoid", 17, b_hard_sigmoid, 2, {3, 4}, {INK("A", K_WIDE, 2, 3, 4)}, .f32 = false},
    {"ThresholdedRelu", 17, b_thresholded, 2, {2, 3}, {INK("A", K_AWAY, 2, 2, 3)}, .f32 = false},
    {"HardSwish", 17, b_hard_swish, 2, {3, 4}, {INK("A", K_WIDE, 2, 3, 4)}, .f32 = false},
    {"PRelu", 17, b_prelu, 2, {2, 3}, {INK("A", K_AWAY, 2, 2, 3), IN("B", 1, 3)}, .f32 = false},
    {"Floor_Round_Ceil_Sign", 17, b_steps, 2, {2, 3}, {INK("A", K_AWAY, 2, 2, 3)}, .f32 = false},
    {"GatherND", 17, b_gather_nd, 2, {3, 2}, {IN("A", 3, 3, 2, 2)}, .contract = true},
    {"onyx_Silu", 17, b_onyx_silu, 2, {2, 3}, {INK("A", K_WIDE, 2, 2, 3)}, .f32 = true},
    {"Cos", 17, b_cos, 2, {2, 3}, {INK("A", K_WIDE, 2, 2, 3)}, .f32 = false},
    {"Tan", 17, b_tan, 2, {2, 3}, {IN("A", 2, 2, 3)}, .f32 = false},
    {"Asin", 17, b_asin, 2, {2, 3}, {INK("A", K_HIGH, 2, 2, 3)}, .f32 = false},
    {"Acos", 17, b_acos, 2, {2, 3}, {INK("A", K_LOW, 2, 2, 3)}, .f32 = false},
    {"Sinh", 17, b_sinh, 2, {2, 3}, {IN("A", 2, 2, 3)}, .f32 = false},
    {"Cosh", 17, b_cosh, 2, {2, 3}, {IN("A", 2, 2, 3)}, .f32 = false},
    {"Asinh", 17, b_asinh, 2, {2, 3}, {INK("A", K_WIDE, 2, 2, 3)}, .f32 = false},
    {"Acosh", 17, b_acosh, 2, {2, 3}, {INK("A", K_GT1, 2, 2, 3)}, .f32 = false},
    {"Atanh", 17, b_atanh, 2, {2, 3}, {INK("A", K_HIGH, 2, 2, 3)}, .f32 = false},
    {"GlobalMaxPool", 17, b_global_max, 4, {2, 3, 1, 1}, {IN("A", 4, 2, 3, 2, 2)}, .f32 = false},
    {"InstanceNormalization",
     17,
     b_instance_norm,
     4,
     {2, 3, 2, 2},
     {IN("A", 4, 2, 3, 2, 2), INK("B", K_POS, 1, 3), IN("C", 1, 3)},
     .f32 = false},
    {"Shrink", 17, b_shrink, 2, {2, 3}, {INK("A", K_WIDE, 2, 2, 3)}, .f32 = false},
    {"LpNormalization", 17, b_lp_norm, 2, {3, 4}, {INK("A", K_AWAY, 2, 3, 4)}, .f32 = false},
    {"Mish", 18, b_mish, 2, {2, 3}, {INK("A", K_WIDE, 2, 2, 3)}, .f32 = false},
    {"Hardmax", 17, b_hardmax, 2, {2, 3}, {IN("A", 2, 2, 3)}, .f32 = false},
    {"GroupNormalization_18",
     18,
     b_group_norm,
     4,
     {2, 4, 2, 1},
     {IN("A", 4, 2, 4, 2, 1), INK("B", K_POS, 1, 2), IN("C", 1, 2)},
     .f32 = false},
    {"GroupNormalization_21",
     21,
     b_group_norm,
     4,
     {2, 4, 2, 1},
     {IN("A", 4, 2, 4, 2, 1), INK("B", K_POS, 1, 4), IN("C", 1, 4)},
     .f32 = false},
    {"RMSNormalization",
     23,
     b_rms_norm,
     3,
     {2, 3, 4},
     {IN("A", 3, 2, 3, 4), INK("B", K_POS, 1, 4)},
     .f32 = false},
    {"Trilu", 17, b_trilu, 2, {3, 4}, {IN("A", 2, 3, 4)}, .f32 = false},
    {"ScatterElements",
     17,
     b_scatter_elements,
     2,
     {2, 4},
     {IN("A", 2, 2, 4), IN("B", 2, 2, 2)},
     .f32 = false},
    {"ScatterND", 17, b_scatter_nd, 2, {3, 4}, {IN("A", 2, 3, 4), IN("B", 2, 2, 4)}, .f32 = false},
    /* The com.onyx.training gradient kernels. */
    {"Relu", 17, b_relu, 2, {2, 3}, {INK("A", K_AWAY, 2, 2, 3)}, .contract = true},
    {"Sigmoid", 17, b_sigmoid, 2, {2, 3}, {IN("A", 2, 2, 3)}, .contract = true},
    {"Tanh", 17, b_tanh, 2, {2, 3}, {IN("A", 2, 2, 3)}, .contract = true},
    {"Gelu", 20, b_gelu, 2, {2, 3}, {IN("A", 2, 2, 3)}, .contract = true},
    {"Gelu_tanh", 20, b_gelu_tanh, 2, {2, 3}, {IN("A", 2, 2, 3)}, .contract = true},
    {"Softmax", 13, b_softmax, 3, {2, 3, 4}, {IN("A", 3, 2, 3, 4)}, .contract = true},
    {"LogSoftmax", 13, b_logsoftmax, 3, {2, 3, 4}, {IN("A", 3, 2, 3, 4)}, .contract = true},
    {"SoftmaxCrossEntropyLoss", 13, b_sce, 0, {0}, {IN("A", 2, 3, 4)}, .contract = true},
    {"SoftmaxCrossEntropyLoss_weighted",
     13,
     b_sce_weighted,
     0,
     {0},
     {IN("A", 3, 3, 4, 2)},
     .contract = true},
    {"Gather", 17, b_gather, 3, {2, 2, 2}, {IN("A", 2, 2, 3)}, .contract = true},
    {"Conv",
     17,
     b_conv,
     4,
     {1, 3, 3, 3},
     {IN("A", 4, 1, 2, 5, 5), IN("B", 4, 3, 2, 3, 3), IN("C", 1, 3)},
     .contract = true},
    {"Conv1d_group",
     17,
     b_conv1d_group,
     3,
     {2, 4, 3},
     {IN("A", 3, 2, 4, 7), IN("B", 3, 4, 2, 3)},
     .contract = true},
    {"MaxPool", 17, b_maxpool, 4, {1, 2, 2, 2}, {IN("A", 4, 1, 2, 4, 4)}, .contract = true},
    {"AveragePool", 17, b_avgpool, 4, {1, 2, 3, 3}, {IN("A", 4, 1, 2, 5, 5)}, .contract = true},
    {"BatchNormalization_training",
     15,
     b_bn_train,
     4,
     {3, 2, 2, 2},
     {IN("A", 4, 3, 2, 2, 2), IN("B", 1, 2), IN("C", 1, 2)},
     .contract = true},
    {"LayerNormalization",
     17,
     b_layernorm,
     3,
     {2, 3, 4},
     {IN("A", 3, 2, 3, 4), IN("B", 2, 3, 4), IN("C", 2, 3, 4)},
     .contract = true},
    {"LayerNormalization_stats",
     17,
     b_layernorm_stats,
     3,
     {2, 3, 4},
     {IN("A", 3, 2, 3, 4), IN("B", 1, 4), IN("C", 1, 4)},
     .contract = true},
    {"MaxPool_indices",
     17,
     b_maxpool_idx,
     4,
     {1, 2, 4, 2},
     {IN("A", 4, 1, 2, 4, 4)},
     .contract = true},
    {"onyx_Gelu", 17, b_onyx_gelu, 2, {2, 3}, {IN("A", 2, 2, 3)}, .f32 = true, .contract = true},
    {"FusedMatMul_leaky",
     17,
     b_fused_matmul,
     3,
     {2, 3, 2},
     {IN("A", 3, 2, 3, 4), IN("B", 2, 4, 2), IN("C", 1, 2), IN("D", 3, 2, 3, 2)},
     .f32 = true},
    {"FusedMatMul_gelu",
     17,
     b_fused_matmul_gelu,
     2,
     {3, 2},
     {IN("A", 2, 3, 4), IN("B", 2, 4, 2), IN("C", 1, 2)},
     .f32 = true,
     .contract = true},
    {"FusedConv_relu",
     17,
     b_fused_conv,
     4,
     {1, 2, 4, 4},
     {IN("A", 4, 1, 2, 4, 4), IN("B", 4, 2, 2, 3, 3), IN("C", 1, 2)},
     .f32 = true,
     .contract = true},
    {"ConvTranspose",
     17,
     b_conv_transpose,
     4,
     {2, 4, 7, 3},
     {IN("A", 4, 2, 4, 3, 3), IN("B", 4, 4, 2, 3, 2), IN("C", 1, 4)},
     .contract = true},
    {"model_MLP",
     17,
     b_mlp,
     0,
     {0},
     {IN("A", 2, 3, 4), IN("B", 2, 4, 5), IN("C", 1, 5), IN("D", 2, 5, 3)},
     .contract = true},
    {"model_CNN",
     17,
     b_cnn,
     0,
     {0},
     {IN("A", 4, 2, 2, 4, 4), IN("B", 4, 3, 2, 3, 3), INK("C", K_POS, 1, 3), IN("D", 2, 3, 2)},
     .contract = true},
    {"model_attention",
     20,
     b_attention,
     3,
     {2, 3, 4},
     {IN("A", 3, 2, 3, 4), IN("B", 2, 4, 4), IN("C", 2, 4, 4), IN("D", 2, 4, 4)},
     .contract = true},
    {"MultiHeadAttention",
     17,
     b_mha,
     3,
     {2, 3, 4},
     {IN("A", 3, 2, 3, 4), IN("B", 3, 2, 5, 4), IN("C", 3, 2, 5, 4), IN("D", 2, 3, 5)},
     .f32 = true,
     .contract = true},
    {"MultiHeadAttention_packed",
     17,
     b_mha_packed,
     3,
     {2, 3, 4},
     {IN("A", 3, 2, 3, 12)},
     .f32 = true,
     .contract = true},
    {"SoftmaxCrossEntropyLoss_both_outputs",
     17,
     b_sce_both,
     2,
     {3, 5},
     {IN("A", 2, 3, 4)},
     .contract = true},
    {"Resize_nearest",
     13,
     b_resize_nearest,
     4,
     {1, 2, 6, 3},
     {IN("A", 4, 1, 2, 3, 4)},
     .contract = true},
    {"GatherND_batch_dims",
     13,
     b_gather_nd_batch,
     3,
     {2, 2, 3},
     {IN("A", 3, 2, 2, 3)},
     .contract = true},
    {"GatherElements_opset13",
     13,
     b_gather_elements,
     2,
     {2, 3},
     {IN("A", 2, 2, 3)},
     .contract = true},
    {"LogSoftmax_opset11_unknown_shape",
     11,
     b_logsoftmax,
     3,
     {2, 3, 4},
     {IN("A", 3, 2, 3, 4)},
     .contract = true},
    {"DepthToSpace_SpaceToDepth",
     17,
     b_depth_space,
     4,
     {1, 8, 2, 2},
     {IN("A", 4, 1, 8, 2, 2)},
     .contract = true},
    {"ReverseSequence_Compress",
     17,
     b_reverse_compress,
     3,
     {3, 2, 2},
     {IN("A", 3, 4, 2, 2)},
     .contract = true},
    {"Pad_reflect_edge", 17, b_pad_reflect_edge, 2, {7, 8}, {IN("A", 2, 3, 4)}, .contract = true},
    {"TopK", 17, b_topk, 2, {3, 2}, {IN("A", 2, 3, 4)}, .contract = true},
    {"If_then", 17, b_if_then, 2, {2, 3}, {IN("A", 2, 2, 3), IN("B", 2, 2, 3)}, .f32 = false},
    {"If_else", 17, b_if_else, 2, {2, 3}, {IN("A", 2, 2, 3), IN("B", 2, 2, 3)}, .f32 = false},
    {"If_apart_then",
     17,
     b_if_apart_then,
     2,
     {2, 3},
     {IN("A", 2, 2, 3), IN("B", 2, 2, 3)},
     .f32 = false},
    {"If_apart_else",
     17,
     b_if_apart_else,
     2,
     {2, 3},
     {IN("A", 2, 2, 3), IN("B", 2, 2, 3)},
     .f32 = false},
    {"If_pass_then",
     17,
     b_if_pass_then,
     2,
     {2, 3},
     {IN("A", 2, 2, 3), IN("B", 2, 2, 3)},
     .f32 = false},
    {"If_pass_else",
     17,
     b_if_pass_else,
     2,
     {2, 3},
     {IN("A", 2, 2, 3), IN("B", 2, 2, 3)},
     .f32 = false},
    {"If_nested_then",
     17,
     b_if_nested_then,
     2,
     {2, 3},
     {IN("A", 2, 2, 3), IN("B", 2, 2, 3)},
     .f32 = false},
    {"If_nested_else",
     17,
     b_if_nested_else,
     2,
     {2, 3},
     {IN("A", 2, 2, 3), IN("B", 2, 2, 3)},
     .f32 = false},
    {"Scan",
     17,
     b_scan_fwd,
     2,
     {4, 3},
     {IN("A", 1, 3), IN("B", 2, 4, 3), IN("C", 1, 3)},
     .f32 = false},
    {"Scan_reverse",
     17,
     b_scan_rev,
     2,
     {4, 3},
     {IN("A", 1, 3), IN("B", 2, 4, 3), IN("C", 1, 3)},
     .f32 = false},
    {"Scan_axis1",
     17,
     b_scan_axis1,
     2,
     {3, 4},
     {IN("A", 1, 3), IN("B", 2, 3, 4), IN("C", 1, 3)},
     .f32 = false},
    {"If_opset11", 11, b_if_then, 2, {2, 3}, {IN("A", 2, 2, 3), IN("B", 2, 2, 3)}, .f32 = false},
    {"Loop_affine",
     17,
     b_loop_affine,
     1,
     {3},
     {IN("A", 1, 3), IN("W", 1, 3), IN("C", 1, 3)},
     .f32 = false},
    {"Loop_scan_output",
     17,
     b_loop_scan,
     2,
     {4, 3},
     {IN("A", 1, 3), IN("W", 1, 3), IN("C", 1, 3)},
     .f32 = false},
    {"Loop_outer_weight",
     17,
     b_loop_weight,
     2,
     {2, 3},
     {IN("A", 2, 2, 3), IN("W", 2, 3, 3)},
     .f32 = false},
    {"Loop_cond",
     17,
     b_loop_cond,
     2,
     {4, 3},
     {IN("A", 1, 3), IN("W", 1, 3), IN("C", 1, 3)},
     .f32 = false},
    {"Loop_zero_trips",
     17,
     b_loop_zero,
     1,
     {3},
     {IN("A", 1, 3), IN("W", 1, 3), IN("C", 1, 3)},
     .f32 = false},
    {"Loop_opset11",
     11,
     b_loop_affine,
     1,
     {3},
     {IN("A", 1, 3), IN("W", 1, 3), IN("C", 1, 3)},
     .f32 = false},
};

static void test_rules_composed(void** state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    if (!cases[i].contract) check_case(&cases[i], false);
}

/* Whether the CPU provider has the com.onyx.training gradient kernels (a
 * session with one ReluGrad node opens): the contract cases are skipped in
 * a build without them. */
static bool contract_kernels(void) {
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "com.onyx.training", 1);
  const int64_t d[1] = {1};
  otm_input(m, "dY", ONYX_ELEM_FLOAT32, 1, d);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, d);
  otm_node_domain(otm_node(m, "ReluGrad", "g", "dY,X", "dX"), "com.onyx.training");
  otm_output(m, "dX", ONYX_ELEM_FLOAT32, 1, d);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s);
  free(bytes);
  bool have = s != NULL;
  if (st) onyx_status_release(st);
  if (s) onyx_session_release(s);
  return have;
}

/* Skipped in a build without the com.onyx.training kernels. */
static void test_rules_contract(void** state) {
  (void)state;
  if (!contract_kernels()) skip();
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    if (cases[i].contract) check_case(&cases[i], false);
}

/* Every case again with symbolic input dims (opset 13 or later: undoing a
 * broadcast at run time needs ReduceSum's axes input). */
static void test_rules_dynamic_shapes(void** state) {
  (void)state;
  bool contract = contract_kernels();
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    if (cases[i].opset >= 13 && (contract || !cases[i].contract)) check_case(&cases[i], true);
}

/* --- errors ------------------------------------------------------------------------ */
static void expect_create_error(OxTestModel* m, const char* const* what, size_t n) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s);
  free(bytes);
  assert_null(s);
  assert_non_null(st);
  const char* msg = onyx_status_message(st);
  for (size_t i = 0; i < n; i++)
    if (!strstr(msg, what[i])) fail_msg("the message lacks \"%s\": %s", what[i], msg);
  onyx_status_release(st);
}

/* Sin has no rule: the message names the op, the node, and the nodes from
 * the loss back to it. */
static void test_missing_rule_names_path(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "ai.onnx.preview.training", 1);
  otm_input(m, "A", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3});
  otm_node(m, "Sin", "the_sin", "A", "S");
  otm_node(m, "Exp", "the_exp", "S", "E");
  otm_node(m, "Mul", "the_mul", "E,A", "M");
  otm_attr_int(otm_node(m, "ReduceSum", "the_sum", "M", "L"), "keepdims", 0);
  OxTestNode* g = otm_node(m, "Gradient", "grad", "", "dA");
  otm_node_domain(g, "ai.onnx.preview.training");
  otm_attr_strings(g, "xs", 1, (const char* const[]){"A"});
  otm_attr_string(g, "y", "L");
  otm_output(m, "dA", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3});
  const char* what[] = {"'grad' (Gradient)", "node 'the_sin' (Sin",
                        "'L' <- node 'the_sum' (ReduceSum) <- node 'the_mul' (Mul) <- node "
                        "'the_exp' (Exp) <- node 'the_sin' (Sin)"};
  expect_create_error(m, what, 3);
}

/* Broadcasting with shapes known only at run time: B is [K, 3] with K
 * symbolic, added to A [N, 3]. With K = 1 the gradient of B sums over the
 * rows of A; with K = N it is dY itself. L = sum(Y * Y) / 2: dB = sum of Y
 * over the broadcast rows. */
static void test_dynamic_broadcast(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "ai.onnx.preview.training", 1);
  otm_input_s(m, "A", ONYX_ELEM_FLOAT32, "N,3");
  otm_input_s(m, "B", ONYX_ELEM_FLOAT32, "K,3");
  otm_node(m, "Add", "add", "A,B", "Y");
  otm_node(m, "Mul", "sq", "Y,Y", "Y2");
  otm_attr_int(otm_node(m, "ReduceSum", "sum", "Y2", "L"), "keepdims", 0);
  OxTestNode* g = otm_node(m, "Gradient", "grad", "", "dA,dB");
  otm_node_domain(g, "ai.onnx.preview.training");
  otm_attr_strings(g, "xs", 2, (const char* const[]){"A", "B"});
  otm_attr_string(g, "y", "L");
  otm_output_s(m, "dA", ONYX_ELEM_FLOAT32, "N,3");
  otm_output_s(m, "dB", ONYX_ELEM_FLOAT32, "K,3");
  OnyxSession* s = open_bytes(m);
  const float a[6] = {1, 2, 3, 4, 5, 6}, b1[3] = {0.5f, -1, 2}, b2[6] = {1, 1, 1, -1, -1, -1};
  for (int k = 0; k < 2; k++) {
    const int64_t da[2] = {2, 3}, db[2] = {k ? 2 : 1, 3};
    const float* bv = k ? b2 : b1;
    OnyxValue* in[2] = {0};
    ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, da, 2, a, sizeof a, &in[0]));
    ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, db, 2, bv, (size_t)db[0] * 3 * 4, &in[1]));
    const char* names[] = {"A", "B"};
    const char* outs[] = {"dA", "dB"};
    OnyxValue* got[2] = {0};
    ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, 2, outs, 2, got));
    /* dL/dY = 2Y; Y[r][c] = a[r][c] + b[k ? r : 0][c]. */
    float y[6], wantb[6] = {0};
    for (int r = 0; r < 2; r++)
      for (int c = 0; c < 3; c++) {
        y[r * 3 + c] = a[r * 3 + c] + bv[(k ? r : 0) * 3 + c];
        wantb[(k ? r : 0) * 3 + c] += 2 * y[r * 3 + c];
      }
    const OnyxTensor* ta = onyx_value_tensor(got[0]);
    const OnyxTensor* tb = onyx_value_tensor(got[1]);
    assert_int_equal(onyx_tensor_rank(tb), 2);
    assert_int_equal(onyx_tensor_dims(tb)[0], db[0]);
    const float* ga = onyx_tensor_data(ta);
    const float* gb = onyx_tensor_data(tb);
    for (int i = 0; i < 6; i++)
      assert_float_equal(ga[i], 2 * y[i], 1e-5);
    for (int i = 0; i < (int)db[0] * 3; i++)
      assert_float_equal(gb[i], wantb[i], 1e-5);
    onyx_values_release(got, 2);
    onyx_values_release(in, 2);
  }
  onyx_session_release(s);
}

/* Only the xs get gradients: the frozen W (a graph input not in xs) gets
 * none, and the result for an x that y does not depend on is zeros. */
static void test_frozen_and_unreached(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "ai.onnx.preview.training", 1);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_input(m, "W", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_input(m, "U", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_node(m, "Mul", "mul", "X,W", "Y");
  otm_attr_int(otm_node(m, "ReduceSum", "sum", "Y", "L"), "keepdims", 0);
  OxTestNode* g = otm_node(m, "Gradient", "grad", "", "dX,dU");
  otm_node_domain(g, "ai.onnx.preview.training");
  otm_attr_strings(g, "xs", 2, (const char* const[]){"X", "U"});
  otm_attr_string(g, "y", "L");
  otm_output(m, "dX", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_output(m, "dU", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  OnyxSession* s = open_bytes(m);
  const float x[2] = {1, 2}, w[2] = {3, -4}, u[2] = {5, 6};
  const int64_t d[1] = {2};
  OnyxValue* in[3] = {0};
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, d, 1, x, 8, &in[0]));
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, d, 1, w, 8, &in[1]));
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, d, 1, u, 8, &in[2]));
  const char* names[] = {"X", "W", "U"};
  const char* outs[] = {"dX", "dU"};
  OnyxValue* got[2] = {0};
  ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, 3, outs, 2, got));
  const float* gx = onyx_tensor_data(onyx_value_tensor(got[0]));
  const float* gu = onyx_tensor_data(onyx_value_tensor(got[1]));
  assert_float_equal(gx[0], 3, 0);
  assert_float_equal(gx[1], -4, 0);
  assert_float_equal(gu[0], 0, 0);
  assert_float_equal(gu[1], 0, 0);
  onyx_values_release(got, 2);
  onyx_values_release(in, 3);
  onyx_session_release(s);
}

/* Dropout in training mode: dA = R * mask / (1 - ratio), checked against
 * the mask the same run drew. */
static void test_dropout_training(void** state) {
  (void)state;
  if (!contract_kernels()) skip();
  current_case = "Dropout_training";
  OxTestModel* m = otm_new(13);
  otm_add_opset(m, "ai.onnx.preview.training", 1);
  const int64_t d[1] = {64};
  otm_input(m, "A", ONYX_ELEM_FLOAT32, 1, d);
  float r[64];
  for (int i = 0; i < 64; i++)
    r[i] = (float)(i % 7) - 3.0f;
  otm_initializer(m, "R", ONYX_ELEM_FLOAT32, 1, d, r);
  const float ratio = 0.25f;
  const uint8_t on = 1;
  otm_initializer(m, "ratio", ONYX_ELEM_FLOAT32, 0, NULL, &ratio);
  otm_initializer(m, "train", ONYX_ELEM_BOOL, 0, NULL, &on);
  otm_attr_int(otm_node(m, "Dropout", "drop", "A,ratio,train", "Y,mask"), "seed", 7);
  otm_node(m, "Mul", "mul", "Y,R", "YR");
  otm_attr_int(otm_node(m, "ReduceSum", "sum", "YR", "L"), "keepdims", 0);
  OxTestNode* g = otm_node(m, "Gradient", "grad", "", "dA");
  otm_node_domain(g, "ai.onnx.preview.training");
  otm_attr_strings(g, "xs", 1, (const char* const[]){"A"});
  otm_attr_string(g, "y", "L");
  otm_output(m, "mask", ONYX_ELEM_BOOL, 1, d);
  otm_output(m, "dA", ONYX_ELEM_FLOAT32, 1, d);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s);
  free(bytes);
  /* Skipped while the CPU provider's Dropout has no training mode. */
  if (st && strstr(onyx_status_message(st), "training mode not supported")) {
    onyx_status_release(st);
    skip();
  }
  ok(st);
  float a[64];
  for (int i = 0; i < 64; i++)
    a[i] = 1.0f + (float)i;
  OnyxValue* in[1] = {0};
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, d, 1, a, sizeof a, &in[0]));
  const char* names[] = {"A"};
  const char* outs[] = {"mask", "dA"};
  OnyxValue* got[2] = {0};
  ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, 1, outs, 2, got));
  const uint8_t* mk = onyx_tensor_data(onyx_value_tensor(got[0]));
  const float* ga = onyx_tensor_data(onyx_value_tensor(got[1]));
  int kept = 0;
  for (int i = 0; i < 64; i++) {
    kept += mk[i] != 0;
    assert_float_equal(ga[i], mk[i] ? r[i] / (1 - ratio) : 0.0f, 1e-5);
  }
  assert_true(kept > 0 && kept < 64); /* the mask is not trivial */
  onyx_values_release(got, 2);
  onyx_values_release(in, 1);
  onyx_session_release(s);
}

/* A rule that cannot handle its node: the message names the Gradient node,
 * the forward node and op, and the reason. */
/* A Loop before opset 11 on the path from the loss: an error naming the
 * op, the node and the path from the loss. */
static void test_loop_refused(void** state) {
  (void)state;
  OxTestModel* m = otm_new(10);
  otm_add_opset(m, "ai.onnx.preview.training", 1);
  otm_input(m, "A", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3});
  const int64_t trips = 2;
  otm_initializer(m, "M", ONYX_ELEM_INT64, 0, NULL, &trips);
  otm_begin_graph(m, "body");
  otm_input(m, "i", ONYX_ELEM_INT64, 0, NULL);
  otm_input(m, "c_in", ONYX_ELEM_BOOL, 0, NULL);
  otm_input(m, "v_in", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3});
  otm_node(m, "Identity", "b_c", "c_in", "c_out");
  otm_node(m, "Mul", "b_mul", "v_in,A", "v_out");
  otm_output(m, "c_out", ONYX_ELEM_BOOL, 0, NULL);
  otm_output(m, "v_out", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3});
  Onnx__GraphProto* body = otm_end_graph(m);
  otm_attr_graph(otm_node(m, "Loop", "loop0", "M,,A", "V"), "body", body);
  otm_node(m, "Exp", "exp0", "V", "E");
  otm_attr_int(otm_node(m, "ReduceSum", "sum", "E", "L"), "keepdims", 0);
  OxTestNode* g = otm_node(m, "Gradient", "grad", "", "dA");
  otm_node_domain(g, "ai.onnx.preview.training");
  otm_attr_strings(g, "xs", 1, (const char* const[]){"A"});
  otm_attr_string(g, "y", "L");
  otm_output(m, "dA", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3});
  const char* what[] = {"'grad' (Gradient)", "Loop has no gradient rule before opset 11",
                        "node 'loop0' (version 1)",
                        "path from the loss: 'L' <- node 'sum' (ReduceSum) <- node 'exp0' (Exp) "
                        "<- node 'loop0' (Loop)"};
  expect_create_error(m, what, 4);
}

static void test_rule_refuses_names_node(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "ai.onnx.preview.training", 1);
  otm_input(m, "A", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 3});
  otm_attr_string(otm_node(m, "Einsum", "trace", "A", "T"), "equation", "ii->i");
  otm_attr_int(otm_node(m, "ReduceSum", "sum", "T", "L"), "keepdims", 0);
  OxTestNode* g = otm_node(m, "Gradient", "grad", "", "dA");
  otm_node_domain(g, "ai.onnx.preview.training");
  otm_attr_strings(g, "xs", 1, (const char* const[]){"A"});
  otm_attr_string(g, "y", "L");
  otm_output(m, "dA", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 3});
  const char* what[] = {"'grad' (Gradient)", "node 'trace' (Einsum)", "'ii->i'",
                        "no letter repeated"};
  expect_create_error(m, what, 4);
}

/* The registry answers by domain, op and schema version. */
static void test_registry_versions(void** state) {
  (void)state;
  assert_null(ox_grad_rule_find("", "Gelu", 19)); /* ai.onnx Gelu is from 20 */
  assert_non_null(ox_grad_rule_find("", "Gelu", 20));
  assert_non_null(ox_grad_rule_find("com.onyx", "Gelu", 1));
  assert_null(ox_grad_rule_find("", "MaxPool", 1)); /* no Indices output before 8 */
  assert_non_null(ox_grad_rule_find("", "MaxPool", 8));
  assert_ptr_equal(ox_grad_rule_find("ai.onnx", "Relu", 14), ox_grad_rule_find("", "Relu", 14));
  assert_null(ox_grad_rule_find("", "Sin", 7));
  assert_null(ox_grad_rule_find("com.example", "Relu", 14));
  assert_null(ox_grad_rule_find("", "NoSuchOp", 1));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registry_versions),       cmocka_unit_test(test_rules_composed),
      cmocka_unit_test(test_rules_contract),          cmocka_unit_test(test_rules_dynamic_shapes),
      cmocka_unit_test(test_missing_rule_names_path), cmocka_unit_test(test_dynamic_broadcast),
      cmocka_unit_test(test_frozen_and_unreached),    cmocka_unit_test(test_dropout_training),
      cmocka_unit_test(test_rule_refuses_names_node), cmocka_unit_test(test_loop_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
