/* cpu_ml.c — ai.onnx.ml ops: LabelEncoder (1, 2, 4),
 * ArrayFeatureExtractor (1), Binarizer (1), Scaler (1) and Normalizer (1).
 *
 * LabelEncoder keys and values come from the typed list attributes
 * (keys_strings, values_int64s, ...), the tensor attributes of version 4
 * (keys_tensor, values_tensor, default_tensor) or, in version 1,
 * classes_strings (a string maps to its index and back). Lookups are a
 * binary search over the keys sorted at kernel creation; numeric keys compare
 * as doubles (NaN keys match NaN). String keys and values are byte strings
 * of a known length, NUL bytes included, wherever they come from: tensors
 * (the input, keys_tensor, values_tensor, default_tensor) through
 * tensor_string_len, the list attributes (keys_strings, values_strings,
 * classes_strings) through node_attr_strings_lens, default_string with the
 * length node_attr_string gives. Normalizer's norm compares with its
 * length: a NUL in it makes it unknown and refused.
 *
 * Normalizer (output float): MAX divides each row (the last axis) by its
 * largest value, L1 by the sum of magnitudes, L2 by the Euclidean norm; a
 * row whose norm is 0 is copied. Scaler (output float): (x - offset) *
 * scale, offset and scale one value or one per column. Binarizer: 1 where
 * x > threshold, else 0 (NaN gives 0).
 *
 * This file also holds what the ml kernel files share (cpu_ml.h). */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ml.h"

static const char* ml_domain = "ai.onnx.ml";

/* --- Shared by the ai.onnx.ml kernels (cpu_ml.h) ------------------------------------------- */

const char* const* ml_attr_strings(const OnyxNode* node, const char* name, size_t* count,
                                   const size_t** lens) {
  const OnyxHostApi* H = cpu_host;
  const char* const* s = H->node_attr_strings(node, name, count);
  *lens = NULL;
  if (!s || !*count) return s;
  size_t n_lens = 0;
  if (H->struct_size >=
          offsetof(OnyxHostApi, node_attr_strings_lens) + sizeof H->node_attr_strings_lens &&
      H->node_attr_strings_lens) {
    const size_t* l = H->node_attr_strings_lens(node, name, &n_lens);
    if (l && n_lens == *count) *lens = l;
  }
  return s;
}

OnyxStatus* ml_post_attr(const OnyxNode* node, int* out) {
  static const char* const names[] = {"NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"};
  size_t len = 0;
  const char* p = cpu_host->node_attr_string(node, "post_transform", &len);
  *out = ML_POST_NONE;
  if (!p) return NULL;
  for (int i = 0; i < 5; i++)
    if (len == strlen(names[i]) && !memcmp(p, names[i], len)) {
      *out = i;
      return NULL;
    }
  return cpu_error(node, ONYX_INVALID_MODEL,
                   "attribute 'post_transform' is '%.*s'; it must be NONE, LOGISTIC, SOFTMAX, "
                   "SOFTMAX_ZERO or PROBIT",
                   (int)(len > 64 ? 64 : len), p);
}

float ml_logistic(float x) {
  float v = 1.0f / (1.0f + expf(-fabsf(x)));
  return x < 0 ? 1.0f - v : v;
}

float ml_probit(float x) {
  float v = 2.0f * x - 1.0f;
  float sgn = v < 0 ? -1.0f : 1.0f;
  float w = logf((1.0f - v) * (1.0f + v));
  float a = 2.0f / (3.14159f * 0.147f) + 0.5f * w;
  float b = 1.0f / 0.147f * w;
  return 1.41421356f * sgn * sqrtf(sqrtf(a * a - b) - a);
}

void ml_post_row(float* s, size_t n, int post) {
  switch (post) {
  case ML_POST_LOGISTIC:
    for (size_t i = 0; i < n; i++)
      s[i] = ml_logistic(s[i]);
    break;
  case ML_POST_PROBIT:
    for (size_t i = 0; i < n; i++)
      s[i] = ml_probit(s[i]);
    break;
  case ML_POST_SOFTMAX:
  case ML_POST_SOFTMAX_ZERO: {
    /* SOFTMAX_ZERO leaves scores within 1e-7 of zero out of the sum (each
     * becomes itself times exp(-max), about zero). */
    float mx = -3.402823466e38f, sum = 0.0f;
    for (size_t i = 0; i < n; i++)
      mx = s[i] > mx ? s[i] : mx;
    for (size_t i = 0; i < n; i++) {
      if (post == ML_POST_SOFTMAX_ZERO && s[i] <= 1e-7f && s[i] >= -1e-7f) {
        s[i] *= expf(-mx);
      } else {
        s[i] = expf(s[i] - mx);
        sum += s[i];
      }
    }
    for (size_t i = 0; i < n; i++)
      s[i] /= sum;
    break;
  }
  default:
    break;
  }
}

OnyxStatus* ml_labels_attr(const OnyxNode* node, MlLabels* out) {
  memset(out, 0, sizeof *out);
  size_t ni = 0, ns = 0;
  const int64_t* li = cpu_host->node_attr_ints(node, "classlabels_ints", &ni);
  const char* const* ls = ml_attr_strings(node, "classlabels_strings", &ns, &out->s_len);
  if (li && ni && ls && ns)
    return cpu_error(node, ONYX_INVALID_MODEL,
                     "has both 'classlabels_ints' and 'classlabels_strings'; give one");
  if (ls && ns) {
    out->strings = true;
    out->s = ls;
    out->n = ns;
  } else {
    out->s_len = NULL;
    out->i = li;
    out->n = li ? ni : 0;
  }
  return NULL;
}

OnyxStatus* ml_check_label_output(OnyxKernelContext* ctx, const OnyxTensor* y, const MlLabels* l) {
  int32_t t = cpu_host->tensor_elem_type(y);
  int32_t want = l->strings ? ONYX_ELEM_STRING : ONYX_ELEM_INT64;
  if (t != want)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "output Y is %s; the class labels are %s",
                         cpu_elem_name(t), cpu_elem_name(want));
  return NULL;
}

OnyxStatus* ml_put_label(OnyxTensor* y, size_t i, const MlLabels* l, size_t k) {
  if (l->strings)
    return cpu_host->tensor_set_string(y, i, l->s[k], l->s_len ? l->s_len[k] : strlen(l->s[k]));
  ((int64_t*)cpu_host->tensor_mutable_data(y))[i] = l->i[k];
  return NULL;
}

OnyxStatus* ml_put_binary(OnyxTensor* y, size_t i, bool strings, bool positive) {
  if (strings) return cpu_host->tensor_set_string(y, i, positive ? "1" : "0", 1);
  ((int64_t*)cpu_host->tensor_mutable_data(y))[i] = positive ? 1 : 0;
  return NULL;
}

OnyxStatus* ml_rows_f32(OnyxKernelContext* ctx, const OnyxTensor* x, const float** out,
                        size_t* rows, size_t* cols) {
  const OnyxHostApi* H = cpu_host;
  size_t rank = H->tensor_rank(x);
  const int64_t* d = H->tensor_dims(x);
  if (rank != 1 && rank != 2)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X has rank %zu; it must be [F] or [N, F]",
                         rank);
  *rows = rank == 1 ? 1 : (size_t)d[0];
  *cols = (size_t)d[rank - 1];
  int32_t t = H->tensor_elem_type(x);
  if (t == ONYX_ELEM_FLOAT32) {
    *out = H->tensor_data(x);
    return NULL;
  }
  size_t n = H->tensor_elem_count(x), bytes = 0;
  if (!cpu_mul_size(n ? n : 1, sizeof(float), &bytes))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X is too large");
  float* f = H->ctx_scratch(ctx, bytes);
  if (!f) return cpu_oom(ctx);
  for (size_t i = 0; i < n; i++) {
    CpuNum v;
    if (!cpu_num_load(t, H->tensor_data(x), i, &v))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X of type %s is not supported",
                           cpu_elem_name(t));
    f[i] = (float)cpu_num_as_double(v);
  }
  *out = f;
  return NULL;
}

/* --- LabelEncoder -------------------------------------------------------------------------- */

typedef struct LeEntry {
  const char* s; /* string key, or NULL */
  size_t len;    /* its byte length */
  double k;      /* numeric key */
  size_t value;  /* index into the values */
} LeEntry;

/* String i of t and its byte length, NUL bytes included (a 1.0 host has no
 * tensor_string_len: there the string ends at its first NUL). */
static const char* ml_str(const OnyxTensor* t, size_t i, size_t* len) {
  const OnyxHostApi* H = cpu_host;
  const char* s = H->tensor_string(t, i);
  if (!s) s = "";
  bool has_len =
      H->struct_size >= offsetof(OnyxHostApi, tensor_string_len) + sizeof H->tensor_string_len &&
      H->tensor_string_len;
  *len = has_len ? H->tensor_string_len(t, i) : strlen(s);
  return s;
}

typedef struct LeState {
  bool str_keys, str_vals;
  LeEntry* keys;
  size_t n;
  /* Values: strings (borrowed from the node) with their lengths, or numbers. */
  const char** sv;
  size_t* sv_len;
  CpuNum* nv;
  const char* def_s;
  size_t def_len;
  CpuNum def_n;
  int32_t out_type;
} LeState;

static void le_release(void* state) {
  LeState* s = state;
  if (!s) return;
  free(s->keys);
  free(s->sv);
  free(s->sv_len);
  free(s->nv);
  free(s);
}

static int le_cmp(const void* a, const void* b) {
  const LeEntry *x = a, *y = b;
  if (x->s) {
    int c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
  }
  if (isnan(x->k) || isnan(y->k)) return isnan(x->k) - isnan(y->k);
  return x->k < y->k ? -1 : x->k > y->k;
}

/* A list of keys or values from one of the attribute forms. */
typedef struct LeList {
  bool strings;
  size_t n;
  const char* const* s;
  const size_t* s_len; /* byte lengths of s; NULL: each ends at its first NUL */
  const int64_t* i;
  const float* f;
  const OnyxTensor* t;
} LeList;

static bool le_list(const OnyxNode* node, const char* strs, const char* ints, const char* floats,
                    const char* tensor, LeList* out) {
  const OnyxHostApi* H = cpu_host;
  memset(out, 0, sizeof *out);
  size_t n = 0;
  if (tensor && (out->t = H->node_attr_tensor(node, tensor))) {
    out->strings = H->tensor_elem_type(out->t) == ONYX_ELEM_STRING;
    out->n = H->tensor_elem_count(out->t);
    return true;
  }
  if ((out->s = ml_attr_strings(node, strs, &n, &out->s_len)) && n) {
    out->strings = true;
    out->n = n;
    return true;
  }
  if ((out->i = H->node_attr_ints(node, ints, &n)) && n) {
    out->n = n;
    return true;
  }
  if ((out->f = H->node_attr_floats(node, floats, &n)) && n) {
    out->n = n;
    return true;
  }
  return false;
}

static const char* le_str(const LeList* l, size_t i, size_t* len) {
  if (l->t) return ml_str(l->t, i, len);
  *len = l->s_len ? l->s_len[i] : strlen(l->s[i]);
  return l->s[i];
}

static CpuNum le_num(const LeList* l, size_t i) {
  CpuNum v = {.kind = CPU_NUM_FLT};
  if (l->t)
    cpu_num_load(cpu_host->tensor_elem_type(l->t), cpu_host->tensor_data(l->t), i, &v);
  else if (l->i)
    v = (CpuNum){.kind = CPU_NUM_SINT, .v.i = l->i[i]};
  else
    v.v.f = l->f[i];
  return v;
}

static OnyxStatus* le_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  const OnyxHostApi* H = cpu_host;
  LeState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  int32_t in_type = H->value_elem_type(H->node_input(node, 0));
  s->out_type = H->value_elem_type(H->node_output(node, 0));
  LeList keys = {0}, vals = {0};
  size_t n_classes = 0;
  const size_t* class_lens = NULL;
  const char* const* classes = ml_attr_strings(node, "classes_strings", &n_classes, &class_lens);
  OnyxStatus* st = NULL;
  if (classes && n_classes) { /* version 1: strings <-> their index */
    LeList names = {.strings = true, .n = n_classes, .s = classes, .s_len = class_lens};
    s->n = n_classes;
    s->str_keys = in_type == ONYX_ELEM_STRING;
    s->str_vals = !s->str_keys;
    s->keys = calloc(n_classes, sizeof *s->keys);
    s->sv = calloc(n_classes, sizeof *s->sv);
    s->sv_len = calloc(n_classes, sizeof *s->sv_len);
    s->nv = calloc(n_classes, sizeof *s->nv);
    if (!s->keys || !s->sv || !s->sv_len || !s->nv) {
      le_release(s);
      return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < n_classes; i++) {
      size_t len;
      const char* name = le_str(&names, i, &len);
      s->keys[i] = s->str_keys ? (LeEntry){name, len, 0, i} : (LeEntry){NULL, 0, (double)i, i};
      s->sv[i] = name;
      s->sv_len[i] = len;
      s->nv[i] = (CpuNum){.kind = CPU_NUM_SINT, .v.i = (int64_t)i};
    }
  } else {
    if (!le_list(node, "keys_strings", "keys_int64s", "keys_floats", "keys_tensor", &keys) ||
        !le_list(node, "values_strings", "values_int64s", "values_floats", "values_tensor", &vals))
      st = cpu_error(node, ONYX_INVALID_MODEL, "needs one keys_* and one values_* attribute");
    else if (keys.n != vals.n)
      st = cpu_error(node, ONYX_INVALID_MODEL, "%zu keys but %zu values", keys.n, vals.n);
    if (st) {
      le_release(s);
      return st;
    }
    s->n = keys.n;
    s->str_keys = keys.strings;
    s->str_vals = vals.strings;
    s->keys = calloc(s->n ? s->n : 1, sizeof *s->keys);
    s->sv = calloc(s->n ? s->n : 1, sizeof *s->sv);
    s->sv_len = calloc(s->n ? s->n : 1, sizeof *s->sv_len);
    s->nv = calloc(s->n ? s->n : 1, sizeof *s->nv);
    if (!s->keys || !s->sv || !s->sv_len || !s->nv) {
      le_release(s);
      return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < s->n; i++) {
      size_t len = 0;
      const char* k = keys.strings ? le_str(&keys, i, &len) : NULL;
      s->keys[i] = keys.strings ? (LeEntry){k, len, 0, i}
                                : (LeEntry){NULL, 0, cpu_num_as_double(le_num(&keys, i)), i};
      if (vals.strings)
        s->sv[i] = le_str(&vals, i, &s->sv_len[i]);
      else
        s->nv[i] = le_num(&vals, i);
    }
  }
  if (s->str_keys != (in_type == ONYX_ELEM_STRING)) {
    bool str_keys = s->str_keys;
    le_release(s);
    return cpu_error(node, ONYX_INVALID_MODEL, "the keys are %s but the input is %s",
                     str_keys ? "strings" : "numbers", cpu_elem_name(in_type));
  }
  qsort(s->keys, s->n, sizeof *s->keys, le_cmp);
  /* Defaults: default_tensor, else default_<kind>, else the spec's. */
  const OnyxTensor* dt = H->node_attr_tensor(node, "default_tensor");
  size_t len = 0;
  s->def_s = "_Unused";
  s->def_len = strlen(s->def_s);
  s->def_n = (CpuNum){.kind = CPU_NUM_SINT, .v.i = -1};
  if (dt && H->tensor_elem_count(dt) >= 1) {
    if (H->tensor_elem_type(dt) == ONYX_ELEM_STRING)
      s->def_s = ml_str(dt, 0, &s->def_len);
    else
      cpu_num_load(H->tensor_elem_type(dt), H->tensor_data(dt), 0, &s->def_n);
  } else if (s->str_vals) {
    const char* d = H->node_attr_string(node, "default_string", &len);
    if (d) {
      s->def_s = d;
      s->def_len = len;
    }
  } else if (s->out_type == ONYX_ELEM_FLOAT32 || s->out_type == ONYX_ELEM_FLOAT64 ||
             s->out_type == ONYX_ELEM_FLOAT16) {
    s->def_n =
        (CpuNum){.kind = CPU_NUM_FLT, .v.f = H->node_attr_float(node, "default_float", -0.0f)};
  } else {
    s->def_n.v.i = H->node_attr_int(node, "default_int64", -1);
  }
  *out = s;
  return NULL;
}

static OnyxStatus* le_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const LeState* s = state;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  OnyxTensor* y = NULL;
  OnyxStatus* st = H->ctx_output(ctx, 0, H->tensor_dims(x), H->tensor_rank(x), &y);
  if (st) return st;
  int32_t in_type = H->tensor_elem_type(x), out_type = H->tensor_elem_type(y);
  void* out = H->tensor_mutable_data(y);
  for (size_t i = 0, n = H->tensor_elem_count(x); i < n && !st; i++) {
    LeEntry key = {0};
    if (s->str_keys) {
      key.s = ml_str(x, i, &key.len);
    } else {
      CpuNum v;
      cpu_num_load(in_type, H->tensor_data(x), i, &v);
      key.k = cpu_num_as_double(v);
    }
    const LeEntry* hit = bsearch(&key, s->keys, s->n, sizeof *s->keys, le_cmp);
    if (out_type == ONYX_ELEM_STRING) {
      st = hit ? H->tensor_set_string(y, i, s->sv[hit->value], s->sv_len[hit->value])
               : H->tensor_set_string(y, i, s->def_s, s->def_len);
    } else if (!cpu_num_store(out_type, out, i, hit ? s->nv[hit->value] : s->def_n)) {
      st = cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "cannot store values of type %s",
                         cpu_elem_name(out_type));
    }
  }
  return st;
}

/* --- ArrayFeatureExtractor, Binarizer, Scaler, Normalizer ----------------------------------- */

static OnyxStatus* afe_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxHostApi* H = cpu_host;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  const OnyxTensor* idx = H->ctx_input(ctx, 1);
  size_t rank = H->tensor_rank(x);
  if (rank < 1) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X must have rank >= 1");
  int64_t* ind = NULL;
  size_t n_ind = 0;
  OnyxStatus* st = cpu_read_ints_scratch(ctx, idx, "Y", &ind, &n_ind);
  if (st) return st;
  const int64_t* d = H->tensor_dims(x);
  int64_t last = d[rank - 1];
  for (size_t i = 0; i < n_ind; i++)
    if (ind[i] < 0 || ind[i] >= last)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "index %lld is outside the last dim %lld",
                           (long long)ind[i], (long long)last);
  int64_t od[CPU_MAX_RANK];
  if (rank > CPU_MAX_RANK) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "rank too high");
  memcpy(od, d, rank * sizeof *od);
  od[rank - 1] = (int64_t)n_ind;
  size_t orank = rank;
  if (rank == 1) { /* [C] -> [1, n] */
    od[0] = 1;
    od[1] = (int64_t)n_ind;
    orank = 2;
  }
  OnyxTensor* y = NULL;
  if ((st = H->ctx_output(ctx, 0, od, orank, &y))) return st;
  size_t rows = cpu_dims_product(d, 0, rank - 1);
  for (size_t r = 0; r < rows && !st; r++)
    for (size_t i = 0; i < n_ind && !st; i++)
      st = cpu_copy_elems(y, r * n_ind + i, x, r * (size_t)last + (size_t)ind[i], 1);
  return st;
}

typedef struct AffineState {
  int kind; /* 0 binarizer, 1 scaler, 2 normalizer */
  float threshold;
  const float *offset, *scale;
  size_t n_offset, n_scale;
  int norm; /* 0 MAX, 1 L1, 2 L2 */
} AffineState;

static OnyxStatus* affine_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  const OnyxHostApi* H = cpu_host;
  AffineState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->kind = (int)(intptr_t)user;
  s->threshold = H->node_attr_float(node, "threshold", 0.0f);
  s->offset = H->node_attr_floats(node, "offset", &s->n_offset);
  s->scale = H->node_attr_floats(node, "scale", &s->n_scale);
  size_t len = 0;
  const char* norm = H->node_attr_string(node, "norm", &len);
  /* Compared with the length: "L2\0x" is no keyword. */
  s->norm = !norm || (len == 3 && !memcmp(norm, "MAX", 3)) ? 0
            : len == 2 && !memcmp(norm, "L1", 2)           ? 1
            : len == 2 && !memcmp(norm, "L2", 2)           ? 2
                                                           : -1;
  if (s->kind == 2 && s->norm < 0) {
    bool nul = memchr(norm, '\0', len) != NULL;
    free(s);
    return nul ? cpu_error(node, ONYX_INVALID_MODEL,
                           "attribute 'norm' holds a NUL byte; it must be MAX, L1 or L2")
               : cpu_error(node, ONYX_INVALID_MODEL, "norm '%s' is not MAX, L1 or L2", norm);
  }
  *out = s;
  return NULL;
}

static OnyxStatus* affine_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const AffineState* s = state;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  size_t rank = H->tensor_rank(x), n = H->tensor_elem_count(x);
  const int64_t* d = H->tensor_dims(x);
  OnyxTensor* y = NULL;
  OnyxStatus* st = H->ctx_output(ctx, 0, d, rank, &y);
  if (st) return st;
  int32_t it = H->tensor_elem_type(x), ot = H->tensor_elem_type(y);
  size_t c = rank ? (size_t)d[rank - 1] : 1;
  /* Scaler: offset and scale hold one value (for every column) or one per
   * column of X's last axis; absent, they are 0 and 1. */
  if (s->kind == 1 &&
      ((s->n_offset > 1 && s->n_offset != c) || (s->n_scale > 1 && s->n_scale != c)))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "attribute '%s' has %zu values; X has %zu columns (want 1 or %zu)",
                         s->n_offset > 1 && s->n_offset != c ? "offset" : "scale",
                         s->n_offset > 1 && s->n_offset != c ? s->n_offset : s->n_scale, c, c);
  double* row = H->ctx_scratch(ctx, (c ? c : 1) * sizeof *row);
  if (!row) return cpu_oom(ctx);
  for (size_t base = 0; c && base < n; base += c) {
    for (size_t j = 0; j < c; j++) {
      CpuNum v;
      cpu_num_load(it, H->tensor_data(x), base + j, &v);
      row[j] = cpu_num_as_double(v);
    }
    if (s->kind == 0) {
      for (size_t j = 0; j < c; j++)
        row[j] = row[j] > s->threshold ? 1.0 : 0.0;
    } else if (s->kind == 1) {
      for (size_t j = 0; j < c; j++) {
        double off = s->n_offset == 1 ? s->offset[0] : s->n_offset ? s->offset[j] : 0.0;
        double sc = s->n_scale == 1 ? s->scale[0] : s->n_scale ? s->scale[j] : 1.0;
        row[j] = (row[j] - off) * sc;
      }
    } else {
      /* MAX divides by the largest value (not magnitude), as ONNX Runtime
       * does; a zero norm leaves the row as it is. */
      double norm = s->norm == 0 ? -INFINITY : 0.0;
      for (size_t j = 0; j < c; j++)
        norm = s->norm == 0   ? fmax(norm, row[j])
               : s->norm == 1 ? norm + fabs(row[j])
                              : norm + row[j] * row[j];
      if (s->norm == 2) norm = sqrt(norm);
      for (size_t j = 0; j < c && norm != 0; j++)
        row[j] /= norm;
    }
    for (size_t j = 0; j < c; j++)
      cpu_num_store(ot, H->tensor_mutable_data(y), base + j,
                    (CpuNum){.kind = CPU_NUM_FLT, .v.f = row[j]});
  }
  return NULL;
}

/* --- Registration ----------------------------------------------------------------------------- */

static const int32_t le_types[] = {ONYX_ELEM_STRING, ONYX_ELEM_INT64,   ONYX_ELEM_FLOAT32,
                                   ONYX_ELEM_INT16,  ONYX_ELEM_FLOAT64, ONYX_ELEM_INT32};
static const int32_t num_types[] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64, ONYX_ELEM_INT64,
                                    ONYX_ELEM_INT32};
static const int32_t any_types[] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64, ONYX_ELEM_INT64,
                                    ONYX_ELEM_INT32, ONYX_ELEM_STRING};
static const OnyxTypeConstraint le_tc[] = {{"T1", le_types, 6}, {"T2", le_types, 6}};
static const OnyxTypeConstraint afe_tc[] = {{"T", any_types, 5}};
static const OnyxTypeConstraint num_tc[] = {{"T", num_types, 4}};

typedef struct MlSpec {
  const char* op;
  int32_t since, end;
  const OnyxTypeConstraint* tc;
  size_t n_tc;
  OnyxStatus* (*create)(OnyxEp*, const OnyxNode*, void*, void**);
  OnyxStatus* (*compute)(void*, OnyxKernelContext*);
  void (*release)(void*);
  void* user;
} MlSpec;

static const MlSpec ml_specs[] = {
    {"LabelEncoder", 1, ONYX_OPSET_LATEST, le_tc, 2, le_create, le_compute, le_release, NULL},
    {"ArrayFeatureExtractor", 1, ONYX_OPSET_LATEST, afe_tc, 1, NULL, afe_compute, NULL, NULL},
    {"Binarizer", 1, ONYX_OPSET_LATEST, num_tc, 1, affine_create, affine_compute, cpu_free_state,
     (void*)0},
    {"Scaler", 1, ONYX_OPSET_LATEST, num_tc, 1, affine_create, affine_compute, cpu_free_state,
     (void*)1},
    {"Normalizer", 1, ONYX_OPSET_LATEST, num_tc, 1, affine_create, affine_compute, cpu_free_state,
     (void*)2},
};

OnyxStatus* cpu_register_ml_models(OnyxKernelRegistry* r); /* cpu_ml_models.c */
OnyxStatus* cpu_register_ml_prep(OnyxKernelRegistry* r);   /* cpu_ml_prep.c */

OnyxStatus* cpu_register_ml(OnyxKernelRegistry* r) {
  OnyxStatus* st = cpu_register_ml_models(r);
  if (!st) st = cpu_register_ml_prep(r);
  if (st) return st;
  for (size_t i = 0; i < CPU_ARRAY_LEN(ml_specs); i++) {
    const MlSpec* m = &ml_specs[i];
    OnyxKernelDef def = {
        .struct_size = sizeof def,
        .domain = ml_domain,
        .op_type = m->op,
        .since_version = m->since,
        .end_version = m->end,
        .type_constraints = m->tc,
        .type_constraint_count = m->n_tc,
        .create = m->create,
        .compute = m->compute,
        .release = m->release,
        .user_data = m->user,
    };
    if ((st = cpu_host->register_kernel(r, &def))) return st;
  }
  return NULL;
}
