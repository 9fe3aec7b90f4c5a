/* gpu_fused.h — com.onyx FusedElementwise on the GPU providers: a chain of
 * element-wise ops that the optimizer's fuse_elementwise pass fused into one
 * node runs as one kernel (gpu_fused.cu; emulated by gpu_emu_fused.c), each
 * thread interpreting the node's program over registers for its elements
 * (gpu_fused_body.h); the host side (gpu_fused.c) checks the program, works
 * out the inputs' broadcast strides and launches. The program's format is the
 * op's (schemas/ox_fused_ew.h on the host side): the opcodes below keep its
 * numbers. Same conventions as gpu_kernels.h: the launcher queues work on
 * `stream` and returns the vendor's launch error (0: queued); every pointer is
 * device memory. Float32 only. */
#ifndef ONYX_GPU_FUSED_H
#define ONYX_GPU_FUSED_H

#include <stdint.h>

#include "gpu_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GPU_FE_MAX_INPUTS 8
#define GPU_FE_MAX_REGS   16
#define GPU_FE_MAX_INSTR  64
#define GPU_FE_MAX_IMM    64

/* The opcodes of FusedElementwise's `program` (4 ints per instruction:
 * opcode, dst, a, b; an operand v >= 0 is register v, v < 0 immediate -1-v;
 * a unary op's parameters are the immediates b names, and the next one). */
typedef enum GpuFeOp {
  GPU_FE_ADD = 0,
  GPU_FE_SUB = 1,
  GPU_FE_MUL = 2,
  GPU_FE_DIV = 3,
  GPU_FE_POW = 4,
  GPU_FE_MAX = 5,
  GPU_FE_MIN = 6,
  GPU_FE_NEG = 7,
  GPU_FE_ABS = 8,
  GPU_FE_EXP = 9,
  GPU_FE_LOG = 10,
  GPU_FE_SQRT = 11,
  GPU_FE_RECIPROCAL = 12,
  GPU_FE_TANH = 13,
  GPU_FE_SIGMOID = 14,
  GPU_FE_ERF = 15,
  GPU_FE_RELU = 16,
  GPU_FE_LEAKY_RELU = 17,
  GPU_FE_ELU = 18,
  GPU_FE_CLIP = 19,
  GPU_FE_HARD_SIGMOID = 20,
  GPU_FE_HARD_SWISH = 21,
  GPU_FE_SOFTPLUS = 22,
  GPU_FE_GELU = 23,
  GPU_FE_GELU_TANH = 24,
  GPU_FE_SILU = 25,
  GPU_FE_OP_COUNT = 26
} GpuFeOp;

/* A checked program (gpu_fused.c): n_instr instructions in code, the
 * immediates, and the register Y is read from. */
typedef struct GpuFeProgram {
  int32_t n_instr;
  int32_t out;
  int32_t code[4 * GPU_FE_MAX_INSTR];
  float imm[GPU_FE_MAX_IMM];
} GpuFeProgram;

/* One launch: y (n elements, contiguous, over dims[0..rank)) from the n_in
 * inputs. flat: every input either has y's shape (full[j], element i) or
 * one element (element 0), so no index is decomposed; else input j's
 * element is sum over d of coordinate d times strides[j][d] (0 where it
 * broadcasts). Passed by value as the kernel's argument (under 2 KiB). */
typedef struct GpuFeArgs {
  const float* x[GPU_FE_MAX_INPUTS];
  float* y;
  int64_t n;
  int32_t n_in, rank, flat;
  uint8_t full[GPU_FE_MAX_INPUTS];
  int64_t dims[GPU_MAX_RANK];
  int64_t strides[GPU_FE_MAX_INPUTS][GPU_MAX_RANK];
  GpuFeProgram prog;
} GpuFeArgs;

/* Queues the fused kernel over a->n elements. */
int gpuk_fused(const GpuFeArgs* a, void* stream);

#ifdef __cplusplus
}
#endif

#if !defined(__CUDACC__) && !defined(__HIPCC__)
#include <string.h>

#include "onyx/onyx_ep.h"
/* Registers com.onyx FusedElementwise (gpu_fused.c). */
OnyxStatus* gpu_register_fused_kernels(OnyxKernelRegistry* r);
/* Parameters an op takes from the immediates: -1 binary, 0 to 2 unary, -2
 * an unknown code. */
static inline int gpu_fe_params(int64_t op) {
  if (op < 0 || op >= GPU_FE_OP_COUNT) return -2;
  if (op <= GPU_FE_MIN) return -1;
  if (op == GPU_FE_LEAKY_RELU || op == GPU_FE_ELU) return 1;
  if (op == GPU_FE_CLIP || op == GPU_FE_HARD_SIGMOID) return 2;
  return 0;
}

/* NULL when the program is valid for n_inputs inputs and n_imm immediates
 * (every field in range, every register read set before); else a static
 * reason, *at the instruction (-1: the whole program) and *value the
 * offending number. Fills p when valid. In the header so that the tests call
 * it directly. */
static inline const char* gpu_fused_check(const int64_t* prog, size_t n_prog, const float* imm,
                                          size_t n_imm, size_t n_inputs, GpuFeProgram* p,
                                          int64_t* at, int64_t* value) {
  *at = -1;
  *value = 0;
  if (n_inputs < 1 || n_inputs > GPU_FE_MAX_INPUTS) {
    *value = (int64_t)n_inputs;
    return "the node must have 1 to 8 inputs";
  }
  if (n_imm > GPU_FE_MAX_IMM) {
    *value = (int64_t)n_imm;
    return "more than 64 immediates";
  }
  if (!prog || !n_prog || n_prog % 4) {
    *value = (int64_t)n_prog;
    return "the program must hold whole instructions of 4 ints (opcode, dst, a, b), at least one";
  }
  if (n_prog / 4 > GPU_FE_MAX_INSTR) {
    *value = (int64_t)(n_prog / 4);
    return "more than 64 instructions";
  }
  uint32_t defined = (1u << n_inputs) - 1u; /* registers holding a value */
  for (size_t k = 0; k < n_prog / 4; k++) {
    const int64_t* ins = prog + 4 * k;
    *at = (int64_t)k;
    const int params = gpu_fe_params(ins[0]);
    if (params == -2) {
      *value = ins[0];
      return "unknown opcode";
    }
    for (int j = 0; j < 2; j++) {
      const int64_t v = ins[2 + j];
      *value = v;
      if (j == 1 && params == 0) {
        if (v != 0) return "operand b of a unary op without parameters must be 0";
        continue;
      }
      if (v >= 0) {
        if (j == 1 && params > 0) return "a parameter must be an immediate (a negative operand)";
        if (v >= GPU_FE_MAX_REGS) return "register out of range (0 to 15)";
        if (!(defined >> v & 1u))
          return "reads a register that no input or earlier instruction set";
      } else {
        const int64_t last = j == 1 && params == 2 ? 1 : 0;
        if (v < -(int64_t)GPU_FE_MAX_IMM || -1 - v + last >= (int64_t)n_imm)
          return "immediate out of range";
      }
    }
    *value = ins[1];
    if (ins[1] < 0 || ins[1] >= GPU_FE_MAX_REGS)
      return "destination register out of range (0 to 15)";
    defined |= 1u << ins[1];
  }
  *at = -1;
  memset(p, 0, sizeof *p);
  p->n_instr = (int32_t)(n_prog / 4);
  for (size_t i = 0; i < n_prog; i++)
    p->code[i] = (int32_t)prog[i];
  p->out = p->code[4 * (p->n_instr - 1) + 1];
  if (n_imm) memcpy(p->imm, imm, n_imm * sizeof *imm);
  return NULL;
}

#endif

#endif /* ONYX_GPU_FUSED_H */
