/* cpu_reduce.c — the reductions (ReduceSum, ReduceMean, ReduceSumSquare,
 * ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceProd, ReduceMax,
 * ReduceMin) over any set of axes, and ArgMax/ArgMin.
 *
 * The input is first widened into 8-byte values of one of three kinds:
 * floating point (float16/bfloat16/float/double) as double, signed integers
 * as int64 and unsigned integers and bool as uint64. Then one pass over it
 * in memory order adds each element into its output slot. Integer sums and
 * products wrap (two's complement), never undefined; L2, LogSum and
 * LogSumExp of integers are computed in double and truncated.
 *
 * Determinism: every output slot is accumulated in one fixed order (memory
 * order), whether by the single-threaded general pass or by the float32
 * fast path, which splits whole slots (never one slot's run) over the
 * thread pool. Results are bit-identical from run to run and independent of
 * the thread count, so the session's `deterministic` option needs no
 * special path here. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_util.h"

typedef enum ReduceOp {
  R_SUM,
  R_MEAN,
  R_SUMSQ,
  R_L1,
  R_L2,
  R_LOGSUM,
  R_LOGSUMEXP,
  R_PROD,
  R_MAX,
  R_MIN
} ReduceOp;

/* What distinguishes the kernels: the op, and whether axes come from the
 * attribute or from input 1. */
typedef struct ReduceMode {
  ReduceOp op;
  bool axes_input;
} ReduceMode;

typedef struct ReduceState {
  ReduceMode mode;
  const int64_t* axes; /* attribute form; owned by the node */
  size_t n_axes;
  bool keepdims;
  bool noop_with_empty_axes;
} ReduceState;

static OnyxStatus* reduce_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  ReduceState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->mode = *(const ReduceMode*)user;
  if (!s->mode.axes_input) s->axes = cpu_host->node_attr_ints(node, "axes", &s->n_axes);
  s->keepdims = cpu_host->node_attr_int(node, "keepdims", 1) != 0;
  s->noop_with_empty_axes = cpu_host->node_attr_int(node, "noop_with_empty_axes", 0) != 0;
  *out = s;
  return NULL;
}

/* The axes to reduce, marked in `mark`; *noop for empty axes with
 * noop_with_empty_axes (then no axis is reduced). No axes: all of them. */
static OnyxStatus* reduce_axes(OnyxKernelContext* ctx, const ReduceState* s, size_t rank,
                               bool* mark, bool* noop) {
  const int64_t* axes = s->axes;
  size_t n = s->n_axes;
  *noop = false;
  if (s->mode.axes_input && cpu_host->ctx_input_count(ctx) > 1 && cpu_host->ctx_input(ctx, 1)) {
    int64_t* buf;
    OnyxStatus* st = cpu_read_ints_scratch(ctx, cpu_host->ctx_input(ctx, 1), "axes", &buf, &n);
    if (st) return st;
    axes = buf;
  }
  if (n == 0) {
    *noop = s->noop_with_empty_axes;
    for (size_t d = 0; d < rank; d++)
      mark[d] = true;
    return NULL;
  }
  return cpu_mark_axes(ctx, axes, n, rank, mark);
}

/* --- Widening ------------------------------------------------------------------ */

typedef union Wide {
  double f;
  int64_t i;
  uint64_t u;
} Wide;

static CpuNumKind kind_of(int32_t type) {
  switch (type) {
  case ONYX_ELEM_FLOAT32:
  case ONYX_ELEM_FLOAT64:
  case ONYX_ELEM_FLOAT16:
  case ONYX_ELEM_BFLOAT16:
    return CPU_NUM_FLT;
  case ONYX_ELEM_INT8:
  case ONYX_ELEM_INT16:
  case ONYX_ELEM_INT32:
  case ONYX_ELEM_INT64:
    return CPU_NUM_SINT;
  default:
    return CPU_NUM_UINT;
  }
}

/* The input as `count` wide values in scratch memory. */
static OnyxStatus* widen(OnyxKernelContext* ctx, const OnyxTensor* x, Wide** out) {
  size_t count = cpu_host->tensor_elem_count(x);
  int32_t type = cpu_host->tensor_elem_type(x);
  Wide* w = cpu_host->ctx_scratch(ctx, (count ? count : 1) * sizeof *w);
  if (!w) return cpu_oom(ctx);
  const void* p = cpu_host->tensor_data(x);
  if (type == ONYX_ELEM_FLOAT32) {
    for (size_t i = 0; i < count; i++)
      w[i].f = ((const float*)p)[i];
  } else {
    for (size_t i = 0; i < count; i++) {
      CpuNum v;
      if (!cpu_num_load(type, p, i, &v))
        return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "element type %s is not supported",
                             cpu_elem_name(type));
      if (v.kind == CPU_NUM_FLT)
        w[i].f = v.v.f;
      else if (v.kind == CPU_NUM_SINT)
        w[i].i = v.v.i;
      else
        w[i].u = v.v.u;
    }
  }
  *out = w;
  return NULL;
}

/* Stores a wide value of kind k as element i of y. */
static void store_wide(OnyxTensor* y, size_t i, CpuNumKind k, Wide v) {
  CpuNum n = {.kind = k};
  if (k == CPU_NUM_FLT)
    n.v.f = v.f;
  else if (k == CPU_NUM_SINT)
    n.v.i = v.i;
  else
    n.v.u = v.u;
  cpu_num_store(cpu_host->tensor_elem_type(y), cpu_host->tensor_mutable_data(y), i, n);
}

/* --- Reduction ------------------------------------------------------------------ */

/* The starting value of an accumulator. */
static Wide reduce_init(ReduceOp op, CpuNumKind k, int32_t type) {
  Wide w = {.u = 0};
  if (k == CPU_NUM_FLT) {
    w.f = op == R_PROD ? 1.0 : op == R_MAX ? -INFINITY : op == R_MIN ? INFINITY : 0.0;
    return w;
  }
  if (op == R_PROD) {
    w.u = 1;
  } else if (op == R_MAX || op == R_MIN) {
    bool mx = op == R_MAX;
    if (k == CPU_NUM_SINT) {
      size_t bits = cpu_elem_size(type) * 8;
      int64_t hi = (int64_t)((UINT64_C(1) << (bits - 1)) - 1);
      w.i = mx ? -hi - 1 : hi;
    } else if (type == ONYX_ELEM_BOOL) {
      w.u = mx ? 0 : 1;
    } else {
      size_t bits = cpu_elem_size(type) * 8;
      w.u = mx ? 0 : bits == 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
    }
  }
  return w;
}

/* acc = acc (op) v for one element. For floats, `shift` is the per-slot
 * maximum subtracted before exp (LogSumExp). Integer arithmetic is done in
 * uint64 so that overflow wraps. */
static inline void reduce_step(ReduceOp op, CpuNumKind k, Wide* acc, Wide v, double shift) {
  if (k == CPU_NUM_FLT) {
    double x = v.f;
    switch (op) {
    case R_SUM:
    case R_MEAN:
    case R_LOGSUM:
      acc->f += x;
      break;
    case R_SUMSQ:
    case R_L2:
      acc->f += x * x;
      break;
    case R_L1:
      acc->f += fabs(x);
      break;
    case R_LOGSUMEXP:
      acc->f += exp(x - shift);
      break;
    case R_PROD:
      acc->f *= x;
      break;
    case R_MAX:
      if (isnan(x) || x > acc->f) acc->f = isnan(acc->f) ? acc->f : x;
      break;
    case R_MIN:
      if (isnan(x) || x < acc->f) acc->f = isnan(acc->f) ? acc->f : x;
      break;
    }
    return;
  }
  bool sgn = k == CPU_NUM_SINT;
  uint64_t u = v.u;
  switch (op) {
  case R_SUM:
  case R_MEAN:
    acc->u += u;
    break;
  case R_SUMSQ:
    acc->u += u * u;
    break;
  case R_L1:
    acc->u += (sgn && v.i < 0) ? (uint64_t)0 - u : u;
    break;
  case R_PROD:
    acc->u *= u;
    break;
  case R_MAX:
    if (sgn ? v.i > acc->i : u > acc->u) *acc = v;
    break;
  case R_MIN:
    if (sgn ? v.i < acc->i : u < acc->u) *acc = v;
    break;
  default: /* L2, LogSum, LogSumExp of integers: in double */
  {
    double x = sgn ? (double)v.i : (double)u;
    acc->f += op == R_L2 ? x * x : op == R_LOGSUM ? x : exp(x - shift);
    break;
  }
  }
}

/* The odometer: calls the step for every input element with the output
 * slot it belongs to (out_strides are 0 along reduced dims). */
static void reduce_pass(ReduceOp op, CpuNumKind k, const Wide* in, const int64_t* dims, size_t rank,
                        const int64_t* out_strides, Wide* acc, const double* shift) {
  size_t count = cpu_dims_product(dims, 0, rank);
  int64_t idx[CPU_MAX_RANK] = {0}, off = 0;
  for (size_t i = 0; i < count; i++) {
    reduce_step(op, k, &acc[off], in[i], shift ? shift[off] : 0.0);
    for (size_t d = rank; d-- > 0;) {
      off += out_strides[d];
      if (++idx[d] < dims[d]) break;
      off -= out_strides[d] * dims[d];
      idx[d] = 0;
    }
  }
}

/* Final value of one slot over n elements. */
static Wide reduce_finish(ReduceOp op, CpuNumKind k, Wide acc, size_t n, double shift,
                          CpuNumKind* out_kind) {
  *out_kind = k;
  bool in_double = k == CPU_NUM_FLT || op == R_L2 || op == R_LOGSUM || op == R_LOGSUMEXP;
  if (!in_double) {
    if (op == R_MEAN) {
      if (k == CPU_NUM_SINT)
        acc.i = n ? acc.i / (int64_t)n : 0;
      else
        acc.u = n ? acc.u / n : 0;
    }
    return acc;
  }
  *out_kind = CPU_NUM_FLT;
  switch (op) {
  case R_MEAN:
    acc.f = n ? acc.f / (double)n : NAN; /* mean of nothing: NaN, as numpy */
    break;
  case R_L2:
    acc.f = sqrt(acc.f);
    break;
  case R_LOGSUM:
    acc.f = log(acc.f);
    break;
  case R_LOGSUMEXP:
    acc.f = isinf(shift) ? shift : shift + log(acc.f);
    break;
  default:
    break;
  }
  return acc;
}

/* --- Fast path: float32 over a trailing block of axes ----------------------------- */

/* The common case (ReduceMean/ReduceSum over the last axes, e.g. in a
 * decomposed LayerNorm): every output slot owns one contiguous run of `len`
 * inputs. Slots are split over the thread pool; each run is summed in
 * double in memory order, so the result does not depend on the thread
 * count (deterministic). */
typedef struct FastRed {
  ReduceOp op;
  const float* x;
  float* y;
  size_t len;
} FastRed;

static void fast_rows(void* user, size_t begin, size_t end) {
  const FastRed* f = user;
  for (size_t r = begin; r < end; r++) {
    const float* p = f->x + r * f->len;
    double acc = f->op == R_PROD  ? 1.0
                 : f->op == R_MAX ? -INFINITY
                 : f->op == R_MIN ? INFINITY
                                  : 0.0;
    double shift = 0.0;
    if (f->op == R_LOGSUMEXP) {
      shift = -INFINITY;
      for (size_t i = 0; i < f->len; i++)
        if (isnan(p[i]) || p[i] > shift) shift = isnan(shift) ? shift : p[i];
    }
    Wide w = {.f = acc};
    for (size_t i = 0; i < f->len; i++)
      reduce_step(f->op, CPU_NUM_FLT, &w, (Wide){.f = p[i]}, shift);
    CpuNumKind k;
    w = reduce_finish(f->op, CPU_NUM_FLT, w, f->len, shift, &k);
    f->y[r] = (float)w.f;
  }
}

/* True when the marked axes are exactly dims [first, rank) for some first. */
static bool trailing_axes(const bool* mark, size_t rank) {
  size_t d = rank;
  while (d > 0 && mark[d - 1])
    d--;
  for (size_t i = 0; i < d; i++)
    if (mark[i]) return false;
  return d < rank;
}

static OnyxStatus* reduce_compute(void* state, OnyxKernelContext* ctx) {
  const ReduceState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  size_t rank = cpu_host->tensor_rank(x);
  if (rank > CPU_MAX_RANK)
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "rank %zu exceeds %d", rank, CPU_MAX_RANK);
  bool mark[CPU_MAX_RANK] = {false}, noop;
  OnyxStatus* st = reduce_axes(ctx, s, rank, mark, &noop);
  if (st) return st;
  const int64_t* in = cpu_host->tensor_dims(x);
  OnyxTensor* y;
  if (noop) /* a reduction over no axes, as ONNX's reference: the input for
             * Sum/Mean/Max/Min/Prod, x*x for SumSquare, |x| for L1/L2... */
    for (size_t d = 0; d < rank; d++)
      mark[d] = false;
  int64_t out_dims[CPU_MAX_RANK], out_strides[CPU_MAX_RANK];
  size_t out_rank = 0, n = 1;
  for (size_t d = 0; d < rank; d++) {
    if (mark[d]) n *= (size_t)in[d];
    if (!mark[d] || s->keepdims) out_dims[out_rank++] = mark[d] ? 1 : in[d];
  }
  int64_t stride = 1; /* dense strides of the output, 0 along reduced dims */
  for (size_t d = rank; d-- > 0;) {
    out_strides[d] = mark[d] ? 0 : stride;
    if (!mark[d]) stride *= in[d];
  }
  if ((st = cpu_host->ctx_output(ctx, 0, out_dims, out_rank, &y))) return st;
  size_t out_count = cpu_host->tensor_elem_count(y);
  if (out_count == 0) return NULL;
  int32_t type = cpu_host->tensor_elem_type(x);
  CpuNumKind k = kind_of(type);
  ReduceOp op = s->mode.op;
  if (noop && (op == R_SUM || op == R_MEAN || op == R_PROD || op == R_MAX || op == R_MIN)) {
    /* each output the one input value it reduces: a copy */
    memcpy(cpu_host->tensor_mutable_data(y), cpu_host->tensor_data(x),
           out_count * cpu_elem_size(type));
    return NULL;
  }
  /* Trailing axes, or none (noop: rows of one value), in one pass over X. */
  if (type == ONYX_ELEM_FLOAT32 && (noop || trailing_axes(mark, rank))) {
    FastRed f = {op, cpu_host->tensor_data(x), cpu_host->tensor_mutable_data(y), n};
    OnyxThreadPool* pool = out_count * n >= 32768 ? cpu_host->ctx_thread_pool(ctx) : NULL;
    cpu_host->parallel_for(pool, out_count, fast_rows, &f);
    return NULL;
  }
  Wide* w;
  if ((st = widen(ctx, x, &w))) return st;
  Wide* acc = cpu_host->ctx_scratch(ctx, out_count * sizeof *acc);
  double* shift = NULL;
  if (!acc) return cpu_oom(ctx);
  bool in_double = k != CPU_NUM_FLT && (op == R_L2 || op == R_LOGSUM || op == R_LOGSUMEXP);
  if (op == R_LOGSUMEXP) { /* first pass: the maximum of each slot */
    shift = cpu_host->ctx_scratch(ctx, out_count * sizeof *shift);
    if (!shift) return cpu_oom(ctx);
    Wide init = reduce_init(R_MAX, k, type);
    for (size_t i = 0; i < out_count; i++)
      acc[i] = init;
    reduce_pass(R_MAX, k, w, in, rank, out_strides, acc, NULL);
    for (size_t i = 0; i < out_count; i++)
      shift[i] = k == CPU_NUM_FLT    ? acc[i].f
                 : k == CPU_NUM_SINT ? (double)acc[i].i
                                     : (double)acc[i].u;
    for (size_t i = 0; i < out_count; i++)
      if (n == 0 || isnan(shift[i])) shift[i] = n == 0 ? -INFINITY : shift[i];
  }
  Wide init = in_double ? (Wide){.f = 0.0} : reduce_init(op, k, type);
  for (size_t i = 0; i < out_count; i++)
    acc[i] = init;
  reduce_pass(op, k, w, in, rank, out_strides, acc, shift);
  for (size_t i = 0; i < out_count; i++) {
    CpuNumKind ok;
    Wide v = reduce_finish(op, k, acc[i], n, shift ? shift[i] : 0.0, &ok);
    store_wide(y, i, ok, v);
  }
  return NULL;
}

/* ========================================================================= */
/* ArgMax / ArgMin                                                            */
/* ========================================================================= */

typedef struct ArgState {
  int64_t axis;
  bool keepdims, last, max;
} ArgState;

static OnyxStatus* arg_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  ArgState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->max = user != NULL;
  s->axis = cpu_host->node_attr_int(node, "axis", 0);
  s->keepdims = cpu_host->node_attr_int(node, "keepdims", 1) != 0;
  s->last = cpu_host->node_attr_int(node, "select_last_index", 0) != 0;
  *out = s;
  return NULL;
}

/* Whether v replaces the current best b: NaN wins over any number (as
 * numpy's argmax/argmin); ties go to the first index, or the last one with
 * select_last_index. */
static bool arg_better(CpuNumKind k, bool max, bool last, Wide v, Wide b) {
  if (k == CPU_NUM_FLT) {
    bool vn = isnan(v.f), bn = isnan(b.f);
    if (bn) return last && vn;
    if (vn) return true;
    if (v.f == b.f) return last;
    return max ? v.f > b.f : v.f < b.f;
  }
  if (k == CPU_NUM_SINT) {
    if (v.i == b.i) return last;
    return max ? v.i > b.i : v.i < b.i;
  }
  if (v.u == b.u) return last;
  return max ? v.u > b.u : v.u < b.u;
}

static OnyxStatus* arg_compute(void* state, OnyxKernelContext* ctx) {
  const ArgState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  size_t rank = cpu_host->tensor_rank(x), axis;
  if (rank > CPU_MAX_RANK)
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "rank %zu exceeds %d", rank, CPU_MAX_RANK);
  if (!cpu_norm_axis(s->axis, rank, false, &axis))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld out of range for rank %zu",
                         (long long)s->axis, rank);
  const int64_t* in = cpu_host->tensor_dims(x);
  int64_t dims[CPU_MAX_RANK];
  size_t r = 0;
  for (size_t d = 0; d < rank; d++)
    if (d != axis || s->keepdims) dims[r++] = d == axis ? 1 : in[d];
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, dims, r, &y);
  if (st) return st;
  size_t outer = cpu_dims_product(in, 0, axis), inner = cpu_dims_product(in, axis + 1, rank);
  size_t len = (size_t)in[axis];
  if (outer * inner == 0) return NULL;
  if (len == 0)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "cannot take the arg%s of an empty axis %zu",
                         s->max ? "max" : "min", axis);
  Wide* w;
  if ((st = widen(ctx, x, &w))) return st;
  CpuNumKind k = kind_of(cpu_host->tensor_elem_type(x));
  int64_t* out = cpu_host->tensor_mutable_data(y);
  for (size_t o = 0; o < outer; o++)
    for (size_t i = 0; i < inner; i++) {
      const Wide* p = w + o * len * inner + i;
      size_t best = 0;
      for (size_t j = 1; j < len; j++)
        if (arg_better(k, s->max, s->last, p[j * inner], p[best * inner])) best = j;
      out[o * inner + i] = (int64_t)best;
    }
  return NULL;
}

/* ========================================================================= */
/* Registration                                                               */
/* ========================================================================= */

static const OnyxTypeConstraint num_tc[] = {
    {"T", cpu_types_numeric, CPU_ARRAY_LEN(cpu_types_numeric)}};
static const OnyxTypeConstraint num_bool_tc[] = {
    {"T", cpu_types_numeric_bool, CPU_ARRAY_LEN(cpu_types_numeric_bool)}};

#define MODES(op, name) static const ReduceMode name##_attr = {op, false}, name##_input = {op, true}
MODES(R_SUM, sum);
MODES(R_MEAN, mean);
MODES(R_SUMSQ, sumsq);
MODES(R_L1, l1);
MODES(R_L2, l2);
MODES(R_LOGSUM, logsum);
MODES(R_LOGSUMEXP, lse);
MODES(R_PROD, prod);
MODES(R_MAX, max);
MODES(R_MIN, min);

#define FREE cpu_free_state
/* An op whose axes moved from the attribute to input 1 at opset `v`. */
#define RED(op, v, tc, m)                                                                          \
  {op, 1, (v)-1, tc, 1, reduce_create, reduce_compute, FREE, (void*)&m##_attr}, {                  \
    op, v, ONYX_OPSET_LATEST, tc, 1, reduce_create, reduce_compute, FREE, (void*)&m##_input        \
  }

static const CpuKernelSpec reduce_specs[] = {
    RED("ReduceSum", 13, num_tc, sum),
    RED("ReduceMean", 18, num_tc, mean),
    RED("ReduceSumSquare", 18, num_tc, sumsq),
    RED("ReduceL1", 18, num_tc, l1),
    RED("ReduceL2", 18, num_tc, l2),
    RED("ReduceLogSum", 18, num_tc, logsum),
    RED("ReduceLogSumExp", 18, num_tc, lse),
    RED("ReduceProd", 18, num_tc, prod),
    RED("ReduceMax", 18, num_bool_tc, max),
    RED("ReduceMin", 18, num_bool_tc, min),
    {"ArgMax", 1, ONYX_OPSET_LATEST, num_tc, 1, arg_create, arg_compute, FREE, (void*)1},
    {"ArgMin", 1, ONYX_OPSET_LATEST, num_tc, 1, arg_create, arg_compute, FREE, NULL},
};

OnyxStatus* cpu_register_reduce(OnyxKernelRegistry* r) {
  return cpu_register_specs(r, reduce_specs, CPU_ARRAY_LEN(reduce_specs));
}
