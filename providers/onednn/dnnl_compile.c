/* dnnl_compile.c — turns a claimed group into oneDNN primitives.
 *
 * A group is one or more *stages* (a chain: dnnl_capability.c merges
 * consecutive Conv and pooling groups). compile re-derives each stage's
 * pattern from the group's nodes (dnnl_match over the group's own view, in
 * graph order), folds what is constant (a BatchNormalization into the Conv's
 * weights and bias; Gemm's alpha and beta into B and C) and returns a kernel
 * whose state keeps a cache of "plans", one per set of variable input shapes.
 * A plan holds, per stage, the primitive (with its post-ops), the weights
 * already reordered into the layout the primitive chose, and the reorders it
 * needs: from plain layout for the group's inputs, to plain layout for the
 * group's outputs, and between stages only where the producer's layout is not
 * the one the consumer's primitive wants. Values passed from stage to stage
 * stay in the producer's (blocked) layout in per-run scratch buffers. Plans
 * are built on first use of a shape and shared by concurrent runs (a mutex
 * guards the cache only); with the session's compiled-group cache, the plan
 * of static input shapes is built at session creation instead (the end of
 * this file).
 *
 * Threads: Debian's oneDNN uses OpenMP; each compute sets the calling
 * thread's OpenMP team size to the session's intra-op thread count, so the
 * session never runs more busy threads than it was given (the host pool's
 * workers sleep while a oneDNN primitive runs). */
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <oneapi/dnnl/dnnl.h>

#include "dnnl_ep.h"

#define H      dnnl_host
#define MAX_IN DNNL_MAX_CHAIN_IN

OnyxStatus* dnnl_group_compute(void* state, OnyxKernelContext* ctx);

/* --- Plans --------------------------------------------------------------------------------------
 */

/* One stage's primitives for one set of input shapes. */
typedef struct Plan {
  dnnl_primitive_t prim;
  /* in_md: how the data input arrives (plain for a group input, the producer
   * stage's dst_md for an internal one); src_md, dst_md: the primitive's;
   * user_dst_md: plain, for a group output. */
  dnnl_memory_desc_t src_md, src1_md, wei_md, dst_md, in_md, user_dst_md, post_md[DNNL_MAX_POST];
  /* NULL where the layouts agree. dst_reorder exists only for a group output. */
  dnnl_primitive_t src_reorder, dst_reorder;
  /* A residual Add done as oneDNN's "sum" post-op (the primitive adds what the
   * destination holds): its index in the post-ops, or -1; how the residual
   * arrives, and the reorder that loads it into the destination's layout. */
  int sum_post;
  int post_base; /* oneDNN post-op index of post[0]: 1 after the anchor's activation */
  dnnl_memory_desc_t sum_from_md;
  dnnl_primitive_t sum_reorder;
  /* Binary post-op operands made inside the chain: to plain layout. */
  dnnl_memory_desc_t post_from_md[DNNL_MAX_POST];
  dnnl_primitive_t post_reorder[DNNL_MAX_POST];
  void* weights; /* reordered constant weights (owned) */
  /* Weights that are a group input (trained parameters): their plain layout
   * and the reorder into wei_md run on each run, NULL when the primitive
   * takes the plain layout itself. */
  dnnl_memory_desc_t wei_user_md;
  dnnl_primitive_t wei_reorder;
  size_t scratch_bytes, src_bytes, dst_bytes;
  int64_t out_dims[DNNL_MAX_RANK];
  int out_rank;
} Plan;

/* A value a stage reads: group input `in`, or the output of stage `stage`. */
typedef struct Ref {
  long in;
  long stage;
} Ref;

/* One stage: an anchor with what it absorbed. */
typedef struct Group {
  const DnnlEp* ep;
  DnnlPattern p; /* node handles stay valid for the session */
  /* The data input, binary post-op operands (group input or stage output);
   * group input index of the second operand (binary anchor or runtime MatMul
   * B) and LayerNorm scale/bias. */
  Ref x, post_in[DNNL_MAX_POST];
  long y_in, scale_in, shift_in;
  long out_ext;  /* index of the stage's output among the group's outputs, or -1 */
  long last_use; /* the last stage reading the output, or -1 */
  /* Constants prepared at compile time, plain layout: w is the model's own
   * weights, or w_own (owned) when they had to change (a BatchNormalization
   * or Gemm's alpha folded in); bias is owned. */
  const float* w;
  float* w_own;
  int64_t wdims[6];
  int wrank;
  float* bias;
  int64_t n_bias;
  bool b_const; /* MatMul/Gemm: B is constant (in w) */
  /* Conv: group input index of weights / bias that are not constant (a
   * training graph's parameters), or -1 (then w / bias hold them). */
  long w_in, b_in;
  bool trans_b;
  /* Conv/pool geometry from the attributes. */
  int64_t kernel[3], strides[3], dil[3], pads[6], group;
  int spatial;
  const char* auto_pad;
  int pool_alg;
  int64_t softmax_axis;
  float eps;
  int elt_alg;
  float elt_alpha, elt_beta;
  int bin_alg;
} Group;

/* Where a stage's buffers lie in a run's arena (one ctx_scratch per run:
 * the primitives' shared scratchpad, then the stages' outputs and
 * temporaries, placed by lifetime so that dead buffers are reused). */
typedef struct Slot {
  size_t dst_off; /* the stage's output; unused when `direct` */
  size_t tmp_off; /* its temporaries: the reordered input, binary operands */
  bool direct;    /* the stage writes the group output tensor itself */
  bool alias;     /* its output takes its residual's buffer (the residual's last use) */
} Slot;

/* Plans of all stages for one set of variable input shapes. */
typedef struct ChainPlan {
  struct ChainPlan* next;
  int64_t key[MAX_IN][DNNL_MAX_RANK + 1]; /* rank, dims of each variable input */
  size_t max_scratch;                     /* the largest primitive scratchpad */
  size_t arena_bytes;                     /* scratchpad and stage buffers */
  Slot* slot;                             /* one per stage */
  Plan* st[];                             /* one per stage */
} ChainPlan;

/* The kernel's state: the stages in order. */
typedef struct Chain {
  const DnnlEp* ep;
  char* name;
  Group** st;
  size_t n_st;
  size_t n_in;
  long var_in[MAX_IN]; /* group inputs that are not constants: the plan key */
  size_t n_var;
  pthread_mutex_t lock;
  ChainPlan* plans;
} Chain;

static void plan_free(Plan* pl) {
  if (!pl) return;
  if (pl->prim) dnnl_primitive_destroy(pl->prim);
  if (pl->src_reorder) dnnl_primitive_destroy(pl->src_reorder);
  if (pl->dst_reorder) dnnl_primitive_destroy(pl->dst_reorder);
  if (pl->sum_reorder) dnnl_primitive_destroy(pl->sum_reorder);
  if (pl->wei_reorder) dnnl_primitive_destroy(pl->wei_reorder);
  for (int k = 0; k < DNNL_MAX_POST; k++)
    if (pl->post_reorder[k]) dnnl_primitive_destroy(pl->post_reorder[k]);
  free(pl->weights);
  free(pl);
}

static void chain_plan_free(ChainPlan* cp, size_t n_st) {
  if (!cp) return;
  for (size_t k = 0; k < n_st; k++)
    plan_free(cp->st[k]);
  free(cp->slot);
  free(cp);
}

static void stage_free(Group* g) {
  if (!g) return;
  free(g->w_own);
  free(g->bias);
  free(g);
}

static void chain_release(void* state) {
  Chain* c = state;
  if (!c) return;
  for (ChainPlan* cp = c->plans; cp;) {
    ChainPlan* next = cp->next;
    chain_plan_free(cp, c->n_st);
    cp = next;
  }
  pthread_mutex_destroy(&c->lock);
  for (size_t k = 0; k < c->n_st; k++)
    stage_free(c->st[k]);
  free(c->st);
  free(c->name);
  free(c);
}

static long input_index(const OnyxGraphView* v, const OnyxValueInfo* x) {
  for (size_t i = 0, n = H->graph_input_count(v); x && i < n; i++)
    if (H->graph_input(v, i) == x) return (long)i;
  return -1;
}

static const OnyxValueInfo* node_in(const OnyxNode* n, size_t i) {
  return i < H->node_input_count(n) ? H->node_input(n, i) : NULL;
}

static float* const_copy(const OnyxValueInfo* v, size_t* count) {
  const OnyxTensor* t = H->value_constant(v);
  size_t n = H->tensor_elem_count(t);
  float* f = malloc((n ? n : 1) * sizeof *f);
  if (f && n) memcpy(f, H->tensor_data(t), n * sizeof *f);
  *count = n;
  return f;
}

static OnyxStatus* check(const Group* g, dnnl_status_t s, const char* what) {
  return s == dnnl_success ? NULL : dnnl_fail(g->p.anchor, s, what);
}

static void plain_md(dnnl_memory_desc_t* md, int rank, const int64_t* dims) {
  dnnl_dims_t d;
  dnnl_dims_t strides;
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    d[i] = dims[i];
    strides[i] = s;
    s *= dims[i] ? dims[i] : 1;
  }
  dnnl_memory_desc_init_by_strides(md, rank, d, dnnl_f32, strides);
}

static void any_md(dnnl_memory_desc_t* md, int rank, const int64_t* dims) {
  dnnl_dims_t d;
  for (int i = 0; i < rank; i++)
    d[i] = dims[i];
  dnnl_memory_desc_init_by_tag(md, rank, d, dnnl_f32, dnnl_format_tag_any);
}

/* --- Compile-time preparation -------------------------------------------------------------------
 */

static void read_window(Group* g, const OnyxNode* n, int spatial, const int64_t* wdims) {
  size_t count = 0;
  const int64_t* v;
  g->spatial = spatial;
  for (int i = 0; i < spatial; i++) {
    g->kernel[i] = wdims ? wdims[2 + i] : 1;
    g->strides[i] = 1;
    g->dil[i] = 1;
    g->pads[i] = g->pads[spatial + i] = 0;
  }
  if ((v = H->node_attr_ints(n, "kernel_shape", &count)) && count == (size_t)spatial)
    for (int i = 0; i < spatial; i++)
      g->kernel[i] = v[i];
  if ((v = H->node_attr_ints(n, "strides", &count)) && count == (size_t)spatial)
    for (int i = 0; i < spatial; i++)
      g->strides[i] = v[i];
  if ((v = H->node_attr_ints(n, "dilations", &count)) && count == (size_t)spatial)
    for (int i = 0; i < spatial; i++)
      g->dil[i] = v[i];
  if ((v = H->node_attr_ints(n, "pads", &count)) && count == (size_t)(2 * spatial))
    for (int i = 0; i < 2 * spatial; i++)
      g->pads[i] = v[i];
  size_t len = 0;
  g->auto_pad = H->node_attr_string(n, "auto_pad", &len);
  if (g->auto_pad && !strcmp(g->auto_pad, "NOTSET")) g->auto_pad = NULL;
}

static OnyxStatus* prepare_conv(Group* g, const OnyxGraphView* v) {
  const OnyxNode* n = g->p.anchor;
  const OnyxValueInfo* W = node_in(n, 1);
  const OnyxTensor* w = H->value_constant(W);
  g->w_in = g->b_in = -1;
  size_t wr = 0, count = 0;
  const int64_t* wd = NULL;
  if (w) {
    wr = H->tensor_rank(w);
    wd = H->tensor_dims(w);
  } else { /* a trained parameter: a group input of static shape (dnnl_match) */
    g->w_in = input_index(v, W);
    int32_t r = H->value_rank(W);
    wr = r < 0 ? 0 : (size_t)r;
    wd = H->value_dims(W);
    for (size_t i = 0; i < wr; i++)
      if (wd[i] < 1) wr = 0; /* refused below */
    if (g->w_in < 0) return dnnl_err(n, ONYX_FAIL, "the weights are made inside the group");
    if (g->p.bn)
      return dnnl_err(n, ONYX_FAIL, "a BatchNormalization folds only into constant weights");
  }
  g->group = H->node_attr_int(n, "group", 1);
  if (wr < 3 || wr > 5 || g->group < 1 || wd[0] % g->group)
    return dnnl_err(n, ONYX_INVALID_MODEL, "weights of rank %zu / group %lld do not fit", wr,
                    (long long)g->group);
  if (w) {
    count = H->tensor_elem_count(w);
    if (g->p.bn)
      g->w = g->w_own = const_copy(node_in(n, 1), &count);
    else
      g->w = H->tensor_data(w);
  }
  g->wrank = (int)wr;
  memcpy(g->wdims, wd, wr * sizeof *wd);
  int64_t oc = wd[0];
  g->n_bias = oc;
  g->bias = calloc((size_t)oc, sizeof *g->bias);
  if ((g->p.bn && !g->w_own) || !g->bias) return dnnl_err(n, ONYX_OUT_OF_MEMORY, "out of memory");
  if (node_in(n, 2) && !H->value_constant(node_in(n, 2))) {
    g->b_in = input_index(v, node_in(n, 2));
    if (g->b_in < 0 || g->p.bn)
      return dnnl_err(n, ONYX_FAIL,
                      "the bias is made inside the group or meets a folded BatchNormalization");
  } else if (node_in(n, 2)) {
    const OnyxTensor* b = H->value_constant(node_in(n, 2));
    if (H->tensor_elem_count(b) != (size_t)oc)
      return dnnl_err(n, ONYX_INVALID_MODEL, "bias has %zu values for %lld output channels",
                      H->tensor_elem_count(b), (long long)oc);
    memcpy(g->bias, H->tensor_data(b), (size_t)oc * sizeof *g->bias);
  }
  read_window(g, n, (int)wr - 2, wd);
  if (g->p.bn) { /* fold y = (x - mean) * scale / sqrt(var + eps) + b into the weights */
    const OnyxNode* bn = g->p.bn;
    const float* v[4];
    for (int k = 0; k < 4; k++) {
      const OnyxTensor* t = H->value_constant(node_in(bn, (size_t)k + 1));
      if (H->tensor_elem_count(t) != (size_t)oc)
        return dnnl_err(bn, ONYX_INVALID_MODEL, "parameter %d has %zu values for %lld channels",
                        k + 1, H->tensor_elem_count(t), (long long)oc);
      v[k] = H->tensor_data(t);
    }
    float eps = H->node_attr_float(bn, "epsilon", 1e-5f);
    size_t per = count / (size_t)oc;
    for (int64_t c = 0; c < oc; c++) {
      double f = (double)v[0][c] / sqrt((double)v[3][c] + eps);
      for (size_t k = 0; k < per; k++)
        g->w_own[(size_t)c * per + k] = (float)(g->w_own[(size_t)c * per + k] * f);
      g->bias[c] = (float)((g->bias[c] - v[2][c]) * f + v[1][c]);
    }
  }
  return NULL;
}

static OnyxStatus* prepare_matmul(Group* g, const OnyxGraphView* v) {
  const OnyxNode* n = g->p.anchor;
  bool gemm = !strcmp(H->node_op_type(n), "Gemm");
  const OnyxValueInfo* B = node_in(n, 1);
  g->b_const = H->value_constant(B) != NULL;
  if (!g->b_const) {
    g->y_in = input_index(v, B);
    if (g->y_in < 0) return dnnl_err(n, ONYX_FAIL, "B is made inside the group (unsupported)");
    return NULL;
  }
  const OnyxTensor* bt = H->value_constant(B);
  size_t count = 0;
  float alpha = gemm ? H->node_attr_float(n, "alpha", 1.0f) : 1.0f;
  if (alpha != 1.0f) {
    g->w = g->w_own = const_copy(B, &count);
    if (!g->w_own) return dnnl_err(n, ONYX_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; i < count; i++)
      g->w_own[i] *= alpha;
  } else {
    g->w = H->tensor_data(bt);
  }
  g->wrank = (int)H->tensor_rank(bt);
  memcpy(g->wdims, H->tensor_dims(bt), (size_t)g->wrank * sizeof(int64_t));
  g->trans_b = gemm && H->node_attr_int(n, "transB", 0);
  int64_t n_cols = g->trans_b ? g->wdims[0] : g->wdims[g->wrank - 1];
  if (gemm) {
    float beta = H->node_attr_float(n, "beta", 1.0f);
    if (node_in(n, 2)) {
      const OnyxTensor* c = H->value_constant(node_in(n, 2));
      size_t nc = H->tensor_elem_count(c);
      if (nc != (size_t)n_cols && nc != 1)
        return dnnl_err(n, ONYX_INVALID_MODEL, "C has %zu values for %lld columns", nc,
                        (long long)n_cols);
      g->bias = malloc((size_t)n_cols * sizeof *g->bias);
      if (!g->bias) return dnnl_err(n, ONYX_OUT_OF_MEMORY, "out of memory");
      const float* cd = H->tensor_data(c);
      for (int64_t j = 0; j < n_cols; j++)
        g->bias[j] = beta * cd[nc == 1 ? 0 : j];
      g->n_bias = n_cols;
    }
  } else if (g->p.bias) {
    size_t nb = 0;
    g->bias = const_copy(g->p.bias, &nb);
    g->n_bias = (int64_t)nb;
    if (!g->bias) return dnnl_err(n, ONYX_OUT_OF_MEMORY, "out of memory");
  }
  return NULL;
}

/* Where a stage finds value x: the output of an earlier stage, or a group input. */
static Ref resolve_ref(const Chain* c, const OnyxGraphView* v, const OnyxValueInfo* x) {
  for (size_t k = 0; x && k < c->n_st; k++)
    if (c->st[k]->p.out == x) return (Ref){-1, (long)k};
  return (Ref){input_index(v, x), -1};
}

static OnyxStatus* prepare(const Chain* c, Group* g, const OnyxGraphView* v) {
  const OnyxNode* n = g->p.anchor;
  g->x = resolve_ref(c, v, node_in(n, 0));
  g->y_in = g->scale_in = g->shift_in = -1;
  g->w_in = g->b_in = -1;
  if (g->x.in < 0 && g->x.stage < 0)
    return dnnl_err(n, ONYX_FAIL, "the data input is neither a group input nor made inside it");
  for (size_t k = 0; k < g->p.n_post; k++) {
    g->post_in[k] = g->p.post[k].binary ? resolve_ref(c, v, g->p.post[k].other) : (Ref){-1, -1};
    if (g->p.post[k].binary && g->post_in[k].in < 0 && g->post_in[k].stage < 0)
      return dnnl_err(g->p.post[k].node, ONYX_FAIL, "an operand is not available to the group");
  }
  const char* op = H->node_op_type(n);
  switch (g->p.kind) {
  case DK_CONV:
    return prepare_conv(g, v);
  case DK_MATMUL:
    return prepare_matmul(g, v);
  case DK_POOL: {
    int32_t r = H->value_rank(node_in(n, 0));
    read_window(g, n, r - 2, NULL);
    bool global = !strncmp(op, "Global", 6);
    if (global) {
      const int64_t* d = H->value_dims(node_in(n, 0));
      for (int i = 0; i < r - 2; i++)
        g->kernel[i] = d[2 + i];
    }
    bool max = strstr(op, "Max") != NULL;
    g->pool_alg = max                                           ? dnnl_pooling_max
                  : H->node_attr_int(n, "count_include_pad", 0) ? dnnl_pooling_avg_include_padding
                                                                : dnnl_pooling_avg_exclude_padding;
    return NULL;
  }
  case DK_SOFTMAX: {
    int32_t r = H->value_rank(node_in(n, 0));
    int64_t axis = H->node_attr_int(n, "axis", H->node_since_version(n) < 13 ? 1 : -1);
    g->softmax_axis = axis < 0 ? axis + r : axis;
    return NULL;
  }
  case DK_LAYERNORM:
    g->eps = H->node_attr_float(n, "epsilon", 1e-5f);
    g->scale_in = input_index(v, node_in(n, 1));
    g->shift_in = input_index(v, node_in(n, 2));
    if (g->scale_in < 0 || (node_in(n, 2) && g->shift_in < 0))
      return dnnl_err(n, ONYX_FAIL, "scale/bias made inside the group (unsupported)");
    return NULL;
  case DK_ELTWISE: {
    const char* why = NULL;
    if (!dnnl_eltwise_of(n, &g->elt_alg, &g->elt_alpha, &g->elt_beta, &why))
      return dnnl_err(n, ONYX_INVALID_MODEL, "%s", why ? why : "not an element-wise op");
    return NULL;
  }
  case DK_BINARY: {
    g->y_in = input_index(v, node_in(n, 1));
    if (g->y_in < 0)
      return dnnl_err(n, ONYX_FAIL, "the second operand is made inside the group (unsupported)");
    g->bin_alg = !strcmp(op, "Add")   ? dnnl_binary_add
                 : !strcmp(op, "Sub") ? dnnl_binary_sub
                 : !strcmp(op, "Mul") ? dnnl_binary_mul
                 : !strcmp(op, "Div") ? dnnl_binary_div
                 : !strcmp(op, "Max") ? dnnl_binary_max
                                      : dnnl_binary_min;
    return NULL;
  }
  }
  return NULL;
}

/* The stages of a group, in graph order: each node not yet in a stage starts
 * one (dnnl_match), cut before a node an earlier stage took, exactly as
 * dnnl_get_capability cut it. */
static OnyxStatus* derive_stages(Chain* c, const OnyxGraphView* v) {
  size_t nn = H->graph_node_count(v);
  bool* taken = calloc(nn ? nn : 1, sizeof *taken);
  c->st = calloc(nn ? nn : 1, sizeof *c->st);
  if (!taken || !c->st) {
    free(taken);
    return dnnl_err(NULL, ONYX_OUT_OF_MEMORY, "out of memory");
  }
  OnyxStatus* st = NULL;
  for (size_t i = 0; i < nn && !st; i++) {
    if (taken[i]) continue;
    const OnyxNode* n = H->graph_node(v, i);
    Group* g = calloc(1, sizeof *g);
    if (!g) {
      st = dnnl_err(n, ONYX_OUT_OF_MEMORY, "out of memory");
      break;
    }
    c->st[c->n_st++] = g;
    g->ep = c->ep;
    const char* why = NULL;
    if (!dnnl_match(g->ep, v, n, &g->p, &why)) {
      st = dnnl_err(n, ONYX_FAIL, "the group no longer matches: %s", why ? why : "");
      break;
    }
    const OnyxNode* nodes[DNNL_PATTERN_NODES];
    size_t m = dnnl_pattern_nodes(&g->p, nodes), keep = 1;
    taken[i] = true;
    for (; keep < m; keep++) {
      size_t j = 0;
      while (j < nn && H->graph_node(v, j) != nodes[keep])
        j++;
      if (j == nn || taken[j]) break;
      taken[j] = true;
    }
    dnnl_pattern_keep(&g->p, keep);
  }
  free(taken);
  return st;
}

/* Whether stage a reads stage b's output. */
static bool stage_reads(const Group* a, const Group* b) {
  const OnyxNode* nodes[DNNL_PATTERN_NODES];
  size_t m = dnnl_pattern_nodes(&a->p, nodes);
  for (size_t i = 0; i < m; i++)
    for (size_t q = 0; q < H->node_input_count(nodes[i]); q++)
      if (H->node_input(nodes[i], q) == b->p.out) return true;
  return false;
}

/* Orders the stages so that each comes after the stages it reads (a stage's
 * anchor may precede, in graph order, the producer of a residual it absorbed).
 * Stable: graph order where the data allows. */
static OnyxStatus* order_stages(Chain* c) {
  size_t n = c->n_st;
  Group** sorted = calloc(n ? n : 1, sizeof *sorted);
  bool* placed = calloc(n ? n : 1, sizeof *placed);
  OnyxStatus* st = NULL;
  if (!sorted || !placed) st = dnnl_err(NULL, ONYX_OUT_OF_MEMORY, "out of memory");
  for (size_t done = 0; !st && done < n; done++) {
    size_t pick = n;
    for (size_t k = 0; k < n && pick == n; k++) {
      if (placed[k]) continue;
      bool ready = true;
      for (size_t j = 0; j < n && ready; j++)
        ready = placed[j] || j == k || !stage_reads(c->st[k], c->st[j]);
      if (ready) pick = k;
    }
    if (pick == n) {
      st = dnnl_err(c->st[0]->p.anchor, ONYX_FAIL, "the group's stages depend on each other");
      break;
    }
    placed[pick] = true;
    sorted[done] = c->st[pick];
  }
  if (!st) memcpy(c->st, sorted, n * sizeof *sorted);
  free(sorted);
  free(placed);
  return st;
}

OnyxStatus* dnnl_compile(OnyxEp* ep, const OnyxGraphView* v, OnyxCompiledKernel* out) {
  const OnyxNode* first = H->graph_node_count(v) ? H->graph_node(v, 0) : NULL;
  if (!first) return dnnl_err(NULL, ONYX_INVALID_ARGUMENT, "compile of an empty group");
  if (dnnl_bwd_is(first)) return dnnl_bwd_compile(ep->ctx, v, out);
  Chain* c = calloc(1, sizeof *c);
  if (!c) return dnnl_err(first, ONYX_OUT_OF_MEMORY, "out of memory");
  pthread_mutex_init(&c->lock, NULL);
  c->ep = ep->ctx;
  c->n_in = H->graph_input_count(v);
  OnyxStatus* st = derive_stages(c, v);
  if (!st) st = order_stages(c);
  for (size_t i = 0; !st && i < c->n_in; i++) {
    if (H->value_constant(H->graph_input(v, i))) continue;
    if (c->n_var == MAX_IN) st = dnnl_err(first, ONYX_FAIL, "too many group inputs");
    if (!st) c->var_in[c->n_var++] = (long)i;
  }
  /* Each stage: where its inputs come from, whether its output leaves the group. */
  size_t n_st = c->n_st;
  c->n_st = 0; /* resolve_ref sees only the earlier stages */
  for (size_t k = 0; !st && k < n_st; k++) {
    Group* g = c->st[k];
    st = prepare(c, g, v);
    g->out_ext = -1;
    g->last_use = -1;
    for (size_t o = 0; o < H->graph_output_count(v); o++)
      if (H->graph_output(v, o) == g->p.out) g->out_ext = (long)o;
    if (!st && g->x.stage >= 0) c->st[g->x.stage]->last_use = (long)k;
    for (size_t q = 0; !st && q < g->p.n_post; q++)
      if (g->p.post[q].binary && g->post_in[q].stage >= 0)
        c->st[g->post_in[q].stage]->last_use = (long)k;
    c->n_st = k + 1;
  }
  c->n_st = n_st;
  for (size_t o = 0; !st && o < H->graph_output_count(v); o++) {
    bool made = false;
    for (size_t k = 0; k < n_st && !made; k++)
      made = c->st[k]->out_ext == (long)o;
    if (!made)
      st = dnnl_err(first, ONYX_FAIL, "an intermediate value of the group is read outside it");
  }
  if (!st) {
    char name[256];
    snprintf(name, sizeof name, "onednn_%s", H->node_name(first));
    c->name = strdup(name);
  }
  if (st) {
    chain_release(c);
    return st;
  }
  *out = (OnyxCompiledKernel){.struct_size = sizeof *out,
                              .state = c,
                              .compute = dnnl_group_compute,
                              .release = chain_release};
  return NULL;
}

/* --- Plans: primitives per shape
 * ------------------------------------------------------------------ */

static int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pl, int64_t pr) {
  return (in + pl + pr - ((k - 1) * d + 1)) / s + 1;
}

/* Pads for auto_pad SAME_* / VALID given the input spatial dims. */
static void resolve_pads(const Group* g, const int64_t* in, int64_t* pads) {
  int sp = g->spatial;
  memcpy(pads, g->pads, (size_t)(2 * sp) * sizeof *pads);
  if (!g->auto_pad) return;
  for (int i = 0; i < sp; i++) {
    if (!strcmp(g->auto_pad, "VALID")) {
      pads[i] = pads[sp + i] = 0;
      continue;
    }
    int64_t out = (in[i] + g->strides[i] - 1) / g->strides[i];
    int64_t total = (out - 1) * g->strides[i] + (g->kernel[i] - 1) * g->dil[i] + 1 - in[i];
    if (total < 0) total = 0;
    bool upper = !strcmp(g->auto_pad, "SAME_UPPER");
    pads[i] = upper ? total / 2 : total - total / 2;
    pads[sp + i] = total - pads[i];
  }
}

/* The post-ops of a plan. For Conv and MatMul the first residual Add whose
 * tensor has the output's shape becomes a "sum" post-op (the residual is
 * loaded into the destination first): a binary post-op with a plain-layout
 * operand would pin the convolution to plain layouts and oneDNN's slow
 * GEMM-based implementation. */

/* The shapes of a group's inputs that a plan is built for: a run's tensors,
 * or the group's value infos when they are static (dnnl_save_compiled). */
typedef struct Shapes {
  size_t n;
  int* rank; /* per group input; 0 for an absent one */
  const int64_t** dims;
} Shapes;

/* Weights in a primitive's layout from a cache entry, per stage: used
 * instead of reordering the plain weights when the primitive chose exactly
 * this layout (wei_md), else ignored. */
typedef struct Preload {
  const dnnl_memory_desc_t* md; /* NULL: none for this stage */
  const void* data;
  size_t bytes;
} Preload;

/* What building a stage's plan sees: the input shapes, the plans of the
 * stages before it, and weights preloaded from a cache entry (or NULL). */
typedef struct Build {
  const Chain* c;
  const Shapes* in;
  Plan* const* done;
  dnnl_stream_t s;
  const Preload* pre; /* per stage, or NULL */
  size_t stage;       /* the stage being built */
} Build;

static void ref_shape(const Build* b, Ref r, int* rank, const int64_t** dims) {
  if (r.stage >= 0) {
    *rank = b->done[r.stage]->out_rank;
    *dims = b->done[r.stage]->out_dims;
    return;
  }
  *rank = b->in->rank[r.in];
  *dims = b->in->dims[r.in];
}

/* How a value arrives: plain for a group input, else in its producer's layout. */
static void ref_md(const Build* b, Ref r, dnnl_memory_desc_t* md) {
  if (r.stage >= 0) {
    *md = b->done[r.stage]->dst_md;
    return;
  }
  int rank;
  const int64_t* dims;
  ref_shape(b, r, &rank, &dims);
  plain_md(md, rank, dims);
}

/* The post-ops of a plan. For Conv and MatMul the first residual Add whose
 * tensor has the output's shape becomes a "sum" post-op (the residual is
 * loaded into the destination first): a binary post-op with a plain-layout
 * operand would pin the convolution to plain layouts and oneDNN's slow
 * GEMM-based implementation. */
static OnyxStatus* post_ops(const Group* g, Plan* pl, dnnl_primitive_attr_t attr,
                            dnnl_memory_desc_t* post_md, const Build* b) {
  dnnl_post_ops_t po = NULL;
  pl->sum_post = -1;
  pl->post_base = 0;
  OnyxStatus* st = check(g, dnnl_post_ops_create(&po), "post-ops");
  if (!st && g->p.anchor_act) { /* post-op 0: the anchor's own activation */
    st = check(g,
               dnnl_post_ops_append_eltwise(po, 1.0f, (dnnl_alg_kind_t)g->p.act_alg, g->p.act_alpha,
                                            g->p.act_beta),
               "activation post-op");
    pl->post_base = 1;
  }
  for (size_t k = 0; !st && k < g->p.n_post; k++) {
    const DnnlPost* p = &g->p.post[k];
    if (!p->binary) {
      st = check(g,
                 dnnl_post_ops_append_eltwise(po, 1.0f, (dnnl_alg_kind_t)p->alg, p->alpha, p->beta),
                 "eltwise post-op");
      continue;
    }
    int orank;
    const int64_t* odims;
    ref_shape(b, g->post_in[k], &orank, &odims);
    plain_md(&post_md[k], orank, odims);
    ref_md(b, g->post_in[k], &pl->post_from_md[k]);
    bool same = orank == pl->out_rank &&
                !memcmp(odims, pl->out_dims, (size_t)pl->out_rank * sizeof(int64_t));
    if (pl->sum_post < 0 && same && (g->p.kind == DK_CONV || g->p.kind == DK_MATMUL)) {
      pl->sum_post = (int)k;
      pl->sum_from_md = pl->post_from_md[k];
      st = check(g, dnnl_post_ops_append_sum(po, 1.0f), "sum post-op");
      continue;
    }
    st = check(g, dnnl_post_ops_append_binary(po, dnnl_binary_add, &post_md[k]), "binary post-op");
  }
  if (!st) st = check(g, dnnl_primitive_attr_set_post_ops(attr, po), "post-ops");
  if (po) dnnl_post_ops_destroy(po);
  return st;
}

/* Reorders from one layout to another (a weights prepack, or a group boundary). */
static OnyxStatus* make_reorder(const Group* g, const dnnl_memory_desc_t* from,
                                const dnnl_memory_desc_t* to, dnnl_primitive_t* out) {
  dnnl_engine_t e = (dnnl_engine_t)g->ep->engine;
  dnnl_primitive_desc_t rpd = NULL;
  OnyxStatus* st =
      check(g, dnnl_reorder_primitive_desc_create(&rpd, from, e, to, e, NULL), "reorder");
  if (!st) st = check(g, dnnl_primitive_create(out, rpd), "reorder");
  if (rpd) dnnl_primitive_desc_destroy(rpd);
  return st;
}

static OnyxStatus* run_reorder(const Group* g, dnnl_primitive_t r, const dnnl_memory_desc_t* from,
                               const void* src, const dnnl_memory_desc_t* to, void* dst,
                               dnnl_stream_t s) {
  dnnl_engine_t e = (dnnl_engine_t)g->ep->engine;
  dnnl_memory_t a = NULL, b = NULL;
  OnyxStatus* st = check(g, dnnl_memory_create(&a, from, e, (void*)src), "memory");
  if (!st) st = check(g, dnnl_memory_create(&b, to, e, dst), "memory");
  if (!st) {
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, a}, {DNNL_ARG_TO, b}};
    st = check(g, dnnl_primitive_execute(r, s, 2, args), "reorder");
  }
  if (a) dnnl_memory_destroy(a);
  if (b) dnnl_memory_destroy(b);
  return st;
}

/* 64-byte aligned; from 2 MiB on 2 MiB-aligned with transparent huge pages
 * asked for (prepacked weights are written once, right after allocation:
 * 4 KiB pages cost a fault each). Freed with free(). */
static void* aligned_buf(size_t bytes) {
  const size_t huge = (size_t)2 << 20;
  void* p = NULL;
  if (bytes < huge) return posix_memalign(&p, 64, bytes ? bytes : 64) ? NULL : p;
  if (posix_memalign(&p, huge, bytes)) return NULL;
#ifdef MADV_HUGEPAGE
  (void)madvise(p, bytes / huge * huge, MADV_HUGEPAGE); /* advice only */
#endif
  return p;
}

/* Finishes a plan from its primitive descriptor: the chosen layouts, the
 * reorders (data input, group output, residual, binary operands) and the
 * prepacked weights. */
static OnyxStatus* finish_plan(const Group* g, Plan* pl, dnnl_primitive_desc_t pd, bool has_weights,
                               const dnnl_memory_desc_t* user_w, const Build* bc) {
  OnyxStatus* st = check(g, dnnl_primitive_create(&pl->prim, pd), "primitive creation");
  if (st) return st;
  pl->src_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
  pl->dst_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
  const dnnl_memory_desc_t* sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  pl->scratch_bytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
  pl->src_bytes = dnnl_memory_desc_get_size(&pl->src_md);
  pl->dst_bytes = dnnl_memory_desc_get_size(&pl->dst_md);
  if (g->p.kind != DK_BINARY && !dnnl_memory_desc_equal(&pl->src_md, &pl->in_md))
    st = make_reorder(g, &pl->in_md, &pl->src_md, &pl->src_reorder);
  if (!st && g->out_ext >= 0 && !dnnl_memory_desc_equal(&pl->dst_md, &pl->user_dst_md))
    st = make_reorder(g, &pl->dst_md, &pl->user_dst_md, &pl->dst_reorder);
  if (!st && pl->sum_post >= 0 && !dnnl_memory_desc_equal(&pl->sum_from_md, &pl->dst_md))
    st = make_reorder(g, &pl->sum_from_md, &pl->dst_md, &pl->sum_reorder);
  for (size_t k = 0; !st && k < g->p.n_post; k++)
    if (g->p.post[k].binary && (int)k != pl->sum_post && g->post_in[k].stage >= 0 &&
        !dnnl_memory_desc_equal(&pl->post_from_md[k], &pl->post_md[k]))
      st = make_reorder(g, &pl->post_from_md[k], &pl->post_md[k], &pl->post_reorder[k]);
  if (!st && has_weights && g->w_in >= 0) { /* trained weights: reordered per run */
    pl->wei_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    pl->wei_user_md = *user_w;
    if (!dnnl_memory_desc_equal(&pl->wei_md, user_w))
      st = make_reorder(g, user_w, &pl->wei_md, &pl->wei_reorder);
    return st;
  }
  if (!st && has_weights) {
    pl->wei_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    size_t bytes = dnnl_memory_desc_get_size(&pl->wei_md);
    pl->weights = aligned_buf(bytes);
    if (!pl->weights) return dnnl_err(g->p.anchor, ONYX_OUT_OF_MEMORY, "out of memory");
    const Preload* pre = bc->pre ? &bc->pre[bc->stage] : NULL;
    if (pre && pre->md && pre->bytes == bytes && !memcmp(pre->md, &pl->wei_md, sizeof *pre->md)) {
      memcpy(pl->weights, pre->data, bytes); /* the entry's weights, in this very layout */
      return NULL;
    }
    if (pre && pre->md)
      H->log(ONYX_LOG_VERBOSE, DNNL_EP_NAME,
             "node '%s': the cached weights are in another layout than the primitive's: "
             "reordering them",
             H->node_name(g->p.anchor));
    dnnl_primitive_t r = NULL;
    st = make_reorder(g, user_w, &pl->wei_md, &r);
    if (!st) st = run_reorder(g, r, user_w, g->w, &pl->wei_md, pl->weights, bc->s);
    if (!st) st = check(g, dnnl_stream_wait(bc->s), "weights reorder");
    if (r) dnnl_primitive_destroy(r);
  }
  return st;
}

/* Whether a Conv group may try oneDNN's Winograd algorithm: the option
 * allows it, 2-D, a 3x3 kernel, unit strides and dilations, one group and
 * blocked layouts (Winograd's transformed weights are a layout of their own). */
static bool conv_winograd_candidate(const Group* g, int sp, bool blocked) {
  if (g->ep->opt.conv_algorithm != DNNL_CONV_AUTO || !blocked || sp != 2 || g->group != 1 ||
      g->w_in >= 0)
    return false;
  for (int i = 0; i < 2; i++)
    if (g->kernel[i] != 3 || g->strides[i] != 1 || g->dil[i] != 1) return false;
  return true;
}

/* A convolution primitive descriptor: Winograd first where it may apply (2-D
 * 3x3, stride 1, no dilation, no groups, blocked layouts allowed); oneDNN
 * answers `unimplemented` for the shapes and machines its Winograd kernels do
 * not cover, and the direct algorithm is used then. *pd stays NULL with an
 * error. */
static OnyxStatus* conv_pd(const Group* g, int sp, const dnnl_memory_desc_t* src_md,
                           const dnnl_memory_desc_t* w_any, const dnnl_memory_desc_t* b_md,
                           const dnnl_memory_desc_t* dst_md, const dnnl_dim_t* strides,
                           const dnnl_dim_t* dil, const dnnl_dim_t* pl_, const dnnl_dim_t* pr_,
                           const_dnnl_primitive_attr_t attr, dnnl_primitive_desc_t* pd) {
  *pd = NULL;
  if (conv_winograd_candidate(g, sp, g->ep->opt.blocked)) {
    dnnl_convolution_desc_t wd;
    if (dnnl_dilated_convolution_forward_desc_init(
            &wd, dnnl_forward_inference, dnnl_convolution_winograd, src_md, w_any, b_md, dst_md,
            strides, dil, pl_, pr_) == dnnl_success &&
        dnnl_primitive_desc_create(pd, &wd, attr, (dnnl_engine_t)g->ep->engine, NULL) !=
            dnnl_success)
      *pd = NULL;
    if (*pd) return NULL;
  }
  dnnl_convolution_desc_t cd;
  OnyxStatus* st = check(g,
                         dnnl_dilated_convolution_forward_desc_init(
                             &cd, dnnl_forward_inference, dnnl_convolution_direct, src_md, w_any,
                             b_md, dst_md, strides, dil, pl_, pr_),
                         "convolution descriptor");
  if (!st)
    st = check(g, dnnl_primitive_desc_create(pd, &cd, attr, (dnnl_engine_t)g->ep->engine, NULL),
               "convolution primitive descriptor");
  if (st) *pd = NULL;
  return st;
}

static const char* impl_name(const_dnnl_primitive_desc_t pd) {
  const char* s = NULL;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success || !s)
    return "";
  return s;
}

/* The channel-blocked layout a chain keeps its convolutions' outputs in:
 * nC[d][h]w16c where oneDNN runs AVX-512 kernels, 8c below (the block its
 * direct convolution and Winograd kernels use); false for other ranks. */
static bool chain_layout(int rank, const int64_t* dims, dnnl_memory_desc_t* md) {
  static const dnnl_format_tag_t b16[] = {dnnl_aBc16b, dnnl_aBcd16b, dnnl_aBcde16b};
  static const dnnl_format_tag_t b8[] = {dnnl_aBc8b, dnnl_aBcd8b, dnnl_aBcde8b};
  if (rank < 3 || rank > 5) return false;
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  bool avx512 = (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
  /* Indexed one array at a time: GCC's object-size check misjudges an index
   * into `(c ? b16 : b8)` (UBSan reports a false overflow). */
  dnnl_format_tag_t tag = avx512 ? b16[rank - 3] : b8[rank - 3];
  dnnl_dims_t d;
  for (int i = 0; i < rank; i++)
    d[i] = dims[i];
  return dnnl_memory_desc_init_by_tag(md, rank, d, dnnl_f32, tag) == dnnl_success;
}

static OnyxStatus* build_conv(const Group* g, Plan* pl, const Build* bc) {
  int rank;
  const int64_t* xd;
  ref_shape(bc, g->x, &rank, &xd);
  int sp = rank - 2;
  if (sp != g->spatial || xd[1] != g->wdims[1] * g->group)
    return dnnl_err(g->p.anchor, ONYX_INVALID_ARGUMENT,
                    "input has %lld channels / rank %d; the weights want %lld / %d",
                    (long long)xd[1], rank, (long long)(g->wdims[1] * g->group), g->spatial + 2);
  if (g->w_in >= 0) { /* the run's weights must have the shape the plan is built for */
    int wr = bc->in->rank[g->w_in];
    const int64_t* wd = bc->in->dims[g->w_in];
    if (wr != g->wrank || memcmp(wd, g->wdims, (size_t)wr * sizeof *wd))
      return dnnl_err(g->p.anchor, ONYX_INVALID_ARGUMENT,
                      "the weights (input W) have rank %d and %lld output channels; the model "
                      "declares rank %d and %lld",
                      wr, wr > 0 ? (long long)wd[0] : -1LL, g->wrank, (long long)g->wdims[0]);
  }
  if (g->b_in >= 0) {
    int br = bc->in->rank[g->b_in];
    const int64_t* bd = bc->in->dims[g->b_in];
    if (br != 1 || bd[0] != g->n_bias)
      return dnnl_err(g->p.anchor, ONYX_INVALID_ARGUMENT,
                      "the bias (input B) has rank %d and %lld values; %lld output channels "
                      "want rank 1",
                      br, br == 1 ? (long long)bd[0] : -1LL, (long long)g->n_bias);
  }
  int64_t pads[6];
  resolve_pads(g, xd + 2, pads);
  int64_t od[DNNL_MAX_RANK] = {xd[0], g->wdims[0]};
  dnnl_dims_t strides, dil, pl_, pr_;
  for (int i = 0; i < sp; i++) {
    od[2 + i] = conv_out(xd[2 + i], g->kernel[i], g->strides[i], g->dil[i], pads[i], pads[sp + i]);
    if (od[2 + i] < 1)
      return dnnl_err(g->p.anchor, ONYX_INVALID_ARGUMENT, "the kernel is larger than the input");
    strides[i] = g->strides[i];
    dil[i] = g->dil[i] - 1;
    pl_[i] = pads[i];
    pr_[i] = pads[sp + i];
  }
  pl->out_rank = rank;
  memcpy(pl->out_dims, od, (size_t)rank * sizeof *od);
  ref_md(bc, g->x, &pl->in_md);
  plain_md(&pl->user_dst_md, rank, od);
  /* Weights: ONNX [OC, IC/G, k...] is oneDNN's (g)oi<k> in plain order. */
  dnnl_memory_desc_t user_w, w_any, b_md;
  int64_t gw[6];
  int wrank = g->wrank;
  if (g->group > 1) {
    gw[0] = g->group;
    gw[1] = g->wdims[0] / g->group;
    for (int i = 1; i < g->wrank; i++)
      gw[i + 1] = g->wdims[i];
    wrank++;
  } else {
    memcpy(gw, g->wdims, (size_t)g->wrank * sizeof *gw);
  }
  plain_md(&user_w, wrank, gw);
  /* The primitive picks the weights' layout, also for trained weights (a
   * group input, reordered on each run: finish_plan). Measured on the
   * training ResNet's 16-channel 3x3 convolutions (batch 32, 16x16, 1
   * thread): 1.9 ms for its five forward Convs with the chosen blocked
   * layout and the per-run reorders, 3.9 ms with the weights kept plain, 5.1
   * ms on the CPU provider (sums of per-node minima over 30 steps). */
  any_md(&w_any, wrank, gw);
  plain_md(&b_md, 1, &g->n_bias);
  dnnl_memory_desc_t src_md, dst_md;
  if (g->ep->opt.blocked) {
    any_md(&src_md, rank, xd);
    any_md(&dst_md, rank, od);
  } else {
    plain_md(&src_md, rank, xd);
    dst_md = pl->user_dst_md;
  }
  dnnl_primitive_attr_t attr = NULL;
  OnyxStatus* st = check(g, dnnl_primitive_attr_create(&attr), "attributes");
  if (!st)
    st = check(g, dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user),
               "scratchpad");
  if (!st) st = post_ops(g, pl, attr, pl->post_md, bc);
  dnnl_primitive_desc_t pd = NULL;
  /* In a chain: the chain's channel-blocked layout for the destination, the
   * input read as it arrives, when oneDNN has a real (not reference or GEMM)
   * implementation for that; else the layouts oneDNN prefers. */
  dnnl_memory_desc_t chain_dst;
  if (!st && g->ep->opt.blocked && bc->c->n_st > 1 && chain_layout(rank, od, &chain_dst)) {
    const dnnl_memory_desc_t* csrc = g->x.stage >= 0 ? &pl->in_md : &src_md;
    OnyxStatus* st2 =
        conv_pd(g, sp, csrc, &w_any, &b_md, &chain_dst, strides, dil, pl_, pr_, attr, &pd);
    if (!st2 && (strstr(impl_name(pd), "ref") || strstr(impl_name(pd), "gemm"))) {
      dnnl_primitive_desc_destroy(pd);
      pd = NULL;
    }
    H->status_release(st2);
  }
  if (!st && !pd)
    st = conv_pd(g, sp, &src_md, &w_any, &b_md, &dst_md, strides, dil, pl_, pr_, attr, &pd);
  /* An input made by an earlier stage arrives in that stage's layout: when the
   * primitive chose another, ask for the same implementation reading the
   * arriving layout as it is (no reorder between the stages); else reorder. */
  if (!st && g->x.stage >= 0 && g->ep->opt.blocked &&
      !dnnl_memory_desc_equal(dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), &pl->in_md)) {
    dnnl_primitive_desc_t pd2 = NULL;
    OnyxStatus* st2 =
        conv_pd(g, sp, &pl->in_md, &w_any, &b_md, &dst_md, strides, dil, pl_, pr_, attr, &pd2);
    if (!st2 && !strcmp(impl_name(pd), impl_name(pd2))) {
      dnnl_primitive_desc_destroy(pd);
      pd = pd2;
      pd2 = NULL;
    }
    if (pd2) dnnl_primitive_desc_destroy(pd2);
    H->status_release(st2);
  }
  if (!st) st = finish_plan(g, pl, pd, true, &user_w, bc);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return st;
}

static OnyxStatus* build_matmul(const Group* g, Plan* pl, const Build* bc) {
  int ra;
  const int64_t* ad;
  ref_shape(bc, g->x, &ra, &ad);
  int64_t bd_[6];
  int rb;
  if (g->b_const) {
    rb = g->wrank;
    memcpy(bd_, g->wdims, (size_t)rb * sizeof *bd_);
    if (g->trans_b) {
      bd_[0] = g->wdims[1];
      bd_[1] = g->wdims[0];
    }
  } else {
    rb = bc->in->rank[g->y_in];
    if (rb > DNNL_MAX_RANK)
      return dnnl_err(g->p.anchor, ONYX_INVALID_ARGUMENT, "B has rank above %d", DNNL_MAX_RANK);
    memcpy(bd_, bc->in->dims[g->y_in], (size_t)rb * sizeof *bd_);
  }
  int r = ra > rb ? ra : rb;
  int64_t A[DNNL_MAX_RANK], B[DNNL_MAX_RANK], C[DNNL_MAX_RANK];
  for (int i = 0; i < r; i++) { /* left-pad with 1s to one rank */
    A[i] = i < r - ra ? 1 : ad[i - (r - ra)];
    B[i] = i < r - rb ? 1 : bd_[i - (r - rb)];
  }
  int64_t M = A[r - 2], K = A[r - 1], N = B[r - 1];
  if (B[r - 2] != K)
    return dnnl_err(g->p.anchor, ONYX_INVALID_ARGUMENT, "inner dims %lld and %lld differ",
                    (long long)K, (long long)B[r - 2]);
  for (int i = 0; i < r - 2; i++) {
    if (A[i] != B[i] && A[i] != 1 && B[i] != 1)
      return dnnl_err(g->p.anchor, ONYX_INVALID_ARGUMENT,
                      "batch dims %lld and %lld do not broadcast", (long long)A[i],
                      (long long)B[i]);
    C[i] = A[i] > B[i] ? A[i] : B[i];
  }
  C[r - 2] = M;
  C[r - 1] = N;
  /* Output rank as ONNX has it: the larger input rank (both >= 2 here). */
  pl->out_rank = r;
  memcpy(pl->out_dims, C, (size_t)r * sizeof *C);
  dnnl_memory_desc_t a_md;
  plain_md(&a_md, r, A);
  ref_md(bc, g->x, &pl->in_md);
  if (ra < r) pl->in_md = a_md; /* the same bytes, viewed with leading 1s */
  plain_md(&pl->user_dst_md, r, C);
  dnnl_memory_desc_t user_w, w_md, b_md;
  if (g->trans_b) { /* B is stored [N, K]: read it transposed through strides */
    dnnl_dims_t d = {K, N}, st_ = {1, K};
    dnnl_memory_desc_init_by_strides(&user_w, 2, d, dnnl_f32, st_);
  } else {
    plain_md(&user_w, r, B);
  }
  if (g->b_const)
    any_md(&w_md, r, B);
  else
    w_md = user_w;
  int64_t bias_dims[DNNL_MAX_RANK];
  for (int i = 0; i < r; i++)
    bias_dims[i] = i == r - 1 ? N : 1;
  if (g->bias && g->n_bias != N)
    return dnnl_err(g->p.anchor, ONYX_INVALID_ARGUMENT, "bias of %lld for %lld columns",
                    (long long)g->n_bias, (long long)N);
  plain_md(&b_md, r, bias_dims);
  dnnl_matmul_desc_t md;
  OnyxStatus* st =
      check(g, dnnl_matmul_desc_init(&md, &a_md, &w_md, g->bias ? &b_md : NULL, &pl->user_dst_md),
            "matmul descriptor");
  dnnl_primitive_attr_t attr = NULL;
  if (!st) st = check(g, dnnl_primitive_attr_create(&attr), "attributes");
  if (!st)
    st = check(g, dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user),
               "scratchpad");
  if (!st) st = post_ops(g, pl, attr, pl->post_md, bc);
  dnnl_primitive_desc_t pd = NULL;
  if (!st)
    st = check(g, dnnl_primitive_desc_create(&pd, &md, attr, (dnnl_engine_t)g->ep->engine, NULL),
               "matmul primitive descriptor");
  if (!st) st = finish_plan(g, pl, pd, g->b_const, &user_w, bc);
  if (!st && !g->b_const) pl->wei_md = user_w;
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return st;
}

static OnyxStatus* build_simple(const Group* g, Plan* pl, const Build* bc) {
  int rank;
  const int64_t* xd;
  ref_shape(bc, g->x, &rank, &xd);
  /* Pooling and element-wise stages read an internal input in the layout it
   * arrives in; the others want plain data. */
  bool internal = g->x.stage >= 0 && (g->p.kind == DK_POOL || g->p.kind == DK_ELTWISE);
  dnnl_engine_t e = (dnnl_engine_t)g->ep->engine;
  union {
    dnnl_pooling_v2_desc_t pool;
    dnnl_softmax_v2_desc_t softmax;
    dnnl_layer_normalization_desc_t ln;
    dnnl_eltwise_desc_t elt;
    dnnl_binary_desc_t bin;
  } d;
  OnyxStatus* st = NULL;
  pl->out_rank = rank;
  memcpy(pl->out_dims, xd, (size_t)rank * sizeof *xd);
  dnnl_memory_desc_t src_d, dst_d;
  plain_md(&src_d, rank, xd);
  ref_md(bc, g->x, &pl->in_md);
  if (internal) src_d = pl->in_md;
  switch (g->p.kind) {
  case DK_POOL: {
    int sp = rank - 2;
    if (sp != g->spatial)
      return dnnl_err(g->p.anchor, ONYX_INVALID_ARGUMENT, "input rank %d is not %d", rank,
                      g->spatial + 2);
    int64_t pads[6];
    resolve_pads(g, xd + 2, pads);
    dnnl_dims_t strides, kernel, dil, pl_, pr_;
    for (int i = 0; i < sp; i++) {
      pl->out_dims[2 + i] =
          conv_out(xd[2 + i], g->kernel[i], g->strides[i], g->dil[i], pads[i], pads[sp + i]);
      if (pl->out_dims[2 + i] < 1)
        return dnnl_err(g->p.anchor, ONYX_INVALID_ARGUMENT, "the window is larger than the input");
      strides[i] = g->strides[i];
      kernel[i] = g->kernel[i];
      dil[i] = g->dil[i] - 1;
      pl_[i] = pads[i];
      pr_[i] = pads[sp + i];
    }
    plain_md(&pl->user_dst_md, rank, pl->out_dims);
    if (internal)
      any_md(&dst_d, rank, pl->out_dims);
    else
      dst_d = pl->user_dst_md;
    st = check(g,
               dnnl_pooling_v2_forward_desc_init(&d.pool, dnnl_forward_inference,
                                                 (dnnl_alg_kind_t)g->pool_alg, &src_d, &dst_d,
                                                 strides, kernel, dil, pl_, pr_),
               "pooling descriptor");
    break;
  }
  case DK_SOFTMAX:
    plain_md(&pl->user_dst_md, rank, xd);
    st = check(g,
               dnnl_softmax_v2_forward_desc_init(&d.softmax, dnnl_forward_inference,
                                                 dnnl_softmax_accurate, &src_d, &src_d,
                                                 (int)g->softmax_axis),
               "softmax descriptor");
    break;
  case DK_LAYERNORM: {
    plain_md(&pl->user_dst_md, rank, xd);
    unsigned flags = dnnl_use_scale | (g->shift_in >= 0 ? dnnl_use_shift : 0);
    st = check(g,
               dnnl_layer_normalization_forward_desc_init(&d.ln, dnnl_forward_inference, &src_d,
                                                          NULL, g->eps, flags),
               "layer normalization descriptor");
    break;
  }
  case DK_ELTWISE:
    plain_md(&pl->user_dst_md, rank, xd);
    st = check(g,
               dnnl_eltwise_forward_desc_init(&d.elt, dnnl_forward_inference,
                                              (dnnl_alg_kind_t)g->elt_alg, &src_d, g->elt_alpha,
                                              g->elt_beta),
               "eltwise descriptor");
    break;
  case DK_BINARY: {
    if (g->x.stage >= 0)
      return dnnl_err(g->p.anchor, ONYX_FAIL, "a binary stage reading another stage's output");
    size_t ra = (size_t)bc->in->rank[g->x.in], rb = (size_t)bc->in->rank[g->y_in];
    const int64_t *ad = bc->in->dims[g->x.in], *bd = bc->in->dims[g->y_in];
    int r = (int)(ra > rb ? ra : rb);
    int64_t A[DNNL_MAX_RANK], B[DNNL_MAX_RANK], O[DNNL_MAX_RANK];
    for (int i = 0; i < r; i++) {
      A[i] = i < r - (int)ra ? 1 : ad[i - (r - (int)ra)];
      B[i] = i < r - (int)rb ? 1 : bd[i - (r - (int)rb)];
      if (A[i] != B[i] && A[i] != 1 && B[i] != 1)
        return dnnl_err(g->p.anchor, ONYX_INVALID_ARGUMENT, "shapes do not broadcast at dim %d", i);
      O[i] = A[i] > B[i] ? A[i] : B[i];
    }
    bool a_full = !memcmp(A, O, (size_t)r * sizeof *A);
    if (!a_full && g->bin_alg != dnnl_binary_add && g->bin_alg != dnnl_binary_mul &&
        g->bin_alg != dnnl_binary_max && g->bin_alg != dnnl_binary_min)
      return dnnl_err(g->p.anchor, ONYX_INVALID_ARGUMENT, "the first operand would be broadcast");
    pl->out_rank = r;
    memcpy(pl->out_dims, O, (size_t)r * sizeof *O);
    plain_md(&pl->in_md, r, a_full ? A : B);
    plain_md(&pl->src1_md, r, a_full ? B : A);
    plain_md(&pl->user_dst_md, r, O);
    st = check(g,
               dnnl_binary_desc_init(&d.bin, (dnnl_alg_kind_t)g->bin_alg, &pl->in_md, &pl->src1_md,
                                     &pl->user_dst_md),
               "binary descriptor");
    break;
  }
  default:
    return dnnl_err(g->p.anchor, ONYX_FAIL, "unexpected group kind");
  }
  dnnl_primitive_attr_t attr = NULL;
  if (!st) st = check(g, dnnl_primitive_attr_create(&attr), "attributes");
  if (!st)
    st = check(g, dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user),
               "scratchpad");
  if (!st && g->p.kind == DK_BINARY) st = post_ops(g, pl, attr, pl->post_md, bc);
  dnnl_primitive_desc_t pd = NULL;
  if (!st)
    st = check(g, dnnl_primitive_desc_create(&pd, &d, attr, e, NULL), "primitive descriptor");
  if (!st) st = finish_plan(g, pl, pd, false, NULL, bc);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return st;
}

/* Room for the shapes of this many group inputs without a malloc. */
#define SHAPES_INLINE 32

typedef struct ShapesBuf {
  Shapes s;
  int rank[SHAPES_INLINE];
  const int64_t* dims[SHAPES_INLINE];
} ShapesBuf;

static bool shapes_alloc(ShapesBuf* b, size_t n) {
  b->s.n = n;
  b->s.rank = n <= SHAPES_INLINE ? b->rank : calloc(n, sizeof *b->s.rank);
  b->s.dims = n <= SHAPES_INLINE ? b->dims : calloc(n, sizeof *b->s.dims);
  return b->s.rank && b->s.dims;
}

static void shapes_free(ShapesBuf* b) {
  if (b->s.rank != b->rank) free(b->s.rank);
  if (b->s.dims != b->dims) free(b->s.dims);
}

/* The shapes of a run's inputs. */
static OnyxStatus* run_shapes(const Chain* c, const OnyxKernelContext* ctx, ShapesBuf* b) {
  const OnyxNode* first = c->st[0]->p.anchor;
  if (!shapes_alloc(b, c->n_in)) return dnnl_err(first, ONYX_OUT_OF_MEMORY, "out of memory");
  for (size_t i = 0; i < c->n_in; i++) {
    const OnyxTensor* t = H->ctx_input(ctx, i);
    if (t && H->tensor_rank(t) > DNNL_MAX_RANK)
      return dnnl_err(first, ONYX_INVALID_ARGUMENT, "input %zu has rank above %d", i,
                      DNNL_MAX_RANK);
    b->s.rank[i] = t ? (int)H->tensor_rank(t) : 0;
    b->s.dims[i] = t ? H->tensor_dims(t) : NULL;
  }
  return NULL;
}

/* The shapes of the group's inputs as the graph gives them; *known false
 * when one is not static. */
static OnyxStatus* view_shapes(const Chain* c, const OnyxGraphView* v, ShapesBuf* b, bool* known) {
  *known = true;
  if (!shapes_alloc(b, c->n_in)) return dnnl_err(NULL, ONYX_OUT_OF_MEMORY, "out of memory");
  for (size_t i = 0; i < c->n_in; i++) {
    const OnyxValueInfo* x = H->graph_input(v, i);
    int32_t r = x ? H->value_rank(x) : 0;
    const int64_t* d = x ? H->value_dims(x) : NULL;
    if (r < 0 || r > DNNL_MAX_RANK) *known = false;
    for (int32_t k = 0; *known && k < r; k++)
      if (d[k] < 0) *known = false;
    b->s.rank[i] = *known ? r : 0;
    b->s.dims[i] = *known ? d : NULL;
  }
  return NULL;
}

/* The variable inputs' shapes: the plan cache key. */
static void make_key(const Chain* c, const Shapes* in, int64_t key[MAX_IN][DNNL_MAX_RANK + 1]) {
  memset(key, 0, sizeof(int64_t) * MAX_IN * (DNNL_MAX_RANK + 1));
  for (size_t i = 0; i < c->n_var; i++) {
    size_t at = (size_t)c->var_in[i];
    key[i][0] = in->rank[at];
    for (int k = 0; k < in->rank[at] && k < DNNL_MAX_RANK; k++)
      key[i][k + 1] = in->dims[at][k];
  }
}

static OnyxStatus* build_chain_plan(const Chain* c, const Shapes* in, dnnl_stream_t s,
                                    const Preload* pre, ChainPlan* cp) {
  Build b = {c, in, cp->st, s, pre, 0};
  OnyxStatus* st = NULL;
  for (size_t k = 0; k < c->n_st && !st; k++) {
    const Group* g = c->st[k];
    b.stage = k;
    Plan* pl = calloc(1, sizeof *pl);
    if (!pl) return dnnl_err(g->p.anchor, ONYX_OUT_OF_MEMORY, "out of memory");
    cp->st[k] = pl;
    pl->sum_post = -1;
    if (g->p.kind == DK_CONV)
      st = build_conv(g, pl, &b);
    else if (g->p.kind == DK_MATMUL)
      st = build_matmul(g, pl, &b);
    else
      st = build_simple(g, pl, &b);
    if (pl->scratch_bytes > cp->max_scratch) cp->max_scratch = pl->scratch_bytes;
  }
  return st;
}

static size_t up64(size_t n) {
  return (n + 63) / 64 * 64;
}

typedef struct Block {
  size_t off, size;
  long end; /* the last stage it is live in */
} Block;

/* The lowest offset where `size` bytes overlap no block live at stage k. */
static size_t place(const Block* b, size_t n, long k, size_t size) {
  size_t off = 0;
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t i = 0; i < n; i++)
      if (b[i].end >= k && off < b[i].off + b[i].size && b[i].off < off + size) {
        off = b[i].off + b[i].size;
        moved = true;
      }
  }
  return off;
}

/* The temporaries of a stage: its reordered input and binary operands. */
static size_t tmp_bytes(const Group* g, const Plan* pl) {
  size_t n = pl->src_reorder ? up64(pl->src_bytes) : 0;
  if (pl->wei_reorder) n += up64(dnnl_memory_desc_get_size(&pl->wei_md));
  for (size_t q = 0; q < g->p.n_post; q++)
    if (pl->post_reorder[q]) n += up64(dnnl_memory_desc_get_size(&pl->post_md[q]));
  return n;
}

/* Places every stage's buffers in the run's arena. */
static OnyxStatus* layout_chain(const Chain* c, ChainPlan* cp) {
  size_t n = c->n_st;
  Block* b = calloc(2 * n, sizeof *b);
  long* blk = calloc(n, sizeof *blk); /* the block holding stage k's output */
  cp->slot = calloc(n, sizeof *cp->slot);
  if (!b || !blk || !cp->slot) {
    free(b);
    free(blk);
    return dnnl_err(c->st[0]->p.anchor, ONYX_OUT_OF_MEMORY, "out of memory");
  }
  size_t nb = 0, top = 0;
  for (size_t k = 0; k < n; k++) {
    const Group* g = c->st[k];
    const Plan* pl = cp->st[k];
    Slot* sl = &cp->slot[k];
    long end = g->last_use > (long)k ? g->last_use : (long)k;
    blk[k] = -1;
    size_t tmp = tmp_bytes(g, pl);
    if (tmp) {
      sl->tmp_off = place(b, nb, (long)k, tmp);
      b[nb++] = (Block){sl->tmp_off, tmp, (long)k};
    }
    sl->direct = g->out_ext >= 0 && !pl->dst_reorder;
    if (pl->sum_post >= 0 && !pl->sum_reorder && !sl->direct) {
      long j = g->post_in[pl->sum_post].stage;
      bool alias = j >= 0 && c->st[j]->last_use == (long)k && !cp->slot[j].direct &&
                   g->x.stage != j && blk[j] >= 0;
      for (size_t q = 0; alias && q < g->p.n_post; q++)
        alias = !g->p.post[q].binary || (int)q == pl->sum_post || g->post_in[q].stage != j;
      if (alias) {
        sl->alias = true;
        blk[k] = blk[j];
        if (b[blk[k]].end < end) b[blk[k]].end = end;
        sl->dst_off = b[blk[k]].off;
      }
    }
    if (!sl->direct && !sl->alias) {
      size_t size = up64(pl->dst_bytes);
      sl->dst_off = place(b, nb, (long)k, size);
      blk[k] = (long)nb;
      b[nb++] = (Block){sl->dst_off, size, end};
    }
  }
  for (size_t i = 0; i < nb; i++)
    if (b[i].off + b[i].size > top) top = b[i].off + b[i].size;
  /* The scratchpad first, then the buffers. */
  size_t base = up64(cp->max_scratch);
  for (size_t k = 0; k < n; k++) {
    cp->slot[k].dst_off += base;
    cp->slot[k].tmp_off += base;
  }
  cp->arena_bytes = base + top;
  free(b);
  free(blk);
  return NULL;
}

/* The plan for the input shapes `in`, built (with weights from `pre` where
 * they fit) when the chain has none yet. */
static OnyxStatus* get_plan(Chain* c, const Shapes* in, dnnl_stream_t s, const Preload* pre,
                            ChainPlan** out) {
  const OnyxNode* first = c->st[0]->p.anchor;
  int64_t key[MAX_IN][DNNL_MAX_RANK + 1];
  make_key(c, in, key);
  pthread_mutex_lock(&c->lock);
  ChainPlan* cp = c->plans;
  while (cp && memcmp(cp->key, key, sizeof key))
    cp = cp->next;
  OnyxStatus* st = NULL;
  if (!cp) {
    cp = calloc(1, sizeof *cp + c->n_st * sizeof(Plan*));
    if (!cp) st = dnnl_err(first, ONYX_OUT_OF_MEMORY, "out of memory");
    if (!st) {
      memcpy(cp->key, key, sizeof key);
      st = build_chain_plan(c, in, s, pre, cp);
      if (!st) st = layout_chain(c, cp);
      if (st) {
        chain_plan_free(cp, c->n_st);
        cp = NULL;
      } else {
        cp->next = c->plans;
        c->plans = cp;
      }
    }
  }
  pthread_mutex_unlock(&c->lock);
  *out = cp;
  return st;
}

/* --- Running
 * -------------------------------------------------------------------------------------- */

typedef struct Args {
  dnnl_exec_arg_t a[8 + DNNL_MAX_POST];
  dnnl_memory_t owned[8 + DNNL_MAX_POST];
  int n;
} Args;

static OnyxStatus* add_arg(const Group* g, Args* args, int what, const dnnl_memory_desc_t* md,
                           const void* data) {
  dnnl_memory_t m = NULL;
  OnyxStatus* st =
      check(g, dnnl_memory_create(&m, md, (dnnl_engine_t)g->ep->engine, (void*)data), "memory");
  if (st) return st;
  args->owned[args->n] = m;
  args->a[args->n++] = (dnnl_exec_arg_t){what, m};
  return NULL;
}

static void free_args(Args* args) {
  for (int i = 0; i < args->n; i++)
    dnnl_memory_destroy(args->owned[i]);
  args->n = 0;
}

/* One run of a chain: the stages' outputs (in their primitives' layouts). */
typedef struct RunState {
  const Chain* c;
  const ChainPlan* cp;
  OnyxKernelContext* ctx;
  dnnl_stream_t s;
  void** buf;  /* per stage: where its output is */
  char* arena; /* the primitives' scratchpad (at 0), the stages' buffers */
} RunState;

static const void* ref_data(const RunState* r, Ref ref) {
  return ref.stage >= 0 ? r->buf[ref.stage] : H->tensor_data(H->ctx_input(r->ctx, (size_t)ref.in));
}

static OnyxStatus* run_stage(RunState* r, size_t k) {
  const Group* g = r->c->st[k];
  const Plan* pl = r->cp->st[k];
  const Slot* sl = &r->cp->slot[k];
  char* tmp = r->arena + sl->tmp_off;
  OnyxKernelContext* ctx = r->ctx;
  dnnl_stream_t s = r->s;
  OnyxStatus* st = NULL;
  Args args = {.n = 0};
  const void* src = g->p.kind == DK_BINARY ? NULL : ref_data(r, g->x);
  if (pl->src_reorder) {
    st = run_reorder(g, pl->src_reorder, &pl->in_md, src, &pl->src_md, tmp, s);
    src = tmp;
    tmp += up64(pl->src_bytes);
  }
  /* The destination: the group output itself when it is wanted in plain
   * layout, else a buffer in the primitive's layout. */
  OnyxTensor* y = NULL;
  if (!st && g->out_ext >= 0)
    st = H->ctx_output(ctx, (size_t)g->out_ext, pl->out_dims, (size_t)pl->out_rank, &y);
  void* dst = NULL;
  if (!st) dst = r->buf[k] = sl->direct ? H->tensor_mutable_data(y) : r->arena + sl->dst_off;
  if (!st && g->p.kind == DK_BINARY) { /* src0 is the operand with the full shape */
    const OnyxTensor* a = H->ctx_input(ctx, (size_t)g->x.in);
    const OnyxTensor* b = H->ctx_input(ctx, (size_t)g->y_in);
    size_t out_count = 1;
    for (int i = 0; i < pl->out_rank; i++)
      out_count *= (size_t)pl->out_dims[i];
    bool a_full = H->tensor_elem_count(a) == out_count;
    const void* s0 = H->tensor_data(a_full ? a : b);
    const void* s1 = H->tensor_data(a_full ? b : a);
    st = add_arg(g, &args, DNNL_ARG_SRC_0, &pl->src_md, s0);
    if (!st) st = add_arg(g, &args, DNNL_ARG_SRC_1, &pl->src1_md, s1);
  } else if (!st) {
    st = add_arg(g, &args, DNNL_ARG_SRC, &pl->src_md, src);
  }
  if (!st) st = add_arg(g, &args, DNNL_ARG_DST, &pl->dst_md, dst);
  if (!st && g->p.kind == DK_CONV) {
    const void* w = pl->weights;
    if (g->w_in >= 0) { /* trained weights: this run's, in the primitive's layout */
      w = H->tensor_data(H->ctx_input(ctx, (size_t)g->w_in));
      if (pl->wei_reorder) {
        st = run_reorder(g, pl->wei_reorder, &pl->wei_user_md, w, &pl->wei_md, tmp, s);
        w = tmp;
        tmp += up64(dnnl_memory_desc_get_size(&pl->wei_md));
      }
    }
    if (!st) st = add_arg(g, &args, DNNL_ARG_WEIGHTS, &pl->wei_md, w);
    dnnl_memory_desc_t bmd;
    plain_md(&bmd, 1, &g->n_bias);
    const void* b =
        g->b_in >= 0 ? H->tensor_data(H->ctx_input(ctx, (size_t)g->b_in)) : (const void*)g->bias;
    if (!st) st = add_arg(g, &args, DNNL_ARG_BIAS, &bmd, b);
  }
  if (!st && g->p.kind == DK_MATMUL) {
    const void* w = g->b_const ? pl->weights : H->tensor_data(H->ctx_input(ctx, (size_t)g->y_in));
    st = add_arg(g, &args, DNNL_ARG_WEIGHTS, &pl->wei_md, w);
    if (!st && g->bias) {
      int64_t bias_dims[DNNL_MAX_RANK];
      for (int i = 0; i < pl->out_rank; i++)
        bias_dims[i] = i == pl->out_rank - 1 ? g->n_bias : 1;
      dnnl_memory_desc_t bmd;
      plain_md(&bmd, pl->out_rank, bias_dims);
      st = add_arg(g, &args, DNNL_ARG_BIAS, &bmd, g->bias);
    }
  }
  if (!st && g->p.kind == DK_LAYERNORM) {
    const OnyxTensor* sc = H->ctx_input(ctx, (size_t)g->scale_in);
    int64_t c = pl->out_dims[pl->out_rank - 1];
    dnnl_memory_desc_t smd;
    plain_md(&smd, 1, &c);
    if (H->tensor_elem_count(sc) != (size_t)c)
      st = dnnl_err(g->p.anchor, ONYX_INVALID_ARGUMENT, "Scale has %zu values for %lld",
                    H->tensor_elem_count(sc), (long long)c);
    if (!st) st = add_arg(g, &args, DNNL_ARG_SCALE, &smd, H->tensor_data(sc));
    if (!st && g->shift_in >= 0) {
      const OnyxTensor* sh = H->ctx_input(ctx, (size_t)g->shift_in);
      if (H->tensor_elem_count(sh) != (size_t)c)
        st = dnnl_err(g->p.anchor, ONYX_INVALID_ARGUMENT, "B has %zu values for %lld",
                      H->tensor_elem_count(sh), (long long)c);
      if (!st) st = add_arg(g, &args, DNNL_ARG_SHIFT, &smd, H->tensor_data(sh));
    }
  }
  if (!st && pl->sum_post >= 0 && !sl->alias) { /* the residual goes into the destination first */
    const void* res = ref_data(r, g->post_in[pl->sum_post]);
    if (pl->sum_reorder)
      st = run_reorder(g, pl->sum_reorder, &pl->sum_from_md, res, &pl->dst_md, dst, s);
    else
      memcpy(dst, res, pl->dst_bytes);
  }
  for (size_t k2 = 0; !st && k2 < g->p.n_post; k2++) {
    if (!g->p.post[k2].binary || (int)k2 == pl->sum_post) continue;
    const void* o = ref_data(r, g->post_in[k2]);
    if (pl->post_reorder[k2]) {
      st = run_reorder(g, pl->post_reorder[k2], &pl->post_from_md[k2], o, &pl->post_md[k2], tmp, s);
      o = tmp;
      tmp += up64(dnnl_memory_desc_get_size(&pl->post_md[k2]));
    }
    if (!st)
      st = add_arg(g, &args,
                   DNNL_ARG_ATTR_MULTIPLE_POST_OP((int)k2 + pl->post_base) | DNNL_ARG_SRC_1,
                   &pl->post_md[k2], o);
  }
  if (!st && pl->scratch_bytes) {
    const_dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_get_primitive_desc(pl->prim, &pd);
    const dnnl_memory_desc_t* spmd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    st = add_arg(g, &args, DNNL_ARG_SCRATCHPAD, spmd, r->arena);
  }
  if (!st) st = check(g, dnnl_primitive_execute(pl->prim, s, args.n, args.a), "execution");
  if (!st && y && pl->dst_reorder)
    st = run_reorder(g, pl->dst_reorder, &pl->dst_md, dst, &pl->user_dst_md,
                     H->tensor_mutable_data(y), s);
  if (!st) st = check(g, dnnl_stream_wait(s), "stream wait");
  free_args(&args);
  return st;
}

OnyxStatus* dnnl_group_compute(void* state, OnyxKernelContext* ctx) {
  Chain* c = state;
  const Group* g0 = c->st[0];
  omp_set_num_threads(c->ep->threads);
  dnnl_stream_t s = NULL;
  OnyxStatus* st =
      check(g0, dnnl_stream_create(&s, (dnnl_engine_t)c->ep->engine, dnnl_stream_default_flags),
            "stream");
  ChainPlan* cp = NULL;
  ShapesBuf in = {0};
  if (!st) st = run_shapes(c, ctx, &in);
  if (!st) st = get_plan(c, &in.s, s, NULL, &cp);
  shapes_free(&in);
  RunState r = {c, cp, ctx, s, NULL, NULL};
  void* stack_buf[16];
  if (!st) r.buf = c->n_st <= 16 ? stack_buf : H->ctx_scratch(ctx, c->n_st * sizeof(void*));
  if (!st && cp->arena_bytes) r.arena = H->ctx_scratch(ctx, cp->arena_bytes);
  if (!st && (!r.buf || (cp->arena_bytes && !r.arena)))
    st = dnnl_err(g0->p.anchor, ONYX_OUT_OF_MEMORY, "out of memory");
  for (size_t k = 0; !st && k < c->n_st; k++)
    st = run_stage(&r, k);
  if (s) dnnl_stream_destroy(s);
  return st;
}

/* --- Compiled-group cache (OnyxEp.save_compiled / load_compiled) ------------------------------
 *
 * oneDNN's CPU primitives cannot be serialized (its cache blobs are GPU-only),
 * so an entry keeps what a fresh process would otherwise recompute from the
 * weights: for a group whose input shapes are static, the plan's weights
 * already reordered into the layouts the primitives chose (for 3x3
 * convolutions on the Winograd path, already transformed). Saving builds that
 * plan at session creation; loading builds it again, creating the primitives
 * (cheap next to the reorders) and taking each stage's weights from the entry
 * when the primitive chose exactly the stored layout, so the first run finds
 * its plan built and no weight is reordered. The payload layout is in
 * dnnl_ep.h. */

#define FITS(s, field) ((s)->struct_size >= offsetof(__typeof__(*(s)), field) + sizeof((s)->field))

static uint32_t cache_options(const DnnlOptions* o) {
  return (uint32_t)o->fuse | (uint32_t)o->blocked << 1 | (uint32_t)o->chain << 2 |
         (uint32_t)o->conv_algorithm << 3;
}

static void cache_header(const DnnlEp* d, size_t n_st, uint32_t n_plans,
                         uint8_t h[DNNL_CACHE_HEADER_BYTES]) {
  const dnnl_version_t* v = dnnl_version();
  uint32_t u[9] = {DNNL_CACHE_FORMAT,
                   (uint32_t)v->major,
                   (uint32_t)v->minor,
                   (uint32_t)v->patch,
                   (uint32_t)dnnl_get_effective_cpu_isa(),
                   (uint32_t)sizeof(dnnl_memory_desc_t),
                   cache_options(&d->opt),
                   (uint32_t)n_st,
                   n_plans};
  memset(h, 0, DNNL_CACHE_HEADER_BYTES);
  memcpy(h, DNNL_CACHE_MAGIC, 8);
  memcpy(h + DNNL_CACHE_OFF_FORMAT, &u[0], 4);
  memcpy(h + DNNL_CACHE_OFF_VERSION, &u[1], 12);
  snprintf((char*)h + DNNL_CACHE_OFF_HASH, DNNL_CACHE_HASH_BYTES, "%s", v->hash ? v->hash : "");
  memcpy(h + DNNL_CACHE_OFF_ISA, &u[4], 20);
}

static OnyxStatus* put(OnyxBlobWriter* w, const void* p, size_t n) {
  return H->blob_write(w, p, n);
}

OnyxStatus* dnnl_save_compiled(OnyxEp* ep, const OnyxGraphView* v, const OnyxCompiledKernel* k,
                               OnyxBlobWriter* w) {
  if (!FITS(H, blob_write))
    return dnnl_err(NULL, ONYX_FAIL, "the host has no blob_write (ABI before 1.1)");
  const DnnlEp* d = ep->ctx;
  if (k && k->compute == dnnl_bwd_compute && k->state) {
    /* A gradient group: no stage of the chain layout, its plans are rebuilt on load. */
    uint8_t h[DNNL_CACHE_HEADER_BYTES];
    cache_header(d, 0, 0, h);
    return put(w, h, sizeof h);
  }
  if (!k || k->compute != dnnl_group_compute || !k->state)
    return dnnl_err(NULL, ONYX_INVALID_ARGUMENT, "save_compiled: not a kernel of this provider");
  Chain* c = k->state;
  ShapesBuf in = {0};
  bool known = false;
  OnyxStatus* st = view_shapes(c, v, &in, &known);
  ChainPlan* cp = NULL;
  if (!st && known) { /* the plan a run of these shapes would build first */
    omp_set_num_threads(d->threads);
    dnnl_stream_t s = NULL;
    st =
        check(c->st[0], dnnl_stream_create(&s, (dnnl_engine_t)d->engine, dnnl_stream_default_flags),
              "stream");
    if (!st) st = get_plan(c, &in.s, s, NULL, &cp);
    if (s) dnnl_stream_destroy(s);
  }
  uint8_t h[DNNL_CACHE_HEADER_BYTES];
  cache_header(d, c->n_st, cp ? 1 : 0, h);
  if (!st) st = put(w, h, sizeof h);
  if (!st && cp) {
    int64_t key[MAX_IN][DNNL_MAX_RANK + 1];
    make_key(c, &in.s, key);
    st = put(w, key, sizeof key);
    for (size_t i = 0; !st && i < c->n_st; i++) {
      const Plan* pl = cp->st[i];
      uint32_t has = pl->weights != NULL;
      st = put(w, &has, sizeof has);
      if (st || !has) continue;
      uint64_t bytes = dnnl_memory_desc_get_size(&pl->wei_md);
      st = put(w, &pl->wei_md, sizeof pl->wei_md);
      if (!st) st = put(w, &bytes, sizeof bytes);
      if (!st) st = put(w, pl->weights, (size_t)bytes);
    }
  }
  shapes_free(&in);
  return st;
}

/* Bounded reads from a cache entry. */
typedef struct Reader {
  const uint8_t* p;
  size_t left;
} Reader;

static bool take(Reader* r, void* out, size_t n) {
  if (n > r->left) return false;
  if (out) memcpy(out, r->p, n);
  r->p += n;
  r->left -= n;
  return true;
}

/* Why an entry's header does not fit this process, or NULL. */
static OnyxStatus* check_header(const DnnlEp* d, const uint8_t* h, size_t bytes) {
  if (bytes < DNNL_CACHE_HEADER_BYTES || memcmp(h, DNNL_CACHE_MAGIC, 8) != 0)
    return dnnl_err(NULL, ONYX_INVALID_ARGUMENT, "not a oneDNN provider entry (bad magic)");
  uint8_t mine[DNNL_CACHE_HEADER_BYTES];
  cache_header(d, 0, 0, mine);
  uint32_t got[9], want[9];
  memcpy(got, h + DNNL_CACHE_OFF_FORMAT, 4);
  memcpy(want, mine + DNNL_CACHE_OFF_FORMAT, 4);
  memcpy(got + 1, h + DNNL_CACHE_OFF_VERSION, 12);
  memcpy(want + 1, mine + DNNL_CACHE_OFF_VERSION, 12);
  memcpy(got + 4, h + DNNL_CACHE_OFF_ISA, 20);
  memcpy(want + 4, mine + DNNL_CACHE_OFF_ISA, 20);
  if (got[0] != want[0])
    return dnnl_err(NULL, ONYX_INVALID_ARGUMENT, "entry payload format %u; this provider reads %u",
                    got[0], want[0]);
  char hash[DNNL_CACHE_HASH_BYTES];
  memcpy(hash, h + DNNL_CACHE_OFF_HASH, sizeof hash);
  hash[sizeof hash - 1] = '\0';
  for (char* q = hash; *q; q++)
    if (*q < 0x20 || *q > 0x7e) *q = '?';
  if (memcmp(got + 1, want + 1, 12) != 0 ||
      memcmp(h + DNNL_CACHE_OFF_HASH, mine + DNNL_CACHE_OFF_HASH, DNNL_CACHE_HASH_BYTES) != 0)
    return dnnl_err(NULL, ONYX_INVALID_ARGUMENT,
                    "entry made by oneDNN %u.%u.%u (%s); this is oneDNN %u.%u.%u (%s)", got[1],
                    got[2], got[3], hash, want[1], want[2], want[3],
                    (const char*)mine + DNNL_CACHE_OFF_HASH);
  if (got[4] != want[4])
    return dnnl_err(NULL, ONYX_INVALID_ARGUMENT,
                    "entry made for CPU ISA %s (0x%x); this machine runs %s (0x%x)",
                    dnnl_isa_name((int)got[4]), got[4], dnnl_isa_name((int)want[4]), want[4]);
  if (got[5] != want[5])
    return dnnl_err(NULL, ONYX_INVALID_ARGUMENT, "entry memory descriptors of %u bytes, not %u",
                    got[5], want[5]);
  if (got[6] != want[6])
    return dnnl_err(NULL, ONYX_INVALID_ARGUMENT,
                    "entry made with other provider options (0x%x, here 0x%x)", got[6], want[6]);
  return NULL;
}

OnyxStatus* dnnl_load_compiled(OnyxEp* ep, const OnyxGraphView* v, const void* data, size_t bytes,
                               OnyxCompiledKernel* out) {
  const DnnlEp* d = ep->ctx;
  Reader r = {data, bytes};
  OnyxStatus* st = check_header(d, data, bytes);
  if (st) return st;
  uint32_t n_st = 0, n_plans = 0;
  memcpy(&n_st, (const uint8_t*)data + DNNL_CACHE_OFF_STAGES, 4);
  memcpy(&n_plans, (const uint8_t*)data + DNNL_CACHE_OFF_PLANS, 4);
  take(&r, NULL, DNNL_CACHE_HEADER_BYTES);
  if (n_plans > 1)
    return dnnl_err(NULL, ONYX_INVALID_ARGUMENT, "entry holds %u plans (at most 1)", n_plans);
  OnyxCompiledKernel k = {.struct_size = sizeof k};
  st = dnnl_compile(ep, v, &k);
  if (st) return st;
  if (k.compute == dnnl_bwd_compute) { /* a gradient group: the header only */
    if (n_st || n_plans || r.left)
      st = dnnl_err(NULL, ONYX_INVALID_ARGUMENT, "entry holds stages; the group is a gradient op");
    if (st) {
      k.release(k.state);
      return st;
    }
    *out = k;
    return NULL;
  }
  Chain* c = k.state;
  if (c->n_st != n_st)
    st = dnnl_err(NULL, ONYX_INVALID_ARGUMENT, "entry has %u stages; the group compiles to %zu",
                  n_st, c->n_st);
  ShapesBuf in = {0};
  Preload* pre = NULL;
  dnnl_memory_desc_t* mds = NULL;
  if (!st && n_plans) {
    bool known = false;
    int64_t key[MAX_IN][DNNL_MAX_RANK + 1], want[MAX_IN][DNNL_MAX_RANK + 1];
    st = view_shapes(c, v, &in, &known);
    if (!st && !known)
      st = dnnl_err(NULL, ONYX_INVALID_ARGUMENT,
                    "entry holds a plan; the group's shapes are not "
                    "static");
    if (!st && !take(&r, key, sizeof key))
      st = dnnl_err(NULL, ONYX_INVALID_ARGUMENT, "entry truncated in the plan's shapes");
    if (!st) make_key(c, &in.s, want);
    if (!st && memcmp(key, want, sizeof key) != 0)
      st = dnnl_err(NULL, ONYX_INVALID_ARGUMENT, "entry's plan is for other input shapes");
    pre = st ? NULL : calloc(c->n_st, sizeof *pre);
    mds = st ? NULL : calloc(c->n_st, sizeof *mds);
    if (!st && (!pre || !mds)) st = dnnl_err(NULL, ONYX_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; !st && i < c->n_st; i++) {
      uint32_t has = 0;
      uint64_t n = 0;
      if (!take(&r, &has, sizeof has) || has > 1 ||
          (has && (!take(&r, &mds[i], sizeof mds[i]) || !take(&r, &n, sizeof n) || n > r.left))) {
        st = dnnl_err(NULL, ONYX_INVALID_ARGUMENT, "entry truncated or malformed at stage %zu", i);
        break;
      }
      if (!has) continue;
      pre[i] = (Preload){&mds[i], r.p, (size_t)n};
      take(&r, NULL, (size_t)n);
    }
    if (!st && r.left)
      st = dnnl_err(NULL, ONYX_INVALID_ARGUMENT, "entry has %zu trailing bytes", r.left);
    if (!st) { /* build the plan now, with the entry's weights */
      omp_set_num_threads(d->threads);
      dnnl_stream_t s = NULL;
      ChainPlan* cp = NULL;
      st = check(c->st[0],
                 dnnl_stream_create(&s, (dnnl_engine_t)d->engine, dnnl_stream_default_flags),
                 "stream");
      if (!st) st = get_plan(c, &in.s, s, pre, &cp);
      if (s) dnnl_stream_destroy(s);
    }
  } else if (!st && r.left) {
    st = dnnl_err(NULL, ONYX_INVALID_ARGUMENT, "entry has %zu trailing bytes", r.left);
  }
  shapes_free(&in);
  free(pre);
  free(mds);
  if (st) {
    chain_release(c);
    return st;
  }
  *out = k;
  return NULL;
}
