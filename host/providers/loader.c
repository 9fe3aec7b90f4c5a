/* loader.c — finding, loading, checking and sharing provider libraries.
 *
 * One process-wide list of loaded libraries, keyed by resolved path, guarded
 * by a mutex: sessions that name the same library share one dlopen handle,
 * one provider table and one kernel registry. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "ox_providers.h"

#ifndef ONYX_INSTALL_PROVIDER_DIR
#define ONYX_INSTALL_PROVIDER_DIR NULL
#endif
/* The provider folder relative to the folder libonyx.so is installed in:
 * ${libdir}/onyx/providers beside ${libdir}/libonyx.so (CMakeLists.txt,
 * ONYX_PROVIDER_INSTALL_DIR). */
#ifndef ONYX_PROVIDER_REL_DIR
#define ONYX_PROVIDER_REL_DIR "onyx/providers"
#endif

/* The oldest provider table the host accepts: v1.0 up to create_ep. `release`
 * comes after it and is read only when struct_size covers it. */
#define OX_PROVIDER_MIN_SIZE (offsetof(OnyxProvider, create_ep) + sizeof(void*))
#define OX_PROVIDER_COVERS(p, field)                                                               \
  ((p)->struct_size >= offsetof(OnyxProvider, field) + sizeof((p)->field))

static pthread_mutex_t ox_libs_lock = PTHREAD_MUTEX_INITIALIZER;
static OxProviderLib** ox_libs;
static size_t ox_libs_count, ox_libs_cap;

/* --- Where libonyx lives ---------------------------------------------------------- */

static char* ox_self_dir_value;
static pthread_once_t ox_self_dir_once = PTHREAD_ONCE_INIT;

static void ox_self_dir_init(void) {
  Dl_info info;
  struct link_map* map = NULL;
  /* Any function of ours: dladdr names the object it was linked into. */
  void (*self)(void) = ox_self_dir_init;
  void* addr;
  memcpy(&addr, &self, sizeof addr);
  if (!dladdr1(addr, &info, (void**)&map, RTLD_DL_LINKMAP) || !map) return;
  /* Linked into the main program (onyx_core is static there), glibc reports
   * argv[0], which may be relative to a folder we are no longer in. */
  const char* file = map->l_name[0] ? map->l_name : "/proc/self/exe";
  char* real = realpath(file, NULL);
  if (!real) return;
  char* slash = strrchr(real, '/');
  if (slash && slash != real)
    *slash = '\0';
  else if (slash)
    slash[1] = '\0'; /* an object in "/": the root folder */
  ox_self_dir_value = real;
}

const char* ox_self_dir(void) {
  pthread_once(&ox_self_dir_once, ox_self_dir_init);
  return ox_self_dir_value;
}

/* --- Searching --------------------------------------------------------------------- */

/* Names go into a file name, so only a safe alphabet is accepted. */
static bool ox_name_ok(const char* s) {
  if (!s || !*s || strlen(s) > 64) return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_')) return false;
  return true;
}

static bool ox_is_file(const char* path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Tries dir/file; on a hit returns the resolved path (caller frees). */
static char* ox_try_dir(const char* dir, size_t dir_len, const char* file) {
  char* cand = ox_asprintf("%.*s/%s", (int)dir_len, dir, file);
  if (!cand) return NULL;
  char* real = ox_is_file(cand) ? realpath(cand, NULL) : NULL;
  free(cand);
  return real;
}

/* Two spellings of one folder (either may not exist): equal text, or equal
 * once both resolve. */
static bool ox_same_dir(const char* a, const char* b) {
  if (strcmp(a, b) == 0) return true;
  char* ra = realpath(a, NULL);
  char* rb = ra ? realpath(b, NULL) : NULL;
  bool same = ra && rb && strcmp(ra, rb) == 0;
  free(ra);
  free(rb);
  return same;
}

/* Searches every folder in order, recording each in `searched` for the
 * not-found message. Returns the resolved path or NULL. */
static char* ox_search(const char* file, OxStr* searched) {
  const char* env = getenv("ONYX_PROVIDER_PATH");
  for (const char* p = env; p && *p;) {
    const char* end = strchr(p, ':');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > 0) { /* empty entries ("a::b") are skipped */
      ox_str_addf(searched, "%s%.*s (ONYX_PROVIDER_PATH)", searched->len ? ", " : "", (int)len, p);
      char* hit = ox_try_dir(p, len, file);
      if (hit) return hit;
    }
    p = end ? end + 1 : p + len;
  }
  /* The install's provider folder, first as found from where libonyx itself
   * lives (so a prefix that was moved or unpacked elsewhere still works),
   * then as configured at build time when that is a different folder. */
  const char* self = ox_self_dir();
  char* relative =
      self ? ox_asprintf("%s/%s", strcmp(self, "/") ? self : "", ONYX_PROVIDER_REL_DIR) : NULL;
  const char* configured = ONYX_INSTALL_PROVIDER_DIR;
  /* Installed where it was configured to be: one folder, one entry. */
  bool in_place = relative && configured && ox_same_dir(relative, configured);
  if (in_place) configured = NULL;
  const char* fixed[] = {relative, configured, self};
  const char* what[] = {in_place ? "install folder" : "install folder, relative to libonyx",
                        "install folder", "beside libonyx"};
  char* hit = NULL;
  for (size_t i = 0; i < OX_ARRAY_LEN(fixed) && !hit; i++) {
    if (!fixed[i]) continue;
    ox_str_addf(searched, "%s%s (%s)", searched->len ? ", " : "", fixed[i], what[i]);
    hit = ox_try_dir(fixed[i], strlen(fixed[i]), file);
  }
  free(relative);
  return hit;
}

static OnyxStatus* ox_resolve(const char* name, const char* library, char** path) {
  if (library) {
    if (!(*path = realpath(library, NULL)))
      return ox_status(errno == ENOMEM ? ONYX_OUT_OF_MEMORY : ONYX_NOT_FOUND,
                       "provider '%s': library '%s' not found: %s", name, library, strerror(errno));
    return NULL;
  }
  char file[128];
  snprintf(file, sizeof file, "libonyx_ep_%s.so", name);
  OxStr searched = {0};
  *path = ox_search(file, &searched);
  if (*path) {
    ox_str_free(&searched);
    return NULL;
  }
  OnyxStatus* st = ox_status(ONYX_NOT_FOUND, "provider '%s': library %s not found; searched: %s",
                             name, file, searched.len ? searched.data : "(no folder)");
  ox_str_free(&searched);
  return st;
}

/* --- Loading and checking ------------------------------------------------------------- */

/* Checks the table the library returned; every message names the path. */
static OnyxStatus* ox_check_table(const char* path, const OnyxProvider* p) {
  if (!p)
    return ox_status(ONYX_FAIL,
                     "provider library '%s': onyx_provider_init returned no provider table", path);
  if (p->struct_size < offsetof(OnyxProvider, abi_minor) + sizeof p->abi_minor)
    return ox_status(ONYX_ABI_MISMATCH,
                     "provider library '%s': provider table struct_size %zu is too small to hold "
                     "an ABI version",
                     path, p->struct_size);
  if (p->abi_major != ONYX_ABI_VERSION_MAJOR)
    return ox_status(ONYX_ABI_MISMATCH,
                     "provider library '%s' was built for Onyx ABI %u.%u; this host implements ABI "
                     "%d.%d",
                     path, (unsigned)p->abi_major, (unsigned)p->abi_minor, ONYX_ABI_VERSION_MAJOR,
                     ONYX_ABI_VERSION_MINOR);
  if (p->struct_size < OX_PROVIDER_MIN_SIZE)
    return ox_status(ONYX_ABI_MISMATCH,
                     "provider library '%s': provider table struct_size %zu is smaller than the "
                     "ABI 1.0 minimum %zu",
                     path, p->struct_size, (size_t)OX_PROVIDER_MIN_SIZE);
  static const struct {
    size_t offset;
    const char* slot;
  } required[] = {{offsetof(OnyxProvider, name), "name"},
                  {offsetof(OnyxProvider, device_count), "device_count"},
                  {offsetof(OnyxProvider, create_ep), "create_ep"}};
  for (size_t i = 0; i < OX_ARRAY_LEN(required); i++) {
    void* slot;
    memcpy(&slot, (const char*)p + required[i].offset, sizeof slot);
    if (!slot)
      return ox_status(ONYX_FAIL, "provider library '%s': required provider slot '%s' is NULL",
                       path, required[i].slot);
  }
  return NULL;
}

static OnyxStatus* ox_check_name(const char* path, const char* want, const char* have) {
  if (strcmp(want, have) == 0) return NULL;
  return ox_status(ONYX_INVALID_ARGUMENT,
                   "provider library '%s' provides '%s', not the requested '%s'", path, have, want);
}

static void ox_lib_free(OxProviderLib* lib) {
  if (!lib) return;
  if (lib->kernels) ox_kreg_free(lib->kernels);
  if (lib->schemas) ox_schema_registry_free(lib->schemas);
  /* The provider's release runs last of all its code, just before dlclose. */
  if (lib->provider && OX_PROVIDER_COVERS(lib->provider, release) && lib->provider->release)
    lib->provider->release(lib->provider);
  if (lib->handle) dlclose(lib->handle);
  pthread_mutex_destroy(&lib->call_lock);
  free(lib->path);
  free(lib->name);
  free(lib);
}

/* Registers the provider's kernels and schemas into fresh registries. */
static OnyxStatus* ox_register(OxProviderLib* lib) {
  const OnyxProvider* p = lib->provider;
  OX_TRY(ox_kreg_create(lib->name, &lib->kernels));
  OX_TRY(ox_schema_registry_create(&lib->schemas));
  if (p->register_kernels)
    OX_TRY(ox_status_wrap(p->register_kernels(p, lib->kernels),
                          "provider library '%s': register_kernels failed", lib->path));
  if (p->register_schemas)
    OX_TRY(ox_status_wrap(p->register_schemas(p, lib->schemas),
                          "provider library '%s': register_schemas failed", lib->path));
  return NULL;
}

/* Opens and initialises `path` (or calls `in_process` instead of opening a
 * library); on failure everything is undone. */
static OnyxStatus* ox_load(const char* name, char* path, OnyxProviderInitFn in_process,
                           OxProviderLib** out) {
  OxProviderLib* lib = calloc(1, sizeof *lib);
  if (!lib) {
    free(path);
    return ox_oom();
  }
  lib->path = path;
  lib->refs = 1;
  pthread_mutex_init(&lib->call_lock, NULL);
  if (!(lib->name = ox_strdup(name))) {
    ox_lib_free(lib);
    return ox_oom();
  }
  OnyxStatus* st = NULL;
  dlerror();
  lib->handle = in_process ? NULL : dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!in_process && !lib->handle) {
    const char* why = dlerror();
    st = ox_status(ONYX_FAIL, "provider library '%s': dlopen failed: %s", path,
                   why ? why : "unknown error");
  }
  OnyxProviderInitFn init = in_process;
  if (!st && !init) {
    void* sym = dlsym(lib->handle, ONYX_PROVIDER_INIT_SYMBOL);
    memcpy(&init, &sym, sizeof init);
    if (!init)
      st = ox_status(ONYX_FAIL,
                     "provider library '%s' has no entry symbol '%s' (not an Onyx provider, or "
                     "built without ONYX_EXPORT)",
                     path, ONYX_PROVIDER_INIT_SYMBOL);
  }
  const OnyxProvider* table = NULL;
  if (!st) {
    st = init(ox_host_api(), &table);
    if (st) {
      if (st->code == ONYX_OK) st->code = ONYX_FAIL; /* an error must not read as success */
      st = ox_status_wrap(st, "provider library '%s': onyx_provider_init failed", path);
    }
  }
  if (!st) st = ox_check_table(path, table);
  /* From here the table is trusted, so a failure calls its release. */
  if (!st) lib->provider = table;
  if (!st) st = ox_check_name(path, name, table->name);
  if (!st) st = ox_register(lib);
  if (st) {
    ox_lib_free(lib);
    return st;
  }
  *out = lib;
  return NULL;
}

/* --- Sharing -------------------------------------------------------------------------- */

static OxProviderLib* ox_find_loaded(const char* path) {
  for (size_t i = 0; i < ox_libs_count; i++)
    if (strcmp(ox_libs[i]->path, path) == 0) return ox_libs[i];
  return NULL;
}

/* Called with the lock held: reuses a loaded library or loads it. Takes path. */
static OnyxStatus* ox_acquire_locked(const char* name, char* path, OnyxProviderInitFn init,
                                     OxProviderLib** out) {
  OxProviderLib* lib = ox_find_loaded(path);
  if (lib) {
    OnyxStatus* st = ox_check_name(path, name, lib->name);
    free(path);
    if (st) return st;
    lib->refs++;
    *out = lib;
    return NULL;
  }
  if (!ox_grow((void**)&ox_libs, &ox_libs_cap, ox_libs_count + 1, sizeof *ox_libs)) {
    free(path);
    return ox_oom();
  }
  OX_TRY(ox_load(name, path, init, &lib));
  ox_libs[ox_libs_count++] = lib;
  *out = lib;
  return NULL;
}

OnyxStatus* ox_provider_lib_acquire(const char* name, const char* library, OxProviderLib** out) {
  if (!out) return ox_status(ONYX_INVALID_ARGUMENT, "ox_provider_lib_acquire: out is NULL");
  *out = NULL;
  if (!ox_name_ok(name))
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "provider name '%s' is invalid: use 1 to 64 lowercase letters, digits and '_'",
                     name ? name : "(null)");
  if (library && !*library)
    return ox_status(ONYX_INVALID_ARGUMENT, "provider '%s': library path is empty", name);
  char* path = NULL;
  OX_TRY(ox_resolve(name, library, &path));
  /* Loading runs under the lock: two sessions asking for one library at
   * once share one load, and the provider's init runs once per load. */
  pthread_mutex_lock(&ox_libs_lock);
  OnyxStatus* st = ox_acquire_locked(name, path, NULL, out);
  pthread_mutex_unlock(&ox_libs_lock);
  return st;
}

OnyxStatus* ox_provider_lib_acquire_init(const char* name, OnyxProviderInitFn init,
                                         OxProviderLib** out) {
  if (!out) return ox_status(ONYX_INVALID_ARGUMENT, "ox_provider_lib_acquire_init: out is NULL");
  *out = NULL;
  if (!ox_name_ok(name) || !init)
    return ox_status(ONYX_INVALID_ARGUMENT, "in-process provider '%s': invalid name or no init",
                     name ? name : "(null)");
  /* The key names the program or library the init function lives in, so
   * messages say where the provider came from. */
  void* addr;
  memcpy(&addr, &init, sizeof addr);
  Dl_info info;
  const char* where = dladdr(addr, &info) && info.dli_fname ? info.dli_fname : "?";
  char* path = ox_asprintf("in-process provider %p in %s", addr, where);
  if (!path) return ox_oom();
  pthread_mutex_lock(&ox_libs_lock);
  OnyxStatus* st = ox_acquire_locked(name, path, init, out);
  pthread_mutex_unlock(&ox_libs_lock);
  return st;
}

void ox_provider_lib_release(OxProviderLib* lib) {
  if (!lib) return;
  pthread_mutex_lock(&ox_libs_lock);
  bool last = --lib->refs == 0;
  if (last) {
    for (size_t i = 0; i < ox_libs_count; i++) {
      if (ox_libs[i] == lib) {
        ox_libs[i] = ox_libs[--ox_libs_count];
        break;
      }
    }
    if (ox_libs_count == 0) { /* nothing loaded: give the list back too */
      free(ox_libs);
      ox_libs = NULL;
      ox_libs_cap = 0;
    }
  }
  /* Unloading stays under the lock so a concurrent acquire of the same path
   * cannot dlopen it while its provider is being released. */
  if (last) ox_lib_free(lib);
  pthread_mutex_unlock(&ox_libs_lock);
}

/* --- Calling the provider table ------------------------------------------------------- */

/* The lock is the library's, not part of what "const" protects. */
static pthread_mutex_t* ox_call_lock(const OxProviderLib* lib) {
  return (pthread_mutex_t*)&lib->call_lock;
}

OnyxStatus* ox_provider_lib_device_count(const OxProviderLib* lib, size_t* count) {
  pthread_mutex_lock(ox_call_lock(lib));
  OnyxStatus* st = lib->provider->device_count(lib->provider, count);
  pthread_mutex_unlock(ox_call_lock(lib));
  return st;
}

OnyxStatus* ox_provider_lib_create_ep(const OxProviderLib* lib, const OnyxEpCreateArgs* args,
                                      OnyxEp** out) {
  pthread_mutex_lock(ox_call_lock(lib));
  OnyxStatus* st = lib->provider->create_ep(lib->provider, args, out);
  pthread_mutex_unlock(ox_call_lock(lib));
  return st;
}
