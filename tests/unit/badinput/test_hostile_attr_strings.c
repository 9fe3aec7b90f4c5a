/* test_hostile_attr_strings.c — string attributes are byte strings too.
 *
 * The entries of list-of-strings attributes (pool_strings, keys_strings,
 * values_strings, classes_strings, stopwords, value_strings) keep their NUL
 * bytes from the model through the IR (OxAttr.strings_len), the ABI 1.1
 * host call node_attr_strings_lens, the CPU kernels and a save + reload;
 * Equal compares string tensors with their lengths. Single-string
 * attributes holding a NUL are used with their length (StringSplit's
 * delimiter, LabelEncoder's default_string; test_hostile_strings.c) or
 * refused naming the node and the attribute (RegexFullMatch's pattern, the
 * keywords case_change_action, mode and norm). Expected values follow the
 * ONNX spec, worked out by hand in the comments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "onyx/onyx.h"
#include "onyx/onyx_ep.h"
#include "ox_graph.h"
#include "ox_ir.h"
#include "ox_model.h"
#include "ox_host_api.h"
#include "ox_providers.h"
#include "ox_test_models.h"
#include "ox_test_session.h"

#include "hostile_bytes.h"

/* The test model builder copies C strings: '#' placeholders in an
 * attribute's strings (or its single string) become NUL bytes afterwards,
 * lengths unchanged. */
static Onnx__AttributeProto* nul_attr(Onnx__AttributeProto* a) {
  for (size_t i = 0; i < a->n_strings; i++)
    for (size_t k = 0; k < a->strings[i].len; k++)
      if (a->strings[i].data[k] == '#') a->strings[i].data[k] = '\0';
  for (size_t k = 0; k < a->s.len; k++)
    if (a->s.data[k] == '#') a->s.data[k] = '\0';
  return a;
}

/* Runs model m with string input "x" (none when x is NULL) and returns outputs. */
static OnyxStatus* run_model(OxTestModel* m, const OnyxValue* x, const char* const* outs,
                             size_t n_out, OnyxValue** got) {
  const char* in_name = "x";
  return ots_run_values(m, x ? &in_name : NULL, x ? &x : NULL, x ? 1 : 0, outs, n_out, got);
}

/* Asserts that creating a session for m fails with `code` and a message
 * holding every one of the NULL-terminated substrings. */
static void expect_error(OxTestModel* m, OnyxStatusCode code, const char* const* parts) {
  OnyxValue* y = NULL;
  const Bytes in[1] = {B("a")};
  OnyxValue* x = strings_value(in, 1);
  OnyxStatus* st = run_model(m, x, (const char*[]){"y"}, 1, &y);
  onyx_value_release(x);
  if (!st) fail_msg("expected an error");
  assert_null(y);
  const char* msg = onyx_status_message(st);
  if (onyx_status_code(st) != code)
    fail_msg("code %d, want %d: %s", onyx_status_code(st), code, msg);
  for (size_t i = 0; parts[i]; i++)
    if (!strstr(msg, parts[i])) fail_msg("message lacks '%s': %s", parts[i], msg);
  onyx_status_release(st);
}

/* --- TfIdfVectorizer's pool ------------------------------------------------------------------ */

/* TF over the unigrams b"a\0b" (index 0) and b"a\0c" (index 1). The row
 * [a\0b, a\0c, a\0b, a] holds a\0b twice and a\0c once; "a" is neither
 * (cut at the NUL, both pool entries would read "a": then the row would
 * count [1, 0]). */
static OxTestModel* tfidf_pool_model(void) {
  OxTestModel* m = otm_new(9);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){4});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  OxTestNode* n = otm_node(m, "TfIdfVectorizer", "tf", "x", "y");
  otm_attr_string(n, "mode", "TF");
  otm_attr_int(n, "min_gram_length", 1);
  otm_attr_int(n, "max_gram_length", 1);
  otm_attr_int(n, "max_skip_count", 0);
  otm_attr_ints(n, "ngram_counts", 1, (const int64_t[]){0});
  otm_attr_ints(n, "ngram_indexes", 2, (const int64_t[]){0, 1});
  nul_attr(otm_attr_strings(n, "pool_strings", 2, (const char*[]){"a#b", "a#c"}));
  return m;
}

static void test_tfidf_pool_strings_nul(void** state) {
  (void)state;
  const Bytes in[4] = {B("a\0b"), B("a\0c"), B("a\0b"), B("a")};
  OnyxValue* x = strings_value(in, 4);
  OxTestModel* m = tfidf_pool_model();
  OnyxValue* y = NULL;
  ok(run_model(m, x, (const char*[]){"y"}, 1, &y));
  const float* r = onyx_tensor_data(onyx_value_tensor(y));
  assert_int_equal(onyx_tensor_elem_count(onyx_value_tensor(y)), 2);
  assert_true(r[0] == 2.0f);
  assert_true(r[1] == 1.0f);
  onyx_value_release(y);
  onyx_value_release(x);
  otm_free(m);
}

/* Bigrams of NUL-bearing tokens: pool (b"\0", b"x") at index 0 and
 * (b"\0", b"\0x") at index 1. The row [\0, x, \0, \0x] has the adjacent
 * pairs (\0, x), (x, \0) and (\0, \0x): each pool bigram once. */
static void test_tfidf_bigrams_nul(void** state) {
  (void)state;
  const Bytes in[4] = {B("\0"), B("x"), B("\0"), B("\0x")};
  OnyxValue* x = strings_value(in, 4);
  OxTestModel* m = otm_new(9);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){4});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  OxTestNode* n = otm_node(m, "TfIdfVectorizer", "tf", "x", "y");
  otm_attr_string(n, "mode", "TF");
  otm_attr_int(n, "min_gram_length", 2);
  otm_attr_int(n, "max_gram_length", 2);
  otm_attr_int(n, "max_skip_count", 0);
  otm_attr_ints(n, "ngram_counts", 2, (const int64_t[]){0, 0});
  otm_attr_ints(n, "ngram_indexes", 2, (const int64_t[]){0, 1});
  nul_attr(otm_attr_strings(n, "pool_strings", 4, (const char*[]){"#", "x", "#", "#x"}));
  OnyxValue* y = NULL;
  ok(run_model(m, x, (const char*[]){"y"}, 1, &y));
  const float* r = onyx_tensor_data(onyx_value_tensor(y));
  assert_true(r[0] == 1.0f);
  assert_true(r[1] == 1.0f);
  onyx_value_release(y);
  onyx_value_release(x);
  otm_free(m);
}

/* --- LabelEncoder ------------------------------------------------------------------------------
 */

/* keys_strings [x\0y, x\0z] -> values_int64s [1, 2]: x\0z gives 2, x\0y 1,
 * and "x" (the common prefix) is no key: default_int64 -1. */
static void test_label_encoder_keys_strings_nul(void** state) {
  (void)state;
  const Bytes in[3] = {B("x\0z"), B("x\0y"), B("x")};
  OnyxValue* x = strings_value(in, 3);
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "ai.onnx.ml", 2);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){3});
  otm_output(m, "y", ONYX_ELEM_INT64, 1, (int64_t[]){3});
  OxTestNode* n = otm_node(m, "LabelEncoder", "le", "x", "y");
  otm_node_domain(n, "ai.onnx.ml");
  nul_attr(otm_attr_strings(n, "keys_strings", 2, (const char*[]){"x#y", "x#z"}));
  otm_attr_ints(n, "values_int64s", 2, (const int64_t[]){1, 2});
  OnyxValue* y = NULL;
  ok(run_model(m, x, (const char*[]){"y"}, 1, &y));
  const int64_t* r = onyx_tensor_data(onyx_value_tensor(y));
  assert_int_equal(r[0], 2);
  assert_int_equal(r[1], 1);
  assert_int_equal(r[2], -1);
  onyx_value_release(y);
  onyx_value_release(x);
  otm_free(m);
}

/* Strings to strings: keys_strings [k, k\0] -> values_strings [v\0w, \0],
 * default_string b"d\0" for anything else ("k\0\0" included). */
static void test_label_encoder_values_strings_nul(void** state) {
  (void)state;
  const Bytes in[3] = {B("k\0"), B("k"), B("k\0\0")};
  OnyxValue* x = strings_value(in, 3);
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "ai.onnx.ml", 2);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){3});
  otm_output(m, "y", ONYX_ELEM_STRING, 1, (int64_t[]){3});
  OxTestNode* n = otm_node(m, "LabelEncoder", "le", "x", "y");
  otm_node_domain(n, "ai.onnx.ml");
  nul_attr(otm_attr_strings(n, "keys_strings", 2, (const char*[]){"k", "k#"}));
  nul_attr(otm_attr_strings(n, "values_strings", 2, (const char*[]){"v#w", "#"}));
  nul_attr(otm_attr_string(n, "default_string", "d#"));
  OnyxValue* y = NULL;
  ok(run_model(m, x, (const char*[]){"y"}, 1, &y));
  const Bytes want[3] = {B("\0"), B("v\0w"), B("d\0")};
  expect_bytes(onyx_value_tensor(y), want, 3);
  onyx_value_release(y);
  onyx_value_release(x);
  otm_free(m);
}

/* LabelEncoder 1: classes_strings [p\0q, p\0r] map to their index, so
 * p\0r -> 1, p\0q -> 0 and p -> default_int64 -1. */
static void test_label_encoder_classes_strings_nul(void** state) {
  (void)state;
  const Bytes in[3] = {B("p\0r"), B("p\0q"), B("p")};
  OnyxValue* x = strings_value(in, 3);
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "ai.onnx.ml", 1);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){3});
  otm_output(m, "y", ONYX_ELEM_INT64, 1, (int64_t[]){3});
  OxTestNode* n = otm_node(m, "LabelEncoder", "le", "x", "y");
  otm_node_domain(n, "ai.onnx.ml");
  nul_attr(otm_attr_strings(n, "classes_strings", 2, (const char*[]){"p#q", "p#r"}));
  OnyxValue* y = NULL;
  ok(run_model(m, x, (const char*[]){"y"}, 1, &y));
  const int64_t* r = onyx_tensor_data(onyx_value_tensor(y));
  assert_int_equal(r[0], 1);
  assert_int_equal(r[1], 0);
  assert_int_equal(r[2], -1);
  onyx_value_release(y);
  onyx_value_release(x);
  otm_free(m);
}

/* --- StringNormalizer's stopwords ---------------------------------------------------------------
 */

/* Case-sensitive, no case change, stop word b"b\0": b"b\0" goes; b"b" and
 * b"b\0c" stay (cut at the NUL the stop word would be "b" and remove b"b"). */
static void test_string_normalizer_stopwords_nul(void** state) {
  (void)state;
  const Bytes in[3] = {B("b"), B("b\0"), B("b\0c")};
  OnyxValue* x = strings_value(in, 3);
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){3});
  otm_output(m, "y", ONYX_ELEM_STRING, 1, (int64_t[]){-1});
  OxTestNode* n = otm_node(m, "StringNormalizer", "norm", "x", "y");
  otm_attr_string(n, "case_change_action", "NONE");
  otm_attr_int(n, "is_case_sensitive", 1);
  nul_attr(otm_attr_strings(n, "stopwords", 1, (const char*[]){"b#"}));
  OnyxValue* y = NULL;
  ok(run_model(m, x, (const char*[]){"y"}, 1, &y));
  const Bytes want[2] = {B("b"), B("b\0c")};
  expect_bytes(onyx_value_tensor(y), want, 2);
  onyx_value_release(y);
  onyx_value_release(x);
  otm_free(m);
}

/* Case-insensitive with UPPER: stop word b"B\0X" matches b"b\0x" (both
 * lower to b"b\0x"), not b"B"; the kept b"b" is raised to b"B". */
static void test_string_normalizer_stopwords_nul_insensitive(void** state) {
  (void)state;
  const Bytes in[2] = {B("b\0x"), B("b")};
  OnyxValue* x = strings_value(in, 2);
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){2});
  otm_output(m, "y", ONYX_ELEM_STRING, 1, (int64_t[]){-1});
  OxTestNode* n = otm_node(m, "StringNormalizer", "norm", "x", "y");
  otm_attr_string(n, "case_change_action", "UPPER");
  otm_attr_int(n, "is_case_sensitive", 0);
  nul_attr(otm_attr_strings(n, "stopwords", 1, (const char*[]){"B#X"}));
  OnyxValue* y = NULL;
  ok(run_model(m, x, (const char*[]){"y"}, 1, &y));
  const Bytes want[1] = {B("B")};
  expect_bytes(onyx_value_tensor(y), want, 1);
  onyx_value_release(y);
  onyx_value_release(x);
  otm_free(m);
}

/* Two StringSplits over the same input whose delimiters differ only after
 * a NUL (b"a\0b", b"a\0c": same length) stay two nodes: common-subexpression
 * elimination must not merge them. b"1a\0b2a\0c3" splits into
 * [1, 2a\0c3] and [1a\0b2, 3]; their StringConcat is [11a\0b2, 2a\0c33]
 * (merged, it would be [11, 2a\0c32a\0c3]). */
static void test_splits_differing_after_nul_stay_apart(void** state) {
  (void)state;
  const Bytes in[1] = {B("1a\0b2a\0c3")};
  OnyxValue* x = strings_value(in, 1);
  OxTestModel* m = otm_new(20);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){1});
  nul_attr(otm_attr_string(otm_node(m, "StringSplit", "s1", "x", "p1,c1"), "delimiter", "a#b"));
  nul_attr(otm_attr_string(otm_node(m, "StringSplit", "s2", "x", "p2,c2"), "delimiter", "a#c"));
  otm_node(m, "StringConcat", "cat", "p1,p2", "y");
  otm_output(m, "y", ONYX_ELEM_STRING, 2, (int64_t[]){1, 2});
  OnyxValue* y = NULL;
  ok(run_model(m, x, (const char*[]){"y"}, 1, &y));
  const Bytes want[2] = {B("11a\0b2"), B("2a\0c33")};
  expect_bytes(onyx_value_tensor(y), want, 2);
  onyx_value_release(y);
  onyx_value_release(x);
  otm_free(m);
}

/* --- Constant's value_strings ------------------------------------------------------------------
 */

/* Constant value_strings [a\0b, \0] (folded at session creation or run by
 * the CPU provider) gives those bytes. */
static void test_constant_value_strings_nul(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_output(m, "y", ONYX_ELEM_STRING, 1, (int64_t[]){2});
  OxTestNode* n = otm_node(m, "Constant", "c", "", "y");
  nul_attr(otm_attr_strings(n, "value_strings", 2, (const char*[]){"a#b", "#"}));
  OnyxValue* y = NULL;
  ok(run_model(m, NULL, (const char*[]){"y"}, 1, &y));
  const Bytes want[2] = {B("a\0b"), B("\0")};
  expect_bytes(onyx_value_tensor(y), want, 2);
  onyx_value_release(y);
  otm_free(m);
}

/* --- Equal on strings ----------------------------------------------------------------------------
 */

/* [a\0b, a\0c] == [a\0b, a\0b] is [true, false]; with a broadcast scalar
 * b"a\0c": [false, true]; "a" == b"a\0" is false, b"" == b"" true. */
static void test_equal_strings_nul(void** state) {
  (void)state;
  const Bytes a[2] = {B("a\0b"), B("a\0c")}, b[2] = {B("a\0b"), B("a\0b")}, c[1] = {B("a\0c")};
  OnyxValue* xs[2] = {strings_value(a, 2), strings_value(b, 2)};
  OxTestModel* m = otm_new(19);
  otm_input(m, "a", ONYX_ELEM_STRING, 1, (int64_t[]){2});
  otm_input(m, "b", ONYX_ELEM_STRING, 1, (int64_t[]){-1});
  otm_output(m, "y", ONYX_ELEM_BOOL, 1, (int64_t[]){2});
  otm_node(m, "Equal", "eq", "a,b", "y");
  OnyxValue* y = NULL;
  ok(ots_run_values(m, (const char*[]){"a", "b"}, (const OnyxValue* const*)xs, 2,
                    (const char*[]){"y"}, 1, &y));
  const uint8_t* r = onyx_tensor_data(onyx_value_tensor(y));
  assert_int_equal(r[0], 1);
  assert_int_equal(r[1], 0);
  onyx_value_release(y);
  onyx_value_release(xs[1]);

  xs[1] = strings_value(c, 1);
  ok(ots_run_values(m, (const char*[]){"a", "b"}, (const OnyxValue* const*)xs, 2,
                    (const char*[]){"y"}, 1, &y));
  r = onyx_tensor_data(onyx_value_tensor(y));
  assert_int_equal(r[0], 0);
  assert_int_equal(r[1], 1);
  onyx_value_release(y);
  onyx_values_release(xs, 2);

  const Bytes d[2] = {B("a"), B("")}, e[2] = {B("a\0"), B("")};
  xs[0] = strings_value(d, 2);
  xs[1] = strings_value(e, 2);
  ok(ots_run_values(m, (const char*[]){"a", "b"}, (const OnyxValue* const*)xs, 2,
                    (const char*[]){"y"}, 1, &y));
  r = onyx_tensor_data(onyx_value_tensor(y));
  assert_int_equal(r[0], 0);
  assert_int_equal(r[1], 1);
  onyx_value_release(y);
  onyx_values_release(xs, 2);
  otm_free(m);
}

/* --- IR, host API, save and reload --------------------------------------------------------------
 */

static const OxNode* find_node(const OxGraph* g, const char* name) {
  for (size_t i = 0; i < g->n_nodes; i++)
    if (!strcmp(g->nodes[i]->name, name)) return g->nodes[i];
  fail_msg("no node '%s'", name);
  return NULL;
}

/* The pool as loaded: two entries of 3 bytes, a\0b and a\0c. */
static void expect_pool(const OxGraph* g) {
  const OxAttr* a = ox_node_attr(find_node(g, "tf"), "pool_strings");
  assert_non_null(a);
  assert_int_equal(a->type, ONYX_ATTR_STRINGS);
  assert_int_equal(a->count, 2);
  assert_non_null(a->strings_len);
  assert_int_equal(a->strings_len[0], 3);
  assert_int_equal(a->strings_len[1], 3);
  assert_memory_equal(a->strings[0], "a\0b", 4); /* NUL-terminated after the bytes */
  assert_memory_equal(a->strings[1], "a\0c", 4);
}

/* The ABI call: lengths beside node_attr_strings, same count; NULL and 0
 * for an absent attribute and for one of another type. */
static void test_host_api_strings_lens(void** state) {
  (void)state;
  OxTestModel* m = tfidf_pool_model();
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  OxGraph* g = NULL;
  ok(ox_model_load_bytes(bytes, len, NULL, "pool.onnx", NULL, &g));
  free(bytes);
  otm_free(m);
  expect_pool(g);
  const OnyxHostApi* H = ox_host_api();
  assert_true(H->struct_size >=
              offsetof(OnyxHostApi, node_attr_strings_lens) + sizeof H->node_attr_strings_lens);
  const OxNode* n = find_node(g, "tf");
  size_t n_s = 0, n_l = 99;
  const char* const* s = H->node_attr_strings(n, "pool_strings", &n_s);
  const size_t* l = H->node_attr_strings_lens(n, "pool_strings", &n_l);
  assert_non_null(s);
  assert_non_null(l);
  assert_int_equal(n_s, 2);
  assert_int_equal(n_l, 2);
  assert_int_equal(l[0], 3);
  assert_int_equal(l[1], 3);
  assert_string_equal(s[0], "a"); /* a reader without lengths sees up to the NUL */
  n_l = 99;
  assert_null(H->node_attr_strings_lens(n, "stopwords", &n_l));
  assert_int_equal(n_l, 0);
  n_l = 99;
  assert_null(H->node_attr_strings_lens(n, "ngram_indexes", &n_l)); /* INTS */
  assert_int_equal(n_l, 0);
  assert_ptr_equal(H->node_attr_strings_lens(n, "pool_strings", NULL), l); /* count optional */
  ox_graph_free(g);
}

/* ox_model_save writes each entry with its length: the saved ModelProto's
 * pool_strings are b"a\0b" and b"a\0c" (3 bytes each), the reloaded IR has
 * them byte for byte, and a session of the saved file counts [2, 1] as the
 * original does. */
static void test_save_reload_keeps_attr_strings(void** state) {
  (void)state;
  OxTestModel* m = tfidf_pool_model();
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OxGraph* g = NULL;
  ok(ox_model_load_bytes(bytes, len, NULL, "pool.onnx", NULL, &g));
  free(bytes);
  char* dir = otm_temp_dir();
  char path[600];
  snprintf(path, sizeof path, "%s/saved.onnx", dir);
  ok(ox_model_save(g, path));
  ox_graph_free(g);

  /* The protobuf itself. */
  void* data = NULL;
  size_t n = 0;
  ok(ox_read_file(path, SIZE_MAX, &data, &n));
  Onnx__ModelProto* mp = onnx__model_proto__unpack(NULL, n, data);
  free(data);
  assert_non_null(mp);
  const Onnx__AttributeProto* ap = NULL;
  for (size_t i = 0; i < mp->graph->n_node; i++)
    for (size_t k = 0; k < mp->graph->node[i]->n_attribute; k++)
      if (!strcmp(mp->graph->node[i]->attribute[k]->name, "pool_strings"))
        ap = mp->graph->node[i]->attribute[k];
  assert_non_null(ap);
  assert_int_equal(ap->n_strings, 2);
  assert_int_equal(ap->strings[0].len, 3);
  assert_int_equal(ap->strings[1].len, 3);
  assert_memory_equal(ap->strings[0].data, "a\0b", 3);
  assert_memory_equal(ap->strings[1].data, "a\0c", 3);
  onnx__model_proto__free_unpacked(mp, NULL);

  /* The IR reloaded from the file. */
  ok(ox_model_load_file(path, NULL, &g));
  expect_pool(g);
  ox_graph_free(g);

  /* A session of the saved file. */
  const Bytes in[4] = {B("a\0b"), B("a\0c"), B("a\0b"), B("a")};
  OnyxValue* x = strings_value(in, 4);
  OnyxSession* s = NULL;
  ok(onyx_session_create(NULL, path, &s));
  const char* in_name = "x";
  OnyxValue* y = NULL;
  ok(onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&x, 1, (const char*[]){"y"}, 1,
                      &y));
  const float* r = onyx_tensor_data(onyx_value_tensor(y));
  assert_true(r[0] == 2.0f);
  assert_true(r[1] == 1.0f);
  onyx_value_release(y);
  onyx_value_release(x);
  onyx_session_release(s);
  otm_remove_dir(dir);
  free(dir);
}

/* --- single-string attributes with a NUL --------------------------------------------------------
 */

/* RegexFullMatch's pattern b"a\0": the POSIX engine reads patterns up to a
 * NUL, so the pattern is refused (never matched as "a"). */
static void test_regex_pattern_nul_refused(void** state) {
  (void)state;
  OxTestModel* m = otm_new(20);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){1});
  otm_output(m, "y", ONYX_ELEM_BOOL, 1, (int64_t[]){1});
  OxTestNode* n = otm_node(m, "RegexFullMatch", "re", "x", "y");
  nul_attr(otm_attr_string(n, "pattern", "a#"));
  expect_error(m, ONYX_NOT_IMPLEMENTED,
               (const char*[]){"'re'", "'pattern'", "NUL byte at offset 1", NULL});
  otm_free(m);
}

/* case_change_action b"LOWER\0x" is no keyword (it would read LOWER). */
static void test_case_change_action_nul_refused(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){1});
  otm_output(m, "y", ONYX_ELEM_STRING, 1, (int64_t[]){-1});
  OxTestNode* n = otm_node(m, "StringNormalizer", "norm", "x", "y");
  nul_attr(otm_attr_string(n, "case_change_action", "LOWER#x"));
  expect_error(m, ONYX_INVALID_MODEL,
               (const char*[]){"'norm'", "'case_change_action'", "NUL byte at offset 5", NULL});
  otm_free(m);
}

/* TfIdfVectorizer's mode b"TF\0" is no keyword (it would read TF). */
static void test_tfidf_mode_nul_refused(void** state) {
  (void)state;
  OxTestModel* m = otm_new(9);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){1});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1});
  OxTestNode* n = otm_node(m, "TfIdfVectorizer", "tf", "x", "y");
  nul_attr(otm_attr_string(n, "mode", "TF#"));
  otm_attr_int(n, "min_gram_length", 1);
  otm_attr_int(n, "max_gram_length", 1);
  otm_attr_int(n, "max_skip_count", 0);
  otm_attr_ints(n, "ngram_counts", 1, (const int64_t[]){0});
  otm_attr_ints(n, "ngram_indexes", 1, (const int64_t[]){0});
  otm_attr_strings(n, "pool_strings", 1, (const char*[]){"a"});
  expect_error(m, ONYX_INVALID_MODEL, (const char*[]){"'tf'", "'mode'", "NUL byte", NULL});
  otm_free(m);
}

/* Normalizer's norm b"L2\0" is no keyword (it would read L2). */
static void test_normalizer_norm_nul_refused(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "ai.onnx.ml", 1);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 2});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 2});
  OxTestNode* n = otm_node(m, "Normalizer", "nz", "x", "y");
  otm_node_domain(n, "ai.onnx.ml");
  nul_attr(otm_attr_string(n, "norm", "L2#"));
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s);
  free(bytes);
  assert_non_null(st);
  assert_null(s);
  assert_int_equal(onyx_status_code(st), ONYX_INVALID_MODEL);
  const char* msg = onyx_status_message(st);
  if (!strstr(msg, "'nz'") || !strstr(msg, "'norm'") || !strstr(msg, "NUL byte"))
    fail_msg("message does not name the node, the attribute and the NUL: %s", msg);
  onyx_status_release(st);
  otm_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tfidf_pool_strings_nul),
      cmocka_unit_test(test_tfidf_bigrams_nul),
      cmocka_unit_test(test_label_encoder_keys_strings_nul),
      cmocka_unit_test(test_label_encoder_values_strings_nul),
      cmocka_unit_test(test_label_encoder_classes_strings_nul),
      cmocka_unit_test(test_string_normalizer_stopwords_nul),
      cmocka_unit_test(test_string_normalizer_stopwords_nul_insensitive),
      cmocka_unit_test(test_splits_differing_after_nul_stay_apart),
      cmocka_unit_test(test_constant_value_strings_nul),
      cmocka_unit_test(test_equal_strings_nul),
      cmocka_unit_test(test_host_api_strings_lens),
      cmocka_unit_test(test_save_reload_keeps_attr_strings),
      cmocka_unit_test(test_regex_pattern_nul_refused),
      cmocka_unit_test(test_case_change_action_nul_refused),
      cmocka_unit_test(test_tfidf_mode_nul_refused),
      cmocka_unit_test(test_normalizer_norm_nul_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
