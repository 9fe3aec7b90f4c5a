/* cpu_nn.h — internal to the CPU provider: what the Conv, pooling and
 * normalization files (cpu_conv.c, cpu_pool.c, cpu_norm.c), the conv path
 * files, cpu_linalg.c (MatMul, Gemm) and the fused ops share beyond the
 * GEMM core (cpu_gemm.h). */
#ifndef CPU_NN_H
#define CPU_NN_H

#include "cpu_gemm.h"

/* The `activation` attribute of com.onyx FusedConv / FusedMatMul ("Relu",
 * "LeakyRelu" with `alpha`, "Clip" with `clip_min`/`clip_max`,
 * "HardSigmoid" with `alpha`/`beta`, "HardSwish", "Sigmoid", "Silu",
 * "Tanh"; absent or empty: none), for the GEMM epilogue. */
typedef struct CpuActivation {
  int act; /* CpuAct */
  float alpha, min, max;
} CpuActivation;
OnyxStatus* cpu_read_activation(const OnyxNode* node, CpuActivation* out);

/* y = softmax(x) over n contiguous float32 values (y may be x), the
 * Softmax kernel's own rows: outputs below FLT_MIN are 0, so no denormal
 * reaches a consumer's arithmetic. */
void cpu_softmax_row_f32(const float* x, float* y, size_t n);

/* dst (cols x rows) = transpose of src (rows x cols), both dense; elem_size
 * is 4 or 8. */
void cpu_nn_transpose(void* dst, const void* src, size_t rows, size_t cols, size_t elem_size);

/* The Conv kernel (cpu_conv.c), also for com.onyx FusedConv: create reads the
 * optional `activation` attribute (cpu_read_activation), applied by the
 * GEMM epilogue (float32 only); a constant W is packed at create. */
OnyxStatus* cpu_conv_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state);
OnyxStatus* cpu_conv_compute(void* state, OnyxKernelContext* ctx);
void cpu_conv_release(void* state);

#endif /* CPU_NN_H */
