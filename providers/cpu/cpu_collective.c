/* cpu_collective.c — the com.onyx.collective ops (schemas/schemas_collective.c)
 * over host memory, through the host's process group: the ONYX_EXT_COLLECTIVES
 * extension the host puts on the EP's create arguments (onyx_ep.h).
 *
 * The group's collectives work on whole contiguous buffers in rank order, so
 * an op along an axis other than the outermost packs or unpacks blocks: with
 * X viewed as [outer][dim axis][inner], AllGather receives [rank][outer][...]
 * and interleaves it into [outer][rank][...]; ReduceScatter and AllToAll
 * first pack X's group_size blocks along axis into [block][outer][...].
 * Without a process group (group_size 1) every op is a copy. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "cpu_util.h"

#define COLLECTIVE "com.onyx.collective"

typedef enum CollKind {
  COLL_ALL_REDUCE,
  COLL_ALL_GATHER,
  COLL_REDUCE_SCATTER,
  COLL_BROADCAST,
  COLL_ALL_TO_ALL,
} CollKind;

typedef struct CollState {
  CollKind kind;
  const OnyxCollectivesExt* ext; /* NULL: no process group (group_size 1) */
  int64_t group_size;
  int64_t axis; /* as written; normalized per run against X's rank */
  int32_t reduce;
  int32_t root;
} CollState;

static int32_t coll_reduce_op(const char* s) {
  if (!strcmp(s, "sum")) return ONYX_REDUCE_SUM;
  if (!strcmp(s, "avg")) return ONYX_REDUCE_AVG;
  if (!strcmp(s, "max")) return ONYX_REDUCE_MAX;
  if (!strcmp(s, "min")) return ONYX_REDUCE_MIN;
  return -1;
}

static OnyxStatus* coll_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** out) {
  *out = NULL;
  const OnyxHostApi* h = cpu_host;
  CollState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->kind = (CollKind)(intptr_t)user_data;
  s->ext = cpu_ep_collectives(ep);
  s->group_size = h->node_attr_int(node, "group_size", 0);
  s->axis = h->node_attr_int(node, "axis", 0);
  s->root = (int32_t)h->node_attr_int(node, "root", 0);
  size_t len = 0;
  const char* red = h->node_attr_string(node, "reduce", &len);
  s->reduce = coll_reduce_op(red ? red : "sum");
  OnyxStatus* st = NULL;
  const int ranks = s->ext ? s->ext->size : 1;
  if (s->reduce < 0)
    st = cpu_error(node, ONYX_INVALID_MODEL, "reduce '%s' is not one of sum, avg, max, min",
                   red ? red : "");
  else if (!s->ext && s->group_size != 1)
    st = cpu_error(node, ONYX_INVALID_ARGUMENT,
                   "group_size is %lld but the session has no process group; give it one with "
                   "onyx_session_options_set_process_group (onyx_distributed.h)",
                   (long long)s->group_size);
  else if (s->group_size != ranks)
    st = cpu_error(node, ONYX_INVALID_ARGUMENT,
                   "group_size is %lld but the session's process group has %d ranks (this is "
                   "rank %d): the graph was written for another world",
                   (long long)s->group_size, ranks, s->ext ? (int)s->ext->rank : 0);
  if (st) {
    free(s);
    return st;
  }
  *out = s;
  return NULL;
}

/* The host's cancellation poll, when its table has one (ABI 1.1). */
static OnyxStopFn coll_stop_fn(void) {
  const OnyxHostApi* h = cpu_host;
  if (h->struct_size < offsetof(OnyxHostApi, ctx_should_stop) + sizeof h->ctx_should_stop)
    return NULL;
  return h->ctx_should_stop;
}

/* An error of the process group, named after the node. */
static OnyxStatus* coll_wrap(const OnyxKernelContext* ctx, OnyxStatus* st) {
  if (!st) return NULL;
  OnyxStatus* out =
      cpu_ctx_error(ctx, cpu_host->status_code(st), "%s", cpu_host->status_message(st));
  cpu_host->status_release(st);
  return out;
}

/* X viewed as [outer][dims[axis]][rest]: outer and rest in elements. */
static void coll_split(const int64_t* dims, size_t rank, size_t axis, size_t* outer, size_t* rest) {
  size_t o = 1, r = 1;
  for (size_t i = 0; i < axis; i++)
    o *= (size_t)dims[i];
  for (size_t i = axis + 1; i < rank; i++)
    r *= (size_t)dims[i];
  *outer = o;
  *rest = r;
}

/* src [a][b][chunk] -> dst [b][a][chunk] (bytes). */
static void coll_transpose(char* dst, const char* src, size_t a, size_t b, size_t chunk) {
  for (size_t i = 0; i < a; i++)
    for (size_t j = 0; j < b; j++)
      memcpy(dst + (j * a + i) * chunk, src + (i * b + j) * chunk, chunk);
}

static OnyxStatus* coll_compute(void* state, OnyxKernelContext* ctx) {
  const CollState* s = state;
  const OnyxHostApi* h = cpu_host;
  const OnyxTensor* x = h->ctx_input(ctx, 0);
  const int32_t type = h->tensor_elem_type(x);
  const size_t es = cpu_elem_size(type);
  const size_t rank = h->tensor_rank(x);
  const int64_t* xd = h->tensor_dims(x);
  const size_t count = h->tensor_elem_count(x);
  const size_t bytes = h->tensor_byte_size(x);
  const size_t n = (size_t)s->group_size;
  int64_t dims[64];
  if (rank > 64 || !es)
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "X of rank %zu and type %d is not supported",
                         rank, (int)type);
  memcpy(dims, xd, rank * sizeof *dims);
  size_t axis = 0;
  if (s->kind == COLL_ALL_GATHER || s->kind == COLL_REDUCE_SCATTER || s->kind == COLL_ALL_TO_ALL) {
    int64_t a = s->axis < 0 ? s->axis + (int64_t)rank : s->axis;
    if (rank == 0 || a < 0 || a >= (int64_t)rank)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                           (long long)s->axis, rank);
    axis = (size_t)a;
    if (s->kind != COLL_ALL_GATHER && dims[axis] % s->group_size)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "dimension %zu of X (%lld) does not split into %lld blocks", axis,
                           (long long)dims[axis], (long long)s->group_size);
  }
  const OnyxStopFn stop = coll_stop_fn();
  void* grp = s->ext ? s->ext->group : NULL;
  OnyxTensor* y = NULL;
  size_t outer = 1, rest = 1;
  if (rank) coll_split(dims, rank, axis, &outer, &rest);

  switch (s->kind) {
  case COLL_ALL_REDUCE:
  case COLL_BROADCAST: {
    OnyxStatus* st = h->ctx_output(ctx, 0, dims, rank, &y);
    if (st) return st;
    void* yp = h->tensor_mutable_data(y);
    cpu_memcpy(yp, h->tensor_data(x), bytes);
    if (!s->ext || !count) return NULL;
    st = s->kind == COLL_ALL_REDUCE ? s->ext->all_reduce(grp, yp, count, type, s->reduce, stop, ctx)
                                    : s->ext->broadcast(grp, yp, bytes, s->root, stop, ctx);
    return coll_wrap(ctx, st);
  }
  case COLL_ALL_GATHER: {
    int64_t d = 0;
    if (__builtin_mul_overflow(dims[axis], s->group_size, &d))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "gathered dimension overflows");
    dims[axis] = d;
    OnyxStatus* st = h->ctx_output(ctx, 0, dims, rank, &y);
    if (st) return st;
    char* yp = h->tensor_mutable_data(y);
    if (!s->ext) {
      cpu_memcpy(yp, h->tensor_data(x), bytes);
      return NULL;
    }
    if (!count) return NULL;
    if (outer == 1)
      return coll_wrap(ctx, s->ext->all_gather(grp, h->tensor_data(x), yp, count, type, stop, ctx));
    char* tmp = h->ctx_scratch(ctx, bytes * n);
    if (!tmp) return cpu_oom(ctx);
    st = s->ext->all_gather(grp, h->tensor_data(x), tmp, count, type, stop, ctx);
    if (st) return coll_wrap(ctx, st);
    /* [rank][outer][chunk] -> [outer][rank][chunk] */
    coll_transpose(yp, tmp, n, outer, (size_t)xd[axis] * rest * es);
    return NULL;
  }
  case COLL_REDUCE_SCATTER:
  case COLL_ALL_TO_ALL: {
    const size_t block = (size_t)(dims[axis] / s->group_size) * rest * es; /* bytes per outer */
    if (s->kind == COLL_REDUCE_SCATTER) dims[axis] /= s->group_size;
    OnyxStatus* st = h->ctx_output(ctx, 0, dims, rank, &y);
    if (st) return st;
    char* yp = h->tensor_mutable_data(y);
    const char* xp = h->tensor_data(x);
    if (!s->ext) {
      cpu_memcpy(yp, xp, h->tensor_byte_size(y));
      return NULL;
    }
    if (!count) return NULL;
    const size_t per_rank = count / n; /* elements each rank's block holds */
    const char* send = xp;
    char* packed = NULL;
    if (outer > 1) {
      /* [outer][block j][chunk] -> [block j][outer][chunk] */
      packed = h->ctx_scratch(ctx, bytes);
      if (!packed) return cpu_oom(ctx);
      coll_transpose(packed, xp, outer, n, block);
      send = packed;
    }
    if (s->kind == COLL_REDUCE_SCATTER)
      return coll_wrap(ctx,
                       s->ext->reduce_scatter(grp, send, yp, per_rank, type, s->reduce, stop, ctx));
    if (outer == 1)
      return coll_wrap(ctx, s->ext->all_to_all(grp, send, yp, per_rank, type, stop, ctx));
    char* recv = h->ctx_scratch(ctx, bytes);
    if (!recv) return cpu_oom(ctx);
    st = s->ext->all_to_all(grp, send, recv, per_rank, type, stop, ctx);
    if (st) return coll_wrap(ctx, st);
    /* [from rank r][outer][chunk] -> [outer][r][chunk] */
    coll_transpose(yp, recv, n, outer, block);
    return NULL;
  }
  }
  return cpu_ctx_error(ctx, ONYX_FAIL, "unknown collective kind %d", (int)s->kind);
}

static const int32_t T_REDUCE[] = {
    ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64, ONYX_ELEM_INT8,   ONYX_ELEM_INT16,  ONYX_ELEM_INT32,
    ONYX_ELEM_INT64,   ONYX_ELEM_UINT8,   ONYX_ELEM_UINT16, ONYX_ELEM_UINT32, ONYX_ELEM_UINT64,
};
static const int32_t T_MOVE[] = {
    ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64,  ONYX_ELEM_INT8,   ONYX_ELEM_INT16,  ONYX_ELEM_INT32,
    ONYX_ELEM_INT64,   ONYX_ELEM_UINT8,    ONYX_ELEM_UINT16, ONYX_ELEM_UINT32, ONYX_ELEM_UINT64,
    ONYX_ELEM_FLOAT16, ONYX_ELEM_BFLOAT16, ONYX_ELEM_BOOL,
};
static const OnyxTypeConstraint TC_REDUCE[] = {{"T", T_REDUCE, CPU_ARRAY_LEN(T_REDUCE)}};
static const OnyxTypeConstraint TC_MOVE[] = {{"T", T_MOVE, CPU_ARRAY_LEN(T_MOVE)}};

#define CDEF(op, tc, kind)                                                                         \
  {                                                                                                \
    .struct_size = sizeof(OnyxKernelDef), .domain = COLLECTIVE, .op_type = op, .since_version = 1, \
    .end_version = ONYX_OPSET_LATEST, .type_constraints = tc, .type_constraint_count = 1,          \
    .create = coll_create, .compute = coll_compute, .release = cpu_free_state,                     \
    .user_data = (void*)(intptr_t)kind                                                             \
  }

OnyxStatus* cpu_register_collective(OnyxKernelRegistry* r) {
  const OnyxKernelDef defs[] = {
      CDEF("AllReduce", TC_REDUCE, COLL_ALL_REDUCE),
      CDEF("AllGather", TC_MOVE, COLL_ALL_GATHER),
      CDEF("ReduceScatter", TC_REDUCE, COLL_REDUCE_SCATTER),
      CDEF("Broadcast", TC_MOVE, COLL_BROADCAST),
      CDEF("AllToAll", TC_MOVE, COLL_ALL_TO_ALL),
  };
  for (size_t i = 0; i < CPU_ARRAY_LEN(defs); i++) {
    OnyxStatus* st = cpu_host->register_kernel(r, &defs[i]);
    if (st) return st;
  }
  return NULL;
}
