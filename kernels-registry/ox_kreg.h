/* ox_kreg.h — a provider's kernel registry: registration with overlap
 * checks, and matching of a resolved node by (domain, op, opset, element
 * types). One registry per loaded provider library. */
#ifndef OX_KREG_H
#define OX_KREG_H

#include "ox_ir.h"
#include "ox_schema.h"

/* A registered kernel: a deep copy of the provider's definition. */
typedef struct OxKernel {
  OnyxKernelDef def; /* every pointer inside points to memory the registry owns */
  uint64_t* allowed; /* per def.type_constraints[i]: mask of OX_T(type) */
} OxKernel;

typedef struct OnyxKernelRegistry OxKernelRegistry;

OnyxStatus* ox_kreg_create(const char* provider_name, OxKernelRegistry** out);
void ox_kreg_free(OxKernelRegistry* r);
/* Copies def. Refuses: missing op/compute, since > end, and a kernel for the
 * same (domain, op) whose opset range overlaps an existing one unless their
 * type constraints are disjoint for some constraint name. */
OnyxStatus* ox_kreg_add(OxKernelRegistry* r, const OnyxKernelDef* def);
size_t ox_kreg_count(const OxKernelRegistry* r);
const OxKernel* ox_kreg_at(const OxKernelRegistry* r, size_t i);

/* The kernel for a resolved node (node->schema set, input/output types
 * known), or NULL with *why (may be NULL) set to a reason owned by the
 * registry until the next call from the same thread, e.g.
 * "no kernel for Conv(ai.onnx) at opset 11" or
 * "Add(ai.onnx) v14: type T=int8 not supported (kernel takes float32, int64)". */
const OxKernel* ox_kreg_match(const OxKernelRegistry* r, const OxNode* node, const char** why);

/* Memory type a kernel wants for input/output index i. */
OnyxMemType ox_kernel_input_mem(const OxKernel* k, size_t i);
OnyxMemType ox_kernel_output_mem(const OxKernel* k, size_t i);

#endif /* OX_KREG_H */
