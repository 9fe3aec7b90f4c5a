/* cpu_conv_depthwise.h — internal to the CPU provider: direct float32 2-D
 * depthwise convolution (cpu_conv_depthwise.c), for Conv / FusedConv whose
 * groups hold one input channel each (W of shape (m, 1, kh, kw), m a
 * multiple of the c input channels: output channel o reads input channel
 * o / (m / c)); it also computes groups of several channels (below).
 * MobileNet, EfficientNet, MNASNet and ShuffleNet are built from depthwise
 * convs; im2col + GEMM would run each as m GEMMs of a single row.
 *
 * NCHW, any kernel size, stride, dilation and padding. Vectorized over
 * the output width (16 columns per AVX-512 register, 8 per AVX2 one), 4
 * output rows at a time (then 3, 2 or 1) with up to 4 vectors per row, so
 * that 4 to 16 independent accumulators hide the FMA latency even on 7- and
 * 14-wide planes: each kernel tap is one broadcast weight times one (unit
 * stride) or two (stride 2, even lanes) loads of an input row, or a gather
 * for other strides. Column vectors whose taps all lie inside the row load
 * without masks; the vectors at the padded borders and the row's tail load
 * through masks (no access on masked-off lanes), and kernel rows above or
 * below the input read a row of zeros, so no padded copy of X is made. The
 * column layout and the border masks are planned once per run (every plane
 * shares them). Bias, FusedConv's residual Z and its activation are applied
 * before the row is stored. A portable scalar loop does the same where
 * neither ISA is present, and for column strides above 2^24.
 *
 * Depthwise convs proper (m == c) narrower than 32 output columns (64 on
 * the AVX2 path), or with
 * windows of 25 taps or more, run channel-blocked instead on the vector
 * paths: 16 (AVX-512) or 8 (AVX2) channels of an image transposed into a
 * zero-padded block of channel-vector pixels, one FMA per tap and output
 * pixel, the result transposed back into Y with Z and the activation
 * (cpu_conv_depthwise.c, "Channel-blocked path").
 *
 * Each output is bias + sum over kernel rows, then columns, of x * w (then
 * + z, then the activation) on every path and for any pool; the paths
 * differ by FMA rounding only. Planes (image, output channel) are spread
 * over the pool; the run's cancellation is polled once per plane. */
#ifndef CPU_CONV_DEPTHWISE_H
#define CPU_CONV_DEPTHWISE_H

#include "cpu_kernels.h"

#include <stdbool.h>
#include <stddef.h>

/* One run: the geometry, bias, Z and activation of `conv` (cpu_kernels.h;
 * X is (n, c, h, w), Y (n, m, oh, ow)) and W, (m, cg, kh, kw), in c / cg
 * groups: output channel o reads the cg input channels of group o / (m /
 * groups), summing over them first. cg 1 is depthwise (m a multiple of c),
 * the only case Conv sends here: on RegNet-Y-400MF's groups of 8 channels
 * this kernel, which loads each input vector once per output channel, took
 * 33% of the model's time against 31% for im2col + GEMM (perf, 1 thread,
 * AVX-512), so wider groups stay there. */
typedef struct CpuDepthwiseRun {
  CpuConvRun conv;
  const float* w;
  size_t c, m, cg, kh, kw;
} CpuDepthwiseRun;

enum { CPU_DW_SCALAR = 0, CPU_DW_AVX2 = 1, CPU_DW_AVX512 = 2 };

/* The path runs take: AVX-512 (avx512f) or AVX2 (avx2 + fma) by cpuid,
 * capped by ONYX_CPU_ISA=generic|avx2 as the GEMM is; scalar elsewhere.
 * ONYX_CPU_CONV_DEPTHWISE=0 (read once) turns the depthwise path off:
 * cpu_conv_depthwise_enabled() is then false and Conv takes im2col + GEMM. */
int cpu_conv_depthwise_path(void);
bool cpu_conv_depthwise_enabled(void);

/* Tests: forces the path (CPU_DW_*, capped by what the machine has), or -1
 * to go back to cpuid. Not thread-safe against concurrent runs. */
void cpu_conv_depthwise_force_path(int path);

/* Tests: 1 sends every depthwise conv the channel-blocked path can take
 * (cpu_conv_depthwise.c) there whatever its width, 0 none, -1 back to the
 * rule (planes narrower than 32 columns). Not thread-safe against
 * concurrent runs. */
void cpu_conv_depthwise_force_cblock(int on);

/* Runs the convolution on ctx's thread pool. ONYX_CANCELLED when the run
 * was cancelled (some planes of Y then are not written). */
OnyxStatus* cpu_conv_depthwise_run(OnyxKernelContext* ctx, const CpuDepthwiseRun* p);

#endif /* CPU_CONV_DEPTHWISE_H */
