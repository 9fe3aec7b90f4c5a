/* ox_schema.h — op schemas: formal inputs/outputs, type constraints,
 * attributes with defaults, and type/shape inference, per (domain, op,
 * since_version). The built-in table covers ai.onnx; providers and
 * applications add their own domains through OnyxSchemaDef. */
#ifndef OX_SCHEMA_H
#define OX_SCHEMA_H

#include "ox_ir.h"

typedef struct OxFormal {
  const char* name;
  const char* tc;    /* type constraint name ("T") or a fixed type name: "tensor(int64)" */
  uint8_t option;    /* OnyxParamOption */
  uint8_t min_arity; /* for VARIADIC: minimum count (usually 1) */
} OxFormal;

typedef struct OxTypeConstr {
  const char* name;
  uint64_t allowed; /* mask of OX_T(type) */
} OxTypeConstr;

typedef struct OxAttrSpec {
  const char* name;
  OnyxAttrType type;
  bool required;
  bool has_default;
  int64_t def_i;
  float def_f;
  const char* def_s;
  const int64_t* def_ints; /* for INTS defaults */
  size_t def_ints_count;
  const float* def_floats; /* for FLOATS defaults */
  size_t def_floats_count;
} OxAttrSpec;

/* Infers the element types (mandatory) and shapes (where the inputs allow)
 * of node->outputs from node->inputs, attributes and constant inputs; writes
 * them with ox_value_set. An error names the node and what is wrong. */
typedef OnyxStatus* (*OxInferFn)(OxNode* node);

typedef struct OxSchema {
  const char* domain; /* "" for ai.onnx */
  const char* op_type;
  int32_t since_version;
  const OxFormal* inputs;
  uint8_t n_inputs;
  const OxFormal* outputs;
  uint8_t n_outputs;
  const OxTypeConstr* constraints;
  uint8_t n_constraints;
  const OxAttrSpec* attrs;
  uint8_t n_attrs;
  OxInferFn infer; /* NULL: default (see ox_infer_default) */
  /* Custom schemas from the ABI: the copied definition's inference. */
  OnyxStatus* (*abi_infer)(OnyxInferenceContext* ctx, void* user);
  void* abi_user;
  /* When true, attributes the schema does not list are refused. */
  bool strict_attrs;
} OxSchema;

typedef struct OnyxSchemaRegistry OxSchemaRegistry;

/* The built-in ai.onnx schemas (static, immutable, never freed). */
const OxSchemaRegistry* ox_schemas_builtin(void);
/* Highest ai.onnx opset the built-in table knows. */
#define OX_ONNX_OPSET_MAX 28

/* A registry for custom domains (provider/application schemas). */
OnyxStatus* ox_schema_registry_create(OxSchemaRegistry** out);
void ox_schema_registry_free(OxSchemaRegistry* r);
/* Copies def (strings, arrays) into r. Refuses the ONNX domain and a
 * duplicate (domain, op, since_version). */
OnyxStatus* ox_schema_registry_add(OxSchemaRegistry* r, const OnyxSchemaDef* def);

/* The schema for a node of (domain, op) in a model importing `opset` for that
 * domain: the one with the largest since_version <= opset. Searches `custom`
 * (may be NULL) and the built-in table. On failure returns NULL and, if why
 * is not NULL, a message (static or owned by the registry) that tells an
 * unknown op from one newer than the model's opset. */
const OxSchema* ox_schema_lookup(const OxSchemaRegistry* custom, const char* domain,
                                 const char* op_type, int64_t opset, const char** why);

/* Checks node against schema: input/output arity, attribute names and types,
 * required attributes; fills in default attributes (from_default = true).
 * Errors name the node. */
OnyxStatus* ox_schema_check_node(const OxSchema* s, OxNode* node);

/* Element-type of a formal's constraint on a node (input i or output i):
 * the constraint name bound for the formal, or NULL for a fixed type. */
const char* ox_schema_input_tc(const OxSchema* s, size_t i);
const char* ox_schema_output_tc(const OxSchema* s, size_t i);
/* Allowed types for a constraint name of a schema (mask; all ones if unknown). */
uint64_t ox_schema_tc_allowed(const OxSchema* s, const char* tc);

/* Runs the schema's inference (or the default one) on node, then checks each
 * inferred output type against the constraints. */
OnyxStatus* ox_schema_infer(const OxSchema* s, OxNode* node);

/* The inference context handed to custom (ABI) inference functions; the
 * host API's infer_* functions read it. */
struct OnyxInferenceContext {
  OxNode* node;
};
#endif /* OX_SCHEMA_H */
