/* cpu_optim.c — the CPU provider's optimizer kernels: the optimizers of
 * ai.onnx.preview.training (Adagrad, Momentum, Adam, opset 1), float and
 * double, computed in double.
 *
 * Inputs: R (learning rate, scalar), T (update count, int64 scalar), then n
 * tensors X, n gradients G and n (Adagrad, Momentum) or 2n (Adam) state
 * tensors; outputs: n new X, then the new states. Formulas of the ONNX spec:
 *   G' = norm_coefficient * X + G
 *   Adagrad:  r = R / (1 + T * decay_factor); H' = H + G'^2;
 *             X' = X - r * G' / (sqrt(H') + epsilon)
 *   Momentum: b = T > 0 ? beta : 1; V' = alpha * V + b * G';
 *             standard X' = X - R * V'; nesterov X' = X - R * (G' + alpha * V')
 *   Adam:     V' = alpha * V + (1 - alpha) * G'; H' = beta * H + (1 - beta) * G'^2;
 *             r = T > 0 ? R * sqrt(1 - beta^T) / (1 - alpha^T) : R;
 *             X' = (1 - norm_coefficient_post) * (X - r * V' / (sqrt(H') + epsilon)) */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_kernels.h"
#include "cpu_util.h"

typedef enum CfOpt { CF_ADAGRAD, CF_MOMENTUM, CF_ADAM } CfOpt;

typedef struct CfOptState {
  CfOpt op;
  double decay, eps, norm, norm_post, alpha, beta;
  bool nesterov;
} CfOptState;

static OnyxStatus* cf_opt_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  CfOptState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->op = (CfOpt)(intptr_t)user;
  const OnyxHostApi* H = cpu_host;
  s->norm = H->node_attr_float(node, "norm_coefficient", 0.0f);
  s->eps = H->node_attr_float(node, "epsilon", 1e-6f);
  s->decay = H->node_attr_float(node, "decay_factor", 0.0f);
  s->norm_post = H->node_attr_float(node, "norm_coefficient_post", 0.0f);
  s->alpha = H->node_attr_float(node, "alpha", s->op == CF_ADAM ? 0.9f : 0.0f);
  s->beta = H->node_attr_float(node, "beta", s->op == CF_ADAM ? 0.999f : 0.0f);
  if (s->op == CF_MOMENTUM) {
    const char* mode = H->node_attr_string(node, "mode", NULL);
    s->nesterov = mode && !strcmp(mode, "nesterov");
    if (!mode || (!s->nesterov && strcmp(mode, "standard"))) {
      free(s);
      return cpu_error(node, ONYX_INVALID_MODEL, "'mode' must be \"standard\" or \"nesterov\"");
    }
  }
  *state = s;
  return NULL;
}

static double cf_get(const OnyxTensor* t, size_t i) {
  const void* d = cpu_host->tensor_data(t);
  return cpu_host->tensor_elem_type(t) == ONYX_ELEM_FLOAT64 ? ((const double*)d)[i]
                                                            : (double)((const float*)d)[i];
}

static void cf_set(OnyxTensor* t, size_t i, double v) {
  void* d = cpu_host->tensor_mutable_data(t);
  if (cpu_host->tensor_elem_type(t) == ONYX_ELEM_FLOAT64)
    ((double*)d)[i] = v;
  else
    ((float*)d)[i] = (float)v;
}

static bool cf_same_shape(const OnyxTensor* a, const OnyxTensor* b) {
  const OnyxHostApi* H = cpu_host;
  if (H->tensor_rank(a) != H->tensor_rank(b) || H->tensor_elem_type(a) != H->tensor_elem_type(b))
    return false;
  return !H->tensor_rank(a) ||
         !memcmp(H->tensor_dims(a), H->tensor_dims(b), H->tensor_rank(a) * sizeof(int64_t));
}

static OnyxStatus* cf_opt_compute(void* state, OnyxKernelContext* ctx) {
  const CfOptState* s = state;
  const OnyxHostApi* H = cpu_host;
  size_t n_in = H->ctx_input_count(ctx), per = s->op == CF_ADAM ? 4 : 3;
  if (n_in < 2 + per || (n_in - 2) % per)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "has %zu inputs; it needs R, T and %zu tensors per optimized tensor", n_in,
                         per);
  size_t n = (n_in - 2) / per;
  const OnyxTensor* R = H->ctx_input(ctx, 0);
  const OnyxTensor* T = H->ctx_input(ctx, 1);
  if (!R || !T || H->tensor_elem_count(R) != 1 || H->tensor_elem_count(T) != 1 ||
      H->tensor_elem_type(T) != ONYX_ELEM_INT64)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "R and T must be scalars (T int64)");
  double r = cf_get(R, 0);
  int64_t t = *(const int64_t*)H->tensor_data(T);
  if (H->ctx_output_count(ctx) > n * (per - 1))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "has more outputs than %zu", n * (per - 1));
  if (s->op == CF_ADAGRAD) r = r / (1.0 + (double)t * s->decay);
  if (s->op == CF_ADAM && t > 0)
    r = r * sqrt(1.0 - pow(s->beta, (double)t)) / (1.0 - pow(s->alpha, (double)t));
  for (size_t k = 0; k < n; k++) {
    const OnyxTensor* X = H->ctx_input(ctx, 2 + k);
    const OnyxTensor* G = H->ctx_input(ctx, 2 + n + k);
    const OnyxTensor* V = H->ctx_input(ctx, 2 + 2 * n + k);
    const OnyxTensor* W = s->op == CF_ADAM ? H->ctx_input(ctx, 2 + 3 * n + k) : NULL;
    if (!X || !G || !V || (s->op == CF_ADAM && !W) || !cf_same_shape(X, G) ||
        !cf_same_shape(X, V) || (W && !cf_same_shape(X, W)))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "tensor %zu: X, its gradient and its states must have one type and "
                           "shape",
                           k);
    OnyxTensor *xo = NULL, *vo = NULL, *wo = NULL;
    const int64_t* dims = H->tensor_dims(X);
    size_t rank = H->tensor_rank(X);
    OnyxStatus* st = H->ctx_output(ctx, k, dims, rank, &xo);
    if (!st && H->ctx_output_count(ctx) > n + k) st = H->ctx_output(ctx, n + k, dims, rank, &vo);
    if (!st && W && H->ctx_output_count(ctx) > 2 * n + k)
      st = H->ctx_output(ctx, 2 * n + k, dims, rank, &wo);
    if (st) return st;
    size_t count = H->tensor_elem_count(X);
    for (size_t i = 0; i < count; i++) {
      double x = cf_get(X, i), g = s->norm * x + cf_get(G, i), v = cf_get(V, i), xn, vn, wn = 0;
      if (s->op == CF_ADAGRAD) {
        vn = v + g * g;
        xn = x - r * g / (sqrt(vn) + s->eps);
      } else if (s->op == CF_MOMENTUM) {
        vn = s->alpha * v + (t > 0 ? s->beta : 1.0) * g;
        xn = s->nesterov ? x - r * (g + s->alpha * vn) : x - r * vn;
      } else {
        vn = s->alpha * v + (1.0 - s->alpha) * g;
        wn = s->beta * cf_get(W, i) + (1.0 - s->beta) * g * g;
        xn = (1.0 - s->norm_post) * (x - r * vn / (sqrt(wn) + s->eps));
      }
      if (xo) cf_set(xo, i, xn);
      if (vo) cf_set(vo, i, vn);
      if (wo) cf_set(wo, i, wn);
    }
  }
  return NULL;
}

static const int32_t cf_t1[] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64};
static const int32_t cf_t2[] = {ONYX_ELEM_INT64};
static const OnyxTypeConstraint cf_opt_tc[] = {
    {"T1", cf_t1, 2}, {"T2", cf_t2, 1}, {"T3", cf_t1, 2}};

OnyxStatus* cpu_register_optim(OnyxKernelRegistry* r) {
  static const char* const ops[] = {"Adagrad", "Momentum", "Adam"};
  for (size_t i = 0; i < CPU_ARRAY_LEN(ops); i++) {
    OnyxKernelDef d = {.struct_size = sizeof d,
                       .domain = "ai.onnx.preview.training",
                       .op_type = ops[i],
                       .since_version = 1,
                       .end_version = ONYX_OPSET_LATEST,
                       .type_constraints = cf_opt_tc,
                       .type_constraint_count = CPU_ARRAY_LEN(cf_opt_tc),
                       .create = cf_opt_create,
                       .compute = cf_opt_compute,
                       .release = cpu_free_state,
                       .user_data = (void*)(intptr_t)i};
    OnyxStatus* st = cpu_host->register_kernel(r, &d);
    if (st) return st;
  }
  return NULL;
}
