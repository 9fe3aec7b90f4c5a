/* test_gpu_async.c — asynchronous runs with IO binding
 * (onyx_session_run_with_binding_async, onyx_run_event_*; docs/api.md
 * "Asynchronous runs") on a GPU provider (GPU_NAME: "cuda", "rocm" or the
 * test-only "gpuemu"; one executable each, like test_gpu.c). On gpuemu the
 * test holds the events back through the emulation's gate (gpu_emu_event.c):
 * while it is held every event reads as not complete, so the test sees a run
 * that has returned before its device work finished. The tests that need the
 * gate skip on a real device, and every test skips without a device.
 *
 * Model: X [ROWS, COLS] -> Relu (node 'relu') -> r; Y = Add(r, X) (node
 * 'add'), so y = max(x, 0) + x, computed here for every check. Both nodes run
 * on gpuemu; X is bound in host memory (copied to the device through the
 * provider's page-locked staging buffer) or in device memory, Y in device
 * memory.
 *
 * Checked: the call returns with the run pending and query says so; a bounded
 * wait times out while it is, and an unbounded one returns once another
 * thread opens the gate; wait then gives the outputs' final values; runs of
 * two bindings queued alternately each give their own results; a device
 * error found after the call surfaces at wait and query, naming the provider
 * and the last node queued; a second run on the same binding waits for the
 * first while runs of another binding do not; the binding and the session
 * can be released with a run in flight, and the event still reports the run
 * afterwards; an output bound in host memory is final when the call returns;
 * a CPU-only session's event is complete at once; run options terminated
 * before the call cancel it without an event; and the staging
 * buffer is allocated once and reused by later runs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "onyx/onyx.h"
#include "ox_host_api.h"
#include "ox_providers.h"
#include "ox_session.h"
#include "ox_test_models.h"

#ifndef GPU_NAME
#error "GPU_NAME comes from tests/unit/gpu/CMakeLists.txt"
#endif

#define ROWS 4
#define COLS 8
#define N    (ROWS * COLS)

enum { GATE_OPEN = 0, GATE_HELD = 1, GATE_FAIL = 2 };

static int (*emu_gate)(int mode); /* gpuemu's gate; NULL on a real device */
static bool have_device;

/* Sets the gate; nothing on a real device. */
static int gate(int mode) {
  return emu_gate ? emu_gate(mode) : -1;
}

/* Skips a test that needs a device, or the gate. */
#define NEED_DEVICE()                                                                              \
  do {                                                                                             \
    if (!have_device) skip();                                                                      \
  } while (0)
#define NEED_GATE()                                                                                \
  do {                                                                                             \
    if (!have_device || !emu_gate) skip();                                                         \
  } while (0)

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

typedef struct Log {
  pthread_mutex_t lock;
  char text[1 << 16];
} Log;

static void on_log(void* user, OnyxLogSeverity sev, const char* msg) {
  Log* l = user;
  pthread_mutex_lock(&l->lock);
  size_t used = strlen(l->text);
  if (used + 1 < sizeof l->text)
    snprintf(l->text + used, sizeof l->text - used, "[%d] %s\n", (int)sev, msg);
  pthread_mutex_unlock(&l->lock);
}

static int count(const char* text, const char* what) {
  int n = 0;
  for (const char* p = strstr(text, what); p; p = strstr(p + 1, what))
    n++;
  return n;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void input_of(int run, float* x) {
  for (int i = 0; i < N; i++)
    x[i] = (float)((i * 7 + run * 5) % 13 - 6) / 4.0f;
}

/* The session: providers `providers` (a JSON list), logging into log. */
static OnyxSession* model_session(const char* providers, Log* log) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){ROWS, COLS});
  otm_node(m, "Relu", "relu", "X", "r");
  otm_node(m, "Add", "add", "r,X", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){ROWS, COLS});
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  char cfg[256];
  snprintf(cfg, sizeof cfg, "{\"providers\": %s}", providers);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "async.json"));
  ok(onyx_session_options_set_log_severity(o, ONYX_LOG_VERBOSE));
  ok(onyx_session_options_set_log_callback(o, on_log, log));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  free(bytes);
  ok(st);
  return s;
}

static OnyxSession* gpu_session(Log* log) {
  return model_session("[{\"name\": \"" GPU_NAME "\"}, {\"name\": \"cpu\"}]", log);
}

static Log* log_new(void) {
  Log* l = calloc(1, sizeof *l);
  assert_non_null(l);
  pthread_mutex_init(&l->lock, NULL);
  return l;
}

static void log_free(Log* l) {
  pthread_mutex_destroy(&l->lock);
  free(l);
}

/* A binding of s: X bound to a host tensor holding x (*xv, when given, is
 * that value, whose data later runs read anew), Y to the memory the session
 * produces it in (gpuemu's device memory). */
static OnyxIoBinding* bind_x(OnyxSession* s, const float* x, OnyxValue** xv_out) {
  OnyxIoBinding* b = NULL;
  ok(onyx_io_binding_create(s, &b));
  OnyxValue* xv = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){ROWS, COLS}, 2, x, N * sizeof(float),
                              &xv));
  ok(onyx_io_binding_bind_input(b, "X", xv));
  if (xv_out)
    *xv_out = xv;
  else
    onyx_value_release(xv);
  OnyxMemoryDevice m;
  ok(onyx_session_output_memory(s, 0, &m));
  ok(onyx_io_binding_bind_output_to_device(b, "Y", &m));
  return b;
}

static OnyxIoBinding* bind(OnyxSession* s, const float* x) {
  return bind_x(s, x, NULL);
}

/* The binding's Y, copied to the host, against max(x, 0) + x. */
static void check_y(OnyxSession* s, OnyxIoBinding* b, const float* x) {
  OnyxValue* y = NULL;
  ok(onyx_io_binding_get_outputs(b, &y, 1));
  const OxTensor* t = y->tensor;
  assert_int_equal(t->count, N);
  OxTensor* h = NULL;
  ok(ox_tensor_new(t->type, t->dims, t->rank, &h));
  int32_t ep = ox_program_ep_for_memory(&s->prog, &t->device);
  ok(ox_copy_tensor(s, t, h, ep, -1));
  if (ep >= 0 && s->prog.eps[ep].stream)
    ok(s->prog.eps[ep].ep->sync_stream(s->prog.eps[ep].ep, s->prog.eps[ep].stream));
  const float* got = h->data;
  for (int i = 0; i < N; i++) {
    float want = (x[i] > 0 ? x[i] : 0.0f) + x[i];
    if (got[i] != want)
      fail_msg("Y[%d] = %g; expected max(%g, 0) + %g = %g", i, (double)got[i], (double)x[i],
               (double)x[i], (double)want);
  }
  ox_tensor_free(h);
  onyx_value_release(y);
}

/* --- the run returns before its work is done ------------------------------------------------ */

static void test_returns_before_done(void** state) {
  (void)state;
  NEED_GATE();
  Log* log = log_new();
  OnyxSession* s = gpu_session(log);
  float x[N];
  input_of(1, x);
  OnyxIoBinding* b = bind(s, x);
  assert_int_equal(gate(GATE_HELD), GATE_OPEN);
  OnyxRunEvent* ev = NULL;
  ok(onyx_session_run_with_binding_async(s, NULL, b, &ev));
  assert_non_null(ev);
  assert_int_equal(onyx_run_event_query(ev), ONYX_RUN_PENDING);
  assert_non_null(onyx_run_event_native(ev)); /* the emulation's event token */
  /* A bounded wait runs out while the work is held. */
  OnyxRunState rs = ONYX_RUN_COMPLETE;
  double t0 = now_ms();
  OnyxStatus* st = onyx_run_event_wait(ev, 30, &rs);
  double waited = now_ms() - t0;
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_LIMIT_EXCEEDED);
  assert_non_null(strstr(st->message, "has not completed within 30 ms"));
  ox_status_free(st);
  assert_int_equal(rs, ONYX_RUN_PENDING);
  assert_true(waited >= 25.0);
  assert_int_equal(onyx_run_event_query(ev), ONYX_RUN_PENDING);
  /* The work completes: query, then wait, say so; Y holds the final values. */
  gate(GATE_OPEN);
  assert_int_equal(onyx_run_event_query(ev), ONYX_RUN_COMPLETE);
  assert_null(onyx_run_event_native(ev)); /* known complete: the provider event is gone */
  rs = ONYX_RUN_PENDING;
  ok(onyx_run_event_wait(ev, -1, &rs));
  assert_int_equal(rs, ONYX_RUN_COMPLETE);
  check_y(s, b, x);
  onyx_run_event_release(ev);
  onyx_io_binding_release(b);
  onyx_session_release(s);
  log_free(log);
}

typedef struct Opener {
  int delay_ms;
  int mode;
} Opener;

static void* open_later(void* arg) {
  const Opener* o = arg;
  sleep_ms(o->delay_ms);
  gate(o->mode);
  return NULL;
}

static void test_wait_blocks_until_done(void** state) {
  (void)state;
  NEED_GATE();
  Log* log = log_new();
  OnyxSession* s = gpu_session(log);
  float x[N];
  input_of(2, x);
  OnyxIoBinding* b = bind(s, x);
  gate(GATE_HELD);
  OnyxRunEvent* ev = NULL;
  ok(onyx_session_run_with_binding_async(s, NULL, b, &ev));
  Opener o = {40, GATE_OPEN};
  pthread_t th;
  double t0 = now_ms();
  assert_int_equal(pthread_create(&th, NULL, open_later, &o), 0);
  OnyxRunState rs = ONYX_RUN_PENDING;
  ok(onyx_run_event_wait(ev, -1, &rs));
  double waited = now_ms() - t0;
  pthread_join(th, NULL);
  assert_int_equal(rs, ONYX_RUN_COMPLETE);
  assert_true(waited >= 35.0);
  check_y(s, b, x);
  onyx_run_event_release(ev);
  onyx_io_binding_release(b);
  onyx_session_release(s);
  log_free(log);
}

/* --- runs queued back to back --------------------------------------------------------------- */

/* Two bindings alternate, so each run is queued while the other binding's
 * may still be on the device; every result is checked once its event is
 * complete. A pending event has a native handle. */
static void test_alternating_bindings(void** state) {
  (void)state;
  NEED_DEVICE();
  Log* log = log_new();
  OnyxSession* s = gpu_session(log);
  float x[2][N];
  OnyxValue* xv[2] = {NULL, NULL};
  OnyxIoBinding* b[2];
  OnyxRunEvent* ev[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    input_of(30 + k, x[k]);
    b[k] = bind_x(s, x[k], &xv[k]);
  }
  for (int run = 0; run < 8; run++) {
    int k = run % 2;
    if (ev[k]) { /* the binding's previous run: done and checked before new input */
      ok(onyx_run_event_wait(ev[k], -1, NULL));
      check_y(s, b[k], x[k]);
      onyx_run_event_release(ev[k]);
    }
    input_of(40 + run, x[k]);
    memcpy(xv[k]->tensor->data, x[k], sizeof x[k]);
    ok(onyx_session_run_with_binding_async(s, NULL, b[k], &ev[k]));
    if (onyx_run_event_query(ev[k]) == ONYX_RUN_PENDING)
      assert_non_null(onyx_run_event_native(ev[k]));
  }
  for (int k = 0; k < 2; k++) {
    OnyxRunState rs = ONYX_RUN_PENDING;
    ok(onyx_run_event_wait(ev[k], -1, &rs));
    assert_int_equal(rs, ONYX_RUN_COMPLETE);
    check_y(s, b[k], x[k]);
    onyx_run_event_release(ev[k]);
    onyx_io_binding_release(b[k]);
    onyx_value_release(xv[k]);
  }
  onyx_session_release(s);
  log_free(log);
}

/* --- an error the device reports after the call ---------------------------------------------- */

static void test_device_error_at_wait(void** state) {
  (void)state;
  NEED_GATE();
  Log* log = log_new();
  OnyxSession* s = gpu_session(log);
  float x[N];
  input_of(3, x);
  OnyxIoBinding* b = bind(s, x);
  gate(GATE_FAIL);
  OnyxRunEvent* ev = NULL;
  ok(onyx_session_run_with_binding_async(s, NULL, b, &ev)); /* queued fine */
  assert_int_equal(onyx_run_event_query(ev), ONYX_RUN_FAILED);
  OnyxRunState rs = ONYX_RUN_COMPLETE;
  OnyxStatus* st = onyx_run_event_wait(ev, -1, &rs);
  assert_int_equal(rs, ONYX_RUN_FAILED);
  assert_non_null(st);
  if (!strstr(st->message, "node 'add' (Add)")) fprintf(stderr, "message: %s\n", st->message);
  assert_int_equal(st->code, ONYX_RUNTIME_ERROR);
  assert_non_null(strstr(st->message, "provider '" GPU_NAME "': the run's device work failed"));
  assert_non_null(strstr(st->message, "the last node queued on its stream: node 'add' (Add)"));
  assert_non_null(strstr(st->message, "emulated failure"));
  ox_status_free(st);
  /* Asked again, the same error. */
  st = onyx_run_event_wait(ev, 0, NULL);
  assert_non_null(st);
  assert_non_null(strstr(st->message, "node 'add' (Add)"));
  ox_status_free(st);
  gate(GATE_OPEN);
  /* The error stays with that run: the binding's next run is fine. */
  OnyxRunEvent* ev2 = NULL;
  ok(onyx_session_run_with_binding_async(s, NULL, b, &ev2));
  ok(onyx_run_event_wait(ev2, -1, NULL));
  check_y(s, b, x);
  onyx_run_event_release(ev2);
  onyx_run_event_release(ev);
  onyx_io_binding_release(b);
  onyx_session_release(s);
  log_free(log);
}

/* --- two runs on one binding ---------------------------------------------------------------- */

typedef struct Second {
  OnyxSession* s;
  OnyxIoBinding* b;
  OnyxRunEvent* ev;
  OnyxStatus* st;
  int started; /* atomic */
  int done;    /* atomic */
} Second;

static void* second_run(void* arg) {
  Second* r = arg;
  __atomic_store_n(&r->started, 1, __ATOMIC_RELEASE);
  r->st = onyx_session_run_with_binding_async(r->s, NULL, r->b, &r->ev);
  __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void test_binding_serializes_runs(void** state) {
  (void)state;
  NEED_GATE();
  Log* log = log_new();
  OnyxSession* s = gpu_session(log);
  float x[N], x2[N];
  input_of(4, x);
  input_of(5, x2);
  OnyxIoBinding* b = bind(s, x);
  OnyxIoBinding* other = bind(s, x2);
  gate(GATE_HELD);
  OnyxRunEvent* first = NULL;
  ok(onyx_session_run_with_binding_async(s, NULL, b, &first));
  /* Another binding of the session does not wait for it. */
  OnyxRunEvent* ev_other = NULL;
  ok(onyx_session_run_with_binding_async(s, NULL, other, &ev_other));
  assert_int_equal(onyx_run_event_query(ev_other), ONYX_RUN_PENDING);
  /* The same binding's next run waits until the first is done. */
  Second r = {.s = s, .b = b};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, second_run, &r), 0);
  while (!__atomic_load_n(&r.started, __ATOMIC_ACQUIRE))
    sleep_ms(1);
  sleep_ms(40);
  assert_int_equal(__atomic_load_n(&r.done, __ATOMIC_ACQUIRE), 0);
  assert_int_equal(onyx_run_event_query(first), ONYX_RUN_PENDING);
  gate(GATE_OPEN);
  pthread_join(th, NULL);
  ok(r.st);
  assert_non_null(r.ev);
  assert_int_equal(onyx_run_event_query(first), ONYX_RUN_COMPLETE);
  ok(onyx_run_event_wait(r.ev, -1, NULL));
  ok(onyx_run_event_wait(ev_other, -1, NULL));
  check_y(s, b, x);
  check_y(s, other, x2);
  onyx_run_event_release(first);
  onyx_run_event_release(r.ev);
  onyx_run_event_release(ev_other);
  onyx_io_binding_release(other);
  onyx_io_binding_release(b);
  onyx_session_release(s);
  log_free(log);
}

/* --- releasing with a run in flight ------------------------------------------------------- */

static void release_in_flight(int final_mode) {
  Log* log = log_new();
  OnyxSession* s = gpu_session(log);
  float x[N];
  input_of(6, x);
  OnyxIoBinding* b = bind(s, x);
  gate(GATE_HELD);
  OnyxRunEvent* ev = NULL;
  ok(onyx_session_run_with_binding_async(s, NULL, b, &ev));
  Opener o = {30, final_mode};
  pthread_t th;
  double t0 = now_ms(); /* before the opener starts: it opens 30 ms after this at the earliest */
  assert_int_equal(pthread_create(&th, NULL, open_later, &o), 0);
  onyx_io_binding_release(b); /* waits for the run */
  double waited = now_ms() - t0;
  onyx_session_release(s);
  pthread_join(th, NULL);
  assert_true(waited >= 25.0);
  /* The event outlives both and reports the run. */
  OnyxRunState rs = ONYX_RUN_PENDING;
  OnyxStatus* st = onyx_run_event_wait(ev, 0, &rs);
  if (final_mode == GATE_OPEN) {
    ok(st);
    assert_int_equal(rs, ONYX_RUN_COMPLETE);
    assert_int_equal(onyx_run_event_query(ev), ONYX_RUN_COMPLETE);
  } else {
    assert_non_null(st);
    assert_int_equal(rs, ONYX_RUN_FAILED);
    assert_non_null(strstr(st->message, "provider '" GPU_NAME "'"));
    assert_non_null(strstr(st->message, "node 'add' (Add)"));
    ox_status_free(st);
    assert_int_equal(onyx_run_event_query(ev), ONYX_RUN_FAILED);
  }
  assert_null(onyx_run_event_native(ev));
  onyx_run_event_release(ev);
  gate(GATE_OPEN);
  log_free(log);
}

static void test_release_with_run_in_flight(void** state) {
  (void)state;
  NEED_GATE();
  release_in_flight(GATE_OPEN);
}

static void test_release_with_failing_run_in_flight(void** state) {
  (void)state;
  NEED_GATE();
  release_in_flight(GATE_FAIL);
}

/* The caller releases the event first; the binding still waits for the run. */
static void test_event_released_first(void** state) {
  (void)state;
  NEED_DEVICE();
  Log* log = log_new();
  OnyxSession* s = gpu_session(log);
  float x[N];
  input_of(7, x);
  OnyxIoBinding* b = bind(s, x);
  gate(GATE_HELD);
  OnyxRunEvent* ev = NULL;
  ok(onyx_session_run_with_binding_async(s, NULL, b, &ev));
  onyx_run_event_release(ev);
  Opener o = {20, GATE_OPEN};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, open_later, &o), 0);
  ok(onyx_session_run_with_binding(s, NULL, b)); /* waits for the first, then runs */
  pthread_join(th, NULL);
  check_y(s, b, x);
  onyx_io_binding_release(b);
  onyx_session_release(s);
  log_free(log);
}

/* --- an output bound in host memory ------------------------------------------------------ */

/* Its values are final when the call returns (the copy to the host waits
 * for the device work before it), even while the run's event is held. */
static void test_host_output_complete_on_return(void** state) {
  (void)state;
  NEED_DEVICE();
  Log* log = log_new();
  OnyxSession* s = gpu_session(log);
  float x[N];
  input_of(11, x);
  OnyxIoBinding* b = NULL;
  ok(onyx_io_binding_create(s, &b));
  OnyxValue* xv = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){ROWS, COLS}, 2, x, sizeof x, &xv));
  ok(onyx_io_binding_bind_input(b, "X", xv));
  onyx_value_release(xv);
  ok(onyx_io_binding_bind_output_to_device(b, "Y", NULL)); /* host memory */
  gate(GATE_HELD);
  OnyxRunEvent* ev = NULL;
  ok(onyx_session_run_with_binding_async(s, NULL, b, &ev));
  OnyxValue* y = NULL;
  ok(onyx_io_binding_get_outputs(b, &y, 1));
  assert_int_equal(onyx_tensor_memory(onyx_value_tensor(y))->kind, ONYX_DEVICE_CPU);
  const float* got = onyx_tensor_data(onyx_value_tensor(y));
  for (int i = 0; i < N; i++)
    assert_true(got[i] == (x[i] > 0 ? x[i] : 0.0f) + x[i]);
  onyx_value_release(y);
  gate(GATE_OPEN);
  ok(onyx_run_event_wait(ev, -1, NULL));
  onyx_run_event_release(ev);
  onyx_io_binding_release(b);
  onyx_session_release(s);
  log_free(log);
}

/* --- a CPU-only session ------------------------------------------------------------------- */

static void test_cpu_only_complete_at_once(void** state) {
  (void)state;
  NEED_DEVICE();
  Log* log = log_new();
  OnyxSession* s = model_session("[{\"name\": \"cpu\"}]", log);
  float x[N];
  input_of(8, x);
  OnyxIoBinding* b = bind(s, x);
  gate(GATE_HELD); /* no provider event is involved: it changes nothing */
  OnyxRunEvent* ev = NULL;
  ok(onyx_session_run_with_binding_async(s, NULL, b, &ev));
  assert_int_equal(onyx_run_event_query(ev), ONYX_RUN_COMPLETE);
  assert_null(onyx_run_event_native(ev));
  ok(onyx_run_event_wait(ev, 0, NULL));
  gate(GATE_OPEN);
  check_y(s, b, x);
  onyx_run_event_release(ev);
  onyx_io_binding_release(b);
  onyx_session_release(s);
  log_free(log);
}

/* --- bad arguments ------------------------------------------------------------------------ */

static void test_bad_arguments(void** state) {
  (void)state;
  NEED_DEVICE();
  Log* log = log_new();
  OnyxSession* s = gpu_session(log);
  float x[N];
  input_of(9, x);
  OnyxIoBinding* b = bind(s, x);
  OnyxStatus* st = onyx_session_run_with_binding_async(s, NULL, b, NULL);
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_INVALID_ARGUMENT);
  assert_non_null(strstr(st->message, "onyx_session_run_with_binding_async: NULL argument"));
  ox_status_free(st);
  OnyxRunEvent* ev = (OnyxRunEvent*)(uintptr_t)1;
  st = onyx_session_run_with_binding_async(NULL, NULL, b, &ev);
  assert_non_null(st);
  assert_null(ev);
  ox_status_free(st);
  OnyxIoBinding* empty = NULL;
  ok(onyx_io_binding_create(s, &empty));
  st = onyx_session_run_with_binding_async(s, NULL, empty, &ev);
  assert_non_null(st);
  assert_non_null(strstr(st->message, "no output is bound"));
  assert_null(ev);
  ox_status_free(st);
  assert_int_equal(onyx_run_event_query(NULL), ONYX_RUN_FAILED);
  st = onyx_run_event_wait(NULL, 0, NULL);
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_INVALID_ARGUMENT);
  ox_status_free(st);
  assert_null(onyx_run_event_native(NULL));
  onyx_run_event_release(NULL);
  onyx_io_binding_release(empty);
  onyx_io_binding_release(b);
  onyx_session_release(s);
  log_free(log);
}

/* --- cancellation -------------------------------------------------------------------------- */

/* Run options terminated before the call: the call itself fails with
 * ONYX_CANCELLED and gives no event; the binding runs normally after. */
static void test_cancelled_before_queuing(void** state) {
  (void)state;
  NEED_DEVICE();
  Log* log = log_new();
  OnyxSession* s = gpu_session(log);
  float x[N];
  input_of(12, x);
  OnyxIoBinding* b = bind(s, x);
  OnyxRunOptions* ro = NULL;
  ok(onyx_run_options_create(&ro));
  onyx_run_options_terminate(ro);
  OnyxRunEvent* ev = (OnyxRunEvent*)(uintptr_t)1;
  OnyxStatus* st = onyx_session_run_with_binding_async(s, ro, b, &ev);
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_CANCELLED);
  assert_null(ev);
  ox_status_free(st);
  onyx_run_options_release(ro);
  ok(onyx_session_run_with_binding_async(s, NULL, b, &ev));
  ok(onyx_run_event_wait(ev, -1, NULL));
  check_y(s, b, x);
  onyx_run_event_release(ev);
  onyx_io_binding_release(b);
  onyx_session_release(s);
  log_free(log);
}

/* --- pinned staging ----------------------------------------------------------------------- */

/* Host inputs reach the device through one page-locked staging buffer of the
 * provider, allocated at the first copy and reused by every later run. */
static void test_staging_reused(void** state) {
  (void)state;
  NEED_DEVICE();
  Log* log = log_new();
  OnyxSession* s = gpu_session(log);
  float x[N];
  input_of(10, x);
  OnyxValue* xv = NULL;
  OnyxIoBinding* b = bind_x(s, x, &xv);
  for (int run = 0; run < 6; run++) {
    input_of(20 + run, x);
    memcpy(xv->tensor->data, x, sizeof x); /* the bound input's memory: each run reads it anew */
    OnyxRunEvent* ev = NULL;
    ok(onyx_session_run_with_binding_async(s, NULL, b, &ev));
    ok(onyx_run_event_wait(ev, -1, NULL));
    onyx_run_event_release(ev);
    check_y(s, b, x);
  }
  pthread_mutex_lock(&log->lock);
  int made = count(log->text, "page-locked staging buffer of");
  pthread_mutex_unlock(&log->lock);
  if (made != 1) fprintf(stderr, "%s", log->text);
  assert_int_equal(made, 1);
  onyx_value_release(xv);
  onyx_io_binding_release(b);
  onyx_session_release(s);
  log_free(log);
}

/* The provider stays mapped for the whole process (see test_gpu.c); on
 * gpuemu the gate is looked up in it. A session tells whether there is a
 * device. */
static int setup(void** state) {
  (void)state;
  const char* dir = getenv("ONYX_PROVIDER_PATH");
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/libonyx_ep_" GPU_NAME ".so", dir ? dir : ".");
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
    return -1;
  }
#ifdef GPU_IS_EMU
  *(void**)&emu_gate = dlsym(h, "gpuemu_event_gate");
  if (!emu_gate) {
    fprintf(stderr, "%s has no gpuemu_event_gate\n", path);
    return -1;
  }
#endif
  OxProviderLib* lib = NULL;
  OnyxStatus* st = ox_provider_lib_acquire(ox_host_api(), GPU_NAME, NULL, &lib);
  size_t n = 0;
  if (!st) st = lib->provider->device_count(lib->provider, &n);
  if (lib) ox_provider_lib_release(lib);
  have_device = !st && n > 0;
  if (st) fprintf(stderr, "[  SKIP    ] no " GPU_NAME " device: %s\n", onyx_status_message(st));
  ox_status_free(st);
  return 0;
}

int main(void) {
  /* Relu and Add stay two nodes (fuse_elementwise would make them one
   * FusedElementwise): the error tests name the last node queued. */
  setenv("ONYX_OPT_DISABLE", "fuse_elementwise", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_returns_before_done),
      cmocka_unit_test(test_wait_blocks_until_done),
      cmocka_unit_test(test_alternating_bindings),
      cmocka_unit_test(test_device_error_at_wait),
      cmocka_unit_test(test_binding_serializes_runs),
      cmocka_unit_test(test_release_with_run_in_flight),
      cmocka_unit_test(test_release_with_failing_run_in_flight),
      cmocka_unit_test(test_event_released_first),
      cmocka_unit_test(test_host_output_complete_on_return),
      cmocka_unit_test(test_cpu_only_complete_at_once),
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_cancelled_before_queuing),
      cmocka_unit_test(test_staging_reused),
  };
  return cmocka_run_group_tests_name("gpu_async_" GPU_NAME, tests, setup, NULL);
}
