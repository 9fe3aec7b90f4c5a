/* gradient_rules.h — shorthands shared by the rule files
 * (gradient_rules*.c): inside a rule, `b` is the builder and `n` the node. */
#ifndef OX_GRADIENT_RULES_H
#define OX_GRADIENT_RULES_H

#include "ox_training.h"

#define I(k)             ox_grad_I(n, k)
#define O(k)             ox_grad_O(n, k)
#define GO(k)            ox_grad_GO(b, n, k)
#define WANTS(k)         ox_grad_wants(b, n, k)
#define OP1(op, a)       ox_grad_op1(b, op, a)
#define OP2(op, a, c)    ox_grad_op2(b, op, a, c)
#define OP3(op, a, c, d) ox_grad_op3(b, op, a, c, d)
/* The element type of input k / output k. */
#define TI(k) (n->inputs[k]->type)
#define TO(k) (n->outputs[k]->type)
/* A scalar constant of input 0's type. */
#define K(v) ox_grad_scalar(b, TI(0), v)

#endif
