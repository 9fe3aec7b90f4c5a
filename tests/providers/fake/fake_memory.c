/* fake_memory.c — the fake device's memory, copies, streams and events.
 *
 * Device memory is host memory, but every buffer is tracked so that a kernel
 * handed a pointer the host did not get from this allocator (a CPU tensor the
 * host forgot to copy) is caught, and so that leaks show at release. Fresh
 * buffers are filled with 0xFF (a NaN pattern) so reading memory nobody wrote
 * shows up in results. Streams and events are counted; by default work is
 * synchronous (done when the call returns), and with the "async" option a
 * stream is a worker thread running queued work in order, so that the host's
 * ordering between streams is tested without a GPU. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fake.h"

const OnyxMemoryDevice fake_memory = {.kind = ONYX_DEVICE_OTHER,
                                      .vendor_id = FAKE_VENDOR,
                                      .device_id = FAKE_DEVICE_ID,
                                      .mem_type = ONYX_MEM_DEFAULT,
                                      .alignment = FAKE_ALIGN,
                                      .reserved = 0};

bool fake_is_device_memory(const OnyxMemoryDevice* m) {
  return m && m->kind == fake_memory.kind && m->vendor_id == fake_memory.vendor_id &&
         m->device_id == fake_memory.device_id && m->mem_type == fake_memory.mem_type;
}

bool fake_is_cpu_memory(const OnyxMemoryDevice* m) {
  return m && m->kind == ONYX_DEVICE_CPU;
}

/* --- allocator --------------------------------------------------------------- */

static void* fake_alloc(void* ctx, size_t bytes, size_t alignment) {
  FakeEp* f = ctx;
  if (f->fail == FAKE_FAIL_ALLOC || alignment > FAKE_ALIGN) return NULL;
  /* aligned_alloc wants a multiple of the alignment, and a zero-byte request
   * still needs a distinct live pointer. */
  size_t rounded = (bytes + FAKE_ALIGN - 1) / FAKE_ALIGN * FAKE_ALIGN;
  if (rounded < bytes) return NULL;
  void* p = aligned_alloc(FAKE_ALIGN, rounded ? rounded : FAKE_ALIGN);
  if (!p) return NULL;
  memset(p, 0xFF, rounded);
  pthread_mutex_lock(&f->lock);
  if (f->n_live == f->cap_live) {
    size_t cap = f->cap_live ? 2 * f->cap_live : 16;
    FakeBuffer* grown = realloc(f->live, cap * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&f->lock);
      free(p);
      return NULL;
    }
    f->live = grown;
    f->cap_live = cap;
  }
  f->live[f->n_live++] = (FakeBuffer){p, bytes};
  pthread_mutex_unlock(&f->lock);
  atomic_fetch_add(&f->stats.allocs, 1);
  return p;
}

static void fake_free(void* ctx, void* ptr) {
  FakeEp* f = ctx;
  if (!ptr) return;
  bool found = false;
  pthread_mutex_lock(&f->lock);
  for (size_t i = 0; i < f->n_live; i++) {
    if (f->live[i].ptr == ptr) {
      f->live[i] = f->live[--f->n_live];
      found = true;
      break;
    }
  }
  pthread_mutex_unlock(&f->lock);
  if (!found) {
    /* Not ours: freeing it would corrupt someone else's heap. */
    fake_host->log(ONYX_LOG_ERROR, FAKE_NAME, "free of %p, which is not a live fake buffer", ptr);
    return;
  }
  atomic_fetch_add(&f->stats.frees, 1);
  free(ptr);
}

void fake_allocator_init(FakeEp* f) {
  f->allocator = (OnyxAllocator){.struct_size = sizeof(OnyxAllocator),
                                 .ctx = f,
                                 .device = fake_memory,
                                 .alloc = fake_alloc,
                                 .free = fake_free};
}

bool fake_owns(FakeEp* f, const void* ptr, size_t bytes) {
  const char* p = ptr;
  bool ok = false;
  pthread_mutex_lock(&f->lock);
  for (size_t i = 0; i < f->n_live && !ok; i++) {
    const char* base = f->live[i].ptr;
    ok = p >= base && (size_t)(p - base) <= f->live[i].bytes &&
         bytes <= f->live[i].bytes - (size_t)(p - base);
  }
  pthread_mutex_unlock(&f->lock);
  return ok;
}

size_t fake_release_live(FakeEp* f) {
  size_t n = f->n_live;
  for (size_t i = 0; i < n; i++) {
    fake_host->log(ONYX_LOG_WARNING, FAKE_NAME, "buffer %p of %zu bytes still live at EP release",
                   f->live[i].ptr, f->live[i].bytes);
    free(f->live[i].ptr);
  }
  free(f->live);
  f->live = NULL;
  f->n_live = f->cap_live = 0;
  return n;
}

OnyxStatus* fake_check_input(FakeEp* f, const OnyxTensor* t, const char* what, const char* who) {
  const OnyxHostApi* H = fake_host;
  if (!t) return NULL; /* absent optional input */
  size_t bytes = H->tensor_byte_size(t);
  if (!fake_is_device_memory(H->tensor_memory(t)) ||
      (bytes && !fake_owns(f, H->tensor_data(t), bytes)))
    return H->status_create(ONYX_RUNTIME_ERROR, "fake: %s: input %s is not in fake-device memory",
                            who, what);
  return NULL;
}

/* --- EP memory slots ---------------------------------------------------------- */

static const OnyxAllocator* fake_get_allocator(OnyxEp* ep, OnyxMemType type) {
  /* Only device memory is ours; anything else is the host's malloc. */
  return type == ONYX_MEM_DEFAULT ? &fake_ep(ep)->allocator : NULL;
}

/* Host CPU memory <-> device both ways, and device -> device (counted as
 * copies_device) so the host never needs to stage a fake -> fake copy. */
static int fake_can_copy(OnyxEp* ep, const OnyxMemoryDevice* src, const OnyxMemoryDevice* dst) {
  return (fake_is_device_memory(src) && (fake_is_cpu_memory(dst) || fake_is_device_memory(dst))) ||
         (fake_is_cpu_memory(src) && fake_is_device_memory(dst));
}

/* Every fake-side pointer of a copy must be a live fake buffer. */
static OnyxStatus* fake_check_copy_side(FakeEp* f, const OnyxTensor* t, size_t i,
                                        const char* side) {
  const OnyxHostApi* H = fake_host;
  const OnyxMemoryDevice* m = H->tensor_memory(t);
  if (fake_is_device_memory(m)) {
    size_t bytes = H->tensor_byte_size(t);
    if (bytes && !fake_owns(f, H->tensor_data(t), bytes))
      return H->status_create(ONYX_RUNTIME_ERROR,
                              "fake: copy %zu: %s claims fake-device memory but is not a live "
                              "fake buffer",
                              i, side);
    return NULL;
  }
  if (!fake_is_cpu_memory(m))
    return H->status_create(ONYX_INVALID_ARGUMENT,
                            "fake: copy %zu: %s is in memory of kind %d vendor 0x%x, which the "
                            "fake device cannot copy",
                            i, side, m ? m->kind : -1, m ? m->vendor_id : 0u);
  return NULL;
}

static OnyxStatus* fake_check_stream(FakeEp* f, OnyxStream* s, const char* slot);

typedef struct FakeCopyJob {
  void* dst;
  const void* src;
  size_t bytes;
  atomic_size_t* counter;
} FakeCopyJob;

static OnyxStatus* copy_job_run(void* arg) {
  FakeCopyJob* j = arg;
  if (j->bytes) memcpy(j->dst, j->src, j->bytes);
  atomic_fetch_add(j->counter, 1);
  return NULL;
}

static OnyxStatus* fake_copy_one(FakeEp* f, const OnyxTensor* src, OnyxTensor* dst, size_t i,
                                 OnyxStream* stream) {
  const OnyxHostApi* H = fake_host;
  size_t bytes = H->tensor_byte_size(src);
  if (bytes != H->tensor_byte_size(dst))
    return H->status_create(ONYX_INVALID_ARGUMENT,
                            "fake: copy %zu: source has %zu bytes, destination %zu", i, bytes,
                            H->tensor_byte_size(dst));
  OnyxStatus* st = fake_check_copy_side(f, src, i, "source");
  if (!st) st = fake_check_copy_side(f, dst, i, "destination");
  if (st) return st;
  bool from_dev = fake_is_device_memory(H->tensor_memory(src));
  bool to_dev = fake_is_device_memory(H->tensor_memory(dst));
  if (!from_dev && !to_dev)
    return H->status_create(ONYX_INVALID_ARGUMENT,
                            "fake: copy %zu: neither side is in fake-device memory", i);
  FakeCopyJob job = {H->tensor_mutable_data(dst), H->tensor_data(src), bytes,
                     from_dev && to_dev ? &f->stats.copies_device
                     : to_dev           ? &f->stats.copies_in
                                        : &f->stats.copies_out};
  if (!fake_stream_is_async(stream)) return copy_job_run(&job);
  FakeCopyJob* queued = malloc(sizeof *queued);
  if (!queued) return H->status_create(ONYX_OUT_OF_MEMORY, "fake: out of memory queuing a copy");
  *queued = job;
  return fake_stream_enqueue(stream, copy_job_run, free, queued);
}

static OnyxStatus* fake_copy_tensors(OnyxEp* ep, const OnyxTensor* const* src,
                                     OnyxTensor* const* dst, size_t n, OnyxStream* stream) {
  FakeEp* f = fake_ep(ep);
  OnyxStatus* st = fake_check_stream(f, stream, "copy_tensors");
  for (size_t i = 0; i < n && !st; i++)
    st = fake_copy_one(f, src[i], dst[i], i, stream);
  return st;
}

/* --- streams and events ---------------------------------------------------------
 * Synchronous (default): work is done when the call that queues it returns,
 * so an event is complete as soon as it is recorded. Asynchronous ("async"):
 * a stream owns a worker thread that runs its queue in order; record_event
 * queues a marker that completes the event when the worker reaches it;
 * wait_event on a stream queues a wait for that marker, on NULL it blocks
 * the caller; sync_stream blocks until the queue is empty. An event counts
 * generations (one per record), so a wait is for the latest record before
 * it, and carries the stream's error as the marker saw it. */

#define FAKE_STREAM_MAGIC 0x57AE4u
#define FAKE_EVENT_MAGIC  0xE7E47u

typedef enum FakeWorkKind { FAKE_WORK_RUN, FAKE_WORK_MARK, FAKE_WORK_WAIT } FakeWorkKind;

typedef struct FakeWork {
  struct FakeWork* next;
  FakeWorkKind kind;
  FakeWorkFn run; /* RUN */
  void (*drop)(void*);
  void* arg;
  OnyxEvent* event; /* MARK, WAIT */
  uint64_t gen;
} FakeWork;

struct OnyxStream {
  uint32_t magic;
  FakeEp* owner;
  bool async;
  /* Asynchronous streams only; the fields below are guarded by lock. */
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t work; /* queue not empty, or stop */
  pthread_cond_t idle; /* unfinished reached 0 */
  FakeWork *head, *tail;
  size_t unfinished; /* queued or running */
  bool stop;
  OnyxStatusCode error_code; /* the first failure since the last sync_stream */
  char* error;
};

struct OnyxEvent {
  uint32_t magic;
  FakeEp* owner;
  /* Guarded by owner->event_lock. */
  uint64_t recorded, done; /* generations: records made, records reached */
  OnyxStatusCode error_code;
  char* error;
};

/* Catches a host that hands one EP's stream to another. NULL is the
 * synchronous default stream and always fine. */
static bool fake_stream_ok(FakeEp* f, const OnyxStream* s) {
  return !s || (s->magic == FAKE_STREAM_MAGIC && s->owner == f);
}

static bool fake_event_ok(FakeEp* f, const OnyxEvent* e) {
  return e && e->magic == FAKE_EVENT_MAGIC && e->owner == f;
}

static OnyxStatus* fake_check_stream(FakeEp* f, OnyxStream* s, const char* slot) {
  if (!fake_stream_ok(f, s))
    return fake_host->status_create(ONYX_INVALID_ARGUMENT,
                                    "fake: %s: stream %p was not created by this fake EP", slot,
                                    (void*)s);
  return NULL;
}

static OnyxStatus* fake_check_event(FakeEp* f, OnyxEvent* e, const char* slot) {
  if (!fake_event_ok(f, e))
    return fake_host->status_create(ONYX_INVALID_ARGUMENT,
                                    "fake: %s: event %p was not created by this fake EP", slot,
                                    (void*)e);
  return NULL;
}

bool fake_stream_is_async(const OnyxStream* s) {
  return s && s->async;
}

void fake_sleep_ms(long ms) {
  struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  while (ms > 0 && nanosleep(&t, &t) != 0 && errno == EINTR)
    ;
}

static void fake_stream_push(OnyxStream* s, FakeWork* w) {
  pthread_mutex_lock(&s->lock);
  w->next = NULL;
  if (s->tail)
    s->tail->next = w;
  else
    s->head = w;
  s->tail = w;
  s->unfinished++;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->lock);
}

OnyxStatus* fake_stream_enqueue(OnyxStream* s, FakeWorkFn run, void (*drop)(void*), void* arg) {
  FakeWork* w = calloc(1, sizeof *w);
  if (!w) {
    if (drop) drop(arg);
    return fake_host->status_create(ONYX_OUT_OF_MEMORY, "fake: out of memory queuing work");
  }
  *w = (FakeWork){.kind = FAKE_WORK_RUN, .run = run, .drop = drop, .arg = arg};
  fake_stream_push(s, w);
  return NULL;
}

void fake_stream_drain(OnyxStream* s) {
  if (!fake_stream_is_async(s)) return;
  pthread_mutex_lock(&s->lock);
  while (s->unfinished)
    pthread_cond_wait(&s->idle, &s->lock);
  pthread_mutex_unlock(&s->lock);
}

/* Sets the event's generation `gen` reached, with the error (owned) seen. */
static void fake_event_complete(OnyxEvent* e, uint64_t gen, OnyxStatusCode code, char* error) {
  FakeEp* f = e->owner;
  pthread_mutex_lock(&f->event_lock);
  if (e->done < gen) e->done = gen;
  free(e->error);
  e->error = error;
  e->error_code = code;
  pthread_cond_broadcast(&f->event_cond);
  pthread_mutex_unlock(&f->event_lock);
}

static void fake_work_do(OnyxStream* s, FakeWork* w) {
  FakeEp* f = s->owner;
  if (w->kind == FAKE_WORK_RUN) {
    OnyxStatus* st = w->run(w->arg);
    if (w->drop) w->drop(w->arg);
    if (!st) return;
    pthread_mutex_lock(&s->lock);
    if (!s->error) {
      s->error = strdup(fake_host->status_message(st));
      s->error_code = fake_host->status_code(st);
    }
    pthread_mutex_unlock(&s->lock);
    fake_host->status_release(st);
  } else if (w->kind == FAKE_WORK_MARK) {
    pthread_mutex_lock(&s->lock);
    char* error = s->error ? strdup(s->error) : NULL;
    OnyxStatusCode code = s->error ? s->error_code : ONYX_OK;
    pthread_mutex_unlock(&s->lock);
    fake_event_complete(w->event, w->gen, code, error);
  } else {
    pthread_mutex_lock(&f->event_lock);
    while (w->event->done < w->gen)
      pthread_cond_wait(&f->event_cond, &f->event_lock);
    pthread_mutex_unlock(&f->event_lock);
  }
}

static void* fake_stream_main(void* arg) {
  OnyxStream* s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->head && !s->stop)
      pthread_cond_wait(&s->work, &s->lock);
    if (!s->head) break; /* stopped, and everything queued has run */
    FakeWork* w = s->head;
    s->head = w->next;
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->lock);
    fake_work_do(s, w);
    free(w);
    pthread_mutex_lock(&s->lock);
    if (--s->unfinished == 0) pthread_cond_broadcast(&s->idle);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

static OnyxStatus* fake_create_stream(OnyxEp* ep, OnyxStream** out) {
  FakeEp* f = fake_ep(ep);
  OnyxStream* s = calloc(1, sizeof *s);
  if (!s) return fake_host->status_create(ONYX_OUT_OF_MEMORY, "fake: out of memory for a stream");
  *s = (OnyxStream){.magic = FAKE_STREAM_MAGIC, .owner = f, .async = f->async};
  if (s->async) {
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->idle, NULL);
    if (pthread_create(&s->thread, NULL, fake_stream_main, s) != 0) {
      pthread_cond_destroy(&s->idle);
      pthread_cond_destroy(&s->work);
      pthread_mutex_destroy(&s->lock);
      free(s);
      return fake_host->status_create(ONYX_FAIL, "fake: cannot start a stream thread");
    }
  }
  atomic_fetch_add(&f->stats.streams, 1);
  *out = s;
  return NULL;
}

static void fake_release_stream(OnyxEp* ep, OnyxStream* s) {
  if (!s) return;
  if (!fake_stream_ok(fake_ep(ep), s)) {
    fake_host->log(ONYX_LOG_ERROR, FAKE_NAME, "release_stream of a foreign stream %p", (void*)s);
    return;
  }
  if (s->async) {
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL); /* runs what is still queued first */
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->lock);
    free(s->error);
  }
  free(s);
}

static OnyxStatus* fake_sync_stream(OnyxEp* ep, OnyxStream* s) {
  atomic_fetch_add(&fake_ep(ep)->stats.syncs, 1);
  OnyxStatus* st = fake_check_stream(fake_ep(ep), s, "sync_stream");
  if (st || !fake_stream_is_async(s)) return st;
  pthread_mutex_lock(&s->lock);
  while (s->unfinished)
    pthread_cond_wait(&s->idle, &s->lock);
  char* error = s->error;
  OnyxStatusCode code = s->error_code;
  s->error = NULL;
  pthread_mutex_unlock(&s->lock);
  if (!error) return NULL;
  st = fake_host->status_create(code, "%s", error);
  free(error);
  return st;
}

static OnyxStatus* fake_create_event(OnyxEp* ep, OnyxEvent** out) {
  OnyxEvent* e = calloc(1, sizeof *e);
  if (!e) return fake_host->status_create(ONYX_OUT_OF_MEMORY, "fake: out of memory for an event");
  *e = (OnyxEvent){.magic = FAKE_EVENT_MAGIC, .owner = fake_ep(ep)};
  atomic_fetch_add(&fake_ep(ep)->stats.events, 1);
  *out = e;
  return NULL;
}

static OnyxStatus* fake_record_event(OnyxEp* ep, OnyxEvent* e, OnyxStream* s) {
  FakeEp* f = fake_ep(ep);
  OnyxStatus* st = fake_check_event(f, e, "record_event");
  if (!st) st = fake_check_stream(f, s, "record_event");
  if (st) return st;
  atomic_fetch_add(&f->stats.records, 1);
  pthread_mutex_lock(&f->event_lock);
  uint64_t gen = ++e->recorded;
  pthread_mutex_unlock(&f->event_lock);
  if (!fake_stream_is_async(s)) {
    fake_event_complete(e, gen, ONYX_OK, NULL); /* the work before it is done */
    return NULL;
  }
  FakeWork* w = calloc(1, sizeof *w);
  if (!w) return fake_host->status_create(ONYX_OUT_OF_MEMORY, "fake: out of memory for a record");
  *w = (FakeWork){.kind = FAKE_WORK_MARK, .event = e, .gen = gen};
  fake_stream_push(s, w);
  return NULL;
}

static OnyxStatus* fake_wait_event(OnyxEp* ep, OnyxEvent* e, OnyxStream* s) {
  FakeEp* f = fake_ep(ep);
  OnyxStatus* st = fake_check_event(f, e, "wait_event");
  if (!st) st = fake_check_stream(f, s, "wait_event");
  if (st) return st;
  atomic_fetch_add(&f->stats.waits, 1);
  pthread_mutex_lock(&f->event_lock);
  uint64_t gen = e->recorded;
  if (fake_stream_is_async(s)) {
    pthread_mutex_unlock(&f->event_lock);
    FakeWork* w = calloc(1, sizeof *w);
    if (!w) return fake_host->status_create(ONYX_OUT_OF_MEMORY, "fake: out of memory for a wait");
    *w = (FakeWork){.kind = FAKE_WORK_WAIT, .event = e, .gen = gen};
    fake_stream_push(s, w);
    return NULL;
  }
  while (e->done < gen)
    pthread_cond_wait(&f->event_cond, &f->event_lock);
  if (e->error) st = fake_host->status_create(e->error_code, "%s", e->error);
  pthread_mutex_unlock(&f->event_lock);
  return st;
}

static void fake_release_event(OnyxEp* ep, OnyxEvent* e) {
  if (!e) return;
  if (!fake_event_ok(fake_ep(ep), e)) {
    fake_host->log(ONYX_LOG_ERROR, FAKE_NAME, "release_event of a foreign event %p", (void*)e);
    return;
  }
  free(e->error);
  free(e);
}

void fake_install_memory_slots(OnyxEp* ep) {
  ep->get_allocator = fake_get_allocator;
  ep->can_copy = fake_can_copy;
  ep->copy_tensors = fake_copy_tensors;
  ep->create_stream = fake_create_stream;
  ep->release_stream = fake_release_stream;
  ep->sync_stream = fake_sync_stream;
  ep->create_event = fake_create_event;
  ep->record_event = fake_record_event;
  ep->wait_event = fake_wait_event;
  ep->release_event = fake_release_event;
}
