/* graph.c — building, ordering and resolving the IR graph. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_graph.h"

OnyxStatus* ox_graph_new(const char* name, OxGraph** out) {
  *out = NULL;
  OxGraph* g = calloc(1, sizeof *g);
  if (!g || !(g->name = ox_strdup(name ? name : "graph"))) {
    free(g);
    return ox_oom();
  }
  *out = g;
  return NULL;
}

static void ox_value_free(OxValue* v) {
  if (!v) return;
  free(v->name);
  free(v->dims);
  if (v->dim_params)
    for (int32_t i = 0; i < v->rank; i++)
      free(v->dim_params[i]);
  free(v->dim_params);
  ox_tensor_free(v->constant);
  free(v->consumers);
  free(v);
}

static void ox_node_free(OxNode* n) {
  if (!n) return;
  for (size_t i = 0; i < n->n_attrs; i++) {
    OxAttr* a = &n->attrs[i];
    ox_graph_free(a->g);
    for (size_t k = 0; a->graphs && k < a->count; k++)
      ox_graph_free(a->graphs[k]);
    free(a->graphs);
    a->g = NULL;
    a->graphs = NULL;
    ox_attr_clear(a);
  }
  free(n->attrs);
  free(n->name);
  free(n->op_type);
  free(n->domain);
  free(n->origin_pass);
  free(n->origin_nodes);
  free(n->inputs);
  free(n->outputs);
  free(n);
}

void ox_graph_free(OxGraph* g) {
  if (!g) return;
  for (size_t i = 0; i < g->n_nodes; i++)
    ox_node_free(g->nodes[i]);
  for (size_t i = 0; i < g->n_values; i++)
    ox_value_free(g->values[i]);
  for (size_t i = 0; i < g->n_opsets; i++)
    free(g->opsets[i].domain);
  ox_graph_unmap_all(g);
  free(g->nodes);
  free(g->values);
  free(g->inputs);
  free(g->outputs);
  free(g->opsets);
  ox_map_free(&g->value_map);
  free(g->name);
  free(g->producer_name);
  free(g->source);
  free(g);
}

OxValue* ox_graph_find(const OxGraph* g, const char* name) {
  return ox_map_get(&g->value_map, name);
}

OnyxStatus* ox_graph_value(OxGraph* g, const char* name, OxValue** out) {
  *out = ox_graph_find(g, name);
  if (*out) return NULL;
  OxValue* v = calloc(1, sizeof *v);
  if (!v || !(v->name = ox_strdup(name)) ||
      !ox_grow((void**)&g->values, &g->cap_values, g->n_values + 1, sizeof *g->values)) {
    ox_value_free(v);
    return ox_oom();
  }
  v->rank = -1;
  v->index = g->n_values;
  if (!ox_map_put(&g->value_map, v->name, v)) {
    ox_value_free(v);
    return ox_oom();
  }
  g->values[g->n_values++] = v;
  *out = v;
  return NULL;
}

static OnyxStatus* ox_value_add_consumer(OxValue* v, OxNode* n) {
  if (!ox_grow((void**)&v->consumers, &v->cap_consumers, v->n_consumers + 1, sizeof(OxNode*)))
    return ox_oom();
  v->consumers[v->n_consumers++] = n;
  return NULL;
}

static const char* ox_value_origin(const OxValue* v) {
  if (v->producer) return v->producer->name;
  return v->constant ? "an initializer" : "a graph input";
}

OnyxStatus* ox_graph_add_node(OxGraph* g, const char* name, const char* op_type, const char* domain,
                              const char* const* inputs, size_t n_in, const char* const* outputs,
                              size_t n_out, OxNode** out) {
  if (out) *out = NULL;
  if (!ox_grow((void**)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes)) return ox_oom();
  OxNode* n = calloc(1, sizeof *n);
  if (!n) return ox_oom();
  n->ep = -1;
  n->group = -1;
  n->index = g->n_nodes;
  n->op_type = ox_strdup(op_type ? op_type : "");
  n->domain = ox_strdup(ox_domain_is_onnx(domain) ? "" : domain);
  n->name = name && *name ? ox_strdup(name) : ox_asprintf("%s_%zu", op_type, g->n_nodes);
  n->inputs = calloc(n_in ? n_in : 1, sizeof *n->inputs);
  n->outputs = calloc(n_out ? n_out : 1, sizeof *n->outputs);
  if (!n->op_type || !n->domain || !n->name || !n->inputs || !n->outputs) {
    ox_node_free(n);
    return ox_oom();
  }
  n->n_inputs = n_in;
  n->n_outputs = n_out;
  g->nodes[g->n_nodes++] = n; /* owned by the graph from here on */
  for (size_t i = 0; i < n_in; i++) {
    if (!inputs[i] || !*inputs[i]) continue;
    OX_TRY(ox_graph_value(g, inputs[i], &n->inputs[i]));
    OX_TRY(ox_value_add_consumer(n->inputs[i], n));
  }
  for (size_t i = 0; i < n_out; i++) {
    if (!outputs[i] || !*outputs[i]) continue;
    OxValue* v;
    OX_TRY(ox_graph_value(g, outputs[i], &v));
    if (v->producer || v->constant || v->is_graph_input)
      return ox_status(ONYX_INVALID_MODEL,
                       "node '%s' (%s) writes value '%s', which is already produced by %s%s%s",
                       n->name, n->op_type, v->name, v->producer ? "node '" : "",
                       ox_value_origin(v), v->producer ? "'" : "");
    v->producer = n;
    v->producer_slot = (int32_t)i;
    n->outputs[i] = v;
  }
  if (out) *out = n;
  return NULL;
}

OnyxStatus* ox_node_add_attr(OxNode* n, OxAttr* attr) {
  if (ox_node_attr(n, attr->name))
    return ox_status(ONYX_INVALID_MODEL, "node '%s' (%s) has attribute '%s' twice", n->name,
                     n->op_type, attr->name);
  if (!ox_grow((void**)&n->attrs, &n->cap_attrs, n->n_attrs + 1, sizeof *n->attrs)) return ox_oom();
  n->attrs[n->n_attrs++] = *attr;
  *attr = (OxAttr){0};
  return NULL;
}

OnyxStatus* ox_graph_add_input(OxGraph* g, OxValue* v) {
  if (v->producer)
    return ox_status(ONYX_INVALID_MODEL, "graph input '%s' is also produced by node '%s'", v->name,
                     v->producer->name);
  if (v->is_graph_input)
    return ox_status(ONYX_INVALID_MODEL, "graph input '%s' is declared twice", v->name);
  if (!ox_grow((void**)&g->inputs, &g->cap_inputs, g->n_inputs + 1, sizeof *g->inputs))
    return ox_oom();
  v->is_graph_input = true;
  g->inputs[g->n_inputs++] = v;
  return NULL;
}

OnyxStatus* ox_graph_add_output(OxGraph* g, OxValue* v) {
  if (!ox_grow((void**)&g->outputs, &g->cap_outputs, g->n_outputs + 1, sizeof *g->outputs))
    return ox_oom();
  v->is_graph_output = true;
  g->outputs[g->n_outputs++] = v;
  return NULL;
}

static OnyxStatus* ox_node_add_implicit(OxGraph* g, OxNode* n, const char* name) {
  for (size_t i = n->n_inputs - n->n_implicit; i < n->n_inputs; i++)
    if (n->inputs[i] && !strcmp(n->inputs[i]->name, name)) return NULL;
  OxValue* v;
  OX_TRY(ox_graph_value(g, name, &v));
  OxValue** ins = realloc(n->inputs, (n->n_inputs + 1) * sizeof *ins);
  if (!ins) return ox_oom();
  n->inputs = ins;
  OX_TRY(ox_value_add_consumer(v, n));
  n->inputs[n->n_inputs++] = v;
  n->n_implicit++;
  return NULL;
}

static OnyxStatus* ox_link_one(OxGraph* g, OxNode* n, const OxGraph* sub) {
  for (size_t i = 0; i < sub->n_values; i++) {
    const OxValue* v = sub->values[i];
    if (v->is_outer_scope && (v->n_consumers || v->is_graph_output) && !v->producer &&
        !v->is_graph_input && !v->constant)
      OX_TRY(ox_node_add_implicit(g, n, v->name));
  }
  return NULL;
}

OnyxStatus* ox_node_link_subgraphs(OxGraph* g, OxNode* n) {
  for (size_t a = 0; a < n->n_attrs; a++) {
    const OxAttr* at = &n->attrs[a];
    if (at->g) OX_TRY(ox_link_one(g, n, at->g));
    for (size_t k = 0; at->graphs && k < at->count; k++)
      OX_TRY(ox_link_one(g, n, at->graphs[k]));
  }
  return NULL; /* the loader marks those a subgraph reads from further out */
}

/* A deep copy of attribute src (subgraphs included, their parent `owner`). */
static OnyxStatus* ox_attr_clone(const OxAttr* src, OxGraph* owner, OxAttr* dst) {
  *dst = (OxAttr){.type = src->type,
                  .i = src->i,
                  .f = src->f,
                  .count = src->count,
                  .from_default = src->from_default,
                  .tp_kind = src->tp_kind,
                  .tp_elem = src->tp_elem};
  size_t n = src->count ? src->count : 1;
  if (!(dst->name = ox_strdup(src->name))) return ox_oom();
  if (src->s) {
    if (!(dst->s = malloc(src->s_len + 1))) return ox_oom();
    memcpy(dst->s, src->s, src->s_len + 1);
    dst->s_len = src->s_len;
  }
  if (src->ints && !(dst->ints = malloc(n * sizeof *dst->ints))) return ox_oom();
  if (src->ints && src->count) memcpy(dst->ints, src->ints, src->count * sizeof *dst->ints);
  if (src->floats && !(dst->floats = malloc(n * sizeof *dst->floats))) return ox_oom();
  if (src->floats && src->count) memcpy(dst->floats, src->floats, src->count * sizeof *dst->floats);
  if (src->strings) {
    dst->strings = calloc(n, sizeof *dst->strings);
    dst->strings_len = calloc(n, sizeof *dst->strings_len);
    if (!dst->strings || !dst->strings_len) return ox_oom();
    for (size_t i = 0; i < src->count; i++) {
      size_t len = src->strings_len ? src->strings_len[i] : strlen(src->strings[i]);
      if (!(dst->strings[i] = malloc(len + 1))) return ox_oom();
      memcpy(dst->strings[i], src->strings[i], len + 1);
      dst->strings_len[i] = len;
    }
  }
  if (src->t) OX_TRY(ox_tensor_clone(src->t, &dst->t));
  if (src->tensors) {
    if (!(dst->tensors = calloc(n, sizeof *dst->tensors))) return ox_oom();
    for (size_t i = 0; i < src->count; i++)
      OX_TRY(ox_tensor_clone(src->tensors[i], &dst->tensors[i]));
  }
  if (src->g) OX_TRY(ox_graph_clone(src->g, owner, &dst->g));
  if (src->graphs) {
    if (!(dst->graphs = calloc(n, sizeof *dst->graphs))) return ox_oom();
    for (size_t i = 0; i < src->count; i++)
      OX_TRY(ox_graph_clone(src->graphs[i], owner, &dst->graphs[i]));
  }
  return NULL;
}

static void ox_attr_clone_free(OxAttr* a) {
  ox_graph_free(a->g);
  for (size_t k = 0; a->graphs && k < a->count; k++)
    ox_graph_free(a->graphs[k]);
  free(a->graphs);
  a->g = NULL;
  a->graphs = NULL;
  ox_attr_clear(a);
}

static OnyxStatus* ox_graph_clone_into(const OxGraph* src, OxGraph* g) {
  for (size_t i = 0; i < src->n_values; i++) {
    const OxValue* s = src->values[i];
    OxValue* v = NULL;
    OX_TRY(ox_graph_value(g, s->name, &v));
    OX_TRY(ox_value_set(v, s->type, s->rank, s->dims));
    v->kind = s->kind;
    v->map_key = s->map_key;
    v->is_outer_scope = s->is_outer_scope;
    if (s->constant) OX_TRY(ox_tensor_clone(s->constant, &v->constant));
  }
  for (size_t i = 0; i < src->n_inputs; i++)
    OX_TRY(ox_graph_add_input(g, ox_graph_find(g, src->inputs[i]->name)));
  for (size_t i = 0; i < src->n_nodes; i++) {
    const OxNode* s = src->nodes[i];
    size_t n_io = s->n_inputs + s->n_outputs;
    const char** names = calloc(n_io ? n_io : 1, sizeof *names);
    if (!names) return ox_oom();
    for (size_t k = 0; k < s->n_inputs; k++)
      names[k] = s->inputs[k] ? s->inputs[k]->name : NULL;
    for (size_t k = 0; k < s->n_outputs; k++)
      names[s->n_inputs + k] = s->outputs[k] ? s->outputs[k]->name : NULL;
    OxNode* n = NULL;
    OnyxStatus* st = ox_graph_add_node(g, s->name, s->op_type, s->domain, names, s->n_inputs,
                                       names + s->n_inputs, s->n_outputs, &n);
    free(names);
    OX_TRY(st);
    n->n_implicit = s->n_implicit;
    for (size_t a = 0; a < s->n_attrs; a++) {
      OxAttr at;
      st = ox_attr_clone(&s->attrs[a], g, &at);
      if (!st) st = ox_node_add_attr(n, &at);
      if (st) {
        ox_attr_clone_free(&at);
        return st;
      }
    }
  }
  for (size_t i = 0; i < src->n_outputs; i++)
    OX_TRY(ox_graph_add_output(g, ox_graph_find(g, src->outputs[i]->name)));
  return NULL;
}

OnyxStatus* ox_graph_clone(const OxGraph* src, OxGraph* parent, OxGraph** out) {
  OX_TRY(ox_graph_new(src->name, out));
  (*out)->parent = parent;
  OnyxStatus* st = ox_graph_clone_into(src, *out);
  if (st) {
    ox_graph_free(*out);
    *out = NULL;
  }
  return st;
}

bool ox_node_needs_host(const OxNode* n) {
  for (size_t a = 0; a < n->n_attrs; a++)
    if (n->attrs[a].g || n->attrs[a].graphs) return true;
  for (size_t i = 0; i < n->n_inputs; i++)
    if (n->inputs[i] && n->inputs[i]->kind != OX_VK_TENSOR) return true;
  for (size_t i = 0; i < n->n_outputs; i++)
    if (n->outputs[i] && n->outputs[i]->kind != OX_VK_TENSOR) return true;
  return false;
}

/* --- which nodes the host runs (ox_graph.h) -------------------------------------------------- */
static const char* const ox_flow_ops[] = {"If", "Loop", "Scan", "SequenceMap", NULL};

static const char* const ox_seq_ops[] = {
    "SequenceEmpty", "SequenceConstruct",  "SequenceAt",         "SequenceInsert",
    "SequenceErase", "SequenceLength",     "SplitToSequence",    "ConcatFromSequence",
    "Optional",      "OptionalHasElement", "OptionalGetElement", NULL};

bool ox_seq_op(const char* op) {
  for (size_t i = 0; ox_seq_ops[i]; i++)
    if (!strcmp(op, ox_seq_ops[i])) return true;
  return false;
}

bool ox_flex_op(const OxNode* n) {
  return !strcmp(n->domain, "ai.onnx.preview") && !strcmp(n->op_type, "FlexAttention");
}

bool ox_flow_op(const OxNode* n) {
  if (ox_flex_op(n)) return true;
  if (*n->domain) return false;
  for (size_t i = 0; ox_flow_ops[i]; i++)
    if (!strcmp(n->op_type, ox_flow_ops[i])) return true;
  return false;
}

bool ox_host_op(const OxNode* n) {
  if (ox_flow_op(n) || (!*n->domain && ox_seq_op(n->op_type)) || ox_ml_map_op(n)) return true;
  return ox_node_needs_host(n);
}

void ox_graph_remove_node(OxGraph* g, OxNode* n) {
  for (size_t i = 0; i < n->n_inputs; i++) {
    OxValue* v = n->inputs[i];
    if (!v) continue;
    for (size_t k = 0; k < v->n_consumers; k++) {
      if (v->consumers[k] != n) continue;
      memmove(&v->consumers[k], &v->consumers[k + 1], (v->n_consumers - k - 1) * sizeof(OxNode*));
      v->n_consumers--;
      break;
    }
  }
  for (size_t i = 0; i < n->n_outputs; i++)
    if (n->outputs[i]) n->outputs[i]->producer = NULL;
  size_t at = 0;
  for (size_t i = 0; i < g->n_nodes; i++)
    if (g->nodes[i] != n) {
      g->nodes[at] = g->nodes[i];
      g->nodes[at]->index = at;
      at++;
    }
  g->n_nodes = at;
  ox_node_free(n);
}

/* --- topological sort ------------------------------------------------------------ */

/* A value is available before any node runs when it is a graph input, a
 * constant, or a value of an enclosing graph. */
static bool ox_value_is_source(const OxValue* v) {
  return v->is_graph_input || v->constant || v->is_outer_scope;
}

/* Ready nodes run lowest key first: (priority if asked, then model order). */
static bool ox_runs_before(const OxGraph* g, size_t a, size_t b, bool by_priority) {
  if (by_priority && g->nodes[a]->priority != g->nodes[b]->priority)
    return g->nodes[a]->priority < g->nodes[b]->priority;
  return a < b;
}

/* Inserts node index i into the sorted ready set. */
static void ox_ready_insert(const OxGraph* g, size_t* ready, size_t* n_ready, size_t i,
                            bool by_priority) {
  size_t at = *n_ready;
  while (at > 0 && ox_runs_before(g, i, ready[at - 1], by_priority))
    at--;
  memmove(ready + at + 1, ready + at, (*n_ready - at) * sizeof *ready);
  ready[at] = i;
  (*n_ready)++;
}

OnyxStatus* ox_graph_toposort(OxGraph* g) {
  return ox_graph_order(g, false);
}

OnyxStatus* ox_graph_order(OxGraph* g, bool by_priority) {
  size_t n = g->n_nodes;
  if (!n) return NULL;
  size_t* missing = calloc(n, sizeof *missing); /* unmet inputs per node (by original index) */
  OxNode** order = malloc(n * sizeof *order);
  size_t* ready = malloc(n * sizeof *ready); /* a min-heap would keep it stable; see below */
  if (!missing || !order || !ready) {
    free(missing);
    free(order);
    free(ready);
    return ox_oom();
  }
  OnyxStatus* st = NULL;
  for (size_t i = 0; i < n && !st; i++) {
    OxNode* nd = g->nodes[i];
    nd->index = i;
    for (size_t k = 0; k < nd->n_inputs && !st; k++) { /* stop at the first error */
      OxValue* v = nd->inputs[k];
      if (!v || ox_value_is_source(v)) continue;
      if (!v->producer)
        st = ox_status(ONYX_INVALID_MODEL,
                       "node '%s' (%s) reads value '%s', which no node, graph input or "
                       "initializer produces",
                       nd->name, nd->op_type, v->name);
      else
        missing[i]++;
    }
  }
  /* Kahn's algorithm; among ready nodes the one first in the file goes first
   * (after priority, when asked), so the order is deterministic and follows
   * the model where it can. The ready set is kept sorted. */
  size_t n_ready = 0, n_done = 0;
  for (size_t i = 0; i < n && !st; i++)
    if (!missing[i]) ox_ready_insert(g, ready, &n_ready, i, by_priority);
  while (n_ready && !st) {
    size_t idx = ready[0];
    memmove(ready, ready + 1, --n_ready * sizeof *ready);
    OxNode* nd = g->nodes[idx];
    order[n_done++] = nd;
    for (size_t o = 0; o < nd->n_outputs; o++) {
      OxValue* v = nd->outputs[o];
      if (!v) continue;
      for (size_t c = 0; c < v->n_consumers; c++) {
        size_t ci = v->consumers[c]->index;
        if (--missing[ci]) continue;
        ox_ready_insert(g, ready, &n_ready, ci, by_priority);
      }
    }
  }
  if (!st && n_done < n) {
    for (size_t i = 0; i < n; i++)
      if (missing[i]) {
        st = ox_status(ONYX_INVALID_MODEL, "the graph has a cycle through node '%s' (%s)",
                       g->nodes[i]->name, g->nodes[i]->op_type);
        break;
      }
  }
  if (!st) {
    memcpy(g->nodes, order, n * sizeof *order);
    for (size_t i = 0; i < n; i++)
      g->nodes[i]->index = i;
  }
  free(missing);
  free(order);
  free(ready);
  return st;
}

/* --- resolve ------------------------------------------------------------------------ */

static OnyxStatus* ox_resolve_node(OxGraph* g, OxNode* nd, const OxSchemaRegistry* const* customs,
                                   size_t n_customs, OxGraphExpandFn expand) {
  int64_t opset = ox_graph_opset(g, nd->domain);
  if (opset < 0)
    return ox_status(ONYX_INVALID_MODEL,
                     "node '%s' (%s) uses domain '%s', which the model does "
                     "not import (no opset_import entry)",
                     nd->name, nd->op_type, *nd->domain ? nd->domain : "ai.onnx");
  const OxSchema* s = NULL;
  const char* why = NULL;
  for (size_t i = 0; i < n_customs && !s; i++)
    if (customs[i]) s = ox_schema_lookup(customs[i], nd->domain, nd->op_type, opset, NULL);
  if (!s) s = ox_schema_lookup(NULL, nd->domain, nd->op_type, opset, &why);
  if (!s)
    return ox_status(ONYX_NOT_IMPLEMENTED, "node '%s' (%s): %s", nd->name, nd->op_type,
                     why ? why : "unknown op");
  nd->schema = s;
  nd->since_version = s->since_version;
  OX_TRY(ox_schema_check_node(s, nd));
  for (size_t i = 0; i < nd->n_inputs; i++) {
    const OxValue* v = nd->inputs[i];
    if (v && v->type == ONYX_ELEM_UNDEFINED)
      return ox_status(ONYX_INVALID_MODEL, "node '%s' (%s): input %zu '%s' has no known type",
                       nd->name, nd->op_type, i, v->name);
  }
  if (ox_host_op(nd))
    OX_TRY(ox_host_infer(g, nd, customs, n_customs, expand));
  else
    OX_TRY(ox_schema_infer(s, nd));
  for (size_t i = 0; i < nd->n_outputs; i++) {
    const OxValue* v = nd->outputs[i];
    if (v && v->type == ONYX_ELEM_UNDEFINED)
      return ox_status(ONYX_INVALID_MODEL,
                       "node '%s' (%s): the type of output '%s' could not "
                       "be inferred",
                       nd->name, nd->op_type, v->name);
  }
  return NULL;
}

static bool ox_is_gradient(const OxNode* n) {
  return !strcmp(n->domain, "ai.onnx.preview.training") && !strcmp(n->op_type, "Gradient");
}

/* Gradient nodes read the forward graph's types and shapes: resolve what
 * they do not feed, let the builder (expand) replace them, and order again. */
static OnyxStatus* ox_expand_gradients(OxGraph* g, const OxSchemaRegistry* const* customs,
                                       size_t n_customs, OxGraphExpandFn expand) {
  if (!expand) return NULL;
  bool any = false;
  for (size_t i = 0; i < g->n_nodes; i++)
    any |= ox_is_gradient(g->nodes[i]);
  if (!any) return NULL;
  for (size_t i = 0; i < g->n_nodes; i++) {
    OxNode* nd = g->nodes[i];
    bool typed = !ox_is_gradient(nd);
    for (size_t k = 0; typed && k < nd->n_inputs; k++)
      typed = !nd->inputs[k] || nd->inputs[k]->type != ONYX_ELEM_UNDEFINED;
    if (typed) OX_TRY(ox_resolve_node(g, nd, customs, n_customs, expand));
  }
  bool changed = false;
  OX_TRY(expand(g, &changed));
  return changed ? ox_graph_toposort(g) : NULL;
}

OnyxStatus* ox_graph_resolve(OxGraph* g, const OxSchemaRegistry* const* customs, size_t n_customs) {
  return ox_graph_resolve_expanding(g, customs, n_customs, NULL);
}

OnyxStatus* ox_graph_resolve_expanding(OxGraph* g, const OxSchemaRegistry* const* customs,
                                       size_t n_customs, OxGraphExpandFn expand) {
  for (size_t i = 0; i < g->n_values; i++) {
    OxValue* v = g->values[i];
    if (v->constant && v->type == ONYX_ELEM_UNDEFINED)
      OX_TRY(ox_value_set(v, v->constant->type, (int32_t)v->constant->rank, v->constant->dims));
  }
  for (size_t i = 0; i < g->n_inputs; i++)
    if (g->inputs[i]->type == ONYX_ELEM_UNDEFINED)
      return ox_status(ONYX_INVALID_MODEL, "graph input '%s' has no element type",
                       g->inputs[i]->name);
  OX_TRY(ox_graph_toposort(g));
  OX_TRY(ox_expand_gradients(g, customs, n_customs, expand));
  for (size_t i = 0; i < g->n_nodes; i++)
    OX_TRY(ox_resolve_node(g, g->nodes[i], customs, n_customs, expand));
  for (size_t i = 0; i < g->n_outputs; i++) {
    const OxValue* v = g->outputs[i];
    if (!v->producer && !ox_value_is_source(v))
      return ox_status(ONYX_INVALID_MODEL, "graph output '%s' is produced by no node", v->name);
  }
  return NULL;
}

/* --- views and convexity (ox_graph.h) ------------------------------------------------------ */
void ox_view_clear(OnyxGraphView* v) {
  free(v->nodes);
  free(v->inputs);
  free(v->outputs);
  *v = (OnyxGraphView){0};
}

const OxNode* ox_nonconvex_witness(const OxGraph* g, const bool* in_group, bool* downstream) {
  for (size_t i = 0; i < g->n_nodes; i++) {
    const OxNode* n = g->nodes[i];
    bool from_group = false, from_down = false;
    for (size_t k = 0; k < n->n_inputs; k++) {
      const OxValue* v = n->inputs[k];
      if (!v || !v->producer) continue;
      from_group |= in_group[v->producer->index];
      from_down |= downstream[v->producer->index];
    }
    if (in_group[i] && from_down) return n;
    if (!in_group[i]) downstream[i] = from_group || from_down;
  }
  return NULL;
}
