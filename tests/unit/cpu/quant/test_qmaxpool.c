/* test_qmaxpool.c — 2-D MaxPool on int8 / uint8 (providers/cpu/cpu_qpool.c)
 * through the public API: a table of geometries (strides 1 to 3, dilations,
 * begin and end pads, ceil_mode, rows narrower and wider than a vector, one
 * column), both signednesses, random bytes including each type's extremes,
 * against a plain loop written here: the maximum of a window's taps inside
 * X, compared as the type orders them. The same cases run through
 * com.microsoft NhwcMaxPool on X channels-last ([N, H, W, C]). Session
 * creation refuses channels-last ops it cannot run (a window past the
 * padded input, channels that do not match W, groups, channels_last 0). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "onyx/onyx.h"
#include "ox_test_models.h"

static uint32_t rng = 777;
static uint8_t rand_byte(void) {
  rng = rng * 1664525u + 1013904223u;
  return (uint8_t)(rng >> 24);
}

typedef struct PoolCase {
  int64_t n, c, h, w;
  int64_t kh, kw, sh, sw, dh, dw;
  int64_t pt, pl, pb, pr;
  int64_t ceil_mode;
} PoolCase;

static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1,
                       bool ceil_mode) {
  const int64_t span = in + p0 + p1 - ((k - 1) * d + 1);
  int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  /* ceil_mode: a window that starts in the end pad is dropped */
  if (ceil_mode && (o - 1) * s >= in + p0) o--;
  return o;
}

static void run_case(const PoolCase* pc, bool is_signed, bool nhwc) {
  const size_t nx = (size_t)(pc->n * pc->c * pc->h * pc->w);
  uint8_t* x = malloc(nx);
  assert_non_null(x);
  for (size_t i = 0; i < nx; i++)
    x[i] = rand_byte();
  x[0] = is_signed ? 0x80 : 0x00;                  /* the lowest value */
  if (nx > 1) x[nx - 1] = is_signed ? 0x7f : 0xff; /* the highest */
  const OnyxElemType t = is_signed ? ONYX_ELEM_INT8 : ONYX_ELEM_UINT8;
  uint8_t* xh = malloc(nx); /* X channels-last */
  assert_non_null(xh);
  const int64_t plane = pc->h * pc->w;
  for (int64_t i = 0; i < pc->n * pc->c; i++)
    for (int64_t q = 0; q < plane; q++)
      xh[((i / pc->c) * plane + q) * pc->c + i % pc->c] = x[i * plane + q];
  OxTestModel* m = otm_new(13);
  if (nhwc) otm_add_opset(m, "com.microsoft", 1);
  otm_initializer(m, "X", t, 4,
                  nhwc ? (int64_t[]){pc->n, pc->h, pc->w, pc->c}
                       : (int64_t[]){pc->n, pc->c, pc->h, pc->w},
                  nhwc ? xh : x);
  OxTestNode* node = otm_node(m, nhwc ? "NhwcMaxPool" : "MaxPool", "mp", "X", "Y");
  if (nhwc) otm_node_domain(node, "com.microsoft");
  otm_attr_ints(node, "kernel_shape", 2, (int64_t[]){pc->kh, pc->kw});
  otm_attr_ints(node, "strides", 2, (int64_t[]){pc->sh, pc->sw});
  otm_attr_ints(node, "dilations", 2, (int64_t[]){pc->dh, pc->dw});
  otm_attr_ints(node, "pads", 4, (int64_t[]){pc->pt, pc->pl, pc->pb, pc->pr});
  otm_attr_int(node, "ceil_mode", pc->ceil_mode);
  const int64_t oh = out_dim(pc->h, pc->kh, pc->sh, pc->dh, pc->pt, pc->pb, pc->ceil_mode);
  const int64_t ow = out_dim(pc->w, pc->kw, pc->sw, pc->dw, pc->pl, pc->pr, pc->ceil_mode);
  otm_output(m, "Y", t, 4,
             nhwc ? (int64_t[]){pc->n, oh, ow, pc->c} : (int64_t[]){pc->n, pc->c, oh, ow});
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* opts = NULL;
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_options_create(&opts);
  /* unoptimized: the constant X is not folded away */
  if (!st) st = onyx_session_options_set_optimization_level(opts, ONYX_OPT_DISABLED);
  if (!st) st = onyx_session_options_set_threads(opts, 2);
  if (!st) st = onyx_session_create_from_bytes(opts, bytes, len, NULL, &s);
  onyx_session_options_release(opts);
  free(bytes);
  if (st) fail_msg("session: %s", onyx_status_message(st));
  const char* name = "Y";
  OnyxValue* y = NULL;
  st = onyx_session_run(s, NULL, NULL, NULL, 0, &name, 1, &y);
  if (st) fail_msg("run: %s", onyx_status_message(st));
  const OnyxTensor* yt = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_elem_type(yt), t);
  assert_int_equal(onyx_tensor_dims(yt)[nhwc ? 1 : 2], oh);
  assert_int_equal(onyx_tensor_dims(yt)[nhwc ? 2 : 3], ow);
  const uint8_t* got = onyx_tensor_data(yt);
  for (int64_t p = 0; p < pc->n * pc->c; p++)
    for (int64_t i = 0; i < oh; i++)
      for (int64_t j = 0; j < ow; j++) {
        int best = is_signed ? -128 : 0;
        for (int64_t a = 0; a < pc->kh; a++)
          for (int64_t b = 0; b < pc->kw; b++) {
            const int64_t hi = i * pc->sh - pc->pt + a * pc->dh;
            const int64_t wi = j * pc->sw - pc->pl + b * pc->dw;
            if (hi < 0 || hi >= pc->h || wi < 0 || wi >= pc->w) continue;
            const uint8_t raw = x[(p * pc->h + hi) * pc->w + wi];
            const int v = is_signed ? (int)(int8_t)raw : (int)raw;
            if (v > best) best = v;
          }
        const int64_t img = p / pc->c, ch = p % pc->c;
        const uint8_t g =
            got[nhwc ? ((img * oh + i) * ow + j) * pc->c + ch : (p * oh + i) * ow + j];
        const int gv = is_signed ? (int)(int8_t)g : (int)g;
        if (gv != best)
          fail_msg("%s %s %lldx%lld k%lldx%lld s%lld,%lld: plane %lld (%lld, %lld) = %d, "
                   "want %d",
                   nhwc ? "NhwcMaxPool" : "MaxPool", is_signed ? "int8" : "uint8", (long long)pc->h,
                   (long long)pc->w, (long long)pc->kh, (long long)pc->kw, (long long)pc->sh,
                   (long long)pc->sw, (long long)p, (long long)i, (long long)j, gv, best);
      }
  onyx_value_release(y);
  onyx_session_release(s);
  free(x);
  free(xh);
}

static void test_geometries(void** state) {
  (void)state;
  static const PoolCase cases[] = {
      /* n  c   h    w  kh kw sh sw dh dw pt pl pb pr ceil */
      {1, 64, 112, 112, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0}, /* ResNet's stem */
      {2, 3, 8, 8, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 0},
      {1, 2, 9, 37, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0},
      {1, 3, 10, 41, 3, 5, 2, 3, 1, 1, 0, 2, 1, 0, 0},
      {1, 2, 11, 23, 3, 3, 1, 2, 2, 2, 2, 2, 2, 2, 0},
      {1, 2, 7, 9, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 1},  /* ceil: windows past the end */
      {1, 1, 5, 1, 3, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0},  /* one column */
      {1, 1, 1, 70, 1, 4, 1, 1, 1, 1, 0, 3, 0, 3, 0}, /* one row, wider than a vector */
      {2, 2, 6, 6, 6, 6, 1, 1, 1, 1, 0, 0, 0, 0, 0},  /* the whole plane */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    for (int sgn = 0; sgn < 2; sgn++)
      for (int nhwc = 0; nhwc < 2; nhwc++)
        run_case(&cases[i], sgn, nhwc);
}

/* A model that session creation must refuse with a message holding `want`
 * (the schemas' checked shape inference of the channels-last ops). */
static void expect_refused(OxTestModel* m, const char* want) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* opts = NULL;
  OnyxSession* s = NULL;
  assert_null(onyx_session_options_create(&opts));
  OnyxStatus* st = onyx_session_create_from_bytes(opts, bytes, len, NULL, &s);
  onyx_session_options_release(opts);
  free(bytes);
  if (!st) fail_msg("session created; want an error with \"%s\"", want);
  if (!strstr(onyx_status_message(st), want))
    fail_msg("error \"%s\" lacks \"%s\"", onyx_status_message(st), want);
  onyx_status_release(st);
}

static OxTestModel* nhwc_pool_model(int64_t h, int64_t k, int64_t pad) {
  OxTestModel* m = otm_new(13);
  otm_add_opset(m, "com.microsoft", 1);
  otm_input(m, "X", ONYX_ELEM_UINT8, 4, (int64_t[]){1, h, h, 3});
  OxTestNode* n = otm_node(m, "NhwcMaxPool", "pool", "X", "Y");
  otm_node_domain(n, "com.microsoft");
  otm_attr_ints(n, "kernel_shape", 2, (int64_t[]){k, k});
  otm_attr_ints(n, "pads", 4, (int64_t[]){pad, pad, pad, pad});
  otm_output(m, "Y", ONYX_ELEM_UINT8, 4, (int64_t[]){-1, -1, -1, -1});
  return m;
}

static OxTestModel* nhwc_conv_model(int64_t c, int64_t group, int64_t channels_last) {
  static const uint8_t w[4 * 4 * 9] = {0};
  static const float sc = 0.5f;
  static const uint8_t zp = 0;
  OxTestModel* m = otm_new(13);
  otm_add_opset(m, "com.onyx", 1);
  otm_input(m, "X", ONYX_ELEM_UINT8, 4, (int64_t[]){1, 5, 5, c});
  otm_initializer(m, "W", ONYX_ELEM_UINT8, 4, (int64_t[]){4, 4 / group, 3, 3}, w);
  otm_initializer(m, "s", ONYX_ELEM_FLOAT32, 0, NULL, &sc);
  otm_initializer(m, "z", ONYX_ELEM_UINT8, 0, NULL, &zp);
  OxTestNode* n = otm_node(m, "QLinearConv", "conv", "X,s,z,W,s,z,s,z", "Y");
  otm_node_domain(n, "com.onyx");
  otm_attr_int(n, "channels_last", channels_last);
  otm_attr_int(n, "group", group);
  otm_output(m, "Y", ONYX_ELEM_UINT8, 4, (int64_t[]){-1, -1, -1, -1});
  return m;
}

/* The channels-last ops' shape inference refuses what they cannot run,
 * naming the field. */
static void test_nhwc_refused(void** state) {
  (void)state;
  expect_refused(nhwc_pool_model(4, 7, 1), "larger than the padded input");
  expect_refused(nhwc_conv_model(5, 1, 1), "x has 5 channels but w expects 4");
  expect_refused(nhwc_conv_model(4, 2, 1), "group 1");
  expect_refused(nhwc_conv_model(4, 1, 0), "channels_last = 1");
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_geometries),
                                     cmocka_unit_test(test_nhwc_refused)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
