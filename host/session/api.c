/* api.c — the small public functions: status, values, tensors, run options. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_model.h"
#include "ox_session.h"

#ifndef ONYX_VERSION
#define ONYX_VERSION "0.0.0"
#endif

ONYX_API const char* onyx_version_string(void) {
  return ONYX_VERSION;
}
ONYX_API void onyx_free(void* p) {
  free(p);
}

ONYX_API OnyxStatusCode onyx_status_code(const OnyxStatus* st) {
  return st ? st->code : ONYX_OK;
}
ONYX_API const char* onyx_status_message(const OnyxStatus* st) {
  return st && st->message ? st->message : "";
}
ONYX_API void onyx_status_release(OnyxStatus* st) {
  ox_status_free(st);
}

ONYX_API const char* onyx_status_code_name(OnyxStatusCode code) {
  static const char* const names[] = {"OK",
                                      "FAIL",
                                      "INVALID_ARGUMENT",
                                      "INVALID_MODEL",
                                      "NOT_FOUND",
                                      "NOT_IMPLEMENTED",
                                      "NO_DEVICE",
                                      "ABI_MISMATCH",
                                      "OUT_OF_MEMORY",
                                      "RUNTIME_ERROR",
                                      "CANCELLED",
                                      "INVALID_CONFIG",
                                      "PLACEMENT_ERROR",
                                      "LIMIT_EXCEEDED"};
  return (unsigned)code < OX_ARRAY_LEN(names) ? names[code] : "UNKNOWN";
}

ONYX_API const char* onyx_elem_type_name(OnyxElemType t) {
  return ox_elem_name(t);
}
ONYX_API size_t onyx_elem_type_size(OnyxElemType t) {
  return ox_elem_size(t);
}

/* --- values ------------------------------------------------------------------------- */
static OnyxStatus* ox_value_from_tensor(OxTensor* t, OnyxValue** out) {
  OnyxValue* v = malloc(sizeof *v);
  if (!v) {
    ox_tensor_free(t);
    return ox_oom();
  }
  v->tensor = t;
  *out = v;
  return NULL;
}

ONYX_API OnyxStatus* onyx_value_create_tensor(OnyxElemType type, const int64_t* dims, size_t rank,
                                              const void* data, size_t bytes, OnyxValue** out) {
  if (!out || (rank && !dims))
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_create_tensor: NULL argument");
  *out = NULL;
  if ((unsigned)type >= ONYX_ELEM_TYPE_COUNT || type == ONYX_ELEM_UNDEFINED)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_create_tensor: unknown element type %d",
                     (int)type);
  OxTensor* t;
  OX_TRY(ox_tensor_new(type, dims, rank, &t));
  if (data && bytes != t->bytes) {
    size_t want = t->bytes;
    ox_tensor_free(t);
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_value_create_tensor: %zu bytes given for a tensor of %zu bytes", bytes,
                     want);
  }
  if (data && type == ONYX_ELEM_STRING) {
    char** d = t->data;
    const char* const* src = data;
    for (size_t i = 0; i < t->count; i++) {
      free(d[i]);
      if (!(d[i] = ox_strdup(src[i] ? src[i] : ""))) {
        ox_tensor_free(t);
        return ox_oom();
      }
    }
  } else if (data && bytes) {
    memcpy(t->data, data, bytes);
  }
  return ox_value_from_tensor(t, out);
}

ONYX_API void onyx_value_release(OnyxValue* v) {
  if (!v) return;
  ox_tensor_free(v->tensor);
  free(v);
}

ONYX_API void onyx_values_release(OnyxValue** values, size_t n) {
  for (size_t i = 0; values && i < n; i++) {
    onyx_value_release(values[i]);
    values[i] = NULL;
  }
}

ONYX_API const OnyxTensor* onyx_value_tensor(const OnyxValue* v) {
  return v ? v->tensor : NULL;
}
ONYX_API OnyxElemType onyx_tensor_elem_type(const OnyxTensor* t) {
  return t->type;
}
ONYX_API size_t onyx_tensor_rank(const OnyxTensor* t) {
  return t->rank;
}
ONYX_API const int64_t* onyx_tensor_dims(const OnyxTensor* t) {
  return t->dims;
}
ONYX_API size_t onyx_tensor_elem_count(const OnyxTensor* t) {
  return t->count;
}
ONYX_API size_t onyx_tensor_byte_size(const OnyxTensor* t) {
  return t->bytes;
}
ONYX_API const void* onyx_tensor_data(const OnyxTensor* t) {
  return t->data;
}
ONYX_API const OnyxMemoryDevice* onyx_tensor_memory(const OnyxTensor* t) {
  return &t->device;
}

ONYX_API OnyxStatus* onyx_value_parse_tensor_proto(const void* bytes, size_t len, OnyxValue** out,
                                                   char** name) {
  if (!out) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_parse_tensor_proto: NULL out");
  *out = NULL;
  if (name) *name = NULL;
  OxTensor* t;
  OX_TRY(ox_tensor_from_proto_bytes(bytes, len, &t, name));
  OnyxStatus* st = ox_value_from_tensor(t, out);
  if (st && name) {
    free(*name);
    *name = NULL;
  }
  return st;
}

ONYX_API OnyxStatus* onyx_value_load_tensor_proto(const char* path, OnyxValue** out, char** name) {
  if (!path || !out) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_load_tensor_proto: NULL");
  *out = NULL;
  void* data;
  size_t len;
  OX_TRY(ox_read_file(path, (size_t)1 << 32, &data, &len));
  OnyxStatus* st = onyx_value_parse_tensor_proto(data, len, out, name);
  free(data);
  return st ? ox_status_wrap(st, "%s", path) : NULL;
}

ONYX_API OnyxStatus* onyx_value_save_tensor_proto(const OnyxValue* v, const char* name,
                                                  const char* path) {
  if (!v || !v->tensor || !path)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_save_tensor_proto: NULL argument");
  void* bytes;
  size_t len;
  OX_TRY(ox_tensor_to_proto_bytes(v->tensor, name, &bytes, &len));
  FILE* f = fopen(path, "wb");
  bool ok = f && fwrite(bytes, 1, len, f) == len;
  if (f && fclose(f)) ok = false;
  free(bytes);
  return ok ? NULL : ox_status(ONYX_FAIL, "%s: cannot write the file", path);
}

/* --- run options ------------------------------------------------------------------------- */
ONYX_API OnyxStatus* onyx_run_options_create(OnyxRunOptions** out) {
  if (!out) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_run_options_create: NULL out");
  *out = calloc(1, sizeof **out);
  if (!*out) return ox_oom();
  (*out)->log_severity = ONYX_LOG_WARNING;
  return NULL;
}

ONYX_API void onyx_run_options_release(OnyxRunOptions* r) {
  if (!r) return;
  free(r->tag);
  free(r);
}

ONYX_API OnyxStatus* onyx_run_options_set_tag(OnyxRunOptions* r, const char* tag) {
  if (!r) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_run_options_set_tag: NULL options");
  char* t = ox_strdup(tag ? tag : "");
  if (!t) return ox_oom();
  free(r->tag);
  r->tag = t;
  return NULL;
}

ONYX_API OnyxStatus* onyx_run_options_set_log_severity(OnyxRunOptions* r, OnyxLogSeverity s) {
  if (!r || (unsigned)s > ONYX_LOG_FATAL)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_run_options_set_log_severity: bad argument");
  r->log_severity = s;
  return NULL;
}

ONYX_API void onyx_run_options_terminate(OnyxRunOptions* r) {
  if (r) __atomic_store_n(&r->terminate, 1, __ATOMIC_RELEASE);
}
