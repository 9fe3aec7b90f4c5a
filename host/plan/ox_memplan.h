/* ox_memplan.h — the memory plan of a session (ARCHITECTURE.md §1 step 6):
 * value lifetimes over the plan's steps, buffer reuse, in-place reuse where
 * a kernel declares ONYX_ALIAS_INPLACE, and for values with static shapes a
 * memory pattern: every such intermediate value gets an offset in one block
 * per memory device, so a run can take one block instead of one allocation
 * per value. Built by host/plan/plan.c at the end of ox_plan_build. */
#ifndef OX_MEMPLAN_H
#define OX_MEMPLAN_H

#include "ox_common.h"
#include "onyx/onyx_ep.h"

#define OX_MEMPLAN_ALIGN 64
#define OX_MEMPLAN_NONE  SIZE_MAX

typedef struct OxMemPlanDevice {
  OnyxMemoryDevice mem;
  int32_t ep;         /* arena owner (-1: host heap) */
  size_t block_bytes; /* the pattern's block: the planned peak */
  size_t live_peak;   /* the most bytes live at one step (a lower bound) */
  size_t no_reuse;    /* every planned value's bytes added up */
  size_t planned;     /* values with an offset */
  size_t inplace;     /* values sharing their input's buffer */
  size_t dynamic;     /* values whose size is known only at run time */
} OxMemPlanDevice;

typedef struct OxMemPlan {
  OxMemPlanDevice* devices;
  size_t n_devices;
  /* Per plan slot: the device index and byte offset in its block, or
   * OX_MEMPLAN_NONE (constants, graph inputs/outputs, dynamic shapes). */
  size_t* device;
  size_t* offset;
  size_t* bytes;        /* planned byte size (0 when not planned) */
  size_t* alias_of;     /* the input slot whose buffer an in-place output takes, or NONE */
  size_t *first, *last; /* lifetime: producing step and last reading step (NONE: none) */
  size_t n_slots;
  bool pattern; /* the session's memory_pattern option */
} OxMemPlan;

/* Interval assignment used by the planner (exposed for tests): n requests
 * (bytes, first step, last step, alias_of); alias requests take the offset
 * of the request they alias, which must end at the step the alias begins.
 * Fills offsets (OX_MEMPLAN_NONE for bytes == 0) and returns the block size
 * through *block and the live peak through *live. */
typedef struct OxMemRequest {
  size_t bytes;
  size_t first, last;
  size_t alias_of; /* index into the request array, or OX_MEMPLAN_NONE */
} OxMemRequest;
OnyxStatus* ox_memplan_assign(const OxMemRequest* req, size_t n, size_t* offsets, size_t* block,
                              size_t* live);

void ox_memplan_free(OxMemPlan* p);

struct OxProgram;
/* The memory plan of a session's plan (s->plan.memplan; NULL before ox_plan_build). */
const OxMemPlan* ox_session_memplan(const struct OxProgram* s);
/* "planned peak on <mem> (<provider>): ..." lines, one per device; malloc'd. */
char* ox_memplan_summary(const struct OxProgram* s);

/* --- Applying the pattern in a run ------------------------------------------------------
 * The executor calls ox_memplan_run_begin before the first step (one block
 * per planned device, taken from that device's arena), asks
 * ox_memplan_take for each output a kernel allocates (ctx_output), and calls
 * ox_memplan_run_end after the run. A taken tensor holds a reference on its
 * block, so a view of it stays valid even past the run. Runs are
 * independent: concurrent runs each have their own blocks. */
typedef struct OxMemRun {
  struct OnyxTensor** blocks; /* per device; NULL where nothing is planned */
  size_t n_blocks;
} OxMemRun;
/* Does nothing (r->n_blocks 0) when the plan has no pattern or the
 * memory_pattern option is off. */
OnyxStatus* ox_memplan_run_begin(struct OxProgram* s, OxMemRun* r);
void ox_memplan_run_end(OxMemRun* r);
/* A tensor over slot's planned bytes when the slot is planned and the
 * shape and type are the planned ones; else NULL (allocate as usual). In
 * place outputs get their input's bytes. */
struct OnyxTensor* ox_memplan_take(const struct OxProgram* s, const OxMemRun* r, size_t slot,
                                   OnyxElemType type, const int64_t* dims, size_t rank);

#endif
