/* executor.c — the sequential executor: runs a plan's steps over an
 * execution frame (one tensor per slot), queuing each step's work on its
 * provider's stream; at a crossing between streams it waits on the event the
 * producer's provider recorded (ox_streams.h); frees each slot after its last
 * use, or once every stream that touched it is past it; and synchronizes
 * every provider stream before returning, or, for an asynchronous run
 * (ox_execute_io_end), records an event behind the work of its one stream
 * instead. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ox_checked.h"
#include "ox_control.h"
#include "ox_profile.h"
#include "ox_memplan.h"
#include "ox_nvtx.h"
#include "ox_frame.h"
#include "ox_program.h"
#include "ox_threadpool.h"
#include "ox_streams.h"

int32_t ox_program_ep_for_memory(OxProgram* s, const OnyxMemoryDevice* mem) {
  for (size_t e = 0; e < s->n_eps; e++)
    for (int m = ONYX_MEM_DEFAULT; m <= ONYX_MEM_READ_ONLY; m++) {
      if (m != mem->mem_type) continue;
      OnyxMemoryDevice d = ox_ep_memory(s->eps, (int32_t)e, (OnyxMemType)m);
      if (ox_memory_equal(&d, mem)) return (int32_t)e;
    }
  return -1;
}

/* --- debug dumps (docs/debugging.md) ------------------------------------------------------ */
static void ox_dump_values(OxStr* t, const OxTensor* v, size_t max) {
  if (v->device.kind != ONYX_DEVICE_CPU) {
    ox_str_addf(t, " (device memory)");
    return;
  }
  size_t n = v->count < max ? v->count : max;
  ox_str_addf(t, " =");
  for (size_t i = 0; i < n; i++) {
    const void* d = v->data;
    switch (v->type) {
    case ONYX_ELEM_FLOAT32:
      ox_str_addf(t, " %.6g", (double)((const float*)d)[i]);
      break;
    case ONYX_ELEM_FLOAT64:
      ox_str_addf(t, " %.6g", ((const double*)d)[i]);
      break;
    case ONYX_ELEM_INT8:
      ox_str_addf(t, " %d", ((const int8_t*)d)[i]);
      break;
    case ONYX_ELEM_UINT8:
    case ONYX_ELEM_BOOL:
      ox_str_addf(t, " %u", ((const uint8_t*)d)[i]);
      break;
    case ONYX_ELEM_INT16:
      ox_str_addf(t, " %d", ((const int16_t*)d)[i]);
      break;
    case ONYX_ELEM_UINT16:
      ox_str_addf(t, " %u", ((const uint16_t*)d)[i]);
      break;
    case ONYX_ELEM_INT32:
      ox_str_addf(t, " %d", ((const int32_t*)d)[i]);
      break;
    case ONYX_ELEM_UINT32:
      ox_str_addf(t, " %u", ((const uint32_t*)d)[i]);
      break;
    case ONYX_ELEM_INT64:
      ox_str_addf(t, " %lld", (long long)((const int64_t*)d)[i]);
      break;
    case ONYX_ELEM_UINT64:
      ox_str_addf(t, " %llu", (unsigned long long)((const uint64_t*)d)[i]);
      break;
    case ONYX_ELEM_STRING:
      ox_str_addf(t, " \"%s\"", ((char* const*)d)[i] ? ((char* const*)d)[i] : "");
      break;
    default:
      ox_str_addf(t, " (not shown for %s)", ox_elem_name(v->type));
      return;
    }
  }
  if (v->count > n) ox_str_addf(t, " ... (%zu values)", v->count);
}

static void ox_dump_side(OxStr* t, const OxFrame* f, const char* what, const size_t* slots,
                         size_t n, size_t max) {
  const OxPlan* P = &f->prog->plan;
  for (size_t i = 0; i < n; i++) {
    if (slots[i] == OX_NO_SLOT) continue;
    const OxTensor* v = f->values[slots[i]];
    char shape[256] = "?";
    if (v) ox_shape_str(v->type, v->dims, (int64_t)v->rank, shape, sizeof shape);
    ox_str_addf(t, "  %s %zu '%s': %s", what, i, P->slots[slots[i]].value->name,
                v ? shape : "(absent)");
    if (v && max) ox_dump_values(t, v, max);
    ox_str_addf(t, "\n");
  }
}

/* ONYX_DUMP_NODES: a node's inputs (before it runs) or outputs (after). */
static void ox_dump_node(const OxFrame* f, const OxSessionRt* rt, const OxStep* st, bool after) {
  if (!rt || !(rt->dump_nodes & (after ? 2 : 1)) || st->kind == OX_STEP_COPY ||
      st->kind == OX_STEP_HOST)
    return;
  const OxProgram* s = f->prog;
  const char* name = st->kind == OX_STEP_KERNEL ? st->node->name : s->part.groups[st->group].name;
  const char* op = st->kind == OX_STEP_KERNEL ? st->node->op_type : "FusedGroup";
  if (rt->dump_node_filter && !ox_list_has(rt->dump_node_filter, ",", name)) return;
  if (rt->dump_op_filter && !ox_list_has(rt->dump_op_filter, ",", op)) return;
  OxStr t = {0};
  ox_str_addf(&t, "onyx dump: node '%s' (%s) on %s: %s\n", name, op, s->eps[st->ep].name,
              after ? "outputs" : "inputs");
  if (after)
    ox_dump_side(&t, f, "output", st->out, st->n_out, rt->dump_max_values);
  else
    ox_dump_side(&t, f, "input", st->in, st->n_in, rt->dump_max_values);
  char* text = ox_str_take(&t);
  if (text) fputs(text, stderr);
  free(text);
}

static void ox_dump_plans_once(OxProgram* s, OxSessionRt* rt) {
  if (!rt || (!rt->dump_plan && !rt->dump_memory)) return;
  if (__atomic_exchange_n(&rt->plans_dumped, 1, __ATOMIC_ACQ_REL)) return;
  char* a = rt->dump_plan ? ox_plan_text(s) : NULL;
  char* b = rt->dump_memory ? ox_memory_plan_text(s) : NULL;
  flockfile(stderr);
  if (a) fputs(a, stderr);
  if (b) fputs(b, stderr);
  funlockfile(stderr);
  free(a);
  free(b);
}

/* --- profile events ------------------------------------------------------------------------- */
static json_t* ox_shapes_json(const OxFrame* f, const size_t* slots, size_t n) {
  json_t* arr = json_array();
  for (size_t i = 0; arr && i < n; i++) {
    const OxTensor* v = slots[i] == OX_NO_SLOT ? NULL : f->values[slots[i]];
    char shape[256] = "";
    if (v) ox_shape_str(v->type, v->dims, (int64_t)v->rank, shape, sizeof shape);
    json_array_append_new(arr, json_string(shape));
  }
  return arr;
}

static void ox_profile_step(const OxFrame* f, OxProfiler* prof, const OxStep* st, double t0,
                            json_t* in_shapes, uint64_t run_id) {
  const OxProgram* s = f->prog;
  double t1 = ox_profiler_now(prof);
  json_t* args = json_object();
  const char* op = st->kind == OX_STEP_KERNEL || st->kind == OX_STEP_HOST ? st->node->op_type
                   : st->kind == OX_STEP_GROUP                            ? "FusedGroup"
                                                                          : "Copy";
  if (args) {
    json_object_set_new(args, "op", json_string(op));
    json_object_set_new(args, "provider", json_string(ox_plan_ep_name(s, st->ep)));
    json_object_set_new(args, "input_shapes", in_shapes ? in_shapes : json_array());
    in_shapes = NULL;
    json_object_set_new(args, "output_shapes", ox_shapes_json(f, st->out, st->n_out));
    json_object_set_new(args, "run", json_integer((json_int_t)run_id));
    if (f->run && f->run->tag) json_object_set_new(args, "run_tag", json_string(f->run->tag));
  }
  json_decref(in_shapes);
  ox_profiler_complete(prof, st->kind == OX_STEP_COPY ? "copy" : "node", ox_plan_step_name(s, st),
                       t0, t1 - t0, args);
}

static OnyxStatus* ox_run_kernel_step(OxFrame* f, const OxStep* st) {
  OxProgram* s = f->prog;
  OnyxKernelContext ctx = {.frame = f, .step = st};
  for (size_t i = 0; i < st->n_in; i++)
    if (st->in[i] != OX_NO_SLOT && !f->values[st->in[i]])
      return ox_status(ONYX_FAIL, "internal: input %zu of a step is missing", i);
  OnyxStatus* err;
  if (st->kind == OX_STEP_KERNEL)
    err = st->kernel->def.compute(st->state, &ctx);
  else
    err = s->part.groups[st->group].kernel.compute(s->part.groups[st->group].kernel.state, &ctx);
  for (size_t i = 0; i < ctx.n_scratch; i++)
    free(ctx.scratch[i]);
  free(ctx.scratch);
  const char* who = st->kind == OX_STEP_KERNEL ? st->node->name : s->part.groups[st->group].name;
  const char* op = st->kind == OX_STEP_KERNEL ? st->node->op_type : "fused group";
  if (err && err->code == ONYX_CANCELLED) {
    /* A kernel that polled ctx_should_stop: the host says why. */
    OnyxStatus* why = ox_frame_stop_status(f);
    if (why) {
      ox_status_free(err);
      err = why;
    }
  }
  if (err)
    return ox_status_wrap(err, "node '%s' (%s) on provider '%s'", who, op, s->eps[st->ep].name);
  for (size_t i = 0; i < st->n_out; i++)
    if (st->out[i] != OX_NO_SLOT && !f->values[st->out[i]])
      return ox_status(ONYX_RUNTIME_ERROR,
                       "node '%s' (%s) on provider '%s' did not produce its output %zu", who, op,
                       s->eps[st->ep].name, i);
  return NULL;
}

/* --- limits and cancellation ------------------------------------------------------------ */
uint64_t ox_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t ox_deadline_after_ms(size_t ms) {
  if (!ms) return 0;
  uint64_t ns, at;
  if (__builtin_mul_overflow((uint64_t)ms, (uint64_t)1000000, &ns) ||
      __builtin_add_overflow(ox_now_ns(), ns, &at))
    return UINT64_MAX;
  return at;
}

static bool ox_frame_terminated(const OxFrame* f) {
  return f->run && __atomic_load_n(&f->run->terminate, __ATOMIC_ACQUIRE);
}

static bool ox_frame_past_deadline(const OxFrame* f) {
  return f->deadline_ns && ox_now_ns() >= f->deadline_ns;
}

bool ox_frame_should_stop(const OxFrame* f) {
  return ox_frame_terminated(f) || ox_frame_past_deadline(f);
}

OnyxStatus* ox_frame_stop_status(const OxFrame* f) {
  const OnyxRunOptions* run = f->run;
  const char* tag = run && run->tag ? run->tag : NULL;
  if (ox_frame_terminated(f))
    return ox_status(ONYX_CANCELLED, "the run%s%s%s was cancelled", tag ? " '" : "", tag ? tag : "",
                     tag ? "'" : "");
  if (!ox_frame_past_deadline(f)) return NULL;
  const OxRunConfig* o = &f->prog->cfg;
  bool fold = f->deadline_what && !strcmp(f->deadline_what, "constant folding");
  return ox_status(ONYX_CANCELLED, "the %s%s%s%s passed its time limit of %zu ms (%s)",
                   f->deadline_what ? f->deadline_what : "run", tag ? " '" : "", tag ? tag : "",
                   tag ? "'" : "", fold ? o->max_fold_ms : o->max_run_ms,
                   fold ? "max_fold_ms" : "max_run_ms");
}

/* The bytes a value holds: a tensor's, or a sequence's items'. */
static size_t ox_value_bytes(const OxTensor* t) {
  if (!t) return 0;
  if (t->vkind == OX_RT_TENSOR) return t->bytes;
  size_t sum = 0;
  for (size_t i = 0; i < t->n_items; i++)
    if (!ox_add_size(sum, ox_value_bytes(t->items[i]), &sum)) return SIZE_MAX;
  return sum;
}

static OnyxStatus* ox_live_over(const OxFrame* f, const char* who, const char* op, size_t bytes) {
  size_t max = f->prog->cfg.max_session_bytes;
  size_t live = f->live_bytes ? *f->live_bytes : 0;
  return ox_status(ONYX_LIMIT_EXCEEDED,
                   "node '%s' (%s): %zu more bytes would bring the run's live tensors over the "
                   "limit of %zu bytes (max_session_bytes; %zu bytes are held)",
                   who, op, bytes, max, live);
}

OnyxStatus* ox_frame_reserve(const OxFrame* f, const OxNode* n, size_t bytes) {
  size_t max_t = f ? f->prog->cfg.max_tensor_bytes : 0;
  if (max_t && bytes > max_t)
    return ox_status(ONYX_LIMIT_EXCEEDED,
                     "node '%s' (%s): a tensor of %zu bytes exceeds the limit of %zu bytes "
                     "(max_tensor_bytes)",
                     n ? n->name : "?", n ? n->op_type : "?", bytes, max_t);
  size_t max = f ? f->prog->cfg.max_session_bytes : 0;
  size_t live = f && f->live_bytes ? *f->live_bytes : 0, total;
  if (max && (!ox_add_size(live, bytes, &total) || total > max))
    return ox_live_over(f, n ? n->name : "?", n ? n->op_type : "?", bytes);
  return NULL;
}

OnyxStatus* ox_frame_reserve_shape(const OxFrame* f, const OxNode* n, OnyxElemType type,
                                   const int64_t* dims, size_t rank, size_t* bytes) {
  size_t count = 1, esz = type == ONYX_ELEM_STRING ? sizeof(char*) : ox_elem_size(type);
  for (size_t i = 0; i < rank; i++)
    if (dims[i] < 0 || !ox_mul_size(count, (size_t)dims[i], &count))
      return ox_status(ONYX_LIMIT_EXCEEDED,
                       "node '%s' (%s): a tensor's element count overflows (dimension %zu is "
                       "%lld)",
                       n ? n->name : "?", n ? n->op_type : "?", i, (long long)dims[i]);
  size_t b = 0;
  if (!ox_mul_size(count, esz ? esz : 1, &b))
    return ox_status(ONYX_LIMIT_EXCEEDED, "node '%s' (%s): a tensor of %zu elements overflows",
                     n ? n->name : "?", n ? n->op_type : "?", count);
  if (bytes) *bytes = b;
  return ox_frame_reserve(f, n, b);
}

void ox_frame_charge(OxFrame* f, size_t bytes) {
  if (!f || !f->live_bytes || !f->prog->cfg.max_session_bytes) return;
  size_t* live = f->live_bytes;
  *live = SIZE_MAX - *live < bytes ? SIZE_MAX : *live + bytes;
}

void ox_frame_uncharge(OxFrame* f, size_t bytes) {
  if (!f || !f->live_bytes || !f->prog->cfg.max_session_bytes) return;
  *f->live_bytes = *f->live_bytes > bytes ? *f->live_bytes - bytes : 0;
}

OnyxStatus* ox_host_tensor_new(OxFrame* f, const OxNode* n, OnyxElemType type, const int64_t* dims,
                               size_t rank, OxTensor** out) {
  *out = NULL;
  OX_TRY(ox_frame_reserve_shape(f, n, type, dims, rank, NULL));
  return ox_tensor_new(type, dims, rank, out);
}

/* The copy by the path the plan chose (ox_streams.h); the host waited for
 * the source's producer already when it ran on another stream. */
static OnyxStatus* ox_copy_by_path(OxProgram* s, const OxStep* st, int32_t path,
                                   const OxTensor* src, OxTensor* dst) {
  if (!ox_memory_equal(&src->device, &s->plan.slots[st->in[0]].mem) ||
      !ox_memory_equal(&dst->device, &st->out_mem[0]))
    path = OX_COPY_STAGED; /* not the memories planned for: the synchronous path */
  switch (path) {
  case OX_COPY_HOST:
    return ox_ep_copy_tensor(s->eps, src, dst, -1, -1); /* memcpy: both are host memories */
  case OX_COPY_BY_DST:
    return ox_ep_copy(s->eps, st->copy_dst_ep, src, dst);
  case OX_COPY_BY_SRC:
    return ox_ep_copy(s->eps, st->copy_src_ep, src, dst);
  default: {
    /* ox_ep_copy_tensor synchronizes the source's stream before and both
     * streams after staging. */
    OnyxStatus* err = ox_ep_copy_tensor(s->eps, src, dst, st->copy_src_ep, st->copy_dst_ep);
    int32_t e = st->copy_dst_ep;
    if (!err && e >= 0 && s->eps[e].stream && s->eps[e].ep->sync_stream)
      err = s->eps[e].ep->sync_stream(s->eps[e].ep, s->eps[e].stream);
    return err;
  }
  }
}

/* --- feeds outside their slot's memory, outputs fetched on a device (IO binding) ----------
 * Per slot, allocated for a run only when it has such a feed or output. */
typedef struct OxRunIo {
  /* A graph input's slot: its feed when that is not in the slot's memory (a
   * device feed). It lives past the run. */
  OxTensor** feed;
  /* A graph output's slot: the memory the output is fetched in instead of
   * host memory, when the copy step filling the slot copies from a slot in
   * that memory and nothing else reads the slot. */
  const OnyxMemoryDevice** fetch;
  /* Such an output slot: the caller's tensor in that memory, also the
   * preset of the slot the copy reads (its producer writes there). */
  OxTensor** fetch_preset;
} OxRunIo;

static void ox_run_io_free(OxRunIo* io) {
  if (!io) return;
  free(io->feed);
  free(io->fetch);
  free(io->fetch_preset);
  free(io);
}

static OnyxStatus* ox_run_io_need(OxRunIo** io, size_t n_slots) {
  if (*io) return NULL;
  OxRunIo* r = calloc(1, sizeof *r);
  if (r) {
    r->feed = calloc(n_slots + 1, sizeof *r->feed);
    r->fetch = calloc(n_slots + 1, sizeof *r->fetch);
    r->fetch_preset = calloc(n_slots + 1, sizeof *r->fetch_preset);
  }
  if (!r || !r->feed || !r->fetch || !r->fetch_preset) {
    ox_run_io_free(r);
    return ox_oom();
  }
  *io = r;
  return NULL;
}

static bool ox_tensor_same_shape(const OxTensor* a, const OxTensor* b) {
  if (a->type != b->type || a->rank != b->rank) return false;
  for (size_t i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

/* 1 when every step reading the slot is a copy step into memory `mem` and
 * the slot is no graph output: a feed already in `mem` needs no host copy. */
static bool ox_only_copies_to(const OxPlan* P, size_t slot, const OnyxMemoryDevice* mem) {
  if (P->slots[slot].is_output) return false;
  for (size_t k = 0; k < P->n_steps; k++) {
    const OxStep* st = &P->steps[k];
    for (size_t j = 0; j < st->n_in; j++)
      if (st->in[j] == slot && (st->kind != OX_STEP_COPY || !ox_memory_equal(&st->out_mem[0], mem)))
        return false;
  }
  return true;
}

/* A new header over t's data (holding a reference on its buffer). */
static OnyxStatus* ox_alias_of(const OxTensor* t, OxTensor** out) {
  if (t->buffer) return ox_tensor_view(t, t->dims, t->rank, out);
  return ox_tensor_wrap(t->type, t->dims, t->rank, t->data, &t->device, out);
}

static void ox_count_copy(OxProgram* s) {
  OxSessionRt* rt = s->cfg.rt;
  if (rt) __atomic_add_fetch(&rt->copies, 1, __ATOMIC_RELAXED);
}

/* A copy step. When a tensor that outlives the run (a feed, or the caller's
 * output tensor its producer wrote) already holds the value in the
 * destination memory, the step aliases it instead of copying (*aliased). */
static OnyxStatus* ox_run_copy_step(OxFrame* f, const OxStep* st, int32_t path, bool* aliased) {
  OxProgram* s = f->prog;
  size_t in = st->in[0], out = st->out[0];
  const OxTensor* src = f->values[in];
  const OxRunIo* io = f->io;
  const OnyxMemoryDevice* fetch = io ? io->fetch[out] : NULL;
  const OnyxMemoryDevice* mem = fetch ? fetch : &st->out_mem[0];
  const OxTensor* lasting = io ? io->feed[in] : NULL;
  const OxTensor* user = io ? io->fetch_preset[out] : NULL;
  if (user && src->data == user->data && ox_tensor_same_shape(src, user)) lasting = src;
  *aliased = false;
  /* Kernels may rely on their memory's alignment (a DLPack import may not have it). */
  uint32_t align = st->out_mem[0].alignment;
  if (lasting && lasting->vkind == OX_RT_TENSOR && ox_memory_equal(&lasting->device, mem) &&
      (align <= 1 || (uintptr_t)lasting->data % align == 0)) {
    OxTensor* t = NULL;
    OnyxStatus* err = ox_alias_of(lasting, &t);
    if (err) return ox_status_wrap(err, "aliasing value '%s'", s->plan.slots[in].value->name);
    f->values[out] = t;
    *aliased = true;
    return NULL;
  }
  OxTensor* dst = NULL;
  OnyxStatus* err = NULL;
  if (fetch) {
    /* Into the caller's tensor, or a new one, in the memory it is fetched in. */
    int32_t ep = ox_program_ep_for_memory(s, fetch);
    if (user && ox_tensor_same_shape(src, user))
      err = ox_alias_of(user, &dst);
    else if (ep < 0)
      err = ox_tensor_new(src->type, src->dims, src->rank, &dst);
    else
      err = ox_ep_alloc_tensor(s->eps, ep, (OnyxMemType)fetch->mem_type, s->cfg.max_tensor_bytes,
                               src->type, src->dims, src->rank, &dst);
    if (!err) err = ox_ep_copy_tensor(s->eps, src, dst, st->copy_src_ep, ep);
    if (!err && ep >= 0 && s->eps[ep].stream && s->eps[ep].ep->sync_stream)
      err = s->eps[ep].ep->sync_stream(s->eps[ep].ep, s->eps[ep].stream);
  } else {
    err = ox_frame_alloc_copy(f, st, src, &dst);
    if (!err) err = ox_copy_by_path(s, st, path, src, dst);
  }
  if (err) {
    ox_tensor_free(dst);
    return ox_status_wrap(err, "copying value '%s'", s->plan.slots[in].value->name);
  }
  ox_count_copy(s);
  f->values[out] = dst;
  return NULL;
}

/* The run's feeds: a feed in another memory than its slot's (a device feed
 * bound by IO binding) is passed as it is when only copy steps into its own
 * memory read it (they alias it), else staged into a host copy that the run
 * owns (the copy steps into the feed's memory still alias the feed). */
static OnyxStatus* ox_place_feeds(OxFrame* f, OxTensor** feeds, bool* borrowed) {
  OxProgram* s = f->prog;
  const OxPlan* P = &s->plan;
  for (size_t i = 0; i < s->graph->n_inputs; i++) {
    size_t slot = P->input_slots[i];
    OxTensor* t = feeds[i];
    f->values[slot] = t;
    borrowed[slot] = true;
    /* Host-addressable memories (kind CPU) are read as they are, as host memory. */
    if (!t || t->vkind != OX_RT_TENSOR || t->device.kind == ONYX_DEVICE_CPU ||
        ox_memory_equal(&t->device, &P->slots[slot].mem))
      continue;
    OX_TRY(ox_run_io_need(&f->io, P->n_slots));
    f->io->feed[slot] = t;
    if (ox_only_copies_to(P, slot, &t->device)) continue;
    int32_t ep = ox_program_ep_for_memory(s, &t->device);
    OxTensor* h = NULL;
    OnyxStatus* err = ox_tensor_new(t->type, t->dims, t->rank, &h);
    if (!err) err = ox_ep_copy_tensor(s->eps, t, h, ep, -1);
    if (!err && ep >= 0 && s->eps[ep].stream && s->eps[ep].ep->sync_stream)
      err = s->eps[ep].ep->sync_stream(s->eps[ep].ep, s->eps[ep].stream);
    if (err) {
      ox_tensor_free(h);
      return ox_status_wrap(err, "input '%s': copying it to host memory",
                            s->graph->inputs[i]->name);
    }
    ox_count_copy(s);
    f->values[slot] = h;
    borrowed[slot] = false; /* the run's own: freed after its last use */
  }
  return NULL;
}

/* Outputs fetched in a device's memory: where the plan copies output i to
 * host from a slot in fetch_mem[i] and nothing else reads the host slot, the
 * copy goes to fetch_mem[i] instead, and the caller's tensor there becomes
 * the preset of the slot copied from. Other outputs keep their preset on the
 * host slot. */
static OnyxStatus* ox_place_fetches(OxFrame* f, const bool* wanted, OxTensor* const* presets,
                                    const OnyxMemoryDevice* const* fetch_mem, OxTensor** preset) {
  OxProgram* s = f->prog;
  const OxPlan* P = &s->plan;
  size_t n_out = s->graph->n_outputs;
  for (size_t i = 0; i < n_out; i++) {
    if (!wanted[i]) continue;
    size_t slot = P->output_slots[i];
    OxTensor* user = presets ? presets[i] : NULL;
    const OnyxMemoryDevice* m = fetch_mem ? fetch_mem[i] : NULL;
    if (!m || ox_memory_equal(m, &P->slots[slot].mem)) {
      if (preset && user) preset[slot] = user;
      continue;
    }
    const OxStep* copy = NULL;
    bool unique = true;
    for (size_t j = 0; j < n_out && unique; j++)
      unique = j == i || !wanted[j] || P->output_slots[j] != slot;
    for (size_t k = 0; unique && k < P->n_steps; k++) {
      const OxStep* st = &P->steps[k];
      for (size_t j = 0; j < st->n_in; j++)
        if (st->in[j] == slot) unique = false; /* read on the host too */
      if (st->kind == OX_STEP_COPY && st->out[0] == slot) copy = st;
    }
    if (!unique || !copy || !ox_memory_equal(m, &P->slots[copy->in[0]].mem)) {
      if (preset && user) preset[slot] = user;
      continue;
    }
    OX_TRY(ox_run_io_need(&f->io, P->n_slots));
    f->io->fetch[slot] = m;
    if (user && ox_memory_equal(&user->device, m)) {
      f->io->fetch_preset[slot] = user;
      if (preset) preset[copy->in[0]] = user;
    }
  }
  return NULL;
}

static OnyxStatus* ox_sync_all(OxProgram* s) {
  OnyxStatus* first = NULL;
  for (size_t e = 0; e < s->n_eps; e++) {
    OnyxEp* ep = s->eps[e].ep;
    if (!s->eps[e].stream || !ep->sync_stream) continue;
    OnyxStatus* st = ep->sync_stream(ep, s->eps[e].stream);
    if (st && !first)
      first = ox_status_wrap(st, "provider '%s': synchronizing its stream", s->eps[e].name);
    else
      ox_status_free(st);
  }
  return first;
}

/* --- the end of an asynchronous run (ONYX_EXT_RUN_EVENT, onyx_ep.h; docs/abi.md) --------- */

static const OnyxRunEventExt* ox_run_event_ext(const OnyxEp* ep) {
  for (const OnyxExtension* x = ep->next; x; x = x->next)
    if (x->type == ONYX_EXT_RUN_EVENT && x->struct_size >= sizeof(OnyxRunEventExt)) {
      const OnyxRunEventExt* e = (const OnyxRunEventExt*)x;
      if (e->query_event && e->wait_event_for) return e;
    }
  return NULL;
}

/* The run's end. With `end` (an asynchronous run) and may_defer (the run
 * succeeded and nothing waits to be freed behind a stream), when the session
 * has one provider stream and that provider offers ONYX_EXT_RUN_EVENT, an
 * event is recorded behind the stream's work and nothing is synchronized:
 * the stream orders every later use of the run's device memory after its
 * work. Otherwise (or when the event cannot be made) every stream is
 * synchronized. */
static OnyxStatus* ox_run_end(OxProgram* s, OxRunEnd* end, bool may_defer) {
  if (!end) return ox_sync_all(s);
  end->ep = -1;
  end->ev = NULL;
  end->ext = NULL;
  end->last[0] = 0;
  int32_t only = -1;
  size_t streams = 0;
  for (size_t e = 0; e < s->n_eps; e++)
    if (s->eps[e].stream) {
      streams++;
      only = (int32_t)e;
    }
  const OnyxRunEventExt* x = may_defer && streams == 1 ? ox_run_event_ext(s->eps[only].ep) : NULL;
  OxEpSlot* e = x ? &s->eps[only] : NULL;
  if (!e || !e->ep->create_event || !e->ep->record_event || !e->ep->release_event)
    return ox_sync_all(s);
  OnyxEvent* ev = NULL;
  OnyxStatus* st = e->ep->create_event(e->ep, &ev);
  if (!st) st = e->ep->record_event(e->ep, ev, e->stream);
  if (st) {
    ox_program_log(s, ONYX_LOG_WARNING,
                   "provider '%s': no event to end the run with (%s); synchronizing its stream",
                   e->name, st->message ? st->message : "");
    ox_status_free(st);
    if (ev) e->ep->release_event(e->ep, ev);
    return ox_sync_all(s);
  }
  end->ep = only;
  end->ev = ev;
  end->ext = x;
  return NULL;
}

/* --- run graphs (ONYX_EXT_RUN_GRAPH, onyx_ep.h; docs/abi.md) ------------------------------
 * A provider whose EP offers the extension records the device work of one
 * run and replays it. The plan must allow it (every step a kernel of that
 * EP, or a copy of a graph input or output), and so must each run: inputs
 * and requested outputs bound in the EP's default memory. After the
 * extension's warm-up runs, one run is captured; every buffer it allocates
 * is held by the graph, so its addresses stay valid; later runs with the
 * captured input shapes and input and output addresses replay the graph
 * instead of running the steps. Anything else runs the steps as usual, with
 * the reason logged (at info the first time, at verbose after), or fails
 * when the extension says `required`. */
enum { OX_RG_WARMUP = 0, OX_RG_READY = 1, OX_RG_OFF = 2 };
enum { OX_RG_NORMAL = 0, OX_RG_CAPTURE = 1, OX_RG_REPLAY = 2 };

typedef struct OxRgValue {
  const void* data;
  OnyxElemType type;
  size_t rank;
  int64_t* dims;
} OxRgValue;

typedef struct OxRunGraph {
  int32_t ep; /* -1: no provider of the program offers run graphs */
  const OnyxRunGraphExt* ext;
  OnyxMemoryDevice mem;  /* the EP's default memory */
  char plan_reason[256]; /* why the plan rules graphs out; "" when it allows them */
  pthread_rwlock_t gate; /* runs hold it shared; a capture holds it alone */
  pthread_mutex_t lock;  /* the fields below */
  int state;             /* OX_RG_* */
  uint32_t warm;         /* eligible runs executed as usual so far */
  uint64_t graph;        /* the provider's graph (state READY) */
  char off_reason[512];  /* why graphs stopped (state OFF) */
  OxRgValue* values;     /* the captured run's inputs, then its outputs */
  bool* wanted;          /* the captured run's requested outputs */
  OxTensor** held;       /* the captured run's buffers */
  size_t n_held, cap_held;
  uint32_t logged; /* a bit per fallback reason already logged at info */
} OxRunGraph;

static void ox_rg_clear_capture(OxRunGraph* g, size_t n_values) {
  for (size_t i = 0; i < g->n_held; i++)
    ox_tensor_free(g->held[i]);
  free(g->held);
  g->held = NULL;
  g->n_held = g->cap_held = 0;
  for (size_t i = 0; g->values && i < n_values; i++)
    free(g->values[i].dims);
  free(g->values);
  free(g->wanted);
  g->values = NULL;
  g->wanted = NULL;
}

void ox_run_graph_free(OxProgram* s) {
  OxRunGraph* g = s->plan.run_graph;
  s->plan.run_graph = NULL;
  if (!g) return;
  if (g->ep >= 0 && g->state == OX_RG_READY && g->ext->release_graph)
    g->ext->release_graph(s->eps[g->ep].ep, g->graph);
  ox_rg_clear_capture(g, s->graph->n_inputs + s->graph->n_outputs);
  pthread_rwlock_destroy(&g->gate);
  pthread_mutex_destroy(&g->lock);
  free(g);
}

OnyxStatus* ox_run_graph_hold(OxRunGraph* g, const OxTensor* t) {
  if (!t->buffer) return NULL; /* the caller's memory (a bound tensor): not the arena's */
  if (g->n_held == g->cap_held) {
    size_t cap = g->cap_held ? 2 * g->cap_held : 16;
    OxTensor** grown = realloc(g->held, cap * sizeof *grown);
    if (!grown) return ox_oom();
    g->held = grown;
    g->cap_held = cap;
  }
  OxTensor* v = NULL;
  OX_TRY(ox_tensor_view(t, t->dims, t->rank, &v));
  g->held[g->n_held++] = v;
  return NULL;
}

static const OnyxRunGraphExt* ox_rg_ext(const OnyxEp* ep) {
  for (const OnyxExtension* x = ep->next; x; x = x->next)
    if (x->type == ONYX_EXT_RUN_GRAPH && x->struct_size >= sizeof(OnyxRunGraphExt)) {
      const OnyxRunGraphExt* e = (const OnyxRunGraphExt*)x;
      if (e->capture_begin && e->capture_end && e->replay) return e;
    }
  return NULL;
}

/* Whether the plan allows graphs: every step a kernel of EP `ep`, or a copy
 * of a graph input or into a graph output (such copies move no data when
 * the value is bound in the EP's memory; the capture checks it). */
static void ox_rg_check_plan(const OxProgram* s, OxRunGraph* g) {
  const OxPlan* P = &s->plan;
  char* r = g->plan_reason;
  size_t n = sizeof g->plan_reason;
  if (!s->eps[g->ep].stream) {
    snprintf(r, n, "provider '%s' has no stream", s->eps[g->ep].name);
    return;
  }
  /* Nodes elsewhere first: they are the cause of any copy between them. */
  for (size_t i = 0; i < P->n_steps; i++) {
    const OxStep* st = &P->steps[i];
    if (st->kind == OX_STEP_HOST) {
      snprintf(r, n, "node '%s' (%s) runs on the host", st->node->name, st->node->op_type);
      return;
    }
    if (st->kind != OX_STEP_COPY && st->ep != g->ep) {
      const char* who =
          st->kind == OX_STEP_KERNEL ? st->node->name : s->part.groups[st->group].name;
      const char* op = st->kind == OX_STEP_KERNEL ? st->node->op_type : "fused group";
      snprintf(r, n, "node '%s' (%s) runs on provider '%s'", who, op, s->eps[st->ep].name);
      return;
    }
  }
  for (size_t i = 0; i < P->n_steps; i++) {
    const OxStep* st = &P->steps[i];
    if (st->kind != OX_STEP_COPY) continue;
    bool io = false;
    for (size_t k = 0; !io && k < s->graph->n_outputs; k++)
      io = P->output_slots[k] == st->out[0];
    for (size_t k = 0; !io && k < s->graph->n_inputs; k++)
      io = P->input_slots[k] == st->in[0];
    if (!io) {
      snprintf(r, n, "value '%s' is copied between memories during the run",
               P->slots[st->in[0]].value ? P->slots[st->in[0]].value->name : "?");
      return;
    }
  }
}

/* The program's run graph state, made at its first run; NULL when no
 * provider offers run graphs. */
static OxRunGraph* ox_rg_get(OxProgram* s) {
  OxRunGraph* g = __atomic_load_n(&s->plan.run_graph, __ATOMIC_ACQUIRE);
  if (g) return g->ep >= 0 ? g : NULL;
  g = calloc(1, sizeof *g);
  if (!g) return NULL; /* out of memory: the run goes on without graphs */
  g->ep = -1;
  for (size_t e = 0; e < s->n_eps && g->ep < 0; e++) {
    const OnyxRunGraphExt* x = ox_rg_ext(s->eps[e].ep);
    if (!x) continue;
    g->ep = (int32_t)e;
    g->ext = x;
    g->mem = ox_ep_memory(s->eps, (int32_t)e, ONYX_MEM_DEFAULT);
  }
  pthread_rwlock_init(&g->gate, NULL);
  pthread_mutex_init(&g->lock, NULL);
  if (g->ep >= 0) {
    ox_rg_check_plan(s, g);
    if (g->plan_reason[0])
      ox_program_log(s, ONYX_LOG_WARNING,
                     "provider '%s': run graphs are on but this session cannot use them: %s; "
                     "its runs execute node by node",
                     s->eps[g->ep].name, g->plan_reason);
  }
  OxRunGraph* expected = NULL;
  if (!__atomic_compare_exchange_n(&s->plan.run_graph, &expected, g, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE)) {
    pthread_rwlock_destroy(&g->gate);
    pthread_mutex_destroy(&g->lock);
    free(g);
    g = expected;
  }
  return g->ep >= 0 ? g : NULL;
}

static bool ox_rg_same(const OxRgValue* v, const OxTensor* t) {
  if (v->data != t->data || v->type != t->type || v->rank != t->rank) return false;
  for (size_t k = 0; k < v->rank; k++)
    if (v->dims[k] != t->dims[k]) return false;
  return true;
}

/* Why this run cannot use the graph (written to `why`), or false when it can. */
static bool ox_rg_run_reason(const OxProgram* s, const OxRunGraph* g, OxTensor* const* feeds,
                             const bool* wanted, OxTensor* const* presets, char* why, size_t n,
                             uint32_t* kind) {
  const OxPlan* P = &s->plan;
  const OxSessionRt* rt = s->cfg.rt;
  if (g->plan_reason[0]) {
    snprintf(why, n, "%s", g->plan_reason);
    *kind = 0; /* a warning when the session's first run found it */
    return true;
  }
  if (rt && rt->dump_nodes) {
    snprintf(why, n, "node dumps (ONYX_DUMP_NODES) read values between the nodes");
    *kind = 2;
    return true;
  }
  for (size_t i = 0; i < s->graph->n_inputs; i++) {
    const OxTensor* t = feeds[i];
    size_t slot = P->input_slots[i];
    if (!t || t->vkind != OX_RT_TENSOR || !ox_memory_equal(&t->device, &g->mem)) {
      snprintf(why, n, "input '%s' is not bound in the provider's device memory (IO binding)",
               s->graph->inputs[i]->name);
      *kind = 4;
      return true;
    }
    if (!ox_memory_equal(&P->slots[slot].mem, &g->mem) && !ox_only_copies_to(P, slot, &g->mem)) {
      snprintf(why, n, "input '%s' is also read in another memory", s->graph->inputs[i]->name);
      *kind = 4;
      return true;
    }
  }
  for (size_t i = 0; i < s->graph->n_outputs; i++) {
    if (!wanted[i]) continue;
    const OxTensor* u = presets ? presets[i] : NULL;
    if (!u || u->vkind != OX_RT_TENSOR || !ox_memory_equal(&u->device, &g->mem)) {
      snprintf(why, n,
               "output '%s' is not bound at a fixed address in the provider's device memory (IO "
               "binding)",
               s->graph->outputs[i]->name);
      *kind = 8;
      return true;
    }
  }
  return false;
}

/* How this run goes: OX_RG_NORMAL, _CAPTURE or _REPLAY, holding g->gate
 * (alone for a capture); or an error when graphs are required. */
static OnyxStatus* ox_rg_decide(OxProgram* s, OxRunGraph* g, const OnyxRunOptions* run,
                                OxTensor* const* feeds, const bool* wanted,
                                OxTensor* const* presets, int* mode) {
  char why[512];
  uint32_t kind = 0;
  bool off = ox_rg_run_reason(s, g, feeds, wanted, presets, why, sizeof why, &kind);
  *mode = OX_RG_NORMAL;
  pthread_mutex_lock(&g->lock);
  if (!off && g->state == OX_RG_OFF) {
    snprintf(why, sizeof why, "%s", g->off_reason);
    off = true;
    kind = 0; /* logged when graphs stopped */
  }
  if (!off && g->state == OX_RG_READY) {
    size_t n_in = s->graph->n_inputs;
    for (size_t i = 0; i < n_in && !off; i++)
      off = !ox_rg_same(&g->values[i], feeds[i]);
    for (size_t i = 0; i < s->graph->n_outputs && !off; i++)
      off =
          g->wanted[i] != wanted[i] || (wanted[i] && !ox_rg_same(&g->values[n_in + i], presets[i]));
    if (off) {
      snprintf(why, sizeof why,
               "the inputs' shapes or the bound input and output addresses differ from the "
               "captured run's");
      kind = 16;
    } else {
      *mode = OX_RG_REPLAY;
    }
  }
  bool capture = false;
  if (!off && g->state == OX_RG_WARMUP) {
    uint32_t need = g->ext->warmup_runs ? g->ext->warmup_runs : 1;
    if (g->warm >= need)
      capture = true;
    else
      g->warm++;
  }
  bool first = kind && !(g->logged & kind);
  g->logged |= kind;
  pthread_mutex_unlock(&g->lock);
  const char* name = s->eps[g->ep].name;
  if (off) {
    if (g->ext->required)
      return ox_status(ONYX_RUNTIME_ERROR,
                       "provider '%s': the run cannot replay a graph and graphs are required: %s",
                       name, why);
    ox_run_log(s, run, first ? ONYX_LOG_INFO : ONYX_LOG_VERBOSE,
               "provider '%s': this run executes node by node instead of replaying a graph: %s",
               name, why);
  }
  if (capture && !pthread_rwlock_trywrlock(&g->gate)) {
    pthread_mutex_lock(&g->lock);
    capture = g->state == OX_RG_WARMUP; /* no other run captured meanwhile */
    pthread_mutex_unlock(&g->lock);
    if (capture) {
      *mode = OX_RG_CAPTURE;
      return NULL;
    }
    pthread_rwlock_unlock(&g->gate);
  }
  /* A run executed node by node or replayed, or a capture that found other
   * runs in flight (a later run captures): shared, waiting for a capture. */
  pthread_rwlock_rdlock(&g->gate);
  return NULL;
}

/* Graphs stop for the session (under no lock; the caller holds the gate). */
static void ox_rg_stop(OxProgram* s, OxRunGraph* g, const OnyxRunOptions* run, const char* why) {
  pthread_mutex_lock(&g->lock);
  g->state = OX_RG_OFF;
  snprintf(g->off_reason, sizeof g->off_reason, "capturing the run failed earlier (%s)", why);
  ox_rg_clear_capture(g, s->graph->n_inputs + s->graph->n_outputs);
  pthread_mutex_unlock(&g->lock);
  ox_run_log(s, run, ONYX_LOG_WARNING,
             "provider '%s': capturing the run as a graph failed: %s; this run and the "
             "session's later runs execute node by node",
             s->eps[g->ep].name, why);
}

/* Keeps what a replay is checked against: the inputs and the requested
 * outputs of the captured run. */
static OnyxStatus* ox_rg_keep_signature(OxProgram* s, OxRunGraph* g, OxTensor* const* feeds,
                                        const bool* wanted, OxTensor* const* presets) {
  size_t n_in = s->graph->n_inputs, n_out = s->graph->n_outputs;
  g->values = calloc(n_in + n_out + 1, sizeof *g->values);
  g->wanted = calloc(n_out + 1, sizeof *g->wanted);
  if (!g->values || !g->wanted) return ox_oom();
  for (size_t i = 0; i < n_in + n_out; i++) {
    const OxTensor* t = i < n_in ? feeds[i] : wanted[i - n_in] ? presets[i - n_in] : NULL;
    if (i >= n_in) g->wanted[i - n_in] = wanted[i - n_in];
    if (!t) continue;
    OxRgValue* v = &g->values[i];
    v->data = t->data;
    v->type = t->type;
    v->rank = t->rank;
    v->dims = malloc((t->rank + 1) * sizeof *v->dims);
    if (!v->dims) return ox_oom();
    if (t->rank) memcpy(v->dims, t->dims, t->rank * sizeof *v->dims);
  }
  return NULL;
}

/* A replay: one launch on the provider's stream, then the run's end as
 * usual (every stream synchronized, or an asynchronous run's event); the
 * requested outputs are the bound tensors, written by the graph. */
static OnyxStatus* ox_rg_replay(OxProgram* s, OxRunGraph* g, const OnyxRunOptions* run,
                                OxTensor** fetched, const bool* wanted, OxTensor* const* presets,
                                OxRunEnd* end) {
  OxEpSlot* e = &s->eps[g->ep];
  OxSessionRt* rt = s->cfg.rt;
  uint64_t run_id = rt ? __atomic_add_fetch(&rt->runs, 1, __ATOMIC_RELAXED) : 0;
  OxProfiler* prof = rt ? rt->profiler : NULL;
  double t0 = ox_profiler_now(prof);
  bool nvtx = ox_nvtx_run_push(rt, run);
  OnyxStatus* err = g->ext->replay(e->ep, e->stream, g->graph);
  if (err) err = ox_status_wrap(err, "provider '%s': replaying the run's graph", e->name);
  OnyxStatus* sync = ox_run_end(s, end, !err);
  if (end && end->ev)
    snprintf(end->last, sizeof end->last, "the run's graph (%zu steps)", s->plan.n_steps);
  if (!err)
    err = sync;
  else
    ox_status_free(sync);
  for (size_t i = 0; !err && i < s->graph->n_outputs; i++)
    if (wanted[i]) err = ox_alias_of(presets[i], &fetched[i]);
  if (err)
    for (size_t i = 0; i < s->graph->n_outputs; i++) {
      ox_tensor_free(fetched[i]);
      fetched[i] = NULL;
    }
  else
    ox_run_log(s, run, ONYX_LOG_VERBOSE,
               "run %llu: provider '%s' replayed the run's graph (%zu steps)",
               (unsigned long long)run_id, e->name, s->plan.n_steps);
  if (nvtx) ox_nvtx_pop();
  if (prof) {
    /* The run's one event: its steps ran inside the graph, unseen by the host. */
    json_t* args = json_object();
    if (args) {
      json_object_set_new(args, "run", json_integer((json_int_t)run_id));
      json_object_set_new(args, "steps", json_integer((json_int_t)s->plan.n_steps));
      json_object_set_new(args, "graph", json_string("replay"));
      json_object_set_new(args, "status", json_string(err ? "error" : "ok"));
      if (run && run->tag) json_object_set_new(args, "run_tag", json_string(run->tag));
    }
    ox_profiler_complete(prof, "run", run && run->tag && *run->tag ? run->tag : "run", t0,
                         ox_profiler_now(prof) - t0, args);
  }
  return err;
}

/* --- one run's view of the streams (ox_streams.h) -------------------------------------- */
typedef struct OxRunSync {
  const OxStreamPlan* sp;
  OxEventSet* set; /* this run's events, one per crossing */
  size_t* done;    /* per EP: its stream has finished this run's steps < done[ep] */
  size_t* pending; /* slots past their last use, freed once the streams are past them */
  size_t n_pending;
} OxRunSync;

static OnyxStatus* ox_run_sync_begin(OxProgram* s, OxRunSync* r) {
  *r = (OxRunSync){.sp = s->plan.streams};
  if (!r->sp) return ox_status(ONYX_FAIL, "internal: the plan has no stream table");
  r->done = calloc(s->n_eps + 1, sizeof *r->done);
  r->pending = malloc((s->plan.n_slots + 1) * sizeof *r->pending);
  if (!r->done || !r->pending) return ox_oom();
  return ox_event_set_take(s, &r->set);
}

/* After every stream is synchronized: the events go back to the plan. */
static void ox_run_sync_end(OxProgram* s, OxRunSync* r) {
  ox_event_set_give(s, r->set);
  free(r->done);
  free(r->pending);
  *r = (OxRunSync){0};
}

static void ox_run_done(OxRunSync* r, int32_t ep, size_t upto) {
  if (ep >= 0 && r->done[ep] < upto) r->done[ep] = upto;
}

/* Frees the deferred slots whose every stream has finished its last step on
 * them. */
static void ox_free_ready(OxFrame* f, OxRunSync* r) {
  const OxStreamPlan* sp = r->sp;
  for (size_t i = 0; i < r->n_pending;) {
    size_t slot = r->pending[i];
    const OxSlotSync* sl = &sp->slots[slot];
    bool ready = true;
    for (size_t u = sl->first; u < sl->first + sl->n && ready; u++)
      ready = r->done[sp->uses[u].ep] > sp->uses[u].last;
    if (!ready) {
      i++;
      continue;
    }
    ox_tensor_free(f->values[slot]);
    f->values[slot] = NULL;
    r->pending[i] = r->pending[--r->n_pending];
  }
}

/* Before step i: the host waits for every producer on another stream. */
static OnyxStatus* ox_wait_crossings(OxFrame* f, OxRunSync* r, size_t i) {
  OxProgram* s = f->prog;
  const OxStreamPlan* sp = r->sp;
  const OxStepSync* ss = &sp->steps[i];
  for (size_t w = 0; w < ss->n_waits; w++) {
    const OxCrossing* c = &sp->crossings[ss->waits[w]];
    if (r->done[c->ep] > c->step) continue; /* waited for already */
    OxEpSlot* e = &s->eps[c->ep];
    OnyxStatus* err;
    size_t upto;
    if (c->has_event) {
      err = e->ep->wait_event(e->ep, r->set->ev[ss->waits[w]], NULL);
      upto = c->step + 1;
    } else {
      err = e->ep->sync_stream ? e->ep->sync_stream(e->ep, e->stream) : NULL;
      upto = i;
    }
    if (err)
      return ox_status_wrap(err,
                            "provider '%s': the work of step %zu ('%s'), waited for by step %zu",
                            e->name, c->step, ox_plan_step_name(s, &s->plan.steps[c->step]), i);
    ox_run_done(r, c->ep, upto);
  }
  if (ss->n_waits && r->n_pending) ox_free_ready(f, r);
  return NULL;
}

/* After step i was queued: the event its consumers on other streams wait on. */
static OnyxStatus* ox_record_crossing(OxFrame* f, OxRunSync* r, size_t i) {
  const OxStepSync* ss = &r->sp->steps[i];
  if (ss->record == OX_NO_EVENT || !r->sp->crossings[ss->record].has_event) return NULL;
  OxEpSlot* e = &f->prog->eps[ss->agent];
  OnyxStatus* err = e->ep->record_event(e->ep, r->set->ev[ss->record], e->stream);
  return err ? ox_status_wrap(err, "provider '%s': record_event after step %zu", e->name, i) : NULL;
}

/* A staged copy synchronized both providers' streams. */
static void ox_copy_done(OxRunSync* r, const OxStep* st, int32_t path, size_t i) {
  if (path != OX_COPY_STAGED) return;
  ox_run_done(r, st->copy_src_ep, i + 1);
  ox_run_done(r, st->copy_dst_ep, i + 1);
}

OnyxStatus* ox_execute(OxProgram* s, const OnyxRunOptions* run, OxTensor** feeds,
                       OxTensor** fetched, const bool* wanted) {
  return ox_execute_ex(s, run, feeds, fetched, wanted, NULL);
}

/* Why the run stops before step i, or NULL when it goes on. */
static OnyxStatus* ox_stop_before(const OxFrame* f, size_t step, size_t n_steps) {
  OnyxStatus* why = ox_frame_stop_status(f);
  if (!why) return NULL;
  OnyxStatus* st = ox_status(ONYX_CANCELLED, "%s before step %zu of %zu",
                             why->message ? why->message : "", step, n_steps);
  ox_status_free(why);
  return st;
}

/* Per slot: 0 when its value is not charged to the run's live total, else
 * the bytes charged plus one. */
typedef struct OxCharges {
  size_t* bytes;
} OxCharges;

static void ox_uncharge_slot(OxFrame* f, OxCharges* c, size_t slot) {
  if (!c->bytes || !c->bytes[slot]) return;
  ox_frame_uncharge(f, c->bytes[slot] - 1);
  c->bytes[slot] = 0;
}

static const char* ox_step_op(const OxStep* st) {
  return st->kind == OX_STEP_KERNEL || st->kind == OX_STEP_HOST ? st->node->op_type
         : st->kind == OX_STEP_GROUP                            ? "fused group"
                                                                : "copy";
}

OnyxStatus* ox_frame_charge_output(OxFrame* f, const OxStep* st, size_t slot, OnyxElemType type,
                                   const int64_t* dims, size_t rank) {
  const OxProgram* s = f->prog;
  size_t max = s->cfg.max_session_bytes;
  if (!max || !f->live_bytes || (f->charged && f->charged[slot])) return NULL;
  size_t b = type == ONYX_ELEM_STRING ? sizeof(char*) : ox_elem_size(type), total;
  for (size_t i = 0; i < rank; i++)
    if (dims[i] < 0 || !ox_mul_size(b, (size_t)dims[i], &b)) b = SIZE_MAX;
  if (!ox_add_size(*f->live_bytes, b, &total) || total > max)
    return ox_live_over(f, ox_plan_step_name(s, st), ox_step_op(st), b);
  ox_frame_charge(f, b);
  if (f->charged) f->charged[slot] = b + 1; /* b < max: no wrap */
  return NULL;
}

/* Charges a finished step's values that its allocation did not (views,
 * values of host ops, copies); over max_session_bytes is an error (the
 * values are still charged: the frame's end releases them). */
static OnyxStatus* ox_charge_outputs(OxFrame* f, OxCharges* c, const OxStep* st,
                                     const bool* borrowed) {
  OnyxStatus* err = NULL;
  size_t max = f->prog->cfg.max_session_bytes;
  for (size_t i = 0; c->bytes && i < st->n_out; i++) {
    size_t slot = st->out[i];
    if (slot == OX_NO_SLOT || borrowed[slot] || c->bytes[slot] || !f->values[slot]) continue;
    size_t b = ox_value_bytes(f->values[slot]), live = *f->live_bytes, total;
    if (!err && (!ox_add_size(live, b, &total) || total > max)) {
      err = ox_live_over(f, ox_plan_step_name(f->prog, st), ox_step_op(st), b);
    }
    ox_frame_charge(f, b);
    c->bytes[slot] = b == SIZE_MAX ? SIZE_MAX : b + 1;
  }
  return err;
}

static OnyxStatus* ox_execute_steps(OxFrame* f, OxSessionRt* rt, bool* borrowed, OxRunSync* r,
                                    OxCharges* charges);

static OnyxStatus* ox_execute_in(OxProgram* s, const OnyxRunOptions* run, OxTensor** feeds,
                                 OxTensor** fetched, const bool* wanted,
                                 OxTensor* const* preset_outputs,
                                 const OnyxMemoryDevice* const* fetch_mem, const OxFrame* parent,
                                 OxRunEnd* end);

OnyxStatus* ox_execute_ex(OxProgram* s, const OnyxRunOptions* run, OxTensor** feeds,
                          OxTensor** fetched, const bool* wanted, OxTensor* const* preset_outputs) {
  return ox_execute_in(s, run, feeds, fetched, wanted, preset_outputs, NULL, NULL, NULL);
}

OnyxStatus* ox_execute_io(OxProgram* s, const OnyxRunOptions* run, OxTensor** feeds,
                          OxTensor** fetched, const bool* wanted, OxTensor* const* preset_outputs,
                          const OnyxMemoryDevice* const* fetch_mem) {
  return ox_execute_in(s, run, feeds, fetched, wanted, preset_outputs, fetch_mem, NULL, NULL);
}

OnyxStatus* ox_execute_io_end(OxProgram* s, const OnyxRunOptions* run, OxTensor** feeds,
                              OxTensor** fetched, const bool* wanted,
                              OxTensor* const* preset_outputs,
                              const OnyxMemoryDevice* const* fetch_mem, OxRunEnd* end) {
  return ox_execute_in(s, run, feeds, fetched, wanted, preset_outputs, fetch_mem, NULL, end);
}

OnyxStatus* ox_execute_nested(const OxFrame* parent, OxProgram* s, OxTensor** feeds,
                              OxTensor** fetched, const bool* wanted) {
  return ox_execute_in(s, parent->run, feeds, fetched, wanted, NULL, NULL, parent, NULL);
}

static OnyxStatus* ox_execute_body(OxProgram* s, const OnyxRunOptions* run, OxTensor** feeds,
                                   OxTensor** fetched, const bool* wanted,
                                   OxTensor* const* preset_outputs,
                                   const OnyxMemoryDevice* const* fetch_mem, const OxFrame* parent,
                                   OxRunGraph* capture, OxRunEnd* end);

/* A run: replayed from the program's run graph, captured into it, or
 * executed step by step (docs/abi.md, "Run graphs"). */
static OnyxStatus* ox_execute_in(OxProgram* s, const OnyxRunOptions* run, OxTensor** feeds,
                                 OxTensor** fetched, const bool* wanted,
                                 OxTensor* const* preset_outputs,
                                 const OnyxMemoryDevice* const* fetch_mem, const OxFrame* parent,
                                 OxRunEnd* end) {
  OxRunGraph* g = parent ? NULL : ox_rg_get(s);
  if (!g)
    return ox_execute_body(s, run, feeds, fetched, wanted, preset_outputs, fetch_mem, parent, NULL,
                           end);
  int mode = OX_RG_NORMAL;
  OX_TRY(ox_rg_decide(s, g, run, feeds, wanted, preset_outputs, &mode));
  OnyxStatus* err;
  if (mode == OX_RG_REPLAY) {
    OxLogScope scope = ox_log_scope_enter(s, run);
    err = ox_rg_replay(s, g, run, fetched, wanted, preset_outputs, end);
    ox_log_scope_leave(scope);
  } else if (mode == OX_RG_CAPTURE) {
    /* The capture ends synchronized: a failed one runs again below. */
    err =
        ox_execute_body(s, run, feeds, fetched, wanted, preset_outputs, fetch_mem, parent, g, NULL);
    pthread_mutex_lock(&g->lock);
    bool ready = g->state == OX_RG_READY;
    pthread_mutex_unlock(&g->lock);
    if (!ready) {
      ox_rg_stop(s, g, run, err ? err->message : "no graph was made");
      if (!g->ext->required) {
        ox_status_free(err);
        err = ox_execute_body(s, run, feeds, fetched, wanted, preset_outputs, fetch_mem, parent,
                              NULL, end);
      } else if (err) {
        err = ox_status_wrap(err, "provider '%s': capturing the run as a graph (required)",
                             s->eps[g->ep].name);
      }
    }
  } else {
    err = ox_execute_body(s, run, feeds, fetched, wanted, preset_outputs, fetch_mem, parent, NULL,
                          end);
  }
  pthread_rwlock_unlock(&g->gate);
  return err;
}

/* Names in end->last the last kernel step on the stream of end->ep. */
static void ox_run_end_last(const OxProgram* s, const OxRunSync* r, OxRunEnd* end) {
  end->last[0] = 0;
  for (size_t i = s->plan.n_steps; r->sp && i-- > 0;) {
    const OxStep* st = &s->plan.steps[i];
    if (r->sp->steps[i].agent != end->ep || st->kind == OX_STEP_COPY) continue;
    snprintf(end->last, sizeof end->last, "node '%s' (%s)", ox_plan_step_name(s, st),
             ox_step_op(st));
    return;
  }
}

/* Begins a capture into g (its signature first) on its provider's stream. */
static OnyxStatus* ox_rg_begin(OxProgram* s, OxRunGraph* g, OxTensor* const* feeds,
                               const bool* wanted, OxTensor* const* presets) {
  OX_TRY(ox_rg_keep_signature(s, g, feeds, wanted, presets));
  OxEpSlot* e = &s->eps[g->ep];
  OnyxStatus* err = g->ext->capture_begin(e->ep, e->stream);
  return err ? ox_status_wrap(err, "provider '%s': beginning the capture", e->name) : NULL;
}

/* Ends the capture begun by ox_rg_begin: keeps the graph when the run
 * succeeded and wrote every requested output in its bound tensor. */
static OnyxStatus* ox_rg_end(OxFrame* f, OxRunGraph* g, OnyxStatus* err, const bool* wanted,
                             OxTensor* const* presets) {
  OxProgram* s = f->prog;
  for (size_t i = 0; !err && i < s->graph->n_outputs; i++) {
    const OxTensor* v = f->values[s->plan.output_slots[i]];
    if (wanted[i] && (!v || v->data != presets[i]->data))
      err = ox_status(ONYX_RUNTIME_ERROR, "output '%s' was not written in its bound tensor",
                      s->graph->outputs[i]->name);
  }
  OxEpSlot* e = &s->eps[g->ep];
  uint64_t id = 0;
  OnyxStatus* end = g->ext->capture_end(e->ep, e->stream, err ? 0 : 1, &id);
  if (end && !err) return ox_status_wrap(end, "provider '%s': ending the capture", e->name);
  ox_status_free(end);
  if (err) return err;
  pthread_mutex_lock(&g->lock);
  g->graph = id;
  g->state = OX_RG_READY;
  size_t held = g->n_held;
  pthread_mutex_unlock(&g->lock);
  ox_run_log(s, f->run, ONYX_LOG_INFO,
             "provider '%s': captured the run as a graph (%zu steps, %zu buffers held for it); "
             "later runs with the same bound inputs and outputs replay it",
             e->name, s->plan.n_steps, held);
  return NULL;
}

static OnyxStatus* ox_execute_body(OxProgram* s, const OnyxRunOptions* run, OxTensor** feeds,
                                   OxTensor** fetched, const bool* wanted,
                                   OxTensor* const* preset_outputs,
                                   const OnyxMemoryDevice* const* fetch_mem, const OxFrame* parent,
                                   OxRunGraph* capture, OxRunEnd* end) {
  const OxPlan* P = &s->plan;
  OxSessionRt* rt = s->cfg.rt;
  ox_dump_plans_once(s, rt);
  size_t live = 0; /* a top-level run's live bytes; nested runs add to their parent's */
  OxFrame f = {.prog = s, .run = run};
  if (parent) {
    f.deadline_ns = parent->deadline_ns;
    f.deadline_what = parent->deadline_what;
    f.live_bytes = parent->live_bytes;
  } else {
    f.deadline_ns = ox_deadline_after_ms(s->cfg.max_run_ms);
    f.deadline_what = "run";
    f.live_bytes = &live;
  }
  OxCharges charges = {0};
  if (s->cfg.max_session_bytes && f.live_bytes)
    charges.bytes = calloc(P->n_slots + 1, sizeof *charges.bytes);
  f.charged = charges.bytes; /* kernels' outputs are charged as they are allocated */
  f.values = calloc(P->n_slots + 1, sizeof *f.values);
  bool* borrowed = calloc(P->n_slots + 1, sizeof *borrowed);
  OxTensor** preset = preset_outputs ? calloc(P->n_slots + 1, sizeof *preset) : NULL;
  if (!f.values || !borrowed || (preset_outputs && !preset) ||
      (s->cfg.max_session_bytes && f.live_bytes && !charges.bytes)) {
    free(f.values);
    free(borrowed);
    free(preset);
    free(charges.bytes);
    return ox_oom();
  }
  f.preset = preset;
  OxLogScope scope = ox_log_scope_enter(s, run);
  bool nvtx = ox_nvtx_run_push(rt, run); /* NVTX ranges: host/exec/ox_nvtx.h */
  for (size_t i = 0; i < P->n_slots; i++)
    if (P->slots[i].constant) {
      f.values[i] = P->slots[i].constant;
      borrowed[i] = true;
    }
  OxMemRun memrun = {0};
  OxRunSync rsync = {0};
  OnyxStatus* err = ox_place_fetches(&f, wanted, preset_outputs, fetch_mem, preset);
  if (!err) err = ox_place_feeds(&f, feeds, borrowed);
  if (!err) err = ox_memplan_run_begin(s, &memrun);
  f.memrun = &memrun;
  if (!err) err = ox_run_sync_begin(s, &rsync);
  bool capturing = false;
  if (!err && capture) {
    err = ox_rg_begin(s, capture, feeds, wanted, preset_outputs);
    capturing = !err;
    f.capture = capture;
  }
  if (!err) err = ox_execute_steps(&f, rt, borrowed, &rsync, &charges);
  if (capturing) err = ox_rg_end(&f, capture, err, wanted, preset_outputs);
  f.capture = NULL;
  /* Asynchronous: the recorded event orders the next uses of this run's
   * events and memory behind its work on the one stream. */
  OnyxStatus* sync = ox_run_end(s, parent ? NULL : end, !err && !rsync.n_pending);
  if (end && end->ev) ox_run_end_last(s, &rsync, end);
  ox_run_sync_end(s, &rsync); /* every stream is past this run's events, or behind the end event */
  if (!err)
    err = sync;
  else
    ox_status_free(sync);
  for (size_t i = 0; !err && i < s->graph->n_outputs; i++) {
    if (!wanted[i]) continue;
    size_t slot = P->output_slots[i];
    if (borrowed[slot] || !f.values[slot]) {
      if (!f.values[slot]) {
        err = ox_status(ONYX_FAIL, "internal: output '%s' was not computed",
                        s->graph->outputs[i]->name);
        break;
      }
      err = ox_tensor_clone(f.values[slot], &fetched[i]);
    } else {
      fetched[i] = f.values[slot];
      f.values[slot] = NULL;
      borrowed[slot] = true; /* a second output of the same value clones */
      f.values[slot] = fetched[i];
    }
  }
  for (size_t i = 0; i < P->n_slots; i++)
    if (!borrowed[i]) ox_tensor_free(f.values[i]);
  if (err)
    for (size_t i = 0; i < s->graph->n_outputs; i++) {
      if (!fetched[i]) continue;
      /* a fetched tensor may be referenced twice (same value): free once */
      for (size_t k = i + 1; k < s->graph->n_outputs; k++)
        if (fetched[k] == fetched[i]) fetched[k] = NULL;
      ox_tensor_free(fetched[i]);
      fetched[i] = NULL;
    }
  ox_memplan_run_end(&memrun); /* tensors taken from a block keep it alive */
  for (size_t i = 0; charges.bytes && i < P->n_slots; i++)
    ox_uncharge_slot(&f, &charges, i); /* fetched values are the caller's to account */
  free(charges.bytes);
  free(f.values);
  free(borrowed);
  free(preset);
  ox_run_io_free(f.io);
  if (err && err->code == ONYX_CANCELLED) ox_run_log(s, run, ONYX_LOG_INFO, "%s", err->message);
  if (nvtx) ox_nvtx_pop();
  ox_log_scope_leave(scope);
  return err;
}

static OnyxStatus* ox_execute_steps(OxFrame* f, OxSessionRt* rt, bool* borrowed, OxRunSync* r,
                                    OxCharges* charges) {
  OxProgram* s = f->prog;
  const OnyxRunOptions* run = f->run;
  const OxPlan* P = &s->plan;
  OxProfiler* prof = rt ? rt->profiler : NULL;
  uint64_t run_id = rt ? __atomic_add_fetch(&rt->runs, 1, __ATOMIC_RELAXED) : 0;
  double run_t0 = ox_profiler_now(prof);
  bool nvtx = rt && rt->nvtx; /* NVTX ranges: host/exec/ox_nvtx.h */
  ox_run_log(s, run, ONYX_LOG_VERBOSE, "run %llu: %zu steps", (unsigned long long)run_id,
             P->n_steps);
  OnyxStatus* err = NULL;
  for (size_t i = 0; i < P->n_steps && !err; i++) {
    if ((err = ox_stop_before(f, i, P->n_steps))) break;
    const OxStep* st = &P->steps[i];
    const OxStepSync* ss = &r->sp->steps[i];
    err = ox_wait_crossings(f, r, i);
    if (err) break;
    ox_dump_node(f, rt, st, false);
    json_t* in_shapes = prof ? ox_shapes_json(f, st->in, st->n_in) : NULL;
    double t0 = ox_profiler_now(prof);
    bool aliased = false; /* a copy step that moved no data: neither profiled nor charged */
    if (nvtx) ox_nvtx_step_push(s, st);
    err = st->kind == OX_STEP_COPY   ? ox_run_copy_step(f, st, ss->copy_path, &aliased)
          : st->kind == OX_STEP_HOST ? ox_host_run(f, st)
                                     : ox_run_kernel_step(f, st);
    if (nvtx) ox_nvtx_pop();
    if (prof && !aliased)
      ox_profile_step(f, prof, st, t0, in_shapes, run_id);
    else
      json_decref(in_shapes);
    if (!err && charges->bytes && !aliased) err = ox_charge_outputs(f, charges, st, borrowed);
    if (!err && st->kind == OX_STEP_COPY && !aliased) ox_copy_done(r, st, ss->copy_path, i);
    if (!err && f->capture && st->kind == OX_STEP_COPY && !aliased)
      err = ox_status(ONYX_RUNTIME_ERROR,
                      "value '%s' was copied between memories (a graph "
                      "records device work only)",
                      P->slots[st->in[0]].value->name);
    if (!err) err = ox_record_crossing(f, r, i);
    if (!err && rt && (rt->dump_nodes & 2) && ss->agent >= 0) {
      /* The dump reads the outputs: wait for the stream that writes them. */
      OxEpSlot* e = &s->eps[ss->agent];
      if (e->ep->sync_stream) err = e->ep->sync_stream(e->ep, e->stream);
    }
    if (!err) ox_dump_node(f, rt, st, true);
    /* Freeing (ox_streams.h): a slot whose steps all ran on the host thread,
     * or on one stream that alone writes its memory, is freed now: whoever
     * reuses the memory next is ordered behind its readers. Any other slot
     * may still be read or written by work queued on a stream; it is freed
     * once the host has waited on an event that follows its last step on
     * every such stream, or after the run's final synchronization. */
    for (size_t k = 0; k < st->n_free_after; k++) {
      size_t slot = st->free_after[k];
      if (borrowed[slot]) continue;
      ox_uncharge_slot(f, charges, slot);
      if (ox_slot_deferred(P, slot)) {
        r->pending[r->n_pending++] = slot;
        continue;
      }
      ox_tensor_free(f->values[slot]);
      f->values[slot] = NULL;
    }
  }
  if (prof) {
    json_t* args = json_object();
    if (args) {
      json_object_set_new(args, "run", json_integer((json_int_t)run_id));
      json_object_set_new(args, "steps", json_integer((json_int_t)P->n_steps));
      json_object_set_new(args, "status", json_string(err ? "error" : "ok"));
      if (run && run->tag) json_object_set_new(args, "run_tag", json_string(run->tag));
    }
    ox_profiler_complete(prof, "run", run && run->tag && *run->tag ? run->tag : "run", run_t0,
                         ox_profiler_now(prof) - run_t0, args);
  }
  return err;
}
