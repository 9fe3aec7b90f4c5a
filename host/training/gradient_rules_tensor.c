/* gradient_rules_tensor.c — gradient rules of the ops that move elements
 * (dY: the gradient of output 0):
 *   Reshape, Squeeze, Unsqueeze, Flatten: Reshape(dY, Shape(X))
 *   Transpose: dY transposed by the inverse permutation
 *   Concat: dY split along the axis into the inputs' sizes (Split)
 *   Split: the outputs' gradients concatenated (zeros for an output without
 *     one)
 *   Gather -> GatherGrad(Shape(X), indices, dY) (com.onyx.training)
 *   Slice with unit steps and constant axes: dY put back at its place in
 *     zeros of X's shape (one axis: a Concat with zeros before and after;
 *     several: Pad), the bounds constant when they and the dims are, else
 *     computed at run time (opset 13 on)
 *   Slice (the others), GatherElements, GatherND (any batch_dims), Resize in nearest
 *     mode, DepthToSpace, SpaceToDepth, ReverseSequence, Compress (opset 11
 *     on): the op applied to X's flat positions gives where each element
 *     of Y came from; GatherGrad adds dY back there
 *   Expand: dY summed down to X's shape
 *   Tile: dY reshaped to (r0, d0, r1, d1, ...) and summed over the r axes
 *   Trilu: the same triangle of dY
 *   ScatterElements, ScatterND (reduction none): dData = dY with zeros
 *     scattered in, dUpdates = GatherElements / GatherND of dY
 *   TopK: dY scattered back to the positions its Indices output names
 *   Pad: constant mode (pads >= 0): the slice of dY at X's place; the other
 *     modes through the positions rule */
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "gradient_rules.h"

static OnyxStatus* rule_reshape_like(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI(b, n, 0, OP2("Reshape", GO(0), OP1("Shape", I(0))));
  return ox_grad_err(b);
}

static OnyxStatus* rule_transpose(OxGradBuilder* b, const OxNode* n) {
  int32_t r = n->inputs[0]->rank;
  if (r < 0 || r > 64)
    return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient needs an input of known rank");
  size_t np = 0;
  const int64_t* perm = ox_node_attr_ints(n, "perm", &np);
  int64_t inv[64];
  for (int32_t i = 0; i < r; i++)
    inv[i] = -1;
  for (int32_t i = 0; i < r; i++) {
    int64_t p = perm && np == (size_t)r ? perm[i] : r - 1 - i;
    if (p < 0) p += r;
    if (p < 0 || p >= r || inv[p] >= 0)
      return ox_status(ONYX_INVALID_MODEL, "perm entry %d is out of range or repeated", i);
    inv[p] = i;
  }
  const char* g = OP1("Transpose", GO(0));
  ox_grad_attr_ints(b, "perm", inv, (size_t)r);
  ox_grad_GI(b, n, 0, g);
  return ox_grad_err(b);
}

static OnyxStatus* rule_concat(OxGradBuilder* b, const OxNode* n) {
  int32_t r = n->outputs[0]->rank;
  int64_t axis = ox_node_attr_int(n, "axis", 0);
  if (r < 0) return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient needs an output of known rank");
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r)
    return ox_status(ONYX_INVALID_MODEL, "axis %" PRId64 " is out of range for rank %d",
                     ox_node_attr_int(n, "axis", 0), (int)r);
  size_t k = n->n_inputs;
  if (k > 64) return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient is built for up to 64 inputs");
  int64_t sizes[64];
  bool known = true;
  for (size_t i = 0; i < k; i++) {
    const OxValue* v = n->inputs[i];
    sizes[i] = v && v->rank == r ? v->dims[axis] : -1;
    known &= sizes[i] >= 0;
  }
  const char* split;
  if (ox_grad_opset(b) < 13) {
    if (!known)
      return ox_status(ONYX_NOT_IMPLEMENTED,
                       "the gradient needs the inputs' sizes along the axis before opset 13");
    split = NULL;
  } else if (known) {
    split = ox_grad_i64(b, sizes, k);
  } else { /* the sizes at run time */
    const char* parts[64];
    const int64_t at[1] = {axis};
    for (size_t i = 0; i < k; i++)
      parts[i] = OP2("Gather", OP1("Shape", I(i)), ox_grad_i64(b, at, 1));
    split = ox_grad_op(b, "Concat", "", parts, k, 1, NULL, NULL);
    ox_grad_attr_int(b, "axis", 0);
  }
  const char* ins[2] = {GO(0), split};
  const char* outs[64] = {0};
  ox_grad_op(b, "Split", "", ins, split ? 2 : 1, k, NULL, outs);
  ox_grad_attr_int(b, "axis", axis);
  if (!split) ox_grad_attr_ints(b, "split", sizes, k);
  for (size_t i = 0; i < k; i++)
    ox_grad_GI(b, n, i, outs[i]);
  return ox_grad_err(b);
}

static OnyxStatus* rule_split(OxGradBuilder* b, const OxNode* n) {
  size_t k = n->n_outputs;
  const char** parts = calloc(k + 1, sizeof *parts);
  if (!parts) return ox_oom();
  for (size_t i = 0; i < k; i++)
    parts[i] = GO(i) ? GO(i) : ox_grad_zeros_like(b, O(i), TO(i));
  const char* g = ox_grad_op(b, "Concat", "", parts, k, 1, NULL, NULL);
  free(parts);
  ox_grad_attr_int(b, "axis", ox_node_attr_int(n, "axis", 0));
  ox_grad_GI(b, n, 0, g);
  return ox_grad_err(b);
}

/* Reshape(x, [-1]). */
static const char* flat(OxGradBuilder* b, const char* x) {
  const int64_t m1[1] = {-1};
  return OP2("Reshape", x, ox_grad_i64(b, m1, 1));
}

static OnyxStatus* rule_gather(OxGradBuilder* b, const OxNode* n) {
  const char* ins[] = {OP1("Shape", I(0)), I(1), GO(0)};
  const char* g = ox_grad_op(b, "GatherGrad", OX_TRAINING_DOMAIN, ins, 3, 1, NULL, NULL);
  ox_grad_attr_int(b, "axis", ox_node_attr_int(n, "axis", 0));
  ox_grad_GI(b, n, 0, g);
  return ox_grad_err(b);
}

/* Ops that only pick elements of X (GatherElements, GatherND, Resize in
 * nearest mode): the same op applied to X's flat positions (Range reshaped
 * as X) says which element of X each output element came from; dX is dY
 * scattered back there, adding repeats (GatherGrad along axis 0 of the
 * flattened X: deterministic). */
static const char* positions(OxGradBuilder* b, const OxNode* n) {
  if (ox_grad_opset(b) < 11) {
    ox_grad_fail(b,
                 ox_status(ONYX_NOT_IMPLEMENTED, "the gradient needs opset 11 or later (Range)"));
    return "";
  }
  const char* range = OP3("Range", ox_grad_scalar(b, ONYX_ELEM_INT64, 0), OP1("Size", I(0)),
                          ox_grad_scalar(b, ONYX_ELEM_INT64, 1));
  return OP2("Reshape", range, OP1("Shape", I(0)));
}

/* The forward node again on X's positions instead of X (input `drop`, if
 * any, left out: Pad's constant value). */
static const char* picked_positions(OxGradBuilder* b, const OxNode* n, size_t drop) {
  const char* ins[8] = {positions(b, n)};
  for (size_t i = 1; i < n->n_inputs && i < 8; i++)
    ins[i] = i == drop ? NULL : I(i);
  const char* p =
      ox_grad_op(b, n->op_type, n->domain, ins, n->n_inputs < 8 ? n->n_inputs : 8, 1, NULL, NULL);
  ox_grad_attrs_copy(b, n, NULL);
  return p;
}

static OnyxStatus* picking(OxGradBuilder* b, const OxNode* n, size_t drop) {
  if (!WANTS(0)) return NULL;
  const int64_t one[1] = {1};
  const char* size = OP2("Reshape", OP1("Size", I(0)), ox_grad_i64(b, one, 1));
  const char* ins[] = {size, flat(b, picked_positions(b, n, drop)), flat(b, GO(0))};
  const char* g = ox_grad_op(b, "GatherGrad", OX_TRAINING_DOMAIN, ins, 3, 1, NULL, NULL);
  ox_grad_attr_int(b, "axis", 0);
  ox_grad_GI(b, n, 0, OP2("Reshape", g, OP1("Shape", I(0))));
  return ox_grad_err(b);
}

static OnyxStatus* rule_picking(OxGradBuilder* b, const OxNode* n) {
  return picking(b, n, SIZE_MAX);
}

/* The tensor of a value that is an initializer or a Constant node's
 * `value` (exporters write Slice bounds as Constant nodes); NULL else. */
static const OxTensor* const_tensor(const OxValue* v) {
  if (!v) return NULL;
  if (v->constant) return v->constant;
  const OxNode* p = v->producer;
  if (!p || strcmp(p->op_type, "Constant") || p->domain[0]) return NULL;
  const OxAttr* a = ox_node_attr(p, "value");
  return a && a->type == ONYX_ATTR_TENSOR ? a->t : NULL;
}

/* Value k of a constant int32/int64 1-D input of n (absent: *ok false). */
static int64_t const_int(const OxNode* n, size_t in, size_t k, bool* ok) {
  const OxValue* v = in < n->n_inputs ? n->inputs[in] : NULL;
  const OxTensor* t = const_tensor(v);
  if (!t || k >= t->count || (t->type != ONYX_ELEM_INT64 && t->type != ONYX_ELEM_INT32)) {
    *ok = false;
    return 0;
  }
  return t->type == ONYX_ELEM_INT64 ? ((const int64_t*)t->data)[k]
                                    : (int64_t)((const int32_t*)t->data)[k];
}

/* dX of a Slice along one axis `ax` (int64 [1]) that took [s, d - tail):
 * dY between zeros of s and of tail positions, a Concat (a copy) rather
 * than a Pad. */
static void slice_grad_concat(OxGradBuilder* b, const OxNode* n, int64_t axis, const char* ax,
                              const char* s, const char* tail) {
  const char* shp = OP1("Shape", I(0));
  const char* zero = ox_grad_scalar(b, n->inputs[0]->type, 0);
  const char* before = OP2("Expand", zero, OP3("ScatterElements", shp, ax, s));
  const char* after = OP2("Expand", zero, OP3("ScatterElements", shp, ax, tail));
  const char* ins[3] = {before, GO(0), after};
  const char* g = ox_grad_op(b, "Concat", "", ins, 3, 1, NULL, NULL);
  ox_grad_attr_int(b, "axis", axis);
  ox_grad_GI(b, n, 0, g);
}

/* Slice with unit steps, constant axes and bounds known at run time only
 * (torch's chunk computes them from Shape): the pads are computed by a few
 * int64 nodes, with ONNX's clamping (v = min(v, d); negative: max(v, -d) +
 * d; ends at least starts), the additions kept from overflowing for bounds
 * such as INT64_MAX. Other Slices take the positions rule. */
static OnyxStatus* slice_pad_runtime(OxGradBuilder* b, const OxNode* n) {
  const OxValue* X = n->inputs[0];
  const int32_t r = X->rank;
  const OxValue* st = n->inputs[1];
  const OxValue* en = n->n_inputs > 2 ? n->inputs[2] : NULL;
  bool ok = n->since_version >= 10 && ox_grad_opset(b) >= 13 && r > 0 && r <= 64 && st && en &&
            st->rank == 1 && st->dims[0] >= 1 && st->dims[0] <= r &&
            (n->n_inputs <= 3 || !n->inputs[3] || const_tensor(n->inputs[3]));
  const size_t na = ok ? (size_t)st->dims[0] : 0;
  int64_t axes[64], zeros[64] = {0};
  bool seen[64] = {false};
  for (size_t k = 0; ok && k < na; k++) {
    int64_t ax = n->n_inputs > 3 && n->inputs[3] ? const_int(n, 3, k, &ok) : (int64_t)k;
    const int64_t step = n->n_inputs > 4 && n->inputs[4] ? const_int(n, 4, k, &ok) : 1;
    if (ax < 0) ax += r;
    if (!ok || step != 1 || ax < 0 || ax >= r || seen[ax]) {
      ok = false;
      break;
    }
    seen[ax] = true;
    axes[k] = ax;
  }
  if (!ok) return picking(b, n, SIZE_MAX);
  const char* ax = ox_grad_i64(b, axes, na);
  const char* dims = OP2("Gather", OP1("Shape", I(0)), ax);
  const char* zero = ox_grad_scalar(b, ONYX_ELEM_INT64, 0);
  const char* neg = OP1("Neg", dims);
  const char* v[2];
  for (size_t i = 0; i < 2; i++) {
    const char* x = n->inputs[1 + i]->type == ONYX_ELEM_INT64
                        ? I(1 + i)
                        : ox_grad_cast(b, I(1 + i), ONYX_ELEM_INT64);
    x = OP2("Min", x, dims);
    v[i] = OP3("Where", OP2("Less", x, zero), OP2("Add", OP2("Max", x, neg), dims), x);
  }
  const char* e = OP2("Max", v[1], v[0]);
  if (na == 1) {
    slice_grad_concat(b, n, axes[0], ax, v[0], OP2("Sub", dims, e));
    return ox_grad_err(b);
  }
  const char* zr = ox_grad_i64(b, zeros, (size_t)r);
  const char* pb = OP3("ScatterElements", zr, ax, v[0]);
  const char* pe = OP3("ScatterElements", zr, ax, OP2("Sub", dims, e));
  const char* pads = OP2("Concat", pb, pe);
  ox_grad_attr_int(b, "axis", 0);
  ox_grad_GI(b, n, 0, OP2("Pad", GO(0), pads));
  return ox_grad_err(b);
}

/* Slice with constant starts, ends and axes, unit steps and static dims on
 * the sliced axes: dY padded with zeros back to X's shape (one Pad); with
 * bounds known at run time, slice_pad_runtime. */
static OnyxStatus* rule_slice(OxGradBuilder* b, const OxNode* n) {
  if (!WANTS(0)) return NULL;
  const OxValue* X = n->inputs[0];
  const int32_t r = X->rank;
  const OxValue* st = n->n_inputs > 1 ? n->inputs[1] : NULL;
  const OxTensor* ts = const_tensor(st);
  const OxTensor* te = n->n_inputs > 2 ? const_tensor(n->inputs[2]) : NULL;
  bool ok = n->since_version >= 10 && ox_grad_opset(b) >= 11 && r > 0 && r <= 64 && ts && te &&
            te->count == ts->count;
  const size_t na = ok ? ts->count : 0;
  int64_t pads[128] = {0};
  bool seen[64] = {false};
  for (size_t k = 0; ok && k < na; k++) {
    int64_t ax = n->n_inputs > 3 && n->inputs[3] ? const_int(n, 3, k, &ok) : (int64_t)k;
    const int64_t step = n->n_inputs > 4 && n->inputs[4] ? const_int(n, 4, k, &ok) : 1;
    int64_t s = const_int(n, 1, k, &ok), e = const_int(n, 2, k, &ok);
    if (ax < 0) ax += r;
    if (!ok || step != 1 || ax < 0 || ax >= r || seen[ax] || X->dims[ax] < 0) {
      ok = false;
      break;
    }
    seen[ax] = true;
    const int64_t d = X->dims[ax];
    /* ONNX's clamping: negative values count from the end, then [0, d] */
    if (s < 0) s = s < -d ? 0 : s + d;
    if (e < 0) e = e < -d ? 0 : e + d;
    if (s > d) s = d;
    if (e > d) e = d;
    if (e < s) e = s;
    pads[ax] = s;
    pads[ax + r] = d - e;
  }
  if (!ok) return n->n_inputs > 2 ? slice_pad_runtime(b, n) : picking(b, n, SIZE_MAX);
  if (na == 1 && ox_grad_opset(b) >= 11) {
    int64_t ax = n->n_inputs > 3 && n->inputs[3] ? const_int(n, 3, 0, &ok) : 0;
    if (ax < 0) ax += r;
    const int64_t axv[1] = {ax}, sv[1] = {pads[ax]}, tv[1] = {pads[ax + r]};
    slice_grad_concat(b, n, ax, ox_grad_i64(b, axv, 1), ox_grad_i64(b, sv, 1),
                      ox_grad_i64(b, tv, 1));
    return ox_grad_err(b);
  }
  ox_grad_GI(b, n, 0, OP2("Pad", GO(0), ox_grad_i64(b, pads, (size_t)(2 * r))));
  return ox_grad_err(b);
}

/* TopK: the values came from the positions its Indices output names. */
static OnyxStatus* rule_topk(OxGradBuilder* b, const OxNode* n) {
  if (!WANTS(0) || !GO(0)) return NULL;
  if (!O(1)) return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient needs the node's Indices output");
  const int64_t one[1] = {1};
  const char* from = OP2("GatherElements", positions(b, n), O(1));
  ox_grad_attr_int(b, "axis", ox_node_attr_int(n, "axis", -1));
  const char* size = OP2("Reshape", OP1("Size", I(0)), ox_grad_i64(b, one, 1));
  const char* ins[] = {size, flat(b, from), flat(b, GO(0))};
  const char* g = ox_grad_op(b, "GatherGrad", OX_TRAINING_DOMAIN, ins, 3, 1, NULL, NULL);
  ox_grad_attr_int(b, "axis", 0);
  ox_grad_GI(b, n, 0, OP2("Reshape", g, OP1("Shape", I(0))));
  return ox_grad_err(b);
}

/* Trilu keeps a triangle: dX is the same triangle of dY. */
static OnyxStatus* rule_trilu(OxGradBuilder* b, const OxNode* n) {
  const char* ins[] = {GO(0), I(1)};
  const char* g = ox_grad_op(b, "Trilu", "", ins, n->n_inputs > 1 ? 2 : 1, 1, NULL, NULL);
  ox_grad_attr_copy(b, n, "upper");
  ox_grad_GI(b, n, 0, g);
  return ox_grad_err(b);
}

/* ScatterElements / ScatterND without reduction: the data keeps dY where
 * nothing was written (dY with zeros scattered in), the updates get dY at
 * the positions they were written to (GatherElements / GatherND). */
static OnyxStatus* rule_scatter(OxGradBuilder* b, const OxNode* n) {
  bool nd = !strcmp(n->op_type, "ScatterND");
  if (strcmp(ox_node_attr_string(n, "reduction", "none"), "none"))
    return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient is built for reduction 'none'");
  if (WANTS(0)) {
    const char* g = OP3(n->op_type, GO(0), I(1), ox_grad_zeros_like(b, I(2), TI(2)));
    if (!nd) ox_grad_attr_int(b, "axis", ox_node_attr_int(n, "axis", 0));
    ox_grad_GI(b, n, 0, g);
  }
  if (WANTS(2)) {
    const char* g = OP2(nd ? "GatherND" : "GatherElements", GO(0), I(1));
    if (!nd) ox_grad_attr_int(b, "axis", ox_node_attr_int(n, "axis", 0));
    ox_grad_GI(b, n, 2, g);
  }
  return ox_grad_err(b);
}

static OnyxStatus* rule_resize(OxGradBuilder* b, const OxNode* n) {
  const char* mode = ox_node_attr_string(n, "mode", "nearest");
  if (strcmp(mode, "nearest"))
    return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient is built for mode 'nearest' (not '%s')",
                     mode);
  return rule_picking(b, n);
}

static OnyxStatus* rule_expand(OxGradBuilder* b, const OxNode* n) {
  ox_grad_GI_bcast(b, n, 0, GO(0));
  return ox_grad_err(b);
}

static OnyxStatus* rule_tile(OxGradBuilder* b, const OxNode* n) {
  int32_t r = n->inputs[0]->rank;
  if (r < 1 || r > 32) return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient needs X of known rank");
  const int64_t one[1] = {1};
  const char* pair = OP2("Concat", ox_grad_unsqueeze(b, I(1), one, 1),
                         ox_grad_unsqueeze(b, OP1("Shape", I(0)), one, 1));
  ox_grad_attr_int(b, "axis", 1);
  const char* split = OP2("Reshape", GO(0), flat(b, pair));
  int64_t axes[32];
  for (int32_t i = 0; i < r; i++)
    axes[i] = 2 * i;
  ox_grad_GI(b, n, 0, ox_grad_reduce_sum(b, split, axes, (size_t)r, false));
  return ox_grad_err(b);
}

static OnyxStatus* rule_pad(OxGradBuilder* b, const OxNode* n) {
  const char* mode = ox_node_attr_string(n, "mode", "constant");
  int32_t r = n->inputs[0]->rank;
  if (strcmp(mode, "constant")) /* reflect, edge, wrap: every element comes from X */
    return picking(b, n, 2);
  if (n->n_inputs > 3 && I(3))
    return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient is built without the axes input");
  if (r < 0 || r > 32 || ox_grad_opset(b) < 10)
    return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient needs X of known rank and opset 10+");
  const char* starts;
  const OxValue* pv = n->since_version >= 11 ? n->inputs[1] : NULL;
  size_t np = 0;
  const int64_t* pads = pv ? NULL : ox_node_attr_ints(n, "pads", &np);
  if (pv && pv->constant && pv->constant->type == ONYX_ELEM_INT64 &&
      pv->constant->count == (size_t)(2 * r))
    pads = pv->constant->data, np = pv->constant->count;
  if (pads) {
    if (np != (size_t)(2 * r))
      return ox_status(ONYX_INVALID_MODEL, "pads has %zu entries for rank %d", np, (int)r);
    for (size_t i = 0; i < np; i++)
      if (pads[i] < 0)
        return ox_status(ONYX_NOT_IMPLEMENTED, "the gradient is built for pads >= 0");
    starts = ox_grad_i64(b, pads, (size_t)r);
  } else { /* pads known at run time */
    const int64_t z[1] = {0}, e[1] = {r};
    starts = OP3("Slice", I(1), ox_grad_i64(b, z, 1), ox_grad_i64(b, e, 1));
  }
  const char* ends = OP2("Add", starts, OP1("Shape", I(0)));
  ox_grad_GI(b, n, 0, OP3("Slice", GO(0), starts, ends));
  return ox_grad_err(b);
}

static const OxGradRuleDef ox_rules_tensor[] = {
    {"", "Reshape", 1, 0, rule_reshape_like},
    {"", "Squeeze", 1, 0, rule_reshape_like},
    {"", "Unsqueeze", 1, 0, rule_reshape_like},
    {"", "Flatten", 1, 0, rule_reshape_like},
    {"", "Transpose", 1, 0, rule_transpose},
    {"", "Concat", 1, 0, rule_concat},
    {"", "Split", 1, 0, rule_split},
    {"", "Slice", 1, 0, rule_slice},
    {"", "Gather", 1, 0, rule_gather},
    {"", "GatherElements", 11, 0, rule_picking},
    {"", "GatherND", 11, 0, rule_picking},
    {"", "Resize", 11, 0, rule_resize},
    {"", "TopK", 1, 0, rule_topk},
    {"", "Trilu", 14, 0, rule_trilu},
    {"", "ScatterElements", 11, 0, rule_scatter},
    {"", "ScatterND", 11, 0, rule_scatter},
    {"", "DepthToSpace", 1, 0, rule_picking},
    {"", "SpaceToDepth", 1, 0, rule_picking},
    {"", "ReverseSequence", 10, 0, rule_picking},
    {"", "Compress", 9, 0, rule_picking},
    {"", "Expand", 8, 0, rule_expand},
    {"", "Tile", 6, 0, rule_tile},
    {"", "Pad", 2, 0, rule_pad},
};

const OxGradRuleDef* ox_grad_rules_tensor(size_t* n) {
  *n = OX_ARRAY_LEN(ox_rules_tensor);
  return ox_rules_tensor;
}
