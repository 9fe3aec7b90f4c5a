/* schemas_tensor.c — the tensor family: rows newer than the generated table (or that
 * replace generated rows) and inference functions for generated rows.
 *
 * Rows (from the ONNX Changelog): the reductions of opset 18 (axes as an
 * input) and ReduceMax/ReduceMin 20 (bool); Pad 18 (axes input) and 19
 * (wrap mode); CenterCropPad 18; TensorScatter 24; CumProd 26; Range 27
 * (float16/bfloat16). Overrides: EyeLike's output type comes from `dtype`. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infer_util.h"
#include "schema_internal.h"

#define T_(x)  OX_T(ONYX_ELEM_##x)
#define M_F    (T_(FLOAT16) | T_(FLOAT32) | T_(FLOAT64))
#define M_SINT (T_(INT8) | T_(INT16) | T_(INT32) | T_(INT64))
#define M_UINT (T_(UINT8) | T_(UINT16) | T_(UINT32) | T_(UINT64))
#define M_NUM7 (T_(UINT32) | T_(UINT64) | T_(INT32) | T_(INT64) | M_F | T_(BFLOAT16))
#define M_ALL4                                                                                     \
  (M_F | M_SINT | M_UINT | T_(BFLOAT16) | T_(STRING) | T_(BOOL) | T_(COMPLEX64) | T_(COMPLEX128))
#define M_F8       (T_(FLOAT8E4M3FN) | T_(FLOAT8E4M3FNUZ) | T_(FLOAT8E5M2) | T_(FLOAT8E5M2FNUZ))
#define M_ALL      (M_ALL4 | M_F8 | T_(UINT4) | T_(INT4) | T_(FLOAT4E2M1) | T_(FLOAT8E8M0))
#define M_MAXMIN18 (M_NUM7 | T_(INT8) | T_(UINT8))
#define M_IND      (T_(INT32) | T_(INT64))

#define REQ(n, tc)                                                                                 \
  { n, tc, ONYX_PARAM_SINGLE, 1 }
#define OPT(n, tc)                                                                                 \
  { n, tc, ONYX_PARAM_OPTIONAL, 1 }
#define I64 "tensor(int64)"
#define AI(n, d)                                                                                   \
  { .name = n, .type = ONYX_ATTR_INT, .has_default = true, .def_i = (d) }
#define AS(n, d)                                                                                   \
  { .name = n, .type = ONYX_ATTR_STRING, .has_default = true, .def_s = (d) }
#define AO(n, t)                                                                                   \
  { .name = n, .type = ONYX_ATTR_##t }
#define L(a) a, (uint8_t)OX_ARRAY_LEN(a)
#define NONE NULL, 0
#define S(op, ver, ...)                                                                            \
  { "", op, ver, __VA_ARGS__, NULL, NULL, true }

/* --- Reductions (opset 18: axes input) ----------------------------------------- */
static const OxFormal f_red_in[] = {REQ("data", "T"), OPT("axes", I64)};
static const OxFormal f_red_out[] = {REQ("reduced", "T")};
static const OxAttrSpec a_red[] = {AI("keepdims", 1), AI("noop_with_empty_axes", 0)};
static const OxTypeConstr t_num7[] = {{"T", M_NUM7}};
static const OxTypeConstr t_maxmin18[] = {{"T", M_MAXMIN18}};
static const OxTypeConstr t_maxmin20[] = {{"T", M_MAXMIN18 | T_(BOOL)}};

/* --- Pad ----------------------------------------------------------------------------- */
static const OxFormal f_pad18_in[] = {REQ("data", "T"), REQ("pads", I64),
                                      OPT("constant_value", "T"), OPT("axes", "Tind")};
static const OxFormal f_pad_out[] = {REQ("output", "T")};
static const OxTypeConstr t_pad[] = {{"T", M_ALL4}, {"Tind", M_IND}};
static const OxAttrSpec a_pad[] = {AS("mode", "constant")};

/* --- CenterCropPad -------------------------------------------------------------------- */
static const OxFormal f_ccp_in[] = {REQ("input_data", "T"), REQ("shape", "Tind")};
static const OxFormal f_ccp_out[] = {REQ("output_data", "T")};
static const OxTypeConstr t_ccp[] = {{"T", M_ALL4}, {"Tind", M_IND}};
static const OxAttrSpec a_ccp[] = {AO("axes", INTS)};

/* --- TensorScatter ----------------------------------------------------------------- */
static const OxFormal f_ts_in[] = {REQ("past_cache", "T"), REQ("update", "T"),
                                   OPT("write_indices", I64)};
static const OxFormal f_ts_out[] = {REQ("present_cache", "T")};
static const OxTypeConstr t_ts[] = {{"T", M_ALL}};
static const OxAttrSpec a_ts[] = {AI("axis", -2), AS("mode", "linear")};

/* --- CumProd ---------------------------------------------------------------------- */
static const OxFormal f_cum_in[] = {REQ("x", "T"), REQ("axis", "T2")};
static const OxFormal f_cum_out[] = {REQ("y", "T")};
static const OxTypeConstr t_cum[] = {
    {"T", T_(UINT32) | T_(UINT64) | T_(INT32) | T_(INT64) | M_F | T_(BFLOAT16)}, {"T2", M_IND}};
static const OxAttrSpec a_cum[] = {AI("exclusive", 0), AI("reverse", 0)};

/* --- Range ----------------------------------------------------------------------- */
static const OxFormal f_range_in[] = {REQ("start", "T"), REQ("limit", "T"), REQ("delta", "T")};
static const OxFormal f_range_out[] = {REQ("output", "T")};
static const OxTypeConstr t_range[] = {{"T", T_(FLOAT32) | T_(FLOAT64) | T_(INT16) | T_(INT32) |
                                                 T_(INT64) | T_(FLOAT16) | T_(BFLOAT16)}};

/* --- Inference ------------------------------------------------------------------- */

/* Tile (6+): dim i times repeats[i], with overflow checks, when the repeats
 * are constant. */
static OnyxStatus* infer_tile(OxNode* n) {
  OxDims x, y;
  ox_in_dims(n, 0, &x);
  OnyxElemType t = ox_in_type(n, 0);
  int64_t* r;
  size_t count;
  bool known;
  OX_TRY(ox_const_ints(n, 1, &r, &count, &known));
  OnyxStatus* st = NULL;
  if (!known) {
    y.rank = x.rank;
    for (int32_t i = 0; i < y.rank; i++)
      y.d[i] = ONYX_DIM_UNKNOWN;
  } else if (x.rank >= 0 && count != (size_t)x.rank) {
    st = ox_node_err(n, "input 'repeats' has %zu values for an input of rank %d", count,
                     (int)x.rank);
  } else {
    y.rank = count > OX_INFER_MAX_RANK ? -1 : (int32_t)count;
    for (size_t i = 0; i < count && !st; i++) {
      if (r[i] < 0)
        st =
            ox_node_err(n, "input 'repeats' is %lld on axis %zu, must be >= 0", (long long)r[i], i);
      else if (y.rank < 0)
        continue;
      else if (x.rank < 0 || x.d[i] < 0)
        y.d[i] = ONYX_DIM_UNKNOWN;
      else if (!ox_mul_i64(x.d[i], r[i], &y.d[i]))
        st = ox_node_err(n, "input 'repeats' (%lld) x dimension %lld overflows on axis %zu",
                         (long long)r[i], (long long)x.d[i], i);
    }
  }
  free(r);
  return st ? st : ox_out_set(n, 0, t, &y);
}

/* Pad: dim + pad_begin + pad_end on each padded axis (pads may be negative,
 * which crops, but the result may not be). Opset 1 names the attribute
 * 'paddings', 2 'pads', 11+ take input 'pads' (18+: input 'axes'). */
static OnyxStatus* infer_pad(OxNode* n) {
  OxDims x, y;
  ox_in_dims(n, 0, &x);
  OnyxElemType t = ox_in_type(n, 0);
  if (x.rank < 0) return ox_out_set(n, 0, t, NULL);
  y = x;
  const char* what = n->since_version >= 11  ? "input 'pads'"
                     : n->since_version >= 2 ? "attribute 'pads'"
                                             : "attribute 'paddings'";
  int64_t *p = NULL, *ax = NULL;
  size_t np = 0, nax = 0;
  bool pk = true, axk = true;
  OnyxStatus* st = NULL;
  if (n->since_version >= 11) {
    st = ox_const_ints(n, 1, &p, &np, &pk);
    if (!st && ox_in(n, 3)) st = ox_const_ints(n, 3, &ax, &nax, &axk);
  } else {
    const int64_t* a = ox_attr_ints(n, n->since_version >= 2 ? "pads" : "paddings", &np);
    if (np && !(p = malloc(np * sizeof *p))) return ox_oom();
    if (np) memcpy(p, a, np * sizeof *p);
  }
  bool all = !ox_in(n, 3);
  size_t naxes = all ? (size_t)x.rank : nax;
  if (!st && (!pk || !axk)) { /* which axes grow by how much is unknown */
    for (int32_t i = 0; i < y.rank; i++)
      y.d[i] = ONYX_DIM_UNKNOWN;
  } else if (!st && np != 2 * naxes) {
    st = ox_node_err(n, "%s has %zu values, expected %zu", what, np, 2 * naxes);
  } else {
    for (size_t i = 0; i < naxes && !st; i++) {
      int64_t a = all ? (int64_t)i : ax[i], axis;
      if (!ox_norm_axis(a, x.rank, &axis)) {
        st = ox_node_err(n, "input 'axes' has axis %lld, out of range for rank %d", (long long)a,
                         (int)x.rank);
        break;
      }
      int64_t pb = p[i], pe = p[i + naxes], sum, o;
      if (!ox_add_i64(pb, pe, &sum))
        st = ox_node_err(n, "%s (%lld, %lld) overflows on axis %lld", what, (long long)pb,
                         (long long)pe, (long long)axis);
      else if (x.d[axis] < 0 && sum == INT64_MIN) /* -sum > INT64_MAX >= any dim */
        st = ox_node_err(n, "%s (%lld, %lld) leaves any dimension on axis %lld negative", what,
                         (long long)pb, (long long)pe, (long long)axis);
      else if (x.d[axis] < 0)
        y.d[axis] = ONYX_DIM_UNKNOWN;
      else if (!ox_add_i64(x.d[axis], sum, &o))
        st = ox_node_err(n, "%s (%lld, %lld) overflows dimension %lld on axis %lld", what,
                         (long long)pb, (long long)pe, (long long)x.d[axis], (long long)axis);
      else if (o < 0)
        st = ox_node_err(n, "%s (%lld, %lld) leaves dimension %lld on axis %lld negative", what,
                         (long long)pb, (long long)pe, (long long)x.d[axis], (long long)axis);
      else
        y.d[axis] = o;
    }
  }
  free(p);
  free(ax);
  return st ? st : ox_out_set(n, 0, t, &y);
}

/* A constant scalar input as int64 (integer types) or double (float32/64);
 * false when unknown at load time or of another type. */
static bool const_scalar(const OxNode* n, size_t i, bool* is_int, int64_t* iv, double* fv) {
  const OxTensor* t = ox_const_tensor(n, i);
  if (!t || t->count != 1) return false;
  *is_int = true;
  switch (t->type) {
  case ONYX_ELEM_INT16:
    *iv = *(const int16_t*)t->data;
    return true;
  case ONYX_ELEM_INT32:
    *iv = *(const int32_t*)t->data;
    return true;
  case ONYX_ELEM_INT64:
    *iv = *(const int64_t*)t->data;
    return true;
  case ONYX_ELEM_FLOAT32:
    *is_int = false;
    *fv = *(const float*)t->data;
    return true;
  case ONYX_ELEM_FLOAT64:
    *is_int = false;
    *fv = *(const double*)t->data;
    return true;
  default:
    return false;
  }
}

/* Range: max(ceil((limit - start) / delta), 0) elements, exactly for the
 * integer types (the span may exceed int64: it is taken in uint64), and
 * through a checked double -> int64 conversion for the float ones. */
static OnyxStatus* infer_range(OxNode* n) {
  OnyxElemType t = ox_in_type(n, 0);
  OxDims y = {.rank = 1, .d = {ONYX_DIM_UNKNOWN}};
  bool i0, i1, i2;
  int64_t s, l, d;
  double fs, fl, fd;
  if (!const_scalar(n, 0, &i0, &s, &fs) || !const_scalar(n, 1, &i1, &l, &fl) ||
      !const_scalar(n, 2, &i2, &d, &fd) || i0 != i1 || i1 != i2)
    return ox_out_set(n, 0, t, &y);
  if (i0) {
    if (d == 0) return ox_node_err(n, "input 'delta' is 0");
    uint64_t span = 0, step = d > 0 ? (uint64_t)d : (uint64_t)(-(d + 1)) + 1;
    if (d > 0 && l > s) span = (uint64_t)l - (uint64_t)s;
    if (d < 0 && l < s) span = (uint64_t)s - (uint64_t)l;
    uint64_t count = span / step + (span % step != 0);
    if (count > (uint64_t)INT64_MAX)
      return ox_node_err(n,
                         "inputs 'start' (%lld), 'limit' (%lld) and 'delta' (%lld) give %llu "
                         "elements, more than int64 counts",
                         (long long)s, (long long)l, (long long)d, (unsigned long long)count);
    y.d[0] = (int64_t)count;
  } else {
    if (fd == 0) return ox_node_err(n, "input 'delta' is 0");
    double c = ceil((fl - fs) / fd);
    if (c < 0) c = 0;
    if (!ox_double_to_i64(c, &y.d[0]))
      return ox_node_err(n,
                         "inputs 'start' (%g), 'limit' (%g) and 'delta' (%g) give %g elements, "
                         "not an int64 count",
                         fs, fl, fd, c);
  }
  return ox_out_set(n, 0, t, &y);
}

#define RED(op, v, tc) S(op, v, L(f_red_in), L(f_red_out), L(tc), L(a_red), ox_infer_reduce)

static const OxSchema tensor_rows[] = {
    RED("ReduceMax", 18, t_maxmin18),
    RED("ReduceMax", 20, t_maxmin20),
    RED("ReduceMin", 18, t_maxmin18),
    RED("ReduceMin", 20, t_maxmin20),
    RED("ReduceL1", 18, t_num7),
    RED("ReduceL2", 18, t_num7),
    RED("ReduceLogSum", 18, t_num7),
    RED("ReduceLogSumExp", 18, t_num7),
    RED("ReduceProd", 18, t_num7),
    RED("ReduceSumSquare", 18, t_num7),
    S("Pad", 18, L(f_pad18_in), L(f_pad_out), L(t_pad), L(a_pad), infer_pad),
    S("Pad", 19, L(f_pad18_in), L(f_pad_out), L(t_pad), L(a_pad), infer_pad),
    S("CenterCropPad", 18, L(f_ccp_in), L(f_ccp_out), L(t_ccp), L(a_ccp), NULL),
    S("TensorScatter", 24, L(f_ts_in), L(f_ts_out), L(t_ts), L(a_ts), NULL),
    S("CumProd", 26, L(f_cum_in), L(f_cum_out), L(t_cum), L(a_cum), NULL),
    S("Range", 27, L(f_range_in), L(f_range_out), L(t_range), NONE, infer_range),
};

/* EyeLike: `dtype` when given, else the input's type; shape of the input. */
static OnyxStatus* infer_eyelike(OxNode* n) {
  OnyxElemType t = ox_in_type(n, 0);
  if (ox_attr_present(n, "dtype")) {
    int64_t dt = ox_attr_i(n, "dtype", 0);
    if (dt < 1 || dt >= ONYX_ELEM_TYPE_COUNT)
      return ox_node_err(n, "attribute 'dtype' is %lld, not an element type", (long long)dt);
    t = (OnyxElemType)dt;
  }
  OxDims d;
  ox_in_dims(n, 0, &d);
  if (d.rank >= 0 && d.rank != 2)
    return ox_node_err(n, "input must have rank 2, has %d", (int)d.rank);
  return ox_out_set(n, 0, t, d.rank >= 0 ? &d : NULL);
}

static const OxInferOverride tensor_overrides[] = {
    {"", "EyeLike", 1, 17, infer_eyelike},
    {"", "Tile", 6, 17, infer_tile},
    {"", "Pad", 1, 17, infer_pad},
    {"", "Range", 11, 17, infer_range},
};

const OxSchemaFamily ox_family_tensor = {"tensor", tensor_rows, OX_ARRAY_LEN(tensor_rows),
                                         tensor_overrides, OX_ARRAY_LEN(tensor_overrides)};
