/* cpu_resize.c — Resize (10..19), Upsample (7, 9), GridSample
 * (16, 20, 22), AffineGrid (20) and RoiAlign (10, 16, 22).
 *
 * Resize runs one separable pass per resized axis, innermost axis first: each
 * output coordinate along the axis maps to an original coordinate (the
 * coordinate_transformation_mode), then to a list of taps (index, weight):
 * one tap for nearest, the triangle (linear) or Keys cubic kernel otherwise,
 * stretched by the scale when antialiasing a downscale. Indices outside the
 * input read the edge value (or weigh nothing with exclude_outside). With
 * tf_crop_and_resize, a coordinate outside the input yields
 * extrapolation_value; since every pass's weights sum to 1, later passes
 * keep that value, as the ONNX reference's nested interpolation does.
 * Passes run in float for float32 and the halves, in double otherwise.
 * Nearest mode skips the passes: a gather of whole elements in the input's
 * own type (exact for every integer type).
 *
 * GridSample computes each output point's taps (offsets and weights, after
 * the padding mode) once and applies them to every channel. */
#include "cpu_nnop_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* Resize / Upsample                                                         */
/* ======================================================================== */

typedef enum Coord {
  CT_HALF_PIXEL,
  CT_HALF_PIXEL_SYM,
  CT_PYTORCH_HALF_PIXEL,
  CT_ALIGN_CORNERS,
  CT_ASYMMETRIC,
  CT_TF_HALF_PIXEL_NN,
  CT_TF_CROP_AND_RESIZE
} Coord;
static const char* const COORD_NAMES[] = {
    "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
    "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
typedef enum Mode { MODE_NEAREST, MODE_LINEAR, MODE_CUBIC } Mode;
typedef enum Nearest { NR_ROUND_FLOOR, NR_ROUND_CEIL, NR_FLOOR, NR_CEIL, NR_SIMPLE } Nearest;
static const char* const NEAREST_NAMES[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                            "ceil"};
typedef enum Policy { POL_STRETCH, POL_NOT_LARGER, POL_NOT_SMALLER } Policy;

typedef struct ResizeState {
  const OnyxNode* node;
  int version; /* 0: Upsample-7 (scales attribute), 9: Upsample-9, else Resize's */
  bool upsample;
  Mode mode;
  Coord coord;
  Nearest nearest;
  Policy policy;
  double cubic_a, extrapolation;
  bool exclude_outside, antialias;
  int64_t axes[CPU_MAX_RANK];
  size_t n_axes; /* 0: all */
  float scales_attr[CPU_MAX_RANK];
  size_t n_scales_attr;
} ResizeState;

static int find_name(const char* s, const char* const* names, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(s, names[i])) return (int)i;
  return -1;
}

static OnyxStatus* resize_create_impl(OnyxEp* ep, const OnyxNode* node, void* user_data,
                                      void** state) {
  (void)ep;
  ResizeState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  *state = s;
  s->node = node;
  s->upsample = user_data != NULL;
  s->version = cpu_host->node_since_version(node);
  char buf[64];
  nnop_attr_str(node, "mode", "nearest", buf, sizeof buf);
  if (!strcmp(buf, "nearest"))
    s->mode = MODE_NEAREST;
  else if (!strcmp(buf, "linear") || !strcmp(buf, "bilinear") || !strcmp(buf, "trilinear"))
    s->mode = MODE_LINEAR;
  else if (!strcmp(buf, "cubic") && !s->upsample)
    s->mode = MODE_CUBIC;
  else
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "unknown mode '%s'", buf);
  if (s->upsample || s->version < 11) {
    s->coord = CT_ASYMMETRIC;
    s->nearest = NR_SIMPLE;
  } else {
    nnop_attr_str(node, "coordinate_transformation_mode", "half_pixel", buf, sizeof buf);
    const int c = find_name(buf, COORD_NAMES, CPU_ARRAY_LEN(COORD_NAMES));
    if (c < 0)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "unknown coordinate_transformation_mode '%s'",
                       buf);
    s->coord = (Coord)c;
    nnop_attr_str(node, "nearest_mode", "round_prefer_floor", buf, sizeof buf);
    const int nm = find_name(buf, NEAREST_NAMES, CPU_ARRAY_LEN(NEAREST_NAMES));
    if (nm < 0) return cpu_error(node, ONYX_INVALID_ARGUMENT, "unknown nearest_mode '%s'", buf);
    s->nearest = (Nearest)nm;
  }
  nnop_attr_str(node, "keep_aspect_ratio_policy", "stretch", buf, sizeof buf);
  if (!strcmp(buf, "stretch"))
    s->policy = POL_STRETCH;
  else if (!strcmp(buf, "not_larger"))
    s->policy = POL_NOT_LARGER;
  else if (!strcmp(buf, "not_smaller"))
    s->policy = POL_NOT_SMALLER;
  else
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "unknown keep_aspect_ratio_policy '%s'", buf);
  s->cubic_a = cpu_host->node_attr_float(node, "cubic_coeff_a", -0.75f);
  s->extrapolation = cpu_host->node_attr_float(node, "extrapolation_value", 0.0f);
  s->exclude_outside = cpu_host->node_attr_int(node, "exclude_outside", 0) != 0;
  s->antialias = cpu_host->node_attr_int(node, "antialias", 0) != 0;
  size_t n = 0;
  const int64_t* axes = cpu_host->node_attr_ints(node, "axes", &n);
  if (n > CPU_MAX_RANK) return cpu_error(node, ONYX_INVALID_ARGUMENT, "too many axes");
  if (axes) memcpy(s->axes, axes, n * sizeof *axes);
  s->n_axes = axes ? n : 0;
  const float* sc = cpu_host->node_attr_floats(node, "scales", &n);
  if (s->upsample && s->version < 9) {
    if (!sc || n > CPU_MAX_RANK)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "attribute scales is missing or too long");
    memcpy(s->scales_attr, sc, n * sizeof *sc);
    s->n_scales_attr = n;
  }
  return NULL;
}

/* One tap list per output coordinate along an axis: `taps` per coordinate. */
typedef struct AxisPlan {
  size_t taps;
  int64_t* idx;   /* out_len * taps */
  double* w;      /* out_len * taps */
  bool* extrapol; /* out_len: tf_crop_and_resize outside the input */
} AxisPlan;

static double cubic_kernel(double x, double a) {
  x = fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

static double original_coord(const ResizeState* s, double x, double scale, int64_t in_len,
                             int64_t out_len, double roi_start, double roi_end) {
  switch (s->coord) {
  case CT_HALF_PIXEL:
    return (x + 0.5) / scale - 0.5;
  case CT_HALF_PIXEL_SYM: {
    const double adjustment = (double)out_len / (scale * (double)in_len);
    const double center = (double)in_len / 2;
    return center * (1 - adjustment) + (x + 0.5) / scale - 0.5;
  }
  case CT_PYTORCH_HALF_PIXEL:
    return out_len > 1 ? (x + 0.5) / scale - 0.5 : 0;
  case CT_ALIGN_CORNERS:
    /* The resized length is scale * in_len (not rounded), as in the ONNX
     * reference; with sizes the two agree. */
    return out_len == 1 ? 0 : x * (double)(in_len - 1) / (scale * (double)in_len - 1);
  case CT_ASYMMETRIC:
    return x / scale;
  case CT_TF_HALF_PIXEL_NN:
    return (x + 0.5) / scale;
  case CT_TF_CROP_AND_RESIZE:
    return out_len > 1
               ? roi_start * (double)(in_len - 1) +
                     x * (roi_end - roi_start) * (double)(in_len - 1) / (double)(out_len - 1)
               : 0.5 * (roi_start + roi_end) * (double)(in_len - 1);
  }
  return 0;
}

static int64_t nearest_index(Nearest m, double x, double scale) {
  switch (m) {
  case NR_ROUND_FLOOR:
    return x - floor(x) == 0.5 ? (int64_t)floor(x) : (int64_t)round(x);
  case NR_ROUND_CEIL:
    return x - floor(x) == 0.5 ? (int64_t)ceil(x) : (int64_t)round(x);
  case NR_FLOOR:
    return (int64_t)floor(x);
  case NR_CEIL:
    return (int64_t)ceil(x);
  case NR_SIMPLE:
    return scale < 1 ? (int64_t)ceil(x) : (int64_t)x;
  }
  return 0;
}

static int64_t clamp_i(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

static OnyxStatus* plan_axis(OnyxKernelContext* ctx, const ResizeState* s, int64_t in_len,
                             int64_t out_len, double scale, double roi_start, double roi_end,
                             AxisPlan* p) {
  const double sa = s->antialias && scale < 1 && s->mode != MODE_NEAREST ? scale : 1.0;
  const double support = s->mode == MODE_NEAREST ? 0 : (s->mode == MODE_LINEAR ? 1 : 2);
  const double radius = support / sa;
  if (!(radius < 1e6))
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                     "the antialiasing filter of scale %g is too wide", scale);
  p->taps = s->mode == MODE_NEAREST ? 1 : (size_t)(2 * ceil(radius) + 1);
  OnyxStatus* st;
  const size_t n = (size_t)out_len;
  if ((st = nnop_scratch(ctx, n * p->taps * sizeof(int64_t), (void**)&p->idx)) ||
      (st = nnop_scratch(ctx, n * p->taps * sizeof(double), (void**)&p->w)) ||
      (st = nnop_scratch(ctx, n * sizeof(bool), (void**)&p->extrapol)))
    return st;
  for (size_t o = 0; o < n; o++) {
    double x = original_coord(s, (double)o, scale, in_len, out_len, roi_start, roi_end);
    p->extrapol[o] = false;
    if (!isfinite(x)) {
      /* A NaN/inf roi: extrapolate (tf_crop_and_resize) or read the edge. */
      p->extrapol[o] = s->coord == CT_TF_CROP_AND_RESIZE;
      x = 0;
    }
    x = fmin(fmax(x, -(double)in_len - 8), 2.0 * (double)in_len + 8);
    int64_t* idx = p->idx + o * p->taps;
    double* w = p->w + o * p->taps;
    p->extrapol[o] = p->extrapol[o] ||
                     (s->coord == CT_TF_CROP_AND_RESIZE && (x < 0 || x > (double)(in_len - 1)));
    if (s->mode == MODE_NEAREST) {
      idx[0] = clamp_i(nearest_index(s->nearest, x, scale), 0, in_len - 1);
      w[0] = 1;
      continue;
    }
    const int64_t first = (int64_t)floor(x) - (int64_t)ceil(radius);
    double sum = 0;
    for (size_t t = 0; t < p->taps; t++) {
      const int64_t j = first + (int64_t)t;
      const double arg = ((double)j - x) * sa;
      double k = s->mode == MODE_LINEAR ? fmax(0.0, 1 - fabs(arg)) : cubic_kernel(arg, s->cubic_a);
      if (s->exclude_outside && (j < 0 || j >= in_len)) k = 0;
      idx[t] = clamp_i(j, 0, in_len - 1);
      w[t] = k;
      sum += k;
    }
    if ((sa != 1.0 || s->exclude_outside) && sum != 0)
      for (size_t t = 0; t < p->taps; t++)
        w[t] /= sum;
  }
  return NULL;
}

typedef struct AxisJob {
  const AxisPlan* p;
  const void* src;
  void* dst;
  size_t inner, in_len, out_len;
  double extrapolation;
} AxisJob;

#define DEFINE_AXIS_ROWS(T)                                                                        \
  static void axis_rows_##T(void* user, size_t begin, size_t end) {                                \
    const AxisJob* j = user;                                                                       \
    const AxisPlan* p = j->p;                                                                      \
    const size_t inner = j->inner;                                                                 \
    for (size_t row = begin; row < end; row++) {                                                   \
      const size_t o = row / j->out_len, x = row % j->out_len;                                     \
      T* d = (T*)j->dst + row * inner;                                                             \
      if (p->extrapol[x]) {                                                                        \
        for (size_t i = 0; i < inner; i++)                                                         \
          d[i] = (T)j->extrapolation;                                                              \
        continue;                                                                                  \
      }                                                                                            \
      for (size_t i = 0; i < inner; i++)                                                           \
        d[i] = 0;                                                                                  \
      for (size_t t = 0; t < p->taps; t++) {                                                       \
        const T w = (T)p->w[x * p->taps + t];                                                      \
        if (w == 0) continue;                                                                      \
        const T* sp =                                                                              \
            (const T*)j->src + (o * j->in_len + (size_t)p->idx[x * p->taps + t]) * inner;          \
        for (size_t i = 0; i < inner; i++)                                                         \
          d[i] += w * sp[i];                                                                       \
      }                                                                                            \
    }                                                                                              \
  }
DEFINE_AXIS_ROWS(float)
DEFINE_AXIS_ROWS(double)

/* One resize pass: axis `a` of src (dims) into dst (dims with dims[a] =
 * out_len), as rows (outer index, output coordinate) split over the pool;
 * in float or double. */
static void run_axis(OnyxKernelContext* ctx, bool f32, const AxisPlan* p, const void* src,
                     void* dst, const int64_t* dims, size_t rank, size_t a, int64_t out_len,
                     double extrapolation) {
  AxisJob j = {p,
               src,
               dst,
               cpu_dims_product(dims, a + 1, rank),
               (size_t)dims[a],
               (size_t)out_len,
               extrapolation};
  const size_t rows = cpu_dims_product(dims, 0, a) * (size_t)out_len;
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), rows,
                         f32 ? axis_rows_float : axis_rows_double, &j);
}

/* Reads the scale/size inputs into per-axis scales and output sizes. */
static OnyxStatus* resize_targets(const ResizeState* s, OnyxKernelContext* ctx, const int64_t* in,
                                  size_t r, double* scales, int64_t* out, double* roi) {
  const OnyxNode* node = s->node;
  OnyxStatus* st;
  /* Which axes: attribute axes (Resize-18+) or all. */
  int64_t axes[CPU_MAX_RANK];
  size_t na = s->n_axes ? s->n_axes : r;
  bool seen[CPU_MAX_RANK] = {false};
  for (size_t i = 0; i < na; i++) {
    size_t ax = i;
    if (s->n_axes && !cpu_norm_axis(s->axes[i], r, false, &ax))
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                       (long long)s->axes[i], r);
    if (seen[ax]) return cpu_error(node, ONYX_INVALID_ARGUMENT, "axis %zu is repeated", ax);
    seen[ax] = true;
    axes[i] = (int64_t)ax;
  }
  for (size_t i = 0; i < r; i++) {
    scales[i] = 1;
    out[i] = in[i];
    roi[i] = 0;
    roi[i + r] = 1;
  }
  const OnyxTensor *tsc = NULL, *tsz = NULL, *troi = NULL;
  if (s->upsample && s->version < 9) {
    if (s->n_scales_attr != r)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "scales has %zu values; the input has rank %zu",
                       s->n_scales_attr, r);
    for (size_t i = 0; i < r; i++) {
      scales[i] = s->scales_attr[i];
      const double o = floor((double)in[i] * scales[i]);
      if (!(scales[i] > 0) || !(o >= 0 && o < 4e18))
        return cpu_error(node, ONYX_INVALID_ARGUMENT, "scales[%zu] = %g is invalid", i, scales[i]);
      out[i] = (int64_t)o;
    }
    return NULL;
  }
  if (s->upsample || s->version == 10) {
    tsc = cpu_host->ctx_input(ctx, 1);
  } else {
    troi = nnop_has_input(ctx, 1) ? cpu_host->ctx_input(ctx, 1) : NULL;
    tsc = nnop_has_input(ctx, 2) ? cpu_host->ctx_input(ctx, 2) : NULL;
    tsz = nnop_has_input(ctx, 3) ? cpu_host->ctx_input(ctx, 3) : NULL;
  }
  if (tsc && cpu_host->tensor_elem_count(tsc) == 0) tsc = NULL;
  if (tsz && cpu_host->tensor_elem_count(tsz) == 0) tsz = NULL;
  if (!!tsc == !!tsz)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "exactly one of scales and sizes must be given (non-empty)");
  if (troi && cpu_host->tensor_elem_count(troi) > 0 && s->coord == CT_TF_CROP_AND_RESIZE) {
    double* rv;
    if ((st = nnop_load_d(ctx, troi, &rv))) return st;
    if (cpu_host->tensor_elem_count(troi) != 2 * na)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "roi has %zu values, expected %zu",
                       cpu_host->tensor_elem_count(troi), 2 * na);
    for (size_t i = 0; i < na; i++) {
      roi[axes[i]] = rv[i];
      roi[axes[i] + (int64_t)r] = rv[i + na];
    }
  }
  if (tsc) {
    double* sv;
    if ((st = nnop_load_d(ctx, tsc, &sv))) return st;
    if (cpu_host->tensor_elem_count(tsc) != na)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "scales has %zu values, expected %zu",
                       cpu_host->tensor_elem_count(tsc), na);
    for (size_t i = 0; i < na; i++) {
      const size_t a = (size_t)axes[i];
      if (!(sv[i] > 0) || !isfinite(sv[i]))
        return cpu_error(node, ONYX_INVALID_ARGUMENT, "scales[%zu] = %g must be positive", i,
                         sv[i]);
      scales[a] = sv[i];
      const double len = s->coord == CT_TF_CROP_AND_RESIZE ? (roi[a + r] - roi[a]) : 1.0;
      const double o = floor((double)in[a] * len * sv[i]);
      if (!(o >= 0 && o < 4e18))
        return cpu_error(node, ONYX_INVALID_ARGUMENT, "output dim %zu would be %g", a, o);
      out[a] = (int64_t)o;
    }
    return NULL;
  }
  int64_t sz[CPU_MAX_RANK];
  size_t cnt = 0;
  if ((st = cpu_read_ints(ctx, tsz, "sizes", sz, CPU_MAX_RANK, &cnt))) return st;
  if (cnt != na)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "sizes has %zu values, expected %zu", cnt, na);
  for (size_t i = 0; i < na; i++)
    if (sz[i] < 0)
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "sizes[%zu] = %lld is negative", i,
                       (long long)sz[i]);
  if (s->policy == POL_STRETCH) {
    for (size_t i = 0; i < na; i++) {
      const size_t a = (size_t)axes[i];
      out[a] = sz[i];
      scales[a] = in[a] ? (double)sz[i] / (double)in[a] : 1.0;
    }
    return NULL;
  }
  double scale = s->policy == POL_NOT_LARGER ? INFINITY : 0;
  for (size_t i = 0; i < na; i++) {
    const size_t a = (size_t)axes[i];
    const double f = in[a] ? (double)sz[i] / (double)in[a] : 1.0;
    scale = s->policy == POL_NOT_LARGER ? fmin(scale, f) : fmax(scale, f);
  }
  for (size_t i = 0; i < na; i++) {
    const size_t a = (size_t)axes[i];
    scales[a] = scale;
    const double o = floor((double)in[a] * scale + 0.5);
    if (!(o >= 0 && o < 4e18))
      return cpu_error(node, ONYX_INVALID_ARGUMENT, "output dim %zu would be %g", a, o);
    out[a] = (int64_t)o;
  }
  return NULL;
}

/* Nearest mode: a gather in the element type itself (exact for every type,
 * no conversion), rows of the last axis split over the pool. */
typedef struct NearestJob {
  size_t r, es;
  const int64_t* out;
  int64_t in_stride[CPU_MAX_RANK];
  const AxisPlan* plans; /* one per axis */
  const char* src;
  char* dst;
  unsigned char ext[16]; /* extrapolation_value in the element type */
} NearestJob;

static void copy_elem(char* d, const char* sp, size_t es) {
  switch (es) {
  case 1:
    *d = *sp;
    break;
  case 2:
    memcpy(d, sp, 2);
    break;
  case 4:
    memcpy(d, sp, 4);
    break;
  case 8:
    memcpy(d, sp, 8);
    break;
  default:
    memcpy(d, sp, es);
  }
}

static void nearest_rows(void* user, size_t begin, size_t end) {
  const NearestJob* j = user;
  const size_t r = j->r, es = j->es, last = r - 1, len = (size_t)j->out[last];
  const AxisPlan* pl = &j->plans[last];
  for (size_t row = begin; row < end; row++) {
    size_t rem = row;
    int64_t base = 0;
    bool ext = false;
    for (size_t a = last; a-- > 0;) {
      const size_t c = rem % (size_t)j->out[a];
      rem /= (size_t)j->out[a];
      base += j->plans[a].idx[c] * j->in_stride[a];
      ext = ext || j->plans[a].extrapol[c];
    }
    char* d = j->dst + row * len * es;
    for (size_t x = 0; x < len; x++, d += es) {
      if (ext || pl->extrapol[x])
        copy_elem(d, (const char*)j->ext, es);
      else
        copy_elem(d, j->src + (size_t)(base + pl->idx[x]) * es, es);
    }
  }
}

static OnyxStatus* resize_nearest(OnyxKernelContext* ctx, const ResizeState* s, const OnyxTensor* x,
                                  OnyxTensor* y, const int64_t* in, const int64_t* out, size_t r,
                                  const double* scales, const double* roi) {
  NearestJob j = {.r = r, .out = out};
  const int32_t type = cpu_host->tensor_elem_type(x);
  j.es = cpu_elem_size(type);
  if (j.es == 0 || j.es > sizeof j.ext)
    return cpu_error(s->node, ONYX_NOT_IMPLEMENTED, "element type %s is not supported",
                     cpu_elem_name(type));
  AxisPlan* plans;
  OnyxStatus* st = nnop_scratch(ctx, r * sizeof *plans, (void**)&plans);
  if (st) return st;
  int64_t stride = 1;
  for (size_t a = r; a-- > 0;) {
    if ((st = plan_axis(ctx, s, in[a], out[a], scales[a], roi[a], roi[a + r], &plans[a])))
      return st;
    j.in_stride[a] = stride;
    stride *= in[a];
  }
  j.plans = plans;
  CpuNum v = {.kind = CPU_NUM_FLT};
  v.v.f = s->extrapolation;
  memset(j.ext, 0, sizeof j.ext);
  cpu_num_store(type, j.ext, 0, v);
  j.src = cpu_host->tensor_data(x);
  j.dst = cpu_host->tensor_mutable_data(y);
  const size_t rows = cpu_dims_product(out, 0, r - 1);
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), rows, nearest_rows, &j);
  return NULL;
}

static OnyxStatus* resize_compute(void* state, OnyxKernelContext* ctx) {
  const ResizeState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const size_t r = cpu_host->tensor_rank(x);
  const int64_t* in = cpu_host->tensor_dims(x);
  if (r == 0 || r > CPU_MAX_RANK)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT, "input X has rank %zu; 1..%d supported", r,
                     CPU_MAX_RANK);
  double scales[CPU_MAX_RANK], roi[2 * CPU_MAX_RANK];
  int64_t out[CPU_MAX_RANK];
  OnyxStatus* st = resize_targets(s, ctx, in, r, scales, out, roi);
  if (st) return st;
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, out, r, &y))) return st;
  const size_t total = cpu_dims_product(out, 0, r);
  if (total == 0) return NULL;
  if (cpu_dims_product(in, 0, r) == 0)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                     "cannot resize an empty input to a non-empty output");
  if (s->mode == MODE_NEAREST) return resize_nearest(ctx, s, x, y, in, out, r, scales, roi);
  /* float32 and the halves interpolate in float, the rest in double. */
  const int32_t type = cpu_host->tensor_elem_type(x);
  const bool f32 =
      type == ONYX_ELEM_FLOAT32 || type == ONYX_ELEM_FLOAT16 || type == ONYX_ELEM_BFLOAT16;
  const size_t es = f32 ? sizeof(float) : sizeof(double);
  void* cur;
  if ((st = f32 ? nnop_load_f(ctx, x, (float**)&cur) : nnop_load_d(ctx, x, (double**)&cur)))
    return st;
  int64_t dims[CPU_MAX_RANK];
  memcpy(dims, in, r * sizeof *in);
  for (size_t a = r; a-- > 0;) {
    const bool identity = out[a] == in[a] && scales[a] == 1.0 && s->coord != CT_TF_CROP_AND_RESIZE;
    if (identity) continue;
    AxisPlan p;
    if ((st = plan_axis(ctx, s, in[a], out[a], scales[a], roi[a], roi[a + r], &p))) return st;
    int64_t nd[CPU_MAX_RANK];
    memcpy(nd, dims, r * sizeof *dims);
    nd[a] = out[a];
    void* next;
    if ((st = nnop_scratch(ctx, cpu_dims_product(nd, 0, r) * es, &next))) return st;
    if (cpu_dims_product(nd, 0, r) > 0)
      run_axis(ctx, f32, &p, cur, next, dims, r, a, out[a], s->extrapolation);
    cur = next;
    memcpy(dims, nd, r * sizeof *dims);
  }
  if (f32)
    nnop_store_f(y, cur, total);
  else
    nnop_store_d(y, cur, total);
  return NULL;
}

/* ======================================================================== */
/* GridSample                                                                */
/* ======================================================================== */

typedef enum GsPad { GS_ZEROS, GS_BORDER, GS_REFLECTION } GsPad;

typedef struct GridState {
  const OnyxNode* node;
  Mode mode;
  GsPad pad;
  bool align;
} GridState;

static OnyxStatus* grid_create_impl(OnyxEp* ep, const OnyxNode* node, void* user_data,
                                    void** state) {
  (void)ep;
  (void)user_data;
  GridState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  *state = s;
  s->node = node;
  const bool v16 = cpu_host->node_since_version(node) < 20;
  char buf[32];
  nnop_attr_str(node, "mode", v16 ? "bilinear" : "linear", buf, sizeof buf);
  if (!strcmp(buf, "bilinear") || !strcmp(buf, "linear"))
    s->mode = MODE_LINEAR;
  else if (!strcmp(buf, "bicubic") || !strcmp(buf, "cubic"))
    s->mode = MODE_CUBIC;
  else if (!strcmp(buf, "nearest"))
    s->mode = MODE_NEAREST;
  else
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "unknown mode '%s'", buf);
  nnop_attr_str(node, "padding_mode", "zeros", buf, sizeof buf);
  if (!strcmp(buf, "zeros"))
    s->pad = GS_ZEROS;
  else if (!strcmp(buf, "border"))
    s->pad = GS_BORDER;
  else if (!strcmp(buf, "reflection"))
    s->pad = GS_REFLECTION;
  else
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "unknown padding_mode '%s'", buf);
  s->align = cpu_host->node_attr_int(node, "align_corners", 0) != 0;
  return NULL;
}

static double gs_reflect(double x, double lo, double hi) {
  const double rng = hi - lo;
  if (rng <= 0) return lo;
  if (x < lo) {
    const double dx = lo - x;
    const double n = floor(dx / rng), rem = dx - n * rng;
    return fmod(n, 2) == 0 ? lo + rem : hi - rem;
  }
  if (x > hi) {
    const double dx = x - hi;
    const double n = floor(dx / rng), rem = dx - n * rng;
    return fmod(n, 2) == 0 ? hi - rem : lo + rem;
  }
  return x;
}

/* The taps of one sample point: element offsets in a channel plane and
 * their weights (up to 4^2 for cubic 2-D, 2^3 for linear 3-D). */
#define GS_MAX_TAPS 16

typedef struct GsTaps {
  size_t n;
  size_t off[GS_MAX_TAPS];
  double w[GS_MAX_TAPS];
} GsTaps;

/* Offset of the pixel at idx after padding; false: a zeros-padding pixel. */
static bool gs_offset(const GridState* s, size_t nd, const int64_t* in, const int64_t* idx,
                      size_t* out) {
  size_t off = 0;
  for (size_t k = 0; k < nd; k++) {
    int64_t i = idx[k];
    const int64_t len = in[k];
    if (s->pad == GS_ZEROS) {
      if (i < 0 || i >= len) return false;
    } else if (s->pad == GS_BORDER) {
      i = clamp_i(i, 0, len - 1);
    } else {
      const double lo = s->align ? 0 : -0.5, hi = s->align ? (double)(len - 1) : len - 0.5;
      i = clamp_i((int64_t)gs_reflect((double)i, lo, hi), 0, len - 1);
    }
    off = off * (size_t)len + (size_t)i;
  }
  *out = off;
  return true;
}

/* Taps for the point xin[k] (pixel units, dim order of `in`). */
static void gs_taps(const GridState* s, size_t nd, const int64_t* in, const double* xin,
                    GsTaps* t) {
  int64_t idx[3];
  double x[3];
  t->n = 0;
  for (size_t k = 0; k < nd; k++) {
    if (isnan(xin[k])) return;
    /* Far outside reads only padding: keep the casts below defined. */
    x[k] = fmin(fmax(xin[k], -(double)in[k] - 8), 2.0 * (double)in[k] + 8);
  }
  if (s->mode == MODE_NEAREST) {
    for (size_t k = 0; k < nd; k++)
      idx[k] = (int64_t)nearbyint(x[k]);
    if (gs_offset(s, nd, in, idx, &t->off[0])) {
      t->w[0] = 1;
      t->n = 1;
    }
    return;
  }
  const int taps = s->mode == MODE_LINEAR ? 2 : 4;
  const int64_t first = s->mode == MODE_LINEAR ? 0 : -1;
  double w[3][4];
  int64_t base[3];
  for (size_t k = 0; k < nd; k++) {
    base[k] = (int64_t)floor(x[k]) + first;
    const double f = x[k] - floor(x[k]);
    if (taps == 2) {
      w[k][0] = 1 - f;
      w[k][1] = f;
    } else {
      for (int j = 0; j < 4; j++)
        w[k][j] = cubic_kernel((double)(j - 1) - f, -0.75);
    }
  }
  size_t combos = 1;
  for (size_t k = 0; k < nd; k++)
    combos *= (size_t)taps;
  for (size_t c = 0; c < combos; c++) {
    size_t rem = c;
    double wt = 1;
    for (size_t k = nd; k-- > 0;) {
      const int j = (int)(rem % (size_t)taps);
      rem /= (size_t)taps;
      idx[k] = base[k] + j;
      wt *= w[k][j];
    }
    if (wt != 0 && gs_offset(s, nd, in, idx, &t->off[t->n])) t->w[t->n++] = wt;
  }
}

/* Output points (batch, position) of GridSample, split over the pool. */
typedef struct GridJob {
  const GridState* s;
  size_t nd;
  const int64_t* d; /* X's dims */
  size_t c, in_sz, out_sz;
  const double *xv, *gv;
  double* yv;
} GridJob;

static void grid_points(void* user, size_t begin, size_t end) {
  const GridJob* j = user;
  const GridState* s = j->s;
  const size_t nd = j->nd, c = j->c;
  for (size_t pt = begin; pt < end; pt++) {
    const size_t b = pt / j->out_sz, o = pt % j->out_sz;
    /* grid holds (x, y[, z]): the last spatial dim first. */
    const double* gp = j->gv + pt * nd;
    double coord[3];
    for (size_t k = 0; k < nd; k++) {
      const size_t dim = nd - 1 - k;
      const double len = (double)j->d[2 + dim];
      double v = s->align ? (gp[k] + 1) / 2 * (len - 1) : ((gp[k] + 1) * len - 1) / 2;
      /* Border clamps the sample point, except for cubic, whose taps are
       * clamped one by one (as ONNX Runtime and PyTorch do). */
      if (s->pad == GS_BORDER && s->mode != MODE_CUBIC)
        v = fmin(fmax(v, 0), len - 1);
      else if (s->pad == GS_REFLECTION)
        v = gs_reflect(v, s->align ? 0 : -0.5, s->align ? len - 1 : len - 0.5);
      coord[dim] = v;
    }
    GsTaps t = {0};
    if (j->in_sz) gs_taps(s, nd, j->d + 2, coord, &t);
    for (size_t ch = 0; ch < c; ch++) {
      const double* plane = j->xv + (b * c + ch) * j->in_sz;
      double acc = 0;
      for (size_t k = 0; k < t.n; k++)
        acc += t.w[k] * plane[t.off[k]];
      j->yv[(b * c + ch) * j->out_sz + o] = acc;
    }
  }
}

static OnyxStatus* grid_compute(void* state, OnyxKernelContext* ctx) {
  const GridState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* grid = cpu_host->ctx_input(ctx, 1);
  const size_t r = cpu_host->tensor_rank(x), nd = r >= 2 ? r - 2 : 0;
  const int64_t* d = cpu_host->tensor_dims(x);
  const int64_t* gd = cpu_host->tensor_dims(grid);
  if (nd < 1 || nd > 3)
    return cpu_error(s->node, ONYX_NOT_IMPLEMENTED,
                     "input X has rank %zu; 1 to 3 spatial dims are supported", r);
  if (s->mode == MODE_CUBIC && nd != 2)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT, "cubic mode needs 2 spatial dims, got %zu",
                     nd);
  if (cpu_host->tensor_rank(grid) != r || gd[0] != d[0] || gd[r - 1] != (int64_t)nd)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                     "grid must be [N, out spatial..., %zu] with N = %lld", nd, (long long)d[0]);
  int64_t od[5] = {d[0], d[1]};
  for (size_t k = 0; k < nd; k++)
    od[2 + k] = gd[1 + k];
  const size_t n = (size_t)d[0], c = (size_t)d[1];
  const size_t in_sz = cpu_dims_product(d, 2, r), out_sz = cpu_dims_product(od, 2, r);
  OnyxTensor* y;
  double *xv, *gv, *yv;
  OnyxStatus* st;
  if ((st = cpu_host->ctx_output(ctx, 0, od, r, &y)) || (st = nnop_load_d(ctx, x, &xv)) ||
      (st = nnop_load_d(ctx, grid, &gv)) ||
      (st = nnop_scratch(ctx, n * c * out_sz * sizeof(double), (void**)&yv)))
    return st;
  GridJob job = {s, nd, d, c, in_sz, out_sz, xv, gv, yv};
  cpu_host->parallel_for(cpu_host->ctx_thread_pool(ctx), n * out_sz, grid_points, &job);
  nnop_store_d(y, yv, n * c * out_sz);
  return NULL;
}

/* ======================================================================== */
/* AffineGrid                                                                */
/* ======================================================================== */

static OnyxStatus* affine_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxNode* node = state;
  const OnyxTensor* theta = cpu_host->ctx_input(ctx, 0);
  int64_t sz[5];
  size_t cnt = 0;
  OnyxStatus* st = cpu_read_ints(ctx, cpu_host->ctx_input(ctx, 1), "size", sz, 5, &cnt);
  if (st) return st;
  if (cnt != 4 && cnt != 5)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "size has %zu values; 4 (2D) or 5 (3D) expected",
                     cnt);
  const size_t nd = cnt - 2;
  const int64_t* td = cpu_host->tensor_dims(theta);
  if (cpu_host->tensor_rank(theta) != 3 || td[0] != sz[0] || td[1] != (int64_t)nd ||
      td[2] != (int64_t)nd + 1)
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "theta must be [N, %zu, %zu] with N = %lld", nd,
                     nd + 1, (long long)sz[0]);
  for (size_t i = 0; i < cnt; i++)
    if (sz[i] < 0) return cpu_error(node, ONYX_INVALID_ARGUMENT, "size[%zu] is negative", i);
  const bool align = cpu_host->node_attr_int(node, "align_corners", 0) != 0;
  int64_t od[5];
  od[0] = sz[0];
  for (size_t k = 0; k < nd; k++)
    od[1 + k] = sz[2 + k];
  od[1 + nd] = (int64_t)nd;
  const size_t pts = cpu_dims_product(sz, 2, cnt), n = (size_t)sz[0];
  OnyxTensor* y;
  double *tv, *yv;
  if ((st = cpu_host->ctx_output(ctx, 0, od, nd + 2, &y)) || (st = nnop_load_d(ctx, theta, &tv)) ||
      (st = nnop_scratch(ctx, n * pts * nd * sizeof(double), (void**)&yv)))
    return st;
  for (size_t b = 0; b < n; b++)
    for (size_t p = 0; p < pts; p++) {
      /* Base coordinates (x, y[, z]) of the point: x runs along the last dim. */
      double base[4];
      size_t rem = p;
      for (size_t k = nd; k-- > 0;) {
        const int64_t len = sz[2 + k];
        const size_t i = rem % (size_t)len;
        rem /= (size_t)len;
        double v;
        if (align)
          v = len > 1 ? -1 + 2.0 * (double)i / (double)(len - 1) : -1;
        else
          v = (2.0 * (double)i + 1) / (double)len - 1;
        base[nd - 1 - k] = v;
      }
      base[nd] = 1;
      const double* th = tv + b * nd * (nd + 1);
      for (size_t row = 0; row < nd; row++) {
        double acc = 0;
        for (size_t j = 0; j <= nd; j++)
          acc += th[row * (nd + 1) + j] * base[j];
        yv[(b * pts + p) * nd + row] = acc;
      }
    }
  nnop_store_d(y, yv, n * pts * nd);
  return NULL;
}

/* ======================================================================== */
/* RoiAlign                                                                  */
/* ======================================================================== */

typedef struct RoiState {
  const OnyxNode* node;
  bool max_mode, half_pixel;
  int64_t oh, ow, sampling;
  double scale;
} RoiState;

static OnyxStatus* roi_create_impl(OnyxEp* ep, const OnyxNode* node, void* user_data,
                                   void** state) {
  (void)ep;
  (void)user_data;
  RoiState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  *state = s;
  s->node = node;
  char buf[32];
  nnop_attr_str(node, "mode", "avg", buf, sizeof buf);
  if (strcmp(buf, "avg") && strcmp(buf, "max"))
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "unknown mode '%s'", buf);
  s->max_mode = !strcmp(buf, "max");
  const bool v10 = cpu_host->node_since_version(node) < 16;
  nnop_attr_str(node, "coordinate_transformation_mode", v10 ? "output_half_pixel" : "half_pixel",
                buf, sizeof buf);
  if (strcmp(buf, "half_pixel") && strcmp(buf, "output_half_pixel"))
    return cpu_error(node, ONYX_INVALID_ARGUMENT, "unknown coordinate_transformation_mode '%s'",
                     buf);
  s->half_pixel = !strcmp(buf, "half_pixel");
  s->oh = cpu_host->node_attr_int(node, "output_height", 1);
  s->ow = cpu_host->node_attr_int(node, "output_width", 1);
  s->sampling = cpu_host->node_attr_int(node, "sampling_ratio", 0);
  s->scale = cpu_host->node_attr_float(node, "spatial_scale", 1.0f);
  if (s->oh < 1 || s->ow < 1 || s->sampling < 0)
    return cpu_error(node, ONYX_INVALID_ARGUMENT,
                     "output_height/output_width must be >= 1 and sampling_ratio >= 0");
  return NULL;
}

static OnyxStatus* roi_compute(void* state, OnyxKernelContext* ctx) {
  const RoiState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* rois = cpu_host->ctx_input(ctx, 1);
  const OnyxTensor* bi = cpu_host->ctx_input(ctx, 2);
  if (cpu_host->tensor_rank(x) != 4)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT, "input X must be 4-D [N,C,H,W], got rank %zu",
                     cpu_host->tensor_rank(x));
  const int64_t* rd = cpu_host->tensor_dims(rois);
  if (cpu_host->tensor_rank(rois) != 2 || rd[1] != 4)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT, "rois must be [num_rois, 4]");
  const int64_t nr = rd[0];
  if (cpu_host->tensor_elem_count(bi) != (size_t)nr)
    return cpu_error(s->node, ONYX_INVALID_ARGUMENT, "batch_indices has %zu values; %lld rois",
                     cpu_host->tensor_elem_count(bi), (long long)nr);
  const int64_t* d = cpu_host->tensor_dims(x);
  const int64_t c = d[1], h = d[2], w = d[3];
  const int64_t od[4] = {nr, c, s->oh, s->ow};
  OnyxTensor* y;
  double *xv, *rv, *bv, *yv;
  OnyxStatus* st;
  if ((st = cpu_host->ctx_output(ctx, 0, od, 4, &y))) return st;
  const size_t total = cpu_host->tensor_elem_count(y);
  if ((st = nnop_load_d(ctx, x, &xv)) || (st = nnop_load_d(ctx, rois, &rv)) ||
      (st = nnop_load_d(ctx, bi, &bv)) ||
      (st = nnop_scratch(ctx, total * sizeof(double), (void**)&yv)))
    return st;
  const double off = s->half_pixel ? 0.5 : 0;
  /* sampling_ratio or the rois' size set each bin's samples: polled per bin */
  CpuStop stop = {.ctx = ctx};
  size_t polled = 0;
  for (int64_t n = 0; n < nr; n++) {
    int64_t b;
    if (!cpu_double_to_i64(bv[n], &b) || b < 0 || b >= d[0])
      return cpu_error(s->node, ONYX_INVALID_ARGUMENT, "batch_indices[%lld] = %g is out of range",
                       (long long)n, bv[n]);
    const double* roi = rv + n * 4;
    const double x0 = roi[0] * s->scale - off, y0 = roi[1] * s->scale - off;
    double rw = roi[2] * s->scale - off - x0, rh = roi[3] * s->scale - off - y0;
    if (!s->half_pixel) {
      rw = fmax(rw, 1.0);
      rh = fmax(rh, 1.0);
    }
    if (!(fabs(x0) < 1e15 && fabs(y0) < 1e15 && fabs(rw) < 1e15 && fabs(rh) < 1e15))
      return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                       "roi %lld has a non-finite or huge coordinate", (long long)n);
    const double bh = rh / (double)s->oh, bw = rw / (double)s->ow;
    const int64_t gh = s->sampling > 0 ? s->sampling : (int64_t)ceil(rh / (double)s->oh);
    const int64_t gw = s->sampling > 0 ? s->sampling : (int64_t)ceil(rw / (double)s->ow);
    if (gh > ((int64_t)1 << 12) || gw > ((int64_t)1 << 12))
      return cpu_error(s->node, ONYX_INVALID_ARGUMENT,
                       "roi %lld needs a %lld x %lld sampling grid per bin; at most 4096 x 4096",
                       (long long)n, (long long)gh, (long long)gw);
    const double count = (double)(gh * gw > 1 ? gh * gw : 1);
    for (int64_t ch = 0; ch < c; ch++) {
      const double* pl = xv + (b * c + ch) * h * w;
      for (int64_t ph = 0; ph < s->oh; ph++)
        for (int64_t pw = 0; pw < s->ow; pw++) {
          if (cpu_stop_poll(&stop, &polled, 1)) return cpu_cancelled(ctx, NULL);
          double acc = 0;
          bool first = true;
          for (int64_t iy = 0; iy < gh; iy++) {
            if (cpu_stop_poll(&stop, &polled, (size_t)gw)) return cpu_cancelled(ctx, NULL);
            for (int64_t ix = 0; ix < gw; ix++) {
              double yy = y0 + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
              double xx = x0 + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
              double v = 0;
              /* An empty feature map (h or w 0) has no pixel to sample: 0. */
              if (h > 0 && w > 0 && !(yy < -1.0 || yy > (double)h || xx < -1.0 || xx > (double)w)) {
                yy = fmax(yy, 0);
                xx = fmax(xx, 0);
                int64_t yl = (int64_t)yy, xl = (int64_t)xx, yh, xh;
                if (yl >= h - 1) {
                  yh = yl = h - 1;
                  yy = (double)yl;
                } else {
                  yh = yl + 1;
                }
                if (xl >= w - 1) {
                  xh = xl = w - 1;
                  xx = (double)xl;
                } else {
                  xh = xl + 1;
                }
                const double ly = yy - (double)yl, lx = xx - (double)xl;
                const double hy = 1 - ly, hx = 1 - lx;
                const double v1 = hy * hx * pl[yl * w + xl], v2 = hy * lx * pl[yl * w + xh];
                const double v3 = ly * hx * pl[yh * w + xl], v4 = ly * lx * pl[yh * w + xh];
                v = s->max_mode ? fmax(fmax(v1, v2), fmax(v3, v4)) : v1 + v2 + v3 + v4;
              }
              if (s->max_mode)
                acc = first ? v : fmax(acc, v);
              else
                acc += v;
              first = false;
            }
          }
          yv[((n * c + ch) * s->oh + ph) * s->ow + pw] = s->max_mode ? acc : acc / count;
        }
    }
  }
  nnop_store_d(y, yv, total);
  return NULL;
}

/* ======================================================================== */
/* Registration                                                              */
/* ======================================================================== */

/* The floating types, then every integer type (Resize, Upsample: nearest
 * copies elements exactly; linear/cubic results are rounded to nearest). */
static const int32_t RESIZE_TYPES[] = {ONYX_ELEM_FLOAT32,  ONYX_ELEM_FLOAT64, ONYX_ELEM_FLOAT16,
                                       ONYX_ELEM_BFLOAT16, ONYX_ELEM_INT8,    ONYX_ELEM_UINT8,
                                       ONYX_ELEM_INT16,    ONYX_ELEM_UINT16,  ONYX_ELEM_INT32,
                                       ONYX_ELEM_UINT32,   ONYX_ELEM_INT64,   ONYX_ELEM_UINT64};
static const OnyxTypeConstraint TC_RESIZE10[] = {{"T", RESIZE_TYPES, 12}};
static const OnyxTypeConstraint TC_RESIZE11[] = {{"T1", RESIZE_TYPES, 12},
                                                 {"T2", cpu_types_real, 4}};
static const OnyxTypeConstraint TC_GRID[] = {{"T1", cpu_types_real, 4}, {"T2", cpu_types_real, 4}};
static const OnyxTypeConstraint TC_AFFINE[] = {{"T1", cpu_types_real, 4},
                                               {"T2", cpu_types_int64, 1}};
static const OnyxTypeConstraint TC_ROI[] = {{"T1", cpu_types_real, 4}, {"T2", cpu_types_int64, 1}};
static const int UPSAMPLE = 1;

#define SPEC(op, since, end, tc, cr, comp, ud)                                                     \
  { op, since, end, tc, CPU_ARRAY_LEN(tc), cr, comp, cpu_free_state, (void*)(ud) }

/* A create that fails frees the (flat) state it had already handed out. */
static OnyxStatus* free_on_error(OnyxStatus* st, void** state) {
  if (st && *state) {
    free(*state);
    *state = NULL;
  }
  return st;
}

static OnyxStatus* resize_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  *state = NULL;
  return free_on_error(resize_create_impl(ep, node, user_data, state), state);
}

static OnyxStatus* grid_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  *state = NULL;
  return free_on_error(grid_create_impl(ep, node, user_data, state), state);
}

static OnyxStatus* roi_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  *state = NULL;
  return free_on_error(roi_create_impl(ep, node, user_data, state), state);
}

OnyxStatus* cpu_register_resize(OnyxKernelRegistry* r) {
  const int32_t latest = ONYX_OPSET_LATEST;
  const CpuKernelSpec specs[] = {
      SPEC("Upsample", 7, 9, TC_RESIZE10, resize_create, resize_compute, &UPSAMPLE),
      SPEC("Resize", 10, 10, TC_RESIZE10, resize_create, resize_compute, NULL),
      SPEC("Resize", 11, latest, TC_RESIZE11, resize_create, resize_compute, NULL),
      SPEC("GridSample", 16, latest, TC_GRID, grid_create, grid_compute, NULL),
      SPEC("RoiAlign", 10, latest, TC_ROI, roi_create, roi_compute, NULL),
      {"AffineGrid", 20, latest, TC_AFFINE, CPU_ARRAY_LEN(TC_AFFINE), nnop_node_create,
       affine_compute, NULL, NULL},
  };
  return cpu_register_specs(r, specs, CPU_ARRAY_LEN(specs));
}
