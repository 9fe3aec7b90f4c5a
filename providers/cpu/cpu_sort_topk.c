/* cpu_sort_topk.c — the CPU provider's sorting kernels: Unique and TopK,
 * over a stable merge sort of indices (numbers by value, NaN last; strings
 * by bytes). Attributes are read by cpu_idx_create (cpu_gather_scatter.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gather_scatter.h"

/* ========================================================================= */
/* Sorting helpers (stable merge sort of indices with a context)              */
/* ========================================================================= */

typedef int (*IdxCmp)(const void* ctx, size_t a, size_t b);

static void merge_sort(size_t* v, size_t* tmp, size_t n, IdxCmp cmp, const void* c) {
  if (n < 2) return;
  size_t h = n / 2;
  merge_sort(v, tmp, h, cmp, c);
  merge_sort(v + h, tmp, n - h, cmp, c);
  size_t i = 0, j = h, k = 0;
  while (i < h && j < n)
    tmp[k++] = cmp(c, v[j], v[i]) < 0 ? v[j++] : v[i++];
  while (i < h)
    tmp[k++] = v[i++];
  while (j < n)
    tmp[k++] = v[j++];
  memcpy(v, tmp, n * sizeof *v);
}

/* Compares element a and b of a tensor (numbers by value, NaN last; strings
 * bytewise). */
static int elem_cmp(const OnyxTensor* t, size_t a, size_t b) {
  int32_t type = cpu_host->tensor_elem_type(t);
  if (type == ONYX_ELEM_STRING) { /* bytewise, NUL bytes included */
    const OnyxHostApi* H = cpu_host;
    const char *sa = H->tensor_string(t, a), *sb = H->tensor_string(t, b);
    bool has_len =
        H->struct_size >= offsetof(OnyxHostApi, tensor_string_len) + sizeof H->tensor_string_len &&
        H->tensor_string_len;
    size_t la = has_len ? H->tensor_string_len(t, a) : strlen(sa);
    size_t lb = has_len ? H->tensor_string_len(t, b) : strlen(sb);
    int c = memcmp(sa, sb, la < lb ? la : lb);
    if (!c) c = (la > lb) - (la < lb);
    return (c > 0) - (c < 0);
  }
  CpuNum x, y;
  const void* p = cpu_host->tensor_data(t);
  if (!cpu_num_load(type, p, a, &x) || !cpu_num_load(type, p, b, &y)) return 0;
  if (x.kind == CPU_NUM_FLT) {
    bool xn = isnan(x.v.f), yn = isnan(y.v.f);
    if (xn || yn) return xn - yn;
    return (x.v.f > y.v.f) - (x.v.f < y.v.f);
  }
  if (x.kind == CPU_NUM_SINT) return (x.v.i > y.v.i) - (x.v.i < y.v.i);
  return (x.v.u > y.v.u) - (x.v.u < y.v.u);
}

/* ========================================================================= */
/* Unique                                                                     */
/* ========================================================================= */

typedef struct UniqCtx {
  const OnyxTensor* x;
  size_t inner, len; /* slice: outer x inner elements along the axis */
  size_t outer;
} UniqCtx;

/* Lexicographic comparison of slices a and b along the axis. */
static int uniq_cmp(const void* c, size_t a, size_t b) {
  const UniqCtx* u = c;
  for (size_t o = 0; o < u->outer; o++)
    for (size_t i = 0; i < u->inner; i++) {
      int r = elem_cmp(u->x, (o * u->len + a) * u->inner + i, (o * u->len + b) * u->inner + i);
      if (r) return r;
    }
  return 0;
}

static int size_cmp(const void* c, size_t a, size_t b) {
  const size_t* v = c;
  return (v[a] > v[b]) - (v[a] < v[b]);
}

static OnyxStatus* unique_compute(void* state, OnyxKernelContext* ctx) {
  const IdxState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  size_t rank = cpu_host->tensor_rank(x), axis = 0;
  OnyxStatus* st = cpu_check_rank(ctx, rank);
  if (st) return st;
  int64_t flat = (int64_t)cpu_host->tensor_elem_count(x);
  const int64_t* xd = s->has_axis ? cpu_host->tensor_dims(x) : &flat;
  size_t xr = s->has_axis ? rank : 1;
  if (s->has_axis && (rank == 0 || !cpu_norm_axis(s->axis, rank, false, &axis)))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld out of range for rank %zu",
                         (long long)s->axis, rank);
  UniqCtx u = {x, cpu_dims_product(xd, axis + 1, xr), (size_t)xd[axis],
               cpu_dims_product(xd, 0, axis)};
  size_t n = u.len, cap = n ? n : 1;
  size_t* order = cpu_host->ctx_scratch(ctx, 6 * cap * sizeof(size_t));
  if (!order) return cpu_oom(ctx);
  size_t *tmp = order + cap, *group = tmp + cap, *first = group + cap, *count = first + cap,
         *rank_of = count + cap;
  for (size_t i = 0; i < n; i++)
    order[i] = i;
  merge_sort(order, tmp, n, uniq_cmp, &u);
  size_t ng = 0; /* groups in sorted order: first occurrence, count */
  for (size_t i = 0; i < n; i++) {
    if (i == 0 || uniq_cmp(&u, order[i - 1], order[i]) != 0) {
      first[ng] = order[i]; /* stable sort: the smallest index comes first */
      count[ng++] = 0;
    }
    count[ng - 1]++;
    group[order[i]] = ng - 1;
  }
  /* Output order of the groups: sorted, or by first occurrence. */
  size_t* out_order = tmp;
  for (size_t g = 0; g < ng; g++)
    out_order[g] = g;
  if (!s->sorted) {
    size_t* tmp2 = order; /* order is no longer needed */
    merge_sort(out_order, tmp2, ng, size_cmp, first);
  }
  for (size_t k = 0; k < ng; k++)
    rank_of[out_order[k]] = k;
  int64_t dims[CPU_MAX_RANK];
  memcpy(dims, xd, xr * sizeof *dims);
  dims[axis] = (int64_t)ng;
  OnyxTensor *y, *yi = NULL, *yinv = NULL, *yc = NULL;
  if ((st = cpu_host->ctx_output(ctx, 0, dims, xr, &y))) return st;
  int64_t ngd = (int64_t)ng, nd = (int64_t)n;
  size_t n_out = cpu_host->ctx_output_count(ctx);
  if (n_out > 1 && (st = cpu_host->ctx_output(ctx, 1, &ngd, 1, &yi))) return st;
  if (n_out > 2 && (st = cpu_host->ctx_output(ctx, 2, &nd, 1, &yinv))) return st;
  if (n_out > 3 && (st = cpu_host->ctx_output(ctx, 3, &ngd, 1, &yc))) return st;
  for (size_t k = 0; k < ng; k++) {
    size_t g = out_order[k];
    for (size_t o = 0; o < u.outer && u.inner; o++)
      if ((st =
               cpu_copy_elems(y, (o * ng + k) * u.inner, x, (o * n + first[g]) * u.inner, u.inner)))
        return st;
    if (yi) ((int64_t*)cpu_host->tensor_mutable_data(yi))[k] = (int64_t)first[g];
    if (yc) ((int64_t*)cpu_host->tensor_mutable_data(yc))[k] = (int64_t)count[g];
  }
  if (yinv)
    for (size_t i = 0; i < n; i++)
      ((int64_t*)cpu_host->tensor_mutable_data(yinv))[i] = (int64_t)rank_of[group[i]];
  return NULL;
}

/* ========================================================================= */
/* TopK                                                                       */
/* ========================================================================= */

typedef struct TopkCtx {
  int32_t type;
  const void* data;
  size_t base, step; /* element j of the row is data[base + j * step] */
  bool largest;
} TopkCtx;

/* Order of the output: best first (NaN counts as the largest, as in numpy's
 * sort), ties by the lower index. Values compare exactly (64-bit integers
 * too). */
static int topk_cmp(const void* c, size_t a, size_t b) {
  const TopkCtx* t = c;
  CpuNum x, y;
  cpu_num_load(t->type, t->data, t->base + a * t->step, &x);
  cpu_num_load(t->type, t->data, t->base + b * t->step, &y);
  int r;
  if (x.kind == CPU_NUM_FLT) {
    bool xn = isnan(x.v.f), yn = isnan(y.v.f);
    r = (xn || yn) ? xn - yn : (x.v.f > y.v.f) - (x.v.f < y.v.f);
  } else if (x.kind == CPU_NUM_SINT) {
    r = (x.v.i > y.v.i) - (x.v.i < y.v.i);
  } else {
    r = (x.v.u > y.v.u) - (x.v.u < y.v.u);
  }
  if (t->largest) r = -r;
  if (r) return r;
  return (a > b) - (a < b);
}

static OnyxStatus* topk_compute(void* state, OnyxKernelContext* ctx) {
  const IdxState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  size_t rank = cpu_host->tensor_rank(x), axis;
  OnyxStatus* st = cpu_check_rank(ctx, rank);
  if (st) return st;
  if (rank == 0 || !cpu_norm_axis(s->axis, rank, false, &axis))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld out of range for rank %zu",
                         (long long)s->axis, rank);
  int64_t k = s->k_attr;
  if (s->version >= 10) {
    int64_t kv[1];
    size_t nk;
    if ((st = cpu_read_ints(ctx, cpu_host->ctx_input(ctx, 1), "K", kv, 1, &nk))) return st;
    if (nk != 1) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "K must hold one value");
    k = kv[0];
  }
  const int64_t* xd = cpu_host->tensor_dims(x);
  if (k < 0 || k > xd[axis])
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "K %lld out of range for an axis of %lld",
                         (long long)k, (long long)xd[axis]);
  int64_t dims[CPU_MAX_RANK];
  memcpy(dims, xd, rank * sizeof *dims);
  dims[axis] = k;
  OnyxTensor *yv, *yi;
  if ((st = cpu_host->ctx_output(ctx, 0, dims, rank, &yv))) return st;
  if ((st = cpu_host->ctx_output(ctx, 1, dims, rank, &yi))) return st;
  size_t outer = cpu_dims_product(xd, 0, axis), inner = cpu_dims_product(xd, axis + 1, rank);
  size_t len = (size_t)xd[axis], cap = len ? len : 1;
  if (outer * inner == 0 || k == 0) return NULL;
  size_t* ord = cpu_host->ctx_scratch(ctx, 2 * cap * sizeof *ord);
  if (!ord) return cpu_oom(ctx);
  int32_t type = cpu_host->tensor_elem_type(x);
  const void* p = cpu_host->tensor_data(x);
  size_t es = cpu_elem_size(type);
  int64_t* oi = cpu_host->tensor_mutable_data(yi);
  TopkCtx tc = {type, p, 0, inner, s->largest};
  for (size_t o = 0; o < outer; o++)
    for (size_t i = 0; i < inner; i++) {
      for (size_t j = 0; j < len; j++)
        ord[j] = j;
      tc.base = o * len * inner + i;
      merge_sort(ord, ord + cap, len, topk_cmp, &tc);
      for (int64_t j = 0; j < k; j++) {
        size_t dst = (o * (size_t)k + (size_t)j) * inner + i;
        memcpy((char*)cpu_host->tensor_mutable_data(yv) + dst * es,
               (const char*)p + ((o * len + ord[j]) * inner + i) * es, es);
        oi[dst] = (int64_t)ord[j];
      }
    }
  return NULL;
}

/* ========================================================================= */
/* Registration                                                               */
/* ========================================================================= */

#define V(n) ((void*)(intptr_t)(n))
#define FREE cpu_free_state

static const OnyxTypeConstraint tc_unique[] = {
    {"T", cpu_types_sortable, CPU_ARRAY_LEN(cpu_types_sortable)}};
static const OnyxTypeConstraint tc_topk[] = {
    {"T", cpu_types_numeric, CPU_ARRAY_LEN(cpu_types_numeric)}, {"I", cpu_types_int64, 1}};

static const CpuKernelSpec sort_specs[] = {
    {"Unique", 11, ONYX_OPSET_LATEST, tc_unique, 1, cpu_idx_create, unique_compute, FREE, NULL},
    {"TopK", 1, 9, tc_topk, 2, cpu_idx_create, topk_compute, FREE, V(1)},
    {"TopK", 10, ONYX_OPSET_LATEST, tc_topk, 2, cpu_idx_create, topk_compute, FREE, V(10)},
};

OnyxStatus* cpu_register_sort_topk(OnyxKernelRegistry* r) {
  return cpu_register_specs(r, sort_specs, CPU_ARRAY_LEN(sort_specs));
}
