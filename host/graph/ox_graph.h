/* ox_graph.h — building, ordering and resolving the IR graph. */
#ifndef OX_GRAPH_H
#define OX_GRAPH_H

#include "ox_ir.h"
#include "ox_schema.h"
#include "onyx/onyx_ep.h"

OnyxStatus* ox_graph_new(const char* name, OxGraph** out);
/* Frees nodes, values, initializers, attributes, subgraphs and mappings. */
void ox_graph_free(OxGraph* g);

/* The value named `name`, created (type undefined, rank -1) if absent. */
OnyxStatus* ox_graph_value(OxGraph* g, const char* name, OxValue** out);
OxValue* ox_graph_find(const OxGraph* g, const char* name);

/* Adds a node reading and writing values by name ("" or NULL: absent
 * optional). Sets producer/consumer links. A value produced by two nodes, or
 * produced by a node and also a graph input or initializer, is an error
 * naming both. `name` NULL or "": the node is named "<op_type>_<index>". */
OnyxStatus* ox_graph_add_node(OxGraph* g, const char* name, const char* op_type, const char* domain,
                              const char* const* inputs, size_t n_in, const char* const* outputs,
                              size_t n_out, OxNode** out);
/* Moves *attr into the node (attr is zeroed). A duplicate name is an error. */
OnyxStatus* ox_node_add_attr(OxNode* n, OxAttr* attr);
OnyxStatus* ox_graph_add_input(OxGraph* g, OxValue* v);
OnyxStatus* ox_graph_add_output(OxGraph* g, OxValue* v);
/* Makes the outer-scope values that n's subgraphs (GRAPH/GRAPHS attributes,
 * at any depth) read into implicit inputs of n (node->n_implicit), so that
 * ordering, liveness and the optimizer see them. Idempotent. */
OnyxStatus* ox_node_link_subgraphs(OxGraph* g, OxNode* n);
/* A deep copy of subgraph src (values with their types, constants and
 * outer-scope marks, inputs, nodes with their attributes and nested
 * subgraphs, outputs), enclosed by `parent`. */
OnyxStatus* ox_graph_clone(const OxGraph* src, OxGraph* parent, OxGraph** out);
/* Whether a node reads or writes a non-tensor value or has a subgraph: only
 * the host runs such nodes. */
bool ox_node_needs_host(const OxNode* n);
/* Replaces the nodes of an op that a phase above the graph builds out of
 * other ops (the Gradient op of ai.onnx.preview.training:
 * host/training/gradient.c), once the values they read are typed; *changed
 * when it rewrote the graph. */
typedef OnyxStatus* (*OxGraphExpandFn)(OxGraph* g, bool* changed);
/* Whether the host runs this node (host/exec/control.c, sequence.c): a flow
 * op (If, Loop, Scan, SequenceMap, FlexAttention: ox_flow_op), a sequence
 * or optional op (ox_seq_op, by op type in the default domain), or a node
 * ox_node_needs_host names. */
bool ox_host_op(const OxNode* n);
bool ox_flow_op(const OxNode* n);
bool ox_flex_op(const OxNode* n); /* ai.onnx.preview FlexAttention */
bool ox_seq_op(const char* op_type);
/* ai.onnx.ml ZipMap, DictVectorizer and CastMap: ops over map values, which
 * the host runs (host/exec/ml_map.c; inference in host_infer.c). */
bool ox_ml_map_op(const OxNode* n);
/* CastMap's output element type from its cast_to (UNDEFINED: not valid). */
OnyxElemType ox_castmap_to(const OxNode* n);
/* Resolve-time inference of a host op (host/graph/host_infer.c): types (and
 * kinds) of its outputs; for ops with subgraphs, types the subgraphs' inputs
 * and outer-scope reads and resolves them first. Errors name the node. */
OnyxStatus* ox_host_infer(OxGraph* g, OxNode* n, const OxSchemaRegistry* const* customs,
                          size_t n_customs, OxGraphExpandFn expand);
/* Scan's layout (opset 8 has sequence_lens first and a batch axis), from
 * node n and its body; body_inputs: the body's formal inputs (a nested plan
 * adds outer values). Errors name the node (host/graph/host_infer.c). */
typedef struct OxScanShape {
  bool v8;
  size_t first; /* index of the first state input */
  size_t n_state, n_scan_in, n_scan_out;
} OxScanShape;
OnyxStatus* ox_scan_shape(const OxNode* n, const OxGraph* body, size_t body_inputs,
                          OxScanShape* sh);

/* Removes a node (used by the partitioner when fusing); unlinks consumers. */
void ox_graph_remove_node(OxGraph* g, OxNode* n);

/* Reorders g->nodes topologically (stable: among ready nodes, the original
 * order). A cycle is an error naming a node on it; a node input that no node,
 * graph input or initializer produces is an error naming both. */
OnyxStatus* ox_graph_toposort(OxGraph* g);

/* The same, choosing among ready nodes by node->priority (lower first) and
 * then model order: the "priority" execution order. */
OnyxStatus* ox_graph_order(OxGraph* g, bool by_priority);

/* Resolve: for each node in order, look up its schema (custom registries
 * first, then built-in), check arity and attributes (filling defaults), and
 * infer output types and shapes. Every error names the source file, node and
 * op. `customs` may hold NULL entries. */
OnyxStatus* ox_graph_resolve(OxGraph* g, const OxSchemaRegistry* const* customs, size_t n_customs);
/* ox_graph_resolve that first lets `expand` (NULL: none) replace the
 * Gradient nodes of g and of its subgraphs, as the session's resolve does. */
OnyxStatus* ox_graph_resolve_expanding(OxGraph* g, const OxSchemaRegistry* const* customs,
                                       size_t n_customs, OxGraphExpandFn expand);

/* Unmaps external-data mappings (host/model owns mapping; graph frees). */
void ox_graph_unmap_all(OxGraph* g);

/* --- Graph views: what get_capability, compile and transform see ------------------ */
struct OnyxGraphView {
  OxNode** nodes;
  size_t n_nodes;
  OxValue** inputs;
  size_t n_inputs;
  OxValue** outputs;
  size_t n_outputs;
};
void ox_view_clear(OnyxGraphView* v);

/* A node of a set (in_group, per node index) that a path leaving the set
 * re-enters, or NULL when the set is convex; `downstream` is scratch of
 * g->n_nodes zeroed entries. */
const OxNode* ox_nonconvex_witness(const OxGraph* g, const bool* in_group, bool* downstream);

#endif
