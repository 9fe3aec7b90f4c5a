/* gpu_grad_ops.h — the host side of the GPU training kernels
 * (gpu_grad_ops.c), registered with the shared kernels (gpu_ops.c). */
#ifndef ONYX_GPU_GRAD_OPS_H
#define ONYX_GPU_GRAD_OPS_H

#include "onyx/onyx_ep.h"

/* The com.onyx.training kernels of the GPU providers: ReluGrad,
 * SigmoidGrad, TanhGrad, GeluGrad, FastGeluGrad, SoftmaxGrad,
 * LogSoftmaxGrad, SoftmaxCrossEntropyLossGrad, LayerNormalizationGrad,
 * BatchNormalizationGrad, GatherGrad, MaxPoolGrad, DropoutGrad,
 * SGDOptimizer, AdamWOptimizer, LambOptimizer and ClipGradNorm (float32). */
OnyxStatus* gpu_register_grad_kernels(OnyxKernelRegistry* r);

#endif /* ONYX_GPU_GRAD_OPS_H */
