/* ox_partition.h — placement: the session's provider instances, the graph
 * views providers see, the capability builder behind get_capability, and the
 * partition the partitioner decides (which provider runs each node, the
 * fused groups). */
#ifndef OX_PARTITION_H
#define OX_PARTITION_H

#include <pthread.h>
#include "ox_arena.h"
#include "ox_graph.h"
#include "ox_kreg.h"
#include "ox_providers.h"
#include "onyx/onyx.h"

/* One provider instance in a session, in priority order. */
typedef struct OxEpSlot {
  char* name;
  OxProviderLib* lib;
  OnyxEp* ep;
  bool implicit;      /* the CPU appended because the user did not list it */
  OxArena* arenas[3]; /* per OnyxMemType, created on first use */
  pthread_mutex_t arena_lock;
  OnyxStream* stream; /* NULL: synchronous */
  size_t n_nodes;     /* nodes placed here */
} OxEpSlot;

/* --- The providers' memory (ep_memory.c), over a session's provider table ---------- */
/* The memory provider ep's allocator of type mem serves (host memory for ep
 * -1 or a provider without one). */
OnyxMemoryDevice ox_ep_memory(const OxEpSlot* eps, int32_t ep, OnyxMemType mem);
/* max_tensor_bytes (0: none) against a tensor about to be allocated in any
 * memory: ONYX_LIMIT_EXCEEDED over it. */
OnyxStatus* ox_tensor_limit_check(size_t max_tensor_bytes, OnyxElemType type, const int64_t* dims,
                                  size_t rank);
/* Allocates a tensor in provider ep's memory of type mem through the slot's
 * arena (ep -1, and strings: a host tensor), after the limit check. */
OnyxStatus* ox_ep_alloc_tensor(OxEpSlot* eps, int32_t ep, OnyxMemType mem, size_t max_tensor_bytes,
                               OnyxElemType type, const int64_t* dims, size_t rank, OxTensor** out);
/* One tensor through provider ep's copy_tensors, queued on its stream. */
OnyxStatus* ox_ep_copy(const OxEpSlot* eps, int32_t ep, const OxTensor* src, OxTensor* dst);
/* Copies src into dst (same type/shape), choosing host memcpy, the
 * destination's or the source's provider copy, or staging through host. */
OnyxStatus* ox_ep_copy_tensor(const OxEpSlot* eps, const OxTensor* src, OxTensor* dst,
                              int32_t src_ep, int32_t dst_ep);

/* --- Placement -------------------------------------------------------------------- */
/* A pin of the session's options (OnyxSessionOptions.pins): the nodes of a
 * name, or of an op type, go to a named provider. */
typedef struct OxPin {
  char* node_name; /* exactly one of node_name / op_type is set */
  char* op_type;
  char* provider;
} OxPin;

typedef struct OxDecline {
  size_t node;     /* graph node index at partitioning */
  char* node_name; /* the node's name: indices change when fusions rewrite the graph */
  int32_t ep;
  char* reason;
} OxDecline;

typedef struct OxGroup {
  char* name;
  int32_t ep;
  OnyxGraphView view; /* nodes in topological order, boundary inputs/outputs */
  OnyxCompiledKernel kernel;
  bool compiled;
} OxGroup;

struct OnyxCapabilityBuilder {
  struct OxPartition* part;
  int32_t ep;
  OxKernelRegistry* kernels;
  char reason[512];
  OnyxStatus* refused; /* first claim the host refused */
};
/* The builder functions behind the host API (partition.c). */
int ox_builder_has_kernel(OnyxCapabilityBuilder* b, const OnyxNode* n, const char** reason);
OnyxStatus* ox_builder_claim_node(OnyxCapabilityBuilder* b, const OnyxNode* n);
OnyxStatus* ox_builder_claim_group(OnyxCapabilityBuilder* b, const OnyxNode* const* nodes,
                                   size_t count, const char* name);
void ox_builder_decline(OnyxCapabilityBuilder* b, const OnyxNode* n, const char* reason);
void ox_builder_mark_cheap(OnyxCapabilityBuilder* b, const OnyxNode* n);
OnyxStatus* ox_builder_take_error(OnyxCapabilityBuilder* b);

typedef struct OxPartition {
  OxGraph* graph;
  OxEpSlot* eps;
  size_t n_eps;
  /* The session's placement rules: pins (a node-name pin before an op-type
   * pin) and fallback "deny" (no node left to the implicit CPU provider). */
  const OxPin* pins;
  size_t n_pins;
  bool fallback_deny;
  bool* cheap; /* per node */
  OxDecline* declines;
  size_t n_declines, cap_declines;
  OxGroup* groups;
  size_t n_groups, cap_groups;
  /* Per node index (n_kernels entries), recorded by ox_partition_kernels
   * once the graph is final: the kernel of a node placed alone on a
   * provider, which the plan's step runs; NULL for host ops and the nodes of
   * groups. */
  const OxKernel** kernels;
  size_t n_kernels;
} OxPartition;

/* Places every node of p->graph: pins first, then each provider in order;
 * validates claims (convex groups, kernels exist), applies fallback rules.
 * Errors name the node, op and provider. */
OnyxStatus* ox_partition_run(OxPartition* p);
/* The pins of p against its graph as loaded (before the optimizer rewrites
 * it), subgraphs included: a node name no node has, or an op type that
 * neither the model nor any schema (built in, or of p's providers) has, is
 * ONYX_INVALID_CONFIG naming the pin; a known op type the model lacks is
 * passed to warn (with ctx) as a message. */
OnyxStatus* ox_partition_check_pins(const OxPartition* p, void (*warn)(void* ctx, const char* msg),
                                    void* ctx);
void ox_partition_clear(OxPartition* p);
/* Recounts the nodes placed on each provider (after the graph changed). */
void ox_partition_count(OxPartition* p);
/* Records the kernel of every node placed alone on a provider in p->kernels,
 * by node index: called once the graph and its order are final (after the
 * fusions and the priority order for a session, after ox_partition_run for
 * a nested plan), right before the plan is built from it. A node its
 * provider has no kernel for is an error naming the node and provider. */
OnyxStatus* ox_partition_kernels(OxPartition* p);

#endif
