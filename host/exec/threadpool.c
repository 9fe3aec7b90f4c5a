/* threadpool.c — the intra-op pool: persistent pthread workers that help one
 * caller at a time with a parallel_for.
 *
 * A caller takes the pool (an atomic flag; a caller that finds it taken runs
 * its range inline, which also makes nested calls from inside a chunk safe),
 * publishes the job under the mutex with a new generation number, and then
 * claims chunks itself like any worker. Chunks are claimed through an atomic
 * counter, so a slow thread only delays its own chunk. Workers count
 * themselves in `active` while they hold the job; the caller returns once it
 * has run out of chunks and `active` is 0, i.e. every claimed chunk is done.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#include "ox_threadpool.h"

/* Chunks per thread: enough to even out uneven chunks, few enough that the
 * claiming cost stays negligible. */
#define CHUNKS_PER_THREAD 4
#define MAX_THREADS       1024

typedef void (*RangeFn)(void* user, size_t begin, size_t end);

typedef struct Job {
  RangeFn fn;
  void* user;
  size_t n, chunk, n_chunks;
} Job;

struct OnyxThreadPool {
  size_t size; /* threads including the caller */
  pthread_t* workers;
  size_t n_workers;
  atomic_bool taken; /* a caller owns the pool */
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* workers wait here for a new generation */
  pthread_cond_t idle_cv; /* callers wait here for active == 0 */
  Job job;                /* guarded by mu */
  uint64_t generation;    /* guarded by mu */
  size_t active;          /* workers holding the job; guarded by mu */
  bool stop;              /* guarded by mu */
  atomic_size_t next_chunk;
};

/* Runs chunks of job until none is left. */
static void run_chunks(OxThreadPool* p, const Job* job) {
  for (;;) {
    size_t c = atomic_fetch_add_explicit(&p->next_chunk, 1, memory_order_relaxed);
    if (c >= job->n_chunks) return;
    size_t begin = c * job->chunk;
    size_t end = job->n - begin < job->chunk ? job->n : begin + job->chunk;
    job->fn(job->user, begin, end);
  }
}

static void* worker_main(void* arg) {
  OxThreadPool* p = arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && p->generation == seen)
      pthread_cond_wait(&p->work_cv, &p->mu);
    if (p->stop) break;
    /* Copying the job under the lock, and a new job waiting for active == 0,
     * guarantee this worker never runs a chunk with another job's fn. */
    seen = p->generation;
    Job job = p->job;
    p->active++;
    pthread_mutex_unlock(&p->mu);
    run_chunks(p, &job);
    pthread_mutex_lock(&p->mu);
    if (--p->active == 0) pthread_cond_broadcast(&p->idle_cv);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

static void wait_idle(OxThreadPool* p) {
  while (p->active > 0)
    pthread_cond_wait(&p->idle_cv, &p->mu);
}

/* Stops and joins the first n workers, then frees the pool. */
static void pool_destroy(OxThreadPool* p, size_t n) {
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_cond_broadcast(&p->work_cv);
  pthread_mutex_unlock(&p->mu);
  for (size_t i = 0; i < n; i++)
    pthread_join(p->workers[i], NULL);
  pthread_cond_destroy(&p->idle_cv);
  pthread_cond_destroy(&p->work_cv);
  pthread_mutex_destroy(&p->mu);
  free(p->workers);
  free(p);
}

static size_t resolve_threads(int threads) {
  if (threads > 0) return (size_t)threads;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores > 0 ? (size_t)cores : 1;
}

static bool sync_init(OxThreadPool* p) {
  if (pthread_mutex_init(&p->mu, NULL) != 0) return false;
  if (pthread_cond_init(&p->work_cv, NULL) != 0) {
    pthread_mutex_destroy(&p->mu);
    return false;
  }
  if (pthread_cond_init(&p->idle_cv, NULL) != 0) {
    pthread_cond_destroy(&p->work_cv);
    pthread_mutex_destroy(&p->mu);
    return false;
  }
  return true;
}

OnyxStatus* ox_threadpool_create(int threads, OxThreadPool** out) {
  *out = NULL;
  if (threads < 0 || threads > MAX_THREADS)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "thread pool: %d threads requested; expected 0 (one per core) to %d", threads,
                     MAX_THREADS);
  OxThreadPool* p = calloc(1, sizeof *p);
  if (!p) return ox_oom();
  p->size = resolve_threads(threads);
  if (p->size > MAX_THREADS) p->size = MAX_THREADS;
  atomic_init(&p->taken, false);
  atomic_init(&p->next_chunk, 0);
  p->workers = calloc(p->size, sizeof *p->workers);
  if (!p->workers || !sync_init(p)) {
    free(p->workers);
    free(p);
    return ox_status(ONYX_FAIL, "thread pool: cannot allocate its state");
  }
  for (size_t i = 0; i + 1 < p->size; i++) {
    int err = pthread_create(&p->workers[i], NULL, worker_main, p);
    if (err) {
      size_t wanted = p->size - 1;
      pool_destroy(p, i);
      return ox_status(ONYX_FAIL, "thread pool: cannot start worker %zu of %zu (error %d)", i + 1,
                       wanted, err);
    }
    p->n_workers = i + 1;
  }
  *out = p;
  return NULL;
}

void ox_threadpool_free(OxThreadPool* p) {
  if (p) pool_destroy(p, p->n_workers);
}

size_t ox_threadpool_size(const OxThreadPool* p) {
  return p ? p->size : 1;
}

static Job make_job(const OxThreadPool* p, size_t n, RangeFn fn, void* user) {
  size_t n_chunks = p->size * CHUNKS_PER_THREAD;
  if (n_chunks > n) n_chunks = n;
  size_t chunk = (n + n_chunks - 1) / n_chunks;
  return (Job){fn, user, n, chunk, (n + chunk - 1) / chunk};
}

void ox_threadpool_parallel_for(OxThreadPool* p, size_t n, RangeFn fn, void* user) {
  if (n == 0 || !fn) return;
  bool expected = false;
  if (!p || p->n_workers == 0 || n == 1 ||
      !atomic_compare_exchange_strong(&p->taken, &expected, true)) {
    fn(user, 0, n);
    return;
  }
  Job job = make_job(p, n, fn, user);
  pthread_mutex_lock(&p->mu);
  wait_idle(p); /* a late worker may still hold the previous job */
  p->job = job;
  atomic_store_explicit(&p->next_chunk, 0, memory_order_relaxed);
  p->generation++;
  pthread_cond_broadcast(&p->work_cv);
  pthread_mutex_unlock(&p->mu);

  run_chunks(p, &job);

  pthread_mutex_lock(&p->mu);
  wait_idle(p);
  pthread_mutex_unlock(&p->mu);
  atomic_store(&p->taken, false);
}
