/* schema_internal.h — shared between the files of schemas/ only: the built-in
 * table, the inference functions it points to, and the registry struct. */
#ifndef OX_SCHEMA_INTERNAL_H
#define OX_SCHEMA_INTERNAL_H

#include "ox_schema.h"

/* The built-in ai.onnx table (onnx_schemas.c), in no particular order. */
extern const OxSchema ox_onnx_schemas[];
extern const size_t ox_onnx_schemas_count;

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
