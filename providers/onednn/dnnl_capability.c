/* dnnl_capability.c — what the oneDNN provider takes.
 *
 * Walking the view in topological order, each node not yet taken is tried as
 * an anchor: Conv, MatMul, Gemm, MaxPool/AveragePool/GlobalAveragePool/
 * GlobalMaxPool, Softmax, LayerNormalization, an element-wise unary op or a
 * binary op (Add, Sub, Mul, Div, Max, Min). A Conv, MatMul, Gemm or binary
 * anchor then absorbs the chain that follows it while each link is the only
 * reader of the previous value and not a graph output: a BatchNormalization
 * (into a Conv, folded at compile time), a constant bias Add (into a MatMul),
 * element-wise post-ops (Relu, LeakyRelu, Sigmoid, Tanh, Elu, Gelu, Clip,
 * HardSwish, Softplus, Mish, Exp, Abs, Sqrt, Log, Neg) and residual Adds of a
 * same-shaped tensor that does not depend on the group (convexity). With the
 * `chain` option, Conv and pooling groups then merge into chains (one group of
 * several stages, see merge_claims) where the merged set stays convex. Every
 * group is claimed with host->claim_group; a node that cannot be taken is
 * declined with the reason. Only float32 is taken. A gradient op of the
 * com.onyx.training domain that dnnl_bwd_match takes (dnnl_backward.c) is a
 * group of its own, never merged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "dnnl_ep.h"

#define H dnnl_host

/* --- Small queries --------------------------------------------------------------------------- */

static bool is_op(const OnyxNode* n, const char* op) {
  const char* d = H->node_domain(n);
  return (!d || !*d || !strcmp(d, "ai.onnx")) && !strcmp(H->node_op_type(n), op);
}

/* The graph optimizer's Conv with an activation attribute (schemas_contrib.c). */
static bool is_fused_conv(const OnyxNode* n) {
  const char* d = H->node_domain(n);
  return d && !strcmp(d, "com.onyx") && !strcmp(H->node_op_type(n), "FusedConv");
}

static bool const_vector_of(const OnyxValueInfo* v, int64_t n);

/* The graph optimizer's MatMul + bias (+ activation) with a 2-D B. */
static bool is_fused_matmul(const OnyxNode* n) {
  const char* d = H->node_domain(n);
  return d && !strcmp(d, "com.onyx") && !strcmp(H->node_op_type(n), "FusedMatMul");
}

/* FusedConv's or FusedMatMul's `activation` as an eltwise post-op; false
 * when not mapped. Absent or empty: none. */
static bool fused_conv_act(const OnyxNode* n, DnnlPattern* p) {
  size_t len = 0;
  const char* act = H->node_attr_string(n, "activation", &len);
  p->anchor_act = act != NULL && len > 0;
  if (!p->anchor_act) return true;
  if (!strcmp(act, "Relu")) {
    p->act_alg = dnnl_eltwise_relu;
  } else if (!strcmp(act, "LeakyRelu")) {
    p->act_alg = dnnl_eltwise_relu;
    p->act_alpha = H->node_attr_float(n, "alpha", 0.01f);
  } else if (!strcmp(act, "Clip")) {
    p->act_alg = dnnl_eltwise_clip_v2;
    p->act_alpha = H->node_attr_float(n, "clip_min", -3.402823466e38f);
    p->act_beta = H->node_attr_float(n, "clip_max", 3.402823466e38f);
  } else {
    return false;
  }
  return true;
}

static bool is_f32(const OnyxValueInfo* v) {
  return v && H->value_elem_type(v) == ONYX_ELEM_FLOAT32;
}

/* True when every dim of v is known; *rank gets its rank. */
static bool static_shape(const OnyxValueInfo* v, int32_t* rank) {
  int32_t r = v ? H->value_rank(v) : -1;
  if (r < 0) return false;
  const int64_t* d = H->value_dims(v);
  for (int32_t i = 0; i < r; i++)
    if (d[i] < 0) return false;
  if (rank) *rank = r;
  return true;
}

static bool same_static_shape(const OnyxValueInfo* a, const OnyxValueInfo* b) {
  int32_t ra, rb;
  if (!static_shape(a, &ra) || !static_shape(b, &rb) || ra != rb) return false;
  return !memcmp(H->value_dims(a), H->value_dims(b), (size_t)ra * sizeof(int64_t));
}

static const OnyxValueInfo* in(const OnyxNode* n, size_t i) {
  return i < H->node_input_count(n) ? H->node_input(n, i) : NULL;
}

static const OnyxValueInfo* out0(const OnyxNode* n) {
  return H->node_output_count(n) ? H->node_output(n, 0) : NULL;
}

/* Only output 0 present. */
static bool single_output(const OnyxNode* n) {
  for (size_t i = 1; i < H->node_output_count(n); i++)
    if (H->node_output(n, i)) return false;
  return true;
}

static bool all_f32(const OnyxNode* n, const char** why) {
  for (size_t i = 0; i < H->node_input_count(n); i++) {
    const OnyxValueInfo* v = H->node_input(n, i);
    if (v && !is_f32(v)) {
      *why = "an input is not float32 (this provider takes float32 only)";
      return false;
    }
  }
  if (!is_f32(out0(n))) {
    *why = "the output is not float32 (this provider takes float32 only)";
    return false;
  }
  return true;
}

/* --- Element-wise mapping -------------------------------------------------------------------- */

static bool const_scalar(const OnyxValueInfo* v, float* out) {
  const OnyxTensor* t = v ? H->value_constant(v) : NULL;
  if (!t || H->tensor_elem_count(t) != 1 || H->tensor_elem_type(t) != ONYX_ELEM_FLOAT32)
    return false;
  *out = *(const float*)H->tensor_data(t);
  return true;
}

bool dnnl_eltwise_of(const OnyxNode* n, int* alg, float* alpha, float* beta, const char** why) {
  const char* op = H->node_op_type(n);
  const char* d = H->node_domain(n);
  *alpha = 0.0f;
  *beta = 0.0f;
  if (d && *d && strcmp(d, "ai.onnx")) return false;
  if (!strcmp(op, "Relu")) {
    *alg = dnnl_eltwise_relu;
  } else if (!strcmp(op, "LeakyRelu")) {
    *alg = dnnl_eltwise_relu;
    *alpha = H->node_attr_float(n, "alpha", 0.01f);
  } else if (!strcmp(op, "Sigmoid")) {
    *alg = dnnl_eltwise_logistic;
  } else if (!strcmp(op, "Tanh")) {
    *alg = dnnl_eltwise_tanh;
  } else if (!strcmp(op, "Elu")) {
    *alg = dnnl_eltwise_elu;
    *alpha = H->node_attr_float(n, "alpha", 1.0f);
  } else if (!strcmp(op, "Exp")) {
    *alg = dnnl_eltwise_exp;
  } else if (!strcmp(op, "Log")) {
    *alg = dnnl_eltwise_log;
  } else if (!strcmp(op, "Sqrt")) {
    *alg = dnnl_eltwise_sqrt;
  } else if (!strcmp(op, "Abs")) {
    *alg = dnnl_eltwise_abs;
  } else if (!strcmp(op, "Neg")) {
    *alg = dnnl_eltwise_linear;
    *alpha = -1.0f;
  } else if (!strcmp(op, "Softplus")) {
    *alg = dnnl_eltwise_soft_relu;
  } else if (!strcmp(op, "Mish")) {
    *alg = dnnl_eltwise_mish;
  } else if (!strcmp(op, "HardSwish")) {
    *alg = dnnl_eltwise_hardswish;
  } else if (!strcmp(op, "Gelu")) {
    size_t len = 0;
    const char* approx = H->node_attr_string(n, "approximate", &len);
    *alg = approx && !strcmp(approx, "tanh") ? dnnl_eltwise_gelu_tanh : dnnl_eltwise_gelu_erf;
  } else if (!strcmp(op, "Clip")) {
    *alg = dnnl_eltwise_clip_v2;
    if (H->node_since_version(n) < 11) {
      *alpha = H->node_attr_float(n, "min", -3.402823466e38f);
      *beta = H->node_attr_float(n, "max", 3.402823466e38f);
    } else {
      *alpha = -3.402823466e38f;
      *beta = 3.402823466e38f;
      const OnyxValueInfo *lo = in(n, 1), *hi = in(n, 2);
      if ((lo && !const_scalar(lo, alpha)) || (hi && !const_scalar(hi, beta))) {
        *why = "Clip's min/max are not constant float32 scalars";
        return false;
      }
    }
  } else {
    return false;
  }
  return true;
}

/* --- Consumers and convexity ------------------------------------------------------------------ */

typedef struct View {
  const OnyxGraphView* g;
  size_t n;
} View;

/* The only node of the view reading v, or NULL (none, several, or a graph output). */
static const OnyxNode* sole_consumer(const View* v, const OnyxValueInfo* x) {
  for (size_t i = 0, n = H->graph_output_count(v->g); i < n; i++)
    if (H->graph_output(v->g, i) == x) return NULL;
  const OnyxNode* found = NULL;
  size_t reads = 0;
  for (size_t i = 0; i < v->n; i++) {
    const OnyxNode* c = H->graph_node(v->g, i);
    for (size_t k = 0; k < H->node_input_count(c); k++)
      if (H->node_input(c, k) == x) {
        found = c;
        reads++;
      }
  }
  return reads == 1 ? found : NULL;
}

/* True when value x depends (through producers) on any node of group[0..n). */
static bool depends_on(const OnyxValueInfo* x, const OnyxNode* const* group, size_t n, int depth) {
  const OnyxNode* p = x ? H->value_producer(x) : NULL;
  if (!p) return false;
  for (size_t i = 0; i < n; i++)
    if (group[i] == p) return true;
  if (depth > 64) return true; /* too deep to prove: treat as dependent */
  for (size_t k = 0; k < H->node_input_count(p); k++)
    if (depends_on(H->node_input(p, k), group, n, depth + 1)) return true;
  return false;
}

/* --- Anchors ------------------------------------------------------------------------------------
 */

static bool match_anchor(const DnnlEp* ep, const OnyxNode* n, DnnlPattern* p, const char** why) {
  (void)ep;
  memset(p, 0, sizeof *p);
  p->anchor = n;
  p->out = out0(n);
  if (!single_output(n)) {
    *why = "optional outputs are not produced by this provider";
    return false;
  }
  int alg;
  float a, b;
  if (is_op(n, "Conv") || is_fused_conv(n)) {
    p->kind = DK_CONV;
    if (is_fused_conv(n) && !fused_conv_act(n, p)) {
      *why = "FusedConv activation not mapped";
      return false;
    }
    if (is_fused_conv(n) && H->node_input_count(n) > 3 && H->node_input(n, 3)) {
      *why = "FusedConv's Z (residual sum) input is not mapped";
      return false;
    }
    int32_t r = H->value_rank(in(n, 0));
    size_t len = 0;
    const char* pad = H->node_attr_string(n, "auto_pad", &len);
    if (r < 3 || r > 5) {
      *why = "Conv input rank is not 3, 4 or 5 (or unknown)";
      return false;
    }
    /* Weights and bias that are not constant (a training graph's trained
     * parameters, fed each step) are taken too: the plan reorders them per run
     * into the primitive's layout. Their shape must be static, since it fixes
     * the primitive. */
    const OnyxValueInfo *W = in(n, 1), *B = in(n, 2);
    if ((!H->value_constant(W) && !static_shape(W, NULL)) ||
        (B && !H->value_constant(B) && !static_shape(B, NULL))) {
      *why = "Conv weights/bias are neither constant nor of a static shape";
      return false;
    }
    if (pad && strcmp(pad, "NOTSET") && strcmp(pad, "VALID") && !static_shape(in(n, 0), NULL)) {
      *why = "auto_pad SAME_* with an input shape unknown at load";
      return false;
    }
    return all_f32(n, why);
  }
  if (is_op(n, "MatMul") || is_op(n, "Gemm") || is_fused_matmul(n)) {
    p->kind = DK_MATMUL;
    const OnyxValueInfo *A = in(n, 0), *B = in(n, 1);
    int32_t ra = H->value_rank(A), rb = H->value_rank(B);
    if (ra < 2 || rb < 2 || ra > 5 || rb > 5) {
      *why = "MatMul operands of rank below 2, above 5, or unknown";
      return false;
    }
    if (is_fused_matmul(n)) {
      /* Bias [N] along the last axis: the matmul's bias; the activation:
       * post-op 0, as FusedConv's. */
      const int64_t* bd = H->value_dims(B);
      if (ra != 2) {
        /* Measured: bert_layer's [1, 128, 768] x [768, N] products run 1.5x
         * slower here than in the CPU provider's GEMM (35.8 against 24.4 ms
         * for the model at 1 thread); the 2-D ones (from Gemm) are level or
         * faster. */
        *why = "FusedMatMul with A of rank above 2 is left to the CPU provider (faster there)";
        return false;
      }
      if (rb != 2 || !const_vector_of(in(n, 2), bd[1]) || bd[1] < 0) {
        *why = "FusedMatMul's bias is not a constant [N] vector";
        return false;
      }
      if (!fused_conv_act(n, p)) {
        *why = "FusedMatMul activation not mapped";
        return false;
      }
      if (in(n, 3)) {
        *why = "FusedMatMul's Z (residual sum) input is not mapped";
        return false;
      }
      p->bias = in(n, 2);
    }
    if (is_op(n, "Gemm")) {
      if (!H->value_constant(B)) {
        *why = "Gemm's B is not constant";
        return false;
      }
      if (H->node_attr_int(n, "transA", 0)) {
        *why = "Gemm with transA";
        return false;
      }
      const OnyxValueInfo* C = in(n, 2);
      if (C) {
        const OnyxTensor* c = H->value_constant(C);
        size_t cr = c ? H->tensor_rank(c) : 0;
        const int64_t* cd = c ? H->tensor_dims(c) : NULL;
        bool row = c && (cr == 1 || (cr == 2 && cd[0] == 1));
        if (!row) {
          *why = "Gemm's C is not a constant [N] or [1, N] bias";
          return false;
        }
      }
    }
    return all_f32(n, why);
  }
  if (is_op(n, "MaxPool") || is_op(n, "AveragePool") || is_op(n, "GlobalAveragePool") ||
      is_op(n, "GlobalMaxPool")) {
    p->kind = DK_POOL;
    int32_t r = H->value_rank(in(n, 0));
    size_t len = 0;
    const char* pad = H->node_attr_string(n, "auto_pad", &len);
    if (r < 3 || r > 5) {
      *why = "pooling input rank is not 3, 4 or 5 (or unknown)";
      return false;
    }
    if (H->node_attr_int(n, "ceil_mode", 0)) {
      *why = "ceil_mode 1";
      return false;
    }
    if (is_op(n, "MaxPool") && H->node_attr_int(n, "storage_order", 0)) {
      *why = "storage_order 1";
      return false;
    }
    if (pad && strcmp(pad, "NOTSET") && strcmp(pad, "VALID") && !static_shape(in(n, 0), NULL)) {
      *why = "auto_pad SAME_* with an input shape unknown at load";
      return false;
    }
    if (is_op(n, "GlobalAveragePool") || is_op(n, "GlobalMaxPool")) {
      if (!static_shape(in(n, 0), NULL)) {
        *why = "global pooling with an input shape unknown at load";
        return false;
      }
    }
    return all_f32(n, why);
  }
  if (is_op(n, "Softmax")) {
    p->kind = DK_SOFTMAX;
    int32_t r = H->value_rank(in(n, 0));
    int64_t axis = H->node_attr_int(n, "axis", H->node_since_version(n) < 13 ? 1 : -1);
    if (r < 1 || r > DNNL_MAX_RANK) {
      *why = "Softmax input rank unknown, 0 or above 6";
      return false;
    }
    if (axis < 0) axis += r;
    if (H->node_since_version(n) < 13 && axis != r - 1) {
      *why = "Softmax before opset 13 over a flattened tail of several axes";
      return false;
    }
    return all_f32(n, why);
  }
  if (is_op(n, "LayerNormalization")) {
    p->kind = DK_LAYERNORM;
    int32_t r = H->value_rank(in(n, 0));
    int64_t axis = H->node_attr_int(n, "axis", -1);
    if (r < 2) {
      *why = "LayerNormalization input rank below 2 or unknown";
      return false;
    }
    if (axis != -1 && axis != r - 1) {
      *why = "LayerNormalization over more than the last axis";
      return false;
    }
    if (!in(n, 1) || H->value_rank(in(n, 1)) != 1 || (in(n, 2) && H->value_rank(in(n, 2)) != 1)) {
      *why = "LayerNormalization scale/bias are not 1-D";
      return false;
    }
    return all_f32(n, why);
  }
  if (is_op(n, "Add") || is_op(n, "Sub") || is_op(n, "Mul") || is_op(n, "Div") || is_op(n, "Max") ||
      is_op(n, "Min")) {
    p->kind = DK_BINARY;
    if (H->node_input_count(n) != 2) {
      *why = "not exactly two inputs";
      return false;
    }
    int32_t r0, r1, ro;
    if (!static_shape(in(n, 0), &r0) || !static_shape(in(n, 1), &r1) ||
        !static_shape(p->out, &ro) || ro > DNNL_MAX_RANK || ro < 1) {
      *why = "operand shapes unknown at load, or 0-D";
      return false;
    }
    bool commutative = !is_op(n, "Sub") && !is_op(n, "Div");
    if (!same_static_shape(in(n, 0), p->out) &&
        !(commutative && same_static_shape(in(n, 1), p->out))) {
      *why = "the first operand would be broadcast";
      return false;
    }
    if (H->node_since_version(n) < 7) {
      *why = "legacy broadcast attribute (before opset 7)";
      return false;
    }
    return all_f32(n, why);
  }
  const char* ewhy = NULL;
  if (dnnl_eltwise_of(n, &alg, &a, &b, &ewhy)) {
    p->kind = DK_ELTWISE;
    if (H->value_rank(in(n, 0)) < 1 || H->value_rank(in(n, 0)) > DNNL_MAX_RANK) {
      *why = "input rank unknown, 0 (oneDNN has no 0-D tensors) or above 6";
      return false;
    }
    return all_f32(n, why);
  }
  *why = ewhy ? ewhy : "op not mapped to a oneDNN primitive";
  return false;
}

/* --- Chains ----------------------------------------------------------------------------------- */

static bool const_vector_of(const OnyxValueInfo* v, int64_t n) {
  const OnyxTensor* t = v ? H->value_constant(v) : NULL;
  if (!t || H->tensor_elem_type(t) != ONYX_ELEM_FLOAT32) return false;
  size_t r = H->tensor_rank(t);
  const int64_t* d = H->tensor_dims(t);
  for (size_t i = 0; i + 1 < r; i++)
    if (d[i] != 1) return false;
  return r >= 1 && (n < 0 || d[r - 1] == n);
}

static void absorb_chain(const DnnlEp* ep, const View* v, DnnlPattern* p) {
  if (!ep->opt.fuse) return;
  if (p->kind != DK_CONV && p->kind != DK_MATMUL && p->kind != DK_BINARY) return;
  const OnyxNode* members[2 + DNNL_MAX_POST + 1];
  size_t n_members = 0;
  members[n_members++] = p->anchor;
  const OnyxValueInfo* cur = p->out;
  while (p->n_post < DNNL_MAX_POST) {
    const OnyxNode* c = sole_consumer(v, cur);
    if (!c || !single_output(c) || !is_f32(out0(c))) break;
    /* BatchNormalization folded into a Conv, right after it: only into
     * constant weights and bias (the fold rewrites them at compile time). */
    if (p->kind == DK_CONV && !p->bn && !p->n_post && !p->anchor_act &&
        is_op(c, "BatchNormalization") && in(c, 0) == cur && H->node_input_count(c) == 5 &&
        H->value_constant(in(p->anchor, 1)) &&
        (!in(p->anchor, 2) || H->value_constant(in(p->anchor, 2)))) {
      bool constant = true;
      for (size_t k = 1; k < 5; k++)
        constant = constant && H->value_constant(in(c, k)) && is_f32(in(c, k));
      if (!constant || H->node_attr_int(c, "training_mode", 0)) break;
      p->bn = c;
    } else if (p->kind == DK_MATMUL && !p->bias && !p->n_post && is_op(c, "Add") &&
               H->node_input_count(c) == 2 && H->node_since_version(c) >= 7 &&
               is_op(p->anchor, "MatMul")) {
      const OnyxValueInfo* other = in(c, 0) == cur ? in(c, 1) : in(c, 0);
      const int64_t* bd = H->value_dims(in(p->anchor, 1));
      int32_t rb = H->value_rank(in(p->anchor, 1));
      int64_t n_cols = rb >= 1 ? bd[rb - 1] : -1;
      if (other == cur || !const_vector_of(other, n_cols) || n_cols < 0 ||
          H->tensor_rank(H->value_constant(other)) > (size_t)H->value_rank(cur))
        goto residual;
      p->bias = other;
      p->bias_node = c;
    } else {
    residual:;
      int alg;
      float a, b;
      const char* why = NULL;
      if (dnnl_eltwise_of(c, &alg, &a, &b, &why) && in(c, 0) == cur) {
        p->post[p->n_post++] = (DnnlPost){false, alg, a, b, c, NULL};
      } else if (is_op(c, "Add") && H->node_input_count(c) == 2 && H->node_since_version(c) >= 7) {
        const OnyxValueInfo* other = in(c, 0) == cur ? in(c, 1) : in(c, 0);
        if (other == cur || !is_f32(other) || !same_static_shape(other, cur) ||
            depends_on(other, members, n_members, 0))
          break;
        p->post[p->n_post++] = (DnnlPost){true, dnnl_binary_add, 0, 0, c, other};
      } else {
        break;
      }
    }
    members[n_members++] = c;
    cur = out0(c);
  }
  p->out = cur;
}

bool dnnl_match(const DnnlEp* ep, const OnyxGraphView* g, const OnyxNode* anchor, DnnlPattern* p,
                const char** why) {
  View v = {g, H->graph_node_count(g)};
  if (!match_anchor(ep, anchor, p, why)) return false;
  absorb_chain(ep, &v, p);
  return true;
}

/* --- Pattern nodes -----------------------------------------------------------------------------
 */

size_t dnnl_pattern_nodes(const DnnlPattern* p, const OnyxNode** nodes) {
  size_t m = 0;
  nodes[m++] = p->anchor;
  if (p->bn) nodes[m++] = p->bn;
  if (p->bias_node) nodes[m++] = p->bias_node;
  for (size_t k = 0; k < p->n_post; k++)
    nodes[m++] = p->post[k].node;
  return m;
}

void dnnl_pattern_keep(DnnlPattern* p, size_t keep) {
  const OnyxNode* nodes[DNNL_PATTERN_NODES];
  size_t m = dnnl_pattern_nodes(p, nodes);
  if (keep < 1) keep = 1;
  if (keep >= m) return;
  size_t fixed = 1 + (p->bn != NULL) + (p->bias_node != NULL);
  if (keep < fixed) { /* only the anchor (a BatchNormalization or bias Add is always 2nd) */
    p->bn = NULL;
    p->bias = NULL;
    p->bias_node = NULL;
    p->n_post = 0;
  } else {
    p->n_post = keep - fixed;
  }
  p->out = out0(nodes[keep - 1]);
}

/* --- Node sets ----------------------------------------------------------------------------------
 */

/* An open-addressing map from node to a value (a claim index, or 1 for a set). */
typedef struct NodeMap {
  const OnyxNode** key;
  long* val;
  size_t cap, used;
} NodeMap;

static size_t nm_slot(const NodeMap* m, const OnyxNode* n) {
  size_t h = (size_t)((uintptr_t)n >> 4) * 0x9E3779B97F4A7C15ull;
  size_t i = h & (m->cap - 1);
  while (m->key[i] && m->key[i] != n)
    i = (i + 1) & (m->cap - 1);
  return i;
}

static bool nm_init(NodeMap* m, size_t expect) {
  m->cap = 64;
  while (m->cap < 2 * expect + 2)
    m->cap *= 2;
  m->used = 0;
  m->key = calloc(m->cap, sizeof *m->key);
  m->val = calloc(m->cap, sizeof *m->val);
  return m->key && m->val;
}

static void nm_free(NodeMap* m) {
  free(m->key);
  free(m->val);
  m->key = NULL;
  m->val = NULL;
}

static void nm_clear(NodeMap* m) {
  memset(m->key, 0, m->cap * sizeof *m->key);
  m->used = 0;
}

static long nm_get(const NodeMap* m, const OnyxNode* n) {
  size_t i = nm_slot(m, n);
  return m->key[i] ? m->val[i] : -1;
}

static bool nm_put(NodeMap* m, const OnyxNode* n, long v) {
  if (2 * (m->used + 1) > m->cap) { /* grow */
    NodeMap bigger = {0};
    if (!nm_init(&bigger, m->cap)) {
      nm_free(&bigger);
      return false;
    }
    for (size_t i = 0; i < m->cap; i++)
      if (m->key[i]) {
        size_t j = nm_slot(&bigger, m->key[i]);
        bigger.key[j] = m->key[i];
        bigger.val[j] = m->val[i];
        bigger.used++;
      }
    nm_free(m);
    *m = bigger;
  }
  size_t i = nm_slot(m, n);
  if (!m->key[i]) m->used++;
  m->key[i] = n;
  m->val[i] = v;
  return true;
}

/* --- Chains of groups ----------------------------------------------------------------------------
 *
 * After the single-anchor groups are matched, a Conv or pooling group whose
 * data comes from another Conv/pooling group joins that group's chain: the
 * chain is claimed as ONE group and compiled into stages that pass oneDNN's
 * blocked layouts to each other (dnnl_compile.c). A group joins only when the
 * merged set stays convex (no path leaves it and comes back: checked here, the
 * host would refuse the claim) and has at most DNNL_MAX_CHAIN_IN variable
 * inputs and DNNL_MAX_STAGES stages. */

typedef struct Claim {
  const OnyxNode* nodes[DNNL_PATTERN_NODES];
  size_t n;
  bool chainable;
  long chain;      /* the first claim of its chain */
  long next;       /* the next claim of its chain, -1 at the end */
  long last;       /* for a chain's first claim: its last claim */
  size_t n_stages; /* for a chain's first claim */
} Claim;

typedef struct Merger {
  Claim* c;
  size_t n;
  NodeMap owner;  /* node -> claim index */
  NodeMap in_set; /* nodes of the set being checked */
  NodeMap seen;   /* nodes visited by the dependency walk */
  const OnyxNode** stack;
  size_t stack_cap;
} Merger;

static bool push(Merger* m, size_t* top, const OnyxNode* n) {
  if (*top == m->stack_cap) {
    size_t cap = m->stack_cap ? 2 * m->stack_cap : 256;
    const OnyxNode** s = realloc(m->stack, cap * sizeof *s);
    if (!s) return false;
    m->stack = s;
    m->stack_cap = cap;
  }
  m->stack[(*top)++] = n;
  return true;
}

/* Whether chains `a` and `b` together are convex and within the input limit;
 * false on out-of-memory too (they then simply stay apart). */
static bool can_join(Merger* m, long a, long b) {
  nm_clear(&m->in_set);
  nm_clear(&m->seen);
  const long heads[2] = {a, b};
  for (int h = 0; h < 2; h++)
    for (long k = heads[h]; k >= 0; k = m->c[k].next)
      for (size_t j = 0; j < m->c[k].n; j++)
        if (!nm_put(&m->in_set, m->c[k].nodes[j], 1)) return false;
  /* Every input entering the set from a producer outside it must not depend
   * on the set; count the variable ones. */
  const OnyxValueInfo* vars[DNNL_MAX_CHAIN_IN];
  size_t n_vars = 0;
  size_t top = 0;
  for (int h = 0; h < 2; h++) {
    for (long k = heads[h]; k >= 0; k = m->c[k].next) {
      for (size_t j = 0; j < m->c[k].n; j++) {
        const OnyxNode* n = m->c[k].nodes[j];
        for (size_t q = 0; q < H->node_input_count(n); q++) {
          const OnyxValueInfo* x = H->node_input(n, q);
          if (!x || H->value_constant(x)) continue;
          const OnyxNode* p = H->value_producer(x);
          if (p && nm_get(&m->in_set, p) >= 0) continue;
          bool known = false;
          for (size_t t = 0; t < n_vars && !known; t++)
            known = vars[t] == x;
          if (!known) {
            if (n_vars == DNNL_MAX_CHAIN_IN) return false;
            vars[n_vars++] = x;
          }
          if (p && nm_get(&m->seen, p) < 0) {
            if (!nm_put(&m->seen, p, 1) || !push(m, &top, p)) return false;
          }
        }
      }
    }
  }
  while (top) { /* walk back from the outside producers: reaching the set is a cycle */
    const OnyxNode* p = m->stack[--top];
    if (nm_get(&m->in_set, p) >= 0) return false;
    for (size_t q = 0; q < H->node_input_count(p); q++) {
      const OnyxValueInfo* x = H->node_input(p, q);
      const OnyxNode* pp = x ? H->value_producer(x) : NULL;
      if (!pp || nm_get(&m->seen, pp) >= 0) continue;
      if (!nm_put(&m->seen, pp, 1) || !push(m, &top, pp)) return false;
    }
  }
  return true;
}

/* Chain `b` joins chain `a`. */
static void join(Merger* m, long a, long b) {
  for (long k = b; k >= 0; k = m->c[k].next)
    m->c[k].chain = a;
  m->c[m->c[a].last].next = b;
  m->c[a].last = m->c[b].last;
  m->c[a].n_stages += m->c[b].n_stages;
}

/* Each chain, in order, joins the first other chain that produces one of its
 * inputs (the data input first) when can_join allows; repeated while chains
 * join (a chain may join one only after a third joined it), a few rounds at
 * most. */
static void merge_claims(Merger* m) {
  bool changed = true;
  for (int round = 0; round < 4 && changed; round++) {
    changed = false;
    for (size_t i = 0; i < m->n; i++) {
      if (!m->c[i].chainable || m->c[i].chain != (long)i) continue;
      bool joined = false;
      for (long k = (long)i; k >= 0 && !joined; k = m->c[k].next) {
        for (size_t j = 0; j < m->c[k].n && !joined; j++) {
          const OnyxNode* n = m->c[k].nodes[j];
          for (size_t q = 0; q < H->node_input_count(n) && !joined; q++) {
            const OnyxValueInfo* x = H->node_input(n, q);
            const OnyxNode* p = x ? H->value_producer(x) : NULL;
            long owner = p ? nm_get(&m->owner, p) : -1;
            if (owner < 0 || !m->c[owner].chainable) continue;
            long ch = m->c[owner].chain;
            if (ch == (long)i || m->c[ch].n_stages + m->c[i].n_stages > DNNL_MAX_STAGES ||
                !can_join(m, ch, (long)i))
              continue;
            join(m, ch, (long)i);
            joined = changed = true;
          }
        }
      }
    }
  }
}

/* --- get_capability --------------------------------------------------------------------------- */

static long view_index(const View* v, const OnyxNode* n) {
  for (size_t i = 0; i < v->n; i++)
    if (H->graph_node(v->g, i) == n) return (long)i;
  return -1;
}

/* The ops a group is worth making for on their own: everything else is light
 * (element-wise, Softmax, normalizations). */
static bool heavy(const OnyxNode* n) {
  return is_op(n, "Conv") || is_fused_conv(n) || is_op(n, "MatMul") || is_op(n, "Gemm") ||
         is_fused_matmul(n) || is_op(n, "ConvTranspose");
}

/* A MatMul whose A has rank above 2: the transformer projections
 * ([B, S, K] x [K, N]) and attention's batched products. Measured slower here
 * than in the CPU provider's GEMM, as FusedMatMul's (match_anchor). */
static bool leave_matmul(const OnyxNode* n) {
  return is_op(n, "MatMul") && H->value_rank(in(n, 0)) > 2;
}

/* Marks (in `left`, per view index) the work this provider leaves to the
 * next one: each MatMul of leave_matmul with the chain it would have
 * absorbed (bias, post-ops, residual sum), then, in topological order,
 * every light node whose inputs come from that work or from nodes this
 * provider does not take (graph inputs, other providers' nodes, ops it has
 * no primitive for), at least one from that work. A light op alone is not
 * worth a group here, and left with its producer the next provider can fuse
 * it (into its product, its attention, its Gelu). */
static bool mark_left(const DnnlEp* ep, const View* v, bool* left) {
  NodeMap index = {0};
  bool* mine = calloc(v->n ? v->n : 1, sizeof *mine);
  bool ok = mine && nm_init(&index, v->n);
  bool any = false;
  for (size_t i = 0; ok && i < v->n; i++)
    ok = nm_put(&index, H->graph_node(v->g, i), (long)i);
  for (size_t i = 0; ok && i < v->n; i++) {
    const OnyxNode* n = H->graph_node(v->g, i);
    if (left[i] || !leave_matmul(n)) continue;
    DnnlPattern p;
    const char* why = NULL;
    const OnyxNode* nodes[DNNL_PATTERN_NODES] = {n};
    size_t cnt = dnnl_match(ep, v->g, n, &p, &why) ? dnnl_pattern_nodes(&p, nodes) : 1;
    for (size_t k = 0; k < cnt; k++) {
      long at = nm_get(&index, nodes[k]);
      if (at >= 0) left[at] = true;
    }
    any = true;
  }
  for (size_t i = 0; ok && any && i < v->n; i++) {
    const OnyxNode* n = H->graph_node(v->g, i);
    DnnlPattern p;
    const char* why = NULL;
    if (left[i]) continue;
    bool from_left = false, elsewhere = true;
    for (size_t k = 0; !heavy(n) && k < H->node_input_count(n) && elsewhere; k++) {
      const OnyxValueInfo* x = H->node_input(n, k);
      const OnyxNode* prod = x && !H->value_constant(x) ? H->value_producer(x) : NULL;
      long at = prod ? nm_get(&index, prod) : -1;
      if (at < 0) continue; /* a graph input, or another provider's node */
      if (left[at])
        from_left = true;
      else
        elsewhere = !mine[at];
    }
    if (from_left && elsewhere)
      left[i] = true;
    else
      mine[i] = dnnl_match(ep, v->g, n, &p, &why);
  }
  nm_free(&index);
  free(mine);
  return ok;
}

/* Stages that may be chained: Conv groups and pooling. */
static bool chainable(const DnnlPattern* p) {
  return p->kind == DK_CONV || p->kind == DK_POOL;
}

OnyxStatus* dnnl_get_capability(OnyxEp* ep_, const OnyxGraphView* g, OnyxCapabilityBuilder* b) {
  const DnnlEp* ep = ep_->ctx;
  View v = {g, H->graph_node_count(g)};
  bool* taken = calloc(v.n ? v.n : 1, sizeof *taken);
  Merger m = {.c = calloc(v.n ? v.n : 1, sizeof(Claim))};
  bool maps = nm_init(&m.owner, v.n) && nm_init(&m.in_set, 64) && nm_init(&m.seen, v.n);
  OnyxStatus* st = NULL;
  bool* left = calloc(v.n ? v.n : 1, sizeof *left);
  if (!taken || !m.c || !maps || !left) st = dnnl_err(NULL, ONYX_OUT_OF_MEMORY, "out of memory");
  if (!st && !mark_left(ep, &v, left)) st = dnnl_err(NULL, ONYX_OUT_OF_MEMORY, "out of memory");
  for (size_t i = 0; i < v.n && !st; i++) {
    if (taken[i]) continue;
    const OnyxNode* n = H->graph_node(g, i);
    if (left[i]) {
      H->decline_node(b, n,
                      leave_matmul(n)
                          ? "MatMul with A of rank above 2 is left to the next provider (the CPU "
                            "provider's GEMM is faster)"
                          : "its inputs come from work left to the next provider, which can fuse "
                            "it there");
      continue;
    }
    DnnlPattern p;
    const char* why = NULL;
    if (dnnl_bwd_is(n)) { /* a gradient op: a group of its own */
      if (!dnnl_bwd_match(n, &why)) {
        H->decline_node(b, n, why);
        continue;
      }
      Claim* c = &m.c[m.n];
      c->nodes[0] = n;
      c->n = 1;
      c->chainable = false;
      c->chain = c->last = (long)m.n;
      c->next = -1;
      c->n_stages = 1;
      taken[i] = true;
      if (!nm_put(&m.owner, n, (long)m.n)) st = dnnl_err(NULL, ONYX_OUT_OF_MEMORY, "out of memory");
      m.n++;
      continue;
    }
    if (!dnnl_match(ep, g, n, &p, &why)) {
      H->decline_node(b, n, why);
      continue;
    }
    Claim* c = &m.c[m.n];
    size_t cnt = dnnl_pattern_nodes(&p, c->nodes);
    /* Members already in an earlier group (a residual Add another chain took)
     * end this chain: keep the part before the first of them. */
    long idx[DNNL_PATTERN_NODES];
    size_t keep = 0;
    for (; keep < cnt; keep++) {
      idx[keep] = keep ? view_index(&v, c->nodes[keep]) : (long)i;
      if (idx[keep] < 0 || taken[idx[keep]]) break;
    }
    c->n = keep ? keep : 1;
    c->chainable = ep->opt.chain && chainable(&p);
    c->chain = c->last = (long)m.n;
    c->next = -1;
    c->n_stages = 1;
    for (size_t k = 0; k < c->n; k++) {
      taken[idx[k]] = true;
      if (!nm_put(&m.owner, c->nodes[k], (long)m.n))
        st = dnnl_err(NULL, ONYX_OUT_OF_MEMORY, "out of memory");
    }
    m.n++;
  }
  if (!st) merge_claims(&m);
  const OnyxNode** nodes = NULL;
  size_t cap = 0;
  for (size_t i = 0; i < m.n && !st; i++) {
    if (m.c[i].chain != (long)i) continue; /* claimed with its chain */
    size_t cnt = 0;
    for (long k = (long)i; k >= 0 && !st; k = m.c[k].next) {
      if (cnt + m.c[k].n > cap) {
        cap = 2 * (cnt + m.c[k].n);
        const OnyxNode** bigger = realloc(nodes, cap * sizeof *nodes);
        if (!bigger) {
          st = dnnl_err(NULL, ONYX_OUT_OF_MEMORY, "out of memory");
          break;
        }
        nodes = bigger;
      }
      memcpy(nodes + cnt, m.c[k].nodes, m.c[k].n * sizeof *nodes);
      cnt += m.c[k].n;
    }
    if (st) break;
    char name[256];
    snprintf(name, sizeof name, "onednn_%s", H->node_name(m.c[i].nodes[0]));
    st = H->claim_group(b, nodes, cnt, name);
  }
  free(nodes);
  free(m.stack);
  nm_free(&m.owner);
  nm_free(&m.in_set);
  nm_free(&m.seen);
  free(left);
  free(m.c);
  free(taken);
  return st;
}
