/* ox_test_models.c — ModelProto builder for tests. Every proto is malloc'd
 * in the layout protobuf-c's unpacker produces, so one free_unpacked call
 * releases a whole model. */
#include "ox_test_models.h"
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_common.h"
#include "ox_ir.h"

#define OTM_MAX_DEPTH 64

struct OxTestNode {
  OxTestModel* m;
  Onnx__NodeProto* proto;
};

struct OxTestModel {
  Onnx__ModelProto* model;
  Onnx__GraphProto* stack[OTM_MAX_DEPTH]; /* stack[0]: the main graph */
  int top;
  ProtobufCMessage** loose; /* built but not yet attached to the model */
  size_t n_loose;
  OxTestNode** nodes;
  size_t n_nodes;
};

static void otm_die(const char* what) {
  fprintf(stderr, "ox_test_models: %s\n", what);
  abort();
}

void* otm_alloc(size_t bytes) {
  void* p = calloc(1, bytes ? bytes : 1);
  if (!p) otm_die("out of memory");
  return p;
}

char* otm_strdup(const char* s) {
  char* d = strdup(s ? s : "");
  if (!d) otm_die("out of memory");
  return d;
}

/* Appends one element to a malloc'd array. */
static void otm_push(void** arr, size_t* n, size_t elem, const void* item) {
  char* p = realloc(*arr, (*n + 1) * elem);
  if (!p) otm_die("out of memory");
  memcpy(p + *n * elem, item, elem);
  *arr = p;
  (*n)++;
}
#define OTM_PUSH(arr, n, item) otm_push((void**)&(arr), &(n), sizeof *(arr), &(item))

static void otm_loose_add(OxTestModel* m, void* msg) {
  ProtobufCMessage* p = msg;
  OTM_PUSH(m->loose, m->n_loose, p);
}

/* The message now belongs to the model tree. */
static void otm_attach(OxTestModel* m, void* msg) {
  for (size_t i = 0; i < m->n_loose; i++)
    if (m->loose[i] == msg) {
      m->loose[i] = m->loose[--m->n_loose];
      return;
    }
}

static Onnx__GraphProto* otm_cur(OxTestModel* m) {
  return m->stack[m->top];
}

/* --- model ---------------------------------------------------------------------------- */

OxTestModel* otm_new(int64_t opset) {
  OxTestModel* m = otm_alloc(sizeof *m);
  m->model = otm_alloc(sizeof *m->model);
  onnx__model_proto__init(m->model);
  m->model->has_ir_version = 1;
  m->model->ir_version = 8;
  m->model->producer_name = otm_strdup("onyx-test");
  m->model->graph = otm_alloc(sizeof *m->model->graph);
  onnx__graph_proto__init(m->model->graph);
  m->model->graph->name = otm_strdup("test");
  m->stack[0] = m->model->graph;
  if (opset > 0) otm_add_opset(m, "", opset);
  return m;
}

void otm_free(OxTestModel* m) {
  if (!m) return;
  for (size_t i = 0; i < m->n_loose; i++)
    protobuf_c_message_free_unpacked(m->loose[i], NULL);
  for (size_t i = 0; i < m->n_nodes; i++)
    free(m->nodes[i]);
  onnx__model_proto__free_unpacked(m->model, NULL);
  free(m->loose);
  free(m->nodes);
  free(m);
}

void otm_set_ir_version(OxTestModel* m, int64_t ir_version) {
  m->model->has_ir_version = 1;
  m->model->ir_version = ir_version;
}

Onnx__OperatorSetIdProto* otm_add_opset(OxTestModel* m, const char* domain, int64_t version) {
  Onnx__OperatorSetIdProto* op = otm_alloc(sizeof *op);
  onnx__operator_set_id_proto__init(op);
  op->domain = otm_strdup(domain);
  op->has_version = 1;
  op->version = version;
  OTM_PUSH(m->model->opset_import, m->model->n_opset_import, op);
  return op;
}

void otm_set_graph_name(OxTestModel* m, const char* name) {
  free(otm_cur(m)->name);
  otm_cur(m)->name = otm_strdup(name);
}

Onnx__ModelProto* otm_proto(OxTestModel* m) {
  return m->model;
}
Onnx__GraphProto* otm_graph(OxTestModel* m) {
  return otm_cur(m);
}

Onnx__FunctionProto* otm_add_function(OxTestModel* m, const char* domain, const char* name) {
  Onnx__FunctionProto* f = otm_alloc(sizeof *f);
  onnx__function_proto__init(f);
  f->domain = otm_strdup(domain);
  f->name = otm_strdup(name);
  OTM_PUSH(m->model->functions, m->model->n_functions, f);
  return f;
}

/* --- values ------------------------------------------------------------------------------ */

static Onnx__TensorShapeProto__Dimension* otm_dim(void) {
  Onnx__TensorShapeProto__Dimension* d = otm_alloc(sizeof *d);
  onnx__tensor_shape_proto__dimension__init(d);
  return d;
}

static void otm_dim_param(Onnx__TensorShapeProto__Dimension* d, char* param) {
  d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
  d->dim_param = param;
}

static void otm_dim_value(Onnx__TensorShapeProto__Dimension* d, int64_t v) {
  d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
  d->dim_value = v;
}

/* A value info with a tensor type and, when shaped, an empty shape. */
static Onnx__ValueInfoProto* otm_vi(const char* name, int elem_type, bool shaped) {
  Onnx__ValueInfoProto* vi = otm_alloc(sizeof *vi);
  onnx__value_info_proto__init(vi);
  vi->name = otm_strdup(name);
  if (!elem_type && !shaped) return vi;
  Onnx__TypeProto* tp = otm_alloc(sizeof *tp);
  onnx__type_proto__init(tp);
  Onnx__TypeProto__Tensor* tt = otm_alloc(sizeof *tt);
  onnx__type_proto__tensor__init(tt);
  tt->has_elem_type = 1;
  tt->elem_type = elem_type;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  vi->type = tp;
  if (shaped) {
    tt->shape = otm_alloc(sizeof *tt->shape);
    onnx__tensor_shape_proto__init(tt->shape);
  }
  return vi;
}

static Onnx__ValueInfoProto* otm_vi_dims(const char* name, int elem_type, int rank,
                                         const int64_t* dims) {
  Onnx__ValueInfoProto* vi = otm_vi(name, elem_type, rank >= 0);
  for (int i = 0; i < rank; i++) {
    Onnx__TensorShapeProto__Dimension* d = otm_dim();
    if (dims[i] >= 0) {
      otm_dim_value(d, dims[i]);
    } else {
      char buf[512];
      snprintf(buf, sizeof buf, "%s_%d", name, i);
      otm_dim_param(d, otm_strdup(buf));
    }
    Onnx__TensorShapeProto* sp = vi->type->tensor_type->shape;
    OTM_PUSH(sp->dim, sp->n_dim, d);
  }
  return vi;
}

static Onnx__TensorShapeProto__Dimension* otm_dim_token(const char* tok, size_t len) {
  Onnx__TensorShapeProto__Dimension* d = otm_dim();
  char* s = strndup(tok, len);
  if (!s) otm_die("out of memory");
  char* end;
  long long v = strtoll(s, &end, 10);
  if (*s && !*end && v >= 0) {
    otm_dim_value(d, v);
    free(s);
  } else if (!strcmp(s, "?")) {
    free(s);
  } else {
    otm_dim_param(d, s);
  }
  return d;
}

static Onnx__ValueInfoProto* otm_vi_shape(const char* name, int elem_type, const char* shape) {
  Onnx__ValueInfoProto* vi = otm_vi(name, elem_type, shape != NULL);
  for (const char* p = shape; p && *p;) {
    while (*p == ' ')
      p++;
    size_t n = strcspn(p, ",");
    size_t len = n;
    while (len && p[len - 1] == ' ')
      len--;
    Onnx__TensorShapeProto__Dimension* d = otm_dim_token(p, len);
    Onnx__TensorShapeProto* sp = vi->type->tensor_type->shape;
    OTM_PUSH(sp->dim, sp->n_dim, d);
    p += n;
    if (*p) p++;
  }
  return vi;
}

Onnx__ValueInfoProto* otm_input(OxTestModel* m, const char* name, int elem_type, int rank,
                                const int64_t* dims) {
  Onnx__ValueInfoProto* vi = otm_vi_dims(name, elem_type, rank, dims);
  OTM_PUSH(otm_cur(m)->input, otm_cur(m)->n_input, vi);
  return vi;
}

Onnx__ValueInfoProto* otm_output(OxTestModel* m, const char* name, int elem_type, int rank,
                                 const int64_t* dims) {
  Onnx__ValueInfoProto* vi = otm_vi_dims(name, elem_type, rank, dims);
  OTM_PUSH(otm_cur(m)->output, otm_cur(m)->n_output, vi);
  return vi;
}

Onnx__ValueInfoProto* otm_value_info(OxTestModel* m, const char* name, int elem_type, int rank,
                                     const int64_t* dims) {
  Onnx__ValueInfoProto* vi = otm_vi_dims(name, elem_type, rank, dims);
  OTM_PUSH(otm_cur(m)->value_info, otm_cur(m)->n_value_info, vi);
  return vi;
}

Onnx__ValueInfoProto* otm_input_s(OxTestModel* m, const char* name, int elem_type,
                                  const char* shape) {
  Onnx__ValueInfoProto* vi = otm_vi_shape(name, elem_type, shape);
  OTM_PUSH(otm_cur(m)->input, otm_cur(m)->n_input, vi);
  return vi;
}

Onnx__ValueInfoProto* otm_output_s(OxTestModel* m, const char* name, int elem_type,
                                   const char* shape) {
  Onnx__ValueInfoProto* vi = otm_vi_shape(name, elem_type, shape);
  OTM_PUSH(otm_cur(m)->output, otm_cur(m)->n_output, vi);
  return vi;
}

/* --- tensors ------------------------------------------------------------------------------ */

static size_t otm_count(int rank, const int64_t* dims) {
  size_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= (size_t)(dims[i] > 0 ? dims[i] : 0);
  return n;
}

static Onnx__TensorProto* otm_tensor_new(const char* name, int elem_type, int rank,
                                         const int64_t* dims, const void* data) {
  Onnx__TensorProto* t = otm_alloc(sizeof *t);
  onnx__tensor_proto__init(t);
  t->name = otm_strdup(name);
  t->has_data_type = 1;
  t->data_type = elem_type;
  t->n_dims = rank > 0 ? (size_t)rank : 0;
  t->dims = otm_alloc(t->n_dims * sizeof *t->dims);
  if (rank > 0) memcpy(t->dims, dims, t->n_dims * sizeof *t->dims);
  size_t count = otm_count(rank, dims);
  if (elem_type == ONYX_ELEM_STRING) {
    t->n_string_data = count;
    t->string_data = otm_alloc(count * sizeof *t->string_data);
    for (size_t i = 0; i < count; i++) {
      const char* s = data ? ((const char* const*)data)[i] : "";
      t->string_data[i].len = strlen(s);
      t->string_data[i].data = (uint8_t*)otm_strdup(s);
    }
    return t;
  }
  size_t bytes = 0;
  OnyxStatus* st = ox_type_bytes((OnyxElemType)elem_type, count, &bytes);
  if (st) otm_die("otm_tensor: element type without a size");
  t->has_raw_data = 1;
  t->raw_data.len = bytes;
  t->raw_data.data = otm_alloc(bytes);
  if (data && bytes) memcpy(t->raw_data.data, data, bytes);
  return t;
}

Onnx__TensorProto* otm_tensor(OxTestModel* m, const char* name, int elem_type, int rank,
                              const int64_t* dims, const void* data) {
  Onnx__TensorProto* t = otm_tensor_new(name, elem_type, rank, dims, data);
  otm_loose_add(m, t);
  return t;
}

Onnx__TensorProto* otm_initializer(OxTestModel* m, const char* name, int elem_type, int rank,
                                   const int64_t* dims, const void* data) {
  Onnx__TensorProto* t = otm_tensor_new(name, elem_type, rank, dims, data);
  OTM_PUSH(otm_cur(m)->initializer, otm_cur(m)->n_initializer, t);
  return t;
}

/* Little-endian unsigned value of `width` bytes at p. */
static uint64_t otm_le(const uint8_t* p, unsigned width) {
  uint64_t v = 0;
  for (unsigned b = 0; b < width; b++)
    v |= (uint64_t)p[b] << (8 * b);
  return v;
}

void otm_tensor_typed(Onnx__TensorProto* t) {
  const uint8_t* raw = t->raw_data.data;
  size_t bytes = t->raw_data.len;
  switch (t->data_type) {
  case ONYX_ELEM_FLOAT32:
  case ONYX_ELEM_COMPLEX64:
    t->n_float_data = bytes / 4;
    t->float_data = otm_alloc(bytes);
    memcpy(t->float_data, raw, bytes);
    break;
  case ONYX_ELEM_FLOAT64:
  case ONYX_ELEM_COMPLEX128:
    t->n_double_data = bytes / 8;
    t->double_data = otm_alloc(bytes);
    memcpy(t->double_data, raw, bytes);
    break;
  case ONYX_ELEM_INT64:
    t->n_int64_data = bytes / 8;
    t->int64_data = otm_alloc(bytes);
    memcpy(t->int64_data, raw, bytes);
    break;
  case ONYX_ELEM_UINT32:
  case ONYX_ELEM_UINT64: {
    unsigned w = t->data_type == ONYX_ELEM_UINT32 ? 4 : 8;
    t->n_uint64_data = bytes / w;
    t->uint64_data = otm_alloc(t->n_uint64_data * sizeof(uint64_t));
    for (size_t i = 0; i < t->n_uint64_data; i++)
      t->uint64_data[i] = otm_le(raw + i * w, w);
    break;
  }
  case ONYX_ELEM_STRING:
    return;
  default: {
    /* int32_data: one value per element, or per packed byte for sub-byte
     * types; signed types sign-extend, 16-bit floats keep their bits. */
    size_t esz = ox_elem_size((OnyxElemType)t->data_type);
    unsigned w = esz ? (unsigned)esz : 1;
    bool sign = t->data_type == ONYX_ELEM_INT8 || t->data_type == ONYX_ELEM_INT16 ||
                t->data_type == ONYX_ELEM_INT32;
    t->n_int32_data = bytes / w;
    t->int32_data = otm_alloc(t->n_int32_data * sizeof(int32_t));
    for (size_t i = 0; i < t->n_int32_data; i++) {
      uint64_t v = otm_le(raw + i * w, w);
      if (sign && w < 4 && (v >> (8 * w - 1)) & 1) v |= ~(uint64_t)0 << (8 * w);
      t->int32_data[i] = (int32_t)(uint32_t)v;
    }
    break;
  }
  }
  free(t->raw_data.data);
  t->raw_data.data = NULL;
  t->raw_data.len = 0;
  t->has_raw_data = 0;
}

static void otm_entry(Onnx__TensorProto* t, const char* key, const char* value) {
  Onnx__StringStringEntryProto* e = otm_alloc(sizeof *e);
  onnx__string_string_entry_proto__init(e);
  e->key = otm_strdup(key);
  e->value = otm_strdup(value);
  OTM_PUSH(t->external_data, t->n_external_data, e);
}

void otm_tensor_external(Onnx__TensorProto* t, const char* location, int64_t offset,
                         int64_t length) {
  char buf[32];
  otm_entry(t, "location", location);
  if (offset >= 0) {
    snprintf(buf, sizeof buf, "%lld", (long long)offset);
    otm_entry(t, "offset", buf);
  }
  if (length >= 0) {
    snprintf(buf, sizeof buf, "%lld", (long long)length);
    otm_entry(t, "length", buf);
  }
  t->has_data_location = 1;
  t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  free(t->raw_data.data);
  t->raw_data.data = NULL;
  t->raw_data.len = 0;
  t->has_raw_data = 0;
}

/* --- nodes ---------------------------------------------------------------------------------- */

/* Splits "a,,b" into malloc'd names, keeping empty entries. */
static void otm_split(const char* list, char*** out, size_t* n) {
  for (const char* p = list; p && *p;) {
    while (*p == ' ')
      p++;
    size_t len = strcspn(p, ",");
    size_t keep = len;
    while (keep && p[keep - 1] == ' ')
      keep--;
    char* s = strndup(p, keep);
    if (!s) otm_die("out of memory");
    otm_push((void**)out, n, sizeof(char*), &s);
    p += len;
    if (*p == ',' && !p[1]) { /* trailing comma: one more empty name */
      char* e = otm_strdup("");
      otm_push((void**)out, n, sizeof(char*), &e);
    }
    if (*p) p++;
  }
}

static void otm_copy_names(const char* const* names, char*** out, size_t* n) {
  for (size_t i = 0; names && names[i]; i++) {
    char* s = otm_strdup(names[i]);
    otm_push((void**)out, n, sizeof(char*), &s);
  }
}

static OxTestNode* otm_node_start(OxTestModel* m, const char* op_type, const char* name) {
  Onnx__NodeProto* np = otm_alloc(sizeof *np);
  onnx__node_proto__init(np);
  np->op_type = otm_strdup(op_type);
  if (name) np->name = otm_strdup(name);
  OTM_PUSH(otm_cur(m)->node, otm_cur(m)->n_node, np);
  OxTestNode* n = otm_alloc(sizeof *n);
  n->m = m;
  n->proto = np;
  OTM_PUSH(m->nodes, m->n_nodes, n);
  return n;
}

OxTestNode* otm_node(OxTestModel* m, const char* op_type, const char* name, const char* inputs,
                     const char* outputs) {
  OxTestNode* n = otm_node_start(m, op_type, name);
  otm_split(inputs, &n->proto->input, &n->proto->n_input);
  otm_split(outputs, &n->proto->output, &n->proto->n_output);
  return n;
}

OxTestNode* otm_node_v(OxTestModel* m, const char* op_type, const char* name,
                       const char* const* inputs, const char* const* outputs) {
  OxTestNode* n = otm_node_start(m, op_type, name);
  otm_copy_names(inputs, &n->proto->input, &n->proto->n_input);
  otm_copy_names(outputs, &n->proto->output, &n->proto->n_output);
  return n;
}

void otm_node_domain(OxTestNode* n, const char* domain) {
  free(n->proto->domain);
  n->proto->domain = otm_strdup(domain);
}

Onnx__NodeProto* otm_node_proto(OxTestNode* n) {
  return n->proto;
}

/* --- attributes ------------------------------------------------------------------------------ */

static Onnx__AttributeProto* otm_attr(OxTestNode* n, const char* name, int type) {
  Onnx__AttributeProto* a = otm_alloc(sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = otm_strdup(name);
  a->has_type = 1;
  a->type = (Onnx__AttributeProto__AttributeType)type;
  OTM_PUSH(n->proto->attribute, n->proto->n_attribute, a);
  return a;
}

Onnx__AttributeProto* otm_attr_int(OxTestNode* n, const char* name, int64_t v) {
  Onnx__AttributeProto* a = otm_attr(n, name, ONYX_ATTR_INT);
  a->has_i = 1;
  a->i = v;
  return a;
}

Onnx__AttributeProto* otm_attr_float(OxTestNode* n, const char* name, float v) {
  Onnx__AttributeProto* a = otm_attr(n, name, ONYX_ATTR_FLOAT);
  a->has_f = 1;
  a->f = v;
  return a;
}

Onnx__AttributeProto* otm_attr_string(OxTestNode* n, const char* name, const char* v) {
  Onnx__AttributeProto* a = otm_attr(n, name, ONYX_ATTR_STRING);
  a->has_s = 1;
  a->s.len = strlen(v);
  a->s.data = (uint8_t*)otm_strdup(v);
  return a;
}

Onnx__AttributeProto* otm_attr_ints(OxTestNode* n, const char* name, size_t count,
                                    const int64_t* v) {
  Onnx__AttributeProto* a = otm_attr(n, name, ONYX_ATTR_INTS);
  a->n_ints = count;
  a->ints = otm_alloc(count * sizeof *a->ints);
  if (count) memcpy(a->ints, v, count * sizeof *a->ints);
  return a;
}

Onnx__AttributeProto* otm_attr_floats(OxTestNode* n, const char* name, size_t count,
                                      const float* v) {
  Onnx__AttributeProto* a = otm_attr(n, name, ONYX_ATTR_FLOATS);
  a->n_floats = count;
  a->floats = otm_alloc(count * sizeof *a->floats);
  if (count) memcpy(a->floats, v, count * sizeof *a->floats);
  return a;
}

Onnx__AttributeProto* otm_attr_strings(OxTestNode* n, const char* name, size_t count,
                                       const char* const* v) {
  Onnx__AttributeProto* a = otm_attr(n, name, ONYX_ATTR_STRINGS);
  a->n_strings = count;
  a->strings = otm_alloc(count * sizeof *a->strings);
  for (size_t i = 0; i < count; i++) {
    a->strings[i].len = strlen(v[i]);
    a->strings[i].data = (uint8_t*)otm_strdup(v[i]);
  }
  return a;
}

Onnx__AttributeProto* otm_attr_tensor(OxTestNode* n, const char* name, Onnx__TensorProto* t) {
  Onnx__AttributeProto* a = otm_attr(n, name, ONYX_ATTR_TENSOR);
  otm_attach(n->m, t);
  a->t = t;
  return a;
}

Onnx__AttributeProto* otm_attr_tensors(OxTestNode* n, const char* name, size_t count,
                                       Onnx__TensorProto* const* t) {
  Onnx__AttributeProto* a = otm_attr(n, name, ONYX_ATTR_TENSORS);
  for (size_t i = 0; i < count; i++) {
    otm_attach(n->m, t[i]);
    OTM_PUSH(a->tensors, a->n_tensors, t[i]);
  }
  return a;
}

Onnx__AttributeProto* otm_attr_graph(OxTestNode* n, const char* name, Onnx__GraphProto* g) {
  Onnx__AttributeProto* a = otm_attr(n, name, ONYX_ATTR_GRAPH);
  otm_attach(n->m, g);
  a->g = g;
  return a;
}

Onnx__AttributeProto* otm_attr_graphs(OxTestNode* n, const char* name, size_t count,
                                      Onnx__GraphProto* const* g) {
  Onnx__AttributeProto* a = otm_attr(n, name, ONYX_ATTR_GRAPHS);
  for (size_t i = 0; i < count; i++) {
    otm_attach(n->m, g[i]);
    OTM_PUSH(a->graphs, a->n_graphs, g[i]);
  }
  return a;
}

/* --- subgraphs ----------------------------------------------------------------------------------
 */

void otm_begin_graph(OxTestModel* m, const char* name) {
  if (m->top + 1 >= OTM_MAX_DEPTH) otm_die("otm_begin_graph: nested too deep");
  Onnx__GraphProto* g = otm_alloc(sizeof *g);
  onnx__graph_proto__init(g);
  g->name = otm_strdup(name);
  otm_loose_add(m, g);
  m->stack[++m->top] = g;
}

Onnx__GraphProto* otm_end_graph(OxTestModel* m) {
  if (m->top == 0) otm_die("otm_end_graph without otm_begin_graph");
  return m->stack[m->top--];
}

/* --- output
 * ---------------------------------------------------------------------------------------- */

void otm_serialize(OxTestModel* m, uint8_t** bytes, size_t* len) {
  size_t n = onnx__model_proto__get_packed_size(m->model);
  *bytes = otm_alloc(n);
  *len = onnx__model_proto__pack(m->model, *bytes);
}

bool otm_write_file(const char* path, const void* data, size_t len) {
  FILE* f = fopen(path, "wb");
  if (!f) return false;
  bool ok = fwrite(data, 1, len, f) == len;
  return fclose(f) == 0 && ok;
}

bool otm_write(OxTestModel* m, const char* path) {
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  bool ok = otm_write_file(path, bytes, len);
  free(bytes);
  return ok;
}

char* otm_temp_dir(void) {
  const char* tmp = getenv("TMPDIR");
  char* path = ox_asprintf("%s/onyx-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (path && !mkdtemp(path)) {
    free(path);
    return NULL;
  }
  return path;
}

static int otm_remove_entry(const char* path, const struct stat* sb, int flag, struct FTW* ftw) {
  (void)sb, (void)flag, (void)ftw;
  remove(path);
  return 0;
}

void otm_remove_dir(const char* path) {
  if (path) nftw(path, otm_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
