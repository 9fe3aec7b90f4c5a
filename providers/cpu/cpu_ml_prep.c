/* cpu_ml_prep.c — ai.onnx.ml preprocessing ops (version 1 each), with ONNX
 * Runtime's semantics:
 *
 * - OneHotEncoder: Y = X's shape + [categories], float; a one where X's
 *   value is a category (numbers are truncated to int64 and looked up in
 *   cats_int64s, strings in cats_strings). An unknown value gives a row of
 *   zeros, or an error when zeros = 0. A category listed twice maps to its
 *   last position.
 * - Imputer: values equal to the replaced value (replaced_value_float for
 *   float inputs, NaN matching NaN; replaced_value_int64 for integers)
 *   become the imputed value of their column (the last axis), from
 *   imputed_value_floats / imputed_value_int64s: one value for every
 *   column, or one per column.
 * - FeatureVectorizer: the inputs, each [N, C_i] (or [C_i], one row), side
 *   by side into [N, sum of inputdimensions] float: input i fills
 *   inputdimensions[i] columns, its extra columns dropped, missing ones 0.
 * - CategoryMapper: strings to int64 (cats_strings[k] -> cats_int64s[k]) or
 *   int64 to strings, by X's type; unknown values take default_int64 /
 *   default_string. A key listed twice maps by its first position. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ml.h"

/* A lookup table entry: a string key (s, len) or an int64 key k, and its
 * position in the attribute list. Sorted by key, then position. */
typedef struct MlKey {
  const char* s;
  size_t len;
  int64_t k;
  size_t pos;
} MlKey;

static int key_cmp_only(const MlKey* x, const MlKey* y) {
  if (x->s) {
    int c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
  }
  return (x->k > y->k) - (x->k < y->k);
}

static int key_cmp(const void* a, const void* b) {
  const MlKey *x = a, *y = b;
  int c = key_cmp_only(x, y);
  return c ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

/* The table entries whose key equals *q: [*lo, *hi), in position order. */
static void key_range(const MlKey* t, size_t n, const MlKey* q, size_t* lo, size_t* hi) {
  size_t a = 0, b = n;
  while (a < b) {
    size_t m = a + (b - a) / 2;
    if (key_cmp_only(&t[m], q) < 0)
      a = m + 1;
    else
      b = m;
  }
  *lo = a;
  b = n;
  while (a < b) {
    size_t m = a + (b - a) / 2;
    if (key_cmp_only(&t[m], q) <= 0)
      a = m + 1;
    else
      b = m;
  }
  *hi = a;
}

/* A sorted table of the string list (strings) or the int list. */
static MlKey* key_table(const char* const* s, const size_t* s_len, const int64_t* ints, size_t n) {
  MlKey* t = calloc(n ? n : 1, sizeof *t);
  if (!t) return NULL;
  for (size_t i = 0; i < n; i++) {
    if (s)
      t[i] = (MlKey){s[i], s_len ? s_len[i] : strlen(s[i]), 0, i};
    else
      t[i] = (MlKey){NULL, 0, ints[i], i};
  }
  qsort(t, n, sizeof *t, key_cmp);
  return t;
}

/* String i of t and its byte length, NUL bytes included where the host
 * reports lengths. */
static const char* prep_str(const OnyxTensor* t, size_t i, size_t* len) {
  const OnyxHostApi* H = cpu_host;
  const char* s = H->tensor_string(t, i);
  if (!s) s = "";
  bool has_len =
      H->struct_size >= offsetof(OnyxHostApi, tensor_string_len) + sizeof H->tensor_string_len &&
      H->tensor_string_len;
  *len = has_len ? H->tensor_string_len(t, i) : strlen(s);
  return s;
}

/* --- OneHotEncoder ------------------------------------------------------------------------------
 */

typedef struct OheState {
  MlKey* table;
  size_t n;
  bool strings, zeros;
} OheState;

static void ohe_release(void* state) {
  OheState* s = state;
  if (!s) return;
  free(s->table);
  free(s);
}

static OnyxStatus* ohe_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  const OnyxHostApi* H = cpu_host;
  size_t ni = 0, ns = 0;
  const size_t* lens = NULL;
  const int64_t* ci = H->node_attr_ints(node, "cats_int64s", &ni);
  const char* const* cs = ml_attr_strings(node, "cats_strings", &ns, &lens);
  if (!ci) ni = 0;
  if (!cs) ns = 0;
  if (ni && ns)
    return cpu_error(node, ONYX_INVALID_MODEL,
                     "has both 'cats_int64s' and 'cats_strings'; give one");
  if (!ni && !ns)
    return cpu_error(node, ONYX_INVALID_MODEL, "needs a non-empty 'cats_int64s' or 'cats_strings'");
  bool in_str = H->value_elem_type(H->node_input(node, 0)) == ONYX_ELEM_STRING;
  if (in_str != (ns > 0))
    return cpu_error(node, ONYX_INVALID_MODEL, "X is %s but the categories are %s",
                     in_str ? "strings" : "numbers",
                     ns ? "strings ('cats_strings')" : "integers ('cats_int64s')");
  OheState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->strings = ns > 0;
  s->n = ns ? ns : ni;
  s->zeros = H->node_attr_int(node, "zeros", 1) != 0;
  s->table = key_table(ns ? cs : NULL, lens, ci, s->n);
  if (!s->table) {
    ohe_release(s);
    return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  }
  *out = s;
  return NULL;
}

static OnyxStatus* ohe_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const OheState* s = state;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  size_t rank = H->tensor_rank(x), n = H->tensor_elem_count(x), total = 0;
  if (rank + 1 > CPU_MAX_RANK)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X's rank is too high");
  if (!cpu_mul_size(n, s->n, &total))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "the output size overflows");
  int64_t od[CPU_MAX_RANK];
  memcpy(od, H->tensor_dims(x), rank * sizeof *od);
  od[rank] = (int64_t)s->n;
  OnyxTensor* y = NULL;
  OnyxStatus* st = H->ctx_output(ctx, 0, od, rank + 1, &y);
  if (st) return st;
  if (H->tensor_elem_type(y) != ONYX_ELEM_FLOAT32)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "output Y must be float");
  float* yd = H->tensor_mutable_data(y);
  if (total) memset(yd, 0, total * sizeof *yd);
  int32_t t = H->tensor_elem_type(x);
  for (size_t i = 0; i < n; i++) {
    MlKey q = {0};
    bool ok = true;
    if (s->strings) {
      q.s = prep_str(x, i, &q.len);
    } else {
      CpuNum v;
      if (!cpu_num_load(t, H->tensor_data(x), i, &v))
        return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X of type %s is not supported",
                             cpu_elem_name(t));
      if (v.kind == CPU_NUM_FLT)
        ok = cpu_double_to_i64(trunc(v.v.f), &q.k);
      else
        q.k = v.v.i; /* int32 / int64 */
    }
    size_t lo = 0, hi = 0;
    if (ok) key_range(s->table, s->n, &q, &lo, &hi);
    if (ok && lo < hi)
      yd[i * s->n + s->table[hi - 1].pos] = 1.0f;
    else if (!s->zeros)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                           "X[%zu] is not a category and attribute 'zeros' is 0", i);
  }
  return NULL;
}

/* --- Imputer ------------------------------------------------------------------------------------
 */

typedef struct ImpState {
  const float* vf;
  const int64_t* vi;
  size_t nf, ni;
  float rf;
  int64_t ri;
} ImpState;

static OnyxStatus* imp_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  const OnyxHostApi* H = cpu_host;
  ImpState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->vf = H->node_attr_floats(node, "imputed_value_floats", &s->nf);
  s->vi = H->node_attr_ints(node, "imputed_value_int64s", &s->ni);
  if (!s->vf) s->nf = 0;
  if (!s->vi) s->ni = 0;
  s->rf = H->node_attr_float(node, "replaced_value_float", 0.0f);
  s->ri = H->node_attr_int(node, "replaced_value_int64", 0);
  int32_t t = H->value_elem_type(H->node_input(node, 0));
  bool flt = t == ONYX_ELEM_FLOAT32 || t == ONYX_ELEM_FLOAT64;
  if (flt ? !s->nf : !s->ni) {
    free(s);
    return cpu_error(node, ONYX_INVALID_MODEL, "X is %s but attribute '%s' is missing or empty",
                     cpu_elem_name(t), flt ? "imputed_value_floats" : "imputed_value_int64s");
  }
  *out = s;
  return NULL;
}

static OnyxStatus* imp_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const ImpState* s = state;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  size_t rank = H->tensor_rank(x), n = H->tensor_elem_count(x);
  const int64_t* d = H->tensor_dims(x);
  int32_t t = H->tensor_elem_type(x);
  bool flt = t == ONYX_ELEM_FLOAT32 || t == ONYX_ELEM_FLOAT64;
  size_t c = rank ? (size_t)d[rank - 1] : 1;
  size_t nv = flt ? s->nf : s->ni;
  if (nv != 1 && nv != c)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT,
                         "attribute '%s' has %zu values; X has %zu columns (want 1 or %zu)",
                         flt ? "imputed_value_floats" : "imputed_value_int64s", nv, c, c);
  OnyxTensor* y = NULL;
  OnyxStatus* st = H->ctx_output(ctx, 0, d, rank, &y);
  if (st) return st;
  const void* xd = H->tensor_data(x);
  void* yd = H->tensor_mutable_data(y);
  for (size_t i = 0; i < n; i++) {
    CpuNum v;
    if (!cpu_num_load(t, xd, i, &v))
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "X of type %s is not supported",
                           cpu_elem_name(t));
    size_t col = c ? i % c : 0;
    if (flt) {
      double xv = v.v.f;
      bool hit = isnan(s->rf) ? isnan(xv) : xv == (double)s->rf;
      if (hit) v = (CpuNum){.kind = CPU_NUM_FLT, .v.f = s->vf[nv == 1 ? 0 : col]};
    } else if (v.kind == CPU_NUM_SINT && v.v.i == s->ri) {
      v = (CpuNum){.kind = CPU_NUM_SINT, .v.i = s->vi[nv == 1 ? 0 : col]};
    }
    cpu_num_store(t, yd, i, v);
  }
  return NULL;
}

/* --- FeatureVectorizer ---------------------------------------------------------------------------
 */

typedef struct FvState {
  const int64_t* dims;
  size_t n;
  size_t total;
} FvState;

static OnyxStatus* fv_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  const OnyxHostApi* H = cpu_host;
  FvState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->dims = H->node_attr_ints(node, "inputdimensions", &s->n);
  if (!s->dims) s->n = 0;
  OnyxStatus* st = NULL;
  size_t n_in = H->node_input_count(node);
  if (s->n != n_in)
    st = cpu_error(node, ONYX_INVALID_MODEL,
                   "attribute 'inputdimensions' has %zu values for %zu inputs", s->n, n_in);
  for (size_t i = 0; !st && i < s->n; i++)
    if (s->dims[i] < 0 || !cpu_add_size(s->total, (size_t)s->dims[i], &s->total))
      st = cpu_error(node, ONYX_INVALID_MODEL, "inputdimensions[%zu] = %lld is invalid", i,
                     (long long)s->dims[i]);
  if (st) {
    free(s);
    return st;
  }
  *out = s;
  return NULL;
}

static OnyxStatus* fv_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const FvState* s = state;
  size_t n_in = H->ctx_input_count(ctx);
  if (n_in != s->n)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "%zu inputs; inputdimensions has %zu", n_in,
                         s->n);
  size_t rows = 0;
  for (size_t k = 0; k < n_in; k++) {
    const OnyxTensor* x = H->ctx_input(ctx, k);
    if (!x) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input %zu is missing", k);
    size_t rank = H->tensor_rank(x);
    if (rank < 1) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input %zu is a scalar", k);
    size_t r = rank == 1 ? 1 : (size_t)H->tensor_dims(x)[0];
    if (k && r != rows)
      return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input %zu has %zu rows; input 0 has %zu", k,
                           r, rows);
    rows = r;
  }
  size_t total = 0;
  if (!cpu_mul_size(rows, s->total, &total))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "the output size overflows");
  int64_t od[2] = {(int64_t)rows, (int64_t)s->total};
  OnyxTensor* y = NULL;
  OnyxStatus* st = H->ctx_output(ctx, 0, od, 2, &y);
  if (st) return st;
  if (H->tensor_elem_type(y) != ONYX_ELEM_FLOAT32)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "output Y must be float");
  float* yd = H->tensor_mutable_data(y);
  if (total) memset(yd, 0, total * sizeof *yd);
  size_t off = 0;
  for (size_t k = 0; k < n_in; k++) {
    const OnyxTensor* x = H->ctx_input(ctx, k);
    size_t width = rows ? H->tensor_elem_count(x) / rows : 0;
    size_t take = width < (size_t)s->dims[k] ? width : (size_t)s->dims[k];
    int32_t t = H->tensor_elem_type(x);
    for (size_t r = 0; r < rows; r++)
      for (size_t j = 0; j < take; j++) {
        CpuNum v;
        if (!cpu_num_load(t, H->tensor_data(x), r * width + j, &v))
          return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input %zu of type %s is not supported",
                               k, cpu_elem_name(t));
        yd[r * s->total + off + j] = (float)cpu_num_as_double(v);
      }
    off += (size_t)s->dims[k];
  }
  return NULL;
}

/* --- CategoryMapper ------------------------------------------------------------------------------
 */

typedef struct CmState {
  MlKey* by_str; /* cats_strings sorted */
  MlKey* by_int; /* cats_int64s sorted */
  const char* const* strs;
  const size_t* lens;
  const int64_t* ints;
  size_t n;
  const char* def_s;
  size_t def_len;
  int64_t def_i;
} CmState;

static void cm_release(void* state) {
  CmState* s = state;
  if (!s) return;
  free(s->by_str);
  free(s->by_int);
  free(s);
}

static OnyxStatus* cm_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  const OnyxHostApi* H = cpu_host;
  size_t ni = 0, ns = 0;
  const size_t* lens = NULL;
  const int64_t* ci = H->node_attr_ints(node, "cats_int64s", &ni);
  const char* const* cs = ml_attr_strings(node, "cats_strings", &ns, &lens);
  if (!ci) ni = 0;
  if (!cs) ns = 0;
  if (!ni || ni != ns)
    return cpu_error(node, ONYX_INVALID_MODEL,
                     "attributes 'cats_strings' (%zu) and 'cats_int64s' (%zu) must be non-empty "
                     "and of one length",
                     ns, ni);
  CmState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->n = ni;
  s->strs = cs;
  s->lens = lens;
  s->ints = ci;
  s->by_str = key_table(cs, lens, NULL, ni);
  s->by_int = key_table(NULL, NULL, ci, ni);
  s->def_i = H->node_attr_int(node, "default_int64", -1);
  s->def_s = H->node_attr_string(node, "default_string", &s->def_len);
  if (!s->def_s) {
    s->def_s = "_Unused";
    s->def_len = strlen(s->def_s);
  }
  if (!s->by_str || !s->by_int) {
    cm_release(s);
    return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  }
  *out = s;
  return NULL;
}

static OnyxStatus* cm_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const CmState* s = state;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  OnyxTensor* y = NULL;
  OnyxStatus* st = H->ctx_output(ctx, 0, H->tensor_dims(x), H->tensor_rank(x), &y);
  if (st) return st;
  bool from_str = H->tensor_elem_type(x) == ONYX_ELEM_STRING;
  OnyxElemType want = from_str ? ONYX_ELEM_INT64 : ONYX_ELEM_STRING;
  if (H->tensor_elem_type(y) != want || (!from_str && H->tensor_elem_type(x) != ONYX_ELEM_INT64))
    return cpu_ctx_error(
        ctx, ONYX_INVALID_ARGUMENT, "maps string to int64 or int64 to string; X is %s and Y %s",
        cpu_elem_name(H->tensor_elem_type(x)), cpu_elem_name(H->tensor_elem_type(y)));
  size_t n = H->tensor_elem_count(x);
  for (size_t i = 0; i < n && !st; i++) {
    MlKey q = {0};
    size_t lo = 0, hi = 0;
    if (from_str) {
      q.s = prep_str(x, i, &q.len);
      key_range(s->by_str, s->n, &q, &lo, &hi);
      ((int64_t*)H->tensor_mutable_data(y))[i] = lo < hi ? s->ints[s->by_str[lo].pos] : s->def_i;
    } else {
      q.k = ((const int64_t*)H->tensor_data(x))[i];
      key_range(s->by_int, s->n, &q, &lo, &hi);
      if (lo < hi) {
        size_t p = s->by_int[lo].pos;
        st = H->tensor_set_string(y, i, s->strs[p], s->lens ? s->lens[p] : strlen(s->strs[p]));
      } else {
        st = H->tensor_set_string(y, i, s->def_s, s->def_len);
      }
    }
  }
  return st;
}

/* --- Registration --------------------------------------------------------------------------------
 */

static const int32_t ohe_types[] = {ONYX_ELEM_STRING, ONYX_ELEM_INT64, ONYX_ELEM_INT32,
                                    ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64};
static const int32_t num_types[] = {ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64, ONYX_ELEM_INT64,
                                    ONYX_ELEM_INT32};
static const int32_t cm_types[] = {ONYX_ELEM_INT64, ONYX_ELEM_STRING};
static const OnyxTypeConstraint ohe_tc[] = {{"T", ohe_types, 5}};
static const OnyxTypeConstraint imp_tc[] = {{"T", num_types, 4}};
static const OnyxTypeConstraint fv_tc[] = {{"T1", num_types, 4}};
static const OnyxTypeConstraint cm_tc[] = {{"T1", cm_types, 2}, {"T2", cm_types, 2}};

OnyxStatus* cpu_register_ml_prep(OnyxKernelRegistry* r);
OnyxStatus* cpu_register_ml_prep(OnyxKernelRegistry* r) {
  static const struct {
    const char* op;
    const OnyxTypeConstraint* tc;
    size_t n_tc;
    OnyxStatus* (*create)(OnyxEp*, const OnyxNode*, void*, void**);
    OnyxStatus* (*compute)(void*, OnyxKernelContext*);
    void (*release)(void*);
  } specs[] = {
      {"OneHotEncoder", ohe_tc, 1, ohe_create, ohe_compute, ohe_release},
      {"Imputer", imp_tc, 1, imp_create, imp_compute, cpu_free_state},
      {"FeatureVectorizer", fv_tc, 1, fv_create, fv_compute, cpu_free_state},
      {"CategoryMapper", cm_tc, 2, cm_create, cm_compute, cm_release},
  };
  for (size_t i = 0; i < CPU_ARRAY_LEN(specs); i++) {
    OnyxKernelDef def = {
        .struct_size = sizeof def,
        .domain = "ai.onnx.ml",
        .op_type = specs[i].op,
        .since_version = 1,
        .end_version = ONYX_OPSET_LATEST,
        .type_constraints = specs[i].tc,
        .type_constraint_count = specs[i].n_tc,
        .create = specs[i].create,
        .compute = specs[i].compute,
        .release = specs[i].release,
    };
    OnyxStatus* st = cpu_host->register_kernel(r, &def);
    if (st) return st;
  }
  return NULL;
}
