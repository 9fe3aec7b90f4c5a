/* cpu_conv_direct.h — internal to the CPU provider: direct float32 2-D
 * convolution with AVX-512 or AVX2 (cpu_conv_direct.c), for group-1 convs with
 * constant weights that Winograd does not take: strided windows (ResNet's
 * 7x7 stride-2 stem, its stride-2 3x3 and 1x1 convs) and small outputs with
 * many channels (its 512-channel 7x7 layers).
 *
 * No im2col matrix is built: each output position reads its window straight
 * from a zero-padded copy of X, so the GEMM's "A" operand is X itself seen
 * through one offset per (channel, kernel row, kernel column). The register
 * tile is 6 output positions x 64 output channels (24 accumulators): per
 * step, 4 vector loads of packed W and 6 broadcasts of X feed 24 FMAs. With
 * AVX2 it is 6 positions x 16 channels (12 ymm accumulators), the AVX2
 * GEMM's tile, and the provider takes it for strided windows only (the
 * stem, ResNet's stride-2 3x3 convs): its unit-stride layers run faster on
 * Winograd and the small-output GEMM there. With AVX2, a column stride of 2,
 * at least 12 output columns and K <= 256 (the stem), the row kernel runs
 * instead: 16 positions of a row in the lanes x 6 channels broadcast, read
 * from X split into even and odd columns, written straight into Y's rows
 * (same sums in the same order: the same bits as the tile kernel). On
 * AVX-512 machines convs with at most 32 output channels (MobileNet's and
 * EfficientNet's stems) are packed for the AVX2 kernels too, whose
 * 16-channel blocks they fill, where the 64-channel tile would be mostly
 * zeros.
 *
 * ONYX_CPU_CONV_DIRECT=0 in the environment (read when a Conv is created)
 * turns the path off, ONYX_CPU_CONV_ROWS=0 the row kernel. */
#ifndef CPU_CONV_DIRECT_H
#define CPU_CONV_DIRECT_H

#include "cpu_kernels.h"

#include <stddef.h>

enum { CPU_CONV_DIRECT_NONE = 0, CPU_CONV_DIRECT_AVX512, CPU_CONV_DIRECT_AVX2 };

/* W (oc, ic, kh, kw) packed as blocks of ocb output channels (64 for the
 * AVX-512 kernel, 16 for the AVX2 one): block g holds K = ic * kh * kw rows
 * of ocb floats (W[g * ocb + l][k] at [k][l], zero for channels past oc). */
typedef struct CpuConvDirect {
  size_t oc, ic, kh, kw, k, ocb;
  int kernel; /* CPU_CONV_DIRECT_AVX512 or _AVX2: the one W was packed for */
  int rows;   /* AVX2: column-stride-2 convs may take the row kernel */
  float* w;
} CpuConvDirect;

/* One run (cpu_kernels.h). */
typedef CpuConvRun CpuConvDirectRun;

/* The kernel a Conv created now would use: the GEMM's ISA (AVX-512 or
 * AVX2; ONYX_CPU_ISA caps it) unless ONYX_CPU_CONV_DIRECT is "0"; NONE on
 * other machines. */
int cpu_conv_direct_kernel(void);
/* cpu_conv_direct_kernel() != CPU_CONV_DIRECT_NONE. */
int cpu_conv_direct_available(void);

/* Packs constant W; NULL when out of memory. */
CpuConvDirect* cpu_conv_direct_create(const float* w, size_t oc, size_t ic, size_t kh, size_t kw);
void cpu_conv_direct_free(CpuConvDirect* d);

/* Runs the conv on ctx's thread pool with ctx's scratch memory. Each output
 * sums over (channel, kernel row, kernel column) in that order, whatever the
 * pool, so results do not depend on the number of threads. */
OnyxStatus* cpu_conv_direct_run(const CpuConvDirect* d, OnyxKernelContext* ctx,
                                const CpuConvDirectRun* p);

/* Tests: the number of cpu_conv_direct_run calls in this process, and of
 * those that took the AVX2 row kernel. */
size_t cpu_conv_direct_runs(void);
size_t cpu_conv_direct_row_runs(void);

#endif /* CPU_CONV_DIRECT_H */
