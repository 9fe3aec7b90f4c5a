/* schemas_misc.c — the misc family: attention ops (opset 23/24), string and
 * ai.onnx.ml ops. Rows for ops newer than the generated table (opset 17). */
#include "infer_util.h"
#include "schema_internal.h"

#define T_(x)    OX_T(ONYX_ELEM_##x)
#define M_FLOATS (T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64) | T_(BFLOAT16))
#define M_NUMERIC                                                                                  \
  (M_FLOATS | T_(INT8) | T_(INT16) | T_(INT32) | T_(INT64) | T_(UINT8) | T_(UINT16) | T_(UINT32) | \
   T_(UINT64))

/* --- Attention (23, 24) -------------------------------------------------------------------- */
static const OxFormal attn23_in[] = {
    {"Q", "T1", ONYX_PARAM_SINGLE, 1},          {"K", "T1", ONYX_PARAM_SINGLE, 1},
    {"V", "T2", ONYX_PARAM_SINGLE, 1},          {"attn_mask", "U", ONYX_PARAM_OPTIONAL, 1},
    {"past_key", "T1", ONYX_PARAM_OPTIONAL, 1}, {"past_value", "T2", ONYX_PARAM_OPTIONAL, 1},
};
static const OxFormal attn24_in[] = {
    {"Q", "T1", ONYX_PARAM_SINGLE, 1},
    {"K", "T1", ONYX_PARAM_SINGLE, 1},
    {"V", "T2", ONYX_PARAM_SINGLE, 1},
    {"attn_mask", "U", ONYX_PARAM_OPTIONAL, 1},
    {"past_key", "T1", ONYX_PARAM_OPTIONAL, 1},
    {"past_value", "T2", ONYX_PARAM_OPTIONAL, 1},
    {"nonpad_kv_seqlen", "tensor(int64)", ONYX_PARAM_OPTIONAL, 1},
};
static const OxFormal attn_out[] = {
    {"Y", "T1", ONYX_PARAM_SINGLE, 1},
    {"present_key", "T1", ONYX_PARAM_OPTIONAL, 1},
    {"present_value", "T2", ONYX_PARAM_OPTIONAL, 1},
    {"qk_matmul_output", "T1", ONYX_PARAM_OPTIONAL, 1},
};
static const OxTypeConstr attn_tc[] = {
    {"T1", M_FLOATS},
    {"T2", M_FLOATS},
    {"U", M_NUMERIC | T_(BOOL)},
};
static const OxAttrSpec attn_attrs[] = {
    {.name = "is_causal", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "kv_num_heads", .type = ONYX_ATTR_INT},
    {.name = "q_num_heads", .type = ONYX_ATTR_INT},
    {.name = "qk_matmul_output_mode", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "scale", .type = ONYX_ATTR_FLOAT},
    {.name = "softcap", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 0.0f},
    {.name = "softmax_precision", .type = ONYX_ATTR_INT},
};

/* --- RotaryEmbedding (23) -----------------------------------------------------------------------
 */
static const OxFormal rope_in[] = {
    {"X", "T", ONYX_PARAM_SINGLE, 1},
    {"cos_cache", "T", ONYX_PARAM_SINGLE, 1},
    {"sin_cache", "T", ONYX_PARAM_SINGLE, 1},
    {"position_ids", "M", ONYX_PARAM_OPTIONAL, 1},
};
static const OxFormal rope_out[] = {{"Y", "T", ONYX_PARAM_SINGLE, 1}};
static const OxTypeConstr rope_tc[] = {
    {"T", T_(FLOAT16) | T_(FLOAT32) | T_(BFLOAT16)},
    {"M", T_(INT64)},
};
static const OxAttrSpec rope_attrs[] = {
    {.name = "interleaved", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "num_heads", .type = ONYX_ATTR_INT},
    {.name = "rotary_embedding_dim", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
};

#define ROW(op, ver, in, out, tc, at)                                                              \
  {                                                                                                \
    "", op, ver, in, OX_ARRAY_LEN(in), out, OX_ARRAY_LEN(out), tc, OX_ARRAY_LEN(tc), at,           \
        OX_ARRAY_LEN(at), NULL, NULL, NULL, true                                                   \
  }

static const OxSchema misc_rows[] = {
    ROW("Attention", 23, attn23_in, attn_out, attn_tc, attn_attrs),
    ROW("Attention", 24, attn24_in, attn_out, attn_tc, attn_attrs),
    ROW("RotaryEmbedding", 23, rope_in, rope_out, rope_tc, rope_attrs),
};

const OxSchemaFamily ox_family_misc = {"misc", misc_rows, OX_ARRAY_LEN(misc_rows), NULL, 0};
