/* infer_util.h — helpers shared by the inference functions of schemas/:
 * reading input shapes, attributes (with the schema's defaults), constant
 * inputs, and writing outputs. */
#ifndef OX_INFER_UTIL_H
#define OX_INFER_UTIL_H

#include "ox_checked.h"
#include "schema_internal.h"

/* Ranks above this are treated as unknown by the built-in inference. */
#define OX_INFER_MAX_RANK 64

/* A shape being inferred: rank -1 is unknown; dims may be ONYX_DIM_UNKNOWN. */
typedef struct OxDims {
  int32_t rank;
  int64_t d[OX_INFER_MAX_RANK];
} OxDims;

/* ONYX_INVALID_MODEL "node 'name' (Op): <message>". */
OnyxStatus* ox_node_err(const OxNode* n, const char* fmt, ...) OX_PRINTF(2, 3);

const OxValue* ox_in(const OxNode* n, size_t i); /* NULL: absent */
OnyxElemType ox_in_type(const OxNode* n, size_t i);
void ox_in_dims(const OxNode* n, size_t i, OxDims* out);
/* Writes output i (skipped when absent); d NULL: unknown shape. */
OnyxStatus* ox_out_set(OxNode* n, size_t i, OnyxElemType t, const OxDims* d);
/* Output i with input 0's type and shape. */
OnyxStatus* ox_out_like_input(OxNode* n, size_t out, size_t in);

/* Attributes: the node's value, else the schema's default, else `fallback`. */
bool ox_attr_present(const OxNode* n, const char* name);
int64_t ox_attr_i(const OxNode* n, const char* name, int64_t fallback);
float ox_attr_f(const OxNode* n, const char* name, float fallback);
const char* ox_attr_s(const OxNode* n, const char* name, const char* fallback);
const int64_t* ox_attr_ints(const OxNode* n, const char* name, size_t* count);

/* Values of an integer input known at load time (an initializer or the
 * output of a Constant node): *known false when not. *out is heap memory
 * for the caller to free (NULL when the list is empty or unknown). */
OnyxStatus* ox_const_ints(const OxNode* n, size_t i, int64_t** out, size_t* count, bool* known);
/* The tensor of input i when it is known at load time and its data is in
 * host memory; NULL otherwise. */
const OxTensor* ox_const_tensor(const OxNode* n, size_t i);
/* Length of a 1-D input from its static shape, or -1. */
int64_t ox_in_len(const OxNode* n, size_t i);

/* axis in [-rank, rank-1] → [0, rank); false when out of range. */
bool ox_norm_axis(int64_t axis, int64_t rank, int64_t* out);

/* Multidirectional broadcast of b into a (a = broadcast(a, b)). */
OnyxStatus* ox_bcast_into(const OxNode* n, OxDims* a, const OxDims* b);

#endif /* OX_INFER_UTIL_H */
