/* session_run.c — feeding, running and fetching; introspection; explain;
 * IO binding and its asynchronous runs. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_memplan.h"
#include "ox_session.h"
#include "onyx/onyx_ep.h"

static OnyxStatus* ox_check_decl(const OxValue* decl, const OxTensor* t, const char* what) {
  if (decl->kind != OX_VK_TENSOR || t->vkind != OX_RT_TENSOR)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "%s '%s': IO binding takes tensors only (not sequences or optionals)", what,
                     decl->name);
  char want[160], got[160];
  ox_shape_str(decl->type, decl->dims, decl->rank, want, sizeof want);
  ox_shape_str(t->type, t->dims, (int64_t)t->rank, got, sizeof got);
  if (t->type != decl->type)
    return ox_status(ONYX_INVALID_ARGUMENT, "%s '%s': expected element type %s, got %s (%s)", what,
                     decl->name, ox_elem_name(decl->type), ox_elem_name(t->type), got);
  if (decl->rank < 0) return NULL;
  bool ok = (size_t)decl->rank == t->rank;
  for (size_t i = 0; ok && i < t->rank; i++)
    ok = decl->dims[i] < 0 || decl->dims[i] == t->dims[i];
  if (!ok)
    return ox_status(ONYX_INVALID_ARGUMENT, "%s '%s': expected shape %s, got %s", what, decl->name,
                     want, got);
  return NULL;
}

/* Sequences and optionals: the kind must fit; a sequence's items and a none
 * take the declared element type (an empty one may have none). */
static OnyxStatus* ox_check_container_feed(const OxValue* decl, const OxTensor* t) {
  if (decl->kind == OX_VK_MAP || decl->kind == OX_VK_SEQ_MAP || t->vkind == OX_RT_MAP ||
      t->vkind == OX_RT_SEQ_MAP)
    return ox_check_map_feed(decl, t);
  bool opt = decl->kind == OX_VK_OPT_TENSOR || decl->kind == OX_VK_OPT_SEQUENCE;
  bool seq = decl->kind == OX_VK_SEQUENCE || decl->kind == OX_VK_OPT_SEQUENCE;
  if (t->vkind == OX_RT_NONE ? !opt : (t->vkind == OX_RT_SEQUENCE) != seq)
    return ox_status(ONYX_INVALID_ARGUMENT, "input '%s': expected %s%s, got a %s", decl->name,
                     opt ? "an optional " : "a ", seq ? "sequence" : "tensor",
                     t->vkind == OX_RT_NONE       ? "none"
                     : t->vkind == OX_RT_SEQUENCE ? "sequence"
                                                  : "tensor");
  for (size_t i = 0; i < t->n_items; i++)
    if (t->items[i]->type != decl->type || t->items[i]->device.kind != ONYX_DEVICE_CPU)
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "input '%s': sequence item %zu is not a host %s tensor", decl->name, i,
                       ox_elem_name(decl->type));
  if (t->vkind == OX_RT_TENSOR && t->type != decl->type)
    return ox_status(ONYX_INVALID_ARGUMENT, "input '%s': expected element type %s, got %s",
                     decl->name, ox_elem_name(decl->type), ox_elem_name(t->type));
  return NULL;
}

static OnyxStatus* ox_check_feed(const OxValue* decl, const OxTensor* t) {
  if (decl->kind != OX_VK_TENSOR || t->vkind != OX_RT_TENSOR)
    return ox_check_container_feed(decl, t);
  char want[160], got[160];
  ox_shape_str(decl->type, decl->dims, decl->rank, want, sizeof want);
  ox_shape_str(t->type, t->dims, (int64_t)t->rank, got, sizeof got);
  if (t->type != decl->type)
    return ox_status(ONYX_INVALID_ARGUMENT, "input '%s': expected element type %s, got %s (%s)",
                     decl->name, ox_elem_name(decl->type), ox_elem_name(t->type), got);
  if (decl->rank < 0) return NULL;
  bool ok = (size_t)decl->rank == t->rank;
  for (size_t i = 0; ok && i < t->rank; i++)
    ok = decl->dims[i] < 0 || decl->dims[i] == t->dims[i];
  if (!ok)
    return ox_status(ONYX_INVALID_ARGUMENT, "input '%s': expected shape %s, got %s", decl->name,
                     want, got);
  if (t->device.kind != ONYX_DEVICE_CPU)
    return ox_status(ONYX_INVALID_ARGUMENT, "input '%s': feeds must be in host memory", decl->name);
  return NULL;
}

static void ox_list_names(OxStr* s, OxValue* const* vals, size_t n) {
  for (size_t i = 0; i < n; i++)
    ox_str_addf(s, "%s'%s'", i ? ", " : "", vals[i]->name);
  if (!n) ox_str_addf(s, "(none)");
}

static OnyxStatus* ox_unknown_name(const char* what, const char* name, OxValue* const* vals,
                                   size_t n) {
  OxStr s = {0};
  ox_list_names(&s, vals, n);
  char* list = ox_str_take(&s);
  OnyxStatus* st = ox_status(ONYX_INVALID_ARGUMENT, "unknown %s '%s'; the model's %ss are: %s",
                             what, name, what, list ? list : "?");
  free(list);
  return st;
}

static OnyxStatus* ox_bind_feeds(const OxGraph* g, const char* const* names,
                                 const OnyxValue* const* inputs, size_t n, OxTensor** feeds) {
  for (size_t k = 0; k < n; k++) {
    if (!names || !names[k] || !inputs || !inputs[k] || !inputs[k]->tensor)
      return ox_status(ONYX_INVALID_ARGUMENT, "feed %zu has no name or no tensor value", k);
    size_t i = 0;
    while (i < g->n_inputs && strcmp(g->inputs[i]->name, names[k]))
      i++;
    if (i == g->n_inputs) return ox_unknown_name("input", names[k], g->inputs, g->n_inputs);
    if (feeds[i]) return ox_status(ONYX_INVALID_ARGUMENT, "input '%s' is fed twice", names[k]);
    OX_TRY(ox_check_feed(g->inputs[i], inputs[k]->tensor));
    feeds[i] = inputs[k]->tensor;
  }
  for (size_t i = 0; i < g->n_inputs; i++)
    if (!feeds[i])
      return ox_status(ONYX_INVALID_ARGUMENT, "input '%s' was not fed", g->inputs[i]->name);
  return NULL;
}

static OnyxStatus* ox_output_index(const OxGraph* g, const char* name, size_t* out) {
  if (!name) return ox_status(ONYX_INVALID_ARGUMENT, "an output name is NULL");
  for (size_t i = 0; i < g->n_outputs; i++)
    if (!strcmp(g->outputs[i]->name, name)) {
      *out = i;
      return NULL;
    }
  return ox_unknown_name("output", name, g->outputs, g->n_outputs);
}

static OnyxStatus* ox_wrap_outputs(OxTensor** fetched, const size_t* idx, size_t n_out,
                                   OnyxValue** outputs) {
  for (size_t k = 0; k < n_out; k++) {
    OxTensor* t = fetched[idx[k]];
    bool again = false; /* the same output asked for twice: clone */
    for (size_t j = 0; j < k && !again; j++)
      again = idx[j] == idx[k];
    if (again) OX_TRY(ox_tensor_clone(t, &t));
    outputs[k] = malloc(sizeof *outputs[k]);
    if (!outputs[k]) {
      if (again) ox_tensor_free(t);
      return ox_oom();
    }
    outputs[k]->tensor = t;
  }
  return NULL;
}

ONYX_API OnyxStatus* onyx_session_run(OnyxSession* s, const OnyxRunOptions* run_options,
                                      const char* const* input_names,
                                      const OnyxValue* const* inputs, size_t input_count,
                                      const char* const* output_names, size_t output_count,
                                      OnyxValue** outputs) {
  if (!s || (output_count && (!output_names || !outputs)))
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_session_run: NULL argument");
  for (size_t k = 0; k < output_count; k++)
    outputs[k] = NULL;
  const OxGraph* g = s->prog.graph;
  OxTensor** feeds = calloc(g->n_inputs + 1, sizeof *feeds);
  OxTensor** fetched = calloc(g->n_outputs + 1, sizeof *fetched);
  bool* wanted = calloc(g->n_outputs + 1, sizeof *wanted);
  size_t* idx = calloc(output_count + 1, sizeof *idx);
  OnyxStatus* st = (!feeds || !fetched || !wanted || !idx) ? ox_oom() : NULL;
  if (!st) st = ox_bind_feeds(g, input_names, inputs, input_count, feeds);
  for (size_t k = 0; !st && k < output_count; k++) {
    st = ox_output_index(g, output_names[k], &idx[k]);
    if (!st) wanted[idx[k]] = true;
  }
  if (!st) st = ox_execute(&s->prog, run_options, feeds, fetched, wanted);
  if (!st) st = ox_wrap_outputs(fetched, idx, output_count, outputs);
  if (st) {
    for (size_t k = 0; k < output_count; k++) {
      bool dup = false; /* clones belong to outputs[k]; originals are in fetched */
      for (size_t j = 0; j < k && !dup; j++)
        dup = idx[j] == idx[k];
      if (outputs[k] && dup) ox_tensor_free(outputs[k]->tensor);
      free(outputs[k]);
      outputs[k] = NULL;
    }
    for (size_t i = 0; i < g->n_outputs; i++)
      ox_tensor_free(fetched[i]);
  } else {
    for (size_t i = 0; i < g->n_outputs; i++) {
      bool used = false; /* fetched but not asked for (cannot happen) is freed */
      for (size_t k = 0; k < output_count && !used; k++)
        used = idx[k] == i;
      if (!used) ox_tensor_free(fetched[i]);
    }
  }
  free(feeds);
  free(fetched);
  free(wanted);
  free(idx);
  return st;
}

/* --- introspection ----------------------------------------------------------------- */
ONYX_API size_t onyx_session_input_count(const OnyxSession* s) {
  return s ? s->prog.graph->n_inputs : 0;
}
ONYX_API size_t onyx_session_output_count(const OnyxSession* s) {
  return s ? s->prog.graph->n_outputs : 0;
}
ONYX_API const char* onyx_session_input_name(const OnyxSession* s, size_t i) {
  return s && i < s->prog.graph->n_inputs ? s->prog.graph->inputs[i]->name : NULL;
}
ONYX_API const char* onyx_session_output_name(const OnyxSession* s, size_t i) {
  return s && i < s->prog.graph->n_outputs ? s->prog.graph->outputs[i]->name : NULL;
}

static OnyxStatus* ox_value_info(const OxValue* v, OnyxElemType* type, int32_t* rank,
                                 const int64_t** dims) {
  if (type) *type = v->type;
  if (rank) *rank = v->rank;
  if (dims) *dims = v->dims;
  return NULL;
}

ONYX_API OnyxStatus* onyx_session_input_info(const OnyxSession* s, size_t i, OnyxElemType* type,
                                             int32_t* rank, const int64_t** dims) {
  if (!s || i >= s->prog.graph->n_inputs)
    return ox_status(ONYX_INVALID_ARGUMENT, "input index %zu out of range", i);
  return ox_value_info(s->prog.graph->inputs[i], type, rank, dims);
}

ONYX_API const char* onyx_session_input_dim_param(const OnyxSession* s, size_t i, size_t k) {
  if (!s || i >= s->prog.graph->n_inputs) return NULL;
  const OxValue* v = s->prog.graph->inputs[i];
  return v->dim_params && v->rank >= 0 && k < (size_t)v->rank ? v->dim_params[k] : NULL;
}

ONYX_API OnyxStatus* onyx_session_output_info(const OnyxSession* s, size_t i, OnyxElemType* type,
                                              int32_t* rank, const int64_t** dims) {
  if (!s || i >= s->prog.graph->n_outputs)
    return ox_status(ONYX_INVALID_ARGUMENT, "output index %zu out of range", i);
  return ox_value_info(s->prog.graph->outputs[i], type, rank, dims);
}

ONYX_API size_t onyx_session_provider_count(const OnyxSession* s) {
  return s ? s->prog.n_eps : 0;
}
ONYX_API const char* onyx_session_provider_name(const OnyxSession* s, size_t i) {
  return s && i < s->prog.n_eps ? s->prog.eps[i].name : NULL;
}
ONYX_API size_t onyx_session_provider_node_count(const OnyxSession* s, size_t i) {
  return s && i < s->prog.n_eps ? s->prog.eps[i].n_nodes : 0;
}

/* --- explain ----------------------------------------------------------------------------- */
/* Every name in the text (of nodes, values, ops, groups, providers, files)
 * goes through ox_str_add_escaped: a model's names may hold control bytes
 * and newlines, which must not end a line of the report or reach a
 * terminal raw. */
#define ESC(t, name) ox_str_add_escaped(t, name, 0)

static void ox_explain_names(OxStr* t, OxValue* const* vals, size_t n) {
  for (size_t i = 0; i < n; i++) {
    ox_str_addf(t, "%s'", i ? ", " : "");
    ESC(t, vals[i]->name);
    ox_str_addf(t, "'");
  }
  if (!n) ox_str_addf(t, "(none)");
}

static void ox_explain_node(OxStr* t, const OnyxSession* s, const OxNode* n) {
  ox_str_addf(t, "  ");
  ox_str_add_escaped(t, n->name, 32);
  ox_str_addf(t, " ");
  ox_str_add_escaped(t, n->op_type, 22);
  ox_str_addf(t, " v%-3d -> ", (int)n->since_version);
  ESC(t, n->ep >= 0 ? s->prog.eps[n->ep].name : "host");
  if (n->group >= 0) {
    ox_str_addf(t, " (group '");
    ESC(t, s->prog.part.groups[n->group].name);
    ox_str_addf(t, "')");
  }
  ox_str_addf(t, "\n");
  if (n->origin_pass) {
    ox_str_addf(t, "      made by ");
    ESC(t, n->origin_pass);
    ox_str_addf(t, " from ");
    ESC(t, n->origin_nodes && *n->origin_nodes ? n->origin_nodes : "(no node)");
    ox_str_addf(t, "\n");
  }
  /* Declines of this node, or of the model's nodes a rewrite made it from. */
  for (size_t i = 0; i < s->prog.part.n_declines; i++) {
    const OxDecline* d = &s->prog.part.declines[i];
    if (!strcmp(d->node_name, n->name) || ox_list_has(n->origin_nodes, ", ", d->node_name)) {
      ox_str_addf(t, "      declined by ");
      ESC(t, s->prog.eps[d->ep].name);
      if (strcmp(d->node_name, n->name)) {
        ox_str_addf(t, " as ");
        ESC(t, d->node_name);
      }
      ox_str_addf(t, ": ");
      ESC(t, d->reason);
      ox_str_addf(t, "\n");
    }
  }
}

static void ox_explain_groups(OxStr* t, const OnyxSession* s) {
  ox_str_addf(t, "\nfused groups: %zu\n", s->prog.part.n_groups);
  for (size_t i = 0; i < s->prog.part.n_groups; i++) {
    const OxGroup* grp = &s->prog.part.groups[i];
    ox_str_addf(t, "  '");
    ESC(t, grp->name);
    ox_str_addf(t, "' on ");
    ESC(t, s->prog.eps[grp->ep].name);
    ox_str_addf(t, ": %zu nodes (", grp->view.n_nodes);
    for (size_t k = 0; k < grp->view.n_nodes; k++) {
      if (k) ox_str_addf(t, ", ");
      ESC(t, grp->view.nodes[k]->name);
    }
    ox_str_addf(t, "); inputs: ");
    ox_explain_names(t, grp->view.inputs, grp->view.n_inputs);
    ox_str_addf(t, "; outputs: ");
    ox_explain_names(t, grp->view.outputs, grp->view.n_outputs);
    ox_str_addf(t, "\n");
  }
}

ONYX_API OnyxStatus* onyx_session_explain(const OnyxSession* s, char** text) {
  if (!s || !text) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_session_explain: NULL argument");
  OxStr t = {0};
  ox_str_addf(&t, "model: ");
  ESC(&t, s->prog.source);
  ox_str_addf(&t, "\nproviders (priority order):\n");
  for (size_t i = 0; i < s->prog.n_eps; i++) {
    const OnyxProvider* p = s->prog.eps[i].lib->provider;
    ox_str_addf(&t, "  %zu. ", i + 1);
    ox_str_add_escaped(&t, s->prog.eps[i].name, 10);
    ox_str_addf(&t, " %zu nodes%s  (", s->prog.eps[i].n_nodes,
                s->prog.eps[i].implicit ? " (appended as fallback)" : "");
    ESC(&t, p && p->vendor ? p->vendor : "?");
    ox_str_addf(&t, " ");
    ESC(&t, p && p->version ? p->version : "?");
    ox_str_addf(&t, ")  [");
    ESC(&t, s->prog.eps[i].lib->path);
    ox_str_addf(&t, "]\n");
  }
  ox_str_addf(&t, "\nnodes: %zu (execution order)\n", s->prog.graph->n_nodes);
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++)
    ox_explain_node(&t, s, s->prog.graph->nodes[i]);
  ox_explain_groups(&t, s);
  ox_str_addf(&t, "\ncopies: %zu\n", s->prog.plan.n_copies);
  for (size_t i = 0; i < s->prog.plan.n_copies; i++) {
    ox_str_addf(&t, "  ");
    ESC(&t, s->prog.plan.copies[i].text); /* one line, with value names */
    ox_str_addf(&t, "\n");
  }
  char* mem = ox_memplan_summary(&s->prog); /* the planned peak per device */
  if (mem) ox_str_addf(&t, "\nmemory: %s\n", mem);
  free(mem);
  *text = ox_str_take(&t);
  return *text ? NULL : ox_oom();
}
#undef ESC

/* --- node priorities ------------------------------------------------------------------------ */
OnyxStatus* ox_session_apply_priorities(OnyxSession* s) {
  const OnyxSessionOptions* o = s->opts;
  for (size_t k = 0; k < o->n_prio; k++) {
    bool found = false;
    for (size_t i = 0; i < s->prog.graph->n_nodes; i++)
      if (s->prog.graph->nodes[i]->name &&
          !strcmp(s->prog.graph->nodes[i]->name, o->prio_nodes[k])) {
        s->prog.graph->nodes[i]->priority = o->prio_values[k];
        found = true;
      }
    if (!found)
      return ox_status(ONYX_INVALID_CONFIG, "node priority: the graph has no node named '%s'",
                       o->prio_nodes[k]);
  }
  return NULL;
}

/* --- IO binding ------------------------------------------------------------------------------- */
typedef enum OxBindMode { OX_BIND_NONE, OX_BIND_PREALLOCATED, OX_BIND_DEVICE } OxBindMode;

struct OnyxIoBinding {
  OnyxSession* session;
  /* per graph input: shares the bound value's buffer (bind_input), or the
   * binding's own copy (bind_input_to_device) */
  OxTensor** inputs;
  OxBindMode* mode;         /* per graph output */
  OxTensor** user;          /* per graph output: the preallocated tensor (shares its buffer) */
  OnyxMemoryDevice* device; /* per graph output, OX_BIND_DEVICE */
  OxTensor** result;        /* per graph output: the last run's result */
  size_t* order;            /* bound outputs, in the order they were bound */
  size_t n_order;
  bool ran;
  OnyxRunEvent* last; /* the last asynchronous run (a reference), until settled */
};

/* --- asynchronous runs (onyx.h: onyx_session_run_with_binding_async) ------------------------
 * A run event holds the provider event its run recorded (OxRunEnd) until
 * the run is known done; it is then "done" with the run's error, if any,
 * and the provider event is released once no thread waits on it. One lock
 * for every session's run events: it is held for bookkeeping only, never
 * while a provider waits. */
struct OnyxRunEvent {
  int refs;             /* the caller's and the binding's */
  OnyxSession* session; /* while the provider event is held */
  OnyxEp* ep;           /* the provider that recorded it */
  OxRunEnd end;         /* end.ev: the provider event; NULL once released */
  int busy;             /* threads waiting in the provider */
  bool done;
  OnyxStatus* error;  /* the run's error found after the call, once done */
  OnyxRunEvent* next; /* in session->in_flight while end.ev is held */
};

static pthread_mutex_t g_run_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_run_idle = PTHREAD_COND_INITIALIZER; /* some event's busy dropped */

/* Under g_run_lock, after a provider query or wait: records the outcome
 * (st, done) when the event is not done yet, and releases the provider
 * event once done and no thread waits on it. Takes st. */
static void ox_run_event_finish(OnyxRunEvent* e, OnyxStatus* st, int32_t done) {
  if (done && !e->done) {
    e->done = true;
    if (st)
      e->error = ox_status_wrap(st,
                                "provider '%s': the run's device work failed (the last node "
                                "queued on its stream: %s)",
                                e->session->prog.eps[e->end.ep].name,
                                e->end.last[0] ? e->end.last : "none");
    st = NULL;
  }
  ox_status_free(st);
  if (!e->done || e->busy || !e->end.ev) return;
  e->ep->release_event(e->ep, e->end.ev);
  e->end.ev = NULL;
  for (OnyxRunEvent** p = &e->session->in_flight; *p; p = &(*p)->next)
    if (*p == e) {
      *p = e->next;
      break;
    }
  e->next = NULL;
  e->session = NULL;
  pthread_cond_broadcast(&g_run_idle);
}

/* Asks the provider about e (timeout_ms: 0 polls, negative waits without
 * limit) and returns whether it is done; the lock is dropped meanwhile. */
static bool ox_run_event_poll(OnyxRunEvent* e, int64_t timeout_ms) {
  pthread_mutex_lock(&g_run_lock);
  if (e->done || !e->end.ev) {
    bool done = e->done;
    pthread_mutex_unlock(&g_run_lock);
    return done;
  }
  e->busy++;
  OnyxEp* ep = e->ep;
  OnyxEvent* ev = e->end.ev;
  const OnyxRunEventExt* x = e->end.ext;
  pthread_mutex_unlock(&g_run_lock);
  int32_t done = 0;
  OnyxStatus* st = timeout_ms == 0 ? x->query_event(ep, ev, &done)
                                   : x->wait_event_for(ep, ev, timeout_ms, &done);
  if (st) done = 1; /* an error ends the wait: the run failed */
  pthread_mutex_lock(&g_run_lock);
  e->busy--;
  ox_run_event_finish(e, st, done);
  bool result = e->done;
  if (!e->busy) pthread_cond_broadcast(&g_run_idle);
  pthread_mutex_unlock(&g_run_lock);
  return result;
}

void ox_session_settle_runs(OnyxSession* s) {
  pthread_mutex_lock(&g_run_lock);
  while (s->in_flight) {
    OnyxRunEvent* e = s->in_flight;
    if (e->busy) { /* another thread waits on it: it releases the event when done */
      pthread_cond_wait(&g_run_idle, &g_run_lock);
      continue;
    }
    pthread_mutex_unlock(&g_run_lock);
    ox_run_event_poll(e, -1);
    pthread_mutex_lock(&g_run_lock);
    if (s->in_flight == e && !e->busy) ox_run_event_finish(e, NULL, 1); /* the wait failed */
  }
  pthread_mutex_unlock(&g_run_lock);
}

static void ox_run_event_unref(OnyxRunEvent* e) {
  if (!e || __atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL)) return;
  ox_run_event_poll(e, -1); /* nothing else holds it: settle it before it goes */
  pthread_mutex_lock(&g_run_lock);
  if (e->end.ev) ox_run_event_finish(e, NULL, 1);
  pthread_mutex_unlock(&g_run_lock);
  ox_status_free(e->error);
  free(e);
}

/* Before the binding is used, changed or released: its last asynchronous
 * run is done (its error stays with its event). */
static void ox_binding_settle(OnyxIoBinding* b) {
  if (!b->last) return;
  ox_run_event_poll(b->last, -1);
  ox_run_event_unref(b->last);
  b->last = NULL;
}

static OnyxStatus* ox_share(const OxTensor* t, OxTensor** out) {
  if (t->buffer) return ox_tensor_view(t, t->dims, t->rank, out);
  return ox_tensor_wrap(t->type, t->dims, t->rank, t->data, &t->device, out);
}

static bool ox_same_shape(const OxTensor* a, const OxTensor* b) {
  if (a->type != b->type || a->rank != b->rank) return false;
  for (size_t i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

static bool ox_unshared(const OxTensor* t) {
  return t && t->buffer && __atomic_load_n(&t->buffer->refs, __ATOMIC_ACQUIRE) == 1;
}

ONYX_API OnyxStatus* onyx_io_binding_create(OnyxSession* s, OnyxIoBinding** out) {
  if (!s || !out) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_io_binding_create: NULL argument");
  *out = NULL;
  size_t ni = s->prog.graph->n_inputs + 1, no = s->prog.graph->n_outputs + 1;
  OnyxIoBinding* b = calloc(1, sizeof *b);
  if (!b) return ox_oom();
  b->session = s;
  b->inputs = calloc(ni, sizeof *b->inputs);
  b->mode = calloc(no, sizeof *b->mode);
  b->user = calloc(no, sizeof *b->user);
  b->device = calloc(no, sizeof *b->device);
  b->result = calloc(no, sizeof *b->result);
  b->order = calloc(no, sizeof *b->order);
  if (!b->inputs || !b->mode || !b->user || !b->device || !b->result || !b->order) {
    onyx_io_binding_release(b);
    return ox_oom();
  }
  *out = b;
  return NULL;
}

ONYX_API void onyx_io_binding_clear_inputs(OnyxIoBinding* b) {
  if (!b) return;
  ox_binding_settle(b);
  for (size_t i = 0; i < b->session->prog.graph->n_inputs; i++) {
    ox_tensor_free(b->inputs[i]);
    b->inputs[i] = NULL;
  }
}

static void ox_unbind_output(OnyxIoBinding* b, size_t i) {
  ox_tensor_free(b->user[i]);
  ox_tensor_free(b->result[i]);
  b->user[i] = b->result[i] = NULL;
  b->mode[i] = OX_BIND_NONE;
  for (size_t k = 0; k < b->n_order; k++)
    if (b->order[k] == i) {
      memmove(b->order + k, b->order + k + 1, (b->n_order - k - 1) * sizeof *b->order);
      b->n_order--;
      break;
    }
}

ONYX_API void onyx_io_binding_clear_outputs(OnyxIoBinding* b) {
  if (!b) return;
  ox_binding_settle(b);
  for (size_t i = 0; i < b->session->prog.graph->n_outputs; i++)
    ox_unbind_output(b, i);
  b->ran = false;
}

ONYX_API void onyx_io_binding_clear(OnyxIoBinding* b) {
  onyx_io_binding_clear_inputs(b);
  onyx_io_binding_clear_outputs(b);
}

ONYX_API void onyx_io_binding_release(OnyxIoBinding* b) {
  if (!b) return;
  ox_binding_settle(b);
  if (b->inputs) onyx_io_binding_clear_inputs(b);
  if (b->mode && b->user && b->result && b->order) onyx_io_binding_clear_outputs(b);
  free(b->inputs);
  free(b->mode);
  free(b->user);
  free(b->device);
  free(b->result);
  free(b->order);
  free(b);
}

/* The input's index and its value checked against the model's declaration. */
static OnyxStatus* ox_binding_input(OnyxIoBinding* b, const char* name, const OnyxValue* value,
                                    const char* fn, size_t* out) {
  if (!b || !name) return ox_status(ONYX_INVALID_ARGUMENT, "%s: NULL argument", fn);
  const OxGraph* g = b->session->prog.graph;
  size_t i = 0;
  while (i < g->n_inputs && strcmp(g->inputs[i]->name, name))
    i++;
  if (i == g->n_inputs) return ox_unknown_name("input", name, g->inputs, g->n_inputs);
  if (!value || !value->tensor)
    return ox_status(ONYX_INVALID_ARGUMENT, "input '%s': the value is NULL (%s)", name, fn);
  const OxTensor* t = value->tensor;
  OX_TRY(ox_check_decl(g->inputs[i], t, "input"));
  ox_binding_settle(b);
  if (t->device.kind != ONYX_DEVICE_CPU &&
      ox_program_ep_for_memory(&b->session->prog, &t->device) < 0)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "input '%s': no provider of the session serves the memory it is on", name);
  *out = i;
  return NULL;
}

static void ox_mem_desc(const OnyxMemoryDevice* m, char* buf, size_t len) {
  snprintf(buf, len, "memory kind %d, vendor 0x%x, device %d, memory type %d", m->kind,
           m->vendor_id, m->device_id, m->mem_type);
}

ONYX_API OnyxStatus* onyx_io_binding_bind_input(OnyxIoBinding* b, const char* name,
                                                const OnyxValue* value) {
  size_t i;
  OX_TRY(ox_binding_input(b, name, value, "onyx_io_binding_bind_input", &i));
  OxTensor* shared;
  OX_TRY(ox_share(value->tensor, &shared));
  ox_tensor_free(b->inputs[i]);
  b->inputs[i] = shared;
  return NULL;
}

ONYX_API OnyxStatus* onyx_io_binding_bind_input_to_device(OnyxIoBinding* b, const char* name,
                                                          const OnyxValue* value,
                                                          const OnyxMemoryDevice* device) {
  size_t i;
  OX_TRY(ox_binding_input(b, name, value, "onyx_io_binding_bind_input_to_device", &i));
  OnyxSession* s = b->session;
  const OxTensor* t = value->tensor;
  OnyxMemoryDevice mem;
  if (device)
    mem = *device;
  else
    OX_TRY(ox_plan_input_memory(&s->prog, i, &mem));
  bool host = ox_memory_equal(&mem, &OX_HOST_MEMORY);
  int32_t ep = host ? -1 : ox_program_ep_for_memory(&s->prog, &mem);
  if (!host && ep < 0) {
    char d[128];
    ox_mem_desc(&mem, d, sizeof d);
    return ox_status(ONYX_INVALID_ARGUMENT, "input '%s': no provider of the session serves %s",
                     name, d);
  }
  if (!host && t->type == ONYX_ELEM_STRING)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "input '%s': string tensors stay in host memory; bind it with "
                     "onyx_io_binding_bind_input",
                     name);
  OxTensor* copy = NULL;
  OnyxStatus* st = host ? ox_tensor_new(t->type, t->dims, t->rank, &copy)
                        : ox_session_alloc_tensor(s, ep, (OnyxMemType)mem.mem_type, t->type,
                                                  t->dims, t->rank, &copy);
  int32_t src_ep = ox_program_ep_for_memory(&s->prog, &t->device);
  if (!st) st = ox_copy_tensor(s, t, copy, src_ep, ep);
  /* Both streams are past the copy before the binding is used. */
  for (int k = 0; k < 2 && !st; k++) {
    int32_t e = k ? ep : src_ep;
    if (e >= 0 && s->prog.eps[e].stream && s->prog.eps[e].ep->sync_stream)
      st = s->prog.eps[e].ep->sync_stream(s->prog.eps[e].ep, s->prog.eps[e].stream);
  }
  if (st) {
    ox_tensor_free(copy);
    return ox_status_wrap(st, "input '%s': copying it to %s", name,
                          host ? "host memory" : s->prog.eps[ep].name);
  }
  ox_tensor_free(b->inputs[i]);
  b->inputs[i] = copy;
  return NULL;
}

ONYX_API OnyxStatus* onyx_session_input_memory(const OnyxSession* s, size_t i,
                                               OnyxMemoryDevice* out) {
  if (!s || !out)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_session_input_memory: NULL argument");
  return ox_plan_input_memory(&s->prog, i, out);
}

ONYX_API OnyxStatus* onyx_session_output_memory(const OnyxSession* s, size_t i,
                                                OnyxMemoryDevice* out) {
  if (!s || !out)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_session_output_memory: NULL argument");
  return ox_plan_output_memory(&s->prog, i, out);
}

static OnyxStatus* ox_binding_output(OnyxIoBinding* b, const char* name, size_t* out) {
  OX_TRY(ox_output_index(b->session->prog.graph, name, out));
  ox_binding_settle(b);
  ox_unbind_output(b, *out);
  b->order[b->n_order++] = *out;
  return NULL;
}

ONYX_API OnyxStatus* onyx_io_binding_bind_output(OnyxIoBinding* b, const char* name,
                                                 OnyxValue* value) {
  if (!b || !name || !value || !value->tensor)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_io_binding_bind_output: NULL argument");
  const OxGraph* g = b->session->prog.graph;
  size_t i;
  OX_TRY(ox_output_index(g, name, &i));
  const OxTensor* t = value->tensor;
  OX_TRY(ox_check_decl(g->outputs[i], t, "output"));
  if (t->type == ONYX_ELEM_STRING)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "output '%s': string outputs cannot be preallocated; use "
                     "onyx_io_binding_bind_output_to_device",
                     name);
  if (t->device.kind != ONYX_DEVICE_CPU &&
      ox_program_ep_for_memory(&b->session->prog, &t->device) < 0)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "output '%s': no provider of the session serves the memory it is on", name);
  OxTensor* shared;
  OX_TRY(ox_share(t, &shared));
  OnyxStatus* st = ox_binding_output(b, name, &i);
  if (st) {
    ox_tensor_free(shared);
    return st;
  }
  b->mode[i] = OX_BIND_PREALLOCATED;
  b->user[i] = shared;
  return NULL;
}

ONYX_API OnyxStatus* onyx_io_binding_bind_output_to_device(OnyxIoBinding* b, const char* name,
                                                           const OnyxMemoryDevice* device) {
  if (!b || !name)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_io_binding_bind_output_to_device: NULL argument");
  OnyxMemoryDevice dev = device ? *device : OX_HOST_MEMORY;
  bool host = ox_memory_equal(&dev, &OX_HOST_MEMORY);
  if (!host && ox_program_ep_for_memory(&b->session->prog, &dev) < 0)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "output '%s': no provider of the session serves memory kind %d, vendor "
                     "0x%x, device %d, memory type %d",
                     name, dev.kind, dev.vendor_id, dev.device_id, dev.mem_type);
  size_t i;
  OX_TRY(ox_binding_output(b, name, &i));
  b->mode[i] = OX_BIND_DEVICE;
  b->device[i] = host ? OX_HOST_MEMORY : dev;
  return NULL;
}

ONYX_API size_t onyx_io_binding_output_count(const OnyxIoBinding* b) {
  return b ? b->n_order : 0;
}

ONYX_API const char* onyx_io_binding_output_name(const OnyxIoBinding* b, size_t k) {
  return b && k < b->n_order ? b->session->prog.graph->outputs[b->order[k]]->name : NULL;
}

/* The feeds are the bound tensors, in whatever memory they are: the
 * executor copies a device input to host memory only for consumers reading
 * it there (host/exec/executor.c). */
static OnyxStatus* ox_binding_feeds(OnyxIoBinding* b, OxTensor** feeds) {
  OnyxSession* s = b->session;
  for (size_t i = 0; i < s->prog.graph->n_inputs; i++) {
    if (!b->inputs[i])
      return ox_status(ONYX_INVALID_ARGUMENT, "input '%s' is not bound",
                       s->prog.graph->inputs[i]->name);
    feeds[i] = b->inputs[i];
  }
  return NULL;
}

/* An output bound to a device whose declared shape is static gets its
 * result tensor before the run (unless it has one nobody else holds), so
 * that the first run writes it in place too. */
static OnyxStatus* ox_binding_prepare(OnyxIoBinding* b, size_t i) {
  OnyxSession* s = b->session;
  const OxValue* v = s->prog.graph->outputs[i];
  if (b->mode[i] != OX_BIND_DEVICE || ox_unshared(b->result[i]) || v->kind != OX_VK_TENSOR ||
      v->type == ONYX_ELEM_STRING || v->rank < 0)
    return NULL;
  for (int32_t k = 0; k < v->rank; k++)
    if (v->dims[k] < 0) return NULL;
  int32_t ep = ox_program_ep_for_memory(&s->prog, &b->device[i]);
  OxTensor* t = NULL;
  /* Host results are heap tensors: they may outlive the session. */
  OnyxStatus* st = ox_memory_equal(&b->device[i], &OX_HOST_MEMORY) || ep < 0
                       ? ox_tensor_new(v->type, v->dims, (size_t)v->rank, &t)
                       : ox_session_alloc_tensor(s, ep, (OnyxMemType)b->device[i].mem_type, v->type,
                                                 v->dims, (size_t)v->rank, &t);
  if (st) return ox_status_wrap(st, "output '%s'", v->name);
  ox_tensor_free(b->result[i]);
  b->result[i] = t;
  return NULL;
}

/* What a run may write in place: the user's tensors, and for outputs the
 * binding allocates, last run's result when nobody else holds it. */
static OxTensor* ox_binding_preset(const OnyxIoBinding* b, size_t i) {
  if (b->mode[i] == OX_BIND_PREALLOCATED) return b->user[i];
  if (b->mode[i] == OX_BIND_DEVICE && ox_unshared(b->result[i])) return b->result[i];
  return NULL;
}

/* The memory a bound output is fetched in. */
static const OnyxMemoryDevice* ox_binding_fetch_mem(const OnyxIoBinding* b, size_t i) {
  if (b->mode[i] == OX_BIND_PREALLOCATED) return &b->user[i]->device;
  if (b->mode[i] == OX_BIND_DEVICE) return &b->device[i];
  return NULL;
}

static OnyxStatus* ox_binding_store(OnyxIoBinding* b, size_t i, OxTensor* got) {
  OnyxSession* s = b->session;
  const char* name = s->prog.graph->outputs[i]->name;
  OxTensor* dst = b->mode[i] == OX_BIND_PREALLOCATED ? b->user[i] : b->result[i];
  if (dst && got->data == dst->data && ox_same_shape(got, dst)) {
    ox_tensor_free(got); /* written in place */
    return NULL;
  }
  if (b->mode[i] == OX_BIND_DEVICE && ox_memory_equal(&b->device[i], &got->device)) {
    ox_tensor_free(b->result[i]);
    b->result[i] = got; /* a new tensor in the bound memory: keep it */
    return NULL;
  }
  OnyxStatus* st = NULL;
  if (b->mode[i] == OX_BIND_PREALLOCATED && !ox_same_shape(got, dst)) {
    char want[160], have[160];
    ox_shape_str(dst->type, dst->dims, (int64_t)dst->rank, want, sizeof want);
    ox_shape_str(got->type, got->dims, (int64_t)got->rank, have, sizeof have);
    st = ox_status(ONYX_INVALID_ARGUMENT,
                   "output '%s': the bound tensor is %s but the run produced %s", name, want, have);
  }
  if (!st && b->mode[i] == OX_BIND_DEVICE && !(ox_unshared(dst) && ox_same_shape(got, dst))) {
    int32_t ep = ox_program_ep_for_memory(&s->prog, &b->device[i]);
    OxTensor* fresh = NULL;
    st = ep < 0 ? ox_tensor_new(got->type, got->dims, got->rank, &fresh)
                : ox_session_alloc_tensor(s, ep, (OnyxMemType)b->device[i].mem_type, got->type,
                                          got->dims, got->rank, &fresh);
    if (!st) {
      ox_tensor_free(b->result[i]);
      b->result[i] = dst = fresh;
    }
  }
  if (!st) {
    int32_t ep = ox_program_ep_for_memory(&s->prog, &dst->device);
    st = ox_copy_tensor(s, got, dst, ox_program_ep_for_memory(&s->prog, &got->device), ep);
    if (!st && ep >= 0 && s->prog.eps[ep].stream && s->prog.eps[ep].ep->sync_stream)
      st = s->prog.eps[ep].ep->sync_stream(s->prog.eps[ep].ep, s->prog.eps[ep].stream);
    if (st) st = ox_status_wrap(st, "output '%s'", name);
  }
  ox_tensor_free(got);
  return st;
}

/* A run with the binding (end: NULL, or where an asynchronous run's end
 * goes; see OxRunEnd). */
static OnyxStatus* ox_binding_run(OnyxSession* s, const OnyxRunOptions* run_options,
                                  OnyxIoBinding* b, OxRunEnd* end, const char* fn) {
  if (!s || !b) return ox_status(ONYX_INVALID_ARGUMENT, "%s: NULL argument", fn);
  if (b->session != s)
    return ox_status(ONYX_INVALID_ARGUMENT, "%s: the binding belongs to another session", fn);
  if (!b->n_order) return ox_status(ONYX_INVALID_ARGUMENT, "no output is bound");
  ox_binding_settle(b); /* the binding's previous run first */
  const OxGraph* g = s->prog.graph;
  OxTensor** feeds = calloc(g->n_inputs + 1, sizeof *feeds);
  OxTensor** fetched = calloc(g->n_outputs + 1, sizeof *fetched);
  OxTensor** preset = calloc(g->n_outputs + 1, sizeof *preset);
  const OnyxMemoryDevice** mem = calloc(g->n_outputs + 1, sizeof *mem);
  bool* wanted = calloc(g->n_outputs + 1, sizeof *wanted);
  OnyxStatus* st = (!feeds || !fetched || !preset || !mem || !wanted) ? ox_oom() : NULL;
  if (!st) st = ox_binding_feeds(b, feeds);
  for (size_t i = 0; !st && i < g->n_outputs; i++) {
    wanted[i] = b->mode[i] != OX_BIND_NONE;
    if (!wanted[i]) continue;
    st = ox_binding_prepare(b, i);
    preset[i] = ox_binding_preset(b, i);
    mem[i] = ox_binding_fetch_mem(b, i);
  }
  if (!st) st = ox_execute_io_end(&s->prog, run_options, feeds, fetched, wanted, preset, mem, end);
  for (size_t i = 0; i < g->n_outputs && fetched; i++) {
    if (!fetched[i]) continue;
    /* The same tensor fetched for two outputs (cannot happen today): once. */
    for (size_t k = i + 1; k < g->n_outputs; k++)
      if (fetched[k] == fetched[i]) fetched[k] = NULL;
    if (st)
      ox_tensor_free(fetched[i]);
    else
      st = ox_binding_store(b, i, fetched[i]);
    fetched[i] = NULL;
  }
  if (!st) b->ran = true;
  free(feeds);
  free(fetched);
  free(preset);
  free(mem);
  free(wanted);
  return st;
}

ONYX_API OnyxStatus*
onyx_session_run_with_binding(OnyxSession* s, const OnyxRunOptions* run_options, OnyxIoBinding* b) {
  return ox_binding_run(s, run_options, b, NULL, "onyx_session_run_with_binding");
}

ONYX_API OnyxStatus* onyx_session_run_with_binding_async(OnyxSession* s,
                                                         const OnyxRunOptions* run_options,
                                                         OnyxIoBinding* b, OnyxRunEvent** out) {
  if (!out)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_session_run_with_binding_async: NULL argument");
  *out = NULL;
  OnyxRunEvent* e = calloc(1, sizeof *e);
  if (!e) return ox_oom();
  e->end.ep = -1;
  OnyxStatus* st =
      ox_binding_run(s, run_options, b, &e->end, "onyx_session_run_with_binding_async");
  if (e->end.ev) {
    e->ep = s->prog.eps[e->end.ep].ep;
    e->session = s;
  }
  if (st) {
    /* Failed after its event was recorded (a late output error): the work
     * is waited for before the event goes. */
    if (e->end.ev) {
      int32_t done = 0;
      ox_status_free(e->end.ext->wait_event_for(e->ep, e->end.ev, -1, &done));
      e->ep->release_event(e->ep, e->end.ev);
    }
    free(e);
    return st;
  }
  e->refs = 2; /* the caller's and the binding's */
  e->done = !e->end.ev;
  if (e->end.ev) {
    pthread_mutex_lock(&g_run_lock);
    e->next = s->in_flight;
    s->in_flight = e;
    pthread_mutex_unlock(&g_run_lock);
  }
  b->last = e;
  *out = e;
  return NULL;
}

ONYX_API OnyxRunState onyx_run_event_query(OnyxRunEvent* e) {
  if (!e) return ONYX_RUN_FAILED;
  if (!ox_run_event_poll(e, 0)) return ONYX_RUN_PENDING;
  pthread_mutex_lock(&g_run_lock);
  OnyxRunState r = e->error ? ONYX_RUN_FAILED : ONYX_RUN_COMPLETE;
  pthread_mutex_unlock(&g_run_lock);
  return r;
}

ONYX_API OnyxStatus* onyx_run_event_wait(OnyxRunEvent* e, int64_t timeout_ms, OnyxRunState* state) {
  if (state) *state = ONYX_RUN_FAILED;
  if (!e) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_run_event_wait: NULL argument");
  if (!ox_run_event_poll(e, timeout_ms < 0 ? -1 : timeout_ms)) {
    if (state) *state = ONYX_RUN_PENDING;
    return ox_status(ONYX_LIMIT_EXCEEDED,
                     "onyx_run_event_wait: the run has not completed within %lld ms; it goes on",
                     (long long)timeout_ms);
  }
  pthread_mutex_lock(&g_run_lock);
  OnyxStatus* st = e->error ? ox_status(e->error->code, "%s", e->error->message) : NULL;
  pthread_mutex_unlock(&g_run_lock);
  if (state) *state = st ? ONYX_RUN_FAILED : ONYX_RUN_COMPLETE;
  return st;
}

ONYX_API void* onyx_run_event_native(OnyxRunEvent* e) {
  if (!e) return NULL;
  pthread_mutex_lock(&g_run_lock);
  void* h = !e->done && e->end.ev && e->end.ext->native_event
                ? e->end.ext->native_event(e->ep, e->end.ev)
                : NULL;
  pthread_mutex_unlock(&g_run_lock);
  return h;
}

ONYX_API void onyx_run_event_release(OnyxRunEvent* e) {
  ox_run_event_unref(e);
}

ONYX_API OnyxStatus* onyx_io_binding_get_outputs(const OnyxIoBinding* b, OnyxValue** values,
                                                 size_t count) {
  if (!b || (count && !values))
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_io_binding_get_outputs: NULL argument");
  for (size_t k = 0; k < count; k++)
    values[k] = NULL;
  if (count != b->n_order)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_io_binding_get_outputs: %zu values asked for, %zu outputs are bound",
                     count, b->n_order);
  if (!b->ran)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_io_binding_get_outputs: the binding has not run since its outputs "
                     "were bound");
  OnyxStatus* st = NULL;
  for (size_t k = 0; k < count && !st; k++) {
    size_t i = b->order[k];
    const OxTensor* t = b->mode[i] == OX_BIND_PREALLOCATED ? b->user[i] : b->result[i];
    OxTensor* shared = NULL;
    st = t ? ox_share(t, &shared) : ox_status(ONYX_FAIL, "internal: output %zu has no result", i);
    if (!st && !(values[k] = malloc(sizeof *values[k]))) {
      ox_tensor_free(shared);
      st = ox_oom();
    }
    if (!st) values[k]->tensor = shared;
  }
  if (st) onyx_values_release(values, count);
  return st;
}
