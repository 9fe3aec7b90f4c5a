/* test_opt_pad.c — Pad in the optimizer (host/optimizer/opt_pad.c):
 * `eliminate` drops a Pad whose pads are all zero, and `pad_fold` folds a
 * constant-0 Pad on the spatial axes into the pads of the Conv or
 * AveragePool (count_include_pad 1) that is its only reader, and a -inf
 * Pad into a MaxPool's. It leaves a Pad with another value, a second
 * reader, a channel pad, an AveragePool with count_include_pad 0, and a
 * Pad and reader on different providers. Every session's output is checked
 * against a reference computed here in plain C (the input padded
 * explicitly, then a convolution or pooling without padding, in double),
 * with and without the optimizer. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "opt_internal.h"
#include "ox_model.h"
#include "ox_session.h"
#include "ox_test_models.h"

enum { C = 2, H = 5, W = 6, CO = 3, K = 3 };

typedef enum Reader { R_CONV, R_AVG, R_MAX, R_RELU } Reader;

typedef struct PadCase {
  const char* label;
  int opset;          /* 2: the pads and value attributes; 13: inputs */
  int64_t pads[8];    /* N, C, H, W begins, then ends */
  float value;        /* the fill */
  bool give_value;    /* opset 13: a constant_value input */
  Reader reader;      /* what reads the Pad's output */
  int64_t rpads[4];   /* the reader's own pads (H, W begins, then ends) */
  int count_include;  /* AveragePool's count_include_pad */
  bool second_reader; /* the Pad's output is also read by a Relu (an output) */
  bool pad_is_output; /* the Pad's output is a graph output too */
  bool folded;        /* expected: the Pad is gone */
} PadCase;

static void fill(float* x, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
  }
}

static const PadCase* g_case;
static float g_x[C * H * W], g_w[CO * C * K * K], g_b[CO];

/* Channels of the Pad's output. */
static int channels(const PadCase* c) {
  return C + (int)(c->pads[1] + c->pads[5]);
}

/* The input padded explicitly (the Pad's and then the reader's own pads,
 * the reader's filling with 0, or -inf for MaxPool): [channels, *ph, *pw]. */
static double* padded(const PadCase* c, int64_t* ph, int64_t* pw) {
  const int64_t t = c->pads[2], l = c->pads[3], bo = c->pads[6], r = c->pads[7];
  const int64_t h1 = H + t + bo, w1 = W + l + r;
  const int c1 = channels(c);
  const double own_fill = c->reader == R_MAX ? -INFINITY : 0.0;
  *ph = h1 + c->rpads[0] + c->rpads[2];
  *pw = w1 + c->rpads[1] + c->rpads[3];
  double* p = malloc(sizeof(double) * (size_t)c1 * (size_t)(*ph * *pw));
  for (int ch = 0; ch < c1; ch++)
    for (int64_t i = 0; i < *ph; i++)
      for (int64_t j = 0; j < *pw; j++) {
        const int64_t i1 = i - c->rpads[0], j1 = j - c->rpads[1]; /* in the Pad's output */
        const int64_t c0 = ch - c->pads[1];
        double v = own_fill;
        if (i1 >= 0 && i1 < h1 && j1 >= 0 && j1 < w1) {
          const int64_t i0 = i1 - t, j0 = j1 - l;
          v = c0 >= 0 && c0 < C && i0 >= 0 && i0 < H && j0 >= 0 && j0 < W
                  ? g_x[(c0 * H + i0) * W + j0]
                  : c->value;
        }
        p[(ch * *ph + i) * *pw + j] = v;
      }
  return p;
}

/* The reader's output over the explicitly padded input, without padding:
 * Conv (stride 1), or 3x3 pooling with stride 2 (AveragePool divides by
 * 9: count_include_pad 1); Relu of the Pad's output. */
static double* reference(const PadCase* c, int64_t* oh, int64_t* ow, int* oc) {
  int64_t ph, pw;
  double* p = padded(c, &ph, &pw);
  if (c->reader == R_RELU) {
    *oc = channels(c);
    *oh = ph;
    *ow = pw;
    for (int64_t i = 0; i < *oc * ph * pw; i++)
      p[i] = p[i] > 0 ? p[i] : 0;
    return p;
  }
  const int stride = c->reader == R_CONV ? 1 : 2;
  *oc = c->reader == R_CONV ? CO : channels(c);
  *oh = (ph - K) / stride + 1;
  *ow = (pw - K) / stride + 1;
  double* y = malloc(sizeof(double) * (size_t)(*oc * *oh * *ow));
  for (int o = 0; o < *oc; o++)
    for (int64_t i = 0; i < *oh; i++)
      for (int64_t j = 0; j < *ow; j++) {
        double acc = c->reader == R_CONV ? g_b[o] : c->reader == R_MAX ? -INFINITY : 0;
        for (int ki = 0; ki < K; ki++)
          for (int kj = 0; kj < K; kj++) {
            const int64_t ii = i * stride + ki, jj = j * stride + kj;
            if (c->reader == R_CONV) {
              for (int ch = 0; ch < C; ch++)
                acc += p[(ch * ph + ii) * pw + jj] * g_w[((o * C + ch) * K + ki) * K + kj];
            } else {
              const double v = p[(o * ph + ii) * pw + jj];
              acc = c->reader == R_MAX ? (v > acc ? v : acc) : acc + v;
            }
          }
        y[(o * *oh + i) * *ow + j] = c->reader == R_AVG ? acc / (K * K) : acc;
      }
  free(p);
  return y;
}

static void build(const PadCase* c, uint8_t** bytes, size_t* len) {
  OxTestModel* m = otm_new(c->opset);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, C, H, W});
  OxTestNode* pad;
  if (c->opset < 11) {
    pad = otm_node(m, "Pad", "pad", "X", "P");
    otm_attr_ints(pad, "pads", 8, c->pads);
    otm_attr_float(pad, "value", c->value);
  } else {
    otm_initializer(m, "pads", ONYX_ELEM_INT64, 1, (int64_t[]){8}, c->pads);
    if (c->give_value) otm_initializer(m, "v", ONYX_ELEM_FLOAT32, 0, NULL, &c->value);
    pad = otm_node(m, "Pad", "pad", c->give_value ? "X,pads,v" : "X,pads", "P");
  }
  otm_attr_string(pad, "mode", "constant");
  OxTestNode* r = NULL;
  switch (c->reader) {
  case R_CONV:
    otm_initializer(m, "Wt", ONYX_ELEM_FLOAT32, 4, (int64_t[]){CO, C, K, K}, g_w);
    otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 1, (int64_t[]){CO}, g_b);
    r = otm_node(m, "Conv", "reader", "P,Wt,B", "Y");
    break;
  case R_AVG:
    r = otm_node(m, "AveragePool", "reader", "P", "Y");
    otm_attr_int(r, "count_include_pad", c->count_include);
    break;
  case R_MAX:
    r = otm_node(m, "MaxPool", "reader", "P", "Y");
    break;
  case R_RELU:
    r = otm_node(m, "Relu", "reader", "P", "Y");
    break;
  }
  if (c->reader != R_RELU) {
    otm_attr_ints(r, "kernel_shape", 2, (int64_t[]){K, K});
    if (c->reader != R_CONV) otm_attr_ints(r, "strides", 2, (int64_t[]){2, 2});
    otm_attr_ints(r, "pads", 4, c->rpads);
  }
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, -1, NULL);
  if (c->second_reader) {
    otm_node(m, "Relu", "other", "P", "Z");
    otm_output(m, "Z", ONYX_ELEM_FLOAT32, -1, NULL);
  }
  if (c->pad_is_output) otm_output(m, "P", ONYX_ELEM_FLOAT32, -1, NULL);
  otm_serialize(m, bytes, len);
  otm_free(m);
}

static OnyxSession* open_at(const uint8_t* bytes, size_t len, OnyxOptimizationLevel level) {
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  assert_null(onyx_session_options_set_optimization_level(o, level));
  assert_null(onyx_session_options_set_threads(o, 1));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  if (st) fail_msg("%s: session: %s", g_case->label, onyx_status_message(st));
  onyx_session_options_release(o);
  return s;
}

static size_t count_op(const OnyxSession* s, const char* op) {
  size_t n = 0;
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++)
    n += !strcmp(s->prog.graph->nodes[i]->op_type, op);
  return n;
}

/* Runs s and checks output `name` against want (oc x oh x ow). */
static void check(OnyxSession* s, const char* name, const double* want, int oc, int64_t oh,
                  int64_t ow, const char* how) {
  OnyxValue* in = NULL;
  assert_null(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){1, C, H, W}, 4, g_x,
                                       sizeof g_x, &in));
  const char* in_names[] = {"X"};
  OnyxValue* y = NULL;
  OnyxStatus* st =
      onyx_session_run(s, NULL, in_names, (const OnyxValue* const*)&in, 1, &name, 1, &y);
  if (st) fail_msg("%s (%s): run: %s", g_case->label, how, onyx_status_message(st));
  const OnyxTensor* t = onyx_value_tensor(y);
  const int64_t* d = onyx_tensor_dims(t);
  if (onyx_tensor_rank(t) != 4 || d[1] != oc || d[2] != oh || d[3] != ow)
    fail_msg("%s (%s): %s has dims [%lld,%lld,%lld,%lld], want [1,%d,%lld,%lld]", g_case->label,
             how, name, (long long)d[0], (long long)d[1], (long long)d[2], (long long)d[3], oc,
             (long long)oh, (long long)ow);
  const float* got = onyx_tensor_data(t);
  for (int64_t i = 0; i < oc * oh * ow; i++)
    if (!(fabs(got[i] - want[i]) <= 1e-5 * (1 + fabs(want[i]))))
      fail_msg("%s (%s): %s[%lld] = %.9g, want %.9g", g_case->label, how, name, (long long)i,
               got[i], want[i]);
  onyx_value_release(y);
  onyx_value_release(in);
}

static void run_case(const PadCase* c) {
  g_case = c;
  uint8_t* bytes = NULL;
  size_t len = 0;
  build(c, &bytes, &len);
  int64_t oh, ow;
  int oc;
  double* want = reference(c, &oh, &ow, &oc);
  OnyxSession* s = open_at(bytes, len, ONYX_OPT_ALL);
  if (count_op(s, "Pad") != (c->folded ? 0u : 1u))
    fail_msg("%s: %zu Pad nodes after the optimizer, want %d", c->label, count_op(s, "Pad"),
             c->folded ? 0 : 1);
  check(s, "Y", want, oc, oh, ow, "optimized");
  OnyxSession* plain = open_at(bytes, len, ONYX_OPT_DISABLED);
  assert_int_equal(count_op(plain, "Pad"), 1);
  check(plain, "Y", want, oc, oh, ow, "not optimized");
  if (c->pad_is_output || c->second_reader) { /* the Pad's own value, and its Relu */
    PadCase relu = *c;
    relu.reader = R_RELU;
    memset(relu.rpads, 0, sizeof relu.rpads);
    int64_t ph, pw;
    double* p = c->pad_is_output ? padded(&relu, &ph, &pw) : reference(&relu, &ph, &pw, &oc);
    check(s, c->pad_is_output ? "P" : "Z", p, channels(c), ph, pw, "optimized");
    free(p);
  }
  onyx_session_release(plain);
  onyx_session_release(s);
  free(want);
  free(bytes);
}

static void setup_data(void) {
  fill(g_x, C * H * W, 3);
  fill(g_w, CO * C * K * K, 5);
  fill(g_b, CO, 7);
}

static void test_zero_pad_removed(void** state) {
  (void)state;
  setup_data();
  const PadCase cases[] = {
      {"zero pads, then Relu", 13, {0}, 0, false, R_RELU, {0}, 0, false, false, true},
      {"zero pads with a value input", 13, {0}, 5, true, R_RELU, {0}, 0, false, false, true},
      {"zero pads (opset 2)", 2, {0}, 0, false, R_RELU, {0}, 0, false, false, true},
      /* the Pad's output is a graph output: its producer (none: X is a graph
       * input) cannot take it over, so it stays */
      {"zero pads, a graph output", 13, {0}, 0, false, R_RELU, {0}, 0, false, true, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    run_case(&cases[i]);
}

static void test_pad_folded(void** state) {
  (void)state;
  setup_data();
  const PadCase cases[] = {
      {"into Conv", 13, {0, 0, 1, 2, 0, 0, 2, 1}, 0, false, R_CONV, {0}, 0, false, false, true},
      {"into Conv with its own pads",
       13,
       {0, 0, 1, 0, 0, 0, 0, 2},
       0,
       true,
       R_CONV,
       {1, 0, 0, 1},
       0,
       false,
       false,
       true},
      {"into Conv (opset 2)",
       2,
       {0, 0, 1, 1, 0, 0, 1, 1},
       0,
       false,
       R_CONV,
       {0},
       0,
       false,
       false,
       true},
      {"into AveragePool, count_include_pad 1",
       13,
       {0, 0, 1, 1, 0, 0, 2, 0},
       0,
       false,
       R_AVG,
       {0, 1, 0, 0},
       1,
       false,
       false,
       true},
      {"into MaxPool, value -inf",
       13,
       {0, 0, 2, 1, 0, 0, 0, 1},
       -INFINITY,
       true,
       R_MAX,
       {0},
       0,
       false,
       false,
       true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    run_case(&cases[i]);
}

static void test_pad_not_folded(void** state) {
  (void)state;
  setup_data();
  const PadCase cases[] = {
      {"value 1 before Conv",
       13,
       {0, 0, 1, 1, 0, 0, 1, 1},
       1,
       true,
       R_CONV,
       {0},
       0,
       false,
       false,
       false},
      {"value 0.5 before Conv (opset 2)",
       2,
       {0, 0, 1, 1, 0, 0, 1, 1},
       0.5f,
       false,
       R_CONV,
       {0},
       0,
       false,
       false,
       false},
      {"a second reader",
       13,
       {0, 0, 1, 1, 0, 0, 1, 1},
       0,
       false,
       R_CONV,
       {0},
       0,
       true,
       false,
       false},
      {"the Pad's output is a graph output",
       13,
       {0, 0, 1, 1, 0, 0, 1, 1},
       0,
       false,
       R_CONV,
       {0},
       0,
       false,
       true,
       false},
      {"count_include_pad 0",
       13,
       {0, 0, 1, 1, 0, 0, 1, 1},
       0,
       false,
       R_AVG,
       {0},
       0,
       false,
       false,
       false},
      {"a channel pad", 13, {0, 1, 1, 1, 0, 0, 1, 1}, 0, false, R_AVG, {0}, 1, false, false, false},
      {"a crop", 13, {0, 0, -1, 1, 0, 0, 1, 1}, 0, false, R_CONV, {0}, 0, false, false, false},
      {"MaxPool with value 0",
       13,
       {0, 0, 1, 1, 0, 0, 1, 1},
       0,
       false,
       R_MAX,
       {0},
       0,
       false,
       false,
       false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    run_case(&cases[i]);
}

/* The fusion phase on a graph placed by hand: the Pad on provider 1, the
 * Conv on provider 0 (the CPU provider): the Pad stays; both on 0: it
 * folds, and the Conv's pads hold the Pad's. */
static void fold_placed(int32_t pad_ep, bool want_folded) {
  static const PadCase c = {
      "placed", 13, {0, 0, 1, 2, 0, 0, 2, 1}, 0, false, R_CONV, {0}, 0, false, false, true};
  g_case = &c;
  uint8_t* bytes = NULL;
  size_t len = 0;
  build(&c, &bytes, &len);
  OxGraph* g = NULL;
  assert_null(ox_model_load_bytes(bytes, len, NULL, "pad", NULL, &g));
  free(bytes);
  assert_null(ox_graph_resolve(g, NULL, 0));
  for (size_t i = 0; i < g->n_nodes; i++) {
    OxNode* n = g->nodes[i];
    n->ep = !strcmp(n->op_type, "Pad") ? pad_ep : 0;
    n->group = -1;
  }
  OxOptConfig cfg = {.level = ONYX_OPT_EXTENDED,
                     .contrib_available = true,
                     .phase = OX_OPT_PHASE_FUSION,
                     .cpu_ep = 0};
  OxOptStats stats = {0};
  assert_null(ox_optimize(g, &cfg, &stats));
  size_t pads = 0;
  const OxNode* conv = NULL;
  for (size_t i = 0; i < g->n_nodes; i++) {
    pads += !strcmp(g->nodes[i]->op_type, "Pad");
    if (strstr(g->nodes[i]->op_type, "Conv")) conv = g->nodes[i];
  }
  assert_int_equal(pads, want_folded ? 0 : 1);
  assert_int_equal(stats.pad_fold, want_folded ? 1 : 0);
  assert_non_null(conv);
  size_t n = 0;
  const int64_t* p = ox_node_attr_ints(conv, "pads", &n);
  if (want_folded) {
    assert_int_equal(n, 4);
    const int64_t expect[4] = {1, 2, 2, 1};
    for (size_t i = 0; i < 4; i++)
      assert_int_equal(p[i], expect[i]);
  } else {
    for (size_t i = 0; p && i < n; i++)
      assert_int_equal(p[i], 0);
  }
  ox_graph_free(g);
}

static void test_pad_across_providers(void** state) {
  (void)state;
  setup_data();
  fold_placed(1, false);
  fold_placed(0, true);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_zero_pad_removed),
      cmocka_unit_test(test_pad_folded),
      cmocka_unit_test(test_pad_not_folded),
      cmocka_unit_test(test_pad_across_providers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
