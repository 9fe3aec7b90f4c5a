/* model_load.c — ModelProto -> IR graph: version checks, value infos,
 * initializers, nodes, attributes and subgraphs. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "onnx.pb-c.h"
#include "ox_graph.h"
#include "model_internal.h"
#include "ox_checked.h"
#include "ox_map.h"

#define OX_IR_VERSION_MIN 3
#define OX_IR_VERSION_MAX 13 /* IR 12 brought float8e8m0, IR 13 int2/uint2 (opset 25+) */
#define OX_ONNX_OPSET_MAX 28 /* the newest ai.onnx opset the schemas know */

typedef struct OxLoader {
  const char* base_dir;
  OxModelLimits lim;
  const Onnx__ModelProto* model;
  OxGraph* root; /* owns the external-data mappings */
  size_t n_nodes;
  /* Names made while inlining model-local functions (scope maps borrow them). */
  char** owned;
  size_t n_owned, cap_owned;
  int fn_depth; /* nesting of function calls being inlined */
} OxLoader;

/* The names a graph defines itself (initializers, inputs, node outputs).
 * Whatever else a subgraph reads comes from an enclosing graph. Keys borrow
 * the proto's strings. */
typedef struct OxScope {
  OxMap names;
  OxGraph* g;
  const struct OxScope* up;
} OxScope;

static const char* ox_str(const char* s) {
  return s ? s : "";
}

static OxModelLimits ox_limits(const OxModelLimits* in) {
  OxModelLimits l = in ? *in : (OxModelLimits){0};
  if (!l.max_model_bytes) l.max_model_bytes = OX_DEFAULT_MAX_MODEL_BYTES;
  if (!l.max_tensor_bytes) l.max_tensor_bytes = OX_DEFAULT_MAX_TENSOR_BYTES;
  if (!l.max_nodes) l.max_nodes = OX_DEFAULT_MAX_NODES;
  if (l.max_graph_depth <= 0) l.max_graph_depth = OX_DEFAULT_MAX_GRAPH_DEPTH;
  if (l.max_graph_depth > OX_MAX_GRAPH_DEPTH_CEILING)
    l.max_graph_depth = OX_MAX_GRAPH_DEPTH_CEILING;
  return l;
}

/* Counts n more nodes against max_nodes before they are built: each graph's
 * own, and every inlined copy of a model-local function's body (so functions
 * calling each other cannot multiply a small file into a huge graph). */
static OnyxStatus* ox_count_nodes(OxLoader* L, size_t n) {
  if (n > L->lim.max_nodes || L->n_nodes > L->lim.max_nodes - n)
    return ox_status(ONYX_LIMIT_EXCEEDED, "the model has more than the limit of %zu nodes",
                     L->lim.max_nodes);
  L->n_nodes += n;
  return NULL;
}

static OnyxStatus* ox_fill_graph(OxLoader* L, Onnx__GraphProto* gp, const OxScope* up, int depth,
                                 OxGraph* g);

/* --- types and shapes ----------------------------------------------------------------- */

/* Applies a TypeProto to a value. Non-tensor types (sequence, map,
 * optional) stay undefined for now: later phases give them meaning. */
/* Unwraps sequence/optional layers: the kind and the innermost tensor type
 * (NULL: none or a map). */
static const Onnx__TypeProto__Tensor* ox_type_kind(const Onnx__TypeProto* tp, uint8_t* kind) {
  *kind = OX_VK_TENSOR;
  bool opt = false;
  for (int depth = 0; tp && depth < 4; depth++) {
    if (tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) {
      if (opt) *kind = *kind == OX_VK_SEQUENCE ? OX_VK_OPT_SEQUENCE : OX_VK_OPT_TENSOR;
      return tp->tensor_type;
    }
    if (tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE && tp->sequence_type &&
        *kind == OX_VK_TENSOR) {
      *kind = OX_VK_SEQUENCE;
      tp = tp->sequence_type->elem_type;
    } else if (tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE && tp->optional_type &&
               !opt && *kind == OX_VK_TENSOR) {
      opt = true;
      tp = tp->optional_type->elem_type;
    } else {
      break;
    }
  }
  *kind = OX_VK_TENSOR;
  return NULL;
}

/* ONNX-ML map(K, V) and seq(map(K, V)) (ZipMap, DictVectorizer, CastMap):
 * *applies false when tp is neither. K must be int64 or string, V a tensor
 * element type; both must be present. */
static OnyxStatus* ox_apply_map_type(OxValue* v, const Onnx__TypeProto* tp, bool* applies) {
  uint8_t kind = OX_VK_MAP;
  *applies = false;
  if (tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE && tp->sequence_type &&
      tp->sequence_type->elem_type &&
      tp->sequence_type->elem_type->value_case == ONNX__TYPE_PROTO__VALUE_MAP_TYPE) {
    kind = OX_VK_SEQ_MAP;
    tp = tp->sequence_type->elem_type;
  }
  if (tp->value_case != ONNX__TYPE_PROTO__VALUE_MAP_TYPE) return NULL;
  *applies = true;
  const Onnx__TypeProto__Map* m = tp->map_type;
  if (!m || !m->has_key_type || !m->value_type)
    return ox_status(ONYX_INVALID_MODEL, "map type without a key type or a value type");
  if (m->key_type != ONYX_ELEM_INT64 && m->key_type != ONYX_ELEM_STRING)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "map key type %d is not supported (int64 (7) or string (8) keys)",
                     (int)m->key_type);
  const Onnx__TypeProto* vt = m->value_type;
  if (vt->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !vt->tensor_type ||
      !vt->tensor_type->has_elem_type)
    return ox_status(ONYX_NOT_IMPLEMENTED, "map values must be of a tensor element type");
  int32_t et = vt->tensor_type->elem_type;
  if (et <= 0 || et >= ONYX_ELEM_TYPE_COUNT)
    return ox_status(ONYX_INVALID_MODEL, "unknown map value element type %d", (int)et);
  OX_TRY(ox_value_set(v, (OnyxElemType)et, -1, NULL));
  v->kind = kind;
  v->map_key = (OnyxElemType)m->key_type;
  return NULL;
}

static OnyxStatus* ox_apply_type(OxValue* v, const Onnx__TypeProto* tp) {
  uint8_t kind = OX_VK_TENSOR;
  bool is_map = false;
  if (tp) OX_TRY(ox_apply_map_type(v, tp, &is_map));
  if (is_map) return NULL;
  const Onnx__TypeProto__Tensor* tt = tp ? ox_type_kind(tp, &kind) : NULL;
  if (!tt) return NULL;
  v->kind = kind;
  if (kind != OX_VK_TENSOR) { /* element shapes of containers are not tracked */
    int32_t et = tt->has_elem_type ? tt->elem_type : 0;
    if (et < 0 || et >= ONYX_ELEM_TYPE_COUNT)
      return ox_status(ONYX_INVALID_MODEL, "unknown element type %d", (int)et);
    return ox_value_set(v, (OnyxElemType)et, -1, NULL);
  }
  int32_t et = tt->has_elem_type ? tt->elem_type : 0;
  if (et < 0 || et >= ONYX_ELEM_TYPE_COUNT)
    return ox_status(ONYX_INVALID_MODEL, "unknown element type %d", (int)et);
  if (!tt->shape) return ox_value_set(v, (OnyxElemType)et, -1, NULL);
  size_t rank = tt->shape->n_dim;
  if (rank > OX_MAX_RANK)
    return ox_status(ONYX_INVALID_MODEL, "rank %zu is over the limit of %d", rank, OX_MAX_RANK);
  int64_t* dims = malloc((rank ? rank : 1) * sizeof *dims);
  char** params = rank ? calloc(rank, sizeof *params) : NULL;
  bool any_param = false, oom = !dims || (rank && !params);
  for (size_t i = 0; !oom && i < rank; i++) {
    const Onnx__TensorShapeProto__Dimension* d = tt->shape->dim[i];
    bool known =
        d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && d->dim_value >= 0;
    dims[i] = known ? d->dim_value : ONYX_DIM_UNKNOWN;
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && d->dim_param &&
        *d->dim_param) {
      oom = !(params[i] = ox_strdup(d->dim_param));
      any_param = true;
    }
  }
  OnyxStatus* st = oom ? ox_oom() : ox_value_set(v, (OnyxElemType)et, (int32_t)rank, dims);
  free(dims);
  if (!st && any_param) {
    v->dim_params = params; /* ox_value_set cleared the old ones */
    params = NULL;
  }
  for (size_t i = 0; params && i < rank; i++)
    free(params[i]);
  free(params);
  return st;
}

/* --- graph inputs, outputs, initializers ---------------------------------------------- */

static OnyxStatus* ox_add_initializer(OxLoader* L, OxGraph* g, Onnx__TensorProto* tp) {
  const char* name = ox_str(tp->name);
  if (!*name) return ox_status(ONYX_INVALID_MODEL, "an initializer has no name");
  OxValue* v = ox_graph_find(g, name);
  if (v && v->constant)
    return ox_status(ONYX_INVALID_MODEL, "initializer '%s' is defined twice", name);
  OxTensor* t;
  OnyxStatus* st = ox_tensor_from_proto(tp, L->base_dir, L->lim.max_tensor_bytes, L->root, &t);
  if (st) return ox_status_wrap(st, "initializer '%s'", name);
  st = ox_graph_value(g, name, &v);
  if (!st) st = ox_value_set(v, t->type, (int32_t)t->rank, t->dims);
  if (st) {
    ox_tensor_free(t);
    return st;
  }
  v->constant = t;
  return NULL;
}

/* A declared input with an initializer is an overridable constant: it keeps
 * its constant and is not a graph input, but the declared type must agree. */
static OnyxStatus* ox_check_constant_input(const OxValue* v, const Onnx__ValueInfoProto* vi) {
  const Onnx__TypeProto* tp = vi->type;
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type ||
      !tp->tensor_type->has_elem_type || !tp->tensor_type->elem_type)
    return NULL;
  if (tp->tensor_type->elem_type == (int32_t)v->type) return NULL;
  return ox_status(ONYX_INVALID_MODEL,
                   "graph input '%s' is declared as element type %d but its initializer is %s",
                   v->name, (int)tp->tensor_type->elem_type, ox_elem_name(v->type));
}

static OnyxStatus* ox_add_input(OxGraph* g, const Onnx__ValueInfoProto* vi) {
  const char* name = ox_str(vi->name);
  if (!*name) return ox_status(ONYX_INVALID_MODEL, "a graph input has no name");
  OxValue* v = ox_graph_find(g, name);
  if (v && v->is_graph_input)
    return ox_status(ONYX_INVALID_MODEL, "graph input '%s' is declared twice", name);
  if (v && v->constant) return ox_check_constant_input(v, vi);
  OX_TRY(ox_graph_value(g, name, &v));
  OnyxStatus* st = ox_apply_type(v, vi->type);
  if (st) return ox_status_wrap(st, "graph input '%s'", name);
  return ox_graph_add_input(g, v);
}

static bool ox_value_untyped(const OxValue* v) {
  return !v->constant && v->type == ONYX_ELEM_UNDEFINED && v->rank < 0;
}

static OnyxStatus* ox_add_output(const OxScope* sc, const Onnx__ValueInfoProto* vi) {
  const char* name = ox_str(vi->name);
  if (!*name) return ox_status(ONYX_INVALID_MODEL, "a graph output has no name");
  bool local = ox_map_get(&sc->names, name) != NULL;
  if (!local && !sc->up)
    return ox_status(ONYX_INVALID_MODEL,
                     "graph output '%s' is not produced by any node, input or initializer", name);
  OxValue* v;
  OX_TRY(ox_graph_value(sc->g, name, &v));
  if (v->is_graph_output)
    return ox_status(ONYX_INVALID_MODEL, "graph output '%s' is declared twice", name);
  if (!local) v->is_outer_scope = true;
  if (ox_value_untyped(v)) {
    OnyxStatus* st = ox_apply_type(v, vi->type);
    if (st) return ox_status_wrap(st, "graph output '%s'", name);
  }
  return ox_graph_add_output(sc->g, v);
}

/* value_info describes intermediate values; entries naming nothing this
 * graph defines, or already typed by an input/output, are ignored. */
static OnyxStatus* ox_add_value_info(const OxScope* sc, const Onnx__ValueInfoProto* vi) {
  const char* name = ox_str(vi->name);
  if (!*name || !ox_map_get(&sc->names, name)) return NULL;
  OxValue* v;
  OX_TRY(ox_graph_value(sc->g, name, &v));
  if (!ox_value_untyped(v)) return NULL;
  return ox_status_wrap(ox_apply_type(v, vi->type), "value_info '%s'", name);
}

/* --- attributes ------------------------------------------------------------------------- */

typedef OnyxStatus* (*OxAttrReader)(OxLoader* L, const OxScope* sc, const Onnx__AttributeProto* ap,
                                    int depth, OxAttr* a);

/* Old models leave `type` unset: the payload tells it. */
static OnyxAttrType ox_attr_type_from_payload(const Onnx__AttributeProto* ap) {
  const struct {
    bool set;
    OnyxAttrType type;
  } probe[] = {
      {ap->has_f, ONYX_ATTR_FLOAT},
      {ap->has_i, ONYX_ATTR_INT},
      {ap->has_s, ONYX_ATTR_STRING},
      {ap->t != NULL, ONYX_ATTR_TENSOR},
      {ap->g != NULL, ONYX_ATTR_GRAPH},
      {ap->n_floats > 0, ONYX_ATTR_FLOATS},
      {ap->n_ints > 0, ONYX_ATTR_INTS},
      {ap->n_strings > 0, ONYX_ATTR_STRINGS},
      {ap->n_tensors > 0, ONYX_ATTR_TENSORS},
      {ap->n_graphs > 0, ONYX_ATTR_GRAPHS},
      {ap->sparse_tensor != NULL, ONYX_ATTR_SPARSE_TENSOR},
      {ap->n_sparse_tensors > 0, ONYX_ATTR_SPARSE_TENSORS},
      {ap->tp != NULL, ONYX_ATTR_TYPE_PROTO},
      {ap->n_type_protos > 0, ONYX_ATTR_TYPE_PROTOS},
  };
  for (size_t i = 0; i < OX_ARRAY_LEN(probe); i++)
    if (probe[i].set) return probe[i].type;
  return ONYX_ATTR_UNDEFINED;
}

static OnyxStatus* ox_read_float(OxLoader* L, const OxScope* sc, const Onnx__AttributeProto* ap,
                                 int depth, OxAttr* a) {
  a->f = ap->f;
  return NULL;
}

static OnyxStatus* ox_read_int(OxLoader* L, const OxScope* sc, const Onnx__AttributeProto* ap,
                               int depth, OxAttr* a) {
  a->i = ap->i;
  return NULL;
}

static OnyxStatus* ox_read_string(OxLoader* L, const OxScope* sc, const Onnx__AttributeProto* ap,
                                  int depth, OxAttr* a) {
  a->s_len = ap->s.len;
  a->s = malloc(a->s_len + 1);
  if (!a->s) return ox_oom();
  if (a->s_len) memcpy(a->s, ap->s.data, a->s_len);
  a->s[a->s_len] = '\0';
  return NULL;
}

static void* ox_dup_array(const void* src, size_t n, size_t elem) {
  void* p = malloc(n ? n * elem : 1);
  if (p && n) memcpy(p, src, n * elem);
  return p;
}

static OnyxStatus* ox_read_floats(OxLoader* L, const OxScope* sc, const Onnx__AttributeProto* ap,
                                  int depth, OxAttr* a) {
  a->count = ap->n_floats;
  return (a->floats = ox_dup_array(ap->floats, a->count, sizeof(float))) ? NULL : ox_oom();
}

static OnyxStatus* ox_read_ints(OxLoader* L, const OxScope* sc, const Onnx__AttributeProto* ap,
                                int depth, OxAttr* a) {
  a->count = ap->n_ints;
  return (a->ints = ox_dup_array(ap->ints, a->count, sizeof(int64_t))) ? NULL : ox_oom();
}

static OnyxStatus* ox_read_strings(OxLoader* L, const OxScope* sc, const Onnx__AttributeProto* ap,
                                   int depth, OxAttr* a) {
  /* Each string keeps its bytes, NULs included: strings_len[i] is its
   * length and strings[i] is NUL-terminated after it. */
  a->strings = calloc(ap->n_strings ? ap->n_strings : 1, sizeof *a->strings);
  a->strings_len = calloc(ap->n_strings ? ap->n_strings : 1, sizeof *a->strings_len);
  if (!a->strings || !a->strings_len) return ox_oom();
  a->count = ap->n_strings;
  for (size_t i = 0; i < a->count; i++) {
    size_t len = ap->strings[i].len;
    if (len == SIZE_MAX || !(a->strings[i] = malloc(len + 1))) return ox_oom();
    if (len) memcpy(a->strings[i], ap->strings[i].data, len);
    a->strings[i][len] = '\0';
    a->strings_len[i] = len;
  }
  return NULL;
}

static OnyxStatus* ox_read_tensor(OxLoader* L, const OxScope* sc, const Onnx__AttributeProto* ap,
                                  int depth, OxAttr* a) {
  if (!ap->t) return ox_status(ONYX_INVALID_MODEL, "TENSOR attribute has no tensor");
  return ox_tensor_from_proto(ap->t, L->base_dir, L->lim.max_tensor_bytes, L->root, &a->t);
}

static OnyxStatus* ox_read_tensors(OxLoader* L, const OxScope* sc, const Onnx__AttributeProto* ap,
                                   int depth, OxAttr* a) {
  a->tensors = calloc(ap->n_tensors ? ap->n_tensors : 1, sizeof *a->tensors);
  if (!a->tensors) return ox_oom();
  a->count = ap->n_tensors;
  for (size_t i = 0; i < a->count; i++) {
    OnyxStatus* st = ox_tensor_from_proto(ap->tensors[i], L->base_dir, L->lim.max_tensor_bytes,
                                          L->root, &a->tensors[i]);
    if (st) return ox_status_wrap(st, "tensor #%zu", i);
  }
  return NULL;
}

/* Values a subgraph reads from outside that this graph does not define
 * either come from further out: mark them so here too. At the main graph
 * they must be defined. */
static OnyxStatus* ox_lift_outer(const OxScope* sc, const OxGraph* sub) {
  for (size_t i = 0; i < sub->n_values; i++) {
    const OxValue* v = sub->values[i];
    if (!v->is_outer_scope || ox_map_get(&sc->names, v->name)) continue;
    if (!sc->up)
      return ox_status(ONYX_INVALID_MODEL,
                       "subgraph '%s' reads '%s', which no enclosing graph defines", sub->name,
                       v->name);
    OxValue* mine;
    OX_TRY(ox_graph_value(sc->g, v->name, &mine));
    mine->is_outer_scope = true;
  }
  return NULL;
}

static OnyxStatus* ox_read_subgraph(OxLoader* L, const OxScope* sc, Onnx__GraphProto* gp, int depth,
                                    OxGraph** out) {
  OX_TRY(ox_graph_new(ox_str(gp->name), out));
  (*out)->parent = sc->g;
  OnyxStatus* st = ox_fill_graph(L, gp, sc, depth + 1, *out);
  if (!st) st = ox_lift_outer(sc, *out);
  if (st) {
    ox_graph_free(*out);
    *out = NULL;
  }
  return st;
}

static OnyxStatus* ox_read_graph(OxLoader* L, const OxScope* sc, const Onnx__AttributeProto* ap,
                                 int depth, OxAttr* a) {
  if (!ap->g) return ox_status(ONYX_INVALID_MODEL, "GRAPH attribute has no graph");
  return ox_read_subgraph(L, sc, ap->g, depth, &a->g);
}

static OnyxStatus* ox_read_graphs(OxLoader* L, const OxScope* sc, const Onnx__AttributeProto* ap,
                                  int depth, OxAttr* a) {
  a->graphs = calloc(ap->n_graphs ? ap->n_graphs : 1, sizeof *a->graphs);
  if (!a->graphs) return ox_oom();
  a->count = ap->n_graphs;
  for (size_t i = 0; i < a->count; i++) {
    OnyxStatus* st = ox_read_subgraph(L, sc, ap->graphs[i], depth, &a->graphs[i]);
    if (st) return ox_status_wrap(st, "graph #%zu", i);
  }
  return NULL;
}

static OnyxStatus* ox_read_type_proto(OxLoader* L, const OxScope* sc,
                                      const Onnx__AttributeProto* ap, int depth, OxAttr* a) {
  const Onnx__TypeProto__Tensor* tt = ap->tp ? ox_type_kind(ap->tp, &a->tp_kind) : NULL;
  if (!tt) return ox_status(ONYX_NOT_IMPLEMENTED, "TYPE_PROTO attribute names no tensor type");
  int32_t et = tt->has_elem_type ? tt->elem_type : 0;
  if (et <= 0 || et >= ONYX_ELEM_TYPE_COUNT)
    return ox_status(ONYX_INVALID_MODEL, "TYPE_PROTO attribute has element type %d", (int)et);
  a->tp_elem = (OnyxElemType)et;
  return NULL;
}

static const OxAttrReader ox_attr_readers[] = {
    [ONYX_ATTR_FLOAT] = ox_read_float,
    [ONYX_ATTR_INT] = ox_read_int,
    [ONYX_ATTR_STRING] = ox_read_string,
    [ONYX_ATTR_TENSOR] = ox_read_tensor,
    [ONYX_ATTR_GRAPH] = ox_read_graph,
    [ONYX_ATTR_FLOATS] = ox_read_floats,
    [ONYX_ATTR_INTS] = ox_read_ints,
    [ONYX_ATTR_STRINGS] = ox_read_strings,
    [ONYX_ATTR_TENSORS] = ox_read_tensors,
    [ONYX_ATTR_GRAPHS] = ox_read_graphs,
    [ONYX_ATTR_TYPE_PROTO] = ox_read_type_proto,
    /* Sparse tensors and type proto lists: not yet; the last slot sizes the table. */
    [ONYX_ATTR_TYPE_PROTOS] = NULL,
};

/* Frees an attribute that never reached a node (ox_attr_clear leaves
 * subgraphs to the graph module). */
static void ox_attr_discard(OxAttr* a) {
  if (a->g) ox_graph_free(a->g);
  for (size_t i = 0; a->graphs && i < a->count; i++)
    if (a->graphs[i]) ox_graph_free(a->graphs[i]);
  free(a->graphs);
  a->g = NULL;
  a->graphs = NULL;
  ox_attr_clear(a);
}

static OnyxStatus* ox_read_attr(OxLoader* L, const OxScope* sc, const Onnx__AttributeProto* ap,
                                int depth, OxAttr* a) {
  const char* name = ox_str(ap->name);
  if (!*name) return ox_status(ONYX_INVALID_MODEL, "an attribute has no name");
  if (ap->ref_attr_name && *ap->ref_attr_name)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "attribute '%s' refers to function attribute '%s': not supported yet", name,
                     ap->ref_attr_name);
  int type = ap->has_type && ap->type ? (int)ap->type : (int)ox_attr_type_from_payload(ap);
  if (type == ONYX_ATTR_UNDEFINED)
    return ox_status(ONYX_INVALID_MODEL, "attribute '%s' has no type and no value", name);
  if (type < 0 || (size_t)type >= OX_ARRAY_LEN(ox_attr_readers))
    return ox_status(ONYX_INVALID_MODEL, "attribute '%s' has unknown type %d", name, type);
  static const char* const unsupported[] = {[ONYX_ATTR_SPARSE_TENSOR] = "SPARSE_TENSOR",
                                            [ONYX_ATTR_SPARSE_TENSORS] = "SPARSE_TENSORS",
                                            [ONYX_ATTR_TYPE_PROTO] = "TYPE_PROTO",
                                            [ONYX_ATTR_TYPE_PROTOS] = "TYPE_PROTOS"};
  if (!ox_attr_readers[type])
    return ox_status(ONYX_NOT_IMPLEMENTED, "attribute '%s' of type %s is not supported yet", name,
                     unsupported[type]);
  *a = (OxAttr){.type = (OnyxAttrType)type, .name = ox_strdup(name)};
  if (!a->name) return ox_oom();
  return ox_status_wrap(ox_attr_readers[type](L, sc, ap, depth, a), "attribute '%s'", name);
}

/* --- nodes ------------------------------------------------------------------------------- */

/* The model-local function (ModelProto.functions) a node calls, or NULL. */
static const Onnx__FunctionProto* ox_find_function(const OxLoader* L, const char* domain,
                                                   const char* op) {
  for (size_t i = 0; L->model && i < L->model->n_functions; i++) {
    const Onnx__FunctionProto* f = L->model->functions[i];
    const char* fd = ox_domain_is_onnx(f->domain) ? "" : f->domain;
    if (!strcmp(fd, domain) && !strcmp(ox_str(f->name), op)) return f;
  }
  return NULL;
}

static OnyxStatus* ox_add_attrs(OxLoader* L, const OxScope* sc, const Onnx__NodeProto* np,
                                OxNode* n, int depth) {
  for (size_t i = 0; i < np->n_attribute; i++) {
    OxAttr a = {0};
    OnyxStatus* st = ox_read_attr(L, sc, np->attribute[i], depth, &a);
    if (!st) st = ox_node_add_attr(n, &a);
    ox_attr_discard(&a); /* zeroed when the node took it */
    if (st) return st;
  }
  return NULL;
}

/* In a subgraph, inputs defined by no local name are outer-scope values. */
static void ox_mark_outer_reads(const OxScope* sc, const OxNode* n) {
  if (!sc->up) return;
  for (size_t i = 0; i < n->n_inputs; i++) {
    OxValue* v = n->inputs[i];
    if (v && !ox_map_get(&sc->names, v->name)) v->is_outer_scope = true;
  }
}

static OnyxStatus* ox_add_call(OxLoader* L, const OxScope* sc, const Onnx__NodeProto* call,
                               const Onnx__FunctionProto* f, size_t index, int depth);

static OnyxStatus* ox_add_node(OxLoader* L, const OxScope* sc, const Onnx__NodeProto* np,
                               size_t index, int depth) {
  const char* op = ox_str(np->op_type);
  const char* name = ox_str(np->name);
  if (!*op) return ox_status(ONYX_INVALID_MODEL, "node #%zu '%s' has no op_type", index, name);
  const char* domain = ox_domain_is_onnx(np->domain) ? "" : np->domain;
  const Onnx__FunctionProto* fn = ox_find_function(L, domain, op);
  if (fn) return ox_add_call(L, sc, np, fn, index, depth);
  OxNode* n = NULL;
  OnyxStatus* st = ox_graph_add_node(sc->g, name, op, domain, (const char* const*)np->input,
                                     np->n_input, (const char* const*)np->output, np->n_output, &n);
  if (st) return ox_status_wrap(st, "node #%zu '%s' (%s)", index, name, op);
  ox_mark_outer_reads(sc, n);
  st = ox_add_attrs(L, sc, np, n, depth);
  if (!st) st = ox_node_link_subgraphs(sc->g, n);
  return ox_status_wrap(st, "node '%s' (%s)", n->name, op);
}

/* --- model-local functions ------------------------------------------------------------------
 * A call is replaced by the function's nodes at load: formal inputs and
 * outputs become the call's values, every other name gets the call's name as
 * a prefix ("call/name"), and an attribute that refers to a function
 * attribute (ref_attr_name) takes the call's attribute of that name (none:
 * the op's default). Calls inside the body are inlined the same way. */

#define OX_MAX_FUNCTION_DEPTH 16

static const char* ox_keep(OxLoader* L, char* s) {
  if (!s) return NULL;
  if (!ox_grow((void**)&L->owned, &L->cap_owned, L->n_owned + 1, sizeof *L->owned)) {
    free(s);
    return NULL;
  }
  L->owned[L->n_owned++] = s;
  return s;
}

static const char* ox_fn_name(const Onnx__FunctionProto* f, const Onnx__NodeProto* call,
                              const OxMap* internal, const char* name) {
  if (!name || !*name) return "";
  for (size_t i = 0; i < f->n_input; i++)
    if (!strcmp(f->input[i], name)) return i < call->n_input ? call->input[i] : "";
  for (size_t i = 0; i < f->n_output; i++)
    if (!strcmp(f->output[i], name)) return i < call->n_output ? call->output[i] : "";
  const char* m = ox_map_get(internal, name);
  return m ? m : name;
}

static const Onnx__AttributeProto* ox_call_attr(const Onnx__NodeProto* call, const char* name) {
  for (size_t i = 0; i < call->n_attribute; i++)
    if (!strcmp(ox_str(call->attribute[i]->name), name)) return call->attribute[i];
  return NULL;
}

/* One body node as a node of the graph (names mapped, attributes resolved). */
static OnyxStatus* ox_add_body_node(OxLoader* L, const OxScope* sc, const Onnx__NodeProto* call,
                                    const Onnx__FunctionProto* f, const OxMap* internal,
                                    const Onnx__NodeProto* bn, size_t k, size_t index, int depth) {
  Onnx__NodeProto tmp = *bn;
  char** ins = calloc(bn->n_input + 1, sizeof *ins);
  char** outs = calloc(bn->n_output + 1, sizeof *outs);
  Onnx__AttributeProto** attrs = calloc(bn->n_attribute + 1, sizeof *attrs);
  Onnx__AttributeProto* copies = calloc(bn->n_attribute + 1, sizeof *copies);
  const char* cname = call->name && *call->name ? call->name : ox_str(call->op_type);
  const char* nname =
      ox_keep(L, bn->name && *bn->name ? ox_asprintf("%s/%s", cname, bn->name)
                                       : ox_asprintf("%s/%s_%zu", cname, ox_str(bn->op_type), k));
  OnyxStatus* st = (!ins || !outs || !attrs || !copies || !nname) ? ox_oom() : NULL;
  for (size_t i = 0; !st && i < bn->n_input; i++)
    ins[i] = (char*)ox_fn_name(f, call, internal, bn->input[i]);
  for (size_t i = 0; !st && i < bn->n_output; i++)
    outs[i] = (char*)ox_fn_name(f, call, internal, bn->output[i]);
  size_t na = 0;
  for (size_t i = 0; !st && i < bn->n_attribute; i++) {
    const Onnx__AttributeProto* a = bn->attribute[i];
    if (a->ref_attr_name && *a->ref_attr_name) {
      const Onnx__AttributeProto* ca = ox_call_attr(call, a->ref_attr_name);
      if (!ca) continue; /* not given: the op's default */
      copies[na] = *ca;
      copies[na].name = a->name;
      attrs[na] = &copies[na];
      na++;
    } else {
      attrs[na++] = (Onnx__AttributeProto*)a;
    }
  }
  if (!st) {
    tmp.name = (char*)nname;
    tmp.input = ins;
    tmp.output = outs;
    tmp.attribute = attrs;
    tmp.n_attribute = na;
    st = ox_add_node(L, sc, &tmp, index, depth);
  }
  free(ins);
  free(outs);
  free(attrs);
  free(copies);
  return st;
}

static OnyxStatus* ox_add_call(OxLoader* L, const OxScope* sc, const Onnx__NodeProto* call,
                               const Onnx__FunctionProto* f, size_t index, int depth) {
  const char* cname = call->name && *call->name ? call->name : ox_str(call->op_type);
  if (L->fn_depth >= OX_MAX_FUNCTION_DEPTH)
    return ox_status(ONYX_LIMIT_EXCEEDED,
                     "node '%s' (%s): model-local functions call each other deeper than %d", cname,
                     ox_str(call->op_type), OX_MAX_FUNCTION_DEPTH);
  for (size_t j = 0; j < call->n_output; j++) {
    if (!*call->output[j]) continue;
    bool made = false;
    for (size_t k = 0; j < f->n_output && k < f->n_node && !made; k++)
      for (size_t o = 0; o < f->node[k]->n_output && !made; o++)
        made = !strcmp(f->node[k]->output[o], f->output[j]);
    if (!made)
      return ox_status(ONYX_INVALID_MODEL,
                       "node '%s' (%s): model-local function '%s' does not produce its output #%zu",
                       cname, ox_str(call->op_type), ox_str(f->name), j);
  }
  OxMap internal = {0};
  OnyxStatus* st = NULL;
  /* Names the body defines itself get the call's prefix; the scope learns
   * them as local names. */
  for (size_t k = 0; !st && k < f->n_node; k++)
    for (size_t o = 0; !st && o < f->node[k]->n_output; o++) {
      const char* nm = f->node[k]->output[o];
      bool formal = false;
      for (size_t j = 0; j < f->n_output; j++)
        formal |= !strcmp(f->output[j], nm);
      if (!*nm || formal || ox_map_get(&internal, nm)) continue;
      const char* u = ox_keep(L, ox_asprintf("%s/%s", cname, nm));
      if (!u || !ox_map_put(&internal, nm, (void*)u) ||
          !ox_map_put((OxMap*)&sc->names, u, (void*)&sc->names))
        st = ox_oom();
    }
  if (!st) st = ox_count_nodes(L, f->n_node);
  L->fn_depth++;
  for (size_t k = 0; !st && k < f->n_node; k++)
    st = ox_add_body_node(L, sc, call, f, &internal, f->node[k], k, index, depth);
  L->fn_depth--;
  ox_map_free(&internal);
  return st ? ox_status_wrap(st, "in model-local function '%s' called by node '%s'",
                             ox_str(f->name), cname)
            : NULL;
}

/* --- graphs -------------------------------------------------------------------------------- */

static OnyxStatus* ox_collect_names(const Onnx__GraphProto* gp, OxMap* names) {
  bool ok = true;
  for (size_t i = 0; ok && i < gp->n_initializer; i++)
    if (gp->initializer[i]->name) ok = ox_map_put(names, gp->initializer[i]->name, names);
  for (size_t i = 0; ok && i < gp->n_input; i++)
    if (gp->input[i]->name) ok = ox_map_put(names, gp->input[i]->name, names);
  for (size_t i = 0; ok && i < gp->n_node; i++)
    for (size_t j = 0; ok && j < gp->node[i]->n_output; j++)
      if (*gp->node[i]->output[j]) ok = ox_map_put(names, gp->node[i]->output[j], names);
  return ok ? NULL : ox_oom();
}

static OnyxStatus* ox_fill_values(OxLoader* L, const Onnx__GraphProto* gp, const OxScope* sc) {
  if (gp->n_sparse_initializer) {
    const Onnx__SparseTensorProto* sp = gp->sparse_initializer[0];
    const char* name = sp->values ? ox_str(sp->values->name) : "";
    return ox_status(ONYX_NOT_IMPLEMENTED, "sparse initializer '%s' is not supported yet", name);
  }
  for (size_t i = 0; i < gp->n_initializer; i++)
    OX_TRY(ox_add_initializer(L, sc->g, gp->initializer[i]));
  for (size_t i = 0; i < gp->n_input; i++)
    OX_TRY(ox_add_input(sc->g, gp->input[i]));
  for (size_t i = 0; i < gp->n_output; i++)
    OX_TRY(ox_add_output(sc, gp->output[i]));
  for (size_t i = 0; i < gp->n_value_info; i++)
    OX_TRY(ox_add_value_info(sc, gp->value_info[i]));
  return NULL;
}

static OnyxStatus* ox_fill_graph(OxLoader* L, Onnx__GraphProto* gp, const OxScope* up, int depth,
                                 OxGraph* g) {
  if (depth > L->lim.max_graph_depth)
    return ox_status(ONYX_LIMIT_EXCEEDED, "subgraphs are nested deeper than the limit of %d",
                     L->lim.max_graph_depth);
  OX_TRY(ox_count_nodes(L, gp->n_node));
  OxScope sc = {.g = g, .up = up};
  OnyxStatus* st = ox_collect_names(gp, &sc.names);
  if (!st) st = ox_fill_values(L, gp, &sc);
  for (size_t i = 0; !st && i < gp->n_node; i++)
    st = ox_add_node(L, &sc, gp->node[i], i, depth);
  ox_map_free(&sc.names);
  return st;
}

/* --- model ---------------------------------------------------------------------------------- */

static OnyxStatus* ox_check_ir_version(const Onnx__ModelProto* mp) {
  if (!mp->has_ir_version) return ox_status(ONYX_INVALID_MODEL, "the model has no ir_version");
  if (mp->ir_version < OX_IR_VERSION_MIN)
    return ox_status(ONYX_INVALID_MODEL, "ir_version %lld is too old (the oldest supported is %d)",
                     (long long)mp->ir_version, OX_IR_VERSION_MIN);
  if (mp->ir_version > OX_IR_VERSION_MAX)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "ir_version %lld is newer than the newest this runtime knows (%d)",
                     (long long)mp->ir_version, OX_IR_VERSION_MAX);
  return NULL;
}

static OnyxStatus* ox_check_opset(const Onnx__OperatorSetIdProto* op, const char* domain,
                                  const OxOpsetImport* seen, size_t n_seen) {
  if (!op->has_version || op->version < 1)
    return ox_status(ONYX_INVALID_MODEL, "opset import of domain '%s' has no valid version",
                     domain);
  if (!*domain && op->version > OX_ONNX_OPSET_MAX)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "ai.onnx opset %lld is newer than the newest supported (%d)",
                     (long long)op->version, OX_ONNX_OPSET_MAX);
  for (size_t i = 0; i < n_seen; i++)
    if (!strcmp(seen[i].domain, domain))
      return ox_status(ONYX_INVALID_MODEL, "domain '%s' is imported twice", domain);
  return NULL;
}

static OnyxStatus* ox_read_opsets(const Onnx__ModelProto* mp, OxGraph* g) {
  g->opsets = calloc(mp->n_opset_import ? mp->n_opset_import : 1, sizeof *g->opsets);
  if (!g->opsets) return ox_oom();
  for (size_t i = 0; i < mp->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto* op = mp->opset_import[i];
    const char* domain = ox_domain_is_onnx(op->domain) ? "" : op->domain;
    OX_TRY(ox_check_opset(op, domain, g->opsets, g->n_opsets));
    if (!(g->opsets[i].domain = ox_strdup(domain))) return ox_oom();
    g->opsets[i].version = op->version;
    g->n_opsets++;
  }
  return NULL;
}

static OnyxStatus* ox_read_model_facts(const Onnx__ModelProto* mp, const char* source, OxGraph* g) {
  OX_TRY(ox_read_opsets(mp, g));
  g->ir_version = mp->ir_version;
  g->source = ox_strdup(source);
  g->producer_name = ox_strdup(ox_str(mp->producer_name));
  return g->source && g->producer_name ? NULL : ox_oom();
}

static OnyxStatus* ox_model_from_proto(Onnx__ModelProto* mp, const char* base_dir,
                                       const char* source, const OxModelLimits* lim,
                                       OxGraph** out) {
  OX_TRY(ox_check_ir_version(mp));
  if (!mp->graph) return ox_status(ONYX_INVALID_MODEL, "the model has no graph");
  OxGraph* g;
  OX_TRY(ox_graph_new(ox_str(mp->graph->name), &g));
  OxLoader L = {.base_dir = base_dir, .lim = *lim, .model = mp, .root = g};
  OnyxStatus* st = ox_read_model_facts(mp, source, g);
  if (!st) st = ox_fill_graph(&L, mp->graph, NULL, 0, g);
  for (size_t i = 0; i < L.n_owned; i++)
    free(L.owned[i]);
  free(L.owned);
  if (st) {
    ox_graph_free(g);
    return st;
  }
  *out = g;
  return NULL;
}

/* --- unpacking ------------------------------------------------------------------------------ */

static bool ox_varint(const uint8_t** p, const uint8_t* end, uint64_t* v) {
  uint64_t r = 0;
  for (unsigned shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t b = *(*p)++;
    r |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = r;
      return true;
    }
  }
  return false;
}

/* protobuf-c unpacks nested messages recursively: refuse absurd nesting
 * first so a hostile file cannot exhaust the stack. Returns false only for
 * too deep a nesting; malformed bytes are left for the unpacker to refuse. */
static bool ox_nesting_ok(const ProtobufCMessageDescriptor* d, const uint8_t* p, const uint8_t* end,
                          int budget) {
  if (budget < 0) return false;
  while (p < end) {
    uint64_t key, n;
    if (!ox_varint(&p, end, &key)) return true;
    switch (key & 7) {
    case 0:
      if (!ox_varint(&p, end, &n)) return true;
      break;
    case 1:
    case 5:
      if ((size_t)(end - p) < ((key & 7) == 1 ? 8u : 4u)) return true;
      p += (key & 7) == 1 ? 8 : 4;
      break;
    case 2: {
      if (!ox_varint(&p, end, &n) || n > (uint64_t)(end - p)) return true;
      const ProtobufCFieldDescriptor* f =
          (key >> 3) <= UINT32_MAX
              ? protobuf_c_message_descriptor_get_field(d, (unsigned)(key >> 3))
              : NULL;
      if (f && f->type == PROTOBUF_C_TYPE_MESSAGE &&
          !ox_nesting_ok(f->descriptor, p, p + n, budget - 1))
        return false;
      p += n;
      break;
    }
    default:
      return true;
    }
  }
  return true;
}

/* The unpacked model's memory: large fields (raw_data) come from
 * ox_alloc_host, so a big initializer's bytes land on huge pages (one fault
 * per 2 MiB instead of per 4 KiB); everything is freed with free(). */
static void* ox_pb_alloc(void* ud, size_t size) {
  (void)ud;
  return size >= ((size_t)64 << 10) ? ox_alloc_host(size) : malloc(size);
}

static void ox_pb_free(void* ud, void* p) {
  (void)ud;
  free(p);
}

static ProtobufCAllocator ox_pb_allocator = {ox_pb_alloc, ox_pb_free, NULL};

static OnyxStatus* ox_unpack_model(const void* bytes, size_t len, const OxModelLimits* lim,
                                   Onnx__ModelProto** out) {
  if (len > lim->max_model_bytes)
    return ox_status(ONYX_LIMIT_EXCEEDED, "the model is %zu bytes, over the limit of %zu bytes",
                     len, lim->max_model_bytes);
  /* Each subgraph level is three messages (graph, node, attribute); type
   * protos and tensors add a few more. */
  int budget = 3 * lim->max_graph_depth + 16;
  const uint8_t* p = bytes;
  if (!ox_nesting_ok(&onnx__model_proto__descriptor, p, p + len, budget))
    return ox_status(ONYX_LIMIT_EXCEEDED, "messages are nested deeper than the limit of %d",
                     budget);
  *out = onnx__model_proto__unpack(&ox_pb_allocator, len, bytes);
  if (!*out)
    return ox_status(ONYX_INVALID_MODEL,
                     "not a valid ONNX model (protobuf parse failed: truncated or corrupt, %zu "
                     "bytes)",
                     len);
  OnyxStatus* st = ox_proto_check_text(&(*out)->base);
  if (st) {
    onnx__model_proto__free_unpacked(*out, &ox_pb_allocator);
    *out = NULL;
  }
  return st;
}

OnyxStatus* ox_model_load_bytes(const void* bytes, size_t len, const char* base_dir,
                                const char* source, const OxModelLimits* limits, OxGraph** out) {
  *out = NULL;
  source = source ? source : "<memory>";
  OxModelLimits lim = ox_limits(limits);
  Onnx__ModelProto* mp;
  OnyxStatus* st = ox_unpack_model(bytes, len, &lim, &mp);
  if (st) return ox_status_wrap(st, "%s", source);
  st = ox_model_from_proto(mp, base_dir, source, &lim, out);
  onnx__model_proto__free_unpacked(mp, &ox_pb_allocator);
  return ox_status_wrap(st, "%s", source);
}

/* The folder of a path: "." when it has none. */
static char* ox_dir_of(const char* path) {
  const char* slash = strrchr(path, '/');
  if (!slash) return ox_strdup(".");
  return ox_strndup(path, slash == path ? 1 : (size_t)(slash - path));
}

/* --- loading a file without holding it whole ----------------------------------------------
 * The large initializers of a model file (raw_data of OX_BIG_RAW bytes or
 * more in the main graph's initializers) are read straight from the file
 * into their own ox_alloc_host buffers, which their tensors then adopt; the
 * rest of the file (the skeleton: the same messages without those fields,
 * the enclosing lengths re-encoded) is read into memory and unpacked by
 * protobuf-c. Each weight byte is copied once, from the page cache into its
 * tensor, and the file is never held whole beside its weights: the memory
 * loading takes is the weights plus the skeleton, not twice the file.
 * Anything the walk does not expect (a second graph field, a second
 * raw_data in one initializer, group wire types, lengths past the end, a
 * read error) makes the caller read the whole file as before, which then
 * reports what is wrong. */

#define OX_BIG_RAW  ((size_t)64 << 10)
#define OX_SRC_WIN  ((size_t)1 << 20)
#define OX_WALK_MAX 64 /* nesting of the three levels walked is fixed: 3 */

/* A growing byte buffer: on the heap while small, mapped from
 * OX_BYTES_MAP on. The large buffers (the window, the graph's skeleton)
 * are mapped and unmapped directly, not through malloc: glibc raises its
 * mmap threshold when a mapped chunk is freed, and the session's later
 * allocations below that size would then stay in the heap, resident after
 * they are freed. */
#define OX_BYTES_MAP ((size_t)64 << 10)

typedef struct OxBytes {
  uint8_t* p;
  size_t len, cap;
} OxBytes;

static void ox_bytes_free(OxBytes* b) {
  if (b->cap >= OX_BYTES_MAP)
    munmap(b->p, b->cap);
  else
    free(b->p);
  *b = (OxBytes){0};
}

static bool ox_bytes_reserve(OxBytes* b, size_t need) {
  if (need <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < need) {
    if (cap > SIZE_MAX / 2) return false;
    cap *= 2;
  }
  uint8_t* p;
  if (cap < OX_BYTES_MAP) {
    p = realloc(b->p, cap);
    if (!p) return false;
  } else {
    void* m = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return false;
    p = m;
    if (b->len) memcpy(p, b->p, b->len);
    const size_t len = b->len;
    ox_bytes_free(b);
    b->len = len;
  }
  b->p = p;
  b->cap = cap;
  return true;
}

typedef struct OxBigRaw {
  size_t init; /* index among the graph's initializers */
  uint64_t off;
  size_t len;
} OxBigRaw;

typedef struct OxWalk {
  int fd;
  uint64_t size;
  uint8_t* win; /* a window of the file, for the small fields */
  uint64_t win_off;
  size_t win_len;
  OxBigRaw* big;
  size_t n_big, cap_big;
  size_t n_init; /* initializers seen */
  bool graph;    /* the graph field was seen */
  bool init_raw; /* the current initializer had a raw_data field */
} OxWalk;

static bool ox_pread_all(int fd, void* dst, size_t n, uint64_t off) {
  uint8_t* d = dst;
  while (n) {
    ssize_t r = pread(fd, d, n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    d += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return true;
}

/* Copies n bytes at off (within the file) through the window. */
static bool ox_walk_read(OxWalk* w, uint64_t off, void* dst, size_t n) {
  if (off > w->size || n > w->size - off) return false;
  if (n > OX_SRC_WIN / 2) return ox_pread_all(w->fd, dst, n, off);
  if (off < w->win_off || off + n > w->win_off + w->win_len) {
    size_t len = w->size - off < OX_SRC_WIN ? (size_t)(w->size - off) : OX_SRC_WIN;
    if (!ox_pread_all(w->fd, w->win, len, off)) return false;
    w->win_off = off;
    w->win_len = len;
  }
  memcpy(dst, w->win + (off - w->win_off), n);
  return true;
}

static bool ox_walk_varint(OxWalk* w, uint64_t* off, uint64_t end, uint64_t* v) {
  uint8_t buf[10];
  size_t n = end - *off < sizeof buf ? (size_t)(end - *off) : sizeof buf;
  if (!n || !ox_walk_read(w, *off, buf, n)) return false;
  const uint8_t* p = buf;
  if (!ox_varint(&p, buf + n, v)) return false;
  *off += (uint64_t)(p - buf);
  return true;
}

static bool ox_bytes_put(OxBytes* b, const void* p, size_t n) {
  if (!n) return true;
  if (n > SIZE_MAX - b->len || !ox_bytes_reserve(b, b->len + n)) return false;
  memcpy(b->p + b->len, p, n);
  b->len += n;
  return true;
}

static bool ox_bytes_varint(OxBytes* b, uint64_t v) {
  uint8_t buf[10];
  size_t n = 0;
  do {
    buf[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return ox_bytes_put(b, buf, n);
}

static bool ox_bytes_copy(OxWalk* w, OxBytes* b, uint64_t off, uint64_t n) {
  if (n > SIZE_MAX - b->len || !ox_bytes_reserve(b, b->len + (size_t)n)) return false;
  if (!ox_walk_read(w, off, b->p + b->len, (size_t)n)) return false;
  b->len += (size_t)n;
  return true;
}

/* Walks the message in [off, end) at `level` (0 ModelProto, 1 GraphProto,
 * 2 an initializer's TensorProto), appending its skeleton to out. */
static bool ox_walk_msg(OxWalk* w, int level, uint64_t off, uint64_t end, OxBytes* out) {
  while (off < end) {
    const uint64_t start = off;
    uint64_t key, n;
    if (!ox_walk_varint(w, &off, end, &key)) return false;
    const uint64_t key_end = off;
    switch (key & 7) {
    case 0:
      if (!ox_walk_varint(w, &off, end, &n)) return false;
      break;
    case 1:
    case 5:
      n = (key & 7) == 1 ? 8 : 4;
      if (end - off < n) return false;
      off += n;
      break;
    case 2: {
      if (!ox_walk_varint(w, &off, end, &n) || n > end - off) return false;
      const uint64_t field = key >> 3, body = off;
      off += n;
      const bool graph = level == 0 && field == 7, init = level == 1 && field == 5;
      if (level == 2 && field == 9) {
        if (w->init_raw) return false; /* the last would win: leave it to protobuf-c */
        w->init_raw = true;
        if (n >= OX_BIG_RAW) {
          if (!ox_grow((void**)&w->big, &w->cap_big, w->n_big + 1, sizeof *w->big)) return false;
          w->big[w->n_big++] = (OxBigRaw){w->n_init - 1, body, (size_t)n};
          continue; /* left out of the skeleton */
        }
      }
      if (graph || init) {
        if (graph && w->graph) return false; /* a second graph field merges into the first */
        w->graph = w->graph || graph;
        if (init) {
          w->n_init++;
          w->init_raw = false;
        }
        OxBytes sub = {0};
        bool ok = ox_walk_msg(w, level + 1, body, off, &sub) &&
                  ox_bytes_copy(w, out, start, key_end - start) && ox_bytes_varint(out, sub.len) &&
                  ox_bytes_put(out, sub.p, sub.len);
        ox_bytes_free(&sub);
        if (!ok) return false;
        continue;
      }
      break;
    }
    default:
      return false; /* groups: not in ONNX files */
    }
    if (!ox_bytes_copy(w, out, start, off - start)) return false;
  }
  return true;
}

/* Loads path as above. *fallback (with a NULL result) when the walk met
 * something it leaves to the whole-file path. */
static OnyxStatus* ox_model_load_stream(const char* path, const OxModelLimits* lim, OxGraph** out,
                                        bool* fallback) {
  *fallback = true;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat sb;
  OxWalk w = {.fd = fd};
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size <= 0 ||
      (uint64_t)sb.st_size > lim->max_model_bytes) {
    close(fd);
    return NULL;
  }
  void* win = mmap(NULL, OX_SRC_WIN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (win == MAP_FAILED) {
    close(fd);
    return NULL;
  }
  w.win = win;
  w.size = (uint64_t)sb.st_size;
  OxBytes skel = {0};
  bool ok = ox_walk_msg(&w, 0, 0, w.size, &skel);
  munmap(w.win, OX_SRC_WIN);
  OnyxStatus* st = NULL;
  Onnx__ModelProto* mp = NULL;
  if (ok) {
    *fallback = false;
    st = ox_unpack_model(skel.p ? skel.p : (const uint8_t*)"", skel.len, lim, &mp);
  }
  ox_bytes_free(&skel);
  /* each large raw_data into its initializer, read from the file */
  for (size_t i = 0; ok && !st && i < w.n_big; i++) {
    const OxBigRaw* b = &w.big[i];
    Onnx__TensorProto* tp =
        mp->graph && b->init < mp->graph->n_initializer ? mp->graph->initializer[b->init] : NULL;
    if (!tp || tp->has_raw_data) {
      st = ox_status(ONYX_FAIL, "internal: initializer %zu of '%s' does not match its file",
                     b->init, path);
      break;
    }
    void* buf = ox_alloc_host(b->len);
    if (!buf) {
      st = ox_oom();
      break;
    }
    if (!ox_pread_all(fd, buf, b->len, b->off)) {
      free(buf);
      st = ox_status(ONYX_FAIL, "cannot read '%s' (changed while it was read?)", path);
      break;
    }
    tp->raw_data.data = buf;
    tp->raw_data.len = b->len;
    tp->has_raw_data = 1;
  }
  free(w.big);
  close(fd);
  if (st || !ok) {
    if (mp) onnx__model_proto__free_unpacked(mp, &ox_pb_allocator);
    return st ? ox_status_wrap(st, "%s", path) : NULL;
  }
  char* dir = ox_dir_of(path);
  st = dir ? ox_model_from_proto(mp, dir, path, lim, out) : ox_oom();
  free(dir);
  onnx__model_proto__free_unpacked(mp, &ox_pb_allocator);
  return ox_status_wrap(st, "%s", path);
}

OnyxStatus* ox_model_load_file(const char* path, const OxModelLimits* limits, OxGraph** out) {
  *out = NULL;
  OxModelLimits lim = ox_limits(limits);
  const char* want_map = getenv("ONYX_MMAP_FILES");
  if (path && *path && (!want_map || strcmp(want_map, "1"))) {
    bool fallback = false;
    OnyxStatus* st = ox_model_load_stream(path, &lim, out, &fallback);
    if (st || !fallback) return st;
  }
  void* bytes;
  size_t len;
  bool mapped;
  OX_TRY(ox_map_file(path, lim.max_model_bytes, &bytes, &len, &mapped));
  Onnx__ModelProto* mp;
  OnyxStatus* st = ox_unpack_model(bytes, len, &lim, &mp);
  ox_unmap_file(bytes, len, mapped); /* the unpacked message holds its own copies */
  if (st) return ox_status_wrap(st, "%s", path);
  char* dir = ox_dir_of(path);
  st = dir ? ox_model_from_proto(mp, dir, path, &lim, out) : ox_oom();
  free(dir);
  onnx__model_proto__free_unpacked(mp, &ox_pb_allocator);
  return ox_status_wrap(st, "%s", path);
}

/* --- SequenceProto / OptionalProto (onnx-data.proto), read by hand ----------------------------
 * SequenceProto: 1 name, 2 elem_type, 3 tensor_values (repeated TensorProto).
 * OptionalProto: 1 name, 2 elem_type, 3 tensor_value, 5 sequence_value.
 * elem_type: 0 undefined (OptionalProto: empty), 1 tensor, 3 sequence. */

typedef struct OxWireField {
  uint64_t num, wire, varint;
  const uint8_t* data;
  size_t len;
} OxWireField;

static bool ox_wire_next(const uint8_t** p, const uint8_t* end, OxWireField* f) {
  uint64_t key;
  if (*p >= end || !ox_varint(p, end, &key)) return false;
  *f = (OxWireField){.num = key >> 3, .wire = key & 7};
  switch (f->wire) {
  case 0:
    return ox_varint(p, end, &f->varint);
  case 1:
  case 5: {
    size_t n = f->wire == 1 ? 8 : 4;
    if ((size_t)(end - *p) < n) return false;
    *p += n;
    return true;
  }
  case 2:
    if (!ox_varint(p, end, &f->varint) || f->varint > (uint64_t)(end - *p)) return false;
    f->data = *p;
    f->len = (size_t)f->varint;
    *p += f->len;
    return true;
  default:
    return false;
  }
}

static OnyxStatus* ox_container_from_bytes(const uint8_t* p, size_t len, bool optional, int depth,
                                           OxTensor** out, char** name);

/* --- MapProto: 1 name, 2 key_type, 3 keys (int64, packed or not), 4 string_keys,
 * 5 values (a SequenceProto of tensors). */

static OnyxStatus* ox_seq_from_bytes(const uint8_t* p, size_t len, int depth, OxTensor** out,
                                     char** name);

static OnyxStatus* ox_map_add_int_key(int64_t** keys, size_t* n, size_t* cap, uint64_t v) {
  if (*n == *cap) {
    size_t c = *cap ? 2 * *cap : 16;
    int64_t* grown = realloc(*keys, c * sizeof *grown);
    if (!grown) return ox_oom();
    *keys = grown;
    *cap = c;
  }
  (*keys)[(*n)++] = (int64_t)v;
  return NULL;
}

/* The values of a MapProto: every element of every tensor of the sequence, in
 * order, as one 1-D tensor. */
static OnyxStatus* ox_map_values(const OxTensor* seq, OxTensor** out) {
  *out = NULL;
  size_t total = 0;
  for (size_t i = 0; i < seq->n_items; i++)
    if (!ox_add_size(total, seq->items[i]->count, &total)) return ox_oom();
  if (total > (size_t)INT64_MAX) return ox_oom();
  int64_t dim = (int64_t)total;
  OX_TRY(ox_tensor_new(seq->type, &dim, 1, out));
  size_t esz = seq->type == ONYX_ELEM_STRING ? 0 : ox_elem_size(seq->type), at = 0;
  OnyxStatus* st = NULL;
  if (seq->type != ONYX_ELEM_STRING && !esz)
    st = ox_status(ONYX_NOT_IMPLEMENTED, "map values of element type %s", ox_elem_name(seq->type));
  for (size_t i = 0; !st && i < seq->n_items; i++) {
    const OxTensor* t = seq->items[i];
    if (seq->type == ONYX_ELEM_STRING)
      st = ox_tensor_copy_strings(*out, at, t, 0, t->count);
    else if (t->count)
      memcpy((char*)(*out)->data + at * esz, t->data, t->count * esz);
    at += t->count;
  }
  if (st) {
    ox_tensor_free(*out);
    *out = NULL;
  }
  return st;
}

static OnyxStatus* ox_map_from_bytes(const uint8_t* p, size_t len, int depth, OxTensor** out,
                                     char** name) {
  *out = NULL;
  if (depth > 4) return ox_status(ONYX_LIMIT_EXCEEDED, "containers nested too deep");
  const uint8_t* end = p + len;
  OxWireField f;
  int64_t key_type = 0;
  int64_t* ikeys = NULL;
  size_t n_ikeys = 0, cap = 0, n_skeys = 0;
  OxTensor *vals = NULL, *keys = NULL, *values = NULL;
  OnyxStatus* st = NULL;
  /* String keys: counted first, then copied (a second pass). */
  const uint8_t* start = p;
  while (!st && p < end) {
    if (!ox_wire_next(&p, end, &f)) {
      st = ox_status(ONYX_INVALID_ARGUMENT, "not a valid MapProto");
    } else if (f.num == 1 && f.wire == 2 && name && !*name) {
      if (!(*name = ox_strndup((const char*)f.data, f.len))) st = ox_oom();
    } else if (f.num == 2 && f.wire == 0) {
      key_type = (int64_t)f.varint;
    } else if (f.num == 3 && f.wire == 0) {
      st = ox_map_add_int_key(&ikeys, &n_ikeys, &cap, f.varint);
    } else if (f.num == 3 && f.wire == 2) {
      const uint8_t *q = f.data, *qe = f.data + f.len;
      uint64_t v;
      while (!st && q < qe)
        st = ox_varint(&q, qe, &v) ? ox_map_add_int_key(&ikeys, &n_ikeys, &cap, v)
                                   : ox_status(ONYX_INVALID_ARGUMENT, "bad MapProto keys");
    } else if (f.num == 4 && f.wire == 2) {
      n_skeys++;
    } else if (f.num == 5 && f.wire == 2 && !vals) {
      st = ox_seq_from_bytes(f.data, f.len, depth + 1, &vals, NULL);
      if (!st && vals->vkind != OX_RT_SEQUENCE)
        st = ox_status(ONYX_NOT_IMPLEMENTED, "MapProto values must be tensors");
    }
  }
  if (!st && key_type != ONYX_ELEM_INT64 && key_type != ONYX_ELEM_STRING)
    st = ox_status(ONYX_NOT_IMPLEMENTED,
                   "MapProto key type %lld (only int64 (7) and string (8) keys)",
                   (long long)key_type);
  if (!st &&
      ((key_type == ONYX_ELEM_INT64 && n_skeys) || (key_type == ONYX_ELEM_STRING && n_ikeys)))
    st = ox_status(ONYX_INVALID_ARGUMENT, "MapProto keys do not match its key type");
  if (!st && !vals) st = ox_status(ONYX_INVALID_ARGUMENT, "MapProto without values");
  size_t n_keys = key_type == ONYX_ELEM_INT64 ? n_ikeys : n_skeys;
  if (!st && n_keys > (size_t)INT64_MAX) st = ox_oom();
  int64_t dim = (int64_t)n_keys;
  if (!st) st = ox_tensor_new((OnyxElemType)key_type, &dim, 1, &keys);
  if (!st && key_type == ONYX_ELEM_INT64 && n_keys)
    memcpy(keys->data, ikeys, n_keys * sizeof *ikeys);
  for (size_t k = 0, q = 0; !st && key_type == ONYX_ELEM_STRING && q < len;) {
    const uint8_t* pp = start + q;
    if (!ox_wire_next(&pp, end, &f)) break;
    q = (size_t)(pp - start);
    if (f.num == 4 && f.wire == 2) st = ox_tensor_set_string(keys, k++, (const char*)f.data, f.len);
  }
  if (!st) st = ox_map_values(vals, &values);
  free(ikeys);
  ox_tensor_free(vals);
  if (!st) {
    OxTensor* k = keys;
    keys = NULL;
    OxTensor* v = values;
    values = NULL;
    st = ox_map_new(k, v, true, out);
  }
  ox_tensor_free(keys);
  ox_tensor_free(values);
  if (st && name) {
    free(*name);
    *name = NULL;
  }
  return st;
}

/* Item f (a MapProto) of a SequenceProto: the sequence becomes one of maps
 * (an empty one stays a sequence of tensors: its types are unknown). */
static OnyxStatus* ox_seq_add_map(OxTensor* seq, const uint8_t* p, size_t len, int depth) {
  if (seq->vkind == OX_RT_SEQUENCE && seq->n_items)
    return ox_status(ONYX_INVALID_ARGUMENT, "SequenceProto mixes maps and tensors");
  OxTensor* m;
  OX_TRY(ox_map_from_bytes(p, len, depth + 1, &m, NULL));
  if (seq->vkind == OX_RT_SEQUENCE) {
    seq->vkind = OX_RT_SEQ_MAP;
    seq->key_type = m->key_type;
    seq->type = m->type;
  }
  return ox_seq_map_append(seq, m);
}

OnyxStatus* ox_map_from_proto_bytes(const void* bytes, size_t len, OxTensor** out, char** name) {
  if (name) *name = NULL;
  return ox_map_from_bytes(bytes, len, 0, out, name);
}

static OnyxStatus* ox_seq_from_bytes(const uint8_t* p, size_t len, int depth, OxTensor** out,
                                     char** name) {
  const uint8_t* end = p + len;
  OxWireField f;
  OxTensor* seq = NULL;
  OnyxStatus* st = ox_value_new_sequence(ONYX_ELEM_UNDEFINED, &seq);
  while (!st && p < end) {
    if (!ox_wire_next(&p, end, &f)) {
      st = ox_status(ONYX_INVALID_ARGUMENT, "not a valid SequenceProto");
      break;
    }
    if (f.num == 1 && f.wire == 2 && name && !*name) {
      if (!(*name = ox_strndup((const char*)f.data, f.len))) st = ox_oom();
    } else if (f.num == 2 && f.wire == 0 && f.varint != 1 && f.varint != 4) {
      st = ox_status(ONYX_NOT_IMPLEMENTED,
                     "SequenceProto of element kind %llu (only tensors and maps)",
                     (unsigned long long)f.varint);
    } else if (f.num == 6 && f.wire == 2) {
      st = ox_seq_add_map(seq, f.data, f.len, depth);
    } else if (f.num == 3 && f.wire == 2 && seq->vkind == OX_RT_SEQ_MAP) {
      st = ox_status(ONYX_INVALID_ARGUMENT, "SequenceProto mixes maps and tensors");
    } else if (f.num == 3 && f.wire == 2) {
      OxTensor* t = NULL;
      st = ox_tensor_from_proto_bytes(f.data, f.len, &t, NULL);
      if (!st && seq->type != ONYX_ELEM_UNDEFINED && t->type != seq->type)
        st = ox_status(ONYX_INVALID_ARGUMENT, "SequenceProto items have different types");
      if (!st) seq->type = t->type;
      if (!st) st = ox_sequence_insert(seq, SIZE_MAX, t);
      if (st) ox_tensor_free(t);
    } else if (f.num == 4 || f.num == 5 || f.num == 7) {
      st = ox_status(ONYX_NOT_IMPLEMENTED,
                     "SequenceProto of sparse tensors, sequences or optionals");
    }
  }
  if (st) {
    ox_tensor_free(seq);
    return st;
  }
  *out = seq;
  return NULL;
}

static OnyxStatus* ox_container_from_bytes(const uint8_t* p, size_t len, bool optional, int depth,
                                           OxTensor** out, char** name) {
  *out = NULL;
  if (depth > 4) return ox_status(ONYX_LIMIT_EXCEEDED, "containers nested too deep");
  if (!optional) return ox_seq_from_bytes(p, len, depth, out, name);
  const uint8_t* end = p + len;
  OxWireField f;
  OnyxStatus* st = NULL;
  while (!st && p < end) {
    if (!ox_wire_next(&p, end, &f)) {
      st = ox_status(ONYX_INVALID_ARGUMENT, "not a valid OptionalProto");
      break;
    }
    if (f.num == 1 && f.wire == 2 && name && !*name) {
      if (!(*name = ox_strndup((const char*)f.data, f.len))) st = ox_oom();
    } else if (f.num == 3 && f.wire == 2 && !*out) {
      st = ox_tensor_from_proto_bytes(f.data, f.len, out, NULL);
    } else if (f.num == 5 && f.wire == 2 && !*out) {
      st = ox_seq_from_bytes(f.data, f.len, depth + 1, out, NULL);
    } else if ((f.num == 4 || f.num == 6 || f.num == 7) && f.wire == 2) {
      st = ox_status(ONYX_NOT_IMPLEMENTED, "OptionalProto of a map, sparse tensor or optional");
    }
  }
  if (!st && !*out) st = ox_value_new_none(ONYX_ELEM_UNDEFINED, out);
  if (st) {
    ox_tensor_free(*out);
    *out = NULL;
  }
  return st;
}

OnyxStatus* ox_value_from_proto_bytes(const void* bytes, size_t len, uint8_t kind, OxTensor** out,
                                      char** name) {
  *out = NULL;
  if (name) *name = NULL;
  OnyxStatus* st;
  if (kind == OX_VK_TENSOR)
    st = ox_tensor_from_proto_bytes(bytes, len, out, name);
  else if (kind == OX_VK_MAP)
    st = ox_map_from_bytes(bytes, len, 0, out, name);
  else if (kind == OX_VK_SEQ_MAP)
    st = ox_container_from_bytes(bytes, len, false, 0, out, name);
  else
    st = ox_container_from_bytes(bytes, len, kind != OX_VK_SEQUENCE, 0, out, name);
  /* An empty SequenceProto read as a sequence of maps is one (of types it
   * does not say); a sequence of tensors is refused. */
  if (!st && kind == OX_VK_SEQ_MAP && (*out)->vkind == OX_RT_SEQUENCE) {
    if ((*out)->n_items) {
      st = ox_status(ONYX_INVALID_ARGUMENT, "a SequenceProto of tensors, not of maps");
      ox_tensor_free(*out);
      *out = NULL;
    } else {
      (*out)->vkind = OX_RT_SEQ_MAP;
    }
  }
  if (st && name) {
    free(*name);
    *name = NULL;
  }
  return st;
}

/* --- expanding a node through its ONNX function body ----------------------------------------- */

static OnyxStatus* ox_attr_copy(const OxAttr* src, const char* name, OxAttr* dst) {
  *dst = (OxAttr){.type = src->type,
                  .i = src->i,
                  .f = src->f,
                  .count = src->count,
                  .tp_kind = src->tp_kind,
                  .tp_elem = src->tp_elem};
  if (!(dst->name = ox_strdup(name))) return ox_oom();
  switch (src->type) {
  case ONYX_ATTR_FLOAT:
  case ONYX_ATTR_INT:
  case ONYX_ATTR_TYPE_PROTO:
    return NULL;
  case ONYX_ATTR_STRING:
    dst->s_len = src->s_len;
    dst->s = malloc(src->s_len + 1);
    if (!dst->s) return ox_oom();
    memcpy(dst->s, src->s, src->s_len + 1);
    return NULL;
  case ONYX_ATTR_INTS:
    return (dst->ints = ox_dup_array(src->ints, src->count, sizeof(int64_t))) ? NULL : ox_oom();
  case ONYX_ATTR_FLOATS:
    return (dst->floats = ox_dup_array(src->floats, src->count, sizeof(float))) ? NULL : ox_oom();
  case ONYX_ATTR_STRINGS:
    dst->strings = calloc(src->count ? src->count : 1, sizeof *dst->strings);
    dst->strings_len = calloc(src->count ? src->count : 1, sizeof *dst->strings_len);
    if (!dst->strings || !dst->strings_len) return ox_oom();
    for (size_t i = 0; i < src->count; i++) { /* the bytes and their NUL terminator */
      size_t len = src->strings_len ? src->strings_len[i] : strlen(src->strings[i]);
      if (len == SIZE_MAX || !(dst->strings[i] = malloc(len + 1))) return ox_oom();
      memcpy(dst->strings[i], src->strings[i], len + 1);
      dst->strings_len[i] = len;
    }
    return NULL;
  case ONYX_ATTR_TENSOR:
    return ox_tensor_clone(src->t, &dst->t);
  default:
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "attribute '%s' of type %d cannot be passed into a "
                     "function body",
                     src->name, (int)src->type);
  }
}

static const OxAttr* ox_attr_in(const OxAttr* attrs, size_t n, const char* name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(attrs[i].name, name)) return &attrs[i];
  return NULL;
}

/* The scope's names: every value g holds (refreshed as the body's nodes
 * are added). */
static OnyxStatus* ox_scope_names(OxScope* sc, const OxGraph* g) {
  ox_map_free(&sc->names);
  for (size_t i = 0; i < g->n_values; i++)
    if (!ox_map_put(&sc->names, g->values[i]->name, g->values[i])) return ox_oom();
  return NULL;
}

/* A subgraph attribute of a body node reads the body's values by their names
 * in the body; once inlined those values carry the call's names (internal
 * ones prefixed, formal inputs the call's inputs). Renames every read in
 * `gp` (and deeper subgraphs) of a name that `gp` does not define itself.
 * `rename` maps body names to call names; `shadow` holds the names the
 * enclosing subgraphs define, which win. */
static OnyxStatus* ox_rename_outer(Onnx__GraphProto* gp, const OxMap* rename, const OxMap* shadow,
                                   int depth) {
  if (depth > 16) return ox_status(ONYX_INVALID_MODEL, "function body: subgraphs nested too deep");
  OxMap local = {0};
  bool oom = false;
  for (size_t i = 0; shadow && i < shadow->cap; i++)
    if (shadow->keys && shadow->keys[i]) oom |= !ox_map_put(&local, shadow->keys[i], (void*)1);
  for (size_t i = 0; i < gp->n_input; i++)
    oom |= gp->input[i]->name && !ox_map_put(&local, gp->input[i]->name, (void*)1);
  for (size_t i = 0; i < gp->n_initializer; i++)
    oom |= gp->initializer[i]->name && !ox_map_put(&local, gp->initializer[i]->name, (void*)1);
  for (size_t k = 0; k < gp->n_node; k++)
    for (size_t o = 0; o < gp->node[k]->n_output; o++)
      oom |= !ox_map_put(&local, gp->node[k]->output[o], (void*)1);
  OnyxStatus* st = oom ? ox_oom() : NULL;
  for (size_t k = 0; !st && k < gp->n_node; k++) {
    Onnx__NodeProto* np = gp->node[k];
    for (size_t i = 0; !st && i < np->n_input; i++) {
      const char* to = *np->input[i] && !ox_map_get(&local, np->input[i])
                           ? ox_map_get(rename, np->input[i])
                           : NULL;
      char* copy = to ? ox_strdup(to) : NULL;
      if (to && !copy) st = ox_oom();
      if (copy) {
        free(np->input[i]); /* protobuf-c's default allocator is malloc */
        np->input[i] = copy;
      }
    }
    for (size_t a = 0; !st && a < np->n_attribute; a++) {
      Onnx__AttributeProto* ap = np->attribute[a];
      if (ap->g) st = ox_rename_outer(ap->g, rename, &local, depth + 1);
      for (size_t j = 0; !st && j < ap->n_graphs; j++)
        st = ox_rename_outer(ap->graphs[j], rename, &local, depth + 1);
    }
  }
  ox_map_free(&local);
  return st;
}

/* Renames, in every subgraph attribute of the body's nodes, the reads of body
 * values to the names they get in g. */
static OnyxStatus* ox_body_subgraph_names(const Onnx__FunctionProto* f, const OxMap* internal,
                                          char** ins, size_t n_in) {
  OxMap rename = {0};
  bool oom = false;
  for (size_t i = 0; i < internal->cap; i++)
    if (internal->keys && internal->keys[i])
      oom |= !ox_map_put(&rename, internal->keys[i], internal->vals[i]);
  for (size_t j = 0; j < f->n_input; j++)
    oom |= !ox_map_put(&rename, f->input[j], j < n_in && ins[j] ? ins[j] : "");
  OnyxStatus* st = oom ? ox_oom() : NULL;
  for (size_t k = 0; !st && k < f->n_node; k++)
    for (size_t a = 0; !st && a < f->node[k]->n_attribute; a++) {
      Onnx__AttributeProto* ap = f->node[k]->attribute[a];
      if (ap->g) st = ox_rename_outer(ap->g, &rename, NULL, 1);
      for (size_t j = 0; !st && j < ap->n_graphs; j++)
        st = ox_rename_outer(ap->graphs[j], &rename, NULL, 1);
    }
  ox_map_free(&rename);
  return st;
}

/* The nodes of one body, added to g in place of the call. */
static OnyxStatus* ox_expand_body(OxGraph* g, const char* cname, char** ins, size_t n_in,
                                  char** outs, size_t n_out, const OxAttr* attrs, size_t n_attrs,
                                  Onnx__FunctionProto* f) {
  OxLoader L = {.lim = ox_limits(NULL), .root = g};
  OxScope sc = {.g = g};
  OxMap internal = {0};
  char** made = calloc(1, sizeof *made);
  size_t n_made = 0, cap_made = 1;
  OnyxStatus* st = made ? NULL : ox_oom();
  for (size_t k = 0; !st && k < f->n_node; k++)
    for (size_t o = 0; !st && o < f->node[k]->n_output; o++) {
      const char* nm = f->node[k]->output[o];
      bool formal = false;
      for (size_t j = 0; j < f->n_output; j++)
        formal |= !strcmp(f->output[j], nm);
      if (!*nm || formal || ox_map_get(&internal, nm)) continue;
      char* u = ox_asprintf("%s/%s", cname, nm);
      if (!u || !ox_grow((void**)&made, &cap_made, n_made + 1, sizeof *made) ||
          !ox_map_put(&internal, nm, u)) {
        free(u);
        st = ox_oom();
        break;
      }
      made[n_made++] = u;
    }
  if (!st) st = ox_body_subgraph_names(f, &internal, ins, n_in);
  for (size_t k = 0; !st && k < f->n_node; k++) {
    const Onnx__NodeProto* bn = f->node[k];
    const char** bi = calloc(bn->n_input + 1, sizeof *bi);
    const char** bo = calloc(bn->n_output + 1, sizeof *bo);
    char* name = ox_asprintf("%s/%s_%zu", cname, ox_str(bn->op_type), k);
    if (!bi || !bo || !name) st = ox_oom();
    for (size_t i = 0; !st && i < bn->n_input; i++) {
      const char* nm = bn->input[i];
      bi[i] = nm;
      for (size_t j = 0; j < f->n_input; j++)
        if (!strcmp(f->input[j], nm)) bi[i] = j < n_in && ins[j] ? ins[j] : "";
      if (ox_map_get(&internal, nm)) bi[i] = ox_map_get(&internal, nm);
    }
    for (size_t i = 0; !st && i < bn->n_output; i++) {
      const char* nm = bn->output[i];
      bo[i] = ox_map_get(&internal, nm) ? (const char*)ox_map_get(&internal, nm) : "";
      for (size_t j = 0; j < f->n_output; j++)
        if (!strcmp(f->output[j], nm)) bo[i] = j < n_out && outs[j] ? outs[j] : "";
    }
    OxNode* n = NULL;
    if (!st)
      st = ox_graph_add_node(g, name, ox_str(bn->op_type),
                             ox_domain_is_onnx(bn->domain) ? "" : bn->domain, bi, bn->n_input, bo,
                             bn->n_output, &n);
    for (size_t i = 0; !st && i < bn->n_attribute; i++) {
      const Onnx__AttributeProto* ap = bn->attribute[i];
      OxAttr a = {0};
      if (ap->ref_attr_name && *ap->ref_attr_name) {
        const OxAttr* src = ox_attr_in(attrs, n_attrs, ap->ref_attr_name);
        if (!src) continue; /* not given: the op's default */
        st = ox_attr_copy(src, ox_str(ap->name), &a);
      } else {
        /* A subgraph reads the values g holds so far by name. */
        if (ap->g || ap->n_graphs) st = ox_scope_names(&sc, g);
        if (!st) st = ox_read_attr(&L, &sc, ap, 0, &a);
      }
      if (!st) st = ox_node_add_attr(n, &a);
      ox_attr_discard(&a);
    }
    /* Its subgraphs' outer-scope reads become implicit inputs, as at load. */
    if (!st && n) st = ox_node_link_subgraphs(g, n);
    free(bi);
    free(bo);
    free(name);
  }
  for (size_t i = 0; i < n_made; i++)
    free(made[i]);
  free(made);
  ox_map_free(&internal);
  ox_map_free(&sc.names);
  return st;
}

OnyxStatus* ox_graph_expand_function(OxGraph* g, OxNode* n, const uint8_t* bytes, size_t len) {
  Onnx__FunctionProto* f = onnx__function_proto__unpack(NULL, len, bytes);
  if (!f)
    return ox_status(ONYX_FAIL, "node '%s' (%s): its function body does not parse", n->name,
                     n->op_type);
  char* cname = ox_strdup(n->name);
  char* op = ox_strdup(n->op_type);
  char** ins = calloc(n->n_inputs + 1, sizeof *ins);
  char** outs = calloc(n->n_outputs + 1, sizeof *outs);
  OnyxStatus* st = (!cname || !op || !ins || !outs) ? ox_oom() : NULL;
  size_t n_in = n->n_inputs - n->n_implicit, n_out = n->n_outputs;
  for (size_t i = 0; !st && i < n_in; i++)
    if (n->inputs[i] && !(ins[i] = ox_strdup(n->inputs[i]->name))) st = ox_oom();
  for (size_t i = 0; !st && i < n_out; i++)
    if (n->outputs[i] && !(outs[i] = ox_strdup(n->outputs[i]->name))) st = ox_oom();
  OxAttr* attrs = NULL;
  size_t n_attrs = 0;
  if (!st) { /* the call's attributes outlive the node for ref_attr_name */
    attrs = n->attrs;
    n_attrs = n->n_attrs;
    n->attrs = NULL;
    n->n_attrs = n->cap_attrs = 0;
    ox_graph_remove_node(g, n);
    st = ox_expand_body(g, cname, ins, n_in, outs, n_out, attrs, n_attrs, f);
  }
  for (size_t i = 0; i < n_attrs; i++)
    ox_attr_discard(&attrs[i]);
  free(attrs);
  for (size_t i = 0; ins && i < n_in; i++)
    free(ins[i]);
  for (size_t i = 0; outs && i < n_out; i++)
    free(outs[i]);
  free(ins);
  free(outs);
  if (st) st = ox_status_wrap(st, "expanding node '%s' (%s) through its function body", cname, op);
  free(cname);
  free(op);
  onnx__function_proto__free_unpacked(f, NULL);
  return st;
}
