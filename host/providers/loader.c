/* loader.c — finding, loading, checking and sharing provider libraries.
 *
 * One process-wide list of loaded libraries, keyed by resolved path, guarded
 * by a mutex: sessions that name the same library share one dlopen handle,
 * one provider table and one kernel registry. A provider asked for by name
 * may be found in several folders of the search path: each copy is loaded
 * and the one of highest score kept (ox_providers.h has the rule). */
#include <dirent.h>
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
static char* ox_try_dir(const char* dir, const char* file) {
  char* cand = ox_asprintf("%s/%s", dir, file);
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

/* One folder of the search path and how it got there, for messages. */
typedef struct OxSearchDir {
  char* dir;
  const char* what;
} OxSearchDir;

static void ox_search_dirs_free(OxSearchDir* dirs, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(dirs[i].dir);
  free(dirs);
}

static bool ox_search_dirs_add(OxSearchDir** dirs, size_t* n, size_t* cap, char* dir,
                               const char* what) {
  if (!dir || !ox_grow((void**)dirs, cap, *n + 1, sizeof **dirs)) {
    free(dir);
    return false;
  }
  (*dirs)[(*n)++] = (OxSearchDir){dir, what};
  return true;
}

/* The folders of the search path, in order: ONYX_PROVIDER_PATH's entries
 * (empty ones skipped), the install's provider folder as found from where
 * libonyx itself lives (so a prefix that was moved or unpacked elsewhere
 * still works), the one configured at build time when that is a different
 * folder, then the folder of libonyx. */
static OnyxStatus* ox_search_dirs(OxSearchDir** out, size_t* count) {
  OxSearchDir* dirs = NULL;
  size_t n = 0, cap = 0;
  bool ok = true;
  const char* env = getenv("ONYX_PROVIDER_PATH");
  for (const char* p = env; ok && p && *p;) {
    const char* end = strchr(p, ':');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > 0) /* empty entries ("a::b") are skipped */
      ok = ox_search_dirs_add(&dirs, &n, &cap, ox_strndup(p, len), "ONYX_PROVIDER_PATH");
    p = end ? end + 1 : p + len;
  }
  const char* self = ox_self_dir();
  char* relative =
      self ? ox_asprintf("%s/%s", strcmp(self, "/") ? self : "", ONYX_PROVIDER_REL_DIR) : NULL;
  const char* configured = ONYX_INSTALL_PROVIDER_DIR;
  /* Installed where it was configured to be: one folder, one entry. */
  bool in_place = relative && configured && ox_same_dir(relative, configured);
  if (ok && relative)
    ok = ox_search_dirs_add(&dirs, &n, &cap, relative,
                            in_place ? "install folder" : "install folder, relative to libonyx");
  else
    free(relative);
  if (ok && configured && !in_place)
    ok = ox_search_dirs_add(&dirs, &n, &cap, ox_strdup(configured), "install folder");
  if (ok && self) ok = ox_search_dirs_add(&dirs, &n, &cap, ox_strdup(self), "beside libonyx");
  if (!ok) {
    ox_search_dirs_free(dirs, n);
    return ox_oom();
  }
  *out = dirs;
  *count = n;
  return NULL;
}

static bool ox_has_path(char* const* paths, size_t n, const char* path) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(paths[i], path) == 0) return true;
  return false;
}

/* Every folder of the search path holding `file`, as resolved paths in
 * search order, each once. Every folder goes into `searched` for the
 * not-found message. */
static OnyxStatus* ox_search(const char* file, OxStr* searched, char*** out, size_t* count) {
  OxSearchDir* dirs = NULL;
  size_t n_dirs = 0;
  OX_TRY(ox_search_dirs(&dirs, &n_dirs));
  char** hits = NULL;
  size_t n = 0, cap = 0;
  OnyxStatus* st = NULL;
  for (size_t i = 0; !st && i < n_dirs; i++) {
    ox_str_addf(searched, "%s%s (%s)", searched->len ? ", " : "", dirs[i].dir, dirs[i].what);
    char* hit = ox_try_dir(dirs[i].dir, file);
    if (!hit) continue;
    if (ox_has_path(hits, n, hit)) {
      free(hit);
    } else if (!ox_grow((void**)&hits, &cap, n + 1, sizeof *hits)) {
      free(hit);
      st = ox_oom();
    } else {
      hits[n++] = hit;
    }
  }
  ox_search_dirs_free(dirs, n_dirs);
  if (!st && searched->oom) st = ox_oom();
  if (st) {
    for (size_t i = 0; i < n; i++)
      free(hits[i]);
    free(hits);
    return st;
  }
  *out = hits;
  *count = n;
  return NULL;
}

void ox_provider_files_free(OxProviderFile* files, size_t count) {
  for (size_t i = 0; i < count; i++) {
    free(files[i].name);
    free(files[i].path);
  }
  free(files);
}

/* The provider name of a file called libonyx_ep_<name>.so, or NULL. */
static char* ox_file_provider_name(const char* file) {
  static const char prefix[] = "libonyx_ep_", suffix[] = ".so";
  size_t len = strlen(file), pre = sizeof prefix - 1, suf = sizeof suffix - 1;
  if (len <= pre + suf || strncmp(file, prefix, pre) != 0 || strcmp(file + len - suf, suffix) != 0)
    return NULL;
  char* name = ox_strndup(file + pre, len - pre - suf);
  if (name && !ox_name_ok(name)) {
    free(name);
    return NULL;
  }
  return name;
}

static int ox_name_cmp(const void* a, const void* b) {
  return strcmp(*(char* const*)a, *(char* const*)b);
}

/* Appends the provider libraries of one folder in name order, skipping files
 * found before (an earlier folder, or a link to one listed already). A
 * folder that cannot be read is passed over, as when searching by name. */
static OnyxStatus* ox_scan_dir(const char* dir, OxProviderFile** files, size_t* n, size_t* cap) {
  DIR* d = opendir(dir);
  if (!d) return NULL;
  char** names = NULL;
  size_t n_names = 0, cap_names = 0;
  OnyxStatus* st = NULL;
  for (struct dirent* e; (e = readdir(d));) {
    char* name = ox_file_provider_name(e->d_name);
    if (!name) continue;
    if (!ox_grow((void**)&names, &cap_names, n_names + 1, sizeof *names)) {
      free(name);
      st = ox_oom();
      break;
    }
    names[n_names++] = name;
  }
  closedir(d);
  if (!st) qsort(names, n_names, sizeof *names, ox_name_cmp);
  for (size_t k = 0; !st && k < n_names; k++) {
    char file[128];
    snprintf(file, sizeof file, "libonyx_ep_%s.so", names[k]);
    char* path = ox_try_dir(dir, file);
    bool seen = false;
    for (size_t i = 0; path && i < *n; i++)
      seen = seen || strcmp((*files)[i].path, path) == 0;
    if (!path || seen) {
      free(path);
      continue;
    }
    if (!ox_grow((void**)files, cap, *n + 1, sizeof **files)) {
      free(path);
      st = ox_oom();
      break;
    }
    (*files)[(*n)++] = (OxProviderFile){.name = names[k], .path = path};
    names[k] = NULL; /* taken */
  }
  for (size_t k = 0; k < n_names; k++)
    free(names[k]);
  free(names);
  return st;
}

OnyxStatus* ox_provider_scan(OxProviderFile** out, size_t* count) {
  *out = NULL;
  *count = 0;
  OxSearchDir* dirs = NULL;
  size_t n_dirs = 0;
  OX_TRY(ox_search_dirs(&dirs, &n_dirs));
  OxProviderFile* files = NULL;
  size_t n = 0, cap = 0;
  OnyxStatus* st = NULL;
  for (size_t i = 0; !st && i < n_dirs; i++)
    st = ox_scan_dir(dirs[i].dir, &files, &n, &cap);
  ox_search_dirs_free(dirs, n_dirs);
  if (st) {
    ox_provider_files_free(files, n);
    return st;
  }
  *out = files;
  *count = n;
  return NULL;
}

static OnyxStatus* ox_not_found(const char* name, const char* file, const OxStr* searched) {
  return ox_status(ONYX_NOT_FOUND, "provider '%s': library %s not found; searched: %s", name, file,
                   searched->len ? searched->data : "(no folder)");
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
static OnyxStatus* ox_load(const OnyxHostApi* host, const char* name, char* path,
                           OnyxProviderInitFn in_process, OxProviderLib** out) {
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
    st = init(host, &table);
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
static OnyxStatus* ox_acquire_locked(const OnyxHostApi* host, const char* name, char* path,
                                     OnyxProviderInitFn init, OxProviderLib** out) {
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
  OX_TRY(ox_load(host, name, path, init, &lib));
  ox_libs[ox_libs_count++] = lib;
  *out = lib;
  return NULL;
}

/* Loads (or re-uses) the library at the resolved `path` as provider `name`. */
static OnyxStatus* ox_acquire_path(const OnyxHostApi* host, const char* name, const char* path,
                                   OxProviderLib** out) {
  char* copy = ox_strdup(path);
  if (!copy) return ox_oom();
  /* Loading runs under the lock: two sessions asking for one library at
   * once share one load, and the provider's init runs once per load. */
  pthread_mutex_lock(&ox_libs_lock);
  OnyxStatus* st = ox_acquire_locked(host, name, copy, NULL, out);
  pthread_mutex_unlock(&ox_libs_lock);
  return st;
}

static OnyxStatus* ox_check_acquire_args(const OnyxHostApi* host, const char* name,
                                         const char* library, OxProviderLib** out) {
  if (!out) return ox_status(ONYX_INVALID_ARGUMENT, "ox_provider_lib_acquire: out is NULL");
  *out = NULL;
  if (!host) return ox_status(ONYX_INVALID_ARGUMENT, "ox_provider_lib_acquire: host API is NULL");
  if (!ox_name_ok(name))
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "provider name '%s' is invalid: use 1 to 64 lowercase letters, digits and '_'",
                     name ? name : "(null)");
  if (library && !*library)
    return ox_status(ONYX_INVALID_ARGUMENT, "provider '%s': library path is empty", name);
  return NULL;
}

OnyxStatus* ox_provider_lib_load(const OnyxHostApi* host, const char* name, const char* library,
                                 OxProviderLib** out) {
  OX_TRY(ox_check_acquire_args(host, name, library, out));
  if (!library) return ox_status(ONYX_INVALID_ARGUMENT, "provider '%s': no library path", name);
  char* path = realpath(library, NULL);
  if (!path)
    return ox_status(errno == ENOMEM ? ONYX_OUT_OF_MEMORY : ONYX_NOT_FOUND,
                     "provider '%s': library '%s' not found: %s", name, library, strerror(errno));
  OnyxStatus* st = ox_acquire_path(host, name, path, out);
  free(path);
  return st;
}

bool ox_provider_score_beats(int32_t score, bool have_best, int32_t best_score) {
  return score >= 0 && (!have_best || score > best_score);
}

/* A provider whose score is negative cannot run on this machine. */
static OnyxStatus* ox_score_refusal(const OxProviderLib* lib, int32_t score) {
  return ox_status(ONYX_NO_DEVICE,
                   "provider library '%s' reports score %d: it cannot run on this machine",
                   lib->path, (int)score);
}

/* Loads every candidate and keeps the one of highest score; among equal
 * scores the first in search order. A candidate that fails to load or whose
 * score is negative is passed over; when none is left, the error is the
 * only candidate's own, or one naming each candidate and why. */
static OnyxStatus* ox_acquire_best(const OnyxHostApi* host, const char* name, char* const* paths,
                                   size_t n, OxProviderLib** out) {
  OxProviderLib* best = NULL;
  int32_t best_score = 0;
  OnyxStatus* first = NULL; /* the first candidate's error */
  OxStr why = {0};          /* every candidate's error */
  bool broken = false;      /* a candidate did not load */
  for (size_t i = 0; i < n; i++) {
    OxProviderLib* lib = NULL;
    OnyxStatus* st = ox_acquire_path(host, name, paths[i], &lib);
    broken = broken || st != NULL;
    if (!st) {
      int32_t score = ox_provider_lib_score(lib);
      if (score < 0) {
        st = ox_score_refusal(lib, score);
        ox_provider_lib_release(lib);
      } else if (ox_provider_score_beats(score, best != NULL, best_score)) {
        ox_provider_lib_release(best);
        best = lib;
        best_score = score;
      } else {
        ox_provider_lib_release(lib);
      }
    }
    if (!st) continue;
    if (st->code == ONYX_OUT_OF_MEMORY) { /* not a property of the candidate */
      ox_status_free(first);
      ox_str_free(&why);
      ox_provider_lib_release(best);
      return st;
    }
    ox_str_addf(&why, "%s%s", why.len ? "; " : "", st->message ? st->message : "");
    if (!first)
      first = st;
    else
      ox_status_free(st);
  }
  if (best) {
    /* A library passed over because it does not load is worth a warning:
     * it sits on the search path broken. One that cannot run here is not. */
    if (first)
      ox_log(broken ? ONYX_LOG_WARNING : ONYX_LOG_INFO,
             "provider '%s': using %s (score %d); passed over: %s", name, best->path,
             (int)best_score, why.data ? why.data : "");
    ox_status_free(first);
    ox_str_free(&why);
    *out = best;
    return NULL;
  }
  if (n > 1 && first) {
    OnyxStatus* all = why.oom ? ox_oom()
                              : ox_status(first->code,
                                          "provider '%s': none of the %zu libraries found can be "
                                          "used: %s",
                                          name, n, why.data);
    ox_status_free(first);
    first = all;
  }
  ox_str_free(&why);
  return first;
}

OnyxStatus* ox_provider_lib_acquire(const OnyxHostApi* host, const char* name, const char* library,
                                    OxProviderLib** out) {
  OX_TRY(ox_check_acquire_args(host, name, library, out));
  if (library) {
    OX_TRY(ox_provider_lib_load(host, name, library, out));
    int32_t score = ox_provider_lib_score(*out);
    if (score >= 0) return NULL;
    OnyxStatus* st = ox_score_refusal(*out, score);
    ox_provider_lib_release(*out);
    *out = NULL;
    return st;
  }
  char file[128];
  snprintf(file, sizeof file, "libonyx_ep_%s.so", name);
  OxStr searched = {0};
  char** paths = NULL;
  size_t n = 0;
  OnyxStatus* st = ox_search(file, &searched, &paths, &n);
  if (!st && n == 0) st = ox_not_found(name, file, &searched);
  ox_str_free(&searched);
  if (!st) st = ox_acquire_best(host, name, paths, n, out);
  for (size_t i = 0; i < n; i++)
    free(paths[i]);
  free(paths);
  return st;
}

OnyxStatus* ox_provider_lib_acquire_init(const OnyxHostApi* host, const char* name,
                                         OnyxProviderInitFn init, OxProviderLib** out) {
  if (!out) return ox_status(ONYX_INVALID_ARGUMENT, "ox_provider_lib_acquire_init: out is NULL");
  *out = NULL;
  if (!ox_name_ok(name) || !init || !host)
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
  OnyxStatus* st = ox_acquire_locked(host, name, path, init, out);
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

int32_t ox_provider_lib_score(const OxProviderLib* lib) {
  if (!lib->provider->score) return 0;
  pthread_mutex_lock(ox_call_lock(lib));
  int32_t score = lib->provider->score(lib->provider);
  pthread_mutex_unlock(ox_call_lock(lib));
  return score;
}

OnyxStatus* ox_provider_lib_device_info(const OxProviderLib* lib, size_t index,
                                        OnyxDeviceInfo* out) {
  if (!lib->provider->device_info) return NULL;
  pthread_mutex_lock(ox_call_lock(lib));
  OnyxStatus* st = lib->provider->device_info(lib->provider, index, out);
  pthread_mutex_unlock(ox_call_lock(lib));
  return st;
}
