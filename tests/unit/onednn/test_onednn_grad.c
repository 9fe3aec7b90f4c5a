/* test_onednn_grad.c — the com.onyx.training gradient ops on the oneDNN
 * provider's backward primitives: each claimed op, in a session with onednn
 * placed first, runs on onednn (the explain text names its group) and
 * matches the CPU provider's kernel (a separate implementation) within 1e-4;
 * ConvGrad and BatchNormalizationGrad also match a float64 reference
 * computed here by direct loops over their definitions. Ops and attributes
 * the provider cannot map are declined with the reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onyx/onyx.h"
#include "ox_test_models.h"

#define F32      ONYX_ELEM_FLOAT32
#define I64      ONYX_ELEM_INT64
#define TRAINING "com.onyx.training"
#define TOL      1e-4

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static uint64_t rng = 0x2545f4914f6cdd1du;
static double rnd(double lo, double hi) {
  rng = rng * 6364136223846793005u + 1442695040888963407u;
  return lo + (hi - lo) * ((double)(uint32_t)(rng >> 33) / 2147483648.0);
}

static size_t count_of(const int64_t* d, int r) {
  size_t n = 1;
  for (int i = 0; i < r; i++)
    n *= (size_t)d[i];
  return n;
}

/* A feed: float32 values (f) or int64 values (i). sym: the first dim is
 * symbolic in the model, so the provider builds its plan at the first run. */
typedef struct TIn {
  const char* name;
  int rank;
  int64_t dims[6];
  const float* f;
  const int64_t* i;
  bool sym;
} TIn;

static float* rnd_f(size_t n, double lo, double hi) {
  float* v = malloc((n ? n : 1) * sizeof *v);
  for (size_t k = 0; k < n; k++)
    v[k] = (float)rnd(lo, hi);
  return v;
}

typedef void (*AttrFn)(OxTestNode* n, const void* user);

/* The compiled-group cache folder of the next onednn sessions (NULL: none),
 * and what those sessions log: loads counted, warnings counted. */
static const char* cache_dir;
static int cache_loads, cache_warnings;

static void on_log(void* user, OnyxLogSeverity sev, const char* msg) {
  (void)user;
  if (sev >= ONYX_LOG_WARNING) cache_warnings++;
  if (strstr(msg, "compiled-group cache: group 'onednn_g'") && strstr(msg, "loaded from"))
    cache_loads++;
}

/* One node `op` named "g" over the feeds; outputs of unknown shape. With
 * onednn the provider is placed first (the CPU provider follows). */
static OnyxSession* open_grad(const TIn* ins, size_t n, const char* op, const char* inputs,
                              const char* outputs, AttrFn attrs, const void* user, bool onednn,
                              const char* key, const char* val) {
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, TRAINING, 1);
  for (size_t k = 0; k < n; k++) {
    int64_t d[6];
    memcpy(d, ins[k].dims, sizeof d);
    if (ins[k].sym) d[0] = -1;
    otm_input(m, ins[k].name, ins[k].f ? F32 : I64, ins[k].rank, d);
  }
  char buf[256];
  snprintf(buf, sizeof buf, "%s", outputs);
  char* save = NULL;
  for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
    otm_output(m, tok, F32, -1, NULL);
  OxTestNode* node = otm_node(m, op, "g", inputs, outputs);
  otm_node_domain(node, TRAINING);
  if (attrs) attrs(node, user);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_threads(o, 1));
  if (onednn) {
    ok(onyx_session_options_add_provider(o, "onednn", NULL, 0, 1));
    if (key) ok(onyx_session_options_set_provider_option(o, "onednn", key, val));
    if (cache_dir) {
      ok(onyx_session_options_set_cache_dir(o, cache_dir));
      ok(onyx_session_options_set_log_severity(o, ONYX_LOG_VERBOSE));
      ok(onyx_session_options_set_log_callback(o, on_log, NULL));
    }
  }
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_options_release(o);
  free(bytes);
  return s;
}

/* Runs the session on the feeds; out[k] for each name of `outputs`. */
static void run_grad(OnyxSession* s, const TIn* ins, size_t n, const char* outputs, OnyxValue** out,
                     size_t* n_out) {
  OnyxValue* v[8];
  const char* names[8];
  for (size_t k = 0; k < n; k++) {
    size_t c = count_of(ins[k].dims, ins[k].rank);
    names[k] = ins[k].name;
    if (ins[k].f)
      ok(onyx_value_create_tensor(F32, ins[k].dims, (size_t)ins[k].rank, ins[k].f,
                                  c * sizeof(float), &v[k]));
    else
      ok(onyx_value_create_tensor(I64, ins[k].dims, (size_t)ins[k].rank, ins[k].i,
                                  c * sizeof(int64_t), &v[k]));
  }
  char buf[256], *save = NULL; /* local: runs may come from several threads */
  snprintf(buf, sizeof buf, "%s", outputs);
  const char* onames[4];
  size_t no = 0;
  for (char* tok = strtok_r(buf, ",", &save); tok && no < 4; tok = strtok_r(NULL, ",", &save))
    onames[no++] = tok;
  ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)v, n, onames, no, out));
  *n_out = no;
  for (size_t k = 0; k < n; k++)
    onyx_value_release(v[k]);
}

static const float* data_of(const OnyxValue* v, size_t* count) {
  const OnyxTensor* t = onyx_value_tensor(v);
  *count = onyx_tensor_elem_count(t);
  return onyx_tensor_data(t);
}

static void close_to(const char* what, const float* a, const double* ref, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (!(fabs(a[k] - ref[k]) <= TOL + TOL * fabs(ref[k])))
      fail_msg("%s[%zu]: onednn %.7g, reference %.7g", what, k, (double)a[k], ref[k]);
}

/* Whether node "g" runs on onednn in its own group. */
static void expect_on_onednn(OnyxSession* s) {
  char* text = NULL;
  ok(onyx_session_explain(s, &text));
  if (!strstr(text, "-> onednn (group 'onednn_g')")) fail_msg("not on onednn:\n%s", text);
  onyx_free(text);
}

/* Runs op on onednn and on the CPU provider; every output matches within
 * TOL. The onednn outputs stay in dn[] (release them). */
static void compare(const TIn* ins, size_t n, const char* op, const char* inputs,
                    const char* outputs, AttrFn attrs, const void* user, const char* key,
                    const char* val, OnyxValue** dn) {
  OnyxSession* a = open_grad(ins, n, op, inputs, outputs, attrs, user, true, key, val);
  OnyxSession* b = open_grad(ins, n, op, inputs, outputs, attrs, user, false, NULL, NULL);
  expect_on_onednn(a);
  OnyxValue* cpu[4];
  size_t na = 0, nb = 0;
  for (int rep = 0; rep < 2; rep++) { /* the second run reuses the plan */
    if (rep) {
      for (size_t k = 0; k < na; k++)
        onyx_value_release(dn[k]);
    }
    run_grad(a, ins, n, outputs, dn, &na);
  }
  run_grad(b, ins, n, outputs, cpu, &nb);
  assert_int_equal(na, nb);
  for (size_t k = 0; k < na; k++) {
    size_t ca, cb;
    const float* pa = data_of(dn[k], &ca);
    const float* pb = data_of(cpu[k], &cb);
    assert_int_equal(ca, cb);
    assert_true(ca > 0);
    double nonzero = 0;
    for (size_t i = 0; i < ca; i++) {
      if (!(fabs(pa[i] - pb[i]) <= TOL + TOL * fabs(pb[i])))
        fail_msg("%s output %zu [%zu]: onednn %.7g, cpu %.7g", op, k, i, (double)pa[i],
                 (double)pb[i]);
      nonzero += fabs(pb[i]);
    }
    assert_true(nonzero > 0); /* not a trivially zero output */
    onyx_value_release(cpu[k]);
  }
  onyx_session_release(a);
  onyx_session_release(b);
}

static void release_all(OnyxValue** v, size_t n) {
  for (size_t k = 0; k < n; k++)
    onyx_value_release(v[k]);
}

/* --- Element-wise ------------------------------------------------------------------- */

static void test_eltwise_grads(void** state) {
  (void)state;
  static const char* const ops[] = {"ReluGrad", "SigmoidGrad", "TanhGrad", "GeluGrad",
                                    "FastGeluGrad"};
  const int64_t d[4] = {2, 3, 4, 5};
  size_t n = count_of(d, 4);
  for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
    float* dy = rnd_f(n, -1, 1);
    float* x = rnd_f(n, -3, 3);
    if (!strcmp(ops[o], "SigmoidGrad"))
      for (size_t k = 0; k < n; k++)
        x[k] = 1.0f / (1.0f + expf(-x[k])); /* Y of the forward */
    if (!strcmp(ops[o], "TanhGrad"))
      for (size_t k = 0; k < n; k++)
        x[k] = tanhf(x[k]);
    /* ReluGrad with a symbolic batch dim: the plan is built at the first run. */
    bool sym = !strcmp(ops[o], "ReluGrad");
    TIn ins[2] = {{"dy", 4, {2, 3, 4, 5}, dy, NULL, sym}, {"x", 4, {2, 3, 4, 5}, x, NULL, sym}};
    OnyxValue* out[1];
    compare(ins, 2, ops[o], "dy,x", "dx", NULL, NULL, NULL, NULL, out);
    release_all(out, 1);
    free(dy);
    free(x);
  }
}

/* Concurrent first runs of one session with a symbolic batch dim: the plan
 * is built once under the kernel's lock, and every run gets the right dX. */
typedef struct Race {
  OnyxSession* s;
  const TIn* ins;
  const float* want;
  size_t n;
  int bad;
} Race;

static void* race(void* arg) {
  Race* r = arg;
  OnyxValue* out[1];
  size_t no = 0;
  run_grad(r->s, r->ins, 2, "dx", out, &no);
  size_t c;
  const float* p = data_of(out[0], &c);
  bool same = c == r->n;
  for (size_t k = 0; same && k < c; k++) /* by value: oneDNN's zeros may be -0 */
    same = p[k] == r->want[k];
  if (!same) __atomic_add_fetch(&r->bad, 1, __ATOMIC_RELAXED);
  onyx_value_release(out[0]);
  return NULL;
}

static void test_concurrent_runs(void** state) {
  (void)state;
  const size_t n = 4 * 3 * 5 * 5;
  float* dy = rnd_f(n, -1, 1);
  float* x = rnd_f(n, -2, 2);
  float* want = malloc(n * sizeof *want);
  for (size_t k = 0; k < n; k++) /* ReluGrad by its definition: dY where X > 0 */
    want[k] = x[k] > 0 ? dy[k] : 0.0f;
  TIn ins[2] = {{"dy", 4, {4, 3, 5, 5}, dy, NULL, true}, {"x", 4, {4, 3, 5, 5}, x, NULL, true}};
  OnyxSession* s = open_grad(ins, 2, "ReluGrad", "dy,x", "dx", NULL, NULL, true, NULL, NULL);
  expect_on_onednn(s);
  Race r = {s, ins, want, n, 0};
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    assert_int_equal(pthread_create(&t[i], NULL, race, &r), 0);
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  assert_int_equal(r.bad, 0);
  onyx_session_release(s);
  free(dy);
  free(x);
  free(want);
}

/* --- Softmax ------------------------------------------------------------------------- */

static void axis_attr(OxTestNode* n, const void* user) {
  otm_attr_int(n, "axis", *(const int64_t*)user);
}

static void test_softmax_grads(void** state) {
  (void)state;
  const int64_t d[3] = {3, 4, 5};
  const size_t n = count_of(d, 3);
  const int64_t axes[2] = {1, -1};
  for (int log_form = 0; log_form < 2; log_form++)
    for (int a = 0; a < 2; a++) {
      float* dy = rnd_f(n, -1, 1);
      float* y = rnd_f(n, -2, 2);
      /* Y: the forward's (log-)softmax along the axis. */
      int64_t ax = axes[a] < 0 ? axes[a] + 3 : axes[a];
      size_t inner = count_of(d + ax + 1, 2 - (int)ax), outer = count_of(d, (int)ax);
      for (size_t o = 0; o < outer; o++)
        for (size_t i = 0; i < inner; i++) {
          double sum = 0;
          for (int64_t k = 0; k < d[ax]; k++)
            sum += exp(y[(o * (size_t)d[ax] + (size_t)k) * inner + i]);
          for (int64_t k = 0; k < d[ax]; k++) {
            float* p = &y[(o * (size_t)d[ax] + (size_t)k) * inner + i];
            *p = log_form ? (float)(*p - log(sum)) : (float)(exp(*p) / sum);
          }
        }
      TIn ins[2] = {{"dy", 3, {3, 4, 5}, dy, NULL, false}, {"y", 3, {3, 4, 5}, y, NULL, false}};
      OnyxValue* out[1];
      compare(ins, 2, log_form ? "LogSoftmaxGrad" : "SoftmaxGrad", "dy,y", "dx", axis_attr,
              &axes[a], NULL, NULL, out);
      release_all(out, 1);
      free(dy);
      free(y);
    }
}

/* --- ConvGrad ------------------------------------------------------------------------ */

typedef struct ConvCase {
  int64_t x[4], w[4], group, strides[2], dil[2], pads[4];
} ConvCase;

static int64_t conv_out_dim(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pl, int64_t pr) {
  return (in + pl + pr - ((k - 1) * d + 1)) / s + 1;
}

static void conv_attrs(OxTestNode* n, const void* user) {
  const ConvCase* c = user;
  otm_attr_int(n, "group", c->group);
  otm_attr_ints(n, "strides", 2, c->strides);
  otm_attr_ints(n, "dilations", 2, c->dil);
  otm_attr_ints(n, "pads", 4, c->pads);
  otm_attr_ints(n, "kernel_shape", 2, c->w + 2);
}

/* dX, dW, dB of a 2-D grouped convolution by direct loops in float64. */
static void conv_ref(const ConvCase* c, const int64_t* y, const float* dy, const float* x,
                     const float* w, double* dx, double* dw, double* db) {
  const int64_t N = c->x[0], C = c->x[1], IH = c->x[2], IW = c->x[3];
  const int64_t OC = c->w[0], CG = c->w[1], KH = c->w[2], KW = c->w[3];
  const int64_t OH = y[2], OW = y[3], OCG = OC / c->group;
  memset(dx, 0, count_of(c->x, 4) * sizeof *dx);
  memset(dw, 0, count_of(c->w, 4) * sizeof *dw);
  memset(db, 0, (size_t)OC * sizeof *db);
  for (int64_t n = 0; n < N; n++)
    for (int64_t oc = 0; oc < OC; oc++) {
      int64_t g = oc / OCG;
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          double go = dy[((n * OC + oc) * OH + oh) * OW + ow];
          db[oc] += go;
          for (int64_t cg = 0; cg < CG; cg++)
            for (int64_t kh = 0; kh < KH; kh++)
              for (int64_t kw = 0; kw < KW; kw++) {
                int64_t ih = oh * c->strides[0] - c->pads[0] + kh * c->dil[0];
                int64_t iw = ow * c->strides[1] - c->pads[1] + kw * c->dil[1];
                if (ih < 0 || ih >= IH || iw < 0 || iw >= IW) continue;
                int64_t ic = g * CG + cg;
                size_t xi = (size_t)(((n * C + ic) * IH + ih) * IW + iw);
                size_t wi = (size_t)(((oc * CG + cg) * KH + kh) * KW + kw);
                dx[xi] += go * w[wi];
                dw[wi] += go * x[xi];
              }
        }
    }
}

static void run_conv_case(const ConvCase* c, const char* key, const char* val) {
  int64_t y[4] = {c->x[0], c->w[0], 0, 0};
  for (int i = 0; i < 2; i++)
    y[2 + i] = conv_out_dim(c->x[2 + i], c->w[2 + i], c->strides[i], c->dil[i], c->pads[i],
                            c->pads[2 + i]);
  size_t nx = count_of(c->x, 4), nw = count_of(c->w, 4), ny = count_of(y, 4);
  float *x = rnd_f(nx, -1, 1), *w = rnd_f(nw, -1, 1), *dy = rnd_f(ny, -1, 1);
  TIn ins[3] = {{"dy", 4, {y[0], y[1], y[2], y[3]}, dy, NULL, false},
                {"x", 4, {c->x[0], c->x[1], c->x[2], c->x[3]}, x, NULL, false},
                {"w", 4, {c->w[0], c->w[1], c->w[2], c->w[3]}, w, NULL, false}};
  OnyxValue* out[3];
  compare(ins, 3, "ConvGrad", "dy,x,w", "dx,dw,db", conv_attrs, c, key, val, out);
  double* rx = malloc(nx * sizeof *rx);
  double* rw = malloc(nw * sizeof *rw);
  double* rb = malloc((size_t)c->w[0] * sizeof *rb);
  conv_ref(c, y, dy, x, w, rx, rw, rb);
  size_t cnt;
  close_to("dX", data_of(out[0], &cnt), rx, nx);
  assert_int_equal(cnt, nx);
  close_to("dW", data_of(out[1], &cnt), rw, nw);
  assert_int_equal(cnt, nw);
  close_to("dB", data_of(out[2], &cnt), rb, (size_t)c->w[0]);
  assert_int_equal(cnt, (size_t)c->w[0]);
  release_all(out, 3);
  free(rx);
  free(rw);
  free(rb);
  free(x);
  free(w);
  free(dy);
}

static void test_conv_grad(void** state) {
  (void)state;
  /* Asymmetric pads; then groups, strides and dilations. */
  const ConvCase a = {{2, 3, 7, 6}, {5, 3, 3, 3}, 1, {1, 1}, {1, 1}, {1, 0, 2, 1}};
  const ConvCase b = {{2, 4, 9, 8}, {6, 2, 3, 2}, 2, {2, 1}, {2, 1}, {1, 1, 1, 0}};
  run_conv_case(&a, NULL, NULL);
  run_conv_case(&b, NULL, NULL);
  run_conv_case(&a, "blocked_layout", "0"); /* plain layouts only */
}

/* dW and dB only (a first layer's ConvGrad): dX is not produced. */
static void test_conv_grad_weights_only(void** state) {
  (void)state;
  const ConvCase c = {{2, 3, 6, 6}, {4, 3, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}};
  size_t nx = count_of(c.x, 4), nw = count_of(c.w, 4), ny = 2 * 4 * 6 * 6;
  float *x = rnd_f(nx, -1, 1), *w = rnd_f(nw, -1, 1), *dy = rnd_f(ny, -1, 1);
  TIn ins[3] = {{"dy", 4, {2, 4, 6, 6}, dy, NULL, false},
                {"x", 4, {2, 3, 6, 6}, x, NULL, false},
                {"w", 4, {4, 3, 3, 3}, w, NULL, false}};
  OnyxSession* s =
      open_grad(ins, 3, "ConvGrad", "dy,x,w", ",dw,db", conv_attrs, &c, true, NULL, NULL);
  expect_on_onednn(s);
  OnyxValue* out[2];
  size_t no = 0;
  run_grad(s, ins, 3, "dw,db", out, &no);
  double* rx = malloc(nx * sizeof *rx);
  double* rw = malloc(nw * sizeof *rw);
  double rb[4];
  int64_t y[4] = {2, 4, 6, 6};
  conv_ref(&c, y, dy, x, w, rx, rw, rb);
  size_t cnt;
  close_to("dW", data_of(out[0], &cnt), rw, nw);
  close_to("dB", data_of(out[1], &cnt), rb, 4);
  release_all(out, 2);
  onyx_session_release(s);
  free(rx);
  free(rw);
  free(x);
  free(w);
  free(dy);
}

/* 1-D and 3-D ConvGrad against the CPU provider (the reference above is 2-D). */
static void conv_nd_attrs(OxTestNode* n, const void* user) {
  const int* sp = user;
  int64_t one[3] = {1, 1, 1}, two[3] = {2, 1, 2}, pads[6] = {1, 0, 1, 0, 1, 1};
  otm_attr_ints(n, "strides", (size_t)*sp, *sp == 1 ? two : one);
  otm_attr_ints(n, "pads", 2 * (size_t)*sp, pads);
}

static void test_conv_grad_1d_3d(void** state) {
  (void)state;
  /* 1-D: X [2, 3, 11], W [4, 3, 3], stride 2, pads 1, 0: L (11 + 1 - 3) / 2 + 1 = 5.
   * 3-D: X [1, 2, 4, 5, 3], W [3, 2, 2, 3, 2], pads begin 1,0,1, end 0,1,1: 4 x 4 x 4. */
  const int sps[2] = {1, 3};
  const TIn cases[2][3] = {{{"dy", 3, {2, 4, 5}, NULL, NULL, false},
                            {"x", 3, {2, 3, 11}, NULL, NULL, false},
                            {"w", 3, {4, 3, 3}, NULL, NULL, false}},
                           {{"dy", 5, {1, 3, 4, 4, 4}, NULL, NULL, false},
                            {"x", 5, {1, 2, 4, 5, 3}, NULL, NULL, false},
                            {"w", 5, {3, 2, 2, 3, 2}, NULL, NULL, false}}};
  for (int c = 0; c < 2; c++) {
    TIn ins[3];
    float* buf[3];
    for (int k = 0; k < 3; k++) {
      ins[k] = cases[c][k];
      buf[k] = rnd_f(count_of(ins[k].dims, ins[k].rank), -1, 1);
      ins[k].f = buf[k];
    }
    OnyxValue* out[3];
    compare(ins, 3, "ConvGrad", "dy,x,w", "dx,dw,db", conv_nd_attrs, &sps[c], NULL, NULL, out);
    release_all(out, 3);
    for (int k = 0; k < 3; k++)
      free(buf[k]);
  }
}

/* A dY that is not the convolution's output shape, known only at run time
 * (a symbolic batch dim): the run fails naming the node. */
static void test_conv_grad_bad_shape(void** state) {
  (void)state;
  const ConvCase c = {{2, 3, 6, 6}, {4, 3, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}};
  float *x = rnd_f(2 * 3 * 36, -1, 1), *w = rnd_f(4 * 27, -1, 1), *dy = rnd_f(2 * 4 * 25, -1, 1);
  TIn ins[3] = {{"dy", 4, {2, 4, 5, 5}, dy, NULL, true},
                {"x", 4, {2, 3, 6, 6}, x, NULL, true},
                {"w", 4, {4, 3, 3, 3}, w, NULL, false}};
  OnyxSession* s =
      open_grad(ins, 3, "ConvGrad", "dy,x,w", "dx,dw,db", conv_attrs, &c, true, NULL, NULL);
  expect_on_onednn(s);
  OnyxValue* v[3];
  const char* names[3] = {"dy", "x", "w"};
  for (int k = 0; k < 3; k++)
    ok(onyx_value_create_tensor(F32, ins[k].dims, 4, ins[k].f,
                                count_of(ins[k].dims, 4) * sizeof(float), &v[k]));
  const char* onames[3] = {"dx", "dw", "db"};
  OnyxValue* out[3] = {0};
  OnyxStatus* st = onyx_session_run(s, NULL, names, (const OnyxValue* const*)v, 3, onames, 3, out);
  assert_non_null(st);
  const char* msg = onyx_status_message(st);
  if (!strstr(msg, "node 'g' (ConvGrad)") ||
      !strstr(msg, "dY's shape is not the convolution of X and W"))
    fail_msg("unexpected message: %s", msg);
  onyx_status_release(st);
  for (int k = 0; k < 3; k++)
    onyx_value_release(v[k]);
  onyx_session_release(s);
  free(x);
  free(w);
  free(dy);
}

/* With the compiled-group cache, a gradient group's entry is saved by the
 * first session and loaded by the second; both match the CPU provider. */
static void test_grad_cache(void** state) {
  (void)state;
  char* dir = otm_temp_dir();
  assert_non_null(dir);
  cache_dir = dir;
  const ConvCase c = {{2, 3, 6, 5}, {4, 3, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}};
  cache_loads = cache_warnings = 0;
  for (int pass = 0; pass < 2; pass++) {
    run_conv_case(&c, NULL, NULL);
    assert_int_equal(cache_loads, pass); /* saved by the first session, loaded by the second */
  }
  assert_int_equal(cache_warnings, 0);
  cache_dir = NULL;
  otm_remove_dir(dir);
  free(dir);
}

/* --- AveragePoolGrad ---------------------------------------------------------------- */

static void pool_attrs(OxTestNode* n, const void* user) {
  otm_attr_ints(n, "kernel_shape", 2, (const int64_t[]){3, 2});
  otm_attr_ints(n, "strides", 2, (const int64_t[]){2, 2});
  otm_attr_ints(n, "pads", 4, (const int64_t[]){1, 0, 1, 1});
  otm_attr_int(n, "count_include_pad", *(const int64_t*)user);
}

static void test_avgpool_grad(void** state) {
  (void)state;
  /* X [2, 3, 7, 5]: out H (7 + 2 - 3) / 2 + 1 = 4, W (5 + 1 - 2) / 2 + 1 = 3. */
  static const int64_t xs[4] = {2, 3, 7, 5};
  size_t ny = 2 * 3 * 4 * 3;
  for (int64_t inc = 0; inc < 2; inc++) {
    float* dy = rnd_f(ny, -1, 1);
    /* X_shape is a feed: the plan is built at the first run. */
    TIn ins[2] = {{"dy", 4, {2, 3, 4, 3}, dy, NULL, false}, {"xs", 1, {4}, NULL, xs, false}};
    OnyxValue* out[1];
    compare(ins, 2, "AveragePoolGrad", "dy,xs", "dx", pool_attrs, &inc, NULL, NULL, out);
    const OnyxTensor* t = onyx_value_tensor(out[0]);
    assert_int_equal(onyx_tensor_rank(t), 4);
    assert_memory_equal(onyx_tensor_dims(t), xs, sizeof xs);
    release_all(out, 1);
    free(dy);
  }
}

/* An X_shape fed at run time that overflows or holds a negative dim: a run
 * error naming the node and the input. */
static void test_avgpool_bad_shape(void** state) {
  (void)state;
  const int64_t big = (int64_t)1 << 40;
  const int64_t shapes[2][4] = {{1, 2, big, big}, {1, 2, -4, 4}};
  float dy[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  int64_t inc = 0;
  for (int k = 0; k < 2; k++) {
    TIn ins[2] = {{"dy", 4, {1, 2, 2, 2}, dy, NULL, false}, {"xs", 1, {4}, NULL, shapes[k], false}};
    OnyxSession* s =
        open_grad(ins, 2, "AveragePoolGrad", "dy,xs", "dx", pool_attrs, &inc, true, NULL, NULL);
    expect_on_onednn(s);
    OnyxValue* v[2];
    ok(onyx_value_create_tensor(F32, ins[0].dims, 4, dy, sizeof dy, &v[0]));
    ok(onyx_value_create_tensor(I64, ins[1].dims, 1, shapes[k], sizeof shapes[k], &v[1]));
    const char* names[2] = {"dy", "xs"};
    const char* oname = "dx";
    OnyxValue* out = NULL;
    OnyxStatus* st =
        onyx_session_run(s, NULL, names, (const OnyxValue* const*)v, 2, &oname, 1, &out);
    assert_non_null(st);
    const char* msg = onyx_status_message(st);
    if (!strstr(msg, "node 'g' (AveragePoolGrad)") ||
        !strstr(msg, "X_shape holds a negative dim or its element count overflows"))
      fail_msg("unexpected message: %s", msg);
    onyx_status_release(st);
    onyx_value_release(v[0]);
    onyx_value_release(v[1]);
    onyx_session_release(s);
  }
}

/* --- BatchNormalizationGrad ------------------------------------------------------------ */

static void eps_attr(OxTestNode* n, const void* user) {
  (void)user;
  otm_attr_float(n, "epsilon", 1e-3f);
}

/* dX, dScale, dBias per channel in float64; mean and inv NULL: the batch's. */
static void bn_ref(const int64_t* d, const float* dy, const float* x, const float* scale,
                   const float* mean, const float* inv, double eps, double* dx, double* ds,
                   double* db) {
  const size_t N = (size_t)d[0], C = (size_t)d[1], S = (size_t)(d[2] * d[3]), M = N * S;
  for (size_t c = 0; c < C; c++) {
    double mu = 0, q = 0;
    for (size_t n = 0; n < N; n++)
      for (size_t i = 0; i < S; i++)
        mu += x[(n * C + c) * S + i];
    mu /= (double)M;
    for (size_t n = 0; n < N; n++)
      for (size_t i = 0; i < S; i++)
        q += (x[(n * C + c) * S + i] - mu) * (x[(n * C + c) * S + i] - mu);
    double iv = 1.0 / sqrt(q / (double)M + eps);
    if (mean) {
      mu = mean[c];
      iv = inv[c];
    }
    double sb = 0, ss = 0;
    for (size_t n = 0; n < N; n++)
      for (size_t i = 0; i < S; i++) {
        size_t k = (n * C + c) * S + i;
        sb += dy[k];
        ss += dy[k] * (x[k] - mu) * iv;
      }
    ds[c] = ss;
    db[c] = sb;
    for (size_t n = 0; n < N; n++)
      for (size_t i = 0; i < S; i++) {
        size_t k = (n * C + c) * S + i;
        double xh = (x[k] - mu) * iv;
        dx[k] = scale[c] * iv * (dy[k] - sb / (double)M - xh * ss / (double)M);
      }
  }
}

static void test_batchnorm_grad(void** state) {
  (void)state;
  const int64_t d[4] = {4, 3, 5, 2};
  size_t n = count_of(d, 4);
  float *dy = rnd_f(n, -1, 1), *x = rnd_f(n, -2, 3), *scale = rnd_f(3, 0.5, 1.5);
  float mean[3], inv[3];
  for (int c = 0; c < 3; c++) { /* statistics near, not equal to, the batch's */
    mean[c] = (float)rnd(-0.2, 0.2);
    inv[c] = (float)rnd(0.5, 1.5);
  }
  double *rx = malloc(n * sizeof *rx), rs[3], rb[3];
  for (int stats = 0; stats < 2; stats++) {
    TIn ins[5] = {{"dy", 4, {4, 3, 5, 2}, dy, NULL, false},
                  {"x", 4, {4, 3, 5, 2}, x, NULL, false},
                  {"scale", 1, {3}, scale, NULL, false},
                  {"mean", 1, {3}, mean, NULL, false},
                  {"inv", 1, {3}, inv, NULL, false}};
    OnyxValue* out[3];
    compare(ins, stats ? 5 : 3, "BatchNormalizationGrad",
            stats ? "dy,x,scale,mean,inv" : "dy,x,scale", "dx,ds,db", eps_attr, NULL, NULL, NULL,
            out);
    bn_ref(d, dy, x, scale, stats ? mean : NULL, stats ? inv : NULL, 1e-3, rx, rs, rb);
    size_t cnt;
    close_to("dX", data_of(out[0], &cnt), rx, n);
    close_to("dScale", data_of(out[1], &cnt), rs, 3);
    close_to("dBias", data_of(out[2], &cnt), rb, 3);
    release_all(out, 3);
  }
  free(rx);
  free(dy);
  free(x);
  free(scale);
}

/* --- LayerNormalizationGrad ------------------------------------------------------------ */

static void test_layernorm_grad(void** state) {
  (void)state;
  const int64_t d[3] = {3, 4, 6};
  const size_t n = count_of(d, 3);
  const int64_t axes[2] = {-1, 1};
  for (int a = 0; a < 2; a++) {
    size_t rows = a ? 3 : 12, width = n / rows;
    float *dy = rnd_f(n, -1, 1), *x = rnd_f(n, -2, 2), *scale = rnd_f(width, 0.5, 1.5);
    float* mean = malloc(rows * sizeof *mean);
    float* inv = malloc(rows * sizeof *inv);
    for (size_t r = 0; r < rows; r++) { /* the forward's statistics, eps 1e-5 */
      double mu = 0, q = 0;
      for (size_t i = 0; i < width; i++)
        mu += x[r * width + i];
      mu /= (double)width;
      for (size_t i = 0; i < width; i++)
        q += (x[r * width + i] - mu) * (x[r * width + i] - mu);
      mean[r] = (float)mu;
      inv[r] = (float)(1.0 / sqrt(q / (double)width + 1e-5));
    }
    int64_t sd[3] = {3, a ? 1 : 4, 1};
    TIn ins[5] = {{"dy", 3, {3, 4, 6}, dy, NULL, false},
                  {"x", 3, {3, 4, 6}, x, NULL, false},
                  {"scale", a ? 2 : 1, {a ? 4 : 6, 6}, scale, NULL, false},
                  {"mean", 3, {sd[0], sd[1], sd[2]}, mean, NULL, false},
                  {"inv", 3, {sd[0], sd[1], sd[2]}, inv, NULL, false}};
    OnyxValue* out[3];
    compare(ins, 5, "LayerNormalizationGrad", "dy,x,scale,mean,inv", "dx,ds,db", axis_attr,
            &axes[a], NULL, NULL, out);
    release_all(out, 3);
    free(dy);
    free(x);
    free(scale);
    free(mean);
    free(inv);
  }
}

/* --- Declined --------------------------------------------------------------------------- */

static void expect_declined(OnyxSession* s, const char* reason) {
  char* text = NULL;
  ok(onyx_session_explain(s, &text));
  char want[512];
  snprintf(want, sizeof want, "declined by onednn: %s", reason);
  if (!strstr(text, want)) fail_msg("no '%s' in:\n%s", want, text);
  assert_null(strstr(text, "-> onednn"));
  onyx_free(text);
}

static void maxpool_attrs(OxTestNode* n, const void* user) {
  (void)user;
  otm_attr_ints(n, "kernel_shape", 2, (const int64_t[]){2, 2});
  otm_attr_ints(n, "strides", 2, (const int64_t[]){2, 2});
}

static void ceil_attrs(OxTestNode* n, const void* user) {
  maxpool_attrs(n, user);
  otm_attr_int(n, "ceil_mode", 1);
}

static void test_declined(void** state) {
  (void)state;
  float dy[8] = {0};
  int64_t idx[8] = {0}, xs[4] = {1, 2, 4, 4};
  TIn mp[3] = {{"dy", 4, {1, 2, 2, 2}, dy, NULL, false},
               {"idx", 4, {1, 2, 2, 2}, NULL, idx, false},
               {"xs", 1, {4}, NULL, xs, false}};
  OnyxSession* s =
      open_grad(mp, 3, "MaxPoolGrad", "dy,idx,xs", "dx", maxpool_attrs, NULL, true, NULL, NULL);
  expect_declined(s, "oneDNN's max pooling backward needs the workspace of its own forward "
                     "primitive");
  onyx_session_release(s);
  TIn ap[2] = {{"dy", 4, {1, 2, 2, 2}, dy, NULL, false}, {"xs", 1, {4}, NULL, xs, false}};
  s = open_grad(ap, 2, "AveragePoolGrad", "dy,xs", "dx", ceil_attrs, NULL, true, NULL, NULL);
  expect_declined(s, "ceil_mode 1");
  onyx_session_release(s);
}

static int setup(void** state) {
  (void)state;
  const char* dir = getenv("ONYX_PROVIDER_PATH");
  char path[4096];
  snprintf(path, sizeof path, "%s/libonyx_ep_onednn.so", dir ? dir : ".");
  FILE* f = fopen(path, "rb");
  if (!f) {
    printf("skip: %s not built (apt-get install libdnnl-dev)\n", path);
    return -1;
  }
  fclose(f);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_eltwise_grads),
      cmocka_unit_test(test_concurrent_runs),
      cmocka_unit_test(test_softmax_grads),
      cmocka_unit_test(test_conv_grad),
      cmocka_unit_test(test_conv_grad_weights_only),
      cmocka_unit_test(test_conv_grad_1d_3d),
      cmocka_unit_test(test_conv_grad_bad_shape),
      cmocka_unit_test(test_grad_cache),
      cmocka_unit_test(test_avgpool_grad),
      cmocka_unit_test(test_avgpool_bad_shape),
      cmocka_unit_test(test_batchnorm_grad),
      cmocka_unit_test(test_layernorm_grad),
      cmocka_unit_test(test_declined),
  };
  if (setup(NULL)) return 77;
  return cmocka_run_group_tests(tests, NULL, NULL);
}
