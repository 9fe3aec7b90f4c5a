/* ox_session.h — the session: its options and its program (ox_program.h);
 * the session's logging and its forms of the provider memory and copies
 * (host/partition/ep_memory.c); and the public value type. Each phase's own
 * types live in its folder: ox_partition.h, ox_plan.h, ox_program.h,
 * ox_frame.h. */
#ifndef OX_SESSION_H
#define OX_SESSION_H

#include "ox_frame.h"
#include "ox_graph.h"
#include "ox_options.h"
#include "ox_program.h"
#include "ox_threadpool.h"
#include "onyx/onyx.h"

/* The session: its options (its private copy) and its program, the graph
 * with its providers, thread pool, placement and plan (host/plan/ox_program.h),
 * which the plan and the executor work on. */
struct OnyxSession {
  OnyxSessionOptions* opts;
  OxProgram prog;
  /* Asynchronous runs whose provider event is still held (session_run.c),
   * linked through their `next`; guarded by the run events' lock there. */
  struct OnyxRunEvent* in_flight;
};

/* Waits for the session's asynchronous runs and releases their provider
 * events (onyx_session_release, before the providers go). */
void ox_session_settle_runs(struct OnyxSession* s);

/* Copies what the program's plan and runs read of the options into
 * s->prog.cfg (the run-time state created here too): called once the
 * options are the session's own, before any phase runs. */
void ox_session_bind(struct OnyxSession* s);

/* Logs through the session's logger. */
void ox_session_log(const struct OnyxSession* s, OnyxLogSeverity sev, const char* fmt, ...)
    OX_PRINTF(3, 4);

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
