/* opt_qdq.c — QDQ graphs into quantized kernels (the extended level, after
 * placement like the other fusions).
 *
 * A QDQ model carries int8 arithmetic as float ops between
 * DequantizeLinear (DQ) and QuantizeLinear (Q) nodes. Found from the Q:
 *   Q(Conv(DQ(x), DQ(w const) [, DQ(bias int32 const)]))  -> QLinearConv
 *   Q(MatMul(DQ(a), DQ(b)))                               -> QLinearMatMul
 *   Q(Gemm(DQ(a), DQ(b)))  (no C, alpha 1, transA 0)      -> QLinearMatMul
 *   Q(Add(DQ(a), DQ(b)))                                  -> com.microsoft QLinearAdd
 *   Q(Mul(DQ(a), DQ(b)))                                  -> com.microsoft QLinearMul
 *   Q(GlobalAveragePool(DQ(x)))                           -> com.microsoft QLinearGlobalAveragePool
 *   Q(MaxPool(DQ(x))), one scale and zero point           -> MaxPool on x (opset 12 on)
 * A Relu between the op and the Q goes too when the Q's zero point is the
 * lowest value of its type: Q then maps every negative input to that zero
 * point, as it maps 0, so the Relu changes no quantized output.
 *
 * Every constant the kernel relies on is checked, else the nodes stay as
 * they are: scales are float32 constants, positive and finite; a zero
 * point is a constant of the quantized value's type with one value per
 * scale; activations (x, a, the output) are per-tensor; weights are
 * per-tensor or per output channel (Conv: axis 0 of W; MatMul: the columns
 * of a 2-D B); a Conv bias is int32 with zero point 0 and the scale
 * x_scale * w_scale[m] (to float32 rounding). The fused node reads the DQs'
 * quantized inputs; a DQ whose output is read elsewhere too stays for its
 * other readers. The op's float output must be read only by the Relu or the
 * Q (and be no graph output); the Q's output becomes the fused node's.
 * The next transformer, qdq_fold, folds a DequantizeLinear of constants
 * that no fusion took into a float32 constant. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "opt_internal.h"
#include "ox_schema.h"

#define OX_MS_DOMAIN "com.microsoft"

static bool qdq_host_const(const OxValue* v) {
  return v && v->constant && !v->is_graph_input && v->constant->device.kind == ONYX_DEVICE_CPU &&
         (v->constant->data || !v->constant->count);
}

static bool qdq_int8(OnyxElemType t) {
  return t == ONYX_ELEM_UINT8 || t == ONYX_ELEM_INT8;
}

/* One DequantizeLinear input of a pattern: its node, quantized input, scale
 * and zero point (NULL when absent), the number of scales and the axis they
 * run along (normalized; -1 for one scale). */
typedef struct QdqIn {
  OxNode* dq;
  OxValue* q;
  OxValue* scale;
  OxValue* zp;
  size_t n;
  int64_t axis;
} QdqIn;

/* A scale constant: float32, every value positive and finite. */
static bool qdq_scale_ok(const OxValue* s) {
  if (!qdq_host_const(s) || s->type != ONYX_ELEM_FLOAT32 || !s->constant->count || s->rank > 1)
    return false;
  const float* d = s->constant->data;
  for (size_t i = 0; i < s->constant->count; i++)
    if (!(d[i] > 0.0f) || !isfinite(d[i])) return false;
  return true;
}

/* A zero point constant of type t with n values (absent: fine). */
static bool qdq_zp_ok(const OxValue* zp, OnyxElemType t, size_t n) {
  if (!zp) return true;
  return qdq_host_const(zp) && zp->type == t && zp->constant->count == n && zp->rank <= 1;
}

/* v is the output of an ai.onnx DequantizeLinear on the rewrite's provider,
 * of a quantized value of type t (0: int8 or uint8), to float32, with
 * valid scale and zero point constants. */
static bool qdq_dq(const OxOpt* o, const OxValue* v, OnyxElemType t, QdqIn* in) {
  memset(in, 0, sizeof *in);
  OxNode* dq = v ? v->producer : NULL;
  if (!dq || !ox_opt_is(dq, "DequantizeLinear") || !ox_opt_here(o, dq) || dq->n_inputs < 2 ||
      !dq->inputs[0] || !dq->inputs[1] || v->type != ONYX_ELEM_FLOAT32 || v->producer_slot != 0)
    return false;
  OxValue* q = dq->inputs[0];
  if (t ? q->type != t : !qdq_int8(q->type)) return false;
  if (ox_node_attr_int(dq, "block_size", 0) != 0) return false;
  OxValue* scale = dq->inputs[1];
  OxValue* zp = dq->n_inputs > 2 ? dq->inputs[2] : NULL;
  if (!qdq_scale_ok(scale)) return false;
  const size_t n = scale->constant->count;
  if (!qdq_zp_ok(zp, q->type, n)) return false;
  int64_t axis = -1;
  if (scale->rank == 1 && n > 1) { /* per axis: along a known dim of q of n entries */
    if (q->rank < 1) return false;
    axis = ox_node_attr_int(dq, "axis", 1);
    if (axis < 0) axis += q->rank;
    if (axis < 0 || axis >= q->rank || q->dims[axis] != (int64_t)n) return false;
  }
  *in = (QdqIn){.dq = dq, .q = q, .scale = scale, .zp = zp, .n = n, .axis = axis};
  return true;
}

/* The zero point value to pass to a QLinear op: the DQ's own, or a new
 * constant of n zeros of the quantized type. */
static OnyxStatus* qdq_zp_value(OxOpt* o, const QdqIn* in, OxValue** out) {
  *out = in->zp;
  if (in->zp) return NULL;
  OxTensor* t = NULL;
  const int64_t dims[1] = {(int64_t)in->n};
  OX_TRY(ox_tensor_new(in->q->type, dims, in->n > 1 ? 1 : 0, &t));
  return ox_opt_new_constant(o, in->scale->name, t, out);
}

/* Zero point value i of a zero point constant (0 when absent). */
static int32_t qdq_zp_at(const OxValue* zp, size_t i) {
  if (!zp) return 0;
  if (zp->type == ONYX_ELEM_UINT8) return ((const uint8_t*)zp->constant->data)[i];
  if (zp->type == ONYX_ELEM_INT8) return ((const int8_t*)zp->constant->data)[i];
  return ((const int32_t*)zp->constant->data)[i];
}

/* The pattern's end: an ai.onnx QuantizeLinear q of a float32 value to
 * int8 / uint8 with one scale and one zero point (constants). */
static bool qdq_q(const OxOpt* o, const OxNode* q) {
  if (!ox_opt_is(q, "QuantizeLinear") || !ox_opt_here(o, q) || q->n_inputs < 2 || !q->inputs[0] ||
      q->inputs[0]->type != ONYX_ELEM_FLOAT32 || q->n_outputs != 1 || !q->outputs[0])
    return false;
  const OxValue* y = q->outputs[0];
  const OxValue* zp = q->n_inputs > 2 ? q->inputs[2] : NULL;
  if (!qdq_int8(y->type) || !qdq_scale_ok(q->inputs[1]) || q->inputs[1]->constant->count != 1)
    return false;
  return qdq_zp_ok(zp, y->type, 1) && ox_node_attr_int(q, "block_size", 0) == 0;
}

/* The Q's zero point is the lowest value of its type (a Relu before it
 * changes nothing). */
static bool qdq_relu_folds(const OxNode* q) {
  const OxValue* zp = q->n_inputs > 2 ? q->inputs[2] : NULL;
  const int32_t lo = q->outputs[0]->type == ONYX_ELEM_UINT8 ? 0 : -128;
  return qdq_zp_at(zp, 0) == lo;
}

/* Makes a node of op (domain) reading ins and writing the Q's output, in
 * place of the Q, the Relu (if any), the op node and each DQ whose output
 * no one else reads. */
static OnyxStatus* qdq_replace(OxOpt* o, OxNode* q, OxNode* relu, OxNode* op_node,
                               QdqIn* const* dqs, size_t n_dq, const char* op, const char* domain,
                               OxValue* const* ins, size_t n_in, OxNode** made) {
  OxValue* y = q->outputs[0];
  char* base = ox_strdup(op_node->name);
  if (!base) return ox_oom();
  ox_opt_remove(o, q);
  if (relu) ox_opt_remove(o, relu);
  ox_opt_remove(o, op_node);
  for (size_t i = 0; i < n_dq; i++) {
    OxNode* dq = dqs[i] ? dqs[i]->dq : NULL;
    if (!dq) continue;
    bool seen = false; /* one DQ may feed both operands */
    for (size_t k = 0; k < i; k++)
      seen = seen || (dqs[k] && dqs[k]->dq == dq);
    if (!seen && !dq->outputs[0]->n_consumers && !ox_opt_pinned(o, dq->outputs[0]))
      ox_opt_remove(o, dq);
  }
  OnyxStatus* st = ox_opt_add_node(o, base, op, domain, ins, n_in, &y, 1, made);
  free(base);
  return st;
}

/* The op's float output `v` is read only by `reader` (and is no graph
 * output). */
static bool qdq_only_reader(const OxOpt* o, const OxValue* v, const OxNode* reader) {
  return ox_opt_single_use(o, v) && v->consumers[0] == reader;
}

static bool qdq_may_fuse(const OxOpt* o, const OxNode* n, const char* domain, const char* op) {
  return !o->cfg->may_fuse || o->cfg->may_fuse(o->cfg->fuse_ctx, n, domain, op);
}

/* --- Conv --------------------------------------------------------------------------------- */

/* The bias DQ: int32 constant of m values, zero point 0, scale x_scale *
 * w_scale[c] for every channel c. */
static bool qdq_bias_ok(const QdqIn* b, const QdqIn* x, const QdqIn* w, int64_t m) {
  if (!qdq_host_const(b->q) || b->q->rank != 1 || b->q->dims[0] != m) return false;
  const float xs = *(const float*)x->scale->constant->data;
  const float* ws = w->scale->constant->data;
  const float* bs = b->scale->constant->data;
  for (int64_t c = 0; c < m; c++) {
    const double want = (double)xs * ws[w->n > 1 ? c : 0];
    const double have = bs[b->n > 1 ? c : 0];
    if (fabs(have - want) > 1e-6 * want || qdq_zp_at(b->zp, b->n > 1 ? (size_t)c : 0) != 0)
      return false;
  }
  return true;
}

static OnyxStatus* qdq_conv(OxOpt* o, OxNode* q, OxNode* relu, OxNode* conv, bool* done) {
  if (conv->n_inputs < 2 || conv->n_outputs != 1 || !qdq_may_fuse(o, conv, "", "QLinearConv"))
    return NULL;
  QdqIn x, w, b;
  if (!qdq_dq(o, conv->inputs[0], 0, &x) || x.n != 1) return NULL;
  if (!qdq_dq(o, conv->inputs[1], 0, &w) || !qdq_host_const(w.q) || w.q->rank < 3) return NULL;
  const int64_t m = w.q->dims[0];
  if (w.n != 1 && w.axis != 0) return NULL; /* per channel: the output channels */
  const bool has_b = conv->n_inputs > 2 && conv->inputs[2];
  if (has_b && (!qdq_dq(o, conv->inputs[2], ONYX_ELEM_INT32, &b) || !qdq_bias_ok(&b, &x, &w, m)))
    return NULL;
  OxValue *xzp = NULL, *wzp = NULL, *yzp = q->n_inputs > 2 ? q->inputs[2] : NULL;
  OX_TRY(qdq_zp_value(o, &x, &xzp));
  OX_TRY(qdq_zp_value(o, &w, &wzp));
  if (!yzp) {
    QdqIn yq = {.q = q->outputs[0], .scale = q->inputs[1], .n = 1};
    OX_TRY(qdq_zp_value(o, &yq, &yzp));
  }
  OxValue* ins[9] = {x.q, x.scale, xzp, w.q, w.scale, wzp, q->inputs[1], yzp, has_b ? b.q : NULL};
  QdqIn* dqs[3] = {&x, &w, has_b ? &b : NULL};
  OxNode* made = NULL;
  /* The attributes are Conv's, copied before the Conv goes. */
  OxNode tmp = {.attrs = conv->attrs, .n_attrs = conv->n_attrs};
  conv->attrs = NULL;
  conv->n_attrs = conv->cap_attrs = 0;
  OnyxStatus* st =
      qdq_replace(o, q, relu, conv, dqs, 3, "QLinearConv", "", ins, has_b ? 9 : 8, &made);
  if (!st) st = ox_opt_copy_attrs(made, &tmp);
  for (size_t i = 0; i < tmp.n_attrs; i++)
    ox_attr_clear(&tmp.attrs[i]);
  free(tmp.attrs);
  OX_TRY(st);
  *done = true;
  return NULL;
}

/* --- MatMul and Gemm ------------------------------------------------------------------------- */

static OnyxStatus* qdq_matmul(OxOpt* o, OxNode* q, OxNode* relu, OxNode* mm, bool gemm,
                              bool* done) {
  if (mm->n_inputs < 2 || mm->n_outputs != 1 || !qdq_may_fuse(o, mm, "", "QLinearMatMul"))
    return NULL;
  bool trans_b = false;
  if (gemm) { /* a plain product: no C, alpha 1, A as it is */
    if ((mm->n_inputs > 2 && mm->inputs[2]) || ox_node_attr_int(mm, "transA", 0) != 0 ||
        ox_node_attr_float(mm, "alpha", 1.0f) != 1.0f)
      return NULL;
    trans_b = ox_node_attr_int(mm, "transB", 0) != 0;
  }
  QdqIn a, b;
  if (!qdq_dq(o, mm->inputs[0], 0, &a) || a.n != 1) return NULL;
  if (!qdq_dq(o, mm->inputs[1], 0, &b)) return NULL;
  if (b.n != 1) { /* per column of a constant 2-D B ([N, K] with transB) */
    if (!qdq_host_const(b.q) || b.q->rank != 2 || b.axis != (trans_b ? 0 : 1)) return NULL;
  }
  OxValue* bq = b.q;
  if (trans_b) { /* B^T as a new constant [K, N] */
    if (!qdq_host_const(b.q) || b.q->rank != 2) return NULL;
    const int64_t n = b.q->dims[0], k = b.q->dims[1];
    OxTensor* t = NULL;
    OX_TRY(ox_tensor_new_uninit(b.q->type, (int64_t[]){k, n}, 2, &t));
    const uint8_t* src = b.q->constant->data;
    uint8_t* dst = t->data;
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < k; j++)
        dst[j * n + i] = src[i * k + j];
    OX_TRY(ox_opt_new_constant(o, b.q->name, t, &bq));
  }
  OxValue *azp = NULL, *bzp = NULL, *yzp = q->n_inputs > 2 ? q->inputs[2] : NULL;
  OX_TRY(qdq_zp_value(o, &a, &azp));
  OX_TRY(qdq_zp_value(o, &b, &bzp));
  if (!yzp) {
    QdqIn yq = {.q = q->outputs[0], .scale = q->inputs[1], .n = 1};
    OX_TRY(qdq_zp_value(o, &yq, &yzp));
  }
  OxValue* ins[8] = {a.q, a.scale, azp, bq, b.scale, bzp, q->inputs[1], yzp};
  QdqIn* dqs[2] = {&a, &b};
  OxNode* made = NULL;
  OX_TRY(qdq_replace(o, q, relu, mm, dqs, 2, "QLinearMatMul", "", ins, 8, &made));
  *done = true;
  return NULL;
}

/* --- com.microsoft QLinearAdd, QLinearMul and QLinearGlobalAveragePool --------------------------
 * ONNX Runtime's contrib ops; fused only where a schema for them is known
 * and the nodes' provider has a kernel. */

/* Imports com.microsoft (opset 1) into the graph when it is not; *added
 * says whether it did. */
static OnyxStatus* qdq_import_ms(OxGraph* g, bool* added) {
  *added = false;
  if (ox_graph_opset(g, OX_MS_DOMAIN) >= 0) return NULL;
  OxOpsetImport* ops = realloc(g->opsets, (g->n_opsets + 1) * sizeof *ops);
  if (!ops) return ox_oom();
  g->opsets = ops;
  ops[g->n_opsets].domain = ox_strdup(OX_MS_DOMAIN);
  ops[g->n_opsets].version = 1;
  if (!ops[g->n_opsets].domain) return ox_oom();
  g->n_opsets++;
  *added = true;
  return NULL;
}

/* The session knows a schema for com.microsoft `op` and n's provider has
 * a kernel for it (the domain is imported then). */
static OnyxStatus* qdq_ms_available(OxOpt* o, const OxNode* n, const char* op, bool* ok) {
  *ok = false;
  bool known = ox_schema_lookup(NULL, OX_MS_DOMAIN, op, 1, NULL) != NULL;
  for (size_t i = 0; !known && i < o->cfg->n_customs; i++)
    known = o->cfg->customs[i] &&
            ox_schema_lookup(o->cfg->customs[i], OX_MS_DOMAIN, op, 1, NULL) != NULL;
  if (!known) return NULL;
  bool added = false;
  OX_TRY(qdq_import_ms(o->g, &added));
  *ok = qdq_may_fuse(o, n, OX_MS_DOMAIN, op);
  if (!*ok && added) { /* not used: the model's imports stay as they were */
    o->g->n_opsets--;
    free(o->g->opsets[o->g->n_opsets].domain);
  }
  return NULL;
}

/* Add or Mul (`op`, the com.microsoft op it becomes): A and B per-tensor of
 * the Q's type. */
static OnyxStatus* qdq_binary(OxOpt* o, OxNode* q, OxNode* relu, OxNode* add, const char* op,
                              bool* done) {
  if (add->n_inputs != 2 || add->n_outputs != 1) return NULL;
  const OnyxElemType t = q->outputs[0]->type;
  QdqIn a, b;
  if (!qdq_dq(o, add->inputs[0], t, &a) || a.n != 1 || !qdq_dq(o, add->inputs[1], t, &b) ||
      b.n != 1)
    return NULL;
  bool ok = false;
  OX_TRY(qdq_ms_available(o, add, op, &ok));
  if (!ok) return NULL;
  OxValue *azp = NULL, *bzp = NULL, *yzp = q->n_inputs > 2 ? q->inputs[2] : NULL;
  OX_TRY(qdq_zp_value(o, &a, &azp));
  OX_TRY(qdq_zp_value(o, &b, &bzp));
  if (!yzp) {
    QdqIn yq = {.q = q->outputs[0], .scale = q->inputs[1], .n = 1};
    OX_TRY(qdq_zp_value(o, &yq, &yzp));
  }
  OxValue* ins[8] = {a.q, a.scale, azp, b.q, b.scale, bzp, q->inputs[1], yzp};
  QdqIn* dqs[2] = {&a, &b};
  OxNode* made = NULL;
  OX_TRY(qdq_replace(o, q, relu, add, dqs, 2, op, OX_MS_DOMAIN, ins, 8, &made));
  *done = true;
  return NULL;
}

static OnyxStatus* qdq_gap(OxOpt* o, OxNode* q, OxNode* relu, OxNode* gap, bool* done) {
  if (gap->n_inputs != 1 || gap->n_outputs != 1) return NULL;
  QdqIn x;
  if (!qdq_dq(o, gap->inputs[0], q->outputs[0]->type, &x) || x.n != 1 || x.q->rank < 3) return NULL;
  bool ok = false;
  OX_TRY(qdq_ms_available(o, gap, "QLinearGlobalAveragePool", &ok));
  if (!ok) return NULL;
  OxValue *xzp = NULL, *yzp = q->n_inputs > 2 ? q->inputs[2] : NULL;
  OX_TRY(qdq_zp_value(o, &x, &xzp));
  if (!yzp) {
    QdqIn yq = {.q = q->outputs[0], .scale = q->inputs[1], .n = 1};
    OX_TRY(qdq_zp_value(o, &yq, &yzp));
  }
  OxValue* ins[5] = {x.q, x.scale, xzp, q->inputs[1], yzp};
  QdqIn* dqs[1] = {&x};
  OxNode* made = NULL;
  OX_TRY(qdq_replace(o, q, relu, gap, dqs, 1, "QLinearGlobalAveragePool", OX_MS_DOMAIN, ins, 5,
                     &made));
  OX_TRY(ox_opt_attr_int(made, "channels_last", 0));
  *done = true;
  return NULL;
}

/* --- MaxPool -------------------------------------------------------------------------------------
 * With the DQ's and the Q's scale s and zero point z equal, Q(MaxPool(DQ(x)))
 * is MaxPool(x) on the 8-bit values exactly: DQ is increasing, so the
 * maximum comes from the same element, and Q gives it back, round((v - z) s
 * / s) + z = v, the float product and quotient each off by under 2^-24
 * relative and |v - z| <= 255. A window with no valid tap gives -inf, which
 * Q saturates to the type's lowest value, the 8-bit MaxPool's result too.
 * s must be normal (no underflow in (v - z) s) and (v - z) s finite. */
static OnyxStatus* qdq_maxpool(OxOpt* o, OxNode* q, OxNode* relu, OxNode* mp, bool* done) {
  if (mp->n_inputs != 1 || (mp->n_outputs > 1 && mp->outputs[1]) || ox_graph_opset(o->g, "") < 12 ||
      !qdq_may_fuse(o, mp, "", "MaxPool"))
    return NULL;
  QdqIn x;
  /* any rank: MaxPool's own checks apply to the 8-bit input alike */
  if (!qdq_dq(o, mp->inputs[0], q->outputs[0]->type, &x) || x.n != 1) return NULL;
  const float xs = *(const float*)x.scale->constant->data;
  const float ys = *(const float*)q->inputs[1]->constant->data;
  const OxValue* yzp = q->n_inputs > 2 ? q->inputs[2] : NULL;
  if (xs != ys || !(xs >= FLT_MIN) || xs > FLT_MAX / 512 || qdq_zp_at(x.zp, 0) != qdq_zp_at(yzp, 0))
    return NULL;
  OxValue* ins[1] = {x.q};
  QdqIn* dqs[1] = {&x};
  OxNode* made = NULL;
  OxNode tmp = {.attrs = mp->attrs, .n_attrs = mp->n_attrs}; /* MaxPool's, kept */
  mp->attrs = NULL;
  mp->n_attrs = mp->cap_attrs = 0;
  OnyxStatus* st = qdq_replace(o, q, relu, mp, dqs, 1, "MaxPool", "", ins, 1, &made);
  if (!st) st = ox_opt_copy_attrs(made, &tmp);
  for (size_t i = 0; i < tmp.n_attrs; i++)
    ox_attr_clear(&tmp.attrs[i]);
  free(tmp.attrs);
  OX_TRY(st);
  *done = true;
  return NULL;
}

/* --- the pass -----------------------------------------------------------------------------------
 */

static OnyxStatus* qdq_fuse(OxOpt* o, OxNode* q, bool* done) {
  *done = false;
  if (!qdq_q(o, q)) return NULL;
  OxValue* v = q->inputs[0];
  OxNode* p = v->producer;
  OxNode* relu = NULL;
  if (p && ox_opt_is(p, "Relu") && p->n_inputs == 1 && p->inputs[0] && qdq_relu_folds(q)) {
    if (!qdq_only_reader(o, v, q) || !ox_opt_here(o, p)) return NULL;
    relu = p;
    v = p->inputs[0];
    p = v->producer;
    if (!p || !qdq_only_reader(o, v, relu)) return NULL;
  } else if (!p || !qdq_only_reader(o, v, q)) {
    return NULL;
  }
  if (!ox_opt_here(o, p) || v->type != ONYX_ELEM_FLOAT32) return NULL;
  if (ox_opt_is(p, "Conv")) return qdq_conv(o, q, relu, p, done);
  if (ox_opt_is(p, "MatMul")) return qdq_matmul(o, q, relu, p, false, done);
  if (ox_opt_is(p, "Gemm")) return qdq_matmul(o, q, relu, p, true, done);
  if (ox_opt_is(p, "Add")) return qdq_binary(o, q, relu, p, "QLinearAdd", done);
  if (ox_opt_is(p, "Mul")) return qdq_binary(o, q, relu, p, "QLinearMul", done);
  if (ox_opt_is(p, "GlobalAveragePool")) return qdq_gap(o, q, relu, p, done);
  if (ox_opt_is(p, "MaxPool")) return qdq_maxpool(o, q, relu, p, done);
  return NULL;
}

/* A DequantizeLinear of constants that no fusion took (a Gemm with a bias,
 * a node of a provider without quantized kernels): its float32 result
 * becomes a constant, computed as the CPU kernel computes it, (q - zero
 * point) converted to float, times the scale in float. Constant folding
 * leaves DequantizeLinear to this pass; folded here, after the fusions, the
 * unfused weights cost nothing per run. Results above max_fold_bytes stay
 * nodes. */
static OnyxStatus* qdq_fold(OxOpt* o, OxNode* dq, bool* done) {
  *done = false;
  if (!ox_opt_is(dq, "DequantizeLinear") || dq->n_outputs != 1 || !dq->outputs[0]) return NULL;
  OxValue* y = dq->outputs[0];
  QdqIn in;
  if (ox_opt_pinned(o, y) || !y->n_consumers ||
      !(qdq_dq(o, y, 0, &in) || qdq_dq(o, y, ONYX_ELEM_INT32, &in)) || !qdq_host_const(in.q))
    return NULL;
  const OxTensor* q = in.q->constant;
  const size_t limit = o->cfg->max_fold_bytes ? o->cfg->max_fold_bytes : ((size_t)64 << 20);
  if (q->count > limit / sizeof(float)) return NULL;
  size_t inner = 1; /* elements after the scale's axis */
  for (size_t d = in.axis < 0 ? q->rank : (size_t)in.axis + 1; d < q->rank; d++)
    inner *= (size_t)q->dims[d];
  OxTensor* t = NULL;
  OX_TRY(ox_tensor_new_uninit(ONYX_ELEM_FLOAT32, q->dims, q->rank, &t));
  const float* sc = in.scale->constant->data;
  float* out = t->data;
  for (size_t i = 0; i < q->count; i++) {
    const size_t c = in.n > 1 ? (i / inner) % in.n : 0;
    int64_t v;
    if (q->type == ONYX_ELEM_UINT8)
      v = ((const uint8_t*)q->data)[i];
    else if (q->type == ONYX_ELEM_INT8)
      v = ((const int8_t*)q->data)[i];
    else
      v = ((const int32_t*)q->data)[i];
    const float diff = (float)(v - qdq_zp_at(in.zp, in.zp ? c : 0));
    out[i] = diff * sc[c];
  }
  OxValue* c = NULL;
  OX_TRY(ox_opt_new_constant(o, y->name, t, &c));
  OX_TRY(ox_opt_replace_uses(y, c));
  ox_opt_remove(o, dq);
  *done = true;
  return NULL;
}

/* --- channels-last chains
 * -------------------------------------------------------------------------- A convolution on x
 * NCHW first copies x channels-last (the GEMM reads pixels of C bytes) and scatters its output back
 * to NCHW. Between consecutive quantized ops of the CPU provider the layout is chosen instead: each
 * connected region of QLinearConv (2-D, group 1, explicit or VALID pads, float32 scales, constant
 * w, at most 32764 products per output) -> com.onyx QLinearConv with channels_last 1, com.microsoft
 * QLinearAdd whose A and B both come from the region (same elementwise result in either layout:
 * both 4-D, permuted alike), 8-bit MaxPool (no Indices) reading the region -> com.microsoft
 * NhwcMaxPool, com.microsoft QLinearGlobalAveragePool reading the region -> its channels_last 1,
 * with a Transpose of its [N, 1, 1, C] back, holding at least one conv with a region neighbour,
 * keeps its values [N, H, W, C]: a Transpose (0, 2, 3, 1) where a value enters the region and (0,
 * 3, 1, 2) where one leaves it (read outside or a graph output). Only the CPU provider's nodes
 * after placement take part, and no node changes provider: the new nodes take the CPU provider. */

enum { QN_NONE, QN_CONV, QN_ADD, QN_POOL, QN_GAP };

typedef struct QnPass {
  OxOpt* o;
  OxGraph* g;
  uint8_t* kind;  /* per node index */
  OxValue** from; /* boundary inputs: NCHW value ... */
  OxValue** to;   /* ... and its Transpose */
  size_t n_map, cap_map;
} QnPass;

static OnyxStatus* qn_attr_ints(OxNode* n, const char* name, const int64_t* v, size_t count) {
  OxAttr a = {.name = ox_strdup(name), .type = ONYX_ATTR_INTS, .count = count};
  a.ints = malloc(count * sizeof *a.ints);
  OnyxStatus* st = a.name && a.ints ? NULL : ox_oom();
  if (!st) {
    memcpy(a.ints, v, count * sizeof *v);
    st = ox_node_add_attr(n, &a);
  }
  ox_attr_clear(&a);
  return st;
}

static bool qn_cpu(const OxOpt* o, const OxNode* n) {
  return o->cfg->phase == OX_OPT_PHASE_FUSION && o->cfg->cpu_ep >= 0 && n &&
         n->ep == o->cfg->cpu_ep && n->group < 0;
}

static bool qn_f32(const OxNode* n, size_t i) {
  return i < n->n_inputs && n->inputs[i] && n->inputs[i]->type == ONYX_ELEM_FLOAT32;
}

/* auto_pad NOTSET (or absent) or VALID: the window's pads are explicit. */
static bool qn_pads_explicit(const OxNode* n) {
  const char* ap = ox_node_attr_string(n, "auto_pad", "NOTSET");
  return !strcmp(ap, "NOTSET") || !strcmp(ap, "VALID");
}

static int qn_candidate(QnPass* p, OxNode* n) {
  OxOpt* o = p->o;
  if (!qn_cpu(o, n) || n->n_outputs != 1 || !n->outputs[0]) return QN_NONE;
  if (ox_opt_is(n, "QLinearConv")) {
    const OxValue* w = n->n_inputs > 3 ? n->inputs[3] : NULL;
    if (n->n_inputs < 8 || !n->inputs[0] || !qdq_int8(n->inputs[0]->type) || !qdq_host_const(w) ||
        w->rank != 4 || !qdq_int8(w->type) ||
        (n->inputs[0]->rank >= 0 && n->inputs[0]->rank != 4) ||
        ox_node_attr_int(n, "group", 1) != 1 || !qn_pads_explicit(n) || !qn_f32(n, 1) ||
        !qn_f32(n, 4) || !qn_f32(n, 6) || !qdq_may_fuse(o, n, "com.onyx", "QLinearConv"))
      return QN_NONE;
    const int64_t k = w->dims[1] * w->dims[2] * w->dims[3]; /* dims of a constant: small */
    return k > 0 && k <= 32764 ? QN_CONV : QN_NONE;
  }
  if (!strcmp(n->domain, OX_MS_DOMAIN) && !strcmp(n->op_type, "QLinearAdd") && n->n_inputs >= 8 &&
      n->inputs[0] && n->inputs[3])
    return QN_ADD;
  if (!strcmp(n->domain, OX_MS_DOMAIN) && !strcmp(n->op_type, "QLinearGlobalAveragePool") &&
      n->inputs[0] && ox_node_attr_int(n, "channels_last", 0) == 0)
    return QN_GAP;
  if (ox_opt_is(n, "MaxPool") && n->n_inputs == 1 && n->inputs[0] && qdq_int8(n->inputs[0]->type) &&
      (n->inputs[0]->rank < 0 || n->inputs[0]->rank == 4) && qn_pads_explicit(n) &&
      ox_node_attr_int(n, "storage_order", 0) == 0) {
    size_t nk = 0;
    const int64_t* ks = ox_node_attr_ints(n, "kernel_shape", &nk);
    return ks && nk == 2 ? QN_POOL : QN_NONE;
  }
  return QN_NONE;
}

/* v comes channels-last from the region (a conv, add or pool of it). */
static bool qn_from_region(const QnPass* p, const OxValue* v) {
  const OxNode* q = v ? v->producer : NULL;
  if (!q) return false;
  const int k = p->kind[q->index];
  return k == QN_CONV || k == QN_ADD || k == QN_POOL;
}

/* The channels-last input slots of a region node: x (0), and B (3) for an add. */
static size_t qn_slots(int kind) {
  return kind == QN_ADD ? 2 : kind == QN_NONE ? 0 : 1;
}
static size_t qn_slot(size_t s) {
  return s ? 3 : 0;
}

/* Drops nodes until every add, pool and GAP reads the region and every
 * conv has a neighbour in it. */
static void qn_settle(QnPass* p) {
  bool again = true;
  while (again) {
    again = false;
    for (size_t i = 0; i < p->g->n_nodes; i++) {
      OxNode* n = p->g->nodes[i];
      const int k = p->kind[i];
      bool keep = true;
      if (k == QN_ADD)
        keep = qn_from_region(p, n->inputs[0]) && qn_from_region(p, n->inputs[3]);
      else if (k == QN_POOL || k == QN_GAP)
        keep = qn_from_region(p, n->inputs[0]);
      else if (k == QN_CONV && !qn_from_region(p, n->inputs[0])) {
        keep = false; /* a neighbour downstream, reading y at a channels-last slot? */
        const OxValue* y = n->outputs[0];
        for (size_t c = 0; c < y->n_consumers && !keep; c++) {
          const OxNode* r = y->consumers[c];
          const int rk = p->kind[r->index];
          for (size_t s = 0; s < qn_slots(rk); s++)
            keep = keep || r->inputs[qn_slot(s)] == y;
        }
      }
      if (!keep) {
        p->kind[i] = QN_NONE;
        again = true;
      }
    }
  }
}

/* A fresh value named after v. */
static OnyxStatus* qn_value(QnPass* p, const OxValue* v, OxValue** out) {
  char* name = NULL;
  OX_TRY(ox_opt_fresh_name(p->o, v->name, &name));
  OnyxStatus* st = ox_graph_value(p->g, name, out);
  free(name);
  return st;
}

/* Transpose(in) -> out with perm. */
static OnyxStatus* qn_transpose(QnPass* p, OxValue* in, OxValue* out, const int64_t* perm) {
  OxNode* t = NULL;
  OX_TRY(ox_opt_add_node(p->o, "Transpose", "Transpose", "", &in, 1, &out, 1, &t));
  return qn_attr_ints(t, "perm", perm, 4);
}

static const int64_t QN_TO_NHWC[4] = {0, 2, 3, 1}, QN_TO_NCHW[4] = {0, 3, 1, 2};

/* One Transpose to channels-last per value entering the region. */
static OnyxStatus* qn_input(QnPass* p, OxValue* v, OxValue** out) {
  for (size_t i = 0; i < p->n_map; i++)
    if (p->from[i] == v) {
      *out = p->to[i];
      return NULL;
    }
  if (p->n_map == p->cap_map) {
    const size_t cap = p->cap_map ? 2 * p->cap_map : 8;
    OxValue** f = realloc(p->from, cap * sizeof *f);
    if (!f) return ox_oom();
    p->from = f;
    OxValue** t = realloc(p->to, cap * sizeof *t);
    if (!t) return ox_oom();
    p->to = t;
    p->cap_map = cap;
  }
  OX_TRY(qn_value(p, v, out));
  OX_TRY(qn_transpose(p, v, *out, QN_TO_NHWC));
  p->from[p->n_map] = v;
  p->to[p->n_map++] = *out;
  return NULL;
}

/* One region node's plan, made before the graph changes. */
typedef struct QnNode {
  OxNode* n;
  int kind;
  OxValue* twin;  /* its channels-last output (GAP: its [N, 1, 1, C] one) */
  OxValue* in[9]; /* its inputs, channels-last slots as twins or NULL (a Transpose) */
  size_t n_in;
} QnNode;

static OnyxStatus* qn_rewrite(QnPass* p, bool* changed) {
  OxOpt* o = p->o;
  OxGraph* g = p->g;
  size_t count = 0;
  for (size_t i = 0; i < g->n_nodes; i++)
    count += p->kind[i] != QN_NONE;
  if (!count) return NULL;
  QnNode* q = calloc(count, sizeof *q);
  if (!q) return ox_oom();
  OnyxStatus* st = NULL;
  for (size_t i = 0, r = 0; !st && i < g->n_nodes; i++) {
    if (p->kind[i] == QN_NONE) continue;
    OxNode* n = g->nodes[i];
    q[r] = (QnNode){.n = n, .kind = p->kind[i], .n_in = n->n_inputs < 9 ? n->n_inputs : 9};
    memcpy(q[r].in, n->inputs, q[r].n_in * sizeof *q[r].in);
    st = qn_value(p, n->outputs[0], &q[r].twin);
    r++;
  }
  /* channels-last slots read from the region: the producer's twin */
  for (size_t r = 0; !st && r < count; r++)
    for (size_t s = 0; s < qn_slots(q[r].kind); s++) {
      OxValue* v = q[r].in[qn_slot(s)];
      bool inside = false;
      for (size_t t = 0; t < count && !inside; t++)
        if (q[t].kind != QN_GAP && v->producer == q[t].n) {
          q[r].in[qn_slot(s)] = q[t].twin;
          inside = true;
        }
      if (!inside) st = qn_input(p, v, &q[r].in[qn_slot(s)]);
    }
  if (st) {
    free(q);
    return st;
  }
  o->cur_ep = o->cfg->cpu_ep;
  static const char* const ops[] = {NULL, "QLinearConv", "QLinearAdd", "NhwcMaxPool",
                                    "QLinearGlobalAveragePool"};
  /* each node's channels-last twin in its place (explain names the node it
   * replaced); the old outputs have no producer until the end */
  OxValue** old_y = calloc(count, sizeof *old_y);
  if (!old_y) st = ox_oom();
  for (size_t r = 0; !st && r < count; r++) {
    const int k = q[r].kind;
    OxNode* made = NULL;
    old_y[r] = q[r].n->outputs[0];
    st = ox_opt_add_node(o, q[r].n->name, ops[k], k == QN_CONV ? "com.onyx" : OX_MS_DOMAIN, q[r].in,
                         q[r].n_in, &q[r].twin, 1, &made);
    if (!st && k != QN_GAP) st = ox_opt_copy_attrs(made, q[r].n);
    if (!st && (k == QN_CONV || k == QN_GAP)) st = ox_opt_attr_int(made, "channels_last", 1);
    if (!st) ox_opt_remove(o, q[r].n);
    if (!st) st = ox_opt_note_origins(o);
    ox_opt_journal_reset(o);
  }
  /* a value read outside the region (or a graph output) is transposed back
   * from its twin; GAP's always is */
  for (size_t r = 0; !st && r < count; r++) {
    OxValue* y = old_y[r];
    if (q[r].kind == QN_GAP || y->n_consumers || ox_opt_pinned(o, y))
      st = qn_transpose(p, q[r].twin, y, QN_TO_NCHW);
  }
  if (!st) *changed = true;
  free(old_y);
  free(q);
  return st;
}

/* The channels-last regions of the graph (see above). */
static OnyxStatus* qdq_nhwc(OxOpt* o, bool* changed) {
  if (o->cfg->phase != OX_OPT_PHASE_FUSION || o->cfg->cpu_ep < 0) return NULL;
  OxGraph* g = o->g;
  QnPass p = {.o = o, .g = g, .kind = calloc(g->n_nodes ? g->n_nodes : 1, 1)};
  if (!p.kind) return ox_oom();
  size_t convs = 0;
  for (size_t i = 0; i < g->n_nodes; i++) {
    g->nodes[i]->index = i;
    p.kind[i] = (uint8_t)qn_candidate(&p, g->nodes[i]);
    convs += p.kind[i] == QN_CONV;
  }
  OnyxStatus* st = NULL;
  bool ms = false; /* com.microsoft's NhwcMaxPool: a schema and a kernel */
  for (size_t i = 0; convs && i < g->n_nodes && !st; i++)
    if (p.kind[i] == QN_POOL) {
      if (!ms) st = qdq_ms_available(o, g->nodes[i], "NhwcMaxPool", &ms);
      if (!ms) p.kind[i] = QN_NONE;
    }
  for (size_t i = 0; convs && i < g->n_nodes && !st; i++)
    if (p.kind[i] == QN_GAP || p.kind[i] == QN_ADD || p.kind[i] == QN_POOL)
      if (!qdq_may_fuse(o, g->nodes[i], "", "Transpose")) p.kind[i] = QN_NONE;
  if (!st && convs) {
    qn_settle(&p);
    st = qn_rewrite(&p, changed);
  }
  free(p.kind);
  free(p.from);
  free(p.to);
  return st;
}

/* The fusions to their fixed point: one sweep can leave a node whose
 * pattern another sweep's rewrite completes, and qdq_fold, next, would
 * fold its weights' DequantizeLinear for good. */
OnyxStatus* ox_pass_qdq(OxOpt* o, bool* changed) {
  for (int i = 0; i < 16; i++) {
    bool fused = false;
    OX_TRY(ox_opt_rewrite_each(o, qdq_fuse, NULL, &fused));
    if (!fused) break;
    *changed = true;
  }
  return NULL;
}

/* The channels-last layout of what the fusions made (qdq runs first, to
 * its fixed point). ONYX_OPT_DISABLE=qdq_layout keeps NCHW. */
OnyxStatus* ox_pass_qdq_layout(OxOpt* o, bool* changed) {
  return qdq_nhwc(o, changed);
}

OnyxStatus* ox_pass_qdq_fold(OxOpt* o, bool* changed) {
  return ox_opt_rewrite_each(o, qdq_fold, NULL, changed);
}
