/* test_opt_silu.c — the "silu" fusion (host/optimizer/opt_fusion.c):
 * Mul(x, Sigmoid(x)), either operand order, becomes com.onyx Silu(x) on
 * the CPU provider, and Mul(x, HardSigmoid(x; 1/6, 1/2)) com.onyx
 * HardSwish(x); `explain` shows them as made by the silu pass, and the
 * session's outputs match a reference computed here in plain C (a direct
 * convolution, then x / (1 + e^-x) or x clamp(x / 6 + 1/2, 0, 1) in
 * double). A Sigmoid read twice, a Mul of another value, or a HardSigmoid
 * of other parameters is left alone. */
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

enum { C_IN = 3, C_OUT = 4, H = 6, W = 5, K = 3 }; /* pads 1: Y is [1, 4, 6, 5] */

static void fill(float* x, size_t n, unsigned seed, float scale) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = scale * ((float)((seed >> 8) % 2001) / 1000.0f - 1.0f);
  }
}

static OnyxSession* open_at(const uint8_t* bytes, size_t len, OnyxOptimizationLevel level) {
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  assert_null(onyx_session_options_set_optimization_level(o, level));
  assert_null(onyx_session_options_set_threads(o, 1));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  if (st) fail_msg("session: %s", onyx_status_message(st));
  onyx_session_options_release(o);
  return s;
}

static size_t count_op(const OnyxSession* s, const char* op) {
  size_t n = 0;
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++)
    n += !strcmp(s->prog.graph->nodes[i]->op_type, op);
  return n;
}

/* Output `name` for input X. */
static void run(OnyxSession* s, const float* x, const char* name, float* out, size_t count) {
  const int64_t dims[4] = {1, C_IN, H, W};
  OnyxValue* in = NULL;
  assert_null(
      onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dims, 4, x, sizeof(float) * C_IN * H * W, &in));
  const char* in_names[] = {"X"};
  OnyxValue* y = NULL;
  OnyxStatus* st =
      onyx_session_run(s, NULL, in_names, (const OnyxValue* const*)&in, 1, &name, 1, &y);
  if (st) fail_msg("run: %s", onyx_status_message(st));
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_elem_count(t), count);
  memcpy(out, onyx_tensor_data(t), count * sizeof(float));
  onyx_value_release(y);
  onyx_value_release(in);
}

/* Conv(X, Wt, B), pads 1, stride 1, in double. */
static void conv_ref(const float* x, const float* wt, const float* b, double* c) {
  for (int o = 0; o < C_OUT; o++)
    for (int i = 0; i < H; i++)
      for (int j = 0; j < W; j++) {
        double acc = b[o];
        for (int ci = 0; ci < C_IN; ci++)
          for (int ki = 0; ki < K; ki++)
            for (int kj = 0; kj < K; kj++) {
              const int ii = i + ki - 1, jj = j + kj - 1;
              if (ii < 0 || ii >= H || jj < 0 || jj >= W) continue;
              acc += (double)x[(ci * H + ii) * W + jj] * wt[((o * C_IN + ci) * K + ki) * K + kj];
            }
        c[(o * H + i) * W + j] = acc;
      }
}

/* mode 0: Mul(C, S); mode 1: Mul(S, C); mode 2: S is also an output (read
 * twice: no fusion); mode 3: Mul(C2, Sigmoid(C)) with C2 = Relu(C) (not x
 * times its own sigmoid: no fusion); mode 4: S = HardSigmoid(C; 1/6, 1/2)
 * (HardSwish); mode 5: S = HardSigmoid(C) with ONNX's defaults 0.2, 0.5
 * (no fusion). */
static void silu_case(int mode) {
  OxTestModel* m = otm_new(13);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, C_IN, H, W});
  float wt[C_OUT * C_IN * K * K], b[C_OUT], x[C_IN * H * W];
  fill(wt, C_OUT * C_IN * K * K, 7, 0.5f);
  fill(b, C_OUT, 11, 0.5f);
  fill(x, C_IN * H * W, 13, 4.0f); /* conv outputs over about [-15, 15] */
  otm_initializer(m, "Wt", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C_OUT, C_IN, K, K}, wt);
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C_OUT}, b);
  OxTestNode* c = otm_node(m, "Conv", "conv", "X,Wt,B", "C");
  otm_attr_ints(c, "pads", 4, (int64_t[]){1, 1, 1, 1});
  const bool hard = mode >= 4;
  OxTestNode* g = otm_node(m, hard ? "HardSigmoid" : "Sigmoid", "sig", "C", "S");
  if (mode == 4) otm_attr_float(g, "alpha", 1.0f / 6.0f);
  if (mode == 3) otm_node(m, "Relu", "relu", "C", "R");
  otm_node(m, "Mul", "mul", mode == 1 ? "S,C" : mode == 3 ? "R,S" : "C,S", "Y");
  const int64_t ydims[4] = {1, C_OUT, H, W};
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, ydims);
  if (mode == 2) otm_output(m, "S", ONYX_ELEM_FLOAT32, 4, ydims);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);

  OnyxSession* s = open_at(bytes, len, ONYX_OPT_ALL);
  const bool fused = mode < 2 || mode == 4;
  const char* made = hard ? "HardSwish" : "Silu";
  assert_int_equal(count_op(s, made), fused ? 1 : 0);
  assert_int_equal(count_op(s, hard ? "HardSigmoid" : "Sigmoid"), fused ? 0 : 1);
  assert_int_equal(count_op(s, "Mul"), fused ? 0 : 1);
  char* text = NULL;
  assert_null(onyx_session_explain(s, &text));
  if (fused) {
    if (!strstr(text, "made by silu")) fail_msg("explain:\n%s", text);
    for (size_t i = 0; i < s->prog.graph->n_nodes;
         i++) { /* placement: the CPU provider, as Mul's */
      const OxNode* n = s->prog.graph->nodes[i];
      if (!strcmp(n->op_type, made)) {
        assert_string_equal(n->domain, "com.onyx");
        assert_true(n->ep >= 0);
        assert_string_equal(s->prog.eps[n->ep].name, "cpu");
      }
    }
  } else {
    assert_null(strstr(text, "made by silu"));
  }
  onyx_free(text);

  enum { N = C_OUT * H * W };
  double cref[N];
  conv_ref(x, wt, b, cref);
  float y[N];
  run(s, x, "Y", y, N);
  OnyxSession* plain = open_at(bytes, len, ONYX_OPT_DISABLED);
  float yp[N];
  run(plain, x, "Y", yp, N);
  for (size_t i = 0; i < N; i++) {
    const double cv = cref[i];
    const double hs = mode == 4 ? cv / 6.0 + 0.5 : 0.2 * cv + 0.5;
    const double sg = hard ? (hs < 0 ? 0 : hs > 1 ? 1 : hs) : 1.0 / (1.0 + exp(-cv));
    const double want = (mode == 3 ? (cv > 0 ? cv : 0) : cv) * sg;
    if (fabs(y[i] - want) > 1e-5 * (1 + fabs(want)))
      fail_msg("mode %d, Y[%zu]: %.9g, want %.9g", mode, i, y[i], want);
    if (fabs(y[i] - yp[i]) > 1e-5 * (1 + fabs(want)))
      fail_msg("mode %d, Y[%zu]: %.9g optimized, %.9g not", mode, i, y[i], yp[i]);
  }
  onyx_session_release(plain);
  onyx_session_release(s);
  free(bytes);
}

static void test_silu_fused(void** state) {
  (void)state;
  silu_case(0);
  silu_case(1);
}

static void test_silu_left_alone(void** state) {
  (void)state;
  silu_case(2);
  silu_case(3);
  silu_case(5);
}

static void test_hardswish_fused(void** state) {
  (void)state;
  silu_case(4);
}

int main(void) {
  /* The silu pass alone: conv_act would take the Silu / HardSwish made here
   * into the Conv (FusedConv; tests/unit/convact covers that). */
  setenv("ONYX_OPT_DISABLE", "conv_act", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_silu_fused),
      cmocka_unit_test(test_silu_left_alone),
      cmocka_unit_test(test_hardswish_fused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
