/* ox_function_body.h — the FunctionProto bodies of the ONNX ops defined as
 * functions (generated from onnx 1.12, schemas/onnx_schemas_gen.c), for the
 * host's function expansion (host/partition/partition.c). */
#ifndef OX_FUNCTION_BODY_H
#define OX_FUNCTION_BODY_H

#include <stddef.h>
#include <stdint.h>

/* The serialized FunctionProto of (domain, op) for the schema version
 * `since_version` (the body with the largest since_version <= it), or NULL
 * when ONNX defines no stored body. */
const uint8_t* ox_schema_function_body(const char* domain, const char* op_type,
                                       int32_t since_version, size_t* len);

#endif
