/* ox_data_parallel.h — data-parallel training over a process group
 * (data_parallel.c; docs/distributed.md, "Data-parallel training"): the loss
 * and gradient averages across ranks, and ZeRO stage 1 (the optimizer state
 * sharded across ranks). The training session (training_session.c) calls
 * these hooks; this module sees the session's tensors through OxDpBind. */
#ifndef OX_DATA_PARALLEL_H
#define OX_DATA_PARALLEL_H

#include <stdbool.h>
#include "ox_session.h"
#include "ox_train_api.h"

typedef struct OxDataParallel OxDataParallel;

/* The training session's tensors this module works on; the arrays belong to
 * the session and stay valid for its lifetime. */
typedef struct OxDpBind {
  OnyxCheckpoint* ck;
  size_t n_params;
  const size_t* pidx;      /* checkpoint index of each trainable parameter */
  OnyxValue* const* gvals; /* the gradient accumulators, in parameter order */
  size_t n_slots;          /* optimizer state tensors per parameter */
  const size_t* sidx;      /* checkpoint state index, [slot * n_params + param] */
  const char* opt_path;    /* the artifacts' optimizer_model.onnx (training_model.onnx
                              is in the same folder) */
  char* const* grad_names; /* the training model's gradient outputs, in parameter order */
  OnyxSession** train;     /* the training session, replaced for the in-graph all-reduce */
  const OnyxSessionOptions* opts;
  bool has_clip; /* the optimizer model clips the global gradient norm */
} OxDpBind;

/* Checks the options, broadcasts the checkpoint's parameters, buffers,
 * optimizer state and step count from rank 0 (so every rank starts equal)
 * and, for ZeRO-1, makes this rank's shard of the optimizer state and its
 * optimizer session; with allreduce_in_graph, replaces *b->train by a
 * session over the training model with the gradient AllReduce nodes.
 * Collective: every rank calls it. */
OnyxStatus* ox_dp_create(const OnyxDataParallelOptions* o, const OxDpBind* b, OxDataParallel** out);
void ox_dp_free(OxDataParallel* dp);
/* Replaces a scalar loss by its average over the ranks. Collective. */
OnyxStatus* ox_dp_loss(OxDataParallel* dp, OxTensor* loss);
/* Whether the optimizer state is sharded (zero_stage 1). */
bool ox_dp_zero(const OxDataParallel* dp);
/* Averages the accumulated gradients over the ranks in place, in buckets of
 * the options' bucket_bytes (the gradients flattened in parameter order);
 * nothing to do when the training graph averages them (allreduce_in_graph).
 * Collective. */
OnyxStatus* ox_dp_average_grads(OxDataParallel* dp);
/* ZeRO-1's optimizer step at rate lr: reduce-scatter of the flattened
 * gradients (averaged), this rank's shard of the parameters updated with
 * its shard of the state, all-gather of the parameters; advances the
 * checkpoint's step count. A non-finite gradient on any rank makes every
 * rank skip (policy SKIP_STEP, *skipped counts it) or fail. Collective. */
OnyxStatus* ox_dp_zero_step(OxDataParallel* dp, float lr, OnyxNonfinitePolicy policy,
                            int64_t* skipped);
/* ZeRO-1: gathers every rank's shard of the optimizer state into the
 * checkpoint's state tensors (on every rank); nothing to do otherwise.
 * Collective. */
OnyxStatus* ox_dp_gather_state(OxDataParallel* dp);

#endif
