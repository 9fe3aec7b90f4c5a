/* cpu_kernels.h — internal to the CPU provider. Each kernel family lives in
 * its own file and registers itself here. Only the SDK headers are used. */
#ifndef CPU_KERNELS_H
#define CPU_KERNELS_H

#include "onyx/onyx_ep.h"

/* The host API table, set by onyx_provider_init before any other call. */
extern const OnyxHostApi* cpu_host;

/* One float32 2-D convolution run for the Conv paths with their own kernels
 * (Winograd, the direct path): X (n, ic, h, w) into Y (n, oc, oh, ow) with
 * strides sh, sw, dilations dh, dw and the window origin of output (0, 0)
 * at input (-pad_top, -pad_left); positions outside X read 0. bias (oc
 * values) may be NULL; z (FusedConv's residual, Y's shape) may be NULL and
 * is added before the activation act, a CpuAct with the GEMM epilogue's
 * meaning (NaN kept). */
typedef struct CpuConvRun {
  const float* x;
  float* y;
  const float* bias;
  const float* z;
  size_t n, h, w, oh, ow;
  size_t sh, sw, dh, dw;
  size_t pad_top, pad_left;
  int act;
  float act_alpha, act_min, act_max;
} CpuConvRun;

OnyxStatus* cpu_register_elementwise(OnyxKernelRegistry* r); /* cpu_elementwise.c */
OnyxStatus* cpu_register_shape(OnyxKernelRegistry* r);       /* cpu_shape.c */
OnyxStatus* cpu_register_reduce(OnyxKernelRegistry* r);      /* cpu_reduce.c */
OnyxStatus* cpu_register_conv(OnyxKernelRegistry* r);        /* cpu_conv.c: Conv */
OnyxStatus* cpu_register_pool(OnyxKernelRegistry* r);        /* cpu_pool.c: the pooling ops */
OnyxStatus* cpu_register_norm(OnyxKernelRegistry* r);        /* cpu_norm.c: norms, Softmax */
OnyxStatus* cpu_register_linalg(OnyxKernelRegistry* r);      /* cpu_linalg.c: MatMul, Gemm */
/* Families added with the full ONNX operator set; each owns its files. */
OnyxStatus*
cpu_register_math(OnyxKernelRegistry* r); /* cpu_math*.c: unary math, activations, logic */
OnyxStatus* cpu_register_gather_scatter(OnyxKernelRegistry* r); /* cpu_gather_scatter.c */
OnyxStatus* cpu_register_sort_topk(OnyxKernelRegistry* r);      /* cpu_sort_topk.c: Unique, TopK */
OnyxStatus* cpu_register_layout(OnyxKernelRegistry* r);         /* cpu_layout.c: Pad, Tile, ... */
OnyxStatus* cpu_register_einsum(OnyxKernelRegistry* r);         /* cpu_einsum.c: Einsum, Det */
OnyxStatus* cpu_register_loss(OnyxKernelRegistry* r);           /* cpu_loss.c: NLL, softmax CE */
OnyxStatus* cpu_register_nms(OnyxKernelRegistry* r);            /* cpu_nms.c: NonMaxSuppression */
OnyxStatus* cpu_register_resize(OnyxKernelRegistry* r);         /* cpu_resize.c: Resize, samplers */
OnyxStatus*
cpu_register_conv_transpose(OnyxKernelRegistry* r); /* cpu_conv_transpose.c: + Col2Im, DeformConv */
OnyxStatus* cpu_register_rnn(OnyxKernelRegistry* r); /* cpu_rnn.c: RNN, GRU, LSTM */
OnyxStatus*
cpu_register_quant(OnyxKernelRegistry* r);            /* cpu_quant*.c: Q/DQ and the quantized ops */
OnyxStatus* cpu_register_misc(OnyxKernelRegistry* r); /* cpu_text.c, cpu_ml.c, cpu_attention.c */
OnyxStatus* cpu_register_contrib(OnyxKernelRegistry* r); /* cpu_contrib.c: com.onyx fused ops */
OnyxStatus* cpu_register_optim(OnyxKernelRegistry* r);   /* cpu_optim.c: optimizers */
OnyxStatus* cpu_register_signal(OnyxKernelRegistry* r);  /* cpu_signal.c: DFT, STFT, windows */
OnyxStatus* cpu_register_random(OnyxKernelRegistry* r);  /* cpu_random.c: the random ops */
OnyxStatus* cpu_register_image(OnyxKernelRegistry* r);   /* cpu_image.c: ImageDecoder */
OnyxStatus*
cpu_register_half(OnyxKernelRegistry* r); /* cpu_half.c: float16 MatMul, Conv, Softmax */
OnyxStatus*
cpu_register_grad_half(OnyxKernelRegistry* r); /* cpu_grad_half.c: half Gemm, ConvGrad */
/* com.onyx.training gradient ops: cpu_grad.c (calls cpu_register_grad_conv) */
OnyxStatus* cpu_register_grad(OnyxKernelRegistry* r);
/* com.onyx.collective ops over the host's process group: cpu_collective.c */
OnyxStatus* cpu_register_collective(OnyxKernelRegistry* r);
/* com.onyx FusedElementwise: cpu_fused_ew.c (registered by cpu_register_contrib) */
OnyxStatus* cpu_register_fused_ew(OnyxKernelRegistry* r);
/* The host's collectives the EP was created with (ONYX_EXT_COLLECTIVES);
 * NULL when the session has no process group. cpu_provider.c */
const OnyxCollectivesExt* cpu_ep_collectives(const OnyxEp* ep);
OnyxStatus* cpu_register_grad_conv(OnyxKernelRegistry* r); /* cpu_grad_conv.c: conv, pools */
OnyxStatus* cpu_register_grad_seq(OnyxKernelRegistry* r);  /* cpu_grad_seq.c: RNN, GRU, LSTM */

#endif
