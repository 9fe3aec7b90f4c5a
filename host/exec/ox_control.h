/* ox_control.h — host ops: the nodes the host runs itself because no provider
 * may see them (ARCHITECTURE: the ABI is tensor-only). Control flow with
 * subgraphs (If, Loop, Scan, SequenceMap: control.c) and the sequence and
 * optional ops (sequence.c). The partitioner places them on the "host"
 * pseudo-provider (OX_EP_HOST); the plan makes them OX_STEP_HOST steps. */
#ifndef OX_CONTROL_H
#define OX_CONTROL_H

#include "ox_graph.h"

#define OX_CF_MAX_RANK 64 /* ranks the host ops handle */

struct OnyxSession;
struct OxStep;
struct OxFrame;

/* Whether the host runs this node (its op is a host op, or it reads or
 * writes a sequence/optional value, or it has a subgraph). */
bool ox_host_op(const OxNode* n);

/* Resolve-time inference of a host op: types (and kinds) of its outputs;
 * for ops with subgraphs, types the subgraphs' inputs and outer-scope reads
 * and resolves them first. Errors name the node. */
OnyxStatus* ox_host_infer(OxGraph* g, OxNode* n, const OxSchemaRegistry* const* customs,
                          size_t n_customs);

/* Plan time: nested plans of the step's subgraphs (st->state). */
OnyxStatus* ox_host_prepare(struct OnyxSession* s, struct OxStep* st);
void ox_host_release(struct OxStep* st);

/* Runs one host step over the frame; sets its outputs (owned by the frame). */
OnyxStatus* ox_host_run(struct OxFrame* f, const struct OxStep* st);

/* sequence.c: the container ops (no subgraph). ins[i] may be NULL (absent);
 * outs[i] receive new values the caller owns. */
bool ox_seq_op(const char* op_type);
OnyxStatus* ox_seq_infer(OxNode* n);
OnyxStatus* ox_seq_run(const OxNode* n, OxTensor* const* ins, OxTensor** outs);

/* Tensor helpers shared by control.c and sequence.c. */
/* out = slice of t at index idx along axis, without that axis. */
OnyxStatus* ox_cf_take(const OxTensor* t, size_t axis, int64_t idx, OxTensor** out);
/* out = items concatenated along axis (new_axis: stacked on a new axis). */
OnyxStatus* ox_cf_concat(OxTensor* const* items, size_t n, int64_t axis, bool new_axis,
                         OxTensor** out);
/* Copies n elements (strings duplicated). */
OnyxStatus* ox_cf_copy(OxTensor* dst, size_t doff, const OxTensor* src, size_t soff, size_t n);

#endif
