/* fake_provider.c — the provider table, options, EP lifetime and the stats
 * file of the test-only "fake" provider.
 *
 * Options (all strings):
 *   ops            ops claimed as single nodes (default "Add,Mul,Relu")
 *   fuse           ops fused into groups, one compiled kernel each (default "")
 *   decline_reason text of declines (default "fake device: op not supported")
 *   bad_group      "1": claim a non-convex group, which the host must refuse
 *   fail           device_count|create_ep|get_capability|compile|compute|alloc|queued
 *                  (queued: the kernels' work fails where it runs, on the stream)
 *   no_device      "1": no device ("fake device unplugged")
 *   cheap_relu     "1": mark claimed Relu nodes cheap
 *   stats_file     path written at EP release with the counters
 *   async          "1": the stream is a worker thread; kernels and copies queue
 *                  their work on it and return at once (default "0": synchronous)
 *   latency_ms     each kernel's work first sleeps this long (default 0), the
 *                  injected device latency
 * device_count gets no options, so "no_device" and "fail=device_count" are
 * reported by create_ep; the environment variables ONYX_FAKE_NO_DEVICE=1 and
 * ONYX_FAKE_FAIL=device_count make device_count itself fail. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fake.h"

const OnyxHostApi* fake_host;

bool fake_opset_has(const FakeOpSet* s, const char* name) {
  for (size_t i = 0; i < s->count; i++)
    if (strcmp(s->names[i], name) == 0) return true;
  return false;
}

static void opset_free(FakeOpSet* s) {
  for (size_t i = 0; i < s->count; i++)
    free(s->names[i]);
  free(s->names);
  *s = (FakeOpSet){0};
}

/* Splits "A, B,C" into names; empty items are skipped. */
static bool opset_parse(FakeOpSet* s, const char* text) {
  opset_free(s);
  size_t cap = 1;
  for (const char* c = text; *c; c++)
    cap += *c == ',';
  s->names = calloc(cap, sizeof *s->names);
  if (!s->names) return false;
  for (const char* p = text; *p;) {
    while (*p == ' ')
      p++;
    size_t len = strcspn(p, ",");
    size_t end = len;
    while (end && p[end - 1] == ' ')
      end--;
    if (end) {
      char* name = strndup(p, end);
      if (!name) return false;
      s->names[s->count++] = name;
    }
    p += len + (p[len] == ',');
  }
  return true;
}

const char* fake_keep_reason(FakeEp* f, const char* reason) {
  if (f->n_reasons == f->cap_reasons) {
    size_t cap = f->cap_reasons ? 2 * f->cap_reasons : 16;
    char** grown = realloc(f->reasons, cap * sizeof *grown);
    if (!grown) return NULL;
    f->reasons = grown;
    f->cap_reasons = cap;
  }
  char* copy = strdup(reason);
  if (copy) f->reasons[f->n_reasons++] = copy;
  return copy;
}

/* --- options ------------------------------------------------------------------------ */

static const struct {
  const char* name;
  FakeFail fail;
} fail_names[] = {
    {"device_count", FAKE_FAIL_DEVICE_COUNT},
    {"create_ep", FAKE_FAIL_CREATE_EP},
    {"get_capability", FAKE_FAIL_GET_CAPABILITY},
    {"compile", FAKE_FAIL_COMPILE},
    {"compute", FAKE_FAIL_COMPUTE},
    {"alloc", FAKE_FAIL_ALLOC},
    {"queued", FAKE_FAIL_QUEUED},
};

static OnyxStatus* bad_option(const char* key, const char* value, const char* expected) {
  return fake_host->status_create(
      ONYX_INVALID_CONFIG, "fake: option '%s' has value '%s'; expected %s", key, value, expected);
}

static OnyxStatus* opt_fail(FakeEp* f, const char* key, const char* v) {
  for (size_t i = 0; i < sizeof fail_names / sizeof fail_names[0]; i++) {
    if (strcmp(fail_names[i].name, v) == 0) {
      f->fail = fail_names[i].fail;
      return NULL;
    }
  }
  return bad_option(
      key, v, "one of device_count, create_ep, get_capability, compile, compute, alloc, queued");
}

static OnyxStatus* opt_flag(const char* key, const char* v, bool* out) {
  if (strcmp(v, "1") == 0 || strcmp(v, "true") == 0) {
    *out = true;
  } else if (strcmp(v, "0") == 0 || strcmp(v, "false") == 0) {
    *out = false;
  } else {
    return bad_option(key, v, "1, 0, true or false");
  }
  return NULL;
}

static OnyxStatus* opt_string(const char* v, char** out) {
  free(*out);
  *out = strdup(v);
  return *out ? NULL : fake_host->status_create(ONYX_OUT_OF_MEMORY, "fake: out of memory");
}

static OnyxStatus* opt_ops(FakeEp* f, const char* key, const char* v) {
  if (!opset_parse(&f->ops, v)) return fake_host->status_create(ONYX_OUT_OF_MEMORY, "fake: oom");
  return NULL;
}

static OnyxStatus* opt_fuse(FakeEp* f, const char* key, const char* v) {
  if (!opset_parse(&f->fuse, v)) return fake_host->status_create(ONYX_OUT_OF_MEMORY, "fake: oom");
  for (size_t i = 0; i < f->fuse.count; i++)
    if (!fake_op_find(f->fuse.names[i]))
      return fake_host->status_create(ONYX_INVALID_CONFIG,
                                      "fake: option 'fuse': op '%s' cannot be fused (fusable: "
                                      "Add, Mul, Relu, Sigmoid, Tanh)",
                                      f->fuse.names[i]);
  return NULL;
}

static OnyxStatus* opt_decline(FakeEp* f, const char* key, const char* v) {
  return opt_string(v, &f->decline_reason);
}
static OnyxStatus* opt_stats(FakeEp* f, const char* key, const char* v) {
  return opt_string(v, &f->stats_file);
}
static OnyxStatus* opt_bad_group(FakeEp* f, const char* key, const char* v) {
  return opt_flag(key, v, &f->bad_group);
}
static OnyxStatus* opt_cheap(FakeEp* f, const char* key, const char* v) {
  return opt_flag(key, v, &f->cheap_relu);
}
static OnyxStatus* opt_no_device(FakeEp* f, const char* key, const char* v) {
  return opt_flag(key, v, &f->no_device);
}
static OnyxStatus* opt_async(FakeEp* f, const char* key, const char* v) {
  return opt_flag(key, v, &f->async);
}
static OnyxStatus* opt_latency(FakeEp* f, const char* key, const char* v) {
  char* end = NULL;
  long ms = strtol(v, &end, 10);
  if (!*v || *end || ms < 0 || ms > 60000)
    return bad_option(key, v, "a whole number of milliseconds from 0 to 60000");
  f->latency_ms = ms;
  return NULL;
}

static const struct {
  const char* key;
  OnyxStatus* (*set)(FakeEp* f, const char* key, const char* value);
} option_table[] = {
    {"ops", opt_ops},
    {"fuse", opt_fuse},
    {"decline_reason", opt_decline},
    {"bad_group", opt_bad_group},
    {"fail", opt_fail},
    {"no_device", opt_no_device},
    {"cheap_relu", opt_cheap},
    {"stats_file", opt_stats},
    {"async", opt_async},
    {"latency_ms", opt_latency},
};

static OnyxStatus* apply_option(FakeEp* f, const char* key, const char* value) {
  for (size_t i = 0; i < sizeof option_table / sizeof option_table[0]; i++)
    if (strcmp(option_table[i].key, key) == 0) return option_table[i].set(f, key, value);
  return fake_host->status_create(ONYX_INVALID_CONFIG,
                                  "fake: unknown option '%s' (known: ops, fuse, decline_reason, "
                                  "bad_group, fail, no_device, cheap_relu, stats_file, async, "
                                  "latency_ms)",
                                  key);
}

static OnyxStatus* apply_options(FakeEp* f, const OnyxOptions* o) {
  const OnyxHostApi* H = fake_host;
  OnyxStatus* st = opt_ops(f, "ops", "Add,Mul,Relu");
  if (!st) st = opt_decline(f, "decline_reason", "fake device: op not supported");
  for (size_t i = 0, n = o ? H->options_count(o) : 0; i < n && !st; i++) {
    const char* key = H->options_key(o, i);
    const char* value = H->options_get(o, key);
    st = apply_option(f, key, value ? value : "");
  }
  return st;
}

/* --- the EP -------------------------------------------------------------------------- */

static void write_stats(FakeEp* f, size_t live) {
  FILE* fp = fopen(f->stats_file, "w");
  if (!fp) {
    fake_host->log(ONYX_LOG_ERROR, FAKE_NAME, "cannot write stats file '%s'", f->stats_file);
    return;
  }
  FakeStats* s = &f->stats;
  fprintf(fp,
          "allocs=%zu frees=%zu live=%zu copies_in=%zu copies_out=%zu kernels_run=%zu "
          "compiled_groups=%zu copies_device=%zu streams=%zu syncs=%zu events=%zu records=%zu "
          "waits=%zu\n",
          atomic_load(&s->allocs), atomic_load(&s->frees), live, atomic_load(&s->copies_in),
          atomic_load(&s->copies_out), atomic_load(&s->kernels_run),
          atomic_load(&s->compiled_groups), atomic_load(&s->copies_device),
          atomic_load(&s->streams), atomic_load(&s->syncs), atomic_load(&s->events),
          atomic_load(&s->records), atomic_load(&s->waits));
  fclose(fp);
}

static void ep_free(FakeEp* f) {
  size_t live = fake_release_live(f);
  if (f->stats_file) write_stats(f, live);
  opset_free(&f->ops);
  opset_free(&f->fuse);
  for (size_t i = 0; i < f->n_reasons; i++)
    free(f->reasons[i]);
  free(f->reasons);
  free(f->decline_reason);
  free(f->stats_file);
  pthread_cond_destroy(&f->event_cond);
  pthread_mutex_destroy(&f->event_lock);
  pthread_mutex_destroy(&f->lock);
  free(f);
}

static void ep_release(OnyxEp* ep) {
  ep_free(fake_ep(ep));
}

static OnyxStatus* injected_create_failure(FakeEp* f) {
  const OnyxHostApi* H = fake_host;
  if (f->no_device) return H->status_create(ONYX_NO_DEVICE, "fake device unplugged");
  if (f->fail == FAKE_FAIL_DEVICE_COUNT)
    return H->status_create(ONYX_FAIL, "fake: device_count failed (option fail=device_count)");
  if (f->fail == FAKE_FAIL_CREATE_EP)
    return H->status_create(ONYX_FAIL, "fake: create_ep failed (option fail=create_ep)");
  return NULL;
}

static OnyxStatus* create_ep(const OnyxProvider* p, const OnyxEpCreateArgs* args, OnyxEp** out) {
  const OnyxHostApi* H = fake_host;
  if (args->device_index != 0)
    return H->status_create(ONYX_INVALID_ARGUMENT, "fake: device %zu does not exist (1 device)",
                            args->device_index);
  FakeEp* f = calloc(1, sizeof *f);
  if (!f) return H->status_create(ONYX_OUT_OF_MEMORY, "fake: out of memory creating the EP");
  pthread_mutex_init(&f->lock, NULL);
  pthread_mutex_init(&f->event_lock, NULL);
  pthread_cond_init(&f->event_cond, NULL);
  OnyxStatus* st = apply_options(f, args->options);
  if (!st) st = injected_create_failure(f);
  if (st) {
    ep_free(f);
    return st;
  }
  fake_allocator_init(f);
  f->ep = (OnyxEp){.struct_size = sizeof(OnyxEp),
                   .ctx = f,
                   .provider = p,
                   .get_capability = fake_get_capability,
                   .compile = fake_compile,
                   .release = ep_release};
  fake_install_memory_slots(&f->ep);
  *out = &f->ep;
  return NULL;
}

/* --- the provider ----------------------------------------------------------------------- */

static bool env_is(const char* name, const char* value) {
  const char* v = getenv(name);
  return v && strcmp(v, value) == 0;
}

static OnyxStatus* device_count(const OnyxProvider* p, size_t* count) {
  *count = 0;
  if (env_is("ONYX_FAKE_NO_DEVICE", "1"))
    return fake_host->status_create(ONYX_NO_DEVICE, "fake device unplugged");
  if (env_is("ONYX_FAKE_FAIL", "device_count"))
    return fake_host->status_create(ONYX_FAIL,
                                    "fake: device_count failed (ONYX_FAKE_FAIL=device_count)");
  *count = 1;
  return NULL;
}

static OnyxStatus* device_info(const OnyxProvider* p, size_t index, OnyxDeviceInfo* out) {
  static const char* const keys[] = {"kind"};
  static const char* const values[] = {"test"};
  if (index != 0)
    return fake_host->status_create(ONYX_INVALID_ARGUMENT,
                                    "fake: device %zu does not exist (1 device)", index);
    /* Write only what the host's struct_size covers. */
#define FAKE_FITS(field) (offsetof(OnyxDeviceInfo, field) + sizeof out->field <= out->struct_size)
  if (FAKE_FITS(name)) out->name = "Fake accelerator";
  if (FAKE_FITS(memory)) out->memory = fake_memory;
  if (FAKE_FITS(memory_bytes)) out->memory_bytes = 0;
  if (FAKE_FITS(property_count)) {
    out->property_keys = keys;
    out->property_values = values;
    out->property_count = 1;
  }
#undef FAKE_FITS
  return NULL;
}

static const OnyxProvider fake_provider = {
    .struct_size = sizeof(OnyxProvider),
    .abi_major = ONYX_ABI_VERSION_MAJOR,
    .abi_minor = ONYX_ABI_VERSION_MINOR,
    .name = FAKE_NAME,
    .vendor = "Onyx tests",
    .version = "1.0",
    .ctx = NULL,
    .next = NULL,
    .device_count = device_count,
    .device_info = device_info,
    .score = NULL, /* 0: the only build */
    .register_kernels = fake_register_kernels,
    .register_schemas = NULL, /* no custom ops */
    .create_ep = create_ep,
    .release = NULL, /* nothing global to free */
};

ONYX_EXPORT OnyxStatus* onyx_provider_init(const OnyxHostApi* host, const OnyxProvider** out) {
  if (!host) return NULL; /* no way to report it */
  if (!out) return host->status_create(ONYX_INVALID_ARGUMENT, "fake: init without an out pointer");
  if (host->abi_major != ONYX_ABI_VERSION_MAJOR)
    return host->status_create(ONYX_ABI_MISMATCH, "fake: built for ABI %d.%d, host offers %u.%u",
                               ONYX_ABI_VERSION_MAJOR, ONYX_ABI_VERSION_MINOR, host->abi_major,
                               host->abi_minor);
  fake_host = host;
  *out = &fake_provider;
  return NULL;
}
