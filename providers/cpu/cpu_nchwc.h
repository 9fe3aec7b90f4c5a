/* cpu_nchwc.h — internal to the CPU provider: the kernels of the com.onyx
 * blocked-channel ops (schemas/schemas_nchwc.c) that the layout pass
 * (host/optimizer/opt_layout_nchwc.c) rewrites conv chains into. A blocked
 * tensor of [N, C, H, W] is [N, Cb = ceil(C / b), H, W, b]: the b channels of
 * one block of one pixel are adjacent, one vector register of b = 16 floats
 * on AVX-512 or 8 on AVX2. Between convs of a chain the activations stay
 * blocked, so no conv pays an NCHW transpose of its own.
 *
 * NchwcConv computes pointwise convolutions (1x1, stride 1, no padding,
 * group 1) as a direct product over the input channels: per task two
 * output blocks by six pixels, twelve vector accumulators, each input
 * value broadcast once against two weight vectors; and depthwise ones
 * (group = C = M, any kernel, stride, dilation and padding) with one vector
 * of b channels per pixel and tap, four output pixels at a time inside the
 * image. Full convolutions (group 1, any window) of a few input channels,
 * blocked or NCHW (a chain's stem reads the image directly), run a direct
 * loop: six output pixels of one output block at a time inside the image,
 * each input value broadcast against the tap's weight vector. W is packed
 * once at creation. Bias, the residual Z and FusedConv's
 * activation are applied before the tile leaves the cache. Each output is
 * bias + the sum over input channels (pointwise) or over kernel rows, then
 * columns (depthwise; full: over input channels, then kernel rows, then
 * columns) of x * w, + z, then the activation, on every path;
 * the paths differ by FMA rounding only. A portable scalar loop computes
 * the same where the block's ISA is missing. */
#ifndef CPU_NCHWC_H
#define CPU_NCHWC_H

#include "cpu_kernels.h"

#include <stdbool.h>
#include <stddef.h>

enum { CPU_NCHWC_SCALAR = 0, CPU_NCHWC_AVX2 = 1, CPU_NCHWC_AVX512 = 2 };

/* The path blocked kernels take: AVX-512 (avx512f) or AVX2 (avx2 + fma) by
 * cpuid, capped by ONYX_CPU_ISA=generic|avx2; scalar elsewhere. Block 16
 * runs vectorized on the AVX-512 path, block 8 on the AVX2 and AVX-512
 * paths; other combinations run the scalar loops. */
int cpu_nchwc_path(void);
/* Tests: forces the path (capped by what the machine has), -1: cpuid. Not
 * thread-safe against concurrent runs. */
void cpu_nchwc_force_path(int path);

/* One blocked convolution. wp and bias are packed (cpu_nchwc_pack_*): bias
 * holds mb * block floats (zero past m), or is NULL. */
typedef struct CpuNchwcConv {
  const float* x; /* [n, cb, h, w, block] */
  const float* wp;
  const float* bias;
  const float* z; /* Y's shape, or NULL */
  float* y;       /* [n, mb, oh, ow, block] */
  size_t n, c, cb, h, w, m, mb, oh, ow, block;
  bool depthwise; /* group = c = m */
  bool full;      /* group 1, any window, through the direct loop below */
  bool nchw_in;   /* full only: X is NCHW [n, c, h, w] (a chain's first conv) */
  size_t kh, kw, sh, sw, dh, dw, pt, pl;
  int act; /* CpuAct */
  float alpha, lo, hi;
} CpuNchwcConv;

/* Floats of the packed W: pointwise mb * c * block, depthwise cb * kh * kw
 * * block, full mb * c * kh * kw * block. */
size_t cpu_nchwc_pointwise_floats(size_t m, size_t c, size_t block);
size_t cpu_nchwc_full_floats(size_t m, size_t c, size_t kh, size_t kw, size_t block);
size_t cpu_nchwc_depthwise_floats(size_t c, size_t kh, size_t kw, size_t block);
/* W [m, c] (1x1): out[ob][ci][j] = W[ob * block + j][ci], zero past m. */
void cpu_nchwc_pack_pointwise(const float* w, size_t m, size_t c, size_t block, float* out);
/* W [m, c, kh, kw]: out[ob][ci][tap][j] = W[ob * block + j][ci][tap], zero
 * past m (the pointwise packing when kh = kw = 1). */
void cpu_nchwc_pack_full(const float* w, size_t m, size_t c, size_t kh, size_t kw, size_t block,
                         float* out);
/* W [c, 1, kh, kw]: out[cb][tap][j] = W[cb * block + j][tap], zero past c. */
void cpu_nchwc_pack_depthwise(const float* w, size_t c, size_t kh, size_t kw, size_t block,
                              float* out);

/* Runs the convolution on ctx's thread pool; ONYX_CANCELLED when the run
 * was cancelled (parts of Y then are not written). */
OnyxStatus* cpu_nchwc_conv_run(OnyxKernelContext* ctx, const CpuNchwcConv* p);

/* [n, c, hw] -> [n, ceil(c / block), hw, block], padded lanes zero. */
void cpu_nchwc_reorder_input(const float* x, float* y, size_t n, size_t c, size_t hw, size_t block);
/* [n, cb, hw, block] -> [n, c, hw] (c <= cb * block). */
void cpu_nchwc_reorder_output(const float* x, float* y, size_t n, size_t c, size_t cb, size_t hw,
                              size_t block);
/* [n, cb, hw, block] -> [n, cb, block]: the mean over hw of every lane. */
void cpu_nchwc_global_average(const float* x, float* y, size_t n, size_t cb, size_t hw,
                              size_t block);

/* y[i][b][p][:] = x[i][b][p][:] * s[i][b][:] over [n, cb, hw, block] (y may
 * be x). */
void cpu_nchwc_scale(const float* x, const float* s, float* y, size_t n, size_t cb, size_t hw,
                     size_t block);

OnyxStatus* cpu_register_nchwc(OnyxKernelRegistry* r);

#endif /* CPU_NCHWC_H */
