/* schemas_nchwc.c — the com.onyx blocked-channel ops that the layout pass
 * (host/optimizer/opt_layout_nchwc.c, docs/optimizer.md) rewrites chains of
 * CPU convolutions into. A blocked tensor of an NCHW tensor [N, C, H, W] is
 * [N, ceil(C / b), H, W, b]: channel c of pixel (h, w) at [n, c / b, h, w,
 * c % b], the lanes past C zero when a ReorderInput writes them. Kernels:
 * providers/cpu/cpu_nchwc.c.
 *
 *   ReorderInput(X [N, C, H, W]) -> Y [N, ceil(C/b), H, W, b]   attribute
 *                                  block (b: 8 or 16); padded lanes zero
 *   ReorderOutput(X [N, Cb, H, W, b]) -> Y [N, C, H, W]   attribute channels
 *                                  (C, at most Cb * b); the padded lanes are
 *                                  dropped
 *   NchwcConv(X, W, B?, Z?) -> Y   Conv of the blocked X with the ONNX W
 *                                  [M, C/group, kh, kw] and bias B [M]; Z
 *                                  (a blocked tensor of Y's shape) added,
 *                                  then FusedConv's `activation` (optional
 *                                  here); Y [N, ceil(M/b), oh, ow, b].
 *                                  Attributes kernel_shape, strides, pads
 *                                  (4), dilations, group (all explicit: the
 *                                  pass writes them), block, and FusedConv's
 *                                  activation, alpha, beta, clip_min,
 *                                  clip_max. The kernel takes any group
 *                                  (depthwise, grouped with block-diagonal
 *                                  weights, group 1);
 *                                  with group 1, X may also be NCHW
 *                                  [N, C, H, W] (a chain's first conv)
 *   NchwcGlobalAveragePool(X [N, Cb, H, W, b]) -> Y [N, Cb, 1, 1, b]
 *                                  the mean over H and W of every lane
 *   NchwcScale(X [N, Cb, H, W, b], S [N, Cb, 1, 1, b]) -> Y   X * S, each
 *                                  pixel's channels times the image's
 *                                  (a squeeze-and-excitation gate)
 *   NchwcMaxPool(X [N, Cb, H, W, b]) -> Y [N, Cb, oh, ow, b]
 *   NchwcAveragePool(X) -> Y       MaxPool / AveragePool of every lane
 *                                  over a 2-D window: attributes
 *                                  kernel_shape, strides, pads (4),
 *                                  dilations (all explicit: the pass writes
 *                                  them), ceil_mode, and AveragePool's
 *                                  count_include_pad; ONNX's output extents
 *                                  (auto_pad resolved, no Indices)
 *   NchwcBatchNormalization(X [N, Cb, H, W, b], scale, B, mean, var) -> Y
 *                                  inference BatchNormalization of the
 *                                  blocked X (parameters [C], C within X's
 *                                  last block; attribute epsilon), then
 *                                  attribute activation ("" or "Relu",
 *                                  a Relu reading only the BN's output);
 *                                  the padded lanes are written 0 */
#include <math.h>
#include <string.h>
#include "infer_util.h"
#include "schema_internal.h"

#define CONTRIB "com.onyx"
#define F32     OX_T(ONYX_ELEM_FLOAT32)
#define L(a)    a, (uint8_t)OX_ARRAY_LEN(a)

static const OxTypeConstr t_f32[] = {{"T", F32}};
static const OxFormal f_x[] = {{"X", "T", ONYX_PARAM_SINGLE, 1}};
static const OxFormal f_y[] = {{"Y", "T", ONYX_PARAM_SINGLE, 1}};
static const OxFormal f_conv_in[] = {{"X", "T", ONYX_PARAM_SINGLE, 1},
                                     {"W", "T", ONYX_PARAM_SINGLE, 1},
                                     {"B", "T", ONYX_PARAM_OPTIONAL, 1},
                                     {"Z", "T", ONYX_PARAM_OPTIONAL, 1}};

static const OxAttrSpec a_block[] = {{.name = "block", .type = ONYX_ATTR_INT, .required = true}};
static const OxAttrSpec a_channels[] = {
    {.name = "channels", .type = ONYX_ATTR_INT, .required = true}};
static const OxAttrSpec a_conv[] = {
    {.name = "block", .type = ONYX_ATTR_INT, .required = true},
    {.name = "kernel_shape", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "strides", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "pads", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "dilations", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "group", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 1},
    {.name = "activation", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = ""},
    {.name = "alpha", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 0.01f},
    {.name = "clip_min", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = -INFINITY},
    {.name = "clip_max", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = INFINITY},
    {.name = "beta", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 0.5f},
};

static OnyxStatus* nchwc_block(const OxNode* n, int64_t* b) {
  *b = ox_attr_i(n, "block", 0);
  if (*b != 8 && *b != 16)
    return ox_node_err(n, "attribute 'block' must be 8 or 16, not %lld", (long long)*b);
  return NULL;
}

/* ceil(c / b) for c >= 0, or unknown. */
static int64_t nchwc_blocks(int64_t c, int64_t b) {
  return c < 0 ? ONYX_DIM_UNKNOWN : c / b + (c % b != 0);
}

static OnyxStatus* ox_infer_reorder_input(OxNode* n) {
  int64_t b;
  OX_TRY(nchwc_block(n, &b));
  OxDims x;
  ox_in_dims(n, 0, &x);
  if (x.rank >= 0 && x.rank != 4)
    return ox_node_err(n, "X must be 4-D [N, C, H, W], not %d-D", (int)x.rank);
  if (x.rank < 0) return ox_out_set(n, 0, ox_in_type(n, 0), NULL);
  OxDims y = {.rank = 5, .d = {x.d[0], nchwc_blocks(x.d[1], b), x.d[2], x.d[3], b}};
  return ox_out_set(n, 0, ox_in_type(n, 0), &y);
}

static OnyxStatus* ox_infer_reorder_output(OxNode* n) {
  const int64_t c = ox_attr_i(n, "channels", -1);
  if (c < 1) return ox_node_err(n, "attribute 'channels' must be positive, not %lld", (long long)c);
  OxDims x;
  ox_in_dims(n, 0, &x);
  if (x.rank >= 0 && x.rank != 5)
    return ox_node_err(n, "X must be 5-D [N, C/block, H, W, block], not %d-D", (int)x.rank);
  if (x.rank < 0) return ox_out_set(n, 0, ox_in_type(n, 0), NULL);
  if (x.d[4] >= 0 && x.d[4] != 8 && x.d[4] != 16)
    return ox_node_err(n, "X's block (last dim) must be 8 or 16, not %lld", (long long)x.d[4]);
  int64_t have;
  if (x.d[1] >= 0 && x.d[4] >= 0 && ox_mul_i64(x.d[1], x.d[4], &have) &&
      (c > have || c <= have - x.d[4]))
    return ox_node_err(n, "'channels' %lld does not fit X's %lld blocks of %lld", (long long)c,
                       (long long)x.d[1], (long long)x.d[4]);
  OxDims y = {.rank = 4, .d = {x.d[0], c, x.d[2], x.d[3]}};
  return ox_out_set(n, 0, ox_in_type(n, 0), &y);
}

/* The window attribute `name` with exactly `count` values, each >= lo. */
static OnyxStatus* nchwc_ints(const OxNode* n, const char* name, size_t count, int64_t lo,
                              const int64_t** out) {
  size_t k = 0;
  *out = ox_attr_ints(n, name, &k);
  if (!*out || k != count)
    return ox_node_err(n, "attribute '%s' must have %zu values, not %zu", name, count, k);
  for (size_t i = 0; i < count; i++)
    if ((*out)[i] < lo || (*out)[i] > INT32_MAX)
      return ox_node_err(n, "attribute '%s' value %lld is out of range", name,
                         (long long)(*out)[i]);
  return NULL;
}

/* One output extent: (in + pads - dilated kernel) / stride + 1. */
static OnyxStatus* nchwc_extent(const OxNode* n, int64_t in, int64_t k, int64_t s, int64_t d,
                                int64_t p0, int64_t p1, int64_t* out) {
  if (in < 0) {
    *out = ONYX_DIM_UNKNOWN;
    return NULL;
  }
  int64_t span, padded;
  if (!ox_dilated_extent(k, d, &span) || !ox_add3_i64(in, p0, p1, &padded))
    return ox_node_err(n, "window arithmetic overflows");
  if (padded < span)
    return ox_node_err(n, "the %lld-wide dilated kernel exceeds the padded input of %lld",
                       (long long)span, (long long)padded);
  *out = (padded - span) / s + 1;
  return NULL;
}

static OnyxStatus* ox_infer_nchwc_conv(OxNode* n) {
  int64_t b;
  OX_TRY(nchwc_block(n, &b));
  const int64_t *k, *s, *p, *d;
  OX_TRY(nchwc_ints(n, "kernel_shape", 2, 1, &k));
  OX_TRY(nchwc_ints(n, "strides", 2, 1, &s));
  OX_TRY(nchwc_ints(n, "pads", 4, 0, &p));
  OX_TRY(nchwc_ints(n, "dilations", 2, 1, &d));
  const int64_t group = ox_attr_i(n, "group", 1);
  if (group < 1) return ox_node_err(n, "attribute 'group' is %lld", (long long)group);
  OxDims x, w;
  ox_in_dims(n, 0, &x);
  ox_in_dims(n, 1, &w);
  if (x.rank >= 0 && x.rank != 5 && !(x.rank == 4 && group == 1))
    return ox_node_err(n,
                       "X must be blocked 5-D [N, C/block, H, W, block] (or NCHW with group 1), "
                       "not %d-D",
                       (int)x.rank);
  if (w.rank >= 0 && w.rank != 4)
    return ox_node_err(n, "W must be 4-D [M, C/group, kh, kw], not %d-D", (int)w.rank);
  if (x.rank == 4) { /* NCHW X: exactly W's channels; the spatial dims at 2 and 3 as blocked */
    if (x.d[1] >= 0 && w.rank == 4 && w.d[1] >= 0 && x.d[1] != w.d[1])
      return ox_node_err(n, "NCHW X has %lld channels, W reads %lld", (long long)x.d[1],
                         (long long)w.d[1]);
    x.rank = 5, x.d[4] = b, x.d[1] = nchwc_blocks(x.d[1], b);
  }
  if (x.rank == 5 && x.d[4] >= 0 && x.d[4] != b)
    return ox_node_err(n, "X's block %lld is not attribute 'block' %lld", (long long)x.d[4],
                       (long long)b);
  if (w.rank == 4 && ((w.d[2] >= 0 && w.d[2] != k[0]) || (w.d[3] >= 0 && w.d[3] != k[1])))
    return ox_node_err(n, "W's kernel %lldx%lld is not kernel_shape %lldx%lld", (long long)w.d[2],
                       (long long)w.d[3], (long long)k[0], (long long)k[1]);
  int64_t cin, have;
  if (x.rank == 5 && w.rank == 4 && x.d[1] >= 0 && w.d[1] >= 0 &&
      (!ox_mul_i64(w.d[1], group, &cin) || !ox_mul_i64(x.d[1], b, &have) || cin > have ||
       cin <= have - b))
    return ox_node_err(n, "W reads %lld x group %lld channels, X holds %lld blocks of %lld",
                       (long long)w.d[1], (long long)group, (long long)x.d[1], (long long)b);
  if (x.rank < 0 || w.rank < 0) return ox_out_set(n, 0, ox_in_type(n, 0), NULL);
  OxDims y = {.rank = 5, .d = {x.d[0], nchwc_blocks(w.d[0], b), 0, 0, b}};
  OX_TRY(nchwc_extent(n, x.d[2], k[0], s[0], d[0], p[0], p[2], &y.d[2]));
  OX_TRY(nchwc_extent(n, x.d[3], k[1], s[1], d[1], p[1], p[3], &y.d[3]));
  if (n->n_inputs > 3 && n->inputs[3]) { /* Z: Y's shape, no broadcasting */
    OxDims z;
    ox_in_dims(n, 3, &z);
    bool same = z.rank < 0 || z.rank == 5;
    for (int32_t i = 0; same && z.rank == 5 && i < 5; i++)
      same = z.d[i] < 0 || y.d[i] < 0 || z.d[i] == y.d[i];
    if (!same) return ox_node_err(n, "Z must have Y's blocked shape (no broadcasting)");
  }
  return ox_out_set(n, 0, ox_in_type(n, 0), &y);
}

static OnyxStatus* ox_infer_nchwc_gap(OxNode* n) {
  OxDims x;
  ox_in_dims(n, 0, &x);
  if (x.rank >= 0 && x.rank != 5)
    return ox_node_err(n, "X must be blocked 5-D [N, C/block, H, W, block], not %d-D", (int)x.rank);
  if (x.rank < 0) return ox_out_set(n, 0, ox_in_type(n, 0), NULL);
  x.d[2] = x.d[3] = 1;
  return ox_out_set(n, 0, ox_in_type(n, 0), &x);
}

static OnyxStatus* ox_infer_nchwc_scale(OxNode* n) {
  OxDims x, sc;
  ox_in_dims(n, 0, &x);
  ox_in_dims(n, 1, &sc);
  if ((x.rank >= 0 && x.rank != 5) || (sc.rank >= 0 && sc.rank != 5))
    return ox_node_err(n, "X and S must be blocked 5-D [N, C/block, H, W, block]");
  if (x.rank == 5 && sc.rank == 5) {
    const int idx[] = {0, 1, 4};
    for (int i = 0; i < 3; i++)
      if (x.d[idx[i]] >= 0 && sc.d[idx[i]] >= 0 && x.d[idx[i]] != sc.d[idx[i]])
        return ox_node_err(n, "S [%lld, %lld, .., .., %lld] does not match X's N, blocks and block",
                           (long long)sc.d[0], (long long)sc.d[1], (long long)sc.d[4]);
    if ((sc.d[2] >= 0 && sc.d[2] != 1) || (sc.d[3] >= 0 && sc.d[3] != 1))
      return ox_node_err(n, "S must be 1x1 per image and channel");
  }
  return ox_out_set(n, 0, ox_in_type(n, 0), x.rank == 5 ? &x : NULL);
}

static const OxAttrSpec a_pool[] = {
    {.name = "kernel_shape", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "strides", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "pads", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "dilations", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "ceil_mode", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "count_include_pad", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
};
static const OxAttrSpec a_bn[] = {
    {.name = "epsilon", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 1e-5f},
    {.name = "activation", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = ""}};
static const OxFormal f_bn_in[] = {{"X", "T", ONYX_PARAM_SINGLE, 1},
                                   {"scale", "T", ONYX_PARAM_SINGLE, 1},
                                   {"B", "T", ONYX_PARAM_SINGLE, 1},
                                   {"mean", "T", ONYX_PARAM_SINGLE, 1},
                                   {"var", "T", ONYX_PARAM_SINGLE, 1}};

/* X blocked 5-D, its block 8 or 16 where known. */
static OnyxStatus* nchwc_blocked_x(const OxNode* n, OxDims* x) {
  ox_in_dims(n, 0, x);
  if (x->rank >= 0 && x->rank != 5)
    return ox_node_err(n, "X must be blocked 5-D [N, C/block, H, W, block], not %d-D",
                       (int)x->rank);
  if (x->rank == 5 && x->d[4] >= 0 && x->d[4] != 8 && x->d[4] != 16)
    return ox_node_err(n, "X's block (last dim) must be 8 or 16, not %lld", (long long)x->d[4]);
  return NULL;
}

/* One pooled extent: nchwc_extent's, rounded up with ceil_mode (a last
 * window starting past the input and its leading pad dropped). */
static OnyxStatus* nchwc_pool_extent(const OxNode* n, int64_t in, int64_t k, int64_t s, int64_t d,
                                     int64_t p0, int64_t p1, bool ceil_mode, int64_t* out) {
  OX_TRY(nchwc_extent(n, in, k, s, d, p0, p1, out));
  int64_t span, padded, last;
  if (in < 0 || !ceil_mode || !ox_dilated_extent(k, d, &span) || !ox_add3_i64(in, p0, p1, &padded))
    return NULL; /* nchwc_extent checked the arithmetic */
  if ((padded - span) % s == 0) return NULL;
  /* rounded up: one more window, unless it would start past the input and
   * its leading pad */
  if (ox_mul_i64(*out, s, &last) && last < in + p0) ++*out;
  return NULL;
}

static OnyxStatus* ox_infer_nchwc_pool(OxNode* n) {
  const int64_t *k, *s, *p, *d;
  OX_TRY(nchwc_ints(n, "kernel_shape", 2, 1, &k));
  OX_TRY(nchwc_ints(n, "strides", 2, 1, &s));
  OX_TRY(nchwc_ints(n, "pads", 4, 0, &p));
  OX_TRY(nchwc_ints(n, "dilations", 2, 1, &d));
  const bool ceil_mode = ox_attr_i(n, "ceil_mode", 0) != 0;
  OxDims x;
  OX_TRY(nchwc_blocked_x(n, &x));
  if (x.rank < 0) return ox_out_set(n, 0, ox_in_type(n, 0), NULL);
  OxDims y = x;
  OX_TRY(nchwc_pool_extent(n, x.d[2], k[0], s[0], d[0], p[0], p[2], ceil_mode, &y.d[2]));
  OX_TRY(nchwc_pool_extent(n, x.d[3], k[1], s[1], d[1], p[1], p[3], ceil_mode, &y.d[3]));
  return ox_out_set(n, 0, ox_in_type(n, 0), &y);
}

static OnyxStatus* ox_infer_nchwc_bn(OxNode* n) {
  const char* act = ox_attr_s(n, "activation", "");
  if (*act && strcmp(act, "Relu"))
    return ox_node_err(n, "attribute 'activation' must be \"\" or \"Relu\", not \"%s\"", act);
  OxDims x;
  OX_TRY(nchwc_blocked_x(n, &x));
  static const char* const names[] = {"scale", "B", "mean", "var"};
  int64_t c = ONYX_DIM_UNKNOWN;
  for (size_t i = 1; i < 5; i++) {
    OxDims v;
    ox_in_dims(n, i, &v);
    if (v.rank >= 0 && v.rank != 1)
      return ox_node_err(n, "%s must be 1-D [C], not %d-D", names[i - 1], (int)v.rank);
    if (v.rank == 1 && v.d[0] >= 0) {
      if (c >= 0 && v.d[0] != c)
        return ox_node_err(n, "%s holds %lld values, scale %lld", names[i - 1], (long long)v.d[0],
                           (long long)c);
      c = v.d[0];
    }
  }
  int64_t have;
  if (c >= 0 && x.rank == 5 && x.d[1] >= 0 && x.d[4] >= 0 &&
      (!ox_mul_i64(x.d[1], x.d[4], &have) || c > have || c <= have - x.d[4]))
    return ox_node_err(n, "the %lld channels of scale do not fit X's %lld blocks of %lld",
                       (long long)c, (long long)x.d[1], (long long)x.d[4]);
  return ox_out_set(n, 0, ox_in_type(n, 0), x.rank == 5 ? &x : NULL);
}

static const OxFormal f_scale_in[] = {{"X", "T", ONYX_PARAM_SINGLE, 1},
                                      {"S", "T", ONYX_PARAM_SINGLE, 1}};

static const OxSchema ox_nchwc_rows[] = {
    {CONTRIB, "ReorderInput", 1, L(f_x), L(f_y), L(t_f32), L(a_block), ox_infer_reorder_input, NULL,
     NULL, true},
    {CONTRIB, "ReorderOutput", 1, L(f_x), L(f_y), L(t_f32), L(a_channels), ox_infer_reorder_output,
     NULL, NULL, true},
    {CONTRIB, "NchwcConv", 1, L(f_conv_in), L(f_y), L(t_f32), L(a_conv), ox_infer_nchwc_conv, NULL,
     NULL, true},
    {CONTRIB, "NchwcGlobalAveragePool", 1, L(f_x), L(f_y), L(t_f32), NULL, 0, ox_infer_nchwc_gap,
     NULL, NULL, true},
    {CONTRIB, "NchwcScale", 1, L(f_scale_in), L(f_y), L(t_f32), NULL, 0, ox_infer_nchwc_scale, NULL,
     NULL, true},
    {CONTRIB, "NchwcMaxPool", 1, L(f_x), L(f_y), L(t_f32), L(a_pool), ox_infer_nchwc_pool, NULL,
     NULL, true},
    {CONTRIB, "NchwcAveragePool", 1, L(f_x), L(f_y), L(t_f32), L(a_pool), ox_infer_nchwc_pool, NULL,
     NULL, true},
    {CONTRIB, "NchwcBatchNormalization", 1, L(f_bn_in), L(f_y), L(t_f32), L(a_bn),
     ox_infer_nchwc_bn, NULL, NULL, true},
};

const OxSchemaFamily ox_family_nchwc = {"nchwc", L(ox_nchwc_rows), NULL, 0};
