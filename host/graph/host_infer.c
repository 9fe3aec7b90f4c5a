/* host_infer.c — resolve-time inference of the ops the host runs (ox_host_op):
 * the control-flow ops (If, Loop, Scan, SequenceMap, FlexAttention), whose
 * subgraphs are typed from the node and resolved first, and the sequence and
 * optional ops, whose outputs take a kind (sequence, optional) as well as a
 * type. It is graph code: it only types values and resolves subgraphs; the
 * host runs these ops in host/exec/control.c and sequence.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_checked.h"
#include "ox_graph.h"

/* An error naming the node: ONYX_INVALID_MODEL for a malformed subgraph or
 * node, ONYX_INVALID_ARGUMENT for a sequence op given the wrong kind. */
static OnyxStatus* ox_node_fail(OnyxStatusCode code, const OxNode* n, const char* fmt, ...)
    OX_PRINTF(3, 4);
static OnyxStatus* ox_node_fail(OnyxStatusCode code, const OxNode* n, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char* text = NULL;
  if (vasprintf(&text, fmt, ap) < 0) text = NULL;
  va_end(ap);
  OnyxStatus* st =
      ox_status(code, "node '%s' (%s): %s", n->name, n->op_type, text ? text : "out of memory");
  free(text);
  return st;
}

/* --- sequence and optional ops ------------------------------------------------------------ */

static OnyxStatus* ox_out(OxValue* v, uint8_t kind, OnyxElemType type, int32_t rank,
                          const int64_t* dims) {
  if (!v) return NULL;
  OX_TRY(ox_value_set(v, type, rank, dims));
  v->kind = kind;
  return NULL;
}

static bool ox_is_seq(uint8_t k) {
  return k == OX_VK_SEQUENCE || k == OX_VK_OPT_SEQUENCE;
}

static OnyxStatus* ox_seq_infer(OxNode* n) {
  const char* op = n->op_type;
  OxValue* in0 = n->n_inputs ? n->inputs[0] : NULL;
  OxValue* out0 = n->n_outputs ? n->outputs[0] : NULL;
  if (!strcmp(op, "SequenceEmpty")) {
    OnyxElemType t = (OnyxElemType)ox_node_attr_int(n, "dtype", ONYX_ELEM_FLOAT32);
    return ox_out(out0, OX_VK_SEQUENCE, t, -1, NULL);
  }
  if (!in0 && strcmp(op, "Optional") && strcmp(op, "OptionalHasElement"))
    return ox_node_fail(ONYX_INVALID_ARGUMENT, n, "its first input is missing");
  if (!strcmp(op, "SequenceConstruct") || !strcmp(op, "SplitToSequence"))
    return ox_out(out0, OX_VK_SEQUENCE, in0->type, -1, NULL);
  if (!strcmp(op, "SequenceInsert") || !strcmp(op, "SequenceErase")) {
    if (in0->kind != OX_VK_SEQUENCE)
      return ox_node_fail(ONYX_INVALID_ARGUMENT, n, "input 0 '%s' is not a sequence", in0->name);
    return ox_out(out0, OX_VK_SEQUENCE, in0->type, -1, NULL);
  }
  if (!strcmp(op, "SequenceAt") || !strcmp(op, "ConcatFromSequence")) {
    if (in0->kind != OX_VK_SEQUENCE)
      return ox_node_fail(ONYX_INVALID_ARGUMENT, n, "input 0 '%s' is not a sequence", in0->name);
    return ox_out(out0, OX_VK_TENSOR, in0->type, -1, NULL);
  }
  if (!strcmp(op, "SequenceLength")) return ox_out(out0, OX_VK_TENSOR, ONYX_ELEM_INT64, 0, NULL);
  if (!strcmp(op, "OptionalHasElement")) return ox_out(out0, OX_VK_TENSOR, ONYX_ELEM_BOOL, 0, NULL);
  if (!strcmp(op, "Optional")) {
    if (in0)
      return ox_out(out0, ox_is_seq(in0->kind) ? OX_VK_OPT_SEQUENCE : OX_VK_OPT_TENSOR, in0->type,
                    -1, NULL);
    const OxAttr* a = ox_node_attr(n, "type");
    if (!a || a->type != ONYX_ATTR_TYPE_PROTO)
      return ox_node_fail(ONYX_INVALID_ARGUMENT, n, "has neither an input nor a 'type' attribute");
    return ox_out(out0, ox_is_seq(a->tp_kind) ? OX_VK_OPT_SEQUENCE : OX_VK_OPT_TENSOR, a->tp_elem,
                  -1, NULL);
  }
  if (!strcmp(op, "OptionalGetElement")) {
    if (ox_is_seq(in0->kind)) return ox_out(out0, OX_VK_SEQUENCE, in0->type, -1, NULL);
    bool plain = in0->kind == OX_VK_TENSOR;
    return ox_out(out0, OX_VK_TENSOR, in0->type, plain ? in0->rank : -1, plain ? in0->dims : NULL);
  }
  /* Identity and other pass-through ops over a container. */
  if (!strcmp(op, "Identity"))
    return ox_out(out0, in0->kind, in0->type, in0->kind == OX_VK_TENSOR ? in0->rank : -1,
                  in0->kind == OX_VK_TENSOR ? in0->dims : NULL);
  return ox_node_fail(ONYX_INVALID_ARGUMENT, n,
                      "reads or writes a sequence or optional value, which only the control-flow, "
                      "sequence and optional ops accept");
}

/* --- ai.onnx.ml ops over maps: ZipMap, DictVectorizer, CastMap ---------------------------------
 * Their attributes are checked here, once, at resolve time; host/exec/ml_map.c
 * runs them trusting what passed. */

bool ox_ml_map_op(const OxNode* n) {
  return !strcmp(n->domain, "ai.onnx.ml") &&
         (!strcmp(n->op_type, "ZipMap") || !strcmp(n->op_type, "DictVectorizer") ||
          !strcmp(n->op_type, "CastMap"));
}

static int ox_cmp_i64(const void* a, const void* b) {
  int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
  return (x > y) - (x < y);
}

/* A strings attribute's entry as bytes. */
typedef struct OxLabelRef {
  const char* s;
  size_t len;
} OxLabelRef;

static int ox_cmp_label(const void* a, const void* b) {
  const OxLabelRef *x = a, *y = b;
  size_t m = x->len < y->len ? x->len : y->len;
  int c = m ? memcmp(x->s, y->s, m) : 0;
  return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* One of two list attributes (int64s or strings) naming labels or a
 * vocabulary: exactly one present and not empty, no entry twice. *key: the
 * key type it gives (INT64 or STRING); *count: its length. */
static OnyxStatus* ox_labels_check(const OxNode* n, const char* ints_name, const char* strs_name,
                                   OnyxElemType* key, size_t* count) {
  const OxAttr* ai = ox_node_attr(n, ints_name);
  const OxAttr* as = ox_node_attr(n, strs_name);
  if (ai && ai->type != ONYX_ATTR_INTS)
    return ox_node_fail(ONYX_INVALID_MODEL, n, "attribute '%s' must be a list of ints", ints_name);
  if (as && as->type != ONYX_ATTR_STRINGS)
    return ox_node_fail(ONYX_INVALID_MODEL, n, "attribute '%s' must be a list of strings",
                        strs_name);
  if (ai && !ai->count) ai = NULL;
  if (as && !as->count) as = NULL;
  if (!ai == !as)
    return ox_node_fail(ONYX_INVALID_MODEL, n, "needs exactly one of '%s' and '%s' (not empty)",
                        ints_name, strs_name);
  *key = ai ? ONYX_ELEM_INT64 : ONYX_ELEM_STRING;
  *count = ai ? ai->count : as->count;
  OnyxStatus* st = NULL;
  if (ai) {
    int64_t* v = malloc(ai->count * sizeof *v);
    if (!v) return ox_oom();
    memcpy(v, ai->ints, ai->count * sizeof *v);
    qsort(v, ai->count, sizeof *v, ox_cmp_i64);
    for (size_t i = 1; i < ai->count && !st; i++)
      if (v[i] == v[i - 1])
        st = ox_node_fail(ONYX_INVALID_MODEL, n, "attribute '%s' holds %lld twice", ints_name,
                          (long long)v[i]);
    free(v);
    return st;
  }
  OxLabelRef* v = malloc(as->count * sizeof *v);
  if (!v) return ox_oom();
  for (size_t i = 0; i < as->count; i++)
    v[i] =
        (OxLabelRef){as->strings[i], as->strings_len ? as->strings_len[i] : strlen(as->strings[i])};
  qsort(v, as->count, sizeof *v, ox_cmp_label);
  for (size_t i = 1; i < as->count && !st; i++)
    if (!ox_cmp_label(&v[i], &v[i - 1]))
      st = ox_node_fail(ONYX_INVALID_MODEL, n, "attribute '%s' holds \"%.200s\" twice", strs_name,
                        v[i].s);
  free(v);
  return st;
}

static OnyxStatus* ox_out_map(OxValue* v, uint8_t kind, OnyxElemType key, OnyxElemType type) {
  if (!v) return NULL;
  OX_TRY(ox_out(v, kind, type, -1, NULL));
  v->map_key = key;
  return NULL;
}

static const char* ox_vk_word(uint8_t k) {
  return k == OX_VK_TENSOR     ? "a tensor"
         : k == OX_VK_MAP      ? "a map"
         : k == OX_VK_SEQ_MAP  ? "a sequence of maps"
         : k == OX_VK_SEQUENCE ? "a sequence"
                               : "an optional";
}

static OnyxStatus* ox_ml_map_infer(OxNode* n) {
  OxValue* in0 = n->n_inputs ? n->inputs[0] : NULL;
  OxValue* out0 = n->n_outputs ? n->outputs[0] : NULL;
  if (!in0) return ox_node_fail(ONYX_INVALID_MODEL, n, "input 0 is missing");
  const char* op = n->op_type;
  if (!strcmp(op, "ZipMap")) {
    OnyxElemType key;
    size_t count;
    OX_TRY(ox_labels_check(n, "classlabels_int64s", "classlabels_strings", &key, &count));
    if (in0->kind != OX_VK_TENSOR || in0->type != ONYX_ELEM_FLOAT32)
      return ox_node_fail(ONYX_INVALID_ARGUMENT, n, "input 0 '%s' must be a float tensor",
                          in0->name);
    if (in0->rank == 0 || in0->rank > 2)
      return ox_node_fail(ONYX_INVALID_ARGUMENT, n,
                          "input 0 '%s' must be [N, C] or [C], not of rank %d", in0->name,
                          (int)in0->rank);
    if (in0->rank > 0 && in0->dims[in0->rank - 1] >= 0 &&
        (uint64_t)in0->dims[in0->rank - 1] != (uint64_t)count)
      return ox_node_fail(ONYX_INVALID_ARGUMENT, n,
                          "input 0 '%s' has %lld columns but the node has %zu class labels",
                          in0->name, (long long)in0->dims[in0->rank - 1], count);
    return ox_out_map(out0, OX_VK_SEQ_MAP, key, ONYX_ELEM_FLOAT32);
  }
  if (in0->kind != OX_VK_MAP)
    return ox_node_fail(ONYX_INVALID_ARGUMENT, n, "input 0 '%s' must be a map, not %s", in0->name,
                        ox_vk_word(in0->kind));
  if (!strcmp(op, "DictVectorizer")) {
    OnyxElemType key;
    size_t count;
    OX_TRY(ox_labels_check(n, "int64_vocabulary", "string_vocabulary", &key, &count));
    if (key != in0->map_key)
      return ox_node_fail(ONYX_INVALID_ARGUMENT, n,
                          "input 0 '%s' has %s keys but the node has a %s", in0->name,
                          ox_elem_name(in0->map_key),
                          key == ONYX_ELEM_INT64 ? "int64_vocabulary" : "string_vocabulary");
    if (count > (size_t)INT64_MAX) return ox_oom();
    int64_t dims[2] = {1, (int64_t)count};
    return ox_out(out0, OX_VK_TENSOR, in0->type, 2, dims);
  }
  /* CastMap */
  if (in0->map_key != ONYX_ELEM_INT64 ||
      (in0->type != ONYX_ELEM_FLOAT32 && in0->type != ONYX_ELEM_STRING))
    return ox_node_fail(ONYX_INVALID_ARGUMENT, n,
                        "input 0 '%s' must be map(int64, float) or map(int64, string), not "
                        "map(%s, %s)",
                        in0->name, ox_elem_name(in0->map_key), ox_elem_name(in0->type));
  OnyxElemType t = ox_castmap_to(n);
  if (t == ONYX_ELEM_UNDEFINED)
    return ox_node_fail(ONYX_INVALID_MODEL, n,
                        "attribute 'cast_to' is \"%.100s\" (TO_FLOAT, TO_STRING or TO_INT64)",
                        ox_node_attr_string(n, "cast_to", "TO_FLOAT"));
  const char* form = ox_node_attr_string(n, "map_form", "DENSE");
  bool sparse = !strcmp(form, "SPARSE");
  if (!sparse && strcmp(form, "DENSE"))
    return ox_node_fail(ONYX_INVALID_MODEL, n,
                        "attribute 'map_form' is \"%.100s\" (DENSE or SPARSE)", form);
  int64_t max_map = ox_node_attr_int(n, "max_map", 1);
  if (sparse && max_map <= 0)
    return ox_node_fail(ONYX_INVALID_MODEL, n,
                        "attribute 'max_map' is %lld: SPARSE needs a positive one",
                        (long long)max_map);
  int64_t dims[2] = {1, sparse ? max_map : ONYX_DIM_UNKNOWN};
  return ox_out(out0, OX_VK_TENSOR, t, 2, dims);
}

OnyxElemType ox_castmap_to(const OxNode* n) {
  const char* to = ox_node_attr_string(n, "cast_to", "TO_FLOAT");
  return !strcmp(to, "TO_FLOAT")    ? ONYX_ELEM_FLOAT32
         : !strcmp(to, "TO_STRING") ? ONYX_ELEM_STRING
         : !strcmp(to, "TO_INT64")  ? ONYX_ELEM_INT64
                                    : ONYX_ELEM_UNDEFINED;
}

/* --- control flow --------------------------------------------------------------------- */

static OxGraph* ox_node_graph(const OxNode* n, const char* name) {
  const OxAttr* a = ox_node_attr(n, name);
  return a && a->type == ONYX_ATTR_GRAPH ? a->g : NULL;
}

/* --- inference ------------------------------------------------------------------------- */

static OnyxStatus* ox_copy_type(OxValue* dst, const OxValue* src, bool with_shape) {
  OX_TRY(ox_value_set(dst, src->type, with_shape ? src->rank : -1, with_shape ? src->dims : NULL));
  dst->kind = src->kind;
  dst->map_key = src->map_key;
  return NULL;
}

/* Types a subgraph's outer-scope reads from the enclosing graphs. */
static OnyxStatus* ox_type_outer(const OxGraph* g, OxGraph* sub) {
  for (size_t i = 0; i < sub->n_values; i++) {
    OxValue* v = sub->values[i];
    if (!v->is_outer_scope || v->producer || v->constant || v->type != ONYX_ELEM_UNDEFINED)
      continue;
    const OxValue* o = NULL;
    for (const OxGraph* up = g; up && !o; up = up->parent)
      o = ox_graph_find(up, v->name);
    if (!o || o->type == ONYX_ELEM_UNDEFINED)
      return ox_status(ONYX_INVALID_MODEL, "subgraph '%s' reads '%s', whose type is not known",
                       sub->name, v->name);
    /* Type only: a branch not taken may not fit the shapes (If in a function
     * body is inferred for every case); kernels size outputs at run time. */
    OX_TRY(ox_copy_type(v, o, false));
  }
  return NULL;
}

/* Formal input i of a subgraph takes `src`'s type when it declares none. */
static OnyxStatus* ox_type_formal(OxGraph* sub, size_t i, const OxValue* src, OnyxElemType t,
                                  uint8_t kind, int32_t rank) {
  if (i >= sub->n_inputs) return NULL;
  OxValue* v = sub->inputs[i];
  if (v->type != ONYX_ELEM_UNDEFINED) return NULL;
  if (src) return ox_copy_type(v, src, src->kind == OX_VK_TENSOR && rank >= 0);
  /* A known rank with unknown dims: every dim ONYX_DIM_UNKNOWN. */
  int64_t dims[64];
  if (rank > 64) rank = -1;
  for (int32_t k = 0; k < rank; k++)
    dims[k] = ONYX_DIM_UNKNOWN;
  OX_TRY(ox_value_set(v, t, rank, rank > 0 ? dims : NULL));
  v->kind = kind;
  return NULL;
}

static OnyxStatus* ox_resolve_sub(const OxNode* n, const char* attr, OxGraph* g, OxGraph* sub,
                                  const OxSchemaRegistry* const* customs, size_t n_customs,
                                  OxGraphExpandFn expand) {
  OnyxStatus* st = ox_type_outer(g, sub);
  if (!st) st = ox_graph_resolve_expanding(sub, customs, n_customs, expand);
  if (st) return ox_status_wrap(st, "node '%s' (%s): subgraph '%s'", n->name, n->op_type, attr);
  return NULL;
}

static bool ox_seq_kind(uint8_t k) {
  return k == OX_VK_SEQUENCE || k == OX_VK_OPT_SEQUENCE;
}

static const char* ox_kind_word(uint8_t k) {
  return ox_seq_kind(k) ? "a sequence" : "a tensor";
}

/* Output `oi` of subgraph `attr` must agree with `want` (a value the node
 * declares or the subgraph's output feeds back into) in element type and in
 * being a tensor or a sequence; types not known yet are not compared. */
static OnyxStatus* ox_check_sub_output(const OxNode* n, const char* attr, const OxGraph* sub,
                                       size_t oi, const OxValue* want, const char* what) {
  const OxValue* got = sub->outputs[oi];
  if (!want || !got || want->type == ONYX_ELEM_UNDEFINED) return NULL; /* nothing declared */
  if (ox_seq_kind(got->kind) != ox_seq_kind(want->kind))
    return ox_node_fail(
        ONYX_INVALID_MODEL, n, "subgraph '%s' output %zu ('%s') is %s, but %s ('%s') is %s", attr,
        oi, got->name, ox_kind_word(got->kind), what, want->name, ox_kind_word(want->kind));
  if (got->type != ONYX_ELEM_UNDEFINED && got->type != want->type)
    return ox_node_fail(ONYX_INVALID_MODEL, n,
                        "subgraph '%s' output %zu ('%s') has element type %s, but %s ('%s') is %s",
                        attr, oi, got->name, ox_elem_name(got->type), what, want->name,
                        ox_elem_name(want->type));
  return NULL;
}

/* The node's outputs as the model declares them (before inference types
 * them from the subgraph), for ox_check_sub_output. */
static OnyxStatus* ox_check_declared(const OxNode* n, const char* attr, const OxGraph* sub,
                                     size_t first) {
  for (size_t i = 0; i < n->n_outputs && first + i < sub->n_outputs; i++) {
    char what[64];
    snprintf(what, sizeof what, "the node's output %zu", i);
    OX_TRY(ox_check_sub_output(n, attr, sub, first + i, n->outputs[i], what));
  }
  return NULL;
}

static OnyxStatus* ox_infer_if(OxGraph* g, OxNode* n, const OxSchemaRegistry* const* customs,
                               size_t n_customs, OxGraphExpandFn expand) {
  OxGraph* br[2] = {ox_node_graph(n, "then_branch"), ox_node_graph(n, "else_branch")};
  const char* names[2] = {"then_branch", "else_branch"};
  for (int b = 0; b < 2; b++) {
    if (!br[b]) return ox_node_fail(ONYX_INVALID_MODEL, n, "has no '%s' graph", names[b]);
    if (br[b]->n_outputs != n->n_outputs)
      return ox_node_fail(ONYX_INVALID_MODEL, n, "'%s' has %zu outputs but the node has %zu",
                          names[b], br[b]->n_outputs, n->n_outputs);
    OX_TRY(ox_resolve_sub(n, names[b], g, br[b], customs, n_customs, expand));
    OX_TRY(ox_check_declared(n, names[b], br[b], 0));
  }
  for (size_t i = 0; i < n->n_outputs; i++) {
    char what[64];
    snprintf(what, sizeof what, "'then_branch' output %zu", i);
    OX_TRY(ox_check_sub_output(n, "else_branch", br[1], i, br[0]->outputs[i], what));
  }
  for (size_t i = 0; i < n->n_outputs; i++) {
    if (!n->outputs[i]) continue;
    const OxValue *a = br[0]->outputs[i], *b = br[1]->outputs[i];
    bool same = a->rank == b->rank && a->kind == OX_VK_TENSOR && b->kind == OX_VK_TENSOR;
    for (int32_t k = 0; same && k < a->rank; k++)
      same = a->dims[k] == b->dims[k];
    OX_TRY(ox_copy_type(n->outputs[i], a, same));
    if (a->kind == OX_VK_OPT_TENSOR || b->kind == OX_VK_OPT_TENSOR)
      n->outputs[i]->kind = OX_VK_OPT_TENSOR;
    if (a->kind == OX_VK_OPT_SEQUENCE || b->kind == OX_VK_OPT_SEQUENCE)
      n->outputs[i]->kind = OX_VK_OPT_SEQUENCE;
  }
  return NULL;
}

static OnyxStatus* ox_infer_loop(OxGraph* g, OxNode* n, const OxSchemaRegistry* const* customs,
                                 size_t n_customs, OxGraphExpandFn expand) {
  OxGraph* body = ox_node_graph(n, "body");
  if (!body) return ox_node_fail(ONYX_INVALID_MODEL, n, "has no 'body' graph");
  size_t n_formal = n->n_inputs - n->n_implicit;
  if (n_formal < 2)
    return ox_node_fail(ONYX_INVALID_MODEL, n, "needs at least the inputs M and cond");
  size_t carried = n_formal - 2;
  if (body->n_inputs != carried + 2)
    return ox_node_fail(ONYX_INVALID_MODEL, n,
                        "'body' has %zu inputs; it needs %zu (iteration, condition and %zu "
                        "loop-carried values)",
                        body->n_inputs, carried + 2, carried);
  if (body->n_outputs < carried + 1)
    return ox_node_fail(ONYX_INVALID_MODEL, n, "'body' has %zu outputs; it needs at least %zu",
                        body->n_outputs, carried + 1);
  if (n->n_outputs > body->n_outputs - 1)
    return ox_node_fail(ONYX_INVALID_MODEL, n, "has %zu outputs but 'body' yields only %zu",
                        n->n_outputs, body->n_outputs - 1);
  OX_TRY(ox_type_formal(body, 0, NULL, ONYX_ELEM_INT64, OX_VK_TENSOR, 0));
  OX_TRY(ox_type_formal(body, 1, NULL, ONYX_ELEM_BOOL, OX_VK_TENSOR, 0));
  for (size_t i = 0; i < carried; i++) {
    const OxValue* src = n->inputs[2 + i];
    if (!src) return ox_node_fail(ONYX_INVALID_MODEL, n, "loop-carried input %zu is missing", i);
    OX_TRY(ox_type_formal(body, 2 + i, src, src->type, src->kind, -1));
  }
  OX_TRY(ox_resolve_sub(n, "body", g, body, customs, n_customs, expand));
  const OxValue* c = body->outputs[0];
  if (c && (ox_seq_kind(c->kind) || (c->type != ONYX_ELEM_UNDEFINED && c->type != ONYX_ELEM_BOOL)))
    return ox_node_fail(ONYX_INVALID_MODEL, n,
                        "subgraph 'body' output 0 ('%s'), the condition, is %s of %s, not bool",
                        c->name, ox_kind_word(c->kind), ox_elem_name(c->type));
  for (size_t i = 0; i < carried; i++) {
    char what[64];
    snprintf(what, sizeof what, "loop-carried input %zu", i);
    OX_TRY(ox_check_sub_output(n, "body", body, 1 + i, n->inputs[2 + i], what));
  }
  for (size_t k = carried; k + 1 < body->n_outputs; k++)
    if (body->outputs[1 + k] && ox_seq_kind(body->outputs[1 + k]->kind))
      return ox_node_fail(ONYX_INVALID_MODEL, n,
                          "subgraph 'body' output %zu ('%s') is a sequence, but scan outputs "
                          "stack tensors",
                          1 + k, body->outputs[1 + k]->name);
  OX_TRY(ox_check_declared(n, "body", body, 1));
  for (size_t i = 0; i < n->n_outputs; i++) {
    if (!n->outputs[i]) continue;
    const OxValue* b = body->outputs[1 + i];
    OX_TRY(ox_copy_type(n->outputs[i], b, false));
    if (i >= carried) n->outputs[i]->kind = OX_VK_TENSOR; /* scan outputs stack tensors */
  }
  return NULL;
}

OnyxStatus* ox_scan_shape(const OxNode* n, const OxGraph* body, size_t body_inputs,
                          OxScanShape* sh) {
  size_t n_formal = n->n_inputs - n->n_implicit;
  sh->v8 = n->since_version < 9;
  sh->first = sh->v8 ? 1 : 0;
  int64_t k = ox_node_attr_int(n, "num_scan_inputs", -1);
  if (k < 1 || (size_t)k + sh->first > n_formal)
    return ox_node_fail(ONYX_INVALID_MODEL, n, "'num_scan_inputs' %lld does not fit its %zu inputs",
                        (long long)k, n_formal);
  sh->n_scan_in = (size_t)k;
  sh->n_state = n_formal - sh->first - sh->n_scan_in;
  if (body_inputs != sh->n_state + sh->n_scan_in)
    return ox_node_fail(ONYX_INVALID_MODEL, n, "'body' has %zu inputs; it needs %zu", body_inputs,
                        sh->n_state + sh->n_scan_in);
  if (body->n_outputs < sh->n_state || n->n_outputs != body->n_outputs)
    return ox_node_fail(ONYX_INVALID_MODEL, n,
                        "'body' has %zu outputs and the node %zu; they must agree", body->n_outputs,
                        n->n_outputs);
  sh->n_scan_out = body->n_outputs - sh->n_state;
  return NULL;
}

static OnyxStatus* ox_infer_scan(OxGraph* g, OxNode* n, const OxSchemaRegistry* const* customs,
                                 size_t n_customs, OxGraphExpandFn expand) {
  OxGraph* body = ox_node_graph(n, "body");
  if (!body) return ox_node_fail(ONYX_INVALID_MODEL, n, "has no 'body' graph");
  OxScanShape sh;
  OX_TRY(ox_scan_shape(n, body, body->n_inputs, &sh));
  for (size_t i = 0; i < sh.n_state + sh.n_scan_in; i++) {
    const OxValue* src = n->inputs[sh.first + i];
    if (!src) return ox_node_fail(ONYX_INVALID_MODEL, n, "input %zu is missing", sh.first + i);
    OX_TRY(ox_type_formal(body, i, NULL, src->type, OX_VK_TENSOR, -1));
  }
  OX_TRY(ox_resolve_sub(n, "body", g, body, customs, n_customs, expand));
  for (size_t i = 0; i < sh.n_state; i++) {
    char what[64];
    snprintf(what, sizeof what, "state input %zu", i);
    OX_TRY(ox_check_sub_output(n, "body", body, i, n->inputs[sh.first + i], what));
  }
  for (size_t i = 0; i < body->n_outputs; i++)
    if (body->outputs[i] && ox_seq_kind(body->outputs[i]->kind))
      return ox_node_fail(ONYX_INVALID_MODEL, n,
                          "subgraph 'body' output %zu ('%s') is a sequence; Scan takes tensors", i,
                          body->outputs[i]->name);
  OX_TRY(ox_check_declared(n, "body", body, 0));
  for (size_t i = 0; i < n->n_outputs; i++)
    if (n->outputs[i]) OX_TRY(ox_value_set(n->outputs[i], body->outputs[i]->type, -1, NULL));
  return NULL;
}

static OnyxStatus* ox_infer_seqmap(OxGraph* g, OxNode* n, const OxSchemaRegistry* const* customs,
                                   size_t n_customs, OxGraphExpandFn expand) {
  OxGraph* body = ox_node_graph(n, "body");
  if (!body) return ox_node_fail(ONYX_INVALID_MODEL, n, "has no 'body' graph");
  size_t n_formal = n->n_inputs - n->n_implicit;
  if (!n_formal || !n->inputs[0] || n->inputs[0]->kind != OX_VK_SEQUENCE)
    return ox_node_fail(ONYX_INVALID_MODEL, n, "input 0 must be a sequence");
  if (body->n_inputs != n_formal || body->n_outputs != n->n_outputs)
    return ox_node_fail(ONYX_INVALID_MODEL, n,
                        "'body' has %zu inputs and %zu outputs; the node %zu and %zu",
                        body->n_inputs, body->n_outputs, n_formal, n->n_outputs);
  for (size_t i = 0; i < n_formal; i++) {
    const OxValue* src = n->inputs[i];
    if (!src) return ox_node_fail(ONYX_INVALID_MODEL, n, "input %zu is missing", i);
    OX_TRY(ox_type_formal(body, i, NULL, src->type, OX_VK_TENSOR, -1));
  }
  OX_TRY(ox_resolve_sub(n, "body", g, body, customs, n_customs, expand));
  for (size_t i = 0; i < n->n_outputs; i++)
    if (n->outputs[i]) {
      OX_TRY(ox_value_set(n->outputs[i], body->outputs[i]->type, -1, NULL));
      n->outputs[i]->kind = OX_VK_SEQUENCE;
    }
  return NULL;
}

/* FlexAttention (ai.onnx.preview): attention whose scores and probabilities
 * pass through the optional score_mod / prob_mod subgraphs. */
static OnyxStatus* ox_infer_flex(OxGraph* g, OxNode* n, const OxSchemaRegistry* const* customs,
                                 size_t n_customs, OxGraphExpandFn expand) {
  if (n->n_inputs - n->n_implicit < 3 || !n->inputs[0] || !n->inputs[1] || !n->inputs[2])
    return ox_node_fail(ONYX_INVALID_MODEL, n, "needs the inputs Q, K and V");
  const OxValue *q = n->inputs[0], *v = n->inputs[2];
  OnyxElemType st = q->type == ONYX_ELEM_FLOAT64 ? ONYX_ELEM_FLOAT64 : ONYX_ELEM_FLOAT32;
  const char* names[2] = {"score_mod", "prob_mod"};
  for (int b = 0; b < 2; b++) {
    OxGraph* sub = ox_node_graph(n, names[b]);
    if (!sub) continue;
    if (sub->n_inputs != 1 || sub->n_outputs != 1)
      return ox_node_fail(ONYX_INVALID_MODEL, n, "'%s' must have one input and one output",
                          names[b]);
    OX_TRY(ox_type_formal(sub, 0, NULL, st, OX_VK_TENSOR, 4));
    OX_TRY(ox_resolve_sub(n, names[b], g, sub, customs, n_customs, expand));
  }
  if (!n->n_outputs || !n->outputs[0]) return NULL;
  if (q->rank == 4 && v->rank == 4) {
    int64_t d[4] = {q->dims[0], q->dims[1], q->dims[2], v->dims[3]};
    return ox_value_set(n->outputs[0], q->type, 4, d);
  }
  return ox_value_set(n->outputs[0], q->type, -1, NULL);
}

OnyxStatus* ox_host_infer(OxGraph* g, OxNode* n, const OxSchemaRegistry* const* customs,
                          size_t n_customs, OxGraphExpandFn expand) {
  if (ox_flex_op(n)) return ox_infer_flex(g, n, customs, n_customs, expand);
  if (!*n->domain && !strcmp(n->op_type, "If"))
    return ox_infer_if(g, n, customs, n_customs, expand);
  if (!*n->domain && !strcmp(n->op_type, "Loop"))
    return ox_infer_loop(g, n, customs, n_customs, expand);
  if (!*n->domain && !strcmp(n->op_type, "Scan"))
    return ox_infer_scan(g, n, customs, n_customs, expand);
  if (!*n->domain && !strcmp(n->op_type, "SequenceMap"))
    return ox_infer_seqmap(g, n, customs, n_customs, expand);
  for (size_t a = 0; a < n->n_attrs; a++)
    if (n->attrs[a].g || n->attrs[a].graphs)
      return ox_node_fail(ONYX_INVALID_MODEL, n,
                          "has a subgraph, which only If, Loop, Scan and SequenceMap may have");
  if (ox_ml_map_op(n)) return ox_ml_map_infer(n);
  return ox_seq_infer(n);
}
