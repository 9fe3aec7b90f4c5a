/* test_author_ep.c — a provider written as an outside author writes one
 * (tests/providers/author: float32 MatMul and Add, by kernels, as a compiled
 * MatMul -> Add group, or through its own transform) mixed with the CPU
 * provider keeps every node it claims, at every optimization level: the
 * optimizer's fusions (MatMul + Add -> Gemm or com.onyx FusedMatMul,
 * + Relu -> FusedMatMul with an activation) run only inside one provider's
 * nodes, after placement. The nodes placed on it run there (its kernel call
 * counter moves) and the outputs match a double-precision reference. */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "onyx/onyx.h"
#include "ox_test_models.h"

#define M  4
#define K  8
#define N  6
#define N2 5

static float w1[K * N], b1[N], w2[N * N2], b2[N2], w3[K * N];

static void fill(float* p, size_t n, int seed) {
  for (size_t i = 0; i < n; i++)
    p[i] = (float)sin(0.37 * (double)(i + 1) * seed) * 0.5f;
}

/* x[M, K] -> MatMul(w1) -> Add(b1) -> Relu -> MatMul(w2) -> Add(b2 [1, N2]) -> y;
 * t[2, 3, K] -> MatMul(w3) -> Add(b1) -> z (a rank-3 product: FusedMatMul for
 * the CPU provider). With relu false the model has no Relu (MatMul and Add
 * only: the provider alone can run it). */
static void make_model(bool relu, uint8_t** bytes, size_t* len) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){M, K});
  otm_input(m, "t", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 3, K});
  otm_initializer(m, "w1", ONYX_ELEM_FLOAT32, 2, (int64_t[]){K, N}, w1);
  otm_initializer(m, "b1", ONYX_ELEM_FLOAT32, 1, (int64_t[]){N}, b1);
  otm_initializer(m, "w2", ONYX_ELEM_FLOAT32, 2, (int64_t[]){N, N2}, w2);
  otm_initializer(m, "b2", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, N2}, b2);
  otm_initializer(m, "w3", ONYX_ELEM_FLOAT32, 2, (int64_t[]){K, N}, w3);
  otm_node(m, "MatMul", "mm1", "x,w1", "p1");
  otm_node(m, "Add", "add1", "p1,b1", "q1");
  if (relu) otm_node(m, "Relu", "relu1", "q1", "r1");
  otm_node(m, "MatMul", "mm2", relu ? "r1,w2" : "q1,w2", "p2");
  otm_node(m, "Add", "add2", "p2,b2", "y");
  otm_node(m, "MatMul", "mm3", "t,w3", "p3");
  otm_node(m, "Add", "add3", "p3,b1", "z");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){M, N2});
  otm_output(m, "z", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 3, N});
  otm_serialize(m, bytes, len);
  otm_free(m);
}

/* The model in double precision. */
static void reference(bool relu, const float* x, const float* t, double* y, double* z) {
  double h[M * N];
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double a = b1[j];
      for (int k = 0; k < K; k++)
        a += (double)x[i * K + k] * w1[k * N + j];
      h[i * N + j] = relu && a < 0 ? 0 : a;
    }
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N2; j++) {
      double a = b2[j];
      for (int k = 0; k < N; k++)
        a += h[i * N + k] * w2[k * N2 + j];
      y[i * N2 + j] = a;
    }
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < N; j++) {
      double a = b1[j];
      for (int k = 0; k < K; k++)
        a += (double)t[i * K + k] * w3[k * N + j];
      z[i * N + j] = a;
    }
}

/* The provider library's kernel call counter (author_calls). */
static long calls_of(const char* provider) {
  char path[1024];
  const char* dir = getenv("ONYX_PROVIDER_PATH");
  snprintf(path, sizeof path, "%s/libonyx_ep_%s.so", dir ? dir : ".", provider);
  void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return -1;
  long (*fn)(void) = (long (*)(void))dlsym(h, "author_calls");
  long n = fn ? fn() : -1;
  dlclose(h);
  return n;
}

static OnyxSession* open_session(const char* provider, OnyxOptimizationLevel level, bool cpu,
                                 const uint8_t* bytes, size_t len, OnyxStatus** err) {
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  assert_null(onyx_session_options_set_optimization_level(o, level));
  assert_null(onyx_session_options_add_provider(o, provider, NULL, 0, 1));
  if (cpu)
    assert_null(onyx_session_options_add_provider(o, "cpu", NULL, 0, 1));
  else
    assert_null(onyx_session_options_set_no_implicit_cpu(o, 1));
  OnyxSession* s = NULL;
  *err = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  return s;
}

/* Nodes not on `provider` other than the model's Relu (which it has no
 * kernel for): each is a MatMul or Add of the model, or a node a rewrite
 * made from them, taken away from the provider. */
static int misplaced(OnyxSession* s, const char* provider, char* report, size_t cap) {
  int bad = 0, here = 0;
  for (size_t k = 0, n = onyx_session_node_count(s); k < n; k++) {
    OnyxNodeInfo info = {.struct_size = sizeof info};
    assert_null(onyx_session_node_info(s, k, &info));
    if (!strcmp(info.provider, provider))
      here++;
    else if (strcmp(info.op_type, "Relu"))
      bad++;
  }
  if (!here) bad++;
  char* text = NULL;
  assert_null(onyx_session_explain(s, &text));
  snprintf(report, cap, "%s", text);
  onyx_free(text);
  return bad;
}

static void run_and_check(OnyxSession* s, bool relu) {
  float x[M * K], t[2 * 3 * K];
  fill(x, M * K, 5);
  fill(t, 2 * 3 * K, 6);
  double y[M * N2], z[6 * N];
  reference(relu, x, t, y, z);
  OnyxValue *vx = NULL, *vt = NULL;
  assert_null(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){M, K}, 2, x, sizeof x, &vx));
  assert_null(
      onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){2, 3, K}, 3, t, sizeof t, &vt));
  const char* in_names[] = {"x", "t"};
  const char* out_names[] = {"y", "z"};
  const OnyxValue* ins[] = {vx, vt};
  OnyxValue* outs[2] = {0};
  OnyxStatus* st = onyx_session_run(s, NULL, in_names, ins, 2, out_names, 2, outs);
  if (st) fail_msg("run: %s", onyx_status_message(st));
  const double* want[2] = {y, z};
  const size_t count[2] = {M * N2, 6 * N};
  for (int k = 0; k < 2; k++) {
    const OnyxTensor* tt = onyx_value_tensor(outs[k]);
    assert_int_equal(onyx_tensor_elem_count(tt), count[k]);
    const float* p = onyx_tensor_data(tt);
    for (size_t i = 0; i < count[k]; i++)
      if (fabs(p[i] - want[k][i]) > 1e-4 + 1e-4 * fabs(want[k][i]))
        fail_msg("output %d element %zu: %.7g, reference %.7g", k, i, p[i], want[k][i]);
  }
  onyx_values_release(outs, 2);
  onyx_value_release(vx);
  onyx_value_release(vt);
}

static const OnyxOptimizationLevel levels[] = {ONYX_OPT_DISABLED, ONYX_OPT_BASIC, ONYX_OPT_EXTENDED,
                                               ONYX_OPT_ALL};

/* [provider, cpu] at every level: every MatMul and Add on the provider, run
 * there, outputs right. */
static void check_provider(const char* provider) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  make_model(true, &bytes, &len);
  for (size_t l = 0; l < sizeof levels / sizeof *levels; l++) {
    OnyxStatus* err = NULL;
    OnyxSession* s = open_session(provider, levels[l], true, bytes, len, &err);
    if (err) fail_msg("%s at level %d: %s", provider, (int)levels[l], onyx_status_message(err));
    char report[8192];
    int bad = misplaced(s, provider, report, sizeof report);
    if (bad)
      fail_msg("%s at level %d: %d nodes taken from it:\n%s", provider, (int)levels[l], bad,
               report);
    long before = calls_of(provider);
    assert_true(before >= 0);
    run_and_check(s, true);
    assert_true(calls_of(provider) > before); /* its kernels ran */
    onyx_session_release(s);
  }
  free(bytes);
}

static void test_kernels_provider(void** state) {
  (void)state;
  check_provider("authork");
}

static void test_group_provider(void** state) {
  (void)state;
  check_provider("authorg");
  /* Its decline reasons carry its own name; reports print it once. */
  uint8_t* bytes = NULL;
  size_t len = 0;
  make_model(true, &bytes, &len);
  OnyxStatus* err = NULL;
  OnyxSession* s = open_session("authorg", ONYX_OPT_ALL, true, bytes, len, &err);
  assert_null(err);
  char* text = NULL;
  assert_null(onyx_session_explain(s, &text));
  assert_non_null(strstr(text, "declined by authorg: no kernel for Relu"));
  assert_null(strstr(text, "authorg: authorg:"));
  assert_non_null(strstr(text, "(an outside author 0.3)")); /* vendor and version */
  onyx_free(text);
  onyx_session_release(s);
  free(bytes);
}

static void test_transform_provider(void** state) {
  (void)state;
  check_provider("authort");
  /* Its transform made com.author.MatMulAdd from each chain, at every level. */
  uint8_t* bytes = NULL;
  size_t len = 0;
  make_model(true, &bytes, &len);
  OnyxStatus* err = NULL;
  OnyxSession* s = open_session("authort", ONYX_OPT_DISABLED, true, bytes, len, &err);
  assert_null(err);
  char* text = NULL;
  assert_null(onyx_session_explain(s, &text));
  size_t fused = 0;
  for (const char* p = strstr(text, "MatMulAdd"); p; p = strstr(p + 1, "MatMulAdd"))
    fused++;
  assert_int_equal(fused, 3);
  assert_non_null(strstr(text, "made by authort:transform from mm1, add1"));
  onyx_free(text);
  onyx_session_release(s);
  free(bytes);
}

/* Without the CPU provider (implicit_cpu false) a model of MatMul and Add
 * only is the provider's alone at every level: no fusion makes a node it
 * cannot run. */
static void test_alone_every_level(void** state) {
  (void)state;
  uint8_t* bytes = NULL;
  size_t len = 0;
  make_model(false, &bytes, &len);
  static const char* const providers[] = {"authork", "authorg", "authort"};
  for (size_t p = 0; p < 3; p++)
    for (size_t l = 0; l < sizeof levels / sizeof *levels; l++) {
      OnyxStatus* err = NULL;
      OnyxSession* s = open_session(providers[p], levels[l], false, bytes, len, &err);
      if (err)
        fail_msg("%s alone at level %d: %s", providers[p], (int)levels[l],
                 onyx_status_message(err));
      run_and_check(s, false);
      onyx_session_release(s);
    }
  free(bytes);
}

/* The CPU provider alone still gets the fusions: Gemm/FusedMatMul nodes made
 * from the chains, with their origins. */
static void test_cpu_still_fuses(void** state) {
  (void)state;
  uint8_t* bytes = NULL;
  size_t len = 0;
  make_model(true, &bytes, &len);
  OnyxSessionOptions* o = NULL;
  assert_null(onyx_session_options_create(&o));
  OnyxSession* s = NULL;
  assert_null(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_options_release(o);
  char* text = NULL;
  assert_null(onyx_session_explain(s, &text));
  for (size_t k = 0, n = onyx_session_node_count(s); k < n; k++) {
    OnyxNodeInfo info = {.struct_size = sizeof info};
    assert_null(onyx_session_node_info(s, k, &info));
    assert_string_not_equal(info.op_type, "MatMul"); /* each chain fused */
    assert_string_not_equal(info.op_type, "Add");
  }
  assert_non_null(strstr(text, "FusedMatMul"));
  assert_non_null(strstr(text, "made by matmul_add, conv_act from "));
  onyx_free(text);
  run_and_check(s, true);
  onyx_session_release(s);
  free(bytes);
}

int main(void) {
  fill(w1, K * N, 1);
  fill(b1, N, 2);
  fill(w2, N * N2, 3);
  fill(b2, N2, 4);
  fill(w3, K * N, 7);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kernels_provider),   cmocka_unit_test(test_group_provider),
      cmocka_unit_test(test_transform_provider), cmocka_unit_test(test_alone_every_level),
      cmocka_unit_test(test_cpu_still_fuses),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
