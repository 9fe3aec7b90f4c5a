/* gradient.c — ai.onnx.preview.training Gradient: reverse-mode
 * differentiation of the forward graph into ordinary nodes.
 *
 * For a Gradient node with xs = [x1..xn] and y: a forward value takes part
 * when it is floating point, depends on some xi through floating-point
 * values only (integer and bool values, and values not depending on any
 * xi, stop the gradient), and y depends on it. The forward nodes that write
 * such values are visited in reverse topological order; dy/dy is ones
 * (ConstantOfShape of Shape(y)); the contributions to each output of a node
 * are summed (Sum, at fan-out), and the node's rule (the registry of
 * gradient_rules*.c, by domain, op and schema version) turns them into
 * contributions to its inputs. The Gradient node is then replaced: output i
 * is Identity(dy/dxi), or zeros when y does not depend on xi. */
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
  const char** totals;  /* per forward value: its summed gradient, once known */
  const OxNode** via;   /* per forward value: the node whose rule first fed it */
  bool* from_x;         /* per forward value: depends on an x (floating point) */
  bool* to_y;           /* per forward value: y depends on it */
  const OxNode* cur;    /* the node whose rule runs */
  OxNode* last;         /* the node added last */
  OnyxStatus* err;      /* the first error of a helper */
};

/* --- errors and names ------------------------------------------------------------------ */

OnyxStatus* ox_grad_err(OxGradBuilder* b) {
  OnyxStatus* st = b->err;
  b->err = NULL;
  return st;
}

void ox_grad_fail(OxGradBuilder* b, OnyxStatus* st) {
  if (!st) return;
  if (b->err)
    ox_status_free(st);
  else
    b->err = st;
}

static char* ox_grad_name(OxGradBuilder* b) {
  char* s = NULL;
  for (;;) { /* skip names the model already uses */
    free(s);
    s = ox_asprintf("%s/grad_%zu", b->prefix, b->counter++);
    if (!s || !ox_graph_find(b->g, s)) return s;
  }
}

const char* ox_grad_I(const OxNode* n, size_t i) {
  return i < n->n_inputs && n->inputs[i] ? n->inputs[i]->name : NULL;
}

const char* ox_grad_O(const OxNode* n, size_t i) {
  return i < n->n_outputs && n->outputs[i] ? n->outputs[i]->name : NULL;
}

static bool ox_is_float(OnyxElemType t) {
  return t == ONYX_ELEM_FLOAT32 || t == ONYX_ELEM_FLOAT64 || t == ONYX_ELEM_FLOAT16 ||
         t == ONYX_ELEM_BFLOAT16;
}

const char* ox_grad_GO(const OxGradBuilder* b, const OxNode* n, size_t i) {
  if (i >= n->n_outputs || !n->outputs[i] || n->outputs[i]->index >= b->n_fwd) return NULL;
  return b->totals[n->outputs[i]->index];
}

static bool ox_grad_value_wants(const OxGradBuilder* b, const OxValue* v) {
  return v && v->index < b->n_fwd && b->from_x[v->index] && b->to_y[v->index] &&
         ox_is_float(v->type);
}

bool ox_grad_wants(const OxGradBuilder* b, const OxNode* n, size_t i) {
  return i < n->n_inputs && ox_grad_value_wants(b, n->inputs[i]);
}

int64_t ox_grad_opset(const OxGradBuilder* b) {
  return ox_graph_opset(b->g, "");
}

/* --- nodes, attributes, constants ------------------------------------------------------ */

/* Imports `domain` into the model (the root graph holds the imports of
 * every subgraph: a rule running inside a branch or body imports there). */
static OnyxStatus* ox_grad_import(OxGraph* g, const char* domain) {
  if (!*domain || ox_graph_opset(g, domain) >= 0) return NULL;
  while (g->parent)
    g = g->parent;
  size_t cap = g->n_opsets;
  if (!ox_grow((void**)&g->opsets, &cap, g->n_opsets + 1, sizeof *g->opsets)) return ox_oom();
  char* d = ox_strdup(domain);
  if (!d) return ox_oom();
  g->opsets[g->n_opsets++] = (OxOpsetImport){.domain = d, .version = 1};
  return NULL;
}

const char* ox_grad_op(OxGradBuilder* b, const char* op, const char* domain, const char* const* ins,
                       size_t n_in, size_t n_out, const bool* want, const char** outs) {
  if (b->err) return "";
  char* names[64] = {0};
  const char* onames[64] = {0};
  OnyxStatus* st = n_out > 64 || !n_out
                       ? ox_status(ONYX_FAIL, "gradient node of %zu outputs", n_out)
                       : ox_grad_import(b->g, domain);
  for (size_t k = 0; !st && k < n_out; k++) {
    if (want && !want[k]) continue;
    if (!(names[k] = ox_grad_name(b))) st = ox_oom();
    onames[k] = names[k];
  }
  OxNode* n = NULL;
  if (!st) {
    char* nm = ox_grad_name(b);
    st = nm ? ox_graph_add_node(b->g, nm, op, domain, ins, n_in, onames, n_out, &n) : ox_oom();
    free(nm);
  }
  for (size_t k = 0; k < n_out && k < 64; k++)
    free(names[k]);
  if (st) {
    ox_grad_fail(b, st);
    return "";
  }
  b->last = n;
  for (size_t k = 0; outs && k < n_out; k++)
    outs[k] = n->outputs[k] ? n->outputs[k]->name : NULL;
  return n->outputs[0] ? n->outputs[0]->name : "";
}

const char* ox_grad_op1(OxGradBuilder* b, const char* op, const char* a) {
  const char* ins[] = {a};
  return ox_grad_op(b, op, "", ins, 1, 1, NULL, NULL);
}

const char* ox_grad_op2(OxGradBuilder* b, const char* op, const char* a, const char* c) {
  const char* ins[] = {a, c};
  return ox_grad_op(b, op, "", ins, 2, 1, NULL, NULL);
}

const char* ox_grad_op3(OxGradBuilder* b, const char* op, const char* a, const char* c,
                        const char* d) {
  const char* ins[] = {a, c, d};
  return ox_grad_op(b, op, "", ins, 3, 1, NULL, NULL);
}

static void ox_grad_attr(OxGradBuilder* b, OxAttr* a, bool ok) {
  if (!b->err && (!ok || !a->name)) ox_grad_fail(b, ox_oom());
  if (!b->err) ox_grad_fail(b, ox_node_add_attr(b->last, a));
  ox_attr_clear(a);
}

void ox_grad_attr_int(OxGradBuilder* b, const char* name, int64_t v) {
  if (b->err) return;
  OxAttr a = {.name = ox_strdup(name), .type = ONYX_ATTR_INT, .i = v};
  ox_grad_attr(b, &a, true);
}

void ox_grad_attr_float(OxGradBuilder* b, const char* name, float v) {
  if (b->err) return;
  OxAttr a = {.name = ox_strdup(name), .type = ONYX_ATTR_FLOAT, .f = v};
  ox_grad_attr(b, &a, true);
}

void ox_grad_attr_string(OxGradBuilder* b, const char* name, const char* v) {
  if (b->err) return;
  OxAttr a = {.name = ox_strdup(name), .type = ONYX_ATTR_STRING, .s = ox_strdup(v)};
  a.s_len = a.s ? strlen(a.s) : 0;
  ox_grad_attr(b, &a, a.s != NULL);
}

void ox_grad_attr_ints(OxGradBuilder* b, const char* name, const int64_t* v, size_t n) {
  if (b->err) return;
  OxAttr a = {.name = ox_strdup(name), .type = ONYX_ATTR_INTS, .count = n};
  a.ints = malloc((n ? n : 1) * sizeof *a.ints);
  if (a.ints && n) memcpy(a.ints, v, n * sizeof *v);
  ox_grad_attr(b, &a, a.ints != NULL);
}

void ox_grad_attr_copy(OxGradBuilder* b, const OxNode* n, const char* name) {
  if (b->err) return;
  const OxAttr* s = ox_node_attr(n, name);
  if (!s) return;
  switch (s->type) {
  case ONYX_ATTR_INT:
    ox_grad_attr_int(b, name, s->i);
    break;
  case ONYX_ATTR_FLOAT:
    ox_grad_attr_float(b, name, s->f);
    break;
  case ONYX_ATTR_STRING:
    ox_grad_attr_string(b, name, s->s ? s->s : "");
    break;
  case ONYX_ATTR_INTS:
    ox_grad_attr_ints(b, name, s->ints, s->count);
    break;
  case ONYX_ATTR_FLOATS: {
    OxAttr a = {.name = ox_strdup(name), .type = ONYX_ATTR_FLOATS, .count = s->count};
    a.floats = malloc((s->count ? s->count : 1) * sizeof *a.floats);
    if (a.floats && s->count) memcpy(a.floats, s->floats, s->count * sizeof *a.floats);
    ox_grad_attr(b, &a, a.floats != NULL);
    break;
  }
  default:
    ox_grad_fail(b, ox_status(ONYX_NOT_IMPLEMENTED,
                              "the gradient of node '%s' (%s) cannot copy its attribute '%s'",
                              n->name, n->op_type, name));
  }
}

void ox_grad_attrs_copy(OxGradBuilder* b, const OxNode* n, const char* skip) {
  for (size_t k = 0; k < n->n_attrs && !b->err; k++)
    if (!skip || strcmp(n->attrs[k].name, skip)) ox_grad_attr_copy(b, n, n->attrs[k].name);
}

static const char* ox_grad_const(OxGradBuilder* b, OxTensor* t) {
  if (b->err) {
    ox_tensor_free(t);
    return "";
  }
  char* name = ox_grad_name(b);
  OxValue* val = NULL;
  OnyxStatus* st = name ? ox_graph_value(b->g, name, &val) : ox_oom();
  free(name);
  if (!st) st = ox_value_set(val, t->type, (int32_t)t->rank, t->dims);
  if (st) {
    ox_tensor_free(t);
    ox_grad_fail(b, st);
    return "";
  }
  val->constant = t;
  return val->name;
}

const char* ox_grad_i64(OxGradBuilder* b, const int64_t* v, size_t n) {
  if (b->err) return "";
  OxTensor* t = NULL;
  int64_t dims[1] = {(int64_t)n};
  OnyxStatus* st = ox_tensor_new(ONYX_ELEM_INT64, dims, 1, &t);
  if (st) {
    ox_grad_fail(b, st);
    return "";
  }
  if (n) memcpy(t->data, v, n * sizeof *v);
  return ox_grad_const(b, t);
}

const char* ox_grad_scalar(OxGradBuilder* b, OnyxElemType type, double v) {
  if (b->err) return "";
  OnyxElemType direct = type == ONYX_ELEM_FLOAT64 || type == ONYX_ELEM_INT64 ||
                                type == ONYX_ELEM_INT32 || type == ONYX_ELEM_FLOAT32
                            ? type
                            : ONYX_ELEM_FLOAT32;
  OxTensor* t = NULL;
  OnyxStatus* st = ox_tensor_new(direct, NULL, 0, &t);
  if (st) {
    ox_grad_fail(b, st);
    return "";
  }
  if (direct == ONYX_ELEM_FLOAT64)
    memcpy(t->data, &v, sizeof v);
  else if (direct == ONYX_ELEM_INT64)
    *(int64_t*)t->data = (int64_t)v;
  else if (direct == ONYX_ELEM_INT32)
    *(int32_t*)t->data = (int32_t)v;
  else
    *(float*)t->data = (float)v;
  const char* c = ox_grad_const(b, t);
  return direct == type ? c : ox_grad_cast(b, c, type);
}

const char* ox_grad_cast(OxGradBuilder* b, const char* x, OnyxElemType to) {
  const char* r = ox_grad_op1(b, "Cast", x);
  ox_grad_attr_int(b, "to", (int64_t)to);
  return r;
}

const char* ox_grad_zeros_like(OxGradBuilder* b, const char* x, OnyxElemType type) {
  if (ox_grad_opset(b) < 8) /* no Expand: x * 0 */
    return ox_grad_op2(b, "Mul", x, ox_grad_scalar(b, type, 0.0));
  const char* shape = ox_grad_op1(b, "Shape", x);
  const char* z = ox_grad_scalar(b, type, 0.0);
  return ox_grad_op2(b, "Expand", z, shape);
}

const char* ox_grad_expand_like(OxGradBuilder* b, const char* g, const char* x, OnyxElemType type) {
  if (ox_grad_opset(b) < 8) return ox_grad_op2(b, "Add", ox_grad_zeros_like(b, x, type), g);
  return ox_grad_op2(b, "Expand", g, ox_grad_op1(b, "Shape", x));
}

/* ReduceSum, Unsqueeze, Squeeze: axes as an attribute before opset 13, as an
 * input from 13. */
static const char* ox_grad_axes_op(OxGradBuilder* b, const char* op, const char* x,
                                   const int64_t* axes, size_t n) {
  bool as_input = !strncmp(op, "Reduce", 6) && strcmp(op, "ReduceSum") ? ox_grad_opset(b) >= 18
                                                                       : ox_grad_opset(b) >= 13;
  if (as_input) return ox_grad_op2(b, op, x, ox_grad_i64(b, axes, n));
  const char* r = ox_grad_op1(b, op, x);
  ox_grad_attr_ints(b, "axes", axes, n);
  return r;
}

const char* ox_grad_reduce(OxGradBuilder* b, const char* op, const char* x, const int64_t* axes,
                           size_t n, bool keepdims) {
  const char* r = ox_grad_axes_op(b, op, x, axes, n);
  ox_grad_attr_int(b, "keepdims", keepdims);
  return r;
}

const char* ox_grad_reduce_sum(OxGradBuilder* b, const char* x, const int64_t* axes, size_t n,
                               bool keepdims) {
  return ox_grad_reduce(b, "ReduceSum", x, axes, n, keepdims);
}

const char* ox_grad_unsqueeze(OxGradBuilder* b, const char* x, const int64_t* axes, size_t n) {
  return ox_grad_axes_op(b, "Unsqueeze", x, axes, n);
}

const char* ox_grad_squeeze(OxGradBuilder* b, const char* x, const int64_t* axes, size_t n) {
  return ox_grad_axes_op(b, "Squeeze", x, axes, n);
}

/* --- broadcasting ---------------------------------------------------------------------- */

/* g summed down to the shape of t with nothing known about either shape
 * before run time: t's shape padded with leading 1s to g's rank, its axes
 * of 1 summed (ReduceSum with run-time axes, opset 13 on; opsets 11 and 12
 * scatter-add g by t's positions instead). */
static const char* ox_grad_reduce_dynamic(OxGradBuilder* b, const char* g, const OxValue* t) {
  if (ox_grad_opset(b) < 11) {
    ox_grad_fail(b, ox_status(ONYX_NOT_IMPLEMENTED,
                              "undoing the broadcast into '%s' with shapes known only at run "
                              "time needs opset 11 or later",
                              t->name));
    return "";
  }
  if (ox_grad_opset(b) < 13) {
    /* No ReduceSum with run-time axes: t's flat positions broadcast to g's
     * shape say where each element of g came from; GatherGrad adds g back
     * there. */
    const int64_t one[1] = {1}, flat[1] = {-1};
    const char* size = ox_grad_op1(b, "Size", t->name);
    const char* range = ox_grad_op3(b, "Range", ox_grad_scalar(b, ONYX_ELEM_INT64, 0), size,
                                    ox_grad_scalar(b, ONYX_ELEM_INT64, 1));
    const char* pos = ox_grad_op2(b, "Reshape", range, ox_grad_op1(b, "Shape", t->name));
    const char* from = ox_grad_op2(b, "Expand", pos, ox_grad_op1(b, "Shape", g));
    const char* ins[] = {ox_grad_op2(b, "Reshape", size, ox_grad_i64(b, one, 1)),
                         ox_grad_op2(b, "Reshape", from, ox_grad_i64(b, flat, 1)),
                         ox_grad_op2(b, "Reshape", g, ox_grad_i64(b, flat, 1))};
    const char* sum = ox_grad_op(b, "GatherGrad", OX_TRAINING_DOMAIN, ins, 3, 1, NULL, NULL);
    ox_grad_attr_int(b, "axis", 0);
    return ox_grad_op2(b, "Reshape", sum, ox_grad_op1(b, "Shape", t->name));
  }
  const int64_t one[1] = {1}, flat[1] = {-1};
  const char* shape = ox_grad_op1(b, "Shape", t->name);
  const char* lead = ox_grad_op2(b, "Sub", ox_grad_op1(b, "Size", ox_grad_op1(b, "Shape", g)),
                                 ox_grad_op1(b, "Size", shape));
  const char* ones = ox_grad_op2(b, "Expand", ox_grad_scalar(b, ONYX_ELEM_INT64, 1),
                                 ox_grad_op2(b, "Reshape", lead, ox_grad_i64(b, one, 1)));
  const char* padded = ox_grad_op2(b, "Concat", ones, shape);
  ox_grad_attr_int(b, "axis", 0);
  const char* mask = ox_grad_op2(b, "Equal", padded, ox_grad_scalar(b, ONYX_ELEM_INT64, 1));
  const char* nz = ox_grad_op1(b, "NonZero", mask);
  const char* ax = ox_grad_op2(b, "Reshape", nz, ox_grad_i64(b, flat, 1));
  const char* s = ox_grad_op2(b, "ReduceSum", g, ax);
  ox_grad_attr_int(b, "keepdims", 1);
  ox_grad_attr_int(b, "noop_with_empty_axes", 1);
  return ox_grad_op2(b, "Reshape", s, shape);
}

/* g (shaped dims[0..rank)) summed down to the shape of t. */
static const char* ox_grad_reduce_to(OxGradBuilder* b, const char* g, const int64_t* dims,
                                     int32_t rank, const OxValue* t) {
  if (b->err) return "";
  bool same = rank >= 0 && rank == t->rank;
  for (int32_t i = 0; same && i < rank; i++)
    same = dims[i] == t->dims[i] && dims[i] >= 0;
  if (same) return g;
  if (rank < 0 || t->rank < 0 || rank > 64) return ox_grad_reduce_dynamic(b, g, t);
  if (t->rank > rank) {
    ox_grad_fail(b, ox_status(ONYX_INVALID_MODEL,
                              "the gradient of rank %d cannot flow into '%s' of rank %d", (int)rank,
                              t->name, (int)t->rank));
    return "";
  }
  int32_t lead = rank - t->rank;
  int64_t axes[64];
  size_t n_axes = 0;
  bool dynamic = false, t_static = true;
  for (int32_t i = 0; i < rank; i++) {
    if (i < lead) {
      axes[n_axes++] = i;
      continue;
    }
    int64_t td = t->dims[i - lead], yd = dims[i];
    t_static &= td >= 0;
    if (td == 1 && yd != 1)
      axes[n_axes++] = i;
    else if (td < 0 && yd != 1)
      dynamic = true; /* td is 1 or yd: known at run time only */
  }
  int64_t count = 1;
  for (int32_t i = 0; t_static && i < t->rank; i++)
    count = count <= INT64_MAX / (t->dims[i] > 0 ? t->dims[i] : 1) ? count * t->dims[i] : -1;
  if (!dynamic && t_static && lead > 0 && n_axes == (size_t)lead && count > 0 &&
      (t->type == ONYX_ELEM_FLOAT32 || t->type == ONYX_ELEM_FLOAT64) && ox_grad_opset(b) >= 13) {
    /* A sum over the leading axes only (a bias broadcast over [N, T, C]):
     * g as rows [-1, C], summed by a product with a row of ones, one pass
     * over g in the GEMM rather than a reduction over non-trailing axes */
    const int64_t two[2] = {-1, count}, one[1] = {1}, zero[1] = {0};
    const char* g2 = ox_grad_op2(b, "Reshape", g, ox_grad_i64(b, two, 2));
    const char* rows = ox_grad_op3(b, "Slice", ox_grad_op1(b, "Shape", g2), ox_grad_i64(b, zero, 1),
                                   ox_grad_i64(b, one, 1));
    const char* cat = ox_grad_op2(b, "Concat", ox_grad_i64(b, one, 1), rows);
    ox_grad_attr_int(b, "axis", 0);
    const char* ones = ox_grad_op2(b, "Expand", ox_grad_scalar(b, t->type, 1), cat);
    const char* s = ox_grad_op2(b, "MatMul", ones, g2);
    return ox_grad_op2(b, "Reshape", s, ox_grad_i64(b, t->dims, (size_t)t->rank));
  }
  if (!dynamic) {
    const char* shape =
        t_static ? ox_grad_i64(b, t->dims, (size_t)t->rank) : ox_grad_op1(b, "Shape", t->name);
    const char* s = n_axes ? ox_grad_reduce_sum(b, g, axes, n_axes, true) : g;
    return ox_grad_op2(b, "Reshape", s, shape);
  }
  /* An axis where t's dim is 1 or g's, known at run time only. */
  return ox_grad_reduce_dynamic(b, g, t);
}

static void ox_grad_add(OxGradBuilder* b, const OxValue* v, const char* grad) {
  if (b->err || !ox_grad_value_wants(b, v)) return;
  OxContribs* c = &b->contribs[v->index];
  char* copy = ox_strdup(grad);
  if (!copy || !ox_grow((void**)&c->names, &c->cap, c->n + 1, sizeof *c->names)) {
    free(copy);
    ox_grad_fail(b, ox_oom());
    return;
  }
  c->names[c->n++] = copy;
  if (!b->via[v->index]) b->via[v->index] = b->cur;
}

void ox_grad_GI(OxGradBuilder* b, const OxNode* n, size_t i, const char* g) {
  if (ox_grad_wants(b, n, i)) ox_grad_add(b, n->inputs[i], g);
}

void ox_grad_GI_from(OxGradBuilder* b, const OxNode* n, size_t i, const char* g,
                     const int64_t* dims, int32_t rank) {
  if (!ox_grad_wants(b, n, i)) return;
  ox_grad_add(b, n->inputs[i], ox_grad_reduce_to(b, g, dims, rank, n->inputs[i]));
}

void ox_grad_GI_bcast(OxGradBuilder* b, const OxNode* n, size_t i, const char* g) {
  const OxValue* y = n->outputs[0];
  ox_grad_GI_from(b, n, i, g, y->dims, y->rank);
}

/* --- control flow ---------------------------------------------------------------------- */

/* A name new to the builder's graph and to subgraph sub. */
static char* ox_grad_sub_name(OxGradBuilder* b, const OxGraph* sub) {
  for (;;) {
    char* s = ox_grad_name(b);
    if (!s || !ox_graph_find(sub, s)) return s;
    free(s);
  }
}

/* Value `name` of the enclosing graph, read by subgraph sub: its outer-scope
 * value there (created, typed when sub is resolved). A value of sub's own
 * of that name would hide it: an error. */
static OnyxStatus* ox_grad_sub_outer(const OxNode* n, OxGraph* sub, const char* name) {
  OxValue* v = ox_graph_find(sub, name);
  if (v && (!v->is_outer_scope || v->producer || v->is_graph_input))
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "node '%s' (%s): a branch defines '%s', which hides the enclosing graph's "
                     "value of that name",
                     n->name, n->op_type, name);
  if (v) return NULL;
  OX_TRY(ox_graph_value(sub, name, &v));
  v->is_outer_scope = true;
  return NULL;
}

/* A node of subgraph sub writing one new value, whose name goes to *out. */
static OnyxStatus* ox_grad_sub_node(OxGradBuilder* b, OxGraph* sub, const char* op,
                                    const char* const* ins, size_t n_in, const char** out,
                                    OxNode** node) {
  char* o = ox_grad_sub_name(b, sub);
  char* nm = o ? ox_grad_sub_name(b, sub) : NULL;
  const char* outs[] = {o};
  OnyxStatus* st = nm ? ox_graph_add_node(sub, nm, op, "", ins, n_in, outs, 1, node) : ox_oom();
  free(o);
  free(nm);
  if (!st) *out = (*node)->outputs[0]->name;
  return st;
}

/* The values sub reads from the enclosing graphs get their types and shapes
 * there (the rules in the branch need ranks: MatMul's, broadcasting), and
 * each output gradient dY_k those of the node's output k. Resolving a
 * branch types its outer reads only by element type otherwise. */
static OnyxStatus* ox_grad_sub_shapes(OxGradBuilder* b, const OxNode* n, OxGraph* sub) {
  for (size_t i = 0; i < sub->n_values; i++) {
    OxValue* v = sub->values[i];
    if (!v->is_outer_scope || v->producer || v->constant || v->is_graph_input) continue;
    const OxValue* o = NULL;
    for (const OxGraph* up = b->g; up && !o; up = up->parent)
      o = ox_graph_find(up, v->name);
    for (size_t k = 0; o && o->type == ONYX_ELEM_UNDEFINED && k < n->n_outputs; k++) {
      const char* dy = ox_grad_GO(b, n, k);
      if (dy && !strcmp(dy, v->name) && n->outputs[k]) o = n->outputs[k];
    }
    if (!o || o->type == ONYX_ELEM_UNDEFINED || o->kind != OX_VK_TENSOR) continue;
    OX_TRY(ox_value_set(v, o->type, o->rank, o->dims));
    v->kind = o->kind;
  }
  return NULL;
}

/* A Gradient node in subgraph sub: dy/dxs for y = `loss`, written to gouts. */
static OnyxStatus* ox_grad_sub_gradient(OxGradBuilder* b, OxGraph* sub, const char* const* xs,
                                        size_t n_xs, const char* const* gouts, const char* loss,
                                        OxNode** out) {
  char* gname = ox_grad_sub_name(b, sub);
  if (!gname) return ox_oom();
  OxNode* nd = NULL;
  OnyxStatus* st = ox_graph_add_node(sub, gname, "Gradient", "ai.onnx.preview.training", xs, n_xs,
                                     gouts, n_xs, &nd);
  free(gname);
  if (!st) {
    OxAttr a = {.name = ox_strdup("xs"), .type = ONYX_ATTR_STRINGS, .count = n_xs};
    a.strings = calloc(n_xs + 1, sizeof *a.strings);
    a.strings_len = calloc(n_xs + 1, sizeof *a.strings_len);
    st = a.name && a.strings && a.strings_len ? NULL : ox_oom();
    for (size_t j = 0; !st && j < n_xs; j++) {
      a.strings_len[j] = strlen(xs[j]);
      if (!(a.strings[j] = ox_strdup(xs[j]))) st = ox_oom();
    }
    if (!st) st = ox_node_add_attr(nd, &a);
    ox_attr_clear(&a);
  }
  if (!st) {
    OxAttr a = {.name = ox_strdup("y"), .type = ONYX_ATTR_STRING, .s = ox_strdup(loss)};
    a.s_len = a.s ? strlen(a.s) : 0;
    st = a.name && a.s ? ox_node_add_attr(nd, &a) : ox_oom();
    ox_attr_clear(&a);
  }
  if (!st) *out = nd;
  return st;
}

/* Takes sub's formal inputs and outputs off it (the caller frees the two
 * arrays): the values stay in the graph as plain values, so that the
 * caller can declare the gradient body's own inputs and outputs. */
static void ox_grad_sub_detach_io(OxGraph* sub, OxValue*** in, OxValue*** out) {
  *in = sub->inputs;
  *out = sub->outputs;
  for (size_t i = 0; i < sub->n_inputs; i++)
    (*in)[i]->is_graph_input = false;
  for (size_t i = 0; i < sub->n_outputs; i++)
    (*out)[i]->is_graph_output = false;
  sub->inputs = NULL;
  sub->outputs = NULL;
  sub->n_inputs = sub->cap_inputs = sub->n_outputs = sub->cap_outputs = 0;
}

/* In subgraph sub: ReduceSum(y * dy) (keepdims 0), the term of a
 * subgraph's scalar loss whose gradient with respect to y is dy; its name
 * in *term. */
static OnyxStatus* ox_grad_sub_dot(OxGradBuilder* b, OxGraph* sub, const char* y, const char* dy,
                                   const char** term) {
  const char* ins[] = {y, dy};
  const char* prod = NULL;
  OxNode* nd = NULL;
  OX_TRY(ox_grad_sub_node(b, sub, "Mul", ins, 2, &prod, &nd));
  OX_TRY(ox_grad_sub_node(b, sub, "ReduceSum", &prod, 1, term, &nd));
  OxAttr keep = {.name = ox_strdup("keepdims"), .type = ONYX_ATTR_INT, .i = 0};
  OnyxStatus* st = keep.name ? ox_node_add_attr(nd, &keep) : ox_oom();
  ox_attr_clear(&keep);
  return st;
}

/* The gradient branch for branch src of If node n: src's nodes, then
 * L = sum_k ReduceSum(Y_k * dY_k) over the outputs with a gradient, and a
 * Gradient node of L with respect to xs (values of the enclosing graph),
 * whose outputs are the branch's outputs. The Gradient node is expanded when
 * the branch is resolved; an x the branch does not read gets zeros of its
 * shape, so both branches give each x's type and shape. */
static OnyxStatus* ox_grad_if_branch(OxGradBuilder* b, const OxNode* n, const OxGraph* src,
                                     const char* const* xs, size_t n_xs, OxGraph** out) {
  OxGraph* sub = NULL;
  OX_TRY(ox_graph_clone(src, b->g, &sub));
  OnyxStatus* st = NULL;
  const char** terms = calloc(n->n_outputs + 1, sizeof *terms);
  char** gouts = calloc(n_xs + 1, sizeof *gouts);
  if (!terms || !gouts) st = ox_oom();
  size_t n_terms = 0;
  for (size_t k = 0; k < sub->n_outputs; k++)
    sub->outputs[k]->is_graph_output = false;
  for (size_t k = 0; !st && k < n->n_outputs && k < sub->n_outputs; k++) {
    const char* dy = ox_grad_GO(b, n, k);
    if (!dy) continue;
    st = ox_grad_sub_outer(n, sub, dy);
    if (!st) st = ox_grad_sub_dot(b, sub, sub->outputs[k]->name, dy, &terms[n_terms]);
    n_terms += !st;
  }
  sub->n_outputs = 0;
  const char* loss = n_terms ? terms[0] : NULL;
  OxNode* nd = NULL;
  if (!st && n_terms > 1) st = ox_grad_sub_node(b, sub, "Sum", terms, n_terms, &loss, &nd);
  if (!st && !loss)
    st = ox_status(ONYX_FAIL, "node '%s' (If): no output gradient reaches a branch", n->name);
  for (size_t j = 0; !st && j < n_xs; j++) {
    st = ox_grad_sub_outer(n, sub, xs[j]);
    if (!st && !(gouts[j] = ox_grad_sub_name(b, sub))) st = ox_oom();
  }
  if (!st) st = ox_grad_sub_gradient(b, sub, xs, n_xs, (const char* const*)gouts, loss, &nd);
  for (size_t j = 0; !st && j < n_xs; j++)
    st = ox_graph_add_output(sub, nd->outputs[j]);
  for (size_t j = 0; gouts && j < n_xs; j++)
    free(gouts[j]);
  free(gouts);
  free(terms);
  if (!st) st = ox_grad_sub_shapes(b, n, sub);
  if (st) {
    ox_graph_free(sub);
    return st;
  }
  *out = sub;
  return NULL;
}

/* If: dX for every value of the enclosing graph that the branches read (the
 * node's implicit inputs) is an If on the same condition whose branches
 * differentiate the original branches (ox_grad_if_branch). The condition
 * is bool: no gradient. */
static OnyxStatus* ox_grad_rule_if(OxGradBuilder* b, const OxNode* n) {
  const OxAttr* br[2] = {ox_node_attr(n, "then_branch"), ox_node_attr(n, "else_branch")};
  for (int k = 0; k < 2; k++)
    if (!br[k] || br[k]->type != ONYX_ATTR_GRAPH || !br[k]->g)
      return ox_status(ONYX_INVALID_MODEL, "node '%s' (If) has no %s graph", n->name,
                       k ? "else_branch" : "then_branch");
  size_t first = n->n_inputs - n->n_implicit, n_xs = 0;
  const char** xs = calloc(n->n_implicit + 1, sizeof *xs);
  size_t* at = calloc(n->n_implicit + 1, sizeof *at);
  const char** outs = calloc(n->n_implicit + 1, sizeof *outs);
  OnyxStatus* st = xs && at && outs ? NULL : ox_oom();
  for (size_t k = first; !st && k < n->n_inputs; k++)
    if (ox_grad_wants(b, n, k)) {
      at[n_xs] = k;
      xs[n_xs++] = n->inputs[k]->name;
    }
  OxGraph* sub[2] = {NULL, NULL};
  for (int k = 0; !st && n_xs && k < 2; k++)
    st = ox_grad_if_branch(b, n, br[k]->g, xs, n_xs, &sub[k]);
  if (!st && n_xs) {
    const char* cond = ox_grad_I(n, 0);
    ox_grad_op(b, "If", "", &cond, 1, n_xs, NULL, outs);
    st = ox_grad_err(b);
  }
  const char* names[2] = {"then_branch", "else_branch"};
  for (int k = 0; !st && n_xs && k < 2; k++) {
    OxAttr a = {.name = ox_strdup(names[k]), .type = ONYX_ATTR_GRAPH, .g = sub[k]};
    st = a.name ? ox_node_add_attr(b->last, &a) : ox_oom();
    if (!st) sub[k] = NULL; /* the node owns it */
    ox_attr_clear(&a);
  }
  if (!st && n_xs) st = ox_node_link_subgraphs(b->g, b->last);
  for (size_t j = 0; !st && j < n_xs; j++)
    ox_grad_GI(b, n, at[j], outs[j]);
  ox_graph_free(sub[0]);
  ox_graph_free(sub[1]);
  free(xs);
  free(at);
  free(outs);
  return st ? st : ox_grad_err(b);
}

/* A formal input of sub named `name`, typed like `like` (element type;
 * shape when with_shape). */
static OnyxStatus* ox_grad_sub_input(OxGraph* sub, const char* name, const OxValue* like,
                                     bool with_shape) {
  OxValue* v = NULL;
  OX_TRY(ox_graph_value(sub, name, &v));
  OX_TRY(ox_value_set(v, like->type, with_shape ? like->rank : -1, with_shape ? like->dims : NULL));
  return ox_graph_add_input(sub, v);
}

/* An ints attribute of the node added last: n's attribute `name` (or
 * `count` copies of `fallback` when absent), each entry e turned into
 * flip ? 1 - e : e, then `extra` copies of `tail` appended. */
static void ox_grad_scan_ints(OxGradBuilder* b, const OxNode* n, const char* name, size_t count,
                              bool flip, size_t extra, int64_t tail, const int64_t* prefix,
                              size_t n_prefix) {
  size_t have = 0;
  const int64_t* v = ox_node_attr_ints(n, name, &have);
  size_t total = n_prefix + count + extra;
  int64_t* out = calloc(total + 1, sizeof *out);
  if (!out) {
    ox_grad_fail(b, ox_oom());
    return;
  }
  for (size_t i = 0; i < n_prefix; i++)
    out[i] = prefix[i];
  for (size_t i = 0; i < count; i++) {
    int64_t e = v && i < have ? v[i] : 0;
    out[n_prefix + i] = flip ? 1 - e : e;
  }
  for (size_t i = 0; i < extra; i++)
    out[n_prefix + count + i] = tail;
  ox_grad_attr_ints(b, name, out, total);
  free(out);
}

/* Scan (opset 9 on): a forward Scan again, whose body also writes each
 * step's incoming states as scan outputs (s_t), then a reverse Scan whose
 * body is the original body with L = sum_i ReduceSum(state_out_i * dS_i) +
 * sum_k ReduceSum(scan_out_k * dY_k) and a Gradient node of L with respect
 * to the body's state and scan inputs and the outer values it reads. Its
 * states carry dS (from the gradients of the final states) and the sums of
 * the outer values' gradients; its scan inputs are s_t, the scan inputs
 * and dY, each read in the opposite direction; its scan outputs are the
 * scan inputs' gradients. States and scan inputs must be floating point. */
static OnyxStatus* ox_grad_rule_scan(OxGradBuilder* b, const OxNode* n) {
  const OxAttr* ba = ox_node_attr(n, "body");
  if (!ba || ba->type != ONYX_ATTR_GRAPH || !ba->g)
    return ox_status(ONYX_INVALID_MODEL, "node '%s' (Scan) has no body", n->name);
  const OxGraph* body = ba->g;
  OxScanShape sh;
  OX_TRY(ox_scan_shape(n, body, body->n_inputs, &sh));
  if (sh.v8)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "Scan has no gradient rule before opset 9: node '%s' (version %d)", n->name,
                     (int)n->since_version);
  size_t N = sh.n_state, M = sh.n_scan_in, K = sh.n_scan_out;
  for (size_t i = 0; i < N + M; i++)
    if (!n->inputs[i] || !ox_is_float(n->inputs[i]->type) || !ox_is_float(body->inputs[i]->type))
      return ox_status(ONYX_NOT_IMPLEMENTED,
                       "Scan has no gradient rule for node '%s': input %zu is not floating point",
                       n->name, i);
  size_t first = n->n_inputs - n->n_implicit, n_outer = 0;
  size_t* outer = calloc(n->n_implicit + 1, sizeof *outer);
  const char** xs = calloc(N + M + n->n_implicit + 1, sizeof *xs);
  char** gouts = calloc(N + M + n->n_implicit + 1, sizeof *gouts);
  OnyxStatus* st = outer && xs && gouts ? NULL : ox_oom();
  for (size_t k = first; !st && k < n->n_inputs; k++)
    if (ox_grad_wants(b, n, k)) outer[n_outer++] = k;
  size_t n_xs = N + M + n_outer;
  OxGraph *fwd = NULL, *sub = NULL;
  /* The forward body with the incoming states as extra scan outputs. */
  if (!st) st = ox_graph_clone(body, b->g, &fwd);
  for (size_t i = 0; !st && i < N; i++) {
    const char* ins[] = {fwd->inputs[i]->name};
    const char* o = NULL;
    OxNode* nd = NULL;
    st = ox_grad_sub_node(b, fwd, "Identity", ins, 1, &o, &nd);
    if (!st) st = ox_graph_add_output(fwd, nd->outputs[0]);
  }
  /* The gradient body. */
  if (!st) st = ox_graph_clone(body, b->g, &sub);
  char** names = calloc(2 * N + n_outer + K + 1, sizeof *names);
  if (!st && !names) st = ox_oom();
  for (size_t i = 0; !st && i < 2 * N + n_outer + K; i++)
    if (!(names[i] = ox_grad_sub_name(b, sub))) st = ox_oom();
  const char** terms = calloc(N + K + 1, sizeof *terms);
  if (!st && !terms) st = ox_oom();
  size_t n_terms = 0;
  if (!st) {
    OxValue** old_in = NULL;
    OxValue** old_out = NULL;
    ox_grad_sub_detach_io(sub, &old_in, &old_out);
    /* states: dS_i, the outer sums; scan inputs: s_t, x_t, dY_t */
    for (size_t i = 0; !st && i < N; i++)
      st = ox_grad_sub_input(sub, names[i], old_in[i], true);
    for (size_t j = 0; !st && j < n_outer; j++) {
      const OxValue* o = n->inputs[outer[j]];
      st = ox_grad_sub_input(sub, names[N + j], o, true);
    }
    for (size_t i = 0; !st && i < N + M; i++)
      st = ox_graph_add_input(sub, old_in[i]);
    for (size_t k = 0; !st && k < K; k++)
      st = ox_grad_sub_input(sub, names[N + n_outer + k], old_out[N + k], true);
    for (size_t i = 0; !st && i < N + K; i++) {
      const char* dy = i < N ? names[i] : names[N + n_outer + (i - N)];
      st = ox_grad_sub_dot(b, sub, old_out[i]->name, dy, &terms[n_terms]);
      n_terms += !st;
    }
    free(old_in);
    free(old_out);
  }
  const char* loss = n_terms ? terms[0] : NULL;
  OxNode* nd = NULL;
  if (!st && n_terms > 1) st = ox_grad_sub_node(b, sub, "Sum", terms, n_terms, &loss, &nd);
  if (!st && !loss)
    st = ox_status(ONYX_INVALID_MODEL, "node '%s' (Scan): the body has no outputs", n->name);
  for (size_t i = 0; !st && i < N + M; i++)
    xs[i] = sub->inputs[N + n_outer + i]->name;
  for (size_t j = 0; !st && j < n_outer; j++) {
    xs[N + M + j] = n->inputs[outer[j]]->name;
    st = ox_grad_sub_outer(n, sub, xs[N + M + j]);
  }
  for (size_t i = 0; !st && i < n_xs; i++)
    if (!(gouts[i] = ox_grad_sub_name(b, sub))) st = ox_oom();
  if (!st) st = ox_grad_sub_gradient(b, sub, xs, n_xs, (const char* const*)gouts, loss, &nd);
  OxNode* gnode = nd;
  /* outputs: dS_i, the outer sums plus this step's, dX_m */
  for (size_t i = 0; !st && i < N; i++)
    st = ox_graph_add_output(sub, gnode->outputs[i]);
  for (size_t j = 0; !st && j < n_outer; j++) {
    const char* ins[] = {names[N + j], gnode->outputs[N + M + j]->name};
    const char* sum = NULL;
    st = ox_grad_sub_node(b, sub, "Add", ins, 2, &sum, &nd);
    if (!st) st = ox_graph_add_output(sub, nd->outputs[0]);
  }
  for (size_t m = 0; !st && m < M; m++)
    st = ox_graph_add_output(sub, gnode->outputs[N + m]);
  if (!st) st = ox_grad_sub_shapes(b, n, sub);
  /* The forward Scan again, for the states of each step. */
  /* Scan writes every output: the final states and the original scan
   * outputs are computed again and left unread. */
  const char** fouts = calloc(2 * N + K + 1, sizeof *fouts);
  if (!st && !fouts) st = ox_oom();
  if (!st) {
    const char** fins = calloc(N + M + 1, sizeof *fins);
    if (!fins) ox_grad_fail(b, ox_oom());
    for (size_t i = 0; fins && i < N + M; i++)
      fins[i] = ox_grad_I(n, i);
    if (fins) ox_grad_op(b, "Scan", "", fins, N + M, 2 * N + K, NULL, fouts);
    free(fins);
    ox_grad_attrs_copy(b, n, "body");
    OxNode* fnode = b->last;
    for (size_t a = 0; !b->err && a < fnode->n_attrs; a++) /* redone below */
      if (!strcmp(fnode->attrs[a].name, "scan_output_axes") ||
          !strcmp(fnode->attrs[a].name, "scan_output_directions")) {
        ox_attr_clear(&fnode->attrs[a]);
        fnode->attrs[a] = fnode->attrs[--fnode->n_attrs];
        a--;
      }
    ox_grad_scan_ints(b, n, "scan_output_axes", K, false, N, 0, NULL, 0);
    ox_grad_scan_ints(b, n, "scan_output_directions", K, false, N, 0, NULL, 0);
    st = ox_grad_err(b);
    OxAttr a = {.name = ox_strdup("body"), .type = ONYX_ATTR_GRAPH, .g = fwd};
    if (!st) st = a.name ? ox_node_add_attr(fnode, &a) : ox_oom();
    if (!st) fwd = NULL;
    ox_attr_clear(&a);
    if (!st) st = ox_node_link_subgraphs(b->g, fnode);
  }
  /* The reverse Scan. */
  const char** rins = calloc(2 * N + n_outer + M + K + 1, sizeof *rins);
  const char** routs = calloc(N + n_outer + M + 1, sizeof *routs);
  if (!st && (!rins || !routs)) st = ox_oom();
  for (size_t i = 0; !st && i < N; i++) {
    const char* go = ox_grad_GO(b, n, i);
    const OxValue* s0 = n->inputs[i];
    rins[i] =
        go ? go : ox_grad_zeros_like(b, ox_grad_O(n, i) ? ox_grad_O(n, i) : s0->name, s0->type);
  }
  for (size_t j = 0; !st && j < n_outer; j++) {
    const OxValue* o = n->inputs[outer[j]];
    rins[N + j] = ox_grad_zeros_like(b, o->name, o->type);
  }
  for (size_t i = 0; !st && i < N; i++)
    rins[N + n_outer + i] = fouts[N + K + i];
  for (size_t m = 0; !st && m < M; m++)
    rins[2 * N + n_outer + m] = ox_grad_I(n, N + m);
  for (size_t k = 0; !st && k < K; k++) {
    const char* go = ox_grad_GO(b, n, N + k);
    const OxValue* y = n->outputs[N + k];
    if (!go && !y) {
      ox_grad_fail(b, ox_status(ONYX_NOT_IMPLEMENTED,
                                "Scan has no gradient rule for node '%s': scan output %zu is "
                                "absent",
                                n->name, k));
      break;
    }
    rins[2 * N + n_outer + M + k] = go ? go : ox_grad_zeros_like(b, y->name, y->type);
  }
  if (!st) st = ox_grad_err(b);
  if (!st) {
    ox_grad_op(b, "Scan", "", rins, 2 * N + n_outer + M + K, N + n_outer + M, NULL, routs);
    OxNode* rnode = b->last;
    ox_grad_attr_int(b, "num_scan_inputs", (int64_t)(N + M + K));
    {
      /* scan inputs: s_t (axis 0, reversed), x (its axes, reversed), dY
       * (the output axes, reversed) */
      size_t have_ax = 0, have_oax = 0;
      const int64_t* ax = ox_node_attr_ints(n, "scan_input_axes", &have_ax);
      const int64_t* oax = ox_node_attr_ints(n, "scan_output_axes", &have_oax);
      int64_t* axes = calloc(N + M + K + 1, sizeof *axes);
      if (!axes) ox_grad_fail(b, ox_oom());
      for (size_t m = 0; axes && m < M; m++)
        axes[N + m] = ax && m < have_ax ? ax[m] : 0;
      for (size_t k = 0; axes && k < K; k++)
        axes[N + M + k] = oax && k < have_oax ? oax[k] : 0;
      if (axes) ox_grad_attr_ints(b, "scan_input_axes", axes, N + M + K);
      free(axes);
      size_t have_d = 0, have_od = 0;
      const int64_t* d = ox_node_attr_ints(n, "scan_input_directions", &have_d);
      const int64_t* od = ox_node_attr_ints(n, "scan_output_directions", &have_od);
      int64_t* dirs = calloc(N + M + K + 1, sizeof *dirs);
      int64_t* odirs = calloc(M + 1, sizeof *odirs);
      int64_t* oaxes = calloc(M + 1, sizeof *oaxes);
      if (!dirs || !odirs || !oaxes) ox_grad_fail(b, ox_oom());
      for (size_t i = 0; dirs && i < N; i++)
        dirs[i] = 1;
      for (size_t m = 0; dirs && odirs && oaxes && m < M; m++) {
        dirs[N + m] = 1 - (d && m < have_d ? d[m] : 0);
        odirs[m] = dirs[N + m];
        oaxes[m] = ax && m < have_ax ? ax[m] : 0;
      }
      for (size_t k = 0; dirs && k < K; k++)
        dirs[N + M + k] = 1 - (od && k < have_od ? od[k] : 0);
      if (dirs && odirs && oaxes) {
        ox_grad_attr_ints(b, "scan_input_directions", dirs, N + M + K);
        ox_grad_attr_ints(b, "scan_output_directions", odirs, M);
        ox_grad_attr_ints(b, "scan_output_axes", oaxes, M);
      }
      free(dirs);
      free(odirs);
      free(oaxes);
    }
    st = ox_grad_err(b);
    OxAttr a = {.name = ox_strdup("body"), .type = ONYX_ATTR_GRAPH, .g = sub};
    if (!st) st = a.name ? ox_node_add_attr(rnode, &a) : ox_oom();
    if (!st) sub = NULL;
    ox_attr_clear(&a);
    if (!st) st = ox_node_link_subgraphs(b->g, rnode);
  }
  for (size_t i = 0; !st && i < N; i++)
    ox_grad_GI(b, n, i, routs[i]);
  for (size_t j = 0; !st && j < n_outer; j++)
    ox_grad_GI(b, n, outer[j], routs[N + j]);
  for (size_t m = 0; !st && m < M; m++)
    ox_grad_GI(b, n, N + m, routs[N + n_outer + m]);
  ox_graph_free(fwd);
  ox_graph_free(sub);
  for (size_t i = 0; names && i < 2 * N + n_outer + K; i++)
    free(names[i]);
  for (size_t i = 0; gouts && i < n_xs; i++)
    free(gouts[i]);
  free(names);
  free(gouts);
  free(terms);
  free(xs);
  free(outer);
  free(fouts);
  free(rins);
  free(routs);
  return st ? st : ox_grad_err(b);
}

/* Loop (opset 11 on), iterating exactly as the forward Loop did.
 *
 * Forward: the Loop again, whose body also writes, as extra scan outputs,
 * each iteration's incoming carried values (s_t), its iteration number and
 * its incoming condition. The original outputs are computed again and left
 * unread.
 *
 * Backward: a Scan over those records in reverse (one step per iteration the
 * forward Loop ran, so a trip count, a condition or both are all handled;
 * the condition and the trip count are integer and bool: no gradient, the
 * number of iterations counts as a constant). Its body is the Loop's body
 * with L = sum_f ReduceSum(v_out_f * dS_f) + sum_k ReduceSum(scan_out_k *
 * dY_k) and a Gradient node of L with respect to the floating-point carried
 * inputs and the outer values the body reads. Its states carry dS (from the
 * gradients of the final values) and the sums of the outer values'
 * gradients; its scan inputs are s_t, the iteration numbers, the
 * conditions and the dY_k of the scan outputs that have a gradient. Integer
 * and bool carried values (counters) are recorded and replayed but carry no
 * gradient. Carried values must keep their shape over the iterations (they
 * are stacked); sequence and optional values are refused. */
static OnyxStatus* ox_grad_rule_loop(OxGradBuilder* b, const OxNode* n) {
  const OxAttr* ba = ox_node_attr(n, "body");
  if (!ba || ba->type != ONYX_ATTR_GRAPH || !ba->g)
    return ox_status(ONYX_INVALID_MODEL, "node '%s' (Loop) has no body", n->name);
  if (n->since_version > 0 && n->since_version < 11)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "Loop has no gradient rule before opset 11: node '%s' (version %d)", n->name,
                     (int)n->since_version);
  const OxGraph* body = ba->g;
  size_t n_explicit = n->n_inputs - n->n_implicit;
  if (n_explicit < 2 || body->n_inputs != n_explicit || body->n_outputs + 1 < body->n_inputs)
    return ox_status(ONYX_INVALID_MODEL,
                     "node '%s' (Loop): %zu inputs for a body of %zu inputs and %zu outputs",
                     n->name, n_explicit, body->n_inputs, body->n_outputs);
  size_t N = n_explicit - 2, K = body->n_outputs - 1 - N;
  for (size_t i = 0; i < N + K; i++) {
    const OxValue* v = i < N ? body->inputs[2 + i] : body->outputs[1 + i];
    const OxValue* o = i < N ? body->outputs[1 + i] : NULL;
    if (v->kind != OX_VK_TENSOR || (o && o->kind != OX_VK_TENSOR))
      return ox_status(ONYX_NOT_IMPLEMENTED,
                       "Loop has no gradient rule for node '%s': its %s %zu ('%s') is not a "
                       "tensor (sequence and optional values are not differentiated)",
                       n->name, i < N ? "loop-carried value" : "scan output", i < N ? i : i - N,
                       v->name);
  }
  /* F: the floating-point carried values; KF: the scan outputs with a gradient. */
  size_t *F = calloc(N + 1, sizeof *F), *KF = calloc(K + 1, sizeof *KF), nF = 0, nKF = 0;
  size_t first = n_explicit, n_outer = 0;
  size_t* outer = calloc(n->n_implicit + 1, sizeof *outer);
  OnyxStatus* st = F && KF && outer ? NULL : ox_oom();
  for (size_t i = 0; !st && i < N; i++)
    if (ox_is_float(body->inputs[2 + i]->type) && n->inputs[2 + i] &&
        ox_is_float(n->inputs[2 + i]->type))
      F[nF++] = i;
  for (size_t k = 0; !st && k < K; k++)
    if (ox_grad_GO(b, n, N + k) && ox_is_float(body->outputs[1 + N + k]->type)) KF[nKF++] = k;
  for (size_t k = first; !st && k < n->n_inputs; k++)
    if (ox_grad_wants(b, n, k)) outer[n_outer++] = k;
  size_t n_xs = nF + n_outer;
  const char** xs = calloc(n_xs + 1, sizeof *xs);
  char** gouts = calloc(n_xs + 1, sizeof *gouts);
  if (!st && (!xs || !gouts)) st = ox_oom();
  OxGraph *fwd = NULL, *sub = NULL;
  /* The forward body with s_t, the iteration number and the condition as
   * extra scan outputs. */
  if (!st) st = ox_graph_clone(body, b->g, &fwd);
  for (size_t i = 0; !st && i < N + 2; i++) {
    const char* ins[] = {fwd->inputs[i < N ? 2 + i : i - N]->name};
    const char* o = NULL;
    OxNode* nd = NULL;
    st = ox_grad_sub_node(b, fwd, "Identity", ins, 1, &o, &nd);
    if (!st) st = ox_graph_add_output(fwd, nd->outputs[0]);
  }
  /* The gradient body: states dS_f, the outer sums; scan inputs s_t, the
   * iteration number, the condition, dY_k. */
  if (!st) st = ox_graph_clone(body, b->g, &sub);
  char** names = calloc(nF + n_outer + nKF + 1, sizeof *names);
  if (!st && !names) st = ox_oom();
  for (size_t i = 0; !st && i < nF + n_outer + nKF; i++)
    if (!(names[i] = ox_grad_sub_name(b, sub))) st = ox_oom();
  const char** terms = calloc(nF + nKF + 1, sizeof *terms);
  if (!st && !terms) st = ox_oom();
  size_t n_terms = 0;
  if (!st) {
    OxValue** old_in = NULL;
    OxValue** old_out = NULL;
    ox_grad_sub_detach_io(sub, &old_in, &old_out);
    for (size_t j = 0; !st && j < nF; j++)
      st = ox_grad_sub_input(sub, names[j], old_out[1 + F[j]], true);
    for (size_t j = 0; !st && j < n_outer; j++)
      st = ox_grad_sub_input(sub, names[nF + j], n->inputs[outer[j]], true);
    for (size_t i = 0; !st && i < N; i++)
      st = ox_graph_add_input(sub, old_in[2 + i]);
    if (!st) st = ox_graph_add_input(sub, old_in[0]);
    if (!st) st = ox_graph_add_input(sub, old_in[1]);
    for (size_t j = 0; !st && j < nKF; j++)
      st = ox_grad_sub_input(sub, names[nF + n_outer + j], old_out[1 + N + KF[j]], true);
    for (size_t j = 0; !st && j < nF + nKF; j++) {
      const char* dy = names[j < nF ? j : n_outer + j];
      const OxValue* y = j < nF ? old_out[1 + F[j]] : old_out[1 + N + KF[j - nF]];
      st = ox_grad_sub_dot(b, sub, y->name, dy, &terms[n_terms]);
      n_terms += !st;
    }
    for (size_t j = 0; !st && j < nF; j++)
      xs[j] = old_in[2 + F[j]]->name;
    free(old_in);
    free(old_out);
  }
  const char* loss = n_terms ? terms[0] : NULL;
  OxNode* nd = NULL;
  if (!st && n_terms > 1) st = ox_grad_sub_node(b, sub, "Sum", terms, n_terms, &loss, &nd);
  if (!st && !loss)
    st = ox_status(ONYX_FAIL, "node '%s' (Loop): no output gradient reaches the body", n->name);
  for (size_t j = 0; !st && j < n_outer; j++) {
    xs[nF + j] = n->inputs[outer[j]]->name;
    st = ox_grad_sub_outer(n, sub, xs[nF + j]);
  }
  for (size_t i = 0; !st && i < n_xs; i++)
    if (!(gouts[i] = ox_grad_sub_name(b, sub))) st = ox_oom();
  if (!st) st = ox_grad_sub_gradient(b, sub, xs, n_xs, (const char* const*)gouts, loss, &nd);
  OxNode* gnode = nd;
  /* outputs: dS_f of the iteration's incoming values, the outer sums plus
   * this iteration's */
  for (size_t j = 0; !st && j < nF; j++)
    st = ox_graph_add_output(sub, gnode->outputs[j]);
  for (size_t j = 0; !st && j < n_outer; j++) {
    const char* ins[] = {names[nF + j], gnode->outputs[nF + j]->name};
    const char* sum = NULL;
    st = ox_grad_sub_node(b, sub, "Add", ins, 2, &sum, &nd);
    if (!st) st = ox_graph_add_output(sub, nd->outputs[0]);
  }
  if (!st) st = ox_grad_sub_shapes(b, n, sub);
  /* The forward Loop again. */
  const char** fouts = calloc(2 * N + K + 3, sizeof *fouts);
  if (!st && !fouts) st = ox_oom();
  if (!st) {
    const char** fins = calloc(n_explicit + 1, sizeof *fins);
    if (!fins) ox_grad_fail(b, ox_oom());
    for (size_t i = 0; fins && i < n_explicit; i++)
      fins[i] = ox_grad_I(n, i);
    if (fins) ox_grad_op(b, "Loop", "", fins, n_explicit, 2 * N + K + 2, NULL, fouts);
    free(fins);
    OxNode* fnode = b->last;
    st = ox_grad_err(b);
    OxAttr a = {.name = ox_strdup("body"), .type = ONYX_ATTR_GRAPH, .g = fwd};
    if (!st) st = a.name ? ox_node_add_attr(fnode, &a) : ox_oom();
    if (!st) fwd = NULL;
    ox_attr_clear(&a);
    if (!st) st = ox_node_link_subgraphs(b->g, fnode);
  }
  /* The reverse Scan. */
  size_t n_state = nF + n_outer, n_scan = N + 2 + nKF;
  const char** rins = calloc(n_state + n_scan + 1, sizeof *rins);
  const char** routs = calloc(n_state + 1, sizeof *routs);
  if (!st && (!rins || !routs)) st = ox_oom();
  for (size_t j = 0; !st && j < nF; j++) {
    const char* go = ox_grad_GO(b, n, F[j]);
    const OxValue* s0 = n->inputs[2 + F[j]];
    const char* like = ox_grad_O(n, F[j]) ? ox_grad_O(n, F[j]) : s0->name;
    rins[j] = go ? go : ox_grad_zeros_like(b, like, s0->type);
  }
  for (size_t j = 0; !st && j < n_outer; j++) {
    const OxValue* o = n->inputs[outer[j]];
    rins[nF + j] = ox_grad_zeros_like(b, o->name, o->type);
  }
  for (size_t i = 0; !st && i < N + 2; i++)
    rins[n_state + i] = fouts[N + K + i];
  for (size_t j = 0; !st && j < nKF; j++)
    rins[n_state + N + 2 + j] = ox_grad_GO(b, n, N + KF[j]);
  if (!st) st = ox_grad_err(b);
  if (!st) {
    ox_grad_op(b, "Scan", "", rins, n_state + n_scan, n_state, NULL, routs);
    OxNode* rnode = b->last;
    ox_grad_attr_int(b, "num_scan_inputs", (int64_t)n_scan);
    int64_t* dirs = calloc(n_scan + 1, sizeof *dirs);
    if (!dirs) ox_grad_fail(b, ox_oom());
    for (size_t i = 0; dirs && i < n_scan; i++)
      dirs[i] = 1;
    if (dirs) ox_grad_attr_ints(b, "scan_input_directions", dirs, n_scan);
    free(dirs);
    st = ox_grad_err(b);
    OxAttr a = {.name = ox_strdup("body"), .type = ONYX_ATTR_GRAPH, .g = sub};
    if (!st) st = a.name ? ox_node_add_attr(rnode, &a) : ox_oom();
    if (!st) sub = NULL;
    ox_attr_clear(&a);
    if (!st) st = ox_node_link_subgraphs(b->g, rnode);
  }
  for (size_t j = 0; !st && j < nF; j++)
    ox_grad_GI(b, n, 2 + F[j], routs[j]);
  for (size_t j = 0; !st && j < n_outer; j++)
    ox_grad_GI(b, n, outer[j], routs[nF + j]);
  ox_graph_free(fwd);
  ox_graph_free(sub);
  for (size_t i = 0; names && i < nF + n_outer + nKF; i++)
    free(names[i]);
  for (size_t i = 0; gouts && i < n_xs; i++)
    free(gouts[i]);
  free(names);
  free(gouts);
  free(terms);
  free(xs);
  free(outer);
  free(F);
  free(KF);
  free(fouts);
  free(rins);
  free(routs);
  return st ? st : ox_grad_err(b);
}

static const OxGradRuleDef ox_flow_rules[] = {
    {"", "If", 1, 0, ox_grad_rule_if},
    {"", "Loop", 1, 0, ox_grad_rule_loop},
    {"", "Scan", 1, 0, ox_grad_rule_scan},
};

const OxGradRuleDef* ox_grad_rules_flow(size_t* n) {
  *n = OX_ARRAY_LEN(ox_flow_rules);
  return ox_flow_rules;
}

/* --- the registry ---------------------------------------------------------------------- */

OxGradRule ox_grad_rule_find(const char* domain, const char* op, int32_t version) {
  const OxGradRuleDef* (*tables[])(size_t*) = {ox_grad_rules_math, ox_grad_rules_nn,
                                               ox_grad_rules_tensor, ox_grad_rules_seq,
                                               ox_grad_rules_flow};
  const char* d = ox_domain_is_onnx(domain) ? "" : domain;
  for (size_t t = 0; t < OX_ARRAY_LEN(tables); t++) {
    size_t n = 0;
    const OxGradRuleDef* r = tables[t](&n);
    for (size_t i = 0; i < n; i++)
      if (!strcmp(r[i].domain, d) && !strcmp(r[i].op, op) && version >= r[i].since &&
          (!r[i].until || version <= r[i].until))
        return r[i].rule;
  }
  return NULL;
}

/* --- the backward pass ----------------------------------------------------------------- */

/* The summed gradient of forward value v, or NULL when nothing reached it. */
static const char* ox_grad_total(OxGradBuilder* b, const OxValue* v) {
  OxContribs* c = &b->contribs[v->index];
  if (!c->n) return NULL;
  if (c->n == 1) return c->names[0];
  return ox_grad_op(b, "Sum", "", (const char* const*)c->names, c->n, 1, NULL, NULL);
}

/* Marks forward values that depend on some x through floating-point values
 * (from_x) and that y depends on (to_y); nodes are in topological order. */
static void ox_grad_reach(const OxGraph* g, const OxNode* gn, bool* from_x, bool* to_y,
                          const OxValue* y) {
  for (size_t i = 0; i < g->n_nodes; i++) {
    const OxNode* n = g->nodes[i];
    if (n == gn) continue;
    bool any = false;
    for (size_t k = 0; k < n->n_inputs; k++)
      any |= n->inputs[k] && from_x[n->inputs[k]->index];
    for (size_t k = 0; any && k < n->n_outputs; k++)
      if (n->outputs[k] && ox_is_float(n->outputs[k]->type)) from_x[n->outputs[k]->index] = true;
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

/* "'y' <- node 'a' (Add) <- node 'b' (Relu)": the nodes from y back to n, along the
 * nodes whose rules fed each value first. */
static char* ox_grad_path(const OxGradBuilder* b, const OxNode* n, const OxValue* y) {
  const OxNode* chain[64];
  size_t len = 0;
  const OxNode* cur = n;
  while (cur && len < OX_ARRAY_LEN(chain)) {
    chain[len++] = cur;
    const OxNode* next = NULL;
    for (size_t k = 0; k < cur->n_outputs && !next; k++) {
      const OxValue* o = cur->outputs[k];
      if (!o || o->index >= b->n_fwd || o == y) continue;
      next = b->via[o->index];
    }
    cur = next;
  }
  size_t cap = 64;
  for (size_t i = 0; i < len; i++)
    cap += strlen(chain[i]->name) + strlen(chain[i]->op_type) + 24;
  char* s = malloc(cap);
  if (!s) return NULL;
  size_t at = (size_t)snprintf(s, cap, "'%s'", y->name);
  for (size_t i = len; i-- > 0 && at < cap;)
    at +=
        (size_t)snprintf(s + at, cap - at, " <- node '%s' (%s)", chain[i]->name, chain[i]->op_type);
  if (len == OX_ARRAY_LEN(chain) && at < cap) snprintf(s + at, cap - at, " <- ...");
  return s;
}

static OnyxStatus* ox_grad_backward(OxGradBuilder* b, const OxNode* gn, const OxValue* y) {
  OxGraph* g = b->g;
  if (!ox_is_float(y->type))
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "node '%s' (Gradient): y '%s' is %s (a floating-point type is needed)",
                     gn->name, y->name, ox_elem_name(y->type));
  /* dy/dy: ones of y's shape and type. */
  const char* one = ox_grad_scalar(b, y->type, 1.0);
  const char* seed = ox_grad_opset(b) >= 8
                         ? ox_grad_op2(b, "Expand", one, ox_grad_op1(b, "Shape", y->name))
                         : ox_grad_op2(b, "Add", ox_grad_zeros_like(b, y->name, y->type), one);
  OX_TRY(ox_grad_err(b));
  b->contribs[y->index].names = calloc(1, sizeof(char*));
  if (!b->contribs[y->index].names || !(b->contribs[y->index].names[0] = ox_strdup(seed)))
    return ox_oom();
  b->contribs[y->index].n = b->contribs[y->index].cap = 1;
  size_t n_nodes = g->n_nodes; /* the forward nodes: new ones are appended */
  OxNode** fwd = malloc((n_nodes + 1) * sizeof *fwd);
  if (!fwd) return ox_oom();
  if (n_nodes) memcpy(fwd, g->nodes, n_nodes * sizeof *fwd);
  OnyxStatus* st = NULL;
  for (size_t i = n_nodes; !st && i-- > 0;) {
    const OxNode* n = fwd[i];
    if (n == gn) continue;
    bool any = false;
    for (size_t k = 0; k < n->n_outputs; k++) {
      const OxValue* o = n->outputs[k];
      if (!o || o->index >= b->n_fwd) continue;
      b->totals[o->index] = ox_grad_value_wants(b, o) ? ox_grad_total(b, o) : NULL;
      any |= b->totals[o->index] != NULL;
    }
    if ((st = ox_grad_err(b)) || !any) continue;
    int32_t version =
        n->since_version > 0 ? n->since_version : (int32_t)ox_graph_opset(g, n->domain);
    OxGradRule rule = ox_grad_rule_find(n->domain, n->op_type, version);
    if (!rule) {
      char* path = ox_grad_path(b, n, y);
      st = ox_status(ONYX_NOT_IMPLEMENTED,
                     "node '%s' (Gradient): no gradient rule for node '%s' (%s, domain %s, "
                     "version %d); path from the loss: %s",
                     gn->name, n->name, n->op_type, *n->domain ? n->domain : "ai.onnx",
                     (int)version, path ? path : "(out of memory)");
      free(path);
      break;
    }
    b->cur = n;
    st = rule(b, n);
    if (!st) st = ox_grad_err(b);
    if (st) {
      char* path = ox_grad_path(b, n, y);
      st = ox_status_wrap(
          st, "node '%s' (Gradient), the gradient of node '%s' (%s); path from the loss: %s",
          gn->name, n->name, n->op_type, path ? path : "(out of memory)");
      free(path);
    }
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
  b.totals = calloc(b.n_fwd + 1, sizeof *b.totals);
  b.via = calloc(b.n_fwd + 1, sizeof *b.via);
  b.from_x = calloc(b.n_fwd + 1, sizeof *b.from_x);
  b.to_y = calloc(b.n_fwd + 1, sizeof *b.to_y);
  char** outs = calloc(n_xs + 1, sizeof *outs);
  OxValue** xv = calloc(n_xs + 1, sizeof *xv);
  OnyxStatus* st =
      (!prefix || !b.contribs || !b.totals || !b.via || !b.from_x || !b.to_y || !outs || !xv)
          ? ox_oom()
          : NULL;
  for (size_t i = 0; !st && i < n_xs; i++) {
    xv[i] = ox_graph_find(g, xs->strings[i]);
    if (!xv[i])
      st = ox_status(ONYX_INVALID_MODEL, "node '%s' (Gradient): x '%s' is not a value of the graph",
                     gn->name, xs->strings[i]);
    else if (ox_is_float(xv[i]->type))
      b.from_x[xv[i]->index] = true;
    if (!st && gn->outputs[i] && !(outs[i] = ox_strdup(gn->outputs[i]->name))) st = ox_oom();
  }
  if (!st) ox_grad_reach(g, gn, b.from_x, b.to_y, y);
  if (!st) st = ox_grad_backward(&b, gn, y);
  if (!st) ox_graph_remove_node(g, gn); /* frees its outputs for the results */
  for (size_t i = 0; !st && i < n_xs; i++) {
    if (!outs[i]) continue;
    const char* total = ox_grad_value_wants(&b, xv[i]) ? ox_grad_total(&b, xv[i]) : NULL;
    if (!total) /* y does not depend on x: zeros */
      total = ox_grad_zeros_like(&b, xv[i]->name,
                                 ox_is_float(xv[i]->type) ? xv[i]->type : ONYX_ELEM_FLOAT32);
    st = ox_grad_err(&b);
    const char* ins[] = {total};
    const char* res[] = {outs[i]};
    if (!st) st = ox_graph_add_node(g, NULL, "Identity", "", ins, 1, res, 1, NULL);
  }
  if (b.err) ox_status_free(b.err);
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
  free(b.totals);
  free(b.via);
  free(b.from_x);
  free(b.to_y);
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
