/* ml_map.c — the ai.onnx.ml ops over map values, run by the host (maps never
 * reach a provider): ZipMap (probabilities -> one map per row),
 * DictVectorizer (map -> dense row over a vocabulary) and CastMap (map with
 * int64 keys -> dense or sparse row). Map values are laid out in ox_map.h;
 * attributes were checked at resolve time (host/graph/host_infer.c). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_checked.h"
#include "ox_control.h"
#include "ox_map.h"

static OnyxStatus* ox_ml_err(const OxNode* n, const char* fmt, ...) OX_PRINTF(2, 3);
static OnyxStatus* ox_ml_err(const OxNode* n, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char* text = NULL;
  if (vasprintf(&text, fmt, ap) < 0) text = NULL;
  va_end(ap);
  OnyxStatus* st = ox_status(ONYX_INVALID_ARGUMENT, "node '%s' (%s): %s", n->name, n->op_type,
                             text ? text : "out of memory");
  free(text);
  return st;
}

/* A labels/vocabulary attribute as a 1-D key tensor. */
static OnyxStatus* ox_ml_keys(struct OxFrame* f, const OxNode* n, const OxAttr* a, OxTensor** out) {
  bool ints = a->type == ONYX_ATTR_INTS;
  int64_t dim = (int64_t)a->count;
  OX_TRY(ox_host_tensor_new(f, n, ints ? ONYX_ELEM_INT64 : ONYX_ELEM_STRING, &dim, 1, out));
  if (ints) {
    memcpy((*out)->data, a->ints, a->count * sizeof(int64_t));
    return NULL;
  }
  for (size_t i = 0; i < a->count; i++) {
    size_t len = a->strings_len ? a->strings_len[i] : strlen(a->strings[i]);
    OnyxStatus* st = ox_tensor_set_string(*out, i, a->strings[i], len);
    if (st) {
      ox_tensor_free(*out);
      *out = NULL;
      return st;
    }
  }
  return NULL;
}

/* The labels attribute of ZipMap / vocabulary of DictVectorizer that is set
 * (resolve checked exactly one is, not empty). */
static const OxAttr* ox_ml_list(const OxNode* n, const char* ints, const char* strs) {
  const OxAttr* a = ox_node_attr(n, ints);
  return a && a->count ? a : ox_node_attr(n, strs);
}

/* --- ZipMap --------------------------------------------------------------------------------- */

static OnyxStatus* ox_run_zipmap(struct OxFrame* f, const OxNode* n, const OxTensor* x,
                                 OxTensor** out) {
  const OxAttr* labels = ox_ml_list(n, "classlabels_int64s", "classlabels_strings");
  if (!x || x->vkind != OX_RT_TENSOR || x->type != ONYX_ELEM_FLOAT32 || x->rank < 1 || x->rank > 2)
    return ox_ml_err(n, "input 0 must be a float tensor [N, C] or [C]");
  size_t c = (size_t)x->dims[x->rank - 1], rows = x->rank == 2 ? (size_t)x->dims[0] : 1;
  if (c != labels->count)
    return ox_ml_err(n, "input 0 has %zu columns but the node has %zu class labels", c,
                     labels->count);
  /* Each row's map holds its own copy of C floats and shares the keys. */
  size_t bytes;
  if (!ox_mul_size(rows, c * sizeof(float) + 2 * sizeof(OxTensor), &bytes))
    return ox_ml_err(n, "%zu rows of %zu classes are too many", rows, c);
  OX_TRY(ox_frame_reserve(f, n, bytes));
  OxTensor *keys = NULL, *seq = NULL;
  OX_TRY(ox_ml_keys(f, n, labels, &keys));
  OnyxStatus* st = ox_seq_map_new(keys->type, ONYX_ELEM_FLOAT32, &seq);
  const float* xd = x->data;
  int64_t dim = (int64_t)c;
  for (size_t r = 0; !st && r < rows; r++) {
    OxTensor *k = NULL, *v = NULL, *m = NULL;
    st = ox_value_share(keys, &k);
    if (!st) st = ox_tensor_new_uninit(ONYX_ELEM_FLOAT32, &dim, 1, &v);
    if (st) {
      ox_tensor_free(k);
      break;
    }
    if (c) memcpy(v->data, xd + r * c, c * sizeof(float));
    st = ox_map_new(k, v, false, &m);
    if (!st) st = ox_seq_map_append(seq, m);
  }
  ox_tensor_free(keys);
  if (st) {
    ox_tensor_free(seq);
    return st;
  }
  *out = seq;
  return NULL;
}

/* --- DictVectorizer ----------------------------------------------------------------------------
 */

typedef struct OxVocabEntry {
  int64_t i;     /* int64 vocabulary */
  const char* s; /* string vocabulary */
  size_t len;
  size_t col; /* its output column */
} OxVocabEntry;

static int ox_cmp_vocab_int(const void* a, const void* b) {
  int64_t x = ((const OxVocabEntry*)a)->i, y = ((const OxVocabEntry*)b)->i;
  return (x > y) - (x < y);
}

static int ox_cmp_vocab_str(const void* a, const void* b) {
  const OxVocabEntry *x = a, *y = b;
  size_t m = x->len < y->len ? x->len : y->len;
  int c = m ? memcmp(x->s, y->s, m) : 0;
  return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* Copies element j of src to element i of dst (same element type). */
static OnyxStatus* ox_ml_put(OxTensor* dst, size_t i, const OxTensor* src, size_t j) {
  if (src->type == ONYX_ELEM_STRING) return ox_tensor_copy_strings(dst, i, src, j, 1);
  size_t esz = ox_elem_size(src->type);
  if (!esz)
    return ox_status(ONYX_NOT_IMPLEMENTED, "map values of element type %s",
                     ox_elem_name(src->type));
  memcpy((char*)dst->data + i * esz, (const char*)src->data + j * esz, esz);
  return NULL;
}

static OnyxStatus* ox_run_dictvec(struct OxFrame* f, const OxNode* n, const OxTensor* m,
                                  OxTensor** out) {
  OnyxStatus* st = ox_map_check(m);
  if (st) return ox_status_wrap(st, "node '%s' (%s): input 0", n->name, n->op_type);
  const OxAttr* voc = ox_ml_list(n, "int64_vocabulary", "string_vocabulary");
  bool ints = voc->type == ONYX_ATTR_INTS;
  if (m->key_type != (ints ? ONYX_ELEM_INT64 : ONYX_ELEM_STRING))
    return ox_ml_err(n, "input 0 has %s keys but the node has a %s", ox_elem_name(m->key_type),
                     ints ? "int64_vocabulary" : "string_vocabulary");
  int64_t dims[2] = {1, (int64_t)voc->count};
  OX_TRY(ox_host_tensor_new(f, n, m->type, dims, 2, out));
  size_t nv = voc->count;
  OxVocabEntry* e = malloc(nv * sizeof *e);
  if (!e) st = ox_oom();
  for (size_t i = 0; !st && i < nv; i++)
    e[i] = (OxVocabEntry){.i = ints ? voc->ints[i] : 0,
                          .s = ints ? NULL : voc->strings[i],
                          .len = ints               ? 0
                                 : voc->strings_len ? voc->strings_len[i]
                                                    : strlen(voc->strings[i]),
                          .col = i};
  int (*cmp)(const void*, const void*) = ints ? ox_cmp_vocab_int : ox_cmp_vocab_str;
  if (!st) qsort(e, nv, sizeof *e, cmp);
  /* Keys the vocabulary lacks are left out, as ONNX Runtime does. */
  const OxTensor *keys = m->items[0], *vals = m->items[1];
  for (size_t j = 0; !st && j < keys->count; j++) {
    OxVocabEntry probe = {.col = 0};
    if (ints)
      probe.i = ((const int64_t*)keys->data)[j];
    else
      probe.s = ox_tensor_string(keys, j), probe.len = ox_tensor_string_len(keys, j);
    const OxVocabEntry* hit = bsearch(&probe, e, nv, sizeof *e, cmp);
    if (hit) st = ox_ml_put(*out, hit->col, vals, j);
  }
  free(e);
  if (st) {
    ox_tensor_free(*out);
    *out = NULL;
  }
  return st;
}

/* --- CastMap ------------------------------------------------------------------------------------
 */

typedef struct OxKeyAt {
  int64_t key;
  size_t at; /* its position in the map */
} OxKeyAt;

static int ox_cmp_key_at(const void* a, const void* b) {
  int64_t x = ((const OxKeyAt*)a)->key, y = ((const OxKeyAt*)b)->key;
  return (x > y) - (x < y);
}

/* Writes value j of vals (float or string) into element i of out (float,
 * int64 or string), converting as ONNX Runtime does: strings are parsed as a
 * number (an error when none is there or it is out of range), floats printed
 * with six decimals, floats cut toward zero to int64 (an error when out of
 * range or NaN). */
static OnyxStatus* ox_castmap_put(const OxNode* n, OxTensor* out, size_t i, const OxTensor* vals,
                                  size_t j) {
  if (vals->type == ONYX_ELEM_STRING) {
    const char* s = ox_tensor_string(vals, j);
    if (out->type == ONYX_ELEM_STRING) return ox_tensor_copy_strings(out, i, vals, j, 1);
    char* end = NULL;
    errno = 0;
    if (out->type == ONYX_ELEM_FLOAT32) {
      float v = strtof(s, &end);
      if (end == s || errno == ERANGE)
        return ox_ml_err(n, "map value \"%.100s\" is not a float", s);
      ((float*)out->data)[i] = v;
    } else {
      long long v = strtoll(s, &end, 10);
      if (end == s || errno == ERANGE)
        return ox_ml_err(n, "map value \"%.100s\" is not an int64", s);
      ((int64_t*)out->data)[i] = (int64_t)v;
    }
    return NULL;
  }
  float v = ((const float*)vals->data)[j];
  if (out->type == ONYX_ELEM_FLOAT32) {
    ((float*)out->data)[i] = v;
  } else if (out->type == ONYX_ELEM_INT64) {
    /* 2^63 is exact as a float; the range is [-2^63, 2^63). */
    if (!(v >= -9223372036854775808.0f && v < 9223372036854775808.0f))
      return ox_ml_err(n, "map value %g does not fit in an int64", (double)v);
    ((int64_t*)out->data)[i] = (int64_t)v;
  } else {
    char buf[64];
    int len = snprintf(buf, sizeof buf, "%f", (double)v);
    if (len < 0 || (size_t)len >= sizeof buf) {
      /* Six decimals of a float beyond 1e38 still fit in 64 bytes; NaN/inf
       * are short: this is only reached without memory for snprintf. */
      return ox_oom();
    }
    return ox_tensor_set_string(out, i, buf, (size_t)len);
  }
  return NULL;
}

static OnyxStatus* ox_run_castmap(struct OxFrame* f, const OxNode* n, const OxTensor* m,
                                  OxTensor** out) {
  OnyxStatus* st = ox_map_check(m);
  if (st) return ox_status_wrap(st, "node '%s' (%s): input 0", n->name, n->op_type);
  if (m->key_type != ONYX_ELEM_INT64 ||
      (m->type != ONYX_ELEM_FLOAT32 && m->type != ONYX_ELEM_STRING))
    return ox_ml_err(n, "input 0 must be map(int64, float) or map(int64, string), not map(%s, %s)",
                     ox_elem_name(m->key_type), ox_elem_name(m->type));
  OnyxElemType to = ox_castmap_to(n);
  bool sparse = !strcmp(ox_node_attr_string(n, "map_form", "DENSE"), "SPARSE");
  int64_t max_map = ox_node_attr_int(n, "max_map", 1);
  const OxTensor *keys = m->items[0], *vals = m->items[1];
  size_t count = keys->count;
  /* Entries go out in key order (ONNX Runtime's maps are ordered). */
  OxKeyAt* order = malloc((count ? count : 1) * sizeof *order);
  if (!order) return ox_oom();
  for (size_t i = 0; i < count; i++)
    order[i] = (OxKeyAt){((const int64_t*)keys->data)[i], i};
  qsort(order, count, sizeof *order, ox_cmp_key_at);
  int64_t dims[2] = {1, sparse ? max_map : (int64_t)count};
  if (sparse && count && order[0].key < 0)
    st = ox_ml_err(n, "SPARSE map keys are column indices: key %lld is negative",
                   (long long)order[0].key);
  if (!st) st = ox_host_tensor_new(f, n, to, dims, 2, out);
  if (!st && !sparse)
    for (size_t i = 0; !st && i < count; i++)
      st = ox_castmap_put(n, *out, i, vals, order[i].at);
  if (!st && sparse) {
    /* Columns no key names hold 0 ("0.f" for strings, as ONNX Runtime pads). */
    for (int64_t c = 0; !st && to == ONYX_ELEM_STRING && c < max_map; c++)
      st = ox_tensor_set_string(*out, (size_t)c, "0.f", 3);
    for (size_t i = 0; !st && i < count && order[i].key < max_map; i++)
      st = ox_castmap_put(n, *out, (size_t)order[i].key, vals, order[i].at);
  }
  free(order);
  if (st) {
    ox_tensor_free(*out);
    *out = NULL;
  }
  return st;
}

OnyxStatus* ox_ml_map_run(struct OxFrame* f, const OxNode* n, OxTensor* const* ins,
                          OxTensor** outs) {
  const OxTensor* x = n->n_inputs ? ins[0] : NULL;
  if (!x) return ox_ml_err(n, "input 0 is missing");
  if (!strcmp(n->op_type, "ZipMap")) return ox_run_zipmap(f, n, x, &outs[0]);
  if (!strcmp(n->op_type, "DictVectorizer")) return ox_run_dictvec(f, n, x, &outs[0]);
  return ox_run_castmap(f, n, x, &outs[0]);
}
