/* value_map.c — the public API over map and sequence-of-map values (onyx.h
 * "Maps"); the values are laid out as ox_map.h says. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_map.h"
#include "ox_session.h"

static OnyxStatus* ox_map_wrap(OxTensor* t, OnyxValue** out) {
  OnyxValue* v = malloc(sizeof *v);
  if (!v) {
    ox_tensor_free(t);
    return ox_oom();
  }
  v->tensor = t;
  *out = v;
  return NULL;
}

/* The values of a new map: a copy of a 1-D tensor of count elements. */
static OnyxStatus* ox_map_values_copy(const char* fn, const OnyxValue* values, size_t count,
                                      OxTensor** out) {
  *out = NULL;
  const OxTensor* t = values ? values->tensor : NULL;
  if (!t || t->vkind != OX_RT_TENSOR || t->rank != 1 || t->count != count ||
      t->device.kind != ONYX_DEVICE_CPU)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "%s: values must be a 1-D host tensor of %zu elements (one per key)", fn,
                     count);
  return ox_tensor_clone(t, out);
}

static OnyxStatus* ox_map_key_dims(const char* fn, size_t count, int64_t* dim) {
  if (count > (size_t)INT64_MAX) return ox_status(ONYX_INVALID_ARGUMENT, "%s: count too large", fn);
  *dim = (int64_t)count;
  return NULL;
}

ONYX_API OnyxStatus* onyx_value_create_map_int64(const int64_t* keys, size_t count,
                                                 const OnyxValue* values, OnyxValue** out) {
  const char* fn = "onyx_value_create_map_int64";
  if (!out || (count && !keys)) return ox_status(ONYX_INVALID_ARGUMENT, "%s: NULL argument", fn);
  *out = NULL;
  int64_t dim;
  OX_TRY(ox_map_key_dims(fn, count, &dim));
  OxTensor *k = NULL, *v = NULL, *m = NULL;
  OX_TRY(ox_map_values_copy(fn, values, count, &v));
  OnyxStatus* st = ox_tensor_new_uninit(ONYX_ELEM_INT64, &dim, 1, &k);
  if (st) {
    ox_tensor_free(v);
    return st;
  }
  if (count) memcpy(k->data, keys, count * sizeof *keys);
  st = ox_map_new(k, v, true, &m);
  if (st) return ox_status_wrap(st, "%s", fn);
  return ox_map_wrap(m, out);
}

ONYX_API OnyxStatus* onyx_value_create_map_string(const char* const* keys, const size_t* lens,
                                                  size_t count, const OnyxValue* values,
                                                  OnyxValue** out) {
  const char* fn = "onyx_value_create_map_string";
  if (!out || (count && !keys)) return ox_status(ONYX_INVALID_ARGUMENT, "%s: NULL argument", fn);
  *out = NULL;
  for (size_t i = 0; i < count; i++)
    if (!keys[i]) return ox_status(ONYX_INVALID_ARGUMENT, "%s: key %zu is NULL", fn, i);
  int64_t dim;
  OX_TRY(ox_map_key_dims(fn, count, &dim));
  OxTensor *k = NULL, *v = NULL, *m = NULL;
  OX_TRY(ox_map_values_copy(fn, values, count, &v));
  OnyxStatus* st = ox_tensor_new(ONYX_ELEM_STRING, &dim, 1, &k);
  for (size_t i = 0; !st && i < count; i++)
    st = ox_tensor_set_string(k, i, keys[i], lens ? lens[i] : strlen(keys[i]));
  if (st) {
    ox_tensor_free(k);
    ox_tensor_free(v);
    return st;
  }
  st = ox_map_new(k, v, true, &m);
  if (st) return ox_status_wrap(st, "%s", fn);
  return ox_map_wrap(m, out);
}

static const OxTensor* ox_as_map(const OnyxValue* v) {
  return v && v->tensor && v->tensor->vkind == OX_RT_MAP && v->tensor->n_items == 2 ? v->tensor
                                                                                    : NULL;
}

static bool ox_has_map_types(const OnyxValue* v) {
  return v && v->tensor && (v->tensor->vkind == OX_RT_MAP || v->tensor->vkind == OX_RT_SEQ_MAP);
}

ONYX_API OnyxElemType onyx_value_map_key_type(const OnyxValue* v) {
  return ox_has_map_types(v) ? v->tensor->key_type : ONYX_ELEM_UNDEFINED;
}

ONYX_API OnyxElemType onyx_value_map_value_type(const OnyxValue* v) {
  return ox_has_map_types(v) ? v->tensor->type : ONYX_ELEM_UNDEFINED;
}

ONYX_API size_t onyx_value_map_size(const OnyxValue* v) {
  const OxTensor* m = ox_as_map(v);
  return m ? m->items[0]->count : 0;
}

ONYX_API const OnyxTensor* onyx_value_map_keys(const OnyxValue* v) {
  const OxTensor* m = ox_as_map(v);
  return m ? m->items[0] : NULL;
}

ONYX_API const OnyxTensor* onyx_value_map_values(const OnyxValue* v) {
  const OxTensor* m = ox_as_map(v);
  return m ? m->items[1] : NULL;
}

ONYX_API OnyxStatus* onyx_value_create_map_sequence(OnyxElemType key_type, OnyxElemType value_type,
                                                    const OnyxValue* const* maps, size_t count,
                                                    OnyxValue** out) {
  const char* fn = "onyx_value_create_map_sequence";
  if (!out || (count && !maps)) return ox_status(ONYX_INVALID_ARGUMENT, "%s: NULL argument", fn);
  *out = NULL;
  if (value_type <= ONYX_ELEM_UNDEFINED || value_type >= ONYX_ELEM_TYPE_COUNT)
    return ox_status(ONYX_INVALID_ARGUMENT, "%s: unknown value type %d", fn, (int)value_type);
  OxTensor* seq = NULL;
  OnyxStatus* st = ox_seq_map_new(key_type, value_type, &seq);
  if (st) return ox_status_wrap(st, "%s", fn);
  for (size_t i = 0; !st && i < count; i++) {
    const OxTensor* m = ox_as_map(maps[i]);
    if (!m || m->key_type != key_type || m->type != value_type) {
      st = ox_status(ONYX_INVALID_ARGUMENT, "%s: item %zu is not a map(%s, %s)", fn, i,
                     ox_elem_name(key_type), ox_elem_name(value_type));
      break;
    }
    OxTensor* c = NULL;
    st = ox_tensor_clone(m, &c);
    if (!st) st = ox_seq_map_append(seq, c);
  }
  if (st) {
    ox_tensor_free(seq);
    return st;
  }
  return ox_map_wrap(seq, out);
}

ONYX_API size_t onyx_value_map_sequence_length(const OnyxValue* v) {
  return v && v->tensor && v->tensor->vkind == OX_RT_SEQ_MAP ? v->tensor->n_items : 0;
}

ONYX_API OnyxStatus* onyx_value_map_sequence_at(const OnyxValue* v, size_t i, OnyxValue** out) {
  if (!out) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_map_sequence_at: NULL out");
  *out = NULL;
  if (!v || !v->tensor || v->tensor->vkind != OX_RT_SEQ_MAP)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_value_map_sequence_at: the value is not a sequence of maps");
  if (i >= v->tensor->n_items)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_value_map_sequence_at: index %zu is out of range for %zu maps", i,
                     v->tensor->n_items);
  OxTensor* m;
  OX_TRY(ox_value_share(v->tensor->items[i], &m));
  return ox_map_wrap(m, out);
}

static OnyxElemType ox_decl_map_key(const OxValue* d) {
  return d->kind == OX_VK_MAP || d->kind == OX_VK_SEQ_MAP ? d->map_key : ONYX_ELEM_UNDEFINED;
}

ONYX_API OnyxElemType onyx_session_input_map_key(const OnyxSession* s, size_t i) {
  return s && i < s->prog.graph->n_inputs ? ox_decl_map_key(s->prog.graph->inputs[i])
                                          : ONYX_ELEM_UNDEFINED;
}

ONYX_API OnyxElemType onyx_session_output_map_key(const OnyxSession* s, size_t i) {
  return s && i < s->prog.graph->n_outputs ? ox_decl_map_key(s->prog.graph->outputs[i])
                                           : ONYX_ELEM_UNDEFINED;
}

ONYX_API OnyxStatus* onyx_value_save_map_proto(const OnyxValue* v, const char* name,
                                               const char* path) {
  if (!v || !v->tensor || !path)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_save_map_proto: NULL argument");
  void* bytes = NULL;
  size_t len = 0;
  OnyxStatus* st = ox_map_to_proto_bytes(v->tensor, name, &bytes, &len);
  if (st) return ox_status_wrap(st, "onyx_value_save_map_proto");
  FILE* f = fopen(path, "wb");
  bool ok = f && fwrite(bytes, 1, len, f) == len;
  if (f && fclose(f)) ok = false;
  free(bytes);
  return ok ? NULL : ox_status(ONYX_FAIL, "%s: cannot write the file", path);
}

OnyxStatus* ox_check_map_feed(const OxValue* decl, const OxTensor* t) {
  bool want_seq = decl->kind == OX_VK_SEQ_MAP;
  bool want_map = decl->kind == OX_VK_MAP;
  if (!want_seq && !want_map)
    return ox_status(ONYX_INVALID_ARGUMENT, "input '%s': expected no map value, got a %s",
                     decl->name, t->vkind == OX_RT_MAP ? "map" : "sequence of maps");
  if (t->vkind != (want_seq ? OX_RT_SEQ_MAP : OX_RT_MAP))
    return ox_status(ONYX_INVALID_ARGUMENT, "input '%s': expected a %s", decl->name,
                     want_seq ? "sequence of maps" : "map");
  if (t->key_type != decl->map_key || t->type != decl->type)
    return ox_status(ONYX_INVALID_ARGUMENT, "input '%s': expected map(%s, %s), got map(%s, %s)",
                     decl->name, ox_elem_name(decl->map_key), ox_elem_name(decl->type),
                     ox_elem_name(t->key_type), ox_elem_name(t->type));
  for (size_t i = 0; i < (want_seq ? t->n_items : 1); i++) {
    const OxTensor* m = want_seq ? t->items[i] : t;
    OnyxStatus* st = ox_map_check(m);
    if (!st && (m->key_type != t->key_type || m->type != t->type))
      st = ox_status(ONYX_INVALID_ARGUMENT, "its key or value type differs");
    if (st) {
      if (want_seq) return ox_status_wrap(st, "input '%s': map %zu", decl->name, i);
      return ox_status_wrap(st, "input '%s'", decl->name);
    }
  }
  return NULL;
}
