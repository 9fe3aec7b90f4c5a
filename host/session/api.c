/* api.c — the small public functions: status, values, tensors, run options. */
#include <dlpack/dlpack.h>
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
    const char* const* src = data;
    for (size_t i = 0; i < t->count; i++) {
      OnyxStatus* st = ox_tensor_set_string(t, i, src[i], src[i] ? strlen(src[i]) : 0);
      if (st) {
        ox_tensor_free(t);
        return st;
      }
    }
  } else if (data && bytes) {
    memcpy(t->data, data, bytes);
  }
  return ox_value_from_tensor(t, out);
}

ONYX_API OnyxStatus* onyx_value_create_string_tensor(const int64_t* dims, size_t rank,
                                                     const char* const* strings, const size_t* lens,
                                                     OnyxValue** out) {
  if (!out || (rank && !dims))
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_create_string_tensor: NULL argument");
  *out = NULL;
  OxTensor* t;
  OX_TRY(ox_tensor_new(ONYX_ELEM_STRING, dims, rank, &t));
  if (t->count && !strings) {
    ox_tensor_free(t);
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_create_string_tensor: NULL strings");
  }
  for (size_t i = 0; i < t->count; i++) {
    size_t len = lens ? lens[i] : strings[i] ? strlen(strings[i]) : 0;
    OnyxStatus* st = NULL;
    if (!strings[i] && len)
      st = ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_value_create_string_tensor: string %zu is NULL with length %zu", i, len);
    if (!st) st = ox_tensor_set_string(t, i, strings[i], len);
    if (st) {
      ox_tensor_free(t);
      return st;
    }
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
  return v && v->tensor && v->tensor->vkind == OX_RT_TENSOR ? v->tensor : NULL;
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
ONYX_API size_t onyx_tensor_string_len(const OnyxTensor* t, size_t i) {
  return t ? ox_tensor_string_len(t, i) : 0;
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
  if (v->tensor->vkind != OX_RT_TENSOR)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_save_tensor_proto: not a tensor");
  void* bytes;
  size_t len;
  OX_TRY(ox_tensor_to_proto_bytes(v->tensor, name, &bytes, &len));
  FILE* f = fopen(path, "wb");
  bool ok = f && fwrite(bytes, 1, len, f) == len;
  if (f && fclose(f)) ok = false;
  free(bytes);
  return ok ? NULL : ox_status(ONYX_FAIL, "%s: cannot write the file", path);
}

/* --- sequences and optionals (host/exec/sequence.c runs the ops) --------------------------- */
ONYX_API OnyxValueKind onyx_value_kind(const OnyxValue* v) {
  if (!v || !v->tensor) return ONYX_VALUE_NONE;
  return v->tensor->vkind == OX_RT_SEQUENCE  ? ONYX_VALUE_SEQUENCE
         : v->tensor->vkind == OX_RT_NONE    ? ONYX_VALUE_NONE
         : v->tensor->vkind == OX_RT_MAP     ? ONYX_VALUE_MAP
         : v->tensor->vkind == OX_RT_SEQ_MAP ? ONYX_VALUE_SEQUENCE_MAP
                                             : ONYX_VALUE_TENSOR;
}

ONYX_API size_t onyx_value_sequence_length(const OnyxValue* v) {
  return onyx_value_kind(v) == ONYX_VALUE_SEQUENCE ? v->tensor->n_items : 0;
}

ONYX_API const OnyxTensor* onyx_value_sequence_at(const OnyxValue* v, size_t i) {
  return i < onyx_value_sequence_length(v) ? v->tensor->items[i] : NULL;
}

ONYX_API OnyxElemType onyx_value_elem_type(const OnyxValue* v) {
  return v && v->tensor ? v->tensor->type : ONYX_ELEM_UNDEFINED;
}

ONYX_API OnyxStatus* onyx_value_create_sequence(OnyxElemType elem_type,
                                                const OnyxValue* const* items, size_t count,
                                                OnyxValue** out) {
  if (!out || (count && !items))
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_create_sequence: NULL argument");
  *out = NULL;
  OxTensor* seq;
  OX_TRY(ox_value_new_sequence(elem_type, &seq));
  OnyxStatus* st = NULL;
  for (size_t i = 0; i < count && !st; i++) {
    const OnyxTensor* t = onyx_value_tensor(items[i]);
    if (!t || t->type != elem_type) {
      st = ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_value_create_sequence: item %zu is not a %s tensor", i,
                     ox_elem_name(elem_type));
      break;
    }
    OxTensor* c = NULL;
    st = ox_tensor_clone(t, &c);
    if (!st && (st = ox_sequence_insert(seq, SIZE_MAX, c))) ox_tensor_free(c);
  }
  if (st) {
    ox_tensor_free(seq);
    return st;
  }
  return ox_value_from_tensor(seq, out);
}

ONYX_API OnyxStatus* onyx_value_create_none(OnyxElemType elem_type, OnyxValue** out) {
  if (!out) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_create_none: NULL out");
  *out = NULL;
  OxTensor* t;
  OX_TRY(ox_value_new_none(elem_type, &t));
  return ox_value_from_tensor(t, out);
}

ONYX_API OnyxTypeKind onyx_session_input_kind(const OnyxSession* s, size_t i) {
  return s && i < s->prog.graph->n_inputs ? (OnyxTypeKind)s->prog.graph->inputs[i]->kind
                                          : ONYX_TYPE_TENSOR;
}

ONYX_API OnyxTypeKind onyx_session_output_kind(const OnyxSession* s, size_t i) {
  return s && i < s->prog.graph->n_outputs ? (OnyxTypeKind)s->prog.graph->outputs[i]->kind
                                           : ONYX_TYPE_TENSOR;
}

ONYX_API OnyxStatus* onyx_value_load_proto(const char* path, OnyxTypeKind kind, OnyxValue** out,
                                           char** name) {
  if (!path || !out) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_load_proto: NULL");
  *out = NULL;
  if (name) *name = NULL;
  if ((unsigned)kind > ONYX_TYPE_SEQUENCE_MAP)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_load_proto: unknown kind %d", (int)kind);
  void* data;
  size_t len;
  OX_TRY(ox_read_file(path, (size_t)1 << 32, &data, &len));
  OxTensor* t = NULL;
  OnyxStatus* st = ox_value_from_proto_bytes(data, len, (uint8_t)kind, &t, name);
  free(data);
  if (!st) st = ox_value_from_tensor(t, out);
  if (st && name) {
    free(*name);
    *name = NULL;
  }
  return st ? ox_status_wrap(st, "%s", path) : NULL;
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
  r->log_severity_set = true;
  return NULL;
}

ONYX_API void onyx_run_options_terminate(OnyxRunOptions* r) {
  if (r) __atomic_store_n(&r->terminate, 1, __ATOMIC_RELEASE);
}

/* --- DLPack ------------------------------------------------------------------------------ */
typedef struct OxDlType {
  OnyxElemType onyx;
  uint8_t code, bits;
} OxDlType;

/* Bool has no type code in DLPack 0.6 and is refused both ways. */
static const OxDlType ox_dl_types[] = {
    {ONYX_ELEM_FLOAT32, kDLFloat, 32},     {ONYX_ELEM_FLOAT64, kDLFloat, 64},
    {ONYX_ELEM_FLOAT16, kDLFloat, 16},     {ONYX_ELEM_BFLOAT16, kDLBfloat, 16},
    {ONYX_ELEM_INT8, kDLInt, 8},           {ONYX_ELEM_INT16, kDLInt, 16},
    {ONYX_ELEM_INT32, kDLInt, 32},         {ONYX_ELEM_INT64, kDLInt, 64},
    {ONYX_ELEM_UINT8, kDLUInt, 8},         {ONYX_ELEM_UINT16, kDLUInt, 16},
    {ONYX_ELEM_UINT32, kDLUInt, 32},       {ONYX_ELEM_UINT64, kDLUInt, 64},
    {ONYX_ELEM_COMPLEX64, kDLComplex, 64}, {ONYX_ELEM_COMPLEX128, kDLComplex, 128},
};

#define OX_VENDOR_NVIDIA 0x10de
#define OX_VENDOR_AMD    0x1002

static bool ox_dl_to_memory(DLDevice d, OnyxMemoryDevice* m) {
  *m = OX_HOST_MEMORY;
  switch (d.device_type) {
  case kDLCPU:
    return true;
  case kDLCUDA:
  case kDLROCM:
    *m =
        (OnyxMemoryDevice){.kind = ONYX_DEVICE_GPU,
                           .vendor_id = d.device_type == kDLCUDA ? OX_VENDOR_NVIDIA : OX_VENDOR_AMD,
                           .device_id = d.device_id,
                           .mem_type = ONYX_MEM_DEFAULT,
                           .alignment = 256};
    return true;
  default:
    return false;
  }
}

static bool ox_memory_to_dl(const OnyxMemoryDevice* m, DLDevice* d) {
  if (m->kind == ONYX_DEVICE_CPU) {
    *d = (DLDevice){kDLCPU, 0};
    return true;
  }
  if (m->kind == ONYX_DEVICE_GPU && m->mem_type == ONYX_MEM_DEFAULT &&
      (m->vendor_id == OX_VENDOR_NVIDIA || m->vendor_id == OX_VENDOR_AMD)) {
    *d = (DLDevice){m->vendor_id == OX_VENDOR_NVIDIA ? kDLCUDA : kDLROCM, m->device_id};
    return true;
  }
  return false;
}

/* The imported tensor's buffer calls the producer's deleter when the last
 * Onyx reference goes. */
static void ox_dl_release(void* ctx, void* ptr, size_t bytes) {
  (void)ptr;
  (void)bytes;
  DLManagedTensor* m = ctx;
  if (m->deleter) m->deleter(m);
}

ONYX_API OnyxStatus* onyx_value_from_dlpack(struct DLManagedTensor* managed, OnyxValue** out) {
  if (!managed || !out)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_from_dlpack: NULL argument");
  *out = NULL;
  const DLTensor* t = &managed->dl_tensor;
  if (t->ndim < 0 || (t->ndim > 0 && !t->shape))
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_from_dlpack: bad ndim %d or NULL shape",
                     t->ndim);
  if (t->dtype.lanes != 1)
    return ox_status(ONYX_NOT_IMPLEMENTED, "onyx_value_from_dlpack: vector types (%u lanes)",
                     t->dtype.lanes);
  OnyxElemType type = ONYX_ELEM_UNDEFINED;
  for (size_t i = 0; i < OX_ARRAY_LEN(ox_dl_types); i++)
    if (ox_dl_types[i].code == t->dtype.code && ox_dl_types[i].bits == t->dtype.bits)
      type = ox_dl_types[i].onyx;
  if (type == ONYX_ELEM_UNDEFINED)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "onyx_value_from_dlpack: DLPack type code %u with %u bits has no Onyx "
                     "element type",
                     t->dtype.code, t->dtype.bits);
  OnyxMemoryDevice mem;
  if (!ox_dl_to_memory(t->device, &mem))
    return ox_status(ONYX_NOT_IMPLEMENTED, "onyx_value_from_dlpack: DLPack device type %d",
                     (int)t->device.device_type);
  /* Only compact row-major tensors: strides NULL or equal to the compact ones
   * (a dim of extent 1 may have any stride). */
  int64_t expect = 1;
  for (int32_t i = t->ndim - 1; t->strides && i >= 0; i--) {
    if (t->shape[i] != 1 && t->strides[i] != expect)
      return ox_status(ONYX_NOT_IMPLEMENTED,
                       "onyx_value_from_dlpack: strided (non-contiguous) tensors are not "
                       "supported (dim %d has stride %lld, expected %lld)",
                       i, (long long)t->strides[i], (long long)expect);
    expect *= t->shape[i];
  }
  char* data = (char*)t->data + t->byte_offset;
  if (!data && t->ndim >= 0) {
    size_t count;
    OX_TRY(ox_shape_count(t->shape, (size_t)t->ndim, &count));
    if (count) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_from_dlpack: data is NULL");
  }
  if (mem.kind == ONYX_DEVICE_CPU) {
    uintptr_t a = (uintptr_t)data;
    mem.alignment = a ? (uint32_t)(a & (~a + 1)) : OX_HOST_ALIGN;
    if (mem.alignment > OX_HOST_ALIGN || !mem.alignment) mem.alignment = OX_HOST_ALIGN;
  }
  OxTensor* x;
  OX_TRY(ox_tensor_wrap(type, t->shape, (size_t)t->ndim, data, &mem, &x));
  OxBuffer* b = calloc(1, sizeof *b);
  OnyxValue* v = b ? malloc(sizeof *v) : NULL;
  if (!v) {
    free(b);
    ox_tensor_free(x);
    return ox_oom();
  }
  *b = (OxBuffer){.refs = 1,
                  .ptr = data,
                  .bytes = x->bytes,
                  .type = type,
                  .count = x->count,
                  .release = ox_dl_release,
                  .release_ctx = managed};
  x->buffer = b;
  v->tensor = x;
  *out = v;
  return NULL;
}

/* What an exported tensor keeps alive: a reference to the value's buffer,
 * and its shape. */
typedef struct OxDlExport {
  DLManagedTensor managed;
  OxTensor* tensor;
  int64_t* shape;
} OxDlExport;

static void ox_dl_export_delete(DLManagedTensor* m) {
  OxDlExport* e = m->manager_ctx;
  ox_tensor_free(e->tensor);
  free(e->shape);
  free(e);
}

ONYX_API OnyxStatus* onyx_value_to_dlpack(const OnyxValue* v, struct DLManagedTensor** out) {
  if (!v || !v->tensor || !out)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_to_dlpack: NULL argument");
  if (v->tensor->vkind != OX_RT_TENSOR)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_value_to_dlpack: not a tensor");
  *out = NULL;
  const OxTensor* t = v->tensor;
  const OxDlType* dt = NULL;
  for (size_t i = 0; i < OX_ARRAY_LEN(ox_dl_types) && !dt; i++)
    if (ox_dl_types[i].onyx == t->type) dt = &ox_dl_types[i];
  if (!dt)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "onyx_value_to_dlpack: element type %s has no DLPack 0.6 type",
                     ox_elem_name(t->type));
  DLDevice dev;
  if (!ox_memory_to_dl(&t->device, &dev))
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "onyx_value_to_dlpack: memory kind %d vendor 0x%x has no DLPack device",
                     t->device.kind, t->device.vendor_id);
  if (t->rank > INT32_MAX)
    return ox_status(ONYX_NOT_IMPLEMENTED, "onyx_value_to_dlpack: rank %zu", t->rank);
  OxDlExport* e = calloc(1, sizeof *e);
  int64_t* shape = e ? malloc((t->rank ? t->rank : 1) * sizeof *shape) : NULL;
  OnyxStatus* st = shape ? NULL : ox_oom();
  /* Borrowed data has no owner to share: those values are copied (host). */
  if (!st)
    st = t->buffer ? ox_tensor_view(t, t->dims, t->rank, &e->tensor)
         : t->device.kind == ONYX_DEVICE_CPU
             ? ox_tensor_clone(t, &e->tensor)
             : ox_status(ONYX_NOT_IMPLEMENTED,
                         "onyx_value_to_dlpack: the value borrows device memory it does not own");
  if (st) {
    free(shape);
    free(e);
    return st;
  }
  if (t->rank) memcpy(shape, t->dims, t->rank * sizeof *shape);
  e->shape = shape;
  e->managed.dl_tensor = (DLTensor){.data = e->tensor->data,
                                    .device = dev,
                                    .ndim = (int)t->rank,
                                    .dtype = {dt->code, dt->bits, 1},
                                    .shape = shape,
                                    .strides = NULL,
                                    .byte_offset = 0};
  e->managed.manager_ctx = e;
  e->managed.deleter = ox_dl_export_delete;
  *out = &e->managed;
  return NULL;
}
