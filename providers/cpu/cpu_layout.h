/* cpu_layout.h — internal to the CPU provider: the attribute state of the
 * layout kernels (cpu_layout.c), whose create Einsum (cpu_einsum.c) shares. */
#ifndef CPU_LAYOUT_H
#define CPU_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu_util.h"

typedef struct OpsState {
  int64_t a, b;        /* op-specific ints: upper; exclusive/reverse; blocksize; batch/time axes */
  int mode;            /* Pad mode; DepthToSpace CRD */
  int version;         /* which form of the op */
  const int64_t* ints; /* Pad-1/2 pads; CenterCropPad axes */
  size_t n_ints;
  bool has_ints;
  float value;  /* Pad-1/2 */
  char* eq;     /* Einsum equation (owned) */
  bool product; /* CumProd */
} OpsState;

/* Reads the attributes of any op of cpu_layout.c / cpu_einsum.c into an
 * OpsState (user: the op's version); cpu_ops_free releases it. */
OnyxStatus* cpu_ops_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out);
void cpu_ops_free(void* p);

#endif /* CPU_LAYOUT_H */
