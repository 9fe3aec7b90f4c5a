/* test_attention.c — Attention and RotaryEmbedding on the CPU provider, through
 * a session: small cases whose expected values were computed with numpy from
 * the ONNX definitions (softmax(Q K^T / sqrt(d) + bias) V with GQA head
 * sharing; the rotate-half form of RotaryEmbedding), plus bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onyx/onyx.h"
#include "misc_test_util.h"
#include "ox_test_models.h"

static const float kQ[8] = {-0.3f, -0.2f, -0.1f, 0.0f, 0.1f, 0.2f, 0.3f, 0.4f};
static const float kK[6] = {0.5f, -0.2f, 0.1f, 0.3f, -0.4f, 0.2f};
static const float kV[6] = {1, 2, 3, -1, 0, 0.5f};

/* Q [1,2 heads,2,2], K/V [1,1 head,3,2]: the two query heads share the one
 * key/value head (MQA). */
static OxTestModel* attention_model(bool causal, bool mask) {
  OxTestModel* m = otm_new(23);
  otm_input(m, "Q", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 2, 2, 2});
  otm_input(m, "K", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 1, 3, 2});
  otm_input(m, "V", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 1, 3, 2});
  if (mask) otm_input(m, "M", ONYX_ELEM_BOOL, 2, (int64_t[]){2, 3});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 2, 2, 2});
  otm_output(m, "P", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 2, 2, 3});
  OxTestNode* n = otm_node(m, "Attention", "attn", mask ? "Q,K,V,M" : "Q,K,V", "Y,,,P");
  otm_attr_int(n, "qk_matmul_output_mode", 3);
  if (causal) otm_attr_int(n, "is_causal", 1);
  return m;
}

static void test_attention_causal_mqa(void** state) {
  (void)state;
  OxTestModel* m = attention_model(true, false);
  OtsFeed f[] = {{"Q", ONYX_ELEM_FLOAT32, 4, {1, 2, 2, 2}, kQ},
                 {"K", ONYX_ELEM_FLOAT32, 4, {1, 1, 3, 2}, kK},
                 {"V", ONYX_ELEM_FLOAT32, 4, {1, 1, 3, 2}, kV}};
  OnyxValue* got[2] = {0};
  ots_ok(ots_run(m, f, 3, (const char*[]){"Y", "P"}, 2, got));
  /* Query 0 of each head sees key 0 only: its output is V[0] = (1, 2). */
  static const float y[8] = {1.0f, 2.0f, 2.014141321f, 0.478788257f,
                             1.0f, 2.0f, 2.028276682f, 0.457584918f};
  expect_floats(got[0], y, 8, (int64_t[]){1, 2, 2, 2}, 4);
  const float* p = onyx_tensor_data(onyx_value_tensor(got[1]));
  assert_true(p[0] == 1.0f && p[1] == 0.0f && p[2] == 0.0f); /* causal row 0 */
  assert_true(p[5] == 0.0f);                                 /* row 1 never sees key 2 */
  onyx_values_release(got, 2);
  otm_free(m);
}

static void test_attention_bool_mask_fully_masked_row(void** state) {
  (void)state;
  OxTestModel* m = attention_model(false, true);
  static const uint8_t mask[6] = {1, 0, 1, 0, 0, 0}; /* query row 1: every key masked */
  OtsFeed f[] = {{"Q", ONYX_ELEM_FLOAT32, 4, {1, 2, 2, 2}, kQ},
                 {"K", ONYX_ELEM_FLOAT32, 4, {1, 1, 3, 2}, kK},
                 {"V", ONYX_ELEM_FLOAT32, 4, {1, 1, 3, 2}, kV},
                 {"M", ONYX_ELEM_BOOL, 2, {2, 3}, mask}};
  OnyxValue* got[2] = {0};
  ots_ok(ots_run(m, f, 4, (const char*[]){"Y", "P"}, 2, got));
  /* A fully masked row gives zeros, not NaN. */
  static const float y[8] = {0.466462859f, 1.199694289f, 0, 0, 0.501767760f, 1.252651639f, 0, 0};
  static const float p[12] = {0.466462859f, 0, 0.533537141f, 0, 0, 0,
                              0.501767760f, 0, 0.498232240f, 0, 0, 0};
  expect_floats(got[0], y, 8, (int64_t[]){1, 2, 2, 2}, 4);
  expect_floats(got[1], p, 12, (int64_t[]){1, 2, 2, 3}, 4);
  onyx_values_release(got, 2);
  otm_free(m);
}

static void test_attention_bad_heads(void** state) {
  (void)state;
  /* 3-D Q with 3 query heads over 2 key/value heads: not a multiple. */
  OxTestModel* m = otm_new(23);
  otm_input(m, "Q", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 1, 6});
  otm_input(m, "K", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 1, 4});
  otm_input(m, "V", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 1, 4});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){1, 1, 6});
  OxTestNode* n = otm_node(m, "Attention", "bad_attn", "Q,K,V", "Y");
  otm_attr_int(n, "q_num_heads", 3);
  otm_attr_int(n, "kv_num_heads", 2);
  float zeros[6] = {0};
  OtsFeed f[] = {{"Q", ONYX_ELEM_FLOAT32, 3, {1, 1, 6}, zeros},
                 {"K", ONYX_ELEM_FLOAT32, 3, {1, 1, 4}, zeros},
                 {"V", ONYX_ELEM_FLOAT32, 3, {1, 1, 4}, zeros}};
  OnyxValue* got[1] = {0};
  OnyxStatus* st = ots_run(m, f, 3, (const char*[]){"Y"}, 1, got);
  assert_non_null(st);
  assert_non_null(strstr(onyx_status_message(st), "bad_attn"));
  assert_non_null(strstr(onyx_status_message(st), "3 query heads are not a multiple of 2"));
  onyx_status_release(st);
  otm_free(m);
}

static void test_rotary_embedding_position_ids(void** state) {
  (void)state;
  OxTestModel* m = otm_new(23);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 1, 2, 4});
  otm_input(m, "C", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2});
  otm_input(m, "S", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2});
  otm_input(m, "P", ONYX_ELEM_INT64, 2, (int64_t[]){1, 2});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){1, 1, 2, 4});
  otm_node(m, "RotaryEmbedding", "rope", "X,C,S,P", "Y");
  static const float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  static const float c[4] = {1, 0.5f, 0.8f, 0.6f}, sn[4] = {0, 0.5f, 0.6f, -0.8f};
  static const int64_t pos[2] = {1, 0};
  OtsFeed f[] = {{"X", ONYX_ELEM_FLOAT32, 4, {1, 1, 2, 4}, x},
                 {"C", ONYX_ELEM_FLOAT32, 2, {2, 2}, c},
                 {"S", ONYX_ELEM_FLOAT32, 2, {2, 2}, sn},
                 {"P", ONYX_ELEM_INT64, 2, {1, 2}, pos}};
  OnyxValue* got[1] = {0};
  ots_ok(ots_run(m, f, 4, (const char*[]){"Y"}, 1, got));
  static const float y[8] = {-1.0f, 4.4f, 3.0f, 0.8f, 5.0f, -1.0f, 7.0f, 7.0f};
  expect_floats(got[0], y, 8, (int64_t[]){1, 1, 2, 4}, 4);
  onyx_values_release(got, 1);
  /* A position beyond the cache is an error naming the node. */
  static const int64_t far[2] = {0, 9};
  OtsFeed g[] = {f[0], f[1], f[2], {"P", ONYX_ELEM_INT64, 2, {1, 2}, far}};
  OnyxStatus* st = ots_run(m, g, 4, (const char*[]){"Y"}, 1, got);
  assert_non_null(st);
  assert_non_null(strstr(onyx_status_message(st), "rope"));
  assert_non_null(strstr(onyx_status_message(st), "position_ids[1] = 9"));
  onyx_status_release(st);
  otm_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_attention_causal_mqa),
      cmocka_unit_test(test_attention_bool_mask_fully_masked_row),
      cmocka_unit_test(test_attention_bad_heads),
      cmocka_unit_test(test_rotary_embedding_position_ids),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
