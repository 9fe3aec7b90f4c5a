/* Tests of the kernel registry: deep copies, struct_size handling, refusals,
 * overlap rules, and matching with its reasons. Schemas are built by hand
 * here so the test depends only on ox_schema_input_tc/output_tc. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "ox_kreg.h"

#define F32      ONYX_ELEM_FLOAT32
#define F16      ONYX_ELEM_FLOAT16
#define I8       ONYX_ELEM_INT8
#define I32      ONYX_ELEM_INT32
#define I64      ONYX_ELEM_INT64
#define ABSENT   (-1)
#define PROVIDER "testprov"

static OnyxStatus* dummy_compute(void* state, OnyxKernelContext* ctx) {
  return NULL;
}
static void dummy_release(void* state) {}

/* --- Hand-made schemas ------------------------------------------------------------- */

static const OxFormal kBinIn[] = {{"A", "T", ONYX_PARAM_SINGLE, 1},
                                  {"B", "T", ONYX_PARAM_SINGLE, 1}};
static const OxFormal kOneOut[] = {{"C", "T", ONYX_PARAM_SINGLE, 1}};
static const OxTypeConstr kAnyT[] = {{"T", ~UINT64_C(0)}};
static const OxSchema kAdd = {.domain = "",
                              .op_type = "Add",
                              .since_version = 14,
                              .inputs = kBinIn,
                              .n_inputs = 2,
                              .outputs = kOneOut,
                              .n_outputs = 1,
                              .constraints = kAnyT,
                              .n_constraints = 1};

static const OxFormal kCastIn[] = {{"input", "T1", ONYX_PARAM_SINGLE, 1}};
static const OxFormal kCastOut[] = {{"output", "T2", ONYX_PARAM_SINGLE, 1}};
static const OxTypeConstr kCastTc[] = {{"T1", ~UINT64_C(0)}, {"T2", ~UINT64_C(0)}};
static const OxSchema kCast = {.domain = "",
                               .op_type = "Cast",
                               .since_version = 13,
                               .inputs = kCastIn,
                               .n_inputs = 1,
                               .outputs = kCastOut,
                               .n_outputs = 1,
                               .constraints = kCastTc,
                               .n_constraints = 2};

/* Clip: optional min/max share T with the input; Reshape's shape has a fixed type. */
static const OxFormal kClipIn[] = {{"input", "T", ONYX_PARAM_SINGLE, 1},
                                   {"min", "T", ONYX_PARAM_OPTIONAL, 1},
                                   {"max", "T", ONYX_PARAM_OPTIONAL, 1}};
static const OxSchema kClip = {.domain = "",
                               .op_type = "Clip",
                               .since_version = 13,
                               .inputs = kClipIn,
                               .n_inputs = 3,
                               .outputs = kOneOut,
                               .n_outputs = 1,
                               .constraints = kAnyT,
                               .n_constraints = 1};
static const OxFormal kReshapeIn[] = {{"data", "T", ONYX_PARAM_SINGLE, 1},
                                      {"shape", "tensor(int64)", ONYX_PARAM_SINGLE, 1}};
static const OxSchema kReshape = {.domain = "",
                                  .op_type = "Reshape",
                                  .since_version = 14,
                                  .inputs = kReshapeIn,
                                  .n_inputs = 2,
                                  .outputs = kOneOut,
                                  .n_outputs = 1,
                                  .constraints = kAnyT,
                                  .n_constraints = 1};

/* --- Hand-made nodes ----------------------------------------------------------------- */

typedef struct TestNode {
  OxNode node;
  OxValue vals[8];
  OxValue* ins[4];
  OxValue* outs[4];
} TestNode;

/* Types per input/output, ABSENT for a missing optional one; ends at 0. */
static OxNode* make_node(TestNode* t, const OxSchema* s, const char* domain, const char* op,
                         int32_t version, const int* in_types, const int* out_types) {
  memset(t, 0, sizeof *t);
  size_t v = 0;
  for (; in_types[t->node.n_inputs]; t->node.n_inputs++) {
    int ty = in_types[t->node.n_inputs];
    t->vals[v].type = (OnyxElemType)ty;
    t->ins[t->node.n_inputs] = ty == ABSENT ? NULL : &t->vals[v];
    v++;
  }
  for (; out_types[t->node.n_outputs]; t->node.n_outputs++) {
    t->vals[v].type = (OnyxElemType)out_types[t->node.n_outputs];
    t->outs[t->node.n_outputs] = &t->vals[v++];
  }
  t->node.name = "n0";
  t->node.op_type = (char*)op;
  t->node.domain = (char*)domain;
  t->node.inputs = t->ins;
  t->node.outputs = t->outs;
  t->node.schema = s;
  t->node.since_version = version;
  return &t->node;
}

/* A binary node of kAdd's shape: A, B and C all of type ty. */
static OxNode* add_node(TestNode* t, const char* op, int32_t version, int ty) {
  return make_node(t, &kAdd, "", op, version, (int[]){ty, ty, 0}, (int[]){ty, 0});
}

/* --- Helpers ------------------------------------------------------------------------- */

static OxKernelRegistry* new_reg(void) {
  OxKernelRegistry* r = NULL;
  assert_null(ox_kreg_create(PROVIDER, &r));
  assert_non_null(r);
  return r;
}

static OnyxKernelDef kdef(const char* op, int32_t since, int32_t end, const OnyxTypeConstraint* tcs,
                          size_t n_tcs) {
  return (OnyxKernelDef){.struct_size = sizeof(OnyxKernelDef),
                         .domain = "",
                         .op_type = op,
                         .since_version = since,
                         .end_version = end,
                         .type_constraints = tcs,
                         .type_constraint_count = n_tcs,
                         .compute = dummy_compute};
}

/* Registers and expects success. */
static void add_ok(OxKernelRegistry* r, OnyxKernelDef d) {
  OnyxStatus* st = ox_kreg_add(r, &d);
  if (st) fail_msg("unexpected refusal: %s", st->message);
}

/* Registers, expects a refusal whose message holds every given fragment. */
static void add_refused(OxKernelRegistry* r, const OnyxKernelDef* d, const char* const* frags) {
  size_t before = ox_kreg_count(r);
  OnyxStatus* st = ox_kreg_add(r, d);
  assert_non_null(st);
  assert_int_equal(st->code, ONYX_INVALID_ARGUMENT);
  for (; *frags; frags++) {
    if (!strstr(st->message, *frags)) fail_msg("message '%s' lacks '%s'", st->message, *frags);
  }
  ox_status_free(st);
  assert_int_equal(ox_kreg_count(r), before);
}

#define FRAGS(...) ((const char* const[]){__VA_ARGS__, NULL})

static const int32_t kF32[] = {F32};
static const int32_t kI64[] = {I64};
static const int32_t kI8[] = {I8};
static const int32_t kI32[] = {I32};
static const int32_t kF32I64[] = {F32, I64};

/* --- Registration ---------------------------------------------------------------------- */

static void test_add_deep_copies(void** state) {
  OxKernelRegistry* r = new_reg();
  char domain[] = "ai.onnx", op[] = "Relu", tname[] = "T";
  int32_t types[] = {F32, ONYX_ELEM_FLOAT64};
  OnyxTypeConstraint tcs[] = {{tname, types, 2}};
  int32_t in_mem[] = {ONYX_MEM_DEFAULT, ONYX_MEM_HOST_ACCESSIBLE};
  OnyxAlias aliases[] = {{0, 0, ONYX_ALIAS_INPLACE}};
  int user = 7;
  OnyxKernelDef d = kdef(op, 6, 13, tcs, 1);
  d.domain = domain;
  d.input_mem_types = in_mem;
  d.input_mem_type_count = 2;
  d.aliases = aliases;
  d.alias_count = 1;
  d.release = dummy_release;
  d.user_data = &user;
  add_ok(r, d);
  /* The provider's memory may be gone after registration. */
  memset(domain, 'x', sizeof domain - 1);
  memset(op, 'x', sizeof op - 1);
  tname[0] = 'U';
  types[0] = types[1] = I8;
  in_mem[1] = ONYX_MEM_READ_ONLY;
  aliases[0].output = 5;

  assert_int_equal(ox_kreg_count(r), 1);
  const OxKernel* k = ox_kreg_at(r, 0);
  assert_string_equal(k->def.domain, ""); /* "ai.onnx" is stored as "" */
  assert_string_equal(k->def.op_type, "Relu");
  assert_int_equal(k->def.since_version, 6);
  assert_int_equal(k->def.end_version, 13);
  assert_int_equal(k->def.type_constraint_count, 1);
  assert_string_equal(k->def.type_constraints[0].name, "T");
  assert_int_equal(k->def.type_constraints[0].type_count, 2);
  assert_int_equal(k->def.type_constraints[0].types[0], F32);
  assert_int_equal(k->def.type_constraints[0].types[1], ONYX_ELEM_FLOAT64);
  assert_int_equal(k->allowed[0], (UINT64_C(1) << 1) | (UINT64_C(1) << 11));
  assert_int_equal(ox_kernel_input_mem(k, 0), ONYX_MEM_DEFAULT);
  assert_int_equal(ox_kernel_input_mem(k, 1), ONYX_MEM_HOST_ACCESSIBLE);
  assert_int_equal(ox_kernel_input_mem(k, 2), ONYX_MEM_DEFAULT); /* past the count */
  assert_int_equal(ox_kernel_output_mem(k, 0), ONYX_MEM_DEFAULT);
  assert_int_equal(k->def.alias_count, 1);
  assert_int_equal(k->def.aliases[0].output, 0);
  assert_int_equal(k->def.aliases[0].kind, ONYX_ALIAS_INPLACE);
  assert_ptr_equal(k->def.compute, dummy_compute);
  assert_ptr_equal(k->def.release, dummy_release);
  assert_ptr_equal(k->def.user_data, &user);
  assert_int_equal(k->def.struct_size, sizeof(OnyxKernelDef));
  assert_null(ox_kreg_at(r, 1));
  ox_kreg_free(r);
}

/* A provider built against an older, shorter OnyxKernelDef: the fields past
 * its struct_size must read as NULL/0 whatever lies in memory there. */
static void test_struct_size_older_provider(void** state) {
  OxKernelRegistry* r = new_reg();
  int user = 1;
  OnyxKernelDef d = kdef("Relu", 1, ONYX_OPSET_LATEST, NULL, 0);
  d.release = dummy_release;
  d.user_data = &user;
  d.struct_size = offsetof(OnyxKernelDef, release);
  add_ok(r, d);
  const OxKernel* k = ox_kreg_at(r, 0);
  assert_null(k->def.release);
  assert_null(k->def.user_data);
  assert_ptr_equal(k->def.compute, dummy_compute);
  /* A size that ends inside a field: that field is not covered either. */
  d = kdef("Elu", 1, 5, NULL, 0);
  d.release = dummy_release;
  d.struct_size = offsetof(OnyxKernelDef, release) + 4;
  add_ok(r, d);
  assert_null(ox_kreg_at(r, 1)->def.release);

  /* A short struct in a buffer of exactly its size: nothing past it is read
   * (ASan reports an over-read). */
  size_t short_size = offsetof(OnyxKernelDef, release);
  unsigned char* heap = malloc(short_size);
  assert_non_null(heap);
  d = kdef("Selu", 1, 5, NULL, 0);
  d.struct_size = short_size;
  memcpy(heap, &d, short_size);
  OnyxStatus* st = ox_kreg_add(r, (const OnyxKernelDef*)(void*)heap);
  free(heap);
  assert_null(st);
  assert_string_equal(ox_kreg_at(r, 2)->def.op_type, "Selu");

  /* Too short to carry compute: refused as having none. */
  d = kdef("Elu", 1, 5, NULL, 0);
  d.struct_size = offsetof(OnyxKernelDef, compute);
  add_refused(r, &d, FRAGS(PROVIDER, "Elu(ai.onnx)", "no compute"));
  /* Only struct_size itself. */
  d.struct_size = sizeof(size_t);
  add_refused(r, &d, FRAGS(PROVIDER, "no op_type"));
  ox_kreg_free(r);
}

static void test_refusals(void** state) {
  OxKernelRegistry* r = new_reg();
  OnyxKernelDef d = kdef(NULL, 1, 5, NULL, 0);
  add_refused(r, &d, FRAGS(PROVIDER, "no op_type"));
  d = kdef("Relu", 1, 5, NULL, 0);
  d.compute = NULL;
  add_refused(r, &d, FRAGS(PROVIDER, "Relu(ai.onnx)", "[1, 5]", "no compute"));
  d = kdef("Relu", 0, 5, NULL, 0);
  add_refused(r, &d, FRAGS(PROVIDER, "Relu(ai.onnx)", "since_version 0"));
  d = kdef("Relu", 7, 3, NULL, 0);
  add_refused(r, &d, FRAGS(PROVIDER, "Relu(ai.onnx)", "since_version 7 > end_version 3"));
  d = kdef("Relu", 1, 5, NULL, 0);
  d.domain = "com.acme";
  d.since_version = -1;
  add_refused(r, &d, FRAGS(PROVIDER, "Relu(com.acme)"));

  static const int32_t bad_type[] = {F32, 99};
  const struct {
    OnyxTypeConstraint tcs[2];
    size_t n;
    const char* frag;
  } bad_tcs[] = {
      {{{"T", kF32, 0}}, 1, "'T' lists no types"},
      {{{NULL, kF32, 1}}, 1, "constraint 0 has no name"},
      {{{"T", kF32, 1}, {"T", kI64, 1}}, 2, "'T' is listed twice"},
      {{{"T", bad_type, 2}}, 1, "invalid element type 99"},
      {{{"T", NULL, 2}}, 1, "'T' lists no types"},
  };
  for (size_t i = 0; i < OX_ARRAY_LEN(bad_tcs); i++) {
    d = kdef("Relu", 1, 5, bad_tcs[i].tcs, bad_tcs[i].n);
    add_refused(r, &d, FRAGS(PROVIDER, "Relu(ai.onnx)", bad_tcs[i].frag));
  }
  d = kdef("Relu", 1, 5, NULL, 2);
  add_refused(r, &d, FRAGS("type_constraint_count is 2"));
  d = kdef("Relu", 1, 5, NULL, 0);
  d.input_mem_type_count = 3;
  add_refused(r, &d, FRAGS("input_mem_type_count is 3"));
  static const int32_t bad_mem[] = {ONYX_MEM_DEFAULT, 9};
  d.input_mem_type_count = 0;
  d.output_mem_types = bad_mem;
  d.output_mem_type_count = 2;
  add_refused(r, &d, FRAGS("output 1 has invalid memory type 9"));
  static const OnyxAlias bad_alias[] = {{0, -1, ONYX_ALIAS_VIEW}};
  d = kdef("Relu", 1, 5, NULL, 0);
  d.aliases = bad_alias;
  d.alias_count = 1;
  add_refused(r, &d, FRAGS("alias 0"));

  OnyxStatus* st = ox_kreg_add(r, NULL);
  assert_non_null(st);
  assert_non_null(strstr(st->message, PROVIDER));
  ox_status_free(st);
  assert_int_equal(ox_kreg_count(r), 0);
  ox_kreg_free(r);
}

static void test_overlap_rules(void** state) {
  OxKernelRegistry* r = new_reg();
  const OnyxTypeConstraint tf32[] = {{"T", kF32, 1}};
  const OnyxTypeConstraint tf32i64[] = {{"T", kF32I64, 2}};
  const OnyxTypeConstraint ti8[] = {{"T", kI8, 1}};
  add_ok(r, kdef("Add", 7, 12, tf32, 1));
  add_ok(r, kdef("Add", 13, ONYX_OPSET_LATEST, tf32, 1)); /* adjacent ranges */
  /* [14, 20] meets [13, latest] and both take float32. */
  OnyxKernelDef d = kdef("Add", 14, 20, tf32i64, 1);
  add_refused(r, &d, FRAGS(PROVIDER, "Add(ai.onnx)", "[14, 20]", "[13, latest]", "T={float32}"));
  /* Same ranges, disjoint T: fine. */
  add_ok(r, kdef("Add", 7, ONYX_OPSET_LATEST, ti8, 1));
  /* A kernel that lists no T accepts every T: it overlaps. */
  d = kdef("Add", 6, 7, NULL, 0);
  add_refused(r, &d, FRAGS("[6, 7]", "[7, 12]", "share no type constraint"));
  add_ok(r, kdef("Add", 1, 6, NULL, 0));
  /* Another domain is another op. */
  d = kdef("Add", 7, ONYX_OPSET_LATEST, tf32, 1);
  d.domain = "com.acme";
  add_ok(r, d);
  /* "ai.onnx" is the default domain: this overlaps [7, 12]. */
  d.domain = "ai.onnx";
  add_refused(r, &d, FRAGS("Add(ai.onnx)", "[7, latest]"));
  d.domain = NULL; /* NULL is the default domain too */
  add_refused(r, &d, FRAGS("Add(ai.onnx)"));

  /* Two constraints: disjoint on one of them is enough. */
  const OnyxTypeConstraint a[] = {{"T1", kF32, 1}, {"T2", kF32I64, 2}};
  const OnyxTypeConstraint b[] = {{"T2", kI64, 1}, {"T1", kI64, 1}};
  const OnyxTypeConstraint c[] = {{"T1", kF32I64, 2}, {"T2", kI64, 1}};
  add_ok(r, kdef("Cast", 6, ONYX_OPSET_LATEST, a, 2));
  add_ok(r, kdef("Cast", 6, ONYX_OPSET_LATEST, b, 2));
  d = kdef("Cast", 9, 9, c, 2);
  add_refused(r, &d, FRAGS("Cast(ai.onnx)", "[9, 9]", "[6, latest]", "T1={float32}", "T2={int64}"));
  assert_int_equal(ox_kreg_count(r), 7);
  ox_kreg_free(r);
}

/* --- Matching --------------------------------------------------------------------------- */

static void expect_reason(const OxKernelRegistry* r, const OxNode* n, const char* want) {
  const char* why = NULL;
  assert_null(ox_kreg_match(r, n, &why));
  assert_non_null(why);
  assert_string_equal(why, want);
}

static void test_match_opset_and_types(void** state) {
  OxKernelRegistry* r = new_reg();
  const OnyxTypeConstraint tf32[] = {{"T", kF32, 1}};
  const OnyxTypeConstraint tf32i64[] = {{"T", kF32I64, 2}};
  const OnyxTypeConstraint ti8[] = {{"T", kI8, 1}};
  add_ok(r, kdef("Add", 7, 12, tf32, 1));
  add_ok(r, kdef("Add", 13, ONYX_OPSET_LATEST, tf32i64, 1));
  add_ok(r, kdef("Add", 7, ONYX_OPSET_LATEST, ti8, 1));
  const OxKernel* k0 = ox_kreg_at(r, 0);
  const OxKernel* k1 = ox_kreg_at(r, 1);
  const OxKernel* k2 = ox_kreg_at(r, 2);
  TestNode t;
  const char* why = "unset";
  assert_ptr_equal(ox_kreg_match(r, add_node(&t, "Add", 7, F32), &why), k0);
  assert_ptr_equal(ox_kreg_match(r, add_node(&t, "Add", 12, F32), NULL), k0);
  assert_ptr_equal(ox_kreg_match(r, add_node(&t, "Add", 13, F32), NULL), k1);
  assert_ptr_equal(ox_kreg_match(r, add_node(&t, "Add", 14, I64), NULL), k1);
  assert_ptr_equal(ox_kreg_match(r, add_node(&t, "Add", 9, I8), NULL), k2);
  assert_ptr_equal(ox_kreg_match(r, add_node(&t, "Add", 21, I8), NULL), k2);

  expect_reason(r, add_node(&t, "Add", 12, I64),
                "Add(ai.onnx) v12: type T=int64 not supported (kernels take float32, int8)");
  expect_reason(r, add_node(&t, "Add", 14, F16),
                "Add(ai.onnx) v14: type T=float16 not supported "
                "(kernels take float32, int8, int64)");
  expect_reason(r, add_node(&t, "Add", 6, F32),
                "no kernel for Add(ai.onnx) at opset 6 (kernels cover opsets [7, 12], "
                "[13, latest], [7, latest])");
  expect_reason(r, add_node(&t, "Mul", 14, F32), "no kernel for Mul(ai.onnx)");
  OxNode* n = add_node(&t, "Add", 14, F32);
  n->domain = "com.acme";
  expect_reason(r, n, "no kernel for Add(com.acme)");
  /* A node whose domain is spelled "ai.onnx" is the default domain. */
  n->domain = "ai.onnx";
  assert_ptr_equal(ox_kreg_match(r, n, NULL), k1);
  ox_kreg_free(r);
}

static void test_match_binds_outputs(void** state) {
  OxKernelRegistry* r = new_reg();
  const OnyxTypeConstraint tc[] = {{"T1", kF32I64, 2}, {"T2", kF32, 1}};
  add_ok(r, kdef("Cast", 6, ONYX_OPSET_LATEST, tc, 2));
  const OxKernel* k = ox_kreg_at(r, 0);
  TestNode t;
  assert_ptr_equal(
      ox_kreg_match(r, make_node(&t, &kCast, "", "Cast", 13, (int[]){I64, 0}, (int[]){F32, 0}),
                    NULL),
      k);
  expect_reason(r, make_node(&t, &kCast, "", "Cast", 13, (int[]){F32, 0}, (int[]){I64, 0}),
                "Cast(ai.onnx) v13: type T2=int64 not supported (kernel takes float32)");
  expect_reason(r, make_node(&t, &kCast, "", "Cast", 13, (int[]){I8, 0}, (int[]){F32, 0}),
                "Cast(ai.onnx) v13: type T1=int8 not supported (kernel takes float32, int64)");
  ox_kreg_free(r);
}

/* Two kernels refusing on different constraints: each refusal is listed. */
static void test_match_reason_lists_kernels(void** state) {
  OxKernelRegistry* r = new_reg();
  const OnyxTypeConstraint a[] = {{"T1", kF32, 1}, {"T2", kI64, 1}};
  const OnyxTypeConstraint b[] = {{"T1", kI32, 1}, {"T2", kF32, 1}};
  add_ok(r, kdef("Cast", 6, ONYX_OPSET_LATEST, a, 2));
  add_ok(r, kdef("Cast", 6, 20, b, 2));
  TestNode t;
  expect_reason(r, make_node(&t, &kCast, "", "Cast", 13, (int[]){F32, 0}, (int[]){F32, 0}),
                "Cast(ai.onnx) v13: no kernel takes the node's types: kernel for opsets "
                "[6, latest] refuses T2=float32 (takes int64); kernel for opsets [6, 20] "
                "refuses T1=float32 (takes int32)");
  ox_kreg_free(r);
}

static void test_match_unbound_and_absent(void** state) {
  OxKernelRegistry* r = new_reg();
  const OnyxTypeConstraint tf32[] = {{"T", kF32, 1}};
  add_ok(r, kdef("Clip", 13, ONYX_OPSET_LATEST, tf32, 1));
  add_ok(r, kdef("Reshape", 14, ONYX_OPSET_LATEST, tf32, 1));
  add_ok(r, kdef("Identity", 1, ONYX_OPSET_LATEST, NULL, 0)); /* lists nothing: any type */
  TestNode t;
  /* An absent optional input binds nothing. */
  OxNode* n = make_node(&t, &kClip, "", "Clip", 13, (int[]){F32, ABSENT, F32, 0}, (int[]){F32, 0});
  assert_ptr_equal(ox_kreg_match(r, n, NULL), ox_kreg_at(r, 0));
  n = make_node(&t, &kClip, "", "Clip", 13, (int[]){F32, ABSENT, I8, 0}, (int[]){F32, 0});
  expect_reason(r, n, "Clip(ai.onnx) v13: type T=int8 not supported (kernel takes float32)");
  /* A fixed-type input ("tensor(int64)") is not a constraint. */
  n = make_node(&t, &kReshape, "", "Reshape", 14, (int[]){F32, I64, 0}, (int[]){F32, 0});
  assert_ptr_equal(ox_kreg_match(r, n, NULL), ox_kreg_at(r, 1));
  n = add_node(&t, "Identity", 16, ONYX_ELEM_STRING);
  assert_ptr_equal(ox_kreg_match(r, n, NULL), ox_kreg_at(r, 2));
  /* Without a schema nothing can be bound: refused, saying so. */
  n->schema = NULL;
  const char* why;
  assert_null(ox_kreg_match(r, n, &why));
  assert_non_null(strstr(why, "no resolved schema"));
  ox_kreg_free(r);
}

/* The reason lives in a per-thread buffer: another thread's match does not
 * overwrite it. */
typedef struct OtherThread {
  const OxKernelRegistry* r;
  char why[256];
} OtherThread;

static void* other_main(void* arg) {
  OtherThread* o = arg;
  TestNode t;
  const char* why = NULL;
  ox_kreg_match(o->r, add_node(&t, "Sub", 14, F32), &why);
  snprintf(o->why, sizeof o->why, "%s", why ? why : "(null)");
  return NULL;
}

static void test_reason_is_per_thread(void** state) {
  OxKernelRegistry* r = new_reg();
  TestNode t;
  const char* why = NULL;
  assert_null(ox_kreg_match(r, add_node(&t, "Mul", 14, F32), &why));
  assert_string_equal(why, "no kernel for Mul(ai.onnx)");
  OtherThread o = {r, ""};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, other_main, &o), 0);
  pthread_join(th, NULL);
  assert_string_equal(o.why, "no kernel for Sub(ai.onnx)");
  assert_string_equal(why, "no kernel for Mul(ai.onnx)");
  ox_kreg_free(r);
}

static void test_many_ops(void** state) {
  OxKernelRegistry* r = new_reg();
  enum { N = 300 };
  char names[N][16];
  for (int i = 0; i < N; i++) {
    snprintf(names[i], sizeof names[i], "Op%d", i);
    add_ok(r, kdef(names[i], 1, ONYX_OPSET_LATEST, NULL, 0));
  }
  assert_int_equal(ox_kreg_count(r), N);
  for (int i = 0; i < N; i++) {
    TestNode t;
    char name[16];
    snprintf(name, sizeof name, "Op%d", i);
    assert_ptr_equal(ox_kreg_match(r, add_node(&t, name, 5, F32), NULL), ox_kreg_at(r, (size_t)i));
  }
  TestNode t;
  expect_reason(r, add_node(&t, "Op300", 5, F32), "no kernel for Op300(ai.onnx)");
  ox_kreg_free(r);
}

static void test_create_and_free_edges(void** state) {
  OxKernelRegistry* r = NULL;
  assert_null(ox_kreg_create(NULL, &r));
  OnyxKernelDef d = kdef("Relu", 1, 5, NULL, 0);
  d.compute = NULL;
  OnyxStatus* st = ox_kreg_add(r, &d);
  assert_non_null(st);
  ox_status_free(st);
  assert_int_equal(ox_kreg_count(NULL), 0);
  assert_null(ox_kreg_at(NULL, 0));
  const char* why = NULL;
  assert_null(ox_kreg_match(r, NULL, &why));
  assert_non_null(why);
  ox_kreg_free(r);
  ox_kreg_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_add_deep_copies),
      cmocka_unit_test(test_struct_size_older_provider),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_overlap_rules),
      cmocka_unit_test(test_match_opset_and_types),
      cmocka_unit_test(test_match_binds_outputs),
      cmocka_unit_test(test_match_reason_lists_kernels),
      cmocka_unit_test(test_match_unbound_and_absent),
      cmocka_unit_test(test_reason_is_per_thread),
      cmocka_unit_test(test_many_ops),
      cmocka_unit_test(test_create_and_free_edges),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
