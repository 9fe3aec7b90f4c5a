/* cpu_provider.c — the CPU execution provider's entry point and tables.
 *
 * A plugin like any other: built against sdk/include only, loaded by the
 * host with dlopen. It offers one device (the host CPU), uses host memory
 * (no allocator of its own) and lets the host's default get_capability claim
 * whatever its kernel registry matches. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "cpu_util.h"

const OnyxHostApi* cpu_host;

#define CPU_PROVIDER_NAME "cpu"

#ifdef ONYX_ABI_V1_0_HOST_API_SIZE
#define CPU_HOST_API_MIN_SIZE ONYX_ABI_V1_0_HOST_API_SIZE
#else
#define CPU_HOST_API_MIN_SIZE sizeof(OnyxHostApi)
#endif

/* What the EP keeps: the session's pool and flags, for kernels that want them. */
typedef struct CpuEpState {
  OnyxThreadPool* pool;
  int32_t deterministic;
  const OnyxCollectivesExt* collectives; /* NULL: the session has no process group */
} CpuEpState;

const OnyxCollectivesExt* cpu_ep_collectives(const OnyxEp* ep) {
  return ep && ep->ctx ? ((const CpuEpState*)ep->ctx)->collectives : NULL;
}

/* --- Devices ------------------------------------------------------------ */

static OnyxStatus* cpu_device_count(const OnyxProvider* p, size_t* count) {
  *count = 1;
  return NULL;
}

/* True when the caller's struct (of struct_size bytes) has room for field. */
#define CPU_FITS(s, field)                                                                         \
  ((s)->struct_size >= offsetof(__typeof__(*(s)), field) + sizeof((s)->field))

static OnyxStatus* cpu_device_info(const OnyxProvider* p, size_t index, OnyxDeviceInfo* out) {
  if (index != 0)
    return cpu_host->status_create(ONYX_INVALID_ARGUMENT,
                                   "provider 'cpu': no device %zu (it has one device, 0)", index);
  if (CPU_FITS(out, name)) out->name = "host CPU";
  if (CPU_FITS(out, memory))
    out->memory = (OnyxMemoryDevice){.kind = ONYX_DEVICE_CPU,
                                     .vendor_id = 0,
                                     .device_id = 0,
                                     .mem_type = ONYX_MEM_DEFAULT,
                                     .alignment = 64};
  if (CPU_FITS(out, memory_bytes)) out->memory_bytes = 0;
  if (CPU_FITS(out, property_count)) {
    out->property_keys = NULL;
    out->property_values = NULL;
    out->property_count = 0;
  }
  return NULL;
}

/* --- Kernels ------------------------------------------------------------ */

static OnyxStatus* cpu_register_kernels(const OnyxProvider* p, OnyxKernelRegistry* r) {
  static OnyxStatus* (*const families[])(OnyxKernelRegistry*) = {
      cpu_register_elementwise,    cpu_register_shape,     cpu_register_reduce,
      cpu_register_conv,           cpu_register_pool,      cpu_register_norm,
      cpu_register_linalg,         cpu_register_math,      cpu_register_gather_scatter,
      cpu_register_sort_topk,      cpu_register_layout,    cpu_register_einsum,
      cpu_register_loss,           cpu_register_nms,       cpu_register_resize,
      cpu_register_conv_transpose, cpu_register_rnn,       cpu_register_quant,
      cpu_register_misc,           cpu_register_contrib,   cpu_register_optim,
      cpu_register_image,          cpu_register_half,      cpu_register_grad,
      cpu_register_signal,         cpu_register_random,    cpu_register_collective,
      cpu_register_grad_seq,       cpu_register_grad_half,
  };
  for (size_t i = 0; i < CPU_ARRAY_LEN(families); i++) {
    OnyxStatus* st = families[i](r);
    if (st) return st;
  }
  return NULL;
}

/* --- EP instances ---------------------------------------------------------- */

/* "threads" is informational: kernels run on the session's intra-op pool,
 * which the session sizes. It must still be a non-negative integer. */
static OnyxStatus* cpu_check_threads(const char* value) {
  if (!value)
    return cpu_host->status_create(ONYX_INVALID_CONFIG,
                                   "provider 'cpu': option 'threads' has no value");
  /* The value is quoted at most 32 bytes long: it may be any length. */
  const size_t len = strlen(value);
  const int shown = len > 32 ? 32 : (int)len;
  const char* more = len > 32 ? "..." : "";
  char* end = NULL;
  errno = 0;
  const long long n = strtoll(value, &end, 10);
  if (errno == ERANGE)
    return cpu_host->status_create(ONYX_INVALID_CONFIG,
                                   "provider 'cpu': option 'threads' is out of range: '%.*s%s' "
                                   "(%zu characters)",
                                   shown, value, more, len);
  if (end == value || *end != '\0' || n < 0)
    return cpu_host->status_create(ONYX_INVALID_CONFIG,
                                   "provider 'cpu': option 'threads' must be a non-negative "
                                   "integer, got '%.*s%s'",
                                   shown, value, more);
  return NULL;
}

static const struct {
  const char* key;
  OnyxStatus* (*check)(const char* value);
} cpu_options[] = {
    {"threads", cpu_check_threads},
};

static OnyxStatus* cpu_check_options(const OnyxOptions* o) {
  for (size_t i = 0, n = cpu_host->options_count(o); i < n; i++) {
    const char* key = cpu_host->options_key(o, i);
    size_t j = 0;
    while (j < CPU_ARRAY_LEN(cpu_options) && strcmp(cpu_options[j].key, key) != 0)
      j++;
    if (j == CPU_ARRAY_LEN(cpu_options))
      return cpu_host->status_create(ONYX_INVALID_CONFIG,
                                     "provider 'cpu': unknown option '%s' (known: threads)", key);
    OnyxStatus* st = cpu_options[j].check(cpu_host->options_get(o, key));
    if (st) return st;
  }
  return NULL;
}

static void cpu_ep_release(OnyxEp* ep) {
  if (!ep) return;
  free(ep->ctx);
  free(ep);
}

static OnyxStatus* cpu_create_ep(const OnyxProvider* p, const OnyxEpCreateArgs* args,
                                 OnyxEp** out) {
  *out = NULL;
  if (CPU_FITS(args, device_index) && args->device_index != 0)
    return cpu_host->status_create(ONYX_INVALID_ARGUMENT,
                                   "provider 'cpu': no device %zu (it has one device, 0)",
                                   args->device_index);
  if (CPU_FITS(args, options) && args->options) {
    OnyxStatus* st = cpu_check_options(args->options);
    if (st) return st;
  }
  OnyxEp* ep = calloc(1, sizeof *ep);
  CpuEpState* state = calloc(1, sizeof *state);
  if (!ep || !state) {
    free(ep);
    free(state);
    return cpu_host->status_create(ONYX_OUT_OF_MEMORY, "provider 'cpu': out of memory");
  }
  if (CPU_FITS(args, thread_pool)) state->pool = args->thread_pool;
  if (CPU_FITS(args, deterministic)) state->deterministic = args->deterministic;
  /* The host's collectives outlive the EP (onyx_ep.h, ONYX_EXT_COLLECTIVES). */
  for (const OnyxExtension* e = CPU_FITS(args, next) ? args->next : NULL; e; e = e->next)
    if (e->type == ONYX_EXT_COLLECTIVES && e->struct_size >= sizeof(OnyxCollectivesExt))
      state->collectives = (const OnyxCollectivesExt*)e;
  *ep = (OnyxEp){
      .struct_size = sizeof *ep,
      .ctx = state,
      .provider = p,
      .get_capability = NULL, /* the host claims what the registry matches */
      .compile = NULL,        /* kernel-based */
      .get_allocator = NULL,  /* host memory */
      .release = cpu_ep_release,
  };
  *out = ep;
  return NULL;
}

static const OnyxProvider cpu_provider = {
    .struct_size = sizeof(OnyxProvider),
    .abi_major = ONYX_ABI_VERSION_MAJOR,
    .abi_minor = ONYX_ABI_VERSION_MINOR,
    .name = CPU_PROVIDER_NAME,
    .vendor = "onyx",
    .version = "0.1.0",
    .ctx = NULL,
    .next = NULL,
    .device_count = cpu_device_count,
    .device_info = cpu_device_info,
    .score = NULL,
    .register_kernels = cpu_register_kernels,
    .register_schemas = NULL,
    .create_ep = cpu_create_ep,
    .release = NULL,
};

ONYX_EXPORT OnyxStatus* onyx_provider_init(const OnyxHostApi* host, const OnyxProvider** out) {
  *out = NULL;
  if (host->abi_major != ONYX_ABI_VERSION_MAJOR)
    return host->status_create(
        ONYX_ABI_MISMATCH, "provider 'cpu' was built for ABI %d.%d; the host offers %u.%u",
        ONYX_ABI_VERSION_MAJOR, ONYX_ABI_VERSION_MINOR, host->abi_major, host->abi_minor);
  /* The provider calls only 1.0 slots; 1.0 is the oldest minor of major 1. */
  if (host->struct_size < CPU_HOST_API_MIN_SIZE)
    return host->status_create(ONYX_ABI_MISMATCH,
                               "provider 'cpu': host API table of %zu bytes is smaller than "
                               "ABI 1.0's %zu",
                               host->struct_size, (size_t)CPU_HOST_API_MIN_SIZE);
  cpu_host = host;
  *out = &cpu_provider;
  return NULL;
}
