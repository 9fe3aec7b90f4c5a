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
 * (scale * q . k + mask), each thread 8 of one query row in registers;
 * per query row its running max m and sum l: m' = max(m, tile max) (the
 * four threads' maxima through shared memory), the tile's exponentials
 * exp(s - m') into shared memory, l' = l exp(m - m') + their sum; each
 * thread's output accumulators are scaled by exp(m - m') and take P x V. At
 * the end Y = acc / l. Memory holds one tile of exponentials per block,
 * never S x T.
 *
 * Thread tid of the block owns query row tid / 4 and, of that row, the
 * score columns (tid % 4) + 4j and the output columns (tid % 4) + 4i. */
#ifndef ONYX_GPU_ATTENTION_BODY_H
#define ONYX_GPU_ATTENTION_BODY_H

#include <math.h>
#include <stdbool.h>
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
/* Output accumulators and scores per thread. The phases that touch the
 * accumulators take nacc, how many of them are in use (every head column
 * lane + 4i < nacc * 4): a constant of each kernel instance on the device
 * (GPU_ATTN_ACC_SMALL for heads up to 64 columns, else GPU_ATTN_ACC), so the
 * loops unroll to no more than the head needs. */
#define GPU_ATTN_ACC       (GPU_ATTN_DMAX / 4)
#define GPU_ATTN_ACC_SMALL 16
#define GPU_ATTN_SPT       (GPU_ATTN_BK / 4)

#if GPU_ATTN_BQ * 4 != GPU_ATTN_THREADS || GPU_ATTN_BK % 4 || GPU_ATTN_DMAX % 4
#error "the attention's thread layout: four threads per query row"
#endif

/* A block's shared memory (about 38 KiB). */
typedef struct GpuAttnShared {
  float q[GPU_ATTN_BQ * GPU_ATTN_LD];  /* the block's queries */
  float kv[GPU_ATTN_BK * GPU_ATTN_LD]; /* the current key tile, then its value tile */
  float p[GPU_ATTN_BQ * GPU_ATTN_PLD]; /* the tile's exp(s - m) */
  float pmax[GPU_ATTN_THREADS];        /* per thread: the max of its scores of the tile */
  float psum[GPU_ATTN_THREADS];        /* per thread: the sum of their exponentials */
} GpuAttnShared;

/* What one thread keeps across the phases (registers on the device): its
 * output accumulators, its scores of the current tile, and its row's
 * running max and sum (the four threads of a row hold equal copies). */
typedef struct GpuAttnThread {
  float acc[GPU_ATTN_ACC];
  float s[GPU_ATTN_SPT];
  float m, l;
} GpuAttnThread;

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

/* Copies rows r0 .. r0 + 32 - 1 of a [rows, D] head (row i at src + i * ld,
 * zero past n) into a shared tile: warp-sized runs of threads read
 * consecutive floats of a row, and no index is divided. */
GPU_ATTN_FN void gpub_attn_tile(const float* src, int64_t ld, int64_t r0, int64_t n, int64_t D,
                                float* tile, int tid) {
  for (int r = tid >> 5; r < 32; r += GPU_ATTN_THREADS / 32) {
    const int64_t row = r0 + r;
    float* out = tile + r * GPU_ATTN_LD;
    if (row < n) {
      const float* in = src + row * ld;
      for (int64_t d = tid & 31; d < D; d += 32)
        out[d] = in[d];
    } else {
      for (int64_t d = tid & 31; d < D; d += 32)
        out[d] = 0.0f;
    }
  }
}

/* Phase 0: the thread's state, and the block's queries into shared memory
 * (zero past S). */
GPU_ATTN_FN void gpub_attn_begin(const GpuAttn* a, GpuAttnShared* sh, GpuAttnThread* th, int tid,
                                 int64_t b, int64_t h, int64_t q0) {
  GPU_ATTN_UNROLL
  for (int i = 0; i < GPU_ATTN_ACC; i++)
    th->acc[i] = 0.0f;
  th->m = -INFINITY;
  th->l = 0.0f;
  gpub_attn_tile(a->q + b * a->qs[0] + h * a->qs[1], a->qs[2], q0, a->s, a->d, sh->q, tid);
}

/* Phase 1: keys k0 .. k0 + BK - 1 of the block's key/value head into the
 * shared tile (zero past T). */
GPU_ATTN_FN void gpub_attn_load_k(const GpuAttn* a, GpuAttnShared* sh, int tid, int64_t b,
                                  int64_t h, int64_t k0) {
  gpub_attn_tile(a->k + b * a->ks[0] + (h / a->group) * a->ks[1], a->ks[2], k0, a->t, a->d, sh->kv,
                 tid);
}

/* Phase 3: the same tile's values. */
GPU_ATTN_FN void gpub_attn_load_v(const GpuAttn* a, GpuAttnShared* sh, int tid, int64_t b,
                                  int64_t h, int64_t k0) {
  gpub_attn_tile(a->v + b * a->vs[0] + (h / a->group) * a->vs[1], a->vs[2], k0, a->t, a->dv, sh->kv,
                 tid);
}

/* The bias of key t for a query row whose mask row starts at element mrow
 * (-1: no mask): the mask's value, -inf past its keys, -inf above the
 * diagonal with causal_mask. */
GPU_ATTN_FN float gpub_attn_bias(const GpuAttn* a, int64_t mrow, int64_t s, int64_t t) {
  float bias = 0.0f;
  if (mrow >= 0) {
    if (t >= a->mask_len) return -INFINITY;
    const int64_t at = mrow + t * a->ms[3];
    if (a->mask_bool)
      bias = ((const unsigned char*)a->mask)[at] ? 0.0f : -INFINITY;
    else
      bias = ((const float*)a->mask)[at];
  }
  if (a->causal_mask && t > s) return -INFINITY;
  return bias;
}

/* Phase 2: the thread's scores scale * q_s . k_t + mask[b, h, s, t] of the
 * tile (-inf for a query past S or a key past T: exp gives 0 there), and
 * their max into pmax[]. */
GPU_ATTN_FN void gpub_attn_scores(const GpuAttn* a, GpuAttnShared* sh, GpuAttnThread* th, int tid,
                                  int64_t b, int64_t h, int64_t q0, int64_t k0) {
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
  const int64_t mrow = a->mask ? b * a->ms[0] + h * a->ms[1] + s * a->ms[2] : -1;
  float mx = -INFINITY;
  GPU_ATTN_UNROLL
  for (int j = 0; j < GPU_ATTN_SPT; j++) {
    const int64_t t = k0 + lane + 4 * j;
    float v = -INFINITY;
    if (s < a->s && t < a->t) v = a->scale * acc[j] + gpub_attn_bias(a, mrow, s, t);
    th->s[j] = v;
    mx = fmaxf(mx, v);
  }
  sh->pmax[tid] = mx;
}

/* Phase 3: the online softmax step of the thread's row over the tile: the
 * new running max m' from the four threads' maxima, the thread's
 * exp(s - m') into p and their sum into psum[], its accumulators and running
 * sum rescaled by exp(m - m'). A row whose scores so far are all -inf keeps
 * m = -inf, l = 0 and contributes nothing (exp(-inf - -inf) would be NaN). */
GPU_ATTN_FN void gpub_attn_softmax(GpuAttnShared* sh, GpuAttnThread* th, int tid, int64_t d_cols,
                                   int nacc) {
  const int r = tid >> 2, lane = tid & 3;
  const float* pm = sh->pmax + 4 * r;
  const float mx = fmaxf(fmaxf(th->m, fmaxf(pm[0], pm[1])), fmaxf(pm[2], pm[3]));
  float* p = sh->p + r * GPU_ATTN_PLD + lane;
  float sum = 0.0f;
  if (mx == -INFINITY) {
    GPU_ATTN_UNROLL
    for (int j = 0; j < GPU_ATTN_SPT; j++)
      p[4 * j] = 0.0f;
  } else {
    GPU_ATTN_UNROLL
    for (int j = 0; j < GPU_ATTN_SPT; j++) {
      const float e = expf(th->s[j] - mx);
      p[4 * j] = e;
      sum += e;
    }
    const float alpha = expf(th->m - mx);         /* 0 on the row's first finite tile */
    const int n = (int)((d_cols - lane + 3) / 4); /* this thread's output columns */
    GPU_ATTN_UNROLL
    for (int i = 0; i < nacc; i++)
      if (i < n) th->acc[i] *= alpha;
    th->l *= alpha;
    th->m = mx;
  }
  sh->psum[tid] = sum;
}

/* Phase 4: the row's running sum takes the four threads' sums, and the
 * thread's accumulators (columns lane + 4i < D of its row) the tile's
 * exponentials times the value tile. */
GPU_ATTN_FN void gpub_attn_pv(const GpuAttn* a, const GpuAttnShared* sh, GpuAttnThread* th, int tid,
                              int nacc) {
  const int r = tid >> 2, lane = tid & 3;
  const float* ps = sh->psum + 4 * r;
  th->l += (ps[0] + ps[1]) + (ps[2] + ps[3]);
  const int n = (int)((a->dv - lane + 3) / 4);
  const float* p = sh->p + r * GPU_ATTN_PLD;
  for (int c = 0; c < GPU_ATTN_BK; c++) {
    const float pc = p[c];
    const float* vr = sh->kv + c * GPU_ATTN_LD + lane;
    GPU_ATTN_UNROLL
    for (int i = 0; i < nacc; i++)
      if (i < n) th->acc[i] += pc * vr[4 * i];
  }
}

/* Phase 5: Y = acc / l for the thread's columns of a query below S (a row
 * whose every score was -inf gives 0 / 0 = NaN, as the softmax of such a
 * row does, or 0 with zero_masked_rows). */
GPU_ATTN_FN void gpub_attn_store(const GpuAttn* a, const GpuAttnThread* th, int tid, int64_t b,
                                 int64_t h, int64_t q0, int nacc) {
  const int r = tid >> 2, lane = tid & 3;
  const int64_t s = q0 + r;
  if (s >= a->s) return;
  float* y = a->y + b * a->ys[0] + h * a->ys[1] + s * a->ys[2];
  const bool zero = a->zero_masked_rows && th->l == 0.0f;
  GPU_ATTN_UNROLL
  for (int i = 0; i < nacc; i++) {
    const int64_t d = lane + 4 * i;
    if (d < a->dv) y[d] = zero ? 0.0f : th->acc[i] / th->l;
  }
}

/* The kernel for heads above GPU_ATTN_DMAX (or grids past the launch
 * limits): one thread per query row (row = (b*H + h)*S + s), the same online
 * softmax one key at a time, Y's row itself the accumulator. With causal the
 * keys past s are skipped. */
GPU_ATTN_FN void gpub_attn_row(const GpuAttn* a, int64_t row) {
  const int64_t S = a->s, H = a->h, D = a->d, Dv = a->dv, T = a->t;
  const int64_t s = row % S, bh = row / S, h = bh % H, b = bh / H, hk = h / a->group;
  const float* q = a->q + b * a->qs[0] + h * a->qs[1] + s * a->qs[2];
  float* y = a->y + b * a->ys[0] + h * a->ys[1] + s * a->ys[2];
  const int64_t mrow = a->mask ? b * a->ms[0] + h * a->ms[1] + s * a->ms[2] : -1;
  for (int64_t d = 0; d < Dv; d++)
    y[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int64_t end = a->causal && s + 1 < T ? s + 1 : T;
  for (int64_t t = 0; t < end; t++) {
    const float* k = a->k + b * a->ks[0] + hk * a->ks[1] + t * a->ks[2];
    float dot = 0.0f;
    for (int64_t d = 0; d < D; d++)
      dot += q[d] * k[d];
    const float sc = a->scale * dot + gpub_attn_bias(a, mrow, s, t);
    const float mx = fmaxf(m, sc);
    if (mx == -INFINITY) continue;
    const float alpha = expf(m - mx), e = expf(sc - mx);
    const float* v = a->v + b * a->vs[0] + hk * a->vs[1] + t * a->vs[2];
    for (int64_t d = 0; d < Dv; d++)
      y[d] = y[d] * alpha + e * v[d];
    l = l * alpha + e;
    m = mx;
  }
  const bool zero = a->zero_masked_rows && l == 0.0f;
  for (int64_t d = 0; d < Dv; d++)
    y[d] = zero ? 0.0f : y[d] / l;
}

#endif /* ONYX_GPU_ATTENTION_BODY_H */
