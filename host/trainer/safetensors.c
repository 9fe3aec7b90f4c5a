/* safetensors.c — the safetensors format, read and written here: an 8-byte
 * little-endian header length, a JSON header {name: {"dtype", "shape",
 * "data_offsets": [begin, end]}} (offsets from the end of the header, padded
 * with spaces to a multiple of 8 bytes), then the raw little-endian data. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ox_checked.h"
#include "ox_model.h"
#include "ox_train_api.h"

/* The largest header accepted when reading (the format's own limit). */
#define OX_ST_MAX_HEADER (100u << 20)

static const struct {
  OnyxElemType type;
  const char* name;
} ox_st_types[] = {
    {ONYX_ELEM_FLOAT32, "F32"},   {ONYX_ELEM_FLOAT64, "F64"}, {ONYX_ELEM_FLOAT16, "F16"},
    {ONYX_ELEM_BFLOAT16, "BF16"}, {ONYX_ELEM_INT64, "I64"},   {ONYX_ELEM_INT32, "I32"},
    {ONYX_ELEM_INT16, "I16"},     {ONYX_ELEM_INT8, "I8"},     {ONYX_ELEM_UINT8, "U8"},
    {ONYX_ELEM_UINT16, "U16"},    {ONYX_ELEM_UINT32, "U32"},  {ONYX_ELEM_UINT64, "U64"},
    {ONYX_ELEM_BOOL, "BOOL"},
};

static const char* ox_st_dtype(OnyxElemType t) {
  for (size_t i = 0; i < sizeof ox_st_types / sizeof ox_st_types[0]; i++)
    if (ox_st_types[i].type == t) return ox_st_types[i].name;
  return NULL;
}

static OnyxElemType ox_st_type(const char* s) {
  for (size_t i = 0; i < sizeof ox_st_types / sizeof ox_st_types[0]; i++)
    if (!strcmp(ox_st_types[i].name, s)) return ox_st_types[i].type;
  return ONYX_ELEM_UNDEFINED;
}

OnyxStatus* ox_write_atomic(const char* path, const void* data, size_t len) {
  char* tmp = ox_asprintf("%s.tmp%ld", path, (long)getpid());
  if (!tmp) return ox_oom();
  FILE* f = fopen(tmp, "wb");
  if (!f) {
    OnyxStatus* st = ox_status(ONYX_FAIL, "cannot write '%s': %s", tmp, strerror(errno));
    free(tmp);
    return st;
  }
  bool ok = fwrite(data, 1, len, f) == len;
  ok = fflush(f) == 0 && ok;
  ok = fsync(fileno(f)) == 0 && ok;
  ok = fclose(f) == 0 && ok;
  if (ok && rename(tmp, path) == 0) {
    free(tmp);
    return NULL;
  }
  OnyxStatus* st = ox_status(ONYX_FAIL, "cannot write '%s': %s", path, strerror(errno));
  remove(tmp);
  free(tmp);
  return st;
}

OnyxStatus* ox_st_save(const char* path, const char* const* names, OxTensor* const* ts, size_t n) {
  json_t* hdr = json_object();
  if (!hdr) return ox_oom();
  OnyxStatus* st = NULL;
  size_t off = 0;
  for (size_t i = 0; !st && i < n; i++) {
    const OxTensor* t = ts[i];
    const char* dt = ox_st_dtype(t->type);
    if (!dt) {
      st = ox_status(ONYX_NOT_IMPLEMENTED, "safetensors '%s': tensor '%s' of type %s has no dtype",
                     path, names[i], ox_elem_name(t->type));
      break;
    }
    if (json_object_get(hdr, names[i])) {
      st = ox_status(ONYX_INVALID_ARGUMENT, "safetensors '%s': tensor '%s' given twice", path,
                     names[i]);
      break;
    }
    json_t* shape = json_array();
    json_t* offs = json_array();
    json_t* e = json_object();
    for (size_t d = 0; shape && d < t->rank; d++)
      json_array_append_new(shape, json_integer(t->dims[d]));
    size_t end = 0;
    if (!shape || !offs || !e || !ox_add_size(off, t->bytes, &end)) {
      json_decref(shape);
      json_decref(offs);
      json_decref(e);
      st = ox_oom();
      break;
    }
    json_array_append_new(offs, json_integer((json_int_t)off));
    json_array_append_new(offs, json_integer((json_int_t)end));
    json_object_set_new(e, "dtype", json_string(dt));
    json_object_set_new(e, "shape", shape);
    json_object_set_new(e, "data_offsets", offs);
    json_object_set_new(hdr, names[i], e);
    off = end;
  }
  char* text = st ? NULL : json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(hdr);
  if (st) return st;
  if (!text) return ox_oom();
  size_t hlen = strlen(text);
  size_t padded = (hlen + 7) / 8 * 8;
  size_t total = 0;
  uint8_t* buf = NULL;
  if (ox_add_size(8 + padded, off, &total)) buf = malloc(total ? total : 1);
  if (!buf) {
    free(text);
    return ox_oom();
  }
  for (int b = 0; b < 8; b++)
    buf[b] = (uint8_t)((uint64_t)padded >> (8 * b));
  memcpy(buf + 8, text, hlen);
  memset(buf + 8 + hlen, ' ', padded - hlen);
  free(text);
  size_t pos = 8 + padded;
  for (size_t i = 0; i < n; i++) {
    if (ts[i]->bytes) memcpy(buf + pos, ts[i]->data, ts[i]->bytes);
    pos += ts[i]->bytes;
  }
  st = ox_write_atomic(path, buf, total);
  free(buf);
  return st;
}

void ox_st_free_list(char** names, OxTensor** ts, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (names) free(names[i]);
    if (ts) ox_tensor_free(ts[i]);
  }
  free(names);
  free(ts);
}

typedef struct OxStEntry {
  const char* name;
  json_t* e;
  uint64_t begin, end;
} OxStEntry;

static int ox_st_cmp(const void* a, const void* b) {
  const OxStEntry* x = a;
  const OxStEntry* y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Reads one entry's dtype, shape and offsets; the data is read later. */
static OnyxStatus* ox_st_entry(const char* path, OxStEntry* en, size_t data_len, OxTensor** out) {
  const char* what = en->name;
  json_t* dt = json_object_get(en->e, "dtype");
  json_t* shape = json_object_get(en->e, "shape");
  json_t* offs = json_object_get(en->e, "data_offsets");
  if (!json_is_object(en->e) || !json_is_string(dt) || !json_is_array(shape) ||
      !json_is_array(offs) || json_array_size(offs) != 2 ||
      !json_is_integer(json_array_get(offs, 0)) || !json_is_integer(json_array_get(offs, 1)))
    return ox_status(
        ONYX_INVALID_ARGUMENT,
        "safetensors '%s': tensor '%s' needs dtype, shape and data_offsets [begin, end]", path,
        what);
  OnyxElemType type = ox_st_type(json_string_value(dt));
  if (type == ONYX_ELEM_UNDEFINED)
    return ox_status(ONYX_INVALID_ARGUMENT, "safetensors '%s': tensor '%s' has dtype '%s'", path,
                     what, json_string_value(dt));
  size_t rank = json_array_size(shape);
  if (rank > 64)
    return ox_status(ONYX_INVALID_ARGUMENT, "safetensors '%s': tensor '%s' has rank %zu", path,
                     what, rank);
  int64_t dims[64];
  for (size_t d = 0; d < rank; d++) {
    json_t* v = json_array_get(shape, d);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
      return ox_status(ONYX_INVALID_ARGUMENT, "safetensors '%s': tensor '%s' has a bad shape", path,
                       what);
    dims[d] = (int64_t)json_integer_value(v);
  }
  json_int_t b = json_integer_value(json_array_get(offs, 0));
  json_int_t e = json_integer_value(json_array_get(offs, 1));
  OxTensor* t = NULL;
  OX_TRY(ox_tensor_new_uninit(type, dims, rank, &t));
  if (b < 0 || e < b || (uint64_t)e > data_len || (uint64_t)(e - b) != t->bytes) {
    OnyxStatus* st = ox_status(ONYX_INVALID_ARGUMENT,
                               "safetensors '%s': tensor '%s' has data_offsets [%lld, %lld] for "
                               "%zu bytes of data (%zu in the file)",
                               path, what, (long long)b, (long long)e, t->bytes, data_len);
    ox_tensor_free(t);
    return st;
  }
  en->begin = (uint64_t)b;
  en->end = (uint64_t)e;
  *out = t;
  return NULL;
}

OnyxStatus* ox_st_load(const char* path, char*** names_out, OxTensor*** ts_out, size_t* n_out) {
  *names_out = NULL;
  *ts_out = NULL;
  *n_out = 0;
  void* data = NULL;
  size_t len = 0;
  OX_TRY(ox_read_file(path, SIZE_MAX, &data, &len));
  const uint8_t* p = data;
  uint64_t hlen = 0;
  for (int b = 0; len >= 8 && b < 8; b++)
    hlen |= (uint64_t)p[b] << (8 * b);
  if (len < 8 || hlen > OX_ST_MAX_HEADER || hlen > len - 8) {
    free(data);
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "safetensors '%s': a header of %llu bytes does not fit a file of %zu bytes",
                     path, (unsigned long long)hlen, len);
  }
  json_error_t jerr;
  json_t* hdr = json_loadb((const char*)p + 8, (size_t)hlen, 0, &jerr);
  if (!json_is_object(hdr)) {
    json_decref(hdr);
    free(data);
    return ox_status(ONYX_INVALID_ARGUMENT, "safetensors '%s': the header is no JSON object: %s",
                     path, jerr.text);
  }
  const uint8_t* body = p + 8 + hlen;
  size_t body_len = len - 8 - (size_t)hlen;
  size_t cap = json_object_size(hdr);
  OxStEntry* en = calloc(cap ? cap : 1, sizeof *en);
  OxTensor** tmp = calloc(cap ? cap : 1, sizeof *tmp);
  OnyxStatus* st = en && tmp ? NULL : ox_oom();
  size_t n = 0;
  const char* key;
  json_t* val;
  json_object_foreach(hdr, key, val) {
    if (st) break;
    if (!strcmp(key, "__metadata__")) continue;
    en[n].name = key;
    en[n].e = val;
    st = ox_st_entry(path, &en[n], body_len, &tmp[n]);
    if (!st) {
      /* The tensor travels with its entry through the sort below. */
      en[n].e = (json_t*)(void*)tmp[n];
      n++;
    }
  }
  if (!st) qsort(en, n, sizeof *en, ox_st_cmp);
  char** names = st ? NULL : calloc(n ? n : 1, sizeof *names);
  OxTensor** ts = st ? NULL : calloc(n ? n : 1, sizeof *ts);
  if (!st && (!names || !ts)) st = ox_oom();
  for (size_t i = 0; i < n; i++) {
    OxTensor* t = (OxTensor*)(void*)en[i].e;
    if (st) {
      ox_tensor_free(t);
      continue;
    }
    if (t->bytes) memcpy(t->data, body + en[i].begin, t->bytes);
    ts[i] = t;
    names[i] = ox_strdup(en[i].name);
    if (!names[i]) st = ox_oom();
  }
  free(en);
  free(tmp);
  json_decref(hdr);
  free(data);
  if (st) {
    ox_st_free_list(names, ts, n);
    return st;
  }
  *names_out = names;
  *ts_out = ts;
  *n_out = n;
  return NULL;
}
