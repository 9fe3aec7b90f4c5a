/* test_opt_qdq.c — the "qdq" fusion (host/optimizer/opt_qdq.c): QDQ models
 * built here become QLinearConv / QLinearMatMul on the CPU provider
 * (`explain` names the qdq pass), and their uint8 outputs are within one
 * quantization step of a reference computed here in plain C (quantize,
 * dequantize, the float op in double, quantize again, rounding half to
 * even) and of the same model run unoptimized. Malformed QDQ (a scale that
 * is no constant, a negative scale, per-channel scales on the input-channel
 * axis, a bias scale other than x_scale * w_scale, a Relu the Q's zero point
 * does not make a clamp, a Conv output read elsewhere) stays unfused and
 * still runs, its DequantizeLinear nodes of valid constants folded. With
 * another provider first that takes the Conv or the Mul (and has no
 * quantized kernels), nothing fuses across the two. A zero point of another type than
 * its DequantizeLinear's input is refused at session creation, naming the
 * node. QDQ Add, Mul and GlobalAveragePool become com.microsoft ops only
 * where the provider has them (the CPU provider has QLinearMul); either way
 * the outputs match. A QDQ MaxPool whose Q and DQ share scale and zero point
 * becomes MaxPool on the uint8 values, exactly; otherwise it stays. A chain
 * of quantized convs, a residual QLinearAdd, a MaxPool and a
 * GlobalAveragePool runs channels-last (qdq_layout) with the same output as
 * NCHW. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "ox_session.h"
#include "ox_test_models.h"

enum { C_IN = 3, C_OUT = 4, H = 5, W = 4, K = 3 }; /* pads 1: Y is [1, 4, 5, 4] */
enum { MM = 6, MK = 10, MN = 5 };                  /* MatMul: [6, 10] x [10, 5] */

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

/* Every node of op `op` runs on the CPU provider. */
static void on_cpu(const OnyxSession* s, const char* op) {
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
    const OxNode* n = s->prog.graph->nodes[i];
    if (strcmp(n->op_type, op)) continue;
    assert_true(n->ep >= 0);
    assert_string_equal(s->prog.eps[n->ep].name, "cpu");
  }
}

typedef struct Feed {
  const char* name;
  const float* data;
  int64_t dims[4];
  size_t rank;
} Feed;

/* Runs s on the feeds; the uint8 output "Y" (count values) into out. */
static void run(OnyxSession* s, const Feed* feeds, size_t n_feeds, uint8_t* out, size_t count) {
  OnyxValue* in[2] = {NULL, NULL};
  const char* names[2];
  for (size_t i = 0; i < n_feeds; i++) {
    size_t n = 1;
    for (size_t d = 0; d < feeds[i].rank; d++)
      n *= (size_t)feeds[i].dims[d];
    assert_null(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, feeds[i].dims, feeds[i].rank,
                                         feeds[i].data, n * sizeof(float), &in[i]));
    names[i] = feeds[i].name;
  }
  const char* y_name = "Y";
  OnyxValue* y = NULL;
  OnyxStatus* st =
      onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, n_feeds, &y_name, 1, &y);
  if (st) fail_msg("run: %s", onyx_status_message(st));
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_elem_type(t), ONYX_ELEM_UINT8);
  assert_int_equal(onyx_tensor_elem_count(t), count);
  memcpy(out, onyx_tensor_data(t), count);
  onyx_value_release(y);
  for (size_t i = 0; i < n_feeds; i++)
    onyx_value_release(in[i]);
}

/* QuantizeLinear to uint8 as ONNX defines it: x / scale rounded half to
 * even, plus the zero point, saturated. */
static int quant_u8(double x, double scale, int zp) {
  double q = nearbyint(x / scale) + zp;
  return q < 0 ? 0 : q > 255 ? 255 : (int)q;
}

static int quant_i8(double x, double scale) {
  double q = nearbyint(x / scale);
  return q < -127 ? -127 : q > 127 ? 127 : (int)q;
}

/* The optimized session's output y against the reference and the
 * unoptimized run: at most one step apart. */
static void check_close(const char* what, int mode, const uint8_t* y, const uint8_t* plain,
                        const int* ref, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (abs((int)y[i] - ref[i]) > 1)
      fail_msg("%s mode %d, Y[%zu]: %d, reference %d", what, mode, i, y[i], ref[i]);
    if (abs((int)y[i] - (int)plain[i]) > 1)
      fail_msg("%s mode %d, Y[%zu]: %d, unoptimized %d", what, mode, i, y[i], plain[i]);
  }
}

static bool explain_has(OnyxSession* s, const char* what) {
  char* text = NULL;
  assert_null(onyx_session_explain(s, &text));
  const bool has = strstr(text, what) != NULL;
  onyx_free(text);
  return has;
}

/* --- another provider first ---------------------------------------------------------------------
 * "convprov": an in-process provider with float32 Conv, Mul and MaxPool kernels
 * (never run: the test only looks at the optimized graph), standing for a
 * GPU provider without quantized kernels. Placed first, it takes the Conv
 * (the Mul); the Q, DQ and Relu nodes go to the CPU provider, and no fusion
 * spans the two. */
static const OnyxHostApi* own_host;
static const int32_t own_f32[] = {ONYX_ELEM_FLOAT32};
static const OnyxTypeConstraint own_T[] = {{"T", own_f32, 1}};

static OnyxStatus* own_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  (void)ctx;
  return own_host->status_create(ONYX_NOT_IMPLEMENTED, "convprov: not run in these tests");
}

static OnyxStatus* own_kernels(const OnyxProvider* p, OnyxKernelRegistry* r) {
  (void)p;
  OnyxKernelDef d = {.struct_size = sizeof d,
                     .domain = "",
                     .op_type = "Conv",
                     .since_version = 1,
                     .end_version = ONYX_OPSET_LATEST,
                     .type_constraints = own_T,
                     .type_constraint_count = 1,
                     .compute = own_compute};
  OnyxStatus* st = own_host->register_kernel(r, &d);
  d.op_type = "Mul";
  st = st ? st : own_host->register_kernel(r, &d);
  d.op_type = "MaxPool";
  return st ? st : own_host->register_kernel(r, &d);
}

static OnyxStatus* own_count(const OnyxProvider* p, size_t* n) {
  (void)p;
  *n = 1;
  return NULL;
}

static void own_ep_release(OnyxEp* ep) {
  (void)ep;
}

static OnyxStatus* own_create(const OnyxProvider* p, const OnyxEpCreateArgs* a, OnyxEp** out) {
  (void)a;
  static OnyxEp ep = {.struct_size = sizeof ep, .release = own_ep_release};
  ep.provider = p;
  *out = &ep;
  return NULL;
}

static const OnyxProvider own_provider = {.struct_size = sizeof own_provider,
                                          .abi_major = ONYX_ABI_VERSION_MAJOR,
                                          .abi_minor = ONYX_ABI_VERSION_MINOR,
                                          .name = "convprov",
                                          .vendor = "test",
                                          .version = "1",
                                          .device_count = own_count,
                                          .register_kernels = own_kernels,
                                          .create_ep = own_create};

static OnyxStatus* own_init(const OnyxHostApi* host, const OnyxProvider** out) {
  own_host = host;
  *out = &own_provider;
  return NULL;
}

/* convprov first, then the CPU provider: a session for the model in bytes. */
static OnyxSession* open_convprov(const uint8_t* bytes, size_t len) {
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  assert_null(onyx_session_options_add_provider_init(o, "convprov", own_init, 1));
  assert_null(onyx_session_options_add_provider(o, "cpu", NULL, 0, 1));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  if (st) fail_msg("session: %s", onyx_status_message(st));
  onyx_session_options_release(o);
  return s;
}

/* The QDQ Mul model in bytes, with convprov first: the Mul stays there as
 * it is, its Q and DQ nodes on the CPU provider, no QLinearMul. */
static void check_convprov_mul(const uint8_t* bytes, size_t len) {
  OnyxSession* s = open_convprov(bytes, len);
  assert_int_equal(count_op(s, "QLinearMul"), 0);
  assert_int_equal(count_op(s, "Mul"), 1);
  assert_int_equal(count_op(s, "QuantizeLinear"), 3);
  assert_int_equal(count_op(s, "DequantizeLinear"), 2);
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
    const OxNode* n = s->prog.graph->nodes[i];
    assert_true(n->ep >= 0);
    assert_string_equal(s->prog.eps[n->ep].name, !strcmp(n->op_type, "Mul") ? "convprov" : "cpu");
  }
  assert_false(explain_has(s, "made by qdq"));
  onyx_session_release(s);
}

/* The model in bytes, with convprov first: the Conv stays there, unfused. */
static void check_convprov(const uint8_t* bytes, size_t len) {
  OnyxSession* s = open_convprov(bytes, len);
  assert_int_equal(count_op(s, "QLinearConv"), 0);
  assert_int_equal(count_op(s, "Conv"), 1);
  assert_int_equal(count_op(s, "QuantizeLinear"), 2);
  assert_int_equal(count_op(s, "DequantizeLinear"), 1); /* W's and B's folded */
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
    const OxNode* n = s->prog.graph->nodes[i];
    assert_true(n->ep >= 0);
    assert_string_equal(s->prog.eps[n->ep].name, !strcmp(n->op_type, "Conv") ? "convprov" : "cpu");
  }
  assert_false(explain_has(s, "made by qdq"));
  onyx_session_release(s);
}

/* --- Conv ------------------------------------------------------------------------------------
 * mode 0: per-channel weights, int32 bias, Relu, y zero point 0 (fused, the
 *         Relu folded);
 * mode 1: one weight scale, no bias, no Relu, y zero point 128 (fused);
 * mode 2: Relu with y zero point 10 (the Relu is no clamp there: unfused);
 * mode 3: the weight scale is a graph input (unfused);
 * mode 4: per-channel scales along W's axis 1, the input channels (unfused);
 * mode 5: the bias scale is twice x_scale * w_scale (unfused);
 * mode 6: the Conv's float output is a graph output too (unfused);
 * mode 7: one weight scale is negative (unfused);
 * mode 8: the weight zero point is uint8, the weights int8: no valid
 *         DequantizeLinear; session creation fails naming the node. */
static void conv_case(int mode, bool convprov) {
  const bool relu = mode == 0 || mode == 2;
  const bool bias = mode != 1;
  const bool per_channel = mode != 1;
  const int y_zp = mode == 1 ? 128 : mode == 2 ? 10 : 0;
  const size_t n_ws = !per_channel ? 1 : mode == 4 ? C_IN : C_OUT;
  const float xs = 0.02f, ys = mode == 1 ? 0.05f : 0.03f;
  const int x_zp = 120;
  float x[C_IN * H * W], wf[C_OUT * C_IN * K * K], bf[C_OUT], ws[C_OUT], bs[C_OUT];
  fill(x, C_IN * H * W, 13, 2.0f);
  fill(wf, C_OUT * C_IN * K * K, 7, 0.5f);
  fill(bf, C_OUT, 11, 0.3f);
  for (size_t c = 0; c < n_ws; c++)
    ws[c] = 0.004f + 0.001f * (float)c;
  if (mode == 7) ws[1] = -ws[1];
  int8_t wq[C_OUT * C_IN * K * K];
  for (int o = 0; o < C_OUT; o++)
    for (int ci = 0; ci < C_IN; ci++)
      for (int k = 0; k < K * K; k++) {
        const size_t at = ((size_t)o * C_IN + ci) * K * K + k;
        const size_t c = !per_channel ? 0 : mode == 4 ? (size_t)ci : (size_t)o;
        wq[at] = (int8_t)quant_i8(wf[at], fabsf(ws[c]));
      }
  int32_t bq[C_OUT], bzp[C_OUT] = {0};
  for (int o = 0; o < C_OUT; o++) {
    bs[o] = xs * ws[mode == 4 ? 0 : o] * (mode == 5 ? 2.0f : 1.0f);
    bq[o] = (int32_t)nearbyint(bf[o] / bs[o]);
  }
  int8_t wzp[C_OUT] = {0};
  const uint8_t xzp = (uint8_t)x_zp, yzp = (uint8_t)y_zp;

  OxTestModel* m = otm_new(13);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, C_IN, H, W});
  const int64_t nd[1] = {(int64_t)n_ws};
  if (mode == 3)
    otm_input(m, "ws", ONYX_ELEM_FLOAT32, 1, nd);
  else
    otm_initializer(m, "ws", ONYX_ELEM_FLOAT32, per_channel ? 1 : 0, nd, ws);
  otm_initializer(m, "xs", ONYX_ELEM_FLOAT32, 0, NULL, &xs);
  otm_initializer(m, "xzp", ONYX_ELEM_UINT8, 0, NULL, &xzp);
  otm_initializer(m, "ys", ONYX_ELEM_FLOAT32, 0, NULL, &ys);
  otm_initializer(m, "yzp", ONYX_ELEM_UINT8, 0, NULL, &yzp);
  otm_initializer(m, "Wq", ONYX_ELEM_INT8, 4, (int64_t[]){C_OUT, C_IN, K, K}, wq);
  otm_initializer(m, "wzp", mode == 8 ? ONYX_ELEM_UINT8 : ONYX_ELEM_INT8, per_channel ? 1 : 0, nd,
                  wzp);
  otm_node(m, "QuantizeLinear", "qx", "X,xs,xzp", "XQ");
  otm_node(m, "DequantizeLinear", "dqx", "XQ,xs,xzp", "XD");
  OxTestNode* dqw = otm_node(m, "DequantizeLinear", "dqw", "Wq,ws,wzp", "WD");
  if (per_channel) otm_attr_int(dqw, "axis", mode == 4 ? 1 : 0);
  if (bias) {
    const int64_t bd[1] = {C_OUT};
    otm_initializer(m, "Bq", ONYX_ELEM_INT32, 1, bd, bq);
    otm_initializer(m, "bs", ONYX_ELEM_FLOAT32, 1, bd, bs);
    otm_initializer(m, "bzp", ONYX_ELEM_INT32, 1, bd, bzp);
    otm_attr_int(otm_node(m, "DequantizeLinear", "dqb", "Bq,bs,bzp", "BD"), "axis", 0);
  }
  OxTestNode* c = otm_node(m, "Conv", "conv", bias ? "XD,WD,BD" : "XD,WD", "C");
  otm_attr_ints(c, "pads", 4, (int64_t[]){1, 1, 1, 1});
  if (relu) otm_node(m, "Relu", "relu", "C", "R");
  otm_node(m, "QuantizeLinear", "qy", relu ? "R,ys,yzp" : "C,ys,yzp", "Y");
  const int64_t ydims[4] = {1, C_OUT, H, W};
  otm_output(m, "Y", ONYX_ELEM_UINT8, 4, ydims);
  if (mode == 6) otm_output(m, "C", ONYX_ELEM_FLOAT32, 4, ydims);
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  if (mode == 8) {
    OnyxSessionOptions* o = NULL;
    assert_null(onyx_session_options_create(&o));
    OnyxSession* bad = NULL;
    OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &bad);
    assert_non_null(st);
    assert_null(bad);
    const char* msg = onyx_status_message(st);
    if (!strstr(msg, "dqw") || !strstr(msg, "wzp")) fail_msg("error: %s", msg);
    onyx_status_release(st);
    onyx_session_options_release(o);
    free(bytes);
    return;
  }

  if (convprov) {
    check_convprov(bytes, len);
    free(bytes);
    return;
  }
  OnyxSession* s = open_at(bytes, len, ONYX_OPT_ALL);
  const bool fused = mode <= 1;
  assert_int_equal(count_op(s, "QLinearConv"), fused ? 1 : 0);
  assert_int_equal(count_op(s, "Conv") + count_op(s, "FusedConv"), fused ? 0 : 1);
  if (fused) assert_int_equal(count_op(s, "Relu") + count_op(s, "DequantizeLinear"), 0);
  /* Unfused, the DequantizeLinear of constant weights and bias fold into
   * float constants (X's stays): all but a weight scale from a graph input
   * (mode 3) and the negative scales of mode 7 (the weight's and the bias'). */
  if (!fused) assert_int_equal(count_op(s, "DequantizeLinear"), mode == 3 ? 2 : mode == 7 ? 3 : 1);
  assert_int_equal(count_op(s, "QuantizeLinear"), fused ? 1 : 2); /* X's stays */
  assert_int_equal(explain_has(s, "made by qdq"), fused);
  on_cpu(s, "QLinearConv");

  /* The reference: X quantized and dequantized, W and B dequantized, Conv
   * (pads 1) in double, Relu, quantized. */
  enum { N = C_OUT * H * W };
  int ref[N];
  for (int o = 0; o < C_OUT; o++)
    for (int i = 0; i < H; i++)
      for (int j = 0; j < W; j++) {
        double acc = bias ? (double)bq[o] * bs[o] : 0.0;
        for (int ci = 0; ci < C_IN; ci++)
          for (int ki = 0; ki < K; ki++)
            for (int kj = 0; kj < K; kj++) {
              const int ii = i + ki - 1, jj = j + kj - 1;
              if (ii < 0 || ii >= H || jj < 0 || jj >= W) continue;
              const double xd = (quant_u8(x[(ci * H + ii) * W + jj], xs, x_zp) - x_zp) * (double)xs;
              const size_t at = ((size_t)(o * C_IN + ci) * K + ki) * K + kj;
              const size_t cw = !per_channel ? 0 : mode == 4 ? (size_t)ci : (size_t)o;
              acc += xd * wq[at] * (double)ws[cw];
            }
        if (relu && acc < 0) acc = 0;
        ref[(o * H + i) * W + j] = quant_u8(acc, ys, y_zp);
      }
  Feed feeds[2] = {{"X", x, {1, C_IN, H, W}, 4}, {"ws", ws, {(int64_t)n_ws}, 1}};
  const size_t n_feeds = mode == 3 ? 2 : 1;
  uint8_t y[N], yp[N];
  run(s, feeds, n_feeds, y, N);
  OnyxSession* plain = open_at(bytes, len, ONYX_OPT_DISABLED);
  run(plain, feeds, n_feeds, yp, N);
  check_close("conv", mode, y, yp, ref, N);
  onyx_session_release(plain);
  onyx_session_release(s);
  free(bytes);
}

static void test_conv_fused(void** state) {
  (void)state;
  conv_case(0, false);
  conv_case(1, false);
}

static void test_conv_other_provider(void** state) {
  (void)state;
  conv_case(0, true);
}

static void test_conv_left_alone(void** state) {
  (void)state;
  for (int mode = 2; mode <= 8; mode++)
    conv_case(mode, false);
}

/* --- MatMul and Gemm ---------------------------------------------------------------------------
 * mode 0: MatMul, B [K, N] per column (axis 1): QLinearMatMul;
 * mode 1: Gemm transB 1, B [N, K] per row (axis 0): QLinearMatMul on B^T;
 * mode 2: Gemm with a bias C: unfused;
 * mode 3: MatMul of two activations (per tensor each): QLinearMatMul. */
static void matmul_case(int mode) {
  const bool gemm = mode == 1 || mode == 2;
  const bool tb = mode >= 1 && mode <= 2;
  const float as = 0.015f, ys = 0.04f, bs2 = 0.01f;
  const int a_zp = 100, y_zp = 90, b2_zp = 130;
  float a[MM * MK], bf[MK * MN], b2[MK * MN], ws[MN], cf[MN];
  fill(a, MM * MK, 3, 1.5f);
  fill(bf, MK * MN, 5, 0.6f);
  fill(b2, MK * MN, 9, 1.2f);
  fill(cf, MN, 17, 0.5f);
  for (int j = 0; j < MN; j++)
    ws[j] = 0.003f + 0.0007f * (float)j;
  int8_t bq[MK * MN]; /* [K, N], or [N, K] with transB */
  for (int k = 0; k < MK; k++)
    for (int j = 0; j < MN; j++)
      bq[tb ? j * MK + k : k * MN + j] = (int8_t)quant_i8(bf[k * MN + j], ws[j]);
  int8_t wzp[MN] = {0};
  const uint8_t azp = (uint8_t)a_zp, yzp = (uint8_t)y_zp, b2zp = (uint8_t)b2_zp;

  OxTestModel* m = otm_new(13);
  otm_input(m, "A", ONYX_ELEM_FLOAT32, 2, (int64_t[]){MM, MK});
  otm_initializer(m, "as", ONYX_ELEM_FLOAT32, 0, NULL, &as);
  otm_initializer(m, "azp", ONYX_ELEM_UINT8, 0, NULL, &azp);
  otm_initializer(m, "ys", ONYX_ELEM_FLOAT32, 0, NULL, &ys);
  otm_initializer(m, "yzp", ONYX_ELEM_UINT8, 0, NULL, &yzp);
  otm_node(m, "QuantizeLinear", "qa", "A,as,azp", "AQ");
  otm_node(m, "DequantizeLinear", "dqa", "AQ,as,azp", "AD");
  if (mode == 3) {
    otm_input(m, "B", ONYX_ELEM_FLOAT32, 2, (int64_t[]){MK, MN});
    otm_initializer(m, "bs", ONYX_ELEM_FLOAT32, 0, NULL, &bs2);
    otm_initializer(m, "bzp", ONYX_ELEM_UINT8, 0, NULL, &b2zp);
    otm_node(m, "QuantizeLinear", "qb", "B,bs,bzp", "BQ");
    otm_node(m, "DequantizeLinear", "dqb", "BQ,bs,bzp", "BD");
  } else {
    otm_initializer(m, "Bq", ONYX_ELEM_INT8, 2, tb ? (int64_t[]){MN, MK} : (int64_t[]){MK, MN}, bq);
    otm_initializer(m, "ws", ONYX_ELEM_FLOAT32, 1, (int64_t[]){MN}, ws);
    otm_initializer(m, "wzp", ONYX_ELEM_INT8, 1, (int64_t[]){MN}, wzp);
    otm_attr_int(otm_node(m, "DequantizeLinear", "dqb", "Bq,ws,wzp", "BD"), "axis", tb ? 0 : 1);
  }
  if (mode == 2) otm_initializer(m, "Cb", ONYX_ELEM_FLOAT32, 1, (int64_t[]){MN}, cf);
  OxTestNode* p =
      otm_node(m, gemm ? "Gemm" : "MatMul", "mm", mode == 2 ? "AD,BD,Cb" : "AD,BD", "P");
  if (tb) otm_attr_int(p, "transB", 1);
  otm_node(m, "QuantizeLinear", "qy", "P,ys,yzp", "Y");
  otm_output(m, "Y", ONYX_ELEM_UINT8, 2, (int64_t[]){MM, MN});
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);

  OnyxSession* s = open_at(bytes, len, ONYX_OPT_ALL);
  const bool fused = mode != 2;
  assert_int_equal(count_op(s, "QLinearMatMul"), fused ? 1 : 0);
  assert_int_equal(count_op(s, "MatMul") + count_op(s, "Gemm") + count_op(s, "FusedMatMul"),
                   fused ? 0 : 1);
  assert_int_equal(explain_has(s, "made by qdq"), fused);
  assert_int_equal(count_op(s, "DequantizeLinear"), fused ? 0 : 1); /* B's folded, A's stays */
  on_cpu(s, "QLinearMatMul");

  enum { N = MM * MN };
  int ref[N];
  for (int i = 0; i < MM; i++)
    for (int j = 0; j < MN; j++) {
      double acc = mode == 2 ? cf[j] : 0.0;
      for (int k = 0; k < MK; k++) {
        const double ad = (quant_u8(a[i * MK + k], as, a_zp) - a_zp) * (double)as;
        const double bd = mode == 3 ? (quant_u8(b2[k * MN + j], bs2, b2_zp) - b2_zp) * (double)bs2
                                    : bq[tb ? j * MK + k : k * MN + j] * (double)ws[j];
        acc += ad * bd;
      }
      ref[i * MN + j] = quant_u8(acc, ys, y_zp);
    }
  Feed feeds[2] = {{"A", a, {MM, MK}, 2}, {"B", b2, {MK, MN}, 2}};
  uint8_t y[N], yp[N];
  run(s, feeds, mode == 3 ? 2 : 1, y, N);
  OnyxSession* plain = open_at(bytes, len, ONYX_OPT_DISABLED);
  run(plain, feeds, mode == 3 ? 2 : 1, yp, N);
  check_close("matmul", mode, y, yp, ref, N);
  onyx_session_release(plain);
  onyx_session_release(s);
  free(bytes);
}

static void test_matmul_fused(void** state) {
  (void)state;
  matmul_case(0);
  matmul_case(1);
  matmul_case(3);
}

static void test_gemm_bias_left_alone(void** state) {
  (void)state;
  matmul_case(2);
}

/* --- Add and GlobalAveragePool (com.microsoft, where available) ---------------------------------
 * mode 0: Add of two QDQ activations; mode 1: GlobalAveragePool; mode 2:
 * Mul of two QDQ activations (the CPU provider has QLinearMul: it fuses). */
static void ms_case(int mode) {
  const float as = 0.02f, bs = 0.03f, ys = 0.04f;
  const int a_zp = 128, b_zp = 100, y_zp = 120;
  float a[C_IN * H * W], b[C_IN * H * W];
  fill(a, C_IN * H * W, 21, 2.0f);
  fill(b, C_IN * H * W, 23, 2.5f);
  const uint8_t azp = (uint8_t)a_zp, bzp = (uint8_t)b_zp, yzp = (uint8_t)y_zp;
  OxTestModel* m = otm_new(13);
  const int64_t xd[4] = {1, C_IN, H, W};
  otm_input(m, "A", ONYX_ELEM_FLOAT32, 4, xd);
  otm_initializer(m, "as", ONYX_ELEM_FLOAT32, 0, NULL, &as);
  otm_initializer(m, "azp", ONYX_ELEM_UINT8, 0, NULL, &azp);
  otm_initializer(m, "ys", ONYX_ELEM_FLOAT32, 0, NULL, &ys);
  otm_initializer(m, "yzp", ONYX_ELEM_UINT8, 0, NULL, &yzp);
  otm_node(m, "QuantizeLinear", "qa", "A,as,azp", "AQ");
  otm_node(m, "DequantizeLinear", "dqa", "AQ,as,azp", "AD");
  const char* op = mode == 0 ? "Add" : mode == 1 ? "GlobalAveragePool" : "Mul";
  if (mode != 1) {
    otm_input(m, "B", ONYX_ELEM_FLOAT32, 4, xd);
    otm_initializer(m, "bs", ONYX_ELEM_FLOAT32, 0, NULL, &bs);
    otm_initializer(m, "bzp", ONYX_ELEM_UINT8, 0, NULL, &bzp);
    otm_node(m, "QuantizeLinear", "qb", "B,bs,bzp", "BQ");
    otm_node(m, "DequantizeLinear", "dqb", "BQ,bs,bzp", "BD");
    otm_node(m, op, "bin", "AD,BD", "P");
    otm_output(m, "Y", ONYX_ELEM_UINT8, 4, xd);
  } else {
    otm_node(m, "GlobalAveragePool", "gap", "AD", "P");
    otm_output(m, "Y", ONYX_ELEM_UINT8, 4, (int64_t[]){1, C_IN, 1, 1});
  }
  otm_node(m, "QuantizeLinear", "qy", "P,ys,yzp", "Y");
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);

  OnyxSession* s = open_at(bytes, len, ONYX_OPT_ALL);
  const char* made = mode == 0   ? "QLinearAdd"
                     : mode == 1 ? "QLinearGlobalAveragePool"
                                 : "QLinearMul";
  const size_t fused = count_op(s, made);
  assert_int_equal(fused + count_op(s, op), 1);
  if (mode == 2) assert_int_equal(fused, 1);
  assert_int_equal(explain_has(s, "made by qdq"), fused == 1);
  on_cpu(s, made);

  enum { N = C_IN * H * W };
  int ref[N];
  size_t n = 0;
  if (mode != 1) {
    for (size_t i = 0; i < N; i++) {
      const double ad = (quant_u8(a[i], as, a_zp) - a_zp) * (double)as;
      const double bd = (quant_u8(b[i], bs, b_zp) - b_zp) * (double)bs;
      ref[n++] = quant_u8(mode == 0 ? ad + bd : ad * bd, ys, y_zp);
    }
  } else {
    for (int c = 0; c < C_IN; c++) {
      double acc = 0;
      for (int i = 0; i < H * W; i++)
        acc += (quant_u8(a[c * H * W + i], as, a_zp) - a_zp) * (double)as;
      ref[n++] = quant_u8(acc / (H * W), ys, y_zp);
    }
  }
  Feed feeds[2] = {{"A", a, {1, C_IN, H, W}, 4}, {"B", b, {1, C_IN, H, W}, 4}};
  uint8_t y[N], yp[N];
  run(s, feeds, mode != 1 ? 2 : 1, y, n);
  OnyxSession* plain = open_at(bytes, len, ONYX_OPT_DISABLED);
  run(plain, feeds, mode != 1 ? 2 : 1, yp, n);
  check_close(op, mode, y, yp, ref, n);
  onyx_session_release(plain);
  onyx_session_release(s);
  if (mode == 2) check_convprov_mul(bytes, len);
  free(bytes);
}

static void test_add_gap(void** state) {
  (void)state;
  ms_case(0);
  ms_case(1);
  ms_case(2);
}

/* --- MaxPool on the quantized values
 * -------------------------------------------------------------- Q(MaxPool(DQ(x))) with the DQ's
 * scale and zero point equal to the Q's (mode 0, and mode 4 with a Relu between the MaxPool and a Q
 * of zero point 0) becomes one MaxPool on the uint8 values, on the CPU provider, and its output is
 * exactly the reference (the largest quantized value of each window, padding ignored) and the
 * unoptimized run's. Another output scale (mode 1) or zero point (mode 2) leaves the nodes as they
 * are; with convprov first (mode 3), which takes the MaxPool, nothing fuses and no node moves. */
enum { PH = 6, PW = 7, PC = 2, POH = 3, POW = 4 }; /* kernel 3, stride 2, pads 1 */

static void maxpool_case(int mode) {
  float x[PC * PH * PW];
  fill(x, PC * PH * PW, 41u + (unsigned)mode, 2.0f);
  const float xs = 0.02f, ys = mode == 1 ? 0.03f : xs;
  const uint8_t xzp = mode == 4 ? 0 : 100, yzp = mode == 2 ? 101 : xzp;
  OxTestModel* m = otm_new(13);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, PC, PH, PW});
  otm_initializer(m, "xs", ONYX_ELEM_FLOAT32, 0, NULL, &xs);
  otm_initializer(m, "xzp", ONYX_ELEM_UINT8, 0, NULL, &xzp);
  otm_initializer(m, "ys", ONYX_ELEM_FLOAT32, 0, NULL, &ys);
  otm_initializer(m, "yzp", ONYX_ELEM_UINT8, 0, NULL, &yzp);
  otm_node(m, "QuantizeLinear", "qx", "X,xs,xzp", "XQ");
  otm_node(m, "DequantizeLinear", "dqx", "XQ,xs,xzp", "XD");
  OxTestNode* mp = otm_node(m, "MaxPool", "mp", "XD", mode == 4 ? "P0" : "P");
  otm_attr_ints(mp, "kernel_shape", 2, (int64_t[]){3, 3});
  otm_attr_ints(mp, "strides", 2, (int64_t[]){2, 2});
  otm_attr_ints(mp, "pads", 4, (int64_t[]){1, 1, 1, 1});
  if (mode == 4) otm_node(m, "Relu", "relu", "P0", "P");
  otm_node(m, "QuantizeLinear", "qy", "P,ys,yzp", "Y");
  otm_output(m, "Y", ONYX_ELEM_UINT8, 4, (int64_t[]){1, PC, POH, POW});
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  if (mode == 3) {
    OnyxSession* s = open_convprov(bytes, len);
    assert_int_equal(count_op(s, "MaxPool"), 1);
    assert_int_equal(count_op(s, "QuantizeLinear"), 2);
    assert_int_equal(count_op(s, "DequantizeLinear"), 1);
    for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
      const OxNode* n = s->prog.graph->nodes[i];
      assert_string_equal(s->prog.eps[n->ep].name,
                          !strcmp(n->op_type, "MaxPool") ? "convprov" : "cpu");
    }
    assert_false(explain_has(s, "made by qdq"));
    onyx_session_release(s);
    free(bytes);
    return;
  }
  OnyxSession* s = open_at(bytes, len, ONYX_OPT_ALL);
  const bool fused = mode == 0 || mode == 4;
  assert_int_equal(count_op(s, "MaxPool"), 1);
  assert_int_equal(count_op(s, "QuantizeLinear"), fused ? 1 : 2);
  assert_int_equal(count_op(s, "DequantizeLinear"), fused ? 0 : 1);
  assert_int_equal(count_op(s, "Relu"), 0 + (mode == 4 && !fused));
  assert_int_equal(explain_has(s, "made by qdq"), fused);
  on_cpu(s, "MaxPool");
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
    const OxNode* n = s->prog.graph->nodes[i];
    if (!strcmp(n->op_type, "MaxPool"))
      assert_int_equal(n->inputs[0]->type, fused ? ONYX_ELEM_UINT8 : ONYX_ELEM_FLOAT32);
  }
  /* the reference: the largest quantized value of each window, requantized
   * through the float value where the parameters differ */
  enum { N = PC * POH * POW };
  int ref[N];
  for (int c = 0; c < PC; c++)
    for (int i = 0; i < POH; i++)
      for (int j = 0; j < POW; j++) {
        int best = -1;
        for (int a = 0; a < 3; a++)
          for (int b = 0; b < 3; b++) {
            const int h = i * 2 - 1 + a, w = j * 2 - 1 + b;
            if (h < 0 || h >= PH || w < 0 || w >= PW) continue;
            /* QuantizeLinear as the kernel rounds it: x / scale in float */
            const float r = nearbyintf(x[(c * PH + h) * PW + w] / xs) + (float)xzp;
            const int q = r < 0 ? 0 : r > 255 ? 255 : (int)r;
            best = q > best ? q : best;
          }
        ref[(c * POH + i) * POW + j] = quant_u8((best - xzp) * (double)xs, ys, yzp);
      }
  Feed feeds[1] = {{"X", x, {1, PC, PH, PW}, 4}};
  uint8_t y[N], yp[N];
  run(s, feeds, 1, y, N);
  OnyxSession* plain = open_at(bytes, len, ONYX_OPT_DISABLED);
  run(plain, feeds, 1, yp, N);
  if (fused)
    for (int i = 0; i < N; i++) {
      assert_int_equal(y[i], ref[i]);
      assert_int_equal(y[i], yp[i]);
    }
  check_close("MaxPool", mode, y, yp, ref, N);
  onyx_session_release(plain);
  onyx_session_release(s);
  free(bytes);
}

static void test_maxpool(void** state) {
  (void)state;
  for (int mode = 0; mode < 5; mode++)
    maxpool_case(mode);
}

/* --- channels-last chains ------------------------------------------------------------------------
 * A QDQ block: conv1 (3x3, Relu) -> conv2 (3x3) + the residual (conv1's
 * output) -> Relu -> MaxPool (2x2, stride 2) -> GlobalAveragePool. After
 * the fusions the layout pass keeps it channels-last: two com.onyx
 * QLinearConv (channels_last 1), QLinearAdd, com.microsoft NhwcMaxPool and
 * QLinearGlobalAveragePool (channels_last 1), one Transpose in (X's) and one
 * out (the pool's [1, 1, 1, C]), every node on the CPU provider. The output
 * equals, exactly, the same fusions kept NCHW (ONYX_OPT_DISABLE=qdq_layout),
 * and is within one step of the unoptimized run. With convprov first (it
 * takes the Convs) nothing of the layout happens and no node moves. */
enum { LC = 4, LH = 6, LW = 7, LM = 8 };

static size_t count_domain_op(const OnyxSession* s, const char* domain, const char* op) {
  size_t n = 0;
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
    const OxNode* nd = s->prog.graph->nodes[i];
    n += !strcmp(nd->op_type, op) && !strcmp(nd->domain, domain);
  }
  return n;
}

static void layout_model(uint8_t** bytes, size_t* len) {
  static float w1[LM * LC * 9], w2[LM * LM * 9];
  fill(w1, LM * LC * 9, 5u, 0.5f);
  fill(w2, LM * LM * 9, 6u, 0.3f);
  static float ws1[LM], ws2[LM];
  static int8_t w1q[LM * LC * 9], w2q[LM * LM * 9];
  static int8_t wz[LM];
  for (int m = 0; m < LM; m++) {
    ws1[m] = 0.004f + 0.0003f * (float)m;
    ws2[m] = 0.003f + 0.0002f * (float)m;
    for (int i = 0; i < LC * 9; i++)
      w1q[m * LC * 9 + i] = (int8_t)quant_i8(w1[m * LC * 9 + i], ws1[m]);
    for (int i = 0; i < LM * 9; i++)
      w2q[m * LM * 9 + i] = (int8_t)quant_i8(w2[m * LM * 9 + i], ws2[m]);
  }
  const float xs = 0.01f, s1 = 0.02f, s2 = 0.03f, sa = 0.035f, sg = 0.03f;
  const uint8_t xz = 128, z0 = 0, z2 = 120;
  OxTestModel* m = otm_new(13);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, LC, LH, LW});
  otm_initializer(m, "xs", ONYX_ELEM_FLOAT32, 0, NULL, &xs);
  otm_initializer(m, "xz", ONYX_ELEM_UINT8, 0, NULL, &xz);
  otm_initializer(m, "s1", ONYX_ELEM_FLOAT32, 0, NULL, &s1);
  otm_initializer(m, "s2", ONYX_ELEM_FLOAT32, 0, NULL, &s2);
  otm_initializer(m, "sa", ONYX_ELEM_FLOAT32, 0, NULL, &sa);
  otm_initializer(m, "sg", ONYX_ELEM_FLOAT32, 0, NULL, &sg);
  otm_initializer(m, "z0", ONYX_ELEM_UINT8, 0, NULL, &z0);
  otm_initializer(m, "z2", ONYX_ELEM_UINT8, 0, NULL, &z2);
  otm_initializer(m, "w1q", ONYX_ELEM_INT8, 4, (int64_t[]){LM, LC, 3, 3}, w1q);
  otm_initializer(m, "w2q", ONYX_ELEM_INT8, 4, (int64_t[]){LM, LM, 3, 3}, w2q);
  otm_initializer(m, "ws1", ONYX_ELEM_FLOAT32, 1, (int64_t[]){LM}, ws1);
  otm_initializer(m, "ws2", ONYX_ELEM_FLOAT32, 1, (int64_t[]){LM}, ws2);
  otm_initializer(m, "wz", ONYX_ELEM_INT8, 1, (int64_t[]){LM}, wz);
  otm_node(m, "QuantizeLinear", "qx", "X,xs,xz", "XQ");
  otm_node(m, "DequantizeLinear", "dqx", "XQ,xs,xz", "XD");
  otm_attr_int(otm_node(m, "DequantizeLinear", "dqw1", "w1q,ws1,wz", "W1"), "axis", 0);
  otm_attr_int(otm_node(m, "DequantizeLinear", "dqw2", "w2q,ws2,wz", "W2"), "axis", 0);
  static const int64_t pads[4] = {1, 1, 1, 1};
  otm_attr_ints(otm_node(m, "Conv", "conv1", "XD,W1", "C1"), "pads", 4, pads);
  otm_node(m, "Relu", "relu1", "C1", "R1");
  otm_node(m, "QuantizeLinear", "q1", "R1,s1,z0", "Q1");
  otm_node(m, "DequantizeLinear", "dq1a", "Q1,s1,z0", "D1A"); /* conv2's input */
  otm_node(m, "DequantizeLinear", "dq1b", "Q1,s1,z0", "D1B"); /* the residual */
  otm_attr_ints(otm_node(m, "Conv", "conv2", "D1A,W2", "C2"), "pads", 4, pads);
  otm_node(m, "QuantizeLinear", "q2", "C2,s2,z2", "Q2");
  otm_node(m, "DequantizeLinear", "dq2", "Q2,s2,z2", "D2");
  otm_node(m, "Add", "add", "D2,D1B", "A");
  otm_node(m, "Relu", "relu2", "A", "RA");
  otm_node(m, "QuantizeLinear", "qa", "RA,sa,z0", "QA");
  otm_node(m, "DequantizeLinear", "dqa", "QA,sa,z0", "DA");
  OxTestNode* mp = otm_node(m, "MaxPool", "pool", "DA", "P");
  otm_attr_ints(mp, "kernel_shape", 2, (int64_t[]){2, 2});
  otm_attr_ints(mp, "strides", 2, (int64_t[]){2, 2});
  otm_node(m, "QuantizeLinear", "qp", "P,sa,z0", "QP");
  otm_node(m, "DequantizeLinear", "dqp", "QP,sa,z0", "DP");
  otm_node(m, "GlobalAveragePool", "gap", "DP", "G");
  otm_node(m, "QuantizeLinear", "qg", "G,sg,z0", "Y");
  otm_output(m, "Y", ONYX_ELEM_UINT8, 4, (int64_t[]){1, LM, 1, 1});
  otm_serialize(m, bytes, len);
  otm_free(m);
}

static void test_layout_chain(void** state) {
  (void)state;
  uint8_t* bytes = NULL;
  size_t len = 0;
  layout_model(&bytes, &len);
  OnyxSession* s = open_at(bytes, len, ONYX_OPT_ALL);
  assert_int_equal(count_domain_op(s, "com.onyx", "QLinearConv"), 2);
  assert_int_equal(count_domain_op(s, "", "QLinearConv"), 0);
  assert_int_equal(count_domain_op(s, "com.microsoft", "QLinearAdd"), 1);
  assert_int_equal(count_domain_op(s, "com.microsoft", "NhwcMaxPool"), 1);
  assert_int_equal(count_domain_op(s, "com.microsoft", "QLinearGlobalAveragePool"), 1);
  assert_int_equal(count_op(s, "Transpose"), 2);
  assert_int_equal(count_op(s, "MaxPool") + count_op(s, "Conv") + count_op(s, "Add"), 0);
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
    const OxNode* n = s->prog.graph->nodes[i];
    assert_true(n->ep >= 0);
    assert_string_equal(s->prog.eps[n->ep].name, "cpu");
    if (!strcmp(n->op_type, "QLinearGlobalAveragePool") || !strcmp(n->domain, "com.onyx"))
      assert_int_equal(ox_node_attr_int(n, "channels_last", 0), 1);
  }
  assert_true(explain_has(s, "made by qdq, qdq_layout"));
  /* the NCHW fusions, the layout pass off */
  setenv("ONYX_OPT_DISABLE", "qdq_layout", 1);
  OnyxSession* nchw = open_at(bytes, len, ONYX_OPT_ALL);
  unsetenv("ONYX_OPT_DISABLE");
  assert_int_equal(count_domain_op(nchw, "", "QLinearConv"), 2);
  assert_int_equal(count_op(nchw, "Transpose") + count_op(nchw, "NhwcMaxPool"), 0);
  OnyxSession* plain = open_at(bytes, len, ONYX_OPT_DISABLED);
  float x[LC * LH * LW];
  Feed feeds[1] = {{"X", x, {1, LC, LH, LW}, 4}};
  for (unsigned seed = 0; seed < 4; seed++) {
    fill(x, LC * LH * LW, 77u + seed, 1.2f);
    uint8_t y[LM], yn[LM], yp[LM];
    run(s, feeds, 1, y, LM);
    run(nchw, feeds, 1, yn, LM);
    run(plain, feeds, 1, yp, LM);
    for (int i = 0; i < LM; i++) {
      assert_int_equal(y[i], yn[i]);
      if (abs((int)y[i] - (int)yp[i]) > 1)
        fail_msg("channels-last chain, Y[%d]: %d, unoptimized %d", i, y[i], yp[i]);
    }
  }
  onyx_session_release(plain);
  onyx_session_release(nchw);
  onyx_session_release(s);
  /* convprov takes the Convs: no layout, no node moves */
  OnyxSession* cp = open_convprov(bytes, len);
  assert_int_equal(count_op(cp, "Transpose") + count_op(cp, "NhwcMaxPool"), 0);
  assert_int_equal(count_domain_op(cp, "com.onyx", "QLinearConv"), 0);
  for (size_t i = 0; i < cp->prog.graph->n_nodes; i++) {
    const OxNode* n = cp->prog.graph->nodes[i];
    if (!strcmp(n->op_type, "Conv")) assert_string_equal(cp->prog.eps[n->ep].name, "convprov");
  }
  onyx_session_release(cp);
  free(bytes);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_fused),
      cmocka_unit_test(test_conv_other_provider),
      cmocka_unit_test(test_conv_left_alone),
      cmocka_unit_test(test_matmul_fused),
      cmocka_unit_test(test_gemm_bias_left_alone),
      cmocka_unit_test(test_add_gap),
      cmocka_unit_test(test_maxpool),
      cmocka_unit_test(test_layout_chain),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
