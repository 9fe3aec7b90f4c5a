/* ox_frame.h — one run of a plan: the frame (slot values, run options,
 * preset outputs, the run's memory-pattern blocks and bounds), the kernel
 * context a step's kernel sees, and the executor's entry points
 * (host/exec/executor.c). */
#ifndef OX_FRAME_H
#define OX_FRAME_H

#include "ox_plan.h"
#include "onyx/onyx.h"

struct OxProgram;

/* Kernel context of one step in one run. */
typedef struct OxFrame {
  struct OxProgram* prog;
  OxTensor** values; /* per slot */
  const OnyxRunOptions* run;
  /* Per slot, or NULL: a tensor the user preallocated for the value (IO
   * binding); a kernel or copy producing the slot with the same type, shape
   * and memory writes straight into it. */
  OxTensor* const* preset;
  /* The run's memory-pattern blocks (host/plan/ox_memplan.h), or NULL:
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
  /* The run graph this run is being captured into (executor.c, "run
   * graphs"), or NULL: every buffer a step allocates is held by it. */
  struct OxRunGraph* capture;
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

/* During a capture (f->capture): keeps a reference on t's buffer until the
 * run graph is released, so a replay's recorded addresses stay the graph's
 * (host/exec/executor.c). */
OnyxStatus* ox_run_graph_hold(struct OxRunGraph* g, const OxTensor* t);

/* Releases the program's run graph (the provider's graph, then the buffers
 * held for it): by the session, before its plan is cleared, while the EPs
 * are alive (host/exec/executor.c). */
void ox_run_graph_free(struct OxProgram* s);

/* Index of the provider whose allocator serves memory `mem` (-1: none). */
int32_t ox_program_ep_for_memory(struct OxProgram* p, const OnyxMemoryDevice* mem);

/* Runs the plan. */
OnyxStatus* ox_execute(struct OxProgram* s, const OnyxRunOptions* run, OxTensor** feeds,
                       OxTensor** fetched /* per graph output; NULL entries if not wanted */,
                       const bool* wanted);
/* The same with preallocated outputs: preset_outputs[i] (per graph output,
 * may be NULL) is written in place when the producer's memory, type and
 * shape match; the fetched tensor then shares its data pointer. */
OnyxStatus* ox_execute_ex(struct OxProgram* s, const OnyxRunOptions* run, OxTensor** feeds,
                          OxTensor** fetched, const bool* wanted, OxTensor* const* preset_outputs);
/* The same, fetching output i in memory fetch_mem[i] (fetch_mem or an entry
 * NULL: host memory). Where output i is produced in that memory and nothing
 * else reads its host copy, the copy to host is replaced: the producer
 * writes into preset_outputs[i] when given (and the output is then that
 * tensor, without a copy), else the value is copied within that memory. */
OnyxStatus* ox_execute_io(struct OxProgram* s, const OnyxRunOptions* run, OxTensor** feeds,
                          OxTensor** fetched, const bool* wanted, OxTensor* const* preset_outputs,
                          const OnyxMemoryDevice* const* fetch_mem);
/* How an asynchronous run ended (ox_execute_io_end). ev is the event the
 * run recorded behind its device work on provider ep's stream, in place of
 * synchronizing it: set when that provider offers ONYX_EXT_RUN_EVENT (ext),
 * its stream is the session's only one, and the run succeeded with nothing
 * left to free behind the stream. Otherwise ev is NULL and the run ended
 * synchronized, as ox_execute_io does. The caller waits for ev through ext
 * and releases it with the provider's release_event. last names the last
 * node queued on that stream ("node 'n' (Op)"), for errors found later. */
typedef struct OxRunEnd {
  int32_t ep;
  struct OnyxEvent* ev;
  const struct OnyxRunEventExt* ext;
  char last[192];
} OxRunEnd;
/* ox_execute_io, ending asynchronously where it can (end: see OxRunEnd). */
OnyxStatus* ox_execute_io_end(struct OxProgram* s, const OnyxRunOptions* run, OxTensor** feeds,
                              OxTensor** fetched, const bool* wanted,
                              OxTensor* const* preset_outputs,
                              const OnyxMemoryDevice* const* fetch_mem, OxRunEnd* end);
/* Allocates output o of step st (slot st->out[o]) with these dims, in order:
 * the tensor bound for the slot (IO binding), the slot's place in the run's
 * memory-pattern block, the heap (a graph output in host memory), the
 * producing provider's arena. max_tensor_bytes and the run's live bytes are
 * checked first (host/exec/frame_alloc.c). */
OnyxStatus* ox_frame_alloc_output(OxFrame* f, const OxStep* st, size_t o, const int64_t* dims,
                                  size_t rank, OxTensor** out);
/* The destination of copy step st for a copy of src: the tensor bound for
 * its slot, else a new host tensor (out_ep -1), else one in the destination
 * provider's arena (host/exec/frame_alloc.c). */
OnyxStatus* ox_frame_alloc_copy(OxFrame* f, const OxStep* st, const OxTensor* src, OxTensor** out);
/* A preset tensor usable for a slot produced with this type/shape/memory:
 * a new borrowed header over its data, or NULL. */
OxTensor* ox_frame_preset_take(OxFrame* f, size_t slot, OnyxElemType type, const int64_t* dims,
                               size_t rank, const OnyxMemoryDevice* mem);
#endif
