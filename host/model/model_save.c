/* model_save.c — IR graph -> ModelProto file. Proto structs are built in a
 * pool freed at once; tensor data is borrowed from the graph, not copied. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "onnx.pb-c.h"
#include "model_internal.h"

/* IR 3 wants every initializer listed as a graph input; our graphs do not
 * list them, so a model is written as IR 4 at least. */
#define OX_SAVE_IR_VERSION_MIN 4

typedef struct OxSaver {
  void** blocks; /* every pool allocation */
  size_t n_blocks, cap_blocks;
  Onnx__TensorProto** tensors; /* need ox_tensor_proto_clear */
  size_t n_tensors, cap_tensors;
  bool oom;
} OxSaver;

static void* ox_save_alloc(OxSaver* s, size_t count, size_t elem) {
  if (s->oom || !ox_grow((void**)&s->blocks, &s->cap_blocks, s->n_blocks + 1, sizeof(void*))) {
    s->oom = true;
    return NULL;
  }
  void* p = calloc(count ? count : 1, elem);
  if (!p) s->oom = true;
  if (p) s->blocks[s->n_blocks++] = p;
  return p;
}

static void ox_saver_free(OxSaver* s) {
  for (size_t i = 0; i < s->n_tensors; i++)
    ox_tensor_proto_clear(s->tensors[i]);
  for (size_t i = 0; i < s->n_blocks; i++)
    free(s->blocks[i]);
  free(s->tensors);
  free(s->blocks);
}

static OnyxStatus* ox_save_tensor(OxSaver* s, const OxTensor* t, const char* name,
                                  Onnx__TensorProto** out) {
  Onnx__TensorProto* tp = ox_save_alloc(s, 1, sizeof *tp);
  if (!tp || !ox_grow((void**)&s->tensors, &s->cap_tensors, s->n_tensors + 1, sizeof(void*)))
    return ox_oom();
  onnx__tensor_proto__init(tp);
  s->tensors[s->n_tensors++] = tp;
  *out = tp;
  return ox_tensor_to_proto(t, name, tp);
}

/* --- value infos ---------------------------------------------------------------------- */

static Onnx__TensorShapeProto* ox_save_shape(OxSaver* s, const OxValue* v) {
  Onnx__TensorShapeProto* sp = ox_save_alloc(s, 1, sizeof *sp);
  Onnx__TensorShapeProto__Dimension** dims = ox_save_alloc(s, (size_t)v->rank, sizeof *dims);
  if (!sp || !dims) return NULL;
  onnx__tensor_shape_proto__init(sp);
  sp->n_dim = (size_t)v->rank;
  sp->dim = dims;
  for (int32_t i = 0; i < v->rank; i++) {
    Onnx__TensorShapeProto__Dimension* d = ox_save_alloc(s, 1, sizeof *d);
    if (!d) return NULL;
    onnx__tensor_shape_proto__dimension__init(d);
    if (v->dim_params && v->dim_params[i]) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      d->dim_param = v->dim_params[i];
    } else if (v->dims[i] >= 0) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = v->dims[i];
    }
    dims[i] = d;
  }
  return sp;
}

/* map(K, V), or seq(map(K, V)) for OX_VK_SEQ_MAP; NULL without memory. */
static Onnx__TypeProto* ox_save_map_type(OxSaver* s, const OxValue* v) {
  Onnx__TypeProto* vt = ox_save_alloc(s, 1, sizeof *vt);
  Onnx__TypeProto__Tensor* tt = ox_save_alloc(s, 1, sizeof *tt);
  Onnx__TypeProto* mt = ox_save_alloc(s, 1, sizeof *mt);
  Onnx__TypeProto__Map* m = ox_save_alloc(s, 1, sizeof *m);
  if (!vt || !tt || !mt || !m) return NULL;
  onnx__type_proto__init(vt);
  onnx__type_proto__tensor__init(tt);
  tt->has_elem_type = true;
  tt->elem_type = (int32_t)v->type;
  vt->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  vt->tensor_type = tt;
  onnx__type_proto__map__init(m);
  m->has_key_type = true;
  m->key_type = (int32_t)v->map_key;
  m->value_type = vt;
  onnx__type_proto__init(mt);
  mt->value_case = ONNX__TYPE_PROTO__VALUE_MAP_TYPE;
  mt->map_type = m;
  if (v->kind == OX_VK_MAP) return mt;
  Onnx__TypeProto* st = ox_save_alloc(s, 1, sizeof *st);
  Onnx__TypeProto__Sequence* sq = ox_save_alloc(s, 1, sizeof *sq);
  if (!st || !sq) return NULL;
  onnx__type_proto__sequence__init(sq);
  sq->elem_type = mt;
  onnx__type_proto__init(st);
  st->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
  st->sequence_type = sq;
  return st;
}

static Onnx__ValueInfoProto* ox_save_value_info(OxSaver* s, const OxValue* v) {
  Onnx__ValueInfoProto* vi = ox_save_alloc(s, 1, sizeof *vi);
  if (!vi) return NULL;
  onnx__value_info_proto__init(vi);
  vi->name = v->name;
  if (v->type == ONYX_ELEM_UNDEFINED && v->rank < 0) return vi;
  if (v->kind == OX_VK_MAP || v->kind == OX_VK_SEQ_MAP) {
    vi->type = ox_save_map_type(s, v);
    return vi->type ? vi : NULL;
  }
  Onnx__TypeProto* tp = ox_save_alloc(s, 1, sizeof *tp);
  Onnx__TypeProto__Tensor* tt = ox_save_alloc(s, 1, sizeof *tt);
  if (!tp || !tt) return NULL;
  onnx__type_proto__init(tp);
  onnx__type_proto__tensor__init(tt);
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  tt->has_elem_type = true;
  tt->elem_type = (int32_t)v->type;
  if (v->rank >= 0 && !(tt->shape = ox_save_shape(s, v))) return NULL;
  vi->type = tp;
  return vi;
}

static OnyxStatus* ox_save_value_list(OxSaver* s, OxValue* const* vals, size_t n,
                                      Onnx__ValueInfoProto*** out, size_t* n_out) {
  *out = ox_save_alloc(s, n, sizeof **out);
  if (!*out) return ox_oom();
  for (size_t i = 0; i < n; i++)
    if (!((*out)[i] = ox_save_value_info(s, vals[i]))) return ox_oom();
  *n_out = n;
  return NULL;
}

/* --- nodes and attributes ------------------------------------------------------------- */

static OnyxStatus* ox_save_graph(OxSaver* s, const OxGraph* g, Onnx__GraphProto* gp);

static OnyxStatus* ox_save_attr(OxSaver* s, const OxAttr* a, Onnx__AttributeProto* ap) {
  onnx__attribute_proto__init(ap);
  ap->name = a->name;
  ap->has_type = true;
  ap->type = (Onnx__AttributeProto__AttributeType)a->type;
  switch (a->type) {
  case ONYX_ATTR_FLOAT:
    ap->has_f = true;
    ap->f = a->f;
    return NULL;
  case ONYX_ATTR_INT:
    ap->has_i = true;
    ap->i = a->i;
    return NULL;
  case ONYX_ATTR_STRING:
    ap->has_s = true;
    ap->s = (ProtobufCBinaryData){a->s_len, (uint8_t*)a->s};
    return NULL;
  case ONYX_ATTR_FLOATS:
    ap->n_floats = a->count;
    ap->floats = a->floats;
    return NULL;
  case ONYX_ATTR_INTS:
    ap->n_ints = a->count;
    ap->ints = a->ints;
    return NULL;
  case ONYX_ATTR_STRINGS:
    if (!(ap->strings = ox_save_alloc(s, a->count, sizeof *ap->strings))) return ox_oom();
    ap->n_strings = a->count;
    for (size_t i = 0; i < a->count; i++)
      ap->strings[i] = (ProtobufCBinaryData){
          a->strings_len ? a->strings_len[i] : strlen(a->strings[i]), (uint8_t*)a->strings[i]};
    return NULL;
  case ONYX_ATTR_TENSOR:
    return ox_save_tensor(s, a->t, "", &ap->t);
  case ONYX_ATTR_TENSORS:
    if (!(ap->tensors = ox_save_alloc(s, a->count, sizeof *ap->tensors))) return ox_oom();
    ap->n_tensors = a->count;
    for (size_t i = 0; i < a->count; i++)
      OX_TRY(ox_save_tensor(s, a->tensors[i], "", &ap->tensors[i]));
    return NULL;
  case ONYX_ATTR_GRAPH:
    if (!(ap->g = ox_save_alloc(s, 1, sizeof *ap->g))) return ox_oom();
    return ox_save_graph(s, a->g, ap->g);
  case ONYX_ATTR_GRAPHS: {
    Onnx__GraphProto* gps = ox_save_alloc(s, a->count, sizeof *gps);
    if (!gps || !(ap->graphs = ox_save_alloc(s, a->count, sizeof *ap->graphs))) return ox_oom();
    ap->n_graphs = a->count;
    for (size_t i = 0; i < a->count; i++) {
      ap->graphs[i] = &gps[i];
      OX_TRY(ox_save_graph(s, a->graphs[i], &gps[i]));
    }
    return NULL;
  }
  default:
    return ox_status(ONYX_NOT_IMPLEMENTED, "saving a %s attribute is not supported yet",
                     a->type == ONYX_ATTR_GRAPH || a->type == ONYX_ATTR_GRAPHS ? "subgraph"
                                                                               : "non-tensor");
  }
}

/* Absent optional values are written as "". */
static char** ox_save_names(OxSaver* s, OxValue* const* vals, size_t n) {
  char** names = ox_save_alloc(s, n, sizeof *names);
  for (size_t i = 0; names && i < n; i++)
    names[i] = vals[i] ? vals[i]->name : (char*)"";
  return names;
}

static OnyxStatus* ox_save_node(OxSaver* s, const OxNode* n, Onnx__NodeProto** out) {
  Onnx__NodeProto* np = ox_save_alloc(s, 1, sizeof *np);
  Onnx__AttributeProto* aps = ox_save_alloc(s, n->n_attrs, sizeof *aps);
  Onnx__AttributeProto** attrs = ox_save_alloc(s, n->n_attrs, sizeof *attrs);
  if (!np || !aps || !attrs) return ox_oom();
  onnx__node_proto__init(np);
  np->name = n->name;
  np->op_type = n->op_type;
  np->domain = n->domain && *n->domain ? n->domain : NULL;
  np->input = ox_save_names(s, n->inputs, n->n_inputs);
  np->output = ox_save_names(s, n->outputs, n->n_outputs);
  if (!np->input || !np->output) return ox_oom();
  np->n_input = n->n_inputs - n->n_implicit; /* outer-scope reads are not inputs in ONNX */
  np->n_output = n->n_outputs;
  for (size_t i = 0; i < n->n_attrs; i++) {
    if (n->attrs[i].from_default) continue; /* the schema fills it again */
    OnyxStatus* st = ox_save_attr(s, &n->attrs[i], &aps[i]);
    if (st) return ox_status_wrap(st, "attribute '%s'", n->attrs[i].name);
    attrs[np->n_attribute++] = &aps[i];
  }
  np->attribute = attrs;
  *out = np;
  return NULL;
}

/* --- graph and model -------------------------------------------------------------------- */

static bool ox_is_value_info(const OxValue* v) {
  return !v->constant && !v->is_graph_input && !v->is_graph_output && !v->is_outer_scope &&
         (v->type != ONYX_ELEM_UNDEFINED || v->rank >= 0);
}

static OnyxStatus* ox_save_values(OxSaver* s, const OxGraph* g, Onnx__GraphProto* gp) {
  gp->initializer = ox_save_alloc(s, g->n_values, sizeof *gp->initializer);
  gp->value_info = ox_save_alloc(s, g->n_values, sizeof *gp->value_info);
  if (!gp->initializer || !gp->value_info) return ox_oom();
  for (size_t i = 0; i < g->n_values; i++) {
    const OxValue* v = g->values[i];
    if (v->constant) {
      OnyxStatus* st =
          ox_save_tensor(s, v->constant, v->name, &gp->initializer[gp->n_initializer++]);
      if (st) return ox_status_wrap(st, "initializer '%s'", v->name);
    } else if (ox_is_value_info(v)) {
      if (!(gp->value_info[gp->n_value_info++] = ox_save_value_info(s, v))) return ox_oom();
    }
  }
  OX_TRY(ox_save_value_list(s, g->inputs, g->n_inputs, &gp->input, &gp->n_input));
  return ox_save_value_list(s, g->outputs, g->n_outputs, &gp->output, &gp->n_output);
}

static OnyxStatus* ox_save_graph(OxSaver* s, const OxGraph* g, Onnx__GraphProto* gp) {
  onnx__graph_proto__init(gp);
  gp->name = g->name;
  gp->node = ox_save_alloc(s, g->n_nodes, sizeof *gp->node);
  if (!gp->node) return ox_oom();
  for (size_t i = 0; i < g->n_nodes; i++) {
    const OxNode* n = g->nodes[i];
    OnyxStatus* st = ox_save_node(s, n, &gp->node[i]);
    if (st) return ox_status_wrap(st, "node '%s' (%s)", n->name, n->op_type);
    gp->n_node++;
  }
  return ox_save_values(s, g, gp);
}

static OnyxStatus* ox_save_model(OxSaver* s, const OxGraph* g, Onnx__ModelProto* mp) {
  onnx__model_proto__init(mp);
  mp->has_ir_version = true;
  mp->ir_version = g->ir_version > OX_SAVE_IR_VERSION_MIN ? g->ir_version : OX_SAVE_IR_VERSION_MIN;
  mp->producer_name = g->producer_name && *g->producer_name ? g->producer_name : (char*)"onyx";
  mp->opset_import = ox_save_alloc(s, g->n_opsets, sizeof *mp->opset_import);
  Onnx__OperatorSetIdProto* ops = ox_save_alloc(s, g->n_opsets, sizeof *ops);
  mp->graph = ox_save_alloc(s, 1, sizeof *mp->graph);
  if (!mp->opset_import || !ops || !mp->graph) return ox_oom();
  for (size_t i = 0; i < g->n_opsets; i++) {
    onnx__operator_set_id_proto__init(&ops[i]);
    ops[i].domain = g->opsets[i].domain;
    ops[i].has_version = true;
    ops[i].version = g->opsets[i].version;
    mp->opset_import[i] = &ops[i];
  }
  mp->n_opset_import = g->n_opsets;
  return ox_save_graph(s, g, mp->graph);
}

static OnyxStatus* ox_write_bytes(const char* path, const void* bytes, size_t len) {
  FILE* f = fopen(path, "wb");
  if (!f) return ox_status(ONYX_FAIL, "cannot create '%s': %s", path, strerror(errno));
  bool ok = fwrite(bytes, 1, len, f) == len;
  int err = errno;
  if (fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  return ok ? NULL : ox_status(ONYX_FAIL, "cannot write '%s': %s", path, strerror(err));
}

OnyxStatus* ox_model_save(const OxGraph* g, const char* path) {
  OxSaver s = {0};
  Onnx__ModelProto mp;
  OnyxStatus* st = ox_save_model(&s, g, &mp);
  if (!st && s.oom) st = ox_oom();
  if (!st) {
    size_t len = onnx__model_proto__get_packed_size(&mp);
    uint8_t* buf = malloc(len ? len : 1);
    if (buf) {
      st = ox_write_bytes(path, buf, onnx__model_proto__pack(&mp, buf));
      free(buf);
    } else {
      st = ox_oom();
    }
  }
  ox_saver_free(&s);
  return ox_status_wrap(st, "saving '%s'", path);
}
