/* schemas_nn.c — the nn family: rows newer than the generated table (or that
 * replace generated rows) and inference functions for generated rows.
 *
 * Rows follow the ONNX Changelog: Resize-18/19 (antialias, axes,
 * keep_aspect_ratio_policy, half_pixel_symmetric), GridSample-20 (N-D, modes
 * linear/cubic/nearest; X: T1, grid: T2, Y: T1) and -22; AffineGrid-20, Col2Im-18,
 * DeformConv-19/22, GroupNormalization-18/21, RMSNormalization-23, LpPool-18
 * (dilations, ceil_mode) and the opset-22 rows that added bfloat16.
 *
 * Inference: element types as the spec says and shapes where cheap (the
 * normalizations, RNN outputs, losses, RoiAlign, GridSample, AffineGrid and
 * Resize/Upsample with constant scales or sizes); the same functions are
 * attached to the generated rows of these ops. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infer_util.h"
#include "schema_internal.h"

#define T_(x) OX_T(ONYX_ELEM_##x)
#define M_ALL_NN                                                                                   \
  (T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16) | T_(INT8) | T_(INT16) | T_(INT32) |     \
   T_(INT64) | T_(UINT8) | T_(UINT16) | T_(UINT32) | T_(UINT64) | T_(BOOL) | T_(STRING) |          \
   T_(COMPLEX64) | T_(COMPLEX128))
#define REQ(n, tc)                                                                                 \
  { n, tc, ONYX_PARAM_SINGLE, 1 }
#define OPT(n, tc)                                                                                 \
  { n, tc, ONYX_PARAM_OPTIONAL, 1 }

/* --- Inference ------------------------------------------------------------------ */

/* Output 0 with input 0's type and shape (the normalizations). */
static OnyxStatus* nn_infer_like_x(OxNode* n) {
  return ox_out_like_input(n, 0, 0);
}

/* RMSNormalization: X's shape, scale's type (V). */
static OnyxStatus* nn_infer_rms(OxNode* n) {
  OxDims d;
  ox_in_dims(n, 0, &d);
  return ox_out_set(n, 0, ox_in_type(n, 1), &d);
}

/* NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss: the target's shape
 * with reduction "none", else a scalar; log_prob like the input. */
static OnyxStatus* nn_infer_loss(OxNode* n) {
  OxDims d;
  const char* red = ox_attr_s(n, "reduction", "mean");
  if (!strcmp(red, "none"))
    ox_in_dims(n, 1, &d);
  else
    d.rank = 0;
  OX_TRY(ox_out_set(n, 0, ox_in_type(n, 0), &d));
  return n->n_outputs > 1 ? ox_out_like_input(n, 1, 0) : NULL;
}

/* NonMaxSuppression: int64 [selected, 3]. */
static OnyxStatus* nn_infer_nms(OxNode* n) {
  OxDims d = {.rank = 2};
  d.d[0] = ONYX_DIM_UNKNOWN;
  d.d[1] = 3;
  return ox_out_set(n, 0, ONYX_ELEM_INT64, &d);
}

/* RNN / GRU / LSTM: Y [seq, dirs, batch, hidden] (layout 1: [batch, seq,
 * dirs, hidden]); Y_h, Y_c [dirs, batch, hidden] (layout 1: [batch, dirs,
 * hidden]). */
static OnyxStatus* nn_infer_rnn(OxNode* n) {
  OxDims x;
  ox_in_dims(n, 0, &x);
  const OnyxElemType t = ox_in_type(n, 0);
  if (x.rank >= 0 && x.rank != 3) return ox_node_err(n, "X must have rank 3, has %d", (int)x.rank);
  const int64_t layout = ox_attr_i(n, "layout", 0);
  const int64_t hidden = ox_attr_i(n, "hidden_size", ONYX_DIM_UNKNOWN);
  const int64_t dirs = !strcmp(ox_attr_s(n, "direction", "forward"), "bidirectional") ? 2 : 1;
  const int64_t seq = x.rank == 3 ? x.d[layout ? 1 : 0] : ONYX_DIM_UNKNOWN;
  const int64_t batch = x.rank == 3 ? x.d[layout ? 0 : 1] : ONYX_DIM_UNKNOWN;
  const int64_t h = hidden > 0 ? hidden : ONYX_DIM_UNKNOWN;
  OxDims y = {.rank = 4}, s = {.rank = 3};
  if (layout) {
    y.d[0] = batch, y.d[1] = seq, y.d[2] = dirs, y.d[3] = h;
    s.d[0] = batch, s.d[1] = dirs, s.d[2] = h;
  } else {
    y.d[0] = seq, y.d[1] = dirs, y.d[2] = batch, y.d[3] = h;
    s.d[0] = dirs, s.d[1] = batch, s.d[2] = h;
  }
  OX_TRY(ox_out_set(n, 0, t, &y));
  for (size_t i = 1; i < n->n_outputs; i++)
    OX_TRY(ox_out_set(n, i, t, &s));
  return NULL;
}

/* RoiAlign: [num_rois, C, output_height, output_width]; MaxRoiPool:
 * [num_rois, C, pooled_shape...]. */
static OnyxStatus* nn_infer_roi(OxNode* n) {
  OxDims x, r, y = {.rank = 4};
  ox_in_dims(n, 0, &x);
  ox_in_dims(n, 1, &r);
  y.d[0] = r.rank == 2 ? r.d[0] : ONYX_DIM_UNKNOWN;
  y.d[1] = x.rank == 4 ? x.d[1] : ONYX_DIM_UNKNOWN;
  if (!strcmp(n->op_type, "MaxRoiPool")) {
    size_t np = 0;
    const int64_t* ps = ox_attr_ints(n, "pooled_shape", &np);
    y.d[2] = ps && np == 2 ? ps[0] : ONYX_DIM_UNKNOWN;
    y.d[3] = ps && np == 2 ? ps[1] : ONYX_DIM_UNKNOWN;
  } else {
    y.d[2] = ox_attr_i(n, "output_height", 1);
    y.d[3] = ox_attr_i(n, "output_width", 1);
  }
  static const char* const names[2][2] = {{"pooled_shape", "pooled_shape"},
                                          {"output_height", "output_width"}};
  for (int k = 2; k < 4; k++)
    if (y.d[k] != ONYX_DIM_UNKNOWN && y.d[k] < 1)
      return ox_node_err(n, "attribute '%s' is %lld, must be >= 1",
                         names[strcmp(n->op_type, "MaxRoiPool") != 0][k - 2], (long long)y.d[k]);
  return ox_out_set(n, 0, ox_in_type(n, 0), &y);
}

/* GridSample: [N, C, grid's spatial dims...]. */
static OnyxStatus* nn_infer_gridsample(OxNode* n) {
  OxDims x, g;
  ox_in_dims(n, 0, &x);
  ox_in_dims(n, 1, &g);
  const OnyxElemType t = ox_in_type(n, 0);
  if (g.rank < 3) return ox_out_set(n, 0, t, NULL);
  OxDims y = {.rank = g.rank};
  y.d[0] = g.d[0];
  y.d[1] = x.rank >= 2 ? x.d[1] : ONYX_DIM_UNKNOWN;
  for (int32_t i = 2; i < g.rank; i++)
    y.d[i] = g.d[i - 1];
  return ox_out_set(n, 0, t, &y);
}

/* AffineGrid: [N, H, W, 2] or [N, D, H, W, 3] from a constant size. */
static OnyxStatus* nn_infer_affine_grid(OxNode* n) {
  int64_t* sz = NULL;
  size_t cnt = 0;
  bool known = false;
  OX_TRY(ox_const_ints(n, 1, &sz, &cnt, &known));
  OnyxStatus* st;
  if (!known || (cnt != 4 && cnt != 5)) {
    st = ox_out_set(n, 0, ox_in_type(n, 0), NULL);
  } else {
    OxDims y = {.rank = (int32_t)cnt};
    for (size_t i = 0; i < cnt; i++)
      if (sz[i] < 0) {
        free(sz);
        return ox_node_err(n, "input 'size' has a negative value (%lld)", (long long)sz[i]);
      }
    y.d[0] = sz[0];
    for (size_t i = 2; i < cnt; i++)
      y.d[i - 1] = sz[i];
    y.d[cnt - 1] = (int64_t)cnt - 2;
    st = ox_out_set(n, 0, ox_in_type(n, 0), &y);
  }
  free(sz);
  return st;
}

/* The float values of a constant input (initializer or Constant node). */
static bool const_floats(const OxNode* n, size_t i, double* out, size_t cap, size_t* count) {
  const OxValue* v = ox_in(n, i);
  if (!v) return false;
  const OxTensor* t = v->constant;
  if (!t && v->producer && v->producer->op_type && !strcmp(v->producer->op_type, "Constant")) {
    const OxAttr* a = ox_node_attr(v->producer, "value");
    if (a && a->type == ONYX_ATTR_TENSOR) t = a->t;
  }
  if (!t || t->device.kind != ONYX_DEVICE_CPU || (t->count && !t->data) || t->count > cap)
    return false;
  for (size_t k = 0; k < t->count; k++) {
    if (t->type == ONYX_ELEM_FLOAT32)
      out[k] = ((const float*)t->data)[k];
    else if (t->type == ONYX_ELEM_FLOAT64)
      out[k] = ((const double*)t->data)[k];
    else
      return false;
  }
  *count = t->count;
  return true;
}

/* floor(v), an output extent computed in double from input extent `in`
 * (-1 unknown): refused when it is not a non-negative int64 (NaN, infinite,
 * out of range or negative scales). */
static OnyxStatus* resized_dim(const OxNode* n, const char* what, int64_t in, double v,
                               int64_t* out) {
  *out = ONYX_DIM_UNKNOWN;
  if (in < 0) return NULL;
  if (!ox_double_to_i64(floor(v), out) || *out < 0)
    return ox_node_err(n, "%s gives an output extent of %g for an input extent of %lld", what,
                       floor(v), (long long)in);
  return NULL;
}

/* Resize / Upsample: the output shape when the scales or sizes are constant. */
static OnyxStatus* nn_infer_resize(OxNode* n) {
  OxDims x;
  ox_in_dims(n, 0, &x);
  const OnyxElemType t = ox_in_type(n, 0);
  const bool upsample = !strcmp(n->op_type, "Upsample");
  if (x.rank < 0) return ox_out_set(n, 0, t, NULL);
  const int32_t r = x.rank;
  double scales[OX_INFER_MAX_RANK];
  size_t ns = 0;
  OxDims y = x;
  int64_t axes[OX_INFER_MAX_RANK];
  size_t na = 0;
  const int64_t* ax = ox_attr_ints(n, "axes", &na);
  if (!ax) na = (size_t)r;
  if (na > (size_t)r)
    return ox_node_err(n, "attribute axes has %zu values for rank %d", na, (int)r);
  for (size_t i = 0; i < na; i++)
    if (!ax)
      axes[i] = (int64_t)i;
    else if (!ox_norm_axis(ax[i], r, &axes[i]))
      return ox_node_err(n, "axis %lld is out of range for rank %d", (long long)ax[i], (int)r);
  if (upsample && n->since_version < 9) {
    size_t cnt = 0;
    const float* f = NULL;
    const OxAttr* a = ox_node_attr(n, "scales");
    if (a && a->type == ONYX_ATTR_FLOATS) {
      f = a->floats;
      cnt = a->count;
    }
    if (!f || cnt != (size_t)r) return ox_out_set(n, 0, t, NULL);
    for (int32_t i = 0; i < r; i++)
      OX_TRY(resized_dim(n, "attribute 'scales'", x.d[i], (double)x.d[i] * f[i], &y.d[i]));
    return ox_out_set(n, 0, t, &y);
  }
  const size_t si = upsample || n->since_version < 11 ? 1 : 2;
  const bool crop =
      !strcmp(ox_attr_s(n, "coordinate_transformation_mode", ""), "tf_crop_and_resize");
  if (const_floats(n, si, scales, OX_INFER_MAX_RANK, &ns) && ns > 0) {
    if (ns != na) return ox_node_err(n, "scales has %zu values, expected %zu", ns, na);
    if (crop) return ox_out_set(n, 0, t, NULL); /* depends on roi */
    for (size_t i = 0; i < na; i++) {
      const int64_t a = axes[i];
      OX_TRY(resized_dim(n, "input 'scales'", x.d[a], (double)x.d[a] * scales[i], &y.d[a]));
    }
    return ox_out_set(n, 0, t, &y);
  }
  int64_t* sz = NULL;
  size_t cnt = 0;
  bool known = false;
  if (!upsample && n->since_version >= 11) OX_TRY(ox_const_ints(n, 3, &sz, &cnt, &known));
  if (!known || cnt == 0) {
    free(sz);
    /* Rank is kept; the resized dims are unknown. */
    for (size_t i = 0; i < na; i++)
      y.d[axes[i]] = ONYX_DIM_UNKNOWN;
    return ox_out_set(n, 0, t, &y);
  }
  if (cnt != na) {
    free(sz);
    return ox_node_err(n, "sizes has %zu values, expected %zu", cnt, na);
  }
  const char* policy = ox_attr_s(n, "keep_aspect_ratio_policy", "stretch");
  if (!strcmp(policy, "stretch")) {
    for (size_t i = 0; i < na; i++) {
      if (sz[i] < 0) {
        free(sz);
        return ox_node_err(n, "input 'sizes' has a negative value");
      }
      y.d[axes[i]] = sz[i];
    }
  } else {
    bool larger = !strcmp(policy, "not_larger");
    double s = larger ? INFINITY : 0;
    bool all = true;
    for (size_t i = 0; i < na; i++) {
      const int64_t in = x.d[axes[i]];
      if (in <= 0)
        all = false;
      else
        s = larger ? fmin(s, (double)sz[i] / (double)in) : fmax(s, (double)sz[i] / (double)in);
    }
    OnyxStatus* st = NULL;
    for (size_t i = 0; i < na && !st; i++)
      st = resized_dim(n, "input 'sizes'", all ? x.d[axes[i]] : -1, (double)x.d[axes[i]] * s + 0.5,
                       &y.d[axes[i]]);
    if (st) {
      free(sz);
      return st;
    }
  }
  free(sz);
  return ox_out_set(n, 0, t, &y);
}

static const OxFormal nn0_in[] = {REQ("X", "T1"), OPT("roi", "T2"), OPT("scales", "tensor(float)"),
                                  OPT("sizes", "tensor(int64)")};
static const OxFormal nn0_out[] = {REQ("Y", "T1")};
static const OxTypeConstr nn0_tc[] = {{"T1", M_ALL_NN},
                                      {"T2", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64)}};
static const OxAttrSpec nn0_at[] = {
    {.name = "antialias", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "axes", .type = ONYX_ATTR_INTS},
    {.name = "coordinate_transformation_mode",
     .type = ONYX_ATTR_STRING,
     .has_default = true,
     .def_s = "half_pixel"},
    {.name = "cubic_coeff_a", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = -0.75f},
    {.name = "exclude_outside", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "extrapolation_value", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 0.0f},
    {.name = "keep_aspect_ratio_policy",
     .type = ONYX_ATTR_STRING,
     .has_default = true,
     .def_s = "stretch"},
    {.name = "mode", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "nearest"},
    {.name = "nearest_mode",
     .type = ONYX_ATTR_STRING,
     .has_default = true,
     .def_s = "round_prefer_floor"},
};
static const OxFormal nn1_in[] = {REQ("X", "T1"), OPT("roi", "T2"), OPT("scales", "tensor(float)"),
                                  OPT("sizes", "tensor(int64)")};
static const OxFormal nn1_out[] = {REQ("Y", "T1")};
static const OxTypeConstr nn1_tc[] = {{"T1", M_ALL_NN},
                                      {"T2", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64)}};
static const OxAttrSpec nn1_at[] = {
    {.name = "antialias", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "axes", .type = ONYX_ATTR_INTS},
    {.name = "coordinate_transformation_mode",
     .type = ONYX_ATTR_STRING,
     .has_default = true,
     .def_s = "half_pixel"},
    {.name = "cubic_coeff_a", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = -0.75f},
    {.name = "exclude_outside", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "extrapolation_value", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 0.0f},
    {.name = "keep_aspect_ratio_policy",
     .type = ONYX_ATTR_STRING,
     .has_default = true,
     .def_s = "stretch"},
    {.name = "mode", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "nearest"},
    {.name = "nearest_mode",
     .type = ONYX_ATTR_STRING,
     .has_default = true,
     .def_s = "round_prefer_floor"},
};
static const OxFormal nn2_in[] = {REQ("X", "T1"), REQ("grid", "T2")};
static const OxFormal nn2_out[] = {REQ("Y", "T1")};
static const OxTypeConstr nn2_tc[] = {{"T1", M_ALL_NN},
                                      {"T2", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64)}};
static const OxAttrSpec nn2_at[] = {
    {.name = "align_corners", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "mode", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "linear"},
    {.name = "padding_mode", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "zeros"},
};
static const OxFormal nn3_in[] = {REQ("X", "T1"), REQ("grid", "T2")};
static const OxFormal nn3_out[] = {REQ("Y", "T1")};
static const OxTypeConstr nn3_tc[] = {
    {"T1", M_ALL_NN}, {"T2", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}};
static const OxAttrSpec nn3_at[] = {
    {.name = "align_corners", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "mode", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "linear"},
    {.name = "padding_mode", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "zeros"},
};
static const OxFormal nn4_in[] = {REQ("theta", "T1"), REQ("size", "T2")};
static const OxFormal nn4_out[] = {REQ("grid", "T1")};
static const OxTypeConstr nn4_tc[] = {
    {"T1", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}, {"T2", T_(INT64)}};
static const OxAttrSpec nn4_at[] = {
    {.name = "align_corners", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
};
static const OxFormal nn5_in[] = {REQ("X", "T"), REQ("W", "T"), OPT("B", "T")};
static const OxFormal nn5_out[] = {REQ("Y", "T")};
static const OxTypeConstr nn5_tc[] = {
    {"T", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}};
static const OxAttrSpec nn5_at[] = {
    {.name = "auto_pad", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "NOTSET"},
    {.name = "dilations", .type = ONYX_ATTR_INTS},
    {.name = "group", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 1},
    {.name = "kernel_shape", .type = ONYX_ATTR_INTS},
    {.name = "output_padding", .type = ONYX_ATTR_INTS},
    {.name = "output_shape", .type = ONYX_ATTR_INTS},
    {.name = "pads", .type = ONYX_ATTR_INTS},
    {.name = "strides", .type = ONYX_ATTR_INTS},
};
static const OxFormal nn6_in[] = {REQ("X", "T"), REQ("W", "T"), REQ("offset", "T"), OPT("B", "T"),
                                  OPT("mask", "T")};
static const OxFormal nn6_out[] = {REQ("Y", "T")};
static const OxTypeConstr nn6_tc[] = {{"T", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64)}};
static const OxAttrSpec nn6_at[] = {
    {.name = "dilations", .type = ONYX_ATTR_INTS},
    {.name = "group", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 1},
    {.name = "kernel_shape", .type = ONYX_ATTR_INTS},
    {.name = "offset_group", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 1},
    {.name = "pads", .type = ONYX_ATTR_INTS},
    {.name = "strides", .type = ONYX_ATTR_INTS},
};
static const OxFormal nn7_in[] = {REQ("X", "T"), REQ("W", "T"), REQ("offset", "T"), OPT("B", "T"),
                                  OPT("mask", "T")};
static const OxFormal nn7_out[] = {REQ("Y", "T")};
static const OxTypeConstr nn7_tc[] = {
    {"T", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}};
static const OxAttrSpec nn7_at[] = {
    {.name = "dilations", .type = ONYX_ATTR_INTS},
    {.name = "group", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 1},
    {.name = "kernel_shape", .type = ONYX_ATTR_INTS},
    {.name = "offset_group", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 1},
    {.name = "pads", .type = ONYX_ATTR_INTS},
    {.name = "strides", .type = ONYX_ATTR_INTS},
};
static const OxFormal nn8_in[] = {REQ("X", "T")};
static const OxFormal nn8_out[] = {REQ("Y", "T")};
static const OxTypeConstr nn8_tc[] = {{"T", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64)}};
static const OxAttrSpec nn8_at[] = {
    {.name = "auto_pad", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "NOTSET"},
    {.name = "ceil_mode", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "dilations", .type = ONYX_ATTR_INTS},
    {.name = "kernel_shape", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "p", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 2},
    {.name = "pads", .type = ONYX_ATTR_INTS},
    {.name = "strides", .type = ONYX_ATTR_INTS},
};
static const OxFormal nn9_in[] = {REQ("X", "T")};
static const OxFormal nn9_out[] = {REQ("Y", "T")};
static const OxTypeConstr nn9_tc[] = {
    {"T", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}};
static const OxAttrSpec nn9_at[] = {
    {.name = "auto_pad", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "NOTSET"},
    {.name = "ceil_mode", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "dilations", .type = ONYX_ATTR_INTS},
    {.name = "kernel_shape", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "p", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 2},
    {.name = "pads", .type = ONYX_ATTR_INTS},
    {.name = "strides", .type = ONYX_ATTR_INTS},
};
static const OxFormal nn10_in[] = {REQ("X", "T")};
static const OxFormal nn10_out[] = {REQ("Y", "T")};
static const OxTypeConstr nn10_tc[] = {
    {"T", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}};
static const OxFormal nn11_in[] = {REQ("X", "T")};
static const OxFormal nn11_out[] = {REQ("Y", "T")};
static const OxTypeConstr nn11_tc[] = {
    {"T", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}};
static const OxAttrSpec nn11_at[] = {
    {.name = "p", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 2},
};
static const OxFormal nn12_in[] = {REQ("X", "T1"), REQ("I", "T2"), OPT("output_shape", "T2")};
static const OxFormal nn12_out[] = {REQ("output", "T1")};
static const OxTypeConstr nn12_tc[] = {
    {"T1", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}, {"T2", T_(INT64)}};
static const OxAttrSpec nn12_at[] = {
    {.name = "kernel_shape", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "pads", .type = ONYX_ATTR_INTS},
    {.name = "strides", .type = ONYX_ATTR_INTS},
};
static const OxFormal nn13_in[] = {REQ("X", "T"), REQ("rois", "T")};
static const OxFormal nn13_out[] = {REQ("Y", "T")};
static const OxTypeConstr nn13_tc[] = {
    {"T", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}};
static const OxAttrSpec nn13_at[] = {
    {.name = "pooled_shape", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "spatial_scale", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 1.0f},
};
static const OxFormal nn14_in[] = {REQ("X", "T1"), REQ("rois", "T1"), REQ("batch_indices", "T2")};
static const OxFormal nn14_out[] = {REQ("Y", "T1")};
static const OxTypeConstr nn14_tc[] = {
    {"T1", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}, {"T2", T_(INT64)}};
static const OxAttrSpec nn14_at[] = {
    {.name = "coordinate_transformation_mode",
     .type = ONYX_ATTR_STRING,
     .has_default = true,
     .def_s = "half_pixel"},
    {.name = "mode", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "avg"},
    {.name = "output_height", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 1},
    {.name = "output_width", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 1},
    {.name = "sampling_ratio", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "spatial_scale", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 1.0f},
};
static const OxFormal nn15_in[] = {REQ("input", "T"), REQ("image_shape", "tensor(int64)"),
                                   REQ("block_shape", "tensor(int64)")};
static const OxFormal nn15_out[] = {REQ("output", "T")};
static const OxTypeConstr nn15_tc[] = {{"T", M_ALL_NN}};
static const OxAttrSpec nn15_at[] = {
    {.name = "dilations", .type = ONYX_ATTR_INTS},
    {.name = "pads", .type = ONYX_ATTR_INTS},
    {.name = "strides", .type = ONYX_ATTR_INTS},
};
static const OxFormal nn16_in[] = {REQ("X", "T"), REQ("scale", "T"), REQ("bias", "T")};
static const OxFormal nn16_out[] = {REQ("Y", "T")};
static const OxTypeConstr nn16_tc[] = {
    {"T", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}};
static const OxAttrSpec nn16_at[] = {
    {.name = "epsilon", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 1e-05f},
    {.name = "num_groups", .type = ONYX_ATTR_INT, .required = true},
};
static const OxFormal nn17_in[] = {REQ("X", "T"), REQ("scale", "T"), REQ("bias", "T")};
static const OxFormal nn17_out[] = {REQ("Y", "T")};
static const OxTypeConstr nn17_tc[] = {
    {"T", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}};
static const OxAttrSpec nn17_at[] = {
    {.name = "epsilon", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 1e-05f},
    {.name = "num_groups", .type = ONYX_ATTR_INT, .required = true},
    {.name = "stash_type", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 1},
};
static const OxFormal nn18_in[] = {REQ("input", "T"), REQ("scale", "T"), REQ("B", "T")};
static const OxFormal nn18_out[] = {REQ("output", "T")};
static const OxTypeConstr nn18_tc[] = {
    {"T", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}};
static const OxAttrSpec nn18_at[] = {
    {.name = "epsilon",
     .type = ONYX_ATTR_FLOAT,
     .has_default = true,
     .def_f = 9.999999747378752e-06f},
};
static const OxFormal nn19_in[] = {REQ("input", "T")};
static const OxFormal nn19_out[] = {REQ("output", "T")};
static const OxTypeConstr nn19_tc[] = {
    {"T", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}};
static const OxAttrSpec nn19_at[] = {
    {.name = "axis", .type = ONYX_ATTR_INT, .has_default = true, .def_i = -1},
    {.name = "p", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 2},
};
static const OxFormal nn20_in[] = {REQ("X", "T"), REQ("scale", "V")};
static const OxFormal nn20_out[] = {REQ("Y", "V")};
static const OxTypeConstr nn20_tc[] = {
    {"T", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)},
    {"V", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}};
static const OxAttrSpec nn20_at[] = {
    {.name = "axis", .type = ONYX_ATTR_INT, .has_default = true, .def_i = -1},
    {.name = "epsilon", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 1e-05f},
    {.name = "stash_type", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 1},
};
static const OxFormal nn21_in[] = {
    REQ("X", "T"),        REQ("W", "T"), REQ("R", "T"), OPT("B", "T"), OPT("sequence_lens", "T1"),
    OPT("initial_h", "T")};
static const OxFormal nn21_out[] = {OPT("Y", "T"), OPT("Y_h", "T")};
static const OxTypeConstr nn21_tc[] = {
    {"T", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}, {"T1", T_(INT32)}};
static const OxAttrSpec nn21_at[] = {
    {.name = "activation_alpha", .type = ONYX_ATTR_FLOATS},
    {.name = "activation_beta", .type = ONYX_ATTR_FLOATS},
    {.name = "activations", .type = ONYX_ATTR_STRINGS},
    {.name = "clip", .type = ONYX_ATTR_FLOAT},
    {.name = "direction", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "forward"},
    {.name = "hidden_size", .type = ONYX_ATTR_INT},
    {.name = "layout", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
};
static const OxFormal nn22_in[] = {
    REQ("X", "T"),        REQ("W", "T"), REQ("R", "T"), OPT("B", "T"), OPT("sequence_lens", "T1"),
    OPT("initial_h", "T")};
static const OxFormal nn22_out[] = {OPT("Y", "T"), OPT("Y_h", "T")};
static const OxTypeConstr nn22_tc[] = {
    {"T", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}, {"T1", T_(INT32)}};
static const OxAttrSpec nn22_at[] = {
    {.name = "activation_alpha", .type = ONYX_ATTR_FLOATS},
    {.name = "activation_beta", .type = ONYX_ATTR_FLOATS},
    {.name = "activations", .type = ONYX_ATTR_STRINGS},
    {.name = "clip", .type = ONYX_ATTR_FLOAT},
    {.name = "direction", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "forward"},
    {.name = "hidden_size", .type = ONYX_ATTR_INT},
    {.name = "layout", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "linear_before_reset", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
};
static const OxFormal nn23_in[] = {REQ("X", "T"),
                                   REQ("W", "T"),
                                   REQ("R", "T"),
                                   OPT("B", "T"),
                                   OPT("sequence_lens", "T1"),
                                   OPT("initial_h", "T"),
                                   OPT("initial_c", "T"),
                                   OPT("P", "T")};
static const OxFormal nn23_out[] = {OPT("Y", "T"), OPT("Y_h", "T"), OPT("Y_c", "T")};
static const OxTypeConstr nn23_tc[] = {
    {"T", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}, {"T1", T_(INT32)}};
static const OxAttrSpec nn23_at[] = {
    {.name = "activation_alpha", .type = ONYX_ATTR_FLOATS},
    {.name = "activation_beta", .type = ONYX_ATTR_FLOATS},
    {.name = "activations", .type = ONYX_ATTR_STRINGS},
    {.name = "clip", .type = ONYX_ATTR_FLOAT},
    {.name = "direction", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "forward"},
    {.name = "hidden_size", .type = ONYX_ATTR_INT},
    {.name = "input_forget", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "layout", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
};
static const OxFormal nn24_in[] = {REQ("input", "T"), REQ("target", "Tind"), OPT("weight", "T")};
static const OxFormal nn24_out[] = {REQ("loss", "T")};
static const OxTypeConstr nn24_tc[] = {
    {"T", T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16)}, {"Tind", T_(INT32) | T_(INT64)}};
static const OxAttrSpec nn24_at[] = {
    {.name = "ignore_index", .type = ONYX_ATTR_INT},
    {.name = "reduction", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "mean"},
};
static const OxSchema nn_rows[] = {
    {"", "Resize", 18, nn0_in, 4, nn0_out, 1, nn0_tc, 2, nn0_at, 9, nn_infer_resize, NULL, NULL,
     true},
    {"", "Resize", 19, nn1_in, 4, nn1_out, 1, nn1_tc, 2, nn1_at, 9, nn_infer_resize, NULL, NULL,
     true},
    {"", "GridSample", 20, nn2_in, 2, nn2_out, 1, nn2_tc, 2, nn2_at, 3, nn_infer_gridsample, NULL,
     NULL, true},
    {"", "GridSample", 22, nn3_in, 2, nn3_out, 1, nn3_tc, 2, nn3_at, 3, nn_infer_gridsample, NULL,
     NULL, true},
    {"", "AffineGrid", 20, nn4_in, 2, nn4_out, 1, nn4_tc, 2, nn4_at, 1, nn_infer_affine_grid, NULL,
     NULL, true},
    {"", "ConvTranspose", 22, nn5_in, 3, nn5_out, 1, nn5_tc, 1, nn5_at, 8, ox_infer_conv_transpose,
     NULL, NULL, true},
    {"", "DeformConv", 19, nn6_in, 5, nn6_out, 1, nn6_tc, 1, nn6_at, 6, NULL, NULL, NULL, true},
    {"", "DeformConv", 22, nn7_in, 5, nn7_out, 1, nn7_tc, 1, nn7_at, 6, NULL, NULL, NULL, true},
    {"", "LpPool", 18, nn8_in, 1, nn8_out, 1, nn8_tc, 1, nn8_at, 7, ox_infer_pool, NULL, NULL,
     true},
    {"", "LpPool", 22, nn9_in, 1, nn9_out, 1, nn9_tc, 1, nn9_at, 7, ox_infer_pool, NULL, NULL,
     true},
    {"", "GlobalMaxPool", 22, nn10_in, 1, nn10_out, 1, nn10_tc, 1, NULL, 0, ox_infer_global_pool,
     NULL, NULL, true},
    {"", "GlobalLpPool", 22, nn11_in, 1, nn11_out, 1, nn11_tc, 1, nn11_at, 1, ox_infer_global_pool,
     NULL, NULL, true},
    {"", "MaxUnpool", 22, nn12_in, 3, nn12_out, 1, nn12_tc, 2, nn12_at, 3, NULL, NULL, NULL, true},
    {"", "MaxRoiPool", 22, nn13_in, 2, nn13_out, 1, nn13_tc, 1, nn13_at, 2, nn_infer_roi, NULL,
     NULL, true},
    {"", "RoiAlign", 22, nn14_in, 3, nn14_out, 1, nn14_tc, 2, nn14_at, 6, nn_infer_roi, NULL, NULL,
     true},
    {"", "Col2Im", 18, nn15_in, 3, nn15_out, 1, nn15_tc, 1, nn15_at, 3, NULL, NULL, NULL, true},
    {"", "GroupNormalization", 18, nn16_in, 3, nn16_out, 1, nn16_tc, 1, nn16_at, 2, nn_infer_like_x,
     NULL, NULL, true},
    {"", "GroupNormalization", 21, nn17_in, 3, nn17_out, 1, nn17_tc, 1, nn17_at, 3, nn_infer_like_x,
     NULL, NULL, true},
    {"", "InstanceNormalization", 22, nn18_in, 3, nn18_out, 1, nn18_tc, 1, nn18_at, 1,
     nn_infer_like_x, NULL, NULL, true},
    {"", "LpNormalization", 22, nn19_in, 1, nn19_out, 1, nn19_tc, 1, nn19_at, 2, nn_infer_like_x,
     NULL, NULL, true},
    {"", "RMSNormalization", 23, nn20_in, 2, nn20_out, 1, nn20_tc, 2, nn20_at, 3, nn_infer_rms,
     NULL, NULL, true},
    {"", "RNN", 22, nn21_in, 6, nn21_out, 2, nn21_tc, 2, nn21_at, 7, nn_infer_rnn, NULL, NULL,
     true},
    {"", "GRU", 22, nn22_in, 6, nn22_out, 2, nn22_tc, 2, nn22_at, 8, nn_infer_rnn, NULL, NULL,
     true},
    {"", "LSTM", 22, nn23_in, 8, nn23_out, 3, nn23_tc, 2, nn23_at, 8, nn_infer_rnn, NULL, NULL,
     true},
    {"", "NegativeLogLikelihoodLoss", 22, nn24_in, 3, nn24_out, 1, nn24_tc, 2, nn24_at, 2,
     nn_infer_loss, NULL, NULL, true},
};

static const OxInferOverride nn_overrides[] = {
    {"", "InstanceNormalization", 1, 17, nn_infer_like_x},
    {"", "LpNormalization", 1, 17, nn_infer_like_x},
    {"", "MeanVarianceNormalization", 1, 17, nn_infer_like_x},
    {"", "LRN", 1, 17, nn_infer_like_x},
    {"", "NonMaxSuppression", 1, 17, nn_infer_nms},
    {"", "RNN", 1, 17, nn_infer_rnn},
    {"", "GRU", 1, 17, nn_infer_rnn},
    {"", "LSTM", 1, 17, nn_infer_rnn},
    {"", "GlobalMaxPool", 1, 17, ox_infer_global_pool},
    {"", "GlobalLpPool", 1, 17, ox_infer_global_pool},
    {"", "LpPool", 1, 17, ox_infer_pool},
    {"", "ConvTranspose", 1, 17, ox_infer_conv_transpose},
    {"", "Resize", 10, 17, nn_infer_resize},
    {"", "Upsample", 7, 10, nn_infer_resize},
    {"", "RoiAlign", 10, 17, nn_infer_roi},
    {"", "MaxRoiPool", 1, 17, nn_infer_roi},
    {"", "NegativeLogLikelihoodLoss", 12, 17, nn_infer_loss},
    {"", "SoftmaxCrossEntropyLoss", 12, 17, nn_infer_loss},
    /* onnx 1.12 types GridSample-16 as X, grid: T1 and Y: T2 (fixed in onnx
     * 1.13, PR 4655: Y has X's type); the row is kept as generated so that
     * compare_onnx.py agrees, and Y takes X's type here. */
    {"", "GridSample", 16, 16, nn_infer_gridsample},
};

const OxSchemaFamily ox_family_nn = {"nn", nn_rows, OX_ARRAY_LEN(nn_rows), nn_overrides,
                                     OX_ARRAY_LEN(nn_overrides)};
