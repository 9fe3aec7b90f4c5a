/* streams.c — which agent (a provider's stream or the host thread) runs each
 * step, the crossings between agents with their events, and when each slot's
 * memory may be freed (ox_streams.h). */
#include <stdlib.h>
#include <string.h>
#include "ox_streams.h"

#define OX_WRITERS_NONE  (-2) /* no step writes the memory */
#define OX_WRITERS_MIXED (-3) /* steps of several agents write it */
#define OX_MEM_TYPES     3    /* OnyxMemType values: one arena each per EP */

static bool ox_ep_can_copy(OxProgram* s, int32_t ep, const OnyxMemoryDevice* a,
                           const OnyxMemoryDevice* b) {
  if (ep < 0) return false;
  OnyxEp* e = s->eps[ep].ep;
  return e->can_copy && e->copy_tensors && e->can_copy(e, a, b);
}

/* The order of choice of ox_ep_copy_tensor (host/partition/ep_memory.c). */
static OxCopyPath ox_copy_path(OxProgram* s, const OxStep* st) {
  const OnyxMemoryDevice* src = &s->plan.slots[st->in[0]].mem;
  const OnyxMemoryDevice* dst = &st->out_mem[0];
  if (src->kind == ONYX_DEVICE_CPU && dst->kind == ONYX_DEVICE_CPU) return OX_COPY_HOST;
  if (ox_ep_can_copy(s, st->copy_dst_ep, src, dst)) return OX_COPY_BY_DST;
  if (ox_ep_can_copy(s, st->copy_src_ep, src, dst)) return OX_COPY_BY_SRC;
  return OX_COPY_STAGED;
}

static int32_t ox_stream_agent(const OxProgram* s, int32_t ep) {
  return ep >= 0 && s->eps[ep].stream ? ep : OX_AGENT_HOST;
}

static int32_t ox_step_agent(OxProgram* s, const OxStep* st, int32_t* path) {
  *path = OX_COPY_HOST;
  if (st->kind == OX_STEP_HOST) return OX_AGENT_HOST;
  if (st->kind != OX_STEP_COPY) return ox_stream_agent(s, st->ep);
  *path = ox_copy_path(s, st);
  if (*path == OX_COPY_BY_DST) return ox_stream_agent(s, st->copy_dst_ep);
  if (*path == OX_COPY_BY_SRC) return ox_stream_agent(s, st->copy_src_ep);
  return OX_AGENT_HOST; /* host memcpy, or staged: synchronous */
}

static bool ox_ep_has_events(const OxProgram* s, int32_t ep) {
  const OnyxEp* e = s->eps[ep].ep;
  return e->create_event && e->record_event && e->wait_event && e->release_event;
}

static OnyxStatus* ox_add_wait(OxStepSync* ss, size_t c) {
  for (size_t i = 0; i < ss->n_waits; i++)
    if (ss->waits[i] == c) return NULL;
  size_t* w = realloc(ss->waits, (ss->n_waits + 1) * sizeof *w);
  if (!w) return ox_oom();
  ss->waits = w;
  w[ss->n_waits++] = c;
  return NULL;
}

/* The crossing whose event follows step j (created on first need). */
static OnyxStatus* ox_crossing_after(OxProgram* s, OxStreamPlan* sp, size_t j, size_t* out) {
  OxStepSync* pj = &sp->steps[j];
  if (pj->record == OX_NO_EVENT) {
    OxCrossing* c = realloc(sp->crossings, (sp->n_crossings + 1) * sizeof *c);
    if (!c) return ox_oom();
    sp->crossings = c;
    c[sp->n_crossings] =
        (OxCrossing){.ep = pj->agent, .step = j, .has_event = ox_ep_has_events(s, pj->agent)};
    sp->n_events += c[sp->n_crossings].has_event;
    pj->record = sp->n_crossings++;
  }
  *out = pj->record;
  return NULL;
}

/* The input a view output (ONYX_ALIAS_VIEW) shares its buffer with, or
 * OX_NO_SLOT. */
static size_t ox_view_input(const OxStep* st, size_t o) {
  if (st->kind != OX_STEP_KERNEL) return OX_NO_SLOT;
  const OnyxKernelDef* d = &st->kernel->def;
  for (size_t a = 0; a < d->alias_count; a++) {
    const OnyxAlias* al = &d->aliases[a];
    if (al->kind == ONYX_ALIAS_VIEW && (size_t)al->output == o && (size_t)al->input < st->n_in)
      return st->in[al->input];
  }
  return OX_NO_SLOT;
}

typedef struct OxStreamScan {
  size_t* prod;     /* per slot: producing step */
  size_t* root;     /* per slot: the slot whose buffer it is (itself, or a view's input's root) */
  int32_t* key;     /* per slot: arena of its buffer, ep * OX_MEM_TYPES + mem type; -1: host heap */
  int32_t* writers; /* per arena: the agent of every step writing into it, or NONE / MIXED */
  size_t* use;      /* per slot and agent column (agent + 1): last step touching it + 1 */
  size_t cols;
} OxStreamScan;

static void ox_scan_use(OxStreamScan* c, size_t k, int32_t agent, size_t step) {
  c->use[k * c->cols + (size_t)(agent + 1)] = step + 1;
}

static OnyxStatus* ox_scan_step(OxProgram* s, OxStreamPlan* sp, OxStreamScan* c, size_t i) {
  const OxStep* st = &s->plan.steps[i];
  OxStepSync* ss = &sp->steps[i];
  int32_t path;
  ss->agent = ox_step_agent(s, st, &path);
  ss->copy_path = path;
  ss->record = OX_NO_EVENT;
  for (size_t k = 0; k < st->n_in; k++) {
    size_t slot = st->in[k];
    if (slot == OX_NO_SLOT) continue;
    ox_scan_use(c, slot, ss->agent, i);
    size_t j = c->prod[slot];
    if (j == OX_NO_SLOT) continue; /* a constant or graph input: ready */
    int32_t p = sp->steps[j].agent;
    if (p == OX_AGENT_HOST || p == ss->agent) continue; /* finished, or queued in order */
    size_t cross = OX_NO_EVENT;
    OX_TRY(ox_crossing_after(s, sp, j, &cross));
    OX_TRY(ox_add_wait(ss, cross));
  }
  for (size_t o = 0; o < st->n_out; o++) {
    size_t slot = st->out[o];
    if (slot == OX_NO_SLOT) continue;
    ox_scan_use(c, slot, ss->agent, i);
    if (c->prod[slot] != OX_NO_SLOT) continue;
    c->prod[slot] = i;
    size_t in = ox_view_input(st, o);
    c->root[slot] = in != OX_NO_SLOT ? c->root[in] : slot;
    int32_t ep = st->out_ep[o], mt = st->out_mem[o].mem_type;
    if (ep < 0 || mt < 0 || mt >= OX_MEM_TYPES) {
      c->key[slot] = -1;
      continue;
    }
    c->key[slot] = ep * OX_MEM_TYPES + mt;
    int32_t* w = &c->writers[c->key[slot]];
    *w = *w == OX_WRITERS_NONE || *w == ss->agent ? ss->agent : OX_WRITERS_MIXED;
  }
  return NULL;
}

/* OxSlotSync of slot k (see ox_streams.h). */
static OnyxStatus* ox_classify_slot(OxStreamPlan* sp, const OxStreamScan* c, size_t k) {
  if (c->prod[k] == OX_NO_SLOT) return NULL; /* constants and graph inputs are never freed */
  const size_t* use = &c->use[k * c->cols];
  size_t n_streams = 0;
  int32_t only = OX_AGENT_HOST;
  for (size_t a = 1; a < c->cols; a++)
    if (use[a]) {
      n_streams++;
      only = (int32_t)a - 1;
    }
  if (!n_streams) return NULL; /* host thread only: finished when freed */
  int32_t key = c->key[c->root[k]];
  if (n_streams == 1 && !use[0] && key >= 0 && c->writers[key] == only) return NULL;
  OxSlotSync* sl = &sp->slots[k];
  sl->deferred = true;
  sl->first = sp->n_uses;
  for (size_t a = 1; a < c->cols; a++) {
    if (!use[a]) continue;
    OxStreamUse* u = realloc(sp->uses, (sp->n_uses + 1) * sizeof *u);
    if (!u) return ox_oom();
    sp->uses = u;
    u[sp->n_uses++] = (OxStreamUse){.ep = (int32_t)a - 1, .last = use[a] - 1};
    sl->n++;
  }
  return NULL;
}

static void ox_event_set_free(OxProgram* s, OxEventSet* set) {
  const OxStreamPlan* sp = s->plan.streams;
  for (size_t c = 0; c < sp->n_crossings; c++)
    if (set->ev[c]) {
      OnyxEp* ep = s->eps[sp->crossings[c].ep].ep;
      ep->release_event(ep, set->ev[c]);
    }
  free(set->ev);
  free(set);
}

static OnyxStatus* ox_event_set_new(OxProgram* s, OxEventSet** out) {
  const OxStreamPlan* sp = s->plan.streams;
  *out = NULL;
  OxEventSet* set = calloc(1, sizeof *set);
  if (!set || !(set->ev = calloc(sp->n_crossings + 1, sizeof *set->ev))) {
    free(set);
    return ox_oom();
  }
  for (size_t c = 0; c < sp->n_crossings; c++) {
    const OxCrossing* x = &sp->crossings[c];
    if (!x->has_event) continue;
    OnyxEp* ep = s->eps[x->ep].ep;
    OnyxStatus* st = ep->create_event(ep, &set->ev[c]);
    if (!st && !set->ev[c]) st = ox_status(ONYX_FAIL, "no event returned");
    if (st) {
      set->ev[c] = NULL;
      ox_event_set_free(s, set);
      return ox_status_wrap(st, "provider '%s': create_event failed", s->eps[x->ep].name);
    }
  }
  *out = set;
  return NULL;
}

OnyxStatus* ox_event_set_take(OxProgram* s, OxEventSet** out) {
  OxStreamPlan* sp = s->plan.streams;
  *out = NULL;
  if (!sp || !sp->n_events) return NULL;
  pthread_mutex_lock(&sp->lock);
  OxEventSet* set = sp->free_sets;
  if (set) sp->free_sets = set->next;
  pthread_mutex_unlock(&sp->lock);
  if (set) {
    *out = set;
    return NULL;
  }
  return ox_event_set_new(s, out); /* more runs at once than sets so far */
}

void ox_event_set_give(OxProgram* s, OxEventSet* set) {
  OxStreamPlan* sp = s->plan.streams;
  if (!set) return;
  pthread_mutex_lock(&sp->lock);
  set->next = sp->free_sets;
  sp->free_sets = set;
  pthread_mutex_unlock(&sp->lock);
}

bool ox_slot_deferred(const OxPlan* P, size_t k) {
  return P->streams && k < P->streams->n_slots && P->streams->slots[k].deferred;
}

static OnyxStatus* ox_plan_streams_scan(OxProgram* s, OxStreamPlan* sp) {
  const OxPlan* P = &s->plan;
  size_t ns = P->n_slots, n_keys = s->n_eps * OX_MEM_TYPES;
  OxStreamScan c = {.cols = s->n_eps + 1};
  c.prod = malloc((ns + 1) * sizeof *c.prod);
  c.root = malloc((ns + 1) * sizeof *c.root);
  c.key = malloc((ns + 1) * sizeof *c.key);
  c.writers = malloc((n_keys + 1) * sizeof *c.writers);
  c.use = calloc(ns * c.cols + 1, sizeof *c.use);
  OnyxStatus* st = !c.prod || !c.root || !c.key || !c.writers || !c.use ? ox_oom() : NULL;
  for (size_t k = 0; !st && k < ns; k++) {
    c.prod[k] = OX_NO_SLOT;
    c.root[k] = k;
    c.key[k] = -1;
  }
  for (size_t k = 0; !st && k < n_keys; k++)
    c.writers[k] = OX_WRITERS_NONE;
  for (size_t i = 0; !st && i < P->n_steps; i++)
    st = ox_scan_step(s, sp, &c, i);
  for (size_t k = 0; !st && k < ns; k++)
    st = ox_classify_slot(sp, &c, k);
  free(c.prod);
  free(c.root);
  free(c.key);
  free(c.writers);
  free(c.use);
  return st;
}

OnyxStatus* ox_plan_streams(OxProgram* s) {
  OxPlan* P = &s->plan;
  OxStreamPlan* sp = calloc(1, sizeof *sp);
  if (!sp) return ox_oom();
  pthread_mutex_init(&sp->lock, NULL);
  P->streams = sp;
  sp->n_steps = P->n_steps;
  sp->n_slots = P->n_slots;
  sp->steps = calloc(P->n_steps + 1, sizeof *sp->steps);
  sp->slots = calloc(P->n_slots + 1, sizeof *sp->slots);
  if (!sp->steps || !sp->slots) return ox_oom();
  OX_TRY(ox_plan_streams_scan(s, sp));
  if (!sp->n_events) return NULL;
  /* The first set now, so that a provider failing to create events fails
   * session creation; runs reuse it. */
  OxEventSet* set;
  OX_TRY(ox_event_set_new(s, &set));
  ox_event_set_give(s, set);
  return NULL;
}

void ox_plan_streams_clear(OxProgram* s) {
  OxStreamPlan* sp = s->plan.streams;
  if (!sp) return;
  while (sp->free_sets) {
    OxEventSet* set = sp->free_sets;
    sp->free_sets = set->next;
    ox_event_set_free(s, set);
  }
  for (size_t i = 0; sp->steps && i < sp->n_steps; i++)
    free(sp->steps[i].waits);
  free(sp->steps);
  free(sp->slots);
  free(sp->uses);
  free(sp->crossings);
  pthread_mutex_destroy(&sp->lock);
  free(sp);
  s->plan.streams = NULL;
}
