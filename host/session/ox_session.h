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

/* A slot of OnyxEp that a provider built against an older minor may not have:
 * read only when the EP's struct_size covers it (NULL otherwise). */
#define OX_EP_SLOT(ep, field)                                                                      \
  ((ep)->struct_size >= offsetof(OnyxEp, field) + sizeof((ep)->field) ? (ep)->field : NULL)

/* --- Compiled-group cache entries being written (OnyxEp.save_compiled) --------- */
struct OnyxBlobWriter {
  uint8_t* data;
  size_t len, cap;
};
OnyxStatus* ox_blob_write(OnyxBlobWriter* w, const void* data, size_t bytes);

/* --- Provider transforms (OnyxEp.transform): host/optimizer/opt_provider.c ------ */
OnyxStatus* ox_edit_replace(OnyxGraphEdit* e, const OnyxNode* const* nodes, size_t n_nodes,
                            const char* domain, const char* op_type, const char* name,
                            const OnyxValueInfo* const* inputs, size_t n_inputs,
                            const OnyxValueInfo* const* outputs, size_t n_outputs,
                            const OnyxNode** out);
OnyxStatus* ox_edit_set_attr_int(OnyxGraphEdit* e, const OnyxNode* n, const char* name, int64_t v);
OnyxStatus* ox_edit_set_attr_float(OnyxGraphEdit* e, const OnyxNode* n, const char* name, float v);
OnyxStatus* ox_edit_set_attr_ints(OnyxGraphEdit* e, const OnyxNode* n, const char* name,
                                  const int64_t* v, size_t count);
OnyxStatus* ox_edit_set_attr_string(OnyxGraphEdit* e, const OnyxNode* n, const char* name,
                                    const char* v);

/* --- Placement ----------------------------------------------------------------- */
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
/* The session's pins against its graph as loaded (before the optimizer
 * rewrites it), subgraphs included: a node name no node has, or an op type
 * that neither the model nor any schema has, is ONYX_INVALID_CONFIG naming
 * the pin; a known op type the model lacks is a warning. */
struct OnyxSession;
OnyxStatus* ox_partition_check_pins(const struct OnyxSession* s);
void ox_partition_clear(OxPartition* p);
/* A node of a set (in_group, per node index) that a path leaving the set
 * re-enters, or NULL when the set is convex; `downstream` is scratch of
 * g->n_nodes zeroed entries. */
const OxNode* ox_nonconvex_witness(const OxGraph* g, const bool* in_group, bool* downstream);
/* Recounts the nodes placed on each provider (after the graph changed). */
void ox_partition_count(OxPartition* p);

/* --- Plan ------------------------------------------------------------------------ */
/* HOST: a node the host runs itself (control flow, sequences, optionals:
 * host/exec/control.c); its state is the host op's. */
typedef enum OxStepKind { OX_STEP_KERNEL, OX_STEP_GROUP, OX_STEP_COPY, OX_STEP_HOST } OxStepKind;

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
  /* Agents, crossings with their events, deferred frees (host/exec/ox_streams.h). */
  struct OxStreamPlan* streams;
} OxPlan;

OnyxStatus* ox_plan_build(struct OnyxSession* s);
void ox_plan_clear(struct OnyxSession* s);

/* --- Session ------------------------------------------------------------------- */
struct OnyxRunOptions {
  char* tag;
  OnyxLogSeverity log_severity;
  bool log_severity_set; /* false: the session's severity applies */
  int terminate;         /* atomic */
};

/* --- Per-session run-time state (profiler, debug dumps) ---------------------------
 * Created on first use and owned by the session's private copy of its options
 * (OnyxSessionOptions.rt), so it is released with the session. */
struct OxProfiler;
typedef struct OxSessionRt {
  struct OxProfiler* profiler; /* NULL: profiling off */
  bool nvtx;                   /* NVTX ranges on (host/profile/ox_nvtx.h) */
  /* Debug dumps (docs/debugging.md), read from the environment once. */
  int dump_nodes;         /* bit 1: inputs, bit 2: outputs */
  char* dump_node_filter; /* comma-separated node names, NULL: all */
  char* dump_op_filter;   /* comma-separated op types, NULL: all */
  size_t dump_max_values;
  bool dump_plan, dump_memory;
  int plans_dumped; /* atomic: the plan dumps are written once */
  uint64_t runs;    /* atomic: run counter, for traces */
  /* atomic: the data copies runs made (copy steps that moved data, feeds
   * staged into host memory); a copy step that aliased its source is not
   * counted. Read by tests. */
  uint64_t copies;
  /* When constant folding at session creation must end (max_fold_ms, from
   * the first fold; 0: not started). Creation runs on one thread. */
  uint64_t fold_deadline_ns;
} OxSessionRt;
/* The session's run-time state, created on first call (thread-safe). NULL
 * only when out of memory. */
OxSessionRt* ox_session_rt(struct OnyxSession* s);
void ox_session_rt_free(OxSessionRt* rt);
/* Session phases for the profile (load, optimize, partition, plan):
 * ox_session_phase_begin returns a timestamp for ox_session_phase_end. */
double ox_session_phase_begin(struct OnyxSession* s);
void ox_session_phase_end(struct OnyxSession* s, const char* phase, double begin_us);

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
  /* Per slot, or NULL: a tensor the user preallocated for the value (IO
   * binding); a kernel or copy producing the slot with the same type, shape
   * and memory writes straight into it. */
  OxTensor* const* preset;
  /* The run's memory-pattern blocks (host/memory/ox_memplan.h), or NULL:
   * outputs of planned slots are carved from them. */
  struct OxMemRun* memrun;
  /* The run's bounds (host/exec/executor.c): its deadline on the monotonic
   * clock in ns (0: none) and what set it ("run": max_run_ms, "constant
   * folding": max_fold_ms); the bytes its live tensors hold, shared with the
   * nested runs of its control flow, against max_session_bytes. */
  uint64_t deadline_ns;
  const char* deadline_what;
  size_t* live_bytes;
  /* Feeds outside their slot's memory and outputs fetched in a device's
   * memory (IO binding; host/exec/executor.c), or NULL. */
  struct OxRunIo* io;
  /* Per slot, or NULL: 0 while the slot's value is not charged to
   * live_bytes, else the bytes charged plus one (executor.c). Without it
   * (constant folding) what is charged stays charged. */
  size_t* charged;
} OxFrame;

struct OnyxKernelContext {
  OxFrame* frame;
  const OxStep* step;
  void** scratch;
  size_t n_scratch, cap_scratch;
};

/* 1 when the run of frame f should stop (terminated through its run
 * options, or past its time limit): host/exec/executor.c. */
bool ox_frame_should_stop(const OxFrame* f);
/* Charges the output a step is about to allocate in `slot` (type, dims,
 * rank) to the run's live bytes before the memory is taken: over
 * max_session_bytes it is ONYX_LIMIT_EXCEEDED naming the step and nothing
 * is charged (host/exec/executor.c). */
OnyxStatus* ox_frame_charge_output(OxFrame* f, const OxStep* st, size_t slot, OnyxElemType type,
                                   const int64_t* dims, size_t rank);

/* max_tensor_bytes against a tensor about to be allocated (any memory). */
OnyxStatus* ox_session_check_tensor_limit(const struct OnyxSession* s, OnyxElemType type,
                                          const int64_t* dims, size_t rank);
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
/* The same with preallocated outputs: preset_outputs[i] (per graph output,
 * may be NULL) is written in place when the producer's memory, type and
 * shape match; the fetched tensor then shares its data pointer. */
OnyxStatus* ox_execute_ex(struct OnyxSession* s, const OnyxRunOptions* run, OxTensor** feeds,
                          OxTensor** fetched, const bool* wanted, OxTensor* const* preset_outputs);
/* The same, fetching output i in memory fetch_mem[i] (fetch_mem or an entry
 * NULL: host memory). Where output i is produced in that memory and nothing
 * else reads its host copy, the copy to host is replaced: the producer
 * writes into preset_outputs[i] when given (and the output is then that
 * tensor, without a copy), else the value is copied within that memory. */
OnyxStatus* ox_execute_io(struct OnyxSession* s, const OnyxRunOptions* run, OxTensor** feeds,
                          OxTensor** fetched, const bool* wanted, OxTensor* const* preset_outputs,
                          const OnyxMemoryDevice* const* fetch_mem);
/* Where graph input i is read: the one memory its consumers read it in
 * (host when nothing reads it); an error naming the input and the memories
 * when there are several (host/exec/plan.c). */
OnyxStatus* ox_plan_input_memory(const struct OnyxSession* s, size_t i, OnyxMemoryDevice* out);
/* The memory graph output i is produced in (before the plan's copy to host). */
OnyxStatus* ox_plan_output_memory(const struct OnyxSession* s, size_t i, OnyxMemoryDevice* out);
/* A preset tensor usable for a slot produced with this type/shape/memory:
 * a new borrowed header over its data, or NULL. */
OxTensor* ox_frame_preset_take(OxFrame* f, size_t slot, OnyxElemType type, const int64_t* dims,
                               size_t rank, const OnyxMemoryDevice* mem);
/* Debug texts (docs/debugging.md): the execution plan and the memory plan.
 * Free with free(); NULL when out of memory. */
char* ox_plan_text(const struct OnyxSession* s);
char* ox_memory_plan_text(const struct OnyxSession* s);
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
  OxTensor* tensor;
};

#endif
