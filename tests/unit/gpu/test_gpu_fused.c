/* test_gpu_fused.c — com.onyx FusedElementwise on a GPU provider (GPU_NAME;
 * for "gpuemu" the kernel's per-element body runs on the host emulation) and
 * on the CPU provider (providers/cpu/cpu_fused_ew.c):
 * - a table of programs (every opcode, immediates as either operand,
 *   register reuse, parameters, 1 to 3 inputs that broadcast, flat and
 *   strided addressing, several CPU chunks), each node run on each provider
 *   and checked against the program evaluated here in double;
 * - the opcode numbers and limits of the providers' header against the
 *   host's (schemas/ox_fused_ew.h);
 * - hostile programs, refused by the providers' check (gpu_fused_check,
 *   called directly) and by the session at load, each error naming the
 *   field.
 * Without a device the GPU provider's table skips. */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_fused.h"
#include "onyx/onyx.h"
#include "ox_fused_ew.h"
#include "ox_host_api.h"
#include "ox_ir.h"
#include "ox_providers.h"
#include "ox_test_models.h"

#ifndef GPU_NAME
#error "GPU_NAME comes from tests/unit/gpu/CMakeLists.txt"
#endif

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static void gpu_required(void) {
  OxProviderLib* lib = NULL;
  OnyxStatus* st = ox_provider_lib_acquire(ox_host_api(), GPU_NAME, NULL, &lib);
  if (st) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", st->message);
    ox_status_free(st);
    fail_msg("loading %s: %s", GPU_NAME, msg);
  }
  size_t n = 0;
  OnyxStatus* why = lib->provider->device_count(lib->provider, &n);
  ox_status_free(why);
  ox_provider_lib_release(lib);
  if (!n) {
    fprintf(stderr, "[  SKIP    ] no " GPU_NAME " device: the kernel tests need one\n");
    skip();
  }
}

/* A 64-bit LCG: uniform doubles in [0, 1). */
static double uni(uint64_t* s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) / 9007199254740992.0;
}

enum { MAX_IN = 3, MAX_CODE = 4 * 16, MAX_IMM = 8 };

typedef struct Case {
  const char* label;
  int n_in;
  int rank[MAX_IN];
  int64_t dims[MAX_IN][3];
  int64_t code[MAX_CODE]; /* ends at the first instruction with opcode -1 */
  float imm[MAX_IMM];
  int n_imm;
  double lo, hi; /* input range */
} Case;

#define END  -1, 0, 0, 0
#define I(k) (-1 - (k)) /* immediate k as an operand */

/* The program in double, the definitions of the ops (ONNX's), not the
 * kernel's formulas. */
static double ref_op(int64_t op, double a, double b, double p0, double p1) {
  switch (op) {
  case OX_FEW_ADD:
    return a + b;
  case OX_FEW_SUB:
    return a - b;
  case OX_FEW_MUL:
    return a * b;
  case OX_FEW_DIV:
    return a / b;
  case OX_FEW_POW:
    return pow(a, b);
  case OX_FEW_MAX:
    return a > b ? a : b;
  case OX_FEW_MIN:
    return a < b ? a : b;
  case OX_FEW_NEG:
    return -a;
  case OX_FEW_ABS:
    return fabs(a);
  case OX_FEW_EXP:
    return exp(a);
  case OX_FEW_LOG:
    return log(a);
  case OX_FEW_SQRT:
    return sqrt(a);
  case OX_FEW_RECIPROCAL:
    return 1.0 / a;
  case OX_FEW_TANH:
    return tanh(a);
  case OX_FEW_SIGMOID:
    return 1.0 / (1.0 + exp(-a));
  case OX_FEW_ERF:
    return erf(a);
  case OX_FEW_RELU:
    return a > 0 ? a : 0;
  case OX_FEW_LEAKY_RELU:
    return a >= 0 ? a : p0 * a;
  case OX_FEW_ELU:
    return a >= 0 ? a : p0 * (exp(a) - 1.0);
  case OX_FEW_CLIP:
    return a < p0 ? p0 : a > p1 ? p1 : a;
  case OX_FEW_HARD_SIGMOID:
    return fmax(0.0, fmin(1.0, p0 * a + p1));
  case OX_FEW_HARD_SWISH:
    return a * fmax(0.0, fmin(1.0, a / 6.0 + 0.5));
  case OX_FEW_SOFTPLUS:
    return log1p(exp(a));
  case OX_FEW_GELU:
    return 0.5 * a * (1.0 + erf(a / sqrt(2.0)));
  case OX_FEW_GELU_TANH:
    return 0.5 * a * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (a + 0.044715 * a * a * a)));
  case OX_FEW_SILU:
    return a / (1.0 + exp(-a));
  default:
    fail_msg("opcode %lld has no reference", (long long)op);
    return 0;
  }
}

static double ref_run(const Case* c, const double* x) {
  double r[OX_FEW_MAX_REGS] = {0};
  for (int j = 0; j < c->n_in; j++)
    r[j] = x[j];
  int64_t out = 0;
  for (int k = 0; 4 * k < MAX_CODE && c->code[4 * k] >= 0; k++) {
    const int64_t* ins = c->code + 4 * k;
    const double a = ins[2] >= 0 ? r[ins[2]] : c->imm[-1 - ins[2]];
    const bool binary = ins[0] <= OX_FEW_MIN;
    const double b = !binary ? 0 : ins[3] >= 0 ? r[ins[3]] : c->imm[-1 - ins[3]];
    const double p0 = !binary && ins[3] < 0 ? c->imm[-1 - ins[3]] : 0;
    const double p1 = !binary && ins[3] < 0 && -ins[3] < c->n_imm ? c->imm[-ins[3]] : 0;
    r[ins[1]] = ref_op(ins[0], a, b, p0, p1);
    out = ins[1];
  }
  return r[out];
}

static size_t code_len(const Case* c) {
  size_t n = 0;
  while (n < MAX_CODE && c->code[n] >= 0)
    n += 4;
  return n;
}

/* A model of one FusedElementwise node reading X0.. and writing Y. */
static void build(const Case* c, const int64_t* code, size_t n_code, const float* imm, size_t n_imm,
                  const int64_t* ydims, int yrank, uint8_t** bytes, size_t* len) {
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "com.onyx", 1);
  char ins[64] = "";
  for (int j = 0; j < c->n_in; j++) {
    char name[16];
    snprintf(name, sizeof name, "X%d", j);
    otm_input(m, name, ONYX_ELEM_FLOAT32, c->rank[j], c->dims[j]);
    strcat(ins, j ? ",X" : "X");
    snprintf(ins + strlen(ins), sizeof ins - strlen(ins), "%d", j);
  }
  OxTestNode* n = otm_node(m, "FusedElementwise", "fused", ins, "Y");
  otm_node_domain(n, "com.onyx");
  otm_attr_ints(n, "program", n_code, code);
  if (n_imm) otm_attr_floats(n, "immediates", n_imm, imm);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, yrank, ydims);
  otm_serialize(m, bytes, len);
  otm_free(m);
}

/* A session of GPU_NAME then cpu, or (gpu false) of cpu alone. */
static OnyxStatus* open_session(const uint8_t* bytes, size_t len, bool gpu, OnyxSession** s) {
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  const char* cfg = gpu ? "{\"providers\": [{\"name\": \"" GPU_NAME "\"}, {\"name\": \"cpu\"}]}"
                        : "{\"providers\": [{\"name\": \"cpu\"}]}";
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "fused.json"));
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, s);
  onyx_session_options_release(o);
  return st;
}

/* Runs case c on GPU_NAME (gpu) or on the CPU provider alone. */
static void run_case(const Case* c, bool gpu) {
  /* Y's dims: the broadcast of the inputs' (right-aligned). */
  int yrank = 0;
  for (int j = 0; j < c->n_in; j++)
    if (c->rank[j] > yrank) yrank = c->rank[j];
  int64_t ydims[3] = {1, 1, 1};
  for (int j = 0; j < c->n_in; j++)
    for (int d = 0; d < c->rank[j]; d++) {
      int64_t* o = &ydims[yrank - c->rank[j] + d];
      if (c->dims[j][d] != 1) *o = c->dims[j][d];
    }
  size_t n = 1;
  for (int d = 0; d < yrank; d++)
    n *= (size_t)ydims[d];
  uint8_t* bytes = NULL;
  size_t len = 0;
  build(c, c->code, code_len(c), c->imm, (size_t)c->n_imm, ydims, yrank, &bytes, &len);
  OnyxSession* s = NULL;
  OnyxStatus* st = open_session(bytes, len, gpu, &s);
  if (st) fail_msg("%s: %s", c->label, onyx_status_message(st));
  assert_int_equal(onyx_session_provider_node_count(s, 0), 1); /* on GPU_NAME, or cpu */
  assert_string_equal(onyx_session_provider_name(s, 0), gpu ? GPU_NAME : "cpu");

  uint64_t seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)strlen(c->label);
  float* x[MAX_IN] = {NULL};
  size_t cnt[MAX_IN];
  OnyxValue* v[MAX_IN] = {NULL};
  const char* names[MAX_IN] = {"X0", "X1", "X2"};
  for (int j = 0; j < c->n_in; j++) {
    cnt[j] = 1;
    for (int d = 0; d < c->rank[j]; d++)
      cnt[j] *= (size_t)c->dims[j][d];
    x[j] = malloc(cnt[j] * sizeof(float));
    assert_non_null(x[j]);
    for (size_t i = 0; i < cnt[j]; i++)
      x[j][i] = (float)(c->lo + (c->hi - c->lo) * uni(&seed));
    ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, c->dims[j], (size_t)c->rank[j], x[j],
                                cnt[j] * sizeof(float), &v[j]));
  }
  const char* out = "Y";
  OnyxValue* y = NULL;
  ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)v, (size_t)c->n_in, &out, 1, &y));
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_elem_count(t), n);
  assert_int_equal(onyx_tensor_rank(t), (size_t)yrank);
  const float* got = onyx_tensor_data(t);
  for (size_t i = 0; i < n; i++) {
    /* each input's element for Y's element i (broadcast dims read 0) */
    double xi[MAX_IN];
    size_t coord[3] = {0, 0, 0}, rest = i;
    for (int d = yrank - 1; d >= 0; d--) {
      coord[d] = rest % (size_t)ydims[d];
      rest /= (size_t)ydims[d];
    }
    for (int j = 0; j < c->n_in; j++) {
      size_t off = 0;
      for (int d = 0; d < c->rank[j]; d++) {
        const size_t cd = c->dims[j][d] == 1 ? 0 : coord[yrank - c->rank[j] + d];
        off = off * (size_t)c->dims[j][d] + cd;
      }
      xi[j] = x[j][off];
    }
    const double want = ref_run(c, xi);
    if (!(fabs(got[i] - want) <= 2e-6 * (1.0 + fabs(want))))
      fail_msg("%s (%s): Y[%zu] = %.9g, want %.9g", c->label, gpu ? GPU_NAME : "cpu", i, got[i],
               want);
  }
  onyx_value_release(y);
  for (int j = 0; j < c->n_in; j++) {
    onyx_value_release(v[j]);
    free(x[j]);
  }
  onyx_session_release(s);
  free(bytes);
}

/* sqrt(2 / pi) as float */
#define K_GELU 0.7978845608028654f

static const Case cases[] = {
    /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as the pass writes
     * it: registers reused once read */
    {"tanh-GELU chain",
     1,
     {3},
     {{2, 3, 50}},
     {OX_FEW_POW, 1, 0, I(0), OX_FEW_MUL,  1, 1, I(1), OX_FEW_ADD, 1, 0, 1,
      OX_FEW_MUL, 1, 1, I(2), OX_FEW_TANH, 1, 1, 0,    OX_FEW_ADD, 1, 1, I(3),
      OX_FEW_MUL, 0, 0, I(4), OX_FEW_MUL,  0, 0, 1,    END},
     {3.0f, 0.044715f, K_GELU, 1.0f, 0.5f},
     5,
     -6,
     6},
    /* relu(A + bias) * sigmoid(C) - C / 2, bias [4] and C [2, 1, 1]
     * broadcast: the strided addressing */
    {"broadcast bias and gate",
     3,
     {3, 1, 3},
     {{2, 3, 4}, {4}, {2, 1, 1}},
     {OX_FEW_ADD, 3,    0,          1,          OX_FEW_RELU, 3, 3,  0,          OX_FEW_SIGMOID,
      4,          2,    0,          OX_FEW_MUL, 3,           3, 4,  OX_FEW_DIV, 4,
      2,          I(0), OX_FEW_SUB, 0,          3,           4, END},
     {2.0f},
     1,
     -3,
     3},
    /* a scalar input [1] beside a full one: flat addressing; immediates as
     * the first operand (1 - x, 2 / y); unary ops of one value (exp of the
     * scalar input, -2 of an immediate) */
    {"scalar input, immediates first",
     2,
     {2, 1},
     {{5, 7}, {1}},
     {OX_FEW_SUB, 2, I(0),       0,    OX_FEW_MUL, 2, 2,          1,    OX_FEW_DIV, 3,
      I(1),       2, OX_FEW_EXP, 4,    1,          0, OX_FEW_MUL, 3,    3,          4,
      OX_FEW_MAX, 3, 3,          I(2), OX_FEW_MIN, 3, 3,          I(3), OX_FEW_NEG, 5,
      I(1),       0, OX_FEW_ADD, 3,    3,          5, END},
     {1.0f, 2.0f, -4.0f, 4.0f},
     4,
     0.25,
     2},
    {"parameters: LeakyRelu, Elu, Clip, HardSigmoid",
     1,
     {2},
     {{4, 33}},
     {OX_FEW_LEAKY_RELU,   1, 0, I(0), OX_FEW_ELU, 2, 0, I(1), OX_FEW_CLIP, 3, 0, I(2),
      OX_FEW_HARD_SIGMOID, 4, 0, I(4), OX_FEW_ADD, 1, 1, 2,    OX_FEW_ADD,  1, 1, 3,
      OX_FEW_ADD,          1, 1, 4,    END},
     {0.1f, 1.3f, -0.5f, 0.7f, 0.25f, 0.4f},
     6,
     -4,
     4},
    {"activations: HardSwish, Softplus, Silu, Gelu, Gelu tanh, Erf",
     1,
     {1},
     {{97}},
     {OX_FEW_HARD_SWISH, 1, 0, 0, OX_FEW_SOFTPLUS,  2, 0, 0, OX_FEW_ADD,  1, 1, 2,
      OX_FEW_SILU,       2, 0, 0, OX_FEW_ADD,       1, 1, 2, OX_FEW_GELU, 2, 0, 0,
      OX_FEW_ADD,        1, 1, 2, OX_FEW_GELU_TANH, 2, 0, 0, OX_FEW_ADD,  1, 1, 2,
      OX_FEW_ERF,        2, 0, 0, OX_FEW_ADD,       1, 1, 2, END},
     {0},
     0,
     -5,
     5},
    /* log(|x| + 1), sqrt |x|, exp(-x), 1 / (x^2 + 1), -x, Pow 0.5 and 1.5 */
    {"Abs, Log, Sqrt, Exp, Neg, Reciprocal, Pow",
     1,
     {2},
     {{3, 41}},
     {OX_FEW_ABS,  1, 0, 0,    OX_FEW_ADD,        2, 1, I(0), OX_FEW_LOG, 2, 2, 0,
      OX_FEW_SQRT, 3, 1, 0,    OX_FEW_ADD,        2, 2, 3,    OX_FEW_NEG, 3, 0, 0,
      OX_FEW_EXP,  3, 3, 0,    OX_FEW_ADD,        2, 2, 3,    OX_FEW_POW, 3, 0, I(1),
      OX_FEW_ADD,  3, 3, I(0), OX_FEW_RECIPROCAL, 3, 3, 0,    OX_FEW_ADD, 2, 2, 3,
      END},
     {1.0f, 2.0f},
     2,
     -3,
     3},
    /* 2,100 elements (several CPU chunks, the last partial), a bias [700]
     * and a gate [3, 1] in strided addressing: tanh(x + bias) * gate */
    {"chunks, strided bias and gate",
     3,
     {2, 1, 2},
     {{3, 700}, {700}, {3, 1}},
     {OX_FEW_ADD, 3, 0, 1, OX_FEW_TANH, 3, 3, 0, OX_FEW_MUL, 0, 3, 2, END},
     {0},
     0,
     -2,
     2},
    {"Pow by a non-integer on positive x, Tanh",
     1,
     {1},
     {{64}},
     {OX_FEW_POW, 1, 0, I(0), OX_FEW_TANH, 1, 1, 0, OX_FEW_POW, 2, 0, I(1), OX_FEW_ADD, 15, 1, 2,
      END},
     {1.5f, 0.5f},
     2,
     0.01,
     3},
};

static void test_programs(void** state) {
  (void)state;
  gpu_required();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_case(&cases[i], true);
}

/* The CPU provider's kernel (providers/cpu/cpu_fused_ew.c) on the same
 * table: chunks of 512 elements, the last one partial, in parallel. */
static void test_programs_cpu(void** state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_case(&cases[i], false);
}

/* The provider's opcodes are the op's. */
static void test_opcodes_agree(void** state) {
  (void)state;
  assert_int_equal(GPU_FE_OP_COUNT, OX_FEW_OP_COUNT);
  assert_int_equal(GPU_FE_MAX_INPUTS, OX_FEW_MAX_INPUTS);
  assert_int_equal(GPU_FE_MAX_REGS, OX_FEW_MAX_REGS);
  assert_int_equal(GPU_FE_MAX_INSTR, OX_FEW_MAX_INSTR);
  assert_int_equal(GPU_FE_MAX_IMM, OX_FEW_MAX_IMM);
  const int pairs[][2] = {
      {GPU_FE_ADD, OX_FEW_ADD},
      {GPU_FE_SUB, OX_FEW_SUB},
      {GPU_FE_MUL, OX_FEW_MUL},
      {GPU_FE_DIV, OX_FEW_DIV},
      {GPU_FE_POW, OX_FEW_POW},
      {GPU_FE_MAX, OX_FEW_MAX},
      {GPU_FE_MIN, OX_FEW_MIN},
      {GPU_FE_NEG, OX_FEW_NEG},
      {GPU_FE_ABS, OX_FEW_ABS},
      {GPU_FE_EXP, OX_FEW_EXP},
      {GPU_FE_LOG, OX_FEW_LOG},
      {GPU_FE_SQRT, OX_FEW_SQRT},
      {GPU_FE_RECIPROCAL, OX_FEW_RECIPROCAL},
      {GPU_FE_TANH, OX_FEW_TANH},
      {GPU_FE_SIGMOID, OX_FEW_SIGMOID},
      {GPU_FE_ERF, OX_FEW_ERF},
      {GPU_FE_RELU, OX_FEW_RELU},
      {GPU_FE_LEAKY_RELU, OX_FEW_LEAKY_RELU},
      {GPU_FE_ELU, OX_FEW_ELU},
      {GPU_FE_CLIP, OX_FEW_CLIP},
      {GPU_FE_HARD_SIGMOID, OX_FEW_HARD_SIGMOID},
      {GPU_FE_HARD_SWISH, OX_FEW_HARD_SWISH},
      {GPU_FE_SOFTPLUS, OX_FEW_SOFTPLUS},
      {GPU_FE_GELU, OX_FEW_GELU},
      {GPU_FE_GELU_TANH, OX_FEW_GELU_TANH},
      {GPU_FE_SILU, OX_FEW_SILU},
  };
  assert_int_equal(sizeof pairs / sizeof pairs[0], OX_FEW_OP_COUNT);
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    assert_int_equal(pairs[i][0], pairs[i][1]);
    assert_int_equal(gpu_fe_params(pairs[i][0]), ox_few_params(pairs[i][1]));
  }
}

/* A hostile program: the reason the check gives, and the instruction. */
typedef struct Bad {
  const char* label;
  size_t n_in;
  int64_t code[12];
  size_t n_code;
  size_t n_imm;
  const char* why; /* a part of the reason */
  int64_t at;
} Bad;

static const Bad bads[] = {
    {"register past the file", 1, {OX_FEW_ADD, 1, 0, 16}, 4, 0, "register out of range", 0},
    {"register never set", 1, {OX_FEW_ADD, 1, 0, 1}, 4, 0, "no input or earlier instruction", 0},
    {"destination negative", 1, {OX_FEW_NEG, -1, 0, 0}, 4, 0, "destination register", 0},
    {"destination past the file", 1, {OX_FEW_NEG, 99, 0, 0}, 4, 0, "destination register", 0},
    {"opcode unknown", 1, {OX_FEW_NEG, 1, 0, 0, 99, 1, 1, 0}, 8, 0, "unknown opcode", 1},
    {"opcode negative", 1, {-5, 1, 0, 0}, 4, 0, "unknown opcode", 0},
    {"truncated program", 1, {OX_FEW_NEG, 1, 0, 0, OX_FEW_ADD, 1}, 6, 0, "whole instructions", -1},
    {"empty program", 1, {0}, 0, 0, "at least one", -1},
    {"immediate past the list", 1, {OX_FEW_ADD, 1, 0, I(2)}, 4, 2, "immediate out of range", 0},
    {"Clip's max past the list", 1, {OX_FEW_CLIP, 1, 0, I(1)}, 4, 2, "immediate out of range", 0},
    {"parameter as a register", 2, {OX_FEW_LEAKY_RELU, 1, 0, 1}, 4, 0, "must be an immediate", 0},
    {"unary op with an operand b", 1, {OX_FEW_TANH, 1, 0, 3}, 4, 0, "without parameters", 0},
    {"nine inputs", 9, {OX_FEW_NEG, 1, 0, 0}, 4, 0, "1 to 8 inputs", -1},
};

static void test_hostile_check(void** state) {
  (void)state;
  const float imm[2] = {1.0f, 2.0f};
  for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
    const Bad* b = &bads[i];
    GpuFeProgram p;
    int64_t at = -7, value = 0;
    const char* why = gpu_fused_check(b->code, b->n_code, imm, b->n_imm, b->n_in, &p, &at, &value);
    if (!why || !strstr(why, b->why))
      fail_msg("%s: '%s', want '%s'", b->label, why ? why : "(accepted)", b->why);
    assert_int_equal(at, b->at);
    /* the host's check, which the session's shape inference runs */
    int64_t hat = -7, hvalue = 0;
    const char* hwhy = ox_few_check(b->n_in, b->code, b->n_code, b->n_imm, &hat, &hvalue);
    if (!hwhy || strcmp(hwhy, why)) fail_msg("%s: host '%s', provider '%s'", b->label, hwhy, why);
    assert_int_equal(hat, at);
    assert_int_equal(hvalue, value);
  }
  /* too many instructions and immediates */
  int64_t* code = calloc(4 * (OX_FEW_MAX_INSTR + 1), sizeof *code);
  assert_non_null(code);
  for (size_t k = 0; k <= OX_FEW_MAX_INSTR; k++)
    code[4 * k] = OX_FEW_NEG, code[4 * k + 1] = 0;
  GpuFeProgram p = {0};
  int64_t at, value;
  const char* why = gpu_fused_check(code, 4 * (OX_FEW_MAX_INSTR + 1), imm, 0, 1, &p, &at, &value);
  assert_non_null(why);
  assert_non_null(strstr(why, "more than 64 instructions"));
  assert_null(gpu_fused_check(code, 4 * OX_FEW_MAX_INSTR, imm, 0, 1, &p, &at, &value));
  assert_int_equal(p.n_instr, OX_FEW_MAX_INSTR);
  assert_int_equal(p.out, 0);
  why = gpu_fused_check(code, 4, imm, OX_FEW_MAX_IMM + 1, 1, &p, &at, &value);
  assert_non_null(why);
  assert_non_null(strstr(why, "more than 64 immediates"));
  free(code);
}

/* The same programs in a model: the session refuses it at load (shape
 * inference, before placement: no device needed), naming the node and the
 * attribute. */
static void test_hostile_model(void** state) {
  (void)state;
  for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
    const Bad* b = &bads[i];
    if (b->n_in > MAX_IN) continue;
    Case c = {.label = b->label, .n_in = (int)b->n_in};
    for (size_t j = 0; j < b->n_in; j++) {
      c.rank[j] = 1;
      c.dims[j][0] = 4;
    }
    const float imm[2] = {1.0f, 2.0f};
    const int64_t yd[1] = {4};
    uint8_t* bytes = NULL;
    size_t len = 0;
    build(&c, b->n_code ? b->code : NULL, b->n_code, imm, b->n_imm, yd, 1, &bytes, &len);
    OnyxSession* s = NULL;
    OnyxStatus* st = open_session(bytes, len, false, &s);
    if (!st) fail_msg("%s: the session accepted the program", b->label);
    const char* msg = onyx_status_message(st);
    if (!strstr(msg, "'fused'") || !strstr(msg, "FusedElementwise") || !strstr(msg, "'program'") ||
        !strstr(msg, b->why))
      fail_msg("%s: %s", b->label, msg);
    onyx_status_release(st);
    free(bytes);
  }
}

/* The vendor runtimes leak a little each time the provider is unloaded
 * (LeakSanitizer and memcheck report it from the runtime's initializers):
 * the provider stays mapped for the whole process, as in test_gpu.c. */
static int keep_mapped(void** state) {
  (void)state;
  const char* dir = getenv("ONYX_PROVIDER_PATH");
  char path[4096];
  snprintf(path, sizeof path, "%s/libonyx_ep_" GPU_NAME ".so", dir ? dir : ".");
  if (!dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
    return -1;
  }
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_opcodes_agree), cmocka_unit_test(test_hostile_check),
      cmocka_unit_test(test_hostile_model), cmocka_unit_test(test_programs),
      cmocka_unit_test(test_programs_cpu),
  };
  return cmocka_run_group_tests(tests, keep_mapped, NULL);
}
