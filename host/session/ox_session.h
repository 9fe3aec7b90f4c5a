/* ox_session.h — the session: its options, graph, providers, thread pool,
 * partition and plan; the session-wide services the phases use (logging,
 * tensor allocation in a provider's memory, copies between memories); and
 * the public value type. Each phase's own types live in its folder:
 * ox_partition.h, ox_plan.h, ox_frame.h. */
#ifndef OX_SESSION_H
#define OX_SESSION_H

#include "ox_frame.h"
#include "ox_graph.h"
#include "ox_options.h"
#include "ox_partition.h"
#include "ox_plan.h"
#include "ox_threadpool.h"
#include "onyx/onyx.h"

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

/* The session (and run) whose work the calling thread is doing, so that a
 * provider's host->log reaches that session's log callback. Set by the
 * executor for a run; returns the previous pair for restoring. */
typedef struct OxLogScope {
  const struct OnyxSession* session;
  const OnyxRunOptions* run;
} OxLogScope;
OxLogScope ox_log_scope_enter(const struct OnyxSession* s, const OnyxRunOptions* run);
void ox_log_scope_leave(OxLogScope previous);
const OxLogScope* ox_log_scope_current(void); /* NULL outside any scope */
/* Logs through the session's logger within a run: the run's severity (when
 * set) and its tag ("[run 'tag'] ") apply. */
void ox_run_log(const struct OnyxSession* s, const OnyxRunOptions* run, OnyxLogSeverity sev,
                const char* fmt, ...) OX_PRINTF(4, 5);

/* The provider memory and copies of host/partition/ep_memory.c over the
 * session's provider table and its max_tensor_bytes, for the session's own
 * callers. */
/* max_tensor_bytes against a tensor about to be allocated (any memory). */
OnyxStatus* ox_session_check_tensor_limit(const struct OnyxSession* s, OnyxElemType type,
                                          const int64_t* dims, size_t rank);
/* Allocates a tensor in a provider's memory through its arena. */
OnyxStatus* ox_session_alloc_tensor(struct OnyxSession* s, int32_t ep, OnyxMemType mem,
                                    OnyxElemType type, const int64_t* dims, size_t rank,
                                    OxTensor** out);
/* The memory a provider's allocator of a type serves (host memory if none). */
OnyxMemoryDevice ox_session_ep_memory(struct OnyxSession* s, int32_t ep, OnyxMemType mem);

/* Sets node priorities from the options (by node name) for the "priority"
 * order; a name that matches no node is an error. */
OnyxStatus* ox_session_apply_priorities(struct OnyxSession* s);
/* Index of the provider whose allocator serves memory `mem` (-1: none). */
int32_t ox_session_ep_for_memory(struct OnyxSession* s, const OnyxMemoryDevice* mem);

/* One tensor through provider ep's copy_tensors, queued on its stream. */
OnyxStatus* ox_session_ep_copy(struct OnyxSession* s, int32_t ep, const OxTensor* src,
                               OxTensor* dst);
/* Copies src into dst (same type/shape), choosing host memcpy, the
 * destination's or the source's provider copy, or staging through host. */
OnyxStatus* ox_copy_tensor(struct OnyxSession* s, const OxTensor* src, OxTensor* dst,
                           int32_t src_ep, int32_t dst_ep);

/* The public value type. */
struct OnyxValue {
  OxTensor* tensor; /* a tensor, sequence, none, map or sequence of maps (vkind) */
};

/* Checks a fed map or sequence of maps (t) against the declared input
 * (value_map.c): kind, key and value types, and each map's layout. */
OnyxStatus* ox_check_map_feed(const OxValue* decl, const OxTensor* t);

#endif
