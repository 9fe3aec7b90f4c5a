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
 * provider's node, never moved. Pools, Concat and BatchNormalization: a
 * chain across MaxPool, a Concat on the channel axis (an aligned input
 * first, a padded one last), a standalone BatchNormalization and an
 * AveragePool (ceil_mode, count_include_pad) becomes NchwcMaxPool, a
 * Concat of blocked tensors, NchwcBatchNormalization (the Relu after it
 * applied there) and NchwcAveragePool, the zero Pad before it dropped;
 * its output is that of a reference in double and of the NCHW path (the
 * pass off); a Concat whose unaligned input is not last
 * stays NCHW and ends the chain; with authork taking an Add between the
 * MaxPool and the Concat, the Add stays there, reading NCHW. The blocked
 * pool and batch normalization ops written wrong by hand fail session
 * creation with an error naming the node. */
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

/* --- pools, Concat and BatchNormalization inside a chain --------------------------------- */

enum { CM = 32, CQ = 20, CT = CM + CQ, MH = 4, MW = 3, AH = 2, AW = 2 };

static void same_outputs(const float* got, const float* want, size_t count, const char* what) {
  for (size_t i = 0; i < count; i++)
    if (fabs(got[i] - want[i]) > 1e-4 * (1 + fabs(want[i])))
      fail_msg("%s: [%zu] = %.9g, the NCHW path's %.9g", what, i, got[i], want[i]);
}

static float wp1[CM * C0], bp1[CM], wq[CQ * CM], bq[CQ], wp3[C0 * CT], bp3[C0], bn_s[CT], bn_b[CT],
    bn_m[CT], bn_v[CT];

static void init_pool_weights(void) {
  fill(wp1, CM * C0, 61, 0.4f);
  fill(bp1, CM, 63, 0.3f);
  fill(wq, CQ * CM, 65, 0.3f);
  fill(bq, CQ, 67, 0.3f);
  fill(wp3, C0 * CT, 69, 0.3f);
  fill(bp3, C0, 71, 0.2f);
  fill(bn_s, CT, 73, 1.0f);
  fill(bn_b, CT, 75, 0.5f);
  fill(bn_m, CT, 77, 0.5f);
  fill(bn_v, CT, 79, 0.5f);
  for (size_t i = 0; i < CT; i++)
    bn_v[i] += 0.6f; /* positive variances */
}

static void pool_initializers(OxTestModel* m) {
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, C0, H, W});
  otm_initializer(m, "Wp1", ONYX_ELEM_FLOAT32, 4, (int64_t[]){CM, C0, 1, 1}, wp1);
  otm_initializer(m, "Bp1", ONYX_ELEM_FLOAT32, 1, (int64_t[]){CM}, bp1);
  otm_initializer(m, "Wq", ONYX_ELEM_FLOAT32, 4, (int64_t[]){CQ, CM, 1, 1}, wq);
  otm_initializer(m, "Bq", ONYX_ELEM_FLOAT32, 1, (int64_t[]){CQ}, bq);
  otm_initializer(m, "Wp3", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C0, CT, 1, 1}, wp3);
  otm_initializer(m, "Bp3", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C0}, bp3);
  otm_initializer(m, "bn_s", ONYX_ELEM_FLOAT32, 1, (int64_t[]){CT}, bn_s);
  otm_initializer(m, "bn_b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){CT}, bn_b);
  otm_initializer(m, "bn_m", ONYX_ELEM_FLOAT32, 1, (int64_t[]){CT}, bn_m);
  otm_initializer(m, "bn_v", ONYX_ELEM_FLOAT32, 1, (int64_t[]){CT}, bn_v);
}

static void maxpool_3x3_s2(OxTestModel* m, const char* in, const char* out) {
  OxTestNode* n = otm_node(m, "MaxPool", "maxpool", in, out);
  otm_attr_ints(n, "kernel_shape", 2, (int64_t[]){3, 3});
  otm_attr_ints(n, "strides", 2, (int64_t[]){2, 2});
  otm_attr_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
}

/* X -> pw1 (C0 -> 32) + Relu -> MaxPool 3x3 s2 p1 -> M; Q = pw2(M) (32 ->
 * 20); Concat(M, Q) (the aligned 32 first, the padded 20 last) ->
 * BatchNormalization -> Relu -> pw3 (52 -> C0) -> Pad (zeros) ->
 * AveragePool 2x2 s2
 * ceil_mode count_include_pad -> Y [1, C0, 2, 2] (the window past the
 * 3-wide input counted with its pad). M, 7x6 -> 4x3. */
static void pool_chain_model(uint8_t** bytes, size_t* len) {
  OxTestModel* m = otm_new(14);
  pool_initializers(m);
  conv(m, "pw1", "X,Wp1,Bp1", "P1", 1, 1);
  otm_node(m, "Relu", "relu1", "P1", "R1");
  maxpool_3x3_s2(m, "R1", "M");
  conv(m, "pw2", "M,Wq,Bq", "Q", 1, 1);
  otm_attr_int(otm_node(m, "Concat", "cat", "M,Q", "Cat"), "axis", 1);
  OxTestNode* bn = otm_node(m, "BatchNormalization", "bn", "Cat,bn_s,bn_b,bn_m,bn_v", "Bn");
  otm_attr_float(bn, "epsilon", 1e-3f);
  otm_node(m, "Relu", "relu2", "Bn", "Br");
  conv(m, "pw3", "Br,Wp3,Bp3", "P3", 1, 1);
  /* DenseNet's transitions: a Pad of zero pads before the AveragePool */
  otm_initializer(m, "zpads", ONYX_ELEM_INT64, 1, (int64_t[]){8},
                  (int64_t[]){0, 0, 0, 0, 0, 0, 0, 0});
  otm_node(m, "Pad", "pad", "P3,zpads", "P3p");
  OxTestNode* ap = otm_node(m, "AveragePool", "avgpool", "P3p", "Y");
  otm_attr_ints(ap, "kernel_shape", 2, (int64_t[]){2, 2});
  otm_attr_ints(ap, "strides", 2, (int64_t[]){2, 2});
  otm_attr_int(ap, "ceil_mode", 1);
  otm_attr_int(ap, "count_include_pad", 1);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, C0, AH, AW});
  otm_serialize(m, bytes, len);
  otm_free(m);
}

/* The model above in double: every op written out. */
static void pool_chain_ref(const float* xf, double* y) {
  static double x[C0 * H * W], r1[CM * H * W], cat[CT * MH * MW], p3[C0 * MH * MW];
  for (size_t i = 0; i < C0 * H * W; i++)
    x[i] = xf[i];
  conv_ref(x, C0, H, W, wp1, bp1, CM, 1, 0, 1, r1);
  for (size_t i = 0; i < CM * H * W; i++)
    r1[i] = r1[i] < 0 ? 0 : r1[i];
  for (size_t c = 0; c < CM; c++) /* MaxPool 3x3, stride 2, pads 1 into cat[0..32) */
    for (size_t i = 0; i < MH; i++)
      for (size_t j = 0; j < MW; j++) {
        double best = -INFINITY;
        for (long u = -1; u <= 1; u++)
          for (long v = -1; v <= 1; v++) {
            const long ii = (long)(2 * i) + u, jj = (long)(2 * j) + v;
            if (ii < 0 || jj < 0 || ii >= H || jj >= W) continue;
            const double t = r1[(c * H + (size_t)ii) * W + (size_t)jj];
            best = t > best ? t : best;
          }
        cat[(c * MH + i) * MW + j] = best;
      }
  conv_ref(cat, CM, MH, MW, wq, bq, CQ, 1, 0, 1, cat + CM * MH * MW); /* Q after M */
  for (size_t c = 0; c < CT; c++)
    for (size_t q = 0; q < MH * MW; q++) {
      double* v = &cat[c * MH * MW + q];
      *v = (*v - bn_m[c]) / sqrt((double)bn_v[c] + 1e-3) * bn_s[c] + bn_b[c];
      *v = *v < 0 ? 0 : *v;
    }
  conv_ref(cat, CT, MH, MW, wp3, bp3, C0, 1, 0, 1, p3);
  /* AveragePool 2x2 stride 2, ceil_mode: rows 0-1, 2-3; columns 0-1 and
   * 2-3, column 3 past the 3-wide input: count_include_pad counts the
   * taps inside the padded input (no pads here: the taps inside X) */
  for (size_t c = 0; c < C0; c++)
    for (size_t i = 0; i < AH; i++)
      for (size_t j = 0; j < AW; j++) {
        double sum = 0;
        size_t n = 0;
        for (size_t u = 0; u < 2; u++)
          for (size_t v = 0; v < 2; v++)
            if (2 * j + v < MW) sum += p3[(c * MH + 2 * i + u) * MW + 2 * j + v], n++;
        y[(c * AH + i) * AW + j] = sum / (double)n;
      }
}

static void test_pool_concat_bn_chain(void** state) {
  (void)state;
  init_pool_weights();
  uint8_t* bytes = NULL;
  size_t len = 0;
  pool_chain_model(&bytes, &len);
  static float x[C0 * H * W], y[C0 * AH * AW], y_nchw[C0 * AH * AW];
  static double yr[C0 * AH * AW];
  fill(x, C0 * H * W, 81, 2.0f);
  pool_chain_ref(x, yr);
  setenv("ONYX_OPT_DISABLE", "layout_nchwc", 1);
  OnyxSession* s = open_session(bytes, len, NULL);
  assert_int_equal(count_op(s, "NchwcConv") + count_op(s, "ReorderInput"), 0);
  run(s, x, "Y", y_nchw, C0 * AH * AW);
  onyx_session_release(s);
  unsetenv("ONYX_OPT_DISABLE");
  for (size_t i = 0; i < C0 * AH * AW; i++)
    if (fabs(y_nchw[i] - yr[i]) > 1e-4 * (1 + fabs(yr[i])))
      fail_msg("NCHW path: Y[%zu] = %.9g, want %.9g", i, y_nchw[i], yr[i]);
  static const char* const blocks[] = {"8", "16"};
  for (size_t b = 0; b < 2; b++) {
    setenv("ONYX_OPT_NCHWC_BLOCK", blocks[b], 1);
    s = open_session(bytes, len, NULL);
    assert_int_equal(count_op(s, "NchwcConv"), 3);
    assert_int_equal(count_op(s, "NchwcMaxPool"), 1);
    assert_int_equal(count_op(s, "NchwcAveragePool"), 1);
    assert_int_equal(count_op(s, "NchwcBatchNormalization"), 1);
    assert_int_equal(count_op(s, "MaxPool") + count_op(s, "AveragePool"), 0);
    assert_int_equal(count_op(s, "BatchNormalization"), 0);
    assert_int_equal(count_op(s, "Pad"), 0);           /* the zero Pad: its value is its input's */
    assert_int_equal(count_op(s, "Relu"), 0);          /* relu1 in pw1, relu2 in the BN */
    assert_int_equal(count_op(s, "ReorderInput"), 1);  /* X */
    assert_int_equal(count_op(s, "ReorderOutput"), 1); /* Y */
    assert_int_equal(count_op(s, "Concat"), 1);
    for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
      const OxNode* n = s->prog.graph->nodes[i];
      assert_string_equal(s->prog.eps[n->ep].name, "cpu");
      if (!strcmp(n->op_type, "NchwcBatchNormalization"))
        assert_string_equal(ox_node_attr_string(n, "activation", ""), "Relu");
      if (!strcmp(n->op_type, "Concat")) { /* blocked operands, 32 + 20 channels */
        assert_int_equal(n->inputs[0]->rank, 5);
        assert_int_equal(n->inputs[1]->rank, 5);
        assert_int_equal(n->outputs[0]->dims[1], (CT + atoi(blocks[b]) - 1) / atoi(blocks[b]));
      }
    }
    run(s, x, "Y", y, C0 * AH * AW);
    same_outputs(y, y_nchw, C0 * AH * AW, blocks[b]);
    onyx_session_release(s);
  }
  unsetenv("ONYX_OPT_NCHWC_BLOCK");
  free(bytes);
}

/* Concat(Q, M): Q's 20 channels are no multiple of the block, and Q is not
 * last: the Concat stays NCHW and ends the chain {pw1, MaxPool, pw2} (Q
 * and M leave it through ReorderOutputs); {pw3, pw4} after it is a chain
 * of its own (a ReorderInput of the Concat's value). */
static void test_concat_unaligned(void** state) {
  (void)state;
  init_pool_weights();
  static float w4[C0 * C0], b4[C0];
  fill(w4, C0 * C0, 83, 0.3f);
  fill(b4, C0, 85, 0.2f);
  OxTestModel* m = otm_new(14);
  pool_initializers(m);
  otm_initializer(m, "W4", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C0, C0, 1, 1}, w4);
  otm_initializer(m, "B4", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C0}, b4);
  conv(m, "pw1", "X,Wp1,Bp1", "P1", 1, 1);
  maxpool_3x3_s2(m, "P1", "M");
  conv(m, "pw2", "M,Wq,Bq", "Q", 1, 1);
  otm_attr_int(otm_node(m, "Concat", "cat", "Q,M", "Cat"), "axis", 1);
  conv(m, "pw3", "Cat,Wp3,Bp3", "P3", 1, 1);
  conv(m, "pw4", "P3,W4,B4", "Y", 1, 1);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, C0, MH, MW});
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  static float x[C0 * H * W], y[C0 * MH * MW], y_nchw[C0 * MH * MW];
  fill(x, C0 * H * W, 87, 2.0f);
  setenv("ONYX_OPT_DISABLE", "layout_nchwc", 1);
  OnyxSession* s = open_session(bytes, len, NULL);
  run(s, x, "Y", y_nchw, C0 * MH * MW);
  onyx_session_release(s);
  unsetenv("ONYX_OPT_DISABLE");
  for (int b = 8; b <= 16; b += 8) {
    setenv("ONYX_OPT_NCHWC_BLOCK", b == 8 ? "8" : "16", 1);
    s = open_session(bytes, len, NULL);
    assert_int_equal(count_op(s, "NchwcConv"), 4);
    assert_int_equal(count_op(s, "NchwcMaxPool"), 1);
    assert_int_equal(count_op(s, "ReorderInput"), 2);  /* X and Cat */
    assert_int_equal(count_op(s, "ReorderOutput"), 3); /* Q, M and Y */
    for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
      const OxNode* n = s->prog.graph->nodes[i];
      if (!strcmp(n->op_type, "Concat")) {
        assert_int_equal(n->inputs[0]->rank, 4);
        assert_int_equal(n->inputs[1]->rank, 4);
        assert_int_equal(n->outputs[0]->rank, 4);
      }
    }
    run(s, x, "Y", y, C0 * MH * MW);
    same_outputs(y, y_nchw, C0 * MH * MW, b == 8 ? "unaligned, 8" : "unaligned, 16");
    onyx_session_release(s);
  }
  unsetenv("ONYX_OPT_NCHWC_BLOCK");
  free(bytes);
}

/* [authork, cpu]: authork takes A = Add(M, M) (same-shape float32 Adds),
 * between the MaxPool and the Concat(M, A) of the chain: the Add stays on
 * authork reading the NCHW M (a ReorderOutput), A enters the Concat
 * through a ReorderInput, and every other node is the CPU provider's. */
static void test_pool_chain_other_provider(void** state) {
  (void)state;
  init_pool_weights();
  static float wa[CM * CM], ba[CM], wc[C0 * 2 * CM], bc[C0];
  fill(wa, CM * CM, 91, 0.2f);
  fill(ba, CM, 93, 0.2f);
  fill(wc, C0 * 2 * CM, 95, 0.2f);
  fill(bc, C0, 97, 0.2f);
  OxTestModel* m = otm_new(14);
  pool_initializers(m);
  otm_initializer(m, "Wa", ONYX_ELEM_FLOAT32, 4, (int64_t[]){CM, CM, 1, 1}, wa);
  otm_initializer(m, "Ba", ONYX_ELEM_FLOAT32, 1, (int64_t[]){CM}, ba);
  otm_initializer(m, "Wc", ONYX_ELEM_FLOAT32, 4, (int64_t[]){C0, 2 * CM, 1, 1}, wc);
  otm_initializer(m, "Bc", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C0}, bc);
  conv(m, "pw1", "X,Wp1,Bp1", "P1", 1, 1);
  conv(m, "pwa", "P1,Wa,Ba", "Pa", 1, 1);
  maxpool_3x3_s2(m, "Pa", "M");
  otm_node(m, "Add", "add", "M,M", "A");
  otm_attr_int(otm_node(m, "Concat", "cat", "M,A", "Cat"), "axis", 1);
  conv(m, "pwc", "Cat,Wc,Bc", "Y", 1, 1);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, C0, MH, MW});
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  static float x[C0 * H * W], y[C0 * MH * MW], y_nchw[C0 * MH * MW];
  fill(x, C0 * H * W, 99, 2.0f);
  setenv("ONYX_OPT_DISABLE", "layout_nchwc", 1);
  OnyxSession* s = open_session(bytes, len, "authork");
  run(s, x, "Y", y_nchw, C0 * MH * MW);
  onyx_session_release(s);
  unsetenv("ONYX_OPT_DISABLE");
  setenv("ONYX_OPT_NCHWC_BLOCK", "16", 1);
  s = open_session(bytes, len, "authork");
  assert_int_equal(count_op(s, "NchwcConv"), 3);
  assert_int_equal(count_op(s, "NchwcMaxPool"), 1);
  assert_int_equal(count_op(s, "ReorderInput"), 2);  /* X and A */
  assert_int_equal(count_op(s, "ReorderOutput"), 2); /* M (for the Add) and Y */
  bool add_seen = false;
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
    const OxNode* n = s->prog.graph->nodes[i];
    if (!strcmp(n->op_type, "Add")) {
      add_seen = true;
      assert_string_equal(s->prog.eps[n->ep].name, "authork");
      assert_int_equal(n->inputs[0]->rank, 4);
    } else {
      assert_string_equal(s->prog.eps[n->ep].name, "cpu");
    }
    if (!strcmp(n->op_type, "Concat")) assert_int_equal(n->inputs[1]->rank, 5);
  }
  assert_true(add_seen);
  run(s, x, "Y", y, C0 * MH * MW);
  same_outputs(y, y_nchw, C0 * MH * MW, "authork");
  onyx_session_release(s);
  unsetenv("ONYX_OPT_NCHWC_BLOCK");
  free(bytes);
}

/* The blocked pool and batch normalization ops written into a model by
 * hand, wrong: session creation fails, naming the node and what is wrong. */
static void expect_error(OxTestModel* m, const char* node, const char* what) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  free(bytes);
  if (!st) fail_msg("%s: the session was created", what);
  const char* msg = onyx_status_message(st);
  if (!strstr(msg, node) || !strstr(msg, what))
    fail_msg("error '%s' does not name '%s' and '%s'", msg, node, what);
  onyx_status_release(st);
}

/* X of the given shape, Y of any: the node comes next. */
static OxTestModel* blocked_model(int x_rank, const int64_t* x_dims) {
  OxTestModel* m = otm_new(14);
  otm_add_opset(m, "com.onyx", 1);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, x_rank, x_dims);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, -1, NULL);
  return m;
}

static void test_blocked_op_errors(void** state) {
  (void)state;
  static const float p9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  /* NchwcMaxPool of an NCHW tensor */
  OxTestModel* m = blocked_model(4, (int64_t[]){1, 8, 4, 4});
  OxTestNode* n = otm_node(m, "NchwcMaxPool", "mp", "X", "Y");
  otm_node_domain(n, "com.onyx");
  otm_attr_ints(n, "kernel_shape", 2, (int64_t[]){2, 2});
  otm_attr_ints(n, "strides", 2, (int64_t[]){1, 1});
  otm_attr_ints(n, "pads", 4, (int64_t[]){0, 0, 0, 0});
  otm_attr_ints(n, "dilations", 2, (int64_t[]){1, 1});
  expect_error(m, "mp", "blocked 5-D");
  /* a window wider than the padded input */
  m = blocked_model(5, (int64_t[]){1, 1, 2, 2, 8});
  n = otm_node(m, "NchwcAveragePool", "ap", "X", "Y");
  otm_node_domain(n, "com.onyx");
  otm_attr_ints(n, "kernel_shape", 2, (int64_t[]){3, 3});
  otm_attr_ints(n, "strides", 2, (int64_t[]){1, 1});
  otm_attr_ints(n, "pads", 4, (int64_t[]){0, 0, 0, 0});
  otm_attr_ints(n, "dilations", 2, (int64_t[]){1, 1});
  expect_error(m, "ap", "exceeds the padded input");
  /* 9 channels of parameters against one block of 8 */
  for (int bad_act = 0; bad_act < 2; bad_act++) {
    m = blocked_model(5, (int64_t[]){1, 1, 2, 2, 8});
    const int64_t c = bad_act ? 8 : 9;
    otm_initializer(m, "s", ONYX_ELEM_FLOAT32, 1, &c, p9);
    otm_initializer(m, "b", ONYX_ELEM_FLOAT32, 1, &c, p9);
    otm_initializer(m, "mu", ONYX_ELEM_FLOAT32, 1, &c, p9);
    otm_initializer(m, "v", ONYX_ELEM_FLOAT32, 1, &c, p9);
    n = otm_node(m, "NchwcBatchNormalization", "bn", "X,s,b,mu,v", "Y");
    otm_node_domain(n, "com.onyx");
    if (bad_act) otm_attr_string(n, "activation", "Tanh");
    expect_error(m, "bn", bad_act ? "activation" : "do not fit");
  }
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
      cmocka_unit_test(test_pool_concat_bn_chain),
      cmocka_unit_test(test_concat_unaligned),
      cmocka_unit_test(test_pool_chain_other_provider),
      cmocka_unit_test(test_blocked_op_errors),
      cmocka_unit_test(test_full_grouped_admitted),
      cmocka_unit_test(test_full_not_admitted),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
