/* broken_provider.c — tiny provider libraries for the loader's tests, one
 * per way a provider can go wrong, built from this one file with BROKEN_KIND
 * set to one of the BK_* values below (tests/providers/broken/CMakeLists.txt).
 * Like every provider they see only the SDK headers.
 *
 * The working kinds append "<name>:<version>;" to the environment variable
 * ONYX_TEST_RELEASE_LOG when the host calls their release slot: the
 * environment outlives the unloaded library, so the test can check the slot
 * was (or was not) called. */
#include <stdlib.h>
#include <string.h>
#include "onyx/onyx_ep.h"

#define BK_GOOD      0 /* valid; one Relu kernel */
#define BK_NOSYM     1 /* no onyx_provider_init */
#define BK_INITERR   2 /* init returns an error status */
#define BK_ABI2      3 /* built "for ABI 2.0" */
#define BK_NULLTABLE 4 /* init succeeds but returns no table */
#define BK_NOCREATE  5 /* create_ep missing */
#define BK_MISNAMED  6 /* table name differs from the file name */
#define BK_REGFAIL   7 /* register_kernels fails */
#define BK_SHORT     8 /* an older, shorter table: struct_size ends at create_ep */
#define BK_TINY      9 /* struct_size too small to hold even the ABI version */

#ifndef BROKEN_KIND
#error "set BROKEN_KIND"
#endif
#ifndef BROKEN_NAME
#error "set BROKEN_NAME (the provider name the table reports)"
#endif
#ifndef BROKEN_VERSION
#define BROKEN_VERSION "1"
#endif

static const OnyxHostApi* H;

static OnyxStatus* bk_count(const OnyxProvider* p, size_t* n) {
  (void)p;
  *n = 1;
  return NULL;
}

static OnyxStatus* bk_create(const OnyxProvider* p, const OnyxEpCreateArgs* a, OnyxEp** out) {
  (void)p, (void)a;
  *out = NULL;
  return H->status_create(ONYX_NOT_IMPLEMENTED, "test provider: no EP");
}

static OnyxStatus* bk_relu(void* state, OnyxKernelContext* ctx) {
  (void)state, (void)ctx;
  return NULL;
}

static OnyxStatus* bk_register(const OnyxProvider* p, OnyxKernelRegistry* r) {
  (void)p;
  if (BROKEN_KIND == BK_REGFAIL)
    return H->status_create(ONYX_INVALID_ARGUMENT, "kernel table is corrupt (broken on purpose)");
  static const int32_t f32[] = {ONYX_ELEM_FLOAT32};
  static const OnyxTypeConstraint tc[] = {{"T", f32, 1}};
  OnyxKernelDef d = {.struct_size = sizeof d,
                     .domain = "",
                     .op_type = "Relu",
                     .since_version = 6,
                     .end_version = ONYX_OPSET_LATEST,
                     .type_constraints = tc,
                     .type_constraint_count = 1,
                     .compute = bk_relu};
  return H->register_kernel(r, &d);
}

/* Appends to the release log in the environment (see the top comment). */
static void bk_release(const OnyxProvider* p) {
  const char* old = getenv("ONYX_TEST_RELEASE_LOG");
  char buf[512];
  size_t used = 0;
  const char* parts[] = {old ? old : "", p->name, ":", p->version, ";"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    for (const char* c = parts[i]; *c && used + 1 < sizeof buf; c++)
      buf[used++] = *c;
  buf[used] = '\0';
  setenv("ONYX_TEST_RELEASE_LOG", buf, 1);
}

static const OnyxProvider P = {
    .struct_size = BROKEN_KIND == BK_SHORT  ? offsetof(OnyxProvider, create_ep) + sizeof(void*)
                   : BROKEN_KIND == BK_TINY ? sizeof(size_t)
                                            : sizeof(OnyxProvider),
    .abi_major = BROKEN_KIND == BK_ABI2 ? 2 : ONYX_ABI_VERSION_MAJOR,
    .abi_minor = 0,
    .name = BROKEN_NAME,
    .vendor = "onyx tests",
    .version = BROKEN_VERSION,
    .device_count = bk_count,
    .register_kernels = bk_register,
    .create_ep = BROKEN_KIND == BK_NOCREATE ? NULL : bk_create,
    .release = bk_release,
};

#if BROKEN_KIND == BK_NOSYM
/* Exported, but under the wrong name. */
ONYX_EXPORT OnyxStatus* onyx_provider_start(const OnyxHostApi* host, const OnyxProvider** out) {
  H = host;
  *out = &P;
  return NULL;
}
#else
ONYX_EXPORT OnyxStatus* onyx_provider_init(const OnyxHostApi* host, const OnyxProvider** out) {
  H = host;
  if (BROKEN_KIND == BK_INITERR)
    return host->status_create(ONYX_NO_DEVICE, "no widget attached (broken on purpose)");
  *out = BROKEN_KIND == BK_NULLTABLE ? NULL : &P;
  return NULL;
}
#endif
