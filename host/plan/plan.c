/* plan.c — from a placed graph to a list of steps over value slots.
 *
 * A slot is one value on one memory. A value gets a "home" slot where it is
 * produced (graph inputs and constants: host memory) and one more slot per
 * other memory that a consumer needs it in, filled by a copy step inserted
 * right before the first consumer there. Constants needed on a device are
 * copied once here, at session creation. Graph outputs always end in host
 * memory. Each slot is freed after its last use, or once the streams that
 * touched it are known to be past it (host/plan/ox_streams.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_compile_cache.h"
#include "ox_nested.h"
#include "ox_memplan.h"
#include "ox_program.h"
#include "ox_streams.h"

static const char* ox_slot_ep_name(const OxProgram* s, int32_t ep) {
  return ep >= 0 ? s->eps[ep].name : "host";
}

static void ox_mem_str(const OnyxMemoryDevice* m, char* buf, size_t len) {
  static const char* const kinds[] = {"cpu", "gpu", "npu", "other"};
  const char* k = (unsigned)m->kind < 4 ? kinds[m->kind] : "?";
  if (m->kind == ONYX_DEVICE_CPU && !m->vendor_id && m->mem_type == ONYX_MEM_DEFAULT)
    snprintf(buf, len, "host");
  else
    snprintf(buf, len, "%s:%x:%d/mem%d", k, m->vendor_id, m->device_id, m->mem_type);
}

static OnyxStatus* ox_new_slot(OxPlan* P, OxValue* v, const OnyxMemoryDevice* mem, size_t* out) {
  if (!ox_grow((void**)&P->slots, &P->cap_slots, P->n_slots + 1, sizeof *P->slots)) return ox_oom();
  P->slots[P->n_slots] = (OxSlot){.value = v, .mem = *mem};
  *out = P->n_slots++;
  return NULL;
}

static OnyxStatus* ox_new_step(OxPlan* P, OxStepKind kind, int32_t ep, OxStep** out) {
  if (!ox_grow((void**)&P->steps, &P->cap_steps, P->n_steps + 1, sizeof *P->steps)) return ox_oom();
  OxStep* st = &P->steps[P->n_steps++];
  *st = (OxStep){.kind = kind, .ep = ep, .group = -1, .copy_src_ep = -1, .copy_dst_ep = -1};
  *out = st;
  return NULL;
}

static OnyxStatus* ox_step_io(OxStep* st, size_t n_in, size_t n_out) {
  st->in = malloc((n_in ? n_in : 1) * sizeof *st->in);
  st->out = malloc((n_out ? n_out : 1) * sizeof *st->out);
  st->out_mem = calloc(n_out ? n_out : 1, sizeof *st->out_mem);
  st->out_ep = calloc(n_out ? n_out : 1, sizeof *st->out_ep);
  if (!st->in || !st->out || !st->out_mem || !st->out_ep) return ox_oom();
  st->n_in = n_in;
  st->n_out = n_out;
  for (size_t i = 0; i < n_in; i++)
    st->in[i] = OX_NO_SLOT;
  for (size_t i = 0; i < n_out; i++)
    st->out[i] = OX_NO_SLOT;
  return NULL;
}

/* Per value: its home slot, the provider that produced it (-1: host). */
typedef struct OxPlanCtx {
  OxProgram* s;
  size_t* home;
  int32_t* home_ep;
} OxPlanCtx;

static OnyxStatus* ox_note_copy(OxPlan* P, const char* fmt, ...) OX_PRINTF(2, 3);
static OnyxStatus* ox_note_copy(OxPlan* P, const char* fmt, ...) {
  if (!ox_grow((void**)&P->copies, &P->cap_copies, P->n_copies + 1, sizeof *P->copies))
    return ox_oom();
  va_list ap;
  va_start(ap, fmt);
  char* text = NULL;
  if (vasprintf(&text, fmt, ap) < 0) text = NULL;
  va_end(ap);
  if (!text) return ox_oom();
  P->copies[P->n_copies++].text = text;
  return NULL;
}

/* The slot holding v in memory `mem`, adding a copy (or, for constants, a
 * one-time device copy) when v lives elsewhere. */
static OnyxStatus* ox_slot_on(OxPlanCtx* c, OxValue* v, const OnyxMemoryDevice* mem, int32_t ep,
                              const char* for_what, size_t* out) {
  OxPlan* P = &c->s->plan;
  size_t home = c->home[v->index];
  if (home == OX_NO_SLOT)
    return ox_status(ONYX_FAIL, "internal: value '%s' has no slot before its use", v->name);
  for (size_t i = home; i < P->n_slots; i++)
    if (P->slots[i].value == v && ox_memory_equal(&P->slots[i].mem, mem)) {
      *out = i;
      return NULL;
    }
  const OxSlot src = P->slots[home];
  char from[64], to[64];
  ox_mem_str(&src.mem, from, sizeof from);
  ox_mem_str(mem, to, sizeof to);
  size_t dst;
  OX_TRY(ox_new_slot(P, v, mem, &dst));
  if (src.constant) {
    OxTensor* t = NULL;
    OX_TRY(ox_ep_alloc_tensor(c->s->eps, ep, (OnyxMemType)mem->mem_type, c->s->cfg.max_tensor_bytes,
                              src.constant->type, src.constant->dims, src.constant->rank, &t));
    OnyxStatus* st = ox_ep_copy_tensor(c->s->eps, src.constant, t, c->home_ep[v->index], ep);
    if (st) {
      ox_tensor_free(t);
      return ox_status_wrap(st, "copying constant '%s' to provider '%s'", v->name,
                            c->s->eps[ep].name);
    }
    P->slots[dst].constant = t;
    P->slots[dst].owned_constant = true;
    *out = dst;
    return ox_note_copy(P, "constant '%s': %s -> %s (%s), once at session creation", v->name, from,
                        to, ox_slot_ep_name(c->s, ep));
  }
  OxStep* st;
  OX_TRY(ox_new_step(P, OX_STEP_COPY, ep, &st));
  OX_TRY(ox_step_io(st, 1, 1));
  st->in[0] = home;
  st->out[0] = dst;
  st->out_mem[0] = *mem;
  st->out_ep[0] = ep;
  st->copy_src_ep = c->home_ep[v->index];
  st->copy_dst_ep = ep;
  *out = dst;
  return ox_note_copy(P, "value '%s': %s (%s) -> %s (%s), for %s", v->name, from,
                      ox_slot_ep_name(c->s, st->copy_src_ep), to, ox_slot_ep_name(c->s, ep),
                      for_what);
}

static OnyxStatus* ox_home_slot(OxPlanCtx* c, OxValue* v, const OnyxMemoryDevice* mem, int32_t ep,
                                size_t* out) {
  OX_TRY(ox_new_slot(&c->s->plan, v, mem, out));
  c->home[v->index] = *out;
  c->home_ep[v->index] = ep;
  return NULL;
}

/* Steps for one node or one fused group. */
static OnyxStatus* ox_plan_unit(OxPlanCtx* c, OxNode* n) {
  OxProgram* s = c->s;
  bool host = n->ep == OX_EP_HOST; /* host op: host memory, no kernel */
  int32_t e = host ? -1 : n->ep;
  OxGroup* grp = n->group >= 0 ? &s->part.groups[n->group] : NULL;
  OxValue** ins = grp ? grp->view.inputs : n->inputs;
  size_t n_in = grp ? grp->view.n_inputs : n->n_inputs;
  OxValue** outs = grp ? grp->view.outputs : n->outputs;
  size_t n_out = grp ? grp->view.n_outputs : n->n_outputs;
  const OxKernel* k = NULL;
  if (!grp && !host) {
    /* The kernel placement matched (ox_partition_kernels). */
    k = n->index < s->part.n_kernels ? s->part.kernels[n->index] : NULL;
    if (!k)
      return ox_status(ONYX_FAIL, "internal: node '%s' (%s) on '%s' has no kernel recorded",
                       n->name, n->op_type, s->eps[e].name);
  }
  char for_what[256];
  snprintf(for_what, sizeof for_what, "%s '%s'", grp ? "group" : "node", grp ? grp->name : n->name);
  size_t* in_slots = calloc(n_in ? n_in : 1, sizeof *in_slots);
  if (!in_slots) return ox_oom();
  OnyxStatus* err = NULL;
  for (size_t i = 0; i < n_in && !err; i++) {
    in_slots[i] = OX_NO_SLOT;
    if (!ins[i]) continue;
    OnyxMemType mt = k ? ox_kernel_input_mem(k, i) : ONYX_MEM_DEFAULT;
    OnyxMemoryDevice mem = ox_ep_memory(s->eps, e, mt);
    err = ox_slot_on(c, ins[i], &mem, e, for_what, &in_slots[i]);
  }
  OxStep* st = NULL;
  if (!err)
    err = ox_new_step(&s->plan, host ? OX_STEP_HOST : grp ? OX_STEP_GROUP : OX_STEP_KERNEL, e, &st);
  if (!err) err = ox_step_io(st, n_in, n_out);
  if (err) {
    free(in_slots);
    return err;
  }
  if (n_in) memcpy(st->in, in_slots, n_in * sizeof *in_slots);
  free(in_slots);
  st->node = grp ? NULL : n;
  st->kernel = k;
  st->group = n->group;
  for (size_t i = 0; i < n_out; i++) {
    if (!outs[i]) continue;
    OnyxMemType mt = k ? ox_kernel_output_mem(k, i) : ONYX_MEM_DEFAULT;
    st->out_mem[i] = ox_ep_memory(s->eps, e, mt);
    st->out_ep[i] = e;
    size_t slot;
    OX_TRY(ox_home_slot(c, outs[i], &st->out_mem[i], e, &slot));
    st = &s->plan.steps[s->plan.n_steps - 1]; /* steps may have moved */
    st->out[i] = slot;
  }
  return NULL;
}

/* Orders units (nodes, with each group as one unit) topologically. */
static OnyxStatus* ox_plan_units(OxPlanCtx* c) {
  OxProgram* s = c->s;
  OxGraph* g = s->graph;
  bool* ran = calloc(g->n_nodes + 1, sizeof *ran);
  OnyxStatus* st = !ran ? ox_oom() : NULL;
  /* Nodes are in topological order, so a single node is always ready when
   * reached. A group is emitted once every producer outside it has run;
   * since groups are convex that always happens, at the latest on a later
   * pass (a group may wait for producers listed after its first member). */
  size_t left = g->n_nodes;
  while (!st && left) {
    size_t before = left;
    for (size_t i = 0; i < g->n_nodes && !st; i++) {
      OxNode* n = g->nodes[i];
      if (ran[i]) continue;
      OxNode** members = n->group >= 0 ? s->part.groups[n->group].view.nodes : &n;
      size_t count = n->group >= 0 ? s->part.groups[n->group].view.n_nodes : 1;
      bool ready = true;
      for (size_t m = 0; m < count && ready; m++)
        for (size_t k = 0; k < members[m]->n_inputs && ready; k++) {
          const OxValue* v = members[m]->inputs[k];
          if (!v || !v->producer) continue;
          const OxNode* p = v->producer;
          ready = ran[p->index] || (n->group >= 0 && p->group == n->group);
        }
      if (!ready) continue;
      st = ox_plan_unit(c, n);
      for (size_t m = 0; m < count; m++)
        ran[members[m]->index] = true;
      left -= count;
    }
    if (!st && left == before) st = ox_status(ONYX_FAIL, "internal: the placed graph has a cycle");
  }
  free(ran);
  return st;
}

static OnyxStatus* ox_plan_lifetimes(OxPlan* P) {
  size_t* last = malloc((P->n_slots ? P->n_slots : 1) * sizeof *last);
  if (!last) return ox_oom();
  for (size_t i = 0; i < P->n_slots; i++)
    last[i] = OX_NO_SLOT;
  for (size_t s = 0; s < P->n_steps; s++) {
    const OxStep* st = &P->steps[s];
    for (size_t i = 0; i < st->n_in; i++)
      if (st->in[i] != OX_NO_SLOT) last[st->in[i]] = s;
    for (size_t i = 0; i < st->n_out; i++)
      if (st->out[i] != OX_NO_SLOT && last[st->out[i]] == OX_NO_SLOT) last[st->out[i]] = s;
  }
  for (size_t i = 0; i < P->n_slots; i++) {
    if (last[i] == OX_NO_SLOT || P->slots[i].is_output || P->slots[i].constant) continue;
    OxStep* st = &P->steps[last[i]];
    size_t* f = realloc(st->free_after, (st->n_free_after + 1) * sizeof *f);
    if (!f) {
      free(last);
      return ox_oom();
    }
    st->free_after = f;
    f[st->n_free_after++] = i;
  }
  free(last);
  return NULL;
}

static OnyxStatus* ox_plan_kernels(OxProgram* s) {
  for (size_t i = 0; i < s->plan.n_steps; i++) {
    OxStep* st = &s->plan.steps[i];
    OnyxEp* ep = st->ep >= 0 ? s->eps[st->ep].ep : NULL;
    if (st->kind == OX_STEP_KERNEL) {
      const OnyxKernelDef* d = &st->kernel->def;
      st->state = d->user_data;
      if (d->create) {
        OnyxStatus* err = d->create(ep, st->node, d->user_data, &st->state);
        if (err)
          return ox_status_wrap(err, "node '%s' (%s): provider '%s' could not create its kernel",
                                st->node->name, st->node->op_type, s->eps[st->ep].name);
      }
      st->state_created = true;
    } else if (st->kind == OX_STEP_GROUP) {
      OxGroup* grp = &s->part.groups[st->group];
      grp->kernel = (OnyxCompiledKernel){.struct_size = sizeof grp->kernel};
      OnyxStatus* err = ox_compile_group(s, st->ep, grp); /* through the cache_dir cache */
      if (!err && !grp->kernel.compute)
        err = ox_status(ONYX_FAIL, "compile returned no compute function");
      if (err)
        return ox_status_wrap(err, "provider '%s' failed to compile group '%s'",
                              s->eps[st->ep].name, grp->name);
      grp->compiled = true;
    } else if (st->kind == OX_STEP_HOST) {
      OX_TRY(ox_host_prepare(s, st));
    }
  }
  return NULL;
}

/* --- memory plan (ox_memplan.h): held by the plan (OxPlan.memplan) -------------------- */

const OxMemPlan* ox_session_memplan(const OxProgram* s) {
  return s->plan.memplan;
}

/* Bytes of a slot whose value has a static shape and fixed-size elements. */
/* The bytes of a slot's value when its shape is static and it fits the
 * session's max_tensor_bytes; 0 otherwise (sized at run time, where the limit
 * refuses what does not fit). A model may declare any shape: a planned size
 * past the limit could not be allocated and would overflow the plan's
 * offsets. */
static size_t ox_slot_static_bytes(const OxSlot* sl, size_t limit) {
  const OxValue* v = sl->value;
  size_t esz = ox_elem_size(v->type);
  if (!esz || v->rank < 0) return 0;
  size_t count = 1;
  for (int32_t i = 0; i < v->rank; i++)
    if (v->dims[i] < 0 || !ox_mul_ok(count, (size_t)v->dims[i], &count)) return 0;
  size_t bytes;
  if (!ox_mul_ok(count, esz, &bytes) || bytes > limit || bytes > (size_t)INT64_MAX / 4) return 0;
  return bytes ? bytes : 1;
}

static size_t ox_memplan_device(OxMemPlan* p, const OnyxMemoryDevice* mem, int32_t ep, bool* oom) {
  for (size_t d = 0; d < p->n_devices; d++)
    if (p->devices[d].ep == ep && ox_memory_equal(&p->devices[d].mem, mem)) return d;
  OxMemPlanDevice* devs = realloc(p->devices, (p->n_devices + 1) * sizeof *devs);
  if (!devs) {
    *oom = true;
    return OX_MEMPLAN_NONE;
  }
  p->devices = devs;
  devs[p->n_devices] = (OxMemPlanDevice){.mem = *mem, .ep = ep};
  return p->n_devices++;
}

/* The input slot whose buffer output o of step st may take in place. */
static size_t ox_inplace_input(const OxMemPlan* p, const OxStep* st, size_t o, size_t step) {
  if (st->kind != OX_STEP_KERNEL) return OX_MEMPLAN_NONE;
  const OnyxKernelDef* d = &st->kernel->def;
  for (size_t a = 0; a < d->alias_count; a++) {
    const OnyxAlias* al = &d->aliases[a];
    if (al->kind != ONYX_ALIAS_INPLACE || (size_t)al->output != o || (size_t)al->input >= st->n_in)
      continue;
    size_t in = st->in[al->input];
    if (in == OX_NO_SLOT || p->device[in] == OX_MEMPLAN_NONE || p->last[in] != step ||
        p->device[in] != p->device[st->out[o]] || p->bytes[in] < p->bytes[st->out[o]])
      continue;
    size_t reads = 0;
    for (size_t i = 0; i < st->n_in; i++)
      reads += st->in[i] == in;
    if (reads == 1) return in;
  }
  return OX_MEMPLAN_NONE;
}

static OnyxStatus* ox_memplan_assign_all(OxMemPlan* p, const OxPlan* P) {
  OxMemRequest* req = calloc(P->n_slots + 1, sizeof *req);
  size_t* idx = calloc(P->n_slots + 1, sizeof *idx);   /* request -> slot */
  size_t* ridx = calloc(P->n_slots + 1, sizeof *ridx); /* slot -> request */
  size_t* off = calloc(P->n_slots + 1, sizeof *off);
  OnyxStatus* st = (!req || !idx || !ridx || !off) ? ox_oom() : NULL;
  for (size_t d = 0; !st && d < p->n_devices; d++) {
    size_t n = 0;
    /* Requests in the order their producing steps run. */
    for (size_t s = 0; s < P->n_steps; s++) {
      const OxStep* step = &P->steps[s];
      for (size_t o = 0; o < step->n_out; o++) {
        size_t k = step->out[o];
        if (k == OX_NO_SLOT || p->device[k] != d || p->first[k] != s) continue;
        size_t a = p->alias_of[k];
        req[n] = (OxMemRequest){p->bytes[k], p->first[k], p->last[k],
                                a != OX_MEMPLAN_NONE ? ridx[a] : OX_MEMPLAN_NONE};
        ridx[k] = n;
        idx[n++] = k;
      }
    }
    size_t block = 0, live = 0;
    st = ox_memplan_assign(req, n, off, &block, &live);
    for (size_t i = 0; !st && i < n; i++) {
      p->offset[idx[i]] = off[i];
      p->devices[d].no_reuse += p->bytes[idx[i]];
    }
    p->devices[d].block_bytes = block;
    p->devices[d].live_peak = live;
  }
  free(req);
  free(idx);
  free(ridx);
  free(off);
  return st;
}

static OnyxStatus* ox_plan_memory(OxProgram* s) {
  const OxPlan* P = &s->plan;
  OxMemPlan* p = calloc(1, sizeof *p);
  if (!p) return ox_oom();
  size_t n = P->n_slots + 1;
  p->n_slots = P->n_slots;
  p->pattern = s->cfg.memory_pattern;
  p->device = malloc(n * sizeof *p->device);
  p->offset = malloc(n * sizeof *p->offset);
  p->bytes = calloc(n, sizeof *p->bytes);
  p->alias_of = malloc(n * sizeof *p->alias_of);
  p->first = malloc(n * sizeof *p->first);
  p->last = malloc(n * sizeof *p->last);
  if (!p->device || !p->offset || !p->bytes || !p->alias_of || !p->first || !p->last) {
    ox_memplan_free(p);
    return ox_oom();
  }
  for (size_t k = 0; k < P->n_slots; k++)
    p->device[k] = p->offset[k] = p->alias_of[k] = p->first[k] = p->last[k] = OX_MEMPLAN_NONE;
  /* Lifetimes. */
  for (size_t i = 0; i < P->n_steps; i++) {
    const OxStep* st = &P->steps[i];
    for (size_t k = 0; k < st->n_in; k++)
      if (st->in[k] != OX_NO_SLOT) p->last[st->in[k]] = i;
    for (size_t k = 0; k < st->n_out; k++)
      if (st->out[k] != OX_NO_SLOT && p->first[st->out[k]] == OX_MEMPLAN_NONE)
        p->first[st->out[k]] = i;
  }
  /* A view output (ONYX_ALIAS_VIEW) shares its input's buffer: it is not
   * planned itself, and the input's buffer lives until the view's last use.
   * Steps run in order, so a view of a view finds its root already set. */
  size_t* root = malloc(n * sizeof *root);
  if (!root) {
    ox_memplan_free(p);
    return ox_oom();
  }
  for (size_t k = 0; k < P->n_slots; k++)
    root[k] = k;
  for (size_t i = 0; i < P->n_steps; i++) {
    const OxStep* st = &P->steps[i];
    if (st->kind != OX_STEP_KERNEL) continue;
    const OnyxKernelDef* d = &st->kernel->def;
    for (size_t a = 0; a < d->alias_count; a++) {
      const OnyxAlias* al = &d->aliases[a];
      if (al->kind != ONYX_ALIAS_VIEW || (size_t)al->output >= st->n_out ||
          (size_t)al->input >= st->n_in)
        continue;
      size_t out = st->out[al->output], in = st->in[al->input];
      if (out == OX_NO_SLOT || in == OX_NO_SLOT) continue;
      root[out] = root[in];
      if (P->slots[out].is_output) p->last[out] = P->n_steps; /* escapes the run */
      if (p->last[out] != OX_MEMPLAN_NONE &&
          (p->last[root[in]] == OX_MEMPLAN_NONE || p->last[out] > p->last[root[in]]))
        p->last[root[in]] = p->last[out];
    }
  }
  /* A slot whose free waits for other streams (ox_streams.h) keeps its
   * bytes to the end of the run: no later value may share them. */
  for (size_t k = 0; k < P->n_slots; k++)
    if (ox_slot_deferred(P, k)) p->last[root[k]] = P->n_steps;
  /* Which slots get an offset, on which device; then in-place pairs. */
  bool oom = false;
  for (size_t i = 0; i < P->n_steps && !oom; i++) {
    const OxStep* st = &P->steps[i];
    for (size_t o = 0; o < st->n_out && !oom; o++) {
      size_t k = st->out[o];
      if (k == OX_NO_SLOT || p->first[k] != i) continue;
      const OxSlot* sl = &P->slots[k];
      if (sl->constant || sl->is_output || st->out_ep[o] < 0 || root[k] != k) continue;
      if (p->last[k] == OX_MEMPLAN_NONE) p->last[k] = i; /* written, never read */
      size_t d = ox_memplan_device(p, &st->out_mem[o], st->out_ep[o], &oom);
      if (oom) break;
      size_t bytes = ox_slot_static_bytes(sl, s->cfg.max_tensor_bytes);
      if (!bytes) {
        p->devices[d].dynamic++;
        continue;
      }
      p->device[k] = d;
      p->bytes[k] = bytes;
      p->devices[d].planned++;
      size_t in = ox_inplace_input(p, st, o, i);
      if (in != OX_MEMPLAN_NONE) {
        p->alias_of[k] = in;
        p->devices[d].inplace++;
      }
    }
  }
  free(root);
  OnyxStatus* err = oom ? ox_oom() : ox_memplan_assign_all(p, P);
  if (err) {
    ox_memplan_free(p);
    return err;
  }
  ox_memplan_free(s->plan.memplan);
  s->plan.memplan = p;
  return NULL;
}

OnyxStatus* ox_memplan_run_begin(OxProgram* s, OxMemRun* r) {
  *r = (OxMemRun){0};
  const OxMemPlan* p = ox_session_memplan(s);
  if (!p || !p->pattern || !p->n_devices) return NULL;
  r->blocks = calloc(p->n_devices, sizeof *r->blocks);
  if (!r->blocks) return ox_oom();
  r->n_blocks = p->n_devices;
  for (size_t d = 0; d < p->n_devices; d++) {
    const OxMemPlanDevice* dv = &p->devices[d];
    if (!dv->block_bytes || dv->ep < 0) continue;
    int64_t len = (int64_t)dv->block_bytes;
    OnyxStatus* st =
        ox_ep_alloc_tensor(s->eps, dv->ep, (OnyxMemType)dv->mem.mem_type, s->cfg.max_tensor_bytes,
                           ONYX_ELEM_UINT8, &len, 1, &r->blocks[d]);
    if (st) { /* the pattern is an optimization: fall back to per-value allocation */
      ox_program_log(s, ONYX_LOG_VERBOSE, "memory pattern: no block of %zu bytes on '%s': %s",
                     dv->block_bytes, s->eps[dv->ep].name, st->message ? st->message : "");
      ox_status_free(st);
      ox_memplan_run_end(r);
      return NULL;
    }
  }
  return NULL;
}

void ox_memplan_run_end(OxMemRun* r) {
  for (size_t d = 0; r->blocks && d < r->n_blocks; d++)
    ox_tensor_free(r->blocks[d]);
  free(r->blocks);
  *r = (OxMemRun){0};
}

OxTensor* ox_memplan_take(const OxProgram* s, const OxMemRun* r, size_t slot, OnyxElemType type,
                          const int64_t* dims, size_t rank) {
  const OxMemPlan* p = r->n_blocks ? ox_session_memplan(s) : NULL;
  if (!p || slot >= p->n_slots || p->offset[slot] == OX_MEMPLAN_NONE) return NULL;
  const OxValue* v = s->plan.slots[slot].value;
  if (v->type != type || v->rank != (int32_t)rank) return NULL;
  for (size_t i = 0; i < rank; i++)
    if (v->dims[i] != dims[i]) return NULL;
  OxTensor* block = r->blocks[p->device[slot]];
  if (!block || !block->buffer) return NULL;
  OxTensor* t = NULL;
  OnyxStatus* st =
      ox_tensor_wrap(type, dims, rank, (char*)block->data + p->offset[slot], &block->device, &t);
  if (st || t->bytes > p->bytes[slot] || p->offset[slot] + t->bytes > block->bytes) {
    ox_status_free(st);
    ox_tensor_free(t);
    return NULL;
  }
  t->buffer = ox_buffer_ref(block->buffer);
  return t;
}

static void ox_bytes_str(size_t b, char* buf, size_t len) {
  if (b >= ((size_t)1 << 20))
    snprintf(buf, len, "%.2f MiB", (double)b / (1 << 20));
  else if (b >= 1024)
    snprintf(buf, len, "%.1f KiB", (double)b / 1024);
  else
    snprintf(buf, len, "%zu B", b);
}

char* ox_memplan_summary(const OxProgram* s) {
  const OxMemPlan* p = ox_session_memplan(s);
  OxStr t = {0};
  if (!p) {
    ox_str_addf(&t, "no memory plan\n");
    return ox_str_take(&t);
  }
  for (size_t d = 0; d < p->n_devices; d++) {
    const OxMemPlanDevice* dv = &p->devices[d];
    char mem[64], peak[32], live[32], none[32];
    ox_mem_str(&dv->mem, mem, sizeof mem);
    ox_bytes_str(dv->block_bytes, peak, sizeof peak);
    ox_bytes_str(dv->live_peak, live, sizeof live);
    ox_bytes_str(dv->no_reuse, none, sizeof none);
    ox_str_addf(&t,
                "planned peak on %s (%s): %s for %zu static values (live peak %s, %s without "
                "reuse), %zu in place, %zu sized at run time%s\n",
                mem, ox_slot_ep_name(s, dv->ep), peak, dv->planned, live, none, dv->inplace,
                dv->dynamic, p->pattern ? "" : " [memory_pattern off]");
  }
  if (!p->n_devices) ox_str_addf(&t, "planned peak: 0 B (no intermediate values)\n");
  return ox_str_take(&t);
}

OnyxStatus* ox_plan_build(OxProgram* s) {
  OxGraph* g = s->graph;
  OxPlan* P = &s->plan;
  OxPlanCtx c = {s, malloc((g->n_values + 1) * sizeof(size_t)),
                 malloc((g->n_values + 1) * sizeof(int32_t))};
  P->input_slots = calloc(g->n_inputs + 1, sizeof *P->input_slots);
  P->output_slots = calloc(g->n_outputs + 1, sizeof *P->output_slots);
  OnyxStatus* st = (!c.home || !c.home_ep || !P->input_slots || !P->output_slots) ? ox_oom() : NULL;
  for (size_t i = 0; !st && i < g->n_values; i++) {
    c.home[i] = OX_NO_SLOT;
    c.home_ep[i] = -1;
    OxValue* v = g->values[i];
    if (!v->constant) continue;
    size_t slot;
    st = ox_home_slot(&c, v, &OX_HOST_MEMORY, -1, &slot);
    if (!st) P->slots[slot].constant = v->constant;
  }
  for (size_t i = 0; !st && i < g->n_inputs; i++)
    st = ox_home_slot(&c, g->inputs[i], &OX_HOST_MEMORY, -1, &P->input_slots[i]);
  if (!st) st = ox_plan_units(&c);
  for (size_t i = 0; !st && i < g->n_outputs; i++) {
    st = ox_slot_on(&c, g->outputs[i], &OX_HOST_MEMORY, -1, "a graph output", &P->output_slots[i]);
    if (!st) P->slots[P->output_slots[i]].is_output = true;
  }
  if (!st) st = ox_plan_lifetimes(P);
  if (!st) st = ox_plan_streams(s);
  if (!st) st = ox_plan_kernels(s);
  if (!st) st = ox_plan_memory(s);
  free(c.home);
  free(c.home_ep);
  return st;
}

/* --- where graph inputs are read and outputs produced (IO binding) --------------------- */
OnyxStatus* ox_plan_input_memory(const OxProgram* s, size_t i, OnyxMemoryDevice* out) {
  const OxPlan* P = &s->plan;
  if (i >= s->graph->n_inputs)
    return ox_status(ONYX_INVALID_ARGUMENT, "input index %zu out of range", i);
  size_t slot = P->input_slots[i];
  /* Each memory a consumer reads the input in, with the provider reading it
   * there (-1: the host, or a provider reading host memory). */
  OnyxMemoryDevice mems[8];
  int32_t eps[8];
  size_t n = 0;
  bool more = false;
  for (size_t k = 0; k <= P->n_steps; k++) {
    OnyxMemoryDevice m;
    int32_t ep;
    if (k == P->n_steps) { /* a graph input that is also a graph output is fetched on the host */
      if (!P->slots[slot].is_output) break;
      m = P->slots[slot].mem;
      ep = -1;
    } else {
      const OxStep* st = &P->steps[k];
      bool reads = false;
      for (size_t j = 0; j < st->n_in && !reads; j++)
        reads = st->in[j] == slot;
      if (!reads) continue;
      m = st->kind == OX_STEP_COPY ? st->out_mem[0] : P->slots[slot].mem;
      ep = st->kind == OX_STEP_COPY ? st->copy_dst_ep : st->ep;
    }
    bool seen = false;
    for (size_t j = 0; j < n && !seen; j++)
      seen = ox_memory_equal(&mems[j], &m);
    if (seen) continue;
    if (n == sizeof mems / sizeof mems[0]) {
      more = true;
      continue;
    }
    mems[n] = m;
    eps[n++] = ep;
  }
  if (n == 1 && !more) {
    *out = mems[0];
    return NULL;
  }
  if (n == 0) {
    *out = OX_HOST_MEMORY; /* nothing reads it */
    return NULL;
  }
  OxStr t = {0};
  for (size_t j = 0; j < n; j++) {
    char m[64];
    ox_mem_str(&mems[j], m, sizeof m);
    ox_str_addf(&t, "%s%s (%s)", j ? ", " : "", m, ox_slot_ep_name(s, eps[j]));
  }
  if (more) ox_str_addf(&t, ", ...");
  char* list = ox_str_take(&t);
  OnyxStatus* st = ox_status(ONYX_INVALID_ARGUMENT,
                             "input '%s' is read in more than one memory: %s; name the device "
                             "to bind it to",
                             s->graph->inputs[i]->name, list ? list : "?");
  free(list);
  return st;
}

OnyxStatus* ox_plan_output_memory(const OxProgram* s, size_t i, OnyxMemoryDevice* out) {
  const OxPlan* P = &s->plan;
  if (i >= s->graph->n_outputs)
    return ox_status(ONYX_INVALID_ARGUMENT, "output index %zu out of range", i);
  /* A value's home slot, where it is produced, is the first slot made for it. */
  const OxValue* v = s->graph->outputs[i];
  for (size_t k = 0; k < P->n_slots; k++)
    if (P->slots[k].value == v) {
      *out = P->slots[k].mem;
      return NULL;
    }
  *out = P->slots[P->output_slots[i]].mem;
  return NULL;
}

void ox_plan_clear(OxProgram* s) {
  OxPlan* P = &s->plan;
  ox_memplan_free(P->memplan);
  ox_plan_streams_clear(s);
  for (size_t i = 0; i < P->n_steps; i++) {
    OxStep* st = &P->steps[i];
    if (st->kind == OX_STEP_KERNEL && st->state_created && st->kernel->def.create &&
        st->kernel->def.release)
      st->kernel->def.release(st->state);
    if (st->kind == OX_STEP_HOST) ox_host_release(st);
    free(st->in);
    free(st->out);
    free(st->out_mem);
    free(st->out_ep);
    free(st->free_after);
  }
  for (size_t i = 0; i < s->part.n_groups; i++) {
    OxGroup* grp = &s->part.groups[i];
    if (grp->compiled && grp->kernel.release) grp->kernel.release(grp->kernel.state);
    grp->compiled = false;
  }
  for (size_t i = 0; i < P->n_slots; i++)
    if (P->slots[i].owned_constant) ox_tensor_free(P->slots[i].constant);
  for (size_t i = 0; i < P->n_copies; i++)
    free(P->copies[i].text);
  free(P->steps);
  free(P->slots);
  free(P->input_slots);
  free(P->output_slots);
  free(P->copies);
  *P = (OxPlan){0};
}
