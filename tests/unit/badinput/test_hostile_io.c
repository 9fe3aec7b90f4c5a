/* test_hostile_io.c — files that change under a session: external data is
 * read into memory the session owns when it is created (mapping it is the
 * opt-in ONYX_MMAP_FILES=1), so truncating or rewriting the data file
 * afterwards changes nothing and cannot kill the process; the size limits
 * apply to what is read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "onyx/onyx.h"
#include "ox_test_models.h"

enum { kCount = 4096, kOffset = 4096 }; /* 16 KiB of weights, one page in */

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

typedef struct {
  char* dir;
  char model[512];
  char data[512];
} Files;

/* Y = X * W, W external: kCount floats at kOffset of weights.bin. */
static void write_files(Files* f) {
  f->dir = otm_temp_dir();
  assert_non_null(f->dir);
  snprintf(f->model, sizeof f->model, "%s/model.onnx", f->dir);
  snprintf(f->data, sizeof f->data, "%s/weights.bin", f->dir);
  size_t bytes = kOffset + kCount * sizeof(float);
  uint8_t* buf = calloc(1, bytes);
  assert_non_null(buf);
  for (size_t i = 0; i < kCount; i++) {
    float w = (float)i * 0.5f - 7.0f;
    memcpy(buf + kOffset + i * sizeof w, &w, sizeof w);
  }
  assert_true(otm_write_file(f->data, buf, bytes));
  free(buf);
  OxTestModel* m = otm_new(17);
  int64_t dims[1] = {kCount};
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, dims);
  Onnx__TensorProto* t = otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 1, dims, NULL);
  otm_tensor_external(t, "weights.bin", kOffset, kCount * sizeof(float));
  otm_node(m, "Mul", "mul", "X,W", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 1, dims);
  assert_true(otm_write(m, f->model));
  otm_free(m);
}

static void remove_files(Files* f) {
  otm_remove_dir(f->dir);
  free(f->dir);
}

static OnyxSession* open_session(const char* model, size_t max_tensor_bytes, OnyxStatus** err) {
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_log_severity(o, ONYX_LOG_FATAL));
  ok(onyx_session_options_set_limits(o, 0, max_tensor_bytes, 0, 0));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create(o, model, &s);
  onyx_session_options_release(o);
  if (err)
    *err = st;
  else
    ok(st);
  return s;
}

/* Runs once with X = 2 and checks Y = 2 * W, the weights written at creation. */
static void run_and_check(OnyxSession* s) {
  float* x = malloc(kCount * sizeof *x);
  assert_non_null(x);
  for (size_t i = 0; i < kCount; i++)
    x[i] = 2.0f;
  int64_t dims[1] = {kCount};
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dims, 1, x, kCount * sizeof *x, &in));
  free(x);
  const char* in_name = "X";
  const char* out_name = "Y";
  OnyxValue* out = NULL;
  ok(onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &out));
  const OnyxTensor* t = onyx_value_tensor(out);
  assert_non_null(t);
  assert_int_equal(onyx_tensor_elem_count(t), kCount);
  const float* y = onyx_tensor_data(t);
  for (size_t i = 0; i < kCount; i++)
    assert_float_equal(y[i], 2.0f * ((float)i * 0.5f - 7.0f), 0.0f);
  onyx_value_release(out);
  onyx_value_release(in);
}

/* The data file truncated to nothing after creation: the runs still give
 * the weights it held then (a mapping would have died of SIGBUS here). */
static void test_truncated_after_create(void** state) {
  (void)state;
  Files f;
  write_files(&f);
  OnyxSession* s = open_session(f.model, 0, NULL);
  assert_int_equal(truncate(f.data, 0), 0);
  run_and_check(s);
  run_and_check(s);
  onyx_session_release(s);
  remove_files(&f);
}

/* Rewritten in place (other weights, same size): the session keeps its own. */
static void test_rewritten_after_create(void** state) {
  (void)state;
  Files f;
  write_files(&f);
  OnyxSession* s = open_session(f.model, 0, NULL);
  FILE* fp = fopen(f.data, "r+b");
  assert_non_null(fp);
  assert_int_equal(fseek(fp, kOffset, SEEK_SET), 0);
  for (size_t i = 0; i < kCount; i++)
    fputc(0xff, fp), fputc(0xff, fp), fputc(0xff, fp), fputc(0x7f, fp); /* NaN */
  assert_int_equal(fclose(fp), 0);
  run_and_check(s);
  onyx_session_release(s);
  remove_files(&f);
}

/* The model file itself may go once the session exists. */
static void test_model_file_removed_after_create(void** state) {
  (void)state;
  Files f;
  write_files(&f);
  OnyxSession* s = open_session(f.model, 0, NULL);
  assert_int_equal(truncate(f.model, 0), 0);
  run_and_check(s);
  onyx_session_release(s);
  remove_files(&f);
}

/* max_tensor_bytes holds for external data too: 16 KiB over a 4 KiB limit. */
static void test_limit_applies(void** state) {
  (void)state;
  Files f;
  write_files(&f);
  OnyxStatus* st = NULL;
  OnyxSession* s = open_session(f.model, 4096, &st);
  assert_null(s);
  assert_non_null(st);
  assert_int_equal(onyx_status_code(st), ONYX_LIMIT_EXCEEDED);
  onyx_status_release(st);
  remove_files(&f);
}

/* A data file already too short at creation is an error, not a short read. */
static void test_short_at_create(void** state) {
  (void)state;
  Files f;
  write_files(&f);
  assert_int_equal(truncate(f.data, kOffset + 100), 0);
  OnyxStatus* st = NULL;
  OnyxSession* s = open_session(f.model, 0, &st);
  assert_null(s);
  assert_non_null(st);
  assert_non_null(strstr(onyx_status_message(st), "beyond the end"));
  onyx_status_release(st);
  remove_files(&f);
}

/* ONYX_MMAP_FILES=1 maps instead (the file must then stay as it is): the
 * same outputs. */
static void test_mmap_opt_in(void** state) {
  (void)state;
  Files f;
  write_files(&f);
  assert_int_equal(setenv("ONYX_MMAP_FILES", "1", 1), 0);
  OnyxSession* s = open_session(f.model, 0, NULL);
  unsetenv("ONYX_MMAP_FILES");
  run_and_check(s);
  onyx_session_release(s);
  remove_files(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_truncated_after_create),
      cmocka_unit_test(test_rewritten_after_create),
      cmocka_unit_test(test_model_file_removed_after_create),
      cmocka_unit_test(test_limit_applies),
      cmocka_unit_test(test_short_at_create),
      cmocka_unit_test(test_mmap_opt_in),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
