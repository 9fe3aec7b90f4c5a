/* session_run.c — feeding, running and fetching; introspection; explain. */
#include <stdlib.h>
#include <string.h>
#include "ox_session.h"

static OnyxStatus* ox_check_feed(const OxValue* decl, const OxTensor* t) {
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
  const OxGraph* g = s->graph;
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
  if (!st) st = ox_execute(s, run_options, feeds, fetched, wanted);
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
  return s ? s->graph->n_inputs : 0;
}
ONYX_API size_t onyx_session_output_count(const OnyxSession* s) {
  return s ? s->graph->n_outputs : 0;
}
ONYX_API const char* onyx_session_input_name(const OnyxSession* s, size_t i) {
  return s && i < s->graph->n_inputs ? s->graph->inputs[i]->name : NULL;
}
ONYX_API const char* onyx_session_output_name(const OnyxSession* s, size_t i) {
  return s && i < s->graph->n_outputs ? s->graph->outputs[i]->name : NULL;
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
  if (!s || i >= s->graph->n_inputs)
    return ox_status(ONYX_INVALID_ARGUMENT, "input index %zu out of range", i);
  return ox_value_info(s->graph->inputs[i], type, rank, dims);
}

ONYX_API OnyxStatus* onyx_session_output_info(const OnyxSession* s, size_t i, OnyxElemType* type,
                                              int32_t* rank, const int64_t** dims) {
  if (!s || i >= s->graph->n_outputs)
    return ox_status(ONYX_INVALID_ARGUMENT, "output index %zu out of range", i);
  return ox_value_info(s->graph->outputs[i], type, rank, dims);
}

ONYX_API size_t onyx_session_provider_count(const OnyxSession* s) {
  return s ? s->n_eps : 0;
}
ONYX_API const char* onyx_session_provider_name(const OnyxSession* s, size_t i) {
  return s && i < s->n_eps ? s->eps[i].name : NULL;
}
ONYX_API size_t onyx_session_provider_node_count(const OnyxSession* s, size_t i) {
  return s && i < s->n_eps ? s->eps[i].n_nodes : 0;
}

/* --- explain ----------------------------------------------------------------------------- */
static void ox_explain_node(OxStr* t, const OnyxSession* s, const OxNode* n) {
  ox_str_addf(t, "  %-32s %-22s v%-3d -> %s", n->name, n->op_type, (int)n->since_version,
              s->eps[n->ep].name);
  if (n->group >= 0) ox_str_addf(t, " (group '%s')", s->part.groups[n->group].name);
  ox_str_addf(t, "\n");
  for (size_t i = 0; i < s->part.n_declines; i++) {
    const OxDecline* d = &s->part.declines[i];
    if (d->node == n->index)
      ox_str_addf(t, "      declined by %s: %s\n", s->eps[d->ep].name, d->reason);
  }
}

static void ox_explain_groups(OxStr* t, const OnyxSession* s) {
  ox_str_addf(t, "\nfused groups: %zu\n", s->part.n_groups);
  for (size_t i = 0; i < s->part.n_groups; i++) {
    const OxGroup* grp = &s->part.groups[i];
    ox_str_addf(t, "  '%s' on %s: %zu nodes (", grp->name, s->eps[grp->ep].name, grp->view.n_nodes);
    for (size_t k = 0; k < grp->view.n_nodes; k++)
      ox_str_addf(t, "%s%s", k ? ", " : "", grp->view.nodes[k]->name);
    ox_str_addf(t, "); inputs: ");
    ox_list_names(t, grp->view.inputs, grp->view.n_inputs);
    ox_str_addf(t, "; outputs: ");
    ox_list_names(t, grp->view.outputs, grp->view.n_outputs);
    ox_str_addf(t, "\n");
  }
}

ONYX_API OnyxStatus* onyx_session_explain(const OnyxSession* s, char** text) {
  if (!s || !text) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_session_explain: NULL argument");
  OxStr t = {0};
  ox_str_addf(&t, "model: %s\nproviders (priority order):\n", s->source);
  for (size_t i = 0; i < s->n_eps; i++)
    ox_str_addf(&t, "  %zu. %-10s %zu nodes%s  [%s]\n", i + 1, s->eps[i].name, s->eps[i].n_nodes,
                s->eps[i].implicit ? " (appended as fallback)" : "", s->eps[i].lib->path);
  ox_str_addf(&t, "\nnodes: %zu (execution order)\n", s->graph->n_nodes);
  for (size_t i = 0; i < s->graph->n_nodes; i++)
    ox_explain_node(&t, s, s->graph->nodes[i]);
  ox_explain_groups(&t, s);
  ox_str_addf(&t, "\ncopies: %zu\n", s->plan.n_copies);
  for (size_t i = 0; i < s->plan.n_copies; i++)
    ox_str_addf(&t, "  %s\n", s->plan.copies[i].text);
  *text = ox_str_take(&t);
  return *text ? NULL : ox_oom();
}
