/* test_tensor_ops.c — the tensor op family of the CPU provider (reductions,
 * ArgMax/ArgMin, index ops, Pad, TopK, Einsum, ...) through the public API,
 * table-driven: each case is one node, its inputs and either the expected
 * outputs or the expected error. Expected values were worked out by hand
 * from the ONNX spec or computed with numpy (noted per case), never taken
 * from our own output. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "onyx/onyx.h"
#include "ox_test_models.h"

#define MAXV 4 /* inputs or outputs per case */

typedef struct TVal {
  const char* name;
  int type;
  int rank;
  int64_t dims[4];
  const void* data; /* NULL with rank 0 and type 0: no such value */
} TVal;

typedef struct TAttr {
  const char* name;
  char kind; /* 'i' int, 's' string, 'I' ints, 'f' float */
  int64_t i;
  const char* s;
  size_t n;
  const int64_t* ints;
  float f;
} TAttr;

typedef struct TCase {
  const char* label;
  int64_t opset;
  const char* op;
  const char* node_inputs; /* may hold "" for an absent optional input */
  TVal in[MAXV];
  TAttr attrs[4];
  TVal out[MAXV];
  const char* err; /* expected error text; NULL: success */
} TCase;

#define F32     ONYX_ELEM_FLOAT32
#define I64     ONYX_ELEM_INT64
#define I32     ONYX_ELEM_INT32
#define U32     ONYX_ELEM_UINT32
#define BOOL    ONYX_ELEM_BOOL
#define F16     ONYX_ELEM_FLOAT16
#define STR     ONYX_ELEM_STRING
#define SA(...) ((const char* const[]){__VA_ARGS__})
#define FA(...) ((const float[]){__VA_ARGS__})
#define LA(...) ((const int64_t[]){__VA_ARGS__})
#define IA(...) ((const int32_t[]){__VA_ARGS__})
#define UA(...) ((const uint32_t[]){__VA_ARGS__})
#define BA(...) ((const uint8_t[]){__VA_ARGS__})
#define HA(...) ((const uint16_t[]){__VA_ARGS__})
#define AINT(n, v)                                                                                 \
  { n, 'i', v, NULL, 0, NULL, 0 }
#define ASTR(n, v)                                                                                 \
  { n, 's', 0, v, 0, NULL, 0 }
#define AINTS(n, c, ...)                                                                           \
  { n, 'I', 0, NULL, c, LA(__VA_ARGS__), 0 }

static const float NaN_ = NAN;
static const float INF_ = INFINITY;

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static size_t count_of(const TVal* v) {
  size_t n = 1;
  for (int d = 0; d < v->rank; d++)
    n *= (size_t)v->dims[d];
  return n;
}

static size_t elem_size(int type) {
  switch (type) {
  case ONYX_ELEM_FLOAT64:
  case ONYX_ELEM_INT64:
  case ONYX_ELEM_UINT64:
    return 8;
  case ONYX_ELEM_FLOAT32:
  case ONYX_ELEM_INT32:
  case ONYX_ELEM_UINT32:
    return 4;
  case ONYX_ELEM_STRING:
    return sizeof(const char*);
  case ONYX_ELEM_FLOAT16:
  case ONYX_ELEM_BFLOAT16:
  case ONYX_ELEM_INT16:
  case ONYX_ELEM_UINT16:
    return 2;
  default:
    return 1;
  }
}

/* Builds the one-node model of a case; graph inputs for every input. */
static OxTestModel* case_model(const TCase* c) {
  OxTestModel* m = otm_new(c->opset);
  for (int i = 0; i < MAXV && c->in[i].name; i++)
    otm_input(m, c->in[i].name, c->in[i].type, c->in[i].rank, c->in[i].dims);
  char outs[64] = "";
  for (int i = 0; i < MAXV && c->out[i].name; i++) {
    if (i) strcat(outs, ",");
    strcat(outs, c->out[i].name);
    otm_output(m, c->out[i].name, c->out[i].type, -1, NULL);
  }
  OxTestNode* n = otm_node(m, c->op, "node_under_test", c->node_inputs, outs);
  for (int i = 0; i < 4 && c->attrs[i].name; i++) {
    const TAttr* a = &c->attrs[i];
    if (a->kind == 'i') otm_attr_int(n, a->name, a->i);
    if (a->kind == 's') otm_attr_string(n, a->name, a->s);
    if (a->kind == 'I') otm_attr_ints(n, a->name, a->n, a->ints);
    if (a->kind == 'f') otm_attr_float(n, a->name, a->f);
  }
  return m;
}

static void check_output(const TCase* c, const TVal* e, const OnyxTensor* t) {
  if ((int)onyx_tensor_elem_type(t) != e->type)
    fail_msg("%s: output %s has type %d, expected %d", c->label, e->name, onyx_tensor_elem_type(t),
             e->type);
  if ((int)onyx_tensor_rank(t) != e->rank)
    fail_msg("%s: output %s has rank %zu, expected %d", c->label, e->name, onyx_tensor_rank(t),
             e->rank);
  for (int d = 0; d < e->rank; d++)
    if (onyx_tensor_dims(t)[d] != e->dims[d])
      fail_msg("%s: output %s dim %d is %lld, expected %lld", c->label, e->name, d,
               (long long)onyx_tensor_dims(t)[d], (long long)e->dims[d]);
  size_t n = count_of(e);
  const void* got = onyx_tensor_data(t);
  for (size_t i = 0; i < n; i++) {
    if (e->type == ONYX_ELEM_STRING) {
      const char* g = ((const char* const*)got)[i];
      const char* x = ((const char* const*)e->data)[i];
      if (strcmp(g ? g : "", x))
        fail_msg("%s: %s[%zu] = '%s', expected '%s'", c->label, e->name, i, g, x);
    } else if (e->type == F32) {
      float g = ((const float*)got)[i], x = ((const float*)e->data)[i];
      bool same = (isnan(g) && isnan(x)) || g == x || fabsf(g - x) <= 1e-5f * (1 + fabsf(x));
      if (!same) fail_msg("%s: %s[%zu] = %g, expected %g", c->label, e->name, i, g, x);
    } else {
      size_t es = elem_size(e->type);
      if (memcmp((const char*)got + i * es, (const char*)e->data + i * es, es))
        fail_msg("%s: %s[%zu] differs from the expected value", c->label, e->name, i);
    }
  }
}

static void run_case(const TCase* c) {
  OxTestModel* m = case_model(c);
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s);
  free(bytes);
  OnyxValue* in[MAXV] = {NULL};
  OnyxValue* out[MAXV] = {NULL};
  const char* in_names[MAXV];
  const char* out_names[MAXV];
  size_t n_in = 0, n_out = 0;
  for (; n_in < MAXV && c->in[n_in].name; n_in++) {
    const TVal* v = &c->in[n_in];
    in_names[n_in] = v->name;
    size_t bytes_n = count_of(v) * elem_size(v->type);
    ok(onyx_value_create_tensor(v->type, v->dims, (size_t)v->rank, v->data, bytes_n, &in[n_in]));
  }
  for (; n_out < MAXV && c->out[n_out].name; n_out++)
    out_names[n_out] = c->out[n_out].name;
  if (!st)
    st = onyx_session_run(s, NULL, in_names, (const OnyxValue* const*)in, n_in, out_names, n_out,
                          out);
  if (c->err) {
    if (!st) fail_msg("%s: expected an error containing '%s', got success", c->label, c->err);
    const char* msg = onyx_status_message(st);
    if (!strstr(msg, c->err)) fail_msg("%s: '%s' not in '%s'", c->label, c->err, msg);
    if (!strstr(msg, "node_under_test"))
      fail_msg("%s: the error does not name the node: %s", c->label, msg);
    onyx_status_release(st);
  } else {
    if (st) fail_msg("%s: unexpected error: %s", c->label, onyx_status_message(st));
    for (size_t i = 0; i < n_out; i++)
      check_output(c, &c->out[i], onyx_value_tensor(out[i]));
    onyx_values_release(out, n_out);
  }
  for (size_t i = 0; i < n_in; i++)
    onyx_value_release(in[i]);
  onyx_session_release(s);
}

static void run_table(const TCase* cases, size_t n) {
  for (size_t i = 0; i < n; i++)
    run_case(&cases[i]);
}

#define TABLE_TEST(fn, table)                                                                      \
  static void fn(void** state) {                                                                   \
    (void)state;                                                                                   \
    run_table(table, sizeof(table) / sizeof((table)[0]));                                          \
  }

/* --- Reductions: negative axes, empty tensors, NaN, types ------------------------------------ */
static const TCase reduce_cases[] = {
    {"ReduceMax axes=-1",
     18,
     "ReduceMax",
     "x,axes",
     {{"x", F32, 2, {2, 3}, FA(1, 5, 2, 7, 0, 3)}, {"axes", I64, 1, {1}, LA(-1)}},
     {AINT("keepdims", 0)},
     {{"y", F32, 1, {2}, FA(5, 7)}},
     NULL},
    {"ReduceMin axes=-2 keepdims",
     18,
     "ReduceMin",
     "x,axes",
     {{"x", F32, 2, {2, 3}, FA(1, 5, 2, 7, 0, 3)}, {"axes", I64, 1, {1}, LA(-2)}},
     {{0}},
     {{"y", F32, 2, {1, 3}, FA(1, 0, 2)}},
     NULL},
    {"ReduceMax propagates NaN",
     18,
     "ReduceMax",
     "x",
     {{"x", F32, 1, {3}, FA(1, NAN, 3)}},
     {AINT("keepdims", 0)},
     {{"y", F32, 0, {0}, &NaN_}},
     NULL},
    /* empty set: sum of squares 0, product 1, min +inf, log-sum-exp -inf */
    {"ReduceSumSquare empty",
     18,
     "ReduceSumSquare",
     "x,axes",
     {{"x", F32, 2, {2, 0}, FA(0)}, {"axes", I64, 1, {1}, LA(1)}},
     {{0}},
     {{"y", F32, 2, {2, 1}, FA(0, 0)}},
     NULL},
    {"ReduceProd empty",
     18,
     "ReduceProd",
     "x,axes",
     {{"x", F32, 2, {2, 0}, FA(0)}, {"axes", I64, 1, {1}, LA(-1)}},
     {AINT("keepdims", 0)},
     {{"y", F32, 1, {2}, FA(1, 1)}},
     NULL},
    {"ReduceMin empty",
     18,
     "ReduceMin",
     "x,axes",
     {{"x", F32, 2, {0, 2}, FA(0)}, {"axes", I64, 1, {1}, LA(0)}},
     {AINT("keepdims", 0)},
     {{"y", F32, 1, {2}, FA(INFINITY, INFINITY)}},
     NULL},
    {"ReduceLogSumExp empty",
     18,
     "ReduceLogSumExp",
     "x,axes",
     {{"x", F32, 2, {1, 0}, FA(0)}, {"axes", I64, 1, {1}, LA(1)}},
     {AINT("keepdims", 0)},
     {{"y", F32, 1, {1}, FA(-INFINITY)}},
     NULL},
    {"ReduceSum of an empty tensor keeps the empty dim",
     13,
     "ReduceSum",
     "x,axes",
     {{"x", F32, 2, {0, 3}, FA(0)}, {"axes", I64, 1, {1}, LA(1)}},
     {{0}},
     {{"y", F32, 2, {0, 1}, FA(0)}},
     NULL},
    /* log(e^1 + e^2 + e^3) = 3.40760596 (numpy) */
    {"ReduceLogSumExp",
     18,
     "ReduceLogSumExp",
     "x",
     {{"x", F32, 1, {3}, FA(1, 2, 3)}},
     {AINT("keepdims", 0)},
     {{"y", F32, 0, {0}, FA(3.40760596f)}},
     NULL},
    {"ReduceL1 attribute axes (opset 13)",
     13,
     "ReduceL1",
     "x",
     {{"x", F32, 2, {2, 2}, FA(-1, 2, -3, 4)}},
     {AINTS("axes", 1, -1)},
     {{"y", F32, 2, {2, 1}, FA(3, 7)}},
     NULL},
    {"ReduceL2 int32",
     18,
     "ReduceL2",
     "x",
     {{"x", I32, 1, {2}, IA(3, -4)}},
     {AINT("keepdims", 0)},
     {{"y", I32, 0, {0}, IA(5)}},
     NULL},
    {"ReduceMean uint32 truncates",
     18,
     "ReduceMean",
     "x",
     {{"x", U32, 1, {3}, UA(1, 2, 4)}},
     {AINT("keepdims", 0)},
     {{"y", U32, 0, {0}, UA(2)}},
     NULL},
    {"ReduceSum float16",
     13,
     "ReduceSum",
     "x",
     {{"x", F16, 1, {2}, HA(0x3E00, 0x4100)}}, /* 1.5, 2.5 */
     {AINT("keepdims", 0)},
     {{"y", F16, 0, {0}, HA(0x4400)}},
     NULL}, /* 4.0 */
    {"ReduceMin bool (opset 20)",
     20,
     "ReduceMin",
     "x",
     {{"x", BOOL, 1, {3}, BA(1, 0, 1)}},
     {AINT("keepdims", 0)},
     {{"y", BOOL, 0, {0}, BA(0)}},
     NULL},
    {"ReduceMax int32 negative",
     18,
     "ReduceMax",
     "x",
     {{"x", I32, 1, {3}, IA(-7, -2, -9)}},
     {AINT("keepdims", 0)},
     {{"y", I32, 0, {0}, IA(-2)}},
     NULL},
    /* noop_with_empty_axes: a reduction over no axes (ONNX reference: np.square for
     * ReduceSumSquare, the input itself for ReduceSum) */
    {"noop ReduceSumSquare",
     18,
     "ReduceSumSquare",
     "x",
     {{"x", F32, 1, {2}, FA(2, -3)}},
     {AINT("noop_with_empty_axes", 1)},
     {{"y", F32, 1, {2}, FA(4, 9)}},
     NULL},
    {"noop ReduceSum with an empty axes input",
     18,
     "ReduceSum",
     "x,axes",
     {{"x", I64, 1, {2}, LA(2, -3)}, {"axes", I64, 1, {0}, LA(0)}},
     {AINT("noop_with_empty_axes", 1)},
     {{"y", I64, 1, {2}, LA(2, -3)}},
     NULL},
    {"axis out of range",
     18,
     "ReduceMax",
     "x,axes",
     {{"x", F32, 1, {3}, FA(1, 2, 3)}, {"axes", I64, 1, {1}, LA(1)}},
     {{0}},
     {{"y", F32, -1, {0}, NULL}},
     "out of range"},
};
TABLE_TEST(test_reductions, reduce_cases)

/* --- ArgMax / ArgMin: NaN is the max and the min (numpy), ties, last index ----------------- */
static const TCase arg_cases[] = {
    {"ArgMax NaN first",
     13,
     "ArgMax",
     "x",
     {{"x", F32, 1, {4}, FA(1, NAN, 5, NAN)}},
     {AINT("keepdims", 0)},
     {{"y", I64, 0, {0}, LA(1)}},
     NULL},
    {"ArgMax NaN last",
     13,
     "ArgMax",
     "x",
     {{"x", F32, 1, {4}, FA(1, NAN, 5, NAN)}},
     {AINT("keepdims", 0), AINT("select_last_index", 1)},
     {{"y", I64, 0, {0}, LA(3)}},
     NULL},
    {"ArgMin NaN",
     13,
     "ArgMin",
     "x",
     {{"x", F32, 1, {3}, FA(1, NAN, -5)}},
     {AINT("keepdims", 0)},
     {{"y", I64, 0, {0}, LA(1)}},
     NULL},
    {"ArgMax ties",
     13,
     "ArgMax",
     "x",
     {{"x", F32, 1, {3}, FA(2, 5, 5)}},
     {{0}},
     {{"y", I64, 1, {1}, LA(1)}},
     NULL},
    {"ArgMax ties, last",
     13,
     "ArgMax",
     "x",
     {{"x", F32, 1, {3}, FA(2, 5, 5)}},
     {AINT("select_last_index", 1)},
     {{"y", I64, 1, {1}, LA(2)}},
     NULL},
    {"ArgMin axis -1 int32",
     13,
     "ArgMin",
     "x",
     {{"x", I32, 2, {2, 3}, IA(4, -1, 3, 0, 0, -2)}},
     {AINT("axis", -1), AINT("keepdims", 0)},
     {{"y", I64, 1, {2}, LA(1, 2)}},
     NULL},
    {"ArgMax of an empty axis",
     13,
     "ArgMax",
     "x",
     {{"x", F32, 2, {2, 0}, FA(0)}},
     {AINT("axis", 1)},
     {{"y", I64, -1, {0}, NULL}},
     "empty axis"},
};
TABLE_TEST(test_argmax_argmin, arg_cases)

/* --- Out-of-range indices: errors naming the node, never a bad read ------------------------- */
static const TCase index_error_cases[] = {
    {"Gather",
     13,
     "Gather",
     "x,i",
     {{"x", F32, 1, {3}, FA(1, 2, 3)}, {"i", I64, 1, {1}, LA(3)}},
     {{0}},
     {{"y", F32, -1, {0}, NULL}},
     "out of range"},
    {"GatherElements",
     13,
     "GatherElements",
     "x,i",
     {{"x", F32, 2, {2, 2}, FA(1, 2, 3, 4)}, {"i", I64, 2, {2, 1}, LA(0, -3)}},
     {AINT("axis", 1)},
     {{"y", F32, -1, {0}, NULL}},
     "out of range"},
    {"GatherND",
     13,
     "GatherND",
     "x,i",
     {{"x", F32, 2, {2, 2}, FA(1, 2, 3, 4)}, {"i", I64, 2, {1, 2}, LA(1, 2)}},
     {{0}},
     {{"y", F32, -1, {0}, NULL}},
     "out of range"},
    {"ScatterElements",
     16,
     "ScatterElements",
     "x,i,u",
     {{"x", F32, 1, {3}, FA(1, 2, 3)}, {"i", I64, 1, {1}, LA(5)}, {"u", F32, 1, {1}, FA(9)}},
     {{0}},
     {{"y", F32, -1, {0}, NULL}},
     "out of range"},
    {"ScatterND",
     16,
     "ScatterND",
     "x,i,u",
     {{"x", F32, 1, {3}, FA(1, 2, 3)}, {"i", I64, 2, {1, 1}, LA(-4)}, {"u", F32, 1, {1}, FA(9)}},
     {{0}},
     {{"y", F32, -1, {0}, NULL}},
     "out of range"},
    {"TensorScatter linear write past the end",
     24,
     "TensorScatter",
     "p,u,w",
     {{"p", F32, 3, {1, 2, 1}, FA(0, 0)},
      {"u", F32, 3, {1, 1, 1}, FA(5)},
      {"w", I64, 1, {1}, LA(2)}},
     {AINT("axis", 1)},
     {{"y", F32, -1, {0}, NULL}},
     "outside the cache"},
    {"ReverseSequence length beyond time",
     10,
     "ReverseSequence",
     "x,l",
     {{"x", F32, 2, {2, 1}, FA(1, 2)}, {"l", I64, 1, {1}, LA(3)}},
     {{0}},
     {{"y", F32, -1, {0}, NULL}},
     "outside"},
    {"TopK K beyond the axis",
     11,
     "TopK",
     "x,k",
     {{"x", F32, 1, {2}, FA(1, 2)}, {"k", I64, 1, {1}, LA(3)}},
     {{0}},
     {{"v", F32, -1, {0}, NULL}, {"i", I64, -1, {0}, NULL}},
     "out of range"},
};
TABLE_TEST(test_index_errors, index_error_cases)

/* --- Index ops with values -------------------------------------------------------------- */
static const TCase index_cases[] = {
    {"GatherElements negative index",
     13,
     "GatherElements",
     "x,i",
     {{"x", F32, 2, {2, 2}, FA(1, 2, 3, 4)}, {"i", I64, 2, {2, 2}, LA(0, -1, 1, 0)}},
     {AINT("axis", 1)},
     {{"y", F32, 2, {2, 2}, FA(1, 2, 4, 3)}},
     NULL},
    {"ScatterElements add with duplicates",
     16,
     "ScatterElements",
     "x,i,u",
     {{"x", F32, 1, {3}, FA(1, 2, 3)},
      {"i", I64, 1, {3}, LA(0, 0, -1)},
      {"u", F32, 1, {3}, FA(10, 20, 30)}},
     {ASTR("reduction", "add")},
     {{"y", F32, 1, {3}, FA(31, 2, 33)}},
     NULL},
    {"ScatterElements max",
     18,
     "ScatterElements",
     "x,i,u",
     {{"x", F32, 1, {2}, FA(5, 5)}, {"i", I64, 1, {2}, LA(0, 1)}, {"u", F32, 1, {2}, FA(7, 1)}},
     {ASTR("reduction", "max")},
     {{"y", F32, 1, {2}, FA(7, 5)}},
     NULL},
    {"GatherND batch_dims=1",
     13,
     "GatherND",
     "x,i",
     {{"x", F32, 2, {2, 3}, FA(1, 2, 3, 4, 5, 6)}, {"i", I64, 2, {2, 1}, LA(2, 0)}},
     {AINT("batch_dims", 1)},
     {{"y", F32, 1, {2}, FA(3, 4)}},
     NULL},
    {"ScatterND mul",
     18,
     "ScatterND",
     "x,i,u",
     {{"x", F32, 2, {2, 2}, FA(1, 2, 3, 4)},
      {"i", I64, 2, {2, 1}, LA(1, 1)},
      {"u", F32, 2, {2, 2}, FA(2, 3, 10, 10)}},
     {ASTR("reduction", "mul")},
     {{"y", F32, 2, {2, 2}, FA(1, 2, 60, 120)}},
     NULL},
    {"OneHot out of range is all off (spec)",
     11,
     "OneHot",
     "i,d,v",
     {{"i", I64, 1, {3}, LA(1, -1, 5)}, {"d", I64, 0, {0}, LA(3)}, {"v", F32, 1, {2}, FA(0, 1)}},
     {{0}},
     {{"y", F32, 2, {3, 3}, FA(0, 1, 0, 0, 0, 1, 0, 0, 0)}},
     NULL},
    {"TensorScatter circular",
     24,
     "TensorScatter",
     "p,u,w",
     {{"p", F32, 3, {1, 3, 1}, FA(0, 0, 0)},
      {"u", F32, 3, {1, 2, 1}, FA(5, 6)},
      {"w", I64, 1, {1}, LA(2)}},
     {AINT("axis", 1), ASTR("mode", "circular")},
     {{"y", F32, 3, {1, 3, 1}, FA(6, 0, 5)}},
     NULL},
    {"Compress empty selection",
     11,
     "Compress",
     "x,c",
     {{"x", F32, 2, {2, 2}, FA(1, 2, 3, 4)}, {"c", BOOL, 1, {2}, BA(0, 0)}},
     {AINT("axis", 0)},
     {{"y", F32, 2, {0, 2}, FA(0)}},
     NULL},
    {"NonZero all zero",
     13,
     "NonZero",
     "x",
     {{"x", F32, 1, {3}, FA(0, 0, 0)}},
     {{0}},
     {{"y", I64, 2, {1, 0}, LA(0)}},
     NULL},
    {"NonZero 2-D",
     13,
     "NonZero",
     "x",
     {{"x", I32, 2, {2, 2}, IA(0, 3, 4, 0)}},
     {{0}},
     {{"y", I64, 2, {2, 2}, LA(0, 1, 1, 0)}},
     NULL},
    /* numpy.unique([2,1,1,3,4,3], return_index, return_inverse, return_counts) */
    {"Unique sorted",
     11,
     "Unique",
     "x",
     {{"x", F32, 1, {6}, FA(2, 1, 1, 3, 4, 3)}},
     {{0}},
     {{"y", F32, 1, {4}, FA(1, 2, 3, 4)},
      {"idx", I64, 1, {4}, LA(1, 0, 3, 4)},
      {"inv", I64, 1, {6}, LA(1, 0, 0, 2, 3, 2)},
      {"cnt", I64, 1, {4}, LA(2, 1, 2, 1)}},
     NULL},
    {"Unique unsorted",
     11,
     "Unique",
     "x",
     {{"x", F32, 1, {6}, FA(2, 1, 1, 3, 4, 3)}},
     {AINT("sorted", 0)},
     {{"y", F32, 1, {4}, FA(2, 1, 3, 4)},
      {"idx", I64, 1, {4}, LA(0, 1, 3, 4)},
      {"inv", I64, 1, {6}, LA(0, 1, 1, 2, 3, 2)},
      {"cnt", I64, 1, {4}, LA(1, 2, 2, 1)}},
     NULL},
    {"Unique axis=0 rows",
     11,
     "Unique",
     "x",
     {{"x", I64, 2, {3, 2}, LA(1, 2, 0, 5, 1, 2)}},
     {AINT("axis", 0)},
     {{"y", I64, 2, {2, 2}, LA(0, 5, 1, 2)}, {"idx", I64, 1, {2}, LA(1, 0)}},
     NULL},
};
TABLE_TEST(test_index_values, index_cases)

/* --- TopK: ties go to the lower index ----------------------------------------------------- */
static const TCase topk_cases[] = {
    {"largest with ties",
     11,
     "TopK",
     "x,k",
     {{"x", F32, 1, {5}, FA(3, 1, 3, 2, 3)}, {"k", I64, 1, {1}, LA(2)}},
     {{0}},
     {{"v", F32, 1, {2}, FA(3, 3)}, {"i", I64, 1, {2}, LA(0, 2)}},
     NULL},
    {"smallest with ties",
     11,
     "TopK",
     "x,k",
     {{"x", F32, 1, {5}, FA(3, 1, 3, 1, 3)}, {"k", I64, 1, {1}, LA(3)}},
     {AINT("largest", 0)},
     {{"v", F32, 1, {3}, FA(1, 1, 3)}, {"i", I64, 1, {3}, LA(1, 3, 0)}},
     NULL},
    {"axis 0 of 2-D",
     11,
     "TopK",
     "x,k",
     {{"x", I64, 2, {3, 2}, LA(1, 9, 7, 9, 7, 0)}, {"k", I64, 1, {1}, LA(2)}},
     {AINT("axis", 0)},
     {{"v", I64, 2, {2, 2}, LA(7, 9, 7, 9)}, {"i", I64, 2, {2, 2}, LA(1, 0, 2, 1)}},
     NULL},
    {"k = 0",
     11,
     "TopK",
     "x,k",
     {{"x", F32, 1, {2}, FA(1, 2)}, {"k", I64, 1, {1}, LA(0)}},
     {{0}},
     {{"v", F32, 1, {0}, FA(0)}, {"i", I64, 1, {0}, LA(0)}},
     NULL},
};
TABLE_TEST(test_topk, topk_cases)

/* --- Pad modes on small inputs (numpy.pad for reflect/edge/wrap) ----------------------------- */
static const TCase pad_cases[] = {
    {"constant",
     13,
     "Pad",
     "x,p,c",
     {{"x", F32, 1, {3}, FA(1, 2, 3)}, {"p", I64, 1, {2}, LA(2, 2)}, {"c", F32, 0, {0}, FA(9)}},
     {{0}},
     {{"y", F32, 1, {7}, FA(9, 9, 1, 2, 3, 9, 9)}},
     NULL},
    {"reflect",
     13,
     "Pad",
     "x,p",
     {{"x", F32, 1, {3}, FA(1, 2, 3)}, {"p", I64, 1, {2}, LA(2, 2)}},
     {ASTR("mode", "reflect")},
     {{"y", F32, 1, {7}, FA(3, 2, 1, 2, 3, 2, 1)}},
     NULL},
    {"edge",
     13,
     "Pad",
     "x,p",
     {{"x", F32, 1, {3}, FA(1, 2, 3)}, {"p", I64, 1, {2}, LA(2, 2)}},
     {ASTR("mode", "edge")},
     {{"y", F32, 1, {7}, FA(1, 1, 1, 2, 3, 3, 3)}},
     NULL},
    {"wrap",
     19,
     "Pad",
     "x,p",
     {{"x", F32, 1, {3}, FA(1, 2, 3)}, {"p", I64, 1, {2}, LA(2, 2)}},
     {ASTR("mode", "wrap")},
     {{"y", F32, 1, {7}, FA(2, 3, 1, 2, 3, 1, 2)}},
     NULL},
    {"negative pads crop",
     13,
     "Pad",
     "x,p",
     {{"x", F32, 1, {3}, FA(1, 2, 3)}, {"p", I64, 1, {2}, LA(-1, 1)}},
     {{0}},
     {{"y", F32, 1, {3}, FA(2, 3, 0)}},
     NULL},
    {"axes input (opset 18), negative axis",
     18,
     "Pad",
     "x,p,,a",
     {{"x", F32, 2, {2, 2}, FA(1, 2, 3, 4)},
      {"p", I64, 1, {2}, LA(1, 0)},
      {"a", I64, 1, {1}, LA(-1)}},
     {{0}},
     {{"y", F32, 2, {2, 3}, FA(0, 1, 2, 0, 3, 4)}},
     NULL},
    {"int32 edge 2-D",
     13,
     "Pad",
     "x,p",
     {{"x", I32, 2, {1, 2}, IA(5, 6)}, {"p", I64, 1, {4}, LA(1, 0, 0, 1)}},
     {ASTR("mode", "edge")},
     {{"y", I32, 2, {2, 3}, IA(5, 6, 6, 5, 6, 6)}},
     NULL},
    {"reflect of an empty axis",
     13,
     "Pad",
     "x,p",
     {{"x", F32, 1, {0}, FA(0)}, {"p", I64, 1, {2}, LA(1, 1)}},
     {ASTR("mode", "reflect")},
     {{"y", F32, -1, {0}, NULL}},
     "empty axis"},
    {"pads of the wrong length",
     13,
     "Pad",
     "x,p",
     {{"x", F32, 1, {3}, FA(1, 2, 3)}, {"p", I64, 1, {3}, LA(1, 1, 1)}},
     {{0}},
     {{"y", F32, -1, {0}, NULL}},
     "pads has 3 values"},
};
TABLE_TEST(test_pad, pad_cases)

/* --- Einsum equations against numpy.einsum ---------------------------------------------------- */
#define EQ(e)                                                                                      \
  { ASTR("equation", e) }
static const TCase einsum_cases[] = {
    {"ij,jk->ik",
     12,
     "Einsum",
     "a,b",
     {{"a", F32, 2, {2, 3}, FA(-2, -1, 0, 1, 2, 3)},
      {"b", F32, 2, {3, 2}, FA(1, -1, 2, 0.5, 3, 1)}},
     EQ("ij,jk->ik"),
     {{"y", F32, 2, {2, 2}, FA(-4, 1.5, 14, 3)}},
     NULL},
    {"ii->i",
     12,
     "Einsum",
     "a",
     {{"a", F32, 2, {3, 3}, FA(1, 2, 3, 4, 5, 6, 7, 8, 9)}},
     EQ("ii->i"),
     {{"y", F32, 1, {3}, FA(1, 5, 9)}},
     NULL},
    {"ii (implicit trace)",
     12,
     "Einsum",
     "a",
     {{"a", F32, 2, {3, 3}, FA(1, 2, 3, 4, 5, 6, 7, 8, 9)}},
     EQ("ii"),
     {{"y", F32, 0, {0}, FA(15)}},
     NULL},
    {"ij-> (sum)",
     12,
     "Einsum",
     "a",
     {{"a", F32, 2, {2, 3}, FA(-2, -1, 0, 1, 2, 3)}},
     EQ("ij->"),
     {{"y", F32, 0, {0}, FA(3)}},
     NULL},
    {"ba (implicit transpose)",
     12,
     "Einsum",
     "a",
     {{"a", F32, 2, {2, 3}, FA(-2, -1, 0, 1, 2, 3)}},
     EQ("ba"),
     {{"y", F32, 2, {3, 2}, FA(-2, 1, -1, 2, 0, 3)}},
     NULL},
    {"i,j (implicit outer)",
     12,
     "Einsum",
     "a,b",
     {{"a", F32, 1, {2}, FA(1, 2)}, {"b", F32, 1, {3}, FA(3, 4, 5)}},
     EQ("i,j"),
     {{"y", F32, 2, {2, 3}, FA(3, 4, 5, 6, 8, 10)}},
     NULL},
    {"...ij,...jk (implicit, ellipsis)",
     12,
     "Einsum",
     "a,b",
     {{"a", F32, 3, {2, 2, 3}, FA(0, .5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5)},
      {"b", F32, 3, {2, 3, 2}, FA(-3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8)}},
     EQ("...ij,...jk"),
     {{"y", F32, 3, {2, 2, 2}, FA(0.5, 2, -4, 2, 54.5, 65, 77, 92)}},
     NULL},
    {"bij,bjk->bik",
     12,
     "Einsum",
     "a,b",
     {{"a", F32, 3, {2, 2, 3}, FA(0, .5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5)},
      {"b", F32, 3, {2, 3, 2}, FA(-3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8)}},
     EQ("bij,bjk->bik"),
     {{"y", F32, 3, {2, 2, 2}, FA(0.5, 2, -4, 2, 54.5, 65, 77, 92)}},
     NULL},
    {"i,i (dot) int64",
     12,
     "Einsum",
     "a,b",
     {{"a", I64, 1, {3}, LA(3, 4, 5)}, {"b", I64, 1, {3}, LA(3, 4, 5)}},
     EQ("i,i"),
     {{"y", I64, 0, {0}, LA(50)}},
     NULL},
    {"label size mismatch",
     12,
     "Einsum",
     "a,b",
     {{"a", F32, 1, {2}, FA(1, 2)}, {"b", F32, 1, {3}, FA(3, 4, 5)}},
     EQ("i,i->i"),
     {{"y", F32, -1, {0}, NULL}},
     "has sizes"},
};
TABLE_TEST(test_einsum, einsum_cases)

/* --- The rest: CumSum, Trilu, Tile, Det, DepthToSpace, Range, EyeLike ------------------------ */
static const TCase misc_cases[] = {
    {"CumSum exclusive reverse",
     14,
     "CumSum",
     "x,a",
     {{"x", F32, 1, {3}, FA(1, 2, 3)}, {"a", I64, 0, {0}, LA(0)}},
     {AINT("exclusive", 1), AINT("reverse", 1)},
     {{"y", F32, 1, {3}, FA(5, 3, 0)}},
     NULL},
    {"CumSum axis -1 int32",
     14,
     "CumSum",
     "x,a",
     {{"x", I32, 2, {2, 2}, IA(1, 2, 3, 4)}, {"a", I32, 0, {0}, IA(-1)}},
     {{0}},
     {{"y", I32, 2, {2, 2}, IA(1, 3, 3, 7)}},
     NULL},
    {"CumSum empty",
     14,
     "CumSum",
     "x,a",
     {{"x", F32, 2, {0, 3}, FA(0)}, {"a", I64, 0, {0}, LA(1)}},
     {{0}},
     {{"y", F32, 2, {0, 3}, FA(0)}},
     NULL},
    {"Trilu lower k=-1",
     14,
     "Trilu",
     "x,k",
     {{"x", F32, 2, {3, 3}, FA(1, 2, 3, 4, 5, 6, 7, 8, 9)}, {"k", I64, 0, {0}, LA(-1)}},
     {AINT("upper", 0)},
     {{"y", F32, 2, {3, 3}, FA(0, 0, 0, 4, 0, 0, 7, 8, 0)}},
     NULL},
    {"Tile of an empty tensor",
     13,
     "Tile",
     "x,r",
     {{"x", F32, 2, {0, 2}, FA(0)}, {"r", I64, 1, {2}, LA(3, 2)}},
     {{0}},
     {{"y", F32, 2, {0, 4}, FA(0)}},
     NULL},
    {"Tile 2-D",
     13,
     "Tile",
     "x,r",
     {{"x", F32, 2, {1, 2}, FA(1, 2)}, {"r", I64, 1, {2}, LA(2, 2)}},
     {{0}},
     {{"y", F32, 2, {2, 4}, FA(1, 2, 1, 2, 1, 2, 1, 2)}},
     NULL},
    {"Tile-1: tiles along one axis",
     5,
     "Tile",
     "x,t,a",
     {{"x", F32, 2, {1, 2}, FA(1, 2)}, {"t", F32, 0, {0}, FA(2)}, {"a", F32, 0, {0}, FA(1)}},
     {{0}},
     {{"y", F32, 2, {1, 4}, FA(1, 2, 1, 2)}},
     NULL},
    {"Det",
     22,
     "Det",
     "x",
     {{"x", F32, 3, {2, 3, 3}, FA(1, 2, 0, 3, 4, 0, 0, 0, 1, 2, 0, 1, 1, 3, 2, 1, 1, 2)}},
     {{0}},
     {{"y", F32, 1, {2}, FA(-2, 6)}},
     NULL},
    /* DepthToSpace DCR of channels [0..3] (1x4x1x1) with blocksize 2 gives [[0,1],[2,3]] */
    {"DepthToSpace DCR",
     13,
     "DepthToSpace",
     "x",
     {{"x", F32, 4, {1, 4, 1, 1}, FA(0, 1, 2, 3)}},
     {AINT("blocksize", 2)},
     {{"y", F32, 4, {1, 1, 2, 2}, FA(0, 1, 2, 3)}},
     NULL},
    {"SpaceToDepth",
     13,
     "SpaceToDepth",
     "x",
     {{"x", F32, 4, {1, 1, 2, 2}, FA(0, 1, 2, 3)}},
     {AINT("blocksize", 2)},
     {{"y", F32, 4, {1, 4, 1, 1}, FA(0, 1, 2, 3)}},
     NULL},
    {"Range int32 negative delta",
     11,
     "Range",
     "a,b,c",
     {{"a", I32, 0, {0}, IA(10)}, {"b", I32, 0, {0}, IA(4)}, {"c", I32, 0, {0}, IA(-3)}},
     {{0}},
     {{"y", I32, 1, {2}, IA(10, 7)}},
     NULL},
    {"Range empty",
     11,
     "Range",
     "a,b,c",
     {{"a", F32, 0, {0}, FA(1)}, {"b", F32, 0, {0}, FA(1)}, {"c", F32, 0, {0}, FA(1)}},
     {{0}},
     {{"y", F32, 1, {0}, FA(0)}},
     NULL},
    {"EyeLike int32 k=1",
     9,
     "EyeLike",
     "x",
     {{"x", I32, 2, {2, 3}, IA(0, 0, 0, 0, 0, 0)}},
     {AINT("k", 1)},
     {{"y", I32, 2, {2, 3}, IA(0, 1, 0, 0, 0, 1)}},
     NULL},
    {"Size",
     13,
     "Size",
     "x",
     {{"x", F32, 2, {2, 0}, FA(0)}},
     {{0}},
     {{"y", I64, 0, {0}, LA(0)}},
     NULL},
    {"CenterCropPad crop and pad",
     18,
     "CenterCropPad",
     "x,s",
     {{"x", F32, 2, {3, 1}, FA(1, 2, 3)}, {"s", I64, 1, {2}, LA(1, 3)}},
     {{0}},
     {{"y", F32, 2, {1, 3}, FA(0, 2, 0)}},
     NULL},
};
TABLE_TEST(test_misc, misc_cases)

/* --- Bad inputs: clear errors that name the node ---------------------------------------------- */
#define NOOUT                                                                                      \
  {                                                                                                \
    { "y", F32, -1, {0}, NULL }                                                                    \
  }
static const TCase bad_input_cases[] = {
    {"Compress condition beyond the axis",
     11,
     "Compress",
     "x,c",
     {{"x", F32, 1, {2}, FA(1, 2)}, {"c", BOOL, 1, {3}, BA(0, 0, 1)}},
     {AINT("axis", 0)},
     NOOUT,
     "condition selects index 2"},
    {"DepthToSpace channels",
     13,
     "DepthToSpace",
     "x",
     {{"x", F32, 4, {1, 3, 1, 1}, FA(1, 2, 3)}},
     {AINT("blocksize", 2)},
     NOOUT,
     "not divisible"},
    {"Tile negative repeats",
     13,
     "Tile",
     "x,r",
     {{"x", F32, 1, {2}, FA(1, 2)}, {"r", I64, 1, {1}, LA(-1)}},
     {{0}},
     NOOUT,
     "negative"},
    {"Tile repeats of the wrong length",
     13,
     "Tile",
     "x,r",
     {{"x", F32, 1, {2}, FA(1, 2)}, {"r", I64, 1, {2}, LA(1, 1)}},
     {{0}},
     NOOUT,
     "repeats has 2 values"},
    {"Einsum bad character",
     12,
     "Einsum",
     "a",
     {{"a", F32, 1, {2}, FA(1, 2)}},
     EQ("i1"),
     NOOUT,
     "bad character"},
    {"Einsum too many terms",
     12,
     "Einsum",
     "a",
     {{"a", F32, 1, {2}, FA(1, 2)}},
     EQ("i,i->i"),
     NOOUT,
     "more terms"},
    {"Einsum rank mismatch",
     12,
     "Einsum",
     "a",
     {{"a", F32, 2, {2, 2}, FA(1, 2, 3, 4)}},
     EQ("i->i"),
     NOOUT,
     "rank 2"},
    {"OneHot depth 0",
     11,
     "OneHot",
     "i,d,v",
     {{"i", I64, 1, {1}, LA(0)}, {"d", I64, 0, {0}, LA(0)}, {"v", F32, 1, {2}, FA(0, 1)}},
     {{0}},
     NOOUT,
     "not a positive count"},
    {"Det of a non-square matrix",
     11,
     "Det",
     "x",
     {{"x", F32, 2, {2, 3}, FA(1, 2, 3, 4, 5, 6)}},
     {{0}},
     NOOUT,
     "[..., M, M]"},
    {"TensorScatter write_indices count",
     24,
     "TensorScatter",
     "p,u,w",
     {{"p", F32, 3, {1, 2, 1}, FA(0, 0)},
      {"u", F32, 3, {1, 1, 1}, FA(5)},
      {"w", I64, 1, {2}, LA(0, 0)}},
     {AINT("axis", 1)},
     NOOUT,
     "write_indices has 2 values"},
    {"GatherElements rank",
     13,
     "GatherElements",
     "x,i",
     {{"x", F32, 2, {2, 2}, FA(1, 2, 3, 4)}, {"i", I64, 1, {1}, LA(0)}},
     {{0}},
     NOOUT,
     "indices have rank 1"},
    {"ScatterND updates shape",
     16,
     "ScatterND",
     "x,i,u",
     {{"x", F32, 1, {3}, FA(1, 2, 3)}, {"i", I64, 2, {1, 1}, LA(0)}, {"u", F32, 1, {2}, FA(9, 9)}},
     {{0}},
     NOOUT,
     "updates' shape"},
    {"Range delta 0",
     11,
     "Range",
     "a,b,c",
     {{"a", I64, 0, {0}, LA(0)}, {"b", I64, 0, {0}, LA(5)}, {"c", I64, 0, {0}, LA(0)}},
     {{0}},
     {{"y", I64, -1, {0}, NULL}},
     "nonzero"},
    {"CumSum axis out of range",
     14,
     "CumSum",
     "x,a",
     {{"x", F32, 1, {3}, FA(1, 2, 3)}, {"a", I64, 0, {0}, LA(1)}},
     {{0}},
     NOOUT,
     "out of range"},
    {"Trilu of a vector",
     14,
     "Trilu",
     "x",
     {{"x", F32, 1, {3}, FA(1, 2, 3)}},
     {{0}},
     NOOUT,
     "rank >= 2"},
    {"CenterCropPad shape length",
     18,
     "CenterCropPad",
     "x,s",
     {{"x", F32, 2, {2, 2}, FA(1, 2, 3, 4)}, {"s", I64, 1, {1}, LA(1)}},
     {{0}},
     NOOUT,
     "shape has 1 values for 2 axes"},
    {"ArgMax axis out of range",
     13,
     "ArgMax",
     "x",
     {{"x", F32, 1, {3}, FA(1, 2, 3)}},
     {AINT("axis", 1)},
     {{"y", I64, -1, {0}, NULL}},
     "out of range"},
};
TABLE_TEST(test_bad_inputs, bad_input_cases)

/* --- Empty tensors through the index ops ---------------------------------------------------- */
static const TCase empty_cases[] = {
    {"TopK with an empty outer dim",
     11,
     "TopK",
     "x,k",
     {{"x", F32, 2, {0, 3}, FA(0)}, {"k", I64, 1, {1}, LA(2)}},
     {{0}},
     {{"v", F32, 2, {0, 2}, FA(0)}, {"i", I64, 2, {0, 2}, LA(0)}},
     NULL},
    {"GatherND with no index tuples",
     13,
     "GatherND",
     "x,i",
     {{"x", F32, 2, {2, 2}, FA(1, 2, 3, 4)}, {"i", I64, 2, {0, 1}, LA(0)}},
     {{0}},
     {{"y", F32, 2, {0, 2}, FA(0)}},
     NULL},
    {"ScatterElements with no updates copies",
     16,
     "ScatterElements",
     "x,i,u",
     {{"x", F32, 1, {2}, FA(1, 2)}, {"i", I64, 1, {0}, LA(0)}, {"u", F32, 1, {0}, FA(0)}},
     {{0}},
     {{"y", F32, 1, {2}, FA(1, 2)}},
     NULL},
    {"Unique of an empty tensor",
     11,
     "Unique",
     "x",
     {{"x", F32, 1, {0}, FA(0)}},
     {{0}},
     {{"y", F32, 1, {0}, FA(0)}, {"idx", I64, 1, {0}, LA(0)}},
     NULL},
    {"Pad of an empty tensor (constant)",
     13,
     "Pad",
     "x,p",
     {{"x", F32, 1, {0}, FA(0)}, {"p", I64, 1, {2}, LA(1, 1)}},
     {{0}},
     {{"y", F32, 1, {2}, FA(0, 0)}},
     NULL},
    {"Einsum over an empty dim sums to 0",
     12,
     "Einsum",
     "a,b",
     {{"a", F32, 2, {2, 0}, FA(0)}, {"b", F32, 2, {0, 2}, FA(0)}},
     EQ("ij,jk->ik"),
     {{"y", F32, 2, {2, 2}, FA(0, 0, 0, 0)}},
     NULL},
    {"OneHot of no indices",
     11,
     "OneHot",
     "i,d,v",
     {{"i", I64, 1, {0}, LA(0)}, {"d", I64, 0, {0}, LA(3)}, {"v", F32, 1, {2}, FA(0, 1)}},
     {{0}},
     {{"y", F32, 2, {0, 3}, FA(0)}},
     NULL},
};
TABLE_TEST(test_empty_tensors, empty_cases)

/* --- Strings through the data-moving ops ---------------------------------------------------- */
static const TCase string_cases[] = {
    {"GatherElements strings",
     13,
     "GatherElements",
     "x,i",
     {{"x", STR, 2, {2, 2}, SA("a", "b", "c", "d")}, {"i", I64, 2, {2, 1}, LA(1, 0)}},
     {AINT("axis", 1)},
     {{"y", STR, 2, {2, 1}, SA("b", "c")}},
     NULL},
    {"Unique strings (sorted)",
     11,
     "Unique",
     "x",
     {{"x", STR, 1, {4}, SA("pear", "apple", "pear", "fig")}},
     {{0}},
     {{"y", STR, 1, {3}, SA("apple", "fig", "pear")}, {"idx", I64, 1, {3}, LA(1, 3, 0)}},
     NULL},
    {"Compress strings",
     11,
     "Compress",
     "x,c",
     {{"x", STR, 1, {3}, SA("x", "y", "z")}, {"c", BOOL, 1, {3}, BA(1, 0, 1)}},
     {{0}},
     {{"y", STR, 1, {2}, SA("x", "z")}},
     NULL},
    {"Pad strings with a constant",
     13,
     "Pad",
     "x,p,c",
     {{"x", STR, 1, {1}, SA("m")}, {"p", I64, 1, {2}, LA(1, 1)}, {"c", STR, 0, {0}, SA("_")}},
     {{0}},
     {{"y", STR, 1, {3}, SA("_", "m", "_")}},
     NULL},
    {"Tile strings",
     13,
     "Tile",
     "x,r",
     {{"x", STR, 1, {2}, SA("p", "q")}, {"r", I64, 1, {1}, LA(2)}},
     {{0}},
     {{"y", STR, 1, {4}, SA("p", "q", "p", "q")}},
     NULL},
    {"ScatterND strings",
     16,
     "ScatterND",
     "x,i,u",
     {{"x", STR, 1, {3}, SA("a", "b", "c")},
      {"i", I64, 2, {1, 1}, LA(-1)},
      {"u", STR, 1, {1}, SA("Z")}},
     {{0}},
     {{"y", STR, 1, {3}, SA("a", "b", "Z")}},
     NULL},
    {"ScatterND add on strings is refused",
     16,
     "ScatterND",
     "x,i,u",
     {{"x", STR, 1, {1}, SA("a")}, {"i", I64, 2, {1, 1}, LA(0)}, {"u", STR, 1, {1}, SA("Z")}},
     {ASTR("reduction", "add")},
     {{"y", STR, -1, {0}, NULL}},
     "not supported"},
    {"DepthToSpace strings (CRD)",
     13,
     "DepthToSpace",
     "x",
     {{"x", STR, 4, {1, 4, 1, 1}, SA("0", "1", "2", "3")}},
     {AINT("blocksize", 2), ASTR("mode", "CRD")},
     {{"y", STR, 4, {1, 1, 2, 2}, SA("0", "1", "2", "3")}},
     NULL},
};
TABLE_TEST(test_strings, string_cases)

/* --- Reductions give the same bits with 1 and 4 threads (deterministic option on) ------------ */
static void reduce_mean_run(int threads, float* out, const float* x) {
  OxTestModel* m = otm_new(18);
  otm_input(m, "x", F32, 2, (int64_t[]){64, 1024});
  otm_initializer(m, "axes", I64, 1, (int64_t[]){1}, (int64_t[]){-1});
  otm_node(m, "ReduceMean", "node_under_test", "x,axes", "y");
  otm_output(m, "y", F32, -1, NULL);
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_threads(o, threads));
  ok(onyx_session_options_set_deterministic(o, 1));
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  free(bytes);
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor(F32, (int64_t[]){64, 1024}, 2, x, 64 * 1024 * sizeof(float), &in));
  const char* in_name = "x";
  const char* out_name = "y";
  OnyxValue* y = NULL;
  ok(onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &y));
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_elem_count(t), 64);
  memcpy(out, onyx_tensor_data(t), 64 * sizeof(float));
  onyx_values_release(&y, 1);
  onyx_value_release(in);
  onyx_session_release(s);
  onyx_session_options_release(o);
}

static void test_reduce_deterministic_threads(void** state) {
  (void)state;
  float* x = malloc(64 * 1024 * sizeof(float));
  assert_non_null(x);
  for (size_t i = 0; i < 64 * 1024; i++)
    x[i] = 1.0f / (float)(1 + i % 13) - (float)(i % 5) * 0.37f;
  float a[64], b[64];
  reduce_mean_run(1, a, x);
  reduce_mean_run(4, b, x);
  assert_memory_equal(a, b, sizeof a);
  for (size_t r = 0; r < 64; r++) { /* the mean of each row, summed in double here */
    double sum = 0;
    for (size_t i = 0; i < 1024; i++)
      sum += x[r * 1024 + i];
    assert_float_equal(a[r], (float)(sum / 1024), 1e-6);
  }
  free(x);
}

int main(void) {
  (void)INF_;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reductions),
      cmocka_unit_test(test_argmax_argmin),
      cmocka_unit_test(test_index_errors),
      cmocka_unit_test(test_index_values),
      cmocka_unit_test(test_topk),
      cmocka_unit_test(test_pad),
      cmocka_unit_test(test_einsum),
      cmocka_unit_test(test_misc),
      cmocka_unit_test(test_bad_inputs),
      cmocka_unit_test(test_empty_tensors),
      cmocka_unit_test(test_reduce_deterministic_threads),
      cmocka_unit_test(test_strings),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
