/* gpu_kernels.cu — the device kernels shared by the CUDA and ROCm providers,
 * written once in the CUDA dialect (hipcc compiles it through gpu_vendor.h).
 *
 * Grid-stride loops over an iteration space with per-operand strides
 * (broadcasting, transposes, slices and concats are all one strided copy); a
 * warp or a block per row for softmax, layer norm and reductions over
 * contiguous rows (shuffle and shared-memory tree reductions, portable across
 * 32- and 64-lane warps), a thread per column for their strided layouts; one
 * pass of bias + residual + activation after FusedMatMul's GEMM; and a 16x16
 * shared-memory tiled GEMM for vendors without a BLAS. What one thread
 * computes for an element or a strided row is in gpu_kernels_body.h, shared
 * with the host emulation (gpu_emu.c) that the tests run; the warp / block
 * kernels have no host twin (the emulation runs the per-row bodies, equal up
 * to float rounding). The floating kernels take their tensors' storage type
 * (GpuDtype: float32, float16, bfloat16) as a template argument: operands are
 * loaded to float, computed and accumulated in float, and stored in that
 * type (gpub_ld / gpub_st). See docs/providers/cuda.md, "Kernels" and
 * "float16 and bfloat16". */
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

/* kDt (a GpuDtype) is the operands' storage type: a template argument, so
 * that gpub_ld / gpub_st fold to plain accesses for float32. */
template <int kDt>
__global__ void binary_kernel(GpuBinaryOp op, const void* a, const void* b, void* out, GpuIter it,
                              int64_t n) {
  GRID_STRIDE(i, n) {
    int64_t off[3];
    gpub_offsets(&it, i, 3, off);
    gpub_st(out, off[0], kDt, gpub_binary(op, gpub_ld(a, off[1], kDt), gpub_ld(b, off[2], kDt)));
  }
}

template <int kDt>
__global__ void compare_kernel(GpuBinaryOp op, const void* a, const void* b, uint8_t* out,
                               GpuIter it, int64_t n) {
  GRID_STRIDE(i, n) {
    int64_t off[3];
    gpub_offsets(&it, i, 3, off);
    out[off[0]] = gpub_compare(op, gpub_ld(a, off[1], kDt), gpub_ld(b, off[2], kDt)) ? 1 : 0;
  }
}

/* Element-wise over n contiguous float16 / bfloat16 elements. */
template <int kDt>
__global__ void unary_half_kernel(GpuUnaryOp op, const void* x, void* y, int64_t n, float alpha,
                                  float beta) {
  GRID_STRIDE(i, n) {
    gpub_st(y, i, kDt, gpub_unary(op, gpub_ld(x, i, kDt), alpha, beta));
  }
}

/* Element-wise over n contiguous floats. vec: every pointer is 16-byte
 * aligned, so each thread moves four elements per float4 access (one 128-bit
 * load or store), and the first n % 4 threads of the grid finish the tail. */
__global__ void unary_kernel(GpuUnaryOp op, const float* x, float* y, int64_t n, float alpha,
                             float beta, int vec) {
  if (!vec) {
    GRID_STRIDE(i, n) {
      y[i] = gpub_unary(op, x[i], alpha, beta);
    }
    return;
  }
  const int64_t n4 = n / 4;
  GRID_STRIDE(i, n4) {
    float4 v = reinterpret_cast<const float4*>(x)[i];
    v.x = gpub_unary(op, v.x, alpha, beta);
    v.y = gpub_unary(op, v.y, alpha, beta);
    v.z = gpub_unary(op, v.z, alpha, beta);
    v.w = gpub_unary(op, v.w, alpha, beta);
    reinterpret_cast<float4*>(y)[i] = v;
  }
  const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n - n4 * 4) y[n4 * 4 + t] = gpub_unary(op, x[n4 * 4 + t], alpha, beta);
}

/* out = a op b over a dense output where each input is dense, one value or
 * a cycle (gpub_flat_layout: element i at i % period): no per-dimension
 * index arithmetic. vec: every pointer 16-byte aligned and every cycle's
 * period a multiple of 4, so four outputs read four contiguous elements of
 * each dense or cycle input. */
template <int kA, int kB>
__global__ void binary_flat_kernel(GpuBinaryOp op, const float* a, const float* b, float* out,
                                   int64_t n, int64_t pa, int64_t pb, int vec) {
  if (!vec) {
    GRID_STRIDE(i, n) {
      out[i] = gpub_binary(op, a[gpub_flat_index(kA, i, pa)], b[gpub_flat_index(kB, i, pb)]);
    }
    return;
  }
  const int64_t n4 = n / 4;
  GRID_STRIDE(i, n4) {
    float4 va, vb, r;
    if (kA == GPU_FLAT_SCALAR)
      va = make_float4(a[0], a[0], a[0], a[0]);
    else
      va = *reinterpret_cast<const float4*>(a + gpub_flat_index(kA, 4 * i, pa));
    if (kB == GPU_FLAT_SCALAR)
      vb = make_float4(b[0], b[0], b[0], b[0]);
    else
      vb = *reinterpret_cast<const float4*>(b + gpub_flat_index(kB, 4 * i, pb));
    r.x = gpub_binary(op, va.x, vb.x);
    r.y = gpub_binary(op, va.y, vb.y);
    r.z = gpub_binary(op, va.z, vb.z);
    r.w = gpub_binary(op, va.w, vb.w);
    reinterpret_cast<float4*>(out)[i] = r;
  }
  const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n - n4 * 4) {
    const int64_t j = n4 * 4 + t;
    out[j] = gpub_binary(op, a[gpub_flat_index(kA, j, pa)], b[gpub_flat_index(kB, j, pb)]);
  }
}

template <int kA, int kB>
void launch_binary_flat(GpuBinaryOp op, const float* a, const float* b, float* o, int64_t n,
                        int64_t pa, int64_t pb, int vec, cudaStream_t s) {
  const unsigned g = blocks_for(vec ? n / 4 + 3 : n); /* + 3: the tail's threads */
  binary_flat_kernel<kA, kB><<<g, kThreads, 0, s>>>(op, a, b, o, n, pa, pb, vec);
}

/* The flat kernel of float16 / bfloat16 (kDt) operands: one element per
 * thread step, no vector accesses. */
template <int kA, int kB, int kDt>
__global__ void binary_flat_half_kernel(GpuBinaryOp op, const void* a, const void* b, void* out,
                                        int64_t n, int64_t pa, int64_t pb) {
  GRID_STRIDE(i, n) {
    gpub_st(out, i, kDt,
            gpub_binary(op, gpub_ld(a, gpub_flat_index(kA, i, pa), kDt),
                        gpub_ld(b, gpub_flat_index(kB, i, pb), kDt)));
  }
}

template <int kDt>
int binary_flat_half(GpuBinaryOp op, const void* a, const void* b, void* out, const GpuIter* it,
                     int64_t n, cudaStream_t s) {
  int64_t pa, pb;
  const int fa = gpub_flat_layout(it, 1, &pa), fb = gpub_flat_layout(it, 2, &pb);
  const char* ap = (const char*)a + it->offset[1] * 2;
  const char* bp = (const char*)b + it->offset[2] * 2;
  char* o = (char*)out + it->offset[0] * 2;
  const unsigned g = blocks_for(n);
  if (fa == GPU_FLAT_SCALAR && fb == GPU_FLAT_DENSE)
    binary_flat_half_kernel<GPU_FLAT_SCALAR, GPU_FLAT_DENSE, kDt>
        <<<g, kThreads, 0, s>>>(op, ap, bp, o, n, pa, pb);
  else if (fa == GPU_FLAT_SCALAR)
    binary_flat_half_kernel<GPU_FLAT_SCALAR, GPU_FLAT_CYCLE, kDt>
        <<<g, kThreads, 0, s>>>(op, ap, bp, o, n, pa, pb);
  else if (fa == GPU_FLAT_DENSE && fb == GPU_FLAT_SCALAR)
    binary_flat_half_kernel<GPU_FLAT_DENSE, GPU_FLAT_SCALAR, kDt>
        <<<g, kThreads, 0, s>>>(op, ap, bp, o, n, pa, pb);
  else if (fa == GPU_FLAT_DENSE && fb == GPU_FLAT_DENSE)
    binary_flat_half_kernel<GPU_FLAT_DENSE, GPU_FLAT_DENSE, kDt>
        <<<g, kThreads, 0, s>>>(op, ap, bp, o, n, pa, pb);
  else if (fa == GPU_FLAT_DENSE)
    binary_flat_half_kernel<GPU_FLAT_DENSE, GPU_FLAT_CYCLE, kDt>
        <<<g, kThreads, 0, s>>>(op, ap, bp, o, n, pa, pb);
  else if (fb == GPU_FLAT_SCALAR)
    binary_flat_half_kernel<GPU_FLAT_CYCLE, GPU_FLAT_SCALAR, kDt>
        <<<g, kThreads, 0, s>>>(op, ap, bp, o, n, pa, pb);
  else if (fb == GPU_FLAT_DENSE)
    binary_flat_half_kernel<GPU_FLAT_CYCLE, GPU_FLAT_DENSE, kDt>
        <<<g, kThreads, 0, s>>>(op, ap, bp, o, n, pa, pb);
  else
    binary_flat_half_kernel<GPU_FLAT_CYCLE, GPU_FLAT_CYCLE, kDt>
        <<<g, kThreads, 0, s>>>(op, ap, bp, o, n, pa, pb);
  return (int)cudaGetLastError();
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

/* --- Row kernels: a warp or a block per row --------------------------------------------
 *
 * A "group" (one warp, or one whole block) owns a row: its lanes stride over
 * the row's columns (adjacent lanes read adjacent columns: coalesced), then
 * combine their partial results by butterfly shuffles within each warp and,
 * for a block, through shared memory across the warps. Rows are visited
 * group-stride, so any grid covers any number of rows. Warp lanes never leave
 * a loop early: the row index is the same for all lanes of a group, so every
 * shuffle sees the whole warp. */

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct MinOp {
  __device__ float operator()(float a, float b) const { return fminf(a, b); }
};

template <class Op> __device__ inline float warp_reduce(float v, Op op) {
  for (int mask = GPU_WARP_SIZE / 2; mask > 0; mask >>= 1)
    v = op(v, GPU_SHFL_XOR(v, mask));
  return v;
}

/* The whole block's reduction of v, returned to every thread. blockDim.x is a
 * multiple of the warp width and at most 1024, so there are at most 32 warps. The
 * first barrier keeps a previous call's readers of `part` ahead of this
 * call's writers. */
template <class Op> __device__ inline float block_reduce(float v, Op op, float identity) {
  __shared__ float part[33];
  const int lane = (int)threadIdx.x % GPU_WARP_SIZE, warp = (int)threadIdx.x / GPU_WARP_SIZE;
  const int warps = (int)blockDim.x / GPU_WARP_SIZE;
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? part[lane] : identity;
    v = warp_reduce(v, op);
    if (lane == 0) part[32] = v;
  }
  __syncthreads();
  return part[32];
}

/* Where a group (kBlock: the block, else one warp) stands: its first row,
 * the step between its rows, its lane and the group's width. */
template <bool kBlock> struct Group {
  int64_t first, step;
  int lane, width;
  __device__ Group() {
    if (kBlock) {
      first = blockIdx.x;
      step = gridDim.x;
      lane = (int)threadIdx.x;
      width = (int)blockDim.x;
    } else {
      const int per_block = (int)blockDim.x / GPU_WARP_SIZE;
      first = (int64_t)blockIdx.x * per_block + (int)threadIdx.x / GPU_WARP_SIZE;
      step = (int64_t)gridDim.x * per_block;
      lane = (int)threadIdx.x % GPU_WARP_SIZE;
      width = GPU_WARP_SIZE;
    }
  }
  template <class Op> __device__ float reduce(float v, Op op, float identity) const {
    return kBlock ? block_reduce(v, op, identity) : warp_reduce(v, op);
  }
};

/* Softmax / LogSoftmax of the rows of [outer, cols, inner] along the middle
 * dim (row r = o * inner + i; inner 1: contiguous rows, the axis is the last
 * dim): max, then the sum of exp(x - max), then the outputs. */
template <bool kBlock, int kDt>
__global__ void softmax_rows_kernel(const void* x, void* y, int64_t rows, int64_t cols,
                                    int64_t inner, int log_softmax) {
  const Group<kBlock> g;
  for (int64_t r = g.first; r < rows; r += g.step) {
    const int64_t base = (r / inner) * cols * inner + r % inner;
    float mx = -INFINITY;
    for (int64_t j = g.lane; j < cols; j += g.width)
      mx = fmaxf(mx, gpub_ld(x, base + j * inner, kDt));
    mx = g.reduce(mx, MaxOp(), -INFINITY);
    float sum = 0.0f;
    for (int64_t j = g.lane; j < cols; j += g.width)
      sum += expf(gpub_ld(x, base + j * inner, kDt) - mx);
    sum = g.reduce(sum, SumOp(), 0.0f);
    if (log_softmax) {
      const float shift = mx + logf(sum);
      for (int64_t j = g.lane; j < cols; j += g.width)
        gpub_st(y, base + j * inner, kDt, gpub_ld(x, base + j * inner, kDt) - shift);
    } else {
      const float inv = 1.0f / sum;
      for (int64_t j = g.lane; j < cols; j += g.width)
        gpub_st(y, base + j * inner, kDt, expf(gpub_ld(x, base + j * inner, kDt) - mx) * inv);
    }
  }
}

/* The strided layout (inner > 1): one thread per (outer, inner) column;
 * adjacent threads read adjacent columns, so each step is coalesced. */
template <int kDt>
__global__ void softmax_cols_kernel(const void* x, void* y, int64_t outer, int64_t axis,
                                    int64_t inner, int log_softmax) {
  GRID_STRIDE(r, outer * inner) {
    gpub_softmax_row(x, y, r, axis, inner, log_softmax, kDt);
  }
}

/* LayerNormalization of contiguous rows, two passes over the row (the mean,
 * then the mean of squared deviations, which does not cancel as E[x^2] -
 * E[x]^2 would), then the outputs. */
template <bool kBlock, int kDt>
__global__ void layernorm_rows_kernel(const void* x, const void* scale, const void* bias, void* y,
                                      float* mean_out, float* inv_std_out, int64_t rows,
                                      int64_t cols, float epsilon) {
  const Group<kBlock> g;
  for (int64_t r = g.first; r < rows; r += g.step) {
    const int64_t base = r * cols;
    float sum = 0.0f;
    for (int64_t j = g.lane; j < cols; j += g.width)
      sum += gpub_ld(x, base + j, kDt);
    const float mean = g.reduce(sum, SumOp(), 0.0f) / (float)cols;
    float sq = 0.0f;
    for (int64_t j = g.lane; j < cols; j += g.width) {
      const float d = gpub_ld(x, base + j, kDt) - mean;
      sq += d * d;
    }
    const float var = g.reduce(sq, SumOp(), 0.0f) / (float)cols;
    const float inv = 1.0f / sqrtf(var + epsilon);
    for (int64_t j = g.lane; j < cols; j += g.width) {
      const float v = (gpub_ld(x, base + j, kDt) - mean) * inv * gpub_ld(scale, j, kDt);
      gpub_st(y, base + j, kDt, bias ? v + gpub_ld(bias, j, kDt) : v);
    }
    if (g.lane == 0) {
      if (mean_out) mean_out[r] = mean;
      if (inv_std_out) inv_std_out[r] = inv;
    }
  }
}

__device__ inline float reduce_finish(float acc, GpuReduceOp op, int64_t n_red) {
  return op == GPU_REDUCE_MEAN ? acc / (float)n_red : acc;
}

/* Reduction of the middle dim of [outer, n_red, inner], a group per output
 * (r = o * inner + i; inner 1: contiguous rows, the reduced dims are the
 * innermost). n_red >= 1. */
template <bool kBlock, class Op, int kDt>
__global__ void reduce_rows_kernel(GpuReduceOp op, Op f, float identity, const void* x, void* y,
                                   int64_t rows, int64_t n_red, int64_t inner) {
  const Group<kBlock> g;
  for (int64_t r = g.first; r < rows; r += g.step) {
    const int64_t base = (r / inner) * n_red * inner + r % inner;
    float acc = identity;
    for (int64_t j = g.lane; j < n_red; j += g.width)
      acc = f(acc, gpub_ld(x, base + j * inner, kDt));
    acc = g.reduce(acc, f, identity);
    if (g.lane == 0) gpub_st(y, r, kDt, reduce_finish(acc, op, n_red));
  }
}

/* Reduction of the middle dim of [outer, n_red, inner] (inner > 1), one
 * thread per output (outer, inner): adjacent threads read adjacent columns. */
template <int kDt>
__global__ void reduce_cols_kernel(GpuReduceOp op, const void* x, void* y, int64_t rows,
                                   int64_t n_red, int64_t inner) {
  GRID_STRIDE(o, rows) {
    gpub_st(y, o, kDt, gpub_reduce_strided_one(op, x, o, n_red, inner, kDt));
  }
}

/* Any layout: one thread per output element. */
template <int kDt>
__global__ void reduce_kernel(GpuReduceOp op, const void* x, void* y, int64_t n_out, int64_t n_red,
                              GpuReduce r) {
  GRID_STRIDE(o, n_out) {
    gpub_st(y, o, kDt, gpub_reduce_one(op, x, o, n_red, &r, kDt));
  }
}

/* The fused epilogue of FusedMatMul over Y [m, n]: bias, residual, activation. */
template <int kDt>
__global__ void epilogue_kernel(void* y, const void* bias, const void* z, int64_t total, int64_t n,
                                GpuActivation act, float alpha, float lo, float hi) {
  GRID_STRIDE(i, total) {
    gpub_st(y, i, kDt,
            gpub_epilogue(gpub_ld(y, i, kDt), bias ? gpub_ld(bias, i % n, kDt) : 0.0f,
                          z ? gpub_ld(z, i, kDt) : 0.0f, act, alpha, lo, hi));
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

/* A Cast from or to float16 / bfloat16: the shared body, through double. */
__global__ void cast_any_kernel(const void* in, int in_type, void* out, int out_type, int64_t n) {
  GRID_STRIDE(i, n) {
    gpub_cast_one(in, in_type, out, out_type, i);
  }
}

template <typename S> __global__ void cast_to_bool_kernel(const S* in, uint8_t* out, int64_t n) {
  GRID_STRIDE(i, n) {
    out[i] = in[i] != (S)0 ? 1 : 0;
  }
}

const int kTile = 16;

/* Tiles are float whatever the storage type kDt: float16 / bfloat16 operands
 * are widened on load and the sum is accumulated in float. */
template <int kDt>
__global__ void gemm_kernel(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                            const void* a, int64_t lda, int64_t stride_a, const void* b,
                            int64_t ldb, int64_t stride_b, float beta, void* c, int64_t ldc,
                            int64_t stride_c) {
  __shared__ float ta[kTile][kTile];
  __shared__ float tb[kTile][kTile + 1];
  const int64_t batch = blockIdx.z;
  const int64_t oa = batch * stride_a, ob = batch * stride_b, oc = batch * stride_c;
  int64_t row = (int64_t)blockIdx.y * kTile + threadIdx.y;
  int64_t col = (int64_t)blockIdx.x * kTile + threadIdx.x;
  float acc = 0.0f;
  for (int64_t k0 = 0; k0 < k; k0 += kTile) {
    int64_t ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    ta[threadIdx.y][threadIdx.x] =
        (row < m && ka < k) ? gpub_ld(a, oa + (trans_a ? ka * lda + row : row * lda + ka), kDt)
                            : 0.0f;
    tb[threadIdx.y][threadIdx.x] =
        (kb < k && col < n) ? gpub_ld(b, ob + (trans_b ? col * ldb + kb : kb * ldb + col), kDt)
                            : 0.0f;
    __syncthreads();
    for (int kk = 0; kk < kTile; kk++)
      acc += ta[threadIdx.y][kk] * tb[kk][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) {
    const int64_t y = oc + row * ldc + col;
    gpub_st(c, y, kDt, beta == 0.0f ? alpha * acc : alpha * acc + beta * gpub_ld(c, y, kDt));
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

/* How a row kernel is launched: a warp per row for rows of at most 1024
 * columns when there are enough rows to fill the GPU with warps (or the rows
 * are so short that a block would idle), else a block per row, wider for
 * longer rows. */
struct RowLaunch {
  bool block;
  unsigned grid, threads;
};

inline RowLaunch row_launch(int64_t rows, int64_t cols) {
  RowLaunch l;
  l.block = cols > 1024 || (cols > 128 && rows < 1024);
  if (l.block) {
    l.threads = cols <= 1024 ? 128 : cols <= 4096 ? 256 : 512;
    l.grid = (unsigned)(rows < 65535 ? rows : 65535);
  } else {
    /* kThreads / GPU_WARP_MAX rows per block: sized for the widest warp; with
     * a narrower one the blocks past the last row return at once. */
    l.threads = kThreads;
    l.grid = blocks_for(rows * GPU_WARP_MAX);
  }
  return l;
}

/* For the strided layout [outer, len, inner > 1]: a thread per (outer,
 * inner) column (each step coalesced across the columns) where there are
 * enough columns to occupy the GPU or the axis is short; else a warp or a
 * block per column, which spreads a long axis over many threads at the cost
 * of strided reads. */
inline bool thread_per_column(int64_t columns, int64_t len) {
  return columns >= 8192 || len < 32;
}

template <int kDt, class Op>
int launch_reduce(GpuReduceOp op, Op f, float identity, const void* x, void* y, int64_t outer,
                  int64_t n_red, int64_t inner, cudaStream_t s) {
  const int64_t rows = outer * inner;
  if (inner > 1 && thread_per_column(rows, n_red)) {
    reduce_cols_kernel<kDt><<<blocks_for(rows), kThreads, 0, s>>>(op, x, y, rows, n_red, inner);
    return launched();
  }
  RowLaunch l = row_launch(rows, n_red);
  if (l.block)
    reduce_rows_kernel<true, Op, kDt>
        <<<l.grid, l.threads, 0, s>>>(op, f, identity, x, y, rows, n_red, inner);
  else
    reduce_rows_kernel<false, Op, kDt>
        <<<l.grid, l.threads, 0, s>>>(op, f, identity, x, y, rows, n_red, inner);
  return launched();
}

template <int kDt>
int reduce_typed(GpuReduceOp op, const void* x, void* y, int64_t n_out, int64_t n_red,
                 const GpuReduce* r, cudaStream_t s) {
  int64_t outer = 0, inner = 0;
  if (n_red > 0 && gpub_reduce_layout(r, &outer, &inner)) {
    switch (op) {
    case GPU_REDUCE_MAX:
      return launch_reduce<kDt>(op, MaxOp(), -INFINITY, x, y, outer, n_red, inner, s);
    case GPU_REDUCE_MIN:
      return launch_reduce<kDt>(op, MinOp(), INFINITY, x, y, outer, n_red, inner, s);
    default:
      return launch_reduce<kDt>(op, SumOp(), 0.0f, x, y, outer, n_red, inner, s);
    }
  }
  reduce_kernel<kDt><<<blocks_for(n_out), kThreads, 0, s>>>(op, x, y, n_out, n_red, *r);
  return launched();
}

template <int kDt>
int softmax_typed(const void* x, void* y, int64_t outer, int64_t axis, int64_t inner, int log,
                  cudaStream_t s) {
  const int64_t rows = outer * inner;
  if (inner > 1 && thread_per_column(rows, axis)) {
    softmax_cols_kernel<kDt><<<blocks_for(rows), kThreads, 0, s>>>(x, y, outer, axis, inner, log);
    return launched();
  }
  RowLaunch l = row_launch(rows, axis);
  if (l.block)
    softmax_rows_kernel<true, kDt><<<l.grid, l.threads, 0, s>>>(x, y, rows, axis, inner, log);
  else
    softmax_rows_kernel<false, kDt><<<l.grid, l.threads, 0, s>>>(x, y, rows, axis, inner, log);
  return launched();
}

template <int kDt>
int layernorm_typed(const void* x, const void* scale, const void* bias, void* y, float* mean,
                    float* inv_std, int64_t rows, int64_t cols, float epsilon, cudaStream_t s) {
  RowLaunch l = row_launch(rows, cols);
  if (l.block)
    layernorm_rows_kernel<true, kDt>
        <<<l.grid, l.threads, 0, s>>>(x, scale, bias, y, mean, inv_std, rows, cols, epsilon);
  else
    layernorm_rows_kernel<false, kDt>
        <<<l.grid, l.threads, 0, s>>>(x, scale, bias, y, mean, inv_std, rows, cols, epsilon);
  return launched();
}

template <int kDt>
int binary_strided(GpuBinaryOp op, const void* a, const void* b, void* out, const GpuIter* it,
                   int64_t n, cudaStream_t s) {
  if (op >= GPU_EQUAL)
    compare_kernel<kDt><<<blocks_for(n), kThreads, 0, s>>>(op, a, b, (uint8_t*)out, *it, n);
  else
    binary_kernel<kDt><<<blocks_for(n), kThreads, 0, s>>>(op, a, b, out, *it, n);
  return launched();
}

inline bool aligned16(const void* p) {
  return ((uintptr_t)p & 15u) == 0;
}

} // namespace

extern "C" {

int gpuk_binary(GpuBinaryOp op, const float* a, const float* b, void* out, const GpuIter* it,
                void* stream) {
  int64_t n = iter_count(*it);
  if (!n) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  if (op >= GPU_EQUAL) return binary_strided<GPU_F32>(op, a, b, out, it, n, s);
  if (gpub_flat_binary(it)) {
    int64_t pa, pb;
    const int fa = gpub_flat_layout(it, 1, &pa), fb = gpub_flat_layout(it, 2, &pb);
    float* o = (float*)out + it->offset[0];
    a += it->offset[1];
    b += it->offset[2];
    const int vec = aligned16(o) && (fa == GPU_FLAT_SCALAR || aligned16(a)) &&
                    (fb == GPU_FLAT_SCALAR || aligned16(b)) &&
                    (fa != GPU_FLAT_CYCLE || pa % 4 == 0) && (fb != GPU_FLAT_CYCLE || pb % 4 == 0);
    if (fa == GPU_FLAT_SCALAR && fb == GPU_FLAT_DENSE)
      launch_binary_flat<GPU_FLAT_SCALAR, GPU_FLAT_DENSE>(op, a, b, o, n, pa, pb, vec, s);
    else if (fa == GPU_FLAT_SCALAR)
      launch_binary_flat<GPU_FLAT_SCALAR, GPU_FLAT_CYCLE>(op, a, b, o, n, pa, pb, vec, s);
    else if (fa == GPU_FLAT_DENSE && fb == GPU_FLAT_SCALAR)
      launch_binary_flat<GPU_FLAT_DENSE, GPU_FLAT_SCALAR>(op, a, b, o, n, pa, pb, vec, s);
    else if (fa == GPU_FLAT_DENSE && fb == GPU_FLAT_DENSE)
      launch_binary_flat<GPU_FLAT_DENSE, GPU_FLAT_DENSE>(op, a, b, o, n, pa, pb, vec, s);
    else if (fa == GPU_FLAT_DENSE)
      launch_binary_flat<GPU_FLAT_DENSE, GPU_FLAT_CYCLE>(op, a, b, o, n, pa, pb, vec, s);
    else if (fb == GPU_FLAT_SCALAR)
      launch_binary_flat<GPU_FLAT_CYCLE, GPU_FLAT_SCALAR>(op, a, b, o, n, pa, pb, vec, s);
    else if (fb == GPU_FLAT_DENSE)
      launch_binary_flat<GPU_FLAT_CYCLE, GPU_FLAT_DENSE>(op, a, b, o, n, pa, pb, vec, s);
    else
      launch_binary_flat<GPU_FLAT_CYCLE, GPU_FLAT_CYCLE>(op, a, b, o, n, pa, pb, vec, s);
    return launched();
  }
  return binary_strided<GPU_F32>(op, a, b, out, it, n, s);
}

/* float16 / bfloat16: the flat layouts (gpub_flat_binary) one element per
 * thread step (the float4 kernels are float32's), the rest strided. */
int gpuk_binary_t(GpuDtype dt, GpuBinaryOp op, const void* a, const void* b, void* out,
                  const GpuIter* it, void* stream) {
  if (dt == GPU_F32) return gpuk_binary(op, (const float*)a, (const float*)b, out, it, stream);
  int64_t n = iter_count(*it);
  if (!n) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  const bool flat = op < GPU_EQUAL && gpub_flat_binary(it);
  switch (dt) {
  case GPU_F16:
    return flat ? binary_flat_half<GPU_F16>(op, a, b, out, it, n, s)
                : binary_strided<GPU_F16>(op, a, b, out, it, n, s);
  case GPU_BF16:
    return flat ? binary_flat_half<GPU_BF16>(op, a, b, out, it, n, s)
                : binary_strided<GPU_BF16>(op, a, b, out, it, n, s);
  default:
    return -1;
  }
}

int gpuk_unary(GpuUnaryOp op, const float* x, float* y, int64_t n, float alpha, float beta,
               void* stream) {
  if (!n) return 0;
  const int vec = aligned16(x) && aligned16(y);
  unary_kernel<<<blocks_for(vec ? n / 4 + 3 : n), kThreads, 0, (cudaStream_t)stream>>>(
      op, x, y, n, alpha, beta, vec);
  return launched();
}

int gpuk_unary_t(GpuDtype dt, GpuUnaryOp op, const void* x, void* y, int64_t n, float alpha,
                 float beta, void* stream) {
  if (dt == GPU_F32) return gpuk_unary(op, (const float*)x, (float*)y, n, alpha, beta, stream);
  if (!n) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  if (dt == GPU_F16)
    unary_half_kernel<GPU_F16><<<blocks_for(n), kThreads, 0, s>>>(op, x, y, n, alpha, beta);
  else if (dt == GPU_BF16)
    unary_half_kernel<GPU_BF16><<<blocks_for(n), kThreads, 0, s>>>(op, x, y, n, alpha, beta);
  else
    return -1;
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

int gpuk_softmax_t(GpuDtype dt, const void* x, void* y, int64_t outer, int64_t axis, int64_t inner,
                   int log, void* stream) {
  if (outer * inner == 0 || !axis) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  switch (dt) {
  case GPU_F32:
    return softmax_typed<GPU_F32>(x, y, outer, axis, inner, log, s);
  case GPU_F16:
    return softmax_typed<GPU_F16>(x, y, outer, axis, inner, log, s);
  case GPU_BF16:
    return softmax_typed<GPU_BF16>(x, y, outer, axis, inner, log, s);
  }
  return -1;
}

int gpuk_softmax(const float* x, float* y, int64_t outer, int64_t axis, int64_t inner, int log,
                 void* stream) {
  return gpuk_softmax_t(GPU_F32, x, y, outer, axis, inner, log, stream);
}

int gpuk_layernorm_t(GpuDtype dt, const void* x, const void* scale, const void* bias, void* y,
                     float* mean, float* inv_std, int64_t rows, int64_t cols, float epsilon,
                     void* stream) {
  if (!rows) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  switch (dt) {
  case GPU_F32:
    return layernorm_typed<GPU_F32>(x, scale, bias, y, mean, inv_std, rows, cols, epsilon, s);
  case GPU_F16:
    return layernorm_typed<GPU_F16>(x, scale, bias, y, mean, inv_std, rows, cols, epsilon, s);
  case GPU_BF16:
    return layernorm_typed<GPU_BF16>(x, scale, bias, y, mean, inv_std, rows, cols, epsilon, s);
  }
  return -1;
}

int gpuk_layernorm(const float* x, const float* scale, const float* bias, float* y, float* mean,
                   float* inv_std, int64_t rows, int64_t cols, float epsilon, void* stream) {
  return gpuk_layernorm_t(GPU_F32, x, scale, bias, y, mean, inv_std, rows, cols, epsilon, stream);
}

int gpuk_reduce_t(GpuDtype dt, GpuReduceOp op, const void* x, void* y, int64_t n_out, int64_t n_red,
                  const GpuReduce* r, void* stream) {
  if (!n_out) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  switch (dt) {
  case GPU_F32:
    return reduce_typed<GPU_F32>(op, x, y, n_out, n_red, r, s);
  case GPU_F16:
    return reduce_typed<GPU_F16>(op, x, y, n_out, n_red, r, s);
  case GPU_BF16:
    return reduce_typed<GPU_BF16>(op, x, y, n_out, n_red, r, s);
  }
  return -1;
}

int gpuk_reduce(GpuReduceOp op, const float* x, float* y, int64_t n_out, int64_t n_red,
                const GpuReduce* r, void* stream) {
  return gpuk_reduce_t(GPU_F32, op, x, y, n_out, n_red, r, stream);
}

int gpuk_epilogue_t(GpuDtype dt, void* y, const void* bias, const void* z, int64_t m, int64_t n,
                    GpuActivation act, float alpha, float lo, float hi, void* stream) {
  int64_t total = m * n;
  if (!total) return 0;
  const unsigned g = blocks_for(total);
  cudaStream_t s = (cudaStream_t)stream;
  switch (dt) {
  case GPU_F32:
    epilogue_kernel<GPU_F32><<<g, kThreads, 0, s>>>(y, bias, z, total, n, act, alpha, lo, hi);
    break;
  case GPU_F16:
    epilogue_kernel<GPU_F16><<<g, kThreads, 0, s>>>(y, bias, z, total, n, act, alpha, lo, hi);
    break;
  case GPU_BF16:
    epilogue_kernel<GPU_BF16><<<g, kThreads, 0, s>>>(y, bias, z, total, n, act, alpha, lo, hi);
    break;
  default:
    return -1;
  }
  return launched();
}

int gpuk_epilogue(float* y, const float* bias, const float* z, int64_t m, int64_t n,
                  GpuActivation act, float alpha, float lo, float hi, void* stream) {
  return gpuk_epilogue_t(GPU_F32, y, bias, z, m, n, act, alpha, lo, hi, stream);
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
  return gpub_cast_type(type);
}

int gpuk_cast(const void* in, int in_type, void* out, int out_type, int64_t n, void* stream) {
  if (!gpub_cast_type(in_type) || !gpub_cast_type(out_type)) return -1;
  if (!n) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  if (in_type == 10 || in_type == 16 || out_type == 10 || out_type == 16) {
    cast_any_kernel<<<blocks_for(n), kThreads, 0, s>>>(in, in_type, out, out_type, n);
    return launched();
  }
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

int gpuk_gemm_t(GpuDtype dt, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb,
                int64_t stride_b, float beta, void* c, int64_t ldc, int64_t stride_c, int64_t batch,
                void* stream) {
  if (!m || !n || !batch) return 0;
  if (batch > 65535 || (m + kTile - 1) / kTile > 65535) return -1; /* grid y and z limits */
  dim3 block(kTile, kTile);
  dim3 grid((unsigned)((n + kTile - 1) / kTile), (unsigned)((m + kTile - 1) / kTile),
            (unsigned)batch);
  cudaStream_t s = (cudaStream_t)stream;
  switch (dt) {
  case GPU_F32:
    gemm_kernel<GPU_F32><<<grid, block, 0, s>>>(trans_a, trans_b, m, n, k, alpha, a, lda, stride_a,
                                                b, ldb, stride_b, beta, c, ldc, stride_c);
    break;
  case GPU_F16:
    gemm_kernel<GPU_F16><<<grid, block, 0, s>>>(trans_a, trans_b, m, n, k, alpha, a, lda, stride_a,
                                                b, ldb, stride_b, beta, c, ldc, stride_c);
    break;
  case GPU_BF16:
    gemm_kernel<GPU_BF16><<<grid, block, 0, s>>>(trans_a, trans_b, m, n, k, alpha, a, lda, stride_a,
                                                 b, ldb, stride_b, beta, c, ldc, stride_c);
    break;
  default:
    return -1;
  }
  return launched();
}

int gpuk_gemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
              int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c, int64_t batch,
              void* stream) {
  return gpuk_gemm_t(GPU_F32, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b,
                     beta, c, ldc, stride_c, batch, stream);
}

} // extern "C"
