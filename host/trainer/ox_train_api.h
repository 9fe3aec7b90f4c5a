/* ox_train_api.h — internals of the training API (onyx_training.h):
 * safetensors files (safetensors.c), checkpoints (checkpoint.c), artifacts
 * (artifacts.c) and the training session (training_session.c). */
#ifndef OX_TRAIN_API_H
#define OX_TRAIN_API_H

#include "onyx/onyx_training.h"
#include "ox_common.h"
#include "ox_ir.h"

/* Writes n host tensors as a safetensors file at `path`, atomically (a
 * temporary file renamed into place). Names must be unique. */
OnyxStatus* ox_st_save(const char* path, const char* const* names, OxTensor* const* ts, size_t n);
/* Reads a safetensors file: *names and *ts (n entries, in the order of their
 * data offsets) are the caller's (ox_st_free_list). */
OnyxStatus* ox_st_load(const char* path, char*** names, OxTensor*** ts, size_t* n);
void ox_st_free_list(char** names, OxTensor** ts, size_t n);

/* Writes `len` bytes to path through a temporary file and a rename. */
OnyxStatus* ox_write_atomic(const char* path, const void* data, size_t len);

/* A checkpoint: the parameters (trainable and buffers) and optimizer state,
 * each a host tensor the training session updates in place. */
struct OnyxCheckpoint {
  size_t n_params;
  char** names;
  OxTensor** params;
  bool* trainable;
  size_t n_state;
  char** state_names;
  OxTensor** state;
  char** frozen; /* names of frozen initializers, for the sidecar */
  size_t n_frozen;
  int64_t step;
  float lr;
  int32_t sched_kind; /* OnyxLrSchedulerKind */
  int64_t warmup_steps, total_steps;
  float min_lr;
  uint64_t seed;
  int64_t train_steps; /* train steps taken (for the seed of each) */
  /* The dynamic loss scaler (torch.cuda.amp.GradScaler's state and
   * settings); has_scaler false: none. growth_tracker counts the optimizer
   * steps taken in a row since the scale last changed. */
  bool has_scaler;
  float loss_scale, scale_growth_factor, scale_backoff_factor;
  int64_t scale_growth_interval, scale_growth_tracker;
  /* A training session that keeps these tensors in device memory registers
   * here (NULL: none): mirror_sync copies its newer device copies into
   * params and state before they are read, mirror_stale tells it that the
   * host tensors were written and its device copies must be reloaded. */
  void* mirror;
  OnyxStatus* (*mirror_sync)(void* mirror);
  void (*mirror_stale)(void* mirror);
};

/* Brings the host tensors up to date with a registered training session's
 * device copies (see mirror_sync); NULL when nothing is registered. */
OnyxStatus* ox_ckpt_sync(const OnyxCheckpoint* ck);

/* A new empty checkpoint. */
OnyxStatus* ox_ckpt_new(OnyxCheckpoint** out);
/* Appends a parameter or state tensor (taken, also on error). */
OnyxStatus* ox_ckpt_add_param(OnyxCheckpoint* ck, const char* name, OxTensor* t, bool trainable);
OnyxStatus* ox_ckpt_add_state(OnyxCheckpoint* ck, const char* name, OxTensor* t);
/* Index of a name; SIZE_MAX when absent. */
size_t ox_ckpt_find_param(const OnyxCheckpoint* ck, const char* name);
size_t ox_ckpt_find_state(const OnyxCheckpoint* ck, const char* name);

/* The artifacts' description, artifacts.json: what the training session
 * needs to wire the three models together. */
#define OX_ARTIFACTS_META "artifacts.json"

#endif
