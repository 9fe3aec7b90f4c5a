/* ox_host_api.h — the OnyxHostApi table the session hands to every provider
 * it loads (host/session/host_api.c). The provider loader (host/providers)
 * takes it as a parameter: the table's functions live in the modules above
 * the loader (exec, plan, partition, optimizer). */
#ifndef OX_HOST_API_H
#define OX_HOST_API_H

#include "onyx/onyx_ep.h"

const OnyxHostApi* ox_host_api(void);

#endif
