/* training_stubs.c — the training API entry points not built yet: each
 * fails with ONYX_NOT_IMPLEMENTED naming itself. */
#include "onyx/onyx_training.h"
#include "ox_common.h"

void onyx_training_artifacts_options_init(OnyxTrainingArtifactsOptions* o) {
  (void)o;
}

OnyxStatus* onyx_training_artifacts_generate(const char* model_path,
                                             const OnyxTrainingArtifactsOptions* opts,
                                             const char* out_dir) {
  (void)model_path;
  (void)opts;
  (void)out_dir;
  return ox_status(ONYX_NOT_IMPLEMENTED, "onyx_training_artifacts_generate: not implemented");
}

OnyxStatus* onyx_checkpoint_load(const char* dir, OnyxCheckpoint** out) {
  (void)dir;
  (void)out;
  return ox_status(ONYX_NOT_IMPLEMENTED, "onyx_checkpoint_load: not implemented");
}

OnyxStatus* onyx_checkpoint_save(const OnyxCheckpoint* ck, const char* dir,
                                 int include_optimizer_state) {
  (void)ck;
  (void)dir;
  (void)include_optimizer_state;
  return ox_status(ONYX_NOT_IMPLEMENTED, "onyx_checkpoint_save: not implemented");
}

void onyx_checkpoint_release(OnyxCheckpoint* ck) {
  (void)ck;
}

size_t onyx_checkpoint_parameter_count(const OnyxCheckpoint* ck) {
  (void)ck;
  return 0;
}

const char* onyx_checkpoint_parameter_name(const OnyxCheckpoint* ck, size_t i) {
  (void)ck;
  (void)i;
  return NULL;
}

OnyxStatus* onyx_checkpoint_get_parameter(const OnyxCheckpoint* ck, const char* name,
                                          OnyxValue** out) {
  (void)ck;
  (void)name;
  (void)out;
  return ox_status(ONYX_NOT_IMPLEMENTED, "onyx_checkpoint_get_parameter: not implemented");
}

OnyxStatus* onyx_checkpoint_set_parameter(OnyxCheckpoint* ck, const char* name,
                                          const OnyxValue* value) {
  (void)ck;
  (void)name;
  (void)value;
  return ox_status(ONYX_NOT_IMPLEMENTED, "onyx_checkpoint_set_parameter: not implemented");
}

int onyx_checkpoint_parameter_trainable(const OnyxCheckpoint* ck, const char* name) {
  (void)ck;
  (void)name;
  return -1;
}

size_t onyx_checkpoint_state_count(const OnyxCheckpoint* ck) {
  (void)ck;
  return 0;
}

const char* onyx_checkpoint_state_name(const OnyxCheckpoint* ck, size_t i) {
  (void)ck;
  (void)i;
  return NULL;
}

OnyxStatus* onyx_checkpoint_get_state(const OnyxCheckpoint* ck, const char* name, OnyxValue** out) {
  (void)ck;
  (void)name;
  (void)out;
  return ox_status(ONYX_NOT_IMPLEMENTED, "onyx_checkpoint_get_state: not implemented");
}

int64_t onyx_checkpoint_step(const OnyxCheckpoint* ck) {
  (void)ck;
  return 0;
}

OnyxStatus* onyx_training_session_create(const OnyxSessionOptions* opts, OnyxCheckpoint* ck,
                                         const char* artifacts_dir, OnyxTrainingSession** out) {
  (void)opts;
  (void)ck;
  (void)artifacts_dir;
  (void)out;
  return ox_status(ONYX_NOT_IMPLEMENTED, "onyx_training_session_create: not implemented");
}

void onyx_training_session_release(OnyxTrainingSession* ts) {
  (void)ts;
}

size_t onyx_training_session_input_count(const OnyxTrainingSession* ts) {
  (void)ts;
  return 0;
}

const char* onyx_training_session_input_name(const OnyxTrainingSession* ts, size_t i) {
  (void)ts;
  (void)i;
  return NULL;
}

OnyxStatus* onyx_training_session_train_step(OnyxTrainingSession* ts,
                                             const OnyxValue* const* inputs, size_t n,
                                             OnyxValue** loss_out) {
  (void)ts;
  (void)inputs;
  (void)n;
  (void)loss_out;
  return ox_status(ONYX_NOT_IMPLEMENTED, "onyx_training_session_train_step: not implemented");
}

OnyxStatus* onyx_training_session_eval_step(OnyxTrainingSession* ts, const OnyxValue* const* inputs,
                                            size_t n, OnyxValue** loss_out) {
  (void)ts;
  (void)inputs;
  (void)n;
  (void)loss_out;
  return ox_status(ONYX_NOT_IMPLEMENTED, "onyx_training_session_eval_step: not implemented");
}

OnyxStatus* onyx_training_session_lazy_reset_grad(OnyxTrainingSession* ts) {
  (void)ts;
  return ox_status(ONYX_NOT_IMPLEMENTED, "onyx_training_session_lazy_reset_grad: not implemented");
}

OnyxStatus* onyx_training_session_optimizer_step(OnyxTrainingSession* ts) {
  (void)ts;
  return ox_status(ONYX_NOT_IMPLEMENTED, "onyx_training_session_optimizer_step: not implemented");
}

OnyxStatus* onyx_training_session_set_learning_rate(OnyxTrainingSession* ts, float lr) {
  (void)ts;
  (void)lr;
  return ox_status(ONYX_NOT_IMPLEMENTED,
                   "onyx_training_session_set_learning_rate: not implemented");
}

float onyx_training_session_get_learning_rate(const OnyxTrainingSession* ts) {
  (void)ts;
  return 0.0f;
}

OnyxStatus* onyx_training_session_set_lr_scheduler(OnyxTrainingSession* ts,
                                                   OnyxLrSchedulerKind kind, int64_t warmup_steps,
                                                   int64_t total_steps, float min_lr) {
  (void)ts;
  (void)kind;
  (void)warmup_steps;
  (void)total_steps;
  (void)min_lr;
  return ox_status(ONYX_NOT_IMPLEMENTED, "onyx_training_session_set_lr_scheduler: not implemented");
}

OnyxStatus* onyx_training_session_set_grad_clip_norm(OnyxTrainingSession* ts, float max_norm) {
  (void)ts;
  (void)max_norm;
  return ox_status(ONYX_NOT_IMPLEMENTED,
                   "onyx_training_session_set_grad_clip_norm: not implemented");
}

float onyx_training_session_last_grad_norm(const OnyxTrainingSession* ts) {
  (void)ts;
  return 0.0f;
}

OnyxStatus* onyx_training_session_set_seed(OnyxTrainingSession* ts, uint64_t seed) {
  (void)ts;
  (void)seed;
  return ox_status(ONYX_NOT_IMPLEMENTED, "onyx_training_session_set_seed: not implemented");
}

OnyxStatus* onyx_training_session_set_nonfinite_policy(OnyxTrainingSession* ts,
                                                       OnyxNonfinitePolicy policy) {
  (void)ts;
  (void)policy;
  return ox_status(ONYX_NOT_IMPLEMENTED,
                   "onyx_training_session_set_nonfinite_policy: not implemented");
}

int64_t onyx_training_session_skipped_steps(const OnyxTrainingSession* ts) {
  (void)ts;
  return 0;
}

OnyxStatus* onyx_training_session_export_for_inference(const OnyxTrainingSession* ts,
                                                       const char* out_path) {
  (void)ts;
  (void)out_path;
  return ox_status(ONYX_NOT_IMPLEMENTED,
                   "onyx_training_session_export_for_inference: not implemented");
}
