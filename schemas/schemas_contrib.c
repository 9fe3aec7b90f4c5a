/* schemas_contrib.c — the contrib family: the com.onyx ops the graph
 * optimizer fuses into (host/optimizer, docs/optimizer.md), with their
 * inference. Kernels: providers/cpu/cpu_contrib.c (float32), and for
 * FusedMatMul, Gelu and LayerNormalization also providers/gpu-common
 * (float32, float16, bfloat16).
 *
 *   FusedMatMul(A, B, Bias, Z?) -> Y   MatMul(A, B) + Bias, B 2-D, Bias [N]
 *                                  along the last axis (A of any rank >= 2),
 *                                  plus Z (of Y's shape: a residual sum) when
 *                                  given, then the optional `activation`
 *                                  ("Relu", "LeakyRelu" (alpha), "Clip"
 *                                  (clip_min, clip_max) or "Gelu" (erf form))
 *   FusedConv(X, W, B?, Z?) -> Y   Conv (same attributes), plus Z (a tensor
 *                                  of Y's shape: a residual sum) when given,
 *                                  then `activation`: "Relu", "LeakyRelu"
 *                                  (alpha), "Clip" (clip_min, clip_max),
 *                                  "HardSigmoid" (alpha, beta),
 *                                  "HardSwish", "Sigmoid", "Silu" or "Tanh"
 *   Gelu(X) -> Y                   0.5 x (1 + erf(x / sqrt 2))
 *   Silu(X) -> Y                   x * sigmoid(x) (kernel: cpu_elementwise.c)
 *   HardSwish(X) -> Y              x * clamp(x / 6 + 1/2, 0, 1) (the same)
 *   LayerNormalization(X, Scale, B?) -> Y   as ONNX LayerNormalization-17,
 *                                  for models importing an older opset
 *   MultiHeadAttention(Q, K?, V?, Mask?) -> Y   Q [B, S, H*D], K and V
 *                                  [B, T, H*D]; per head h (columns h*D ..):
 *                                  softmax(scale * Q_h K_h^T + Mask) V_h,
 *                                  heads merged back into [B, S, H*D];
 *                                  Mask additive, broadcasting to [B, H, S, T];
 *                                  attributes num_heads, scale. Without K
 *                                  and V, Q is packed: [B, S, 3*H*D], the
 *                                  queries, keys and values side by side
 *                                  along the last axis (T = S)
 *
 * And three com.microsoft ops with ONNX Runtime's signatures, which the QDQ
 * fusion produces (T uint8 or int8; scales float32, one value each; zero
 * points optional, one value each):
 *   QLinearAdd(A, A_scale, A_zero_point?, B, B_scale, B_zero_point?,
 *              C_scale, C_zero_point?) -> C   quantize(dequantize(A) +
 *                                  dequantize(B)), numpy broadcasting
 *   QLinearMul(the same inputs) -> C   quantize(dequantize(A) *
 *                                  dequantize(B)), numpy broadcasting
 *   QLinearGlobalAveragePool(X, x_scale, x_zero_point?, y_scale,
 *              y_zero_point?) -> Y   quantize(GlobalAveragePool(
 *                                  dequantize(X))); attribute channels_last
 *                                  (0: X is [N, C, ...], 1: [N, ..., C]) */
#include <math.h>
#include "infer_util.h"
#include "schema_internal.h"

#define CONTRIB "com.onyx"
#define F32     OX_T(ONYX_ELEM_FLOAT32)
#define L(a)    a, (uint8_t)OX_ARRAY_LEN(a)

/* FusedMatMul, Gelu and LayerNormalization also take float16 and bfloat16:
 * the GPU providers' kernels of them do (float32 arithmetic, one rounding
 * of the result); the CPU provider's take float32. */
#define REAL (F32 | OX_T(ONYX_ELEM_FLOAT16) | OX_T(ONYX_ELEM_BFLOAT16))
static const OxTypeConstr t_f32[] = {{"T", F32}};
static const OxTypeConstr t_real[] = {{"T", REAL}};
static const OxTypeConstr t_ln[] = {{"T", REAL}, {"U", F32}};
#define MS "com.microsoft"
static const OxTypeConstr t_q8[] = {{"T", OX_T(ONYX_ELEM_UINT8) | OX_T(ONYX_ELEM_INT8)}};
static const OxFormal f_qadd_in[] = {{"A", "T", ONYX_PARAM_SINGLE, 1},
                                     {"A_scale", "tensor(float)", ONYX_PARAM_SINGLE, 1},
                                     {"A_zero_point", "T", ONYX_PARAM_OPTIONAL, 1},
                                     {"B", "T", ONYX_PARAM_SINGLE, 1},
                                     {"B_scale", "tensor(float)", ONYX_PARAM_SINGLE, 1},
                                     {"B_zero_point", "T", ONYX_PARAM_OPTIONAL, 1},
                                     {"C_scale", "tensor(float)", ONYX_PARAM_SINGLE, 1},
                                     {"C_zero_point", "T", ONYX_PARAM_OPTIONAL, 1}};
static const OxFormal f_c[] = {{"C", "T", ONYX_PARAM_SINGLE, 1}};
static const OxFormal f_qgap_in[] = {{"X", "T", ONYX_PARAM_SINGLE, 1},
                                     {"x_scale", "tensor(float)", ONYX_PARAM_SINGLE, 1},
                                     {"x_zero_point", "T", ONYX_PARAM_OPTIONAL, 1},
                                     {"y_scale", "tensor(float)", ONYX_PARAM_SINGLE, 1},
                                     {"y_zero_point", "T", ONYX_PARAM_OPTIONAL, 1}};

static const OxFormal f_mm_in[] = {{"A", "T", ONYX_PARAM_SINGLE, 1},
                                   {"B", "T", ONYX_PARAM_SINGLE, 1},
                                   {"Bias", "T", ONYX_PARAM_SINGLE, 1},
                                   {"Z", "T", ONYX_PARAM_OPTIONAL, 1}};
static const OxFormal f_conv_in[] = {{"X", "T", ONYX_PARAM_SINGLE, 1},
                                     {"W", "T", ONYX_PARAM_SINGLE, 1},
                                     {"B", "T", ONYX_PARAM_OPTIONAL, 1},
                                     {"Z", "T", ONYX_PARAM_OPTIONAL, 1}};
static const OxFormal f_ln_in[] = {{"X", "T", ONYX_PARAM_SINGLE, 1},
                                   {"Scale", "T", ONYX_PARAM_SINGLE, 1},
                                   {"B", "T", ONYX_PARAM_OPTIONAL, 1}};
static const OxFormal f_mha_in[] = {{"Q", "T", ONYX_PARAM_SINGLE, 1},
                                    {"K", "T", ONYX_PARAM_OPTIONAL, 1},
                                    {"V", "T", ONYX_PARAM_OPTIONAL, 1},
                                    {"Mask", "T", ONYX_PARAM_OPTIONAL, 1}};
static const OxFormal f_x[] = {{"X", "T", ONYX_PARAM_SINGLE, 1}};
static const OxFormal f_y[] = {{"Y", "T", ONYX_PARAM_SINGLE, 1}};

static const OxAttrSpec a_conv[] = {
    {.name = "auto_pad", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "NOTSET"},
    {.name = "dilations", .type = ONYX_ATTR_INTS},
    {.name = "group", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 1},
    {.name = "kernel_shape", .type = ONYX_ATTR_INTS},
    {.name = "pads", .type = ONYX_ATTR_INTS},
    {.name = "strides", .type = ONYX_ATTR_INTS},
    {.name = "activation", .type = ONYX_ATTR_STRING, .required = true},
    {.name = "alpha", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 0.01f},
    {.name = "clip_min", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = -INFINITY},
    {.name = "clip_max", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = INFINITY},
    {.name = "beta", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 0.5f},
};
static const OxAttrSpec a_mha[] = {
    {.name = "num_heads", .type = ONYX_ATTR_INT, .required = true},
    {.name = "scale", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 1.0f},
};
static const OxAttrSpec a_mm[] = {
    {.name = "activation", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = ""},
    {.name = "alpha", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 0.01f},
    {.name = "clip_min", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = -INFINITY},
    {.name = "clip_max", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = INFINITY},
};
static const OxAttrSpec a_ln[] = {
    {.name = "axis", .type = ONYX_ATTR_INT, .has_default = true, .def_i = -1},
    {.name = "epsilon", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 1e-5f},
    {.name = "stash_type", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 1},
};

/* Y = A.shape[:-1] + [N] with B [K, N]; Bias must be [N] (or [1..1, N]). */
static OnyxStatus* ox_infer_fused_matmul(OxNode* n) {
  OxDims a, b, c, y;
  ox_in_dims(n, 0, &a);
  ox_in_dims(n, 1, &b);
  ox_in_dims(n, 2, &c);
  if (b.rank >= 0 && b.rank != 2) return ox_node_err(n, "B must be 2-D, not %d-D", (int)b.rank);
  if (a.rank >= 0 && a.rank < 2) return ox_node_err(n, "A must be at least 2-D");
  if (a.rank >= 0 && b.rank == 2 && a.d[a.rank - 1] >= 0 && b.d[0] >= 0 &&
      a.d[a.rank - 1] != b.d[0])
    return ox_node_err(n, "A's last dim %lld does not match B's first dim %lld",
                       (long long)a.d[a.rank - 1], (long long)b.d[0]);
  if (c.rank >= 1 && b.rank == 2 && c.d[c.rank - 1] >= 0 && b.d[1] >= 0 &&
      c.d[c.rank - 1] != b.d[1])
    return ox_node_err(n, "Bias has %lld elements along its last axis, B has %lld columns",
                       (long long)c.d[c.rank - 1], (long long)b.d[1]);
  if (a.rank < 0 || b.rank != 2) return ox_out_set(n, 0, ox_in_type(n, 0), NULL);
  y = a;
  y.d[y.rank - 1] = b.d[1];
  if (n->n_inputs > 3 && n->inputs[3]) { /* Z: Y's shape, no broadcasting */
    OxDims z;
    ox_in_dims(n, 3, &z);
    bool same = z.rank < 0 || z.rank == y.rank;
    for (int32_t i = 0; same && z.rank >= 0 && i < y.rank; i++)
      same = z.d[i] < 0 || y.d[i] < 0 || z.d[i] == y.d[i];
    if (!same) return ox_node_err(n, "Z must have Y's shape (a residual sum, no broadcasting)");
  }
  return ox_out_set(n, 0, ox_in_type(n, 0), &y);
}

/* Y has Q's shape; Q, K and V must be 3-D with one hidden size that
 * num_heads divides. */
static OnyxStatus* ox_infer_mha(OxNode* n) {
  OxDims q, k, v;
  ox_in_dims(n, 0, &q);
  ox_in_dims(n, 1, &k);
  ox_in_dims(n, 2, &v);
  const OxDims* all[] = {&q, &k, &v};
  for (int i = 0; i < 3; i++)
    if (all[i]->rank >= 0 && all[i]->rank != 3)
      return ox_node_err(n, "%c must be 3-D [batch, seq, hidden], not %d-D", "QKV"[i],
                         (int)all[i] -> rank);
  const int64_t heads = ox_node_attr_int(n, "num_heads", 0);
  if (heads <= 0) return ox_node_err(n, "num_heads must be positive, not %lld", (long long)heads);
  const bool has_k = n->n_inputs > 1 && n->inputs[1], has_v = n->n_inputs > 2 && n->inputs[2];
  if (has_k != has_v)
    return ox_node_err(n, "K and V must both be given, or both be absent (Q packed as Q|K|V)");
  if (!has_k) { /* packed: Q [B, S, 3*H*D] */
    if (q.rank == 3 && q.d[2] >= 0) {
      if (q.d[2] % 3 || (q.d[2] / 3) % heads)
        return ox_node_err(n,
                           "packed Q|K|V: the last dim %lld must be 3 x a multiple of num_heads "
                           "%lld",
                           (long long)q.d[2], (long long)heads);
      q.d[2] /= 3;
    }
    return ox_out_set(n, 0, ox_in_type(n, 0), q.rank == 3 ? &q : NULL);
  }
  if (q.rank == 3 && q.d[2] >= 0 && q.d[2] % heads)
    return ox_node_err(n, "num_heads %lld does not divide the hidden size %lld", (long long)heads,
                       (long long)q.d[2]);
  return ox_out_set(n, 0, ox_in_type(n, 0), q.rank == 3 ? &q : NULL);
}

/* QLinearAdd, QLinearMul: A and B broadcast. */
static OnyxStatus* ox_infer_qlinear_add(OxNode* n) {
  OxDims a, b;
  ox_in_dims(n, 0, &a);
  ox_in_dims(n, 3, &b);
  OnyxStatus* st = ox_bcast_into(n, &a, &b);
  if (st) return st;
  return ox_out_set(n, 0, ox_in_type(n, 0), &a);
}

/* QLinearGlobalAveragePool: the spatial dims become 1. */
static OnyxStatus* ox_infer_qlinear_gap(OxNode* n) {
  OxDims x;
  ox_in_dims(n, 0, &x);
  if (x.rank >= 0 && x.rank < 3) return ox_node_err(n, "X must have rank >= 3, not %d", x.rank);
  const bool last = ox_attr_i(n, "channels_last", 0) != 0;
  for (int32_t i = 1; i < x.rank; i++)
    if (i != (last ? x.rank - 1 : 1)) x.d[i] = 1;
  return ox_out_set(n, 0, ox_in_type(n, 0), x.rank >= 0 ? &x : NULL);
}

static const OxAttrSpec a_qgap[] = {
    {.name = "channels_last", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0}};

static const OxSchema ox_contrib_rows[] = {
    {MS, "QLinearAdd", 1, L(f_qadd_in), L(f_c), L(t_q8), NULL, 0, ox_infer_qlinear_add, NULL, NULL,
     true},
    {MS, "QLinearMul", 1, L(f_qadd_in), L(f_c), L(t_q8), NULL, 0, ox_infer_qlinear_add, NULL, NULL,
     true},
    {MS, "QLinearGlobalAveragePool", 1, L(f_qgap_in), L(f_y), L(t_q8), L(a_qgap),
     ox_infer_qlinear_gap, NULL, NULL, true},
    {CONTRIB, "FusedMatMul", 1, L(f_mm_in), L(f_y), L(t_real), L(a_mm), ox_infer_fused_matmul, NULL,
     NULL, true},
    {CONTRIB, "FusedConv", 1, L(f_conv_in), L(f_y), L(t_f32), L(a_conv), ox_infer_conv, NULL, NULL,
     true},
    {CONTRIB, "Gelu", 1, L(f_x), L(f_y), L(t_real), NULL, 0, ox_infer_unary, NULL, NULL, true},
    {CONTRIB, "Silu", 1, L(f_x), L(f_y), L(t_f32), NULL, 0, ox_infer_unary, NULL, NULL, true},
    {CONTRIB, "HardSwish", 1, L(f_x), L(f_y), L(t_f32), NULL, 0, ox_infer_unary, NULL, NULL, true},
    {CONTRIB, "LayerNormalization", 1, L(f_ln_in), L(f_y), L(t_ln), L(a_ln), ox_infer_layernorm,
     NULL, NULL, true},
    {CONTRIB, "MultiHeadAttention", 1, L(f_mha_in), L(f_y), L(t_f32), L(a_mha), ox_infer_mha, NULL,
     NULL, true},
};

const OxSchemaFamily ox_family_contrib = {"contrib", L(ox_contrib_rows), NULL, 0};
