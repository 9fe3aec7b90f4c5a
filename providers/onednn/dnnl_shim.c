/* dnnl_shim.c — libonyx_ep_onednn.so itself: a small loader in front of the
 * provider proper (libonyx_onednn_impl.so, beside it), so that it can choose
 * how OpenMP waits before Debian's oneDNN brings libgomp into the process.
 *
 * libgomp reads its wait policy once, when it is loaded. Its default lets
 * idle team threads spin for a long time (and OMP_WAIT_POLICY=ACTIVE for
 * ever), and those threads take the cores from the session's own intra-op
 * pool when CPU-provider nodes run between oneDNN primitives (bert_layer at
 * 2 threads: 33.5 ms). A passive policy sleeps at once, so every primitive
 * pays for waking the team (convnet at 2 threads: 17.0 ms). Unless the
 * application chose a policy (OMP_WAIT_POLICY or GOMP_SPINCOUNT), the shim
 * asks for a bounded spin, about as long as the host pool's own (50 us):
 * passive, with GOMP_SPINCOUNT=3000 (bert_layer 18.3 ms, convnet 10.8 ms),
 * then loads the implementation. If libgomp was loaded earlier by something
 * else, its policy is whatever that load read (docs/providers/onednn.md). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onyx/onyx_ep.h"

#define IMPL_FILE "libonyx_onednn_impl.so"
#define IMPL_INIT "onyx_onednn_impl_init"
/* libgomp spin iterations before an idle thread sleeps (each a `pause`). */
#define DNNL_SPINCOUNT "3000"

/* The implementation stays loaded for the rest of the process (RTLD_NODELETE):
 * libgomp's worker threads outlive the last session and must keep their code
 * mapped, so neither it nor oneDNN may be unloaded under them. */
static void* impl;

ONYX_EXPORT OnyxStatus* onyx_provider_init(const OnyxHostApi* host, const OnyxProvider** out) {
  *out = NULL;
  if (host->abi_major != ONYX_ABI_VERSION_MAJOR)
    return host->status_create(
        ONYX_ABI_MISMATCH, "provider 'onednn' was built for ABI %d.%d; the host offers %u.%u",
        ONYX_ABI_VERSION_MAJOR, ONYX_ABI_VERSION_MINOR, host->abi_major, host->abi_minor);
  if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT")) { /* the application's wins */
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    setenv("GOMP_SPINCOUNT", DNNL_SPINCOUNT, 1);
  }
  if (!impl) {
    const char* self = host->library_path((const void*)onyx_provider_init);
    if (!self)
      return host->status_create(ONYX_NOT_FOUND,
                                 "provider 'onednn': cannot tell where its library lives");
    const char* slash = strrchr(self, '/');
    size_t dir = slash ? (size_t)(slash - self) + 1 : 0;
    char path[4096];
    if (dir + sizeof IMPL_FILE > sizeof path)
      return host->status_create(ONYX_INVALID_ARGUMENT, "provider 'onednn': path too long");
    memcpy(path, self, dir);
    memcpy(path + dir, IMPL_FILE, sizeof IMPL_FILE);
    impl = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!impl) {
      const char* why = dlerror();
      return host->status_create(ONYX_NOT_FOUND,
                                 "provider 'onednn': cannot load its implementation %s: %s", path,
                                 why ? why : "unknown error");
    }
  }
  OnyxStatus* (*init)(const OnyxHostApi*, const OnyxProvider**);
  *(void**)&init = dlsym(impl, IMPL_INIT);
  if (!init)
    return host->status_create(ONYX_ABI_MISMATCH, "provider 'onednn': %s has no %s", IMPL_FILE,
                               IMPL_INIT);
  return init(host, out);
}
