/* ox_providers.h — loading provider libraries. A library is loaded once per
 * process and shared (reference-counted) by every session that uses it. */
#ifndef OX_PROVIDERS_H
#define OX_PROVIDERS_H

#include <pthread.h>
#include "ox_common.h"
#include "ox_kreg.h"
#include "ox_schema.h"
#include "onyx/onyx.h"
#include "onyx/onyx_ep.h"

typedef struct OxProviderLib {
  char* path;   /* resolved absolute path */
  char* name;   /* provider->name */
  void* handle; /* dlopen handle */
  const OnyxProvider* provider;
  OxKernelRegistry* kernels; /* filled by register_kernels */
  OxSchemaRegistry* schemas; /* filled by register_schemas; may be empty */
  int refs;
  /* Serializes calls into the provider table's slots (device_count,
   * create_ep, ...): onyx_ep.h promises a provider "one thread at a time",
   * while sessions on several threads share one library. */
  pthread_mutex_t call_lock;
} OxProviderLib;

/* Provider options: ordered key/value strings (the handle of onyx_ep.h). */
struct OnyxOptions {
  char** keys;
  char** values;
  size_t count, cap;
};

/* A provider a session loads, as its options name it. */
typedef struct OxProviderSpec {
  char* name;
  char* library;           /* NULL: search by name */
  OnyxProviderInitFn init; /* an in-process provider (no library), or NULL */
  int device;
  bool required;
  OnyxOptions options;
} OxProviderSpec;

/* Loads (or re-uses) the provider `name`. `library` NULL: search
 * libonyx_ep_<name>.so in ONYX_PROVIDER_PATH (':'-separated), the install's
 * provider folder found relative to libonyx.so (<its folder>/onyx/providers,
 * so a relocated prefix works), the provider folder configured at build time
 * (ONYX_INSTALL_PROVIDER_DIR) when that is another folder, then beside
 * libonyx.so. Every folder holding the file gives a candidate; each is
 * loaded and asked for its score (OnyxProvider.score, NULL: 0), and the
 * highest score wins, the first in that order among equal scores. A
 * candidate that fails to load or scores negative is passed over (logged
 * when another is used); with none left, the error is that of the only
 * candidate, or one naming every candidate and why.
 * `library` given: that file; a negative score refuses it (ONYX_NO_DEVICE).
 * Errors (ONYX_NOT_FOUND, ONYX_ABI_MISMATCH, ...) name the library path and
 * the reason: not found (listing the folders searched), dlopen's message, no
 * entry symbol, init failed, ABI major mismatch (both versions), provider
 * name differs from the requested one, kernel/schema registration failed,
 * negative score.
 * `host` is the host API table handed to the provider's init on its first
 * load (the session's, host/session/host_api.c): the loader, below the
 * modules whose functions the table holds, takes it as a parameter. */
OnyxStatus* ox_provider_lib_acquire(const OnyxHostApi* host, const char* name, const char* library,
                                    OxProviderLib** out);
/* The rule that picks among the libraries of one name: a score beats the
 * best so far when it is not negative and, if there is a best, higher (so
 * the first of equal scores stays). */
bool ox_provider_score_beats(int32_t score, bool have_best, int32_t best_score);
/* Loads (or re-uses) exactly the file `library` as provider `name`, whatever
 * its score: for listings that show every library as it is. */
OnyxStatus* ox_provider_lib_load(const OnyxHostApi* host, const char* name, const char* library,
                                 OxProviderLib** out);
/* The same for an in-process provider: `init` stands for the library's
 * entry symbol; one load per init function, shared like a library. */
OnyxStatus* ox_provider_lib_acquire_init(const OnyxHostApi* host, const char* name,
                                         OnyxProviderInitFn init, OxProviderLib** out);
/* Drops a reference; the last one calls provider->release and dlclose. */
void ox_provider_lib_release(OxProviderLib* lib);

/* The provider's device_count, device_info, score and create_ep slots,
 * called under the library's call_lock so that sessions created on several
 * threads never enter one provider's table at once. Use these, never the
 * slots directly. device_info returns NULL without touching *out when the
 * provider has none (its device is the host CPU); score returns 0 when it
 * has none. */
OnyxStatus* ox_provider_lib_device_count(const OxProviderLib* lib, size_t* count);
OnyxStatus* ox_provider_lib_device_info(const OxProviderLib* lib, size_t index,
                                        OnyxDeviceInfo* out);
int32_t ox_provider_lib_score(const OxProviderLib* lib);
OnyxStatus* ox_provider_lib_create_ep(const OxProviderLib* lib, const OnyxEpCreateArgs* args,
                                      OnyxEp** out);

/* Building the list of onyx_session_options_list_providers (devices.c): an
 * empty list, then one entry per provider a session would load (by name, a
 * library path, or an in-process init), loaded and described as a session
 * loads it; a provider that fails to load is an entry saying why. */
OnyxStatus* ox_provider_list_new(OnyxProviderList** out);
OnyxStatus* ox_provider_list_add_spec(const OnyxHostApi* host, OnyxProviderList* l,
                                      const char* name, const char* library,
                                      OnyxProviderInitFn init);
/* The list of onyx_provider_list_create: every provider library on the
 * search path (ox_provider_scan), each loaded with `host` and described. */
OnyxStatus* ox_provider_list_scan(const OnyxHostApi* host, OnyxProviderList** out);

/* A provider library on the search path. */
typedef struct OxProviderFile {
  char* name; /* <name> of its file name libonyx_ep_<name>.so */
  char* path; /* resolved absolute path */
} OxProviderFile;
/* Every libonyx_ep_<name>.so (a valid name) in the folders of the search
 * path, in search order and by name within a folder, each resolved file
 * once. Nothing is loaded. Free with ox_provider_files_free. */
OnyxStatus* ox_provider_scan(OxProviderFile** files, size_t* count);
void ox_provider_files_free(OxProviderFile* files, size_t count);

/* Folder containing libonyx.so (for the search path), or NULL. */
const char* ox_self_dir(void);

/* A slot of OnyxEp that a provider built against an older minor may not have:
 * read only when the EP's struct_size covers it (NULL otherwise). */
#define OX_EP_SLOT(ep, field)                                                                      \
  ((ep)->struct_size >= offsetof(OnyxEp, field) + sizeof((ep)->field) ? (ep)->field : NULL)

#endif
