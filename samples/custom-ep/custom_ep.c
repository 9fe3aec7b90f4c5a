/* custom_ep.c — the provider table, devices, options, the EP, placement
 * (get_capability), memory and copies of the "custom" example provider.
 * The kernels and the custom op live in custom_kernels.c, the compiled
 * MatMul -> Add group in custom_group.c.
 *
 * Read it top to bottom: it follows the order in which the host calls it
 * (docs/provider-guide.md has the whole walk). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "custom_ep.h"

const OnyxHostApi* custom_host;
bool custom_host_1_1;

/* --- Devices ---------------------------------------------------------------------------
 * device_count and device_info describe what the provider can drive. A real
 * provider asks its driver here; with no device it returns ONYX_NO_DEVICE
 * and a message saying why, so the user learns it from the error. */

OnyxMemoryDevice custom_memory(size_t index) {
  return (OnyxMemoryDevice){.kind = ONYX_DEVICE_OTHER,
                            .vendor_id = CUSTOM_VENDOR_ID,
                            .device_id = (int32_t)index,
                            .mem_type = ONYX_MEM_DEFAULT,
                            .alignment = CUSTOM_ALIGN,
                            .reserved = 0};
}

bool custom_is_device_memory(const OnyxMemoryDevice* m) {
  return m && m->kind == ONYX_DEVICE_OTHER && m->vendor_id == CUSTOM_VENDOR_ID &&
         m->mem_type == ONYX_MEM_DEFAULT && m->device_id >= 0 && m->device_id < CUSTOM_DEVICE_COUNT;
}

static OnyxStatus* custom_device_count(const OnyxProvider* p, size_t* count) {
  (void)p;
  /* CUSTOM_EP_UNPLUGGED=1 simulates a machine without the accelerator. */
  const char* unplugged = getenv("CUSTOM_EP_UNPLUGGED");
  if (unplugged && strcmp(unplugged, "1") == 0) {
    *count = 0;
    return custom_host->status_create(ONYX_NO_DEVICE, "custom: no Example Accelerator found "
                                                      "(CUSTOM_EP_UNPLUGGED=1)");
  }
  *count = CUSTOM_DEVICE_COUNT;
  return NULL;
}

/* Properties are free-form strings; tools print them. They must outlive the
 * call, so they are static here. */
static const char* const custom_property_keys[] = {"cores", "firmware", "library"};
static const char* custom_property_values[CUSTOM_DEVICE_COUNT][3] = {
    {"4", "1.2.0", NULL},
    {"8", "1.3.1", NULL},
};
static const char* const custom_device_names[CUSTOM_DEVICE_COUNT] = {
    "Example Accelerator 4-core",
    "Example Accelerator 8-core",
};

static OnyxStatus* custom_device_info(const OnyxProvider* p, size_t index, OnyxDeviceInfo* out) {
  (void)p;
  if (index >= CUSTOM_DEVICE_COUNT)
    return custom_host->status_create(ONYX_INVALID_ARGUMENT,
                                      "custom: device %zu does not exist (there are %d)", index,
                                      CUSTOM_DEVICE_COUNT);
  /* The host set out->struct_size to the size it knows: write no field
   * beyond it. Every field here exists since ABI 1.0, the oldest host. */
  if (out->struct_size < offsetof(OnyxDeviceInfo, property_count) + sizeof out->property_count)
    return custom_host->status_create(
        ONYX_ABI_MISMATCH, "custom: OnyxDeviceInfo of %zu bytes is too small", out->struct_size);
  out->name = custom_device_names[index];
  out->memory = custom_memory(index);
  out->memory_bytes = (uint64_t)1 << 30;
  out->property_keys = custom_property_keys;
  out->property_values = custom_property_values[index];
  out->property_count = 3;
  return NULL;
}

/* --- Options -----------------------------------------------------------------------------
 * Options come from code (onyx_session_options_set_provider_option) or from
 * the config file ("options": {...}), always as text. Validate every one and
 * refuse unknown keys with ONYX_INVALID_CONFIG naming the key: a typo must
 * not be silently ignored. */

static OnyxStatus* bad_value(const char* key, const char* value, const char* expected) {
  return custom_host->status_create(
      ONYX_INVALID_CONFIG, "custom: option '%s' has value '%s'; expected %s", key, value, expected);
}

static OnyxStatus* opt_max_elements(CustomEp* c, const char* key, const char* value) {
  char* end = NULL;
  errno = 0;
  long long n = strtoll(value, &end, 10);
  if (errno || end == value || *end || n < 0)
    return bad_value(key, value, "a whole number >= 0 (0: no limit)");
  c->max_elements = (int64_t)n;
  return NULL;
}

static OnyxStatus* parse_bool(const char* key, const char* value, bool* out) {
  if (strcmp(value, "true") == 0 || strcmp(value, "1") == 0)
    *out = true;
  else if (strcmp(value, "false") == 0 || strcmp(value, "0") == 0)
    *out = false;
  else
    return bad_value(key, value, "true or false");
  return NULL;
}

static OnyxStatus* opt_custom_op(CustomEp* c, const char* key, const char* value) {
  return parse_bool(key, value, &c->custom_op);
}

static OnyxStatus* opt_fuse_matmul_add(CustomEp* c, const char* key, const char* value) {
  return parse_bool(key, value, &c->fuse_matmul_add);
}

static const struct {
  const char* key;
  OnyxStatus* (*apply)(CustomEp* c, const char* key, const char* value);
} custom_options[] = {
    {"max_elements", opt_max_elements},
    {"custom_op", opt_custom_op},
    {"fuse_matmul_add", opt_fuse_matmul_add},
};

static OnyxStatus* apply_options(CustomEp* c, const OnyxOptions* o) {
  const OnyxHostApi* H = custom_host;
  c->max_elements = 0;
  c->custom_op = true;
  c->fuse_matmul_add = true;
  for (size_t i = 0; i < H->options_count(o); i++) {
    const char* key = H->options_key(o, i);
    const char* value = H->options_get(o, key);
    size_t k = 0;
    while (k < sizeof custom_options / sizeof custom_options[0] &&
           strcmp(custom_options[k].key, key) != 0)
      k++;
    if (k == sizeof custom_options / sizeof custom_options[0])
      return H->status_create(ONYX_INVALID_CONFIG,
                              "custom: unknown option '%s' (known: max_elements, custom_op, "
                              "fuse_matmul_add)",
                              key);
    OnyxStatus* st = custom_options[k].apply(c, key, value ? value : "");
    if (st) return st;
  }
  return NULL;
}

/* --- Placement ---------------------------------------------------------------------------
 * get_capability sees the nodes no provider before this one took. It first
 * claims each MatMul -> Add chain as one group, compiled into one kernel
 * (custom_group.c). Every other node it either claims (it will run here with
 * a registered kernel) or declines with a reason that
 * `onyx partition --explain` shows. */

int64_t custom_static_elements(const OnyxValueInfo* v) {
  const OnyxHostApi* H = custom_host;
  int32_t rank = H->value_rank(v);
  if (rank < 0) return -1;
  const int64_t* dims = H->value_dims(v);
  int64_t n = 1;
  for (int32_t i = 0; i < rank; i++) {
    if (dims[i] < 0) return -1;
    n *= dims[i];
  }
  return n;
}

static OnyxStatus* custom_get_capability(OnyxEp* ep, const OnyxGraphView* g,
                                         OnyxCapabilityBuilder* b) {
  const OnyxHostApi* H = custom_host;
  CustomEp* c = (CustomEp*)ep;
  CustomNodeSet grouped;
  OnyxStatus* st = custom_claim_groups(c, g, b, &grouped);
  if (st) return st;
  for (size_t i = 0; i < H->graph_node_count(g) && !st; i++) {
    const OnyxNode* n = H->graph_node(g, i);
    if (custom_node_set_has(&grouped, n)) continue; /* claimed in a group */
    const char* reason = NULL;
    /* The registry knows op, opset range and element types. */
    if (!H->has_kernel(b, n, &reason)) {
      H->decline_node(b, n, reason ? reason : "no kernel");
      continue;
    }
    if (!c->custom_op && strcmp(H->node_domain(n), CUSTOM_DOMAIN) == 0) {
      H->decline_node(b, n, "the custom op is switched off (option custom_op=false)");
      continue;
    }
    /* The registry cannot say "2-D only": the MatMul kernel's limit is
     * checked here, where the shapes are known. */
    if (strcmp(H->node_op_type(n), "MatMul") == 0 &&
        (H->value_rank(H->node_input(n, 0)) != 2 || H->value_rank(H->node_input(n, 1)) != 2)) {
      H->decline_node(b, n, "MatMul: the kernel takes 2-D inputs only");
      continue;
    }
    const OnyxValueInfo* out = H->node_output(n, 0);
    int64_t elements = out ? custom_static_elements(out) : -1;
    if (c->max_elements > 0 && elements > c->max_elements) {
      char text[160];
      snprintf(text, sizeof text,
               "output has %" PRId64 " elements, above the max_elements option (%" PRId64 ")",
               elements, c->max_elements);
      H->decline_node(b, n, text); /* the host copies the text */
      continue;
    }
    /* A refused claim is a bug in the provider: pass the error up, and the
     * session fails with the host's message naming the node. */
    st = H->claim_node(b, n);
  }
  custom_node_set_free(&grouped);
  return st;
}

/* --- Memory and copies -----------------------------------------------------------------
 * The host wraps this allocator in its own arena, so alloc is called rarely
 * and with large sizes. Both functions may be called from any thread. */

static void* custom_alloc(void* ctx, size_t bytes, size_t alignment) {
  CustomEp* c = ctx;
  if (alignment > CUSTOM_ALIGN) return NULL;
  size_t rounded = (bytes + CUSTOM_ALIGN - 1) / CUSTOM_ALIGN * CUSTOM_ALIGN;
  if (rounded < bytes) return NULL; /* overflow */
  void* p = aligned_alloc(CUSTOM_ALIGN, rounded ? rounded : CUSTOM_ALIGN);
  if (p) atomic_fetch_add(&c->live_buffers, 1);
  return p;
}

static void custom_free(void* ctx, void* ptr) {
  CustomEp* c = ctx;
  if (!ptr) return;
  atomic_fetch_sub(&c->live_buffers, 1);
  free(ptr);
}

static const OnyxAllocator* custom_get_allocator(OnyxEp* ep, OnyxMemType type) {
  /* Only the device's own memory is ours; NULL gives the host's malloc for
   * the other memory types. */
  return type == ONYX_MEM_DEFAULT ? &((CustomEp*)ep)->allocator : NULL;
}

static bool is_cpu(const OnyxMemoryDevice* m) {
  return m && m->kind == ONYX_DEVICE_CPU;
}

/* Host <-> device in both directions and device -> device. */
static int custom_can_copy(OnyxEp* ep, const OnyxMemoryDevice* src, const OnyxMemoryDevice* dst) {
  (void)ep;
  bool s = custom_is_device_memory(src), d = custom_is_device_memory(dst);
  return (s && (d || is_cpu(dst))) || (is_cpu(src) && d);
}

static OnyxStatus* custom_copy_tensors(OnyxEp* ep, const OnyxTensor* const* src,
                                       OnyxTensor* const* dst, size_t n, OnyxStream* stream) {
  (void)stream; /* no streams: every copy is synchronous */
  const OnyxHostApi* H = custom_host;
  CustomEp* c = (CustomEp*)ep;
  for (size_t i = 0; i < n; i++) {
    size_t bytes = H->tensor_byte_size(src[i]);
    if (bytes != H->tensor_byte_size(dst[i]))
      return H->status_create(ONYX_RUNTIME_ERROR,
                              "custom: copy %zu: source has %zu bytes, destination %zu", i, bytes,
                              H->tensor_byte_size(dst[i]));
    if (H->tensor_elem_type(src[i]) == ONYX_ELEM_STRING)
      return H->status_create(ONYX_NOT_IMPLEMENTED, "custom: copy %zu: string tensors", i);
    if (bytes) memcpy(H->tensor_mutable_data(dst[i]), H->tensor_data(src[i]), bytes);
    atomic_fetch_add(&c->copies, 1);
  }
  return NULL;
}

/* --- The EP ------------------------------------------------------------------------------ */

static void custom_ep_release(OnyxEp* ep) {
  CustomEp* c = (CustomEp*)ep;
  size_t live = atomic_load(&c->live_buffers);
  /* The host frees every buffer before releasing the EP: a live one is a
   * host bug, worth a loud message. */
  custom_host->log(live ? ONYX_LOG_WARNING : ONYX_LOG_VERBOSE, CUSTOM_NAME,
                   "device %zu released: %zu copies, %zu buffers still live", c->device_index,
                   (size_t)atomic_load(&c->copies), live);
  free(c);
}

static OnyxStatus* custom_create_ep(const OnyxProvider* p, const OnyxEpCreateArgs* args,
                                    OnyxEp** out) {
  const OnyxHostApi* H = custom_host;
  *out = NULL;
  if (args->device_index >= CUSTOM_DEVICE_COUNT)
    return H->status_create(ONYX_INVALID_ARGUMENT, "custom: device %zu does not exist",
                            args->device_index);
  CustomEp* c = calloc(1, sizeof *c);
  if (!c) return H->status_create(ONYX_OUT_OF_MEMORY, "custom: out of memory");
  /* Options are valid during create_ep only: copy what you keep (here the
   * parsed values). */
  OnyxStatus* st = apply_options(c, args->options);
  if (st) {
    free(c);
    return st;
  }
  c->device_index = args->device_index;
  atomic_init(&c->live_buffers, 0);
  atomic_init(&c->copies, 0);
  c->allocator = (OnyxAllocator){.struct_size = sizeof(OnyxAllocator),
                                 .ctx = c,
                                 .device = custom_memory(args->device_index),
                                 .alloc = custom_alloc,
                                 .free = custom_free};
  c->ep = (OnyxEp){.struct_size = sizeof(OnyxEp),
                   .ctx = c,
                   .provider = p,
                   .get_capability = custom_get_capability,
                   .compile = custom_compile,
                   .get_allocator = custom_get_allocator,
                   .can_copy = custom_can_copy,
                   .copy_tensors = custom_copy_tensors,
                   .release = custom_ep_release};
  *out = &c->ep;
  return NULL;
}

/* --- The provider table and the entry point ----------------------------------------------- */

static void custom_release(const OnyxProvider* p) {
  (void)p;
  /* Last call before dlclose: every EP is gone. Free global state here. */
  custom_host->log(ONYX_LOG_VERBOSE, CUSTOM_NAME, "provider released");
}

static const OnyxProvider custom_provider = {
    .struct_size = sizeof(OnyxProvider),
    .abi_major = ONYX_ABI_VERSION_MAJOR,
    .abi_minor = ONYX_ABI_VERSION_MINOR,
    .name = CUSTOM_NAME,
    .vendor = CUSTOM_VENDOR_NAME,
    .version = CUSTOM_VERSION,
    .device_count = custom_device_count,
    .device_info = custom_device_info,
    .register_kernels = custom_register_kernels,
    .register_schemas = custom_register_schemas,
    .create_ep = custom_create_ep,
    .release = custom_release,
};

ONYX_EXPORT OnyxStatus* onyx_provider_init(const OnyxHostApi* host, const OnyxProvider** out) {
  /* Check the host before calling anything but status_create: a host of
   * another major has another table layout. (The host checks our major too.) */
  if (host->abi_major != ONYX_ABI_VERSION_MAJOR)
    return host->status_create(ONYX_ABI_MISMATCH, "custom: host ABI %u.%u; built for %d.%d",
                               (unsigned)host->abi_major, (unsigned)host->abi_minor,
                               ONYX_ABI_VERSION_MAJOR, ONYX_ABI_VERSION_MINOR);
  /* Any 1.x host will do: every host function this provider needs exists
   * since ABI 1.0. The 1.1 value-consumer functions, which group placement
   * uses, are called only when the host's table covers them; with a 1.0 host
   * the provider places every node on its own. (A provider that cannot work
   * without a 1.N function refuses here instead, naming both versions.) */
  if (host->struct_size < ONYX_ABI_V1_0_HOST_API_SIZE)
    return host->status_create(ONYX_ABI_MISMATCH,
                               "custom: host API table of %zu bytes is smaller than ABI 1.0's %d",
                               host->struct_size, ONYX_ABI_V1_0_HOST_API_SIZE);
  custom_host = host;
  custom_host_1_1 = host->struct_size >= offsetof(OnyxHostApi, value_is_graph_output) +
                                             sizeof host->value_is_graph_output;
  /* Where this library was loaded from (to find data files next to it);
   * shown as a device property. */
  const char* self = host->library_path((const void*)&custom_provider);
  for (size_t i = 0; i < CUSTOM_DEVICE_COUNT; i++)
    custom_property_values[i][2] = self ? self : "?";
  *out = &custom_provider;
  return NULL;
}
