/* schemas_quant.c — the quant family: quantization (QuantizeLinear,
 * DequantizeLinear, QLinearMatMul, ...), signal processing (DFT, STFT,
 * windows, MelWeightMatrix) and random generators.
 *
 * Rows follow the ONNX Changelog for versions newer than the generated table
 * (opset 17): QuantizeLinear / DequantizeLinear 19, 21, 23, 24, 25 (float8,
 * 16-bit, 4-bit, float4, float8e8m0 scales, 2-bit types; block_size,
 * output_dtype, precision), DFT-20 (axis as an input), QLinearMatMul-21
 * (float16/bfloat16 scales, float8 types) and the opset-22 generators
 * (bfloat16 added). The inference overrides give generated rows their output
 * types where the default cannot (dtype / output_datatype attributes, the
 * uint8 default of QuantizeLinear) and shapes where they are cheap. */
#include <stdlib.h>
#include <string.h>
#include "infer_util.h"
#include "ox_checked.h"
#include "schema_internal.h"

#define T_(x)  OX_T(ONYX_ELEM_##x)
#define M_F    (T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64))
#define M_FB   (M_F | T_(BFLOAT16))
#define M_SINT (T_(INT8) | T_(INT16) | T_(INT32) | T_(INT64))
#define M_UINT (T_(UINT8) | T_(UINT16) | T_(UINT32) | T_(UINT64))
#define M_F8   (T_(FLOAT8E4M3FN) | T_(FLOAT8E4M3FNUZ) | T_(FLOAT8E5M2) | T_(FLOAT8E5M2FNUZ))
#define M_I4   (T_(UINT4) | T_(INT4))
#define M_I2   (T_(UINT2) | T_(INT2))
#define M_ALL4                                                                                     \
  (M_F | M_SINT | M_UINT | T_(STRING) | T_(BOOL) | T_(COMPLEX64) | T_(COMPLEX128) | T_(BFLOAT16))
/* Scale / high-precision types of the quantizers. */
#define M_QX  (T_(FLOAT32) | T_(FLOAT16) | T_(BFLOAT16) | T_(INT32))
#define M_QS  (T_(FLOAT32) | T_(FLOAT16) | T_(BFLOAT16))
#define M_Q8  (T_(INT8) | T_(UINT8))
#define M_Q16 (M_Q8 | T_(INT16) | T_(UINT16))

#define REQ(n, tc)                                                                                 \
  { n, tc, ONYX_PARAM_SINGLE, 1 }
#define OPT(n, tc)                                                                                 \
  { n, tc, ONYX_PARAM_OPTIONAL, 1 }
#define AI(n, d)                                                                                   \
  { .name = n, .type = ONYX_ATTR_INT, .has_default = true, .def_i = (d) }
#define AF(n, d)                                                                                   \
  { .name = n, .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = (d) }
#define AO(n, t)                                                                                   \
  { .name = n, .type = ONYX_ATTR_##t } /* optional */
#define AR(n, t)                                                                                   \
  { .name = n, .type = ONYX_ATTR_##t, .required = true }
#define L(a) a, (uint8_t)OX_ARRAY_LEN(a)
#define NONE NULL, 0
#define S(op, ver, ...)                                                                            \
  { "", op, ver, __VA_ARGS__, NULL, NULL, true }

/* --- Inference ------------------------------------------------------------------ */

/* A dtype-like attribute as an element type; UNDEFINED when absent or 0. */
static OnyxStatus* attr_type(OxNode* n, const char* name, OnyxElemType* out) {
  *out = ONYX_ELEM_UNDEFINED;
  if (!ox_attr_present(n, name)) return NULL;
  int64_t v = ox_attr_i(n, name, 0);
  if (v == 0) return NULL;
  if (v < 0 || v >= ONYX_ELEM_TYPE_COUNT || v == ONYX_ELEM_STRING)
    return ox_node_err(n, "attribute '%s' = %lld is not a numeric element type", name,
                       (long long)v);
  *out = (OnyxElemType)v;
  return NULL;
}

/* QuantizeLinear: y_zero_point's type, else output_dtype, else uint8. */
static OnyxStatus* infer_quantize(OxNode* n) {
  OnyxElemType dt, t = ox_in_type(n, 2);
  OnyxStatus* st = attr_type(n, "output_dtype", &dt);
  if (st) return st;
  if (t != ONYX_ELEM_UNDEFINED && dt != ONYX_ELEM_UNDEFINED && t != dt)
    return ox_node_err(n, "output_dtype %s does not match y_zero_point's type %s",
                       ox_onnx_type_name(dt), ox_onnx_type_name(t));
  if (t == ONYX_ELEM_UNDEFINED) t = dt != ONYX_ELEM_UNDEFINED ? dt : ONYX_ELEM_UINT8;
  OxDims x;
  ox_in_dims(n, 0, &x);
  return ox_out_set(n, 0, t, &x);
}

/* DequantizeLinear: output_dtype, else the scale's type (float before 19). */
static OnyxStatus* infer_dequantize(OxNode* n) {
  OnyxElemType t;
  OnyxStatus* st = attr_type(n, "output_dtype", &t);
  if (st) return st;
  if (t == ONYX_ELEM_UNDEFINED) t = ox_in_type(n, 1);
  if (t == ONYX_ELEM_FLOAT8E8M0 || t == ONYX_ELEM_UNDEFINED) t = ONYX_ELEM_FLOAT32;
  OxDims x;
  ox_in_dims(n, 0, &x);
  return ox_out_set(n, 0, t, &x);
}

static OnyxStatus* infer_dynamic_quantize(OxNode* n) {
  OxDims x, scalar = {.rank = 0};
  ox_in_dims(n, 0, &x);
  OnyxStatus* st = ox_out_set(n, 0, ONYX_ELEM_UINT8, &x);
  if (!st) st = ox_out_set(n, 1, ONYX_ELEM_FLOAT32, &scalar);
  if (!st) st = ox_out_set(n, 2, ONYX_ELEM_UINT8, &scalar);
  return st;
}

/* The attribute's type, else `fallback`. */
static OnyxStatus* out_type_attr(OxNode* n, const char* name, OnyxElemType fallback,
                                 const OxDims* d) {
  OnyxElemType t;
  OnyxStatus* st = attr_type(n, name, &t);
  if (st) return st;
  return ox_out_set(n, 0, t != ONYX_ELEM_UNDEFINED ? t : fallback, d);
}

/* HannWindow & co: 1-D of `size` elements, type output_datatype. */
static OnyxStatus* infer_window(OxNode* n) {
  OxDims d = {.rank = 1, .d = {ONYX_DIM_UNKNOWN}};
  int64_t* v = NULL;
  size_t count = 0;
  bool known = false;
  OnyxStatus* st = ox_const_ints(n, 0, &v, &count, &known);
  if (st) return st;
  if (known && count == 1 && v[0] >= 0) d.d[0] = v[0];
  free(v);
  return out_type_attr(n, "output_datatype", ONYX_ELEM_FLOAT32, &d);
}

static OnyxStatus* infer_mel(OxNode* n) {
  OxDims d = {.rank = 2, .d = {ONYX_DIM_UNKNOWN, ONYX_DIM_UNKNOWN}};
  return out_type_attr(n, "output_datatype", ONYX_ELEM_FLOAT32, &d);
}

/* RandomNormal / RandomUniform: dtype (float by default), shape attribute. */
static OnyxStatus* infer_random(OxNode* n) {
  size_t count = 0;
  const int64_t* shape = ox_attr_ints(n, "shape", &count);
  OxDims d = {.rank = -1};
  if (shape && count <= OX_INFER_MAX_RANK) {
    d.rank = (int32_t)count;
    for (size_t i = 0; i < count; i++) {
      if (shape[i] < 0)
        return ox_node_err(n, "attribute 'shape' is %lld on axis %zu, must be >= 0",
                           (long long)shape[i], i);
      d.d[i] = shape[i];
    }
  }
  return out_type_attr(n, "dtype", ONYX_ELEM_FLOAT32, &d);
}

/* *Like and Bernoulli: dtype, else the input's type; the input's shape. */
static OnyxStatus* infer_like(OxNode* n) {
  OxDims x;
  ox_in_dims(n, 0, &x);
  return out_type_attr(n, "dtype", ox_in_type(n, 0), &x);
}

static OnyxStatus* infer_multinomial(OxNode* n) {
  OnyxElemType t;
  OnyxStatus* st = attr_type(n, "dtype", &t);
  if (st) return st;
  if (t == ONYX_ELEM_UNDEFINED) t = ONYX_ELEM_INT32;
  if (t != ONYX_ELEM_INT32 && t != ONYX_ELEM_INT64)
    return ox_node_err(n, "dtype must be int32 or int64, got %s", ox_onnx_type_name(t));
  OxDims x, d = {.rank = 2, .d = {ONYX_DIM_UNKNOWN, ox_attr_i(n, "sample_size", 1)}};
  if (d.d[1] < 1)
    return ox_node_err(n, "attribute 'sample_size' is %lld, must be >= 1", (long long)d.d[1]);
  ox_in_dims(n, 0, &x);
  if (x.rank == 2) d.d[0] = x.d[0];
  return ox_out_set(n, 0, t, &d);
}

/* A constant scalar integer input: 1 known (in *v), 0 absent, -1 unknown. */
static OnyxStatus* const_scalar(OxNode* n, size_t i, int64_t* v, int* state) {
  *state = 0;
  if (!ox_in(n, i)) return NULL;
  int64_t* vals = NULL;
  size_t count = 0;
  bool known = false;
  OnyxStatus* st = ox_const_ints(n, i, &vals, &count, &known);
  *state = known && count == 1 ? 1 : -1;
  if (*state == 1) *v = vals[0];
  free(vals);
  return st;
}

/* DFT: the input's rank; the axis dim becomes the transform's length (or
 * length / 2 + 1 for onesided forward), the last dim 2 (1 for inverse
 * onesided). */
static OnyxStatus* infer_dft_common(OxNode* n, bool axis_input) {
  const OnyxElemType t = ox_in_type(n, 0);
  OxDims x;
  ox_in_dims(n, 0, &x);
  int64_t axis = axis_input ? -2 : ox_attr_i(n, "axis", 1), len = 0;
  int axis_state = 1, len_state;
  OnyxStatus* st = axis_input ? const_scalar(n, 2, &axis, &axis_state) : NULL;
  if (!st) st = const_scalar(n, 1, &len, &len_state);
  if (st) return st;
  if (axis_state == 0) axis_state = 1; /* absent: the default */
  if (x.rank < 2 || axis_state < 0) return ox_out_set(n, 0, t, NULL);
  if (axis < 0) axis += x.rank;
  if (axis < 0 || axis > x.rank - 2)
    return ox_node_err(n, "axis %lld is out of range for rank %d", (long long)axis, x.rank);
  const bool inverse = ox_attr_i(n, "inverse", 0) != 0, onesided = ox_attr_i(n, "onesided", 0);
  const int64_t d = x.d[axis];
  int64_t L = ONYX_DIM_UNKNOWN;
  if (len_state == 1 && len < 1)
    return ox_node_err(n, "input 'dft_length' is %lld, must be >= 1", (long long)len);
  if (len_state == 1)
    L = len;
  else if (len_state == 0 && d >= 0 && !(inverse && onesided))
    L = d;
  else if (len_state == 0 && d >= 1 && !ox_mul_i64(d - 1, 2, &L))
    return ox_node_err(n, "the onesided inverse length 2 x (%lld - 1) overflows", (long long)d);
  x.d[axis] = L < 0 ? ONYX_DIM_UNKNOWN : !inverse && onesided ? L / 2 + 1 : L;
  x.d[x.rank - 1] = inverse && onesided ? 1 : 2;
  return ox_out_set(n, 0, t, &x);
}

static OnyxStatus* infer_dft17(OxNode* n) {
  return infer_dft_common(n, false);
}

static OnyxStatus* infer_dft20(OxNode* n) {
  return infer_dft_common(n, true);
}

/* --- Rows --------------------------------------------------------------------- */

static const OxFormal f_q19_in[] = {REQ("x", "T1"), REQ("y_scale", "T1"),
                                    OPT("y_zero_point", "T2")};
static const OxFormal f_q19_out[] = {REQ("y", "T2")};
static const OxFormal f_q23_in[] = {REQ("x", "T1"), REQ("y_scale", "T2"),
                                    OPT("y_zero_point", "T3")};
static const OxFormal f_q23_out[] = {REQ("y", "T3")};
static const OxFormal f_dq19_in[] = {REQ("x", "T1"), REQ("x_scale", "T2"),
                                     OPT("x_zero_point", "T1")};
static const OxFormal f_dq19_out[] = {REQ("y", "T2")};
static const OxFormal f_dq23_out[] = {REQ("y", "T3")};

static const OxTypeConstr t_q19[] = {{"T1", M_QX}, {"T2", M_Q8 | M_F8}};
static const OxTypeConstr t_q21[] = {{"T1", M_QX}, {"T2", M_Q16 | M_F8 | M_I4}};
static const OxTypeConstr t_q23[] = {
    {"T1", M_QX}, {"T2", M_QX}, {"T3", M_Q16 | M_F8 | M_I4 | T_(FLOAT4E2M1)}};
static const OxTypeConstr t_q24[] = {
    {"T1", M_QX}, {"T2", M_QX | T_(FLOAT8E8M0)}, {"T3", M_Q16 | M_F8 | M_I4 | T_(FLOAT4E2M1)}};
static const OxTypeConstr t_q25[] = {{"T1", M_QX},
                                     {"T2", M_QX | T_(FLOAT8E8M0)},
                                     {"T3", M_Q16 | M_F8 | M_I4 | T_(FLOAT4E2M1) | M_I2}};
static const OxTypeConstr t_dq19[] = {{"T1", M_Q8 | T_(INT32) | M_F8}, {"T2", M_QS}};
static const OxTypeConstr t_dq21[] = {{"T1", M_Q16 | T_(INT32) | M_F8 | M_I4}, {"T2", M_QS}};
static const OxTypeConstr t_dq23[] = {
    {"T1", M_Q16 | T_(INT32) | M_F8 | M_I4 | T_(FLOAT4E2M1)}, {"T2", M_QS}, {"T3", M_QS}};
static const OxTypeConstr t_dq24[] = {{"T1", M_Q16 | T_(INT32) | M_F8 | M_I4 | T_(FLOAT4E2M1)},
                                      {"T2", M_QS | T_(FLOAT8E8M0)},
                                      {"T3", M_QS}};
static const OxTypeConstr t_dq25[] = {
    {"T1", M_Q16 | T_(INT32) | M_F8 | M_I4 | T_(FLOAT4E2M1) | M_I2},
    {"T2", M_QS | T_(FLOAT8E8M0)},
    {"T3", M_QS}};

static const OxAttrSpec a_q19[] = {AI("axis", 1), AI("saturate", 1)};
static const OxAttrSpec a_q21[] = {AI("axis", 1), AI("block_size", 0), AI("output_dtype", 0),
                                   AI("saturate", 1)};
static const OxAttrSpec a_q23[] = {AI("axis", 1), AI("block_size", 0), AI("output_dtype", 0),
                                   AI("precision", 0), AI("saturate", 1)};
static const OxAttrSpec a_dq19[] = {AI("axis", 1)};
static const OxAttrSpec a_dq21[] = {AI("axis", 1), AI("block_size", 0)};
static const OxAttrSpec a_dq23[] = {AI("axis", 1), AI("block_size", 0), AI("output_dtype", 0)};

static const OxFormal f_dft20_in[] = {REQ("input", "T1"), OPT("dft_length", "T2"),
                                      OPT("axis", "tensor(int64)")};
static const OxFormal f_dft20_out[] = {REQ("output", "T1")};
static const OxTypeConstr t_dft20[] = {{"T1", M_FB}, {"T2", T_(INT32) | T_(INT64)}};
static const OxAttrSpec a_dft20[] = {AI("inverse", 0), AI("onesided", 0)};

static const OxFormal f_qlmm_in[] = {
    REQ("a", "T1"),       REQ("a_scale", "TS"),     REQ("a_zero_point", "T1"),
    REQ("b", "T2"),       REQ("b_scale", "TS"),     REQ("b_zero_point", "T2"),
    REQ("y_scale", "TS"), REQ("y_zero_point", "T3")};
static const OxFormal f_qlmm_out[] = {REQ("y", "T3")};
static const OxTypeConstr t_qlmm21[] = {
    {"TS", M_QS}, {"T1", M_Q8 | M_F8}, {"T2", M_Q8 | M_F8}, {"T3", M_Q8 | M_F8}};

static const OxFormal f_out_T[] = {REQ("output", "T")};
static const OxFormal f_in_T1[] = {REQ("input", "T1")};
static const OxFormal f_out_T2[] = {REQ("output", "T2")};
static const OxTypeConstr t_rand22[] = {{"T", M_FB}};
static const OxTypeConstr t_randlike22[] = {{"T1", M_ALL4}, {"T2", M_FB}};
static const OxTypeConstr t_multinomial22[] = {{"T1", M_FB}, {"T2", T_(INT32) | T_(INT64)}};
static const OxTypeConstr t_bernoulli22[] = {
    {"T1", M_FB}, {"T2", M_F | M_SINT | M_UINT | T_(BOOL) | T_(BFLOAT16)}};
static const OxAttrSpec a_runiform22[] = {AI("dtype", ONYX_ELEM_FLOAT32), AF("high", 1.0f),
                                          AF("low", 0.0f), AO("seed", FLOAT), AR("shape", INTS)};
static const OxAttrSpec a_rnormal22[] = {AI("dtype", ONYX_ELEM_FLOAT32), AF("mean", 0.0f),
                                         AF("scale", 1.0f), AO("seed", FLOAT), AR("shape", INTS)};
static const OxAttrSpec a_runiformlike22[] = {AO("dtype", INT), AF("high", 1.0f), AF("low", 0.0f),
                                              AO("seed", FLOAT)};
static const OxAttrSpec a_rnormallike22[] = {AO("dtype", INT), AF("mean", 0.0f), AF("scale", 1.0f),
                                             AO("seed", FLOAT)};
static const OxAttrSpec a_multinomial22[] = {AI("dtype", ONYX_ELEM_INT32), AI("sample_size", 1),
                                             AO("seed", FLOAT)};
static const OxAttrSpec a_bernoulli22[] = {AO("dtype", INT), AO("seed", FLOAT)};

/* --- channels-last quantized ops (the qdq fusion's layout, host/optimizer/opt_qdq.c)
 * -------------- com.onyx QLinearConv: ai.onnx QLinearConv's inputs and attributes with X and Y
 * channels-last, [N, spatial..., C] (channels_last must be 1), explicit pads only (auto_pad
 * NOTSET). com.microsoft NhwcMaxPool: MaxPool on channels-last int8 / uint8, as ONNX Runtime's
 * contrib op (no Indices). Both: the output's spatial dims are floor((in + pads - ((k - 1) d + 1))
 * / s) + 1 (ceil for NhwcMaxPool's ceil_mode, a last window starting in the end pad dropped),
 * checked. */

/* Output dim i of a window over `in` (ONYX_DIM_UNKNOWN stays unknown). */
static OnyxStatus* nhwc_window(OxNode* n, int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0,
                               int64_t p1, bool ceil_mode, size_t i, int64_t* out) {
  if (k < 1 || s < 1 || d < 1 || p0 < 0 || p1 < 0)
    return ox_node_err(n,
                       "spatial dim %zu: kernel %lld, stride %lld, dilation %lld and pads "
                       "%lld, %lld must be positive (pads >= 0)",
                       i, (long long)k, (long long)s, (long long)d, (long long)p0, (long long)p1);
  if (in < 0) {
    *out = ONYX_DIM_UNKNOWN;
    return NULL;
  }
  int64_t ext, span;
  if (!ox_dilated_extent(k, d, &ext) || !ox_add3_i64(in, p0, p1, &span))
    return ox_node_err(n, "spatial dim %zu: the window's size overflows int64", i);
  if (span < ext)
    return ox_node_err(n,
                       "spatial dim %zu: the window (%lld) is larger than the padded input "
                       "(%lld)",
                       i, (long long)ext, (long long)span);
  int64_t o = (ceil_mode ? ox_ceil_div_i64(span - ext, s) : (span - ext) / s) + 1;
  int64_t start;
  if (ceil_mode && (!ox_mul_i64(o - 1, s, &start) || start >= in + p0)) o--;
  *out = o;
  return NULL;
}

/* X [N, spatial..., C] (rank r >= 3), kernel of r - 2 dims, output
 * [N, out..., c_out]. */
static OnyxStatus* nhwc_shape(OxNode* n, const OxDims* x, const int64_t* kernel, size_t nk,
                              int64_t c_out, bool ceil_mode, OxDims* y) {
  const size_t ns = (size_t)x->rank - 2;
  if (nk != ns)
    return ox_node_err(n, "kernel_shape has %zu values for an input of rank %d", nk, (int)x->rank);
  size_t count;
  const int64_t* st = ox_attr_ints(n, "strides", &count);
  if (st && count != ns) return ox_node_err(n, "strides has %zu values, not %zu", count, ns);
  const int64_t* dl = ox_attr_ints(n, "dilations", &count);
  if (dl && count != ns) return ox_node_err(n, "dilations has %zu values, not %zu", count, ns);
  const int64_t* pads = ox_attr_ints(n, "pads", &count);
  if (pads && count != 2 * ns) return ox_node_err(n, "pads has %zu values, not %zu", count, 2 * ns);
  const char* ap = ox_attr_s(n, "auto_pad", "NOTSET");
  if (strcmp(ap, "NOTSET") && strcmp(ap, "VALID"))
    return ox_node_err(n, "auto_pad %s: only NOTSET or VALID (explicit pads)", ap);
  const bool valid = !strcmp(ap, "VALID");
  y->rank = x->rank;
  y->d[0] = x->d[0];
  y->d[x->rank - 1] = c_out;
  for (size_t i = 0; i < ns; i++)
    OX_TRY(nhwc_window(n, x->d[i + 1], kernel[i], st ? st[i] : 1, dl ? dl[i] : 1,
                       pads && !valid ? pads[i] : 0, pads && !valid ? pads[i + ns] : 0, ceil_mode,
                       i, &y->d[i + 1]));
  return NULL;
}

static OnyxStatus* infer_qlinear_conv_nhwc(OxNode* n) {
  if (ox_attr_i(n, "channels_last", 0) != 1)
    return ox_node_err(n, "com.onyx QLinearConv needs channels_last = 1");
  const OnyxElemType t = ox_in_type(n, 7);
  OxDims x, w, y;
  ox_in_dims(n, 0, &x);
  ox_in_dims(n, 3, &w);
  if (x.rank >= 0 && x.rank < 3) return ox_node_err(n, "x must have rank >= 3, not %d", x.rank);
  if (x.rank >= 0 && w.rank >= 0 && w.rank != x.rank)
    return ox_node_err(n, "x (rank %d) and w (rank %d) must have the same rank", x.rank, w.rank);
  const int64_t group = ox_attr_i(n, "group", 1);
  if (group != 1)
    return ox_node_err(n, "channels-last QLinearConv needs group 1, not %lld", (long long)group);
  if (x.rank < 0 || w.rank < 0) return ox_out_set(n, 0, t, NULL);
  if (x.d[x.rank - 1] >= 0 && w.d[1] >= 0 && x.d[x.rank - 1] != w.d[1])
    return ox_node_err(n, "x has %lld channels but w expects %lld", (long long)x.d[x.rank - 1],
                       (long long)w.d[1]);
  int64_t kernel[OX_INFER_MAX_RANK];
  size_t nk = 0;
  const int64_t* ks = ox_attr_ints(n, "kernel_shape", &nk);
  if (!ks) {
    nk = (size_t)w.rank - 2;
    for (size_t i = 0; i < nk; i++) {
      if (w.d[i + 2] < 0) return ox_out_set(n, 0, t, NULL);
      kernel[i] = w.d[i + 2];
    }
    ks = kernel;
  }
  OX_TRY(nhwc_shape(n, &x, ks, nk, w.d[0], false, &y));
  return ox_out_set(n, 0, t, &y);
}

static OnyxStatus* infer_nhwc_maxpool(OxNode* n) {
  OxDims x, y;
  ox_in_dims(n, 0, &x);
  if (x.rank >= 0 && x.rank < 3) return ox_node_err(n, "x must have rank >= 3, not %d", x.rank);
  size_t nk = 0;
  const int64_t* ks = ox_attr_ints(n, "kernel_shape", &nk);
  if (!ks) return ox_node_err(n, "kernel_shape is required");
  if (x.rank < 0) return ox_out_set(n, 0, ox_in_type(n, 0), NULL);
  OX_TRY(nhwc_shape(n, &x, ks, nk, x.d[x.rank - 1], ox_attr_i(n, "ceil_mode", 0) != 0, &y));
  return ox_out_set(n, 0, ox_in_type(n, 0), &y);
}

static const OxFormal f_qconv_nhwc_in[] = {
    {"x", "T1", ONYX_PARAM_SINGLE, 1},
    {"x_scale", "tensor(float)", ONYX_PARAM_SINGLE, 1},
    {"x_zero_point", "T1", ONYX_PARAM_SINGLE, 1},
    {"w", "T2", ONYX_PARAM_SINGLE, 1},
    {"w_scale", "tensor(float)", ONYX_PARAM_SINGLE, 1},
    {"w_zero_point", "T2", ONYX_PARAM_SINGLE, 1},
    {"y_scale", "tensor(float)", ONYX_PARAM_SINGLE, 1},
    {"y_zero_point", "T3", ONYX_PARAM_SINGLE, 1},
    {"B", "T4", ONYX_PARAM_OPTIONAL, 1},
};
static const OxFormal f_qconv_nhwc_out[] = {{"y", "T3", ONYX_PARAM_SINGLE, 1}};
static const OxTypeConstr t_qconv_nhwc[] = {
    {"T1", M_Q8}, {"T2", M_Q8}, {"T3", M_Q8}, {"T4", T_(INT32)}};
static const OxAttrSpec a_qconv_nhwc[] = {
    {.name = "auto_pad", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "NOTSET"},
    {.name = "channels_last", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "dilations", .type = ONYX_ATTR_INTS},
    {.name = "group", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 1},
    {.name = "kernel_shape", .type = ONYX_ATTR_INTS},
    {.name = "pads", .type = ONYX_ATTR_INTS},
    {.name = "strides", .type = ONYX_ATTR_INTS},
};
static const OxFormal f_nhwc_mp_in[] = {{"x", "T", ONYX_PARAM_SINGLE, 1}};
static const OxFormal f_nhwc_mp_out[] = {{"y", "T", ONYX_PARAM_SINGLE, 1}};
static const OxTypeConstr t_nhwc_mp[] = {{"T", M_Q8}};
static const OxAttrSpec a_nhwc_mp[] = {
    {.name = "auto_pad", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "NOTSET"},
    {.name = "ceil_mode", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "dilations", .type = ONYX_ATTR_INTS},
    {.name = "kernel_shape", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "pads", .type = ONYX_ATTR_INTS},
    {.name = "storage_order", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "strides", .type = ONYX_ATTR_INTS},
};

static const OxSchema quant_rows[] = {
    {"com.onyx", "QLinearConv", 1, L(f_qconv_nhwc_in), L(f_qconv_nhwc_out), L(t_qconv_nhwc),
     L(a_qconv_nhwc), infer_qlinear_conv_nhwc, NULL, NULL, true},
    {"com.microsoft", "NhwcMaxPool", 1, L(f_nhwc_mp_in), L(f_nhwc_mp_out), L(t_nhwc_mp),
     L(a_nhwc_mp), infer_nhwc_maxpool, NULL, NULL, true},
    S("QuantizeLinear", 19, L(f_q19_in), L(f_q19_out), L(t_q19), L(a_q19), infer_quantize),
    S("QuantizeLinear", 21, L(f_q19_in), L(f_q19_out), L(t_q21), L(a_q21), infer_quantize),
    S("QuantizeLinear", 23, L(f_q23_in), L(f_q23_out), L(t_q23), L(a_q23), infer_quantize),
    S("QuantizeLinear", 24, L(f_q23_in), L(f_q23_out), L(t_q24), L(a_q23), infer_quantize),
    S("QuantizeLinear", 25, L(f_q23_in), L(f_q23_out), L(t_q25), L(a_q23), infer_quantize),
    S("DequantizeLinear", 19, L(f_dq19_in), L(f_dq19_out), L(t_dq19), L(a_dq19), infer_dequantize),
    S("DequantizeLinear", 21, L(f_dq19_in), L(f_dq19_out), L(t_dq21), L(a_dq21), infer_dequantize),
    S("DequantizeLinear", 23, L(f_dq19_in), L(f_dq23_out), L(t_dq23), L(a_dq23), infer_dequantize),
    S("DequantizeLinear", 24, L(f_dq19_in), L(f_dq23_out), L(t_dq24), L(a_dq23), infer_dequantize),
    S("DequantizeLinear", 25, L(f_dq19_in), L(f_dq23_out), L(t_dq25), L(a_dq23), infer_dequantize),
    S("QLinearMatMul", 21, L(f_qlmm_in), L(f_qlmm_out), L(t_qlmm21), NONE, NULL),
    S("DFT", 20, L(f_dft20_in), L(f_dft20_out), L(t_dft20), L(a_dft20), infer_dft20),
    S("RandomUniform", 22, NONE, L(f_out_T), L(t_rand22), L(a_runiform22), infer_random),
    S("RandomNormal", 22, NONE, L(f_out_T), L(t_rand22), L(a_rnormal22), infer_random),
    S("RandomUniformLike", 22, L(f_in_T1), L(f_out_T2), L(t_randlike22), L(a_runiformlike22),
      infer_like),
    S("RandomNormalLike", 22, L(f_in_T1), L(f_out_T2), L(t_randlike22), L(a_rnormallike22),
      infer_like),
    S("Multinomial", 22, L(f_in_T1), L(f_out_T2), L(t_multinomial22), L(a_multinomial22),
      infer_multinomial),
    S("Bernoulli", 22, L(f_in_T1), L(f_out_T2), L(t_bernoulli22), L(a_bernoulli22), infer_like),
};

static const OxInferOverride quant_overrides[] = {
    {"", "QuantizeLinear", 10, 17, infer_quantize},
    {"", "DequantizeLinear", 10, 17, infer_dequantize},
    {"", "DynamicQuantizeLinear", 11, 17, infer_dynamic_quantize},
    {"", "DFT", 17, 17, infer_dft17},
    {"", "HannWindow", 17, 17, infer_window},
    {"", "HammingWindow", 17, 17, infer_window},
    {"", "BlackmanWindow", 17, 17, infer_window},
    {"", "MelWeightMatrix", 17, 17, infer_mel},
    {"", "RandomUniform", 1, 17, infer_random},
    {"", "RandomNormal", 1, 17, infer_random},
    {"", "RandomUniformLike", 1, 17, infer_like},
    {"", "RandomNormalLike", 1, 17, infer_like},
    {"", "Multinomial", 7, 17, infer_multinomial},
    {"", "Bernoulli", 15, 17, infer_like},
};

const OxSchemaFamily ox_family_quant = {"quant", quant_rows, OX_ARRAY_LEN(quant_rows),
                                        quant_overrides, OX_ARRAY_LEN(quant_overrides)};
