/* gpu_attention.h — the fused attention of the GPU providers: the launcher
 * of com.onyx MultiHeadAttention's kernel (gpu_attention.cu; emulated by
 * gpu_emu_attention.c) and the registration of its host side
 * (gpu_attention.c): com.onyx MultiHeadAttention and ONNX Attention (23+). Same conventions as
 * gpu_kernels.h: the launcher queues work on `stream` and returns the vendor's launch error (0:
 * queued); every pointer is device memory. Float32 only. */
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

/* Y_bh[s, e] = sum_t softmax_t(scale * Q_bh[s] . K_bh'[t] + bias[b, h, s, t]) V_bh'[t, e] for
 * every batch b < B, query head h < H and query s < S, over T keys; head h reads key/value
 * head h' = h / group (grouped-query attention; 1 for MultiHeadAttention). Q's rows have D
 * floats, V's and Y's Dv. Row s of Q_bh is q + b*qs[0] + h*qs[1] + s*qs[2] (the rows are
 * contiguous), K's, V's and Y's likewise with ks, vs, ys. bias: mask NULL, or element
 * (b, h, s, t) at b*ms[0] + h*ms[1] + s*ms[2] + t*ms[3] (0 where it broadcasts): a float32
 * added as is, or (mask_bool) a bool byte, 0 where true, -inf where false; keys t >=
 * mask_len get -inf. causal_mask: keys t > s get -inf. causal: keys t > s contribute
 * nothing (they are -inf, or masked at most GPU_ATTN_MASKED, see docs/providers/cuda.md,
 * "Attention"), so the kernel skips the key tiles wholly above the diagonal. A row whose
 * every score is -inf gives NaN (Softmax's 0 / 0), or 0 with zero_masked_rows. */
typedef struct GpuAttn {
  const float *q, *k, *v;
  const void* mask;
  float* y;
  int64_t b, h, s, t, d, dv;
  int64_t group;
  int64_t qs[3], ks[3], vs[3], ys[3];
  int64_t ms[4];
  int64_t mask_len;
  float scale;
  int mask_bool, causal_mask, causal, zero_masked_rows;
} GpuAttn;

/* A mask value at or below this makes a causal mask (GpuAttn.causal). */
#define GPU_ATTN_MASKED (-1.0e4f)

/* Launches the attention over a->b x a->h heads. */
int gpuk_attention(const GpuAttn* a, void* stream);

#ifdef __cplusplus
}
#endif

#if !defined(__CUDACC__) && !defined(__HIPCC__)
#include "onyx/onyx_ep.h"
/* Registers com.onyx MultiHeadAttention and ONNX Attention (gpu_attention.c). */
OnyxStatus* gpu_register_attention_kernels(OnyxKernelRegistry* r);
/* NULL, or why the GPU providers decline node (an Attention with inputs,
 * outputs or attributes the kernel does not take). */
const char* gpu_attention_decline(const OnyxNode* node);
#endif

#endif /* ONYX_GPU_ATTENTION_H */
