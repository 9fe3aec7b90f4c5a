/* schema_internal.h — shared between the files of schemas/ only: the built-in
 * table, the inference functions it points to, and the registry struct. */
#ifndef OX_SCHEMA_INTERNAL_H
#define OX_SCHEMA_INTERNAL_H

#include "ox_schema.h"

/* The built-in ai.onnx table (onnx_schemas.c), in no particular order. */
extern const OxSchema ox_onnx_schemas[];
extern const size_t ox_onnx_schemas_count;

/* Type-mask flags of container types in generated constraints ("seq(tensor(float))"
 * is OX_T(FLOAT32) | OX_T_SEQ). Element types use bits 0..31. */
#define OX_T_SEQ      (UINT64_C(1) << 56)
#define OX_T_OPTIONAL (UINT64_C(1) << 57)
#define OX_T_MAP      (UINT64_C(1) << 58)
#define OX_T_SPARSE   (UINT64_C(1) << 59)

/* The table generated from the onnx package (onnx_schemas_gen.c): every op the
 * hand-written table lacks, opsets up to 17, ai.onnx.ml and
 * ai.onnx.preview.training too. Its rows have no inference function of their
 * own; families attach one with OxInferOverride. */
extern const OxSchema ox_gen_schemas[];
extern const size_t ox_gen_schemas_count;

/* A function body from the ONNX spec: a serialized FunctionProto. */
typedef struct OxFunctionBody {
  const char* domain;
  const char* op_type;
  int32_t since_version;
  const uint8_t* bytes;
  size_t len;
} OxFunctionBody;
extern const OxFunctionBody ox_gen_functions[];
extern const size_t ox_gen_functions_count;

/* Attaches an inference function to every generated row of (domain, op) with
 * since_min <= since_version <= since_max. */
typedef struct OxInferOverride {
  const char* domain;
  const char* op_type;
  int32_t since_min, since_max;
  OxInferFn infer;
} OxInferOverride;

/* An op family's own rows (opsets newer than the generated table, or rows
 * that replace generated ones) and its inference overrides. One per file
 * schemas/schemas_<family>.c; listed in registry.c. Precedence on a duplicate
 * (domain, op, since_version): hand table > family rows > generated rows. */
typedef struct OxSchemaFamily {
  const char* name;
  const OxSchema* rows;
  size_t n_rows;
  const OxInferOverride* overrides;
  size_t n_overrides;
} OxSchemaFamily;
extern const OxSchemaFamily ox_family_math;    /* schemas_math.c: element-wise, activations */
extern const OxSchemaFamily ox_family_tensor;  /* schemas_tensor.c: indexing, reductions, shape */
extern const OxSchemaFamily ox_family_nn;      /* schemas_nn.c: conv/pool/norm/resize/RNN/losses */
extern const OxSchemaFamily ox_family_quant;   /* schemas_quant.c: quantization, signal, random */
extern const OxSchemaFamily ox_family_misc;    /* schemas_misc.c: strings, ai.onnx.ml, attention */
extern const OxSchemaFamily ox_family_contrib; /* schemas_contrib.c: com.onyx fused ops */
extern const OxSchemaFamily ox_family_nchwc;   /* schemas_nchwc.c: com.onyx blocked layout */
extern const OxSchemaFamily ox_family_fused;   /* schemas_fused.c: com.onyx FusedElementwise */
extern const OxSchemaFamily ox_family_cf;      /* schemas_cf.c: control flow, sequences, training */
extern const OxSchemaFamily ox_family_image;   /* schemas_image.c: ImageDecoder */
extern const OxSchemaFamily ox_family_training;   /* schemas_training.c: com.onyx.training grads */
extern const OxSchemaFamily ox_family_collective; /* schemas_collective.c: com.onyx.collective */
extern const OxSchemaFamily ox_family_training_seq; /* schemas_training_seq.c: recurrent grads */

/* Every ai.onnx op name with its first opset, sorted by name (messages only). */
typedef struct OxOpName {
  const char* name;
  int32_t since;
} OxOpName;
extern const OxOpName ox_onnx_op_names[];
extern const size_t ox_onnx_op_names_count;

/* A registry: the built-in one wraps the static table; custom ones own deep
 * copies. `sorted` is ordered by (domain, op_type, since_version). */
struct OnyxSchemaRegistry {
  const OxSchema** sorted;
  size_t count, cap;
  bool owns; /* custom: schemas and their strings are heap copies */
};

/* Inference functions of the built-in table (infer.c, infer_shape.c). */
OnyxStatus* ox_infer_unary(OxNode* n);
OnyxStatus* ox_infer_softmax(OxNode* n);
OnyxStatus* ox_infer_bcast(OxNode* n);
OnyxStatus* ox_infer_bcast_legacy(OxNode* n);
OnyxStatus* ox_infer_compare(OxNode* n);
OnyxStatus* ox_infer_compare_legacy(OxNode* n);
OnyxStatus* ox_infer_where(OxNode* n);
OnyxStatus* ox_infer_matmul(OxNode* n);
OnyxStatus* ox_infer_gemm(OxNode* n);
OnyxStatus* ox_infer_conv(OxNode* n);
OnyxStatus* ox_infer_conv_transpose(OxNode* n);
OnyxStatus* ox_infer_pool(OxNode* n);
OnyxStatus* ox_infer_global_pool(OxNode* n);
OnyxStatus* ox_infer_batchnorm(OxNode* n);
OnyxStatus* ox_infer_layernorm(OxNode* n);
OnyxStatus* ox_infer_dropout(OxNode* n);
OnyxStatus* ox_infer_reshape(OxNode* n);
OnyxStatus* ox_infer_flatten(OxNode* n);
OnyxStatus* ox_infer_transpose(OxNode* n);
OnyxStatus* ox_infer_concat(OxNode* n);
OnyxStatus* ox_infer_split(OxNode* n);
OnyxStatus* ox_infer_slice(OxNode* n);
OnyxStatus* ox_infer_squeeze(OxNode* n);
OnyxStatus* ox_infer_unsqueeze(OxNode* n);
OnyxStatus* ox_infer_gather(OxNode* n);
OnyxStatus* ox_infer_shape(OxNode* n);
OnyxStatus* ox_infer_cast(OxNode* n);
OnyxStatus* ox_infer_constant(OxNode* n);
OnyxStatus* ox_infer_constant_of_shape(OxNode* n);
OnyxStatus* ox_infer_reduce(OxNode* n);
OnyxStatus* ox_infer_expand(OxNode* n);

/* The default inference: each output takes the element type of the first
 * input bound to its constraint (or its fixed type); shape unknown. */
OnyxStatus* ox_infer_default(const OxSchema* s, OxNode* n);

/* Element type named as in ONNX type strings ("float", "int64", ...), or
 * ONYX_ELEM_UNDEFINED; and the reverse. */
OnyxElemType ox_onnx_type_from_name(const char* name);
const char* ox_onnx_type_name(OnyxElemType t);

#endif /* OX_SCHEMA_INTERNAL_H */
