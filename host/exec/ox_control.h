/* ox_control.h — host ops: the nodes the host runs itself because no provider
 * may see them (ARCHITECTURE: the ABI is tensor-only). Control flow with
 * subgraphs (If, Loop, Scan, SequenceMap: control.c) and the sequence and
 * optional ops (sequence.c); their resolve-time inference is graph code
 * (host/graph/host_infer.c) and the nested plans of control flow plan code
 * (host/plan/ox_nested.h). The partitioner places them on the "host"
 * pseudo-provider (OX_EP_HOST); the plan makes them OX_STEP_HOST steps. */
#ifndef OX_CONTROL_H
#define OX_CONTROL_H

#include "ox_graph.h"

#define OX_CF_MAX_RANK 64 /* ranks the host ops handle */

struct OxProgram;
struct OxStep;
struct OxFrame;

/* Runs one host step over the frame; sets its outputs (owned by the frame). */
OnyxStatus* ox_host_run(struct OxFrame* f, const struct OxStep* st);

/* sequence.c: the container ops (no subgraph). ins[i] may be NULL (absent);
 * outs[i] receive new values the caller owns. f bounds what they allocate
 * (its limits, deadline and live bytes). */
OnyxStatus* ox_seq_run(struct OxFrame* f, const OxNode* n, OxTensor* const* ins, OxTensor** outs);
/* ml_map.c: ai.onnx.ml ZipMap, DictVectorizer and CastMap (ox_ml_map_op), the
 * ops over map values; ox_seq_run hands them over. */
OnyxStatus* ox_ml_map_run(struct OxFrame* f, const OxNode* n, OxTensor* const* ins,
                          OxTensor** outs);

/* --- Limits and cancellation of a run (executor.c) --------------------------------------
 * Host ops check every tensor they make before allocating it: its bytes
 * against max_tensor_bytes, and the run's live bytes plus it against
 * max_session_bytes; errors are ONYX_LIMIT_EXCEEDED naming node n, the limit
 * and the sizes. f may be NULL (no limits). */
uint64_t ox_now_ns(void); /* monotonic clock */
/* now + ms (0: none, 0 returned; saturates). */
uint64_t ox_deadline_after_ms(size_t ms);
/* NULL while the run goes on; else ONYX_CANCELLED saying why (terminated,
 * or past max_run_ms / max_fold_ms). */
OnyxStatus* ox_frame_stop_status(const struct OxFrame* f);
OnyxStatus* ox_frame_reserve(const struct OxFrame* f, const OxNode* n, size_t bytes);
/* The same from a shape, with checked arithmetic; *bytes (may be NULL)
 * receives the size. */
OnyxStatus* ox_frame_reserve_shape(const struct OxFrame* f, const OxNode* n, OnyxElemType type,
                                   const int64_t* dims, size_t rank, size_t* bytes);
/* Adds bytes a host op holds (outside the frame's slots) to the run's live
 * total, and takes them off again. */
void ox_frame_charge(struct OxFrame* f, size_t bytes);
void ox_frame_uncharge(struct OxFrame* f, size_t bytes);
/* ox_frame_reserve_shape, then ox_tensor_new. */
OnyxStatus* ox_host_tensor_new(struct OxFrame* f, const OxNode* n, OnyxElemType type,
                               const int64_t* dims, size_t rank, OxTensor** out);
/* Runs a nested session (a subgraph of the parent frame's step) within the
 * parent run: its run options, deadline and live bytes. */
OnyxStatus* ox_execute_nested(const struct OxFrame* parent, struct OxProgram* s, OxTensor** feeds,
                              OxTensor** fetched, const bool* wanted);

/* Tensor helpers shared by control.c and sequence.c; f and n as above. */
/* out = slice of t at index idx along axis, without that axis. */
OnyxStatus* ox_cf_take(struct OxFrame* f, const OxNode* n, const OxTensor* t, size_t axis,
                       int64_t idx, OxTensor** out);
/* out = items concatenated along axis (new_axis: stacked on a new axis). */
OnyxStatus* ox_cf_concat(struct OxFrame* f, const OxNode* n, OxTensor* const* items, size_t count,
                         int64_t axis, bool new_axis, OxTensor** out);
/* Copies n elements (strings duplicated). */
OnyxStatus* ox_cf_copy(OxTensor* dst, size_t doff, const OxTensor* src, size_t soff, size_t n);

#endif
