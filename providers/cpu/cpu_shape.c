/* cpu_shape.c — kernels that move data without computing on it: Reshape,
 * Flatten, Transpose, Concat, Split, Slice, Squeeze, Unsqueeze, Gather,
 * Shape, Constant, ConstantOfShape, Expand.
 *
 * They work for every fixed-size element type (and strings) because they
 * only copy elements: cpu_copy_elems for dense runs, cpu_copy_strided for
 * transposed, sliced or broadcast views. Outputs are fresh copies; aliasing
 * (ONYX_ALIAS_VIEW) is a later optimisation. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_util.h"

/* Attributes read once at create. Arrays are owned by the node, which lives
 * as long as the session. */
typedef struct ShapeState {
  int64_t axis;
  const int64_t* ints; /* shape, perm, axes, split, starts... (op-specific) */
  size_t n_ints;
  bool has_ints;
  const int64_t* ends; /* Slice < 10 */
  size_t n_ends;
  const int64_t* axes; /* Slice < 10 */
  size_t n_axes;
  bool allowzero;
  int version; /* which behaviour of the op (see each op) */
  int64_t start, end;
  bool has_end;
} ShapeState;

static OnyxStatus* state_new(const OnyxNode* node, ShapeState** out) {
  *out = calloc(1, sizeof **out);
  return *out ? NULL : cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
}

/* Reads an INTS attribute into (ints, n_ints, has_ints). */
static void state_ints(ShapeState* s, const OnyxNode* node, const char* name) {
  s->has_ints = cpu_host->node_attr_type(node, name) == ONYX_ATTR_INTS;
  s->ints = cpu_host->node_attr_ints(node, name, &s->n_ints);
}

/* Allocates output 0 with dims and copies all of input 0 into it. */
static OnyxStatus* copy_to_shape(OnyxKernelContext* ctx, const int64_t* dims, size_t rank) {
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, dims, rank, &y);
  if (st) return st;
  return cpu_copy_elems(y, 0, x, 0, cpu_host->tensor_elem_count(x));
}

/* ========================================================================= */
/* Reshape                                                                    */
/* ========================================================================= */

/* version 1: shape attribute (opset < 5); 5: shape input and allowzero. */
static OnyxStatus* reshape_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  ShapeState* s;
  OnyxStatus* st = state_new(node, &s);
  if (st) return st;
  s->version = (int)(intptr_t)user;
  if (s->version == 1) state_ints(s, node, "shape");
  s->allowzero = cpu_host->node_attr_int(node, "allowzero", 0) != 0;
  *out = s;
  return NULL;
}

/* The output shape: 0 copies the input's dim (unless allowzero), one -1 is
 * inferred from the element count. */
static OnyxStatus* reshape_dims(const OnyxKernelContext* ctx, const OnyxTensor* x,
                                const int64_t* req, size_t n, bool allowzero, int64_t* out) {
  OnyxStatus* st = cpu_check_rank(ctx, n);
  if (st) return st;
  const int64_t* in = cpu_host->tensor_dims(x);
  size_t in_rank = cpu_host->tensor_rank(x), total = cpu_host->tensor_elem_count(x);
  size_t known = 1, infer = n;
  for (size_t i = 0; i < n; i++) {
    int64_t v = req[i];
    if (v == 0 && !allowzero) {
      if (i >= in_rank)
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                             "shape[%zu] is 0 but the input has only %zu dims", i, in_rank);
      v = in[i];
    }
    if (v == -1) {
      if (infer != n)
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "shape has more than one -1");
      infer = i;
      continue;
    }
    if (v < 0)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "shape[%zu] is %lld", i, (long long)v);
    out[i] = v;
  }
  /* the known dims' product (0 when one is 0, however large the others) */
  int64_t kd[CPU_MAX_RANK];
  size_t nk = 0;
  for (size_t i = 0; i < n; i++)
    if (i != infer) kd[nk++] = out[i];
  if (!cpu_dims_count(kd, nk, &known))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "integer overflow: the product of shape does not fit in size_t");
  if (infer != n) {
    if (known == 0 || total % known != 0)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "cannot infer the -1 dim: %zu elements over %zu", total, known);
    out[infer] = (int64_t)(total / known);
  } else if (known != total) {
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "shape holds %zu elements, the input %zu",
                         known, total);
  }
  return NULL;
}

static OnyxStatus* reshape_compute(void* state, OnyxKernelContext* ctx) {
  const ShapeState* s = state;
  const int64_t* req = s->ints;
  size_t n = s->n_ints;
  OnyxStatus* st;
  if (s->version != 1) {
    int64_t* buf;
    if ((st = cpu_read_ints_scratch(ctx, cpu_host->ctx_input(ctx, 1), "shape", &buf, &n)))
      return st;
    req = buf;
  }
  int64_t dims[CPU_MAX_RANK];
  if ((st = reshape_dims(ctx, cpu_host->ctx_input(ctx, 0), req, n, s->allowzero, dims))) return st;
  return copy_to_shape(ctx, dims, n);
}

/* ========================================================================= */
/* Flatten                                                                    */
/* ========================================================================= */

static OnyxStatus* axis_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  ShapeState* s;
  OnyxStatus* st = state_new(node, &s);
  if (st) return st;
  s->axis = cpu_host->node_attr_int(node, "axis", (int64_t)(intptr_t)user);
  *out = s;
  return NULL;
}

static OnyxStatus* flatten_compute(void* state, OnyxKernelContext* ctx) {
  const ShapeState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  size_t rank = cpu_host->tensor_rank(x), axis;
  if (!cpu_norm_axis(s->axis, rank, true, &axis))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld out of range for rank %zu",
                         (long long)s->axis, rank);
  const int64_t* d = cpu_host->tensor_dims(x);
  int64_t dims[2] = {(int64_t)cpu_dims_product(d, 0, axis),
                     (int64_t)cpu_dims_product(d, axis, rank)};
  return copy_to_shape(ctx, dims, 2);
}

/* ========================================================================= */
/* Transpose                                                                  */
/* ========================================================================= */

static OnyxStatus* ints_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  ShapeState* s;
  OnyxStatus* st = state_new(node, &s);
  if (st) return st;
  state_ints(s, node, (const char*)user);
  s->axis = cpu_host->node_attr_int(node, "axis", 0);
  *out = s;
  return NULL;
}

static OnyxStatus* transpose_compute(void* state, OnyxKernelContext* ctx) {
  const ShapeState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  size_t rank = cpu_host->tensor_rank(x);
  OnyxStatus* st = cpu_check_rank(ctx, rank);
  if (st) return st;
  if (s->has_ints && s->n_ints != rank)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "perm has %zu values for rank %zu", s->n_ints,
                         rank);
  const int64_t* in = cpu_host->tensor_dims(x);
  int64_t in_strides[CPU_MAX_RANK], dims[CPU_MAX_RANK], strides[CPU_MAX_RANK];
  bool seen[CPU_MAX_RANK] = {false};
  cpu_dense_strides(in, rank, in_strides);
  for (size_t i = 0; i < rank; i++) {
    int64_t p = s->has_ints ? s->ints[i] : (int64_t)(rank - 1 - i); /* default: reversed */
    if (p < 0 || p >= (int64_t)rank || seen[p])
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "perm is not a permutation of 0..%zu",
                           rank ? rank - 1 : 0);
    seen[p] = true;
    dims[i] = in[p];
    strides[i] = in_strides[p];
  }
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, dims, rank, &y))) return st;
  return cpu_copy_strided_ctx(ctx, y, x, rank, dims, strides, 0);
}

/* ========================================================================= */
/* Concat                                                                     */
/* ========================================================================= */

/* Concat of fixed-size elements split over the thread pool: the copies
 * (one per input and outer index) cut into pieces of CONCAT_PIECE bytes,
 * the pieces shared out by the pool, each written by one task (so the
 * result does not depend on the thread count). *done false: the caller
 * copies serially (strings, no pool, under CONCAT_PARALLEL_BYTES, or more
 * than CONCAT_MAX_PIECES pieces, whose list would cost more than it saves). */
#define CONCAT_PIECE          ((size_t)64 << 10)
#define CONCAT_PARALLEL_BYTES ((size_t)256 << 10)
#define CONCAT_MAX_PIECES     ((size_t)1 << 16)

typedef struct ConcatPiece {
  char* d;
  const char* s;
  size_t bytes;
} ConcatPiece;

typedef struct ConcatJob {
  const ConcatPiece* pieces;
  CpuStop stop;
} ConcatJob;

static void concat_pieces(void* user, size_t p0, size_t p1) {
  ConcatJob* j = user;
  size_t polled = 0;
  for (size_t p = p0; p < p1; p++) {
    if (cpu_stop_poll(&j->stop, &polled, j->pieces[p].bytes / 4 + 1)) return;
    memcpy(j->pieces[p].d, j->pieces[p].s, j->pieces[p].bytes);
  }
}

static OnyxStatus* concat_parallel(OnyxKernelContext* ctx, OnyxTensor* y, size_t n, size_t outer,
                                   size_t inner, size_t out_row, size_t axis, bool* done) {
  *done = false;
  const int32_t type = cpu_host->tensor_elem_type(y);
  const size_t es = cpu_elem_size(type);
  OnyxThreadPool* pool = cpu_host->ctx_thread_pool(ctx);
  const size_t total = cpu_host->tensor_elem_count(y);
  if (type == ONYX_ELEM_STRING || !es || !pool || total < CONCAT_PARALLEL_BYTES / es) return NULL;
  size_t count = 0;
  for (size_t k = 0; k < n; k++) {
    const size_t row = (size_t)cpu_host->tensor_dims(cpu_host->ctx_input(ctx, k))[axis] * inner;
    const size_t per = (row * es + CONCAT_PIECE - 1) / CONCAT_PIECE; /* row * es <= total bytes */
    if (per && outer > (CONCAT_MAX_PIECES - count) / per) return NULL;
    count += outer * per;
  }
  if (count < 2) return NULL;
  ConcatPiece* pieces = cpu_host->ctx_scratch(ctx, count * sizeof *pieces);
  if (!pieces) return cpu_oom(ctx);
  char* d = cpu_host->tensor_mutable_data(y);
  size_t at = 0, p = 0;
  for (size_t k = 0; k < n; k++) {
    const OnyxTensor* x = cpu_host->ctx_input(ctx, k);
    const size_t row = (size_t)cpu_host->tensor_dims(x)[axis] * inner;
    const char* s = cpu_host->tensor_data(x);
    for (size_t o = 0; o < outer && row; o++)
      for (size_t b = 0; b < row * es; b += CONCAT_PIECE)
        pieces[p++] =
            (ConcatPiece){.d = d + (o * out_row + at) * es + b,
                          .s = s + o * row * es + b,
                          .bytes = row * es - b < CONCAT_PIECE ? row * es - b : CONCAT_PIECE};
    at += row;
  }
  ConcatJob j = {.pieces = pieces, .stop = {.ctx = ctx}};
  cpu_host->parallel_for(pool, p, concat_pieces, &j);
  *done = true;
  return cpu_stop_seen(&j.stop) ? cpu_cancelled(ctx, "Concat") : NULL;
}

static OnyxStatus* concat_compute(void* state, OnyxKernelContext* ctx) {
  const ShapeState* s = state;
  size_t n = cpu_host->ctx_input_count(ctx);
  const OnyxTensor* x0 = cpu_host->ctx_input(ctx, 0);
  size_t rank = cpu_host->tensor_rank(x0), axis;
  OnyxStatus* st = cpu_check_rank(ctx, rank);
  if (st) return st;
  if (rank == 0 || !cpu_norm_axis(s->axis, rank, false, &axis))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld out of range for rank %zu",
                         (long long)s->axis, rank);
  int64_t dims[CPU_MAX_RANK];
  memcpy(dims, cpu_host->tensor_dims(x0), rank * sizeof *dims);
  dims[axis] = 0;
  for (size_t k = 0; k < n; k++) {
    const OnyxTensor* x = cpu_host->ctx_input(ctx, k);
    const int64_t* d = cpu_host->tensor_dims(x);
    bool ok = cpu_host->tensor_rank(x) == rank;
    for (size_t i = 0; ok && i < rank; i++)
      ok = i == axis || d[i] == dims[i];
    if (!ok)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "input %zu's shape differs from input 0's outside axis %zu", k, axis);
    if (!cpu_add_i64(dims[axis], d[axis], &dims[axis]))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "integer overflow: axis %zu of the inputs up to input %zu adds up past "
                           "int64",
                           axis, k);
  }
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, dims, rank, &y))) return st;
  size_t outer = cpu_dims_product(dims, 0, axis), inner = cpu_dims_product(dims, axis + 1, rank);
  size_t out_row = (size_t)dims[axis] * inner, at = 0;
  bool done = false;
  if ((st = concat_parallel(ctx, y, n, outer, inner, out_row, axis, &done)) || done) return st;
  for (size_t k = 0; k < n; k++) {
    const OnyxTensor* x = cpu_host->ctx_input(ctx, k);
    size_t row = (size_t)cpu_host->tensor_dims(x)[axis] * inner;
    for (size_t o = 0; o < outer && row; o++)
      if ((st = cpu_copy_elems(y, o * out_row + at, x, o * row, row))) return st;
    at += row;
  }
  return NULL;
}

/* ========================================================================= */
/* Split                                                                      */
/* ========================================================================= */

/* version 1: split attribute or input 1 (any numeric type); 2: attribute;
 * 13: int64 input; 18: int64 input or num_outputs, uneven last chunk. */
static OnyxStatus* split_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  ShapeState* s;
  OnyxStatus* st = state_new(node, &s);
  if (st) return st;
  s->version = (int)(intptr_t)user;
  s->axis = cpu_host->node_attr_int(node, "axis", 0);
  if (s->version < 13) state_ints(s, node, "split");
  *out = s;
  return NULL;
}

/* Lengths from input 1 (in scratch). */
static OnyxStatus* split_input(OnyxKernelContext* ctx, const ShapeState* s, const OnyxTensor* t,
                               const int64_t** out, size_t* n) {
  if (s->version != 1) return cpu_read_ints_scratch(ctx, t, "split", (int64_t**)out, n);
  size_t count = cpu_host->tensor_elem_count(t);
  int64_t* buf = cpu_host->ctx_scratch(ctx, (count ? count : 1) * sizeof *buf);
  if (!buf) return cpu_oom(ctx);
  for (size_t i = 0; i < count; i++) {
    CpuNum v;
    if (!cpu_num_load(cpu_host->tensor_elem_type(t), cpu_host->tensor_data(t), i, &v))
      return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "split input type not supported");
    buf[i] = (int64_t)cpu_num_as_double(v);
  }
  *out = buf;
  *n = count;
  return NULL;
}

/* The chunk lengths: given, or equal parts (opset 18: the last one smaller). */
static OnyxStatus* split_lengths(OnyxKernelContext* ctx, const ShapeState* s, int64_t dim,
                                 size_t n_out, int64_t* len) {
  const int64_t* given = s->has_ints ? s->ints : NULL;
  size_t n = s->n_ints;
  const OnyxTensor* t = cpu_host->ctx_input_count(ctx) > 1 ? cpu_host->ctx_input(ctx, 1) : NULL;
  OnyxStatus* st;
  if (!given && t && (st = split_input(ctx, s, t, &given, &n))) return st;
  if (given) {
    if (n != n_out)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "split has %zu values for %zu outputs", n,
                           n_out);
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
      if (given[i] < 0)
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "split[%zu] is negative", i);
      len[i] = given[i];
      if (!cpu_add_i64(sum, given[i], &sum))
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                             "integer overflow: split sums past int64 at split[%zu] = %lld", i,
                             (long long)given[i]);
    }
    if (sum != dim)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "split sums to %lld, the axis has %lld",
                           (long long)sum, (long long)dim);
    return NULL;
  }
  if (s->version < 18 && dim % (int64_t)n_out != 0)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis of %lld does not split in %zu parts",
                         (long long)dim, n_out);
  int64_t chunk = dim / (int64_t)n_out + (dim % (int64_t)n_out != 0), left = dim;
  for (size_t i = 0; i < n_out; i++) {
    len[i] = left < chunk ? left : chunk;
    left -= len[i];
  }
  return NULL;
}

static OnyxStatus* split_compute(void* state, OnyxKernelContext* ctx) {
  const ShapeState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  size_t rank = cpu_host->tensor_rank(x), axis, n_out = cpu_host->ctx_output_count(ctx);
  OnyxStatus* st = cpu_check_rank(ctx, rank);
  if (st) return st;
  if (!cpu_norm_axis(s->axis, rank, false, &axis))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld out of range for rank %zu",
                         (long long)s->axis, rank);
  int64_t dims[CPU_MAX_RANK];
  memcpy(dims, cpu_host->tensor_dims(x), rank * sizeof *dims);
  int64_t* len = cpu_host->ctx_scratch(ctx, (n_out ? n_out : 1) * sizeof *len);
  if (!len) return cpu_oom(ctx);
  if ((st = split_lengths(ctx, s, dims[axis], n_out, len))) return st;
  size_t outer = cpu_dims_product(dims, 0, axis), inner = cpu_dims_product(dims, axis + 1, rank);
  size_t in_row = (size_t)dims[axis] * inner, at = 0;
  for (size_t j = 0; j < n_out; j++) {
    OnyxTensor* y;
    dims[axis] = len[j];
    if ((st = cpu_host->ctx_output(ctx, j, dims, rank, &y))) return st;
    size_t row = (size_t)len[j] * inner;
    for (size_t o = 0; o < outer && row; o++)
      if ((st = cpu_copy_elems(y, o * row, x, o * in_row + at, row))) return st;
    at += row;
  }
  return NULL;
}

/* ========================================================================= */
/* Slice                                                                      */
/* ========================================================================= */

/* version 1: starts/ends/axes attributes; 10: inputs, with steps. */
static OnyxStatus* slice_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  ShapeState* s;
  OnyxStatus* st = state_new(node, &s);
  if (st) return st;
  s->version = (int)(intptr_t)user;
  if (s->version == 1) {
    state_ints(s, node, "starts");
    s->ends = cpu_host->node_attr_ints(node, "ends", &s->n_ends);
    s->axes = cpu_host->node_attr_ints(node, "axes", &s->n_axes);
  }
  *out = s;
  return NULL;
}

typedef struct SliceArgs {
  const int64_t *starts, *ends, *axes, *steps; /* axes, steps may be NULL */
  size_t n;
} SliceArgs;

static OnyxStatus* slice_optional(OnyxKernelContext* ctx, size_t i, const char* what, size_t n,
                                  const int64_t** out) {
  const OnyxTensor* t = i < cpu_host->ctx_input_count(ctx) ? cpu_host->ctx_input(ctx, i) : NULL;
  *out = NULL;
  if (!t) return NULL;
  size_t count;
  OnyxStatus* st = cpu_read_ints_scratch(ctx, t, what, (int64_t**)out, &count);
  if (!st && count != n)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "'%s' has %zu values, 'starts' %zu", what,
                         count, n);
  return st;
}

static OnyxStatus* slice_args(OnyxKernelContext* ctx, const ShapeState* s, SliceArgs* a) {
  if (s->version == 1) {
    if (s->n_ends != s->n_ints || (s->axes && s->n_axes != s->n_ints))
      return cpu_ctx_error(ctx, ONYX_INVALID_MODEL, "starts, ends and axes differ in length");
    *a = (SliceArgs){s->ints, s->ends, s->n_axes ? s->axes : NULL, NULL, s->n_ints};
    return NULL;
  }
  size_t n_ends;
  OnyxStatus* st = cpu_read_ints_scratch(ctx, cpu_host->ctx_input(ctx, 1), "starts",
                                         (int64_t**)&a->starts, &a->n);
  if (!st)
    st = cpu_read_ints_scratch(ctx, cpu_host->ctx_input(ctx, 2), "ends", (int64_t**)&a->ends,
                               &n_ends);
  if (!st && n_ends != a->n)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "'ends' has %zu values, 'starts' %zu", n_ends,
                         a->n);
  if (!st) st = slice_optional(ctx, 3, "axes", a->n, &a->axes);
  if (!st) st = slice_optional(ctx, 4, "steps", a->n, &a->steps);
  return st;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* The first index and element count of one sliced axis, as the spec says:
 * negative indices count from the end, then clamp to the valid range (for
 * negative steps [0, dim-1] for start and [-1, dim-1] for end). */
static void slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t* first,
                       int64_t* count) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step == INT64_MIN) step = -INT64_MAX; /* so that -step exists; counts stay the same */
  if (step > 0) {
    start = clamp64(start, 0, dim);
    end = clamp64(end, 0, dim);
    *count = end > start ? (end - start - 1) / step + 1 : 0;
  } else {
    start = clamp64(start, 0, dim - 1);
    end = clamp64(end, -1, dim - 1);
    *count = start > end ? (start - end - 1) / -step + 1 : 0;
  }
  *first = *count ? start : 0;
}

static OnyxStatus* slice_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  size_t rank = cpu_host->tensor_rank(x);
  OnyxStatus* st = cpu_check_rank(ctx, rank);
  if (st) return st;
  SliceArgs a;
  if ((st = slice_args(ctx, state, &a))) return st;
  const int64_t* in = cpu_host->tensor_dims(x);
  int64_t dims[CPU_MAX_RANK], strides[CPU_MAX_RANK], in_strides[CPU_MAX_RANK], offset = 0;
  bool seen[CPU_MAX_RANK] = {false};
  cpu_dense_strides(in, rank, in_strides);
  memcpy(dims, in, rank * sizeof *dims);
  memcpy(strides, in_strides, rank * sizeof *strides);
  for (size_t i = 0; i < a.n; i++) {
    int64_t ax = a.axes ? a.axes[i] : (int64_t)i, step = a.steps ? a.steps[i] : 1, first;
    size_t d;
    if (!cpu_norm_axis(ax, rank, false, &d) || seen[d])
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld is out of range or repeated",
                           (long long)ax);
    if (step == 0) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "steps[%zu] is 0", i);
    seen[d] = true;
    slice_axis(in[d], a.starts[i], a.ends[i], step, &first, &dims[d]);
    offset += first * in_strides[d];
    /* With two or more elements |step| < dim, so the product fits; one
     * element needs no stride (a step of INT64_MAX would overflow it). */
    strides[d] = dims[d] > 1 ? in_strides[d] * step : in_strides[d];
  }
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, dims, rank, &y))) return st;
  return cpu_copy_strided_ctx(ctx, y, x, rank, dims, strides, offset);
}

/* ========================================================================= */
/* Squeeze / Unsqueeze                                                        */
/* ========================================================================= */

/* version 1: axes attribute; 13: axes input. */
static OnyxStatus* axes_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  ShapeState* s;
  OnyxStatus* st = state_new(node, &s);
  if (st) return st;
  s->version = (int)(intptr_t)user;
  if (s->version == 1) state_ints(s, node, "axes");
  *out = s;
  return NULL;
}

/* The axes (attribute or input 1); *present false when there are none. */
static OnyxStatus* read_axes(OnyxKernelContext* ctx, const ShapeState* s, const int64_t** axes,
                             size_t* n, bool* present) {
  *axes = s->ints;
  *n = s->n_ints;
  *present = s->has_ints;
  if (s->version == 1) return NULL;
  const OnyxTensor* t = cpu_host->ctx_input_count(ctx) > 1 ? cpu_host->ctx_input(ctx, 1) : NULL;
  *present = t != NULL;
  if (!t) return NULL;
  return cpu_read_ints_scratch(ctx, t, "axes", (int64_t**)axes, n);
}

static OnyxStatus* squeeze_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  size_t rank = cpu_host->tensor_rank(x), n, out_rank = 0;
  OnyxStatus* st = cpu_check_rank(ctx, rank);
  if (st) return st;
  const int64_t* axes;
  bool present, mark[CPU_MAX_RANK] = {false};
  if ((st = read_axes(ctx, state, &axes, &n, &present))) return st;
  if ((st = cpu_mark_axes(ctx, axes, n, rank, mark))) return st;
  const int64_t* in = cpu_host->tensor_dims(x);
  int64_t dims[CPU_MAX_RANK];
  for (size_t d = 0; d < rank; d++) {
    if (present && n > 0 && mark[d] && in[d] != 1)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "cannot squeeze axis %zu of size %lld", d,
                           (long long)in[d]);
    bool drop = (present && n > 0) ? mark[d] : in[d] == 1; /* no axes: every 1 */
    if (!drop) dims[out_rank++] = in[d];
  }
  return copy_to_shape(ctx, dims, out_rank);
}

static OnyxStatus* unsqueeze_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  size_t rank = cpu_host->tensor_rank(x), n;
  const int64_t* axes;
  bool present, mark[CPU_MAX_RANK] = {false};
  OnyxStatus* st = read_axes(ctx, state, &axes, &n, &present);
  if (st) return st;
  if (!present) return cpu_ctx_error(ctx, ONYX_INVALID_MODEL, "axes are required");
  size_t out_rank = rank + n;
  if ((st = cpu_check_rank(ctx, out_rank))) return st;
  if ((st = cpu_mark_axes(ctx, axes, n, out_rank, mark))) return st;
  const int64_t* in = cpu_host->tensor_dims(x);
  int64_t dims[CPU_MAX_RANK];
  for (size_t d = 0, k = 0; d < out_rank; d++)
    dims[d] = mark[d] ? 1 : in[k++];
  return copy_to_shape(ctx, dims, out_rank);
}

/* ========================================================================= */
/* Gather                                                                     */
/* ========================================================================= */

/* Reads index i of an int32/int64 tensor, made non-negative; false if out of range. */
static bool gather_index(const OnyxTensor* t, size_t i, int64_t dim, int64_t* out) {
  const void* p = cpu_host->tensor_data(t);
  int64_t v = cpu_host->tensor_elem_type(t) == ONYX_ELEM_INT64 ? ((const int64_t*)p)[i]
                                                               : ((const int32_t*)p)[i];
  *out = v;
  if (v < -dim || v >= dim) return false;
  if (v < 0) *out = v + dim;
  return true;
}

static OnyxStatus* gather_compute(void* state, OnyxKernelContext* ctx) {
  const ShapeState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* idx = cpu_host->ctx_input(ctx, 1);
  size_t rank = cpu_host->tensor_rank(x), q = cpu_host->tensor_rank(idx), axis;
  OnyxStatus* st = cpu_check_rank(ctx, rank + q);
  if (st) return st;
  if (rank == 0 || !cpu_norm_axis(s->axis, rank, false, &axis))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld out of range for rank %zu",
                         (long long)s->axis, rank);
  const int64_t* in = cpu_host->tensor_dims(x);
  int64_t dims[CPU_MAX_RANK];
  size_t r = 0;
  for (size_t d = 0; d < axis; d++)
    dims[r++] = in[d];
  for (size_t d = 0; d < q; d++)
    dims[r++] = cpu_host->tensor_dims(idx)[d];
  for (size_t d = axis + 1; d < rank; d++)
    dims[r++] = in[d];
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, dims, r, &y))) return st;
  size_t outer = cpu_dims_product(in, 0, axis), inner = cpu_dims_product(in, axis + 1, rank);
  size_t n_idx = cpu_host->tensor_elem_count(idx);
  int64_t dim = in[axis];
  for (size_t j = 0; j < n_idx; j++) { /* check all first: no half-written output */
    int64_t v;
    if (!gather_index(idx, j, dim, &v))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "index %lld (element %zu) out of range [-%lld, %lld)", (long long)v, j,
                           (long long)dim, (long long)dim);
  }
  for (size_t o = 0; o < outer && inner; o++)
    for (size_t j = 0; j < n_idx; j++) {
      int64_t v;
      gather_index(idx, j, dim, &v);
      st = cpu_copy_elems(y, (o * n_idx + j) * inner, x, (o * (size_t)dim + (size_t)v) * inner,
                          inner);
      if (st) return st;
    }
  return NULL;
}

/* ========================================================================= */
/* Shape                                                                      */
/* ========================================================================= */

/* version 1: the whole shape; 15: dims[start:end]. */
static OnyxStatus* shape_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  ShapeState* s;
  OnyxStatus* st = state_new(node, &s);
  if (st) return st;
  if ((intptr_t)user == 15) {
    s->start = cpu_host->node_attr_int(node, "start", 0);
    s->has_end = cpu_host->node_attr_type(node, "end") == ONYX_ATTR_INT;
    s->end = cpu_host->node_attr_int(node, "end", 0);
  }
  *out = s;
  return NULL;
}

static OnyxStatus* shape_compute(void* state, OnyxKernelContext* ctx) {
  const ShapeState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  int64_t r = (int64_t)cpu_host->tensor_rank(x);
  int64_t start = s->start < 0 ? s->start + r : s->start;
  int64_t end = !s->has_end ? r : s->end < 0 ? s->end + r : s->end;
  start = clamp64(start, 0, r);
  end = clamp64(end, 0, r);
  int64_t n = end > start ? end - start : 0;
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, &n, 1, &y);
  if (st) return st;
  if (n)
    memcpy(cpu_host->tensor_mutable_data(y), cpu_host->tensor_dims(x) + start,
           (size_t)n * sizeof(int64_t));
  return NULL;
}

/* ========================================================================= */
/* Constant                                                                   */
/* ========================================================================= */

typedef struct ConstState {
  const OnyxTensor* tensor; /* `value`; NULL for the value_* forms */
  int32_t type;
  size_t rank; /* 0 or 1 */
  int64_t dim;
  const void* data;           /* numbers */
  const char* const* strings; /* value_strings */
  const size_t* strings_len;  /* their byte lengths (NULs included); NULL: up to the first NUL */
  const char* string;         /* value_string */
  size_t string_len;
  float f;
  int64_t i;
} ConstState;

/* Fills s (zeroed) from whichever of the value attributes the node has. */
static OnyxStatus* const_read(const OnyxNode* node, ConstState* s) {
  const OnyxHostApi* h = cpu_host;
  size_t n = 0;
  s->dim = 1; /* the scalar forms */
  if (h->node_attr_type(node, "value") == ONYX_ATTR_TENSOR) {
    s->tensor = h->node_attr_tensor(node, "value");
    return s->tensor ? NULL : cpu_error(node, ONYX_INVALID_MODEL, "attribute 'value' unreadable");
  }
  if (h->node_attr_type(node, "value_float") == ONYX_ATTR_FLOAT) {
    s->type = ONYX_ELEM_FLOAT32;
    s->f = h->node_attr_float(node, "value_float", 0);
    return NULL;
  }
  if (h->node_attr_type(node, "value_int") == ONYX_ATTR_INT) {
    s->type = ONYX_ELEM_INT64;
    s->i = h->node_attr_int(node, "value_int", 0);
    return NULL;
  }
  if (h->node_attr_type(node, "value_string") == ONYX_ATTR_STRING) {
    s->type = ONYX_ELEM_STRING;
    s->string = h->node_attr_string(node, "value_string", &s->string_len);
    if (!s->string) s->string = "";
    return NULL;
  }
  if (h->node_attr_type(node, "value_floats") == ONYX_ATTR_FLOATS) {
    s->data = h->node_attr_floats(node, "value_floats", &n);
    s->type = ONYX_ELEM_FLOAT32;
  } else if (h->node_attr_type(node, "value_ints") == ONYX_ATTR_INTS) {
    s->data = h->node_attr_ints(node, "value_ints", &n);
    s->type = ONYX_ELEM_INT64;
  } else if (h->node_attr_type(node, "value_strings") == ONYX_ATTR_STRINGS) {
    s->strings = h->node_attr_strings(node, "value_strings", &n);
    s->type = ONYX_ELEM_STRING;
    size_t n_len = 0;
    if (h->struct_size >=
            offsetof(OnyxHostApi, node_attr_strings_lens) + sizeof h->node_attr_strings_lens &&
        h->node_attr_strings_lens) {
      s->strings_len = h->node_attr_strings_lens(node, "value_strings", &n_len);
      if (n_len != n) s->strings_len = NULL;
    }
  } else if (h->node_attr_type(node, "sparse_value") != ONYX_ATTR_UNDEFINED) {
    return cpu_error(node, ONYX_NOT_IMPLEMENTED, "sparse_value is not supported");
  } else {
    return cpu_error(node, ONYX_INVALID_MODEL, "no value attribute");
  }
  s->rank = 1;
  s->dim = (int64_t)n;
  return NULL;
}

static OnyxStatus* const_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  ConstState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  OnyxStatus* st = const_read(node, s);
  if (st) {
    free(s);
    return st;
  }
  *out = s;
  return NULL;
}

static OnyxStatus* const_compute(void* state, OnyxKernelContext* ctx) {
  const ConstState* s = state;
  OnyxTensor* y;
  OnyxStatus* st;
  if (s->tensor) {
    const OnyxTensor* t = s->tensor;
    st = cpu_host->ctx_output(ctx, 0, cpu_host->tensor_dims(t), cpu_host->tensor_rank(t), &y);
    return st ? st : cpu_copy_elems(y, 0, t, 0, cpu_host->tensor_elem_count(t));
  }
  if ((st = cpu_host->ctx_output(ctx, 0, &s->dim, s->rank, &y))) return st;
  if (s->type == ONYX_ELEM_STRING && s->rank == 1)
    for (int64_t i = 0; !st && i < s->dim; i++)
      st = cpu_host->tensor_set_string(y, (size_t)i, s->strings[i],
                                       s->strings_len ? s->strings_len[(size_t)i]
                                                      : strlen(s->strings[i]));
  else if (s->type == ONYX_ELEM_STRING)
    st = cpu_host->tensor_set_string(y, 0, s->string, s->string_len);
  else
    cpu_memcpy(cpu_host->tensor_mutable_data(y),
               s->data                        ? s->data
               : s->type == ONYX_ELEM_FLOAT32 ? (const void*)&s->f
                                              : &s->i,
               (size_t)s->dim * cpu_elem_size(s->type));
  return st;
}

/* ========================================================================= */
/* ConstantOfShape                                                            */
/* ========================================================================= */

static OnyxStatus* cos_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  const OnyxTensor* v = cpu_host->node_attr_type(node, "value") == ONYX_ATTR_TENSOR
                            ? cpu_host->node_attr_tensor(node, "value")
                            : NULL;
  if (v &&
      (cpu_host->tensor_elem_count(v) != 1 || cpu_elem_size(cpu_host->tensor_elem_type(v)) == 0 ||
       cpu_host->tensor_elem_type(v) == ONYX_ELEM_STRING))
    return cpu_error(node, ONYX_INVALID_MODEL, "'value' must be one number");
  *out = (void*)v; /* NULL: float32 zero */
  return NULL;
}

static OnyxStatus* cos_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxTensor* v = state;
  int64_t dims[CPU_MAX_RANK];
  size_t rank;
  OnyxStatus* st =
      cpu_read_ints(ctx, cpu_host->ctx_input(ctx, 0), "input", dims, CPU_MAX_RANK, &rank);
  if (st) return st;
  for (size_t d = 0; d < rank; d++)
    if (dims[d] < 0)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "dim %zu is negative (%lld)", d,
                           (long long)dims[d]);
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, dims, rank, &y))) return st;
  size_t n = cpu_host->tensor_elem_count(y), es = cpu_elem_size(cpu_host->tensor_elem_type(y));
  char* out = cpu_host->tensor_mutable_data(y);
  if (!v) {
    if (n) memset(out, 0, n * es);
    return NULL;
  }
  if (cpu_host->tensor_elem_type(v) != cpu_host->tensor_elem_type(y))
    return cpu_ctx_error(ctx, ONYX_INVALID_MODEL, "'value' type differs from the output's");
  /* per chunk of CPU_STOP_INTERVAL elements: the size comes from the input */
  const void* val = cpu_host->tensor_data(v);
  for (size_t i0 = 0; i0 < n; i0 += CPU_STOP_INTERVAL) {
    if (i0 && cpu_should_stop(ctx)) return cpu_cancelled(ctx, "ConstantOfShape");
    const size_t i1 = n - i0 < CPU_STOP_INTERVAL ? n : i0 + CPU_STOP_INTERVAL;
    for (size_t i = i0; i < i1; i++)
      memcpy(out + i * es, val, es);
  }
  return NULL;
}

/* ========================================================================= */
/* Expand                                                                     */
/* ========================================================================= */

static OnyxStatus* expand_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  int64_t shape[CPU_MAX_RANK], dims[CPU_MAX_RANK];
  size_t n, rank;
  OnyxStatus* st =
      cpu_read_ints(ctx, cpu_host->ctx_input(ctx, 1), "shape", shape, CPU_MAX_RANK, &n);
  if (st) return st;
  const int64_t* in[2] = {cpu_host->tensor_dims(x), shape};
  size_t ranks[2] = {cpu_host->tensor_rank(x), n};
  if ((st = cpu_bcast_shape(ctx, 2, in, ranks, dims, &rank))) return st;
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, dims, rank, &y))) return st;
  /* The broadcast plan of the one input gives the strides to read it with. */
  CpuBcast plan;
  cpu_bcast_plan(&plan, dims, rank, 1, in, ranks);
  return cpu_copy_strided_ctx(ctx, y, x, plan.rank, plan.dims, plan.strides[0], 0);
}

/* ========================================================================= */
/* Registration                                                               */
/* ========================================================================= */

#define V(n) ((void*)(intptr_t)(n))
#define FREE cpu_free_state

static const OnyxTypeConstraint t_any[] = {
    {"T", cpu_types_copyable, CPU_ARRAY_LEN(cpu_types_copyable)}};
static const OnyxTypeConstraint t_ind[] = {
    {"T", cpu_types_copyable, CPU_ARRAY_LEN(cpu_types_copyable)},
    {"Tind", cpu_types_index, CPU_ARRAY_LEN(cpu_types_index)}};
static const int32_t cos_types[] = {
    ONYX_ELEM_FLOAT32, ONYX_ELEM_UINT8,  ONYX_ELEM_INT8,    ONYX_ELEM_UINT16,  ONYX_ELEM_INT16,
    ONYX_ELEM_INT32,   ONYX_ELEM_INT64,  ONYX_ELEM_BOOL,    ONYX_ELEM_FLOAT16, ONYX_ELEM_FLOAT64,
    ONYX_ELEM_UINT32,  ONYX_ELEM_UINT64, ONYX_ELEM_BFLOAT16};
static const OnyxTypeConstraint t_cos[] = {{"T1", cpu_types_int64, 1},
                                           {"T2", cos_types, CPU_ARRAY_LEN(cos_types)}};

static const CpuKernelSpec shape_specs[] = {
    {"Reshape", 1, 4, t_any, 1, reshape_create, reshape_compute, FREE, V(1)},
    {"Reshape", 5, ONYX_OPSET_LATEST, t_any, 1, reshape_create, reshape_compute, FREE, V(5)},
    /* Flatten's axis defaults to 1; Concat-1's to 1 as well (required later). */
    {"Flatten", 1, ONYX_OPSET_LATEST, t_any, 1, axis_create, flatten_compute, FREE, V(1)},
    {"Transpose", 1, ONYX_OPSET_LATEST, t_any, 1, ints_create, transpose_compute, FREE,
     (void*)"perm"},
    {"Concat", 1, ONYX_OPSET_LATEST, t_any, 1, axis_create, concat_compute, FREE, V(1)},
    {"Split", 1, 1, t_any, 1, split_create, split_compute, FREE, V(1)},
    {"Split", 2, 12, t_any, 1, split_create, split_compute, FREE, V(2)},
    {"Split", 13, 17, t_any, 1, split_create, split_compute, FREE, V(13)},
    {"Split", 18, ONYX_OPSET_LATEST, t_any, 1, split_create, split_compute, FREE, V(18)},
    {"Slice", 1, 9, t_any, 1, slice_create, slice_compute, FREE, V(1)},
    {"Slice", 10, ONYX_OPSET_LATEST, t_ind, 2, slice_create, slice_compute, FREE, V(10)},
    {"Squeeze", 1, 12, t_any, 1, axes_create, squeeze_compute, FREE, V(1)},
    {"Squeeze", 13, ONYX_OPSET_LATEST, t_any, 1, axes_create, squeeze_compute, FREE, V(13)},
    {"Unsqueeze", 1, 12, t_any, 1, axes_create, unsqueeze_compute, FREE, V(1)},
    {"Unsqueeze", 13, ONYX_OPSET_LATEST, t_any, 1, axes_create, unsqueeze_compute, FREE, V(13)},
    {"Gather", 1, ONYX_OPSET_LATEST, t_ind, 2, axis_create, gather_compute, FREE, V(0)},
    {"Shape", 1, 14, t_any, 1, shape_create, shape_compute, FREE, V(1)},
    {"Shape", 15, ONYX_OPSET_LATEST, t_any, 1, shape_create, shape_compute, FREE, V(15)},
    {"Constant", 1, ONYX_OPSET_LATEST, t_any, 1, const_create, const_compute, FREE, NULL},
    {"ConstantOfShape", 9, ONYX_OPSET_LATEST, t_cos, 2, cos_create, cos_compute, NULL, NULL},
    {"Expand", 8, ONYX_OPSET_LATEST, t_any, 1, NULL, expand_compute, NULL, NULL},
};

OnyxStatus* cpu_register_shape(OnyxKernelRegistry* r) {
  return cpu_register_specs(r, shape_specs, CPU_ARRAY_LEN(shape_specs));
}
