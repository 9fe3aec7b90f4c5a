/* gpu_fused_body.h — what one thread of com.onyx FusedElementwise's kernel
 * computes for one element: the inputs' elements loaded into registers, the
 * program run over them, Y stored. Written in the subset of C that nvcc,
 * hipcc and a C compiler all accept: gpu_fused.cu runs it in a grid-stride
 * loop, gpu_emu_fused.c (tests) in a host loop. Each op computes what the
 * GPU providers' own kernel for it computes (gpub_binary / gpub_unary of
 * gpu_kernels_body.h), so a fused chain gives the unfused chain's results,
 * except Pow by the constant 2 or 3, which multiplies (x*x, x*x*x: exact
 * where powf rounds once more at most). */
#ifndef ONYX_GPU_FUSED_BODY_H
#define ONYX_GPU_FUSED_BODY_H

#include "gpu_fused.h"
#include "gpu_kernels_body.h"

GPU_FN float gpub_fe_operand(const GpuFeProgram* p, const float* r, int32_t v) {
  return v >= 0 ? r[v] : p->imm[-1 - v];
}

GPU_FN float gpub_fe_binary(int32_t op, float a, float b) {
  switch (op) {
  case GPU_FE_ADD:
    return a + b;
  case GPU_FE_SUB:
    return a - b;
  case GPU_FE_MUL:
    return a * b;
  case GPU_FE_DIV:
    return a / b;
  case GPU_FE_POW:
    if (b == 2.0f) return a * a;
    if (b == 3.0f) return a * a * a;
    return gpub_binary(GPU_POW, a, b);
  case GPU_FE_MAX:
    return gpub_binary(GPU_MAX2, a, b);
  default:
    return gpub_binary(GPU_MIN2, a, b);
  }
}

GPU_FN float gpub_fe_unary(int32_t op, float v, float p0, float p1) {
  switch (op) {
  case GPU_FE_NEG:
    return gpub_unary(GPU_NEG, v, 0.0f, 0.0f);
  case GPU_FE_ABS:
    return gpub_unary(GPU_ABS, v, 0.0f, 0.0f);
  case GPU_FE_EXP:
    return gpub_unary(GPU_EXP, v, 0.0f, 0.0f);
  case GPU_FE_LOG:
    return gpub_unary(GPU_LOG, v, 0.0f, 0.0f);
  case GPU_FE_SQRT:
    return gpub_unary(GPU_SQRT, v, 0.0f, 0.0f);
  case GPU_FE_RECIPROCAL:
    return gpub_unary(GPU_RECIPROCAL, v, 0.0f, 0.0f);
  case GPU_FE_TANH:
    return gpub_unary(GPU_TANH, v, 0.0f, 0.0f);
  case GPU_FE_SIGMOID:
    return gpub_unary(GPU_SIGMOID, v, 0.0f, 0.0f);
  case GPU_FE_ERF:
    return gpub_unary(GPU_ERF, v, 0.0f, 0.0f);
  case GPU_FE_RELU:
    return gpub_unary(GPU_RELU, v, 0.0f, 0.0f);
  case GPU_FE_LEAKY_RELU:
    return gpub_unary(GPU_LEAKY_RELU, v, p0, 0.0f);
  case GPU_FE_ELU:
    return gpub_unary(GPU_ELU, v, p0, 0.0f);
  case GPU_FE_CLIP:
    return gpub_unary(GPU_CLIP, v, p0, p1);
  case GPU_FE_HARD_SIGMOID:
    return gpub_unary(GPU_HARD_SIGMOID, v, p0, p1);
  case GPU_FE_HARD_SWISH:
    return v * gpub_unary(GPU_HARD_SIGMOID, v, 1.0f / 6.0f, 0.5f);
  case GPU_FE_SOFTPLUS:
    return gpub_unary(GPU_SOFTPLUS, v, 0.0f, 0.0f);
  case GPU_FE_GELU:
    return gpub_unary(GPU_GELU, v, 0.0f, 0.0f);
  case GPU_FE_GELU_TANH:
    return gpub_unary(GPU_GELU_TANH, v, 0.0f, 0.0f);
  default: /* GPU_FE_SILU: the checked program holds no other code */
    return gpub_unary(GPU_SILU, v, 0.0f, 0.0f);
  }
}

/* Runs the program over the registers r (the inputs in r[0..n_in)). */
GPU_FN float gpub_fe_run(const GpuFeProgram* p, float* r) {
  for (int32_t k = 0; k < p->n_instr; k++) {
    const int32_t* ins = p->code + 4 * k;
    const float a = gpub_fe_operand(p, r, ins[2]);
    float y;
    if (ins[0] <= GPU_FE_MIN) {
      y = gpub_fe_binary(ins[0], a, gpub_fe_operand(p, r, ins[3]));
    } else {
      const int32_t pi = ins[3] < 0 ? -1 - ins[3] : 0;
      y = gpub_fe_unary(ins[0], a, p->imm[pi], p->imm[pi + 1 < GPU_FE_MAX_IMM ? pi + 1 : pi]);
    }
    r[ins[1]] = y;
  }
  return r[p->out];
}

/* Element i of Y. */
GPU_FN void gpub_fe_elem(const GpuFeArgs* a, int64_t i) {
  float r[GPU_FE_MAX_REGS];
  if (a->flat) {
    for (int32_t j = 0; j < a->n_in; j++)
      r[j] = a->x[j][a->full[j] ? i : 0];
  } else {
    int64_t off[GPU_FE_MAX_INPUTS];
    for (int32_t j = 0; j < a->n_in; j++)
      off[j] = 0;
    int64_t rest = i;
    for (int32_t d = a->rank - 1; d >= 0; d--) {
      const int64_t c = rest % a->dims[d];
      rest /= a->dims[d];
      for (int32_t j = 0; j < a->n_in; j++)
        off[j] += c * a->strides[j][d];
    }
    for (int32_t j = 0; j < a->n_in; j++)
      r[j] = a->x[j][off[j]];
  }
  a->y[i] = gpub_fe_run(&a->prog, r);
}

#endif /* ONYX_GPU_FUSED_BODY_H */
