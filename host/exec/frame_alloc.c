/* frame_alloc.c — where a step's output lives during a run, decided in one
 * place. A kernel's output (ox_frame_alloc_output): a tensor the caller bound
 * for the slot (IO binding), else the slot's place in the run's
 * memory-pattern block (ox_memplan.h), else the heap for a graph output in
 * host memory (so that it outlives the session), else the producing
 * provider's arena (ox_ep_alloc_tensor); the limits come first:
 * max_tensor_bytes for every path, then the run's live bytes
 * (max_session_bytes). A copy step's destination (ox_frame_alloc_copy): the
 * bound tensor, else the heap (host) or the destination provider's arena. */
#include <stdint.h>
#include <string.h>
#include "ox_memplan.h"
#include "ox_frame.h"
#include "ox_program.h"
#include "ox_threadpool.h"

OxTensor* ox_frame_preset_take(OxFrame* f, size_t slot, OnyxElemType type, const int64_t* dims,
                               size_t rank, const OnyxMemoryDevice* mem) {
  const OxTensor* p = f->preset ? f->preset[slot] : NULL;
  if (!p || p->type != type || p->rank != rank || type == ONYX_ELEM_STRING) return NULL;
  if (!ox_memory_equal(&p->device, mem)) return NULL;
  /* Kernels may rely on their memory's alignment (a DLPack import may not have it). */
  if (mem->alignment > 1 && (uintptr_t)p->data % mem->alignment) return NULL;
  for (size_t i = 0; i < rank; i++)
    if (p->dims[i] != dims[i]) return NULL;
  OxTensor* t = NULL;
  OnyxStatus* st = ox_tensor_wrap(type, dims, rank, p->data, &p->device, &t);
  ox_status_free(st); /* out of memory: the caller allocates as usual */
  return t;
}

OnyxStatus* ox_frame_alloc_output(OxFrame* f, const OxStep* st, size_t o, const int64_t* dims,
                                  size_t rank, OxTensor** out) {
  *out = NULL;
  OxProgram* s = f->prog;
  size_t slot = st->out[o];
  OnyxElemType type = s->plan.slots[slot].value->type;
  /* Graph outputs in host memory go to the heap so they outlive the session. */
  bool heap = s->plan.slots[slot].is_output && st->out_mem[o].kind == ONYX_DEVICE_CPU &&
              ox_memory_equal(&st->out_mem[o], &OX_HOST_MEMORY);
  OX_TRY(ox_tensor_limit_check(s->cfg.max_tensor_bytes, type, dims, rank)); /* every path below */
  OX_TRY(ox_frame_charge_output(f, st, slot, type, dims, rank));
  OxTensor* t = ox_frame_preset_take(f, slot, type, dims, rank, &st->out_mem[o]);
  if (!t && !heap && f->memrun) t = ox_memplan_take(s, f->memrun, slot, type, dims, rank);
  if (!t && heap) {
    /* Not zeroed, as the arena's tensors are not: a kernel writes all of
     * its output. Debug builds fill it with 0xff bytes (NaN floats) so that
     * a kernel which leaves part of it unwritten fails its tests. */
    OX_TRY(ox_tensor_new_uninit(type, dims, rank, &t));
#ifndef NDEBUG
    if (type != ONYX_ELEM_STRING) memset(t->data, 0xff, t->bytes);
#endif
  }
  if (!t)
    OX_TRY(ox_ep_alloc_tensor(s->eps, st->out_ep[o], (OnyxMemType)st->out_mem[o].mem_type,
                              s->cfg.max_tensor_bytes, type, dims, rank, &t));
  if (f->capture) {
    /* A captured run's buffers belong to its graph from now on. */
    OnyxStatus* err = ox_run_graph_hold(f->capture, t);
    if (err) {
      ox_tensor_free(t);
      return err;
    }
  }
  *out = t;
  return NULL;
}

OnyxStatus* ox_frame_alloc_copy(OxFrame* f, const OxStep* st, const OxTensor* src, OxTensor** out) {
  *out = ox_frame_preset_take(f, st->out[0], src->type, src->dims, src->rank, &st->out_mem[0]);
  if (*out) return NULL;
  if (st->out_ep[0] < 0) return ox_tensor_new(src->type, src->dims, src->rank, out);
  return ox_ep_alloc_tensor(f->prog->eps, st->out_ep[0], (OnyxMemType)st->out_mem[0].mem_type,
                            f->prog->cfg.max_tensor_bytes, src->type, src->dims, src->rank, out);
}
