/* test_schemas.c — schema look-up, node checks, type/shape inference and
 * custom registries (schemas/).
 *
 * Nodes and values are built by hand as plain OxNode/OxValue structs. The
 * expected shapes were worked out by hand and cross-checked with numpy
 * (broadcast, matmul, slicing, take) and onnx 1.12's shape inference (Conv,
 * pools, Reshape); the ceil_mode window-drop case follows the ONNX spec text
 * ("sliding windows that would start in the right padded region are
 * ignored"), which onnx 1.12 predates. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ox_schema.h"
#include "schema_internal.h" /* the table and the op-name list */

/* --- Fixture: everything a test builds is freed by cleanup() ------------------------- */

static OxValue* g_vals[512];
static size_t g_nv;
static OxNode* g_nodes[128];
static size_t g_nn;

#define D(...)        ((const int64_t[]){__VA_ARGS__})
#define NARGS(T, ...) (sizeof((T[]){__VA_ARGS__}) / sizeof(T))

typedef struct Shp {
  int32_t rank;
  int64_t d[6];
} Shp;
#define SH(r, ...)                                                                                 \
  {                                                                                                \
    r, {                                                                                           \
      __VA_ARGS__                                                                                  \
    }                                                                                              \
  }
#define SCALAR                                                                                     \
  {                                                                                                \
    0, {                                                                                           \
      0                                                                                            \
    }                                                                                              \
  }
#define NORANK                                                                                     \
  {                                                                                                \
    -1, {                                                                                          \
      0                                                                                            \
    }                                                                                              \
  }
#define U ONYX_DIM_UNKNOWN

static OxValue* val(const char* name, OnyxElemType t, int32_t rank, const int64_t* dims) {
  OxValue* v = calloc(1, sizeof *v);
  assert_non_null(v);
  v->name = strdup(name);
  v->rank = -1;
  assert_null(ox_value_set(v, t, rank, dims));
  assert_true(g_nv < OX_ARRAY_LEN(g_vals));
  g_vals[g_nv++] = v;
  return v;
}

static OxValue* vs(const char* name, OnyxElemType t, Shp s) {
  return val(name, t, s.rank, s.d);
}
static OxValue* f32(Shp s) {
  return vs("x", ONYX_ELEM_FLOAT32, s);
}

/* An int64 initializer of rank 1 (rank 0 when scalar is true). */
static OxValue* ints_const(const char* name, size_t n, const int64_t* v) {
  OxTensor* t = NULL;
  int64_t dim = (int64_t)n;
  assert_null(ox_tensor_new(ONYX_ELEM_INT64, &dim, 1, &t));
  if (n) memcpy(t->data, v, n * sizeof *v);
  OxValue* x = val(name, ONYX_ELEM_INT64, 1, &dim);
  x->constant = t;
  return x;
}
#define INTS(...) ints_const("c", NARGS(int64_t, __VA_ARGS__), D(__VA_ARGS__))

static OxNode* node_v(const char* op, const char* domain, size_t nout, OxValue* const* ins,
                      size_t nin) {
  OxNode* n = calloc(1, sizeof *n);
  assert_non_null(n);
  char name[32];
  snprintf(name, sizeof name, "%s_%zu", op, g_nn);
  n->name = strdup(name);
  n->op_type = strdup(op);
  n->domain = strdup(domain);
  n->n_inputs = nin;
  n->inputs = calloc(nin ? nin : 1, sizeof *n->inputs);
  for (size_t i = 0; i < nin; i++)
    n->inputs[i] = (OxValue*)ins[i];
  n->n_outputs = nout;
  n->outputs = calloc(nout ? nout : 1, sizeof *n->outputs);
  for (size_t i = 0; i < nout; i++) {
    snprintf(name, sizeof name, "y%zu", i);
    n->outputs[i] = val(name, ONYX_ELEM_UNDEFINED, -1, NULL);
  }
  assert_true(g_nn < OX_ARRAY_LEN(g_nodes));
  g_nodes[g_nn++] = n;
  return n;
}
#define NODE(op, nout, ...)                                                                        \
  node_v(op, "", nout, (OxValue*[]){__VA_ARGS__}, NARGS(OxValue*, __VA_ARGS__))
#define NODE0(op, nout) node_v(op, "", nout, NULL, 0)

static OxAttr* attr(OxNode* n, const char* name, OnyxAttrType t) {
  assert_true(ox_grow((void**)&n->attrs, &n->cap_attrs, n->n_attrs + 1, sizeof *n->attrs));
  OxAttr* a = &n->attrs[n->n_attrs++];
  *a = (OxAttr){.name = strdup(name), .type = t};
  return a;
}
static void attr_i(OxNode* n, const char* name, int64_t v) {
  attr(n, name, ONYX_ATTR_INT)->i = v;
}
static void attr_f(OxNode* n, const char* name, float v) {
  attr(n, name, ONYX_ATTR_FLOAT)->f = v;
}
static void attr_s(OxNode* n, const char* name, const char* v) {
  OxAttr* a = attr(n, name, ONYX_ATTR_STRING);
  a->s = strdup(v);
  a->s_len = strlen(v);
}
static void attr_ints(OxNode* n, const char* name, size_t count, const int64_t* v) {
  OxAttr* a = attr(n, name, ONYX_ATTR_INTS);
  a->count = count;
  a->ints = malloc((count ? count : 1) * sizeof *v);
  if (count) memcpy(a->ints, v, count * sizeof *v);
}
#define ATTR_INTS(n, name, ...) attr_ints(n, name, NARGS(int64_t, __VA_ARGS__), D(__VA_ARGS__))
static void attr_tensor(OxNode* n, const char* name, OnyxElemType t, int32_t rank,
                        const int64_t* dims) {
  OxTensor* x = NULL;
  assert_null(ox_tensor_new(t, dims, (size_t)rank, &x));
  attr(n, name, ONYX_ATTR_TENSOR)->t = x;
}

static int cleanup(void** state) {
  (void)state;
  for (size_t i = 0; i < g_nn; i++) {
    OxNode* n = g_nodes[i];
    for (size_t k = 0; k < n->n_attrs; k++)
      ox_attr_clear(&n->attrs[k]);
    free(n->attrs);
    free(n->inputs);
    free(n->outputs);
    free(n->name);
    free(n->op_type);
    free(n->domain);
    free(n);
  }
  for (size_t i = 0; i < g_nv; i++) {
    OxValue* v = g_vals[i];
    ox_value_set(v, ONYX_ELEM_UNDEFINED, -1, NULL);
    ox_tensor_free(v->constant);
    free(v->name);
    free(v);
  }
  g_nn = g_nv = 0;
  return 0;
}

/* --- Running the schema path like the graph's resolve does ---------------------------- */

static OnyxStatus* resolve(OxNode* n, int64_t opset) {
  const char* why = NULL;
  const OxSchema* s = ox_schema_lookup(NULL, n->domain, n->op_type, opset, &why);
  if (!s) return ox_status(ONYX_NOT_IMPLEMENTED, "%s", why);
  n->schema = s;
  n->since_version = s->since_version;
  OX_TRY(ox_schema_check_node(s, n));
  return ox_schema_infer(s, n);
}

static void ok(OxNode* n, int64_t opset) {
  OnyxStatus* st = resolve(n, opset);
  if (st) {
    print_error("%s-%lld: unexpected error: %s\n", n->op_type, (long long)opset, st->message);
    ox_status_free(st);
    fail();
  }
}

/* Fails unless resolving n errs with a message naming the node and holding `needle`. */
static void fails(OxNode* n, int64_t opset, const char* needle) {
  OnyxStatus* st = resolve(n, opset);
  if (!st) {
    print_error("%s-%lld: expected an error about '%s'\n", n->op_type, (long long)opset, needle);
    fail();
  }
  bool named = strstr(st->message, n->name) != NULL, has = strstr(st->message, needle) != NULL;
  if (!named || !has) print_error("message: %s (wanted '%s')\n", st->message, needle);
  ox_status_free(st);
  assert_true(named && has);
}

static void expect_shape(const OxValue* v, OnyxElemType t, Shp s) {
  if (v->type != t || v->rank != s.rank)
    print_error("%s: got %s rank %d, want %s rank %d\n", v->name, ox_elem_name(v->type),
                (int)v->rank, ox_elem_name(t), (int)s.rank);
  assert_int_equal(v->type, t);
  assert_int_equal(v->rank, s.rank);
  for (int32_t i = 0; i < s.rank; i++) {
    if (v->dims[i] != s.d[i])
      print_error("%s: dim %d is %lld, want %lld\n", v->name, (int)i, (long long)v->dims[i],
                  (long long)s.d[i]);
    assert_int_equal(v->dims[i], s.d[i]);
  }
}
static void expect_f32(const OxNode* n, size_t out, Shp s) {
  expect_shape(n->outputs[out], ONYX_ELEM_FLOAT32, s);
}

/* --- Look-up --------------------------------------------------------------------------- */

static int32_t version_at(const char* op, int64_t opset) {
  const OxSchema* s = ox_schema_lookup(NULL, "", op, opset, NULL);
  return s ? s->since_version : -1;
}

static void test_lookup_versions(void** state) {
  (void)state;
  static const struct {
    const char* op;
    int64_t opset;
    int32_t want;
  } cases[] = {
      {"Softmax", 12, 11},    {"Softmax", 13, 13},   {"Softmax", 10, 1},
      {"Relu", 7, 6},         {"Relu", 13, 13},      {"Relu", 25, 14},
      {"Add", 5, 1},          {"Add", 6, 6},         {"Add", 12, 7},
      {"Clip", 10, 6},        {"Clip", 11, 11},      {"ReduceMean", 17, 13},
      {"ReduceMean", 18, 18}, {"ReduceSum", 13, 13}, {"Split", 17, 13},
      {"Split", 18, 18},      {"Cast", 18, 13},      {"Cast", 19, 19},
      {"Cast", 28, 25},       {"MaxPool", 9, 8},     {"Dropout", 11, 10},
      {"Dropout", 22, 22},    {"Reshape", 4, 1},     {"Reshape", 5, 5},
      {"Shape", 14, 13},      {"Shape", 15, 15},     {"Identity", 17, 16},
      {"Conv", 21, 11},       {"Pow", 12, 12},       {"Pow", 14, 13},
      {"Slice", 9, 1},        {"Slice", 10, 10},     {"Equal", 18, 13},
      {"Equal", 19, 19},      {"Erf", 8, -1},        {"ConstantOfShape", 22, 21},
  };
  for (size_t i = 0; i < OX_ARRAY_LEN(cases); i++) {
    int32_t got = version_at(cases[i].op, cases[i].opset);
    if (got != cases[i].want)
      print_error("%s at opset %lld: got %d, want %d\n", cases[i].op, (long long)cases[i].opset,
                  (int)got, (int)cases[i].want);
    assert_int_equal(got, cases[i].want);
  }
  /* "ai.onnx" and "" are one domain. */
  const OxSchema* a = ox_schema_lookup(NULL, "ai.onnx", "Relu", 7, NULL);
  assert_non_null(a);
  assert_ptr_equal(a, ox_schema_lookup(NULL, "", "Relu", 7, NULL));
}

static void test_lookup_messages(void** state) {
  (void)state;
  const char* why = NULL;
  assert_null(ox_schema_lookup(NULL, "", "Foo", 17, &why));
  assert_string_equal(why, "unknown op 'Foo' in domain 'ai.onnx'");
  assert_null(ox_schema_lookup(NULL, "", "Gelu", 17, &why));
  assert_string_equal(why, "'Gelu' is defined from opset 20; the model imports opset 17");
  assert_null(ox_schema_lookup(NULL, "", "LayerNormalization", 16, &why));
  assert_string_equal(why,
                      "'LayerNormalization' is defined from opset 17; the model imports opset 16");
  /* An ONNX op in force at the opset but absent from onyx's table: the first
   * such op of the name list, if any is left. */
  for (size_t i = 0; i < ox_onnx_op_names_count; i++) {
    const OxOpName* op = &ox_onnx_op_names[i];
    if (ox_schema_lookup(NULL, "", op->name, OX_ONNX_OPSET_MAX, NULL)) continue;
    assert_null(ox_schema_lookup(NULL, "", op->name, OX_ONNX_OPSET_MAX, &why));
    assert_non_null(strstr(why, "that onyx has no schema for"));
    assert_non_null(strstr(why, op->name));
    break;
  }
  assert_null(ox_schema_lookup(NULL, "com.acme", "Relu", 1, &why));
  assert_string_equal(why, "unknown op 'Relu' in domain 'com.acme'");
}

/* Every row is found at its own version, and rows are unique per (op, version). */
static void test_table_consistent(void** state) {
  (void)state;
  const OxSchemaRegistry* r = ox_schemas_builtin();
  assert_non_null(r);
  static const char* const ops[] = {"Add",
                                    "Sub",
                                    "Mul",
                                    "Div",
                                    "MatMul",
                                    "Gemm",
                                    "Relu",
                                    "Sigmoid",
                                    "Tanh",
                                    "Exp",
                                    "Log",
                                    "Sqrt",
                                    "Pow",
                                    "Erf",
                                    "Neg",
                                    "Abs",
                                    "Softmax",
                                    "Conv",
                                    "MaxPool",
                                    "AveragePool",
                                    "GlobalAveragePool",
                                    "BatchNormalization",
                                    "LayerNormalization",
                                    "Reshape",
                                    "Flatten",
                                    "Transpose",
                                    "Concat",
                                    "Split",
                                    "Slice",
                                    "Squeeze",
                                    "Unsqueeze",
                                    "Gather",
                                    "Shape",
                                    "Cast",
                                    "Constant",
                                    "ConstantOfShape",
                                    "Identity",
                                    "Dropout",
                                    "ReduceMean",
                                    "ReduceSum",
                                    "Where",
                                    "Equal",
                                    "Less",
                                    "Greater",
                                    "Expand",
                                    "Clip"};
  for (size_t i = 0; i < OX_ARRAY_LEN(ops); i++) {
    const OxSchema* latest = ox_schema_lookup(NULL, "", ops[i], OX_ONNX_OPSET_MAX, NULL);
    if (!latest) print_error("no schema for %s\n", ops[i]);
    assert_non_null(latest);
    int32_t prev = 0;
    for (int64_t v = 1; v <= OX_ONNX_OPSET_MAX; v++) {
      const OxSchema* s = ox_schema_lookup(NULL, "", ops[i], v, NULL);
      if (!s) continue;
      assert_true(s->since_version <= v);
      assert_true(s->since_version >= prev); /* monotonic in the opset */
      assert_string_equal(s->op_type, ops[i]);
      assert_true(s->strict_attrs);
      assert_non_null(s->infer);
      prev = s->since_version;
    }
  }
  /* No (op, version) twice; the name list is sorted for its binary search. */
  for (size_t i = 1; i < r->count; i++) {
    const OxSchema *a = r->sorted[i - 1], *b = r->sorted[i];
    bool dup = !strcmp(a->op_type, b->op_type) && a->since_version == b->since_version;
    if (dup) print_error("%s-%d is in the table twice\n", a->op_type, (int)a->since_version);
    assert_false(dup);
  }
  /* Every hand-written row is there; generated and family rows add to them. */
  assert_true(r->count >= ox_onnx_schemas_count + ox_gen_schemas_count / 2);
  for (size_t i = 1; i < ox_onnx_op_names_count; i++)
    assert_true(strcmp(ox_onnx_op_names[i - 1].name, ox_onnx_op_names[i].name) < 0);
  /* The ops of opset 7 are all there by opset 7 (Relu-6 etc. stay current). */
  assert_int_equal(version_at("Relu", 7), 6);
  assert_int_equal(version_at("BatchNormalization", 7), 7);
  assert_int_equal(version_at("Concat", 7), 4);
}

static void* lookup_thread(void* arg) {
  (void)arg;
  for (int i = 0; i < 2000; i++) {
    const char* why;
    if (!ox_schema_lookup(NULL, "", "Conv", 11 + i % 10, &why)) return (void*)1;
    if (ox_schema_lookup(NULL, "", "Nope", 13, &why) ||
        strcmp(why, "unknown op 'Nope' in domain 'ai.onnx'"))
      return (void*)1;
  }
  return NULL;
}

static void test_lookup_threads(void** state) {
  (void)state;
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    assert_int_equal(pthread_create(&t[i], NULL, lookup_thread, NULL), 0);
  for (int i = 0; i < 4; i++) {
    void* r;
    pthread_join(t[i], &r);
    assert_null(r);
  }
}

static void test_constraint_queries(void** state) {
  (void)state;
  const OxSchema* concat = ox_schema_lookup(NULL, "", "Concat", 13, NULL);
  assert_string_equal(ox_schema_input_tc(concat, 0), "T");
  assert_string_equal(ox_schema_input_tc(concat, 7), "T"); /* variadic covers the rest */
  const OxSchema* reshape = ox_schema_lookup(NULL, "", "Reshape", 14, NULL);
  assert_string_equal(ox_schema_input_tc(reshape, 0), "T");
  assert_null(ox_schema_input_tc(reshape, 1)); /* fixed tensor(int64) */
  assert_null(ox_schema_input_tc(reshape, 2));
  assert_int_equal(ox_schema_tc_allowed(reshape, "tensor(int64)"), OX_T(ONYX_ELEM_INT64));
  assert_int_equal(ox_schema_tc_allowed(reshape, "Nope"), UINT64_MAX);
  const OxSchema* split = ox_schema_lookup(NULL, "", "Split", 18, NULL);
  assert_string_equal(ox_schema_output_tc(split, 5), "T");
  const OxSchema* relu6 = ox_schema_lookup(NULL, "", "Relu", 6, NULL);
  assert_null(ox_schema_output_tc(relu6, 1));
  uint64_t f = OX_T(ONYX_ELEM_FLOAT16) | OX_T(ONYX_ELEM_FLOAT32) | OX_T(ONYX_ELEM_FLOAT64);
  assert_int_equal(ox_schema_tc_allowed(relu6, "T"), f);
  const OxSchema* relu14 = ox_schema_lookup(NULL, "", "Relu", 14, NULL);
  assert_true(ox_schema_tc_allowed(relu14, "T") & OX_T(ONYX_ELEM_INT32));
  assert_true(ox_schema_tc_allowed(relu14, "T") & OX_T(ONYX_ELEM_BFLOAT16));
  const OxSchema* cast25 = ox_schema_lookup(NULL, "", "Cast", 25, NULL);
  assert_true(ox_schema_tc_allowed(cast25, "T2") & OX_T(ONYX_ELEM_INT2));
  assert_false(ox_schema_tc_allowed(cast25, "T2") & OX_T(ONYX_ELEM_COMPLEX64));
  const OxSchema* cast13 = ox_schema_lookup(NULL, "", "Cast", 13, NULL);
  assert_false(ox_schema_tc_allowed(cast13, "T2") & OX_T(ONYX_ELEM_FLOAT8E4M3FN));
}

/* --- check_node ----------------------------------------------------------------------------- */

static const OxAttr* find_attr(const OxNode* n, const char* name) {
  return ox_node_attr(n, name);
}

static void test_defaults_filled(void** state) {
  (void)state;
  OxNode* conv = NODE("Conv", 1, f32((Shp)SH(4, 1, 3, 8, 8)), f32((Shp)SH(4, 2, 3, 3, 3)));
  ok(conv, 11);
  const OxAttr* a = find_attr(conv, "auto_pad");
  assert_non_null(a);
  assert_true(a->from_default);
  assert_int_equal(a->type, ONYX_ATTR_STRING);
  assert_string_equal(a->s, "NOTSET");
  assert_int_equal(a->s_len, 6);
  a = find_attr(conv, "group");
  assert_non_null(a);
  assert_true(a->from_default);
  assert_int_equal(a->i, 1);
  assert_null(find_attr(conv, "dilations")); /* no default in the spec */

  OxNode* s12 = NODE("Softmax", 1, f32((Shp)SH(2, 2, 3)));
  ok(s12, 12);
  assert_int_equal(find_attr(s12, "axis")->i, 1);
  OxNode* s13 = NODE("Softmax", 1, f32((Shp)SH(2, 2, 3)));
  ok(s13, 13);
  assert_int_equal(find_attr(s13, "axis")->i, -1);

  /* A given attribute is kept, not overwritten, and is not marked default. */
  OxNode* g = NODE("Gemm", 1, f32((Shp)SH(2, 2, 3)), f32((Shp)SH(2, 4, 3)));
  attr_i(g, "transB", 1);
  ok(g, 13);
  assert_int_equal(find_attr(g, "transB")->i, 1);
  assert_false(find_attr(g, "transB")->from_default);
  assert_float_equal(find_attr(g, "alpha")->f, 1.0f, 0);
  assert_true(find_attr(g, "alpha")->from_default);
  expect_f32(g, 0, (Shp)SH(2, 2, 4));

  OxNode* clip = NODE("Clip", 1, f32((Shp)SH(1, 3)));
  ok(clip, 6);
  assert_true(find_attr(clip, "max")->f > 3e38f);
  assert_true(find_attr(clip, "min")->f < -3e38f);

  OxNode* c19 = NODE("Cast", 1, f32((Shp)SH(1, 3)));
  attr_i(c19, "to", ONYX_ELEM_FLOAT16);
  ok(c19, 19);
  assert_int_equal(find_attr(c19, "saturate")->i, 1);
  size_t before = c19->n_attrs; /* checking twice adds nothing */
  assert_null(ox_schema_check_node(c19->schema, c19));
  assert_int_equal(c19->n_attrs, before);
}

static void test_attr_errors(void** state) {
  (void)state;
  OxNode* n = NODE("Relu", 1, f32((Shp)SH(1, 3)));
  attr_i(n, "alpha", 1);
  fails(n, 14, "unknown attribute 'alpha'");

  n = NODE("Softmax", 1, f32((Shp)SH(1, 3)));
  attr_f(n, "axis", 1.0f);
  fails(n, 13, "attribute 'axis' must be of type int, not float");

  n = NODE("Concat", 1, f32((Shp)SH(1, 3)), f32((Shp)SH(1, 3)));
  fails(n, 13, "required attribute 'axis' is missing");

  n = NODE("MaxPool", 1, f32((Shp)SH(4, 1, 1, 4, 4)));
  fails(n, 12, "required attribute 'kernel_shape' is missing");

  n = NODE("Cast", 1, f32((Shp)SH(1, 3)));
  attr_s(n, "to", "FLOAT16"); /* a string was Cast-1's form only */
  fails(n, 13, "attribute 'to' must be of type int, not string");
  n = NODE("Cast", 1, f32((Shp)SH(1, 3)));
  attr_s(n, "to", "FLOAT16");
  ok(n, 5);
  expect_shape(n->outputs[0], ONYX_ELEM_FLOAT16, (Shp)SH(1, 3));

  /* A removed attribute is unknown in later versions (Dropout's is_test went at 7). */
  n = NODE("Dropout", 1, f32((Shp)SH(1, 3)));
  attr_i(n, "is_test", 1);
  ok(n, 6);
  n = NODE("Dropout", 1, f32((Shp)SH(1, 3)));
  attr_i(n, "is_test", 1);
  fails(n, 7, "unknown attribute 'is_test'");
}

static void test_arity(void** state) {
  (void)state;
  OxNode* n = NODE("Add", 1, f32((Shp)SH(1, 3)));
  fails(n, 14, "has 1 inputs; Add-14 takes 2");
  n = NODE("Relu", 2, f32((Shp)SH(1, 3)));
  fails(n, 14, "has 2 outputs; Relu-14 takes 1");
  /* Gemm's C became optional at 11. */
  n = NODE("Gemm", 1, f32((Shp)SH(2, 2, 3)), f32((Shp)SH(2, 3, 4)));
  ok(n, 11);
  n = NODE("Gemm", 1, f32((Shp)SH(2, 2, 3)), f32((Shp)SH(2, 3, 4)));
  fails(n, 9, "takes 3");
  /* An absent required input in the middle. */
  n = NODE("Conv", 1, f32((Shp)SH(4, 1, 3, 8, 8)), NULL, f32((Shp)SH(1, 2)));
  fails(n, 11, "input 1 ('W') is required but empty");
  /* Trailing absent optionals may be NULL entries. */
  n = NODE("Dropout", 2, f32((Shp)SH(2, 2, 3)), NULL, NULL);
  ok(n, 13);
  expect_shape(n->outputs[1], ONYX_ELEM_BOOL, (Shp)SH(2, 2, 3));
  n = NODE("Clip", 1, f32((Shp)SH(1, 5)), NULL, f32((Shp)SCALAR));
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(1, 5));
  n = NODE0("Concat", 1);
  attr_i(n, "axis", 0);
  fails(n, 13, "at least 1");
  n = NODE("Slice", 1, f32((Shp)SH(1, 5)), INTS(0));
  fails(n, 13, "3 to 5");
}

static void test_type_errors(void** state) {
  (void)state;
  OxNode* n = NODE("Add", 1, f32((Shp)SH(1, 3)), vs("b", ONYX_ELEM_INT64, (Shp)SH(1, 3)));
  fails(n, 14, "must have one type");
  n = NODE("Relu", 1, vs("xi", ONYX_ELEM_INT32, (Shp)SH(1, 3)));
  fails(n, 13, "input 0 'xi' has type int32");
  n = NODE("Relu", 1, vs("xi", ONYX_ELEM_INT32, (Shp)SH(1, 3)));
  ok(n, 14);
  expect_shape(n->outputs[0], ONYX_ELEM_INT32, (Shp)SH(1, 3));
  n = NODE("Reshape", 1, f32((Shp)SH(1, 4)), vs("s", ONYX_ELEM_INT32, (Shp)SH(1, 2)));
  fails(n, 14, "tensor(int64)");
  /* bfloat16 arrived in Add at 13. */
  n = NODE("Add", 1, vs("a", ONYX_ELEM_BFLOAT16, (Shp)SH(1, 3)),
           vs("b", ONYX_ELEM_BFLOAT16, (Shp)SH(1, 3)));
  fails(n, 12, "bfloat16");
  n = NODE("Add", 1, vs("a", ONYX_ELEM_BFLOAT16, (Shp)SH(1, 3)),
           vs("b", ONYX_ELEM_BFLOAT16, (Shp)SH(1, 3)));
  ok(n, 13);
  /* Pow's exponent got its own constraint at 12. */
  n = NODE("Pow", 1, f32((Shp)SH(1, 3)), vs("e", ONYX_ELEM_INT64, (Shp)SCALAR));
  ok(n, 12);
  expect_f32(n, 0, (Shp)SH(1, 3));
  n = NODE("Pow", 1, f32((Shp)SH(1, 3)), vs("e", ONYX_ELEM_INT64, (Shp)SCALAR));
  fails(n, 11, "int64");
  n = NODE("Where", 1, f32((Shp)SH(1, 3)), f32((Shp)SH(1, 3)), f32((Shp)SH(1, 3)));
  fails(n, 16, "'condition' (B)");
}

/* --- Inference tables ----------------------------------------------------------------------------
 */

typedef struct BinCase {
  Shp a, b, want;
  bool ok;
} BinCase;

static void run_binary(const char* op, int64_t opset, const BinCase* c, size_t n) {
  for (size_t i = 0; i < n; i++) {
    OxNode* nd =
        NODE(op, 1, vs("a", ONYX_ELEM_FLOAT32, c[i].a), vs("b", ONYX_ELEM_FLOAT32, c[i].b));
    if (!c[i].ok) {
      fails(nd, opset, !strcmp(op, "MatMul") ? "inner dimensions" : "broadcast");
      continue;
    }
    ok(nd, opset);
    expect_f32(nd, 0, c[i].want);
  }
}

static void test_broadcast(void** state) {
  (void)state;
  static const BinCase cases[] = {
      {SH(3, 2, 3, 4), SH(1, 4), SH(3, 2, 3, 4), true},
      {SH(3, 2, 1, 4), SH(2, 3, 1), SH(3, 2, 3, 4), true},
      {SCALAR, SH(1, 5), SH(1, 5), true},
      {SH(2, U, 3), SH(2, 4, 1), SH(2, 4, 3), true},
      {SH(2, U, 3), SH(2, 1, 3), SH(2, U, 3), true},
      {SH(2, U, 3), SH(2, U, 1), SH(2, U, 3), true},
      {SH(2, 0, 3), SH(2, 1, 3), SH(2, 0, 3), true},
      {NORANK, SH(1, 3), NORANK, true},
      {SH(2, 2, 3), SH(1, 4), SCALAR, false},
  };
  run_binary("Add", 14, cases, OX_ARRAY_LEN(cases));
  run_binary("Mul", 7, cases, OX_ARRAY_LEN(cases));
  /* Comparisons broadcast too and give bool. */
  OxNode* n = NODE("Less", 1, f32((Shp)SH(2, 3, 1)), f32((Shp)SH(1, 4)));
  ok(n, 13);
  expect_shape(n->outputs[0], ONYX_ELEM_BOOL, (Shp)SH(2, 3, 4));
  n = NODE("Equal", 1, vs("a", ONYX_ELEM_INT64, (Shp)SH(1, 3)),
           vs("b", ONYX_ELEM_INT64, (Shp)SCALAR));
  ok(n, 11);
  expect_shape(n->outputs[0], ONYX_ELEM_BOOL, (Shp)SH(1, 3));
  /* Opset 6: B is broadcast onto A, C has A's shape. */
  n = NODE("Add", 1, f32((Shp)SH(2, 2, 3)), f32((Shp)SH(1, 3)));
  attr_i(n, "broadcast", 1);
  ok(n, 6);
  expect_f32(n, 0, (Shp)SH(2, 2, 3));
  /* Where: three-way broadcast, type from X. */
  n = NODE("Where", 1, vs("c", ONYX_ELEM_BOOL, (Shp)SH(2, 3, 1)),
           vs("x", ONYX_ELEM_INT64, (Shp)SH(1, 4)), vs("y", ONYX_ELEM_INT64, (Shp)SCALAR));
  ok(n, 16);
  expect_shape(n->outputs[0], ONYX_ELEM_INT64, (Shp)SH(2, 3, 4));
}

static void test_matmul(void** state) {
  (void)state;
  static const BinCase cases[] = {
      {SH(2, 3, 4), SH(2, 4, 5), SH(2, 3, 5), true},
      {SH(1, 4), SH(2, 4, 5), SH(1, 5), true},
      {SH(2, 3, 4), SH(1, 4), SH(1, 3), true},
      {SH(1, 4), SH(1, 4), SCALAR, true},
      {SH(4, 2, 1, 3, 4), SH(3, 5, 4, 6), SH(4, 2, 5, 3, 6), true},
      {SH(3, 7, 3, 4), SH(1, 4), SH(2, 7, 3), true},
      {SH(2, U, 4), SH(2, 4, U), SH(2, U, U), true},
      {SH(2, 3, U), SH(2, 4, 5), SH(2, 3, 5), true},
      {SH(2, 3, 4), SH(2, 5, 6), SCALAR, false},
      {SH(1, 3), SH(1, 4), SCALAR, false},
  };
  run_binary("MatMul", 13, cases, OX_ARRAY_LEN(cases));
}

static void test_gemm(void** state) {
  (void)state;
  OxNode* n = NODE("Gemm", 1, f32((Shp)SH(2, 3, 4)), f32((Shp)SH(2, 5, 3)), f32((Shp)SH(1, 5)));
  attr_i(n, "transA", 1);
  attr_i(n, "transB", 1);
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(2, 4, 5));
  n = NODE("Gemm", 1, f32((Shp)SH(2, 3, 4)), f32((Shp)SH(2, 3, 5)));
  fails(n, 13, "inner dimensions");
  n = NODE("Gemm", 1, f32((Shp)SH(2, 3, 4)), f32((Shp)SH(2, 4, 5)), f32((Shp)SH(1, 4)));
  fails(n, 13, "cannot broadcast");
}

typedef struct WinCase {
  const char* op;
  int64_t opset;
  Shp x, w; /* w: Conv weights; for pools w.d holds kernel_shape (w.rank values) */
  int64_t pads[6], strides[3], dilations[3];
  const char* auto_pad;
  int64_t ceil_mode, group;
  Shp want;
} WinCase;

static void set_window_attrs(OxNode* n, const WinCase* c, size_t ns) {
  if (c->pads[0] || c->pads[ns]) attr_ints(n, "pads", 2 * ns, c->pads);
  if (c->strides[0]) attr_ints(n, "strides", ns, c->strides);
  if (c->dilations[0]) attr_ints(n, "dilations", ns, c->dilations);
  if (c->auto_pad) attr_s(n, "auto_pad", c->auto_pad);
  if (c->ceil_mode) attr_i(n, "ceil_mode", 1);
  if (c->group) attr_i(n, "group", c->group);
}

static void test_conv_pool(void** state) {
  (void)state;
  static const WinCase cases[] = {
      /* Conv X[1,3,32,32] W[8,3,3,3]. */
      {"Conv",
       11,
       SH(4, 1, 3, 32, 32),
       SH(4, 8, 3, 3, 3),
       {1, 1, 1, 1},
       {0},
       {0},
       NULL,
       0,
       0,
       SH(4, 1, 8, 32, 32)},
      {"Conv",
       11,
       SH(4, 1, 3, 32, 32),
       SH(4, 8, 3, 3, 3),
       {0},
       {2, 2},
       {0},
       NULL,
       0,
       0,
       SH(4, 1, 8, 15, 15)},
      {"Conv",
       11,
       SH(4, 1, 3, 32, 32),
       SH(4, 8, 3, 3, 3),
       {0},
       {0},
       {2, 2},
       NULL,
       0,
       0,
       SH(4, 1, 8, 28, 28)},
      {"Conv",
       11,
       SH(4, 1, 3, 32, 32),
       SH(4, 8, 3, 3, 3),
       {0},
       {2, 2},
       {0},
       "SAME_UPPER",
       0,
       0,
       SH(4, 1, 8, 16, 16)},
      {"Conv",
       22,
       SH(4, 1, 3, 32, 32),
       SH(4, 8, 3, 3, 3),
       {0},
       {2, 2},
       {0},
       "VALID",
       0,
       0,
       SH(4, 1, 8, 15, 15)},
      {"Conv",
       11,
       SH(4, 1, 3, 32, 32),
       SH(4, 6, 1, 3, 3),
       {0},
       {0},
       {0},
       NULL,
       0,
       3,
       SH(4, 1, 6, 30, 30)},
      {"Conv", 11, SH(3, 2, 4, 10), SH(3, 5, 4, 3), {2, 1}, {2}, {0}, NULL, 0, 0, SH(3, 2, 5, 6)},
      {"Conv",
       11,
       SH(4, 1, 2, 9, 11),
       SH(4, 4, 2, 3, 2),
       {1, 0, 2, 1},
       {2, 3},
       {1, 2},
       NULL,
       0,
       0,
       SH(4, 1, 4, 5, 4)},
      {"Conv",
       11,
       SH(4, U, 3, U, 32),
       SH(4, 8, 3, 3, 3),
       {1, 1, 1, 1},
       {0},
       {0},
       NULL,
       0,
       0,
       SH(4, U, 8, U, 32)},
      /* Pools: w holds kernel_shape. */
      {"MaxPool",
       12,
       SH(4, 1, 1, 5, 5),
       SH(2, 2, 2),
       {0},
       {2, 2},
       {0},
       NULL,
       0,
       0,
       SH(4, 1, 1, 2, 2)},
      {"MaxPool",
       12,
       SH(4, 1, 1, 5, 5),
       SH(2, 2, 2),
       {0},
       {2, 2},
       {0},
       NULL,
       1,
       0,
       SH(4, 1, 1, 3, 3)},
      {"MaxPool",
       12,
       SH(4, 1, 1, 6, 6),
       SH(2, 3, 3),
       {1, 1, 1, 1},
       {2, 2},
       {0},
       NULL,
       1,
       0,
       SH(4, 1, 1, 4, 4)},
      {"MaxPool",
       12,
       SH(4, 1, 1, 6, 6),
       SH(2, 3, 3),
       {1, 1, 1, 1},
       {2, 2},
       {0},
       NULL,
       0,
       0,
       SH(4, 1, 1, 3, 3)},
      /* in 5, k 2, s 2, pads 1/1, ceil: the 4th window would start in the end padding. */
      {"MaxPool", 12, SH(3, 1, 1, 5), SH(1, 2), {1, 1}, {2}, {0}, NULL, 1, 0, SH(3, 1, 1, 3)},
      {"MaxPool", 12, SH(3, 1, 1, 5), SH(1, 2), {0}, {0}, {2}, NULL, 0, 0, SH(3, 1, 1, 3)},
      {"AveragePool",
       11,
       SH(4, 1, 1, 10, 7),
       SH(2, 3, 3),
       {0},
       {3, 3},
       {0},
       "SAME_LOWER",
       0,
       0,
       SH(4, 1, 1, 4, 3)},
      {"AveragePool", 19, SH(3, 2, 3, 5), SH(1, 2), {0}, {0}, {2}, NULL, 0, 0, SH(3, 2, 3, 3)},
      {"AveragePool",
       7,
       SH(4, 1, 3, 7, 7),
       SH(2, 3, 3),
       {0},
       {2, 2},
       {0},
       NULL,
       0,
       0,
       SH(4, 1, 3, 3, 3)},
  };
  for (size_t i = 0; i < OX_ARRAY_LEN(cases); i++) {
    const WinCase* c = &cases[i];
    bool conv = !strcmp(c->op, "Conv");
    bool maxpool = !strcmp(c->op, "MaxPool"); /* with its Indices output */
    OxNode* n =
        conv ? NODE(c->op, 1, f32(c->x), f32(c->w)) : NODE(c->op, maxpool ? 2 : 1, f32(c->x));
    if (!conv) attr_ints(n, "kernel_shape", (size_t)c->w.rank, c->w.d);
    set_window_attrs(n, c, (size_t)c->x.rank - 2);
    ok(n, c->opset);
    expect_f32(n, 0, c->want);
    if (maxpool) expect_shape(n->outputs[1], ONYX_ELEM_INT64, c->want);
  }
}

static void test_conv_pool_errors(void** state) {
  (void)state;
  OxNode* n = NODE("Conv", 1, f32((Shp)SH(4, 1, 3, 8, 8)), f32((Shp)SH(4, 8, 4, 3, 3)));
  fails(n, 11, "channels");
  n = NODE("Conv", 1, f32((Shp)SH(4, 1, 3, 8, 8)), f32((Shp)SH(4, 8, 3, 3, 3)));
  ATTR_INTS(n, "strides", 1, 1, 1);
  fails(n, 11, "attribute 'strides' has 3 values");
  n = NODE("MaxPool", 1, f32((Shp)SH(4, 1, 3, 8, 8)));
  ATTR_INTS(n, "kernel_shape", 3, 3);
  ATTR_INTS(n, "pads", 1, 1);
  fails(n, 12, "attribute 'pads'");
  n = NODE("MaxPool", 1, f32((Shp)SH(4, 1, 3, 2, 2)));
  ATTR_INTS(n, "kernel_shape", 3, 3);
  fails(n, 12, "kernel extent");
  n = NODE("AveragePool", 1, f32((Shp)SH(4, 1, 3, 8, 8)));
  ATTR_INTS(n, "kernel_shape", 3, 3);
  attr_s(n, "auto_pad", "SAME");
  fails(n, 11, "attribute 'auto_pad'");
  n = NODE("GlobalAveragePool", 1, f32((Shp)SH(4, 2, 5, 7, 9)));
  ok(n, 1);
  expect_f32(n, 0, (Shp)SH(4, 2, 5, 1, 1));
}

/* --- Reshape, Flatten, Transpose ---------------------------------------------------------------
 */

typedef struct ReshapeCase {
  Shp x;
  size_t ns;
  int64_t shape[5];
  int64_t allowzero; /* -1: attribute absent */
  Shp want;
  const char* error; /* NULL: succeeds */
} ReshapeCase;

static void test_reshape(void** state) {
  (void)state;
  static const ReshapeCase cases[] = {
      {SH(3, 2, 3, 4), 2, {4, -1}, -1, SH(2, 4, 6), NULL},
      {SH(3, 2, 3, 4), 2, {0, -1}, -1, SH(2, 2, 12), NULL},
      {SH(3, 2, 3, 4), 3, {0, 0, 0}, -1, SH(3, 2, 3, 4), NULL},
      {SH(3, 2, 3, 4), 2, {0, 12}, 0, SH(2, 2, 12), NULL},
      {SH(3, 2, 3, 4), 2, {0, 12}, 1, SCALAR, "cannot reshape"},
      {SH(2, 0, 3), 2, {0, 5}, 1, SH(2, 0, 5), NULL},
      {SH(2, 0, 3), 2, {0, -1}, 1, SCALAR, "allowzero"},
      {SH(3, 2, 3, 4), 2, {5, -1}, -1, SCALAR, "cannot reshape"},
      {SH(3, 2, 3, 4), 2, {7, 8}, -1, SCALAR, "cannot reshape"},
      {SH(3, 2, 3, 4), 2, {-1, -1}, -1, SCALAR, "more than one -1"},
      {SH(3, 2, 3, 4), 2, {-2, 12}, -1, SCALAR, "invalid"},
      {SH(1, 6), 2, {2, 0}, -1, SCALAR, "rank-1 input"},
      {SH(3, U, 3, 4), 2, {0, -1}, -1, SH(2, U, 12), NULL},
      {SH(3, U, 3, 4), 2, {-1, 12}, -1, SH(2, U, 12), NULL},
      {SH(3, 2, 3, 4), 0, {0}, -1, SCALAR, "cannot reshape"},
      {SH(3, 1, 1, 1), 0, {0}, -1, SCALAR, NULL},
  };
  for (size_t i = 0; i < OX_ARRAY_LEN(cases); i++) {
    const ReshapeCase* c = &cases[i];
    OxNode* n = NODE("Reshape", 1, f32(c->x), ints_const("shape", c->ns, c->shape));
    if (c->allowzero >= 0) attr_i(n, "allowzero", c->allowzero);
    if (c->error) {
      fails(n, 14, c->error);
      continue;
    }
    ok(n, 14);
    expect_f32(n, 0, c->want);
  }
  /* Shape not constant: only the rank is known, from the shape input's length. */
  OxNode* n = NODE("Reshape", 1, f32((Shp)SH(2, 4, 6)), vs("s", ONYX_ELEM_INT64, (Shp)SH(1, 3)));
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(3, U, U, U));
  /* Reshape-1 reads the attribute. */
  n = NODE("Reshape", 1, f32((Shp)SH(2, 4, 6)));
  ATTR_INTS(n, "shape", 3, -1);
  ok(n, 1);
  expect_f32(n, 0, (Shp)SH(2, 3, 8));
  /* The shape can come from a Constant node. */
  OxNode* k = NODE0("Constant", 1);
  ATTR_INTS(k, "value_ints", 8, -1);
  ok(k, 13);
  expect_shape(k->outputs[0], ONYX_ELEM_INT64, (Shp)SH(1, 2));
  k->outputs[0]->producer = k;
  n = NODE("Reshape", 1, f32((Shp)SH(2, 4, 6)), k->outputs[0]);
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(2, 8, 3));
}

static void test_flatten_transpose(void** state) {
  (void)state;
  OxNode* n = NODE("Flatten", 1, f32((Shp)SH(4, 2, 3, 4, 5)));
  attr_i(n, "axis", 2);
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(2, 6, 20));
  n = NODE("Flatten", 1, f32((Shp)SH(4, 2, 3, 4, 5)));
  attr_i(n, "axis", 0);
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(2, 1, 120));
  n = NODE("Flatten", 1, f32((Shp)SH(4, 2, 3, 4, 5)));
  attr_i(n, "axis", -1);
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(2, 24, 5));
  n = NODE("Flatten", 1, f32((Shp)SH(3, U, 3, 4)));
  ok(n, 11);
  expect_f32(n, 0, (Shp)SH(2, U, 12));
  n = NODE("Flatten", 1, f32((Shp)SH(2, 3, 4)));
  attr_i(n, "axis", 3);
  fails(n, 13, "attribute 'axis'");

  n = NODE("Transpose", 1, f32((Shp)SH(3, 2, 3, 4)));
  ATTR_INTS(n, "perm", 2, 0, 1);
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(3, 4, 2, 3));
  n = NODE("Transpose", 1, f32((Shp)SH(3, 2, 3, 4)));
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(3, 4, 3, 2));
  n = NODE("Transpose", 1, f32((Shp)SH(3, 2, 3, 4)));
  ATTR_INTS(n, "perm", 0, 0, 1);
  fails(n, 13, "attribute 'perm' is not a permutation");
  n = NODE("Transpose", 1, f32((Shp)SH(3, 2, 3, 4)));
  ATTR_INTS(n, "perm", 1, 0);
  fails(n, 13, "attribute 'perm' has 2 values");
}

/* --- Concat, Split, Slice ------------------------------------------------------------------------
 */

static void test_concat(void** state) {
  (void)state;
  OxNode* n =
      NODE("Concat", 1, f32((Shp)SH(2, 2, 3)), f32((Shp)SH(2, 2, 5)), f32((Shp)SH(2, 2, 1)));
  attr_i(n, "axis", 1);
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(2, 2, 9));
  n = NODE("Concat", 1, f32((Shp)SH(2, 2, 3)), f32((Shp)SH(2, 2, 5)));
  attr_i(n, "axis", -1);
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(2, 2, 8));
  n = NODE("Concat", 1, f32((Shp)SH(2, U, 3)), f32((Shp)SH(2, 2, U)));
  attr_i(n, "axis", 0);
  ok(n, 11);
  expect_f32(n, 0, (Shp)SH(2, U, 3));
  n = NODE("Concat", 1, f32((Shp)SH(2, 2, 3)), f32((Shp)NORANK));
  attr_i(n, "axis", 0);
  ok(n, 11);
  expect_f32(n, 0, (Shp)SH(2, U, 3));
  n = NODE("Concat", 1, f32((Shp)SH(2, 2, 3)), f32((Shp)SH(2, 3, 3)));
  attr_i(n, "axis", 1);
  fails(n, 13, "has 3 on axis 0");
  n = NODE("Concat", 1, f32((Shp)SH(2, 2, 3)), f32((Shp)SH(1, 3)));
  attr_i(n, "axis", 0);
  fails(n, 13, "rank");
  n = NODE("Concat", 1, f32((Shp)SH(2, 2, 3)));
  attr_i(n, "axis", 2);
  fails(n, 13, "attribute 'axis'");
}

static void expect_split(const OxNode* n, size_t count, const int64_t* sizes) {
  for (size_t i = 0; i < count; i++)
    expect_f32(n, i, (Shp)SH(2, sizes[i], 4));
}

static void test_split(void** state) {
  (void)state;
  OxNode* n = NODE("Split", 3, f32((Shp)SH(2, 6, 4)));
  ok(n, 13);
  expect_split(n, 3, D(2, 2, 2));
  n = NODE("Split", 3, f32((Shp)SH(2, 6, 4)), INTS(1, 2, 3));
  ok(n, 13);
  expect_split(n, 3, D(1, 2, 3));
  n = NODE("Split", 2, f32((Shp)SH(2, 6, 4)));
  ATTR_INTS(n, "split", 4, 2);
  ok(n, 11);
  expect_split(n, 2, D(4, 2));
  n = NODE("Split", 2, f32((Shp)SH(2, 6, 4)));
  ATTR_INTS(n, "split", 5, 1);
  ok(n, 1); /* Split-1 also took the attribute */
  expect_split(n, 2, D(5, 1));
  n = NODE("Split", 3, f32((Shp)SH(2, 7, 4)));
  attr_i(n, "num_outputs", 3);
  ok(n, 18);
  expect_split(n, 3, D(3, 3, 1));
  n = NODE("Split", 2, f32((Shp)SH(2, 3, 8)));
  attr_i(n, "axis", -1);
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(2, 3, 4));
  expect_f32(n, 1, (Shp)SH(2, 3, 4));
  /* Split input not constant: the split axis becomes unknown. */
  n = NODE("Split", 2, f32((Shp)SH(2, 6, 4)), vs("s", ONYX_ELEM_INT64, (Shp)SH(1, 2)));
  ok(n, 13);
  expect_f32(n, 1, (Shp)SH(2, U, 4));

  n = NODE("Split", 2, f32((Shp)SH(2, 7, 4)));
  fails(n, 13, "2 equal parts");
  n = NODE("Split", 2, f32((Shp)SH(2, 6, 4)), INTS(1, 2));
  fails(n, 13, "sums to 3");
  n = NODE("Split", 3, f32((Shp)SH(2, 6, 4)), INTS(1, 5));
  fails(n, 13, "2 values for 3 outputs");
  n = NODE("Split", 3, f32((Shp)SH(2, 6, 4)));
  attr_i(n, "num_outputs", 2);
  fails(n, 18, "attribute 'num_outputs'");
  n = NODE("Split", 2, f32((Shp)SH(2, 6, 4)));
  attr_i(n, "axis", 2);
  fails(n, 13, "attribute 'axis'");
}

typedef struct SliceCase {
  size_t c;
  int64_t starts[2], ends[2], axes[2], steps[2]; /* axes/steps[0] == 99: absent */
  Shp want;
} SliceCase;

static void test_slice(void** state) {
  (void)state;
  static const SliceCase cases[] = {
      /* X is [10, 20]. */
      {1, {1}, {5}, {99}, {99}, SH(2, 4, 20)},
      {1, {9}, {INT64_MIN}, {0}, {-2}, SH(2, 5, 20)},
      {1, {2}, {-2}, {-1}, {3}, SH(2, 10, 6)},
      {1, {-100}, {100}, {0}, {99}, SH(2, 10, 20)},
      {1, {5}, {2}, {0}, {1}, SH(2, 0, 20)},
      {2, {INT64_MAX, -1}, {INT64_MIN, -30}, {0, 1}, {-1, -4}, SH(2, 10, 5)},
      {2, {0, 0}, {INT64_MAX, 3}, {1, 0}, {99}, SH(2, 3, 20)},
  };
  for (size_t i = 0; i < OX_ARRAY_LEN(cases); i++) {
    const SliceCase* c = &cases[i];
    OxValue* ins[5] = {f32((Shp)SH(2, 10, 20)), ints_const("starts", c->c, c->starts),
                       ints_const("ends", c->c, c->ends),
                       c->axes[0] == 99 ? NULL : ints_const("axes", c->c, c->axes),
                       c->steps[0] == 99 ? NULL : ints_const("steps", c->c, c->steps)};
    OxNode* n = node_v("Slice", "", 1, ins, 5);
    ok(n, 13);
    expect_f32(n, 0, c->want);
  }
  /* Slice-1: attributes. */
  OxNode* n = NODE("Slice", 1, f32((Shp)SH(2, 10, 20)));
  ATTR_INTS(n, "starts", 0, 1);
  ATTR_INTS(n, "ends", 2, 3);
  ok(n, 9);
  expect_f32(n, 0, (Shp)SH(2, 2, 2));
  /* Unknown starts: the sliced axis is unknown, the other kept. */
  n = NODE("Slice", 1, f32((Shp)SH(2, 10, 20)), vs("s", ONYX_ELEM_INT64, (Shp)SH(1, 1)), INTS(5),
           INTS(1));
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(2, 10, U));
  n = NODE("Slice", 1, f32((Shp)SH(2, 10, 20)), INTS(0), INTS(5), INTS(0), INTS(0));
  fails(n, 13, "'steps' has a 0");
  n = NODE("Slice", 1, f32((Shp)SH(2, 10, 20)), INTS(0, 0), INTS(5, 5), INTS(1, -1));
  fails(n, 13, "repeats axis");
  n = NODE("Slice", 1, f32((Shp)SH(2, 10, 20)), INTS(0), INTS(5), INTS(2));
  fails(n, 13, "out of range");
}

/* --- Squeeze, Unsqueeze, Gather ------------------------------------------------------------------
 */

static void test_squeeze_unsqueeze(void** state) {
  (void)state;
  OxNode* n = NODE("Squeeze", 1, f32((Shp)SH(4, 1, 3, 1, 5)), INTS(-2));
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(3, 1, 3, 5));
  n = NODE("Squeeze", 1, f32((Shp)SH(4, 1, 3, 1, 5)));
  ATTR_INTS(n, "axes", 0);
  ok(n, 11);
  expect_f32(n, 0, (Shp)SH(3, 3, 1, 5));
  n = NODE("Squeeze", 1, f32((Shp)SH(4, 1, 3, 1, 5)));
  ok(n, 21);
  expect_f32(n, 0, (Shp)SH(2, 3, 5));
  n = NODE("Squeeze", 1, f32((Shp)SH(3, 1, U, 5)));
  ok(n, 13);
  expect_f32(n, 0, (Shp)NORANK); /* which dims are 1 is unknown */
  n = NODE("Squeeze", 1, f32((Shp)SH(3, 1, U, 5)), INTS(1));
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(2, 1, 5));
  n = NODE("Squeeze", 1, f32((Shp)SH(4, 1, 3, 1, 5)), INTS(1));
  fails(n, 13, "cannot squeeze axis 1");
  n = NODE("Squeeze", 1, f32((Shp)SH(4, 1, 3, 1, 5)), INTS(4));
  fails(n, 13, "out of range");

  n = NODE("Unsqueeze", 1, f32((Shp)SH(2, 3, 4)), INTS(-1, 0));
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(4, 1, 3, 4, 1));
  n = NODE("Unsqueeze", 1, f32((Shp)SH(2, 3, 4)));
  ATTR_INTS(n, "axes", 1);
  ok(n, 11);
  expect_f32(n, 0, (Shp)SH(3, 3, 1, 4));
  n = NODE("Unsqueeze", 1, f32((Shp)SCALAR), INTS(0));
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(1, 1));
  n = NODE("Unsqueeze", 1, f32((Shp)SH(2, 3, 4)), INTS(0, -4));
  fails(n, 13, "repeats axis");
  n = NODE("Unsqueeze", 1, f32((Shp)SH(2, 3, 4)), INTS(5));
  fails(n, 13, "out of range");
  n = NODE("Unsqueeze", 1, f32((Shp)SH(2, 3, 4)));
  fails(n, 11, "required attribute 'axes'");
}

static void test_gather(void** state) {
  (void)state;
  OxNode* n =
      NODE("Gather", 1, f32((Shp)SH(3, 5, 4, 3)), vs("i", ONYX_ELEM_INT64, (Shp)SH(2, 2, 7)));
  attr_i(n, "axis", 1);
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(4, 5, 2, 7, 3));
  n = NODE("Gather", 1, f32((Shp)SH(3, 5, 4, 3)), vs("i", ONYX_ELEM_INT32, (Shp)SH(2, 2, 7)));
  attr_i(n, "axis", -1);
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(4, 5, 4, 2, 7));
  n = NODE("Gather", 1, f32((Shp)SH(3, 5, 4, 3)), vs("i", ONYX_ELEM_INT64, (Shp)SCALAR));
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(2, 4, 3));
  n = NODE("Gather", 1, f32((Shp)SH(3, 5, 4, 3)), vs("i", ONYX_ELEM_INT64, (Shp)SCALAR));
  attr_i(n, "axis", 3);
  fails(n, 13, "attribute 'axis'");
  n = NODE("Gather", 1, f32((Shp)SH(3, 5, 4, 3)), vs("i", ONYX_ELEM_FLOAT32, (Shp)SCALAR));
  fails(n, 13, "float32");
}

/* --- Reductions and Expand
 * -------------------------------------------------------------------------- */

static void test_reduce(void** state) {
  (void)state;
  OxNode* n = NODE("ReduceSum", 1, f32((Shp)SH(3, 2, 3, 4)), INTS(1));
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(3, 2, 1, 4));
  n = NODE("ReduceSum", 1, f32((Shp)SH(3, 2, 3, 4)), INTS(1, -1));
  attr_i(n, "keepdims", 0);
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(1, 2));
  n = NODE("ReduceSum", 1, f32((Shp)SH(3, 2, 3, 4)));
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(3, 1, 1, 1));
  n = NODE("ReduceSum", 1, f32((Shp)SH(3, 2, 3, 4)));
  attr_i(n, "keepdims", 0);
  ok(n, 13);
  expect_f32(n, 0, (Shp)SCALAR);
  n = NODE("ReduceSum", 1, f32((Shp)SH(3, 2, 3, 4)));
  attr_i(n, "noop_with_empty_axes", 1);
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(3, 2, 3, 4));
  n = NODE("ReduceMean", 1, f32((Shp)SH(3, 2, 3, 4)));
  ATTR_INTS(n, "axes", -1);
  attr_i(n, "keepdims", 0);
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(2, 2, 3));
  n = NODE("ReduceMean", 1, f32((Shp)SH(3, 2, 3, 4)), INTS(0, 2));
  attr_i(n, "keepdims", 0);
  ok(n, 18);
  expect_f32(n, 0, (Shp)SH(1, 3));
  /* ReduceMean took axes as an attribute until 18. */
  n = NODE("ReduceMean", 1, f32((Shp)SH(3, 2, 3, 4)), INTS(0));
  fails(n, 17, "takes 1");
  n = NODE("ReduceMean", 1, f32((Shp)SH(3, 2, 3, 4)));
  ATTR_INTS(n, "axes", 0);
  fails(n, 18, "unknown attribute 'axes'");
  n = NODE("ReduceSum", 1, f32((Shp)SH(3, 2, 3, 4)), INTS(3));
  fails(n, 13, "out of range");
  n = NODE("ReduceSum", 1, f32((Shp)SH(3, 2, 3, 4)), vs("a", ONYX_ELEM_INT64, (Shp)SH(1, 2)));
  attr_i(n, "keepdims", 0);
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(1, U));
}

static void test_expand(void** state) {
  (void)state;
  OxNode* n = NODE("Expand", 1, f32((Shp)SH(2, 3, 1)), INTS(2, 1, 4));
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(3, 2, 3, 4));
  n = NODE("Expand", 1, f32((Shp)SH(1, 3)), INTS(1));
  ok(n, 8);
  expect_f32(n, 0, (Shp)SH(1, 3));
  n = NODE("Expand", 1, f32((Shp)SH(2, 1, 3)), INTS(4, 1));
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(2, 4, 3));
  n = NODE("Expand", 1, f32((Shp)SH(1, 3)), INTS(2));
  fails(n, 13, "broadcast");
  n = NODE("Expand", 1, f32((Shp)SH(1, 3)), vs("s", ONYX_ELEM_INT64, (Shp)SH(1, 3)));
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(3, U, U, U));
}

/* --- The rest: Shape, Cast, constants, normalization, dropout, unary
 * ---------------------------------- */

static void test_misc_ops(void** state) {
  (void)state;
  OxNode* n = NODE("Shape", 1, f32((Shp)SH(4, 2, 3, 4, 5)));
  ok(n, 13);
  expect_shape(n->outputs[0], ONYX_ELEM_INT64, (Shp)SH(1, 4));
  n = NODE("Shape", 1, f32((Shp)SH(4, 2, 3, 4, 5)));
  attr_i(n, "start", 1);
  attr_i(n, "end", -1);
  ok(n, 15);
  expect_shape(n->outputs[0], ONYX_ELEM_INT64, (Shp)SH(1, 2));
  n = NODE("Shape", 1, f32((Shp)SH(4, 2, 3, 4, 5)));
  attr_i(n, "start", -10);
  ok(n, 21);
  expect_shape(n->outputs[0], ONYX_ELEM_INT64, (Shp)SH(1, 4));
  n = NODE("Shape", 1, f32((Shp)NORANK));
  ok(n, 13);
  expect_shape(n->outputs[0], ONYX_ELEM_INT64, (Shp)SH(1, U));

  n = NODE("Cast", 1, vs("a", ONYX_ELEM_INT64, (Shp)SH(2, 2, 3)));
  attr_i(n, "to", ONYX_ELEM_FLOAT32);
  ok(n, 13);
  expect_f32(n, 0, (Shp)SH(2, 2, 3));
  n = NODE("Cast", 1, f32((Shp)SH(1, 3)));
  attr_i(n, "to", ONYX_ELEM_FLOAT8E4M3FN);
  fails(n, 13, "float8"); /* a float8 target arrived at 19 */
  n = NODE("Cast", 1, f32((Shp)SH(1, 3)));
  attr_i(n, "to", 99);
  fails(n, 19, "attribute 'to'");

  n = NODE0("Constant", 1);
  attr_tensor(n, "value", ONYX_ELEM_INT32, 2, D(2, 5));
  ok(n, 13);
  expect_shape(n->outputs[0], ONYX_ELEM_INT32, (Shp)SH(2, 2, 5));
  n = NODE0("Constant", 1);
  attr_f(n, "value_float", 2.5f);
  ok(n, 12);
  expect_f32(n, 0, (Shp)SCALAR);
  n = NODE0("Constant", 1);
  attr_f(n, "value_float", 2.5f);
  fails(n, 11, "unknown attribute 'value_float'");
  n = NODE0("Constant", 1);
  fails(n, 13, "exactly one");

  n = NODE("ConstantOfShape", 1, INTS(2, 3));
  ok(n, 9);
  expect_f32(n, 0, (Shp)SH(2, 2, 3));
  n = NODE("ConstantOfShape", 1, INTS(4));
  attr_tensor(n, "value", ONYX_ELEM_INT32, 1, D(1));
  ok(n, 20);
  expect_shape(n->outputs[0], ONYX_ELEM_INT32, (Shp)SH(1, 4));
  n = NODE("ConstantOfShape", 1, INTS(4, -1));
  fails(n, 20, "negative");

  n = NODE("LayerNormalization", 3, f32((Shp)SH(3, 2, 3, 4)), f32((Shp)SH(1, 4)));
  ok(n, 17);
  expect_f32(n, 0, (Shp)SH(3, 2, 3, 4));
  expect_f32(n, 1, (Shp)SH(3, 2, 3, 1));
  expect_f32(n, 2, (Shp)SH(3, 2, 3, 1));
  n = NODE("LayerNormalization", 2, vs("x", ONYX_ELEM_FLOAT16, (Shp)SH(3, 2, 3, 4)),
           vs("s", ONYX_ELEM_FLOAT16, (Shp)SH(2, 3, 4)));
  attr_i(n, "axis", 1);
  ok(n, 17);
  expect_shape(n->outputs[0], ONYX_ELEM_FLOAT16, (Shp)SH(3, 2, 3, 4));
  expect_f32(n, 1, (Shp)SH(3, 2, 1, 1)); /* stash_type float */
  n = NODE("LayerNormalization", 1, f32((Shp)SH(3, 2, 3, 4)), f32((Shp)SH(1, 4)));
  attr_i(n, "axis", 3);
  fails(n, 17, "attribute 'axis'");

  OxValue* c = f32((Shp)SH(1, 3));
  n = NODE("BatchNormalization", 3, f32((Shp)SH(4, 2, 3, 5, 5)), c, c, c, c);
  attr_i(n, "training_mode", 1);
  ok(n, 15);
  expect_f32(n, 0, (Shp)SH(4, 2, 3, 5, 5));
  expect_f32(n, 1, (Shp)SH(1, 3));
  expect_f32(n, 2, (Shp)SH(1, 3));
  n = NODE("BatchNormalization", 1, f32((Shp)SH(4, 2, 3, 5, 5)), c, c, c, c);
  attr_i(n, "spatial", 1);
  ok(n, 7);
  n = NODE("BatchNormalization", 1, f32((Shp)SH(4, 2, 3, 5, 5)), c, c, c, c);
  attr_i(n, "spatial", 1);
  fails(n, 9, "unknown attribute 'spatial'");

  n = NODE("Dropout", 2, f32((Shp)SH(2, 4, 5)));
  ok(n, 7);
  expect_f32(n, 1, (Shp)SH(2, 4, 5)); /* mask of type T before 10 */
  n = NODE("Dropout", 2, f32((Shp)SH(2, 4, 5)), f32((Shp)SCALAR));
  ok(n, 12);
  expect_shape(n->outputs[1], ONYX_ELEM_BOOL, (Shp)SH(2, 4, 5));

  static const char* const unary[] = {"Relu", "Sigmoid", "Tanh", "Exp",      "Log",    "Sqrt",
                                      "Erf",  "Neg",     "Abs",  "Identity", "Softmax"};
  for (size_t i = 0; i < OX_ARRAY_LEN(unary); i++) {
    n = NODE(unary[i], 1, f32((Shp)SH(3, 2, U, 4)));
    ok(n, 17);
    expect_f32(n, 0, (Shp)SH(3, 2, U, 4));
  }
  n = NODE("Softmax", 1, f32((Shp)SH(2, 3, 4)));
  attr_i(n, "axis", 2);
  fails(n, 13, "attribute 'axis'");
}

/* --- Custom registries ---------------------------------------------------------------------------
 */

static int g_infer_calls;
static OnyxStatus* custom_infer(OnyxInferenceContext* ctx, void* user) {
  g_infer_calls += *(int*)user;
  const OxValue* x = ctx->node->inputs[0];
  int64_t d = x->rank > 0 ? x->dims[0] * 2 : 1;
  return ox_value_set(ctx->node->outputs[0], x->type, 1, &d);
}

static void test_custom_registry(void** state) {
  (void)state;
  OxSchemaRegistry* r = NULL;
  assert_null(ox_schema_registry_create(&r));
  char domain[] = "com.acme", op[] = "Twice", tname[] = "T";
  OnyxFormalParam ins[] = {{"X", tname, ONYX_PARAM_SINGLE}};
  OnyxFormalParam outs[] = {{"Y", tname, ONYX_PARAM_SINGLE}};
  int32_t types[] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT16};
  OnyxTypeConstraint tcs[] = {{tname, types, 2}};
  OnyxAttrDef attrs[] = {{"scale", ONYX_ATTR_FLOAT, 0, 1, 0, 0.5f, NULL},
                         {"mode", ONYX_ATTR_STRING, 0, 1, 0, 0, "fast"},
                         {"k", ONYX_ATTR_INT, 1, 0, 0, 0, NULL}};
  OnyxSchemaDef def = {.struct_size = sizeof def,
                       .domain = domain,
                       .op_type = op,
                       .since_version = 1,
                       .inputs = ins,
                       .input_count = 1,
                       .outputs = outs,
                       .output_count = 1,
                       .type_constraints = tcs,
                       .type_constraint_count = 1,
                       .attrs = attrs,
                       .attr_count = 3};
  assert_null(ox_schema_registry_add(r, &def));
  int inc = 1;
  def.since_version = 3;
  def.infer = custom_infer;
  def.user_data = &inc;
  assert_null(ox_schema_registry_add(r, &def));
  /* The registry copied everything: scribbling over the originals changes nothing. */
  strcpy(domain, "xx.xxxx");
  strcpy(op, "Xxxxx");
  tname[0] = 'Z';
  types[0] = ONYX_ELEM_INT8;

  const char* why;
  assert_null(ox_schema_lookup(r, "com.acme", "Twice", 0, &why));
  assert_string_equal(why, "'Twice' is defined from version 1; the model imports version 0");
  const OxSchema* s1 = ox_schema_lookup(r, "com.acme", "Twice", 2, NULL);
  assert_non_null(s1);
  assert_int_equal(s1->since_version, 1);
  assert_string_equal(s1->inputs[0].tc, "T");
  assert_int_equal(ox_schema_tc_allowed(s1, "T"),
                   OX_T(ONYX_ELEM_FLOAT32) | OX_T(ONYX_ELEM_FLOAT16));
  const OxSchema* s3 = ox_schema_lookup(r, "com.acme", "Twice", 9, NULL);
  assert_int_equal(s3->since_version, 3);
  /* Built-in ops stay reachable through a custom registry. */
  assert_non_null(ox_schema_lookup(r, "", "Relu", 14, NULL));

  /* v1: default inference (type from the input, unknown shape), defaults filled. */
  OxNode* n = node_v("Twice", "com.acme", 1, (OxValue*[]){f32((Shp)SH(1, 4))}, 1);
  attr_i(n, "k", 2);
  attr_i(n, "extra", 7); /* custom schemas accept attributes they do not list */
  n->schema = s1;
  assert_null(ox_schema_check_node(s1, n));
  assert_float_equal(find_attr(n, "scale")->f, 0.5f, 0);
  assert_string_equal(find_attr(n, "mode")->s, "fast");
  assert_null(ox_schema_infer(s1, n));
  expect_f32(n, 0, (Shp)NORANK);
  /* Missing required attribute. */
  n = node_v("Twice", "com.acme", 1, (OxValue*[]){f32((Shp)SH(1, 4))}, 1);
  OnyxStatus* st = ox_schema_check_node(s1, n);
  assert_non_null(st);
  assert_non_null(strstr(st->message, "required attribute 'k'"));
  ox_status_free(st);
  /* v3: the ABI inference runs with its user data. */
  n = node_v("Twice", "com.acme", 1, (OxValue*[]){f32((Shp)SH(1, 4))}, 1);
  attr_i(n, "k", 2);
  n->schema = s3;
  g_infer_calls = 0;
  assert_null(ox_schema_check_node(s3, n));
  assert_null(ox_schema_infer(s3, n));
  assert_int_equal(g_infer_calls, 1);
  expect_f32(n, 0, (Shp)SH(1, 8));
  /* The constraint is enforced on custom ops too. */
  n = node_v("Twice", "com.acme", 1, (OxValue*[]){vs("i", ONYX_ELEM_INT8, (Shp)SH(1, 4))}, 1);
  n->schema = s3;
  st = ox_schema_infer(s3, n);
  assert_non_null(st);
  assert_non_null(strstr(st->message, "int8"));
  ox_status_free(st);

  /* Refusals. */
  def.since_version = 3;
  def.domain = "com.acme";
  def.op_type = "Twice";
  st = ox_schema_registry_add(r, &def);
  assert_non_null(st);
  assert_non_null(strstr(st->message, "already registered"));
  ox_status_free(st);
  static const char* const onnx_domains[] = {"", "ai.onnx"};
  for (size_t i = 0; i < 2; i++) {
    def.domain = onnx_domains[i];
    st = ox_schema_registry_add(r, &def);
    assert_non_null(st);
    assert_non_null(strstr(st->message, "belongs to ONNX"));
    ox_status_free(st);
  }
  def.domain = "com.acme";
  def.since_version = 4;
  def.struct_size = 8;
  st = ox_schema_registry_add(r, &def);
  assert_non_null(st);
  ox_status_free(st);
  def.struct_size = sizeof def;
  OnyxFormalParam bad[] = {{"A", "T", ONYX_PARAM_VARIADIC}, {"B", "T", ONYX_PARAM_SINGLE}};
  def.inputs = bad;
  def.input_count = 2;
  st = ox_schema_registry_add(r, &def);
  assert_non_null(st);
  assert_non_null(strstr(st->message, "variadic"));
  ox_status_free(st);
  assert_int_equal(ox_schema_lookup(r, "com.acme", "Twice", 9, NULL)->since_version, 3);
  ox_schema_registry_free(r);
  ox_schema_registry_free(NULL);
}

#define T(f) cmocka_unit_test_teardown(f, cleanup)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(test_lookup_versions),
      T(test_lookup_messages),
      T(test_table_consistent),
      T(test_lookup_threads),
      T(test_constraint_queries),
      T(test_defaults_filled),
      T(test_attr_errors),
      T(test_arity),
      T(test_type_errors),
      T(test_broadcast),
      T(test_matmul),
      T(test_gemm),
      T(test_conv_pool),
      T(test_conv_pool_errors),
      T(test_reshape),
      T(test_flatten_transpose),
      T(test_concat),
      T(test_split),
      T(test_slice),
      T(test_squeeze_unsqueeze),
      T(test_gather),
      T(test_reduce),
      T(test_expand),
      T(test_misc_ops),
      T(test_custom_registry),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
