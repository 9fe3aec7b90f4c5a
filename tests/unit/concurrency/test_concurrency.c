/* test_concurrency.c — one session run from 8 threads at once, 1000 runs
 * each, every output checked; bindings and cancellation racing with runs;
 * and sessions created and run in parallel threads, each with its own plan.
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

/* Sessions created, run and released in parallel threads, each over its own
 * model size: every session's memory plan is its own. The plan of a session
 * is announced in its creation log ("planned peak on ... : <bytes> for <n>
 * static values"): y = Neg(Relu(x)) over float[n] has one planned value, the
 * Relu output, of n * 4 bytes (a multiple of the 64-byte alignment here).
 * Each run's output is checked against y = -max(x, 0). */
enum { kPlanThreads = 8, kPlanRounds = 12, kPlanRuns = 40 };

typedef struct PlanWorker {
  int n;          /* floats in x, y and the planned value */
  int plans_seen; /* creation logs that announced a plan */
  int wrong_plan; /* of those, plans of another size or value count */
  int bad, errors, checked;
  char msg[256];
  char log[512]; /* the last "planned peak" line */
} PlanWorker;

static void plan_log(void* user, OnyxLogSeverity sev, const char* message) {
  (void)sev;
  PlanWorker* w = user;
  const char* at = strstr(message, "planned peak on ");
  if (!at) return;
  const char* colon = strstr(at, "): ");
  size_t bytes = 0, values = 0;
  w->plans_seen++;
  snprintf(w->log, sizeof w->log, "%s", message);
  if (!colon || sscanf(colon + 3, "%zu B for %zu static values", &bytes, &values) != 2 ||
      bytes != (size_t)w->n * 4 || values != 1)
    w->wrong_plan++;
}

static OnyxSession* make_chain_session(PlanWorker* w) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 1, (int64_t[]){w->n});
  otm_node(m, "Relu", "relu", "x", "a");
  otm_node(m, "Neg", "neg", "a", "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){w->n});
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  OnyxStatus* st = onyx_session_options_create(&o);
  if (!st) st = onyx_session_options_set_threads(o, 1);
  if (!st) st = onyx_session_options_set_optimization_level(o, ONYX_OPT_DISABLED);
  if (!st) st = onyx_session_options_set_memory_pattern(o, 1);
  if (!st) st = onyx_session_options_set_log_severity(o, ONYX_LOG_INFO);
  if (!st) st = onyx_session_options_set_log_callback(o, plan_log, w);
  OnyxSession* s = NULL;
  if (!st) st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  free(bytes);
  onyx_session_options_release(o);
  if (st) {
    snprintf(w->msg, sizeof w->msg, "create: %s", onyx_status_message(st));
    w->errors++;
    onyx_status_release(st);
  }
  return s;
}

static void* plan_worker_main(void* arg) {
  PlanWorker* w = arg;
  const char* in = "x";
  const char* out = "y";
  float* x = malloc((size_t)w->n * sizeof *x);
  if (!x) {
    w->errors++;
    return NULL;
  }
  for (int round = 0; round < kPlanRounds; round++) {
    OnyxSession* s = make_chain_session(w);
    if (!s) break;
    for (int r = 0; r < kPlanRuns; r++) {
      for (int i = 0; i < w->n; i++)
        x[i] = (float)((i * 7 + r * 3 + w->n) % 11) - 5.0f;
      OnyxValue* xv = NULL;
      OnyxValue* yv = NULL;
      OnyxStatus* st = onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){w->n}, 1, x,
                                                (size_t)w->n * sizeof *x, &xv);
      if (!st) st = onyx_session_run(s, NULL, &in, (const OnyxValue* const*)&xv, 1, &out, 1, &yv);
      if (st) {
        if (!w->errors++) snprintf(w->msg, sizeof w->msg, "run: %s", onyx_status_message(st));
        onyx_status_release(st);
      } else {
        const float* y = onyx_tensor_data(onyx_value_tensor(yv));
        bool ok = true;
        for (int i = 0; i < w->n && ok; i++) {
          float want = x[i] > 0 ? -x[i] : -0.0f;
          if (y[i] != want) {
            ok = false;
            if (!w->bad) snprintf(w->msg, sizeof w->msg, "y[%d] = %g, want %g", i, y[i], want);
          }
        }
        if (ok)
          w->checked++;
        else
          w->bad++;
      }
      onyx_value_release(xv);
      onyx_value_release(yv);
    }
    onyx_session_release(s);
  }
  free(x);
  return NULL;
}

static void test_parallel_sessions_own_their_plans(void** state) {
  (void)state;
  pthread_t th[kPlanThreads];
  PlanWorker w[kPlanThreads];
  for (int i = 0; i < kPlanThreads; i++) {
    w[i] = (PlanWorker){.n = 16 * (i + 1)};
    assert_int_equal(pthread_create(&th[i], NULL, plan_worker_main, &w[i]), 0);
  }
  for (int i = 0; i < kPlanThreads; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < kPlanThreads; i++) {
    if (w[i].bad || w[i].errors || w[i].wrong_plan)
      fail_msg("thread %d (n = %d): %d wrong outputs, %d errors, %d wrong plans; %s; last plan: %s",
               i, w[i].n, w[i].bad, w[i].errors, w[i].wrong_plan, w[i].msg, w[i].log);
    assert_int_equal(w[i].plans_seen, kPlanRounds);
    assert_int_equal(w[i].checked, kPlanRounds * kPlanRuns);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_8_threads_1000_runs),
      cmocka_unit_test(test_8_threads_bindings_and_runs),
      cmocka_unit_test(test_terminate_from_another_thread),
      cmocka_unit_test(test_parallel_sessions_own_their_plans),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
