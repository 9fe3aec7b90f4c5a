/* test_controlflow.c — host ops through sessions: If (outer-scope reads),
 * Loop (carried values, scan outputs, early stop), Scan (forward and
 * reversed), sequences (construct/insert/erase/at/length/concat/split, as
 * graph input and output), optionals (none and present, the public value
 * API), function expansion of an op no provider claims (an in-process
 * provider without HardSwish), model-local functions (ref_attr_name, nested
 * calls), FlexAttention with prob_mod, the Adagrad/Adam kernels, the
 * Gradient builder, and bad input that must be an error naming the node.
 * Expected values are worked out by hand from the ONNX definitions or with
 * numpy (the FlexAttention and optimizer numbers). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onyx/onyx.h"
#include "onyx/onyx_ep.h"
#include "ox_function_body.h"
#include "ox_graph.h"
#include "ox_model.h"
#include "ox_test_models.h"

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static OnyxValue* tensor(OnyxElemType t, size_t rank, const int64_t* dims, const void* data) {
  size_t count = 1;
  for (size_t i = 0; i < rank; i++)
    count *= (size_t)dims[i];
  OnyxValue* v = NULL;
  ok(onyx_value_create_tensor(t, dims, rank, data, count * onyx_elem_type_size(t), &v));
  return v;
}

static OnyxValue* f32(size_t rank, const int64_t* dims, const float* data) {
  return tensor(ONYX_ELEM_FLOAT32, rank, dims, data);
}

static OnyxSession* open_model(OxTestModel* m, const OnyxSessionOptions* o) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  free(bytes);
  ok(st);
  return s;
}

/* Session creation must fail naming every string in `what`. */
static void expect_create_error(OxTestModel* m, const char* a, const char* b) {
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
  if (!strstr(msg, a) || (b && !strstr(msg, b))) fail_msg("message lacks '%s'/'%s': %s", a, b, msg);
  onyx_status_release(st);
}

static OnyxStatus* run(OnyxSession* s, const char* const* in_names, OnyxValue* const* in, size_t n,
                       const char* const* out_names, size_t n_out, OnyxValue** out) {
  return onyx_session_run(s, NULL, in_names, (const OnyxValue* const*)in, n, out_names, n_out, out);
}

static void expect_f32(const OnyxTensor* t, const float* want, size_t n, size_t rank,
                       const int64_t* dims, float tol) {
  assert_non_null(t);
  assert_int_equal(onyx_tensor_elem_type(t), ONYX_ELEM_FLOAT32);
  assert_int_equal(onyx_tensor_rank(t), rank);
  if (rank) assert_memory_equal(onyx_tensor_dims(t), dims, rank * sizeof *dims);
  assert_int_equal(onyx_tensor_elem_count(t), n);
  const float* got = onyx_tensor_data(t);
  for (size_t i = 0; i < n; i++)
    if (fabsf(got[i] - want[i]) > tol)
      fail_msg("element %zu: got %.9g, want %.9g", i, (double)got[i], (double)want[i]);
}

/* Wraps a value's tensor type into sequence(...) or optional(...). */
static void wrap_type(Onnx__ValueInfoProto* vi, bool seq) {
  Onnx__TypeProto* outer = otm_alloc(sizeof *outer);
  onnx__type_proto__init(outer);
  if (seq) {
    Onnx__TypeProto__Sequence* s = otm_alloc(sizeof *s);
    onnx__type_proto__sequence__init(s);
    s->elem_type = vi->type;
    outer->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
    outer->sequence_type = s;
  } else {
    Onnx__TypeProto__Optional* o = otm_alloc(sizeof *o);
    onnx__type_proto__optional__init(o);
    o->elem_type = vi->type;
    outer->value_case = ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE;
    outer->optional_type = o;
  }
  vi->type = outer;
}

static const int64_t kScalar[1] = {0};

/* --- If ----------------------------------------------------------------------------------- */

/* T = X * X in the main graph; then: Y = X + X; else: Y = T - X (both read
 * outer values). X = [1,2,3]: then [2,4,6], else [0,2,6]. */
static OxTestModel* if_model(int then_outputs) {
  OxTestModel* m = otm_new(13);
  otm_input(m, "C", ONYX_ELEM_BOOL, 0, kScalar);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3});
  otm_node(m, "Mul", "sq", "X,X", "T");
  otm_begin_graph(m, "then");
  otm_node(m, "Add", "then_add", "X,X", "Y1");
  otm_output(m, "Y1", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3});
  if (then_outputs > 1) otm_output(m, "X", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3});
  Onnx__GraphProto* then_g = otm_end_graph(m);
  otm_begin_graph(m, "else");
  otm_node(m, "Sub", "else_sub", "T,X", "Y2");
  otm_output(m, "Y2", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3});
  Onnx__GraphProto* else_g = otm_end_graph(m);
  OxTestNode* n = otm_node(m, "If", "if0", "C", "Y");
  otm_attr_graph(n, "then_branch", then_g);
  otm_attr_graph(n, "else_branch", else_g);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3});
  return m;
}

static void test_if_outer_scope(void** state) {
  (void)state;
  OnyxSession* s = open_model(if_model(1), NULL);
  const float x[3] = {1, 2, 3};
  for (int c = 0; c < 2; c++) {
    uint8_t cond = (uint8_t)c;
    OnyxValue* in[2] = {tensor(ONYX_ELEM_BOOL, 0, NULL, &cond), f32(1, (int64_t[]){3}, x)};
    const char* names[] = {"C", "X"};
    const char* outs[] = {"Y"};
    OnyxValue* y = NULL;
    ok(run(s, names, in, 2, outs, 1, &y));
    const float want_then[3] = {2, 4, 6}, want_else[3] = {0, 2, 6};
    expect_f32(onyx_value_tensor(y), c ? want_then : want_else, 3, 1, (int64_t[]){3}, 0);
    onyx_value_release(y);
    onyx_values_release(in, 2);
  }
  char* text = NULL;
  ok(onyx_session_explain(s, &text));
  assert_non_null(strstr(text, "-> host")); /* If runs on the host */
  onyx_free(text);
  onyx_session_release(s);
}

static void test_if_branch_output_mismatch(void** state) {
  (void)state;
  expect_create_error(if_model(2), "'if0' (If)", "'then_branch' has 2 outputs but the node has 1");
}

/* --- Loop ---------------------------------------------------------------------------------- */

/* Body: a' = a + float(i) + K (K = [0.5], a main-graph initializer read from
 * the outer scope); scan output a'; cond' = cond (or i < 1 with `stop`). */
static OxTestModel* loop_model(bool stop) {
  OxTestModel* m = otm_new(13);
  otm_input(m, "M", ONYX_ELEM_INT64, 0, kScalar);
  otm_input(m, "C", ONYX_ELEM_BOOL, 0, kScalar);
  otm_input(m, "A0", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1});
  otm_initializer(m, "K", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1}, (float[]){0.5f});
  otm_begin_graph(m, "body");
  otm_input(m, "i", ONYX_ELEM_INT64, 0, kScalar);
  otm_input(m, "cond", ONYX_ELEM_BOOL, 0, kScalar);
  otm_input(m, "a", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1});
  otm_attr_int(otm_node(m, "Cast", "cast", "i", "fi"), "to", ONYX_ELEM_FLOAT32);
  otm_node(m, "Add", "add1", "a,fi", "a1");
  otm_node(m, "Add", "add2", "a1,K", "a2");
  otm_node(m, "Identity", "scan_id", "a2", "s");
  if (stop) {
    otm_initializer(m, "one", ONYX_ELEM_INT64, 0, kScalar, (int64_t[]){1});
    otm_node(m, "Less", "less", "i,one", "cond_out");
  } else {
    otm_node(m, "Identity", "cond_id", "cond", "cond_out");
  }
  otm_output(m, "cond_out", ONYX_ELEM_BOOL, 0, kScalar);
  otm_output(m, "a2", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1});
  otm_output(m, "s", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1});
  Onnx__GraphProto* body = otm_end_graph(m);
  otm_attr_graph(otm_node(m, "Loop", "loop0", "M,C,A0", "A,S"), "body", body);
  otm_output(m, "A", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1});
  otm_output(m, "S", ONYX_ELEM_FLOAT32, 2, (int64_t[]){-1, 1});
  return m;
}

static void run_loop(bool stop, int64_t trips, const float* want_s, size_t n_s) {
  OnyxSession* s = open_model(loop_model(stop), NULL);
  uint8_t cond = 1;
  const float a0 = 0;
  OnyxValue* in[3] = {tensor(ONYX_ELEM_INT64, 0, NULL, &trips),
                      tensor(ONYX_ELEM_BOOL, 0, NULL, &cond), f32(1, (int64_t[]){1}, &a0)};
  const char* names[] = {"M", "C", "A0"};
  const char* outs[] = {"A", "S"};
  OnyxValue* got[2] = {0};
  ok(run(s, names, in, 3, outs, 2, got));
  expect_f32(onyx_value_tensor(got[0]), &want_s[n_s - 1], 1, 1, (int64_t[]){1}, 1e-6f);
  expect_f32(onyx_value_tensor(got[1]), want_s, n_s, 2, (int64_t[]){(int64_t)n_s, 1}, 1e-6f);
  onyx_values_release(got, 2);
  onyx_values_release(in, 3);
  onyx_session_release(s);
}

static void test_loop_carried_and_scan(void** state) {
  (void)state;
  /* a: 0 -> 0+0+0.5 -> 0.5+1+0.5 -> 2+2+0.5 */
  run_loop(false, 3, (const float[]){0.5f, 2.0f, 4.5f}, 3);
}

static void test_loop_condition_stops(void** state) {
  (void)state;
  /* i = 0: cond' = 0 < 1 (go on); i = 1: cond' = false: two iterations of 10 */
  run_loop(true, 10, (const float[]){0.5f, 2.0f}, 2);
}

/* --- Scan ---------------------------------------------------------------------------------- */

static void run_scan(int64_t direction, const float* want_y) {
  OxTestModel* m = otm_new(11);
  otm_input(m, "S0", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 2});
  otm_begin_graph(m, "body");
  otm_input(m, "s", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_node(m, "Add", "acc", "s,x", "s2");
  otm_node(m, "Identity", "out", "s2", "y");
  otm_output(m, "s2", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  Onnx__GraphProto* body = otm_end_graph(m);
  OxTestNode* n = otm_node(m, "Scan", "scan0", "S0,X", "S,Y");
  otm_attr_graph(n, "body", body);
  otm_attr_int(n, "num_scan_inputs", 1);
  otm_attr_ints(n, "scan_input_directions", 1, &direction);
  otm_output(m, "S", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 2});
  OnyxSession* s = open_model(m, NULL);
  const float s0[2] = {0, 0}, x[6] = {1, 2, 3, 4, 5, 6};
  OnyxValue* in[2] = {f32(1, (int64_t[]){2}, s0), f32(2, (int64_t[]){3, 2}, x)};
  const char* names[] = {"S0", "X"};
  const char* outs[] = {"S", "Y"};
  OnyxValue* got[2] = {0};
  ok(run(s, names, in, 2, outs, 2, got));
  expect_f32(onyx_value_tensor(got[0]), (const float[]){9, 12}, 2, 1, (int64_t[]){2}, 0);
  expect_f32(onyx_value_tensor(got[1]), want_y, 6, 2, (int64_t[]){3, 2}, 0);
  onyx_values_release(got, 2);
  onyx_values_release(in, 2);
  onyx_session_release(s);
}

static void test_scan_forward(void** state) {
  (void)state;
  run_scan(0, (const float[]){1, 2, 4, 6, 9, 12}); /* running sums of the rows */
}

static void test_scan_reverse(void** state) {
  (void)state;
  run_scan(1, (const float[]){5, 6, 8, 10, 9, 12}); /* rows taken last to first */
}

/* Scan-8: batch axis 0 and sequence_lens [2, 3]; batch 0 stops after two
 * steps and its scan output is zero-padded. X = [[1,2,3],[4,5,6]] (x[b,t,0]):
 * S = [3, 15]; Y = [[1,3,0],[4,9,15]]. */
static void test_scan8_sequence_lens(void** state) {
  (void)state;
  OxTestModel* m = otm_new(8);
  otm_input(m, "L", ONYX_ELEM_INT64, 1, (int64_t[]){2});
  otm_input(m, "S0", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 1});
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 3, 1});
  otm_begin_graph(m, "body");
  otm_input(m, "s", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1});
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1});
  otm_node(m, "Add", "acc", "s,x", "s2");
  otm_node(m, "Identity", "out", "s2", "y");
  otm_output(m, "s2", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1});
  Onnx__GraphProto* body = otm_end_graph(m);
  OxTestNode* n = otm_node(m, "Scan", "scan8", "L,S0,X", "S,Y");
  otm_attr_graph(n, "body", body);
  otm_attr_int(n, "num_scan_inputs", 1);
  otm_output(m, "S", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 1});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 3, 1});
  OnyxSession* s = open_model(m, NULL);
  const int64_t lens[2] = {2, 3};
  const float s0[2] = {0, 0}, x[6] = {1, 2, 3, 4, 5, 6};
  OnyxValue* in[3] = {tensor(ONYX_ELEM_INT64, 1, (int64_t[]){2}, lens),
                      f32(2, (int64_t[]){2, 1}, s0), f32(3, (int64_t[]){2, 3, 1}, x)};
  const char* names[] = {"L", "S0", "X"};
  const char* outs[] = {"S", "Y"};
  OnyxValue* got[2] = {0};
  ok(run(s, names, in, 3, outs, 2, got));
  expect_f32(onyx_value_tensor(got[0]), (const float[]){3, 15}, 2, 2, (int64_t[]){2, 1}, 0);
  expect_f32(onyx_value_tensor(got[1]), (const float[]){1, 3, 0, 4, 9, 15}, 6, 3,
             (int64_t[]){2, 3, 1}, 0);
  onyx_values_release(got, 2);
  onyx_values_release(in, 3);
  onyx_session_release(s);
}

/* --- sequences ----------------------------------------------------------------------------- */

/* seq = [A, B]; insert C at 1: [A, C, B]; erase 0: [C, B]; L = 2; At(-1) = B;
 * Cat = concat(C, B) on axis 0; Split(Cat, [1, 3]) = [C, B] again. */
static void test_sequence_round_trip(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_input(m, "A", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_input(m, "B", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3});
  otm_input(m, "C", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1});
  otm_initializer(m, "one", ONYX_ELEM_INT64, 0, kScalar, (int64_t[]){1});
  otm_initializer(m, "zero", ONYX_ELEM_INT64, 0, kScalar, (int64_t[]){0});
  otm_initializer(m, "last", ONYX_ELEM_INT64, 0, kScalar, (int64_t[]){-1});
  otm_initializer(m, "sizes", ONYX_ELEM_INT64, 1, (int64_t[]){2}, (int64_t[]){1, 3});
  otm_node(m, "SequenceConstruct", "make", "A,B", "s1");
  otm_node(m, "SequenceInsert", "ins", "s1,C,one", "s2");
  otm_node(m, "SequenceErase", "era", "s2,zero", "s3");
  otm_node(m, "SequenceLength", "len", "s3", "L");
  otm_node(m, "SequenceAt", "at", "s3,last", "At");
  otm_attr_int(otm_node(m, "ConcatFromSequence", "cat", "s3", "Cat"), "axis", 0);
  otm_node(m, "SplitToSequence", "split", "Cat,sizes", "Parts");
  otm_output(m, "L", ONYX_ELEM_INT64, 0, kScalar);
  otm_output(m, "At", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3});
  otm_output(m, "Cat", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4});
  wrap_type(otm_output(m, "Parts", ONYX_ELEM_FLOAT32, 1, (int64_t[]){-1}), true);
  OnyxSession* s = open_model(m, NULL);
  assert_int_equal(onyx_session_output_kind(s, 3), ONYX_TYPE_SEQUENCE);
  const float a[2] = {1, 2}, b[3] = {3, 4, 5}, c[1] = {9};
  OnyxValue* in[3] = {f32(1, (int64_t[]){2}, a), f32(1, (int64_t[]){3}, b),
                      f32(1, (int64_t[]){1}, c)};
  const char* names[] = {"A", "B", "C"};
  const char* outs[] = {"L", "At", "Cat", "Parts"};
  OnyxValue* got[4] = {0};
  ok(run(s, names, in, 3, outs, 4, got));
  assert_int_equal(*(const int64_t*)onyx_tensor_data(onyx_value_tensor(got[0])), 2);
  expect_f32(onyx_value_tensor(got[1]), b, 3, 1, (int64_t[]){3}, 0);
  expect_f32(onyx_value_tensor(got[2]), (const float[]){9, 3, 4, 5}, 4, 1, (int64_t[]){4}, 0);
  assert_int_equal(onyx_value_kind(got[3]), ONYX_VALUE_SEQUENCE);
  assert_null(onyx_value_tensor(got[3]));
  assert_int_equal(onyx_value_sequence_length(got[3]), 2);
  expect_f32(onyx_value_sequence_at(got[3], 0), c, 1, 1, (int64_t[]){1}, 0);
  expect_f32(onyx_value_sequence_at(got[3], 1), b, 3, 1, (int64_t[]){3}, 0);
  assert_null(onyx_value_sequence_at(got[3], 2));
  onyx_values_release(got, 4);
  onyx_values_release(in, 3);
  onyx_session_release(s);
}

/* A sequence graph input, stacked on a new axis; SequenceAt out of range is
 * an error naming the node. */
static void test_sequence_input(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  wrap_type(otm_input(m, "Q", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2}), true);
  otm_input(m, "P", ONYX_ELEM_INT64, 0, kScalar);
  OxTestNode* n = otm_node(m, "ConcatFromSequence", "stack", "Q", "Y");
  otm_attr_int(n, "axis", 0);
  otm_attr_int(n, "new_axis", 1);
  otm_node(m, "SequenceAt", "pick", "Q,P", "Z");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2});
  otm_output(m, "Z", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  OnyxSession* s = open_model(m, NULL);
  assert_int_equal(onyx_session_input_kind(s, 0), ONYX_TYPE_SEQUENCE);
  const float r0[2] = {1, 2}, r1[2] = {3, 4};
  OnyxValue* items[2] = {f32(1, (int64_t[]){2}, r0), f32(1, (int64_t[]){2}, r1)};
  OnyxValue* seq = NULL;
  ok(onyx_value_create_sequence(ONYX_ELEM_FLOAT32, (const OnyxValue* const*)items, 2, &seq));
  onyx_values_release(items, 2); /* the sequence holds copies */
  int64_t pos = 1;
  OnyxValue* in[2] = {seq, tensor(ONYX_ELEM_INT64, 0, NULL, &pos)};
  const char* names[] = {"Q", "P"};
  const char* outs[] = {"Y", "Z"};
  OnyxValue* got[2] = {0};
  ok(run(s, names, in, 2, outs, 2, got));
  expect_f32(onyx_value_tensor(got[0]), (const float[]){1, 2, 3, 4}, 4, 2, (int64_t[]){2, 2}, 0);
  expect_f32(onyx_value_tensor(got[1]), r1, 2, 1, (int64_t[]){2}, 0);
  onyx_values_release(got, 2);
  onyx_value_release(in[1]);
  pos = 2;
  in[1] = tensor(ONYX_ELEM_INT64, 0, NULL, &pos);
  OnyxStatus* st = run(s, names, in, 2, outs, 2, got);
  assert_non_null(st);
  assert_non_null(strstr(onyx_status_message(st), "'pick' (SequenceAt)"));
  assert_non_null(strstr(onyx_status_message(st), "out of range"));
  onyx_status_release(st);
  /* A tensor where the model wants a sequence is refused at the feed. */
  OnyxValue* wrong = f32(1, (int64_t[]){2}, r0);
  OnyxValue* in2[2] = {wrong, in[1]};
  st = run(s, names, in2, 2, outs, 2, got);
  assert_non_null(st);
  assert_non_null(strstr(onyx_status_message(st), "input 'Q'"));
  onyx_status_release(st);
  onyx_value_release(wrong);
  onyx_values_release(in, 2);
  onyx_session_release(s);
}

/* --- optionals ----------------------------------------------------------------------------- */

static Onnx__TypeProto* float_type(void) {
  Onnx__TypeProto* t = otm_alloc(sizeof *t);
  onnx__type_proto__init(t);
  Onnx__TypeProto__Tensor* tt = otm_alloc(sizeof *tt);
  onnx__type_proto__tensor__init(tt);
  tt->has_elem_type = 1;
  tt->elem_type = ONYX_ELEM_FLOAT32;
  t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  t->tensor_type = tt;
  return t;
}

static void test_optionals(void** state) {
  (void)state;
  OxTestModel* m = otm_new(18);
  wrap_type(otm_input(m, "O", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2}), false);
  otm_node(m, "OptionalHasElement", "has", "O", "H");
  Onnx__AttributeProto* a = otm_attr_int(otm_node(m, "Optional", "empty", "", "E"), "type", 0);
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO;
  a->has_i = 0;
  a->tp = float_type();
  otm_node(m, "OptionalHasElement", "has_e", "E", "HE");
  otm_output(m, "H", ONYX_ELEM_BOOL, 0, kScalar);
  otm_output(m, "HE", ONYX_ELEM_BOOL, 0, kScalar);
  OnyxSession* s = open_model(m, NULL);
  assert_int_equal(onyx_session_input_kind(s, 0), ONYX_TYPE_OPTIONAL_TENSOR);
  const float x[2] = {1, 2};
  for (int present = 0; present < 2; present++) {
    OnyxValue* o = NULL;
    if (present)
      o = f32(1, (int64_t[]){2}, x);
    else
      ok(onyx_value_create_none(ONYX_ELEM_FLOAT32, &o));
    assert_int_equal(onyx_value_kind(o), present ? ONYX_VALUE_TENSOR : ONYX_VALUE_NONE);
    const char* names[] = {"O"};
    const char* outs[] = {"H", "HE"};
    OnyxValue* got[2] = {0};
    ok(run(s, names, &o, 1, outs, 2, got));
    assert_int_equal(*(const uint8_t*)onyx_tensor_data(onyx_value_tensor(got[0])), present);
    assert_int_equal(*(const uint8_t*)onyx_tensor_data(onyx_value_tensor(got[1])), 0);
    onyx_values_release(got, 2);
    onyx_value_release(o);
  }
  onyx_session_release(s);
}

static void test_optional_get_none(void** state) {
  (void)state;
  OxTestModel* m = otm_new(18);
  wrap_type(otm_input(m, "O", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2}), false);
  otm_node(m, "OptionalGetElement", "get", "O", "G");
  otm_output(m, "G", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  OnyxSession* s = open_model(m, NULL);
  OnyxValue* o = NULL;
  ok(onyx_value_create_none(ONYX_ELEM_FLOAT32, &o));
  const char* names[] = {"O"};
  const char* outs[] = {"G"};
  OnyxValue* g = NULL;
  OnyxStatus* st = run(s, names, &o, 1, outs, 1, &g);
  assert_non_null(st);
  assert_non_null(strstr(onyx_status_message(st), "'get' (OptionalGetElement)"));
  assert_non_null(strstr(onyx_status_message(st), "empty"));
  onyx_status_release(st);
  onyx_value_release(o);
  const float x[2] = {7, 8};
  o = f32(1, (int64_t[]){2}, x);
  ok(run(s, names, &o, 1, outs, 1, &g));
  expect_f32(onyx_value_tensor(g), x, 2, 1, (int64_t[]){2}, 0);
  onyx_value_release(g);
  onyx_value_release(o);
  onyx_session_release(s);
}

/* --- function expansion -------------------------------------------------------------------- *
 * An in-process provider with only HardSigmoid and Mul (float): HardSwish
 * has no kernel anywhere (no CPU provider), so the host replaces it by its
 * ONNX body, HardSigmoid(alpha 1/6, beta 0.5) then Mul, which it runs. */

static const OnyxHostApi* fn_host;

static OnyxStatus* fn_hsig(void* state, OnyxKernelContext* ctx) {
  const float* ab = state;
  const OnyxTensor* x = fn_host->ctx_input(ctx, 0);
  OnyxTensor* y = NULL;
  OnyxStatus* st =
      fn_host->ctx_output(ctx, 0, fn_host->tensor_dims(x), fn_host->tensor_rank(x), &y);
  if (st) return st;
  const float* a = fn_host->tensor_data(x);
  float* b = fn_host->tensor_mutable_data(y);
  for (size_t i = 0; i < fn_host->tensor_elem_count(x); i++)
    b[i] = fmaxf(0.0f, fminf(1.0f, ab[0] * a[i] + ab[1]));
  return NULL;
}

static OnyxStatus* fn_hsig_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  (void)ep;
  (void)user;
  float* ab = malloc(2 * sizeof *ab);
  if (!ab) return NULL;
  ab[0] = fn_host->node_attr_float(node, "alpha", 0.2f);
  ab[1] = fn_host->node_attr_float(node, "beta", 0.5f);
  *state = ab;
  return NULL;
}

static OnyxStatus* fn_mul(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxTensor* a = fn_host->ctx_input(ctx, 0);
  const OnyxTensor* b = fn_host->ctx_input(ctx, 1);
  OnyxTensor* y = NULL;
  OnyxStatus* st =
      fn_host->ctx_output(ctx, 0, fn_host->tensor_dims(a), fn_host->tensor_rank(a), &y);
  if (st) return st;
  const float *pa = fn_host->tensor_data(a), *pb = fn_host->tensor_data(b);
  float* py = fn_host->tensor_mutable_data(y);
  for (size_t i = 0; i < fn_host->tensor_elem_count(a); i++)
    py[i] = pa[i] * pb[i];
  return NULL;
}

static const int32_t fn_f32[] = {ONYX_ELEM_FLOAT32};
static const OnyxTypeConstraint fn_T[] = {{"T", fn_f32, 1}};

static OnyxStatus* fn_kernels(const OnyxProvider* p, OnyxKernelRegistry* r) {
  (void)p;
  OnyxKernelDef d = {.struct_size = sizeof d,
                     .domain = "",
                     .op_type = "HardSigmoid",
                     .since_version = 6,
                     .end_version = ONYX_OPSET_LATEST,
                     .type_constraints = fn_T,
                     .type_constraint_count = 1,
                     .create = fn_hsig_create,
                     .compute = fn_hsig,
                     .release = free};
  OnyxStatus* st = fn_host->register_kernel(r, &d);
  if (st) return st;
  d = (OnyxKernelDef){.struct_size = sizeof d,
                      .domain = "",
                      .op_type = "Mul",
                      .since_version = 7,
                      .end_version = ONYX_OPSET_LATEST,
                      .type_constraints = fn_T,
                      .type_constraint_count = 1,
                      .compute = fn_mul};
  return fn_host->register_kernel(r, &d);
}

static OnyxStatus* fn_count(const OnyxProvider* p, size_t* n) {
  (void)p;
  *n = 1;
  return NULL;
}
static void fn_ep_release(OnyxEp* ep) {
  (void)ep;
}
static OnyxStatus* fn_create(const OnyxProvider* p, const OnyxEpCreateArgs* a, OnyxEp** out) {
  (void)a;
  static OnyxEp ep = {.struct_size = sizeof ep, .release = fn_ep_release};
  ep.provider = p;
  *out = &ep;
  return NULL;
}
static const OnyxProvider fn_provider = {.struct_size = sizeof fn_provider,
                                         .abi_major = ONYX_ABI_VERSION_MAJOR,
                                         .abi_minor = ONYX_ABI_VERSION_MINOR,
                                         .name = "fnprov",
                                         .vendor = "test",
                                         .version = "1",
                                         .device_count = fn_count,
                                         .register_kernels = fn_kernels,
                                         .create_ep = fn_create};
static OnyxStatus* fn_init(const OnyxHostApi* host, const OnyxProvider** out) {
  fn_host = host;
  *out = &fn_provider;
  return NULL;
}

static void test_function_expansion(void** state) {
  (void)state;
  OxTestModel* m = otm_new(14);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, (int64_t[]){5});
  otm_node(m, "HardSwish", "hs", "X", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){5});
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_add_provider_init(o, "fnprov", fn_init, 1));
  ok(onyx_session_options_set_no_implicit_cpu(o, 1));
  ok(onyx_session_options_set_optimization_level(o, ONYX_OPT_DISABLED));
  OnyxSession* s = open_model(m, o);
  onyx_session_options_release(o);
  char* text = NULL;
  ok(onyx_session_explain(s, &text));
  assert_null(strstr(text, "HardSwish "));      /* replaced ... */
  assert_non_null(strstr(text, "HardSigmoid")); /* ... by its body */
  onyx_free(text);
  const float x[5] = {-4, -1, 0, 2, 4};
  OnyxValue* in = f32(1, (int64_t[]){5}, x);
  const char* names[] = {"X"};
  const char* outs[] = {"Y"};
  OnyxValue* y = NULL;
  ok(run(s, names, &in, 1, outs, 1, &y));
  /* x * clip(x / 6 + 0.5, 0, 1) */
  const float want[5] = {0, -1.0f / 3, 0, 2.0f * 5 / 6, 4};
  expect_f32(onyx_value_tensor(y), want, 5, 1, (int64_t[]){5}, 1e-6f);
  onyx_value_release(y);
  onyx_value_release(in);
  onyx_session_release(s);
}

/* Range's ONNX body holds a Loop whose body reads the function's formal
 * input `delta` and its own values from the enclosing body: expanded into a
 * graph, those reads take the call's names (the graph input 'd' here) and
 * become the Loop's implicit inputs, so the graph resolves. */
static void test_function_expansion_subgraph_reads(void** state) {
  (void)state;
  OxTestModel* m = otm_new(14);
  otm_input(m, "s", ONYX_ELEM_FLOAT32, 0, NULL);
  otm_input(m, "l", ONYX_ELEM_FLOAT32, 0, NULL);
  otm_input(m, "d", ONYX_ELEM_FLOAT32, 0, NULL);
  otm_node(m, "Range", "rng", "s,l,d", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){-1});
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OxGraph* g = NULL;
  ok(ox_model_load_bytes(bytes, len, NULL, "<memory>", NULL, &g));
  free(bytes);
  ok(ox_graph_resolve(g, NULL, 0));
  assert_int_equal(g->n_nodes, 1);
  size_t body_len = 0;
  const uint8_t* body = ox_schema_function_body("", "Range", g->nodes[0]->since_version, &body_len);
  assert_non_null(body);
  ok(ox_graph_expand_function(g, g->nodes[0], body, body_len));
  ok(ox_graph_resolve(g, NULL, 0));
  const OxNode* loop = NULL;
  for (size_t i = 0; i < g->n_nodes; i++)
    if (!strcmp(g->nodes[i]->op_type, "Loop")) loop = g->nodes[i];
  assert_non_null(loop);
  bool reads_d = false;
  for (size_t i = loop->n_inputs - loop->n_implicit; i < loop->n_inputs; i++)
    reads_d |= loop->inputs[i] && !strcmp(loop->inputs[i]->name, "d");
  assert_true(reads_d); /* the body's 'delta' is the call's 'd' */
  assert_null(ox_graph_find(g, "delta"));
  ox_graph_free(g);
}

/* Moves the nodes built in a scratch graph into a function body. */
static void fn_body(OxTestModel* m, Onnx__FunctionProto* f, const char* ins, const char* outs) {
  Onnx__GraphProto* g = otm_end_graph(m);
  f->node = g->node;
  f->n_node = g->n_node;
  g->node = NULL;
  g->n_node = 0; /* the emptied scratch graph is freed with the model */
  const char* lists[2] = {ins, outs};
  for (int k = 0; k < 2; k++) {
    char*** arr = k ? &f->output : &f->input;
    size_t* n = k ? &f->n_output : &f->n_input;
    char* copy = otm_strdup(lists[k]);
    *arr = otm_alloc(8 * sizeof **arr);
    for (char* t = strtok(copy, ","); t; t = strtok(NULL, ","))
      (*arr)[(*n)++] = otm_strdup(t);
    free(copy);
  }
}

/* AddScale(a, b) = (a + b) * alpha (alpha: a function attribute, read by a
 * Constant through ref_attr_name); Twice(x) = AddScale(x, x) with alpha 3.
 * X = [1,2], Y = [3,5]: Z = (X+Y)*2 = [8,14]; W = (Z+Z)*3 = [48,84]. */
static void test_model_local_functions(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "com.test", 1);
  Onnx__FunctionProto* f = otm_add_function(m, "com.test", "AddScale");
  otm_begin_graph(m, "f1");
  otm_node(m, "Add", "add", "a,b", "s");
  Onnx__AttributeProto* a = otm_attr_float(otm_node(m, "Constant", "k", "", "k"), "value_float", 0);
  a->ref_attr_name = otm_strdup("alpha");
  a->has_f = 0;
  otm_node(m, "Mul", "mul", "s,k", "out");
  fn_body(m, f, "a,b", "out");
  Onnx__FunctionProto* f2 = otm_add_function(m, "com.test", "Twice");
  otm_begin_graph(m, "f2");
  OxTestNode* inner = otm_node(m, "AddScale", "inner", "x,x", "y");
  otm_node_domain(inner, "com.test");
  otm_attr_float(inner, "alpha", 3);
  fn_body(m, f2, "x", "y");
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_input(m, "Y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  OxTestNode* c1 = otm_node(m, "AddScale", "call1", "X,Y", "Z");
  otm_node_domain(c1, "com.test");
  otm_attr_float(c1, "alpha", 2);
  otm_node_domain(otm_node(m, "Twice", "call2", "Z", "W"), "com.test");
  otm_output(m, "W", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  OnyxSession* s = open_model(m, NULL);
  const float x[2] = {1, 2}, y[2] = {3, 5};
  OnyxValue* in[2] = {f32(1, (int64_t[]){2}, x), f32(1, (int64_t[]){2}, y)};
  const char* names[] = {"X", "Y"};
  const char* outs[] = {"W"};
  OnyxValue* w = NULL;
  ok(run(s, names, in, 2, outs, 1, &w));
  expect_f32(onyx_value_tensor(w), (const float[]){48, 84}, 2, 1, (int64_t[]){2}, 0);
  onyx_value_release(w);
  onyx_values_release(in, 2);
  onyx_session_release(s);
}

/* --- FlexAttention ------------------------------------------------------------------------- */

/* Q = K = I (2x2), V = [[1,2],[3,4]], default scale 1/sqrt(2); prob_mod
 * halves the probabilities (numpy: [[0.83024, 1.33024], [1.16976, 1.66976]]). */
static void test_flex_prob_mod(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "ai.onnx.preview", 1);
  const int64_t d4[4] = {1, 1, 2, 2};
  otm_input(m, "Q", ONYX_ELEM_FLOAT32, 4, d4);
  otm_input(m, "K", ONYX_ELEM_FLOAT32, 4, d4);
  otm_input(m, "V", ONYX_ELEM_FLOAT32, 4, d4);
  otm_begin_graph(m, "pm");
  otm_input(m, "p", ONYX_ELEM_FLOAT32, -1, NULL);
  otm_initializer(m, "half", ONYX_ELEM_FLOAT32, 0, kScalar, (float[]){0.5f});
  otm_node(m, "Mul", "scale", "p,half", "q");
  otm_output(m, "q", ONYX_ELEM_FLOAT32, -1, NULL);
  Onnx__GraphProto* pm = otm_end_graph(m);
  OxTestNode* n = otm_node(m, "FlexAttention", "flex", "Q,K,V", "Y");
  otm_node_domain(n, "ai.onnx.preview");
  otm_attr_graph(n, "prob_mod", pm);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 4, d4);
  OnyxSession* s = open_model(m, NULL);
  const float eye[4] = {1, 0, 0, 1}, v[4] = {1, 2, 3, 4};
  OnyxValue* in[3] = {f32(4, d4, eye), f32(4, d4, eye), f32(4, d4, v)};
  const char* names[] = {"Q", "K", "V"};
  const char* outs[] = {"Y"};
  OnyxValue* y = NULL;
  ok(run(s, names, in, 3, outs, 1, &y));
  const float want[4] = {0.8302385f, 1.3302385f, 1.1697615f, 1.6697615f};
  expect_f32(onyx_value_tensor(y), want, 4, 4, d4, 1e-5f);
  onyx_value_release(y);
  onyx_values_release(in, 3);
  onyx_session_release(s);
}

/* --- training ------------------------------------------------------------------------------ */

/* Adagrad, R 0.1, T 0, decay 0.1, epsilon 1e-5, norm 0.001, X 1, G -1, H 2
 * (numpy: X' 1.0576962, H' 2.998001). */
static void test_adagrad(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "ai.onnx.preview.training", 1);
  otm_input(m, "R", ONYX_ELEM_FLOAT32, 0, kScalar);
  otm_input(m, "T", ONYX_ELEM_INT64, 0, kScalar);
  const int64_t d1[1] = {1};
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, d1);
  otm_input(m, "G", ONYX_ELEM_FLOAT32, 1, d1);
  otm_input(m, "H", ONYX_ELEM_FLOAT32, 1, d1);
  OxTestNode* n = otm_node(m, "Adagrad", "opt", "R,T,X,G,H", "X2,H2");
  otm_node_domain(n, "ai.onnx.preview.training");
  otm_attr_float(n, "decay_factor", 0.1f);
  otm_attr_float(n, "epsilon", 1e-5f);
  otm_attr_float(n, "norm_coefficient", 0.001f);
  otm_output(m, "X2", ONYX_ELEM_FLOAT32, 1, d1);
  otm_output(m, "H2", ONYX_ELEM_FLOAT32, 1, d1);
  OnyxSession* s = open_model(m, NULL);
  const float r = 0.1f, x = 1, g = -1, h = 2;
  int64_t t = 0;
  OnyxValue* in[5] = {f32(0, NULL, &r), tensor(ONYX_ELEM_INT64, 0, NULL, &t), f32(1, d1, &x),
                      f32(1, d1, &g), f32(1, d1, &h)};
  const char* names[] = {"R", "T", "X", "G", "H"};
  const char* outs[] = {"X2", "H2"};
  OnyxValue* got[2] = {0};
  ok(run(s, names, in, 5, outs, 2, got));
  expect_f32(onyx_value_tensor(got[0]), (const float[]){1.0576962f}, 1, 1, d1, 1e-6f);
  expect_f32(onyx_value_tensor(got[1]), (const float[]){2.998001f}, 1, 1, d1, 1e-6f);
  onyx_values_release(got, 2);
  onyx_values_release(in, 5);
  onyx_session_release(s);
}

/* d = (a + b) * a with a [2], b [1] (broadcast): dd/da = 2a + b, dd/db =
 * sum(a). a = [1,2], b = [3]: [5,7] and [3]. */
static void test_gradient(void** state) {
  (void)state;
  OxTestModel* m = otm_new(12);
  otm_add_opset(m, "ai.onnx.preview.training", 1);
  otm_input(m, "a", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_input(m, "b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1});
  otm_node(m, "Add", "add", "a,b", "c");
  otm_node(m, "Mul", "mul", "c,a", "d");
  OxTestNode* n = otm_node(m, "Gradient", "grad", "a,b", "da,db");
  otm_node_domain(n, "ai.onnx.preview.training");
  otm_attr_strings(n, "xs", 2, (const char* const[]){"a", "b"});
  otm_attr_string(n, "y", "d");
  otm_output(m, "d", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_output(m, "da", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_output(m, "db", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1});
  OnyxSession* s = open_model(m, NULL);
  const float a[2] = {1, 2}, b[1] = {3};
  OnyxValue* in[2] = {f32(1, (int64_t[]){2}, a), f32(1, (int64_t[]){1}, b)};
  const char* names[] = {"a", "b"};
  const char* outs[] = {"d", "da", "db"};
  OnyxValue* got[3] = {0};
  ok(run(s, names, in, 2, outs, 3, got));
  expect_f32(onyx_value_tensor(got[0]), (const float[]){4, 10}, 2, 1, (int64_t[]){2}, 0);
  expect_f32(onyx_value_tensor(got[1]), (const float[]){5, 7}, 2, 1, (int64_t[]){2}, 0);
  expect_f32(onyx_value_tensor(got[2]), (const float[]){3}, 1, 1, (int64_t[]){1}, 0);
  onyx_values_release(got, 3);
  onyx_values_release(in, 2);
  onyx_session_release(s);
}

static void test_gradient_unsupported_op(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_add_opset(m, "ai.onnx.preview.training", 1);
  otm_input(m, "a", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  otm_node(m, "Sin", "sin", "a", "c");
  OxTestNode* n = otm_node(m, "Gradient", "grad", "a", "da");
  otm_node_domain(n, "ai.onnx.preview.training");
  otm_attr_strings(n, "xs", 1, (const char* const[]){"a"});
  otm_attr_string(n, "y", "c");
  otm_output(m, "da", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2});
  expect_create_error(m, "'grad' (Gradient)", "'sin' (Sin)");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_if_outer_scope),
      cmocka_unit_test(test_if_branch_output_mismatch),
      cmocka_unit_test(test_loop_carried_and_scan),
      cmocka_unit_test(test_loop_condition_stops),
      cmocka_unit_test(test_scan_forward),
      cmocka_unit_test(test_scan_reverse),
      cmocka_unit_test(test_scan8_sequence_lens),
      cmocka_unit_test(test_sequence_round_trip),
      cmocka_unit_test(test_sequence_input),
      cmocka_unit_test(test_optionals),
      cmocka_unit_test(test_optional_get_none),
      cmocka_unit_test(test_function_expansion),
      cmocka_unit_test(test_function_expansion_subgraph_reads),
      cmocka_unit_test(test_model_local_functions),
      cmocka_unit_test(test_flex_prob_mod),
      cmocka_unit_test(test_adagrad),
      cmocka_unit_test(test_gradient),
      cmocka_unit_test(test_gradient_unsupported_op),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
