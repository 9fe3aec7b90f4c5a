/* ir.c — tensors, buffers and attribute helpers of the IR. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* posix_memalign, madvise's MADV_HUGEPAGE */
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "ox_ir.h"

const OnyxMemoryDevice OX_HOST_MEMORY = {ONYX_DEVICE_CPU, 0, 0, ONYX_MEM_DEFAULT, OX_HOST_ALIGN, 0};

bool ox_memory_equal(const OnyxMemoryDevice* a, const OnyxMemoryDevice* b) {
  return a->kind == b->kind && a->vendor_id == b->vendor_id && a->device_id == b->device_id &&
         a->mem_type == b->mem_type;
}

OnyxStatus* ox_shape_count(const int64_t* dims, size_t rank, size_t* count) {
  size_t n = 1;
  for (size_t i = 0; i < rank; i++) {
    if (dims[i] < 0)
      return ox_status(ONYX_INVALID_ARGUMENT, "dimension %zu is negative (%lld)", i,
                       (long long)dims[i]);
    if (!ox_mul_ok(n, (size_t)dims[i], &n))
      return ox_status(ONYX_INVALID_ARGUMENT, "element count overflows at dimension %zu", i);
  }
  *count = n;
  return NULL;
}

/* Bits per element of the sub-byte types. */
static unsigned ox_sub_byte_bits(OnyxElemType t) {
  switch (t) {
  case ONYX_ELEM_UINT4:
  case ONYX_ELEM_INT4:
  case ONYX_ELEM_FLOAT4E2M1:
    return 4;
  case ONYX_ELEM_UINT2:
  case ONYX_ELEM_INT2:
    return 2;
  default:
    return 0;
  }
}

OnyxStatus* ox_type_bytes(OnyxElemType t, size_t count, size_t* bytes) {
  size_t size = t == ONYX_ELEM_STRING ? sizeof(char*) : ox_elem_size(t);
  if (size) {
    if (!ox_mul_ok(count, size, bytes))
      return ox_status(ONYX_INVALID_ARGUMENT, "tensor byte size overflows");
    return NULL;
  }
  unsigned bits = ox_sub_byte_bits(t);
  if (!bits) return ox_status(ONYX_NOT_IMPLEMENTED, "element type %d has no size", (int)t);
  *bytes = count / (8 / bits) + (count % (8 / bits) != 0);
  return NULL;
}

OnyxStatus* ox_tensor_set_shape(OxTensor* t, const int64_t* dims, size_t rank) {
  size_t count, bytes;
  OX_TRY(ox_shape_count(dims, rank, &count));
  OX_TRY(ox_type_bytes(t->type, count, &bytes));
  int64_t* d = t->dims_inline;
  if (rank > OX_DIMS_INLINE) {
    d = t->dims != t->dims_inline && t->rank >= rank ? t->dims : malloc(rank * sizeof *d);
    if (!d) return ox_oom();
  }
  if (rank) memmove(d, dims, rank * sizeof *d);
  if (t->dims && t->dims != t->dims_inline && t->dims != d) free(t->dims);
  t->dims = d;
  t->rank = rank;
  t->count = count;
  t->bytes = bytes;
  return NULL;
}

static OxTensor* ox_tensor_alloc_header(OnyxElemType type) {
  OxTensor* t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->type = type;
  t->dims = t->dims_inline;
  t->device = OX_HOST_MEMORY;
  return t;
}

static void ox_buffer_free_strings(OxBuffer* b) {
  char** s = b->ptr;
  for (size_t i = 0; i < b->count; i++)
    free(s[i]);
}

OxBuffer* ox_buffer_ref(OxBuffer* b) {
  if (b) __atomic_add_fetch(&b->refs, 1, __ATOMIC_RELAXED);
  return b;
}

void ox_buffer_unref(OxBuffer* b) {
  if (!b || __atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  if (b->type == ONYX_ELEM_STRING && b->ptr) ox_buffer_free_strings(b);
  free(b->str_lens);
  if (b->release)
    b->release(b->release_ctx, b->ptr, b->bytes);
  else
    free(b->ptr);
  free(b);
}

void* ox_alloc_host(size_t bytes) {
  const size_t huge = (size_t)2 << 20;
  bytes = bytes ? (bytes + OX_HOST_ALIGN - 1) / OX_HOST_ALIGN * OX_HOST_ALIGN : OX_HOST_ALIGN;
  if (bytes < huge) return aligned_alloc(OX_HOST_ALIGN, bytes);
  void* p = NULL;
  if (posix_memalign(&p, huge, bytes) != 0) return NULL;
#ifdef MADV_HUGEPAGE
  /* advice only: without transparent huge pages it changes nothing */
  (void)madvise(p, bytes / huge * huge, MADV_HUGEPAGE);
#endif
  return p;
}

/* --- the cache of large host blocks ----------------------------------------------------------
 * A graph output of 2 MiB or more is a fresh mmap per run in glibc (its
 * memalign requests stay above the dynamic mmap threshold): the kernel
 * zeroes the new huge pages in its fault handler, about 0.5 ms per 4 MiB
 * on this project's machines, and munmap gives them back when the caller
 * releases the output. Smaller ones fare no better when there are several:
 * three 384 KiB outputs freed together leave more free memory at the top
 * of the heap than glibc keeps, it trims them, and the next run faults
 * them in again (270 page faults a run, 8% of a three-MatMul model's time
 * at 2 threads). While a session is open, blocks from HOST_CACHE_MIN on are
 * kept when freed and handed to the next tensor of the same rounded size
 * (64 KiB steps below 2 MiB, 2 MiB steps from there), as an arena would.
 * At most HOST_CACHE_BLOCKS blocks and HOST_CACHE_BYTES in all; everything
 * goes back to the system when the last session closes. */
#define HOST_HUGE         ((size_t)2 << 20)
#define HOST_CACHE_MIN    ((size_t)256 << 10)
#define HOST_CACHE_STEP   ((size_t)64 << 10)
#define HOST_CACHE_BLOCKS 16
#define HOST_CACHE_BYTES  ((size_t)256 << 20)

static pthread_mutex_t host_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  void* p;
  size_t bytes;
} host_cache[HOST_CACHE_BLOCKS];
static size_t host_cache_n, host_cache_total;
static size_t host_cache_users;

static size_t host_block_bytes(size_t bytes) {
  const size_t step = bytes >= HOST_HUGE ? HOST_HUGE : HOST_CACHE_STEP;
  return (bytes + step - 1) / step * step;
}

void ox_host_cache_hold(void) {
  pthread_mutex_lock(&host_cache_mu);
  host_cache_users++;
  pthread_mutex_unlock(&host_cache_mu);
}

void ox_host_cache_drop(void) {
  void* gone[HOST_CACHE_BLOCKS];
  size_t n = 0;
  pthread_mutex_lock(&host_cache_mu);
  if (host_cache_users && --host_cache_users == 0) {
    for (size_t i = 0; i < host_cache_n; i++)
      gone[n++] = host_cache[i].p;
    host_cache_n = host_cache_total = 0;
  }
  pthread_mutex_unlock(&host_cache_mu);
  for (size_t i = 0; i < n; i++)
    free(gone[i]);
}

void ox_host_cache_stats(size_t* blocks, size_t* bytes) {
  pthread_mutex_lock(&host_cache_mu);
  *blocks = host_cache_n;
  *bytes = host_cache_total;
  pthread_mutex_unlock(&host_cache_mu);
}

/* A cached block of exactly the rounded size, else a new one. */
static void* host_block_take(size_t bytes) {
  const size_t want = host_block_bytes(bytes);
  void* p = NULL;
  pthread_mutex_lock(&host_cache_mu);
  for (size_t i = 0; i < host_cache_n; i++)
    if (host_cache[i].bytes == want) {
      p = host_cache[i].p;
      host_cache_total -= want;
      host_cache[i] = host_cache[--host_cache_n];
      break;
    }
  pthread_mutex_unlock(&host_cache_mu);
  return p ? p : ox_alloc_host(want);
}

/* OxBuffer release of a block from host_block_take (bytes: the tensor's). */
static void host_block_give(void* ctx, void* p, size_t bytes) {
  (void)ctx;
  const size_t size = host_block_bytes(bytes);
  pthread_mutex_lock(&host_cache_mu);
  const bool keep = host_cache_users > 0 && host_cache_n < HOST_CACHE_BLOCKS &&
                    host_cache_total + size <= HOST_CACHE_BYTES;
  if (keep) {
    host_cache[host_cache_n].p = p;
    host_cache[host_cache_n++].bytes = size;
    host_cache_total += size;
  }
  pthread_mutex_unlock(&host_cache_mu);
  if (!keep) free(p);
}

static OnyxStatus* tensor_new(OnyxElemType type, const int64_t* dims, size_t rank, bool zero,
                              OxTensor** out) {
  *out = NULL;
  OxTensor* t = ox_tensor_alloc_header(type);
  if (!t) return ox_oom();
  OnyxStatus* st = ox_tensor_set_shape(t, dims, rank);
  if (st) {
    ox_tensor_free(t);
    return st;
  }
  OxBuffer* b = calloc(1, sizeof *b);
  size_t alloc = (t->bytes + OX_HOST_ALIGN - 1) / OX_HOST_ALIGN * OX_HOST_ALIGN;
  const bool big = type != ONYX_ELEM_STRING && alloc >= HOST_CACHE_MIN;
  OxStrLen* lens = type == ONYX_ELEM_STRING ? calloc(t->count ? t->count : 1, sizeof *lens) : NULL;
  void* p = !b || (type == ONYX_ELEM_STRING && !lens) ? NULL
            : big                                     ? host_block_take(alloc)
                                                      : ox_alloc_host(alloc);
  if (!p) {
    free(lens);
    free(b);
    ox_tensor_free(t);
    return ox_oom();
  }
  if (zero || type == ONYX_ELEM_STRING) memset(p, 0, alloc ? alloc : OX_HOST_ALIGN);
  *b = (OxBuffer){.refs = 1,
                  .ptr = p,
                  .bytes = t->bytes,
                  .type = type,
                  .count = t->count,
                  .str_lens = lens,
                  .release = big ? host_block_give : NULL};
  t->buffer = b;
  t->data = p;
  if (type == ONYX_ELEM_STRING) {
    char** s = p;
    for (size_t i = 0; i < t->count; i++) {
      if (!(s[i] = ox_strdup(""))) {
        ox_tensor_free(t);
        return ox_oom();
      }
    }
  }
  *out = t;
  return NULL;
}

OnyxStatus* ox_tensor_new(OnyxElemType type, const int64_t* dims, size_t rank, OxTensor** out) {
  return tensor_new(type, dims, rank, true, out);
}

OnyxStatus* ox_tensor_new_uninit(OnyxElemType type, const int64_t* dims, size_t rank,
                                 OxTensor** out) {
  return tensor_new(type, dims, rank, false, out);
}

OnyxStatus* ox_tensor_adopt(OnyxElemType type, const int64_t* dims, size_t rank, void* data,
                            OxTensor** out) {
  *out = NULL;
  if (type == ONYX_ELEM_STRING)
    return ox_status(ONYX_INVALID_ARGUMENT, "string tensors cannot adopt raw bytes");
  OxTensor* t = ox_tensor_alloc_header(type);
  if (!t) return ox_oom();
  OnyxStatus* st = ox_tensor_set_shape(t, dims, rank);
  OxBuffer* b = st ? NULL : calloc(1, sizeof *b);
  if (!st && !b) st = ox_oom();
  if (st) {
    ox_tensor_free(t);
    return st;
  }
  *b = (OxBuffer){.refs = 1, .ptr = data, .bytes = t->bytes, .type = type, .count = t->count};
  t->buffer = b;
  t->data = data;
  *out = t;
  return NULL;
}

OnyxStatus* ox_tensor_wrap(OnyxElemType type, const int64_t* dims, size_t rank, void* data,
                           const OnyxMemoryDevice* dev, OxTensor** out) {
  *out = NULL;
  OxTensor* t = ox_tensor_alloc_header(type);
  if (!t) return ox_oom();
  OnyxStatus* st = ox_tensor_set_shape(t, dims, rank);
  if (st) {
    ox_tensor_free(t);
    return st;
  }
  t->data = data;
  if (dev) t->device = *dev;
  *out = t;
  return NULL;
}

OnyxStatus* ox_tensor_view(const OxTensor* src, const int64_t* dims, size_t rank, OxTensor** out) {
  *out = NULL;
  OxTensor* t = ox_tensor_alloc_header(src->type);
  if (!t) return ox_oom();
  OnyxStatus* st = ox_tensor_set_shape(t, dims, rank);
  if (!st && t->count != src->count)
    st = ox_status(ONYX_INVALID_ARGUMENT, "view of %zu elements over a tensor of %zu", t->count,
                   src->count);
  if (st) {
    ox_tensor_free(t);
    return st;
  }
  t->data = src->data;
  t->device = src->device;
  t->buffer = ox_buffer_ref(src->buffer);
  *out = t;
  return NULL;
}

static OnyxStatus* ox_value_header(OnyxElemType type, uint8_t vkind, OxTensor** out) {
  *out = ox_tensor_alloc_header(type);
  if (!*out) return ox_oom();
  (*out)->vkind = vkind;
  return NULL;
}

OnyxStatus* ox_value_new_sequence(OnyxElemType type, OxTensor** out) {
  return ox_value_header(type, OX_RT_SEQUENCE, out);
}

OnyxStatus* ox_value_new_none(OnyxElemType type, OxTensor** out) {
  return ox_value_header(type, OX_RT_NONE, out);
}

OnyxStatus* ox_sequence_insert(OxTensor* seq, size_t pos, OxTensor* item) {
  OxTensor** items = realloc(seq->items, (seq->n_items + 1) * sizeof *items);
  if (!items) return ox_oom();
  seq->items = items;
  if (pos > seq->n_items) pos = seq->n_items;
  memmove(items + pos + 1, items + pos, (seq->n_items - pos) * sizeof *items);
  items[pos] = item;
  seq->n_items++;
  return NULL;
}

OnyxStatus* ox_value_share(const OxTensor* t, OxTensor** out) {
  *out = NULL;
  if (t->vkind == OX_RT_NONE) return ox_value_new_none(t->type, out);
  if (t->vkind == OX_RT_TENSOR) {
    if (t->buffer) return ox_tensor_view(t, t->dims, t->rank, out);
    return ox_tensor_clone(t, out);
  }
  OX_TRY(ox_value_new_sequence(t->type, out));
  (*out)->vkind = t->vkind; /* a sequence, a map or a sequence of maps */
  (*out)->key_type = t->key_type;
  for (size_t i = 0; i < t->n_items; i++) {
    OxTensor* item = NULL;
    OnyxStatus* st = ox_value_share(t->items[i], &item);
    if (!st && (st = ox_sequence_insert(*out, SIZE_MAX, item))) ox_tensor_free(item);
    if (st) {
      ox_tensor_free(*out);
      *out = NULL;
      return st;
    }
  }
  return NULL;
}

OnyxStatus* ox_tensor_clone(const OxTensor* src, OxTensor** out) {
  if (src->vkind == OX_RT_NONE) return ox_value_new_none(src->type, out);
  if (src->vkind == OX_RT_SEQUENCE || src->vkind == OX_RT_MAP || src->vkind == OX_RT_SEQ_MAP) {
    OX_TRY(ox_value_new_sequence(src->type, out));
    (*out)->vkind = src->vkind;
    (*out)->key_type = src->key_type;
    for (size_t i = 0; i < src->n_items; i++) {
      OxTensor* item = NULL;
      OnyxStatus* st = ox_tensor_clone(src->items[i], &item);
      if (!st) st = ox_sequence_insert(*out, SIZE_MAX, item);
      if (st) {
        ox_tensor_free(item);
        ox_tensor_free(*out);
        *out = NULL;
        return st;
      }
    }
    return NULL;
  }
  OX_TRY(ox_tensor_new_uninit(src->type, src->dims, src->rank, out));
  if (src->type != ONYX_ELEM_STRING) {
    if (src->bytes) memcpy((*out)->data, src->data, src->bytes);
    return NULL;
  }
  OnyxStatus* st = ox_tensor_copy_strings(*out, 0, src, 0, src->count);
  if (st) {
    ox_tensor_free(*out);
    *out = NULL;
  }
  return st;
}

void ox_tensor_free(OxTensor* t) {
  if (!t) return;
  for (size_t i = 0; i < t->n_items; i++)
    ox_tensor_free(t->items[i]);
  free(t->items);
  ox_buffer_unref(t->buffer);
  if (t->dims != t->dims_inline) free(t->dims);
  free(t);
}

/* --- strings with their length ---------------------------------------------------------- */

/* The buffer's length record of t's string i, or NULL (no buffer: borrowed
 * strings have no recorded lengths). */
static OxStrLen* ox_string_slot(const OxTensor* t, size_t i) {
  const OxBuffer* b = t->buffer;
  if (!b || b->type != ONYX_ELEM_STRING || !b->str_lens || !b->ptr) return NULL;
  char* const* base = b->ptr;
  char* const* d = t->data;
  if (d < base || (size_t)(d - base) > b->count || i >= b->count - (size_t)(d - base)) return NULL;
  return &b->str_lens[(size_t)(d - base) + i];
}

const char* ox_tensor_string(const OxTensor* t, size_t i) {
  if (t->type != ONYX_ELEM_STRING || i >= t->count || !t->data) return "";
  const char* s = ((char* const*)t->data)[i];
  return s ? s : "";
}

size_t ox_tensor_string_len(const OxTensor* t, size_t i) {
  if (t->type != ONYX_ELEM_STRING || i >= t->count || !t->data) return 0;
  const char* s = ((char* const*)t->data)[i];
  if (!s) return 0;
  const OxStrLen* l = ox_string_slot(t, i);
  return l && l->s == s ? l->len : strlen(s);
}

OnyxStatus* ox_tensor_set_string(OxTensor* t, size_t i, const char* s, size_t len) {
  if (t->type != ONYX_ELEM_STRING || i >= t->count || !t->data)
    return ox_status(ONYX_INVALID_ARGUMENT, "string %zu: not a string tensor or out of range", i);
  if (!s) len = 0;
  if (len == SIZE_MAX) return ox_oom();
  char* c = malloc(len + 1);
  if (!c) return ox_oom();
  if (len) memcpy(c, s, len);
  c[len] = '\0';
  char** d = t->data;
  OxStrLen* l = ox_string_slot(t, i);
  /* Only a string with a NUL byte needs a record: strlen gives the others. */
  if (l) *l = (OxStrLen){memchr(c, 0, len) ? c : NULL, len};
  free(d[i]);
  d[i] = c;
  return NULL;
}

OnyxStatus* ox_tensor_copy_strings(OxTensor* dst, size_t doff, const OxTensor* src, size_t soff,
                                   size_t n) {
  if (src->type != ONYX_ELEM_STRING || dst->type != ONYX_ELEM_STRING || soff > src->count ||
      n > src->count - soff || doff > dst->count || n > dst->count - doff)
    return ox_status(ONYX_FAIL, "internal: string copy out of range");
  for (size_t i = 0; i < n; i++)
    OX_TRY(ox_tensor_set_string(dst, doff + i, ox_tensor_string(src, soff + i),
                                ox_tensor_string_len(src, soff + i)));
  return NULL;
}

void ox_shape_str(OnyxElemType type, const int64_t* dims, int64_t rank, char* buf, size_t len) {
  size_t n = (size_t)snprintf(buf, len, "%s", ox_elem_name(type));
  if (rank < 0) {
    if (n < len) snprintf(buf + n, len - n, "[?]");
    return;
  }
  for (int64_t i = 0; i < rank && n < len; i++) {
    if (dims[i] < 0)
      n += (size_t)snprintf(buf + n, len - n, "%s?", i ? "," : "[");
    else
      n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? "," : "[", (long long)dims[i]);
  }
  if (n < len) snprintf(buf + n, len - n, rank ? "]" : "[]");
}

/* --- attributes --------------------------------------------------------------------- */
void ox_attr_clear(OxAttr* a) {
  free(a->name);
  free(a->s);
  free(a->ints);
  free(a->floats);
  for (size_t i = 0; a->strings && i < a->count; i++)
    free(a->strings[i]);
  free(a->strings);
  free(a->strings_len);
  ox_tensor_free(a->t);
  for (size_t i = 0; a->tensors && i < a->count; i++)
    ox_tensor_free(a->tensors[i]);
  free(a->tensors);
  /* Subgraphs are freed by the graph module (it owns graph teardown). */
  *a = (OxAttr){0};
}

const OxAttr* ox_node_attr(const OxNode* n, const char* name) {
  for (size_t i = 0; i < n->n_attrs; i++)
    if (!strcmp(n->attrs[i].name, name)) return &n->attrs[i];
  return NULL;
}

int64_t ox_node_attr_int(const OxNode* n, const char* name, int64_t fallback) {
  const OxAttr* a = ox_node_attr(n, name);
  return a && a->type == ONYX_ATTR_INT ? a->i : fallback;
}

float ox_node_attr_float(const OxNode* n, const char* name, float fallback) {
  const OxAttr* a = ox_node_attr(n, name);
  return a && a->type == ONYX_ATTR_FLOAT ? a->f : fallback;
}

const char* ox_node_attr_string(const OxNode* n, const char* name, const char* fallback) {
  const OxAttr* a = ox_node_attr(n, name);
  return a && a->type == ONYX_ATTR_STRING ? a->s : fallback;
}

const int64_t* ox_node_attr_ints(const OxNode* n, const char* name, size_t* count) {
  const OxAttr* a = ox_node_attr(n, name);
  if (!a || a->type != ONYX_ATTR_INTS) {
    *count = 0;
    return NULL;
  }
  *count = a->count;
  return a->ints;
}

OnyxStatus* ox_value_set(OxValue* v, OnyxElemType type, int32_t rank, const int64_t* dims) {
  int64_t* d = NULL;
  if (rank > 0) {
    d = malloc((size_t)rank * sizeof *d);
    if (!d) return ox_oom();
    memcpy(d, dims, (size_t)rank * sizeof *d);
  }
  if (v->dim_params) {
    for (int32_t i = 0; i < v->rank; i++)
      free(v->dim_params[i]);
    free(v->dim_params);
    v->dim_params = NULL;
  }
  free(v->dims);
  v->dims = d;
  v->rank = rank < 0 ? -1 : rank;
  v->type = type;
  return NULL;
}

bool ox_domain_is_onnx(const char* domain) {
  return !domain || !*domain || !strcmp(domain, "ai.onnx");
}

int64_t ox_graph_opset(const OxGraph* g, const char* domain) {
  while (g->parent)
    g = g->parent;
  bool onnx = ox_domain_is_onnx(domain);
  for (size_t i = 0; i < g->n_opsets; i++) {
    const char* d = g->opsets[i].domain;
    if (onnx ? ox_domain_is_onnx(d) : !strcmp(d ? d : "", domain)) return g->opsets[i].version;
  }
  return -1;
}
