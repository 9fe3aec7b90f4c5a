/* plan.c — from a placed graph to a list of steps over value slots.
 *
 * A slot is one value on one memory. A value gets a "home" slot where it is
 * produced (graph inputs and constants: host memory) and one more slot per
 * other memory that a consumer needs it in, filled by a copy step inserted
 * right before the first consumer there. Constants needed on a device are
 * copied once here, at session creation. Graph outputs always end in host
 * memory. Each slot is freed after its last use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_session.h"

#define OX_NO_SLOT SIZE_MAX

static const char* ox_slot_ep_name(const OnyxSession* s, int32_t ep) {
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
  OnyxSession* s;
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
    OX_TRY(ox_session_alloc_tensor(c->s, ep, (OnyxMemType)mem->mem_type, src.constant->type,
                                   src.constant->dims, src.constant->rank, &t));
    OnyxStatus* st = ox_copy_tensor(c->s, src.constant, t, c->home_ep[v->index], ep);
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
  OnyxSession* s = c->s;
  int32_t e = n->ep;
  OxGroup* grp = n->group >= 0 ? &s->part.groups[n->group] : NULL;
  OxValue** ins = grp ? grp->view.inputs : n->inputs;
  size_t n_in = grp ? grp->view.n_inputs : n->n_inputs;
  OxValue** outs = grp ? grp->view.outputs : n->outputs;
  size_t n_out = grp ? grp->view.n_outputs : n->n_outputs;
  const OxKernel* k = NULL;
  if (!grp) {
    const char* why = NULL;
    k = ox_kreg_match(s->eps[e].lib->kernels, n, &why);
    if (!k)
      return ox_status(ONYX_FAIL, "internal: node '%s' lost its kernel on '%s': %s", n->name,
                       s->eps[e].name, why ? why : "");
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
    OnyxMemoryDevice mem = ox_session_ep_memory(s, e, mt);
    err = ox_slot_on(c, ins[i], &mem, e, for_what, &in_slots[i]);
  }
  OxStep* st = NULL;
  if (!err) err = ox_new_step(&s->plan, grp ? OX_STEP_GROUP : OX_STEP_KERNEL, e, &st);
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
    st->out_mem[i] = ox_session_ep_memory(s, e, mt);
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
  OnyxSession* s = c->s;
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

static OnyxStatus* ox_plan_kernels(OnyxSession* s) {
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
      OnyxStatus* err = ep->compile(ep, &grp->view, &grp->kernel);
      if (!err && !grp->kernel.compute)
        err = ox_status(ONYX_FAIL, "compile returned no compute function");
      if (err)
        return ox_status_wrap(err, "provider '%s' failed to compile group '%s'",
                              s->eps[st->ep].name, grp->name);
      grp->compiled = true;
    }
  }
  return NULL;
}

OnyxStatus* ox_plan_build(OnyxSession* s) {
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
  if (!st) st = ox_plan_kernels(s);
  free(c.home);
  free(c.home_ep);
  return st;
}

void ox_plan_clear(OnyxSession* s) {
  OxPlan* P = &s->plan;
  for (size_t i = 0; i < P->n_steps; i++) {
    OxStep* st = &P->steps[i];
    if (st->kind == OX_STEP_KERNEL && st->state_created && st->kernel->def.create &&
        st->kernel->def.release)
      st->kernel->def.release(st->state);
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
