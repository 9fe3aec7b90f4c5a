/* ox_providers.h — loading provider libraries. A library is loaded once per
 * process and shared (reference-counted) by every session that uses it. */
#ifndef OX_PROVIDERS_H
#define OX_PROVIDERS_H

#include "ox_common.h"
#include "ox_kreg.h"
#include "ox_schema.h"
#include "onyx/onyx_ep.h"

typedef struct OxProviderLib {
  char* path;   /* resolved absolute path */
  char* name;   /* provider->name */
  void* handle; /* dlopen handle */
  const OnyxProvider* provider;
  OxKernelRegistry* kernels; /* filled by register_kernels */
  OxSchemaRegistry* schemas; /* filled by register_schemas; may be empty */
  int refs;
} OxProviderLib;

/* Loads (or re-uses) the provider `name`. `library` NULL: search
 * libonyx_ep_<name>.so in ONYX_PROVIDER_PATH (':'-separated), the install's
 * provider folder (ONYX_INSTALL_PROVIDER_DIR), then beside libonyx.so.
 * Errors (ONYX_NOT_FOUND, ONYX_ABI_MISMATCH, ...) name the library path and
 * the reason: not found (listing the folders searched), dlopen's message, no
 * entry symbol, init failed, ABI major mismatch (both versions), provider
 * name differs from the requested one, kernel/schema registration failed. */
OnyxStatus* ox_provider_lib_acquire(const char* name, const char* library, OxProviderLib** out);
/* The same for an in-process provider: `init` stands for the library's
 * entry symbol; one load per init function, shared like a library. */
OnyxStatus* ox_provider_lib_acquire_init(const char* name, OnyxProviderInitFn init,
                                         OxProviderLib** out);
/* Drops a reference; the last one calls provider->release and dlclose. */
void ox_provider_lib_release(OxProviderLib* lib);

/* The host API table handed to every provider (host/session/host_api.c). */
const OnyxHostApi* ox_host_api(void);

/* Folder containing libonyx.so (for the search path), or NULL. */
const char* ox_self_dir(void);

#endif
