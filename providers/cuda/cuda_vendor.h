/* cuda_vendor.h — the CUDA provider's own state: cuBLAS and cuDNN handles. */
#ifndef ONYX_CUDA_VENDOR_H
#define ONYX_CUDA_VENDOR_H

#include <cublas_v2.h>
#include <cudnn.h>

#include "gpu_ep.h"

typedef struct CudaState {
  cublasHandle_t blas;
  cudnnHandle_t dnn;
  bool conv_graph; /* forward convolutions through graph-API plans (ONYX_CUDA_CONV_API) */
} CudaState;

/* cudnn_conv_algo_search values (GpuEp.conv_algo). */
enum { CUDA_ALGO_EXHAUSTIVE = 0, CUDA_ALGO_HEURISTIC = 1, CUDA_ALGO_DEFAULT = 2 };

OnyxStatus* cuda_register_dnn_kernels(OnyxKernelRegistry* r);
/* The com.onyx.collective ops on NCCL (cuda_collective.c; built when nccl.h
 * is found: ONYX_CUDA_NCCL). */
OnyxStatus* cuda_register_collective_kernels(OnyxKernelRegistry* r);
const char* cuda_dnn_decline(const OnyxNode* n);
/* ONYX_CUDA_CONV_API (graph, the default, or legacy) as *graph; an error
 * names a value not understood. */
OnyxStatus* cuda_dnn_conv_api(bool* graph);
OnyxStatus* cuda_dnn_error(const OnyxNode* n, cudnnStatus_t s, const char* what);

#endif
