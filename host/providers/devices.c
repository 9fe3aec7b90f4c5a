/* devices.c — listing provider libraries and their devices (onyx.h,
 * "Providers and devices"; `onyx devices`).
 *
 * A list is built once and read-only afterwards. It holds copies of every
 * string a provider handed out, so no library needs to stay loaded: each one
 * is held only while it is described. */
#include <stdlib.h>
#include <string.h>
#include "ox_ir.h"
#include "ox_providers.h"

/* A provider that reports more devices, or a device with more properties,
 * is described as failing: such counts come from a broken table. */
#define OX_LIST_MAX_DEVICES    1024
#define OX_LIST_MAX_PROPERTIES 1024

typedef struct OxListedDevice {
  char* name;
  OnyxMemoryDevice memory;
  uint64_t memory_bytes;
  char** keys;
  char** values;
  size_t property_count;
  OnyxStatusCode status;
  char* message;
} OxListedDevice;

typedef struct OxListed {
  char* name;
  char* library; /* NULL: none found or usable */
  bool loaded;
  char* vendor; /* NULL unless loaded */
  char* version;
  int32_t score;
  bool selected;
  OnyxStatusCode status;
  char* message;
  size_t device_count;
  OxListedDevice* devices; /* device_count of them */
} OxListed;

struct OnyxProviderList {
  OxListed* items;
  size_t count, cap;
};

/* --- Building ------------------------------------------------------------------------- */

static void ox_free_strings(char** s, size_t n) {
  for (size_t i = 0; s && i < n; i++)
    free(s[i]);
  free(s);
}

static void ox_listed_device_clear(OxListedDevice* d) {
  free(d->name);
  ox_free_strings(d->keys, d->property_count);
  ox_free_strings(d->values, d->property_count);
  free(d->message);
}

static void ox_listed_clear(OxListed* e) {
  free(e->name);
  free(e->library);
  free(e->vendor);
  free(e->version);
  free(e->message);
  for (size_t i = 0; e->devices && i < e->device_count; i++)
    ox_listed_device_clear(&e->devices[i]);
  free(e->devices);
}

void onyx_provider_list_release(OnyxProviderList* l) {
  if (!l) return;
  for (size_t i = 0; i < l->count; i++)
    ox_listed_clear(&l->items[i]);
  free(l->items);
  free(l);
}

/* A new entry, zeroed, named `name` (copied). NULL when out of memory. */
static OxListed* ox_list_add(OnyxProviderList* l, const char* name) {
  if (!ox_grow((void**)&l->items, &l->cap, l->count + 1, sizeof *l->items)) return NULL;
  OxListed* e = &l->items[l->count];
  *e = (OxListed){.name = ox_strdup(name), .message = ox_strdup("")};
  if (!e->name || !e->message) {
    ox_listed_clear(e);
    return NULL;
  }
  l->count++;
  return e;
}

/* Replaces the entry's status and message with those of st, which it
 * releases. An error status whose code reads as success is a failure. */
static bool ox_set_status(char** message, OnyxStatusCode* code, OnyxStatus* st) {
  *code = st->code == ONYX_OK ? ONYX_FAIL : st->code;
  char* text = ox_strdup(st->message ? st->message : "");
  ox_status_free(st);
  if (!text) return false;
  free(*message);
  *message = text;
  return true;
}

static bool ox_set_message(char** message, OnyxStatusCode* code, OnyxStatusCode c, const char* fmt,
                           ...) OX_PRINTF(4, 5);

static bool ox_set_message(char** message, OnyxStatusCode* code, OnyxStatusCode c, const char* fmt,
                           ...) {
  va_list ap;
  va_start(ap, fmt);
  OnyxStatus* st = ox_status_v(c, fmt, ap);
  va_end(ap);
  if (!st || st->code == ONYX_OUT_OF_MEMORY || !st->message) {
    ox_status_free(st);
    return false;
  }
  return ox_set_status(message, code, st);
}

/* Copies n strings (a NULL one as "") into a new array. */
static char** ox_copy_strings(const char* const* s, size_t n) {
  char** out = calloc(n ? n : 1, sizeof *out);
  for (size_t i = 0; out && i < n; i++) {
    if (!(out[i] = ox_strdup(s[i] ? s[i] : ""))) {
      ox_free_strings(out, i);
      return NULL;
    }
  }
  return out;
}

/* Describes device `index` of the provider. Returns false when out of memory. */
static bool ox_describe_device(const OxProviderLib* lib, size_t index, OxListedDevice* d) {
  *d = (OxListedDevice){.status = ONYX_OK};
  if (!lib->provider->device_info) { /* the host CPU (onyx_ep.h) */
    d->name = ox_strdup("host CPU");
    d->memory = OX_HOST_MEMORY;
    d->message = ox_strdup("");
    return d->name && d->message;
  }
  OnyxDeviceInfo info = {.struct_size = sizeof info};
  OnyxStatus* st = ox_provider_lib_device_info(lib, index, &info);
  if (st) {
    bool ok = ox_set_status(&d->message, &d->status, st);
    d->name = ox_strdup("");
    return ok && d->name;
  }
  if (info.property_count > OX_LIST_MAX_PROPERTIES ||
      (info.property_count && (!info.property_keys || !info.property_values))) {
    d->name = ox_strdup("");
    return d->name && ox_set_message(&d->message, &d->status, ONYX_FAIL,
                                     "device_info of device %zu gave %zu properties %s", index,
                                     info.property_count,
                                     info.property_count > OX_LIST_MAX_PROPERTIES
                                         ? "(more than the host lists)"
                                         : "without their keys or values");
  }
  d->name = ox_strdup(info.name ? info.name : "");
  d->memory = info.memory;
  d->memory_bytes = info.memory_bytes;
  d->message = ox_strdup("");
  if (!d->name || !d->message) return false;
  char** keys = ox_copy_strings(info.property_keys, info.property_count);
  char** values = ox_copy_strings(info.property_values, info.property_count);
  if (!keys || !values) {
    ox_free_strings(keys, keys ? info.property_count : 0);
    ox_free_strings(values, values ? info.property_count : 0);
    return false;
  }
  d->keys = keys;
  d->values = values;
  d->property_count = info.property_count;
  return true;
}

/* Fills a loaded entry from its library: table strings, score, devices. */
static OnyxStatus* ox_describe(OxListed* e, const OxProviderLib* lib) {
  const OnyxProvider* p = lib->provider;
  e->loaded = true;
  e->vendor = ox_strdup(p->vendor ? p->vendor : "");
  e->version = ox_strdup(p->version ? p->version : "");
  if (!e->library) e->library = ox_strdup(lib->path);
  if (!e->vendor || !e->version || !e->library) return ox_oom();
  e->score = ox_provider_lib_score(lib);
  if (e->score < 0) /* it says it cannot run here: its devices are not asked for */
    return ox_set_message(&e->message, &e->status, ONYX_NO_DEVICE,
                          "score %d: the provider cannot run on this machine", (int)e->score)
               ? NULL
               : ox_oom();
  size_t count = 0;
  OnyxStatus* st = ox_provider_lib_device_count(lib, &count);
  if (st) return ox_set_status(&e->message, &e->status, st) ? NULL : ox_oom();
  if (count == 0)
    return ox_set_message(&e->message, &e->status, ONYX_NO_DEVICE,
                          "the provider reports zero devices")
               ? NULL
               : ox_oom();
  if (count > OX_LIST_MAX_DEVICES)
    return ox_set_message(&e->message, &e->status, ONYX_FAIL,
                          "device_count reports %zu devices, more than the %d the host lists",
                          count, OX_LIST_MAX_DEVICES)
               ? NULL
               : ox_oom();
  if (!(e->devices = calloc(count, sizeof *e->devices))) return ox_oom();
  e->device_count = count;
  for (size_t i = 0; i < count; i++)
    if (!ox_describe_device(lib, i, &e->devices[i])) return ox_oom();
  return NULL;
}

/* Records a load failure on the entry; only running out of memory fails
 * the listing itself. */
static OnyxStatus* ox_load_failed(OxListed* e, OnyxStatus* st) {
  if (st->code == ONYX_OUT_OF_MEMORY) return st;
  return ox_set_status(&e->message, &e->status, st) ? NULL : ox_oom();
}

/* --- Sources -------------------------------------------------------------------------- */

/* Marks, per name, the library the loader's rule picks: the loaded one of
 * highest non-negative score, the first among equal scores. */
static void ox_mark_selected(OnyxProviderList* l) {
  for (size_t i = 0; i < l->count; i++) {
    OxListed* best = NULL;
    bool first_of_name = true;
    for (size_t k = 0; k < i && first_of_name; k++)
      first_of_name = strcmp(l->items[k].name, l->items[i].name) != 0;
    if (!first_of_name) continue;
    for (size_t k = i; k < l->count; k++) {
      OxListed* e = &l->items[k];
      if (strcmp(e->name, l->items[i].name) != 0 || !e->loaded) continue;
      if (ox_provider_score_beats(e->score, best != NULL, best ? best->score : 0)) best = e;
    }
    if (best) best->selected = true;
  }
}

OnyxStatus* ox_provider_list_scan(const OnyxHostApi* host, OnyxProviderList** out) {
  if (!out) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_provider_list_create: out is NULL");
  *out = NULL;
  OxProviderFile* files = NULL;
  size_t n = 0;
  OX_TRY(ox_provider_scan(&files, &n));
  OnyxProviderList* l = calloc(1, sizeof *l);
  OnyxStatus* st = l ? NULL : ox_oom();
  for (size_t i = 0; !st && i < n; i++) {
    OxListed* e = ox_list_add(l, files[i].name);
    if (!e || !(e->library = ox_strdup(files[i].path))) {
      st = ox_oom();
      break;
    }
    OxProviderLib* lib = NULL;
    OnyxStatus* load = ox_provider_lib_load(host, files[i].name, files[i].path, &lib);
    st = load ? ox_load_failed(e, load) : ox_describe(e, lib);
    ox_provider_lib_release(lib);
  }
  ox_provider_files_free(files, n);
  if (st) {
    onyx_provider_list_release(l);
    return st;
  }
  ox_mark_selected(l);
  *out = l;
  return NULL;
}

OnyxStatus* ox_provider_list_new(OnyxProviderList** out) {
  *out = calloc(1, sizeof **out);
  return *out ? NULL : ox_oom();
}

OnyxStatus* ox_provider_list_add_spec(const OnyxHostApi* host, OnyxProviderList* l,
                                      const char* name, const char* library,
                                      OnyxProviderInitFn init) {
  OxListed* e = ox_list_add(l, name);
  if (!e) return ox_oom();
  OxProviderLib* lib = NULL;
  OnyxStatus* st = init ? ox_provider_lib_acquire_init(host, name, init, &lib)
                        : ox_provider_lib_acquire(host, name, library, &lib);
  if (st) return ox_load_failed(e, st);
  e->selected = true;
  st = ox_describe(e, lib);
  ox_provider_lib_release(lib);
  return st;
}

/* --- Reading -------------------------------------------------------------------------- */

size_t onyx_provider_list_count(const OnyxProviderList* l) {
  return l ? l->count : 0;
}

OnyxStatus* onyx_provider_list_info(const OnyxProviderList* l, size_t i, OnyxProviderInfo* out) {
  if (!l || !out)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_provider_list_info: %s is NULL",
                     l ? "out" : "list");
  if (out->struct_size < sizeof *out)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_provider_list_info: struct_size %zu is smaller than %zu (set it to "
                     "sizeof(OnyxProviderInfo))",
                     out->struct_size, sizeof *out);
  if (i >= l->count)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_provider_list_info: no entry %zu (the list has %zu)", i, l->count);
  const OxListed* e = &l->items[i];
  /* Only this version's fields: a later, larger struct keeps the rest. */
  OnyxProviderInfo info = {.struct_size = out->struct_size,
                           .name = e->name,
                           .library = e->library,
                           .loaded = e->loaded,
                           .vendor = e->vendor,
                           .version = e->version,
                           .score = e->score,
                           .selected = e->selected,
                           .status = e->status,
                           .message = e->message,
                           .device_count = e->device_count};
  memcpy(out, &info, sizeof info);
  return NULL;
}

OnyxStatus* onyx_provider_list_device(const OnyxProviderList* l, size_t i, size_t device,
                                      OnyxProviderDevice* out) {
  if (!l || !out)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_provider_list_device: %s is NULL",
                     l ? "out" : "list");
  if (out->struct_size < sizeof *out)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_provider_list_device: struct_size %zu is smaller than %zu (set it to "
                     "sizeof(OnyxProviderDevice))",
                     out->struct_size, sizeof *out);
  if (i >= l->count)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_provider_list_device: no entry %zu (the list has %zu)", i, l->count);
  const OxListed* e = &l->items[i];
  if (device >= e->device_count)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "provider '%s' (%s): device %zu does not exist (it has %zu)", e->name,
                     e->library ? e->library : "no library", device, e->device_count);
  const OxListedDevice* d = &e->devices[device];
  OnyxProviderDevice info = {.struct_size = out->struct_size,
                             .name = d->name,
                             .memory = d->memory,
                             .memory_bytes = d->memory_bytes,
                             .property_keys = (const char* const*)d->keys,
                             .property_values = (const char* const*)d->values,
                             .property_count = d->property_count,
                             .status = d->status,
                             .message = d->message};
  memcpy(out, &info, sizeof info);
  return NULL;
}
