/* test_text_ml.c — string ops and ai.onnx.ml ops on the CPU provider, through
 * a session. Expected values follow Python's str.split / re.fullmatch and the
 * ONNX definitions (checked with Python while writing the cases). */
#include "misc_test_util.h"

static void expect_strings(const OnyxValue* v, const char* const* want, size_t n,
                           const int64_t* dims, size_t rank) {
  const OnyxTensor* t = onyx_value_tensor(v);
  assert_non_null(t);
  assert_int_equal(onyx_tensor_elem_type(t), ONYX_ELEM_STRING);
  assert_int_equal(onyx_tensor_rank(t), rank);
  assert_memory_equal(onyx_tensor_dims(t), dims, rank * sizeof *dims);
  assert_int_equal(onyx_tensor_elem_count(t), n);
  const char* const* got = onyx_tensor_data(t);
  for (size_t i = 0; i < n; i++)
    assert_string_equal(got[i], want[i]);
}

/* StringSplit without a delimiter splits on whitespace runs; maxsplit keeps
 * the rest as it is: "  a b  c ".split(None, 1) == ['a', 'b  c ']. */
static void test_string_split_whitespace_maxsplit(void** state) {
  (void)state;
  OxTestModel* m = otm_new(20);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){3});
  otm_output(m, "y", ONYX_ELEM_STRING, 2, (int64_t[]){3, 2});
  otm_output(m, "z", ONYX_ELEM_INT64, 1, (int64_t[]){3});
  OxTestNode* n = otm_node(m, "StringSplit", "split", "x", "y,z");
  otm_attr_int(n, "maxsplit", 1);
  const char* x[3] = {"  a b  c ", "x", "   "};
  OtsFeed f[] = {{"x", ONYX_ELEM_STRING, 1, {3}, x}};
  OnyxValue* got[2] = {0};
  ots_ok(ots_run(m, f, 1, (const char*[]){"y", "z"}, 2, got));
  const char* y[6] = {"a", "b  c ", "x", "", "", ""};
  expect_strings(got[0], y, 6, (int64_t[]){3, 2}, 2);
  const int64_t* z = onyx_tensor_data(onyx_value_tensor(got[1]));
  assert_int_equal(z[0], 2);
  assert_int_equal(z[1], 1);
  assert_int_equal(z[2], 0); /* only whitespace: no piece */
  onyx_values_release(got, 2);
  otm_free(m);
}

static OnyxStatus* regex_run(const char* pattern, const char* const* x, size_t n, OnyxValue** got) {
  OxTestModel* m = otm_new(20);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){(int64_t)n});
  otm_output(m, "y", ONYX_ELEM_BOOL, 1, (int64_t[]){(int64_t)n});
  OxTestNode* node = otm_node(m, "RegexFullMatch", "re", "x", "y");
  otm_attr_string(node, "pattern", pattern);
  OtsFeed f[] = {{"x", ONYX_ELEM_STRING, 1, {(int64_t)n}, x}};
  OnyxStatus* st = ots_run(m, f, 1, (const char*[]){"y"}, 1, got);
  otm_free(m);
  return st;
}

/* RE2 escapes inside brackets ([\w.\-]) and \d are translated for POSIX; a
 * full match, not a search. */
static void test_regex_full_match_translation(void** state) {
  (void)state;
  const char* x[4] = {"a-b.c@x.com", "a-b.c@x.comm", "12", "12a"};
  OnyxValue* got = NULL;
  ots_ok(regex_run("[\\w.\\-]+@x\\.com|\\d+", x, 4, &got));
  const uint8_t* y = onyx_tensor_data(onyx_value_tensor(got));
  assert_int_equal(y[0], 1);
  assert_int_equal(y[1], 0);
  assert_int_equal(y[2], 1);
  assert_int_equal(y[3], 0);
  onyx_value_release(got);
  /* What POSIX cannot run is refused, naming the node and the reason. */
  OnyxStatus* st = regex_run("a+?", x, 4, &got);
  assert_non_null(st);
  assert_non_null(strstr(onyx_status_message(st), "'re'"));
  assert_non_null(strstr(onyx_status_message(st), "lazy quantifier"));
  onyx_status_release(st);
}

/* LabelEncoder (ai.onnx.ml 2): missing keys take default_int64 (-1 unless set). */
static void test_label_encoder_default(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "ai.onnx.ml", 2);
  otm_input(m, "x", ONYX_ELEM_STRING, 1, (int64_t[]){4});
  otm_output(m, "y", ONYX_ELEM_INT64, 1, (int64_t[]){4});
  OxTestNode* n = otm_node(m, "LabelEncoder", "le", "x", "y");
  otm_node_domain(n, "ai.onnx.ml");
  otm_attr_strings(n, "keys_strings", 2, (const char*[]){"b", "a"});
  otm_attr_ints(n, "values_int64s", 2, (const int64_t[]){7, 5});
  const char* x[4] = {"a", "zz", "b", ""};
  OtsFeed f[] = {{"x", ONYX_ELEM_STRING, 1, {4}, x}};
  OnyxValue* got = NULL;
  ots_ok(ots_run(m, f, 1, (const char*[]){"y"}, 1, &got));
  const int64_t* y = onyx_tensor_data(onyx_value_tensor(got));
  assert_int_equal(y[0], 5);
  assert_int_equal(y[1], -1);
  assert_int_equal(y[2], 7);
  assert_int_equal(y[3], -1);
  onyx_value_release(got);
  otm_free(m);
}

/* TfIdfVectorizer in TF mode counts unigrams once and bigrams for every skip
 * up to max_skip_count: tokens 1 2 1 2, pool {1} and {(1,2)}; the bigram
 * (1,2) occurs at skips 0 (twice) and 2 (once). */
static void test_tfidf_counts(void** state) {
  (void)state;
  OxTestModel* m = otm_new(9);
  otm_input(m, "x", ONYX_ELEM_INT64, 1, (int64_t[]){4});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  OxTestNode* n = otm_node(m, "TfIdfVectorizer", "tfidf", "x", "y");
  otm_attr_string(n, "mode", "TF");
  otm_attr_int(n, "min_gram_length", 1);
  otm_attr_int(n, "max_gram_length", 2);
  otm_attr_int(n, "max_skip_count", 2);
  otm_attr_ints(n, "ngram_counts", 2, (const int64_t[]){0, 1});
  otm_attr_ints(n, "ngram_indexes", 2, (const int64_t[]){0, 1});
  otm_attr_ints(n, "pool_int64s", 3, (const int64_t[]){1, 1, 2});
  static const int64_t x[4] = {1, 2, 1, 2};
  OtsFeed f[] = {{"x", ONYX_ELEM_INT64, 1, {4}, x}};
  OnyxValue* got = NULL;
  ots_ok(ots_run(m, f, 1, (const char*[]){"y"}, 1, &got));
  static const float y[2] = {2, 3};
  expect_floats(got, y, 2, (int64_t[]){2}, 1);
  onyx_value_release(got);
  otm_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_string_split_whitespace_maxsplit),
      cmocka_unit_test(test_regex_full_match_translation),
      cmocka_unit_test(test_label_encoder_default),
      cmocka_unit_test(test_tfidf_counts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
