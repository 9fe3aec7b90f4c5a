/* opt_tensor_parallel.c — Megatron-style tensor parallelism
 * (ox_tensor_parallel.h; docs/distributed.md, "Tensor parallelism").
 *
 * The graph is analysed first, region by region, without changing it; then
 * the recorded edits are applied. A region starts at a MatMul X·W with W a
 * constant [K, M] and X not sharded: the rank keeps columns of W, so the
 * product's last axis is sharded. When that product (through element-wise
 * ops by constants, the bias) is cut by a Split into G equal parts along
 * that axis (a packed QKV projection), W is split per block: the rank keeps
 * its 1/size of each of the G blocks of columns, so that each part of the
 * Split holds the rank's heads of Q, K and V. The sharding is then followed
 * through the nodes in topological order; every node reading a sharded
 * value must be one of:
 *   - element-wise binary ops (Add, Sub, Mul, Div): the other operand is
 *     sharded the same way, broadcast along the sharded axis, or a constant
 *     full along it (sliced like the product);
 *   - element-wise unary ops;
 *   - Softmax / LogSoftmax over another axis;
 *   - Split: along the sharded axis into as many equal parts as the value
 *     has blocks (sizes divided by size), or along another axis;
 *   - Reshape by a constant shape that keeps the axes before the sharded one
 *     and whose sharded output axis is divisible by size (the hidden axis
 *     into heads x head size, and back);
 *   - Transpose (the sharded axis moves);
 *   - MatMul of two values sharded on the same batch axis (attention's
 *     scores and context, per head);
 *   - MatMul of a value sharded on its last axis by a constant [K, M]: the
 *     row-parallel end. The rank keeps the rows of W that match its slice,
 *     and an AllReduce(sum) over the group restores the full product; the
 *     nodes after it (the bias Add, the residual) see whole values, so a
 *     bias is added once.
 * Any other reader of a sharded value, a sharded graph output, or a region
 * without a row-parallel end leaves the region unsharded. */
#include <stdlib.h>
#include <string.h>
#include "opt_internal.h"
#include "ox_checked.h"
#include "ox_tensor_parallel.h"

#define TP_DOMAIN "com.onyx.collective"
#define TP_PASS   "tensor_parallel"

typedef struct TpShard {
  int32_t axis;   /* -1: whole */
  int64_t blocks; /* the axis is G blocks, each split across the ranks */
} TpShard;

typedef enum TpKind {
  TP_SLICE,       /* constant input `input` of n: the rank's slice along axis, per block */
  TP_SHAPE,       /* Reshape n's shape: entry `axis` divided by size */
  TP_SPLIT_INPUT, /* Split n's sizes input: every entry divided by size */
  TP_SPLIT_ATTR,  /* Split n's `split` attribute: the same */
  TP_ALLREDUCE,   /* an AllReduce(sum) of n's output 0 */
  TP_MARK,        /* n is rewritten (origin for explain) */
} TpKind;

typedef struct TpAction {
  TpKind kind;
  OxNode* n;
  size_t input;
  int32_t axis;
  int64_t blocks;
} TpAction;

typedef struct Tp {
  OxGraph* g;
  int rank, size;
  TpShard* sh;    /* per value index */
  bool* claimed;  /* per node position: in a region already */
  bool* touched;  /* per node position: in the region being analysed */
  TpAction* acts; /* committed edits */
  size_t n_acts, cap_acts;
  size_t first_pending; /* edits of the region being analysed start here */
  OxStr report;
  size_t regions, n_col, n_row;
} Tp;

static OnyxStatus* tp_act(Tp* t, TpKind kind, OxNode* n, size_t input, int32_t axis,
                          int64_t blocks) {
  if (!ox_grow((void**)&t->acts, &t->cap_acts, t->n_acts + 1, sizeof *t->acts)) return ox_oom();
  t->acts[t->n_acts++] = (TpAction){kind, n, input, axis, blocks};
  return NULL;
}

static TpShard tp_get(const Tp* t, const OxValue* v) {
  return v ? t->sh[v->index] : (TpShard){-1, 1};
}

static int32_t tp_norm_axis(int64_t axis, int32_t rank) {
  if (axis < 0) axis += rank;
  return axis >= 0 && axis < rank ? (int32_t)axis : -1;
}

static bool tp_in(const char* op, const char* const* list) {
  for (size_t i = 0; list[i]; i++)
    if (!strcmp(op, list[i])) return true;
  return false;
}

static const char* const tp_unary[] = {
    "Relu", "Erf",        "Tanh",     "Sigmoid",     "Gelu",      "Sqrt",      "Exp",
    "Neg",  "Identity",   "Cast",     "Softplus",    "LeakyRelu", "Elu",       "Abs",
    "Log",  "Reciprocal", "Softsign", "HardSigmoid", "Dropout",   "HardSwish", NULL};
static const char* const tp_binary[] = {"Add", "Sub", "Mul", "Div", NULL};

/* The number of equal parts a Split cuts the column-parallel product into,
 * following single-use element-wise ops by constants (the bias); 1 when no
 * such Split follows. */
static int64_t tp_blocks_ahead(const OxValue* v, int32_t axis) {
  for (int hops = 0; v && hops < 4 && v->n_consumers == 1 && !v->is_graph_output; hops++) {
    const OxNode* c = v->consumers[0];
    if (ox_opt_is(c, "Split") && c->inputs[0] == v) {
      int32_t a = tp_norm_axis(ox_node_attr_int(c, "axis", 0), v->rank);
      return a == axis ? (int64_t)c->n_outputs : 1;
    }
    if (!ox_opt_is(c, "Add") && !ox_opt_is(c, "Sub") && !ox_opt_is(c, "Mul") &&
        !ox_opt_is(c, "Div"))
      return 1;
    if (c->n_inputs != 2 || !c->inputs[c->inputs[0] == v ? 1 : 0] ||
        !c->inputs[c->inputs[0] == v ? 1 : 0]->constant)
      return 1;
    v = c->outputs[0];
  }
  return 1;
}

/* --- the rules: each sets the outputs' sharding or returns false --------------------------- */

static bool tp_rule_binary(Tp* t, OxNode* c, OnyxStatus** st) {
  const OxValue* out = c->outputs[0];
  if (c->n_inputs != 2 || !out || out->rank < 0) return false;
  int32_t R = out->rank, oax = -1;
  int64_t blocks = 1;
  for (size_t i = 0; i < 2; i++) {
    TpShard s = tp_get(t, c->inputs[i]);
    if (s.axis < 0) continue;
    int32_t a = s.axis + (R - c->inputs[i]->rank);
    if (oax >= 0 && (a != oax || s.blocks != blocks)) return false;
    oax = a;
    blocks = s.blocks;
    if (c->inputs[i]->dims[s.axis] != out->dims[a]) return false;
  }
  if (oax < 0 || out->dims[oax] < 0) return false;
  for (size_t i = 0; i < 2; i++) {
    const OxValue* v = c->inputs[i];
    if (tp_get(t, v).axis >= 0) continue;
    if (!v || v->rank < 0) return false;
    int32_t a = oax - (R - v->rank);
    if (a < 0 || v->dims[a] == 1) continue; /* broadcast along the sharded axis */
    if (!v->constant || v->dims[a] != out->dims[oax]) return false;
    if ((*st = tp_act(t, TP_SLICE, c, i, a, blocks))) return false;
  }
  t->sh[out->index] = (TpShard){oax, blocks};
  return true;
}

static bool tp_rule_unary(Tp* t, OxNode* c) {
  TpShard s = tp_get(t, c->inputs[0]);
  for (size_t i = 1; i < c->n_inputs; i++)
    if (tp_get(t, c->inputs[i]).axis >= 0) return false;
  for (size_t i = 1; i < c->n_outputs; i++)
    if (c->outputs[i] && (c->outputs[i]->n_consumers || c->outputs[i]->is_graph_output))
      return false;
  if (s.axis < 0 || !c->outputs[0]) return false;
  t->sh[c->outputs[0]->index] = s;
  return true;
}

static bool tp_rule_softmax(Tp* t, OxNode* c) {
  TpShard s = tp_get(t, c->inputs[0]);
  int32_t rank = c->inputs[0]->rank;
  int32_t ax = tp_norm_axis(ox_node_attr_int(c, "axis", c->since_version >= 13 ? -1 : 1), rank);
  /* Before opset 13 the op flattens from `axis`: the sharded axis must lie before it. */
  bool ok = ax >= 0 && (c->since_version >= 13 ? s.axis != ax : s.axis < ax);
  if (!ok || !c->outputs[0]) return false;
  t->sh[c->outputs[0]->index] = s;
  return true;
}

static bool tp_rule_split(Tp* t, OxNode* c, OnyxStatus** st) {
  TpShard s = tp_get(t, c->inputs[0]);
  const OxValue* in = c->inputs[0];
  if (in->rank < 0) return false;
  for (size_t i = 1; i < c->n_inputs; i++)
    if (tp_get(t, c->inputs[i]).axis >= 0) return false;
  int32_t ax = tp_norm_axis(ox_node_attr_int(c, "axis", 0), in->rank);
  if (ax < 0) return false;
  TpShard o = s;
  if (ax == s.axis) {
    int64_t k = (int64_t)c->n_outputs, d = in->dims[ax];
    if (s.blocks != k || d < 0 || d % (k * t->size)) return false;
    /* Every part must be one block: equal sizes. */
    int64_t* sizes = NULL;
    size_t n = 0;
    const OxAttr* a = ox_node_attr(c, "split");
    if (c->n_inputs > 1 && c->inputs[1]) {
      if (!ox_opt_const_ints(c->inputs[1], &sizes, &n)) return false;
    } else if (a && a->type == ONYX_ATTR_INTS) {
      n = a->count;
      sizes = malloc((n ? n : 1) * sizeof *sizes);
      if (!sizes) {
        *st = ox_oom();
        return false;
      }
      memcpy(sizes, a->ints, n * sizeof *sizes);
    }
    bool ok = true;
    for (size_t i = 0; sizes && i < n; i++)
      ok = ok && sizes[i] == d / k;
    ok = ok && (!sizes || n == (size_t)k);
    free(sizes);
    if (!ok) return false;
    if (c->n_inputs > 1 && c->inputs[1])
      *st = tp_act(t, TP_SPLIT_INPUT, c, 1, 0, 1);
    else if (a && a->type == ONYX_ATTR_INTS)
      *st = tp_act(t, TP_SPLIT_ATTR, c, 0, 0, 1);
    if (*st) return false;
    o.blocks = 1;
  }
  for (size_t i = 0; i < c->n_outputs; i++)
    if (c->outputs[i]) t->sh[c->outputs[i]->index] = o;
  return true;
}

static bool tp_rule_reshape(Tp* t, OxNode* c, OnyxStatus** st) {
  TpShard s = tp_get(t, c->inputs[0]);
  const OxValue* in = c->inputs[0];
  const OxValue* out = c->outputs[0];
  if (s.blocks != 1 || c->n_inputs < 2 || tp_get(t, c->inputs[1]).axis >= 0 || !out ||
      in->rank < 0 || out->rank <= s.axis)
    return false;
  int32_t a = s.axis;
  /* The axes before the sharded one are the same (known and equal, or both unknown). */
  for (int32_t k = 0; k < a; k++)
    if (in->dims[k] != out->dims[k]) return false;
  int64_t pin = 1, pout = 1;
  for (int32_t k = a; k < in->rank; k++) {
    if (in->dims[k] < 0 || !ox_mul_i64(pin, in->dims[k], &pin)) return false;
  }
  for (int32_t k = a; k < out->rank; k++) {
    if (out->dims[k] < 0 || !ox_mul_i64(pout, out->dims[k], &pout)) return false;
  }
  if (pin != pout || out->dims[a] % t->size) return false;
  int64_t* shape = NULL;
  size_t n = 0;
  if (!ox_opt_const_ints(c->inputs[1], &shape, &n)) return false;
  bool ok = n == (size_t)out->rank && !ox_node_attr_int(c, "allowzero", 0);
  if (ok && shape[a] > 0) ok = shape[a] == out->dims[a];
  if (ok && shape[a] == 0) ok = a < in->rank && in->dims[a] == out->dims[a];
  free(shape);
  if (!ok) return false;
  if ((*st = tp_act(t, TP_SHAPE, c, 1, a, 1))) return false;
  t->sh[out->index] = (TpShard){a, 1};
  return true;
}

static bool tp_rule_transpose(Tp* t, OxNode* c) {
  TpShard s = tp_get(t, c->inputs[0]);
  int32_t rank = c->inputs[0]->rank;
  if (rank < 0 || !c->outputs[0]) return false;
  size_t n = 0;
  const int64_t* perm = ox_node_attr_ints(c, "perm", &n);
  int32_t j = -1;
  if (!perm) {
    j = rank - 1 - s.axis;
  } else {
    if (n != (size_t)rank) return false;
    for (size_t k = 0; k < n; k++)
      if (perm[k] == s.axis) j = (int32_t)k;
  }
  if (j < 0) return false;
  t->sh[c->outputs[0]->index] = (TpShard){j, s.blocks};
  return true;
}

static bool tp_rule_matmul(Tp* t, OxNode* c, OnyxStatus** st) {
  const OxValue* A = c->inputs[0];
  const OxValue* B = c->inputs[1];
  const OxValue* out = c->outputs[0];
  TpShard sa = tp_get(t, A), sb = tp_get(t, B);
  if (!out || out->rank < 0 || A->rank < 0 || B->rank < 0) return false;
  int32_t R = out->rank;
  if (sa.axis >= 0 && sb.axis >= 0) {
    /* Batched over the sharded axis (per head). */
    if (sa.blocks != 1 || sb.blocks != 1 || sa.axis >= A->rank - 2 || sb.axis >= B->rank - 2)
      return false;
    int32_t oa = sa.axis + (R - A->rank), ob = sb.axis + (R - B->rank);
    if (oa != ob) return false;
    t->sh[out->index] = (TpShard){oa, 1};
    return true;
  }
  /* Row-parallel: the sharded last axis times a constant [K, M]. */
  if (sa.axis != A->rank - 1 || sb.axis >= 0 || !B->constant || B->rank != 2) return false;
  int64_t K = B->dims[0];
  if (K != A->dims[sa.axis] || K % (sa.blocks * t->size)) return false;
  if ((*st = tp_act(t, TP_SLICE, c, 1, 0, sa.blocks))) return false;
  if ((*st = tp_act(t, TP_ALLREDUCE, c, 0, 0, 1))) return false;
  if ((*st = tp_act(t, TP_MARK, c, 0, 0, 1))) return false;
  t->n_row++;
  return true; /* the output, after the AllReduce, is whole */
}

/* A node reading a sharded value: applies its rule. */
static bool tp_rule(Tp* t, OxNode* c, OnyxStatus** st) {
  if (ox_opt_is(c, "MatMul") && c->n_inputs == 2) return tp_rule_matmul(t, c, st);
  if (tp_in(c->op_type, tp_binary) && !*c->domain) return tp_rule_binary(t, c, st);
  if (tp_in(c->op_type, tp_unary) && !*c->domain) return tp_rule_unary(t, c);
  if (ox_opt_is(c, "Softmax") || ox_opt_is(c, "LogSoftmax")) return tp_rule_softmax(t, c);
  if (ox_opt_is(c, "Split")) return tp_rule_split(t, c, st);
  if (ox_opt_is(c, "Reshape")) return tp_rule_reshape(t, c, st);
  if (ox_opt_is(c, "Transpose")) return tp_rule_transpose(t, c);
  return false;
}

/* Analyses the region starting at node position i0; commits its edits and
 * claims its nodes when it can be sharded. */
static OnyxStatus* tp_region(Tp* t, size_t i0) {
  OxGraph* g = t->g;
  OxNode* m = g->nodes[i0];
  if (!ox_opt_is(m, "MatMul") || m->n_inputs != 2 || t->claimed[i0]) return NULL;
  const OxValue* X = m->inputs[0];
  const OxValue* W = m->inputs[1];
  OxValue* out = m->outputs[0];
  if (!X || X->constant || !W || !W->constant || W->rank != 2 || !out || out->rank < 1 ||
      W->dims[1] < 0)
    return NULL;
  int32_t R = out->rank;
  int64_t G = tp_blocks_ahead(out, R - 1);
  if (W->dims[1] % (G * t->size)) return NULL;
  for (size_t v = 0; v < g->n_values; v++)
    t->sh[v] = (TpShard){-1, 1};
  memset(t->touched, 0, g->n_nodes * sizeof *t->touched);
  size_t acts0 = t->n_acts, rows0 = t->n_row;
  OnyxStatus* st = tp_act(t, TP_SLICE, m, 1, 1, G);
  if (!st) st = tp_act(t, TP_MARK, m, 0, 0, 1);
  if (st) return st;
  t->sh[out->index] = (TpShard){R - 1, G};
  t->touched[i0] = true;
  bool ok = true;
  for (size_t j = i0 + 1; ok && j < g->n_nodes; j++) {
    OxNode* c = g->nodes[j];
    bool reads = false;
    for (size_t k = 0; k < c->n_inputs; k++)
      reads = reads || tp_get(t, c->inputs[k]).axis >= 0;
    if (!reads) continue;
    ok = !t->claimed[j] && tp_rule(t, c, &st);
    if (st) return st;
    t->touched[j] = true;
  }
  for (size_t v = 0; ok && v < g->n_values; v++)
    if (t->sh[v].axis >= 0 && g->values[v]->is_graph_output) ok = false;
  if (!ok || t->n_row == rows0) {
    t->n_acts = acts0; /* drop the region's edits: it stays whole */
    t->n_row = rows0;
    return NULL;
  }
  for (size_t j = 0; j < g->n_nodes; j++)
    t->claimed[j] = t->claimed[j] || t->touched[j];
  t->regions++;
  t->n_col++;
  ox_str_addf(&t->report, "%s'%s' column-parallel%s", t->regions > 1 ? "; " : "", m->name,
              G > 1 ? " (packed in equal parts)" : "");
  for (size_t k = acts0; k < t->n_acts; k++)
    if (t->acts[k].kind == TP_ALLREDUCE)
      ox_str_addf(&t->report, ", '%s' row-parallel + AllReduce", t->acts[k].n->name);
  return NULL;
}

/* --- applying the edits --------------------------------------------------------------------- */

/* Rank r's slice of t along `axis`: per block of the G blocks, its 1/size. */
static OnyxStatus* tp_slice(const Tp* t, const OxTensor* src, int32_t axis, int64_t blocks,
                            OxTensor** out) {
  if (src->type == ONYX_ELEM_STRING || axis < 0 || (size_t)axis >= src->rank)
    return ox_status(ONYX_FAIL, "tensor parallel: cannot slice a constant along axis %d",
                     (int)axis);
  int64_t D = src->dims[axis], part = D / (blocks * t->size);
  int64_t dims[16];
  if (src->rank > 16) return ox_status(ONYX_FAIL, "tensor parallel: constant of rank > 16");
  memcpy(dims, src->dims, src->rank * sizeof *dims);
  dims[axis] = D / t->size;
  OxTensor* o = NULL;
  OX_TRY(ox_tensor_new(src->type, dims, src->rank, &o));
  size_t es = 0, outer = 1, inner = 1;
  OnyxStatus* st = ox_type_bytes(src->type, 1, &es);
  for (size_t k = 0; k < (size_t)axis; k++)
    outer *= (size_t)src->dims[k];
  for (size_t k = (size_t)axis + 1; k < src->rank; k++)
    inner *= (size_t)src->dims[k];
  inner *= es;
  const unsigned char* s = src->data;
  unsigned char* d = o->data;
  size_t chunk = (size_t)part * inner;
  for (size_t i = 0; !st && i < outer; i++)
    for (int64_t b = 0; b < blocks; b++) {
      size_t from = (i * (size_t)D + (size_t)(b * (D / blocks) + t->rank * part)) * inner;
      size_t to = (i * (size_t)(D / t->size) + (size_t)(b * part)) * inner;
      memcpy(d + to, s + from, chunk);
    }
  if (st) {
    ox_tensor_free(o);
    return st;
  }
  *out = o;
  return NULL;
}

static OnyxStatus* tp_mark(OxNode* n, const char* from) {
  if (n->origin_pass) return NULL;
  n->origin_pass = ox_strdup(TP_PASS);
  n->origin_nodes = ox_strdup(from);
  return n->origin_pass && n->origin_nodes ? NULL : ox_oom();
}

/* Makes input i of n read v; the constant it read before, when nothing reads
 * it any more, is freed (the rank's memory holds its slice only). */
static OnyxStatus* tp_replace_const(OxNode* n, size_t i, OxValue* v) {
  OxValue* old = n->inputs[i];
  OX_TRY(ox_opt_set_input(n, i, v));
  if (old && old->constant && !old->n_consumers && !old->is_graph_output && !old->is_graph_input) {
    ox_tensor_free(old->constant);
    old->constant = NULL;
  }
  return NULL;
}

static OnyxStatus* tp_ints_const(OxOpt* o, OxNode* n, size_t input, const int64_t* v, size_t k) {
  int64_t dims[1] = {(int64_t)k};
  OxTensor* c = NULL;
  OX_TRY(ox_tensor_new(ONYX_ELEM_INT64, dims, 1, &c));
  if (k) memcpy(c->data, v, k * sizeof *v);
  OxValue* nv = NULL;
  OX_TRY(ox_opt_new_constant(o, n->inputs[input]->name, c, &nv));
  return tp_replace_const(n, input, nv);
}

static OnyxStatus* tp_apply(Tp* t, OxOpt* o, const TpAction* a) {
  OxNode* n = a->n;
  switch (a->kind) {
  case TP_SLICE: {
    OxTensor* s = NULL;
    OX_TRY(tp_slice(t, n->inputs[a->input]->constant, a->axis, a->blocks, &s));
    OxValue* v = NULL;
    OX_TRY(ox_opt_new_constant(o, n->inputs[a->input]->name, s, &v));
    return tp_replace_const(n, a->input, v);
  }
  case TP_SHAPE:
  case TP_SPLIT_INPUT: {
    int64_t* v = NULL;
    size_t k = 0;
    if (!ox_opt_const_ints(n->inputs[a->input], &v, &k))
      return ox_status(ONYX_FAIL, "tensor parallel: '%s' lost its constant input", n->name);
    for (size_t i = 0; i < k; i++)
      if (a->kind == TP_SPLIT_INPUT || (i == (size_t)a->axis && v[i] > 0)) v[i] /= t->size;
    OnyxStatus* st = tp_ints_const(o, n, a->input, v, k);
    free(v);
    return st;
  }
  case TP_SPLIT_ATTR:
    for (size_t i = 0; i < n->n_attrs; i++)
      if (!strcmp(n->attrs[i].name, "split"))
        for (size_t k = 0; k < n->attrs[i].count; k++)
          n->attrs[i].ints[k] /= t->size;
    return NULL;
  case TP_ALLREDUCE: {
    OxValue* full = n->outputs[0];
    char* name = NULL;
    OX_TRY(ox_opt_fresh_name(o, full->name, &name));
    OxValue* partial = NULL;
    OnyxStatus* st = ox_graph_value(t->g, name, &partial);
    free(name);
    if (st) return st;
    OX_TRY(ox_value_set(partial, full->type, full->rank, full->dims));
    ox_opt_set_output(o, n, 0, partial);
    const char* ins[1] = {partial->name};
    const char* outs[1] = {full->name};
    OX_TRY(ox_opt_fresh_name(o, n->name, &name));
    OxNode* ar = NULL;
    st = ox_graph_add_node(t->g, name, "AllReduce", TP_DOMAIN, ins, 1, outs, 1, &ar);
    free(name);
    if (!st) st = ox_opt_attr_string(ar, "reduce", "sum");
    if (!st) st = ox_opt_attr_int(ar, "group_size", t->size);
    if (!st) st = tp_mark(ar, n->name);
    return st;
  }
  case TP_MARK:
    return tp_mark(n, n->name);
  }
  return NULL;
}

static OnyxStatus* tp_import(OxGraph* g) {
  if (ox_graph_opset(g, TP_DOMAIN) >= 0) return NULL;
  OxOpsetImport* ops = realloc(g->opsets, (g->n_opsets + 1) * sizeof *ops);
  if (!ops) return ox_oom();
  g->opsets = ops;
  ops[g->n_opsets].domain = ox_strdup(TP_DOMAIN);
  if (!ops[g->n_opsets].domain) return ox_oom();
  ops[g->n_opsets++].version = 1;
  return NULL;
}

OnyxStatus* ox_tensor_parallel(OxGraph* g, int rank, int size, char** report) {
  *report = NULL;
  if (size < 1 || rank < 0 || rank >= size)
    return ox_status(ONYX_INVALID_ARGUMENT, "tensor parallel: rank %d of a world of %d", rank,
                     size);
  if (size == 1) {
    *report = ox_strdup("a world of one rank: nothing sharded");
    return NULL;
  }
  Tp t = {.g = g, .rank = rank, .size = size};
  t.sh = calloc(g->n_values + 1, sizeof *t.sh);
  t.claimed = calloc(g->n_nodes + 1, sizeof *t.claimed);
  t.touched = calloc(g->n_nodes + 1, sizeof *t.touched);
  OnyxStatus* st = t.sh && t.claimed && t.touched ? NULL : ox_oom();
  size_t n_nodes = g->n_nodes;
  for (size_t i = 0; !st && i < n_nodes; i++)
    st = tp_region(&t, i);
  OxOptConfig cfg = {0};
  OxOpt o = {.g = g, .cfg = &cfg, .pass = TP_PASS};
  if (!st && t.regions) st = tp_import(g);
  for (size_t k = 0; !st && k < t.n_acts; k++)
    st = tp_apply(&t, &o, &t.acts[k]);
  if (!st && t.regions) st = ox_graph_toposort(g);
  if (!st) {
    OxStr r = {0};
    ox_str_addf(&r, "rank %d of %d: %zu region%s sharded (%zu row-parallel product%s)%s", rank,
                size, t.regions, t.regions == 1 ? "" : "s", t.n_row, t.n_row == 1 ? "" : "s",
                t.regions ? ": " : "");
    char* body = ox_str_take(&t.report);
    if (body) ox_str_addf(&r, "%s", body);
    free(body);
    *report = ox_str_take(&r);
  }
  ox_str_free(&t.report);
  free(t.sh);
  free(t.claimed);
  free(t.touched);
  free(t.acts);
  free(o.added);
  return st;
}
