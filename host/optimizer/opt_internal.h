/* opt_internal.h — private to host/optimizer: the pass context and the
 * graph-editing helpers every transformer uses. */
#ifndef OX_OPT_INTERNAL_H
#define OX_OPT_INTERNAL_H

#include "ox_optimizer.h"

typedef struct OxOpt {
  OxGraph* g;
  const OxOptConfig* cfg;
  OxOptStats* stats;
  OxMap pinned; /* names of values read by subgraphs */
  size_t counter;
  /* The provider of the node a rewrite starts from (placed graphs): every
   * node of the rewrite must be on it, and the nodes it adds go to it. */
  int32_t cur_ep;
  const char* pass; /* the running transformer's name, for node origins */
  /* What the current rewrite did, for the origins of the nodes it made:
   * nodes added, the model's names of the nodes removed, and the node that
   * took over a removed node's output (a rewrite that adds none). */
  OxNode** added;
  size_t n_added, cap_added;
  OxStr removed;
  OxStr passes;     /* the transformers that made the removed nodes */
  int64_t priority; /* the lowest priority of the removed nodes (INT64_MAX: none) */
  OxNode* took_over;
} OxOpt;

/* A transformer: returns an error only for real failures; sets *changed. */
typedef OnyxStatus* (*OxPassFn)(OxOpt* o, bool* changed);
/* A rewrite at one node: sets *done when it changed the graph there (n
 * removed or replaced, so the same position is looked at again). */
typedef OnyxStatus* (*OxRewriteFn)(OxOpt* o, OxNode* n, bool* done);
/* Runs rw at every node in graph order, until it leaves each one as it is;
 * sets *changed on any rewrite and adds their number to *count (if any). */
OnyxStatus* ox_opt_rewrite_each(OxOpt* o, OxRewriteFn rw, size_t* count, bool* changed);

/* --- queries ------------------------------------------------------------------------ */
/* A value the optimizer may not rename or drop: a graph output, a graph
 * input, or a value that a subgraph reads by name. */
bool ox_opt_pinned(const OxOpt* o, const OxValue* v);
/* The value has exactly one consumer slot and is not pinned. On a placed
 * graph, its producer (if any) and its consumer are also on the provider
 * of the rewrite's first node and in no compiled group: every pattern
 * links its nodes through such single-use values, so a rewrite never
 * spans providers. */
bool ox_opt_single_use(const OxOpt* o, const OxValue* v);
/* The node that produces input i of n, when op/domain match (NULL else). */
OxNode* ox_opt_producer(const OxNode* n, size_t i, const char* op);
/* The rewrite may touch n: always on an unplaced graph; on a placed one, n is
 * on the rewrite's provider and in no compiled group. */
bool ox_opt_here(const OxOpt* o, const OxNode* n);
/* The rewrite's nodes are on the CPU provider (placed graphs), or the CPU
 * provider is the session's only one (unplaced): forms only the CPU
 * provider's kernels take (FusedConv / FusedMatMul with Z, the Gelu
 * activation). */
bool ox_opt_on_cpu(const OxOpt* o);
bool ox_opt_is(const OxNode* n, const char* op); /* ai.onnx op of that type */
/* A scalar (or all-equal, one-element) float constant: true and *out. */
bool ox_opt_const_scalar(const OxValue* v, double* out);
/* Constant int64/int32 list: heap copy in *out. */
bool ox_opt_const_ints(const OxValue* v, int64_t** out, size_t* count);
bool ox_opt_static_shape(const OxValue* v); /* rank known and every dim >= 0 */

/* --- edits ---------------------------------------------------------------------------- */
/* Makes input i of n read v (consumer lists kept right). */
OnyxStatus* ox_opt_set_input(OxNode* n, size_t i, OxValue* v);
/* Every consumer of `from` reads `to` instead. `from` must not be pinned. */
OnyxStatus* ox_opt_replace_uses(OxValue* from, OxValue* to);
/* Makes n produce `v` (which has no producer) at output slot i; the old
 * output value is left without a producer. */
void ox_opt_set_output(OxOpt* o, OxNode* n, size_t i, OxValue* v);
/* A fresh value name "<base>/opt<N>" that the graph does not hold yet. */
OnyxStatus* ox_opt_fresh_name(OxOpt* o, const char* base, char** out);
/* A new constant value holding t (taken). */
OnyxStatus* ox_opt_new_constant(OxOpt* o, const char* base, OxTensor* t, OxValue** out);
/* Adds a node reading `ins` and writing `outs` (values; outs must have no
 * producer). domain "" or "com.onyx" (imported on first use). */
OnyxStatus* ox_opt_add_node(OxOpt* o, const char* name, const char* op, const char* domain,
                            OxValue* const* ins, size_t n_in, OxValue* const* outs, size_t n_out,
                            OxNode** out);
OnyxStatus* ox_opt_attr_int(OxNode* n, const char* name, int64_t v);
OnyxStatus* ox_opt_attr_float(OxNode* n, const char* name, float v);
OnyxStatus* ox_opt_attr_string(OxNode* n, const char* name, const char* v);
/* Copies every attribute of src that the user set (not from_default). */
OnyxStatus* ox_opt_copy_attrs(OxNode* dst, const OxNode* src);
/* Drops values no node reads or writes (and which are no graph input or
 * output, nor read by a subgraph), constants included. */
OnyxStatus* ox_opt_sweep(OxOpt* o);
/* Removes a node (ox_graph_remove_node), noting it for the origins of the
 * nodes the rewrite adds. */
void ox_opt_remove(OxOpt* o, OxNode* n);
/* Forgets what the current rewrite did (before the next one). */
void ox_opt_journal_reset(OxOpt* o);
/* Records the current rewrite's origins on the nodes it added (what
 * ox_opt_rewrite_each does after each rewrite), for passes that rewrite
 * the graph as a whole. */
OnyxStatus* ox_opt_note_origins(OxOpt* o);

/* --- the transformers --------------------------------------------------------------------- */
OnyxStatus* ox_pass_eliminate(OxOpt* o, bool* changed); /* Identity, Dropout, no-op Cast */
OnyxStatus* ox_pass_shapes(OxOpt* o, bool* changed);    /* Shape/Size of static shapes */
OnyxStatus* ox_pass_fold(OxOpt* o, bool* changed);      /* constant folding */
OnyxStatus* ox_pass_cse(OxOpt* o, bool* changed);       /* common subexpressions */
OnyxStatus* ox_pass_matmul_add(OxOpt* o, bool* changed);
OnyxStatus* ox_pass_conv_bn(OxOpt* o, bool* changed);
OnyxStatus* ox_pass_conv_act(OxOpt* o, bool* changed);
OnyxStatus* ox_pass_matmul_residual(OxOpt* o, bool* changed);
OnyxStatus* ox_pass_layernorm(OxOpt* o, bool* changed);
OnyxStatus* ox_pass_gelu(OxOpt* o, bool* changed);
OnyxStatus* ox_pass_silu(OxOpt* o, bool* changed); /* Mul(x, Sigmoid(x)) -> com.onyx Silu */
OnyxStatus* ox_pass_attention(OxOpt* o, bool* changed);
OnyxStatus* ox_pass_qkv(OxOpt* o, bool* changed); /* Q, K, V projections in one GEMM */
/* opt_qdq.c: QDQ into QLinear ops; then DequantizeLinear of constants folded */
OnyxStatus* ox_pass_qdq(OxOpt* o, bool* changed);
OnyxStatus* ox_pass_qdq_layout(OxOpt* o, bool* changed); /* channels-last quantized chains */
OnyxStatus* ox_pass_qdq_fold(OxOpt* o, bool* changed);
/* opt_pad.c: a constant-mode Pad folded into its Conv / pooling reader's pads */
OnyxStatus* ox_pass_pad_fold(OxOpt* o, bool* changed);
/* The most axes a Pad the optimizer reads may have. */
#define OX_OPT_PAD_MAX_RANK 16
/* A Pad's amounts per axis of its input (known rank, at most
 * OX_OPT_PAD_MAX_RANK axes; axes not listed get 0): from the attribute
 * (opset < 11; opset 1's `paddings`) or the constant pads input and the
 * constant axes input (opset 18). False when they are not known at session
 * creation or do not fit the input's rank. */
bool ox_opt_pad_amounts(const OxNode* pad, int64_t* begin, int64_t* end);
/* opt_layout_nchwc.c: CPU conv chains in the blocked channel layout */
OnyxStatus* ox_pass_layout_nchwc(OxOpt* o, bool* changed);

#endif
