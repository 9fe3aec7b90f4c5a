/* opt_util.c — graph-editing helpers shared by the transformers. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "opt_internal.h"

bool ox_opt_pinned(const OxOpt* o, const OxValue* v) {
  return v->is_graph_output || v->is_graph_input || v->is_outer_scope ||
         ox_map_get(&o->pinned, v->name) != NULL;
}

bool ox_opt_here(const OxOpt* o, const OxNode* n) {
  return o->cfg->phase != OX_OPT_PHASE_FUSION || !n || (n->ep == o->cur_ep && n->group < 0);
}

bool ox_opt_on_cpu(const OxOpt* o) {
  if (o->cfg->phase != OX_OPT_PHASE_FUSION) return o->cfg->cpu_alone;
  return o->cfg->cpu_ep >= 0 && o->cur_ep == o->cfg->cpu_ep;
}

bool ox_opt_single_use(const OxOpt* o, const OxValue* v) {
  return v && v->n_consumers == 1 && !ox_opt_pinned(o, v) && ox_opt_here(o, v->producer) &&
         ox_opt_here(o, v->consumers[0]);
}

bool ox_opt_is(const OxNode* n, const char* op) {
  return n && !*n->domain && !strcmp(n->op_type, op);
}

OxNode* ox_opt_producer(const OxNode* n, size_t i, const char* op) {
  if (i >= n->n_inputs || !n->inputs[i]) return NULL;
  OxNode* p = n->inputs[i]->producer;
  return p && ox_opt_is(p, op) ? p : NULL;
}

static bool ox_opt_const_f64(const OxTensor* t, size_t i, double* out) {
  switch (t->type) {
  case ONYX_ELEM_FLOAT32:
    *out = ((const float*)t->data)[i];
    return true;
  case ONYX_ELEM_FLOAT64:
    *out = ((const double*)t->data)[i];
    return true;
  case ONYX_ELEM_INT64:
    *out = (double)((const int64_t*)t->data)[i];
    return true;
  case ONYX_ELEM_INT32:
    *out = ((const int32_t*)t->data)[i];
    return true;
  default:
    return false;
  }
}

bool ox_opt_const_scalar(const OxValue* v, double* out) {
  if (!v || !v->constant || v->is_graph_input) return false;
  const OxTensor* t = v->constant;
  if (t->count < 1 || !t->data || t->device.kind != ONYX_DEVICE_CPU) return false;
  double first;
  if (!ox_opt_const_f64(t, 0, &first)) return false;
  for (size_t i = 1; i < t->count; i++) {
    double x;
    if (!ox_opt_const_f64(t, i, &x) || x != first) return false;
  }
  *out = first;
  return true;
}

bool ox_opt_const_ints(const OxValue* v, int64_t** out, size_t* count) {
  *out = NULL;
  *count = 0;
  if (!v || !v->constant || v->is_graph_input) return false;
  const OxTensor* t = v->constant;
  if (t->type != ONYX_ELEM_INT64 && t->type != ONYX_ELEM_INT32) return false;
  if (t->count && !t->data) return false;
  int64_t* a = malloc((t->count ? t->count : 1) * sizeof *a);
  if (!a) return false;
  for (size_t i = 0; i < t->count; i++)
    a[i] = t->type == ONYX_ELEM_INT64 ? ((const int64_t*)t->data)[i] : ((const int32_t*)t->data)[i];
  *out = a;
  *count = t->count;
  return true;
}

bool ox_opt_static_shape(const OxValue* v) {
  if (!v || v->rank < 0) return false;
  for (int32_t i = 0; i < v->rank; i++)
    if (v->dims[i] < 0) return false;
  return true;
}

/* --- edits ------------------------------------------------------------------------------- */

static void ox_drop_consumer(OxValue* v, const OxNode* n) {
  for (size_t k = 0; k < v->n_consumers; k++) {
    if (v->consumers[k] != n) continue;
    memmove(&v->consumers[k], &v->consumers[k + 1], (v->n_consumers - k - 1) * sizeof(OxNode*));
    v->n_consumers--;
    return;
  }
}

static OnyxStatus* ox_add_consumer(OxValue* v, OxNode* n) {
  if (!ox_grow((void**)&v->consumers, &v->cap_consumers, v->n_consumers + 1, sizeof(OxNode*)))
    return ox_oom();
  v->consumers[v->n_consumers++] = n;
  return NULL;
}

OnyxStatus* ox_opt_set_input(OxNode* n, size_t i, OxValue* v) {
  if (i >= n->n_inputs) {
    OxValue** ins = realloc(n->inputs, (i + 1) * sizeof *ins);
    if (!ins) return ox_oom();
    for (size_t k = n->n_inputs; k <= i; k++)
      ins[k] = NULL;
    n->inputs = ins;
    n->n_inputs = i + 1;
  }
  if (n->inputs[i] == v) return NULL;
  if (v) OX_TRY(ox_add_consumer(v, n));
  if (n->inputs[i]) ox_drop_consumer(n->inputs[i], n);
  n->inputs[i] = v;
  return NULL;
}

OnyxStatus* ox_opt_replace_uses(OxValue* from, OxValue* to) {
  if (from == to) return NULL;
  while (from->n_consumers) {
    OxNode* c = from->consumers[0];
    size_t before = from->n_consumers;
    for (size_t i = 0; i < c->n_inputs; i++)
      if (c->inputs[i] == from) OX_TRY(ox_opt_set_input(c, i, to));
    if (from->n_consumers >= before)
      return ox_status(ONYX_FAIL, "internal: value '%s' has a stale consumer '%s'", from->name,
                       c->name);
  }
  return NULL;
}

void ox_opt_set_output(OxOpt* o, OxNode* n, size_t i, OxValue* v) {
  o->took_over = n;
  if (n->outputs[i]) n->outputs[i]->producer = NULL;
  n->outputs[i] = v;
  if (v) {
    v->producer = n;
    v->producer_slot = (int32_t)i;
  }
}

OnyxStatus* ox_opt_fresh_name(OxOpt* o, const char* base, char** out) {
  for (;;) {
    char* name = ox_asprintf("%s/opt%zu", base, o->counter++);
    if (!name) return ox_oom();
    if (!ox_graph_find(o->g, name)) {
      *out = name;
      return NULL;
    }
    free(name);
  }
}

OnyxStatus* ox_opt_new_constant(OxOpt* o, const char* base, OxTensor* t, OxValue** out) {
  char* name = NULL;
  OnyxStatus* st = ox_opt_fresh_name(o, base, &name);
  OxValue* v = NULL;
  if (!st) st = ox_graph_value(o->g, name, &v);
  free(name);
  if (!st) st = ox_value_set(v, t->type, (int32_t)t->rank, t->dims);
  if (st) {
    ox_tensor_free(t);
    return st;
  }
  v->constant = t;
  *out = v;
  return NULL;
}

static OnyxStatus* ox_opt_import_contrib(OxGraph* g) {
  if (ox_graph_opset(g, OX_CONTRIB_DOMAIN) >= 0) return NULL;
  OxOpsetImport* ops = realloc(g->opsets, (g->n_opsets + 1) * sizeof *ops);
  if (!ops) return ox_oom();
  g->opsets = ops;
  ops[g->n_opsets].domain = ox_strdup(OX_CONTRIB_DOMAIN);
  ops[g->n_opsets].version = 1;
  if (!ops[g->n_opsets].domain) return ox_oom();
  g->n_opsets++;
  return NULL;
}

OnyxStatus* ox_opt_add_node(OxOpt* o, const char* name, const char* op, const char* domain,
                            OxValue* const* ins, size_t n_in, OxValue* const* outs, size_t n_out,
                            OxNode** out) {
  if (domain && *domain) OX_TRY(ox_opt_import_contrib(o->g));
  const char* in_names[9];
  const char* out_names[4];
  if (n_in > 9 || n_out > 4) return ox_status(ONYX_FAIL, "internal: too many node values");
  for (size_t i = 0; i < n_in; i++)
    in_names[i] = ins[i] ? ins[i]->name : "";
  for (size_t i = 0; i < n_out; i++)
    out_names[i] = outs[i] ? outs[i]->name : "";
  char* unique = NULL;
  OX_TRY(ox_opt_fresh_name(o, name, &unique));
  OnyxStatus* st =
      ox_graph_add_node(o->g, unique, op, domain, in_names, n_in, out_names, n_out, out);
  free(unique);
  if (st) return st;
  if (o->cfg->phase == OX_OPT_PHASE_FUSION) (*out)->ep = o->cur_ep;
  if (!ox_grow((void**)&o->added, &o->cap_added, o->n_added + 1, sizeof *o->added)) return ox_oom();
  o->added[o->n_added++] = *out;
  return NULL;
}

static OnyxStatus* ox_opt_attr(OxNode* n, OxAttr* a) {
  OnyxStatus* st = a->name ? ox_node_add_attr(n, a) : ox_oom();
  ox_attr_clear(a);
  return st;
}

OnyxStatus* ox_opt_attr_int(OxNode* n, const char* name, int64_t v) {
  OxAttr a = {.name = ox_strdup(name), .type = ONYX_ATTR_INT, .i = v};
  return ox_opt_attr(n, &a);
}

OnyxStatus* ox_opt_attr_float(OxNode* n, const char* name, float v) {
  OxAttr a = {.name = ox_strdup(name), .type = ONYX_ATTR_FLOAT, .f = v};
  return ox_opt_attr(n, &a);
}

OnyxStatus* ox_opt_attr_string(OxNode* n, const char* name, const char* v) {
  OxAttr a = {.name = ox_strdup(name), .type = ONYX_ATTR_STRING, .s = ox_strdup(v)};
  if (!a.s) {
    ox_attr_clear(&a);
    return ox_oom();
  }
  a.s_len = strlen(v);
  return ox_opt_attr(n, &a);
}

static void* ox_dup(const void* p, size_t bytes) {
  void* q = malloc(bytes ? bytes : 1);
  if (q && bytes) memcpy(q, p, bytes);
  return q;
}

OnyxStatus* ox_opt_copy_attrs(OxNode* dst, const OxNode* src) {
  for (size_t i = 0; i < src->n_attrs; i++) {
    const OxAttr* s = &src->attrs[i];
    if (s->from_default) continue;
    OxAttr a = {
        .name = ox_strdup(s->name), .type = s->type, .i = s->i, .f = s->f, .count = s->count};
    bool ok = a.name != NULL;
    switch (s->type) {
    case ONYX_ATTR_INT:
    case ONYX_ATTR_FLOAT:
      break;
    case ONYX_ATTR_STRING:
      ok = ok && (a.s = ox_dup(s->s, s->s_len + 1)) != NULL;
      a.s_len = s->s_len;
      break;
    case ONYX_ATTR_INTS:
      ok = ok && (a.ints = ox_dup(s->ints, s->count * sizeof *s->ints));
      break;
    case ONYX_ATTR_FLOATS:
      ok = ok && (a.floats = ox_dup(s->floats, s->count * sizeof *s->floats));
      break;
    default:
      ox_attr_clear(&a);
      return ox_status(ONYX_NOT_IMPLEMENTED, "internal: cannot copy attribute '%s'", s->name);
    }
    if (!ok) {
      ox_attr_clear(&a);
      return ox_oom();
    }
    OX_TRY(ox_opt_attr(dst, &a));
  }
  return NULL;
}

/* "a, b" + ", " + "c": the origin list grown by one more name list. A list
 * stops growing at about OX_ORIGIN_MAX bytes, ending in ", ...": a node
 * rewritten again and again (a Conv folding a chain of thousands of
 * BatchNormalizations) must not cost quadratic time in its origin. */
#define OX_ORIGIN_MAX 1024
static char* ox_join(const char* a, const char* b) {
  size_t len = a ? strlen(a) : 0;
  if (len >= OX_ORIGIN_MAX) {
    const bool cut = len >= 5 && !strcmp(a + len - 5, ", ...");
    return cut ? ox_strdup(a) : ox_asprintf("%s, ...", a);
  }
  return len ? ox_asprintf("%s, %s", a, b) : ox_strdup(b);
}

/* The transformers that made a node: those that made the nodes it
 * replaces, then the current one ("matmul_add, conv_act"). */
/* Appends each transformer of `names` (", "-separated) that t lacks. */
static void ox_add_passes(OxStr* t, const char* names) {
  for (const char* p = names; p && *p;) {
    const char* end = strstr(p, ", ");
    size_t n = end ? (size_t)(end - p) : strlen(p);
    char* one = ox_strndup(p, n);
    if (!one) {
      t->oom = true;
      return;
    }
    if (!ox_list_has(t->data, ", ", one)) ox_str_addf(t, "%s%s", t->len ? ", " : "", one);
    free(one);
    p = end ? end + 2 : NULL;
  }
}

static char* ox_opt_passes(const OxOpt* o, const char* also) {
  OxStr t = {0};
  ox_add_passes(&t, o->passes.data);
  ox_add_passes(&t, also);
  ox_add_passes(&t, o->pass ? o->pass : "optimizer");
  return ox_str_take(&t);
}

/* The nodes the last rewrite added (or the one that took over a removed
 * node's output) record the transformers and the model's nodes they
 * replace. */
OnyxStatus* ox_opt_note_origins(OxOpt* o) {
  OnyxStatus* st = NULL;
  const char* removed = o->removed.data ? o->removed.data : "";
  if (!o->n_added && o->took_over && *removed) {
    OxNode* n = o->took_over;
    char* base = ox_strdup(n->origin_nodes ? n->origin_nodes : n->name);
    char* all = base ? ox_join(base, removed) : NULL;
    char* passes = ox_opt_passes(o, n->origin_pass);
    free(base);
    free(n->origin_nodes);
    free(n->origin_pass);
    n->origin_nodes = all;
    n->origin_pass = passes;
    if (!n->origin_nodes || !n->origin_pass) st = ox_oom();
  }
  for (size_t i = 0; i < o->n_added && !st; i++) {
    OxNode* n = o->added[i];
    if (o->priority != INT64_MAX) n->priority = o->priority; /* "priority" order keeps its place */
    free(n->origin_nodes);
    free(n->origin_pass);
    n->origin_nodes = ox_strdup(removed);
    n->origin_pass = ox_opt_passes(o, NULL);
    if (!n->origin_nodes || !n->origin_pass) st = ox_oom();
  }
  ox_opt_journal_reset(o);
  return st;
}

void ox_opt_journal_reset(OxOpt* o) {
  o->n_added = 0;
  o->took_over = NULL;
  o->priority = INT64_MAX;
  ox_str_free(&o->removed);
  ox_str_free(&o->passes);
}

OnyxStatus* ox_opt_rewrite_each(OxOpt* o, OxRewriteFn rw, size_t* count, bool* changed) {
  for (size_t i = 0; i < o->g->n_nodes;) {
    OxNode* n = o->g->nodes[i];
    if (o->cfg->phase == OX_OPT_PHASE_FUSION && (n->ep < 0 || n->group >= 0)) {
      i++; /* the host's nodes and compiled groups are not rewritten */
      continue;
    }
    o->cur_ep = n->ep;
    ox_opt_journal_reset(o);
    bool done = false;
    OX_TRY(rw(o, n, &done));
    if (!done) {
      i++;
      continue;
    }
    OX_TRY(ox_opt_note_origins(o));
    *changed = true;
    if (count) (*count)++;
  }
  return NULL;
}

void ox_opt_remove(OxOpt* o, OxNode* n) {
  for (size_t i = 0; i < o->n_added; i++)
    if (o->added[i] == n) { /* made and dropped within one rewrite */
      o->added[i] = o->added[--o->n_added];
      ox_graph_remove_node(o->g, n);
      return;
    }
  if (o->took_over == n) o->took_over = NULL;
  if (n->priority < o->priority) o->priority = n->priority;
  const char* names = n->origin_nodes ? n->origin_nodes : n->name;
  if (o->removed.len < OX_ORIGIN_MAX)
    ox_str_addf(&o->removed, "%s%s", o->removed.len ? ", " : "", names);
  else if (o->removed.len < 5 || strcmp(o->removed.data + o->removed.len - 5, ", ..."))
    ox_str_addf(&o->removed, ", ...");
  ox_add_passes(&o->passes, n->origin_pass);
  ox_graph_remove_node(o->g, n);
}

static void ox_opt_value_free(OxValue* v) {
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

OnyxStatus* ox_opt_sweep(OxOpt* o) {
  OxGraph* g = o->g;
  size_t at = 0;
  bool dropped = false;
  for (size_t i = 0; i < g->n_values; i++) {
    OxValue* v = g->values[i];
    if (!v->producer && !v->n_consumers && !ox_opt_pinned(o, v)) {
      ox_opt_value_free(v);
      dropped = true;
      continue;
    }
    v->index = at;
    g->values[at++] = v;
  }
  g->n_values = at;
  if (!dropped) return NULL;
  ox_map_free(&g->value_map);
  g->value_map = (OxMap){0};
  for (size_t i = 0; i < g->n_values; i++)
    if (!ox_map_put(&g->value_map, g->values[i]->name, g->values[i])) return ox_oom();
  return NULL;
}
