/* custom_ep.h — shared declarations of the "custom" example provider.
 *
 * The provider drives an imaginary accelerator, the "Example Accelerator".
 * Its memory is plain host memory, but every buffer is tagged as memory of
 * another device kind (ONYX_DEVICE_OTHER), so the host treats it as device
 * memory: it allocates it through this provider's allocator and moves values
 * in and out of it with this provider's copy function, exactly as it would
 * for a real accelerator. Replace the memcpy calls with DMA and the loops
 * with device launches and you have a real provider.
 *
 * Like every provider it includes only the SDK headers (onyx/onyx_ep.h) and
 * never links against libonyx: everything it calls comes through the host
 * API table handed to onyx_provider_init. */
#ifndef CUSTOM_EP_H
#define CUSTOM_EP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include "onyx/onyx_ep.h"

#define CUSTOM_NAME        "custom"
#define CUSTOM_VENDOR_NAME "Example Corp"
#define CUSTOM_VERSION     "1.0.0"
/* The PCI vendor id that tags our memory (0xFFFF is reserved by PCI-SIG, so
 * it never collides with a real device). */
#define CUSTOM_VENDOR_ID    0xFFFFu
#define CUSTOM_ALIGN        64u
#define CUSTOM_DEVICE_COUNT 2
/* The custom op's domain and name (custom_kernels.c). */
#define CUSTOM_DOMAIN "com.example.custom"
#define CUSTOM_OP     "ScaleBias"
/* Kernels handle tensors up to this rank. */
#define CUSTOM_MAX_RANK 8

/* The host API table, set once by onyx_provider_init. */
extern const OnyxHostApi* custom_host;
/* True when the host implements ABI 1.1 or later (its table has the 1.1
 * functions, e.g. value_consumer): groups are claimed only then. */
extern bool custom_host_1_1;

/* One EP instance: one per session that lists the provider. */
typedef struct CustomEp {
  OnyxEp ep; /* first member: an OnyxEp* is a CustomEp* */
  size_t device_index;
  /* Options (see custom_ep.c, apply_options). */
  int64_t max_elements; /* decline nodes whose output is larger; 0: no limit */
  bool custom_op;       /* claim com.example.custom ScaleBias nodes */
  bool fuse_matmul_add; /* claim MatMul -> Add chains as compiled groups */
  OnyxAllocator allocator;
  /* Statistics, logged at release. */
  atomic_size_t live_buffers;
  atomic_size_t copies;
} CustomEp;

/* The memory identity of device `index`. */
OnyxMemoryDevice custom_memory(size_t index);
/* True for memory this provider allocated (any of its devices). */
bool custom_is_device_memory(const OnyxMemoryDevice* m);

/* Elements of a value when its shape is fully known; -1 otherwise. */
int64_t custom_static_elements(const OnyxValueInfo* v);

/* custom_kernels.c */
OnyxStatus* custom_register_kernels(const OnyxProvider* p, OnyxKernelRegistry* r);
OnyxStatus* custom_register_schemas(const OnyxProvider* p, OnyxSchemaRegistry* r);

/* custom_group.c: MatMul -> Add chains compiled into one kernel. */

/* A set of nodes, sorted by address (custom_node_set_has is a binary search). */
typedef struct CustomNodeSet {
  const OnyxNode** nodes;
  size_t count;
} CustomNodeSet;
bool custom_node_set_has(const CustomNodeSet* s, const OnyxNode* n);
void custom_node_set_free(CustomNodeSet* s);
/* Claims each MatMul -> Add chain of the view as one group (host->claim_group);
 * *taken receives the nodes of every claimed group. */
OnyxStatus* custom_claim_groups(CustomEp* c, const OnyxGraphView* g, OnyxCapabilityBuilder* b,
                                CustomNodeSet* taken);
/* OnyxEp.compile: one compiled kernel for a claimed group. */
OnyxStatus* custom_compile(OnyxEp* ep, const OnyxGraphView* group, OnyxCompiledKernel* out);

#endif
