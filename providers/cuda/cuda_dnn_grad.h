/* cuda_dnn_grad.h — com.onyx.training ConvGrad through cuDNN
 * (cuda_dnn_grad.c). */
#ifndef ONYX_CUDA_DNN_GRAD_H
#define ONYX_CUDA_DNN_GRAD_H

#include "gpu_ep.h"

/* Registers ConvGrad (float32) with the CUDA provider's kernels. */
OnyxStatus* cuda_register_dnn_grad_kernels(OnyxKernelRegistry* r);
/* NULL or why cuDNN cannot take the ConvGrad node n (unknown rank,
 * auto_pad SAME_*, asymmetric pads). */
const char* cuda_dnn_grad_decline(const OnyxNode* n);

#endif /* ONYX_CUDA_DNN_GRAD_H */
