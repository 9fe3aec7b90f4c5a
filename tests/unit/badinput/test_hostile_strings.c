/* test_hostile_strings.c — strings are byte strings of a known length.
 *
 * A string tensor element may hold NUL bytes (ONNX strings are bytes; ONNX
 * Runtime keeps them). Every case here feeds strings with NULs and checks
 * the exact bytes and lengths that come out: through the public API, a .pb
 * round trip, an initializer, the CPU provider's string kernels
 * (RegexFullMatch, StringConcat, StringSplit, LabelEncoder,
 * TfIdfVectorizer), and the 1.0 contract (a reader of the char* sees the
 * bytes up to the first NUL). The hostile attributes of TfIdfVectorizer
 * (max_skip_count and ngram_indexes of INT64_MAX) end quickly, with the
 * right counts or a clear error. Expected values follow the ONNX spec,
 * worked out by hand in the comments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "onyx/onyx.h"
#include "onyx/onyx_ep.h"
#include "ox_ir.h"
#include "ox_host_api.h"
#include "ox_providers.h"
#include "ox_test_models.h"
#include "ox_test_session.h"

#include "hostile_bytes.h"

/* Runs model m with string input "x" and returns its n_out outputs. */
static OnyxStatus* run_model(OxTestModel* m, const OnyxValue* x, const char* const* outs,
                             size_t n_out, OnyxValue** got) {
  const char* in_name = "x";
  return ots_run_values(m, x ? &in_name : NULL, x ? &x : NULL, x ? 1 : 0, outs, n_out, got);
}

/* A TensorProto of strings with NULs: otm_tensor copies C strings, so the
 * placeholders ('#') become NUL bytes afterwards. */
static Onnx__TensorProto* nul_tensor(Onnx__TensorProto* t) {
  for (size_t i = 0; i < t->n_string_data; i++)
    for (size_t k = 0; k < t->string_data[i].len; k++)
      if (t->string_data[i].data[k] == '#') t->string_data[i].data[k] = '\0';
  return t;
}

/* --- representation and the public API -------------------------------------------------- */

/* Identity of [b"a\0b", b"\0"] gives the same bytes, and the 1.0 view of
 * the data (char*) reads "a" and "". */
static void test_identity_keeps_bytes(void** state) {
  (void)state;
  const Bytes in[2] = {B("a\0b"), B("\0")};
  OnyxValue* x = strings_value(in, 2);
  expect_bytes(onyx_value_tensor(x), in, 2);
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){2});
  otm_output(m, "y", ONYX_ELEM_STRING, 1, (int64_t[]){2});
  otm_node(m, "Identity", "id", "x", "y");
  OnyxValue* y = NULL;
  ok(run_model(m, x, (const char*[]){"y"}, 1, &y));
  expect_bytes(onyx_value_tensor(y), in, 2);
  const char* const* s = onyx_tensor_data(onyx_value_tensor(y));
  assert_string_equal(s[0], "a");
  assert_string_equal(s[1], "");
  onyx_value_release(y);
  onyx_value_release(x);
  otm_free(m);
}

/* Sequence ops (host ops) keep the bytes: SplitToSequence makes one item per
 * string, ConcatFromSequence joins them again. */
static void test_sequence_ops_keep_bytes(void** state) {
  (void)state;
  const Bytes in[2] = {B("a\0b"), B("\0")};
  OnyxValue* x = strings_value(in, 2);
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){2});
  otm_output(m, "y", ONYX_ELEM_STRING, 1, (int64_t[]){2});
  otm_node(m, "SplitToSequence", "split", "x", "seq");
  otm_attr_int(otm_node(m, "ConcatFromSequence", "cat", "seq", "y"), "axis", 0);
  OnyxValue* y = NULL;
  ok(run_model(m, x, (const char*[]){"y"}, 1, &y));
  expect_bytes(onyx_value_tensor(y), in, 2);
  onyx_value_release(y);
  onyx_value_release(x);
  otm_free(m);
}

/* Out of range and non-string tensors have length 0; lens NULL means
 * C strings; a NULL string needs length 0. */
static void test_public_api_edges(void** state) {
  (void)state;
  OnyxValue* v = NULL;
  ok(onyx_value_create_string_tensor((const int64_t[]){2}, 1, (const char*[]){"ab", NULL}, NULL,
                                     &v));
  const OnyxTensor* t = onyx_value_tensor(v);
  assert_int_equal(onyx_tensor_string_len(t, 0), 2);
  assert_int_equal(onyx_tensor_string_len(t, 1), 0);
  assert_int_equal(onyx_tensor_string_len(t, 2), 0);
  onyx_value_release(v);
  OnyxStatus* st = onyx_value_create_string_tensor((const int64_t[]){1}, 1, (const char*[]){NULL},
                                                   (const size_t[]){3}, &v);
  assert_non_null(st);
  assert_int_equal(onyx_status_code(st), ONYX_INVALID_ARGUMENT);
  onyx_status_release(st);
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (const int64_t[]){1}, 1, NULL, 0, &v));
  assert_int_equal(onyx_tensor_string_len(onyx_value_tensor(v), 0), 0);
  onyx_value_release(v);
}

/* Save as a TensorProto and load it back: the bytes survive. */
static void test_tensor_proto_round_trip(void** state) {
  (void)state;
  const Bytes in[3] = {B("a\0b"), B("\0"), B("\0\0x\0")};
  OnyxValue* x = strings_value(in, 3);
  char* dir = otm_temp_dir();
  char path[600];
  snprintf(path, sizeof path, "%s/s.pb", dir);
  ok(onyx_value_save_tensor_proto(x, "s", path));
  OnyxValue* back = NULL;
  char* name = NULL;
  ok(onyx_value_load_tensor_proto(path, &back, &name));
  assert_string_equal(name, "s");
  expect_bytes(onyx_value_tensor(back), in, 3);
  onyx_free(name);
  onyx_value_release(back);
  onyx_value_release(x);
  otm_remove_dir(dir);
  free(dir);
}

/* An initializer with NULs reaches the output whole. */
static void test_initializer_keeps_bytes(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  nul_tensor(
      otm_initializer(m, "c", ONYX_ELEM_STRING, 1, (int64_t[]){2}, (const char*[]){"p#q", "#"}));
  otm_output(m, "y", ONYX_ELEM_STRING, 1, (int64_t[]){2});
  otm_node(m, "Identity", "id", "c", "y");
  OnyxValue* y = NULL;
  ok(run_model(m, NULL, (const char*[]){"y"}, 1, &y));
  const Bytes want[2] = {B("p\0q"), B("\0")};
  expect_bytes(onyx_value_tensor(y), want, 2);
  onyx_value_release(y);
  otm_free(m);
}

/* The host tensor API: clones and views keep lengths; the provider table's
 * tensor_string is the 1.0 view (up to the first NUL), tensor_string_len
 * the length, and tensor_set_string stores exactly len bytes. */
static void test_host_api_strings(void** state) {
  (void)state;
  const OnyxHostApi* H = ox_host_api();
  OxTensor* t = NULL;
  ok(ox_tensor_new(ONYX_ELEM_STRING, (const int64_t[]){3}, 1, &t));
  ok(H->tensor_set_string(t, 0, "x\0yz", 4));
  ok(H->tensor_set_string(t, 1, "plain", 5));
  ok(H->tensor_set_string(t, 2, "cut\0here", 3));
  assert_string_equal(H->tensor_string(t, 0), "x");
  assert_int_equal(H->tensor_string_len(t, 0), 4);
  assert_int_equal(H->tensor_string_len(t, 1), 5);
  assert_int_equal(H->tensor_string_len(t, 2), 3);
  assert_memory_equal(H->tensor_string(t, 0), "x\0yz", 5);
  /* Overwriting a string with a NUL by one without keeps the new length. */
  ok(H->tensor_set_string(t, 0, "ab", 2));
  assert_int_equal(H->tensor_string_len(t, 0), 2);
  ok(H->tensor_set_string(t, 0, "\0\0", 2));
  OxTensor* c = NULL;
  ok(ox_tensor_clone(t, &c));
  assert_int_equal(ox_tensor_string_len(c, 0), 2);
  assert_memory_equal(ox_tensor_string(c, 0), "\0\0", 3);
  OxTensor* v = NULL;
  ok(ox_tensor_view(t, (const int64_t[]){1, 3}, 2, &v));
  assert_int_equal(H->tensor_string_len(v, 0), 2);
  assert_int_equal(H->tensor_string_len(v, 1), 5);
  OnyxStatus* st = H->tensor_set_string(t, 3, "z", 1);
  assert_non_null(st);
  onyx_status_release(st);
  ox_tensor_free(v);
  ox_tensor_free(c);
  ox_tensor_free(t);
}

/* --- CPU provider kernels ------------------------------------------------------------------ */

/* RE2's full match over the bytes: "a.b|a" matches b"a\0b" (the dot takes
 * the NUL) and b"a", not b"a\0" (a trailing byte is left over). */
static void test_regex_full_match_nul(void** state) {
  (void)state;
  const Bytes in[3] = {B("a\0b"), B("a\0"), B("a")};
  OnyxValue* x = strings_value(in, 3);
  OxTestModel* m = otm_new(20);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){3});
  otm_output(m, "y", ONYX_ELEM_BOOL, 1, (int64_t[]){3});
  OxTestNode* n = otm_node(m, "RegexFullMatch", "re", "x", "y");
  otm_attr_string(n, "pattern", "a.b|a");
  OnyxValue* y = NULL;
  ok(run_model(m, x, (const char*[]){"y"}, 1, &y));
  const uint8_t* r = onyx_tensor_data(onyx_value_tensor(y));
  assert_int_equal(r[0], 1);
  assert_int_equal(r[1], 0);
  assert_int_equal(r[2], 1);
  onyx_value_release(y);
  onyx_value_release(x);
  otm_free(m);
}

/* StringConcat joins the bytes: b"a\0" + b"\0b" = b"a\0\0b". */
static void test_string_concat_nul(void** state) {
  (void)state;
  const Bytes a[2] = {B("a\0"), B("x")};
  OnyxValue* x = strings_value(a, 2);
  OxTestModel* m = otm_new(20);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){2});
  nul_tensor(
      otm_initializer(m, "b", ONYX_ELEM_STRING, 1, (int64_t[]){2}, (const char*[]){"#b", "y#"}));
  otm_output(m, "y", ONYX_ELEM_STRING, 1, (int64_t[]){2});
  otm_node(m, "StringConcat", "cat", "x,b", "y");
  OnyxValue* y = NULL;
  ok(run_model(m, x, (const char*[]){"y"}, 1, &y));
  const Bytes want[2] = {B("a\0\0b"), B("xy\0")};
  expect_bytes(onyx_value_tensor(y), want, 2);
  onyx_value_release(y);
  onyx_value_release(x);
  otm_free(m);
}

/* StringSplit on the delimiter "\0": b"a\0b\0".split(b"\0") is
 * [b"a", b"b", b""] and b"xy" stays whole; the run ends. */
static void test_string_split_nul_delimiter(void** state) {
  (void)state;
  const Bytes in[2] = {B("a\0b\0"), B("xy")};
  OnyxValue* x = strings_value(in, 2);
  OxTestModel* m = otm_new(20);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){2});
  otm_output(m, "y", ONYX_ELEM_STRING, 2, (int64_t[]){2, 3});
  otm_output(m, "z", ONYX_ELEM_INT64, 1, (int64_t[]){2});
  OxTestNode* n = otm_node(m, "StringSplit", "split", "x", "y,z");
  Onnx__AttributeProto* d = otm_attr_string(n, "delimiter", "#");
  d->s.data[0] = '\0';
  OnyxValue* got[2] = {0};
  ok(run_model(m, x, (const char*[]){"y", "z"}, 2, got));
  const Bytes want[6] = {B("a"), B("b"), B(""), B("xy"), B(""), B("")};
  expect_bytes(onyx_value_tensor(got[0]), want, 6);
  const int64_t* z = onyx_tensor_data(onyx_value_tensor(got[1]));
  assert_int_equal(z[0], 3);
  assert_int_equal(z[1], 1);
  onyx_values_release(got, 2);
  onyx_value_release(x);
  otm_free(m);
}

/* An empty delimiter splits on whitespace runs (the spec), NUL bytes being
 * ordinary: b" a\0 b " gives [b"a\0", b"b"]. */
static void test_string_split_empty_delimiter(void** state) {
  (void)state;
  const Bytes in[1] = {B(" a\0 b ")};
  OnyxValue* x = strings_value(in, 1);
  OxTestModel* m = otm_new(20);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){1});
  otm_output(m, "y", ONYX_ELEM_STRING, 2, (int64_t[]){1, 2});
  otm_output(m, "z", ONYX_ELEM_INT64, 1, (int64_t[]){1});
  OxTestNode* n = otm_node(m, "StringSplit", "split", "x", "y,z");
  otm_attr_string(n, "delimiter", "");
  OnyxValue* got[2] = {0};
  ok(run_model(m, x, (const char*[]){"y", "z"}, 2, got));
  const Bytes want[2] = {B("a\0"), B("b")};
  expect_bytes(onyx_value_tensor(got[0]), want, 2);
  assert_int_equal(((const int64_t*)onyx_tensor_data(onyx_value_tensor(got[1])))[0], 2);
  onyx_values_release(got, 2);
  onyx_value_release(x);
  otm_free(m);
}

/* StringNormalizer (LOWER, stop word "b"): b"A\0B" lowers to b"a\0b",
 * b"b" goes, and b"b\0" is no stop word (it is longer). */
static void test_string_normalizer_nul(void** state) {
  (void)state;
  const Bytes in[3] = {B("A\0B"), B("b"), B("b\0")};
  OnyxValue* x = strings_value(in, 3);
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){3});
  otm_output(m, "y", ONYX_ELEM_STRING, 1, (int64_t[]){-1});
  OxTestNode* n = otm_node(m, "StringNormalizer", "norm", "x", "y");
  otm_attr_string(n, "case_change_action", "LOWER");
  otm_attr_strings(n, "stopwords", 1, (const char*[]){"b"});
  OnyxValue* y = NULL;
  ok(run_model(m, x, (const char*[]){"y"}, 1, &y));
  const Bytes want[2] = {B("a\0b"), B("b\0")};
  expect_bytes(onyx_value_tensor(y), want, 2);
  onyx_value_release(y);
  onyx_value_release(x);
  otm_free(m);
}

/* LabelEncoder (ai.onnx.ml 4) with tensor keys and values: b"a\0b" -> 1,
 * b"a" -> 2; b"a\0c" is no key (-1, default_int64). Strings to strings:
 * b"k\0" -> b"v\0w", b"k" -> the default "_Unused". */
static void test_label_encoder_nul(void** state) {
  (void)state;
  const Bytes in[3] = {B("a"), B("a\0b"), B("a\0c")};
  OnyxValue* x = strings_value(in, 3);
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "ai.onnx.ml", 4);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){3});
  otm_output(m, "y", ONYX_ELEM_INT64, 1, (int64_t[]){3});
  OxTestNode* n = otm_node(m, "LabelEncoder", "le", "x", "y");
  otm_node_domain(n, "ai.onnx.ml");
  otm_attr_tensor(n, "keys_tensor",
                  nul_tensor(otm_tensor(m, "k", ONYX_ELEM_STRING, 1, (int64_t[]){2},
                                        (const char*[]){"a#b", "a"})));
  otm_attr_tensor(n, "values_tensor",
                  otm_tensor(m, "v", ONYX_ELEM_INT64, 1, (int64_t[]){2}, (const int64_t[]){1, 2}));
  OnyxValue* y = NULL;
  ok(run_model(m, x, (const char*[]){"y"}, 1, &y));
  const int64_t* r = onyx_tensor_data(onyx_value_tensor(y));
  assert_int_equal(r[0], 2);
  assert_int_equal(r[1], 1);
  assert_int_equal(r[2], -1);
  onyx_value_release(y);
  onyx_value_release(x);
  otm_free(m);

  const Bytes in2[2] = {B("k\0"), B("k")};
  x = strings_value(in2, 2);
  m = otm_new(17);
  otm_add_opset(m, "ai.onnx.ml", 4);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){2});
  otm_output(m, "y", ONYX_ELEM_STRING, 1, (int64_t[]){2});
  n = otm_node(m, "LabelEncoder", "le", "x", "y");
  otm_node_domain(n, "ai.onnx.ml");
  otm_attr_tensor(
      n, "keys_tensor",
      nul_tensor(otm_tensor(m, "k", ONYX_ELEM_STRING, 1, (int64_t[]){1}, (const char*[]){"k#"})));
  otm_attr_tensor(
      n, "values_tensor",
      nul_tensor(otm_tensor(m, "v", ONYX_ELEM_STRING, 1, (int64_t[]){1}, (const char*[]){"v#w"})));
  ok(run_model(m, x, (const char*[]){"y"}, 1, &y));
  const Bytes want[2] = {B("v\0w"), B("_Unused")};
  expect_bytes(onyx_value_tensor(y), want, 2);
  onyx_value_release(y);
  onyx_value_release(x);
  otm_free(m);
}

/* TfIdfVectorizer (TF, unigrams "a" and "b"): the token b"a\0" is not "a",
 * so [a, a\0, b, a] counts a twice and b once. */
static void test_tfidf_string_tokens_nul(void** state) {
  (void)state;
  const Bytes in[4] = {B("a"), B("a\0"), B("b"), B("a")};
  OnyxValue* x = strings_value(in, 4);
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
  otm_attr_strings(n, "pool_strings", 2, (const char*[]){"a", "b"});
  OnyxValue* y = NULL;
  ok(run_model(m, x, (const char*[]){"y"}, 1, &y));
  const float* r = onyx_tensor_data(onyx_value_tensor(y));
  assert_true(r[0] == 2.0f);
  assert_true(r[1] == 1.0f);
  onyx_value_release(y);
  onyx_value_release(x);
  otm_free(m);
}

/* A TfIdfVectorizer over int64 tokens counting the bigram (1, 2) with the
 * given max_skip_count; the tokens are input "x", or an initializer when
 * fold is set (then constant folding runs it inside session creation). */
static OxTestModel* tfidf_bigram_model(int64_t max_skip, int64_t index, bool fold) {
  static const int64_t tokens[6] = {1, 9, 9, 2, 1, 2};
  OxTestModel* m = otm_new(9);
  if (fold)
    otm_initializer(m, "x", ONYX_ELEM_INT64, 1, (int64_t[]){6}, tokens);
  else
    otm_input(m, "x", ONYX_ELEM_INT64, 1, (int64_t[]){6});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){index > 0 ? -1 : 1});
  OxTestNode* n = otm_node(m, "TfIdfVectorizer", "tf", "x", "y");
  otm_attr_string(n, "mode", "TF");
  otm_attr_int(n, "min_gram_length", 2);
  otm_attr_int(n, "max_gram_length", 2);
  otm_attr_int(n, "max_skip_count", max_skip);
  otm_attr_ints(n, "ngram_counts", 2, (const int64_t[]){0, 0});
  otm_attr_ints(n, "ngram_indexes", 1, (const int64_t[]){index});
  otm_attr_ints(n, "pool_int64s", 2, (const int64_t[]){1, 2});
  return m;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* max_skip_count = INT64_MAX: the skips are bounded by the row. In
 * [1, 9, 9, 2, 1, 2] the pairs (1 at i, 2 at j > i) are (0, 3), (0, 5) and
 * (4, 5): skips 2, 4 and 0, each within reach, so the count is 3. */
static void test_tfidf_max_skip_int64_max(void** state) {
  (void)state;
  const int64_t tokens[6] = {1, 9, 9, 2, 1, 2};
  for (int fold = 0; fold < 2; fold++) {
    double t0 = now_s();
    OxTestModel* m = tfidf_bigram_model(INT64_MAX, 0, fold);
    OnyxValue* x = NULL;
    if (!fold)
      ok(onyx_value_create_tensor(ONYX_ELEM_INT64, (const int64_t[]){6}, 1, tokens, sizeof tokens,
                                  &x));
    OnyxValue* y = NULL;
    ok(run_model(m, x, (const char*[]){"y"}, 1, &y));
    const OnyxTensor* t = onyx_value_tensor(y);
    assert_int_equal(onyx_tensor_elem_count(t), 1);
    assert_true(((const float*)onyx_tensor_data(t))[0] == 3.0f);
    onyx_value_release(y);
    onyx_value_release(x);
    otm_free(m);
    assert_true(now_s() - t0 < 10.0);
  }
}

/* ngram_indexes of INT64_MAX: the output size is max + 1, which does not
 * exist; a clear error names the attribute (no overflow, no huge
 * allocation). */
static void test_tfidf_index_int64_max(void** state) {
  (void)state;
  for (int fold = 0; fold < 2; fold++) {
    OxTestModel* m = tfidf_bigram_model(0, INT64_MAX, fold);
    const int64_t tokens[6] = {1, 9, 9, 2, 1, 2};
    OnyxValue* x = NULL;
    if (!fold)
      ok(onyx_value_create_tensor(ONYX_ELEM_INT64, (const int64_t[]){6}, 1, tokens, sizeof tokens,
                                  &x));
    OnyxValue* y = NULL;
    OnyxStatus* st = run_model(m, x, (const char*[]){"y"}, 1, &y);
    assert_non_null(st);
    assert_null(y);
    if (!strstr(onyx_status_message(st), "ngram_indexes"))
      fail_msg("message does not name ngram_indexes: %s", onyx_status_message(st));
    onyx_status_release(st);
    onyx_value_release(x);
    otm_free(m);
  }
}

/* --- names in onyx_session_explain ------------------------------------------------------ */

/* Node and value names holding ESC, BEL, CR, a newline, a backslash and a
 * C1 control (U+009B, CSI) come out of explain escaped as the `onyx` command
 * prints them: no control byte but the report's own newlines, one line per
 * node. */
static void test_explain_escapes_names(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_input(m, "X\x1b[2J", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_node(m, "Relu", "evil\nnode\x07", "X\x1b[2J", "A\r\\");
  otm_node(m, "Neg",
           "csi\xc2\x9b"
           "31m",
           "A\r\\", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_log_severity(o, ONYX_LOG_FATAL));
  ok(onyx_session_options_set_optimization_level(o, ONYX_OPT_DISABLED));
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_options_release(o);
  free(bytes);
  char* text = NULL;
  ok(onyx_session_explain(s, &text));
  for (const unsigned char* c = (const unsigned char*)text; *c; c++) {
    if ((*c < 0x20 && *c != '\n') || *c == 0x7f)
      fail_msg("explain holds byte 0x%02x at %zu:\n%s", *c,
               (size_t)(c - (const unsigned char*)text), text);
    if (c[0] == 0xc2 && c[1] >= 0x80 && c[1] <= 0x9f) fail_msg("explain holds a C1 control");
  }
  /* the escaped forms, each on its node's line */
  const char* relu = strstr(text, "evil\\nnode\\x07");
  const char* neg = strstr(text, "csi\\xc2\\x9b31m");
  if (!relu || !neg) fail_msg("escaped node names missing:\n%s", text);
  const char* eol = strchr(relu, '\n');
  if (!eol || !strstr(relu, "Relu") || strstr(relu, "Relu") > eol)
    fail_msg("the Relu node's line is broken:\n%s", text);
  onyx_free(text);
  onyx_session_release(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_identity_keeps_bytes),
      cmocka_unit_test(test_sequence_ops_keep_bytes),
      cmocka_unit_test(test_public_api_edges),
      cmocka_unit_test(test_tensor_proto_round_trip),
      cmocka_unit_test(test_initializer_keeps_bytes),
      cmocka_unit_test(test_host_api_strings),
      cmocka_unit_test(test_regex_full_match_nul),
      cmocka_unit_test(test_string_concat_nul),
      cmocka_unit_test(test_string_split_nul_delimiter),
      cmocka_unit_test(test_string_split_empty_delimiter),
      cmocka_unit_test(test_string_normalizer_nul),
      cmocka_unit_test(test_label_encoder_nul),
      cmocka_unit_test(test_tfidf_string_tokens_nul),
      cmocka_unit_test(test_tfidf_max_skip_int64_max),
      cmocka_unit_test(test_tfidf_index_int64_max),
      cmocka_unit_test(test_explain_escapes_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
