/* cpu_winograd.h — internal to the CPU provider: Winograd F(4x4, 3x3) for
 * float32 2-D convolutions with 3x3 kernels, unit strides and dilations,
 * group 1 and constant weights (cpu_conv_winograd.c). cpu_conv.c's Conv
 * transforms W once at creation (cpu_winograd_create) and sends a run here
 * when cpu_winograd_pays says so (and, where the direct path exists, the
 * image has enough tiles for Winograd to win).
 *
 * ONYX_CPU_WINOGRAD=0 in the environment (read when a Conv is created)
 * turns the path off. */
#ifndef CPU_WINOGRAD_H
#define CPU_WINOGRAD_H

#include "cpu_kernels.h"

#include <stddef.h>

/* Smallest channel counts that take the path (below, the transforms cost
 * more than the multiplies they save). */
#define CPU_WINOGRAD_MIN_CHANNELS 16

/* Weights transformed for one conv: 36 matrices U[xi] (oc x ic), each packed
 * as the GEMM's A operand; for F(2x2, 3x3) (small images, m = 2) 16. */
typedef struct CpuWinograd {
  size_t oc, ic;
  size_t m;        /* output tile: 4 (F(4x4, 3x3)) or 2 (F(2x2, 3x3)) */
  size_t points;   /* (m + 2)^2 */
  size_t mr, nr;   /* cpu_gemm_mr()/nr() when packed: runs check they still hold */
  size_t u_floats; /* floats of one packed U[xi] */
  float* u;        /* 36 packed U[xi], u_floats apart */
} CpuWinograd;

/* One run (cpu_kernels.h); its strides and dilations are 1 and are not
 * read. */
typedef CpuConvRun CpuWinogradConv;

/* 0 when ONYX_CPU_WINOGRAD is "0", else 1. */
int cpu_winograd_enabled(void);

/* Whether a conv with W (oc, ic, kh, kw), these strides, dilations and group
 * is one the path handles (and channels large enough to pay). */
int cpu_winograd_applies(size_t oc, size_t ic, size_t kh, size_t kw, size_t sh, size_t sw,
                         size_t dh, size_t dw, size_t group);

/* Transforms constant W (oc, ic, 3, 3) into packed U for output tiles of
 * m x m (4 or 2); NULL when out of memory. */
CpuWinograd* cpu_winograd_create(const float* w, size_t oc, size_t ic, size_t m);

/* The output tile for runs of n images with an oh x ow output: 4, or 2 when
 * 4x4 tiles would be too few to fill the GEMM (e.g. one 7x7 image), or 0
 * when neither pays. */
size_t cpu_winograd_pick_tile(size_t n, size_t oh, size_t ow);
void cpu_winograd_free(CpuWinograd* wg);

/* Whether a run of n images with an oh x ow output should take the path:
 * enough m x m tiles to fill the GEMM's panels, and the packing still
 * matching the micro-kernel in use. */
int cpu_winograd_pays(const CpuWinograd* wg, size_t n, size_t oh, size_t ow);

/* Runs the conv on ctx's thread pool with ctx's scratch memory. Results do
 * not depend on the number of threads. */
OnyxStatus* cpu_winograd_conv(const CpuWinograd* wg, OnyxKernelContext* ctx,
                              const CpuWinogradConv* p);

/* Tests: the number of cpu_winograd_conv runs in this process. */
size_t cpu_winograd_runs(void);

#endif /* CPU_WINOGRAD_H */
