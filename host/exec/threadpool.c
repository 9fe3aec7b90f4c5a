/* threadpool.c — the intra-op pool: persistent pthread workers that help one
 * caller at a time with a parallel_for.
 *
 * A caller takes the pool (an atomic flag; a caller that finds it taken runs
 * its range inline, which also makes nested calls from inside a chunk safe),
 * publishes the job under the mutex with a new generation number, and then
 * claims chunks itself like any worker. Chunks are claimed through an atomic
 * counter, so a slow thread only delays its own chunk, and they shrink as
 * the range runs out (each takes a share of what is left, "guided"): the
 * first ones are large, the last ones small, so the threads finish close
 * together even when one of them runs slower or starts late (on a shared
 * machine, one core often runs at a fraction of the other's speed for a
 * while; fixed chunks of an eighth of a 2-thread MatMul left the faster
 * thread idle for the slower one's last chunk, 2.3 of 16 ms). Workers count
 * themselves in `active` while they hold the job; the caller returns once it
 * has run out of chunks and `active` is 0, i.e. every claimed chunk is done.
 *
 * Latency: kernels call parallel_for many times per run, so neither side
 * goes to sleep at once. An idle worker spins on the generation number for
 * a while (SPIN_NS) before it waits on the condition variable, and the
 * caller spins on `active` before it waits; the caller signals the condition
 * variable only when some worker sleeps. A job is copied and `active`
 * raised under the mutex, and a caller resets the chunk counter only under
 * the mutex with `active` at 0, so a late worker never runs a chunk of one
 * job with another job's function.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "ox_threadpool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* A claim takes 1 / (GUIDED_SHARE * threads) of the items left, and at
 * least 1 / (MIN_CHUNKS_PER_THREAD * threads) of all of them (or 1): a few
 * dozen claims per call, whose cost stays negligible. */
#define GUIDED_SHARE          2
#define MIN_CHUNKS_PER_THREAD 32
#define MAX_THREADS           1024
/* How long an idle worker (or a waiting caller) spins before sleeping. */
#define SPIN_NS 50000

typedef void (*RangeFn)(void* user, size_t begin, size_t end);

typedef struct Job {
  RangeFn fn;
  void* user;
  size_t n, min_chunk, share; /* items, the smallest claim, 1 / the share of the rest */
} Job;

struct OnyxThreadPool {
  size_t size; /* threads including the caller */
  pthread_t* workers;
  size_t n_workers;
  atomic_bool taken; /* a caller owns the pool */
  pthread_mutex_t mu;
  pthread_cond_t work_cv;          /* workers wait here for a new generation */
  pthread_cond_t idle_cv;          /* callers wait here for active == 0 */
  Job job;                         /* guarded by mu */
  atomic_uint_fast64_t generation; /* written under mu, read while spinning */
  atomic_size_t active;            /* workers holding the job; raised under mu */
  size_t sleepers;                 /* workers waiting on work_cv; guarded by mu */
  bool caller_sleeps;              /* a caller waits on idle_cv; guarded by mu */
  atomic_bool stop;                /* written under mu */
  atomic_size_t next;              /* the first item not yet claimed */
};

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Claims and runs chunks of job until no item is left. */
static void run_chunks(OxThreadPool* p, const Job* job) {
  size_t begin = atomic_load_explicit(&p->next, memory_order_relaxed);
  while (begin < job->n) {
    const size_t rest = job->n - begin;
    size_t size = rest / job->share;
    if (size < job->min_chunk) size = job->min_chunk;
    if (size > rest) size = rest;
    if (atomic_compare_exchange_weak_explicit(&p->next, &begin, begin + size, memory_order_relaxed,
                                              memory_order_relaxed)) {
      job->fn(job->user, begin, begin + size);
      begin = atomic_load_explicit(&p->next, memory_order_relaxed);
    }
  }
}

/* Spins until the generation differs from `seen` or the pool stops; false
 * when SPIN_NS ran out first. */
static bool spin_for_work(OxThreadPool* p, uint64_t seen) {
  uint64_t start = 0;
  for (unsigned i = 0;; i++) {
    if (atomic_load_explicit(&p->generation, memory_order_acquire) != seen ||
        atomic_load_explicit(&p->stop, memory_order_relaxed))
      return true;
    CPU_RELAX();
    if ((i & 63) == 0) {
      uint64_t t = now_ns();
      if (!start)
        start = t;
      else if (t - start > SPIN_NS)
        return false;
    }
  }
}

static void* worker_main(void* arg) {
  OxThreadPool* p = arg;
  uint64_t seen = 0;
  for (;;) {
    spin_for_work(p, seen);
    pthread_mutex_lock(&p->mu);
    while (!atomic_load(&p->stop) && atomic_load(&p->generation) == seen) {
      p->sleepers++;
      pthread_cond_wait(&p->work_cv, &p->mu);
      p->sleepers--;
    }
    if (atomic_load(&p->stop)) break;
    /* Copying the job under the lock, and a new job waiting for active == 0,
     * guarantee this worker never runs a chunk with another job's fn. */
    seen = atomic_load(&p->generation);
    Job job = p->job;
    atomic_fetch_add(&p->active, 1);
    pthread_mutex_unlock(&p->mu);
    run_chunks(p, &job);
    if (atomic_fetch_sub(&p->active, 1) == 1) {
      pthread_mutex_lock(&p->mu);
      if (p->caller_sleeps) pthread_cond_broadcast(&p->idle_cv);
      pthread_mutex_unlock(&p->mu);
    }
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* Spins (without the mutex) until active == 0 or SPIN_NS ran out. */
static void spin_idle(OxThreadPool* p) {
  uint64_t start = 0;
  for (unsigned i = 0; atomic_load(&p->active) > 0; i++) {
    CPU_RELAX();
    if ((i & 63) == 0) {
      uint64_t t = now_ns();
      if (!start)
        start = t;
      else if (t - start > SPIN_NS)
        return;
    }
  }
}

/* Returns with active == 0; mu is held on entry and on return. */
static void wait_idle(OxThreadPool* p) {
  while (atomic_load(&p->active) > 0) {
    p->caller_sleeps = true;
    pthread_cond_wait(&p->idle_cv, &p->mu);
  }
  p->caller_sleeps = false;
}

/* Stops and joins the first n workers, then frees the pool. */
static void pool_destroy(OxThreadPool* p, size_t n) {
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, true);
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
  atomic_init(&p->next, 0);
  atomic_init(&p->generation, 0);
  atomic_init(&p->active, 0);
  atomic_init(&p->stop, false);
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
  const size_t min_chunk = n / (p->size * MIN_CHUNKS_PER_THREAD);
  return (Job){fn, user, n, min_chunk ? min_chunk : 1, p->size * GUIDED_SHARE};
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
  spin_idle(p);
  pthread_mutex_lock(&p->mu);
  wait_idle(p); /* a late worker may still hold the previous job */
  p->job = job;
  atomic_store_explicit(&p->next, 0, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
  if (p->sleepers) pthread_cond_broadcast(&p->work_cv);
  pthread_mutex_unlock(&p->mu);

  run_chunks(p, &job);

  /* Usually the workers finish their last chunks within the spin. */
  spin_idle(p);
  pthread_mutex_lock(&p->mu);
  wait_idle(p);
  pthread_mutex_unlock(&p->mu);
  atomic_store(&p->taken, false);
}
