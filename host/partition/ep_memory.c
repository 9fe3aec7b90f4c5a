/* ep_memory.c — the memory of the session's provider instances (OxEpSlot):
 * which memory an allocator serves, tensors allocated in a provider's arena,
 * and copies between memories through the providers' copy_tensors. The plan
 * and the executor call these with the provider table they run over. */
#include <stdlib.h>
#include <string.h>
#include "ox_partition.h"

OnyxMemoryDevice ox_ep_memory(const OxEpSlot* eps, int32_t ep, OnyxMemType mem) {
  if (ep < 0) return OX_HOST_MEMORY;
  OnyxEp* e = eps[ep].ep;
  const OnyxAllocator* a = e->get_allocator ? e->get_allocator(e, mem) : NULL;
  return a ? a->device : OX_HOST_MEMORY;
}

/* The slot's arena of memory type mem, created on first use. */
static OnyxStatus* ox_slot_arena(OxEpSlot* slot, OnyxMemType mem, OxArena** out) {
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

OnyxStatus* ox_tensor_limit_check(size_t max_tensor_bytes, OnyxElemType type, const int64_t* dims,
                                  size_t rank) {
  size_t count, bytes;
  OX_TRY(ox_shape_count(dims, rank, &count));
  OX_TRY(ox_type_bytes(type, count, &bytes));
  if (type == ONYX_ELEM_STRING) bytes = count * sizeof(char*); /* the text comes later */
  if (max_tensor_bytes && bytes > max_tensor_bytes)
    return ox_status(ONYX_LIMIT_EXCEEDED, "a tensor of %zu bytes exceeds the limit of %zu bytes",
                     bytes, max_tensor_bytes);
  return NULL;
}

OnyxStatus* ox_ep_alloc_tensor(OxEpSlot* eps, int32_t ep, OnyxMemType mem, size_t max_tensor_bytes,
                               OnyxElemType type, const int64_t* dims, size_t rank,
                               OxTensor** out) {
  *out = NULL;
  OX_TRY(ox_tensor_limit_check(max_tensor_bytes, type, dims, rank));
  OnyxMemoryDevice dev = ox_ep_memory(eps, ep, mem);
  if (ep < 0 || type == ONYX_ELEM_STRING) {
    if (dev.kind != ONYX_DEVICE_CPU)
      return ox_status(ONYX_NOT_IMPLEMENTED, "string tensors live only in host memory");
    return ox_tensor_new(type, dims, rank, out);
  }
  OxArena* arena = NULL;
  OX_TRY(ox_slot_arena(&eps[ep], mem, &arena));
  OxTensor* t;
  OX_TRY(ox_tensor_wrap(type, dims, rank, NULL, &dev, &t));
  void* p = ox_arena_alloc(arena, t->bytes, 0);
  OxBuffer* b = p ? calloc(1, sizeof *b) : NULL;
  if (!b) {
    if (p) ox_arena_free(arena, p);
    size_t bytes = t->bytes;
    ox_tensor_free(t);
    return ox_status(ONYX_OUT_OF_MEMORY, "provider '%s': could not allocate %zu bytes",
                     eps[ep].name, bytes);
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

static bool ox_ep_copies(const OxEpSlot* eps, int32_t ep, const OnyxMemoryDevice* a,
                         const OnyxMemoryDevice* b) {
  if (ep < 0) return false;
  OnyxEp* e = eps[ep].ep;
  return e->can_copy && e->copy_tensors && e->can_copy(e, a, b);
}

OnyxStatus* ox_ep_copy(const OxEpSlot* eps, int32_t ep, const OxTensor* src, OxTensor* dst) {
  OnyxEp* e = eps[ep].ep;
  const OnyxTensor* sp = src;
  OnyxTensor* dp = dst;
  OnyxStatus* st = e->copy_tensors(e, &sp, &dp, 1, eps[ep].stream);
  return st ? ox_status_wrap(st, "provider '%s': copy_tensors", eps[ep].name) : NULL;
}

static OnyxStatus* ox_sync_ep(const OxEpSlot* eps, int32_t ep) {
  if (ep < 0 || !eps[ep].stream || !eps[ep].ep->sync_stream) return NULL;
  return eps[ep].ep->sync_stream(eps[ep].ep, eps[ep].stream);
}

OnyxStatus* ox_ep_copy_tensor(const OxEpSlot* eps, const OxTensor* src, OxTensor* dst,
                              int32_t src_ep, int32_t dst_ep) {
  if (src->bytes != dst->bytes || src->type != dst->type)
    return ox_status(ONYX_FAIL, "internal: copy between tensors of different sizes");
  /* Work queued on the source's stream must be done before anyone reads. */
  OX_TRY(ox_sync_ep(eps, src_ep));
  if (src->device.kind == ONYX_DEVICE_CPU && dst->device.kind == ONYX_DEVICE_CPU) {
    if (src->type != ONYX_ELEM_STRING) {
      if (src->bytes) memcpy(dst->data, src->data, src->bytes);
      return NULL;
    }
    return ox_tensor_copy_strings(dst, 0, src, 0, src->count);
  }
  if (ox_ep_copies(eps, dst_ep, &src->device, &dst->device))
    return ox_ep_copy(eps, dst_ep, src, dst);
  if (ox_ep_copies(eps, src_ep, &src->device, &dst->device))
    return ox_ep_copy(eps, src_ep, src, dst);
  /* Staging through host memory: source -> host -> destination. */
  bool out_ok = src->device.kind == ONYX_DEVICE_CPU ||
                ox_ep_copies(eps, src_ep, &src->device, &OX_HOST_MEMORY);
  bool in_ok = dst->device.kind == ONYX_DEVICE_CPU ||
               ox_ep_copies(eps, dst_ep, &OX_HOST_MEMORY, &dst->device);
  if (!out_ok || !in_ok)
    return ox_status(ONYX_NOT_IMPLEMENTED, "no provider can copy from '%s' memory to '%s' memory",
                     src_ep >= 0 ? eps[src_ep].name : "host",
                     dst_ep >= 0 ? eps[dst_ep].name : "host");
  OxTensor* tmp;
  OX_TRY(ox_tensor_new(src->type, src->dims, src->rank, &tmp));
  OnyxStatus* st = ox_ep_copy_tensor(eps, src, tmp, src_ep, -1);
  if (!st) st = ox_sync_ep(eps, src_ep);
  if (!st) st = ox_ep_copy_tensor(eps, tmp, dst, -1, dst_ep);
  if (!st) st = ox_sync_ep(eps, dst_ep); /* tmp is freed right after */
  ox_tensor_free(tmp);
  return st;
}
