/* dnnl_provider.c — the oneDNN provider's entry point: one device (the CPU
 * oneDNN runs on), option checking, EP instances. */
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "dnnl_ep.h"

const OnyxHostApi* dnnl_host;

#ifdef ONYX_ABI_V1_0_HOST_API_SIZE
#define DNNL_HOST_API_MIN_SIZE ONYX_ABI_V1_0_HOST_API_SIZE
#else
#define DNNL_HOST_API_MIN_SIZE sizeof(OnyxHostApi)
#endif

#define FITS(s, field) ((s)->struct_size >= offsetof(__typeof__(*(s)), field) + sizeof((s)->field))

OnyxStatus* dnnl_err(const OnyxNode* n, OnyxStatusCode code, const char* fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n)
    return dnnl_host->status_create(code, "provider 'onednn': node '%s' (%s): %s",
                                    dnnl_host->node_name(n), dnnl_host->node_op_type(n), msg);
  return dnnl_host->status_create(code, "provider 'onednn': %s", msg);
}

OnyxStatus* dnnl_fail(const OnyxNode* n, int status, const char* what) {
  return dnnl_err(n, ONYX_RUNTIME_ERROR, "oneDNN %s failed: %s", what,
                  dnnl_status2str((dnnl_status_t)status));
}

/* --- Device ------------------------------------------------------------------------------- */

static char device_name[128];
static char isa_text[32];
static const char* prop_keys[] = {"onednn_version", "cpu_isa", "cpu_runtime"};
static const char* prop_values[3];
static char version_text[32];

const char* dnnl_isa_name(int isa) {
  switch ((dnnl_cpu_isa_t)isa) {
  case dnnl_cpu_isa_sse41:
    return "sse41";
  case dnnl_cpu_isa_avx:
    return "avx";
  case dnnl_cpu_isa_avx2:
    return "avx2";
  case dnnl_cpu_isa_avx512_core:
    return "avx512_core";
  case dnnl_cpu_isa_avx512_core_vnni:
    return "avx512_core_vnni";
  case dnnl_cpu_isa_avx512_core_bf16:
    return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_amx:
    return "avx512_core_amx";
  default:
    return "other";
  }
}

static OnyxStatus* dev_count(const OnyxProvider* p, size_t* count) {
  (void)p;
  *count = 1;
  return NULL;
}

static OnyxStatus* dev_info(const OnyxProvider* p, size_t index, OnyxDeviceInfo* out) {
  (void)p;
  if (index != 0)
    return dnnl_err(NULL, ONYX_INVALID_ARGUMENT, "no device %zu (it has one device, 0)", index);
  const dnnl_version_t* v = dnnl_version();
  snprintf(version_text, sizeof version_text, "%d.%d.%d", v->major, v->minor, v->patch);
  snprintf(isa_text, sizeof isa_text, "%s", dnnl_isa_name(dnnl_get_effective_cpu_isa()));
  snprintf(device_name, sizeof device_name, "oneDNN %s on the host CPU (%s)", version_text,
           isa_text);
  prop_values[0] = version_text;
  prop_values[1] = isa_text;
  prop_values[2] = v->cpu_runtime == DNNL_RUNTIME_OMP ? "openmp" : "other";
  if (FITS(out, name)) out->name = device_name;
  if (FITS(out, memory))
    out->memory = (OnyxMemoryDevice){.kind = ONYX_DEVICE_CPU,
                                     .vendor_id = 0,
                                     .device_id = 0,
                                     .mem_type = ONYX_MEM_DEFAULT,
                                     .alignment = 64};
  if (FITS(out, memory_bytes)) out->memory_bytes = 0;
  if (FITS(out, property_count)) {
    out->property_keys = prop_keys;
    out->property_values = prop_values;
    out->property_count = 3;
  }
  return NULL;
}

/* --- Options --------------------------------------------------------------------------------- */

static OnyxStatus* parse_bool(const char* key, const char* v, bool* out) {
  if (v && (!strcmp(v, "true") || !strcmp(v, "1"))) {
    *out = true;
    return NULL;
  }
  if (v && (!strcmp(v, "false") || !strcmp(v, "0"))) {
    *out = false;
    return NULL;
  }
  return dnnl_err(NULL, ONYX_INVALID_CONFIG, "option '%s' must be true or false, got '%s'", key,
                  v ? v : "(null)");
}

static OnyxStatus* read_options(const OnyxOptions* o, DnnlOptions* opt) {
  *opt = (DnnlOptions){.fuse = true, .blocked = true, .chain = true};
  for (size_t i = 0, n = o ? dnnl_host->options_count(o) : 0; i < n; i++) {
    const char* key = dnnl_host->options_key(o, i);
    const char* v = dnnl_host->options_get(o, key);
    OnyxStatus* st = NULL;
    if (!strcmp(key, "fuse"))
      st = parse_bool(key, v, &opt->fuse);
    else if (!strcmp(key, "blocked_layout"))
      st = parse_bool(key, v, &opt->blocked);
    else if (!strcmp(key, "chain"))
      st = parse_bool(key, v, &opt->chain);
    else if (!strcmp(key, "conv_algorithm")) {
      if (v && !strcmp(v, "auto"))
        opt->conv_algorithm = DNNL_CONV_AUTO;
      else if (v && !strcmp(v, "direct"))
        opt->conv_algorithm = DNNL_CONV_DIRECT;
      else
        st = dnnl_err(NULL, ONYX_INVALID_CONFIG,
                      "option 'conv_algorithm' must be auto or direct, got '%s'", v ? v : "(null)");
    } else
      st =
          dnnl_err(NULL, ONYX_INVALID_CONFIG,
                   "unknown option '%s' (known: fuse, blocked_layout, conv_algorithm, chain)", key);
    if (st) return st;
  }
  return NULL;
}

/* --- EP --------------------------------------------------------------------------------------- */

static void ep_release(OnyxEp* ep) {
  if (!ep) return;
  DnnlEp* d = ep->ctx;
  if (d && d->engine) dnnl_engine_destroy((dnnl_engine_t)d->engine);
  free(d);
  free(ep);
}

static OnyxStatus* create_ep(const OnyxProvider* p, const OnyxEpCreateArgs* args, OnyxEp** out) {
  *out = NULL;
  if (FITS(args, device_index) && args->device_index != 0)
    return dnnl_err(NULL, ONYX_INVALID_ARGUMENT, "no device %zu (it has one device, 0)",
                    args->device_index);
  DnnlEp* d = calloc(1, sizeof *d);
  OnyxEp* ep = calloc(1, sizeof *ep);
  if (!d || !ep) {
    free(d);
    free(ep);
    return dnnl_err(NULL, ONYX_OUT_OF_MEMORY, "out of memory");
  }
  OnyxStatus* st = read_options(FITS(args, options) ? args->options : NULL, &d->opt);
  if (!st) {
    d->pool = FITS(args, thread_pool) ? args->thread_pool : NULL;
    d->threads = (int)dnnl_host->thread_pool_size(d->pool);
    if (d->threads < 1) d->threads = 1;
    dnnl_engine_t engine = NULL;
    dnnl_status_t s = dnnl_engine_create(&engine, dnnl_cpu, 0);
    if (s != dnnl_success)
      st = dnnl_fail(NULL, s, "engine creation");
    else
      d->engine = engine;
  }
  if (st) {
    free(d);
    free(ep);
    return st;
  }
  *ep = (OnyxEp){
      .struct_size = sizeof *ep,
      .ctx = d,
      .provider = p,
      .get_capability = dnnl_get_capability,
      .compile = dnnl_compile,
      .get_allocator = NULL, /* host memory: nothing to copy to or from the CPU provider */
      .release = ep_release,
      /* The compiled-group cache needs the host's blob_write (ABI 1.1). */
      .save_compiled = FITS(dnnl_host, blob_write) ? dnnl_save_compiled : NULL,
      .load_compiled = FITS(dnnl_host, blob_write) ? dnnl_load_compiled : NULL,
  };
  *out = ep;
  return NULL;
}

static const OnyxProvider dnnl_provider = {
    .struct_size = sizeof(OnyxProvider),
    .abi_major = ONYX_ABI_VERSION_MAJOR,
    .abi_minor = ONYX_ABI_VERSION_MINOR,
    .name = DNNL_EP_NAME,
    .vendor = "onyx",
    .version = "0.1.0",
    .device_count = dev_count,
    .device_info = dev_info,
    .create_ep = create_ep,
};

/* Called by the shim (dnnl_shim.c: libonyx_ep_onednn.so) once it has set up
 * OpenMP's wait policy. */
ONYX_EXPORT OnyxStatus* onyx_onednn_impl_init(const OnyxHostApi* host, const OnyxProvider** out);
ONYX_EXPORT OnyxStatus* onyx_onednn_impl_init(const OnyxHostApi* host, const OnyxProvider** out) {
  *out = NULL;
  if (host->abi_major != ONYX_ABI_VERSION_MAJOR)
    return host->status_create(
        ONYX_ABI_MISMATCH, "provider 'onednn' was built for ABI %d.%d; the host offers %u.%u",
        ONYX_ABI_VERSION_MAJOR, ONYX_ABI_VERSION_MINOR, host->abi_major, host->abi_minor);
  if (host->struct_size < DNNL_HOST_API_MIN_SIZE)
    return host->status_create(ONYX_ABI_MISMATCH,
                               "provider 'onednn': host API table of %zu bytes is smaller than "
                               "ABI 1.0's %zu",
                               host->struct_size, (size_t)DNNL_HOST_API_MIN_SIZE);
  dnnl_host = host;
  *out = &dnnl_provider;
  return NULL;
}
