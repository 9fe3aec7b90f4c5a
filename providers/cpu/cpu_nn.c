/* cpu_nn.c — neural-network kernels: Conv (im2col + the GEMM core of
 * cpu_linalg.c), MaxPool / AveragePool / GlobalAveragePool (one N-D window
 * driver), BatchNormalization (inference), LayerNormalization and Softmax.
 *
 * Attributes are read once in `create` into a state struct; shapes are only
 * known in `compute`, where the window geometry is derived and checked. */
#include "cpu_nn.h"
#include "cpu_util.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SPATIAL 8
#define MAX_RANK    (MAX_SPATIAL + 2)

/* "[3,3]" into buf (truncated to fit), for messages. */
static const char* format_dims(char* buf, size_t size, const int64_t* d, size_t n) {
  size_t len = (size_t)snprintf(buf, size, "[");
  for (size_t i = 0; i < n && len < size; i++)
    len += (size_t)snprintf(buf + len, size - len, "%s%lld", i ? "," : "", (long long)d[i]);
  if (len < size) snprintf(buf + len, size - len, "]");
  return buf;
}

/* An output that the node actually produces (optional outputs may be absent). */
static int node_has_output(const OnyxNode* n, size_t i) {
  return i < cpu_host->node_output_count(n) && cpu_host->node_output(n, i) != NULL;
}

static OnyxStatus* scratch(OnyxKernelContext* ctx, size_t bytes, void** out) {
  *out = cpu_host->ctx_scratch(ctx, bytes ? bytes : 1);
  return *out ? NULL
              : cpu_ctx_error(ctx, ONYX_OUT_OF_MEMORY, "no scratch memory (%zu bytes)", bytes);
}

/* ======================================================================== */
/* Window attributes and geometry (Conv, MaxPool, AveragePool)               */
/* ======================================================================== */

typedef enum AutoPad { PAD_NOTSET, PAD_SAME_UPPER, PAD_SAME_LOWER, PAD_VALID } AutoPad;

static const char* const AUTO_PAD_NAMES[] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};

typedef struct WindowAttrs {
  const OnyxNode* node;
  int64_t kernel[MAX_SPATIAL];
  size_t n_kernel;
  int64_t strides[MAX_SPATIAL];
  size_t n_strides;
  int64_t dilations[MAX_SPATIAL];
  size_t n_dilations;
  int64_t pads[2 * MAX_SPATIAL];
  size_t n_pads;
  AutoPad auto_pad;
  int64_t group;
  int ceil_mode, count_include_pad, storage_order;
  int is_max; /* pooling: MaxPool rather than AveragePool */
} WindowAttrs;

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

static OnyxStatus* window_attrs_read(const OnyxNode* n, WindowAttrs* w) {
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

/* Everything a window op needs about its spatial dims, per dim. */
typedef struct Geometry {
  size_t rank;
  int64_t in[MAX_SPATIAL], k[MAX_SPATIAL], s[MAX_SPATIAL], d[MAX_SPATIAL];
  int64_t pb[MAX_SPATIAL], pe[MAX_SPATIAL], out[MAX_SPATIAL];
  size_t in_size, out_size, k_size;
} Geometry;

static OnyxStatus* check_list_len(const WindowAttrs* w, const char* name, size_t n, size_t want) {
  if (n == 0 || n == want) return NULL;
  return cpu_error(w->node, ONYX_INVALID_ARGUMENT,
                   "attribute %s has %zu values, expected %zu for the input's spatial rank", name,
                   n, want);
}

/* Output size and padding of one dim. */
static OnyxStatus* geometry_dim(const WindowAttrs* w, Geometry* g, size_t i) {
  const int64_t in = g->in[i], s = g->s[i], eff = (g->k[i] - 1) * g->d[i] + 1;
  if (w->auto_pad == PAD_SAME_UPPER || w->auto_pad == PAD_SAME_LOWER) {
    g->out[i] = (in + s - 1) / s;
    int64_t total = (g->out[i] - 1) * s + eff - in;
    if (total < 0) total = 0;
    g->pb[i] = w->auto_pad == PAD_SAME_UPPER ? total / 2 : total - total / 2;
    g->pe[i] = total - g->pb[i];
    return NULL;
  }
  if (w->auto_pad == PAD_VALID) g->pb[i] = g->pe[i] = 0;
  const int64_t span = in + g->pb[i] + g->pe[i] - eff;
  if (span < 0)
    return cpu_error(w->node, ONYX_INVALID_ARGUMENT,
                     "spatial dim %zu: window of extent %lld is larger than the padded input "
                     "(%lld + %lld + %lld)",
                     i, (long long)eff, (long long)in, (long long)g->pb[i], (long long)g->pe[i]);
  g->out[i] = (w->ceil_mode ? (span + s - 1) / s : span / s) + 1;
  /* A last window that would start inside the end padding is dropped. */
  if (w->ceil_mode && (g->out[i] - 1) * s >= in + g->pb[i]) g->out[i]--;
  return NULL;
}

/* `in` and `kernel` have `rank` spatial dims each. */
static OnyxStatus* geometry_init(const WindowAttrs* w, size_t rank, const int64_t* in,
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
    if ((st = geometry_dim(w, g, i))) return st;
    g->in_size *= (size_t)g->in[i];
    g->out_size *= (size_t)g->out[i];
    g->k_size *= (size_t)g->k[i];
  }
  return NULL;
}

/* Row-major coordinates of `index` in `dims`. */
static void unravel(size_t index, const int64_t* dims, size_t rank, int64_t* coord) {
  for (size_t i = rank; i-- > 0;) {
    coord[i] = (int64_t)(index % (size_t)dims[i]);
    index /= (size_t)dims[i];
  }
}

/* ======================================================================== */
/* Conv                                                                      */
/* ======================================================================== */

typedef struct Im2Col {
  const Geometry* g;
  const void* x; /* one group's channels of one image */
  void* col;     /* (channels * k_size) x out_size */
} Im2Col;

/* Row r of col is channel r / k_size at kernel offset r % k_size; every
 * output position reads one input element of it, or 0 in the padding. The
 * last spatial dim is the inner loop; the others are resolved once per run. */
#define DEFINE_IM2COL(T)                                                                           \
  static void im2col_rows_##T(void* user, size_t begin, size_t end) {                              \
    const Im2Col* job = user;                                                                      \
    const Geometry* g = job->g;                                                                    \
    const size_t last = g->rank - 1, w_out = (size_t)g->out[last];                                 \
    const size_t outer = g->out_size / w_out;                                                      \
    for (size_t r = begin; r < end; r++) {                                                         \
      const T* x = (const T*)job->x + (r / g->k_size) * g->in_size;                                \
      T* dst = (T*)job->col + r * g->out_size;                                                     \
      int64_t kc[MAX_SPATIAL], oc[MAX_SPATIAL];                                                    \
      unravel(r % g->k_size, g->k, g->rank, kc);                                                   \
      for (size_t q = 0; q < outer; q++, dst += w_out) {                                           \
        unravel(q, g->out, last, oc);                                                              \
        int64_t off = 0, valid = 1;                                                                \
        for (size_t i = 0; i < last; i++) {                                                        \
          const int64_t xi = oc[i] * g->s[i] - g->pb[i] + kc[i] * g->d[i];                         \
          valid &= xi >= 0 && xi < g->in[i];                                                       \
          off = off * g->in[i] + xi;                                                               \
        }                                                                                          \
        if (!valid) {                                                                              \
          memset(dst, 0, w_out * sizeof(T));                                                       \
          continue;                                                                                \
        }                                                                                          \
        const int64_t x0 = kc[last] * g->d[last] - g->pb[last], s = g->s[last];                    \
        const int64_t n_in = g->in[last];                                                          \
        const T* row = x + off * n_in;                                                             \
        for (size_t o = 0; o < w_out; o++) {                                                       \
          const int64_t xi = (int64_t)o * s + x0;                                                  \
          dst[o] = xi >= 0 && xi < n_in ? row[xi] : (T)0;                                          \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }
DEFINE_IM2COL(float)
DEFINE_IM2COL(double)

typedef struct ConvState {
  WindowAttrs w;
} ConvState;

static OnyxStatus* conv_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  (void)user_data;
  ConvState* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  OnyxStatus* st = window_attrs_read(node, &s->w);
  if (st) {
    free(s);
    return st;
  }
  *state = s;
  return NULL;
}

/* Shapes of one Conv call: X (n, c, ...), W (m, c / group, kernel...). */
typedef struct ConvShape {
  size_t n, c, m, cg, mg;
  Geometry g;
  int64_t out[MAX_RANK];
  size_t out_rank;
} ConvShape;

static OnyxStatus* conv_shape(const WindowAttrs* w, const OnyxTensor* x, const OnyxTensor* wt,
                              const OnyxTensor* b, ConvShape* cs) {
  const size_t r = cpu_host->tensor_rank(x);
  const int64_t* dx = cpu_host->tensor_dims(x);
  const int64_t* dw = cpu_host->tensor_dims(wt);
  if (r < 3 || cpu_host->tensor_rank(wt) != r)
    return cpu_error(w->node, ONYX_INVALID_ARGUMENT,
                     "X (rank %zu) and W (rank %zu) must have the same rank >= 3", r,
                     cpu_host->tensor_rank(wt));
  cs->n = (size_t)dx[0], cs->c = (size_t)dx[1], cs->m = (size_t)dw[0], cs->cg = (size_t)dw[1];
  const size_t group = (size_t)w->group;
  if (cs->c != cs->cg * group || cs->m % group != 0)
    return cpu_error(w->node, ONYX_INVALID_ARGUMENT,
                     "group %zu does not fit: X has %zu channels, W is %zu x %zu (needs X "
                     "channels = W.shape[1] * group and W.shape[0] divisible by group)",
                     group, cs->c, cs->m, cs->cg);
  cs->mg = cs->m / group;
  if (w->n_kernel && (w->n_kernel != r - 2 || memcmp(w->kernel, dw + 2, w->n_kernel * 8) != 0)) {
    char ks[128], ws[128];
    return cpu_error(w->node, ONYX_INVALID_ARGUMENT,
                     "kernel_shape %s does not match W's spatial dims %s",
                     format_dims(ks, sizeof ks, w->kernel, w->n_kernel),
                     format_dims(ws, sizeof ws, dw + 2, r - 2));
  }
  if (b && (cpu_host->tensor_rank(b) != 1 || (size_t)cpu_host->tensor_dims(b)[0] != cs->m))
    return cpu_error(w->node, ONYX_INVALID_ARGUMENT, "B must be 1-D of size M = %zu", cs->m);
  OnyxStatus* st = geometry_init(w, r - 2, dx + 2, dw + 2, &cs->g);
  if (st) return st;
  cs->out[0] = (int64_t)cs->n, cs->out[1] = (int64_t)cs->m;
  memcpy(cs->out + 2, cs->g.out, (r - 2) * sizeof(int64_t));
  cs->out_rank = r;
  return NULL;
}

/* A 1x1 window with unit strides and no padding reads X as it is. */
static int conv_is_pointwise(const Geometry* g) {
  for (size_t i = 0; i < g->rank; i++)
    if (g->k[i] != 1 || g->s[i] != 1 || g->pb[i] || g->pe[i]) return 0;
  return 1;
}

/* Y rows of one image start as the bias (then GEMM adds with beta = 1). */
static void conv_fill_bias(void* y, const void* bias, OnyxElemType t, size_t m, size_t os) {
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < os; j++)
      if (t == ONYX_ELEM_FLOAT32)
        ((float*)y)[i * os + j] = ((const float*)bias)[i];
      else
        ((double*)y)[i * os + j] = ((const double*)bias)[i];
}

static OnyxStatus* conv_compute(void* state, OnyxKernelContext* ctx) {
  const WindowAttrs* w = &((const ConvState*)state)->w;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* wt = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* b = cpu_host->ctx_input_count(ctx) > 2 ? cpu_host->ctx_input(ctx, 2) : NULL;
  ConvShape cs;
  OnyxStatus* st = conv_shape(w, x, wt, b, &cs);
  if (st) return st;
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, cs.out, cs.out_rank, &y))) return st;
  const OnyxElemType t = cpu_host->tensor_elem_type(x);
  const size_t es = cpu_elem_size(t), os = cs.g.out_size, kdim = cs.cg * cs.g.k_size;
  if (cpu_host->tensor_elem_count(y) == 0) return NULL;
  const int pointwise = conv_is_pointwise(&cs.g);
  void* col = NULL;
  if (!pointwise && (st = scratch(ctx, kdim * os * es, &col))) return st;
  OnyxThreadPool* pool = cpu_host->ctx_thread_pool(ctx);
  const char* xd = cpu_host->tensor_data(x);
  const char* wd = cpu_host->tensor_data(wt);
  char* yd = cpu_host->tensor_mutable_data(y);
  for (size_t n = 0; n < cs.n; n++)
    for (size_t grp = 0; grp < (size_t)w->group; grp++) {
      const char* xg = xd + (n * cs.c + grp * cs.cg) * cs.g.in_size * es;
      char* yg = yd + (n * cs.m + grp * cs.mg) * os * es;
      if (!pointwise) {
        Im2Col job = {&cs.g, xg, col};
        cpu_host->parallel_for(
            pool, kdim, t == ONYX_ELEM_FLOAT32 ? im2col_rows_float : im2col_rows_double, &job);
      }
      if (b)
        conv_fill_bias(yg, (const char*)cpu_host->tensor_data(b) + grp * cs.mg * es, t, cs.mg, os);
      const CpuGemm g = {.m = cs.mg,
                         .n = os,
                         .k = kdim,
                         .a = wd + grp * cs.mg * kdim * es,
                         .lda = kdim,
                         .b = pointwise ? xg : col,
                         .ldb = os,
                         .c = yg,
                         .ldc = os,
                         .alpha = 1.0,
                         .beta = b ? 1.0 : 0.0};
      if (t == ONYX_ELEM_FLOAT32)
        cpu_gemm_f32(pool, &g);
      else
        cpu_gemm_f64(pool, &g);
    }
  return NULL;
}

/* ======================================================================== */
/* Pooling: one driver for MaxPool and AveragePool over N-D windows          */
/* ======================================================================== */

/* For each output position, the input positions its window covers (row-major
 * spatial offsets, padding skipped) and, for count_include_pad, how many
 * window positions fall inside the padded input. Built once per compute and
 * shared by every (n, c) plane. */
typedef struct PoolTable {
  size_t* start;   /* out_size + 1: entries of output o are [start[o], start[o+1]) */
  int64_t* offs;   /* out_size * k_size at most */
  int64_t* padded; /* out_size */
} PoolTable;

static void pool_table_build(const Geometry* g, PoolTable* t) {
  size_t e = 0;
  int64_t oc[MAX_SPATIAL], kc[MAX_SPATIAL];
  for (size_t o = 0; o < g->out_size; o++) {
    unravel(o, g->out, g->rank, oc);
    t->start[o] = e;
    t->padded[o] = 0;
    for (size_t kk = 0; kk < g->k_size; kk++) {
      unravel(kk, g->k, g->rank, kc);
      int inside = 1, in_padded = 1;
      int64_t off = 0;
      for (size_t i = 0; i < g->rank; i++) {
        const int64_t xi = oc[i] * g->s[i] - g->pb[i] + kc[i] * g->d[i];
        inside &= xi >= 0 && xi < g->in[i];
        in_padded &= xi >= -g->pb[i] && xi < g->in[i] + g->pe[i];
        off = off * g->in[i] + xi;
      }
      t->padded[o] += in_padded;
      if (inside) t->offs[e++] = off;
    }
  }
  t->start[g->out_size] = e;
}

typedef struct PoolJob {
  const Geometry* g;
  PoolTable t;
  const void* x;
  void* y;
  int64_t* indices; /* MaxPool's optional second output, or NULL */
  int storage_order, count_include_pad;
} PoolJob;

/* ONNX's Indices: the flat index into X, with the spatial part in row-major
 * order (storage_order 0) or column-major (storage_order 1). */
static int64_t pool_index(const PoolJob* j, size_t plane, int64_t off) {
  if (off < 0) return -1;
  int64_t spatial = off;
  if (j->storage_order) {
    int64_t c[MAX_SPATIAL], stride = 1;
    unravel((size_t)off, j->g->in, j->g->rank, c);
    spatial = 0;
    for (size_t i = 0; i < j->g->rank; i++)
      spatial += c[i] * stride, stride *= j->g->in[i];
  }
  return (int64_t)(plane * j->g->in_size) + spatial;
}

#define DEFINE_MAXPOOL(T, LOWEST)                                                                  \
  static void maxpool_planes_##T(void* user, size_t begin, size_t end) {                           \
    const PoolJob* j = user;                                                                       \
    const size_t os = j->g->out_size;                                                              \
    for (size_t p = begin; p < end; p++) {                                                         \
      const T* x = (const T*)j->x + p * j->g->in_size;                                             \
      T* y = (T*)j->y + p * os;                                                                    \
      for (size_t o = 0; o < os; o++) {                                                            \
        T best = LOWEST;                                                                           \
        int64_t arg = -1;                                                                          \
        for (size_t e = j->t.start[o]; e < j->t.start[o + 1]; e++) {                               \
          const T v = x[j->t.offs[e]];                                                             \
          if (arg < 0 || v > best) best = v, arg = j->t.offs[e];                                   \
        }                                                                                          \
        y[o] = best;                                                                               \
        if (j->indices) j->indices[p * os + o] = pool_index(j, p, arg);                            \
      }                                                                                            \
    }                                                                                              \
  }
DEFINE_MAXPOOL(float, -INFINITY)
DEFINE_MAXPOOL(double, -INFINITY)
DEFINE_MAXPOOL(int8_t, INT8_MIN)
DEFINE_MAXPOOL(uint8_t, 0)

#define DEFINE_AVGPOOL(T)                                                                          \
  static void avgpool_planes_##T(void* user, size_t begin, size_t end) {                           \
    const PoolJob* j = user;                                                                       \
    const size_t os = j->g->out_size;                                                              \
    for (size_t p = begin; p < end; p++) {                                                         \
      const T* x = (const T*)j->x + p * j->g->in_size;                                             \
      T* y = (T*)j->y + p * os;                                                                    \
      for (size_t o = 0; o < os; o++) {                                                            \
        T sum = 0;                                                                                 \
        for (size_t e = j->t.start[o]; e < j->t.start[o + 1]; e++)                                 \
          sum += x[j->t.offs[e]];                                                                  \
        const int64_t n =                                                                          \
            j->count_include_pad ? j->t.padded[o] : (int64_t)(j->t.start[o + 1] - j->t.start[o]);  \
        y[o] = n > 0 ? sum / (T)n : (T)0;                                                          \
      }                                                                                            \
    }                                                                                              \
  }
DEFINE_AVGPOOL(float)
DEFINE_AVGPOOL(double)

typedef void (*PlaneFn)(void* user, size_t begin, size_t end);

static const struct {
  OnyxElemType type;
  PlaneFn max, avg;
} POOL_TYPES[] = {
    {ONYX_ELEM_FLOAT32, maxpool_planes_float, avgpool_planes_float},
    {ONYX_ELEM_FLOAT64, maxpool_planes_double, avgpool_planes_double},
    {ONYX_ELEM_INT8, maxpool_planes_int8_t, NULL},
    {ONYX_ELEM_UINT8, maxpool_planes_uint8_t, NULL},
};

static PlaneFn pool_fn(OnyxElemType t, int is_max) {
  for (size_t i = 0; i < CPU_ARRAY_LEN(POOL_TYPES); i++)
    if (POOL_TYPES[i].type == t) return is_max ? POOL_TYPES[i].max : POOL_TYPES[i].avg;
  return NULL;
}

typedef struct PoolState {
  WindowAttrs w;
} PoolState;

static OnyxStatus* pool_create_common(const OnyxNode* node, int is_max, void** state) {
  PoolState* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  OnyxStatus* st = window_attrs_read(node, &s->w);
  if (!st && s->w.n_kernel == 0)
    st = cpu_error(s->w.node, ONYX_INVALID_ARGUMENT, "kernel_shape is required");
  if (st) {
    free(s);
    return st;
  }
  s->w.is_max = is_max;
  *state = s;
  return NULL;
}

static OnyxStatus* maxpool_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** st) {
  (void)ep, (void)user_data;
  return pool_create_common(node, 1, st);
}

static OnyxStatus* avgpool_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** st) {
  (void)ep, (void)user_data;
  return pool_create_common(node, 0, st);
}

static OnyxStatus* pool_alloc_table(OnyxKernelContext* ctx, const Geometry* g, PoolTable* t) {
  void *a, *b, *c;
  OnyxStatus* st;
  if ((st = scratch(ctx, (g->out_size + 1) * sizeof(size_t), &a)) ||
      (st = scratch(ctx, g->out_size * g->k_size * sizeof(int64_t), &b)) ||
      (st = scratch(ctx, g->out_size * sizeof(int64_t), &c)))
    return st;
  t->start = a, t->offs = b, t->padded = c;
  pool_table_build(g, t);
  return NULL;
}

static OnyxStatus* pool_compute(void* state, OnyxKernelContext* ctx) {
  const WindowAttrs* w = &((const PoolState*)state)->w;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const size_t r = cpu_host->tensor_rank(x);
  const int64_t* dx = cpu_host->tensor_dims(x);
  if (r < 3 || w->n_kernel != r - 2)
    return cpu_error(w->node, ONYX_INVALID_ARGUMENT,
                     "X has rank %zu but kernel_shape has %zu values (expected rank - 2)", r,
                     w->n_kernel);
  const PlaneFn fn = pool_fn(cpu_host->tensor_elem_type(x), w->is_max);
  if (!fn)
    return cpu_error(w->node, ONYX_NOT_IMPLEMENTED, "element type %d not supported",
                     (int)cpu_host->tensor_elem_type(x));
  PoolJob job = {.x = cpu_host->tensor_data(x),
                 .storage_order = w->storage_order,
                 .count_include_pad = w->count_include_pad};
  Geometry g;
  OnyxStatus* st = geometry_init(w, r - 2, dx + 2, w->kernel, &g);
  if (st) return st;
  job.g = &g;
  int64_t out[MAX_RANK] = {dx[0], dx[1]};
  memcpy(out + 2, g.out, (r - 2) * sizeof(int64_t));
  OnyxTensor *y, *ind = NULL;
  if ((st = cpu_host->ctx_output(ctx, 0, out, r, &y))) return st;
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  if (w->is_max && node && node_has_output(node, 1) &&
      (st = cpu_host->ctx_output(ctx, 1, out, r, &ind)))
    return st;
  const size_t planes = (size_t)dx[0] * (size_t)dx[1];
  if (planes == 0 || g.out_size == 0) return NULL;
  if ((st = pool_alloc_table(ctx, &g, &job.t))) return st;
  job.y = cpu_host->tensor_mutable_data(y);
  job.indices = ind ? cpu_host->tensor_mutable_data(ind) : NULL;
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), planes, fn, &job);
  return NULL;
}

/* ======================================================================== */
/* GlobalAveragePool                                                         */
/* ======================================================================== */

typedef struct PlaneJob {
  const void* x;
  void* y;
  size_t size; /* elements per plane */
} PlaneJob;

#define DEFINE_GLOBAL_AVG(T)                                                                       \
  static void global_avg_##T(void* user, size_t begin, size_t end) {                               \
    const PlaneJob* j = user;                                                                      \
    for (size_t p = begin; p < end; p++) {                                                         \
      const T* x = (const T*)j->x + p * j->size;                                                   \
      double sum = 0;                                                                              \
      for (size_t i = 0; i < j->size; i++)                                                         \
        sum += x[i];                                                                               \
      ((T*)j->y)[p] = j->size ? (T)(sum / (double)j->size) : (T)0;                                 \
    }                                                                                              \
  }
DEFINE_GLOBAL_AVG(float)
DEFINE_GLOBAL_AVG(double)

static OnyxStatus* global_avg_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const size_t r = cpu_host->tensor_rank(x);
  const int64_t* dx = cpu_host->tensor_dims(x);
  if (r < 2 || r > MAX_RANK)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X must have rank 2..%d, got %zu", MAX_RANK,
                         r);
  int64_t out[MAX_RANK];
  for (size_t i = 0; i < r; i++)
    out[i] = i < 2 ? dx[i] : 1;
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, out, r, &y);
  if (st) return st;
  PlaneJob job = {cpu_host->tensor_data(x), cpu_host->tensor_mutable_data(y),
                  cpu_dims_product(dx, 2, r)};
  const int f32 = cpu_host->tensor_elem_type(x) == ONYX_ELEM_FLOAT32;
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), (size_t)dx[0] * (size_t)dx[1],
                         f32 ? global_avg_float : global_avg_double, &job);
  return NULL;
}

/* ======================================================================== */
/* BatchNormalization (inference)                                            */
/* ======================================================================== */

typedef struct BatchNormState {
  const OnyxNode* node;
  double epsilon;
} BatchNormState;

/* How a version range of BatchNormalization says "training". */
typedef enum BnTraining { BN_BY_OUTPUTS, BN_BY_ATTR } BnTraining;
static const BnTraining BN_OUTPUTS = BN_BY_OUTPUTS, BN_ATTR = BN_BY_ATTR;

static OnyxStatus* bn_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  /* Opset 14+ says training through training_mode; before, a node asking
   * for the running/saved statistics outputs is a training node. */
  const int training = *(const BnTraining*)user_data == BN_BY_ATTR
                           ? cpu_host->node_attr_int(node, "training_mode", 0) != 0
                           : node_has_output(node, 1) || node_has_output(node, 2) ||
                                 node_has_output(node, 3) || node_has_output(node, 4);
  if (training)
    return cpu_error(node, ONYX_NOT_IMPLEMENTED, "training mode not supported (inference only)");
  BatchNormState* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->node = node;
  s->epsilon = cpu_host->node_attr_float(node, "epsilon", 1e-5f);
  *state = s;
  return NULL;
}

static double load_real(const void* p, OnyxElemType t, size_t i) {
  return t == ONYX_ELEM_FLOAT32 ? ((const float*)p)[i] : ((const double*)p)[i];
}

typedef struct BnJob {
  const void* x;
  void* y;
  const double *a, *b; /* y = x * a + b, per channel or per element */
  size_t channels, inner;
  int per_element; /* opset < 9 with spatial = 0: parameters of shape (C, D1, ...) */
} BnJob;

#define DEFINE_BN(T)                                                                               \
  static void bn_planes_##T(void* user, size_t begin, size_t end) {                                \
    const BnJob* j = user;                                                                         \
    for (size_t p = begin; p < end; p++) {                                                         \
      const size_t c = p % j->channels;                                                            \
      const T* x = (const T*)j->x + p * j->inner;                                                  \
      T* y = (T*)j->y + p * j->inner;                                                              \
      if (j->per_element) {                                                                        \
        const double* a = j->a + c * j->inner;                                                     \
        const double* b = j->b + c * j->inner;                                                     \
        for (size_t i = 0; i < j->inner; i++)                                                      \
          y[i] = (T)(x[i] * a[i] + b[i]);                                                          \
      } else {                                                                                     \
        const T a = (T)j->a[c], b = (T)j->b[c];                                                    \
        for (size_t i = 0; i < j->inner; i++)                                                      \
          y[i] = x[i] * a + b;                                                                     \
      }                                                                                            \
    }                                                                                              \
  }
DEFINE_BN(float)
DEFINE_BN(double)

/* Folds scale, bias, mean and var into y = x * a + b. */
static OnyxStatus* bn_coefficients(const BatchNormState* s, OnyxKernelContext* ctx, size_t count,
                                   BnJob* job) {
  const OnyxElemType t = cpu_host->tensor_elem_type(cpu_host->ctx_input(ctx, 0));
  const void* p[4];
  for (size_t i = 0; i < 4; i++) {
    const OnyxTensor* in = cpu_host->ctx_input(ctx, i + 1);
    if (!in || cpu_host->tensor_elem_count(in) != count || cpu_host->tensor_elem_type(in) != t)
      return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                       "input %zu must have %zu elements of X's type", i + 1, count);
    p[i] = cpu_host->tensor_data(in);
  }
  double* a;
  OnyxStatus* st = scratch(ctx, 2 * count * sizeof(double), (void**)&a);
  if (st) return st;
  for (size_t i = 0; i < count; i++) {
    a[i] = load_real(p[0], t, i) / sqrt(load_real(p[3], t, i) + s->epsilon);
    a[count + i] = load_real(p[1], t, i) - load_real(p[2], t, i) * a[i];
  }
  job->a = a, job->b = a + count;
  return NULL;
}

static OnyxStatus* bn_compute(void* state, OnyxKernelContext* ctx) {
  const BatchNormState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const size_t r = cpu_host->tensor_rank(x);
  const int64_t* dx = cpu_host->tensor_dims(x);
  const OnyxElemType t = cpu_host->tensor_elem_type(x);
  if (r < 2 || (t != ONYX_ELEM_FLOAT32 && t != ONYX_ELEM_FLOAT64))
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                     "X must be float32/float64 of rank >= 2 (got type %d, rank %zu)", (int)t, r);
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, dx, r, &y);
  if (st) return st;
  BnJob job = {cpu_host->tensor_data(x),
               cpu_host->tensor_mutable_data(y),
               NULL,
               NULL,
               (size_t)dx[1],
               cpu_dims_product(dx, 2, r),
               0};
  /* spatial = 0 (opset < 9) gives parameters one per (C, D1, ...) element. */
  const OnyxTensor* scale = cpu_host->ctx_input(ctx, 1);
  job.per_element = scale && cpu_host->tensor_elem_count(scale) != job.channels &&
                    cpu_host->tensor_elem_count(scale) == job.channels * job.inner;
  if ((st = bn_coefficients(s, ctx, job.per_element ? job.channels * job.inner : job.channels,
                            &job)))
    return st;
  if (cpu_host->tensor_elem_count(y) == 0) return NULL;
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), (size_t)dx[0] * job.channels,
                         t == ONYX_ELEM_FLOAT32 ? bn_planes_float : bn_planes_double, &job);
  return NULL;
}

/* ======================================================================== */
/* LayerNormalization (opset 17)                                             */
/* ======================================================================== */

typedef struct LayerNormState {
  const OnyxNode* node;
  int64_t axis;
  double epsilon;
} LayerNormState;

static OnyxStatus* ln_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep, (void)user_data;
  LayerNormState* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->node = node;
  s->axis = cpu_host->node_attr_int(node, "axis", -1);
  s->epsilon = cpu_host->node_attr_float(node, "epsilon", 1e-5f);
  /* stash_type only sets the precision of mean/variance; we always use
   * double accumulators, which meets both float32 and float64 stashing. */
  *state = s;
  return NULL;
}

typedef struct LnJob {
  const void* x;
  void* y;
  const void* scale; /* inner elements, X's type */
  const void* bias;  /* inner elements, or NULL */
  float* mean;       /* optional outputs, one per row */
  float* inv_std;
  size_t inner;
  double epsilon;
} LnJob;

#define DEFINE_LN(T)                                                                               \
  static void ln_rows_##T(void* user, size_t begin, size_t end) {                                  \
    const LnJob* j = user;                                                                         \
    const T* scale = j->scale;                                                                     \
    const T* bias = j->bias;                                                                       \
    for (size_t r = begin; r < end; r++) {                                                         \
      const T* x = (const T*)j->x + r * j->inner;                                                  \
      T* y = (T*)j->y + r * j->inner;                                                              \
      double mean = 0, var = 0;                                                                    \
      for (size_t i = 0; i < j->inner; i++)                                                        \
        mean += x[i];                                                                              \
      mean /= (double)j->inner;                                                                    \
      for (size_t i = 0; i < j->inner; i++)                                                        \
        var += (x[i] - mean) * (x[i] - mean);                                                      \
      const double inv = 1.0 / sqrt(var / (double)j->inner + j->epsilon);                          \
      for (size_t i = 0; i < j->inner; i++)                                                        \
        y[i] = (T)((x[i] - mean) * inv * scale[i] + (bias ? bias[i] : 0));                         \
      if (j->mean) j->mean[r] = (float)mean;                                                       \
      if (j->inv_std) j->inv_std[r] = (float)inv;                                                  \
    }                                                                                              \
  }
DEFINE_LN(float)
DEFINE_LN(double)

/* Scale/B may broadcast (unidirectionally) to X's normalized dims; expand
 * them to a dense array then, so the row loop stays simple. */
static OnyxStatus* ln_param(const LayerNormState* s, OnyxKernelContext* ctx, size_t index,
                            const int64_t* dims, size_t rank, const void** out) {
  const OnyxTensor* p = cpu_host->ctx_input(ctx, index);
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const size_t pr = cpu_host->tensor_rank(p), inner = cpu_dims_product(dims, 0, rank);
  const int64_t* pd = cpu_host->tensor_dims(p);
  const OnyxElemType t = cpu_host->tensor_elem_type(x);
  int ok = pr <= rank && cpu_host->tensor_elem_type(p) == t;
  for (size_t i = 0; ok && i < pr; i++)
    ok = pd[i] == 1 || pd[i] == dims[rank - pr + i];
  if (!ok)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                     "input %zu (rank %zu) does not broadcast to the normalized shape", index, pr);
  *out = cpu_host->tensor_data(p);
  if (cpu_host->tensor_elem_count(p) == inner) return NULL;
  const size_t es = cpu_elem_size(t);
  char* dense;
  OnyxStatus* st = scratch(ctx, inner * es, (void**)&dense);
  if (st) return st;
  int64_t c[MAX_RANK];
  for (size_t i = 0; i < inner; i++) {
    unravel(i, dims, rank, c);
    size_t src = 0;
    for (size_t d = 0; d < pr; d++)
      src = src * (size_t)pd[d] + (pd[d] == 1 ? 0 : c[rank - pr + d]);
    memcpy(dense + i * es, (const char*)*out + src * es, es);
  }
  *out = dense;
  return NULL;
}

static OnyxStatus* ln_outputs(OnyxKernelContext* ctx, const int64_t* dx, size_t r, size_t axis,
                              LnJob* job) {
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, dx, r, &y);
  if (st) return st;
  job->y = cpu_host->tensor_mutable_data(y);
  int64_t stat[MAX_RANK];
  for (size_t i = 0; i < r; i++)
    stat[i] = i < axis ? dx[i] : 1;
  const OnyxNode* node = cpu_host->ctx_node(ctx);
  float** dst[2] = {&job->mean, &job->inv_std};
  for (size_t i = 1; i <= 2; i++) {
    if (!node || !node_has_output(node, i)) continue;
    OnyxTensor* t;
    if ((st = cpu_host->ctx_output(ctx, i, stat, r, &t))) return st;
    *dst[i - 1] = cpu_host->tensor_mutable_data(t);
  }
  return NULL;
}

static OnyxStatus* ln_compute(void* state, OnyxKernelContext* ctx) {
  const LayerNormState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const size_t r = cpu_host->tensor_rank(x);
  const int64_t* dx = cpu_host->tensor_dims(x);
  const int64_t axis = s->axis < 0 ? s->axis + (int64_t)r : s->axis;
  if (axis < 0 || axis >= (int64_t)r || r > MAX_RANK)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                     (long long)s->axis, r);
  LnJob job = {.x = cpu_host->tensor_data(x),
               .inner = cpu_dims_product(dx, (size_t)axis, r),
               .epsilon = s->epsilon};
  OnyxStatus* st = ln_outputs(ctx, dx, r, (size_t)axis, &job);
  if (st) return st;
  const size_t rows = cpu_dims_product(dx, 0, (size_t)axis);
  if (rows == 0 || job.inner == 0) return NULL;
  if ((st = ln_param(s, ctx, 1, dx + axis, r - (size_t)axis, &job.scale))) return st;
  if (cpu_host->ctx_input_count(ctx) > 2 && cpu_host->ctx_input(ctx, 2) &&
      (st = ln_param(s, ctx, 2, dx + axis, r - (size_t)axis, &job.bias)))
    return st;
  const int f32 = cpu_host->tensor_elem_type(x) == ONYX_ELEM_FLOAT32;
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), rows, f32 ? ln_rows_float : ln_rows_double,
                         &job);
  return NULL;
}

/* ======================================================================== */
/* Softmax                                                                   */
/* ======================================================================== */

typedef struct SoftmaxState {
  const OnyxNode* node;
  int64_t axis;
  int coerce_2d; /* opset < 13: flatten to [prod(d[:axis]), prod(d[axis:])] */
} SoftmaxState;

static const int SOFTMAX_2D = 1, SOFTMAX_AXIS = 0;

static OnyxStatus* softmax_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  SoftmaxState* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->node = node;
  s->coerce_2d = *(const int*)user_data;
  s->axis = cpu_host->node_attr_int(node, "axis", s->coerce_2d ? 1 : -1);
  *state = s;
  return NULL;
}

/* x viewed as [outer, n, inner], softmax over n. `work` holds 2 * inner
 * values (running max and sum); out may equal x (in-place). */
typedef struct SoftmaxJob {
  const void* x;
  void* y;
  size_t n, inner;
  void* work;
} SoftmaxJob;

#define DEFINE_SOFTMAX(T)                                                                          \
  static void softmax_block_##T(const T* x, T* y, size_t n, size_t inner, T* mx, T* sum) {         \
    for (size_t i = 0; i < inner; i++)                                                             \
      mx[i] = x[i], sum[i] = 0;                                                                    \
    for (size_t k = 1; k < n; k++)                                                                 \
      for (size_t i = 0; i < inner; i++)                                                           \
        if (x[k * inner + i] > mx[i]) mx[i] = x[k * inner + i];                                    \
    for (size_t k = 0; k < n; k++)                                                                 \
      for (size_t i = 0; i < inner; i++) {                                                         \
        const T e = (T)exp(x[k * inner + i] - mx[i]);                                              \
        y[k * inner + i] = e;                                                                      \
        sum[i] += e;                                                                               \
      }                                                                                            \
    for (size_t i = 0; i < inner; i++)                                                             \
      sum[i] = (T)1 / sum[i];                                                                      \
    for (size_t k = 0; k < n; k++)                                                                 \
      for (size_t i = 0; i < inner; i++)                                                           \
        y[k * inner + i] *= sum[i];                                                                \
  }                                                                                                \
  /* Rows of a contiguous (inner == 1) softmax, in parallel. */                                    \
  static void softmax_rows_##T(void* user, size_t begin, size_t end) {                             \
    const SoftmaxJob* j = user;                                                                    \
    for (size_t r = begin; r < end; r++) {                                                         \
      T mx, sum;                                                                                   \
      softmax_block_##T((const T*)j->x + r * j->n, (T*)j->y + r * j->n, j->n, 1, &mx, &sum);       \
    }                                                                                              \
  }                                                                                                \
  /* Strided softmax (inner > 1): blocks in sequence, sharing one work area. */                    \
  static void softmax_strided_##T(const SoftmaxJob* j, size_t outer) {                             \
    T* mx = j->work;                                                                               \
    for (size_t o = 0; o < outer; o++)                                                             \
      softmax_block_##T((const T*)j->x + o * j->n * j->inner, (T*)j->y + o * j->n * j->inner,      \
                        j->n, j->inner, mx, mx + j->inner);                                        \
  }
DEFINE_SOFTMAX(float)
DEFINE_SOFTMAX(double)

static OnyxStatus* softmax_compute(void* state, OnyxKernelContext* ctx) {
  const SoftmaxState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const size_t r = cpu_host->tensor_rank(x);
  const int64_t* dx = cpu_host->tensor_dims(x);
  const int64_t axis = s->axis < 0 ? s->axis + (int64_t)r : s->axis;
  if (axis < 0 || axis >= (int64_t)r)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                     (long long)s->axis, r);
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, dx, r, &y);
  if (st) return st;
  const size_t a = (size_t)axis, outer = cpu_dims_product(dx, 0, a);
  SoftmaxJob job = {cpu_host->tensor_data(x), cpu_host->tensor_mutable_data(y),
                    s->coerce_2d ? cpu_dims_product(dx, a, r) : (size_t)dx[a],
                    s->coerce_2d ? 1 : cpu_dims_product(dx, a + 1, r), NULL};
  if (outer == 0 || job.n == 0 || job.inner == 0) return NULL;
  const int f32 = cpu_host->tensor_elem_type(x) == ONYX_ELEM_FLOAT32;
  if (job.inner == 1) {
    cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), outer,
                           f32 ? softmax_rows_float : softmax_rows_double, &job);
    return NULL;
  }
  if ((st = scratch(ctx, 2 * job.inner * (f32 ? 4 : 8), &job.work))) return st;
  if (f32)
    softmax_strided_float(&job, outer);
  else
    softmax_strided_double(&job, outer);
  return NULL;
}

/* ======================================================================== */
/* Registration                                                              */
/* ======================================================================== */

static const int32_t MAXPOOL12[] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64, ONYX_ELEM_INT8,
                                    ONYX_ELEM_UINT8};
static const int32_t F32[] = {ONYX_ELEM_FLOAT32};
static const OnyxTypeConstraint T_FLOATS[] = {{"T", cpu_types_float, 2}};
static const OnyxTypeConstraint T_MAXPOOL12[] = {{"T", MAXPOOL12, 4}};
static const OnyxTypeConstraint T_BN14[] = {{"T", cpu_types_float, 2}, {"U", cpu_types_float, 2}};
static const OnyxTypeConstraint T_BN15[] = {
    {"T", cpu_types_float, 2}, {"T1", cpu_types_float, 2}, {"T2", cpu_types_float, 2}};
static const OnyxTypeConstraint T_LN[] = {{"T", cpu_types_float, 2}, {"U", F32, 1}};
/* Output 0 may reuse input 0's buffer: these kernels read each element
 * before writing it. */
static const OnyxAlias INPLACE[] = {{0, 0, ONYX_ALIAS_INPLACE}};

#define KDEF(op, since, end, tc, cr, comp, rel, ud)                                                \
  {                                                                                                \
    .op_type = op, .since_version = since, .end_version = end, .type_constraints = tc,             \
    .type_constraint_count = CPU_ARRAY_LEN(tc), .create = cr, .compute = comp, .release = rel,     \
    .user_data = (void*)(ud)                                                                       \
  }
/* The same, for kernels whose output 0 may reuse input 0's buffer. */
#define KDEF_INPLACE(op, since, end, tc, cr, comp, rel, ud)                                        \
  {                                                                                                \
    .op_type = op, .since_version = since, .end_version = end, .type_constraints = tc,             \
    .type_constraint_count = CPU_ARRAY_LEN(tc), .aliases = INPLACE, .alias_count = 1,              \
    .create = cr, .compute = comp, .release = rel, .user_data = (void*)(ud)                        \
  }

OnyxStatus* cpu_register_nn(OnyxKernelRegistry* r) {
  const int latest = ONYX_OPSET_LATEST;
  OnyxKernelDef defs[] = {
      KDEF("Conv", 1, latest, T_FLOATS, conv_create, conv_compute, cpu_free_state, NULL),
      /* MaxPool 12 added int8/uint8; attributes missing in older versions
       * read as their defaults, so one implementation serves all. */
      KDEF("MaxPool", 1, 11, T_FLOATS, maxpool_create, pool_compute, cpu_free_state, NULL),
      KDEF("MaxPool", 12, latest, T_MAXPOOL12, maxpool_create, pool_compute, cpu_free_state, NULL),
      KDEF("AveragePool", 1, latest, T_FLOATS, avgpool_create, pool_compute, cpu_free_state, NULL),
      KDEF("GlobalAveragePool", 1, latest, T_FLOATS, NULL, global_avg_compute, NULL, NULL),
      KDEF_INPLACE("BatchNormalization", 1, 13, T_FLOATS, bn_create, bn_compute, cpu_free_state,
                   &BN_OUTPUTS),
      KDEF_INPLACE("BatchNormalization", 14, 14, T_BN14, bn_create, bn_compute, cpu_free_state,
                   &BN_ATTR),
      KDEF_INPLACE("BatchNormalization", 15, latest, T_BN15, bn_create, bn_compute, cpu_free_state,
                   &BN_ATTR),
      KDEF_INPLACE("LayerNormalization", 17, latest, T_LN, ln_create, ln_compute, cpu_free_state,
                   NULL),
      KDEF_INPLACE("Softmax", 1, 12, T_FLOATS, softmax_create, softmax_compute, cpu_free_state,
                   &SOFTMAX_2D),
      KDEF_INPLACE("Softmax", 13, latest, T_FLOATS, softmax_create, softmax_compute, cpu_free_state,
                   &SOFTMAX_AXIS),
  };
  for (size_t i = 0; i < CPU_ARRAY_LEN(defs); i++) {
    OnyxKernelDef* d = &defs[i];
    d->struct_size = sizeof *d;
    d->domain = "";
    OnyxStatus* st = cpu_host->register_kernel(r, d);
    if (st) return st;
  }
  return cpu_register_linalg(r);
}
