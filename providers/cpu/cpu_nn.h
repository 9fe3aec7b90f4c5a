/* cpu_nn.h — internal to the CPU provider: what cpu_nn.c (Conv, pooling,
 * normalization, Softmax) and cpu_linalg.c (MatMul, Gemm) share: the GEMM
 * core that Conv reuses through im2col. */
#ifndef CPU_NN_H
#define CPU_NN_H

#include "cpu_kernels.h"

/* C (m x n) = alpha * op(A) (m x k) * B (k x n) + beta * C, row-major with
 * leading dimensions in elements. op(A) is A, or A stored k x m when trans_a.
 * beta == 0 overwrites C without reading it (so NaN garbage does not leak).
 * B is never transposed: callers transpose it first (Gemm does so once at
 * create when B is a constant). */
typedef struct CpuGemm {
  size_t m, n, k;
  const void* a;
  size_t lda;
  int trans_a;
  const void* b;
  size_t ldb;
  void* c;
  size_t ldc;
  double alpha, beta;
} CpuGemm;

/* Splits C into tiles run on `pool` (NULL: the calling thread only). Each
 * element of C is summed over k in a fixed order, so results do not depend
 * on the number of threads. */
void cpu_gemm_f32(OnyxThreadPool* pool, const CpuGemm* g);
/* A plain loop for float64: correct, not fast. */
void cpu_gemm_f64(OnyxThreadPool* pool, const CpuGemm* g);

/* dst (cols x rows) = transpose of src (rows x cols), both dense; elem_size
 * is 4 or 8. */
void cpu_nn_transpose(void* dst, const void* src, size_t rows, size_t cols, size_t elem_size);

/* Registers MatMul and Gemm (cpu_linalg.c); called by cpu_register_nn. */
OnyxStatus* cpu_register_linalg(OnyxKernelRegistry* r);

#endif /* CPU_NN_H */
