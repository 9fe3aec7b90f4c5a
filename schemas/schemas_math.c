/* schemas_math.c — the math family: rows newer than the generated table (or that
 * replace generated rows) and inference functions for generated rows.
 *
 * Rows follow the ONNX Changelog: ops introduced after opset 17 (Bitwise*,
 * Gelu, Mish, Swish, BitCast), CastLike's versions that added `saturate`
 * and new element types, IsNaN/IsInf-20 (float16/bfloat16/float8) and
 * Celu-28 (more float types). */
#include "infer_util.h"
#include "schema_internal.h"

#define T_(x)  OX_T(ONYX_ELEM_##x)
#define M_F    (T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64))
#define M_FB   (M_F | T_(BFLOAT16))
#define M_SINT (T_(INT8) | T_(INT16) | T_(INT32) | T_(INT64))
#define M_UINT (T_(UINT8) | T_(UINT16) | T_(UINT32) | T_(UINT64))
#define M_F8   (T_(FLOAT8E4M3FN) | T_(FLOAT8E4M3FNUZ) | T_(FLOAT8E5M2) | T_(FLOAT8E5M2FNUZ))
#define M_I4   (T_(UINT4) | T_(INT4))
#define M_I2   (T_(UINT2) | T_(INT2))
/* Cast's lists: every non-complex type of the time. */
#define M_CAST13 (M_F | M_SINT | M_UINT | T_(BOOL) | T_(STRING) | T_(BFLOAT16))
#define M_CAST19 (M_CAST13 | M_F8)
#define M_CAST21 (M_CAST19 | M_I4)
#define M_CAST23 (M_CAST21 | T_(FLOAT4E2M1))
#define M_CAST24 (M_CAST23 | T_(FLOAT8E8M0))
#define M_CAST25 (M_CAST24 | M_I2)
/* BitCast: every fixed-size type (no strings, no packed sub-byte types). */
#define M_BITCAST                                                                                  \
  (M_FB | M_SINT | M_UINT | T_(BOOL) | M_F8 | T_(FLOAT8E8M0) | T_(COMPLEX64) | T_(COMPLEX128))

#define REQ(n, tc)                                                                                 \
  { n, tc, ONYX_PARAM_SINGLE, 1 }
#define AI(n, d)                                                                                   \
  { .name = n, .type = ONYX_ATTR_INT, .has_default = true, .def_i = (d) }
#define AF(n, d)                                                                                   \
  { .name = n, .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = (d) }
#define AS(n, d)                                                                                   \
  { .name = n, .type = ONYX_ATTR_STRING, .has_default = true, .def_s = (d) }
#define AR(n, t)                                                                                   \
  { .name = n, .type = ONYX_ATTR_##t, .required = true }
#define L(a) a, (uint8_t)OX_ARRAY_LEN(a)
#define NONE NULL, 0
#define S(op, ver, ...)                                                                            \
  { "", op, ver, __VA_ARGS__, NULL, NULL, true }

static const OxFormal f_X[] = {REQ("X", "T")};
static const OxFormal f_Y[] = {REQ("Y", "T")};
static const OxFormal f_AB[] = {REQ("A", "T"), REQ("B", "T")};
static const OxFormal f_C[] = {REQ("C", "T")};
static const OxFormal f_in_t1[] = {REQ("X", "T1")};
static const OxFormal f_out_t2[] = {REQ("Y", "T2")};
static const OxFormal f_castlike_in[] = {REQ("input", "T1"), REQ("target_type", "T2")};
static const OxFormal f_castlike_out[] = {REQ("output", "T2")};
static const OxFormal f_bitcast_in[] = {REQ("input", "T1")};
static const OxFormal f_bitcast_out[] = {REQ("output", "T2")};

static const OxTypeConstr t_F[] = {{"T", M_F}};
static const OxTypeConstr t_FB[] = {{"T", M_FB}};
static const OxTypeConstr t_INT[] = {{"T", M_SINT | M_UINT}};
static const OxTypeConstr t_isx20[] = {{"T1", M_FB | M_F8}, {"T2", T_(BOOL)}};
static const OxTypeConstr t_castlike19[] = {{"T1", M_CAST19}, {"T2", M_CAST19}};
static const OxTypeConstr t_castlike21[] = {{"T1", M_CAST21}, {"T2", M_CAST21}};
static const OxTypeConstr t_castlike23[] = {{"T1", M_CAST23}, {"T2", M_CAST23}};
static const OxTypeConstr t_castlike24[] = {{"T1", M_CAST24}, {"T2", M_CAST24}};
static const OxTypeConstr t_castlike25[] = {{"T1", M_CAST25}, {"T2", M_CAST25}};
static const OxTypeConstr t_bitcast[] = {{"T1", M_BITCAST}, {"T2", M_BITCAST}};

static const OxAttrSpec a_alpha1[] = {AF("alpha", 1.0f)};
static const OxAttrSpec a_gelu[] = {AS("approximate", "none")};
static const OxAttrSpec a_isinf[] = {AI("detect_negative", 1), AI("detect_positive", 1)};
static const OxAttrSpec a_sat[] = {AI("saturate", 1)};
static const OxAttrSpec a_sat24[] = {AS("round_mode", "up"), AI("saturate", 1)};
static const OxAttrSpec a_to[] = {AR("to", INT)};

/* BitCast: the output type is `to`, the shape the input's (same bit width). */
static OnyxStatus* infer_bitcast(OxNode* n) {
  return ox_infer_cast(n);
}

static const OxAttrSpec a_elu[] = {AF("alpha", 1.0f)};
static const OxAttrSpec a_selu[] = {AF("alpha", 1.67326319217681884765625f),
                                    AF("gamma", 1.05070102214813232421875f)};
static const OxAttrSpec a_hardsigmoid[] = {AF("alpha", 0.2f), AF("beta", 0.5f)};

/* Opset 22 added bfloat16 to these (the attributes are unchanged). */
#define R22(op, attrs) S(op, 22, L(f_X), L(f_Y), L(t_FB), attrs, ox_infer_unary)
#define R22N(op)       S(op, 22, L(f_X), L(f_Y), L(t_FB), NONE, ox_infer_unary)

static const OxSchema math_rows[] = {
    R22N("Acos"),
    R22N("Acosh"),
    R22N("Asin"),
    R22N("Asinh"),
    R22N("Atan"),
    R22N("Atanh"),
    R22N("Cos"),
    R22N("Cosh"),
    R22N("Sin"),
    R22N("Sinh"),
    R22N("Tan"),
    R22N("Round"),
    R22N("Softplus"),
    R22N("Softsign"),
    R22N("HardSwish"),
    R22(("Elu"), L(a_elu)),
    R22(("ThresholdedRelu"), L(a_elu)),
    R22(("Selu"), L(a_selu)),
    R22(("HardSigmoid"), L(a_hardsigmoid)),
    S("BitwiseAnd", 18, L(f_AB), L(f_C), L(t_INT), NONE, ox_infer_bcast),
    S("BitwiseOr", 18, L(f_AB), L(f_C), L(t_INT), NONE, ox_infer_bcast),
    S("BitwiseXor", 18, L(f_AB), L(f_C), L(t_INT), NONE, ox_infer_bcast),
    S("BitwiseNot", 18, L(f_X), L(f_Y), L(t_INT), NONE, ox_infer_unary),
    S("Gelu", 20, L(f_X), L(f_Y), L(t_FB), L(a_gelu), ox_infer_unary),
    S("Mish", 18, L(f_X), L(f_Y), L(t_F), NONE, ox_infer_unary),
    S("Mish", 22, L(f_X), L(f_Y), L(t_FB), NONE, ox_infer_unary),
    S("Swish", 24, L(f_X), L(f_Y), L(t_FB), L(a_alpha1), ox_infer_unary),
    S("Celu", 28, L(f_X), L(f_Y), L(t_FB), L(a_alpha1), ox_infer_unary),
    S("IsNaN", 20, L(f_in_t1), L(f_out_t2), L(t_isx20), NONE, NULL),
    S("IsInf", 20, L(f_in_t1), L(f_out_t2), L(t_isx20), L(a_isinf), NULL),
    S("CastLike", 19, L(f_castlike_in), L(f_castlike_out), L(t_castlike19), L(a_sat), NULL),
    S("CastLike", 21, L(f_castlike_in), L(f_castlike_out), L(t_castlike21), L(a_sat), NULL),
    S("CastLike", 23, L(f_castlike_in), L(f_castlike_out), L(t_castlike23), L(a_sat), NULL),
    S("CastLike", 24, L(f_castlike_in), L(f_castlike_out), L(t_castlike24), L(a_sat24), NULL),
    S("CastLike", 25, L(f_castlike_in), L(f_castlike_out), L(t_castlike25), L(a_sat24), NULL),
    S("BitCast", 26, L(f_bitcast_in), L(f_bitcast_out), L(t_bitcast), L(a_to), infer_bitcast),
};

const OxSchemaFamily ox_family_math = {"math", math_rows, OX_ARRAY_LEN(math_rows), NULL, 0};
