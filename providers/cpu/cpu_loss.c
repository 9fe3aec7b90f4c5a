/* cpu_loss.c — the CPU provider's losses: NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss, computed in double. */
#include "cpu_nnop_util.h"
#include "cpu_types.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss                        */
/* ======================================================================== */

typedef enum Reduction { RED_NONE, RED_SUM, RED_MEAN } Reduction;

typedef struct LossState {
  const OnyxNode* node;
  Reduction reduction;
  bool has_ignore;
  int64_t ignore_index;
  bool softmax; /* SoftmaxCrossEntropyLoss */
} LossState;

static OnyxStatus* loss_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  char red[32];
  nnop_attr_str(node, "reduction", "mean", red, sizeof red);
  Reduction rd;
  if (!strcmp(red, "none"))
    rd = RED_NONE;
  else if (!strcmp(red, "sum"))
    rd = RED_SUM;
  else if (!strcmp(red, "mean"))
    rd = RED_MEAN;
  else
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "unknown reduction '%s'", red);
  LossState* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->node = node;
  s->reduction = rd;
  s->has_ignore = cpu_host->node_attr_type(node, "ignore_index") != ONYX_ATTR_UNDEFINED;
  s->ignore_index = cpu_host->node_attr_int(node, "ignore_index", 0);
  s->softmax = user_data != NULL;
  *state = s;
  return NULL;
}

static OnyxStatus* loss_compute(void* state, OnyxKernelContext* ctx) {
  const LossState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* t = cpu_host->ctx_input(ctx, 1);
  OnyxStatus* st = nnop_need_rank(s->node, x, s->softmax ? "scores" : "input", 2);
  if (st) return st;
  const int64_t* d = cpu_host->tensor_dims(x);
  const size_t r = cpu_host->tensor_rank(x), n = (size_t)d[0], c = (size_t)d[1];
  const size_t inner = cpu_dims_product(d, 2, r);
  const int64_t* td = cpu_host->tensor_dims(t);
  bool ok = cpu_host->tensor_rank(t) == r - 1 && td[0] == d[0];
  for (size_t i = 2; ok && i < r; i++)
    ok = td[i - 1] == d[i];
  if (!ok)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                     "the target's shape must be the input's without dim 1 (C)");
  double *xv, *w = NULL;
  if ((st = nnop_load_d(ctx, x, &xv))) return st;
  if (nnop_has_input(ctx, 2) && (st = nnop_load_param(ctx, s->node, 2, "weight", c, &w))) return st;
  const size_t total = n * c * inner, cnt = n * inner;
  if (s->softmax) /* log-softmax along dim 1, in place */
    for (size_t b = 0; b < n; b++)
      for (size_t i = 0; i < inner; i++) {
        double* v = xv + b * c * inner + i;
        double mx = -INFINITY, sum = 0;
        for (size_t k = 0; k < c; k++)
          mx = v[k * inner] > mx ? v[k * inner] : mx;
        for (size_t k = 0; k < c; k++)
          sum += exp(v[k * inner] - mx);
        const double lse = mx + log(sum);
        for (size_t k = 0; k < c; k++)
          v[k * inner] -= lse;
      }
  double *loss, *wt;
  if ((st = nnop_scratch(ctx, cnt * sizeof(double), (void**)&loss)) ||
      (st = nnop_scratch(ctx, cnt * sizeof(double), (void**)&wt)))
    return st;
  const int32_t tt = cpu_host->tensor_elem_type(t);
  const void* tdata = cpu_host->tensor_data(t);
  double loss_sum = 0, w_sum = 0;
  for (size_t b = 0; b < n; b++)
    for (size_t i = 0; i < inner; i++) {
      const size_t at = b * inner + i;
      const int64_t cls =
          tt == ONYX_ELEM_INT32 ? ((const int32_t*)tdata)[at] : ((const int64_t*)tdata)[at];
      if (s->has_ignore && cls == s->ignore_index) {
        loss[at] = 0;
        wt[at] = 0;
        continue;
      }
      if (cls < 0 || (size_t)cls >= c)
        return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                         "target value %lld is outside the class range [0, %zu)", (long long)cls,
                         c);
      wt[at] = w ? w[cls] : 1.0;
      loss[at] = -xv[(b * c + (size_t)cls) * inner + i] * wt[at];
      loss_sum += loss[at];
      w_sum += wt[at];
    }
  OnyxTensor* y;
  if (s->reduction == RED_NONE) {
    if ((st = cpu_host->ctx_output(ctx, 0, td, r - 1, &y))) return st;
    nnop_store_d(y, loss, cnt);
  } else {
    if ((st = cpu_host->ctx_output(ctx, 0, NULL, 0, &y))) return st;
    double v = s->reduction == RED_SUM ? loss_sum : loss_sum / w_sum;
    nnop_store_d(y, &v, 1);
  }
  if (s->softmax && nnop_has_output(s->node, 1)) {
    OnyxTensor* lp;
    if ((st = cpu_host->ctx_output(ctx, 1, d, r, &lp))) return st;
    nnop_store_d(lp, xv, total);
  }
  return NULL;
}

/* ======================================================================== */
/* Registration                                                              */
/* ======================================================================== */

static const OnyxTypeConstraint TC_LOSS[] = {{"T", cpu_types_real, 4},
                                             {"Tind", cpu_types_index, 2}};

static const int SCE_FLAG = 1;

OnyxStatus* cpu_register_loss(OnyxKernelRegistry* r) {
  const int32_t latest = ONYX_OPSET_LATEST;
  const CpuKernelSpec specs[] = {
      {"NegativeLogLikelihoodLoss", 12, latest, TC_LOSS, CPU_ARRAY_LEN(TC_LOSS), loss_create,
       loss_compute, cpu_free_state, NULL},
      {"SoftmaxCrossEntropyLoss", 12, latest, TC_LOSS, CPU_ARRAY_LEN(TC_LOSS), loss_create,
       loss_compute, cpu_free_state, (void*)&SCE_FLAG},
  };
  return cpu_register_specs(r, specs, CPU_ARRAY_LEN(specs));
}
