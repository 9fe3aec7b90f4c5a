/* ox_fused_ew.h — the program of com.onyx FusedElementwise (schemas_fused.c),
 * as the host reads and writes it: the optimizer's fuse_elementwise pass
 * (host/optimizer/opt_fuse_elementwise.c) builds programs, shape inference
 * checks them. The providers' kernels read the same format through their own
 * headers (providers/gpu-common/gpu_fused.h), which use the same numbers.
 *
 * The node's inputs X0..Xn-1 (n <= OX_FEW_MAX_INPUTS, numpy broadcasting to
 * Y's shape) start in registers 0..n-1. Attribute `program` (ints) holds
 * instructions of four ints each: opcode, dst, a, b. Operand a (and b for
 * binary ops) names register a when a >= 0 and immediate -1-a (attribute
 * `immediates`, floats) when a < 0. Unary ops with parameters take them from
 * immediates: b < 0 names the first (LeakyRelu's and Elu's alpha, Clip's
 * min, HardSigmoid's alpha) and the one after it the second (Clip's max,
 * HardSigmoid's beta); a unary op without parameters has b = 0. dst is a
 * register below OX_FEW_MAX_REGS; every register an instruction reads is an
 * input's or was written by an earlier instruction. Y is the register the
 * last instruction writes. */
#ifndef OX_FUSED_EW_H
#define OX_FUSED_EW_H

#include <stddef.h>
#include <stdint.h>

#define OX_FEW_MAX_INPUTS 8
#define OX_FEW_MAX_REGS   16
#define OX_FEW_MAX_INSTR  64
#define OX_FEW_MAX_IMM    64

typedef enum OxFewOp {
  /* binary: dst = a op b */
  OX_FEW_ADD = 0,
  OX_FEW_SUB = 1,
  OX_FEW_MUL = 2,
  OX_FEW_DIV = 3,
  OX_FEW_POW = 4,
  OX_FEW_MAX = 5,
  OX_FEW_MIN = 6,
  /* unary: dst = op(a) */
  OX_FEW_NEG = 7,
  OX_FEW_ABS = 8,
  OX_FEW_EXP = 9,
  OX_FEW_LOG = 10,
  OX_FEW_SQRT = 11,
  OX_FEW_RECIPROCAL = 12,
  OX_FEW_TANH = 13,
  OX_FEW_SIGMOID = 14,
  OX_FEW_ERF = 15,
  OX_FEW_RELU = 16,
  OX_FEW_LEAKY_RELU = 17,   /* alpha */
  OX_FEW_ELU = 18,          /* alpha */
  OX_FEW_CLIP = 19,         /* min, max */
  OX_FEW_HARD_SIGMOID = 20, /* alpha, beta */
  OX_FEW_HARD_SWISH = 21,   /* x * max(0, min(1, x / 6 + 1/2)) */
  OX_FEW_SOFTPLUS = 22,
  OX_FEW_GELU = 23,      /* exact: x (1 + erf(x / sqrt 2)) / 2 */
  OX_FEW_GELU_TANH = 24, /* x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2 */
  OX_FEW_SILU = 25,      /* x * sigmoid(x) */
  OX_FEW_OP_COUNT = 26
} OxFewOp;

/* Parameters an op takes from the immediates: 0 binary (then -1), 0, 1 or
 * 2 for unary ops; -2 for an unknown code. */
static inline int ox_few_params(int64_t op) {
  if (op < 0 || op >= OX_FEW_OP_COUNT) return -2;
  if (op <= OX_FEW_MIN) return -1;
  switch (op) {
  case OX_FEW_LEAKY_RELU:
  case OX_FEW_ELU:
    return 1;
  case OX_FEW_CLIP:
  case OX_FEW_HARD_SIGMOID:
    return 2;
  default:
    return 0;
  }
}

/* Checks a program for a node of n_inputs inputs and n_imm immediates.
 * NULL when valid, else a static reason with *at the instruction it is
 * about (-1: the program as a whole) and *value the offending number. */
const char* ox_few_check(size_t n_inputs, const int64_t* prog, size_t n_prog, size_t n_imm,
                         int64_t* at, int64_t* value);

#endif /* OX_FUSED_EW_H */
