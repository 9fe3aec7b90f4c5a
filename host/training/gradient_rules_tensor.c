/* gradient_rules_tensor.c — gradient rules of the ops that move elements
 * (dY: the gradient of output 0):
 *   Reshape, Squeeze, Unsqueeze, Flatten: Reshape(dY, Shape(X))
 *   Transpose: dY transposed by the inverse permutation
 *   Concat: dY split along the axis into the inputs' sizes (Split)
 *   Split: the outputs' gradients concatenated (zeros for an output without
 *     one)
 *   Gather -> GatherGrad(Shape(X), indices, dY) (com.onyx.training)
 *   Slice, GatherElements, GatherND (any batch_dims), Resize in nearest
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
  if (strcmp(mode, "nearest")) return ox_grad_rule_resize_interp(b, n);
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
    {"", "Slice", 1, 0, rule_picking},
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
