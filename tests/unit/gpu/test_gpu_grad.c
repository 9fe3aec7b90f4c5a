/* test_gpu_grad.c — the training kernels of a GPU provider (GPU_NAME; for
 * "gpuemu" they run on the host emulation): each com.onyx.training gradient
 * op the GPU registers, on random shapes, against the CPU provider's result
 * for the same inputs (1e-5), and the fused SGD / AdamW optimizers against a
 * float64 reference of torch.optim's update written out here, and
 * ClipGradNorm against its float64 definition. Each session
 * must place the op on GPU_NAME. Without a device the tests skip. The
 * tests of test_gpu_grad_conv.c run in the same executable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onyx/onyx.h"
#include "onyx/onyx_training.h"
#include "ox_ir.h"
#include "ox_host_api.h"
#include "ox_providers.h"
#include "ox_test_models.h"

#ifndef GPU_NAME
#error "GPU_NAME comes from tests/unit/gpu/CMakeLists.txt"
#endif

#define TRAINING "com.onyx.training"

/* test_gpu_grad_conv.c: BatchNormalization, MaxPool with Indices,
 * ConvGrad and a CNN's placement. */
const struct CMUnitTest* gpu_grad_conv_tests(size_t* n);

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static void gpu_required(void) {
  OxProviderLib* lib = NULL;
  OnyxStatus* st = ox_provider_lib_acquire(ox_host_api(), GPU_NAME, NULL, &lib);
  if (st) fail_msg("loading %s: %s", GPU_NAME, st->message);
  size_t n = 0;
  OnyxStatus* why = lib->provider->device_count(lib->provider, &n);
  ox_status_free(why);
  ox_provider_lib_release(lib);
  if (!n) {
    fprintf(stderr, "[  SKIP    ] no " GPU_NAME " device: the training kernel tests need one\n");
    skip();
  }
}

/* A 64-bit LCG: uniform doubles in [0, 1). */
static double uni(uint64_t* s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) / 9007199254740992.0;
}

static void fill(float* v, size_t n, uint64_t* s, double lo, double hi) {
  for (size_t i = 0; i < n; i++)
    v[i] = (float)(lo + (hi - lo) * uni(s));
}

/* One graph input of the test model. */
typedef struct In {
  const char* name;
  int32_t type;
  const void* data;
  size_t rank;
  const int64_t* dims;
} In;

static size_t count_of(const int64_t* dims, size_t rank) {
  size_t n = 1;
  for (size_t d = 0; d < rank; d++)
    n *= (size_t)dims[d];
  return n;
}

static size_t type_size(int32_t t) {
  return t == ONYX_ELEM_BOOL ? 1 : t == ONYX_ELEM_INT64 || t == ONYX_ELEM_FLOAT64 ? 8 : 4;
}

/* Creates a session over `bytes` with either GPU_NAME then cpu, or cpu
 * alone; with the GPU, fails unless GPU_NAME takes `gpu_nodes` nodes. */
static OnyxSession* open_session(const uint8_t* bytes, size_t len, bool gpu, size_t gpu_nodes) {
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  const char* cfg = gpu ? "{\"providers\": [{\"name\": \"" GPU_NAME "\"}, {\"name\": \"cpu\"}]}"
                        : "{\"providers\": [{\"name\": \"cpu\"}]}";
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "grad.json"));
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_options_release(o);
  if (gpu) {
    assert_string_equal(onyx_session_provider_name(s, 0), GPU_NAME);
    if (onyx_session_provider_node_count(s, 0) != gpu_nodes) {
      char* text = NULL;
      ok(onyx_session_explain(s, &text));
      fail_msg("%zu of %zu nodes on " GPU_NAME ":\n%s", onyx_session_provider_node_count(s, 0),
               gpu_nodes, text);
    }
  }
  return s;
}

/* Runs s on the inputs; out[i] gets a malloc'd copy of output i (float). */
static void run(OnyxSession* s, const In* in, size_t n_in, const char* const* outs, size_t n_out,
                float** got, size_t* got_n) {
  OnyxValue* v[16] = {NULL};
  const char* names[16];
  OnyxValue* o[128] = {NULL};
  assert_true(n_in <= 16 && n_out <= 128);
  for (size_t i = 0; i < n_in; i++) {
    names[i] = in[i].name;
    ok(onyx_value_create_tensor(in[i].type, in[i].dims, in[i].rank, in[i].data,
                                count_of(in[i].dims, in[i].rank) * type_size(in[i].type), &v[i]));
  }
  ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)v, n_in, outs, n_out, o));
  for (size_t i = 0; i < n_out; i++) {
    const OnyxTensor* t = onyx_value_tensor(o[i]);
    const size_t c = onyx_tensor_elem_count(t);
    got[i] = malloc((c ? c : 1) * sizeof(float));
    assert_non_null(got[i]);
    memcpy(got[i], onyx_tensor_data(t), c * sizeof(float));
    if (got_n) got_n[i] = c;
    onyx_value_release(o[i]);
  }
  for (size_t i = 0; i < n_in; i++)
    onyx_value_release(v[i]);
}

static void near(double got, double want, double tol, const char* what, size_t i) {
  if (!(fabs(got - want) <= tol * (1.0 + fabs(want)))) /* also fails on NaN */
    fail_msg("%s[%zu]: got %.9g, want %.9g (tolerance %.3g)", what, i, got, want, tol);
}

/* --- gradient ops: GPU against the CPU provider ----------------------------------------- */

typedef enum Second { SEC_X, SEC_SIGMOID_Y, SEC_TANH_Y, SEC_SOFTMAX_Y, SEC_LOG_SOFTMAX_Y } Second;

/* Y = softmax / log-softmax of x along `axis` of dims (a reference in
 * double, rounded to float: a valid Y for the grads). */
static void softmax_ref(const float* x, float* y, const int64_t* dims, size_t rank, size_t axis,
                        bool log_sm) {
  size_t outer = count_of(dims, axis), len = (size_t)dims[axis];
  size_t inner = count_of(dims + axis + 1, rank - axis - 1);
  for (size_t o = 0; o < outer; o++)
    for (size_t i = 0; i < inner; i++) {
      const size_t b = o * len * inner + i;
      double mx = -INFINITY, s = 0;
      for (size_t j = 0; j < len; j++)
        mx = fmax(mx, x[b + j * inner]);
      for (size_t j = 0; j < len; j++)
        s += exp(x[b + j * inner] - mx);
      for (size_t j = 0; j < len; j++) {
        const double e = x[b + j * inner] - mx;
        y[b + j * inner] = (float)(log_sm ? e - log(s) : exp(e) / s);
      }
    }
}

/* Runs op(dY, second) on GPU_NAME and on the CPU and compares dX. */
static void check_grad(const char* op, Second sec, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  const size_t rank = 1 + (size_t)(uni(&s) * 4); /* 1..4 */
  int64_t dims[4];
  for (size_t d = 0; d < rank; d++)
    dims[d] = 1 + (int64_t)(uni(&s) * 9);  /* 1..9 */
  if (seed % 3 == 0) dims[rank - 1] = 300; /* a long line */
  const size_t n = count_of(dims, rank);
  const int64_t axis = (int64_t)(uni(&s) * (double)rank) - (seed % 2 ? (int64_t)rank : 0);
  float* dy = malloc(n * sizeof *dy);
  float* x = malloc(n * sizeof *x);
  float* raw = malloc(n * sizeof *raw);
  assert_true(dy && x && raw);
  fill(dy, n, &s, -1.0, 1.0);
  fill(raw, n, &s, -4.0, 4.0);
  const size_t ax = (size_t)(axis < 0 ? axis + (int64_t)rank : axis);
  for (size_t i = 0; i < n; i++)
    x[i] = sec == SEC_SIGMOID_Y ? (float)(1.0 / (1.0 + exp(-raw[i])))
           : sec == SEC_TANH_Y  ? (float)tanh(raw[i])
                                : raw[i];
  if (sec == SEC_SOFTMAX_Y || sec == SEC_LOG_SOFTMAX_Y)
    softmax_ref(raw, x, dims, rank, ax, sec == SEC_LOG_SOFTMAX_Y);
  const char* second = sec == SEC_X ? "X" : "Y";
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, TRAINING, 1);
  otm_input(m, "dY", ONYX_ELEM_FLOAT32, (int)rank, dims);
  otm_input(m, second, ONYX_ELEM_FLOAT32, (int)rank, dims);
  otm_output(m, "dX", ONYX_ELEM_FLOAT32, (int)rank, dims);
  char ins[16];
  snprintf(ins, sizeof ins, "dY,%s", second);
  OxTestNode* nd = otm_node(m, op, "g", ins, "dX");
  otm_node_domain(nd, TRAINING);
  if (sec == SEC_SOFTMAX_Y || sec == SEC_LOG_SOFTMAX_Y) otm_attr_int(nd, "axis", axis);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  const In in[2] = {{"dY", ONYX_ELEM_FLOAT32, dy, rank, dims},
                    {second, ONYX_ELEM_FLOAT32, x, rank, dims}};
  const char* out = "dX";
  float *g = NULL, *c = NULL;
  OnyxSession* sg = open_session(bytes, len, true, 1);
  run(sg, in, 2, &out, 1, &g, NULL);
  onyx_session_release(sg);
  OnyxSession* sc = open_session(bytes, len, false, 0);
  run(sc, in, 2, &out, 1, &c, NULL);
  onyx_session_release(sc);
  for (size_t i = 0; i < n; i++)
    near(g[i], c[i], 1e-5, op, i);
  free(bytes);
  free(dy);
  free(x);
  free(raw);
  free(g);
  free(c);
}

static void test_gradients_match_cpu(void** state) {
  (void)state;
  gpu_required();
  static const struct {
    const char* op;
    Second sec;
  } ops[] = {{"ReluGrad", SEC_X},
             {"SigmoidGrad", SEC_SIGMOID_Y},
             {"TanhGrad", SEC_TANH_Y},
             {"GeluGrad", SEC_X},
             {"FastGeluGrad", SEC_X},
             {"SoftmaxGrad", SEC_SOFTMAX_Y},
             {"LogSoftmaxGrad", SEC_LOG_SOFTMAX_Y}};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    for (uint64_t seed = 1; seed <= 6; seed++)
      check_grad(ops[i].op, ops[i].sec, seed * 131 + i);
}

/* LayerNormalizationGrad(dY, X, scale, mean, inv_std_var) -> dX, dScale,
 * dBias over X [d0, d1, d2] normalized from `axis`, GPU against CPU; mean
 * and inv_std_var are X's own (computed here in float64). */
static void check_ln_grad(const int64_t* dims, int64_t axis, uint64_t seed) {
  uint64_t s = seed;
  const size_t n = count_of(dims, 3);
  const size_t rows = count_of(dims, (size_t)axis), width = n / rows;
  float* dy = malloc(n * sizeof *dy);
  float* x = malloc(n * sizeof *x);
  float* sc = malloc(width * sizeof *sc);
  float* mean = malloc((rows ? rows : 1) * sizeof *mean);
  float* inv = malloc((rows ? rows : 1) * sizeof *inv);
  assert_true(dy && x && sc && mean && inv);
  fill(dy, n, &s, -1.0, 1.0);
  fill(x, n, &s, -3.0, 5.0);
  fill(sc, width, &s, 0.5, 1.5);
  for (size_t r = 0; r < rows; r++) {
    double mu = 0, var = 0;
    for (size_t j = 0; j < width; j++)
      mu += x[r * width + j];
    mu /= (double)width;
    for (size_t j = 0; j < width; j++)
      var += (x[r * width + j] - mu) * (x[r * width + j] - mu);
    mean[r] = (float)mu;
    inv[r] = (float)(1.0 / sqrt(var / (double)width + 1e-5));
  }
  int64_t mdims[3];
  for (int d = 0; d < 3; d++)
    mdims[d] = d < axis ? dims[d] : 1;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, TRAINING, 1);
  otm_input(m, "dY", ONYX_ELEM_FLOAT32, 3, dims);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 3, dims);
  otm_input(m, "scale", ONYX_ELEM_FLOAT32, 3 - (int)axis, dims + axis);
  otm_input(m, "mean", ONYX_ELEM_FLOAT32, 3, mdims);
  otm_input(m, "inv", ONYX_ELEM_FLOAT32, 3, mdims);
  otm_output(m, "dX", ONYX_ELEM_FLOAT32, 3, dims);
  otm_output(m, "dS", ONYX_ELEM_FLOAT32, 3 - (int)axis, dims + axis);
  otm_output(m, "dB", ONYX_ELEM_FLOAT32, 3 - (int)axis, dims + axis);
  OxTestNode* nd = otm_node(m, "LayerNormalizationGrad", "ln", "dY,X,scale,mean,inv", "dX,dS,dB");
  otm_node_domain(nd, TRAINING);
  otm_attr_int(nd, "axis", axis);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  const In in[5] = {{"dY", ONYX_ELEM_FLOAT32, dy, 3, dims},
                    {"X", ONYX_ELEM_FLOAT32, x, 3, dims},
                    {"scale", ONYX_ELEM_FLOAT32, sc, 3 - (size_t)axis, dims + axis},
                    {"mean", ONYX_ELEM_FLOAT32, mean, 3, mdims},
                    {"inv", ONYX_ELEM_FLOAT32, inv, 3, mdims}};
  const char* outs[3] = {"dX", "dS", "dB"};
  float *g[3] = {NULL}, *c[3] = {NULL};
  size_t gn[3], cn[3];
  OnyxSession* sg = open_session(bytes, len, true, 1);
  run(sg, in, 5, outs, 3, g, gn);
  onyx_session_release(sg);
  OnyxSession* scpu = open_session(bytes, len, false, 0);
  run(scpu, in, 5, outs, 3, c, cn);
  onyx_session_release(scpu);
  for (int o = 0; o < 3; o++) {
    assert_int_equal(gn[o], cn[o]);
    for (size_t i = 0; i < gn[o]; i++)
      near(g[o][i], c[o][i], 1e-5, outs[o], i);
    free(g[o]);
    free(c[o]);
  }
  free(bytes);
  free(dy);
  free(x);
  free(sc);
  free(mean);
  free(inv);
}

static void test_layernorm_grad(void** state) {
  (void)state;
  gpu_required();
  static const int64_t shapes[][3] = {{2, 3, 8}, {4, 1, 300}, {3, 5, 7}, {1, 1, 1}, {6, 2, 1000}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int64_t axis = 1; axis <= 2; axis++)
      check_ln_grad(shapes[i], axis, 17 + i * 3 + (uint64_t)axis);
}

/* BatchNormalizationGrad(dY, X, scale[, mean, inv_std_var]) -> dX, dScale,
 * dBias over X [n, c, sp...], GPU against CPU; with statistics given (X's
 * own, computed here) or computed by the op. */
static void check_bn_grad(const int64_t* dims, size_t rank, bool stats, uint64_t seed) {
  uint64_t s = seed;
  const size_t n = count_of(dims, rank), c = (size_t)dims[1], m = n / c;
  const size_t sp = count_of(dims + 2, rank - 2);
  float* dy = malloc(n * sizeof *dy);
  float* x = malloc(n * sizeof *x);
  float sc[64], mean[64], inv[64];
  assert_true(dy && x && c <= 64);
  fill(dy, n, &s, -1.0, 1.0);
  fill(x, n, &s, -2.0, 4.0);
  fill(sc, c, &s, 0.5, 1.5);
  for (size_t ch = 0; ch < c; ch++) {
    double mu = 0, q = 0;
    for (size_t k = 0; k < m; k++)
      mu += x[((k / sp) * c + ch) * sp + k % sp];
    mu /= (double)m;
    for (size_t k = 0; k < m; k++) {
      const double dd = x[((k / sp) * c + ch) * sp + k % sp] - mu;
      q += dd * dd;
    }
    mean[ch] = (float)mu;
    inv[ch] = (float)(1.0 / sqrt(q / (double)m + 1e-5));
  }
  const int64_t cd = dims[1];
  OxTestModel* m1 = otm_new(17);
  otm_add_opset(m1, TRAINING, 1);
  otm_input(m1, "dY", ONYX_ELEM_FLOAT32, (int)rank, dims);
  otm_input(m1, "X", ONYX_ELEM_FLOAT32, (int)rank, dims);
  otm_input(m1, "scale", ONYX_ELEM_FLOAT32, 1, &cd);
  if (stats) {
    otm_input(m1, "mean", ONYX_ELEM_FLOAT32, 1, &cd);
    otm_input(m1, "inv", ONYX_ELEM_FLOAT32, 1, &cd);
  }
  otm_output(m1, "dX", ONYX_ELEM_FLOAT32, (int)rank, dims);
  otm_output(m1, "dS", ONYX_ELEM_FLOAT32, 1, &cd);
  otm_output(m1, "dB", ONYX_ELEM_FLOAT32, 1, &cd);
  OxTestNode* nd = otm_node(m1, "BatchNormalizationGrad", "bn",
                            stats ? "dY,X,scale,mean,inv" : "dY,X,scale", "dX,dS,dB");
  otm_node_domain(nd, TRAINING);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m1, &bytes, &len);
  otm_free(m1);
  const In in[5] = {{"dY", ONYX_ELEM_FLOAT32, dy, rank, dims},
                    {"X", ONYX_ELEM_FLOAT32, x, rank, dims},
                    {"scale", ONYX_ELEM_FLOAT32, sc, 1, &cd},
                    {"mean", ONYX_ELEM_FLOAT32, mean, 1, &cd},
                    {"inv", ONYX_ELEM_FLOAT32, inv, 1, &cd}};
  const char* outs[3] = {"dX", "dS", "dB"};
  float *g[3] = {NULL}, *cp[3] = {NULL};
  size_t gn[3], cn[3];
  OnyxSession* sg = open_session(bytes, len, true, 1);
  run(sg, in, stats ? 5 : 3, outs, 3, g, gn);
  onyx_session_release(sg);
  OnyxSession* scpu = open_session(bytes, len, false, 0);
  run(scpu, in, stats ? 5 : 3, outs, 3, cp, cn);
  onyx_session_release(scpu);
  for (int o = 0; o < 3; o++) {
    assert_int_equal(gn[o], cn[o]);
    for (size_t i = 0; i < gn[o]; i++)
      near(g[o][i], cp[o][i], 1e-5, outs[o], i);
    free(g[o]);
    free(cp[o]);
  }
  free(bytes);
  free(dy);
  free(x);
}

static void test_batchnorm_grad(void** state) {
  (void)state;
  gpu_required();
  static const int64_t s4[][4] = {{2, 3, 4, 5}, {8, 16, 7, 7}, {1, 5, 1, 1}, {3, 2, 30, 40}};
  static const int64_t s2[2] = {32, 10};
  for (int stats = 0; stats <= 1; stats++) {
    for (size_t i = 0; i < sizeof s4 / sizeof s4[0]; i++)
      check_bn_grad(s4[i], 4, stats, 41 + i);
    check_bn_grad(s2, 2, stats, 7);
  }
}

/* SoftmaxCrossEntropyLossGrad(dY, log_prob, label[, weight]) over
 * log_prob [n, c(, d)], GPU against CPU. bad_label: one label set to c,
 * which both providers must refuse, the GPU naming it. */
static void check_sce(const int64_t* dims, size_t rank, const char* red, bool weighted, bool ignore,
                      bool i32, bool bad_label, uint64_t seed) {
  uint64_t s = seed;
  const size_t n = count_of(dims, rank), c = (size_t)dims[1], samples = n / c;
  int64_t ldims[2] = {dims[0], rank > 2 ? dims[2] : 0};
  const size_t lrank = rank - 1;
  float* raw = malloc(n * sizeof *raw);
  float* lp = malloc(n * sizeof *lp);
  int64_t lab64[64];
  int32_t lab32[64];
  float w[16], dy[64];
  assert_true(raw && lp && samples <= 64 && c <= 16);
  fill(raw, n, &s, -3.0, 3.0);
  softmax_ref(raw, lp, dims, rank, 1, true);
  fill(w, c, &s, 0.2, 2.0);
  fill(dy, samples, &s, 0.5, 1.5);
  for (size_t i = 0; i < samples; i++) {
    lab64[i] = (int64_t)(uni(&s) * (double)c);
    if (ignore && i % 3 == 1) lab64[i] = -100;
    lab32[i] = (int32_t)lab64[i];
  }
  if (bad_label) lab64[samples - 1] = lab32[samples - 1] = (int32_t)c;
  const bool none = !strcmp(red, "none");
  const int64_t cd = dims[1];
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, TRAINING, 1);
  otm_input(m, "dY", ONYX_ELEM_FLOAT32, none ? (int)lrank : 0, ldims);
  otm_input(m, "lp", ONYX_ELEM_FLOAT32, (int)rank, dims);
  otm_input(m, "label", i32 ? ONYX_ELEM_INT32 : ONYX_ELEM_INT64, (int)lrank, ldims);
  if (weighted) otm_input(m, "w", ONYX_ELEM_FLOAT32, 1, &cd);
  otm_output(m, "dX", ONYX_ELEM_FLOAT32, (int)rank, dims);
  OxTestNode* nd = otm_node(m, "SoftmaxCrossEntropyLossGrad", "sce",
                            weighted ? "dY,lp,label,w" : "dY,lp,label", "dX");
  otm_node_domain(nd, TRAINING);
  otm_attr_string(nd, "reduction", red);
  if (ignore) otm_attr_int(nd, "ignore_index", -100);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  const In in[4] = {{"dY", ONYX_ELEM_FLOAT32, dy, none ? lrank : 0, ldims},
                    {"lp", ONYX_ELEM_FLOAT32, lp, rank, dims},
                    {"label", i32 ? ONYX_ELEM_INT32 : ONYX_ELEM_INT64,
                     i32 ? (const void*)lab32 : (const void*)lab64, lrank, ldims},
                    {"w", ONYX_ELEM_FLOAT32, w, 1, &cd}};
  const char* out = "dX";
  OnyxSession* sg = open_session(bytes, len, true, 1);
  if (bad_label) {
    OnyxValue* v[4] = {NULL};
    const char* names[4];
    for (size_t i = 0; i < (weighted ? 4u : 3u); i++) {
      names[i] = in[i].name;
      ok(onyx_value_create_tensor(in[i].type, in[i].dims, in[i].rank, in[i].data,
                                  count_of(in[i].dims, in[i].rank) * type_size(in[i].type), &v[i]));
    }
    OnyxValue* o = NULL;
    OnyxStatus* st = onyx_session_run(sg, NULL, names, (const OnyxValue* const*)v, weighted ? 4 : 3,
                                      &out, 1, &o);
    assert_non_null(st);
    if (!strstr(onyx_status_message(st), "outside the class range") ||
        !strstr(onyx_status_message(st), "sce"))
      fail_msg("unexpected message: %s", onyx_status_message(st));
    onyx_status_release(st);
    for (size_t i = 0; i < (weighted ? 4u : 3u); i++)
      onyx_value_release(v[i]);
    onyx_session_release(sg);
  } else {
    float *g = NULL, *cp = NULL;
    run(sg, in, weighted ? 4 : 3, &out, 1, &g, NULL);
    onyx_session_release(sg);
    OnyxSession* scpu = open_session(bytes, len, false, 0);
    run(scpu, in, weighted ? 4 : 3, &out, 1, &cp, NULL);
    onyx_session_release(scpu);
    for (size_t i = 0; i < n; i++)
      near(g[i], cp[i], 1e-5, "SoftmaxCrossEntropyLossGrad", i);
    free(g);
    free(cp);
  }
  free(bytes);
  free(raw);
  free(lp);
}

static void test_sce_grad(void** state) {
  (void)state;
  gpu_required();
  static const int64_t d2[2] = {32, 10}, d3[3] = {4, 7, 5};
  static const char* const reds[] = {"mean", "sum", "none"};
  for (size_t r = 0; r < 3; r++)
    for (int v = 0; v < 4; v++) {
      check_sce(d2, 2, reds[r], v & 1, v & 2, v == 3, false, 3 + r * 4 + (uint64_t)v);
      check_sce(d3, 3, reds[r], v & 1, v & 2, v == 1, false, 50 + r * 4 + (uint64_t)v);
    }
  check_sce(d2, 2, "mean", false, false, false, true, 9);
}

/* GatherGrad(X_shape, indices, dY) -> dX, GPU against CPU: indices with
 * repeats and negative values (bad: one out of range, refused by name). */
static void check_gather_grad(const int64_t* xd, size_t xr, int64_t axis, const int64_t* id,
                              size_t ir, bool bad, uint64_t seed) {
  uint64_t s = seed;
  const size_t ax = (size_t)(axis < 0 ? axis + (int64_t)xr : axis);
  int64_t yd[8];
  size_t yr = 0;
  for (size_t i = 0; i < ax; i++)
    yd[yr++] = xd[i];
  for (size_t i = 0; i < ir; i++)
    yd[yr++] = id[i];
  for (size_t i = ax + 1; i < xr; i++)
    yd[yr++] = xd[i];
  const size_t ny = count_of(yd, yr), ni = count_of(id, ir);
  float* dy = malloc(ny * sizeof *dy);
  int64_t idx[64];
  assert_true(dy && ni <= 64);
  fill(dy, ny, &s, -1.0, 1.0);
  const int64_t len = xd[ax];
  for (size_t i = 0; i < ni; i++)
    idx[i] = (int64_t)(uni(&s) * (double)(2 * len)) - len; /* [-len, len) */
  if (bad) idx[ni / 2] = len;
  const int64_t xr64 = (int64_t)xr;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, TRAINING, 1);
  otm_initializer(m, "shape", ONYX_ELEM_INT64, 1, &xr64, xd);
  otm_input(m, "idx", ONYX_ELEM_INT64, (int)ir, id);
  otm_input(m, "dY", ONYX_ELEM_FLOAT32, (int)yr, yd);
  otm_output(m, "dX", ONYX_ELEM_FLOAT32, (int)xr, xd);
  OxTestNode* nd = otm_node(m, "GatherGrad", "gg", "shape,idx,dY", "dX");
  otm_node_domain(nd, TRAINING);
  otm_attr_int(nd, "axis", axis);
  uint8_t* bytes = NULL;
  size_t len_b = 0;
  otm_serialize(m, &bytes, &len_b);
  otm_free(m);
  const In in[2] = {{"idx", ONYX_ELEM_INT64, idx, ir, id}, {"dY", ONYX_ELEM_FLOAT32, dy, yr, yd}};
  const char* out = "dX";
  OnyxSession* sg = open_session(bytes, len_b, true, 1);
  if (bad) {
    OnyxValue* v[2] = {NULL};
    const char* names[2] = {"idx", "dY"};
    for (size_t i = 0; i < 2; i++)
      ok(onyx_value_create_tensor(in[i].type, in[i].dims, in[i].rank, in[i].data,
                                  count_of(in[i].dims, in[i].rank) * type_size(in[i].type), &v[i]));
    OnyxValue* o = NULL;
    OnyxStatus* st = onyx_session_run(sg, NULL, names, (const OnyxValue* const*)v, 2, &out, 1, &o);
    assert_non_null(st);
    if (!strstr(onyx_status_message(st), "is out of range for axis") ||
        !strstr(onyx_status_message(st), "gg"))
      fail_msg("unexpected message: %s", onyx_status_message(st));
    onyx_status_release(st);
    onyx_value_release(v[0]);
    onyx_value_release(v[1]);
    onyx_session_release(sg);
  } else {
    float *g = NULL, *cp = NULL;
    size_t gn, cn;
    run(sg, in, 2, &out, 1, &g, &gn);
    onyx_session_release(sg);
    OnyxSession* scpu = open_session(bytes, len_b, false, 0);
    run(scpu, in, 2, &out, 1, &cp, &cn);
    onyx_session_release(scpu);
    assert_int_equal(gn, cn);
    assert_int_equal(gn, count_of(xd, xr));
    for (size_t i = 0; i < gn; i++)
      near(g[i], cp[i], 1e-6, "GatherGrad", i);
    free(g);
    free(cp);
  }
  free(bytes);
  free(dy);
}

static void test_gather_grad(void** state) {
  (void)state;
  gpu_required();
  static const int64_t x2[2] = {10, 6}, i1[1] = {23}, x3[3] = {3, 8, 5}, i2[2] = {2, 4};
  static const int64_t x1[1] = {4}, i0[1] = {0};
  check_gather_grad(x2, 2, 0, i1, 1, false, 1);  /* embedding rows, repeats */
  check_gather_grad(x3, 3, 1, i2, 2, false, 2);  /* a middle axis, 2-D indices */
  check_gather_grad(x3, 3, -1, i1, 1, false, 3); /* the last axis */
  check_gather_grad(x1, 1, 0, i0, 1, false, 4);  /* no index: zeros */
  check_gather_grad(x2, 2, 0, i1, 1, true, 5);
}

/* MaxPoolGrad(dY, Indices, X_shape) -> dX, GPU against CPU: Indices drawn
 * over all of X, with repeats (overlapping windows); bad: one outside X,
 * refused by name. */
static void check_maxpool_grad(bool bad, uint64_t seed) {
  uint64_t s = seed;
  static const int64_t xd[4] = {2, 3, 6, 5}, yd[4] = {2, 3, 4, 3}, four = 4;
  const size_t ny = count_of(yd, 4), nx = count_of(xd, 4);
  float dy[72];
  int64_t idx[72];
  fill(dy, ny, &s, -1.0, 1.0);
  for (size_t i = 0; i < ny; i++)
    idx[i] = (int64_t)(uni(&s) * (double)nx);
  if (bad) idx[5] = (int64_t)nx;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, TRAINING, 1);
  otm_initializer(m, "shape", ONYX_ELEM_INT64, 1, &four, xd);
  otm_input(m, "dY", ONYX_ELEM_FLOAT32, 4, yd);
  otm_input(m, "ind", ONYX_ELEM_INT64, 4, yd);
  otm_output(m, "dX", ONYX_ELEM_FLOAT32, 4, xd);
  OxTestNode* nd = otm_node(m, "MaxPoolGrad", "mpg", "dY,ind,shape", "dX");
  otm_node_domain(nd, TRAINING);
  otm_attr_ints(nd, "kernel_shape", 2, (const int64_t[]){3, 3});
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  const In in[2] = {{"dY", ONYX_ELEM_FLOAT32, dy, 4, yd}, {"ind", ONYX_ELEM_INT64, idx, 4, yd}};
  const char* out = "dX";
  OnyxSession* sg = open_session(bytes, len, true, 1);
  if (bad) {
    OnyxValue* v[2] = {NULL};
    const char* names[2] = {"dY", "ind"};
    for (size_t i = 0; i < 2; i++)
      ok(onyx_value_create_tensor(in[i].type, in[i].dims, in[i].rank, in[i].data,
                                  ny * type_size(in[i].type), &v[i]));
    OnyxValue* o = NULL;
    OnyxStatus* st = onyx_session_run(sg, NULL, names, (const OnyxValue* const*)v, 2, &out, 1, &o);
    assert_non_null(st);
    if (!strstr(onyx_status_message(st), "outside X's") || !strstr(onyx_status_message(st), "mpg"))
      fail_msg("unexpected message: %s", onyx_status_message(st));
    onyx_status_release(st);
    onyx_value_release(v[0]);
    onyx_value_release(v[1]);
    onyx_session_release(sg);
  } else {
    float *g = NULL, *cp = NULL;
    size_t gn, cn;
    run(sg, in, 2, &out, 1, &g, &gn);
    onyx_session_release(sg);
    OnyxSession* scpu = open_session(bytes, len, false, 0);
    run(scpu, in, 2, &out, 1, &cp, &cn);
    onyx_session_release(scpu);
    assert_int_equal(gn, nx);
    assert_int_equal(cn, nx);
    for (size_t i = 0; i < gn; i++)
      near(g[i], cp[i], 1e-6, "MaxPoolGrad", i);
    free(g);
    free(cp);
  }
  free(bytes);
}

static void test_maxpool_grad(void** state) {
  (void)state;
  gpu_required();
  check_maxpool_grad(false, 11);
  check_maxpool_grad(false, 12);
  check_maxpool_grad(true, 13);
}

/* DropoutGrad(dY, mask, ratio): dX = mask ? dY / (1 - ratio) : 0, by hand. */
static void test_dropout_grad(void** state) {
  (void)state;
  gpu_required();
  int64_t dims[2] = {7, 33};
  const size_t n = 7 * 33;
  uint64_t s = 77;
  float dy[7 * 33];
  uint8_t mask[7 * 33];
  fill(dy, n, &s, -2.0, 2.0);
  for (size_t i = 0; i < n; i++)
    mask[i] = uni(&s) < 0.7;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, TRAINING, 1);
  otm_input(m, "dY", ONYX_ELEM_FLOAT32, 2, dims);
  otm_input(m, "mask", ONYX_ELEM_BOOL, 2, dims);
  otm_input(m, "ratio", ONYX_ELEM_FLOAT32, 0, NULL);
  otm_output(m, "dX", ONYX_ELEM_FLOAT32, 2, dims);
  otm_node_domain(otm_node(m, "DropoutGrad", "d", "dY,mask,ratio", "dX"), TRAINING);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  const float ratio = 0.25f;
  const In in[3] = {{"dY", ONYX_ELEM_FLOAT32, dy, 2, dims},
                    {"mask", ONYX_ELEM_BOOL, mask, 2, dims},
                    {"ratio", ONYX_ELEM_FLOAT32, &ratio, 0, NULL}};
  const char* out = "dX";
  float* g = NULL;
  OnyxSession* sg = open_session(bytes, len, true, 1);
  run(sg, in, 3, &out, 1, &g, NULL);
  onyx_session_release(sg);
  for (size_t i = 0; i < n; i++)
    near(g[i], mask[i] ? dy[i] / 0.75 : 0.0, 1e-6, "DropoutGrad", i);
  free(g);
  free(bytes);
}

/* --- the fused optimizers against float64 references ------------------------------------ */

typedef struct OptCase {
  const char* op;
  size_t n; /* tensors */
  float momentum, dampening, wd;
  int nesterov;
  int64_t step;
} OptCase;

/* Sizes of tensor t: one empty, one over two chunks of GPU_CLIP_CHUNK. */
static int64_t opt_size(size_t t) {
  static const int64_t sz[] = {5, 1, 0, 300, 17, 1000, 64, 20000};
  return sz[t % (sizeof sz / sizeof sz[0])];
}

static void check_optimizer(const OptCase* c) {
  const bool sgd = !strcmp(c->op, "SGDOptimizer"), lamb = !strcmp(c->op, "LambOptimizer");
  const size_t groups = sgd ? (c->momentum != 0 ? 3 : 2) : 4, n = c->n;
  const size_t n_out = (groups - 1) * n;
  const float lr = 0.05f;
  assert_true(n <= 40);
  const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, TRAINING, 1);
  otm_input(m, "lr", ONYX_ELEM_FLOAT32, 0, NULL);
  otm_input(m, "step", ONYX_ELEM_INT64, 0, NULL);
  static const char gname[] = "PGMV";
  char ins[4096] = "lr,step", outs_csv[4096] = "";
  char names[128][24];
  for (size_t g = 0; g < groups; g++)
    for (size_t t = 0; t < n; t++) {
      char nm[24];
      snprintf(nm, sizeof nm, "%c%zu", gname[g], t);
      int64_t d = opt_size(t);
      otm_input(m, nm, ONYX_ELEM_FLOAT32, 1, &d);
      strcat(ins, ",");
      strcat(ins, nm);
    }
  for (size_t g = 0; g + 1 < groups; g++)
    for (size_t t = 0; t < n; t++) {
      char* nm = names[g * n + t];
      snprintf(nm, 24, "o%c%zu", gname[g == 0 ? 0 : g + 1], t);
      int64_t d = opt_size(t);
      otm_output(m, nm, ONYX_ELEM_FLOAT32, 1, &d);
      if (g || t) strcat(outs_csv, ",");
      strcat(outs_csv, nm);
    }
  OxTestNode* nd = otm_node(m, c->op, "opt", ins, outs_csv);
  otm_node_domain(nd, TRAINING);
  otm_attr_int(nd, "n", (int64_t)n);
  if (sgd) {
    otm_attr_float(nd, "momentum", c->momentum);
    otm_attr_float(nd, "dampening", c->dampening);
    otm_attr_int(nd, "nesterov", c->nesterov);
  }
  otm_attr_float(nd, "weight_decay", c->wd);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  /* Inputs. */
  float* data[4][40];
  assert_true(n <= 40 && 2 + groups * n <= 160);
  uint64_t s = 1234 + n;
  int64_t dims[40];
  In* all = calloc(2 + groups * n, sizeof *all);
  assert_non_null(all);
  all[0] = (In){"lr", ONYX_ELEM_FLOAT32, &lr, 0, NULL};
  all[1] = (In){"step", ONYX_ELEM_INT64, &c->step, 0, NULL};
  char in_names[4][40][24];
  for (size_t t = 0; t < n; t++)
    dims[t] = opt_size(t);
  for (size_t g = 0; g < groups; g++)
    for (size_t t = 0; t < n; t++) {
      const size_t cnt = (size_t)dims[t];
      data[g][t] = malloc((cnt ? cnt : 1) * sizeof(float));
      assert_non_null(data[g][t]);
      fill(data[g][t], cnt, &s, g == 3 ? 0.0 : -1.0, 1.0); /* V >= 0 */
      snprintf(in_names[g][t], 24, "%c%zu", gname[g], t);
      all[2 + g * n + t] = (In){in_names[g][t], ONYX_ELEM_FLOAT32, data[g][t], 1, &dims[t]};
    }
  OnyxSession* sg = open_session(bytes, len, true, 1);
  OnyxValue* v[160] = {NULL};
  const char* vn[160];
  for (size_t i = 0; i < 2 + groups * n; i++) {
    vn[i] = all[i].name;
    ok(onyx_value_create_tensor(all[i].type, all[i].dims, all[i].rank, all[i].data,
                                count_of(all[i].dims, all[i].rank) * type_size(all[i].type),
                                &v[i]));
  }
  const char* on[128];
  for (size_t i = 0; i < n_out; i++)
    on[i] = names[i];
  OnyxValue* o[128] = {NULL};
  ok(onyx_session_run(sg, NULL, vn, (const OnyxValue* const*)v, 2 + groups * n, on, n_out, o));
  /* The reference, per element in float64 (torch.optim's formulas; LAMB's
   * trust ratio |p| / |u| per tensor first). */
  const double t1 = (double)c->step + 1.0;
  double ratio[40];
  for (size_t t = 0; lamb && t < n; t++) {
    double sp = 0, su = 0;
    for (int64_t i = 0; i < dims[t]; i++) {
      const double p = data[0][t][i], gr = data[1][t][i];
      const double mm = beta1 * data[2][t][i] + (1 - beta1) * gr;
      const double vv = beta2 * data[3][t][i] + (1 - beta2) * gr * gr;
      const double u =
          (mm / (1 - pow(beta1, t1))) / (sqrt(vv / (1 - pow(beta2, t1))) + 1e-6) + c->wd * p;
      sp += p * p;
      su += u * u;
    }
    ratio[t] = sp > 0 && su > 0 ? sqrt(sp) / sqrt(su) : 1.0;
  }
  for (size_t t = 0; t < n; t++) {
    const float* got[3] = {NULL};
    for (size_t g = 0; g + 1 < groups; g++)
      got[g] = onyx_tensor_data(onyx_value_tensor(o[g * n + t]));
    for (int64_t i = 0; i < dims[t]; i++) {
      const double p = data[0][t][i], gr = data[1][t][i];
      if (sgd) {
        double d = gr + c->wd * p;
        if (groups == 3) {
          const double buf =
              c->step == 0 ? d : c->momentum * data[2][t][i] + (1.0 - c->dampening) * d;
          near(got[1][i], buf, 1e-5, "SGD momentum", (size_t)i);
          d = c->nesterov ? d + c->momentum * buf : buf;
        }
        near(got[0][i], p - lr * d, 1e-5, "SGD P", (size_t)i);
      } else if (lamb) {
        const double mm = beta1 * data[2][t][i] + (1 - beta1) * gr;
        const double vv = beta2 * data[3][t][i] + (1 - beta2) * gr * gr;
        const double bc1 = 1 - pow(beta1, t1), bc2 = 1 - pow(beta2, t1);
        const double u = (mm / bc1) / (sqrt(vv / bc2) + 1e-6) + c->wd * p;
        near(got[0][i], p - lr * ratio[t] * u, 1e-5, "LAMB P", (size_t)i);
        near(got[1][i], mm, 1e-5, "LAMB M", (size_t)i);
        near(got[2][i], vv, 1e-5, "LAMB V", (size_t)i);
      } else {
        const double mm = beta1 * data[2][t][i] + (1 - beta1) * gr;
        const double vv = beta2 * data[3][t][i] + (1 - beta2) * gr * gr;
        const double bc1 = 1 - pow(beta1, t1), bc2 = 1 - pow(beta2, t1);
        const double want = p * (1 - lr * c->wd) - lr * (mm / bc1) / (sqrt(vv / bc2) + eps);
        near(got[0][i], want, 1e-5, "AdamW P", (size_t)i);
        near(got[1][i], mm, 1e-5, "AdamW M", (size_t)i);
        near(got[2][i], vv, 1e-5, "AdamW V", (size_t)i);
      }
    }
  }
  for (size_t i = 0; i < n_out; i++)
    onyx_value_release(o[i]);
  for (size_t i = 0; i < 2 + groups * n; i++)
    onyx_value_release(v[i]);
  onyx_session_release(sg);
  for (size_t g = 0; g < groups; g++)
    for (size_t t = 0; t < n; t++)
      free(data[g][t]);
  free(all);
  free(bytes);
}

static void test_sgd(void** state) {
  (void)state;
  gpu_required();
  const OptCase cases[] = {
      {"SGDOptimizer", 3, 0.0f, 0.0f, 0.0f, 0, 0},  /* plain */
      {"SGDOptimizer", 7, 0.9f, 0.0f, 0.01f, 0, 0}, /* momentum, first step */
      {"SGDOptimizer", 7, 0.9f, 0.1f, 0.01f, 0, 5}, /* dampening */
      {"SGDOptimizer", 5, 0.8f, 0.0f, 0.0f, 1, 3},  /* nesterov */
      {"SGDOptimizer", 40, 0.9f, 0.0f, 0.0f, 0, 2}, /* two launches of tensors */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_optimizer(&cases[i]);
}

static void test_adamw(void** state) {
  (void)state;
  gpu_required();
  const OptCase cases[] = {
      {"AdamWOptimizer", 3, 0, 0, 0.01f, 0, 0},
      {"AdamWOptimizer", 7, 0, 0, 0.0f, 0, 9},
      {"AdamWOptimizer", 33, 0, 0, 0.1f, 0, 100},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_optimizer(&cases[i]);
}

static void test_lamb(void** state) {
  (void)state;
  gpu_required();
  const OptCase cases[] = {
      {"LambOptimizer", 3, 0, 0, 0.0f, 0, 0},
      {"LambOptimizer", 8, 0, 0, 0.01f, 0, 4},  /* a tensor of three chunks */
      {"LambOptimizer", 35, 0, 0, 0.1f, 0, 50}, /* two launches */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_optimizer(&cases[i]);
}

/* ClipGradNorm(max_norm, G_1..G_n) -> G'.., total_norm against float64:
 * norm = sqrt(sum g^2), coef = max_norm / (norm + 1e-6), G' = G * coef
 * where coef < 1, else G. */
static void check_clip(size_t n, float max_norm, int64_t big) {
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, TRAINING, 1);
  otm_input(m, "max_norm", ONYX_ELEM_FLOAT32, 0, NULL);
  char ins[2048] = "max_norm", outs_csv[2048] = "";
  char gn[48][24], on[49][24];
  int64_t dims[48];
  assert_true(n <= 48);
  for (size_t t = 0; t < n; t++) {
    dims[t] = t == 1 ? big : opt_size(t);
    snprintf(gn[t], sizeof gn[t], "G%zu", t);
    snprintf(on[t], sizeof on[t], "oG%zu", t);
    otm_input(m, gn[t], ONYX_ELEM_FLOAT32, 1, &dims[t]);
    otm_output(m, on[t], ONYX_ELEM_FLOAT32, 1, &dims[t]);
    strcat(ins, ",");
    strcat(ins, gn[t]);
    strcat(outs_csv, on[t]);
    strcat(outs_csv, ",");
  }
  snprintf(on[n], sizeof on[n], "norm");
  otm_output(m, "norm", ONYX_ELEM_FLOAT32, 0, NULL);
  strcat(outs_csv, "norm");
  OxTestNode* nd = otm_node(m, "ClipGradNorm", "clip", ins, outs_csv);
  otm_node_domain(nd, TRAINING);
  otm_attr_int(nd, "n", (int64_t)n);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxValue* v[49] = {NULL};
  const char* vn[49];
  float* data[48];
  uint64_t s = 99 + n;
  vn[0] = "max_norm";
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, NULL, 0, &max_norm, sizeof max_norm, &v[0]));
  double sq = 0;
  for (size_t t = 0; t < n; t++) {
    const size_t c = (size_t)dims[t];
    data[t] = malloc((c ? c : 1) * sizeof(float));
    assert_non_null(data[t]);
    fill(data[t], c, &s, -1.0, 1.0);
    for (size_t i = 0; i < c; i++)
      sq += (double)data[t][i] * data[t][i];
    vn[1 + t] = gn[t];
    ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, &dims[t], 1, data[t], c * sizeof(float),
                                &v[1 + t]));
  }
  OnyxSession* sg = open_session(bytes, len, true, 1);
  const char* outn[49];
  for (size_t i = 0; i <= n; i++)
    outn[i] = on[i];
  OnyxValue* o[49] = {NULL};
  ok(onyx_session_run(sg, NULL, vn, (const OnyxValue* const*)v, 1 + n, outn, n + 1, o));
  const double norm = sqrt(sq), coef = max_norm / (norm + 1e-6);
  near(*(const float*)onyx_tensor_data(onyx_value_tensor(o[n])), norm, 1e-6, "total_norm", 0);
  for (size_t t = 0; t < n; t++) {
    const float* got = onyx_tensor_data(onyx_value_tensor(o[t]));
    for (int64_t i = 0; i < dims[t]; i++)
      near(got[i], coef < 1 ? data[t][i] * coef : data[t][i], 1e-6, "G'", (size_t)i);
  }
  for (size_t i = 0; i <= n; i++)
    onyx_value_release(o[i]);
  for (size_t t = 0; t <= n; t++)
    onyx_value_release(v[t]);
  for (size_t t = 0; t < n; t++)
    free(data[t]);
  onyx_session_release(sg);
  free(bytes);
}

static void test_clip_grad_norm(void** state) {
  (void)state;
  gpu_required();
  check_clip(3, 1.0f, 20000);   /* clips; one tensor spans three chunks */
  check_clip(5, 1e6f, 9000);    /* below max_norm: a copy */
  check_clip(40, 0.5f, 70000);  /* two launches of tensors */
  check_clip(4, INFINITY, 500); /* no maximum: a copy, the norm reported */
}

/* --- the training graph's placement ------------------------------------------------------ */

static int rm_entry(const char* path, const struct stat* sb, int flag, struct FTW* ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

/* The explain text of `path` opened with GPU_NAME first; NULL-free. */
static char* explain_file(const char* path) {
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  const char* cfg = "{\"providers\": [{\"name\": \"" GPU_NAME "\"}, {\"name\": \"cpu\"}]}";
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "grad.json"));
  OnyxSession* s = NULL;
  ok(onyx_session_create(o, path, &s));
  onyx_session_options_release(o);
  char* text = NULL;
  ok(onyx_session_explain(s, &text));
  onyx_session_release(s);
  return text;
}

/* Every node line of `text` whose op is `op` ends in "-> GPU_NAME"; returns
 * how many there were. */
static size_t placed_here(const char* text, const char* op) {
  char pat[64];
  snprintf(pat, sizeof pat, " %s ", op);
  size_t n = 0;
  for (const char* p = strstr(text, pat); p; p = strstr(p + 1, pat)) {
    const char* eol = strchr(p, '\n');
    const char* arrow = strstr(p, "-> ");
    if (!arrow || (eol && arrow > eol)) continue; /* not a node line */
    if (strncmp(arrow + 3, GPU_NAME, strlen(GPU_NAME)) != 0)
      fail_msg("%s is not on " GPU_NAME ":\n%s", op, text);
    n++;
  }
  return n;
}

/* An MLP x[N, 16] -> MatMul, Add, Relu -> MatMul, Add, Tanh -> MatMul, Add
 * -> logits [N, 4], trained with cross-entropy: ReluGrad, TanhGrad,
 * SoftmaxCrossEntropyLossGrad and the optimizer (SGD with momentum, then AdamW) run on GPU_NAME. */
static void test_training_graph_placement(void** state) {
  (void)state;
  gpu_required();
  char dir[] = "/tmp/onyx_gpu_grad_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char model[600], art[600], path[700];
  snprintf(model, sizeof model, "%s/mlp.onnx", dir);
  OxTestModel* m = otm_new(17);
  otm_input_s(m, "x", ONYX_ELEM_FLOAT32, "N,16");
  otm_output_s(m, "logits", ONYX_ELEM_FLOAT32, "N,4");
  static const int64_t wd[3][2] = {{16, 32}, {32, 32}, {32, 4}};
  float w[32 * 32];
  uint64_t s = 5;
  for (int l = 0; l < 3; l++) {
    char wn[8], bn[8];
    snprintf(wn, sizeof wn, "w%d", l);
    snprintf(bn, sizeof bn, "b%d", l);
    fill(w, (size_t)(wd[l][0] * wd[l][1]), &s, -0.3, 0.3);
    otm_initializer(m, wn, ONYX_ELEM_FLOAT32, 2, wd[l], w);
    fill(w, (size_t)wd[l][1], &s, -0.1, 0.1);
    otm_initializer(m, bn, ONYX_ELEM_FLOAT32, 1, &wd[l][1], w);
  }
  otm_node(m, "MatMul", "mm0", "x,w0", "h0");
  otm_node(m, "Add", "add0", "h0,b0", "a0");
  otm_node(m, "Relu", "relu", "a0", "r0");
  otm_node(m, "MatMul", "mm1", "r0,w1", "h1");
  otm_node(m, "Add", "add1", "h1,b1", "a1");
  otm_node(m, "Tanh", "tanh", "a1", "t1");
  otm_node(m, "MatMul", "mm2", "t1,w2", "h2");
  otm_node(m, "Add", "add2", "h2,b2", "logits");
  assert_true(otm_write(m, model));
  otm_free(m);
  for (int opt = 0; opt < 2; opt++) {
    OnyxTrainingArtifactsOptions ao;
    onyx_training_artifacts_options_init(&ao);
    ao.loss = ONYX_LOSS_CROSS_ENTROPY;
    ao.optimizer = opt ? ONYX_OPTIMIZER_ADAMW : ONYX_OPTIMIZER_SGD;
    if (!opt) ao.momentum = 0.9f;
    snprintf(art, sizeof art, "%s/art%d", dir, opt);
    ok(onyx_training_artifacts_generate(model, &ao, art));
    snprintf(path, sizeof path, "%s/training_model.onnx", art);
    char* text = explain_file(path);
    assert_true(placed_here(text, "ReluGrad") >= 1);
    assert_true(placed_here(text, "TanhGrad") >= 1);
    assert_int_equal(placed_here(text, "SoftmaxCrossEntropyLossGrad"), 1);
    if (!opt) fprintf(stderr, "training model on " GPU_NAME " + cpu:\n%s\n", text);
    onyx_free(text);
    snprintf(path, sizeof path, "%s/optimizer_model.onnx", art);
    text = explain_file(path);
    assert_int_equal(placed_here(text, opt ? "AdamWOptimizer" : "SGDOptimizer"), 1);
    onyx_free(text);
  }
  assert_int_equal(nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS), 0);
}

/* The vendor runtimes leak a little each time the provider is unloaded and
 * loaded again (LeakSanitizer reports it from "<unknown module>"): the
 * provider stays mapped for the whole process, as in test_gpu.c. */
static int keep_mapped(void** state) {
  (void)state;
  const char* dir = getenv("ONYX_PROVIDER_PATH");
  char path[4096];
  snprintf(path, sizeof path, "%s/libonyx_ep_" GPU_NAME ".so", dir ? dir : ".");
  if (!dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
    return -1;
  }
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gradients_match_cpu),
      cmocka_unit_test(test_sce_grad),
      cmocka_unit_test(test_gather_grad),
      cmocka_unit_test(test_maxpool_grad),
      cmocka_unit_test(test_layernorm_grad),
      cmocka_unit_test(test_batchnorm_grad),
      cmocka_unit_test(test_dropout_grad),
      cmocka_unit_test(test_sgd),
      cmocka_unit_test(test_adamw),
      cmocka_unit_test(test_lamb),
      cmocka_unit_test(test_clip_grad_norm),
      cmocka_unit_test(test_training_graph_placement),
  };
  /* Then the CNN ops of test_gpu_grad_conv.c. */
  size_t n_conv = 0;
  const struct CMUnitTest* conv = gpu_grad_conv_tests(&n_conv);
  const size_t n_own = sizeof tests / sizeof tests[0];
  struct CMUnitTest all[32];
  assert_true(n_own + n_conv <= sizeof all / sizeof all[0]);
  memcpy(all, tests, sizeof tests);
  memcpy(all + n_own, conv, n_conv * sizeof *conv);
  return _cmocka_run_group_tests("gpu_grad_" GPU_NAME, all, n_own + n_conv, keep_mapped, NULL);
}
