/* test_training_api.c — the training API (onyx_training.h) on a small MLP
 * x[4,3] -> MatMul W1[3,5] + b1 -> Relu -> Gemm W2[5,3] + b2 -> y[4,3]:
 * - each loss of a train step against the same loss computed here in plain
 *   C (double), and the training model's gradients against central finite
 *   differences of that C loss;
 * - SGD (momentum, nesterov, weight decay) and AdamW steps against PyTorch's
 *   update formulas written here (skipped where the CPU provider has no
 *   optimizer kernels);
 * - checkpoints: save -> load gives identical parameters and state, the
 *   safetensors layout read back by a small reader written here, loading
 *   into another model names the tensor;
 * - export for inference against the C forward pass; NaN losses.
 * With ONYX_TEST_TRAIN_CONFIG set to a providers' JSON, the training
 * sessions use it (tests/unit/gpu: the suite again with gpuemu first). */
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

enum { N = 4, D = 3, H = 5, C = 3, NP = 4 };
static const char* const pnames[NP] = {"W1", "b1", "W2", "b2"};
static const int64_t pdims[NP][2] = {{D, H}, {H, 0}, {H, C}, {C, 0}};
static const size_t pranks[NP] = {2, 1, 2, 1};
static const size_t psizes[NP] = {D * H, H, H* C, C};

/* The model's parameters and a batch. */
typedef struct Params {
  float p[NP][D * H > H* C ? D* H : H* C];
} Params;

static uint64_t rng = 0x243f6a8885a308d3ull;
static double urand(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng >> 11) / 9007199254740992.0;
}

static void init_params(Params* P, int hidden) {
  (void)hidden;
  for (int k = 0; k < NP; k++)
    for (size_t i = 0; i < psizes[k]; i++)
      P->p[k][i] = (float)(urand() * 1.6 - 0.8);
}

static float X[N * D];
static int64_t LABELS[N];
static float TARGET[N * C];

static void init_batch(void) {
  for (int i = 0; i < N * D; i++)
    X[i] = (float)(urand() * 2 - 1);
  for (int i = 0; i < N; i++)
    LABELS[i] = i % C;
  for (int i = 0; i < N * C; i++)
    TARGET[i] = (float)urand(); /* in [0, 1]: also a BCE target */
}

/* Writes the MLP with hidden width h (and names prefixed by `prefix`). */
static void write_mlp(const char* path, const Params* P, int h, const char* w1_name) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){N, D});
  otm_initializer(m, w1_name, ONYX_ELEM_FLOAT32, 2, (int64_t[]){D, h}, P->p[0]);
  otm_initializer(m, "b1", ONYX_ELEM_FLOAT32, 1, (int64_t[]){h}, P->p[1]);
  otm_initializer(m, "W2", ONYX_ELEM_FLOAT32, 2, (int64_t[]){h, C}, P->p[2]);
  otm_initializer(m, "b2", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C}, P->p[3]);
  char ins[64];
  snprintf(ins, sizeof ins, "x,%s", w1_name);
  otm_node(m, "MatMul", "mm", ins, "xw");
  otm_node(m, "Add", "add", "xw,b1", "pre");
  otm_node(m, "Relu", "relu", "pre", "hid");
  otm_node(m, "Gemm", "gemm", "hid,W2,b2", "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){N, C});
  assert_true(otm_write(m, path));
  otm_free(m);
}

/* --- the plain-C reference ----------------------------------------------------------------- */

static void forward(const double* const p[NP], double y[N * C]) {
  for (int n = 0; n < N; n++) {
    double hid[H];
    for (int j = 0; j < H; j++) {
      double s = p[1][j];
      for (int d = 0; d < D; d++)
        s += (double)X[n * D + d] * p[0][d * H + j];
      hid[j] = s > 0 ? s : 0;
    }
    for (int c = 0; c < C; c++) {
      double s = p[3][c];
      for (int j = 0; j < H; j++)
        s += hid[j] * p[2][j * C + c];
      y[n * C + c] = s;
    }
  }
}

static double c_loss(OnyxLossKind kind, const double* const p[NP]) {
  double y[N * C], sum = 0;
  forward(p, y);
  if (kind == ONYX_LOSS_CROSS_ENTROPY) {
    for (int n = 0; n < N; n++) {
      double mx = y[n * C];
      for (int c = 1; c < C; c++)
        mx = fmax(mx, y[n * C + c]);
      double z = 0;
      for (int c = 0; c < C; c++)
        z += exp(y[n * C + c] - mx);
      sum += mx + log(z) - y[n * C + LABELS[n]];
    }
    return sum / N;
  }
  for (int i = 0; i < N * C; i++) {
    double x = y[i], t = TARGET[i];
    if (kind == ONYX_LOSS_MSE) sum += (x - t) * (x - t);
    if (kind == ONYX_LOSS_L1) sum += fabs(x - t);
    if (kind == ONYX_LOSS_BCE_WITH_LOGITS) {
      /* -(t log s(x) + (1-t) log(1 - s(x))) with s the logistic function. */
      double s = 1 / (1 + exp(-x));
      sum += -(t * log(s) + (1 - t) * log(1 - s));
    }
  }
  return sum / (N * C);
}

static double c_loss_f(OnyxLossKind kind, const Params* P) {
  double buf[NP][D * H > H * C ? D * H : H * C];
  const double* p[NP];
  for (int k = 0; k < NP; k++) {
    for (size_t i = 0; i < psizes[k]; i++)
      buf[k][i] = P->p[k][i];
    p[k] = buf[k];
  }
  return c_loss(kind, p);
}

/* --- helpers ----------------------------------------------------------------------------- */

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

static OnyxValue* tensor(OnyxElemType t, const int64_t* dims, size_t rank, const void* data,
                         size_t bytes) {
  OnyxValue* v = NULL;
  ots_ok(onyx_value_create_tensor(t, dims, rank, data, bytes, &v));
  return v;
}

/* The model's inputs then the labels of a loss kind. */
static void batch_values(OnyxLossKind kind, OnyxValue* v[2]) {
  v[0] = tensor(ONYX_ELEM_FLOAT32, (int64_t[]){N, D}, 2, X, sizeof X);
  if (kind == ONYX_LOSS_CROSS_ENTROPY)
    v[1] = tensor(ONYX_ELEM_INT64, (int64_t[]){N}, 1, LABELS, sizeof LABELS);
  else
    v[1] = tensor(ONYX_ELEM_FLOAT32, (int64_t[]){N, C}, 2, TARGET, sizeof TARGET);
}

static float scalar(const OnyxValue* v) {
  const OnyxTensor* t = onyx_value_tensor(v);
  assert_non_null(t);
  assert_int_equal(onyx_tensor_elem_count(t), 1);
  return *(const float*)onyx_tensor_data(t);
}

/* Artifacts for the MLP with P in folder `name`. */
static char* make_artifacts(const char* name, const Params* P, OnyxLossKind loss,
                            const OnyxTrainingArtifactsOptions* base) {
  char* model = path_in("mlp.onnx");
  write_mlp(model, P, H, "W1");
  OnyxTrainingArtifactsOptions o;
  if (base)
    o = *base;
  else
    onyx_training_artifacts_options_init(&o);
  o.loss = loss;
  char* dir = path_in(name);
  ots_ok(onyx_training_artifacts_generate(model, &o, dir));
  free(model);
  return dir;
}

static OnyxTrainingSession* open_ts(const char* dir, OnyxCheckpoint** ck) {
  size_t n = strlen(dir) + 16;
  char* cdir = malloc(n);
  snprintf(cdir, n, "%s/checkpoint", dir);
  ots_ok(onyx_checkpoint_load(cdir, ck));
  free(cdir);
  /* ONYX_TEST_TRAIN_CONFIG: a providers' JSON for the sessions (the
   * test_training_api_gpuemu ctest runs the suite with gpuemu first, where
   * the session keeps the trained state in device memory). */
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

static void read_params(const OnyxCheckpoint* ck, Params* P) {
  for (int k = 0; k < NP; k++) {
    OnyxValue* v = NULL;
    ots_ok(onyx_checkpoint_get_parameter(ck, pnames[k], &v));
    const OnyxTensor* t = onyx_value_tensor(v);
    assert_int_equal(onyx_tensor_elem_count(t), psizes[k]);
    memcpy(P->p[k], onyx_tensor_data(t), psizes[k] * sizeof(float));
    onyx_value_release(v);
  }
}

/* The gradients of the training model at P (run directly, outside the
 * training session). */
static void model_grads(const char* dir, OnyxLossKind kind, const Params* P, Params* G) {
  size_t n = strlen(dir) + 32;
  char* path = malloc(n);
  snprintf(path, n, "%s/training_model.onnx", dir);
  OnyxSession* s = NULL;
  ots_ok(onyx_session_create(NULL, path, &s));
  free(path);
  OnyxValue* in[2 + NP];
  batch_values(kind, in);
  for (int k = 0; k < NP; k++)
    in[2 + k] = tensor(ONYX_ELEM_FLOAT32, pdims[k], pranks[k], P->p[k], psizes[k] * sizeof(float));
  const char* names[2 + NP] = {"x", "labels", "W1", "b1", "W2", "b2"};
  const char* outs[NP] = {"W1_grad", "b1_grad", "W2_grad", "b2_grad"};
  OnyxValue* ov[NP] = {0};
  ots_ok(onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, 2 + NP, outs, NP, ov));
  for (int k = 0; k < NP; k++) {
    const OnyxTensor* t = onyx_value_tensor(ov[k]);
    assert_int_equal(onyx_tensor_elem_count(t), psizes[k]);
    memcpy(G->p[k], onyx_tensor_data(t), psizes[k] * sizeof(float));
  }
  onyx_values_release(ov, NP);
  onyx_values_release(in, 2 + NP);
  onyx_session_release(s);
}

/* --- losses and gradients ------------------------------------------------------------------- */

static void check_loss(OnyxLossKind kind) {
  Params P;
  init_params(&P, H);
  char* dir = make_artifacts("art_loss", &P, kind, NULL);
  OnyxCheckpoint* ck = NULL;
  OnyxTrainingSession* ts = open_ts(dir, &ck);
  assert_int_equal(onyx_training_session_input_count(ts), 2);
  assert_string_equal(onyx_training_session_input_name(ts, 0), "x");
  assert_string_equal(onyx_training_session_input_name(ts, 1), "labels");
  OnyxValue* in[2];
  batch_values(kind, in);
  OnyxValue* loss = NULL;
  ots_ok(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 2, &loss));
  double want = c_loss_f(kind, &P);
  assert_float_equal(scalar(loss), want, 1e-5 * fmax(1, fabs(want)));
  onyx_value_release(loss);
  ots_ok(onyx_training_session_eval_step(ts, (const OnyxValue* const*)in, 2, &loss));
  assert_float_equal(scalar(loss), want, 1e-5 * fmax(1, fabs(want)));
  onyx_value_release(loss);
  onyx_values_release(in, 2);

  /* Gradients against central differences of the C loss. */
  Params G;
  model_grads(dir, kind, &P, &G);
  double buf[NP][D * H > H * C ? D * H : H * C];
  const double* p[NP];
  for (int k = 0; k < NP; k++) {
    for (size_t i = 0; i < psizes[k]; i++)
      buf[k][i] = P.p[k][i];
    p[k] = buf[k];
  }
  const double h = 1e-5;
  for (int k = 0; k < NP; k++)
    for (size_t i = 0; i < psizes[k]; i++) {
      double keep = buf[k][i];
      buf[k][i] = keep + h;
      double up = c_loss(kind, p);
      buf[k][i] = keep - h;
      double down = c_loss(kind, p);
      buf[k][i] = keep;
      double fd = (up - down) / (2 * h);
      if (fabs(G.p[k][i] - fd) > 1e-4 + 1e-3 * fabs(fd))
        fail_msg("loss %d: d loss / d %s[%zu] = %g, finite differences %g", (int)kind, pnames[k], i,
                 (double)G.p[k][i], fd);
    }
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(dir);
}

static void test_loss_cross_entropy(void** state) {
  (void)state;
  check_loss(ONYX_LOSS_CROSS_ENTROPY);
}
static void test_loss_mse(void** state) {
  (void)state;
  check_loss(ONYX_LOSS_MSE);
}
static void test_loss_bce_with_logits(void** state) {
  (void)state;
  check_loss(ONYX_LOSS_BCE_WITH_LOGITS);
}
static void test_loss_l1(void** state) {
  (void)state;
  check_loss(ONYX_LOSS_L1);
}

/* Gradients accumulate over train steps and reset to zero. */
static void test_accumulation(void** state) {
  (void)state;
  /* Accumulation is checked through the optimizer: SGD lr 1 takes p - sum g. */
  Params P;
  init_params(&P, H);
  OnyxTrainingArtifactsOptions o;
  onyx_training_artifacts_options_init(&o);
  o.optimizer = ONYX_OPTIMIZER_SGD;
  o.learning_rate = 1.0f;
  char* dir = make_artifacts("art_acc", &P, ONYX_LOSS_MSE, &o);
  OnyxCheckpoint* ck = NULL;
  OnyxTrainingSession* ts = open_ts(dir, &ck);
  Params G;
  model_grads(dir, ONYX_LOSS_MSE, &P, &G);
  OnyxValue* in[2];
  batch_values(ONYX_LOSS_MSE, in);
  for (int r = 0; r < 2; r++)
    ots_ok(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 2, NULL));
  onyx_values_release(in, 2);
  OnyxStatus* st = onyx_training_session_optimizer_step(ts);
  if (onyx_status_code(st) == ONYX_NOT_IMPLEMENTED) {
    onyx_status_release(st);
    onyx_training_session_release(ts);
    onyx_checkpoint_release(ck);
    free(dir);
    skip();
  }
  ots_ok(st);
  Params Q;
  read_params(ck, &Q);
  for (int k = 0; k < NP; k++)
    for (size_t i = 0; i < psizes[k]; i++)
      assert_float_equal(Q.p[k][i], P.p[k][i] - 2 * G.p[k][i], 1e-5);
  assert_int_equal(onyx_checkpoint_step(ck), 1);
  /* After a reset, one step moves by one gradient (at the new point). */
  ots_ok(onyx_training_session_lazy_reset_grad(ts));
  model_grads(dir, ONYX_LOSS_MSE, &Q, &G);
  batch_values(ONYX_LOSS_MSE, in);
  ots_ok(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 2, NULL));
  onyx_values_release(in, 2);
  ots_ok(onyx_training_session_optimizer_step(ts));
  read_params(ck, &P);
  for (int k = 0; k < NP; k++)
    for (size_t i = 0; i < psizes[k]; i++)
      assert_float_equal(P.p[k][i], Q.p[k][i] - G.p[k][i], 1e-5);
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(dir);
}

/* --- optimizers against PyTorch's formulas -----------------------------------------------------
 */

typedef struct Ref {
  Params p, m, v;
  int t;
} Ref;

/* torch.optim.SGD: g += wd p; buf = g (first step) or mu buf + (1 - damp) g;
 * g = nesterov ? g + mu buf : buf; p -= lr g. */
static void ref_sgd(Ref* r, const Params* G, double lr, double mu, double damp, int nesterov,
                    double wd) {
  for (int k = 0; k < NP; k++)
    for (size_t i = 0; i < psizes[k]; i++) {
      double p = r->p.p[k][i], g = G->p[k][i] + wd * p;
      if (mu != 0) {
        double b = r->t == 0 ? g : mu * r->m.p[k][i] + (1 - damp) * g;
        r->m.p[k][i] = (float)b;
        g = nesterov ? g + mu * b : b;
      }
      r->p.p[k][i] = (float)(p - lr * g);
    }
  r->t++;
}

/* torch.optim.AdamW: p *= 1 - lr wd; m, v moving averages; p -= lr / bc1 *
 * m / (sqrt(v) / sqrt(bc2) + eps) at step t (1-based). */
static void ref_adamw(Ref* r, const Params* G, double lr, double b1, double b2, double eps,
                      double wd) {
  r->t++;
  double bc1 = 1 - pow(b1, r->t), bc2 = 1 - pow(b2, r->t);
  for (int k = 0; k < NP; k++)
    for (size_t i = 0; i < psizes[k]; i++) {
      double p = r->p.p[k][i] * (1 - lr * wd), g = G->p[k][i];
      double m = b1 * r->m.p[k][i] + (1 - b1) * g;
      double v = b2 * r->v.p[k][i] + (1 - b2) * g * g;
      r->m.p[k][i] = (float)m;
      r->v.p[k][i] = (float)v;
      r->p.p[k][i] = (float)(p - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps));
    }
}

static void check_optimizer(OnyxOptimizerKind kind) {
  Params P;
  init_params(&P, H);
  OnyxTrainingArtifactsOptions o;
  onyx_training_artifacts_options_init(&o);
  o.optimizer = kind;
  o.learning_rate = 0.05f;
  if (kind == ONYX_OPTIMIZER_SGD) {
    o.momentum = 0.9f;
    o.nesterov = 1;
    o.weight_decay = 0.01f;
  } else {
    o.weight_decay = 0.02f;
  }
  char* dir = make_artifacts(kind == ONYX_OPTIMIZER_SGD ? "art_sgd" : "art_adamw", &P,
                             ONYX_LOSS_CROSS_ENTROPY, &o);
  OnyxCheckpoint* ck = NULL;
  OnyxTrainingSession* ts = open_ts(dir, &ck);
  Ref r = {.p = P};
  memset(&r.m, 0, sizeof r.m);
  memset(&r.v, 0, sizeof r.v);
  double first = 0, last = 0;
  for (int step = 0; step < 5; step++) {
    Params G;
    model_grads(dir, ONYX_LOSS_CROSS_ENTROPY, &r.p, &G);
    OnyxValue* in[2];
    batch_values(ONYX_LOSS_CROSS_ENTROPY, in);
    OnyxValue* loss = NULL;
    ots_ok(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 2, &loss));
    onyx_values_release(in, 2);
    if (step == 0) first = scalar(loss);
    last = scalar(loss);
    onyx_value_release(loss);
    OnyxStatus* st = onyx_training_session_optimizer_step(ts);
    if (onyx_status_code(st) == ONYX_NOT_IMPLEMENTED) {
      onyx_status_release(st);
      onyx_training_session_release(ts);
      onyx_checkpoint_release(ck);
      free(dir);
      skip();
    }
    ots_ok(st);
    ots_ok(onyx_training_session_lazy_reset_grad(ts));
    if (kind == ONYX_OPTIMIZER_SGD)
      ref_sgd(&r, &G, 0.05, 0.9, 0, 1, 0.01);
    else
      ref_adamw(&r, &G, 0.05, 0.9, 0.999, 1e-8, 0.02);
    Params Q;
    read_params(ck, &Q);
    for (int k = 0; k < NP; k++)
      for (size_t i = 0; i < psizes[k]; i++)
        if (fabs(Q.p[k][i] - r.p.p[k][i]) > 1e-5 + 1e-5 * fabs(r.p.p[k][i]))
          fail_msg("step %d: %s[%zu] = %g, the reference %g", step, pnames[k], i, (double)Q.p[k][i],
                   (double)r.p.p[k][i]);
  }
  assert_int_equal(onyx_checkpoint_step(ck), 5);
  /* A few steps decrease the loss. */
  assert_true(last < first);
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(dir);
}

static void test_sgd_nesterov_weight_decay(void** state) {
  (void)state;
  check_optimizer(ONYX_OPTIMIZER_SGD);
}

static void test_adamw(void** state) {
  (void)state;
  check_optimizer(ONYX_OPTIMIZER_ADAMW);
}

/* ClipGradNorm before SGD (lr 1): p - g * max_norm / (||g|| + 1e-6) when the
 * global norm is above max_norm (torch.nn.utils.clip_grad_norm_). */
static void test_grad_clip(void** state) {
  (void)state;
  Params P;
  init_params(&P, H);
  OnyxTrainingArtifactsOptions o;
  onyx_training_artifacts_options_init(&o);
  o.optimizer = ONYX_OPTIMIZER_SGD;
  o.learning_rate = 1.0f;
  o.clip_grad_norm = 1;
  char* dir = make_artifacts("art_clip", &P, ONYX_LOSS_MSE, &o);
  OnyxCheckpoint* ck = NULL;
  OnyxTrainingSession* ts = open_ts(dir, &ck);
  Params G;
  model_grads(dir, ONYX_LOSS_MSE, &P, &G);
  double norm = 0;
  for (int k = 0; k < NP; k++)
    for (size_t i = 0; i < psizes[k]; i++)
      norm += (double)G.p[k][i] * G.p[k][i];
  norm = sqrt(norm);
  const double max_norm = norm / 4;
  ots_ok(onyx_training_session_set_grad_clip_norm(ts, (float)max_norm));
  OnyxValue* in[2];
  batch_values(ONYX_LOSS_MSE, in);
  ots_ok(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 2, NULL));
  onyx_values_release(in, 2);
  ots_ok(onyx_training_session_optimizer_step(ts));
  assert_float_equal(onyx_training_session_last_grad_norm(ts), norm, 1e-5 * norm);
  Params Q;
  read_params(ck, &Q);
  const double scale = (float)max_norm / (norm + 1e-6);
  for (int k = 0; k < NP; k++)
    for (size_t i = 0; i < psizes[k]; i++)
      assert_float_equal(Q.p[k][i], P.p[k][i] - scale * G.p[k][i], 1e-5);
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(dir);
}

/* Clip artifacts with no maximum set: the optimizer step clips nothing
 * (max_norm +inf) and still reports the gradients' norm. */
static void test_grad_clip_unset(void** state) {
  (void)state;
  Params P;
  init_params(&P, H);
  OnyxTrainingArtifactsOptions o;
  onyx_training_artifacts_options_init(&o);
  o.optimizer = ONYX_OPTIMIZER_SGD;
  o.learning_rate = 1.0f;
  o.clip_grad_norm = 1;
  char* dir = make_artifacts("art_clip_unset", &P, ONYX_LOSS_MSE, &o);
  OnyxCheckpoint* ck = NULL;
  OnyxTrainingSession* ts = open_ts(dir, &ck);
  Params G;
  model_grads(dir, ONYX_LOSS_MSE, &P, &G);
  double norm = 0;
  for (int k = 0; k < NP; k++)
    for (size_t i = 0; i < psizes[k]; i++)
      norm += (double)G.p[k][i] * G.p[k][i];
  norm = sqrt(norm);
  OnyxValue* in[2];
  batch_values(ONYX_LOSS_MSE, in);
  ots_ok(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 2, NULL));
  onyx_values_release(in, 2);
  ots_ok(onyx_training_session_optimizer_step(ts));
  assert_float_equal(onyx_training_session_last_grad_norm(ts), norm, 1e-5 * norm);
  Params Q;
  read_params(ck, &Q);
  for (int k = 0; k < NP; k++)
    for (size_t i = 0; i < psizes[k]; i++)
      assert_float_equal(Q.p[k][i], P.p[k][i] - G.p[k][i], 1e-5);
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(dir);
}

/* LAMB: a few steps decrease the loss, and the state holds both moments. */
static void test_lamb_decreases_loss(void** state) {
  (void)state;
  Params P;
  init_params(&P, H);
  OnyxTrainingArtifactsOptions o;
  onyx_training_artifacts_options_init(&o);
  o.optimizer = ONYX_OPTIMIZER_LAMB;
  o.learning_rate = 0.02f;
  char* dir = make_artifacts("art_lamb", &P, ONYX_LOSS_CROSS_ENTROPY, &o);
  OnyxCheckpoint* ck = NULL;
  OnyxTrainingSession* ts = open_ts(dir, &ck);
  double first = 0, last = 0;
  for (int step = 0; step < 8; step++) {
    OnyxValue* in[2];
    batch_values(ONYX_LOSS_CROSS_ENTROPY, in);
    OnyxValue* loss = NULL;
    ots_ok(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 2, &loss));
    onyx_values_release(in, 2);
    if (step == 0) first = scalar(loss);
    last = scalar(loss);
    onyx_value_release(loss);
    ots_ok(onyx_training_session_optimizer_step(ts));
    ots_ok(onyx_training_session_lazy_reset_grad(ts));
  }
  assert_true(last < first);
  assert_int_equal(onyx_checkpoint_state_count(ck), 2 * NP);
  OnyxValue* v = NULL;
  ots_ok(onyx_checkpoint_get_state(ck, "W1.exp_avg_sq", &v));
  onyx_value_release(v);
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(dir);
}

/* --- schedulers ---------------------------------------------------------------------------- */

static void test_lr_scheduler(void** state) {
  (void)state;
  Params P;
  init_params(&P, H);
  char* dir = make_artifacts("art_lr", &P, ONYX_LOSS_MSE, NULL);
  OnyxCheckpoint* ck = NULL;
  OnyxTrainingSession* ts = open_ts(dir, &ck);
  ots_ok(onyx_training_session_set_learning_rate(ts, 0.5f));
  assert_float_equal(onyx_training_session_get_learning_rate(ts), 0.5f, 0);
  /* Linear: warmup 0 -> 0.5 over 4 steps; at step 0 the rate is 0. */
  ots_ok(onyx_training_session_set_lr_scheduler(ts, ONYX_LR_LINEAR, 4, 12, 0.0f));
  assert_float_equal(onyx_training_session_get_learning_rate(ts), 0.0f, 0);
  /* The rate of each step, from the formulas: warmup t/4, then 1 - (t-4)/8. */
  for (int t = 0; t <= 14; t++) {
    double want = t < 4 ? 0.5 * t / 4 : 0.5 * fmax(0, 1 - (t - 4) / 8.0);
    assert_float_equal(onyx_training_session_get_learning_rate(ts), want, 1e-6);
    ots_ok(onyx_training_session_optimizer_step(ts));
  }
  /* Cosine from step 15 of warmup 5, total 25, floor 0.1. */
  ots_ok(onyx_training_session_set_lr_scheduler(ts, ONYX_LR_COSINE, 5, 25, 0.1f));
  for (int t = 15; t <= 26; t++) {
    double want = 0.1 + 0.4 * 0.5 * (1 + cos(M_PI * fmin(1, (t - 5) / 20.0)));
    assert_float_equal(onyx_training_session_get_learning_rate(ts), want, 1e-6);
    ots_ok(onyx_training_session_optimizer_step(ts));
  }
  ots_expect_error(onyx_training_session_set_lr_scheduler(ts, ONYX_LR_COSINE, 5, 4, 0.0f),
                   ONYX_INVALID_ARGUMENT, "warmup_steps 5");
  ots_expect_error(onyx_training_session_set_grad_clip_norm(ts, 1.0f), ONYX_INVALID_ARGUMENT,
                   "clip_grad_norm");
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(dir);
}

/* --- checkpoints ----------------------------------------------------------------------------- */

/* A small safetensors reader: the data of tensor `name` (dtype F32) and its
 * element count, from the header's data_offsets. */
static float* st_read(const char* path, const char* name, size_t* count) {
  FILE* f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char* b = malloc((size_t)len + 1);
  assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  uint64_t hl = 0;
  for (int i = 0; i < 8; i++)
    hl |= (uint64_t)b[i] << (8 * i);
  assert_int_equal(hl % 8, 0);
  assert_true(8 + hl <= (uint64_t)len);
  char* hdr = malloc(hl + 1);
  memcpy(hdr, b + 8, hl);
  hdr[hl] = 0;
  char key[64];
  snprintf(key, sizeof key, "\"%s\":{", name);
  char* e = strstr(hdr, key);
  assert_non_null(e);
  assert_non_null(strstr(e, "\"dtype\":\"F32\""));
  char* offs = strstr(e, "\"data_offsets\":[");
  assert_non_null(offs);
  unsigned long long lo = 0, hi = 0;
  assert_int_equal(sscanf(offs, "\"data_offsets\":[%llu,%llu]", &lo, &hi), 2);
  assert_true(8 + hl + hi <= (uint64_t)len);
  *count = (size_t)(hi - lo) / 4;
  float* out = malloc(hi - lo + 1);
  memcpy(out, b + 8 + hl + lo, hi - lo);
  free(hdr);
  free(b);
  return out;
}

static void test_checkpoint_roundtrip(void** state) {
  (void)state;
  Params P;
  init_params(&P, H);
  char* dir = make_artifacts("art_ck", &P, ONYX_LOSS_MSE, NULL); /* AdamW: two slots */
  OnyxCheckpoint* ck = NULL;
  OnyxTrainingSession* ts = open_ts(dir, &ck);
  /* The session made zero state for each parameter and slot. */
  assert_int_equal(onyx_checkpoint_state_count(ck), 2 * NP);
  for (size_t i = 0; i < onyx_checkpoint_state_count(ck); i++) {
    OnyxValue* v = NULL;
    ots_ok(onyx_checkpoint_get_state(ck, onyx_checkpoint_state_name(ck, i), &v));
    const OnyxTensor* t = onyx_value_tensor(v);
    float* d = (float*)(uintptr_t)onyx_tensor_data(t);
    for (size_t k = 0; k < onyx_tensor_elem_count(t); k++) {
      assert_float_equal(d[k], 0, 0);
      d[k] = (float)(i * 100 + k); /* the value shares the checkpoint's memory */
    }
    onyx_value_release(v);
  }
  ots_ok(onyx_training_session_set_learning_rate(ts, 0.25f));
  ots_ok(onyx_training_session_set_lr_scheduler(ts, ONYX_LR_COSINE, 2, 10, 0.01f));
  ots_ok(onyx_training_session_set_seed(ts, 1234567890123ull));
  char* out = path_in("ck_saved");
  ots_ok(onyx_checkpoint_save(ck, out, 1));

  /* The file read by the reader above holds the parameters. */
  size_t n = strlen(out) + 32;
  char* pf = malloc(n);
  snprintf(pf, n, "%s/parameters.safetensors", out);
  for (int k = 0; k < NP; k++) {
    size_t count = 0;
    float* d = st_read(pf, pnames[k], &count);
    assert_int_equal(count, psizes[k]);
    assert_memory_equal(d, P.p[k], count * sizeof(float));
    free(d);
  }
  free(pf);

  OnyxCheckpoint* back = NULL;
  ots_ok(onyx_checkpoint_load(out, &back));
  assert_int_equal(onyx_checkpoint_parameter_count(back), NP);
  Params Q;
  read_params(back, &Q);
  for (int k = 0; k < NP; k++) {
    assert_memory_equal(Q.p[k], P.p[k], psizes[k] * sizeof(float));
    assert_int_equal(onyx_checkpoint_parameter_trainable(back, pnames[k]), 1);
  }
  assert_int_equal(onyx_checkpoint_parameter_trainable(back, "nope"), -1);
  assert_int_equal(onyx_checkpoint_state_count(back), 2 * NP);
  for (size_t i = 0; i < onyx_checkpoint_state_count(ck); i++) {
    const char* name = onyx_checkpoint_state_name(ck, i);
    OnyxValue* a = NULL;
    OnyxValue* b = NULL;
    ots_ok(onyx_checkpoint_get_state(ck, name, &a));
    ots_ok(onyx_checkpoint_get_state(back, name, &b));
    const OnyxTensor* ta = onyx_value_tensor(a);
    const OnyxTensor* tb = onyx_value_tensor(b);
    assert_int_equal(onyx_tensor_byte_size(ta), onyx_tensor_byte_size(tb));
    assert_memory_equal(onyx_tensor_data(ta), onyx_tensor_data(tb), onyx_tensor_byte_size(ta));
    onyx_value_release(a);
    onyx_value_release(b);
  }
  /* Scheduler, rate and seed come back: a session on it has the same rate. */
  OnyxTrainingSession* ts2 = NULL;
  ots_ok(onyx_training_session_create(NULL, back, dir, &ts2));
  /* Step 0 of warmup 2: rate 0; both sessions agree. */
  assert_float_equal(onyx_training_session_get_learning_rate(ts2),
                     onyx_training_session_get_learning_rate(ts), 0);
  onyx_training_session_release(ts2);
  onyx_checkpoint_release(back);

  /* Without optimizer state: parameters only. */
  ots_ok(onyx_checkpoint_save(ck, out, 0));
  ots_ok(onyx_checkpoint_load(out, &back));
  assert_int_equal(onyx_checkpoint_state_count(back), 0);
  onyx_checkpoint_release(back);
  free(out);
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(dir);
}

/* A checkpoint of another model: errors name the tensor. */
static void test_checkpoint_wrong_model(void** state) {
  (void)state;
  Params P;
  init_params(&P, H);
  char* dir = make_artifacts("art_wrong", &P, ONYX_LOSS_MSE, NULL);
  /* Hidden width 4: W1 [3,4] against [3,5]. */
  char* other = path_in("other.onnx");
  write_mlp(other, &P, 4, "W1");
  char* odir = path_in("art_other");
  ots_ok(onyx_training_artifacts_generate(other, NULL, odir));
  size_t n = strlen(odir) + 16;
  char* cdir = malloc(n);
  snprintf(cdir, n, "%s/checkpoint", odir);
  OnyxCheckpoint* ck = NULL;
  ots_ok(onyx_checkpoint_load(cdir, &ck));
  OnyxTrainingSession* ts = NULL;
  ots_expect_error(onyx_training_session_create(NULL, ck, dir, &ts), ONYX_INVALID_ARGUMENT,
                   "'W1' is float32[3,4]");
  assert_null(ts);
  onyx_checkpoint_release(ck);
  /* A model whose first weight is named W0: W1 missing, W0 extra. */
  write_mlp(other, &P, H, "W0");
  ots_ok(onyx_training_artifacts_generate(other, NULL, odir));
  ots_ok(onyx_checkpoint_load(cdir, &ck));
  ots_expect_error(onyx_training_session_create(NULL, ck, dir, &ts), ONYX_INVALID_ARGUMENT,
                   "no parameter 'W1' (missing)");
  onyx_checkpoint_release(ck);
  /* Extra: the full checkpoint into artifacts that froze b2. */
  OnyxTrainingArtifactsOptions fo;
  onyx_training_artifacts_options_init(&fo);
  fo.loss = ONYX_LOSS_MSE;
  const char* frozen[] = {"b2"};
  fo.frozen = frozen;
  fo.frozen_count = 1;
  char* model = path_in("mlp.onnx");
  ots_ok(onyx_training_artifacts_generate(model, &fo, odir));
  free(model);
  snprintf(cdir, n, "%s/checkpoint", dir);
  ots_ok(onyx_checkpoint_load(cdir, &ck));
  ots_expect_error(onyx_training_session_create(NULL, ck, odir, &ts), ONYX_INVALID_ARGUMENT,
                   "checkpoint parameter 'b2' (extra)");
  onyx_checkpoint_release(ck);
  /* Dtype: W1 as float64 in a file written here. */
  {
    char hdr[512];
    int hl = snprintf(hdr, sizeof hdr,
                      "{\"W1\":{\"dtype\":\"F64\",\"shape\":[3,5],\"data_offsets\":[0,120]},"
                      "\"b1\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[120,140]},"
                      "\"W2\":{\"dtype\":\"F32\",\"shape\":[5,3],\"data_offsets\":[140,200]},"
                      "\"b2\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[200,212]}}");
    size_t total = 8 + (size_t)hl + 212;
    unsigned char* file = calloc(1, total);
    for (int b = 0; b < 8; b++)
      file[b] = (unsigned char)((uint64_t)hl >> (8 * b));
    memcpy(file + 8, hdr, (size_t)hl);
    size_t pn = strlen(cdir) + 32;
    char* pf = malloc(pn);
    snprintf(pf, pn, "%s/parameters.safetensors", cdir);
    assert_true(otm_write_file(pf, file, total));
    free(file);
    free(pf);
    ots_ok(onyx_checkpoint_load(cdir, &ck));
    ots_expect_error(onyx_training_session_create(NULL, ck, dir, &ts), ONYX_INVALID_ARGUMENT,
                     "'W1' is float64[3,5], the training model takes float32[3,5]");
    onyx_checkpoint_release(ck);
  }
  /* A damaged safetensors file is an error naming the file. */
  snprintf(cdir, n, "%s/checkpoint", dir);
  size_t pn = strlen(cdir) + 32;
  char* pf = malloc(pn);
  snprintf(pf, pn, "%s/parameters.safetensors", cdir);
  assert_true(otm_write_file(pf, "\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10));
  ots_expect_error(onyx_checkpoint_load(cdir, &ck), ONYX_INVALID_ARGUMENT,
                   "parameters.safetensors");
  free(pf);
  free(cdir);
  free(odir);
  free(other);
  free(dir);
}

/* --- export, NaN ------------------------------------------------------------------------------ */

static void test_export_for_inference(void** state) {
  (void)state;
  Params P;
  init_params(&P, H);
  char* dir = make_artifacts("art_export", &P, ONYX_LOSS_MSE, NULL);
  OnyxCheckpoint* ck = NULL;
  OnyxTrainingSession* ts = open_ts(dir, &ck);
  /* New weights, as training would leave them. */
  Params Q;
  init_params(&Q, H);
  for (int k = 0; k < NP; k++) {
    OnyxValue* v = tensor(ONYX_ELEM_FLOAT32, pdims[k], pranks[k], Q.p[k], psizes[k] * 4);
    ots_ok(onyx_checkpoint_set_parameter(ck, pnames[k], v));
    onyx_value_release(v);
  }
  OnyxValue* bad = tensor(ONYX_ELEM_FLOAT32, (int64_t[]){2}, 1, NULL, 8);
  ots_expect_error(onyx_checkpoint_set_parameter(ck, "b1", bad), ONYX_INVALID_ARGUMENT,
                   "'b1' is float32[5]");
  onyx_value_release(bad);
  char* out = path_in("exported.onnx");
  ots_ok(onyx_training_session_export_for_inference(ts, out));
  OnyxSession* s = NULL;
  ots_ok(onyx_session_create(NULL, out, &s));
  assert_int_equal(onyx_session_input_count(s), 1);
  OnyxValue* x = tensor(ONYX_ELEM_FLOAT32, (int64_t[]){N, D}, 2, X, sizeof X);
  const char* in_name = "x";
  const char* out_name = "y";
  OnyxValue* y = NULL;
  ots_ok(onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&x, 1, &out_name, 1, &y));
  double buf[NP][D * H > H * C ? D * H : H * C];
  const double* p[NP];
  for (int k = 0; k < NP; k++) {
    for (size_t i = 0; i < psizes[k]; i++)
      buf[k][i] = Q.p[k][i];
    p[k] = buf[k];
  }
  double want[N * C];
  forward(p, want);
  const float* got = onyx_tensor_data(onyx_value_tensor(y));
  for (int i = 0; i < N * C; i++)
    assert_float_equal(got[i], want[i], 1e-5);
  /* The eval step sees the same weights. */
  OnyxValue* in[2];
  batch_values(ONYX_LOSS_MSE, in);
  OnyxValue* loss = NULL;
  ots_ok(onyx_training_session_eval_step(ts, (const OnyxValue* const*)in, 2, &loss));
  assert_float_equal(scalar(loss), c_loss(ONYX_LOSS_MSE, p), 1e-5);
  onyx_value_release(loss);
  onyx_values_release(in, 2);
  onyx_value_release(x);
  onyx_value_release(y);
  onyx_session_release(s);
  free(out);
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(dir);
}

/* set_parameter after optimizer steps: the checkpoint gives the set tensor
 * and the trained others, and the eval step sees exactly those (its loss
 * against the plain-C loss of them), wherever the session keeps its state. */
static void test_set_parameter_after_steps(void** state) {
  (void)state;
  Params P;
  init_params(&P, H);
  char* dir = make_artifacts("art_set_after", &P, ONYX_LOSS_MSE, NULL);
  OnyxCheckpoint* ck = NULL;
  OnyxTrainingSession* ts = open_ts(dir, &ck);
  OnyxValue* in[2];
  batch_values(ONYX_LOSS_MSE, in);
  for (int step = 0; step < 2; step++) {
    ots_ok(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 2, NULL));
    OnyxStatus* st = onyx_training_session_optimizer_step(ts);
    if (onyx_status_code(st) == ONYX_NOT_IMPLEMENTED) {
      onyx_status_release(st);
      onyx_values_release(in, 2);
      onyx_training_session_release(ts);
      onyx_checkpoint_release(ck);
      free(dir);
      skip();
    }
    ots_ok(st);
    ots_ok(onyx_training_session_lazy_reset_grad(ts));
  }
  Params T;
  read_params(ck, &T);
  bool moved = false; /* the checkpoint saw the steps */
  for (size_t i = 0; i < psizes[3]; i++)
    moved = moved || T.p[3][i] != P.p[3][i];
  assert_true(moved);
  Params Q;
  init_params(&Q, H);
  OnyxValue* v = tensor(ONYX_ELEM_FLOAT32, pdims[0], pranks[0], Q.p[0], psizes[0] * 4);
  ots_ok(onyx_checkpoint_set_parameter(ck, pnames[0], v));
  onyx_value_release(v);
  Params R;
  read_params(ck, &R);
  for (int k = 0; k < NP; k++)
    for (size_t i = 0; i < psizes[k]; i++)
      assert_true(R.p[k][i] == (k == 0 ? Q.p[0][i] : T.p[k][i]));
  OnyxValue* loss = NULL;
  ots_ok(onyx_training_session_eval_step(ts, (const OnyxValue* const*)in, 2, &loss));
  assert_float_equal(scalar(loss), c_loss_f(ONYX_LOSS_MSE, &R), 1e-5);
  onyx_value_release(loss);
  onyx_values_release(in, 2);
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(dir);
}

static void test_nonfinite_loss(void** state) {
  (void)state;
  Params P;
  init_params(&P, H);
  char* dir = make_artifacts("art_nan", &P, ONYX_LOSS_MSE, NULL);
  OnyxCheckpoint* ck = NULL;
  OnyxTrainingSession* ts = open_ts(dir, &ck);
  OnyxValue* in[2];
  batch_values(ONYX_LOSS_MSE, in);
  float t[N * C];
  memcpy(t, TARGET, sizeof t);
  t[1] = NAN;
  onyx_value_release(in[1]);
  in[1] = tensor(ONYX_ELEM_FLOAT32, (int64_t[]){N, C}, 2, t, sizeof t);
  OnyxValue* loss = NULL;
  ots_expect_error(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 2, &loss),
                   ONYX_RUNTIME_ERROR, "train step: the loss is");
  assert_null(loss);
  ots_ok(onyx_training_session_set_nonfinite_policy(ts, ONYX_NONFINITE_SKIP_STEP));
  ots_ok(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 2, &loss));
  assert_true(isnan(scalar(loss)));
  assert_int_equal(onyx_training_session_skipped_steps(ts), 1);
  onyx_value_release(loss);
  /* Wrong input count names both counts. */
  ots_expect_error(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 1, NULL),
                   ONYX_INVALID_ARGUMENT, "1 inputs given, the model takes 2");
  onyx_values_release(in, 2);
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(dir);
}

/* A finite loss with a NaN gradient: x[0][0] = -Inf and W1's row 0
 * positive make row 0's hidden pre-activations -Inf, so Relu gives 0 there
 * and y, the loss and b1's gradient stay finite, while W1's gradient row 0
 * is the sum of x[n][0] * dpre[n][j] with -Inf * 0 = NaN. optimizer_step
 * refuses the step naming W1's gradient (the parameters are unchanged), or
 * counts it as skipped under SKIP_STEP. With and without ClipGradNorm in
 * the optimizer model (whose norm the device path reads). */
static void nonfinite_gradient(int clip) {
  Params P;
  init_params(&P, H);
  for (int j = 0; j < H; j++)
    P.p[0][0 * H + j] = 0.5f;
  OnyxTrainingArtifactsOptions o;
  onyx_training_artifacts_options_init(&o);
  o.clip_grad_norm = clip;
  char* dir = make_artifacts(clip ? "art_nan_grad_clip" : "art_nan_grad", &P, ONYX_LOSS_MSE, &o);
  OnyxCheckpoint* ck = NULL;
  OnyxTrainingSession* ts = open_ts(dir, &ck);
  if (clip) ots_ok(onyx_training_session_set_grad_clip_norm(ts, 100.0f));
  float x[N * D];
  memcpy(x, X, sizeof x);
  x[0] = -INFINITY;
  OnyxValue* in[2];
  batch_values(ONYX_LOSS_MSE, in);
  onyx_value_release(in[0]);
  in[0] = tensor(ONYX_ELEM_FLOAT32, (int64_t[]){N, D}, 2, x, sizeof x);
  OnyxValue* loss = NULL;
  ots_ok(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 2, &loss));
  assert_true(isfinite(scalar(loss)));
  onyx_value_release(loss);
  onyx_values_release(in, 2);
  OnyxStatus* st = onyx_training_session_optimizer_step(ts);
  if (onyx_status_code(st) == ONYX_NOT_IMPLEMENTED) {
    onyx_status_release(st);
    onyx_training_session_release(ts);
    onyx_checkpoint_release(ck);
    free(dir);
    skip();
  }
  ots_expect_error(st, ONYX_RUNTIME_ERROR, "the accumulated gradient 'W1_grad' holds NaN");
  assert_int_equal(onyx_checkpoint_step(ck), 0);
  Params Q;
  read_params(ck, &Q);
  for (int k = 0; k < NP; k++)
    for (size_t i = 0; i < psizes[k]; i++)
      assert_true(Q.p[k][i] == P.p[k][i]);
  ots_ok(onyx_training_session_set_nonfinite_policy(ts, ONYX_NONFINITE_SKIP_STEP));
  ots_ok(onyx_training_session_optimizer_step(ts));
  assert_int_equal(onyx_training_session_skipped_steps(ts), 1);
  assert_int_equal(onyx_checkpoint_step(ck), 0);
  read_params(ck, &Q);
  for (int k = 0; k < NP; k++)
    for (size_t i = 0; i < psizes[k]; i++)
      assert_true(Q.p[k][i] == P.p[k][i]);
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(dir);
}

static void test_nonfinite_gradient(void** state) {
  (void)state;
  nonfinite_gradient(0);
  nonfinite_gradient(1);
}

/* Options naming what is not there. */
static void test_artifacts_errors(void** state) {
  (void)state;
  Params P;
  init_params(&P, H);
  char* model = path_in("mlp_err.onnx");
  write_mlp(model, &P, H, "W1");
  char* dir = path_in("art_err");
  OnyxTrainingArtifactsOptions o;
  onyx_training_artifacts_options_init(&o);
  const char* bad[] = {"W9"};
  o.trainable = bad;
  o.trainable_count = 1;
  ots_expect_error(onyx_training_artifacts_generate(model, &o, dir), ONYX_INVALID_ARGUMENT,
                   "trainable parameter 'W9'");
  onyx_training_artifacts_options_init(&o);
  const char* frozen[] = {"b2"};
  o.frozen = frozen;
  o.frozen_count = 1;
  o.loss = ONYX_LOSS_MSE;
  ots_ok(onyx_training_artifacts_generate(model, &o, dir));
  OnyxCheckpoint* ck = NULL;
  OnyxTrainingSession* ts = open_ts(dir, &ck);
  assert_int_equal(onyx_checkpoint_parameter_count(ck), NP - 1);
  assert_int_equal(onyx_checkpoint_parameter_trainable(ck, "b2"), -1);
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(dir);
  free(model);
}

/* ONYX_LOSS_MODEL_OUTPUT: the model's first output is the loss (here the
 * mean of y², no labels). */
static void test_loss_model_output(void** state) {
  (void)state;
  Params P;
  init_params(&P, H);
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){N, D});
  otm_initializer(m, "W1", ONYX_ELEM_FLOAT32, 2, (int64_t[]){D, H}, P.p[0]);
  otm_initializer(m, "b1", ONYX_ELEM_FLOAT32, 1, (int64_t[]){H}, P.p[1]);
  otm_initializer(m, "W2", ONYX_ELEM_FLOAT32, 2, (int64_t[]){H, C}, P.p[2]);
  otm_initializer(m, "b2", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C}, P.p[3]);
  otm_node(m, "MatMul", "mm", "x,W1", "xw");
  otm_node(m, "Add", "add", "xw,b1", "pre");
  otm_node(m, "Relu", "relu", "pre", "hid");
  otm_node(m, "Gemm", "gemm", "hid,W2,b2", "y");
  otm_node(m, "Mul", "sq", "y,y", "y2");
  otm_attr_int(otm_node(m, "ReduceMean", "mean", "y2", "L"), "keepdims", 0);
  otm_output(m, "L", ONYX_ELEM_FLOAT32, 0, NULL);
  char* model = path_in("mlp_loss.onnx");
  assert_true(otm_write(m, model));
  otm_free(m);
  OnyxTrainingArtifactsOptions o;
  onyx_training_artifacts_options_init(&o);
  o.loss = ONYX_LOSS_MODEL_OUTPUT;
  char* dir = path_in("art_model_loss");
  ots_ok(onyx_training_artifacts_generate(model, &o, dir));
  OnyxCheckpoint* ck = NULL;
  OnyxTrainingSession* ts = open_ts(dir, &ck);
  assert_int_equal(onyx_training_session_input_count(ts), 1);
  OnyxValue* x = tensor(ONYX_ELEM_FLOAT32, (int64_t[]){N, D}, 2, X, sizeof X);
  OnyxValue* loss = NULL;
  ots_ok(onyx_training_session_train_step(ts, (const OnyxValue* const*)&x, 1, &loss));
  /* MSE against zero targets, computed in C. */
  double buf[NP][D * H > H * C ? D * H : H * C];
  const double* p[NP];
  for (int k = 0; k < NP; k++) {
    for (size_t i = 0; i < psizes[k]; i++)
      buf[k][i] = P.p[k][i];
    p[k] = buf[k];
  }
  double y[N * C], want = 0;
  forward(p, y);
  for (int i = 0; i < N * C; i++)
    want += y[i] * y[i] / (N * C);
  assert_float_equal(scalar(loss), want, 1e-5 * fmax(1, want));
  onyx_value_release(loss);
  onyx_value_release(x);
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(dir);
  free(model);
}

/* Damaged safetensors files: each an error naming the file or the tensor. */
static void test_safetensors_bad_files(void** state) {
  (void)state;
  Params P;
  init_params(&P, H);
  char* dir = make_artifacts("art_st", &P, ONYX_LOSS_MSE, NULL);
  size_t n = strlen(dir) + 64;
  char* cdir = malloc(n);
  char* pf = malloc(n);
  snprintf(cdir, n, "%s/checkpoint", dir);
  snprintf(pf, n, "%s/checkpoint/parameters.safetensors", dir);
  static const struct {
    const char* header;
    const char* needle;
  } cases[] = {
      {"{\"W1\":{\"dtype\":\"F32\",\"shape\":[3,5],\"data_offsets\":[0,64]}}",
       "'W1' has data_offsets"},
      {"{\"W1\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,4]}}", "dtype 'Q7'"},
      {"{\"W1\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
       "'W1' has a bad shape"},
      {"{\"W1\":{\"dtype\":\"F32\",\"shape\":[1]}}", "'W1' needs dtype, shape and data_offsets"},
      {"[1,2]", "no JSON object"},
      {"{\"W1\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,0]}}",
       "'W1' has data_offsets"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    size_t hl = strlen(cases[c].header);
    unsigned char file[256] = {0};
    for (int b = 0; b < 8; b++)
      file[b] = (unsigned char)((uint64_t)hl >> (8 * b));
    memcpy(file + 8, cases[c].header, hl);
    assert_true(otm_write_file(pf, file, 8 + hl + 8)); /* 8 bytes of data */
    OnyxCheckpoint* ck = NULL;
    ots_expect_error(onyx_checkpoint_load(cdir, &ck), ONYX_INVALID_ARGUMENT, cases[c].needle);
    assert_null(ck);
  }
  /* Shorter than its length field. */
  assert_true(otm_write_file(pf, "\x02\0\0\0", 4));
  OnyxCheckpoint* ck = NULL;
  ots_expect_error(onyx_checkpoint_load(cdir, &ck), ONYX_INVALID_ARGUMENT,
                   "parameters.safetensors");
  /* No sidecar. */
  snprintf(pf, n, "%s/checkpoint/checkpoint.json", dir);
  remove(pf);
  ots_expect_error(onyx_checkpoint_load(cdir, &ck), ONYX_NOT_FOUND, "checkpoint.json");
  free(pf);
  free(cdir);
  free(dir);
}

/* --- BatchNormalization and Dropout in training mode ----------------------------------------- */

/* x[4,3] -> MatMul W[3,2] -> BatchNormalization (momentum 0.9) -> Dropout
 * (ratio 0) -> y[4,2]; MSE against TARGET[:, :2]. */
static const float BN_W[6] = {0.5f, -0.3f, 0.8f, 0.1f, -0.6f, 0.9f};
static const float BN_SCALE[2] = {1.5f, 0.7f}, BN_BIAS[2] = {0.1f, -0.2f};
static const float BN_MEAN[2] = {0.3f, -0.1f}, BN_VAR[2] = {1.2f, 0.8f};

static void write_bn(const char* path) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){N, D});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 2, (int64_t[]){D, 2}, BN_W);
  otm_initializer(m, "scale", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2}, BN_SCALE);
  otm_initializer(m, "bias", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2}, BN_BIAS);
  otm_initializer(m, "mean", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2}, BN_MEAN);
  otm_initializer(m, "var", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2}, BN_VAR);
  const float zero = 0.0f;
  otm_initializer(m, "ratio", ONYX_ELEM_FLOAT32, 0, NULL, &zero);
  otm_node(m, "MatMul", "mm", "x,W", "h");
  otm_attr_float(otm_node(m, "BatchNormalization", "bn", "h,scale,bias,mean,var", "z"), "momentum",
                 0.9f);
  otm_node(m, "Dropout", "drop", "z,ratio", "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){N, 2});
  assert_true(otm_write(m, path));
  otm_free(m);
}

/* The MSE of the model with batch statistics (train) or the given running
 * ones; the batch mean and population variance go to bm, bv. */
static double bn_loss(const double* w, bool train, const double* rm, const double* rv, double* bm,
                      double* bv) {
  double h[N][2];
  for (int n = 0; n < N; n++)
    for (int c = 0; c < 2; c++) {
      h[n][c] = 0;
      for (int d = 0; d < D; d++)
        h[n][c] += (double)X[n * D + d] * w[d * 2 + c];
    }
  double sum = 0;
  for (int c = 0; c < 2; c++) {
    double mu = 0, var = 0;
    for (int n = 0; n < N; n++)
      mu += h[n][c] / N;
    for (int n = 0; n < N; n++)
      var += (h[n][c] - mu) * (h[n][c] - mu) / N;
    if (bm) bm[c] = mu;
    if (bv) bv[c] = var;
    double m = train ? mu : rm[c], v = train ? var : rv[c];
    for (int n = 0; n < N; n++) {
      double y = (h[n][c] - m) / sqrt(v + 1e-5) * BN_SCALE[c] + BN_BIAS[c];
      double t = TARGET[n * C + c];
      sum += (y - t) * (y - t);
    }
  }
  return sum / (N * 2);
}

static void test_batchnorm_dropout_training(void** state) {
  (void)state;
  char* model = path_in("bn.onnx");
  write_bn(model);
  char* dir = path_in("art_bn");
  OnyxTrainingArtifactsOptions o;
  onyx_training_artifacts_options_init(&o);
  o.loss = ONYX_LOSS_MSE;
  ots_ok(onyx_training_artifacts_generate(model, &o, dir));
  OnyxCheckpoint* ck = NULL;
  OnyxTrainingSession* ts = open_ts(dir, &ck);
  /* W, scale and bias train; mean and var are buffers; ratio is a setting. */
  assert_int_equal(onyx_checkpoint_parameter_trainable(ck, "W"), 1);
  assert_int_equal(onyx_checkpoint_parameter_trainable(ck, "scale"), 1);
  assert_int_equal(onyx_checkpoint_parameter_trainable(ck, "mean"), 0);
  assert_int_equal(onyx_checkpoint_parameter_trainable(ck, "var"), 0);
  assert_int_equal(onyx_checkpoint_parameter_trainable(ck, "ratio"), -1);
  float t2[N * 2];
  for (int n = 0; n < N; n++)
    for (int c = 0; c < 2; c++)
      t2[n * 2 + c] = TARGET[n * C + c];
  OnyxValue* in[2] = {tensor(ONYX_ELEM_FLOAT32, (int64_t[]){N, D}, 2, X, sizeof X),
                      tensor(ONYX_ELEM_FLOAT32, (int64_t[]){N, 2}, 2, t2, sizeof t2)};
  double w[6], bm[2], bv[2];
  for (int i = 0; i < 6; i++)
    w[i] = BN_W[i];
  const double rm0[2] = {BN_MEAN[0], BN_MEAN[1]}, rv0[2] = {BN_VAR[0], BN_VAR[1]};
  /* Eval before training: the running statistics. */
  OnyxValue* loss = NULL;
  ots_ok(onyx_training_session_eval_step(ts, (const OnyxValue* const*)in, 2, &loss));
  assert_float_equal(scalar(loss), bn_loss(w, false, rm0, rv0, NULL, NULL), 1e-5);
  onyx_value_release(loss);
  /* A train step: batch statistics, and the running ones move by momentum. */
  ots_ok(onyx_training_session_train_step(ts, (const OnyxValue* const*)in, 2, &loss));
  assert_float_equal(scalar(loss), bn_loss(w, true, NULL, NULL, bm, bv), 1e-5);
  onyx_value_release(loss);
  double rm[2], rv[2];
  OnyxValue* v = NULL;
  ots_ok(onyx_checkpoint_get_parameter(ck, "mean", &v));
  const float* got = onyx_tensor_data(onyx_value_tensor(v));
  for (int c = 0; c < 2; c++) {
    rm[c] = 0.9 * rm0[c] + 0.1 * bm[c];
    assert_float_equal(got[c], rm[c], 1e-5);
  }
  onyx_value_release(v);
  ots_ok(onyx_checkpoint_get_parameter(ck, "var", &v));
  got = onyx_tensor_data(onyx_value_tensor(v));
  for (int c = 0; c < 2; c++) {
    rv[c] = 0.9 * rv0[c] + 0.1 * bv[c];
    assert_float_equal(got[c], rv[c], 1e-5);
  }
  onyx_value_release(v);
  /* Eval now reads the updated statistics. */
  ots_ok(onyx_training_session_eval_step(ts, (const OnyxValue* const*)in, 2, &loss));
  assert_float_equal(scalar(loss), bn_loss(w, false, rm, rv, NULL, NULL), 1e-5);
  onyx_value_release(loss);
  onyx_values_release(in, 2);
  onyx_training_session_release(ts);
  onyx_checkpoint_release(ck);
  free(dir);
  free(model);
}

int main(void) {
  init_batch();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_loss_cross_entropy),
      cmocka_unit_test(test_loss_mse),
      cmocka_unit_test(test_loss_bce_with_logits),
      cmocka_unit_test(test_loss_l1),
      cmocka_unit_test(test_accumulation),
      cmocka_unit_test(test_sgd_nesterov_weight_decay),
      cmocka_unit_test(test_adamw),
      cmocka_unit_test(test_grad_clip),
      cmocka_unit_test(test_grad_clip_unset),
      cmocka_unit_test(test_lamb_decreases_loss),
      cmocka_unit_test(test_lr_scheduler),
      cmocka_unit_test(test_checkpoint_roundtrip),
      cmocka_unit_test(test_checkpoint_wrong_model),
      cmocka_unit_test(test_export_for_inference),
      cmocka_unit_test(test_nonfinite_loss),
      cmocka_unit_test(test_nonfinite_gradient),
      cmocka_unit_test(test_set_parameter_after_steps),
      cmocka_unit_test(test_artifacts_errors),
      cmocka_unit_test(test_batchnorm_dropout_training),
      cmocka_unit_test(test_loss_model_output),
      cmocka_unit_test(test_safetensors_bad_files),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
