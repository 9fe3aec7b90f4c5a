/* cuda_dnn_graph.c — a forward convolution with its bias, residual and Relu
 * as one cuDNN operation graph (backend API), finalized into an execution
 * plan once; executing it takes a variant pack only, where the legacy calls
 * rebuild their plans on every call.
 *
 * The graph: CONVOLUTION_FORWARD (x, w -> t0, virtual), then pointwise ADD of
 * z (t0 + z -> t1), ADD of b broadcast over [1, C, 1, 1], RELU_FWD, the last
 * op writing y; the optional steps are left out and the chain closes on y.
 * Every descriptor the plan was built from stays alive with it and is
 * destroyed by dnn_graph_free. */
#include "cuda_dnn_graph.h"

#include <stdlib.h>
#include <string.h>

/* The unique ids of the variant pack's tensors. */
enum { UID_X = 1, UID_W, UID_B, UID_Z, UID_Y, UID_T0 = 100 };
/* Byte alignment declared for the tensors in device memory (checked per run). */
#define GRAPH_ALIGN 16
/* Descriptors one plan holds: 5 real and up to 3 virtual tensors, the
 * convolution and up to 3 pointwise descriptors, 4 operations, the graph,
 * two heuristics (two modes) and the engine config (the plan is apart). */
#define GRAPH_MAX_DESCS 32
/* Engine configs taken from the heuristics' list. */
#define GRAPH_MAX_CFGS 64

struct DnnGraphPlan {
  cudnnBackendDescriptor_t descs[GRAPH_MAX_DESCS];
  int n_descs;
  cudnnBackendDescriptor_t plan;
  int64_t workspace;
  int64_t engine; /* the engine's global index, -1 where unknown */
  bool bias, z;
};

static cudnnStatus_t create_desc(DnnGraphPlan* p, cudnnBackendDescriptorType_t type,
                                 cudnnBackendDescriptor_t* d) {
  *d = NULL;
  if (p->n_descs == GRAPH_MAX_DESCS) return CUDNN_STATUS_INTERNAL_ERROR;
  cudnnStatus_t s = cudnnBackendCreateDescriptor(type, d);
  if (s == CUDNN_STATUS_SUCCESS) p->descs[p->n_descs++] = *d;
  return s;
}

/* A packed float32 tensor (strides from the innermost dim). */
static cudnnStatus_t make_tensor(DnnGraphPlan* p, cudnnBackendDescriptor_t* t, int rank,
                                 const int64_t* dims, int64_t uid, bool is_virtual) {
  int64_t strides[5];
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    strides[i] = s;
    s *= dims[i];
  }
  const cudnnDataType_t dt = CUDNN_DATA_FLOAT;
  const int64_t align = GRAPH_ALIGN;
  const bool virt = is_virtual;
  cudnnStatus_t st = create_desc(p, CUDNN_BACKEND_TENSOR_DESCRIPTOR, t);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, dims);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, strides);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  if (st == CUDNN_STATUS_SUCCESS)
    st =
        cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(*t);
  return st;
}

/* A pointwise operation: y = mode(x) (unary) or y = x mode b (binary, b not
 * NULL), computed in float32. */
static cudnnStatus_t make_pointwise(DnnGraphPlan* p, cudnnBackendDescriptor_t* op,
                                    cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                    cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y) {
  cudnnBackendDescriptor_t pw = NULL;
  const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  cudnnStatus_t st = create_desc(p, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1,
                                  &mode);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1,
                                  &prec);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(pw);
  if (st == CUDNN_STATUS_SUCCESS)
    st = create_desc(p, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, op);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  if (st == CUDNN_STATUS_SUCCESS && b)
    st = cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(*op);
  return st;
}

/* Whether the engine of cfg has none of the numerical notes s rules out;
 * *index: the engine's global index (-1 where unknown). */
static bool engine_allowed(const DnnGraphSpec* s, cudnnBackendDescriptor_t cfg, int64_t* index) {
  *index = -1;
  cudnnBackendDescriptor_t engine = NULL;
  if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) !=
      CUDNN_STATUS_SUCCESS)
    return false;
  int64_t got = 0;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  bool ok =
      cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                               &got, &engine) == CUDNN_STATUS_SUCCESS &&
      got == 1;
  got = 0;
  ok = ok && cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                      CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                      &got, notes) == CUDNN_STATUS_SUCCESS;
  if (got > CUDNN_NUMERICAL_NOTE_TYPE_COUNT) got = CUDNN_NUMERICAL_NOTE_TYPE_COUNT;
  for (int64_t i = 0; ok && i < got; i++) {
    switch (notes[i]) {
    case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
    case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
    case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
      ok = s->tf32;
      break;
    case CUDNN_NUMERICAL_NOTE_FFT:
    case CUDNN_NUMERICAL_NOTE_WINOGRAD:
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4:
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6:
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13:
      ok = !s->no_fft_winograd;
      break;
    default:
      break;
    }
  }
  int64_t n_index = 0;
  if (ok && (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                      &n_index, index) != CUDNN_STATUS_SUCCESS ||
             n_index != 1))
    *index = -1;
  cudnnBackendDestroyDescriptor(engine);
  return ok;
}

/* Asks the heuristics (mode) for engine configs of graph and finalizes into
 * p->plan the first allowed one that finalizes; the config kept lives in
 * p->descs. */
static cudnnStatus_t pick_plan(DnnGraphPlan* p, cudnnHandle_t h, const DnnGraphSpec* s,
                               cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode,
                               const char** what) {
  cudnnBackendDescriptor_t heur = NULL;
  *what = "engine heuristics";
  cudnnStatus_t st = create_desc(p, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(heur);
  int64_t count = 0;
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  if (count <= 0) {
    *what = "engine heuristics (no engine config)";
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  if (count > GRAPH_MAX_CFGS) count = GRAPH_MAX_CFGS;
  cudnnBackendDescriptor_t cfgs[GRAPH_MAX_CFGS] = {0};
  int64_t made = 0;
  for (; made < count; made++)
    if ((st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[made])) !=
        CUDNN_STATUS_SUCCESS)
      break;
  int64_t got = 0;
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs);
  if (got > count) got = count;
  int64_t chosen = -1;
  cudnnBackendDescriptor_t plan = NULL;
  *what = "execution plan (no allowed engine finalizes)";
  for (int64_t i = 0; st == CUDNN_STATUS_SUCCESS && chosen < 0 && i < got; i++) {
    int64_t index = -1;
    if (!engine_allowed(s, cfgs[i], &index)) continue;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) !=
        CUDNN_STATUS_SUCCESS) {
      plan = NULL;
      break;
    }
    cudnnStatus_t ps =
        cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    if (ps == CUDNN_STATUS_SUCCESS)
      ps = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
    if (ps == CUDNN_STATUS_SUCCESS) ps = cudnnBackendFinalize(plan);
    int64_t ws = 0, n_ws = 0;
    if (ps == CUDNN_STATUS_SUCCESS)
      ps = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                    CUDNN_TYPE_INT64, 1, &n_ws, &ws);
    if (ps == CUDNN_STATUS_SUCCESS && n_ws == 1 && ws >= 0) {
      chosen = i;
      p->workspace = ws;
      p->engine = index;
    } else {
      cudnnBackendDestroyDescriptor(plan);
      plan = NULL;
    }
  }
  /* The chosen config stays with the plan; the others go. */
  bool kept = false;
  for (int64_t i = 0; i < made; i++) {
    if (i == chosen && p->n_descs < GRAPH_MAX_DESCS) {
      p->descs[p->n_descs++] = cfgs[i];
      kept = true;
      continue;
    }
    cudnnBackendDestroyDescriptor(cfgs[i]);
  }
  if (st != CUDNN_STATUS_SUCCESS || !kept) {
    if (plan) cudnnBackendDestroyDescriptor(plan);
    return st != CUDNN_STATUS_SUCCESS ? st : CUDNN_STATUS_NOT_SUPPORTED;
  }
  p->plan = plan;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t dnn_graph_build(cudnnHandle_t h, const DnnGraphSpec* s, DnnGraphPlan** out,
                              const char** what) {
  *out = NULL;
  *what = "allocating the plan";
  if (s->rank < 4 || s->rank > 5 || s->sp != s->rank - 2) return CUDNN_STATUS_BAD_PARAM;
  DnnGraphPlan* p = calloc(1, sizeof *p);
  if (!p) return CUDNN_STATUS_ALLOC_FAILED;
  p->bias = s->bias;
  p->z = s->z;
  cudnnBackendDescriptor_t x = NULL, w = NULL, y = NULL, b = NULL, z = NULL, conv = NULL;
  cudnnBackendDescriptor_t conv_op = NULL;
  cudnnBackendDescriptor_t ops[4];
  int n_ops = 0;
  int n_steps = (s->z ? 1 : 0) + (s->bias ? 1 : 0) + (s->relu ? 1 : 0);
  int64_t bdims[5] = {1, s->y[1], 1, 1, 1};
  *what = "tensor descriptors";
  cudnnStatus_t st = make_tensor(p, &x, s->rank, s->x, UID_X, false);
  if (st == CUDNN_STATUS_SUCCESS) st = make_tensor(p, &w, s->rank, s->w, UID_W, false);
  if (st == CUDNN_STATUS_SUCCESS) st = make_tensor(p, &y, s->rank, s->y, UID_Y, false);
  if (st == CUDNN_STATUS_SUCCESS && s->bias) st = make_tensor(p, &b, s->rank, bdims, UID_B, false);
  if (st == CUDNN_STATUS_SUCCESS && s->z) st = make_tensor(p, &z, s->rank, s->y, UID_Z, false);
  /* The convolution descriptor: cross-correlation in float32, symmetric pads. */
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t cmode = CUDNN_CROSS_CORRELATION;
  const int64_t sp = s->sp;
  if (st == CUDNN_STATUS_SUCCESS) {
    *what = "the convolution descriptor";
    st = create_desc(p, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv);
  }
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1,
                                  &comp);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
                                  CUDNN_TYPE_CONVOLUTION_MODE, 1, &cmode);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1,
                                  &sp);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, sp,
                                  s->pad);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, sp,
                                  s->pad);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, sp,
                                  s->stride);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, sp,
                                  s->dil);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(conv);
  /* conv(x, w) -> t0: y itself when nothing follows, else a virtual tensor;
   * each pointwise step likewise writes y when it is the last. The group
   * count follows from X's channels over W's input channels. */
  cudnnBackendDescriptor_t cur = y;
  int64_t next_uid = UID_T0;
  if (st == CUDNN_STATUS_SUCCESS && n_steps > 0) {
    *what = "tensor descriptors";
    st = make_tensor(p, &cur, s->rank, s->y, next_uid++, true);
  }
  const float one = 1.0f, zero = 0.0f;
  if (st == CUDNN_STATUS_SUCCESS) {
    *what = "the convolution operation";
    st = create_desc(p, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &conv_op);
  }
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cur);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                  CUDNN_TYPE_FLOAT, 1, &one);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                                  CUDNN_TYPE_FLOAT, 1, &zero);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(conv_op);
  if (st == CUDNN_STATUS_SUCCESS) ops[n_ops++] = conv_op;
  /* The epilogue in the order of the separate passes: + z, + b, Relu. */
  cudnnPointwiseMode_t modes[3];
  cudnnBackendDescriptor_t operands[3];
  int n_pw = 0;
  if (s->z) {
    modes[n_pw] = CUDNN_POINTWISE_ADD;
    operands[n_pw++] = z;
  }
  if (s->bias) {
    modes[n_pw] = CUDNN_POINTWISE_ADD;
    operands[n_pw++] = b;
  }
  if (s->relu) {
    modes[n_pw] = CUDNN_POINTWISE_RELU_FWD;
    operands[n_pw++] = NULL;
  }
  for (int i = 0; st == CUDNN_STATUS_SUCCESS && i < n_pw; i++) {
    cudnnBackendDescriptor_t dst = y;
    *what = "tensor descriptors";
    if (i + 1 < n_pw) st = make_tensor(p, &dst, s->rank, s->y, next_uid++, true);
    *what = "a pointwise operation";
    if (st == CUDNN_STATUS_SUCCESS)
      st = make_pointwise(p, &ops[n_ops], modes[i], cur, operands[i], dst);
    if (st == CUDNN_STATUS_SUCCESS) n_ops++;
    cur = dst;
  }
  cudnnBackendDescriptor_t graph = NULL;
  if (st == CUDNN_STATUS_SUCCESS) {
    *what = "the operation graph";
    st = create_desc(p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph);
  }
  if (st == CUDNN_STATUS_SUCCESS)
    st =
        cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, n_ops, ops);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(graph);
  /* CUDNN_HEUR_MODE_A ranks the engines for this graph; where none of its
   * list is allowed or finalizes, the fallback mode's list is tried. */
  if (st == CUDNN_STATUS_SUCCESS) {
    st = pick_plan(p, h, s, graph, CUDNN_HEUR_MODE_A, what);
    if (st != CUDNN_STATUS_SUCCESS) st = pick_plan(p, h, s, graph, CUDNN_HEUR_MODE_FALLBACK, what);
  }
  if (st != CUDNN_STATUS_SUCCESS) {
    dnn_graph_free(p);
    return st;
  }
  *what = NULL;
  *out = p;
  return CUDNN_STATUS_SUCCESS;
}

size_t dnn_graph_workspace(const DnnGraphPlan* p) {
  return (size_t)p->workspace;
}

int64_t dnn_graph_engine(const DnnGraphPlan* p) {
  return p->engine;
}

bool dnn_graph_aligned(const void* x, const void* w, const void* b, const void* z, const void* y) {
  const void* ptrs[5] = {x, w, b, z, y};
  for (int i = 0; i < 5; i++)
    if ((uintptr_t)ptrs[i] % GRAPH_ALIGN) return false;
  return true;
}

cudnnStatus_t dnn_graph_execute(cudnnHandle_t h, const DnnGraphPlan* p, const void* x,
                                const void* w, const void* b, const void* z, void* y, void* ws) {
  int64_t uids[5];
  void* ptrs[5];
  int64_t n = 0;
  uids[n] = UID_X;
  ptrs[n++] = (void*)x;
  uids[n] = UID_W;
  ptrs[n++] = (void*)w;
  uids[n] = UID_Y;
  ptrs[n++] = y;
  if (p->bias) {
    uids[n] = UID_B;
    ptrs[n++] = (void*)b;
  }
  if (p->z) {
    uids[n] = UID_Z;
    ptrs[n++] = (void*)z;
  }
  cudnnBackendDescriptor_t pack = NULL;
  cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  st =
      cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                  n, ptrs);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                  &ws);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(pack);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendExecute(h, p->plan, pack);
  cudnnBackendDestroyDescriptor(pack);
  return st;
}

void dnn_graph_free(DnnGraphPlan* p) {
  if (!p) return;
  /* The plan first, then what it was built from, newest first. */
  if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
  for (int i = p->n_descs - 1; i >= 0; i--)
    if (p->descs[i]) cudnnBackendDestroyDescriptor(p->descs[i]);
  free(p);
}
