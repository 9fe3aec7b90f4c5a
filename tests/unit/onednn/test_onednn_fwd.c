/* test_onednn_fwd.c — forward Conv whose weights and bias are graph inputs
 * (a training graph's trained parameters, fed each step) on the oneDNN
 * provider: the session's explain text shows the Conv on onednn, and the
 * output matches the CPU provider's Conv (a separate implementation) within
 * 1e-4 and a float64 reference computed here by direct loops, across pads,
 * strides, dilations and groups, with a symbolic batch whose size changes
 * from run to run (one plan per shape), with a Relu fused after it, with
 * plain layouts only, and with weights changed between runs (the per-run
 * reorder must read each run's values). A BatchNormalization after such a
 * Conv is not folded (its fold rewrites constant weights) but the Conv is
 * still claimed. Weights of the wrong shape are a run error. */
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

#define F32 ONYX_ELEM_FLOAT32
#define TOL 1e-4

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static uint64_t rng = 0x9e3779b97f4a7c15u;
static double rnd(double lo, double hi) {
  rng = rng * 6364136223846793005u + 1442695040888963407u;
  return lo + (hi - lo) * ((double)(uint32_t)(rng >> 33) / 2147483648.0);
}

static float* rnd_f(size_t n) {
  float* v = malloc((n ? n : 1) * sizeof *v);
  for (size_t k = 0; k < n; k++)
    v[k] = (float)rnd(-1, 1);
  return v;
}

static size_t count_of(const int64_t* d, int r) {
  size_t n = 1;
  for (int i = 0; i < r; i++)
    n *= (size_t)d[i];
  return n;
}

/* A 2-D convolution case: X's channels and spatial size (the batch is given
 * per run), W's shape, and the attributes. relu: a Relu follows the Conv;
 * bn: a BatchNormalization with constant parameters follows it. */
typedef struct ConvCase {
  int64_t c, h, w;
  int64_t wd[4];
  int64_t group, strides[2], dil[2], pads[4];
  bool bias, relu, bn;
} ConvCase;

static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pl, int64_t pr) {
  return (in + pl + pr - ((k - 1) * d + 1)) / s + 1;
}

static const float bn_scale[8] = {1.5f, 0.5f, 2.0f, 1.0f, 0.75f, 1.25f, 0.9f, 1.1f};
static const float bn_shift[8] = {0.1f, -0.2f, 0.3f, 0.0f, 0.5f, -0.5f, 0.25f, -0.25f};
static const float bn_mean[8] = {0.2f, -0.1f, 0.0f, 0.3f, -0.3f, 0.1f, 0.05f, -0.05f};
static const float bn_var[8] = {1.0f, 2.0f, 0.5f, 1.5f, 0.25f, 1.0f, 3.0f, 0.8f};
#define BN_EPS 1e-5

/* The model: x [N, C, H, W] with N symbolic, w and (optionally) b as graph
 * inputs; Conv "g", then Relu or BatchNormalization when asked; output y. */
static OnyxSession* open_conv(const ConvCase* c, bool onednn, const char* key, const char* val) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", F32, 4, (const int64_t[]){-1, c->c, c->h, c->w});
  otm_input(m, "w", F32, 4, c->wd);
  if (c->bias) otm_input(m, "b", F32, 1, c->wd);
  otm_output(m, "y", F32, -1, NULL);
  bool after = c->relu || c->bn;
  OxTestNode* n = otm_node(m, "Conv", "g", c->bias ? "x,w,b" : "x,w", after ? "c" : "y");
  otm_attr_int(n, "group", c->group);
  otm_attr_ints(n, "strides", 2, c->strides);
  otm_attr_ints(n, "dilations", 2, c->dil);
  otm_attr_ints(n, "pads", 4, c->pads);
  otm_attr_ints(n, "kernel_shape", 2, c->wd + 2);
  if (c->relu) otm_node(m, "Relu", "r", "c", "y");
  if (c->bn) {
    const int64_t oc[1] = {c->wd[0]};
    otm_initializer(m, "s", F32, 1, oc, bn_scale);
    otm_initializer(m, "sh", F32, 1, oc, bn_shift);
    otm_initializer(m, "mu", F32, 1, oc, bn_mean);
    otm_initializer(m, "var", F32, 1, oc, bn_var);
    OxTestNode* b = otm_node(m, "BatchNormalization", "bn", "c,s,sh,mu,var", "y");
    otm_attr_float(b, "epsilon", (float)BN_EPS);
  }
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
  }
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_options_release(o);
  free(bytes);
  return s;
}

static OnyxValue* run_conv(OnyxSession* s, const ConvCase* c, int64_t batch, const float* x,
                           const float* w, const float* b) {
  const int64_t xd[4] = {batch, c->c, c->h, c->w};
  OnyxValue* in[3];
  const char* names[3] = {"x", "w", "b"};
  ok(onyx_value_create_tensor(F32, xd, 4, x, count_of(xd, 4) * sizeof(float), &in[0]));
  ok(onyx_value_create_tensor(F32, c->wd, 4, w, count_of(c->wd, 4) * sizeof(float), &in[1]));
  if (c->bias)
    ok(onyx_value_create_tensor(F32, c->wd, 1, b, (size_t)c->wd[0] * sizeof(float), &in[2]));
  size_t n_in = c->bias ? 3 : 2;
  const char* out_name = "y";
  OnyxValue* y = NULL;
  ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, n_in, &out_name, 1, &y));
  for (size_t k = 0; k < n_in; k++)
    onyx_value_release(in[k]);
  return y;
}

/* y of the case by direct loops in float64 (then Relu or the
 * BatchNormalization's inference form). */
static void conv_ref(const ConvCase* c, int64_t N, const float* x, const float* w, const float* b,
                     const int64_t* yd, double* y) {
  const int64_t C = c->c, IH = c->h, IW = c->w;
  const int64_t OC = c->wd[0], CG = c->wd[1], KH = c->wd[2], KW = c->wd[3];
  const int64_t OH = yd[2], OW = yd[3], OCG = OC / c->group;
  for (int64_t n = 0; n < N; n++)
    for (int64_t oc = 0; oc < OC; oc++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          double acc = c->bias ? b[oc] : 0.0;
          for (int64_t cg = 0; cg < CG; cg++)
            for (int64_t kh = 0; kh < KH; kh++)
              for (int64_t kw = 0; kw < KW; kw++) {
                int64_t ih = oh * c->strides[0] - c->pads[0] + kh * c->dil[0];
                int64_t iw = ow * c->strides[1] - c->pads[1] + kw * c->dil[1];
                if (ih < 0 || ih >= IH || iw < 0 || iw >= IW) continue;
                int64_t ic = oc / OCG * CG + cg;
                acc += (double)x[((n * C + ic) * IH + ih) * IW + iw] *
                       w[((oc * CG + cg) * KH + kh) * KW + kw];
              }
          if (c->relu && acc < 0) acc = 0;
          if (c->bn)
            acc = (acc - bn_mean[oc]) / sqrt(bn_var[oc] + BN_EPS) * bn_scale[oc] + bn_shift[oc];
          y[((n * OC + oc) * OH + oh) * OW + ow] = acc;
        }
}

static void expect_conv_on_onednn(OnyxSession* s) {
  char* text = NULL;
  ok(onyx_session_explain(s, &text));
  const char* line = strstr(text, "  g ");
  const char* eol = line ? strchr(line, '\n') : NULL;
  const char* on = line ? strstr(line, "-> onednn (group") : NULL;
  if (!on || (eol && on > eol)) fail_msg("Conv 'g' not on onednn:\n%s", text);
  onyx_free(text);
}

/* Runs the case on onednn and on the CPU provider for each batch size in
 * turn (new inputs each run); onednn matches both the CPU provider and the
 * float64 reference within TOL. */
static void run_case(const ConvCase* c, const int64_t* batches, size_t n_batches, const char* key,
                     const char* val) {
  OnyxSession* a = open_conv(c, true, key, val);
  OnyxSession* cpu = open_conv(c, false, NULL, NULL);
  expect_conv_on_onednn(a);
  size_t nw = count_of(c->wd, 4);
  for (size_t r = 0; r < n_batches; r++) {
    int64_t N = batches[r];
    const int64_t xd[4] = {N, c->c, c->h, c->w};
    int64_t yd[4] = {N, c->wd[0], 0, 0};
    yd[2] = out_dim(c->h, c->wd[2], c->strides[0], c->dil[0], c->pads[0], c->pads[2]);
    yd[3] = out_dim(c->w, c->wd[3], c->strides[1], c->dil[1], c->pads[1], c->pads[3]);
    size_t nx = count_of(xd, 4), ny = count_of(yd, 4);
    /* New weights every run: the provider must not keep the first run's. */
    float *x = rnd_f(nx), *w = rnd_f(nw), *b = rnd_f((size_t)c->wd[0]);
    OnyxValue* ya = run_conv(a, c, N, x, w, b);
    OnyxValue* yc = run_conv(cpu, c, N, x, w, b);
    double* ref = malloc(ny * sizeof *ref);
    conv_ref(c, N, x, w, b, yd, ref);
    const OnyxTensor* ta = onyx_value_tensor(ya);
    const OnyxTensor* tc = onyx_value_tensor(yc);
    assert_int_equal(onyx_tensor_elem_count(ta), ny);
    assert_int_equal(onyx_tensor_elem_count(tc), ny);
    const float* pa = onyx_tensor_data(ta);
    const float* pc = onyx_tensor_data(tc);
    double mag = 0;
    for (size_t i = 0; i < ny; i++) {
      if (!(fabs(pa[i] - pc[i]) <= TOL + TOL * fabs(pc[i])))
        fail_msg("batch %lld y[%zu]: onednn %.7g, cpu %.7g", (long long)N, i, (double)pa[i],
                 (double)pc[i]);
      if (!(fabs(pa[i] - ref[i]) <= TOL + TOL * fabs(ref[i])))
        fail_msg("batch %lld y[%zu]: onednn %.7g, float64 reference %.7g", (long long)N, i,
                 (double)pa[i], ref[i]);
      mag += fabs(ref[i]);
    }
    assert_true(mag > 0); /* not a trivially zero output */
    onyx_value_release(ya);
    onyx_value_release(yc);
    free(ref);
    free(x);
    free(w);
    free(b);
  }
  onyx_session_release(a);
  onyx_session_release(cpu);
}

static const int64_t batches[] = {2, 3, 1, 2}; /* a changing batch; 2 again reuses its plan */

static void test_conv_pads(void** state) {
  (void)state;
  /* Asymmetric pads, with and without a bias. */
  ConvCase c = {3, 7, 6, {5, 3, 3, 3}, 1, {1, 1}, {1, 1}, {1, 0, 2, 1}, true, false, false};
  run_case(&c, batches, 4, NULL, NULL);
  c.bias = false;
  run_case(&c, batches, 2, NULL, NULL);
}

static void test_conv_group_stride_dilation(void** state) {
  (void)state;
  ConvCase c = {4, 9, 8, {6, 2, 3, 2}, 2, {2, 1}, {2, 1}, {1, 1, 1, 0}, true, false, false};
  run_case(&c, batches, 4, NULL, NULL);
  /* Depthwise, stride 2 both ways. */
  ConvCase d = {8, 10, 10, {8, 1, 3, 3}, 8, {2, 2}, {1, 1}, {1, 1, 1, 1}, true, false, false};
  run_case(&d, batches, 4, NULL, NULL);
  /* The training CNN's shape: 16 -> 16 channels, 3x3, pad 1 (blocked layouts). */
  ConvCase r = {16, 8, 8, {16, 16, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}, false, false, false};
  run_case(&r, batches, 4, NULL, NULL);
}

static void test_conv_relu_fused(void** state) {
  (void)state;
  ConvCase c = {3, 7, 6, {5, 3, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}, true, true, false};
  run_case(&c, batches, 4, NULL, NULL);
  /* The Relu joins the Conv's group (a post-op). */
  OnyxSession* s = open_conv(&c, true, NULL, NULL);
  char* text = NULL;
  ok(onyx_session_explain(s, &text));
  if (!strstr(text, "-> onednn (group 'onednn_g')")) fail_msg("no group onednn_g:\n%s", text);
  const char* r = strstr(text, "  r ");
  if (!r || !strstr(r, "-> onednn (group 'onednn_g')")) fail_msg("Relu not fused:\n%s", text);
  onyx_free(text);
  onyx_session_release(s);
}

static void test_conv_plain_layout(void** state) {
  (void)state;
  ConvCase c = {4, 9, 8, {6, 2, 3, 2}, 2, {2, 1}, {2, 1}, {1, 1, 1, 0}, true, false, false};
  run_case(&c, batches, 2, "blocked_layout", "0");
}

/* A BatchNormalization after a Conv with trained weights stays out of the
 * Conv's group (nothing constant to fold into); the Conv is still claimed
 * and the result is right. */
static void test_conv_bn_not_folded(void** state) {
  (void)state;
  ConvCase c = {3, 6, 6, {4, 3, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}, true, false, true};
  run_case(&c, batches, 2, NULL, NULL);
  OnyxSession* s = open_conv(&c, true, NULL, NULL);
  char* text = NULL;
  ok(onyx_session_explain(s, &text));
  const char* b = strstr(text, "  bn ");
  const char* eol = b ? strchr(b, '\n') : NULL;
  const char* in_g = b ? strstr(b, "(group 'onednn_g')") : NULL;
  if (!b || (in_g && (!eol || in_g < eol))) fail_msg("BatchNormalization folded:\n%s", text);
  onyx_free(text);
  onyx_session_release(s);
}

/* Weights of another shape than the model declares: a run error naming the
 * input (the host checks the declared shape; the provider checks again when
 * it builds a plan), no crash. */
static void test_conv_bad_weights(void** state) {
  (void)state;
  ConvCase c = {3, 6, 6, {4, 3, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}, true, false, false};
  OnyxSession* s = open_conv(&c, true, NULL, NULL);
  float x[2 * 3 * 6 * 6] = {0}, w[5 * 3 * 3 * 3] = {0}, b[4] = {0};
  const int64_t xd[4] = {2, 3, 6, 6}, wd[4] = {5, 3, 3, 3}, bd[1] = {4};
  OnyxValue* in[3];
  ok(onyx_value_create_tensor(F32, xd, 4, x, sizeof x, &in[0]));
  ok(onyx_value_create_tensor(F32, wd, 4, w, sizeof w, &in[1]));
  ok(onyx_value_create_tensor(F32, bd, 1, b, sizeof b, &in[2]));
  const char* names[3] = {"x", "w", "b"};
  const char* out_name = "y";
  OnyxValue* y = NULL;
  OnyxStatus* st =
      onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, 3, &out_name, 1, &y);
  assert_non_null(st);
  if (!strstr(onyx_status_message(st), "input 'w'"))
    fail_msg("error does not name the weights: %s", onyx_status_message(st));
  onyx_status_release(st);
  assert_null(y);
  for (int k = 0; k < 3; k++)
    onyx_value_release(in[k]);
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
      cmocka_unit_test(test_conv_pads),          cmocka_unit_test(test_conv_group_stride_dilation),
      cmocka_unit_test(test_conv_relu_fused),    cmocka_unit_test(test_conv_plain_layout),
      cmocka_unit_test(test_conv_bn_not_folded), cmocka_unit_test(test_conv_bad_weights),
  };
  if (setup(NULL)) return 77;
  return cmocka_run_group_tests(tests, NULL, NULL);
}
