/* Tests of the intra-op thread pool: every index runs exactly once, for many
 * sizes and pool sizes, with concurrent and nested callers. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include "ox_threadpool.h"

/* --- Coverage: each index of [0, n) exactly once ------------------------------- */

typedef struct Cover {
  atomic_int* hits;
  size_t n;
  atomic_int calls;
  atomic_int bad_ranges; /* begin >= end or end > n */
} Cover;

static void cover_fn(void* user, size_t begin, size_t end) {
  Cover* c = user;
  atomic_fetch_add(&c->calls, 1);
  if (begin >= end || end > c->n) {
    atomic_fetch_add(&c->bad_ranges, 1);
    return;
  }
  for (size_t i = begin; i < end; i++)
    atomic_fetch_add(&c->hits[i], 1);
}

/* Runs one parallel_for over n and checks that it covered [0, n) once. */
static void check_cover(OxThreadPool* p, size_t n) {
  Cover c = {calloc(n ? n : 1, sizeof(atomic_int)), n, 0, 0};
  assert_non_null(c.hits);
  ox_threadpool_parallel_for(p, n, cover_fn, &c);
  assert_int_equal(atomic_load(&c.bad_ranges), 0);
  if (n == 0)
    assert_int_equal(atomic_load(&c.calls), 0);
  else
    assert_true(atomic_load(&c.calls) >= 1);
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++)
    wrong += atomic_load(&c.hits[i]) != 1;
  assert_int_equal(wrong, 0);
  free(c.hits);
}

static const size_t kSizes[] = {0, 1, 2, 3, 5, 7, 8, 16, 17, 31, 100, 1000, 4097, 100003};
static const int kThreads[] = {1, 2, 3, 4, 8};

static void test_cover_all_sizes(void** state) {
  for (size_t t = 0; t < OX_ARRAY_LEN(kThreads); t++) {
    OxThreadPool* p;
    assert_null(ox_threadpool_create(kThreads[t], &p));
    assert_int_equal(ox_threadpool_size(p), (size_t)kThreads[t]);
    for (int rep = 0; rep < 3; rep++)
      for (size_t i = 0; i < OX_ARRAY_LEN(kSizes); i++)
        check_cover(p, kSizes[i]);
    ox_threadpool_free(p);
  }
}

static void test_null_pool_runs_inline(void** state) {
  assert_int_equal(ox_threadpool_size(NULL), 1);
  for (size_t i = 0; i < OX_ARRAY_LEN(kSizes); i++)
    check_cover(NULL, kSizes[i]);
}

/* --- Who runs what ----------------------------------------------------------- */

typedef struct Who {
  pthread_t caller;
  atomic_int calls;
  atomic_int on_caller;
  size_t begin, end; /* the last range seen */
} Who;

static void who_fn(void* user, size_t begin, size_t end) {
  Who* w = user;
  atomic_fetch_add(&w->calls, 1);
  if (pthread_equal(pthread_self(), w->caller)) atomic_fetch_add(&w->on_caller, 1);
  w->begin = begin;
  w->end = end;
}

static void test_pool_of_one_is_inline(void** state) {
  OxThreadPool* p;
  assert_null(ox_threadpool_create(1, &p));
  assert_int_equal(ox_threadpool_size(p), 1);
  Who w = {.caller = pthread_self()};
  ox_threadpool_parallel_for(p, 1000, who_fn, &w);
  /* One thread: one call over the whole range, on the caller. */
  assert_int_equal(atomic_load(&w.calls), 1);
  assert_int_equal(atomic_load(&w.on_caller), 1);
  assert_int_equal(w.begin, 0);
  assert_int_equal(w.end, 1000);
  ox_threadpool_free(p);
}

static void sleep_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* A worker's chunk blocks until the caller has run a chunk itself; if the
 * caller only waited, the worker gives up after 5 s and the test fails. */
typedef struct Participate {
  pthread_t caller;
  atomic_int caller_ran;
  atomic_int worker_gave_up;
} Participate;

static void participate_fn(void* user, size_t begin, size_t end) {
  Participate* s = user;
  if (pthread_equal(pthread_self(), s->caller)) {
    atomic_store(&s->caller_ran, 1);
    return;
  }
  for (int i = 0; i < 5000 && !atomic_load(&s->caller_ran); i++)
    sleep_ms(1);
  if (!atomic_load(&s->caller_ran)) atomic_store(&s->worker_gave_up, 1);
}

static void test_caller_participates(void** state) {
  OxThreadPool* p;
  assert_null(ox_threadpool_create(2, &p));
  Participate s = {.caller = pthread_self()};
  ox_threadpool_parallel_for(p, 64, participate_fn, &s);
  assert_int_equal(atomic_load(&s.caller_ran), 1);
  assert_int_equal(atomic_load(&s.worker_gave_up), 0);
  ox_threadpool_free(p);
}

/* With chunks that take a while, the workers must take some of them. */
typedef struct Spread {
  pthread_mutex_t mu;
  pthread_t seen[16];
  int n_seen;
} Spread;

static void spread_fn(void* user, size_t begin, size_t end) {
  Spread* s = user;
  sleep_ms(2);
  pthread_mutex_lock(&s->mu);
  bool known = false;
  for (int i = 0; i < s->n_seen; i++)
    known = known || pthread_equal(s->seen[i], pthread_self());
  if (!known && s->n_seen < 16) s->seen[s->n_seen++] = pthread_self();
  pthread_mutex_unlock(&s->mu);
}

static void test_work_is_spread(void** state) {
  OxThreadPool* p;
  assert_null(ox_threadpool_create(4, &p));
  Spread s = {.mu = PTHREAD_MUTEX_INITIALIZER};
  ox_threadpool_parallel_for(p, 16, spread_fn, &s);
  assert_true(s.n_seen >= 2);
  assert_true(s.n_seen <= 4);
  ox_threadpool_free(p);
}

/* --- Concurrent and nested callers --------------------------------------------- */

typedef struct Caller {
  OxThreadPool* pool;
  int failures;
} Caller;

static void* caller_main(void* arg) {
  Caller* c = arg;
  for (int rep = 0; rep < 200; rep++) {
    size_t n = 1 + (size_t)(rep * 37 % 1500);
    Cover cov = {calloc(n, sizeof(atomic_int)), n, 0, 0};
    if (!cov.hits) {
      c->failures++;
      continue;
    }
    ox_threadpool_parallel_for(c->pool, n, cover_fn, &cov);
    for (size_t i = 0; i < n; i++)
      c->failures += atomic_load(&cov.hits[i]) != 1;
    c->failures += atomic_load(&cov.bad_ranges);
    free(cov.hits);
  }
  return NULL;
}

static void test_concurrent_callers(void** state) {
  OxThreadPool* p;
  assert_null(ox_threadpool_create(3, &p));
  enum { N = 4 };
  pthread_t th[N];
  Caller callers[N];
  for (int i = 0; i < N; i++) {
    callers[i] = (Caller){p, 0};
    assert_int_equal(pthread_create(&th[i], NULL, caller_main, &callers[i]), 0);
  }
  for (int i = 0; i < N; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < N; i++)
    assert_int_equal(callers[i].failures, 0);
  ox_threadpool_free(p);
}

/* Outer loop over rows, each chunk running an inner parallel_for over columns
 * on the same pool: every cell must be hit once. */
enum { ROWS = 37, COLS = 53 };
typedef struct Grid {
  OxThreadPool* pool;
  atomic_int hits[ROWS][COLS];
} Grid;

typedef struct Row {
  Grid* g;
  size_t r;
} Row;

static void inner_fn(void* user, size_t begin, size_t end) {
  Row* row = user;
  for (size_t c = begin; c < end; c++)
    atomic_fetch_add(&row->g->hits[row->r][c], 1);
}

static void outer_fn(void* user, size_t begin, size_t end) {
  Grid* g = user;
  for (size_t r = begin; r < end; r++) {
    Row row = {g, r};
    ox_threadpool_parallel_for(g->pool, COLS, inner_fn, &row);
  }
}

static void test_nested_calls(void** state) {
  OxThreadPool* p;
  assert_null(ox_threadpool_create(4, &p));
  Grid* g = calloc(1, sizeof *g);
  assert_non_null(g);
  g->pool = p;
  for (int rep = 0; rep < 5; rep++)
    ox_threadpool_parallel_for(p, ROWS, outer_fn, g);
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < COLS; c++)
      assert_int_equal(atomic_load(&g->hits[r][c]), 5);
  free(g);
  ox_threadpool_free(p);
}

/* --- Creation -------------------------------------------------------------------- */

static void test_create_sizes(void** state) {
  OxThreadPool* p;
  assert_null(ox_threadpool_create(0, &p));
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  assert_int_equal(ox_threadpool_size(p), (size_t)(cores > 0 ? cores : 1));
  check_cover(p, 12345);
  ox_threadpool_free(p);

  OnyxStatus* st = ox_threadpool_create(-2, &p);
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_INVALID_ARGUMENT);
  assert_non_null(strstr(st->message, "-2"));
  assert_null(p);
  ox_status_free(st);
  ox_threadpool_free(NULL); /* no-op */
}

/* Creating and freeing pools in a loop must not leak or hang (workers that
 * never received a job must still stop). */
static void test_create_free_loop(void** state) {
  for (int i = 0; i < 50; i++) {
    OxThreadPool* p;
    assert_null(ox_threadpool_create(1 + i % 5, &p));
    if (i % 2) check_cover(p, (size_t)i * 10);
    ox_threadpool_free(p);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cover_all_sizes),       cmocka_unit_test(test_null_pool_runs_inline),
      cmocka_unit_test(test_pool_of_one_is_inline), cmocka_unit_test(test_caller_participates),
      cmocka_unit_test(test_work_is_spread),        cmocka_unit_test(test_concurrent_callers),
      cmocka_unit_test(test_nested_calls),          cmocka_unit_test(test_create_sizes),
      cmocka_unit_test(test_create_free_loop),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
