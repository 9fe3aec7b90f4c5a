/* ox_optimizer.h — the graph optimizer (ARCHITECTURE.md §1 step 3).
 *
 * Transformers rewrite a resolved graph in place; each belongs to a level
 * (basic, extended, layout) and the manager runs the transformers of every
 * enabled level, level by level, until none changes the graph or the
 * iteration cap is reached. After a transformer reports a change the graph is
 * sorted and resolved again, so every node has its schema and inferred
 * types and shapes before the next transformer looks at it.
 *
 * Every transformer must keep the graph's outputs equal (up to float
 * rounding for the fusions); tests/unit/optimizer checks each one by running
 * a model before and after. docs/optimizer.md describes them. */
#ifndef OX_OPTIMIZER_H
#define OX_OPTIMIZER_H

#include "ox_graph.h"
#include "onyx/onyx.h"
#include "onyx/onyx_ep.h"

/* The domain of the fused ops the optimizer inserts (schemas_contrib.c,
 * providers/cpu/cpu_contrib.c). */
#define OX_CONTRIB_DOMAIN "com.onyx"

/* Evaluates one node whose inputs are all constants: fills outs[i] (host
 * tensors, owned by the caller) for every present output. An error means
 * "cannot fold this node" and is not fatal. */
typedef OnyxStatus* (*OxEvalFn)(void* ctx, OxNode* n, OxTensor** outs);

typedef struct OxOptConfig {
  OnyxOptimizationLevel level;
  const OxSchemaRegistry* const* customs; /* for re-resolving (may hold NULLs) */
  size_t n_customs;
  OxEvalFn eval; /* NULL: no constant folding through kernels */
  void* eval_ctx;
  int max_iterations;     /* per level; 0: 10 */
  size_t max_fold_bytes;  /* a folded output larger than this stays a node; 0: 64 MiB */
  bool contrib_available; /* com.onyx kernels exist (the CPU provider is in the session) */
  /* Whether node n may be rewritten into a part of the op `op` of `domain`
   * ("" for ONNX); NULL: always. The session answers false when the first of
   * its providers with a kernel for n has none for the op, so that no fusion
   * moves a node off the provider that would have run it (a GPU provider's
   * Conv into the CPU provider's com.onyx FusedConv). Each fusion asks about
   * its heavy node: the MatMul, Gemm or Conv, the Erf of a Gelu, the first
   * ReduceMean of a LayerNormalization, the attention's second MatMul; the
   * Q, K, V merge asks about the Q projection and the attention. */
  bool (*may_fuse)(void* ctx, const OxNode* n, const char* domain, const char* op);
  void* fuse_ctx;
  /* The CPU provider is the session's only provider. Conv + Add + activation
   * into FusedConv with a Z input runs only then on an unplaced graph:
   * oneDNN fuses residual sums into its own Conv chains, which a FusedConv
   * with Z would break. */
  bool cpu_alone;
  /* Which transformers run:
   * - OX_OPT_PHASE_ALL: every transformer of the level (tests; a graph
   *   without providers);
   * - OX_OPT_PHASE_PLACEMENT: before placement, what keeps the model's ops:
   *   the basic level and user transformers;
   * - OX_OPT_PHASE_FUSION: after placement, the built-in fusions, each
   *   inside one provider's nodes (OxNode.ep, not in a compiled group), the
   *   nodes they add placed on that provider. */
  int phase;
  int32_t cpu_ep; /* OX_OPT_PHASE_FUSION: the CPU provider's index, -1: none */
} OxOptConfig;

enum { OX_OPT_PHASE_ALL = 0, OX_OPT_PHASE_PLACEMENT = 1, OX_OPT_PHASE_FUSION = 2 };

typedef struct OxOptStats {
  size_t nodes_before, nodes_after;
  size_t iterations;
  /* Per built-in transformer: how many rewrites it made. */
  size_t folded, eliminated, cse, shapes, gemm, fused_matmul, conv_bn, conv_act, layernorm, gelu,
      attention, matmul_act, conv_add, matmul_add_z, qkv, silu, pad_fold;
  size_t nchwc, nchwc_reorders; /* layout_nchwc: blocked convs, reorders */
  size_t user;                  /* user transformers that reported a change */
  double seconds;
} OxOptStats;

/* Runs the optimizer on a resolved graph. The graph stays resolved. */
OnyxStatus* ox_optimize(OxGraph* g, const OxOptConfig* cfg, OxOptStats* stats);

/* After edits made outside the transformers (a provider's transform):
 * drops values nothing reads or writes and resolves the graph again. */
OnyxStatus* ox_optimize_tidy(OxGraph* g, const OxOptConfig* cfg);

/* One-line summary of stats ("12 -> 9 nodes: 2 Gemm, ..."); malloc'd. */
char* ox_opt_stats_str(const OxOptStats* st);

/* The level's name ("disabled", "basic", ...). */
const char* ox_opt_level_name(OnyxOptimizationLevel level);

/* --- Provider transforms (OnyxEp.transform): host/optimizer/opt_provider.c ------ */
/* Runs provider ep's transform (if it has one) over its single-node
 * placements (OxNode.ep == ep_index, no group) in g; each edit is checked and
 * applied at once. schemas: every provider's schema registry (may hold
 * NULLs), searched when an edit brings in a domain the model does not import.
 * *changed when the transform edited the graph (then not yet resolved). */
OnyxStatus* ox_provider_transform(OxGraph* g, OnyxEp* ep, int32_t ep_index, const char* ep_name,
                                  const OxSchemaRegistry* const* schemas, size_t n_schemas,
                                  bool* changed);
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

#endif
