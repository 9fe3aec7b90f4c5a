/* test_ml_map.c — ONNX-ML map values end to end: ZipMap, DictVectorizer and
 * CastMap through sessions (int64 and string keys, rank-1 and rank-2 ZipMap
 * inputs, DENSE and SPARSE CastMap with every cast), the public map API
 * (create, access, sequences of maps, errors), map types declared on graph
 * inputs/outputs and written back by the model saver, MapProto and
 * SequenceProto-of-MapProto files, and bad models and inputs that must be
 * errors naming the node, attribute or input. Expected values are worked out
 * by hand from the ONNX-ML definitions (the comments show the arithmetic). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "onyx/onyx.h"
#include "ox_test_models.h"
#include "ox_test_session.h"
#include "proto_bytes.h"

/* --- helpers ------------------------------------------------------------------------------- */

static OnyxValue* f32v(size_t rank, const int64_t* dims, const float* data, size_t n) {
  OnyxValue* v = NULL;
  ots_ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dims, rank, data, n * sizeof(float), &v));
  return v;
}

static OnyxValue* map_i64_f32(const int64_t* keys, const float* vals, size_t n) {
  int64_t dim = (int64_t)n;
  OnyxValue* values = f32v(1, &dim, vals, n);
  OnyxValue* m = NULL;
  ots_ok(onyx_value_create_map_int64(keys, n, values, &m));
  onyx_value_release(values);
  return m;
}

/* Wraps a value's tensor type into map(key, that), then into seq(...) when
 * seq is set. */
static void wrap_map(Onnx__ValueInfoProto* vi, int key, bool seq) {
  Onnx__TypeProto__Map* mp = otm_alloc(sizeof *mp);
  onnx__type_proto__map__init(mp);
  mp->has_key_type = 1;
  mp->key_type = key;
  mp->value_type = vi->type;
  Onnx__TypeProto* mt = otm_alloc(sizeof *mt);
  onnx__type_proto__init(mt);
  mt->value_case = ONNX__TYPE_PROTO__VALUE_MAP_TYPE;
  mt->map_type = mp;
  vi->type = mt;
  if (!seq) return;
  Onnx__TypeProto__Sequence* sq = otm_alloc(sizeof *sq);
  onnx__type_proto__sequence__init(sq);
  sq->elem_type = mt;
  Onnx__TypeProto* st = otm_alloc(sizeof *st);
  onnx__type_proto__init(st);
  st->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
  st->sequence_type = sq;
  vi->type = st;
}

static OxTestModel* ml_model(void) {
  OxTestModel* m = otm_new(13);
  otm_add_opset(m, "ai.onnx.ml", 1);
  return m;
}

static OxTestNode* ml_node(OxTestModel* m, const char* op, const char* name, const char* in,
                           const char* out) {
  OxTestNode* n = otm_node(m, op, name, in, out);
  otm_node_domain(n, "ai.onnx.ml");
  return n;
}

static OnyxSession* open_model(OxTestModel* m) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s);
  free(bytes);
  ots_ok(st);
  return s;
}

/* Session creation must fail with `code`, naming a and b (b may be NULL). */
static void expect_create_error(OxTestModel* m, OnyxStatusCode code, const char* a, const char* b) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s);
  free(bytes);
  assert_null(s);
  assert_non_null(st);
  const char* msg = onyx_status_message(st);
  if (!strstr(msg, a) || (b && !strstr(msg, b)))
    fail_msg("message lacks '%s'/'%s': %s", a, b ? b : "", msg);
  assert_int_equal(onyx_status_code(st), code);
  onyx_status_release(st);
}

static OnyxStatus* run1(OnyxSession* s, const char* in_name, const OnyxValue* in,
                        const char* out_name, OnyxValue** out) {
  return onyx_session_run(s, NULL, &in_name, &in, 1, &out_name, 1, out);
}

static void expect_i64_keys(const OnyxValue* m, const int64_t* want, size_t n) {
  assert_int_equal(onyx_value_map_key_type(m), ONYX_ELEM_INT64);
  assert_int_equal(onyx_value_map_size(m), n);
  const OnyxTensor* k = onyx_value_map_keys(m);
  assert_non_null(k);
  assert_int_equal(onyx_tensor_rank(k), 1);
  assert_memory_equal(onyx_tensor_data(k), want, n * sizeof *want);
}

static void expect_str_keys(const OnyxValue* m, const char* const* want, size_t n) {
  assert_int_equal(onyx_value_map_key_type(m), ONYX_ELEM_STRING);
  assert_int_equal(onyx_value_map_size(m), n);
  const OnyxTensor* k = onyx_value_map_keys(m);
  const char* const* got = onyx_tensor_data(k);
  for (size_t i = 0; i < n; i++) {
    assert_string_equal(got[i], want[i]);
    assert_int_equal(onyx_tensor_string_len(k, i), strlen(want[i]));
  }
}

static void expect_f32_vals(const OnyxTensor* t, const float* want, size_t n) {
  assert_non_null(t);
  assert_int_equal(onyx_tensor_elem_type(t), ONYX_ELEM_FLOAT32);
  assert_int_equal(onyx_tensor_elem_count(t), n);
  const float* got = onyx_tensor_data(t);
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i]) fail_msg("value %zu: got %.9g, want %.9g", i, got[i], want[i]);
}

/* --- ZipMap --------------------------------------------------------------------------------- */

/* X [2, 3] with labels 10, 20, 30: row r's map is {10: X[r,0], 20: X[r,1],
 * 30: X[r,2]}, in label order. */
static void test_zipmap_int64(void** state) {
  (void)state;
  OxTestModel* m = ml_model();
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){-1, 3});
  otm_attr_ints(ml_node(m, "ZipMap", "zip", "X", "Z"), "classlabels_int64s", 3,
                (int64_t[]){10, 20, 30});
  wrap_map(otm_output(m, "Z", ONYX_ELEM_FLOAT32, -1, NULL), ONYX_ELEM_INT64, true);
  OnyxSession* s = open_model(m);
  assert_int_equal(onyx_session_output_kind(s, 0), ONYX_TYPE_SEQUENCE_MAP);
  assert_int_equal(onyx_session_output_map_key(s, 0), ONYX_ELEM_INT64);
  const float x[6] = {0.1f, 0.2f, 0.7f, 0.5f, 0.25f, 0.25f};
  OnyxValue* in = f32v(2, (int64_t[]){2, 3}, x, 6);
  OnyxValue* z = NULL;
  ots_ok(run1(s, "X", in, "Z", &z));
  assert_int_equal(onyx_value_kind(z), ONYX_VALUE_SEQUENCE_MAP);
  assert_null(onyx_value_tensor(z));
  assert_int_equal(onyx_value_map_key_type(z), ONYX_ELEM_INT64);
  assert_int_equal(onyx_value_map_value_type(z), ONYX_ELEM_FLOAT32);
  assert_int_equal(onyx_value_map_sequence_length(z), 2);
  for (size_t r = 0; r < 2; r++) {
    OnyxValue* mr = NULL;
    ots_ok(onyx_value_map_sequence_at(z, r, &mr));
    assert_int_equal(onyx_value_kind(mr), ONYX_VALUE_MAP);
    expect_i64_keys(mr, (const int64_t[]){10, 20, 30}, 3);
    expect_f32_vals(onyx_value_map_values(mr), x + 3 * r, 3);
    onyx_value_release(mr);
  }
  OnyxValue* none = NULL;
  ots_expect_error(onyx_value_map_sequence_at(z, 2, &none), ONYX_INVALID_ARGUMENT, "out of range");
  assert_null(none);
  onyx_value_release(z);
  onyx_value_release(in);
  onyx_session_release(s);
}

/* X [3] (one row) with string labels: one map {"cat": .., "dog": .., "emu": ..}. */
static void test_zipmap_string_rank1(void** state) {
  (void)state;
  OxTestModel* m = ml_model();
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3});
  const char* labels[] = {"cat", "dog", "emu"};
  otm_attr_strings(ml_node(m, "ZipMap", "zip", "X", "Z"), "classlabels_strings", 3, labels);
  otm_output(m, "Z", ONYX_ELEM_FLOAT32, -1, NULL); /* declared loosely: inferred */
  OnyxSession* s = open_model(m);
  const float x[3] = {0.5f, 0.125f, 0.375f};
  OnyxValue* in = f32v(1, (int64_t[]){3}, x, 3);
  OnyxValue* z = NULL;
  ots_ok(run1(s, "X", in, "Z", &z));
  assert_int_equal(onyx_value_kind(z), ONYX_VALUE_SEQUENCE_MAP);
  assert_int_equal(onyx_value_map_sequence_length(z), 1);
  OnyxValue* m0 = NULL;
  ots_ok(onyx_value_map_sequence_at(z, 0, &m0));
  expect_str_keys(m0, labels, 3);
  expect_f32_vals(onyx_value_map_values(m0), x, 3);
  onyx_value_release(m0);
  onyx_value_release(z);
  onyx_value_release(in);
  onyx_session_release(s);
}

/* --- DictVectorizer -----------------------------------------------------------------------------
 */

/* {"b": 2, "zz": 9, "a": 1} over vocabulary [a, b, c]: [1, 2, 0] ("zz" is
 * not in it and is left out; "c" is missing and stays 0). */
static void test_dictvectorizer_string(void** state) {
  (void)state;
  OxTestModel* m = ml_model();
  wrap_map(otm_input(m, "M", ONYX_ELEM_FLOAT32, -1, NULL), ONYX_ELEM_STRING, false);
  otm_attr_strings(ml_node(m, "DictVectorizer", "dv", "M", "Y"), "string_vocabulary", 3,
                   (const char*[]){"a", "b", "c"});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 3});
  OnyxSession* s = open_model(m);
  assert_int_equal(onyx_session_input_kind(s, 0), ONYX_TYPE_MAP);
  assert_int_equal(onyx_session_input_map_key(s, 0), ONYX_ELEM_STRING);
  OnyxValue* vals = f32v(1, (int64_t[]){3}, (const float[]){2, 9, 1}, 3);
  OnyxValue* in = NULL;
  ots_ok(onyx_value_create_map_string((const char*[]){"b", "zz", "a"}, NULL, 3, vals, &in));
  OnyxValue* y = NULL;
  ots_ok(run1(s, "M", in, "Y", &y));
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_rank(t), 2);
  assert_memory_equal(onyx_tensor_dims(t), ((const int64_t[]){1, 3}), 2 * sizeof(int64_t));
  expect_f32_vals(t, (const float[]){1, 2, 0}, 3);
  onyx_value_release(y);
  onyx_value_release(in);
  onyx_value_release(vals);
  onyx_session_release(s);
}

/* map(int64, double) {7: 0.5, -3: 2.25} over vocabulary [-3, 5, 7, 100]:
 * [2.25, 0, 0.5, 0]. */
static void test_dictvectorizer_int64_double(void** state) {
  (void)state;
  OxTestModel* m = ml_model();
  wrap_map(otm_input(m, "M", ONYX_ELEM_FLOAT64, -1, NULL), ONYX_ELEM_INT64, false);
  otm_attr_ints(ml_node(m, "DictVectorizer", "dv", "M", "Y"), "int64_vocabulary", 4,
                (int64_t[]){-3, 5, 7, 100});
  otm_output(m, "Y", ONYX_ELEM_FLOAT64, 2, (int64_t[]){1, 4});
  OnyxSession* s = open_model(m);
  OnyxValue* vals = NULL;
  ots_ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT64, (int64_t[]){2}, 1, (const double[]){0.5, 2.25},
                                  2 * sizeof(double), &vals));
  OnyxValue* in = NULL;
  ots_ok(onyx_value_create_map_int64((const int64_t[]){7, -3}, 2, vals, &in));
  OnyxValue* y = NULL;
  ots_ok(run1(s, "M", in, "Y", &y));
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_elem_type(t), ONYX_ELEM_FLOAT64);
  const double* d = onyx_tensor_data(t);
  assert_int_equal(onyx_tensor_elem_count(t), 4);
  assert_true(d[0] == 2.25 && d[1] == 0 && d[2] == 0.5 && d[3] == 0);
  onyx_value_release(y);
  /* A map of another key type than the input declares is refused at run. */
  OnyxValue* wrong = NULL;
  ots_ok(onyx_value_create_map_string((const char*[]){"7", "-3"}, NULL, 2, vals, &wrong));
  ots_expect_error(run1(s, "M", wrong, "Y", &y), ONYX_INVALID_ARGUMENT, "map(int64, float64)");
  assert_null(y);
  /* So is a tensor where a map is declared. */
  ots_expect_error(run1(s, "M", vals, "Y", &y), ONYX_INVALID_ARGUMENT, "expected a map");
  onyx_value_release(wrong);
  onyx_value_release(in);
  onyx_value_release(vals);
  onyx_session_release(s);
}

/* --- CastMap -------------------------------------------------------------------------------------
 */

/* Runs CastMap(cast_to, map_form, max_map) on map(int64, float) keys/vals. */
static OnyxStatus* castmap_run(const char* cast_to, const char* form, int64_t max_map,
                               OnyxElemType out_type, const OnyxValue* in, OnyxValue** y) {
  OxTestModel* m = ml_model();
  OnyxElemType vt = onyx_value_map_value_type(in);
  wrap_map(otm_input(m, "M", vt, -1, NULL), ONYX_ELEM_INT64, false);
  OxTestNode* n = ml_node(m, "CastMap", "cm", "M", "Y");
  otm_attr_string(n, "cast_to", cast_to);
  otm_attr_string(n, "map_form", form);
  otm_attr_int(n, "max_map", max_map);
  otm_output(m, "Y", out_type, 2, (int64_t[]){1, -1});
  OnyxStatus* st = ots_run_values(m, (const char*[]){"M"}, &in, 1, (const char*[]){"Y"}, 1, y);
  otm_free(m);
  return st;
}

/* {3: 1.5, 0: 2.5, 1: -7.9}: in key order 0, 1, 3 the values are 2.5, -7.9,
 * 1.5. DENSE TO_FLOAT: [2.5, -7.9, 1.5]; TO_INT64 (toward zero): [2, -7, 1];
 * TO_STRING ("%f"): ["2.500000", "-7.900000", "1.500000"]. SPARSE max_map 5
 * TO_FLOAT: [2.5, -7.9, 0, 1.5, 0]; max_map 2: [2.5, -7.9] (key 3 is past
 * the end); TO_STRING pads with "0.f". */
static void test_castmap_float(void** state) {
  (void)state;
  OnyxValue* in = map_i64_f32((const int64_t[]){3, 0, 1}, (const float[]){1.5f, 2.5f, -7.9f}, 3);
  OnyxValue* y = NULL;
  ots_ok(castmap_run("TO_FLOAT", "DENSE", 1, ONYX_ELEM_FLOAT32, in, &y));
  expect_f32_vals(onyx_value_tensor(y), (const float[]){2.5f, -7.9f, 1.5f}, 3);
  assert_memory_equal(onyx_tensor_dims(onyx_value_tensor(y)), ((const int64_t[]){1, 3}),
                      2 * sizeof(int64_t));
  onyx_value_release(y);
  ots_ok(castmap_run("TO_INT64", "DENSE", 1, ONYX_ELEM_INT64, in, &y));
  assert_memory_equal(onyx_tensor_data(onyx_value_tensor(y)), ((const int64_t[]){2, -7, 1}),
                      3 * sizeof(int64_t));
  onyx_value_release(y);
  ots_ok(castmap_run("TO_STRING", "DENSE", 1, ONYX_ELEM_STRING, in, &y));
  const char* const* s = onyx_tensor_data(onyx_value_tensor(y));
  assert_string_equal(s[0], "2.500000");
  assert_string_equal(s[1], "-7.900000");
  assert_string_equal(s[2], "1.500000");
  onyx_value_release(y);
  ots_ok(castmap_run("TO_FLOAT", "SPARSE", 5, ONYX_ELEM_FLOAT32, in, &y));
  expect_f32_vals(onyx_value_tensor(y), (const float[]){2.5f, -7.9f, 0, 1.5f, 0}, 5);
  onyx_value_release(y);
  ots_ok(castmap_run("TO_FLOAT", "SPARSE", 2, ONYX_ELEM_FLOAT32, in, &y));
  expect_f32_vals(onyx_value_tensor(y), (const float[]){2.5f, -7.9f}, 2);
  onyx_value_release(y);
  ots_ok(castmap_run("TO_STRING", "SPARSE", 3, ONYX_ELEM_STRING, in, &y));
  s = onyx_tensor_data(onyx_value_tensor(y));
  assert_string_equal(s[0], "2.500000");
  assert_string_equal(s[1], "-7.900000");
  assert_string_equal(s[2], "0.f");
  onyx_value_release(y);
  onyx_value_release(in);
  /* A negative key has no SPARSE column: an error naming the node. */
  in = map_i64_f32((const int64_t[]){-1, 0}, (const float[]){1, 2}, 2);
  ots_expect_error(castmap_run("TO_FLOAT", "SPARSE", 2, ONYX_ELEM_FLOAT32, in, &y),
                   ONYX_INVALID_ARGUMENT, "'cm'");
  onyx_value_release(in);
  /* A float beyond int64 is an error, not undefined behaviour. */
  in = map_i64_f32((const int64_t[]){0}, (const float[]){1e30f}, 1);
  ots_expect_error(castmap_run("TO_INT64", "DENSE", 1, ONYX_ELEM_INT64, in, &y),
                   ONYX_INVALID_ARGUMENT, "does not fit");
  onyx_value_release(in);
}

/* map(int64, string) {2: "3.25", 0: "-4"}: key order 0, 2. TO_FLOAT: [-4,
 * 3.25]; TO_INT64 (strtoll stops at '.'): [-4, 3]; a value that is no
 * number is an error. */
static void test_castmap_string(void** state) {
  (void)state;
  OnyxValue* vals = NULL;
  ots_ok(onyx_value_create_string_tensor((int64_t[]){2}, 1, (const char*[]){"3.25", "-4"}, NULL,
                                         &vals));
  OnyxValue* in = NULL;
  ots_ok(onyx_value_create_map_int64((const int64_t[]){2, 0}, 2, vals, &in));
  OnyxValue* y = NULL;
  ots_ok(castmap_run("TO_FLOAT", "DENSE", 1, ONYX_ELEM_FLOAT32, in, &y));
  expect_f32_vals(onyx_value_tensor(y), (const float[]){-4, 3.25f}, 2);
  onyx_value_release(y);
  ots_ok(castmap_run("TO_INT64", "DENSE", 1, ONYX_ELEM_INT64, in, &y));
  assert_memory_equal(onyx_tensor_data(onyx_value_tensor(y)), ((const int64_t[]){-4, 3}),
                      2 * sizeof(int64_t));
  onyx_value_release(y);
  ots_ok(castmap_run("TO_STRING", "SPARSE", 3, ONYX_ELEM_STRING, in, &y));
  const char* const* s = onyx_tensor_data(onyx_value_tensor(y));
  assert_string_equal(s[0], "-4");
  assert_string_equal(s[1], "0.f");
  assert_string_equal(s[2], "3.25");
  onyx_value_release(y);
  onyx_value_release(in);
  onyx_value_release(vals);
  ots_ok(onyx_value_create_string_tensor((int64_t[]){1}, 1, (const char*[]){"abc"}, NULL, &vals));
  ots_ok(onyx_value_create_map_int64((const int64_t[]){0}, 1, vals, &in));
  ots_expect_error(castmap_run("TO_FLOAT", "DENSE", 1, ONYX_ELEM_FLOAT32, in, &y),
                   ONYX_INVALID_ARGUMENT, "\"abc\" is not a float");
  onyx_value_release(in);
  onyx_value_release(vals);
}

/* --- the public map API ----------------------------------------------------------------------- */

static void test_map_api(void** state) {
  (void)state;
  OnyxValue* vals = f32v(1, (int64_t[]){3}, (const float[]){1, 2, 3}, 3);
  OnyxValue *m = NULL, *bad = NULL;
  /* duplicate keys, wrong counts, NULLs */
  ots_expect_error(onyx_value_create_map_int64((const int64_t[]){4, 5, 4}, 3, vals, &bad),
                   ONYX_INVALID_ARGUMENT, "key 4 appears twice");
  ots_expect_error(
      onyx_value_create_map_string((const char*[]){"x", "y", "x"}, NULL, 3, vals, &bad),
      ONYX_INVALID_ARGUMENT, "\"x\" appears twice");
  ots_expect_error(onyx_value_create_map_int64((const int64_t[]){1, 2}, 2, vals, &bad),
                   ONYX_INVALID_ARGUMENT, "1-D host tensor of 2 elements");
  ots_expect_error(onyx_value_create_map_int64(NULL, 3, vals, &bad), ONYX_INVALID_ARGUMENT, "NULL");
  ots_expect_error(
      onyx_value_create_map_string((const char*[]){"a", NULL, "c"}, NULL, 3, vals, &bad),
      ONYX_INVALID_ARGUMENT, "key 1 is NULL");
  assert_null(bad);
  /* string keys with an explicit length keep a NUL byte; "a" and "a\0" differ */
  ots_ok(onyx_value_create_map_string((const char*[]){"a", "a\0", "b"}, (const size_t[]){1, 2, 1},
                                      3, vals, &m));
  assert_int_equal(onyx_value_kind(m), ONYX_VALUE_MAP);
  assert_int_equal(onyx_value_map_size(m), 3);
  assert_int_equal(onyx_tensor_string_len(onyx_value_map_keys(m), 1), 2);
  assert_int_equal(onyx_value_map_value_type(m), ONYX_ELEM_FLOAT32);
  /* the map copied the values: a change to the source does not show */
  ((float*)onyx_tensor_data(onyx_value_tensor(vals)))[0] = 42;
  expect_f32_vals(onyx_value_map_values(m), (const float[]){1, 2, 3}, 3);
  /* non-maps answer nothing */
  assert_int_equal(onyx_value_map_size(vals), 0);
  assert_null(onyx_value_map_keys(vals));
  assert_int_equal(onyx_value_map_key_type(vals), ONYX_ELEM_UNDEFINED);
  assert_int_equal(onyx_value_map_sequence_length(m), 0);
  /* sequences of maps */
  OnyxValue* m2 = map_i64_f32((const int64_t[]){1}, (const float[]){5}, 1);
  OnyxValue* seq = NULL;
  ots_expect_error(onyx_value_create_map_sequence(ONYX_ELEM_STRING, ONYX_ELEM_FLOAT32,
                                                  (const OnyxValue*[]){m, m2}, 2, &seq),
                   ONYX_INVALID_ARGUMENT, "item 1 is not a map(string, float32)");
  ots_expect_error(
      onyx_value_create_map_sequence(ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT32, NULL, 0, &seq),
      ONYX_INVALID_ARGUMENT, "int64 or string");
  assert_null(seq);
  ots_ok(onyx_value_create_map_sequence(ONYX_ELEM_STRING, ONYX_ELEM_FLOAT32,
                                        (const OnyxValue*[]){m, m}, 2, &seq));
  assert_int_equal(onyx_value_kind(seq), ONYX_VALUE_SEQUENCE_MAP);
  assert_int_equal(onyx_value_map_sequence_length(seq), 2);
  assert_int_equal(onyx_value_map_key_type(seq), ONYX_ELEM_STRING);
  OnyxValue* back = NULL;
  ots_ok(onyx_value_map_sequence_at(seq, 1, &back));
  assert_int_equal(onyx_value_map_size(back), 3);
  onyx_value_release(back);
  ots_expect_error(onyx_value_map_sequence_at(m, 0, &back), ONYX_INVALID_ARGUMENT,
                   "not a sequence of maps");
  /* an empty sequence keeps its types */
  OnyxValue* empty = NULL;
  ots_ok(onyx_value_create_map_sequence(ONYX_ELEM_INT64, ONYX_ELEM_FLOAT64, NULL, 0, &empty));
  assert_int_equal(onyx_value_map_key_type(empty), ONYX_ELEM_INT64);
  assert_int_equal(onyx_value_map_value_type(empty), ONYX_ELEM_FLOAT64);
  assert_int_equal(onyx_value_map_sequence_length(empty), 0);
  onyx_value_release(empty);
  onyx_value_release(seq);
  onyx_value_release(m2);
  onyx_value_release(m);
  onyx_value_release(vals);
}

/* --- bad models ------------------------------------------------------------------------------- */

static OxTestModel* zipmap_model(void) {
  OxTestModel* m = ml_model();
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_output(m, "Z", ONYX_ELEM_FLOAT32, -1, NULL);
  return m;
}

static void test_bad_attributes(void** state) {
  (void)state;
  OxTestModel* m = zipmap_model();
  OxTestNode* n = ml_node(m, "ZipMap", "zip", "X", "Z");
  otm_attr_ints(n, "classlabels_int64s", 3, (int64_t[]){1, 2, 3});
  otm_attr_strings(n, "classlabels_strings", 3, (const char*[]){"a", "b", "c"});
  expect_create_error(m, ONYX_INVALID_MODEL, "'zip'", "exactly one of");
  m = zipmap_model();
  ml_node(m, "ZipMap", "zip", "X", "Z");
  expect_create_error(m, ONYX_INVALID_MODEL, "'zip'", "classlabels_int64s");
  m = zipmap_model();
  otm_attr_ints(ml_node(m, "ZipMap", "zip", "X", "Z"), "classlabels_int64s", 3,
                (int64_t[]){1, 2, 1});
  expect_create_error(m, ONYX_INVALID_MODEL, "'zip'", "holds 1 twice");
  m = zipmap_model();
  otm_attr_ints(ml_node(m, "ZipMap", "zip", "X", "Z"), "classlabels_int64s", 2, (int64_t[]){1, 2});
  expect_create_error(m, ONYX_INVALID_ARGUMENT, "'zip'", "3 columns but the node has 2");
  /* DictVectorizer: the vocabulary's type must be the map's key type; one
   * vocabulary, no entry twice. */
  m = ml_model();
  wrap_map(otm_input(m, "M", ONYX_ELEM_FLOAT32, -1, NULL), ONYX_ELEM_STRING, false);
  otm_attr_ints(ml_node(m, "DictVectorizer", "dv", "M", "Y"), "int64_vocabulary", 2,
                (int64_t[]){1, 2});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 2});
  expect_create_error(m, ONYX_INVALID_ARGUMENT, "'dv'",
                      "string keys but the node has a int64_vocabulary");
  m = ml_model();
  wrap_map(otm_input(m, "M", ONYX_ELEM_FLOAT32, -1, NULL), ONYX_ELEM_STRING, false);
  otm_attr_strings(ml_node(m, "DictVectorizer", "dv", "M", "Y"), "string_vocabulary", 2,
                   (const char*[]){"q", "q"});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 2});
  expect_create_error(m, ONYX_INVALID_MODEL, "'dv'", "\"q\" twice");
  m = ml_model();
  otm_input(m, "M", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_attr_strings(ml_node(m, "DictVectorizer", "dv", "M", "Y"), "string_vocabulary", 1,
                   (const char*[]){"q"});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 1});
  expect_create_error(m, ONYX_INVALID_ARGUMENT, "'dv'", "must be a map, not a tensor");
  /* CastMap: cast_to, map_form, max_map */
  static const struct {
    const char *to, *form;
    int64_t max_map;
    const char* needle;
  } bad[] = {
      {"TO_DOUBLE", "DENSE", 1, "'cast_to' is \"TO_DOUBLE\""},
      {"TO_FLOAT", "PACKED", 1, "'map_form' is \"PACKED\""},
      {"TO_FLOAT", "SPARSE", 0, "'max_map' is 0"},
      {"TO_FLOAT", "SPARSE", -5, "'max_map' is -5"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    m = ml_model();
    wrap_map(otm_input(m, "M", ONYX_ELEM_FLOAT32, -1, NULL), ONYX_ELEM_INT64, false);
    OxTestNode* c = ml_node(m, "CastMap", "cm", "M", "Y");
    otm_attr_string(c, "cast_to", bad[i].to);
    otm_attr_string(c, "map_form", bad[i].form);
    otm_attr_int(c, "max_map", bad[i].max_map);
    otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, -1});
    expect_create_error(m, ONYX_INVALID_MODEL, "'cm'", bad[i].needle);
  }
  /* CastMap wants int64 keys */
  m = ml_model();
  wrap_map(otm_input(m, "M", ONYX_ELEM_FLOAT32, -1, NULL), ONYX_ELEM_STRING, false);
  ml_node(m, "CastMap", "cm", "M", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, -1});
  expect_create_error(m, ONYX_INVALID_ARGUMENT, "'cm'", "map(string, float32)");
  /* a map type with a key type no runtime supports */
  m = ml_model();
  wrap_map(otm_input(m, "M", ONYX_ELEM_FLOAT32, -1, NULL), ONYX_ELEM_FLOAT32, false);
  ml_node(m, "CastMap", "cm", "M", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, -1});
  expect_create_error(m, ONYX_NOT_IMPLEMENTED, "graph input 'M'", "map key type 1");
}

/* --- saving and reading back ---------------------------------------------------------------- */

/* The saver writes map and seq(map) types; the reloaded model declares them. */
static void test_save_round_trip(void** state) {
  (void)state;
  OxTestModel* m = ml_model();
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){-1, 2});
  wrap_map(otm_input(m, "M", ONYX_ELEM_FLOAT32, -1, NULL), ONYX_ELEM_INT64, false);
  otm_attr_ints(ml_node(m, "ZipMap", "zip", "X", "Z"), "classlabels_int64s", 2, (int64_t[]){0, 1});
  ml_node(m, "CastMap", "cm", "M", "Y");
  otm_output(m, "Z", ONYX_ELEM_FLOAT32, -1, NULL);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, -1});
  OnyxSession* s = open_model(m);
  char path[] = "/tmp/onyx_ml_map_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  ots_ok(onyx_session_save_model(s, path));
  onyx_session_release(s);
  OnyxSession* r = NULL;
  ots_ok(onyx_session_create(NULL, path, &r));
  unlink(path);
  size_t zi = strcmp(onyx_session_output_name(r, 0), "Z") ? 1 : 0;
  assert_int_equal(onyx_session_output_kind(r, zi), ONYX_TYPE_SEQUENCE_MAP);
  assert_int_equal(onyx_session_output_map_key(r, zi), ONYX_ELEM_INT64);
  size_t mi = strcmp(onyx_session_input_name(r, 0), "M") ? 1 : 0;
  assert_int_equal(onyx_session_input_kind(r, mi), ONYX_TYPE_MAP);
  assert_int_equal(onyx_session_input_map_key(r, mi), ONYX_ELEM_INT64);
  OnyxElemType t = ONYX_ELEM_UNDEFINED;
  ots_ok(onyx_session_input_info(r, mi, &t, NULL, NULL));
  assert_int_equal(t, ONYX_ELEM_FLOAT32);
  onyx_session_release(r);
}

/* A MapProto and a SequenceProto of two MapProto, written by hand. */
static void test_map_proto_files(void** state) {
  (void)state;
  PbBuf b = {0};
  pb_map_f32(&b, "probs", (const int64_t[]){5, -2}, NULL, 2, (const float[]){0.75f, 0.25f});
  char path[] = "/tmp/onyx_map_pb_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, b.p, b.len), (ssize_t)b.len);
  close(fd);
  OnyxValue* v = NULL;
  char* name = NULL;
  ots_ok(onyx_value_load_proto(path, ONYX_TYPE_MAP, &v, &name));
  assert_string_equal(name, "probs");
  onyx_free(name);
  expect_i64_keys(v, (const int64_t[]){5, -2}, 2);
  expect_f32_vals(onyx_value_map_values(v), (const float[]){0.75f, 0.25f}, 2);
  onyx_value_release(v);
  free(b.p);
  /* SequenceProto { elem_type 4 (map), map_values: two maps } */
  PbBuf seq = {0};
  pb_key(&seq, 2, 0);
  pb_varint(&seq, 4);
  for (int i = 0; i < 2; i++) {
    PbBuf one = {0};
    pb_map_f32(&one, NULL, NULL, (const char*[]){"no", "yes"}, 2,
               i ? (const float[]){0.5f, 0.5f} : (const float[]){0.9f, 0.1f});
    pb_bytes(&seq, 6, one.p, one.len);
    free(one.p);
  }
  fd = open(path, O_WRONLY | O_TRUNC);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, seq.p, seq.len), (ssize_t)seq.len);
  close(fd);
  ots_ok(onyx_value_load_proto(path, ONYX_TYPE_SEQUENCE_MAP, &v, NULL));
  assert_int_equal(onyx_value_kind(v), ONYX_VALUE_SEQUENCE_MAP);
  assert_int_equal(onyx_value_map_sequence_length(v), 2);
  OnyxValue* m1 = NULL;
  ots_ok(onyx_value_map_sequence_at(v, 1, &m1));
  expect_str_keys(m1, (const char*[]){"no", "yes"}, 2);
  expect_f32_vals(onyx_value_map_values(m1), (const float[]){0.5f, 0.5f}, 2);
  onyx_value_release(m1);
  onyx_value_release(v);
  free(seq.p);
  /* an empty SequenceProto read as a sequence of maps: no maps, no types; a
   * SequenceProto of tensors is no sequence of maps */
  PbBuf empty = {0};
  pb_key(&empty, 2, 0);
  pb_varint(&empty, 4);
  fd = open(path, O_WRONLY | O_TRUNC);
  assert_int_equal(write(fd, empty.p, empty.len), (ssize_t)empty.len);
  close(fd);
  ots_ok(onyx_value_load_proto(path, ONYX_TYPE_SEQUENCE_MAP, &v, NULL));
  assert_int_equal(onyx_value_kind(v), ONYX_VALUE_SEQUENCE_MAP);
  assert_int_equal(onyx_value_map_sequence_length(v), 0);
  assert_int_equal(onyx_value_map_key_type(v), ONYX_ELEM_UNDEFINED);
  onyx_value_release(v);
  free(empty.p);
  PbBuf tseq = {0}, tt = {0};
  pb_scalar_tensor(&tt, ONYX_ELEM_FLOAT32, &(float){2});
  pb_bytes(&tseq, 3, tt.p, tt.len);
  fd = open(path, O_WRONLY | O_TRUNC);
  assert_int_equal(write(fd, tseq.p, tseq.len), (ssize_t)tseq.len);
  close(fd);
  ots_expect_error(onyx_value_load_proto(path, ONYX_TYPE_SEQUENCE_MAP, &v, NULL),
                   ONYX_INVALID_ARGUMENT, "not of maps");
  free(tt.p);
  free(tseq.p);
  /* a MapProto whose keys repeat, or with fewer values than keys */
  PbBuf dup = {0};
  pb_map_f32(&dup, NULL, (const int64_t[]){1, 1}, NULL, 2, (const float[]){0, 1});
  fd = open(path, O_WRONLY | O_TRUNC);
  assert_int_equal(write(fd, dup.p, dup.len), (ssize_t)dup.len);
  close(fd);
  ots_expect_error(onyx_value_load_proto(path, ONYX_TYPE_MAP, &v, NULL), ONYX_INVALID_ARGUMENT,
                   "appears twice");
  free(dup.p);
  PbBuf shortv = {0};
  pb_key(&shortv, 2, 0);
  pb_varint(&shortv, 7);
  pb_key(&shortv, 3, 0);
  pb_varint(&shortv, 1);
  pb_key(&shortv, 3, 0);
  pb_varint(&shortv, 2);
  PbBuf vs = {0};
  PbBuf t = {0};
  pb_scalar_tensor(&t, ONYX_ELEM_FLOAT32, &(float){1});
  pb_bytes(&vs, 3, t.p, t.len);
  pb_bytes(&shortv, 5, vs.p, vs.len);
  fd = open(path, O_WRONLY | O_TRUNC);
  assert_int_equal(write(fd, shortv.p, shortv.len), (ssize_t)shortv.len);
  close(fd);
  ots_expect_error(onyx_value_load_proto(path, ONYX_TYPE_MAP, &v, NULL), ONYX_INVALID_ARGUMENT,
                   "2 keys has 1 values");
  free(t.p);
  free(vs.p);
  free(shortv.p);
  /* maps whose values hold maps, 40 levels deep: refused, not a deep recursion */
  PbBuf deep = {0};
  pb_map_f32(&deep, NULL, (const int64_t[]){1}, NULL, 1, (const float[]){1});
  for (int level = 0; level < 40; level++) {
    PbBuf vseq = {0}, outer = {0};
    pb_key(&vseq, 2, 0);
    pb_varint(&vseq, 4);
    pb_bytes(&vseq, 6, deep.p, deep.len);
    pb_key(&outer, 2, 0);
    pb_varint(&outer, 7);
    pb_key(&outer, 3, 0);
    pb_varint(&outer, 1);
    pb_bytes(&outer, 5, vseq.p, vseq.len);
    free(vseq.p);
    free(deep.p);
    deep = outer;
  }
  fd = open(path, O_WRONLY | O_TRUNC);
  assert_int_equal(write(fd, deep.p, deep.len), (ssize_t)deep.len);
  close(fd);
  ots_expect_error(onyx_value_load_proto(path, ONYX_TYPE_MAP, &v, NULL), ONYX_LIMIT_EXCEEDED,
                   "nested too deep");
  free(deep.p);
  /* truncated bytes */
  fd = open(path, O_WRONLY | O_TRUNC);
  assert_int_equal(write(fd, "\x1a\x05\x01", 3), 3);
  close(fd);
  ots_expect_error(onyx_value_load_proto(path, ONYX_TYPE_MAP, &v, NULL), ONYX_INVALID_ARGUMENT,
                   "MapProto");
  unlink(path);
}

/* onyx_value_save_map_proto writes what onyx_value_load_proto reads back:
 * string keys with a NUL byte, int64 values, a sequence of two maps. */
static void test_map_proto_write(void** state) {
  (void)state;
  OnyxValue* vals = NULL;
  ots_ok(onyx_value_create_tensor(ONYX_ELEM_INT64, (int64_t[]){2}, 1,
                                  (const int64_t[]){-5, 1LL << 40}, 2 * sizeof(int64_t), &vals));
  OnyxValue* m = NULL;
  ots_ok(onyx_value_create_map_string((const char*[]){"k\0x", "j"}, (const size_t[]){3, 1}, 2, vals,
                                      &m));
  OnyxValue* seq = NULL;
  ots_ok(onyx_value_create_map_sequence(ONYX_ELEM_STRING, ONYX_ELEM_INT64,
                                        (const OnyxValue*[]){m, m}, 2, &seq));
  char path[] = "/tmp/onyx_map_w_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  ots_ok(onyx_value_save_map_proto(m, "mm", path));
  OnyxValue* back = NULL;
  char* name = NULL;
  ots_ok(onyx_value_load_proto(path, ONYX_TYPE_MAP, &back, &name));
  assert_string_equal(name, "mm");
  onyx_free(name);
  const OnyxTensor* k = onyx_value_map_keys(back);
  assert_int_equal(onyx_value_map_size(back), 2);
  assert_int_equal(onyx_tensor_string_len(k, 0), 3);
  assert_memory_equal(((const char* const*)onyx_tensor_data(k))[0], "k\0x", 3);
  assert_memory_equal(onyx_tensor_data(onyx_value_map_values(back)),
                      ((const int64_t[]){-5, 1LL << 40}), 2 * sizeof(int64_t));
  onyx_value_release(back);
  ots_ok(onyx_value_save_map_proto(seq, NULL, path));
  ots_ok(onyx_value_load_proto(path, ONYX_TYPE_SEQUENCE_MAP, &back, NULL));
  assert_int_equal(onyx_value_map_sequence_length(back), 2);
  assert_int_equal(onyx_value_map_value_type(back), ONYX_ELEM_INT64);
  onyx_value_release(back);
  ots_expect_error(onyx_value_save_map_proto(vals, NULL, path), ONYX_INVALID_ARGUMENT, "not a map");
  unlink(path);
  onyx_value_release(seq);
  onyx_value_release(m);
  onyx_value_release(vals);
}

/* A ZipMap output fed to DictVectorizer is not possible (seq vs map); the
 * host refuses a seq(map) input where a map is declared. */
static void test_seq_map_feed(void** state) {
  (void)state;
  OxTestModel* m = ml_model();
  wrap_map(otm_input(m, "M", ONYX_ELEM_FLOAT32, -1, NULL), ONYX_ELEM_INT64, false);
  otm_attr_ints(ml_node(m, "DictVectorizer", "dv", "M", "Y"), "int64_vocabulary", 1,
                (int64_t[]){1});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 1});
  OnyxSession* s = open_model(m);
  OnyxValue* one = map_i64_f32((const int64_t[]){1}, (const float[]){4}, 1);
  OnyxValue* seq = NULL;
  ots_ok(onyx_value_create_map_sequence(ONYX_ELEM_INT64, ONYX_ELEM_FLOAT32,
                                        (const OnyxValue*[]){one}, 1, &seq));
  OnyxValue* y = NULL;
  ots_expect_error(run1(s, "M", seq, "Y", &y), ONYX_INVALID_ARGUMENT, "expected a map");
  ots_ok(run1(s, "M", one, "Y", &y));
  expect_f32_vals(onyx_value_tensor(y), (const float[]){4}, 1);
  onyx_value_release(y);
  onyx_value_release(seq);
  onyx_value_release(one);
  onyx_session_release(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_zipmap_int64),
      cmocka_unit_test(test_zipmap_string_rank1),
      cmocka_unit_test(test_dictvectorizer_string),
      cmocka_unit_test(test_dictvectorizer_int64_double),
      cmocka_unit_test(test_castmap_float),
      cmocka_unit_test(test_castmap_string),
      cmocka_unit_test(test_map_api),
      cmocka_unit_test(test_bad_attributes),
      cmocka_unit_test(test_save_round_trip),
      cmocka_unit_test(test_map_proto_files),
      cmocka_unit_test(test_map_proto_write),
      cmocka_unit_test(test_seq_map_feed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
