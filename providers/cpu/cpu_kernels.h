/* cpu_kernels.h — internal to the CPU provider. Each kernel family lives in
 * its own file and registers itself here. Only the SDK headers are used. */
#ifndef CPU_KERNELS_H
#define CPU_KERNELS_H

#include "onyx/onyx_ep.h"

/* The host API table, set by onyx_provider_init before any other call. */
extern const OnyxHostApi* cpu_host;

OnyxStatus* cpu_register_elementwise(OnyxKernelRegistry* r); /* cpu_elementwise.c */
OnyxStatus* cpu_register_shape(OnyxKernelRegistry* r);       /* cpu_shape.c */
OnyxStatus* cpu_register_reduce(OnyxKernelRegistry* r);      /* cpu_reduce.c */
OnyxStatus* cpu_register_nn(OnyxKernelRegistry* r);          /* cpu_nn.c, cpu_linalg.c */

#endif
