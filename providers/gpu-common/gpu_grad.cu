/* gpu_grad.cu — the training kernels of the CUDA and ROCm providers
 * (gpu_grad.h), in the CUDA dialect (hipcc through gpu_vendor.h): grid-stride
 * loops for the element-wise gradients and DropoutGrad, one block per line
 * for SoftmaxGrad / LogSoftmaxGrad (a float64 shared-memory tree sum), and
 * one launch per GPU_OPT_MAX_TENSORS tensors for the fused optimizers, whose
 * pointer table travels in the kernel's arguments. What a thread computes is
 * in gpu_grad_body.h, shared with the host emulation (gpu_emu_grad.c). */
#include <math.h>
#include <stdint.h>
#include "gpu_grad.h"
#include "gpu_grad_body.h"
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

inline int launched() {
  return (int)cudaGetLastError();
}

__global__ void grad_unary_kernel(GpuGradOp op, const float* dy, const float* x, float* dx,
                                  int64_t n) {
  GRID_STRIDE(i, n) {
    dx[i] = gpub_grad_unary(op, dy[i], x[i]);
  }
}

__global__ void dropout_grad_kernel(const float* dy, const uint8_t* mask, float* dx, int64_t n,
                                    float scale) {
  GRID_STRIDE(i, n) {
    dx[i] = gpub_dropout_grad(dy[i], mask[i], scale);
  }
}

/* One block per line (grid-stride over lines): each thread sums its
 * strided share of the line in float64, a shared-memory tree adds the
 * kThreads partials, then every thread writes its share of the outputs. */
__global__ void softmax_grad_kernel(const float* dy, const float* y, float* dx, int64_t lines,
                                    int64_t len, int64_t inner, int log_softmax) {
  __shared__ double part[kThreads];
  for (int64_t r = blockIdx.x; r < lines; r += gridDim.x) {
    const int64_t base = gpub_line_base(r, len, inner);
    double acc = 0.0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
      acc += gpub_softmax_grad_term(dy[base + j * inner], y[base + j * inner], log_softmax);
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w /= 2) {
      if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
      __syncthreads();
    }
    const double s = part[0];
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const int64_t at = base + j * inner;
      dx[at] = gpub_softmax_grad_out(dy[at], y[at], s, log_softmax);
    }
    __syncthreads(); /* part[0] is read by all before the next line overwrites it */
  }
}

/* LayerNormalizationGrad's dX: one block per row (grid-stride over rows),
 * the two sums as softmax_grad_kernel's. */
__global__ void ln_grad_rows_kernel(const float* dy, const float* x, const float* scale,
                                    const float* mean, const float* inv, float* dx, int64_t rows,
                                    int64_t width) {
  __shared__ double pg[kThreads], pgx[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    double ag = 0.0, agx = 0.0;
    for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
      double g, gx;
      gpub_ln_grad_terms(dy, x, scale, mean, inv, r, width, j, &g, &gx);
      ag += g;
      agx += gx;
    }
    pg[threadIdx.x] = ag;
    pgx[threadIdx.x] = agx;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w /= 2) {
      if ((int)threadIdx.x < w) {
        pg[threadIdx.x] += pg[threadIdx.x + w];
        pgx[threadIdx.x] += pgx[threadIdx.x + w];
      }
      __syncthreads();
    }
    const double mg = pg[0] / (double)width, mgx = pgx[0] / (double)width;
    for (int64_t j = threadIdx.x; j < width; j += blockDim.x)
      dx[r * width + j] = gpub_ln_grad_out(dy, x, scale, mean, inv, r, width, j, mg, mgx);
    __syncthreads();
  }
}

/* dScale / dBias: a thread per column, the rows in order. */
__global__ void ln_grad_cols_kernel(const float* dy, const float* x, const float* mean,
                                    const float* inv, float* dscale, float* dbias, int64_t rows,
                                    int64_t width) {
  GRID_STRIDE(c, width) {
    gpub_ln_grad_col(dy, x, mean, inv, dscale, dbias, rows, width, c);
  }
}

__global__ void optimizer_kernel(GpuOptParams q, GpuOptBatch b) {
  const int64_t n = b.start[b.count];
  GRID_STRIDE(f, n) {
    gpub_opt_elem(&q, &b, f);
  }
}

} // namespace

extern "C" {

int gpuk_grad_unary(GpuGradOp op, const float* dy, const float* x, float* dx, int64_t n,
                    void* stream) {
  if (!n) return 0;
  grad_unary_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(op, dy, x, dx, n);
  return launched();
}

int gpuk_dropout_grad(const float* dy, const uint8_t* mask, float* dx, int64_t n, float scale,
                      void* stream) {
  if (!n) return 0;
  dropout_grad_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(dy, mask, dx, n, scale);
  return launched();
}

int gpuk_softmax_grad(const float* dy, const float* y, float* dx, int64_t outer, int64_t len,
                      int64_t inner, int log, void* stream) {
  const int64_t lines = outer * inner;
  if (!lines || !len) return 0;
  const unsigned grid = lines > 65535 ? 65535u : (unsigned)lines;
  softmax_grad_kernel<<<grid, kThreads, 0, (cudaStream_t)stream>>>(dy, y, dx, lines, len, inner,
                                                                   log);
  return launched();
}

int gpuk_layernorm_grad(const float* dy, const float* x, const float* scale, const float* mean,
                        const float* inv, float* dx, float* dscale, float* dbias, int64_t rows,
                        int64_t width, void* stream) {
  if (!width) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  if (rows) {
    const unsigned grid = rows > 65535 ? 65535u : (unsigned)rows;
    ln_grad_rows_kernel<<<grid, kThreads, 0, s>>>(dy, x, scale, mean, inv, dx, rows, width);
    const int err = launched();
    if (err) return err;
  }
  if (!dscale && !dbias) return 0;
  ln_grad_cols_kernel<<<blocks_for(width), kThreads, 0, s>>>(dy, x, mean, inv, dscale, dbias, rows,
                                                             width);
  return launched();
}

int gpuk_optimizer(const GpuOptParams* p, size_t n, const int64_t* count,
                   const float* const* const* in, float* const* const* out, void* stream) {
  for (size_t first = 0; first < n; first += GPU_OPT_MAX_TENSORS) {
    const size_t k = n - first < GPU_OPT_MAX_TENSORS ? n - first : GPU_OPT_MAX_TENSORS;
    GpuOptBatch b;
    gpub_opt_fill(&b, first, k, count, in, out);
    if (!b.start[k]) continue;
    optimizer_kernel<<<blocks_for(b.start[k]), kThreads, 0, (cudaStream_t)stream>>>(*p, b);
    const int err = launched();
    if (err) return err;
  }
  return 0;
}

} // extern "C"
