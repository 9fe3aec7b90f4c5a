/* score_provider.c — small working providers for test_devices.c, built from
 * this one file (tests/unit/providers/CMakeLists.txt) with:
 *   SCORE_NAME     the provider name
 *   SCORE_VERSION  its version string, which tells the builds apart
 *   SCORE_VALUE    what its score slot returns; undefined: no score slot
 *   SCORE_DEVICES  what device_count reports (0: zero, without an error)
 * It has no device_info slot, so its devices are the host CPU (onyx_ep.h).
 * Like every provider it sees only the SDK headers. */
#include "onyx/onyx_ep.h"

#ifndef SCORE_NAME
#error "set SCORE_NAME"
#endif
#ifndef SCORE_VERSION
#error "set SCORE_VERSION"
#endif
#ifndef SCORE_DEVICES
#define SCORE_DEVICES 1
#endif

static const OnyxHostApi* H;

static OnyxStatus* sp_count(const OnyxProvider* p, size_t* n) {
  (void)p;
  *n = SCORE_DEVICES;
  return NULL;
}

#ifdef SCORE_VALUE
static int32_t sp_score(const OnyxProvider* p) {
  (void)p;
  return SCORE_VALUE;
}
#define SP_SCORE sp_score
#else
#define SP_SCORE NULL
#endif

static OnyxStatus* sp_create(const OnyxProvider* p, const OnyxEpCreateArgs* a, OnyxEp** out) {
  (void)p, (void)a;
  *out = NULL;
  return H->status_create(ONYX_NOT_IMPLEMENTED, "score test provider: no EP");
}

static const OnyxProvider P = {
    .struct_size = sizeof(OnyxProvider),
    .abi_major = ONYX_ABI_VERSION_MAJOR,
    .abi_minor = ONYX_ABI_VERSION_MINOR,
    .name = SCORE_NAME,
    .vendor = "score tests",
    .version = SCORE_VERSION,
    .device_count = sp_count,
    .device_info = NULL,
    .score = SP_SCORE,
    .create_ep = sp_create,
};

ONYX_EXPORT OnyxStatus* onyx_provider_init(const OnyxHostApi* host, const OnyxProvider** out) {
  H = host;
  *out = &P;
  return NULL;
}
