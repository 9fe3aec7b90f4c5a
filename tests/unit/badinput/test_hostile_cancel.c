/* test_hostile_cancel.c — kernels whose work is set by attributes or data,
 * not by their input and output sizes, stop when the run is cancelled
 * (docs/security.md, "Cancellation").
 *
 * Each hostile case is a single node whose run takes tens of seconds or
 * more: pooling windows and convolution kernels far larger than the input,
 * padded so that every output reads most of it. The run is stopped with
 * onyx_run_options_terminate from another thread, or by max_run_ms, while
 * the kernel runs (the host itself checks only between nodes), and must end
 * with ONYX_CANCELLED well under a second later. The same ops on ordinary
 * and on clipped windows still give the values a plain reference loop in
 * this file computes. Under ASan+UBSan and valgrind the stopped runs also
 * show that their buffers are freed. */
#include <math.h>
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

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define INSTRUMENTED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define INSTRUMENTED 1
#endif
#endif
#if !defined(INSTRUMENTED) && !defined(NDEBUG)
#define INSTRUMENTED 1 /* a Debug build: unoptimized kernels */
#endif

/* How long a stopped run may take after the stop. The kernels poll every
 * millisecond or so of optimized work, so an optimized build stops well
 * under a second; a sanitizer or Debug build (the ASan+UBSan CI build is
 * both) runs the same work up to ten times slower and also sets up its
 * large outputs slowly, and memcheck (ONYX_UNDER_VALGRIND) far slower
 * still. Each bound stays far below what the uncancelled kernels take in
 * that build (minutes or more). */
static double stop_within_s(void) {
  if (getenv("ONYX_UNDER_VALGRIND")) return 60.0;
#ifdef INSTRUMENTED
  return 5.0;
#else
  return 0.9;
#endif
}
#define STOP_WITHIN_S stop_within_s()

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A session of m (freed) on the CPU provider with `threads` intra-op
 * threads and, when run_ms > 0, that max_run_ms. */
static OnyxSession* session(OxTestModel* m, int threads, uint64_t run_ms) {
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_threads(o, threads));
  ok(onyx_session_options_set_log_severity(o, ONYX_LOG_FATAL));
  ok(onyx_session_options_add_provider(o, "cpu", NULL, 0, 1));
  if (run_ms) ok(onyx_session_options_set_max_run_ms(o, run_ms));
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_options_release(o);
  free(bytes);
  otm_free(m);
  return s;
}

static OnyxValue* f32_value(const int64_t* dims, size_t rank, const float* data) {
  size_t n = 1;
  for (size_t i = 0; i < rank; i++)
    n *= (size_t)dims[i];
  OnyxValue* v = NULL;
  ok(onyx_value_create_tensor(F32, dims, rank, data, n * sizeof(float), &v));
  return v;
}

/* Runs s on float input X and returns the status; outputs named in
 * `outs` (n_out of them) go to got[] when given, else are released. */
static OnyxStatus* run(OnyxSession* s, const OnyxRunOptions* r, const OnyxValue* x,
                       const char* const* outs, size_t n_out, OnyxValue** got) {
  const char* in = "X";
  OnyxValue* tmp[4] = {NULL};
  OnyxValue** dst = got ? got : tmp;
  OnyxStatus* st = onyx_session_run(s, r, &in, &x, 1, outs, n_out, dst);
  if (!got) onyx_values_release(tmp, n_out);
  return st;
}

typedef struct Job {
  OnyxSession* s;
  OnyxRunOptions* r;
  const char* const* names;
  const OnyxValue* const* in;
  size_t n_in;
  OnyxStatus* st;
  double end;
} Job;

static void* job_run(void* arg) {
  Job* j = arg;
  const char* out = "Y";
  OnyxValue* y = NULL;
  j->st = onyx_session_run(j->s, j->r, j->names, j->in, j->n_in, &out, 1, &y);
  j->end = now_s();
  onyx_value_release(y);
  return NULL;
}

static void expect_cancel_status(OnyxStatus* st, const char* what, const char* why) {
  if (!st) fail_msg("%s: the run finished instead of stopping", what);
  const char* msg = onyx_status_message(st);
  if (onyx_status_code(st) != ONYX_CANCELLED)
    fail_msg("%s: expected ONYX_CANCELLED, got %s: %s", what,
             onyx_status_code_name(onyx_status_code(st)), msg);
  if (!strstr(msg, why)) fail_msg("%s: message lacks '%s': %s", what, why, msg);
  onyx_status_release(st);
}

/* Runs the session on the named inputs on another thread, terminates the
 * run 50 ms after it starts (inside the kernel: the model is one node) and
 * asserts that it ends cancelled within STOP_WITHIN_S of the terminate. */
static void expect_terminated_with(OnyxSession* s, const char* const* names,
                                   const OnyxValue* const* in, size_t n_in, const char* what) {
  Job j = {.s = s, .names = names, .in = in, .n_in = n_in};
  ok(onyx_run_options_create(&j.r));
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, job_run, &j), 0);
  const struct timespec pause = {0, 50 * 1000000};
  nanosleep(&pause, NULL);
  const double t0 = now_s();
  onyx_run_options_terminate(j.r);
  pthread_join(th, NULL);
  expect_cancel_status(j.st, what, "cancelled");
  if (j.end - t0 > STOP_WITHIN_S)
    fail_msg("%s: stopped %.3f s after the terminate", what, j.end - t0);
  onyx_run_options_release(j.r);
}

static void expect_terminated(OnyxSession* s, const OnyxValue* x, const char* what) {
  const char* name = "X";
  expect_terminated_with(s, &name, &x, 1, what);
}

/* Runs s (with max_run_ms = limit_ms) on x: cancelled for its time limit,
 * within STOP_WITHIN_S of the limit. */
static void expect_time_limit(OnyxSession* s, const OnyxValue* x, uint64_t limit_ms,
                              const char* what) {
  const char* out = "Y";
  const double t0 = now_s();
  OnyxStatus* st = run(s, NULL, x, &out, 1, NULL);
  const double took = now_s() - t0;
  expect_cancel_status(st, what, "max_run_ms");
  if (took > (double)limit_ms / 1000.0 + STOP_WITHIN_S)
    fail_msg("%s: a limit of %llu ms stopped the run after %.3f s", what,
             (unsigned long long)limit_ms, took);
}

/* A deterministic input of n floats in [-1, 1). */
static float* ramp(size_t n) {
  float* v = malloc(n * sizeof *v);
  assert_non_null(v);
  uint32_t h = 12345;
  for (size_t i = 0; i < n; i++) {
    h = h * 1103515245u + 12345u;
    v[i] = (float)((h >> 8) & 0xFFFF) / 32768.0f - 1.0f;
  }
  return v;
}

/* --- the hostile models ---------------------------------------------------------------- */

/* 2-D pooling over X of symbolic shape with a window of k x k taps and
 * pads of k - 1 on every side: each of the (in + k - 1)^2 outputs reads the
 * part of X its window overlaps. */
static OxTestModel* pool_model(const char* op, int64_t k, bool indices, bool include_pad) {
  OxTestModel* m = otm_new(19);
  otm_input_s(m, "X", F32, "N,C,H,W");
  OxTestNode* n = otm_node(m, op, "pool", "X", indices ? "Y,I" : "Y");
  otm_attr_ints(n, "kernel_shape", 2, DIMS(k, k));
  otm_attr_ints(n, "pads", 4, DIMS(k - 1, k - 1, k - 1, k - 1));
  if (include_pad) otm_attr_int(n, "count_include_pad", 1);
  otm_output_s(m, "Y", F32, NULL);
  if (indices) otm_output_s(m, "I", I64, NULL);
  return m;
}

/* The float32 2-D MaxPool path (no Indices): 1x1x512x512 under a 512x512
 * window, about 7e10 taps (minutes). */
static void test_maxpool_huge_window_terminates(void** state) {
  (void)state;
  float* xd = ramp(512 * 512);
  OnyxValue* x = f32_value(DIMS(1, 1, 512, 512), 4, xd);
  for (int threads = 1; threads <= 2; threads++) {
    OnyxSession* s = session(pool_model("MaxPool", 512, false, false), threads, 0);
    expect_terminated(s, x, "MaxPool 512x512 window");
    onyx_session_release(s);
  }
  onyx_value_release(x);
  free(xd);
}

/* The table path (AveragePool; MaxPool with Indices): 4096 planes of 32x32
 * under 32x32 windows, a 4 Mi-entry table and about 4e9 taps. */
static void test_pool_table_terminates(void** state) {
  (void)state;
  const size_t n = (size_t)4096 * 32 * 32;
  float* xd = ramp(n);
  OnyxValue* x = f32_value(DIMS(1, 4096, 32, 32), 4, xd);
  OnyxSession* s = session(pool_model("AveragePool", 32, false, true), 2, 0);
  expect_terminated(s, x, "AveragePool 32x32 window");
  onyx_session_release(s);
  s = session(pool_model("MaxPool", 32, true, false), 1, 0);
  expect_terminated(s, x, "MaxPool with Indices 32x32 window");
  onyx_session_release(s);
  onyx_value_release(x);
  free(xd);
}

static void test_pool_time_limit(void** state) {
  (void)state;
  float* xd = ramp(512 * 512);
  OnyxValue* x = f32_value(DIMS(1, 1, 512, 512), 4, xd);
  OnyxSession* s = session(pool_model("MaxPool", 512, false, false), 2, 100);
  expect_time_limit(s, x, 100, "MaxPool 512x512 window");
  onyx_session_release(s);
  onyx_value_release(x);
  free(xd);
}

/* Conv of X (1x1x512x512) with a 256x256 kernel and pads of 255: about
 * 4e10 multiply-adds. W constant (the direct path where the machine has
 * it, else im2col into the GEMM) or a run input (im2col). */
static OxTestModel* conv_model(bool constant_w, const float* w) {
  OxTestModel* m = otm_new(13);
  otm_input_s(m, "X", F32, "N,C,H,W");
  if (constant_w)
    otm_initializer(m, "W", F32, 4, DIMS(1, 1, 256, 256), w);
  else
    otm_input_s(m, "W", F32, "M,C,KH,KW");
  OxTestNode* n = otm_node(m, "Conv", "conv", "X,W", "Y");
  otm_attr_ints(n, "kernel_shape", 2, DIMS(256, 256));
  otm_attr_ints(n, "pads", 4, DIMS(255, 255, 255, 255));
  otm_output_s(m, "Y", F32, NULL);
  return m;
}

static void test_conv_huge_kernel_terminates(void** state) {
  (void)state;
  float* xd = ramp(512 * 512);
  float* wd = ramp(256 * 256);
  OnyxValue* x = f32_value(DIMS(1, 1, 512, 512), 4, xd);
  OnyxValue* w = f32_value(DIMS(1, 1, 256, 256), 4, wd);
  const char* names[] = {"X", "W"};
  const OnyxValue* in[] = {x, w};
  for (int constant_w = 0; constant_w <= 1; constant_w++) {
    OnyxSession* s = session(conv_model(constant_w, wd), 2, 0);
    expect_terminated_with(s, names, in, constant_w ? 1 : 2,
                           constant_w ? "Conv 256x256 constant kernel"
                                      : "Conv 256x256 kernel input");
    onyx_session_release(s);
  }
  onyx_value_release(x);
  onyx_value_release(w);
  free(xd);
  free(wd);
}

/* Einsum "a,b,c->" over three vectors of 2^12: 2^36 terms summed into one
 * output; and five of 2^13, whose 2^65 terms overflow: an error. */
static void test_einsum_terminates(void** state) {
  (void)state;
  float* v = ramp((size_t)1 << 13);
  OnyxValue* a = f32_value(DIMS(4096), 1, v);
  OxTestModel* m = otm_new(12);
  otm_input_s(m, "A", F32, "N");
  otm_input_s(m, "B", F32, "N2");
  otm_input_s(m, "C", F32, "N3");
  otm_attr_string(otm_node(m, "Einsum", "ein", "A,B,C", "Y"), "equation", "a,b,c->");
  otm_output_s(m, "Y", F32, NULL);
  OnyxSession* s = session(m, 2, 0);
  const char* names[] = {"A", "B", "C", "D", "E"};
  const OnyxValue* in3[] = {a, a, a};
  expect_terminated_with(s, names, in3, 3, "Einsum of 2^36 terms");
  onyx_session_release(s);
  onyx_value_release(a);
  a = f32_value(DIMS(8192), 1, v);
  m = otm_new(12);
  otm_input_s(m, "A", F32, "N");
  otm_input_s(m, "B", F32, "N2");
  otm_input_s(m, "C", F32, "N3");
  otm_input_s(m, "D", F32, "N4");
  otm_input_s(m, "E", F32, "N5");
  otm_attr_string(otm_node(m, "Einsum", "ein", "A,B,C,D,E", "Y"), "equation", "a,b,c,d,e->");
  otm_output_s(m, "Y", F32, NULL);
  s = session(m, 1, 0);
  const OnyxValue* in5[] = {a, a, a, a, a};
  const char* out = "Y";
  OnyxValue* y = NULL;
  OnyxStatus* st = onyx_session_run(s, NULL, names, in5, 5, &out, 1, &y);
  if (!st || onyx_status_code(st) != ONYX_INVALID_ARGUMENT ||
      !strstr(onyx_status_message(st), "integer overflow"))
    fail_msg("Einsum of 2^65 terms: %s", st ? onyx_status_message(st) : "no error");
  onyx_status_release(st);
  onyx_session_release(s);
  onyx_value_release(a);
  free(v);
}

/* NonMaxSuppression over 2^16 disjoint boxes, all kept: about 2^31 overlap
 * tests. */
static void test_nms_terminates(void** state) {
  (void)state;
  const size_t n = (size_t)1 << 16;
  float* boxes = malloc(n * 4 * sizeof *boxes);
  float* scores = malloc(n * sizeof *scores);
  assert_true(boxes && scores);
  for (size_t i = 0; i < n; i++) {
    /* [y1, x1, y2, x2]: unit squares two apart along x */
    boxes[4 * i] = 0, boxes[4 * i + 1] = (float)(2 * i), boxes[4 * i + 2] = 1,
              boxes[4 * i + 3] = (float)(2 * i + 1);
    scores[i] = (float)(n - i);
  }
  OnyxValue* b = f32_value(DIMS(1, (int64_t)n, 4), 3, boxes);
  OnyxValue* sc = f32_value(DIMS(1, 1, (int64_t)n), 3, scores);
  OnyxValue* mx = NULL;
  ok(onyx_value_create_tensor(I64, NULL, 0, (int64_t[]){(int64_t)n}, 8, &mx));
  OxTestModel* m = otm_new(11);
  otm_input_s(m, "B", F32, "N,S,F");
  otm_input_s(m, "S", F32, "N,C,S");
  otm_input(m, "M", I64, 0, NULL);
  otm_node(m, "NonMaxSuppression", "nms", "B,S,M", "Y");
  otm_output_s(m, "Y", I64, NULL);
  OnyxSession* s = session(m, 1, 0);
  const char* names[] = {"B", "S", "M"};
  const OnyxValue* in[] = {b, sc, mx};
  expect_terminated_with(s, names, in, 3, "NonMaxSuppression of 2^16 boxes");
  onyx_session_release(s);
  onyx_value_release(b);
  onyx_value_release(sc);
  onyx_value_release(mx);
  free(boxes);
  free(scores);
}

/* Integer MatMul (a plain loop) of 2048 x 2048 matrices: 2^33 terms. */
static void test_int_matmul_terminates(void** state) {
  (void)state;
  const size_t n = 2048;
  int64_t* d = calloc(n * n, sizeof *d);
  assert_non_null(d);
  OnyxValue* a = NULL;
  ok(onyx_value_create_tensor(I64, DIMS((int64_t)n, (int64_t)n), 2, d, n * n * 8, &a));
  OxTestModel* m = otm_new(13);
  otm_input_s(m, "A", I64, "M,K");
  otm_input_s(m, "B", I64, "K,N");
  otm_node(m, "MatMul", "mm", "A,B", "Y");
  otm_output_s(m, "Y", I64, NULL);
  OnyxSession* s = session(m, 2, 0);
  const char* names[] = {"A", "B"};
  const OnyxValue* in[] = {a, a};
  expect_terminated_with(s, names, in, 2, "int64 MatMul 2048^3");
  onyx_session_release(s);
  onyx_value_release(a);
  free(d);
}

/* RoiAlign with sampling_ratio 4096: 2^24 samples per bin, 64 x 64 bins. */
static void test_roialign_terminates(void** state) {
  (void)state;
  float* xd = ramp(16 * 16);
  OnyxValue* x = f32_value(DIMS(1, 1, 16, 16), 4, xd);
  OnyxValue* rois = f32_value(DIMS(1, 4), 2, (float[]){0, 0, 15, 15});
  OnyxValue* bi = NULL;
  ok(onyx_value_create_tensor(I64, DIMS(1), 1, (int64_t[]){0}, 8, &bi));
  OxTestModel* m = otm_new(16);
  otm_input_s(m, "X", F32, "N,C,H,W");
  otm_input_s(m, "R", F32, "K,F");
  otm_input_s(m, "I", I64, "K");
  OxTestNode* n = otm_node(m, "RoiAlign", "roi", "X,R,I", "Y");
  otm_attr_int(n, "output_height", 64);
  otm_attr_int(n, "output_width", 64);
  otm_attr_int(n, "sampling_ratio", 4096);
  otm_output_s(m, "Y", F32, NULL);
  OnyxSession* s = session(m, 1, 0);
  const char* names[] = {"X", "R", "I"};
  const OnyxValue* in[] = {x, rois, bi};
  expect_terminated_with(s, names, in, 3, "RoiAlign sampling_ratio 4096");
  onyx_session_release(s);
  onyx_value_release(x);
  onyx_value_release(rois);
  onyx_value_release(bi);
  free(xd);
}

/* --- uncancelled runs give the right values ----------------------------------------------- */

/* The plain definition of 2-D pooling over one plane: max (and its flat
 * index), or the mean over the taps inside X (or over the taps inside the
 * padded X when include_pad). */
static void ref_pool(const float* x, int64_t ih, int64_t iw, const int64_t* k, const int64_t* s,
                     const int64_t* d, const int64_t* p, int64_t oh, int64_t ow, bool is_max,
                     bool include_pad, float* y, int64_t* idx) {
  for (int64_t a = 0; a < oh; a++)
    for (int64_t b = 0; b < ow; b++) {
      double sum = 0, best = -INFINITY;
      int64_t arg = -1, inside = 0, padded = 0;
      for (int64_t u = 0; u < k[0]; u++)
        for (int64_t v = 0; v < k[1]; v++) {
          const int64_t r = a * s[0] - p[0] + u * d[0], c = b * s[1] - p[1] + v * d[1];
          if (r >= -p[0] && r < ih + p[2] && c >= -p[1] && c < iw + p[3]) padded++;
          if (r < 0 || r >= ih || c < 0 || c >= iw) continue;
          const float val = x[r * iw + c];
          inside++;
          sum += val;
          if (arg < 0 || val > best) best = val, arg = r * iw + c;
        }
      const int64_t o = a * ow + b;
      if (is_max) {
        y[o] = (float)best;
        if (idx) idx[o] = arg;
      } else {
        const int64_t cnt = include_pad ? padded : inside;
        y[o] = cnt ? (float)(sum / (double)cnt) : 0.0f;
      }
    }
}

/* Pooling with strides, dilations and uneven pads on 1x2x7x9, every path
 * (2-D MaxPool, MaxPool with Indices, AveragePool with and without the
 * padding counted), against ref_pool. */
static void test_pool_values(void** state) {
  (void)state;
  const int64_t ih = 7, iw = 9, k[2] = {3, 2}, s[2] = {1, 2}, d[2] = {2, 3};
  float* xd = ramp(2 * ih * iw);
  OnyxValue* x = f32_value(DIMS(1, 2, ih, iw), 4, xd);
  for (int kind = 0; kind < 4; kind++) {
    const bool is_max = kind < 2, indices = kind == 1, include_pad = kind == 3;
    /* AveragePool's pads must be less than the kernel */
    const int64_t* p = is_max ? DIMS(2, 1, 1, 3) : DIMS(2, 1, 1, 1);
    /* out = (in + pads - ((k - 1) d + 1)) / s + 1 */
    const int64_t oh = (ih + p[0] + p[2] - ((k[0] - 1) * d[0] + 1)) / s[0] + 1;
    const int64_t ow = (iw + p[1] + p[3] - ((k[1] - 1) * d[1] + 1)) / s[1] + 1;
    OxTestModel* m = otm_new(19);
    otm_input_s(m, "X", F32, "N,C,H,W");
    OxTestNode* n =
        otm_node(m, is_max ? "MaxPool" : "AveragePool", "pool", "X", indices ? "Y,I" : "Y");
    otm_attr_ints(n, "kernel_shape", 2, k);
    otm_attr_ints(n, "strides", 2, s);
    otm_attr_ints(n, "dilations", 2, d);
    otm_attr_ints(n, "pads", 4, p);
    if (include_pad) otm_attr_int(n, "count_include_pad", 1);
    otm_output_s(m, "Y", F32, NULL);
    if (indices) otm_output_s(m, "I", I64, NULL);
    OnyxSession* sess = session(m, 1, 0);
    const char* outs[] = {"Y", "I"};
    OnyxValue* got[2] = {NULL};
    ok(run(sess, NULL, x, outs, indices ? 2 : 1, got));
    const OnyxTensor* yt = onyx_value_tensor(got[0]);
    assert_int_equal(onyx_tensor_rank(yt), 4);
    assert_int_equal(onyx_tensor_dims(yt)[2], oh);
    assert_int_equal(onyx_tensor_dims(yt)[3], ow);
    const float* y = onyx_tensor_data(yt);
    const int64_t* yi = indices ? onyx_tensor_data(onyx_value_tensor(got[1])) : NULL;
    float want[64];
    int64_t want_i[64];
    assert_true(oh * ow <= 64);
    for (int64_t c = 0; c < 2; c++) {
      ref_pool(xd + c * ih * iw, ih, iw, k, s, d, p, oh, ow, is_max, include_pad, want, want_i);
      for (int64_t o = 0; o < oh * ow; o++) {
        if (fabsf(y[c * oh * ow + o] - want[o]) > 1e-6f)
          fail_msg("kind %d channel %lld output %lld: %g, want %g", kind, (long long)c,
                   (long long)o, (double)y[c * oh * ow + o], (double)want[o]);
        if (yi) assert_int_equal(yi[c * oh * ow + o], c * ih * iw + want_i[o]);
      }
    }
    onyx_values_release(got, indices ? 2 : 1);
    onyx_session_release(sess);
  }
  onyx_value_release(x);
  free(xd);
}

/* A window of 2^31 x 2^31 taps (2^62) over 3x3, padded at the end so there
 * is one output: the taps outside X are skipped without being visited, so
 * the run is immediate and exact. */
static void test_pool_window_2_62_taps(void** state) {
  (void)state;
  const int64_t big = (int64_t)1 << 31;
  const float xd[9] = {1, 2, 3, 4, 9, 6, 7, 8, 5};
  OnyxValue* x = f32_value(DIMS(1, 1, 3, 3), 4, xd);
  for (int kind = 0; kind < 4; kind++) {
    const bool is_max = kind < 2, indices = kind == 1, include_pad = kind == 3;
    OxTestModel* m = otm_new(19);
    otm_input_s(m, "X", F32, "N,C,H,W");
    OxTestNode* n =
        otm_node(m, is_max ? "MaxPool" : "AveragePool", "pool", "X", indices ? "Y,I" : "Y");
    otm_attr_ints(n, "kernel_shape", 2, DIMS(big, big));
    /* span = 3 + (big - 3) - big = 0: one output */
    otm_attr_ints(n, "pads", 4, DIMS(0, 0, big - 3, big - 3));
    if (include_pad) otm_attr_int(n, "count_include_pad", 1);
    otm_output_s(m, "Y", F32, NULL);
    if (indices) otm_output_s(m, "I", I64, NULL);
    OnyxSession* s = session(m, 1, 0);
    const char* outs[] = {"Y", "I"};
    OnyxValue* got[2] = {NULL};
    const double t0 = now_s();
    ok(run(s, NULL, x, outs, indices ? 2 : 1, got));
    if (now_s() - t0 > STOP_WITHIN_S) fail_msg("kind %d took %.3f s", kind, now_s() - t0);
    const OnyxTensor* yt = onyx_value_tensor(got[0]);
    assert_int_equal(onyx_tensor_elem_count(yt), 1);
    const float y = *(const float*)onyx_tensor_data(yt);
    /* max 9 at flat index 4; the mean of 1..9 is 5; counting the padding,
     * all 2^62 taps lie in the padded input */
    const float want = is_max ? 9.0f : include_pad ? (float)(45.0 / 4611686018427387904.0) : 5.0f;
    if (y != want) fail_msg("kind %d: %g, want %g", kind, (double)y, (double)want);
    if (indices) assert_int_equal(*(const int64_t*)onyx_tensor_data(onyx_value_tensor(got[1])), 4);
    onyx_values_release(got, indices ? 2 : 1);
    onyx_session_release(s);
  }
  onyx_value_release(x);
}

/* MaxPool SAME_UPPER with kernel_shape [2, 2^62 - 1] over 1x1x4x2 (a
 * fuzz_structured finding: the 2-D path formed a pointer 2^61 floats
 * before the row). The width pads are 2^61 - 1 on each side, so every
 * window spans the whole row; the height window is rows oh and oh + 1. A
 * width of 3 or more would take the padded extent past INT64_MAX: an
 * error. */
static void test_maxpool_same_upper_kernel_2_62(void** state) {
  (void)state;
  const int64_t k1 = ((int64_t)1 << 62) - 1;
  float* xd = ramp(8);
  OnyxValue* x = f32_value(DIMS(1, 1, 4, 2), 4, xd);
  OxTestModel* m = otm_new(19);
  otm_input_s(m, "X", F32, "N,C,H,W");
  OxTestNode* n = otm_node(m, "MaxPool", "pool", "X", "Y");
  otm_attr_ints(n, "kernel_shape", 2, DIMS(2, k1));
  otm_attr_string(n, "auto_pad", "SAME_UPPER");
  otm_output_s(m, "Y", F32, NULL);
  OnyxSession* s = session(m, 1, 0);
  const char* out = "Y";
  OnyxValue* got = NULL;
  ok(run(s, NULL, x, &out, 1, &got));
  const OnyxTensor* yt = onyx_value_tensor(got);
  assert_int_equal(onyx_tensor_elem_count(yt), 8);
  const float* y = onyx_tensor_data(yt);
  for (int64_t oh = 0; oh < 4; oh++) {
    float want = -INFINITY;
    for (int64_t r = oh; r < oh + 2 && r < 4; r++)
      for (int64_t c = 0; c < 2; c++)
        want = xd[r * 2 + c] > want ? xd[r * 2 + c] : want;
    for (int64_t ow = 0; ow < 2; ow++)
      if (y[oh * 2 + ow] != want)
        fail_msg("output (%lld, %lld) is %g, want %g", (long long)oh, (long long)ow,
                 (double)y[oh * 2 + ow], (double)want);
  }
  onyx_value_release(got);
  onyx_session_release(s);
  onyx_value_release(x);
  free(xd);
}

/* The plain definition of a single-channel 2-D Conv with pads, stride 1. */
static void ref_conv(const float* x, int64_t ih, int64_t iw, const float* w, int64_t kh, int64_t kw,
                     int64_t pad, float* y, int64_t oh, int64_t ow) {
  for (int64_t a = 0; a < oh; a++)
    for (int64_t b = 0; b < ow; b++) {
      double sum = 0;
      for (int64_t u = 0; u < kh; u++)
        for (int64_t v = 0; v < kw; v++) {
          const int64_t r = a - pad + u, c = b - pad + v;
          if (r >= 0 && r < ih && c >= 0 && c < iw) sum += (double)x[r * iw + c] * w[u * kw + v];
        }
      y[a * ow + b] = (float)sum;
    }
}

/* The Conv paths the hostile case stops (W constant and W an input), on a
 * small case run to the end. */
static void test_conv_values(void** state) {
  (void)state;
  const int64_t ih = 12, iw = 10, kk = 5, pad = 4, oh = ih + 2 * pad - kk + 1,
                ow = iw + 2 * pad - kk + 1;
  float* xd = ramp((size_t)(ih * iw));
  float* wd = ramp((size_t)(kk * kk));
  float* want = malloc((size_t)(oh * ow) * sizeof *want);
  assert_non_null(want);
  ref_conv(xd, ih, iw, wd, kk, kk, pad, want, oh, ow);
  OnyxValue* x = f32_value(DIMS(1, 1, ih, iw), 4, xd);
  OnyxValue* w = f32_value(DIMS(1, 1, kk, kk), 4, wd);
  for (int constant_w = 0; constant_w <= 1; constant_w++) {
    OxTestModel* m = otm_new(13);
    otm_input_s(m, "X", F32, "N,C,H,W");
    if (constant_w)
      otm_initializer(m, "W", F32, 4, DIMS(1, 1, kk, kk), wd);
    else
      otm_input_s(m, "W", F32, "M,C,KH,KW");
    OxTestNode* n = otm_node(m, "Conv", "conv", "X,W", "Y");
    otm_attr_ints(n, "pads", 4, DIMS(pad, pad, pad, pad));
    otm_output_s(m, "Y", F32, NULL);
    OnyxSession* s = session(m, 2, 0);
    const char* names[] = {"X", "W"};
    const OnyxValue* in[] = {x, w};
    const char* out = "Y";
    OnyxValue* y = NULL;
    ok(onyx_session_run(s, NULL, names, in, constant_w ? 1 : 2, &out, 1, &y));
    const OnyxTensor* yt = onyx_value_tensor(y);
    assert_int_equal(onyx_tensor_elem_count(yt), (size_t)(oh * ow));
    const float* yd = onyx_tensor_data(yt);
    for (int64_t i = 0; i < oh * ow; i++)
      if (fabsf(yd[i] - want[i]) > 1e-4f)
        fail_msg("W %s: output %lld is %g, want %g", constant_w ? "constant" : "input",
                 (long long)i, (double)yd[i], (double)want[i]);
    onyx_value_release(y);
    onyx_session_release(s);
  }
  onyx_value_release(x);
  onyx_value_release(w);
  free(xd);
  free(wd);
  free(want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pool_values),
      cmocka_unit_test(test_pool_window_2_62_taps),
      cmocka_unit_test(test_maxpool_same_upper_kernel_2_62),
      cmocka_unit_test(test_conv_values),
      cmocka_unit_test(test_maxpool_huge_window_terminates),
      cmocka_unit_test(test_pool_table_terminates),
      cmocka_unit_test(test_pool_time_limit),
      cmocka_unit_test(test_conv_huge_kernel_terminates),
      cmocka_unit_test(test_einsum_terminates),
      cmocka_unit_test(test_nms_terminates),
      cmocka_unit_test(test_int_matmul_terminates),
      cmocka_unit_test(test_roialign_terminates),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
