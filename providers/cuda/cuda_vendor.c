/* cuda_vendor.c — what makes the shared GPU provider the CUDA provider:
 * names, the cudnn_conv_algo_search option, cuBLAS / cuDNN handles bound to
 * the EP's device (cuBLAS in TF32 tensor-op math under use_tf32), SGEMM
 * through cublasSgemmStridedBatched, float16 / bfloat16 GEMMs through
 * cublasGemmStridedBatchedEx (float32 accumulation), and the cuDNN kernels
 * (cuda_dnn.c). */
#include <stdlib.h>
#include <string.h>

#include "cuda_vendor.h"

static const char* const g_keys[] = {"cudnn_conv_algo_search", NULL};

static OnyxStatus* cuda_set_option(GpuEp* g, const char* key, const char* v) {
  if (!strcmp(v, "EXHAUSTIVE") || !strcmp(v, "exhaustive"))
    g->conv_algo = CUDA_ALGO_EXHAUSTIVE;
  else if (!strcmp(v, "HEURISTIC") || !strcmp(v, "heuristic"))
    g->conv_algo = CUDA_ALGO_HEURISTIC;
  else if (!strcmp(v, "DEFAULT") || !strcmp(v, "default"))
    g->conv_algo = CUDA_ALGO_DEFAULT;
  else
    return gpu_host->status_create(ONYX_INVALID_CONFIG,
                                   "cuda: option '%s' has value '%s'; expected EXHAUSTIVE, "
                                   "HEURISTIC or DEFAULT",
                                   key, v);
  return NULL;
}

static OnyxStatus* cuda_ep_init(GpuEp* g) {
  bool conv_graph = true;
  OnyxStatus* st = cuda_dnn_conv_api(&conv_graph);
  if (st) return st;
  CudaState* c = calloc(1, sizeof *c);
  if (!c) return gpu_host->status_create(ONYX_OUT_OF_MEMORY, "cuda: out of memory");
  c->conv_graph = conv_graph;
  cublasStatus_t bs = cublasCreate(&c->blas);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    free(c);
    return gpu_host->status_create(ONYX_RUNTIME_ERROR, "cuda: cublasCreate failed: %s",
                                   cublasGetStatusString(bs));
  }
  /* use_tf32: cuBLAS's single-precision GEMMs may round their inputs to
   * TF32 and run on tensor cores (float32 accumulation). Off, the handle
   * keeps CUBLAS_DEFAULT_MATH, full float32. */
  if (g->use_tf32) {
    bs = cublasSetMathMode(c->blas, CUBLAS_TF32_TENSOR_OP_MATH);
    if (bs != CUBLAS_STATUS_SUCCESS) {
      cublasDestroy(c->blas);
      free(c);
      return gpu_host->status_create(
          ONYX_RUNTIME_ERROR, "cuda: cublasSetMathMode(CUBLAS_TF32_TENSOR_OP_MATH) failed: %s",
          cublasGetStatusString(bs));
    }
  }
  cudnnStatus_t ds = cudnnCreate(&c->dnn);
  if (ds != CUDNN_STATUS_SUCCESS) {
    cublasDestroy(c->blas);
    free(c);
    return gpu_host->status_create(ONYX_RUNTIME_ERROR, "cuda: cudnnCreate failed: %s",
                                   cudnnGetErrorString(ds));
  }
  g->vendor_state = c;
  return NULL;
}

static void cuda_ep_release(GpuEp* g) {
  CudaState* c = g->vendor_state;
  if (!c) return;
  gpurt_set_device(g->device);
  cudnnDestroy(c->dnn);
  cublasDestroy(c->blas);
  free(c);
  g->vendor_state = NULL;
}

/* Row-major C = op(A) op(B) as column-major C^T = op(B)^T op(A)^T. */
static OnyxStatus* cuda_gemm(GpuEp* g, void* stream, int trans_a, int trans_b, int64_t m, int64_t n,
                             int64_t k, float alpha, const float* a, int64_t lda, int64_t stride_a,
                             const float* b, int64_t ldb, int64_t stride_b, float beta, float* c,
                             int64_t ldc, int64_t stride_c, int64_t batch) {
  CudaState* cs = g->vendor_state;
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX ||
      ldc > INT32_MAX || batch > INT32_MAX)
    return gpu_host->status_create(ONYX_NOT_IMPLEMENTED,
                                   "cuda: GEMM dimensions past 2^31 are not supported");
  pthread_mutex_lock(&g->vendor_lock);
  cublasStatus_t s = cublasSetStream(cs->blas, (cudaStream_t)stream);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasSgemmStridedBatched(cs->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k,
                                  &alpha, b, (int)ldb, stride_b, a, (int)lda, stride_a, &beta, c,
                                  (int)ldc, stride_c, (int)batch);
  pthread_mutex_unlock(&g->vendor_lock);
  if (s != CUBLAS_STATUS_SUCCESS)
    return gpu_host->status_create(ONYX_RUNTIME_ERROR, "cuda: cublasSgemmStridedBatched: %s",
                                   cublasGetStatusString(s));
  return NULL;
}

/* float16 / bfloat16 A, B and C with CUBLAS_COMPUTE_32F: products and sums
 * in float32, alpha and beta float, one rounding to the storage type at the
 * end. cuBLAS runs these on tensor cores whatever the handle's math mode
 * (CUBLAS_GEMM_DEFAULT picks a tensor-op algorithm for 16-bit inputs). */
static OnyxStatus* cuda_gemm_t(GpuEp* g, void* stream, GpuDtype dt, int trans_a, int trans_b,
                               int64_t m, int64_t n, int64_t k, float alpha, const void* a,
                               int64_t lda, int64_t stride_a, const void* b, int64_t ldb,
                               int64_t stride_b, float beta, void* c, int64_t ldc, int64_t stride_c,
                               int64_t batch) {
  if (dt == GPU_F32)
    return cuda_gemm(g, stream, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb,
                     stride_b, beta, c, ldc, stride_c, batch);
  CudaState* cs = g->vendor_state;
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX ||
      ldc > INT32_MAX || batch > INT32_MAX)
    return gpu_host->status_create(ONYX_NOT_IMPLEMENTED,
                                   "cuda: GEMM dimensions past 2^31 are not supported");
  const cudaDataType_t type = dt == GPU_F16 ? CUDA_R_16F : CUDA_R_16BF;
  pthread_mutex_lock(&g->vendor_lock);
  cublasStatus_t s = cublasSetStream(cs->blas, (cudaStream_t)stream);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasGemmStridedBatchedEx(
        cs->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n,
        (int)m, (int)k, &alpha, b, type, (int)ldb, stride_b, a, type, (int)lda, stride_a, &beta, c,
        type, (int)ldc, stride_c, (int)batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  pthread_mutex_unlock(&g->vendor_lock);
  if (s != CUBLAS_STATUS_SUCCESS)
    return gpu_host->status_create(ONYX_RUNTIME_ERROR, "cuda: cublasGemmStridedBatchedEx (%s): %s",
                                   dt == GPU_F16 ? "float16" : "bfloat16",
                                   cublasGetStatusString(s));
  return NULL;
}

/* cuDNN's kernels, and NCCL's collectives where the build has nccl.h. */
static OnyxStatus* cuda_register_kernels(OnyxKernelRegistry* r) {
  OnyxStatus* st = cuda_register_dnn_kernels(r);
#ifdef ONYX_CUDA_NCCL
  if (!st) st = cuda_register_collective_kernels(r);
#endif
  return st;
}

const GpuVendor gpu_vendor = {.name = "cuda",
                              .label = "CUDA",
                              .vendor = "NVIDIA",
                              .version = "0.1.0",
                              .pci_vendor = 0x10DEu,
                              .count_fn = "cudaGetDeviceCount",
                              .option_keys = g_keys,
                              .tf32 = true,
                              .set_option = cuda_set_option,
                              .ep_init = cuda_ep_init,
                              .ep_release = cuda_ep_release,
                              .register_kernels = cuda_register_kernels,
                              .decline = cuda_dnn_decline,
                              .gemm = cuda_gemm,
                              .gemm_t = cuda_gemm_t};
