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

/* One EP instance: one per session that lists the provider. */
typedef struct CustomEp {
  OnyxEp ep; /* first member: an OnyxEp* is a CustomEp* */
  size_t device_index;
  /* Options (see custom_ep.c, apply_options). */
  int64_t max_elements; /* decline nodes whose output is larger; 0: no limit */
  bool custom_op;       /* claim com.example.custom ScaleBias nodes */
  OnyxAllocator allocator;
  /* Statistics, logged at release. */
  atomic_size_t live_buffers;
  atomic_size_t copies;
} CustomEp;

/* The memory identity of device `index`. */
OnyxMemoryDevice custom_memory(size_t index);
/* True for memory this provider allocated (any of its devices). */
bool custom_is_device_memory(const OnyxMemoryDevice* m);

/* custom_kernels.c */
OnyxStatus* custom_register_kernels(const OnyxProvider* p, OnyxKernelRegistry* r);
OnyxStatus* custom_register_schemas(const OnyxProvider* p, OnyxSchemaRegistry* r);

#endif
