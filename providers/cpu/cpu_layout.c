/* cpu_layout.c — the CPU provider's layout and tensor-construction kernels:
 * Trilu, CumSum, CumProd, Pad, Tile, Range, EyeLike, Size, ReverseSequence,
 * DepthToSpace, SpaceToDepth and CenterCropPad; and the attribute reader
 * they share with Einsum and Det (cpu_einsum.c).
 *
 * Arithmetic goes through CpuNum (floats in double, integers in 64 bits with
 * wrapping); data movement through memcpy / cpu_copy_strided. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_layout.h"

enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP };

void cpu_ops_free(void* p) {
  OpsState* s = p;
  if (s) free(s->eq);
  free(s);
}

static const OnyxTensor* opt_input(const OnyxKernelContext* ctx, size_t i) {
  return i < cpu_host->ctx_input_count(ctx) ? cpu_host->ctx_input(ctx, i) : NULL;
}

OnyxStatus* cpu_ops_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  OpsState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->version = (int)(intptr_t)user;
  const char* op = cpu_host->node_op_type(node);
  size_t len = 0;
  const char* mode = cpu_host->node_attr_string(node, "mode", &len);
  if (!strcmp(op, "Trilu")) {
    s->a = cpu_host->node_attr_int(node, "upper", 1);
  } else if (!strcmp(op, "CumSum") || !strcmp(op, "CumProd")) {
    s->a = cpu_host->node_attr_int(node, "exclusive", 0);
    s->b = cpu_host->node_attr_int(node, "reverse", 0);
    s->product = !strcmp(op, "CumProd");
  } else if (!strcmp(op, "Pad")) {
    if (!mode || !strcmp(mode, "constant"))
      s->mode = PAD_CONSTANT;
    else if (!strcmp(mode, "reflect"))
      s->mode = PAD_REFLECT;
    else if (!strcmp(mode, "edge"))
      s->mode = PAD_EDGE;
    else if (!strcmp(mode, "wrap"))
      s->mode = PAD_WRAP;
    else {
      free(s);
      return cpu_error(node, ONYX_INVALID_MODEL, "unknown pad mode '%s'", mode);
    }
    if (s->version < 11) {
      const char* name = s->version == 1 ? "paddings" : "pads";
      s->has_ints = cpu_host->node_attr_type(node, name) == ONYX_ATTR_INTS;
      s->ints = cpu_host->node_attr_ints(node, name, &s->n_ints);
      s->value = cpu_host->node_attr_float(node, "value", 0.0f);
    }
  } else if (!strcmp(op, "DepthToSpace") || !strcmp(op, "SpaceToDepth")) {
    s->a = cpu_host->node_attr_int(node, "blocksize", 0);
    s->mode = mode && !strcmp(mode, "CRD");
    if (s->a <= 0 || s->a > (1 << 20)) {
      long long b = (long long)s->a;
      free(s);
      return cpu_error(node, ONYX_INVALID_MODEL, "blocksize %lld is invalid", b);
    }
  } else if (!strcmp(op, "ReverseSequence")) {
    s->a = cpu_host->node_attr_int(node, "batch_axis", 1);
    s->b = cpu_host->node_attr_int(node, "time_axis", 0);
  } else if (!strcmp(op, "EyeLike")) {
    s->a = cpu_host->node_attr_int(node, "k", 0);
  } else if (!strcmp(op, "CenterCropPad")) {
    s->has_ints = cpu_host->node_attr_type(node, "axes") == ONYX_ATTR_INTS;
    s->ints = cpu_host->node_attr_ints(node, "axes", &s->n_ints);
  } else if (!strcmp(op, "Einsum")) {
    const char* eq = cpu_host->node_attr_string(node, "equation", &len);
    s->eq = eq ? malloc(len + 1) : NULL;
    if (!s->eq) {
      free(s);
      return cpu_error(node, eq ? ONYX_OUT_OF_MEMORY : ONYX_INVALID_MODEL,
                       eq ? "out of memory" : "attribute 'equation' is required");
    }
    memcpy(s->eq, eq, len);
    s->eq[len] = '\0';
  }
  *out = s;
  return NULL;
}

/* ========================================================================= */
/* Trilu                                                                      */
/* ========================================================================= */

static OnyxStatus* trilu_compute(void* state, OnyxKernelContext* ctx) {
  const OpsState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* kt = opt_input(ctx, 1);
  size_t rank = cpu_host->tensor_rank(x);
  if (rank < 2) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input must have rank >= 2");
  int64_t k = 0;
  OnyxStatus* st;
  if (kt) {
    size_t n;
    if ((st = cpu_read_ints(ctx, kt, "k", &k, 1, &n))) return st;
    if (n != 1) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "k must hold one value");
  }
  OnyxTensor* y;
  const int64_t* d = cpu_host->tensor_dims(x);
  if ((st = cpu_host->ctx_output(ctx, 0, d, rank, &y))) return st;
  size_t count = cpu_host->tensor_elem_count(x);
  if ((st = cpu_copy_elems(y, 0, x, 0, count))) return st;
  int64_t rows = d[rank - 2], cols = d[rank - 1];
  size_t mats = cpu_dims_product(d, 0, rank - 2);
  size_t es = cpu_elem_size(cpu_host->tensor_elem_type(x));
  char* out = cpu_host->tensor_mutable_data(y);
  for (size_t m = 0; m < mats; m++)
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < cols; j++) {
        bool keep = s->a ? j - i >= k : j - i <= k;
        if (!keep)
          memset(out + ((m * (size_t)rows + (size_t)i) * (size_t)cols + (size_t)j) * es, 0, es);
      }
  return NULL;
}

/* ========================================================================= */
/* CumSum / CumProd                                                           */
/* ========================================================================= */

static OnyxStatus* cum_compute(void* state, OnyxKernelContext* ctx) {
  const OpsState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  size_t rank = cpu_host->tensor_rank(x), axis, n;
  int64_t ax;
  OnyxStatus* st = cpu_read_ints(ctx, cpu_host->ctx_input(ctx, 1), "axis", &ax, 1, &n);
  if (st) return st;
  if (n != 1) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis must hold one value");
  if (rank == 0 || !cpu_norm_axis(ax, rank, false, &axis))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld out of range for rank %zu",
                         (long long)ax, rank);
  const int64_t* d = cpu_host->tensor_dims(x);
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, d, rank, &y))) return st;
  int32_t type = cpu_host->tensor_elem_type(x);
  size_t outer = cpu_dims_product(d, 0, axis), inner = cpu_dims_product(d, axis + 1, rank);
  size_t len = (size_t)d[axis];
  const void* p = cpu_host->tensor_data(x);
  void* q = cpu_host->tensor_mutable_data(y);
  for (size_t o = 0; o < outer; o++)
    for (size_t i = 0; i < inner; i++) {
      CpuNum acc = {.kind = CPU_NUM_SINT};
      bool first = true;
      for (size_t jj = 0; jj < len; jj++) {
        size_t j = s->b ? len - 1 - jj : jj, at = (o * len + j) * inner + i;
        CpuNum v;
        if (!cpu_num_load(type, p, at, &v))
          return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "type %s is not supported",
                               cpu_elem_name(type));
        if (first) {
          acc.kind = v.kind;
          if (v.kind == CPU_NUM_FLT)
            acc.v.f = s->product ? 1.0 : 0.0;
          else
            acc.v.u = s->product ? 1 : 0;
          first = false;
        }
        CpuNum next = acc;
        if (v.kind == CPU_NUM_FLT)
          next.v.f = s->product ? acc.v.f * v.v.f : acc.v.f + v.v.f;
        else
          next.v.u = s->product ? acc.v.u * v.v.u : acc.v.u + v.v.u;
        cpu_num_store(type, q, at, s->a ? acc : next);
        acc = next;
      }
    }
  return NULL;
}

/* ========================================================================= */
/* Pad                                                                        */
/* ========================================================================= */

/* Maps r (a coordinate relative to the kept window of n elements) into
 * [0, n) by the mode; false for constant mode outside the window. */
static bool pad_map(int mode, int64_t r, int64_t n, int64_t* out) {
  if (r >= 0 && r < n) {
    *out = r;
    return true;
  }
  switch (mode) {
  case PAD_EDGE:
    *out = r < 0 ? 0 : n - 1;
    return true;
  case PAD_WRAP:
    *out = ((r % n) + n) % n;
    return true;
  case PAD_REFLECT: {
    if (n == 1) {
      *out = 0;
      return true;
    }
    int64_t period = 2 * (n - 1), m = ((r % period) + period) % period;
    *out = m < n ? m : period - m;
    return true;
  }
  default:
    return false;
  }
}

/* Where Pad writes: the output and input tensors (strings are deep-copied
 * through cpu_copy_elems), their data, and the fill element. */
typedef struct PadIo {
  OnyxKernelContext* ctx; /* polled in long edge / reflect / wrap pads */
  OnyxTensor* y;
  const OnyxTensor* x;
  const OnyxTensor* cv; /* the constant_value input with one element, or NULL */
  char* out;
  const char* src;
  const char* fill;
  size_t es;
  bool str;       /* string elements */
  bool zero_fill; /* the fill element is all zero bytes */
} PadIo;

/* n input elements from element s to output element d. */
static OnyxStatus* pad_copy(const PadIo* p, size_t d, size_t s, size_t n) {
  if (p->str) return cpu_copy_elems(p->y, d, p->x, s, n);
  cpu_memcpy(p->out + d * p->es, p->src + s * p->es, n * p->es);
  return NULL;
}

/* n fill elements from output element d: memset for a zero fill, else the
 * element once and then doubling copies of what is written. Strings take
 * the constant_value (or stay as the output was made, empty). */
static OnyxStatus* pad_fill(const PadIo* p, size_t d, size_t n) {
  if (!n) return NULL;
  if (p->str) {
    for (size_t i = 0; i < n && p->cv; i++) {
      OnyxStatus* st = cpu_copy_elems(p->y, d + i, p->cv, 0, 1);
      if (st) return st;
    }
    return NULL;
  }
  char* dst = p->out + d * p->es;
  if (p->zero_fill) {
    memset(dst, 0, n * p->es);
    return NULL;
  }
  memcpy(dst, p->fill, p->es);
  for (size_t done = 1; done < n;) {
    size_t c = done < n - done ? done : n - done;
    memcpy(dst + done * p->es, dst, c * p->es);
    done += c;
  }
  return NULL;
}

/* One output row along the innermost axis, whose outer coordinates map to
 * input element `base` (the row's first input element): `lead` padded
 * elements, the `keep` input elements from `crop` on as one run, then the
 * rest of the `w` elements padded. Constant mode fills the pads by runs;
 * edge, reflect and wrap map each padded element into the kept window. */
static OnyxStatus* pad_row(const PadIo* p, int mode, size_t d, size_t base, int64_t crop,
                           int64_t lead, int64_t keep, int64_t w) {
  OnyxStatus* st;
  const int64_t tail = lead + keep;
  if (mode == PAD_CONSTANT) {
    if ((st = pad_fill(p, d, (size_t)lead))) return st;
  } else {
    for (int64_t j = 0; j < lead; j++) {
      if (j && !(j % (int64_t)CPU_STOP_INTERVAL) && cpu_should_stop(p->ctx))
        return cpu_cancelled(p->ctx, "Pad");
      int64_t m = 0;
      pad_map(mode, j - lead, keep, &m);
      if ((st = pad_copy(p, d + (size_t)j, base + (size_t)(crop + m), 1))) return st;
    }
  }
  if ((st = pad_copy(p, d + (size_t)lead, base + (size_t)crop, (size_t)keep))) return st;
  if (mode == PAD_CONSTANT) return pad_fill(p, d + (size_t)tail, (size_t)(w - tail));
  for (int64_t j = tail; j < w; j++) {
    if (j > tail && !((j - tail) % (int64_t)CPU_STOP_INTERVAL) && cpu_should_stop(p->ctx))
      return cpu_cancelled(p->ctx, "Pad");
    int64_t m = 0;
    pad_map(mode, j - lead, keep, &m);
    if ((st = pad_copy(p, d + (size_t)j, base + (size_t)(crop + m), 1))) return st;
  }
  return NULL;
}

static OnyxStatus* pad_compute(void* state, OnyxKernelContext* ctx) {
  const OpsState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  size_t rank = cpu_host->tensor_rank(x);
  OnyxStatus* st = cpu_check_rank(ctx, rank);
  if (st) return st;
  const int64_t* in = cpu_host->tensor_dims(x);
  int64_t begin[CPU_MAX_RANK] = {0}, end[CPU_MAX_RANK] = {0};
  const int64_t* pads = s->ints;
  size_t np = s->n_ints;
  if (s->version >= 11) {
    int64_t* buf;
    if ((st = cpu_read_ints_scratch(ctx, cpu_host->ctx_input(ctx, 1), "pads", &buf, &np)))
      return st;
    pads = buf;
  }
  const OnyxTensor* axes_t = s->version >= 18 ? opt_input(ctx, 3) : NULL;
  int64_t* axes = NULL;
  size_t na = rank;
  if (axes_t && (st = cpu_read_ints_scratch(ctx, axes_t, "axes", &axes, &na))) return st;
  if (np != 2 * na)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "pads has %zu values for %zu axes", np, na);
  bool seen[CPU_MAX_RANK] = {false};
  for (size_t i = 0; i < na; i++) {
    size_t d = i;
    if (axes && (!cpu_norm_axis(axes[i], rank, false, &d) || seen[d]))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld is out of range or repeated",
                           (long long)axes[i]);
    seen[d] = true;
    begin[d] = pads[i];
    end[d] = pads[na + i];
  }
  int64_t dims[CPU_MAX_RANK], crop0[CPU_MAX_RANK], keep[CPU_MAX_RANK], lead[CPU_MAX_RANK];
  for (size_t d = 0; d < rank; d++) {
    int64_t crop1 = 0;
    crop0[d] = 0;
    if ((begin[d] < 0 && !cpu_sub_i64(0, begin[d], &crop0[d])) ||
        (end[d] < 0 && !cpu_sub_i64(0, end[d], &crop1)) ||
        !cpu_sub_i64(in[d], crop0[d], &keep[d]) || !cpu_sub_i64(keep[d], crop1, &keep[d]) ||
        !cpu_add3_i64(in[d], begin[d], end[d], &dims[d]))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "integer overflow: axis %zu of size %lld with pads %lld and %lld", d,
                           (long long)in[d], (long long)begin[d], (long long)end[d]);
    lead[d] = begin[d] > 0 ? begin[d] : 0;
    if (keep[d] < 0 || dims[d] < 0)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "pads crop axis %zu below zero", d);
    if (s->mode != PAD_CONSTANT && keep[d] == 0 && dims[d] > 0)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "cannot pad an empty axis %zu in a non-constant mode", d);
  }
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, dims, rank, &y))) return st;
  size_t count = cpu_host->tensor_elem_count(y);
  int32_t type = cpu_host->tensor_elem_type(x);
  size_t es = cpu_elem_size(type);
  char fill[16] = {0};
  const OnyxTensor* cv = s->version >= 11 ? opt_input(ctx, 2) : NULL;
  if (cv && cpu_host->tensor_elem_count(cv) > 0 && type != ONYX_ELEM_STRING)
    memcpy(fill, cpu_host->tensor_data(cv), es <= sizeof fill ? es : sizeof fill);
  else if (s->version < 11)
    cpu_num_store(type, fill, 0, (CpuNum){.kind = CPU_NUM_FLT, .v.f = s->value});
  int64_t in_strides[CPU_MAX_RANK], pos[CPU_MAX_RANK] = {0};
  cpu_dense_strides(in, rank, in_strides);
  bool zero_fill = true;
  for (size_t b = 0; b < es && b < sizeof fill; b++)
    zero_fill = zero_fill && !fill[b];
  const bool has_cv = cv && cpu_host->tensor_elem_count(cv) > 0;
  const PadIo io = {ctx,
                    y,
                    x,
                    has_cv ? cv : NULL,
                    cpu_host->tensor_mutable_data(y),
                    cpu_host->tensor_data(x),
                    fill,
                    es,
                    type == ONYX_ELEM_STRING,
                    zero_fill};
  if (count == 0) return NULL;
  /* The output as rows of its innermost axis (a scalar: one row of one
   * element); the outer coordinates of a row map into the input by the
   * mode, and in constant mode a row outside the window is all fill. */
  const size_t outer = rank ? rank - 1 : 0;
  const int64_t w = rank ? dims[outer] : 1;
  const int64_t w_crop = rank ? crop0[outer] : 0, w_lead = rank ? lead[outer] : 0;
  const int64_t w_keep = rank ? keep[outer] : 1;
  const size_t rows = count / (size_t)w;
  size_t since_poll = 0;
  for (size_t r = 0; r < rows; r++) {
    /* the output size comes from pads: poll every CPU_STOP_INTERVAL elements */
    if (since_poll >= CPU_STOP_INTERVAL) {
      since_poll = 0;
      if (cpu_should_stop(ctx)) return cpu_cancelled(ctx, "Pad");
    }
    since_poll += (size_t)w;
    int64_t off = 0;
    bool inside = true;
    for (size_t d = 0; d < outer && inside; d++) {
      int64_t m = 0;
      inside = pad_map(s->mode, pos[d] - lead[d], keep[d], &m);
      off += (crop0[d] + m) * in_strides[d];
    }
    const size_t at = r * (size_t)w;
    st = inside ? pad_row(&io, s->mode, at, (size_t)off, w_crop, w_lead, w_keep, w)
                : pad_fill(&io, at, (size_t)w);
    if (st) return st;
    for (size_t d = outer; d-- > 0;) {
      if (++pos[d] < dims[d]) break;
      pos[d] = 0;
    }
  }
  return NULL;
}

/* ========================================================================= */
/* Tile                                                                       */
/* ========================================================================= */

static OnyxStatus* scalar_num(const OnyxKernelContext* ctx, size_t i, const char* what, CpuNum* v);

/* Tile-1: `tiles` copies along `axis`, both given as one number each. */
static OnyxStatus* tile1_repeats(const OnyxKernelContext* ctx, size_t rank, int64_t* rep,
                                 size_t* n) {
  CpuNum t, a;
  OnyxStatus* st = scalar_num(ctx, 1, "tiles", &t);
  if (!st) st = scalar_num(ctx, 2, "axis", &a);
  if (st) return st;
  double tv = cpu_num_as_double(t), av = cpu_num_as_double(a);
  size_t axis;
  if (!(av > -1e9 && av < 1e9) || !cpu_norm_axis((int64_t)av, rank, false, &axis))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %g out of range for rank %zu", av, rank);
  if (!(tv >= 0 && tv < 1e12))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "tiles %g is not a count", tv);
  for (size_t d = 0; d < rank; d++)
    rep[d] = d == axis ? (int64_t)tv : 1;
  *n = rank;
  return NULL;
}

static OnyxStatus* tile_compute(void* state, OnyxKernelContext* ctx) {
  const OpsState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  size_t rank = cpu_host->tensor_rank(x), n;
  if (2 * rank > CPU_MAX_RANK)
    return cpu_ctx_error(ctx, ONYX_NOT_IMPLEMENTED, "rank %zu exceeds %d", rank, CPU_MAX_RANK / 2);
  int64_t rep[CPU_MAX_RANK];
  OnyxStatus* st = s->version == 1 ? tile1_repeats(ctx, rank, rep, &n)
                                   : cpu_read_ints(ctx, cpu_host->ctx_input(ctx, 1), "repeats", rep,
                                                   CPU_MAX_RANK, &n);
  if (st) return st;
  if (n != rank)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "repeats has %zu values for rank %zu", n,
                         rank);
  const int64_t* in = cpu_host->tensor_dims(x);
  int64_t dims[CPU_MAX_RANK], in_strides[CPU_MAX_RANK], vd[CPU_MAX_RANK], vs[CPU_MAX_RANK];
  cpu_dense_strides(in, rank, in_strides);
  for (size_t d = 0; d < rank; d++) {
    if (rep[d] < 0) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "repeats[%zu] is negative", d);
    if (!cpu_mul_i64(in[d], rep[d], &dims[d]))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "integer overflow: dim %zu of size %lld times repeats[%zu] = %lld", d,
                           (long long)in[d], d, (long long)rep[d]);
    vd[2 * d] = rep[d]; /* the output seen as [r0, d0, r1, d1, ...] */
    vs[2 * d] = 0;
    vd[2 * d + 1] = in[d];
    vs[2 * d + 1] = in_strides[d];
  }
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, dims, rank, &y))) return st;
  return cpu_copy_strided_ctx(ctx, y, x, 2 * rank, vd, vs, 0);
}

/* ========================================================================= */
/* Range / EyeLike / Size                                                     */
/* ========================================================================= */

static OnyxStatus* scalar_num(const OnyxKernelContext* ctx, size_t i, const char* what, CpuNum* v) {
  const OnyxTensor* t = cpu_host->ctx_input(ctx, i);
  if (cpu_host->tensor_elem_count(t) != 1 ||
      !cpu_num_load(cpu_host->tensor_elem_type(t), cpu_host->tensor_data(t), 0, v))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "'%s' must be one number", what);
  return NULL;
}

static OnyxStatus* range_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  CpuNum a, l, dl;
  OnyxStatus* st = scalar_num(ctx, 0, "start", &a);
  if (!st) st = scalar_num(ctx, 1, "limit", &l);
  if (!st) st = scalar_num(ctx, 2, "delta", &dl);
  if (st) return st;
  int32_t type = cpu_host->tensor_elem_type(cpu_host->ctx_input(ctx, 0));
  int64_t n;
  if (a.kind == CPU_NUM_FLT) {
    if (dl.v.f == 0 || isnan(dl.v.f))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "delta must be nonzero");
    double c = ceil((l.v.f - a.v.f) / dl.v.f);
    if (!(c < 1e12)) c = c > 0 ? 1e12 : 0; /* NaN: empty */
    if (!(c > 0) || !cpu_double_to_i64(c, &n)) n = 0;
  } else {
    if (dl.v.i == 0) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "delta must be nonzero");
    /* ceil((limit - start) / delta) exactly: the span of two int64 needs 65
     * bits. */
    const __int128 span = (__int128)l.v.i - (__int128)a.v.i, d = dl.v.i;
    __int128 c = span / d;
    if (span % d != 0 && (span < 0) == (d < 0)) c++;
    n = c > 0 ? (c > ((__int128)1 << 40) ? (int64_t)1 << 40 : (int64_t)c) : 0;
  }
  if (n > ((int64_t)1 << 32))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "range of %lld elements is too large",
                         (long long)n);
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, &n, 1, &y))) return st;
  void* out = cpu_host->tensor_mutable_data(y);
  /* per chunk of CPU_STOP_INTERVAL elements: the count comes from the inputs */
  for (int64_t i0 = 0; i0 < n; i0 += (int64_t)CPU_STOP_INTERVAL) {
    if (i0 && cpu_should_stop(ctx)) return cpu_cancelled(ctx, "Range");
    const int64_t i1 = n - i0 < (int64_t)CPU_STOP_INTERVAL ? n : i0 + (int64_t)CPU_STOP_INTERVAL;
    for (int64_t i = i0; i < i1; i++) {
      CpuNum v = a;
      if (a.kind == CPU_NUM_FLT)
        v.v.f = a.v.f + (double)i * dl.v.f;
      else
        v.v.i = (int64_t)((uint64_t)a.v.i + (uint64_t)i * (uint64_t)dl.v.i); /* no UB */
      cpu_num_store(type, out, (size_t)i, v);
    }
  }
  return NULL;
}

static OnyxStatus* eyelike_compute(void* state, OnyxKernelContext* ctx) {
  const OpsState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  if (cpu_host->tensor_rank(x) != 2)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input must be 2-D");
  const int64_t* d = cpu_host->tensor_dims(x);
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, d, 2, &y);
  if (st) return st;
  int32_t type = cpu_host->tensor_elem_type(y);
  size_t es = cpu_elem_size(type);
  void* out = cpu_host->tensor_mutable_data(y);
  const size_t count = cpu_host->tensor_elem_count(y);
  if (count == 0) return NULL;
  memset(out, 0, count * es);
  /* Row i has its one at column i + k: rows [max(0, -k), min(d0, d1 - k)),
   * none when k is beyond either side (any k, without overflow). */
  const int64_t k = s->a;
  if (k >= d[1] || k <= -d[0]) return NULL;
  const int64_t i0 = k < 0 ? -k : 0, i1 = d[1] - k < d[0] ? d[1] - k : d[0];
  for (int64_t i = i0; i < i1; i++)
    cpu_num_store(type, out, (size_t)(i * d[1] + i + k), (CpuNum){.kind = CPU_NUM_UINT, .v.u = 1});
  return NULL;
}

static OnyxStatus* size_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, NULL, 0, &y);
  if (st) return st;
  *(int64_t*)cpu_host->tensor_mutable_data(y) =
      (int64_t)cpu_host->tensor_elem_count(cpu_host->ctx_input(ctx, 0));
  return NULL;
}

/* ========================================================================= */
/* ReverseSequence                                                            */
/* ========================================================================= */

static OnyxStatus* revseq_compute(void* state, OnyxKernelContext* ctx) {
  const OpsState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  const OnyxTensor* lt = cpu_host->ctx_input(ctx, 1);
  size_t rank = cpu_host->tensor_rank(x), ba, ta;
  OnyxStatus* st = cpu_check_rank(ctx, rank);
  if (st) return st;
  if (rank < 2 || !cpu_norm_axis(s->a, rank, false, &ba) ||
      !cpu_norm_axis(s->b, rank, false, &ta) || ba == ta || ba > 1 || ta > 1)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "batch_axis/time_axis invalid for rank %zu",
                         rank);
  const int64_t* d = cpu_host->tensor_dims(x);
  int64_t* lens;
  size_t nl;
  if ((st = cpu_read_ints_scratch(ctx, lt, "sequence_lens", &lens, &nl))) return st;
  if ((int64_t)nl != d[ba])
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "sequence_lens has %zu values for batch %lld",
                         nl, (long long)d[ba]);
  for (size_t i = 0; i < nl; i++)
    if (lens[i] < 0 || lens[i] > d[ta])
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "sequence_lens[%zu] = %lld is outside [0, %lld]", i, (long long)lens[i],
                           (long long)d[ta]);
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, d, rank, &y))) return st;
  size_t inner = cpu_dims_product(d, 2, rank);
  int64_t strides[CPU_MAX_RANK];
  cpu_dense_strides(d, rank, strides);
  for (int64_t b = 0; b < d[ba]; b++)
    for (int64_t t = 0; t < d[ta]; t++) {
      int64_t src_t = t < lens[b] ? lens[b] - 1 - t : t;
      size_t dst = (size_t)(b * strides[ba] + t * strides[ta]);
      size_t src = (size_t)(b * strides[ba] + src_t * strides[ta]);
      if (inner && (st = cpu_copy_elems(y, dst, x, src, inner))) return st;
    }
  return NULL;
}

/* ========================================================================= */
/* DepthToSpace / SpaceToDepth                                                */
/* ========================================================================= */

/* Copies x seen as a 6-D tensor `t` through permutation `perm` into y. */
static OnyxStatus* permute6(OnyxKernelContext* ctx, OnyxTensor* y, const OnyxTensor* x,
                            const int64_t* t, const int* perm) {
  int64_t st6[6], dims[6], strides[6];
  cpu_dense_strides(t, 6, st6);
  for (int i = 0; i < 6; i++) {
    dims[i] = t[perm[i]];
    strides[i] = st6[perm[i]];
  }
  return cpu_copy_strided_ctx(ctx, y, x, 6, dims, strides, 0);
}

static OnyxStatus* d2s_compute(void* state, OnyxKernelContext* ctx) {
  const OpsState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  if (cpu_host->tensor_rank(x) != 4)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input must be 4-D");
  const int64_t* d = cpu_host->tensor_dims(x);
  int64_t b = s->a, c = d[1] / (b * b);
  if (d[1] % (b * b))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "channels %lld not divisible by blocksize^2",
                         (long long)d[1]);
  int64_t dims[4] = {d[0], c, 0, 0};
  if (!cpu_mul_i64(d[2], b, &dims[2]) || !cpu_mul_i64(d[3], b, &dims[3]))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "integer overflow: spatial dims [%lld, %lld] times blocksize %lld",
                         (long long)d[2], (long long)d[3], (long long)b);
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, dims, 4, &y);
  if (st) return st;
  if (s->mode) { /* CRD */
    int64_t t[6] = {d[0], c, b, b, d[2], d[3]};
    static const int perm[6] = {0, 1, 4, 2, 5, 3};
    return permute6(ctx, y, x, t, perm);
  }
  int64_t t[6] = {d[0], b, b, c, d[2], d[3]};
  static const int perm[6] = {0, 3, 4, 1, 5, 2};
  return permute6(ctx, y, x, t, perm);
}

static OnyxStatus* s2d_compute(void* state, OnyxKernelContext* ctx) {
  const OpsState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  if (cpu_host->tensor_rank(x) != 4)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input must be 4-D");
  const int64_t* d = cpu_host->tensor_dims(x);
  int64_t b = s->a;
  if (d[2] % b || d[3] % b)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "spatial dims not divisible by blocksize");
  int64_t dims[4] = {d[0], 0, d[2] / b, d[3] / b};
  if (!cpu_mul_i64(d[1], b * b, &dims[1]))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "integer overflow: %lld channels times blocksize %lld squared",
                         (long long)d[1], (long long)b);
  OnyxTensor* y;
  OnyxStatus* st = cpu_host->ctx_output(ctx, 0, dims, 4, &y);
  if (st) return st;
  int64_t t[6] = {d[0], d[1], d[2] / b, b, d[3] / b, b};
  static const int perm[6] = {0, 3, 5, 1, 2, 4};
  return permute6(ctx, y, x, t, perm);
}

/* ========================================================================= */
/* CenterCropPad                                                              */
/* ========================================================================= */

static OnyxStatus* ccp_compute(void* state, OnyxKernelContext* ctx) {
  const OpsState* s = state;
  const OnyxTensor* x = cpu_host->ctx_input(ctx, 0);
  size_t rank = cpu_host->tensor_rank(x), n;
  OnyxStatus* st = cpu_check_rank(ctx, rank);
  if (st) return st;
  int64_t* shape;
  if ((st = cpu_read_ints_scratch(ctx, cpu_host->ctx_input(ctx, 1), "shape", &shape, &n)))
    return st;
  size_t na = s->has_ints ? s->n_ints : rank;
  if (n != na)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "shape has %zu values for %zu axes", n, na);
  const int64_t* in = cpu_host->tensor_dims(x);
  int64_t dims[CPU_MAX_RANK], shift[CPU_MAX_RANK] = {0};
  memcpy(dims, in, rank * sizeof *dims);
  bool seen[CPU_MAX_RANK] = {false};
  for (size_t i = 0; i < na; i++) {
    size_t d = i;
    if (s->has_ints && (!cpu_norm_axis(s->ints[i], rank, false, &d) || seen[d]))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "axis %lld is out of range or repeated",
                           (long long)s->ints[i]);
    seen[d] = true;
    if (shape[i] < 0) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "shape[%zu] is negative", i);
    dims[d] = shape[i];
    /* crop: start at (in - out) / 2; pad: the input starts at (out - in) / 2 */
    shift[d] = in[d] >= shape[i] ? (in[d] - shape[i]) / 2 : -((shape[i] - in[d]) / 2);
  }
  OnyxTensor* y;
  if ((st = cpu_host->ctx_output(ctx, 0, dims, rank, &y))) return st;
  size_t count = cpu_host->tensor_elem_count(y);
  size_t es = cpu_elem_size(cpu_host->tensor_elem_type(x));
  bool str = cpu_host->tensor_elem_type(x) == ONYX_ELEM_STRING;
  int64_t in_strides[CPU_MAX_RANK], pos[CPU_MAX_RANK] = {0};
  cpu_dense_strides(in, rank, in_strides);
  char* out = cpu_host->tensor_mutable_data(y);
  const char* src = cpu_host->tensor_data(x);
  for (size_t i = 0; i < count; i++) {
    int64_t off = 0;
    bool inside = true;
    for (size_t d = 0; d < rank; d++) {
      int64_t c = pos[d] + shift[d];
      inside &= c >= 0 && c < in[d];
      if (inside) off += c * in_strides[d];
    }
    if (str) {
      if (inside && (st = cpu_copy_elems(y, i, x, (size_t)off, 1))) return st;
    } else if (inside) {
      memcpy(out + i * es, src + off * (int64_t)es, es);
    } else {
      memset(out + i * es, 0, es);
    }
    for (size_t d = rank; d-- > 0;) {
      if (++pos[d] < dims[d]) break;
      pos[d] = 0;
    }
  }
  return NULL;
}

/* ========================================================================= */
/* Registration                                                               */
/* ========================================================================= */

#define V(n) ((void*)(intptr_t)(n))

/* Fixed-size types whose zero is all-zero bytes (no strings). */
static const int32_t fixed_types[] = {
    ONYX_ELEM_FLOAT32,        ONYX_ELEM_FLOAT64,    ONYX_ELEM_FLOAT16,       ONYX_ELEM_BFLOAT16,
    ONYX_ELEM_INT8,           ONYX_ELEM_INT16,      ONYX_ELEM_INT32,         ONYX_ELEM_INT64,
    ONYX_ELEM_UINT8,          ONYX_ELEM_UINT16,     ONYX_ELEM_UINT32,        ONYX_ELEM_UINT64,
    ONYX_ELEM_BOOL,           ONYX_ELEM_COMPLEX64,  ONYX_ELEM_COMPLEX128,    ONYX_ELEM_FLOAT8E4M3FN,
    ONYX_ELEM_FLOAT8E4M3FNUZ, ONYX_ELEM_FLOAT8E5M2, ONYX_ELEM_FLOAT8E5M2FNUZ};
static const int32_t range_types[] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64, ONYX_ELEM_INT16,
                                      ONYX_ELEM_INT32,   ONYX_ELEM_INT64,   ONYX_ELEM_FLOAT16,
                                      ONYX_ELEM_BFLOAT16};

static const OnyxTypeConstraint tc_fixed[] = {{"T", fixed_types, CPU_ARRAY_LEN(fixed_types)}};
static const OnyxTypeConstraint tc_any[] = {
    {"T", cpu_types_copyable, CPU_ARRAY_LEN(cpu_types_copyable)}};
static const OnyxTypeConstraint tc_cum[] = {
    {"T", cpu_types_numeric, CPU_ARRAY_LEN(cpu_types_numeric)}, {"T2", cpu_types_index, 2}};
static const OnyxTypeConstraint tc_pad[] = {
    {"T", cpu_types_copyable, CPU_ARRAY_LEN(cpu_types_copyable)}, {"Tind", cpu_types_index, 2}};
static const OnyxTypeConstraint tc_range[] = {{"T", range_types, CPU_ARRAY_LEN(range_types)}};
static const OnyxTypeConstraint tc_eyelike[] = {
    {"T1", cpu_types_numeric_bool, CPU_ARRAY_LEN(cpu_types_numeric_bool)},
    {"T2", cpu_types_numeric_bool, CPU_ARRAY_LEN(cpu_types_numeric_bool)}};
static const OnyxTypeConstraint tc_size[] = {
    {"T", cpu_types_copyable, CPU_ARRAY_LEN(cpu_types_copyable)}, {"T1", cpu_types_int64, 1}};
static const OnyxTypeConstraint tc_ccp[] = {
    {"T", cpu_types_copyable, CPU_ARRAY_LEN(cpu_types_copyable)}, {"Tind", cpu_types_index, 2}};

static const CpuKernelSpec layout_specs[] = {
    {"Trilu", 14, ONYX_OPSET_LATEST, tc_fixed, 1, cpu_ops_create, trilu_compute, cpu_ops_free,
     NULL},
    {"CumSum", 11, ONYX_OPSET_LATEST, tc_cum, 2, cpu_ops_create, cum_compute, cpu_ops_free, NULL},
    {"CumProd", 26, ONYX_OPSET_LATEST, tc_cum, 2, cpu_ops_create, cum_compute, cpu_ops_free, NULL},
    {"Pad", 1, 1, tc_any, 1, cpu_ops_create, pad_compute, cpu_ops_free, V(1)},
    {"Pad", 2, 10, tc_any, 1, cpu_ops_create, pad_compute, cpu_ops_free, V(2)},
    {"Pad", 11, 17, tc_any, 1, cpu_ops_create, pad_compute, cpu_ops_free, V(11)},
    {"Pad", 18, ONYX_OPSET_LATEST, tc_pad, 2, cpu_ops_create, pad_compute, cpu_ops_free, V(18)},
    {"Tile", 1, 5, tc_any, 1, cpu_ops_create, tile_compute, cpu_ops_free, V(1)},
    {"Tile", 6, ONYX_OPSET_LATEST, tc_any, 1, cpu_ops_create, tile_compute, cpu_ops_free, V(6)},
    {"Range", 11, ONYX_OPSET_LATEST, tc_range, 1, cpu_ops_create, range_compute, cpu_ops_free,
     NULL},
    {"EyeLike", 9, ONYX_OPSET_LATEST, tc_eyelike, 2, cpu_ops_create, eyelike_compute, cpu_ops_free,
     NULL},
    {"Size", 1, ONYX_OPSET_LATEST, tc_size, 2, cpu_ops_create, size_compute, cpu_ops_free, NULL},
    {"ReverseSequence", 10, ONYX_OPSET_LATEST, tc_any, 1, cpu_ops_create, revseq_compute,
     cpu_ops_free, NULL},
    {"DepthToSpace", 1, ONYX_OPSET_LATEST, tc_any, 1, cpu_ops_create, d2s_compute, cpu_ops_free,
     NULL},
    {"SpaceToDepth", 1, ONYX_OPSET_LATEST, tc_any, 1, cpu_ops_create, s2d_compute, cpu_ops_free,
     NULL},
    {"CenterCropPad", 18, ONYX_OPSET_LATEST, tc_ccp, 2, cpu_ops_create, ccp_compute, cpu_ops_free,
     NULL},
};

OnyxStatus* cpu_register_layout(OnyxKernelRegistry* r) {
  return cpu_register_specs(r, layout_specs, CPU_ARRAY_LEN(layout_specs));
}
