/* schemas_collective.c — the collective ops of the com.onyx.collective
 * domain (version 1), run over the session's process group
 * (onyx_distributed.h). Kernels: providers/cpu/cpu_collective.c (host
 * memory), providers/cuda/cuda_collective.c (NCCL).
 *
 * Every op has the required attribute group_size, the number of ranks the
 * graph was written for, so shapes are known without a process group; the
 * session checks it against its group. `reduce` is "sum", "avg", "max" or
 * "min"; `axis` may be negative (counted from the end).
 *
 *   AllReduce(X) -> Y        reduce, group_size     Y = reduce over ranks of X; Y's shape is X's
 *   AllGather(X) -> Y        axis, group_size       Y = the ranks' X concatenated along axis
 *                                                   in rank order: dim axis times group_size
 *   ReduceScatter(X) -> Y    axis, reduce,          X split along axis into group_size blocks;
 *                            group_size             rank r gets the reduction of block r:
 *                                                   dim axis divided by group_size
 *   Broadcast(X) -> Y        root, group_size       Y = root's X; same shape
 *   AllToAll(X) -> Y         axis, group_size       X split along axis into group_size blocks;
 *                                                   block j goes to rank j, and Y is the
 *                                                   blocks received, concatenated in rank
 *                                                   order: same shape */
#include <string.h>
#include "infer_util.h"
#include "schema_internal.h"

#define COLLECTIVE "com.onyx.collective"
#define L(a)       a, (uint8_t)OX_ARRAY_LEN(a)

/* Types a reduction serves (those the process group reduces). */
#define T_REDUCE                                                                                   \
  (OX_T(ONYX_ELEM_FLOAT32) | OX_T(ONYX_ELEM_FLOAT64) | OX_T(ONYX_ELEM_INT8) |                      \
   OX_T(ONYX_ELEM_INT16) | OX_T(ONYX_ELEM_INT32) | OX_T(ONYX_ELEM_INT64) | OX_T(ONYX_ELEM_UINT8) | \
   OX_T(ONYX_ELEM_UINT16) | OX_T(ONYX_ELEM_UINT32) | OX_T(ONYX_ELEM_UINT64))
/* Types moved as bytes: every fixed-size numeric type and bool. */
#define T_MOVE                                                                                     \
  (T_REDUCE | OX_T(ONYX_ELEM_FLOAT16) | OX_T(ONYX_ELEM_BFLOAT16) | OX_T(ONYX_ELEM_BOOL))

static const OxTypeConstr t_reduce[] = {{"T", T_REDUCE}};
static const OxTypeConstr t_move[] = {{"T", T_MOVE}};
static const OxFormal f_x[] = {{"X", "T", ONYX_PARAM_SINGLE, 1}};
static const OxFormal f_y[] = {{"Y", "T", ONYX_PARAM_SINGLE, 1}};

static const OxAttrSpec a_all_reduce[] = {
    {.name = "group_size", .type = ONYX_ATTR_INT, .required = true},
    {.name = "reduce", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "sum"},
};
static const OxAttrSpec a_axis[] = {
    {.name = "axis", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "group_size", .type = ONYX_ATTR_INT, .required = true},
};
static const OxAttrSpec a_reduce_scatter[] = {
    {.name = "axis", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
    {.name = "group_size", .type = ONYX_ATTR_INT, .required = true},
    {.name = "reduce", .type = ONYX_ATTR_STRING, .has_default = true, .def_s = "sum"},
};
static const OxAttrSpec a_broadcast[] = {
    {.name = "group_size", .type = ONYX_ATTR_INT, .required = true},
    {.name = "root", .type = ONYX_ATTR_INT, .has_default = true, .def_i = 0},
};

/* group_size, at least 1 and small enough for an int. */
static OnyxStatus* group_size(const OxNode* n, int64_t* out) {
  int64_t g = ox_attr_i(n, "group_size", 0);
  if (g < 1 || g > INT32_MAX)
    return ox_node_err(n, "group_size %lld must be a rank count of at least 1", (long long)g);
  *out = g;
  return NULL;
}

static OnyxStatus* check_reduce(const OxNode* n) {
  const char* r = ox_attr_s(n, "reduce", "sum");
  if (strcmp(r, "sum") && strcmp(r, "avg") && strcmp(r, "max") && strcmp(r, "min"))
    return ox_node_err(n, "reduce '%s' is not one of sum, avg, max, min", r);
  return NULL;
}

/* The input's shape and the normalized axis (-1 when the rank is unknown). */
static OnyxStatus* input_axis(const OxNode* n, OxDims* d, int64_t* axis) {
  ox_in_dims(n, 0, d);
  *axis = -1;
  if (d->rank < 0) return NULL;
  int64_t a = ox_attr_i(n, "axis", 0);
  if (d->rank == 0 || !ox_norm_axis(a, d->rank, axis))
    return ox_node_err(n, "axis %lld is out of range for X of rank %d", (long long)a, (int)d->rank);
  return NULL;
}

static OnyxStatus* infer_all_reduce(OxNode* n) {
  int64_t g = 1;
  OnyxStatus* st = group_size(n, &g);
  if (!st) st = check_reduce(n);
  return st ? st : ox_out_like_input(n, 0, 0);
}

static OnyxStatus* infer_broadcast(OxNode* n) {
  int64_t g = 1;
  OX_TRY(group_size(n, &g));
  int64_t root = ox_attr_i(n, "root", 0);
  if (root < 0 || root >= g)
    return ox_node_err(n, "root %lld is not a rank of a group of %lld", (long long)root,
                       (long long)g);
  return ox_out_like_input(n, 0, 0);
}

static OnyxStatus* infer_all_gather(OxNode* n) {
  int64_t g = 1, axis = -1;
  OxDims d;
  OX_TRY(group_size(n, &g));
  OX_TRY(input_axis(n, &d, &axis));
  if (axis >= 0 && d.d[axis] >= 0 && !ox_mul_i64(d.d[axis], g, &d.d[axis]))
    return ox_node_err(n, "dimension %lld of X times group_size %lld overflows", (long long)axis,
                       (long long)g);
  return ox_out_set(n, 0, ox_in_type(n, 0), d.rank >= 0 ? &d : NULL);
}

/* ReduceScatter and AllToAll: dim axis must split into group_size blocks. */
static OnyxStatus* check_split(const OxNode* n, const OxDims* d, int64_t axis, int64_t g) {
  if (axis >= 0 && d->d[axis] >= 0 && d->d[axis] % g)
    return ox_node_err(n, "dimension %lld of X (%lld) does not split into group_size %lld blocks",
                       (long long)axis, (long long)d->d[axis], (long long)g);
  return NULL;
}

static OnyxStatus* infer_reduce_scatter(OxNode* n) {
  int64_t g = 1, axis = -1;
  OxDims d;
  OX_TRY(group_size(n, &g));
  OX_TRY(check_reduce(n));
  OX_TRY(input_axis(n, &d, &axis));
  OX_TRY(check_split(n, &d, axis, g));
  if (axis >= 0 && d.d[axis] >= 0) d.d[axis] /= g;
  return ox_out_set(n, 0, ox_in_type(n, 0), d.rank >= 0 ? &d : NULL);
}

static OnyxStatus* infer_all_to_all(OxNode* n) {
  int64_t g = 1, axis = -1;
  OxDims d;
  OX_TRY(group_size(n, &g));
  OX_TRY(input_axis(n, &d, &axis));
  OX_TRY(check_split(n, &d, axis, g));
  return ox_out_set(n, 0, ox_in_type(n, 0), d.rank >= 0 ? &d : NULL);
}

#define ROW(op, tc, attrs, fn)                                                                     \
  { COLLECTIVE, op, 1, L(f_x), L(f_y), L(tc), L(attrs), fn, NULL, NULL, true }

static const OxSchema ox_collective_rows[] = {
    ROW("AllReduce", t_reduce, a_all_reduce, infer_all_reduce),
    ROW("AllGather", t_move, a_axis, infer_all_gather),
    ROW("ReduceScatter", t_reduce, a_reduce_scatter, infer_reduce_scatter),
    ROW("Broadcast", t_move, a_broadcast, infer_broadcast),
    ROW("AllToAll", t_move, a_axis, infer_all_to_all),
};

const OxSchemaFamily ox_family_collective = {"collective", L(ox_collective_rows), NULL, 0};
