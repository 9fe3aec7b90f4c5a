/* test_concurrency.c — one session run from 8 threads at once, 1000 runs
 * each, every output checked; and bindings and cancellation racing with runs.
 * Built and run under ThreadSanitizer in CI (scripts/test.sh). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "onyx/onyx.h"
#include "ox_test_models.h"

enum { kThreads = 8, kRuns = 1000 };

/* y = Relu(MatMul(x, W) + b): x float[2,4], W float[4,3], b float[3]. A
 * MatMul so the intra-op pool is shared by the concurrent runs too. */
static const float W[12] = {1, 0, -1, 2, 1, 0, 0, -2, 1, 1, 1, 1};
static const float B[3] = {0.5f, -1, 0};

static OnyxSession* make_session(int threads) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 4});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 2, (int64_t[]){4, 3}, W);
  otm_initializer(m, "b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, B);
  otm_node(m, "MatMul", "mm", "x,W", "p");
  otm_node(m, "Add", "add", "p,b", "s");
  otm_node(m, "Relu", "relu", "s", "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  OnyxStatus* st = onyx_session_options_create(&o);
  if (!st) st = onyx_session_options_set_threads(o, threads);
  OnyxSession* s = NULL;
  if (!st) st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  free(bytes);
  onyx_session_options_release(o);
  if (st) fail_msg("%s", onyx_status_message(st));
  return s;
}

/* The reference, computed independently of Onyx. */
static void reference(const float* x, float* y) {
  for (int r = 0; r < 2; r++)
    for (int c = 0; c < 3; c++) {
      float acc = B[c];
      for (int k = 0; k < 4; k++)
        acc += x[r * 4 + k] * W[k * 3 + c];
      y[r * 3 + c] = acc > 0 ? acc : 0;
    }
}

typedef struct Worker {
  OnyxSession* s;
  int id;
  int bad;       /* outputs that differed */
  int errors;    /* runs that failed */
  int checked;   /* runs whose outputs matched */
  bool binding;  /* use an IO binding instead of onyx_session_run */
  char msg[256]; /* first problem */
} Worker;

static void* worker_main(void* arg) {
  Worker* w = arg;
  const char* in = "x";
  const char* out = "y";
  OnyxIoBinding* b = NULL;
  OnyxValue* xv = NULL;
  OnyxValue* yv = NULL;
  int64_t xd[2] = {2, 4}, yd[2] = {2, 3};
  OnyxStatus* st = onyx_value_create_tensor(ONYX_ELEM_FLOAT32, xd, 2, NULL, 0, &xv);
  if (!st && w->binding) st = onyx_value_create_tensor(ONYX_ELEM_FLOAT32, yd, 2, NULL, 0, &yv);
  if (!st && w->binding) st = onyx_io_binding_create(w->s, &b);
  if (!st && w->binding) st = onyx_io_binding_bind_input(b, "x", xv);
  if (!st && w->binding) st = onyx_io_binding_bind_output(b, "y", yv);
  if (st) {
    snprintf(w->msg, sizeof w->msg, "setup: %s", onyx_status_message(st));
    onyx_status_release(st);
    w->errors++;
  }
  float* x = xv ? (float*)onyx_tensor_data(onyx_value_tensor(xv)) : NULL;
  for (int r = 0; x && !st && r < kRuns; r++) {
    for (int i = 0; i < 8; i++) /* distinct per thread and run */
      x[i] = (float)((w->id * 7 + r * 3 + i * 5) % 17) - 8.0f;
    float want[6];
    reference(x, want);
    OnyxValue* y = NULL;
    OnyxStatus* e = w->binding ? onyx_session_run_with_binding(w->s, NULL, b)
                               : onyx_session_run(w->s, NULL, &in, (const OnyxValue* const*)&xv, 1,
                                                  &out, 1, &y);
    if (e) {
      if (!w->errors++) snprintf(w->msg, sizeof w->msg, "run %d: %s", r, onyx_status_message(e));
      onyx_status_release(e);
      continue;
    }
    const float* got = onyx_tensor_data(onyx_value_tensor(w->binding ? yv : y));
    int good = 1;
    for (int i = 0; i < 6; i++)
      if (got[i] != want[i]) {
        good = 0;
        if (!w->bad++)
          snprintf(w->msg, sizeof w->msg, "run %d: y[%d] = %g, expected %g", r, i, (double)got[i],
                   (double)want[i]);
        break;
      }
    w->checked += good;
    onyx_value_release(y);
  }
  onyx_io_binding_release(b);
  onyx_value_release(xv);
  onyx_value_release(yv);
  return NULL;
}

static void run_workers(OnyxSession* s, bool mixed) {
  pthread_t th[kThreads];
  Worker w[kThreads];
  for (int i = 0; i < kThreads; i++) {
    w[i] = (Worker){.s = s, .id = i, .binding = mixed && (i % 2)};
    assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < kThreads; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < kThreads; i++)
    if (w[i].bad || w[i].errors)
      fail_msg("thread %d: %d wrong outputs, %d failed runs; first: %s", i, w[i].bad, w[i].errors,
               w[i].msg);
  for (int i = 0; i < kThreads; i++)
    assert_int_equal(w[i].checked, kRuns);
}

static void test_8_threads_1000_runs(void** state) {
  (void)state;
  OnyxSession* s = make_session(2);
  run_workers(s, false);
  onyx_session_release(s);
}

static void test_8_threads_bindings_and_runs(void** state) {
  (void)state;
  OnyxSession* s = make_session(1);
  run_workers(s, true);
  onyx_session_release(s);
}

/* Terminating run options from another thread while runs use them: every
 * run either completes or is cancelled, and every run that starts after
 * onyx_run_options_terminate returned is cancelled. */
typedef struct Canceller {
  OnyxRunOptions* r;
  OnyxSession* s;
  int terminated; /* atomic: set after terminate returned */
  int cancelled, completed, other, late_completed;
} Canceller;

static void* cancel_runner(void* arg) {
  Canceller* c = arg;
  const char* in = "x";
  const char* out = "y";
  OnyxValue* xv = NULL;
  OnyxStatus* st = onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){2, 4}, 2, NULL, 0, &xv);
  for (int r = 0; !st && c->cancelled < 5 && r < 1000000; r++) {
    bool after = __atomic_load_n(&c->terminated, __ATOMIC_ACQUIRE);
    OnyxValue* y = NULL;
    OnyxStatus* e = onyx_session_run(c->s, c->r, &in, (const OnyxValue* const*)&xv, 1, &out, 1, &y);
    if (!e) {
      c->completed++;
      if (after) c->late_completed++;
    } else if (onyx_status_code(e) == ONYX_CANCELLED) {
      c->cancelled++;
      if (y) c->other++; /* no output on error */
    } else {
      c->other++;
    }
    onyx_status_release(e);
    onyx_value_release(y);
  }
  onyx_status_release(st);
  onyx_value_release(xv);
  return NULL;
}

static void test_terminate_from_another_thread(void** state) {
  (void)state;
  OnyxSession* s = make_session(1);
  OnyxRunOptions* r = NULL;
  assert_null(onyx_run_options_create(&r));
  Canceller c = {.r = r, .s = s};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, cancel_runner, &c), 0);
  struct timespec pause = {0, 2000000};
  nanosleep(&pause, NULL);
  onyx_run_options_terminate(r); /* races with a run in flight */
  __atomic_store_n(&c.terminated, 1, __ATOMIC_RELEASE);
  pthread_join(th, NULL);
  assert_int_equal(c.other, 0);
  assert_int_equal(c.late_completed, 0);
  assert_int_equal(c.cancelled, 5);
  onyx_run_options_release(r);
  onyx_session_release(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_8_threads_1000_runs),
      cmocka_unit_test(test_8_threads_bindings_and_runs),
      cmocka_unit_test(test_terminate_from_another_thread),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
