/* rocm_vendor.c — what makes the shared GPU provider the ROCm provider:
 * names and PCI id, no extra options, and GEMM through the shared tiled
 * kernel of gpu_kernels.cu (no rocBLAS is installed where this is built; a
 * rocBLAS path would go here). No MIOpen either: Conv, ConvGrad and the
 * pools other than MaxPool stay on the next provider; MaxPool and
 * BatchNormalization run gpu-common's own kernels. The shared option use_tf32
 * is accepted and has no effect (tf32 false: the GEMM is float32 only; the
 * EP logs that at info). */
#include "gpu_ep.h"

static OnyxStatus* rocm_gemm(GpuEp* g, void* stream, int trans_a, int trans_b, int64_t m, int64_t n,
                             int64_t k, float alpha, const float* a, int64_t lda, int64_t stride_a,
                             const float* b, int64_t ldb, int64_t stride_b, float beta, float* c,
                             int64_t ldc, int64_t stride_c, int64_t batch) {
  /* The kernel's grid takes at most 65535 batches per launch. */
  for (int64_t done = 0; done < batch;) {
    int64_t now = batch - done < 65535 ? batch - done : 65535;
    int err = gpuk_gemm(trans_a, trans_b, m, n, k, alpha, a + done * stride_a, lda, stride_a,
                        b + done * stride_b, ldb, stride_b, beta, c + done * stride_c, ldc,
                        stride_c, now, stream);
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
                              .gemm = rocm_gemm};
