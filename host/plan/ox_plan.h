/* ox_plan.h — the execution plan of a session: steps (kernels, fused
 * groups, copies, host ops) in order, the slots values live in during a
 * run, and the debug texts of both. Built by host/plan/plan.c. */
#ifndef OX_PLAN_H
#define OX_PLAN_H

#include "ox_graph.h"
#include "ox_kreg.h"
#include "onyx/onyx_ep.h"

/* A step input or output that is absent (an optional left empty). */
#define OX_NO_SLOT SIZE_MAX

struct OxProgram;
struct OxStreamPlan;
struct OxMemPlan;

/* --- Plan ------------------------------------------------------------------------ */
/* HOST: a node the host runs itself (control flow, sequences, optionals:
 * host/exec/control.c); its state is the host op's. */
typedef enum OxStepKind { OX_STEP_KERNEL, OX_STEP_GROUP, OX_STEP_COPY, OX_STEP_HOST } OxStepKind;

typedef struct OxStep {
  OxStepKind kind;
  int32_t ep;   /* the provider that runs it (copy: the one that copies, -1: host) */
  OxNode* node; /* KERNEL */
  const OxKernel* kernel;
  void* state; /* kernel state from create */
  bool state_created;
  int32_t group; /* GROUP: index into groups */
  size_t* in;    /* slot per input (SIZE_MAX: absent) */
  size_t n_in;
  size_t* out; /* slot per output (SIZE_MAX: absent) */
  size_t n_out;
  OnyxMemoryDevice* out_mem; /* memory each output is allocated in */
  int32_t* out_ep;           /* arena owner of each output */
  /* COPY: in[0] -> out[0]; staged copies go through host memory. */
  int32_t copy_src_ep, copy_dst_ep;
  size_t* free_after; /* slots whose last use is this step */
  size_t n_free_after;
} OxStep;

/* A slot holds one value on one memory during a run. */
typedef struct OxSlot {
  OxValue* value;
  OnyxMemoryDevice mem;
  OxTensor* constant;  /* set for constants: never freed by a run */
  bool owned_constant; /* constant copied to a device at creation (freed with the session) */
  bool is_output;
} OxSlot;

typedef struct OxCopyNote {
  char* text; /* for explain */
} OxCopyNote;

typedef struct OxPlan {
  OxStep* steps;
  size_t n_steps, cap_steps;
  OxSlot* slots;
  size_t n_slots, cap_slots;
  size_t* input_slots;  /* per graph input */
  size_t* output_slots; /* per graph output (host memory) */
  OxCopyNote* copies;
  size_t n_copies, cap_copies;
  /* Agents, crossings with their events, deferred frees (host/plan/ox_streams.h). */
  struct OxStreamPlan* streams;
  /* The memory plan (host/plan/ox_memplan.h), NULL before ox_plan_build;
   * read by runs without a lock: it is written only while the session is
   * created and freed with the plan. */
  struct OxMemPlan* memplan;
  /* The run graph of a provider with ONYX_EXT_RUN_GRAPH, made at the first
   * run and released by ox_run_graph_free (host/exec/executor.c, ox_frame.h)
   * before the plan is cleared; NULL before. */
  struct OxRunGraph* run_graph;
} OxPlan;

OnyxStatus* ox_plan_build(struct OxProgram* s);
void ox_plan_clear(struct OxProgram* s);

/* Where graph input i is read: the one memory its consumers read it in
 * (host when nothing reads it); an error naming the input and the memories
 * when there are several (host/plan/plan.c). */
OnyxStatus* ox_plan_input_memory(const struct OxProgram* s, size_t i, OnyxMemoryDevice* out);
/* The memory graph output i is produced in (before the plan's copy to host). */
OnyxStatus* ox_plan_output_memory(const struct OxProgram* s, size_t i, OnyxMemoryDevice* out);
/* Debug texts (docs/debugging.md): the execution plan and the memory plan.
 * Free with free(); NULL when out of memory. */
char* ox_plan_text(const struct OxProgram* s);
char* ox_memory_plan_text(const struct OxProgram* s);
/* For texts and messages: a step's name (its node, group or copied value)
 * and a provider's name ("host" for -1) (host/plan/plan_text.c). */
const char* ox_plan_step_name(const struct OxProgram* s, const OxStep* st);
const char* ox_plan_ep_name(const struct OxProgram* s, int32_t ep);

#endif
