/* ox_nvtx.h — NVTX ranges of a session, for NVIDIA Nsight Systems and any
 * other NVTX tool (docs/debugging.md, "NVTX ranges").
 *
 * Ranges are pushed and popped on the calling thread in the NVTX domain
 * "onyx": session creation and its phases, each run, and each executed step
 * of a run. They are made only when the session's switch is on
 * (OxSessionRt.nvtx: the session option "nvtx" or ONYX_NVTX=1); when it is
 * off no NVTX function is called at all, and the executor's hooks cost one
 * predictable branch each. Without the NVTX headers at configure time every
 * function here is a no-op and the switch stays off (with a warning when it
 * was asked for). */
#ifndef OX_NVTX_H
#define OX_NVTX_H

#include <stdbool.h>
#include "ox_program.h"

/* Whether this build has the NVTX backend. */
bool ox_nvtx_available(void);

/* Session creation: pushes "session create <source>" when s's switch is on.
 * Returns the calling thread's range depth before it, for ox_nvtx_unwind,
 * which pops what an early error return left open. s may be NULL (nothing
 * pushed). */
int ox_nvtx_create_begin(OxProgram* s);
void ox_nvtx_unwind(int depth);
/* One phase of session creation ("load", "optimize", "partition", "fuse",
 * "plan": the profiler's names), pushed and popped. */
void ox_nvtx_phase_push(OxProgram* s, const char* phase);
void ox_nvtx_phase_pop(OxProgram* s);

/* A run: pushes "run" ("run <tag>" with a run tag) and returns true when the
 * switch of the session owning rt is on; the caller then brackets each step
 * with ox_nvtx_step_push / ox_nvtx_pop and ends the run with ox_nvtx_pop. */
bool ox_nvtx_run_push(const OxSessionRt* rt, const OnyxRunOptions* run);
/* A step: "<node> (<op>) [<provider>]" for kernels and host ops,
 * "<group> [<provider>]" for fused groups, "copy <value> <src>→<dst>" for
 * copies (a provider's name, or "host"). */
void ox_nvtx_step_push(const OxProgram* s, const OxStep* st);
/* Pops the calling thread's innermost Onyx range. */
void ox_nvtx_pop(void);

#endif
