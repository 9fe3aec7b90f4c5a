/* gpu_kernels.cu — the device kernels shared by the CUDA and ROCm providers,
 * written once in the CUDA dialect (hipcc compiles it through gpu_vendor.h).
 *
 * Simple, general kernels first: grid-stride loops over an iteration space
 * with per-operand strides (broadcasting, transposes, slices and concats are
 * all one strided copy), one thread per row for softmax / layer norm / reduce,
 * and a 16x16 shared-memory tiled GEMM for vendors without a BLAS. What each
 * thread computes is in gpu_kernels_body.h, shared with the host emulation
 * (gpu_emu.c) that the tests run. None of this has run on a GPU yet: see
 * docs/providers/cuda.md. */
#include <math.h>
#include <stdint.h>
#include "gpu_kernels.h"
#include "gpu_kernels_body.h"
#include "gpu_vendor.h"

namespace {

const int kThreads = 256;

inline unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  if (b > 65535) b = 65535; /* grid-stride loops cover the rest */
  return (unsigned)b;
}

#define GRID_STRIDE(i, n)                                                                          \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
       i += (int64_t)blockDim.x * gridDim.x)

inline int64_t iter_count(const GpuIter& it) {
  int64_t n = 1;
  for (int d = 0; d < it.rank; d++)
    n *= it.dims[d];
  return n;
}

__global__ void binary_kernel(GpuBinaryOp op, const float* a, const float* b, float* out,
                              GpuIter it, int64_t n) {
  GRID_STRIDE(i, n) {
    int64_t off[3];
    gpub_offsets(&it, i, 3, off);
    out[off[0]] = gpub_binary(op, a[off[1]], b[off[2]]);
  }
}

__global__ void compare_kernel(GpuBinaryOp op, const float* a, const float* b, uint8_t* out,
                               GpuIter it, int64_t n) {
  GRID_STRIDE(i, n) {
    int64_t off[3];
    gpub_offsets(&it, i, 3, off);
    out[off[0]] = gpub_compare(op, a[off[1]], b[off[2]]) ? 1 : 0;
  }
}

__global__ void unary_kernel(GpuUnaryOp op, const float* x, float* y, int64_t n, float alpha,
                             float beta) {
  GRID_STRIDE(i, n) {
    y[i] = gpub_unary(op, x[i], alpha, beta);
  }
}

template <typename T>
__global__ void where_kernel(const uint8_t* cond, const T* x, const T* y, T* out, GpuIter it,
                             GpuIter ity, int64_t n) {
  GRID_STRIDE(i, n) {
    int64_t off[3], offy[1];
    gpub_offsets(&it, i, 3, off);
    gpub_offsets(&ity, i, 1, offy);
    out[off[0]] = cond[off[1]] ? x[off[2]] : y[offy[0]];
  }
}

template <typename T> __global__ void copy_kernel(const T* in, T* out, GpuIter it, int64_t n) {
  GRID_STRIDE(i, n) {
    int64_t off[2];
    gpub_offsets(&it, i, 2, off);
    out[off[0]] = in[off[1]];
  }
}

__global__ void softmax_kernel(const float* x, float* y, int64_t outer, int64_t axis, int64_t inner,
                               int log_softmax) {
  GRID_STRIDE(r, outer * inner) {
    gpub_softmax_row(x, y, r, axis, inner, log_softmax);
  }
}

__global__ void layernorm_kernel(const float* x, const float* scale, const float* bias, float* y,
                                 float* mean_out, float* inv_std_out, int64_t rows, int64_t cols,
                                 float epsilon) {
  GRID_STRIDE(r, rows) {
    gpub_layernorm_row(x, scale, bias, y, mean_out, inv_std_out, r, cols, epsilon);
  }
}

__global__ void reduce_kernel(GpuReduceOp op, const float* x, float* y, int64_t n_out,
                              int64_t n_red, GpuReduce r) {
  GRID_STRIDE(o, n_out) {
    y[o] = gpub_reduce_one(op, x, o, n_red, &r);
  }
}

template <typename T, typename I>
__global__ void gather_kernel(const T* data, const I* idx, T* out, int64_t outer, int64_t axis_dim,
                              int64_t inner, int64_t n_idx) {
  GRID_STRIDE(i, outer * n_idx * inner) {
    int64_t k = (int64_t)idx[gpub_gather_index(i, inner, n_idx)];
    int64_t src = gpub_gather_source(i, k, axis_dim, inner, n_idx);
    out[i] = src >= 0 ? data[src] : T(0);
  }
}

template <typename S, typename D> __global__ void cast_kernel(const S* in, D* out, int64_t n) {
  GRID_STRIDE(i, n) {
    out[i] = (D)in[i];
  }
}

template <typename S> __global__ void cast_to_bool_kernel(const S* in, uint8_t* out, int64_t n) {
  GRID_STRIDE(i, n) {
    out[i] = in[i] != (S)0 ? 1 : 0;
  }
}

const int kTile = 16;

__global__ void gemm_kernel(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                            const float* a, int64_t lda, int64_t stride_a, const float* b,
                            int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                            int64_t stride_c) {
  __shared__ float ta[kTile][kTile];
  __shared__ float tb[kTile][kTile + 1];
  int64_t batch = blockIdx.z;
  a += batch * stride_a;
  b += batch * stride_b;
  c += batch * stride_c;
  int64_t row = (int64_t)blockIdx.y * kTile + threadIdx.y;
  int64_t col = (int64_t)blockIdx.x * kTile + threadIdx.x;
  float acc = 0.0f;
  for (int64_t k0 = 0; k0 < k; k0 += kTile) {
    int64_t ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    ta[threadIdx.y][threadIdx.x] =
        (row < m && ka < k) ? (trans_a ? a[ka * lda + row] : a[row * lda + ka]) : 0.0f;
    tb[threadIdx.y][threadIdx.x] =
        (kb < k && col < n) ? (trans_b ? b[col * ldb + kb] : b[kb * ldb + col]) : 0.0f;
    __syncthreads();
    for (int kk = 0; kk < kTile; kk++)
      acc += ta[threadIdx.y][kk] * tb[kk][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) {
    float* cp = c + row * ldc + col;
    *cp = beta == 0.0f ? alpha * acc : alpha * acc + beta * *cp;
  }
}

inline int launched() {
  return (int)cudaGetLastError();
}

template <typename T>
int launch_where(const uint8_t* cond, const void* x, const void* y, void* out, const GpuIter* it,
                 const GpuIter* ity, int64_t n, cudaStream_t s) {
  where_kernel<T>
      <<<blocks_for(n), kThreads, 0, s>>>(cond, (const T*)x, (const T*)y, (T*)out, *it, *ity, n);
  return launched();
}

template <typename T>
int launch_copy(const void* in, void* out, const GpuIter* it, int64_t n, cudaStream_t s) {
  copy_kernel<T><<<blocks_for(n), kThreads, 0, s>>>((const T*)in, (T*)out, *it, n);
  return launched();
}

template <typename T>
int launch_gather(const void* data, const void* idx, int idx_is_64, void* out, int64_t outer,
                  int64_t axis_dim, int64_t inner, int64_t n_idx, cudaStream_t s) {
  int64_t n = outer * n_idx * inner;
  if (idx_is_64)
    gather_kernel<T, int64_t><<<blocks_for(n), kThreads, 0, s>>>(
        (const T*)data, (const int64_t*)idx, (T*)out, outer, axis_dim, inner, n_idx);
  else
    gather_kernel<T, int32_t><<<blocks_for(n), kThreads, 0, s>>>(
        (const T*)data, (const int32_t*)idx, (T*)out, outer, axis_dim, inner, n_idx);
  return launched();
}

/* ONNX type number -> dispatch. */
template <typename S>
int cast_from(const S* in, void* out, int out_type, int64_t n, cudaStream_t s) {
  unsigned g = blocks_for(n);
  switch (out_type) {
  case 1:
    cast_kernel<S, float><<<g, kThreads, 0, s>>>(in, (float*)out, n);
    break;
  case 2:
    cast_kernel<S, uint8_t><<<g, kThreads, 0, s>>>(in, (uint8_t*)out, n);
    break;
  case 3:
    cast_kernel<S, int8_t><<<g, kThreads, 0, s>>>(in, (int8_t*)out, n);
    break;
  case 6:
    cast_kernel<S, int32_t><<<g, kThreads, 0, s>>>(in, (int32_t*)out, n);
    break;
  case 7:
    cast_kernel<S, int64_t><<<g, kThreads, 0, s>>>(in, (int64_t*)out, n);
    break;
  case 9:
    cast_to_bool_kernel<S><<<g, kThreads, 0, s>>>(in, (uint8_t*)out, n);
    break;
  case 11:
    cast_kernel<S, double><<<g, kThreads, 0, s>>>(in, (double*)out, n);
    break;
  default:
    return -1;
  }
  return launched();
}

} // namespace

extern "C" {

int gpuk_binary(GpuBinaryOp op, const float* a, const float* b, void* out, const GpuIter* it,
                void* stream) {
  int64_t n = iter_count(*it);
  if (!n) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  if (op >= GPU_EQUAL)
    compare_kernel<<<blocks_for(n), kThreads, 0, s>>>(op, a, b, (uint8_t*)out, *it, n);
  else
    binary_kernel<<<blocks_for(n), kThreads, 0, s>>>(op, a, b, (float*)out, *it, n);
  return launched();
}

int gpuk_unary(GpuUnaryOp op, const float* x, float* y, int64_t n, float alpha, float beta,
               void* stream) {
  if (!n) return 0;
  unary_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(op, x, y, n, alpha, beta);
  return launched();
}

int gpuk_where(const uint8_t* cond, const void* x, const void* y, void* out, const GpuIter* it,
               const int64_t* strides_y, int64_t offset_y, int elem_size, void* stream) {
  int64_t n = iter_count(*it);
  if (!n) return 0;
  GpuIter ity = *it;
  for (int d = 0; d < it->rank; d++)
    ity.strides[0][d] = strides_y[d];
  ity.offset[0] = offset_y;
  cudaStream_t s = (cudaStream_t)stream;
  switch (elem_size) {
  case 1:
    return launch_where<uint8_t>(cond, x, y, out, it, &ity, n, s);
  case 2:
    return launch_where<uint16_t>(cond, x, y, out, it, &ity, n, s);
  case 4:
    return launch_where<uint32_t>(cond, x, y, out, it, &ity, n, s);
  case 8:
    return launch_where<uint64_t>(cond, x, y, out, it, &ity, n, s);
  default:
    return -1;
  }
}

int gpuk_copy(const void* in, void* out, const GpuIter* it, int elem_size, void* stream) {
  int64_t n = iter_count(*it);
  if (!n) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  switch (elem_size) {
  case 1:
    return launch_copy<uint8_t>(in, out, it, n, s);
  case 2:
    return launch_copy<uint16_t>(in, out, it, n, s);
  case 4:
    return launch_copy<uint32_t>(in, out, it, n, s);
  case 8:
    return launch_copy<uint64_t>(in, out, it, n, s);
  default:
    return -1;
  }
}

int gpuk_softmax(const float* x, float* y, int64_t outer, int64_t axis, int64_t inner, int log,
                 void* stream) {
  int64_t rows = outer * inner;
  if (!rows || !axis) return 0;
  softmax_kernel<<<blocks_for(rows), kThreads, 0, (cudaStream_t)stream>>>(x, y, outer, axis, inner,
                                                                          log);
  return launched();
}

int gpuk_layernorm(const float* x, const float* scale, const float* bias, float* y, float* mean,
                   float* inv_std, int64_t rows, int64_t cols, float epsilon, void* stream) {
  if (!rows) return 0;
  layernorm_kernel<<<blocks_for(rows), kThreads, 0, (cudaStream_t)stream>>>(
      x, scale, bias, y, mean, inv_std, rows, cols, epsilon);
  return launched();
}

int gpuk_reduce(GpuReduceOp op, const float* x, float* y, int64_t n_out, int64_t n_red,
                const GpuReduce* r, void* stream) {
  if (!n_out) return 0;
  reduce_kernel<<<blocks_for(n_out), kThreads, 0, (cudaStream_t)stream>>>(op, x, y, n_out, n_red,
                                                                          *r);
  return launched();
}

int gpuk_gather(const void* data, const void* idx, int idx_is_64, void* out, int64_t outer,
                int64_t axis_dim, int64_t inner, int64_t n_idx, int elem_size, void* stream) {
  if (!outer || !inner || !n_idx) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  switch (elem_size) {
  case 1:
    return launch_gather<uint8_t>(data, idx, idx_is_64, out, outer, axis_dim, inner, n_idx, s);
  case 2:
    return launch_gather<uint16_t>(data, idx, idx_is_64, out, outer, axis_dim, inner, n_idx, s);
  case 4:
    return launch_gather<uint32_t>(data, idx, idx_is_64, out, outer, axis_dim, inner, n_idx, s);
  case 8:
    return launch_gather<uint64_t>(data, idx, idx_is_64, out, outer, axis_dim, inner, n_idx, s);
  default:
    return -1;
  }
}

int gpuk_cast_supported(int type) {
  return type == 1 || type == 2 || type == 3 || type == 6 || type == 7 || type == 9 || type == 11;
}

int gpuk_cast(const void* in, int in_type, void* out, int out_type, int64_t n, void* stream) {
  if (!n) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  switch (in_type) {
  case 1:
    return cast_from((const float*)in, out, out_type, n, s);
  case 2:
    return cast_from((const uint8_t*)in, out, out_type, n, s);
  case 3:
    return cast_from((const int8_t*)in, out, out_type, n, s);
  case 6:
    return cast_from((const int32_t*)in, out, out_type, n, s);
  case 7:
    return cast_from((const int64_t*)in, out, out_type, n, s);
  case 9:
    return cast_from((const uint8_t*)in, out, out_type, n, s);
  case 11:
    return cast_from((const double*)in, out, out_type, n, s);
  default:
    return -1;
  }
}

int gpuk_gemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
              int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c, int64_t batch,
              void* stream) {
  if (!m || !n || !batch) return 0;
  if (batch > 65535 || (m + kTile - 1) / kTile > 65535) return -1; /* grid y and z limits */
  dim3 block(kTile, kTile);
  dim3 grid((unsigned)((n + kTile - 1) / kTile), (unsigned)((m + kTile - 1) / kTile),
            (unsigned)batch);
  gemm_kernel<<<grid, block, 0, (cudaStream_t)stream>>>(
      trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c);
  return launched();
}

} // extern "C"
