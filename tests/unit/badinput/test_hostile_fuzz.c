/* test_hostile_fuzz.c — what the structure-aware fuzzer (fuzz/fuzz_structured.c)
 * found, each case rebuilt here as a small model: a session is created with
 * the fuzzer's limits and, when that succeeds, run once on fixed inputs while
 * a watchdog terminates the run after a second. Each must give outputs or an
 * error with a message, without a crash, a leak, undefined behaviour (the
 * ASan/UBSan build) or a run that ignores the termination. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>
#include "onyx/onyx.h"
#include "ox_test_models.h"

#define F32 ONYX_ELEM_FLOAT32
#define I64 ONYX_ELEM_INT64

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

typedef struct {
  OnyxRunOptions* ro;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
} Watchdog;

/* Terminates the run after one second unless it is done first. */
static void* watchdog(void* arg) {
  Watchdog* w = arg;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 1;
  pthread_mutex_lock(&w->mu);
  while (!w->done)
    if (pthread_cond_timedwait(&w->cv, &w->mu, &until)) break;
  if (!w->done) onyx_run_options_terminate(w->ro);
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* An input: type and shape, filled with `fill` (float32) or `ifill` (the
 * integer and bool types); strings hold "a b". */
typedef struct {
  const char* name;
  OnyxElemType type;
  size_t rank;
  int64_t dims[8];
  float fill;
  int64_t ifill;
} Input;

/* Returns 1 when the session was created and the run gave outputs, 0 when
 * either gave an error (with a message). */
static int replay(OxTestModel* m, const Input* inputs, size_t n_inputs) {
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  assert_null(onyx_session_options_set_threads(o, 1));
  assert_null(onyx_session_options_set_log_severity(o, ONYX_LOG_FATAL));
  assert_null(onyx_session_options_set_limits(o, (size_t)16 << 20, (size_t)16 << 20, 4096, 8));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  free(bytes);
  if (st) {
    assert_true(*onyx_status_message(st) != '\0');
    onyx_status_release(st);
    return 0;
  }
  OnyxValue* in[4] = {0};
  const char* names[4];
  assert_true(n_inputs <= 4);
  for (size_t i = 0; i < n_inputs; i++) {
    size_t count = 1;
    for (size_t d = 0; d < inputs[i].rank; d++)
      count *= (size_t)inputs[i].dims[d];
    OnyxElemType type = inputs[i].type;
    size_t width = type == I64                              ? 8
                   : type == ONYX_ELEM_STRING               ? sizeof(char*)
                   : type == F32 || type == ONYX_ELEM_INT32 ? 4
                                                            : 1;
    uint8_t* data = calloc(count ? count : 1, width);
    assert_non_null(data);
    for (size_t k = 0; k < count; k++) {
      int32_t i32 = (int32_t)inputs[i].ifill;
      uint8_t u8 = (uint8_t)inputs[i].ifill;
      const char* str = "a b";
      const void* v = type == I64                ? (const void*)&inputs[i].ifill
                      : type == F32              ? (const void*)&inputs[i].fill
                      : type == ONYX_ELEM_INT32  ? (const void*)&i32
                      : type == ONYX_ELEM_STRING ? (const void*)&str
                                                 : (const void*)&u8;
      memcpy(data + k * width, v, width);
    }
    names[i] = inputs[i].name;
    assert_null(onyx_value_create_tensor(type, inputs[i].dims, inputs[i].rank, data, count * width,
                                         &in[i]));
    free(data);
  }
  size_t n_out = onyx_session_output_count(s);
  assert_true(n_out >= 1 && n_out <= 4);
  const char* out_names[4];
  OnyxValue* out[4] = {0};
  for (size_t i = 0; i < n_out; i++)
    out_names[i] = onyx_session_output_name(s, i);
  Watchdog w = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  assert_null(onyx_run_options_create(&w.ro));
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, watchdog, &w), 0);
  double t0 = now_s();
  st = onyx_session_run(s, w.ro, names, (const OnyxValue* const*)in, n_inputs, out_names, n_out,
                        out);
  double took = now_s() - t0;
  pthread_mutex_lock(&w.mu);
  w.done = 1;
  pthread_cond_signal(&w.cv);
  pthread_mutex_unlock(&w.mu);
  pthread_join(t, NULL);
  onyx_run_options_release(w.ro);
  /* terminated at the next node boundary, or polled by a kernel: well within 10 s */
  assert_true(took < 10.0);
  int ran = !st;
  if (st) {
    assert_true(*onyx_status_message(st) != '\0');
    onyx_status_release(st);
  } else {
    onyx_values_release(out, n_out);
  }
  onyx_values_release(in, n_inputs);
  onyx_session_release(s);
  return ran;
}

#define DIMS(...) ((int64_t[]){__VA_ARGS__})
#define BIG       INT64_MAX
#define P62       ((int64_t)1 << 62)

/* --- shape inference (schemas/) ------------------------------------------------------- */

/* Unsqueeze whose axes input is declared with INT64_MAX-1 elements. */
static void test_unsqueeze_axes_declared_huge(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_input_s(m, "x", F32, "?,2,0");
  otm_input(m, "axes", I64, 1, DIMS(BIG - 1));
  otm_node(m, "Unsqueeze", "u", "x,axes", "y");
  otm_output(m, "y", F32, -1, NULL);
  Input in[] = {{"x", F32, 3, {1, 2, 0}, 0, 0}, {"axes", I64, 1, {1}, 0, 0}};
  replay(m, in, 2);
}

/* Concat along a dim declared INT64_MAX-1 plus 2. */
static void test_concat_declared_huge(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_input_s(m, "a", F32, "2,N");
  otm_input_s(m, "b", F32, "9223372036854775806,?");
  otm_attr_int(otm_node(m, "Concat", "c", "a,b", "y"), "axis", 0);
  otm_output(m, "y", F32, -1, NULL);
  Input in[] = {{"a", F32, 2, {2, 1}, 1, 0}, {"b", F32, 2, {1, 1}, 1, 0}};
  replay(m, in, 2);
}

/* Conv over an input dim declared INT64_MAX. */
static void test_conv_declared_huge(void** state) {
  (void)state;
  OxTestModel* m = otm_new(22);
  otm_input_s(m, "x", F32, "1,1,9223372036854775807,N");
  otm_input(m, "W", F32, 4, DIMS(2, 1, 3, 3));
  OxTestNode* n = otm_node(m, "Conv", "c", "x,W", "y");
  otm_attr_ints(n, "kernel_shape", 2, DIMS(3, 2));
  otm_attr_ints(n, "pads", 4, DIMS(1, 1, 0, 2));
  otm_attr_ints(n, "strides", 2, DIMS(2, 2));
  otm_output(m, "y", F32, -1, NULL);
  Input in[] = {{"x", F32, 4, {1, 1, 4, 4}, 1, 0}, {"W", F32, 4, {2, 1, 3, 3}, 1, 0}};
  replay(m, in, 2);
}

/* MaxPool with an end pad of INT64_MAX over an empty dim. */
static void test_maxpool_pad_max(void** state) {
  (void)state;
  OxTestModel* m = otm_new(22);
  otm_input_s(m, "x", F32, "1,N,5,0");
  OxTestNode* n = otm_node(m, "MaxPool", "p", "x", "y");
  otm_attr_ints(n, "kernel_shape", 2, DIMS(5, 255));
  otm_attr_ints(n, "pads", 4, DIMS(3, 3, 255, BIG));
  otm_output(m, "y", F32, -1, NULL);
  Input in[] = {{"x", F32, 4, {1, 1, 5, 0}, 1, 0}};
  replay(m, in, 1);
}

/* AveragePool: kernel INT64_MAX-1 dilated, stride INT64_MAX, ceil_mode huge. */
static void test_averagepool_kernel_huge(void** state) {
  (void)state;
  OxTestModel* m = otm_new(22);
  otm_input_s(m, "x", F32, "3,N,3,N,?");
  OxTestNode* n = otm_node(m, "AveragePool", "p", "x", "y");
  otm_attr_int(n, "ceil_mode", BIG - 1);
  otm_attr_ints(n, "dilations", 3, DIMS(2, 2, 3));
  otm_attr_ints(n, "kernel_shape", 3, DIMS(BIG - 1, 2, 3));
  otm_attr_ints(n, "strides", 3, DIMS(1, 1, BIG));
  otm_output(m, "y", F32, -1, NULL);
  Input in[] = {{"x", F32, 5, {3, 1, 3, 1, 1}, 1, 0}};
  replay(m, in, 1);
}

/* AveragePool with ceil_mode, a stride of 2^32 and a dim declared INT64_MAX. */
static void test_averagepool_stride_2_32(void** state) {
  (void)state;
  OxTestModel* m = otm_new(22);
  otm_input(m, "x", F32, 4, DIMS(1, 1, BIG, 4));
  OxTestNode* n = otm_node(m, "AveragePool", "p", "x", "y");
  otm_attr_int(n, "ceil_mode", 1);
  otm_attr_ints(n, "kernel_shape", 2, DIMS(3, 3));
  otm_attr_ints(n, "strides", 2, DIMS((int64_t)1 << 32, 2));
  otm_output(m, "y", F32, -1, NULL);
  Input in[] = {{"x", F32, 4, {1, 1, 4, 4}, 1, 0}};
  replay(m, in, 1);
}

/* --- CPU kernels (providers/cpu) ------------------------------------------------------ */

/* Conv with a begin pad of INT64_MAX, shapes known only at run time. */
static void test_conv_pad_max_at_run(void** state) {
  (void)state;
  OxTestModel* m = otm_new(22);
  otm_input_s(m, "x", F32, "1,1,?,?");
  otm_input_s(m, "W", F32, "?,1,N,3");
  OxTestNode* n = otm_node(m, "Conv", "c", "x,W", "y");
  otm_attr_ints(n, "pads", 4, DIMS(65536, BIG, 1, 2));
  otm_output(m, "y", F32, -1, NULL);
  Input in[] = {{"x", F32, 4, {1, 1, 4, 4}, 1, 0}, {"W", F32, 4, {2, 1, 3, 3}, 1, 0}};
  replay(m, in, 2);
}

/* MaxPool with a begin pad of INT64_MAX-1, shapes known only at run time. */
static void test_maxpool_pad_max_at_run(void** state) {
  (void)state;
  OxTestModel* m = otm_new(22);
  otm_input_s(m, "x", F32, "1,N,?,?");
  OxTestNode* n = otm_node(m, "MaxPool", "p", "x", "y");
  otm_attr_ints(n, "kernel_shape", 2, DIMS(5, 5));
  otm_attr_ints(n, "pads", 4, DIMS(BIG - 1, 3, 2, 2));
  otm_output(m, "y", F32, -1, NULL);
  Input in[] = {{"x", F32, 4, {1, 1, 5, 5}, 1, 0}};
  replay(m, in, 1);
}

/* AveragePool with a dilated kernel of INT64_MAX and a stride of INT64_MAX. */
static void test_averagepool_dilated_kernel_max_at_run(void** state) {
  (void)state;
  OxTestModel* m = otm_new(22);
  otm_input_s(m, "x", F32, "3,1,4,N,N");
  OxTestNode* n = otm_node(m, "AveragePool", "p", "x", "y");
  otm_attr_int(n, "ceil_mode", 1);
  otm_attr_ints(n, "dilations", 3, DIMS(2, 2, 2));
  otm_attr_ints(n, "kernel_shape", 3, DIMS(2, BIG, 2));
  otm_attr_ints(n, "strides", 3, DIMS(1, 1, BIG));
  otm_output(m, "y", F32, -1, NULL);
  Input in[] = {{"x", F32, 5, {3, 1, 4, 2, 2}, 1, 0}};
  replay(m, in, 1);
}

/* RoiAlign with output_height 2^62, then output_width 2^62 and sampling 2^31. */
static void test_roialign_output_2_62(void** state) {
  (void)state;
  for (int wide = 0; wide < 2; wide++) {
    OxTestModel* m = otm_new(22);
    otm_input_s(m, "X", F32, "1,1,10,10");
    otm_input_s(m, "rois", F32, "N,4");
    otm_input_s(m, "batch_indices", I64, "N");
    OxTestNode* n = otm_node(m, "RoiAlign", "r", "X,rois,batch_indices", "Y");
    otm_attr_string(n, "coordinate_transformation_mode", "half_pixel");
    otm_attr_int(n, "output_height", wide ? 5 : P62);
    otm_attr_int(n, "output_width", wide ? P62 : 5);
    otm_attr_int(n, "sampling_ratio", wide ? (int64_t)1 << 31 : 2);
    otm_attr_float(n, "spatial_scale", 1.0f);
    otm_output(m, "Y", F32, -1, NULL);
    Input in[] = {{"X", F32, 4, {1, 1, 10, 10}, 1, 0},
                  {"rois", F32, 2, {1, 4}, 1, 0},
                  {"batch_indices", I64, 1, {1}, 0, 0}};
    replay(m, in, 3);
  }
}

/* EyeLike with k = INT64_MAX. */
static void test_eyelike_k_max(void** state) {
  (void)state;
  OxTestModel* m = otm_new(22);
  otm_input(m, "x", F32, 2, DIMS(3, 1));
  OxTestNode* n = otm_node(m, "EyeLike", "e", "x", "y");
  otm_attr_int(n, "dtype", 3);
  otm_attr_int(n, "k", BIG);
  otm_output(m, "y", ONYX_ELEM_INT8, -1, NULL);
  Input in[] = {{"x", F32, 2, {3, 1}, 1, 0}};
  replay(m, in, 1);
}

/* ConvInteger with pads of 2^62 and INT64_MAX-1. */
static void test_convinteger_pads_huge(void** state) {
  (void)state;
  OxTestModel* m = otm_new(10);
  otm_input_s(m, "x", ONYX_ELEM_UINT8, "?,?,3,3");
  otm_input_s(m, "w", ONYX_ELEM_UINT8, "2,1,2,N");
  otm_input(m, "x_zero_point", ONYX_ELEM_UINT8, 0, NULL);
  otm_input(m, "w_zero_point", ONYX_ELEM_UINT8, 1, DIMS(2));
  OxTestNode* n = otm_node(m, "ConvInteger", "c", "x,w,x_zero_point,w_zero_point", "y");
  otm_attr_ints(n, "pads", 4, DIMS(P62, 256, BIG - 1, 65536));
  otm_output(m, "y", ONYX_ELEM_INT32, -1, NULL);
  Input in[] = {{"x", ONYX_ELEM_UINT8, 4, {1, 1, 3, 3}, 0, 1},
                {"w", ONYX_ELEM_UINT8, 4, {2, 1, 2, 2}, 0, 1},
                {"x_zero_point", ONYX_ELEM_UINT8, 0, {0}, 0, 0},
                {"w_zero_point", ONYX_ELEM_UINT8, 1, {2}, 0, 0}};
  replay(m, in, 4);
}

/* TfIdfVectorizer with an ngram index of INT64_MAX and INT32_MIN in the pool. */
static void test_tfidf_ngram_index_max(void** state) {
  (void)state;
  OxTestModel* m = otm_new(9);
  otm_input(m, "X", ONYX_ELEM_INT32, 1, DIMS(12));
  OxTestNode* n = otm_node(m, "TfIdfVectorizer", "t", "X", "Y");
  otm_attr_int(n, "max_gram_length", 2);
  otm_attr_int(n, "max_skip_count", 5);
  otm_attr_int(n, "min_gram_length", 2);
  otm_attr_string(n, "mode", "TF");
  otm_attr_ints(n, "ngram_counts", 2, DIMS(0, 4));
  otm_attr_ints(n, "ngram_indexes", 7, DIMS(0, 2, BIG, 2, 4, 5, 6));
  otm_attr_ints(n, "pool_int64s", 10, DIMS(2, 3, 5, 3, 5, 6, INT32_MIN, 8, 6, -2));
  otm_output(m, "Y", F32, -1, NULL);
  Input in[] = {{"X", ONYX_ELEM_INT32, 1, {12}, 0, 5}};
  replay(m, in, 1);
}

/* StringSplit with an empty delimiter (split on whitespace). */
static void test_stringsplit_empty_delimiter(void** state) {
  (void)state;
  OxTestModel* m = otm_new(20);
  otm_input_s(m, "x", ONYX_ELEM_STRING, "?");
  otm_attr_string(otm_node(m, "StringSplit", "s", "x", "substrings,length"), "delimiter", "");
  otm_output(m, "substrings", ONYX_ELEM_STRING, -1, NULL);
  otm_output(m, "length", I64, -1, NULL);
  Input in[] = {{"x", ONYX_ELEM_STRING, 1, {2}, 0, 0}};
  assert_int_equal(replay(m, in, 1), 1);
}

/* --- later findings ------------------------------------------------------------------- */

/* Where broadcasting an empty [0, 2^62, 3] constant with a [3] input
 * (providers/cpu/cpu_util.c, cpu_bcast_plan: 3 * 2^62 overflows). */
static void test_where_bcast_empty_huge(void** state) {
  (void)state;
  OxTestModel* m = otm_new(18);
  otm_input(m, "c", ONYX_ELEM_BOOL, 1, DIMS(3));
  otm_input(m, "x", F32, 1, DIMS(3));
  Onnx__TensorProto* t = otm_tensor(m, "", F32, 3, DIMS(0, P62, 3), NULL);
  otm_attr_tensor(otm_node(m, "Constant", "k", "", "a"), "value", t);
  otm_node(m, "Where", "w", "c,a,x", "y");
  otm_output(m, "y", F32, -1, NULL);
  Input in[] = {{"c", ONYX_ELEM_BOOL, 1, {3}, 0, 1}, {"x", F32, 1, {3}, 1, 0}};
  replay(m, in, 2);
}

/* A graph input declared [INT64_MAX-1] feeding Less and Where: the memory
 * planner's static sizes (host/plan/memplan.c: 0 - INT64_MIN). */
static void test_memplan_declared_huge(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_input(m, "x", F32, 1, DIMS(BIG - 1));
  otm_input(m, "lo", F32, 0, NULL);
  otm_input(m, "hi", F32, 0, NULL);
  otm_node(m, "Less", "l1", "x,lo", "below");
  otm_node(m, "Where", "w1", "below,lo,x", "t");
  otm_node(m, "Less", "l2", "hi,t", "above");
  otm_node(m, "Where", "w2", "above,hi,t", "y");
  otm_output(m, "y", F32, 1, DIMS(3));
  Input in[] = {{"x", F32, 1, {3}, 1, 0}, {"lo", F32, 0, {0}, 0, 0}, {"hi", F32, 0, {0}, 2, 0}};
  replay(m, in, 3);
}

/* AveragePool SAME_UPPER with a kernel of 2^32: the pooling table asks the
 * run's scratch for 0x3000000000 bytes, past max_tensor_bytes
 * (providers/cpu/cpu_pool.c pool_alloc_table -> host_api.c h_ctx_scratch). */
static void test_averagepool_kernel_2_32_scratch(void** state) {
  (void)state;
  OxTestModel* m = otm_new(22);
  otm_input_s(m, "x", F32, "?,N,N,N");
  OxTestNode* n = otm_node(m, "AveragePool", "p", "x", "y");
  otm_attr_string(n, "auto_pad", "SAME_UPPER");
  otm_attr_ints(n, "kernel_shape", 2, DIMS(3, (int64_t)1 << 32));
  otm_output(m, "y", F32, -1, NULL);
  Input in[] = {{"x", F32, 4, {1, 3, 3, 3}, 1, 0}};
  replay(m, in, 1);
}

/* Concat of two empty [INT64_MAX-1, 0] inputs along axis 0
 * (providers/cpu/cpu_shape.c:223 concat_compute: the dims sum overflows). */
static void test_concat_empty_huge_at_run(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_input_s(m, "a", F32, "?,?");
  otm_input_s(m, "b", F32, "?,?");
  otm_attr_int(otm_node(m, "Concat", "c", "a,b", "y"), "axis", 0);
  otm_output(m, "y", F32, -1, NULL);
  Input in[] = {{"a", F32, 2, {BIG - 1, 0}, 1, 0}, {"b", F32, 2, {BIG - 1, 0}, 1, 0}};
  replay(m, in, 2);
}

/* Transpose and Slice of an empty [0, INT64_MAX, 3] at run time: the CPU
 * provider's dense strides multiplied 3 by INT64_MAX (UBSan; a
 * fuzz_structured finding). They saturate now; the outputs are empty. */
static void test_transpose_slice_empty_huge_at_run(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_input_s(m, "x", F32, "?,?,?");
  otm_attr_ints(otm_node(m, "Transpose", "t", "x", "y"), "perm", 3, DIMS(2, 0, 1));
  otm_initializer(m, "starts", I64, 1, DIMS(1), DIMS(1));
  otm_initializer(m, "ends", I64, 1, DIMS(1), DIMS(2));
  otm_initializer(m, "axes", I64, 1, DIMS(1), DIMS(2));
  otm_node(m, "Slice", "s", "x,starts,ends,axes", "z");
  otm_output(m, "y", F32, -1, NULL);
  otm_output(m, "z", F32, -1, NULL);
  Input in[] = {{"x", F32, 3, {0, BIG, 3}, 1, 0}};
  replay(m, in, 1);
}

/* Conv with a stride of INT64_MAX over an empty width
 * (providers/cpu/cpu_conv.c im2col_body: 1 + INT64_MAX). */
static void test_conv_stride_max_empty_width(void** state) {
  (void)state;
  OxTestModel* m = otm_new(22);
  otm_input(m, "x", F32, 4, DIMS(2, 1, 3, 0));
  otm_input_s(m, "W", F32, "255,1,3,?");
  OxTestNode* n = otm_node(m, "Conv", "c", "x,W", "y");
  otm_attr_ints(n, "pads", 4, DIMS(3, 1, 1, 255));
  otm_attr_ints(n, "strides", 2, DIMS(2, BIG));
  otm_output(m, "y", F32, -1, NULL);
  Input in[] = {{"x", F32, 4, {2, 1, 3, 0}, 1, 0}, {"W", F32, 4, {255, 1, 3, 1}, 1, 0}};
  replay(m, in, 2);
}

/* RoiAlign over a feature map of height 0 (providers/cpu/cpu_resize.c
 * roi_compute read row -1): every bin samples nothing and is 0. */
static void test_roialign_empty_height(void** state) {
  (void)state;
  OxTestModel* m = otm_new(16);
  otm_input_s(m, "x", F32, "?,?,?,?");
  otm_input(m, "rois", F32, 2, DIMS(3, 4));
  otm_input(m, "bi", I64, 1, DIMS(3));
  OxTestNode* n = otm_node(m, "RoiAlign", "r", "x,rois,bi", "y");
  otm_attr_int(n, "output_height", 6);
  otm_attr_int(n, "output_width", 5);
  otm_attr_int(n, "sampling_ratio", 2);
  otm_output(m, "y", F32, -1, NULL);
  Input in[] = {{"x", F32, 4, {1, 1, 0, 10}, 1, 0},
                {"rois", F32, 2, {3, 4}, 2, 0},
                {"bi", I64, 1, {3}, 0, 0}};
  assert_int_equal(replay(m, in, 3), 1);
}

/* AveragePool SAME_UPPER with a kernel of 2^24+1 rows: one kernel call that
 * ran for minutes without polling the run's termination. */
static void test_averagepool_kernel_2_24_terminates(void** state) {
  (void)state;
  OxTestModel* m = otm_new(22);
  otm_input_s(m, "x", F32, "N,?,?,1");
  OxTestNode* n = otm_node(m, "AveragePool", "p", "x", "y");
  otm_attr_string(n, "auto_pad", "SAME_UPPER");
  otm_attr_ints(n, "kernel_shape", 2, DIMS(((int64_t)1 << 24) + 1, 3));
  otm_output(m, "y", F32, -1, NULL);
  Input in[] = {{"x", F32, 4, {2, 3, 3, 1}, 1, 0}};
  replay(m, in, 1);
}

/* MaxPool SAME_UPPER with kernel_shape [2, 2^62 - 1] on a dynamic input:
 * the float32 2-D path formed a row pointer 2^61 floats before X (UBSan:
 * pointer index overflow); its values are checked in test_hostile_cancel. */
static void test_maxpool_same_upper_kernel_2_62(void** state) {
  (void)state;
  OxTestModel* m = otm_new(12);
  otm_input_s(m, "x", F32, "N,C,H,W");
  OxTestNode* n = otm_node(m, "MaxPool", "pool", "x", "y");
  otm_attr_string(n, "auto_pad", "SAME_UPPER");
  otm_attr_ints(n, "kernel_shape", 2, (int64_t[]){2, ((int64_t)1 << 62) - 1});
  otm_output_s(m, "y", F32, NULL);
  const Input x = {"x", F32, 4, {1, 2, 3, 2}, 1.5f, 0}; /* width 3: an overflow error */
  assert_int_equal(replay(m, &x, 1), 1);
}

/* Gemm (transB) + Relu whose constant B is empty, [0, 2^62]: the CPU
 * provider's matmul_act fusion transposed B in 32 x 32 blocks, walking 2^57
 * empty blocks at session creation (a fuzz_structured timeout). Creation now
 * ends at once; the product is empty. */
static void test_gemm_relu_empty_b_huge(void** state) {
  (void)state;
  const int64_t big = (int64_t)1 << 62;
  OxTestModel* m = otm_new(13);
  otm_input(m, "a", F32, 2, DIMS(1, big));
  otm_initializer(m, "b", F32, 2, DIMS(0, big), NULL);
  otm_initializer(m, "c", F32, 1, DIMS(0), NULL);
  OxTestNode* g = otm_node(m, "Gemm", "gemm", "a,b,c", "t");
  otm_attr_int(g, "transB", 1);
  otm_node(m, "Relu", "relu", "t", "y");
  otm_output(m, "y", F32, 2, DIMS(1, 0));
  const double t0 = (double)clock() / CLOCKS_PER_SEC;
  const Input a = {"a", F32, 2, {1, 0}, 1.0f, 0}; /* any run: an error or an empty y */
  replay(m, &a, 1);
  assert_true((double)clock() / CLOCKS_PER_SEC - t0 < 5.0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unsqueeze_axes_declared_huge),
      cmocka_unit_test(test_concat_declared_huge),
      cmocka_unit_test(test_conv_declared_huge),
      cmocka_unit_test(test_maxpool_pad_max),
      cmocka_unit_test(test_averagepool_kernel_huge),
      cmocka_unit_test(test_averagepool_stride_2_32),
      cmocka_unit_test(test_conv_pad_max_at_run),
      cmocka_unit_test(test_maxpool_pad_max_at_run),
      cmocka_unit_test(test_averagepool_dilated_kernel_max_at_run),
      cmocka_unit_test(test_roialign_output_2_62),
      cmocka_unit_test(test_eyelike_k_max),
      cmocka_unit_test(test_convinteger_pads_huge),
      cmocka_unit_test(test_tfidf_ngram_index_max),
      cmocka_unit_test(test_stringsplit_empty_delimiter),
      cmocka_unit_test(test_where_bcast_empty_huge),
      cmocka_unit_test(test_memplan_declared_huge),
      cmocka_unit_test(test_averagepool_kernel_2_32_scratch),
      cmocka_unit_test(test_concat_empty_huge_at_run),
      cmocka_unit_test(test_transpose_slice_empty_huge_at_run),
      cmocka_unit_test(test_conv_stride_max_empty_width),
      cmocka_unit_test(test_roialign_empty_height),
      cmocka_unit_test(test_averagepool_kernel_2_24_terminates),
      cmocka_unit_test(test_maxpool_same_upper_kernel_2_62),
      cmocka_unit_test(test_gemm_relu_empty_b_huge),
  };
  /* ONYX_TEST_FILTER=test_where*: one case at a time (a UBSan finding aborts
   * the whole program) */
  const char* filter = getenv("ONYX_TEST_FILTER");
  if (filter) cmocka_set_test_filter(filter);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
