/* test_gradient_seq.c — the gradient rules of RNN, GRU and LSTM
 * (host/training/gradient_rules_seq.c, kernels providers/cpu/cpu_grad_seq.c)
 * against central finite differences in float64.
 *
 * Each case builds one recurrent node over random inputs, the scalar loss
 * L = sum_k sum(O_k * R_k) over the outputs the case uses (Y, Y_h, Y_c;
 * R_k fixed random tensors), and a Gradient node asking dL/dx for every
 * float input the case gives (X, W, R, and B, initial_h, initial_c, P when
 * present). The session's gradients are compared with
 * (L(x + h) - L(x - h)) / 2h, element by element (h = 1e-6, tolerance 1e-5
 * relative to max(1, |fd|)). The cases cover every direction, both layouts,
 * sequence_lens (with a zero length), GRU's linear_before_reset, LSTM
 * peepholes, and each output alone and together. Further tests: the rules
 * refuse non-default activations, clip and input_forget naming the node;
 * Resize in linear and cubic mode (its gradient rule emits ResizeGrad) over
 * each coordinate_transformation_mode it supports, scales and sizes, axes,
 * exclude_outside and cubic_coeff_a, up and down (the loss is linear in X:
 * h = 1e-3, tolerance 1e-7). */
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

static const char* current_case = "";

static void ok(OnyxStatus* st) {
  if (st) fail_msg("%s: unexpected error: %s", current_case, onyx_status_message(st));
}

static uint64_t rng_state = 1;

static double urand(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng_state >> 11) / 9007199254740992.0;
}

typedef struct SeqCase {
  const char* name;
  const char* op; /* RNN, GRU, LSTM */
  const char* direction;
  int layout;
  int64_t S, N, I, H;
  bool bias, h0, c0, peep, lbr;
  const int32_t* lens; /* N values, or NULL */
  bool use_y, use_yh, use_yc;
} SeqCase;

enum { MAX_IN = 7 };

typedef struct Input {
  char name[16];
  int rank;
  int64_t dims[4];
  size_t count;
  double* v;
} Input;

static size_t prod(const int64_t* d, int r) {
  size_t c = 1;
  for (int i = 0; i < r; i++)
    c *= (size_t)d[i];
  return c;
}

static void add_input(Input* in, size_t* n, const char* name, int rank, const int64_t* dims,
                      double scale) {
  Input* x = &in[(*n)++];
  snprintf(x->name, sizeof x->name, "%s", name);
  x->rank = rank;
  memcpy(x->dims, dims, (size_t)rank * sizeof *dims);
  x->count = prod(dims, rank);
  x->v = malloc((x->count ? x->count : 1) * sizeof(double));
  for (size_t i = 0; i < x->count; i++)
    x->v[i] = scale * (2 * urand() - 1);
}

static void init_rand(OxTestModel* m, const char* name, int rank, const int64_t* dims) {
  size_t n = prod(dims, rank);
  double* v = malloc((n ? n : 1) * sizeof *v);
  for (size_t i = 0; i < n; i++)
    v[i] = 2 * urand() - 1;
  otm_initializer(m, name, ONYX_ELEM_FLOAT64, rank, dims, v);
  free(v);
}

static double run_loss(OnyxSession* s, Input* in, size_t n_in) {
  OnyxValue* vals[MAX_IN] = {0};
  const char* names[MAX_IN];
  for (size_t i = 0; i < n_in; i++) {
    ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT64, in[i].dims, (size_t)in[i].rank, in[i].v,
                                in[i].count * sizeof(double), &vals[i]));
    names[i] = in[i].name;
  }
  const char* outs[1] = {"L"};
  OnyxValue* got[1] = {0};
  ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)vals, n_in, outs, 1, got));
  double L = *(const double*)onyx_tensor_data(onyx_value_tensor(got[0]));
  onyx_values_release(got, 1);
  onyx_values_release(vals, n_in);
  return L;
}

/* Drops the trailing commas of a node's input or output list (trailing
 * absent optionals). */
static void trim_commas(char* s) {
  size_t n = strlen(s);
  while (n && s[n - 1] == ',')
    s[--n] = '\0';
}

static void check_seq(const SeqCase* c) {
  current_case = c->name;
  rng_state = 0x9e3779b97f4a7c15ull;
  for (const char* p = c->name; *p; p++)
    rng_state = (rng_state ^ (uint8_t)*p) * 1099511628211ull;
  const bool lstm = !strcmp(c->op, "LSTM");
  const int64_t G = !strcmp(c->op, "RNN") ? 1 : !strcmp(c->op, "GRU") ? 3 : 4;
  const int64_t D = !strcmp(c->direction, "bidirectional") ? 2 : 1;
  const int64_t S = c->S, N = c->N, I = c->I, H = c->H;
  Input in[MAX_IN];
  size_t n_in = 0;
  const int64_t xd[3] = {c->layout ? N : S, c->layout ? S : N, I};
  const int64_t wd[3] = {D, G * H, I}, rd[3] = {D, G * H, H}, bd[2] = {D, 2 * G * H};
  const int64_t hd[3] = {c->layout ? N : D, c->layout ? D : N, H}, pd[2] = {D, 3 * H};
  const int64_t yd[4] = {c->layout ? N : S, c->layout ? S : D, c->layout ? D : N, H};
  add_input(in, &n_in, "X", 3, xd, 1.0);
  add_input(in, &n_in, "W", 3, wd, 0.6);
  add_input(in, &n_in, "R", 3, rd, 0.6);
  if (c->bias) add_input(in, &n_in, "B", 2, bd, 0.5);
  if (c->h0) add_input(in, &n_in, "h0", 3, hd, 0.8);
  if (lstm && c->c0) add_input(in, &n_in, "c0", 3, hd, 0.8);
  if (lstm && c->peep) add_input(in, &n_in, "P", 2, pd, 0.5);

  OxTestModel* m = otm_new(14);
  otm_add_opset(m, "ai.onnx.preview.training", 1);
  for (size_t i = 0; i < n_in; i++)
    otm_input(m, in[i].name, ONYX_ELEM_FLOAT64, in[i].rank, in[i].dims);
  if (c->lens) otm_initializer(m, "lens", ONYX_ELEM_INT32, 1, (int64_t[]){N}, c->lens);
  char ins[128];
  snprintf(ins, sizeof ins, "X,W,R,%s,%s,%s%s%s", c->bias ? "B" : "", c->lens ? "lens" : "",
           c->h0 ? "h0" : "", lstm ? (c->c0 ? ",c0" : ",") : "", lstm ? (c->peep ? ",P" : "") : "");
  char outs[32];
  snprintf(outs, sizeof outs, "%s,%s%s", c->use_y ? "Y" : "", c->use_yh ? "Y_h" : "",
           lstm && c->use_yc ? ",Y_c" : "");
  trim_commas(ins);
  trim_commas(outs);
  OxTestNode* n = otm_node(m, c->op, "rnn", ins, outs);
  otm_attr_int(n, "hidden_size", H);
  otm_attr_string(n, "direction", c->direction);
  if (c->layout) otm_attr_int(n, "layout", 1);
  if (c->lbr) otm_attr_int(n, "linear_before_reset", 1);
  /* L = sum of the used outputs times fixed random tensors. */
  const char* last = NULL;
  const struct {
    bool use;
    const char *o, *r, *p, *s;
    int rank;
    const int64_t* d;
  } parts[] = {{c->use_y, "Y", "RY", "PY", "SY", 4, yd},
               {c->use_yh, "Y_h", "RH", "PH", "SH", 3, hd},
               {lstm && c->use_yc, "Y_c", "RC", "PC", "SC", 3, hd}};
  char buf[3][32];
  for (size_t k = 0; k < 3; k++) {
    if (!parts[k].use) continue;
    init_rand(m, parts[k].r, parts[k].rank, parts[k].d);
    snprintf(buf[k], sizeof buf[k], "%s,%s", parts[k].o, parts[k].r);
    otm_node(m, "Mul", parts[k].p, buf[k], parts[k].p);
    otm_attr_int(otm_node(m, "ReduceSum", parts[k].s, parts[k].p, parts[k].s), "keepdims", 0);
    if (last) {
      static char acc[3][32], sum_in[3][80];
      snprintf(acc[k], sizeof acc[k], "acc%zu", k);
      snprintf(sum_in[k], sizeof sum_in[k], "%s,%s", last, parts[k].s);
      otm_node(m, "Add", acc[k], sum_in[k], acc[k]);
      last = acc[k];
    } else {
      last = parts[k].s;
    }
  }
  otm_node(m, "Identity", "loss", last, "L");
  char gouts[128] = "";
  const char* xs[MAX_IN];
  char gn[MAX_IN][20];
  for (size_t i = 0; i < n_in; i++) {
    snprintf(gn[i], sizeof gn[i], "d_%.15s", in[i].name);
    xs[i] = in[i].name;
    strcat(gouts, i ? "," : "");
    strcat(gouts, gn[i]);
  }
  OxTestNode* g = otm_node(m, "Gradient", "grad", "", gouts);
  otm_node_domain(g, "ai.onnx.preview.training");
  otm_attr_strings(g, "xs", n_in, xs);
  otm_attr_string(g, "y", "L");
  otm_output(m, "L", ONYX_ELEM_FLOAT64, 0, NULL);
  for (size_t i = 0; i < n_in; i++)
    otm_output(m, gn[i], ONYX_ELEM_FLOAT64, in[i].rank, in[i].dims);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s);
  free(bytes);
  ok(st);

  OnyxValue* vals[MAX_IN] = {0};
  for (size_t i = 0; i < n_in; i++)
    ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT64, in[i].dims, (size_t)in[i].rank, in[i].v,
                                in[i].count * sizeof(double), &vals[i]));
  const char* gnames[MAX_IN];
  for (size_t i = 0; i < n_in; i++)
    gnames[i] = gn[i];
  OnyxValue* got[MAX_IN] = {0};
  ok(onyx_session_run(s, NULL, xs, (const OnyxValue* const*)vals, n_in, gnames, n_in, got));
  const double h = 1e-6, tol = 1e-5;
  double max_abs = 0;
  for (size_t i = 0; i < n_in; i++) {
    const OnyxTensor* t = onyx_value_tensor(got[i]);
    assert_non_null(t);
    const double* an = onyx_tensor_data(t);
    for (size_t k = 0; k < in[i].count; k++) {
      const double keep = in[i].v[k];
      in[i].v[k] = keep + h;
      const double lp = run_loss(s, in, n_in);
      in[i].v[k] = keep - h;
      const double lm = run_loss(s, in, n_in);
      in[i].v[k] = keep;
      const double fd = (lp - lm) / (2 * h);
      if (!(fabs(an[k] - fd) <= tol * fmax(1.0, fabs(fd))))
        fail_msg("%s: d%s[%zu] = %.9g, finite difference %.9g", c->name, in[i].name, k, an[k], fd);
      max_abs = fmax(max_abs, fabs(fd));
    }
  }
  /* The loss depends on the inputs: some gradient is not zero. */
  assert_true(max_abs > 1e-3);
  onyx_values_release(got, n_in);
  onyx_values_release(vals, n_in);
  for (size_t i = 0; i < n_in; i++)
    free(in[i].v);
  onyx_session_release(s);
}

static const int32_t LENS3[3] = {3, 1, 0};
static const int32_t LENS2[2] = {2, 4};

static const SeqCase CASES[] = {
    /* RNN */
    {"RNN forward", "RNN", "forward", 0, 3, 2, 3, 4, true, true, false, false, false, NULL, true,
     true, false},
    {"RNN reverse no bias", "RNN", "reverse", 0, 4, 2, 2, 3, false, false, false, false, false,
     NULL, true, false, false},
    {"RNN bidirectional lens", "RNN", "bidirectional", 0, 4, 2, 3, 2, true, true, false, false,
     false, LENS2, true, true, false},
    {"RNN layout 1", "RNN", "bidirectional", 1, 3, 2, 2, 3, true, true, false, false, false, NULL,
     true, true, false},
    /* GRU */
    {"GRU forward", "GRU", "forward", 0, 3, 2, 3, 3, true, true, false, false, false, NULL, true,
     true, false},
    {"GRU linear_before_reset", "GRU", "forward", 0, 3, 2, 3, 3, true, true, false, false, true,
     NULL, true, true, false},
    {"GRU reverse Y_h only", "GRU", "reverse", 0, 4, 3, 2, 2, true, false, false, false, false,
     NULL, false, true, false},
    {"GRU bidirectional lens", "GRU", "bidirectional", 0, 3, 3, 2, 3, true, true, false, false,
     false, LENS3, true, true, false},
    {"GRU bidirectional lbr layout 1", "GRU", "bidirectional", 1, 3, 2, 2, 2, true, true, false,
     false, true, NULL, true, true, false},
    /* LSTM */
    {"LSTM forward", "LSTM", "forward", 0, 3, 2, 3, 3, true, true, true, false, false, NULL, true,
     true, true},
    {"LSTM peepholes", "LSTM", "forward", 0, 3, 2, 2, 3, true, true, true, true, false, NULL, true,
     true, true},
    {"LSTM reverse no bias no state", "LSTM", "reverse", 0, 3, 2, 2, 2, false, false, false, false,
     false, NULL, true, false, false},
    {"LSTM Y_c only", "LSTM", "forward", 0, 3, 2, 2, 2, true, true, true, false, false, NULL, false,
     false, true},
    {"LSTM bidirectional lens peepholes", "LSTM", "bidirectional", 0, 3, 3, 2, 2, true, true, true,
     true, false, LENS3, true, true, true},
    {"LSTM bidirectional layout 1", "LSTM", "bidirectional", 1, 4, 2, 3, 2, true, true, true, false,
     false, LENS2, true, true, true},
};

static void test_seq_rules(void** state) {
  (void)state;
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
    check_seq(&CASES[i]);
}

/* --- Resize in linear and cubic mode ----------------------------------------------- */
typedef struct ResizeCase {
  const char* name;
  int opset;
  const char* mode;
  const char* coord;
  int rank;
  int64_t x[4];
  bool use_sizes;   /* sizes (stretch) instead of scales */
  double scales[4]; /* per resized axis */
  int64_t sizes[4]; /* per resized axis */
  int n_axes;       /* > 0: the axes attribute (opset 18+) */
  int64_t axes[4];
  bool exclude_outside;
  double cubic_a; /* 0: the default */
  int64_t y[4];   /* the output shape */
} ResizeCase;

static void check_resize(const ResizeCase* c) {
  current_case = c->name;
  rng_state = 0x9e3779b97f4a7c15ull;
  for (const char* p = c->name; *p; p++)
    rng_state = (rng_state ^ (uint8_t)*p) * 1099511628211ull;
  Input in[1];
  size_t n_in = 0;
  add_input(in, &n_in, "X", c->rank, c->x, 1.0);
  OxTestModel* m = otm_new(c->opset);
  otm_add_opset(m, "ai.onnx.preview.training", 1);
  otm_input(m, "X", ONYX_ELEM_FLOAT64, c->rank, c->x);
  const int na = c->n_axes ? c->n_axes : c->rank;
  OxTestNode* n;
  if (c->use_sizes) {
    otm_initializer(m, "sizes", ONYX_ELEM_INT64, 1, (int64_t[]){na}, c->sizes);
    n = otm_node(m, "Resize", "rs", "X,,,sizes", "Y");
  } else {
    float sc[4];
    for (int i = 0; i < na; i++)
      sc[i] = (float)c->scales[i];
    otm_initializer(m, "scales", ONYX_ELEM_FLOAT32, 1, (int64_t[]){na}, sc);
    n = otm_node(m, "Resize", "rs", "X,,scales", "Y");
  }
  otm_attr_string(n, "mode", c->mode);
  otm_attr_string(n, "coordinate_transformation_mode", c->coord);
  if (c->n_axes) otm_attr_ints(n, "axes", (size_t)c->n_axes, c->axes);
  if (c->exclude_outside) otm_attr_int(n, "exclude_outside", 1);
  if (c->cubic_a != 0) otm_attr_float(n, "cubic_coeff_a", (float)c->cubic_a);
  init_rand(m, "RY", c->rank, c->y);
  otm_node(m, "Mul", "mul", "Y,RY", "P");
  otm_attr_int(otm_node(m, "ReduceSum", "sum", "P", "L"), "keepdims", 0);
  OxTestNode* g = otm_node(m, "Gradient", "grad", "", "d_X");
  otm_node_domain(g, "ai.onnx.preview.training");
  otm_attr_strings(g, "xs", 1, (const char* const[]){"X"});
  otm_attr_string(g, "y", "L");
  otm_output(m, "L", ONYX_ELEM_FLOAT64, 0, NULL);
  otm_output(m, "d_X", ONYX_ELEM_FLOAT64, c->rank, c->x);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s);
  free(bytes);
  ok(st);
  OnyxValue* val = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT64, in[0].dims, (size_t)in[0].rank, in[0].v,
                              in[0].count * sizeof(double), &val));
  const char* xs[1] = {"X"};
  const char* outs[1] = {"d_X"};
  OnyxValue* got[1] = {0};
  ok(onyx_session_run(s, NULL, xs, (const OnyxValue* const*)&val, 1, outs, 1, got));
  const double* an = onyx_tensor_data(onyx_value_tensor(got[0]));
  /* The loss is linear in X: the finite difference is exact up to rounding. */
  const double h = 1e-3, tol = 1e-7;
  double max_abs = 0;
  for (size_t k = 0; k < in[0].count; k++) {
    const double keep = in[0].v[k];
    in[0].v[k] = keep + h;
    const double lp = run_loss(s, in, 1);
    in[0].v[k] = keep - h;
    const double lm = run_loss(s, in, 1);
    in[0].v[k] = keep;
    const double fd = (lp - lm) / (2 * h);
    if (!(fabs(an[k] - fd) <= tol * fmax(1.0, fabs(fd))))
      fail_msg("%s: dX[%zu] = %.12g, finite difference %.12g", c->name, k, an[k], fd);
    max_abs = fmax(max_abs, fabs(fd));
  }
  assert_true(max_abs > 1e-3);
  onyx_values_release(got, 1);
  onyx_value_release(val);
  free(in[0].v);
  onyx_session_release(s);
}

static const ResizeCase RESIZE_CASES[] = {
    {"linear half_pixel up",
     13,
     "linear",
     "half_pixel",
     4,
     {1, 2, 3, 4},
     false,
     {1, 1, 2, 1.5},
     {0},
     0,
     {0},
     false,
     0,
     {1, 2, 6, 6}},
    {"linear half_pixel down",
     13,
     "linear",
     "half_pixel",
     4,
     {1, 1, 5, 7},
     false,
     {1, 1, 0.6, 0.5},
     {0},
     0,
     {0},
     false,
     0,
     {1, 1, 3, 3}},
    {"linear align_corners sizes",
     13,
     "linear",
     "align_corners",
     4,
     {2, 1, 3, 4},
     true,
     {0},
     {2, 1, 5, 7},
     0,
     {0},
     false,
     0,
     {2, 1, 5, 7}},
    {"linear asymmetric",
     13,
     "linear",
     "asymmetric",
     3,
     {2, 3, 4},
     false,
     {1, 2, 1.75},
     {0},
     0,
     {0},
     false,
     0,
     {2, 6, 7}},
    {"linear pytorch_half_pixel",
     13,
     "linear",
     "pytorch_half_pixel",
     4,
     {1, 2, 4, 1},
     false,
     {1, 1, 1.5, 1},
     {0},
     0,
     {0},
     false,
     0,
     {1, 2, 6, 1}},
    {"linear half_pixel_symmetric axes",
     19,
     "linear",
     "half_pixel_symmetric",
     4,
     {1, 2, 3, 5},
     false,
     {2.5, 0.8},
     {0},
     2,
     {2, 3},
     false,
     0,
     {1, 2, 7, 4}},
    {"cubic half_pixel",
     13,
     "cubic",
     "half_pixel",
     4,
     {1, 1, 4, 5},
     false,
     {1, 1, 2, 1.6},
     {0},
     0,
     {0},
     false,
     0,
     {1, 1, 8, 8}},
    {"cubic exclude_outside a=-0.5",
     13,
     "cubic",
     "half_pixel",
     4,
     {1, 2, 4, 3},
     false,
     {1, 1, 1.5, 2},
     {0},
     0,
     {0},
     true,
     -0.5,
     {1, 2, 6, 6}},
    {"cubic align_corners down sizes",
     13,
     "cubic",
     "align_corners",
     2,
     {7, 6},
     true,
     {0},
     {4, 9},
     0,
     {0},
     false,
     0,
     {4, 9}},
};

static void test_resize_rules(void** state) {
  (void)state;
  for (size_t i = 0; i < sizeof RESIZE_CASES / sizeof RESIZE_CASES[0]; i++)
    check_resize(&RESIZE_CASES[i]);
}

/* A refused node: session creation fails with every string of `what`. */
static void expect_refused(const char* op, void (*attrs)(OxTestNode* n), const char* const* what,
                           size_t n_what) {
  OxTestModel* m = otm_new(14);
  otm_add_opset(m, "ai.onnx.preview.training", 1);
  const int64_t G = !strcmp(op, "GRU") ? 3 : 4;
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 1, 2});
  otm_input(m, "W", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, G * 2, 2});
  otm_input(m, "R", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, G * 2, 2});
  OxTestNode* n = otm_node(m, op, "cell", "X,W,R", "Y");
  otm_attr_int(n, "hidden_size", 2);
  attrs(n);
  otm_attr_int(otm_node(m, "ReduceSum", "sum", "Y", "L"), "keepdims", 0);
  OxTestNode* g = otm_node(m, "Gradient", "grad", "", "dW");
  otm_node_domain(g, "ai.onnx.preview.training");
  otm_attr_strings(g, "xs", 1, (const char* const[]){"W"});
  otm_attr_string(g, "y", "L");
  otm_output(m, "dW", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, G * 2, 2});
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s);
  free(bytes);
  assert_non_null(st);
  const char* msg = onyx_status_message(st);
  for (size_t i = 0; i < n_what; i++)
    if (!strstr(msg, what[i])) fail_msg("'%s' not in: %s", what[i], msg);
  onyx_status_release(st);
  onyx_session_release(s);
}

static void relu_acts(OxTestNode* n) {
  otm_attr_strings(n, "activations", 3, (const char* const[]){"Sigmoid", "Relu", "Tanh"});
}
static void with_clip(OxTestNode* n) {
  otm_attr_float(n, "clip", 3.0f);
}
static void input_forget(OxTestNode* n) {
  otm_attr_int(n, "input_forget", 1);
}
static void gru_acts(OxTestNode* n) {
  otm_attr_strings(n, "activations", 2, (const char* const[]){"HardSigmoid", "Tanh"});
}
static void default_acts(OxTestNode* n) {
  otm_attr_strings(n, "activations", 3, (const char* const[]){"sigmoid", "tanh", "Tanh"});
}

static void test_refusals(void** state) {
  (void)state;
  const char* acts[] = {"'grad' (Gradient)", "node 'cell' (LSTM)", "default activations", "'Relu'"};
  expect_refused("LSTM", relu_acts, acts, 4);
  const char* clip[] = {"node 'cell' (LSTM)", "clip"};
  expect_refused("LSTM", with_clip, clip, 2);
  const char* forget[] = {"node 'cell' (LSTM)", "input_forget"};
  expect_refused("LSTM", input_forget, forget, 2);
  const char* gru[] = {"node 'cell' (GRU)", "'HardSigmoid'"};
  expect_refused("GRU", gru_acts, gru, 2);
}

/* The default activations spelled out (any case) are accepted. */
static void test_default_activations_named(void** state) {
  (void)state;
  current_case = "LSTM named default activations";
  OxTestModel* m = otm_new(14);
  otm_add_opset(m, "ai.onnx.preview.training", 1);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 1, 2});
  otm_input(m, "W", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 8, 2});
  otm_input(m, "R", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 8, 2});
  OxTestNode* n = otm_node(m, "LSTM", "cell", "X,W,R", "Y");
  otm_attr_int(n, "hidden_size", 2);
  default_acts(n);
  otm_attr_int(otm_node(m, "ReduceSum", "sum", "Y", "L"), "keepdims", 0);
  OxTestNode* g = otm_node(m, "Gradient", "grad", "", "dW");
  otm_node_domain(g, "ai.onnx.preview.training");
  otm_attr_strings(g, "xs", 1, (const char* const[]){"W"});
  otm_attr_string(g, "y", "L");
  otm_output(m, "dW", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 8, 2});
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s));
  free(bytes);
  onyx_session_release(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_seq_rules),
      cmocka_unit_test(test_resize_rules),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_default_activations_named),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
