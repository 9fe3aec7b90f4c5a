/* test_opt_layout_nchwc.c — the `layout_nchwc` transformer
 * (host/optimizer/opt_layout_nchwc.c): a MobileNet-style block (pointwise
 * conv + Clip, depthwise 3x3 + HardSwish, a squeeze-and-excitation gate:
 * GlobalAveragePool, two 1x1 convs, Sigmoid, Mul; a pointwise projection
 * and a residual Add of the graph input), with channel counts that are no
 * multiple of the block (padded lanes), becomes NchwcConv /
 * NchwcGlobalAveragePool with one ReorderInput for the graph input and
 * one ReorderOutput per value read outside the chain, the gate's Mul
 * NchwcScale and the residual Add the projection's Z, for blocks 8 and 16;
 * its outputs match a reference computed here in plain C (double). A
 * 3-channel stride-2 stem reads the NCHW image directly (no ReorderInput). A lone
 * conv stays NCHW, a full 3x3 conv splits a chain in two, the pass is off
 * under ONYX_OPT_DISABLE=layout_nchwc, and with the test provider
 * "authork" (tests/providers/author) placed first the residual Add stays
 * on that provider, reading an NCHW value: the chain is split at the
 * provider's node, never moved. */
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

enum { C0 = 12, C1 = 20, CS = 5, H = 7, W = 6 };

static void fill(float* x, size_t n, unsigned seed, float scale) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = scale * ((float)((seed >> 8) % 2001) / 1000.0f - 1.0f);
  }
}

static OnyxSession* open_session(const uint8_t* bytes, size_t len, const char* first) {
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  assert_null(onyx_session_options_set_optimization_level(o, ONYX_OPT_ALL));
  assert_null(onyx_session_options_set_threads(o, 2));
  if (first) {
    assert_null(onyx_session_options_add_provider(o, first, NULL, 0, 1));
    assert_null(onyx_session_options_add_provider(o, "cpu", NULL, 0, 1));
  }
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

static void run(OnyxSession* s, const float* x, const char* name, float* out, size_t count) {
  const int64_t dims[4] = {1, C0, H, W};
  OnyxValue* in = NULL;
  assert_null(
      onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dims, 4, x, sizeof(float) * C0 * H * W, &in));
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

/* --- the reference, NCHW in double ------------------------------------------------------ */

/* Conv of x [c, h, w] with w [m, c/group, k, k], stride 1, pads p, into y. */
static void conv_ref(const double* x, size_t c, size_t h, size_t w, const float* wt, const float* b,
                     size_t m, size_t k, size_t p, size_t group, double* y) {
  const size_t cg = c / group, mg = m / group;
  for (size_t o = 0; o < m; o++)
    for (size_t i = 0; i < h; i++)
      for (size_t j = 0; j < w; j++) {
        double acc = b[o];
        for (size_t ci = 0; ci < cg; ci++)
          for (size_t u = 0; u < k; u++)
            for (size_t v = 0; v < k; v++) {
              const long ii = (long)(i + u) - (long)p, jj = (long)(j + v) - (long)p;
              if (ii < 0 || jj < 0 || ii >= (long)h || jj >= (long)w) continue;
              acc += x[((o / mg * cg + ci) * h + (size_t)ii) * w + (size_t)jj] *
                     wt[((o * cg + ci) * k + u) * k + v];
            }
        y[(o * h + i) * w + j] = acc;
      }
}

static double clip6(double v) {
  return v < 0 ? 0 : v > 6 ? 6 : v;
}
static double hswish(double v) {
  const double t = v / 6 + 0.5;
  return v * (t < 0 ? 0 : t > 1 ? 1 : t);
}

/* The block's weights. */
static float w1[C1 * C0], b1[C1], wd[C1 * 9], bd[C1], ws1[CS * C1], bs1[CS], ws2[C1 * CS], bs2[C1],
    w2[C0 * C1], b2[C0];

static void init_weights(void) {
  fill(w1, C1 * C0, 3, 0.4f);
  fill(b1, C1, 5, 0.3f);
  fill(wd, C1 * 9, 7, 0.4f);
  fill(bd, C1, 9, 0.3f);
  fill(ws1, CS * C1, 11, 0.5f);
  fill(bs1, CS, 13, 0.3f);
  fill(ws2, C1 * CS, 15, 0.5f);
  fill(bs2, C1, 17, 0.3f);
  fill(w2, C0 * C1, 19, 0.3f);
  fill(b2, C0, 21, 0.2f);
}

/* A = Clip(Conv1(X), 0, 6) and Y = Conv2(D * gate(D)) + X with
 * D = HardSwish(DwConv(A)). */
static void block_ref(const float* xf, double* a, double* y) {
  static double x[C0 * H * W], d[C1 * H * W], e[C1 * H * W], g[C1], s1[CS], s2[C1];
  for (size_t i = 0; i < C0 * H * W; i++)
    x[i] = xf[i];
  conv_ref(x, C0, H, W, w1, b1, C1, 1, 0, 1, a);
  for (size_t i = 0; i < C1 * H * W; i++)
    a[i] = clip6(a[i]);
  conv_ref(a, C1, H, W, wd, bd, C1, 3, 1, C1, d);
  for (size_t i = 0; i < C1 * H * W; i++)
    d[i] = hswish(d[i]);
  for (size_t c = 0; c < C1; c++) {
    double s = 0;
    for (size_t p = 0; p < H * W; p++)
      s += d[c * H * W + p];
    g[c] = s / (H * W);
  }
  conv_ref(g, C1, 1, 1, ws1, bs1, CS, 1, 0, 1, s1);
  for (size_t c = 0; c < CS; c++)
    s1[c] = s1[c] < 0 ? 0 : s1[c];
  conv_ref(s1, CS, 1, 1, ws2, bs2, C1, 1, 0, 1, s2);
  for (size_t c = 0; c < C1; c++)
    for (size_t p = 0; p < H * W; p++)
      e[c * H * W + p] = d[c * H * W + p] / (1 + exp(-s2[c]));
  conv_ref(e, C1, H, W, w2, b2, C0, 1, 0, 1, y);
  for (size_t i = 0; i < C0 * H * W; i++)
    y[i] += x[i];
}

static OxTestNode* conv(OxTestModel* m, const char* name, const char* ins, const char* out,
                        int64_t k, int64_t group) {
  OxTestNode* n = otm_node(m, "Conv", name, ins, out);
  otm_attr_ints(n, "kernel_shape", 2, (int64_t[]){k, k});
  if (k == 3) otm_attr_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
  if (group > 1) otm_attr_int(n, "group", group);
  return n;
}

/* The block; A and Y are graph outputs. */
static void block_model(uint8_t** bytes, size_t* len) {
  OxTestModel* m = otm_new(14);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, C0, H, W});
  otm_initializer(m, "W1", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C1, C0, 1, 1}, w1);
  otm_initializer(m, "B1", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C1}, b1);
  otm_initializer(m, "Wd", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C1, 1, 3, 3}, wd);
  otm_initializer(m, "Bd", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C1}, bd);
  otm_initializer(m, "Ws1", ONYX_ELEM_FLOAT32, 4, (int64_t[]){CS, C1, 1, 1}, ws1);
  otm_initializer(m, "Bs1", ONYX_ELEM_FLOAT32, 1, (int64_t[]){CS}, bs1);
  otm_initializer(m, "Ws2", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C1, CS, 1, 1}, ws2);
  otm_initializer(m, "Bs2", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C1}, bs2);
  otm_initializer(m, "W2", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C0, C1, 1, 1}, w2);
  otm_initializer(m, "B2", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C0}, b2);
  otm_initializer(m, "lo", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){0.0f});
  otm_initializer(m, "hi", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){6.0f});
  conv(m, "pw1", "X,W1,B1", "P1", 1, 1);
  otm_node(m, "Clip", "clip", "P1,lo,hi", "A");
  conv(m, "dw", "A,Wd,Bd", "Dc", 3, C1);
  otm_node(m, "HardSwish", "hs", "Dc", "D");
  otm_node(m, "GlobalAveragePool", "gap", "D", "G");
  conv(m, "se1", "G,Ws1,Bs1", "S1c", 1, 1);
  otm_node(m, "Relu", "relu", "S1c", "S1");
  conv(m, "se2", "S1,Ws2,Bs2", "S2c", 1, 1);
  otm_node(m, "Sigmoid", "sig", "S2c", "S2");
  otm_node(m, "Mul", "gate", "D,S2", "E");
  conv(m, "pw2", "E,W2,B2", "P2", 1, 1);
  otm_node(m, "Add", "res", "P2,X", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, C0, H, W});
  otm_output(m, "A", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, C1, H, W});
  otm_serialize(m, bytes, len);
  otm_free(m);
}

static void check_outputs(OnyxSession* s, const char* what) {
  static float x[C0 * H * W], y[C0 * H * W], a[C1 * H * W];
  static double yr[C0 * H * W], ar[C1 * H * W];
  fill(x, C0 * H * W, 23, 2.0f);
  block_ref(x, ar, yr);
  run(s, x, "Y", y, C0 * H * W);
  run(s, x, "A", a, C1 * H * W);
  for (size_t i = 0; i < C0 * H * W; i++)
    if (fabs(y[i] - yr[i]) > 1e-4 * (1 + fabs(yr[i])))
      fail_msg("%s: Y[%zu] = %.9g, want %.9g", what, i, y[i], yr[i]);
  for (size_t i = 0; i < C1 * H * W; i++)
    if (fabs(a[i] - ar[i]) > 1e-5 * (1 + fabs(ar[i])))
      fail_msg("%s: A[%zu] = %.9g, want %.9g", what, i, a[i], ar[i]);
}

static void test_block_rewritten(void** state) {
  (void)state;
  uint8_t* bytes = NULL;
  size_t len = 0;
  block_model(&bytes, &len);
  static const char* const blocks[] = {"8", "16"};
  for (size_t b = 0; b < 2; b++) {
    setenv("ONYX_OPT_NCHWC_BLOCK", blocks[b], 1);
    OnyxSession* s = open_session(bytes, len, NULL);
    assert_int_equal(count_op(s, "NchwcConv"), 5);
    assert_int_equal(count_op(s, "NchwcGlobalAveragePool"), 1);
    assert_int_equal(count_op(s, "ReorderInput"), 1);  /* X, read by pw1 and the Add */
    assert_int_equal(count_op(s, "ReorderOutput"), 2); /* Y and A */
    assert_int_equal(count_op(s, "Conv") + count_op(s, "FusedConv"), 0);
    assert_int_equal(count_op(s, "GlobalAveragePool"), 0);
    assert_int_equal(count_op(s, "NchwcScale"), 1); /* the gate's Mul */
    assert_int_equal(count_op(s, "Mul"), 0);
    assert_int_equal(count_op(s, "Add"), 0); /* the residual sum: pw2's Z */
    size_t with_z = 0;
    for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
      const OxNode* n = s->prog.graph->nodes[i];
      assert_true(n->ep >= 0);
      assert_string_equal(s->prog.eps[n->ep].name, "cpu");
      if (!strcmp(n->op_type, "NchwcConv") || !strcmp(n->op_type, "ReorderInput")) {
        assert_string_equal(n->domain, "com.onyx");
        assert_int_equal(ox_node_attr_int(n, "block", 0), atoi(blocks[b]));
      }
      if (!strcmp(n->op_type, "NchwcScale")) { /* blocked operands */
        assert_int_equal(n->inputs[0]->rank, 5);
        assert_int_equal(n->inputs[1]->rank, 5);
      }
      if (!strcmp(n->op_type, "NchwcConv") && n->n_inputs > 3 && n->inputs[3]) {
        with_z++;
        assert_string_equal(n->inputs[3]->producer->op_type, "ReorderInput"); /* X's */
      }
    }
    assert_int_equal(with_z, 1);
    check_outputs(s, blocks[b]);
    onyx_session_release(s);
  }
  setenv("ONYX_OPT_DISABLE", "layout_nchwc", 1);
  OnyxSession* s = open_session(bytes, len, NULL);
  assert_int_equal(count_op(s, "NchwcConv") + count_op(s, "ReorderInput"), 0);
  check_outputs(s, "layout_nchwc off");
  onyx_session_release(s);
  unsetenv("ONYX_OPT_DISABLE");
  setenv("ONYX_OPT_NCHWC_BLOCK", "0", 1);
  s = open_session(bytes, len, NULL);
  assert_int_equal(count_op(s, "NchwcConv"), 0);
  onyx_session_release(s);
  unsetenv("ONYX_OPT_NCHWC_BLOCK");
  free(bytes);
}

/* X -> pw (C0 -> C1) -> Relu -> [full 9x9 C1 -> C1 when split] -> pw (C1 -> C0) -> dw:
 * one chain of three convs; split by the full conv (C1 x 81 products per
 * output, more than the pass admits: not a chain op) into {pw} and
 * {pw, dw}: the first stays NCHW. */
static void test_chain_split(void** state) {
  (void)state;
  setenv("ONYX_OPT_NCHWC_BLOCK", "8", 1);
  for (int split = 0; split < 2; split++) {
    OxTestModel* m = otm_new(14);
    otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, C0, H, W});
    static float wf[C1 * C1 * 81], bf[C1], wd0[C0 * 9], bd0[C0];
    fill(wf, C1 * C1 * 81, 31, 0.05f);
    fill(bf, C1, 33, 0.2f);
    fill(wd0, C0 * 9, 35, 0.3f);
    fill(bd0, C0, 37, 0.2f);
    otm_initializer(m, "W1", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C1, C0, 1, 1}, w1);
    otm_initializer(m, "B1", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C1}, b1);
    otm_initializer(m, "Wf", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C1, C1, 9, 9}, wf);
    otm_initializer(m, "Bf", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C1}, bf);
    otm_initializer(m, "W2", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C0, C1, 1, 1}, w2);
    otm_initializer(m, "B2", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C0}, b2);
    otm_initializer(m, "Wd", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C0, 1, 3, 3}, wd0);
    otm_initializer(m, "Bd", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C0}, bd0);
    conv(m, "pw1", "X,W1,B1", "P1", 1, 1);
    otm_node(m, "Relu", "relu", "P1", "R");
    if (split)
      otm_attr_ints(conv(m, "full", "R,Wf,Bf", "F", 9, 1), "pads", 4, (int64_t[]){4, 4, 4, 4});
    conv(m, "pw2", split ? "F,W2,B2" : "R,W2,B2", "P2", 1, 1);
    conv(m, "dw", "P2,Wd,Bd", "Y", 3, C0);
    otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, C0, H, W});
    uint8_t* bytes = NULL;
    size_t len = 0;
    otm_serialize(m, &bytes, &len);
    otm_free(m);
    OnyxSession* s = open_session(bytes, len, NULL);
    assert_int_equal(count_op(s, "NchwcConv"), split ? 2 : 3);
    assert_int_equal(count_op(s, "FusedConv") + count_op(s, "Conv"), split ? 2 : 0);
    assert_int_equal(count_op(s, "ReorderInput"), 1);
    assert_int_equal(count_op(s, "ReorderOutput"), 1);
    /* the reference */
    static float x[C0 * H * W], y[C0 * H * W];
    static double xd[C0 * H * W], r[C1 * H * W], f[C1 * H * W], p2[C0 * H * W], yr[C0 * H * W];
    fill(x, C0 * H * W, 41, 1.5f);
    for (size_t i = 0; i < C0 * H * W; i++)
      xd[i] = x[i];
    conv_ref(xd, C0, H, W, w1, b1, C1, 1, 0, 1, r);
    for (size_t i = 0; i < C1 * H * W; i++)
      r[i] = r[i] < 0 ? 0 : r[i];
    if (split) conv_ref(r, C1, H, W, wf, bf, C1, 9, 4, 1, f);
    conv_ref(split ? f : r, C1, H, W, w2, b2, C0, 1, 0, 1, p2);
    conv_ref(p2, C0, H, W, wd0, bd0, C0, 3, 1, C0, yr);
    run(s, x, "Y", y, C0 * H * W);
    for (size_t i = 0; i < C0 * H * W; i++)
      if (fabs(y[i] - yr[i]) > 1e-4 * (1 + fabs(yr[i])))
        fail_msg("split %d: Y[%zu] = %.9g, want %.9g", split, i, y[i], yr[i]);
    onyx_session_release(s);
    free(bytes);
  }
  unsetenv("ONYX_OPT_NCHWC_BLOCK");
}

/* A stem: X [1, 3, 9, 8] -> Conv 3x3 stride 2 pads 1 (3 -> C1) + Relu ->
 * depthwise 3x3 -> pointwise (C1 -> C0): the stem reads X as it is (no
 * ReorderInput) and writes the blocked layout. */
static void test_stem(void** state) {
  (void)state;
  enum { SH = 9, SW = 8, OH = 5, OW = 4 };
  static float ws[C1 * 3 * 9], bs[C1], x[3 * SH * SW], y[C0 * OH * OW];
  fill(ws, C1 * 27, 51, 0.4f);
  fill(bs, C1, 53, 0.2f);
  fill(x, 3 * SH * SW, 55, 1.0f);
  for (int b = 8; b <= 16; b += 8) {
    setenv("ONYX_OPT_NCHWC_BLOCK", b == 8 ? "8" : "16", 1);
    OxTestModel* m = otm_new(14);
    otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 3, SH, SW});
    otm_initializer(m, "Ws", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C1, 3, 3, 3}, ws);
    otm_initializer(m, "Bs", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C1}, bs);
    otm_initializer(m, "Wd", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C1, 1, 3, 3}, wd);
    otm_initializer(m, "Bd", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C1}, bd);
    otm_initializer(m, "W2", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C0, C1, 1, 1}, w2);
    otm_initializer(m, "B2", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C0}, b2);
    OxTestNode* st = conv(m, "stem", "X,Ws,Bs", "S", 3, 1);
    otm_attr_ints(st, "strides", 2, (int64_t[]){2, 2});
    otm_node(m, "Relu", "relu", "S", "R");
    conv(m, "dw", "R,Wd,Bd", "D", 3, C1);
    conv(m, "pw", "D,W2,B2", "Y", 1, 1);
    otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, C0, OH, OW});
    uint8_t* bytes = NULL;
    size_t len = 0;
    otm_serialize(m, &bytes, &len);
    otm_free(m);
    OnyxSession* s = open_session(bytes, len, NULL);
    assert_int_equal(count_op(s, "NchwcConv"), 3);
    assert_int_equal(count_op(s, "ReorderInput"), 0);
    assert_int_equal(count_op(s, "ReorderOutput"), 1);
    /* the reference: the stride-2 stem written out, then the chain */
    static double r[C1 * OH * OW], d[C1 * OH * OW], yr[C0 * OH * OW];
    for (size_t o = 0; o < C1; o++)
      for (size_t i = 0; i < OH; i++)
        for (size_t j = 0; j < OW; j++) {
          double acc = bs[o];
          for (size_t ci = 0; ci < 3; ci++)
            for (size_t u = 0; u < 3; u++)
              for (size_t v = 0; v < 3; v++) {
                const long ii = (long)(2 * i + u) - 1, jj = (long)(2 * j + v) - 1;
                if (ii < 0 || jj < 0 || ii >= SH || jj >= SW) continue;
                acc += (double)x[(ci * SH + (size_t)ii) * SW + (size_t)jj] *
                       ws[((o * 3 + ci) * 3 + u) * 3 + v];
              }
          r[(o * OH + i) * OW + j] = acc < 0 ? 0 : acc;
        }
    conv_ref(r, C1, OH, OW, wd, bd, C1, 3, 1, C1, d);
    conv_ref(d, C1, OH, OW, w2, b2, C0, 1, 0, 1, yr);
    const int64_t dims[4] = {1, 3, SH, SW};
    OnyxValue* in = NULL;
    assert_null(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dims, 4, x, sizeof x, &in));
    const char* in_names[] = {"X"};
    const char* out_name = "Y";
    OnyxValue* out = NULL;
    assert_null(
        onyx_session_run(s, NULL, in_names, (const OnyxValue* const*)&in, 1, &out_name, 1, &out));
    memcpy(y, onyx_tensor_data(onyx_value_tensor(out)), sizeof y);
    for (size_t i = 0; i < C0 * OH * OW; i++)
      if (fabs(y[i] - yr[i]) > 1e-4 * (1 + fabs(yr[i])))
        fail_msg("block %d: Y[%zu] = %.9g, want %.9g", b, i, y[i], yr[i]);
    onyx_value_release(out);
    onyx_value_release(in);
    onyx_session_release(s);
    free(bytes);
  }
  unsetenv("ONYX_OPT_NCHWC_BLOCK");
}

/* A lone pointwise conv + Relu: a chain of one conv stays NCHW. */
static void test_lone_conv(void** state) {
  (void)state;
  setenv("ONYX_OPT_NCHWC_BLOCK", "16", 1);
  OxTestModel* m = otm_new(14);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, C0, H, W});
  otm_initializer(m, "W1", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C1, C0, 1, 1}, w1);
  conv(m, "pw1", "X,W1", "P1", 1, 1);
  otm_node(m, "Relu", "relu", "P1", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, C1, H, W});
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = open_session(bytes, len, NULL);
  assert_int_equal(count_op(s, "NchwcConv") + count_op(s, "ReorderInput"), 0);
  assert_int_equal(count_op(s, "FusedConv"), 1);
  onyx_session_release(s);
  free(bytes);
  unsetenv("ONYX_OPT_NCHWC_BLOCK");
}

/* [authork, cpu]: the test provider takes the residual Add (same-shape
 * float32 Adds); the chain ends before it with a ReorderOutput of P2, and
 * the Add stays on authork, reading NCHW tensors. */
static void test_other_provider(void** state) {
  (void)state;
  setenv("ONYX_OPT_NCHWC_BLOCK", "8", 1);
  uint8_t* bytes = NULL;
  size_t len = 0;
  block_model(&bytes, &len);
  OnyxSession* s = open_session(bytes, len, "authork");
  assert_int_equal(count_op(s, "NchwcConv"), 5);
  assert_int_equal(count_op(s, "ReorderInput"), 1);
  assert_int_equal(count_op(s, "ReorderOutput"), 2); /* P2 (for the Add) and A */
  bool add_seen = false;
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
    const OxNode* n = s->prog.graph->nodes[i];
    if (!strcmp(n->op_type, "Add")) {
      add_seen = true;
      assert_string_equal(s->prog.eps[n->ep].name, "authork");
      assert_int_equal(n->inputs[0]->rank, 4);
      assert_int_equal(n->inputs[1]->rank, 4);
    } else if (n->ep >= 0 && strcmp(s->prog.eps[n->ep].name, "cpu")) {
      fail_msg("%s (%s) on %s", n->name, n->op_type, s->prog.eps[n->ep].name);
    }
  }
  assert_true(add_seen);
  check_outputs(s, "authork");
  onyx_session_release(s);
  free(bytes);
  unsetenv("ONYX_OPT_NCHWC_BLOCK");
}

/* --- full and grouped convs admitted (the blocked kernel's direct loop) --- */

/* X -> pw (C0 -> C1) -> Relu -> full 3x3 (C1 -> C1) -> grouped 3x3 (C1 ->
 * C1, 5 groups of 4 channels) -> pw (C1 -> C0): one chain of four convs
 * (one ReorderInput, one ReorderOutput), blocks 8 and 16, against the
 * reference here. */
static void test_full_grouped_admitted(void** state) {
  (void)state;
  static float wf[C1 * C1 * 9], bf[C1], wg[C1 * 4 * 9], bg[C1], x[C0 * H * W], y[C0 * H * W];
  fill(wf, C1 * C1 * 9, 61, 0.2f);
  fill(bf, C1, 63, 0.2f);
  fill(wg, C1 * 4 * 9, 65, 0.3f);
  fill(bg, C1, 67, 0.2f);
  fill(x, C0 * H * W, 69, 1.5f);
  static double xd[C0 * H * W], r[C1 * H * W], f[C1 * H * W], g[C1 * H * W], yr[C0 * H * W];
  for (size_t i = 0; i < C0 * H * W; i++)
    xd[i] = x[i];
  conv_ref(xd, C0, H, W, w1, b1, C1, 1, 0, 1, r);
  for (size_t i = 0; i < C1 * H * W; i++)
    r[i] = r[i] < 0 ? 0 : r[i];
  conv_ref(r, C1, H, W, wf, bf, C1, 3, 1, 1, f);
  conv_ref(f, C1, H, W, wg, bg, C1, 3, 1, 5, g);
  conv_ref(g, C1, H, W, w2, b2, C0, 1, 0, 1, yr);
  for (int b = 8; b <= 16; b += 8) {
    setenv("ONYX_OPT_NCHWC_BLOCK", b == 8 ? "8" : "16", 1);
    OxTestModel* m = otm_new(14);
    otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, C0, H, W});
    otm_initializer(m, "W1", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C1, C0, 1, 1}, w1);
    otm_initializer(m, "B1", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C1}, b1);
    otm_initializer(m, "Wf", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C1, C1, 3, 3}, wf);
    otm_initializer(m, "Bf", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C1}, bf);
    otm_initializer(m, "Wg", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C1, 4, 3, 3}, wg);
    otm_initializer(m, "Bg", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C1}, bg);
    otm_initializer(m, "W2", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C0, C1, 1, 1}, w2);
    otm_initializer(m, "B2", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C0}, b2);
    conv(m, "pw1", "X,W1,B1", "P1", 1, 1);
    otm_node(m, "Relu", "relu", "P1", "R");
    conv(m, "full", "R,Wf,Bf", "F", 3, 1);
    conv(m, "grouped", "F,Wg,Bg", "G", 3, 5);
    conv(m, "pw2", "G,W2,B2", "Y", 1, 1);
    otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, C0, H, W});
    uint8_t* bytes = NULL;
    size_t len = 0;
    otm_serialize(m, &bytes, &len);
    otm_free(m);
    OnyxSession* s = open_session(bytes, len, NULL);
    assert_int_equal(count_op(s, "NchwcConv"), 4);
    assert_int_equal(count_op(s, "FusedConv") + count_op(s, "Conv"), 0);
    assert_int_equal(count_op(s, "ReorderInput"), 1);
    assert_int_equal(count_op(s, "ReorderOutput"), 1);
    run(s, x, "Y", y, C0 * H * W);
    for (size_t i = 0; i < C0 * H * W; i++)
      if (fabs(y[i] - yr[i]) > 1e-4 * (1 + fabs(yr[i])))
        fail_msg("block %d: Y[%zu] = %.9g, want %.9g", b, i, y[i], yr[i]);
    onyx_session_release(s);
    free(bytes);
  }
  unsetenv("ONYX_OPT_NCHWC_BLOCK");
}

/* Convs the pass leaves to the NCHW paths, each between two pointwise
 * convs (which alone would make a chain of two): a 3x3 stride-1 conv of 16
 * channels over 36 output tiles of 4x4 (Winograd's), a 1x1 stride-2
 * projection, one of 144 output channels, one of 16 x 9 x 9 products per
 * output, and a depthwise conv with a channel multiplier of 2 (grouped,
 * one input channel per group). */
static void test_full_not_admitted(void** state) {
  (void)state;
  enum { N = 16, S = 24 };
  /* k, stride, pad, out channels, group */
  static const int64_t CASES[][5] = {
      {3, 1, 1, N, 1}, {1, 2, 0, N, 1}, {3, 2, 1, 144, 1}, {9, 1, 4, N, 1}, {3, 1, 1, 2 * N, N}};
  static float wp[N * 144], wm[144 * N * 81];
  fill(wp, N * 144, 71, 0.2f);
  fill(wm, 144 * N * 81, 73, 0.05f);
  setenv("ONYX_OPT_NCHWC_BLOCK", "16", 1);
  for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
    const int64_t* e = CASES[c];
    const int64_t mo = e[3], o = (S + 2 * e[2] - e[0]) / e[1] + 1;
    OxTestModel* m = otm_new(14);
    otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, N, S, S});
    otm_initializer(m, "Wa", ONYX_ELEM_FLOAT32, 4, (int64_t[]){N, N, 1, 1}, wp);
    otm_initializer(m, "Wm", ONYX_ELEM_FLOAT32, 4, (int64_t[]){mo, N / e[4], e[0], e[0]}, wm);
    otm_initializer(m, "Wb", ONYX_ELEM_FLOAT32, 4, (int64_t[]){N, mo, 1, 1}, wp);
    conv(m, "pa", "X,Wa", "A", 1, 1);
    OxTestNode* mid = otm_node(m, "Conv", "mid", "A,Wm", "M");
    otm_attr_ints(mid, "kernel_shape", 2, (int64_t[]){e[0], e[0]});
    otm_attr_ints(mid, "pads", 4, (int64_t[]){e[2], e[2], e[2], e[2]});
    if (e[4] > 1) otm_attr_int(mid, "group", e[4]);
    otm_attr_ints(mid, "strides", 2, (int64_t[]){e[1], e[1]});
    conv(m, "pb", "M,Wb", "Y", 1, 1);
    otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, N, o, o});
    uint8_t* bytes = NULL;
    size_t len = 0;
    otm_serialize(m, &bytes, &len);
    otm_free(m);
    OnyxSession* s = open_session(bytes, len, NULL);
    if (count_op(s, "NchwcConv") != 0) fail_msg("case %zu: the middle conv was admitted", c);
    onyx_session_release(s);
    free(bytes);
  }
  unsetenv("ONYX_OPT_NCHWC_BLOCK");
}

int main(void) {
  init_weights();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_block_rewritten),
      cmocka_unit_test(test_chain_split),
      cmocka_unit_test(test_stem),
      cmocka_unit_test(test_lone_conv),
      cmocka_unit_test(test_other_provider),
      cmocka_unit_test(test_full_grouped_admitted),
      cmocka_unit_test(test_full_not_admitted),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
