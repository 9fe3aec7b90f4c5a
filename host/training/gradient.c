/* gradient.c — ai.onnx.preview.training Gradient: reverse-mode
 * differentiation of the forward graph into ordinary nodes.
 *
 * For a Gradient node with xs = [x1..xn] and y: the forward nodes on a path
 * from some xi to y are visited in reverse topological order; dy/dy is ones
 * (ConstantOfShape of Shape(y)); each node's rule (gradient_rules.c) turns
 * the gradient of its output into gradients of its inputs; several
 * contributions to one value are added (Sum). The Gradient node is then
 * replaced: output i is Identity(dy/dxi), or zeros when y does not depend
 * on xi. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_training.h"

typedef struct OxContribs {
  char** names;
  size_t n, cap;
} OxContribs;

struct OxGradBuilder {
  OxGraph* g;
  const char* prefix; /* the Gradient node's name */
  size_t counter;
  size_t n_fwd;         /* forward values (indices below) */
  OxContribs* contribs; /* per forward value */
  OxNode* last;
};

static char* ox_grad_name(OxGradBuilder* b) {
  char* s = NULL;
  for (;;) { /* skip names the model already uses */
    free(s);
    s = ox_asprintf("%s/grad_%zu", b->prefix, b->counter++);
    if (!s || !ox_graph_find(b->g, s)) return s;
  }
}

OnyxStatus* ox_grad_node(OxGradBuilder* b, const char* op, const char* const* ins, size_t n_in,
                         const char** out) {
  char* name = ox_grad_name(b);
  if (!name) return ox_oom();
  const char* outs[] = {name};
  OxNode* n = NULL;
  OnyxStatus* st = ox_graph_add_node(b->g, name, op, "", ins, n_in, outs, 1, &n);
  free(name);
  if (st) return st;
  b->last = n;
  *out = n->outputs[0]->name; /* owned by the graph */
  return NULL;
}

OxNode* ox_grad_last_node(const OxGradBuilder* b) {
  return b->last;
}

int64_t ox_grad_opset(const OxGradBuilder* b) {
  return ox_graph_opset(b->g, "");
}

OnyxStatus* ox_grad_const_i64(OxGradBuilder* b, const int64_t* v, size_t n, const char** out) {
  char* name = ox_grad_name(b);
  if (!name) return ox_oom();
  OxValue* val = NULL;
  OxTensor* t = NULL;
  int64_t dims[1] = {(int64_t)n};
  OnyxStatus* st = ox_graph_value(b->g, name, &val);
  free(name);
  if (!st) st = ox_tensor_new(ONYX_ELEM_INT64, dims, 1, &t);
  if (!st) {
    if (n) memcpy(t->data, v, n * sizeof *v);
    st = ox_value_set(val, ONYX_ELEM_INT64, 1, dims);
  }
  if (st) {
    ox_tensor_free(t);
    return st;
  }
  val->constant = t;
  *out = val->name;
  return NULL;
}

static bool ox_static(const OxValue* v) {
  if (v->rank < 0) return false;
  for (int32_t i = 0; i < v->rank; i++)
    if (v->dims[i] < 0) return false;
  return true;
}

OnyxStatus* ox_grad_reduce_to(OxGradBuilder* b, const char* dy, const OxValue* y,
                              const OxValue* target, const char** out) {
  bool same = y->rank >= 0 && y->rank == target->rank;
  for (int32_t i = 0; same && i < y->rank; i++)
    same = y->dims[i] == target->dims[i] && y->dims[i] >= 0;
  if (same) {
    *out = dy;
    return NULL;
  }
  if (!ox_static(y) || !ox_static(target) || target->rank > y->rank)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "the gradient of '%s' for '%s' needs static shapes to undo broadcasting",
                     y->name, target->name);
  int64_t axes[64];
  size_t n_axes = 0;
  int32_t lead = y->rank - target->rank;
  for (int32_t i = 0; i < y->rank && n_axes < 64; i++)
    if (i < lead || (target->dims[i - lead] == 1 && y->dims[i] != 1)) axes[n_axes++] = i;
  const char* summed = dy;
  if (n_axes) {
    const char* axes_v;
    if (ox_grad_opset(b) >= 13) {
      OX_TRY(ox_grad_const_i64(b, axes, n_axes, &axes_v));
      const char* ins[] = {dy, axes_v};
      OX_TRY(ox_grad_node(b, "ReduceSum", ins, 2, &summed));
    } else {
      const char* ins[] = {dy};
      OX_TRY(ox_grad_node(b, "ReduceSum", ins, 1, &summed));
      OxAttr a = {.name = ox_strdup("axes"), .type = ONYX_ATTR_INTS, .count = n_axes};
      a.ints = malloc(n_axes * sizeof *a.ints);
      if (!a.name || !a.ints) {
        ox_attr_clear(&a);
        return ox_oom();
      }
      memcpy(a.ints, axes, n_axes * sizeof *axes);
      OnyxStatus* st = ox_node_add_attr(b->last, &a);
      ox_attr_clear(&a);
      OX_TRY(st);
    }
  }
  const char* shape;
  OX_TRY(ox_grad_const_i64(b, target->dims, (size_t)target->rank, &shape));
  const char* ins[] = {summed, shape};
  return ox_grad_node(b, "Reshape", ins, 2, out);
}

OnyxStatus* ox_grad_add(OxGradBuilder* b, const OxValue* v, const char* grad) {
  if (v->index >= b->n_fwd) return NULL;
  OxContribs* c = &b->contribs[v->index];
  char* copy = ox_strdup(grad);
  if (!copy || !ox_grow((void**)&c->names, &c->cap, c->n + 1, sizeof *c->names)) {
    free(copy);
    return ox_oom();
  }
  c->names[c->n++] = copy;
  return NULL;
}

/* The summed gradient of forward value v, or NULL when nothing reached it. */
static OnyxStatus* ox_grad_total(OxGradBuilder* b, const OxValue* v, const char** out) {
  OxContribs* c = &b->contribs[v->index];
  *out = NULL;
  if (!c->n) return NULL;
  if (c->n == 1) {
    *out = c->names[0];
    return NULL;
  }
  return ox_grad_node(b, "Sum", (const char* const*)c->names, c->n, out);
}

/* Marks forward values that depend on some x (from_x) and that y depends
 * on (to_y); nodes are in topological order. */
static void ox_grad_reach(const OxGraph* g, const OxNode* gn, bool* from_x, bool* to_y,
                          const OxValue* y) {
  for (size_t i = 0; i < g->n_nodes; i++) {
    const OxNode* n = g->nodes[i];
    if (n == gn) continue;
    bool any = false;
    for (size_t k = 0; k < n->n_inputs; k++)
      any |= n->inputs[k] && from_x[n->inputs[k]->index];
    for (size_t k = 0; any && k < n->n_outputs; k++)
      if (n->outputs[k]) from_x[n->outputs[k]->index] = true;
  }
  to_y[y->index] = true;
  for (size_t i = g->n_nodes; i-- > 0;) {
    const OxNode* n = g->nodes[i];
    bool any = false;
    for (size_t k = 0; k < n->n_outputs; k++)
      any |= n->outputs[k] && to_y[n->outputs[k]->index];
    for (size_t k = 0; any && n != gn && k < n->n_inputs; k++)
      if (n->inputs[k]) to_y[n->inputs[k]->index] = true;
  }
}

static OnyxStatus* ox_grad_backward(OxGradBuilder* b, const OxNode* gn, const bool* from_x,
                                    const bool* to_y, const OxValue* y) {
  OxGraph* g = b->g;
  /* dy/dy: ones of y's shape and type. */
  OxTensor* one = NULL;
  OX_TRY(ox_tensor_new(y->type, (const int64_t[]){1}, 1, &one));
  double d1 = 1.0;
  switch (y->type) {
  case ONYX_ELEM_FLOAT32:
    *(float*)one->data = 1.0f;
    break;
  case ONYX_ELEM_FLOAT64:
    memcpy(one->data, &d1, sizeof d1);
    break;
  default:
    ox_tensor_free(one);
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "node '%s' (Gradient): y '%s' is %s (float32 or "
                     "float64 only)",
                     gn->name, y->name, ox_elem_name(y->type));
  }
  const char *shape, *seed;
  const char* sin[1] = {y->name};
  OnyxStatus* st = ox_grad_node(b, "Shape", sin, 1, &shape);
  const char* cin[1] = {shape};
  if (!st) st = ox_grad_node(b, "ConstantOfShape", cin, 1, &seed);
  OxAttr a = {.name = ox_strdup("value"), .type = ONYX_ATTR_TENSOR, .t = one};
  if (!st && !a.name) st = ox_oom();
  if (!st) st = ox_node_add_attr(b->last, &a);
  ox_attr_clear(&a); /* frees `one` unless the node took it */
  if (!st) st = ox_grad_add(b, y, seed);
  size_t n_nodes = g->n_nodes; /* the forward nodes: new ones are appended */
  OxNode** fwd = malloc((n_nodes + 1) * sizeof *fwd);
  if (!st && !fwd) st = ox_oom();
  if (fwd && n_nodes) memcpy(fwd, g->nodes, n_nodes * sizeof *fwd);
  for (size_t i = n_nodes; !st && i-- > 0;) {
    const OxNode* n = fwd[i];
    if (n == gn || !n->n_outputs || !n->outputs[0]) continue;
    const OxValue* out = n->outputs[0];
    if (out->index >= b->n_fwd || !from_x[out->index] || !to_y[out->index]) continue;
    const char* dy;
    st = ox_grad_total(b, out, &dy);
    if (st || !dy) continue;
    OxGradRule rule = ox_grad_rule(n->domain, n->op_type);
    if (!rule) {
      st = ox_status(ONYX_NOT_IMPLEMENTED,
                     "node '%s' (Gradient): no gradient rule for node '%s' (%s) on the path to "
                     "'%s'",
                     gn->name, n->name, n->op_type, y->name);
      break;
    }
    st = rule(b, n, dy);
    if (st) st = ox_status_wrap(st, "node '%s' (Gradient)", gn->name);
  }
  free(fwd);
  return st;
}

static OnyxStatus* ox_grad_one(OxGraph* g, OxNode* gn) {
  size_t n_xs = 0;
  const OxAttr* xs = ox_node_attr(gn, "xs");
  const char* yname = ox_node_attr_string(gn, "y", NULL);
  if (!xs || xs->type != ONYX_ATTR_STRINGS || !yname)
    return ox_status(ONYX_INVALID_MODEL, "node '%s' (Gradient) needs the attributes xs and y",
                     gn->name);
  n_xs = xs->count;
  if (gn->n_outputs != n_xs)
    return ox_status(ONYX_INVALID_MODEL, "node '%s' (Gradient) has %zu outputs for %zu xs",
                     gn->name, gn->n_outputs, n_xs);
  OxValue* y = ox_graph_find(g, yname);
  if (!y || y->type == ONYX_ELEM_UNDEFINED)
    return ox_status(ONYX_INVALID_MODEL, "node '%s' (Gradient): y '%s' is not a typed value",
                     gn->name, yname);
  char* prefix = ox_strdup(gn->name);
  OxGradBuilder b = {.g = g, .prefix = prefix, .n_fwd = g->n_values};
  b.contribs = calloc(b.n_fwd + 1, sizeof *b.contribs);
  bool* from_x = calloc(b.n_fwd + 1, sizeof *from_x);
  bool* to_y = calloc(b.n_fwd + 1, sizeof *to_y);
  char** outs = calloc(n_xs + 1, sizeof *outs);
  OxValue** xv = calloc(n_xs + 1, sizeof *xv);
  OnyxStatus* st = (!prefix || !b.contribs || !from_x || !to_y || !outs || !xv) ? ox_oom() : NULL;
  for (size_t i = 0; !st && i < n_xs; i++) {
    xv[i] = ox_graph_find(g, xs->strings[i]);
    if (!xv[i])
      st = ox_status(ONYX_INVALID_MODEL, "node '%s' (Gradient): x '%s' is not a value of the graph",
                     gn->name, xs->strings[i]);
    else
      from_x[xv[i]->index] = true;
    if (!st && gn->outputs[i] && !(outs[i] = ox_strdup(gn->outputs[i]->name))) st = ox_oom();
  }
  if (!st) ox_grad_reach(g, gn, from_x, to_y, y);
  if (!st) st = ox_grad_backward(&b, gn, from_x, to_y, y);
  if (!st) ox_graph_remove_node(g, gn); /* frees its outputs for the results */
  for (size_t i = 0; !st && i < n_xs; i++) {
    if (!outs[i]) continue;
    const char* total = NULL;
    st = ox_grad_total(&b, xv[i], &total);
    if (!st && !total) { /* y does not depend on x: zeros */
      const char* ins[] = {xv[i]->name, xv[i]->name};
      st = ox_grad_node(&b, "Sub", ins, 2, &total);
    }
    const char* ins[] = {total};
    const char* res[] = {outs[i]};
    if (!st) st = ox_graph_add_node(g, NULL, "Identity", "", ins, 1, res, 1, NULL);
  }
  for (size_t i = 0; b.contribs && i < b.n_fwd; i++) {
    for (size_t k = 0; k < b.contribs[i].n; k++)
      free(b.contribs[i].names[k]);
    free(b.contribs[i].names);
  }
  for (size_t i = 0; outs && i < n_xs; i++)
    free(outs[i]);
  free(outs);
  free(xv);
  free(b.contribs);
  free(from_x);
  free(to_y);
  free(prefix);
  return st;
}

static bool ox_is_gradient(const OxNode* n) {
  return !strcmp(n->domain, "ai.onnx.preview.training") && !strcmp(n->op_type, "Gradient");
}

OnyxStatus* ox_gradient_expand(OxGraph* g, bool* changed) {
  *changed = false;
  for (;;) {
    OxNode* gn = NULL;
    for (size_t i = 0; i < g->n_nodes && !gn; i++)
      if (ox_is_gradient(g->nodes[i])) gn = g->nodes[i];
    if (!gn) return NULL;
    OX_TRY(ox_grad_one(g, gn));
    *changed = true;
  }
}
