/* ox_training.h — training support: the gradient builder behind
 * ai.onnx.preview.training Gradient (gradient.c), with per-op rules in a
 * registry versioned by opset range (gradient_rules*.c; docs/training.md,
 * "Gradient rules"). The optimizers (Adagrad, Momentum, Adam) are ordinary
 * CPU kernels (providers/cpu/cpu_optim.c). */
#ifndef OX_TRAINING_H
#define OX_TRAINING_H

#include "ox_graph.h"

/* The domain of the gradient ops the rules emit (ReluGrad, ConvGrad, ...). */
#define OX_TRAINING_DOMAIN "com.onyx.training"

/* Replaces every Gradient node of g by the nodes that compute its outputs
 * (dy/dx for each name of `xs`, by reverse-mode differentiation of the
 * forward nodes on the paths from xs to y). The forward nodes must be
 * resolved (types, and shapes where a rule needs them); the graph must be
 * resolved again afterwards. An op on the path without a gradient rule is an
 * error naming the Gradient node, that op and node, and the path from y to
 * it. *changed: any was replaced. */
OnyxStatus* ox_gradient_expand(OxGraph* g, bool* changed);

/* --- the builder's helpers, for rules --------------------------------------------------- */
/* Errors are sticky: the first failing helper records its status in the
 * builder, later helpers do nothing and return "" (names) or NULL, and a
 * rule returns ox_grad_err(b) at its end. */
typedef struct OxGradBuilder OxGradBuilder;

/* The pending error (taken: the builder forgets it). */
OnyxStatus* ox_grad_err(OxGradBuilder* b);
/* Records an error (the first one wins; later ones are released). */
void ox_grad_fail(OxGradBuilder* b, OnyxStatus* st);

/* The name of input/output i of n, NULL when absent. */
const char* ox_grad_I(const OxNode* n, size_t i);
const char* ox_grad_O(const OxNode* n, size_t i);
/* The gradient of output i of the node being differentiated (the sum of
 * every contribution), NULL when no gradient flows there. */
const char* ox_grad_GO(const OxGradBuilder* b, const OxNode* n, size_t i);
/* Whether input i of n wants a gradient: present, floating point, and
 * depending on one of the Gradient node's xs (stop-gradient otherwise). */
bool ox_grad_wants(const OxGradBuilder* b, const OxNode* n, size_t i);
/* Records g (shaped like input i) as a contribution to input i's gradient;
 * nothing when the input does not want one. */
void ox_grad_GI(OxGradBuilder* b, const OxNode* n, size_t i, const char* g);
/* The same for g shaped like dims[0..rank) (rank -1: unknown), summed down
 * to input i's shape (undoing broadcasting). Static shapes reduce over
 * constant axes; otherwise the axes come from Shape at run time. */
void ox_grad_GI_from(OxGradBuilder* b, const OxNode* n, size_t i, const char* g,
                     const int64_t* dims, int32_t rank);
/* ox_grad_GI_from with the shape of output 0 (element-wise ops). */
void ox_grad_GI_bcast(OxGradBuilder* b, const OxNode* n, size_t i, const char* g);

/* Adds a node (domain "" is ai.onnx; OX_TRAINING_DOMAIN is imported on
 * first use) reading `ins` (NULL entries: absent) and writing n_out new
 * values, whose names go to outs[] (NULL outs: not wanted, want[k] false:
 * that output is left absent). Returns output 0's name. */
const char* ox_grad_op(OxGradBuilder* b, const char* op, const char* domain, const char* const* ins,
                       size_t n_in, size_t n_out, const bool* want, const char** outs);
const char* ox_grad_op1(OxGradBuilder* b, const char* op, const char* a);
const char* ox_grad_op2(OxGradBuilder* b, const char* op, const char* a, const char* c);
const char* ox_grad_op3(OxGradBuilder* b, const char* op, const char* a, const char* c,
                        const char* d);
/* Attributes of the node added last. */
void ox_grad_attr_int(OxGradBuilder* b, const char* name, int64_t v);
void ox_grad_attr_float(OxGradBuilder* b, const char* name, float v);
void ox_grad_attr_string(OxGradBuilder* b, const char* name, const char* v);
void ox_grad_attr_ints(OxGradBuilder* b, const char* name, const int64_t* v, size_t n);
/* Copies attribute `name` of n (if n has it) to the node added last. */
void ox_grad_attr_copy(OxGradBuilder* b, const OxNode* n, const char* name);
/* Copies every attribute of n except `skip` (NULL: none). */
void ox_grad_attrs_copy(OxGradBuilder* b, const OxNode* n, const char* skip);

/* Constants: an int64 1-D tensor; a scalar of element type `type`
 * (floating or integer). */
const char* ox_grad_i64(OxGradBuilder* b, const int64_t* v, size_t n);
const char* ox_grad_scalar(OxGradBuilder* b, OnyxElemType type, double v);
/* ReduceSum / Unsqueeze / Squeeze over constant axes, in the form the
 * model's opset takes (attribute before 13, input from 13). keepdims for
 * ReduceSum. */
const char* ox_grad_reduce_sum(OxGradBuilder* b, const char* x, const int64_t* axes, size_t n,
                               bool keepdims);
/* Any Reduce* op the same way (axes as an input from 18, ReduceSum 13). */
const char* ox_grad_reduce(OxGradBuilder* b, const char* op, const char* x, const int64_t* axes,
                           size_t n, bool keepdims);
const char* ox_grad_unsqueeze(OxGradBuilder* b, const char* x, const int64_t* axes, size_t n);
const char* ox_grad_squeeze(OxGradBuilder* b, const char* x, const int64_t* axes, size_t n);
/* Cast to an element type. */
const char* ox_grad_cast(OxGradBuilder* b, const char* x, OnyxElemType to);
/* Zeros of the shape of value x, of element type `type`. */
const char* ox_grad_zeros_like(OxGradBuilder* b, const char* x, OnyxElemType type);
/* g broadcast to the shape of value x (Expand; before opset 8, x * 0 + g). */
const char* ox_grad_expand_like(OxGradBuilder* b, const char* g, const char* x, OnyxElemType type);
/* The ai.onnx opset of the model. */
int64_t ox_grad_opset(const OxGradBuilder* b);

/* --- the registry (gradient_rules*.c) -------------------------------------------------- */
/* A rule reads the gradients of n's outputs (ox_grad_GO) and records those
 * of its inputs (ox_grad_GI*); it returns ox_grad_err(b) or its own error. */
typedef OnyxStatus* (*OxGradRule)(OxGradBuilder* b, const OxNode* n);

/* One entry: the op (domain "" is ai.onnx) at versions since..until of its
 * schema (until 0: every later version). */
typedef struct OxGradRuleDef {
  const char* domain;
  const char* op;
  int32_t since, until;
  OxGradRule rule;
} OxGradRuleDef;

/* The tables of each rules file. */
const OxGradRuleDef* ox_grad_rules_math(size_t* n);   /* gradient_rules.c */
const OxGradRuleDef* ox_grad_rules_nn(size_t* n);     /* gradient_rules_nn.c */
const OxGradRuleDef* ox_grad_rules_tensor(size_t* n); /* gradient_rules_tensor.c */
const OxGradRuleDef* ox_grad_rules_seq(size_t* n);    /* gradient_rules_seq.c */
const OxGradRuleDef* ox_grad_rules_flow(size_t* n);   /* If, Loop, Scan: gradient.c */

/* Resize in linear or cubic mode (gradient_rules_seq.c); the Resize rule of
 * gradient_rules_tensor.c hands those modes to it. */
OnyxStatus* ox_grad_rule_resize_interp(OxGradBuilder* b, const OxNode* n);

/* The rule for an op at schema version `version`; NULL: none. */
OxGradRule ox_grad_rule_find(const char* domain, const char* op, int32_t version);

#endif
