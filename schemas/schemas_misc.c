/* schemas_misc.c — the misc family: attention ops (opset 23/24), string and
 * ai.onnx.ml ops. Rows for ops newer than the generated table (opset 17). */
#include <string.h>

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

/* --- String ops (20)
 * ------------------------------------------------------------------------------ */
static const OxFormal sconcat_in[] = {{"X", "T", ONYX_PARAM_SINGLE, 1},
                                      {"Y", "T", ONYX_PARAM_SINGLE, 1}};
static const OxFormal sconcat_out[] = {{"Z", "T", ONYX_PARAM_SINGLE, 1}};
static const OxTypeConstr sconcat_tc[] = {{"T", T_(STRING)}};
static const OxFormal ssplit_in[] = {{"X", "T1", ONYX_PARAM_SINGLE, 1}};
static const OxFormal ssplit_out[] = {{"Y", "T2", ONYX_PARAM_SINGLE, 1},
                                      {"Z", "T3", ONYX_PARAM_SINGLE, 1}};
static const OxTypeConstr ssplit_tc[] = {{"T1", T_(STRING)}, {"T2", T_(STRING)}, {"T3", T_(INT64)}};
static const OxAttrSpec ssplit_attrs[] = {
    {.name = "delimiter", .type = ONYX_ATTR_STRING},
    {.name = "maxsplit", .type = ONYX_ATTR_INT},
};
static const OxFormal regex_in[] = {{"X", "T1", ONYX_PARAM_SINGLE, 1}};
static const OxFormal regex_out[] = {{"Y", "T2", ONYX_PARAM_SINGLE, 1}};
static const OxTypeConstr regex_tc[] = {{"T1", T_(STRING)}, {"T2", T_(BOOL)}};
static const OxAttrSpec regex_attrs[] = {{.name = "pattern", .type = ONYX_ATTR_STRING}};

#define ROW(op, ver, in, out, tc, at)                                                              \
  {                                                                                                \
    "", op, ver, in, OX_ARRAY_LEN(in), out, OX_ARRAY_LEN(out), tc, OX_ARRAY_LEN(tc), at,           \
        OX_ARRAY_LEN(at), NULL, NULL, NULL, true                                                   \
  }

/* --- ai.onnx.ml: LabelEncoder (4), TreeEnsemble (5); inference of the v1 ops
 * --------------------------------------- */
#define M_LE (T_(STRING) | T_(INT64) | T_(FLOAT32) | T_(INT32) | T_(INT16) | T_(FLOAT64))
static const OxFormal le_in[] = {{"X", "T1", ONYX_PARAM_SINGLE, 1}};
static const OxFormal le_out[] = {{"Y", "T2", ONYX_PARAM_SINGLE, 1}};
static const OxTypeConstr le_tc[] = {{"T1", M_LE}, {"T2", M_LE}};
static const OxAttrSpec le_attrs[] = {
    {.name = "default_float", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = -0.0f},
    {.name = "default_int64", .type = ONYX_ATTR_INT, .has_default = true, .def_i = -1},
    {.name = "default_string", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "_Unused"},
    {.name = "default_tensor", .type = ONYX_ATTR_TENSOR},
    {.name = "keys_floats", .type = ONYX_ATTR_FLOATS},
    {.name = "keys_int64s", .type = ONYX_ATTR_INTS},
    {.name = "keys_strings", .type = ONYX_ATTR_STRINGS},
    {.name = "keys_tensor", .type = ONYX_ATTR_TENSOR},
    {.name = "values_floats", .type = ONYX_ATTR_FLOATS},
    {.name = "values_int64s", .type = ONYX_ATTR_INTS},
    {.name = "values_strings", .type = ONYX_ATTR_STRINGS},
    {.name = "values_tensor", .type = ONYX_ATTR_TENSOR},
};
static const OxFormal te_in[] = {{"X", "T", ONYX_PARAM_SINGLE, 1}};
static const OxFormal te_out[] = {{"Y", "T", ONYX_PARAM_SINGLE, 1}};
static const OxTypeConstr te_tc[] = {{"T", T_(FLOAT32) | T_(FLOAT64) | T_(FLOAT16)}};
static const OxAttrSpec te_attrs[] = {
    {.name = "aggregate_function", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 1},
    {.name = "leaf_targetids", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "leaf_weights", .type = ONYX_ATTR_TENSOR, .required = true},
    {.name = "membership_values", .type = ONYX_ATTR_TENSOR},
    {.name = "n_targets", .type = ONYX_ATTR_INT},
    {.name = "nodes_falseleafs", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "nodes_falsenodeids", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "nodes_featureids", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "nodes_hitrates", .type = ONYX_ATTR_TENSOR},
    {.name = "nodes_missing_value_tracks_true", .type = ONYX_ATTR_INTS},
    {.name = "nodes_modes", .type = ONYX_ATTR_TENSOR, .required = true},
    {.name = "nodes_splits", .type = ONYX_ATTR_TENSOR, .required = true},
    {.name = "nodes_trueleafs", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "nodes_truenodeids", .type = ONYX_ATTR_INTS, .required = true},
    {.name = "post_transform", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "tree_roots", .type = ONYX_ATTR_INTS, .required = true},
};

/* LabelEncoder's output type comes from its values attribute (version 1:
 * the other of string and int64). */
static OnyxStatus* infer_label_encoder(OxNode* n) {
  OnyxElemType t = ONYX_ELEM_UNDEFINED;
  for (size_t i = 0; i < n->n_attrs && t == ONYX_ELEM_UNDEFINED; i++) {
    const OxAttr* a = &n->attrs[i];
    if (a->from_default) continue;
    if (!strcmp(a->name, "values_tensor") && a->t) t = a->t->type;
    if (!strcmp(a->name, "values_strings")) t = ONYX_ELEM_STRING;
    if (!strcmp(a->name, "values_int64s")) t = ONYX_ELEM_INT64;
    if (!strcmp(a->name, "values_floats")) t = ONYX_ELEM_FLOAT32;
  }
  if (t == ONYX_ELEM_UNDEFINED && ox_attr_present(n, "classes_strings"))
    t = ox_in_type(n, 0) == ONYX_ELEM_STRING ? ONYX_ELEM_INT64 : ONYX_ELEM_STRING;
  if (t == ONYX_ELEM_UNDEFINED) return ox_node_err(n, "needs a values_* attribute");
  OxDims d;
  ox_in_dims(n, 0, &d);
  return ox_out_set(n, 0, t, &d);
}

/* The element count of a list attribute the model gives (0 when absent). */
static size_t ml_attr_count(const OxNode* n, const char* name) {
  const OxAttr* a = ox_node_attr(n, name);
  return a && !a->from_default ? a->count : 0;
}

/* X's batch: N of [N, F], 1 of [F]; unknown otherwise. */
static int64_t ml_batch(const OxNode* n) {
  OxDims d;
  ox_in_dims(n, 0, &d);
  return d.rank == 2 ? d.d[0] : d.rank == 1 ? 1 : ONYX_DIM_UNKNOWN;
}

/* LinearClassifier, SVMClassifier: Y [N] of the labels' type (string with
 * classlabels_strings, else int64), Z [N, scores] float. LinearClassifier's
 * score count is its class count (intercepts, else labels), 2 for one
 * class with two labels; SVMClassifier's depends on its mode and is left
 * unknown. */
static OnyxStatus* infer_ml_classifier(OxNode* n) {
  OnyxElemType lt = ml_attr_count(n, "classlabels_strings") ? ONYX_ELEM_STRING : ONYX_ELEM_INT64;
  int64_t b = ml_batch(n);
  OxDims y = {1, {b}}, z = {2, {b, ONYX_DIM_UNKNOWN}};
  if (!strcmp(n->op_type, "LinearClassifier")) {
    size_t labels = ml_attr_count(n, "classlabels_strings") + ml_attr_count(n, "classlabels_ints");
    size_t c = ml_attr_count(n, "intercepts");
    if (!c) c = labels;
    if (c == 1 && labels == 2) c = 2;
    if (c) z.d[1] = (int64_t)c;
  }
  OnyxStatus* st = ox_out_set(n, 0, lt, &y);
  return st ? st : ox_out_set(n, 1, ONYX_ELEM_FLOAT32, &z);
}

/* LinearRegressor: [N, targets]; SVMRegressor: [N, 1]; float. */
static OnyxStatus* infer_ml_regressor(OxNode* n) {
  int64_t t = strcmp(n->op_type, "LinearRegressor") ? 1 : ox_attr_i(n, "targets", 1);
  OxDims y = {2, {ml_batch(n), t > 0 ? t : ONYX_DIM_UNKNOWN}};
  return ox_out_set(n, 0, ONYX_ELEM_FLOAT32, &y);
}

/* Scaler, Normalizer: X's shape, float. */
static OnyxStatus* infer_ml_float_like(OxNode* n) {
  OxDims d;
  ox_in_dims(n, 0, &d);
  return ox_out_set(n, 0, ONYX_ELEM_FLOAT32, &d);
}

/* OneHotEncoder: X's shape + [categories], float. */
static OnyxStatus* infer_ml_onehot(OxNode* n) {
  OxDims d;
  ox_in_dims(n, 0, &d);
  size_t c = ml_attr_count(n, "cats_int64s") + ml_attr_count(n, "cats_strings");
  if (d.rank >= 0 && d.rank < OX_INFER_MAX_RANK)
    d.d[d.rank++] = c ? (int64_t)c : ONYX_DIM_UNKNOWN;
  else
    d.rank = -1;
  return ox_out_set(n, 0, ONYX_ELEM_FLOAT32, &d);
}

/* CategoryMapper: string to int64, int64 to string; X's shape. */
static OnyxStatus* infer_ml_category_mapper(OxNode* n) {
  OxDims d;
  ox_in_dims(n, 0, &d);
  OnyxElemType t = ox_in_type(n, 0) == ONYX_ELEM_STRING ? ONYX_ELEM_INT64 : ONYX_ELEM_STRING;
  return ox_out_set(n, 0, t, &d);
}

/* FeatureVectorizer: [N, sum of inputdimensions], float. */
static OnyxStatus* infer_ml_feature_vectorizer(OxNode* n) {
  size_t k = 0;
  const int64_t* dims = ox_attr_ints(n, "inputdimensions", &k);
  int64_t total = 0;
  for (size_t i = 0; dims && i < k; i++)
    if (dims[i] < 0 || !ox_add_i64(total, dims[i], &total))
      return ox_node_err(n, "inputdimensions[%zu] = %lld is invalid", i, (long long)dims[i]);
  OxDims y = {2, {ml_batch(n), dims && k ? total : ONYX_DIM_UNKNOWN}};
  return ox_out_set(n, 0, ONYX_ELEM_FLOAT32, &y);
}

/* TreeEnsembleClassifier (1, 3): Y [N] of int64 or string (whichever
 * classlabels_* list is given), Z float [N, classes]. TreeEnsembleRegressor
 * (1, 3): Y float [N, n_targets]. X is [N, F] or one row [F]. */
static int64_t infer_tree_rows(const OxNode* n) {
  OxDims x;
  ox_in_dims(n, 0, &x);
  if (x.rank == 1) return 1;
  return x.rank == 2 ? x.d[0] : ONYX_DIM_UNKNOWN;
}

static OnyxStatus* infer_tree_classifier(OxNode* n) {
  const OxAttr* s = ox_node_attr(n, "classlabels_strings");
  const OxAttr* i = ox_node_attr(n, "classlabels_int64s");
  size_t ns = s && !s->from_default ? s->count : 0;
  size_t ni = i && !i->from_default ? i->count : 0;
  if ((ns > 0) == (ni > 0))
    return ox_node_err(n,
                       "exactly one of classlabels_int64s and classlabels_strings must be given");
  OxDims y = {1, {infer_tree_rows(n)}};
  OxDims z = {2, {infer_tree_rows(n), (int64_t)(ns + ni)}};
  OnyxStatus* st = ox_out_set(n, 0, ns ? ONYX_ELEM_STRING : ONYX_ELEM_INT64, &y);
  return st ? st : ox_out_set(n, 1, ONYX_ELEM_FLOAT32, &z);
}

static OnyxStatus* infer_tree_regressor(OxNode* n) {
  int64_t t = ox_attr_i(n, "n_targets", 1);
  OxDims y = {2, {infer_tree_rows(n), t >= 1 ? t : ONYX_DIM_UNKNOWN}};
  return ox_out_set(n, 0, ONYX_ELEM_FLOAT32, &y);
}

static const OxInferOverride misc_overrides[] = {
    {"ai.onnx.ml", "LabelEncoder", 1, 4, infer_label_encoder},
    {"ai.onnx.ml", "LinearClassifier", 1, 1, infer_ml_classifier},
    {"ai.onnx.ml", "SVMClassifier", 1, 1, infer_ml_classifier},
    {"ai.onnx.ml", "LinearRegressor", 1, 1, infer_ml_regressor},
    {"ai.onnx.ml", "SVMRegressor", 1, 1, infer_ml_regressor},
    {"ai.onnx.ml", "Scaler", 1, 1, infer_ml_float_like},
    {"ai.onnx.ml", "Normalizer", 1, 1, infer_ml_float_like},
    {"ai.onnx.ml", "OneHotEncoder", 1, 1, infer_ml_onehot},
    {"ai.onnx.ml", "CategoryMapper", 1, 1, infer_ml_category_mapper},
    {"ai.onnx.ml", "FeatureVectorizer", 1, 1, infer_ml_feature_vectorizer},
    {"ai.onnx.ml", "TreeEnsembleClassifier", 1, 3, infer_tree_classifier},
    {"ai.onnx.ml", "TreeEnsembleRegressor", 1, 3, infer_tree_regressor},
};

/* --- LinearAttention, CausalConvWithState (27), SwiGLU (28)
 * --------------------------------------- Newer than every ONNX release the project can read the
 * schemas of: the rows follow the node tests' models and function bodies, and accept attributes
 * they do not list (strict_attrs false). */
static const OxFormal lin_in[] = {
    {"query", "T", ONYX_PARAM_SINGLE, 1},   {"key", "T", ONYX_PARAM_SINGLE, 1},
    {"value", "T", ONYX_PARAM_SINGLE, 1},   {"past_state", "T", ONYX_PARAM_OPTIONAL, 1},
    {"decay", "T", ONYX_PARAM_OPTIONAL, 1}, {"beta", "T", ONYX_PARAM_OPTIONAL, 1},
};
static const OxFormal lin_out[] = {{"output", "T", ONYX_PARAM_SINGLE, 1},
                                   {"present_state", "T", ONYX_PARAM_OPTIONAL, 1}};
static const OxTypeConstr rec_tc[] = {{"T", M_FLOATS}};
static const OxAttrSpec lin_attrs[] = {
    {.name = "kv_num_heads", .type = ONYX_ATTR_INT},
    {.name = "q_num_heads", .type = ONYX_ATTR_INT},
    {.name = "scale", .type = ONYX_ATTR_FLOAT},
    {.name = "update_rule", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "gated_delta"},
};
static const OxFormal ccs_in[] = {
    {"input", "T", ONYX_PARAM_SINGLE, 1},
    {"weight", "T", ONYX_PARAM_SINGLE, 1},
    {"bias", "T", ONYX_PARAM_OPTIONAL, 1},
    {"past_state", "T", ONYX_PARAM_OPTIONAL, 1},
};
static const OxFormal ccs_out[] = {{"output", "T", ONYX_PARAM_SINGLE, 1},
                                   {"present_state", "T", ONYX_PARAM_OPTIONAL, 1}};
static const OxAttrSpec ccs_attrs[] = {
    {.name = "activation", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "none"},
};
static const OxFormal swiglu_in[] = {{"a", "T", ONYX_PARAM_SINGLE, 1},
                                     {"b", "T", ONYX_PARAM_SINGLE, 1}};
static const OxFormal swiglu_out[] = {{"y", "T", ONYX_PARAM_SINGLE, 1}};
static const OxAttrSpec swiglu_attrs[] = {
    {.name = "alpha", .type = ONYX_ATTR_FLOAT, .has_default = true, .def_f = 1.0f},
};

#define ROW_LOOSE(op, ver, in, out, tc, at)                                                        \
  {                                                                                                \
    "", op, ver, in, OX_ARRAY_LEN(in), out, OX_ARRAY_LEN(out), tc, OX_ARRAY_LEN(tc), at,           \
        OX_ARRAY_LEN(at), NULL, NULL, NULL, false                                                  \
  }

/* A row without attributes. */
#define ROW0(op, ver, in, out, tc)                                                                 \
  {                                                                                                \
    "", op, ver, in, OX_ARRAY_LEN(in), out, OX_ARRAY_LEN(out), tc, OX_ARRAY_LEN(tc), NULL, 0,      \
        NULL, NULL, NULL, true                                                                     \
  }

static const OxSchema misc_rows[] = {
    ROW("Attention", 23, attn23_in, attn_out, attn_tc, attn_attrs),
    ROW("Attention", 24, attn24_in, attn_out, attn_tc, attn_attrs),
    ROW("RotaryEmbedding", 23, rope_in, rope_out, rope_tc, rope_attrs),
    ROW0("StringConcat", 20, sconcat_in, sconcat_out, sconcat_tc),
    ROW("StringSplit", 20, ssplit_in, ssplit_out, ssplit_tc, ssplit_attrs),
    ROW("RegexFullMatch", 20, regex_in, regex_out, regex_tc, regex_attrs),
    ROW_LOOSE("LinearAttention", 27, lin_in, lin_out, rec_tc, lin_attrs),
    ROW_LOOSE("CausalConvWithState", 27, ccs_in, ccs_out, rec_tc, ccs_attrs),
    ROW_LOOSE("SwiGLU", 28, swiglu_in, swiglu_out, rec_tc, swiglu_attrs),
    {"ai.onnx.ml", "LabelEncoder", 4, le_in, 1, le_out, 1, le_tc, 2, le_attrs,
     OX_ARRAY_LEN(le_attrs), infer_label_encoder, NULL, NULL, true},
    {"ai.onnx.ml", "TreeEnsemble", 5, te_in, 1, te_out, 1, te_tc, 1, te_attrs,
     OX_ARRAY_LEN(te_attrs), NULL, NULL, NULL, true},
};

const OxSchemaFamily ox_family_misc = {"misc", misc_rows, OX_ARRAY_LEN(misc_rows), misc_overrides,
                                       OX_ARRAY_LEN(misc_overrides)};
