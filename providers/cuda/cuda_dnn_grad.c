/* cuda_dnn_grad.c — com.onyx.training ConvGrad(dY, X, W) -> dX?, dW?, dB?
 * through cuDNN 9's legacy convolution calls (docs/training.md, "Gradient
 * ops"; the CPU provider's cpu_grad_conv.c has the same semantics):
 *
 *   dX  cudnnConvolutionBackwardData   (W, dY)
 *   dW  cudnnConvolutionBackwardFilter (X, dY)
 *   dB  cudnnConvolutionBackwardBias   (dY summed over N and the spatial dims)
 *
 * Each output is computed only where the node asks for it. Groups, strides,
 * dilations and symmetric pads, 1-D (run as 2-D with a height of 1) to 3-D.
 * Asymmetric pads and auto_pad SAME_UPPER / SAME_LOWER are declined at
 * partitioning (cuda_dnn_grad_decline) and run on the next provider.
 *
 * The algorithms of both passes are chosen once per node and shape (as
 * cudnn_conv_algo_search says: cudnnFind* for EXHAUSTIVE, the _v7
 * heuristics for HEURISTIC, algorithm 1 of each for DEFAULT) and cached in
 * the node's state with the math type they were chosen under: FMA (full
 * float32), or CUDNN_DEFAULT_MATH under use_tf32, as the forward
 * convolutions. Workspaces are stream-ordered allocations (cudaMallocAsync),
 * as theirs are. */
#include <stdlib.h>
#include <string.h>

#include "cuda_dnn_grad.h"
#include "cuda_vendor.h"

#define H        gpu_host
#define GR_DIMS  5 /* N, C and up to 3 spatial dims (1-D promoted to 2-D) */
#define TRAINING "com.onyx.training"

/* Node state: the algorithms chosen for the last shape and math settings,
 * used and updated under the EP's vendor_lock (held around every cuDNN
 * call of the node). */
typedef struct GradKernel {
  GpuKernel base;
  bool valid, data_done, filter_done; /* the key below is set; each pass searched */
  int rank;
  int x[GR_DIMS], w[GR_DIMS];
  cudnnMathType_t math;
  int conv_algo;
  cudnnConvolutionBwdDataAlgo_t data_algo;
  cudnnConvolutionBwdFilterAlgo_t filter_algo;
} GradKernel;

static OnyxStatus* grad_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  (void)user;
  GradKernel* k = calloc(1, sizeof *k);
  if (!k) return gpu_node_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  k->base.ep = gpu_ep(ep);
  k->base.node = node;
  k->base.since = H->node_since_version(node);
  *state = k;
  return NULL;
}

static void grad_release(void* state) {
  free(state);
}

/* --- decline ----------------------------------------------------------------------- */

const char* cuda_dnn_grad_decline(const OnyxNode* n) {
  const OnyxValueInfo* x = H->node_input_count(n) > 1 ? H->node_input(n, 1) : NULL;
  const int32_t r = x ? H->value_rank(x) : -1;
  if (r < 3 || r > 5) return "cuda: ConvGrad through cuDNN needs X of known rank 3 to 5";
  const char* ap = H->node_attr_string(n, "auto_pad", NULL);
  if (ap && *ap && strcmp(ap, "NOTSET") && strcmp(ap, "VALID"))
    return "cuda: ConvGrad with auto_pad SAME_UPPER / SAME_LOWER is not supported";
  size_t c = 0;
  const int64_t* p = H->node_attr_ints(n, "pads", &c);
  if (c % 2) return "cuda: ConvGrad's pads must have two values per spatial dim";
  for (size_t i = 0; i < c / 2; i++)
    if (p[i] != p[i + c / 2])
      return "cuda: ConvGrad with asymmetric pads is not supported by cuDNN";
  return NULL;
}

/* --- geometry ----------------------------------------------------------------------- */

/* The convolution's attributes for sp spatial dims (sp 1 promoted to 2:
 * a leading height of 1), each value checked to fit cuDNN's int. */
typedef struct GradGeo {
  int sp;
  int pad[3], stride[3], dil[3];
} GradGeo;

static OnyxStatus* read_attr(const OnyxNode* n, const char* name, size_t want, int64_t lo,
                             int64_t dflt, int64_t* out) {
  size_t c = 0;
  const int64_t* v = H->node_attr_ints(n, name, &c);
  if (c && c != want)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "attribute %s has %zu values; expected %zu",
                          name, c, want);
  for (size_t i = 0; i < want; i++) {
    out[i] = c ? v[i] : dflt;
    if (out[i] < lo || out[i] > INT32_MAX)
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "attribute %s[%zu] = %lld is out of range",
                            name, i, (long long)out[i]);
  }
  return NULL;
}

static OnyxStatus* grad_geometry(const OnyxNode* n, size_t sp, const int64_t* w_spatial,
                                 GradGeo* g) {
  int64_t s[3], d[3], p[6], k[3];
  OnyxStatus* st = read_attr(n, "strides", sp, 1, 1, s);
  if (!st) st = read_attr(n, "dilations", sp, 1, 1, d);
  if (!st) st = read_attr(n, "pads", 2 * sp, 0, 0, p);
  if (!st) st = read_attr(n, "kernel_shape", sp, 1, 1, k);
  if (st) return st;
  size_t ck = 0;
  H->node_attr_ints(n, "kernel_shape", &ck);
  for (size_t i = 0; ck && i < sp; i++)
    if (k[i] != w_spatial[i])
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                            "kernel_shape[%zu] = %lld does not match W's spatial dim (%lld)", i,
                            (long long)k[i], (long long)w_spatial[i]);
  const char* ap = H->node_attr_string(n, "auto_pad", NULL);
  const bool valid = ap && !strcmp(ap, "VALID");
  if (ap && *ap && strcmp(ap, "NOTSET") && !valid)
    return gpu_node_error(n, ONYX_NOT_IMPLEMENTED, "auto_pad %s is not supported by cuDNN", ap);
  const int off = sp == 1 ? 1 : 0;
  g->sp = (int)sp + off;
  for (int i = 0; i < 3; i++) {
    g->pad[i] = 0;
    g->stride[i] = g->dil[i] = 1;
  }
  for (size_t i = 0; i < sp; i++) {
    if (!valid && p[i] != p[i + sp])
      return gpu_node_error(n, ONYX_NOT_IMPLEMENTED,
                            "asymmetric pads (%lld, %lld) are not supported by cuDNN",
                            (long long)p[i], (long long)p[i + sp]);
    g->pad[i + off] = valid ? 0 : (int)p[i];
    g->stride[i + off] = (int)s[i];
    g->dil[i + off] = (int)d[i];
  }
  return NULL;
}

/* dims as int, a 1-D spatial input promoted to 2-D (height 1). */
static OnyxStatus* int_dims(const OnyxNode* n, const char* what, const int64_t* d, size_t r,
                            int* out) {
  int k = 0;
  for (size_t i = 0; i < r; i++) {
    if (d[i] < 0 || d[i] > INT32_MAX)
      return gpu_node_error(n, ONYX_NOT_IMPLEMENTED, "%s's dim %zu (%lld) does not fit cuDNN", what,
                            i, (long long)d[i]);
    if (r == 3 && i == 2) out[k++] = 1;
    out[k++] = (int)d[i];
  }
  return NULL;
}

static cudnnStatus_t set_tensor(cudnnTensorDescriptor_t* t, const int* dims, int rank) {
  int strides[GR_DIMS];
  int s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    strides[i] = s;
    s *= dims[i];
  }
  cudnnStatus_t st = cudnnCreateTensorDescriptor(t);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnSetTensorNdDescriptor(*t, CUDNN_DATA_FLOAT, rank, dims, strides);
  return st;
}

/* --- algorithms ------------------------------------------------------------------------- */

typedef struct GradDescs {
  cudnnTensorDescriptor_t x, dy, db;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
} GradDescs;

static void descs_free(GradDescs* d) {
  if (d->x) cudnnDestroyTensorDescriptor(d->x);
  if (d->dy) cudnnDestroyTensorDescriptor(d->dy);
  if (d->db) cudnnDestroyTensorDescriptor(d->db);
  if (d->w) cudnnDestroyFilterDescriptor(d->w);
  if (d->conv) cudnnDestroyConvolutionDescriptor(d->conv);
}

/* The node's algorithms for this shape and math: each pass's searched on
 * its first use with them (caller holds vendor_lock). A search that finds
 * nothing leaves algorithm 1 of the pass, which supports every geometry
 * the decline lets through. */
static void pick_algos(GradKernel* k, CudaState* cs, const GradDescs* d, const int* xi,
                       const int* wi, int ir, cudnnMathType_t math, bool want_dx, bool want_dw) {
  const GpuEp* g = k->base.ep;
  if (!k->valid || k->rank != ir || k->math != math || k->conv_algo != g->conv_algo ||
      memcmp(k->x, xi, (size_t)ir * sizeof *xi) || memcmp(k->w, wi, (size_t)ir * sizeof *wi)) {
    k->valid = true;
    k->rank = ir;
    k->math = math;
    k->conv_algo = g->conv_algo;
    memcpy(k->x, xi, (size_t)ir * sizeof *xi);
    memcpy(k->w, wi, (size_t)ir * sizeof *wi);
    k->data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    k->filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
    k->data_done = k->filter_done = g->conv_algo == CUDA_ALGO_DEFAULT;
  }
  if (want_dx && !k->data_done) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[8];
    int got = 0;
    cudnnStatus_t s = g->conv_algo == CUDA_ALGO_EXHAUSTIVE
                          ? cudnnFindConvolutionBackwardDataAlgorithm(cs->dnn, d->w, d->dy, d->conv,
                                                                      d->x, 8, &got, perf)
                          : cudnnGetConvolutionBackwardDataAlgorithm_v7(
                                cs->dnn, d->w, d->dy, d->conv, d->x, 8, &got, perf);
    for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < got; i++)
      if (perf[i].status == CUDNN_STATUS_SUCCESS) {
        k->data_algo = perf[i].algo;
        break;
      }
    k->data_done = true;
  }
  if (want_dw && !k->filter_done) {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[8];
    int got = 0;
    cudnnStatus_t s = g->conv_algo == CUDA_ALGO_EXHAUSTIVE
                          ? cudnnFindConvolutionBackwardFilterAlgorithm(
                                cs->dnn, d->x, d->dy, d->conv, d->w, 8, &got, perf)
                          : cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                                cs->dnn, d->x, d->dy, d->conv, d->w, 8, &got, perf);
    for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < got; i++)
      if (perf[i].status == CUDNN_STATUS_SUCCESS) {
        k->filter_algo = perf[i].algo;
        break;
      }
    k->filter_done = true;
  }
}

/* --- compute ------------------------------------------------------------------------------ */

static OnyxStatus* zero_fill(const OnyxNode* n, OnyxTensor* t, void* stream) {
  if (!t || !H->tensor_elem_count(t)) return NULL;
  const cudaError_t e = cudaMemsetAsync(
      H->tensor_mutable_data(t), 0, H->tensor_elem_count(t) * sizeof(float), (cudaStream_t)stream);
  return e == cudaSuccess ? NULL : gpu_launch_status(n, (int)e, "clearing a gradient");
}

static OnyxStatus* conv_grad_compute(void* state, OnyxKernelContext* ctx) {
  GradKernel* k = state;
  const OnyxNode* n = k->base.node;
  static const char* const names[] = {"dY", "X", "W"};
  const OnyxTensor* in[3];
  for (size_t i = 0; i < 3; i++) {
    in[i] = i < H->ctx_input_count(ctx) ? H->ctx_input(ctx, i) : NULL;
    if (!in[i] || H->tensor_elem_type(in[i]) != ONYX_ELEM_FLOAT32)
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT, "%s must be a float32 tensor", names[i]);
  }
  const OnyxTensor *DY = in[0], *X = in[1], *W = in[2];
  const size_t r = H->tensor_rank(X);
  const int64_t* xd = H->tensor_dims(X);
  const int64_t* wd = H->tensor_dims(W);
  const int64_t* yd = H->tensor_dims(DY);
  if (r < 3 || r > 5 || H->tensor_rank(W) != r || H->tensor_rank(DY) != r)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                          "dY, X and W must have one rank, 3 to 5 (got %zu, %zu, %zu)",
                          H->tensor_rank(DY), r, H->tensor_rank(W));
  const int64_t group = H->node_attr_int(n, "group", 1);
  if (group < 1 || group > INT32_MAX || xd[1] % group || wd[0] % group || wd[1] * group != xd[1])
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                          "group %lld does not fit X's %lld channels and W's shape (%lld, %lld, "
                          "...)",
                          (long long)group, (long long)xd[1], (long long)wd[0], (long long)wd[1]);
  const size_t sp = r - 2;
  GradGeo g;
  OnyxStatus* st = grad_geometry(n, sp, wd + 2, &g);
  if (st) return st;
  /* dY must be (N, M, out...) with Conv's output sizes. */
  const int off = sp == 1 ? 1 : 0;
  bool ok = yd[0] == xd[0] && yd[1] == wd[0];
  for (size_t i = 0; ok && i < sp; i++) {
    const int a = (int)i + off;
    const int64_t span = (wd[2 + i] - 1) * g.dil[a] + 1;
    const int64_t room = xd[2 + i] + 2 * (int64_t)g.pad[a] - span;
    if (room < 0)
      return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                            "spatial dim %zu: the window (%lld) is larger than the padded input", i,
                            (long long)span);
    ok = yd[2 + i] == room / g.stride[a] + 1;
  }
  if (!ok)
    return gpu_node_error(n, ONYX_INVALID_ARGUMENT,
                          "dY's shape does not match Conv's output for X and W (N, M, out...)");
  const bool want_dx = H->ctx_output_count(ctx) > 0 && H->node_output(n, 0);
  const bool want_dw = H->ctx_output_count(ctx) > 1 && H->node_output(n, 1);
  const bool want_db = H->ctx_output_count(ctx) > 2 && H->node_output(n, 2);
  OnyxTensor *DX = NULL, *DW = NULL, *DB = NULL;
  if (want_dx) st = H->ctx_output(ctx, 0, xd, r, &DX);
  if (!st && want_dw) st = H->ctx_output(ctx, 1, wd, r, &DW);
  if (!st && want_db) st = H->ctx_output(ctx, 2, wd, 1, &DB);
  if (st) return st;
  void* stream;
  st = gpu_kernel_begin(&k->base, ctx, &stream);
  if (st) return st;
  /* No values: every gradient is zero (cuDNN refuses zero-sized tensors). */
  if (!H->tensor_elem_count(DY) || !H->tensor_elem_count(X) || !H->tensor_elem_count(W)) {
    st = zero_fill(n, DX, stream);
    if (!st) st = zero_fill(n, DW, stream);
    if (!st) st = zero_fill(n, DB, stream);
    return st;
  }
  int xi[GR_DIMS], wi[GR_DIMS], yi[GR_DIMS];
  const int ir = (int)r + off;
  st = int_dims(n, "X", xd, r, xi);
  if (!st) st = int_dims(n, "W", wd, r, wi);
  if (!st) st = int_dims(n, "dY", yd, r, yi);
  if (st) return st;
  CudaState* cs = k->base.ep->vendor_state;
  const cudnnMathType_t math = k->base.ep->use_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  pthread_mutex_lock(&k->base.ep->vendor_lock);
  GradDescs d = {0};
  void* ws = NULL;
  const char* what = "cudnnSetStream";
  cudnnStatus_t s = cudnnSetStream(cs->dnn, (cudaStream_t)stream);
  if (s == CUDNN_STATUS_SUCCESS) {
    what = "setting up descriptors";
    s = set_tensor(&d.x, xi, ir);
  }
  if (s == CUDNN_STATUS_SUCCESS) s = set_tensor(&d.dy, yi, ir);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateFilterDescriptor(&d.w);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetFilterNdDescriptor(d.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, ir, wi);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateConvolutionDescriptor(&d.conv);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetConvolutionNdDescriptor(d.conv, g.sp, g.pad, g.stride, g.dil,
                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetConvolutionGroupCount(d.conv, (int)group);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetConvolutionMathType(d.conv, math);
  if (s == CUDNN_STATUS_SUCCESS && (want_dx || want_dw))
    pick_algos(k, cs, &d, xi, wi, ir, math, want_dx, want_dw);
  /* One workspace, sized for the larger of the two passes. */
  size_t ws_bytes = 0, b = 0;
  if (s == CUDNN_STATUS_SUCCESS && want_dx) {
    what = "cudnnGetConvolutionBackwardDataWorkspaceSize";
    s = cudnnGetConvolutionBackwardDataWorkspaceSize(cs->dnn, d.w, d.dy, d.conv, d.x, k->data_algo,
                                                     &b);
    if (b > ws_bytes) ws_bytes = b;
  }
  if (s == CUDNN_STATUS_SUCCESS && want_dw) {
    what = "cudnnGetConvolutionBackwardFilterWorkspaceSize";
    s = cudnnGetConvolutionBackwardFilterWorkspaceSize(cs->dnn, d.x, d.dy, d.conv, d.w,
                                                       k->filter_algo, &b);
    if (b > ws_bytes) ws_bytes = b;
  }
  if (s == CUDNN_STATUS_SUCCESS && ws_bytes &&
      cudaMallocAsync(&ws, ws_bytes, (cudaStream_t)stream) != cudaSuccess) {
    s = CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    what = "allocating the convolution workspace";
  }
  const float one = 1.0f, zero = 0.0f;
  if (s == CUDNN_STATUS_SUCCESS && want_dx) {
    what = "cudnnConvolutionBackwardData";
    s = cudnnConvolutionBackwardData(cs->dnn, &one, d.w, H->tensor_data(W), d.dy,
                                     H->tensor_data(DY), d.conv, k->data_algo, ws, ws_bytes, &zero,
                                     d.x, H->tensor_mutable_data(DX));
  }
  if (s == CUDNN_STATUS_SUCCESS && want_dw) {
    what = "cudnnConvolutionBackwardFilter";
    s = cudnnConvolutionBackwardFilter(cs->dnn, &one, d.x, H->tensor_data(X), d.dy,
                                       H->tensor_data(DY), d.conv, k->filter_algo, ws, ws_bytes,
                                       &zero, d.w, H->tensor_mutable_data(DW));
  }
  if (s == CUDNN_STATUS_SUCCESS && want_db) {
    int bi[GR_DIMS];
    for (int i = 0; i < ir; i++)
      bi[i] = i == 1 ? yi[1] : 1;
    what = "cudnnConvolutionBackwardBias";
    s = set_tensor(&d.db, bi, ir);
    if (s == CUDNN_STATUS_SUCCESS)
      s = cudnnConvolutionBackwardBias(cs->dnn, &one, d.dy, H->tensor_data(DY), &zero, d.db,
                                       H->tensor_mutable_data(DB));
  }
  if (ws) cudaFreeAsync(ws, (cudaStream_t)stream);
  pthread_mutex_unlock(&k->base.ep->vendor_lock);
  descs_free(&d);
  return s == CUDNN_STATUS_SUCCESS ? NULL : cuda_dnn_error(n, s, what);
}

/* --- registration ------------------------------------------------------------------------- */

OnyxStatus* cuda_register_dnn_grad_kernels(OnyxKernelRegistry* r) {
  static const OnyxTypeConstraint tf[] = {{"T", gpu_float_types, 1}};
  const OnyxKernelDef d = {.struct_size = sizeof d,
                           .domain = TRAINING,
                           .op_type = "ConvGrad",
                           .since_version = 1,
                           .end_version = ONYX_OPSET_LATEST,
                           .type_constraints = tf,
                           .type_constraint_count = 1,
                           .create = grad_create,
                           .compute = conv_grad_compute,
                           .release = grad_release};
  return H->register_kernel(r, &d);
}
