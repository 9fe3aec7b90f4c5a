/* cpu_nn.c — neural-network kernels: Conv (im2col + the GEMM core of
 * cpu_linalg.c), MaxPool / AveragePool / GlobalAveragePool (one N-D window
 * driver), BatchNormalization (inference), LayerNormalization and Softmax.
 *
 * Attributes are read once in `create` into a state struct; shapes are only
 * known in `compute`, where the window geometry is derived and checked. */
#include "cpu_avx2.h"
#include "cpu_nn.h"
#include "cpu_util.h"
#include "cpu_winograd.h"
#include "cpu_conv_direct.h"
#include "cpu_conv_depthwise.h"

#include <float.h>
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
          off = off * g->in[i] + (valid ? xi : 0);                                                 \
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
  /* A constant float32 W packed per group as GEMM A operands (mg x kdim
   * each, `group_floats` apart), or NULL. */
  float* packed_w;
  size_t packed_m, packed_k, group_floats;
  /* com.onyx FusedConv: the activation the GEMM epilogue applies. */
  int act; /* CpuAct */
  float act_alpha, act_min, act_max;
  /* W transformed for Winograd F(4x4, 3x3) at creation, or NULL. */
  CpuWinograd* wino;
  /* Small outputs (see CONV_SMALL_OUT): W^T packed as the GEMM's B operand
   * (kdim x m), for Y^T = im2col(X)^T W^T, or NULL. */
  float* packed_wt;
  size_t packed_wt_m, packed_wt_k;
  /* W packed for the direct AVX-512 path (cpu_conv_direct.h), or NULL. */
  CpuConvDirect* direct;
} ConvState;

/* Where the direct path is missing (no AVX-512, or ONYX_CPU_CONV_DIRECT=0):
 * at most this many output positions per image, a 2-D group-1 Conv with at
 * least CONV_SMALL_M output channels computes Y^T (positions x channels)
 * instead of Y: the GEMM's rows are then the few positions (7 x 7 = 49 fill
 * 7 of 8-row panels) and its columns the many channels (full 32-wide
 * panels), where Y = W x im2col would leave most of each 32-wide B panel
 * empty (ResNet-18's 512-channel 7x7 layers, standalone: 2.3 -> 1.3 ms
 * each; the direct path does them in 1.1). */
#define CONV_SMALL_OUT 64
#define CONV_SMALL_M   64

void cpu_conv_release(void* state) {
  ConvState* s = state;
  if (!s) return;
  free(s->packed_w);
  free(s->packed_wt);
  cpu_winograd_free(s->wino);
  cpu_conv_direct_free(s->direct);
  free(s);
}

/* Packs W (m, c/group, kernel...) when it is a constant float32 tensor. */
/* Packs W (m, c/group, kernel...) as the GEMM's A operand (mg x kdim per
 * group) when it is a constant float32 tensor. */
static void conv_pack_weights(ConvState* s, const OnyxNode* node) {
  const OnyxValueInfo* wv =
      cpu_host->node_input_count(node) > 1 ? cpu_host->node_input(node, 1) : NULL;
  const OnyxTensor* wt = wv ? cpu_host->value_constant(wv) : NULL;
  if (!wt || cpu_host->tensor_elem_type(wt) != ONYX_ELEM_FLOAT32 || cpu_host->tensor_rank(wt) < 3)
    return;
  const int64_t* d = cpu_host->tensor_dims(wt);
  const size_t group = (size_t)s->w.group, m = (size_t)d[0];
  const size_t kdim = cpu_dims_product(d, 1, cpu_host->tensor_rank(wt));
  if (m == 0 || kdim == 0 || m % group != 0) return;
  const size_t mg = m / group, per = cpu_gemm_packed_a_floats(mg, kdim);
  float* p = cpu_gemm_alloc_packed(per * group);
  if (!p) return; /* packed per run instead */
  const float* src = cpu_host->tensor_data(wt);
  for (size_t g = 0; g < group; g++)
    cpu_gemm_pack_a(NULL, p + g * per, src + g * mg * kdim, kdim, 0, mg, kdim);
  s->packed_w = p, s->packed_m = mg, s->packed_k = kdim, s->group_floats = per;
}

/* W^T packed as the B operand when the output's static shape has at most
 * CONV_SMALL_OUT positions (2-D, group 1, float32 constant W with at least
 * CONV_SMALL_M output channels). True when made. */
static bool conv_prepare_small(ConvState* s, const OnyxNode* node) {
  const OnyxValueInfo* wv =
      cpu_host->node_input_count(node) > 1 ? cpu_host->node_input(node, 1) : NULL;
  const OnyxTensor* wt = wv ? cpu_host->value_constant(wv) : NULL;
  const OnyxValueInfo* yv = cpu_host->node_output(node, 0);
  if (!wt || !yv || s->w.group != 1 || cpu_host->tensor_elem_type(wt) != ONYX_ELEM_FLOAT32 ||
      cpu_host->tensor_rank(wt) != 4 || cpu_host->value_rank(yv) != 4)
    return false;
  const int64_t* yd = cpu_host->value_dims(yv);
  const int64_t* d = cpu_host->tensor_dims(wt);
  /* one output position: the GEMM's one-column path (W x X) instead */
  if (yd[2] <= 0 || yd[3] <= 0 || yd[2] * yd[3] > CONV_SMALL_OUT || yd[2] * yd[3] == 1 ||
      d[0] < CONV_SMALL_M)
    return false;
  const size_t m = (size_t)d[0], kdim = cpu_dims_product(d, 1, 4);
  if (kdim == 0) return false;
  float* p = cpu_gemm_alloc_packed(cpu_gemm_packed_b_floats(kdim, m));
  if (!p) return false;
  /* op(B) = W^T (kdim x m): W is stored m x kdim, i.e. transposed. */
  cpu_gemm_pack_b(NULL, p, cpu_host->tensor_data(wt), kdim, 1, kdim, m);
  s->packed_wt = p, s->packed_wt_m = m, s->packed_wt_k = kdim;
  return true;
}

/* Where both could run, Winograd takes n images of oh x ow outputs only
 * with at least this many 4x4 tiles: below, its transformed weights (4x or
 * 16/9 the size of W) are streamed from memory for too few tiles, and the
 * direct path wins or ties (ResNet-18's 256-channel 14x14 layers in the
 * model at 1 thread: F(4x4) 1.32-1.55 ms, F(2x2) 1.17, direct 1.19; its
 * 512-channel 7x7 ones: F(2x2) 2.3 ms, direct 1.34). */
#define CONV_WINOGRAD_OVER_DIRECT_TILES 32

static bool conv_winograd_over_direct(size_t n, size_t oh, size_t ow) {
  return n * ((oh + 3) / 4) * ((ow + 3) / 4) >= CONV_WINOGRAD_OVER_DIRECT_TILES;
}

/* Output extent of a 3x3 unit-stride window over `in` along spatial dim i
 * (0 or 1), or 0 when unknown. */
static size_t conv_static_out(const WindowAttrs* w, int64_t in, size_t i) {
  if (in < 0) return 0;
  if (w->auto_pad == PAD_SAME_UPPER || w->auto_pad == PAD_SAME_LOWER) return (size_t)in;
  int64_t padded = in;
  if (w->auto_pad != PAD_VALID && w->n_pads == 4 &&
      !cpu_add3_i64(in, w->pads[i], w->pads[i + 2], &padded))
    return 0; /* the run reports the overflow */
  return padded >= 3 ? (size_t)(padded - 2) : 0;
}

/* Transforms a constant float32 W (m, c, 3, 3) for the Winograd path when
 * the conv qualifies (cpu_winograd.h), unless X's static shape already
 * shows too few tiles for it to pay. */
static bool conv_prepare_winograd(ConvState* s, const OnyxNode* node, bool direct) {
  const OnyxValueInfo* wv =
      cpu_host->node_input_count(node) > 1 ? cpu_host->node_input(node, 1) : NULL;
  const OnyxTensor* wt = wv ? cpu_host->value_constant(wv) : NULL;
  if (!cpu_winograd_enabled() || !wt || cpu_host->tensor_elem_type(wt) != ONYX_ELEM_FLOAT32 ||
      cpu_host->tensor_rank(wt) != 4)
    return false;
  const WindowAttrs* w = &s->w;
  const int64_t* d = cpu_host->tensor_dims(wt);
  if ((w->n_strides && w->n_strides != 2) || (w->n_dilations && w->n_dilations != 2) ||
      (w->n_kernel && (w->n_kernel != 2 || w->kernel[0] != d[2] || w->kernel[1] != d[3])))
    return false;
  if (!cpu_winograd_applies((size_t)d[0], (size_t)d[1], (size_t)d[2], (size_t)d[3],
                            w->n_strides ? (size_t)w->strides[0] : 1,
                            w->n_strides ? (size_t)w->strides[1] : 1,
                            w->n_dilations ? (size_t)w->dilations[0] : 1,
                            w->n_dilations ? (size_t)w->dilations[1] : 1, (size_t)w->group))
    return false;
  /* X's static shape, when known, picks the output tile (4x4, or 2x2 for
   * small images) or shows too few tiles for the path to pay. */
  size_t tile = 4, batch = 0, oh = 0, ow = 0;
  const OnyxValueInfo* xv = cpu_host->node_input(node, 0);
  if (xv && cpu_host->value_rank(xv) == 4) {
    const int64_t* xd = cpu_host->value_dims(xv);
    oh = conv_static_out(w, xd[2], 0), ow = conv_static_out(w, xd[3], 1);
    batch = xd[0] > 0 ? (size_t)xd[0] : 0;
    if (oh && ow && !(tile = cpu_winograd_pick_tile(batch ? batch : 1, oh, ow))) return false;
    if (oh && ow && direct && !conv_winograd_over_direct(batch ? batch : 1, oh, ow)) return false;
  }
  s->wino = cpu_winograd_create(cpu_host->tensor_data(wt), (size_t)d[0], (size_t)d[1], tile);
  /* With X's shape static, every run takes the Winograd path: no im2col
   * copy of W is needed (a run that did not fit would pack W per call). */
  return s->wino && batch && oh && ow && cpu_winograd_pays(s->wino, batch, oh, ow);
}

/* Whether the direct path (cpu_conv_direct.h) takes this conv: a machine
 * with the AVX-512 kernel, a constant float32 W (m, c, kh, kw) with a window
 * larger than 1x1 (pointwise convs are plain GEMMs, faster there), group 1.
 * With the AVX2 kernel, strided windows only: on the AVX2 machine measured
 * (Zen 3) the unit-stride layers ran faster through Winograd and the
 * small-output GEMM, the strided ones lost a third of their time to im2col. */
static bool conv_direct_applies(const ConvState* s, const OnyxNode* node) {
  const OnyxValueInfo* wv =
      cpu_host->node_input_count(node) > 1 ? cpu_host->node_input(node, 1) : NULL;
  const OnyxTensor* wt = wv ? cpu_host->value_constant(wv) : NULL;
  const int kernel = cpu_conv_direct_kernel();
  if (!wt || s->w.group != 1 || kernel == CPU_CONV_DIRECT_NONE ||
      cpu_host->tensor_elem_type(wt) != ONYX_ELEM_FLOAT32 || cpu_host->tensor_rank(wt) != 4)
    return false;
  if (kernel == CPU_CONV_DIRECT_AVX2) {
    bool strided = false;
    for (size_t i = 0; i < s->w.n_strides; i++)
      strided |= s->w.strides[i] > 1;
    if (!strided) return false;
  }
  const int64_t* d = cpu_host->tensor_dims(wt);
  return d[2] * d[3] > 1 && d[0] > 0 && d[1] > 0;
}

static bool conv_prepare_direct(ConvState* s, const OnyxNode* node) {
  const OnyxTensor* wt = cpu_host->value_constant(cpu_host->node_input(node, 1));
  const int64_t* d = cpu_host->tensor_dims(wt);
  s->direct = cpu_conv_direct_create(cpu_host->tensor_data(wt), (size_t)d[0], (size_t)d[1],
                                     (size_t)d[2], (size_t)d[3]);
  return s->direct != NULL;
}

/* FusedConv's `activation` (absent on a plain Conv). */
OnyxStatus* cpu_read_activation(const OnyxNode* node, CpuActivation* out) {
  size_t len = 0;
  const char* a = cpu_host->node_attr_string(node, "activation", &len);
  *out = (CpuActivation){CPU_ACT_NONE, 0.0f, 0.0f, 0.0f};
  if (!a || len == 0) return NULL;
  if (len == 4 && memcmp(a, "Relu", 4) == 0) {
    out->act = CPU_ACT_RELU;
  } else if (len == 9 && memcmp(a, "LeakyRelu", 9) == 0) {
    out->act = CPU_ACT_LEAKY_RELU;
    out->alpha = cpu_host->node_attr_float(node, "alpha", 0.01f);
  } else if (len == 4 && memcmp(a, "Clip", 4) == 0) {
    out->act = CPU_ACT_CLIP;
    out->min = cpu_host->node_attr_float(node, "clip_min", -INFINITY);
    out->max = cpu_host->node_attr_float(node, "clip_max", INFINITY);
  } else if (len == 11 && memcmp(a, "HardSigmoid", 11) == 0) {
    out->act = CPU_ACT_HARD_SIGMOID;
    out->alpha = cpu_host->node_attr_float(node, "alpha", 0.2f);
    out->min = cpu_host->node_attr_float(node, "beta", 0.5f); /* beta rides in min */
  } else if (len == 9 && memcmp(a, "HardSwish", 9) == 0) {
    out->act = CPU_ACT_HARD_SWISH;
  } else if (len == 7 && memcmp(a, "Sigmoid", 7) == 0) {
    out->act = CPU_ACT_SIGMOID;
  } else if (len == 4 && memcmp(a, "Silu", 4) == 0) {
    out->act = CPU_ACT_SILU;
  } else if (len == 4 && memcmp(a, "Tanh", 4) == 0) {
    out->act = CPU_ACT_TANH;
  } else {
    return cpu_error(node, ONYX_NOT_IMPLEMENTED,
                     "activation '%.*s' not supported (Relu, LeakyRelu, Clip, HardSigmoid, "
                     "HardSwish, Sigmoid, Silu or Tanh)",
                     (int)len, a);
  }
  return NULL;
}

static OnyxStatus* conv_read_activation(ConvState* s, const OnyxNode* node) {
  CpuActivation a;
  OnyxStatus* st = cpu_read_activation(node, &a);
  s->act = a.act, s->act_alpha = a.alpha, s->act_min = a.min, s->act_max = a.max;
  return st;
}

OnyxStatus* cpu_conv_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  (void)ep;
  (void)user_data;
  ConvState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  OnyxStatus* st = window_attrs_read(node, &s->w);
  if (!st) st = conv_read_activation(s, node);
  if (st) {
    free(s);
    return st;
  }
  /* One path per conv, and only its weights packed, where X's static shape
   * shows which: Winograd where enough 4x4 tiles fill its GEMMs (or, where
   * the direct path is missing, any tiles at all); the direct path for
   * other windows larger than 1x1 on AVX-512 machines; the transposed GEMM
   * for small outputs; im2col + GEMM. Without a static shape, Winograd's
   * and the direct path's weights are both made and each run picks. */
  const bool direct = conv_direct_applies(s, node);
  if (!conv_prepare_winograd(s, node, direct) && !(direct && conv_prepare_direct(s, node)) &&
      !conv_prepare_small(s, node))
    conv_pack_weights(s, node);
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

/* im2col straight into the GEMM's packed-B layout, for 2-D convolutions,
 * one L1-sized slice at a time while the GEMM runs (so the im2col matrix is
 * never stored whole): rows [k0, k1) of panel p, i.e. of output positions
 * [p * nr, p * nr + nr) (zero past the last position). Row r is input
 * channel r / k_size at kernel offset r % k_size; the positions of a panel
 * fall into runs that share an output row, each read from one input row. */
#define NR_MAX_PANEL 64 /* widest packed-B panel a micro-kernel uses */

typedef struct PackCol {
  const Geometry* g;
  const float* x; /* one group's channels of one image */
  size_t nr;
  int avx512; /* the AVX-512 GEMM kernel (NR 32) runs: copy runs with masks */
  int avx2;   /* the AVX2 one runs */
} PackCol;

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CPU_NN_X86 1
/* d[t] = src[t * sw] for t in [lo, hi), 0 for the rest of [0, run), run <=
 * 32: masked loads (no access, hence no fault, on masked-off lanes) or
 * masked gathers for strides above 1. */
__attribute__((target("avx512f"))) static void
copy_run_avx512(float* d, const float* src, int64_t lo, int64_t hi, int64_t run, int64_t sw) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t h = 0; h < run; h += 16) {
    const int64_t a = lo - h, b = hi - h, e = run - h;
    const uint32_t below_b = b <= 0 ? 0 : b >= 16 ? 0xFFFFu : (1u << b) - 1;
    const uint32_t below_a = a <= 0 ? 0 : a >= 16 ? 0xFFFFu : (1u << a) - 1;
    const __mmask16 valid = (__mmask16)(below_b & ~below_a);
    const __mmask16 store = (__mmask16)(e >= 16 ? 0xFFFFu : (1u << e) - 1);
    __m512 v;
    if (sw == 1) {
      v = _mm512_maskz_loadu_ps(valid, src + h);
    } else if (sw == 2) {
      /* the 32 floats from src + 2h hold the 16 wanted ones at even lanes */
      const int64_t bb = b > 16 ? 16 : b;
      const int64_t s0 = 2 * (a > 0 ? a : 0), s1 = bb <= 0 ? 0 : 2 * bb - 1;
      const uint64_t span =
          s1 <= s0 ? 0 : (s1 - s0 >= 64 ? ~0ull : ((1ull << (s1 - s0)) - 1)) << s0;
      const __m512 lo16 = _mm512_maskz_loadu_ps((__mmask16)(span & 0xFFFF), src + 2 * h);
      const __m512 hi16 = _mm512_maskz_loadu_ps((__mmask16)(span >> 16), src + 2 * h + 16);
      const __m512i even =
          _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      v = _mm512_maskz_permutex2var_ps(valid, lo16, even, hi16);
    } else {
      const __m512i idx = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)sw));
      v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, idx, src + h * sw, 4);
    }
    _mm512_mask_storeu_ps(d + h, store, v);
  }
}

/* The same with AVX2, 8 floats at a time: masked loads (no access on
 * masked-off lanes), stride 2 as the even lanes of two masked loads, other
 * strides by a masked gather; full stores except at the run's end (AVX2's
 * masked store is slow on AMD cores). */
__attribute__((target("avx2,fma,avx"))) static void
copy_run_avx2(float* d, const float* src, int64_t lo, int64_t hi, int64_t run, int64_t sw) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t h = 0; h < run; h += 8) {
    const int64_t a = lo - h < 0 ? 0 : lo - h, b = hi - h > 8 ? 8 : hi - h;
    /* lanes [a, b) are read */
    const __m256i valid = _mm256_and_si256(_mm256_cmpgt_epi32(lane, _mm256_set1_epi32((int)a - 1)),
                                           _mm256_cmpgt_epi32(_mm256_set1_epi32((int)b), lane));
    __m256 v;
    if (b <= a) {
      v = _mm256_setzero_ps();
    } else if (sw == 1) {
      v = _mm256_maskload_ps(src + h, valid);
    } else if (sw == 2) {
      /* floats [2a, 2b - 1) from src + 2h: lanes of the two loads */
      const __m256i s0 = _mm256_set1_epi32((int)(2 * a) - 1),
                    s1 = _mm256_set1_epi32((int)(2 * b - 1));
      const __m256i hi_lane = _mm256_add_epi32(lane, _mm256_set1_epi32(8));
      const __m256i m0 =
          _mm256_and_si256(_mm256_cmpgt_epi32(lane, s0), _mm256_cmpgt_epi32(s1, lane));
      const __m256i m1 =
          _mm256_and_si256(_mm256_cmpgt_epi32(hi_lane, s0), _mm256_cmpgt_epi32(s1, hi_lane));
      const __m256 e =
          _mm256_shuffle_ps(_mm256_maskload_ps(src + 2 * h, m0),
                            _mm256_maskload_ps(src + 2 * h + 8, m1), _MM_SHUFFLE(2, 0, 2, 0));
      v = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
    } else {
      const __m256i idx = _mm256_mullo_epi32(lane, _mm256_set1_epi32((int)sw));
      v = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), src + h * sw, idx,
                                   _mm256_castsi256_ps(valid), 4);
    }
    cpu_store_first_avx2(d + h, v, run - h);
  }
}

/* im2col_body's rows for one full interior run of 16 positions: `rows`
 * rows from (c, kh, kw) on, each 16 floats at stride sw from input row
 * ih0 + kh * dh, column iw0 + kw * dw, or zeros above and below the image.
 * Stride 2 takes the even lanes of 31 floats (the last 8 through a mask,
 * so nothing past the window is read). */
__attribute__((target("avx2,fma,avx"))) static void
im2col_rows16_avx2(const float* x, float* dst, size_t rows, int64_t c, int64_t kh, int64_t kw,
                   int64_t ih_n, int64_t iw_n, int64_t kh_n, int64_t kw_n, int64_t dh, int64_t dw,
                   int64_t sw, int64_t ih0, int64_t iw0) {
  const __m256i seven = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, -1, 0);
  for (size_t r = 0; r < rows; r++, dst += 16) {
    const int64_t ih = ih0 + kh * dh;
    if (ih < 0 || ih >= ih_n) {
      _mm256_storeu_ps(dst, _mm256_setzero_ps());
      _mm256_storeu_ps(dst + 8, _mm256_setzero_ps());
    } else {
      const float* src = x + (c * ih_n + ih) * iw_n + iw0 + kw * dw;
      if (sw == 1) {
        _mm256_storeu_ps(dst, _mm256_loadu_ps(src));
        _mm256_storeu_ps(dst + 8, _mm256_loadu_ps(src + 8));
      } else {
        const __m256 e0 = _mm256_shuffle_ps(_mm256_loadu_ps(src), _mm256_loadu_ps(src + 8),
                                            _MM_SHUFFLE(2, 0, 2, 0));
        const __m256 e1 =
            _mm256_shuffle_ps(_mm256_loadu_ps(src + 16), _mm256_maskload_ps(src + 24, seven),
                              _MM_SHUFFLE(2, 0, 2, 0));
        _mm256_storeu_ps(dst, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e0),
                                                                     _MM_SHUFFLE(3, 1, 2, 0))));
        _mm256_storeu_ps(dst + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e1),
                                                                         _MM_SHUFFLE(3, 1, 2, 0))));
      }
    }
    if (++kw == kw_n) {
      kw = 0;
      if (++kh == kh_n) kh = 0, c++;
    }
  }
}
#else
#define CPU_NN_X86 0
#endif

static inline __attribute__((always_inline)) void
im2col_body(const PackCol* j, float* dst, size_t p, size_t k0, size_t k1, const int vec) {
  const Geometry* g = j->g;
  const size_t nr = j->nr, ow_n = (size_t)g->out[1], os = g->out_size;
  const int64_t ih_n = g->in[0], iw_n = g->in[1], kh_n = g->k[0], kw_n = g->k[1];
  const int64_t sh = g->s[0], sw = g->s[1], dh = g->d[0], dw = g->d[1];
  const size_t o0 = p * nr, cols = os - o0 < nr ? os - o0 : nr;
  /* The panel's runs, the same for every row: start column, length and the
   * window origin (kernel offset 0) in the input. */
  int64_t run_j[NR_MAX_PANEL + 1], run_len[NR_MAX_PANEL + 1], run_ih[NR_MAX_PANEL + 1],
      run_iw[NR_MAX_PANEL + 1];
  size_t runs = 0;
  for (size_t jj = 0, o = o0; jj < cols && runs <= NR_MAX_PANEL; runs++) {
    const size_t oh = o / ow_n, ow = o % ow_n;
    const size_t run = cols - jj < ow_n - ow ? cols - jj : ow_n - ow;
    run_j[runs] = (int64_t)jj, run_len[runs] = (int64_t)run;
    run_ih[runs] = (int64_t)oh * sh - g->pb[0];
    run_iw[runs] = (int64_t)ow * sw - g->pb[1];
    jj += run, o += run;
  }
  /* (c, kh, kw) of row k0, then stepped along. */
  int64_t c = (int64_t)(k0 / g->k_size), kk = (int64_t)(k0 % g->k_size);
  int64_t kh = kk / kw_n, kw = kk % kw_n;
#if CPU_NN_X86
  /* AVX2, one full run of 16 positions whose windows lie inside the input
   * rows for every kernel column (most panels of a wide image): each row
   * is 16 (strided) floats or zeros, without the per-run bounds. */
  if (vec == 2 && nr == 16 && runs == 1 && cols == nr && (sw == 1 || sw == 2) && run_iw[0] >= 0 &&
      run_iw[0] + 15 * sw + (kw_n - 1) * dw < iw_n) {
    im2col_rows16_avx2(j->x, dst, k1 - k0, c, kh, kw, ih_n, iw_n, kh_n, kw_n, dh, dw, sw, run_ih[0],
                       run_iw[0]);
    return;
  }
#endif
  for (size_t r = k0; r < k1; r++, dst += nr) {
    const float* xc = j->x + c * ih_n * iw_n;
    for (size_t q = 0; q < runs; q++) {
      const int64_t ih = run_ih[q] + kh * dh, run = run_len[q];
      float* d = dst + run_j[q];
      if (ih < 0 || ih >= ih_n) {
        for (int64_t t = 0; t < run; t++)
          d[t] = 0.0f;
        continue;
      }
      const float* row = xc + ih * iw_n;
      const int64_t iw = run_iw[q] + kw * dw;
      /* t in [lo, hi) reads inside the row */
      int64_t lo = 0, hi = run;
      if (sw == 1) {
        if (iw < 0) lo = -iw;
        if (iw + hi > iw_n) hi = iw_n - iw;
      } else {
        /* t reads inside the row while 0 <= iw + t * sw < iw_n: ceilings
         * taken as (a - 1) / sw + 1, which cannot overflow for any stride. */
        if (iw < 0) lo = (-iw - 1) / sw + 1;
        const int64_t inside = iw >= iw_n ? 0 : (iw_n - iw - 1) / sw + 1;
        if (hi > inside) hi = inside;
      }
      if (hi < 0) hi = 0;
      if (lo > hi) lo = hi;
#if CPU_NN_X86
      if (vec == 1) {
        copy_run_avx512(d, row + iw, lo, hi, run, sw);
        continue;
      }
      if (vec == 2) {
        copy_run_avx2(d, row + iw, lo, hi, run, sw);
        continue;
      }
#else
      (void)vec;
#endif
      for (int64_t t = 0; t < lo; t++)
        d[t] = 0.0f;
      if (sw == 1) {
        const float* src = row + iw;
        for (int64_t t = lo; t < hi; t++)
          d[t] = src[t];
      } else {
        for (int64_t t = lo; t < hi; t++)
          d[t] = row[iw + t * sw];
      }
      for (int64_t t = hi; t < run; t++)
        d[t] = 0.0f;
    }
    for (size_t t = cols; t < nr; t++)
      dst[t] = 0.0f;
    if (++kw == kw_n) {
      kw = 0;
      if (++kh == kh_n) kh = 0, c++;
    }
  }
}

#if CPU_NN_X86
__attribute__((target("avx512f"))) static void im2col_panel_avx512(const PackCol* j, float* dst,
                                                                   size_t p, size_t k0, size_t k1) {
  im2col_body(j, dst, p, k0, k1, 1);
}

/* vec: 1 the AVX-512 copies, 2 the AVX2 ones, 0 portable. */
__attribute__((target("avx2,fma,avx"))) static void
im2col_panel_avx2(const PackCol* j, float* dst, size_t p, size_t k0, size_t k1) {
  im2col_body(j, dst, p, k0, k1, 2);
}
#endif

static void im2col_panel(void* user, float* dst, size_t p, size_t k0, size_t k1) {
  const PackCol* j = user;
#if CPU_NN_X86
  if (j->avx512) {
    im2col_panel_avx512(j, dst, p, k0, k1);
    return;
  }
  if (j->avx2) {
    im2col_panel_avx2(j, dst, p, k0, k1);
    return;
  }
#endif
  im2col_body(j, dst, p, k0, k1, 0);
}

/* FusedConv's activation on one value (NaN kept, as the GEMM epilogue). */
static float conv_act(float v, const ConvState* s) {
  return cpu_act_apply(v, s->act, s->act_alpha, s->act_min, s->act_max);
}

/* Y^T (os x m) = im2col(X)^T (os x kdim) x W^T (packed B), per image, then
 * transposed into Y; the bias (per column of Y^T) and the activation ride in
 * the GEMM's epilogue. */
static OnyxStatus* conv_small_f32(const ConvState* cst, OnyxKernelContext* ctx, const ConvShape* cs,
                                  const OnyxTensor* x, const OnyxTensor* b, const float* z,
                                  OnyxTensor* y) {
  const size_t os = cs->g.out_size, kdim = cs->cg * cs->g.k_size, m = cs->mg;
  /* a pointwise conv's im2col matrix is the image itself */
  const int pointwise = conv_is_pointwise(&cs->g);
  float *col = NULL, *yt = NULL;
  OnyxStatus* st = pointwise ? NULL : scratch(ctx, kdim * os * sizeof(float), (void**)&col);
  if (!st) st = scratch(ctx, os * m * sizeof(float), (void**)&yt);
  if (st) return st;
  OnyxThreadPool* pool = cpu_host->ctx_thread_pool(ctx);
  const float* xd = cpu_host->tensor_data(x);
  float* yd = cpu_host->tensor_mutable_data(y);
  CpuStop stop = {.ctx = ctx};
  for (size_t n = 0; n < cs->n; n++) {
    if (cpu_should_stop(ctx)) return cpu_cancelled(ctx, NULL);
    const float* xn = xd + n * cs->c * cs->g.in_size;
    if (!pointwise) {
      Im2Col ij = {&cs->g, xn, col};
      cpu_host->parallel_for(pool, kdim, im2col_rows_float, &ij);
    }
    const CpuGemm g = {.m = os,
                       .n = m,
                       .k = kdim,
                       .a = pointwise ? xn : col, /* stored kdim x os: op(A) = col^T */
                       .lda = os,
                       .trans_a = 1,
                       .packed_b = cst->packed_wt,
                       .c = yt,
                       .ldc = m,
                       .alpha = 1.0,
                       .bias_col = b ? cpu_host->tensor_data(b) : NULL,
                       /* with Z the activation follows its sum, below */
                       .act = z ? CPU_ACT_NONE : cst->act,
                       .act_alpha = cst->act_alpha,
                       .act_min = cst->act_min,
                       .act_max = cst->act_max,
                       .stop = &stop};
    cpu_gemm_f32(pool, &g);
    if (cpu_stop_seen(&stop)) return cpu_cancelled(ctx, NULL);
    float* yn = yd + n * m * os;
    const float* zn = z ? z + n * m * os : NULL;
    if (!zn) { /* blocked: a column of Y^T at a time read m floats apart */
      cpu_nn_transpose(yn, yt, os, m, sizeof(float));
      continue;
    }
    for (size_t c = 0; c < m; c++)
      for (size_t p = 0; p < os; p++)
        yn[c * os + p] = conv_act(yt[p * m + c] + zn[c * os + p], cst);
  }
  return NULL;
}

/* A 2-D conv's run for the paths with their own kernels (Winograd, direct). */
static CpuConvRun conv_run(const ConvState* cst, const ConvShape* cs, const OnyxTensor* x,
                           const OnyxTensor* b, const float* z, OnyxTensor* y) {
  const Geometry* g = &cs->g;
  return (CpuConvRun){.x = cpu_host->tensor_data(x),
                      .y = cpu_host->tensor_mutable_data(y),
                      .bias = b ? cpu_host->tensor_data(b) : NULL,
                      .z = z,
                      .n = cs->n,
                      .h = (size_t)g->in[0],
                      .w = (size_t)g->in[1],
                      .oh = (size_t)g->out[0],
                      .ow = (size_t)g->out[1],
                      .sh = (size_t)g->s[0],
                      .sw = (size_t)g->s[1],
                      .dh = (size_t)g->d[0],
                      .dw = (size_t)g->d[1],
                      .pad_top = (size_t)g->pb[0],
                      .pad_left = (size_t)g->pb[1],
                      .act = cst->act,
                      .act_alpha = cst->act_alpha,
                      .act_min = cst->act_min,
                      .act_max = cst->act_max};
}

typedef struct ConvRowAct {
  const ConvState* s;
  float* y;
  size_t plane;
} ConvRowAct;

static void conv_row_act_planes(void* user, size_t begin, size_t end) {
  const ConvRowAct* j = user;
  for (size_t i = begin; i < end; i++)
    cpu_act_row(j->y + i * j->plane, j->y + i * j->plane, j->plane, j->s->act, j->s->act_alpha,
                j->s->act_min, j->s->act_max);
}

/* A row activation (cpu_act_is_row) over all of Y, plane by plane, for the
 * Winograd and direct paths, whose vector epilogues have only the
 * piecewise-linear ones: they store Y (with Z added) without it. */
static OnyxStatus* conv_row_act(const ConvState* cst, OnyxKernelContext* ctx, const ConvShape* cs,
                                OnyxTensor* y) {
  if (!cpu_act_is_row(cst->act)) return NULL;
  ConvRowAct j = {cst, cpu_host->tensor_mutable_data(y), cs->g.out_size};
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), cs->n * cs->m, conv_row_act_planes, &j);
  return NULL;
}

/* The direct path copies each image zero-padded to the extent its windows
 * cover; with pads or dilations far beyond the input that copy would dwarf
 * it, and the im2col path, whose memory follows the output, runs instead. */
static bool conv_direct_padding_fits(const Geometry* g) {
  size_t plane = 1;
  for (size_t i = 0; i < g->rank; i++) {
    int64_t ext;
    if (!cpu_mul_i64(g->out[i] - 1, g->s[i], &ext) ||
        !cpu_add_i64(ext, (g->k[i] - 1) * g->d[i] + 1, &ext) ||
        !cpu_mul_size(plane, (size_t)ext, &plane))
      return false;
  }
  return plane <= 4 * g->in_size + 65536;
}

/* Groups of at most this many input channels run on the direct depthwise
 * kernel (cpu_conv_depthwise.c, which sums a group's cg channels per output
 * plane) where its path is AVX2, instead of one im2col GEMM of mg rows per
 * group, whose im2col costs about as much as its few rows of FMAs. On
 * regnet_y_400mf's 3x3 convs in groups of 8 (1 thread, sum of per-node
 * minima) the depthwise kernel takes 6.1 ms on the AVX2 path against the
 * GEMM's 7.9; on the AVX-512 path the GEMM is the faster (5.1 against 5.4
 * ms), so it keeps those convs. */
#define CONV_GROUPED_DW_MAX_CG 8

static bool conv_grouped_direct(size_t cg) {
  return cg == 1 || (cg <= CONV_GROUPED_DW_MAX_CG && cpu_conv_depthwise_path() == CPU_DW_AVX2);
}

/* float32 Conv: one GEMM per (image, group) with W as the packed A operand
 * (packed at creation when constant), the im2col matrix as B (packed slice
 * by slice from X for 2-D windows; X itself for pointwise ones; stored
 * whole only for other ranks) and the bias and activation applied by the
 * GEMM's epilogue. */
static OnyxStatus* conv_compute_f32(const ConvState* cst, OnyxKernelContext* ctx,
                                    const ConvShape* cs, const OnyxTensor* x, const OnyxTensor* wt,
                                    const OnyxTensor* b, const float* z, OnyxTensor* y) {
  const WindowAttrs* w = &cst->w;
  /* one input channel per group: the direct depthwise kernel; also small
   * groups (RegNet's 8 channels) on AVX2 machines */
  if (cs->g.rank == 2 && w->group > 1 && conv_grouped_direct(cs->cg) &&
      cpu_conv_depthwise_enabled()) {
    const CpuDepthwiseRun dw = {conv_run(cst, cs, x, b, z, y),
                                cpu_host->tensor_data(wt),
                                cs->c,
                                cs->m,
                                cs->cg,
                                (size_t)cs->g.k[0],
                                (size_t)cs->g.k[1]};
    return cpu_conv_depthwise_run(ctx, &dw);
  }
  const size_t os = cs->g.out_size, kdim = cs->cg * cs->g.k_size;
  const int pointwise = conv_is_pointwise(&cs->g), direct = !pointwise && cs->g.rank == 2;
  OnyxStatus* st;
  float* col = NULL;
  size_t col_bytes;
  if (!cpu_mul_size(kdim, os, &col_bytes) || !cpu_mul_size(col_bytes, sizeof(float), &col_bytes))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "integer overflow: the im2col matrix (%zu x %zu) does not fit in memory",
                         kdim, os);
  if (!pointwise && !direct && (st = scratch(ctx, col_bytes, (void**)&col))) return st;
  const Geometry* ge = &cs->g;
  const size_t oh = (size_t)ge->out[0], ow = ge->rank > 1 ? (size_t)ge->out[1] : 1;
  const int wino = cst->wino && ge->rank == 2 && w->group == 1 && cs->mg == cst->wino->oc &&
                   cs->cg == cst->wino->ic && ge->k[0] == 3 && ge->k[1] == 3 && ge->s[0] == 1 &&
                   ge->s[1] == 1 && ge->d[0] == 1 && ge->d[1] == 1 &&
                   cpu_winograd_pays(cst->wino, cs->n, oh, ow);
  /* the direct path exists only where it was available at creation */
  const CpuConvDirect* dc = cst->direct;
  if (dc && ge->rank == 2 && w->group == 1 && cs->m == dc->oc && cs->cg == dc->ic &&
      conv_direct_padding_fits(ge) && (size_t)ge->k[0] == dc->kh && (size_t)ge->k[1] == dc->kw &&
      !(wino && conv_winograd_over_direct(cs->n, oh, ow))) {
    CpuConvRun run = conv_run(cst, cs, x, b, z, y);
    if (cpu_act_is_row(run.act)) run.act = CPU_ACT_NONE; /* conv_row_act below */
    OnyxStatus* dst = cpu_conv_direct_run(dc, ctx, &run);
    return dst ? dst : conv_row_act(cst, ctx, cs, y);
  }
  if (cst->packed_wt && ge->rank == 2 && w->group == 1 && cs->mg == cst->packed_wt_m &&
      kdim == cst->packed_wt_k && os <= CONV_SMALL_OUT && os > 1)
    return conv_small_f32(cst, ctx, cs, x, b, z, y);
  if (wino) {
    CpuConvRun run = conv_run(cst, cs, x, b, z, y);
    if (cpu_act_is_row(run.act)) run.act = CPU_ACT_NONE; /* conv_row_act below */
    OnyxStatus* wst = cpu_winograd_conv(cst->wino, ctx, &run);
    return wst ? wst : conv_row_act(cst, ctx, cs, y);
  }
  const int packed = cst->packed_w && cst->packed_m == cs->mg && cst->packed_k == kdim;
  OnyxThreadPool* pool = cpu_host->ctx_thread_pool(ctx);
  const float* xd = cpu_host->tensor_data(x);
  const float* wd = cpu_host->tensor_data(wt);
  const float* bias = b ? cpu_host->tensor_data(b) : NULL;
  float* yd = cpu_host->tensor_mutable_data(y);
  CpuStop stop = {.ctx = ctx};
  for (size_t n = 0; n < cs->n; n++)
    for (size_t grp = 0; grp < (size_t)w->group; grp++) {
      if (cpu_should_stop(ctx)) return cpu_cancelled(ctx, NULL);
      const float* xg = xd + (n * cs->c + grp * cs->cg) * cs->g.in_size;
      PackCol job = {&cs->g, xg, cpu_gemm_nr(), cpu_gemm_isa_level() == CPU_ISA_AVX512,
                     cpu_gemm_isa_level() == CPU_ISA_AVX2};
      CpuGemm g = {.m = cs->mg,
                   .n = os,
                   .k = kdim,
                   .a = wd + grp * cs->mg * kdim,
                   .lda = kdim,
                   .packed_a = packed ? cst->packed_w + grp * cst->group_floats : NULL,
                   .b = pointwise ? xg : col,
                   .ldb = os,
                   .c = yd + (n * cs->m + grp * cs->mg) * os,
                   .ldc = os,
                   .alpha = 1.0,
                   .beta = z ? 1.0 : 0.0, /* C starts as Z */
                   .bias_row = bias ? bias + grp * cs->mg : NULL,
                   .act = cst->act,
                   .act_alpha = cst->act_alpha,
                   .act_min = cst->act_min,
                   .act_max = cst->act_max,
                   .stop = &stop};
      if (z) memcpy(g.c, z + (n * cs->m + grp * cs->mg) * os, cs->mg * os * sizeof(float));
      if (direct) {
        g.pack_b_fn = im2col_panel;
        g.pack_b_user = &job;
      } else if (!pointwise) {
        Im2Col ij = {&cs->g, xg, col};
        cpu_host->parallel_for(pool, kdim, im2col_rows_float, &ij);
      }
      cpu_gemm_f32(pool, &g);
      if (cpu_stop_seen(&stop)) return cpu_cancelled(ctx, NULL);
    }
  return NULL;
}

OnyxStatus* cpu_conv_compute(void* state, OnyxKernelContext* ctx) {
  const WindowAttrs* w = &((const ConvState*)state)->w;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* wt = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* b = cpu_host->ctx_input_count(ctx) > 2 ? cpu_host->ctx_input(ctx, 2) : NULL;
  /* FusedConv's residual Z */
  const OnyxTensor* zt = cpu_host->ctx_input_count(ctx) > 3 ? cpu_host->ctx_input(ctx, 3) : NULL;
  ConvShape cs;
  OnyxStatus* st = conv_shape(w, x, wt, b, &cs);
  if (st) return st;
  const OnyxElemType t = cpu_host->tensor_elem_type(x);
  if (zt && (t != ONYX_ELEM_FLOAT32 || cpu_host->tensor_elem_type(zt) != ONYX_ELEM_FLOAT32 ||
             cpu_host->tensor_rank(zt) != cs.out_rank ||
             memcmp(cpu_host->tensor_dims(zt), cs.out, cs.out_rank * sizeof(int64_t)) != 0)) {
    char zs[128], ys[128];
    return cpu_error(
        w->node, ONYX_INVALID_ARGUMENT,
        "Z must be a float32 tensor of Y's shape %s (no broadcasting), got %s",
        format_dims(ys, sizeof ys, cs.out, cs.out_rank),
        format_dims(zs, sizeof zs, cpu_host->tensor_dims(zt), cpu_host->tensor_rank(zt)));
  }
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, cs.out, cs.out_rank, &y))) return st;
  const size_t es = cpu_elem_size(t), os = cs.g.out_size;
  size_t kdim, col_bytes;
  if (!cpu_mul_size(cs.cg, cs.g.k_size, &kdim) || !cpu_mul_size(kdim, os, &col_bytes) ||
      !cpu_mul_size(col_bytes, es, &col_bytes))
    return cpu_error(w->node, ONYX_INVALID_ARGUMENT,
                     "integer overflow: the im2col matrix (%zu channels x %zu taps x %zu "
                     "outputs) does not fit in memory",
                     cs.cg, cs.g.k_size, os);
  if (cpu_host->tensor_elem_count(y) == 0) return NULL;
  if (t == ONYX_ELEM_FLOAT32)
    return conv_compute_f32(state, ctx, &cs, x, wt, b, zt ? cpu_host->tensor_data(zt) : NULL, y);
  if (((const ConvState*)state)->act != CPU_ACT_NONE)
    return cpu_error(w->node, ONYX_NOT_IMPLEMENTED, "a fused activation needs float32");
  const int pointwise = conv_is_pointwise(&cs.g);
  void* col = NULL;
  if (!pointwise && (st = scratch(ctx, col_bytes, &col))) return st;
  OnyxThreadPool* pool = cpu_host->ctx_thread_pool(ctx);
  const char* xd = cpu_host->tensor_data(x);
  const char* wd = cpu_host->tensor_data(wt);
  char* yd = cpu_host->tensor_mutable_data(y);
  CpuStop stop = {.ctx = ctx};
  for (size_t n = 0; n < cs.n; n++)
    for (size_t grp = 0; grp < (size_t)w->group; grp++) {
      if (cpu_should_stop(ctx)) return cpu_cancelled(ctx, NULL);
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
                         .beta = b ? 1.0 : 0.0,
                         .stop = &stop};
      if (t == ONYX_ELEM_FLOAT32)
        cpu_gemm_f32(pool, &g);
      else
        cpu_gemm_f64(pool, &g);
      if (cpu_stop_seen(&stop)) return cpu_cancelled(ctx, NULL);
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
  size_t* start;  /* out_size + 1: entries of output o are [start[o], start[o+1]) */
  int64_t* offs;  /* out_size * prod(min(k, in)) at most */
  size_t* padded; /* out_size */
} PoolTable;

/* The kernel positions kk in [*a0, *a1) whose input position
 * start + kk * d lies in [lo, hi): computed, never searched, so a kernel of
 * 2^62 taps costs nothing where it misses the input. The callers'
 * geometry keeps every value here inside int64 (geometry_dim). */
static void pool_clip(int64_t start, int64_t k, int64_t d, int64_t lo, int64_t hi, int64_t* a0,
                      int64_t* a1) {
  int64_t first = start >= lo ? 0 : (lo - start) / d + ((lo - start) % d != 0);
  int64_t end = hi - 1 - start < 0 ? 0 : (hi - 1 - start) / d + 1;
  if (first > k) first = k;
  if (end > k) end = k;
  *a0 = first;
  *a1 = end > first ? end : first;
}

/* The table, built per output from each dim's clipped tap range (only taps
 * inside X are visited, in the window's row-major order). Polls the run's
 * cancellation through `stop`; false when stopped. */
static bool pool_table_build(const Geometry* g, PoolTable* t, CpuStop* stop) {
  size_t e = 0, acc = 0;
  int64_t oc[MAX_SPATIAL], a0[MAX_SPATIAL], a1[MAX_SPATIAL], kc[MAX_SPATIAL];
  for (size_t o = 0; o < g->out_size; o++) {
    unravel(o, g->out, g->rank, oc);
    t->start[o] = e;
    size_t padded = 1, taps = 1;
    for (size_t i = 0; i < g->rank; i++) {
      const int64_t start = oc[i] * g->s[i] - g->pb[i];
      int64_t p0, p1;
      pool_clip(start, g->k[i], g->d[i], -g->pb[i], g->in[i] + g->pe[i], &p0, &p1);
      padded *= (size_t)(p1 - p0); /* at most k_size, which fits */
      pool_clip(start, g->k[i], g->d[i], 0, g->in[i], &a0[i], &a1[i]);
      taps *= (size_t)(a1[i] - a0[i]);
      kc[i] = a0[i];
    }
    t->padded[o] = padded;
    for (size_t n = 0; n < taps; n++) {
      int64_t off = 0;
      for (size_t i = 0; i < g->rank; i++)
        off = off * g->in[i] + oc[i] * g->s[i] - g->pb[i] + kc[i] * g->d[i];
      t->offs[e++] = off;
      for (size_t i = g->rank; i-- > 0;) {
        if (++kc[i] < a1[i]) break;
        kc[i] = a0[i];
      }
    }
    if (cpu_stop_poll(stop, &acc, taps + 1)) return false;
  }
  t->start[g->out_size] = e;
  return true;
}

typedef struct PoolJob {
  const Geometry* g;
  CpuStop* stop;
  PoolTable t;
  const void* x;
  void* y;
  int64_t* indices; /* MaxPool's optional second output, or NULL */
  int storage_order, count_include_pad;
  int avx512; /* 2-D float32 MaxPool: the machine has AVX-512 ... */
  int avx2;   /* ... or AVX2 */
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
    size_t acc = 0;                                                                                \
    for (size_t p = begin; p < end; p++) {                                                         \
      const T* x = (const T*)j->x + p * j->g->in_size;                                             \
      T* y = (T*)j->y + p * os;                                                                    \
      for (size_t o = 0; o < os; o++) {                                                            \
        if (cpu_stop_poll(j->stop, &acc, j->t.start[o + 1] - j->t.start[o] + 1)) return;           \
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

/* 64-byte aligned: the gather loop's speed depends on where its branches
 * fall (32-byte boundaries), which code elsewhere in the file would
 * otherwise shift (a 30% swing measured on an AVX-512 Xeon). */
#define DEFINE_AVGPOOL(T)                                                                          \
  __attribute__((aligned(64))) static void avgpool_planes_##T(void* user, size_t begin,            \
                                                              size_t end) {                        \
    const PoolJob* j = user;                                                                       \
    const size_t os = j->g->out_size;                                                              \
    size_t acc = 0;                                                                                \
    for (size_t p = begin; p < end; p++) {                                                         \
      const T* x = (const T*)j->x + p * j->g->in_size;                                             \
      T* y = (T*)j->y + p * os;                                                                    \
      for (size_t o = 0; o < os; o++) {                                                            \
        if (cpu_stop_poll(j->stop, &acc, j->t.start[o + 1] - j->t.start[o] + 1)) return;           \
        T sum = 0;                                                                                 \
        for (size_t e = j->t.start[o]; e < j->t.start[o + 1]; e++)                                 \
          sum += x[j->t.offs[e]];                                                                  \
        const size_t n =                                                                           \
            j->count_include_pad ? j->t.padded[o] : j->t.start[o + 1] - j->t.start[o];             \
        y[o] = n > 0 ? sum / (T)n : (T)0;                                                          \
      }                                                                                            \
    }                                                                                              \
  }
DEFINE_AVGPOOL(float)
DEFINE_AVGPOOL(double)

/* float32 2-D MaxPool without Indices, straight from the geometry: for
 * each output, the window's valid rows and columns are clipped once, and
 * the maximum is taken in the table driver's order (row-major over the
 * window, the first valid element first, then `>`), so NaN handling and
 * results match it exactly. */
static inline float maxpool2d_one(const float* x, const Geometry* g, int64_t h0, int64_t a0,
                                  int64_t a1, int64_t ow) {
  const int64_t iw_n = g->in[1], kw_n = g->k[1], dh = g->d[0], dw = g->d[1];
  const int64_t w0 = ow * g->s[1] - g->pb[1];
  int64_t b0, b1;
  pool_clip(w0, kw_n, dw, 0, iw_n, &b0, &b1);
  if (a0 == a1 || b0 == b1) return -INFINITY; /* the window misses the input */
  /* Seeded with the first valid element, which `v > best` then skips: the
   * select compiles to maxss, which keeps `best` on unordered. Indices are
   * formed in int64 and only then added to x: w0 may lie far before the
   * row (pads of 2^61), which a pointer must never reach. */
  float best = x[(h0 + a0 * dh) * iw_n + w0 + b0 * dw];
  for (int64_t a = a0; a < a1; a++) {
    const float* row = x + (h0 + a * dh) * iw_n;
    for (int64_t b = b0; b < b1; b++) {
      const float v = row[w0 + b * dw];
      best = v > best ? v : best;
    }
  }
  return best;
}

#if CPU_NN_X86
/* n outputs (a multiple of 16) of one row whose windows lie wholly inside X,
 * window of output t at base + t * sw (sw 1 or 2, unit column dilation):
 * maxpool2d_one's order and rule on 16 outputs at a time, one per lane
 * (stride 2 takes the even lanes of 31 loaded floats, never reading past
 * the last window). */
__attribute__((target("avx512f"))) static void maxpool_row16_avx512(const float* base,
                                                                    int64_t row_step, int64_t kh,
                                                                    int64_t kw, int64_t sw,
                                                                    int64_t n, float* yr) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (int64_t t = 0; t < n; t += 16) {
    const float* b0 = base + t * sw;
    __m512 best = _mm512_setzero_ps();
    for (int64_t a = 0; a < kh; a++)
      for (int64_t b = 0; b < kw; b++) {
        const float* r = b0 + a * row_step + b;
        const __m512 v =
            sw == 1 ? _mm512_loadu_ps(r)
                    : _mm512_permutex2var_ps(_mm512_loadu_ps(r), even,
                                             _mm512_maskz_loadu_ps((__mmask16)0x7FFF, r + 16));
        /* seeded with the first element, then `v > best ? v : best`, which
         * is max_ps(v, best) exactly (it returns its second operand on
         * NaN and on equal values) */
        best = a == 0 && b == 0 ? v : _mm512_max_ps(v, best);
      }
    _mm512_storeu_ps(yr + t, best);
  }
}

/* The same with AVX2, 8 outputs at a time (stride 2: the even lanes of 15
 * floats, the second half loaded with a mask). */
__attribute__((target("avx2,avx"))) static void maxpool_row8_avx2(const float* base,
                                                                  int64_t row_step, int64_t kh,
                                                                  int64_t kw, int64_t sw, int64_t n,
                                                                  float* yr) {
  const __m256i seven = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, -1, 0);
  for (int64_t t = 0; t < n; t += 8) {
    const float* b0 = base + t * sw;
    __m256 best = _mm256_setzero_ps();
    for (int64_t a = 0; a < kh; a++)
      for (int64_t b = 0; b < kw; b++) {
        const float* r = b0 + a * row_step + b;
        __m256 v;
        if (sw == 1) {
          v = _mm256_loadu_ps(r);
        } else {
          /* [r0 r2 r8 r10 | r4 r6 r12 r14], then the 64-bit pairs in order */
          const __m256 e = _mm256_shuffle_ps(_mm256_loadu_ps(r), _mm256_maskload_ps(r + 8, seven),
                                             _MM_SHUFFLE(2, 0, 2, 0));
          v = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
        }
        /* max_ps(v, best) is `v > best ? v : best` (as above) */
        best = a == 0 && b == 0 ? v : _mm256_max_ps(v, best);
      }
    _mm256_storeu_ps(yr + t, best);
  }
}
#endif

static void maxpool2d_planes_f32(void* user, size_t begin, size_t end) {
  const PoolJob* j = user;
  const Geometry* g = j->g;
  const int64_t ih_n = g->in[0], iw_n = g->in[1], oh_n = g->out[0], ow_n = g->out[1];
  const int64_t kh_n = g->k[0], kw_n = g->k[1], sh = g->s[0], sw = g->s[1];
  const int64_t dh = g->d[0], dw = g->d[1], ph = g->pb[0], pw = g->pb[1];
  /* Outputs [lo, hi) have their whole window inside a row. */
  int64_t lo = pw / sw + (pw % sw != 0);
  if (lo > ow_n) lo = ow_n;
  int64_t hi = lo;
  while (hi < ow_n && hi * sw - pw + (kw_n - 1) * dw < iw_n)
    hi++;
  /* the taps one output reads at most (its window clipped to X) */
  const size_t taps = (size_t)(kh_n < ih_n ? kh_n : ih_n) * (size_t)(kw_n < iw_n ? kw_n : iw_n);
  size_t acc = 0;
  for (size_t p = begin; p < end; p++) {
    const float* x = (const float*)j->x + p * g->in_size;
    float* y = (float*)j->y + p * g->out_size;
    for (int64_t oh = 0; oh < oh_n; oh++) {
      if (cpu_stop_poll(j->stop, &acc, 1)) return;
      const int64_t h0 = oh * sh - ph;
      /* kernel rows a in [a0, a1) land inside the input */
      int64_t a0, a1;
      pool_clip(h0, kh_n, dh, 0, ih_n, &a0, &a1);
      float* yr = y + oh * ow_n;
      int64_t ow = 0;
#if CPU_NN_X86
      const int64_t vl = j->avx512 ? 16 : j->avx2 ? 8 : 0;
      if (vl && (sw == 1 || sw == 2) && dw == 1 && hi - lo >= vl && a1 > a0) {
        /* the rows [a0, a1) of the windows of [lo, hi), vl at a time, the
         * last vl overlapping the ones before (the same values again) */
        for (; ow < lo; ow++)
          yr[ow] = maxpool2d_one(x, g, h0, a0, a1, ow);
        /* the first valid row; columns from lo * sw - pw >= 0 on */
        const float* base = x + (h0 + a0 * dh) * iw_n;
        const int64_t nv = (hi - lo) / vl * vl;
        void (*row)(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, float*) =
            vl == 16 ? maxpool_row16_avx512 : maxpool_row8_avx2;
        /* one valid row needs no step (a huge dh would overflow it) */
        const int64_t step = a1 - a0 > 1 ? dh * iw_n : 0;
        row(base + (lo * sw - pw), step, a1 - a0, kw_n, sw, nv, yr + lo);
        if (nv < hi - lo)
          row(base + ((hi - vl) * sw - pw), step, a1 - a0, kw_n, sw, vl, yr + hi - vl);
        ow = hi;
        size_t work;
        if (__builtin_mul_overflow((size_t)(hi - lo), taps, &work)) work = SIZE_MAX;
        if (cpu_stop_poll(j->stop, &acc, work)) return;
      }
#endif
      if (ow == 0 && a0 == 0 && a1 == kh_n) {
        /* Whole windows eight at a time: eight independent running maxima
         * in the same order and rule as maxpool2d_one (so the same results)
         * instead of one serial chain of compares per output. */
        for (; ow < lo; ow++)
          yr[ow] = maxpool2d_one(x, g, h0, a0, a1, ow);
        for (; ow + 8 <= hi; ow += 8) {
          const float* base = x + (h0 * iw_n + ow * sw - pw); /* inside X: [lo, hi) */
          float best[8];
          for (int k = 0; k < 8; k++)
            best[k] = base[k * sw];
          for (int64_t a = 0; a < kh_n; a++)
            for (int64_t b = 0; b < kw_n; b++) {
              const float* r = base + a * dh * iw_n + b * dw;
              for (int k = 0; k < 8; k++) {
                const float v = r[k * sw];
                best[k] = v > best[k] ? v : best[k];
              }
            }
          memcpy(yr + ow, best, sizeof best);
          if (cpu_stop_poll(j->stop, &acc, 8 * taps)) return;
        }
      }
      for (; ow < ow_n; ow++) {
        yr[ow] = maxpool2d_one(x, g, h0, a0, a1, ow);
        if (cpu_stop_poll(j->stop, &acc, taps + 1)) return;
      }
    }
  }
}

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

static OnyxStatus* pool_alloc_table(OnyxKernelContext* ctx, const Geometry* g, PoolTable* t,
                                    CpuStop* stop) {
  void *a, *b, *c;
  OnyxStatus* st;
  /* a window's taps inside X: at most min(kernel, input) per dim */
  size_t taps = 1, entries;
  for (size_t i = 0; i < g->rank; i++)
    taps *= (size_t)(g->k[i] < g->in[i] ? g->k[i] : g->in[i]); /* <= in_size */
  if (!cpu_mul_size(g->out_size, taps, &entries) ||
      !cpu_mul_size(entries, sizeof(int64_t), &entries))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "integer overflow: %zu outputs x %zu kernel taps (kernel_shape) do "
                         "not fit in memory",
                         g->out_size, taps);
  if ((st = scratch(ctx, (g->out_size + 1) * sizeof(size_t), &a)) ||
      (st = scratch(ctx, entries, &b)) || (st = scratch(ctx, g->out_size * sizeof(size_t), &c)))
    return st;
  t->start = a, t->offs = b, t->padded = c;
  if (!pool_table_build(g, t, stop)) return cpu_cancelled(ctx, NULL);
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
  CpuStop stop = {.ctx = ctx};
  PoolJob job = {.x = cpu_host->tensor_data(x),
                 .stop = &stop,
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
  if (w->is_max && !ind && g.rank == 2 && cpu_host->tensor_elem_type(x) == ONYX_ELEM_FLOAT32) {
    job.y = cpu_host->tensor_mutable_data(y);
    job.avx512 = cpu_gemm_isa_level() == CPU_ISA_AVX512;
    job.avx2 = cpu_gemm_isa_level() == CPU_ISA_AVX2;
    cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), planes, maxpool2d_planes_f32, &job);
    return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
  }
  if ((st = pool_alloc_table(ctx, &g, &job.t, &stop))) return st;
  job.y = cpu_host->tensor_mutable_data(y);
  job.indices = ind ? cpu_host->tensor_mutable_data(ind) : NULL;
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), planes, fn, &job);
  return cpu_stop_seen(&stop) ? cpu_cancelled(ctx, NULL) : NULL;
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
DEFINE_GLOBAL_AVG(double)

/* float32 planes summed in double as the loop above, in 8 independent
 * partial sums (lane l takes elements l, l + 8, ...; combined pairwise at
 * the end): one serial chain of double adds ran at the adder's latency, a
 * tenth of efficientnet_b0's run in its 17 GlobalAveragePools. The order is
 * fixed, so results do not depend on the thread count. */
static void global_avg_float(void* user, size_t begin, size_t end) {
  const PlaneJob* j = user;
  for (size_t p = begin; p < end; p++) {
    const float* x = (const float*)j->x + p * j->size;
    double s[8] = {0};
    size_t i = 0;
    for (; i + 8 <= j->size; i += 8)
      for (size_t l = 0; l < 8; l++)
        s[l] += (double)x[i + l];
    double sum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < j->size; i++)
      sum += x[i];
    ((float*)j->y)[p] = j->size ? (float)(sum / (double)j->size) : 0.0f;
  }
}

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
/* BatchNormalization (inference; training mode from opset 14)              */
/* ======================================================================== */

typedef struct BatchNormState {
  const OnyxNode* node;
  double epsilon;
  int training;    /* opset 14+ training_mode: batch statistics */
  double momentum; /* running = running * momentum + batch * (1 - momentum) */
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
  if (training && *(const BnTraining*)user_data != BN_BY_ATTR)
    return cpu_error(node, ONYX_NOT_IMPLEMENTED,
                     "training mode before opset 14 (saved statistics outputs) not supported");
  BatchNormState* s = malloc(sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->node = node;
  s->epsilon = cpu_host->node_attr_float(node, "epsilon", 1e-5f);
  s->training = training;
  s->momentum = cpu_host->node_attr_float(node, "momentum", 0.9f);
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

/* Training mode (opset 14+): normalizes with the batch's own mean and
 * (biased) variance per channel, and writes the updated running statistics
 * to the optional outputs 1 and 2. */
static OnyxStatus* bn_training(const BatchNormState* s, OnyxKernelContext* ctx, const OnyxTensor* x,
                               BnJob* job) {
  const OnyxElemType t = cpu_host->tensor_elem_type(x);
  const int64_t* dx = cpu_host->tensor_dims(x);
  const size_t C = job->channels, inner = job->inner, N = (size_t)dx[0];
  const void* p[4];
  for (size_t i = 0; i < 4; i++) {
    const OnyxTensor* in = cpu_host->ctx_input(ctx, i + 1);
    if (!in || cpu_host->tensor_elem_count(in) != C || cpu_host->tensor_elem_type(in) != t)
      return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                       "input %zu must have %zu elements of X's type", i + 1, C);
    p[i] = cpu_host->tensor_data(in);
  }
  double* a;
  OnyxStatus* st = scratch(ctx, 4 * C * sizeof(double), (void**)&a);
  if (st) return st;
  double *mean = a + 2 * C, *var = a + 3 * C;
  const void* xd = cpu_host->tensor_data(x);
  const double count = (double)(N * inner);
  for (size_t c = 0; c < C; c++) {
    double sum = 0.0, sq = 0.0;
    for (size_t n = 0; n < N; n++)
      for (size_t i = 0; i < inner; i++)
        sum += load_real(xd, t, (n * C + c) * inner + i);
    mean[c] = count > 0 ? sum / count : 0.0;
    for (size_t n = 0; n < N; n++)
      for (size_t i = 0; i < inner; i++) {
        double d = load_real(xd, t, (n * C + c) * inner + i) - mean[c];
        sq += d * d;
      }
    var[c] = count > 0 ? sq / count : 0.0;
    a[c] = load_real(p[0], t, c) / sqrt(var[c] + s->epsilon);
    a[C + c] = load_real(p[1], t, c) - mean[c] * a[c];
  }
  job->a = a, job->b = a + C;
  for (size_t o = 1; o <= 2; o++) { /* running_mean, running_var */
    if (cpu_host->ctx_output_count(ctx) <= o || !node_has_output(s->node, o)) continue;
    OnyxTensor* r;
    int64_t dims[1] = {(int64_t)C};
    if ((st = cpu_host->ctx_output(ctx, o, dims, 1, &r))) return st;
    const void* prev = p[o + 1]; /* input 3: mean, input 4: var */
    const double* batch = o == 1 ? mean : var;
    for (size_t c = 0; c < C; c++) {
      double v = load_real(prev, t, c) * s->momentum + batch[c] * (1.0 - s->momentum);
      if (t == ONYX_ELEM_FLOAT32)
        ((float*)cpu_host->tensor_mutable_data(r))[c] = (float)v;
      else
        ((double*)cpu_host->tensor_mutable_data(r))[c] = v;
    }
  }
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
  if (s->training) {
    if ((st = bn_training(s, ctx, x, &job))) return st;
  } else if ((st = bn_coefficients(
                  s, ctx, job.per_element ? job.channels * job.inner : job.channels, &job))) {
    return st;
  }
  if (cpu_host->tensor_elem_count(y) == 0) return NULL;
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), (size_t)dx[0] * job.channels,
                         t == ONYX_ELEM_FLOAT32 ? bn_planes_float : bn_planes_double, &job);
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* AVX-512 and AVX2 rows for float32 Softmax and LayerNormalization          */
/* ------------------------------------------------------------------------ */

/* The GEMM kernel the machine runs (AVX-512 or AVX2) picks these. */
static int use_avx512(void) {
  return cpu_gemm_isa_level() == CPU_ISA_AVX512;
}

static int use_avx2(void) {
  return cpu_gemm_isa_level() == CPU_ISA_AVX2;
}

#if CPU_NN_X86
#define NN_AVX512 __attribute__((target("avx512f,avx512dq,fma")))

static inline NN_AVX512 __mmask16 tail_mask(size_t left) {
  return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

/* e^x, 16 lanes: x = n ln 2 + r with |r| <= ln 2 / 2, e^r by a degree-6
 * polynomial (relative error below 3e-7), 2^n by scalef. Where e^x is below
 * the smallest normal float (x < ln FLT_MIN = -87.34) the result is 0, never
 * a denormal; NaN stays NaN. */
static inline NN_AVX512 __m512 exp16(__m512 x) {
  const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33f), _CMP_NLT_UQ);
  x = _mm512_max_ps(_mm512_set1_ps(-87.0f), x); /* NaN kept (second operand) */
  x = _mm512_min_ps(_mm512_set1_ps(88.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_mov_ps(normal, _mm512_scalef_ps(p, n));
}

/* y = softmax(x) over n contiguous values; y may be x. */
static NN_AVX512 void softmax_row_avx512(const float* x, float* y, size_t n) {
  __m512 vm = _mm512_set1_ps(-INFINITY);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    vm = _mm512_max_ps(vm, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + i));
  }
  const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(vm));
  __m512 vs = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mx));
    _mm512_mask_storeu_ps(y + i, m, e);
    vs = _mm512_mask_add_ps(vs, m, vs, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vs));
  const __m512 tiny = _mm512_set1_ps(FLT_MIN);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), inv);
    /* Below FLT_MIN (not NaN): 0, as the scalar rows (SOFTMAX_TINY_float). */
    const __mmask16 keep = m & ~_mm512_cmp_ps_mask(v, tiny, _CMP_LT_OQ);
    _mm512_mask_storeu_ps(y + i, m, _mm512_maskz_mov_ps(keep, v));
  }
}

/* One LayerNormalization row: mean, then the variance about it (two passes,
 * as the scalar code), then y = (x - mean) * inv_std * scale + bias. */
static NN_AVX512 void ln_row_avx512(const float* x, float* y, const float* scale, const float* bias,
                                    size_t n, float eps, float* mean_out, float* inv_out) {
  __m512 acc = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16)
    acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(tail_mask(n - i), x + i));
  const float mean = _mm512_reduce_add_ps(acc) / (float)n;
  const __m512 vmean = _mm512_set1_ps(mean);
  acc = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + i), vmean);
    acc = _mm512_fmadd_ps(d, d, acc);
  }
  const float inv = 1.0f / sqrtf(_mm512_reduce_add_ps(acc) / (float)n + eps);
  const __m512 vinv = _mm512_set1_ps(inv);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmean), vinv);
    v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, scale + i));
    if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + i));
    _mm512_mask_storeu_ps(y + i, m, v);
  }
  *mean_out = mean;
  *inv_out = inv;
}
/* The same three with AVX2 (8 lanes; masked loads for the tails). */
#define NN_AVX2 __attribute__((target("avx2,fma,avx")))

static inline NN_AVX2 __m256i tail_mask8(size_t left) {
  const int n = left >= 8 ? 8 : (int)left;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline NN_AVX2 float hsum8(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_add_ss(a, _mm_movehdup_ps(a)));
}

static inline NN_AVX2 float hmax8(__m256 v) {
  __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_max_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_max_ss(a, _mm_movehdup_ps(a)));
}

/* exp16's method and rule on 8 lanes; 2^n is built in the exponent field
 * (n in [-126, 127] after the clamps, so p * 2^n is exact, as scalef). */
static inline NN_AVX2 __m256 exp8(__m256 x) {
  const __m256 normal = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33f), _CMP_NLT_UQ);
  x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x); /* NaN kept (second operand) */
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(normal, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

static NN_AVX2 void softmax_row_avx2(const float* x, float* y, size_t n) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  __m256 vm = ninf;
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
  if (i < n) {
    const __m256i m = tail_mask8(n - i);
    vm = _mm256_max_ps(
        vm, _mm256_blendv_ps(ninf, _mm256_maskload_ps(x + i, m), _mm256_castsi256_ps(m)));
  }
  const __m256 mx = _mm256_set1_ps(hmax8(vm));
  __m256 vs = _mm256_setzero_ps();
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mx));
    _mm256_storeu_ps(y + i, e);
    vs = _mm256_add_ps(vs, e);
  }
  if (i < n) {
    const __m256i m = tail_mask8(n - i);
    const __m256 e = _mm256_and_ps(_mm256_castsi256_ps(m),
                                   exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), mx)));
    cpu_store_first_avx2(y + i, e, n - i);
    vs = _mm256_add_ps(vs, e);
  }
  const __m256 inv = _mm256_set1_ps(1.0f / hsum8(vs));
  const __m256 tiny = _mm256_set1_ps(FLT_MIN);
  /* Below FLT_MIN (not NaN): 0, as the scalar rows (SOFTMAX_TINY_float).
   * Masked loads only for the tail, and no masked stores
   * (cpu_store_first_avx2). */
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(y + i), inv);
    _mm256_storeu_ps(y + i, _mm256_andnot_ps(_mm256_cmp_ps(v, tiny, _CMP_LT_OQ), v));
  }
  if (i < n) {
    const __m256i m = tail_mask8(n - i);
    const __m256 v = _mm256_mul_ps(_mm256_maskload_ps(y + i, m), inv);
    cpu_store_first_avx2(y + i, _mm256_andnot_ps(_mm256_cmp_ps(v, tiny, _CMP_LT_OQ), v), n - i);
  }
}

static NN_AVX2 void ln_row_avx2(const float* x, float* y, const float* scale, const float* bias,
                                size_t n, float eps, float* mean_out, float* inv_out) {
  __m256 acc = _mm256_setzero_ps();
  for (size_t i = 0; i < n; i += 8)
    acc = _mm256_add_ps(acc, _mm256_maskload_ps(x + i, tail_mask8(n - i)));
  const float mean = hsum8(acc) / (float)n;
  const __m256 vmean = _mm256_set1_ps(mean);
  acc = _mm256_setzero_ps();
  for (size_t i = 0; i < n; i += 8) {
    const __m256i m = tail_mask8(n - i);
    const __m256 d =
        _mm256_and_ps(_mm256_castsi256_ps(m), _mm256_sub_ps(_mm256_maskload_ps(x + i, m), vmean));
    acc = _mm256_fmadd_ps(d, d, acc);
  }
  const float inv = 1.0f / sqrtf(hsum8(acc) / (float)n + eps);
  const __m256 vinv = _mm256_set1_ps(inv);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) { /* no masked stores: see softmax_row_avx2 */
    __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmean), vinv);
    v = _mm256_mul_ps(v, _mm256_loadu_ps(scale + i));
    if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + i));
    _mm256_storeu_ps(y + i, v);
  }
  if (i < n) {
    const __m256i m = tail_mask8(n - i);
    __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), vmean), vinv);
    v = _mm256_mul_ps(v, _mm256_maskload_ps(scale + i, m));
    if (bias) v = _mm256_add_ps(v, _mm256_maskload_ps(bias + i, m));
    cpu_store_first_avx2(y + i, v, n - i);
  }
  *mean_out = mean;
  *inv_out = inv;
}
#endif

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

#if CPU_NN_X86
/* Rows [begin, end) of a float32 LayerNormalization through one vector row. */
typedef void (*LnRowF32)(const float* x, float* y, const float* scale, const float* bias, size_t n,
                         float eps, float* mean_out, float* inv_out);

static inline void ln_rows_with(const LnJob* j, size_t begin, size_t end, LnRowF32 row) {
  for (size_t r = begin; r < end; r++) {
    float mean, inv;
    row((const float*)j->x + r * j->inner, (float*)j->y + r * j->inner, j->scale, j->bias, j->inner,
        (float)j->epsilon, &mean, &inv);
    if (j->mean) j->mean[r] = mean;
    if (j->inv_std) j->inv_std[r] = inv;
  }
}

static void ln_rows_avx512(void* user, size_t begin, size_t end) {
  ln_rows_with(user, begin, end, ln_row_avx512);
}

static void ln_rows_avx2(void* user, size_t begin, size_t end) {
  ln_rows_with(user, begin, end, ln_row_avx2);
}
#endif

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
  void (*fn)(void*, size_t, size_t) = f32 ? ln_rows_float : ln_rows_double;
#if CPU_NN_X86
  if (f32 && use_avx512()) fn = ln_rows_avx512;
  if (f32 && use_avx2()) fn = ln_rows_avx2;
#endif
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), rows, fn, &job);
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

/* Probabilities below the smallest normal number are written as 0: a
 * denormal output costs nothing here but makes every consumer's arithmetic
 * on it (the attention MatMul after a Softmax) a hundred times slower on
 * x86 (bert_layer's probabilities x V product: 0.2 ms with normal inputs,
 * 7 ms with the denormals of its Softmax). The error is below 1.2e-38. */
#define SOFTMAX_TINY_float  FLT_MIN
#define SOFTMAX_TINY_double DBL_MIN
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
      for (size_t i = 0; i < inner; i++) {                                                         \
        const T v = y[k * inner + i] * sum[i];                                                     \
        y[k * inner + i] = v < SOFTMAX_TINY_##T ? 0 : v; /* NaN kept */                            \
      }                                                                                            \
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

void cpu_softmax_row_f32(const float* x, float* y, size_t n) {
  if (n == 0) return;
#if CPU_NN_X86
  if (use_avx512()) {
    softmax_row_avx512(x, y, n);
    return;
  }
  if (use_avx2()) {
    softmax_row_avx2(x, y, n);
    return;
  }
#endif
  float mx, sum;
  softmax_block_float(x, y, n, 1, &mx, &sum);
}

#if CPU_NN_X86
static inline void softmax_rows_with(const SoftmaxJob* j, size_t begin, size_t end,
                                     void (*row)(const float*, float*, size_t)) {
  for (size_t r = begin; r < end; r++)
    row((const float*)j->x + r * j->n, (float*)j->y + r * j->n, j->n);
}

static void softmax_rows_avx512(void* user, size_t begin, size_t end) {
  softmax_rows_with(user, begin, end, softmax_row_avx512);
}

static void softmax_rows_avx2(void* user, size_t begin, size_t end) {
  softmax_rows_with(user, begin, end, softmax_row_avx2);
}
#endif

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
    void (*rows)(void*, size_t, size_t) = f32 ? softmax_rows_float : softmax_rows_double;
#if CPU_NN_X86
    if (f32 && use_avx512()) rows = softmax_rows_avx512;
    if (f32 && use_avx2()) rows = softmax_rows_avx2;
#endif
    cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), outer, rows, &job);
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
      KDEF("Conv", 1, latest, T_FLOATS, cpu_conv_create, cpu_conv_compute, cpu_conv_release, NULL),
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
