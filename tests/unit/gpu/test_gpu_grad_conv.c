/* test_gpu_grad_conv.c — the forward and backward ops of a CNN's training
 * step on a GPU provider (GPU_NAME; "gpuemu" runs them on the host
 * emulation), each against the CPU provider's result for the same inputs:
 *
 *   BatchNormalization in training mode (Y, running_mean, running_var; 2-D
 *   and 4-D, batch 1) and in inference mode, within 1e-5;
 *   MaxPool with its Indices output (1-D to 3-D, strides, pads, asymmetric
 *   pads, dilations, ceil_mode, auto_pad SAME_UPPER, storage_order 1): Y
 *   and Indices exactly;
 *   com.onyx.training ConvGrad through cuDNN (CUDA only: elsewhere ConvGrad
 *   has no GPU kernel and the test skips): groups, stride 2, dilation,
 *   pads, 1-D and 3-D, dX / dW / dB each alone and all three, within 1e-4
 *   (the sums run in another order than the CPU's);
 *   Shape (opset 15's start / end) and Size of a tensor made on the GPU,
 *   taken by the GPU provider, against the dims and the CPU's;
 *   Sum (1 to 3 inputs, broadcasting), against the CPU's and by hand;
 *   a Reshape of GPU data whose shape comes from the host, on the GPU;
 *   the training model of a small CNN (Conv, BatchNormalization, Relu,
 *   MaxPool, GlobalAveragePool, Gemm, cross-entropy; and a residual form
 *   with ReduceMean): BatchNormalization, BatchNormalizationGrad, MaxPool,
 *   MaxPoolGrad, ReluGrad, the residual form's Sum and ReduceMean (and
 *   Conv and ConvGrad on CUDA) placed on GPU_NAME.
 *
 * Each op session must place the op on GPU_NAME. A mismatch names the
 * case, the output, the index and both values. Without a device the tests
 * skip. Linked into test_gpu_grad_<gpu> with test_gpu_grad.c, whose main
 * runs gpu_grad_conv_tests after its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onyx/onyx.h"
#include "onyx/onyx_training.h"
#include "ox_host_api.h"
#include "ox_ir.h"
#include "ox_providers.h"
#include "ox_test_models.h"

#ifndef GPU_NAME
#error "GPU_NAME comes from tests/unit/gpu/CMakeLists.txt"
#endif

#define TRAINING "com.onyx.training"

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
    fprintf(stderr, "[  SKIP    ] no " GPU_NAME " device: these tests need one\n");
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

static size_t count_of(const int64_t* dims, size_t rank) {
  size_t n = 1;
  for (size_t d = 0; d < rank; d++)
    n *= (size_t)dims[d];
  return n;
}

/* One graph input of a test model. */
typedef struct In {
  const char* name;
  const float* data;
  size_t rank;
  const int64_t* dims;
} In;

/* One output of a run: its bytes (float32 or int64) and element count. */
typedef struct Out {
  void* data;
  size_t n;
  int32_t type;
} Out;

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

/* Runs the model on GPU_NAME (all of its nodes placed there) and on the
 * CPU alone; g[i] / c[i] get output i of each. */
static void run_both(const uint8_t* bytes, size_t len, size_t gpu_nodes, const In* in, size_t n_in,
                     const char* const* outs, size_t n_out, Out* g, Out* c) {
  OnyxValue* v[8] = {NULL};
  const char* names[8];
  assert_true(n_in <= 8 && n_out <= 8);
  for (size_t i = 0; i < n_in; i++) {
    names[i] = in[i].name;
    ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, in[i].dims, in[i].rank, in[i].data,
                                count_of(in[i].dims, in[i].rank) * sizeof(float), &v[i]));
  }
  for (int pass = 0; pass < 2; pass++) {
    OnyxSession* s = open_session(bytes, len, pass == 0, gpu_nodes);
    Out* dst = pass == 0 ? g : c;
    OnyxValue* o[8] = {NULL};
    ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)v, n_in, outs, n_out, o));
    for (size_t i = 0; i < n_out; i++) {
      const OnyxTensor* t = onyx_value_tensor(o[i]);
      dst[i].n = onyx_tensor_elem_count(t);
      dst[i].type = (int32_t)onyx_tensor_elem_type(t);
      const size_t es = dst[i].type == ONYX_ELEM_INT64 ? 8 : 4;
      dst[i].data = malloc(dst[i].n ? dst[i].n * es : 1);
      assert_non_null(dst[i].data);
      memcpy(dst[i].data, onyx_tensor_data(t), dst[i].n * es);
      onyx_value_release(o[i]);
    }
    onyx_session_release(s);
  }
  for (size_t i = 0; i < n_in; i++)
    onyx_value_release(v[i]);
}

/* Compares output `what` of case `name`: float32 within tol relative to
 * 1 + |CPU value|, int64 exactly. Prints up to 8 mismatches (case, output,
 * index, both values) before failing. */
static void compare(const char* name, const char* what, const Out* g, const Out* c, double tol) {
  if (g->n != c->n || g->type != c->type)
    fail_msg("%s: %s: GPU gave %zu values of type %d, CPU %zu of type %d", name, what, g->n,
             (int)g->type, c->n, (int)c->type);
  size_t bad = 0;
  for (size_t i = 0; i < g->n; i++) {
    bool same;
    double gv, cv;
    if (g->type == ONYX_ELEM_INT64) {
      gv = (double)((const int64_t*)g->data)[i];
      cv = (double)((const int64_t*)c->data)[i];
      same = ((const int64_t*)g->data)[i] == ((const int64_t*)c->data)[i];
    } else {
      gv = ((const float*)g->data)[i];
      cv = ((const float*)c->data)[i];
      same = fabs(gv - cv) <= tol * (1.0 + fabs(cv)); /* false on NaN */
    }
    if (!same && bad++ < 8)
      fprintf(stderr, "MISMATCH %s: %s[%zu]: " GPU_NAME " %.9g, cpu %.9g\n", name, what, i, gv, cv);
  }
  if (bad)
    fail_msg("%s: %s: %zu of %zu values differ (tolerance %.1g)", name, what, bad, g->n, tol);
}

static void free_outs(Out* o, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(o[i].data);
}

/* --- BatchNormalization --------------------------------------------------------------- */

/* BatchNormalization (opset 15) over X of `dims`: training mode with the
 * running statistics, or inference mode. */
static void check_bn(const int64_t* dims, size_t rank, bool train, uint64_t seed) {
  uint64_t s = seed;
  const size_t n = count_of(dims, rank), c = (size_t)dims[1];
  float* x = malloc(n * sizeof *x);
  float p[4][64];
  assert_true(x && c <= 64);
  fill(x, n, &s, -2.0, 5.0);
  fill(p[0], c, &s, 0.5, 1.5);  /* scale */
  fill(p[1], c, &s, -0.5, 0.5); /* B */
  fill(p[2], c, &s, -1.0, 1.0); /* input_mean */
  fill(p[3], c, &s, 0.5, 2.0);  /* input_var */
  const int64_t cd = dims[1];
  static const char* const pn[4] = {"scale", "B", "mean", "var"};
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, (int)rank, dims);
  for (int i = 0; i < 4; i++)
    otm_input(m, pn[i], ONYX_ELEM_FLOAT32, 1, &cd);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, (int)rank, dims);
  if (train) {
    otm_output(m, "rm", ONYX_ELEM_FLOAT32, 1, &cd);
    otm_output(m, "rv", ONYX_ELEM_FLOAT32, 1, &cd);
  }
  OxTestNode* nd =
      otm_node(m, "BatchNormalization", "bn", "X,scale,B,mean,var", train ? "Y,rm,rv" : "Y");
  otm_attr_int(nd, "training_mode", train);
  otm_attr_float(nd, "momentum", 0.8f);
  otm_attr_float(nd, "epsilon", 1e-3f);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  const In in[5] = {{"X", x, rank, dims},
                    {"scale", p[0], 1, &cd},
                    {"B", p[1], 1, &cd},
                    {"mean", p[2], 1, &cd},
                    {"var", p[3], 1, &cd}};
  const char* outs[3] = {"Y", "rm", "rv"};
  const size_t n_out = train ? 3 : 1;
  Out g[3], cp[3];
  run_both(bytes, len, 1, in, 5, outs, n_out, g, cp);
  char name[96];
  snprintf(name, sizeof name, "BatchNormalization %s, X rank %zu (N %lld, C %lld)",
           train ? "training" : "inference", rank, (long long)dims[0], (long long)dims[1]);
  for (size_t o = 0; o < n_out; o++)
    compare(name, outs[o], &g[o], &cp[o], 1e-5);
  if (train) {
    /* The running mean by hand: mean * 0.8 + batch mean * 0.2. */
    const size_t sp = n / ((size_t)dims[0] * c);
    for (size_t ch = 0; ch < c; ch++) {
      double sum = 0;
      for (size_t b = 0; b < (size_t)dims[0]; b++)
        for (size_t i = 0; i < sp; i++)
          sum += x[(b * c + ch) * sp + i];
      const double want = p[2][ch] * 0.8 + sum / (double)(n / c) * 0.2;
      const double got = ((const float*)g[1].data)[ch];
      if (!(fabs(got - want) <= 1e-5 * (1 + fabs(want))))
        fail_msg("%s: running_mean[%zu] = %.9g, by hand %.9g", name, ch, got, want);
    }
  }
  free_outs(g, n_out);
  free_outs(cp, n_out);
  free(bytes);
  free(x);
}

static void test_batchnorm_training(void** state) {
  (void)state;
  gpu_required();
  static const int64_t d2[][2] = {{16, 5}, {1, 7}, {3, 1}};
  static const int64_t d4[][4] = {{2, 3, 4, 5}, {8, 16, 7, 7}, {1, 4, 1, 1}, {1, 3, 9, 2}};
  for (int train = 1; train >= 0; train--) {
    for (size_t i = 0; i < sizeof d2 / sizeof d2[0]; i++)
      check_bn(d2[i], 2, train, 100 + i);
    for (size_t i = 0; i < sizeof d4 / sizeof d4[0]; i++)
      check_bn(d4[i], 4, train, 200 + i);
  }
  static const int64_t d3[3] = {4, 6, 33}, d5[5] = {2, 3, 2, 3, 4};
  check_bn(d3, 3, true, 300);
  check_bn(d5, 5, true, 301);
}

/* --- MaxPool with Indices ---------------------------------------------------------------- */

typedef struct PoolCase {
  const char* name;
  size_t rank;
  int64_t x[5];
  int64_t k[3], s[3], d[3], p[6];
  bool strides, dils, pads, ceil, same_upper;
  int storage_order;
} PoolCase;

static void check_maxpool(const PoolCase* pc, uint64_t seed) {
  uint64_t s = seed;
  const size_t n = count_of(pc->x, pc->rank), sp = pc->rank - 2;
  float* x = malloc(n * sizeof *x);
  assert_non_null(x);
  fill(x, n, &s, -3.0, 3.0);
  /* Repeated values: ties go to the first in row-major window order. */
  for (size_t i = 0; i < n; i += 7)
    x[i] = 1.0f;
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, (int)pc->rank, pc->x);
  otm_output_s(m, "Y", ONYX_ELEM_FLOAT32, NULL);
  otm_output_s(m, "I", ONYX_ELEM_INT64, NULL);
  OxTestNode* nd = otm_node(m, "MaxPool", "mp", "X", "Y,I");
  otm_attr_ints(nd, "kernel_shape", sp, pc->k);
  if (pc->strides) otm_attr_ints(nd, "strides", sp, pc->s);
  if (pc->dils) otm_attr_ints(nd, "dilations", sp, pc->d);
  if (pc->pads) otm_attr_ints(nd, "pads", 2 * sp, pc->p);
  if (pc->ceil) otm_attr_int(nd, "ceil_mode", 1);
  if (pc->same_upper) otm_attr_string(nd, "auto_pad", "SAME_UPPER");
  if (pc->storage_order) otm_attr_int(nd, "storage_order", pc->storage_order);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  const In in[1] = {{"X", x, pc->rank, pc->x}};
  const char* outs[2] = {"Y", "I"};
  Out g[2], c[2];
  run_both(bytes, len, 1, in, 1, outs, 2, g, c);
  compare(pc->name, "Y", &g[0], &c[0], 0.0);
  compare(pc->name, "Indices", &g[1], &c[1], 0.0);
  free_outs(g, 2);
  free_outs(c, 2);
  free(bytes);
  free(x);
}

static void test_maxpool_indices(void** state) {
  (void)state;
  gpu_required();
  static const PoolCase cases[] = {
      {"2-D 3x3 stride 2 pads 1",
       4,
       {2, 3, 9, 8},
       {3, 3},
       {2, 2},
       {1, 1},
       {1, 1, 1, 1},
       true,
       false,
       true,
       false,
       false,
       0},
      {"2-D 2x2 stride 2",
       4,
       {3, 4, 8, 8},
       {2, 2},
       {2, 2},
       {1, 1},
       {0},
       true,
       false,
       false,
       false,
       false,
       0},
      {"1-D 3 stride 2", 3, {2, 3, 17}, {3}, {2}, {1}, {0}, true, false, false, false, false, 0},
      {"3-D 2x3x2",
       5,
       {1, 2, 5, 6, 4},
       {2, 3, 2},
       {1, 2, 2},
       {1, 1, 1},
       {0},
       true,
       false,
       false,
       false,
       false,
       0},
      {"2-D asymmetric pads",
       4,
       {1, 2, 7, 6},
       {3, 2},
       {2, 1},
       {1, 1},
       {0, 1, 2, 0},
       true,
       false,
       true,
       false,
       false,
       0},
      {"2-D dilations 2",
       4,
       {2, 2, 9, 9},
       {2, 3},
       {1, 2},
       {2, 2},
       {0},
       true,
       true,
       false,
       false,
       false,
       0},
      {"2-D ceil_mode",
       4,
       {1, 3, 8, 7},
       {3, 3},
       {2, 2},
       {1, 1},
       {0},
       true,
       false,
       false,
       true,
       false,
       0},
      {"2-D SAME_UPPER",
       4,
       {1, 2, 7, 5},
       {3, 2},
       {2, 2},
       {1, 1},
       {0},
       true,
       false,
       false,
       false,
       true,
       0},
      {"2-D storage_order 1",
       4,
       {2, 2, 6, 5},
       {2, 2},
       {2, 1},
       {1, 1},
       {0},
       true,
       false,
       false,
       false,
       false,
       1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_maxpool(&cases[i], 400 + i);
}

/* --- ConvGrad (cuDNN) -------------------------------------------------------------------- */

typedef struct ConvCase {
  const char* name;
  size_t rank;
  int64_t x[5], w[5];
  int64_t s[3], d[3], p[6];
  int64_t group;
} ConvCase;

/* Output sizes of a Conv with symmetric pads. */
static void conv_out(const ConvCase* cc, int64_t* yd) {
  yd[0] = cc->x[0];
  yd[1] = cc->w[0];
  for (size_t i = 2; i < cc->rank; i++) {
    const int64_t span = (cc->w[i] - 1) * cc->d[i - 2] + 1;
    yd[i] = (cc->x[i] + 2 * cc->p[i - 2] - span) / cc->s[i - 2] + 1;
  }
}

/* ConvGrad(dY, X, W) with the outputs `outs` wants ("dX,dW,dB", ",dW," ...). */
static void check_conv_grad(const ConvCase* cc, const char* outs_csv, uint64_t seed) {
  uint64_t s = seed;
  const size_t sp = cc->rank - 2;
  int64_t yd[5], bd = cc->w[0];
  conv_out(cc, yd);
  const size_t nx = count_of(cc->x, cc->rank), nw = count_of(cc->w, cc->rank);
  const size_t ny = count_of(yd, cc->rank);
  float* x = malloc(nx * sizeof *x);
  float* w = malloc(nw * sizeof *w);
  float* dy = malloc(ny * sizeof *dy);
  assert_true(x && w && dy);
  fill(x, nx, &s, -1.0, 1.0);
  fill(w, nw, &s, -0.5, 0.5);
  fill(dy, ny, &s, -1.0, 1.0);
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, TRAINING, 1);
  otm_input(m, "dY", ONYX_ELEM_FLOAT32, (int)cc->rank, yd);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, (int)cc->rank, cc->x);
  otm_input(m, "W", ONYX_ELEM_FLOAT32, (int)cc->rank, cc->w);
  const char* names[3] = {"dX", "dW", "dB"};
  const char* outs[3];
  size_t n_out = 0;
  for (int o = 0; o < 3; o++)
    if (strstr(outs_csv, names[o])) {
      outs[n_out++] = names[o];
      otm_output(m, names[o], ONYX_ELEM_FLOAT32, o == 2 ? 1 : (int)cc->rank,
                 o == 0   ? cc->x
                 : o == 1 ? cc->w
                          : &bd);
    }
  OxTestNode* nd = otm_node(m, "ConvGrad", "cg", "dY,X,W", outs_csv);
  otm_node_domain(nd, TRAINING);
  otm_attr_ints(nd, "kernel_shape", sp, cc->w + 2);
  otm_attr_ints(nd, "strides", sp, cc->s);
  otm_attr_ints(nd, "dilations", sp, cc->d);
  int64_t pads[6];
  for (size_t i = 0; i < sp; i++)
    pads[i] = pads[i + sp] = cc->p[i];
  otm_attr_ints(nd, "pads", 2 * sp, pads);
  otm_attr_int(nd, "group", cc->group);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  const In in[3] = {{"dY", dy, cc->rank, yd}, {"X", x, cc->rank, cc->x}, {"W", w, cc->rank, cc->w}};
  Out g[3], c[3];
  run_both(bytes, len, 1, in, 3, outs, n_out, g, c);
  char name[128];
  snprintf(name, sizeof name, "ConvGrad %s -> %s", cc->name, outs_csv);
  for (size_t o = 0; o < n_out; o++)
    compare(name, outs[o], &g[o], &c[o], 1e-4);
  free_outs(g, n_out);
  free_outs(c, n_out);
  free(bytes);
  free(x);
  free(w);
  free(dy);
}

static void test_conv_grad(void** state) {
  (void)state;
#ifdef GPU_IS_CUDA
  const bool cudnn = true;
#else
  const bool cudnn = false;
#endif
  if (!cudnn) {
    fprintf(stderr, "[  SKIP    ] ConvGrad runs on the GPU through cuDNN only (CUDA); " GPU_NAME
                    " leaves it to the CPU provider\n");
    skip();
    return;
  }
  gpu_required();
  static const ConvCase cases[] = {
      {"2-D 3x3 pads 1", 4, {2, 3, 8, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {"2-D stride 2", 4, {2, 4, 9, 10}, {6, 4, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1},
      {"2-D groups 2", 4, {2, 4, 7, 7}, {6, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2},
      {"2-D depthwise", 4, {1, 8, 6, 6}, {8, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 8},
      {"2-D dilation 2", 4, {1, 3, 11, 9}, {5, 3, 3, 2}, {1, 1}, {2, 2}, {2, 0}, 1},
      {"2-D 1x1", 4, {3, 16, 5, 5}, {8, 16, 1, 1}, {1, 1}, {1, 1}, {0, 0}, 1},
      {"1-D stride 2", 3, {2, 3, 20}, {4, 3, 5}, {2}, {1}, {2}, 1},
      {"3-D", 5, {1, 2, 5, 6, 4}, {3, 2, 3, 3, 2}, {1, 2, 1}, {1, 1, 1}, {1, 1, 0}, 1},
  };
  static const char* const which[] = {"dX,dW,dB", "dX", ",dW", ",,dB"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (size_t o = 0; o < sizeof which / sizeof which[0]; o++)
      check_conv_grad(&cases[i], which[o], 500 + 10 * i + o);
}

/* --- Shape and Size of a GPU tensor ------------------------------------------------------ */

/* Relu -> Shape (whole, and opset 15's start / end) and Size: all on
 * GPU_NAME (the Shapes and Size follow their GPU producer), the results
 * against the dims written here and the CPU provider's. */
static void test_shape_size(void** state) {
  (void)state;
  gpu_required();
  static const int64_t xd[4] = {2, 3, 5, 7};
  float x[210];
  uint64_t s = 77;
  fill(x, 210, &s, -1.0, 1.0);
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, xd);
  otm_output_s(m, "s_all", ONYX_ELEM_INT64, NULL);
  otm_output_s(m, "s_mid", ONYX_ELEM_INT64, NULL);
  otm_output_s(m, "s_none", ONYX_ELEM_INT64, NULL);
  otm_output_s(m, "n", ONYX_ELEM_INT64, NULL);
  otm_node(m, "Relu", "relu", "X", "r");
  otm_node(m, "Shape", "shape_all", "r", "s_all");
  OxTestNode* nd = otm_node(m, "Shape", "shape_mid", "r", "s_mid");
  otm_attr_int(nd, "start", -3);
  otm_attr_int(nd, "end", 3);
  nd = otm_node(m, "Shape", "shape_none", "r", "s_none");
  otm_attr_int(nd, "start", 3);
  otm_attr_int(nd, "end", 1);
  otm_node(m, "Size", "size", "r", "n");
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  const In in[1] = {{"X", x, 4, xd}};
  const char* outs[4] = {"s_all", "s_mid", "s_none", "n"};
  Out g[4], c[4];
  run_both(bytes, len, 5, in, 1, outs, 4, g, c);
  for (int o = 0; o < 4; o++)
    compare("Shape / Size", outs[o], &g[o], &c[o], 0.0);
  const int64_t* all = g[0].data;
  const int64_t* mid = g[1].data;
  assert_int_equal(g[0].n, 4);
  for (int i = 0; i < 4; i++)
    assert_int_equal(all[i], xd[i]);
  assert_int_equal(g[1].n, 2);
  assert_int_equal(mid[0], 3);
  assert_int_equal(mid[1], 5);
  assert_int_equal(g[2].n, 0);
  assert_int_equal(g[3].n, 1);
  assert_int_equal(*(const int64_t*)g[3].data, 210);
  free_outs(g, 4);
  free_outs(c, 4);
  free(bytes);
}

/* --- a view of GPU data with a shape from the host ----------------------------------------- */

/* Relu -> Reshape(r, shape) with the shape a graph input (int64, host
 * memory): the Reshape is taken by GPU_NAME with the Relu, its data never
 * leaving the device (2 nodes there), and gives the Relu's values. */
static void test_view_shape_from_host(void** state) {
  (void)state;
  gpu_required();
  static const int64_t xd[2] = {4, 6}, two = 2, want_dims[2] = {3, 8};
  float x[24];
  uint64_t s = 5;
  fill(x, 24, &s, -1.0, 1.0);
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, xd);
  otm_input(m, "shape", ONYX_ELEM_INT64, 1, &two);
  otm_output_s(m, "Y", ONYX_ELEM_FLOAT32, NULL);
  otm_node(m, "Relu", "relu", "X", "r");
  otm_node(m, "Reshape", "view", "r,shape", "Y");
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* ss = open_session(bytes, len, true, 2);
  OnyxValue* v[2] = {NULL};
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, xd, 2, x, sizeof x, &v[0]));
  ok(onyx_value_create_tensor(ONYX_ELEM_INT64, &two, 1, want_dims, sizeof want_dims, &v[1]));
  const char* names[2] = {"X", "shape"};
  const char* out = "Y";
  OnyxValue* y = NULL;
  ok(onyx_session_run(ss, NULL, names, (const OnyxValue* const*)v, 2, &out, 1, &y));
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_rank(t), 2);
  assert_int_equal(onyx_tensor_dims(t)[0], 3);
  assert_int_equal(onyx_tensor_dims(t)[1], 8);
  const float* yd = onyx_tensor_data(t);
  for (size_t i = 0; i < 24; i++)
    if (yd[i] != (x[i] > 0 ? x[i] : 0.0f))
      fail_msg("Y[%zu] = %.9g, Relu(X) = %.9g", i, yd[i], x[i] > 0 ? x[i] : 0.0);
  onyx_value_release(y);
  onyx_value_release(v[0]);
  onyx_value_release(v[1]);
  onyx_session_release(ss);
  free(bytes);
}

/* --- Sum ---------------------------------------------------------------------------------- */

/* Sum of 1, 2 and 3 inputs (the last with broadcasting), GPU against the
 * CPU provider and against the sums written here. */
static void test_sum(void** state) {
  (void)state;
  gpu_required();
  static const int64_t ad[3] = {2, 3, 4}, bd[2] = {3, 4}, cd[3] = {2, 1, 4};
  float a[24], b[12], c[8];
  uint64_t s = 31;
  fill(a, 24, &s, -2.0, 2.0);
  fill(b, 12, &s, -2.0, 2.0);
  fill(c, 8, &s, -2.0, 2.0);
  for (int n = 1; n <= 3; n++) {
    OxTestModel* m = otm_new(17);
    otm_input(m, "A", ONYX_ELEM_FLOAT32, 3, ad);
    if (n > 1) otm_input(m, "B", ONYX_ELEM_FLOAT32, 3, n == 2 ? cd : ad);
    if (n > 2) otm_input(m, "C", ONYX_ELEM_FLOAT32, 2, bd);
    otm_output_s(m, "Y", ONYX_ELEM_FLOAT32, NULL);
    otm_node(m, "Sum", "sum", n == 1 ? "A" : n == 2 ? "A,B" : "A,B,C", "Y");
    uint8_t* bytes = NULL;
    size_t len = 0;
    otm_serialize(m, &bytes, &len);
    otm_free(m);
    /* n 2: B is c [2, 1, 4]; n 3: B is a itself and C is b [3, 4]. */
    const In in[3] = {{"A", a, 3, ad}, {"B", n == 2 ? c : a, 3, n == 2 ? cd : ad}, {"C", b, 2, bd}};
    const char* out = "Y";
    Out g, cp;
    run_both(bytes, len, 1, in, (size_t)n, &out, 1, &g, &cp);
    compare("Sum", "Y", &g, &cp, 0.0);
    assert_int_equal(g.n, 24);
    for (size_t i = 0; i < 24; i++) {
      const size_t i0 = i / 12, i1 = (i / 4) % 3, i2 = i % 4;
      const float want = n == 1   ? a[i]
                         : n == 2 ? a[i] + c[i0 * 4 + i2]
                                  : (a[i] + a[i]) + b[i1 * 4 + i2];
      if (((const float*)g.data)[i] != want)
        fail_msg("Sum of %d: Y[%zu] = %.9g, by hand %.9g", n, i, ((const float*)g.data)[i],
                 (double)want);
    }
    free(g.data);
    free(cp.data);
    free(bytes);
  }
}

/* --- a CNN's training model: placement ------------------------------------------------------ */

static int rm_entry(const char* p, const struct stat* sb, int flag, struct FTW* f) {
  (void)sb;
  (void)flag;
  (void)f;
  return remove(p);
}

/* How many node lines of `text` have op `op`, and how many of them end in
 * "-> GPU_NAME". */
static size_t placed(const char* text, const char* op, size_t* here) {
  char pat[64];
  snprintf(pat, sizeof pat, " %s ", op);
  size_t n = 0;
  *here = 0;
  for (const char* p = strstr(text, pat); p; p = strstr(p + 1, pat)) {
    const char* eol = strchr(p, '\n');
    const char* arrow = strstr(p, "-> ");
    if (!arrow || (eol && arrow > eol)) continue; /* not a node line */
    n++;
    if (!strncmp(arrow + 3, GPU_NAME, strlen(GPU_NAME))) (*here)++;
  }
  return n;
}

/* x[N, 3, 8, 8] -> Conv 3x3 (8) -> BatchNormalization -> Relu -> MaxPool
 * 2x2 -> Conv 3x3 (8), then (residual 0) GlobalAveragePool -> Flatten, or
 * (residual 1, the form of scripts/train_peer.py's ResNet) BatchNormalization
 * -> Add the MaxPool's output -> Relu -> ReduceMean over H and W, then
 * Gemm -> logits [N, 4], trained with cross-entropy and SGD. */
static void check_cnn_placement(bool residual) {
  char dir[] = "/tmp/onyx_gpu_cnn_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char model[600], art[600], path[700];
  snprintf(model, sizeof model, "%s/cnn.onnx", dir);
  OxTestModel* m = otm_new(17);
  otm_input_s(m, "x", ONYX_ELEM_FLOAT32, "N,3,8,8");
  otm_output_s(m, "logits", ONYX_ELEM_FLOAT32, "N,4");
  float buf[8 * 8 * 9];
  uint64_t s = 9;
  static const int64_t w0[4] = {8, 3, 3, 3}, w1[4] = {8, 8, 3, 3}, c8 = 8, wf[2] = {8, 4};
  static const int64_t four = 4;
  fill(buf, 8 * 3 * 9, &s, -0.3, 0.3);
  otm_initializer(m, "w0", ONYX_ELEM_FLOAT32, 4, w0, buf);
  fill(buf, 8 * 8 * 9, &s, -0.2, 0.2);
  otm_initializer(m, "w1", ONYX_ELEM_FLOAT32, 4, w1, buf);
  fill(buf, 8, &s, -0.1, 0.1);
  otm_initializer(m, "b0", ONYX_ELEM_FLOAT32, 1, &c8, buf);
  otm_initializer(m, "b1", ONYX_ELEM_FLOAT32, 1, &c8, buf);
  for (int b = 0; b < 2; b++) {
    static const char* const names[2][4] = {{"bn_b", "bn_m", "bn_s", "bn_v"},
                                            {"bn1_b", "bn1_m", "bn1_s", "bn1_v"}};
    fill(buf, 8, &s, -0.1, 0.1);
    otm_initializer(m, names[b][0], ONYX_ELEM_FLOAT32, 1, &c8, buf);
    otm_initializer(m, names[b][1], ONYX_ELEM_FLOAT32, 1, &c8, buf);
    fill(buf, 8, &s, 0.8, 1.2);
    otm_initializer(m, names[b][2], ONYX_ELEM_FLOAT32, 1, &c8, buf);
    otm_initializer(m, names[b][3], ONYX_ELEM_FLOAT32, 1, &c8, buf);
  }
  fill(buf, 32, &s, -0.3, 0.3);
  otm_initializer(m, "wf", ONYX_ELEM_FLOAT32, 2, wf, buf);
  otm_initializer(m, "bf", ONYX_ELEM_FLOAT32, 1, &four, buf);
  static const int64_t k3[2] = {3, 3}, p1[4] = {1, 1, 1, 1}, k2[2] = {2, 2};
  OxTestNode* nd = otm_node(m, "Conv", "conv0", "x,w0,b0", "c0");
  otm_attr_ints(nd, "kernel_shape", 2, k3);
  otm_attr_ints(nd, "pads", 4, p1);
  otm_node(m, "BatchNormalization", "bn0", "c0,bn_s,bn_b,bn_m,bn_v", "n0");
  otm_node(m, "Relu", "relu0", "n0", "r0");
  nd = otm_node(m, "MaxPool", "pool0", "r0", "p0");
  otm_attr_ints(nd, "kernel_shape", 2, k2);
  otm_attr_ints(nd, "strides", 2, k2);
  nd = otm_node(m, "Conv", "conv1", "p0,w1,b1", "c1");
  otm_attr_ints(nd, "kernel_shape", 2, k3);
  otm_attr_ints(nd, "pads", 4, p1);
  if (residual) {
    static const int64_t hw[2] = {2, 3};
    otm_node(m, "BatchNormalization", "bn1", "c1,bn1_s,bn1_b,bn1_m,bn1_v", "n1");
    otm_node(m, "Add", "res", "n1,p0", "a1");
    otm_node(m, "Relu", "relu1", "a1", "r1");
    nd = otm_node(m, "ReduceMean", "mean", "r1", "f");
    otm_attr_ints(nd, "axes", 2, hw);
    otm_attr_int(nd, "keepdims", 0);
  } else {
    otm_node(m, "GlobalAveragePool", "gap", "c1", "g");
    otm_node(m, "Flatten", "flat", "g", "f");
  }
  otm_node(m, "Gemm", "fc", "f,wf,bf", "logits");
  assert_true(otm_write(m, model));
  otm_free(m);
  OnyxTrainingArtifactsOptions ao;
  onyx_training_artifacts_options_init(&ao);
  ao.loss = ONYX_LOSS_CROSS_ENTROPY;
  ao.optimizer = ONYX_OPTIMIZER_SGD;
  snprintf(art, sizeof art, "%s/art", dir);
  ok(onyx_training_artifacts_generate(model, &ao, art));
  snprintf(path, sizeof path, "%s/training_model.onnx", art);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  const char* cfg = "{\"providers\": [{\"name\": \"" GPU_NAME "\"}, {\"name\": \"cpu\"}]}";
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "cnn.json"));
  OnyxSession* ss = NULL;
  ok(onyx_session_create(o, path, &ss));
  onyx_session_options_release(o);
  char* text = NULL;
  ok(onyx_session_explain(ss, &text));
  onyx_session_release(ss);
  fprintf(stderr, "CNN (%s) training model on " GPU_NAME " + cpu:\n%s\n",
          residual ? "residual, ReduceMean" : "GlobalAveragePool", text);
  static const char* const on_gpu[] = {"BatchNormalization",
                                       "BatchNormalizationGrad",
                                       "MaxPool",
                                       "MaxPoolGrad",
                                       "ReluGrad",
#ifdef GPU_IS_CUDA
                                       "Conv",
                                       "ConvGrad"
#endif
  };
  /* The residual form also sums the MaxPool output's two gradients (Sum)
   * and averages with ReduceMean. */
  static const char* const on_gpu_res[] = {"Sum", "ReduceMean"};
  const size_t n_main = sizeof on_gpu / sizeof on_gpu[0];
  for (size_t i = 0; i < n_main + (residual ? 2 : 0); i++) {
    const char* op = i < n_main ? on_gpu[i] : on_gpu_res[i - n_main];
    size_t here = 0;
    const size_t n = placed(text, op, &here);
    if (!n || here != n)
      fail_msg("%zu of %zu %s nodes on " GPU_NAME " (all expected):\n%s", here, n, op, text);
  }
  onyx_free(text);
  assert_int_equal(nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS), 0);
}

static void test_cnn_training_placement(void** state) {
  (void)state;
  gpu_required();
  check_cnn_placement(false);
  check_cnn_placement(true);
}

const struct CMUnitTest* gpu_grad_conv_tests(size_t* n) {
  static const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_batchnorm_training),
      cmocka_unit_test(test_maxpool_indices),
      cmocka_unit_test(test_conv_grad),
      cmocka_unit_test(test_shape_size),
      cmocka_unit_test(test_sum),
      cmocka_unit_test(test_view_shape_from_host),
      cmocka_unit_test(test_cnn_training_placement),
  };
  *n = sizeof tests / sizeof tests[0];
  return tests;
}
