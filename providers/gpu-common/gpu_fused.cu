/* gpu_fused.cu — com.onyx FusedElementwise's kernel for the CUDA and ROCm
 * providers, written once in the CUDA dialect (hipcc compiles it through
 * gpu_vendor.h): a grid-stride loop in which each thread runs the node's
 * program (the kernel's by-value argument, so it sits in the constant bank
 * every thread reads alike) over registers for its elements
 * (gpu_fused_body.h, shared with the host emulation). One read of each input
 * and one write of Y per element, whatever the chain's length. See
 * docs/providers/cuda.md, "Fused element-wise chains". */
#include <math.h>
#include <stdint.h>
#include "gpu_fused.h"
#include "gpu_fused_body.h"
#include "gpu_vendor.h"

namespace {

const int kFusedThreads = 256;

/* The argument is read through a pointer (the body takes one): as a grid
 * constant it stays in the parameter bank instead of being copied into each
 * thread's local memory (CUDA 11.7+; HIP reads kernel arguments in place). */
#if !defined(ONYX_GPU_HIP) && defined(__CUDACC_VER_MAJOR__) &&                                     \
    (__CUDACC_VER_MAJOR__ > 11 || (__CUDACC_VER_MAJOR__ == 11 && __CUDACC_VER_MINOR__ >= 7))
#define GPU_FE_GRID_CONST __grid_constant__
#else
#define GPU_FE_GRID_CONST
#endif

__global__ void __launch_bounds__(kFusedThreads) fused_kernel(const GPU_FE_GRID_CONST GpuFeArgs a) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n;
       i += (int64_t)blockDim.x * gridDim.x)
    gpub_fe_elem(&a, i);
}

} // namespace

extern "C" int gpuk_fused(const GpuFeArgs* a, void* stream) {
  if (a->n <= 0) return 0;
  int64_t blocks = (a->n + kFusedThreads - 1) / kFusedThreads;
  if (blocks > 65535) blocks = 65535; /* the loop strides over the rest */
  fused_kernel<<<(unsigned)blocks, kFusedThreads, 0, (cudaStream_t)stream>>>(*a);
  return (int)cudaGetLastError();
}
