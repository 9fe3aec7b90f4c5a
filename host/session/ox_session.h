/* ox_session.h — the session's internals: providers in the session, the
 * placement the partitioner decides, and the execution plan. */
#ifndef OX_SESSION_H
#define OX_SESSION_H

#include <pthread.h>
#include "ox_arena.h"
#include "ox_graph.h"
#include "ox_kreg.h"
#include "ox_options.h"
#include "ox_providers.h"
#include "ox_threadpool.h"
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

/* --- Graph views: what get_capability and compile see ------------------------ */
struct OnyxGraphView {
  OxNode** nodes;
  size_t n_nodes;
  OxValue** inputs;
  size_t n_inputs;
  OxValue** outputs;
  size_t n_outputs;
};
void ox_view_clear(OnyxGraphView* v);

/* --- Placement ----------------------------------------------------------------- */
typedef struct OxDecline {
  size_t node; /* graph node index */
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
  bool* cheap; /* per node */
  OxDecline* declines;
  size_t n_declines, cap_declines;
  OxGroup* groups;
  size_t n_groups, cap_groups;
} OxPartition;

/* Places every node: pins first, then each provider in order; validates
 * claims (convex groups, kernels exist), applies fallback rules. Errors name
 * the node, op and provider. */
OnyxStatus* ox_partition_run(OxPartition* p, const OnyxSessionOptions* opts);
void ox_partition_clear(OxPartition* p);

/* --- Plan ------------------------------------------------------------------------ */
typedef enum OxStepKind { OX_STEP_KERNEL, OX_STEP_GROUP, OX_STEP_COPY } OxStepKind;

typedef struct OxStep {
  OxStepKind kind;
  int32_t ep;   /* the provider that runs it (copy: the one that copies, -1: host) */
  OxNode* node; /* KERNEL */
  const OxKernel* kernel;
  void* state; /* kernel state from create */
  bool state_created;
  int32_t group; /* GROUP: index into groups */
  size_t* in;    /* slot per input (SIZE_MAX: absent) */
  size_t n_in;
  size_t* out; /* slot per output (SIZE_MAX: absent) */
  size_t n_out;
  OnyxMemoryDevice* out_mem; /* memory each output is allocated in */
  int32_t* out_ep;           /* arena owner of each output */
  /* COPY: in[0] -> out[0]; staged copies go through host memory. */
  int32_t copy_src_ep, copy_dst_ep;
  size_t* free_after; /* slots whose last use is this step */
  size_t n_free_after;
} OxStep;

/* A slot holds one value on one memory during a run. */
typedef struct OxSlot {
  OxValue* value;
  OnyxMemoryDevice mem;
  OxTensor* constant;  /* set for constants: never freed by a run */
  bool owned_constant; /* constant copied to a device at creation (freed with the session) */
  bool is_output;
} OxSlot;

typedef struct OxCopyNote {
  char* text; /* for explain */
} OxCopyNote;

typedef struct OxPlan {
  OxStep* steps;
  size_t n_steps, cap_steps;
  OxSlot* slots;
  size_t n_slots, cap_slots;
  size_t* input_slots;  /* per graph input */
  size_t* output_slots; /* per graph output (host memory) */
  OxCopyNote* copies;
  size_t n_copies, cap_copies;
} OxPlan;

OnyxStatus* ox_plan_build(struct OnyxSession* s);
void ox_plan_clear(struct OnyxSession* s);

/* --- Session ------------------------------------------------------------------- */
struct OnyxRunOptions {
  char* tag;
  OnyxLogSeverity log_severity;
  int terminate; /* atomic */
};

struct OnyxSession {
  OnyxSessionOptions* opts;
  OxGraph* graph;
  OxEpSlot* eps;
  size_t n_eps;
  OxThreadPool* pool;
  OxPartition part;
  OxPlan plan;
  char* source;
};

/* Logs through the session's logger. */
void ox_session_log(const struct OnyxSession* s, OnyxLogSeverity sev, const char* fmt, ...)
    OX_PRINTF(3, 4);

/* Kernel context of one step in one run. */
typedef struct OxFrame {
  struct OnyxSession* session;
  OxTensor** values; /* per slot */
  const OnyxRunOptions* run;
} OxFrame;

struct OnyxKernelContext {
  OxFrame* frame;
  const OxStep* step;
  void** scratch;
  size_t n_scratch, cap_scratch;
};

/* Allocates a tensor in a provider's memory through its arena. */
OnyxStatus* ox_session_alloc_tensor(struct OnyxSession* s, int32_t ep, OnyxMemType mem,
                                    OnyxElemType type, const int64_t* dims, size_t rank,
                                    OxTensor** out);
/* The memory a provider's allocator of a type serves (host memory if none). */
OnyxMemoryDevice ox_session_ep_memory(struct OnyxSession* s, int32_t ep, OnyxMemType mem);

/* Runs the plan. */
OnyxStatus* ox_execute(struct OnyxSession* s, const OnyxRunOptions* run, OxTensor** feeds,
                       OxTensor** fetched /* per graph output; NULL entries if not wanted */,
                       const bool* wanted);

/* Copies src into dst (same type/shape), choosing host memcpy, the
 * destination's or the source's provider copy, or staging through host. */
OnyxStatus* ox_copy_tensor(struct OnyxSession* s, const OxTensor* src, OxTensor* dst,
                           int32_t src_ep, int32_t dst_ep);

/* The public value type. */
struct OnyxValue {
  OxTensor* tensor;
};

#endif
