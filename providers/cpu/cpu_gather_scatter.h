/* cpu_gather_scatter.h — internal to the CPU provider: the attribute state
 * of the gather / scatter / select kernels (cpu_gather_scatter.c), which
 * Unique and TopK (cpu_sort_topk.c) read through the same create. */
#ifndef CPU_GATHER_SCATTER_H
#define CPU_GATHER_SCATTER_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu_util.h"

typedef struct IdxState {
  int64_t axis;
  int64_t batch_dims;
  int reduction; /* IDX_RED_* */
  bool circular;
  bool largest, sorted, has_axis;
  int64_t k_attr;
  int version;
} IdxState;

/* Reads the attributes of any op of the two files into an IdxState (user:
 * the op's version, for TopK); released by cpu_free_state. */
OnyxStatus* cpu_idx_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out);

#endif /* CPU_GATHER_SCATTER_H */
