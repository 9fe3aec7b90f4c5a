/* test_hostile_infer.c — hostile attribute and constant values against shape
 * inference (docs/security.md).
 *
 * Each hostile model is built with the test model builder and fed to
 * onyx_session_create_from_bytes: shape arithmetic that would overflow int64,
 * and attribute values the ONNX spec forbids, must fail session creation with
 * ONYX_INVALID_MODEL and a message naming the node and the attribute (or
 * input) at fault, for a static input shape and for one with symbolic dims
 * wherever the value alone is at fault. Edge values the spec allows must
 * still load, with the output shape the spec gives (worked out by hand in
 * each case's comment). Under ASan+UBSan this also proves the inference does
 * its arithmetic without undefined behaviour. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "onyx/onyx.h"
#include "ox_test_models.h"

#define F32 ONYX_ELEM_FLOAT32
#define I64 ONYX_ELEM_INT64
#define DIMS(...)                                                                                  \
  (int64_t[]) {                                                                                    \
    __VA_ARGS__                                                                                    \
  }
#define MAX INT64_MAX
#define MIN INT64_MIN

/* --- helpers -------------------------------------------------------------------------- */

static OnyxStatus* create(OxTestModel* m, OnyxSession** s) {
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  OnyxSessionOptions* o = NULL;
  OnyxStatus* st = onyx_session_options_create(&o);
  if (!st) st = onyx_session_options_set_threads(o, 1);
  if (!st) st = onyx_session_options_set_log_severity(o, ONYX_LOG_FATAL);
  if (!st) st = onyx_session_create_from_bytes(o, bytes, len, NULL, s);
  onyx_session_options_release(o);
  free(bytes);
  otm_free(m);
  return st;
}

/* Session creation must fail with INVALID_MODEL and every substring. */
static void expect_refused(const char* what, OxTestModel* m, const char* const* subs) {
  OnyxSession* s = NULL;
  OnyxStatus* st = create(m, &s);
  if (!st) {
    onyx_session_release(s);
    fail_msg("%s: expected an error, the model loaded", what);
  }
  const char* msg = onyx_status_message(st);
  if (onyx_status_code(st) != ONYX_INVALID_MODEL) {
    print_error("%s: expected INVALID_MODEL, got %d: %s\n", what, (int)onyx_status_code(st), msg);
    onyx_status_release(st);
    fail();
  }
  for (size_t i = 0; subs[i]; i++)
    if (!strstr(msg, subs[i])) {
      print_error("%s: message lacks '%s': %s\n", what, subs[i], msg);
      onyx_status_release(st);
      fail();
    }
  onyx_status_release(st);
}

/* Session creation must succeed and output 0 have the given shape
 * (ONYX_DIM_UNKNOWN for a dim the load cannot know). */
static void expect_shape(const char* what, OxTestModel* m, int32_t rank, const int64_t* dims) {
  OnyxSession* s = NULL;
  OnyxStatus* st = create(m, &s);
  if (st) {
    print_error("%s: %s\n", what, onyx_status_message(st));
    onyx_status_release(st);
    fail();
  }
  OnyxElemType t;
  int32_t r;
  const int64_t* d;
  st = onyx_session_output_info(s, 0, &t, &r, &d);
  if (st) {
    print_error("%s: output info: %s\n", what, onyx_status_message(st));
    onyx_status_release(st);
    onyx_session_release(s);
    fail();
  }
  bool same = r == rank;
  for (int32_t i = 0; same && i < rank; i++)
    same = d[i] == dims[i];
  if (!same) {
    print_error("%s: output has rank %d:", what, (int)r);
    for (int32_t i = 0; i < r; i++)
      print_error(" %lld", (long long)d[i]);
    print_error(", expected rank %d:", (int)rank);
    for (int32_t i = 0; i < rank; i++)
      print_error(" %lld", (long long)dims[i]);
    print_error("\n");
  }
  onyx_session_release(s);
  assert_true(same);
}

/* Session creation and a run with one float input X must succeed and give
 * output Y with exactly the expected float values (small integers and
 * halves, exact in float). */
static void expect_run(const char* what, OxTestModel* m, const int64_t* dims, size_t rank,
                       const float* x, size_t nx, const float* want, size_t nwant) {
  OnyxSession* s = NULL;
  OnyxStatus* st = create(m, &s);
  OnyxValue *in = NULL, *out = NULL;
  if (!st) st = onyx_value_create_tensor(F32, dims, rank, x, nx * sizeof *x, &in);
  const char* in_name = "X";
  const char* out_name = "Y";
  if (!st)
    st = onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &out);
  if (st) {
    print_error("%s: %s\n", what, onyx_status_message(st));
    onyx_status_release(st);
    onyx_value_release(in);
    onyx_session_release(s);
    fail();
  }
  const OnyxTensor* y = onyx_value_tensor(out);
  bool same = y && onyx_tensor_elem_type(y) == F32 && onyx_tensor_elem_count(y) == nwant;
  const float* yd = same ? onyx_tensor_data(y) : NULL;
  for (size_t i = 0; same && i < nwant; i++)
    if (yd[i] != want[i]) {
      print_error("%s: element %zu is %g, expected %g\n", what, i, (double)yd[i], (double)want[i]);
      same = false;
    }
  onyx_value_release(out);
  onyx_value_release(in);
  onyx_session_release(s);
  assert_true(same);
}

#define SUBS(...)                                                                                  \
  (const char* const[]) {                                                                          \
    __VA_ARGS__, NULL                                                                              \
  }

/* X of rank 4: static [1, 1, h, w], or dynamic [N, C, H, W] all symbolic. */
static void input4(OxTestModel* m, bool dynamic, int64_t h, int64_t w) {
  if (dynamic)
    otm_input_s(m, "X", F32, "N,C,H,W");
  else
    otm_input(m, "X", F32, 4, DIMS(1, 1, h, w));
}

/* --- Conv ---------------------------------------------------------------------------- */

/* Conv of X [1,1,8,8] (or symbolic) with a 3x3 W, plus attributes. */
static OxTestModel* conv(bool dynamic, OxTestNode** node) {
  OxTestModel* m = otm_new(17);
  input4(m, dynamic, 8, 8);
  otm_initializer(m, "W", F32, 4, DIMS(1, 1, 3, 3), NULL);
  *node = otm_node(m, "Conv", "conv", "X,W", "Y");
  otm_output(m, "Y", F32, -1, NULL);
  return m;
}

static void test_conv_dilations(void** state) {
  (void)state;
  for (int dyn = 0; dyn < 2; dyn++) {
    OxTestNode* n;
    /* 2^62 x (3 - 1) + 1 overflows the kernel extent. */
    OxTestModel* m = conv(dyn, &n);
    otm_attr_ints(n, "dilations", 2, DIMS((int64_t)1 << 62, 1));
    otm_attr_string(n, "auto_pad", "SAME_LOWER");
    expect_refused("Conv dilations 2^62 SAME_LOWER", m,
                   SUBS("node 'conv' (Conv)", "attribute 'dilations'", "overflows"));
    m = conv(dyn, &n);
    otm_attr_ints(n, "dilations", 2, DIMS((int64_t)1 << 62, 1));
    expect_refused("Conv dilations 2^62", m, SUBS("node 'conv'", "attribute 'dilations'"));
    m = conv(dyn, &n);
    otm_attr_ints(n, "dilations", 2, DIMS(0, 1));
    expect_refused("Conv dilations 0", m, SUBS("node 'conv'", "attribute 'dilations'", ">= 1"));
    m = conv(dyn, &n);
    otm_attr_ints(n, "strides", 2, DIMS(1, -2));
    expect_refused("Conv strides -2", m, SUBS("node 'conv'", "attribute 'strides'", ">= 1"));
    m = conv(dyn, &n);
    otm_attr_ints(n, "kernel_shape", 2, DIMS(0, 3));
    expect_refused("Conv kernel_shape 0", m,
                   SUBS("node 'conv'", "attribute 'kernel_shape'", ">= 1"));
  }
  OxTestNode* n;
  /* Large but fine: extent 1000 x 2 + 1 = 2001; SAME_UPPER keeps ceil(8 / 1) = 8. */
  OxTestModel* m = conv(false, &n);
  otm_attr_ints(n, "dilations", 2, DIMS(1000, 1));
  otm_attr_string(n, "auto_pad", "SAME_UPPER");
  expect_shape("Conv dilations 1000 SAME_UPPER", m, 4, DIMS(1, 1, 8, 8));
  /* NOTSET: extents 3 x 2 + 1 = 7 and 3: 8 - 7 + 1 = 2, 8 - 3 + 1 = 6. */
  m = conv(false, &n);
  otm_attr_ints(n, "dilations", 2, DIMS(3, 1));
  expect_shape("Conv dilations 3", m, 4, DIMS(1, 1, 2, 6));
  /* And it runs: with SAME_UPPER's 1000 rows of padding on each side only
   * the middle row of the kernel meets the input, so on ones with a ones
   * kernel each output is the count of in-bounds columns: 2 at the left and
   * right edges, 3 between. */
  m = otm_new(17);
  otm_input(m, "X", F32, 4, DIMS(1, 1, 4, 4));
  static const float ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  otm_initializer(m, "W", F32, 4, DIMS(1, 1, 3, 3), ones);
  n = otm_node(m, "Conv", "conv", "X,W", "Y");
  otm_attr_ints(n, "dilations", 2, DIMS(1000, 1));
  otm_attr_string(n, "auto_pad", "SAME_UPPER");
  otm_output(m, "Y", F32, -1, NULL);
  expect_run("Conv dilations 1000 run", m, DIMS(1, 1, 4, 4), 4, ones, 16,
             (const float[]){2, 3, 3, 2, 2, 3, 3, 2, 2, 3, 3, 2, 2, 3, 3, 2}, 16);
  /* The same window on symbolic dims: only N and M are known. */
  m = conv(true, &n);
  otm_attr_ints(n, "dilations", 2, DIMS(1000, 1));
  expect_shape("Conv dilations 1000 dynamic", m, 4, DIMS(-1, 1, -1, -1));
}

static void test_conv_pads(void** state) {
  (void)state;
  for (int dyn = 0; dyn < 2; dyn++) {
    OxTestNode* n;
    /* Begin + end pads of one axis overflow: refused whatever the input. */
    OxTestModel* m = conv(dyn, &n);
    otm_attr_ints(n, "pads", 4, DIMS(MAX, 0, 1, 0));
    expect_refused("Conv pads MAX+1", m, SUBS("node 'conv'", "attribute 'pads'", "overflows"));
    m = conv(dyn, &n);
    otm_attr_ints(n, "pads", 4, DIMS(0, -1, 0, 0));
    expect_refused("Conv pads -1", m, SUBS("node 'conv'", "attribute 'pads'", "negative"));
  }
  OxTestNode* n;
  /* 8 + MAX overflows the padded extent of the static input. */
  OxTestModel* m = conv(false, &n);
  otm_attr_ints(n, "pads", 4, DIMS(MAX, 0, 0, 0));
  expect_refused("Conv pads MAX", m, SUBS("node 'conv'", "attribute 'pads'", "overflows"));
  /* Large but fine: (8 + 1000 + 1000 - 3) / 1 + 1 = 2006. */
  m = conv(false, &n);
  otm_attr_ints(n, "pads", 4, DIMS(1000, 0, 1000, 0));
  expect_shape("Conv pads 1000", m, 4, DIMS(1, 1, 2006, 6));
}

/* --- Pooling ------------------------------------------------------------------------- */

static OxTestModel* pool(const char* op, int64_t opset, bool dynamic, int64_t h, int64_t w,
                         OxTestNode** node) {
  OxTestModel* m = otm_new(opset);
  input4(m, dynamic, h, w);
  *node = otm_node(m, op, "pool", "X", "Y");
  otm_output(m, "Y", F32, -1, NULL);
  return m;
}

static void test_pool_dilations(void** state) {
  (void)state;
  for (int dyn = 0; dyn < 2; dyn++) {
    OxTestNode* n;
    OxTestModel* m = pool("MaxPool", 12, dyn, 4, 4, &n);
    otm_attr_ints(n, "kernel_shape", 2, DIMS(3, 3));
    otm_attr_ints(n, "dilations", 2, DIMS(MAX, 1));
    expect_refused("MaxPool dilations MAX", m,
                   SUBS("node 'pool' (MaxPool)", "attribute 'dilations'", "overflows"));
    m = pool("AveragePool", 19, dyn, 4, 4, &n);
    otm_attr_ints(n, "kernel_shape", 2, DIMS(2, 2));
    otm_attr_ints(n, "dilations", 2, DIMS(MAX, 1));
    otm_attr_string(n, "auto_pad", "SAME_UPPER");
    expect_refused("AveragePool dilations MAX SAME_UPPER", m,
                   SUBS("node 'pool' (AveragePool)", "attribute 'dilations'"));
  }
  /* Fine: extent (3 - 1) x 2 + 1 = 5 on a 9: (9 - 5) / 1 + 1 = 5. */
  OxTestNode* n;
  OxTestModel* m = pool("MaxPool", 12, false, 9, 4, &n);
  otm_attr_ints(n, "kernel_shape", 2, DIMS(3, 1));
  otm_attr_ints(n, "dilations", 2, DIMS(2, 1));
  expect_shape("MaxPool dilations 2", m, 4, DIMS(1, 1, 5, 4));
}

static void test_pool_strides(void** state) {
  (void)state;
  /* SAME_UPPER gives ceil(3 / MAX) = 1 and ceil(4 / 1) = 4 (ONNX), needing
   * no padding on axis 0 ((1 - 1) x MAX + 2 - 3 < 0) and 1 on axis 1. */
  OxTestNode* n;
  OxTestModel* m = pool("AveragePool", 11, false, 3, 4, &n);
  otm_attr_ints(n, "kernel_shape", 2, DIMS(2, 2));
  otm_attr_ints(n, "strides", 2, DIMS(MAX, 1));
  otm_attr_string(n, "auto_pad", "SAME_UPPER");
  expect_shape("AveragePool SAME_UPPER strides MAX", m, 4, DIMS(1, 1, 1, 4));
  /* Run on 0..11 (rows of 4): the one row of windows covers rows 0-1; the
   * last column's window has one column of end padding, not counted. */
  m = pool("AveragePool", 11, false, 3, 4, &n);
  otm_attr_ints(n, "kernel_shape", 2, DIMS(2, 2));
  otm_attr_ints(n, "strides", 2, DIMS(MAX, 1));
  otm_attr_string(n, "auto_pad", "SAME_UPPER");
  expect_run("AveragePool SAME_UPPER strides MAX run", m, DIMS(1, 1, 3, 4), 4,
             (const float[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 12,
             (const float[]){2.5f, 3.5f, 4.5f, 5}, 4);
  /* NOTSET: (3 - 2) / MAX + 1 = 1; ceil_mode: ceil(1 / MAX) + 1 = 2, but the
   * second window would start at MAX, past the input: 1. */
  m = pool("MaxPool", 12, false, 3, 4, &n);
  otm_attr_ints(n, "kernel_shape", 2, DIMS(2, 2));
  otm_attr_ints(n, "strides", 2, DIMS(MAX, 1));
  otm_attr_int(n, "ceil_mode", 1);
  expect_shape("MaxPool ceil_mode strides MAX", m, 4, DIMS(1, 1, 1, 3));
  for (int dyn = 0; dyn < 2; dyn++) {
    m = pool("AveragePool", 11, dyn, 3, 4, &n);
    otm_attr_ints(n, "kernel_shape", 2, DIMS(2, 2));
    otm_attr_ints(n, "strides", 2, DIMS(0, 1));
    expect_refused("AveragePool strides 0", m, SUBS("node 'pool'", "attribute 'strides'"));
  }
}

static void test_pool_pads(void** state) {
  (void)state;
  for (int dyn = 0; dyn < 2; dyn++) {
    OxTestNode* n;
    /* AveragePool pads of at least the kernel size are refused (as ONNX
     * Runtime does). */
    OxTestModel* m = pool("AveragePool", 11, dyn, 4, 4, &n);
    otm_attr_ints(n, "kernel_shape", 2, DIMS(2, 2));
    otm_attr_ints(n, "pads", 4, DIMS(2, 0, 0, 0));
    expect_refused("AveragePool pads = kernel", m,
                   SUBS("node 'pool' (AveragePool)", "attribute 'pads'", "less than the kernel"));
    m = pool("MaxPool", 12, dyn, 4, 4, &n);
    otm_attr_ints(n, "kernel_shape", 2, DIMS(2, 2));
    otm_attr_ints(n, "pads", 4, DIMS(MAX, 0, MAX, 0));
    expect_refused("MaxPool pads MAX", m, SUBS("node 'pool' (MaxPool)", "attribute 'pads'"));
    m = pool("AveragePool", 11, dyn, 4, 4, &n);
    otm_attr_ints(n, "kernel_shape", 2, DIMS(2, 2));
    otm_attr_ints(n, "pads", 4, DIMS(0, 0, MIN, 0));
    expect_refused("AveragePool pads MIN", m, SUBS("node 'pool'", "attribute 'pads'"));
  }
  /* Fine: pads 1 < kernel 2: (4 + 1 + 1 - 2) / 1 + 1 = 5. */
  OxTestNode* n;
  OxTestModel* m = pool("AveragePool", 11, false, 4, 4, &n);
  otm_attr_ints(n, "kernel_shape", 2, DIMS(2, 2));
  otm_attr_ints(n, "pads", 4, DIMS(1, 0, 1, 0));
  expect_shape("AveragePool pads 1", m, 4, DIMS(1, 1, 5, 3));
  /* A MaxPool window wholly in the padding stays allowed: (4 + 2 - 2) + 1 = 5. */
  m = pool("MaxPool", 12, false, 4, 4, &n);
  otm_attr_ints(n, "kernel_shape", 2, DIMS(2, 2));
  otm_attr_ints(n, "pads", 4, DIMS(2, 0, 0, 0));
  expect_shape("MaxPool pads = kernel", m, 4, DIMS(1, 1, 5, 3));
}

/* --- ConvTranspose ------------------------------------------------------------------- */

/* ConvTranspose of X [1,1,3,3] (or symbolic) with a 3x3 W. */
static OxTestModel* conv_t(bool dynamic, OxTestNode** node) {
  OxTestModel* m = otm_new(17);
  input4(m, dynamic, 3, 3);
  otm_initializer(m, "W", F32, 4, DIMS(1, 2, 3, 3), NULL);
  *node = otm_node(m, "ConvTranspose", "convt", "X,W", "Y");
  otm_output(m, "Y", F32, -1, NULL);
  return m;
}

static void test_conv_transpose(void** state) {
  (void)state;
  for (int dyn = 0; dyn < 2; dyn++) {
    OxTestNode* n;
    OxTestModel* m = conv_t(dyn, &n);
    otm_attr_ints(n, "strides", 2, DIMS(2, 2));
    otm_attr_ints(n, "output_padding", 2, DIMS(2, 0));
    expect_refused(
        "ConvTranspose output_padding = stride", m,
        SUBS("node 'convt' (ConvTranspose)", "attribute 'output_padding'", "less than the stride"));
    m = conv_t(dyn, &n);
    otm_attr_ints(n, "output_padding", 2, DIMS(0, 1));
    expect_refused("ConvTranspose output_padding 1, stride 1", m,
                   SUBS("node 'convt'", "attribute 'output_padding'"));
    m = conv_t(dyn, &n);
    otm_attr_ints(n, "dilations", 2, DIMS(MAX, 1));
    expect_refused("ConvTranspose dilations MAX", m,
                   SUBS("node 'convt'", "attribute 'dilations'", "overflows"));
  }
  OxTestNode* n;
  /* MAX x (3 - 1) overflows the output extent. */
  OxTestModel* m = conv_t(false, &n);
  otm_attr_ints(n, "strides", 2, DIMS(MAX, 1));
  expect_refused("ConvTranspose strides MAX", m,
                 SUBS("node 'convt'", "attribute 'strides'", "overflows"));
  /* Fine: output_padding 1 < dilation 2 (though not < stride 1):
   * 1 x (3 - 1) + 1 + 2 x 2 + 1 = 8, and 1 x 2 + 0 + 3 = 5; M = 2 x group 1. */
  m = conv_t(false, &n);
  otm_attr_ints(n, "dilations", 2, DIMS(2, 1));
  otm_attr_ints(n, "output_padding", 2, DIMS(1, 0));
  expect_shape("ConvTranspose output_padding < dilation", m, 4, DIMS(1, 2, 8, 5));
  /* strides 2, output_padding 1: 2 x 2 + 1 + 3 = 8. */
  m = conv_t(false, &n);
  otm_attr_ints(n, "strides", 2, DIMS(2, 2));
  otm_attr_ints(n, "output_padding", 2, DIMS(1, 1));
  expect_shape("ConvTranspose strides 2", m, 4, DIMS(1, 2, 8, 8));
}

/* --- Tile, Slice, Pad, EyeLike, Range ------------------------------------------------- */

static OxTestModel* tile(bool dynamic, const int64_t* repeats) {
  OxTestModel* m = otm_new(13);
  if (dynamic)
    otm_input_s(m, "X", F32, "N,3");
  else
    otm_input(m, "X", F32, 2, DIMS(2, 3));
  otm_initializer(m, "R", I64, 1, DIMS(2), repeats);
  otm_node(m, "Tile", "tile", "X,R", "Y");
  otm_output(m, "Y", F32, -1, NULL);
  return m;
}

static void test_tile(void** state) {
  (void)state;
  /* 2 x MAX overflows. */
  expect_refused("Tile repeats MAX", tile(false, DIMS(MAX, 1)),
                 SUBS("node 'tile' (Tile)", "input 'repeats'", "overflows"));
  for (int dyn = 0; dyn < 2; dyn++)
    expect_refused("Tile repeats -1", tile(dyn, DIMS(1, -1)),
                   SUBS("node 'tile'", "input 'repeats'", ">= 0"));
  /* A symbolic dim times MAX is fine when the dim is 0 or 1: unknown now. */
  expect_shape("Tile repeats MAX dynamic", tile(true, DIMS(MAX, 2)), 2, DIMS(-1, 6));
  expect_shape("Tile 3 x 4", tile(false, DIMS(3, 4)), 2, DIMS(6, 12));
}

/* Slice-13 of X [5] (or [N]) with one constant starts/ends/steps. */
static OxTestModel* slice(bool dynamic, int64_t start, int64_t end, int64_t step) {
  OxTestModel* m = otm_new(13);
  if (dynamic)
    otm_input_s(m, "X", F32, "N");
  else
    otm_input(m, "X", F32, 1, DIMS(5));
  otm_initializer(m, "S", I64, 1, DIMS(1), DIMS(start));
  otm_initializer(m, "E", I64, 1, DIMS(1), DIMS(end));
  otm_initializer(m, "A", I64, 1, DIMS(1), DIMS(0));
  otm_initializer(m, "P", I64, 1, DIMS(1), DIMS(step));
  otm_node(m, "Slice", "slice", "X,S,E,A,P", "Y");
  otm_output(m, "Y", F32, -1, NULL);
  return m;
}

static void test_slice(void** state) {
  (void)state;
  /* step MIN from the last element: index 4 only. */
  expect_shape("Slice step MIN", slice(false, -1, MIN, MIN), 1, DIMS(1));
  /* step MAX from 0: index 0 only. */
  expect_shape("Slice step MAX", slice(false, 0, MAX, MAX), 1, DIMS(1));
  /* step -1 from the end to before the start: all 5, reversed. */
  expect_shape("Slice step -1", slice(false, -1, MIN, -1), 1, DIMS(5));
  /* starts MIN, ends MAX, step 2: indices 0, 2, 4. */
  expect_shape("Slice MIN..MAX step 2", slice(false, MIN, MAX, 2), 1, DIMS(3));
  expect_shape("Slice step MIN dynamic", slice(true, -1, MIN, MIN), 1, DIMS(-1));
  static const float x[5] = {10, 11, 12, 13, 14};
  expect_run("Slice step MIN run", slice(false, -1, MIN, MIN), DIMS(5), 1, x, 5,
             (const float[]){14}, 1);
  expect_run("Slice step MAX run", slice(false, 0, MAX, MAX), DIMS(5), 1, x, 5, (const float[]){10},
             1);
  expect_run("Slice step -1 run", slice(false, -1, MIN, -1), DIMS(5), 1, x, 5,
             (const float[]){14, 13, 12, 11, 10}, 5);
  expect_run("Slice step MIN dynamic run", slice(true, -1, MIN, MIN), DIMS(5), 1, x, 5,
             (const float[]){14}, 1);
  expect_refused("Slice step 0", slice(false, 0, 5, 0), SUBS("node 'slice'", "'steps'"));
}

/* Pad-13 of X [2, 3] (or [N, 3]) with constant pads. */
static OxTestModel* pad13(bool dynamic, const int64_t* pads) {
  OxTestModel* m = otm_new(13);
  if (dynamic)
    otm_input_s(m, "X", F32, "N,3");
  else
    otm_input(m, "X", F32, 2, DIMS(2, 3));
  otm_initializer(m, "P", I64, 1, DIMS(4), pads);
  otm_node(m, "Pad", "pad", "X,P", "Y");
  otm_output(m, "Y", F32, -1, NULL);
  return m;
}

static void test_pad(void** state) {
  (void)state;
  expect_refused("Pad pads MAX", pad13(false, DIMS(MAX, 0, 0, 0)),
                 SUBS("node 'pad' (Pad)", "input 'pads'", "overflows"));
  expect_refused("Pad pads MIN", pad13(false, DIMS(MIN, 0, 0, 0)),
                 SUBS("node 'pad' (Pad)", "input 'pads'", "negative"));
  expect_refused("Pad pads -3 on 2", pad13(false, DIMS(-3, 0, 0, 0)),
                 SUBS("node 'pad'", "input 'pads'", "negative"));
  for (int dyn = 0; dyn < 2; dyn++) {
    expect_refused("Pad pads MAX + 1", pad13(dyn, DIMS(MAX, 0, 1, 0)),
                   SUBS("node 'pad'", "input 'pads'", "overflows"));
    expect_refused("Pad pads MIN on axis 1", pad13(dyn, DIMS(0, MIN, 0, 0)),
                   SUBS("node 'pad'", "input 'pads'", "negative"));
  }
  /* Fine: 2 + 1 + 2 = 5, 3 - 1 + 0 = 2 (a negative pad crops). */
  expect_shape("Pad 1,-1,2,0", pad13(false, DIMS(1, -1, 2, 0)), 2, DIMS(5, 2));
  expect_shape("Pad 1,-1,2,0 dynamic", pad13(true, DIMS(1, -1, 2, 0)), 2, DIMS(-1, 2));
  /* Pad-2: the pads attribute. */
  OxTestModel* m = otm_new(2);
  otm_input(m, "X", F32, 2, DIMS(2, 3));
  OxTestNode* n = otm_node(m, "Pad", "pad2", "X", "Y");
  otm_attr_ints(n, "pads", 4, DIMS(0, MAX, 0, 0));
  otm_output(m, "Y", F32, -1, NULL);
  expect_refused("Pad-2 pads MAX", m, SUBS("node 'pad2'", "attribute 'pads'", "overflows"));
}

static OxTestModel* eyelike(bool dynamic, int64_t k) {
  OxTestModel* m = otm_new(17);
  if (dynamic)
    otm_input_s(m, "X", F32, "N,M");
  else
    otm_input(m, "X", F32, 2, DIMS(3, 4));
  OxTestNode* n = otm_node(m, "EyeLike", "eye", "X", "Y");
  otm_attr_int(n, "k", k);
  otm_output(m, "Y", F32, -1, NULL);
  return m;
}

static void test_eyelike(void** state) {
  (void)state;
  /* Any k is valid (ONNX): a diagonal past the matrix leaves it all zeros. */
  expect_shape("EyeLike k MAX", eyelike(false, MAX), 2, DIMS(3, 4));
  expect_shape("EyeLike k MIN", eyelike(false, MIN), 2, DIMS(3, 4));
  expect_shape("EyeLike k MAX dynamic", eyelike(true, MAX), 2, DIMS(-1, -1));
  static const float zeros[12] = {0};
  expect_run("EyeLike k MAX run", eyelike(false, MAX), DIMS(3, 4), 2, zeros, 12, zeros, 12);
  expect_run("EyeLike k MIN run", eyelike(false, MIN), DIMS(3, 4), 2, zeros, 12, zeros, 12);
  expect_run("EyeLike k 1 run", eyelike(false, 1), DIMS(3, 4), 2, zeros, 12,
             (const float[]){0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, 12);
  OxTestModel* m = eyelike(false, 0);
  otm_attr_int(otm_node(m, "EyeLike", "eye2", "X", "Z"), "dtype", 1000);
  expect_refused("EyeLike dtype 1000", m, SUBS("node 'eye2'", "attribute 'dtype'"));
}

/* Range of constant scalars start, limit, delta of type `t`. */
static OxTestModel* range(int t, const void* start, const void* limit, const void* delta) {
  OxTestModel* m = otm_new(17);
  otm_initializer(m, "S", t, 0, NULL, start);
  otm_initializer(m, "L", t, 0, NULL, limit);
  otm_initializer(m, "D", t, 0, NULL, delta);
  otm_node(m, "Range", "range", "S,L,D", "Y");
  otm_output(m, "Y", t, -1, NULL);
  return m;
}

static void test_range(void** state) {
  (void)state;
  /* 2^64 - 1 elements: more than int64 counts. */
  expect_refused("Range MIN..MAX", range(I64, DIMS(MIN), DIMS(MAX), DIMS(1)),
                 SUBS("node 'range' (Range)", "'start'", "'limit'", "'delta'"));
  expect_refused("Range MAX..MIN by -1", range(I64, DIMS(MAX), DIMS(MIN), DIMS(-1)),
                 SUBS("node 'range'", "'delta'"));
  expect_refused("Range delta 0", range(I64, DIMS(0), DIMS(5), DIMS(0)),
                 SUBS("node 'range'", "input 'delta' is 0"));
  /* 2e30 float elements: no int64 count (the double -> int64 is checked). */
  expect_refused("Range float -1e30..1e30",
                 range(F32, (float[]){-1e30f}, (float[]){1e30f}, (float[]){1.0f}),
                 SUBS("node 'range'", "'start'", "'limit'", "'delta'"));
  /* Fine: 0, 3, 6, 9 — and MIN, -2^62, 0, 2^62 by 2^62 — and 5 down to 1. */
  expect_shape("Range 0..10 by 3", range(I64, DIMS(0), DIMS(10), DIMS(3)), 1, DIMS(4));
  expect_shape("Range MIN..MAX by 2^62", range(I64, DIMS(MIN), DIMS(MAX), DIMS((int64_t)1 << 62)),
               1, DIMS(4));
  expect_shape("Range 5..0 by -1", range(I64, DIMS(5), DIMS(0), DIMS(-1)), 1, DIMS(5));
  expect_shape("Range empty", range(I64, DIMS(5), DIMS(0), DIMS(1)), 1, DIMS(0));
  expect_shape("Range float 0..1 by 0.25",
               range(F32, (float[]){0.0f}, (float[]){1.0f}, (float[]){0.25f}), 1, DIMS(4));
  /* A start known only at run time: the length is unknown at load. */
  OxTestModel* m = otm_new(17);
  otm_input(m, "S", I64, 0, NULL);
  otm_initializer(m, "L", I64, 0, NULL, DIMS(MAX));
  otm_initializer(m, "D", I64, 0, NULL, DIMS(1));
  otm_node(m, "Range", "range", "S,L,D", "Y");
  otm_output(m, "Y", I64, -1, NULL);
  expect_shape("Range dynamic start", m, 1, DIMS(-1));
}

/* --- Concat, Split ------------------------------------------------------------------- */

static void test_concat_split(void** state) {
  (void)state;
  /* Two declared extents that sum past INT64_MAX (0 elements each). */
  OxTestModel* m = otm_new(17);
  otm_input(m, "A", F32, 2, DIMS(0, MAX));
  otm_input(m, "B", F32, 2, DIMS(0, 1));
  otm_attr_int(otm_node(m, "Concat", "cat", "A,B", "Y"), "axis", 1);
  otm_output(m, "Y", F32, -1, NULL);
  expect_refused("Concat MAX + 1", m, SUBS("node 'cat' (Concat)", "overflows"));
  /* Split sizes whose sum wraps, on a static and a symbolic axis. */
  for (int dyn = 0; dyn < 2; dyn++) {
    m = otm_new(13);
    if (dyn)
      otm_input_s(m, "X", F32, "N");
    else
      otm_input(m, "X", F32, 1, DIMS(3));
    otm_initializer(m, "S", I64, 1, DIMS(2), DIMS(MAX, 2));
    otm_node(m, "Split", "split", "X,S", "Y0,Y1");
    otm_output(m, "Y0", F32, -1, NULL);
    otm_output(m, "Y1", F32, -1, NULL);
    expect_refused("Split sum wraps", m, SUBS("node 'split' (Split)", "'split'", "overflows"));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_dilations),
      cmocka_unit_test(test_conv_pads),
      cmocka_unit_test(test_pool_dilations),
      cmocka_unit_test(test_pool_strides),
      cmocka_unit_test(test_pool_pads),
      cmocka_unit_test(test_conv_transpose),
      cmocka_unit_test(test_tile),
      cmocka_unit_test(test_slice),
      cmocka_unit_test(test_pad),
      cmocka_unit_test(test_eyelike),
      cmocka_unit_test(test_range),
      cmocka_unit_test(test_concat_split),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
