/* cpu_nn_common.c — the window attributes and geometry shared by Conv,
 * MaxPool and AveragePool (cpu_conv.c, cpu_pool.c): attributes read once at
 * create, the geometry derived and checked at compute. */
#include "cpu_nn_common.h"

#include <string.h>

static const char* const AUTO_PAD_NAMES[] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};

/* The integer-list attributes, read by one loop. Values must be >= `min`. */
static const struct {
  const char* name;
  size_t values, count, cap;
  int64_t min;
} WINDOW_LISTS[] = {
    {"kernel_shape", offsetof(WindowAttrs, kernel), offsetof(WindowAttrs, n_kernel), MAX_SPATIAL,
     1},
    {"strides", offsetof(WindowAttrs, strides), offsetof(WindowAttrs, n_strides), MAX_SPATIAL, 1},
    {"dilations", offsetof(WindowAttrs, dilations), offsetof(WindowAttrs, n_dilations), MAX_SPATIAL,
     1},
    {"pads", offsetof(WindowAttrs, pads), offsetof(WindowAttrs, n_pads), 2 * MAX_SPATIAL, 0},
};

static OnyxStatus* read_auto_pad(const OnyxNode* n, WindowAttrs* w) {
  size_t len = 0;
  const char* s = cpu_host->node_attr_string(n, "auto_pad", &len);
  w->auto_pad = PAD_NOTSET;
  if (!s || len == 0) return NULL;
  for (size_t i = 0; i < CPU_ARRAY_LEN(AUTO_PAD_NAMES); i++)
    if (strlen(AUTO_PAD_NAMES[i]) == len && memcmp(AUTO_PAD_NAMES[i], s, len) == 0) {
      w->auto_pad = (AutoPad)i;
      return NULL;
    }
  return cpu_error(w->node, ONYX_INVALID_ARGUMENT, "unknown auto_pad '%.*s'", (int)len, s);
}

OnyxStatus* cpu_window_attrs_read(const OnyxNode* n, WindowAttrs* w) {
  memset(w, 0, sizeof *w);
  w->node = n;
  for (size_t i = 0; i < CPU_ARRAY_LEN(WINDOW_LISTS); i++) {
    size_t count = 0;
    const int64_t* v = cpu_host->node_attr_ints(n, WINDOW_LISTS[i].name, &count);
    if (count > WINDOW_LISTS[i].cap)
      return cpu_error(w->node, ONYX_NOT_IMPLEMENTED,
                       "attribute %s has %zu values; at most %zu spatial dims are supported",
                       WINDOW_LISTS[i].name, count, (size_t)MAX_SPATIAL);
    for (size_t j = 0; j < count; j++)
      if (v[j] < WINDOW_LISTS[i].min)
        return cpu_error(w->node, ONYX_INVALID_ARGUMENT, "attribute %s[%zu] = %lld < %lld",
                         WINDOW_LISTS[i].name, j, (long long)v[j], (long long)WINDOW_LISTS[i].min);
    if (count) memcpy((char*)w + WINDOW_LISTS[i].values, v, count * sizeof *v);
    *(size_t*)((char*)w + WINDOW_LISTS[i].count) = count;
  }
  w->group = cpu_host->node_attr_int(n, "group", 1);
  w->ceil_mode = cpu_host->node_attr_int(n, "ceil_mode", 0) != 0;
  w->count_include_pad = cpu_host->node_attr_int(n, "count_include_pad", 0) != 0;
  const int64_t so = cpu_host->node_attr_int(n, "storage_order", 0);
  if (w->group < 1)
    return cpu_error(w->node, ONYX_INVALID_ARGUMENT, "group must be >= 1, got %lld",
                     (long long)w->group);
  if (so != 0 && so != 1)
    return cpu_error(w->node, ONYX_INVALID_ARGUMENT, "storage_order must be 0 or 1, got %lld",
                     (long long)so);
  w->storage_order = (int)so;
  return read_auto_pad(n, w);
}

static OnyxStatus* check_list_len(const WindowAttrs* w, const char* name, size_t n, size_t want) {
  if (n == 0 || n == want) return NULL;
  return cpu_error(w->node, ONYX_INVALID_ARGUMENT,
                   "attribute %s has %zu values, expected %zu for the input's spatial rank", name,
                   n, want);
}

/* Output size and padding of one dim. Every value the kernels derive from
 * it (window starts, padded extents, input offsets) stays within
 * in + pb + pe + eff, which is checked to fit an int64. */
static OnyxStatus* geometry_dim(const WindowAttrs* w, Geometry* g, size_t i) {
  const int64_t in = g->in[i], s = g->s[i];
  int64_t eff, t, lim;
  if (!cpu_dilated_extent(g->k[i], g->d[i], &eff))
    return cpu_error(w->node, ONYX_INVALID_ARGUMENT,
                     "spatial dim %zu: integer overflow in the dilated kernel extent "
                     "(dilations[%zu] = %lld, kernel dim %lld)",
                     i, i, (long long)g->d[i], (long long)g->k[i]);
  if (w->auto_pad == PAD_SAME_UPPER || w->auto_pad == PAD_SAME_LOWER) {
    g->out[i] = in / s + (in % s != 0);
    int64_t total;
    if (!cpu_mul_i64(g->out[i] > 0 ? g->out[i] - 1 : 0, s, &t) || !cpu_add_i64(t, eff, &t) ||
        !cpu_sub_i64(t, in, &total))
      return cpu_error(w->node, ONYX_INVALID_ARGUMENT,
                       "spatial dim %zu: integer overflow computing the %s padding from "
                       "dilations[%zu] = %lld and strides[%zu] = %lld",
                       i, AUTO_PAD_NAMES[w->auto_pad], i, (long long)g->d[i], i, (long long)s);
    if (total < 0) total = 0;
    g->pb[i] = w->auto_pad == PAD_SAME_UPPER ? total / 2 : total - total / 2;
    g->pe[i] = total - g->pb[i];
  } else if (w->auto_pad == PAD_VALID) {
    g->pb[i] = g->pe[i] = 0;
  }
  if (!cpu_add3_i64(in, g->pb[i], g->pe[i], &t) || !cpu_add_i64(t, eff, &lim))
    return cpu_error(w->node, ONYX_INVALID_ARGUMENT,
                     "spatial dim %zu: integer overflow: input %lld + pads %lld + %lld + "
                     "dilated kernel extent %lld does not fit in int64",
                     i, (long long)in, (long long)g->pb[i], (long long)g->pe[i], (long long)eff);
  if (w->auto_pad == PAD_SAME_UPPER || w->auto_pad == PAD_SAME_LOWER) return NULL;
  const int64_t span = t - eff;
  if (span < 0)
    return cpu_error(w->node, ONYX_INVALID_ARGUMENT,
                     "spatial dim %zu: window of extent %lld is larger than the padded input "
                     "(%lld + %lld + %lld)",
                     i, (long long)eff, (long long)in, (long long)g->pb[i], (long long)g->pe[i]);
  g->out[i] = (w->ceil_mode ? span / s + (span % s != 0) : span / s) + 1;
  /* A last window that would start inside the end padding is dropped. */
  if (w->ceil_mode && (!cpu_mul_i64(g->out[i] - 1, s, &t) || t >= in + g->pb[i])) g->out[i]--;
  return NULL;
}

/* `in` and `kernel` have `rank` spatial dims each. */
OnyxStatus* cpu_geometry_init(const WindowAttrs* w, size_t rank, const int64_t* in,
                              const int64_t* kernel, Geometry* g) {
  OnyxStatus* st;
  if (rank == 0 || rank > MAX_SPATIAL)
    return cpu_error(w->node, ONYX_NOT_IMPLEMENTED,
                     "input has %zu spatial dims; 1..%d are supported", rank, MAX_SPATIAL);
  if ((st = check_list_len(w, "strides", w->n_strides, rank)) ||
      (st = check_list_len(w, "dilations", w->n_dilations, rank)) ||
      (w->auto_pad == PAD_NOTSET && (st = check_list_len(w, "pads", w->n_pads, 2 * rank))))
    return st;
  g->rank = rank;
  g->in_size = g->out_size = g->k_size = 1;
  for (size_t i = 0; i < rank; i++) {
    g->in[i] = in[i];
    g->k[i] = kernel[i];
    if (kernel[i] < 1)
      return cpu_error(w->node, ONYX_INVALID_ARGUMENT, "kernel dim %zu is %lld; must be >= 1", i,
                       (long long)kernel[i]);
    g->s[i] = w->n_strides ? w->strides[i] : 1;
    g->d[i] = w->n_dilations ? w->dilations[i] : 1;
    g->pb[i] = w->n_pads ? w->pads[i] : 0;
    g->pe[i] = w->n_pads ? w->pads[i + rank] : 0;
    if (in[i] < 0)
      return cpu_error(w->node, ONYX_INVALID_ARGUMENT, "spatial dim %zu of the input is %lld", i,
                       (long long)in[i]);
    if ((st = geometry_dim(w, g, i))) return st;
    if (!cpu_mul_size(g->in_size, (size_t)g->in[i], &g->in_size) ||
        !cpu_mul_size(g->out_size, (size_t)g->out[i], &g->out_size) ||
        !cpu_mul_size(g->k_size, (size_t)g->k[i], &g->k_size))
      return cpu_error(w->node, ONYX_INVALID_ARGUMENT,
                       "integer overflow: the input, output or kernel size over the spatial "
                       "dims does not fit in size_t");
  }
  return NULL;
}
