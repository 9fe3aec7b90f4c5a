/* gpu_emu_fused.c — the host emulation (tests, provider "gpuemu") of
 * com.onyx FusedElementwise's kernel (gpu_fused.cu): the same per-element
 * body of gpu_fused_body.h, run for every element in turn. */
#include <stdint.h>

#include "gpu_fused.h"
#include "gpu_fused_body.h"

int gpuk_fused(const GpuFeArgs* a, void* stream) {
  (void)stream;
  for (int64_t i = 0; i < a->n; i++)
    gpub_fe_elem(a, i);
  return 0;
}
