/* test_model.c — ModelProto/TensorProto loading, saving and file reading. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ox_graph.h"
#include "ox_model.h"
#include "ox_test_models.h"

#define F32       ONYX_ELEM_FLOAT32
#define I64       ONYX_ELEM_INT64
#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

/* --- helpers ------------------------------------------------------------------------------ */

static OnyxStatus* load_lim(OxTestModel* m, const OxModelLimits* lim, OxGraph** g) {
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  OnyxStatus* st = ox_model_load_bytes(bytes, len, NULL, "test.onnx", lim, g);
  free(bytes);
  return st;
}

static OxGraph* load_ok(OxTestModel* m) {
  OxGraph* g = NULL;
  OnyxStatus* st = load_lim(m, NULL, &g);
  if (st) fail_msg("unexpected error: %s", st->message);
  assert_non_null(g);
  return g;
}

/* Asserts an error of `code` whose message holds every needle (NULL-terminated). */
static void expect_error_v(OnyxStatus* st, OnyxStatusCode code, const char* const* needles) {
  if (!st) fail_msg("expected an error with code %d, got success", (int)code);
  for (size_t i = 0; needles[i]; i++)
    if (!strstr(st->message, needles[i]))
      fail_msg("message '%s' lacks '%s'", st->message, needles[i]);
  if (st->code != code)
    fail_msg("code %d instead of %d: %s", (int)st->code, (int)code, st->message);
  ox_status_free(st);
}
#define EXPECT_ERROR(st, code, ...)                                                                \
  expect_error_v((st), (code), (const char* const[]){__VA_ARGS__, NULL})

/* Loads m and expects an error. */
static void expect_load_error_v(OxTestModel* m, OnyxStatusCode code, const char* const* needles) {
  OxGraph* g = NULL;
  OnyxStatus* st = load_lim(m, NULL, &g);
  ox_graph_free(g);
  expect_error_v(st, code, needles);
}
#define EXPECT_LOAD_ERROR(m, code, ...)                                                            \
  expect_load_error_v((m), (code), (const char* const[]){__VA_ARGS__, NULL})

static const OxValue* find(const OxGraph* g, const char* name) {
  const OxValue* v = ox_graph_find(g, name);
  if (!v) fail_msg("no value '%s'", name);
  return v;
}

static void assert_dims(const OxValue* v, int32_t rank, const int64_t* dims) {
  assert_int_equal(v->rank, rank);
  for (int32_t i = 0; i < rank; i++)
    assert_int_equal(v->dims[i], dims[i]);
}

/* A small model using most features; the fuzz-style tests mangle it. */
static OxTestModel* small_model(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 2, DIMS(2, 3));
  otm_input_s(m, "C", ONYX_ELEM_BOOL, "");
  otm_initializer(m, "W", F32, 2, DIMS(3, 2), (const float[]){1, 2, 3, 4, 5, 6});
  otm_node(m, "MatMul", "mm", "X,W", "Y");
  OxTestNode* n = otm_node(m, "LeakyRelu", "lr", "Y", "Z");
  otm_attr_float(n, "alpha", 0.5f);
  otm_attr_ints(n, "extra", 2, DIMS(4, 5));
  OxTestNode* iff = otm_node(m, "If", "if", "C", "R");
  otm_begin_graph(m, "then");
  otm_node(m, "Identity", "t", "Z", "T");
  otm_output(m, "T", F32, 2, DIMS(2, 2));
  otm_attr_graph(iff, "then_branch", otm_end_graph(m));
  otm_begin_graph(m, "else");
  otm_node(m, "Neg", "e", "Z", "E");
  otm_output(m, "E", F32, 2, DIMS(2, 2));
  otm_attr_graph(iff, "else_branch", otm_end_graph(m));
  otm_output(m, "R", F32, 2, DIMS(2, 2));
  return m;
}

/* --- loading the IR ----------------------------------------------------------------------------
 */

static void test_load_graph(void** state) {
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "com.example", 3);
  otm_input(m, "X", F32, 2, DIMS(2, 3));
  otm_input_s(m, "Y", F32, "N,3");
  otm_initializer(m, "W", F32, 2, DIMS(3, 2), (const float[]){1, 2, 3, 4, 5, 6});
  otm_node(m, "MatMul", "mm", "X,W", "Z");
  otm_node(m, "Add", NULL, "Z,Y", "O");
  OxTestNode* c = otm_node(m, "Clip", "clip", "O,,", "P");
  otm_node_domain(c, "ai.onnx");
  otm_value_info(m, "Z", F32, 2, DIMS(2, 2));
  otm_output(m, "P", F32, 2, DIMS(2, -1));
  OxGraph* g = load_ok(m);

  assert_string_equal(g->source, "test.onnx");
  assert_string_equal(g->name, "test");
  assert_string_equal(g->producer_name, "onyx-test");
  assert_int_equal(g->ir_version, 8);
  assert_int_equal(g->n_opsets, 2);
  assert_string_equal(g->opsets[0].domain, "");
  assert_int_equal(g->opsets[0].version, 17);
  assert_string_equal(g->opsets[1].domain, "com.example");
  assert_int_equal(ox_graph_opset(g, "com.example"), 3);
  assert_null(g->parent);

  assert_int_equal(g->n_inputs, 2);
  assert_ptr_equal(g->inputs[0], find(g, "X"));
  assert_ptr_equal(g->inputs[1], find(g, "Y"));
  const OxValue* x = find(g, "X");
  assert_int_equal(x->type, F32);
  assert_dims(x, 2, DIMS(2, 3));
  assert_null(x->dim_params);
  assert_true(x->is_graph_input);
  const OxValue* y = find(g, "Y");
  assert_dims(y, 2, DIMS(ONYX_DIM_UNKNOWN, 3));
  assert_non_null(y->dim_params);
  assert_string_equal(y->dim_params[0], "N");
  assert_null(y->dim_params[1]);

  const OxValue* w = find(g, "W");
  assert_false(w->is_graph_input);
  assert_non_null(w->constant);
  assert_int_equal(w->type, F32);
  assert_dims(w, 2, DIMS(3, 2));
  assert_int_equal(w->constant->count, 6);
  assert_memory_equal(w->constant->data, ((const float[]){1, 2, 3, 4, 5, 6}), 24);

  assert_int_equal(g->n_nodes, 3);
  const OxNode* mm = g->nodes[0];
  assert_string_equal(mm->name, "mm");
  assert_string_equal(mm->op_type, "MatMul");
  assert_string_equal(mm->domain, "");
  assert_int_equal(mm->n_inputs, 2);
  assert_ptr_equal(mm->inputs[0], x);
  assert_ptr_equal(mm->inputs[1], w);
  assert_ptr_equal(find(g, "Z")->producer, mm);
  assert_string_equal(g->nodes[1]->name, "Add_1"); /* unnamed: "<op_type>_<index>" */
  const OxNode* clip = g->nodes[2];
  assert_string_equal(clip->domain, ""); /* "ai.onnx" is the default domain */
  assert_int_equal(clip->n_inputs, 3);
  assert_null(clip->inputs[1]);
  assert_null(clip->inputs[2]);

  const OxValue* z = find(g, "Z"); /* from value_info */
  assert_int_equal(z->type, F32);
  assert_dims(z, 2, DIMS(2, 2));
  const OxValue* p = find(g, "P");
  assert_true(p->is_graph_output);
  assert_int_equal(g->n_outputs, 1);
  assert_dims(p, 2, DIMS(2, ONYX_DIM_UNKNOWN));
  assert_string_equal(p->dim_params[1], "P_1");
  const OxValue* o = find(g, "O"); /* no value_info: unknown */
  assert_int_equal(o->type, ONYX_ELEM_UNDEFINED);
  assert_int_equal(o->rank, -1);
  ox_graph_free(g);
  otm_free(m);
}

static void test_attributes(void** state) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(4));
  OxTestNode* n = otm_node(m, "Custom", "c", "X", "Y");
  otm_node_domain(n, "com.example");
  otm_attr_int(n, "i", -7);
  otm_attr_float(n, "f", 2.5f);
  otm_attr_string(n, "s", "hello");
  otm_attr_ints(n, "is", 3, DIMS(1, -2, INT64_MAX));
  otm_attr_floats(n, "fs", 2, (const float[]){0.25f, -1.0f});
  otm_attr_strings(n, "ss", 2, (const char* const[]){"a", "bc"});
  otm_attr_ints(n, "empty", 0, NULL);
  otm_attr_tensor(n, "t", otm_tensor(m, "tv", I64, 1, DIMS(2), (const int64_t[]){9, -9}));
  Onnx__TensorProto* ts[2] = {otm_tensor(m, "a", ONYX_ELEM_INT8, 0, NULL, (const int8_t[]){-3}),
                              otm_tensor(m, "b", F32, 1, DIMS(1), (const float[]){1.5f})};
  otm_attr_tensors(n, "ts", 2, ts);
  otm_output(m, "Y", F32, -1, NULL);
  OxGraph* g = load_ok(m);
  const OxNode* c = g->nodes[0];
  assert_string_equal(c->domain, "com.example");
  assert_int_equal(c->n_attrs, 9);
  assert_int_equal(ox_node_attr(c, "i")->type, ONYX_ATTR_INT);
  assert_int_equal(ox_node_attr_int(c, "i", 0), -7);
  assert_true(ox_node_attr_float(c, "f", 0) == 2.5f);
  const OxAttr* s = ox_node_attr(c, "s");
  assert_int_equal(s->type, ONYX_ATTR_STRING);
  assert_string_equal(s->s, "hello");
  assert_int_equal(s->s_len, 5);
  size_t k;
  const int64_t* is = ox_node_attr_ints(c, "is", &k);
  assert_int_equal(k, 3);
  assert_int_equal(is[0], 1);
  assert_int_equal(is[1], -2);
  assert_int_equal(is[2], INT64_MAX);
  const OxAttr* fs = ox_node_attr(c, "fs");
  assert_int_equal(fs->type, ONYX_ATTR_FLOATS);
  assert_int_equal(fs->count, 2);
  assert_true(fs->floats[0] == 0.25f && fs->floats[1] == -1.0f);
  const OxAttr* ss = ox_node_attr(c, "ss");
  assert_int_equal(ss->count, 2);
  assert_string_equal(ss->strings[0], "a");
  assert_string_equal(ss->strings[1], "bc");
  assert_int_equal(ox_node_attr(c, "empty")->type, ONYX_ATTR_INTS);
  assert_int_equal(ox_node_attr(c, "empty")->count, 0);
  const OxAttr* t = ox_node_attr(c, "t");
  assert_int_equal(t->type, ONYX_ATTR_TENSOR);
  assert_int_equal(t->t->type, I64);
  assert_int_equal(t->t->rank, 1);
  assert_int_equal(((int64_t*)t->t->data)[1], -9);
  const OxAttr* tl = ox_node_attr(c, "ts");
  assert_int_equal(tl->type, ONYX_ATTR_TENSORS);
  assert_int_equal(tl->count, 2);
  assert_int_equal(tl->tensors[0]->rank, 0);
  assert_int_equal(((int8_t*)tl->tensors[0]->data)[0], -3);
  assert_true(((float*)tl->tensors[1]->data)[0] == 1.5f);
  for (size_t i = 0; i < c->n_attrs; i++)
    assert_false(c->attrs[i].from_default);
  /* Defaults are the resolver's business: nothing absent is invented. */
  assert_null(ox_node_attr(c, "alpha"));
  ox_graph_free(g);
  otm_free(m);
}

/* Old models leave AttributeProto.type unset; the payload tells the type. */
static void test_attribute_type_from_payload(void** state) {
  OxTestModel* m = otm_new(9);
  otm_input(m, "X", F32, 1, DIMS(4));
  OxTestNode* n = otm_node(m, "Custom", "c", "X", "Y");
  otm_attr_int(n, "i", 4)->has_type = 0;
  otm_attr_float(n, "f", 1.0f)->has_type = 0;
  otm_attr_string(n, "s", "x")->type = 0; /* present but UNDEFINED */
  otm_attr_ints(n, "is", 1, DIMS(2))->has_type = 0;
  otm_attr_floats(n, "fs", 1, (const float[]){3})->has_type = 0;
  otm_attr_strings(n, "ss", 1, (const char* const[]){"q"})->has_type = 0;
  otm_attr_tensor(n, "t", otm_tensor(m, "", F32, 0, NULL, (const float[]){1}))->has_type = 0;
  otm_output(m, "Y", F32, 1, DIMS(4));
  OxGraph* g = load_ok(m);
  const OxNode* c = g->nodes[0];
  const struct {
    const char* name;
    OnyxAttrType type;
  } want[] = {{"i", ONYX_ATTR_INT},   {"f", ONYX_ATTR_FLOAT},   {"s", ONYX_ATTR_STRING},
              {"is", ONYX_ATTR_INTS}, {"fs", ONYX_ATTR_FLOATS}, {"ss", ONYX_ATTR_STRINGS},
              {"t", ONYX_ATTR_TENSOR}};
  for (size_t i = 0; i < OX_ARRAY_LEN(want); i++)
    assert_int_equal(ox_node_attr(c, want[i].name)->type, want[i].type);
  assert_int_equal(ox_node_attr_int(c, "i", 0), 4);
  ox_graph_free(g);
  otm_free(m);

  m = otm_new(9);
  otm_input(m, "X", F32, 1, DIMS(4));
  n = otm_node(m, "Custom", "c", "X", "Y");
  Onnx__AttributeProto* a = otm_attr_int(n, "nothing", 0);
  a->has_type = 0;
  a->has_i = 0;
  otm_output(m, "Y", F32, 1, DIMS(4));
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "node 'c'", "'nothing'", "no type");
  otm_free(m);
}

static void test_attribute_errors(void** state) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(4));
  OxTestNode* n = otm_node(m, "Custom", "c", "X", "Y");
  otm_attr_int(n, "k", 1);
  otm_attr_int(n, "k", 2);
  otm_output(m, "Y", F32, 1, DIMS(4));
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "'c'", "'k'", "twice");
  otm_free(m);

  m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(4));
  n = otm_node(m, "Custom", "c", "X", "Y");
  otm_attr_int(n, "k", 1)->ref_attr_name = otm_strdup("outer_k");
  otm_output(m, "Y", F32, 1, DIMS(4));
  EXPECT_LOAD_ERROR(m, ONYX_NOT_IMPLEMENTED, "test.onnx", "'k'", "outer_k", "not supported yet");
  otm_free(m);

  m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(4));
  n = otm_node(m, "Custom", "c", "X", "Y");
  otm_attr_int(n, "sp", 1)->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR;
  otm_output(m, "Y", F32, 1, DIMS(4));
  EXPECT_LOAD_ERROR(m, ONYX_NOT_IMPLEMENTED, "test.onnx", "'sp'", "not supported yet");
  otm_free(m);

  m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(4));
  n = otm_node(m, "Custom", "c", "X", "Y");
  otm_attr_int(n, "g", 1)->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH; /* no graph */
  otm_output(m, "Y", F32, 1, DIMS(4));
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "'g'", "no graph");
  otm_free(m);

  m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(4));
  otm_node(m, "", "nameless", "X", "Y");
  otm_output(m, "Y", F32, 1, DIMS(4));
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "'nameless'", "no op_type");
  otm_free(m);
}

static void test_graph_structure_errors(void** state) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(4));
  otm_node(m, "Relu", "a", "X", "Y");
  otm_node(m, "Relu", "b", "X", "Y");
  otm_output(m, "Y", F32, 1, DIMS(4));
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "'Y'", "'a'", "'b'");
  otm_free(m);

  m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(4));
  otm_initializer(m, "W", F32, 1, DIMS(1), NULL);
  otm_initializer(m, "W", F32, 1, DIMS(1), NULL);
  otm_output(m, "X", F32, 1, DIMS(4));
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "initializer 'W'", "twice");
  otm_free(m);

  m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(4));
  otm_input(m, "X", F32, 1, DIMS(4));
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "'X'", "twice");
  otm_free(m);

  m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(4));
  otm_output(m, "Nowhere", F32, 1, DIMS(4));
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "'Nowhere'", "not produced");
  otm_free(m);

  m = otm_new(17);
  otm_input(m, "X", 99, 1, DIMS(4));
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "'X'", "99");
  otm_free(m);

  m = otm_new(17);
  otm_proto(m)->graph = NULL;
  onnx__graph_proto__free_unpacked(otm_graph(m), NULL);
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "no graph");
  otm_free(m);
}

/* A declared input that also has an initializer is an overridable constant. */
static void test_input_with_initializer(void** state) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(2));
  otm_input(m, "B", F32, 1, DIMS(2));
  otm_initializer(m, "B", F32, 1, DIMS(2), (const float[]){7, 8});
  otm_node(m, "Add", "add", "X,B", "Y");
  otm_output(m, "Y", F32, 1, DIMS(2));
  OxGraph* g = load_ok(m);
  assert_int_equal(g->n_inputs, 1);
  assert_string_equal(g->inputs[0]->name, "X");
  const OxValue* b = find(g, "B");
  assert_false(b->is_graph_input);
  assert_non_null(b->constant);
  assert_true(((float*)b->constant->data)[1] == 8.0f);
  ox_graph_free(g);
  otm_free(m);

  m = otm_new(17);
  otm_input(m, "B", I64, 1, DIMS(2));
  otm_initializer(m, "B", F32, 1, DIMS(2), (const float[]){7, 8});
  otm_output(m, "B", F32, 1, DIMS(2));
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "'B'", "float32");
  otm_free(m);
}

static void test_subgraphs(void** state) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(2));
  otm_input_s(m, "N", I64, "");
  otm_input_s(m, "C", ONYX_ELEM_BOOL, "");
  OxTestNode* loop = otm_node(m, "Loop", "loop", "N,,X", "Out");
  otm_begin_graph(m, "body");
  otm_input_s(m, "i", I64, "");
  otm_input_s(m, "cond", ONYX_ELEM_BOOL, "");
  otm_input(m, "acc", F32, 1, DIMS(2));
  OxTestNode* iff = otm_node(m, "If", "inner_if", "C", "r");
  otm_begin_graph(m, "then");
  otm_node(m, "Add", "t_add", "acc,X", "t"); /* acc: from body; X: from main */
  otm_output(m, "t", F32, 1, DIMS(2));
  otm_attr_graph(iff, "then_branch", otm_end_graph(m));
  otm_begin_graph(m, "else");
  otm_output(m, "X", F32, 1, DIMS(2)); /* an output taken straight from outside */
  otm_attr_graph(iff, "else_branch", otm_end_graph(m));
  otm_node(m, "Identity", "keep", "cond", "cond_out");
  otm_output(m, "cond_out", ONYX_ELEM_BOOL, 0, NULL);
  otm_output(m, "r", F32, 1, DIMS(2));
  otm_attr_graph(loop, "body", otm_end_graph(m));
  otm_output(m, "Out", F32, 1, DIMS(2));
  OxGraph* g = load_ok(m);

  const OxAttr* ba = ox_node_attr(g->nodes[0], "body");
  assert_non_null(ba);
  assert_int_equal(ba->type, ONYX_ATTR_GRAPH);
  OxGraph* body = ba->g;
  assert_string_equal(body->name, "body");
  assert_ptr_equal(body->parent, g);
  assert_int_equal(body->n_inputs, 3);
  assert_int_equal(body->n_outputs, 2);
  assert_false(find(body, "acc")->is_outer_scope);
  assert_false(find(body, "r")->is_outer_scope);
  /* C is read by the If node itself; X only inside `then`, lifted here. */
  assert_true(find(body, "C")->is_outer_scope);
  assert_true(find(body, "X")->is_outer_scope);
  assert_false(find(g, "X")->is_outer_scope);

  const OxNode* inner = NULL;
  for (size_t i = 0; i < body->n_nodes; i++)
    if (!strcmp(body->nodes[i]->name, "inner_if")) inner = body->nodes[i];
  assert_non_null(inner);
  OxGraph* then = ox_node_attr(inner, "then_branch")->g;
  OxGraph* els = ox_node_attr(inner, "else_branch")->g;
  assert_ptr_equal(then->parent, body);
  assert_true(find(then, "acc")->is_outer_scope);
  assert_true(find(then, "X")->is_outer_scope);
  assert_false(find(then, "t")->is_outer_scope);
  assert_ptr_equal(find(then, "t")->producer, then->nodes[0]);
  assert_true(find(els, "X")->is_outer_scope);
  assert_int_equal(els->n_outputs, 1);
  ox_graph_free(g);
  otm_free(m);

  /* A subgraph reading a name nobody defines. */
  m = otm_new(17);
  otm_input_s(m, "C", ONYX_ELEM_BOOL, "");
  iff = otm_node(m, "If", "if", "C", "R");
  otm_begin_graph(m, "then");
  otm_node(m, "Identity", "t", "Ghost", "T");
  otm_output(m, "T", F32, 1, DIMS(2));
  otm_attr_graph(iff, "then_branch", otm_end_graph(m));
  otm_output(m, "R", F32, 1, DIMS(2));
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "'if'", "'Ghost'");
  otm_free(m);
}

static void test_graphs_attribute(void** state) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(2));
  OxTestNode* n = otm_node(m, "Custom", "c", "X", "Y");
  otm_node_domain(n, "com.example");
  Onnx__GraphProto* gs[2];
  for (int i = 0; i < 2; i++) {
    otm_begin_graph(m, i ? "g1" : "g0");
    otm_node(m, "Neg", "neg", "X", "o");
    otm_output(m, "o", F32, 1, DIMS(2));
    gs[i] = otm_end_graph(m);
  }
  otm_attr_graphs(n, "branches", 2, gs);
  otm_output(m, "Y", F32, 1, DIMS(2));
  OxGraph* g = load_ok(m);
  const OxAttr* a = ox_node_attr(g->nodes[0], "branches");
  assert_int_equal(a->type, ONYX_ATTR_GRAPHS);
  assert_int_equal(a->count, 2);
  assert_string_equal(a->graphs[1]->name, "g1");
  assert_ptr_equal(a->graphs[0]->parent, g);
  assert_true(find(a->graphs[0], "X")->is_outer_scope);
  ox_graph_free(g);
  otm_free(m);
}

static void test_model_local_function(void** state) {
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "custom", 1);
  otm_add_function(m, "custom", "MyFn");
  otm_input(m, "X", F32, 1, DIMS(2));
  otm_node(m, "Relu", "r", "X", "Y");
  otm_output(m, "Y", F32, 1, DIMS(2));
  OxGraph* g = load_ok(m); /* declared but unused: fine */
  ox_graph_free(g);
  OxTestNode* n = otm_node(m, "MyFn", "call", "Y", "Z");
  otm_node_domain(n, "custom");
  otm_output(m, "Z", F32, 1, DIMS(2));
  /* Model-local functions are inlined at load (tests/unit/controlflow runs
   * real ones); this one's body is empty, so it cannot produce its output. */
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "model-local function 'MyFn'",
                    "does not produce its output #0", "'call'");
  otm_free(m);
}

static void test_sparse_initializer(void** state) {
  OxTestModel* m = otm_new(17);
  Onnx__GraphProto* gp = otm_graph(m);
  Onnx__SparseTensorProto* sp = otm_alloc(sizeof *sp);
  onnx__sparse_tensor_proto__init(sp);
  sp->values = otm_alloc(sizeof *sp->values); /* owned by the model tree from here */
  onnx__tensor_proto__init(sp->values);
  sp->values->name = otm_strdup("sparse_w");
  gp->n_sparse_initializer = 1;
  gp->sparse_initializer = otm_alloc(sizeof *gp->sparse_initializer);
  gp->sparse_initializer[0] = sp;
  EXPECT_LOAD_ERROR(m, ONYX_NOT_IMPLEMENTED, "test.onnx", "sparse initializer 'sparse_w'");
  otm_free(m);
}

/* --- versions and opsets -----------------------------------------------------------------------
 */

static void test_ir_version(void** state) {
  static const struct {
    int64_t ir;
    bool ok;
  } cases[] = {{1, false}, {2, false}, {3, true}, {8, true}, {13, true}, {14, false}, {99, false}};
  for (size_t i = 0; i < OX_ARRAY_LEN(cases); i++) {
    OxTestModel* m = otm_new(7);
    otm_set_ir_version(m, cases[i].ir);
    otm_input(m, "X", F32, 1, DIMS(2));
    otm_output(m, "X", F32, 1, DIMS(2));
    OxGraph* g = NULL;
    OnyxStatus* st = load_lim(m, NULL, &g);
    if (cases[i].ok) {
      if (st) fail_msg("ir_version %lld: %s", (long long)cases[i].ir, st->message);
      assert_int_equal(g->ir_version, cases[i].ir);
      ox_graph_free(g);
    } else {
      char want[32];
      snprintf(want, sizeof want, "ir_version %lld", (long long)cases[i].ir);
      EXPECT_ERROR(st, cases[i].ir < 3 ? ONYX_INVALID_MODEL : ONYX_NOT_IMPLEMENTED, "test.onnx",
                   want, cases[i].ir < 3 ? "3" : "13");
    }
    otm_free(m);
  }
  OxTestModel* m = otm_new(7);
  otm_proto(m)->has_ir_version = 0;
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "no ir_version");
  otm_free(m);
}

static void test_opsets(void** state) {
  OxTestModel* m = otm_new(29);
  EXPECT_LOAD_ERROR(m, ONYX_NOT_IMPLEMENTED, "test.onnx", "opset 29", "28");
  otm_free(m);

  m = otm_new(0);
  otm_add_opset(m, "ai.onnx", 28);
  otm_add_opset(m, "ai.onnx.ml", 5);
  otm_add_opset(m, "com.vendor", 1000); /* other domains: any version */
  otm_input(m, "X", F32, 1, DIMS(2));
  otm_output(m, "X", F32, 1, DIMS(2));
  OxGraph* g = load_ok(m);
  assert_int_equal(g->n_opsets, 3);
  assert_string_equal(g->opsets[0].domain, "");
  assert_int_equal(ox_graph_opset(g, ""), 28);
  assert_int_equal(ox_graph_opset(g, "ai.onnx.ml"), 5);
  assert_int_equal(ox_graph_opset(g, "com.vendor"), 1000);
  ox_graph_free(g);
  otm_free(m);

  m = otm_new(17);
  otm_add_opset(m, "ai.onnx", 18);
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "twice");
  otm_free(m);

  m = otm_new(17);
  otm_add_opset(m, "x", 1)->has_version = 0;
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "'x'", "version");
  otm_free(m);
}

/* --- tensors: every element type, raw and typed
 * ---------------------------------------------------- */

typedef struct TypeCase {
  OnyxElemType type;
  int64_t count;
  const void* bytes; /* expected host bytes, written by hand */
  size_t n_bytes;
} TypeCase;

#define TC(t, n, ...)                                                                              \
  { t, n, (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__}) }

/* Little-endian encodings of hand-picked values at each type's edges. */
static const TypeCase type_cases[] = {
    TC(ONYX_ELEM_FLOAT32, 2, 0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x00, 0xc0), /* 1.5, -2 */
    TC(ONYX_ELEM_UINT8, 3, 0, 200, 255),
    TC(ONYX_ELEM_INT8, 3, 0x80, 0xff, 0x7f),                                   /* -128, -1, 127 */
    TC(ONYX_ELEM_UINT16, 2, 0xff, 0xff, 0xd2, 0x04),                           /* 65535, 1234 */
    TC(ONYX_ELEM_INT16, 2, 0x00, 0x80, 0xff, 0xff),                            /* -32768, -1 */
    TC(ONYX_ELEM_INT32, 2, 0x00, 0x00, 0x00, 0x80, 0x07, 0x00, 0x00, 0x00),    /* INT32_MIN, 7 */
    TC(ONYX_ELEM_INT64, 2, 0, 0, 0, 0, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 1, 0, 0), /* min, 1<<40 */
    TC(ONYX_ELEM_BOOL, 3, 1, 0, 1),
    TC(ONYX_ELEM_FLOAT16, 3, 0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b),   /* 1, -2, 65504 */
    TC(ONYX_ELEM_FLOAT64, 1, 0, 0, 0, 0, 0, 0, 0xf0, 0xbf),         /* -1.0 */
    TC(ONYX_ELEM_UINT32, 2, 0xff, 0xff, 0xff, 0xff, 0x11, 0, 0, 0), /* UINT32_MAX, 17 */
    TC(ONYX_ELEM_UINT64, 1, 0, 0, 0, 0, 0, 0, 0, 0x80),             /* 1 << 63 */
    TC(ONYX_ELEM_COMPLEX64, 1, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40),    /* 1 + 2i */
    TC(ONYX_ELEM_COMPLEX128, 1, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0, 0, 0, 0, 0, 0, 0, 0xc0), /* 1-2i */
    TC(ONYX_ELEM_BFLOAT16, 2, 0x80, 0x3f, 0x00, 0xc0), /* 1, -2 */
    TC(ONYX_ELEM_FLOAT8E4M3FN, 3, 0x00, 0x7e, 0xff),
    TC(ONYX_ELEM_FLOAT8E4M3FNUZ, 2, 0x80, 0x01),
    TC(ONYX_ELEM_FLOAT8E5M2, 2, 0x7b, 0xfc),
    TC(ONYX_ELEM_FLOAT8E5M2FNUZ, 2, 0x80, 0x7f),
    TC(ONYX_ELEM_UINT4, 3, 0xf1, 0x07), /* 1, 15, 7: the first element in the low nibble */
    TC(ONYX_ELEM_INT4, 3, 0x78, 0x0f),  /* -8, 7, -1 */
    TC(ONYX_ELEM_FLOAT4E2M1, 3, 0x21, 0x0f),
    TC(ONYX_ELEM_FLOAT8E8M0, 2, 0x7f, 0xff),
    TC(ONYX_ELEM_UINT2, 5, 0x39, 0x02), /* 1, 2, 3, 0, 2 */
    TC(ONYX_ELEM_INT2, 5, 0xe4, 0x01),  /* 0, 1, -2, -1, 1 */
};

static void check_tensor_bytes(const OxTensor* t, const TypeCase* c) {
  assert_int_equal(t->type, c->type);
  assert_int_equal(t->count, (size_t)c->count);
  assert_int_equal(t->bytes, c->n_bytes);
  assert_memory_equal(t->data, c->bytes, c->n_bytes);
}

static void test_tensor_types_raw(void** state) {
  for (size_t i = 0; i < OX_ARRAY_LEN(type_cases); i++) {
    const TypeCase* c = &type_cases[i];
    OxTestModel* m = otm_new(17);
    otm_initializer(m, "T", c->type, 1, &c->count, c->bytes);
    otm_output(m, "T", c->type, 1, &c->count);
    OxGraph* g = load_ok(m);
    check_tensor_bytes(find(g, "T")->constant, c);
    ox_graph_free(g);
    otm_free(m);
  }
}

static void test_tensor_types_typed(void** state) {
  for (size_t i = 0; i < OX_ARRAY_LEN(type_cases); i++) {
    const TypeCase* c = &type_cases[i];
    OxTestModel* m = otm_new(17);
    Onnx__TensorProto* tp = otm_initializer(m, "T", c->type, 1, &c->count, c->bytes);
    otm_tensor_typed(tp);
    assert_false(tp->has_raw_data);
    otm_output(m, "T", c->type, 1, &c->count);
    OxGraph* g = load_ok(m);
    check_tensor_bytes(find(g, "T")->constant, c);
    ox_graph_free(g);
    otm_free(m);
  }
}

/* Typed fields written by hand, independent of otm_tensor_typed. */
static void test_tensor_typed_by_hand(void** state) {
  OxTestModel* m = otm_new(17);
  Onnx__TensorProto* b = otm_initializer(m, "B", ONYX_ELEM_BOOL, 1, DIMS(3), NULL);
  b->has_raw_data = 0;
  b->n_int32_data = 3;
  b->int32_data = otm_alloc(3 * sizeof(int32_t));
  memcpy(b->int32_data, (const int32_t[]){5, 0, 1}, 3 * sizeof(int32_t)); /* nonzero is true */
  Onnx__TensorProto* h = otm_initializer(m, "H", ONYX_ELEM_FLOAT16, 1, DIMS(2), NULL);
  h->has_raw_data = 0;
  h->n_int32_data = 2;
  h->int32_data = otm_alloc(2 * sizeof(int32_t));
  memcpy(h->int32_data, (const int32_t[]){0x3c00, 0xc000}, 2 * sizeof(int32_t));
  Onnx__TensorProto* u = otm_initializer(m, "U", ONYX_ELEM_UINT32, 1, DIMS(1), NULL);
  u->has_raw_data = 0;
  u->n_uint64_data = 1;
  u->uint64_data = otm_alloc(sizeof(uint64_t));
  u->uint64_data[0] = 4000000000u;
  Onnx__TensorProto* e = otm_initializer(m, "E", F32, 2, DIMS(0, 5), NULL); /* empty */
  e->has_raw_data = 0;
  otm_input(m, "X", F32, 1, DIMS(1));
  otm_output(m, "X", F32, 1, DIMS(1));
  OxGraph* g = load_ok(m);
  assert_memory_equal(find(g, "B")->constant->data, ((const uint8_t[]){1, 0, 1}), 3);
  const uint16_t* hv = find(g, "H")->constant->data;
  assert_int_equal(hv[0], 0x3c00);
  assert_int_equal(hv[1], 0xc000);
  assert_int_equal(*(const uint32_t*)find(g, "U")->constant->data, 4000000000u);
  assert_int_equal(find(g, "E")->constant->count, 0);
  assert_int_equal(find(g, "E")->rank, 2);
  ox_graph_free(g);
  otm_free(m);
}

static void test_string_tensor(void** state) {
  OxTestModel* m = otm_new(17);
  const char* words[] = {"a", "", "h\xc3\xa9llo"};
  otm_initializer(m, "S", ONYX_ELEM_STRING, 1, DIMS(3), words);
  otm_output(m, "S", ONYX_ELEM_STRING, 1, DIMS(3));
  OxGraph* g = load_ok(m);
  const OxTensor* t = find(g, "S")->constant;
  assert_int_equal(t->type, ONYX_ELEM_STRING);
  char** s = t->data;
  assert_string_equal(s[0], "a");
  assert_string_equal(s[1], "");
  assert_string_equal(s[2], "h\xc3\xa9llo");
  ox_graph_free(g);
  otm_free(m);

  m = otm_new(17);
  const char* four[] = {"a", "b", "c", "d"};
  otm_initializer(m, "S2", ONYX_ELEM_STRING, 1, DIMS(4), four)->n_string_data = 3;
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "initializer 'S2'", "3", "4");
  /* otm_free relies on n_string_data: put it back so all four strings go. */
  otm_graph(m)->initializer[0]->n_string_data = 4;
  otm_free(m);
}

static void test_tensor_errors(void** state) {
  /* raw_data shorter than the dims need. */
  OxTestModel* m = otm_new(17);
  otm_initializer(m, "Short", F32, 1, DIMS(3), NULL)->raw_data.len = 8;
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "initializer 'Short'", "8", "12");
  otm_free(m);

  /* A typed field with the wrong count. */
  m = otm_new(17);
  Onnx__TensorProto* tp = otm_initializer(m, "Few", I64, 1, DIMS(3), NULL);
  otm_tensor_typed(tp);
  tp->n_int64_data = 2;
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "initializer 'Few'", "int64_data", "2",
                    "3");
  otm_free(m);

  /* Values in the field of another type. */
  m = otm_new(17);
  tp = otm_initializer(m, "Wrong", F32, 1, DIMS(1), NULL);
  tp->has_raw_data = 0;
  tp->n_int64_data = 1;
  tp->int64_data = otm_alloc(sizeof(int64_t));
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "initializer 'Wrong'", "float_data");
  otm_free(m);

  /* No data at all for a non-empty tensor. */
  m = otm_new(17);
  otm_initializer(m, "Empty", F32, 1, DIMS(2), NULL)->has_raw_data = 0;
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "initializer 'Empty'", "no data");
  otm_free(m);

  m = otm_new(17);
  otm_initializer(m, "Neg", F32, 2, DIMS(2, 1), NULL)->dims[1] = -1;
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "initializer 'Neg'", "negative");
  otm_free(m);

  m = otm_new(17);
  tp = otm_initializer(m, "Huge", F32, 3, DIMS(1, 1, 1), NULL);
  tp->dims[0] = tp->dims[1] = tp->dims[2] = INT64_C(1) << 40; /* 2^120 elements */
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "initializer 'Huge'", "overflow");
  otm_free(m);

  m = otm_new(17);
  tp = otm_initializer(m, "Bytes", I64, 1, DIMS(1), NULL);
  tp->dims[0] = INT64_C(1) << 61; /* count fits, bytes overflow */
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "initializer 'Bytes'", "overflow");
  otm_free(m);

  m = otm_new(17);
  otm_initializer(m, "NoType", F32, 1, DIMS(1), NULL)->has_data_type = 0;
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "initializer 'NoType'", "data_type");
  otm_free(m);

  m = otm_new(17);
  otm_initializer(m, "BadType", F32, 1, DIMS(1), NULL)->data_type = 77;
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "initializer 'BadType'", "77");
  otm_free(m);

  m = otm_new(17);
  otm_initializer(m, "", F32, 1, DIMS(1), NULL);
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "no name");
  otm_free(m);

  /* An error inside a TENSOR attribute names the node and attribute. */
  m = otm_new(17);
  OxTestNode* n = otm_node(m, "Constant", "k", "", "Y");
  Onnx__TensorProto* bad = otm_tensor(m, "v", F32, 1, DIMS(4), NULL);
  bad->raw_data.len = 2;
  otm_attr_tensor(n, "value", bad);
  otm_output(m, "Y", F32, 1, DIMS(4));
  EXPECT_LOAD_ERROR(m, ONYX_INVALID_MODEL, "test.onnx", "node 'k'", "attribute 'value'", "2");
  otm_free(m);
}

static void test_tensor_limit(void** state) {
  OxTestModel* m = otm_new(17);
  otm_initializer(m, "Big", F32, 1, DIMS(5), NULL); /* 20 bytes */
  otm_output(m, "Big", F32, 1, DIMS(5));
  OxGraph* g = NULL;
  EXPECT_ERROR(load_lim(m, &(OxModelLimits){.max_tensor_bytes = 16}, &g), ONYX_LIMIT_EXCEEDED,
               "test.onnx", "initializer 'Big'", "20", "16");
  assert_null(g);
  assert_null(load_lim(m, &(OxModelLimits){.max_tensor_bytes = 20}, &g));
  ox_graph_free(g);
  otm_free(m);

  /* 4 TiB by its dims with no data: refused by size before any allocation,
   * not reported as a data mismatch or an out-of-memory. */
  m = otm_new(17);
  otm_initializer(m, "Tera", F32, 1, DIMS(1), NULL)->dims[0] = INT64_C(1) << 40;
  EXPECT_LOAD_ERROR(m, ONYX_LIMIT_EXCEEDED, "test.onnx", "initializer 'Tera'", "limit");
  otm_free(m);
}

/* --- other limits
 * ---------------------------------------------------------------------------------- */

static void test_model_limits(void** state) {
  OxTestModel* m = small_model();
  OxGraph* g = NULL;
  EXPECT_ERROR(load_lim(m, &(OxModelLimits){.max_nodes = 4}, &g), ONYX_LIMIT_EXCEEDED, "test.onnx",
               "4 nodes");
  assert_null(load_lim(m, &(OxModelLimits){.max_nodes = 5}, &g)); /* 3 + 1 + 1 */
  ox_graph_free(g);
  EXPECT_ERROR(load_lim(m, &(OxModelLimits){.max_model_bytes = 10}, &g), ONYX_LIMIT_EXCEEDED,
               "test.onnx", "10 bytes");
  otm_free(m);

  /* Three nested levels of subgraphs against a limit of two. */
  m = otm_new(17);
  otm_input_s(m, "C", ONYX_ELEM_BOOL, "");
  OxTestNode* outer = otm_node(m, "If", "l0", "C", "R");
  otm_begin_graph(m, "g1");
  OxTestNode* mid = otm_node(m, "If", "l1", "C", "R1");
  otm_begin_graph(m, "g2");
  OxTestNode* in = otm_node(m, "If", "l2", "C", "R2");
  otm_begin_graph(m, "g3");
  otm_node(m, "Not", "leaf", "C", "R3");
  otm_output(m, "R3", ONYX_ELEM_BOOL, 0, NULL);
  otm_attr_graph(in, "then_branch", otm_end_graph(m));
  otm_output(m, "R2", ONYX_ELEM_BOOL, 0, NULL);
  otm_attr_graph(mid, "then_branch", otm_end_graph(m));
  otm_output(m, "R1", ONYX_ELEM_BOOL, 0, NULL);
  otm_attr_graph(outer, "then_branch", otm_end_graph(m));
  otm_output(m, "R", ONYX_ELEM_BOOL, 0, NULL);
  EXPECT_ERROR(load_lim(m, &(OxModelLimits){.max_graph_depth = 2}, &g), ONYX_LIMIT_EXCEEDED,
               "test.onnx", "nested", "'l2'");
  assert_null(load_lim(m, &(OxModelLimits){.max_graph_depth = 3}, &g));
  ox_graph_free(g);
  otm_free(m);
}

/* Writes a varint; returns its length. */
static size_t put_varint(uint8_t* p, uint64_t v) {
  size_t n = 0;
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    p[n++] = b | (v ? 0x80 : 0);
  } while (v);
  return n;
}

static size_t varint_len(uint64_t v) {
  uint8_t tmp[10];
  return put_varint(tmp, v);
}

/* A hostile file nesting graph -> node -> attribute -> graph ... 100,000
 * levels deep: refused before protobuf-c's recursive unpacker runs. */
static void test_deep_nesting(void** state) {
  enum { LEVELS = 100000 };
  /* Tags, outermost first: ModelProto.graph(7), then GraphProto.node(1),
   * NodeProto.attribute(5), AttributeProto.g(6) repeating. */
  static const uint8_t cycle[3] = {(1 << 3) | 2, (5 << 3) | 2, (6 << 3) | 2};
  uint8_t* tags = malloc(LEVELS);
  size_t* size = malloc(LEVELS * sizeof *size); /* size of the payload at each level */
  tags[0] = (7 << 3) | 2;
  for (size_t i = 1; i < LEVELS; i++)
    tags[i] = cycle[(i - 1) % 3];
  size_t inner = 0;
  for (size_t i = LEVELS; i-- > 0;) {
    size[i] = inner;
    inner = 1 + varint_len(inner) + inner;
  }
  uint8_t* buf = malloc(inner + 16);
  size_t n = 0;
  buf[n++] = 0x08; /* ir_version = 8 */
  buf[n++] = 8;
  for (size_t i = 0; i < LEVELS; i++) {
    buf[n++] = tags[i];
    n += put_varint(buf + n, size[i]);
  }
  OxGraph* g = NULL;
  EXPECT_ERROR(ox_model_load_bytes(buf, n, NULL, "deep.onnx", NULL, &g), ONYX_LIMIT_EXCEEDED,
               "deep.onnx", "nested");
  assert_null(g);
  free(buf);
  free(size);
  free(tags);
}

/* --- malformed bytes
 * --------------------------------------------------------------------------------- */

/* Every prefix of a valid model is an error or a graph; never a crash. */
static void test_truncated_bytes(void** state) {
  OxTestModel* m = small_model();
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  size_t errors = 0;
  for (size_t cut = 0; cut < len; cut++) {
    uint8_t* copy = malloc(cut ? cut : 1); /* exact size: ASan sees any over-read */
    memcpy(copy, bytes, cut);
    OxGraph* g = NULL;
    OnyxStatus* st = ox_model_load_bytes(copy, cut, NULL, "cut.onnx", NULL, &g);
    if (st) {
      assert_null(g);
      assert_non_null(strstr(st->message, "cut.onnx"));
      errors++;
    }
    ox_status_free(st);
    ox_graph_free(g);
    free(copy);
  }
  assert_true(errors > len / 2);
  OxGraph* g = NULL;
  assert_null(ox_model_load_bytes(bytes, len, NULL, "full.onnx", NULL, &g));
  assert_int_equal(g->n_nodes, 3);
  ox_graph_free(g);
  free(bytes);
  otm_free(m);
}

/* Every single-bit flip of a valid model is an error or a graph. */
static void test_bit_flips(void** state) {
  OxTestModel* m = small_model();
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  uint8_t* copy = malloc(len);
  size_t errors = 0, loaded = 0;
  for (size_t i = 0; i < len; i++) {
    for (int bit = 0; bit < 8; bit++) {
      memcpy(copy, bytes, len);
      copy[i] ^= (uint8_t)(1u << bit);
      OxGraph* g = NULL;
      OnyxStatus* st = ox_model_load_bytes(copy, len, NULL, "flip.onnx", NULL, &g);
      if (st) errors++;
      if (g) loaded++;
      assert_true(!st != !g);
      ox_status_free(st);
      ox_graph_free(g);
    }
  }
  assert_true(errors > 0);
  assert_true(loaded > 0);
  free(copy);
  free(bytes);
  otm_free(m);
}

static void test_garbage(void** state) {
  static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
  OxGraph* g = NULL;
  EXPECT_ERROR(ox_model_load_bytes(junk, sizeof junk, NULL, "junk.onnx", NULL, &g),
               ONYX_INVALID_MODEL, "junk.onnx", "not a valid ONNX model");
  EXPECT_ERROR(ox_model_load_bytes(junk, 0, NULL, NULL, NULL, &g), ONYX_INVALID_MODEL, "<memory>",
               "ir_version");
  /* Random bytes with a fixed seed. */
  uint8_t buf[512];
  unsigned seed = 12345;
  for (int round = 0; round < 2000; round++) {
    size_t n = (size_t)(rand_r(&seed) % (int)sizeof buf);
    for (size_t i = 0; i < n; i++)
      buf[i] = (uint8_t)rand_r(&seed);
    OnyxStatus* st = ox_model_load_bytes(buf, n, NULL, "rand.onnx", NULL, &g);
    ox_status_free(st);
    ox_graph_free(g);
    g = NULL;
  }
}

/* --- external data
 * -------------------------------------------------------------------------------------- */

typedef struct ExtDir {
  char* dir;
  char path[512]; /* model path */
} ExtDir;

static void ext_setup(ExtDir* d) {
  d->dir = otm_temp_dir();
  assert_non_null(d->dir);
  snprintf(d->path, sizeof d->path, "%s/model.onnx", d->dir);
}

static void ext_file(const ExtDir* d, const char* name, const void* data, size_t len) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s", d->dir, name);
  assert_true(otm_write_file(p, data, len));
}

/* A model whose initializer W (float32[n]) lives in `location`. */
static OxTestModel* ext_model(const char* location, int64_t n, int64_t offset, int64_t length) {
  OxTestModel* m = otm_new(17);
  Onnx__TensorProto* tp = otm_initializer(m, "W", F32, 1, &n, NULL);
  otm_tensor_external(tp, location, offset, length);
  otm_output(m, "W", F32, 1, &n);
  return m;
}

static OnyxStatus* ext_load(const ExtDir* d, OxTestModel* m, OxGraph** g) {
  assert_true(otm_write(m, d->path));
  otm_free(m);
  *g = NULL;
  return ox_model_load_file(d->path, NULL, g);
}

static void ext_expect_error(const ExtDir* d, OxTestModel* m, OnyxStatusCode code,
                             const char* needle) {
  OxGraph* g;
  OnyxStatus* st = ext_load(d, m, &g);
  assert_null(g);
  EXPECT_ERROR(st, code, d->path, "initializer 'W'", needle);
}

static void test_external_data(void** state) {
  ExtDir d;
  ext_setup(&d);
  /* weights.bin: 4099 bytes of filler, then 4 floats, then 4 more at an
   * aligned offset 8192. */
  size_t size = 8192 + 16;
  uint8_t* file = calloc(1, size);
  const float a[4] = {1, -2, 3.5f, 1e30f}, b[4] = {9, 8, 7, 6};
  memcpy(file + 4099, a, sizeof a);
  memcpy(file + 8192, b, sizeof b);
  ext_file(&d, "weights.bin", file, size);
  char sub[600];
  snprintf(sub, sizeof sub, "%s/sub", d.dir);
  assert_int_equal(mkdir(sub, 0700), 0);
  ext_file(&d, "sub/w.bin", b, sizeof b);

  /* By default the data is read into memory the tensor owns: nothing is
   * mapped, so a file changed later cannot reach the session. */
  OxGraph* g;
  assert_null(ext_load(&d, ext_model("weights.bin", 4, 8192, 16), &g));
  const OxTensor* t = find(g, "W")->constant;
  assert_non_null(t->buffer);
  assert_int_equal(g->n_mappings, 0);
  assert_memory_equal(t->data, b, 16);
  ox_graph_free(g);

  /* ONYX_MMAP_FILES=1, aligned: the tensor borrows the mapping. */
  setenv("ONYX_MMAP_FILES", "1", 1);
  assert_null(ext_load(&d, ext_model("weights.bin", 4, 8192, 16), &g));
  t = find(g, "W")->constant;
  assert_null(t->buffer);
  assert_int_equal(g->n_mappings, 1);
  assert_true((uint8_t*)t->data >= (uint8_t*)g->mappings[0].addr &&
              (uint8_t*)t->data + 16 <= (uint8_t*)g->mappings[0].addr + g->mappings[0].len);
  assert_memory_equal(t->data, b, 16);
  ox_graph_free(g);

  /* Misaligned for float: copied, no mapping kept. */
  assert_null(ext_load(&d, ext_model("weights.bin", 4, 4099, 16), &g));
  t = find(g, "W")->constant;
  assert_non_null(t->buffer);
  assert_int_equal(g->n_mappings, 0);
  assert_memory_equal(t->data, a, 16);
  ox_graph_free(g);
  unsetenv("ONYX_MMAP_FILES");

  /* No offset, no length: the whole file; a sub folder is fine. */
  assert_null(ext_load(&d, ext_model("sub/w.bin", 4, -1, -1), &g));
  assert_memory_equal(find(g, "W")->constant->data, b, 16);
  ox_graph_free(g);

  /* The same from bytes with a base folder. */
  uint8_t* bytes;
  size_t len;
  OxTestModel* m = ext_model("sub/w.bin", 4, 0, 16);
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  assert_null(ox_model_load_bytes(bytes, len, d.dir, "mem", NULL, &g));
  assert_memory_equal(find(g, "W")->constant->data, b, 16);
  ox_graph_free(g);
  EXPECT_ERROR(ox_model_load_bytes(bytes, len, NULL, "mem", NULL, &g), ONYX_INVALID_MODEL, "mem",
               "initializer 'W'", "folder");
  free(bytes);

  /* Refused locations. */
  ext_expect_error(&d, ext_model("/etc/passwd", 4, 0, 16), ONYX_INVALID_MODEL, "absolute");
  ext_expect_error(&d, ext_model("../weights.bin", 4, 0, 16), ONYX_INVALID_MODEL, "..");
  ext_expect_error(&d, ext_model("sub/../../x.bin", 4, 0, 16), ONYX_INVALID_MODEL, "..");
  char* outside = otm_temp_dir();
  char target[600], link[600];
  snprintf(target, sizeof target, "%s/secret.bin", outside);
  assert_true(otm_write_file(target, b, sizeof b));
  snprintf(link, sizeof link, "%s/link.bin", d.dir);
  assert_int_equal(symlink(target, link), 0);
  ext_expect_error(&d, ext_model("link.bin", 4, 0, 16), ONYX_INVALID_MODEL, "outside");
  snprintf(link, sizeof link, "%s/linkdir", d.dir);
  assert_int_equal(symlink(outside, link), 0);
  ext_expect_error(&d, ext_model("linkdir/secret.bin", 4, 0, 16), ONYX_INVALID_MODEL, "outside");
  otm_remove_dir(outside);
  free(outside);

  /* Regions that do not fit. */
  ext_expect_error(&d, ext_model("weights.bin", 4, (int64_t)size + 1, -1), ONYX_INVALID_MODEL,
                   "beyond the end");
  ext_expect_error(&d, ext_model("weights.bin", 4, (int64_t)size - 8, 16), ONYX_INVALID_MODEL,
                   "beyond the end");
  ext_expect_error(&d, ext_model("weights.bin", 4, 0, 12), ONYX_INVALID_MODEL, "16");
  ext_expect_error(&d, ext_model("sub/w.bin", 5, -1, -1), ONYX_INVALID_MODEL, "20");
  ext_expect_error(&d, ext_model("missing.bin", 4, 0, 16), ONYX_NOT_FOUND, "missing.bin");
  ext_expect_error(&d, ext_model("sub", 4, 0, 16), ONYX_INVALID_MODEL, "regular file");

  m = ext_model("weights.bin", 4, 0, 16);
  free(otm_graph(m)->initializer[0]->external_data[1]->value);
  otm_graph(m)->initializer[0]->external_data[1]->value = otm_strdup("12x");
  ext_expect_error(&d, m, ONYX_INVALID_MODEL, "12x");

  free(file);
  otm_remove_dir(d.dir);
  free(d.dir);
}

/* --- single TensorProto files
 * ------------------------------------------------------------------------------ */

static void test_tensor_proto_bytes(void** state) {
  for (size_t i = 0; i < OX_ARRAY_LEN(type_cases); i++) {
    const TypeCase* c = &type_cases[i];
    OxTensor* t;
    assert_null(ox_tensor_new(c->type, &c->count, 1, &t));
    memcpy(t->data, c->bytes, c->n_bytes);
    void* bytes;
    size_t len;
    assert_null(ox_tensor_to_proto_bytes(t, "tensor_x", &bytes, &len));
    ox_tensor_free(t);
    /* The bytes are a TensorProto with raw_data. */
    Onnx__TensorProto* tp = onnx__tensor_proto__unpack(NULL, len, bytes);
    assert_non_null(tp);
    assert_true(tp->has_raw_data);
    assert_int_equal(tp->raw_data.len, c->n_bytes);
    assert_int_equal(tp->data_type, c->type);
    onnx__tensor_proto__free_unpacked(tp, NULL);
    char* name;
    assert_null(ox_tensor_from_proto_bytes(bytes, len, &t, &name));
    assert_string_equal(name, "tensor_x");
    check_tensor_bytes(t, c);
    free(name);
    ox_tensor_free(t);
    free(bytes);
  }
  /* Strings go through string_data. */
  OxTensor* t;
  assert_null(ox_tensor_new(ONYX_ELEM_STRING, DIMS(2), 1, &t));
  char** s = t->data;
  free(s[1]);
  s[1] = strdup("zwei");
  void* bytes;
  size_t len;
  assert_null(ox_tensor_to_proto_bytes(t, NULL, &bytes, &len));
  ox_tensor_free(t);
  assert_null(ox_tensor_from_proto_bytes(bytes, len, &t, NULL));
  assert_int_equal(t->count, 2);
  assert_string_equal(((char**)t->data)[0], "");
  assert_string_equal(((char**)t->data)[1], "zwei");
  ox_tensor_free(t);
  free(bytes);

  static const uint8_t junk[] = {0x0a, 0xff, 0xff};
  EXPECT_ERROR(ox_tensor_from_proto_bytes(junk, sizeof junk, &t, NULL), ONYX_INVALID_MODEL,
               "TensorProto");
  /* External data in a lone TensorProto has no folder to come from. */
  OxTestModel* m = otm_new(17);
  Onnx__TensorProto* tp = otm_tensor(m, "ext", F32, 1, DIMS(1), NULL);
  otm_tensor_external(tp, "w.bin", 0, 4);
  len = onnx__tensor_proto__get_packed_size(tp);
  bytes = malloc(len);
  onnx__tensor_proto__pack(tp, bytes);
  EXPECT_ERROR(ox_tensor_from_proto_bytes(bytes, len, &t, NULL), ONYX_INVALID_MODEL, "'ext'",
               "folder");
  free(bytes);
  otm_free(m);
}

/* --- ONNX's own files
 * ------------------------------------------------------------------------------------ */

static const char* onnx_tests_dir(char* buf, size_t len) {
  const char* env = getenv("ONYX_ONNX_TESTS");
  const char* src = getenv("ONYX_SOURCE_DIR");
  if (env && *env) {
    snprintf(buf, len, "%s", env);
  } else {
    snprintf(buf, len, "%s/../shared/onnx-tests", src && *src ? src : ".");
  }
  struct stat sb;
  return stat(buf, &sb) == 0 && S_ISDIR(sb.st_mode) ? buf : NULL;
}

/* A test_data_set tensor written by ONNX; expected values read with numpy. */
static void test_onnx_files(void** state) {
  char root[512], path[700];
  if (!onnx_tests_dir(root, sizeof root)) {
    print_message("skipped: ONNX test data not found (set ONYX_ONNX_TESTS)\n");
    skip();
  }
  snprintf(path, sizeof path, "%s/node/test_conv_with_strides_padding/model.onnx", root);
  OxGraph* g = NULL;
  OnyxStatus* st = ox_model_load_file(path, NULL, &g);
  if (st) fail_msg("%s", st->message);
  assert_int_equal(g->n_nodes, 1);
  const OxNode* conv = g->nodes[0];
  assert_string_equal(conv->op_type, "Conv");
  size_t n;
  const int64_t* strides = ox_node_attr_ints(conv, "strides", &n);
  assert_int_equal(n, 2);
  assert_int_equal(strides[0], 2);
  const int64_t* pads = ox_node_attr_ints(conv, "pads", &n);
  assert_int_equal(n, 4);
  assert_int_equal(pads[0], 1);
  const OxValue* x = g->inputs[0];
  assert_int_equal(x->type, F32);
  assert_dims(x, 4, DIMS(1, 1, 7, 5));
  ox_graph_free(g);

  /* numpy: onnx.numpy_helper.to_array(...) of output_0.pb, shape (1,1,4,3),
   * first values 12, 27, 24, 63, last 124. */
  snprintf(path, sizeof path, "%s/node/test_conv_with_strides_padding/test_data_set_0/output_0.pb",
           root);
  void* bytes;
  size_t len;
  assert_null(ox_read_file(path, 0, &bytes, &len));
  OxTensor* t;
  char* name;
  assert_null(ox_tensor_from_proto_bytes(bytes, len, &t, &name));
  assert_int_equal(t->rank, 4);
  assert_int_equal(t->dims[2], 4);
  assert_int_equal(t->dims[3], 3);
  const float* v = t->data;
  assert_true(v[0] == 12.0f && v[1] == 27.0f && v[2] == 24.0f && v[3] == 63.0f && v[11] == 124.0f);
  free(name);
  ox_tensor_free(t);
  free(bytes);
}

/* Every model of the ONNX suites loads or fails cleanly; nearly all load. */
static void test_onnx_suite_models(void** state) {
  char root[512];
  if (!onnx_tests_dir(root, sizeof root)) skip();
  static const char* const suites[] = {"node", "simple", "pytorch-converted", "pytorch-operator"};
  size_t total = 0, ok = 0;
  for (size_t s = 0; s < OX_ARRAY_LEN(suites); s++) {
    char dir[700];
    snprintf(dir, sizeof dir, "%s/%s", root, suites[s]);
    DIR* dp = opendir(dir);
    if (!dp) continue;
    struct dirent* e;
    while ((e = readdir(dp))) {
      if (e->d_name[0] == '.') continue;
      char path[1200];
      snprintf(path, sizeof path, "%s/%s/model.onnx", dir, e->d_name);
      OxGraph* g = NULL;
      OnyxStatus* st = ox_model_load_file(path, NULL, &g);
      total++;
      if (!st) ok++;
      if (st && !strstr(st->message, "model-local function"))
        print_message("not loaded: %s\n", st->message);
      ox_status_free(st);
      ox_graph_free(g);
    }
    closedir(dp);
  }
  print_message("%zu of %zu ONNX suite models loaded\n", ok, total);
  assert_true(total > 1000);
  assert_true(ok * 100 >= total * 97);
}

/* --- saving
 * -----------------------------------------------------------------------------------------------
 */

static void test_save_round_trip(void** state) {
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "com.example", 2);
  otm_set_ir_version(m, 9);
  otm_input_s(m, "X", F32, "N,3");
  otm_initializer(m, "W", F32, 2, DIMS(3, 2), (const float[]){1, 2, 3, 4, 5, 6});
  const char* words[] = {"x", "yz"};
  otm_initializer(m, "S", ONYX_ELEM_STRING, 1, DIMS(2), words);
  otm_node(m, "MatMul", "mm", "X,W", "Z");
  OxTestNode* n = otm_node(m, "Custom", "c", "Z,,S", "Y,");
  otm_node_domain(n, "com.example");
  otm_attr_int(n, "i", 3);
  otm_attr_float(n, "f", 0.5f);
  otm_attr_string(n, "s", "str");
  otm_attr_ints(n, "is", 2, DIMS(1, 2));
  otm_attr_floats(n, "fs", 1, (const float[]){4});
  otm_attr_strings(n, "ss", 1, (const char* const[]){"u"});
  otm_attr_tensor(n, "t", otm_tensor(m, "", I64, 0, NULL, (const int64_t[]){42}));
  otm_value_info(m, "Z", F32, 2, DIMS(-1, 2));
  otm_output(m, "Y", F32, -1, NULL);
  OxGraph* g = load_ok(m);
  otm_free(m);

  char* dir = otm_temp_dir();
  char path[600];
  snprintf(path, sizeof path, "%s/saved.onnx", dir);
  assert_null(ox_model_save(g, path));
  ox_graph_free(g);
  g = NULL;
  OnyxStatus* st = ox_model_load_file(path, NULL, &g);
  if (st) fail_msg("%s", st->message);

  assert_int_equal(g->ir_version, 9);
  assert_int_equal(ox_graph_opset(g, ""), 17);
  assert_int_equal(ox_graph_opset(g, "com.example"), 2);
  assert_int_equal(g->n_inputs, 1);
  const OxValue* x = g->inputs[0];
  assert_dims(x, 2, DIMS(ONYX_DIM_UNKNOWN, 3));
  assert_string_equal(x->dim_params[0], "N");
  assert_memory_equal(find(g, "W")->constant->data, ((const float[]){1, 2, 3, 4, 5, 6}), 24);
  assert_string_equal(((char**)find(g, "S")->constant->data)[1], "yz");
  const OxValue* z = find(g, "Z");
  assert_dims(z, 2, DIMS(ONYX_DIM_UNKNOWN, 2));
  assert_string_equal(z->dim_params[0], "Z_0");
  assert_int_equal(g->n_nodes, 2);
  const OxNode* c = g->nodes[1];
  assert_string_equal(c->domain, "com.example");
  assert_int_equal(c->n_inputs, 3);
  assert_null(c->inputs[1]);
  assert_int_equal(c->n_outputs, 2);
  assert_null(c->outputs[1]);
  assert_int_equal(c->n_attrs, 7);
  assert_int_equal(ox_node_attr_int(c, "i", 0), 3);
  assert_true(ox_node_attr_float(c, "f", 0) == 0.5f);
  assert_string_equal(ox_node_attr_string(c, "s", ""), "str");
  size_t k;
  assert_int_equal(ox_node_attr_ints(c, "is", &k)[1], 2);
  assert_true(ox_node_attr(c, "fs")->floats[0] == 4.0f);
  assert_string_equal(ox_node_attr(c, "ss")->strings[0], "u");
  assert_int_equal(*(int64_t*)ox_node_attr(c, "t")->t->data, 42);
  assert_int_equal(g->n_outputs, 1);
  assert_int_equal(g->outputs[0]->rank, -1);

  /* Subgraphs round-trip: the If keeps its one formal input (its
   * outer-scope read Z is not written as an input) and both branches. */
  ox_graph_free(g);
  m = small_model();
  g = load_ok(m);
  otm_free(m);
  assert_null(ox_model_save(g, path));
  ox_graph_free(g);
  g = NULL;
  st = ox_model_load_file(path, NULL, &g);
  if (st) fail_msg("%s", st->message);
  const OxNode* iff = g->nodes[2];
  assert_string_equal(iff->op_type, "If");
  assert_int_equal(iff->n_inputs - iff->n_implicit, 1);
  const OxAttr* then_b = ox_node_attr(iff, "then_branch");
  const OxAttr* else_b = ox_node_attr(iff, "else_branch");
  assert_true(then_b && then_b->g && else_b && else_b->g);
  assert_int_equal(then_b->g->n_nodes, 1);
  assert_string_equal(then_b->g->nodes[0]->op_type, "Identity");
  assert_string_equal(then_b->g->nodes[0]->inputs[0]->name, "Z");
  assert_string_equal(else_b->g->nodes[0]->op_type, "Neg");
  assert_string_equal(else_b->g->outputs[0]->name, "E");
  ox_graph_free(g);
  EXPECT_ERROR(ox_model_save(&(OxGraph){.name = (char*)"g"}, "/nonexistent/dir/x.onnx"), ONYX_FAIL,
               "/nonexistent/dir/x.onnx");
  otm_remove_dir(dir);
  free(dir);
}

/* --- files
 * ---------------------------------------------------------------------------------------------- */

static void test_read_file(void** state) {
  char* dir = otm_temp_dir();
  char path[600];
  snprintf(path, sizeof path, "%s/data.bin", dir);
  assert_true(otm_write_file(path, "0123456789", 10));
  void* data;
  size_t len;
  assert_null(ox_read_file(path, 10, &data, &len));
  assert_int_equal(len, 10);
  assert_memory_equal(data, "0123456789", 10);
  free(data);
  EXPECT_ERROR(ox_read_file(path, 9, &data, &len), ONYX_LIMIT_EXCEEDED, path, "9");
  assert_null(data);
  EXPECT_ERROR(ox_read_file(dir, 0, &data, &len), ONYX_INVALID_ARGUMENT, dir, "directory");
  snprintf(path, sizeof path, "%s/none.onnx", dir);
  EXPECT_ERROR(ox_read_file(path, 0, &data, &len), ONYX_NOT_FOUND, path);
  OxGraph* g = NULL;
  EXPECT_ERROR(ox_model_load_file(path, NULL, &g), ONYX_NOT_FOUND, path);

  /* An empty file and a truncated model file name the file. */
  snprintf(path, sizeof path, "%s/empty.onnx", dir);
  assert_true(otm_write_file(path, "", 0));
  assert_null(ox_read_file(path, 0, &data, &len));
  assert_int_equal(len, 0);
  free(data);
  EXPECT_ERROR(ox_model_load_file(path, NULL, &g), ONYX_INVALID_MODEL, path, "ir_version");
  OxTestModel* m = small_model();
  uint8_t* bytes;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  snprintf(path, sizeof path, "%s/cut.onnx", dir);
  assert_true(otm_write_file(path, bytes, len - 1));
  free(bytes);
  EXPECT_ERROR(ox_model_load_file(path, NULL, &g), ONYX_INVALID_MODEL, path, "not a valid");
  EXPECT_ERROR(ox_model_load_file(path, &(OxModelLimits){.max_model_bytes = 8}, &g),
               ONYX_LIMIT_EXCEEDED, path);
  /* Pipes have no size up front. */
  assert_null(ox_read_file("/dev/null", 0, &data, &len));
  assert_int_equal(len, 0);
  free(data);
  otm_remove_dir(dir);
  free(dir);
}

/* The builder itself: names lists, shapes and typed fields. */
static void test_builder(void** state) {
  OxTestModel* m = otm_new(17);
  OxTestNode* n = otm_node(m, "Op", "n", " a, ,b ,", "y");
  Onnx__NodeProto* np = otm_node_proto(n);
  assert_int_equal(np->n_input, 4);
  assert_string_equal(np->input[0], "a");
  assert_string_equal(np->input[1], "");
  assert_string_equal(np->input[2], "b");
  assert_string_equal(np->input[3], "");
  n = otm_node_v(m, "Op", NULL, (const char* const[]){"p", "", NULL}, NULL);
  assert_int_equal(otm_node_proto(n)->n_input, 2);
  assert_int_equal(otm_node_proto(n)->n_output, 0);
  assert_null(otm_node_proto(n)->name);
  Onnx__ValueInfoProto* vi = otm_input_s(m, "v", F32, "B, 3, ?");
  Onnx__TensorShapeProto* sp = vi->type->tensor_type->shape;
  assert_int_equal(sp->n_dim, 3);
  assert_string_equal(sp->dim[0]->dim_param, "B");
  assert_int_equal(sp->dim[1]->dim_value, 3);
  assert_int_equal(sp->dim[2]->value_case, ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE__NOT_SET);
  assert_null(otm_input(m, "u", 0, -1, NULL)->type);
  Onnx__TensorProto* tp =
      otm_initializer(m, "i8", ONYX_ELEM_INT8, 1, DIMS(2), (const int8_t[]){-5, 6});
  otm_tensor_typed(tp);
  assert_int_equal(tp->n_int32_data, 2);
  assert_int_equal(tp->int32_data[0], -5);
  otm_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_load_graph),
      cmocka_unit_test(test_attributes),
      cmocka_unit_test(test_attribute_type_from_payload),
      cmocka_unit_test(test_attribute_errors),
      cmocka_unit_test(test_graph_structure_errors),
      cmocka_unit_test(test_input_with_initializer),
      cmocka_unit_test(test_subgraphs),
      cmocka_unit_test(test_graphs_attribute),
      cmocka_unit_test(test_model_local_function),
      cmocka_unit_test(test_sparse_initializer),
      cmocka_unit_test(test_ir_version),
      cmocka_unit_test(test_opsets),
      cmocka_unit_test(test_tensor_types_raw),
      cmocka_unit_test(test_tensor_types_typed),
      cmocka_unit_test(test_tensor_typed_by_hand),
      cmocka_unit_test(test_string_tensor),
      cmocka_unit_test(test_tensor_errors),
      cmocka_unit_test(test_tensor_limit),
      cmocka_unit_test(test_model_limits),
      cmocka_unit_test(test_deep_nesting),
      cmocka_unit_test(test_truncated_bytes),
      cmocka_unit_test(test_bit_flips),
      cmocka_unit_test(test_garbage),
      cmocka_unit_test(test_external_data),
      cmocka_unit_test(test_tensor_proto_bytes),
      cmocka_unit_test(test_onnx_files),
      cmocka_unit_test(test_onnx_suite_models),
      cmocka_unit_test(test_save_round_trip),
      cmocka_unit_test(test_read_file),
      cmocka_unit_test(test_builder),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
