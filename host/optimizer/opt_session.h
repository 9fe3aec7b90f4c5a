/* opt_session.h — the optimizer's entry point for session creation. */
#ifndef OX_OPT_SESSION_H
#define OX_OPT_SESSION_H

#include "ox_optimizer.h"
#include "ox_session.h"

/* Runs the optimizer at the session's level (after resolve, before
 * partitioning); constant folding uses the CPU provider's kernels when the
 * session has it. Logs a summary at INFO. */
OnyxStatus* ox_session_optimize(OnyxSession* s);

#endif
