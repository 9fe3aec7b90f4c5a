/* cpu_grad_conv_direct.h — internal to the CPU provider: ConvGrad's direct
 * float32 AVX-512 kernels for 2-D convolutions with unit strides and
 * dilations and few channels (cpu_grad_conv_direct.c), where im2col's data
 * movement costs as much as the arithmetic (16 channels, 16 x 16 images).
 *
 *   dW[m, c, ky, kx] = sum over n, oy, ox of dY[n, m, oy, ox] .
 *                      X[n, c, oy + ky - pt, ox + kx - pl]
 *     Sums of outer products over output positions: no im2col matrix. X is
 *     copied once into zero-padded planes; a register tile of 8 output
 *     channels x 3 taps of one kernel row keeps 24 vectors of 16 partial
 *     sums (16 output columns in the lanes) over every image and output
 *     row, then adds each vector's lanes.
 *   dX[n, c, iy, ix] = sum over m, ky, kx of W[m, c, ky, kx] .
 *                      dY[n, m, iy + pt - ky, ix + pl - kx]
 *     A direct convolution of dY (zero-padded) with W transposed and
 *     flipped: a register tile of 16 columns of dX x 3 rows x 8 input
 *     channels (24 vectors) or x 4 rows x 4 channels (16 vectors), whichever
 *     computes fewer padded rows and channels, W's channels broadcast per
 *     (m, tap).
 *
 * Each output is summed in a fixed order whatever the pool's size (dW: per
 * lane over n, oy and the lane's columns, then the 16 lanes; dX: over m,
 * ky, kx), so results do not depend on the number of threads. */
#ifndef CPU_GRAD_CONV_DIRECT_H
#define CPU_GRAD_CONV_DIRECT_H

#include <stdbool.h>
#include <stddef.h>

#include "cpu_kernels.h"
#include "cpu_util.h"

/* One group of a 2-D convolution with unit strides and dilations. X is
 * (n, xc, ih, iw) and dY (n, yc, oh, ow) with oh = ih + pt + pb - kh + 1,
 * ow = iw + pl + pr - kw + 1; the group reads channels [0, c) of X and
 * [0, m) of dY through pointers that start at the group's first channel,
 * and W / dW are (m, c, kh, kw). */
typedef struct CpuGradConv2d {
  size_t n, c, m, xc, yc;
  size_t ih, iw, oh, ow, kh, kw;
  size_t pt, pl;
} CpuGradConv2d;

/* The largest channel counts (c and m) ConvGrad gives the direct kernels,
 * which are for few channels; larger convolutions take the GEMM paths. */
enum { CPU_GRAD_CONV_DIRECT_MAX_CH = 64 };

/* Whether the machine runs the kernels (AVX-512, unless ONYX_CPU_ISA caps
 * the provider below it). */
bool cpu_grad_conv_direct_available(void);

/* Scratch floats each kernel needs for g; false when the count overflows. */
bool cpu_grad_conv_dw_scratch(const CpuGradConv2d* g, size_t* floats);
bool cpu_grad_conv_dx_scratch(const CpuGradConv2d* g, size_t* floats);

/* dW (m, c, kh, kw), overwritten. */
void cpu_grad_conv_dw(OnyxThreadPool* pool, const CpuGradConv2d* g, const float* x, const float* dy,
                      float* dw, float* scratch, CpuStop* stop);
/* dX (n, xc, ih, iw): the group's channels [0, c) overwritten. */
void cpu_grad_conv_dx(OnyxThreadPool* pool, const CpuGradConv2d* g, const float* dy, const float* w,
                      float* dx, float* scratch, CpuStop* stop);

/* The forward convolution of the same geometry with dX's kernel: Y (n,
 * yc, oh, ow), the group's channels [0, m) overwritten, = Conv(X, W) with
 * pads pt, pl at the start (the end pads are implied by oh and ow) and no
 * bias: the dX kernel run on X with W transposed and its taps flipped.
 * It needs pt <= kh - 1 and pl <= kw - 1: cpu_grad_conv_fwd_scratch is
 * false for other pads (or a scratch count that overflows), and
 * cpu_grad_conv_fwd then computes nothing. */
bool cpu_grad_conv_fwd_scratch(const CpuGradConv2d* g, size_t* floats);
void cpu_grad_conv_fwd(OnyxThreadPool* pool, const CpuGradConv2d* g, const float* x, const float* w,
                       float* y, float* scratch, CpuStop* stop);

#endif /* CPU_GRAD_CONV_DIRECT_H */
