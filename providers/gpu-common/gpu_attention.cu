/* gpu_attention.cu — the fused attention kernel of the CUDA and ROCm
 * providers (com.onyx MultiHeadAttention), written once in the CUDA dialect
 * (hipcc compiles it through gpu_vendor.h). One block of GPU_ATTN_THREADS
 * per (query tile, head, batch): the queries stay in shared memory, the key
 * and value tiles stream through it, and the softmax runs online in float32
 * (gpu_attention_body.h holds every phase, shared with the host emulation).
 * Heads above GPU_ATTN_DMAX take a one-thread-per-row kernel. See
 * docs/providers/cuda.md, "Attention". */
#include <math.h>
#include <stdint.h>
#include "gpu_attention.h"
#include "gpu_attention_body.h"
#include "gpu_vendor.h"

namespace {

template <int kAcc>
__global__ void __launch_bounds__(GPU_ATTN_THREADS) attention_kernel(GpuAttn a) {
  __shared__ GpuAttnShared sh;
  GpuAttnThread th;
  const int tid = (int)threadIdx.x;
  const int64_t q0 = (int64_t)blockIdx.x * GPU_ATTN_BQ, h = blockIdx.y, b = blockIdx.z;
  gpub_attn_begin(&a, &sh, &th, tid, b, h, q0);
  const int64_t end = gpub_attn_key_end(&a, q0);
  for (int64_t k0 = 0; k0 < end; k0 += GPU_ATTN_BK) {
    __syncthreads(); /* the previous tile's readers of kv, p, pmax and psum are done */
    gpub_attn_load_k(&a, &sh, tid, b, h, k0);
    __syncthreads();
    gpub_attn_scores(&a, &sh, &th, tid, b, h, q0, k0);
    __syncthreads();
    gpub_attn_softmax(&sh, &th, tid, a.dv, kAcc);
    gpub_attn_load_v(&a, &sh, tid, b, h, k0);
    __syncthreads();
    gpub_attn_pv(&a, &sh, &th, tid, kAcc);
  }
  gpub_attn_store(&a, &th, tid, b, h, q0, kAcc);
}

__global__ void attention_row_kernel(GpuAttn a, int64_t rows) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows;
       i += (int64_t)blockDim.x * gridDim.x)
    gpub_attn_row(&a, i);
}

} // namespace

extern "C" int gpuk_attention(const GpuAttn* a, void* stream) {
  cudaStream_t s = (cudaStream_t)stream;
  if (a->b <= 0 || a->h <= 0 || a->s <= 0 || a->dv <= 0) return 0; /* no output */
  const int64_t tiles = (a->s + GPU_ATTN_BQ - 1) / GPU_ATTN_BQ;
  if (a->d <= GPU_ATTN_DMAX && a->dv <= GPU_ATTN_DMAX && tiles <= INT32_MAX && a->h <= 65535 &&
      a->b <= 65535) {
    const dim3 grid((unsigned)tiles, (unsigned)a->h, (unsigned)a->b);
    if (a->d <= 4 * GPU_ATTN_ACC_SMALL && a->dv <= 4 * GPU_ATTN_ACC_SMALL)
      attention_kernel<GPU_ATTN_ACC_SMALL><<<grid, GPU_ATTN_THREADS, 0, s>>>(*a);
    else
      attention_kernel<GPU_ATTN_ACC><<<grid, GPU_ATTN_THREADS, 0, s>>>(*a);
  } else {
    const int64_t rows = a->b * a->h * a->s;
    int64_t blocks = (rows + 255) / 256;
    if (blocks > 65535) blocks = 65535; /* the loop strides over the rest */
    attention_row_kernel<<<(unsigned)blocks, 256, 0, s>>>(*a, rows);
  }
  return (int)cudaGetLastError();
}
