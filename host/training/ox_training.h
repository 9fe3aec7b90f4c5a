/* ox_training.h — training support: the gradient builder behind
 * ai.onnx.preview.training Gradient (gradient.c, with per-op rules in
 * gradient_rules.c). The optimizers (Adagrad, Momentum, Adam) are ordinary
 * CPU kernels (providers/cpu/cpu_cf.c). */
#ifndef OX_TRAINING_H
#define OX_TRAINING_H

#include "ox_graph.h"

/* Replaces every Gradient node of g by the nodes that compute its outputs
 * (dy/dx for each name of `xs`, by reverse-mode differentiation of the
 * forward nodes on the paths from xs to y). The forward nodes must be
 * resolved (types and, where broadcasting happens, static shapes); the graph
 * must be resolved again afterwards. An op without a gradient rule is an
 * error naming the Gradient node and that op. *changed: any was replaced. */
OnyxStatus* ox_gradient_expand(OxGraph* g, bool* changed);

/* --- rules (gradient_rules.c) ----------------------------------------------------------- */
typedef struct OxGradBuilder OxGradBuilder;

/* Adds a node to the gradient graph; *out gets the name of its (single, new)
 * output. Inputs by value name. */
OnyxStatus* ox_grad_node(OxGradBuilder* b, const char* op, const char* const* ins, size_t n_in,
                         const char** out);
/* dy (of y's shape) summed down to the shape of `target` (broadcasting). */
OnyxStatus* ox_grad_reduce_to(OxGradBuilder* b, const char* dy, const OxValue* y,
                              const OxValue* target, const char** out);
/* Records a contribution to the gradient of a forward value. */
OnyxStatus* ox_grad_add(OxGradBuilder* b, const OxValue* v, const char* grad);
/* Adds a constant int64 1-D value; *out gets its name. */
OnyxStatus* ox_grad_const_i64(OxGradBuilder* b, const int64_t* v, size_t n, const char** out);
int64_t ox_grad_opset(const OxGradBuilder* b);
OxNode* ox_grad_last_node(const OxGradBuilder* b);

/* The rule of a forward node: given dy (gradient of its output 0), records
 * the gradients of its inputs. NULL: the op has no rule. */
typedef OnyxStatus* (*OxGradRule)(OxGradBuilder* b, const OxNode* n, const char* dy);
OxGradRule ox_grad_rule(const char* domain, const char* op_type);

#endif
