/* gpu_provider.c — the provider table, options, EP lifetime, allocators,
 * copies, streams and events shared by the CUDA and ROCm providers.
 *
 * Without a device (or without a driver) device_count reports zero with the
 * runtime's own error ("cuda: no CUDA device (cudaGetDeviceCount:
 * cudaErrorNoDevice: ...)"). create_ep parses and validates every option
 * before it looks for the device, so option errors are the same on every
 * machine. Memory: device memory (cudaMalloc) for ONYX_MEM_DEFAULT and
 * page-locked host memory for ONYX_MEM_HOST_ACCESSIBLE; the host wraps both
 * in its arena. One stream per EP; copies are queued on it, and the ones whose
 * destination is host memory are waited for before copy_tensors returns.
 * Copies to or from pageable host memory go through a page-locked staging
 * buffer of the EP (see GPU_STAGE_MAX_COPY). */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_ep.h"
#include "gpu_fused.h"

const OnyxHostApi* gpu_host;

#define GPU_MAX_DEVICES 64

const char* gpu_err_text(int err, char* buf, size_t len) {
  const char* name = gpurt_error_name(err);
  const char* text = gpurt_error_string(err);
  /* HIP 5.2 describes some errors by their name alone. */
  if (!strcmp(name, text))
    snprintf(buf, len, "%s", name);
  else
    snprintf(buf, len, "%s: %s", name, text);
  return buf;
}

OnyxStatus* gpu_rt_error(OnyxStatusCode code, int err, const char* what) {
  char buf[256];
  return gpu_host->status_create(code, "%s: %s: %s", gpu_vendor.name, what,
                                 gpu_err_text(err, buf, sizeof buf));
}

/* --- device enumeration --------------------------------------------------------------- */

typedef struct GpuDeviceEntry {
  bool filled;
  GpuDeviceProps props;
  char cc[16], sms[16], mem[32];
  const char* keys[4];
  const char* values[4];
} GpuDeviceEntry;

static pthread_mutex_t g_dev_lock = PTHREAD_MUTEX_INITIALIZER;
static GpuDeviceEntry* g_devices; /* GPU_MAX_DEVICES entries, allocated on first device_info */

static OnyxStatus* gpu_device_count(const OnyxProvider* p, size_t* count) {
  *count = 0;
  int n = 0;
  int err = gpurt_device_count(&n);
  if (err || n <= 0) {
    int driver = 0;
    gpurt_driver_version(&driver);
    char why[512], text[256];
    if (err)
      snprintf(why, sizeof why, "%s: no %s device (%s: %s)%s", gpu_vendor.name, gpu_vendor.label,
               gpu_vendor.count_fn, gpu_err_text(err, text, sizeof text),
               driver ? "" : "; no driver is installed");
    else
      snprintf(why, sizeof why, "%s: no %s device (%s found 0 devices)", gpu_vendor.name,
               gpu_vendor.label, gpu_vendor.count_fn);
    gpu_host->log(ONYX_LOG_INFO, gpu_vendor.name, "%s", why);
    return gpu_host->status_create(ONYX_NO_DEVICE, "%s", why);
  }
  *count = (size_t)(n < GPU_MAX_DEVICES ? n : GPU_MAX_DEVICES);
  return NULL;
}

static OnyxStatus* gpu_device_info(const OnyxProvider* p, size_t index, OnyxDeviceInfo* out) {
  size_t n = 0;
  OnyxStatus* st = gpu_device_count(p, &n);
  if (st) return st;
  if (index >= n)
    return gpu_host->status_create(ONYX_INVALID_ARGUMENT, "%s: device %zu does not exist (%zu)",
                                   gpu_vendor.name, index, n);
  pthread_mutex_lock(&g_dev_lock);
  if (!g_devices) g_devices = calloc(GPU_MAX_DEVICES, sizeof *g_devices);
  GpuDeviceEntry* d = g_devices ? &g_devices[index] : NULL;
  int err = 0;
  if (d && !d->filled) {
    err = gpurt_device_props((int)index, &d->props);
    if (!err) {
      snprintf(d->cc, sizeof d->cc, "%d.%d", d->props.cc_major, d->props.cc_minor);
      snprintf(d->sms, sizeof d->sms, "%d", d->props.multiprocessors);
      snprintf(d->mem, sizeof d->mem, "%" PRIu64, d->props.total_mem);
      d->keys[0] = "compute_capability";
      d->values[0] = d->cc;
      d->keys[1] = "multiprocessors";
      d->values[1] = d->sms;
      d->keys[2] = "arch";
      d->values[2] = d->props.arch;
      d->keys[3] = "memory_bytes";
      d->values[3] = d->mem;
      d->filled = true;
    }
  }
  pthread_mutex_unlock(&g_dev_lock);
  if (!d) return gpu_host->status_create(ONYX_OUT_OF_MEMORY, "%s: out of memory", gpu_vendor.name);
  if (err) return gpu_rt_error(ONYX_FAIL, err, "reading the device's properties");
  /* Fields up to struct_size only (an older host knows fewer). */
  OnyxDeviceInfo info = {.struct_size = out->struct_size,
                         .name = d->props.name,
                         .memory = {.kind = ONYX_DEVICE_GPU,
                                    .vendor_id = gpu_vendor.pci_vendor,
                                    .device_id = (int32_t)index,
                                    .mem_type = ONYX_MEM_DEFAULT,
                                    .alignment = GPU_ALIGN},
                         .memory_bytes = d->props.total_mem,
                         .property_keys = d->keys,
                         .property_values = d->values,
                         .property_count = 4};
  size_t bytes = out->struct_size < sizeof info ? out->struct_size : sizeof info;
  memcpy(out, &info, bytes);
  return NULL;
}

static void gpu_provider_release(const OnyxProvider* p) {
  pthread_mutex_lock(&g_dev_lock);
  free(g_devices);
  g_devices = NULL;
  pthread_mutex_unlock(&g_dev_lock);
}

static OnyxStatus* gpu_register_kernels(const OnyxProvider* p, OnyxKernelRegistry* r) {
  OnyxStatus* st = gpu_register_common_kernels(r);
  if (!st) st = gpu_register_fused_kernels(r); /* com.onyx FusedElementwise: gpu_fused.c */
  if (!st && gpu_vendor.register_kernels) st = gpu_vendor.register_kernels(r);
  return st;
}

/* --- options ------------------------------------------------------------------------------ */

static OnyxStatus* bad_value(const char* key, const char* value, const char* expected) {
  return gpu_host->status_create(ONYX_INVALID_CONFIG, "%s: option '%s' has value '%s'; expected %s",
                                 gpu_vendor.name, key, value, expected);
}

/* A non-negative decimal integer that fits in uint64_t. */
static bool parse_u64(const char* s, uint64_t* out) {
  if (!s || *s < '0' || *s > '9') return false;
  errno = 0;
  char* end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || !end || *end) return false;
  *out = (uint64_t)v;
  return true;
}

static const char* const g_common_keys[] = {"device_id", "gpu_mem_limit", "arena_extend_strategy",
                                            "use_tf32", "enable_cuda_graph"};

/* enable_cuda_graph: 0 off (the default), 1 on (a run that cannot use the
 * graph runs node by node), 2 required (such a run fails). */
static bool parse_graph_mode(const char* v, int* mode) {
  if (!strcmp(v, "0") || !strcmp(v, "false"))
    *mode = 0;
  else if (!strcmp(v, "1") || !strcmp(v, "true"))
    *mode = 1;
  else if (!strcmp(v, "required"))
    *mode = 2;
  else
    return false;
  return true;
}

static OnyxStatus* unknown_key(const char* key) {
  char known[512];
  size_t len = 0;
  known[0] = 0;
  for (size_t i = 0; i < sizeof g_common_keys / sizeof g_common_keys[0]; i++)
    len +=
        (size_t)snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", g_common_keys[i]);
  for (const char* const* k = gpu_vendor.option_keys; k && *k && len < sizeof known; k++)
    len += (size_t)snprintf(known + len, sizeof known - len, ", %s", *k);
  return gpu_host->status_create(ONYX_INVALID_CONFIG, "%s: unknown option '%s' (known: %s)",
                                 gpu_vendor.name, key, known);
}

OnyxStatus* gpu_parse_options(GpuEp* g, const OnyxOptions* o, size_t device_index) {
  g->device = (int)device_index;
  g->extend_pow2 = true;
  g->mem_limit = 0;
  g->conv_algo = 0;
  g->use_tf32 = false;
  size_t n = gpu_host->options_count(o);
  for (size_t i = 0; i < n; i++) {
    const char* key = gpu_host->options_key(o, i);
    const char* v = gpu_host->options_get(o, key);
    if (!key || !v) continue;
    if (!strcmp(key, "device_id")) {
      uint64_t d;
      if (!parse_u64(v, &d) || d >= GPU_MAX_DEVICES)
        return bad_value(key, v, "a device number from 0 to 63");
      if (device_index && d != device_index)
        return gpu_host->status_create(ONYX_INVALID_CONFIG,
                                       "%s: option 'device_id' (%s) contradicts the provider's "
                                       "\"device\" (%zu); give one of them",
                                       gpu_vendor.name, v, device_index);
      g->device = (int)d;
    } else if (!strcmp(key, "gpu_mem_limit")) {
      uint64_t m;
      if (!parse_u64(v, &m) || m == 0)
        return bad_value(key, v, "a positive number of bytes (e.g. 2147483648)");
      g->mem_limit = m;
    } else if (!strcmp(key, "arena_extend_strategy")) {
      if (!strcmp(v, "next_power_of_two") || !strcmp(v, "power_of_two"))
        g->extend_pow2 = true;
      else if (!strcmp(v, "same_as_requested"))
        g->extend_pow2 = false;
      else
        return bad_value(key, v, "next_power_of_two or same_as_requested");
    } else if (!strcmp(key, "use_tf32")) {
      /* JSON booleans arrive as "true" / "false". */
      if (!strcmp(v, "1") || !strcmp(v, "true"))
        g->use_tf32 = true;
      else if (!strcmp(v, "0") || !strcmp(v, "false"))
        g->use_tf32 = false;
      else
        return bad_value(key, v, "0 (float32, the default) or 1 (TF32 tensor-core math)");
    } else if (!strcmp(key, "enable_cuda_graph")) {
      int mode;
      if (!parse_graph_mode(v, &mode))
        return bad_value(key, v,
                         "0 (off, the default), 1 (capture a run as a graph and replay it) or "
                         "required (a run that cannot replay the graph fails)");
    } else {
      bool vendor_key = false;
      for (const char* const* k = gpu_vendor.option_keys; k && *k; k++)
        vendor_key = vendor_key || !strcmp(*k, key);
      if (!vendor_key) return unknown_key(key);
      OnyxStatus* st = gpu_vendor.set_option(g, key, v);
      if (st) return st;
    }
  }
  return NULL;
}

/* --- allocators ------------------------------------------------------------------------------ */

static size_t round_request(const GpuEp* g, size_t bytes) {
  if (!g->extend_pow2 || bytes <= 1) return bytes;
  size_t p = 1;
  while (p < bytes && p <= SIZE_MAX / 2)
    p *= 2;
  return p >= bytes ? p : bytes;
}

static bool track_block(GpuEp* g, void* p, size_t bytes) {
  if (g->n_blocks == g->cap_blocks) {
    size_t cap = g->cap_blocks ? 2 * g->cap_blocks : 16;
    GpuBlock* grown = realloc(g->blocks, cap * sizeof *grown);
    if (!grown) return false;
    g->blocks = grown;
    g->cap_blocks = cap;
  }
  g->blocks[g->n_blocks++] = (GpuBlock){p, bytes};
  g->in_use += bytes;
  return true;
}

static void* gpu_device_alloc(void* ctx, size_t bytes, size_t alignment) {
  GpuEp* g = ctx;
  if (alignment > GPU_ALIGN) return NULL; /* cudaMalloc gives 256-byte alignment */
  size_t want = round_request(g, bytes);
  pthread_mutex_lock(&g->mem_lock);
  if (g->mem_limit && (want > g->mem_limit || g->in_use > g->mem_limit - want)) {
    /* Past gpu_mem_limit: try the exact size before giving up. */
    want = bytes;
    if (want > g->mem_limit || g->in_use > g->mem_limit - want) {
      pthread_mutex_unlock(&g->mem_lock);
      gpu_host->log(ONYX_LOG_WARNING, gpu_vendor.name,
                    "allocation of %zu bytes refused: gpu_mem_limit %" PRIu64 " bytes, %" PRIu64
                    " in use",
                    bytes, g->mem_limit, g->in_use);
      return NULL;
    }
  }
  void* p = NULL;
  int err = gpurt_set_device(g->device);
  if (!err) err = gpurt_malloc(&p, want);
  if (!err && !track_block(g, p, want)) {
    gpurt_free(p);
    p = NULL;
  }
  pthread_mutex_unlock(&g->mem_lock);
  if (err) {
    gpu_host->log(ONYX_LOG_WARNING, gpu_vendor.name, "device allocation of %zu bytes failed: %s",
                  want, gpurt_error_string(err));
    return NULL;
  }
  return p;
}

static void gpu_device_free(void* ctx, void* ptr) {
  GpuEp* g = ctx;
  if (!ptr) return;
  bool found = false;
  pthread_mutex_lock(&g->mem_lock);
  for (size_t i = 0; i < g->n_blocks; i++) {
    if (g->blocks[i].ptr == ptr) {
      g->in_use -= g->blocks[i].bytes;
      g->blocks[i] = g->blocks[--g->n_blocks];
      found = true;
      break;
    }
  }
  pthread_mutex_unlock(&g->mem_lock);
  if (!found) {
    gpu_host->log(ONYX_LOG_ERROR, gpu_vendor.name, "free of %p, not a live device block", ptr);
    return;
  }
  gpurt_set_device(g->device);
  gpurt_free(ptr);
}

static void* gpu_pinned_alloc(void* ctx, size_t bytes, size_t alignment) {
  GpuEp* g = ctx;
  if (alignment > GPU_ALIGN) return NULL;
  void* p = NULL;
  int err = gpurt_set_device(g->device);
  if (!err) err = gpurt_host_alloc(&p, bytes);
  if (err) {
    gpu_host->log(ONYX_LOG_WARNING, gpu_vendor.name, "pinned allocation of %zu bytes failed: %s",
                  bytes, gpurt_error_string(err));
    return NULL;
  }
  return p;
}

static void gpu_pinned_free(void* ctx, void* ptr) {
  if (ptr) gpurt_host_free(ptr);
}

static const OnyxAllocator* gpu_get_allocator(OnyxEp* ep, OnyxMemType type) {
  GpuEp* g = gpu_ep(ep);
  if (type == ONYX_MEM_DEFAULT) return &g->device_alloc;
  if (type == ONYX_MEM_HOST_ACCESSIBLE) return &g->pinned_alloc;
  return NULL; /* read-only weights: the host keeps them and copies them to DEFAULT */
}

/* --- copies ------------------------------------------------------------------------------------
 */

static bool is_mine(const GpuEp* g, const OnyxMemoryDevice* m) {
  return m && m->kind == ONYX_DEVICE_GPU && m->vendor_id == gpu_vendor.pci_vendor &&
         m->device_id == g->device && m->mem_type == ONYX_MEM_DEFAULT;
}

static bool is_host(const OnyxMemoryDevice* m) {
  return m && m->kind == ONYX_DEVICE_CPU;
}

static int gpu_can_copy(OnyxEp* ep, const OnyxMemoryDevice* src, const OnyxMemoryDevice* dst) {
  GpuEp* g = gpu_ep(ep);
  return (is_mine(g, src) && (is_mine(g, dst) || is_host(dst))) ||
         (is_host(src) && is_mine(g, dst));
}

static OnyxStatus* check_stream(GpuEp* g, const OnyxStream* s, const char* slot) {
  if (s && (s->magic != GPU_STREAM_MAGIC || s->owner != g))
    return gpu_host->status_create(ONYX_INVALID_ARGUMENT, "%s: %s: stream %p is not this EP's",
                                   gpu_vendor.name, slot, (const void*)s);
  return NULL;
}

/* Copies between this device and pageable host memory go through the EP's
 * page-locked staging buffer when a pair has at most GPU_STAGE_MAX_COPY
 * bytes and the call's staged pairs together at most GPU_STAGE_MAX_TOTAL
 * (the buffer's largest size); larger ones are left to the runtime, which
 * stages pageable memory itself, synchronously. Host -> device: the host
 * bytes are copied into the buffer and the DMA from it is queued, so the
 * call returns before the data moved (the source may be reused at once).
 * Device -> host: the DMA into the buffer, the wait for the stream, then the
 * copy out to the destination. */
#define GPU_STAGE_MAX_COPY  ((size_t)16 << 20)
#define GPU_STAGE_MAX_TOTAL ((size_t)64 << 20)
#define GPU_STAGE_MIN       ((size_t)1 << 20)
#define GPU_NOT_STAGED      SIZE_MAX

/* Host memory that is not page-locked by this vendor's runtime. */
static bool is_pageable(const OnyxMemoryDevice* m) {
  return is_host(m) && m->vendor_id != gpu_vendor.pci_vendor;
}

/* Makes stage hold at least `bytes` and free to overwrite: waits for the
 * last device copy out of it, then grows it (a power of two, at least
 * GPU_STAGE_MIN, at most GPU_STAGE_MAX_TOTAL). Under stage_lock. Returns the
 * runtime's error (0: ready). */
static int stage_reserve(GpuEp* g, size_t bytes) {
  int err = 0;
  if (g->stage_pending) {
    err = gpurt_event_sync(g->stage_event);
    g->stage_pending = false;
    if (err) return err;
  }
  if (!g->stage_event && (err = gpurt_event_create(&g->stage_event))) {
    g->stage_event = NULL;
    return err;
  }
  if (bytes <= g->stage_bytes) return 0;
  size_t want = GPU_STAGE_MIN;
  while (want < bytes && want < GPU_STAGE_MAX_TOTAL)
    want *= 2;
  if (g->stage) gpurt_host_free(g->stage);
  g->stage = NULL;
  g->stage_bytes = 0;
  err = gpurt_host_alloc(&g->stage, want);
  if (err) {
    g->stage = NULL;
    return err;
  }
  g->stage_bytes = want;
  gpu_host->log(ONYX_LOG_VERBOSE, gpu_vendor.name,
                "page-locked staging buffer of %zu bytes allocated for copies between the device "
                "and pageable host memory (reused by later copies; grown when a call needs more)",
                want);
  return 0;
}

static void stage_release(GpuEp* g) {
  if (!g->stage_event && !g->stage) return;
  gpurt_set_device(g->device);
  if (g->stage_pending) gpurt_event_sync(g->stage_event);
  g->stage_pending = false;
  if (g->stage_event) gpurt_event_destroy(g->stage_event);
  if (g->stage) gpurt_host_free(g->stage);
  g->stage_event = g->stage = NULL;
  g->stage_bytes = 0;
}

/* The kind of copy pair i is, or an error naming it. */
static OnyxStatus* copy_kind(GpuEp* g, const OnyxTensor* src, const OnyxTensor* dst, size_t i,
                             GpuCopyKind* kind) {
  const OnyxHostApi* H = gpu_host;
  size_t bytes = H->tensor_byte_size(src);
  if (bytes != H->tensor_byte_size(dst))
    return H->status_create(ONYX_INVALID_ARGUMENT,
                            "%s: copy %zu: source has %zu bytes, destination %zu", gpu_vendor.name,
                            i, bytes, H->tensor_byte_size(dst));
  const OnyxMemoryDevice* ms = H->tensor_memory(src);
  const OnyxMemoryDevice* md = H->tensor_memory(dst);
  if (is_mine(g, ms) && is_mine(g, md))
    *kind = GPU_COPY_D2D;
  else if (is_mine(g, ms) && is_host(md))
    *kind = GPU_COPY_D2H;
  else if (is_host(ms) && is_mine(g, md))
    *kind = GPU_COPY_H2D;
  else
    return H->status_create(ONYX_INVALID_ARGUMENT,
                            "%s: copy %zu: cannot copy from memory kind %d vendor 0x%x device "
                            "%d to kind %d vendor 0x%x device %d",
                            gpu_vendor.name, i, ms ? ms->kind : -1, ms ? ms->vendor_id : 0u,
                            ms ? ms->device_id : -1, md ? md->kind : -1, md ? md->vendor_id : 0u,
                            md ? md->device_id : -1);
  return NULL;
}

static OnyxStatus* gpu_copy_tensors(OnyxEp* ep, const OnyxTensor* const* src,
                                    OnyxTensor* const* dst, size_t n, OnyxStream* stream) {
  GpuEp* g = gpu_ep(ep);
  const OnyxHostApi* H = gpu_host;
  OnyxStatus* st = check_stream(g, stream, "copy_tensors");
  if (st) return st;
  /* Every pair is checked before any is queued; off[i] is pair i's offset
   * in the staging buffer, or GPU_NOT_STAGED. */
  size_t* off = n ? malloc(n * sizeof *off) : NULL;
  if (n && !off)
    return H->status_create(ONYX_OUT_OF_MEMORY, "%s: copy_tensors: out of memory", gpu_vendor.name);
  size_t staged = 0;
  for (size_t i = 0; i < n; i++) {
    GpuCopyKind kind;
    st = copy_kind(g, src[i], dst[i], i, &kind);
    if (st) {
      free(off);
      return st;
    }
    size_t bytes = H->tensor_byte_size(src[i]);
    bool pageable = (kind == GPU_COPY_H2D && is_pageable(H->tensor_memory(src[i]))) ||
                    (kind == GPU_COPY_D2H && is_pageable(H->tensor_memory(dst[i])));
    off[i] = GPU_NOT_STAGED;
    if (!pageable || !bytes || bytes > GPU_STAGE_MAX_COPY) continue;
    size_t padded = (bytes + GPU_ALIGN - 1) / GPU_ALIGN * GPU_ALIGN; /* bytes <= 16 MiB */
    if (padded <= GPU_STAGE_MAX_TOTAL - staged) {                    /* staged <= the total */
      off[i] = staged;
      staged += padded;
    }
  }
  int err = gpurt_set_device(g->device);
  if (err) {
    free(off);
    return gpu_rt_error(ONYX_RUNTIME_ERROR, err, "copy_tensors: selecting the device");
  }
  void* s = stream ? stream->handle : NULL;
  if (staged) {
    pthread_mutex_lock(&g->stage_lock);
    err = stage_reserve(g, staged);
    if (err) {
      /* No staging buffer: the runtime copies pageable memory itself. */
      gpu_host->log(ONYX_LOG_WARNING, gpu_vendor.name,
                    "copy_tensors: no page-locked staging buffer of %zu bytes (%s); copying "
                    "pageable memory directly",
                    staged, gpurt_error_string(err));
      pthread_mutex_unlock(&g->stage_lock);
      for (size_t i = 0; i < n; i++)
        off[i] = GPU_NOT_STAGED;
      staged = 0;
      err = 0;
    }
  }
  bool wait = !stream, staged_h2d = false, staged_d2h = false;
  const char* what = "copy_tensors";
  for (size_t i = 0; i < n && !err; i++) {
    GpuCopyKind kind;
    copy_kind(g, src[i], dst[i], i, &kind); /* checked above */
    size_t bytes = H->tensor_byte_size(src[i]);
    void* to = H->tensor_mutable_data(dst[i]);
    const void* from = H->tensor_data(src[i]);
    if (off[i] != GPU_NOT_STAGED) {
      char* buf = (char*)g->stage + off[i];
      if (kind == GPU_COPY_H2D) {
        memcpy(buf, from, bytes);
        err = gpurt_memcpy_async(to, buf, bytes, kind, s);
        staged_h2d = true;
      } else {
        err = gpurt_memcpy_async(buf, from, bytes, kind, s);
        staged_d2h = wait = true;
      }
      continue;
    }
    /* The host reads (or frees and reuses) host memory as soon as we return:
     * a copy to host memory, or from page-locked memory (which the device
     * reads asynchronously), is waited for below. */
    if (kind == GPU_COPY_D2H ||
        (kind == GPU_COPY_H2D && H->tensor_memory(src[i])->vendor_id == gpu_vendor.pci_vendor))
      wait = true;
    err = gpurt_memcpy_async(to, from, bytes, kind, s);
  }
  /* A staged host -> device copy that nothing waits for: the event marks
   * when the buffer is free again. */
  if (!err && staged_h2d && !wait) {
    err = gpurt_event_record(g->stage_event, s);
    if (err)
      what = "copy_tensors: recording the staging buffer's event";
    else
      g->stage_pending = true;
  }
  /* After a failure, too, nothing may still read the buffer once it is
   * unlocked. */
  if (wait || (err && staged)) {
    int serr = gpurt_stream_sync(s);
    if (!err && serr) {
      err = serr;
      what = "copy_tensors: waiting for the copies";
    }
  }
  if (!err && staged_d2h)
    for (size_t i = 0; i < n; i++)
      if (off[i] != GPU_NOT_STAGED && H->tensor_memory(dst[i])->kind == ONYX_DEVICE_CPU &&
          is_mine(g, H->tensor_memory(src[i])))
        memcpy(H->tensor_mutable_data(dst[i]), (char*)g->stage + off[i],
               H->tensor_byte_size(src[i]));
  if (staged) pthread_mutex_unlock(&g->stage_lock);
  free(off);
  return err ? gpu_rt_error(ONYX_RUNTIME_ERROR, err, what) : NULL;
}

/* --- streams and events ----------------------------------------------------------------------- */

static OnyxStatus* gpu_create_stream(OnyxEp* ep, OnyxStream** out) {
  GpuEp* g = gpu_ep(ep);
  *out = NULL;
  OnyxStream* s = calloc(1, sizeof *s);
  if (!s) return gpu_host->status_create(ONYX_OUT_OF_MEMORY, "%s: out of memory", gpu_vendor.name);
  int err = gpurt_set_device(g->device);
  if (!err) err = gpurt_stream_create(&s->handle);
  if (err) {
    free(s);
    return gpu_rt_error(ONYX_RUNTIME_ERROR, err, "creating a stream");
  }
  s->magic = GPU_STREAM_MAGIC;
  s->owner = g;
  *out = s;
  return NULL;
}

static void gpu_release_stream(OnyxEp* ep, OnyxStream* s) {
  GpuEp* g = gpu_ep(ep);
  if (!s) return;
  if (check_stream(g, s, "release_stream")) {
    gpu_host->log(ONYX_LOG_ERROR, gpu_vendor.name, "release_stream of a foreign stream %p",
                  (void*)s);
    return;
  }
  gpurt_set_device(g->device);
  gpurt_stream_sync(s->handle);
  gpurt_stream_destroy(s->handle);
  s->magic = 0;
  free(s);
}

static OnyxStatus* gpu_sync_stream(OnyxEp* ep, OnyxStream* s) {
  GpuEp* g = gpu_ep(ep);
  OnyxStatus* st = check_stream(g, s, "sync_stream");
  if (st) return st;
  int err = gpurt_set_device(g->device);
  if (!err) err = gpurt_stream_sync(s ? s->handle : NULL);
  /* A kernel's asynchronous failure shows here; report and clear it. */
  if (!err) err = gpurt_last_error();
  return err ? gpu_rt_error(ONYX_RUNTIME_ERROR, err, "synchronizing the stream") : NULL;
}

static OnyxStatus* check_event(GpuEp* g, const OnyxEvent* e, const char* slot) {
  if (!e || e->magic != GPU_EVENT_MAGIC || e->owner != g)
    return gpu_host->status_create(ONYX_INVALID_ARGUMENT, "%s: %s: event %p is not this EP's",
                                   gpu_vendor.name, slot, (const void*)e);
  return NULL;
}

static OnyxStatus* gpu_create_event(OnyxEp* ep, OnyxEvent** out) {
  GpuEp* g = gpu_ep(ep);
  *out = NULL;
  OnyxEvent* e = calloc(1, sizeof *e);
  if (!e) return gpu_host->status_create(ONYX_OUT_OF_MEMORY, "%s: out of memory", gpu_vendor.name);
  int err = gpurt_set_device(g->device);
  if (!err) err = gpurt_event_create(&e->handle);
  if (err) {
    free(e);
    return gpu_rt_error(ONYX_RUNTIME_ERROR, err, "creating an event");
  }
  e->magic = GPU_EVENT_MAGIC;
  e->owner = g;
  *out = e;
  return NULL;
}

static OnyxStatus* gpu_record_event(OnyxEp* ep, OnyxEvent* e, OnyxStream* s) {
  GpuEp* g = gpu_ep(ep);
  OnyxStatus* st = check_event(g, e, "record_event");
  if (!st) st = check_stream(g, s, "record_event");
  if (st) return st;
  int err = gpurt_set_device(g->device);
  if (!err) err = gpurt_event_record(e->handle, s ? s->handle : NULL);
  return err ? gpu_rt_error(ONYX_RUNTIME_ERROR, err, "recording an event") : NULL;
}

static OnyxStatus* gpu_wait_event(OnyxEp* ep, OnyxEvent* e, OnyxStream* s) {
  GpuEp* g = gpu_ep(ep);
  OnyxStatus* st = check_event(g, e, "wait_event");
  if (!st) st = check_stream(g, s, "wait_event");
  if (st) return st;
  int err = gpurt_set_device(g->device);
  if (!err) err = s ? gpurt_stream_wait_event(s->handle, e->handle) : gpurt_event_sync(e->handle);
  return err ? gpu_rt_error(ONYX_RUNTIME_ERROR, err, "waiting for an event") : NULL;
}

static void gpu_release_event(OnyxEp* ep, OnyxEvent* e) {
  GpuEp* g = gpu_ep(ep);
  if (!e) return;
  if (check_event(g, e, "release_event")) {
    gpu_host->log(ONYX_LOG_ERROR, gpu_vendor.name, "release_event of a foreign event %p", (void*)e);
    return;
  }
  gpurt_set_device(g->device);
  gpurt_event_destroy(e->handle);
  e->magic = 0;
  free(e);
}

/* --- run events (ONYX_EXT_RUN_EVENT; docs/providers/cuda.md "Run events") ---------------------
 * The host ends an asynchronous run by recording an event (record_event)
 * behind the run's work instead of synchronizing the stream, and polls or
 * waits for it here. */

/* A query's or wait's result: not ready (*done 0), done, or the work's
 * error. */
static OnyxStatus* gpu_event_result(int err, int32_t* done, const char* what) {
  if (err == gpurt_error_not_ready()) {
    *done = 0;
    return NULL;
  }
  *done = 1;
  if (!err) return NULL;
  gpurt_last_error(); /* reported here, not again by the next call */
  return gpu_rt_error(ONYX_RUNTIME_ERROR, err, what);
}

static OnyxStatus* gpu_query_event(OnyxEp* ep, OnyxEvent* e, int32_t* done) {
  GpuEp* g = gpu_ep(ep);
  *done = 0;
  OnyxStatus* st = check_event(g, e, "query_event");
  if (st) return st;
  int err = gpurt_set_device(g->device);
  if (err) return gpu_rt_error(ONYX_RUNTIME_ERROR, err, "query_event: selecting the device");
  return gpu_event_result(gpurt_event_query(e->handle), done, "the work before the event");
}

static OnyxStatus* gpu_wait_event_for(OnyxEp* ep, OnyxEvent* e, int64_t timeout_ms, int32_t* done) {
  GpuEp* g = gpu_ep(ep);
  *done = 0;
  OnyxStatus* st = check_event(g, e, "wait_event_for");
  if (st) return st;
  int err = gpurt_set_device(g->device);
  if (err) return gpu_rt_error(ONYX_RUNTIME_ERROR, err, "wait_event_for: selecting the device");
  return gpu_event_result(gpurt_event_wait_for(e->handle, timeout_ms), done,
                          "the work before the event");
}

static void* gpu_native_event(OnyxEp* ep, OnyxEvent* e) {
  return check_event(gpu_ep(ep), e, "native_event") ? NULL : e->handle;
}

/* --- run graphs (ONYX_EXT_RUN_GRAPH; docs/providers/cuda.md "CUDA graphs") ----------------------
 * With enable_cuda_graph the EP offers the host the extension: the host
 * captures one run's work on the EP's stream (stream capture, relaxed
 * mode) and replays it with one graph launch. The executable graphs live in
 * the EP, numbered from 1. */

/* An EP as create_ep allocates it: the GpuEp first (an OnyxEp* is still a
 * GpuEp*), then the run-graph state. */
typedef struct GpuEpFull {
  GpuEp g;
  int graph_mode; /* enable_cuda_graph: 0 off, 1 on, 2 required */
  OnyxRunGraphExt graph_ext;
  OnyxRunEventExt event_ext;  /* always on the chain, first */
  pthread_mutex_t graph_lock; /* graphs */
  void** graphs;              /* executable graphs; NULL where released */
  size_t n_graphs;
} GpuEpFull;

static GpuEpFull* gpu_full(OnyxEp* ep) {
  return (GpuEpFull*)(void*)ep;
}

static OnyxStatus* gpu_capture_stream(GpuEp* g, OnyxStream* s, const char* slot) {
  OnyxStatus* st = check_stream(g, s, slot);
  if (!st && !s)
    st = gpu_host->status_create(ONYX_INVALID_ARGUMENT, "%s: %s: a graph needs the EP's stream",
                                 gpu_vendor.name, slot);
  return st;
}

static OnyxStatus* gpu_capture_begin(OnyxEp* ep, OnyxStream* s) {
  GpuEp* g = gpu_ep(ep);
  OnyxStatus* st = gpu_capture_stream(g, s, "capture_begin");
  if (st) return st;
  int err = gpurt_set_device(g->device);
  if (!err) err = gpurt_stream_begin_capture(s->handle);
  if (err) {
    gpurt_last_error(); /* cleared: the run goes on node by node */
    return gpu_rt_error(ONYX_RUNTIME_ERROR, err, "beginning the graph capture on the EP's stream");
  }
  return NULL;
}

static OnyxStatus* gpu_capture_end(OnyxEp* ep, OnyxStream* s, int32_t keep, uint64_t* id) {
  GpuEp* g = gpu_ep(ep);
  GpuEpFull* full = gpu_full(ep);
  *id = 0;
  OnyxStatus* st = gpu_capture_stream(g, s, "capture_end");
  if (st) return st;
  void* graph = NULL;
  void* exec = NULL;
  int err = gpurt_set_device(g->device);
  const char* what = "selecting the device";
  if (!err) {
    err = gpurt_stream_end_capture(s->handle, &graph);
    what = "ending the graph capture (a call during the run that synchronizes the stream or "
           "copies between host and device invalidates it)";
  }
  if (!err && keep) {
    err = gpurt_graph_instantiate(&exec, graph);
    what = "instantiating the captured graph";
  }
  gpurt_graph_destroy(graph);
  if (!err && keep) {
    /* The captured work has not run yet: this launch is the run's. */
    err = gpurt_graph_launch(exec, s->handle);
    what = "launching the captured graph";
  }
  if (err || !keep) {
    gpurt_graph_exec_destroy(exec);
    gpurt_last_error(); /* a failed capture's error is reported here, not by a later sync */
    return err ? gpu_rt_error(ONYX_RUNTIME_ERROR, err, what) : NULL;
  }
  pthread_mutex_lock(&full->graph_lock);
  void** grown = realloc(full->graphs, (full->n_graphs + 1) * sizeof *grown);
  if (grown) {
    full->graphs = grown;
    full->graphs[full->n_graphs++] = exec;
    *id = full->n_graphs;
  }
  pthread_mutex_unlock(&full->graph_lock);
  if (!grown) {
    gpurt_stream_sync(s->handle);
    gpurt_graph_exec_destroy(exec);
    return gpu_host->status_create(ONYX_OUT_OF_MEMORY, "%s: out of memory", gpu_vendor.name);
  }
  return NULL;
}

/* The executable graph `id`, or NULL. */
static void* gpu_graph_exec(GpuEpFull* full, uint64_t id) {
  pthread_mutex_lock(&full->graph_lock);
  void* exec = id >= 1 && id <= full->n_graphs ? full->graphs[id - 1] : NULL;
  pthread_mutex_unlock(&full->graph_lock);
  return exec;
}

static OnyxStatus* gpu_replay(OnyxEp* ep, OnyxStream* s, uint64_t id) {
  GpuEp* g = gpu_ep(ep);
  OnyxStatus* st = gpu_capture_stream(g, s, "replay");
  if (st) return st;
  void* exec = gpu_graph_exec(gpu_full(ep), id);
  if (!exec)
    return gpu_host->status_create(ONYX_INVALID_ARGUMENT, "%s: replay: no graph %" PRIu64,
                                   gpu_vendor.name, id);
  int err = gpurt_set_device(g->device);
  if (!err) err = gpurt_graph_launch(exec, s->handle);
  return err ? gpu_rt_error(ONYX_RUNTIME_ERROR, err, "launching the run's graph") : NULL;
}

static void gpu_release_graph(OnyxEp* ep, uint64_t id) {
  GpuEpFull* full = gpu_full(ep);
  pthread_mutex_lock(&full->graph_lock);
  void* exec = NULL;
  if (id >= 1 && id <= full->n_graphs) {
    exec = full->graphs[id - 1];
    full->graphs[id - 1] = NULL;
  }
  pthread_mutex_unlock(&full->graph_lock);
  if (!exec) return;
  gpurt_set_device(full->g.device);
  gpurt_graph_exec_destroy(exec);
}

/* Reads enable_cuda_graph (validated by gpu_parse_options) and, when it is
 * on, puts the extension on the EP's chain. */
static void gpu_graph_init(GpuEpFull* full, const OnyxOptions* o, bool log) {
  pthread_mutex_init(&full->graph_lock, NULL);
  const char* v = gpu_host->options_get(o, "enable_cuda_graph");
  if (!v || !parse_graph_mode(v, &full->graph_mode) || !full->graph_mode) return;
  full->graph_ext = (OnyxRunGraphExt){
      .base = {.struct_size = sizeof(OnyxRunGraphExt), .type = ONYX_EXT_RUN_GRAPH, .next = NULL},
      .required = full->graph_mode == 2,
      .warmup_runs = 1,
      .capture_begin = gpu_capture_begin,
      .capture_end = gpu_capture_end,
      .replay = gpu_replay,
      .release_graph = gpu_release_graph};
  full->g.ep.next = &full->graph_ext.base;
  if (log)
    gpu_host->log(ONYX_LOG_INFO, gpu_vendor.name,
                  "option 'enable_cuda_graph' is %s: a run whose nodes all run here, with its "
                  "inputs and outputs bound in device memory, is captured as a graph after one "
                  "warm-up run and replayed by later runs with the same bindings%s",
                  full->graph_mode == 2 ? "required" : "on",
                  full->graph_mode == 2 ? "; any other run fails" : "");
}

static void gpu_graph_free(GpuEpFull* full) {
  for (size_t i = 0; i < full->n_graphs; i++)
    if (full->graphs[i]) {
      gpurt_set_device(full->g.device);
      gpurt_graph_exec_destroy(full->graphs[i]);
    }
  free(full->graphs);
  pthread_mutex_destroy(&full->graph_lock);
}

/* --- EP lifetime -------------------------------------------------------------------------------
 */

static void gpu_ep_free(GpuEp* g) {
  gpu_graph_free((GpuEpFull*)g);
  if (gpu_vendor.ep_release) gpu_vendor.ep_release(g);
  stage_release(g);
  pthread_mutex_destroy(&g->stage_lock);
  if (g->n_blocks) {
    gpu_host->log(ONYX_LOG_WARNING, gpu_vendor.name, "%zu device blocks still live at EP release",
                  g->n_blocks);
    gpurt_set_device(g->device);
    for (size_t i = 0; i < g->n_blocks; i++)
      gpurt_free(g->blocks[i].ptr);
  }
  free(g->blocks);
  pthread_mutex_destroy(&g->mem_lock);
  pthread_mutex_destroy(&g->vendor_lock);
  free(g);
}

static void gpu_release_ep(OnyxEp* ep) {
  gpu_ep_free(gpu_ep(ep));
}

static OnyxStatus* gpu_create_ep(const OnyxProvider* p, const OnyxEpCreateArgs* args,
                                 OnyxEp** out) {
  *out = NULL;
  GpuEpFull* full = calloc(1, sizeof *full);
  if (!full)
    return gpu_host->status_create(ONYX_OUT_OF_MEMORY, "%s: out of memory", gpu_vendor.name);
  GpuEp* g = &full->g;
  pthread_mutex_init(&g->mem_lock, NULL);
  pthread_mutex_init(&g->vendor_lock, NULL);
  pthread_mutex_init(&g->stage_lock, NULL);
  /* Options first: a bad config is reported the same with or without a GPU. */
  OnyxStatus* st = gpu_parse_options(g, args->options, args->device_index);
  /* The host's collectives outlive the EP (onyx_ep.h, ONYX_EXT_COLLECTIVES). */
  for (const OnyxExtension* e = args->struct_size > offsetof(OnyxEpCreateArgs, next) ? args->next
                                                                                     : NULL;
       e; e = e->next)
    if (e->type == ONYX_EXT_COLLECTIVES && e->struct_size >= sizeof(OnyxCollectivesExt))
      g->collectives = (const OnyxCollectivesExt*)e;
  if (!st && g->use_tf32)
    gpu_host->log(ONYX_LOG_INFO, gpu_vendor.name, "%s",
                  gpu_vendor.tf32 ? "option 'use_tf32' is on: MatMul, Gemm and convolutions may "
                                    "use TF32 tensor cores (inputs rounded to a 10-bit mantissa, "
                                    "float32 accumulation)"
                                  : "option 'use_tf32' is accepted and has no effect: this "
                                    "provider computes MatMul and Gemm in float32 only");
  size_t count = 0;
  if (!st) st = gpu_device_count(p, &count);
  if (!st && (size_t)g->device >= count)
    st = gpu_host->status_create(ONYX_INVALID_CONFIG, "%s: device %d does not exist (%zu found)",
                                 gpu_vendor.name, g->device, count);
  int err = st ? 0 : gpurt_set_device(g->device);
  if (err) st = gpu_rt_error(ONYX_NO_DEVICE, err, "selecting the device");
  g->ep = (OnyxEp){.struct_size = sizeof(OnyxEp),
                   .ctx = g,
                   .provider = p,
                   .get_capability = gpu_get_capability,
                   .get_allocator = gpu_get_allocator,
                   .can_copy = gpu_can_copy,
                   .copy_tensors = gpu_copy_tensors,
                   .create_stream = gpu_create_stream,
                   .release_stream = gpu_release_stream,
                   .sync_stream = gpu_sync_stream,
                   .create_event = gpu_create_event,
                   .record_event = gpu_record_event,
                   .wait_event = gpu_wait_event,
                   .release_event = gpu_release_event,
                   .release = gpu_release_ep};
  OnyxMemoryDevice dev = {.kind = ONYX_DEVICE_GPU,
                          .vendor_id = gpu_vendor.pci_vendor,
                          .device_id = g->device,
                          .mem_type = ONYX_MEM_DEFAULT,
                          .alignment = GPU_ALIGN};
  g->device_alloc = (OnyxAllocator){.struct_size = sizeof(OnyxAllocator),
                                    .ctx = g,
                                    .device = dev,
                                    .alloc = gpu_device_alloc,
                                    .free = gpu_device_free};
  OnyxMemoryDevice pinned = dev;
  pinned.kind = ONYX_DEVICE_CPU; /* host code may read it */
  pinned.mem_type = ONYX_MEM_HOST_ACCESSIBLE;
  g->pinned_alloc = (OnyxAllocator){.struct_size = sizeof(OnyxAllocator),
                                    .ctx = g,
                                    .device = pinned,
                                    .alloc = gpu_pinned_alloc,
                                    .free = gpu_pinned_free};
  gpu_graph_init(full, args->options, !st); /* after the table: the extension hangs off ep.next */
  full->event_ext = (OnyxRunEventExt){.base = {.struct_size = sizeof(OnyxRunEventExt),
                                               .type = ONYX_EXT_RUN_EVENT,
                                               .next = full->g.ep.next},
                                      .query_event = gpu_query_event,
                                      .wait_event_for = gpu_wait_event_for,
                                      .native_event = gpu_native_event};
  full->g.ep.next = &full->event_ext.base;
  if (!st && gpu_vendor.ep_init) st = gpu_vendor.ep_init(g);
  if (st) {
    gpu_ep_free(g);
    return st;
  }
  GpuDeviceProps props;
  if (!gpurt_device_props(g->device, &props))
    gpu_host->log(ONYX_LOG_INFO, gpu_vendor.name, "device %d: %s (%s, %" PRIu64 " bytes)",
                  g->device, props.name, props.arch, props.total_mem);
  *out = &g->ep;
  return NULL;
}

static const OnyxProvider g_provider = {.struct_size = sizeof(OnyxProvider),
                                        .abi_major = ONYX_ABI_VERSION_MAJOR,
                                        .abi_minor = ONYX_ABI_VERSION_MINOR,
                                        .name = NULL, /* set from gpu_vendor at init */
                                        .device_count = gpu_device_count,
                                        .device_info = gpu_device_info,
                                        .register_kernels = gpu_register_kernels,
                                        .create_ep = gpu_create_ep,
                                        .release = gpu_provider_release};
static OnyxProvider g_table;

ONYX_EXPORT OnyxStatus* onyx_provider_init(const OnyxHostApi* host, const OnyxProvider** out) {
  if (host->abi_major != ONYX_ABI_VERSION_MAJOR)
    return host->status_create(ONYX_ABI_MISMATCH, "%s: built for Onyx ABI %d.%d; host has %u.%u",
                               gpu_vendor.name, ONYX_ABI_VERSION_MAJOR, ONYX_ABI_VERSION_MINOR,
                               host->abi_major, host->abi_minor);
  gpu_host = host;
  g_table = g_provider;
  g_table.name = gpu_vendor.name;
  g_table.vendor = gpu_vendor.vendor;
  g_table.version = gpu_vendor.version;
  *out = &g_table;
  return NULL;
}
