/* cuda_dnn.c — Conv, ConvTranspose, com.onyx FusedConv, MaxPool,
 * AveragePool, GlobalAveragePool, GlobalMaxPool and BatchNormalization
 * (inference) through cuDNN 9.
 *
 * Conv and FusedConv run by default as execution plans of cuDNN's graph API
 * (cuda_dnn_graph.c), built on a node's first call per input shape and
 * cached in its state (graph_plan, conv_graph_run); a node whose plan cannot
 * be built falls back to the legacy calls below, as does every node with
 * ONYX_CUDA_CONV_API=legacy. The rest uses the legacy API
 * (cudnnConvolutionForward, cudnnConvolutionBiasActivationForward,
 * cudnnConvolutionBackwardData, cudnnPoolingForward,
 * cudnnBatchNormalizationForwardInference).
 *
 * FusedConv (what the optimizer makes of Conv + Relu / LeakyRelu / Clip once
 * the Conv is placed here, or a model's own node) is Y = act(conv(X, W) + B
 * + Z). On the legacy path: with a bias and Relu, one
 * cudnnConvolutionBiasActivationForward; otherwise the convolution, Z and B
 * added with cudnnAddTensor, and the activation as one element-wise pass of
 * the shared kernel (gpuk_unary).
 *
 * cuDNN takes symmetric pads and floor-rounded pooling only: Conv,
 * ConvTranspose and AveragePool nodes with auto_pad SAME_*, asymmetric pads,
 * ceil_mode or pooling dilations, and ConvTranspose's output_shape, are
 * declined at partitioning (cuda_dnn_decline) and run on the next provider.
 * A MaxPool with its Indices output or a window cuDNN cannot express, and a
 * training-mode BatchNormalization, run on gpu-common's own kernels
 * (gpu_norm_pool_ops.c: gpu_maxpool_compute, gpu_batchnorm_compute) under
 * this file's kernel defs. 1-D inputs are run as 2-D with a height of 1.
 * com.onyx.training ConvGrad is cuda_dnn_grad.c's.
 *
 * Conv, ConvTranspose and the pools cuDNN runs also take float16 and
 * bfloat16 (CUDNN_DATA_HALF / CUDNN_DATA_BFLOAT16 tensors and filters; the
 * convolutions with a float32 compute type and tensor-op math) through the
 * legacy calls; the graph plans, FusedConv, the MaxPool forms of
 * gpu_maxpool_compute and BatchNormalization are float32 only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_dnn_grad.h"
#include "cuda_dnn_graph.h"
#include "cuda_vendor.h"
#include "gpu_grad_ops.h"

#define H            gpu_host
#define DNN_MAX_DIMS 5 /* N, C and up to 3 spatial dims */

enum {
  DNN_CONV = 1,
  DNN_CONV_TRANSPOSE,
  DNN_MAX_POOL,
  DNN_AVG_POOL,
  DNN_GLOBAL_AVG_POOL,
  DNN_GLOBAL_MAX_POOL,
  DNN_BATCH_NORM,
  DNN_FUSED_CONV
};

/* FusedConv's `activation`. */
enum { ACT_NONE = 0, ACT_RELU, ACT_LEAKY_RELU, ACT_CLIP };

/* Cached graph-API plans per node (cuda_dnn_graph.c), keyed on the input and
 * filter shapes and the math settings; the oldest entry is replaced. */
#define DNN_PLAN_CACHE 4
typedef struct PlanEntry {
  bool used;
  size_t rank;
  int64_t x[DNN_MAX_DIMS], w[DNN_MAX_DIMS];
  bool tf32;
  int conv_algo;
  DnnGraphPlan* plan;
  /* The plan adds Z and the bias and applies Relu itself; otherwise it is the
   * convolution alone and those run as element-wise passes after it. */
  bool whole;
} PlanEntry;

/* Conv state: the algorithm found for the last input shape and math mode
 * (exhaustive or heuristic search), guarded by lock since compute may run
 * concurrently. */
typedef struct DnnKernel {
  GpuKernel base;
  pthread_mutex_t lock;
  int64_t shape[DNN_MAX_DIMS];
  size_t rank;
  int algo_valid;
  int algo;
  cudnnMathType_t algo_math; /* the math type the algorithm was chosen under */
  /* FusedConv: the activation and its parameters (alpha; clip_min, clip_max). */
  int act;
  float act_alpha, act_min, act_max;
  /* cuDNN refused the one-call form once: take the separate passes (lock). */
  bool separate;
  /* Graph-API state of forward convolutions, used only under the EP's
   * vendor_lock (the plans belong to its cuDNN handle): the plan cache, the
   * next entry to replace, whether this node has fallen back to the legacy
   * calls, and whether the convolution-only form was logged. */
  PlanEntry plans[DNN_PLAN_CACHE];
  int next_plan;
  bool graph_off;
  bool logged_conv_only;
} DnnKernel;

/* FusedConv's `activation` attribute as ACT_*; -1 for a name not handled. */
static int read_activation(const OnyxNode* n, float* alpha, float* lo, float* hi) {
  size_t len = 0;
  const char* a = H->node_attr_string(n, "activation", &len);
  *alpha = H->node_attr_float(n, "alpha", 0.01f);
  *lo = H->node_attr_float(n, "clip_min", -INFINITY);
  *hi = H->node_attr_float(n, "clip_max", INFINITY);
  if (!a || len == 0) return ACT_NONE;
  if (len == 4 && !memcmp(a, "Relu", 4)) return ACT_RELU;
  if (len == 9 && !memcmp(a, "LeakyRelu", 9)) return ACT_LEAKY_RELU;
  if (len == 4 && !memcmp(a, "Clip", 4)) return ACT_CLIP;
  return -1;
}

OnyxStatus* cuda_dnn_conv_api(bool* graph) {
  const char* v = getenv("ONYX_CUDA_CONV_API");
  *graph = true;
  if (!v || !*v || !strcmp(v, "graph")) return NULL;
  if (!strcmp(v, "legacy")) {
    *graph = false;
    H->log(ONYX_LOG_INFO, "cuda",
           "ONYX_CUDA_CONV_API=legacy: forward convolutions run through the legacy cuDNN calls");
    return NULL;
  }
  return H->status_create(ONYX_INVALID_CONFIG,
                          "cuda: ONYX_CUDA_CONV_API has value '%s'; expected graph or legacy", v);
}

OnyxStatus* cuda_dnn_error(const OnyxNode* n, cudnnStatus_t s, const char* what) {
  return gpu_node_error(n, ONYX_RUNTIME_ERROR, "%s: %s", what, cudnnGetErrorString(s));
}

static OnyxStatus* dnn_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  DnnKernel* k = calloc(1, sizeof *k);
  if (!k) return gpu_node_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  k->base.ep = gpu_ep(ep);
  k->base.node = node;
  k->base.op = (int32_t)(intptr_t)user;
  k->base.since = H->node_since_version(node);
  if (k->base.op == DNN_FUSED_CONV) {
    k->act = read_activation(node, &k->act_alpha, &k->act_min, &k->act_max);
    if (k->act < 0) {
      free(k);
      return gpu_node_error(node, ONYX_NOT_IMPLEMENTED,
                            "FusedConv activation not supported (Relu, LeakyRelu or Clip)");
    }
  }
  pthread_mutex_init(&k->lock, NULL);
  *state = k;
  return NULL;
}

static void dnn_release(void* state) {
  DnnKernel* k = state;
  if (!k) return;
  /* The plans may hold modules cuDNN loaded into the device's context: that
   * device is made current before they are destroyed. */
  bool any = false;
  for (int i = 0; i < DNN_PLAN_CACHE; i++)
    any = any || k->plans[i].plan;
  if (any) gpurt_set_device(k->base.ep->device);
  for (int i = 0; i < DNN_PLAN_CACHE; i++)
    dnn_graph_free(k->plans[i].plan);
  pthread_mutex_destroy(&k->lock);
  free(k);
}

/* --- decline: what cuDNN's legacy API cannot express ------------------------------- */

static bool attr_all(const OnyxNode* n, const char* name, int64_t v) {
  size_t c = 0;
  const int64_t* a = H->node_attr_ints(n, name, &c);
  for (size_t i = 0; i < c; i++)
    if (a[i] != v) return false;
  return true;
}

static bool pads_symmetric(const OnyxNode* n) {
  size_t c = 0;
  const int64_t* p = H->node_attr_ints(n, "pads", &c);
  if (c % 2) return false;
  for (size_t i = 0; i < c / 2; i++)
    if (p[i] != p[i + c / 2]) return false;
  return true;
}

static bool auto_pad_ok(const OnyxNode* n) {
  const char* a = H->node_attr_string(n, "auto_pad", NULL);
  return !a || !*a || !strcmp(a, "NOTSET") || !strcmp(a, "VALID");
}

/* A MaxPool that cuDNN's legacy pooling cannot run: with Indices, or
 * with a window it does not express. gpu_maxpool_compute runs it. */
static bool maxpool_own_kernel(const OnyxNode* n) {
  return (H->node_output_count(n) > 1 && H->node_output(n, 1)) || !auto_pad_ok(n) ||
         !pads_symmetric(n) || H->node_attr_int(n, "ceil_mode", 0) != 0 ||
         !attr_all(n, "dilations", 1);
}

const char* cuda_dnn_decline(const OnyxNode* n) {
  const char* op = H->node_op_type(n);
  const char* domain = H->node_domain(n);
  if (domain && !strcmp(domain, "com.onyx.training"))
    return !strcmp(op, "ConvGrad") ? cuda_dnn_grad_decline(n) : NULL;
  bool fused = domain && !strcmp(domain, "com.onyx") && !strcmp(op, "FusedConv");
  if (domain && *domain && strcmp(domain, "ai.onnx") && !fused) return NULL;
  if (fused) {
    float a, lo, hi;
    if (read_activation(n, &a, &lo, &hi) < 0)
      return "cuda: FusedConv activation not supported (Relu, LeakyRelu or Clip)";
  }
  bool conv = fused || !strcmp(op, "Conv") || !strcmp(op, "ConvTranspose");
  bool pool = !strcmp(op, "MaxPool") || !strcmp(op, "AveragePool");
  bool global = !strcmp(op, "GlobalAveragePool") || !strcmp(op, "GlobalMaxPool");
  if (!strcmp(op, "BatchNormalization")) {
    const OnyxValueInfo* x = H->node_input(n, 0);
    int32_t r = x ? H->value_rank(x) : -1;
    if (r < 2 || r > 5) return "cuda: BatchNormalization needs an input of known rank 2 to 5";
    if (gpu_batchnorm_training(n)) return NULL; /* gpu_batchnorm_compute */
    for (size_t i = 1; i < H->node_output_count(n); i++)
      if (H->node_output(n, i))
        return "cuda: BatchNormalization's statistics outputs need training_mode 1 (opset 14+)";
    return NULL;
  }
  if (!conv && !pool && !global) return NULL;
  const OnyxValueInfo* x = H->node_input(n, 0);
  int32_t r = x ? H->value_rank(x) : -1;
  if (r < 3 || r > 5) return "cuda: cuDNN takes inputs of known rank 3 to 5";
  if (global) return NULL;
  if (!strcmp(op, "MaxPool") && maxpool_own_kernel(n)) /* gpu_maxpool_compute */
    return H->value_elem_type(x) == ONYX_ELEM_FLOAT32
               ? NULL
               : "cuda: MaxPool with Indices or a window cuDNN cannot express takes float32 only";
  if (!auto_pad_ok(n)) return "cuda: auto_pad SAME_UPPER / SAME_LOWER is not supported";
  if (!pads_symmetric(n)) return "cuda: asymmetric pads are not supported by cuDNN";
  if (pool) {
    if (H->node_attr_int(n, "ceil_mode", 0) != 0) return "cuda: ceil_mode is not supported";
    if (!attr_all(n, "dilations", 1)) return "cuda: pooling dilations are not supported";
  }
  if (!strcmp(op, "ConvTranspose")) {
    size_t c = 0;
    H->node_attr_ints(n, "output_shape", &c);
    if (c) return "cuda: ConvTranspose with output_shape is not supported";
  }
  return NULL;
}

/* --- descriptors ---------------------------------------------------------------------- */

typedef struct Descs {
  cudnnTensorDescriptor_t x, y, b;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  cudnnPoolingDescriptor_t pool;
} Descs;

static void descs_free(Descs* d) {
  if (d->x) cudnnDestroyTensorDescriptor(d->x);
  if (d->y) cudnnDestroyTensorDescriptor(d->y);
  if (d->b) cudnnDestroyTensorDescriptor(d->b);
  if (d->w) cudnnDestroyFilterDescriptor(d->w);
  if (d->conv) cudnnDestroyConvolutionDescriptor(d->conv);
  if (d->pool) cudnnDestroyPoolingDescriptor(d->pool);
}

/* dims as int, promoted to at least 4-D (a 1-D spatial input gets H = 1). */
static OnyxStatus* to_int_dims(const OnyxNode* n, const int64_t* dims, size_t rank, int* out,
                               int* out_rank) {
  size_t r = 0;
  for (size_t i = 0; i < rank; i++) {
    if (dims[i] < 0 || dims[i] > INT32_MAX)
      return gpu_node_error(n, ONYX_NOT_IMPLEMENTED, "dim %zu (%lld) does not fit cuDNN", i,
                            (long long)dims[i]);
    if (rank == 3 && i == 2) out[r++] = 1;
    out[r++] = (int)dims[i];
  }
  *out_rank = (int)r;
  return NULL;
}

/* cuDNN's data type for a float32 / float16 / bfloat16 tensor. */
static cudnnDataType_t dnn_type(OnyxElemType t) {
  return t == ONYX_ELEM_FLOAT16    ? CUDNN_DATA_HALF
         : t == ONYX_ELEM_BFLOAT16 ? CUDNN_DATA_BFLOAT16
                                   : CUDNN_DATA_FLOAT;
}

static cudnnStatus_t set_tensor_t(cudnnTensorDescriptor_t* t, const int* dims, int rank,
                                  cudnnDataType_t type) {
  int strides[DNN_MAX_DIMS];
  int s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    strides[i] = s;
    s *= dims[i];
  }
  cudnnStatus_t st = *t ? CUDNN_STATUS_SUCCESS : cudnnCreateTensorDescriptor(t);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnSetTensorNdDescriptor(*t, type, rank, dims, strides);
  return st;
}

static cudnnStatus_t set_tensor(cudnnTensorDescriptor_t* t, const int* dims, int rank) {
  return set_tensor_t(t, dims, rank, CUDNN_DATA_FLOAT);
}

/* Spatial attribute values (kernel_shape, strides, pads begin, dilations) as
 * ints for sp spatial dims (2 for a promoted 1-D input), with defaults. */
typedef struct Spatial {
  int sp; /* spatial dims after promotion */
  int kernel[3], stride[3], pad[3], dil[3], out_pad[3];
} Spatial;

static OnyxStatus* read_spatial(const OnyxNode* n, size_t x_rank, const int64_t* w_dims,
                                Spatial* s) {
  size_t sp = x_rank - 2;
  size_t ck = 0, cs = 0, cp = 0, cd = 0, co = 0;
  const int64_t* k = H->node_attr_ints(n, "kernel_shape", &ck);
  const int64_t* st = H->node_attr_ints(n, "strides", &cs);
  const int64_t* p = H->node_attr_ints(n, "pads", &cp);
  const int64_t* d = H->node_attr_ints(n, "dilations", &cd);
  const int64_t* o = H->node_attr_ints(n, "output_padding", &co);
  if ((ck && ck != sp) || (cs && cs != sp) || (cp && cp != 2 * sp) || (cd && cd != sp) ||
      (co && co != sp))
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                          "kernel_shape / strides / pads / dilations do not match %zu spatial dims",
                          sp);
  const char* ap = H->node_attr_string(n, "auto_pad", NULL);
  bool valid = ap && !strcmp(ap, "VALID");
  int off = sp == 1 ? 1 : 0;
  s->sp = (int)sp + off;
  for (int i = 0; i < 3; i++) {
    s->kernel[i] = s->stride[i] = s->dil[i] = 1;
    s->pad[i] = s->out_pad[i] = 0;
  }
  for (size_t i = 0; i < sp; i++) {
    int64_t kv = ck ? k[i] : (w_dims ? w_dims[2 + i] : 1);
    int64_t sv = cs ? st[i] : 1, pv = (cp && !valid) ? p[i] : 0, dv = cd ? d[i] : 1;
    int64_t ov = co ? o[i] : 0;
    if (kv < 1 || sv < 1 || dv < 1 || pv < 0 || ov < 0 || kv > INT32_MAX || sv > INT32_MAX ||
        dv > INT32_MAX || pv > INT32_MAX || ov > INT32_MAX)
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "bad kernel_shape / strides / pads");
    s->kernel[i + off] = (int)kv;
    s->stride[i + off] = (int)sv;
    s->pad[i + off] = (int)pv;
    s->dil[i + off] = (int)dv;
    s->out_pad[i + off] = (int)ov;
  }
  return NULL;
}

static OnyxStatus* dnn_begin(DnnKernel* k, OnyxKernelContext* ctx, CudaState** cs, void** stream) {
  OnyxStatus* st = gpu_kernel_begin(&k->base, ctx, stream);
  if (st) return st;
  *cs = k->base.ep->vendor_state;
  pthread_mutex_lock(&k->base.ep->vendor_lock);
  cudnnStatus_t s = cudnnSetStream((*cs)->dnn, (cudaStream_t)*stream);
  if (s != CUDNN_STATUS_SUCCESS) {
    pthread_mutex_unlock(&k->base.ep->vendor_lock);
    return cuda_dnn_error(k->base.node, s, "cudnnSetStream");
  }
  return NULL; /* the caller unlocks vendor_lock */
}

/* --- Conv and ConvTranspose ------------------------------------------------------------------ */

/* The convolutions' math type: FMA only (full float32) by default; with
 * use_tf32, CUDNN_DEFAULT_MATH, under which cuDNN may pick tensor-core
 * kernels that round float32 inputs to TF32 (10-bit mantissa) and
 * accumulate in float32 (sm_80 and later). */
static cudnnMathType_t conv_math(const GpuEp* g) {
  return g->use_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

static int pick_fwd_algo(DnnKernel* k, CudaState* cs, Descs* d, const int64_t* xd, size_t xr,
                         cudnnMathType_t math) {
  GpuEp* g = k->base.ep;
  if (g->conv_algo == CUDA_ALGO_DEFAULT) return CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  pthread_mutex_lock(&k->lock);
  bool hit = k->algo_valid && k->rank == xr && k->algo_math == math &&
             !memcmp(k->shape, xd, xr * sizeof *xd);
  int algo = k->algo;
  pthread_mutex_unlock(&k->lock);
  if (hit) return algo;
  cudnnConvolutionFwdAlgoPerf_t perf[8];
  int got = 0;
  cudnnStatus_t s =
      g->conv_algo == CUDA_ALGO_EXHAUSTIVE
          ? cudnnFindConvolutionForwardAlgorithm(cs->dnn, d->x, d->w, d->conv, d->y, 8, &got, perf)
          : cudnnGetConvolutionForwardAlgorithm_v7(cs->dnn, d->x, d->w, d->conv, d->y, 8, &got,
                                                   perf);
  algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < got; i++)
    if (perf[i].status == CUDNN_STATUS_SUCCESS) {
      algo = (int)perf[i].algo;
      break;
    }
  pthread_mutex_lock(&k->lock);
  memcpy(k->shape, xd, xr * sizeof *xd);
  k->rank = xr;
  k->algo = algo;
  k->algo_math = math;
  k->algo_valid = 1;
  pthread_mutex_unlock(&k->lock);
  return algo;
}

/* FusedConv's activation as the shared element-wise kernel's op. */
static GpuUnaryOp act_unary(int act) {
  return act == ACT_LEAKY_RELU ? GPU_LEAKY_RELU : act == ACT_CLIP ? GPU_CLIP : GPU_RELU;
}

/* A refusal that cuDNN reports before it queues any work (a bad or
 * unsupported parameter combination), after which another form may run. */
static bool dnn_refused(cudnnStatus_t s) {
  return s >= CUDNN_STATUS_BAD_PARAM && s < CUDNN_STATUS_INTERNAL_ERROR;
}

/* FusedConv in one cuDNN call: y = act(conv(x, w) + alpha2 z + b) with act
 * Relu, or identity (which cuDNN runs only with IMPLICIT_PRECOMP_GEMM: the
 * caller checks). A refusal (dnn_refused) tells the caller to take the
 * separate passes. */
static cudnnStatus_t conv_bias_act(const DnnKernel* k, CudaState* cs, Descs* d,
                                   cudnnConvolutionFwdAlgo_t algo, void* ws, size_t ws_bytes,
                                   const OnyxTensor* X, const OnyxTensor* W, const OnyxTensor* B,
                                   const OnyxTensor* Z, OnyxTensor* Y) {
  cudnnActivationDescriptor_t act = NULL;
  cudnnStatus_t s = cudnnCreateActivationDescriptor(&act);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetActivationDescriptor(
        act, k->act == ACT_RELU ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
        CUDNN_PROPAGATE_NAN, 0.0);
  /* Without Z, alpha2 is 0 and z is y itself (cuDNN reads it scaled by 0). */
  const float one = 1.0f, zero = 0.0f;
  void* y = H->tensor_mutable_data(Y);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnConvolutionBiasActivationForward(cs->dnn, &one, d->x, H->tensor_data(X), d->w,
                                              H->tensor_data(W), d->conv, algo, ws, ws_bytes,
                                              Z ? &one : &zero, d->y, Z ? H->tensor_data(Z) : y,
                                              d->b, H->tensor_data(B), act, d->y, y);
  if (act) cudnnDestroyActivationDescriptor(act);
  return s;
}

/* --- forward convolutions through cached graph-API plans ------------------------------------ */

/* Element-wise passes left after a plan: Z, the bias, the activation. */
enum { EPI_Z = 1, EPI_BIAS = 2, EPI_ACT = 4 };

/* The plan of k for the key, built on first use: the whole node (convolution,
 * Z, bias, Relu) as one graph, else the convolution alone. NULL where neither
 * finalizes: the node then falls back to the legacy calls (k->graph_off).
 * Caller holds vendor_lock. */
static PlanEntry* graph_plan(DnnKernel* k, CudaState* cs, const Spatial* sp, const int* xi,
                             const int* wi, const int* yi, int ir, bool bias, bool z) {
  const GpuEp* g = k->base.ep;
  const OnyxNode* n = k->base.node;
  int64_t x[DNN_MAX_DIMS], w[DNN_MAX_DIMS];
  for (int i = 0; i < ir; i++) {
    x[i] = xi[i];
    w[i] = wi[i];
  }
  for (int i = 0; i < DNN_PLAN_CACHE; i++) {
    PlanEntry* e = &k->plans[i];
    if (e->used && e->rank == (size_t)ir && e->tf32 == g->use_tf32 &&
        e->conv_algo == g->conv_algo && !memcmp(e->x, x, (size_t)ir * sizeof *x) &&
        !memcmp(e->w, w, (size_t)ir * sizeof *w))
      return e;
  }
  DnnGraphSpec s = {.rank = ir,
                    .sp = sp->sp,
                    .z = z,
                    .bias = bias,
                    .relu = k->base.op == DNN_FUSED_CONV && k->act == ACT_RELU,
                    .tf32 = g->use_tf32,
                    .no_fft_winograd = g->conv_algo == CUDA_ALGO_DEFAULT};
  for (int i = 0; i < ir; i++) {
    s.x[i] = xi[i];
    s.w[i] = wi[i];
    s.y[i] = yi[i];
  }
  for (int i = 0; i < sp->sp; i++) {
    s.pad[i] = sp->pad[i];
    s.stride[i] = sp->stride[i];
    s.dil[i] = sp->dil[i];
  }
  DnnGraphPlan* plan = NULL;
  const char* what = NULL;
  bool whole = true;
  cudnnStatus_t st = dnn_graph_build(cs->dnn, &s, &plan, &what);
  if (st != CUDNN_STATUS_SUCCESS && (s.z || s.bias || s.relu)) {
    if (!k->logged_conv_only)
      H->log(ONYX_LOG_INFO, "cuda",
             "node '%s' (%s): no cuDNN graph plan for the convolution with its bias / Z / Relu "
             "(%s: %s); the convolution runs as a graph plan, the rest as element-wise passes",
             H->node_name(n), H->node_op_type(n), what, cudnnGetErrorString(st));
    k->logged_conv_only = true;
    s.z = s.bias = s.relu = false;
    whole = false;
    st = dnn_graph_build(cs->dnn, &s, &plan, &what);
  }
  if (st != CUDNN_STATUS_SUCCESS) {
    H->log(ONYX_LOG_INFO, "cuda",
           "node '%s' (%s): no cuDNN graph plan for the convolution (%s: %s); the node runs "
           "through the legacy cuDNN calls",
           H->node_name(n), H->node_op_type(n), what, cudnnGetErrorString(st));
    k->graph_off = true;
    return NULL;
  }
  char shape[128];
  size_t len = 0;
  shape[0] = 0;
  for (int i = 0; i < ir && len < sizeof shape; i++)
    len +=
        (size_t)snprintf(shape + len, sizeof shape - len, "%s%lld", i ? "x" : "", (long long)x[i]);
  H->log(ONYX_LOG_VERBOSE, "cuda",
         "node '%s' (%s): cuDNN graph plan for X %s: engine %lld (%s), workspace %zu bytes",
         H->node_name(n), H->node_op_type(n), shape, (long long)dnn_graph_engine(plan),
         whole ? "the whole node" : "the convolution alone", dnn_graph_workspace(plan));
  PlanEntry* e = &k->plans[k->next_plan];
  k->next_plan = (k->next_plan + 1) % DNN_PLAN_CACHE;
  dnn_graph_free(e->plan);
  *e = (PlanEntry){.used = true,
                   .rank = (size_t)ir,
                   .tf32 = g->use_tf32,
                   .conv_algo = g->conv_algo,
                   .plan = plan,
                   .whole = whole};
  memcpy(e->x, x, (size_t)ir * sizeof *x);
  memcpy(e->w, w, (size_t)ir * sizeof *w);
  return e;
}

/* Runs the forward convolution of k through its cached plan. *handled false:
 * the caller takes the legacy calls (the node has fallen back, or a pointer
 * lacks the plans' alignment). *rest: the EPI_* passes still to run. Caller
 * holds vendor_lock. */
static OnyxStatus* conv_graph_run(DnnKernel* k, CudaState* cs, void* stream, const Spatial* sp,
                                  const int* xi, const int* wi, const int* yi, int ir,
                                  const OnyxTensor* X, const OnyxTensor* W, const OnyxTensor* B,
                                  const OnyxTensor* Z, OnyxTensor* Y, bool* handled, int* rest) {
  *handled = false;
  *rest = 0;
  const OnyxNode* n = k->base.node;
  const void* x = H->tensor_data(X);
  const void* w = H->tensor_data(W);
  const void* b = B ? H->tensor_data(B) : NULL;
  const void* z = Z ? H->tensor_data(Z) : NULL;
  void* y = H->tensor_mutable_data(Y);
  if (k->graph_off || !dnn_graph_aligned(x, w, b, z, y)) return NULL;
  PlanEntry* e = graph_plan(k, cs, sp, xi, wi, yi, ir, B != NULL, Z != NULL);
  if (!e) return NULL;
  size_t ws_bytes = dnn_graph_workspace(e->plan);
  void* ws = NULL;
  if (ws_bytes && cudaMallocAsync(&ws, ws_bytes, (cudaStream_t)stream) != cudaSuccess)
    return cuda_dnn_error(n, CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED,
                          "allocating the convolution workspace");
  cudnnStatus_t s = dnn_graph_execute(cs->dnn, e->plan, x, w, b, z, y, ws);
  if (ws) cudaFreeAsync(ws, (cudaStream_t)stream);
  if (dnn_refused(s)) {
    /* Refused before any work was queued: the legacy calls compute it. */
    H->log(ONYX_LOG_INFO, "cuda",
           "node '%s' (%s): cudnnBackendExecute refused the plan (%s); the node runs through the "
           "legacy cuDNN calls",
           H->node_name(n), H->node_op_type(n), cudnnGetErrorString(s));
    k->graph_off = true;
    return NULL;
  }
  if (s != CUDNN_STATUS_SUCCESS) return cuda_dnn_error(n, s, "cudnnBackendExecute");
  *handled = true;
  if (!e->whole) *rest = (Z ? EPI_Z : 0) | (B ? EPI_BIAS : 0);
  bool act = k->base.op == DNN_FUSED_CONV && k->act != ACT_NONE;
  if (act && (!e->whole || k->act != ACT_RELU)) *rest |= EPI_ACT;
  return NULL;
}

/* The passes a plan left, in the legacy order: Y += Z, Y += B (one value per
 * channel), then the activation, each queued on the stream after the
 * convolution. */
static OnyxStatus* conv_epilogue(const DnnKernel* k, OnyxTensor* Y, const OnyxTensor* B,
                                 const OnyxTensor* Z, int rest, void* stream) {
  const OnyxNode* n = k->base.node;
  float* y = H->tensor_mutable_data(Y);
  int64_t count = (int64_t)H->tensor_elem_count(Y);
  if (rest & EPI_Z) {
    GpuIter it = {.rank = 1, .dims = {count}};
    it.strides[0][0] = it.strides[1][0] = it.strides[2][0] = 1;
    int err = gpuk_binary(GPU_ADD, y, H->tensor_data(Z), y, &it, stream);
    if (err) return gpu_launch_status(n, err, "adding Z");
  }
  if (rest & EPI_BIAS) {
    /* Y as [N, C, spatial]; B broadcast over N and the spatial dims. */
    const int64_t* yd = H->tensor_dims(Y);
    int64_t c = yd[1], inner = count / (yd[0] * c);
    GpuIter it = {.rank = 3, .dims = {yd[0], c, inner}};
    for (int o = 0; o < 2; o++) {
      it.strides[o][0] = c * inner;
      it.strides[o][1] = inner;
      it.strides[o][2] = 1;
    }
    it.strides[2][1] = 1;
    int err = gpuk_binary(GPU_ADD, y, H->tensor_data(B), y, &it, stream);
    if (err) return gpu_launch_status(n, err, "adding the bias");
  }
  if (rest & EPI_ACT) {
    int err = gpuk_unary(act_unary(k->act), y, y, count,
                         k->act == ACT_CLIP ? k->act_min : k->act_alpha, k->act_max, stream);
    if (err) return gpu_launch_status(n, err, "FusedConv activation");
  }
  return NULL;
}

static OnyxStatus* conv_compute(void* state, OnyxKernelContext* ctx) {
  DnnKernel* k = state;
  const OnyxNode* n = k->base.node;
  bool transpose = k->base.op == DNN_CONV_TRANSPOSE;
  bool fused = k->base.op == DNN_FUSED_CONV;
  const OnyxTensor* X = H->ctx_input(ctx, 0);
  const OnyxTensor* W = H->ctx_input(ctx, 1);
  const OnyxTensor* B = H->ctx_input_count(ctx) > 2 ? H->ctx_input(ctx, 2) : NULL;
  /* FusedConv's residual Z: a tensor of Y's shape added before the activation. */
  const OnyxTensor* Z = fused && H->ctx_input_count(ctx) > 3 ? H->ctx_input(ctx, 3) : NULL;
  size_t xr = H->tensor_rank(X);
  const int64_t* xd = H->tensor_dims(X);
  const int64_t* wd = H->tensor_dims(W);
  if (xr < 3 || xr > 5 || H->tensor_rank(W) != xr)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "X and W must have the same rank, 3 to 5");
  int64_t group = H->node_attr_int(n, "group", 1);
  if (group < 1 || xd[1] % group)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "group %lld does not divide %lld channels",
                          (long long)group, (long long)xd[1]);
  Spatial sp;
  OnyxStatus* st = read_spatial(n, xr, wd, &sp);
  if (st) return st;
  /* Output dims. */
  int64_t yd[DNN_MAX_DIMS];
  yd[0] = xd[0];
  if (!transpose) {
    if (wd[1] * group != xd[1])
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "W has %lld input channels per group; X %lld",
                            (long long)wd[1], (long long)(xd[1] / group));
    yd[1] = wd[0];
  } else {
    if (wd[0] != xd[1])
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "W has %lld input channels; X %lld",
                            (long long)wd[0], (long long)xd[1]);
    if (wd[1] > INT64_MAX / group)
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "W's %lld channels x group %lld overflow",
                            (long long)wd[1], (long long)group);
    yd[1] = wd[1] * group;
  }
  int off = xr == 3 ? 1 : 0;
  for (size_t i = 2; i < xr; i++) {
    int a = (int)(i - 2) + off;
    int64_t span = (int64_t)(sp.kernel[a] - 1) * sp.dil[a] + 1;
    if (!transpose) {
      int64_t in = xd[i] + 2 * (int64_t)sp.pad[a] - span;
      if (in < 0) return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "kernel larger than the input");
      yd[i] = in / sp.stride[a] + 1;
    } else {
      yd[i] = (int64_t)sp.stride[a] * (xd[i] - 1) + sp.out_pad[a] + span - 2 * (int64_t)sp.pad[a];
      if (yd[i] < 0) return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "negative output size");
    }
  }
  if (B && (int64_t)H->tensor_elem_count(B) != yd[1])
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                          "the bias B has %zu values; expected one per output channel (%lld)",
                          H->tensor_elem_count(B), (long long)yd[1]);
  if (Z && (H->tensor_rank(Z) != xr || memcmp(H->tensor_dims(Z), yd, xr * sizeof *yd)))
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                          "Z must be a float32 tensor of Y's shape (no broadcasting)");
  OnyxTensor* Y;
  st = H->ctx_output(ctx, 0, yd, xr, &Y);
  if (st) return st;
  if (!H->tensor_elem_count(Y)) return NULL;
  int xi[DNN_MAX_DIMS], wi[DNN_MAX_DIMS], yi[DNN_MAX_DIMS], ir = 0;
  st = to_int_dims(n, xd, xr, xi, &ir);
  if (!st) st = to_int_dims(n, wd, xr, wi, &ir);
  if (!st) st = to_int_dims(n, yd, xr, yi, &ir);
  if (st) return st;
  CudaState* cs;
  void* stream;
  st = dnn_begin(k, ctx, &cs, &stream);
  if (st) return st;
  /* float16 / bfloat16: the legacy calls (the graph plans are float32). */
  const cudnnDataType_t type = dnn_type(H->tensor_elem_type(X));
  const bool half = type != CUDNN_DATA_FLOAT;
  if (!transpose && cs->conv_graph && !half) {
    bool handled = false;
    int rest = 0;
    st = conv_graph_run(k, cs, stream, &sp, xi, wi, yi, ir, X, W, B, Z, Y, &handled, &rest);
    if (st || handled) {
      pthread_mutex_unlock(&k->base.ep->vendor_lock);
      return st ? st : conv_epilogue(k, Y, B, Z, rest, stream);
    }
  }
  Descs d = {0};
  void* ws = NULL;
  size_t ws_bytes = 0;
  bool done = false; /* bias, Z and activation applied by the fused call */
  const float one = 1.0f, zero = 0.0f;
  cudnnStatus_t s = set_tensor_t(&d.x, xi, ir, type);
  if (s == CUDNN_STATUS_SUCCESS) s = set_tensor_t(&d.y, yi, ir, type);
  if (s == CUDNN_STATUS_SUCCESS && B) {
    int bi[DNN_MAX_DIMS];
    for (int i = 0; i < ir; i++)
      bi[i] = i == 1 ? yi[1] : 1;
    s = set_tensor_t(&d.b, bi, ir, type);
  }
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateFilterDescriptor(&d.w);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetFilterNdDescriptor(d.w, type, CUDNN_TENSOR_NCHW, ir, wi);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateConvolutionDescriptor(&d.conv);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetConvolutionNdDescriptor(d.conv, sp.sp, sp.pad, sp.stride, sp.dil,
                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetConvolutionGroupCount(d.conv, (int)group);
  /* Full float32 (FMA math), or TF32 tensor cores under use_tf32; float16 /
   * bfloat16 on tensor cores, products accumulated in float32 (the compute
   * type above). */
  const cudnnMathType_t math = half ? CUDNN_TENSOR_OP_MATH : conv_math(k->base.ep);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetConvolutionMathType(d.conv, math);
  const char* what = "setting up descriptors";
  if (s == CUDNN_STATUS_SUCCESS && !transpose) {
    cudnnConvolutionFwdAlgo_t algo =
        (cudnnConvolutionFwdAlgo_t)pick_fwd_algo(k, cs, &d, xd, xr, math);
    s = cudnnGetConvolutionForwardWorkspaceSize(cs->dnn, d.x, d.w, d.conv, d.y, algo, &ws_bytes);
    what = "cudnnGetConvolutionForwardWorkspaceSize";
    if (s == CUDNN_STATUS_SUCCESS && ws_bytes &&
        cudaMallocAsync(&ws, ws_bytes, (cudaStream_t)stream) != cudaSuccess) {
      s = CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
      what = "allocating the convolution workspace";
    }
    pthread_mutex_lock(&k->lock);
    bool one_call =
        fused && B && !k->separate &&
        (k->act == ACT_RELU ||
         (k->act == ACT_NONE && algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM));
    pthread_mutex_unlock(&k->lock);
    if (s == CUDNN_STATUS_SUCCESS && one_call) {
      what = "cudnnConvolutionBiasActivationForward";
      s = conv_bias_act(k, cs, &d, algo, ws, ws_bytes, X, W, B, Z, Y);
      done = s == CUDNN_STATUS_SUCCESS;
      if (dnn_refused(s)) {
        H->log(ONYX_LOG_INFO, "cuda",
               "node '%s' (FusedConv): cudnnConvolutionBiasActivationForward refused (%s): the "
               "convolution, bias and activation run as separate passes",
               H->node_name(n), cudnnGetErrorString(s));
        pthread_mutex_lock(&k->lock);
        k->separate = true;
        pthread_mutex_unlock(&k->lock);
        s = CUDNN_STATUS_SUCCESS;
      }
    }
    if (s == CUDNN_STATUS_SUCCESS && !done) {
      what = "cudnnConvolutionForward";
      s = cudnnConvolutionForward(cs->dnn, &one, d.x, H->tensor_data(X), d.w, H->tensor_data(W),
                                  d.conv, algo, ws, ws_bytes, &zero, d.y,
                                  H->tensor_mutable_data(Y));
    }
  } else if (s == CUDNN_STATUS_SUCCESS) {
    cudnnConvolutionBwdDataAlgo_t algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    if (k->base.ep->conv_algo != CUDA_ALGO_DEFAULT) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[6];
      int got = 0;
      if (cudnnGetConvolutionBackwardDataAlgorithm_v7(cs->dnn, d.w, d.x, d.conv, d.y, 6, &got,
                                                      perf) == CUDNN_STATUS_SUCCESS)
        for (int i = 0; i < got; i++)
          if (perf[i].status == CUDNN_STATUS_SUCCESS) {
            algo = perf[i].algo;
            break;
          }
    }
    what = "cudnnGetConvolutionBackwardDataWorkspaceSize";
    s = cudnnGetConvolutionBackwardDataWorkspaceSize(cs->dnn, d.w, d.x, d.conv, d.y, algo,
                                                     &ws_bytes);
    if (s == CUDNN_STATUS_SUCCESS && ws_bytes &&
        cudaMallocAsync(&ws, ws_bytes, (cudaStream_t)stream) != cudaSuccess) {
      s = CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
      what = "allocating the convolution workspace";
    }
    if (s == CUDNN_STATUS_SUCCESS) {
      what = "cudnnConvolutionBackwardData";
      s = cudnnConvolutionBackwardData(cs->dnn, &one, d.w, H->tensor_data(W), d.x,
                                       H->tensor_data(X), d.conv, algo, ws, ws_bytes, &zero, d.y,
                                       H->tensor_mutable_data(Y));
    }
  }
  if (s == CUDNN_STATUS_SUCCESS && !done && Z) {
    what = "adding Z";
    s = cudnnAddTensor(cs->dnn, &one, d.y, H->tensor_data(Z), &one, d.y, H->tensor_mutable_data(Y));
  }
  if (s == CUDNN_STATUS_SUCCESS && !done && B) {
    what = "adding the bias";
    s = cudnnAddTensor(cs->dnn, &one, d.b, H->tensor_data(B), &one, d.y, H->tensor_mutable_data(Y));
  }
  if (ws) cudaFreeAsync(ws, (cudaStream_t)stream);
  pthread_mutex_unlock(&k->base.ep->vendor_lock);
  descs_free(&d);
  if (s != CUDNN_STATUS_SUCCESS) return cuda_dnn_error(n, s, what);
  if (fused && !done && k->act != ACT_NONE) {
    /* The activation in place over Y, queued on the same stream after the
     * convolution. */
    float* y = H->tensor_mutable_data(Y);
    int err = gpuk_unary(act_unary(k->act), y, y, (int64_t)H->tensor_elem_count(Y),
                         k->act == ACT_CLIP ? k->act_min : k->act_alpha, k->act_max, stream);
    if (err) return gpu_launch_status(n, err, "FusedConv activation");
  }
  return NULL;
}

/* --- pooling ---------------------------------------------------------------------------------- */

static OnyxStatus* pool_compute(void* state, OnyxKernelContext* ctx) {
  DnnKernel* k = state;
  const OnyxNode* n = k->base.node;
  const OnyxTensor* X = H->ctx_input(ctx, 0);
  if (k->base.op == DNN_MAX_POOL && maxpool_own_kernel(n)) {
    if (H->tensor_elem_type(X) != ONYX_ELEM_FLOAT32)
      return gpu_node_error(n, ONYX_NOT_IMPLEMENTED,
                            "MaxPool with Indices or a window cuDNN cannot express takes float32 "
                            "only");
    return gpu_maxpool_compute(&k->base, ctx);
  }
  size_t xr = H->tensor_rank(X);
  const int64_t* xd = H->tensor_dims(X);
  if (xr < 3 || xr > 5)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "X must have rank 3 to 5, not %zu", xr);
  bool global = k->base.op == DNN_GLOBAL_AVG_POOL || k->base.op == DNN_GLOBAL_MAX_POOL;
  Spatial sp;
  OnyxStatus* st = NULL;
  int off = xr == 3 ? 1 : 0;
  if (global) {
    sp.sp = (int)(xr - 2) + off;
    for (int i = 0; i < 3; i++) {
      sp.kernel[i] = sp.stride[i] = sp.dil[i] = 1;
      sp.pad[i] = sp.out_pad[i] = 0;
    }
    for (size_t i = 2; i < xr; i++) {
      if (xd[i] < 1 || xd[i] > INT32_MAX)
        return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "spatial dim %lld", (long long)xd[i]);
      sp.kernel[i - 2 + off] = sp.stride[i - 2 + off] = (int)xd[i];
    }
  } else {
    size_t ck = 0;
    H->node_attr_ints(n, "kernel_shape", &ck);
    if (ck != xr - 2)
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "kernel_shape must have %zu values", xr - 2);
    st = read_spatial(n, xr, NULL, &sp);
    if (st) return st;
  }
  int64_t yd[DNN_MAX_DIMS] = {xd[0], xd[1]};
  for (size_t i = 2; i < xr; i++) {
    int a = (int)(i - 2) + off;
    int64_t in = xd[i] + 2 * (int64_t)sp.pad[a] - sp.kernel[a];
    if (in < 0) return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "window larger than the input");
    yd[i] = in / sp.stride[a] + 1;
  }
  OnyxTensor* Y;
  st = H->ctx_output(ctx, 0, yd, xr, &Y);
  if (st) return st;
  if (!H->tensor_elem_count(Y)) return NULL;
  int xi[DNN_MAX_DIMS], yi[DNN_MAX_DIMS], ir = 0;
  st = to_int_dims(n, xd, xr, xi, &ir);
  if (!st) st = to_int_dims(n, yd, xr, yi, &ir);
  if (st) return st;
  cudnnPoolingMode_t mode = CUDNN_POOLING_MAX;
  if (k->base.op == DNN_AVG_POOL)
    mode = H->node_attr_int(n, "count_include_pad", 0)
               ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
               : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  else if (k->base.op == DNN_GLOBAL_AVG_POOL)
    mode = CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
  CudaState* cs;
  void* stream;
  st = dnn_begin(k, ctx, &cs, &stream);
  if (st) return st;
  Descs d = {0};
  const float one = 1.0f, zero = 0.0f;
  const cudnnDataType_t type = dnn_type(H->tensor_elem_type(X));
  cudnnStatus_t s = set_tensor_t(&d.x, xi, ir, type);
  if (s == CUDNN_STATUS_SUCCESS) s = set_tensor_t(&d.y, yi, ir, type);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreatePoolingDescriptor(&d.pool);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetPoolingNdDescriptor(d.pool, mode, CUDNN_PROPAGATE_NAN, sp.sp, sp.kernel, sp.pad,
                                    sp.stride);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnPoolingForward(cs->dnn, d.pool, &one, d.x, H->tensor_data(X), &zero, d.y,
                            H->tensor_mutable_data(Y));
  pthread_mutex_unlock(&k->base.ep->vendor_lock);
  descs_free(&d);
  return s == CUDNN_STATUS_SUCCESS ? NULL : cuda_dnn_error(n, s, "cudnnPoolingForward");
}

/* --- BatchNormalization (inference) ----------------------------------------------------------- */

static OnyxStatus* bn_compute(void* state, OnyxKernelContext* ctx) {
  DnnKernel* k = state;
  const OnyxNode* n = k->base.node;
  if (gpu_batchnorm_training(n)) return gpu_batchnorm_compute(&k->base, ctx);
  const OnyxTensor* X = H->ctx_input(ctx, 0);
  size_t xr = H->tensor_rank(X);
  const int64_t* xd = H->tensor_dims(X);
  if (xr < 2 || xr > 5)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "X must have rank 2 to 5, not %zu", xr);
  for (size_t i = 1; i < 5; i++) {
    const OnyxTensor* p = H->ctx_input(ctx, i);
    if (!p || H->tensor_elem_type(p) != ONYX_ELEM_FLOAT32 ||
        (int64_t)H->tensor_elem_count(p) != xd[1])
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                            "input %zu must be float32 with one value per channel (%lld)", i,
                            (long long)xd[1]);
  }
  double eps = H->node_attr_float(n, "epsilon", 1e-5f);
  if (eps < CUDNN_BN_MIN_EPSILON) eps = CUDNN_BN_MIN_EPSILON;
  OnyxTensor* Y;
  OnyxStatus* st = H->ctx_output(ctx, 0, xd, xr, &Y);
  if (st) return st;
  if (!H->tensor_elem_count(Y)) return NULL;
  /* cuDNN wants 4-D or 5-D: [N, C] -> [N, C, 1, 1], [N, C, L] -> [N, C, 1, L]. */
  int64_t xd4[DNN_MAX_DIMS];
  size_t r4 = xr < 4 ? 4 : xr;
  for (size_t i = 0; i < r4; i++)
    xd4[i] = 1;
  xd4[0] = xd[0];
  xd4[1] = xd[1];
  if (xr == 3) xd4[3] = xd[2];
  if (xr >= 4) memcpy(xd4, xd, xr * sizeof *xd);
  int xi[DNN_MAX_DIMS], ir;
  for (size_t i = 0; i < r4; i++) {
    if (xd4[i] < 0 || xd4[i] > INT32_MAX)
      return gpu_node_error(n, ONYX_NOT_IMPLEMENTED, "dim %lld does not fit cuDNN",
                            (long long)xd4[i]);
    xi[i] = (int)xd4[i];
  }
  ir = (int)r4;
  CudaState* cs;
  void* stream;
  st = dnn_begin(k, ctx, &cs, &stream);
  if (st) return st;
  Descs d = {0};
  const float one = 1.0f, zero = 0.0f;
  cudnnStatus_t s = set_tensor(&d.x, xi, ir);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateTensorDescriptor(&d.b);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnDeriveBNTensorDescriptor(d.b, d.x, CUDNN_BATCHNORM_SPATIAL);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnBatchNormalizationForwardInference(
        cs->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x, H->tensor_data(X), d.x,
        H->tensor_mutable_data(Y), d.b, H->tensor_data(H->ctx_input(ctx, 1)),
        H->tensor_data(H->ctx_input(ctx, 2)), H->tensor_data(H->ctx_input(ctx, 3)),
        H->tensor_data(H->ctx_input(ctx, 4)), eps);
  pthread_mutex_unlock(&k->base.ep->vendor_lock);
  descs_free(&d);
  return s == CUDNN_STATUS_SUCCESS
             ? NULL
             : cuda_dnn_error(n, s, "cudnnBatchNormalizationForwardInference");
}

/* --- registration ---------------------------------------------------------------------------- */

OnyxStatus* cuda_register_dnn_kernels(OnyxKernelRegistry* r) {
  static const OnyxTypeConstraint tf[] = {{"T", gpu_float_types, 1}};
  /* Conv, ConvTranspose and the pools: float32, float16, bfloat16 (the
   * legacy calls). */
  static const OnyxTypeConstraint treal[] = {{"T", gpu_real_types, 3}};
  static const struct {
    const char* op;
    int32_t since, code;
    OnyxStatus* (*compute)(void*, OnyxKernelContext*);
  } defs[] = {{"Conv", 1, DNN_CONV, conv_compute},
              {"ConvTranspose", 1, DNN_CONV_TRANSPOSE, conv_compute},
              {"MaxPool", 1, DNN_MAX_POOL, pool_compute},
              {"AveragePool", 1, DNN_AVG_POOL, pool_compute},
              {"GlobalAveragePool", 1, DNN_GLOBAL_AVG_POOL, pool_compute},
              {"GlobalMaxPool", 1, DNN_GLOBAL_MAX_POOL, pool_compute},
              {"BatchNormalization", 9, DNN_BATCH_NORM, bn_compute},
              {"FusedConv", 1, DNN_FUSED_CONV, conv_compute}};
  OnyxStatus* st = NULL;
  for (size_t i = 0; !st && i < sizeof defs / sizeof defs[0]; i++) {
    OnyxKernelDef d = {.struct_size = sizeof d,
                       .domain = defs[i].code == DNN_FUSED_CONV ? "com.onyx" : "",
                       .op_type = defs[i].op,
                       .since_version = defs[i].since,
                       .end_version = ONYX_OPSET_LATEST,
                       .type_constraints =
                           defs[i].code == DNN_BATCH_NORM || defs[i].code == DNN_FUSED_CONV ? tf
                                                                                            : treal,
                       .type_constraint_count = 1,
                       .create = dnn_create,
                       .compute = defs[i].compute,
                       .release = dnn_release,
                       .user_data = (void*)(intptr_t)defs[i].code};
    st = H->register_kernel(r, &d);
  }
  if (!st) st = cuda_register_dnn_grad_kernels(r);
  return st;
}
