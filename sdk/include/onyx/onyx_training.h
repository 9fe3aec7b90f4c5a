/* onyx_training.h — the training API of Onyx (docs/training.md, "Training API").
 *
 * Three steps, modelled on ONNX Runtime's training API:
 *
 * 1. Artifacts, once per model: from an inference model, write into a folder
 *    training_model.onnx (forward + loss + gradients of the trainable
 *    parameters), eval_model.onnx (forward + loss), optimizer_model.onnx (one
 *    com.onyx.training optimizer node over every parameter, after an optional
 *    ClipGradNorm) and checkpoint/ (the initial parameters).
 *
 *      OnyxTrainingArtifactsOptions ao;
 *      onyx_training_artifacts_options_init(&ao);
 *      ao.loss = ONYX_LOSS_CROSS_ENTROPY;
 *      ao.optimizer = ONYX_OPTIMIZER_ADAMW;
 *      st = onyx_training_artifacts_generate("mlp.onnx", &ao, "art");
 *
 * 2. Training: load the checkpoint, make a session over the artifacts, then
 *    per batch train_step (forward + backward; gradients accumulate),
 *    optimizer_step (updates the parameters) and lazy_reset_grad.
 *
 *      OnyxCheckpoint* ck = NULL;
 *      OnyxTrainingSession* ts = NULL;
 *      st = onyx_checkpoint_load("art/checkpoint", &ck);
 *      if (!st) st = onyx_training_session_create(NULL, ck, "art", &ts);
 *      for (...) {
 *        const OnyxValue* in[2] = {x, labels};  // the model's inputs, then the labels
 *        OnyxValue* loss = NULL;
 *        st = onyx_training_session_train_step(ts, in, 2, &loss);
 *        if (!st) st = onyx_training_session_optimizer_step(ts);
 *        if (!st) st = onyx_training_session_lazy_reset_grad(ts);
 *        onyx_value_release(loss);
 *      }
 *      if (!st) st = onyx_checkpoint_save(ck, "out/checkpoint", 1);
 *      if (!st) st = onyx_training_session_export_for_inference(ts, "trained.onnx");
 *      onyx_training_session_release(ts);
 *      onyx_checkpoint_release(ck);
 *
 * 3. Inference: the exported model is the original inference model with the
 *    trained parameters as its initializers.
 *
 * The session works on the checkpoint's tensors: the checkpoint holds the
 * parameters and the optimizer state, the training session updates them in
 * place, and saving the checkpoint at any time saves the current state. The
 * checkpoint must outlive the sessions made on it.
 *
 * Conventions are those of onyx.h: NULL status on success, out-parameters
 * NULL on failure, every release accepts NULL, `char**` strings are freed
 * with onyx_free. One training session is used from one thread at a time.
 */
#ifndef ONYX_TRAINING_H
#define ONYX_TRAINING_H

#include <stddef.h>
#include <stdint.h>
#include "onyx.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct OnyxCheckpoint OnyxCheckpoint;
typedef struct OnyxTrainingSession OnyxTrainingSession;

/* --- Artifacts ------------------------------------------------------------------ */
typedef enum OnyxLossKind {
  /* SoftmaxCrossEntropyLoss (mean) of the prediction [N, C] (or [N, C, d...])
   * against int64 class indices [N] ([N, d...]). */
  ONYX_LOSS_CROSS_ENTROPY = 0,
  /* mean((pred - target)^2); target has the prediction's shape and type. */
  ONYX_LOSS_MSE = 1,
  /* mean(max(x,0) - x*y + log(1 + exp(-|x|))), the stable form of the binary
   * cross-entropy of logits x against targets y in [0, 1]. */
  ONYX_LOSS_BCE_WITH_LOGITS = 2,
  /* mean(|pred - target|). */
  ONYX_LOSS_L1 = 3,
  /* The model's first output is already the loss (a scalar): no labels. */
  ONYX_LOSS_MODEL_OUTPUT = 4,
} OnyxLossKind;

typedef enum OnyxOptimizerKind {
  ONYX_OPTIMIZER_SGD = 0,   /* torch.optim.SGD */
  ONYX_OPTIMIZER_ADAMW = 1, /* torch.optim.AdamW */
  ONYX_OPTIMIZER_LAMB = 2,  /* LAMB (trust ratio per tensor, no clipping) */
} OnyxOptimizerKind;

/* Options of onyx_training_artifacts_generate. Fill with
 * onyx_training_artifacts_options_init, then change fields. The name lists
 * are borrowed for the call only. */
typedef struct OnyxTrainingArtifactsOptions {
  size_t struct_size;          /* sizeof(OnyxTrainingArtifactsOptions) */
  OnyxLossKind loss;           /* default ONYX_LOSS_CROSS_ENTROPY */
  OnyxOptimizerKind optimizer; /* default ONYX_OPTIMIZER_ADAMW */
  float learning_rate;         /* initial learning rate, in the checkpoint; default 1e-3 */
  /* SGD: momentum (0), dampening (0), nesterov (0), weight_decay (0).
   * AdamW: beta1 (0.9), beta2 (0.999), epsilon (1e-8), weight_decay (0.01).
   * LAMB: beta1 (0.9), beta2 (0.999), epsilon (1e-6), weight_decay (0).
   * init sets the AdamW defaults; a field set to a negative value (NAN for
   * epsilon) takes the default of the chosen optimizer. */
  float momentum, dampening;
  int32_t nesterov;
  float weight_decay;
  float beta1, beta2, epsilon;
  /* Trainable parameters by initializer name (NULL/0: every floating-point
   * initializer that is not frozen, a BatchNormalization running statistic
   * or a Dropout ratio). */
  const char* const* trainable;
  size_t trainable_count;
  /* Initializers kept constant (they stay in the models as initializers). */
  const char* const* frozen;
  size_t frozen_count;
  /* 1: the optimizer model takes a max_norm input and clips the gradients'
   * global L2 norm first (ClipGradNorm); the session's clip norm then
   * applies (onyx_training_session_set_grad_clip_norm, default off). */
  int32_t clip_grad_norm;
  /* Mixed precision (docs/training.md, "Mixed precision"), as
   * torch.autocast: MatMul, Gemm, Conv and ConvTranspose read their float32
   * inputs through Casts to the low-precision type and their outputs are
   * cast back to float32; every other op, the loss and the parameters stay
   * float32 (the master weights). OnyxMixedPrecision; default NONE. */
  int32_t mixed_precision;
  /* Dynamic loss scaling (torch.cuda.amp.GradScaler): the training model
   * takes a "loss_scale" input, differentiates loss * loss_scale and divides
   * the gradients by it in float32; the training session skips an
   * optimizer step whose gradients hold Inf or NaN and multiplies the scale
   * by backoff_factor, and multiplies it by growth_factor after
   * growth_interval steps in a row without one. -1 (default): on for
   * float16, off otherwise; 0 off; 1 on. */
  int32_t loss_scaling;
  float loss_scale_init;              /* default 65536 */
  float loss_scale_growth_factor;     /* default 2 */
  float loss_scale_backoff_factor;    /* default 0.5 */
  int64_t loss_scale_growth_interval; /* default 2000 */
} OnyxTrainingArtifactsOptions;

/* OnyxTrainingArtifactsOptions.mixed_precision. */
typedef enum OnyxMixedPrecision {
  ONYX_MIXED_PRECISION_NONE = 0,
  ONYX_MIXED_PRECISION_FLOAT16 = 1,
  ONYX_MIXED_PRECISION_BFLOAT16 = 2,
} OnyxMixedPrecision;

/* The size of OnyxTrainingArtifactsOptions before the mixed-precision
 * fields: options of that size are accepted and take their defaults. */
#define ONYX_TRAINING_ARTIFACTS_OPTIONS_V1_SIZE                                                    \
  (offsetof(OnyxTrainingArtifactsOptions, clip_grad_norm) + sizeof(int32_t))

/* The defaults above; struct_size set. */
ONYX_API void onyx_training_artifacts_options_init(OnyxTrainingArtifactsOptions* o);

/* Writes training_model.onnx, eval_model.onnx, optimizer_model.onnx,
 * inference_model.onnx (a copy of the model, for export) and checkpoint/
 * into out_dir (created if missing; existing files replaced).
 * opts NULL: the defaults. The model's first output is the prediction given
 * to the loss. The training and eval models take the model's inputs, then
 * "labels" (absent for ONYX_LOSS_MODEL_OUTPUT), then the parameters, then
 * the BatchNormalization running statistics ("buffers"); the training
 * model's outputs are "loss", the gradients "<param>_grad" in parameter
 * order and the updated statistics "<buffer>.updated". Dropout (opset 12
 * on) and BatchNormalization (opset 14 on; before, it stays in inference
 * mode) run in training mode in the training model and in inference mode
 * in the eval model. Errors
 * name the model, the parameter or the node at fault (an op without a
 * gradient rule names the op and the path from the loss). */
ONYX_API OnyxStatus* onyx_training_artifacts_generate(const char* model_path,
                                                      const OnyxTrainingArtifactsOptions* opts,
                                                      const char* out_dir);

/* --- Checkpoints (docs/training.md, "Checkpoints") -------------------------------- *
 * A checkpoint folder holds parameters.safetensors (the trainable parameters
 * and the BatchNormalization running statistics; frozen initializers stay
 * in the models), optimizer.safetensors
 * (the optimizer state, when saved with it) and checkpoint.json (format
 * version, step count, learning rate, scheduler, seed, optimizer kind and
 * hyperparameters, the trainable and frozen names). */
ONYX_API OnyxStatus* onyx_checkpoint_load(const char* dir, OnyxCheckpoint** out);
/* Writes the folder (created if missing); each file is written to a
 * temporary name and renamed into place. include_optimizer_state 0: no
 * optimizer.safetensors (a training session made on the loaded checkpoint
 * starts the optimizer state from zero). */
ONYX_API OnyxStatus* onyx_checkpoint_save(const OnyxCheckpoint* ck, const char* dir,
                                          int include_optimizer_state);
ONYX_API void onyx_checkpoint_release(OnyxCheckpoint* ck);

/* Parameters by name: count, names in checkpoint order, and a value that
 * shares the parameter's memory (no copy; release it; it sees later
 * updates). */
ONYX_API size_t onyx_checkpoint_parameter_count(const OnyxCheckpoint* ck);
ONYX_API const char* onyx_checkpoint_parameter_name(const OnyxCheckpoint* ck, size_t i);
ONYX_API OnyxStatus* onyx_checkpoint_get_parameter(const OnyxCheckpoint* ck, const char* name,
                                                   OnyxValue** out);
/* Copies `value` into the parameter; its element type and shape must match
 * (an error names the parameter and both). */
ONYX_API OnyxStatus* onyx_checkpoint_set_parameter(OnyxCheckpoint* ck, const char* name,
                                                   const OnyxValue* value);
/* Whether the parameter is trained (1) or frozen (0); -1 for an unknown name. */
ONYX_API int onyx_checkpoint_parameter_trainable(const OnyxCheckpoint* ck, const char* name);
/* Optimizer state tensors, named "<param>.<slot>" ("w.momentum", "w.exp_avg",
 * "w.exp_avg_sq"); empty before the first optimizer step. */
ONYX_API size_t onyx_checkpoint_state_count(const OnyxCheckpoint* ck);
ONYX_API const char* onyx_checkpoint_state_name(const OnyxCheckpoint* ck, size_t i);
ONYX_API OnyxStatus* onyx_checkpoint_get_state(const OnyxCheckpoint* ck, const char* name,
                                               OnyxValue** out);
/* Optimizer steps taken so far. */
ONYX_API int64_t onyx_checkpoint_step(const OnyxCheckpoint* ck);

/* --- Training session ------------------------------------------------------------- */
/* Creates sessions for the three models of `artifacts_dir` with `opts` (NULL:
 * defaults) over the checkpoint's parameters. The checkpoint must hold every
 * parameter the models take, of the same type and shape (an error names the
 * tensor: missing, extra, shape or dtype mismatch). */
ONYX_API OnyxStatus* onyx_training_session_create(const OnyxSessionOptions* opts,
                                                  OnyxCheckpoint* ck, const char* artifacts_dir,
                                                  OnyxTrainingSession** out);
ONYX_API void onyx_training_session_release(OnyxTrainingSession* ts);

/* The inputs train_step and eval_step take: the model's inputs, then the
 * labels (if the loss has them). Names owned by the session. */
ONYX_API size_t onyx_training_session_input_count(const OnyxTrainingSession* ts);
ONYX_API const char* onyx_training_session_input_name(const OnyxTrainingSession* ts, size_t i);

/* Forward and backward on one batch: adds the gradients to the accumulated
 * ones and updates BatchNormalization running statistics. *loss_out (may be
 * NULL: not wanted) receives the loss, a float32 scalar. A loss that is NaN
 * or infinite is an error (ONYX_RUNTIME_ERROR) under ONYX_NONFINITE_ERROR,
 * and leaves the accumulated gradients unchanged; under
 * ONYX_NONFINITE_SKIP_STEP it is returned and the batch's gradients are
 * dropped (onyx_training_session_skipped_steps counts them). */
ONYX_API OnyxStatus* onyx_training_session_train_step(OnyxTrainingSession* ts,
                                                      const OnyxValue* const* inputs, size_t n,
                                                      OnyxValue** loss_out);
/* Forward + loss of the eval model (inference-mode BatchNormalization and
 * Dropout); no gradients. */
ONYX_API OnyxStatus* onyx_training_session_eval_step(OnyxTrainingSession* ts,
                                                     const OnyxValue* const* inputs, size_t n,
                                                     OnyxValue** loss_out);
/* Sets the accumulated gradients to zero (before the next train step). */
ONYX_API OnyxStatus* onyx_training_session_lazy_reset_grad(OnyxTrainingSession* ts);
/* One optimizer step over every trainable parameter with the accumulated
 * gradients, at the scheduler's learning rate; then advances the step count
 * and the scheduler. A step whose accumulated gradients hold NaN or Inf is
 * an error under ONYX_NONFINITE_ERROR and skipped under _SKIP_STEP. */
ONYX_API OnyxStatus* onyx_training_session_optimizer_step(OnyxTrainingSession* ts);

/* The learning rate of the next optimizer step. Setting it replaces the
 * base rate (the scheduler, if any, scales it). */
ONYX_API OnyxStatus* onyx_training_session_set_learning_rate(OnyxTrainingSession* ts, float lr);
ONYX_API float onyx_training_session_get_learning_rate(const OnyxTrainingSession* ts);

typedef enum OnyxLrSchedulerKind {
  ONYX_LR_CONSTANT = 0,
  /* Linear warmup from 0 to the base rate over warmup_steps, then linear
   * decay to min_lr at total_steps (ORT's LinearLRScheduler with min_lr 0). */
  ONYX_LR_LINEAR = 1,
  /* Linear warmup, then half a cosine from the base rate to min_lr at total_steps. */
  ONYX_LR_COSINE = 2,
} OnyxLrSchedulerKind;
/* The rate of step t (0-based, the checkpoint's step count) from the base
 * rate; warmup_steps <= total_steps. */
ONYX_API OnyxStatus* onyx_training_session_set_lr_scheduler(OnyxTrainingSession* ts,
                                                            OnyxLrSchedulerKind kind,
                                                            int64_t warmup_steps,
                                                            int64_t total_steps, float min_lr);

/* Clips the accumulated gradients' global L2 norm to max_norm before each
 * optimizer step (torch.nn.utils.clip_grad_norm_); 0 or less: off. The
 * artifacts must have been made with clip_grad_norm = 1. */
ONYX_API OnyxStatus* onyx_training_session_set_grad_clip_norm(OnyxTrainingSession* ts,
                                                              float max_norm);
/* The global L2 norm of the gradients before clipping at the last optimizer
 * step (0 before any, or without clipping). */
ONYX_API float onyx_training_session_last_grad_norm(const OnyxTrainingSession* ts);

/* The seed recorded in the checkpoint (its sidecar's "seed"), for the
 * application's own data shuffling and for reproducing a run. Dropout masks
 * come from the provider's generator, seeded by the node's `seed`
 * attribute when the model gives one. */
ONYX_API OnyxStatus* onyx_training_session_set_seed(OnyxTrainingSession* ts, uint64_t seed);

typedef enum OnyxNonfinitePolicy {
  ONYX_NONFINITE_ERROR = 0,     /* the default */
  ONYX_NONFINITE_SKIP_STEP = 1, /* drop the batch / skip the optimizer step */
} OnyxNonfinitePolicy;
ONYX_API OnyxStatus* onyx_training_session_set_nonfinite_policy(OnyxTrainingSession* ts,
                                                                OnyxNonfinitePolicy policy);
/* Train or optimizer steps skipped for a non-finite loss or gradient,
 * including the optimizer steps the loss scaler skipped. */
ONYX_API int64_t onyx_training_session_skipped_steps(const OnyxTrainingSession* ts);

/* --- Dynamic loss scaling (artifacts made with loss_scaling) ------------------------ *
 * With a loss scaler, a non-finite loss or gradient is never an error: the
 * batch's gradients are dropped, the next optimizer step is skipped (the
 * parameters and optimizer state stay as they are, the step count does not
 * advance, onyx_training_session_skipped_steps counts it) and the scale is
 * multiplied by the backoff factor; growth_interval optimizer steps in a
 * row that are taken multiply it by the growth factor. The scaler's state
 * is in the checkpoint. */
/* The scale the next train step multiplies the loss by; 0 without a scaler. */
ONYX_API float onyx_training_session_get_loss_scale(const OnyxTrainingSession* ts);
/* Replaces the scaler's state and settings: scale > 0 and finite,
 * growth_factor >= 1, 0 < backoff_factor <= 1, growth_interval >= 1; the
 * count of good steps restarts from 0. An error without a scaler. */
ONYX_API OnyxStatus* onyx_training_session_set_loss_scaler(OnyxTrainingSession* ts, float scale,
                                                           float growth_factor,
                                                           float backoff_factor,
                                                           int64_t growth_interval);
/* Optimizer steps taken in a row since the scale last changed. */
ONYX_API int64_t onyx_training_session_loss_scale_growth_tracker(const OnyxTrainingSession* ts);

/* Writes the original inference model (the artifacts' inference_model.onnx)
 * with the current parameters as its initializers: no training nodes. */
ONYX_API OnyxStatus* onyx_training_session_export_for_inference(const OnyxTrainingSession* ts,
                                                                const char* out_path);

/* --- Data-parallel training (docs/distributed.md) ------------------------------------ *
 * Every rank makes its training session over the same artifacts and a
 * checkpoint loaded from the same folder, then calls
 * onyx_training_session_set_data_parallel with the process group of
 * onyx_distributed.h. Each rank feeds its own shard of the global batch to
 * train_step; the loss train_step returns is then the average over the
 * ranks (the loss of the global batch when the ranks' batches have equal
 * sizes), and optimizer_step uses the gradients averaged over the ranks, so
 * N ranks with batch B step as one process with batch N*B. */
typedef struct OnyxProcessGroup OnyxProcessGroup;

typedef struct OnyxDataParallelOptions {
  size_t struct_size;              /* sizeof(OnyxDataParallelOptions) */
  OnyxProcessGroup* process_group; /* borrowed; must outlive the session; required */
  int32_t zero_stage;              /* 0 (default): every rank holds the whole optimizer
                                      state; 1: ZeRO stage 1, each rank holds and updates
                                      a 1/N shard of it (SGD and AdamW, no gradient
                                      clipping) */
  size_t bucket_bytes;             /* gradient all-reduce bucket (default 25 MiB) */
  /* With zero_stage 0: 1 (default): the gradients are averaged in the
   * training graph, each bucket by a com.onyx.collective AllReduceStart run
   * as soon as its gradients exist and an AllReduceWait run after the rest
   * of the backward pass (the all-reduces overlap the backward pass); 2: in
   * the graph by blocking AllReduce nodes; 0: by host all-reduces before the
   * optimizer step. */
  int32_t allreduce_in_graph;
} OnyxDataParallelOptions;

/* The defaults above; struct_size set. */
ONYX_API void onyx_data_parallel_options_init(OnyxDataParallelOptions* o);

/* Makes the session data-parallel. Collective (every rank of the group calls
 * it, before any step): broadcasts the parameters, buffers, optimizer state
 * and step count from rank 0 into the checkpoint of every rank. Call once. */
ONYX_API OnyxStatus* onyx_training_session_set_data_parallel(OnyxTrainingSession* ts,
                                                             const OnyxDataParallelOptions* o);

/* With zero_stage 1 each rank holds and updates only its shard of the
 * optimizer state; in a world of more than one rank the checkpoint's
 * full-size state tensors are freed by set_data_parallel (saving them or
 * getting one fails until gathered). This collective call gathers the
 * shards into rank 0's checkpoint, so that a checkpoint saved afterwards by
 * rank 0 holds the full state and loads in a run of any world size. Nothing
 * to do without ZeRO. */
ONYX_API OnyxStatus* onyx_training_session_gather_optimizer_state(OnyxTrainingSession* ts);

#ifdef __cplusplus
}
#endif
#endif /* ONYX_TRAINING_H */
