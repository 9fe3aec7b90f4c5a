/* test_onednn.c — the oneDNN provider in a session with the CPU provider:
 * placement (a Conv + BatchNormalization + Relu chain becomes one fused group;
 * an op oneDNN does not map is declined with its reason and runs on the CPU),
 * outputs against the CPU provider's own (a separate implementation: a
 * differential check), and option errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onyx/onyx.h"
#include "ox_test_models.h"

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

/* y = Relu(BN(Conv(x))) with x [1,2,5,5], 3 output channels, 3x3, pads 1,
 * then a Cast to float64 (not mapped by oneDNN). */
static OxTestModel* model(void) {
  OxTestModel* m = otm_new(15);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 2, 5, 5});
  float w[54], b[3] = {0.1f, -0.2f, 0.3f};
  for (int i = 0; i < 54; i++)
    w[i] = (float)((i * 7) % 11 - 5) / 10.0f;
  otm_initializer(m, "w", ONYX_ELEM_FLOAT32, 4, (int64_t[]){3, 2, 3, 3}, w);
  otm_initializer(m, "b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, b);
  otm_initializer(m, "scale", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, (float[]){1.5f, 0.5f, 2.0f});
  otm_initializer(m, "shift", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, (float[]){0.0f, 1.0f, -1.0f});
  otm_initializer(m, "mean", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, (float[]){0.2f, -0.1f, 0.0f});
  otm_initializer(m, "var", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, (float[]){1.0f, 4.0f, 0.25f});
  otm_output(m, "y", ONYX_ELEM_FLOAT64, 4, (int64_t[]){1, 3, 5, 5});
  OxTestNode* c = otm_node(m, "Conv", "conv", "x,w,b", "c");
  otm_attr_ints(c, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  otm_node(m, "BatchNormalization", "bn", "c,scale,shift,mean,var", "n");
  otm_node(m, "Relu", "relu", "n", "r");
  OxTestNode* cast = otm_node(m, "Cast", "cast", "r", "y");
  otm_attr_int(cast, "to", ONYX_ELEM_FLOAT64);
  return m;
}

static OnyxStatus* open_session_at(bool onednn, const char* bad_option, OnyxOptimizationLevel level,
                                   OnyxSession** s) {
  OxTestModel* m = model();
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_optimization_level(o, level));
  if (onednn) {
    ok(onyx_session_options_add_provider(o, "onednn", NULL, 0, 1));
    if (bad_option) ok(onyx_session_options_set_provider_option(o, "onednn", bad_option, "1"));
  }
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, s);
  onyx_session_options_release(o);
  free(bytes);
  return st;
}

/* With the graph optimizer off, the BatchNormalization stays for the provider
 * to fold itself. */
static OnyxStatus* open_session(bool onednn, const char* bad_option, OnyxSession** s) {
  return open_session_at(onednn, bad_option, ONYX_OPT_DISABLED, s);
}

static OnyxValue* run(OnyxSession* s) {
  float x[50];
  for (int i = 0; i < 50; i++)
    x[i] = sinf((float)i);
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){1, 2, 5, 5}, 4, x, sizeof x, &in));
  const char* in_name = "x";
  const char* out_name = "y";
  OnyxValue* out = NULL;
  ok(onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &out));
  onyx_value_release(in);
  return out;
}

static void test_fused_chain_matches_cpu(void** state) {
  (void)state;
  OnyxSession *dn = NULL, *cpu = NULL;
  ok(open_session(true, NULL, &dn));
  ok(open_session(false, NULL, &cpu));
  char* text = NULL;
  ok(onyx_session_explain(dn, &text));
  /* Conv, BatchNormalization and Relu are one group on onednn; Cast is not. */
  assert_non_null(strstr(text, "-> onednn (group 'onednn_conv')"));
  const char* bn = strstr(text, "bn ");
  assert_non_null(bn);
  assert_non_null(strstr(bn, "onednn (group 'onednn_conv')"));
  /* Cast is declined with the provider's reason and runs on the CPU. */
  assert_non_null(strstr(text, "declined by onednn: op not mapped to a oneDNN primitive"));
  onyx_free(text);
  OnyxValue *a = run(dn), *b = run(cpu);
  const double* pa = onyx_tensor_data(onyx_value_tensor(a));
  const double* pb = onyx_tensor_data(onyx_value_tensor(b));
  assert_int_equal(onyx_tensor_elem_count(onyx_value_tensor(a)), 75);
  int positive = 0;
  for (int i = 0; i < 75; i++) {
    if (fabs(pa[i] - pb[i]) > 1e-4 + 1e-4 * fabs(pb[i]))
      fail_msg("element %d: onednn %.7g, cpu %.7g", i, pa[i], pb[i]);
    assert_true(pa[i] >= 0.0); /* the Relu ran */
    positive += pa[i] > 0.0;
  }
  assert_true(positive > 10); /* not an all-zero output */
  onyx_value_release(a);
  onyx_value_release(b);
  onyx_session_release(dn);
  onyx_session_release(cpu);
}

/* With the optimizer on, the nodes oneDNN claims stay the model's:
 * Conv+BatchNormalization+Relu is its own group, not the host's FusedConv
 * (the host fuses only inside a provider's single-node placements). */
static void test_optimizer_fused_conv(void** state) {
  (void)state;
  OnyxSession *dn = NULL, *cpu = NULL;
  ok(open_session_at(true, NULL, ONYX_OPT_ALL, &dn));
  ok(open_session(false, NULL, &cpu));
  char* text = NULL;
  ok(onyx_session_explain(dn, &text));
  assert_null(strstr(text, "FusedConv"));
  const char* relu = strstr(text, "Relu ");
  assert_non_null(relu);
  assert_non_null(strstr(relu, "-> onednn (group 'onednn_conv')"));
  onyx_free(text);
  OnyxValue *a = run(dn), *b = run(cpu);
  const double* pa = onyx_tensor_data(onyx_value_tensor(a));
  const double* pb = onyx_tensor_data(onyx_value_tensor(b));
  for (int i = 0; i < 75; i++)
    if (fabs(pa[i] - pb[i]) > 1e-4 + 1e-4 * fabs(pb[i]))
      fail_msg("element %d: onednn %.7g, cpu %.7g", i, pa[i], pb[i]);
  onyx_value_release(a);
  onyx_value_release(b);
  onyx_session_release(dn);
  onyx_session_release(cpu);
}

static void test_unknown_option(void** state) {
  (void)state;
  OnyxSession* s = NULL;
  OnyxStatus* st = open_session(true, "bogus", &s);
  assert_non_null(st);
  assert_non_null(strstr(onyx_status_message(st), "provider 'onednn'"));
  assert_non_null(strstr(onyx_status_message(st), "unknown option 'bogus'"));
  onyx_status_release(st);
  assert_null(s);
}

/* y = Relu(Conv(x)) with x [1,16,9,7], 16 output channels, 3x3, pads 1: a
 * shape oneDNN's Winograd algorithm covers (conv_algorithm "auto"). */
static OnyxSession* conv16_session(const char* provider, const char* algorithm) {
  OxTestModel* m = otm_new(15);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 16, 9, 7});
  static float w[16 * 16 * 9], b[16];
  for (int i = 0; i < 16 * 16 * 9; i++)
    w[i] = (float)((i * 37) % 23 - 11) / 40.0f;
  for (int i = 0; i < 16; i++)
    b[i] = (float)(i % 5 - 2) / 10.0f;
  otm_initializer(m, "w", ONYX_ELEM_FLOAT32, 4, (int64_t[]){16, 16, 3, 3}, w);
  otm_initializer(m, "b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){16}, b);
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 16, 9, 7});
  OxTestNode* c = otm_node(m, "Conv", "conv", "x,w,b", "c");
  otm_attr_ints(c, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  otm_node(m, "Relu", "relu", "c", "y");
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_add_provider(o, provider, NULL, 0, 1));
  if (algorithm)
    ok(onyx_session_options_set_provider_option(o, provider, "conv_algorithm", algorithm));
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_options_release(o);
  free(bytes);
  return s;
}

static float* run_conv16(OnyxSession* s, OnyxValue** keep) {
  static float x[16 * 9 * 7];
  for (int i = 0; i < 16 * 9 * 7; i++)
    x[i] = sinf(0.37f * (float)i);
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){1, 16, 9, 7}, 4, x, sizeof x, &in));
  const char* in_name = "x";
  const char* out_name = "y";
  ok(onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, keep));
  onyx_value_release(in);
  return (float*)onyx_tensor_data(onyx_value_tensor(*keep));
}

/* Winograd (auto) and direct convolution agree with the CPU provider. */
static void test_conv_algorithms_match_cpu(void** state) {
  (void)state;
  OnyxSession* cpu = conv16_session("cpu", NULL);
  OnyxSession* aut = conv16_session("onednn", "auto");
  OnyxSession* dir = conv16_session("onednn", "direct");
  OnyxValue *vc = NULL, *va = NULL, *vd = NULL;
  const float* pc = run_conv16(cpu, &vc);
  const float* pa = run_conv16(aut, &va);
  const float* pd = run_conv16(dir, &vd);
  int positive = 0;
  for (int i = 0; i < 16 * 9 * 7; i++) {
    const double tol = 1e-4 + 1e-4 * fabs(pc[i]);
    if (fabs(pa[i] - pc[i]) > tol) fail_msg("element %d: auto %.7g, cpu %.7g", i, pa[i], pc[i]);
    if (fabs(pd[i] - pc[i]) > tol) fail_msg("element %d: direct %.7g, cpu %.7g", i, pd[i], pc[i]);
    positive += pc[i] > 0.0f;
  }
  assert_true(positive > 100 && positive < 16 * 9 * 7); /* the Relu clipped some, not all */
  onyx_value_release(vc);
  onyx_value_release(va);
  onyx_value_release(vd);
  onyx_session_release(cpu);
  onyx_session_release(aut);
  onyx_session_release(dir);
}

/* Session creation with onednn option key = value fails with a message naming
 * the provider and holding `want`; no session is made. */
static void expect_option_error(const char* key, const char* value, const char* want) {
  OxTestModel* m = model();
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_add_provider(o, "onednn", NULL, 0, 1));
  ok(onyx_session_options_set_provider_option(o, "onednn", key, value));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  free(bytes);
  assert_non_null(st);
  assert_non_null(strstr(onyx_status_message(st), "provider 'onednn'"));
  if (!strstr(onyx_status_message(st), want))
    fail_msg("'%s' not in '%s'", want, onyx_status_message(st));
  onyx_status_release(st);
  assert_null(s);
}

static void test_bad_conv_algorithm(void** state) {
  (void)state;
  expect_option_error("conv_algorithm", "fastest",
                      "option 'conv_algorithm' must be auto or direct, got 'fastest'");
}

/* --- Chains: consecutive Conv/pooling groups compiled as one ------------------------------------
 */

/* Deterministic weights in [-0.25, 0.25): small enough to keep values near 1. */
static void fill(float* w, int n, int seed) {
  for (int i = 0; i < n; i++)
    w[i] = (float)((i * 37 + seed * 11) % 29 - 14) / (14.0f * 4.0f * (seed % 3 + 1));
}

static OxTestNode* conv_node(OxTestModel* m, const char* name, const char* in, const char* w,
                             const char* out, int k) {
  OxTestNode* c = otm_node(m, "Conv", name, in, out);
  (void)w;
  if (k == 3) otm_attr_ints(c, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  return c;
}

/* Two residual blocks and a pooling:
 *   r1 = Relu(Conv3x3(x))                 [1,16,8,8]
 *   r2 = Relu(Conv3x3(r1) + r1)           [1,16,8,8]   (also a graph output)
 *   p  = MaxPool2x2/2(r2)                 [1,16,4,4]
 *   y  = Relu(Conv1x1(Relu(Conv3x3(p))) + Conv1x1(p))   [1,32,4,4] (a graph output,
 *   g  = GlobalAveragePool(y)             [1,32,1,1]    also read by g)
 * Variant CHAIN_NONCONVEX: r1 reaches the residual Add through a CPU-only
 * Cast (to float32, the same values): a path leaving the first group and
 * coming back. CHAIN_GROUPED: the 1x1 Conv after c3 has 4 groups of 8
 * channels, a case oneDNN has no blocked kernel for: that stage takes other
 * layouts, with reorders from and to its neighbours' blocked ones. */
enum { CHAIN_PLAIN, CHAIN_NONCONVEX, CHAIN_GROUPED };

static OnyxSession* chain_session_with(bool onednn, const char* chain, int variant, const char* key,
                                       const char* value) {
  OxTestModel* m = otm_new(15);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 16, 8, 8});
  static float w1[16 * 16 * 9], w2[16 * 16 * 9], w3[32 * 16 * 9], w4[32 * 32], wd[32 * 16];
  static float b1[16], b2[16], b3[32], b4[32], bd[32];
  fill(w1, 16 * 16 * 9, 1);
  fill(w2, 16 * 16 * 9, 2);
  fill(w3, 32 * 16 * 9, 3);
  fill(w4, 32 * 32, 4);
  fill(wd, 32 * 16, 5);
  fill(b1, 16, 6);
  fill(b2, 16, 7);
  fill(b3, 32, 8);
  fill(b4, 32, 9);
  fill(bd, 32, 10);
  otm_initializer(m, "w1", ONYX_ELEM_FLOAT32, 4, (int64_t[]){16, 16, 3, 3}, w1);
  otm_initializer(m, "w2", ONYX_ELEM_FLOAT32, 4, (int64_t[]){16, 16, 3, 3}, w2);
  otm_initializer(m, "w3", ONYX_ELEM_FLOAT32, 4, (int64_t[]){32, 16, 3, 3}, w3);
  otm_initializer(m, "w4", ONYX_ELEM_FLOAT32, 4,
                  (int64_t[]){32, variant == CHAIN_GROUPED ? 8 : 32, 1, 1}, w4);
  otm_initializer(m, "wd", ONYX_ELEM_FLOAT32, 4, (int64_t[]){32, 16, 1, 1}, wd);
  otm_initializer(m, "b1", ONYX_ELEM_FLOAT32, 1, (int64_t[]){16}, b1);
  otm_initializer(m, "b2", ONYX_ELEM_FLOAT32, 1, (int64_t[]){16}, b2);
  otm_initializer(m, "b3", ONYX_ELEM_FLOAT32, 1, (int64_t[]){32}, b3);
  otm_initializer(m, "b4", ONYX_ELEM_FLOAT32, 1, (int64_t[]){32}, b4);
  otm_initializer(m, "bd", ONYX_ELEM_FLOAT32, 1, (int64_t[]){32}, bd);
  otm_output(m, "r2", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 16, 8, 8});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 32, 4, 4});
  otm_output(m, "g", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 32, 1, 1});
  conv_node(m, "c1", "x,w1,b1", "w1", "c1o", 3);
  otm_node(m, "Relu", "relu1", "c1o", "r1");
  conv_node(m, "c2", "r1,w2,b2", "w2", "c2o", 3);
  if (variant == CHAIN_NONCONVEX) {
    OxTestNode* cast = otm_node(m, "Cast", "cast", "r1", "s1");
    otm_attr_int(cast, "to", ONYX_ELEM_FLOAT32);
    otm_node(m, "Add", "add2", "c2o,s1", "a2");
  } else {
    otm_node(m, "Add", "add2", "c2o,r1", "a2");
  }
  otm_node(m, "Relu", "relu2", "a2", "r2");
  OxTestNode* pool = otm_node(m, "MaxPool", "pool", "r2", "p");
  otm_attr_ints(pool, "kernel_shape", 2, (const int64_t[]){2, 2});
  otm_attr_ints(pool, "strides", 2, (const int64_t[]){2, 2});
  conv_node(m, "c3", "p,w3,b3", "w3", "c3o", 3);
  otm_node(m, "Relu", "relu3", "c3o", "r3");
  OxTestNode* c4 = conv_node(m, "c4", "r3,w4,b4", "w4", "c4o", 1);
  if (variant == CHAIN_GROUPED) otm_attr_int(c4, "group", 4);
  conv_node(m, "cd", "p,wd,bd", "wd", "cdo", 1);
  otm_node(m, "Add", "add4", "c4o,cdo", "a4");
  otm_node(m, "Relu", "relu4", "a4", "y");
  otm_node(m, "GlobalAveragePool", "gap", "y", "g");
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_optimization_level(o, ONYX_OPT_DISABLED));
  if (onednn) {
    ok(onyx_session_options_add_provider(o, "onednn", NULL, 0, 1));
    if (chain) ok(onyx_session_options_set_provider_option(o, "onednn", "chain", chain));
    if (key) ok(onyx_session_options_set_provider_option(o, "onednn", key, value));
  }
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_options_release(o);
  free(bytes);
  return s;
}

static OnyxSession* chain_session(bool onednn, const char* chain, int variant) {
  return chain_session_with(onednn, chain, variant, NULL, NULL);
}

static const char* const chain_outs[3] = {"r2", "y", "g"};
static const size_t chain_counts[3] = {16 * 8 * 8, 32 * 4 * 4, 32};

static void run_chain(OnyxSession* s, OnyxValue* out[3]) {
  static float x[16 * 8 * 8];
  for (int i = 0; i < 16 * 8 * 8; i++)
    x[i] = sinf(0.31f * (float)i) + 0.2f;
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){1, 16, 8, 8}, 4, x, sizeof x, &in));
  const char* in_name = "x";
  ok(onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, chain_outs, 3, out));
  onyx_value_release(in);
}

/* Every output of `s` equals the CPU provider's within 1e-4 (abs + rel). */
static void check_chain_outputs(OnyxSession* s, OnyxSession* cpu) {
  OnyxValue *a[3] = {NULL}, *b[3] = {NULL};
  for (int rep = 0; rep < 2; rep++) { /* the second run reuses the cached plans */
    run_chain(s, a);
    run_chain(cpu, b);
    for (int o = 0; o < 3; o++) {
      assert_int_equal(onyx_tensor_elem_count(onyx_value_tensor(a[o])), chain_counts[o]);
      const float* pa = onyx_tensor_data(onyx_value_tensor(a[o]));
      const float* pb = onyx_tensor_data(onyx_value_tensor(b[o]));
      size_t positive = 0;
      for (size_t i = 0; i < chain_counts[o]; i++) {
        if (fabsf(pa[i] - pb[i]) > 1e-4f + 1e-4f * fabsf(pb[i]))
          fail_msg("%s[%zu]: onednn %.7g, cpu %.7g", chain_outs[o], i, pa[i], pb[i]);
        positive += pb[i] > 0.0f;
      }
      /* Not trivially zero: the Relus let a fair share through. */
      assert_true(positive > chain_counts[o] / 8);
      onyx_value_release(a[o]);
      onyx_value_release(b[o]);
    }
  }
}

/* How many explain lines place a node on group `group`. */
static int nodes_in_group(const char* text, const char* group) {
  char pat[128];
  snprintf(pat, sizeof pat, "-> onednn (group '%s')", group);
  int n = 0;
  for (const char* p = strstr(text, pat); p; p = strstr(p + 1, pat))
    n++;
  return n;
}

static void test_chain_is_one_group(void** state) {
  (void)state;
  OnyxSession* cpu = chain_session(false, NULL, CHAIN_PLAIN);
  OnyxSession* on = chain_session(true, NULL, CHAIN_PLAIN); /* chain defaults to true */
  OnyxSession* off = chain_session(true, "false", CHAIN_PLAIN);
  char *t_on = NULL, *t_off = NULL;
  ok(onyx_session_explain(on, &t_on));
  ok(onyx_session_explain(off, &t_off));
  /* All 13 nodes in one group with chain on. */
  assert_int_equal(nodes_in_group(t_on, "onednn_c1"), 13);
  assert_null(strstr(t_on, "-> cpu"));
  assert_non_null(strstr(t_on, "fused groups: 1\n"));
  /* Off: Conv+Relu, Conv+Add+Relu, MaxPool, Conv+Relu, Conv, Conv+Add+Relu, GlobalAveragePool. */
  assert_int_equal(nodes_in_group(t_off, "onednn_c1"), 2);
  assert_int_equal(nodes_in_group(t_off, "onednn_pool"), 1);
  assert_non_null(strstr(t_off, "fused groups: 7\n"));
  onyx_free(t_on);
  onyx_free(t_off);
  check_chain_outputs(on, cpu);
  check_chain_outputs(off, cpu);
  onyx_session_release(on);
  onyx_session_release(off);
  onyx_session_release(cpu);
}

/* A path leaving through a CPU-only op (Cast) and coming back: the first
 * group stays apart; the rest still chains. */
static void test_chain_not_convex(void** state) {
  (void)state;
  OnyxSession* cpu = chain_session(false, NULL, CHAIN_NONCONVEX);
  OnyxSession* on = chain_session(true, "true", CHAIN_NONCONVEX);
  char* text = NULL;
  ok(onyx_session_explain(on, &text));
  const char* cast = strstr(text, "cast ");
  assert_non_null(cast);
  assert_non_null(strstr(cast, "-> cpu"));
  assert_int_equal(nodes_in_group(text, "onednn_c1"), 2); /* c1, relu1 */
  /* c2, add2, relu2, pool, c3, relu3, c4, cd, add4, relu4, gap */
  assert_int_equal(nodes_in_group(text, "onednn_c2"), 11);
  onyx_free(text);
  check_chain_outputs(on, cpu);
  onyx_session_release(on);
  onyx_session_release(cpu);
}

/* Chains with the other options: plain layouts, direct convolutions only,
 * no post-op fusion (the Relus and Adds then stay groups of their own and
 * split the chain). */
static void test_chain_with_other_options(void** state) {
  (void)state;
  static const char* const opts[3][2] = {
      {"blocked_layout", "false"}, {"conv_algorithm", "direct"}, {"fuse", "false"}};
  OnyxSession* cpu = chain_session(false, NULL, CHAIN_PLAIN);
  for (int i = 0; i < 3; i++) {
    OnyxSession* on = chain_session_with(true, "true", CHAIN_PLAIN, opts[i][0], opts[i][1]);
    char* text = NULL;
    ok(onyx_session_explain(on, &text));
    if (i < 2) assert_int_equal(nodes_in_group(text, "onednn_c1"), 13);
    onyx_free(text);
    check_chain_outputs(on, cpu);
    onyx_session_release(on);
  }
  onyx_session_release(cpu);
}

/* Runs on one chain session from two threads at once (shared plans, per-run
 * buffers): every run's outputs equal the CPU provider's. The first runs
 * race to build the plans. */
typedef struct ChainRace {
  OnyxSession* s;
  const float* want[3];
  int bad;
} ChainRace;

static void* chain_race(void* arg) {
  ChainRace* r = arg;
  for (int rep = 0; rep < 8; rep++) {
    OnyxValue* out[3] = {NULL};
    run_chain(r->s, out);
    for (int o = 0; o < 3; o++) {
      const float* p = onyx_tensor_data(onyx_value_tensor(out[o]));
      for (size_t i = 0; i < chain_counts[o]; i++)
        if (fabsf(p[i] - r->want[o][i]) > 1e-4f + 1e-4f * fabsf(r->want[o][i])) r->bad++;
      onyx_value_release(out[o]);
    }
  }
  return NULL;
}

static void test_chain_concurrent_runs(void** state) {
  (void)state;
  OnyxSession* cpu = chain_session(false, NULL, CHAIN_PLAIN);
  OnyxSession* on = chain_session(true, "true", CHAIN_PLAIN);
  OnyxValue* want[3] = {NULL};
  run_chain(cpu, want);
  ChainRace r[2];
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    r[i] = (ChainRace){on, {NULL}, 0};
    for (int o = 0; o < 3; o++)
      r[i].want[o] = onyx_tensor_data(onyx_value_tensor(want[o]));
    assert_int_equal(pthread_create(&t[i], NULL, chain_race, &r[i]), 0);
  }
  for (int i = 0; i < 2; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(r[i].bad, 0);
  }
  for (int o = 0; o < 3; o++)
    onyx_value_release(want[o]);
  onyx_session_release(on);
  onyx_session_release(cpu);
}

/* A stage without a blocked kernel inside a chain: still one group, with
 * reorders between the stages, and the same outputs as the CPU. */
static void test_chain_mixed_layouts(void** state) {
  (void)state;
  OnyxSession* cpu = chain_session(false, NULL, CHAIN_GROUPED);
  OnyxSession* on = chain_session(true, "true", CHAIN_GROUPED);
  char* text = NULL;
  ok(onyx_session_explain(on, &text));
  assert_int_equal(nodes_in_group(text, "onednn_c1"), 13);
  onyx_free(text);
  check_chain_outputs(on, cpu);
  onyx_session_release(on);
  onyx_session_release(cpu);
}

static void test_bad_chain_option(void** state) {
  (void)state;
  expect_option_error("chain", "yes", "option 'chain' must be true or false, got 'yes'");
}

/* Gemm (transB 1) + Relu and a 3-D MatMul + Add + Relu: oneDNN claims the Gemm
 * and its Relu as one group (matmul with bias and a relu post-op) before any
 * host fusion, so the optimizer makes no com.onyx FusedMatMul of them.
 * Outputs match the CPU provider alone. */
static OnyxSession* fmm_session(bool onednn) {
  OxTestModel* m = otm_new(13);
  otm_input(m, "a", ONYX_ELEM_FLOAT32, 2, (int64_t[]){6, 8});
  otm_input(m, "t", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 3, 8});
  static float w[5 * 8], b[5], w2[8 * 4], b2[4];
  for (int i = 0; i < 40; i++)
    w[i] = (float)((i * 13) % 17 - 8) / 10.0f;
  for (int i = 0; i < 5; i++)
    b[i] = (float)(i - 2) / 5.0f;
  for (int i = 0; i < 32; i++)
    w2[i] = (float)((i * 7) % 11 - 5) / 8.0f;
  for (int i = 0; i < 4; i++)
    b2[i] = (float)(1 - i) / 4.0f;
  otm_initializer(m, "w", ONYX_ELEM_FLOAT32, 2, (int64_t[]){5, 8}, w);
  otm_initializer(m, "b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){5}, b);
  otm_initializer(m, "w2", ONYX_ELEM_FLOAT32, 2, (int64_t[]){8, 4}, w2);
  otm_initializer(m, "b2", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4}, b2);
  otm_attr_int(otm_node(m, "Gemm", "gemm", "a,w,b", "g"), "transB", 1);
  otm_node(m, "Relu", "relu", "g", "y");
  otm_node(m, "MatMul", "mm", "t,w2", "p");
  otm_node(m, "Add", "add", "p,b2", "q");
  otm_node(m, "Relu", "relu2", "q", "z");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){6, 5});
  otm_output(m, "z", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 3, 4});
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_optimization_level(o, ONYX_OPT_ALL));
  if (onednn) ok(onyx_session_options_add_provider(o, "onednn", NULL, 0, 1));
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_options_release(o);
  free(bytes);
  return s;
}

static void test_fused_matmul(void** state) {
  (void)state;
  OnyxSession* dn = fmm_session(true);
  OnyxSession* cpu = fmm_session(false);
  char* text = NULL;
  ok(onyx_session_explain(dn, &text));
  const char* g = strstr(text, "  gemm");
  assert_non_null(g);
  char line[256];
  snprintf(line, sizeof line, "%.*s", (int)strcspn(g, "\n"), g);
  assert_non_null(strstr(line, "Gemm"));
  assert_non_null(strstr(line, "-> onednn (group"));
  const char* r = strstr(text, "  relu ");
  assert_non_null(r);
  snprintf(line, sizeof line, "%.*s", (int)strcspn(r, "\n"), r);
  assert_non_null(strstr(line, "-> onednn (group"));
  /* The 3-D product and its chain are left to the CPU provider, which fuses
   * them (MatMul + Add + Relu -> FusedMatMul with activation Relu). */
  assert_non_null(strstr(text, "declined by onednn as mm: MatMul with A of rank above 2 is left"));
  const char* f = strstr(text, "FusedMatMul");
  assert_non_null(f);
  snprintf(line, sizeof line, "%.*s", (int)strcspn(f, "\n"), f);
  assert_non_null(strstr(line, "-> cpu"));
  onyx_free(text);
  float a[48], t[48];
  for (int i = 0; i < 48; i++)
    a[i] = sinf(0.7f * (float)i), t[i] = cosf(0.3f * (float)i);
  OnyxValue *va = NULL, *vt = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){6, 8}, 2, a, sizeof a, &va));
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){2, 3, 8}, 3, t, sizeof t, &vt));
  const char* in_names[] = {"a", "t"};
  const char* out_names[] = {"y", "z"};
  const OnyxValue* ins[] = {va, vt};
  OnyxValue *od[2] = {0}, *oc[2] = {0};
  ok(onyx_session_run(dn, NULL, in_names, ins, 2, out_names, 2, od));
  ok(onyx_session_run(cpu, NULL, in_names, ins, 2, out_names, 2, oc));
  for (int k = 0; k < 2; k++) {
    const OnyxTensor* td = onyx_value_tensor(od[k]);
    const float* pd = onyx_tensor_data(td);
    const float* pc = onyx_tensor_data(onyx_value_tensor(oc[k]));
    int zeros = 0;
    for (size_t i = 0; i < onyx_tensor_elem_count(td); i++) {
      if (fabsf(pd[i] - pc[i]) > 1e-5f + 1e-5f * fabsf(pc[i]))
        fail_msg("output %d element %zu: onednn %.7g, cpu %.7g", k, i, pd[i], pc[i]);
      zeros += pd[i] == 0.0f;
    }
    assert_true(zeros > 0 && zeros < (int)onyx_tensor_elem_count(td)); /* the Relu ran */
  }
  onyx_values_release(od, 2);
  onyx_values_release(oc, 2);
  onyx_value_release(va);
  onyx_value_release(vt);
  onyx_session_release(dn);
  onyx_session_release(cpu);
}

/* A com.onyx FusedConv with a residual Z input (as the optimizer writes for the
 * CPU provider alone): oneDNN declines it with its reason, the CPU provider runs
 * it, and the output is the CPU provider's alone. */
static OnyxSession* fused_z_session(bool onednn) {
  OxTestModel* m = otm_new(13);
  otm_add_opset(m, "com.onyx", 1);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 2, 5, 5});
  otm_input(m, "z", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 3, 5, 5});
  static float w[54];
  for (int i = 0; i < 54; i++)
    w[i] = (float)((i * 7) % 11 - 5) / 10.0f;
  otm_initializer(m, "w", ONYX_ELEM_FLOAT32, 4, (int64_t[]){3, 2, 3, 3}, w);
  otm_initializer(m, "b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, (float[]){0.1f, -0.2f, 0.3f});
  OxTestNode* c = otm_node(m, "FusedConv", "fc", "x,w,b,z", "y");
  otm_node_domain(c, "com.onyx");
  otm_attr_ints(c, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  otm_attr_string(c, "activation", "Relu");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 3, 5, 5});
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_optimization_level(o, ONYX_OPT_DISABLED));
  if (onednn) ok(onyx_session_options_add_provider(o, "onednn", NULL, 0, 1));
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_options_release(o);
  free(bytes);
  return s;
}

static void test_fused_conv_z_declined(void** state) {
  (void)state;
  OnyxSession* dn = fused_z_session(true);
  OnyxSession* cpu = fused_z_session(false);
  char* text = NULL;
  ok(onyx_session_explain(dn, &text));
  assert_non_null(strstr(text, "FusedConv's Z (residual sum) input is not mapped"));
  const char* fc = strstr(text, "  fc ");
  assert_non_null(fc);
  char line[256];
  snprintf(line, sizeof line, "%.*s", (int)strcspn(fc, "\n"), fc);
  assert_non_null(strstr(line, "-> cpu"));
  onyx_free(text);
  float x[50], z[75];
  for (int i = 0; i < 50; i++)
    x[i] = sinf((float)i);
  for (int i = 0; i < 75; i++)
    z[i] = cosf(0.37f * (float)i);
  OnyxValue *vx = NULL, *vz = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){1, 2, 5, 5}, 4, x, sizeof x, &vx));
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){1, 3, 5, 5}, 4, z, sizeof z, &vz));
  const char* in_names[] = {"x", "z"};
  const char* out_name = "y";
  const OnyxValue* ins[] = {vx, vz};
  OnyxValue *a = NULL, *b = NULL;
  ok(onyx_session_run(dn, NULL, in_names, ins, 2, &out_name, 1, &a));
  ok(onyx_session_run(cpu, NULL, in_names, ins, 2, &out_name, 1, &b));
  assert_memory_equal(onyx_tensor_data(onyx_value_tensor(a)),
                      onyx_tensor_data(onyx_value_tensor(b)), 75 * sizeof(float));
  onyx_value_release(a);
  onyx_value_release(b);
  onyx_value_release(vx);
  onyx_value_release(vz);
  onyx_session_release(dn);
  onyx_session_release(cpu);
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
      cmocka_unit_test(test_fused_chain_matches_cpu),
      cmocka_unit_test(test_optimizer_fused_conv),
      cmocka_unit_test(test_unknown_option),
      cmocka_unit_test(test_conv_algorithms_match_cpu),
      cmocka_unit_test(test_bad_conv_algorithm),
      cmocka_unit_test(test_chain_is_one_group),
      cmocka_unit_test(test_chain_not_convex),
      cmocka_unit_test(test_bad_chain_option),
      cmocka_unit_test(test_chain_with_other_options),
      cmocka_unit_test(test_chain_concurrent_runs),
      cmocka_unit_test(test_chain_mixed_layouts),
      cmocka_unit_test(test_fused_matmul),
      cmocka_unit_test(test_fused_conv_z_declined),
  };
  if (setup(NULL)) return 77;
  return cmocka_run_group_tests(tests, NULL, NULL);
}
