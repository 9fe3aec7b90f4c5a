/* ox_dist.h — the host's process group (onyx_distributed.h): launch
 * detection, the backend library, collectives with timeouts, the provider
 * extension ONYX_EXT_COLLECTIVES and the session's world check. */
#ifndef OX_DIST_H
#define OX_DIST_H

#include <stdint.h>
#include "onyx/onyx_distributed.h"
#include "onyx/onyx_ep.h"

/* The extension handed to providers on OnyxEpCreateArgs.next; owned by the
 * group, valid until it is released. */
const OnyxExtension* ox_process_group_extension(OnyxProcessGroup* g);

/* Collective check at session creation: every rank contributes `hash` (the
 * model's bytes and the options collectives depend on); an error names the
 * first rank whose hash differs from rank 0's. `what` names the session. */
OnyxStatus* ox_process_group_check_world(OnyxProcessGroup* g, uint64_t hash, const char* what);

/* FNV-1a over bytes, chained through h (start with OX_FNV_OFFSET). */
#define OX_FNV_OFFSET 1469598103934665603ull
uint64_t ox_fnv1a(uint64_t h, const void* data, size_t bytes);

#endif /* OX_DIST_H */
