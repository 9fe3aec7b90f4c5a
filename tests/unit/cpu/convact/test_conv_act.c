/* test_conv_act.c — Conv followed by a smooth activation (HardSwish,
 * HardSigmoid, Sigmoid, Tanh, and SiLU as Mul(C, Sigmoid(C))) becomes one
 * com.onyx FusedConv on the CPU provider (the conv_act pass, after the silu
 * pass for SiLU), and the CPU provider's Conv kernel applies the activation
 * on every one of its paths: pointwise GEMM, the transposed small-output
 * GEMM, im2col GEMM, Winograd, direct, depthwise and grouped. Each case is
 * checked against a float64 reference computed here (a direct convolution
 * loop, then the activation's formula), and against the same model run
 * unoptimized; `explain` names the fused node and the pass, and the node
 * stays on the CPU provider. Grouped convs (groups of 2 to 16 channels)
 * against the same reference, with and without an activation. The ctest runs once per ISA path the
 * machine has (ONYX_CPU_ISA caps it: test_conv_act_generic, test_conv_act_avx2). A Conv whose
 * output is read twice keeps its activation apart; a FusedConv with an activation the kernel lacks
 * fails at session creation naming it; with the oneDNN provider first, no node that provider runs
 * gets a smooth activation. GlobalAveragePool, the squeeze-excite blocks'
 * other CPU kernel, against a long double mean. */
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

static void fill(float* x, size_t n, unsigned seed, float scale) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = scale * ((float)((seed >> 8) % 2001) / 1000.0f - 1.0f);
  }
}

/* One conv: X [n, c, h, w], W [m, c / group, k, k], stride s, pads p. */
typedef struct Shape {
  const char* what;
  int n, c, h, w, m, k, s, p, group;
} Shape;

static const Shape SHAPES[] = {
    {"pointwise GEMM", 1, 24, 14, 14, 40, 1, 1, 0, 1},
    {"pointwise, small output (Y^T GEMM)", 2, 32, 7, 7, 72, 1, 1, 0, 1},
    {"pointwise, odd sizes", 1, 5, 3, 11, 13, 1, 1, 0, 1},
    {"3x3 stride 1 (Winograd / direct)", 1, 16, 12, 12, 24, 3, 1, 1, 1},
    {"3x3 stride 2 stem (direct / im2col)", 1, 3, 17, 17, 16, 3, 2, 1, 1},
    {"1x1 stride 2", 1, 16, 9, 9, 8, 1, 2, 0, 1},
    {"depthwise 3x3", 1, 24, 10, 10, 24, 3, 1, 1, 24},
    {"depthwise 5x5 stride 2", 2, 40, 13, 13, 40, 5, 2, 2, 40},
    {"grouped, 8 channels a group", 1, 32, 9, 9, 32, 3, 1, 1, 4},
};

typedef enum ActKind { A_HARD_SWISH, A_HARD_SIGMOID, A_SIGMOID, A_TANH, A_SILU, A_NONE } ActKind;

typedef struct Act {
  ActKind kind;
  const char* op;    /* the model's activation node */
  const char* attr;  /* FusedConv's `activation` */
  float alpha, beta; /* HardSigmoid's */
} Act;

static const Act ACTS[] = {
    {A_HARD_SWISH, "HardSwish", "HardSwish", 0, 0},
    {A_HARD_SIGMOID, "HardSigmoid", "HardSigmoid", 0.3f, 0.4f},
    {A_SIGMOID, "Sigmoid", "Sigmoid", 0, 0},
    {A_TANH, "Tanh", "Tanh", 0, 0},
    {A_SILU, "Sigmoid", "Silu", 0, 0}, /* Mul(C, Sigmoid(C)) */
};

static double clamp01(double v) {
  return v < 0 ? 0 : v > 1 ? 1 : v;
}

static double act_ref(const Act* a, double v) {
  switch (a->kind) {
  case A_HARD_SWISH:
    return v * clamp01(v / 6.0 + 0.5);
  case A_HARD_SIGMOID:
    return clamp01((double)a->alpha * v + (double)a->beta);
  case A_SIGMOID:
    return 1.0 / (1.0 + exp(-v));
  case A_TANH:
    return tanh(v);
  case A_SILU:
    return v / (1.0 + exp(-v));
  case A_NONE:
    return v;
  }
  return v;
}

static int out_dim(const Shape* sh, int in) {
  return (in + 2 * sh->p - sh->k) / sh->s + 1;
}

/* Conv(X, W, B) in double, the plain loop. */
static void conv_ref(const Shape* sh, const float* x, const float* wt, const float* b, double* y) {
  const int oh = out_dim(sh, sh->h), ow = out_dim(sh, sh->w);
  const int cg = sh->c / sh->group, mg = sh->m / sh->group;
  for (int n = 0; n < sh->n; n++)
    for (int o = 0; o < sh->m; o++)
      for (int i = 0; i < oh; i++)
        for (int j = 0; j < ow; j++) {
          double acc = b[o];
          for (int ci = 0; ci < cg; ci++) {
            const int c = o / mg * cg + ci;
            for (int ki = 0; ki < sh->k; ki++)
              for (int kj = 0; kj < sh->k; kj++) {
                const int ii = i * sh->s + ki - sh->p, jj = j * sh->s + kj - sh->p;
                if (ii < 0 || ii >= sh->h || jj < 0 || jj >= sh->w) continue;
                acc += (double)x[((n * sh->c + c) * sh->h + ii) * sh->w + jj] *
                       wt[((o * cg + ci) * sh->k + ki) * sh->k + kj];
              }
          }
          y[((n * sh->m + o) * oh + i) * ow + j] = acc;
        }
}

static OnyxSession* open_at(const uint8_t* bytes, size_t len, OnyxOptimizationLevel level,
                            const char* first_provider) {
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  assert_null(onyx_session_options_set_optimization_level(o, level));
  assert_null(onyx_session_options_set_threads(o, 1));
  if (first_provider) assert_null(onyx_session_options_add_provider(o, first_provider, NULL, 0, 1));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  if (st) fail_msg("session: %s", onyx_status_message(st));
  return s;
}

static size_t count_op(const OnyxSession* s, const char* op) {
  size_t n = 0;
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++)
    n += !strcmp(s->prog.graph->nodes[i]->op_type, op);
  return n;
}

static const OxNode* find_op(const OnyxSession* s, const char* op) {
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++)
    if (!strcmp(s->prog.graph->nodes[i]->op_type, op)) return s->prog.graph->nodes[i];
  return NULL;
}

static void run(OnyxSession* s, const Shape* sh, const float* x, float* out, size_t count) {
  const int64_t dims[4] = {sh->n, sh->c, sh->h, sh->w};
  const size_t nx = (size_t)sh->n * sh->c * sh->h * sh->w;
  OnyxValue* in = NULL;
  assert_null(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dims, 4, x, nx * sizeof(float), &in));
  const char* in_names[] = {"X"};
  const char* out_name = "Y";
  OnyxValue* y = NULL;
  OnyxStatus* st =
      onyx_session_run(s, NULL, in_names, (const OnyxValue* const*)&in, 1, &out_name, 1, &y);
  if (st) fail_msg("run: %s", onyx_status_message(st));
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_elem_count(t), count);
  memcpy(out, onyx_tensor_data(t), count * sizeof(float));
  onyx_value_release(y);
  onyx_value_release(in);
}

/* Conv -> act as a model; with `also_c` the Conv's output C is a graph
 * output as well (read twice: no fusion). */
static void build(const Shape* sh, const Act* a, const float* wt, const float* b, bool also_c,
                  uint8_t** bytes, size_t* len) {
  OxTestModel* m = otm_new(14);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){sh->n, sh->c, sh->h, sh->w});
  otm_initializer(m, "Wt", ONYX_ELEM_FLOAT32, 4,
                  (int64_t[]){sh->m, sh->c / sh->group, sh->k, sh->k}, wt);
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 1, (int64_t[]){sh->m}, b);
  OxTestNode* c = otm_node(m, "Conv", "conv", "X,Wt,B", a->kind == A_NONE ? "Y" : "C");
  otm_attr_ints(c, "pads", 4, (int64_t[]){sh->p, sh->p, sh->p, sh->p});
  otm_attr_ints(c, "strides", 2, (int64_t[]){sh->s, sh->s});
  otm_attr_ints(c, "kernel_shape", 2, (int64_t[]){sh->k, sh->k});
  otm_attr_int(c, "group", sh->group);
  if (a->kind == A_NONE) {
    /* the Conv alone */
  } else if (a->kind == A_SILU) {
    otm_node(m, "Sigmoid", "sig", "C", "S");
    otm_node(m, "Mul", "mul", "C,S", "Y");
  } else {
    OxTestNode* g = otm_node(m, a->op, "act", "C", "Y");
    if (a->kind == A_HARD_SIGMOID) {
      otm_attr_float(g, "alpha", a->alpha);
      otm_attr_float(g, "beta", a->beta);
    }
  }
  const int64_t ydims[4] = {sh->n, sh->m, out_dim(sh, sh->h), out_dim(sh, sh->w)};
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, ydims);
  if (also_c) otm_output(m, "C", ONYX_ELEM_FLOAT32, 4, ydims);
  otm_serialize(m, bytes, len);
  otm_free(m);
}

/* One shape and activation: fused (or not, with also_c), checked against
 * the float64 reference and the unoptimized session. */
static void conv_act_case(const Shape* sh, const Act* a, bool also_c) {
  const size_t nw = (size_t)sh->m * (sh->c / sh->group) * sh->k * sh->k;
  const size_t nx = (size_t)sh->n * sh->c * sh->h * sh->w;
  const size_t ny = (size_t)sh->n * sh->m * out_dim(sh, sh->h) * out_dim(sh, sh->w);
  float* wt = malloc(nw * sizeof(float));
  float* b = malloc((size_t)sh->m * sizeof(float));
  float* x = malloc(nx * sizeof(float));
  double* ref = malloc(ny * sizeof(double));
  float* y = malloc(ny * sizeof(float));
  float* yp = malloc(ny * sizeof(float));
  assert_true(wt && b && x && ref && y && yp);
  /* conv outputs over about [-6, 6]: both clamps of the hard forms, the
   * sigmoid's tails */
  const int fan_in = sh->c / sh->group * sh->k * sh->k;
  fill(wt, nw, 7, 3.0f / sqrtf((float)fan_in));
  fill(b, (size_t)sh->m, 11, 1.0f);
  fill(x, nx, 13, 2.0f);
  uint8_t* bytes = NULL;
  size_t len = 0;
  build(sh, a, wt, b, also_c, &bytes, &len);

  OnyxSession* s = open_at(bytes, len, ONYX_OPT_ALL, NULL);
  const bool fused = !also_c && a->kind != A_NONE;
  assert_int_equal(count_op(s, "FusedConv"), fused ? 1 : 0);
  assert_int_equal(count_op(s, "Conv"), fused ? 0 : 1);
  if (a->kind != A_NONE)
    assert_int_equal(count_op(s, "Mul") + count_op(s, a->op) + count_op(s, "Silu"), fused ? 0 : 1);
  if (fused) {
    const OxNode* f = find_op(s, "FusedConv");
    assert_string_equal(f->domain, "com.onyx");
    assert_string_equal(ox_node_attr_string(f, "activation", ""), a->attr);
    if (a->kind == A_HARD_SIGMOID) {
      assert_float_equal(ox_node_attr_float(f, "alpha", 0), a->alpha, 0);
      assert_float_equal(ox_node_attr_float(f, "beta", 0), a->beta, 0);
    }
    assert_true(f->ep >= 0);
    assert_string_equal(s->prog.eps[f->ep].name, "cpu"); /* where the Conv was */
    char* text = NULL;
    assert_null(onyx_session_explain(s, &text));
    if (!strstr(text, "FusedConv") || !strstr(text, "conv_act from"))
      fail_msg("%s, %s: explain:\n%s", sh->what, a->attr, text);
    onyx_free(text);
  }
  conv_ref(sh, x, wt, b, ref);
  run(s, sh, x, y, ny);
  OnyxSession* plain = open_at(bytes, len, ONYX_OPT_DISABLED, NULL);
  run(plain, sh, x, yp, ny);
  for (size_t i = 0; i < ny; i++) {
    const double want = act_ref(a, ref[i]), tol = 5e-5 * (1 + fabs(want));
    if (!(fabs(y[i] - want) <= tol))
      fail_msg("%s, %s: Y[%zu] = %.9g, want %.9g (conv %.9g)", sh->what, a->attr, i, y[i], want,
               ref[i]);
    if (!(fabs(y[i] - yp[i]) <= tol))
      fail_msg("%s, %s: Y[%zu] = %.9g fused, %.9g unfused", sh->what, a->attr, i, y[i], yp[i]);
  }
  onyx_session_release(plain);
  onyx_session_release(s);
  free(bytes);
  free(wt), free(b), free(x), free(ref), free(y), free(yp);
}

static void test_every_path_every_act(void** state) {
  (void)state;
  for (size_t i = 0; i < sizeof SHAPES / sizeof *SHAPES; i++)
    for (size_t j = 0; j < sizeof ACTS / sizeof *ACTS; j++)
      conv_act_case(&SHAPES[i], &ACTS[j], false);
}

/* Grouped convs (groups of 2 to 16 input channels, 1 to 8 output channels
 * a group, strides 1 and 2, 3x3 and 5x5, batch 2), with and without an
 * activation: the GEMM per group, or the depthwise kernel's grouped planes
 * on the AVX2 path (conv_grouped_direct). */
static void test_grouped(void** state) {
  (void)state;
  static const Shape G[] = {
      {"groups of 2, 4 out", 1, 16, 11, 13, 32, 3, 1, 1, 8},
      {"groups of 4, 1 out", 2, 16, 9, 9, 4, 3, 2, 1, 4},
      {"groups of 8, 8 out, stride 2", 1, 48, 15, 15, 48, 3, 2, 1, 6},
      {"groups of 8, 5x5", 1, 24, 10, 17, 24, 5, 1, 2, 3},
      {"groups of 16", 1, 64, 7, 7, 32, 3, 1, 1, 4},
  };
  static const Act none = {A_NONE, NULL, "", 0, 0};
  for (size_t i = 0; i < sizeof G / sizeof *G; i++) {
    conv_act_case(&G[i], &none, false);
    conv_act_case(&G[i], &ACTS[4], false);
  }
}

/* Conv -> HardSwish and Conv -> Sigmoid -> Mul (SiLU) with the Conv's
 * output read twice: nothing fuses, the results are the same. */
static void test_read_twice_not_fused(void** state) {
  (void)state;
  conv_act_case(&SHAPES[0], &ACTS[0], true);
  conv_act_case(&SHAPES[3], &ACTS[4], true);
}

/* A FusedConv whose activation the kernel lacks: session creation fails
 * naming the activation. */
static void test_unknown_activation(void** state) {
  (void)state;
  OxTestModel* m = otm_new(14);
  otm_add_opset(m, "com.onyx", 1);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 2, 4, 4});
  float wt[4 * 2] = {1, 2, 3, 4, 5, 6, 7, 8};
  otm_initializer(m, "Wt", ONYX_ELEM_FLOAT32, 4, (int64_t[]){4, 2, 1, 1}, wt);
  OxTestNode* f = otm_node(m, "FusedConv", "fc", "X,Wt", "Y");
  otm_node_domain(f, "com.onyx");
  otm_attr_string(f, "activation", "Softsign");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 4, 4, 4});
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  assert_non_null(st);
  assert_null(s);
  if (!strstr(onyx_status_message(st), "activation 'Softsign' not supported"))
    fail_msg("message: %s", onyx_status_message(st));
  onyx_status_release(st);
  free(bytes);
}

/* With the oneDNN provider first (where it is built and loads), no node it
 * runs carries a smooth activation: its FusedConv takes Relu, LeakyRelu and
 * Clip only. The outputs still match the reference. */
static void test_onednn_never_gets_smooth(void** state) {
  (void)state;
  const Shape* sh = &SHAPES[3];
  const Act* a = &ACTS[0];
  const size_t nw = (size_t)sh->m * sh->c * 9, nx = (size_t)sh->c * sh->h * sh->w;
  const size_t ny = (size_t)sh->m * sh->h * sh->w;
  float* wt = malloc(nw * sizeof(float));
  float b[24], *x = malloc(nx * sizeof(float)), *y = malloc(ny * sizeof(float));
  double* ref = malloc(ny * sizeof(double));
  assert_true(wt && x && y && ref);
  fill(wt, nw, 7, 0.25f);
  fill(b, 24, 11, 1.0f);
  fill(x, nx, 13, 2.0f);
  uint8_t* bytes = NULL;
  size_t len = 0;
  build(sh, a, wt, b, false, &bytes, &len);
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  assert_null(onyx_session_options_set_optimization_level(o, ONYX_OPT_ALL));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_options_add_provider(o, "onednn", NULL, 0, 1);
  if (!st) st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  if (st) { /* no oneDNN here */
    onyx_status_release(st);
    free(bytes), free(wt), free(x), free(y), free(ref);
    skip();
  }
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
    const OxNode* n = s->prog.graph->nodes[i];
    if (strcmp(n->op_type, "FusedConv")) continue;
    const char* act = ox_node_attr_string(n, "activation", "");
    if (!strcmp(act, "HardSwish")) assert_string_equal(s->prog.eps[n->ep].name, "cpu");
  }
  conv_ref(sh, x, wt, b, ref);
  run(s, sh, x, y, ny);
  for (size_t i = 0; i < ny; i++) {
    const double want = act_ref(a, ref[i]);
    if (!(fabs(y[i] - want) <= 5e-5 * (1 + fabs(want))))
      fail_msg("onednn: Y[%zu] = %.9g, want %.9g", i, y[i], want);
  }
  onyx_session_release(s);
  free(bytes), free(wt), free(x), free(y), free(ref);
}

/* GlobalAveragePool (the squeeze of the mobile networks' squeeze-excite
 * blocks) over planes of 1 to 3139 floats, around its 8 partial sums,
 * against a mean in long double written here. */
static void test_global_average_pool(void** state) {
  (void)state;
  static const int64_t HW[][2] = {{1, 1}, {1, 7}, {2, 4}, {3, 3}, {7, 7}, {56, 56}, {43, 73}};
  for (size_t t = 0; t < sizeof HW / sizeof *HW; t++) {
    const int64_t n = 2, c = 5, h = HW[t][0], w = HW[t][1];
    OxTestModel* m = otm_new(14);
    otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){n, c, h, w});
    otm_node(m, "GlobalAveragePool", "gap", "X", "Y");
    otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){n, c, 1, 1});
    uint8_t* bytes = NULL;
    size_t len = 0;
    otm_serialize(m, &bytes, &len);
    otm_free(m);
    const size_t plane = (size_t)(h * w), nx = (size_t)(n * c) * plane;
    float* x = malloc(nx * sizeof(float));
    assert_non_null(x);
    fill(x, nx, 17 + (unsigned)t, 3.0f);
    for (size_t i = 0; i < nx; i += 5)
      x[i] += 1000.0f; /* large and small terms together */
    OnyxSession* s = open_at(bytes, len, ONYX_OPT_ALL, NULL);
    const Shape sh = {"gap", (int)n, (int)c, (int)h, (int)w, 0, 1, 1, 0, 1};
    float y[10];
    run(s, &sh, x, y, (size_t)(n * c));
    for (size_t p = 0; p < (size_t)(n * c); p++) {
      long double sum = 0;
      for (size_t i = 0; i < plane; i++)
        sum += x[p * plane + i];
      const double want = (double)(sum / (long double)plane);
      if (!(fabs(y[p] - want) <= 1e-7 * fabs(want) + 1e-7))
        fail_msg("%lldx%lld plane %zu: %.9g, want %.9g", (long long)h, (long long)w, p, y[p], want);
    }
    onyx_session_release(s);
    free(x);
    free(bytes);
  }
}

/* The oneDNN case runs as its own ctest (test_conv_act_onednn:
 * CONV_ACT_ONEDNN=only), the others with CONV_ACT_ONEDNN=skip: under
 * LeakSanitizer, libgomp's worker threads crash the leak tracer at exit, so
 * only the oneDNN case runs without leak checking. Unset: all of them. */
int main(void) {
  const struct CMUnitTest all[] = {
      cmocka_unit_test(test_every_path_every_act), cmocka_unit_test(test_grouped),
      cmocka_unit_test(test_read_twice_not_fused), cmocka_unit_test(test_unknown_activation),
      cmocka_unit_test(test_global_average_pool),  cmocka_unit_test(test_onednn_never_gets_smooth),
  };
  const size_t n_all = sizeof all / sizeof all[0];
  const char* mode = getenv("CONV_ACT_ONEDNN");
  if (mode && !strcmp(mode, "only"))
    return _cmocka_run_group_tests("conv_act_onednn", all + n_all - 1, 1, NULL, NULL);
  if (mode && !strcmp(mode, "skip"))
    return _cmocka_run_group_tests("conv_act", all, n_all - 1, NULL, NULL);
  return _cmocka_run_group_tests("conv_act", all, n_all, NULL, NULL);
}
