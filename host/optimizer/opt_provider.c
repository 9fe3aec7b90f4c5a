/* opt_provider.c — providers' own graph transformers (OnyxEp.transform,
 * ABI 1.1): after placement each provider may replace sets of the nodes it
 * was given with one node of an op it has a kernel for. The host checks each
 * edit (the provider's own, ungrouped nodes; a convex set; every value
 * leaving the set kept), applies it at once, and after the transform returns
 * resolves the graph and matches the new nodes against the provider's
 * kernels (ox_session_fuse). */
#include <stdlib.h>
#include <string.h>
#include "opt_internal.h"
#include "ox_providers.h"

struct OnyxGraphEdit {
  OxGraph* graph;
  int32_t ep;
  const char* ep_name;
  /* Every provider's schema registry (may hold NULLs), for imports. */
  const OxSchemaRegistry* const* schemas;
  size_t n_schemas;
  OnyxGraphView* view; /* the transform's view, kept current after each edit */
  OxNode** made;       /* nodes edit_replace made during this transform */
  size_t n_made, cap_made;
  bool changed;
};

static const char* ox_edit_ep_name(const OnyxGraphEdit* e) {
  return e->ep_name;
}

static bool ox_edit_owns_node(const OnyxGraphEdit* e, const OxNode* n) {
  const OxGraph* g = e->graph;
  return n && n->index < g->n_nodes && g->nodes[n->index] == n;
}

static bool ox_edit_owns_value(const OnyxGraphEdit* e, const OxValue* v) {
  const OxGraph* g = e->graph;
  return v && v->index < g->n_values && g->values[v->index] == v;
}

/* Marks the set and checks that it is this provider's, ungrouped, listed
 * once. */
static OnyxStatus* ox_edit_mark(OnyxGraphEdit* e, const OnyxNode* const* nodes, size_t n,
                                bool* in_set) {
  const char* pname = ox_edit_ep_name(e);
  for (size_t i = 0; i < n; i++) {
    const OxNode* x = nodes[i];
    if (!ox_edit_owns_node(e, x))
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "provider '%s': edit_replace: node %zu of the set is not in the graph",
                       pname, i);
    if (x->ep != e->ep || x->group >= 0)
      return ox_status(ONYX_PLACEMENT_ERROR,
                       "provider '%s': edit_replace: node '%s' (%s) is not one of its own "
                       "single-node placements",
                       pname, x->name, x->op_type);
    if (in_set[x->index])
      return ox_status(ONYX_INVALID_ARGUMENT, "provider '%s': edit_replace: node '%s' listed twice",
                       pname, x->name);
    in_set[x->index] = true;
  }
  return NULL;
}

static bool ox_listed(const OnyxValueInfo* const* list, size_t n, const OxValue* v) {
  for (size_t i = 0; i < n; i++)
    if (list[i] == v) return true;
  return false;
}

/* Inputs come from outside the set; outputs are the set's, and every value
 * the set produces that is read outside it (or is a graph output) is one. */
static OnyxStatus* ox_edit_check_values(OnyxGraphEdit* e, const bool* in_set,
                                        const OnyxNode* const* nodes, size_t n_nodes,
                                        const OnyxValueInfo* const* ins, size_t n_in,
                                        const OnyxValueInfo* const* outs, size_t n_out) {
  const char* pname = ox_edit_ep_name(e);
  for (size_t i = 0; i < n_in; i++) {
    const OxValue* v = ins[i];
    if (!v) continue;
    if (!ox_edit_owns_value(e, v) || (v->producer && in_set[v->producer->index]))
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "provider '%s': edit_replace: input %zu is not a value entering the set",
                       pname, i);
  }
  for (size_t i = 0; i < n_out; i++) {
    const OxValue* v = outs[i];
    if (!v || !ox_edit_owns_value(e, v) || !v->producer || !in_set[v->producer->index])
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "provider '%s': edit_replace: output %zu is not a value the set produces",
                       pname, i);
  }
  for (size_t i = 0; i < n_nodes; i++)
    for (size_t k = 0; k < nodes[i]->n_outputs; k++) {
      const OxValue* v = nodes[i]->outputs[k];
      if (!v || ox_listed(outs, n_out, v)) continue;
      bool leaves = v->is_graph_output || v->is_outer_scope;
      for (size_t c = 0; c < v->n_consumers && !leaves; c++)
        leaves = !in_set[v->consumers[c]->index];
      if (leaves)
        return ox_status(ONYX_INVALID_ARGUMENT,
                         "provider '%s': edit_replace: value '%s' of node '%s' is read outside "
                         "the set but is not one of the new node's outputs",
                         pname, v->name, nodes[i]->name);
    }
  return NULL;
}

/* The domain is imported by the model (or imported here at the version of
 * the newest schema the host knows for the op). */
static OnyxStatus* ox_edit_import(OnyxGraphEdit* e, const char* domain, const char* op) {
  OxGraph* g = e->graph;
  if (!*domain || ox_graph_opset(g, domain) >= 0) return NULL;
  const OxSchema* best = NULL;
  for (size_t i = 0; i <= e->n_schemas; i++) {
    const OxSchemaRegistry* r = i < e->n_schemas ? e->schemas[i] : NULL;
    const OxSchema* sc = ox_schema_lookup(r, domain, op, INT32_MAX, NULL);
    if (sc && (!best || sc->since_version > best->since_version)) best = sc;
  }
  if (!best)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "provider '%s': edit_replace: no schema for %s.%s (register it with "
                     "register_schema)",
                     ox_edit_ep_name(e), domain, op);
  OxOpsetImport* ops = realloc(g->opsets, (g->n_opsets + 1) * sizeof *ops);
  if (!ops) return ox_oom();
  g->opsets = ops;
  if (!(ops[g->n_opsets].domain = ox_strdup(domain))) return ox_oom();
  ops[g->n_opsets++].version = best->since_version;
  return NULL;
}

/* A node name the graph does not hold yet, from `base`. */
static char* ox_edit_fresh_name(const OxGraph* g, const char* base) {
  for (size_t k = 0;; k++) {
    char* name = k ? ox_asprintf("%s/%zu", base, k) : ox_strdup(base);
    if (!name) return NULL;
    bool taken = false;
    for (size_t i = 0; i < g->n_nodes && !taken; i++)
      taken = !strcmp(g->nodes[i]->name, name);
    if (!taken) return name;
    free(name);
  }
}

/* Removes the set and adds the node that replaces it. */
static OnyxStatus* ox_edit_apply(OnyxGraphEdit* e, const OnyxNode* const* nodes, size_t n_nodes,
                                 const char* domain, const char* op, const char* name,
                                 const OnyxValueInfo* const* ins, size_t n_in,
                                 const OnyxValueInfo* const* outs, size_t n_out, OxNode** made) {
  OxGraph* g = e->graph;
  OxStr origin = {0};
  for (size_t i = 0; i < n_nodes; i++)
    ox_str_addf(&origin, "%s%s", i ? ", " : "",
                nodes[i]->origin_nodes ? nodes[i]->origin_nodes : nodes[i]->name);
  const char** in_names = calloc(n_in + 1, sizeof *in_names);
  const char** out_names = calloc(n_out + 1, sizeof *out_names);
  char* fresh = ox_edit_fresh_name(g, name && *name ? name : nodes[0]->name);
  char* pass = ox_asprintf("%s:transform", ox_edit_ep_name(e));
  char* from = ox_str_take(&origin);
  OnyxStatus* st = (!in_names || !out_names || !fresh || !pass || !from) ? ox_oom() : NULL;
  for (size_t i = 0; !st && i < n_in; i++)
    in_names[i] = ins[i] ? ins[i]->name : "";
  for (size_t i = 0; !st && i < n_out; i++)
    out_names[i] = outs[i]->name;
  if (!st) {
    /* Value names outlive the nodes: the values stay in the graph. */
    for (size_t i = 0; i < n_nodes; i++)
      ox_graph_remove_node(g, (OxNode*)nodes[i]);
    st = ox_graph_add_node(g, fresh, op, domain, in_names, n_in, out_names, n_out, made);
  }
  if (!st) {
    (*made)->ep = e->ep;
    (*made)->origin_pass = pass;
    (*made)->origin_nodes = from;
    pass = from = NULL;
  }
  free(in_names);
  free(out_names);
  free(fresh);
  free(pass);
  free(from);
  return st;
}

/* The replaced nodes leave the view; the new node takes the place of the
 * first of them. `gone` holds pointers to freed nodes: compared, never read. */
static void ox_edit_update_view(OnyxGraphView* v, const OnyxNode* const* gone, size_t n_gone,
                                OxNode* made) {
  size_t at = 0;
  bool placed = false;
  for (size_t i = 0; i < v->n_nodes; i++) {
    bool replaced = false;
    for (size_t k = 0; k < n_gone && !replaced; k++)
      replaced = (const OnyxNode*)v->nodes[i] == gone[k];
    if (!replaced)
      v->nodes[at++] = v->nodes[i];
    else if (!placed) {
      v->nodes[at++] = made;
      placed = true;
    }
  }
  v->n_nodes = at;
}

OnyxStatus* ox_edit_replace(OnyxGraphEdit* e, const OnyxNode* const* nodes, size_t n_nodes,
                            const char* domain, const char* op_type, const char* name,
                            const OnyxValueInfo* const* inputs, size_t n_inputs,
                            const OnyxValueInfo* const* outputs, size_t n_outputs,
                            const OnyxNode** out) {
  if (out) *out = NULL;
  if (!e || !nodes || !n_nodes || !op_type || !*op_type || (n_inputs && !inputs) || !outputs ||
      !n_outputs)
    return ox_status(ONYX_INVALID_ARGUMENT, "edit_replace: NULL or empty argument");
  if (!domain || !strcmp(domain, "ai.onnx")) domain = "";
  OxGraph* g = e->graph;
  bool* in_set = calloc(g->n_nodes + 1, sizeof *in_set);
  bool* down = calloc(g->n_nodes + 1, sizeof *down);
  OnyxStatus* st = (!in_set || !down) ? ox_oom() : NULL;
  if (!st) st = ox_edit_mark(e, nodes, n_nodes, in_set);
  if (!st)
    st = ox_edit_check_values(e, in_set, nodes, n_nodes, inputs, n_inputs, outputs, n_outputs);
  const OxNode* w = st ? NULL : ox_nonconvex_witness(g, in_set, down);
  if (w)
    st = ox_status(ONYX_PLACEMENT_ERROR,
                   "provider '%s': edit_replace: the set is not convex (a path leaves it and "
                   "re-enters at node '%s')",
                   ox_edit_ep_name(e), w->name);
  free(in_set);
  free(down);
  if (!st) st = ox_edit_import(e, domain, op_type);
  if (!st && !ox_grow((void**)&e->made, &e->cap_made, e->n_made + 1, sizeof *e->made))
    st = ox_oom();
  OxNode* made = NULL;
  if (!st)
    st = ox_edit_apply(e, nodes, n_nodes, domain, op_type, name, inputs, n_inputs, outputs,
                       n_outputs, &made);
  if (st) return ox_status_wrap(st, "%s.%s", *domain ? domain : "ai.onnx", op_type);
  ox_edit_update_view(e->view, nodes, n_nodes, made);
  e->made[e->n_made++] = made;
  e->changed = true;
  if (out) *out = made;
  return NULL;
}

static OnyxStatus* ox_edit_attr_node(OnyxGraphEdit* e, const OnyxNode* n, const char* name,
                                     OxNode** out) {
  *out = NULL;
  if (!e || !n || !name) return ox_status(ONYX_INVALID_ARGUMENT, "edit_set_attr: NULL argument");
  for (size_t i = 0; i < e->n_made; i++)
    if (e->made[i] == n) *out = e->made[i];
  if (!*out)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "provider '%s': edit_set_attr: node '%s' was not made by edit_replace in "
                     "this transform",
                     ox_edit_ep_name(e), n->name);
  if (ox_node_attr(*out, name))
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "provider '%s': edit_set_attr: node '%s' already has attribute '%s'",
                     ox_edit_ep_name(e), n->name, name);
  return NULL;
}

OnyxStatus* ox_edit_set_attr_int(OnyxGraphEdit* e, const OnyxNode* n, const char* name, int64_t v) {
  OxNode* x;
  OX_TRY(ox_edit_attr_node(e, n, name, &x));
  return ox_opt_attr_int(x, name, v);
}

OnyxStatus* ox_edit_set_attr_float(OnyxGraphEdit* e, const OnyxNode* n, const char* name, float v) {
  OxNode* x;
  OX_TRY(ox_edit_attr_node(e, n, name, &x));
  return ox_opt_attr_float(x, name, v);
}

OnyxStatus* ox_edit_set_attr_ints(OnyxGraphEdit* e, const OnyxNode* n, const char* name,
                                  const int64_t* v, size_t count) {
  OxNode* x;
  OX_TRY(ox_edit_attr_node(e, n, name, &x));
  if (count && !v) return ox_status(ONYX_INVALID_ARGUMENT, "edit_set_attr_ints: NULL values");
  OxAttr a = {.name = ox_strdup(name), .type = ONYX_ATTR_INTS, .count = count};
  a.ints = malloc((count ? count : 1) * sizeof *a.ints);
  if (!a.name || !a.ints) {
    ox_attr_clear(&a);
    return ox_oom();
  }
  if (count) memcpy(a.ints, v, count * sizeof *v);
  OnyxStatus* st = ox_node_add_attr(x, &a);
  ox_attr_clear(&a);
  return st;
}

OnyxStatus* ox_edit_set_attr_string(OnyxGraphEdit* e, const OnyxNode* n, const char* name,
                                    const char* v) {
  OxNode* x;
  OX_TRY(ox_edit_attr_node(e, n, name, &x));
  if (!v) return ox_status(ONYX_INVALID_ARGUMENT, "edit_set_attr_string: NULL value");
  return ox_opt_attr_string(x, name, v);
}

/* A view of the provider's single-node placements, in graph order. */
static OnyxStatus* ox_edit_view(const OxGraph* g, int32_t ep, OnyxGraphView* v) {
  *v = (OnyxGraphView){0};
  v->nodes = malloc((g->n_nodes + 1) * sizeof *v->nodes);
  v->inputs = malloc((g->n_inputs + 1) * sizeof *v->inputs);
  v->outputs = malloc((g->n_outputs + 1) * sizeof *v->outputs);
  if (!v->nodes || !v->inputs || !v->outputs) return ox_oom();
  for (size_t i = 0; i < g->n_nodes; i++)
    if (g->nodes[i]->ep == ep && g->nodes[i]->group < 0) v->nodes[v->n_nodes++] = g->nodes[i];
  if (g->n_inputs) memcpy(v->inputs, g->inputs, g->n_inputs * sizeof *v->inputs);
  if (g->n_outputs) memcpy(v->outputs, g->outputs, g->n_outputs * sizeof *v->outputs);
  v->n_inputs = g->n_inputs;
  v->n_outputs = g->n_outputs;
  return NULL;
}

OnyxStatus* ox_provider_transform(OxGraph* g, OnyxEp* ep, int32_t ep_index, const char* ep_name,
                                  const OxSchemaRegistry* const* schemas, size_t n_schemas,
                                  bool* changed) {
  *changed = false;
  OnyxStatus* (*transform)(OnyxEp*, const OnyxGraphView*, OnyxGraphEdit*) =
      OX_EP_SLOT(ep, transform);
  if (!transform) return NULL;
  OnyxGraphView view;
  OnyxGraphEdit edit = {.graph = g,
                        .ep = ep_index,
                        .ep_name = ep_name,
                        .schemas = schemas,
                        .n_schemas = n_schemas,
                        .view = &view};
  OnyxStatus* st = ox_edit_view(g, ep_index, &view);
  if (!st && view.n_nodes) st = transform(ep, &view, &edit);
  if (st) st = ox_status_wrap(st, "provider '%s': transform failed", ep_name);
  ox_view_clear(&view);
  free(edit.made);
  *changed = edit.changed;
  return st;
}
