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

/* With the optimizer on, Conv+BatchNormalization+Relu becomes the optimizer's
 * com.onyx.FusedConv (activation Relu), which the provider takes too. */
static void test_optimizer_fused_conv(void** state) {
  (void)state;
  OnyxSession *dn = NULL, *cpu = NULL;
  ok(open_session_at(true, NULL, ONYX_OPT_ALL, &dn));
  ok(open_session(false, NULL, &cpu));
  char* text = NULL;
  ok(onyx_session_explain(dn, &text));
  const char* fc = strstr(text, "FusedConv");
  assert_non_null(fc);
  assert_non_null(strstr(fc, "-> onednn"));
  assert_null(strstr(text, "Relu ")); /* fused away */
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

static void test_bad_conv_algorithm(void** state) {
  (void)state;
  OxTestModel* m = model();
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_add_provider(o, "onednn", NULL, 0, 1));
  ok(onyx_session_options_set_provider_option(o, "onednn", "conv_algorithm", "fastest"));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  free(bytes);
  assert_non_null(st);
  assert_non_null(strstr(onyx_status_message(st),
                         "option 'conv_algorithm' must be auto or direct, got 'fastest'"));
  onyx_status_release(st);
  assert_null(s);
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
  };
  if (setup(NULL)) return 77;
  return cmocka_run_group_tests(tests, NULL, NULL);
}
