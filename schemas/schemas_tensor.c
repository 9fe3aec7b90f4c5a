/* schemas_tensor.c — the tensor family: rows newer than the generated table (or that
 * replace generated rows) and inference functions for generated rows.
 *
 * Rows (from the ONNX Changelog): the reductions of opset 18 (axes as an
 * input) and ReduceMax/ReduceMin 20 (bool); Pad 18 (axes input) and 19
 * (wrap mode); CenterCropPad 18; TensorScatter 24; CumProd 26; Range 27
 * (float16/bfloat16). Overrides: EyeLike's output type comes from `dtype`. */
#include "infer_util.h"
#include "schema_internal.h"

#define T_(x)  OX_T(ONYX_ELEM_##x)
#define M_F    (T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64))
#define M_SINT (T_(INT8) | T_(INT16) | T_(INT32) | T_(INT64))
#define M_UINT (T_(UINT8) | T_(UINT16) | T_(UINT32) | T_(UINT64))
#define M_NUM7 (T_(UINT32) | T_(UINT64) | T_(INT32) | T_(INT64) | M_F | T_(BFLOAT16))
#define M_ALL4                                                                                     \
  (M_F | M_SINT | M_UINT | T_(BFLOAT16) | T_(STRING) | T_(BOOL) | T_(COMPLEX64) | T_(COMPLEX128))
#define M_F8       (T_(FLOAT8E4M3FN) | T_(FLOAT8E4M3FNUZ) | T_(FLOAT8E5M2) | T_(FLOAT8E5M2FNUZ))
#define M_ALL      (M_ALL4 | M_F8 | T_(UINT4) | T_(INT4) | T_(FLOAT4E2M1) | T_(FLOAT8E8M0))
#define M_MAXMIN18 (M_NUM7 | T_(INT8) | T_(UINT8))
#define M_IND      (T_(INT32) | T_(INT64))

#define REQ(n, tc)                                                                                 \
  { n, tc, ONYX_PARAM_SINGLE, 1 }
#define OPT(n, tc)                                                                                 \
  { n, tc, ONYX_PARAM_OPTIONAL, 1 }
#define I64 "tensor(int64)"
#define AI(n, d)                                                                                   \
  { .name = n, .type = ONYX_ATTR_INT, .has_default = true, .def_i = (d) }
#define AS(n, d)                                                                                   \
  { .name = n, .type = ONYX_ATTR_STRING, .has_default = true, .def_s = (d) }
#define AO(n, t)                                                                                   \
  { .name = n, .type = ONYX_ATTR_##t }
#define L(a) a, (uint8_t)OX_ARRAY_LEN(a)
#define NONE NULL, 0
#define S(op, ver, ...)                                                                            \
  { "", op, ver, __VA_ARGS__, NULL, NULL, true }

/* --- Reductions (opset 18: axes input) ----------------------------------------- */
static const OxFormal f_red_in[] = {REQ("data", "T"), OPT("axes", I64)};
static const OxFormal f_red_out[] = {REQ("reduced", "T")};
static const OxAttrSpec a_red[] = {AI("keepdims", 1), AI("noop_with_empty_axes", 0)};
static const OxTypeConstr t_num7[] = {{"T", M_NUM7}};
static const OxTypeConstr t_maxmin18[] = {{"T", M_MAXMIN18}};
static const OxTypeConstr t_maxmin20[] = {{"T", M_MAXMIN18 | T_(BOOL)}};

/* --- Pad ----------------------------------------------------------------------------- */
static const OxFormal f_pad18_in[] = {REQ("data", "T"), REQ("pads", I64),
                                      OPT("constant_value", "T"), OPT("axes", "Tind")};
static const OxFormal f_pad_out[] = {REQ("output", "T")};
static const OxTypeConstr t_pad[] = {{"T", M_ALL4}, {"Tind", M_IND}};
static const OxAttrSpec a_pad[] = {AS("mode", "constant")};

/* --- CenterCropPad -------------------------------------------------------------------- */
static const OxFormal f_ccp_in[] = {REQ("input_data", "T"), REQ("shape", "Tind")};
static const OxFormal f_ccp_out[] = {REQ("output_data", "T")};
static const OxTypeConstr t_ccp[] = {{"T", M_ALL4}, {"Tind", M_IND}};
static const OxAttrSpec a_ccp[] = {AO("axes", INTS)};

/* --- TensorScatter ----------------------------------------------------------------- */
static const OxFormal f_ts_in[] = {REQ("past_cache", "T"), REQ("update", "T"),
                                   OPT("write_indices", I64)};
static const OxFormal f_ts_out[] = {REQ("present_cache", "T")};
static const OxTypeConstr t_ts[] = {{"T", M_ALL}};
static const OxAttrSpec a_ts[] = {AI("axis", -2), AS("mode", "linear")};

/* --- CumProd ---------------------------------------------------------------------- */
static const OxFormal f_cum_in[] = {REQ("x", "T"), REQ("axis", "T2")};
static const OxFormal f_cum_out[] = {REQ("y", "T")};
static const OxTypeConstr t_cum[] = {
    {"T", T_(UINT32) | T_(UINT64) | T_(INT32) | T_(INT64) | M_F | T_(BFLOAT16)}, {"T2", M_IND}};
static const OxAttrSpec a_cum[] = {AI("exclusive", 0), AI("reverse", 0)};

/* --- Range ----------------------------------------------------------------------- */
static const OxFormal f_range_in[] = {REQ("start", "T"), REQ("limit", "T"), REQ("delta", "T")};
static const OxFormal f_range_out[] = {REQ("output", "T")};
static const OxTypeConstr t_range[] = {{"T", T_(FLOAT32) | T_(FLOAT64) | T_(INT16) | T_(INT32) |
                                                 T_(INT64) | T_(FLOAT16) | T_(BFLOAT16)}};

#define RED(op, v, tc) S(op, v, L(f_red_in), L(f_red_out), L(tc), L(a_red), ox_infer_reduce)

static const OxSchema tensor_rows[] = {
    RED("ReduceMax", 18, t_maxmin18),
    RED("ReduceMax", 20, t_maxmin20),
    RED("ReduceMin", 18, t_maxmin18),
    RED("ReduceMin", 20, t_maxmin20),
    RED("ReduceL1", 18, t_num7),
    RED("ReduceL2", 18, t_num7),
    RED("ReduceLogSum", 18, t_num7),
    RED("ReduceLogSumExp", 18, t_num7),
    RED("ReduceProd", 18, t_num7),
    RED("ReduceSumSquare", 18, t_num7),
    S("Pad", 18, L(f_pad18_in), L(f_pad_out), L(t_pad), L(a_pad), NULL),
    S("Pad", 19, L(f_pad18_in), L(f_pad_out), L(t_pad), L(a_pad), NULL),
    S("CenterCropPad", 18, L(f_ccp_in), L(f_ccp_out), L(t_ccp), L(a_ccp), NULL),
    S("TensorScatter", 24, L(f_ts_in), L(f_ts_out), L(t_ts), L(a_ts), NULL),
    S("CumProd", 26, L(f_cum_in), L(f_cum_out), L(t_cum), L(a_cum), NULL),
    S("Range", 27, L(f_range_in), L(f_range_out), L(t_range), NONE, NULL),
};

/* EyeLike: `dtype` when given, else the input's type; shape of the input. */
static OnyxStatus* infer_eyelike(OxNode* n) {
  OnyxElemType t = ox_in_type(n, 0);
  if (ox_attr_present(n, "dtype")) t = (OnyxElemType)ox_attr_i(n, "dtype", 0);
  OxDims d;
  ox_in_dims(n, 0, &d);
  return ox_out_set(n, 0, t, d.rank >= 0 ? &d : NULL);
}

static const OxInferOverride tensor_overrides[] = {
    {"", "EyeLike", 1, 17, infer_eyelike},
};

const OxSchemaFamily ox_family_tensor = {"tensor", tensor_rows, OX_ARRAY_LEN(tensor_rows),
                                         tensor_overrides, OX_ARRAY_LEN(tensor_overrides)};
