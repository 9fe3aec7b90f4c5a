/* schemas_training.c — the gradient ops of the com.onyx.training domain
 * (opset 1) that the Gradient expansion (host/training/) emits, with their
 * inference. Semantics, shapes and attributes: docs/training.md, "Gradient
 * ops". Kernels: providers/cpu/cpu_grad.c, cpu_grad_conv.c.
 *
 *   ReluGrad(dY, X) -> dX                 dY * (X > 0)
 *   SigmoidGrad(dY, Y) -> dX              dY * Y * (1 - Y)
 *   TanhGrad(dY, Y) -> dX                 dY * (1 - Y^2)
 *   GeluGrad(dY, X) -> dX                 erf form
 *   FastGeluGrad(dY, X) -> dX             tanh approximation
 *   SoftmaxGrad(dY, Y) -> dX              axis (opset-13 semantics)
 *   LogSoftmaxGrad(dY, Y) -> dX           axis
 *   SoftmaxCrossEntropyLossGrad(dY, log_prob, label, weight?) -> d_logits
 *   ConvGrad(dY, X, W) -> dX?, dW?, dB?   Conv's attributes
 *   MaxPoolGrad(dY, Indices, X_shape) -> dX
 *   AveragePoolGrad(dY, X_shape) -> dX    AveragePool's attributes
 *   BatchNormalizationGrad(dY, X, scale, mean?, inv_std_var?) -> dX, dScale?, dBias?
 *   LayerNormalizationGrad(dY, X, scale, mean, inv_std_var) -> dX, dScale?, dBias?
 *   GatherGrad(X_shape, indices, dY) -> dX  axis
 *   DropoutGrad(dY, mask, ratio?) -> dX
 *
 * and the fused multi-tensor optimizer ops that a training artifact's
 * optimizer model runs (docs/training.md, "Optimizer ops"; kernels:
 * providers/cpu/cpu_optim.c). Each updates all n parameters in one node;
 * attribute n (required) gives the tensor count:
 *
 *   SGDOptimizer(lr, step, P_1..P_n, G_1..G_n[, M_1..M_n]) -> P'_1..P'_n[, M'_1..M'_n]
 *                                         M present iff momentum != 0
 *   AdamWOptimizer(lr, step, P.., G.., M.., V..) -> P'.., M'.., V'..
 *   LambOptimizer(lr, step, P.., G.., M.., V..) -> P'.., M'.., V'..
 *   ClipGradNorm(max_norm, G_1..G_n) -> G'_1..G'_n, total_norm */
#include <stdlib.h>
#include <string.h>
#include "infer_util.h"
#include "schema_internal.h"

#define TRAINING "com.onyx.training"
#define TF       (OX_T(ONYX_ELEM_FLOAT32) | OX_T(ONYX_ELEM_FLOAT64))
#define L(a)     a, (uint8_t)OX_ARRAY_LEN(a)
#define NOATTR   NULL, 0
#define REQ(n, t)                                                                                  \
  { n, t, ONYX_PARAM_SINGLE, 1 }
#define OPT(n, t)                                                                                  \
  { n, t, ONYX_PARAM_OPTIONAL, 1 }

static const OxTypeConstr t_f[] = {{"T", TF}};
/* ConvGrad also in float16 and bfloat16: the gradient of Conv and
 * ConvTranspose in mixed-precision training. */
static const OxTypeConstr t_f_half[] = {
    {"T", TF | OX_T(ONYX_ELEM_FLOAT16) | OX_T(ONYX_ELEM_BFLOAT16)}};
static const OxTypeConstr t_sce[] = {{"T", TF},
                                     {"Tind", OX_T(ONYX_ELEM_INT32) | OX_T(ONYX_ELEM_INT64)}};
/* DropoutGrad's ratio: any float type, as Dropout's own ratio input. */
static const OxTypeConstr t_dropout[] = {{"T", TF}, {"T1", TF}};
static const OxTypeConstr t_gather[] = {{"T", TF},
                                        {"Tind", OX_T(ONYX_ELEM_INT32) | OX_T(ONYX_ELEM_INT64)}};

static const OxFormal f_dy_x[] = {REQ("dY", "T"), REQ("X", "T")};
static const OxFormal f_dy_y[] = {REQ("dY", "T"), REQ("Y", "T")};
static const OxFormal f_dx[] = {REQ("dX", "T")};
static const OxFormal f_sce_in[] = {REQ("dY", "T"), REQ("log_prob", "T"), REQ("label", "Tind"),
                                    OPT("weight", "T")};
static const OxFormal f_sce_out[] = {REQ("d_logits", "T")};
static const OxFormal f_conv_in[] = {REQ("dY", "T"), REQ("X", "T"), REQ("W", "T")};
static const OxFormal f_conv_out[] = {OPT("dX", "T"), OPT("dW", "T"), OPT("dB", "T")};
static const OxFormal f_maxpool_in[] = {REQ("dY", "T"), REQ("Indices", "tensor(int64)"),
                                        REQ("X_shape", "tensor(int64)")};
static const OxFormal f_avgpool_in[] = {REQ("dY", "T"), REQ("X_shape", "tensor(int64)")};
static const OxFormal f_norm_in[] = {REQ("dY", "T"), REQ("X", "T"), REQ("scale", "T"),
                                     REQ("mean", "T"), REQ("inv_std_var", "T")};
/* BatchNormalizationGrad without mean and inv_std_var computes them from X
 * (the batch statistics, with the epsilon attribute). */
static const OxFormal f_bn_in[] = {REQ("dY", "T"), REQ("X", "T"), REQ("scale", "T"),
                                   OPT("mean", "T"), OPT("inv_std_var", "T")};
static const OxFormal f_norm_out[] = {REQ("dX", "T"), OPT("dScale", "T"), OPT("dBias", "T")};
static const OxFormal f_gather_in[] = {REQ("X_shape", "tensor(int64)"), REQ("indices", "Tind"),
                                       REQ("dY", "T")};
static const OxFormal f_dropout_in[] = {REQ("dY", "T"), REQ("mask", "tensor(bool)"),
                                        OPT("ratio", "T1")};

/* The optimizers: lr (scalar, T1), step (int64 scalar), then the variadic
 * tensors of type T, all of one type. */
static const OxTypeConstr t_optim[] = {{"T1", TF}, {"T", TF}};
static const OxFormal f_optim_in[] = {
    REQ("lr", "T1"), REQ("step", "tensor(int64)"), {"tensors", "T", ONYX_PARAM_VARIADIC, 1}};
static const OxFormal f_optim_out[] = {{"outputs", "T", ONYX_PARAM_VARIADIC, 1}};
static const OxFormal f_clip_in[] = {REQ("max_norm", "T1"),
                                     {"gradients", "T", ONYX_PARAM_VARIADIC, 1}};
static const OxFormal f_clip_out[] = {{"outputs", "T", ONYX_PARAM_VARIADIC, 1}};

static const OxAttrSpec a_axis[] = {
    {.name = "axis", .type = ONYX_ATTR_INT, .has_default = true, .def_i = -1},
};
static const OxAttrSpec a_gather[] = {
    {.name = "axis", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
};
static const OxAttrSpec a_sce[] = {
    {.name = "reduction", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "mean"},
    {.name = "ignore_index", .type = ONYX_ATTR_INT},
};
static const OxAttrSpec a_conv[] = {
    {.name = "auto_pad", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "NOTSET"},
    {.name = "dilations", .type = ONYX_ATTR_INTS},
    {.name = "group", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 1},
    {.name = "kernel_shape", .type = ONYX_ATTR_INTS},
    {.name = "pads", .type = ONYX_ATTR_INTS},
    {.name = "strides", .type = ONYX_ATTR_INTS},
};
static const OxAttrSpec a_maxpool[] = {
    {.name = "auto_pad", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "NOTSET"},
    {.name = "ceil_mode", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "dilations", .type = ONYX_ATTR_INTS},
    {.name = "kernel_shape", .type = ONYX_ATTR_INTS},
    {.name = "pads", .type = ONYX_ATTR_INTS},
    {.name = "storage_order", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "strides", .type = ONYX_ATTR_INTS},
};
static const OxAttrSpec a_avgpool[] = {
    {.name = "auto_pad", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "NOTSET"},
    {.name = "ceil_mode", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "count_include_pad", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "dilations", .type = ONYX_ATTR_INTS},
    {.name = "kernel_shape", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "pads", .type = ONYX_ATTR_INTS},
    {.name = "strides", .type = ONYX_ATTR_INTS},
};
static const OxAttrSpec a_bn[] = {
    {.name = "epsilon", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 1e-5f},
};
static const OxAttrSpec a_ln[] = {
    {.name = "axis", .type = ONYX_ATTR_INT, .has_default = true, .def_i = -1},
    {.name = "epsilon", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 1e-5f},
};

static const OxAttrSpec a_sgd[] = {
    {.name = "dampening", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 0.0f},
    {.name = "momentum", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 0.0f},
    {.name = "n", .type = ONYX_ATTR_INT, .required = true},
    {.name = "nesterov", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "weight_decay", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 0.0f},
};
static const OxAttrSpec a_adamw[] = {
    {.name = "beta1", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 0.9f},
    {.name = "beta2", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 0.999f},
    {.name = "epsilon", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 1e-8f},
    {.name = "n", .type = ONYX_ATTR_INT, .required = true},
    {.name = "weight_decay", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 0.01f},
};
static const OxAttrSpec a_lamb[] = {
    {.name = "beta1", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 0.9f},
    {.name = "beta2", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 0.999f},
    {.name = "epsilon", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 1e-6f},
    {.name = "n", .type = ONYX_ATTR_INT, .required = true},
    {.name = "weight_decay", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 0.0f},
};
static const OxAttrSpec a_clip[] = {
    {.name = "n", .type = ONYX_ATTR_INT, .required = true},
};

/* Two inputs that must agree in shape where both are known. */
static OnyxStatus* check_same(OxNode* n, size_t a, size_t b, const char* an, const char* bn) {
  OxDims x, y;
  ox_in_dims(n, a, &x);
  ox_in_dims(n, b, &y);
  if (x.rank < 0 || y.rank < 0) return NULL;
  bool same = x.rank == y.rank;
  for (int32_t i = 0; same && i < x.rank; i++)
    same = x.d[i] < 0 || y.d[i] < 0 || x.d[i] == y.d[i];
  return same ? NULL : ox_node_err(n, "%s and %s must have the same shape", an, bn);
}

/* Elementwise and softmax grads: dX has dY's type and shape (which is X's
 * or Y's). */
static OnyxStatus* infer_elementwise_grad(OxNode* n) {
  OnyxStatus* st = check_same(n, 0, 1, "dY", n->schema ? n->schema->inputs[1].name : "X");
  if (st) return st;
  OxDims d;
  ox_in_dims(n, 0, &d);
  if (d.rank < 0) ox_in_dims(n, 1, &d);
  return ox_out_set(n, 0, ox_in_type(n, 0), &d);
}

static OnyxStatus* infer_softmax_grad(OxNode* n) {
  OxDims d;
  ox_in_dims(n, 1, &d);
  int64_t axis;
  if (d.rank >= 0 && !ox_norm_axis(ox_attr_i(n, "axis", -1), d.rank, &axis))
    return ox_node_err(n, "axis %lld is out of range for rank %d",
                       (long long)ox_attr_i(n, "axis", -1), (int)d.rank);
  return infer_elementwise_grad(n);
}

/* d_logits has log_prob's shape: (N, C, d1, ...); label is (N, d1, ...). */
static OnyxStatus* infer_sce_grad(OxNode* n) {
  OxDims lp, lb;
  ox_in_dims(n, 1, &lp);
  ox_in_dims(n, 2, &lb);
  const char* red = ox_attr_s(n, "reduction", "mean");
  if (strcmp(red, "mean") && strcmp(red, "sum") && strcmp(red, "none"))
    return ox_node_err(n, "reduction '%s' is not one of mean, sum, none", red);
  if (lp.rank >= 0 && lp.rank < 2)
    return ox_node_err(n, "log_prob must be at least 2-D (N, C, ...), not %d-D", (int)lp.rank);
  if (lp.rank >= 2 && lb.rank >= 0) {
    bool ok = lb.rank == lp.rank - 1;
    for (int32_t i = 0; ok && i < lb.rank; i++) {
      int64_t want = lp.d[i == 0 ? 0 : i + 1];
      ok = lb.d[i] < 0 || want < 0 || lb.d[i] == want;
    }
    if (!ok) return ox_node_err(n, "label must have log_prob's shape without its class axis (1)");
  }
  return ox_out_set(n, 0, ox_in_type(n, 1), &lp);
}

/* dX like X, dW like W, dB [W's dim 0]. */
static OnyxStatus* infer_conv_grad(OxNode* n) {
  OxDims x, w, b;
  ox_in_dims(n, 1, &x);
  ox_in_dims(n, 2, &w);
  if (x.rank >= 0 && (x.rank < 3 || x.rank > 5))
    return ox_node_err(n, "X must be 3-D to 5-D (N, C, spatial...), not %d-D", (int)x.rank);
  if (x.rank >= 0 && w.rank >= 0 && x.rank != w.rank)
    return ox_node_err(n, "X (%d-D) and W (%d-D) must have one rank", (int)x.rank, (int)w.rank);
  b.rank = w.rank >= 1 ? 1 : -1;
  b.d[0] = w.rank >= 1 ? w.d[0] : ONYX_DIM_UNKNOWN;
  OnyxElemType t = ox_in_type(n, 0);
  OnyxStatus* st = ox_out_set(n, 0, t, &x);
  if (!st) st = ox_out_set(n, 1, t, &w);
  if (!st) st = ox_out_set(n, 2, t, &b);
  return st;
}

/* dX with dY's type and the value of the int64 X_shape input `si` when it
 * is a constant; else of rank X_shape's length when that is known. */
static OnyxStatus* out_from_shape_input(OxNode* n, size_t si, size_t min_rank) {
  int64_t* v = NULL;
  size_t count = 0;
  bool known = false;
  OnyxStatus* st = ox_const_ints(n, si, &v, &count, &known);
  if (st) return st;
  OxDims d = {.rank = -1};
  if (known) {
    if (count > OX_INFER_MAX_RANK || count < min_rank) {
      free(v);
      return ox_node_err(n, "X_shape has %zu values (%zu to %d expected)", count, min_rank,
                         OX_INFER_MAX_RANK);
    }
    for (size_t i = 0; i < count; i++)
      if (v[i] < 0) {
        long long bad = (long long)v[i];
        free(v);
        return ox_node_err(n, "X_shape[%zu] is %lld (negative)", i, bad);
      }
    d.rank = (int32_t)count;
    for (size_t i = 0; i < count; i++)
      d.d[i] = v[i];
  } else {
    int64_t len = ox_in_len(n, si);
    if (len >= 0 && len <= OX_INFER_MAX_RANK) {
      d.rank = (int32_t)len;
      for (int32_t i = 0; i < d.rank; i++)
        d.d[i] = ONYX_DIM_UNKNOWN;
    }
  }
  free(v);
  const size_t dy = si == 0 ? 2 : 0; /* GatherGrad's dY is its input 2 */
  return ox_out_set(n, 0, ox_in_type(n, dy), &d);
}

static OnyxStatus* infer_maxpool_grad(OxNode* n) {
  OnyxStatus* st = check_same(n, 0, 1, "dY", "Indices");
  return st ? st : out_from_shape_input(n, 2, 3);
}

static OnyxStatus* infer_avgpool_grad(OxNode* n) {
  return out_from_shape_input(n, 1, 3);
}

static OnyxStatus* infer_gather_grad(OxNode* n) {
  return out_from_shape_input(n, 0, 1);
}

/* dX like X; dScale and dBias like scale. */
static OnyxStatus* infer_norm_grad(OxNode* n) {
  OnyxStatus* st = check_same(n, 0, 1, "dY", "X");
  if (st) return st;
  OxDims x, s;
  ox_in_dims(n, 1, &x);
  if (x.rank < 0) ox_in_dims(n, 0, &x);
  ox_in_dims(n, 2, &s);
  OnyxElemType t = ox_in_type(n, 0);
  st = ox_out_set(n, 0, t, &x);
  if (!st) st = ox_out_set(n, 1, t, &s);
  if (!st) st = ox_out_set(n, 2, t, &s);
  return st;
}

static OnyxStatus* infer_dropout_grad(OxNode* n) {
  OnyxStatus* st = check_same(n, 0, 1, "dY", "mask");
  return st ? st : ox_out_like_input(n, 0, 0);
}

/* The optimizer ops' layout: `lead` scalar inputs, then `groups` groups of
 * n tensors shaped like group 0 (P or G); outputs are `out_groups` groups
 * of n shaped like group 0, then `extra_scalar` scalar outputs of T. */
static OnyxStatus* infer_multi_tensor(OxNode* n, size_t lead, size_t groups, size_t out_groups,
                                      size_t extra_scalar) {
  const int64_t cnt = ox_attr_i(n, "n", -1);
  if (cnt < 1 || (uint64_t)cnt > SIZE_MAX / 8)
    return ox_node_err(n, "attribute n is %lld; it must be at least 1", (long long)cnt);
  const size_t k = (size_t)cnt;
  if (n->n_inputs != lead + groups * k)
    return ox_node_err(n, "has %zu inputs; n = %zu needs %zu (%zu scalars and %zu groups of n)",
                       n->n_inputs, k, lead + groups * k, lead, groups);
  if (n->n_outputs > out_groups * k + extra_scalar)
    return ox_node_err(n, "has %zu outputs; n = %zu allows at most %zu", n->n_outputs, k,
                       out_groups * k + extra_scalar);
  for (size_t i = 0; i < lead; i++) {
    OxDims d;
    ox_in_dims(n, i, &d);
    for (int32_t j = 0; j < d.rank; j++)
      if (d.d[j] == 0) return ox_node_err(n, "input %zu must be a scalar (it is empty)", i);
  }
  static const char* const names[] = {"P", "G", "M", "V"};
  const size_t first = groups == 1 ? 1 : 0; /* ClipGradNorm's one group is G */
  for (size_t t = 0; t < k; t++) {
    OxDims p;
    ox_in_dims(n, lead + t, &p);
    for (size_t g = 1; g < groups; g++) {
      OxDims q;
      ox_in_dims(n, lead + g * k + t, &q);
      if (p.rank < 0 || q.rank < 0) continue;
      bool same = p.rank == q.rank;
      for (int32_t i = 0; same && i < p.rank; i++)
        same = p.d[i] < 0 || q.d[i] < 0 || p.d[i] == q.d[i];
      if (!same)
        return ox_node_err(n, "%s_%zu must have %s_%zu's shape", names[first + g], t + 1,
                           names[first], t + 1);
    }
    const OnyxElemType ty = ox_in_type(n, lead + t);
    for (size_t g = 0; g < out_groups; g++) {
      OnyxStatus* st = ox_out_set(n, g * k + t, ty, &p);
      if (st) return st;
    }
  }
  const OxDims scalar = {.rank = 0};
  for (size_t e = 0; e < extra_scalar; e++) {
    OnyxStatus* st = ox_out_set(n, out_groups * k + e, ox_in_type(n, lead), &scalar);
    if (st) return st;
  }
  return NULL;
}

/* SGDOptimizer: the M group only when momentum != 0. */
static OnyxStatus* infer_sgd(OxNode* n) {
  const bool mom = ox_attr_f(n, "momentum", 0.0f) != 0.0f;
  return infer_multi_tensor(n, 2, mom ? 3 : 2, mom ? 2 : 1, 0);
}

static OnyxStatus* infer_adam_like(OxNode* n) {
  return infer_multi_tensor(n, 2, 4, 3, 0);
}

static OnyxStatus* infer_clip(OxNode* n) {
  return infer_multi_tensor(n, 1, 1, 1, 1);
}

#define ROW(op, in, out, tc, attrs, fn)                                                            \
  { TRAINING, op, 1, L(in), L(out), L(tc), attrs, fn, NULL, NULL, true }

static const OxSchema ox_training_rows[] = {
    ROW("ReluGrad", f_dy_x, f_dx, t_f, NOATTR, infer_elementwise_grad),
    ROW("SigmoidGrad", f_dy_y, f_dx, t_f, NOATTR, infer_elementwise_grad),
    ROW("TanhGrad", f_dy_y, f_dx, t_f, NOATTR, infer_elementwise_grad),
    ROW("GeluGrad", f_dy_x, f_dx, t_f, NOATTR, infer_elementwise_grad),
    ROW("FastGeluGrad", f_dy_x, f_dx, t_f, NOATTR, infer_elementwise_grad),
    ROW("SoftmaxGrad", f_dy_y, f_dx, t_f, L(a_axis), infer_softmax_grad),
    ROW("LogSoftmaxGrad", f_dy_y, f_dx, t_f, L(a_axis), infer_softmax_grad),
    ROW("SoftmaxCrossEntropyLossGrad", f_sce_in, f_sce_out, t_sce, L(a_sce), infer_sce_grad),
    ROW("ConvGrad", f_conv_in, f_conv_out, t_f_half, L(a_conv), infer_conv_grad),
    ROW("MaxPoolGrad", f_maxpool_in, f_dx, t_f, L(a_maxpool), infer_maxpool_grad),
    ROW("AveragePoolGrad", f_avgpool_in, f_dx, t_f, L(a_avgpool), infer_avgpool_grad),
    ROW("BatchNormalizationGrad", f_bn_in, f_norm_out, t_f, L(a_bn), infer_norm_grad),
    ROW("LayerNormalizationGrad", f_norm_in, f_norm_out, t_f, L(a_ln), infer_norm_grad),
    ROW("GatherGrad", f_gather_in, f_dx, t_gather, L(a_gather), infer_gather_grad),
    ROW("DropoutGrad", f_dropout_in, f_dx, t_dropout, NOATTR, infer_dropout_grad),
    ROW("SGDOptimizer", f_optim_in, f_optim_out, t_optim, L(a_sgd), infer_sgd),
    ROW("AdamWOptimizer", f_optim_in, f_optim_out, t_optim, L(a_adamw), infer_adam_like),
    ROW("LambOptimizer", f_optim_in, f_optim_out, t_optim, L(a_lamb), infer_adam_like),
    ROW("ClipGradNorm", f_clip_in, f_clip_out, t_optim, L(a_clip), infer_clip),
};

const OxSchemaFamily ox_family_training = {"training", L(ox_training_rows), NULL, 0};
