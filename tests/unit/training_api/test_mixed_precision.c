/* test_mixed_precision.c — mixed-precision training (docs/training.md,
 * "Mixed precision") on the CPU provider:
 * - the artifacts: Casts to float16/bfloat16 exactly around MatMul, Gemm,
 *   Conv and ConvTranspose where the opset's schema takes the type
 *   (inspected in the generated models), float32
 *   parameters as the models' inputs and in the checkpoint, the loss-scale
 *   input and the unscaling Divs;
 * - the first loss of an MLP against a plain-C emulation of the rounding
 *   (inputs and outputs of the listed ops rounded to the format, the rest
 *   in double), within a bound derived from the format's unit roundoff u;
 * - an MLP, a small transformer-like block (MatMul, Softmax,
 *   LayerNormalization) and a Conv + ConvTranspose model trained in
 *   float32, float16 with loss scaling and bfloat16: the losses track the float32 run within 4 u of
 * the loss;
 * - ConvGrad in float16 against the definition's sums in double;
 * - the loss scaler: an overflow skips the step (parameters unchanged, the
 *   scale halved), growth after growth_interval steps, the scaler state
 *   through a checkpoint save and load, scaling by a power of two changing
 *   no gradient bit (accumulation and ClipGradNorm included). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onyx/onyx.h"
#include "onyx/onyx_training.h"
#include "ox_test_models.h"
#include "ox_test_session.h"

/* Unit roundoffs: float16 has 11 significand bits, bfloat16 8. */
#define U_F16  (1.0 / 2048.0)
#define U_BF16 (1.0 / 256.0)

static char* tmp;

static int setup(void** state) {
  (void)state;
  tmp = otm_temp_dir();
  return tmp ? 0 : -1;
}

static int teardown(void** state) {
  (void)state;
  otm_remove_dir(tmp);
  free(tmp);
  return 0;
}

static char* path_in(const char* name) {
  size_t n = strlen(tmp) + strlen(name) + 2;
  char* p = malloc(n);
  snprintf(p, n, "%s/%s", tmp, name);
  return p;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng >> 11) / 9007199254740992.0;
}

static void fill(float* p, size_t n, double lo, double hi) {
  for (size_t i = 0; i < n; i++)
    p[i] = (float)(lo + (hi - lo) * urand());
}

/* x rounded to nearest even with `bits` significand bits (11: float16,
 * 8: bfloat16); float16's subnormals have the spacing 2^-24. */
static double round_to(double x, int bits) {
  if (x == 0 || !isfinite(x)) return x;
  int e;
  frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
  if (bits == 11 && e - 1 < -14) e = -14 + 1;
  double ulp = ldexp(1.0, e - bits);
  double r = nearbyint(x / ulp) * ulp;
  if (bits == 11 && fabs(r) > 65504) return x > 0 ? INFINITY : -INFINITY;
  return r;
}

static OnyxValue* tensor(OnyxElemType t, const int64_t* dims, size_t rank, const void* data,
                         size_t bytes) {
  OnyxValue* v = NULL;
  ots_ok(onyx_value_create_tensor(t, dims, rank, data, bytes, &v));
  return v;
}

static float scalar(const OnyxValue* v) {
  const OnyxTensor* t = onyx_value_tensor(v);
  assert_non_null(t);
  assert_int_equal(onyx_tensor_elem_count(t), 1);
  return *(const float*)onyx_tensor_data(t);
}

/* --- the models ------------------------------------------------------------------------ */

/* MLP: x[N,D] -> MatMul W1[D,H] + b1 -> Relu -> Gemm W2[H,C] + b2 -> y[N,C],
 * cross-entropy against labels[N]. */
enum { N = 8, D = 6, H = 16, C = 4 };
static float W1[D * H], B1[H], W2[H * C], B2[C], X[N * D];
static int64_t LABELS[N];

static void init_mlp(void) {
  fill(W1, D * H, -0.8, 0.8);
  fill(B1, H, -0.2, 0.2);
  fill(W2, H * C, -0.8, 0.8);
  fill(B2, C, -0.2, 0.2);
  fill(X, N * D, -1, 1);
  for (int i = 0; i < N; i++)
    LABELS[i] = i % C;
}

static char* write_mlp(void) {
  char* path = path_in("mlp.onnx");
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){N, D});
  otm_initializer(m, "W1", ONYX_ELEM_FLOAT32, 2, (int64_t[]){D, H}, W1);
  otm_initializer(m, "b1", ONYX_ELEM_FLOAT32, 1, (int64_t[]){H}, B1);
  otm_initializer(m, "W2", ONYX_ELEM_FLOAT32, 2, (int64_t[]){H, C}, W2);
  otm_initializer(m, "b2", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C}, B2);
  otm_node(m, "MatMul", "mm", "x,W1", "xw");
  otm_node(m, "Add", "add", "xw,b1", "pre");
  otm_node(m, "Relu", "relu", "pre", "hid");
  otm_node(m, "Gemm", "gemm", "hid,W2,b2", "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){N, C});
  assert_true(otm_write(m, path));
  otm_free(m);
  return path;
}

/* Transformer-like block: x[B,T,E] -> q, k, v = x Wq, x Wk, x Wv ->
 * Softmax(q k^T * s) v + x -> LayerNormalization(gamma, beta) -> Wo ->
 * y[B,T,C], MSE against a target. s is frozen. */
enum { TB = 2, TT = 4, TE = 8, TC = 4 };
static float WQ[TE * TE], WK[TE * TE], WV[TE * TE], WO[TE * TC], GAMMA[TE], BETA[TE];
static float TX[TB * TT * TE], TY[TB * TT * TC];

static void init_tfm(void) {
  fill(WQ, TE * TE, -0.5, 0.5);
  fill(WK, TE * TE, -0.5, 0.5);
  fill(WV, TE * TE, -0.5, 0.5);
  fill(WO, TE * TC, -0.5, 0.5);
  fill(GAMMA, TE, 0.8, 1.2);
  fill(BETA, TE, -0.1, 0.1);
  fill(TX, TB * TT * TE, -1, 1);
  fill(TY, TB * TT * TC, -1, 1);
}

static char* write_tfm(void) {
  char* path = path_in("tfm.onnx");
  OxTestModel* m = otm_new(17);
  const int64_t xd[3] = {TB, TT, TE};
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 3, xd);
  otm_initializer(m, "Wq", ONYX_ELEM_FLOAT32, 2, (int64_t[]){TE, TE}, WQ);
  otm_initializer(m, "Wk", ONYX_ELEM_FLOAT32, 2, (int64_t[]){TE, TE}, WK);
  otm_initializer(m, "Wv", ONYX_ELEM_FLOAT32, 2, (int64_t[]){TE, TE}, WV);
  otm_initializer(m, "Wo", ONYX_ELEM_FLOAT32, 2, (int64_t[]){TE, TC}, WO);
  otm_initializer(m, "gamma", ONYX_ELEM_FLOAT32, 1, (int64_t[]){TE}, GAMMA);
  otm_initializer(m, "beta", ONYX_ELEM_FLOAT32, 1, (int64_t[]){TE}, BETA);
  otm_initializer(m, "s", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){0.35355339f});
  otm_node(m, "MatMul", "mq", "x,Wq", "q");
  otm_node(m, "MatMul", "mk", "x,Wk", "k");
  otm_node(m, "MatMul", "mv", "x,Wv", "v");
  otm_attr_ints(otm_node(m, "Transpose", "kt", "k", "kT"), "perm", 3, (int64_t[]){0, 2, 1});
  otm_node(m, "MatMul", "ms", "q,kT", "sc");
  otm_node(m, "Mul", "scale", "sc,s", "scs");
  otm_attr_int(otm_node(m, "Softmax", "sm", "scs", "p"), "axis", -1);
  otm_node(m, "MatMul", "ma", "p,v", "att");
  otm_node(m, "Add", "res", "att,x", "r");
  OxTestNode* ln = otm_node(m, "LayerNormalization", "ln", "r,gamma,beta", "h");
  otm_attr_int(ln, "axis", -1);
  otm_attr_float(ln, "epsilon", 1e-5f);
  otm_node(m, "MatMul", "mo", "h,Wo", "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){TB, TT, TC});
  assert_true(otm_write(m, path));
  otm_free(m);
  return path;
}

/* Convolutions: x[CN,1,6,6] -> Conv Wc[3,1,3,3] + bc (pads 1) -> Relu ->
 * ConvTranspose Wt[3,1,2,2] + bt (strides 2) -> y[CN,1,12,12], MSE. */
enum { CN = 2 };
static float WC[3 * 9], BC[3], WT[3 * 4], BT[1], CX[CN * 36], CY[CN * 144];

static void init_conv(void) {
  fill(WC, 27, -0.5, 0.5);
  fill(BC, 3, -0.1, 0.1);
  fill(WT, 12, -0.5, 0.5);
  fill(BT, 1, -0.1, 0.1);
  fill(CX, CN * 36, -1, 1);
  fill(CY, CN * 144, -0.5, 0.5);
}

static char* write_conv(void) {
  char* path = path_in("conv.onnx");
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 4, (int64_t[]){CN, 1, 6, 6});
  otm_initializer(m, "Wc", ONYX_ELEM_FLOAT32, 4, (int64_t[]){3, 1, 3, 3}, WC);
  otm_initializer(m, "bc", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, BC);
  otm_initializer(m, "Wt", ONYX_ELEM_FLOAT32, 4, (int64_t[]){3, 1, 2, 2}, WT);
  otm_initializer(m, "bt", ONYX_ELEM_FLOAT32, 1, (int64_t[]){1}, BT);
  OxTestNode* c = otm_node(m, "Conv", "conv", "x,Wc,bc", "c");
  otm_attr_ints(c, "pads", 4, (int64_t[]){1, 1, 1, 1});
  otm_node(m, "Relu", "relu", "c", "r");
  OxTestNode* t = otm_node(m, "ConvTranspose", "convt", "r,Wt,bt", "y");
  otm_attr_ints(t, "strides", 2, (int64_t[]){2, 2});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 4, (int64_t[]){CN, 1, 12, 12});
  assert_true(otm_write(m, path));
  otm_free(m);
  return path;
}

/* --- artifacts and sessions ------------------------------------------------------------ */

typedef struct ArtOpts {
  int32_t mp;      /* OnyxMixedPrecision */
  int32_t scaling; /* -1 default */
  int32_t clip;
  float lr;
  OnyxLossKind loss;
  OnyxOptimizerKind optimizer;
  const char* frozen; /* one frozen initializer or NULL */
} ArtOpts;

static char* make_art(const char* model, const char* name, ArtOpts a) {
  OnyxTrainingArtifactsOptions o;
  onyx_training_artifacts_options_init(&o);
  o.loss = a.loss;
  o.optimizer = a.optimizer;
  o.learning_rate = a.lr;
  o.mixed_precision = a.mp;
  o.loss_scaling = a.scaling;
  o.clip_grad_norm = a.clip;
  o.weight_decay = 0;
  if (a.frozen) {
    o.frozen = &a.frozen;
    o.frozen_count = 1;
  }
  char* dir = path_in(name);
  ots_ok(onyx_training_artifacts_generate(model, &o, dir));
  return dir;
}

static OnyxTrainingSession* open_ts(const char* dir, const char* ckdir, OnyxCheckpoint** ck) {
  char* cdir = NULL;
  if (!ckdir) {
    size_t n = strlen(dir) + 16;
    cdir = malloc(n);
    snprintf(cdir, n, "%s/checkpoint", dir);
  }
  ots_ok(onyx_checkpoint_load(ckdir ? ckdir : cdir, ck));
  free(cdir);
  /* ONYX_TEST_TRAIN_CONFIG: a providers' JSON for the sessions (gpuemu
   * first: the trained state in device memory, the loss scale bound there). */
  const char* cfg = getenv("ONYX_TEST_TRAIN_CONFIG");
  OnyxSessionOptions* o = NULL;
  if (cfg && *cfg) {
    ots_ok(onyx_session_options_create(&o));
    ots_ok(onyx_session_options_load_config(o, cfg));
  }
  OnyxTrainingSession* ts = NULL;
  ots_ok(onyx_training_session_create(o, *ck, dir, &ts));
  onyx_session_options_release(o);
  return ts;
}

static void mlp_batch(OnyxValue* v[2], float xscale) {
  float x[N * D];
  for (int i = 0; i < N * D; i++)
    x[i] = X[i] * xscale;
  v[0] = tensor(ONYX_ELEM_FLOAT32, (int64_t[]){N, D}, 2, x, sizeof x);
  v[1] = tensor(ONYX_ELEM_INT64, (int64_t[]){N}, 1, LABELS, sizeof LABELS);
}

static void tfm_batch(OnyxValue* v[2]) {
  v[0] = tensor(ONYX_ELEM_FLOAT32, (int64_t[]){TB, TT, TE}, 3, TX, sizeof TX);
  v[1] = tensor(ONYX_ELEM_FLOAT32, (int64_t[]){TB, TT, TC}, 3, TY, sizeof TY);
}

static void conv_batch(OnyxValue* v[2]) {
  v[0] = tensor(ONYX_ELEM_FLOAT32, (int64_t[]){CN, 1, 6, 6}, 4, CX, sizeof CX);
  v[1] = tensor(ONYX_ELEM_FLOAT32, (int64_t[]){CN, 1, 12, 12}, 4, CY, sizeof CY);
}

/* One train step (loss returned), then the optimizer step and a reset. */
static float step(OnyxTrainingSession* ts, OnyxValue* const in[2]) {
  OnyxValue* loss = NULL;
  ots_ok(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 2, &loss));
  float l = scalar(loss);
  onyx_value_release(loss);
  ots_ok(onyx_training_session_optimizer_step(ts));
  ots_ok(onyx_training_session_lazy_reset_grad(ts));
  return l;
}

/* Copies a checkpoint parameter (float32, checked) into out[n]. */
static void get_param(const OnyxCheckpoint* ck, const char* name, float* out, size_t n) {
  OnyxValue* v = NULL;
  ots_ok(onyx_checkpoint_get_parameter(ck, name, &v));
  const OnyxTensor* t = onyx_value_tensor(v);
  assert_int_equal(onyx_tensor_elem_type(t), ONYX_ELEM_FLOAT32);
  assert_int_equal(onyx_tensor_elem_count(t), n);
  memcpy(out, onyx_tensor_data(t), n * sizeof *out);
  onyx_value_release(v);
}

/* --- the generated models -------------------------------------------------------------- */

static Onnx__ModelProto* read_model(const char* dir, const char* file) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE* f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t* bytes = malloc((size_t)len);
  assert_int_equal(fread(bytes, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  Onnx__ModelProto* m = onnx__model_proto__unpack(NULL, (size_t)len, bytes);
  free(bytes);
  assert_non_null(m);
  return m;
}

static const Onnx__NodeProto* producer(const Onnx__GraphProto* g, const char* value) {
  for (size_t i = 0; i < g->n_node; i++)
    for (size_t k = 0; k < g->node[i]->n_output; k++)
      if (!strcmp(g->node[i]->output[k], value)) return g->node[i];
  return NULL;
}

static size_t consumers(const Onnx__GraphProto* g, const char* value,
                        const Onnx__NodeProto** first) {
  size_t n = 0;
  for (size_t i = 0; i < g->n_node; i++)
    for (size_t k = 0; k < g->node[i]->n_input; k++)
      if (!strcmp(g->node[i]->input[k], value)) {
        if (!n && first) *first = g->node[i];
        n++;
      }
  return n;
}

static int64_t cast_to(const Onnx__NodeProto* n) {
  if (!n || strcmp(n->op_type, "Cast")) return -1;
  for (size_t a = 0; a < n->n_attribute; a++)
    if (!strcmp(n->attribute[a]->name, "to")) return n->attribute[a]->i;
  return -1;
}

static bool listed(const Onnx__NodeProto* n) {
  return !strcmp(n->op_type, "MatMul") || !strcmp(n->op_type, "Gemm") ||
         !strcmp(n->op_type, "Conv") || !strcmp(n->op_type, "ConvTranspose");
}

static int32_t input_type(const Onnx__GraphProto* g, const char* name) {
  for (size_t i = 0; i < g->n_input; i++)
    if (!strcmp(g->input[i]->name, name)) return g->input[i]->type->tensor_type->elem_type;
  return -1;
}

/* Every listed op reads only Casts to lp (of float32 values that are not
 * themselves Casts to lp) and each output goes to exactly one Cast to
 * float32; no other Cast exists; there are `listed_ops` of them. */
static void check_casts(const Onnx__GraphProto* g, int64_t lp, size_t listed_ops) {
  size_t n_listed = 0, n_casts = 0, n_expected = 0;
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto* n = g->node[i];
    if (!strcmp(n->op_type, "Cast")) n_casts++;
    if (!listed(n)) continue;
    n_listed++;
    for (size_t k = 0; k < n->n_input; k++) {
      const Onnx__NodeProto* c = producer(g, n->input[k]);
      assert_non_null(c);
      assert_int_equal(cast_to(c), lp);
      assert_int_equal(consumers(g, n->input[k], NULL), 1);
      const Onnx__NodeProto* src = producer(g, c->input[0]);
      assert_true(cast_to(src) != lp);
      if (!src) assert_int_equal(input_type(g, c->input[0]), ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
      n_expected++;
    }
    for (size_t k = 0; k < n->n_output; k++) {
      const Onnx__NodeProto* c = NULL;
      assert_int_equal(consumers(g, n->output[k], &c), 1);
      assert_int_equal(cast_to(c), ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
      n_expected++;
    }
  }
  assert_int_equal(n_listed, listed_ops);
  assert_int_equal(n_casts, n_expected);
  /* Softmax, LayerNormalization and the loss read no low-precision value. */
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto* n = g->node[i];
    if (listed(n) || !strcmp(n->op_type, "Cast")) continue;
    for (size_t k = 0; k < n->n_input; k++)
      assert_true(cast_to(producer(g, n->input[k])) != lp);
  }
}

static const Onnx__NodeProto* find_op(const Onnx__GraphProto* g, const char* op, size_t* count) {
  const Onnx__NodeProto* f = NULL;
  *count = 0;
  for (size_t i = 0; i < g->n_node; i++)
    if (!strcmp(g->node[i]->op_type, op)) {
      if (!f) f = g->node[i];
      (*count)++;
    }
  return f;
}

static void test_casts(void** state) {
  (void)state;
  init_tfm();
  char* model = write_tfm();
  static const char* const params[] = {"Wq", "Wk", "Wv", "Wo", "gamma", "beta"};
  for (int pass = 0; pass < 2; pass++) {
    bool f16 = pass == 0;
    ArtOpts a = {.mp = f16 ? ONYX_MIXED_PRECISION_FLOAT16 : ONYX_MIXED_PRECISION_BFLOAT16,
                 .scaling = -1,
                 .lr = 0.1f,
                 .loss = ONYX_LOSS_MSE,
                 .optimizer = ONYX_OPTIMIZER_SGD,
                 .frozen = "s"};
    char* dir = make_art(model, f16 ? "casts16" : "castsbf", a);
    int64_t lp =
        f16 ? ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 : ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
    for (int which = 0; which < 2; which++) {
      Onnx__ModelProto* m = read_model(dir, which ? "eval_model.onnx" : "training_model.onnx");
      const Onnx__GraphProto* g = m->graph;
      check_casts(g, lp, 6);
      /* The parameters are float32 inputs. */
      for (size_t i = 0; i < sizeof params / sizeof *params; i++)
        assert_int_equal(input_type(g, params[i]), ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
      size_t count = 0;
      if (which == 0) {
        /* float16: the Gradient node differentiates loss * loss_scale and a
         * Div per parameter unscales; bfloat16 scales nothing. */
        const Onnx__NodeProto* gr = find_op(g, "Gradient", &count);
        assert_int_equal(count, 1);
        const ProtobufCBinaryData* y = NULL;
        for (size_t k = 0; k < gr->n_attribute; k++)
          if (!strcmp(gr->attribute[k]->name, "y")) y = &gr->attribute[k]->s;
        assert_non_null(y);
        assert_int_equal(input_type(g, "loss_scale"),
                         f16 ? ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT : -1);
        const char* want = f16 ? "loss.scaled" : "loss";
        assert_int_equal(y->len, strlen(want));
        assert_memory_equal(y->data, want, y->len);
        find_op(g, "Div", &count);
        assert_int_equal(count, f16 ? 6 : 0);
      } else {
        assert_int_equal(input_type(g, "loss_scale"), -1);
      }
      onnx__model_proto__free_unpacked(m, NULL);
    }
    /* The checkpoint's parameters are float32. */
    OnyxCheckpoint* ck = NULL;
    char ckdir[1024];
    snprintf(ckdir, sizeof ckdir, "%s/checkpoint", dir);
    ots_ok(onyx_checkpoint_load(ckdir, &ck));
    float buf[TE * TE];
    get_param(ck, "Wq", buf, TE * TE);
    assert_memory_equal(buf, WQ, sizeof WQ);
    onyx_checkpoint_release(ck);
    free(dir);
  }
  /* The MLP: MatMul (2 inputs) and Gemm (3, the bias too). */
  init_mlp();
  char* mlp = write_mlp();
  char* dir = make_art(mlp, "castsmlp",
                       (ArtOpts){.mp = ONYX_MIXED_PRECISION_BFLOAT16, .scaling = -1, .lr = 0.1f});
  Onnx__ModelProto* m = read_model(dir, "training_model.onnx");
  check_casts(m->graph, ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16, 2);
  size_t count = 0;
  find_op(m->graph, "Cast", &count);
  assert_int_equal(count, 2 + 1 + 3 + 1);
  onnx__model_proto__free_unpacked(m, NULL);
  free(dir);
  free(mlp);
  free(model);
  /* Conv and ConvTranspose (with their biases) in float16; ai.onnx opset 17
   * has no bfloat16 Conv or ConvTranspose (opset 22 does), so in bfloat16
   * they stay float32. */
  init_conv();
  char* conv = write_conv();
  for (int pass = 0; pass < 2; pass++) {
    dir = make_art(conv, pass ? "castsconvbf" : "castsconv16",
                   (ArtOpts){.mp = pass ? 2 : 1, .scaling = -1, .lr = 0.1f, .loss = ONYX_LOSS_MSE});
    m = read_model(dir, "training_model.onnx");
    find_op(m->graph, "Cast", &count);
    if (pass) {
      assert_int_equal(count, 0);
    } else {
      check_casts(m->graph, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16, 2);
      assert_int_equal(count, 2 * (3 + 1));
    }
    onnx__model_proto__free_unpacked(m, NULL);
    free(dir);
  }
  free(conv);
}

/* --- the first loss against an emulation of the rounding -------------------------------- */

/* The MLP's cross-entropy with the listed ops' inputs and outputs rounded
 * to `bits` significand bits (bits 0: no rounding); *ymax and *hmax get the
 * largest |logit| and |x W1|. */
static double emulated_loss(int bits, double* ymax, double* hmax) {
#define R(v) (bits ? round_to((v), bits) : (double)(v))
  double sum = 0;
  *ymax = *hmax = 0;
  for (int n = 0; n < N; n++) {
    double hid[H], y[C];
    for (int j = 0; j < H; j++) {
      double s = 0;
      for (int d = 0; d < D; d++)
        s += R(X[n * D + d]) * R(W1[d * H + j]);
      s = R(s);
      *hmax = fmax(*hmax, fabs(s));
      s += B1[j];
      hid[j] = s > 0 ? (float)s : 0;
    }
    for (int c = 0; c < C; c++) {
      double s = R(B2[c]);
      for (int j = 0; j < H; j++)
        s += R(hid[j]) * R(W2[j * C + c]);
      y[c] = R(s);
      *ymax = fmax(*ymax, fabs(y[c]));
    }
    double mx = y[0], z = 0;
    for (int c = 1; c < C; c++)
      mx = fmax(mx, y[c]);
    for (int c = 0; c < C; c++)
      z += exp(y[c] - mx);
    sum += mx + log(z) - y[LABELS[n]];
  }
  return sum / N;
#undef R
}

static void test_first_loss(void** state) {
  (void)state;
  init_mlp();
  char* model = write_mlp();
  double w2max = 0; /* max over classes of sum_j |W2[j][c]| */
  for (int c = 0; c < C; c++) {
    double s = 0;
    for (int j = 0; j < H; j++)
      s += fabs(W2[j * C + c]);
    w2max = fmax(w2max, s);
  }
  for (int pass = 0; pass < 2; pass++) {
    bool f16 = pass == 0;
    int bits = f16 ? 11 : 8;
    double u = f16 ? U_F16 : U_BF16;
    char* dir = make_art(model, f16 ? "first16" : "firstbf",
                         (ArtOpts){.mp = f16 ? 1 : 2, .scaling = -1, .lr = 0.1f});
    OnyxCheckpoint* ck = NULL;
    OnyxTrainingSession* ts = open_ts(dir, NULL, &ck);
    OnyxValue* in[2];
    mlp_batch(in, 1.0f);
    OnyxValue* loss = NULL;
    ots_ok(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 2, &loss));
    double got = scalar(loss);
    onyx_value_release(loss);
    ots_ok(onyx_training_session_eval_step(ts, (const OnyxValue* const*)in, 2, &loss));
    double got_eval = scalar(loss);
    onyx_value_release(loss);
    onyx_values_release(in, 2);
    double ymax, hmax, ymax32, hmax32;
    double want = emulated_loss(bits, &ymax, &hmax);
    double exact = emulated_loss(0, &ymax32, &hmax32);
    /* The provider accumulates in float32 where the emulation uses double,
     * so a sum near a rounding midpoint may round to the neighbour: one
     * ulp (2u relative) of a logit, or of a hidden value, which moves a
     * logit by at most 2u |h|max sum_j |W2|. Cross-entropy moves by at
     * most 2 per unit of a logit row's change (its gradient's L1 norm). */
    double tol = 2 * (2 * u * ymax + 2 * u * hmax * w2max) + 1e-5;
    assert_true(fabs(got - want) <= tol);
    assert_true(fabs(got_eval - want) <= tol);
    /* And the rounding is there: the float32 loss differs by more than the
     * float32 noise. */
    assert_true(fabs(got - exact) > 1e-5);
    onyx_training_session_release(ts);
    onyx_checkpoint_release(ck);
    free(dir);
  }
  free(model);
}

/* --- training tracks float32 ---------------------------------------------------------- */

enum { STEPS = 20 };

/* The models trained: the MLP (cross-entropy), the transformer-like block
 * and the convolutions (MSE). */
enum { MLP = 0, TFM = 1, CONV = 2 };
static const char* const kind_names[] = {"mlp", "tfm", "conv"};

/* Losses of STEPS SGD steps of a model in the given precision. */
static void train_losses(const char* model, int kind, int32_t mp, float losses[STEPS]) {
  ArtOpts a = {.mp = mp,
               .scaling = -1,
               .lr = kind == MLP ? 0.2f : 0.05f,
               .loss = kind == MLP ? ONYX_LOSS_CROSS_ENTROPY : ONYX_LOSS_MSE,
               .optimizer = ONYX_OPTIMIZER_SGD,
               .frozen = kind == TFM ? "s" : NULL};
  char name[32];
  snprintf(name, sizeof name, "%s%d", kind_names[kind], (int)mp);
  char* dir = make_art(model, name, a);
  OnyxCheckpoint* ck = NULL;
  OnyxTrainingSession* ts = open_ts(dir, NULL, &ck);
  OnyxValue* in[2];
  if (kind == TFM)
    tfm_batch(in);
  else if (kind == CONV)
    conv_batch(in);
  else
    mlp_batch(in, 1.0f);
  for (int s = 0; s < STEPS; s++)
    losses[s] = step(ts, in);
  onyx_values_release(in, 2);
  assert_int_equal(onyx_checkpoint_step(ck), STEPS);
  assert_int_equal(onyx_training_session_skipped_steps(ts), 0);
  /* The master weights are float32 in the checkpoint, saved and loaded. */
  char* saved = path_in("saved");
  ots_ok(onyx_checkpoint_save(ck, saved, 1));
  OnyxCheckpoint* back = NULL;
  ots_ok(onyx_checkpoint_load(saved, &back));
  for (size_t i = 0; i < onyx_checkpoint_parameter_count(back); i++) {
    OnyxValue* v = NULL;
    ots_ok(onyx_checkpoint_get_parameter(back, onyx_checkpoint_parameter_name(back, i), &v));
    assert_int_equal(onyx_tensor_elem_type(onyx_value_tensor(v)), ONYX_ELEM_FLOAT32);
    onyx_value_release(v);
  }
  onyx_checkpoint_release(back);
  free(saved);
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(dir);
}

/* The rounding of one forward pass moves the loss by well under u here
 * (test_first_loss bounds it by a few u of the logits; the roundings of
 * many elements mostly cancel in the mean), and over the steps the
 * gradients' relative error of a few u moves the parameters apart by
 * lr * steps * (a few u) * |g|, which SGD's contraction toward the same
 * minimum keeps from adding up: 4 u of max(1, loss) bounds both for these
 * models and 20 steps (the runs stay within a tenth of it). */
static void check_tracks(const float l32[STEPS], const float lp[STEPS], double u) {
  for (int s = 0; s < STEPS; s++) {
    double tol = 4 * u * fmax(1.0, fabs(l32[s]));
    if (fabs((double)lp[s] - l32[s]) > tol)
      fail_msg("step %d: loss %.7g, float32 %.7g (tolerance %.3g)", s, (double)lp[s],
               (double)l32[s], tol);
  }
  /* And it trains. */
  assert_true(lp[STEPS - 1] < 0.9 * lp[0]);
}

static void test_tracks_float32(void** state) {
  (void)state;
  for (int kind = MLP; kind <= CONV; kind++) {
    char* model = NULL;
    if (kind == TFM) {
      init_tfm();
      model = write_tfm();
    } else if (kind == CONV) {
      init_conv();
      model = write_conv();
    } else {
      init_mlp();
      model = write_mlp();
    }
    float l32[STEPS], l16[STEPS], lbf[STEPS];
    train_losses(model, kind, ONYX_MIXED_PRECISION_NONE, l32);
    train_losses(model, kind, ONYX_MIXED_PRECISION_FLOAT16, l16);
    train_losses(model, kind, ONYX_MIXED_PRECISION_BFLOAT16, lbf);
    check_tracks(l32, l16, U_F16);
    check_tracks(l32, lbf, U_BF16);
    free(model);
  }
}

/* --- the loss scaler ------------------------------------------------------------------- */

static void test_scaler_overflow(void** state) {
  (void)state;
  init_mlp();
  char* model = write_mlp();
  char* dir = make_art(model, "overflow", (ArtOpts){.mp = 1, .scaling = -1, .lr = 0.1f});
  OnyxCheckpoint* ck = NULL;
  OnyxTrainingSession* ts = open_ts(dir, NULL, &ck);
  assert_float_equal(onyx_training_session_get_loss_scale(ts), 65536.0f, 0);
  float before[D * H], after[D * H];
  get_param(ck, "W1", before, D * H);
  /* x * 1e5: x W1 exceeds float16's 65504, the loss is not finite. */
  OnyxValue* in[2];
  mlp_batch(in, 1e5f);
  OnyxValue* loss = NULL;
  ots_ok(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 2, &loss));
  assert_false(isfinite(scalar(loss)));
  onyx_value_release(loss);
  ots_ok(onyx_training_session_optimizer_step(ts));
  ots_ok(onyx_training_session_lazy_reset_grad(ts));
  onyx_values_release(in, 2);
  get_param(ck, "W1", after, D * H);
  assert_memory_equal(before, after, sizeof before);
  assert_int_equal(onyx_checkpoint_step(ck), 0);
  assert_int_equal(onyx_training_session_skipped_steps(ts), 1);
  assert_float_equal(onyx_training_session_get_loss_scale(ts), 32768.0f, 0);
  /* A finite loss whose scaled gradients overflow: the scale 2^120 times
   * the loss gradient overflows float16 in the backward pass. */
  ots_ok(onyx_training_session_set_loss_scaler(ts, 0x1p120f, 2.0f, 0.5f, 2000));
  mlp_batch(in, 1.0f);
  ots_ok(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 2, &loss));
  assert_true(isfinite(scalar(loss)));
  onyx_value_release(loss);
  ots_ok(onyx_training_session_optimizer_step(ts));
  ots_ok(onyx_training_session_lazy_reset_grad(ts));
  get_param(ck, "W1", after, D * H);
  assert_memory_equal(before, after, sizeof before);
  assert_int_equal(onyx_training_session_skipped_steps(ts), 2);
  assert_float_equal(onyx_training_session_get_loss_scale(ts), 0x1p119f, 0);
  /* Back to a sane scale: the step is taken. */
  ots_ok(onyx_training_session_set_loss_scaler(ts, 1024.0f, 2.0f, 0.5f, 2000));
  step(ts, in);
  get_param(ck, "W1", after, D * H);
  assert_memory_not_equal(before, after, sizeof before);
  assert_int_equal(onyx_checkpoint_step(ck), 1);
  assert_int_equal(onyx_training_session_skipped_steps(ts), 2);
  onyx_values_release(in, 2);
  /* Bad settings, and a session without a scaler. */
  ots_expect_error(onyx_training_session_set_loss_scaler(ts, 0, 2, 0.5f, 1), ONYX_INVALID_ARGUMENT,
                   "scale 0");
  ots_expect_error(onyx_training_session_set_loss_scaler(ts, 1, 2, 0.5f, 0), ONYX_INVALID_ARGUMENT,
                   "growth_interval 0");
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(dir);
  dir = make_art(model, "noscale", (ArtOpts){.mp = 2, .scaling = -1, .lr = 0.1f});
  ts = open_ts(dir, NULL, &ck);
  assert_float_equal(onyx_training_session_get_loss_scale(ts), 0.0f, 0);
  ots_expect_error(onyx_training_session_set_loss_scaler(ts, 1, 2, 0.5f, 1), ONYX_INVALID_ARGUMENT,
                   "without loss_scaling");
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(dir);
  free(model);
}

static void test_scaler_growth_and_checkpoint(void** state) {
  (void)state;
  init_mlp();
  char* model = write_mlp();
  char* dir = make_art(model, "growth", (ArtOpts){.mp = 1, .scaling = -1, .lr = 0.05f});
  OnyxCheckpoint* ck = NULL;
  OnyxTrainingSession* ts = open_ts(dir, NULL, &ck);
  ots_ok(onyx_training_session_set_loss_scaler(ts, 256.0f, 2.0f, 0.5f, 3));
  OnyxValue* in[2];
  mlp_batch(in, 1.0f);
  step(ts, in);
  step(ts, in);
  assert_float_equal(onyx_training_session_get_loss_scale(ts), 256.0f, 0);
  assert_int_equal(onyx_training_session_loss_scale_growth_tracker(ts), 2);
  step(ts, in);
  assert_float_equal(onyx_training_session_get_loss_scale(ts), 512.0f, 0);
  assert_int_equal(onyx_training_session_loss_scale_growth_tracker(ts), 0);
  step(ts, in);
  assert_int_equal(onyx_training_session_loss_scale_growth_tracker(ts), 1);
  /* The scaler's state and settings through a checkpoint. */
  char* saved = path_in("growth_ck");
  ots_ok(onyx_checkpoint_save(ck, saved, 1));
  OnyxCheckpoint* ck2 = NULL;
  OnyxTrainingSession* ts2 = open_ts(dir, saved, &ck2);
  assert_float_equal(onyx_training_session_get_loss_scale(ts2), 512.0f, 0);
  assert_int_equal(onyx_training_session_loss_scale_growth_tracker(ts2), 1);
  step(ts2, in);
  step(ts2, in);
  assert_float_equal(onyx_training_session_get_loss_scale(ts2), 1024.0f, 0);
  /* The same two steps in the first session: the same parameters. */
  step(ts, in);
  step(ts, in);
  float a[H * C], b[H * C];
  get_param(ck, "W2", a, H * C);
  get_param(ck2, "W2", b, H * C);
  assert_memory_equal(a, b, sizeof a);
  onyx_values_release(in, 2);
  onyx_training_session_release(ts2);
  onyx_checkpoint_release(ck2);
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(saved);
  free(dir);
  free(model);
}

/* Scaling by a power of two is exact in binary floating point while
 * nothing underflows or overflows, so the bfloat16 gradients (float32's
 * exponent range: no underflow here; float16's subnormals would round
 * differently, which is what scaling is for) scaled by 2^10 and unscaled
 * equal those without scaling bit for bit: with two accumulated train
 * steps, and through ClipGradNorm, whose norm is that of the unscaled
 * gradients. */
static void test_scaling_exact(void** state) {
  (void)state;
  init_mlp();
  char* model = write_mlp();
  float w[2][D * H];
  float norm[2];
  for (int pass = 0; pass < 2; pass++) {
    char* dir = make_art(model, pass ? "exact_s" : "exact_n",
                         (ArtOpts){.mp = 2, .scaling = pass, .clip = 1, .lr = 0.1f});
    OnyxCheckpoint* ck = NULL;
    OnyxTrainingSession* ts = open_ts(dir, NULL, &ck);
    if (pass) ots_ok(onyx_training_session_set_loss_scaler(ts, 1024.0f, 2.0f, 0.5f, 2000));
    ots_ok(onyx_training_session_set_grad_clip_norm(ts, 0.05f));
    OnyxValue* in[2];
    mlp_batch(in, 1.0f);
    ots_ok(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 2, NULL));
    onyx_values_release(in, 2);
    mlp_batch(in, -0.5f);
    ots_ok(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 2, NULL));
    onyx_values_release(in, 2);
    ots_ok(onyx_training_session_optimizer_step(ts));
    norm[pass] = onyx_training_session_last_grad_norm(ts);
    get_param(ck, "W1", w[pass], D * H);
    onyx_training_session_release(ts);
    onyx_checkpoint_release(ck);
    free(dir);
  }
  assert_true(norm[0] > 0.05f); /* the clipping acted */
  assert_float_equal(norm[0], norm[1], 0);
  assert_memory_equal(w[0], w[1], sizeof w[0]);
  free(model);
}

/* --- ConvGrad in float16 ------------------------------------------------------------ */

/* The float16 bits of x, which is exactly a float16 number (round_to). */
static uint16_t f16_bits(double x) {
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  double a = fabs(x);
  if (a == 0) return sign;
  int e;
  frexp(a, &e);
  int E = e - 1; /* a = 1.f * 2^E */
  if (E < -14) return (uint16_t)(sign | (uint16_t)nearbyint(a / 0x1p-24));
  return (uint16_t)(sign | (uint16_t)((E + 15) << 10) |
                    (uint16_t)nearbyint((ldexp(a, -E) - 1) * 1024));
}

static double f16_value(uint16_t h) {
  int E = (h >> 10) & 31, f = h & 1023;
  double v = E ? ldexp(1 + f / 1024.0, E - 15) : ldexp(f, -24);
  return (h & 0x8000) ? -v : v;
}

/* ConvGrad on float16 with groups, strides, dilations and uneven pads
 * against the definition's sums in double over the same float16 inputs:
 * each output within half a float16 ulp of the reference (its one
 * rounding) plus the float32 sums' error, 2^-20 of the sum of the
 * magnitudes of its terms. */
enum { GN = 2, GC = 4, GG = 2, GM = 6, GH = 5, GW = 6, GKH = 3, GKW = 2, GOH = 2, GOW = 5 };

static void test_conv_grad_f16(void** state) {
  (void)state;
  static double x[GN * GC * GH * GW], w[GM * (GC / GG) * GKH * GKW], dy[GN * GM * GOH * GOW];
  static uint16_t hx[sizeof x / sizeof *x], hw[sizeof w / sizeof *w], hdy[sizeof dy / sizeof *dy];
  double* arrays[3] = {x, w, dy};
  uint16_t* bits[3] = {hx, hw, hdy};
  size_t counts[3] = {sizeof x / sizeof *x, sizeof w / sizeof *w, sizeof dy / sizeof *dy};
  for (int a = 0; a < 3; a++)
    for (size_t i = 0; i < counts[a]; i++) {
      arrays[a][i] = round_to(urand() * 2 - 1, 11);
      bits[a][i] = f16_bits(arrays[a][i]);
      assert_true(f16_value(bits[a][i]) == arrays[a][i]);
    }
  const int64_t sh = 2, sw = 1, dh = 1, dw = 2, pt = 1, pl = 0;
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "com.onyx.training", 1);
  otm_input(m, "dY", ONYX_ELEM_FLOAT16, 4, (int64_t[]){GN, GM, GOH, GOW});
  otm_input(m, "X", ONYX_ELEM_FLOAT16, 4, (int64_t[]){GN, GC, GH, GW});
  otm_input(m, "W", ONYX_ELEM_FLOAT16, 4, (int64_t[]){GM, GC / GG, GKH, GKW});
  OxTestNode* n = otm_node(m, "ConvGrad", "cg", "dY,X,W", "dX,dW,dB");
  otm_node_domain(n, "com.onyx.training");
  otm_attr_int(n, "group", GG);
  otm_attr_ints(n, "strides", 2, (int64_t[]){sh, sw});
  otm_attr_ints(n, "dilations", 2, (int64_t[]){dh, dw});
  otm_attr_ints(n, "pads", 4, (int64_t[]){pt, pl, 0, 1});
  otm_output(m, "dX", ONYX_ELEM_FLOAT16, 4, (int64_t[]){GN, GC, GH, GW});
  otm_output(m, "dW", ONYX_ELEM_FLOAT16, 4, (int64_t[]){GM, GC / GG, GKH, GKW});
  otm_output(m, "dB", ONYX_ELEM_FLOAT16, 1, (int64_t[]){GM});
  OnyxValue* in[3] = {
      tensor(ONYX_ELEM_FLOAT16, (int64_t[]){GN, GM, GOH, GOW}, 4, hdy, sizeof hdy),
      tensor(ONYX_ELEM_FLOAT16, (int64_t[]){GN, GC, GH, GW}, 4, hx, sizeof hx),
      tensor(ONYX_ELEM_FLOAT16, (int64_t[]){GM, GC / GG, GKH, GKW}, 4, hw, sizeof hw)};
  const char* in_names[3] = {"dY", "X", "W"};
  const char* out_names[3] = {"dX", "dW", "dB"};
  OnyxValue* out[3] = {0};
  ots_ok(ots_run_values(m, in_names, (const OnyxValue* const*)in, 3, out_names, 3, out));
  otm_free(m);
  /* The reference sums and the sums of the terms' magnitudes. */
  static double rx[sizeof x / sizeof *x], ax[sizeof x / sizeof *x];
  static double rw[sizeof w / sizeof *w], aw[sizeof w / sizeof *w];
  double rb[GM] = {0}, ab[GM] = {0};
  const int cg = GC / GG, mg = GM / GG;
  for (int b = 0; b < GN; b++)
    for (int mm = 0; mm < GM; mm++)
      for (int oh = 0; oh < GOH; oh++)
        for (int ow = 0; ow < GOW; ow++) {
          double g = dy[((b * GM + mm) * GOH + oh) * GOW + ow];
          rb[mm] += g;
          ab[mm] += fabs(g);
          for (int c = 0; c < cg; c++)
            for (int kh = 0; kh < GKH; kh++)
              for (int kw = 0; kw < GKW; kw++) {
                int64_t ih = oh * sh - pt + kh * dh, iw = ow * sw - pl + kw * dw;
                if (ih < 0 || ih >= GH || iw < 0 || iw >= GW) continue;
                size_t xi = (size_t)(((b * GC + mm / mg * cg + c) * GH + ih) * GW + iw);
                size_t wi = (size_t)(((mm * cg + c) * GKH + kh) * GKW + kw);
                rx[xi] += g * w[wi];
                ax[xi] += fabs(g * w[wi]);
                rw[wi] += g * x[xi];
                aw[wi] += fabs(g * x[xi]);
              }
        }
  const double* refs[3] = {rx, rw, rb};
  const double* mags[3] = {ax, aw, ab};
  size_t ncount[3] = {counts[0], counts[1], GM};
  for (int k = 0; k < 3; k++) {
    const OnyxTensor* t = onyx_value_tensor(out[k]);
    assert_int_equal(onyx_tensor_elem_type(t), ONYX_ELEM_FLOAT16);
    assert_int_equal(onyx_tensor_elem_count(t), ncount[k]);
    const uint16_t* got = onyx_tensor_data(t);
    for (size_t i = 0; i < ncount[k]; i++) {
      double ref = refs[k][i], tol = fabs(ref) * U_F16 + mags[k][i] * 0x1p-20 + 0x1p-25;
      if (fabs(f16_value(got[i]) - ref) > tol)
        fail_msg("%s[%zu] = %.8g, reference %.8g", out_names[k], i, f16_value(got[i]), ref);
    }
  }
  onyx_values_release(in, 3);
  onyx_values_release(out, 3);
}

static void test_options(void** state) {
  (void)state;
  init_mlp();
  char* model = write_mlp();
  char* dir = path_in("badopts");
  OnyxTrainingArtifactsOptions o;
  onyx_training_artifacts_options_init(&o);
  assert_int_equal(o.mixed_precision, ONYX_MIXED_PRECISION_NONE);
  assert_int_equal(o.loss_scaling, -1);
  assert_float_equal(o.loss_scale_init, 65536.0f, 0);
  assert_int_equal(o.loss_scale_growth_interval, 2000);
  o.mixed_precision = 3;
  ots_expect_error(onyx_training_artifacts_generate(model, &o, dir), ONYX_INVALID_ARGUMENT,
                   "mixed_precision 3");
  o.mixed_precision = ONYX_MIXED_PRECISION_FLOAT16;
  o.loss_scale_backoff_factor = 2.0f;
  ots_expect_error(onyx_training_artifacts_generate(model, &o, dir), ONYX_INVALID_ARGUMENT,
                   "backoff_factor 2");
  /* Options of the size before the mixed-precision fields: float32. */
  onyx_training_artifacts_options_init(&o);
  o.struct_size = ONYX_TRAINING_ARTIFACTS_OPTIONS_V1_SIZE;
  o.mixed_precision = ONYX_MIXED_PRECISION_FLOAT16; /* beyond the size: ignored */
  ots_ok(onyx_training_artifacts_generate(model, &o, dir));
  Onnx__ModelProto* m = read_model(dir, "training_model.onnx");
  size_t count = 0;
  find_op(m->graph, "Cast", &count);
  assert_int_equal(count, 0);
  assert_int_equal(input_type(m->graph, "loss_scale"), -1);
  onnx__model_proto__free_unpacked(m, NULL);
  free(dir);
  free(model);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_options),         cmocka_unit_test(test_casts),
      cmocka_unit_test(test_first_loss),      cmocka_unit_test(test_tracks_float32),
      cmocka_unit_test(test_scaler_overflow), cmocka_unit_test(test_scaler_growth_and_checkpoint),
      cmocka_unit_test(test_scaling_exact),   cmocka_unit_test(test_conv_grad_f16),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
