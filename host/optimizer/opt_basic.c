/* opt_basic.c — the basic level: identity/dropout elimination, shape-op
 * simplification, constant folding and common-subexpression elimination. */
#include <stdlib.h>
#include <string.h>
#include "opt_internal.h"

/* Ops whose result is not a function of their inputs. */
static bool ox_nondeterministic(const OxNode* n) {
  static const char* const ops[] = {"RandomNormal",      "RandomUniform", "RandomNormalLike",
                                    "RandomUniformLike", "Multinomial",   "Bernoulli"};
  if (*n->domain) return true; /* unknown semantics: leave alone */
  for (size_t i = 0; i < OX_ARRAY_LEN(ops); i++)
    if (!strcmp(n->op_type, ops[i])) return true;
  return false;
}

static bool ox_has_subgraph(const OxNode* n) {
  for (size_t i = 0; i < n->n_attrs; i++)
    if (n->attrs[i].type == ONYX_ATTR_GRAPH || n->attrs[i].type == ONYX_ATTR_GRAPHS) return true;
  return false;
}

/* Sequence/optional/map values are not plain tensors: never folded. */
static bool ox_tensor_only(const OxNode* n) {
  static const char* const prefixes[] = {"Sequence", "Optional", "SplitToSequence",
                                         "ConcatFromSequence"};
  for (size_t i = 0; i < OX_ARRAY_LEN(prefixes); i++)
    if (!strncmp(n->op_type, prefixes[i], strlen(prefixes[i]))) return false;
  return true;
}

/* --- elimination ------------------------------------------------------------------------- */

/* Removes n, whose output `y` equals its input `x`, when the graph lets us:
 * consumers of y read x; or, when y must keep its name (a graph output), x's
 * producer writes y directly. Returns whether it did. */
static OnyxStatus* ox_bypass(OxOpt* o, OxNode* n, OxValue* x, OxValue* y, bool* done) {
  *done = false;
  if (!x || !y || x->type != y->type) return NULL;
  for (size_t i = 1; i < n->n_outputs; i++) /* other outputs (Dropout's mask) unused */
    if (n->outputs[i] && (n->outputs[i]->n_consumers || ox_opt_pinned(o, n->outputs[i])))
      return NULL;
  if (!ox_opt_pinned(o, y)) {
    OX_TRY(ox_opt_replace_uses(y, x));
    ox_opt_remove(o, n);
    *done = true;
    return NULL;
  }
  OxNode* p = x->producer;
  if (!p || ox_opt_pinned(o, x) || x->n_consumers != 1 || y->is_graph_input) return NULL;
  int32_t slot = x->producer_slot;
  ox_opt_remove(o, n);
  ox_opt_set_output(o, p, (size_t)slot, y);
  *done = true;
  return NULL;
}

static bool ox_is_noop(const OxNode* n) {
  if (*n->domain || n->n_inputs < 1 || !n->inputs[0] || n->n_outputs < 1 || !n->outputs[0])
    return false;
  if (!strcmp(n->op_type, "Identity")) return true;
  if (!strcmp(n->op_type, "Dropout")) {
    if (ox_node_attr_int(n, "is_test", 1) == 0 && n->since_version < 7) return false;
    if (n->n_inputs >= 3 && n->inputs[2]) {
      double train;
      if (!ox_opt_const_scalar(n->inputs[2], &train) || train != 0) return false;
    }
    return true;
  }
  if (!strcmp(n->op_type, "Pad")) { /* every pad 0, in any mode: the input as it is */
    int64_t begin[OX_OPT_PAD_MAX_RANK], end[OX_OPT_PAD_MAX_RANK];
    if (!ox_opt_pad_amounts(n, begin, end)) return false;
    for (int32_t d = 0; d < n->inputs[0]->rank; d++)
      if (begin[d] || end[d]) return false;
    return true;
  }
  if (!strcmp(n->op_type, "Cast"))
    return n->inputs[0]->type == n->outputs[0]->type &&
           ox_node_attr_int(n, "to", -1) == (int64_t)n->inputs[0]->type &&
           n->inputs[0]->type != ONYX_ELEM_UNDEFINED;
  return false;
}

static OnyxStatus* ox_eliminate_noop(OxOpt* o, OxNode* n, bool* done) {
  return ox_is_noop(n) ? ox_bypass(o, n, n->inputs[0], n->outputs[0], done) : NULL;
}

OnyxStatus* ox_pass_eliminate(OxOpt* o, bool* changed) {
  return ox_opt_rewrite_each(o, ox_eliminate_noop, &o->stats->eliminated, changed);
}

/* --- shape-op simplification --------------------------------------------------------------- */

static OnyxStatus* ox_const_i64(const int64_t* vals, size_t count, bool scalar, OxTensor** out) {
  int64_t dims[1] = {(int64_t)count};
  OX_TRY(ox_tensor_new(ONYX_ELEM_INT64, dims, scalar ? 0 : 1, out));
  if (count) memcpy((*out)->data, vals, count * sizeof *vals);
  return NULL;
}

/* Replaces node n (one output) by the constant t: the output value becomes
 * an initializer. */
static void ox_become_constant(OxOpt* o, OxNode* n, size_t slot, OxTensor* t) {
  OxValue* y = n->outputs[slot];
  ox_opt_remove(o, n);
  y->constant = t;
}

static bool ox_clamp_range(int64_t rank, int64_t* start, int64_t* end) {
  if (*start < 0) *start += rank;
  if (*end < 0) *end += rank;
  if (*start < 0) *start = 0;
  if (*end > rank) *end = rank;
  if (*start > rank) *start = rank;
  if (*end < *start) *end = *start;
  return true;
}

/* Shape(x) with x's shape static -> constant; Size likewise; Gather(Shape(x),
 * constant indices) when the dims it picks are static. */
static OnyxStatus* ox_simplify_shape(OxOpt* o, OxNode* n, bool* done) {
  *done = false;
  OxValue* y = n->n_outputs ? n->outputs[0] : NULL;
  if (!y || ox_opt_pinned(o, y) || n->n_inputs < 1 || !n->inputs[0]) return NULL;
  const OxValue* x = n->inputs[0];
  OxTensor* t = NULL;
  if (ox_opt_is(n, "Shape") && ox_opt_static_shape(x)) {
    int64_t start = ox_node_attr_int(n, "start", 0), end = ox_node_attr_int(n, "end", x->rank);
    ox_clamp_range(x->rank, &start, &end);
    OX_TRY(ox_const_i64(x->dims + start, (size_t)(end - start), false, &t));
  } else if (ox_opt_is(n, "Size") && ox_opt_static_shape(x)) {
    int64_t count = 1;
    for (int32_t i = 0; i < x->rank; i++)
      count *= x->dims[i];
    OX_TRY(ox_const_i64(&count, 1, true, &t));
  } else if (ox_opt_is(n, "Gather") && n->n_inputs == 2 && ox_node_attr_int(n, "axis", 0) == 0) {
    OxNode* sh = ox_opt_producer(n, 0, "Shape");
    if (!sh || !sh->inputs[0] || sh->inputs[0]->rank < 0) return NULL;
    const OxValue* src = sh->inputs[0];
    int64_t start = ox_node_attr_int(sh, "start", 0), end = ox_node_attr_int(sh, "end", src->rank);
    ox_clamp_range(src->rank, &start, &end);
    int64_t len = end - start;
    int64_t* idx = NULL;
    size_t count = 0;
    if (!ox_opt_const_ints(n->inputs[1], &idx, &count)) return NULL;
    bool ok = n->inputs[1]->constant->rank <= 1;
    for (size_t i = 0; ok && i < count; i++) {
      int64_t k = idx[i] < 0 ? idx[i] + len : idx[i];
      ok = k >= 0 && k < len && src->dims[start + k] >= 0;
      if (ok) idx[i] = src->dims[start + k];
    }
    OnyxStatus* st = ok ? ox_const_i64(idx, count, n->inputs[1]->constant->rank == 0, &t) : NULL;
    free(idx);
    OX_TRY(st);
    if (!ok) return NULL;
  } else if (ox_opt_is(n, "Reshape") && n->n_inputs >= 2) {
    /* Reshape(Reshape(x, s1), s2) -> Reshape(x, s2) when s2 holds no 0
     * (a 0 copies a dim of the input, which would change). */
    OxNode* inner = ox_opt_producer(n, 0, "Reshape");
    if (!inner || !ox_opt_single_use(o, n->inputs[0]) || !n->inputs[1]->constant) return NULL;
    int64_t* s2 = NULL;
    size_t count = 0;
    if (!ox_opt_const_ints(n->inputs[1], &s2, &count)) return NULL;
    bool zero = false;
    for (size_t i = 0; i < count; i++)
      zero = zero || s2[i] == 0;
    free(s2);
    if (zero) return NULL;
    OX_TRY(ox_opt_set_input(n, 0, inner->inputs[0]));
    ox_opt_remove(o, inner);
    *done = true;
    return NULL;
  } else {
    return NULL;
  }
  ox_become_constant(o, n, 0, t);
  *done = true;
  return NULL;
}

OnyxStatus* ox_pass_shapes(OxOpt* o, bool* changed) {
  return ox_opt_rewrite_each(o, ox_simplify_shape, &o->stats->shapes, changed);
}

/* --- constant folding ------------------------------------------------------------------------ */

static bool ox_foldable(const OxOpt* o, const OxNode* n) {
  if (ox_nondeterministic(n) || ox_has_subgraph(n) || !ox_tensor_only(n) || !n->n_outputs)
    return false;
  /* From the extended level on, a DequantizeLinear of constant weights
   * stays: opt_qdq.c fuses it with its Conv or MatMul into a quantized
   * kernel after placement, and folds the ones it leaves (qdq_fold). */
  if (o->cfg->level >= ONYX_OPT_EXTENDED && !*n->domain && !strcmp(n->op_type, "DequantizeLinear"))
    return false;
  size_t present = 0;
  for (size_t i = 0; i < n->n_inputs; i++) {
    const OxValue* v = n->inputs[i];
    if (!v) continue;
    if (!v->constant || v->is_graph_input || v->constant->device.kind != ONYX_DEVICE_CPU)
      return false;
    present++;
  }
  if (!present && strcmp(n->op_type, "Constant")) return false;
  for (size_t i = 0; i < n->n_outputs; i++)
    if (n->outputs[i] && ox_opt_pinned(o, n->outputs[i])) return false;
  return true;
}

OnyxStatus* ox_pass_fold(OxOpt* o, bool* changed) {
  if (!o->cfg->eval) return NULL;
  size_t limit = o->cfg->max_fold_bytes ? o->cfg->max_fold_bytes : ((size_t)64 << 20);
  for (size_t i = 0; i < o->g->n_nodes;) {
    OxNode* n = o->g->nodes[i];
    if (!ox_foldable(o, n)) {
      i++;
      continue;
    }
    OxTensor* outs[4] = {0};
    size_t n_out = n->n_outputs;
    if (n_out > 4) {
      i++;
      continue;
    }
    OnyxStatus* st = o->cfg->eval(o->cfg->eval_ctx, n, outs);
    bool ok = !st;
    /* "Cannot fold" is not an error; a spent time budget ends folding (the
     * evaluator logs it), leaving the nodes not folded yet as they are. */
    bool out_of_time = st && st->code == ONYX_CANCELLED;
    ox_status_free(st);
    if (out_of_time) break;
    for (size_t k = 0; ok && k < n_out; k++)
      ok = !n->outputs[k] ||
           (outs[k] && outs[k]->bytes <= limit && outs[k]->type == n->outputs[k]->type);
    if (!ok) {
      for (size_t k = 0; k < n_out; k++)
        ox_tensor_free(outs[k]);
      i++;
      continue;
    }
    OxValue* ys[4] = {0};
    for (size_t k = 0; k < n_out; k++)
      ys[k] = n->outputs[k];
    ox_opt_remove(o, n);
    for (size_t k = 0; k < n_out; k++) {
      if (!ys[k]) {
        ox_tensor_free(outs[k]);
        continue;
      }
      ys[k]->constant = outs[k];
      OX_TRY(ox_value_set(ys[k], outs[k]->type, (int32_t)outs[k]->rank, outs[k]->dims));
    }
    o->stats->folded++;
    *changed = true;
  }
  return NULL;
}

/* --- common-subexpression elimination --------------------------------------------------------- */

/* A key that equal nodes share: op, domain, input values, attributes. NULL
 * when the node must not be merged (or on OOM, which only skips it). */
static char* ox_cse_key(const OxNode* n) {
  if (ox_nondeterministic(n) || !n->n_outputs) return NULL;
  OxStr s = {0};
  ox_str_addf(&s, "%s|%s|%zu|%zu", n->domain, n->op_type, n->n_inputs, n->n_outputs);
  for (size_t i = 0; i < n->n_inputs; i++)
    ox_str_addf(&s, "|%zd", n->inputs[i] ? (ssize_t)n->inputs[i]->index : (ssize_t)-1);
  for (size_t i = 0; i < n->n_outputs; i++)
    ox_str_addf(&s, "%c", n->outputs[i] ? 'o' : '-');
  for (size_t i = 0; i < n->n_attrs; i++) {
    const OxAttr* a = &n->attrs[i];
    ox_str_addf(&s, "|%s:%d:", a->name, (int)a->type);
    switch (a->type) {
    case ONYX_ATTR_INT:
      ox_str_addf(&s, "%lld", (long long)a->i);
      break;
    case ONYX_ATTR_FLOAT: {
      uint32_t bits;
      memcpy(&bits, &a->f, sizeof bits);
      ox_str_addf(&s, "%08x", bits);
      break;
    }
    case ONYX_ATTR_STRING:
      if (a->s && memchr(a->s, '\0', a->s_len)) { /* the key would end at the NUL: not compared */
        ox_str_free(&s);
        return NULL;
      }
      ox_str_addf(&s, "%zu:%s", a->s_len, a->s ? a->s : "");
      break;
    case ONYX_ATTR_INTS:
      for (size_t k = 0; k < a->count; k++)
        ox_str_addf(&s, "%lld,", (long long)a->ints[k]);
      break;
    case ONYX_ATTR_FLOATS:
      for (size_t k = 0; k < a->count; k++) {
        uint32_t bits;
        memcpy(&bits, &a->floats[k], sizeof bits);
        ox_str_addf(&s, "%08x,", bits);
      }
      break;
    default:
      ox_str_free(&s);
      return NULL; /* tensors, graphs, string lists: not compared */
    }
  }
  if (s.oom) {
    ox_str_free(&s);
    return NULL;
  }
  return ox_str_take(&s);
}

OnyxStatus* ox_pass_cse(OxOpt* o, bool* changed) {
  OxMap seen = {0};
  char** keys = calloc(o->g->n_nodes + 1, sizeof *keys);
  size_t n_keys = 0;
  OnyxStatus* st = keys ? NULL : ox_oom();
  for (size_t i = 0; !st && i < o->g->n_nodes;) {
    OxNode* n = o->g->nodes[i];
    char* key = ox_cse_key(n);
    if (!key) {
      i++;
      continue;
    }
    OxNode* first = ox_map_get(&seen, key);
    bool merge = first != NULL;
    for (size_t k = 0; merge && k < n->n_outputs; k++)
      merge = !n->outputs[k] || !ox_opt_pinned(o, n->outputs[k]);
    if (!merge) {
      keys[n_keys++] = key;
      if (!first && !ox_map_put(&seen, key, n)) st = ox_oom();
      i++;
      continue;
    }
    free(key);
    for (size_t k = 0; !st && k < n->n_outputs; k++)
      if (n->outputs[k]) st = ox_opt_replace_uses(n->outputs[k], first->outputs[k]);
    if (st) break;
    ox_opt_remove(o, n);
    o->stats->cse++;
    *changed = true;
  }
  ox_map_free(&seen);
  for (size_t i = 0; i < n_keys; i++)
    free(keys[i]);
  free(keys);
  return st;
}
