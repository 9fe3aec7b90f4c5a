/* gpu_grad.cu — the training kernels of the CUDA and ROCm providers
 * (gpu_grad.h), in the CUDA dialect (hipcc through gpu_vendor.h): grid-stride
 * loops for the element-wise gradients, DropoutGrad and
 * SoftmaxCrossEntropyLossGrad; one block per line, row or channel for
 * SoftmaxGrad / LogSoftmaxGrad, LayerNormalizationGrad and
 * BatchNormalizationGrad (float64 shared-memory tree sums); one writer per
 * dX element for GatherGrad and MaxPoolGrad (indices sorted on the host);
 * one launch per GPU_OPT_MAX_TENSORS tensors for the fused optimizers, whose
 * pointer table travels in the kernel's arguments, and chunked float64 sums
 * in a fixed order for LAMB's and ClipGradNorm's norms. Host tables and
 * partial sums go to stream-ordered scratch (cudaMallocAsync /
 * hipMallocAsync). What a thread computes is in gpu_grad_body.h, shared with
 * the host emulation (gpu_emu_grad.c). */
#include <math.h>
#include <stdint.h>
#include "gpu_grad.h"
#include "gpu_grad_body.h"
#include "gpu_vendor.h"

#if defined(ONYX_GPU_HIP)
#define GPU_MALLOC_ASYNC hipMallocAsync
#define GPU_FREE_ASYNC   hipFreeAsync
#else
#define GPU_MALLOC_ASYNC cudaMallocAsync
#define GPU_FREE_ASYNC   cudaFreeAsync
#endif

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

/* Block-wide float64 sum of v (every thread of the block calls it); the
 * result is valid in thread 0. */
__device__ double block_sum(double v, double* part) {
  part[threadIdx.x] = v;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  const double r = part[0];
  __syncthreads();
  return r;
}

/* BatchNormalizationGrad: one block per channel (grid-stride over
 * channels), each sum a block-wide float64 sum. */
__global__ void bn_grad_kernel(const float* dy, const float* x, const float* scale,
                               const float* mean, const float* inv, float* dx, float* dscale,
                               float* dbias, int64_t n, int64_t c, int64_t sp, double epsilon) {
  __shared__ double part[kThreads];
  const int64_t m = n * sp;
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    double mu, iv;
    if (mean) {
      mu = mean[ch];
      iv = inv[ch];
    } else {
      double acc = 0.0;
      for (int64_t k = threadIdx.x; k < m; k += blockDim.x)
        acc += x[gpub_bn_index(k, ch, c, sp)];
      mu = block_sum(acc, part) / (double)m;
      acc = 0.0;
      for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
        const double d = (double)x[gpub_bn_index(k, ch, c, sp)] - mu;
        acc += d * d;
      }
      iv = gpub_bn_inv(block_sum(acc, part), (double)m, epsilon);
    }
    double sb = 0.0, ss = 0.0;
    for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
      const int64_t at = gpub_bn_index(k, ch, c, sp);
      sb += dy[at];
      ss += (double)dy[at] * ((double)x[at] - mu) * iv;
    }
    sb = block_sum(sb, part);
    ss = block_sum(ss, part);
    if (threadIdx.x == 0) {
      if (dbias) dbias[ch] = (float)sb;
      if (dscale) dscale[ch] = (float)ss;
    }
    const double a = (double)scale[ch] * iv, mb = sb / (double)m, ms = ss / (double)m;
    for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
      const int64_t at = gpub_bn_index(k, ch, c, sp);
      dx[at] = gpub_bn_dx(dy[at], x[at], mu, iv, a, mb, ms);
    }
  }
}

/* BatchNormalization forward: one block per channel (grid-stride over
 * channels); in training the batch mean and variance are block-wide
 * float64 sums (two passes), then the block writes its channel's Y. */
__global__ void bn_fwd_kernel(const float* x, const float* scale, const float* bias,
                              const float* mean, const float* var, float* y, float* run_mean,
                              float* run_var, int64_t n, int64_t c, int64_t sp, double epsilon,
                              double momentum, int train) {
  __shared__ double part[kThreads];
  const int64_t m = n * sp;
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    double mu, v;
    if (train) {
      double acc = 0.0;
      for (int64_t k = threadIdx.x; k < m; k += blockDim.x)
        acc += x[gpub_bn_index(k, ch, c, sp)];
      const double s = block_sum(acc, part);
      mu = m > 0 ? s / (double)m : 0.0;
      acc = 0.0;
      for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
        const double d = (double)x[gpub_bn_index(k, ch, c, sp)] - mu;
        acc += d * d;
      }
      const double q = block_sum(acc, part);
      v = m > 0 ? q / (double)m : 0.0;
      if (threadIdx.x == 0) {
        if (run_mean) run_mean[ch] = gpub_bn_running(mean[ch], mu, momentum);
        if (run_var) run_var[ch] = gpub_bn_running(var[ch], v, momentum);
      }
    } else {
      mu = mean[ch];
      v = var[ch];
    }
    float a, b;
    gpub_bn_coef(scale[ch], bias[ch], mu, v, epsilon, &a, &b);
    for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
      const int64_t at = gpub_bn_index(k, ch, c, sp);
      y[at] = gpub_bn_apply(x[at], a, b);
    }
  }
}

/* MaxPool: a thread per output element. */
__global__ void maxpool_kernel(const float* x, float* y, int64_t* ind, GpuPoolGeom g, int64_t n) {
  GRID_STRIDE(f, n) {
    int64_t arg;
    y[f] = gpub_maxpool(x, &g, f, &arg);
    if (ind) ind[f] = arg;
  }
}

__global__ void sce_grad_kernel(const float* lp, float* dx, const double* coef,
                                const int64_t* label, int64_t n, int64_t c, int64_t inner) {
  GRID_STRIDE(f, n) {
    dx[f] = gpub_sce_grad(lp, coef, label, f, c, inner);
  }
}

__global__ void gather_grad_kernel(const float* dy, float* dx, const int64_t* table, int64_t n_idx,
                                   int64_t n_groups, int64_t axis_len, int64_t inner, int64_t n) {
  const int64_t *js = table, *gstart = table + n_idx, *grow = gstart + n_groups + 1;
  GRID_STRIDE(f, n) {
    dx[gpub_gather_grad_dst(grow, f, n_groups, axis_len, inner)] =
        gpub_gather_grad(dy, js, gstart, f, n_groups, n_idx, inner);
  }
}

/* ClipGradNorm pass 1: chunk c of the batch (GPU_CLIP_CHUNK flat elements)
 * to sums[c], a block per chunk. */
__global__ void clip_sumsq_kernel(GpuOptBatch b, double* sums) {
  __shared__ double part[kThreads];
  const int64_t n = b.start[b.count], chunks = (n + GPU_CLIP_CHUNK - 1) / GPU_CLIP_CHUNK;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int64_t lo = c * GPU_CLIP_CHUNK, hi = n - lo < GPU_CLIP_CHUNK ? n : lo + GPU_CLIP_CHUNK;
    double acc = 0.0;
    for (int64_t f = lo + threadIdx.x; f < hi; f += blockDim.x)
      acc += gpub_clip_sq(&b, f);
    const double s = block_sum(acc, part);
    if (threadIdx.x == 0) sums[c] = s;
  }
}

/* LAMB pass 1: a block per chunk (chunks never span two tensors). */
__global__ void lamb1_kernel(GpuOptParams q, GpuOptBatch b, double* sums) {
  __shared__ double part[kThreads];
  const int64_t chunks = b.cstart[b.count];
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    int64_t lo, hi;
    const int t = gpub_chunk(&b, c, &lo, &hi);
    double pp = 0.0, uu = 0.0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
      gpub_lamb1(&q, &b, t, i, &pp, &uu);
    pp = block_sum(pp, part);
    uu = block_sum(uu, part);
    if (threadIdx.x == 0) {
      sums[2 * c] = pp;
      sums[2 * c + 1] = uu;
    }
  }
}

/* LAMB pass 2: a thread per tensor of the batch. */
__global__ void lamb_ratio_kernel(GpuOptBatch b, const double* sums, double* ratio) {
  const int t = (int)threadIdx.x;
  if (t < b.count) ratio[t] = gpub_lamb_ratio(&b, t, sums);
}

/* LAMB pass 3. */
__global__ void lamb3_kernel(GpuOptParams q, GpuOptBatch b, const double* ratio) {
  const int64_t n = b.start[b.count];
  GRID_STRIDE(f, n) {
    const int t = gpub_opt_tensor(&b, f);
    gpub_lamb3(&q, &b, t, f - b.start[t], ratio[t]);
  }
}

/* Pass 2, one block: the chunk sums in a fixed order, then the factor. */
__global__ void clip_coef_kernel(const double* sums, int64_t n_sums, double max_norm, double* state,
                                 float* total_norm) {
  __shared__ double part[kThreads];
  double acc = 0.0;
  for (int64_t c = threadIdx.x; c < n_sums; c += blockDim.x)
    acc += sums[c];
  const double s = block_sum(acc, part);
  if (threadIdx.x == 0) gpub_clip_coef(s, max_norm, state, total_norm);
}

/* Pass 3: the scaled copies. */
__global__ void clip_scale_kernel(GpuOptBatch b, const double* state) {
  const int64_t n = b.start[b.count];
  const float coef = (float)state[1];
  GRID_STRIDE(f, n) {
    gpub_clip_scale(&b, f, coef);
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

int gpuk_batchnorm_grad(const float* dy, const float* x, const float* scale, const float* mean,
                        const float* inv, float* dx, float* dscale, float* dbias, int64_t n,
                        int64_t c, int64_t sp, double epsilon, void* stream) {
  if (!c) return 0;
  const unsigned grid = c > 65535 ? 65535u : (unsigned)c;
  bn_grad_kernel<<<grid, kThreads, 0, (cudaStream_t)stream>>>(dy, x, scale, mean, inv, dx, dscale,
                                                              dbias, n, c, sp, epsilon);
  return launched();
}

int gpuk_batchnorm_fwd(const float* x, const float* scale, const float* bias, const float* mean,
                       const float* var, float* y, float* run_mean, float* run_var, int64_t n,
                       int64_t c, int64_t sp, double epsilon, double momentum, int train,
                       void* stream) {
  if (!c) return 0;
  const unsigned grid = c > 65535 ? 65535u : (unsigned)c;
  bn_fwd_kernel<<<grid, kThreads, 0, (cudaStream_t)stream>>>(
      x, scale, bias, mean, var, y, run_mean, run_var, n, c, sp, epsilon, momentum, train);
  return launched();
}

int gpuk_maxpool(const float* x, float* y, int64_t* ind, const GpuPoolGeom* g, void* stream) {
  const int64_t n = g->planes * g->out_size;
  if (!n) return 0;
  maxpool_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(x, y, ind, *g, n);
  return launched();
}

int gpuk_sce_grad(const float* log_prob, float* dx, const void* coef_label, int64_t nb, int64_t c,
                  int64_t inner, void* stream) {
  const int64_t samples = nb * inner, n = samples * c;
  if (!n) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  const size_t bytes = (size_t)samples * (sizeof(double) + sizeof(int64_t));
  void* scratch = NULL;
  int err = (int)GPU_MALLOC_ASYNC(&scratch, bytes, s);
  if (err) return err;
  /* From pageable memory the copy returns once the source is staged, so
   * the caller may free coef_label when this returns. */
  err = (int)cudaMemcpyAsync(scratch, coef_label, bytes, cudaMemcpyHostToDevice, s);
  if (!err) {
    const double* coef = (const double*)scratch;
    sce_grad_kernel<<<blocks_for(n), kThreads, 0, s>>>(
        log_prob, dx, coef, (const int64_t*)(coef + samples), n, c, inner);
    err = launched();
  }
  const int ferr = (int)GPU_FREE_ASYNC(scratch, s);
  return err ? err : ferr;
}

int gpuk_gather_grad(const float* dy, float* dx, const int64_t* table, int64_t n_idx,
                     int64_t n_groups, int64_t outer, int64_t axis_len, int64_t inner,
                     void* stream) {
  cudaStream_t s = (cudaStream_t)stream;
  const int64_t total = outer * axis_len * inner;
  if (!total) return 0;
  int err = (int)cudaMemsetAsync(dx, 0, (size_t)total * sizeof *dx, s);
  const int64_t n = outer * n_groups * inner;
  if (err || !n) return err;
  const size_t bytes = (size_t)(n_idx + 2 * n_groups + 1) * sizeof(int64_t);
  void* scratch = NULL;
  err = (int)GPU_MALLOC_ASYNC(&scratch, bytes, s);
  if (err) return err;
  /* From pageable memory the copy returns once the source is staged. */
  err = (int)cudaMemcpyAsync(scratch, table, bytes, cudaMemcpyHostToDevice, s);
  if (!err) {
    gather_grad_kernel<<<blocks_for(n), kThreads, 0, s>>>(dy, dx, (const int64_t*)scratch, n_idx,
                                                          n_groups, axis_len, inner, n);
    err = launched();
  }
  const int ferr = (int)GPU_FREE_ASYNC(scratch, s);
  return err ? err : ferr;
}

int gpuk_clip_grad_norm(size_t n, const int64_t* count, const float* const* g, float* const* out,
                        double max_norm, float* total_norm, void* stream) {
  cudaStream_t s = (cudaStream_t)stream;
  const float* const* in[4] = {g, NULL, NULL, NULL};
  float* const* outs[3] = {out, NULL, NULL};
  int64_t n_sums = 0; /* chunks of every batch */
  for (size_t first = 0; first < n; first += GPU_OPT_MAX_TENSORS) {
    int64_t total = 0;
    for (size_t t = first; t < n && t < first + GPU_OPT_MAX_TENSORS; t++)
      total += count[t];
    n_sums += (total + GPU_CLIP_CHUNK - 1) / GPU_CLIP_CHUNK;
  }
  double* scratch = NULL; /* n_sums chunk sums, then the norm and the factor */
  int err = (int)GPU_MALLOC_ASYNC((void**)&scratch, (size_t)(n_sums + 2) * sizeof(double), s);
  if (err) return err;
  int64_t at = 0;
  GpuOptBatch b;
  for (size_t first = 0; !err && first < n; first += GPU_OPT_MAX_TENSORS) {
    const size_t k = n - first < GPU_OPT_MAX_TENSORS ? n - first : GPU_OPT_MAX_TENSORS;
    gpub_opt_fill(&b, first, k, count, in, outs);
    const int64_t chunks = (b.start[k] + GPU_CLIP_CHUNK - 1) / GPU_CLIP_CHUNK;
    if (!chunks) continue;
    const unsigned grid = chunks > 65535 ? 65535u : (unsigned)chunks;
    clip_sumsq_kernel<<<grid, kThreads, 0, s>>>(b, scratch + at);
    at += chunks;
    err = launched();
  }
  if (!err) {
    clip_coef_kernel<<<1, kThreads, 0, s>>>(scratch, n_sums, max_norm, scratch + n_sums,
                                            total_norm);
    err = launched();
  }
  for (size_t first = 0; !err && first < n; first += GPU_OPT_MAX_TENSORS) {
    const size_t k = n - first < GPU_OPT_MAX_TENSORS ? n - first : GPU_OPT_MAX_TENSORS;
    gpub_opt_fill(&b, first, k, count, in, outs);
    if (!b.start[k]) continue;
    clip_scale_kernel<<<blocks_for(b.start[k]), kThreads, 0, s>>>(b, scratch + n_sums);
    err = launched();
  }
  const int ferr = (int)GPU_FREE_ASYNC(scratch, s);
  return err ? err : ferr;
}

int gpuk_lamb(const GpuOptParams* p, size_t n, const int64_t* count, const float* const* const* in,
              float* const* const* out, void* stream) {
  cudaStream_t s = (cudaStream_t)stream;
  int err = 0;
  for (size_t first = 0; !err && first < n; first += GPU_OPT_MAX_TENSORS) {
    const size_t k = n - first < GPU_OPT_MAX_TENSORS ? n - first : GPU_OPT_MAX_TENSORS;
    GpuOptBatch b;
    gpub_opt_fill(&b, first, k, count, in, out);
    const int64_t chunks = b.cstart[k];
    if (!chunks) continue;
    double* scratch = NULL; /* 2 sums per chunk, then a ratio per tensor */
    err = (int)GPU_MALLOC_ASYNC((void**)&scratch,
                                (size_t)(2 * chunks + GPU_OPT_MAX_TENSORS) * sizeof(double), s);
    if (err) return err;
    const unsigned grid = chunks > 65535 ? 65535u : (unsigned)chunks;
    lamb1_kernel<<<grid, kThreads, 0, s>>>(*p, b, scratch);
    err = launched();
    if (!err) {
      lamb_ratio_kernel<<<1, GPU_OPT_MAX_TENSORS, 0, s>>>(b, scratch, scratch + 2 * chunks);
      err = launched();
    }
    if (!err) {
      lamb3_kernel<<<blocks_for(b.start[k]), kThreads, 0, s>>>(*p, b, scratch + 2 * chunks);
      err = launched();
    }
    const int ferr = (int)GPU_FREE_ASYNC(scratch, s);
    if (!err) err = ferr;
  }
  return err;
}

} // extern "C"
