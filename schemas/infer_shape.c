/* infer_shape.c — type and shape inference of the shape-manipulating ops
 * (Reshape, Flatten, Transpose, Concat, Split, Slice, Squeeze, Unsqueeze,
 * Gather, Shape, Expand), of Cast and the constants, and of reductions.
 *
 * Where an op takes a list either as an attribute (old opsets) or as an input
 * (new ones), the node itself says which: a present input wins. */
#include <stdlib.h>
#include <string.h>

#include "infer_util.h"

static void dims_unknown(OxDims* d, int64_t rank) {
  d->rank = rank < 0 || rank > OX_INFER_MAX_RANK ? -1 : (int32_t)rank;
  for (int32_t i = 0; i < d->rank; i++)
    d->d[i] = ONYX_DIM_UNKNOWN;
}

/* Product of d[from, to) into *p; -1 when a dim is unknown. False on
 * overflow. */
static bool dims_product(const OxDims* d, int32_t from, int32_t to, int64_t* p) {
  *p = 1;
  for (int32_t i = from; i < to; i++) {
    if (d->d[i] < 0) {
      *p = ONYX_DIM_UNKNOWN;
      return true;
    }
    if (!ox_mul_i64(*p, d->d[i], p)) return false;
  }
  return true;
}

static void dims_str(const OxDims* d, char* buf, size_t len) {
  ox_shape_str(ONYX_ELEM_UNDEFINED, d->d, d->rank, buf, len);
  /* ox_shape_str prefixes the type name; keep the bracketed part only. */
  char* b = strchr(buf, '[');
  if (b && b != buf) memmove(buf, b, strlen(b) + 1);
}

/* An integer list given as input `in` (when present) or as attribute
 * `attr`. *given: the node supplies it; *known: its values are known now. */
typedef struct IntList {
  int64_t* v; /* heap, owned */
  size_t count;
  bool given, known;
  int64_t len; /* count when known, else the input's static length or -1 */
} IntList;

static OnyxStatus* int_list(const OxNode* n, size_t in, const char* attr, IntList* l) {
  *l = (IntList){.len = -1};
  if (ox_in(n, in)) {
    l->given = true;
    OX_TRY(ox_const_ints(n, in, &l->v, &l->count, &l->known));
    l->len = l->known ? (int64_t)l->count : ox_in_len(n, in);
    return NULL;
  }
  size_t count;
  const int64_t* a = attr ? ox_attr_ints(n, attr, &count) : NULL;
  if (!a && !(attr && ox_attr_present(n, attr))) return NULL;
  l->given = l->known = true;
  l->count = count;
  l->len = (int64_t)count;
  size_t bytes;
  if (count) {
    if (!ox_mul_size(count, sizeof *l->v, &bytes) || !(l->v = malloc(bytes))) return ox_oom();
    memcpy(l->v, a, bytes);
  }
  return NULL;
}

/* Normalizes every axis of l against rank; refuses out-of-range and repeats. */
static OnyxStatus* norm_axes(const OxNode* n, const char* what, IntList* l, int64_t rank) {
  for (size_t i = 0; i < l->count; i++) {
    int64_t a = l->v[i];
    if (!ox_norm_axis(a, rank, &l->v[i]))
      return ox_node_err(n, "%s has axis %lld, out of range for rank %lld", what, (long long)a,
                         (long long)rank);
    for (size_t j = 0; j < i; j++)
      if (l->v[j] == l->v[i]) return ox_node_err(n, "%s repeats axis %lld", what, (long long)a);
  }
  return NULL;
}

/* --- Reshape, Flatten, Transpose ------------------------------------------------------ */

/* With allowzero off, a 0 copies the input dim at the same index. An unknown
 * dim copied that way is on both sides of the element count, so it cancels
 * out of the -1 computation (as in ONNX's own inference). */
static OnyxStatus* reshape_dims(const OxNode* n, const OxDims* x, const int64_t* shape, size_t ns,
                                bool allowzero, OxDims* y) {
  y->rank = (int32_t)ns;
  int64_t neg = -1, prod = 1, total = 1;
  bool prod_known = true, total_known = x->rank >= 0, has_zero = false;
  bool cancel[OX_INFER_MAX_RANK] = {0}; /* input dims copied while unknown */
  for (size_t i = 0; i < ns; i++) {
    int64_t v = shape[i];
    if (v < -1) return ox_node_err(n, "shape value %lld at index %zu is invalid", (long long)v, i);
    if (v == -1) {
      if (neg >= 0) return ox_node_err(n, "the shape has more than one -1");
      neg = (int64_t)i;
      y->d[i] = ONYX_DIM_UNKNOWN;
      continue;
    }
    if (v == 0 && !allowzero) {
      if (x->rank >= 0 && (int64_t)i >= x->rank)
        return ox_node_err(n,
                           "shape value 0 at index %zu copies a dimension the rank-%d input "
                           "does not have",
                           i, (int)x->rank);
      v = x->rank >= 0 ? x->d[i] : ONYX_DIM_UNKNOWN;
      if (v < 0 && x->rank >= 0) {
        cancel[i] = true;
        y->d[i] = v;
        continue;
      }
    }
    has_zero |= v == 0;
    y->d[i] = v;
    if (v < 0)
      prod_known = false;
    else if (!ox_mul_i64(prod, v, &prod))
      return ox_node_err(n, "the shape overflows");
  }
  if (allowzero && has_zero && neg >= 0)
    return ox_node_err(n, "with allowzero=1 the shape cannot hold both 0 and -1");
  for (int32_t i = 0; total_known && i < x->rank; i++) {
    if (x->d[i] < 0)
      total_known = i < (int32_t)ns && cancel[i];
    else if (!ox_mul_i64(total, x->d[i], &total))
      total_known = false;
  }
  if (!total_known || !prod_known) return NULL;
  char xs[160], ys[160];
  dims_str(x, xs, sizeof xs);
  dims_str(y, ys, sizeof ys);
  if (neg >= 0) {
    if (prod == 0 || total % prod)
      return ox_node_err(n, "cannot reshape %s (%lld elements) to %s", xs, (long long)total, ys);
    y->d[neg] = total / prod;
  } else if (prod != total) {
    return ox_node_err(n, "cannot reshape %s (%lld elements) to %s (%lld elements)", xs,
                       (long long)total, ys, (long long)prod);
  }
  return NULL;
}

OnyxStatus* ox_infer_reshape(OxNode* n) {
  OxDims x, y;
  ox_in_dims(n, 0, &x);
  OnyxElemType t = ox_in_type(n, 0);
  IntList s;
  OX_TRY(int_list(n, 1, "shape", &s));
  OnyxStatus* st = NULL;
  if (!s.given || !s.known || s.count > OX_INFER_MAX_RANK)
    dims_unknown(&y, s.given ? s.len : -1);
  else
    st = reshape_dims(n, &x, s.v, s.count, ox_attr_i(n, "allowzero", 0) != 0, &y);
  free(s.v);
  return st ? st : ox_out_set(n, 0, t, &y);
}

OnyxStatus* ox_infer_flatten(OxNode* n) {
  OxDims x, y = {.rank = 2, .d = {ONYX_DIM_UNKNOWN, ONYX_DIM_UNKNOWN}};
  ox_in_dims(n, 0, &x);
  int64_t axis = ox_attr_i(n, "axis", 1);
  if (x.rank >= 0) {
    if (axis < -x.rank || axis > x.rank)
      return ox_node_err(n, "attribute 'axis' is %lld, out of range [%d, %d]", (long long)axis,
                         -(int)x.rank, (int)x.rank);
    int32_t a = (int32_t)(axis < 0 ? axis + x.rank : axis);
    if (!dims_product(&x, 0, a, &y.d[0]) || !dims_product(&x, a, x.rank, &y.d[1]))
      return ox_node_err(n, "the element count of the input overflows");
  }
  return ox_out_set(n, 0, ox_in_type(n, 0), &y);
}

OnyxStatus* ox_infer_transpose(OxNode* n) {
  OxDims x, y;
  ox_in_dims(n, 0, &x);
  OnyxElemType t = ox_in_type(n, 0);
  size_t np;
  const int64_t* perm = ox_attr_ints(n, "perm", &np);
  if (!perm && !ox_attr_present(n, "perm")) {
    if (x.rank < 0) return ox_out_set(n, 0, t, NULL);
    y.rank = x.rank; /* default: reverse the dims */
    for (int32_t i = 0; i < x.rank; i++)
      y.d[i] = x.d[x.rank - 1 - i];
    return ox_out_set(n, 0, t, &y);
  }
  if (x.rank >= 0 && np != (size_t)x.rank)
    return ox_node_err(n, "attribute 'perm' has %zu values for an input of rank %d", np,
                       (int)x.rank);
  if (np > OX_INFER_MAX_RANK) return ox_out_set(n, 0, t, NULL);
  bool seen[OX_INFER_MAX_RANK] = {0};
  for (size_t i = 0; i < np; i++) {
    if (perm[i] < 0 || perm[i] >= (int64_t)np || seen[perm[i]])
      return ox_node_err(n, "attribute 'perm' is not a permutation of 0..%zu", np - 1);
    seen[perm[i]] = true;
  }
  y.rank = (int32_t)np;
  for (size_t i = 0; i < np; i++)
    y.d[i] = x.rank >= 0 ? x.d[perm[i]] : ONYX_DIM_UNKNOWN;
  return ox_out_set(n, 0, t, &y);
}

/* --- Concat, Split, Slice --------------------------------------------------------------- */

/* Merges dim b into a (same axis of two inputs that must agree). */
static bool merge_dim(int64_t* a, int64_t b) {
  if (*a < 0) *a = b;
  return b < 0 || *a == b;
}

OnyxStatus* ox_infer_concat(OxNode* n) {
  OnyxElemType t = ox_in_type(n, 0);
  OxDims y = {.rank = -1}, d;
  for (size_t i = 0; i < n->n_inputs; i++) { /* the rank of any input with a shape */
    ox_in_dims(n, i, &d);
    if (d.rank >= 0) {
      dims_unknown(&y, d.rank);
      break;
    }
  }
  if (y.rank < 0) return ox_out_set(n, 0, t, NULL);
  if (y.rank == 0) return ox_node_err(n, "cannot concatenate scalars");
  int64_t axis = ox_attr_i(n, "axis", 1), a;
  if (!ox_norm_axis(axis, y.rank, &a))
    return ox_node_err(n, "attribute 'axis' is %lld, out of range for rank %d", (long long)axis,
                       (int)y.rank);
  int64_t sum = 0;
  for (size_t i = 0; i < n->n_inputs; i++) {
    ox_in_dims(n, i, &d);
    if (d.rank < 0) {
      sum = -1;
      continue;
    }
    if (d.rank != y.rank)
      return ox_node_err(n, "input %zu has rank %d, input 0 has rank %d", i, (int)d.rank,
                         (int)y.rank);
    for (int32_t k = 0; k < y.rank; k++)
      if (k != a && !merge_dim(&y.d[k], d.d[k]))
        return ox_node_err(n, "input %zu has %lld on axis %d where another input has %lld", i,
                           (long long)d.d[k], (int)k, (long long)y.d[k]);
    if (sum >= 0 && d.d[a] >= 0 && !ox_add_i64(sum, d.d[a], &sum))
      return ox_node_err(n, "the concatenated axis %lld overflows at input %zu", (long long)a, i);
    if (d.d[a] < 0) sum = -1;
  }
  y.d[a] = sum;
  return ox_out_set(n, 0, t, &y);
}

/* Sizes of the Split outputs along the axis (-1 where unknown). */
static OnyxStatus* split_sizes(const OxNode* n, const IntList* s, int64_t dim, int64_t* sizes) {
  size_t no = n->n_outputs;
  for (size_t i = 0; i < no; i++)
    sizes[i] = ONYX_DIM_UNKNOWN;
  bool has_num = ox_attr_present(n, "num_outputs");
  if (s->given && has_num)
    return ox_node_err(n, "input 'split' and attribute 'num_outputs' cannot both be given");
  if (s->given) {
    if (!s->known) return NULL;
    if (s->count != no)
      return ox_node_err(n, "'split' has %zu values for %zu outputs", s->count, no);
    int64_t sum = 0;
    for (size_t i = 0; i < no; i++) {
      if (s->v[i] < 0) return ox_node_err(n, "'split' has a negative value");
      sizes[i] = s->v[i];
      if (!ox_add_i64(sum, s->v[i], &sum))
        return ox_node_err(n, "'split' overflows when summed (at value %zu)", i);
    }
    if (dim >= 0 && sum != dim)
      return ox_node_err(n, "'split' sums to %lld but the axis has %lld", (long long)sum,
                         (long long)dim);
    return NULL;
  }
  if (has_num) {
    int64_t k = ox_attr_i(n, "num_outputs", 0);
    if (k < 1 || (size_t)k != no)
      return ox_node_err(n, "attribute 'num_outputs' is %lld but the node has %zu outputs",
                         (long long)k, no);
    if (dim < 0) return NULL;
    int64_t chunk = ox_ceil_div_i64(dim, k), used, last = -1;
    if (ox_mul_i64(chunk, k - 1, &used)) last = dim - used; /* both >= 0 */
    if (last < 0)
      return ox_node_err(n, "an axis of %lld cannot be split into %lld parts", (long long)dim,
                         (long long)k);
    for (size_t i = 0; i < no; i++)
      sizes[i] = i + 1 < no ? chunk : last;
    return NULL;
  }
  if (dim < 0) return NULL;
  if (dim % (int64_t)no)
    return ox_node_err(n, "an axis of %lld does not split into %zu equal parts", (long long)dim,
                       no);
  for (size_t i = 0; i < no; i++)
    sizes[i] = dim / (int64_t)no;
  return NULL;
}

OnyxStatus* ox_infer_split(OxNode* n) {
  OxDims x;
  ox_in_dims(n, 0, &x);
  OnyxElemType t = ox_in_type(n, 0);
  if (x.rank < 0) {
    for (size_t i = 0; i < n->n_outputs; i++)
      OX_TRY(ox_out_set(n, i, t, NULL));
    return NULL;
  }
  int64_t axis = ox_attr_i(n, "axis", 0), a;
  if (!ox_norm_axis(axis, x.rank, &a))
    return ox_node_err(n, "attribute 'axis' is %lld, out of range for rank %d", (long long)axis,
                       (int)x.rank);
  IntList s;
  OX_TRY(int_list(n, 1, "split", &s));
  int64_t* sizes = calloc(n->n_outputs ? n->n_outputs : 1, sizeof *sizes);
  OnyxStatus* st = sizes ? split_sizes(n, &s, x.d[a], sizes) : ox_oom();
  for (size_t i = 0; !st && i < n->n_outputs; i++) {
    OxDims y = x;
    y.d[a] = sizes[i];
    st = ox_out_set(n, i, t, &y);
  }
  free(sizes);
  free(s.v);
  return st;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* Elements selected on an axis of extent dim by [start, end) with step. */
static int64_t slice_len(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (dim == 0) return 0;
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = clamp64(start, 0, dim);
    end = clamp64(end, 0, dim);
    return end > start ? (end - start - 1) / step + 1 : 0;
  }
  start = clamp64(start, 0, dim - 1);
  end = clamp64(end, -1, dim - 1);
  if (step == INT64_MIN) return start > end ? 1 : 0; /* -step would overflow */
  return start > end ? (start - end - 1) / -step + 1 : 0;
}

typedef struct SliceArgs {
  IntList starts, ends, axes, steps;
} SliceArgs;

static OnyxStatus* slice_args(const OxNode* n, SliceArgs* s) {
  bool inputs = ox_in(n, 1) || ox_in(n, 2); /* opset 10+ */
  OX_TRY(int_list(n, 1, inputs ? NULL : "starts", &s->starts));
  OX_TRY(int_list(n, 2, inputs ? NULL : "ends", &s->ends));
  OX_TRY(int_list(n, 3, inputs ? NULL : "axes", &s->axes));
  return int_list(n, 4, NULL, &s->steps);
}

static void slice_free(SliceArgs* s) {
  free(s->starts.v);
  free(s->ends.v);
  free(s->axes.v);
  free(s->steps.v);
}

static OnyxStatus* slice_dims(const OxNode* n, SliceArgs* s, OxDims* y) {
  if (!s->starts.given || !s->ends.given) return ox_node_err(n, "'starts' and 'ends' are required");
  int64_t len = s->starts.len;
  bool axes_known = !s->axes.given || s->axes.known;
  if (!s->starts.known || !s->ends.known || !axes_known || (s->steps.given && !s->steps.known)) {
    /* Unknown values: only dims off the sliced axes survive. */
    if (axes_known && s->axes.given) OX_TRY(norm_axes(n, "'axes'", &s->axes, y->rank));
    bool all = !axes_known || (!s->axes.given && len < 0);
    for (int32_t k = 0; k < y->rank; k++) {
      bool sliced = all;
      for (size_t i = 0; !sliced && s->axes.given && i < s->axes.count; i++)
        sliced = s->axes.v[i] == k;
      if (!s->axes.given && len >= 0) sliced |= k < len;
      if (sliced) y->d[k] = ONYX_DIM_UNKNOWN;
    }
    return NULL;
  }
  size_t c = s->starts.count;
  if (s->ends.count != c || (s->axes.given && s->axes.count != c) ||
      (s->steps.given && s->steps.count != c))
    return ox_node_err(n, "'starts', 'ends', 'axes' and 'steps' differ in length");
  if (s->axes.given)
    OX_TRY(norm_axes(n, "'axes'", &s->axes, y->rank));
  else if ((int64_t)c > y->rank)
    return ox_node_err(n, "%zu starts for an input of rank %d", c, (int)y->rank);
  for (size_t i = 0; i < c; i++) {
    int64_t axis = s->axes.given ? s->axes.v[i] : (int64_t)i;
    int64_t step = s->steps.given ? s->steps.v[i] : 1;
    if (step == 0) return ox_node_err(n, "'steps' has a 0");
    if (y->d[axis] >= 0) y->d[axis] = slice_len(y->d[axis], s->starts.v[i], s->ends.v[i], step);
  }
  return NULL;
}

OnyxStatus* ox_infer_slice(OxNode* n) {
  OxDims y;
  ox_in_dims(n, 0, &y);
  OnyxElemType t = ox_in_type(n, 0);
  if (y.rank < 0) return ox_out_set(n, 0, t, NULL);
  SliceArgs s = {0};
  OnyxStatus* st = slice_args(n, &s);
  if (!st) st = slice_dims(n, &s, &y);
  slice_free(&s);
  return st ? st : ox_out_set(n, 0, t, &y);
}

/* --- Squeeze, Unsqueeze, Gather, Shape, Expand -------------------------------------------- */

OnyxStatus* ox_infer_squeeze(OxNode* n) {
  OxDims x, y = {.rank = 0};
  ox_in_dims(n, 0, &x);
  OnyxElemType t = ox_in_type(n, 0);
  IntList ax;
  OX_TRY(int_list(n, 1, "axes", &ax));
  OnyxStatus* st = NULL;
  if (x.rank < 0 || (ax.given && !ax.known)) {
    dims_unknown(&y, x.rank >= 0 && ax.len >= 0 ? x.rank - ax.len : -1);
  } else if (!ax.given || !ax.count) { /* every dim of 1; an unknown dim makes the rank unknown */
    for (int32_t k = 0; k < x.rank && y.rank >= 0; k++) {
      if (x.d[k] < 0)
        y.rank = -1;
      else if (x.d[k] != 1)
        y.d[y.rank++] = x.d[k];
    }
  } else if (!(st = norm_axes(n, "'axes'", &ax, x.rank))) {
    for (int32_t k = 0; k < x.rank && !st; k++) {
      bool drop = false;
      for (size_t i = 0; i < ax.count; i++)
        drop |= ax.v[i] == k;
      if (drop && x.d[k] >= 0 && x.d[k] != 1)
        st = ox_node_err(n, "cannot squeeze axis %d of size %lld", (int)k, (long long)x.d[k]);
      if (!drop) y.d[y.rank++] = x.d[k];
    }
  }
  free(ax.v);
  return st ? st : ox_out_set(n, 0, t, &y);
}

OnyxStatus* ox_infer_unsqueeze(OxNode* n) {
  OxDims x, y;
  ox_in_dims(n, 0, &x);
  OnyxElemType t = ox_in_type(n, 0);
  IntList ax;
  OX_TRY(int_list(n, 1, "axes", &ax));
  OnyxStatus* st = NULL;
  if (!ax.given)
    st = ox_node_err(n, "'axes' is required");
  else if (x.rank < 0 || !ax.known) {
    int64_t r = -1;
    if (x.rank >= 0 && ax.len >= 0 && !ox_add_i64(x.rank, ax.len, &r)) r = -1;
    dims_unknown(&y, r);
  } else if (x.rank + (int64_t)ax.count > OX_INFER_MAX_RANK) {
    y.rank = -1;
  } else if (!(st = norm_axes(n, "'axes'", &ax, x.rank + (int64_t)ax.count))) {
    y.rank = x.rank + (int32_t)ax.count;
    int32_t src = 0;
    for (int32_t k = 0; k < y.rank; k++) {
      bool added = false;
      for (size_t i = 0; i < ax.count; i++)
        added |= ax.v[i] == k;
      y.d[k] = added ? 1 : x.d[src++];
    }
  }
  free(ax.v);
  return st ? st : ox_out_set(n, 0, t, &y);
}

OnyxStatus* ox_infer_gather(OxNode* n) {
  OxDims x, idx, y;
  ox_in_dims(n, 0, &x);
  ox_in_dims(n, 1, &idx);
  OnyxElemType t = ox_in_type(n, 0);
  if (x.rank == 0) return ox_node_err(n, "data must have rank >= 1");
  int64_t axis = ox_attr_i(n, "axis", 0), a = 0;
  if (x.rank >= 0 && !ox_norm_axis(axis, x.rank, &a))
    return ox_node_err(n, "attribute 'axis' is %lld, out of range for rank %d", (long long)axis,
                       (int)x.rank);
  if (x.rank < 0 || idx.rank < 0 || x.rank - 1 + idx.rank > OX_INFER_MAX_RANK)
    return ox_out_set(n, 0, t, NULL);
  y.rank = 0;
  for (int32_t k = 0; k < a; k++)
    y.d[y.rank++] = x.d[k];
  for (int32_t k = 0; k < idx.rank; k++)
    y.d[y.rank++] = idx.d[k];
  for (int32_t k = (int32_t)a + 1; k < x.rank; k++)
    y.d[y.rank++] = x.d[k];
  return ox_out_set(n, 0, t, &y);
}

OnyxStatus* ox_infer_shape(OxNode* n) {
  OxDims x, y = {.rank = 1, .d = {ONYX_DIM_UNKNOWN}};
  ox_in_dims(n, 0, &x);
  if (x.rank >= 0) {
    int64_t r = x.rank, start = ox_attr_i(n, "start", 0), end = ox_attr_i(n, "end", r);
    start = clamp64(start < 0 ? start + r : start, 0, r);
    end = clamp64(end < 0 ? end + r : end, 0, r);
    y.d[0] = end > start ? end - start : 0;
  }
  return ox_out_set(n, 0, ONYX_ELEM_INT64, &y);
}

OnyxStatus* ox_infer_expand(OxNode* n) {
  OxDims x, y;
  ox_in_dims(n, 0, &x);
  OnyxElemType t = ox_in_type(n, 0);
  IntList s;
  OX_TRY(int_list(n, 1, NULL, &s));
  OnyxStatus* st = NULL;
  if (!s.known || s.count > OX_INFER_MAX_RANK) {
    int64_t r = x.rank >= 0 && s.len >= 0 ? (x.rank > s.len ? x.rank : s.len) : -1;
    dims_unknown(&y, r);
  } else {
    y.rank = (int32_t)s.count;
    for (size_t i = 0; i < s.count && !st; i++) {
      if (s.v[i] < 0) st = ox_node_err(n, "shape value %lld is negative", (long long)s.v[i]);
      y.d[i] = s.v[i];
    }
    if (!st) st = ox_bcast_into(n, &y, &x);
  }
  free(s.v);
  return st ? st : ox_out_set(n, 0, t, &y);
}

/* --- Cast and constants ---------------------------------------------------------------- */

OnyxStatus* ox_infer_cast(OxNode* n) {
  const OxAttr* a = ox_node_attr(n, "to");
  OnyxElemType to = ONYX_ELEM_UNDEFINED;
  if (a && a->type == ONYX_ATTR_INT && a->i > 0 && a->i < ONYX_ELEM_TYPE_COUNT)
    to = (OnyxElemType)a->i;
  if (a && a->type == ONYX_ATTR_STRING && a->s) { /* Cast-1: "FLOAT", "INT64", ... */
    char lower[32];
    size_t k = 0;
    for (; a->s[k] && k + 1 < sizeof lower; k++)
      lower[k] = (char)(a->s[k] | 0x20);
    lower[k] = 0;
    to = ox_onnx_type_from_name(lower);
  }
  if (to == ONYX_ELEM_UNDEFINED) return ox_node_err(n, "attribute 'to' is not an element type");
  OxDims x;
  ox_in_dims(n, 0, &x);
  return ox_out_set(n, 0, to, &x);
}

/* Constant: the output is described by whichever value attribute is set. */
OnyxStatus* ox_infer_constant(OxNode* n) {
  static const struct {
    const char* name;
    OnyxAttrType type;
    OnyxElemType elem;
    bool list;
  } kinds[] = {
      {"value", ONYX_ATTR_TENSOR, ONYX_ELEM_UNDEFINED, false},
      {"sparse_value", ONYX_ATTR_SPARSE_TENSOR, ONYX_ELEM_UNDEFINED, false},
      {"value_float", ONYX_ATTR_FLOAT, ONYX_ELEM_FLOAT32, false},
      {"value_floats", ONYX_ATTR_FLOATS, ONYX_ELEM_FLOAT32, true},
      {"value_int", ONYX_ATTR_INT, ONYX_ELEM_INT64, false},
      {"value_ints", ONYX_ATTR_INTS, ONYX_ELEM_INT64, true},
      {"value_string", ONYX_ATTR_STRING, ONYX_ELEM_STRING, false},
      {"value_strings", ONYX_ATTR_STRINGS, ONYX_ELEM_STRING, true},
  };
  const OxAttr* found = NULL;
  size_t which = 0, count = 0;
  for (size_t i = 0; i < OX_ARRAY_LEN(kinds); i++) {
    const OxAttr* a = ox_node_attr(n, kinds[i].name);
    if (!a) continue;
    count++;
    found = a;
    which = i;
  }
  if (count != 1)
    return ox_node_err(n,
                       "exactly one of 'value', 'sparse_value' or 'value_*' must be set, "
                       "found %zu",
                       count);
  if (found->type != kinds[which].type)
    return ox_node_err(n, "attribute '%s' has the wrong type", kinds[which].name);
  if (found->type == ONYX_ATTR_TENSOR || found->type == ONYX_ATTR_SPARSE_TENSOR) {
    const OxTensor* t = found->t;
    if (!t) return ox_node_err(n, "attribute '%s' holds no tensor", kinds[which].name);
    if (found->type == ONYX_ATTR_SPARSE_TENSOR || t->rank > OX_INFER_MAX_RANK)
      return ox_out_set(n, 0, t->type, NULL);
    OxDims d = {.rank = (int32_t)t->rank};
    for (size_t i = 0; i < t->rank; i++)
      d.d[i] = t->dims[i];
    return ox_out_set(n, 0, t->type, &d);
  }
  OxDims d = {.rank = kinds[which].list ? 1 : 0, .d = {(int64_t)found->count}};
  return ox_out_set(n, 0, kinds[which].elem, &d);
}

OnyxStatus* ox_infer_constant_of_shape(OxNode* n) {
  OnyxElemType t = ONYX_ELEM_FLOAT32;
  const OxAttr* a = ox_node_attr(n, "value");
  if (a && a->type == ONYX_ATTR_TENSOR && a->t) {
    if (a->t->count != 1)
      return ox_node_err(n, "attribute 'value' must hold one element, holds %zu", a->t->count);
    t = a->t->type;
  }
  IntList s;
  OX_TRY(int_list(n, 0, NULL, &s));
  OxDims y;
  OnyxStatus* st = NULL;
  if (!s.known || s.count > OX_INFER_MAX_RANK) {
    dims_unknown(&y, s.len);
  } else {
    y.rank = (int32_t)s.count;
    for (size_t i = 0; i < s.count && !st; i++) {
      if (s.v[i] < 0) st = ox_node_err(n, "shape value %lld is negative", (long long)s.v[i]);
      y.d[i] = s.v[i];
    }
  }
  free(s.v);
  return st ? st : ox_out_set(n, 0, t, &y);
}

/* --- Reductions ------------------------------------------------------------------------ */

OnyxStatus* ox_infer_reduce(OxNode* n) {
  OxDims x, y = {.rank = 0};
  ox_in_dims(n, 0, &x);
  OnyxElemType t = ox_in_type(n, 0);
  bool keep = ox_attr_i(n, "keepdims", 1) != 0;
  bool noop = ox_attr_i(n, "noop_with_empty_axes", 0) != 0;
  IntList ax;
  OX_TRY(int_list(n, 1, "axes", &ax));
  OnyxStatus* st = NULL;
  if (x.rank < 0) {
    y.rank = -1;
  } else if (ax.given && !ax.known) { /* which axes is unknown */
    dims_unknown(&y, keep ? x.rank : ax.len >= 0 ? x.rank - ax.len : -1);
  } else if (!ax.count && noop) {
    y = x;
  } else if (!(st = norm_axes(n, "'axes'", &ax, x.rank))) {
    for (int32_t k = 0; k < x.rank; k++) {
      bool reduced = !ax.count; /* no axes: every axis */
      for (size_t i = 0; i < ax.count; i++)
        reduced |= ax.v[i] == k;
      if (!reduced)
        y.d[y.rank++] = x.d[k];
      else if (keep)
        y.d[y.rank++] = 1;
    }
  }
  free(ax.v);
  return st ? st : ox_out_set(n, 0, t, &y);
}
