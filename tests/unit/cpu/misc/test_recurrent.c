/* test_recurrent.c — LinearAttention, CausalConvWithState and SwiGLU on the
 * CPU provider: small cases worked by hand from the ops' function bodies. */
#include "misc_test_util.h"

/* One channel, kernel 3, past state (p0, p1) = (1, 2), input (3, 4), weight
 * (1, 10, 100), bias 0.5: output[l] = w . padded[l..l+2] + 0.5 over padded
 * (1, 2, 3, 4): 1 + 20 + 300 + .5 = 321.5 and 2 + 30 + 400 + .5 = 432.5;
 * present_state = the last two padded values (3, 4). */
static void test_causal_conv_with_state(void** state) {
  (void)state;
  OxTestModel* m = otm_new(27);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 1, 2});
  otm_input(m, "w", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 1, 3});
  otm_input(m, "b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1});
  otm_input(m, "p", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 1, 2});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 1, 2});
  otm_output(m, "s", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 1, 2});
  otm_node(m, "CausalConvWithState", "conv", "x,w,b,p", "y,s");
  static const float x[2] = {3, 4}, w[3] = {1, 10, 100}, b[1] = {0.5f}, p[2] = {1, 2};
  OtsFeed f[] = {{"x", ONYX_ELEM_FLOAT32, 3, {1, 1, 2}, x},
                 {"w", ONYX_ELEM_FLOAT32, 3, {1, 1, 3}, w},
                 {"b", ONYX_ELEM_FLOAT32, 1, {1}, b},
                 {"p", ONYX_ELEM_FLOAT32, 3, {1, 1, 2}, p}};
  OnyxValue* got[2] = {0};
  ots_ok(ots_run(m, f, 4, (const char*[]){"y", "s"}, 2, got));
  expect_floats(got[0], (const float[]){321.5f, 432.5f}, 2, (int64_t[]){1, 1, 2}, 3);
  expect_floats(got[1], (const float[]){3, 4}, 2, (int64_t[]){1, 1, 2}, 3);
  onyx_values_release(got, 2);
  otm_free(m);
}

/* update_rule "linear", one head, Dk = Dv = 2, scale 1, two steps:
 * S1 = k1 v1^T with k1 = (1, 0), v1 = (2, 3): o1 = q1^T S1 = (2, 3) for q1 = (1, 1);
 * S2 = S1 + k2 v2^T with k2 = (0, 1), v2 = (5, 7): o2 = (1, 2) S2 = (2 + 10, 3 + 14). */
static void test_linear_attention_linear_rule(void** state) {
  (void)state;
  OxTestModel* m = otm_new(27);
  otm_input(m, "q", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 2, 2});
  otm_input(m, "k", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 2, 2});
  otm_input(m, "v", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 2, 2});
  otm_output(m, "o", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 2, 2});
  otm_output(m, "s", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 1, 2, 2});
  OxTestNode* n = otm_node(m, "LinearAttention", "la", "q,k,v", "o,s");
  otm_attr_int(n, "q_num_heads", 1);
  otm_attr_int(n, "kv_num_heads", 1);
  otm_attr_float(n, "scale", 1.0f);
  otm_attr_string(n, "update_rule", "linear");
  static const float q[4] = {1, 1, 1, 2}, k[4] = {1, 0, 0, 1}, v[4] = {2, 3, 5, 7};
  OtsFeed f[] = {{"q", ONYX_ELEM_FLOAT32, 3, {1, 2, 2}, q},
                 {"k", ONYX_ELEM_FLOAT32, 3, {1, 2, 2}, k},
                 {"v", ONYX_ELEM_FLOAT32, 3, {1, 2, 2}, v}};
  OnyxValue* got[2] = {0};
  ots_ok(ots_run(m, f, 3, (const char*[]){"o", "s"}, 2, got));
  expect_floats(got[0], (const float[]){2, 3, 12, 17}, 4, (int64_t[]){1, 2, 2}, 3);
  expect_floats(got[1], (const float[]){2, 3, 5, 7}, 4, (int64_t[]){1, 1, 2, 2}, 4);
  onyx_values_release(got, 2);
  /* A gated rule without decay is an error naming the node. */
  OxTestModel* bad = otm_new(27);
  otm_input(bad, "q", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 2, 2});
  otm_input(bad, "k", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 2, 2});
  otm_input(bad, "v", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 2, 2});
  otm_output(bad, "o", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 2, 2});
  OxTestNode* g = otm_node(bad, "LinearAttention", "gated_la", "q,k,v", "o");
  otm_attr_int(g, "q_num_heads", 1);
  otm_attr_int(g, "kv_num_heads", 1);
  otm_attr_string(g, "update_rule", "gated");
  OnyxStatus* st = ots_run(bad, f, 3, (const char*[]){"o"}, 1, got);
  assert_non_null(st);
  assert_non_null(strstr(onyx_status_message(st), "gated_la"));
  assert_non_null(strstr(onyx_status_message(st), "needs decay"));
  onyx_status_release(st);
  otm_free(bad);
  otm_free(m);
}

/* SwiGLU: a * sigmoid(alpha a) * b; a = 0 gives 0; a = 2, alpha = 0.5, b = 3:
 * 2 * sigmoid(1) * 3 = 6 * 0.7310585786. */
static void test_swiglu(void** state) {
  (void)state;
  OxTestModel* m = otm_new(28);
  otm_input(m, "a", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_input(m, "b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  OxTestNode* n = otm_node(m, "SwiGLU", "sg", "a,b", "y");
  otm_attr_float(n, "alpha", 0.5f);
  static const float a[2] = {0, 2}, b[1] = {3};
  OtsFeed f[] = {{"a", ONYX_ELEM_FLOAT32, 1, {2}, a}, {"b", ONYX_ELEM_FLOAT32, 1, {1}, b}};
  OnyxValue* got = NULL;
  ots_ok(ots_run(m, f, 2, (const char*[]){"y"}, 1, &got));
  expect_floats(got, (const float[]){0, 6 * 0.7310585786f}, 2, (int64_t[]){2}, 1);
  onyx_value_release(got);
  otm_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_causal_conv_with_state),
      cmocka_unit_test(test_linear_attention_linear_rule),
      cmocka_unit_test(test_swiglu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
