/* test_badinput.c — the bad-input catalogue (docs/security.md).
 *
 * Every case feeds the public API something wrong and asserts the error it
 * must give: its code and the substrings that name what is wrong. Under
 * ASan/LSan (scripts/test.sh) each case also proves there is no crash and no
 * leak. The tables:
 *   - models (bytes -> onyx_session_create_from_bytes, through resolve,
 *     partition and plan): versions, graph structure, initializers, dims,
 *     limits, attributes, text that is not UTF-8;
 *   - models with external data (files -> onyx_session_create);
 *   - TensorProtos (onyx_value_parse_tensor_proto);
 *   - configs (onyx_session_options_load_config_text);
 *   - a provider that fails in each of its slots, and a kernel that fails
 *     mid-run (the run fails cleanly, the next one works).
 * Property cases (every truncation, every single-bit flip of a model) assert
 * that whatever the loader says, it says it with a message.
 * The loader's own unit tests (tests/unit/model) test the same checks one
 * level down; this file is the catalogue at the API. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "model_internal.h"
#include "onyx/onyx.h"
#include "onyx/onyx_ep.h"
#include "ox_options.h" /* the limits as stored */
#include "ox_test_models.h"

#define F32 ONYX_ELEM_FLOAT32
#define I64 ONYX_ELEM_INT64
#define DIMS(...)                                                                                  \
  (int64_t[]) {                                                                                    \
    __VA_ARGS__                                                                                    \
  }

/* --- helpers -------------------------------------------------------------------------- */

static void expect_status(OnyxStatus* st, OnyxStatusCode code, const char* const* subs,
                          const char* what) {
  if (!st) fail_msg("%s: expected an error, got success", what);
  const char* msg = onyx_status_message(st);
  if (onyx_status_code(st) != code)
    fail_msg("%s: expected code %d, got %d: %s", what, (int)code, (int)onyx_status_code(st), msg);
  for (size_t i = 0; subs[i]; i++)
    if (!strstr(msg, subs[i])) fail_msg("%s: message lacks '%s': %s", what, subs[i], msg);
  onyx_status_release(st);
}

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

/* Options used by every model case: one thread, quiet, and the limits a case
 * asks for (0: the defaults). */
typedef struct Limits {
  size_t model, tensor, nodes;
  int depth;
} Limits;

static OnyxSessionOptions* options(const Limits* lim) {
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_threads(o, 1));
  ok(onyx_session_options_set_log_severity(o, ONYX_LOG_FATAL));
  if (lim) ok(onyx_session_options_set_limits(o, lim->model, lim->tensor, lim->nodes, lim->depth));
  return o;
}

static OnyxStatus* create_from_model(OxTestModel* m, const Limits* lim, OnyxSession** s) {
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  OnyxSessionOptions* o = options(lim);
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, s);
  onyx_session_options_release(o);
  free(bytes);
  return st;
}

/* A valid model to bend: Y = Relu(X + W). */
static OxTestModel* base_model(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(3));
  otm_initializer(m, "W", F32, 1, DIMS(3), (float[]){1, 2, 3});
  otm_node(m, "Add", "add", "X,W", "S");
  otm_node(m, "Relu", "relu", "S", "Y");
  otm_output(m, "Y", F32, 1, DIMS(3));
  return m;
}

/* A model whose one node has the given name/op (for the UTF-8 cases). */
static OxTestModel* one_node(const char* op, const char* name) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(2));
  otm_node(m, op, name, "X", "Y");
  otm_output(m, "Y", F32, 1, DIMS(2));
  return m;
}

/* --- the model table ----------------------------------------------------------------- */

static OxTestModel* m_ir_new(void) {
  OxTestModel* m = base_model();
  otm_set_ir_version(m, 99);
  return m;
}

static OxTestModel* m_ir_old(void) {
  OxTestModel* m = base_model();
  otm_set_ir_version(m, 2);
  return m;
}

static OxTestModel* m_ir_missing(void) {
  OxTestModel* m = base_model();
  otm_proto(m)->has_ir_version = 0;
  return m;
}

static OxTestModel* m_opset_new(void) {
  OxTestModel* m = base_model();
  otm_proto(m)->opset_import[0]->version = 1000;
  return m;
}

static OxTestModel* m_cycle(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(2));
  otm_node(m, "Add", "a", "X,B", "A"); /* A needs B ... */
  otm_node(m, "Relu", "b", "A", "B");  /* ... and B needs A */
  otm_output(m, "B", F32, 1, DIMS(2));
  return m;
}

static OxTestModel* m_unproduced(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(2));
  otm_node(m, "Add", "add", "X,ghost", "Y");
  otm_output(m, "Y", F32, 1, DIMS(2));
  return m;
}

/* The first fuzz crasher: two unproduced inputs on one node leaked the
 * first error (tests/unit/badinput/crashers/model_load). */
static OxTestModel* m_two_unproduced(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(2));
  otm_node(m, "Add", "add", "ghost1,ghost2", "Y");
  otm_output(m, "Y", F32, 1, DIMS(2));
  return m;
}

static OxTestModel* m_output_unproduced(void) {
  OxTestModel* m = base_model();
  otm_output(m, "nowhere", F32, 1, DIMS(3));
  return m;
}

static OxTestModel* m_dup_producer(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(2));
  otm_node(m, "Relu", "first", "X", "Y");
  otm_node(m, "Neg", "second", "X", "Y");
  otm_output(m, "Y", F32, 1, DIMS(2));
  return m;
}

static OxTestModel* m_dup_initializer(void) {
  OxTestModel* m = base_model();
  otm_initializer(m, "W", F32, 1, DIMS(3), (float[]){4, 5, 6});
  return m;
}

static OxTestModel* m_dup_input(void) {
  OxTestModel* m = base_model();
  otm_input(m, "X", F32, 1, DIMS(3));
  return m;
}

static OxTestModel* m_dup_output(void) {
  OxTestModel* m = base_model();
  otm_output(m, "Y", F32, 1, DIMS(3));
  return m;
}

static OxTestModel* m_input_produced(void) {
  OxTestModel* m = base_model();
  otm_node(m, "Neg", "overwrite", "Y", "X");
  return m;
}

static OxTestModel* m_raw_size(void) {
  OxTestModel* m = base_model();
  Onnx__TensorProto* t = otm_graph(m)->initializer[0];
  t->raw_data.len = 8; /* 2 floats for dims {3} */
  return m;
}

static OxTestModel* m_typed_count(void) {
  OxTestModel* m = base_model();
  Onnx__TensorProto* t = otm_graph(m)->initializer[0];
  otm_tensor_typed(t);
  t->n_float_data = 2;
  return m;
}

static OxTestModel* m_typed_wrong_field(void) {
  OxTestModel* m = base_model();
  Onnx__TensorProto* t = otm_graph(m)->initializer[0];
  otm_tensor_typed(t); /* float_data */
  t->data_type = ONYX_ELEM_INT64;
  return m;
}

static OxTestModel* m_negative_dim(void) {
  OxTestModel* m = base_model();
  otm_graph(m)->initializer[0]->dims[0] = -3;
  return m;
}

static OxTestModel* m_dims_overflow(void) {
  OxTestModel* m = base_model();
  otm_initializer(m, "big", F32, 3, DIMS((int64_t)1 << 40, (int64_t)1 << 40, 16), NULL);
  otm_graph(m)->initializer[1]->raw_data.len = 0;
  return m;
}

/* 1 TiB of floats declared with no data: refused by the limit before any
 * allocation (an attempt to allocate it would fail or abort under ASan). */
static OxTestModel* m_huge_tensor(void) {
  OxTestModel* m = base_model();
  Onnx__TensorProto* t = otm_initializer(m, "huge", F32, 1, DIMS(1), NULL);
  t->dims[0] = (int64_t)1 << 38;
  return m;
}

static OxTestModel* m_tensor_over_limit(void) {
  OxTestModel* m = base_model();
  float* data = calloc(512, sizeof *data); /* 2 KiB, over a 1 KiB limit */
  otm_initializer(m, "big", F32, 1, DIMS(512), data);
  free(data);
  return m;
}

static OxTestModel* m_many_nodes(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(2));
  otm_node(m, "Relu", "r0", "X", "a");
  otm_node(m, "Relu", "r1", "a", "b");
  otm_node(m, "Relu", "r2", "b", "Y");
  otm_output(m, "Y", F32, 1, DIMS(2));
  return m;
}

/* `levels` If nodes nested in each other's then_branch. */
static void nest_ifs(OxTestModel* m, int levels, const char* out) {
  OxTestNode* iff = otm_node(m, "If", NULL, "C", out);
  otm_begin_graph(m, "then");
  if (levels > 1)
    nest_ifs(m, levels - 1, "t");
  else
    otm_node(m, "Neg", "neg", "X", "t");
  otm_output(m, "t", F32, 1, DIMS(2));
  otm_attr_graph(iff, "then_branch", otm_end_graph(m));
  otm_begin_graph(m, "else");
  otm_node(m, "Abs", "abs", "X", "e");
  otm_output(m, "e", F32, 1, DIMS(2));
  otm_attr_graph(iff, "else_branch", otm_end_graph(m));
}

static OxTestModel* m_deep(void) {
  OxTestModel* m = otm_new(17);
  otm_input_s(m, "C", ONYX_ELEM_BOOL, "");
  otm_input(m, "X", F32, 1, DIMS(2));
  nest_ifs(m, 5, "Y");
  otm_output(m, "Y", F32, 1, DIMS(2));
  return m;
}

/* A NodeProto for a function body (malloc'd: the model tree frees it). */
static Onnx__NodeProto* fn_node(const char* op, const char* domain, const char* in,
                                const char* out) {
  Onnx__NodeProto* n = otm_alloc(sizeof *n);
  onnx__node_proto__init(n);
  n->op_type = otm_strdup(op);
  n->domain = otm_strdup(domain);
  n->n_input = n->n_output = 1;
  n->input = otm_alloc(sizeof *n->input);
  n->output = otm_alloc(sizeof *n->output);
  n->input[0] = otm_strdup(in);
  n->output[0] = otm_strdup(out);
  return n;
}

/* "Billion laughs" with model-local functions: f0 calls f1 twice, f1 calls
 * f2 twice, ... f15 is one Relu: 2^15 nodes once inlined, from a tiny file. */
static OxTestModel* m_function_bomb(void) {
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "local", 1);
  for (int k = 0; k < 16; k++) {
    char name[8], next[8];
    snprintf(name, sizeof name, "f%d", k);
    snprintf(next, sizeof next, "f%d", k + 1);
    Onnx__FunctionProto* f = otm_add_function(m, "local", name);
    f->n_input = f->n_output = 1;
    f->input = otm_alloc(sizeof *f->input);
    f->output = otm_alloc(sizeof *f->output);
    f->input[0] = otm_strdup("x");
    f->output[0] = otm_strdup("y");
    f->n_opset_import = 2;
    f->opset_import = otm_alloc(2 * sizeof *f->opset_import);
    for (int i = 0; i < 2; i++) {
      f->opset_import[i] = otm_alloc(sizeof *f->opset_import[i]);
      onnx__operator_set_id_proto__init(f->opset_import[i]);
      f->opset_import[i]->domain = otm_strdup(i ? "local" : "");
      f->opset_import[i]->has_version = 1;
      f->opset_import[i]->version = i ? 1 : 17;
    }
    if (k == 15) {
      f->n_node = 1;
      f->node = otm_alloc(sizeof *f->node);
      f->node[0] = fn_node("Relu", "", "x", "y");
    } else {
      f->n_node = 2;
      f->node = otm_alloc(2 * sizeof *f->node);
      f->node[0] = fn_node(next, "local", "x", "a");
      f->node[1] = fn_node(next, "local", "a", "y");
    }
  }
  otm_input(m, "X", F32, 1, DIMS(2));
  otm_node_domain(otm_node(m, "f0", "call", "X", "Y"), "local");
  otm_output(m, "Y", F32, 1, DIMS(2));
  return m;
}

static OxTestModel* m_attr_wrong_type(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "A", F32, 2, DIMS(2, 2));
  otm_input(m, "B", F32, 2, DIMS(2, 2));
  otm_attr_string(otm_node(m, "Gemm", "gemm", "A,B", "Y"), "alpha", "two");
  otm_output(m, "Y", F32, 2, DIMS(2, 2));
  return m;
}

static OxTestModel* m_attr_ints_for_int(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 2, DIMS(2, 2));
  otm_attr_ints(otm_node(m, "Softmax", "sm", "X", "Y"), "axis", 2, DIMS(0, 1));
  otm_output(m, "Y", F32, 2, DIMS(2, 2));
  return m;
}

static OxTestModel* m_attr_unknown_type(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 2, DIMS(2, 2));
  Onnx__AttributeProto* a = otm_attr_int(otm_node(m, "Softmax", "sm", "X", "Y"), "axis", 1);
  a->type = 99;
  otm_output(m, "Y", F32, 2, DIMS(2, 2));
  return m;
}

static OxTestModel* m_attr_unknown_name(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 2, DIMS(2, 2));
  otm_attr_int(otm_node(m, "Relu", "relu", "X", "Y"), "alpha", 1);
  otm_output(m, "Y", F32, 2, DIMS(2, 2));
  return m;
}

static OxTestModel* m_utf8_node_name(void) {
  return one_node("Relu", "bad\xff name");
}

static OxTestModel* m_utf8_op_type(void) {
  return one_node("Re\xc3lu", "relu");
}

static OxTestModel* m_utf8_overlong(void) {
  return one_node("Relu", "slash\xc0\xaf"); /* an overlong '/' */
}

static OxTestModel* m_utf8_surrogate(void) {
  return one_node("Relu", "half\xed\xa0\x80"); /* U+D800 */
}

static OxTestModel* m_utf8_doc_string(void) {
  OxTestModel* m = base_model();
  otm_proto(m)->doc_string = otm_strdup("caf\xe9"); /* Latin-1, not UTF-8 */
  return m;
}

static OxTestModel* m_utf8_value_name(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X\x80", F32, 1, DIMS(2));
  otm_node(m, "Relu", "relu", "X\x80", "Y");
  otm_output(m, "Y", F32, 1, DIMS(2));
  return m;
}

static OxTestModel* m_utf8_dim_param(void) {
  OxTestModel* m = otm_new(17);
  otm_input_s(m, "X", F32, "N\xfe");
  otm_node(m, "Relu", "relu", "X", "Y");
  otm_output_s(m, "Y", F32, NULL);
  return m;
}

/* Valid UTF-8 text of every length passes (the check must not be too strict). */
static OxTestModel* m_utf8_ok(void) {
  return one_node("Relu", "r\xc3\xa9lu \xe2\x82\xac \xf0\x9f\x98\x80");
}

static OxTestModel* m_attr_bytes_not_text(void) {
  /* AttributeProto.s is `bytes`: anything goes, the model loads. */
  OxTestModel* m = otm_new(17);
  otm_attr_string(otm_node(m, "Constant", "k", "", "Y"), "value_string", "\xff\xfe");
  otm_output(m, "Y", ONYX_ELEM_STRING, 0, NULL);
  return m;
}

static OxTestModel* m_no_graph(void) {
  OxTestModel* m = otm_new(17);
  Onnx__ModelProto* p = otm_proto(m);
  onnx__graph_proto__free_unpacked(p->graph, NULL);
  p->graph = NULL;
  return m;
}

static OxTestModel* m_external_from_memory(void) {
  OxTestModel* m = base_model();
  otm_tensor_external(otm_graph(m)->initializer[0], "w.bin", 0, 12);
  return m;
}

typedef struct ModelCase {
  const char* name;
  OxTestModel* (*build)(void);
  Limits lim;
  OnyxStatusCode code; /* ONYX_OK: must load */
  const char* subs[4];
} ModelCase;

static const ModelCase model_cases[] = {
    {"ir version too new", m_ir_new, {0}, ONYX_NOT_IMPLEMENTED, {"ir_version 99", "newer"}},
    {"ir version too old", m_ir_old, {0}, ONYX_INVALID_MODEL, {"ir_version 2", "too old"}},
    {"ir version missing", m_ir_missing, {0}, ONYX_INVALID_MODEL, {"no ir_version"}},
    {"opset too new", m_opset_new, {0}, ONYX_NOT_IMPLEMENTED, {"opset 1000"}},
    {"no graph", m_no_graph, {0}, ONYX_INVALID_MODEL, {"no graph"}},
    {"cycle", m_cycle, {0}, ONYX_INVALID_MODEL, {"cycle through node"}},
    {"value nobody produces",
     m_unproduced,
     {0},
     ONYX_INVALID_MODEL,
     {"node 'add' (Add)", "reads value 'ghost'", "no node, graph input or initializer"}},
    {"two values nobody produces",
     m_two_unproduced,
     {0},
     ONYX_INVALID_MODEL,
     {"reads value 'ghost1'"}},
    {"output nobody produces",
     m_output_unproduced,
     {0},
     ONYX_INVALID_MODEL,
     {"graph output 'nowhere'", "not produced"}},
    {"value produced twice",
     m_dup_producer,
     {0},
     ONYX_INVALID_MODEL,
     {"node 'second' (Neg)", "writes value 'Y'", "already produced"}},
    {"initializer twice",
     m_dup_initializer,
     {0},
     ONYX_INVALID_MODEL,
     {"initializer 'W'", "defined twice"}},
    {"graph input twice", m_dup_input, {0}, ONYX_INVALID_MODEL, {"graph input 'X'", "twice"}},
    {"graph output twice", m_dup_output, {0}, ONYX_INVALID_MODEL, {"graph output 'Y'", "twice"}},
    {"graph input also produced", m_input_produced, {0}, ONYX_INVALID_MODEL, {"'X'", "overwrite"}},
    {"raw_data size disagrees with dims",
     m_raw_size,
     {0},
     ONYX_INVALID_MODEL,
     {"initializer 'W'", "raw_data has 8 bytes but the dims need 12"}},
    {"typed data count disagrees with dims",
     m_typed_count,
     {0},
     ONYX_INVALID_MODEL,
     {"initializer 'W'", "float_data has 2 values but the dims need 3"}},
    {"typed data in the wrong field",
     m_typed_wrong_field,
     {0},
     ONYX_INVALID_MODEL,
     {"initializer 'W'", "int64_data"}},
    {"negative dim",
     m_negative_dim,
     {0},
     ONYX_INVALID_MODEL,
     {"initializer 'W'", "dimension 0 is negative (-3)"}},
    {"dims product overflows",
     m_dims_overflow,
     {0},
     ONYX_INVALID_MODEL,
     {"initializer 'big'", "overflows"}},
    {"huge declared tensor (default limit)",
     m_huge_tensor,
     {0},
     ONYX_LIMIT_EXCEEDED,
     {"initializer 'huge'", "1099511627776 bytes", "exceeds the limit of 4294967296 bytes"}},
    {"tensor over a configured limit",
     m_tensor_over_limit,
     {0, 1024, 0, 0},
     ONYX_LIMIT_EXCEEDED,
     {"initializer 'big'", "2048 bytes", "limit of 1024 bytes"}},
    {"model over a configured size",
     m_many_nodes,
     {64, 0, 0, 0},
     ONYX_LIMIT_EXCEEDED,
     {"over the limit of 64 bytes"}},
    {"more nodes than the limit",
     m_many_nodes,
     {0, 0, 2, 0},
     ONYX_LIMIT_EXCEEDED,
     {"more than the limit of 2 nodes"}},
    {"nodes at the limit", m_many_nodes, {0, 0, 3, 0}, ONYX_OK, {NULL}},
    {"functions inlined into more nodes than the limit",
     m_function_bomb,
     {0, 0, 1000, 0},
     ONYX_LIMIT_EXCEEDED,
     {"more than the limit of 1000 nodes", "model-local function"}},
    {"subgraphs deeper than the limit",
     m_deep,
     {0, 0, 0, 3},
     ONYX_LIMIT_EXCEEDED,
     {"nested deeper than the limit"}},
    {"subgraphs at the limit", m_deep, {0, 0, 0, 5}, ONYX_OK, {NULL}},
    {"attribute of the wrong type",
     m_attr_wrong_type,
     {0},
     ONYX_INVALID_MODEL,
     {"'gemm'", "attribute 'alpha' must be of type float, not string"}},
    {"list attribute for a scalar",
     m_attr_ints_for_int,
     {0},
     ONYX_INVALID_MODEL,
     {"'sm'", "attribute 'axis' must be of type int, not ints"}},
    {"attribute of an unknown type",
     m_attr_unknown_type,
     {0},
     ONYX_INVALID_MODEL,
     {"node 'sm' (Softmax)", "attribute 'axis' has unknown type 99"}},
    {"attribute the op does not have",
     m_attr_unknown_name,
     {0},
     ONYX_INVALID_MODEL,
     {"'relu'", "unknown attribute 'alpha'"}},
    {"node name not UTF-8",
     m_utf8_node_name,
     {0},
     ONYX_INVALID_MODEL,
     {"field 'graph.node[0].name' is not valid UTF-8", "0xff at offset 3"}},
    {"op type not UTF-8",
     m_utf8_op_type,
     {0},
     ONYX_INVALID_MODEL,
     {"field 'graph.node[0].op_type' is not valid UTF-8"}},
    {"overlong UTF-8",
     m_utf8_overlong,
     {0},
     ONYX_INVALID_MODEL,
     {"graph.node[0].name", "0xc0 at offset 5"}},
    {"UTF-16 surrogate in UTF-8",
     m_utf8_surrogate,
     {0},
     ONYX_INVALID_MODEL,
     {"graph.node[0].name", "0xed at offset 4"}},
    {"doc string not UTF-8",
     m_utf8_doc_string,
     {0},
     ONYX_INVALID_MODEL,
     {"field 'doc_string' is not valid UTF-8"}},
    {"value name not UTF-8",
     m_utf8_value_name,
     {0},
     ONYX_INVALID_MODEL,
     {"field 'graph.node[0].input[0]' is not valid UTF-8", "0x80 at offset 1"}},
    {"dim_param not UTF-8",
     m_utf8_dim_param,
     {0},
     ONYX_INVALID_MODEL,
     {"graph.input[0].type.tensor_type.shape.dim[0].dim_param", "not valid UTF-8"}},
    {"valid UTF-8 names", m_utf8_ok, {0}, ONYX_OK, {NULL}},
    {"attribute bytes need not be text", m_attr_bytes_not_text, {0}, ONYX_OK, {NULL}},
    {"external data in a model from memory",
     m_external_from_memory,
     {0},
     ONYX_INVALID_MODEL,
     {"initializer 'W'", "external data 'w.bin'", "from memory"}},
};

static void test_model_table(void** state) {
  (void)state;
  for (size_t i = 0; i < sizeof model_cases / sizeof model_cases[0]; i++) {
    const ModelCase* c = &model_cases[i];
    OxTestModel* m = c->build();
    OnyxSession* s = NULL;
    OnyxStatus* st = create_from_model(m, &c->lim, &s);
    otm_free(m);
    if (c->code == ONYX_OK) {
      if (st) fail_msg("%s: expected success: %s", c->name, onyx_status_message(st));
      assert_non_null(s);
      onyx_session_release(s);
      continue;
    }
    assert_null(s);
    expect_status(st, c->code, c->subs, c->name);
  }
}

/* --- bytes that are not a model ------------------------------------------------------- */

static OnyxStatus* create_from_bytes(const void* bytes, size_t len) {
  OnyxSessionOptions* o = options(NULL);
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  onyx_session_release(s);
  return st;
}

static void test_not_a_model(void** state) {
  (void)state;
  static const char* const parse[] = {"<memory>", "protobuf parse failed", NULL};
  expect_status(create_from_bytes("\xff\xff\xff\xff\xff", 5), ONYX_INVALID_MODEL, parse, "garbage");
  static const char* const empty[] = {"no ir_version", NULL};
  expect_status(create_from_bytes("", 0), ONYX_INVALID_MODEL, empty, "empty");
  /* Field 7 (graph), length-delimited, claiming 100 bytes of 3. */
  expect_status(create_from_bytes("\x3a\x64\x00\x00\x00", 5), ONYX_INVALID_MODEL, parse,
                "length past the end");
  /* 40000 levels of graph -> node -> attribute -> graph ..., each length
   * covering the rest: refused before protobuf-c recurses into it. */
  size_t levels = 40000, n = 0;
  uint8_t* deep = malloc(levels * 4);
  assert_non_null(deep);
  for (size_t i = 0; i < levels; i++) {
    size_t rest = (levels - 1 - i) * 4; /* each level: key + 3-byte varint length */
    /* ModelProto.graph (7), then GraphProto.node (1), NodeProto.attribute
     * (5), AttributeProto.g (6), node, attribute, g, ... */
    static const uint8_t keys[3] = {0x0a, 0x2a, 0x32};
    deep[n++] = i == 0 ? 0x3a : keys[(i - 1) % 3];
    deep[n++] = (uint8_t)(0x80 | (rest & 0x7f));
    deep[n++] = (uint8_t)(0x80 | ((rest >> 7) & 0x7f));
    deep[n++] = (uint8_t)((rest >> 14) & 0x7f);
  }
  static const char* const nested[] = {"nested deeper than the limit", NULL};
  expect_status(create_from_bytes(deep, n), ONYX_LIMIT_EXCEEDED, nested, "deep nesting");
  /* The same with the depth limit set as high as it goes: the loader lowers
   * it to its ceiling rather than recurse (or overflow the nesting budget). */
  OnyxSessionOptions* o = options(&(Limits){0, 0, 0, INT_MAX});
  OnyxSession* s = NULL;
  expect_status(onyx_session_create_from_bytes(o, deep, n, NULL, &s), ONYX_LIMIT_EXCEEDED, nested,
                "deep nesting, depth limit INT_MAX");
  onyx_session_options_release(o);
  free(deep);
}

/* Every prefix of a valid model either loads (protobuf allows a cut at a
 * field boundary) or fails with a message; never a crash or a leak. */
static void test_truncations(void** state) {
  (void)state;
  OxTestModel* m = base_model();
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  size_t refused = 0;
  for (size_t cut = 0; cut < len; cut++) {
    OnyxStatus* st = create_from_bytes(bytes, cut);
    if (!st) continue;
    assert_true(strlen(onyx_status_message(st)) > 0);
    refused++;
    onyx_status_release(st);
  }
  assert_true(refused > len / 2); /* most cuts break the message */
  static const char* const parse[] = {"truncated or corrupt", NULL};
  expect_status(create_from_bytes(bytes, len - 3), ONYX_INVALID_MODEL, parse, "cut by 3");
  free(bytes);
}

/* Every single-bit flip of a valid model: loads or fails with a message. */
static void test_bit_flips(void** state) {
  (void)state;
  OxTestModel* m = base_model();
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  size_t refused = 0;
  for (size_t bit = 0; bit < len * 8; bit++) {
    bytes[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    OnyxStatus* st = create_from_bytes(bytes, len);
    bytes[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    if (!st) continue;
    assert_true(strlen(onyx_status_message(st)) > 0);
    refused++;
    onyx_status_release(st);
  }
  assert_true(refused > 0);
  free(bytes);
}

/* --- external data --------------------------------------------------------------------- */

typedef struct ExtCase {
  const char* name;
  const char* location;
  int64_t offset, length;
  OnyxStatusCode code;
  const char* subs[4];
} ExtCase;

/* The folder holds w.bin (16 bytes: 4 floats), a symlink out of the folder,
 * a symlink to w.bin inside it, a FIFO and a sub-folder. */
static const ExtCase ext_cases[] = {
    {"inside", "w.bin", 4, 12, ONYX_OK, {NULL}},
    {"symlink inside the folder", "inner_link", 0, 12, ONYX_OK, {NULL}},
    {"absolute",
     "/etc/passwd",
     0,
     12,
     ONYX_INVALID_MODEL,
     {"initializer 'W'", "'/etc/passwd' is absolute (refused)"}},
    {"dot-dot", "sub/../../w.bin", 0, 12, ONYX_INVALID_MODEL, {"contains '..' (refused)"}},
    {"symlink out of the folder",
     "outer_link",
     0,
     12,
     ONYX_INVALID_MODEL,
     {"'outer_link' resolves to", "outside the model folder", "(refused)"}},
    {"offset beyond the file",
     "w.bin",
     17,
     -1,
     ONYX_INVALID_MODEL,
     {"offset 17 is beyond the end of 'w.bin' (16 bytes)"}},
    {"offset + length beyond the file",
     "w.bin",
     8,
     12,
     ONYX_INVALID_MODEL,
     {"offset 8 + length 12 is beyond the end of 'w.bin'"}},
    {"length disagrees with dims",
     "w.bin",
     0,
     16,
     ONYX_INVALID_MODEL,
     {"holds 16 bytes but the dims need 12"}},
    {"missing file", "nothere.bin", 0, 12, ONYX_NOT_FOUND, {"'nothere.bin'"}},
    {"a FIFO (must not hang)", "fifo", 0, 12, ONYX_INVALID_MODEL, {"'fifo'", "not a regular file"}},
    {"a folder", "sub", 0, 12, ONYX_INVALID_MODEL, {"'sub'", "not a regular file"}},
};

static char* path_in(const char* dir, const char* name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char* p = malloc(n);
  assert_non_null(p);
  snprintf(p, n, "%s/%s", dir, name);
  return p;
}

static char* make_ext_dir(void) {
  char* dir = otm_temp_dir();
  assert_non_null(dir);
  char* p = path_in(dir, "w.bin");
  float w[4] = {0, 1, 2, 3};
  assert_true(otm_write_file(p, w, sizeof w));
  free(p);
  p = path_in(dir, "outer_link");
  assert_int_equal(symlink("/etc/passwd", p), 0);
  free(p);
  p = path_in(dir, "inner_link");
  assert_int_equal(symlink("w.bin", p), 0);
  free(p);
  p = path_in(dir, "fifo");
  assert_int_equal(mkfifo(p, 0600), 0);
  free(p);
  p = path_in(dir, "sub");
  assert_int_equal(mkdir(p, 0700), 0);
  free(p);
  return dir;
}

static OnyxStatus* create_ext(const char* dir, const char* location, int64_t offset, int64_t length,
                              OnyxSession** s) {
  OxTestModel* m = base_model();
  otm_tensor_external(otm_graph(m)->initializer[0], location, offset, length);
  char* path = path_in(dir, "model.onnx");
  assert_true(otm_write(m, path));
  otm_free(m);
  OnyxSessionOptions* o = options(NULL);
  OnyxStatus* st = onyx_session_create(o, path, s);
  onyx_session_options_release(o);
  free(path);
  return st;
}

static void test_external_table(void** state) {
  (void)state;
  char* dir = make_ext_dir();
  for (size_t i = 0; i < sizeof ext_cases / sizeof ext_cases[0]; i++) {
    const ExtCase* c = &ext_cases[i];
    OnyxSession* s = NULL;
    OnyxStatus* st = create_ext(dir, c->location, c->offset, c->length, &s);
    if (c->code == ONYX_OK) {
      if (st) fail_msg("%s: expected success: %s", c->name, onyx_status_message(st));
      onyx_session_release(s);
      continue;
    }
    assert_null(s);
    expect_status(st, c->code, c->subs, c->name);
  }
  otm_remove_dir(dir);
  free(dir);
}

/* The weights as loaded: run Y = Relu(X + W) with X = 0. */
static void expect_weights(OnyxSession* s, const float* want) {
  OnyxValue* x = NULL;
  ok(onyx_value_create_tensor(F32, DIMS(3), 1, (float[]){0, 0, 0}, 3 * sizeof(float), &x));
  const char* in = "X";
  const char* out = "Y";
  OnyxValue* y = NULL;
  ok(onyx_session_run(s, NULL, &in, (const OnyxValue* const*)&x, 1, &out, 1, &y));
  const float* got = onyx_tensor_data(onyx_value_tensor(y));
  for (int i = 0; i < 3; i++)
    assert_float_equal(got[i], want[i], 0);
  onyx_value_release(x);
  onyx_value_release(y);
}

/* The time-of-check/time-of-use window: between the check of the path and
 * its open, the test's hook replaces the checked file with a symlink to a
 * file outside the folder. The loader must notice it opened something else. */
static char* g_race_outside;

static void race_swap(const char* base_dir, const char* location) {
  char* p = path_in(base_dir, location);
  assert_int_equal(unlink(p), 0);
  assert_int_equal(symlink(g_race_outside, p), 0);
  free(p);
}

static void race_replace_file(const char* base_dir, const char* location) {
  /* Replaced by another regular file of the same size: no symlink to trip
   * O_NOFOLLOW, only the identity check can tell. The checked file is moved
   * aside, not deleted, so its inode cannot be reused by the new one. */
  char* p = path_in(base_dir, location);
  char* aside = path_in(base_dir, "moved_aside.bin");
  assert_int_equal(rename(p, aside), 0);
  float other[3] = {9, 9, 9};
  assert_true(otm_write_file(p, other, sizeof other));
  free(aside);
  free(p);
}

static void test_external_race(void** state) {
  (void)state;
  char* dir = make_ext_dir();
  char* outside_dir = otm_temp_dir();
  g_race_outside = path_in(outside_dir, "secret.bin");
  float secret[3] = {7, 7, 7};
  assert_true(otm_write_file(g_race_outside, secret, sizeof secret));
  char* target = path_in(dir, "target.bin");
  float mine[3] = {1, 2, 3};
  assert_true(otm_write_file(target, mine, sizeof mine));

  /* Without interference the file loads (and its values are the ones used). */
  OnyxSession* s = NULL;
  ok(create_ext(dir, "target.bin", 0, 12, &s));
  expect_weights(s, mine);
  onyx_session_release(s);

  ox_external_race_hook = race_swap;
  s = NULL;
  static const char* const changed[] = {"'target.bin'", "changed while it was being opened",
                                        "(refused)", NULL};
  expect_status(create_ext(dir, "target.bin", 0, 12, &s), ONYX_INVALID_MODEL, changed,
                "swapped for a symlink out");
  assert_null(s);

  unlink(target); /* the hook left a symlink there */
  assert_true(otm_write_file(target, mine, sizeof mine));
  ox_external_race_hook = race_replace_file;
  expect_status(create_ext(dir, "target.bin", 0, 12, &s), ONYX_INVALID_MODEL, changed,
                "replaced by another file");
  ox_external_race_hook = NULL;

  free(target);
  free(g_race_outside);
  g_race_outside = NULL;
  otm_remove_dir(outside_dir);
  free(outside_dir);
  otm_remove_dir(dir);
  free(dir);
}

/* --- TensorProto --------------------------------------------------------------------- */

typedef struct TpCase {
  const char* name;
  void (*bend)(Onnx__TensorProto* t);
  OnyxStatusCode code;
  const char* subs[4];
} TpCase;

static void tp_raw_short(Onnx__TensorProto* t) {
  t->raw_data.len = 5;
}
static void tp_negative(Onnx__TensorProto* t) {
  t->dims[1] = -1;
}
static void tp_no_type(Onnx__TensorProto* t) {
  t->data_type = 0;
}
static void tp_huge(Onnx__TensorProto* t) {
  t->dims[0] = (int64_t)1 << 40;
}
static void tp_name(Onnx__TensorProto* t) {
  free(t->name);
  t->name = otm_strdup("\xc3\x28");
}
static void tp_external(Onnx__TensorProto* t) {
  otm_tensor_external(t, "x.bin", 0, 24);
}

static const TpCase tp_cases[] = {
    {"raw_data short",
     tp_raw_short,
     ONYX_INVALID_MODEL,
     {"tensor 't'", "raw_data has 5 bytes but the dims need 24"}},
    {"negative dim", tp_negative, ONYX_INVALID_MODEL, {"tensor 't'", "dimension 1 is negative"}},
    {"no data type", tp_no_type, ONYX_INVALID_MODEL, {"tensor 't'", "missing data_type 0"}},
    {"huge", tp_huge, ONYX_LIMIT_EXCEEDED, {"tensor 't'", "exceeds the limit"}},
    {"name not UTF-8", tp_name, ONYX_INVALID_MODEL, {"field 'name' is not valid UTF-8"}},
    {"external data", tp_external, ONYX_INVALID_MODEL, {"external data 'x.bin'"}},
};

static void test_tensor_proto_table(void** state) {
  (void)state;
  for (size_t i = 0; i < sizeof tp_cases / sizeof tp_cases[0]; i++) {
    OxTestModel* m = otm_new(17);
    float v[6] = {1, 2, 3, 4, 5, 6};
    Onnx__TensorProto* t = otm_tensor(m, "t", F32, 2, DIMS(2, 3), v);
    tp_cases[i].bend(t);
    size_t len = onnx__tensor_proto__get_packed_size(t);
    uint8_t* buf = malloc(len + 1);
    assert_non_null(buf);
    onnx__tensor_proto__pack(t, buf);
    OnyxValue* out = NULL;
    char* name = NULL;
    OnyxStatus* st = onyx_value_parse_tensor_proto(buf, len, &out, &name);
    assert_null(out);
    assert_null(name);
    expect_status(st, tp_cases[i].code, tp_cases[i].subs, tp_cases[i].name);
    free(buf);
    otm_free(m);
  }
  static const char* const parse[] = {"not a valid TensorProto", NULL};
  OnyxValue* out = NULL;
  expect_status(onyx_value_parse_tensor_proto("\x42\xff\xff\xff\x0f", 5, &out, NULL),
                ONYX_INVALID_MODEL, parse, "garbage TensorProto");
}

/* --- configs ----------------------------------------------------------------------------- */

typedef struct CfgCase {
  const char* name;
  const char* text;
  const char* subs[4];
} CfgCase;

static const CfgCase cfg_cases[] = {
    {"unknown key", "{\"provider\": []}", {"<cfg>", "provider: unknown key", "'providers'"}},
    {"unknown nested key",
     "{\"session\": {\"limits\": {\"max_depth\": 3}}}",
     {"session.limits.max_depth: unknown key"}},
    {"wrong type", "{\"session\": {\"threads\": \"four\"}}", {"session.threads", "a string"}},
    {"negative limit",
     "{\"session\": {\"limits\": {\"max_tensor_bytes\": -1}}}",
     {"session.limits.max_tensor_bytes", "out of range"}},
    {"duplicate provider",
     "{\"providers\": [{\"name\": \"cpu\"}, {\"name\": \"cpu\"}]}",
     {"providers[1]", "'cpu'", "twice"}},
    {"duplicate key",
     "{\"fallback\": \"allow\", \"fallback\": \"deny\"}",
     {"<cfg>:1:", "duplicate"}},
    {"not JSON", "{\"providers\": [", {"<cfg>:1:"}},
    {"not an object", "[1, 2]", {"top level must be an object"}},
    {"text with a NUL", "{\"fallback\": \"al\\u0000low\"}", {"<cfg>:1:", "\\u0000 is not allowed"}},
};

static void test_config_table(void** state) {
  (void)state;
  for (size_t i = 0; i < sizeof cfg_cases / sizeof cfg_cases[0]; i++) {
    OnyxSessionOptions* o = options(NULL);
    OnyxStatus* st = onyx_session_options_load_config_text(o, cfg_cases[i].text,
                                                           strlen(cfg_cases[i].text), "<cfg>");
    expect_status(st, ONYX_INVALID_CONFIG, cfg_cases[i].subs, cfg_cases[i].name);
    onyx_session_options_release(o);
  }
}

/* Limits given in a config reach the loader; 0 keeps the default. */
static void test_config_limits(void** state) {
  (void)state;
  OnyxSessionOptions* o = options(NULL);
  const char* text = "{\"session\": {\"limits\": {\"max_tensor_bytes\": 1024, \"max_nodes\": 0}}}";
  ok(onyx_session_options_load_config_text(o, text, strlen(text), "<cfg>"));
  OxTestModel* m = m_tensor_over_limit();
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  static const char* const lim[] = {"limit of 1024 bytes", NULL};
  expect_status(onyx_session_create_from_bytes(o, bytes, len, NULL, &s), ONYX_LIMIT_EXCEEDED, lim,
                "config tensor limit");
  free(bytes);
  onyx_session_options_release(o);
}

/* The defaults are real values from the start, and 0 (in code or config)
 * means the default, not "unlimited". */
static void test_limit_defaults(void** state) {
  (void)state;
  OnyxSessionOptions* o = options(NULL);
  assert_int_equal(o->max_model_bytes, (size_t)4 << 30);
  assert_int_equal(o->max_tensor_bytes, (size_t)4 << 30);
  assert_int_equal(o->max_nodes, 1000000);
  assert_int_equal(o->max_graph_depth, 32);
  ok(onyx_session_options_set_limits(o, 100, 200, 300, 4));
  assert_int_equal(o->max_model_bytes, 100);
  assert_int_equal(o->max_tensor_bytes, 200);
  assert_int_equal(o->max_nodes, 300);
  assert_int_equal(o->max_graph_depth, 4);
  ok(onyx_session_options_set_limits(o, 0, 0, 0, 0));
  assert_int_equal(o->max_model_bytes, (size_t)4 << 30);
  assert_int_equal(o->max_tensor_bytes, (size_t)4 << 30);
  assert_int_equal(o->max_nodes, 1000000);
  assert_int_equal(o->max_graph_depth, 32);
  static const char* const neg[] = {"max_graph_depth -1 is negative", NULL};
  expect_status(onyx_session_options_set_limits(o, 0, 0, 0, -1), ONYX_INVALID_ARGUMENT, neg,
                "negative depth");
  const char* text = "{\"session\": {\"limits\": {\"max_nodes\": 0, \"max_graph_depth\": 7}}}";
  ok(onyx_session_options_set_limits(o, 1, 2, 3, 4));
  ok(onyx_session_options_load_config_text(o, text, strlen(text), "<cfg>"));
  assert_int_equal(o->max_nodes, 1000000); /* 0 in the config: the default */
  assert_int_equal(o->max_graph_depth, 7);
  onyx_session_options_release(o);
}

/* The tensor limit holds at run time too: a kernel output over it fails the
 * run (X of 4 floats tiled 100 times is 1600 bytes, over 1 KiB), and a run
 * under it still works, for an intermediate and for a graph output. */
static void run_time_limit_case(bool tile_is_output) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(4));
  otm_input(m, "R", I64, 1, DIMS(1));
  if (tile_is_output) { /* a graph output: allocated on the heap */
    otm_node(m, "Tile", "tile", "X,R", "Y");
  } else { /* an intermediate: allocated in the provider's arena */
    otm_node(m, "Tile", "tile", "X,R", "T");
    otm_node(m, "Relu", "relu", "T", "Y");
  }
  otm_output_s(m, "Y", F32, "?");
  OnyxSession* s = NULL;
  ok(create_from_model(m, &(Limits){0, 1024, 0, 0}, &s));
  otm_free(m);
  const char* in[2] = {"X", "R"};
  const char* out = "Y";
  for (int64_t reps = 100; reps >= 10; reps -= 90) {
    OnyxValue* x[2] = {NULL, NULL};
    ok(onyx_value_create_tensor(F32, DIMS(4), 1, (float[]){1, 2, 3, 4}, 16, &x[0]));
    ok(onyx_value_create_tensor(I64, DIMS(1), 1, &reps, sizeof reps, &x[1]));
    OnyxValue* y = NULL;
    OnyxStatus* st = onyx_session_run(s, NULL, in, (const OnyxValue* const*)x, 2, &out, 1, &y);
    if (reps == 100) {
      static const char* const subs[] = {"1600 bytes", "limit of 1024 bytes", NULL};
      expect_status(st, ONYX_LIMIT_EXCEEDED, subs, "tiled over the limit");
      assert_null(y);
    } else {
      ok(st);
      assert_int_equal(onyx_tensor_elem_count(onyx_value_tensor(y)), 40);
      assert_float_equal(((const float*)onyx_tensor_data(onyx_value_tensor(y)))[39], 4, 0);
      onyx_value_release(y);
    }
    onyx_values_release(x, 2);
  }
  onyx_session_release(s);
}

static void test_run_time_tensor_limit(void** state) {
  (void)state;
  run_time_limit_case(false);
  run_time_limit_case(true);
}

/* A small model that asks for 40 GB at run time (ConstantOfShape of
 * {100000, 100000} floats): refused by the default limit before the
 * allocation is tried, whether or not the optimizer folds it at creation. */
static void test_run_time_huge_constant(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(1));
  otm_initializer(m, "S", I64, 1, DIMS(2), (int64_t[]){100000, 100000});
  otm_node(m, "ConstantOfShape", "cos", "S", "C");
  otm_node(m, "Add", "add", "C,X", "Y");
  otm_output_s(m, "Y", F32, NULL);
  static const char* const subs[] = {"40000000000 bytes", "exceeds the limit of 4294967296 bytes",
                                     NULL};
  OnyxSession* s = NULL;
  OnyxStatus* st = create_from_model(m, NULL, &s);
  otm_free(m);
  if (st) { /* refused while folding constants */
    expect_status(st, ONYX_LIMIT_EXCEEDED, subs, "huge constant at creation");
    return;
  }
  OnyxValue* x = NULL;
  ok(onyx_value_create_tensor(F32, DIMS(1), 1, (float[]){1}, sizeof(float), &x));
  const char* in = "X";
  const char* out = "Y";
  OnyxValue* y = NULL;
  expect_status(onyx_session_run(s, NULL, &in, (const OnyxValue* const*)&x, 1, &out, 1, &y),
                ONYX_LIMIT_EXCEEDED, subs, "huge constant at run time");
  assert_null(y);
  onyx_value_release(x);
  onyx_session_release(s);
}

/* --- providers that fail -------------------------------------------------------------- */

typedef enum Slot {
  SLOT_NONE,
  SLOT_INIT,
  SLOT_DEVICE_COUNT,
  SLOT_REGISTER_KERNELS,
  SLOT_CREATE_EP,
  SLOT_GET_CAPABILITY,
  SLOT_KERNEL_CREATE,
} Slot;

static const OnyxHostApi* g_host;
static Slot g_fail;

static OnyxStatus* faulty_error(const char* slot) {
  return g_host->status_create(ONYX_FAIL, "faulty: %s broke on purpose", slot);
}

/* Relu that fails when its first input element is NaN. */
static OnyxStatus* faulty_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxTensor* x = g_host->ctx_input(ctx, 0);
  const float* a = g_host->tensor_data(x);
  size_t n = g_host->tensor_elem_count(x);
  if (n && isnan(a[0]))
    return g_host->status_create(ONYX_RUNTIME_ERROR, "faulty: compute refused a NaN");
  OnyxTensor* y;
  OnyxStatus* st = g_host->ctx_output(ctx, 0, g_host->tensor_dims(x), g_host->tensor_rank(x), &y);
  if (st) return st;
  float* b = g_host->tensor_mutable_data(y);
  for (size_t i = 0; i < n; i++)
    b[i] = a[i] > 0 ? a[i] : 0;
  return NULL;
}

static OnyxStatus* faulty_kernel_create(OnyxEp* ep, const OnyxNode* node, void* user_data,
                                        void** state) {
  (void)ep, (void)node, (void)user_data;
  *state = NULL;
  return g_fail == SLOT_KERNEL_CREATE ? faulty_error("kernel create") : NULL;
}

static OnyxStatus* faulty_kernels(const OnyxProvider* p, OnyxKernelRegistry* r) {
  (void)p;
  if (g_fail == SLOT_REGISTER_KERNELS) return faulty_error("register_kernels");
  static const int32_t f32[] = {ONYX_ELEM_FLOAT32};
  static const OnyxTypeConstraint tc[] = {{"T", f32, 1}};
  OnyxKernelDef d = {.struct_size = sizeof d,
                     .domain = "",
                     .op_type = "Relu",
                     .since_version = 1,
                     .end_version = ONYX_OPSET_LATEST,
                     .type_constraints = tc,
                     .type_constraint_count = 1,
                     .create = faulty_kernel_create,
                     .compute = faulty_compute};
  return g_host->register_kernel(r, &d);
}

static OnyxStatus* faulty_count(const OnyxProvider* p, size_t* n) {
  (void)p;
  *n = 1;
  return g_fail == SLOT_DEVICE_COUNT ? faulty_error("device_count") : NULL;
}

static OnyxStatus* faulty_capability(OnyxEp* ep, const OnyxGraphView* g, OnyxCapabilityBuilder* b) {
  (void)ep, (void)g, (void)b;
  return faulty_error("get_capability");
}

static void faulty_ep_release(OnyxEp* ep) {
  (void)ep;
}

static OnyxEp g_faulty_ep;

static OnyxStatus* faulty_create(const OnyxProvider* p, const OnyxEpCreateArgs* a, OnyxEp** out) {
  (void)a;
  *out = NULL;
  if (g_fail == SLOT_CREATE_EP) return faulty_error("create_ep");
  g_faulty_ep =
      (OnyxEp){.struct_size = sizeof g_faulty_ep,
               .provider = p,
               .release = faulty_ep_release,
               .get_capability = g_fail == SLOT_GET_CAPABILITY ? faulty_capability : NULL};
  *out = &g_faulty_ep;
  return NULL;
}

static const OnyxProvider faulty_provider = {.struct_size = sizeof faulty_provider,
                                             .abi_major = ONYX_ABI_VERSION_MAJOR,
                                             .abi_minor = ONYX_ABI_VERSION_MINOR,
                                             .name = "faulty",
                                             .vendor = "onyx tests",
                                             .version = "1",
                                             .device_count = faulty_count,
                                             .register_kernels = faulty_kernels,
                                             .create_ep = faulty_create};

static OnyxStatus* faulty_init(const OnyxHostApi* host, const OnyxProvider** out) {
  g_host = host;
  if (g_fail == SLOT_INIT) return host->status_create(ONYX_FAIL, "faulty: init broke on purpose");
  *out = &faulty_provider;
  return NULL;
}

/* X -> Abs (cpu) -> Relu (faulty) -> Neg (cpu) -> Y */
static OnyxStatus* create_faulty(OnyxSession** s) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(3));
  otm_node(m, "Abs", "abs", "X", "A");
  otm_node(m, "Relu", "relu", "A", "R");
  otm_node(m, "Neg", "neg", "R", "Y");
  otm_output(m, "Y", F32, 1, DIMS(3));
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = options(NULL);
  ok(onyx_session_options_add_provider_init(o, "faulty", faulty_init, 1));
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, s);
  onyx_session_options_release(o);
  free(bytes);
  return st;
}

static void test_provider_slots(void** state) {
  (void)state;
  static const struct {
    Slot slot;
    OnyxStatusCode code;
    const char* subs[4];
  } cases[] = {
      {SLOT_INIT, ONYX_FAIL, {"faulty", "init broke on purpose"}},
      {SLOT_DEVICE_COUNT, ONYX_FAIL, {"faulty", "device_count broke on purpose"}},
      {SLOT_REGISTER_KERNELS, ONYX_FAIL, {"faulty", "register_kernels broke on purpose"}},
      {SLOT_CREATE_EP, ONYX_FAIL, {"faulty", "create_ep broke on purpose"}},
      {SLOT_GET_CAPABILITY, ONYX_FAIL, {"faulty", "get_capability broke on purpose"}},
      {SLOT_KERNEL_CREATE, ONYX_FAIL, {"faulty", "kernel create broke on purpose"}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    g_fail = cases[i].slot;
    OnyxSession* s = NULL;
    OnyxStatus* st = create_faulty(&s);
    char what[64];
    snprintf(what, sizeof what, "slot %d", (int)cases[i].slot);
    if (!st) fail_msg("%s: expected an error", what);
    assert_null(s);
    expect_status(st, cases[i].code, cases[i].subs, what);
  }
  g_fail = SLOT_NONE;
}

static void run_faulty(OnyxSession* s, const float* x3, OnyxStatus** st, float* y3) {
  OnyxValue* x = NULL;
  ok(onyx_value_create_tensor(F32, DIMS(3), 1, x3, 3 * sizeof(float), &x));
  const char* in = "X";
  const char* out = "Y";
  OnyxValue* y = NULL;
  *st = onyx_session_run(s, NULL, &in, (const OnyxValue* const*)&x, 1, &out, 1, &y);
  if (!*st) {
    memcpy(y3, onyx_tensor_data(onyx_value_tensor(y)), 3 * sizeof(float));
    onyx_value_release(y);
  } else {
    assert_null(y);
  }
  onyx_value_release(x);
}

static void test_kernel_fails_mid_run(void** state) {
  (void)state;
  g_fail = SLOT_NONE;
  OnyxSession* s = NULL;
  ok(create_faulty(&s));
  /* The faulty provider really runs Relu. */
  size_t fi = SIZE_MAX;
  for (size_t i = 0; i < onyx_session_provider_count(s); i++)
    if (!strcmp(onyx_session_provider_name(s, i), "faulty")) fi = i;
  assert_true(fi != SIZE_MAX);
  assert_int_equal(onyx_session_provider_node_count(s, fi), 1);
  for (int round = 0; round < 3; round++) {
    OnyxStatus* st;
    float y[3];
    run_faulty(s, (float[]){NAN, 1, 2}, &st, y); /* Abs(NaN) is NaN: Relu refuses it */
    static const char* const subs[] = {"node 'relu' (Relu)", "faulty: compute refused a NaN", NULL};
    expect_status(st, ONYX_RUNTIME_ERROR, subs, "mid-run failure");
    run_faulty(s, (float[]){-1, 2, -3}, &st, y); /* -|x| for every x */
    ok(st);
    assert_float_equal(y[0], -1, 0);
    assert_float_equal(y[1], -2, 0);
    assert_float_equal(y[2], -3, 0);
  }
  onyx_session_release(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_model_table),           cmocka_unit_test(test_not_a_model),
      cmocka_unit_test(test_truncations),           cmocka_unit_test(test_bit_flips),
      cmocka_unit_test(test_external_table),        cmocka_unit_test(test_external_race),
      cmocka_unit_test(test_tensor_proto_table),    cmocka_unit_test(test_config_table),
      cmocka_unit_test(test_config_limits),         cmocka_unit_test(test_limit_defaults),
      cmocka_unit_test(test_run_time_tensor_limit), cmocka_unit_test(test_run_time_huge_constant),
      cmocka_unit_test(test_provider_slots),        cmocka_unit_test(test_kernel_fails_mid_run),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
