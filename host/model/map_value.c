/* map_value.c — map and sequence-of-map values (ox_map.h). */
#include <stdlib.h>
#include <string.h>
#include "ox_map.h"

static int ox_cmp_i64(const void* a, const void* b) {
  int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
  return (x > y) - (x < y);
}

typedef struct OxStrRef {
  const char* s;
  size_t len;
} OxStrRef;

static int ox_cmp_str(const void* a, const void* b) {
  const OxStrRef *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = n ? memcmp(x->s, y->s, n) : 0;
  return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* Sorts a copy of the keys and looks for neighbours that are equal. */
static OnyxStatus* ox_map_check_unique(const OxTensor* keys) {
  size_t n = keys->count;
  if (n < 2) return NULL;
  OnyxStatus* st = NULL;
  if (keys->type == ONYX_ELEM_INT64) {
    int64_t* k = malloc(n * sizeof *k);
    if (!k) return ox_oom();
    memcpy(k, keys->data, n * sizeof *k);
    qsort(k, n, sizeof *k, ox_cmp_i64);
    for (size_t i = 1; i < n && !st; i++)
      if (k[i] == k[i - 1])
        st = ox_status(ONYX_INVALID_ARGUMENT, "map key %lld appears twice", (long long)k[i]);
    free(k);
    return st;
  }
  OxStrRef* k = malloc(n * sizeof *k);
  if (!k) return ox_oom();
  for (size_t i = 0; i < n; i++)
    k[i] = (OxStrRef){ox_tensor_string(keys, i), ox_tensor_string_len(keys, i)};
  qsort(k, n, sizeof *k, ox_cmp_str);
  for (size_t i = 1; i < n && !st; i++)
    if (!ox_cmp_str(&k[i], &k[i - 1]))
      st = ox_status(ONYX_INVALID_ARGUMENT, "map key \"%.200s\" appears twice", k[i].s);
  free(k);
  return st;
}

static OnyxStatus* ox_map_check_parts(const OxTensor* keys, const OxTensor* values) {
  if (!keys || !values || keys->vkind != OX_RT_TENSOR || values->vkind != OX_RT_TENSOR)
    return ox_status(ONYX_INVALID_ARGUMENT, "map keys and values must be tensors");
  if (keys->type != ONYX_ELEM_INT64 && keys->type != ONYX_ELEM_STRING)
    return ox_status(ONYX_INVALID_ARGUMENT, "map keys must be int64 or string, not %s",
                     ox_elem_name(keys->type));
  if (keys->rank != 1 || values->rank != 1)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "map keys and values must be 1-D tensors (ranks %zu and %zu)", keys->rank,
                     values->rank);
  if (keys->count != values->count)
    return ox_status(ONYX_INVALID_ARGUMENT, "a map of %zu keys has %zu values", keys->count,
                     values->count);
  if (keys->device.kind != ONYX_DEVICE_CPU || values->device.kind != ONYX_DEVICE_CPU)
    return ox_status(ONYX_INVALID_ARGUMENT, "map keys and values must be in host memory");
  if (values->type == ONYX_ELEM_UNDEFINED)
    return ox_status(ONYX_INVALID_ARGUMENT, "map values have no element type");
  return NULL;
}

OnyxStatus* ox_map_new(OxTensor* keys, OxTensor* values, bool check_unique, OxTensor** out) {
  *out = NULL;
  OnyxStatus* st = ox_map_check_parts(keys, values);
  if (!st && check_unique) st = ox_map_check_unique(keys);
  OxTensor* m = NULL;
  if (!st) st = ox_value_new_sequence(values->type, &m);
  if (!st && !(m->items = malloc(2 * sizeof *m->items))) st = ox_oom();
  if (st) {
    ox_tensor_free(m);
    ox_tensor_free(keys);
    ox_tensor_free(values);
    return st;
  }
  m->vkind = OX_RT_MAP;
  m->key_type = keys->type;
  m->items[0] = keys;
  m->items[1] = values;
  m->n_items = 2;
  *out = m;
  return NULL;
}

OnyxStatus* ox_seq_map_new(OnyxElemType key, OnyxElemType value, OxTensor** out) {
  *out = NULL;
  if (key != ONYX_ELEM_INT64 && key != ONYX_ELEM_STRING)
    return ox_status(ONYX_INVALID_ARGUMENT, "map keys must be int64 or string, not %s",
                     ox_elem_name(key));
  OX_TRY(ox_value_new_sequence(value, out));
  (*out)->vkind = OX_RT_SEQ_MAP;
  (*out)->key_type = key;
  return NULL;
}

OnyxStatus* ox_seq_map_append(OxTensor* seq, OxTensor* map) {
  OnyxStatus* st = NULL;
  if (!map || map->vkind != OX_RT_MAP || map->key_type != seq->key_type || map->type != seq->type)
    st = ox_status(ONYX_INVALID_ARGUMENT, "a sequence of map(%s, %s) takes only such maps",
                   ox_elem_name(seq->key_type), ox_elem_name(seq->type));
  if (!st) st = ox_sequence_insert(seq, SIZE_MAX, map);
  if (st) ox_tensor_free(map);
  return st;
}

OnyxStatus* ox_map_check(const OxTensor* t) {
  if (!t || t->vkind != OX_RT_MAP || t->n_items != 2)
    return ox_status(ONYX_INVALID_ARGUMENT, "not a map value");
  OX_TRY(ox_map_check_parts(t->items[0], t->items[1]));
  if (t->items[0]->type != t->key_type || t->items[1]->type != t->type)
    return ox_status(ONYX_INVALID_ARGUMENT, "a map's key or value type is not its tensors'");
  return NULL;
}
