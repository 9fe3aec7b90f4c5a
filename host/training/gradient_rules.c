/* gradient_rules.c — per-op gradient rules for the Gradient builder
 * (gradient.c). Each rule receives dY, the gradient of the node's output 0,
 * and records the gradient of each input (summed down to the input's shape
 * where the op broadcasts):
 *   Add:      dA = dY, dB = dY
 *   Sub:      dA = dY, dB = -dY
 *   Mul:      dA = dY * B, dB = dY * A
 *   Div:      dA = dY / B, dB = -dY * A / (B * B)
 *   Neg:      dA = -dY
 *   Identity: dA = dY
 *   MatMul (2-D): dA = dY @ B^T, dB = A^T @ dY */
#include <string.h>
#include "ox_training.h"

static OnyxStatus* op1(OxGradBuilder* b, const char* op, const char* a, const char** out) {
  const char* ins[] = {a};
  return ox_grad_node(b, op, ins, 1, out);
}

static OnyxStatus* op2(OxGradBuilder* b, const char* op, const char* a, const char* c,
                       const char** out) {
  const char* ins[] = {a, c};
  return ox_grad_node(b, op, ins, 2, out);
}

/* Records g (shaped like n's output) for input i, reduced to its shape. */
static OnyxStatus* give(OxGradBuilder* b, const OxNode* n, size_t i, const char* g) {
  const char* r;
  OX_TRY(ox_grad_reduce_to(b, g, n->outputs[0], n->inputs[i], &r));
  return ox_grad_add(b, n->inputs[i], r);
}

static OnyxStatus* rule_add(OxGradBuilder* b, const OxNode* n, const char* dy) {
  OX_TRY(give(b, n, 0, dy));
  return give(b, n, 1, dy);
}

static OnyxStatus* rule_sub(OxGradBuilder* b, const OxNode* n, const char* dy) {
  const char* neg;
  OX_TRY(give(b, n, 0, dy));
  OX_TRY(op1(b, "Neg", dy, &neg));
  return give(b, n, 1, neg);
}

static OnyxStatus* rule_mul(OxGradBuilder* b, const OxNode* n, const char* dy) {
  const char *ga, *gb;
  OX_TRY(op2(b, "Mul", dy, n->inputs[1]->name, &ga));
  OX_TRY(give(b, n, 0, ga));
  OX_TRY(op2(b, "Mul", dy, n->inputs[0]->name, &gb));
  return give(b, n, 1, gb);
}

static OnyxStatus* rule_div(OxGradBuilder* b, const OxNode* n, const char* dy) {
  const char *ga, *num, *den, *q, *gb;
  const char *A = n->inputs[0]->name, *B = n->inputs[1]->name;
  OX_TRY(op2(b, "Div", dy, B, &ga));
  OX_TRY(give(b, n, 0, ga));
  OX_TRY(op2(b, "Mul", dy, A, &num));
  OX_TRY(op2(b, "Mul", B, B, &den));
  OX_TRY(op2(b, "Div", num, den, &q));
  OX_TRY(op1(b, "Neg", q, &gb));
  return give(b, n, 1, gb);
}

static OnyxStatus* rule_neg(OxGradBuilder* b, const OxNode* n, const char* dy) {
  const char* g;
  OX_TRY(op1(b, "Neg", dy, &g));
  return ox_grad_add(b, n->inputs[0], g);
}

static OnyxStatus* rule_identity(OxGradBuilder* b, const OxNode* n, const char* dy) {
  return ox_grad_add(b, n->inputs[0], dy);
}

static OnyxStatus* rule_matmul(OxGradBuilder* b, const OxNode* n, const char* dy) {
  const OxValue *A = n->inputs[0], *B = n->inputs[1];
  if (A->rank != 2 || B->rank != 2)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "the gradient of MatMul node '%s' is only built for 2-D inputs", n->name);
  const char *bt, *at, *ga, *gb;
  OX_TRY(op1(b, "Transpose", B->name, &bt));
  OX_TRY(op2(b, "MatMul", dy, bt, &ga));
  OX_TRY(ox_grad_add(b, A, ga));
  OX_TRY(op1(b, "Transpose", A->name, &at));
  OX_TRY(op2(b, "MatMul", at, dy, &gb));
  return ox_grad_add(b, B, gb);
}

static const struct {
  const char* op;
  OxGradRule rule;
} ox_rules[] = {
    {"Add", rule_add}, {"Sub", rule_sub},           {"Mul", rule_mul},       {"Div", rule_div},
    {"Neg", rule_neg}, {"Identity", rule_identity}, {"MatMul", rule_matmul},
};

OxGradRule ox_grad_rule(const char* domain, const char* op_type) {
  if (domain && *domain) return NULL;
  for (size_t i = 0; i < OX_ARRAY_LEN(ox_rules); i++)
    if (!strcmp(ox_rules[i].op, op_type)) return ox_rules[i].rule;
  return NULL;
}
