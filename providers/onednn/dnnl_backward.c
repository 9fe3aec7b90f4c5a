/* dnnl_backward.c — the gradient ops of the com.onyx.training domain on
 * oneDNN's backward primitives.
 *
 * Each claimed gradient node is a group of its own (dnnl_capability.c asks
 * dnnl_bwd_match, dnnl_compile hands the group to dnnl_bwd_compile):
 *
 *   ReluGrad, SigmoidGrad, TanhGrad,      eltwise backward (relu on X;
 *   GeluGrad, FastGeluGrad                 logistic and tanh on Y, the
 *                                          *_use_dst_for_bwd forms; gelu_erf,
 *                                          gelu_tanh on X), over the tensor
 *                                          flattened to 1-D
 *   SoftmaxGrad, LogSoftmaxGrad           softmax v2 backward (accurate, log)
 *   ConvGrad                              convolution backward data (dX) and
 *                                          backward weights with bias (dW, dB)
 *   AveragePoolGrad                       pooling v2 backward (avg, with or
 *                                          without the padding in the count)
 *   BatchNormalizationGrad                batch normalization backward (X seen
 *                                          as N x C x S x 1); without mean and
 *                                          inv_std_var a forward-training
 *                                          primitive computes the batch
 *                                          statistics first
 *   LayerNormalizationGrad                layer normalization backward (X seen
 *                                          as rows x width from `axis`)
 *
 * Given statistics arrive as inv_std_var = 1 / sqrt(var + eps); the
 * primitives take the variance, so the plan passes var = 1 / inv^2 with an
 * epsilon of 0, which gives back the same inv. MaxPoolGrad is declined:
 * oneDNN's max pooling backward needs the workspace of its own forward
 * primitive and the node gets ONNX indices and X's shape only.
 *
 * A plan (the primitives for one set of input shapes) is built at compile
 * time when every input shape is static, else on the first run of a shape,
 * and kept for the session. Convolutions let oneDNN choose (blocked) layouts
 * unless the blocked_layout option is off; every tensor the node reads or
 * writes is plain (NCHW, OIHW), and a reorder runs per tensor whose layout
 * differs from the primitive's. */
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "dnnl_ep.h"

#define H            dnnl_host
#define BWD_DOMAIN   "com.onyx.training"
#define BWD_MAX_ARGS 12
#define BWD_MAX_STEP 2
#define BWD_MAX_TMP  4
#define BWD_NIN      5

typedef enum BwdOp { B_ELT, B_SOFTMAX, B_CONV, B_AVGPOOL, B_BN, B_LN } BwdOp;

/* Where a primitive argument's data lives: a node input, a node output, one
 * of the plan's temporaries (kept in the primitive's layout). */
typedef enum ArgKind { K_IN, K_OUT, K_TMP } ArgKind;

typedef struct PArg {
  int arg; /* DNNL_ARG_* */
  ArgKind kind;
  int idx;
  bool out;                    /* written by the primitive */
  dnnl_memory_desc_t user, md; /* plain layout, the primitive's */
  dnnl_primitive_t reorder;    /* user -> md (in) or md -> user (out); NULL when equal */
  size_t off;                  /* the md-layout buffer in the arena when reordered */
} PArg;

typedef struct PStep {
  dnnl_primitive_t prim;
  PArg a[BWD_MAX_ARGS];
  int n;
} PStep;

typedef struct BwdPlan {
  struct BwdPlan* next;
  int64_t key[BWD_NIN][DNNL_MAX_RANK + 1];
  PStep step[BWD_MAX_STEP];
  int n_step;
  bool empty; /* no element to compute: outputs are allocated (zero-filled sums) only */
  int64_t out_dims[3][DNNL_MAX_RANK];
  int out_rank[3];
  size_t out_bytes[3];
  size_t out_off[3]; /* an output that leaves no group output: an arena buffer */
  size_t tmp_off[BWD_MAX_TMP], tmp_bytes[BWD_MAX_TMP];
  size_t arena_bytes;
} BwdPlan;

/* A window's geometry from the attributes: pads begin..., end.... */
typedef struct Geo {
  int64_t kernel[3], strides[3], dil[3], pads[6];
} Geo;

typedef struct Bwd {
  const DnnlEp* ep;
  const OnyxNode* n;
  char* name;
  BwdOp op;
  int alg, fwd_alg; /* eltwise / softmax / pooling algorithm; eltwise forward hint */
  size_t n_in;
  long in_idx[BWD_NIN]; /* group input index of each node input, -1 when absent */
  long out_idx[3];      /* group output index of each node output, -1 when not one */
  bool out_present[3];  /* the node produces the output at all */
  bool stats;           /* BatchNormalizationGrad: mean and inv_std_var given */
  float eps;            /* BatchNormalizationGrad without statistics */
  int64_t axis;         /* SoftmaxGrad / LayerNormalizationGrad */
  Geo geo; /* AveragePoolGrad's window (ConvGrad's is read per plan: W gives the kernel) */
  int64_t group;
  const char* auto_pad; /* NULL for NOTSET */
  pthread_mutex_t lock;
  BwdPlan* plans;
} Bwd;

OnyxStatus* dnnl_bwd_compute(void* state, OnyxKernelContext* ctx);

/* --- Matching ----------------------------------------------------------------------------------
 */

static const OnyxValueInfo* bin(const OnyxNode* n, size_t i) {
  return i < H->node_input_count(n) ? H->node_input(n, i) : NULL;
}

static bool op_is(const OnyxNode* n, const char* op) {
  return !strcmp(H->node_op_type(n), op);
}

bool dnnl_bwd_is(const OnyxNode* n) {
  const char* d = H->node_domain(n);
  return d && !strcmp(d, BWD_DOMAIN);
}

static bool f32_or_absent(const OnyxValueInfo* v) {
  return !v || H->value_elem_type(v) == ONYX_ELEM_FLOAT32;
}

/* Ints attribute `name` all equal to `v` (or absent). */
static bool ints_all(const OnyxNode* n, const char* name, int64_t v) {
  size_t count = 0;
  const int64_t* a = H->node_attr_ints(n, name, &count);
  for (size_t i = 0; a && i < count; i++)
    if (a[i] != v) return false;
  return true;
}

bool dnnl_bwd_match(const OnyxNode* n, const char** why) {
  if (op_is(n, "MaxPoolGrad")) {
    *why = "oneDNN's max pooling backward needs the workspace of its own forward primitive; "
           "MaxPoolGrad gets ONNX indices and X's shape only";
    return false;
  }
  static const char* const ops[] = {"ReluGrad",
                                    "SigmoidGrad",
                                    "TanhGrad",
                                    "GeluGrad",
                                    "FastGeluGrad",
                                    "SoftmaxGrad",
                                    "LogSoftmaxGrad",
                                    "ConvGrad",
                                    "AveragePoolGrad",
                                    "BatchNormalizationGrad",
                                    "LayerNormalizationGrad"};
  bool known = false;
  for (size_t i = 0; i < sizeof ops / sizeof *ops && !known; i++)
    known = op_is(n, ops[i]);
  if (!known) {
    *why = "com.onyx.training op not mapped to a oneDNN backward primitive";
    return false;
  }
  bool pool = op_is(n, "AveragePoolGrad");
  for (size_t i = 0; i < H->node_input_count(n); i++)
    if (!(pool && i == 1) && !f32_or_absent(H->node_input(n, i))) {
      *why = "an input is not float32 (this provider takes float32 only)";
      return false;
    }
  for (size_t i = 0; i < H->node_output_count(n); i++)
    if (!f32_or_absent(H->node_output(n, i))) {
      *why = "an output is not float32 (this provider takes float32 only)";
      return false;
    }
  if (H->node_input_count(n) < 2 || !bin(n, 0) || !bin(n, 1)) {
    *why = "a required input is absent";
    return false;
  }
  if (op_is(n, "SoftmaxGrad") || op_is(n, "LogSoftmaxGrad")) {
    int32_t r = H->value_rank(bin(n, 0));
    if (r < 1 || r > DNNL_MAX_RANK) {
      *why = "dY's rank is unknown, 0 or above 6";
      return false;
    }
    int64_t axis = H->node_attr_int(n, "axis", -1);
    if (axis < -r || axis >= r) {
      *why = "axis out of range for dY's rank";
      return false;
    }
  }
  if (op_is(n, "ConvGrad")) {
    int32_t r = H->value_rank(bin(n, 1));
    if (r < 3 || r > 5 || !bin(n, 2) || H->value_rank(bin(n, 2)) != r) {
      *why = "X's rank is not 3, 4 or 5 (or unknown), or W's rank differs";
      return false;
    }
    if (H->node_attr_int(n, "group", 1) < 1) {
      *why = "group below 1";
      return false;
    }
  }
  if (pool) {
    int32_t r = H->value_rank(bin(n, 0));
    if (r < 3 || r > 5) {
      *why = "dY's rank is not 3, 4 or 5 (or unknown)";
      return false;
    }
    if (H->node_attr_int(n, "ceil_mode", 0)) {
      *why = "ceil_mode 1";
      return false;
    }
    if (!ints_all(n, "dilations", 1)) {
      *why = "dilated average pooling";
      return false;
    }
  }
  if (op_is(n, "BatchNormalizationGrad")) {
    if (!bin(n, 2) || !bin(n, 3) != !bin(n, 4)) {
      *why = "scale absent, or only one of mean and inv_std_var given";
      return false;
    }
  }
  if (op_is(n, "LayerNormalizationGrad")) {
    for (size_t i = 2; i < 5; i++)
      if (!bin(n, i)) {
        *why = "scale, mean and inv_std_var are required";
        return false;
      }
  }
  return true;
}

/* --- Helpers -----------------------------------------------------------------------------------
 */

static OnyxStatus* chk(const Bwd* b, dnnl_status_t s, const char* what) {
  return s == dnnl_success ? NULL : dnnl_fail(b->n, s, what);
}

static void md_plain(dnnl_memory_desc_t* md, int rank, const int64_t* dims) {
  dnnl_dims_t d, strides;
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    d[i] = dims[i];
    strides[i] = s;
    s *= dims[i] ? dims[i] : 1;
  }
  dnnl_memory_desc_init_by_strides(md, rank, d, dnnl_f32, strides);
}

static void md_any(dnnl_memory_desc_t* md, int rank, const int64_t* dims) {
  dnnl_dims_t d;
  for (int i = 0; i < rank; i++)
    d[i] = dims[i];
  dnnl_memory_desc_init_by_tag(md, rank, d, dnnl_f32, dnnl_format_tag_any);
}

static size_t up64(size_t n) {
  return (n + 63) & ~(size_t)63;
}

static size_t elems(const int64_t* d, int r) {
  size_t n = 1;
  for (int i = 0; i < r; i++)
    n *= (size_t)d[i];
  return n;
}

static void plan_free(BwdPlan* p) {
  for (int s = 0; s < p->n_step; s++) {
    if (p->step[s].prim) dnnl_primitive_destroy(p->step[s].prim);
    for (int k = 0; k < p->step[s].n; k++)
      if (p->step[s].a[k].reorder) dnnl_primitive_destroy(p->step[s].a[k].reorder);
  }
  free(p);
}

static void bwd_release(void* state) {
  Bwd* b = state;
  if (!b) return;
  for (BwdPlan* p = b->plans; p;) {
    BwdPlan* next = p->next;
    plan_free(p);
    p = next;
  }
  pthread_mutex_destroy(&b->lock);
  free(b->name);
  free(b);
}

/* --- Compile ------------------------------------------------------------------------------------
 */

static void read_geometry(const OnyxNode* n, Geo* g, int sp, const int64_t* wdims) {
  size_t count = 0;
  const int64_t* v;
  for (int i = 0; i < sp; i++) {
    g->kernel[i] = wdims ? wdims[2 + i] : 1;
    g->strides[i] = g->dil[i] = 1;
    g->pads[i] = g->pads[sp + i] = 0;
  }
  if ((v = H->node_attr_ints(n, "kernel_shape", &count)) && count == (size_t)sp)
    for (int i = 0; i < sp; i++)
      g->kernel[i] = v[i];
  if ((v = H->node_attr_ints(n, "strides", &count)) && count == (size_t)sp)
    for (int i = 0; i < sp; i++)
      g->strides[i] = v[i];
  if ((v = H->node_attr_ints(n, "dilations", &count)) && count == (size_t)sp)
    for (int i = 0; i < sp; i++)
      g->dil[i] = v[i];
  if ((v = H->node_attr_ints(n, "pads", &count)) && count == (size_t)(2 * sp))
    for (int i = 0; i < 2 * sp; i++)
      g->pads[i] = v[i];
}

/* Kernel, strides and dilations of at least 1, pads of at least 0, each
 * below 2^31 (so that the window arithmetic below cannot overflow with dims
 * below 2^31 either). */
static bool geo_ok(const Geo* g, int sp) {
  const int64_t big = (int64_t)1 << 31;
  for (int i = 0; i < sp; i++) {
    if (g->kernel[i] < 1 || g->kernel[i] >= big || g->strides[i] < 1 || g->strides[i] >= big ||
        g->dil[i] < 1 || g->dil[i] >= big)
      return false;
    if (g->pads[i] < 0 || g->pads[i] >= big || g->pads[sp + i] < 0 || g->pads[sp + i] >= big)
      return false;
  }
  return true;
}

/* Spatial dims below 2^31 (see geo_ok). */
static bool dims_ok(const int64_t* d, int n) {
  for (int i = 0; i < n; i++)
    if (d[i] < 0 || d[i] >= ((int64_t)1 << 31)) return false;
  return true;
}

/* Pads for auto_pad SAME_* / VALID given the input spatial dims (geo_ok
 * and dims_ok hold). */
static void resolve_pads(const Bwd* b, const Geo* g, int sp, const int64_t* in, int64_t* pads) {
  memcpy(pads, g->pads, (size_t)(2 * sp) * sizeof *pads);
  if (!b->auto_pad) return;
  for (int i = 0; i < sp; i++) {
    if (!strcmp(b->auto_pad, "VALID")) {
      pads[i] = pads[sp + i] = 0;
      continue;
    }
    int64_t out = (in[i] + g->strides[i] - 1) / g->strides[i];
    int64_t total = (out - 1) * g->strides[i] + (g->kernel[i] - 1) * g->dil[i] + 1 - in[i];
    if (total < 0) total = 0;
    bool upper = !strcmp(b->auto_pad, "SAME_UPPER");
    pads[i] = upper ? total / 2 : total - total / 2;
    pads[sp + i] = total - pads[i];
  }
}

/* The shapes a plan is built for: per node input, rank then dims (for
 * AveragePoolGrad's X_shape: its values). */
typedef struct Shapes {
  int rank[BWD_NIN];
  int64_t dims[BWD_NIN][DNNL_MAX_RANK];
  bool present[BWD_NIN];
} Shapes;

static void make_key(const Shapes* s, int64_t key[BWD_NIN][DNNL_MAX_RANK + 1]) {
  memset(key, 0, sizeof(int64_t) * BWD_NIN * (DNNL_MAX_RANK + 1));
  for (int i = 0; i < BWD_NIN; i++) {
    key[i][0] = s->present[i] ? s->rank[i] : -1;
    for (int k = 0; s->present[i] && k < s->rank[i]; k++)
      key[i][1 + k] = s->dims[i][k];
  }
}

/* Adds an argument to a step. */
static void add(PStep* s, int arg, ArgKind kind, int idx, bool out, const dnnl_memory_desc_t* user,
                const_dnnl_primitive_desc_t pd, dnnl_query_t q, int qi) {
  PArg* a = &s->a[s->n++];
  a->arg = arg;
  a->kind = kind;
  a->idx = idx;
  a->out = out;
  a->user = *user;
  const dnnl_memory_desc_t* m = pd ? dnnl_primitive_desc_query_md(pd, q, qi) : NULL;
  a->md = m ? *m : *user;
}

/* Creates a step's primitive and the reorders its plain tensors need; places
 * the reordered buffers in the arena. */
static OnyxStatus* finish_step(const Bwd* b, BwdPlan* p, PStep* s, dnnl_primitive_desc_t pd) {
  dnnl_engine_t e = (dnnl_engine_t)b->ep->engine;
  OnyxStatus* st = chk(b, dnnl_primitive_create(&s->prim, pd), "primitive creation");
  for (int k = 0; !st && k < s->n; k++) {
    PArg* a = &s->a[k];
    if (a->kind == K_TMP || dnnl_memory_desc_equal(&a->user, &a->md)) continue;
    dnnl_primitive_desc_t rpd = NULL;
    const dnnl_memory_desc_t* from = a->out ? &a->md : &a->user;
    const dnnl_memory_desc_t* to = a->out ? &a->user : &a->md;
    st = chk(b, dnnl_reorder_primitive_desc_create(&rpd, from, e, to, e, NULL), "reorder");
    if (!st) st = chk(b, dnnl_primitive_create(&a->reorder, rpd), "reorder");
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    a->off = p->arena_bytes;
    p->arena_bytes += up64(dnnl_memory_desc_get_size(&a->md));
  }
  return st;
}

static dnnl_primitive_desc_t make_pd(const Bwd* b, const void* desc,
                                     const_dnnl_primitive_desc_t hint, OnyxStatus** st,
                                     const char* what) {
  dnnl_primitive_desc_t pd = NULL;
  if (!*st)
    *st = chk(b, dnnl_primitive_desc_create(&pd, desc, NULL, (dnnl_engine_t)b->ep->engine, hint),
              what);
  return *st ? NULL : pd;
}

static void set_out(BwdPlan* p, int o, int rank, const int64_t* dims) {
  p->out_rank[o] = rank;
  memcpy(p->out_dims[o], dims, (size_t)rank * sizeof *dims);
  p->out_bytes[o] = elems(dims, rank) * sizeof(float);
}

static void add_tmp(BwdPlan* p, int t, size_t bytes) {
  p->tmp_bytes[t] = bytes;
  p->tmp_off[t] = p->arena_bytes;
  p->arena_bytes += up64(bytes);
}

static OnyxStatus* build_elt(const Bwd* b, const Shapes* s, BwdPlan* p) {
  set_out(p, 0, s->rank[0], s->dims[0]);
  int64_t count = (int64_t)elems(s->dims[0], s->rank[0]);
  if (elems(s->dims[1], s->rank[1]) != (size_t)count)
    return dnnl_err(b->n, ONYX_INVALID_ARGUMENT, "dY and its second input differ in size");
  if (!count) {
    p->empty = true;
    return NULL;
  }
  dnnl_memory_desc_t md;
  md_plain(&md, 1, &count);
  dnnl_eltwise_desc_t fd, bd;
  OnyxStatus* st =
      chk(b, dnnl_eltwise_forward_desc_init(&fd, dnnl_forward_training, b->alg, &md, 0, 0),
          "eltwise descriptor");
  if (!st)
    st = chk(b, dnnl_eltwise_backward_desc_init(&bd, b->alg, &md, &md, 0, 0), "eltwise descriptor");
  dnnl_primitive_desc_t fpd = make_pd(b, &fd, NULL, &st, "eltwise forward");
  dnnl_primitive_desc_t bpd = make_pd(b, &bd, fpd, &st, "eltwise backward");
  bool use_dst = b->alg == dnnl_eltwise_logistic_use_dst_for_bwd ||
                 b->alg == dnnl_eltwise_tanh_use_dst_for_bwd;
  PStep* sp = &p->step[p->n_step++];
  add(sp, DNNL_ARG_DIFF_DST, K_IN, 0, false, &md, NULL, 0, 0);
  add(sp, use_dst ? DNNL_ARG_DST : DNNL_ARG_SRC, K_IN, 1, false, &md, NULL, 0, 0);
  add(sp, DNNL_ARG_DIFF_SRC, K_OUT, 0, true, &md, NULL, 0, 0);
  if (!st) st = finish_step(b, p, sp, bpd);
  if (fpd) dnnl_primitive_desc_destroy(fpd);
  if (bpd) dnnl_primitive_desc_destroy(bpd);
  return st;
}

static OnyxStatus* build_softmax(const Bwd* b, const Shapes* s, BwdPlan* p) {
  int r = s->rank[0];
  set_out(p, 0, r, s->dims[0]);
  if (s->rank[1] != r || memcmp(s->dims[0], s->dims[1], (size_t)r * sizeof(int64_t)))
    return dnnl_err(b->n, ONYX_INVALID_ARGUMENT, "dY and Y must have the same shape");
  if (r < 1)
    return dnnl_err(b->n, ONYX_INVALID_ARGUMENT, "dY must have rank 1 to %d", DNNL_MAX_RANK);
  int64_t axis = b->axis < 0 ? b->axis + r : b->axis;
  if (axis < 0 || axis >= r)
    return dnnl_err(b->n, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %d",
                    (long long)b->axis, r);
  if (!elems(s->dims[0], r)) {
    p->empty = true;
    return NULL;
  }
  dnnl_memory_desc_t md;
  md_plain(&md, r, s->dims[0]);
  dnnl_softmax_v2_desc_t fd, bd;
  OnyxStatus* st = chk(
      b, dnnl_softmax_v2_forward_desc_init(&fd, dnnl_forward_training, b->alg, &md, &md, (int)axis),
      "softmax descriptor");
  if (!st)
    st = chk(b, dnnl_softmax_v2_backward_desc_init(&bd, b->alg, &md, &md, &md, (int)axis),
             "softmax descriptor");
  dnnl_primitive_desc_t fpd = make_pd(b, &fd, NULL, &st, "softmax forward");
  dnnl_primitive_desc_t bpd = make_pd(b, &bd, fpd, &st, "softmax backward");
  PStep* sp = &p->step[p->n_step++];
  add(sp, DNNL_ARG_DIFF_DST, K_IN, 0, false, &md, NULL, 0, 0);
  add(sp, DNNL_ARG_DST, K_IN, 1, false, &md, NULL, 0, 0);
  add(sp, DNNL_ARG_DIFF_SRC, K_OUT, 0, true, &md, NULL, 0, 0);
  if (!st) st = finish_step(b, p, sp, bpd);
  if (fpd) dnnl_primitive_desc_destroy(fpd);
  if (bpd) dnnl_primitive_desc_destroy(bpd);
  return st;
}

/* The output length of a window over `in` (geo_ok and dims_ok hold: no
 * overflow); below 1 when the window does not fit. */
static int64_t win_out(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pl, int64_t pr) {
  int64_t span = in + pl + pr - ((k - 1) * d + 1);
  return span < 0 ? 0 : span / s + 1;
}

static OnyxStatus* build_avgpool(const Bwd* b, const Shapes* s, BwdPlan* p) {
  int r = s->rank[0], sp = r - 2;
  if (r < 3 || r > 5 || s->rank[1] != r)
    return dnnl_err(b->n, ONYX_INVALID_ARGUMENT,
                    "dY must have rank 3 to 5 and X_shape hold as many values");
  const int64_t *dy = s->dims[0], *x = s->dims[1];
  size_t total = 1;
  for (int i = 0; i < r; i++)
    if (x[i] < 0 || __builtin_mul_overflow(total, (size_t)x[i], &total) ||
        total > SIZE_MAX / sizeof(float))
      return dnnl_err(b->n, ONYX_INVALID_ARGUMENT,
                      "X_shape holds a negative dim or its element count overflows");
  if (!geo_ok(&b->geo, sp))
    return dnnl_err(b->n, ONYX_INVALID_MODEL,
                    "kernel_shape, strides or pads out of range (kernel and strides from 1, "
                    "pads from 0, each below 2^31)");
  if (!dims_ok(x + 2, sp))
    return dnnl_err(b->n, ONYX_INVALID_ARGUMENT, "X_shape's spatial dims must be below 2^31");
  const Geo* g = &b->geo;
  int64_t pads[6];
  resolve_pads(b, g, sp, x + 2, pads);
  bool fits = dy[0] == x[0] && dy[1] == x[1];
  for (int i = 0; i < sp; i++)
    fits = fits &&
           dy[2 + i] == win_out(x[2 + i], g->kernel[i], g->strides[i], 1, pads[i], pads[sp + i]);
  if (!fits)
    return dnnl_err(b->n, ONYX_INVALID_ARGUMENT,
                    "dY's shape is not the pooled shape of X_shape with these attributes");
  set_out(p, 0, r, x);
  if (!elems(x, r) || !elems(dy, r)) {
    p->empty = true; /* dX zero-filled */
    return NULL;
  }
  dnnl_memory_desc_t xmd, ymd;
  md_plain(&xmd, r, x);
  md_plain(&ymd, r, dy);
  dnnl_dims_t st_, k_, d_, pl_, pr_;
  for (int i = 0; i < sp; i++) {
    st_[i] = g->strides[i];
    k_[i] = g->kernel[i];
    d_[i] = 0;
    pl_[i] = pads[i];
    pr_[i] = pads[sp + i];
  }
  dnnl_pooling_v2_desc_t fd, bd;
  OnyxStatus* st = chk(b,
                       dnnl_pooling_v2_forward_desc_init(&fd, dnnl_forward_training, b->alg, &xmd,
                                                         &ymd, st_, k_, d_, pl_, pr_),
                       "pooling descriptor");
  if (!st)
    st = chk(b, dnnl_pooling_v2_backward_desc_init(&bd, b->alg, &xmd, &ymd, st_, k_, d_, pl_, pr_),
             "pooling descriptor");
  dnnl_primitive_desc_t fpd = make_pd(b, &fd, NULL, &st, "pooling forward");
  dnnl_primitive_desc_t bpd = make_pd(b, &bd, fpd, &st, "pooling backward");
  PStep* s0 = &p->step[p->n_step++];
  add(s0, DNNL_ARG_DIFF_DST, K_IN, 0, false, &ymd, NULL, 0, 0);
  add(s0, DNNL_ARG_DIFF_SRC, K_OUT, 0, true, &xmd, NULL, 0, 0);
  if (!st) st = finish_step(b, p, s0, bpd);
  if (fpd) dnnl_primitive_desc_destroy(fpd);
  if (bpd) dnnl_primitive_desc_destroy(bpd);
  return st;
}

static OnyxStatus* build_conv(const Bwd* b, const Shapes* s, BwdPlan* p) {
  int r = s->rank[1], sp = r - 2;
  const int64_t *dy = s->dims[0], *x = s->dims[1], *w = s->dims[2];
  if (r < 3 || r > 5 || s->rank[0] != r || s->rank[2] != r)
    return dnnl_err(b->n, ONYX_INVALID_ARGUMENT, "dY, X and W must all have rank 3, 4 or 5");
  int64_t g = b->group, oc = w[0], ic = 0;
  if (__builtin_mul_overflow(w[1], g, &ic) || x[1] != ic || oc % g || dy[0] != x[0] || dy[1] != oc)
    return dnnl_err(b->n, ONYX_INVALID_ARGUMENT,
                    "X [%lld channels], W [%lld, %lld, ...] and dY [%lld channels] do not fit "
                    "group %lld",
                    (long long)x[1], (long long)w[0], (long long)w[1], (long long)dy[1],
                    (long long)g);
  Geo geo;
  read_geometry(b->n, &geo, sp, w);
  if (!geo_ok(&geo, sp))
    return dnnl_err(b->n, ONYX_INVALID_MODEL,
                    "kernel_shape, strides, dilations or pads out of range (from 1, pads from "
                    "0, each below 2^31)");
  if (!dims_ok(x + 2, sp))
    return dnnl_err(b->n, ONYX_INVALID_ARGUMENT, "X's spatial dims must be below 2^31");
  int64_t pads[6];
  resolve_pads(b, &geo, sp, x + 2, pads);
  bool fits = true;
  for (int i = 0; i < sp; i++)
    fits =
        fits && geo.kernel[i] == w[2 + i] && geo.strides[i] > 0 && geo.dil[i] > 0 &&
        dy[2 + i] == win_out(x[2 + i], w[2 + i], geo.strides[i], geo.dil[i], pads[i], pads[sp + i]);
  if (!fits)
    return dnnl_err(b->n, ONYX_INVALID_ARGUMENT,
                    "dY's shape is not the convolution of X and W with these attributes");
  set_out(p, 0, r, x);
  set_out(p, 1, r, w);
  set_out(p, 2, 1, &oc);
  if (!elems(x, r) || !elems(dy, r) || !elems(w, r)) {
    p->empty = true;
    return NULL;
  }
  /* Weights with groups: [g, oc/g, ic/g, k...], the same memory as OIHW. */
  int64_t gw[6];
  int wr = r;
  if (g > 1) {
    gw[0] = g;
    gw[1] = oc / g;
    memcpy(gw + 2, w + 1, (size_t)(r - 1) * sizeof *gw);
    wr = r + 1;
  } else {
    memcpy(gw, w, (size_t)r * sizeof *gw);
  }
  dnnl_memory_desc_t xu, yu, wu, bu, xa, ya, wa;
  md_plain(&xu, r, x);
  md_plain(&yu, r, dy);
  md_plain(&wu, wr, gw);
  md_plain(&bu, 1, &oc);
  if (b->ep->opt.blocked) {
    md_any(&xa, r, x);
    md_any(&ya, r, dy);
    md_any(&wa, wr, gw);
  } else {
    xa = xu;
    ya = yu;
    wa = wu;
  }
  dnnl_dims_t st_, d_, pl_, pr_;
  for (int i = 0; i < sp; i++) {
    st_[i] = geo.strides[i];
    d_[i] = geo.dil[i] - 1;
    pl_[i] = pads[i];
    pr_[i] = pads[sp + i];
  }
  bool want_dx = b->out_present[0], want_dw = b->out_present[1] || b->out_present[2];
  dnnl_convolution_desc_t fd, dd, wd;
  OnyxStatus* st = chk(b,
                       dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training,
                                                                  dnnl_convolution_direct, &xa, &wa,
                                                                  &bu, &ya, st_, d_, pl_, pr_),
                       "convolution descriptor");
  dnnl_primitive_desc_t fpd = make_pd(b, &fd, NULL, &st, "convolution forward");
  if (want_dx) {
    if (!st)
      st = chk(b,
               dnnl_dilated_convolution_backward_data_desc_init(&dd, dnnl_convolution_direct, &xa,
                                                                &wa, &ya, st_, d_, pl_, pr_),
               "convolution backward data descriptor");
    dnnl_primitive_desc_t pd = make_pd(b, &dd, fpd, &st, "convolution backward data");
    PStep* s0 = &p->step[p->n_step++];
    if (pd) {
      add(s0, DNNL_ARG_DIFF_DST, K_IN, 0, false, &yu, pd, dnnl_query_diff_dst_md, 0);
      add(s0, DNNL_ARG_WEIGHTS, K_IN, 2, false, &wu, pd, dnnl_query_weights_md, 0);
      add(s0, DNNL_ARG_DIFF_SRC, K_OUT, 0, true, &xu, pd, dnnl_query_diff_src_md, 0);
      st = finish_step(b, p, s0, pd);
      dnnl_primitive_desc_destroy(pd);
    }
  }
  if (want_dw) {
    if (!st)
      st = chk(b,
               dnnl_dilated_convolution_backward_weights_desc_init(
                   &wd, dnnl_convolution_direct, &xa, &wa, &bu, &ya, st_, d_, pl_, pr_),
               "convolution backward weights descriptor");
    dnnl_primitive_desc_t pd = make_pd(b, &wd, fpd, &st, "convolution backward weights");
    PStep* s1 = &p->step[p->n_step++];
    if (pd) {
      add(s1, DNNL_ARG_SRC, K_IN, 1, false, &xu, pd, dnnl_query_src_md, 0);
      add(s1, DNNL_ARG_DIFF_DST, K_IN, 0, false, &yu, pd, dnnl_query_diff_dst_md, 0);
      add(s1, DNNL_ARG_DIFF_WEIGHTS, K_OUT, 1, true, &wu, pd, dnnl_query_diff_weights_md, 0);
      add(s1, DNNL_ARG_DIFF_BIAS, K_OUT, 2, true, &bu, pd, dnnl_query_diff_weights_md, 1);
      st = finish_step(b, p, s1, pd);
      dnnl_primitive_desc_destroy(pd);
    }
  }
  if (fpd) dnnl_primitive_desc_destroy(fpd);
  return st;
}

/* Temporaries of the normalizations. */
enum { T_VAR, T_MEAN, T_SHIFT, T_DST };

static OnyxStatus* build_norm(const Bwd* b, const Shapes* s, BwdPlan* p) {
  int r = s->rank[1];
  const int64_t* x = s->dims[1];
  if (s->rank[0] != r || memcmp(s->dims[0], x, (size_t)r * sizeof *x))
    return dnnl_err(b->n, ONYX_INVALID_ARGUMENT, "dY and X must have the same shape");
  bool bn = b->op == B_BN;
  int64_t data[4], n_stat, n_scale;
  int data_rank;
  if (bn) {
    if (r < 2) return dnnl_err(b->n, ONYX_INVALID_ARGUMENT, "X must be (N, C, ...), not %d-D", r);
    data[0] = x[0];
    data[1] = x[1];
    /* N x C x S x 1: oneDNN 2.6 has JIT batch normalization for plain
     * 4-D (nchw) data; for plain 3-D (ncw) it falls back to its reference
     * implementation, measured 4 to 20 ms against well under 1 ms on a
     * [32, 16, 16, 16] X. */
    data[2] = (int64_t)elems(x + 2, r - 2);
    data[3] = 1;
    data_rank = 4;
    n_stat = n_scale = x[1];
  } else {
    int64_t axis = b->axis < 0 ? b->axis + r : b->axis;
    if (r < 1 || axis < 0 || axis >= r)
      return dnnl_err(b->n, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %d",
                      (long long)b->axis, r);
    data[0] = (int64_t)elems(x, (int)axis);
    data[1] = (int64_t)elems(x + axis, r - (int)axis);
    data_rank = 2;
    n_stat = data[0];
    n_scale = data[1];
  }
  if (s->rank[2] < 0 || elems(s->dims[2], s->rank[2]) != (size_t)n_scale)
    return dnnl_err(b->n, ONYX_INVALID_ARGUMENT, "scale must hold %lld values", (long long)n_scale);
  for (int i = 3; i < 5; i++)
    if (s->present[i] && elems(s->dims[i], s->rank[i]) != (size_t)n_stat)
      return dnnl_err(b->n, ONYX_INVALID_ARGUMENT, "%s must hold %lld values",
                      i == 3 ? "mean" : "inv_std_var", (long long)n_stat);
  set_out(p, 0, r, x);
  set_out(p, 1, s->rank[2], s->dims[2]);
  set_out(p, 2, s->rank[2], s->dims[2]);
  if (!elems(x, r)) {
    p->empty = true; /* dX empty, dScale and dBias zero */
    return NULL;
  }
  dnnl_memory_desc_t dmd, smd, cmd;
  md_plain(&dmd, data_rank, data);
  md_plain(&smd, 1, &n_stat);
  md_plain(&cmd, 1, &n_scale);
  const unsigned flags = dnnl_use_scale | dnnl_use_shift;
  add_tmp(p, T_VAR, (size_t)n_stat * sizeof(float));
  add_tmp(p, T_SHIFT, (size_t)n_scale * sizeof(float));
  float eps = b->stats ? 0.0f : b->eps;
  OnyxStatus* st = NULL;
  dnnl_primitive_desc_t hint = NULL, bpd = NULL;
  if (bn) {
    dnnl_batch_normalization_desc_t hd, bd;
    st = chk(
        b, dnnl_batch_normalization_forward_desc_init(&hd, dnnl_forward_training, &dmd, eps, flags),
        "batch normalization descriptor");
    if (!st)
      st = chk(
          b,
          dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &dmd, &dmd, eps, flags),
          "batch normalization descriptor");
    hint = make_pd(b, &hd, NULL, &st, "batch normalization forward");
    bpd = make_pd(b, &bd, hint, &st, "batch normalization backward");
    if (!b->stats && !st) { /* the batch statistics first */
      add_tmp(p, T_MEAN, (size_t)n_stat * sizeof(float));
      add_tmp(p, T_DST, elems(data, 3) * sizeof(float));
      dnnl_batch_normalization_desc_t sd;
      st = chk(b,
               dnnl_batch_normalization_forward_desc_init(&sd, dnnl_forward_training, &dmd, eps, 0),
               "batch normalization descriptor");
      dnnl_primitive_desc_t spd = make_pd(b, &sd, NULL, &st, "batch normalization statistics");
      PStep* s0 = &p->step[p->n_step++];
      add(s0, DNNL_ARG_SRC, K_IN, 1, false, &dmd, NULL, 0, 0);
      add(s0, DNNL_ARG_DST, K_TMP, T_DST, true, &dmd, NULL, 0, 0);
      add(s0, DNNL_ARG_MEAN, K_TMP, T_MEAN, true, &smd, NULL, 0, 0);
      add(s0, DNNL_ARG_VARIANCE, K_TMP, T_VAR, true, &smd, NULL, 0, 0);
      if (spd) {
        st = finish_step(b, p, s0, spd);
        dnnl_primitive_desc_destroy(spd);
      }
    }
  } else {
    dnnl_layer_normalization_desc_t hd, bd;
    st = chk(b,
             dnnl_layer_normalization_forward_desc_init(&hd, dnnl_forward_training, &dmd, &smd, eps,
                                                        flags),
             "layer normalization descriptor");
    if (!st)
      st = chk(b,
               dnnl_layer_normalization_backward_desc_init(&bd, dnnl_backward, &dmd, &dmd, &smd,
                                                           eps, flags),
               "layer normalization descriptor");
    hint = make_pd(b, &hd, NULL, &st, "layer normalization forward");
    bpd = make_pd(b, &bd, hint, &st, "layer normalization backward");
  }
  if (!st) {
    PStep* s1 = &p->step[p->n_step++];
    add(s1, DNNL_ARG_SRC, K_IN, 1, false, &dmd, NULL, 0, 0);
    add(s1, DNNL_ARG_DIFF_DST, K_IN, 0, false, &dmd, NULL, 0, 0);
    if (b->stats)
      add(s1, DNNL_ARG_MEAN, K_IN, 3, false, &smd, NULL, 0, 0);
    else
      add(s1, DNNL_ARG_MEAN, K_TMP, T_MEAN, false, &smd, NULL, 0, 0);
    add(s1, DNNL_ARG_VARIANCE, K_TMP, T_VAR, false, &smd, NULL, 0, 0);
    add(s1, DNNL_ARG_SCALE, K_IN, 2, false, &cmd, NULL, 0, 0);
    add(s1, DNNL_ARG_SHIFT, K_TMP, T_SHIFT, false, &cmd, NULL, 0, 0);
    add(s1, DNNL_ARG_DIFF_SRC, K_OUT, 0, true, &dmd, NULL, 0, 0);
    add(s1, DNNL_ARG_DIFF_SCALE, K_OUT, 1, true, &cmd, NULL, 0, 0);
    add(s1, DNNL_ARG_DIFF_SHIFT, K_OUT, 2, true, &cmd, NULL, 0, 0);
    st = finish_step(b, p, s1, bpd);
  }
  if (hint) dnnl_primitive_desc_destroy(hint);
  if (bpd) dnnl_primitive_desc_destroy(bpd);
  return st;
}

/* Builds the plan for shapes `s`; on success *out owns it. */
static OnyxStatus* build_plan(const Bwd* b, const Shapes* s, BwdPlan** out) {
  BwdPlan* p = calloc(1, sizeof *p);
  if (!p) return dnnl_err(b->n, ONYX_OUT_OF_MEMORY, "out of memory");
  make_key(s, p->key);
  OnyxStatus* st = NULL;
  switch (b->op) {
  case B_ELT:
    st = build_elt(b, s, p);
    break;
  case B_SOFTMAX:
    st = build_softmax(b, s, p);
    break;
  case B_AVGPOOL:
    st = build_avgpool(b, s, p);
    break;
  case B_CONV:
    st = build_conv(b, s, p);
    break;
  case B_BN:
  case B_LN:
    st = build_norm(b, s, p);
    break;
  }
  /* Outputs that leave no group output: written into the arena. */
  for (int o = 0; !st && o < 3; o++)
    if (b->out_idx[o] < 0) {
      p->out_off[o] = p->arena_bytes;
      p->arena_bytes += up64(p->out_bytes[o]);
    }
  if (st) {
    plan_free(p);
    return st;
  }
  *out = p;
  return NULL;
}

/* The plan for shapes `s`: found, or built and kept. */
static OnyxStatus* get_plan(Bwd* b, const Shapes* s, BwdPlan** out) {
  int64_t key[BWD_NIN][DNNL_MAX_RANK + 1];
  make_key(s, key);
  pthread_mutex_lock(&b->lock);
  OnyxStatus* st = NULL;
  BwdPlan* p = b->plans;
  while (p && memcmp(p->key, key, sizeof key))
    p = p->next;
  if (!p) {
    st = build_plan(b, s, &p);
    if (!st) {
      p->next = b->plans;
      b->plans = p;
    }
  }
  pthread_mutex_unlock(&b->lock);
  *out = st ? NULL : p;
  return st;
}

/* The node's input shapes from the graph; false when one is not static. */
static bool view_shapes(const Bwd* b, Shapes* s) {
  memset(s, 0, sizeof *s);
  for (size_t i = 0; i < b->n_in && i < BWD_NIN; i++) {
    const OnyxValueInfo* v = bin(b->n, i);
    if (!v) continue;
    s->present[i] = true;
    if (b->op == B_AVGPOOL && i == 1) {
      const OnyxTensor* t = H->value_constant(v);
      if (!t || H->tensor_elem_type(t) != ONYX_ELEM_INT64 || H->tensor_rank(t) != 1 ||
          H->tensor_elem_count(t) > DNNL_MAX_RANK)
        return false;
      s->rank[i] = (int)H->tensor_elem_count(t);
      memcpy(s->dims[i], H->tensor_data(t), (size_t)s->rank[i] * sizeof(int64_t));
      continue;
    }
    int32_t r = H->value_rank(v);
    if (r < 0 || r > DNNL_MAX_RANK) return false;
    const int64_t* d = H->value_dims(v);
    for (int32_t k = 0; k < r; k++)
      if (d[k] < 0) return false;
    s->rank[i] = r;
    memcpy(s->dims[i], d, (size_t)r * sizeof *d);
  }
  return true;
}

OnyxStatus* dnnl_bwd_compile(const DnnlEp* ep, const OnyxGraphView* v, OnyxCompiledKernel* out) {
  const OnyxNode* n = H->graph_node(v, 0);
  Bwd* b = calloc(1, sizeof *b);
  if (!b) return dnnl_err(n, ONYX_OUT_OF_MEMORY, "out of memory");
  pthread_mutex_init(&b->lock, NULL);
  b->ep = ep;
  b->n = n;
  b->n_in = H->node_input_count(n);
  OnyxStatus* st = NULL;
  const char* why = NULL;
  if (H->graph_node_count(v) != 1 || !dnnl_bwd_match(n, &why))
    st = dnnl_err(n, ONYX_INVALID_ARGUMENT, "not a gradient group of this provider: %s",
                  why ? why : "more than one node");
  if (!st && b->n_in > BWD_NIN) st = dnnl_err(n, ONYX_INVALID_MODEL, "too many inputs");
  for (size_t i = 0; !st && i < BWD_NIN; i++) {
    b->in_idx[i] = -1;
    const OnyxValueInfo* x = i < b->n_in ? H->node_input(n, i) : NULL;
    for (size_t k = 0; x && k < H->graph_input_count(v); k++)
      if (H->graph_input(v, k) == x) b->in_idx[i] = (long)k;
    if (x && b->in_idx[i] < 0) st = dnnl_err(n, ONYX_FAIL, "input %zu is not a group input", i);
  }
  for (size_t o = 0; !st && o < 3; o++) {
    b->out_idx[o] = -1;
    const OnyxValueInfo* y = o < H->node_output_count(n) ? H->node_output(n, o) : NULL;
    b->out_present[o] = y != NULL;
    for (size_t k = 0; y && k < H->graph_output_count(v); k++)
      if (H->graph_output(v, k) == y) b->out_idx[o] = (long)k;
  }
  if (!st) {
    const char* op = H->node_op_type(n);
    size_t len = 0;
    b->auto_pad = H->node_attr_string(n, "auto_pad", &len);
    if (b->auto_pad && !strcmp(b->auto_pad, "NOTSET")) b->auto_pad = NULL;
    b->axis = H->node_attr_int(n, "axis", -1);
    b->group = H->node_attr_int(n, "group", 1);
    b->eps = H->node_attr_float(n, "epsilon", 1e-5f);
    if (!strcmp(op, "ReluGrad")) {
      b->op = B_ELT;
      b->alg = dnnl_eltwise_relu;
    } else if (!strcmp(op, "SigmoidGrad")) {
      b->op = B_ELT;
      b->alg = dnnl_eltwise_logistic_use_dst_for_bwd;
    } else if (!strcmp(op, "TanhGrad")) {
      b->op = B_ELT;
      b->alg = dnnl_eltwise_tanh_use_dst_for_bwd;
    } else if (!strcmp(op, "GeluGrad")) {
      b->op = B_ELT;
      b->alg = dnnl_eltwise_gelu_erf;
    } else if (!strcmp(op, "FastGeluGrad")) {
      b->op = B_ELT;
      b->alg = dnnl_eltwise_gelu_tanh;
    } else if (!strcmp(op, "SoftmaxGrad")) {
      b->op = B_SOFTMAX;
      b->alg = dnnl_softmax_accurate;
    } else if (!strcmp(op, "LogSoftmaxGrad")) {
      b->op = B_SOFTMAX;
      b->alg = dnnl_softmax_log;
    } else if (!strcmp(op, "ConvGrad")) {
      b->op = B_CONV;
    } else if (!strcmp(op, "AveragePoolGrad")) {
      b->op = B_AVGPOOL;
      b->alg = H->node_attr_int(n, "count_include_pad", 0) ? dnnl_pooling_avg_include_padding
                                                           : dnnl_pooling_avg_exclude_padding;
      int32_t r = H->value_rank(bin(n, 0));
      read_geometry(n, &b->geo, r - 2, NULL);
    } else if (!strcmp(op, "BatchNormalizationGrad")) {
      b->op = B_BN;
      b->stats = bin(n, 3) != NULL;
      if (!b->stats && !(b->eps >= 0.0f))
        st = dnnl_err(n, ONYX_INVALID_MODEL, "epsilon is %g; it must be >= 0", (double)b->eps);
    } else {
      b->op = B_LN;
      b->stats = true;
    }
  }
  Shapes s;
  if (!st && view_shapes(b, &s)) { /* static shapes: the plan now */
    omp_set_num_threads(ep->threads);
    BwdPlan* p = NULL;
    st = get_plan(b, &s, &p);
  }
  if (!st) {
    char name[256];
    snprintf(name, sizeof name, "onednn_%s", H->node_name(n));
    b->name = strdup(name);
    if (!b->name) st = dnnl_err(n, ONYX_OUT_OF_MEMORY, "out of memory");
  }
  if (st) {
    bwd_release(b);
    return st;
  }
  *out = (OnyxCompiledKernel){
      .struct_size = sizeof *out, .state = b, .compute = dnnl_bwd_compute, .release = bwd_release};
  return NULL;
}

/* --- Running ------------------------------------------------------------------------------------
 */

static OnyxStatus* run_shapes(const Bwd* b, OnyxKernelContext* ctx, Shapes* s) {
  memset(s, 0, sizeof *s);
  for (size_t i = 0; i < b->n_in && i < BWD_NIN; i++) {
    if (b->in_idx[i] < 0) continue;
    const OnyxTensor* t = H->ctx_input(ctx, (size_t)b->in_idx[i]);
    if (!t) continue;
    s->present[i] = true;
    size_t r = H->tensor_rank(t);
    if (b->op == B_AVGPOOL && i == 1) {
      size_t cnt = H->tensor_elem_count(t);
      if (H->tensor_elem_type(t) != ONYX_ELEM_INT64 || r != 1 || cnt > DNNL_MAX_RANK)
        return dnnl_err(b->n, ONYX_INVALID_ARGUMENT,
                        "X_shape must be a 1-D int64 tensor of at most %d values", DNNL_MAX_RANK);
      s->rank[i] = (int)cnt;
      memcpy(s->dims[i], H->tensor_data(t), cnt * sizeof(int64_t));
      continue;
    }
    if (H->tensor_elem_type(t) != ONYX_ELEM_FLOAT32)
      return dnnl_err(b->n, ONYX_INVALID_ARGUMENT, "input %zu is not float32", i);
    if (r > DNNL_MAX_RANK)
      return dnnl_err(b->n, ONYX_INVALID_ARGUMENT, "input %zu has rank above %d", i, DNNL_MAX_RANK);
    s->rank[i] = (int)r;
    memcpy(s->dims[i], H->tensor_dims(t), r * sizeof(int64_t));
  }
  return NULL;
}

static OnyxStatus* exec(const Bwd* b, dnnl_primitive_t prim, dnnl_stream_t s, int n,
                        const dnnl_exec_arg_t* args, const char* what) {
  return chk(b, dnnl_primitive_execute(prim, s, n, args), what);
}

static OnyxStatus* reorder(const Bwd* b, dnnl_primitive_t r, const dnnl_memory_desc_t* from,
                           const void* src, const dnnl_memory_desc_t* to, void* dst,
                           dnnl_stream_t s) {
  dnnl_engine_t e = (dnnl_engine_t)b->ep->engine;
  dnnl_memory_t m0 = NULL, m1 = NULL;
  OnyxStatus* st = chk(b, dnnl_memory_create(&m0, from, e, (void*)src), "memory");
  if (!st) st = chk(b, dnnl_memory_create(&m1, to, e, dst), "memory");
  if (!st) {
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, m0}, {DNNL_ARG_TO, m1}};
    st = exec(b, r, s, 2, args, "reorder");
  }
  if (m0) dnnl_memory_destroy(m0);
  if (m1) dnnl_memory_destroy(m1);
  return st;
}

static OnyxStatus* run_step(const Bwd* b, const PStep* sp, char* arena, const void* const* ins,
                            void* const* outs, char* const* tmps, dnnl_stream_t s) {
  dnnl_engine_t e = (dnnl_engine_t)b->ep->engine;
  dnnl_memory_t mem[BWD_MAX_ARGS] = {0};
  dnnl_exec_arg_t args[BWD_MAX_ARGS];
  OnyxStatus* st = NULL;
  int n = 0;
  for (int k = 0; !st && k < sp->n; k++) {
    const PArg* a = &sp->a[k];
    void* user = a->kind == K_IN    ? (void*)ins[a->idx]
                 : a->kind == K_OUT ? outs[a->idx]
                                    : tmps[a->idx];
    void* data = a->reorder ? arena + a->off : user;
    if (a->reorder && !a->out) st = reorder(b, a->reorder, &a->user, user, &a->md, data, s);
    if (!st) st = chk(b, dnnl_memory_create(&mem[n], &a->md, e, data), "memory");
    if (!st) args[n] = (dnnl_exec_arg_t){a->arg, mem[n]};
    n++;
  }
  if (!st) st = exec(b, sp->prim, s, n, args, "backward primitive");
  for (int k = 0; !st && k < sp->n; k++) {
    const PArg* a = &sp->a[k];
    if (!a->reorder || !a->out) continue;
    void* user = a->kind == K_OUT ? outs[a->idx] : tmps[a->idx];
    st = reorder(b, a->reorder, &a->md, arena + a->off, &a->user, user, s);
  }
  if (!st) st = chk(b, dnnl_stream_wait(s), "stream wait");
  for (int k = 0; k < n; k++)
    if (mem[k]) dnnl_memory_destroy(mem[k]);
  return st;
}

OnyxStatus* dnnl_bwd_compute(void* state, OnyxKernelContext* ctx) {
  Bwd* b = state;
  omp_set_num_threads(b->ep->threads);
  Shapes sh;
  OnyxStatus* st = run_shapes(b, ctx, &sh);
  BwdPlan* p = NULL;
  if (!st) st = get_plan(b, &sh, &p);
  if (st) return st;
  char* arena = p->arena_bytes ? H->ctx_scratch(ctx, p->arena_bytes) : NULL;
  if (p->arena_bytes && !arena) return dnnl_err(b->n, ONYX_OUT_OF_MEMORY, "out of memory");
  const void* ins[BWD_NIN] = {0};
  void* outs[3] = {0};
  char* tmps[BWD_MAX_TMP] = {0};
  for (int i = 0; i < BWD_NIN; i++)
    if (b->in_idx[i] >= 0) {
      const OnyxTensor* t = H->ctx_input(ctx, (size_t)b->in_idx[i]);
      ins[i] = t ? H->tensor_data(t) : NULL;
    }
  for (int o = 0; !st && o < 3; o++) {
    if (b->out_idx[o] >= 0) {
      OnyxTensor* t = NULL;
      st = H->ctx_output(ctx, (size_t)b->out_idx[o], p->out_dims[o], (size_t)p->out_rank[o], &t);
      if (!st) outs[o] = H->tensor_mutable_data(t);
    } else if (p->out_bytes[o]) {
      outs[o] = arena + p->out_off[o];
    }
    if (!st && p->empty && outs[o]) memset(outs[o], 0, p->out_bytes[o]);
  }
  if (st || p->empty) return st;
  for (int t = 0; t < BWD_MAX_TMP; t++)
    if (p->tmp_bytes[t]) tmps[t] = arena + p->tmp_off[t];
  /* Normalizations: var = 1 / inv^2 from the given statistics; a zero shift. */
  if ((b->op == B_BN || b->op == B_LN)) {
    memset(tmps[T_SHIFT], 0, p->tmp_bytes[T_SHIFT]);
    if (b->stats) {
      const float* inv = ins[4];
      float* var = (float*)tmps[T_VAR];
      for (size_t i = 0; i < p->tmp_bytes[T_VAR] / sizeof(float); i++)
        var[i] = (float)(1.0 / ((double)inv[i] * (double)inv[i]));
    }
  }
  dnnl_stream_t s = NULL;
  st = chk(b, dnnl_stream_create(&s, (dnnl_engine_t)b->ep->engine, dnnl_stream_default_flags),
           "stream");
  for (int k = 0; !st && k < p->n_step; k++)
    st = run_step(b, &p->step[k], arena, ins, outs, tmps, s);
  if (s) dnnl_stream_destroy(s);
  return st;
}
