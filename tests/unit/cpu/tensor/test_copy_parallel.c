/* test_copy_parallel.c — the CPU provider's strided copies (Transpose,
 * Slice with steps, Tile) on tensors large enough to be split by rows over
 * the session's thread pool (256 KiB and more), at 1 and 3 threads, against
 * a reference computed here element by element; and one tensor below the
 * threshold; and Concat, whose copies are cut into pieces shared out by the
 * pool. Every element is distinct, so any row written from the wrong
 * place or twice shows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "onyx/onyx.h"
#include "ox_test_models.h"

#define R 4

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static size_t count_of(const int64_t* d, int rank) {
  size_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= (size_t)d[i];
  return n;
}

/* Runs the one-node model in m (input "x" of dims xd, output "y") with
 * `threads` threads and returns y's data (caller frees) and dims. */
static float* run_model(OxTestModel* m, const float* x, const int64_t* xd, int threads, int64_t* yd,
                        size_t* yn) {
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_threads(o, threads));
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_options_release(o);
  free(bytes);
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, xd, R, x, count_of(xd, R) * sizeof(float), &in));
  const char* in_name = "x";
  const char* out_name = "y";
  OnyxValue* out = NULL;
  ok(onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &out));
  const OnyxTensor* t = onyx_value_tensor(out);
  assert_int_equal(onyx_tensor_rank(t), R);
  for (int d = 0; d < R; d++)
    yd[d] = onyx_tensor_dims(t)[d];
  *yn = count_of(yd, R);
  float* y = malloc(*yn * sizeof *y + 1);
  assert_non_null(y);
  memcpy(y, onyx_tensor_data(t), *yn * sizeof *y);
  onyx_value_release(out);
  onyx_value_release(in);
  onyx_session_release(s);
  return y;
}

static float* input_of(const int64_t* xd) {
  size_t n = count_of(xd, R);
  float* x = malloc(n * sizeof *x);
  assert_non_null(x);
  for (size_t i = 0; i < n; i++)
    x[i] = (float)i; /* exact up to 2^24 */
  return x;
}

static void check(const float* got, const float* want, size_t n, const char* what, int threads) {
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i])
      fail_msg("%s at %d threads: element %zu is %g, expected %g", what, threads, i, (double)got[i],
               (double)want[i]);
}

/* Transpose with perm (0, 2, 3, 1) (NCHW -> NHWC) and (3, 1, 0, 2). */
static void test_transpose(void** state) {
  (void)state;
  static const int64_t perms[2][R] = {{0, 2, 3, 1}, {3, 1, 0, 2}};
  const int64_t sizes[2][R] = {{2, 48, 40, 36}, {1, 3, 5, 7}}; /* 540 KiB, and a small one */
  for (int si = 0; si < 2; si++)
    for (int pi = 0; pi < 2; pi++) {
      const int64_t* xd = sizes[si];
      float* x = input_of(xd);
      int64_t wd[R], xs[R];
      xs[R - 1] = 1;
      for (int d = R - 1; d-- > 0;)
        xs[d] = xs[d + 1] * xd[d + 1];
      for (int d = 0; d < R; d++)
        wd[d] = xd[perms[pi][d]];
      size_t n = count_of(wd, R);
      float* want = malloc(n * sizeof *want);
      assert_non_null(want);
      size_t i = 0;
      for (int64_t a = 0; a < wd[0]; a++)
        for (int64_t b = 0; b < wd[1]; b++)
          for (int64_t c = 0; c < wd[2]; c++)
            for (int64_t e = 0; e < wd[3]; e++) {
              const int64_t idx[R] = {a, b, c, e};
              int64_t off = 0;
              for (int d = 0; d < R; d++)
                off += idx[d] * xs[perms[pi][d]];
              want[i++] = x[off];
            }
      for (int threads = 1; threads <= 3; threads += 2) {
        OxTestModel* m = otm_new(17);
        otm_input(m, "x", ONYX_ELEM_FLOAT32, R, xd);
        otm_output(m, "y", ONYX_ELEM_FLOAT32, -1, NULL);
        OxTestNode* nd = otm_node(m, "Transpose", "t", "x", "y");
        otm_attr_ints(nd, "perm", R, perms[pi]);
        int64_t yd[R];
        size_t yn;
        float* y = run_model(m, x, xd, threads, yd, &yn);
        otm_free(m);
        assert_int_equal(yn, n);
        for (int d = 0; d < R; d++)
          assert_int_equal(yd[d], wd[d]);
        check(y, want, n, "Transpose", threads);
        free(y);
      }
      free(want);
      free(x);
    }
}

/* Slice of axes 1 and 3 with steps 2 and -3 (a strided, reversed view). */
static void test_slice(void** state) {
  (void)state;
  const int64_t xd[R] = {2, 64, 48, 90};
  float* x = input_of(xd);
  const int64_t starts[2] = {1, -1}, ends[2] = {64, -91}, axes[2] = {1, 3}, steps[2] = {2, -3};
  const int64_t wd[R] = {2, 32, 48, 30};
  size_t n = count_of(wd, R);
  float* want = malloc(n * sizeof *want);
  assert_non_null(want);
  size_t i = 0;
  for (int64_t a = 0; a < wd[0]; a++)
    for (int64_t b = 0; b < wd[1]; b++)
      for (int64_t c = 0; c < wd[2]; c++)
        for (int64_t e = 0; e < wd[3]; e++) {
          const int64_t sb = 1 + 2 * b, se = 89 - 3 * e;
          want[i++] = x[((a * xd[1] + sb) * xd[2] + c) * xd[3] + se];
        }
  for (int threads = 1; threads <= 3; threads += 2) {
    OxTestModel* m = otm_new(13);
    otm_input(m, "x", ONYX_ELEM_FLOAT32, R, xd);
    otm_output(m, "y", ONYX_ELEM_FLOAT32, -1, NULL);
    const int64_t two = 2;
    otm_initializer(m, "starts", ONYX_ELEM_INT64, 1, &two, starts);
    otm_initializer(m, "ends", ONYX_ELEM_INT64, 1, &two, ends);
    otm_initializer(m, "axes", ONYX_ELEM_INT64, 1, &two, axes);
    otm_initializer(m, "steps", ONYX_ELEM_INT64, 1, &two, steps);
    otm_node(m, "Slice", "s", "x,starts,ends,axes,steps", "y");
    int64_t yd[R];
    size_t yn;
    float* y = run_model(m, x, xd, threads, yd, &yn);
    otm_free(m);
    assert_int_equal(yn, n);
    for (int d = 0; d < R; d++)
      assert_int_equal(yd[d], wd[d]);
    check(y, want, n, "Slice", threads);
    free(y);
  }
  free(want);
  free(x);
}

/* Tile by (2, 1, 3, 2). */
static void test_tile(void** state) {
  (void)state;
  const int64_t xd[R] = {1, 32, 30, 40}, rep[R] = {2, 1, 3, 2};
  float* x = input_of(xd);
  int64_t wd[R];
  for (int d = 0; d < R; d++)
    wd[d] = xd[d] * rep[d];
  size_t n = count_of(wd, R);
  float* want = malloc(n * sizeof *want);
  assert_non_null(want);
  size_t i = 0;
  for (int64_t a = 0; a < wd[0]; a++)
    for (int64_t b = 0; b < wd[1]; b++)
      for (int64_t c = 0; c < wd[2]; c++)
        for (int64_t e = 0; e < wd[3]; e++)
          want[i++] =
              x[(((a % xd[0]) * xd[1] + b % xd[1]) * xd[2] + c % xd[2]) * xd[3] + e % xd[3]];
  for (int threads = 1; threads <= 3; threads += 2) {
    OxTestModel* m = otm_new(13);
    otm_input(m, "x", ONYX_ELEM_FLOAT32, R, xd);
    otm_output(m, "y", ONYX_ELEM_FLOAT32, -1, NULL);
    const int64_t four = R;
    otm_initializer(m, "r", ONYX_ELEM_INT64, 1, &four, rep);
    otm_node(m, "Tile", "tile", "x,r", "y");
    int64_t yd[R];
    size_t yn;
    float* y = run_model(m, x, xd, threads, yd, &yn);
    otm_free(m);
    assert_int_equal(yn, n);
    check(y, want, n, "Tile", threads);
    free(y);
  }
  free(want);
  free(x);
}

/* Concat of three inputs (one empty along the axis) on axis 1 (a few large
 * copies) and on axis 3 (thousands of short rows). */
static void test_concat(void** state) {
  (void)state;
  for (int axis = 1; axis <= 3; axis += 2) {
    int64_t xd[3][R];
    const int64_t along[3] = {40, 0, 56};
    for (int k = 0; k < 3; k++) {
      const int64_t base[R] = {2, 24, 32, 48};
      memcpy(xd[k], base, sizeof base);
      xd[k][axis] = along[k];
    }
    float* x[3];
    size_t off = 0;
    for (int k = 0; k < 3; k++) {
      size_t n = count_of(xd[k], R);
      x[k] = malloc((n ? n : 1) * sizeof *x[k]);
      assert_non_null(x[k]);
      for (size_t i = 0; i < n; i++)
        x[k][i] = (float)(off + i);
      off += n;
    }
    int64_t wd[R];
    memcpy(wd, xd[0], sizeof wd);
    wd[axis] = along[0] + along[1] + along[2];
    size_t n = count_of(wd, R);
    float* want = malloc(n * sizeof *want);
    assert_non_null(want);
    size_t i = 0;
    for (int64_t a = 0; a < wd[0]; a++)
      for (int64_t b = 0; b < wd[1]; b++)
        for (int64_t c = 0; c < wd[2]; c++)
          for (int64_t e = 0; e < wd[3]; e++) {
            int64_t idx[R] = {a, b, c, e}, at = idx[axis];
            int k = 0;
            while (at >= along[k]) {
              at -= along[k];
              k++;
            }
            idx[axis] = at;
            want[i++] =
                x[k][((idx[0] * xd[k][1] + idx[1]) * xd[k][2] + idx[2]) * xd[k][3] + idx[3]];
          }
    for (int threads = 1; threads <= 3; threads += 2) {
      OxTestModel* m = otm_new(13);
      otm_input(m, "x0", ONYX_ELEM_FLOAT32, R, xd[0]);
      otm_input(m, "x1", ONYX_ELEM_FLOAT32, R, xd[1]);
      otm_input(m, "x2", ONYX_ELEM_FLOAT32, R, xd[2]);
      otm_output(m, "y", ONYX_ELEM_FLOAT32, -1, NULL);
      OxTestNode* nd = otm_node(m, "Concat", "c", "x0,x1,x2", "y");
      otm_attr_int(nd, "axis", axis);
      uint8_t* bytes;
      size_t len;
      otm_serialize(m, &bytes, &len);
      otm_free(m);
      OnyxSessionOptions* o = NULL;
      ok(onyx_session_options_create(&o));
      ok(onyx_session_options_set_threads(o, threads));
      OnyxSession* s = NULL;
      ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
      onyx_session_options_release(o);
      free(bytes);
      OnyxValue* in[3] = {NULL, NULL, NULL};
      for (int k = 0; k < 3; k++)
        ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, xd[k], R, x[k],
                                    count_of(xd[k], R) * sizeof(float), &in[k]));
      const char* names[3] = {"x0", "x1", "x2"};
      const char* out_name = "y";
      OnyxValue* out = NULL;
      ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, 3, &out_name, 1, &out));
      const OnyxTensor* t = onyx_value_tensor(out);
      assert_int_equal(onyx_tensor_elem_count(t), n);
      for (int d = 0; d < R; d++)
        assert_int_equal(onyx_tensor_dims(t)[d], wd[d]);
      check(onyx_tensor_data(t), want, n, axis == 1 ? "Concat axis 1" : "Concat axis 3", threads);
      onyx_value_release(out);
      for (int k = 0; k < 3; k++)
        onyx_value_release(in[k]);
      onyx_session_release(s);
    }
    free(want);
    for (int k = 0; k < 3; k++)
      free(x[k]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_transpose),
      cmocka_unit_test(test_slice),
      cmocka_unit_test(test_tile),
      cmocka_unit_test(test_concat),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
