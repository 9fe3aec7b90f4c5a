/* gpu_kernels.h — launchers of the shared device kernels (gpu_kernels.cu),
 * callable from C. Every launcher queues work on `stream` (a cudaStream_t or
 * hipStream_t as void*) and returns the vendor's launch error (0: queued).
 * Shapes and strides are in elements; GPU_MAX_RANK bounds every rank (the C
 * side refuses larger tensors before launching). Every pointer is device
 * memory. */
#ifndef ONYX_GPU_KERNELS_H
#define ONYX_GPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPU_MAX_RANK 8

/* The storage type of a floating kernel's tensors. Every kernel loads its
 * operands to float, computes (and accumulates) in float and stores in this
 * type; the `_t` launchers take it, the others are float32. */
typedef enum GpuDtype {
  GPU_F32 = 0,
  GPU_F16 = 1,  /* IEEE binary16 */
  GPU_BF16 = 2, /* bfloat16 */
} GpuDtype;

/* An iteration space of `rank` dims over which up to three operands are
 * addressed with their own strides (0 where an operand is broadcast). The
 * output, operand 0, is usually contiguous. */
typedef struct GpuIter {
  int32_t rank;
  int64_t dims[GPU_MAX_RANK];
  int64_t strides[3][GPU_MAX_RANK];
  int64_t offset[3]; /* element offset of each operand's first element */
} GpuIter;

typedef enum GpuBinaryOp {
  GPU_ADD,
  GPU_SUB,
  GPU_MUL,
  GPU_DIV,
  GPU_POW,
  GPU_MAX2,
  GPU_MIN2,
  /* float -> bool */
  GPU_EQUAL,
  GPU_LESS,
  GPU_GREATER,
  GPU_LESS_EQUAL,
  GPU_GREATER_EQUAL,
} GpuBinaryOp;

/* out = a op b, float32; comparisons write bool (one byte). Operand 0 of it
 * is out, 1 is a, 2 is b. */
int gpuk_binary(GpuBinaryOp op, const float* a, const float* b, void* out, const GpuIter* it,
                void* stream);
/* The same with a, b (and out, except for comparisons) of storage type dt. */
int gpuk_binary_t(GpuDtype dt, GpuBinaryOp op, const void* a, const void* b, void* out,
                  const GpuIter* it, void* stream);

typedef enum GpuUnaryOp {
  GPU_RELU,
  GPU_SIGMOID,
  GPU_TANH,
  GPU_ERF,
  GPU_GELU,      /* exact: x * (1 + erf(x / sqrt 2)) / 2 */
  GPU_GELU_TANH, /* approximate = "tanh" */
  GPU_LEAKY_RELU,
  GPU_CLIP, /* alpha = min, beta = max */
  GPU_ABS,
  GPU_NEG,
  GPU_EXP,
  GPU_LOG,
  GPU_SQRT,
  GPU_RECIPROCAL,
  GPU_FLOOR,
  GPU_CEIL,
  GPU_ELU,          /* alpha */
  GPU_HARD_SIGMOID, /* alpha, beta */
  GPU_SOFTPLUS,
  GPU_SIN,
  GPU_COS,
  GPU_SILU, /* x * sigmoid(x) (HardSwish not included) */
} GpuUnaryOp;

int gpuk_unary(GpuUnaryOp op, const float* x, float* y, int64_t n, float alpha, float beta,
               void* stream);
int gpuk_unary_t(GpuDtype dt, GpuUnaryOp op, const void* x, void* y, int64_t n, float alpha,
                 float beta, void* stream);

/* out[i] = cond[i] ? x[i] : y[i] over a broadcast iteration; operand 0 is
 * out, 1 cond (bool), 2 x; y uses strides_y/offset_y. elem_size: 1, 2, 4 or 8. */
int gpuk_where(const uint8_t* cond, const void* x, const void* y, void* out, const GpuIter* it,
               const int64_t* strides_y, int64_t offset_y, int elem_size, void* stream);

/* Strided copy: out (operand 0) and in (operand 1) addressed by the
 * iteration. Covers Transpose, Slice, Expand, Concat and Split.
 * elem_size: 1, 2, 4 or 8. */
int gpuk_copy(const void* in, void* out, const GpuIter* it, int elem_size, void* stream);

/* Softmax over the middle dim of [outer, axis, inner]; log != 0: LogSoftmax. */
int gpuk_softmax(const float* x, float* y, int64_t outer, int64_t axis, int64_t inner, int log,
                 void* stream);
int gpuk_softmax_t(GpuDtype dt, const void* x, void* y, int64_t outer, int64_t axis, int64_t inner,
                   int log, void* stream);

/* LayerNormalization over rows of `cols`; scale/bias are broadcast over rows
 * with `param_cols` elements (== cols, repeated otherwise); bias may be NULL;
 * mean / inv_std (one per row) may be NULL. */
int gpuk_layernorm(const float* x, const float* scale, const float* bias, float* y, float* mean,
                   float* inv_std, int64_t rows, int64_t cols, float epsilon, void* stream);
/* x, scale, bias and y of storage type dt; mean and inv_std float32. */
int gpuk_layernorm_t(GpuDtype dt, const void* x, const void* scale, const void* bias, void* y,
                     float* mean, float* inv_std, int64_t rows, int64_t cols, float epsilon,
                     void* stream);

typedef enum GpuReduceOp {
  GPU_REDUCE_SUM,
  GPU_REDUCE_MEAN,
  GPU_REDUCE_MAX,
  GPU_REDUCE_MIN
} GpuReduceOp;

/* y has one element per combination of the kept dims; for each it reduces
 * over the reduced dims. Strides are the input's. */
typedef struct GpuReduce {
  int32_t kept_rank, red_rank;
  int64_t kept_dims[GPU_MAX_RANK], kept_strides[GPU_MAX_RANK];
  int64_t red_dims[GPU_MAX_RANK], red_strides[GPU_MAX_RANK];
} GpuReduce;
int gpuk_reduce(GpuReduceOp op, const float* x, float* y, int64_t n_out, int64_t n_red,
                const GpuReduce* r, void* stream);
int gpuk_reduce_t(GpuDtype dt, GpuReduceOp op, const void* x, void* y, int64_t n_out, int64_t n_red,
                  const GpuReduce* r, void* stream);

/* The activation of a fused epilogue (FusedMatMul's `activation`). */
typedef enum GpuActivation {
  GPU_ACT_NONE,
  GPU_ACT_RELU,
  GPU_ACT_LEAKY_RELU, /* alpha */
  GPU_ACT_CLIP,       /* lo, hi */
  GPU_ACT_GELU,       /* exact (erf) */
} GpuActivation;

/* In place over row-major Y [m, n]: y = act(y + bias[col] + z), bias (n
 * values) and z (Y's shape) each optional (NULL), in one pass. */
int gpuk_epilogue(float* y, const float* bias, const float* z, int64_t m, int64_t n,
                  GpuActivation act, float alpha, float lo, float hi, void* stream);
int gpuk_epilogue_t(GpuDtype dt, void* y, const void* bias, const void* z, int64_t m, int64_t n,
                    GpuActivation act, float alpha, float lo, float hi, void* stream);

/* Gather along an axis of data viewed as [outer, axis_dim, inner]:
 * out[o, j, i] = data[o, idx[j], i]; negative indices count from the end;
 * an index out of [-axis_dim, axis_dim) gives zeros. idx_is_64: int64 else
 * int32 indices. */
int gpuk_gather(const void* data, const void* idx, int idx_is_64, void* out, int64_t outer,
                int64_t axis_dim, int64_t inner, int64_t n_idx, int elem_size, void* stream);

/* Cast between ONNX element types float32 (1), int32 (6), int64 (7),
 * bool (9), float64 (11), uint8 (2), int8 (3), float16 (10) and bfloat16
 * (16); to float16 / bfloat16 rounds to nearest even (gpub_cast_one).
 * Returns -1 for another pair. */
int gpuk_cast(const void* in, int in_type, void* out, int out_type, int64_t n, void* stream);
int gpuk_cast_supported(int type);

/* Row-major batched GEMM with a shared tiled kernel (used where no vendor
 * BLAS is installed): for each batch b,
 * C_b = alpha * op(A_b) op(B_b) + beta * C_b, op(A) M x K, op(B) K x N,
 * A_b = A + b * stride_a (stride 0: broadcast), likewise B and C. beta 0
 * ignores C's old contents. */
int gpuk_gemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
              int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c, int64_t batch,
              void* stream);
/* The same with A, B and C of storage type dt, accumulated in float32. */
int gpuk_gemm_t(GpuDtype dt, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb,
                int64_t stride_b, float beta, void* c, int64_t ldc, int64_t stride_c, int64_t batch,
                void* stream);

#ifdef __cplusplus
}
#endif
#endif /* ONYX_GPU_KERNELS_H */
