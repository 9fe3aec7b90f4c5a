/* opt_session.h — the optimizer's entry points for session creation
 * (host/session/opt_session.c). */
#ifndef OX_OPT_SESSION_H
#define OX_OPT_SESSION_H

#include "ox_optimizer.h"
#include "ox_session.h"

/* Before partitioning: the transformers that keep the model's ops
 * (elimination, shape folding, constant folding, CSE) and the user
 * transformers, at the session's level; constant folding uses the CPU
 * provider's kernels when the session has it. Logs a summary at INFO. */
OnyxStatus* ox_session_optimize(OnyxSession* s);

/* After partitioning: the providers' own transformers (OnyxEp.transform) on
 * their nodes, then the built-in fusions (extended level and above), each
 * inside one provider's nodes and only into ops that provider has kernels
 * for; a node a rewrite made that its provider cannot run is an error
 * naming the transformer, the node, its original nodes and the provider.
 * Decline records and per-provider counts follow the rewritten graph. */
OnyxStatus* ox_session_fuse(OnyxSession* s);

#endif
