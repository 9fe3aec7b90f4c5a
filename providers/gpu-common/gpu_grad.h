/* gpu_grad.h — launchers of the training kernels (gpu_grad.cu; emulated by
 * gpu_emu_grad.c): the gradient ops of the com.onyx.training domain and
 * the fused multi-tensor optimizers (gpu_grad_ops.c launches them). Same
 * conventions as gpu_kernels.h: every launcher queues work on `stream`,
 * returns the vendor's launch error (0: queued), and every pointer is device
 * memory unless said otherwise. Float32 only. */
#ifndef ONYX_GPU_GRAD_H
#define ONYX_GPU_GRAD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum GpuGradOp {
  GPU_GRAD_RELU,      /* dY * (X > 0) */
  GPU_GRAD_SIGMOID,   /* dY * Y * (1 - Y) */
  GPU_GRAD_TANH,      /* dY * (1 - Y^2) */
  GPU_GRAD_GELU,      /* dY * (Phi(X) + X phi(X)) */
  GPU_GRAD_FAST_GELU, /* derivative of the tanh approximation */
} GpuGradOp;

/* dx[i] = grad(dy[i], x[i]) over n elements; x is X or Y as the op reads. */
int gpuk_grad_unary(GpuGradOp op, const float* dy, const float* x, float* dx, int64_t n,
                    void* stream);

/* SoftmaxGrad (log 0: dX = Y (dY - sum(dY Y))) or LogSoftmaxGrad (log 1:
 * dX = dY - exp(Y) sum(dY)) along the middle dim of [outer, len, inner];
 * the sums in float64, one block per line. */
int gpuk_softmax_grad(const float* dy, const float* y, float* dx, int64_t outer, int64_t len,
                      int64_t inner, int log, void* stream);

/* DropoutGrad: dx[i] = mask[i] ? dy[i] * scale : 0 (mask: bool bytes). */
int gpuk_dropout_grad(const float* dy, const uint8_t* mask, float* dx, int64_t n, float scale,
                      void* stream);

/* LayerNormalizationGrad over X seen as [rows, width]: per row, with
 * xhat = (x - mean) inv and g = dY scale, dX = inv (g - mean(g) - xhat
 * mean(g xhat)) (one block per row, the means in float64); per column,
 * dScale = sum_rows dY xhat and dBias = sum_rows dY (one thread per column,
 * the rows in order, in float64). dscale / dbias may be NULL. */
int gpuk_layernorm_grad(const float* dy, const float* x, const float* scale, const float* mean,
                        const float* inv, float* dx, float* dscale, float* dbias, int64_t rows,
                        int64_t width, void* stream);

/* BatchNormalizationGrad over X [n, c, sp] (sp: the spatial dims'
 * product), per channel over its m = n sp values, xhat = (x - mean) inv:
 * dBias = sum dY, dScale = sum dY xhat, dX = scale inv (dY - dBias / m -
 * xhat dScale / m). mean / inv NULL: the channel's batch statistics first
 * (two passes, float64; inv = 1 / sqrt(var + epsilon)). One block per
 * channel, every sum in float64; dscale / dbias may be NULL. */
int gpuk_batchnorm_grad(const float* dy, const float* x, const float* scale, const float* mean,
                        const float* inv, float* dx, float* dscale, float* dbias, int64_t n,
                        int64_t c, int64_t sp, double epsilon, void* stream);

/* BatchNormalization forward over X [n, c, sp], one block per channel:
 * training (train 1) takes the channel's batch mean and biased variance
 * over its m = n sp values (two passes, float64; 0 where m is 0) and writes
 * run_mean / run_var (NULL: not wanted) as in * momentum + batch * (1 -
 * momentum); inference (train 0) reads mean / var. Then, as the CPU
 * provider, a = scale / sqrt(var + epsilon) and b = bias - mean a in
 * float64, rounded to float, and y = x a + b. */
int gpuk_batchnorm_fwd(const float* x, const float* scale, const float* bias, const float* mean,
                       const float* var, float* y, float* run_mean, float* run_var, int64_t n,
                       int64_t c, int64_t sp, double epsilon, double momentum, int train,
                       void* stream);

/* MaxPool's window geometry, worked out on the host: always 3 spatial
 * dims (1 to 3 real ones, led by dims of 1 with unit kernel and stride).
 * Output element o of plane p (p over N C) takes the maximum of X's plane
 * p over the window starting at out * stride - pad_begin, with kernel and
 * dilation; window positions outside X are skipped. */
typedef struct GpuPoolGeom {
  int32_t storage_order;
  int64_t planes, in_size, out_size;
  int64_t in[3], out[3], kernel[3], stride[3], dil[3], pad[3];
} GpuPoolGeom;

/* MaxPool: y (and ind, NULL: not wanted) over planes out_size elements;
 * the maximum is seeded with the window's first valid element in row-major
 * order and replaced by a strictly greater one (the CPU provider's rule:
 * a NaN first stays). ind: ONNX's flat index into X, the spatial part
 * row-major (storage_order 0) or column-major (1); -inf and -1 for a
 * window that misses X. */
int gpuk_maxpool(const float* x, float* y, int64_t* ind, const GpuPoolGeom* g, void* stream);

/* SoftmaxCrossEntropyLossGrad over log_prob [nb, c, inner]:
 * dx[n, k, i] = g_s (exp(log_prob[n, k, i]) - [k == label_s]), s = n inner
 * + i, 0 where g_s is 0. coef_label (host memory, read before the call
 * returns): the nb inner coefficients g_s (float64), then the nb inner
 * labels (int64); the launcher copies them to stream-ordered scratch. */
int gpuk_sce_grad(const float* log_prob, float* dx, const void* coef_label, int64_t nb, int64_t c,
                  int64_t inner, void* stream);

/* GatherGrad into dx [outer, axis_len, inner] (zeroed first) from dy
 * [outer, n_idx, inner]: table (host memory, read before the call returns)
 * holds the index positions j sorted by (row, j) (n_idx values), the
 * n_groups + 1 group starts into them, then each group's row; a thread per
 * (outer, group, column) adds its group's dY rows in j order, so each dX
 * element has one writer and a fixed order of additions. */
int gpuk_gather_grad(const float* dy, float* dx, const int64_t* table, int64_t n_idx,
                     int64_t n_groups, int64_t outer, int64_t axis_len, int64_t inner,
                     void* stream);

/* The fused optimizers. One launch covers up to GPU_OPT_MAX_TENSORS tensors,
 * whose pointers and sizes travel in the launch's arguments (GpuOptBatch,
 * about 2.3 KiB, under every vendor's 4 KiB argument limit); gpuk_optimizer
 * splits a longer list into such launches. */
#define GPU_OPT_MAX_TENSORS 32
#define GPU_CLIP_CHUNK      8192

typedef enum GpuOptKind { GPU_OPT_SGD, GPU_OPT_ADAMW, GPU_OPT_LAMB } GpuOptKind;

/* Per-step scalars, computed on the host in float64 and rounded to float
 * as the CPU provider's float32 kernels use them (cpu_optim_body.h). */
typedef struct GpuOptParams {
  int32_t kind;
  int32_t has_m, first, nesterov, use_wd;
  float lr, wd, momentum, damp1;                /* SGD: damp1 = 1 - dampening */
  float decay, w1, b2, w2, bc2s, eps, neg_step; /* AdamW (w1, b2, w2, eps, wd: LAMB too) */
  float b1, ibc1, ibc2;                         /* LAMB: beta1, 1 / bc1, 1 / bc2 */
  double lr64;                                  /* LAMB: lr as given */
} GpuOptParams;

typedef struct GpuOptBatch {
  int32_t count;
  /* start[t]: first flat index of tensor t; start[count]: the total. */
  int64_t start[GPU_OPT_MAX_TENSORS + 1];
  /* cstart[t]: the first chunk (GPU_CLIP_CHUNK elements, never spanning two
   * tensors) of tensor t: LAMB's per-tensor norms. */
  int64_t cstart[GPU_OPT_MAX_TENSORS + 1];
  const float* in[4][GPU_OPT_MAX_TENSORS]; /* P, G, M, V (NULL where unused) */
  float* out[3][GPU_OPT_MAX_TENSORS];      /* P', M', V' (NULL: not written) */
} GpuOptBatch;

/* Host arrays: n tensors of count[t] elements; in[g][t] / out[g][t] as in
 * GpuOptBatch (in[g] / out[g] NULL for a group the kind does not use). */
int gpuk_optimizer(const GpuOptParams* p, size_t n, const int64_t* count,
                   const float* const* const* in, float* const* const* out, void* stream);

/* LAMB: u = (m' / bc1) / (sqrt(v' / bc2) + eps) + wd p with m' = beta1 m +
 * (1 - beta1) g, v' = beta2 v + (1 - beta2) g^2; per tensor, ratio =
 * |p| / |u| (1 where either is 0), p' = p - lr ratio u. Pass 1 writes M'
 * and V' and the float64 sums of p^2 and u^2 per chunk (a block each);
 * pass 2 adds each tensor's chunk sums in order (a thread per tensor);
 * pass 3 recomputes u and writes P'. Arrays as gpuk_optimizer's; the chunk
 * sums live in stream-ordered scratch. */
int gpuk_lamb(const GpuOptParams* p, size_t n, const int64_t* count, const float* const* const* in,
              float* const* const* out, void* stream);

/* ClipGradNorm (torch.nn.utils.clip_grad_norm_): norm = the L2 norm of
 * all n gradients g[t] (count[t] elements; host arrays of device
 * pointers), coef = max_norm / (norm + 1e-6), out[t] = g[t] * coef where
 * coef < 1 (or NaN), else a copy; total_norm (device, NULL: not wanted)
 * gets norm as float. Squares are summed in float64 per chunk of
 * GPU_CLIP_CHUNK elements of a launch's batch (a block each), then the
 * chunk sums by one block in a fixed order: the result does not depend on
 * scheduling. The chunk sums live in stream-ordered scratch. */
int gpuk_clip_grad_norm(size_t n, const int64_t* count, const float* const* g, float* const* out,
                        double max_norm, float* total_norm, void* stream);

#ifdef __cplusplus
}
#endif
#endif /* ONYX_GPU_GRAD_H */
