/* cpu_nchwc_pool.h — internal to the CPU provider: the pooling and
 * batch-normalization kernels of blocked tensors ([N, Cb, H, W, b]; see
 * cpu_nchwc.h), the com.onyx NchwcMaxPool, NchwcAveragePool and
 * NchwcBatchNormalization ops (schemas/schemas_nchwc.c) that the layout
 * pass (host/optimizer/opt_layout_nchwc.c) puts inside conv chains.
 *
 * The pools take one vector of b channels per pixel and tap: each output
 * is the maximum (seeded with the window's first tap inside X, then
 * `tap > best`, in the window's row-major order, as the NCHW MaxPool does,
 * so NaN handling matches) or the sum in that order divided by the taps
 * inside X (count_include_pad: the taps inside the padded input). A window
 * with no tap inside X gives -inf (MaxPool) or 0 (AveragePool), as the
 * NCHW kernels do. The batch normalization is y = x * s + t per channel
 * (s = scale / sqrt(var + epsilon), t = B - mean * s, folded once at
 * creation), s = t = 0 on the padded lanes, then an optional Relu. The path (scalar, AVX2,
 * AVX-512) is cpu_nchwc_path()'s, as for the other blocked kernels. */
#ifndef CPU_NCHWC_POOL_H
#define CPU_NCHWC_POOL_H

#include "cpu_kernels.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct CpuNchwcPool {
  const float* x; /* [n, cb, h, w, block] */
  float* y;       /* [n, cb, oh, ow, block] */
  size_t n, cb, h, w, oh, ow, block;
  size_t kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  bool max;               /* MaxPool, else AveragePool */
  bool count_include_pad; /* AveragePool's divisor */
} CpuNchwcPool;

/* The output extent of one spatial dim: (in + p0 + p1 - dilated kernel) / s
 * + 1, rounded up with ceil_mode (a last window that starts past the input
 * and its leading pad dropped, as ONNX's MaxPool and AveragePool do);
 * false when the window does not fit or the arithmetic overflows. */
bool cpu_nchwc_pool_extent(size_t in, size_t k, size_t s, size_t d, size_t p0, size_t p1,
                           bool ceil_mode, size_t* out);

/* Runs the pool on ctx's thread pool (a task per output row). */
OnyxStatus* cpu_nchwc_pool_run(OnyxKernelContext* ctx, const CpuNchwcPool* p);

/* y = x * s + t per lane over [n * cb planes, hw, block], then max(y, 0)
 * with relu (NaN kept): s and t hold cb * block values (the plane's block
 * of channels at [plane % cb * block]). y may be x. */
void cpu_nchwc_affine(OnyxKernelContext* ctx, const float* x, const float* s, const float* t,
                      float* y, size_t n, size_t cb, size_t hw, size_t block, bool relu);

OnyxStatus* cpu_register_nchwc_pool(OnyxKernelRegistry* r);

#endif /* CPU_NCHWC_POOL_H */
