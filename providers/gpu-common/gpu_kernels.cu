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
 * to float rounding). See docs/providers/cuda.md, "Kernels". */
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
template <bool kBlock>
__global__ void softmax_rows_kernel(const float* x, float* y, int64_t rows, int64_t cols,
                                    int64_t inner, int log_softmax) {
  const Group<kBlock> g;
  for (int64_t r = g.first; r < rows; r += g.step) {
    const int64_t base = (r / inner) * cols * inner + r % inner;
    const float* xp = x + base;
    float* yp = y + base;
    float mx = -INFINITY;
    for (int64_t j = g.lane; j < cols; j += g.width)
      mx = fmaxf(mx, xp[j * inner]);
    mx = g.reduce(mx, MaxOp(), -INFINITY);
    float sum = 0.0f;
    for (int64_t j = g.lane; j < cols; j += g.width)
      sum += expf(xp[j * inner] - mx);
    sum = g.reduce(sum, SumOp(), 0.0f);
    if (log_softmax) {
      const float shift = mx + logf(sum);
      for (int64_t j = g.lane; j < cols; j += g.width)
        yp[j * inner] = xp[j * inner] - shift;
    } else {
      const float inv = 1.0f / sum;
      for (int64_t j = g.lane; j < cols; j += g.width)
        yp[j * inner] = expf(xp[j * inner] - mx) * inv;
    }
  }
}

/* The strided layout (inner > 1): one thread per (outer, inner) column;
 * adjacent threads read adjacent columns, so each step is coalesced. */
__global__ void softmax_cols_kernel(const float* x, float* y, int64_t outer, int64_t axis,
                                    int64_t inner, int log_softmax) {
  GRID_STRIDE(r, outer * inner) {
    gpub_softmax_row(x, y, r, axis, inner, log_softmax);
  }
}

/* LayerNormalization of contiguous rows, two passes over the row (the mean,
 * then the mean of squared deviations, which does not cancel as E[x^2] -
 * E[x]^2 would), then the outputs. */
template <bool kBlock>
__global__ void layernorm_rows_kernel(const float* x, const float* scale, const float* bias,
                                      float* y, float* mean_out, float* inv_std_out, int64_t rows,
                                      int64_t cols, float epsilon) {
  const Group<kBlock> g;
  for (int64_t r = g.first; r < rows; r += g.step) {
    const float* xp = x + r * cols;
    float* yp = y + r * cols;
    float sum = 0.0f;
    for (int64_t j = g.lane; j < cols; j += g.width)
      sum += xp[j];
    const float mean = g.reduce(sum, SumOp(), 0.0f) / (float)cols;
    float sq = 0.0f;
    for (int64_t j = g.lane; j < cols; j += g.width) {
      const float d = xp[j] - mean;
      sq += d * d;
    }
    const float var = g.reduce(sq, SumOp(), 0.0f) / (float)cols;
    const float inv = 1.0f / sqrtf(var + epsilon);
    for (int64_t j = g.lane; j < cols; j += g.width) {
      const float v = (xp[j] - mean) * inv * scale[j];
      yp[j] = bias ? v + bias[j] : v;
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
template <bool kBlock, class Op>
__global__ void reduce_rows_kernel(GpuReduceOp op, Op f, float identity, const float* x, float* y,
                                   int64_t rows, int64_t n_red, int64_t inner) {
  const Group<kBlock> g;
  for (int64_t r = g.first; r < rows; r += g.step) {
    const float* xp = x + (r / inner) * n_red * inner + r % inner;
    float acc = identity;
    for (int64_t j = g.lane; j < n_red; j += g.width)
      acc = f(acc, xp[j * inner]);
    acc = g.reduce(acc, f, identity);
    if (g.lane == 0) y[r] = reduce_finish(acc, op, n_red);
  }
}

/* Reduction of the middle dim of [outer, n_red, inner] (inner > 1), one
 * thread per output (outer, inner): adjacent threads read adjacent columns. */
__global__ void reduce_cols_kernel(GpuReduceOp op, const float* x, float* y, int64_t rows,
                                   int64_t n_red, int64_t inner) {
  GRID_STRIDE(o, rows) {
    y[o] = gpub_reduce_strided_one(op, x, o, n_red, inner);
  }
}

/* Any layout: one thread per output element. */
__global__ void reduce_kernel(GpuReduceOp op, const float* x, float* y, int64_t n_out,
                              int64_t n_red, GpuReduce r) {
  GRID_STRIDE(o, n_out) {
    y[o] = gpub_reduce_one(op, x, o, n_red, &r);
  }
}

/* The fused epilogue of FusedMatMul over Y [m, n]: bias, residual, activation. */
__global__ void epilogue_kernel(float* y, const float* bias, const float* z, int64_t total,
                                int64_t n, GpuActivation act, float alpha, float lo, float hi) {
  GRID_STRIDE(i, total) {
    y[i] = gpub_epilogue(y[i], bias ? bias[i % n] : 0.0f, z ? z[i] : 0.0f, act, alpha, lo, hi);
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

template <class Op>
int launch_reduce(GpuReduceOp op, Op f, float identity, const float* x, float* y, int64_t outer,
                  int64_t n_red, int64_t inner, cudaStream_t s) {
  const int64_t rows = outer * inner;
  if (inner > 1 && thread_per_column(rows, n_red)) {
    reduce_cols_kernel<<<blocks_for(rows), kThreads, 0, s>>>(op, x, y, rows, n_red, inner);
    return launched();
  }
  RowLaunch l = row_launch(rows, n_red);
  if (l.block)
    reduce_rows_kernel<true>
        <<<l.grid, l.threads, 0, s>>>(op, f, identity, x, y, rows, n_red, inner);
  else
    reduce_rows_kernel<false>
        <<<l.grid, l.threads, 0, s>>>(op, f, identity, x, y, rows, n_red, inner);
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
  if (op >= GPU_EQUAL) {
    compare_kernel<<<blocks_for(n), kThreads, 0, s>>>(op, a, b, (uint8_t*)out, *it, n);
    return launched();
  }
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
  binary_kernel<<<blocks_for(n), kThreads, 0, s>>>(op, a, b, (float*)out, *it, n);
  return launched();
}

int gpuk_unary(GpuUnaryOp op, const float* x, float* y, int64_t n, float alpha, float beta,
               void* stream) {
  if (!n) return 0;
  const int vec = aligned16(x) && aligned16(y);
  unary_kernel<<<blocks_for(vec ? n / 4 + 3 : n), kThreads, 0, (cudaStream_t)stream>>>(
      op, x, y, n, alpha, beta, vec);
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
  cudaStream_t s = (cudaStream_t)stream;
  if (inner > 1 && thread_per_column(rows, axis)) {
    softmax_cols_kernel<<<blocks_for(rows), kThreads, 0, s>>>(x, y, outer, axis, inner, log);
    return launched();
  }
  RowLaunch l = row_launch(rows, axis);
  if (l.block)
    softmax_rows_kernel<true><<<l.grid, l.threads, 0, s>>>(x, y, rows, axis, inner, log);
  else
    softmax_rows_kernel<false><<<l.grid, l.threads, 0, s>>>(x, y, rows, axis, inner, log);
  return launched();
}

int gpuk_layernorm(const float* x, const float* scale, const float* bias, float* y, float* mean,
                   float* inv_std, int64_t rows, int64_t cols, float epsilon, void* stream) {
  if (!rows) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  RowLaunch l = row_launch(rows, cols);
  if (l.block)
    layernorm_rows_kernel<true>
        <<<l.grid, l.threads, 0, s>>>(x, scale, bias, y, mean, inv_std, rows, cols, epsilon);
  else
    layernorm_rows_kernel<false>
        <<<l.grid, l.threads, 0, s>>>(x, scale, bias, y, mean, inv_std, rows, cols, epsilon);
  return launched();
}

int gpuk_reduce(GpuReduceOp op, const float* x, float* y, int64_t n_out, int64_t n_red,
                const GpuReduce* r, void* stream) {
  if (!n_out) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  int64_t outer = 0, inner = 0;
  if (n_red > 0 && gpub_reduce_layout(r, &outer, &inner)) {
    switch (op) {
    case GPU_REDUCE_MAX:
      return launch_reduce(op, MaxOp(), -INFINITY, x, y, outer, n_red, inner, s);
    case GPU_REDUCE_MIN:
      return launch_reduce(op, MinOp(), INFINITY, x, y, outer, n_red, inner, s);
    default:
      return launch_reduce(op, SumOp(), 0.0f, x, y, outer, n_red, inner, s);
    }
  }
  reduce_kernel<<<blocks_for(n_out), kThreads, 0, s>>>(op, x, y, n_out, n_red, *r);
  return launched();
}

int gpuk_epilogue(float* y, const float* bias, const float* z, int64_t m, int64_t n,
                  GpuActivation act, float alpha, float lo, float hi, void* stream) {
  int64_t total = m * n;
  if (!total) return 0;
  epilogue_kernel<<<blocks_for(total), kThreads, 0, (cudaStream_t)stream>>>(y, bias, z, total, n,
                                                                            act, alpha, lo, hi);
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
