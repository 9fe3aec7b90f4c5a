/* gpuemu_vendor.c — the vendor part of the test-only provider "gpuemu": the
 * shared GPU provider (providers/gpu-common) over the host emulation of
 * gpu_emu.c. Its GEMMs are the emulation's gpuk_gemm and gpuk_gemm_t (float16
 * / bfloat16, a naive float-accumulating loop). No vendor options or
 * kernels (no cuDNN ops). */
#include "gpu_ep.h"

static OnyxStatus* emu_gemm(GpuEp* g, void* stream, int trans_a, int trans_b, int64_t m, int64_t n,
                            int64_t k, float alpha, const float* a, int64_t lda, int64_t stride_a,
                            const float* b, int64_t ldb, int64_t stride_b, float beta, float* c,
                            int64_t ldc, int64_t stride_c, int64_t batch) {
  gpuk_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
            stride_c, batch, stream);
  return NULL;
}

static OnyxStatus* emu_gemm_t(GpuEp* g, void* stream, GpuDtype dt, int trans_a, int trans_b,
                              int64_t m, int64_t n, int64_t k, float alpha, const void* a,
                              int64_t lda, int64_t stride_a, const void* b, int64_t ldb,
                              int64_t stride_b, float beta, void* c, int64_t ldc, int64_t stride_c,
                              int64_t batch) {
  gpuk_gemm_t(dt, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c,
              ldc, stride_c, batch, stream);
  return NULL;
}

const GpuVendor gpu_vendor = {.name = "gpuemu",
                              .label = "emulated GPU",
                              .vendor = "onyx tests",
                              .version = "0.1.0",
                              .pci_vendor = 0xE4E4u,
                              .count_fn = "emuGetDeviceCount",
                              .gemm = emu_gemm,
                              .gemm_t = emu_gemm_t};
