/* test_winograd_session.c — Conv (and Conv + Relu / LeakyRelu / Clip, which
 * the optimizer fuses into com.onyx FusedConv) through a session with the
 * CPU provider, with ONYX_CPU_WINOGRAD=1 (the Winograd path) and =0
 * (im2col): both against a direct convolution written here in double
 * (rtol 1e-4, atol 3e-5 on O(1) outputs), and
 * the two must differ in their rounding somewhere (showing that the switch
 * changed the path) while agreeing closely. Also convs that never take the
 * Winograd path (strided, few channels, small output): bit-identical under
 * both settings. Small images (fewer than 32 4x4 tiles) go to the direct
 * path on AVX-512 machines, so the Winograd cases run with
 * ONYX_CPU_CONV_DIRECT=0, plus two large images with it on. */
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

static uint32_t rng = 777;
static float uniform(void) {
  rng = rng * 1664525u + 1013904223u;
  return (float)((double)(rng >> 8) / (double)(1u << 23) - 1.0);
}

typedef struct Spec {
  int64_t n, c, m, h, w;
  int64_t pads[4]; /* top, left, bottom, right */
  int64_t stride;
  const char* act; /* NULL, "Relu", "LeakyRelu" or "Clip" */
} Spec;

static int64_t out_dim(int64_t in, int64_t pb, int64_t pe, int64_t s) {
  return (in + pb + pe - 3) / s + 1;
}

/* Builds Conv (+ activation) with W and B as initializers, runs it once
 * with X and returns Y's data (malloc'd) and element count. */
static float* run_conv(const Spec* sp, const float* x, const float* w, const float* b,
                       const char* winograd, size_t* count) {
  setenv("ONYX_CPU_WINOGRAD", winograd, 1);
  const int64_t oh = out_dim(sp->h, sp->pads[0], sp->pads[2], sp->stride);
  const int64_t ow = out_dim(sp->w, sp->pads[1], sp->pads[3], sp->stride);
  OxTestModel* m = otm_new(13);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){sp->n, sp->c, sp->h, sp->w});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 4, (int64_t[]){sp->m, sp->c, 3, 3}, w);
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 1, (int64_t[]){sp->m}, b);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){sp->n, sp->m, oh, ow});
  OxTestNode* conv = otm_node(m, "Conv", "conv0", "X,W,B", sp->act ? "T" : "Y");
  otm_attr_ints(conv, "pads", 4, (int64_t[]){sp->pads[0], sp->pads[1], sp->pads[2], sp->pads[3]});
  otm_attr_ints(conv, "strides", 2, (int64_t[]){sp->stride, sp->stride});
  otm_attr_ints(conv, "kernel_shape", 2, (int64_t[]){3, 3});
  if (sp->act && strcmp(sp->act, "Clip") == 0) {
    static const float lo = -0.25f, hi = 0.5f;
    otm_initializer(m, "lo", ONYX_ELEM_FLOAT32, 0, NULL, &lo);
    otm_initializer(m, "hi", ONYX_ELEM_FLOAT32, 0, NULL, &hi);
    otm_node(m, "Clip", "act0", "T,lo,hi", "Y");
  } else if (sp->act) {
    OxTestNode* a = otm_node(m, sp->act, "act0", "T", "Y");
    if (strcmp(sp->act, "LeakyRelu") == 0) otm_attr_float(a, "alpha", 0.125f);
  }
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s));
  free(bytes);
  const int64_t xd[4] = {sp->n, sp->c, sp->h, sp->w};
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, xd, 4, x,
                              (size_t)(sp->n * sp->c * sp->h * sp->w) * sizeof(float), &in));
  OnyxValue* out[1] = {0};
  ok(onyx_session_run(s, NULL, (const char*[]){"X"}, (const OnyxValue* const*)&in, 1,
                      (const char*[]){"Y"}, 1, out));
  const OnyxTensor* t = onyx_value_tensor(out[0]);
  assert_non_null(t);
  *count = onyx_tensor_elem_count(t);
  assert_int_equal(*count, (size_t)(sp->n * sp->m * oh * ow));
  float* y = malloc(*count * sizeof(float));
  memcpy(y, onyx_tensor_data(t), *count * sizeof(float));
  onyx_values_release(out, 1);
  onyx_values_release(&in, 1);
  onyx_session_release(s);
  unsetenv("ONYX_CPU_WINOGRAD");
  return y;
}

static double act(const char* a, double v) {
  if (!a) return v;
  if (strcmp(a, "Relu") == 0) return v < 0 ? 0 : v;
  if (strcmp(a, "LeakyRelu") == 0) return v < 0 ? 0.125 * v : v;
  return v < -0.25 ? -0.25 : v > 0.5 ? 0.5 : v;
}

static double* direct(const Spec* sp, const float* x, const float* w, const float* b) {
  const int64_t oh = out_dim(sp->h, sp->pads[0], sp->pads[2], sp->stride);
  const int64_t ow = out_dim(sp->w, sp->pads[1], sp->pads[3], sp->stride);
  double* y = malloc((size_t)(sp->n * sp->m * oh * ow) * sizeof(double));
  for (int64_t n = 0; n < sp->n; n++)
    for (int64_t o = 0; o < sp->m; o++)
      for (int64_t i = 0; i < oh; i++)
        for (int64_t j = 0; j < ow; j++) {
          double s = b[o];
          for (int64_t c = 0; c < sp->c; c++)
            for (int64_t u = 0; u < 3; u++)
              for (int64_t v = 0; v < 3; v++) {
                const int64_t yy = i * sp->stride + u - sp->pads[0];
                const int64_t xx = j * sp->stride + v - sp->pads[1];
                if (yy < 0 || xx < 0 || yy >= sp->h || xx >= sp->w) continue;
                s += (double)x[((n * sp->c + c) * sp->h + yy) * sp->w + xx] *
                     (double)w[((o * sp->c + c) * 3 + u) * 3 + v];
              }
          y[((n * sp->m + o) * oh + i) * ow + j] = act(sp->act, s);
        }
  return y;
}

/* Returns whether the Winograd and im2col outputs differ anywhere. */
static int check(const Spec* sp) {
  const size_t xn = (size_t)(sp->n * sp->c * sp->h * sp->w), wn = (size_t)(sp->m * sp->c * 9);
  float* x = malloc(xn * sizeof(float));
  float* w = malloc(wn * sizeof(float));
  float* b = malloc((size_t)sp->m * sizeof(float));
  const float scale = 1.0f / sqrtf(9.0f * (float)sp->c);
  for (size_t i = 0; i < xn; i++)
    x[i] = uniform();
  for (size_t i = 0; i < wn; i++)
    w[i] = uniform() * scale;
  for (int64_t i = 0; i < sp->m; i++)
    b[i] = uniform() * 0.5f;
  size_t n1 = 0, n0 = 0;
  float* y1 = run_conv(sp, x, w, b, "1", &n1);
  float* y0 = run_conv(sp, x, w, b, "0", &n0);
  double* want = direct(sp, x, w, b);
  assert_int_equal(n0, n1);
  int differ = 0;
  for (size_t i = 0; i < n1; i++) {
    if (!(fabs(y1[i] - want[i]) <= 3e-5 + 1e-4 * fabs(want[i])))
      fail_msg("winograd on: Y[%zu] = %.9g, want %.9g", i, y1[i], want[i]);
    if (!(fabs(y0[i] - want[i]) <= 3e-5 + 1e-4 * fabs(want[i])))
      fail_msg("winograd off: Y[%zu] = %.9g, want %.9g", i, y0[i], want[i]);
    differ |= memcmp(&y1[i], &y0[i], sizeof(float)) != 0;
  }
  free(x);
  free(w);
  free(b);
  free(y1);
  free(y0);
  free(want);
  return differ;
}

static void test_conv_paths(void** state) {
  (void)state;
  const Spec specs[] = {
      {1, 32, 24, 14, 14, {1, 1, 1, 1}, 1, NULL},
      {2, 17, 19, 7, 13, {1, 1, 1, 1}, 1, NULL},    /* 7x13, batch 2: 2 x 8 tiles */
      {1, 16, 20, 15, 15, {0, 0, 0, 0}, 1, "Relu"}, /* 13x13 */
      {1, 20, 16, 13, 14, {2, 1, 0, 2}, 1, "LeakyRelu"},
      {1, 24, 24, 16, 16, {1, 1, 1, 1}, 1, "Clip"},
      {1, 32, 32, 7, 7, {1, 1, 1, 1}, 1, "Relu"}, /* 7x7: 2x2 output tiles */
      {1, 20, 18, 5, 11, {2, 2, 1, 0}, 1, NULL},  /* 6x11: 2x2 tiles, 3 x 6 */
  };
  /* With the direct path off (as on machines without AVX-512), Winograd
   * takes every spec, small images with F(2x2, 3x3). */
  setenv("ONYX_CPU_CONV_DIRECT", "0", 1);
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    if (!check(&specs[i])) fail_msg("spec %zu: ONYX_CPU_WINOGRAD=0/1 gave identical outputs", i);
  unsetenv("ONYX_CPU_CONV_DIRECT");
  /* With it on, Winograd still takes images with at least 32 4x4 tiles. */
  const Spec large[] = {
      {1, 32, 24, 28, 28, {1, 1, 1, 1}, 1, "Relu"}, /* 7 x 7 tiles */
      {2, 17, 19, 14, 14, {1, 1, 1, 1}, 1, NULL},   /* 2 x 4 x 4 tiles */
  };
  for (size_t i = 0; i < sizeof large / sizeof large[0]; i++)
    if (!check(&large[i]))
      fail_msg("large spec %zu: ONYX_CPU_WINOGRAD=0/1 gave identical outputs", i);
}

/* Convs the path does not take: the switch changes nothing. */
static void test_not_taken(void** state) {
  (void)state;
  const Spec specs[] = {
      {1, 32, 32, 15, 15, {1, 1, 1, 1}, 2, NULL}, /* strided */
      {1, 8, 32, 12, 12, {1, 1, 1, 1}, 1, NULL},  /* few input channels */
      {1, 32, 32, 6, 6, {1, 1, 1, 1}, 1, "Relu"}, /* 6x6: too few tiles (9 of 2x2) */
  };
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    if (check(&specs[i])) fail_msg("spec %zu: outputs differ though the path is not taken", i);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_paths),
      cmocka_unit_test(test_not_taken),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
