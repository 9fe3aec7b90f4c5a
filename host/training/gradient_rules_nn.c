/* gradient_rules_nn.c — gradient rules of the activations, losses,
 * convolution, pooling and normalization ops. Most emit one of the gradient
 * ops of the com.onyx.training domain (schemas/schemas_training.c, CPU
 * kernels in the CPU provider):
 *   Relu -> ReluGrad(dY, X)        Sigmoid -> SigmoidGrad(dY, Y)
 *   Tanh -> TanhGrad(dY, Y)
 *   Gelu (opset 20; com.onyx Gelu): GeluGrad(dY, X) ("none"),
 *     FastGeluGrad(dY, X) ("tanh")
 *   Softmax / LogSoftmax (13+): SoftmaxGrad / LogSoftmaxGrad(dY, Y, axis);
 *     before 13 (the inputs flattened to 2-D at `axis`), composed:
 *     Y (dY - sum(dY Y)) and dY - exp(Y) sum(dY) over the axes from `axis`
 *   SoftmaxCrossEntropyLoss: SoftmaxCrossEntropyLossGrad(dLoss, log_prob,
 *     labels[, weights]) (+ LogSoftmaxGrad for a gradient into log_prob)
 *   NegativeLogLikelihoodLoss: composed: -dLoss w[t] (/ the weight sum for
 *     "mean") at the target class, by OneHot
 *   Conv -> ConvGrad(dY, X, W) -> dX, dW, dB (only the wanted outputs)
 *   ConvTranspose (explicit pads): dX = Conv(dY, W), dW = ConvGrad(X, dY,
 *     W)'s dW (Conv's weight gradient with dY and X swapped), dB = sum(dY)
 *   MaxPool -> MaxPoolGrad(dY, Indices, Shape(X)) (Indices: MaxPool's second
 *     output, or a second MaxPool computing it)
 *   AveragePool -> AveragePoolGrad(dY, Shape(X))
 *   GlobalAveragePool: dY spread evenly over the spatial axes
 *   GlobalMaxPool: dY where x equals the maximum
 *   InstanceNormalization: composed over the spatial axes
 *   LpNormalization (p 1 or 2), Shrink, GroupNormalization (scale per group
 *     at 18, per channel at 21), RMSNormalization, Mish: composed
 *   BatchNormalization, training (batch statistics):
 *     BatchNormalizationGrad(dY, X, scale), which recomputes the batch mean
 *     and 1/sqrt(var + eps) from X; inference: composed (dX = dY
 *     scale / sqrt(var + eps), dScale = sum(dY x_hat), dB = sum(dY))
 *   LayerNormalization (17; com.onyx 1) -> LayerNormalizationGrad(dY, X,
 *     scale, mean, inv_std_var) (mean, inv_std_var: outputs 1 and 2, or
 *     recomputed)
 *   Dropout, training -> DropoutGrad(dY, mask, ratio); inference: dY
 *   com.onyx FusedMatMul (A @ B + Bias + Z, then the activation): the
 *     activation's gradient dP (from y; Gelu: recomputed without it), then
 *     dA = dP B^T, dB = A2^T dP2 (batch axes folded into rows), dBias =
 *     sum of dP over the rows, dZ = dP
 *   com.onyx FusedConv: dP the same way, then ConvGrad(dP, X, W), dZ = dP
 *   com.onyx MultiHeadAttention: the forward pass recomputed per head, then
 *     dV = P^T dO, dS = SoftmaxGrad(dO V^T, P) scale, dQ = dS K,
 *     dK = dS^T Q, dMask = dS (summed to the mask's shape)
 *   LeakyRelu, Elu, Selu, Celu, Softplus, Softsign, HardSigmoid,
 *     ThresholdedRelu, HardSwish, PRelu (both inputs), com.onyx Silu and
 *     HardSwish: composed
 *   Round, Floor, Ceil, Sign, Hardmax: no gradient flows back (derivative 0) */
#include <math.h>
#include <string.h>
#include "gradient_rules.h"

#define TRAIN OX_TRAINING_DOMAIN

static const char* tgrad2(OxGradBuilder* b, const char* op, const char* a, const char* c) {
  const char* ins[] = {a, c};
  return ox_grad_op(b, op, TRAIN, ins, 2, 1, NULL, NULL);
}

static OnyxStatus* rule_relu(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, tgrad2(b, "ReluGrad", GO(0), I(0)));
  return ox_grad_err(b);
}

static OnyxStatus* rule_sigmoid(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, tgrad2(b, "SigmoidGrad", GO(0), O(0)));
  return ox_grad_err(b);
}

static OnyxStatus* rule_tanh(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, tgrad2(b, "TanhGrad", GO(0), O(0)));
  return ox_grad_err(b);
}

static OnyxStatus* rule_gelu(OxGradBuilder* b, const OxNode* n) {
  bool fast = !strcmp(ox_node_attr_string(n, "approximate", "none"), "tanh");
  ox_grad_GI(b, n, 0, tgrad2(b, fast ? "FastGeluGrad" : "GeluGrad", GO(0), I(0)));
  return ox_grad_err(b);
}

/* Softmax and LogSoftmax: the normalized axis. */
static int64_t softmax_axis(const OxNode* n) {
  int64_t r = n->inputs[0]->rank;
  int64_t axis = ox_node_attr_int(n, "axis", n->since_version >= 13 ? -1 : 1);
  return axis < 0 ? axis + r : axis;
}

/* Before opset 13 the ops work on the input flattened to 2-D at `axis`:
 * the sums run over every axis from `axis` on. */
static OnyxStatus* softmax_old(OxGradBuilder* b, const OxNode* n, bool log) {
  int64_t r = n->inputs[0]->rank, axis = softmax_axis(n);
  if (r < 0 || axis < 0 || axis >= r || r > 64)
    return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient needs a known rank and a valid axis");
  int64_t axes[64];
  for (int64_t i = axis; i < r; i++)
    axes[i - axis] = i;
  size_t na = (size_t)(r - axis);
  const char* dy = GO(0);
  if (log) {
    const char* s = ox_grad_reduce_sum(b, dy, axes, na, true);
    ox_grad_GI(b, n, 0, OP2("Sub", dy, OP2("Mul", OP1("Exp", O(0)), s)));
  } else {
    const char* s = ox_grad_reduce_sum(b, OP2("Mul", dy, O(0)), axes, na, true);
    ox_grad_GI(b, n, 0, OP2("Mul", O(0), OP2("Sub", dy, s)));
  }
  return ox_grad_err(b);
}

static OnyxStatus* softmax_rule(OxGradBuilder* b, const OxNode* n, bool log) {
  if (n->since_version < 13) return softmax_old(b, n, log);
  const char* g = tgrad2(b, log ? "LogSoftmaxGrad" : "SoftmaxGrad", GO(0), O(0));
  ox_grad_attr_int(b, "axis", ox_node_attr_int(n, "axis", -1));
  ox_grad_GI(b, n, 0, g);
  return ox_grad_err(b);
}

static OnyxStatus* rule_softmax(OxGradBuilder* b, const OxNode* n) {
  return softmax_rule(b, n, false);
}

static OnyxStatus* rule_logsoftmax(OxGradBuilder* b, const OxNode* n) {
  return softmax_rule(b, n, true);
}

static OnyxStatus* rule_sce(OxGradBuilder* b, const OxNode* n) {
  if (!WANTS(0)) return NULL;
  const char* lp = O(1);
  if (!lp) { /* log_prob along the class axis 1 */
    if (ox_grad_opset(b) < 13 && n->inputs[0]->rank != 2)
      return ox_status(ONYX_NOT_IMPLEMENTED,
                       "the gradient needs the node's log_prob output (output 1) for inputs "
                       "of rank %d before opset 13",
                       (int)n->inputs[0]->rank);
    lp = OP1("LogSoftmax", I(0));
    ox_grad_attr_int(b, "axis", 1);
  }
  if (GO(0)) {
    const char* ins[] = {GO(0), lp, I(1), I(2)};
    const char* g = ox_grad_op(b, "SoftmaxCrossEntropyLossGrad", TRAIN, ins,
                               n->n_inputs > 2 && I(2) ? 4 : 3, 1, NULL, NULL);
    ox_grad_attr_copy(b, n, "reduction");
    ox_grad_attr_copy(b, n, "ignore_index");
    ox_grad_GI(b, n, 0, g);
  }
  if (GO(1)) {
    const char* g = tgrad2(b, "LogSoftmaxGrad", GO(1), lp);
    ox_grad_attr_int(b, "axis", 1);
    ox_grad_GI(b, n, 0, g);
  }
  return ox_grad_err(b);
}

static OnyxStatus* rule_nll(OxGradBuilder* b, const OxNode* n) {
  if (!WANTS(0)) return NULL;
  OnyxElemType T = TI(0), TT = TI(1);
  const char* red = ox_node_attr_string(n, "reduction", "mean");
  const OxAttr* ii = ox_node_attr(n, "ignore_index");
  const char* t = I(1);
  const char* c = NULL; /* per-position weight, shaped like the target */
  if (ii) {
    const char* is_ii = OP2("Equal", t, ox_grad_scalar(b, TT, (double)ii->i));
    t = OP3("Where", is_ii, ox_grad_scalar(b, TT, 0), t);
    c = ox_grad_cast(b, OP1("Not", is_ii), T);
  }
  if (n->n_inputs > 2 && I(2)) {
    const char* w = OP2("Gather", I(2), t);
    c = c ? OP2("Mul", c, w) : w;
  }
  const char* per = OP1("Neg", GO(0));
  if (c) per = OP2("Mul", per, c);
  per = OP2("Expand", per, OP1("Shape", I(1)));
  if (!strcmp(red, "mean")) {
    const char* den = c ? OP1("ReduceSum", c) : ox_grad_cast(b, OP1("Size", I(1)), T);
    if (c) ox_grad_attr_int(b, "keepdims", 0);
    per = OP2("Div", per, den);
  }
  const int64_t one[1] = {1}, vals[2] = {0, 1};
  const char* depth = OP2("Gather", OP1("Shape", I(0)), ox_grad_i64(b, one, 1));
  const char* values = ox_grad_cast(b, ox_grad_i64(b, vals, 2), T);
  const char* oh = OP3("OneHot", t, depth, values);
  ox_grad_attr_int(b, "axis", 1);
  ox_grad_GI(b, n, 0, OP2("Mul", oh, ox_grad_unsqueeze(b, per, one, 1)));
  return ox_grad_err(b);
}

static OnyxStatus* rule_conv(OxGradBuilder* b, const OxNode* n) {
  bool want[3] = {WANTS(0), WANTS(1), n->n_inputs > 2 && WANTS(2)};
  if (!want[0] && !want[1] && !want[2]) return NULL;
  const char* ins[] = {GO(0), I(0), I(1)};
  const char* outs[3] = {0};
  ox_grad_op(b, "ConvGrad", TRAIN, ins, 3, 3, want, outs);
  ox_grad_attrs_copy(b, n, NULL);
  for (size_t i = 0; i < 3; i++)
    if (want[i]) ox_grad_GI(b, n, i, outs[i]);
  return ox_grad_err(b);
}

static OnyxStatus* rule_maxpool(OxGradBuilder* b, const OxNode* n) {
  if (!WANTS(0)) return NULL;
  if (ox_node_attr_int(n, "storage_order", 0) != 0)
    return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient is built for storage_order 0 only");
  const char* idx = O(1);
  if (!idx) { /* a second MaxPool for the indices */
    const char* ins[] = {I(0)};
    const char* outs[2] = {0};
    ox_grad_op(b, "MaxPool", "", ins, 1, 2, NULL, outs);
    ox_grad_attrs_copy(b, n, NULL);
    idx = outs[1];
  }
  const char* ins[] = {GO(0), idx, OP1("Shape", I(0))};
  const char* g = ox_grad_op(b, "MaxPoolGrad", TRAIN, ins, 3, 1, NULL, NULL);
  ox_grad_attrs_copy(b, n, NULL);
  ox_grad_GI(b, n, 0, g);
  return ox_grad_err(b);
}

static OnyxStatus* rule_avgpool(OxGradBuilder* b, const OxNode* n) {
  const char* g = tgrad2(b, "AveragePoolGrad", GO(0), OP1("Shape", I(0)));
  ox_grad_attrs_copy(b, n, NULL);
  ox_grad_GI(b, n, 0, g);
  return ox_grad_err(b);
}

static OnyxStatus* rule_global_avgpool(OxGradBuilder* b, const OxNode* n) {
  const char* ratio = OP2("Div", ox_grad_cast(b, OP1("Size", O(0)), TI(0)),
                          ox_grad_cast(b, OP1("Size", I(0)), TI(0)));
  ox_grad_GI(b, n, 0, OP2("Mul", ox_grad_expand_like(b, GO(0), I(0), TI(0)), ratio));
  return ox_grad_err(b);
}

/* The axes of a rank-r NC... tensor other than 1, and 1..r-2 (to unsqueeze
 * a [C] vector to [C, 1, ...]). */
static size_t bn_axes(int32_t r, int64_t* red, int64_t* uns) {
  size_t k = 0;
  red[k++] = 0;
  for (int32_t i = 2; i < r; i++) {
    red[k++] = i;
    uns[i - 2] = i - 1;
  }
  return k;
}

static OnyxStatus* rule_batchnorm(OxGradBuilder* b, const OxNode* n) {
  int32_t r = n->inputs[0]->rank;
  if (r < 2 || r > 64) return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient needs X of known rank");
  bool training = n->since_version >= 14 ? ox_node_attr_int(n, "training_mode", 0) != 0
                                         : n->n_outputs > 1 && O(1);
  int64_t red[64], uns[64];
  size_t nr = bn_axes(r, red, uns), nu = (size_t)(r - 2);
  const char* dy = GO(0);
  if (!dy) return NULL; /* no gradient through the running statistics */
  if (training) {
    /* Without mean and inv_std_var the gradient op computes the batch
     * statistics itself, in the pass over X it makes anyway. */
    const char* ins[] = {dy, I(0), I(1)};
    /* dX is a required output of the gradient op. */
    bool want[3] = {true, WANTS(1), WANTS(2)};
    const char* outs[3] = {0};
    if (!WANTS(0) && !want[1] && !want[2]) return NULL;
    ox_grad_op(b, "BatchNormalizationGrad", TRAIN, ins, 3, 3, want, outs);
    ox_grad_attr_float(b, "epsilon", ox_node_attr_float(n, "epsilon", 1e-5f));
    for (size_t i = 0; i < 3; i++)
      if (want[i]) ox_grad_GI(b, n, i, outs[i]);
    return ox_grad_err(b);
  }
  const char* eps = K(ox_node_attr_float(n, "epsilon", 1e-5f));
  const char* inv = OP1("Reciprocal", OP1("Sqrt", OP2("Add", I(4), eps)));
  const char* inv_u = nu ? ox_grad_unsqueeze(b, inv, uns, nu) : inv;
  if (WANTS(0)) {
    const char* sc = OP2("Mul", I(1), inv);
    ox_grad_GI(b, n, 0, OP2("Mul", dy, nu ? ox_grad_unsqueeze(b, sc, uns, nu) : sc));
  }
  if (WANTS(1)) {
    const char* mu = nu ? ox_grad_unsqueeze(b, I(3), uns, nu) : I(3);
    const char* xhat = OP2("Mul", OP2("Sub", I(0), mu), inv_u);
    ox_grad_GI(b, n, 1, ox_grad_reduce_sum(b, OP2("Mul", dy, xhat), red, nr, false));
  }
  if (WANTS(2)) ox_grad_GI(b, n, 2, ox_grad_reduce_sum(b, dy, red, nr, false));
  return ox_grad_err(b);
}

static OnyxStatus* rule_layernorm(OxGradBuilder* b, const OxNode* n) {
  const char* dy = GO(0);
  if (!dy) return NULL;
  int64_t r = n->inputs[0]->rank, axis = ox_node_attr_int(n, "axis", -1);
  if (r < 1 || r > 64) return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient needs X of known rank");
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return ox_status(ONYX_INVALID_MODEL, "axis is out of range");
  const char *mean = O(1), *inv = O(2);
  if (mean && inv && TO(1) != TI(0)) { /* stash_type: the statistics' own type */
    mean = ox_grad_cast(b, mean, TI(0));
    inv = ox_grad_cast(b, inv, TI(0));
  }
  if (!mean || !inv) { /* recomputed: over the axes from `axis` on, kept as 1s */
    int64_t axes[64];
    for (int64_t i = axis; i < r; i++)
      axes[i - axis] = i;
    size_t na = (size_t)(r - axis);
    const char* m = ox_grad_reduce(b, "ReduceMean", I(0), axes, na, true);
    const char* dev = OP2("Sub", I(0), m);
    const char* var = ox_grad_reduce(b, "ReduceMean", OP2("Mul", dev, dev), axes, na, true);
    const char* eps = K(ox_node_attr_float(n, "epsilon", 1e-5f));
    mean = m;
    inv = OP1("Reciprocal", OP1("Sqrt", OP2("Add", var, eps)));
  }
  bool want[3] = {true, WANTS(1), n->n_inputs > 2 && WANTS(2)}; /* dX: required */
  if (!WANTS(0) && !want[1] && !want[2]) return ox_grad_err(b);
  const char* ins[] = {dy, I(0), I(1), mean, inv};
  const char* outs[3] = {0};
  ox_grad_op(b, "LayerNormalizationGrad", TRAIN, ins, 5, 3, want, outs);
  ox_grad_attr_int(b, "axis", axis);
  ox_grad_attr_float(b, "epsilon", ox_node_attr_float(n, "epsilon", 1e-5f));
  for (size_t i = 0; i < 3; i++)
    if (want[i]) ox_grad_GI(b, n, i, outs[i]);
  return ox_grad_err(b);
}

static OnyxStatus* rule_dropout(OxGradBuilder* b, const OxNode* n) {
  const char* dy = GO(0);
  if (!dy) return NULL;
  /* Training mode: input 2 (opset 12 on); a constant decides here, a run-time
   * value through Where. */
  const OxValue* tm = n->since_version >= 12 && n->n_inputs > 2 ? n->inputs[2] : NULL;
  bool constant = !tm || tm->constant;
  bool on = tm && tm->constant && tm->constant->type == ONYX_ELEM_BOOL && tm->constant->count &&
            *(const uint8_t*)tm->constant->data;
  if (constant && !on) {
    ox_grad_GI(b, n, 0, dy);
    return ox_grad_err(b);
  }
  if (!O(1))
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "in training mode the gradient needs the node's mask output (output 1)");
  const char* ins[] = {dy, O(1), I(1)};
  const char* g = ox_grad_op(b, "DropoutGrad", TRAIN, ins, I(1) ? 3 : 2, 1, NULL, NULL);
  if (!constant) g = OP3("Where", tm->name, g, dy);
  ox_grad_GI(b, n, 0, g);
  return ox_grad_err(b);
}

/* com.onyx FusedMatMul / FusedConv: the gradient of the pre-activation sum
 * (Relu, LeakyRelu and Clip from y's sign or range; Gelu from the sum
 * recomputed without the activation). */
static const char* fused_act_grad(OxGradBuilder* b, const OxNode* n) {
  const char* act = ox_node_attr_string(n, "activation", "");
  const char *dy = GO(0), *y = O(0);
  OnyxElemType T = TO(0);
  if (!*act) return dy;
  const char* z = ox_grad_scalar(b, T, 0);
  if (!strcmp(act, "Relu")) return OP3("Where", OP2("Greater", y, z), dy, z);
  if (!strcmp(act, "LeakyRelu")) {
    const char* s = OP2("Mul", dy, ox_grad_scalar(b, T, ox_node_attr_float(n, "alpha", 0.01f)));
    return OP3("Where", OP2("Greater", y, z), dy, s);
  }
  if (!strcmp(act, "Clip")) {
    const char* lo = ox_grad_scalar(b, T, ox_node_attr_float(n, "clip_min", 0));
    const char* hi = ox_grad_scalar(b, T, ox_node_attr_float(n, "clip_max", 0));
    return OP3("Where", OP2("And", OP2("Greater", y, lo), OP2("Less", y, hi)), dy, z);
  }
  if (!strcmp(act, "Gelu")) {
    const char* ins[4] = {I(0), I(1), I(2), I(3)};
    const char* pre = ox_grad_op(b, n->op_type, n->domain, ins, n->n_inputs, 1, NULL, NULL);
    ox_grad_attrs_copy(b, n, "activation");
    return tgrad2(b, "GeluGrad", dy, pre);
  }
  ox_grad_fail(b, ox_status(ONYX_NOT_IMPLEMENTED, "no gradient for the activation '%s'", act));
  return "";
}

static OnyxStatus* rule_fused_matmul(OxGradBuilder* b, const OxNode* n) {
  int32_t ra = n->inputs[0]->rank;
  if (ra < 2 || ra > 64 || n->inputs[1]->rank != 2)
    return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient needs A of known rank >= 2 and a 2-D B");
  const char* dp = fused_act_grad(b, n);
  if (WANTS(0)) {
    const char* bt = OP1("Transpose", I(1));
    ox_grad_GI(b, n, 0, OP2("MatMul", dp, bt));
  }
  /* The batch axes of A folded into the rows: dB = A2^T dP2. */
  const char* d2 = WANTS(1) || WANTS(2) ? OP1("Flatten", dp) : NULL;
  if (d2) ox_grad_attr_int(b, "axis", ra - 1);
  if (WANTS(1)) {
    const char* a2 = OP1("Flatten", I(0));
    ox_grad_attr_int(b, "axis", ra - 1);
    ox_grad_GI(b, n, 1, OP2("MatMul", OP1("Transpose", a2), d2));
  }
  if (WANTS(2)) {
    const int64_t ax[1] = {0};
    ox_grad_GI(b, n, 2, ox_grad_reduce_sum(b, d2, ax, 1, false));
  }
  if (WANTS(3)) ox_grad_GI(b, n, 3, dp);
  return ox_grad_err(b);
}

static OnyxStatus* rule_fused_conv(OxGradBuilder* b, const OxNode* n) {
  const char* dp = fused_act_grad(b, n);
  bool want[3] = {WANTS(0), WANTS(1), n->n_inputs > 2 && WANTS(2)};
  if (want[0] || want[1] || want[2]) {
    const char* ins[] = {dp, I(0), I(1)};
    const char* outs[3] = {0};
    ox_grad_op(b, "ConvGrad", TRAIN, ins, 3, 3, want, outs);
    const char* conv_attrs[] = {"auto_pad",     "dilations", "group",
                                "kernel_shape", "pads",      "strides"};
    for (size_t i = 0; i < OX_ARRAY_LEN(conv_attrs); i++)
      ox_grad_attr_copy(b, n, conv_attrs[i]);
    for (size_t i = 0; i < 3; i++)
      if (want[i]) ox_grad_GI(b, n, i, outs[i]);
  }
  if (WANTS(3)) ox_grad_GI(b, n, 3, dp);
  return ox_grad_err(b);
}

/* ConvTranspose(X, W) is the data gradient of Conv(., W) applied to X:
 * dX = Conv(dY, W) with the same strides, pads, dilations and group; dW is
 * ConvGrad's weight gradient with the roles of its dY and X swapped
 * (ConvGrad(X, dY, W).dW); dB = dY summed over N and the spatial axes. */
static OnyxStatus* rule_conv_transpose(OxGradBuilder* b, const OxNode* n) {
  if (ox_node_attr(n, "output_shape") ||
      strcmp(ox_node_attr_string(n, "auto_pad", "NOTSET"), "NOTSET"))
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "the gradient is built for explicit pads (no output_shape or auto_pad)");
  const char* conv_attrs[] = {"dilations", "group", "kernel_shape", "pads", "strides"};
  if (WANTS(0)) {
    const char* g = OP2("Conv", GO(0), I(1));
    for (size_t i = 0; i < OX_ARRAY_LEN(conv_attrs); i++)
      ox_grad_attr_copy(b, n, conv_attrs[i]);
    ox_grad_GI(b, n, 0, g);
  }
  if (WANTS(1)) {
    const char* ins[] = {I(0), GO(0), I(1)};
    const char* outs[3] = {0};
    const bool want[3] = {false, true, false};
    ox_grad_op(b, "ConvGrad", TRAIN, ins, 3, 3, want, outs);
    for (size_t i = 0; i < OX_ARRAY_LEN(conv_attrs); i++)
      ox_grad_attr_copy(b, n, conv_attrs[i]);
    ox_grad_GI(b, n, 1, outs[1]);
  }
  if (n->n_inputs > 2 && WANTS(2)) {
    int32_t r = n->outputs[0]->rank;
    if (r < 2 || r > 64)
      return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient needs Y of known rank");
    int64_t red[64], uns[64];
    size_t nr = bn_axes(r, red, uns);
    ox_grad_GI(b, n, 2, ox_grad_reduce_sum(b, GO(0), red, nr, false));
  }
  return ox_grad_err(b);
}

static const char* mha_perm(OxGradBuilder* b, const char* x, const int64_t* perm) {
  const char* t = OP1("Transpose", x);
  ox_grad_attr_ints(b, "perm", perm, 4);
  return t;
}

/* com.onyx MultiHeadAttention: the forward pass again in ONNX ops (heads
 * split out: [B, H, S, D]), then dV = P^T dO, dP = dO V^T, dS =
 * SoftmaxGrad(dP, P) scale, dQ = dS K, dK = dS^T Q, dMask = dS summed down
 * to the mask's shape; packed QKV: the three concatenated. */
static OnyxStatus* rule_mha(OxGradBuilder* b, const OxNode* n) {
  int64_t h = ox_node_attr_int(n, "num_heads", 0);
  double scale = ox_node_attr_float(n, "scale", 1.0f);
  const OxValue* q = n->inputs[0];
  bool packed = !I(1) && !I(2);
  if (h <= 0 || q->rank != 3 || (!packed && (!I(1) || !I(2))))
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "the gradient needs num_heads > 0, Q of rank 3, and K and V both given or "
                     "both absent");
  int64_t hd = q->dims[2] < 0 ? -1 : packed ? q->dims[2] / 3 : q->dims[2];
  if (scale == 0) { /* 1/sqrt(head size) */
    if (hd < 0) return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient needs Q's last dim");
    scale = 1.0 / sqrt((double)(hd / h));
  }
  const char *Q = I(0), *Kv = I(1), *Vv = I(2);
  if (packed) {
    const char* parts[3] = {0};
    const char* ins[] = {Q};
    ox_grad_op(b, "Split", "", ins, 1, 3, NULL, parts);
    ox_grad_attr_int(b, "axis", 2);
    if (ox_grad_opset(b) >= 18) ox_grad_attr_int(b, "num_outputs", 3);
    Q = parts[0], Kv = parts[1], Vv = parts[2];
  }
  const int64_t heads[4] = {0, 0, h, -1}, merged[3] = {0, 0, -1};
  const int64_t p0213[4] = {0, 2, 1, 3}, p0132[4] = {0, 1, 3, 2};
  const char* hs = ox_grad_i64(b, heads, 4);
  const char* Qh = mha_perm(b, OP2("Reshape", Q, hs), p0213);
  const char* Kh = mha_perm(b, OP2("Reshape", Kv, hs), p0213);
  const char* Vh = mha_perm(b, OP2("Reshape", Vv, hs), p0213);
  const char* sc = OP2("Mul", OP2("MatMul", Qh, mha_perm(b, Kh, p0132)), K(scale));
  if (n->n_inputs > 3 && I(3)) sc = OP2("Add", sc, I(3));
  const char* P = OP1("Softmax", sc);
  ox_grad_attr_int(b, "axis", -1);
  const char* dO = mha_perm(b, OP2("Reshape", GO(0), hs), p0213);
  const char* dV = OP2("MatMul", mha_perm(b, P, p0132), dO);
  const char* dP = OP2("MatMul", dO, mha_perm(b, Vh, p0132));
  const char* dS = tgrad2(b, "SoftmaxGrad", dP, P);
  ox_grad_attr_int(b, "axis", -1);
  if (n->n_inputs > 3 && WANTS(3)) {
    const OxValue* kv = packed ? q : n->inputs[1];
    int64_t dims[4] = {q->dims[0], h, q->dims[1], kv->rank == 3 ? kv->dims[1] : -1};
    ox_grad_GI_from(b, n, 3, dS, dims, 4);
  }
  const char* dSs = OP2("Mul", dS, K(scale));
  const char* ms = ox_grad_i64(b, merged, 3);
  const char* dQ = OP2("Reshape", mha_perm(b, OP2("MatMul", dSs, Kh), p0213), ms);
  const char* dK =
      OP2("Reshape", mha_perm(b, OP2("MatMul", mha_perm(b, dSs, p0132), Qh), p0213), ms);
  const char* dVm = OP2("Reshape", mha_perm(b, dV, p0213), ms);
  if (packed) {
    const char* g = OP3("Concat", dQ, dK, dVm);
    ox_grad_attr_int(b, "axis", 2);
    ox_grad_GI(b, n, 0, g);
  } else {
    ox_grad_GI(b, n, 0, dQ);
    ox_grad_GI(b, n, 1, dK);
    ox_grad_GI(b, n, 2, dVm);
  }
  return ox_grad_err(b);
}

/* InstanceNormalization: per (n, c), x_hat = (x - mean) / sqrt(var + eps)
 * over the spatial axes; with g = dY scale: dX = inv (g - mean(g) - x_hat
 * mean(g x_hat)), dScale = sum(dY x_hat), dB = sum(dY) over N and space. */
static OnyxStatus* rule_instance_norm(OxGradBuilder* b, const OxNode* n) {
  int32_t r = n->inputs[0]->rank;
  if (r < 3 || r > 64) return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient needs X of rank >= 3");
  int64_t red[64], uns[64], sp[64];
  size_t nr = bn_axes(r, red, uns), nu = (size_t)(r - 2);
  for (size_t i = 0; i < nu; i++)
    sp[i] = (int64_t)i + 2;
  const char* dy = GO(0);
  const char* m = ox_grad_reduce(b, "ReduceMean", I(0), sp, nu, true);
  const char* dev = OP2("Sub", I(0), m);
  const char* var = ox_grad_reduce(b, "ReduceMean", OP2("Mul", dev, dev), sp, nu, true);
  const char* inv =
      OP1("Reciprocal", OP1("Sqrt", OP2("Add", var, K(ox_node_attr_float(n, "epsilon", 1e-5f)))));
  const char* xhat = OP2("Mul", dev, inv);
  if (WANTS(0)) {
    const char* g = OP2("Mul", dy, ox_grad_unsqueeze(b, I(1), uns, nu));
    const char* mg = ox_grad_reduce(b, "ReduceMean", g, sp, nu, true);
    const char* mgx = ox_grad_reduce(b, "ReduceMean", OP2("Mul", g, xhat), sp, nu, true);
    const char* in = OP2("Sub", OP2("Sub", g, mg), OP2("Mul", xhat, mgx));
    ox_grad_GI(b, n, 0, OP2("Mul", inv, in));
  }
  if (WANTS(1)) ox_grad_GI(b, n, 1, ox_grad_reduce_sum(b, OP2("Mul", dy, xhat), red, nr, false));
  if (WANTS(2)) ox_grad_GI(b, n, 2, ox_grad_reduce_sum(b, dy, red, nr, false));
  return ox_grad_err(b);
}

/* GlobalMaxPool: dY where x equals the maximum (ties: each). */
static OnyxStatus* rule_global_maxpool(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, OP3("Where", OP2("Equal", I(0), O(0)), GO(0), K(0)));
  return ox_grad_err(b);
}

/* Shrink: dY where |x| > lambd (the output moves with x there), else 0. */
static OnyxStatus* rule_shrink(OxGradBuilder* b, const OxNode* n) {
  const char* on = OP2("Greater", OP1("Abs", I(0)), K(ox_node_attr_float(n, "lambd", 0.5f)));
  ox_grad_GI(b, n, 0, OP3("Where", on, GO(0), K(0)));
  return ox_grad_err(b);
}

/* LpNormalization along `axis`, y = x / |x|_p: with s = sum(dY y) along the
 * axis, dX = (dY - y s) / |x|_2 for p = 2 and (dY - sign(x) s) / |x|_1 for
 * p = 1. */
static OnyxStatus* rule_lp_norm(OxGradBuilder* b, const OxNode* n) {
  int64_t r = n->inputs[0]->rank, axis = ox_node_attr_int(n, "axis", -1);
  int64_t p = ox_node_attr_int(n, "p", 2);
  if (axis < 0) axis += r;
  if (r < 1 || axis < 0 || axis >= r || (p != 1 && p != 2))
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "the gradient needs a known rank, a valid axis, p 1 or 2");
  const int64_t ax[1] = {axis};
  const char* norm = ox_grad_reduce(b, p == 2 ? "ReduceL2" : "ReduceL1", I(0), ax, 1, true);
  const char* sdy = ox_grad_reduce_sum(b, OP2("Mul", GO(0), O(0)), ax, 1, true);
  const char* dir = p == 2 ? O(0) : OP1("Sign", I(0));
  ox_grad_GI(b, n, 0, OP2("Div", OP2("Sub", GO(0), OP2("Mul", dir, sdy)), norm));
  return ox_grad_err(b);
}

/* GroupNormalization: X viewed as [N, G, rest], normalized per (n, g); the
 * scale and bias are per group (opset 18) or per channel (21). */
static OnyxStatus* rule_group_norm(OxGradBuilder* b, const OxNode* n) {
  int32_t r = n->inputs[0]->rank;
  int64_t groups = ox_node_attr_int(n, "num_groups", 0);
  if (r < 2 || r > 64 || groups <= 0)
    return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient needs X of rank >= 2 and num_groups");
  bool per_channel = n->since_version >= 21;
  int64_t red[64], uns[64];
  size_t nr = bn_axes(r, red, uns), nu = (size_t)(r - 2);
  const int64_t gshape[3] = {0, groups, -1}, a2[1] = {2}, a02[2] = {0, 2}, g1[3] = {1, groups, 1};
  const char* gs = ox_grad_i64(b, gshape, 3);
  const char* xs = OP1("Shape", I(0));
  const char* xg = OP2("Reshape", I(0), gs);
  const char* m = ox_grad_reduce(b, "ReduceMean", xg, a2, 1, true);
  const char* dev = OP2("Sub", xg, m);
  const char* var = ox_grad_reduce(b, "ReduceMean", OP2("Mul", dev, dev), a2, 1, true);
  const char* inv =
      OP1("Reciprocal", OP1("Sqrt", OP2("Add", var, K(ox_node_attr_float(n, "epsilon", 1e-5f)))));
  const char* xhat_g = OP2("Mul", dev, inv);
  const char* dy = GO(0);
  if (WANTS(0)) {
    const char* gg; /* dY * scale, viewed as [N, G, rest] */
    if (per_channel) {
      gg = OP2("Reshape", OP2("Mul", dy, ox_grad_unsqueeze(b, I(1), uns, nu)), gs);
    } else {
      const char* sg = OP2("Reshape", I(1), ox_grad_i64(b, g1, 3));
      gg = OP2("Mul", OP2("Reshape", dy, gs), sg);
    }
    const char* mg = ox_grad_reduce(b, "ReduceMean", gg, a2, 1, true);
    const char* mgx = ox_grad_reduce(b, "ReduceMean", OP2("Mul", gg, xhat_g), a2, 1, true);
    const char* in = OP2("Sub", OP2("Sub", gg, mg), OP2("Mul", xhat_g, mgx));
    ox_grad_GI(b, n, 0, OP2("Reshape", OP2("Mul", inv, in), xs));
  }
  for (size_t k = 1; k <= 2; k++) {
    if (!WANTS(k)) continue;
    const char* t = k == 1 ? OP2("Mul", dy, OP2("Reshape", xhat_g, xs)) : dy;
    ox_grad_GI(b, n, k,
               per_channel ? ox_grad_reduce_sum(b, t, red, nr, false)
                           : ox_grad_reduce_sum(b, OP2("Reshape", t, gs), a02, 2, false));
  }
  return ox_grad_err(b);
}

/* RMSNormalization: r = 1 / sqrt(mean(x^2) + eps) over the axes from `axis`,
 * x_hat = x r, y = x_hat scale; with g = dY scale: dX = r (g - x_hat
 * mean(g x_hat)), dScale = dY x_hat summed down to scale's shape. */
static OnyxStatus* rule_rms_norm(OxGradBuilder* b, const OxNode* n) {
  int64_t r = n->inputs[0]->rank, axis = ox_node_attr_int(n, "axis", -1);
  if (axis < 0) axis += r;
  if (r < 1 || r > 64 || axis < 0 || axis >= r)
    return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient needs X of known rank and a valid axis");
  int64_t axes[64];
  for (int64_t i = axis; i < r; i++)
    axes[i - axis] = i;
  size_t na = (size_t)(r - axis);
  const char* ms = ox_grad_reduce(b, "ReduceMean", OP2("Mul", I(0), I(0)), axes, na, true);
  const char* rs =
      OP1("Reciprocal", OP1("Sqrt", OP2("Add", ms, K(ox_node_attr_float(n, "epsilon", 1e-5f)))));
  const char* xhat = OP2("Mul", I(0), rs);
  if (WANTS(0)) {
    const char* g = OP2("Mul", GO(0), I(1));
    const char* mgx = ox_grad_reduce(b, "ReduceMean", OP2("Mul", g, xhat), axes, na, true);
    ox_grad_GI(b, n, 0, OP2("Mul", rs, OP2("Sub", g, OP2("Mul", xhat, mgx))));
  }
  if (WANTS(1)) {
    const OxValue* x = n->inputs[0];
    ox_grad_GI_from(b, n, 1, OP2("Mul", GO(0), xhat), x->dims, x->rank);
  }
  return ox_grad_err(b);
}

/* Mish: y = x tanh(softplus(x)); dy/dx = tanh(sp) + x sigmoid(x) (1 -
 * tanh(sp)^2). */
static OnyxStatus* rule_mish(OxGradBuilder* b, const OxNode* n) {
  const char* t = OP1("Tanh", OP1("Softplus", I(0)));
  const char* sech2 = OP2("Sub", K(1), OP2("Mul", t, t));
  const char* d = OP2("Add", t, OP2("Mul", OP2("Mul", I(0), OP1("Sigmoid", I(0))), sech2));
  ox_grad_GI(b, n, 0, OP2("Mul", GO(0), d));
  return ox_grad_err(b);
}

/* The other activations, composed from x (and y where it is cheaper). */
static const char* x_positive(OxGradBuilder* b, const OxNode* n) {
  return OP2("Greater", I(0), K(0));
}

static OnyxStatus* rule_leaky_relu(OxGradBuilder* b, const OxNode* n) {
  const char* s = OP2("Mul", GO(0), K(ox_node_attr_float(n, "alpha", 0.01f)));
  ox_grad_GI(b, n, 0, OP3("Where", x_positive(b, n), GO(0), s));
  return ox_grad_err(b);
}

static OnyxStatus* rule_elu(OxGradBuilder* b, const OxNode* n) {
  const char* neg = OP2("Mul", GO(0), OP2("Add", O(0), K(ox_node_attr_float(n, "alpha", 1.0f))));
  ox_grad_GI(b, n, 0, OP3("Where", x_positive(b, n), GO(0), neg));
  return ox_grad_err(b);
}

static OnyxStatus* rule_selu(OxGradBuilder* b, const OxNode* n) {
  double alpha = ox_node_attr_float(n, "alpha", 1.67326319217681884765625f);
  double gamma = ox_node_attr_float(n, "gamma", 1.05070102214813232421875f);
  const char* pos = OP2("Mul", GO(0), K(gamma));
  const char* neg = OP2("Mul", GO(0), OP2("Add", O(0), K(alpha * gamma)));
  ox_grad_GI(b, n, 0, OP3("Where", x_positive(b, n), pos, neg));
  return ox_grad_err(b);
}

static OnyxStatus* rule_celu(OxGradBuilder* b, const OxNode* n) {
  const char* e = OP1("Exp", OP2("Div", I(0), K(ox_node_attr_float(n, "alpha", 1.0f))));
  ox_grad_GI(b, n, 0, OP3("Where", x_positive(b, n), GO(0), OP2("Mul", GO(0), e)));
  return ox_grad_err(b);
}

static OnyxStatus* rule_softplus(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, OP2("Mul", GO(0), OP1("Sigmoid", I(0))));
  return ox_grad_err(b);
}

static OnyxStatus* rule_softsign(OxGradBuilder* b, const OxNode* n) {
  const char* d = OP2("Add", K(1), OP1("Abs", I(0)));
  ox_grad_GI(b, n, 0, OP2("Div", GO(0), OP2("Mul", d, d)));
  return ox_grad_err(b);
}

static OnyxStatus* rule_hard_sigmoid(OxGradBuilder* b, const OxNode* n) {
  double alpha = ox_node_attr_float(n, "alpha", 0.2f), beta = ox_node_attr_float(n, "beta", 0.5f);
  const char* t = OP2("Add", OP2("Mul", I(0), K(alpha)), K(beta));
  const char* in = OP2("And", OP2("Greater", t, K(0)), OP2("Less", t, K(1)));
  ox_grad_GI(b, n, 0, OP3("Where", in, OP2("Mul", GO(0), K(alpha)), K(0)));
  return ox_grad_err(b);
}

static OnyxStatus* rule_thresholded_relu(OxGradBuilder* b, const OxNode* n) {
  const char* on = OP2("Greater", I(0), K(ox_node_attr_float(n, "alpha", 1.0f)));
  ox_grad_GI(b, n, 0, OP3("Where", on, GO(0), K(0)));
  return ox_grad_err(b);
}

/* HardSwish: 0 below -3, 1 above 3, (2x + 3) / 6 between. */
static OnyxStatus* rule_hard_swish(OxGradBuilder* b, const OxNode* n) {
  const char* x = I(0);
  const char* mid = OP2("Div", OP2("Add", OP2("Mul", x, K(2)), K(3)), K(6));
  const char* d = OP3("Where", OP2("Greater", x, K(3)), K(1), mid);
  d = OP3("Where", OP2("Less", x, K(-3)), K(0), d);
  ox_grad_GI(b, n, 0, OP2("Mul", GO(0), d));
  return ox_grad_err(b);
}

/* Silu: y = x s(x), dy/dx = s(x) (1 + x (1 - s(x))). */
static OnyxStatus* rule_silu(OxGradBuilder* b, const OxNode* n) {
  const char* sg = OP1("Sigmoid", I(0));
  const char* d = OP2("Mul", sg, OP2("Add", K(1), OP2("Mul", I(0), OP2("Sub", K(1), sg))));
  ox_grad_GI(b, n, 0, OP2("Mul", GO(0), d));
  return ox_grad_err(b);
}

static OnyxStatus* rule_prelu(OxGradBuilder* b, const OxNode* n) {
  const char* pos = x_positive(b, n);
  if (WANTS(0)) ox_grad_GI(b, n, 0, OP3("Where", pos, GO(0), OP2("Mul", GO(0), I(1))));
  if (WANTS(1)) ox_grad_GI_bcast(b, n, 1, OP3("Where", pos, K(0), OP2("Mul", GO(0), I(0))));
  return ox_grad_err(b);
}

/* Round, Floor, Ceil, Sign: the derivative is 0 almost everywhere; nothing
 * flows back (the inputs' gradients get no contribution). */
static OnyxStatus* rule_zero(OxGradBuilder* b, const OxNode* n) {
  (void)n;
  return ox_grad_err(b);
}

static const OxGradRuleDef ox_rules_nn[] = {
    {"", "Relu", 1, 0, rule_relu},
    {"", "Sigmoid", 1, 0, rule_sigmoid},
    {"", "Tanh", 1, 0, rule_tanh},
    {"", "Gelu", 20, 0, rule_gelu},
    {"com.onyx", "Gelu", 1, 0, rule_gelu},
    {"", "Softmax", 1, 0, rule_softmax},
    {"", "LogSoftmax", 1, 0, rule_logsoftmax},
    {"", "SoftmaxCrossEntropyLoss", 12, 0, rule_sce},
    {"", "NegativeLogLikelihoodLoss", 12, 0, rule_nll},
    {"", "Conv", 1, 0, rule_conv},
    {"", "ConvTranspose", 1, 0, rule_conv_transpose},
    {"", "MaxPool", 8, 0, rule_maxpool},
    {"", "AveragePool", 1, 0, rule_avgpool},
    {"", "GlobalAveragePool", 1, 0, rule_global_avgpool},
    {"", "GlobalMaxPool", 1, 0, rule_global_maxpool},
    {"", "InstanceNormalization", 1, 0, rule_instance_norm},
    {"", "LpNormalization", 1, 0, rule_lp_norm},
    {"", "Shrink", 9, 0, rule_shrink},
    {"", "GroupNormalization", 18, 0, rule_group_norm},
    {"", "RMSNormalization", 23, 0, rule_rms_norm},
    {"", "Mish", 18, 0, rule_mish},
    {"", "Hardmax", 1, 0, rule_zero},
    {"", "BatchNormalization", 7, 0, rule_batchnorm},
    {"", "LayerNormalization", 17, 0, rule_layernorm},
    {"com.onyx", "LayerNormalization", 1, 0, rule_layernorm},
    {"", "Dropout", 7, 0, rule_dropout},
    {"com.onyx", "FusedMatMul", 1, 0, rule_fused_matmul},
    {"com.onyx", "FusedConv", 1, 0, rule_fused_conv},
    {"com.onyx", "MultiHeadAttention", 1, 0, rule_mha},
    {"", "LeakyRelu", 1, 0, rule_leaky_relu},
    {"", "Elu", 1, 0, rule_elu},
    {"", "Selu", 1, 0, rule_selu},
    {"", "Celu", 12, 0, rule_celu},
    {"", "Softplus", 1, 0, rule_softplus},
    {"", "Softsign", 1, 0, rule_softsign},
    {"", "HardSigmoid", 1, 0, rule_hard_sigmoid},
    {"", "ThresholdedRelu", 10, 0, rule_thresholded_relu},
    {"", "HardSwish", 14, 0, rule_hard_swish},
    {"com.onyx", "HardSwish", 1, 0, rule_hard_swish},
    {"com.onyx", "Silu", 1, 0, rule_silu},
    {"", "PRelu", 1, 0, rule_prelu},
    {"", "Round", 11, 0, rule_zero},
    {"", "Floor", 1, 0, rule_zero},
    {"", "Ceil", 1, 0, rule_zero},
    {"", "Sign", 9, 0, rule_zero},
};

const OxGradRuleDef* ox_grad_rules_nn(size_t* n) {
  *n = OX_ARRAY_LEN(ox_rules_nn);
  return ox_rules_nn;
}
