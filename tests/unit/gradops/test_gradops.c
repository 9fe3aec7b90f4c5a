/* test_gradops.c — the com.onyx.training gradient ops on the CPU provider,
 * through a session, float32 and float64. Every expected value is computed
 * here in plain C float64, independently of the kernels: central finite
 * differences of the forward function written out naively (activations,
 * softmax, SoftmaxCrossEntropyLoss, BatchNormalization, LayerNormalization,
 * a direct convolution), direct loops over the definition (ConvGrad's
 * seven-loop reference, pools, GatherGrad, DropoutGrad), plus bad input
 * that must be an error naming the node. */
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

#define F32      ONYX_ELEM_FLOAT32
#define F64      ONYX_ELEM_FLOAT64
#define TRAINING "com.onyx.training"
#define MAXR     6

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

/* --- Random values ---------------------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint32_t rnd_u32(void) {
  rng = rng * 6364136223846793005u + 1442695040888963407u;
  return (uint32_t)(rng >> 33);
}
/* Uniform in [lo, hi). */
static double rnd(double lo, double hi) {
  return lo + (hi - lo) * (rnd_u32() / 2147483648.0);
}
static int64_t rnd_int(int64_t lo, int64_t hi) { /* [lo, hi] */
  return lo + (int64_t)(rnd_u32() % (uint32_t)(hi - lo + 1));
}
static double* rnd_vec(size_t n, double lo, double hi) {
  double* v = malloc((n ? n : 1) * sizeof *v);
  for (size_t i = 0; i < n; i++)
    v[i] = rnd(lo, hi);
  return v;
}
/* Rounds values to float32 when the run is float32, so that the reference
 * sees the kernel's inputs. */
static void round_to(int elem, double* v, size_t n) {
  if (elem == F32)
    for (size_t i = 0; i < n; i++)
      v[i] = (float)v[i];
}

/* --- Models and runs ----------------------------------------------------------------- */

typedef struct In {
  const char* name;
  int elem;
  int rank;
  int64_t dims[MAXR];
  const double* f;  /* float inputs */
  const int64_t* i; /* int32/int64 inputs */
  const uint8_t* b; /* bool inputs */
  bool initializer; /* a constant rather than a feed */
} In;

static size_t count_of(const int64_t* d, int rank) {
  size_t c = 1;
  for (int i = 0; i < rank; i++)
    c *= (size_t)d[i];
  return c;
}

/* The input's bytes in its element type (malloc'd). */
static void* in_bytes(const In* in, size_t* nb) {
  const size_t n = count_of(in->dims, in->rank);
  *nb = n * onyx_elem_type_size((OnyxElemType)in->elem);
  void* p = malloc(*nb ? *nb : 1);
  for (size_t k = 0; k < n; k++)
    switch (in->elem) {
    case F32:
      ((float*)p)[k] = (float)in->f[k];
      break;
    case F64:
      ((double*)p)[k] = in->f[k];
      break;
    case ONYX_ELEM_INT64:
      ((int64_t*)p)[k] = in->i[k];
      break;
    case ONYX_ELEM_INT32:
      ((int32_t*)p)[k] = (int32_t)in->i[k];
      break;
    case ONYX_ELEM_BOOL:
      ((uint8_t*)p)[k] = in->b[k];
      break;
    default:
      fail_msg("type %d", in->elem);
    }
  return p;
}

/* A model importing ai.onnx 17 and com.onyx.training 1, with `ins` as its
 * inputs (or initializers) and one node of `op` named `name`. */
static OxTestModel* grad_model(const In* ins, size_t n, const char* op, const char* name,
                               const char* inputs, const char* outputs, OxTestNode** node) {
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, TRAINING, 1);
  for (size_t k = 0; k < n; k++) {
    if (ins[k].initializer) {
      size_t nb;
      void* p = in_bytes(&ins[k], &nb);
      otm_initializer(m, ins[k].name, ins[k].elem, ins[k].rank, ins[k].dims, p);
      free(p);
    } else {
      otm_input(m, ins[k].name, ins[k].elem, ins[k].rank, ins[k].dims);
    }
  }
  *node = otm_node(m, op, name, inputs, outputs);
  otm_node_domain(*node, TRAINING);
  return m;
}

/* Creates a session (threads > 0: that many; max_ms > 0: a run time
 * limit), feeds the non-constant inputs, runs, returns the named outputs or
 * the create/run error. Frees m. */
static OnyxStatus* run_opts(OxTestModel* m, const In* ins, size_t n, const char* const* outs,
                            size_t n_out, OnyxValue** got, int threads, uint64_t max_ms) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  if (threads > 0) ok(onyx_session_options_set_threads(o, threads));
  if (max_ms) ok(onyx_session_options_set_max_run_ms(o, max_ms));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  free(bytes);
  if (st) return st;
  OnyxValue* in[8] = {0};
  const char* names[8];
  size_t fed = 0;
  for (size_t k = 0; k < n; k++) {
    if (ins[k].initializer) continue;
    size_t nb;
    void* p = in_bytes(&ins[k], &nb);
    names[fed] = ins[k].name;
    ok(onyx_value_create_tensor((OnyxElemType)ins[k].elem, ins[k].dims, (size_t)ins[k].rank, p, nb,
                                &in[fed]));
    free(p);
    fed++;
  }
  st = onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, fed, outs, n_out, got);
  onyx_values_release(in, fed);
  onyx_session_release(s);
  return st;
}

static OnyxStatus* run(OxTestModel* m, const In* ins, size_t n, const char* const* outs,
                       size_t n_out, OnyxValue** got) {
  return run_opts(m, ins, n, outs, n_out, got, 0, 0);
}

/* Output v must have shape dims and values within tol (relative to
 * 1 + |want|) of want; a NaN in want is not compared. */
static void expect_close(const OnyxValue* v, const double* want, const int64_t* dims, int rank,
                         double tol, const char* what) {
  const OnyxTensor* t = onyx_value_tensor(v);
  assert_non_null(t);
  assert_int_equal(onyx_tensor_rank(t), rank);
  if (rank) assert_memory_equal(onyx_tensor_dims(t), dims, (size_t)rank * sizeof *dims);
  const size_t n = count_of(dims, rank);
  assert_int_equal(onyx_tensor_elem_count(t), n);
  const int elem = onyx_tensor_elem_type(t);
  for (size_t i = 0; i < n; i++) {
    const double g = elem == F32 ? ((const float*)onyx_tensor_data(t))[i]
                                 : ((const double*)onyx_tensor_data(t))[i];
    if (!isnan(want[i]) && !(fabs(g - want[i]) <= tol * (1.0 + fabs(want[i]))))
      fail_msg("%s: element %zu: got %.9g, want %.9g", what, i, g, want[i]);
  }
}

/* Runs a model expected to fail; the message must name the node and
 * contain `what`. */
static void expect_error(OxTestModel* m, const In* ins, size_t n, const char* out, const char* node,
                         const char* what) {
  OnyxValue* got[1] = {0};
  OnyxStatus* st = run(m, ins, n, (const char*[]){out}, 1, got);
  if (!st) {
    onyx_values_release(got, 1);
    fail_msg("expected an error mentioning '%s'", what);
  }
  const char* msg = onyx_status_message(st);
  if (!strstr(msg, node) || !strstr(msg, what))
    fail_msg("error '%s' should name node '%s' and mention '%s'", msg, node, what);
  onyx_status_release(st);
}

static double tol_for(int elem, double f32, double f64) {
  return elem == F32 ? f32 : f64;
}

/* --- Elementwise activation grads ------------------------------------------------------ */

static double f_relu(double x) {
  return x > 0 ? x : 0;
}
static double f_sigmoid(double x) {
  return 1.0 / (1.0 + exp(-x));
}
static double f_tanh(double x) {
  return tanh(x);
}
static double f_gelu(double x) {
  return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}
static double f_fast_gelu(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

typedef struct EwCase {
  const char* op;
  double (*f)(double);
  bool takes_y; /* the op's second input is Y = f(X), not X */
} EwCase;

static void run_ew(const EwCase* c, int elem, const int64_t* dims, int rank) {
  const size_t n = count_of(dims, rank);
  double* x = rnd_vec(n, -3, 3);
  double* dy = rnd_vec(n, -1, 1);
  for (size_t i = 0; i < n; i++)
    if (fabs(x[i]) < 1e-3) x[i] = 0.5; /* keep ReluGrad's finite differences off the kink */
  round_to(elem, x, n);
  round_to(elem, dy, n);
  double* second = malloc(n * sizeof *second);
  double* want = malloc(n * sizeof *want);
  const double h = 1e-5;
  for (size_t i = 0; i < n; i++) {
    second[i] = c->takes_y ? c->f(x[i]) : x[i];
    want[i] = dy[i] * (c->f(x[i] + h) - c->f(x[i] - h)) / (2 * h);
  }
  In in[2] = {
      {.name = "dY", .elem = elem, .rank = rank, .dims = {0}, .f = dy},
      {.name = c->takes_y ? "Y" : "X", .elem = elem, .rank = rank, .dims = {0}, .f = second}};
  memcpy(in[0].dims, dims, (size_t)rank * sizeof *dims);
  memcpy(in[1].dims, dims, (size_t)rank * sizeof *dims);
  OxTestNode* node;
  char inputs[16];
  snprintf(inputs, sizeof inputs, "dY,%s", in[1].name);
  OxTestModel* m = grad_model(in, 2, c->op, "g", inputs, "dX", &node);
  otm_output(m, "dX", elem, -1, NULL);
  OnyxValue* got[1] = {0};
  ok(run(m, in, 2, (const char*[]){"dX"}, 1, got));
  expect_close(got[0], want, dims, rank, tol_for(elem, 2e-4, 1e-7), c->op);
  onyx_values_release(got, 1);
  free(x);
  free(dy);
  free(second);
  free(want);
}

static void test_elementwise_grads(void** state) {
  (void)state;
  static const EwCase cases[] = {{"ReluGrad", f_relu, false},
                                 {"SigmoidGrad", f_sigmoid, true},
                                 {"TanhGrad", f_tanh, true},
                                 {"GeluGrad", f_gelu, false},
                                 {"FastGeluGrad", f_fast_gelu, false}};
  const int64_t small[3] = {3, 5, 7}, large[1] = {70001}; /* large: the pool and tails */
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int e = 0; e < 2; e++) {
      const int elem = e ? F64 : F32;
      run_ew(&cases[k], elem, small, 3);
      run_ew(&cases[k], elem, large, 1);
    }
}

/* --- SoftmaxGrad, LogSoftmaxGrad ---------------------------------------------------------- */

/* softmax (or log-softmax) of the line x[0], x[st], ... (len values) into y. */
static void softmax_line(const double* x, size_t len, size_t st, bool log_form, double* y) {
  double mx = -INFINITY, s = 0;
  for (size_t k = 0; k < len; k++)
    mx = fmax(mx, x[k * st]);
  for (size_t k = 0; k < len; k++)
    s += exp(x[k * st] - mx);
  for (size_t k = 0; k < len; k++)
    y[k] = log_form ? x[k * st] - mx - log(s) : exp(x[k * st] - mx) / s;
}

static void run_softmax(bool log_form, int elem, const int64_t* dims, int rank, int64_t axis) {
  const size_t n = count_of(dims, rank), ax = (size_t)(axis < 0 ? axis + rank : axis);
  const size_t len = (size_t)dims[ax], inner = count_of(dims + ax + 1, rank - (int)ax - 1);
  double* x = rnd_vec(n, -2, 2);
  double* dy = rnd_vec(n, -1, 1);
  round_to(elem, dy, n);
  double *y = malloc(n * sizeof *y), *want = calloc(n, sizeof *want);
  double *lp = malloc(len * sizeof *lp), *lm = malloc(len * sizeof *lm);
  const double h = 1e-5;
  for (size_t line = 0; line < n / len; line++) {
    const size_t base = line / inner * len * inner + line % inner;
    softmax_line(x + base, len, inner, log_form, lp);
    for (size_t k = 0; k < len; k++)
      y[base + k * inner] = lp[k];
    /* long tensors: the finite differences of every 16th line only (the
     * others are not compared) */
    if (n > 4096 && line % 16) {
      for (size_t i = 0; i < len; i++)
        want[base + i * inner] = NAN;
      continue;
    }
    for (size_t i = 0; i < len; i++) { /* d(sum_j dY_j Y_j) / dx_i */
      double* xi = &x[base + i * inner];
      const double keep = *xi;
      *xi = keep + h;
      softmax_line(x + base, len, inner, log_form, lp);
      *xi = keep - h;
      softmax_line(x + base, len, inner, log_form, lm);
      *xi = keep;
      double s = 0;
      for (size_t j = 0; j < len; j++)
        s += dy[base + j * inner] * (lp[j] - lm[j]) / (2 * h);
      want[base + i * inner] = s;
    }
  }
  round_to(elem, y, n);
  In in[2] = {{.name = "dY", .elem = elem, .rank = rank, .dims = {0}, .f = dy},
              {.name = "Y", .elem = elem, .rank = rank, .dims = {0}, .f = y}};
  memcpy(in[0].dims, dims, (size_t)rank * sizeof *dims);
  memcpy(in[1].dims, dims, (size_t)rank * sizeof *dims);
  OxTestNode* node;
  const char* op = log_form ? "LogSoftmaxGrad" : "SoftmaxGrad";
  OxTestModel* m = grad_model(in, 2, op, "sg", "dY,Y", "dX", &node);
  otm_attr_int(node, "axis", axis);
  otm_output(m, "dX", elem, -1, NULL);
  OnyxValue* got[1] = {0};
  ok(run(m, in, 2, (const char*[]){"dX"}, 1, got));
  expect_close(got[0], want, dims, rank, tol_for(elem, 1e-4, 1e-7), op);
  onyx_values_release(got, 1);
  free(x);
  free(dy);
  free(y);
  free(want);
  free(lp);
  free(lm);
}

static void test_softmax_grads(void** state) {
  (void)state;
  const int64_t d3[3] = {2, 4, 3}, d2[2] = {5, 9}, big[2] = {80, 500};
  for (int e = 0; e < 2; e++) {
    const int elem = e ? F64 : F32;
    for (int lg = 0; lg < 2; lg++) {
      run_softmax(lg, elem, d3, 3, 1);
      run_softmax(lg, elem, d3, 3, -1);
      run_softmax(lg, elem, d3, 3, 0);
      run_softmax(lg, elem, d2, 2, -1);
    }
  }
  run_softmax(false, F32, big, 2, 1);
  run_softmax(true, F32, big, 2, 0);
}

/* --- SoftmaxCrossEntropyLossGrad ---------------------------------------------------------- */

typedef struct SceCase {
  int64_t dims[4]; /* logits (N, C, d...) */
  int rank;
  const char* reduction;
  bool weight, ignore;
  int label_elem;
} SceCase;

/* The loss (reduction mean/sum: one value; none: sum of dY[s] l_s) of
 * SoftmaxCrossEntropyLoss as ONNX defines it, from logits z. */
static double sce_objective(const SceCase* c, const double* z, const int64_t* label,
                            const double* w, int64_t ignore, const double* dy) {
  const size_t nb = (size_t)c->dims[0], cl = (size_t)c->dims[1];
  const size_t inner = count_of(c->dims + 2, c->rank - 2);
  double num = 0, den = 0, none = 0;
  double* lp = malloc(cl * sizeof *lp);
  for (size_t b = 0; b < nb; b++)
    for (size_t i = 0; i < inner; i++) {
      const size_t s = b * inner + i;
      if (c->ignore && label[s] == ignore) continue;
      softmax_line(z + b * cl * inner + i, cl, inner, true, lp);
      const double wt = w ? w[label[s]] : 1.0;
      const double l = -wt * lp[label[s]];
      num += l;
      den += wt;
      if (!strcmp(c->reduction, "none")) none += dy[s] * l;
    }
  free(lp);
  if (!strcmp(c->reduction, "none")) return none;
  if (!strcmp(c->reduction, "sum")) return dy[0] * num;
  return dy[0] * num / den;
}

static void run_sce(const SceCase* c, int elem) {
  const size_t n = count_of(c->dims, c->rank), cl = (size_t)c->dims[1];
  const size_t samples = n / cl;
  int64_t ldims[3] = {c->dims[0]};
  for (int i = 2; i < c->rank; i++)
    ldims[i - 1] = c->dims[i];
  double* z = rnd_vec(n, -2, 2);
  double* w = c->weight ? rnd_vec(cl, 0.2, 2) : NULL;
  if (w) round_to(elem, w, cl);
  const int64_t ignore = 1;
  int64_t* label = malloc(samples * sizeof *label);
  for (size_t s = 0; s < samples; s++)
    label[s] = rnd_int(0, (int64_t)cl - 1);
  if (c->ignore) label[0] = ignore;
  const bool none = !strcmp(c->reduction, "none");
  double* dy = rnd_vec(none ? samples : 1, 0.5, 1.5);
  round_to(elem, dy, none ? samples : 1);
  /* log_prob fed to the op; the reference differentiates in z */
  double* lp = malloc(n * sizeof *lp);
  double* line = malloc(cl * sizeof *line);
  const size_t inner = samples / (size_t)c->dims[0];
  for (size_t s = 0; s < samples; s++) {
    const size_t base = s / inner * cl * inner + s % inner;
    softmax_line(z + base, cl, inner, true, line);
    for (size_t k = 0; k < cl; k++)
      lp[base + k * inner] = line[k];
  }
  round_to(elem, lp, n);
  double* want = malloc(n * sizeof *want);
  const double h = 1e-5;
  for (size_t i = 0; i < n; i++) {
    const double keep = z[i];
    z[i] = keep + h;
    const double jp = sce_objective(c, z, label, w, ignore, dy);
    z[i] = keep - h;
    const double jm = sce_objective(c, z, label, w, ignore, dy);
    z[i] = keep;
    want[i] = (jp - jm) / (2 * h);
  }
  In in[4] = {
      {.name = "dY", .elem = elem, .rank = none ? c->rank - 1 : 0, .dims = {0}, .f = dy},
      {.name = "log_prob", .elem = elem, .rank = c->rank, .dims = {0}, .f = lp},
      {.name = "label", .elem = c->label_elem, .rank = c->rank - 1, .dims = {0}, .i = label},
      {.name = "weight", .elem = elem, .rank = 1, .dims = {(int64_t)cl}, .f = w}};
  if (none) memcpy(in[0].dims, ldims, sizeof ldims);
  memcpy(in[1].dims, c->dims, sizeof c->dims);
  memcpy(in[2].dims, ldims, sizeof ldims);
  OxTestNode* node;
  OxTestModel* m =
      grad_model(in, c->weight ? 4 : 3, "SoftmaxCrossEntropyLossGrad", "sce",
                 c->weight ? "dY,log_prob,label,weight" : "dY,log_prob,label", "dZ", &node);
  otm_attr_string(node, "reduction", c->reduction);
  if (c->ignore) otm_attr_int(node, "ignore_index", ignore);
  otm_output(m, "dZ", elem, -1, NULL);
  OnyxValue* got[1] = {0};
  ok(run(m, in, c->weight ? 4 : 3, (const char*[]){"dZ"}, 1, got));
  expect_close(got[0], want, c->dims, c->rank, tol_for(elem, 1e-4, 1e-7), c->reduction);
  onyx_values_release(got, 1);
  free(z);
  free(w);
  free(label);
  free(dy);
  free(lp);
  free(line);
  free(want);
}

static void test_sce_grad(void** state) {
  (void)state;
  static const SceCase cases[] = {
      {{4, 5}, 2, "mean", false, false, ONYX_ELEM_INT64},
      {{4, 5}, 2, "sum", true, false, ONYX_ELEM_INT32},
      {{4, 5}, 2, "none", false, true, ONYX_ELEM_INT64},
      {{3, 4, 2, 3}, 4, "mean", true, true, ONYX_ELEM_INT64},
      {{3, 4, 5}, 3, "sum", false, true, ONYX_ELEM_INT32},
      {{3, 4, 5}, 3, "none", true, true, ONYX_ELEM_INT64},
      {{2, 6, 3}, 3, "mean", false, true, ONYX_ELEM_INT32},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int e = 0; e < 2; e++)
      run_sce(&cases[k], e ? F64 : F32);
}

static void test_sce_label_out_of_range(void** state) {
  (void)state;
  const double dy[1] = {1}, lp[6] = {-1, -1, -1, -1, -1, -1};
  const int64_t label[2] = {0, 3}; /* C = 3 */
  In in[3] = {{.name = "dY", .elem = F32, .rank = 0, .dims = {0}, .f = dy},
              {.name = "log_prob", .elem = F32, .rank = 2, .dims = {2, 3}, .f = lp},
              {.name = "label", .elem = ONYX_ELEM_INT64, .rank = 1, .dims = {2}, .i = label}};
  OxTestNode* node;
  OxTestModel* m =
      grad_model(in, 3, "SoftmaxCrossEntropyLossGrad", "sce_bad", "dY,log_prob,label", "dZ", &node);
  otm_output(m, "dZ", F32, -1, NULL);
  expect_error(m, in, 3, "dZ", "sce_bad", "outside the class range");
}

/* --- ConvGrad --------------------------------------------------------------------------- */

typedef struct ConvCase {
  int nsp;
  int64_t n, c, m, group;
  int64_t in[3], k[3], s[3], d[3], pads[6];
  const char* auto_pad; /* NULL: pads */
} ConvCase;

/* The geometry as the ONNX Conv definition gives it, padded to 3 dims. */
typedef struct CGeo {
  int64_t in[3], k[3], s[3], d[3], pb[3], out[3];
} CGeo;

static void cgeo(const ConvCase* c, CGeo* g) {
  for (int i = 0; i < 3; i++) {
    const bool real = i < c->nsp;
    g->in[i] = real ? c->in[i] : 1;
    g->k[i] = real ? c->k[i] : 1;
    g->s[i] = real && c->s[i] ? c->s[i] : 1;
    g->d[i] = real && c->d[i] ? c->d[i] : 1;
    int64_t pb = real ? c->pads[i] : 0, pe = real ? c->pads[i + c->nsp] : 0;
    const int64_t ext = g->d[i] * (g->k[i] - 1) + 1;
    if (real && c->auto_pad) { /* SAME_UPPER */
      const int64_t out = (g->in[i] + g->s[i] - 1) / g->s[i];
      int64_t total = (out - 1) * g->s[i] + ext - g->in[i];
      if (total < 0) total = 0;
      pb = total / 2;
      pe = total - pb;
    }
    g->pb[i] = pb;
    g->out[i] = (g->in[i] + pb + pe - ext) / g->s[i] + 1;
  }
}

/* X index (n, ch, p0, p1, p2), or -1 when the position is in the padding. */
static long x_at(const ConvCase* c, const CGeo* g, int64_t n, int64_t ch, const int64_t* p) {
  for (int i = 0; i < 3; i++)
    if (p[i] < 0 || p[i] >= g->in[i]) return -1;
  return (long)((((n * c->c + ch) * g->in[0] + p[0]) * g->in[1] + p[1]) * g->in[2] + p[2]);
}

/* Visits every (n, m, output position, input channel of m's group, tap)
 * with the X and W indices it couples and the dY index: the direct
 * definition of a grouped convolution. mode 0: forward Y += X W (y
 * gets the bias too); mode 1: the gradients. */
static void conv_visit(const ConvCase* c, const CGeo* g, int mode, const double* x, const double* w,
                       const double* b, double* y, const double* dy, double* dx, double* dw,
                       double* db) {
  const int64_t cg = c->c / c->group, mg = c->m / c->group;
  const int64_t os = g->out[0] * g->out[1] * g->out[2], ks = g->k[0] * g->k[1] * g->k[2];
  for (int64_t n = 0; n < c->n; n++)
    for (int64_t m = 0; m < c->m; m++)
      for (int64_t o = 0; o < os; o++) {
        const int64_t oc[3] = {o / (g->out[1] * g->out[2]), o / g->out[2] % g->out[1],
                               o % g->out[2]};
        const long yi = (long)((n * c->m + m) * os + o);
        if (mode == 0) y[yi] = b ? b[m] : 0;
        if (mode == 1 && db) db[m] += dy[yi];
        for (int64_t ci = 0; ci < cg; ci++)
          for (int64_t t = 0; t < ks; t++) {
            const int64_t tc[3] = {t / (g->k[1] * g->k[2]), t / g->k[2] % g->k[1], t % g->k[2]};
            int64_t p[3];
            for (int i = 0; i < 3; i++)
              p[i] = oc[i] * g->s[i] - g->pb[i] + tc[i] * g->d[i];
            const long xi = x_at(c, g, n, m / mg * cg + ci, p);
            if (xi < 0) continue;
            const long wi = (long)((m * cg + ci) * ks + t);
            if (mode == 0) {
              y[yi] += x[xi] * w[wi];
            } else {
              if (dx) dx[xi] += dy[yi] * w[wi];
              if (dw) dw[wi] += dy[yi] * x[xi];
            }
          }
      }
}

static void run_conv(const ConvCase* c, int elem, bool fd_check, const char* outs_wanted) {
  CGeo g;
  cgeo(c, &g);
  const int r = c->nsp + 2;
  int64_t xd[5] = {c->n, c->c}, wd[5] = {c->m, c->c / c->group}, yd[5] = {c->n, c->m};
  for (int i = 0; i < c->nsp; i++) {
    xd[i + 2] = c->in[i];
    wd[i + 2] = c->k[i];
    yd[i + 2] = g.out[i];
  }
  const size_t nx = count_of(xd, r), nw = count_of(wd, r), ny = count_of(yd, r);
  double *x = rnd_vec(nx, -1, 1), *w = rnd_vec(nw, -1, 1), *dy = rnd_vec(ny, -1, 1);
  round_to(elem, x, nx);
  round_to(elem, w, nw);
  round_to(elem, dy, ny);
  double *dx = calloc(nx, sizeof *dx), *dw = calloc(nw, sizeof *dw),
         *db = calloc((size_t)c->m, sizeof *db);
  conv_visit(c, &g, 1, x, w, NULL, NULL, dy, dx, dw, db);
  if (fd_check) { /* the seven-loop reference against finite differences of the forward */
    double* y = malloc(ny * sizeof *y);
    double* b = rnd_vec((size_t)c->m, -1, 1);
    const double h = 1e-6;
    double* vars[3] = {x, w, b};
    const double* refs[3] = {dx, dw, db};
    const size_t counts[3] = {nx, nw, (size_t)c->m};
    for (int v = 0; v < 3; v++)
      for (size_t i = 0; i < counts[v]; i++) {
        const double keep = vars[v][i];
        double jp = 0, jm = 0;
        vars[v][i] = keep + h;
        conv_visit(c, &g, 0, x, w, b, y, NULL, NULL, NULL, NULL);
        for (size_t k = 0; k < ny; k++)
          jp += dy[k] * y[k];
        vars[v][i] = keep - h;
        conv_visit(c, &g, 0, x, w, b, y, NULL, NULL, NULL, NULL);
        for (size_t k = 0; k < ny; k++)
          jm += dy[k] * y[k];
        vars[v][i] = keep;
        const double fd = (jp - jm) / (2 * h);
        if (fabs(fd - refs[v][i]) > 1e-6 * (1 + fabs(fd)))
          fail_msg("reference %d element %zu: %.9g vs finite difference %.9g", v, i, refs[v][i],
                   fd);
      }
    free(y);
    free(b);
  }
  In in[3] = {{.name = "dY", .elem = elem, .rank = r, .dims = {0}, .f = dy},
              {.name = "X", .elem = elem, .rank = r, .dims = {0}, .f = x},
              {.name = "W", .elem = elem, .rank = r, .dims = {0}, .f = w}};
  memcpy(in[0].dims, yd, sizeof yd);
  memcpy(in[1].dims, xd, sizeof xd);
  memcpy(in[2].dims, wd, sizeof wd);
  /* outs_wanted: which of dX, dW, dB the node produces ("111", "010", ...) */
  char outs[32];
  snprintf(outs, sizeof outs, "%s,%s,%s", outs_wanted[0] == '1' ? "dX" : "",
           outs_wanted[1] == '1' ? "dW" : "", outs_wanted[2] == '1' ? "dB" : "");
  OxTestNode* node;
  OxTestModel* m = grad_model(in, 3, "ConvGrad", "cg", "dY,X,W", outs, &node);
  if (c->group != 1) otm_attr_int(node, "group", c->group);
  otm_attr_ints(node, "kernel_shape", (size_t)c->nsp, c->k);
  if (c->s[0]) otm_attr_ints(node, "strides", (size_t)c->nsp, c->s);
  if (c->d[0]) otm_attr_ints(node, "dilations", (size_t)c->nsp, c->d);
  if (c->auto_pad)
    otm_attr_string(node, "auto_pad", c->auto_pad);
  else {
    int64_t pads[6];
    for (int i = 0; i < 2 * c->nsp; i++)
      pads[i] = c->pads[i];
    otm_attr_ints(node, "pads", (size_t)(2 * c->nsp), pads);
  }
  const char* names[3];
  const double* want[3];
  const int64_t* wdims[3];
  int wrank[3];
  size_t n_out = 0;
  const char* all[3] = {"dX", "dW", "dB"};
  const double* refs[3] = {dx, dw, db};
  const int64_t* rd[3] = {xd, wd, wd};
  const int rr[3] = {r, r, 1};
  for (int k = 0; k < 3; k++)
    if (outs_wanted[k] == '1') {
      otm_output(m, all[k], elem, -1, NULL);
      names[n_out] = all[k];
      want[n_out] = refs[k];
      wdims[n_out] = rd[k];
      wrank[n_out++] = rr[k];
    }
  OnyxValue* got[3] = {0};
  ok(run(m, in, 3, names, n_out, got));
  for (size_t k = 0; k < n_out; k++)
    expect_close(got[k], want[k], wdims[k], wrank[k], tol_for(elem, 2e-4, 1e-9), names[k]);
  onyx_values_release(got, n_out);
  free(x);
  free(w);
  free(dy);
  free(dx);
  free(dw);
  free(db);
}

static void test_conv_grad_cases(void** state) {
  (void)state;
  static const ConvCase cases[] = {
      /* nsp, n, c, m, group, in, k, s, d, pads, auto_pad */
      {2, 2, 4, 6, 2, {7, 6}, {3, 2}, {2, 1}, {1, 2}, {1, 0, 2, 1}, NULL},
      {2, 1, 3, 2, 1, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL},
      {1, 3, 2, 4, 1, {11}, {3}, {2}, {2}, {2, 1}, NULL},
      {1, 2, 6, 6, 6, {9}, {4}, {1}, {1}, {0, 3}, NULL}, /* depthwise */
      {3, 1, 2, 4, 2, {4, 5, 3}, {2, 3, 2}, {1, 2, 1}, {1, 1, 2}, {0, 1, 1, 1, 0, 1}, NULL},
      {2, 2, 3, 5, 1, {4, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, NULL}, /* pointwise */
      {2, 1, 2, 3, 1, {6, 5}, {3, 3}, {2, 2}, {1, 1}, {0}, "SAME_UPPER"},
      /* unit strides (float32: dX as a convolution of padded dY): pads past
       * the kernel's extent, dilation, groups, 3-D, rows wider than a GEMM
       * panel (runs that wrap within a panel), a 1-D row of many panels */
      {2, 2, 3, 4, 1, {5, 4}, {2, 2}, {1, 1}, {1, 1}, {3, 0, 1, 4}, NULL},
      {2, 2, 2, 3, 1, {7, 6}, {3, 2}, {1, 1}, {2, 3}, {1, 2, 3, 0}, NULL},
      {2, 3, 4, 6, 2, {6, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL},
      {3, 2, 2, 3, 1, {3, 4, 5}, {2, 3, 2}, {1, 1, 1}, {1, 1, 2}, {1, 0, 1, 0, 2, 1}, NULL},
      {2, 2, 3, 5, 1, {3, 41}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL},
      {1, 2, 3, 2, 1, {150}, {5}, {1}, {1}, {2, 2}, NULL},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int e = 0; e < 2; e++)
      run_conv(&cases[k], e ? F64 : F32, e == 1, "111");
}

static void test_conv_grad_random_and_optional_outputs(void** state) {
  (void)state;
  for (int t = 0; t < 12; t++) {
    ConvCase c = {0};
    c.nsp = (int)rnd_int(1, 3);
    c.group = rnd_int(1, 3);
    c.n = rnd_int(1, 3);
    c.c = c.group * rnd_int(1, 3);
    c.m = c.group * rnd_int(1, 3);
    for (int i = 0; i < c.nsp; i++) {
      c.k[i] = rnd_int(1, 3);
      c.s[i] = rnd_int(1, 3);
      c.d[i] = rnd_int(1, 2);
      c.pads[i] = rnd_int(0, 2);
      c.pads[i + c.nsp] = rnd_int(0, 2);
      const int64_t ext = c.d[i] * (c.k[i] - 1) + 1;
      c.in[i] = ext + rnd_int(0, c.nsp == 3 ? 3 : 6);
    }
    static const char* const wanted[] = {"111", "100", "010", "001", "110", "011"};
    run_conv(&c, (t & 1) ? F64 : F32, false, wanted[t % 6]);
  }
  /* a larger float32 case: the threaded GEMM path */
  const ConvCase big = {2, 2, 8, 16, 2, {16, 16}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL};
  run_conv(&big, F32, false, "111");
}

static void test_conv_grad_bad_dy_shape(void** state) {
  (void)state;
  double z[64] = {0};
  /* dY 1x2x3x3 where the convolution's output is 1x2x2x2 */
  In in[3] = {{.name = "dY", .elem = F32, .rank = 4, .dims = {1, 2, 3, 3}, .f = z},
              {.name = "X", .elem = F32, .rank = 4, .dims = {1, 1, 3, 3}, .f = z},
              {.name = "W", .elem = F32, .rank = 4, .dims = {2, 1, 2, 2}, .f = z}};
  OxTestNode* node;
  OxTestModel* m = grad_model(in, 3, "ConvGrad", "conv_bad", "dY,X,W", "dX", &node);
  otm_output(m, "dX", F32, -1, NULL);
  expect_error(m, in, 3, "dX", "conv_bad", "dY's shape");
}

/* --- MaxPoolGrad, AveragePoolGrad ---------------------------------------------------------- */

static void test_maxpool_grad(void** state) {
  (void)state;
  for (int e = 0; e < 2; e++) {
    const int elem = e ? F64 : F32;
    /* X (2, 3, 7, 6), window 3x3, stride 2, pads 1: overlapping windows */
    const int64_t xd[4] = {2, 3, 7, 6}, k = 3, s = 2, p = 1;
    const int64_t oh = (7 + 2 * p - k) / s + 1, ow = (6 + 2 * p - k) / s + 1;
    const int64_t yd[4] = {2, 3, oh, ow};
    const size_t nx = count_of(xd, 4), ny = count_of(yd, 4);
    double* x = rnd_vec(nx, -1, 1);
    double* dy = rnd_vec(ny, -1, 1);
    round_to(elem, dy, ny);
    int64_t* idx = malloc(ny * sizeof *idx);
    double* want = calloc(nx, sizeof *want);
    size_t yi = 0;
    for (int64_t pl = 0; pl < 6; pl++) /* MaxPool's Indices: flattened NCHW */
      for (int64_t a = 0; a < oh; a++)
        for (int64_t b = 0; b < ow; b++, yi++) {
          int64_t best = -1;
          for (int64_t u = 0; u < k; u++)
            for (int64_t v = 0; v < k; v++) {
              const int64_t h = a * s - p + u, wv = b * s - p + v;
              if (h < 0 || h >= 7 || wv < 0 || wv >= 6) continue;
              const int64_t at = (pl * 7 + h) * 6 + wv;
              if (best < 0 || x[at] > x[best]) best = at;
            }
          idx[yi] = best;
          want[best] += dy[yi];
        }
    const int64_t shape[4] = {2, 3, 7, 6};
    In in[3] = {
        {.name = "dY", .elem = elem, .rank = 4, .dims = {2, 3, oh, ow}, .f = dy},
        {.name = "Indices", .elem = ONYX_ELEM_INT64, .rank = 4, .dims = {2, 3, oh, ow}, .i = idx},
        {.name = "X_shape",
         .elem = ONYX_ELEM_INT64,
         .rank = 1,
         .dims = {4},
         .i = shape,
         .initializer = e == 1}};
    OxTestNode* node;
    OxTestModel* m = grad_model(in, 3, "MaxPoolGrad", "mpg", "dY,Indices,X_shape", "dX", &node);
    otm_attr_ints(node, "kernel_shape", 2, (int64_t[]){3, 3});
    otm_output(m, "dX", elem, -1, NULL);
    OnyxValue* got[1] = {0};
    ok(run(m, in, 3, (const char*[]){"dX"}, 1, got));
    expect_close(got[0], want, xd, 4, tol_for(elem, 1e-6, 1e-12), "MaxPoolGrad");
    onyx_values_release(got, 1);
    /* an index past X's elements */
    idx[ny - 1] = (int64_t)nx;
    m = grad_model(in, 3, "MaxPoolGrad", "mpg_bad", "dY,Indices,X_shape", "dX", &node);
    otm_output(m, "dX", elem, -1, NULL);
    expect_error(m, in, 3, "dX", "mpg_bad", "Indices[");
    free(x);
    free(dy);
    free(idx);
    free(want);
  }
}

typedef struct PoolCase {
  int nsp;
  int64_t n, c;
  int64_t in[3], k[3], s[3], d[3], pads[6];
  int ceil_mode, include_pad;
} PoolCase;

static void run_avgpool(const PoolCase* c, int elem) {
  int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1};
  int64_t pb[3] = {0}, pe[3] = {0}, out[3] = {1, 1, 1};
  for (int i = 0; i < c->nsp; i++) {
    in[i] = c->in[i];
    k[i] = c->k[i];
    s[i] = c->s[i];
    d[i] = c->d[i];
    pb[i] = c->pads[i];
    pe[i] = c->pads[i + c->nsp];
    const int64_t span = in[i] + pb[i] + pe[i] - (d[i] * (k[i] - 1) + 1);
    out[i] = (c->ceil_mode ? (span + s[i] - 1) / s[i] : span / s[i]) + 1;
    if (c->ceil_mode && (out[i] - 1) * s[i] >= in[i] + pb[i]) out[i]--;
  }
  const int r = c->nsp + 2;
  int64_t xd[5] = {c->n, c->c}, yd[5] = {c->n, c->c};
  for (int i = 0; i < c->nsp; i++) {
    xd[i + 2] = in[i];
    yd[i + 2] = out[i];
  }
  const size_t nx = count_of(xd, r), ny = count_of(yd, r);
  const size_t isz = (size_t)(in[0] * in[1] * in[2]), osz = (size_t)(out[0] * out[1] * out[2]);
  double* dy = rnd_vec(ny, -1, 1);
  round_to(elem, dy, ny);
  double* want = calloc(nx, sizeof *want);
  for (size_t pl = 0; pl < (size_t)(c->n * c->c); pl++)
    for (size_t o = 0; o < osz; o++) {
      const int64_t oc[3] = {(int64_t)o / (out[1] * out[2]), (int64_t)o / out[2] % out[1],
                             (int64_t)o % out[2]};
      size_t inside = 0, padded = 0;
      for (int pass = 0; pass < 2; pass++) /* pass 0 counts, pass 1 spreads */
        for (int64_t t0 = 0; t0 < k[0]; t0++)
          for (int64_t t1 = 0; t1 < k[1]; t1++)
            for (int64_t t2 = 0; t2 < k[2]; t2++) {
              const int64_t tc[3] = {t0, t1, t2};
              int64_t p[3];
              bool in_x = true, in_pad = true;
              for (int i = 0; i < 3; i++) {
                p[i] = oc[i] * s[i] - pb[i] + tc[i] * d[i];
                in_x = in_x && p[i] >= 0 && p[i] < in[i];
                in_pad = in_pad && p[i] >= -pb[i] && p[i] < in[i] + pe[i];
              }
              if (pass == 0) {
                inside += in_x;
                padded += in_pad;
              } else if (in_x) {
                const size_t div = c->include_pad ? padded : inside;
                want[pl * isz + (size_t)((p[0] * in[1] + p[1]) * in[2] + p[2])] +=
                    dy[pl * osz + o] / (double)div;
              }
            }
    }
  In inp[2] = {{.name = "dY", .elem = elem, .rank = r, .dims = {0}, .f = dy},
               {.name = "X_shape", .elem = ONYX_ELEM_INT64, .rank = 1, .dims = {r}, .i = xd}};
  memcpy(inp[0].dims, yd, sizeof yd);
  OxTestNode* node;
  OxTestModel* m = grad_model(inp, 2, "AveragePoolGrad", "apg", "dY,X_shape", "dX", &node);
  otm_attr_ints(node, "kernel_shape", (size_t)c->nsp, c->k);
  otm_attr_ints(node, "strides", (size_t)c->nsp, c->s);
  otm_attr_ints(node, "dilations", (size_t)c->nsp, c->d);
  otm_attr_ints(node, "pads", (size_t)(2 * c->nsp), c->pads);
  otm_attr_int(node, "ceil_mode", c->ceil_mode);
  otm_attr_int(node, "count_include_pad", c->include_pad);
  otm_output(m, "dX", elem, -1, NULL);
  OnyxValue* got[1] = {0};
  ok(run(m, inp, 2, (const char*[]){"dX"}, 1, got));
  expect_close(got[0], want, xd, r, tol_for(elem, 1e-5, 1e-12), "AveragePoolGrad");
  onyx_values_release(got, 1);
  free(dy);
  free(want);
}

static void test_avgpool_grad(void** state) {
  (void)state;
  static const PoolCase cases[] = {
      /* nsp, n, c, in, k, s, d, pads, ceil_mode, count_include_pad */
      {2, 2, 3, {7, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 0, 0},
      {2, 2, 3, {7, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 0, 1},
      {2, 1, 2, {6, 7}, {3, 2}, {2, 3}, {1, 1}, {0, 1, 1, 0}, 1, 0},
      {2, 1, 2, {6, 7}, {3, 2}, {2, 3}, {1, 1}, {0, 1, 1, 0}, 1, 1},
      {1, 2, 2, {10}, {3}, {3}, {2}, {1, 2}, 1, 1},
      {3, 1, 2, {4, 5, 3}, {2, 3, 2}, {2, 1, 2}, {1, 1, 1}, {1, 0, 1, 0, 1, 1}, 1, 0},
      {2, 1, 1, {5, 5}, {2, 2}, {2, 2}, {2, 1}, {0, 0, 0, 0}, 1, 1},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int e = 0; e < 2; e++)
      run_avgpool(&cases[k], e ? F64 : F32);
}

/* --- BatchNormalizationGrad, LayerNormalizationGrad ------------------------------------------- */

/* The normalization objective sum(dY * y) with y computed from X in
 * training mode: statistics over `groups` sets of indices. For BN (ln
 * false) a set is a channel over N and spatial dims and scale/bias are per
 * channel; for LN a set is a row and scale/bias are per column. */
typedef struct NormCase {
  bool ln;
  int rank;
  int64_t dims[4];
  int64_t axis; /* LN */
} NormCase;

static void norm_layout(const NormCase* c, size_t* sets, size_t* per, size_t* width) {
  const size_t n = count_of(c->dims, c->rank);
  if (c->ln) {
    const int ax = (int)(c->axis < 0 ? c->axis + c->rank : c->axis);
    *width = count_of(c->dims + ax, c->rank - ax);
    *sets = n / *width;
    *per = *width;
  } else {
    *sets = (size_t)c->dims[1];
    *per = n / *sets;
    *width = *sets;
  }
}

/* Set of element i and its parameter index. */
static void norm_map(const NormCase* c, size_t i, size_t width, size_t* set, size_t* param) {
  if (c->ln) {
    *set = i / width;
    *param = i % width;
  } else {
    const size_t sp = count_of(c->dims + 2, c->rank - 2);
    *set = i / sp % (size_t)c->dims[1];
    *param = *set;
  }
}

static double norm_objective(const NormCase* c, const double* x, const double* sc, const double* bi,
                             const double* dy, double eps, double* mean, double* inv) {
  const size_t n = count_of(c->dims, c->rank);
  size_t sets, per, width;
  norm_layout(c, &sets, &per, &width);
  double* sum = calloc(sets, sizeof *sum);
  double* sq = calloc(sets, sizeof *sq);
  for (size_t i = 0; i < n; i++) {
    size_t s, p;
    norm_map(c, i, width, &s, &p);
    sum[s] += x[i];
  }
  for (size_t s = 0; s < sets; s++)
    mean[s] = sum[s] / (double)per;
  for (size_t i = 0; i < n; i++) {
    size_t s, p;
    norm_map(c, i, width, &s, &p);
    sq[s] += (x[i] - mean[s]) * (x[i] - mean[s]);
  }
  for (size_t s = 0; s < sets; s++)
    inv[s] = 1.0 / sqrt(sq[s] / (double)per + eps);
  double j = 0;
  for (size_t i = 0; i < n; i++) {
    size_t s, p;
    norm_map(c, i, width, &s, &p);
    j += dy[i] * (sc[p] * (x[i] - mean[s]) * inv[s] + bi[p]);
  }
  free(sum);
  free(sq);
  return j;
}

/* stats false (BN only): mean and inv_std_var left out, so the kernel
 * computes the batch statistics from X. */
static void run_norm(const NormCase* c, int elem, bool stats) {
  const size_t n = count_of(c->dims, c->rank);
  size_t sets, per, width;
  norm_layout(c, &sets, &per, &width);
  const double eps = 1e-5;
  double *x = rnd_vec(n, -2, 2), *dy = rnd_vec(n, -1, 1);
  double *sc = rnd_vec(width, 0.5, 1.5), *bi = rnd_vec(width, -1, 1);
  round_to(elem, x, n);
  round_to(elem, dy, n);
  round_to(elem, sc, width);
  double *mean = malloc(sets * sizeof *mean), *inv = malloc(sets * sizeof *inv);
  double *tm = malloc(sets * sizeof *tm), *ti = malloc(sets * sizeof *ti);
  norm_objective(c, x, sc, bi, dy, eps, mean, inv);
  /* the reference: central differences of the objective (statistics
   * recomputed from the perturbed X) */
  double* want_x = malloc(n * sizeof *want_x);
  double *want_s = malloc(width * sizeof *want_s), *want_b = malloc(width * sizeof *want_b);
  const double h = 1e-6;
  double* vars[3] = {x, sc, bi};
  double* outs[3] = {want_x, want_s, want_b};
  const size_t counts[3] = {n, width, width};
  for (int v = 0; v < 3; v++)
    for (size_t i = 0; i < counts[v]; i++) {
      const double keep = vars[v][i];
      vars[v][i] = keep + h;
      const double jp = norm_objective(c, x, sc, bi, dy, eps, tm, ti);
      vars[v][i] = keep - h;
      const double jm = norm_objective(c, x, sc, bi, dy, eps, tm, ti);
      vars[v][i] = keep;
      outs[v][i] = (jp - jm) / (2 * h);
    }
  round_to(elem, mean, sets);
  round_to(elem, inv, sets);
  int64_t sdims[4], srank;
  if (c->ln) {
    const int ax = (int)(c->axis < 0 ? c->axis + c->rank : c->axis);
    srank = c->rank - ax;
    memcpy(sdims, c->dims + ax, (size_t)srank * sizeof *sdims);
  } else {
    srank = 1;
    sdims[0] = c->dims[1];
  }
  In in[5] = {{.name = "dY", .elem = elem, .rank = c->rank, .dims = {0}, .f = dy},
              {.name = "X", .elem = elem, .rank = c->rank, .dims = {0}, .f = x},
              {.name = "scale", .elem = elem, .rank = (int)srank, .dims = {0}, .f = sc},
              {.name = "mean", .elem = elem, .rank = 1, .dims = {(int64_t)sets}, .f = mean},
              {.name = "inv_std_var", .elem = elem, .rank = 1, .dims = {(int64_t)sets}, .f = inv}};
  memcpy(in[0].dims, c->dims, sizeof c->dims);
  memcpy(in[1].dims, c->dims, sizeof c->dims);
  memcpy(in[2].dims, sdims, sizeof sdims);
  OxTestNode* node;
  const char* op = c->ln ? "LayerNormalizationGrad" : "BatchNormalizationGrad";
  const size_t n_in = stats ? 5 : 3;
  OxTestModel* m = grad_model(
      in, n_in, op, "ng", stats ? "dY,X,scale,mean,inv_std_var" : "dY,X,scale", "dX,dS,dB", &node);
  if (c->ln) otm_attr_int(node, "axis", c->axis);
  otm_output(m, "dX", elem, -1, NULL);
  otm_output(m, "dS", elem, -1, NULL);
  otm_output(m, "dB", elem, -1, NULL);
  OnyxValue* got[3] = {0};
  ok(run(m, in, n_in, (const char*[]){"dX", "dS", "dB"}, 3, got));
  const double tol = tol_for(elem, 5e-4, 1e-6);
  expect_close(got[0], want_x, c->dims, c->rank, tol, "dX");
  expect_close(got[1], want_s, sdims, (int)srank, tol, "dScale");
  expect_close(got[2], want_b, sdims, (int)srank, tol, "dBias");
  onyx_values_release(got, 3);
  free(x);
  free(dy);
  free(sc);
  free(bi);
  free(mean);
  free(inv);
  free(tm);
  free(ti);
  free(want_x);
  free(want_s);
  free(want_b);
}

static void test_norm_grads(void** state) {
  (void)state;
  static const NormCase cases[] = {
      /* {2, 3, 5, 5}: planes of 25, past the float32 kernel's 8 lanes plus a tail */
      {false, 4, {3, 4, 2, 3}, 0}, {false, 2, {6, 5}, 0},    {false, 3, {2, 3, 7}, 0},
      {false, 4, {2, 3, 5, 5}, 0}, {true, 3, {3, 4, 5}, -1}, {true, 3, {2, 3, 4}, 1},
      {true, 2, {4, 70}, -1},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int e = 0; e < 2; e++) {
      run_norm(&cases[k], e ? F64 : F32, true);
      if (!cases[k].ln) run_norm(&cases[k], e ? F64 : F32, false);
    }
}

/* --- GatherGrad -------------------------------------------------------------------------- */

static void run_gather(int elem, const int64_t* xd, int xr, int64_t axis, const int64_t* id, int ir,
                       bool shape_const) {
  const size_t ax = (size_t)(axis < 0 ? axis + xr : axis);
  const size_t ni = count_of(id, ir), outer = count_of(xd, (int)ax), len = (size_t)xd[ax],
               inner = count_of(xd + ax + 1, xr - (int)ax - 1);
  int64_t yd[MAXR];
  int yr = 0;
  for (size_t i = 0; i < ax; i++)
    yd[yr++] = xd[i];
  for (int i = 0; i < ir; i++)
    yd[yr++] = id[i];
  for (int i = (int)ax + 1; i < xr; i++)
    yd[yr++] = xd[i];
  const size_t ny = count_of(yd, yr), nx = count_of(xd, xr);
  int64_t* idx = malloc(ni * sizeof *idx);
  for (size_t k = 0; k < ni; k++)
    idx[k] = rnd_int(-(int64_t)len, (int64_t)len - 1); /* negative ones wrap */
  double* dy = rnd_vec(ny, -1, 1);
  round_to(elem, dy, ny);
  double* want = calloc(nx, sizeof *want);
  for (size_t o = 0; o < outer; o++)
    for (size_t k = 0; k < ni; k++) {
      const size_t row = (size_t)(idx[k] < 0 ? idx[k] + (int64_t)len : idx[k]);
      for (size_t i = 0; i < inner; i++)
        want[(o * len + row) * inner + i] += dy[(o * ni + k) * inner + i];
    }
  In in[3] = {{.name = "X_shape",
               .elem = ONYX_ELEM_INT64,
               .rank = 1,
               .dims = {xr},
               .i = xd,
               .initializer = shape_const},
              {.name = "indices", .elem = ONYX_ELEM_INT64, .rank = ir, .dims = {0}, .i = idx},
              {.name = "dY", .elem = elem, .rank = yr, .dims = {0}, .f = dy}};
  memcpy(in[1].dims, id, (size_t)ir * sizeof *id);
  memcpy(in[2].dims, yd, (size_t)yr * sizeof *yd);
  OxTestNode* node;
  OxTestModel* m = grad_model(in, 3, "GatherGrad", "gg", "X_shape,indices,dY", "dX", &node);
  otm_attr_int(node, "axis", axis);
  otm_output(m, "dX", elem, -1, NULL);
  OnyxValue* got[1] = {0};
  ok(run(m, in, 3, (const char*[]){"dX"}, 1, got));
  expect_close(got[0], want, xd, xr, tol_for(elem, 1e-5, 1e-12), "GatherGrad");
  onyx_values_release(got, 1);
  free(idx);
  free(dy);
  free(want);
}

static void test_gather_grad(void** state) {
  (void)state;
  for (int e = 0; e < 2; e++) {
    const int elem = e ? F64 : F32;
    run_gather(elem, (int64_t[]){3, 5, 4}, 3, 1, (int64_t[]){2, 3}, 2, e == 0);
    run_gather(elem, (int64_t[]){6, 2}, 2, 0, (int64_t[]){9}, 1, true);
    run_gather(elem, (int64_t[]){4, 7}, 2, -1, (int64_t[]){3, 2}, 2, false);
  }
  /* an embedding-sized case: many repeats of few rows, the pool, blocks */
  run_gather(F32, (int64_t[]){20, 1500}, 2, 0, (int64_t[]){200}, 1, true);
}

static void test_gather_grad_index_out_of_range(void** state) {
  (void)state;
  const int64_t shape[2] = {4, 2}, idx[2] = {1, -5};
  const double dy[4] = {1, 2, 3, 4};
  In in[3] = {{.name = "X_shape", .elem = ONYX_ELEM_INT64, .rank = 1, .dims = {2}, .i = shape},
              {.name = "indices", .elem = ONYX_ELEM_INT64, .rank = 1, .dims = {2}, .i = idx},
              {.name = "dY", .elem = F32, .rank = 2, .dims = {2, 2}, .f = dy}};
  OxTestNode* node;
  OxTestModel* m = grad_model(in, 3, "GatherGrad", "gg_bad", "X_shape,indices,dY", "dX", &node);
  otm_output(m, "dX", F32, -1, NULL);
  expect_error(m, in, 3, "dX", "gg_bad", "out of range");
}

/* --- DropoutGrad ---------------------------------------------------------------------------- */

static void test_dropout_grad(void** state) {
  (void)state;
  for (int e = 0; e < 2; e++)
    for (int with_ratio = 0; with_ratio < 2; with_ratio++) {
      const int elem = e ? F64 : F32;
      const size_t n = 40000;
      double* dy = rnd_vec(n, -1, 1);
      round_to(elem, dy, n);
      uint8_t* mask = malloc(n);
      double* want = malloc(n * sizeof *want);
      const double ratio = with_ratio ? 0.25 : 0.5;
      for (size_t i = 0; i < n; i++) {
        mask[i] = rnd_u32() & 1;
        want[i] = mask[i] ? dy[i] / (1.0 - ratio) : 0.0;
      }
      const double r[1] = {ratio};
      /* ratio in the other float type: its own constraint T1 */
      In in[3] = {
          {.name = "dY", .elem = elem, .rank = 2, .dims = {200, 200}, .f = dy},
          {.name = "mask", .elem = ONYX_ELEM_BOOL, .rank = 2, .dims = {200, 200}, .b = mask},
          {.name = "ratio", .elem = e ? F32 : F64, .rank = 0, .dims = {0}, .f = r}};
      OxTestNode* node;
      OxTestModel* m = grad_model(in, with_ratio ? 3 : 2, "DropoutGrad", "dg",
                                  with_ratio ? "dY,mask,ratio" : "dY,mask", "dX", &node);
      otm_output(m, "dX", elem, -1, NULL);
      OnyxValue* got[1] = {0};
      ok(run(m, in, with_ratio ? 3 : 2, (const char*[]){"dX"}, 1, got));
      expect_close(got[0], want, (int64_t[]){200, 200}, 2, tol_for(elem, 1e-6, 1e-12),
                   "DropoutGrad");
      onyx_values_release(got, 1);
      free(dy);
      free(mask);
      free(want);
    }
}

/* --- Loading: shape inference and errors at session creation ------------------------------ */

/* The session's output i has shape dims (rank). */
static void expect_output_shape(const OnyxSession* s, size_t i, const int64_t* dims, int32_t rank) {
  OnyxElemType t;
  int32_t r;
  const int64_t* d;
  ok(onyx_session_output_info(s, i, &t, &r, &d));
  assert_int_equal(r, rank);
  if (rank) assert_memory_equal(d, dims, (size_t)rank * sizeof *d);
}

static OnyxSession* load(OxTestModel* m) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s));
  free(bytes);
  return s;
}

static void test_shape_inference(void** state) {
  (void)state;
  /* ConvGrad: dX like X, dW like W, dB (M) */
  In conv[3] = {{.name = "dY", .elem = F32, .rank = 4, .dims = {2, 6, 3, 3}},
                {.name = "X", .elem = F32, .rank = 4, .dims = {2, 4, 5, 5}},
                {.name = "W", .elem = F32, .rank = 4, .dims = {6, 2, 3, 3}}};
  OxTestNode* node;
  OxTestModel* m = grad_model(conv, 3, "ConvGrad", "cg", "dY,X,W", "dX,dW,dB", &node);
  otm_attr_int(node, "group", 2);
  otm_output(m, "dX", F32, -1, NULL);
  otm_output(m, "dW", F32, -1, NULL);
  otm_output(m, "dB", F32, -1, NULL);
  OnyxSession* s = load(m);
  expect_output_shape(s, 0, (int64_t[]){2, 4, 5, 5}, 4);
  expect_output_shape(s, 1, (int64_t[]){6, 2, 3, 3}, 4);
  expect_output_shape(s, 2, (int64_t[]){6}, 1);
  onyx_session_release(s);
  /* GatherGrad: dX takes a constant X_shape's value */
  const int64_t shape[2] = {6, 2}, idx[3] = {0, 5, -1};
  In gg[3] = {{.name = "X_shape",
               .elem = ONYX_ELEM_INT64,
               .rank = 1,
               .dims = {2},
               .i = shape,
               .initializer = true},
              {.name = "indices", .elem = ONYX_ELEM_INT64, .rank = 1, .dims = {3}, .i = idx},
              {.name = "dY", .elem = F64, .rank = 2, .dims = {3, 2}}};
  m = grad_model(gg, 3, "GatherGrad", "gg", "X_shape,indices,dY", "dX", &node);
  otm_output(m, "dX", F64, -1, NULL);
  s = load(m);
  expect_output_shape(s, 0, shape, 2);
  onyx_session_release(s);
  /* LayerNormalizationGrad: dScale and dBias like scale */
  In ln[5] = {{.name = "dY", .elem = F32, .rank = 3, .dims = {2, 3, 4}},
              {.name = "X", .elem = F32, .rank = 3, .dims = {2, 3, 4}},
              {.name = "scale", .elem = F32, .rank = 2, .dims = {3, 4}},
              {.name = "mean", .elem = F32, .rank = 3, .dims = {2, 1, 1}},
              {.name = "inv_std_var", .elem = F32, .rank = 3, .dims = {2, 1, 1}}};
  m = grad_model(ln, 5, "LayerNormalizationGrad", "lng", "dY,X,scale,mean,inv_std_var", "dX,dS,dB",
                 &node);
  otm_attr_int(node, "axis", 1);
  otm_output(m, "dX", F32, -1, NULL);
  otm_output(m, "dS", F32, -1, NULL);
  otm_output(m, "dB", F32, -1, NULL);
  s = load(m);
  expect_output_shape(s, 0, (int64_t[]){2, 3, 4}, 3);
  expect_output_shape(s, 1, (int64_t[]){3, 4}, 2);
  expect_output_shape(s, 2, (int64_t[]){3, 4}, 2);
  onyx_session_release(s);
}

static void test_load_errors(void** state) {
  (void)state;
  In sm[2] = {{.name = "dY", .elem = F32, .rank = 2, .dims = {2, 3}},
              {.name = "Y", .elem = F32, .rank = 2, .dims = {2, 3}}};
  OxTestNode* node;
  OxTestModel* m = grad_model(sm, 2, "SoftmaxGrad", "sm_bad", "dY,Y", "dX", &node);
  otm_attr_int(node, "axis", 2);
  otm_output(m, "dX", F32, -1, NULL);
  expect_error(m, sm, 2, "dX", "sm_bad", "axis");
  In conv[3] = {{.name = "dY", .elem = F32, .rank = 2, .dims = {2, 3}},
                {.name = "X", .elem = F32, .rank = 2, .dims = {2, 3}},
                {.name = "W", .elem = F32, .rank = 2, .dims = {3, 3}}};
  m = grad_model(conv, 3, "ConvGrad", "conv2d_bad", "dY,X,W", "dX", &node);
  otm_output(m, "dX", F32, -1, NULL);
  expect_error(m, conv, 3, "dX", "conv2d_bad", "3-D to 5-D");
  In sce[3] = {{.name = "dY", .elem = F32, .rank = 0},
               {.name = "log_prob", .elem = F32, .rank = 2, .dims = {2, 3}},
               {.name = "label", .elem = ONYX_ELEM_INT64, .rank = 1, .dims = {2}}};
  m = grad_model(sce, 3, "SoftmaxCrossEntropyLossGrad", "sce_red", "dY,log_prob,label", "dZ",
                 &node);
  otm_attr_string(node, "reduction", "average");
  otm_output(m, "dZ", F32, -1, NULL);
  expect_error(m, sce, 3, "dZ", "sce_red", "reduction");
  const double dy[4] = {0}, ratio[1] = {1.0};
  const uint8_t mask[4] = {1, 0, 1, 1};
  In drop[3] = {{.name = "dY", .elem = F32, .rank = 1, .dims = {4}, .f = dy},
                {.name = "mask", .elem = ONYX_ELEM_BOOL, .rank = 1, .dims = {4}, .b = mask},
                {.name = "ratio", .elem = F32, .rank = 0, .f = ratio}};
  m = grad_model(drop, 3, "DropoutGrad", "drop_bad", "dY,mask,ratio", "dX", &node);
  otm_output(m, "dX", F32, -1, NULL);
  expect_error(m, drop, 3, "dX", "drop_bad", "ratio");
}

/* --- Determinism and cancellation ----------------------------------------------------------- */

/* The model from make() run with 1 and with 4 threads: bit-identical outputs. */
static void expect_same_across_threads(OxTestModel* (*make)(void), const In* ins, size_t n,
                                       const char* const* outs, size_t n_out) {
  OnyxValue* a[3] = {0};
  OnyxValue* b[3] = {0};
  ok(run_opts(make(), ins, n, outs, n_out, a, 1, 0));
  ok(run_opts(make(), ins, n, outs, n_out, b, 4, 0));
  for (size_t k = 0; k < n_out; k++) {
    const OnyxTensor *x = onyx_value_tensor(a[k]), *y = onyx_value_tensor(b[k]);
    const size_t bytes = onyx_tensor_elem_count(x) * onyx_elem_type_size(onyx_tensor_elem_type(x));
    assert_int_equal(onyx_tensor_elem_count(x), onyx_tensor_elem_count(y));
    assert_memory_equal(onyx_tensor_data(x), onyx_tensor_data(y), bytes);
  }
  onyx_values_release(a, n_out);
  onyx_values_release(b, n_out);
}

static In det_gather[3], det_conv[3];

static OxTestModel* make_det_gather(void) {
  OxTestNode* node;
  OxTestModel* m = grad_model(det_gather, 3, "GatherGrad", "gg", "X_shape,indices,dY", "dX", &node);
  otm_output(m, "dX", F32, -1, NULL);
  return m;
}

static OxTestModel* make_det_conv(void) {
  OxTestNode* node;
  OxTestModel* m = grad_model(det_conv, 3, "ConvGrad", "cg", "dY,X,W", "dX,dW,dB", &node);
  otm_attr_ints(node, "pads", 4, (int64_t[]){1, 1, 1, 1});
  otm_attr_int(node, "group", 2);
  otm_output(m, "dX", F32, -1, NULL);
  otm_output(m, "dW", F32, -1, NULL);
  otm_output(m, "dB", F32, -1, NULL);
  return m;
}

static void test_deterministic_across_threads(void** state) {
  (void)state;
  /* GatherGrad: 3000 indices into 7 rows (long sums per row) */
  const int64_t shape[2] = {7, 300};
  int64_t* idx = malloc(3000 * sizeof *idx);
  for (size_t k = 0; k < 3000; k++)
    idx[k] = rnd_int(-7, 6);
  double* dy = rnd_vec(3000 * 300, -1, 1);
  det_gather[0] = (In){.name = "X_shape",
                       .elem = ONYX_ELEM_INT64,
                       .rank = 1,
                       .dims = {2},
                       .i = shape,
                       .initializer = true};
  det_gather[1] =
      (In){.name = "indices", .elem = ONYX_ELEM_INT64, .rank = 1, .dims = {3000}, .i = idx};
  det_gather[2] = (In){.name = "dY", .elem = F32, .rank = 2, .dims = {3000, 300}, .f = dy};
  expect_same_across_threads(make_det_gather, det_gather, 3, (const char*[]){"dX"}, 1);
  free(idx);
  free(dy);
  /* ConvGrad: dW sums over images and positions */
  double* x = rnd_vec(4 * 8 * 20 * 20, -1, 1);
  double* w = rnd_vec(16 * 4 * 9, -1, 1);
  double* g = rnd_vec(4 * 16 * 20 * 20, -1, 1);
  det_conv[0] = (In){.name = "dY", .elem = F32, .rank = 4, .dims = {4, 16, 20, 20}, .f = g};
  det_conv[1] = (In){.name = "X", .elem = F32, .rank = 4, .dims = {4, 8, 20, 20}, .f = x};
  det_conv[2] = (In){.name = "W", .elem = F32, .rank = 4, .dims = {16, 4, 3, 3}, .f = w};
  expect_same_across_threads(make_det_conv, det_conv, 3, (const char*[]){"dX", "dW", "dB"}, 3);
  free(x);
  free(w);
  free(g);
}

/* A ConvGrad of about 10 GFLOP under a 5 ms run limit stops with
 * ONYX_CANCELLED, well before it would finish. */
static void test_conv_grad_cancelled(void** state) {
  (void)state;
  const int64_t xd[4] = {16, 64, 64, 64}, wd[4] = {64, 64, 3, 3};
  const size_t nx = count_of(xd, 4), nw = count_of(wd, 4);
  double* x = calloc(nx, sizeof *x);
  double* w = calloc(nw, sizeof *w);
  In in[3] = {{.name = "dY", .elem = F32, .rank = 4, .dims = {16, 64, 64, 64}, .f = x},
              {.name = "X", .elem = F32, .rank = 4, .dims = {16, 64, 64, 64}, .f = x},
              {.name = "W", .elem = F32, .rank = 4, .dims = {64, 64, 3, 3}, .f = w}};
  OxTestNode* node;
  OxTestModel* m = grad_model(in, 3, "ConvGrad", "cg_slow", "dY,X,W", "dX,dW", &node);
  otm_attr_ints(node, "pads", 4, (int64_t[]){1, 1, 1, 1});
  otm_output(m, "dX", F32, -1, NULL);
  otm_output(m, "dW", F32, -1, NULL);
  OnyxValue* got[2] = {0};
  OnyxStatus* st = run_opts(m, in, 3, (const char*[]){"dX", "dW"}, 2, got, 0, 5);
  if (!st) {
    onyx_values_release(got, 2);
    fail_msg("the run should have been cancelled");
  }
  assert_int_equal(onyx_status_code(st), ONYX_CANCELLED);
  onyx_status_release(st);
  free(x);
  free(w);
}

/* --- Empty tensors ------------------------------------------------------------------------- */

static void test_empty_inputs(void** state) {
  (void)state;
  static const double none[1] = {0};
  /* ConvGrad over no images: dW and dB are zeros, dX empty */
  const double w[2 * 1 * 2 * 2] = {1, 2, 3, 4, 5, 6, 7, 8};
  In conv[3] = {{.name = "dY", .elem = F32, .rank = 4, .dims = {0, 2, 2, 2}, .f = none},
                {.name = "X", .elem = F32, .rank = 4, .dims = {0, 1, 3, 3}, .f = none},
                {.name = "W", .elem = F32, .rank = 4, .dims = {2, 1, 2, 2}, .f = w}};
  OxTestNode* node;
  OxTestModel* m = grad_model(conv, 3, "ConvGrad", "cg0", "dY,X,W", "dX,dW,dB", &node);
  otm_output(m, "dX", F32, -1, NULL);
  otm_output(m, "dW", F32, -1, NULL);
  otm_output(m, "dB", F32, -1, NULL);
  OnyxValue* got[3] = {0};
  ok(run(m, conv, 3, (const char*[]){"dX", "dW", "dB"}, 3, got));
  const double zeros[8] = {0};
  expect_close(got[0], zeros, (int64_t[]){0, 1, 3, 3}, 4, 0, "dX");
  expect_close(got[1], zeros, (int64_t[]){2, 1, 2, 2}, 4, 0, "dW");
  expect_close(got[2], zeros, (int64_t[]){2}, 1, 0, "dB");
  onyx_values_release(got, 3);
  /* GatherGrad with no indices: dX is zeros */
  const int64_t shape[2] = {3, 2};
  In gg[3] = {{.name = "X_shape", .elem = ONYX_ELEM_INT64, .rank = 1, .dims = {2}, .i = shape},
              {.name = "indices", .elem = ONYX_ELEM_INT64, .rank = 1, .dims = {0}, .i = shape},
              {.name = "dY", .elem = F64, .rank = 2, .dims = {0, 2}, .f = none}};
  m = grad_model(gg, 3, "GatherGrad", "gg0", "X_shape,indices,dY", "dX", &node);
  otm_output(m, "dX", F64, -1, NULL);
  ok(run(m, gg, 3, (const char*[]){"dX"}, 1, got));
  expect_close(got[0], zeros, shape, 2, 0, "GatherGrad");
  onyx_values_release(got, 1);
  /* BatchNormalizationGrad over no values: dScale and dBias zeros */
  const double one[2] = {1, 1};
  In bn[5] = {{.name = "dY", .elem = F32, .rank = 3, .dims = {0, 2, 4}, .f = none},
              {.name = "X", .elem = F32, .rank = 3, .dims = {0, 2, 4}, .f = none},
              {.name = "scale", .elem = F32, .rank = 1, .dims = {2}, .f = one},
              {.name = "mean", .elem = F32, .rank = 1, .dims = {2}, .f = one},
              {.name = "inv_std_var", .elem = F32, .rank = 1, .dims = {2}, .f = one}};
  m = grad_model(bn, 5, "BatchNormalizationGrad", "bn0", "dY,X,scale,mean,inv_std_var", "dX,dS,dB",
                 &node);
  otm_output(m, "dX", F32, -1, NULL);
  otm_output(m, "dS", F32, -1, NULL);
  otm_output(m, "dB", F32, -1, NULL);
  ok(run(m, bn, 5, (const char*[]){"dX", "dS", "dB"}, 3, got));
  expect_close(got[1], zeros, (int64_t[]){2}, 1, 0, "dScale");
  expect_close(got[2], zeros, (int64_t[]){2}, 1, 0, "dBias");
  onyx_values_release(got, 3);
  /* SoftmaxCrossEntropyLossGrad over no samples, and the elementwise and
   * softmax grads of empty tensors: empty outputs */
  In sce[3] = {{.name = "dY", .elem = F32, .rank = 0, .f = one},
               {.name = "log_prob", .elem = F32, .rank = 2, .dims = {0, 3}, .f = none},
               {.name = "label", .elem = ONYX_ELEM_INT64, .rank = 1, .dims = {0}, .i = shape}};
  m = grad_model(sce, 3, "SoftmaxCrossEntropyLossGrad", "sce0", "dY,log_prob,label", "dZ", &node);
  otm_output(m, "dZ", F32, -1, NULL);
  ok(run(m, sce, 3, (const char*[]){"dZ"}, 1, got));
  expect_close(got[0], zeros, (int64_t[]){0, 3}, 2, 0, "SCE");
  onyx_values_release(got, 1);
  static const char* const ops[] = {"TanhGrad", "SoftmaxGrad", "LogSoftmaxGrad"};
  for (size_t k = 0; k < 3; k++) {
    In ew[2] = {{.name = "dY", .elem = F64, .rank = 2, .dims = {4, 0}, .f = none},
                {.name = "Y", .elem = F64, .rank = 2, .dims = {4, 0}, .f = none}};
    m = grad_model(ew, 2, ops[k], "e0", "dY,Y", "dX", &node);
    otm_output(m, "dX", F64, -1, NULL);
    ok(run(m, ew, 2, (const char*[]){"dX"}, 1, got));
    expect_close(got[0], zeros, (int64_t[]){4, 0}, 2, 0, ops[k]);
    onyx_values_release(got, 1);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_elementwise_grads),
      cmocka_unit_test(test_softmax_grads),
      cmocka_unit_test(test_sce_grad),
      cmocka_unit_test(test_sce_label_out_of_range),
      cmocka_unit_test(test_conv_grad_cases),
      cmocka_unit_test(test_conv_grad_random_and_optional_outputs),
      cmocka_unit_test(test_conv_grad_bad_dy_shape),
      cmocka_unit_test(test_maxpool_grad),
      cmocka_unit_test(test_avgpool_grad),
      cmocka_unit_test(test_norm_grads),
      cmocka_unit_test(test_gather_grad),
      cmocka_unit_test(test_gather_grad_index_out_of_range),
      cmocka_unit_test(test_dropout_grad),
      cmocka_unit_test(test_shape_inference),
      cmocka_unit_test(test_load_errors),
      cmocka_unit_test(test_deterministic_across_threads),
      cmocka_unit_test(test_conv_grad_cancelled),
      cmocka_unit_test(test_empty_inputs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
