/* fake_memory.c — the fake device's memory, copies, streams and events.
 *
 * Device memory is host memory, but every buffer is tracked so that a kernel
 * handed a pointer the host did not get from this allocator (a CPU tensor the
 * host forgot to copy) is caught, and so that leaks show at release. Fresh
 * buffers are filled with 0xFF (a NaN pattern) so reading memory nobody wrote
 * shows up in results. Streams and events are a synchronous simulation that
 * only counts, so the host's stream path runs without a GPU. */
#include <stdlib.h>
#include <string.h>
#include "fake.h"

const OnyxMemoryDevice fake_memory = {.kind = ONYX_DEVICE_OTHER,
                                      .vendor_id = FAKE_VENDOR,
                                      .device_id = 0,
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

static OnyxStatus* fake_copy_one(FakeEp* f, const OnyxTensor* src, OnyxTensor* dst, size_t i) {
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
  if (bytes) memcpy(H->tensor_mutable_data(dst), H->tensor_data(src), bytes);
  atomic_fetch_add(from_dev && to_dev ? &f->stats.copies_device
                   : to_dev           ? &f->stats.copies_in
                                      : &f->stats.copies_out,
                   1);
  return NULL;
}

static OnyxStatus* fake_copy_tensors(OnyxEp* ep, const OnyxTensor* const* src,
                                     OnyxTensor* const* dst, size_t n, OnyxStream* stream) {
  FakeEp* f = fake_ep(ep);
  OnyxStatus* st = fake_check_stream(f, stream, "copy_tensors");
  for (size_t i = 0; i < n && !st; i++)
    st = fake_copy_one(f, src[i], dst[i], i);
  return st;
}

/* --- streams and events: synchronous, counted ------------------------------------ */

#define FAKE_STREAM_MAGIC 0x57AE4u
#define FAKE_EVENT_MAGIC  0xE7E47u

struct OnyxStream {
  uint32_t magic;
  FakeEp* owner;
};

struct OnyxEvent {
  uint32_t magic;
  FakeEp* owner;
  bool recorded;
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

static OnyxStatus* fake_create_stream(OnyxEp* ep, OnyxStream** out) {
  OnyxStream* s = malloc(sizeof *s);
  if (!s) return fake_host->status_create(ONYX_OUT_OF_MEMORY, "fake: out of memory for a stream");
  *s = (OnyxStream){FAKE_STREAM_MAGIC, fake_ep(ep)};
  atomic_fetch_add(&fake_ep(ep)->stats.streams, 1);
  *out = s;
  return NULL;
}

static void fake_release_stream(OnyxEp* ep, OnyxStream* s) {
  if (!s) return;
  if (!fake_stream_ok(fake_ep(ep), s)) {
    fake_host->log(ONYX_LOG_ERROR, FAKE_NAME, "release_stream of a foreign stream %p", (void*)s);
    return;
  }
  free(s);
}

static OnyxStatus* fake_sync_stream(OnyxEp* ep, OnyxStream* s) {
  atomic_fetch_add(&fake_ep(ep)->stats.syncs, 1);
  return fake_check_stream(fake_ep(ep), s, "sync_stream");
}

static OnyxStatus* fake_create_event(OnyxEp* ep, OnyxEvent** out) {
  OnyxEvent* e = malloc(sizeof *e);
  if (!e) return fake_host->status_create(ONYX_OUT_OF_MEMORY, "fake: out of memory for an event");
  *e = (OnyxEvent){FAKE_EVENT_MAGIC, fake_ep(ep), false};
  atomic_fetch_add(&fake_ep(ep)->stats.events, 1);
  *out = e;
  return NULL;
}

static OnyxStatus* fake_record_event(OnyxEp* ep, OnyxEvent* e, OnyxStream* s) {
  FakeEp* f = fake_ep(ep);
  OnyxStatus* st = fake_check_event(f, e, "record_event");
  if (!st) st = fake_check_stream(f, s, "record_event");
  if (st) return st;
  e->recorded = true; /* work is synchronous: done as soon as it is queued */
  atomic_fetch_add(&f->stats.records, 1);
  return NULL;
}

static OnyxStatus* fake_wait_event(OnyxEp* ep, OnyxEvent* e, OnyxStream* s) {
  FakeEp* f = fake_ep(ep);
  OnyxStatus* st = fake_check_event(f, e, "wait_event");
  if (!st) st = fake_check_stream(f, s, "wait_event");
  if (st) return st;
  atomic_fetch_add(&f->stats.waits, 1);
  return NULL;
}

static void fake_release_event(OnyxEp* ep, OnyxEvent* e) {
  if (!e) return;
  if (!fake_event_ok(fake_ep(ep), e)) {
    fake_host->log(ONYX_LOG_ERROR, FAKE_NAME, "release_event of a foreign event %p", (void*)e);
    return;
  }
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
