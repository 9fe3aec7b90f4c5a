/* gpu_emu_attention.c — the host emulation (tests, provider "gpuemu") of
 * the fused attention kernel (gpu_attention.cu): the same phases of
 * gpu_attention_body.h, run for every thread index of a block in turn
 * between what are barriers on the device, block after block, each thread's
 * registers (GpuAttnThread) kept per thread index; and the same one-row
 * kernel for heads above GPU_ATTN_DMAX. */
#include <stdint.h>
#include <stdlib.h>

#include "gpu_attention.h"
#include "gpu_attention_body.h"

#define EMU_OOM 2

int gpuk_attention(const GpuAttn* a, void* stream) {
  (void)stream;
  if (a->b <= 0 || a->h <= 0 || a->s <= 0 || a->dv <= 0) return 0; /* no output */
  const int64_t tiles = (a->s + GPU_ATTN_BQ - 1) / GPU_ATTN_BQ;
  if (a->d > GPU_ATTN_DMAX || a->dv > GPU_ATTN_DMAX || tiles > INT32_MAX || a->h > 65535 ||
      a->b > 65535) {
    for (int64_t r = 0; r < a->b * a->h * a->s; r++)
      gpub_attn_row(a, r);
    return 0;
  }
  /* the accumulators in use: the device kernel's instance for this head size */
  const int nacc = a->d <= 4 * GPU_ATTN_ACC_SMALL && a->dv <= 4 * GPU_ATTN_ACC_SMALL
                       ? GPU_ATTN_ACC_SMALL
                       : GPU_ATTN_ACC;
  GpuAttnShared* sh = malloc(sizeof *sh);
  GpuAttnThread* th = malloc(GPU_ATTN_THREADS * sizeof *th);
  if (!sh || !th) {
    free(sh);
    free(th);
    return EMU_OOM;
  }
  for (int64_t b = 0; b < a->b; b++)
    for (int64_t h = 0; h < a->h; h++)
      for (int64_t qt = 0; qt < tiles; qt++) {
        const int64_t q0 = qt * GPU_ATTN_BQ;
        for (int t = 0; t < GPU_ATTN_THREADS; t++)
          gpub_attn_begin(a, sh, &th[t], t, b, h, q0);
        const int64_t end = gpub_attn_key_end(a, q0);
        for (int64_t k0 = 0; k0 < end; k0 += GPU_ATTN_BK) {
          for (int t = 0; t < GPU_ATTN_THREADS; t++)
            gpub_attn_load_k(a, sh, t, b, h, k0);
          for (int t = 0; t < GPU_ATTN_THREADS; t++)
            gpub_attn_scores(a, sh, &th[t], t, b, h, q0, k0);
          for (int t = 0; t < GPU_ATTN_THREADS; t++) {
            gpub_attn_softmax(sh, &th[t], t, a->dv, nacc);
            gpub_attn_load_v(a, sh, t, b, h, k0);
          }
          for (int t = 0; t < GPU_ATTN_THREADS; t++)
            gpub_attn_pv(a, sh, &th[t], t, nacc);
        }
        for (int t = 0; t < GPU_ATTN_THREADS; t++)
          gpub_attn_store(a, &th[t], t, b, h, q0, nacc);
      }
  free(sh);
  free(th);
  return 0;
}
