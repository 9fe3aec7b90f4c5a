/* cpu_gather_scatter.c — the CPU provider's gather, scatter and select
 * kernels: GatherElements, GatherND, Scatter, ScatterElements, ScatterND,
 * TensorScatter, OneHot, Compress and NonZero; and the attribute reader
 * they share with Unique and TopK (cpu_sort_topk.c).
 *
 * Every index read from a tensor is checked against the dim it indexes
 * before use: an index out of range is an error naming the node, never an
 * out-of-bounds access. Elements move with memcpy (strings are deep-copied
 * through the host); reductions (add/mul/max/min) go through CpuNum. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gather_scatter.h"

/* --- Helpers ----------------------------------------------------------------- */

enum { IDX_RED_NONE, IDX_RED_ADD, IDX_RED_MUL, IDX_RED_MAX, IDX_RED_MIN };

/* Element i of an int32/int64 (or other integer) index tensor. */
static int64_t idx_at(const OnyxTensor* t, size_t i) {
  const void* p = cpu_host->tensor_data(t);
  switch (cpu_host->tensor_elem_type(t)) {
  case ONYX_ELEM_INT32:
    return ((const int32_t*)p)[i];
  case ONYX_ELEM_INT64:
    return ((const int64_t*)p)[i];
  default: {
    CpuNum v;
    if (!cpu_num_load(cpu_host->tensor_elem_type(t), p, i, &v)) return 0;
    if (v.kind == CPU_NUM_SINT) return v.v.i;
    if (v.kind == CPU_NUM_UINT) return v.v.u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v.v.u;
    /* a float beyond int64 (or NaN) is out of range for every dim */
    int64_t r;
    return cpu_double_to_i64(trunc(v.v.f), &r) ? r : INT64_MIN;
  }
  }
}

/* Index element i of t, normalized into [0, dim); an error naming `what` when
 * it is outside [-dim, dim). */
static OnyxStatus* idx_norm(const OnyxKernelContext* ctx, const OnyxTensor* t, size_t i,
                            int64_t dim, const char* what, int64_t* out) {
  int64_t v = idx_at(t, i);
  if (v < -dim || v >= dim)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "%s index %lld (element %zu) is out of range [-%lld, %lld)", what,
                         (long long)v, i, (long long)dim, (long long)dim);
  *out = v < 0 ? v + dim : v;
  return NULL;
}

/* Copies one element (strings deep-copied). */
static OnyxStatus* copy1(OnyxTensor* y, size_t yi, const OnyxTensor* x, size_t xi, size_t es) {
  if (cpu_host->tensor_elem_type(x) == ONYX_ELEM_STRING) return cpu_copy_elems(y, yi, x, xi, 1);
  memcpy((char*)cpu_host->tensor_mutable_data(y) + yi * es,
         (const char*)cpu_host->tensor_data(x) + xi * es, es);
  return NULL;
}

/* y[yi] = y[yi] (red) u[ui] for numeric types; a plain copy for none. */
static OnyxStatus* apply_red(const OnyxKernelContext* ctx, int red, OnyxTensor* y, size_t yi,
                             const OnyxTensor* u, size_t ui, size_t es) {
  if (red == IDX_RED_NONE) return copy1(y, yi, u, ui, es);
  int32_t type = cpu_host->tensor_elem_type(y);
  CpuNum a, b;
  if (!cpu_num_load(type, cpu_host->tensor_mutable_data(y), yi, &a) ||
      !cpu_num_load(type, cpu_host->tensor_data(u), ui, &b))
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "reduction over %s is not supported",
                         cpu_elem_name(type));
  switch (a.kind) {
  case CPU_NUM_FLT:
    a.v.f = red == IDX_RED_ADD   ? a.v.f + b.v.f
            : red == IDX_RED_MUL ? a.v.f * b.v.f
            : red == IDX_RED_MAX ? (b.v.f > a.v.f || isnan(b.v.f) ? b.v.f : a.v.f)
                                 : (b.v.f < a.v.f || isnan(b.v.f) ? b.v.f : a.v.f);
    break;
  case CPU_NUM_SINT:
    a.v.i = red == IDX_RED_ADD   ? (int64_t)((uint64_t)a.v.i + (uint64_t)b.v.i)
            : red == IDX_RED_MUL ? (int64_t)((uint64_t)a.v.i * (uint64_t)b.v.i)
            : red == IDX_RED_MAX ? (b.v.i > a.v.i ? b.v.i : a.v.i)
                                 : (b.v.i < a.v.i ? b.v.i : a.v.i);
    break;
  default:
    a.v.u = red == IDX_RED_ADD   ? a.v.u + b.v.u
            : red == IDX_RED_MUL ? a.v.u * b.v.u
            : red == IDX_RED_MAX ? (b.v.u > a.v.u ? b.v.u : a.v.u)
                                 : (b.v.u < a.v.u ? b.v.u : a.v.u);
    if (type == ONYX_ELEM_BOOL) a.v.u = a.v.u != 0;
    break;
  }
  cpu_num_store(type, cpu_host->tensor_mutable_data(y), yi, a);
  return NULL;
}

static int parse_reduction(const char* s) {
  if (!s || !strcmp(s, "none")) return IDX_RED_NONE;
  if (!strcmp(s, "add")) return IDX_RED_ADD;
  if (!strcmp(s, "mul")) return IDX_RED_MUL;
  if (!strcmp(s, "max")) return IDX_RED_MAX;
  if (!strcmp(s, "min")) return IDX_RED_MIN;
  return -1;
}

OnyxStatus* cpu_idx_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  IdxState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->version = (int)(intptr_t)user;
  const char* op = cpu_host->node_op_type(node);
  int64_t axis_default = !strcmp(op, "OneHot") || !strcmp(op, "TopK") ? -1
                         : !strcmp(op, "TensorScatter")               ? -2
                                                                      : 0;
  s->has_axis = cpu_host->node_attr_type(node, "axis") == ONYX_ATTR_INT;
  s->axis = cpu_host->node_attr_int(node, "axis", axis_default);
  s->batch_dims = cpu_host->node_attr_int(node, "batch_dims", 0);
  size_t len = 0;
  const char* red = cpu_host->node_attr_string(node, "reduction", &len);
  s->reduction = parse_reduction(red);
  const char* mode = cpu_host->node_attr_string(node, "mode", &len);
  s->circular = mode && !strcmp(mode, "circular");
  s->largest = cpu_host->node_attr_int(node, "largest", 1) != 0;
  s->sorted = cpu_host->node_attr_int(node, "sorted", 1) != 0;
  s->k_attr = cpu_host->node_attr_int(node, "k", -1);
  if (s->reduction < 0) {
    free(s);
    return cpu_error(node, ONYX_INVALID_MODEL, "unknown reduction '%s'", red);
  }
  if (mode && strcmp(mode, "linear") && !s->circular && !strcmp(op, "TensorScatter")) {
    free(s);
    return cpu_error(node, ONYX_INVALID_MODEL, "unknown mode '%s'", mode);
  }
  *out = s;
  return NULL;
}

/* ========================================================================= */
/* GatherElements / ScatterElements / Scatter                                 */
/* ========================================================================= */

/* For each position of `idx` (shape of indices), the data offset it selects:
 * its own coordinates, with the one along axis taken from the index. */
static OnyxStatus* elements_offsets(OnyxKernelContext* ctx, const OnyxTensor* data,
                                    const OnyxTensor* idx, int64_t axis_attr, size_t** out,
                                    size_t* n_out) {
  size_t rank = cpu_host->tensor_rank(data), axis;
  OnyxStatus* st = cpu_check_rank(ctx, rank);
  if (st) return st;
  if (cpu_host->tensor_rank(idx) != rank)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "indices have rank %zu, data %zu",
                         cpu_host->tensor_rank(idx), rank);
  if (rank == 0 || !cpu_norm_axis(axis_attr, rank, false, &axis))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld out of range for rank %zu",
                         (long long)axis_attr, rank);
  const int64_t* dd = cpu_host->tensor_dims(data);
  const int64_t* id = cpu_host->tensor_dims(idx);
  for (size_t d = 0; d < rank; d++)
    if (d != axis && id[d] > dd[d])
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "indices dim %zu (%lld) exceeds the data's (%lld)", d, (long long)id[d],
                           (long long)dd[d]);
  size_t n = cpu_host->tensor_elem_count(idx);
  size_t* off = cpu_host->ctx_scratch(ctx, (n ? n : 1) * sizeof *off);
  if (!off) return cpu_oom(ctx);
  int64_t strides[CPU_MAX_RANK], pos[CPU_MAX_RANK] = {0};
  cpu_dense_strides(dd, rank, strides);
  for (size_t i = 0; i < n; i++) {
    int64_t v = 0;
    if ((st = idx_norm(ctx, idx, i, dd[axis], "indices", &v))) return st;
    size_t o = 0;
    for (size_t d = 0; d < rank; d++)
      o += (size_t)((d == axis ? v : pos[d]) * strides[d]);
    off[i] = o;
    for (size_t d = rank; d-- > 0;) {
      if (++pos[d] < id[d]) break;
      pos[d] = 0;
    }
  }
  *out = off;
  *n_out = n;
  return NULL;
}

static OnyxStatus* gather_elements_compute(void* state, OnyxKernelContext* ctx) {
  const IdxState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* idx = cpu_host->ctx_input(ctx, 1);
  size_t *off, n;
  OnyxStatus* st = elements_offsets(ctx, x, idx, s->axis, &off, &n);
  if (st) return st;
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(idx), cpu_host->tensor_rank(idx),
                                 &y)))
    return st;
  size_t es = cpu_elem_size(cpu_host->tensor_elem_type(x));
  for (size_t i = 0; i < n && !st; i++)
    st = copy1(y, i, x, off[i], es);
  return st;
}

static OnyxStatus* scatter_elements_compute(void* state, OnyxKernelContext* ctx) {
  const IdxState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* idx = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* upd = cpu_host->ctx_input(ctx, 2);
  size_t r = cpu_host->tensor_rank(idx);
  if (cpu_host->tensor_rank(upd) != r ||
      memcmp(cpu_host->tensor_dims(upd), cpu_host->tensor_dims(idx), r * sizeof(int64_t)))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "updates and indices differ in shape");
  size_t *off, n;
  OnyxStatus* st = elements_offsets(ctx, x, idx, s->axis, &off, &n);
  if (st) return st;
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(x), cpu_host->tensor_rank(x), &y)))
    return st;
  if ((st = cpu_copy_elems(y, 0, x, 0, cpu_host->tensor_elem_count(x)))) return st;
  size_t es = cpu_elem_size(cpu_host->tensor_elem_type(x));
  for (size_t i = 0; i < n && !st; i++)
    st = apply_red(ctx, s->reduction, y, off[i], upd, i, es);
  return st;
}

/* ========================================================================= */
/* GatherND / ScatterND                                                       */
/* ========================================================================= */

typedef struct NdPlan {
  size_t n_tuples; /* index tuples */
  size_t slice;    /* elements per tuple */
  size_t* off;     /* data offset per tuple */
  int64_t out_dims[CPU_MAX_RANK];
  size_t out_rank;
} NdPlan;

static OnyxStatus* nd_plan(OnyxKernelContext* ctx, const OnyxTensor* data, const OnyxTensor* idx,
                           int64_t batch_dims, NdPlan* p) {
  size_t r = cpu_host->tensor_rank(data), q = cpu_host->tensor_rank(idx);
  const int64_t* dd = cpu_host->tensor_dims(data);
  const int64_t* id = cpu_host->tensor_dims(idx);
  OnyxStatus* st = cpu_check_rank(ctx, r + q);
  if (st) return st;
  if (q < 1) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "indices must have rank >= 1");
  if (batch_dims < 0 || (size_t)batch_dims >= q || (size_t)batch_dims >= r + 0)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "batch_dims %lld invalid for ranks %zu, %zu",
                         (long long)batch_dims, r, q);
  size_t b = (size_t)batch_dims, k = (size_t)id[q - 1];
  if (k < 1 || b + k > r)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "indices' last dim %zu is invalid for data of rank %zu", k, r);
  for (size_t d = 0; d < b; d++)
    if (dd[d] != id[d])
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "batch dim %zu differs: %lld vs %lld", d,
                           (long long)dd[d], (long long)id[d]);
  p->out_rank = 0;
  for (size_t d = 0; d + 1 < q; d++)
    p->out_dims[p->out_rank++] = id[d];
  for (size_t d = b + k; d < r; d++)
    p->out_dims[p->out_rank++] = dd[d];
  p->n_tuples = cpu_dims_product(id, 0, q - 1);
  p->slice = cpu_dims_product(dd, b + k, r);
  size_t per_batch = cpu_dims_product(id, b, q - 1);
  size_t batch_stride = cpu_dims_product(dd, b, r);
  int64_t strides[CPU_MAX_RANK];
  cpu_dense_strides(dd, r, strides);
  p->off = cpu_host->ctx_scratch(ctx, (p->n_tuples ? p->n_tuples : 1) * sizeof *p->off);
  if (!p->off) return cpu_oom(ctx);
  for (size_t t = 0; t < p->n_tuples; t++) {
    size_t o = per_batch ? (t / per_batch) * batch_stride : 0;
    for (size_t j = 0; j < k; j++) {
      int64_t v = 0;
      if ((st = idx_norm(ctx, idx, t * k + j, dd[b + j], "indices", &v))) return st;
      o += (size_t)(v * strides[b + j]);
    }
    p->off[t] = o;
  }
  return NULL;
}

static OnyxStatus* gather_nd_compute(void* state, OnyxKernelContext* ctx) {
  const IdxState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  NdPlan p;
  OnyxStatus* st = nd_plan(ctx, x, cpu_host->ctx_input(ctx, 1), s->batch_dims, &p);
  if (st) return st;
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, p.out_dims, p.out_rank, &y))) return st;
  for (size_t t = 0; t < p.n_tuples && !st && p.slice; t++)
    st = cpu_copy_elems(y, t * p.slice, x, p.off[t], p.slice);
  return st;
}

static OnyxStatus* scatter_nd_compute(void* state, OnyxKernelContext* ctx) {
  const IdxState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* upd = cpu_host->ctx_input(ctx, 2);
  NdPlan p;
  OnyxStatus* st = nd_plan(ctx, x, cpu_host->ctx_input(ctx, 1), 0, &p);
  if (st) return st;
  if (cpu_host->tensor_rank(upd) != p.out_rank ||
      memcmp(cpu_host->tensor_dims(upd), p.out_dims, p.out_rank * sizeof(int64_t)))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "updates' shape must be indices.shape[:-1] + data.shape[k:]");
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(x), cpu_host->tensor_rank(x), &y)))
    return st;
  if ((st = cpu_copy_elems(y, 0, x, 0, cpu_host->tensor_elem_count(x)))) return st;
  size_t es = cpu_elem_size(cpu_host->tensor_elem_type(x));
  for (size_t t = 0; t < p.n_tuples && !st; t++) {
    if (s->reduction == IDX_RED_NONE) {
      st = p.slice ? cpu_copy_elems(y, p.off[t], upd, t * p.slice, p.slice) : NULL;
      continue;
    }
    for (size_t e = 0; e < p.slice && !st; e++)
      st = apply_red(ctx, s->reduction, y, p.off[t] + e, upd, t * p.slice + e, es);
  }
  return st;
}

/* ========================================================================= */
/* TensorScatter                                                              */
/* ========================================================================= */

static OnyxStatus* tensor_scatter_compute(void* state, OnyxKernelContext* ctx) {
  const IdxState* s = state;
  const OnyxTensor* past = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* upd = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* wi = cpu_host->ctx_input_count(ctx) > 2 ? cpu_host->ctx_input(ctx, 2) : NULL;
  size_t rank = cpu_host->tensor_rank(past), axis;
  OnyxStatus* st = cpu_check_rank(ctx, rank);
  if (st) return st;
  if (rank < 2 || !cpu_norm_axis(s->axis, rank, false, &axis) || axis == 0)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld invalid for rank %zu",
                         (long long)s->axis, rank);
  const int64_t* pd = cpu_host->tensor_dims(past);
  const int64_t* ud = cpu_host->tensor_dims(upd);
  if (cpu_host->tensor_rank(upd) != rank)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "update's rank differs from past_cache's");
  for (size_t d = 0; d < rank; d++)
    if (d != axis && pd[d] != ud[d])
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "update's dim %zu differs from the cache's",
                           d);
  int64_t max_seq = pd[axis], seq = ud[axis], batch = pd[0];
  if (seq > max_seq)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "sequence length %lld exceeds the cache's %lld", (long long)seq,
                         (long long)max_seq);
  if (wi && (int64_t)cpu_host->tensor_elem_count(wi) != batch)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "write_indices has %zu values for batch %lld",
                         cpu_host->tensor_elem_count(wi), (long long)batch);
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, pd, rank, &y))) return st;
  if ((st = cpu_copy_elems(y, 0, past, 0, cpu_host->tensor_elem_count(past)))) return st;
  size_t outer = cpu_dims_product(pd, 0, axis), inner = cpu_dims_product(pd, axis + 1, rank);
  size_t per_batch = cpu_dims_product(pd, 1, axis);
  for (size_t o = 0; o < outer && inner; o++) {
    size_t b = per_batch ? o / per_batch : 0;
    int64_t w = wi ? idx_at(wi, b) : 0;
    for (int64_t j = 0; j < seq; j++) {
      int64_t pos;
      if (s->circular) /* w reduced first: any int64 write index wraps */
        pos = max_seq ? (((w % max_seq) + max_seq) % max_seq + j) % max_seq : 0;
      else if (!cpu_add_i64(w, j, &pos))
        pos = -1; /* outside the cache: the error below */
      if (pos < 0 || pos >= max_seq)
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                             "write index %lld + %lld is outside the cache of %lld", (long long)w,
                             (long long)j, (long long)max_seq);
      st = cpu_copy_elems(y, (o * (size_t)max_seq + (size_t)pos) * inner, upd,
                          (o * (size_t)seq + (size_t)j) * inner, inner);
      if (st) return st;
    }
  }
  return NULL;
}

/* ========================================================================= */
/* OneHot                                                                     */
/* ========================================================================= */

static OnyxStatus* one_hot_compute(void* state, OnyxKernelContext* ctx) {
  const IdxState* s = state;
  const OnyxTensor* idx = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* dt = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* vals = cpu_host->ctx_input(ctx, 2);
  size_t r = cpu_host->tensor_rank(idx), axis;
  OnyxStatus* st = cpu_check_rank(ctx, r + 1);
  if (st) return st;
  CpuNum dn;
  if (cpu_host->tensor_elem_count(dt) != 1 ||
      !cpu_num_load(cpu_host->tensor_elem_type(dt), cpu_host->tensor_data(dt), 0, &dn))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "depth must hold one number");
  double dd = cpu_num_as_double(dn);
  if (!(dd >= 1) || dd > 1e15)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "depth %g is not a positive count", dd);
  int64_t depth = (int64_t)dd;
  if (cpu_host->tensor_elem_count(vals) != 2)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "values must hold [off, on]");
  if (!cpu_norm_axis(s->axis, r + 1, false, &axis))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld out of range for rank %zu",
                         (long long)s->axis, r + 1);
  const int64_t* id = cpu_host->tensor_dims(idx);
  int64_t dims[CPU_MAX_RANK];
  for (size_t d = 0, k = 0; d <= r; d++)
    dims[d] = d == axis ? depth : id[k++];
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, dims, r + 1, &y))) return st;
  size_t outer = cpu_dims_product(id, 0, axis), inner = cpu_dims_product(id, axis, r);
  size_t es = cpu_elem_size(cpu_host->tensor_elem_type(vals));
  for (size_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < depth; j++)
      for (size_t i = 0; i < inner; i++) {
        size_t src = o * inner + i;
        int64_t v = idx_at(idx, src);
        if (v < 0) v += depth; /* outside [-depth, depth): all off, as the spec says */
        st = copy1(y, (o * (size_t)depth + (size_t)j) * inner + i, vals, v == j ? 1 : 0, es);
        if (st) return st;
      }
  return NULL;
}

/* ========================================================================= */
/* Compress / NonZero                                                         */
/* ========================================================================= */

static OnyxStatus* compress_compute(void* state, OnyxKernelContext* ctx) {
  const IdxState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* c = cpu_host->ctx_input(ctx, 1);
  size_t rank = cpu_host->tensor_rank(x), axis = 0;
  OnyxStatus* st = cpu_check_rank(ctx, rank);
  if (st) return st;
  if (cpu_host->tensor_rank(c) != 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "condition must be 1-D");
  int64_t flat = (int64_t)cpu_host->tensor_elem_count(x);
  const int64_t* xd = s->has_axis ? cpu_host->tensor_dims(x) : &flat;
  size_t xr = s->has_axis ? rank : 1;
  if (s->has_axis && (rank == 0 || !cpu_norm_axis(s->axis, rank, false, &axis)))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld out of range for rank %zu",
                         (long long)s->axis, rank);
  const uint8_t* cond = cpu_host->tensor_data(c);
  size_t nc = cpu_host->tensor_elem_count(c), kept = 0;
  for (size_t i = 0; i < nc; i++)
    if (cond[i]) {
      if ((int64_t)i >= xd[axis])
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                             "condition selects index %zu of an axis of %lld", i,
                             (long long)xd[axis]);
      kept++;
    }
  int64_t dims[CPU_MAX_RANK];
  memcpy(dims, xd, xr * sizeof *dims);
  dims[axis] = (int64_t)kept;
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, dims, xr, &y))) return st;
  size_t outer = cpu_dims_product(xd, 0, axis), inner = cpu_dims_product(xd, axis + 1, xr);
  size_t len = (size_t)xd[axis];
  for (size_t o = 0, at = 0; o < outer; o++)
    for (size_t i = 0; i < nc && i < len; i++)
      if (cond[i] && inner) {
        if ((st = cpu_copy_elems(y, at * inner, x, (o * len + i) * inner, inner))) return st;
        at++;
      }
  return NULL;
}

static bool nonzero_at(int32_t type, const void* p, size_t i) {
  CpuNum v;
  if (!cpu_num_load(type, p, i, &v)) return false;
  return v.kind == CPU_NUM_FLT ? v.v.f != 0.0 : v.v.u != 0;
}

static OnyxStatus* nonzero_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  size_t rank = cpu_host->tensor_rank(x), n = cpu_host->tensor_elem_count(x), nnz = 0;
  OnyxStatus* st = cpu_check_rank(ctx, rank);
  if (st) return st;
  int32_t type = cpu_host->tensor_elem_type(x);
  const void* p = cpu_host->tensor_data(x);
  for (size_t i = 0; i < n; i++)
    nnz += nonzero_at(type, p, i);
  int64_t dims[2] = {(int64_t)rank, (int64_t)nnz};
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, dims, 2, &y))) return st;
  int64_t* out = cpu_host->tensor_mutable_data(y);
  const int64_t* xd = cpu_host->tensor_dims(x);
  int64_t pos[CPU_MAX_RANK] = {0};
  for (size_t i = 0, k = 0; i < n; i++) {
    if (nonzero_at(type, p, i)) {
      for (size_t d = 0; d < rank; d++)
        out[d * nnz + k] = pos[d];
      k++;
    }
    for (size_t d = rank; d-- > 0;) {
      if (++pos[d] < xd[d]) break;
      pos[d] = 0;
    }
  }
  return NULL;
}

/* ========================================================================= */
/* Registration                                                               */
/* ========================================================================= */

#define FREE cpu_free_state

static const OnyxTypeConstraint tc_gather[] = {
    {"T", cpu_types_copyable, CPU_ARRAY_LEN(cpu_types_copyable)},
    {"Tind", cpu_types_index, CPU_ARRAY_LEN(cpu_types_index)}};
static const OnyxTypeConstraint tc_nd[] = {
    {"T", cpu_types_copyable, CPU_ARRAY_LEN(cpu_types_copyable)}};
static const OnyxTypeConstraint tc_onehot[] = {
    {"T1", cpu_types_numeric, CPU_ARRAY_LEN(cpu_types_numeric)},
    {"T2", cpu_types_numeric, CPU_ARRAY_LEN(cpu_types_numeric)},
    {"T3", cpu_types_copyable, CPU_ARRAY_LEN(cpu_types_copyable)}};
static const OnyxTypeConstraint tc_compress[] = {
    {"T", cpu_types_copyable, CPU_ARRAY_LEN(cpu_types_copyable)},
    {"T1", cpu_types_bool, CPU_ARRAY_LEN(cpu_types_bool)}};
static const OnyxTypeConstraint tc_nonzero[] = {
    {"T", cpu_types_numeric_bool, CPU_ARRAY_LEN(cpu_types_numeric_bool)}};

static const CpuKernelSpec gather_scatter_specs[] = {
    {"GatherElements", 11, ONYX_OPSET_LATEST, tc_gather, 2, cpu_idx_create, gather_elements_compute,
     FREE, NULL},
    {"ScatterElements", 11, ONYX_OPSET_LATEST, tc_gather, 2, cpu_idx_create,
     scatter_elements_compute, FREE, NULL},
    {"Scatter", 9, ONYX_OPSET_LATEST, tc_gather, 2, cpu_idx_create, scatter_elements_compute, FREE,
     NULL},
    {"GatherND", 11, ONYX_OPSET_LATEST, tc_nd, 1, cpu_idx_create, gather_nd_compute, FREE, NULL},
    {"ScatterND", 11, ONYX_OPSET_LATEST, tc_nd, 1, cpu_idx_create, scatter_nd_compute, FREE, NULL},
    {"TensorScatter", 24, ONYX_OPSET_LATEST, tc_nd, 1, cpu_idx_create, tensor_scatter_compute, FREE,
     NULL},
    {"OneHot", 9, ONYX_OPSET_LATEST, tc_onehot, 3, cpu_idx_create, one_hot_compute, FREE, NULL},
    {"Compress", 9, ONYX_OPSET_LATEST, tc_compress, 2, cpu_idx_create, compress_compute, FREE,
     NULL},
    {"NonZero", 9, ONYX_OPSET_LATEST, tc_nonzero, 1, cpu_idx_create, nonzero_compute, FREE, NULL},
};

OnyxStatus* cpu_register_gather_scatter(OnyxKernelRegistry* r) {
  return cpu_register_specs(r, gather_scatter_specs, CPU_ARRAY_LEN(gather_scatter_specs));
}
