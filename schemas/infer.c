/* infer.c — type and shape inference of the elementwise, matrix,
 * convolution/pooling and normalization ops, and the default inference. */
#include <string.h>

#include "infer_util.h"

/* --- Elementwise -------------------------------------------------------------------- */

OnyxStatus* ox_infer_unary(OxNode* n) {
  return ox_out_like_input(n, 0, 0);
}

OnyxStatus* ox_infer_softmax(OxNode* n) {
  OxDims d;
  ox_in_dims(n, 0, &d);
  int64_t axis = ox_attr_i(n, "axis", n->since_version >= 13 ? -1 : 1), norm;
  if (d.rank >= 0 && !ox_norm_axis(axis, d.rank > 0 ? d.rank : 1, &norm))
    return ox_node_err(n, "attribute 'axis' is %lld, out of range for rank %d", (long long)axis,
                       (int)d.rank);
  return ox_out_set(n, 0, ox_in_type(n, 0), &d);
}

/* Broadcast of every present input's shape. */
static OnyxStatus* bcast_inputs(OxNode* n, size_t first, OxDims* out) {
  out->rank = 0;
  for (size_t i = first; i < n->n_inputs; i++) {
    if (!n->inputs[i]) continue;
    OxDims d;
    ox_in_dims(n, i, &d);
    OX_TRY(ox_bcast_into(n, out, &d));
  }
  return NULL;
}

OnyxStatus* ox_infer_bcast(OxNode* n) {
  OxDims d;
  OX_TRY(bcast_inputs(n, 0, &d));
  return ox_out_set(n, 0, ox_in_type(n, 0), &d);
}

OnyxStatus* ox_infer_compare(OxNode* n) {
  OxDims d;
  OX_TRY(bcast_inputs(n, 0, &d));
  return ox_out_set(n, 0, ONYX_ELEM_BOOL, &d);
}

OnyxStatus* ox_infer_where(OxNode* n) {
  OxDims d;
  OX_TRY(bcast_inputs(n, 0, &d));
  return ox_out_set(n, 0, ox_in_type(n, 1), &d);
}

/* Opsets 1-6: B is broadcast onto A (attribute broadcast/axis): C has A's shape. */
OnyxStatus* ox_infer_bcast_legacy(OxNode* n) {
  return ox_out_like_input(n, 0, 0);
}

OnyxStatus* ox_infer_compare_legacy(OxNode* n) {
  OxDims d;
  ox_in_dims(n, 0, &d);
  return ox_out_set(n, 0, ONYX_ELEM_BOOL, &d);
}

/* --- MatMul and Gemm ----------------------------------------------------------------- */

/* Two known dims that must agree (-1: unknown agrees with anything). */
static bool dims_agree(int64_t a, int64_t b) {
  return a < 0 || b < 0 || a == b;
}

OnyxStatus* ox_infer_matmul(OxNode* n) {
  OxDims a, b, out;
  ox_in_dims(n, 0, &a);
  ox_in_dims(n, 1, &b);
  OnyxElemType t = ox_in_type(n, 0);
  if (a.rank < 0 || b.rank < 0) return ox_out_set(n, 0, t, NULL);
  if (a.rank == 0 || b.rank == 0)
    return ox_node_err(n, "MatMul does not take scalars (input %s is rank 0)",
                       a.rank == 0 ? "A" : "B");
  /* numpy.matmul: a 1-D A is [1, k] and a 1-D B is [k, 1]; the added dims go away. */
  int64_t k_a = a.d[a.rank - 1], k_b = b.rank == 1 ? b.d[0] : b.d[b.rank - 2];
  if (!dims_agree(k_a, k_b))
    return ox_node_err(n, "inner dimensions differ: A has %lld columns, B has %lld rows",
                       (long long)k_a, (long long)k_b);
  OxDims ba = {.rank = a.rank > 2 ? a.rank - 2 : 0}, bb = {.rank = b.rank > 2 ? b.rank - 2 : 0};
  memcpy(ba.d, a.d, (size_t)ba.rank * sizeof a.d[0]);
  memcpy(bb.d, b.d, (size_t)bb.rank * sizeof b.d[0]);
  OX_TRY(ox_bcast_into(n, &ba, &bb));
  out = ba;
  if (a.rank >= 2) out.d[out.rank++] = a.d[a.rank - 2];
  if (b.rank >= 2) out.d[out.rank++] = b.d[b.rank - 1];
  if (out.rank > OX_INFER_MAX_RANK) return ox_out_set(n, 0, t, NULL);
  return ox_out_set(n, 0, t, &out);
}

OnyxStatus* ox_infer_gemm(OxNode* n) {
  OxDims a, b, c;
  ox_in_dims(n, 0, &a);
  ox_in_dims(n, 1, &b);
  ox_in_dims(n, 2, &c);
  OnyxElemType t = ox_in_type(n, 0);
  if ((a.rank >= 0 && a.rank != 2) || (b.rank >= 0 && b.rank != 2))
    return ox_node_err(n, "A and B must be 2-D (ranks %d and %d)", (int)a.rank, (int)b.rank);
  bool ta = ox_attr_i(n, "transA", 0) != 0, tb = ox_attr_i(n, "transB", 0) != 0;
  int64_t m = a.rank == 2 ? a.d[ta ? 1 : 0] : -1, ka = a.rank == 2 ? a.d[ta ? 0 : 1] : -1;
  int64_t kb = b.rank == 2 ? b.d[tb ? 1 : 0] : -1, nn = b.rank == 2 ? b.d[tb ? 0 : 1] : -1;
  if (!dims_agree(ka, kb))
    return ox_node_err(n, "inner dimensions differ: op(A) is [%lld,%lld], op(B) is [%lld,%lld]",
                       (long long)m, (long long)ka, (long long)kb, (long long)nn);
  OxDims y = {.rank = 2, .d = {m, nn}};
  if (c.rank > 2) return ox_node_err(n, "C must have rank <= 2, has %d", (int)c.rank);
  /* C broadcasts unidirectionally onto [M, N]. */
  for (int32_t k = 0; k < c.rank; k++) {
    int64_t want = y.d[2 - c.rank + k], have = c.d[k];
    if (have != 1 && !dims_agree(have, want))
      return ox_node_err(n, "C of dimension %lld cannot broadcast to %lld", (long long)have,
                         (long long)want);
  }
  return ox_out_set(n, 0, t, &y);
}

/* --- Convolution and pooling ----------------------------------------------------------- */

typedef struct Window {
  size_t n; /* spatial dims */
  const int64_t *kernel, *strides, *dilations, *pads;
  const char* auto_pad;
  bool ceil_mode;
  int64_t extent[OX_INFER_MAX_RANK]; /* dilations[i] * (kernel[i] - 1) + 1 */
} Window;

/* Checks an ints attribute's length (0: absent, fine). */
static OnyxStatus* check_len(const OxNode* n, const char* name, size_t have, size_t want) {
  if (have && have != want)
    return ox_node_err(n, "attribute '%s' has %zu values, expected %zu", name, have, want);
  return NULL;
}

static bool auto_pad_same(const Window* w) {
  return !strcmp(w->auto_pad, "SAME_UPPER") || !strcmp(w->auto_pad, "SAME_LOWER");
}

/* Reads and validates the window attributes (ONNX spec: kernel_shape,
 * strides and dilations >= 1, pads >= 0) and computes each dilated kernel
 * extent with overflow checks, whether or not the input's dims are known. */
static OnyxStatus* read_window(const OxNode* n, Window* w, const int64_t* kernel, size_t nk) {
  size_t ns, nd, np;
  w->kernel = kernel;
  w->strides = ox_attr_ints(n, "strides", &ns);
  w->dilations = ox_attr_ints(n, "dilations", &nd);
  w->pads = ox_attr_ints(n, "pads", &np);
  w->auto_pad = ox_attr_s(n, "auto_pad", "NOTSET");
  w->ceil_mode = ox_attr_i(n, "ceil_mode", 0) != 0;
  if (w->n > OX_INFER_MAX_RANK)
    return ox_node_err(n, "%zu spatial dims are more than %d", w->n, OX_INFER_MAX_RANK);
  OX_TRY(check_len(n, "kernel_shape", nk, w->n));
  OX_TRY(check_len(n, "strides", ns, w->n));
  OX_TRY(check_len(n, "dilations", nd, w->n));
  OX_TRY(check_len(n, "pads", np, 2 * w->n));
  if (!ns) w->strides = NULL;
  if (!nd) w->dilations = NULL;
  if (!np) w->pads = NULL;
  static const char* const pads_modes[] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};
  bool known = false;
  for (size_t i = 0; i < OX_ARRAY_LEN(pads_modes); i++)
    known |= !strcmp(w->auto_pad, pads_modes[i]);
  if (!known) return ox_node_err(n, "attribute 'auto_pad' is '%s'", w->auto_pad);
  for (size_t i = 0; i < w->n; i++) {
    if (w->kernel[i] < 1)
      return ox_node_err(n, "attribute 'kernel_shape' is %lld on spatial axis %zu, must be >= 1",
                         (long long)w->kernel[i], i);
    if (w->strides && w->strides[i] < 1)
      return ox_node_err(n, "attribute 'strides' is %lld on spatial axis %zu, must be >= 1",
                         (long long)w->strides[i], i);
    if (w->dilations && w->dilations[i] < 1)
      return ox_node_err(n, "attribute 'dilations' is %lld on spatial axis %zu, must be >= 1",
                         (long long)w->dilations[i], i);
    if (w->pads && (w->pads[i] < 0 || w->pads[i + w->n] < 0))
      return ox_node_err(n, "attribute 'pads' is negative (%lld, %lld) on spatial axis %zu",
                         (long long)w->pads[i], (long long)w->pads[i + w->n], i);
    int64_t d = w->dilations ? w->dilations[i] : 1, sum;
    if (!ox_dilated_extent(w->kernel[i], d, &w->extent[i]))
      return ox_node_err(n,
                         "attribute 'dilations' (%lld) with kernel size %lld overflows the "
                         "kernel extent on spatial axis %zu",
                         (long long)d, (long long)w->kernel[i], i);
    if (w->pads && !ox_add_i64(w->pads[i], w->pads[i + w->n], &sum))
      return ox_node_err(n, "attribute 'pads' (%lld + %lld) overflows on spatial axis %zu",
                         (long long)w->pads[i], (long long)w->pads[i + w->n], i);
  }
  return NULL;
}

/* Output extent of spatial dim i of input extent `in` (-1 unknown). */
static OnyxStatus* window_out(const OxNode* n, const Window* w, size_t i, int64_t in,
                              int64_t* out) {
  *out = ONYX_DIM_UNKNOWN;
  if (in < 0) return NULL;
  int64_t s = w->strides ? w->strides[i] : 1, ek = w->extent[i];
  if (auto_pad_same(w)) {
    /* ceil(in / s) outputs; the padding that needs, (o - 1) * s + ek - in,
     * must be representable too, or the kernel could not run. */
    int64_t o = ox_ceil_div_i64(in, s), need;
    if (!ox_mul_i64(o > 0 ? o - 1 : 0, s, &need) || !ox_add_i64(need, ek, &need))
      return ox_node_err(n,
                         "attributes 'strides' (%lld) and 'dilations' with auto_pad %s overflow "
                         "the padded extent on spatial axis %zu",
                         (long long)s, w->auto_pad, i);
    *out = o;
    return NULL;
  }
  int64_t pb = 0, pe = 0, padded;
  if (strcmp(w->auto_pad, "VALID") && w->pads) {
    pb = w->pads[i];
    pe = w->pads[i + w->n];
  }
  if (!ox_add3_i64(in, pb, pe, &padded))
    return ox_node_err(n,
                       "attribute 'pads' (%lld, %lld) overflows input extent %lld on spatial "
                       "axis %zu",
                       (long long)pb, (long long)pe, (long long)in, i);
  if (padded < ek)
    return ox_node_err(n,
                       "kernel extent %lld exceeds the padded input extent %lld on spatial "
                       "axis %zu",
                       (long long)ek, (long long)padded, i);
  int64_t span = padded - ek; /* both >= 0: no overflow */
  int64_t o = (w->ceil_mode ? ox_ceil_div_i64(span, s) : span / s) + 1;
  /* ceil_mode: a last window that would start inside the end padding is
   * dropped. A start past INT64_MAX is past in + pb too. */
  int64_t start;
  if (w->ceil_mode && (!ox_mul_i64(o - 1, s, &start) || start >= in + pb)) o--;
  *out = o;
  return NULL;
}

/* [N, C_out, spatial outputs...] from X and the window. */
static OnyxStatus* window_shape(const OxNode* n, const OxDims* x, const Window* w, int64_t c_out,
                                OxDims* y) {
  y->rank = x->rank;
  y->d[0] = x->d[0];
  y->d[1] = c_out;
  for (size_t i = 0; i < w->n; i++)
    OX_TRY(window_out(n, w, i, x->d[i + 2], &y->d[i + 2]));
  return NULL;
}

/* X and W of a convolution, with the rank both agree on (-1: unknown). */
static OnyxStatus* conv_inputs(const OxNode* n, OxDims* x, OxDims* wt, size_t nk, int32_t* rank) {
  ox_in_dims(n, 0, x);
  ox_in_dims(n, 1, wt);
  int32_t r = x->rank >= 0 ? x->rank : wt->rank;
  if (r < 0 && nk) r = nk + 2 > OX_INFER_MAX_RANK ? -1 : (int32_t)nk + 2;
  *rank = r;
  if (r < 0) return NULL;
  if (r < 3) return ox_node_err(n, "X must have rank >= 3, has %d", (int)r);
  if ((x->rank >= 0 && x->rank != r) || (wt->rank >= 0 && wt->rank != r))
    return ox_node_err(n, "X (rank %d) and W (rank %d) must have the same rank", (int)x->rank,
                       (int)wt->rank);
  if (nk && nk != (size_t)r - 2)
    return ox_node_err(n, "attribute 'kernel_shape' has %zu values for an input of rank %d", nk,
                       (int)r);
  if (x->rank < 0) {
    x->rank = r;
    for (int32_t i = 0; i < r; i++)
      x->d[i] = ONYX_DIM_UNKNOWN;
  }
  if (wt->rank < 0) {
    wt->rank = r;
    for (int32_t i = 0; i < r; i++)
      wt->d[i] = ONYX_DIM_UNKNOWN;
  }
  return NULL;
}

OnyxStatus* ox_infer_conv(OxNode* n) {
  OxDims x, wt, y;
  OnyxElemType t = ox_in_type(n, 0);
  size_t nk;
  const int64_t* kernel = ox_attr_ints(n, "kernel_shape", &nk);
  int32_t rank;
  OX_TRY(conv_inputs(n, &x, &wt, nk, &rank));
  if (rank < 0) return ox_out_set(n, 0, t, NULL);
  int64_t group = ox_attr_i(n, "group", 1), cin;
  if (group < 1) return ox_node_err(n, "attribute 'group' is %lld", (long long)group);
  if (x.d[1] >= 0 && wt.d[1] >= 0 && (!ox_mul_i64(wt.d[1], group, &cin) || x.d[1] != cin))
    return ox_node_err(n, "X has %lld channels but W expects %lld x attribute 'group' %lld",
                       (long long)x.d[1], (long long)wt.d[1], (long long)group);
  Window w = {.n = (size_t)rank - 2};
  int64_t kbuf[OX_INFER_MAX_RANK];
  bool kernel_known = true;
  if (!nk) { /* kernel from W's spatial dims (1 where unknown, to check the rest) */
    for (size_t i = 0; i < w.n; i++) {
      kernel_known &= wt.d[i + 2] >= 0;
      kbuf[i] = wt.d[i + 2] >= 0 ? wt.d[i + 2] : 1;
    }
    kernel = kbuf;
    nk = w.n;
  }
  OX_TRY(read_window(n, &w, kernel, nk));
  if (!kernel_known) { /* unknown kernel: only N and M are known */
    y.rank = rank;
    y.d[0] = x.d[0];
    y.d[1] = wt.d[0];
    for (int32_t k = 2; k < rank; k++)
      y.d[k] = ONYX_DIM_UNKNOWN;
    return ox_out_set(n, 0, t, &y);
  }
  OX_TRY(window_shape(n, &x, &w, wt.d[0], &y));
  return ox_out_set(n, 0, t, &y);
}

/* ConvTranspose: X [N, C, D...], W [C, M/group, k...] -> [N, M, O...] with
 * O = stride * (D - 1) + output_padding + dilation * (k - 1) + 1 - pads
 * (SAME: D * stride), or the spatial part of output_shape when given. */
OnyxStatus* ox_infer_conv_transpose(OxNode* n) {
  OxDims x, wt, y;
  OnyxElemType t = ox_in_type(n, 0);
  size_t nk, nop, nos;
  const int64_t* kernel = ox_attr_ints(n, "kernel_shape", &nk);
  int32_t rank;
  OX_TRY(conv_inputs(n, &x, &wt, nk, &rank));
  if (rank < 0) return ox_out_set(n, 0, t, NULL);
  int64_t group = ox_attr_i(n, "group", 1);
  if (group < 1) return ox_node_err(n, "attribute 'group' is %lld", (long long)group);
  if (x.d[1] >= 0 && wt.d[0] >= 0 && x.d[1] != wt.d[0])
    return ox_node_err(n, "X has %lld channels but W has %lld input channels", (long long)x.d[1],
                       (long long)wt.d[0]);
  Window w = {.n = (size_t)rank - 2};
  int64_t kbuf[OX_INFER_MAX_RANK];
  bool kernel_known = true;
  if (!nk) {
    for (size_t i = 0; i < w.n; i++) {
      kernel_known &= wt.d[i + 2] >= 0;
      kbuf[i] = wt.d[i + 2] >= 0 ? wt.d[i + 2] : 1;
    }
    kernel = kbuf;
    nk = w.n;
  }
  OX_TRY(read_window(n, &w, kernel, nk));
  const int64_t* op = ox_attr_ints(n, "output_padding", &nop);
  const int64_t* os = ox_attr_ints(n, "output_shape", &nos);
  OX_TRY(check_len(n, "output_padding", nop, w.n));
  if (nos && nos != w.n && nos != w.n + 2)
    return ox_node_err(n, "attribute 'output_shape' has %zu values, expected %zu", nos, w.n);
  for (size_t i = 0; i < w.n; i++) {
    int64_t s = w.strides ? w.strides[i] : 1, d = w.dilations ? w.dilations[i] : 1;
    int64_t p = nop ? op[i] : 0;
    /* ONNX: output_padding must be less than either the stride or the dilation. */
    if (p < 0 || (p >= s && p >= d))
      return ox_node_err(n,
                         "attribute 'output_padding' is %lld on spatial axis %zu, must be >= 0 "
                         "and less than the stride (%lld) or the dilation (%lld)",
                         (long long)p, i, (long long)s, (long long)d);
    if (nos && os[nos - w.n + i] < 0)
      return ox_node_err(n, "attribute 'output_shape' is %lld on spatial axis %zu",
                         (long long)os[nos - w.n + i], i);
  }
  y.rank = rank;
  y.d[0] = x.d[0];
  y.d[1] = ONYX_DIM_UNKNOWN;
  if (wt.d[1] >= 0 && !ox_mul_i64(wt.d[1], group, &y.d[1]))
    return ox_node_err(n, "W's %lld output channels x attribute 'group' %lld overflows",
                       (long long)wt.d[1], (long long)group);
  for (size_t i = 0; i < w.n; i++) {
    int64_t in = x.d[i + 2], s = w.strides ? w.strides[i] : 1, o;
    y.d[i + 2] = ONYX_DIM_UNKNOWN;
    if (nos) {
      y.d[i + 2] = os[nos - w.n + i];
      continue;
    }
    if (in < 0 || !kernel_known) continue;
    if (auto_pad_same(&w)) {
      if (!ox_mul_i64(in, s, &o))
        return ox_node_err(n,
                           "attribute 'strides' (%lld) x input extent %lld overflows on "
                           "spatial axis %zu",
                           (long long)s, (long long)in, i);
    } else {
      int64_t pads = 0, grown;
      if (strcmp(w.auto_pad, "VALID") && w.pads)
        pads = w.pads[i] + w.pads[i + w.n]; /* read_window checked it */
      if (!ox_mul_i64(in > 0 ? in - 1 : 0, s, &grown) ||
          !ox_add3_i64(grown, nop ? op[i] : 0, w.extent[i], &grown))
        return ox_node_err(n,
                           "attribute 'strides' (%lld) with 'dilations' and 'output_padding' "
                           "overflows the output extent on spatial axis %zu",
                           (long long)s, i);
      o = grown - pads; /* grown >= 1 and pads >= 0: no overflow */
      if (o < 0)
        return ox_node_err(n,
                           "attribute 'pads' (%lld in all) exceeds the output extent %lld on "
                           "spatial axis %zu",
                           (long long)pads, (long long)grown, i);
    }
    y.d[i + 2] = o;
  }
  return ox_out_set(n, 0, t, &y);
}

OnyxStatus* ox_infer_pool(OxNode* n) {
  OxDims x, y;
  ox_in_dims(n, 0, &x);
  OnyxElemType t = ox_in_type(n, 0);
  size_t nk;
  const int64_t* kernel = ox_attr_ints(n, "kernel_shape", &nk);
  if (!kernel) return ox_node_err(n, "attribute 'kernel_shape' is missing");
  if (x.rank >= 0 && x.rank != (int32_t)nk + 2)
    return ox_node_err(n, "attribute 'kernel_shape' has %zu values for an input of rank %d", nk,
                       (int)x.rank);
  Window w = {.n = nk};
  OX_TRY(read_window(n, &w, kernel, nk));
  /* As ONNX Runtime: AveragePool's pads must be less than the kernel, or a
   * window could lie wholly in the padding with nothing to average. (A
   * MaxPool window in the padding is defined here, and kept.) */
  if (w.pads && !strcmp(w.auto_pad, "NOTSET") && !strcmp(n->op_type, "AveragePool"))
    for (size_t i = 0; i < w.n; i++)
      if (w.pads[i] >= w.kernel[i] || w.pads[i + w.n] >= w.kernel[i])
        return ox_node_err(n,
                           "attribute 'pads' (%lld, %lld) on spatial axis %zu must be less than "
                           "the kernel size %lld",
                           (long long)w.pads[i], (long long)w.pads[i + w.n], i,
                           (long long)w.kernel[i]);
  if (x.rank < 0) {
    OX_TRY(ox_out_set(n, 0, t, NULL));
    return ox_out_set(n, 1, ONYX_ELEM_INT64, NULL);
  }
  OX_TRY(window_shape(n, &x, &w, x.d[1], &y));
  OX_TRY(ox_out_set(n, 0, t, &y));
  return ox_out_set(n, 1, ONYX_ELEM_INT64, &y); /* MaxPool's Indices */
}

OnyxStatus* ox_infer_global_pool(OxNode* n) {
  OxDims x;
  ox_in_dims(n, 0, &x);
  if (x.rank >= 0 && x.rank < 2)
    return ox_node_err(n, "X must have rank >= 2, has %d", (int)x.rank);
  for (int32_t i = 2; i < x.rank; i++)
    x.d[i] = 1;
  return ox_out_set(n, 0, ox_in_type(n, 0), &x);
}

/* --- Normalization and dropout ------------------------------------------------------------ */

OnyxStatus* ox_infer_batchnorm(OxNode* n) {
  OxDims x, c = {.rank = 1, .d = {ONYX_DIM_UNKNOWN}};
  ox_in_dims(n, 0, &x);
  if (x.rank >= 0 && x.rank < 2)
    return ox_node_err(n, "X must have rank >= 2, has %d", (int)x.rank);
  if (x.rank >= 2) c.d[0] = x.d[1];
  OX_TRY(ox_out_set(n, 0, ox_in_type(n, 0), &x));
  /* From 14 the running statistics have the type of input_mean (U / T2). */
  OnyxElemType st = n->since_version >= 14 ? ox_in_type(n, 3) : ox_in_type(n, 0);
  for (size_t i = 1; i < n->n_outputs; i++)
    OX_TRY(ox_out_set(n, i, st, &c));
  return NULL;
}

OnyxStatus* ox_infer_layernorm(OxNode* n) {
  OxDims x;
  ox_in_dims(n, 0, &x);
  OX_TRY(ox_out_set(n, 0, ox_in_type(n, 0), &x));
  int64_t stash = ox_attr_i(n, "stash_type", 1);
  if (stash < 1 || stash >= ONYX_ELEM_TYPE_COUNT)
    return ox_node_err(n, "attribute 'stash_type' is %lld, not an element type", (long long)stash);
  if (x.rank < 0) {
    OX_TRY(ox_out_set(n, 1, (OnyxElemType)stash, NULL));
    return ox_out_set(n, 2, (OnyxElemType)stash, NULL);
  }
  int64_t axis = ox_attr_i(n, "axis", -1), a;
  if (!ox_norm_axis(axis, x.rank, &a))
    return ox_node_err(n, "attribute 'axis' is %lld, out of range for rank %d", (long long)axis,
                       (int)x.rank);
  /* Mean and InvStdDev keep the leading dims and are 1 over the normalized ones. */
  for (int32_t i = (int32_t)a; i < x.rank; i++)
    x.d[i] = 1;
  OX_TRY(ox_out_set(n, 1, (OnyxElemType)stash, &x));
  return ox_out_set(n, 2, (OnyxElemType)stash, &x);
}

OnyxStatus* ox_infer_dropout(OxNode* n) {
  OX_TRY(ox_out_like_input(n, 0, 0));
  OxDims x;
  ox_in_dims(n, 0, &x);
  /* The mask was of type T until opset 10, bool since. */
  OnyxElemType mt = n->since_version >= 10 ? ONYX_ELEM_BOOL : ox_in_type(n, 0);
  return ox_out_set(n, 1, mt, &x);
}

/* --- Default ----------------------------------------------------------------------------- */

OnyxStatus* ox_infer_default(const OxSchema* s, OxNode* n) {
  for (size_t o = 0; o < n->n_outputs; o++) {
    if (!n->outputs[o]) continue;
    const char* tc = ox_schema_output_tc(s, o);
    OnyxElemType t = ONYX_ELEM_UNDEFINED;
    if (!tc && s->n_outputs) { /* a fixed type, e.g. "tensor(int64)" */
      const OxFormal* f = o < s->n_outputs ? &s->outputs[o] : &s->outputs[s->n_outputs - 1];
      if (f->tc && !strncmp(f->tc, "tensor(", 7)) {
        char name[32];
        size_t len = strlen(f->tc) - 8;
        if (len < sizeof name) {
          memcpy(name, f->tc + 7, len);
          name[len] = 0;
          t = ox_onnx_type_from_name(name);
        }
      }
    }
    for (size_t i = 0; tc && i < n->n_inputs && t == ONYX_ELEM_UNDEFINED; i++) {
      const char* itc = ox_schema_input_tc(s, i);
      if (n->inputs[i] && itc && !strcmp(itc, tc)) t = n->inputs[i]->type;
    }
    if (t == ONYX_ELEM_UNDEFINED && tc) { /* a constraint of exactly one type */
      uint64_t m = ox_schema_tc_allowed(s, tc);
      if (m && !(m & (m - 1))) t = (OnyxElemType)__builtin_ctzll(m);
    }
    OX_TRY(ox_out_set(n, o, t, NULL));
  }
  return NULL;
}
