/* gpu_attention.h — the fused attention of the GPU providers: the launcher
 * of com.onyx MultiHeadAttention's kernel (gpu_attention.cu; emulated by
 * gpu_emu_attention.c) and the registration of its host side
 * (gpu_attention.c). Same conventions as gpu_kernels.h: the launcher queues
 * work on `stream` and returns the vendor's launch error (0: queued); every
 * pointer is device memory. Float32 only. */
#ifndef ONYX_GPU_ATTENTION_H
#define ONYX_GPU_ATTENTION_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Queries per block, keys per streamed tile and threads per block of the
 * tiled kernel; GPU_ATTN_DMAX is the largest head size it keeps in shared
 * memory and registers (larger heads take the one-thread-per-row kernel). */
#define GPU_ATTN_BQ      32
#define GPU_ATTN_BK      32
#define GPU_ATTN_THREADS 128
#define GPU_ATTN_DMAX    128

/* Y[b, s, h*D + d] = sum_t softmax_t(scale * Q_bh[s] . K_bh[t] + Mask[b, h, s, t]) V_bh[t, d].
 * Row s of Q_bh is q + (b*S + s)*ld + h*D (ld = H*D, or 3*H*D for packed Q|K|V, where k and v
 * point into the same rows); K and V likewise over T rows; Y is dense [B, S, H*D]. mask:
 * NULL, or element (b, h, s, t) at b*ms[0] + h*ms[1] + s*ms[2] + t*ms[3] (0 where it
 * broadcasts). causal: every mask element with t > s is at most GPU_ATTN_MASKED, so the
 * kernel skips key tiles that lie wholly above the diagonal (their exponentials are 0 in
 * float32, see docs/providers/cuda.md, "Attention"). */
typedef struct GpuAttn {
  const float *q, *k, *v, *mask;
  float* y;
  int64_t b, h, s, t, d;
  int64_t ld;
  int64_t ms[4];
  float scale;
  int causal;
} GpuAttn;

/* A mask value at or below this makes a causal mask (GpuAttn.causal). */
#define GPU_ATTN_MASKED (-1.0e4f)

/* Launches the attention over a->b x a->h heads; requires a->t > 0. */
int gpuk_attention(const GpuAttn* a, void* stream);

#ifdef __cplusplus
}
#endif

#if !defined(__CUDACC__) && !defined(__HIPCC__)
#include "onyx/onyx_ep.h"
/* Registers com.onyx MultiHeadAttention (gpu_attention.c). */
OnyxStatus* gpu_register_attention_kernels(OnyxKernelRegistry* r);
#endif

#endif /* ONYX_GPU_ATTENTION_H */
