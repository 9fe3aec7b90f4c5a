/* map_value.c — map and sequence-of-map values (ox_map.h). */
#include <stdlib.h>
#include <string.h>
#include "ox_map.h"
#include "ox_model.h"

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

/* --- MapProto / SequenceProto writer (the fields ox_map_from_proto_bytes reads) --------------- */

typedef struct OxPb {
  uint8_t* p;
  size_t len, cap;
  bool oom;
} OxPb;

static void ox_pb_put(OxPb* b, const void* d, size_t n) {
  if (b->oom) return;
  if (n > b->cap - b->len) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n && cap <= SIZE_MAX / 2)
      cap *= 2;
    uint8_t* grown = cap - b->len >= n ? realloc(b->p, cap) : NULL;
    if (!grown) {
      b->oom = true;
      return;
    }
    b->p = grown;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->len, d, n);
  b->len += n;
}

static void ox_pb_varint(OxPb* b, uint64_t v) {
  uint8_t c[10];
  size_t n = 0;
  do {
    c[n] = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) c[n] |= 0x80;
    n++;
  } while (v);
  ox_pb_put(b, c, n);
}

static void ox_pb_bytes(OxPb* b, unsigned field, const void* d, size_t n) {
  ox_pb_varint(b, ((uint64_t)field << 3) | 2);
  ox_pb_varint(b, n);
  ox_pb_put(b, d, n);
}

/* One MapProto: keys, then the values as a SequenceProto of scalar tensors. */
static OnyxStatus* ox_map_to_pb(const OxTensor* m, const char* name, OxPb* b) {
  OX_TRY(ox_map_check(m));
  const OxTensor *keys = m->items[0], *vals = m->items[1];
  if (name && *name) ox_pb_bytes(b, 1, name, strlen(name));
  ox_pb_varint(b, 2 << 3);
  ox_pb_varint(b, (uint64_t)keys->type);
  if (keys->type == ONYX_ELEM_INT64) {
    OxPb packed = {0};
    for (size_t i = 0; i < keys->count; i++)
      ox_pb_varint(&packed, (uint64_t)((const int64_t*)keys->data)[i]);
    if (keys->count) ox_pb_bytes(b, 3, packed.p, packed.len);
    b->oom |= packed.oom;
    free(packed.p);
  } else {
    for (size_t i = 0; i < keys->count; i++)
      ox_pb_bytes(b, 4, ox_tensor_string(keys, i), ox_tensor_string_len(keys, i));
  }
  size_t esz = ox_elem_size(vals->type);
  if (vals->type != ONYX_ELEM_STRING && !esz)
    return ox_status(ONYX_NOT_IMPLEMENTED, "map values of element type %s cannot be written",
                     ox_elem_name(vals->type));
  OxPb seq = {0};
  ox_pb_varint(&seq, 2 << 3);
  ox_pb_varint(&seq, 1); /* elem_type TENSOR */
  OnyxStatus* st = NULL;
  for (size_t i = 0; !st && i < vals->count; i++) {
    OxTensor* one = NULL;
    void* bytes = NULL;
    size_t len = 0;
    st = ox_tensor_new(vals->type, NULL, 0, &one);
    if (!st && vals->type == ONYX_ELEM_STRING)
      st = ox_tensor_copy_strings(one, 0, vals, i, 1);
    else if (!st)
      memcpy(one->data, (const char*)vals->data + i * esz, esz);
    if (!st) st = ox_tensor_to_proto_bytes(one, NULL, &bytes, &len);
    if (!st) ox_pb_bytes(&seq, 3, bytes, len);
    free(bytes);
    ox_tensor_free(one);
  }
  if (!st) ox_pb_bytes(b, 5, seq.p, seq.len);
  b->oom |= seq.oom;
  free(seq.p);
  return st;
}

OnyxStatus* ox_map_to_proto_bytes(const OxTensor* v, const char* name, void** bytes, size_t* len) {
  *bytes = NULL;
  *len = 0;
  OxPb b = {0};
  OnyxStatus* st = NULL;
  if (v->vkind == OX_RT_MAP) {
    st = ox_map_to_pb(v, name, &b);
  } else if (v->vkind == OX_RT_SEQ_MAP) {
    if (name && *name) ox_pb_bytes(&b, 1, name, strlen(name));
    ox_pb_varint(&b, 2 << 3);
    ox_pb_varint(&b, 4); /* elem_type MAP */
    for (size_t i = 0; !st && i < v->n_items; i++) {
      OxPb one = {0};
      st = ox_map_to_pb(v->items[i], NULL, &one);
      if (!st) ox_pb_bytes(&b, 6, one.p, one.len);
      b.oom |= one.oom;
      free(one.p);
    }
  } else {
    st = ox_status(ONYX_INVALID_ARGUMENT, "not a map or a sequence of maps");
  }
  if (!st && b.oom) st = ox_oom();
  if (st) {
    free(b.p);
    return st;
  }
  *bytes = b.p ? b.p : malloc(1);
  if (!*bytes) return ox_oom();
  *len = b.len;
  return NULL;
}
