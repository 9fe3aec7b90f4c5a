/* gpu_grad_ops.h — the host side of the GPU training kernels
 * (gpu_grad_ops.c), registered with the shared kernels (gpu_ops.c). */
#ifndef ONYX_GPU_GRAD_OPS_H
#define ONYX_GPU_GRAD_OPS_H

#include <stdbool.h>

#include "gpu_ep.h"
#include "onyx/onyx_ep.h"

/* The com.onyx.training kernels of the GPU providers: ReluGrad,
 * SigmoidGrad, TanhGrad, GeluGrad, FastGeluGrad, SoftmaxGrad,
 * LogSoftmaxGrad, SoftmaxCrossEntropyLossGrad, LayerNormalizationGrad,
 * BatchNormalizationGrad, GatherGrad, MaxPoolGrad, DropoutGrad,
 * SGDOptimizer, AdamWOptimizer, LambOptimizer and ClipGradNorm (float32). */
OnyxStatus* gpu_register_grad_kernels(OnyxKernelRegistry* r);

/* gpu_norm_pool_ops.c: BatchNormalization (inference and training mode)
 * and MaxPool (any window, with or without Indices), float32. The
 * registration adds them for the providers without DNN-library kernels
 * (ROCm, gpuemu) and nothing where ONYX_GPU_VENDOR_NORM_POOL is defined
 * (CUDA: cuda_dnn.c's kernels call the computes for what cuDNN does not
 * do). k is the node's GpuKernel (or the GpuKernel a vendor state starts
 * with). */
OnyxStatus* gpu_register_norm_pool_kernels(OnyxKernelRegistry* r);
OnyxStatus* gpu_batchnorm_compute(GpuKernel* k, OnyxKernelContext* ctx);
OnyxStatus* gpu_maxpool_compute(GpuKernel* k, OnyxKernelContext* ctx);
/* BatchNormalization in training mode: opset 14 and later, training_mode 1. */
bool gpu_batchnorm_training(const OnyxNode* n);

/* gpu_meta_ops.c: Shape and Size, their int64 result written on the host
 * into host memory; gpu_meta_op says whether n is one of them (the
 * placement rule takes them only after a GPU producer). */
OnyxStatus* gpu_register_meta_kernels(OnyxKernelRegistry* r);
bool gpu_meta_op(const OnyxNode* n);

#endif /* ONYX_GPU_GRAD_OPS_H */
