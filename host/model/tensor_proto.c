/* tensor_proto.c — TensorProto <-> OxTensor: raw_data, typed fields, and
 * external data read (or, on request, mapped) from a file next to the model. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "onnx.pb-c.h"
#include "model_internal.h"

#define OX_DEFAULT_TENSOR_LIMIT OX_DEFAULT_MAX_TENSOR_BYTES

/* Which typed field of TensorProto holds each element type, and the width in
 * bytes each field value takes in our storage. Raw data is little-endian in
 * units of the same width (a complex number is two units). */
typedef enum { F_NONE, F_FLOAT, F_INT32, F_INT64, F_DOUBLE, F_UINT64, F_STRING } OxField;

static const struct {
  uint8_t field;
  uint8_t width;
} ox_type_fields[ONYX_ELEM_TYPE_COUNT] = {
    [ONYX_ELEM_FLOAT32] = {F_FLOAT, 4},
    [ONYX_ELEM_UINT8] = {F_INT32, 1},
    [ONYX_ELEM_INT8] = {F_INT32, 1},
    [ONYX_ELEM_UINT16] = {F_INT32, 2},
    [ONYX_ELEM_INT16] = {F_INT32, 2},
    [ONYX_ELEM_INT32] = {F_INT32, 4},
    [ONYX_ELEM_INT64] = {F_INT64, 8},
    [ONYX_ELEM_STRING] = {F_STRING, 0},
    [ONYX_ELEM_BOOL] = {F_INT32, 1},
    [ONYX_ELEM_FLOAT16] = {F_INT32, 2},
    [ONYX_ELEM_FLOAT64] = {F_DOUBLE, 8},
    [ONYX_ELEM_UINT32] = {F_UINT64, 4},
    [ONYX_ELEM_UINT64] = {F_UINT64, 8},
    [ONYX_ELEM_COMPLEX64] = {F_FLOAT, 4},
    [ONYX_ELEM_COMPLEX128] = {F_DOUBLE, 8},
    [ONYX_ELEM_BFLOAT16] = {F_INT32, 2},
    [ONYX_ELEM_FLOAT8E4M3FN] = {F_INT32, 1},
    [ONYX_ELEM_FLOAT8E4M3FNUZ] = {F_INT32, 1},
    [ONYX_ELEM_FLOAT8E5M2] = {F_INT32, 1},
    [ONYX_ELEM_FLOAT8E5M2FNUZ] = {F_INT32, 1},
    /* Sub-byte types: one int32_data value per packed byte. */
    [ONYX_ELEM_UINT4] = {F_INT32, 1},
    [ONYX_ELEM_INT4] = {F_INT32, 1},
    [ONYX_ELEM_FLOAT4E2M1] = {F_INT32, 1},
    [ONYX_ELEM_FLOAT8E8M0] = {F_INT32, 1},
    [ONYX_ELEM_UINT2] = {F_INT32, 1},
    [ONYX_ELEM_INT2] = {F_INT32, 1},
};

static const char* const ox_field_names[] = {
    "none", "float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"};

static bool ox_host_is_le(void) {
  return __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
}

/* Copies little-endian data into host order (a plain copy on little-endian hosts). */
static void ox_copy_le(void* dst, const void* src, size_t bytes, size_t unit) {
  if (ox_host_is_le() || unit <= 1) {
    if (bytes) memcpy(dst, src, bytes);
    return;
  }
  const uint8_t* s = src;
  uint8_t* d = dst;
  for (size_t i = 0; i + unit <= bytes; i += unit)
    for (size_t b = 0; b < unit; b++)
      d[i + b] = s[i + unit - 1 - b];
}

/* Number of values a typed field holds, and a pointer to them. */
static size_t ox_field_count(const Onnx__TensorProto* tp, OxField f) {
  switch (f) {
  case F_FLOAT:
    return tp->n_float_data;
  case F_INT32:
    return tp->n_int32_data;
  case F_INT64:
    return tp->n_int64_data;
  case F_DOUBLE:
    return tp->n_double_data;
  case F_UINT64:
    return tp->n_uint64_data;
  case F_STRING:
    return tp->n_string_data;
  default:
    return 0;
  }
}

static bool ox_any_typed_field(const Onnx__TensorProto* tp) {
  return tp->n_float_data || tp->n_int32_data || tp->n_int64_data || tp->n_double_data ||
         tp->n_uint64_data || tp->n_string_data;
}

/* Stores the low `width` bytes of v as element i of dst, in host order. */
static void ox_store_narrow(void* dst, size_t i, unsigned width, uint64_t v) {
  switch (width) {
  case 1:
    ((uint8_t*)dst)[i] = (uint8_t)v;
    break;
  case 2:
    ((uint16_t*)dst)[i] = (uint16_t)v;
    break;
  case 4:
    ((uint32_t*)dst)[i] = (uint32_t)v;
    break;
  default:
    ((uint64_t*)dst)[i] = v;
    break;
  }
}

/* Fills t from the typed field; the value count was checked by the caller. */
static void ox_fill_typed(OxTensor* t, const Onnx__TensorProto* tp, OxField f, unsigned width,
                          size_t n) {
  if (!n) return; /* empty fields may be NULL */
  switch (f) {
  case F_FLOAT:
    memcpy(t->data, tp->float_data, n * sizeof(float));
    return;
  case F_INT64:
    memcpy(t->data, tp->int64_data, n * sizeof(int64_t));
    return;
  case F_DOUBLE:
    memcpy(t->data, tp->double_data, n * sizeof(double));
    return;
  case F_INT32:
    for (size_t i = 0; i < n; i++) {
      uint32_t v = (uint32_t)tp->int32_data[i];
      ox_store_narrow(t->data, i, width, t->type == ONYX_ELEM_BOOL ? v != 0 : v);
    }
    return;
  case F_UINT64:
    for (size_t i = 0; i < n; i++)
      ox_store_narrow(t->data, i, width, tp->uint64_data[i]);
    return;
  default:
    return;
  }
}

/* --- shape and size -------------------------------------------------------------- */

typedef struct OxTensorPlan {
  OnyxElemType type;
  const int64_t* dims; /* never NULL, even for scalars */
  size_t rank;
  size_t count, bytes;
  OxField field;
  unsigned width;
} OxTensorPlan;

/* Checks type, dims and the size limit: nothing is allocated before this. */
static OnyxStatus* ox_plan_tensor(const Onnx__TensorProto* tp, size_t max_bytes, OxTensorPlan* p) {
  int32_t dt = tp->has_data_type ? tp->data_type : 0;
  if (dt <= 0 || dt >= ONYX_ELEM_TYPE_COUNT || ox_type_fields[dt].field == F_NONE)
    return ox_status(ONYX_INVALID_MODEL, "unsupported or missing data_type %d", (int)dt);
  static const int64_t no_dims[1] = {0};
  p->type = (OnyxElemType)dt;
  p->dims = tp->dims ? tp->dims : no_dims;
  p->rank = tp->n_dims;
  p->field = (OxField)ox_type_fields[dt].field;
  p->width = ox_type_fields[dt].width;
  if (tp->n_dims > OX_MAX_RANK)
    return ox_status(ONYX_INVALID_MODEL, "rank %zu is over the limit of %d", tp->n_dims,
                     OX_MAX_RANK);
  if (tp->segment)
    return ox_status(ONYX_NOT_IMPLEMENTED, "segmented tensors are not supported yet");
  for (size_t i = 0; i < tp->n_dims; i++)
    if (tp->dims[i] < 0)
      return ox_status(ONYX_INVALID_MODEL, "dimension %zu is negative (%lld)", i,
                       (long long)tp->dims[i]);
  OnyxStatus* st = ox_shape_count(p->dims, p->rank, &p->count);
  if (!st) st = ox_type_bytes(p->type, p->count, &p->bytes);
  if (st) {
    st->code = ONYX_INVALID_MODEL;
    return st;
  }
  if (p->type == ONYX_ELEM_STRING) {
    /* Strings cost their pointer array plus their text. */
    for (size_t i = 0; i < tp->n_string_data && p->bytes <= max_bytes; i++)
      p->bytes += tp->string_data[i].len + 1;
  }
  if (p->bytes > max_bytes)
    return ox_status(ONYX_LIMIT_EXCEEDED, "%s tensor of %zu bytes exceeds the limit of %zu bytes",
                     ox_elem_name(p->type), p->bytes, max_bytes);
  return NULL;
}

/* --- external data ----------------------------------------------------------------- */

typedef struct OxExternal {
  const char* location;
  uint64_t offset, length;
  bool has_length;
} OxExternal;

static OnyxStatus* ox_parse_u64(const char* key, const char* s, uint64_t* out) {
  uint64_t v = 0;
  if (!s || !*s) return ox_status(ONYX_INVALID_MODEL, "external data %s is empty", key);
  for (const char* c = s; *c; c++) {
    if (*c < '0' || *c > '9' || __builtin_mul_overflow(v, 10, &v) ||
        __builtin_add_overflow(v, (uint64_t)(*c - '0'), &v))
      return ox_status(ONYX_INVALID_MODEL, "external data %s '%s' is not a valid byte count", key,
                       s);
  }
  *out = v;
  return NULL;
}

static OnyxStatus* ox_read_external_entries(const Onnx__TensorProto* tp, OxExternal* e) {
  *e = (OxExternal){0};
  for (size_t i = 0; i < tp->n_external_data; i++) {
    const char* k = tp->external_data[i]->key ? tp->external_data[i]->key : "";
    const char* v = tp->external_data[i]->value;
    if (!strcmp(k, "location")) e->location = v;
    if (!strcmp(k, "offset")) OX_TRY(ox_parse_u64(k, v, &e->offset));
    if (!strcmp(k, "length")) {
      OX_TRY(ox_parse_u64(k, v, &e->length));
      e->has_length = true;
    }
  }
  if (!e->location || !*e->location)
    return ox_status(ONYX_INVALID_MODEL, "external data has no location");
  return NULL;
}

/* Refuses locations that could name a file outside the model's folder. */
static OnyxStatus* ox_check_location_text(const char* loc) {
  if (loc[0] == '/' || loc[0] == '\\')
    return ox_status(ONYX_INVALID_MODEL, "external data location '%s' is absolute (refused)", loc);
  for (const char* c = loc; *c;) {
    size_t n = strcspn(c, "/\\");
    if (n == 2 && c[0] == '.' && c[1] == '.')
      return ox_status(ONYX_INVALID_MODEL, "external data location '%s' contains '..' (refused)",
                       loc);
    c += n;
    if (*c) c++;
  }
  return NULL;
}

/* Whether the real path `real` lies in the folder whose real path is `base`. */
static bool ox_path_inside(const char* real, const char* base) {
  size_t n = strlen(base);
  return !strncmp(real, base, n) && (real[n] == '/' || (n && base[n - 1] == '/'));
}

static bool ox_same_file(const struct stat* a, const struct stat* b) {
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

void (*ox_external_race_hook)(const char* base_dir, const char* location);

/* Resolves loc inside base_dir, following symlinks, and refuses a path
 * that leaves the folder. On success *real is the resolved path (malloc'd)
 * and *sb the identity of the file it named at that moment. */
static OnyxStatus* ox_resolve_inside(const char* base_dir, const char* loc, char** real_out,
                                     struct stat* sb) {
  *real_out = NULL;
  char* joined = ox_asprintf("%s/%s", base_dir, loc);
  if (!joined) return ox_oom();
  char* real = realpath(joined, NULL);
  int err = errno;
  free(joined);
  if (!real)
    return ox_status(err == ENOENT ? ONYX_NOT_FOUND : ONYX_INVALID_MODEL,
                     "external data file '%s' (in '%s'): %s", loc, base_dir, strerror(err));
  char* base_real = realpath(base_dir, NULL);
  OnyxStatus* st = NULL;
  if (!base_real)
    st = ox_status(ONYX_NOT_FOUND, "model folder '%s': %s", base_dir, strerror(errno));
  else if (!ox_path_inside(real, base_real))
    st = ox_status(ONYX_INVALID_MODEL,
                   "external data location '%s' resolves to '%s', outside the model folder "
                   "'%s' (refused)",
                   loc, real, base_real);
  else if (stat(real, sb) != 0 || !S_ISREG(sb->st_mode))
    st = ox_status(ONYX_INVALID_MODEL, "external data file '%s' is not a regular file", loc);
  free(base_real);
  if (st)
    free(real);
  else
    *real_out = real;
  return st;
}

/* Opens loc inside base_dir. The time-of-check/time-of-use window between
 * resolving the path and opening it is closed: the resolved path (which has
 * no symlinks left) is opened with O_NOFOLLOW and without blocking (a FIFO
 * must not hang the loader), and the opened file must be the very file
 * (device, inode) the check saw; a symlink or file swapped in between makes
 * them differ and the file is refused. */
static OnyxStatus* ox_open_external(const char* base_dir, const char* loc, int* fd_out) {
  *fd_out = -1;
  OX_TRY(ox_check_location_text(loc));
  char* real;
  struct stat checked, opened;
  OX_TRY(ox_resolve_inside(base_dir, loc, &real, &checked));
  if (ox_external_race_hook) ox_external_race_hook(base_dir, loc);
  int fd = open(real, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW);
  int err = errno;
  free(real);
  if (fd < 0 && err == ELOOP) /* the checked path became a symlink */
    return ox_status(ONYX_INVALID_MODEL,
                     "external data file '%s' changed while it was being opened (refused)", loc);
  if (fd < 0)
    return ox_status(ONYX_INVALID_MODEL, "cannot open external data file '%s': %s", loc,
                     strerror(err));
  if (fstat(fd, &opened) != 0 || !S_ISREG(opened.st_mode) || !ox_same_file(&checked, &opened)) {
    close(fd);
    return ox_status(ONYX_INVALID_MODEL,
                     "external data file '%s' changed while it was being opened (refused)", loc);
  }
  *fd_out = fd;
  return NULL;
}

/* Checks that [offset, offset+length) lies in the file and matches the tensor. */
static OnyxStatus* ox_check_region(int fd, const OxExternal* e, size_t need, uint64_t* len) {
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
    return ox_status(ONYX_INVALID_MODEL, "external data file '%s' is not a regular file",
                     e->location);
  uint64_t size = (uint64_t)sb.st_size;
  if (e->offset > size)
    return ox_status(ONYX_INVALID_MODEL,
                     "external data offset %llu is beyond the end of '%s' (%llu bytes)",
                     (unsigned long long)e->offset, e->location, (unsigned long long)size);
  *len = e->has_length ? e->length : size - e->offset;
  if (*len > size - e->offset)
    return ox_status(ONYX_INVALID_MODEL,
                     "external data offset %llu + length %llu is beyond the end of '%s' (%llu "
                     "bytes)",
                     (unsigned long long)e->offset, (unsigned long long)*len, e->location,
                     (unsigned long long)size);
  if (*len != need)
    return ox_status(ONYX_INVALID_MODEL,
                     "external data in '%s' holds %llu bytes but the dims need %zu bytes",
                     e->location, (unsigned long long)*len, need);
  return NULL;
}

static OnyxStatus* ox_keep_mapping(OxGraph* owner, void* addr, size_t len) {
  OxMapping* m = realloc(owner->mappings, (owner->n_mappings + 1) * sizeof *m);
  if (!m) return ox_oom();
  owner->mappings = m;
  m[owner->n_mappings++] = (OxMapping){addr, len};
  return NULL;
}

/* ONYX_MMAP_FILES=1 maps external data instead of reading it: less memory
 * and a faster load, but a data file truncated or rewritten while a session
 * holds it makes the next run touching it die of SIGBUS (or read changed
 * weights). Off by default. */
static bool ox_external_mmap_wanted(void) {
  const char* v = getenv("ONYX_MMAP_FILES");
  return v && !strcmp(v, "1");
}

/* Reads the region into memory the tensor owns, so later changes to the file
 * do not reach the tensor. A file that ends early (it shrank since it was
 * checked) is an error, not a short tensor. */
static OnyxStatus* ox_tensor_read_region(int fd, uint64_t offset, const OxTensorPlan* p,
                                         OxTensor** out) {
  OX_TRY(ox_tensor_new_uninit(p->type, p->dims, p->rank, out));
  bool swap = !ox_host_is_le() && p->width > 1;
  uint8_t* dst = swap ? malloc(p->bytes) : (*out)->data;
  OnyxStatus* st = NULL;
  if (!dst) st = ox_oom();
  for (size_t done = 0; !st && done < p->bytes;) {
    ssize_t r = pread(fd, dst + done, p->bytes - done, (off_t)(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      st = ox_status(ONYX_FAIL, "cannot read external data: %s", strerror(errno));
    else if (r == 0)
      st = ox_status(ONYX_INVALID_MODEL, "external data file ended early (it shrank while read)");
    else
      done += (size_t)r;
  }
  if (!st && swap) ox_copy_le((*out)->data, dst, p->bytes, p->width);
  if (swap) free(dst);
  if (st) {
    ox_tensor_free(*out);
    *out = NULL;
  }
  return st;
}

/* Reads the region (the default), or with ONYX_MMAP_FILES=1 maps it:
 * the tensor then borrows the mapping when the host is little-endian and the
 * data is aligned for its element type, else copies. */
static OnyxStatus* ox_tensor_from_region(int fd, uint64_t offset, const OxTensorPlan* p,
                                         OxGraph* owner, OxTensor** out) {
  if (p->bytes == 0) return ox_tensor_new(p->type, p->dims, p->rank, out);
  if (!ox_external_mmap_wanted()) return ox_tensor_read_region(fd, offset, p, out);
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t start = offset / page * page;
  size_t map_len = (size_t)(offset - start) + p->bytes;
  /* Private and writable: an optimizer may rewrite a constant in place; the
   * file itself is never written. */
  void* addr = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, (off_t)start);
  if (addr == MAP_FAILED)
    return ox_status(ONYX_FAIL, "cannot map external data: %s", strerror(errno));
  uint8_t* data = (uint8_t*)addr + (offset - start);
  size_t align = p->width > 1 ? p->width : 1;
  OnyxStatus* st;
  if (owner && ox_host_is_le() && (uintptr_t)data % align == 0) {
    st = ox_tensor_wrap(p->type, p->dims, p->rank, data, &OX_HOST_MEMORY, out);
    if (!st) st = ox_keep_mapping(owner, addr, map_len);
    if (!st) return NULL;
    ox_tensor_free(*out);
    *out = NULL;
  } else {
    st = ox_tensor_new_uninit(p->type, p->dims, p->rank, out);
    if (!st) ox_copy_le((*out)->data, data, p->bytes, p->width);
  }
  munmap(addr, map_len);
  return st;
}

static OnyxStatus* ox_tensor_from_external(const Onnx__TensorProto* tp, const OxTensorPlan* p,
                                           const char* base_dir, OxGraph* owner, OxTensor** out) {
  if (p->type == ONYX_ELEM_STRING)
    return ox_status(ONYX_INVALID_MODEL, "string tensors cannot use external data");
  OxExternal e;
  OX_TRY(ox_read_external_entries(tp, &e));
  if (!base_dir)
    return ox_status(ONYX_INVALID_MODEL,
                     "external data '%s' needs the model's folder (model loaded from memory)",
                     e.location);
  int fd = -1;
  OX_TRY(ox_open_external(base_dir, e.location, &fd));
  uint64_t len;
  OnyxStatus* st = ox_check_region(fd, &e, p->bytes, &len);
  if (!st) st = ox_tensor_from_region(fd, e.offset, p, owner, out);
  close(fd);
  return st;
}

/* --- in-message data ------------------------------------------------------------------ */

static OnyxStatus* ox_tensor_from_strings(const Onnx__TensorProto* tp, const OxTensorPlan* p,
                                          OxTensor** out) {
  if (tp->has_raw_data && tp->raw_data.len)
    return ox_status(ONYX_INVALID_MODEL, "string tensors cannot use raw_data");
  if (tp->n_string_data != p->count)
    return ox_status(ONYX_INVALID_MODEL, "string_data has %zu values but the dims need %zu",
                     tp->n_string_data, p->count);
  OX_TRY(ox_tensor_new(ONYX_ELEM_STRING, p->dims, p->rank, out));
  /* The bytes as they are, NULs included. */
  for (size_t i = 0; i < p->count; i++) {
    OnyxStatus* st =
        ox_tensor_set_string(*out, i, (const char*)tp->string_data[i].data, tp->string_data[i].len);
    if (st) {
      ox_tensor_free(*out);
      *out = NULL;
      return st;
    }
  }
  return NULL;
}

/* The tensor takes raw_data's buffer itself where the bytes need no swap
 * and are aligned for the element type (protobuf-c allocates each bytes
 * field on its own, with malloc or the model loader's allocator, both freed
 * with free()): a large model's weights are then copied once, by protobuf-c,
 * instead of twice. Otherwise they are copied. Either way raw_data is empty
 * afterwards. */
static OnyxStatus* ox_tensor_from_raw(Onnx__TensorProto* tp, const OxTensorPlan* p,
                                      OxTensor** out) {
  if (tp->raw_data.len != p->bytes)
    return ox_status(ONYX_INVALID_MODEL, "raw_data has %zu bytes but the dims need %zu (%s)",
                     tp->raw_data.len, p->bytes, ox_elem_name(p->type));
  void* raw = tp->raw_data.data;
  const size_t align = p->width > 1 ? p->width : 1;
  if (raw && p->bytes && (ox_host_is_le() || p->width <= 1) && (uintptr_t)raw % align == 0) {
    OX_TRY(ox_tensor_adopt(p->type, p->dims, p->rank, raw, out));
    tp->raw_data.data = NULL;
    tp->raw_data.len = 0;
    return NULL;
  }
  /* every byte is copied: no zeroing first (it cost as much as the copy) */
  OX_TRY(ox_tensor_new_uninit(p->type, p->dims, p->rank, out));
  ox_copy_le((*out)->data, tp->raw_data.data, p->bytes, p->width);
  return NULL;
}

static OnyxStatus* ox_tensor_from_typed(const Onnx__TensorProto* tp, const OxTensorPlan* p,
                                        OxTensor** out) {
  size_t need = p->bytes / p->width;
  size_t have = ox_field_count(tp, p->field);
  if (have != need) {
    if (!have && ox_any_typed_field(tp))
      return ox_status(ONYX_INVALID_MODEL, "a %s tensor must store its values in %s",
                       ox_elem_name(p->type), ox_field_names[p->field]);
    if (!have)
      return ox_status(ONYX_INVALID_MODEL, "no data: the dims need %zu values in raw_data or %s",
                       need, ox_field_names[p->field]);
    return ox_status(ONYX_INVALID_MODEL, "%s has %zu values but the dims need %zu",
                     ox_field_names[p->field], have, need);
  }
  OX_TRY(ox_tensor_new(p->type, p->dims, p->rank, out));
  ox_fill_typed(*out, tp, p->field, p->width, need);
  return NULL;
}

/* raw_data was copied (or adopted, and is empty): free it now so a large
 * model is not held twice. */
static void ox_release_raw(Onnx__TensorProto* tp) {
  free(tp->raw_data.data);
  tp->raw_data.data = NULL;
  tp->raw_data.len = 0;
}

OnyxStatus* ox_tensor_from_proto(Onnx__TensorProto* tp, const char* base_dir, size_t max_bytes,
                                 OxGraph* owner, OxTensor** out) {
  *out = NULL;
  OxTensorPlan p;
  OX_TRY(ox_plan_tensor(tp, max_bytes ? max_bytes : OX_DEFAULT_TENSOR_LIMIT, &p));
  if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
    return ox_tensor_from_external(tp, &p, base_dir, owner, out);
  if (p.type == ONYX_ELEM_STRING) return ox_tensor_from_strings(tp, &p, out);
  if (tp->has_raw_data) {
    OX_TRY(ox_tensor_from_raw(tp, &p, out));
    ox_release_raw(tp);
    return NULL;
  }
  return ox_tensor_from_typed(tp, &p, out);
}

OnyxStatus* ox_tensor_from_proto_bytes(const void* bytes, size_t len, OxTensor** out, char** name) {
  *out = NULL;
  if (name) *name = NULL;
  Onnx__TensorProto* tp = onnx__tensor_proto__unpack(NULL, len, bytes);
  if (!tp) return ox_status(ONYX_INVALID_MODEL, "not a valid TensorProto (%zu bytes)", len);
  OnyxStatus* st = ox_proto_check_text(&tp->base);
  if (!st) st = ox_tensor_from_proto(tp, NULL, 0, NULL, out);
  if (st) {
    st = ox_status_wrap(st, "tensor '%s'", tp->name ? tp->name : "");
  } else if (name && !(*name = ox_strdup(tp->name ? tp->name : ""))) {
    ox_tensor_free(*out);
    *out = NULL;
    st = ox_oom();
  }
  onnx__tensor_proto__free_unpacked(tp, NULL);
  return st;
}

/* --- OxTensor -> TensorProto --------------------------------------------------------- */

/* Fills tp (initialised here) from t. Large data is borrowed, not copied:
 * tp is valid while t is, and released with ox_tensor_proto_clear. On a
 * big-endian host raw_data is a little-endian copy. */
OnyxStatus* ox_tensor_to_proto(const OxTensor* t, const char* name, Onnx__TensorProto* tp) {
  onnx__tensor_proto__init(tp);
  if (t->device.kind != ONYX_DEVICE_CPU)
    return ox_status(ONYX_INVALID_ARGUMENT, "tensor '%s' is not in host memory", name ? name : "");
  if ((unsigned)t->type >= ONYX_ELEM_TYPE_COUNT || ox_type_fields[t->type].field == F_NONE)
    return ox_status(ONYX_INVALID_ARGUMENT, "tensor '%s' has unsupported element type %d",
                     name ? name : "", (int)t->type);
  tp->name = (char*)(name ? name : "");
  tp->has_data_type = true;
  tp->data_type = (int32_t)t->type;
  tp->n_dims = t->rank;
  tp->dims = t->rank ? malloc(t->rank * sizeof *tp->dims) : NULL;
  if (t->rank && !tp->dims) return ox_oom();
  if (t->rank) memcpy(tp->dims, t->dims, t->rank * sizeof *tp->dims);
  if (t->type == ONYX_ELEM_STRING) {
    tp->n_string_data = t->count;
    tp->string_data = t->count ? calloc(t->count, sizeof *tp->string_data) : NULL;
    if (t->count && !tp->string_data) return ox_oom();
    for (size_t i = 0; i < t->count; i++)
      tp->string_data[i] =
          (ProtobufCBinaryData){ox_tensor_string_len(t, i), (uint8_t*)ox_tensor_string(t, i)};
    return NULL;
  }
  tp->has_raw_data = true;
  tp->raw_data.len = t->bytes;
  tp->raw_data.data = t->bytes ? t->data : NULL;
  if (!ox_host_is_le() && t->bytes) {
    uint8_t* le = malloc(t->bytes);
    if (!le) return ox_oom();
    ox_copy_le(le, t->data, t->bytes, ox_type_fields[t->type].width);
    tp->raw_data.data = le;
  }
  return NULL;
}

void ox_tensor_proto_clear(Onnx__TensorProto* tp) {
  free(tp->dims);
  free(tp->string_data);
  if (!ox_host_is_le()) free(tp->raw_data.data);
  onnx__tensor_proto__init(tp);
}

OnyxStatus* ox_tensor_to_proto_bytes(const OxTensor* t, const char* name, void** bytes,
                                     size_t* len) {
  *bytes = NULL;
  *len = 0;
  Onnx__TensorProto tp;
  OnyxStatus* st = ox_tensor_to_proto(t, name, &tp);
  if (!st) {
    size_t n = onnx__tensor_proto__get_packed_size(&tp);
    uint8_t* buf = malloc(n ? n : 1);
    if (buf) {
      *len = onnx__tensor_proto__pack(&tp, buf);
      *bytes = buf;
    } else {
      st = ox_oom();
    }
  }
  ox_tensor_proto_clear(&tp);
  return st;
}
