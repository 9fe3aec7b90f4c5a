/* test_hostile_kernels.c — the CPU provider's kernels against hostile
 * attribute and input values (docs/security.md, the bad-input catalogue).
 *
 * Most cases feed their shape-setting values as run-time inputs of unknown
 * shape, so shape inference cannot refuse them and the kernel itself must
 * give either the correct result or a clear error (code and the words that
 * name the op and what overflowed); a few use constants, reached through
 * constant folding at session creation. Run under ASan+UBSan, each case also
 * shows there is no undefined behaviour, no wild access and no leak. The
 * last cases stop long kernels with onyx_run_options_terminate from another
 * thread. */
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>
#include "onyx/onyx.h"
#include "ox_test_models.h"

#define F32 ONYX_ELEM_FLOAT32
#define I64 ONYX_ELEM_INT64
#define DIMS(...)                                                                                  \
  (int64_t[]) {                                                                                    \
    __VA_ARGS__                                                                                    \
  }

/* --- helpers -------------------------------------------------------------------------- */

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

/* Asserts st's code and that its message holds each of the NULL-terminated
 * fragments; releases st. */
static void expect_error(OnyxStatus* st, OnyxStatusCode code, const char* what, ...) {
  if (!st) fail_msg("%s: expected an error, got success", what);
  const char* msg = onyx_status_message(st);
  if (onyx_status_code(st) != code)
    fail_msg("%s: expected code %s, got %s: %s", what, onyx_status_code_name(code),
             onyx_status_code_name(onyx_status_code(st)), msg);
  va_list ap;
  va_start(ap, what);
  for (const char* sub; (sub = va_arg(ap, const char*));)
    if (!strstr(msg, sub)) fail_msg("%s: message lacks '%s': %s", what, sub, msg);
  va_end(ap);
  onyx_status_release(st);
}

/* An error that shape inference (at session creation: ONYX_INVALID_MODEL)
 * or the kernel (at the run: ONYX_INVALID_ARGUMENT) gives, with the
 * NULL-terminated fragments either names. */
static void expect_refused(OnyxStatus* st, const char* what, ...) {
  if (!st) fail_msg("%s: expected an error, got success", what);
  const char* msg = onyx_status_message(st);
  if (onyx_status_code(st) != ONYX_INVALID_MODEL && onyx_status_code(st) != ONYX_INVALID_ARGUMENT)
    fail_msg("%s: expected INVALID_MODEL or INVALID_ARGUMENT, got %s: %s", what,
             onyx_status_code_name(onyx_status_code(st)), msg);
  va_list ap;
  va_start(ap, what);
  for (const char* sub; (sub = va_arg(ap, const char*));)
    if (!strstr(msg, sub)) fail_msg("%s: message lacks '%s': %s", what, sub, msg);
  va_end(ap);
  onyx_status_release(st);
}

static OnyxSessionOptions* options(void) {
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_threads(o, 1));
  ok(onyx_session_options_set_log_severity(o, ONYX_LOG_FATAL));
  ok(onyx_session_options_add_provider(o, "cpu", NULL, 0, 1));
  return o;
}

static OnyxStatus* create(OxTestModel* m, OnyxSession** s) {
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  OnyxSessionOptions* o = options();
  *s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, s);
  onyx_session_options_release(o);
  free(bytes);
  otm_free(m);
  return st;
}

/* One run input: a name, a type, a shape and its data. */
typedef struct In {
  const char* name;
  OnyxElemType type;
  size_t rank;
  const int64_t* dims;
  const void* data;
} In;

static size_t in_bytes(const In* in) {
  size_t n = 1;
  for (size_t i = 0; i < in->rank; i++)
    n *= (size_t)in->dims[i];
  return n * (in->type == F32 ? 4 : in->type == ONYX_ELEM_FLOAT16 ? 2 : 8);
}

/* Creates the session from m (freed), runs it on the inputs with run options
 * r (may be NULL) and returns the first error, of the creation (shape
 * inference refuses what attributes alone make impossible) or of the run;
 * *y (may be NULL) gets output "Y" on success. */
static OnyxStatus* run_model(OxTestModel* m, const In* ins, size_t n_in, const OnyxRunOptions* r,
                             OnyxValue** y) {
  OnyxSession* s;
  if (y) *y = NULL;
  OnyxStatus* cst = create(m, &s);
  if (cst) return cst;
  OnyxValue* vals[8] = {NULL};
  const char* names[8];
  for (size_t i = 0; i < n_in; i++) {
    names[i] = ins[i].name;
    ok(onyx_value_create_tensor(ins[i].type, ins[i].dims, ins[i].rank, ins[i].data,
                                in_bytes(&ins[i]), &vals[i]));
  }
  const char* out = "Y";
  OnyxValue* got = NULL;
  OnyxStatus* st =
      onyx_session_run(s, r, names, (const OnyxValue* const*)vals, n_in, &out, 1, &got);
  onyx_values_release(vals, n_in);
  if (y)
    *y = got;
  else
    onyx_value_release(got);
  onyx_session_release(s);
  return st;
}

static void expect_f32(const OnyxValue* v, const int64_t* dims, size_t rank, const float* want) {
  const OnyxTensor* t = onyx_value_tensor(v);
  assert_non_null(t);
  assert_int_equal(onyx_tensor_elem_type(t), F32);
  assert_int_equal(onyx_tensor_rank(t), rank);
  size_t n = 1;
  for (size_t i = 0; i < rank; i++) {
    assert_int_equal(onyx_tensor_dims(t)[i], dims[i]);
    n *= (size_t)dims[i];
  }
  const float* got = onyx_tensor_data(t);
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i]) fail_msg("element %zu: got %g, want %g", i, got[i], want[i]);
}

static void expect_i64(const OnyxValue* v, const int64_t* dims, size_t rank, const int64_t* want) {
  const OnyxTensor* t = onyx_value_tensor(v);
  assert_non_null(t);
  assert_int_equal(onyx_tensor_elem_type(t), I64);
  assert_int_equal(onyx_tensor_rank(t), rank);
  size_t n = 1;
  for (size_t i = 0; i < rank; i++) {
    assert_int_equal(onyx_tensor_dims(t)[i], dims[i]);
    n *= (size_t)dims[i];
  }
  const int64_t* got = onyx_tensor_data(t);
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i])
      fail_msg("element %zu: got %lld, want %lld", i, (long long)got[i], (long long)want[i]);
}

/* --- Conv ------------------------------------------------------------------------------- */

/* Y = Conv(X, Wt) with X of unknown shape; Wt (1, 1, kh, 1) all ones, a
 * constant, or with `dynamic` an input of unknown shape too (so that only
 * the kernel sees the window). */
static OxTestModel* conv_model_w(const char* auto_pad, int64_t kh, const int64_t* dilations,
                                 bool dynamic, const int64_t* pads) {
  OxTestModel* m = otm_new(17);
  otm_input_s(m, "X", F32, "N,C,H,W");
  float w[4] = {1, 1, 1, 1};
  if (dynamic)
    otm_input_s(m, "Wt", F32, "M,CG,KH,KW");
  else
    otm_initializer(m, "Wt", F32, 4, DIMS(1, 1, kh, 1), w);
  OxTestNode* n = otm_node(m, "Conv", "conv", "X,Wt", "Y");
  otm_attr_string(n, "auto_pad", auto_pad);
  otm_attr_ints(n, "dilations", 2, dilations);
  if (pads) otm_attr_ints(n, "pads", 4, pads);
  otm_output_s(m, "Y", F32, NULL);
  return m;
}

static OxTestModel* conv_model(const char* auto_pad, int64_t kh, const int64_t* dilations) {
  return conv_model_w(auto_pad, kh, dilations, false, NULL);
}

static const float X25[25] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13,
                              14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25};

/* Both X and W at run time: the kernel sees every value first. */
static OnyxStatus* run_conv_dynamic(const char* auto_pad, int64_t kh, const int64_t* dilations) {
  static const float ones[3] = {1, 1, 1};
  const In ins[] = {{"X", F32, 4, DIMS(1, 1, 5, 5), X25}, {"Wt", F32, 4, DIMS(1, 1, kh, 1), ones}};
  return run_model(conv_model_w(auto_pad, kh, dilations, true, NULL), ins, 2, NULL, NULL);
}

static void test_conv_same_lower_huge_dilation_dynamic(void** state) {
  (void)state;
  expect_error(run_conv_dynamic("SAME_LOWER", 3, DIMS((int64_t)1 << 62, 1)), ONYX_INVALID_ARGUMENT,
               "Conv k=3", "Conv", "overflow", "dilations[0]", NULL);
  expect_error(run_conv_dynamic("SAME_LOWER", 2, DIMS((int64_t)1 << 62, 1)), ONYX_INVALID_ARGUMENT,
               "Conv k=2", "Conv", "overflow", NULL);
  expect_error(run_conv_dynamic("SAME_UPPER", 2, DIMS(INT64_MAX, 1)), ONYX_INVALID_ARGUMENT,
               "Conv INT64_MAX", "Conv", "overflow", "dilations[0]", NULL);
  /* pads of 2^62 - 8 on both sides and a window of 10 fit an int64 (2^63 -
   * 6); only the input height of 10 makes the padded extent overflow */
  const int64_t p = ((int64_t)1 << 62) - 8;
  static const float ones[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  const In ins[] = {{"X", F32, 4, DIMS(1, 1, 10, 1), ones},
                    {"Wt", F32, 4, DIMS(1, 1, 10, 1), ones}};
  expect_error(
      run_model(conv_model_w("NOTSET", 10, DIMS(1, 1), true, DIMS(p, 0, p, 0)), ins, 2, NULL, NULL),
      ONYX_INVALID_ARGUMENT, "Conv pads", "Conv", "overflow", "pads", NULL);
  expect_error(run_conv_dynamic("NOTSET", 3, DIMS(INT64_MAX / 2, 1)), ONYX_INVALID_ARGUMENT,
               "Conv NOTSET", "Conv", "overflow", "dilated kernel extent", NULL);
}

/* float16 has its own Conv loop (cpu_half.c), with the same checks */
static void test_conv_float16_huge_dilation_dynamic(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_input_s(m, "X", ONYX_ELEM_FLOAT16, "N,C,H,W");
  otm_input_s(m, "Wt", ONYX_ELEM_FLOAT16, "M,CG,KH,KW");
  OxTestNode* n = otm_node(m, "Conv", "conv", "X,Wt", "Y");
  otm_attr_string(n, "auto_pad", "SAME_LOWER");
  otm_attr_ints(n, "dilations", 2, DIMS((int64_t)1 << 62, 1));
  otm_output_s(m, "Y", ONYX_ELEM_FLOAT16, NULL);
  uint16_t x[4] = {0x3c00, 0x3c00, 0x3c00, 0x3c00}, w[3] = {0x3c00, 0x3c00, 0x3c00}; /* 1.0 */
  const In ins[] = {{"X", ONYX_ELEM_FLOAT16, 4, DIMS(1, 1, 4, 1), x},
                    {"Wt", ONYX_ELEM_FLOAT16, 4, DIMS(1, 1, 3, 1), w}};
  expect_error(run_model(m, ins, 2, NULL, NULL), ONYX_INVALID_ARGUMENT, "Conv float16", "Conv",
               "overflow", NULL);
}

/* W constant: shape inference or the kernel refuses it, with the same
 * words. */
static void test_conv_same_lower_huge_dilation(void** state) {
  (void)state;
  const In x = {"X", F32, 4, DIMS(1, 1, 5, 5), X25};
  /* 3 taps 2^62 apart span 2^63 + 1: no int64 holds it */
  expect_refused(
      run_model(conv_model("SAME_LOWER", 3, DIMS((int64_t)1 << 62, 1)), &x, 1, NULL, NULL),
      "Conv k=3", "Conv", "overflow", "dilations", NULL);
  /* 2 taps 2^62 apart: the SAME padding (about 2^62) plus the extent overflow */
  expect_refused(
      run_model(conv_model("SAME_LOWER", 2, DIMS((int64_t)1 << 62, 1)), &x, 1, NULL, NULL),
      "Conv k=2", "Conv", "overflow", NULL);
  expect_refused(run_model(conv_model("SAME_UPPER", 2, DIMS(INT64_MAX, 1)), &x, 1, NULL, NULL),
                 "Conv INT64_MAX", "Conv", "overflow", NULL);
}

static void test_conv_large_dilation_that_fits(void** state) {
  (void)state;
  /* 2 taps 2^40 apart, SAME_UPPER: 2^39 rows of padding on each side, so
   * both taps of every window fall in the padding and Y is all zeros. */
  const In x = {"X", F32, 4, DIMS(1, 1, 5, 5), X25};
  OnyxValue* y = NULL;
  ok(run_model(conv_model("SAME_UPPER", 2, DIMS((int64_t)1 << 40, 1)), &x, 1, NULL, &y));
  const float zeros[25] = {0};
  expect_f32(y, DIMS(1, 1, 5, 5), 4, zeros);
  onyx_value_release(y);
  /* 3 taps: 2^40 rows of padding on each side; the middle tap reads the
   * output's own element, the others the padding, so Y = X. */
  ok(run_model(conv_model("SAME_UPPER", 3, DIMS((int64_t)1 << 40, 1)), &x, 1, NULL, &y));
  expect_f32(y, DIMS(1, 1, 5, 5), 4, X25);
  onyx_value_release(y);
}

/* --- MaxPool ---------------------------------------------------------------------------- */

static OxTestModel* maxpool_model_pads(int64_t kh, const int64_t* dilations, const char* auto_pad,
                                       const int64_t* pads) {
  OxTestModel* m = otm_new(12);
  otm_input_s(m, "X", F32, "N,C,H,W");
  OxTestNode* n = otm_node(m, "MaxPool", "pool", "X", "Y");
  otm_attr_ints(n, "kernel_shape", 2, DIMS(kh, 1));
  otm_attr_ints(n, "dilations", 2, dilations);
  if (auto_pad) otm_attr_string(n, "auto_pad", auto_pad);
  if (pads) otm_attr_ints(n, "pads", 4, pads);
  otm_output_s(m, "Y", F32, NULL);
  return m;
}

static OxTestModel* maxpool_model(int64_t kh, const int64_t* dilations, const char* auto_pad) {
  return maxpool_model_pads(kh, dilations, auto_pad, NULL);
}

static void test_maxpool_huge_dilation(void** state) {
  (void)state;
  const In x = {"X", F32, 4, DIMS(1, 1, 5, 5), X25};
  /* the dilation alone overflows: shape inference or the kernel */
  expect_refused(run_model(maxpool_model(2, DIMS(INT64_MAX, 1), NULL), &x, 1, NULL, NULL),
                 "MaxPool", "MaxPool", "overflow", "dilations", NULL);
  expect_refused(run_model(maxpool_model(2, DIMS(INT64_MAX, 1), "SAME_UPPER"), &x, 1, NULL, NULL),
                 "MaxPool SAME", "MaxPool", "overflow", NULL);
  /* pads of 2^62 - 8 on both sides and a window of 10 fit an int64 (2^63 -
   * 6); only the run's input height of 10 makes the padded extent overflow
   * (shape inference may refuse pads past the window first) */
  const int64_t p = ((int64_t)1 << 62) - 8;
  const In x10 = {"X", F32, 4, DIMS(1, 1, 10, 1), X25};
  expect_refused(
      run_model(maxpool_model_pads(10, DIMS(1, 1), NULL, DIMS(p, 0, p, 0)), &x10, 1, NULL, NULL),
      "MaxPool pads", "MaxPool", "pads", NULL);
  /* 2 taps 2^40 apart without padding: the window is larger than the input */
  expect_error(run_model(maxpool_model(2, DIMS((int64_t)1 << 40, 1), NULL), &x, 1, NULL, NULL),
               ONYX_INVALID_ARGUMENT, "MaxPool 2^40", "MaxPool", "larger than the padded input",
               NULL);
}

static void test_maxpool_one_tap_any_dilation(void** state) {
  (void)state;
  /* A 1x1 window covers one element whatever its dilation: Y = X. */
  const In x = {"X", F32, 4, DIMS(1, 1, 5, 5), X25};
  OnyxValue* y = NULL;
  ok(run_model(maxpool_model(1, DIMS(INT64_MAX, 1), NULL), &x, 1, NULL, &y));
  expect_f32(y, DIMS(1, 1, 5, 5), 4, X25);
  onyx_value_release(y);
  /* SAME_UPPER with 3 taps 2^40 apart: 2^40 rows of padding on each side,
   * so the outer taps are always in the padding and the middle one reads
   * the output's own element. */
  ok(run_model(maxpool_model(3, DIMS((int64_t)1 << 40, 1), "SAME_UPPER"), &x, 1, NULL, &y));
  expect_f32(y, DIMS(1, 1, 5, 5), 4, X25);
  onyx_value_release(y);
}

/* --- Tile ------------------------------------------------------------------------------- */

static void test_tile_repeats_overflow(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_input_s(m, "X", F32, "N");
  otm_input_s(m, "R", I64, "K");
  otm_node(m, "Tile", "tile", "X,R", "Y");
  otm_output_s(m, "Y", F32, NULL);
  const In ins[] = {{"X", F32, 1, DIMS(2), (float[]){1, 2}},
                    {"R", I64, 1, DIMS(1), (int64_t[]){INT64_MAX}}};
  expect_error(run_model(m, ins, 2, NULL, NULL), ONYX_INVALID_ARGUMENT, "Tile", "Tile", "overflow",
               "repeats[0]", NULL);
}

static void test_tile_repeats_overflow_folded(void** state) {
  (void)state;
  /* Both inputs constant: the Tile runs at session creation (constant
   * folding) and its error fails the creation. */
  OxTestModel* m = otm_new(13);
  otm_input(m, "Z", F32, 1, DIMS(1));
  otm_initializer(m, "X", F32, 1, DIMS(2), (float[]){1, 2});
  otm_initializer(m, "R", I64, 1, DIMS(1), (int64_t[]){INT64_MAX});
  otm_node(m, "Tile", "tile", "X,R", "T");
  otm_node(m, "Add", "add", "T,Z", "Y");
  otm_output_s(m, "Y", F32, NULL);
  OnyxSession* s;
  OnyxStatus* st = create(m, &s);
  if (!st) fail_msg("a Tile of 2 x INT64_MAX elements was accepted");
  assert_null(s);
  if (!strstr(onyx_status_message(st), "Tile"))
    fail_msg("the error does not name the Tile: %s", onyx_status_message(st));
  onyx_status_release(st);
}

/* --- Slice ------------------------------------------------------------------------------ */

static OxTestModel* slice_model(void) {
  OxTestModel* m = otm_new(13);
  otm_input_s(m, "X", F32, "A,B");
  otm_input_s(m, "S", I64, "K");
  otm_input_s(m, "E", I64, "K");
  otm_input_s(m, "AX", I64, "K");
  otm_input_s(m, "ST", I64, "K");
  otm_node(m, "Slice", "slice", "X,S,E,AX,ST", "Y");
  otm_output_s(m, "Y", F32, NULL);
  return m;
}

static void slice_case(int64_t axis, int64_t start, int64_t end, int64_t step, const int64_t* dims,
                       const float* want) {
  static const float x[6] = {0, 1, 2, 3, 4, 5}; /* 2 x 3 */
  const In ins[] = {{"X", F32, 2, DIMS(2, 3), x},
                    {"S", I64, 1, DIMS(1), &start},
                    {"E", I64, 1, DIMS(1), &end},
                    {"AX", I64, 1, DIMS(1), &axis},
                    {"ST", I64, 1, DIMS(1), &step}};
  OnyxValue* y = NULL;
  ok(run_model(slice_model(), ins, 5, NULL, &y));
  expect_f32(y, dims, 2, want);
  onyx_value_release(y);
}

static void test_slice_extreme_steps(void** state) {
  (void)state;
  /* One element per axis: the first (or, stepping back, the last) row or
   * column. */
  slice_case(0, 0, 2, INT64_MAX, DIMS(1, 3), (float[]){0, 1, 2});
  slice_case(0, -1, INT64_MIN, INT64_MIN, DIMS(1, 3), (float[]){3, 4, 5});
  slice_case(1, 0, INT64_MAX, INT64_MAX, DIMS(2, 1), (float[]){0, 3});
  slice_case(1, INT64_MAX, INT64_MIN, INT64_MIN, DIMS(2, 1), (float[]){2, 5});
  slice_case(1, INT64_MIN, INT64_MAX, 2, DIMS(2, 2), (float[]){0, 2, 3, 5});
}

/* --- Pad -------------------------------------------------------------------------------- */

static void pad_error(int64_t begin, int64_t end) {
  OxTestModel* m = otm_new(13);
  otm_input_s(m, "X", F32, "N");
  otm_input_s(m, "P", I64, "K");
  otm_node(m, "Pad", "pad", "X,P", "Y");
  otm_output_s(m, "Y", F32, NULL);
  const In ins[] = {{"X", F32, 1, DIMS(3), (float[]){1, 2, 3}},
                    {"P", I64, 1, DIMS(2), (int64_t[]){begin, end}}};
  char what[64];
  snprintf(what, sizeof what, "Pad %lld %lld", (long long)begin, (long long)end);
  expect_error(run_model(m, ins, 2, NULL, NULL), ONYX_INVALID_ARGUMENT, what, "Pad", "overflow",
               NULL);
}

static void test_pad_extreme_pads(void** state) {
  (void)state;
  pad_error(INT64_MIN, 0);
  pad_error(0, INT64_MIN);
  pad_error(INT64_MAX, 0);
  pad_error(0, INT64_MAX);
  pad_error(INT64_MAX, INT64_MIN); /* sums to 2 but crops past INT64_MIN */
}

/* --- EyeLike ---------------------------------------------------------------------------- */

static void eyelike_case(int64_t k, const float* want) {
  OxTestModel* m = otm_new(17);
  otm_input_s(m, "X", F32, "A,B");
  OxTestNode* n = otm_node(m, "EyeLike", "eye", "X", "Y");
  otm_attr_int(n, "k", k);
  otm_output_s(m, "Y", F32, NULL);
  const In x = {"X", F32, 2, DIMS(2, 3), (float[]){9, 9, 9, 9, 9, 9}};
  OnyxValue* y = NULL;
  ok(run_model(m, &x, 1, NULL, &y));
  expect_f32(y, DIMS(2, 3), 2, want);
  onyx_value_release(y);
}

static void test_eyelike_extreme_k(void** state) {
  (void)state;
  static const float zeros[6] = {0};
  eyelike_case(INT64_MAX, zeros);
  eyelike_case(INT64_MIN, zeros);
  eyelike_case(INT64_MAX - 1, zeros);
  eyelike_case(1, (float[]){0, 1, 0, 0, 0, 1});
  eyelike_case(-1, (float[]){0, 0, 0, 1, 0, 0});
}

/* LRN with size INT64_MAX: the window clipped to the channels is every
 * channel, each visited once, never a walk over size's values nor a
 * ch + size / 2 that overflows. With alpha / size below 1e-18 the scale is
 * 1: Y = X. */
static void test_lrn_size_max(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_input_s(m, "X", F32, "N,C,H,W");
  OxTestNode* n = otm_node(m, "LRN", "lrn", "X", "Y");
  otm_attr_int(n, "size", INT64_MAX);
  otm_attr_float(n, "alpha", 1.0f);
  otm_output_s(m, "Y", F32, NULL);
  const float xv[3] = {1, 2, 3};
  const In x = {"X", F32, 4, DIMS(1, 3, 1, 1), xv};
  OnyxValue* y = NULL;
  ok(run_model(m, &x, 1, NULL, &y));
  expect_f32(y, DIMS(1, 3, 1, 1), 4, xv);
  onyx_value_release(y);
}

/* --- Range ------------------------------------------------------------------------------ */

static OxTestModel* range_model(OnyxElemType t) {
  OxTestModel* m = otm_new(11);
  otm_input_s(m, "S", t, "");
  otm_input_s(m, "L", t, "");
  otm_input_s(m, "D", t, "");
  otm_node(m, "Range", "range", "S,L,D", "Y");
  otm_output_s(m, "Y", t, NULL);
  return m;
}

static OnyxStatus* run_range_i64(int64_t start, int64_t limit, int64_t delta, OnyxValue** y) {
  const In ins[] = {
      {"S", I64, 0, NULL, &start}, {"L", I64, 0, NULL, &limit}, {"D", I64, 0, NULL, &delta}};
  return run_model(range_model(I64), ins, 3, NULL, y);
}

static void test_range_extremes(void** state) {
  (void)state;
  /* 2^64 - 1 elements */
  expect_error(run_range_i64(INT64_MIN, INT64_MAX, 1, NULL), ONYX_INVALID_ARGUMENT, "Range +1",
               "Range", "too large", NULL);
  expect_error(run_range_i64(INT64_MAX, INT64_MIN, -1, NULL), ONYX_INVALID_ARGUMENT, "Range -1",
               "Range", "too large", NULL);
  /* ceil((2^64 - 1) / (2^63 - 1)) = 3 elements, the last 2 steps of
   * INT64_MAX from INT64_MIN */
  OnyxValue* y = NULL;
  ok(run_range_i64(INT64_MIN, INT64_MAX, INT64_MAX, &y));
  expect_i64(y, DIMS(3), 1, (int64_t[]){INT64_MIN, -1, INT64_MAX - 1});
  onyx_value_release(y);
  /* the other way: ceil(-(2^64 - 1) / -2^63) = 2 elements */
  ok(run_range_i64(INT64_MAX, INT64_MIN, INT64_MIN, &y));
  expect_i64(y, DIMS(2), 1, (int64_t[]){INT64_MAX, -1});
  onyx_value_release(y);
  ok(run_range_i64(INT64_MAX, INT64_MIN, 1, &y)); /* empty */
  expect_i64(y, DIMS(0), 1, NULL);
  onyx_value_release(y);
  /* float32 whose count is far beyond int64 */
  const float fs = -3e38f, fl = 3e38f, fd = 1;
  const In ins[] = {{"S", F32, 0, NULL, &fs}, {"L", F32, 0, NULL, &fl}, {"D", F32, 0, NULL, &fd}};
  expect_error(run_model(range_model(F32), ins, 3, NULL, NULL), ONYX_INVALID_ARGUMENT,
               "Range float", "Range", "too large", NULL);
}

/* --- shapes from run-time values ----------------------------------------------------- */

static void test_reshape_split_overflow(void** state) {
  (void)state;
  /* shape [2^62, 2^62, 4]: the product overflows (the input has 4 elements) */
  OxTestModel* m = otm_new(14);
  otm_input_s(m, "X", F32, "N");
  otm_input_s(m, "S", I64, "K");
  otm_node(m, "Reshape", "reshape", "X,S", "Y");
  otm_output_s(m, "Y", F32, NULL);
  const int64_t big = (int64_t)1 << 62;
  const In rs[] = {{"X", F32, 1, DIMS(4), (float[]){1, 2, 3, 4}},
                   {"S", I64, 1, DIMS(3), (int64_t[]){big, big, 4}}};
  expect_error(run_model(m, rs, 2, NULL, NULL), ONYX_INVALID_ARGUMENT, "Reshape", "Reshape",
               "overflow", NULL);
  /* split [INT64_MAX, 2] sums past int64 */
  m = otm_new(13);
  otm_input_s(m, "X", F32, "N");
  otm_input_s(m, "S", I64, "K");
  otm_node(m, "Split", "split", "X,S", "Y,Z");
  otm_output_s(m, "Y", F32, NULL);
  otm_output_s(m, "Z", F32, NULL);
  const In sp[] = {{"X", F32, 1, DIMS(4), (float[]){1, 2, 3, 4}},
                   {"S", I64, 1, DIMS(2), (int64_t[]){INT64_MAX, 2}}};
  expect_error(run_model(m, sp, 2, NULL, NULL), ONYX_INVALID_ARGUMENT, "Split", "Split", "overflow",
               NULL);
}

static void test_depth_to_space_overflow(void** state) {
  (void)state;
  /* an empty input (no channels) whose height times the block overflows */
  OxTestModel* m = otm_new(13);
  otm_input_s(m, "X", F32, "N,C,H,W");
  OxTestNode* n = otm_node(m, "DepthToSpace", "d2s", "X", "Y");
  otm_attr_int(n, "blocksize", 2);
  otm_output_s(m, "Y", F32, NULL);
  const In x = {"X", F32, 4, DIMS(1, 0, (int64_t)1 << 62, 1), NULL};
  expect_error(run_model(m, &x, 1, NULL, NULL), ONYX_INVALID_ARGUMENT, "DepthToSpace",
               "DepthToSpace", "overflow", "blocksize", NULL);
}

static void test_roi_batch_index_beyond_int64(void** state) {
  (void)state;
  /* RoiAlign reads batch_indices as doubles: INT64_MAX rounds to 2^63 */
  OxTestModel* m = otm_new(16);
  otm_input_s(m, "X", F32, "N,C,H,W");
  otm_input_s(m, "R", F32, "K,4");
  otm_input_s(m, "B", I64, "K");
  otm_node(m, "RoiAlign", "roi", "X,R,B", "Y");
  otm_output_s(m, "Y", F32, NULL);
  const In ins[] = {{"X", F32, 4, DIMS(1, 1, 2, 2), (float[]){1, 2, 3, 4}},
                    {"R", F32, 2, DIMS(1, 4), (float[]){0, 0, 1, 1}},
                    {"B", I64, 1, DIMS(1), (int64_t[]){INT64_MAX}}};
  expect_error(run_model(m, ins, 3, NULL, NULL), ONYX_INVALID_ARGUMENT, "RoiAlign", "RoiAlign",
               "batch_indices", "out of range", NULL);
  /* MaxRoiPool's batch index is a float in the roi row */
  m = otm_new(13);
  otm_input_s(m, "X", F32, "N,C,H,W");
  otm_input_s(m, "R", F32, "K,5");
  OxTestNode* n = otm_node(m, "MaxRoiPool", "pool", "X,R", "Y");
  otm_attr_ints(n, "pooled_shape", 2, DIMS(1, 1));
  otm_output_s(m, "Y", F32, NULL);
  const In mp[] = {{"X", F32, 4, DIMS(1, 1, 2, 2), (float[]){1, 2, 3, 4}},
                   {"R", F32, 2, DIMS(1, 5), (float[]){1e30f, 0, 0, 1, 1}}};
  expect_error(run_model(m, mp, 2, NULL, NULL), ONYX_INVALID_ARGUMENT, "MaxRoiPool", "MaxRoiPool",
               "batch index", NULL);
}

static void test_lstm_hidden_size_overflow(void** state) {
  (void)state;
  /* 4 gates x 2^62 wraps to 0 in 64 bits: W [1, 0, 1] and an empty R
   * [1, 0, 2^62] would match it */
  OxTestModel* m = otm_new(14);
  otm_input_s(m, "X", F32, "S,B,I");
  otm_input_s(m, "W", F32, "D,G,I");
  otm_input_s(m, "R", F32, "D,G,H");
  OxTestNode* n = otm_node(m, "LSTM", "lstm", "X,W,R", "Y");
  otm_attr_int(n, "hidden_size", (int64_t)1 << 62);
  otm_output_s(m, "Y", F32, NULL);
  const In ins[] = {{"X", F32, 3, DIMS(1, 1, 1), (float[]){1}},
                    {"W", F32, 3, DIMS(1, 0, 1), NULL},
                    {"R", F32, 3, DIMS(1, 0, (int64_t)1 << 62), NULL}};
  expect_refused(run_model(m, ins, 3, NULL, NULL), "LSTM", "LSTM", "hidden_size", NULL);
}

/* --- the CPU provider's options ---------------------------------------------------------- */

static void test_threads_option_out_of_range(void** state) {
  (void)state;
  const size_t n = 1000000;
  char* digits = malloc(n + 1);
  assert_non_null(digits);
  memset(digits, '9', n);
  digits[n] = '\0';
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(2));
  otm_node(m, "Relu", "relu", "X", "Y");
  otm_output(m, "Y", F32, 1, DIMS(2));
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  const char* values[] = {digits, "-1", "4x", "", "99999999999999999999"};
  for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
    OnyxSessionOptions* o = options();
    ok(onyx_session_options_set_provider_option(o, "cpu", "threads", values[i]));
    OnyxSession* s = NULL;
    OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
    assert_null(s);
    const char* msg = onyx_status_message(st);
    if (st && strlen(msg) > 1000) fail_msg("the message quotes the whole value (%zu)", strlen(msg));
    char what[32];
    snprintf(what, sizeof what, "threads value %zu", i);
    expect_error(st, ONYX_INVALID_CONFIG, what, "'threads'",
                 i == 0 || i == 4 ? "out of range" : "non-negative integer", NULL);
    onyx_session_options_release(o);
  }
  /* a plain count still works */
  OnyxSessionOptions* o = options();
  ok(onyx_session_options_set_provider_option(o, "cpu", "threads", "2"));
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_release(s);
  onyx_session_options_release(o);
  free(bytes);
  free(digits);
}

/* --- cancellation ------------------------------------------------------------------------ */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct Job {
  OnyxSession* s;
  const In* ins;
  size_t n_in;
  OnyxRunOptions* r;
  OnyxStatus* st;
  double end;
} Job;

static void* job_run(void* arg) {
  Job* j = arg;
  OnyxValue* vals[8] = {NULL};
  const char* names[8];
  for (size_t i = 0; i < j->n_in; i++) {
    names[i] = j->ins[i].name;
    ok(onyx_value_create_tensor(j->ins[i].type, j->ins[i].dims, j->ins[i].rank, j->ins[i].data,
                                in_bytes(&j->ins[i]), &vals[i]));
  }
  const char* out = "Y";
  OnyxValue* got = NULL;
  j->st =
      onyx_session_run(j->s, j->r, names, (const OnyxValue* const*)vals, j->n_in, &out, 1, &got);
  j->end = now_s();
  onyx_values_release(vals, j->n_in);
  onyx_value_release(got);
  return NULL;
}

/* Runs m (one node) on another thread and terminates the run 20 ms after
 * it starts, while the kernel runs: the host checks only between nodes, so
 * the run ends with ONYX_CANCELLED only because the kernel polls, and it
 * must end within seconds of the terminate, where the whole kernel takes far
 * longer. The run's buffers are freed (LeakSanitizer, valgrind). */
static void expect_cancelled(OxTestModel* m, const In* ins, size_t n_in, const char* what) {
  Job j = {.ins = ins, .n_in = n_in};
  ok(create(m, &j.s));
  ok(onyx_run_options_create(&j.r));
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, job_run, &j), 0);
  struct timespec pause = {0, 20 * 1000000};
  nanosleep(&pause, NULL);
  const double t0 = now_s();
  onyx_run_options_terminate(j.r);
  pthread_join(th, NULL);
  const double took = j.end - t0;
  expect_error(j.st, ONYX_CANCELLED, what, "cancelled", NULL);
  if (took > 5.0) fail_msg("%s: stopped %.2f s after the terminate", what, took);
  onyx_run_options_release(j.r);
  onyx_session_release(j.s);
}

static void test_cancel_long_range(void** state) {
  (void)state;
  /* 2^27 float32 elements: 512 MiB reserved, only the pages written before
   * the stop touched */
  const float s = 0, l = (float)(1 << 27), d = 1;
  const In ins[] = {{"S", F32, 0, NULL, &s}, {"L", F32, 0, NULL, &l}, {"D", F32, 0, NULL, &d}};
  expect_cancelled(range_model(F32), ins, 3, "Range");
}

static void test_cancel_long_tile(void** state) {
  (void)state;
  /* one element repeated 2^26 times, as 2^26 rows of 1 (int64: 512 MiB) */
  OxTestModel* m = otm_new(13);
  otm_input_s(m, "X", I64, "A,B");
  otm_input_s(m, "R", I64, "K");
  otm_node(m, "Tile", "tile", "X,R", "Y");
  otm_output_s(m, "Y", I64, NULL);
  const In ins[] = {{"X", I64, 2, DIMS(1, 1), (int64_t[]){7}},
                    {"R", I64, 1, DIMS(2), (int64_t[]){(int64_t)1 << 26, 1}}};
  expect_cancelled(m, ins, 2, "Tile");
}

static void test_cancel_long_lppool(void** state) {
  (void)state;
  /* one output whose window has 2^31 taps (all but one in the padding):
   * minutes of pow() over a 1x1 input, in no memory */
  OxTestModel* m = otm_new(18);
  otm_input_s(m, "X", F32, "N,C,H,W");
  OxTestNode* n = otm_node(m, "LpPool", "lp", "X", "Y");
  otm_attr_ints(n, "kernel_shape", 2, DIMS(1, (int64_t)1 << 31));
  otm_attr_ints(n, "pads", 4, DIMS(0, 0, 0, ((int64_t)1 << 31) - 1));
  otm_output_s(m, "Y", F32, NULL);
  const In x = {"X", F32, 4, DIMS(1, 1, 1, 1), (float[]){2}};
  expect_cancelled(m, &x, 1, "LpPool");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_same_lower_huge_dilation_dynamic),
      cmocka_unit_test(test_conv_same_lower_huge_dilation),
      cmocka_unit_test(test_conv_float16_huge_dilation_dynamic),
      cmocka_unit_test(test_conv_large_dilation_that_fits),
      cmocka_unit_test(test_maxpool_huge_dilation),
      cmocka_unit_test(test_maxpool_one_tap_any_dilation),
      cmocka_unit_test(test_lrn_size_max),
      cmocka_unit_test(test_tile_repeats_overflow),
      cmocka_unit_test(test_tile_repeats_overflow_folded),
      cmocka_unit_test(test_slice_extreme_steps),
      cmocka_unit_test(test_pad_extreme_pads),
      cmocka_unit_test(test_eyelike_extreme_k),
      cmocka_unit_test(test_range_extremes),
      cmocka_unit_test(test_reshape_split_overflow),
      cmocka_unit_test(test_depth_to_space_overflow),
      cmocka_unit_test(test_roi_batch_index_beyond_int64),
      cmocka_unit_test(test_lstm_hidden_size_overflow),
      cmocka_unit_test(test_threads_option_out_of_range),
      cmocka_unit_test(test_cancel_long_range),
      cmocka_unit_test(test_cancel_long_tile),
      cmocka_unit_test(test_cancel_long_lppool),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
