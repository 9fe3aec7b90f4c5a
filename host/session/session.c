/* session.c — a session: load, resolve, partition, plan; then runs. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_model.h"
#include "ox_session.h"

void ox_session_log(const OnyxSession* s, OnyxLogSeverity sev, const char* fmt, ...) {
  const OnyxSessionOptions* o = s ? s->opts : NULL;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  OnyxLogSeverity min = o ? o->log_severity : ox_log_default_severity();
  if (o && o->log_fn)
    ox_log_to((OxLogSink)o->log_fn, o->log_user, min, sev, "%s", buf);
  else
    ox_log_to(NULL, NULL, min, sev, "%s", buf);
}

/* --- memory ----------------------------------------------------------------------- */

OnyxMemoryDevice ox_session_ep_memory(OnyxSession* s, int32_t ep, OnyxMemType mem) {
  if (ep < 0) return OX_HOST_MEMORY;
  OnyxEp* e = s->eps[ep].ep;
  const OnyxAllocator* a = e->get_allocator ? e->get_allocator(e, mem) : NULL;
  return a ? a->device : OX_HOST_MEMORY;
}

static OnyxStatus* ox_slot_arena(OnyxSession* s, int32_t ep, OnyxMemType mem, OxArena** out) {
  OxEpSlot* slot = &s->eps[ep];
  if ((unsigned)mem > ONYX_MEM_READ_ONLY)
    return ox_status(ONYX_INVALID_ARGUMENT, "provider '%s': unknown memory type %d", slot->name,
                     (int)mem);
  pthread_mutex_lock(&slot->arena_lock);
  OnyxStatus* st = NULL;
  if (!slot->arenas[mem]) {
    OnyxEp* e = slot->ep;
    const OnyxAllocator* a = e->get_allocator ? e->get_allocator(e, mem) : NULL;
    st = ox_arena_create(a, NULL, &slot->arenas[mem]);
  }
  *out = slot->arenas[mem];
  pthread_mutex_unlock(&slot->arena_lock);
  return st;
}

static void ox_arena_release_cb(void* ctx, void* ptr, size_t bytes) {
  (void)bytes;
  ox_arena_free(ctx, ptr);
}

OnyxStatus* ox_session_check_tensor_limit(const OnyxSession* s, OnyxElemType type,
                                          const int64_t* dims, size_t rank) {
  size_t count, bytes;
  OX_TRY(ox_shape_count(dims, rank, &count));
  OX_TRY(ox_type_bytes(type, count, &bytes));
  if (type == ONYX_ELEM_STRING) bytes = count * sizeof(char*); /* the text comes later */
  size_t max = s->opts->max_tensor_bytes;
  if (max && bytes > max)
    return ox_status(ONYX_LIMIT_EXCEEDED, "a tensor of %zu bytes exceeds the limit of %zu bytes",
                     bytes, max);
  return NULL;
}

OnyxStatus* ox_session_alloc_tensor(OnyxSession* s, int32_t ep, OnyxMemType mem, OnyxElemType type,
                                    const int64_t* dims, size_t rank, OxTensor** out) {
  *out = NULL;
  OX_TRY(ox_session_check_tensor_limit(s, type, dims, rank));
  OnyxMemoryDevice dev = ox_session_ep_memory(s, ep, mem);
  if (ep < 0 || type == ONYX_ELEM_STRING) {
    if (dev.kind != ONYX_DEVICE_CPU)
      return ox_status(ONYX_NOT_IMPLEMENTED, "string tensors live only in host memory");
    return ox_tensor_new(type, dims, rank, out);
  }
  OxArena* arena = NULL;
  OX_TRY(ox_slot_arena(s, ep, mem, &arena));
  OxTensor* t;
  OX_TRY(ox_tensor_wrap(type, dims, rank, NULL, &dev, &t));
  void* p = ox_arena_alloc(arena, t->bytes, 0);
  OxBuffer* b = p ? calloc(1, sizeof *b) : NULL;
  if (!b) {
    if (p) ox_arena_free(arena, p);
    size_t bytes = t->bytes;
    ox_tensor_free(t);
    return ox_status(ONYX_OUT_OF_MEMORY, "provider '%s': could not allocate %zu bytes",
                     s->eps[ep].name, bytes);
  }
  *b = (OxBuffer){.refs = 1,
                  .ptr = p,
                  .bytes = t->bytes,
                  .type = type,
                  .release = ox_arena_release_cb,
                  .release_ctx = arena};
  t->buffer = b;
  t->data = p;
  *out = t;
  return NULL;
}

/* --- copies: host fast path, then a provider's copy, then staging ------------------ */

static bool ox_ep_copies(OnyxSession* s, int32_t ep, const OnyxMemoryDevice* a,
                         const OnyxMemoryDevice* b) {
  if (ep < 0) return false;
  OnyxEp* e = s->eps[ep].ep;
  return e->can_copy && e->copy_tensors && e->can_copy(e, a, b);
}

OnyxStatus* ox_session_ep_copy(OnyxSession* s, int32_t ep, const OxTensor* src, OxTensor* dst) {
  OnyxEp* e = s->eps[ep].ep;
  const OnyxTensor* sp = src;
  OnyxTensor* dp = dst;
  OnyxStatus* st = e->copy_tensors(e, &sp, &dp, 1, s->eps[ep].stream);
  return st ? ox_status_wrap(st, "provider '%s': copy_tensors", s->eps[ep].name) : NULL;
}

static OnyxStatus* ox_sync_ep(OnyxSession* s, int32_t ep) {
  if (ep < 0 || !s->eps[ep].stream || !s->eps[ep].ep->sync_stream) return NULL;
  return s->eps[ep].ep->sync_stream(s->eps[ep].ep, s->eps[ep].stream);
}

OnyxStatus* ox_copy_tensor(OnyxSession* s, const OxTensor* src, OxTensor* dst, int32_t src_ep,
                           int32_t dst_ep) {
  if (src->bytes != dst->bytes || src->type != dst->type)
    return ox_status(ONYX_FAIL, "internal: copy between tensors of different sizes");
  /* Work queued on the source's stream must be done before anyone reads. */
  OX_TRY(ox_sync_ep(s, src_ep));
  if (src->device.kind == ONYX_DEVICE_CPU && dst->device.kind == ONYX_DEVICE_CPU) {
    if (src->type != ONYX_ELEM_STRING) {
      if (src->bytes) memcpy(dst->data, src->data, src->bytes);
      return NULL;
    }
    return ox_tensor_copy_strings(dst, 0, src, 0, src->count);
  }
  if (ox_ep_copies(s, dst_ep, &src->device, &dst->device))
    return ox_session_ep_copy(s, dst_ep, src, dst);
  if (ox_ep_copies(s, src_ep, &src->device, &dst->device))
    return ox_session_ep_copy(s, src_ep, src, dst);
  /* Staging through host memory: source -> host -> destination. */
  bool out_ok =
      src->device.kind == ONYX_DEVICE_CPU || ox_ep_copies(s, src_ep, &src->device, &OX_HOST_MEMORY);
  bool in_ok =
      dst->device.kind == ONYX_DEVICE_CPU || ox_ep_copies(s, dst_ep, &OX_HOST_MEMORY, &dst->device);
  if (!out_ok || !in_ok)
    return ox_status(ONYX_NOT_IMPLEMENTED, "no provider can copy from '%s' memory to '%s' memory",
                     src_ep >= 0 ? s->eps[src_ep].name : "host",
                     dst_ep >= 0 ? s->eps[dst_ep].name : "host");
  OxTensor* tmp;
  OX_TRY(ox_tensor_new(src->type, src->dims, src->rank, &tmp));
  OnyxStatus* st = ox_copy_tensor(s, src, tmp, src_ep, -1);
  if (!st) st = ox_sync_ep(s, src_ep);
  if (!st) st = ox_copy_tensor(s, tmp, dst, -1, dst_ep);
  if (!st) st = ox_sync_ep(s, dst_ep); /* tmp is freed right after */
  ox_tensor_free(tmp);
  return st;
}
