/* rocm_vendor.c — what makes the shared GPU provider the ROCm provider:
 * names and PCI id, no extra options, and GEMM through the shared tiled
 * kernel of gpu_kernels.cu, float32 and float16 / bfloat16 with float
 * accumulation (no rocBLAS / hipBLAS is installed where this is built; a
 * hipblasGemmStridedBatchedEx path would go here). No MIOpen either: Conv, ConvGrad and the
 * pools other than MaxPool stay on the next provider; MaxPool and
 * BatchNormalization run gpu-common's own kernels. The shared option use_tf32
 * is accepted and has no effect (tf32 false: the GEMM is float32 only; the
 * EP logs that at info). */
#include "gpu_ep.h"

/* Row-major batched GEMM on the shared tiled kernel, float32 or (dt)
 * float16 / bfloat16 storage with float accumulation. */
static OnyxStatus* rocm_gemm_t(GpuEp* g, void* stream, GpuDtype dt, int trans_a, int trans_b,
                               int64_t m, int64_t n, int64_t k, float alpha, const void* a,
                               int64_t lda, int64_t stride_a, const void* b, int64_t ldb,
                               int64_t stride_b, float beta, void* c, int64_t ldc, int64_t stride_c,
                               int64_t batch) {
  const size_t es = dt == GPU_F32 ? 4 : 2;
  /* The kernel's grid takes at most 65535 batches per launch. */
  for (int64_t done = 0; done < batch;) {
    int64_t now = batch - done < 65535 ? batch - done : 65535;
    int err = gpuk_gemm_t(dt, trans_a, trans_b, m, n, k, alpha,
                          (const char*)a + (size_t)(done * stride_a) * es, lda, stride_a,
                          (const char*)b + (size_t)(done * stride_b) * es, ldb, stride_b, beta,
                          (char*)c + (size_t)(done * stride_c) * es, ldc, stride_c, now, stream);
    if (err) {
      char buf[256];
      return gpu_host->status_create(ONYX_RUNTIME_ERROR, "rocm: tiled GEMM launch: %s",
                                     err < 0 ? "more than 65535 x 16 rows"
                                             : gpu_err_text(err, buf, sizeof buf));
    }
    done += now;
  }
  return NULL;
}

static OnyxStatus* rocm_gemm(GpuEp* g, void* stream, int trans_a, int trans_b, int64_t m, int64_t n,
                             int64_t k, float alpha, const float* a, int64_t lda, int64_t stride_a,
                             const float* b, int64_t ldb, int64_t stride_b, float beta, float* c,
                             int64_t ldc, int64_t stride_c, int64_t batch) {
  return rocm_gemm_t(g, stream, GPU_F32, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb,
                     stride_b, beta, c, ldc, stride_c, batch);
}

const GpuVendor gpu_vendor = {.name = "rocm",
                              .label = "ROCm",
                              .vendor = "AMD",
                              .version = "0.1.0",
                              .pci_vendor = 0x1002u,
                              .count_fn = "hipGetDeviceCount",
                              .option_keys = NULL,
                              .set_option = NULL,
                              .tf32 = false,
                              .ep_init = NULL,
                              .ep_release = NULL,
                              .register_kernels = NULL,
                              .decline = NULL,
                              .gemm = rocm_gemm,
                              .gemm_t = rocm_gemm_t};
