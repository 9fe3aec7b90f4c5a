/* gpu_attention_body.h — what each thread of the fused attention computes,
 * written once in the subset of C that nvcc, hipcc and a C compiler all
 * accept. gpu_attention.cu runs the phases of the tiled kernel between
 * barriers, one block per (batch, head, tile of GPU_ATTN_BQ queries);
 * gpu_emu_attention.c (tests) runs the very same phases for every thread
 * index of a block in turn, which is what the barriers guarantee.
 *
 * The tiled algorithm (flash attention, float32): a block keeps its queries
 * in shared memory and streams the keys and values through one shared tile
 * of GPU_ATTN_BK rows. Per key tile: the GPU_ATTN_BQ x GPU_ATTN_BK scores
 * (scale * q . k + mask) into shared memory; per query row its running max
 * m and sum l: m' = max(m, tile max), the tile's exponentials exp(s - m')
 * replace the scores, l' = l exp(m - m') + their sum; each thread's output
 * accumulators are scaled by exp(m - m') and take P x V. At the end
 * Y = acc / l. Memory holds one tile of scores per block, never S x T.
 *
 * Thread tid of the block owns query row tid / 4 and, of that row, the
 * score columns (tid % 4) + 4j and the output columns (tid % 4) + 4i. */
#ifndef ONYX_GPU_ATTENTION_BODY_H
#define ONYX_GPU_ATTENTION_BODY_H

#include <math.h>
#include <stdint.h>

#include "gpu_attention.h"

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
#define GPU_ATTN_FN     static __device__ inline
#define GPU_ATTN_UNROLL _Pragma("unroll")
#else
#define GPU_ATTN_FN static inline
#define GPU_ATTN_UNROLL
#endif

/* Row strides of the shared tiles: one float of padding, so the threads of a
 * warp that read one column of different rows hit different banks. */
#define GPU_ATTN_LD  (GPU_ATTN_DMAX + 1)
#define GPU_ATTN_PLD (GPU_ATTN_BK + 1)
/* Output accumulators and scores per thread. */
#define GPU_ATTN_ACC (GPU_ATTN_DMAX / 4)
#define GPU_ATTN_SPT (GPU_ATTN_BK / 4)

#if GPU_ATTN_BQ * 4 != GPU_ATTN_THREADS || GPU_ATTN_BK % 4 || GPU_ATTN_DMAX % 4
#error "the attention's thread layout: four threads per query row"
#endif

/* A block's shared memory (about 37 KiB). */
typedef struct GpuAttnShared {
  float q[GPU_ATTN_BQ * GPU_ATTN_LD];  /* the block's queries */
  float kv[GPU_ATTN_BK * GPU_ATTN_LD]; /* the current key tile, then its value tile */
  float p[GPU_ATTN_BQ * GPU_ATTN_PLD]; /* the tile's scores, then their exponentials */
  float m[GPU_ATTN_BQ];                /* per query row: the running max */
  float l[GPU_ATTN_BQ];                /* the running sum of exp(s - m) */
  float alpha[GPU_ATTN_BQ];            /* the tile's rescale exp(m_old - m_new) */
} GpuAttnShared;

/* The keys that block (query tile from q0) visits: all T, or with a causal
 * mask only those up to its last query (tiles wholly above the diagonal are
 * skipped: every score there has a mask at most GPU_ATTN_MASKED). */
GPU_ATTN_FN int64_t gpub_attn_key_end(const GpuAttn* a, int64_t q0) {
  int64_t end = a->t;
  if (a->causal) {
    int64_t last = q0 + GPU_ATTN_BQ;
    if (last > a->s) last = a->s;
    if (last < end) end = last;
  }
  return end;
}

/* Phase 0: the block's queries into shared memory (zero past S); the running
 * max and sum start at -inf and 0. */
GPU_ATTN_FN void gpub_attn_load_q(const GpuAttn* a, GpuAttnShared* sh, int tid, int64_t b,
                                  int64_t h, int64_t q0) {
  const int64_t D = a->d;
  for (int64_t i = tid; i < GPU_ATTN_BQ * D; i += GPU_ATTN_THREADS) {
    const int64_t r = i / D, d = i % D, s = q0 + r;
    sh->q[r * GPU_ATTN_LD + d] = s < a->s ? a->q[(b * a->s + s) * a->ld + h * D + d] : 0.0f;
  }
  if (tid < GPU_ATTN_BQ) {
    sh->m[tid] = -INFINITY;
    sh->l[tid] = 0.0f;
  }
}

/* Phases 1 and 3: keys (src a->k) or values (src a->v) k0 .. k0 + BK - 1 into
 * the shared tile (zero past T); consecutive threads read consecutive floats
 * of a row. */
GPU_ATTN_FN void gpub_attn_load_kv(const GpuAttn* a, const float* src, GpuAttnShared* sh, int tid,
                                   int64_t b, int64_t h, int64_t k0) {
  const int64_t D = a->d;
  for (int64_t i = tid; i < GPU_ATTN_BK * D; i += GPU_ATTN_THREADS) {
    const int64_t r = i / D, d = i % D, t = k0 + r;
    sh->kv[r * GPU_ATTN_LD + d] = t < a->t ? src[(b * a->t + t) * a->ld + h * D + d] : 0.0f;
  }
}

/* Phase 2: the thread's scores scale * q_s . k_t + mask[b, h, s, t] of the
 * tile; -inf for a query past S or a key past T (exp gives 0 there). */
GPU_ATTN_FN void gpub_attn_scores(const GpuAttn* a, GpuAttnShared* sh, int tid, int64_t b,
                                  int64_t h, int64_t q0, int64_t k0) {
  const int r = tid >> 2, lane = tid & 3;
  const int64_t s = q0 + r, D = a->d;
  float acc[GPU_ATTN_SPT];
  GPU_ATTN_UNROLL
  for (int j = 0; j < GPU_ATTN_SPT; j++)
    acc[j] = 0.0f;
  const float* qr = sh->q + r * GPU_ATTN_LD;
  const float* kr = sh->kv + lane * GPU_ATTN_LD;
  for (int64_t d = 0; d < D; d++) {
    const float qv = qr[d];
    GPU_ATTN_UNROLL
    for (int j = 0; j < GPU_ATTN_SPT; j++)
      acc[j] += qv * kr[4 * j * GPU_ATTN_LD + d];
  }
  const float* mrow =
      a->mask && s < a->s ? a->mask + b * a->ms[0] + h * a->ms[1] + s * a->ms[2] : 0;
  GPU_ATTN_UNROLL
  for (int j = 0; j < GPU_ATTN_SPT; j++) {
    const int c = lane + 4 * j;
    const int64_t t = k0 + c;
    float v = -INFINITY;
    if (s < a->s && t < a->t) {
      v = a->scale * acc[j];
      if (mrow) v += mrow[t * a->ms[3]];
    }
    sh->p[r * GPU_ATTN_PLD + c] = v;
  }
}

/* Phase 3 (threads below BQ, one query row each): the online softmax step
 * over the tile's scores. A row whose scores so far are all -inf keeps
 * m = -inf, l = 0 and contributes nothing (exp(-inf - -inf) would be NaN). */
GPU_ATTN_FN void gpub_attn_softmax(GpuAttnShared* sh, int tid) {
  if (tid >= GPU_ATTN_BQ) return;
  float* p = sh->p + tid * GPU_ATTN_PLD;
  const float m_old = sh->m[tid];
  float mx = m_old;
  for (int c = 0; c < GPU_ATTN_BK; c++)
    mx = fmaxf(mx, p[c]);
  if (mx == -INFINITY) {
    for (int c = 0; c < GPU_ATTN_BK; c++)
      p[c] = 0.0f;
    sh->alpha[tid] = 1.0f;
    return;
  }
  const float alpha = expf(m_old - mx); /* 0 on the first tile with a finite score */
  float sum = 0.0f;
  for (int c = 0; c < GPU_ATTN_BK; c++) {
    const float e = expf(p[c] - mx);
    p[c] = e;
    sum += e;
  }
  sh->l[tid] = sh->l[tid] * alpha + sum;
  sh->m[tid] = mx;
  sh->alpha[tid] = alpha;
}

/* Phase 4: the thread's accumulators (columns lane + 4i < D of its row)
 * rescaled, plus the tile's exponentials times the value tile. */
GPU_ATTN_FN void gpub_attn_pv(const GpuAttn* a, const GpuAttnShared* sh, int tid, float* acc) {
  const int r = tid >> 2, lane = tid & 3;
  const int n = (int)((a->d - lane + 3) / 4); /* this thread's columns */
  const float alpha = sh->alpha[r];
  GPU_ATTN_UNROLL
  for (int i = 0; i < GPU_ATTN_ACC; i++)
    if (i < n) acc[i] *= alpha;
  const float* p = sh->p + r * GPU_ATTN_PLD;
  for (int c = 0; c < GPU_ATTN_BK; c++) {
    const float pc = p[c];
    const float* vr = sh->kv + c * GPU_ATTN_LD + lane;
    GPU_ATTN_UNROLL
    for (int i = 0; i < GPU_ATTN_ACC; i++)
      if (i < n) acc[i] += pc * vr[4 * i];
  }
}

/* Phase 5: Y = acc / l for the thread's columns of a query below S (a row
 * whose every score was -inf gives 0 / 0 = NaN, as the softmax of such a
 * row does). */
GPU_ATTN_FN void gpub_attn_store(const GpuAttn* a, const GpuAttnShared* sh, int tid,
                                 const float* acc, int64_t b, int64_t h, int64_t q0) {
  const int r = tid >> 2, lane = tid & 3;
  const int64_t s = q0 + r, D = a->d;
  if (s >= a->s) return;
  const float l = sh->l[r];
  float* y = a->y + (b * a->s + s) * (a->h * D) + h * D;
  GPU_ATTN_UNROLL
  for (int i = 0; i < GPU_ATTN_ACC; i++) {
    const int64_t d = lane + 4 * i;
    if (d < D) y[d] = acc[i] / l;
  }
}

/* The kernel for heads above GPU_ATTN_DMAX (or grids past the launch
 * limits): one thread per query row (row = (b*H + h)*S + s), the same online
 * softmax one key at a time, Y's row itself the accumulator. With a causal
 * mask the keys past s are skipped. */
GPU_ATTN_FN void gpub_attn_row(const GpuAttn* a, int64_t row) {
  const int64_t S = a->s, H = a->h, D = a->d, T = a->t;
  const int64_t s = row % S, bh = row / S, h = bh % H, b = bh / H;
  const float* q = a->q + (b * S + s) * a->ld + h * D;
  float* y = a->y + (b * S + s) * (H * D) + h * D;
  const float* mrow = a->mask ? a->mask + b * a->ms[0] + h * a->ms[1] + s * a->ms[2] : 0;
  for (int64_t d = 0; d < D; d++)
    y[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int64_t end = a->causal && s + 1 < T ? s + 1 : T;
  for (int64_t t = 0; t < end; t++) {
    const float* k = a->k + (b * T + t) * a->ld + h * D;
    float dot = 0.0f;
    for (int64_t d = 0; d < D; d++)
      dot += q[d] * k[d];
    float sc = a->scale * dot;
    if (mrow) sc += mrow[t * a->ms[3]];
    const float mx = fmaxf(m, sc);
    if (mx == -INFINITY) continue;
    const float alpha = expf(m - mx), e = expf(sc - mx);
    const float* v = a->v + (b * T + t) * a->ld + h * D;
    for (int64_t d = 0; d < D; d++)
      y[d] = y[d] * alpha + e * v[d];
    l = l * alpha + e;
    m = mx;
  }
  for (int64_t d = 0; d < D; d++)
    y[d] /= l;
}

#endif /* ONYX_GPU_ATTENTION_BODY_H */
