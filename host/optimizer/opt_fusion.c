/* opt_fusion.c — the extended level: MatMul+Add -> Gemm / com.onyx
 * FusedMatMul, Conv+BatchNormalization folding, Conv+activation ->
 * com.onyx FusedConv, LayerNormalization, Gelu and Silu from their
 * primitives. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "opt_internal.h"

static bool ox_f32(const OxValue* v) {
  return v && v->type == ONYX_ELEM_FLOAT32;
}

static bool ox_half_type(int32_t t) {
  return t == ONYX_ELEM_FLOAT16 || t == ONYX_ELEM_BFLOAT16;
}

/* v is a value the MatMul, Gelu and LayerNormalization fusions take:
 * float32 anywhere; float16 or bfloat16 only after placement and off the
 * CPU provider (the GPU providers' fused kernels take them, the CPU
 * provider's do not), where ox_may_fuse then asks the provider for a
 * kernel of that type (the session's may_fuse matches the type of the
 * asking node's first input). */
static bool ox_real(const OxOpt* o, const OxValue* v) {
  if (!v) return false;
  if (v->type == ONYX_ELEM_FLOAT32) return true;
  return ox_half_type(v->type) && o->cfg->phase == OX_OPT_PHASE_FUSION && o->cfg->may_fuse &&
         !ox_opt_on_cpu(o);
}

/* ox_real(v), and v has the element type of `like`. */
static bool ox_real_as(const OxOpt* o, const OxValue* v, const OxValue* like) {
  return ox_real(o, v) && like && v->type == like->type;
}

/* A scalar constant (ox_opt_const_scalar), float16 and bfloat16 ones
 * included: the constants of a float16 model's Gelu and LayerNormalization
 * patterns have the model's type. */
static bool ox_const_real(const OxValue* v, double* out) {
  if (ox_opt_const_scalar(v, out)) return true;
  if (!v || !v->constant || v->is_graph_input) return false;
  const OxTensor* t = v->constant;
  if (!ox_half_type(t->type) || t->count < 1 || !t->data || t->device.kind != ONYX_DEVICE_CPU)
    return false;
  const uint16_t* h = t->data;
  for (size_t i = 1; i < t->count; i++)
    if (h[i] != h[0]) return false;
  if (t->type == ONYX_ELEM_BFLOAT16) { /* the high half of a float32 */
    uint32_t bits = (uint32_t)h[0] << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    *out = f;
    return true;
  }
  const int e = (h[0] >> 10) & 31, m = h[0] & 1023;
  if (e == 31) return false; /* inf or NaN: no pattern's constant */
  const double mag = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
  *out = h[0] & 0x8000 ? -mag : mag;
  return true;
}

static bool ox_host_const(const OxValue* v) {
  return v && v->constant && !v->is_graph_input && v->constant->device.kind == ONYX_DEVICE_CPU &&
         (v->constant->data || !v->constant->count);
}

/* n is the com.onyx op `op`. */
static bool ox_is_contrib(const OxNode* n, const char* op) {
  return n && !strcmp(n->domain, OX_CONTRIB_DOMAIN) && !strcmp(n->op_type, op);
}

/* Other outputs of n (index >= 1) are absent or unused. */
static bool ox_only_first_output(const OxOpt* o, const OxNode* n) {
  for (size_t i = 1; i < n->n_outputs; i++)
    if (n->outputs[i] && (n->outputs[i]->n_consumers || ox_opt_pinned(o, n->outputs[i])))
      return false;
  return true;
}

/* --- MatMul + Add ------------------------------------------------------------------------------
 */

/* C broadcasts unidirectionally to [M, N] (Gemm's rule). */
static bool ox_gemm_bias_ok(const OxValue* c, const OxValue* prod) {
  if (!c || c->rank < 0 || c->rank > 2 || !prod || prod->rank != 2) return false;
  for (int32_t i = 0; i < c->rank; i++) {
    int64_t cd = c->dims[i], yd = prod->dims[2 - c->rank + i];
    if (cd != 1 && (cd < 0 || cd != yd)) return false;
  }
  return true;
}

/* A bias of N elements along the last axis: rank 1 [N], or [1, ..., 1, N]. */
static bool ox_row_bias(const OxValue* c, int64_t n) {
  if (!ox_host_const(c) || c->rank < 1 || c->dims[c->rank - 1] != n || n < 0) return false;
  for (int32_t i = 0; i + 1 < c->rank; i++)
    if (c->dims[i] != 1) return false;
  return true;
}

/* OxOptConfig.may_fuse for n's fusion into `op` of `domain`. */
static bool ox_may_fuse(const OxOpt* o, const OxNode* n, const char* domain, const char* op) {
  return !o->cfg->may_fuse || o->cfg->may_fuse(o->cfg->fuse_ctx, n, domain, op);
}

static OnyxStatus* ox_fuse_matmul_add(OxOpt* o, OxNode* add, bool* done) {
  *done = false;
  if (!ox_opt_is(add, "Add") || add->n_inputs != 2) return NULL;
  OxNode* mm = NULL;
  size_t side = 0;
  for (; side < 2 && !mm; side++) {
    mm = ox_opt_producer(add, side, "MatMul");
    if (mm && !ox_opt_single_use(o, mm->outputs[0])) mm = NULL;
  }
  if (!mm) return NULL;
  OxValue* a = mm->inputs[0];
  OxValue* b = mm->inputs[1];
  OxValue* c = add->inputs[2 - side]; /* side was incremented past the match */
  OxValue* y = add->outputs[0];
  OxValue* prod = mm->outputs[0];
  if (!ox_real(o, a) || !ox_real_as(o, b, a) || !ox_real_as(o, c, a) || b->rank != 2 || a->rank < 2)
    return NULL;
  /* The Add must not broadcast the product to a larger shape: the bias
   * checks below keep every dim of the product. */
  if (prod->rank < 2 || c->rank > prod->rank) return NULL;
  bool gemm = a->rank == 2 && ox_gemm_bias_ok(c, prod) && ox_graph_opset(o->g, "") >= 7 &&
              ox_may_fuse(o, mm, "", "Gemm");
  bool fused = !gemm && o->cfg->contrib_available && ox_row_bias(c, b->dims[1]) &&
               ox_may_fuse(o, mm, OX_CONTRIB_DOMAIN, "FusedMatMul");
  if (!gemm && !fused) return NULL;
  OxValue* ins[3] = {a, b, c};
  const char* name = mm->name;
  char* keep = ox_strdup(name);
  if (!keep) return ox_oom();
  ox_opt_remove(o, add);
  ox_opt_remove(o, mm);
  OxNode* nn = NULL;
  OnyxStatus* st = ox_opt_add_node(o, keep, gemm ? "Gemm" : "FusedMatMul",
                                   gemm ? "" : OX_CONTRIB_DOMAIN, ins, 3, &y, 1, &nn);
  free(keep);
  OX_TRY(st);
  if (gemm)
    o->stats->gemm++;
  else
    o->stats->fused_matmul++;
  *done = true;
  return NULL;
}

OnyxStatus* ox_pass_matmul_add(OxOpt* o, bool* changed) {
  return ox_opt_rewrite_each(o, ox_fuse_matmul_add, NULL, changed);
}

/* --- Conv + BatchNormalization ---------------------------------------------------------------- */

static OnyxStatus* ox_fold_conv_bn(OxOpt* o, OxNode* bn, bool* done) {
  *done = false;
  if (!ox_opt_is(bn, "BatchNormalization") || bn->n_inputs != 5 || !bn->outputs[0]) return NULL;
  if (ox_node_attr_int(bn, "training_mode", 0) != 0 || !ox_only_first_output(o, bn)) return NULL;
  if (bn->since_version < 7 && ox_node_attr_int(bn, "is_test", 0) == 0 && bn->n_outputs > 1)
    return NULL;
  OxNode* conv = ox_opt_producer(bn, 0, "Conv");
  if (!conv || !ox_opt_single_use(o, conv->outputs[0])) return NULL;
  OxValue* w = conv->inputs[1];
  OxValue* b = conv->n_inputs > 2 ? conv->inputs[2] : NULL;
  if (!ox_f32(w) || !ox_host_const(w) || w->rank < 3 || (b && (!ox_f32(b) || !ox_host_const(b))))
    return NULL;
  int64_t cout = w->dims[0];
  for (size_t i = 1; i < 5; i++) {
    const OxValue* p = bn->inputs[i];
    if (!ox_f32(p) || !ox_host_const(p) || (int64_t)p->constant->count != cout) return NULL;
  }
  if (b && (int64_t)b->constant->count != cout) return NULL;
  const float* scale = bn->inputs[1]->constant->data;
  const float* shift = bn->inputs[2]->constant->data;
  const float* mean = bn->inputs[3]->constant->data;
  const float* var = bn->inputs[4]->constant->data;
  double eps = ox_node_attr_float(bn, "epsilon", 1e-5f);
  OxTensor *nw = NULL, *nb = NULL;
  OX_TRY(ox_tensor_new_uninit(ONYX_ELEM_FLOAT32, w->constant->dims, w->constant->rank, &nw));
  int64_t bdims[1] = {cout};
  OnyxStatus* st = ox_tensor_new_uninit(ONYX_ELEM_FLOAT32, bdims, 1, &nb);
  if (st) {
    ox_tensor_free(nw);
    return st;
  }
  size_t per = cout ? nw->count / (size_t)cout : 0;
  float* wd = nw->data;
  const float* ow = w->constant->data;
  float* bd = nb->data;
  const float* ob = b ? b->constant->data : NULL;
  for (int64_t c = 0; c < cout; c++) {
    double f = scale[c] / sqrt((double)var[c] + eps);
    for (size_t k = 0; k < per; k++)
      wd[(size_t)c * per + k] = (float)(ow[(size_t)c * per + k] * f);
    bd[c] = (float)(((ob ? ob[c] : 0.0) - mean[c]) * f + shift[c]);
  }
  OxValue *vw = NULL, *vb = NULL;
  st = ox_opt_new_constant(o, w->name, nw, &vw);
  if (st) {
    ox_tensor_free(nb);
    return st;
  }
  OX_TRY(ox_opt_new_constant(o, b ? b->name : conv->name, nb, &vb));
  OX_TRY(ox_opt_set_input(conv, 1, vw));
  OX_TRY(ox_opt_set_input(conv, 2, vb));
  OxValue* y = bn->outputs[0];
  ox_opt_remove(o, bn);
  ox_opt_set_output(o, conv, 0, y);
  o->stats->conv_bn++;
  *done = true;
  return NULL;
}

OnyxStatus* ox_pass_conv_bn(OxOpt* o, bool* changed) {
  return ox_opt_rewrite_each(o, ox_fold_conv_bn, NULL, changed);
}

/* --- Conv + activation --------------------------------------------------------------------------
 */

/* The activation `kind` (with its parameters) after a com.onyx FusedMatMul
 * without one, or after a Gemm that is one (transA 0, alpha and beta 1, a
 * constant 2-D B, a constant bias C of N values; B is transposed into a new
 * constant for transB 1): com.onyx FusedMatMul with `activation`, which the
 * CPU provider applies in the GEMM epilogue. */
static OnyxStatus* ox_fuse_matmul_act(OxOpt* o, OxNode* act, const char* kind, float lo, float hi,
                                      float alpha, bool* done) {
  OxValue* p_out = act->inputs[0];
  OxNode* mm = p_out ? p_out->producer : NULL;
  if (!mm || !ox_opt_single_use(o, p_out) || mm->n_outputs != 1) return NULL;
  const bool fused = ox_is_contrib(mm, "FusedMatMul");
  if (fused) {
    const char* a = ox_node_attr_string(mm, "activation", "");
    if (a && *a) return NULL; /* one activation already */
  } else if (!ox_opt_is(mm, "Gemm") || mm->n_inputs != 3 || !mm->inputs[2] ||
             !ox_may_fuse(o, mm, OX_CONTRIB_DOMAIN, "FusedMatMul")) {
    return NULL;
  }
  OxValue* a = mm->inputs[0];
  OxValue* b = mm->inputs[1];
  OxValue* c = mm->inputs[2];
  if (!ox_real(o, a) || !ox_real_as(o, b, a) || !ox_real_as(o, c, a) || b->rank != 2 ||
      !ox_real_as(o, p_out, a))
    return NULL;
  OxValue* nb = b;
  if (!fused) {
    if (ox_node_attr_int(mm, "transA", 0) != 0 || ox_node_attr_float(mm, "alpha", 1.0f) != 1.0f ||
        ox_node_attr_float(mm, "beta", 1.0f) != 1.0f || a->rank != 2 || !ox_host_const(b))
      return NULL;
    const bool tb = ox_node_attr_int(mm, "transB", 0) != 0;
    if (tb && !ox_f32(b)) return NULL; /* the transposition below copies float32 */
    const int64_t n = b->dims[tb ? 0 : 1], k = b->dims[tb ? 1 : 0];
    if (!ox_row_bias(c, n) || c->rank > 2) return NULL;
    if (tb) {
      OxTensor* t = NULL;
      OX_TRY(ox_tensor_new_uninit(ONYX_ELEM_FLOAT32, (int64_t[]){k, n}, 2, &t));
      const float* src = b->constant->data;
      float* dst = t->data;
      /* In 32 x 32 blocks: a plain loop strides one side by a whole row per
       * element (16 ms for mlp's 1024 x 784 at session creation). An empty B
       * copies nothing: its other dim may be as large as int64 allows. */
      for (int64_t i0 = 0; n > 0 && i0 < k; i0 += 32)
        for (int64_t j0 = 0; j0 < n; j0 += 32)
          for (int64_t j = j0; j < j0 + 32 && j < n; j++)
            for (int64_t i = i0; i < i0 + 32 && i < k; i++)
              dst[i * n + j] = src[j * k + i];
      OX_TRY(ox_opt_new_constant(o, b->name, t, &nb));
    }
  }
  /* a FusedMatMul's residual Z (ox_fuse_matmul_residual) stays: Y = act(A B + Bias + Z) */
  OxValue* z = fused && mm->n_inputs > 3 ? mm->inputs[3] : NULL;
  OxValue* ins[4] = {a, nb, c, z};
  OxValue* y = act->outputs[0];
  char* base = ox_strdup(mm->name);
  if (!base) return ox_oom();
  ox_opt_remove(o, act);
  ox_opt_remove(o, mm);
  OxNode* fm = NULL;
  OnyxStatus* st =
      ox_opt_add_node(o, base, "FusedMatMul", OX_CONTRIB_DOMAIN, ins, z ? 4 : 3, &y, 1, &fm);
  free(base);
  OX_TRY(st);
  OX_TRY(ox_opt_attr_string(fm, "activation", kind));
  if (!strcmp(kind, "LeakyRelu")) OX_TRY(ox_opt_attr_float(fm, "alpha", alpha));
  if (!strcmp(kind, "Clip")) {
    OX_TRY(ox_opt_attr_float(fm, "clip_min", lo));
    OX_TRY(ox_opt_attr_float(fm, "clip_max", hi));
  }
  o->stats->matmul_act++;
  *done = true;
  return NULL;
}

/* Both values have the same static shape (every dim known). */
static bool ox_same_static_shape(const OxValue* a, const OxValue* b) {
  if (!a || !b || a->rank < 0 || a->rank != b->rank || !a->dims || !b->dims) return false;
  for (int32_t i = 0; i < a->rank; i++)
    if (a->dims[i] < 0 || a->dims[i] != b->dims[i]) return false;
  return true;
}

/* act's input is Add(Conv(...), Z) (either order) with Z of the sum's
 * static shape (no broadcasting) and each intermediate read only there: the
 * residual of a ResNet block, which FusedConv adds in its epilogue before
 * the activation. Returns the Conv (and the Add and Z), or NULL. */
static OxNode* ox_residual_conv(const OxOpt* o, const OxNode* act, OxNode** add, OxValue** z) {
  OxNode* a = ox_opt_producer(act, 0, "Add");
  if (!a || a->n_inputs != 2 || !a->inputs[0] || !a->inputs[1] ||
      !ox_opt_single_use(o, a->outputs[0]))
    return NULL;
  for (size_t side = 0; side < 2; side++) {
    OxNode* c = ox_opt_producer(a, side, "Conv");
    OxValue* other = a->inputs[1 - side];
    if (!c || other == c->outputs[0] || !ox_f32(other) || !ox_opt_single_use(o, c->outputs[0]) ||
        !ox_same_static_shape(c->outputs[0], other) || !ox_same_static_shape(a->outputs[0], other))
      continue;
    *add = a, *z = other;
    return c;
  }
  return NULL;
}

/* Gelu (com.onyx, or ONNX Gelu-20 without the tanh approximation) after
 * a com.onyx FusedMatMul without an activation (or a Gemm that is one, as
 * for the other activations): FusedMatMul with
 * activation "Gelu", whose CPU kernel runs Gelu's own kernel over each tile
 * of the product while it is in cache (the same results, one pass over
 * memory fewer). Only with the CPU provider alone: another provider that
 * runs FusedMatMul need not know that activation. */
static bool ox_exact_gelu(const OxNode* act) {
  if (act->n_inputs != 1 || !act->inputs[0] || strcmp(act->op_type, "Gelu")) return false;
  if (!strcmp(act->domain, OX_CONTRIB_DOMAIN)) return true;
  const char* approx = ox_node_attr_string(act, "approximate", "none");
  return !*act->domain && approx && !strcmp(approx, "none");
}

static OnyxStatus* ox_fuse_conv_act(OxOpt* o, OxNode* act, bool* done) {
  *done = false;
  if (!o->cfg->contrib_available || act->n_inputs < 1) return NULL;
  if (ox_exact_gelu(act)) {
    const OxNode* mm = act->inputs[0]->producer;
    const bool fmm = ox_is_contrib(mm, "FusedMatMul");
    if (!ox_opt_on_cpu(o) || !(fmm || ox_opt_is(mm, "Gemm"))) return NULL;
    return ox_fuse_matmul_act(o, act, "Gelu", 0, 0, 0, done);
  }
  /* com.onyx Silu and HardSwish come from ox_pass_silu's Mul(x, gate(x)) */
  const bool contrib = !strcmp(act->domain, OX_CONTRIB_DOMAIN);
  if (*act->domain && !contrib) return NULL;
  char kind[16]; /* copied: act is removed before the attribute is written */
  snprintf(kind, sizeof kind, "%s", act->op_type);
  float lo = -INFINITY, hi = INFINITY, alpha = 0, beta = 0;
  /* The smooth activations (the CPU provider's row activations): only on
   * the CPU provider, the one FusedConv kernel that applies them (oneDNN's
   * and CUDA's take Relu, LeakyRelu and Clip), and onto a Conv only. */
  bool smooth = false;
  if (contrib) {
    if (strcmp(kind, "Silu") && strcmp(kind, "HardSwish")) return NULL;
    smooth = true;
  } else if (!strcmp(kind, "HardSwish") || !strcmp(kind, "Sigmoid") || !strcmp(kind, "Tanh")) {
    smooth = true;
  } else if (!strcmp(kind, "HardSigmoid")) {
    alpha = ox_node_attr_float(act, "alpha", 0.2f);
    beta = ox_node_attr_float(act, "beta", 0.5f);
    smooth = true;
  } else if (!strcmp(kind, "Relu")) {
    lo = 0;
  } else if (!strcmp(kind, "Clip")) {
    if (act->since_version < 11) {
      lo = ox_node_attr_float(act, "min", -INFINITY);
      hi = ox_node_attr_float(act, "max", INFINITY);
    } else {
      double v;
      if (act->n_inputs > 1 && act->inputs[1]) {
        if (!ox_const_real(act->inputs[1], &v)) return NULL;
        lo = (float)v;
      }
      if (act->n_inputs > 2 && act->inputs[2]) {
        if (!ox_const_real(act->inputs[2], &v)) return NULL;
        hi = (float)v;
      }
    }
  } else if (!strcmp(kind, "LeakyRelu")) {
    alpha = ox_node_attr_float(act, "alpha", 0.01f);
  } else {
    return NULL;
  }
  OxNode* add = NULL;
  OxValue* z = NULL;
  OxNode* conv = ox_opt_producer(act, 0, "Conv");
  if (!conv && ox_opt_on_cpu(o)) conv = ox_residual_conv(o, act, &add, &z);
  if (smooth && (act->n_inputs != 1 || !ox_opt_on_cpu(o))) return NULL;
  if (!conv) return smooth ? NULL : ox_fuse_matmul_act(o, act, kind, lo, hi, alpha, done);
  if (!ox_opt_single_use(o, conv->outputs[0]) ||
      !ox_may_fuse(o, conv, OX_CONTRIB_DOMAIN, "FusedConv"))
    return NULL;
  const OxValue* x = conv->inputs[0];
  const OxValue* w = conv->inputs[1];
  if (!ox_f32(x) || !ox_f32(w) || x->rank != 4 || w->rank != 4) return NULL;
  OxValue* ins[4] = {conv->inputs[0], conv->inputs[1], conv->n_inputs > 2 ? conv->inputs[2] : NULL,
                     z};
  const size_t n_ins = z ? 4 : ins[2] ? 3 : 2;
  OxValue* y = act->outputs[0];
  OxNode* fc = NULL;
  char* base = ox_strdup(conv->name);
  if (!base) return ox_oom();
  ox_opt_remove(o, act);
  if (add) ox_opt_remove(o, add);
  OnyxStatus* st = ox_opt_add_node(o, base, "FusedConv", OX_CONTRIB_DOMAIN, ins, n_ins, &y, 1, &fc);
  free(base);
  OX_TRY(st);
  OX_TRY(ox_opt_copy_attrs(fc, conv));
  OX_TRY(ox_opt_attr_string(fc, "activation", kind));
  if (!strcmp(kind, "LeakyRelu")) OX_TRY(ox_opt_attr_float(fc, "alpha", alpha));
  if (!strcmp(kind, "Clip")) {
    OX_TRY(ox_opt_attr_float(fc, "clip_min", lo));
    OX_TRY(ox_opt_attr_float(fc, "clip_max", hi));
  }
  if (!strcmp(kind, "HardSigmoid")) {
    OX_TRY(ox_opt_attr_float(fc, "alpha", alpha));
    OX_TRY(ox_opt_attr_float(fc, "beta", beta));
  }
  ox_opt_remove(o, conv);
  if (z)
    o->stats->conv_add++;
  else
    o->stats->conv_act++;
  *done = true;
  return NULL;
}

/* Add(P, Z) (either order) where P is a com.onyx FusedMatMul's product
 * without an activation or a residual yet, read only there, and Z has the
 * sum's static shape (no broadcasting): FusedMatMul(A, B, Bias, Z), whose
 * CPU kernel starts C from Z (in place when Z dies there) and adds the
 * product and bias in the GEMM epilogue: BERT's residual sums after the
 * attention output and the second FFN product. Only with the CPU provider
 * alone, as FusedConv's Z. */
static OnyxStatus* ox_fuse_matmul_residual(OxOpt* o, OxNode* add, bool* done) {
  *done = false;
  if (!ox_opt_on_cpu(o) || !ox_opt_is(add, "Add") || add->n_inputs != 2 || !add->inputs[0] ||
      !add->inputs[1] || add->inputs[0] == add->inputs[1])
    return NULL;
  for (size_t side = 0; side < 2; side++) {
    OxValue* p = add->inputs[side];
    OxValue* z = add->inputs[1 - side];
    OxNode* mm = p->producer;
    if (!mm || strcmp(mm->domain, OX_CONTRIB_DOMAIN) || strcmp(mm->op_type, "FusedMatMul") ||
        mm->n_inputs != 3 || mm->n_outputs != 1 || !ox_opt_single_use(o, p) || !ox_f32(z) ||
        !ox_same_static_shape(p, z) || !ox_same_static_shape(add->outputs[0], z))
      continue;
    const char* act = ox_node_attr_string(mm, "activation", "");
    if (act && *act) continue; /* the activation comes before the sum there */
    OxValue* ins[4] = {mm->inputs[0], mm->inputs[1], mm->inputs[2], z};
    OxValue* y = add->outputs[0];
    char* base = ox_strdup(mm->name);
    if (!base) return ox_oom();
    ox_opt_remove(o, add);
    ox_opt_remove(o, mm);
    OxNode* fm = NULL;
    OnyxStatus* st = ox_opt_add_node(o, base, "FusedMatMul", OX_CONTRIB_DOMAIN, ins, 4, &y, 1, &fm);
    free(base);
    OX_TRY(st);
    o->stats->matmul_add_z++;
    *done = true;
    return NULL;
  }
  return NULL;
}

OnyxStatus* ox_pass_matmul_residual(OxOpt* o, bool* changed) {
  return ox_opt_rewrite_each(o, ox_fuse_matmul_residual, NULL, changed);
}

OnyxStatus* ox_pass_conv_act(OxOpt* o, bool* changed) {
  return ox_opt_rewrite_each(o, ox_fuse_conv_act, NULL, changed);
}

/* --- LayerNormalization
 * ---------------------------------------------------------------------------- */

/* ReduceMean over the last axis only, keeping dims. */
static bool ox_mean_last_axis(const OxNode* r, int32_t rank) {
  if (!ox_opt_is(r, "ReduceMean") || ox_node_attr_int(r, "keepdims", 1) != 1 || rank < 1)
    return false;
  int64_t* axes = NULL;
  size_t count = 0;
  const int64_t* attr = ox_node_attr_ints(r, "axes", &count);
  bool ok;
  if (attr) {
    ok = count == 1 && (attr[0] == -1 || attr[0] == rank - 1);
  } else if (r->n_inputs > 1 && r->inputs[1]) {
    ok = ox_opt_const_ints(r->inputs[1], &axes, &count) && count == 1 &&
         (axes[0] == -1 || axes[0] == rank - 1);
  } else {
    ok = false;
  }
  free(axes);
  return ok;
}

/* The input of n other than v (n binary), or NULL. */
static OxValue* ox_other(const OxNode* n, const OxValue* v) {
  if (n->n_inputs != 2) return NULL;
  if (n->inputs[0] == v) return n->inputs[1];
  if (n->inputs[1] == v) return n->inputs[0];
  return NULL;
}

/* The single consumer of v if it is the ai.onnx op `op`. */
static OxNode* ox_sole_consumer(const OxOpt* o, const OxValue* v, const char* op) {
  if (!ox_opt_single_use(o, v)) return NULL;
  return ox_opt_is(v->consumers[0], op) ? v->consumers[0] : NULL;
}

static OnyxStatus* ox_fuse_layernorm(OxOpt* o, OxNode* div, bool* done) {
  *done = false;
  if (!ox_opt_is(div, "Div") || div->n_inputs != 2) return NULL;
  OxValue* d = div->inputs[0];
  OxNode* sqrt_n = ox_opt_producer(div, 1, "Sqrt");
  OxNode* sub = ox_opt_producer(div, 0, "Sub");
  if (!sqrt_n || !sub || !ox_opt_single_use(o, div->inputs[1])) return NULL;
  OxValue* x = sub->inputs[0];
  if (!ox_real(o, x) || x->rank < 1) return NULL;
  OxNode* mean = ox_opt_producer(sub, 1, "ReduceMean");
  if (!mean || mean->inputs[0] != x || !ox_mean_last_axis(mean, x->rank) ||
      !ox_opt_single_use(o, mean->outputs[0]))
    return NULL;
  /* d feeds exactly the square and this Div. */
  if (d->n_consumers != 2 || ox_opt_pinned(o, d)) return NULL;
  OxNode* sq = d->consumers[0] == div ? d->consumers[1] : d->consumers[0];
  double two;
  if (ox_opt_is(sq, "Pow")) {
    if (sq->inputs[0] != d || !ox_const_real(sq->inputs[1], &two) || two != 2.0) return NULL;
  } else if (!ox_opt_is(sq, "Mul") || sq->inputs[0] != d || sq->inputs[1] != d) {
    return NULL;
  }
  OxNode* var = ox_sole_consumer(o, sq->outputs[0], "ReduceMean");
  if (!var || !ox_mean_last_axis(var, x->rank)) return NULL;
  OxNode* add_eps = ox_sole_consumer(o, var->outputs[0], "Add");
  double eps;
  if (!add_eps || !ox_const_real(ox_other(add_eps, var->outputs[0]), &eps) || eps < 0) return NULL;
  if (sqrt_n->inputs[0] != add_eps->outputs[0] || !ox_opt_single_use(o, add_eps->outputs[0]))
    return NULL;
  /* Scale and bias: Mul(norm, gamma) then optionally Add(., beta). */
  int64_t width = x->dims[x->rank - 1];
  OxNode* mul = ox_sole_consumer(o, div->outputs[0], "Mul");
  OxValue* gamma = mul ? ox_other(mul, div->outputs[0]) : NULL;
  if (!gamma || !ox_real_as(o, gamma, x) || gamma->rank != 1 || width < 0 ||
      gamma->dims[0] != width)
    return NULL;
  OxNode* add_b = ox_sole_consumer(o, mul->outputs[0], "Add");
  OxValue* beta = add_b ? ox_other(add_b, mul->outputs[0]) : NULL;
  if (beta && (!ox_real_as(o, beta, x) || beta->rank != 1 || beta->dims[0] != width)) {
    add_b = NULL;
    beta = NULL;
  }
  OxNode* last = add_b ? add_b : mul;
  bool onnx = ox_graph_opset(o->g, "") >= 17;
  if ((!onnx && !o->cfg->contrib_available) ||
      !ox_may_fuse(o, mean, onnx ? "" : OX_CONTRIB_DOMAIN, "LayerNormalization"))
    return NULL;
  OxValue* y = last->outputs[0];
  OxNode* chain[] = {mean, sub, sq, var, add_eps, sqrt_n, div, mul, add_b};
  char* base = ox_strdup(div->name);
  if (!base) return ox_oom();
  for (size_t i = 0; i < OX_ARRAY_LEN(chain); i++)
    if (chain[i]) ox_opt_remove(o, chain[i]);
  OxValue* ins[3] = {x, gamma, beta};
  OxNode* ln = NULL;
  OnyxStatus* st = ox_opt_add_node(o, base, "LayerNormalization", onnx ? "" : OX_CONTRIB_DOMAIN,
                                   ins, beta ? 3 : 2, &y, 1, &ln);
  free(base);
  OX_TRY(st);
  OX_TRY(ox_opt_attr_int(ln, "axis", -1));
  OX_TRY(ox_opt_attr_float(ln, "epsilon", (float)eps));
  o->stats->layernorm++;
  *done = true;
  return NULL;
}

OnyxStatus* ox_pass_layernorm(OxOpt* o, bool* changed) {
  return ox_opt_rewrite_each(o, ox_fuse_layernorm, NULL, changed);
}

/* --- Gelu ----------------------------------------------------------------------------------------
 */

/* v is the constant `want` as a value of x's type holds it: within 1e-4
 * relative for float32; within one unit in the last place for float16
 * (2^-10 relative) and bfloat16 (2^-7), where sqrt(2) itself rounds
 * further than 1e-4 away. */
static bool ox_near(const OxValue* x, double v, double want) {
  const double tol = x->type == ONYX_ELEM_FLOAT16    ? 0x1p-10
                     : x->type == ONYX_ELEM_BFLOAT16 ? 0x1p-7
                                                     : 1e-4;
  return fabs(v - want) <= tol * fabs(want);
}

/* 0.5 * x * (1 + erf(x / sqrt(2))), in the orders exporters write it. */
static OnyxStatus* ox_fuse_gelu(OxOpt* o, OxNode* erf, bool* done) {
  *done = false;
  if (!ox_opt_is(erf, "Erf") || !o->cfg->contrib_available ||
      !ox_may_fuse(o, erf, OX_CONTRIB_DOMAIN, "Gelu"))
    return NULL;
  OxNode* scale = erf->inputs[0] ? erf->inputs[0]->producer : NULL;
  if (!scale || !ox_opt_single_use(o, erf->inputs[0]) || scale->n_inputs != 2) return NULL;
  OxValue* x = scale->inputs[0];
  double c;
  if (!ox_real(o, x) || !ox_const_real(scale->inputs[1], &c)) return NULL;
  if (!((ox_opt_is(scale, "Div") && ox_near(x, c, sqrt(2.0))) ||
        (ox_opt_is(scale, "Mul") && ox_near(x, c, sqrt(0.5)))))
    return NULL;
  OxNode* add1 = ox_sole_consumer(o, erf->outputs[0], "Add");
  double one;
  if (!add1 || !ox_const_real(ox_other(add1, erf->outputs[0]), &one) || one != 1.0) return NULL;
  OxNode* m1 = ox_sole_consumer(o, add1->outputs[0], "Mul");
  if (!m1) return NULL;
  OxValue* partner = ox_other(m1, add1->outputs[0]);
  OxNode* half_n = NULL;
  OxNode* last = NULL;
  double half;
  if (partner == x) { /* (x * (1 + erf)) * 0.5 */
    last = ox_sole_consumer(o, m1->outputs[0], "Mul");
    if (!last || !ox_const_real(ox_other(last, m1->outputs[0]), &half) || half != 0.5) return NULL;
  } else if (partner && partner->producer && ox_opt_is(partner->producer, "Mul") &&
             ox_opt_single_use(o, partner)) { /* (x * 0.5) * (1 + erf) */
    half_n = partner->producer;
    if (!ox_const_real(ox_other(half_n, x), &half) || half != 0.5) return NULL;
    last = m1;
  } else {
    return NULL;
  }
  OxValue* y = last->outputs[0];
  if (!ox_real_as(o, y, x)) return NULL;
  OxNode* chain[] = {scale, erf, add1, m1, half_n, last == m1 ? NULL : last};
  char* base = ox_strdup(erf->name);
  if (!base) return ox_oom();
  for (size_t i = 0; i < OX_ARRAY_LEN(chain); i++)
    if (chain[i]) ox_opt_remove(o, chain[i]);
  OxNode* gn = NULL;
  OnyxStatus* st = ox_opt_add_node(o, base, "Gelu", OX_CONTRIB_DOMAIN, &x, 1, &y, 1, &gn);
  free(base);
  OX_TRY(st);
  o->stats->gelu++;
  *done = true;
  return NULL;
}

OnyxStatus* ox_pass_gelu(OxOpt* o, bool* changed) {
  return ox_opt_rewrite_each(o, ox_fuse_gelu, NULL, changed);
}

/* --- SiLU --------------------------------------------------------------------------------------
 */

/* The gate g(x) that Mul(x, g(x)) multiplies x by, when it is one the CPU
 * provider has a fused op for: Sigmoid (SiLU), or HardSigmoid with alpha
 * 1/6 and beta 1/2 (HardSwish as exported below opset 14). */
static const char* ox_gate_fusion(const OxNode* g) {
  if (ox_opt_is(g, "Sigmoid")) return "Silu";
  if (ox_opt_is(g, "HardSigmoid") &&
      fabs(ox_node_attr_float(g, "alpha", 0.2f) - 1.0 / 6.0) <= 1e-7 &&
      ox_node_attr_float(g, "beta", 0.5f) == 0.5f)
    return "HardSwish";
  return NULL;
}

/* Mul(x, Sigmoid(x)) (either order), the Sigmoid's output read only there:
 * com.onyx Silu(x), one pass over memory instead of two and no intermediate
 * (EfficientNet's and YOLO's Swish, exported from PyTorch's nn.SiLU); the
 * same with HardSigmoid(x; 1/6, 1/2): com.onyx HardSwish(x). Only where
 * the nodes' provider has the op (the CPU provider's cpu_elementwise.c);
 * the Mul's output keeps its name. */
static OnyxStatus* ox_fuse_silu(OxOpt* o, OxNode* mul, bool* done) {
  *done = false;
  if (!ox_opt_is(mul, "Mul") || mul->n_inputs != 2 || !o->cfg->contrib_available ||
      mul->n_outputs != 1 || !ox_f32(mul->outputs[0]))
    return NULL;
  for (size_t side = 0; side < 2; side++) {
    OxNode* sig = mul->inputs[side] ? mul->inputs[side]->producer : NULL;
    const char* op = sig ? ox_gate_fusion(sig) : NULL;
    OxValue* x = mul->inputs[1 - side];
    if (!op || sig->n_inputs != 1 || sig->inputs[0] != x || !ox_f32(x) ||
        !ox_opt_single_use(o, sig->outputs[0]) || !ox_may_fuse(o, mul, OX_CONTRIB_DOMAIN, op) ||
        !ox_may_fuse(o, sig, OX_CONTRIB_DOMAIN, op))
      continue;
    OxValue* y = mul->outputs[0];
    char* base = ox_strdup(sig->name);
    if (!base) return ox_oom();
    ox_opt_remove(o, mul);
    ox_opt_remove(o, sig);
    OxNode* sn = NULL;
    OnyxStatus* st = ox_opt_add_node(o, base, op, OX_CONTRIB_DOMAIN, &x, 1, &y, 1, &sn);
    free(base);
    OX_TRY(st);
    o->stats->silu++;
    *done = true;
    return NULL;
  }
  return NULL;
}

OnyxStatus* ox_pass_silu(OxOpt* o, bool* changed) {
  return ox_opt_rewrite_each(o, ox_fuse_silu, NULL, changed);
}

/* --- Multi-head attention ------------------------------------------------------------------------
 * The BERT-style subgraph, per layer:
 *   Qt = Transpose(Reshape(q, [B, S, H, D]), perm 0 2 1 3)
 *   Kt = Transpose(Reshape(k, [B, T, H, D]), perm 0 2 3 1)
 *   Vt = Transpose(Reshape(v, [B, T, H, D]), perm 0 2 1 3)
 *   P  = Softmax(MatMul(Qt, Kt) {/ c | * c} [+ Mask], last axis)
 *   Y  = Reshape(Transpose(MatMul(P, Vt), perm 0 2 1 3), [B, S, H*D])
 * becomes com.onyx MultiHeadAttention(q, k, v, Mask?) with num_heads H and scale 1/c (or c):
 * no head transposes, the scores of one head stay in cache between its two GEMMs. Found from
 * the second MatMul; every intermediate value must have that one consumer. */

static bool ox_perm_is(const OxNode* t, const int64_t* want) {
  size_t n = 0;
  const int64_t* p = ox_node_attr_ints(t, "perm", &n);
  if (!p || n != 4) return false;
  for (size_t i = 0; i < 4; i++)
    if (p[i] != want[i]) return false;
  return true;
}

/* x -> Reshape -> Transpose(perm) -> (the value t_out): the Reshape's input x when the
 * chain matches, x is a static [B, S, H*D] float tensor and the Reshape gives [B, S, H, D]. */
static OxValue* ox_heads_source(const OxOpt* o, const OxValue* t_out, const int64_t* perm,
                                OxNode** tr_out, OxNode** rs_out) {
  OxNode* tr = t_out ? t_out->producer : NULL;
  if (!tr || !ox_opt_is(tr, "Transpose") || !ox_perm_is(tr, perm) || !ox_opt_single_use(o, t_out))
    return NULL;
  OxNode* rs = ox_opt_producer(tr, 0, "Reshape");
  if (!rs || !ox_opt_single_use(o, tr->inputs[0])) return NULL;
  OxValue* x = rs->inputs[0];
  const OxValue* r = rs->outputs[0];
  if (!ox_f32(x) || !ox_opt_static_shape(x) || x->rank != 3 || !ox_opt_static_shape(r) ||
      r->rank != 4)
    return NULL;
  if (r->dims[0] != x->dims[0] || r->dims[1] != x->dims[1] || r->dims[2] * r->dims[3] != x->dims[2])
    return NULL;
  *tr_out = tr;
  *rs_out = rs;
  return x;
}

static OnyxStatus* ox_fuse_attention(OxOpt* o, OxNode* mm2, bool* done) {
  *done = false;
  static const int64_t p0213[4] = {0, 2, 1, 3}, p0231[4] = {0, 2, 3, 1};
  if (!ox_opt_is(mm2, "MatMul") || !o->cfg->contrib_available || mm2->n_inputs != 2 ||
      !ox_may_fuse(o, mm2, OX_CONTRIB_DOMAIN, "MultiHeadAttention"))
    return NULL;
  /* After: Transpose(0 2 1 3) then Reshape to [B, S, H*D]. */
  OxNode* t_out = ox_sole_consumer(o, mm2->outputs[0], "Transpose");
  if (!t_out || !ox_perm_is(t_out, p0213)) return NULL;
  OxNode* r_out = ox_sole_consumer(o, t_out->outputs[0], "Reshape");
  if (!r_out || r_out->inputs[0] != t_out->outputs[0]) return NULL;
  OxNode *tv, *rv, *tq, *rq, *tk, *rk;
  OxValue* v = ox_heads_source(o, mm2->inputs[1], p0213, &tv, &rv);
  if (!v) return NULL;
  /* P = Softmax over the last axis. */
  OxNode* sm = mm2->inputs[0] ? mm2->inputs[0]->producer : NULL;
  if (!sm || !ox_opt_is(sm, "Softmax") || !ox_opt_single_use(o, mm2->inputs[0])) return NULL;
  const int64_t axis = ox_node_attr_int(sm, "axis", sm->since_version >= 13 ? -1 : 1);
  if (axis != -1 && axis != 3) return NULL;
  /* [+ Mask] */
  OxValue* s_in = sm->inputs[0];
  OxNode* add = NULL;
  OxValue* mask = NULL;
  if (s_in && s_in->producer && ox_opt_is(s_in->producer, "Add") && ox_opt_single_use(o, s_in)) {
    add = s_in->producer;
    for (size_t side = 0; side < 2 && !mask; side++) {
      OxNode* p = add->inputs[side] ? add->inputs[side]->producer : NULL;
      if (p && (ox_opt_is(p, "Div") || ox_opt_is(p, "Mul") || ox_opt_is(p, "MatMul")) &&
          ox_opt_single_use(o, add->inputs[side])) {
        s_in = add->inputs[side];
        mask = add->inputs[1 - side];
      }
    }
    if (!mask || !ox_f32(mask) || mask->rank < 0 || mask->rank > 4) return NULL;
  } else if (!ox_opt_single_use(o, s_in)) {
    return NULL; /* the scores are read elsewhere too (or are a graph output) */
  }
  /* {/ c | * c} */
  double scale = 1.0;
  OxNode* sc = s_in ? s_in->producer : NULL;
  if (sc && (ox_opt_is(sc, "Div") || ox_opt_is(sc, "Mul"))) {
    double c;
    if (sc->n_inputs != 2 || !ox_opt_const_scalar(sc->inputs[1], &c) || c == 0.0 ||
        !ox_opt_single_use(o, sc->inputs[0]))
      return NULL;
    scale = ox_opt_is(sc, "Div") ? 1.0 / c : c;
    s_in = sc->inputs[0];
  } else {
    sc = NULL;
  }
  OxNode* mm1 = s_in ? s_in->producer : NULL;
  if (!mm1 || !ox_opt_is(mm1, "MatMul") || mm1->n_inputs != 2) return NULL;
  if (!sc && !ox_opt_single_use(o, s_in)) return NULL;
  OxValue* q = ox_heads_source(o, mm1->inputs[0], p0213, &tq, &rq);
  OxValue* k = q ? ox_heads_source(o, mm1->inputs[1], p0231, &tk, &rk) : NULL;
  if (!k) return NULL;
  /* One batch, head count and head size; K and V of one length. */
  const int64_t *dq = rq->outputs[0]->dims, *dk = rk->outputs[0]->dims, *dv = rv->outputs[0]->dims;
  if (dk[0] != dq[0] || dv[0] != dq[0] || dk[2] != dq[2] || dv[2] != dq[2] || dk[3] != dq[3] ||
      dv[3] != dq[3] || dv[1] != dk[1])
    return NULL;
  /* The merge Reshape gives q's shape back. */
  const OxValue* y = r_out->outputs[0];
  if (!ox_opt_static_shape(y) || y->rank != 3 || y->dims[0] != q->dims[0] ||
      y->dims[1] != q->dims[1] || y->dims[2] != q->dims[2] || !ox_f32(y))
    return NULL;
  /* The mask must broadcast to [B, H, S, T]. */
  if (mask) {
    const int64_t full[4] = {dq[0], dq[2], dq[1], dk[1]};
    for (int32_t i = 0; i < mask->rank; i++) {
      const int64_t d = mask->dims[i], want = full[4 - mask->rank + i];
      if (d != 1 && d != want) return NULL;
    }
  }
  OxValue* yv = r_out->outputs[0];
  OxNode* chain[] = {rq, tq, rk, tk, rv, tv, mm1, sc, add, sm, mm2, t_out, r_out};
  char* base = ox_strdup(mm2->name);
  if (!base) return ox_oom();
  for (size_t i = 0; i < OX_ARRAY_LEN(chain); i++)
    if (chain[i]) ox_opt_remove(o, chain[i]);
  OxValue* ins[4] = {q, k, v, mask};
  OxNode* an = NULL;
  OnyxStatus* st = ox_opt_add_node(o, base, "MultiHeadAttention", OX_CONTRIB_DOMAIN, ins,
                                   mask ? 4 : 3, &yv, 1, &an);
  free(base);
  OX_TRY(st);
  OX_TRY(ox_opt_attr_int(an, "num_heads", dq[2]));
  OX_TRY(ox_opt_attr_float(an, "scale", (float)scale));
  o->stats->attention++;
  *done = true;
  return NULL;
}

OnyxStatus* ox_pass_attention(OxOpt* o, bool* changed) {
  return ox_opt_rewrite_each(o, ox_fuse_attention, NULL, changed);
}

/* --- One GEMM for the attention's Q, K and V projections ----------------------------------------
 * MultiHeadAttention(q, k, v, Mask?) whose q, k and v are com.onyx FusedMatMul(X, W_i, b_i) of
 * one X, with constant [K, N] weights and [N] biases and no activation or residual, becomes
 *   FusedMatMul(X, [W_q | W_k | W_v], [b_q | b_k | b_v]) -> qkv [.., 3N]
 *   MultiHeadAttention(qkv, -, -, Mask?)
 * (the packed form of the op): one GEMM three times as wide, A packed once, one parallel
 * section instead of three (bert_layer's projections at 2 threads: 3.0-3.2 -> 2.6-2.7 ms a
 * layer, measured on a model of the three alone). */

/* A FusedMatMul(X, W, b) the merge may take: W a constant [K, N] float matrix, b a constant of N
 * floats, no Z, no activation, its one output read only by the attention. */
static bool ox_plain_projection(const OxOpt* o, const OxNode* f, const OxValue* out) {
  if (!ox_is_contrib(f, "FusedMatMul") || f->n_inputs != 3 || f->n_outputs != 1 || !f->inputs[0] ||
      !ox_opt_single_use(o, out))
    return false;
  const char* act = ox_node_attr_string(f, "activation", "");
  if (act && *act) return false;
  const OxValue *w = f->inputs[1], *b = f->inputs[2];
  return ox_f32(w) && ox_host_const(w) && w->rank == 2 && w->dims[0] > 0 && w->dims[1] > 0 &&
         ox_f32(b) && ox_row_bias(b, w->dims[1]) && ox_f32(out) && ox_opt_static_shape(out) &&
         out->rank == 3;
}

static OnyxStatus* ox_pack_qkv(OxOpt* o, OxNode* mha, bool* done) {
  *done = false;
  if (!ox_is_contrib(mha, "MultiHeadAttention") || mha->n_inputs < 3 || !mha->inputs[0] ||
      !mha->inputs[1] || !mha->inputs[2])
    return NULL;
  OxValue* qkv[3] = {mha->inputs[0], mha->inputs[1], mha->inputs[2]};
  if (qkv[0] == qkv[1] || qkv[1] == qkv[2] || qkv[0] == qkv[2]) return NULL;
  OxNode* f[3];
  for (int i = 0; i < 3; i++) {
    f[i] = qkv[i]->producer;
    if (!f[i] || !ox_plain_projection(o, f[i], qkv[i])) return NULL;
    if (f[i]->inputs[0] != f[0]->inputs[0]) return NULL; /* one X */
    const OxValue *w = f[i]->inputs[1], *w0 = f[0]->inputs[1];
    if (w->dims[0] != w0->dims[0] || w->dims[1] != w0->dims[1]) return NULL;
    for (int d = 0; d < 3; d++)
      if (qkv[i]->dims[d] != qkv[0]->dims[d]) return NULL;
  }
  if (!ox_may_fuse(o, f[0], OX_CONTRIB_DOMAIN, "FusedMatMul") ||
      !ox_may_fuse(o, mha, OX_CONTRIB_DOMAIN, "MultiHeadAttention"))
    return NULL;
  const int64_t kk = f[0]->inputs[1]->dims[0], n = f[0]->inputs[1]->dims[1];
  if (n > INT64_MAX / 3 || (uint64_t)kk * (uint64_t)n > SIZE_MAX / 3 / sizeof(float)) return NULL;
  OxTensor *w = NULL, *b = NULL;
  OX_TRY(ox_tensor_new_uninit(ONYX_ELEM_FLOAT32, (int64_t[]){kk, 3 * n}, 2, &w));
  OnyxStatus* st = ox_tensor_new_uninit(ONYX_ELEM_FLOAT32, (int64_t[]){3 * n}, 1, &b);
  if (st) {
    ox_tensor_free(w);
    return st;
  }
  float *wd = w->data, *bd = b->data;
  for (int i = 0; i < 3; i++) {
    const float* wi = f[i]->inputs[1]->constant->data;
    for (int64_t r = 0; r < kk; r++)
      memcpy(wd + r * 3 * n + i * n, wi + r * n, (size_t)n * sizeof(float));
    memcpy(bd + i * n, f[i]->inputs[2]->constant->data, (size_t)n * sizeof(float));
  }
  OxValue *vw = NULL, *vb = NULL, *packed = NULL;
  st = ox_opt_new_constant(o, f[0]->inputs[1]->name, w, &vw);
  if (st) {
    ox_tensor_free(b);
    return st;
  }
  OX_TRY(ox_opt_new_constant(o, f[0]->inputs[2]->name, b, &vb));
  char* name = NULL;
  OX_TRY(ox_opt_fresh_name(o, qkv[0]->name, &name));
  st = ox_graph_value(o->g, name, &packed);
  free(name);
  OX_TRY(st);
  const int64_t pdims[3] = {qkv[0]->dims[0], qkv[0]->dims[1], 3 * qkv[0]->dims[2]};
  OX_TRY(ox_value_set(packed, ONYX_ELEM_FLOAT32, 3, pdims));
  OxValue* x = f[0]->inputs[0];
  char* fname = ox_strdup(f[0]->name);
  if (!fname) return ox_oom();
  /* The attention reads the packed value; K and V become absent. */
  st = ox_opt_set_input(mha, 0, packed);
  for (size_t i = 1; i < 3 && !st; i++)
    st = ox_opt_set_input(mha, i, NULL);
  if (!st) {
    for (int i = 0; i < 3; i++)
      ox_opt_remove(o, f[i]);
    OxValue* fins[3] = {x, vw, vb};
    OxNode* fm = NULL;
    st = ox_opt_add_node(o, fname, "FusedMatMul", OX_CONTRIB_DOMAIN, fins, 3, &packed, 1, &fm);
  }
  free(fname);
  OX_TRY(st);
  o->stats->qkv++;
  *done = true;
  return NULL;
}

OnyxStatus* ox_pass_qkv(OxOpt* o, bool* changed) {
  return ox_opt_rewrite_each(o, ox_pack_qkv, NULL, changed);
}
