/* checkpoint.c — checkpoints (docs/training.md, "Checkpoints"): a folder of
 * parameters.safetensors, optimizer.safetensors (optional) and
 * checkpoint.json, the sidecar with the step count, learning rate,
 * scheduler, seed and the trainable and frozen names. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "ox_session.h"
#include "ox_train_api.h"

#define OX_CKPT_FORMAT  "onyx-checkpoint"
#define OX_CKPT_VERSION 1

static const char* const ox_sched_names[] = {"constant", "linear", "cosine"};

OnyxStatus* ox_ckpt_new(OnyxCheckpoint** out) {
  OnyxCheckpoint* ck = calloc(1, sizeof *ck);
  if (!ck) return ox_oom();
  ck->lr = 1e-3f;
  *out = ck;
  return NULL;
}

static OnyxStatus* ox_ckpt_push(char*** names, OxTensor*** ts, bool** flags, size_t* n,
                                const char* name, OxTensor* t, bool flag) {
  char** nn = realloc(*names, (*n + 1) * sizeof *nn);
  if (nn) *names = nn;
  OxTensor** nt = nn ? realloc(*ts, (*n + 1) * sizeof *nt) : NULL;
  if (nt) *ts = nt;
  bool* nf = nt && flags ? realloc(*flags, (*n + 1) * sizeof *nf) : NULL;
  if (nf) *flags = nf;
  char* copy = ox_strdup(name);
  if (!nn || !nt || (flags && !nf) || !copy) {
    free(copy);
    ox_tensor_free(t);
    return ox_oom();
  }
  (*names)[*n] = copy;
  (*ts)[*n] = t;
  if (flags) (*flags)[*n] = flag;
  (*n)++;
  return NULL;
}

OnyxStatus* ox_ckpt_add_param(OnyxCheckpoint* ck, const char* name, OxTensor* t, bool trainable) {
  return ox_ckpt_push(&ck->names, &ck->params, &ck->trainable, &ck->n_params, name, t, trainable);
}

OnyxStatus* ox_ckpt_add_state(OnyxCheckpoint* ck, const char* name, OxTensor* t) {
  return ox_ckpt_push(&ck->state_names, &ck->state, NULL, &ck->n_state, name, t, false);
}

size_t ox_ckpt_find_param(const OnyxCheckpoint* ck, const char* name) {
  for (size_t i = 0; ck && name && i < ck->n_params; i++)
    if (!strcmp(ck->names[i], name)) return i;
  return SIZE_MAX;
}

size_t ox_ckpt_find_state(const OnyxCheckpoint* ck, const char* name) {
  for (size_t i = 0; ck && name && i < ck->n_state; i++)
    if (!strcmp(ck->state_names[i], name)) return i;
  return SIZE_MAX;
}

ONYX_API void onyx_checkpoint_release(OnyxCheckpoint* ck) {
  if (!ck) return;
  ox_st_free_list(ck->names, ck->params, ck->n_params);
  ox_st_free_list(ck->state_names, ck->state, ck->n_state);
  for (size_t i = 0; i < ck->n_frozen; i++)
    free(ck->frozen[i]);
  free(ck->frozen);
  free(ck->trainable);
  free(ck);
}

static OnyxStatus* ox_mkdir(const char* dir) {
  if (mkdir(dir, 0777) == 0 || errno == EEXIST) return NULL;
  return ox_status(ONYX_FAIL, "cannot create the folder '%s': %s", dir, strerror(errno));
}

static char* ox_path(const char* dir, const char* file) {
  return ox_asprintf("%s/%s", dir, file);
}

static json_t* ox_names_json(char* const* names, size_t n, const bool* flags, bool want) {
  json_t* a = json_array();
  for (size_t i = 0; a && i < n; i++)
    if (!flags || flags[i] == want) json_array_append_new(a, json_string(names[i]));
  return a;
}

/* ZeRO-1 frees the full-size state of a data-parallel run's checkpoint
 * (data_parallel.c): such a tensor has no data until gathered on rank 0. */
static OnyxStatus* ox_ckpt_state_present(const OnyxCheckpoint* ck, size_t i, const char* what) {
  const OxTensor* t = ck->state[i];
  if (t->data || !t->bytes) return NULL;
  return ox_status(ONYX_INVALID_ARGUMENT,
                   "%s: optimizer state '%s' is sharded across the ranks (ZeRO-1) and not held "
                   "by this rank: call onyx_training_session_gather_optimizer_state on every "
                   "rank, then use the checkpoint on rank 0",
                   what, ck->state_names[i]);
}

OnyxStatus* ox_ckpt_sync(const OnyxCheckpoint* ck) {
  return ck->mirror_sync ? ck->mirror_sync(ck->mirror) : NULL;
}

ONYX_API OnyxStatus* onyx_checkpoint_save(const OnyxCheckpoint* ck, const char* dir,
                                          int include_optimizer_state) {
  if (!ck || !dir) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_checkpoint_save: NULL argument");
  OX_TRY(ox_ckpt_sync(ck));
  for (size_t i = 0; include_optimizer_state && i < ck->n_state; i++)
    OX_TRY(ox_ckpt_state_present(ck, i, "onyx_checkpoint_save"));
  OX_TRY(ox_mkdir(dir));
  char* p_params = ox_path(dir, "parameters.safetensors");
  char* p_opt = ox_path(dir, "optimizer.safetensors");
  char* p_json = ox_path(dir, "checkpoint.json");
  OnyxStatus* st = p_params && p_opt && p_json ? NULL : ox_oom();
  if (!st) st = ox_st_save(p_params, (const char* const*)ck->names, ck->params, ck->n_params);
  bool with_state = include_optimizer_state && ck->n_state > 0;
  if (!st && with_state)
    st = ox_st_save(p_opt, (const char* const*)ck->state_names, ck->state, ck->n_state);
  if (!st && !with_state) remove(p_opt); /* a stale state file would not match */
  json_t* j = st ? NULL : json_object();
  if (!st && !j) st = ox_oom();
  if (!st) {
    int32_t sk = ck->sched_kind >= 0 && ck->sched_kind <= 2 ? ck->sched_kind : 0;
    json_t* sched = json_object();
    json_object_set_new(sched, "kind", json_string(ox_sched_names[sk]));
    json_object_set_new(sched, "warmup_steps", json_integer(ck->warmup_steps));
    json_object_set_new(sched, "total_steps", json_integer(ck->total_steps));
    json_object_set_new(sched, "min_lr", json_real(ck->min_lr));
    json_object_set_new(j, "format", json_string(OX_CKPT_FORMAT));
    json_object_set_new(j, "version", json_integer(OX_CKPT_VERSION));
    json_object_set_new(j, "step", json_integer(ck->step));
    json_object_set_new(j, "train_steps", json_integer(ck->train_steps));
    json_object_set_new(j, "learning_rate", json_real(ck->lr));
    json_object_set_new(j, "scheduler", sched);
    /* JSON integers are signed 64-bit: the seed is written as a string. */
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)ck->seed);
    json_object_set_new(j, "seed", json_string(seed));
    json_object_set_new(j, "parameters", json_string("parameters.safetensors"));
    json_object_set_new(j, "optimizer_state",
                        with_state ? json_string("optimizer.safetensors") : json_null());
    json_object_set_new(j, "trainable", ox_names_json(ck->names, ck->n_params, ck->trainable, 1));
    json_object_set_new(j, "buffers", ox_names_json(ck->names, ck->n_params, ck->trainable, 0));
    json_object_set_new(j, "frozen", ox_names_json(ck->frozen, ck->n_frozen, NULL, 0));
    /* The dynamic loss scaler, as torch.cuda.amp.GradScaler's state_dict. */
    json_t* ls = ck->has_scaler ? json_object() : NULL;
    if (ls) {
      json_object_set_new(ls, "scale", json_real(ck->loss_scale));
      json_object_set_new(ls, "growth_factor", json_real(ck->scale_growth_factor));
      json_object_set_new(ls, "backoff_factor", json_real(ck->scale_backoff_factor));
      json_object_set_new(ls, "growth_interval", json_integer(ck->scale_growth_interval));
      json_object_set_new(ls, "growth_tracker", json_integer(ck->scale_growth_tracker));
    }
    json_object_set_new(j, "loss_scaler", ls ? ls : json_null());
    char* text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!text) st = ox_oom();
    if (!st) st = ox_write_atomic(p_json, text, strlen(text));
    free(text);
  }
  json_decref(j);
  free(p_params);
  free(p_opt);
  free(p_json);
  return st;
}

static bool ox_json_has_name(json_t* a, const char* name) {
  size_t i;
  json_t* v;
  json_array_foreach(a, i, v) {
    if (json_is_string(v) && !strcmp(json_string_value(v), name)) return true;
  }
  return false;
}

ONYX_API OnyxStatus* onyx_checkpoint_load(const char* dir, OnyxCheckpoint** out) {
  if (out) *out = NULL;
  if (!dir || !out) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_checkpoint_load: NULL argument");
  char* p_json = ox_path(dir, "checkpoint.json");
  if (!p_json) return ox_oom();
  json_error_t jerr;
  json_t* j = json_load_file(p_json, 0, &jerr);
  OnyxStatus* st = NULL;
  if (!j)
    st = ox_status(ONYX_NOT_FOUND, "checkpoint '%s': cannot read %s: %s (line %d)", dir, p_json,
                   jerr.text, jerr.line);
  else if (!json_is_object(j) || !json_is_string(json_object_get(j, "format")) ||
           strcmp(json_string_value(json_object_get(j, "format")), OX_CKPT_FORMAT) ||
           json_integer_value(json_object_get(j, "version")) != OX_CKPT_VERSION)
    st = ox_status(ONYX_INVALID_ARGUMENT, "checkpoint '%s': %s is no \"%s\" sidecar of version %d",
                   dir, p_json, OX_CKPT_FORMAT, OX_CKPT_VERSION);
  free(p_json);
  OnyxCheckpoint* ck = NULL;
  if (!st) st = ox_ckpt_new(&ck);
  if (!st) {
    ck->step = json_integer_value(json_object_get(j, "step"));
    ck->train_steps = json_integer_value(json_object_get(j, "train_steps"));
    ck->lr = (float)json_number_value(json_object_get(j, "learning_rate"));
    json_t* sched = json_object_get(j, "scheduler");
    const char* kind = json_string_value(json_object_get(sched, "kind"));
    for (int32_t k = 0; kind && k < 3; k++)
      if (!strcmp(kind, ox_sched_names[k])) ck->sched_kind = k;
    ck->warmup_steps = json_integer_value(json_object_get(sched, "warmup_steps"));
    ck->total_steps = json_integer_value(json_object_get(sched, "total_steps"));
    ck->min_lr = (float)json_number_value(json_object_get(sched, "min_lr"));
    const char* seed = json_string_value(json_object_get(j, "seed"));
    ck->seed = seed ? strtoull(seed, NULL, 10) : 0;
    if (ck->step < 0 || ck->train_steps < 0)
      st = ox_status(ONYX_INVALID_ARGUMENT, "checkpoint '%s': a negative step count", dir);
    json_t* ls = json_object_get(j, "loss_scaler");
    if (!st && json_is_object(ls)) {
      ck->has_scaler = true;
      ck->loss_scale = (float)json_number_value(json_object_get(ls, "scale"));
      ck->scale_growth_factor = (float)json_number_value(json_object_get(ls, "growth_factor"));
      ck->scale_backoff_factor = (float)json_number_value(json_object_get(ls, "backoff_factor"));
      ck->scale_growth_interval = json_integer_value(json_object_get(ls, "growth_interval"));
      ck->scale_growth_tracker = json_integer_value(json_object_get(ls, "growth_tracker"));
      if (!(ck->loss_scale > 0) || !isfinite(ck->loss_scale) || !(ck->scale_growth_factor >= 1) ||
          !isfinite(ck->scale_growth_factor) || !(ck->scale_backoff_factor > 0) ||
          !(ck->scale_backoff_factor <= 1) || ck->scale_growth_interval < 1 ||
          ck->scale_growth_tracker < 0)
        st = ox_status(ONYX_INVALID_ARGUMENT,
                       "checkpoint '%s': loss_scaler scale %g, growth_factor %g, backoff_factor "
                       "%g, growth_interval %lld, growth_tracker %lld out of range",
                       dir, (double)ck->loss_scale, (double)ck->scale_growth_factor,
                       (double)ck->scale_backoff_factor, (long long)ck->scale_growth_interval,
                       (long long)ck->scale_growth_tracker);
    }
  }
  json_t* frozen = j ? json_object_get(j, "frozen") : NULL;
  for (size_t i = 0; !st && i < json_array_size(frozen); i++) {
    const char* f = json_string_value(json_array_get(frozen, i));
    char** nf = f ? realloc(ck->frozen, (ck->n_frozen + 1) * sizeof *nf) : NULL;
    if (nf) ck->frozen = nf;
    char* c = nf ? ox_strdup(f) : NULL;
    if (!c) {
      st = f ? ox_oom()
             : ox_status(ONYX_INVALID_ARGUMENT, "checkpoint '%s': a frozen name is no string", dir);
      break;
    }
    ck->frozen[ck->n_frozen++] = c;
  }
  char** names = NULL;
  OxTensor** ts = NULL;
  size_t n = 0;
  if (!st) {
    char* p = ox_path(dir, "parameters.safetensors");
    st = p ? ox_st_load(p, &names, &ts, &n) : ox_oom();
    free(p);
  }
  json_t* trainable = j ? json_object_get(j, "trainable") : NULL;
  for (size_t i = 0; i < n; i++) {
    if (!st) {
      st = ox_ckpt_add_param(ck, names[i], ts[i], ox_json_has_name(trainable, names[i]));
      ts[i] = NULL;
    }
  }
  ox_st_free_list(names, ts, n);
  for (size_t i = 0; !st && i < json_array_size(trainable); i++) {
    const char* t = json_string_value(json_array_get(trainable, i));
    if (!t || ox_ckpt_find_param(ck, t) == SIZE_MAX)
      st = ox_status(ONYX_INVALID_ARGUMENT,
                     "checkpoint '%s': trainable parameter '%s' is missing from "
                     "parameters.safetensors",
                     dir, t ? t : "?");
  }
  const char* opt = j ? json_string_value(json_object_get(j, "optimizer_state")) : NULL;
  if (!st && opt) {
    if (strchr(opt, '/'))
      st = ox_status(ONYX_INVALID_ARGUMENT, "checkpoint '%s': optimizer_state '%s' is no file name",
                     dir, opt);
    char* p = st ? NULL : ox_path(dir, opt);
    if (!st) st = p ? ox_st_load(p, &names, &ts, &n) : ox_oom();
    free(p);
    for (size_t i = 0; !st && i < n; i++) {
      st = ox_ckpt_add_state(ck, names[i], ts[i]);
      ts[i] = NULL;
    }
    ox_st_free_list(names, ts, n);
  }
  json_decref(j);
  if (st) {
    onyx_checkpoint_release(ck);
    return st;
  }
  *out = ck;
  return NULL;
}

/* --- accessors -------------------------------------------------------------------------- */

ONYX_API size_t onyx_checkpoint_parameter_count(const OnyxCheckpoint* ck) {
  return ck ? ck->n_params : 0;
}

ONYX_API const char* onyx_checkpoint_parameter_name(const OnyxCheckpoint* ck, size_t i) {
  return ck && i < ck->n_params ? ck->names[i] : NULL;
}

static OnyxStatus* ox_share_value(const OxTensor* t, OnyxValue** out) {
  OxTensor* v = NULL;
  OX_TRY(ox_value_share(t, &v));
  OnyxValue* val = malloc(sizeof *val);
  if (!val) {
    ox_tensor_free(v);
    return ox_oom();
  }
  val->tensor = v;
  *out = val;
  return NULL;
}

ONYX_API OnyxStatus* onyx_checkpoint_get_parameter(const OnyxCheckpoint* ck, const char* name,
                                                   OnyxValue** out) {
  if (out) *out = NULL;
  if (!ck || !name || !out)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_checkpoint_get_parameter: NULL argument");
  size_t i = ox_ckpt_find_param(ck, name);
  if (i == SIZE_MAX) return ox_status(ONYX_NOT_FOUND, "checkpoint: no parameter '%s'", name);
  OX_TRY(ox_ckpt_sync(ck));
  return ox_share_value(ck->params[i], out);
}

ONYX_API OnyxStatus* onyx_checkpoint_set_parameter(OnyxCheckpoint* ck, const char* name,
                                                   const OnyxValue* value) {
  const OxTensor* src = value ? onyx_value_tensor(value) : NULL;
  if (!ck || !name || !src)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_checkpoint_set_parameter: NULL argument");
  size_t i = ox_ckpt_find_param(ck, name);
  if (i == SIZE_MAX) return ox_status(ONYX_NOT_FOUND, "checkpoint: no parameter '%s'", name);
  OxTensor* dst = ck->params[i];
  bool same = src->type == dst->type && src->rank == dst->rank;
  for (size_t d = 0; same && d < src->rank; d++)
    same = src->dims[d] == dst->dims[d];
  if (!same) {
    char a[128], b[128];
    ox_shape_str(dst->type, dst->dims, (int64_t)dst->rank, a, sizeof a);
    ox_shape_str(src->type, src->dims, (int64_t)src->rank, b, sizeof b);
    return ox_status(ONYX_INVALID_ARGUMENT, "checkpoint: parameter '%s' is %s, the value is %s",
                     name, a, b);
  }
  /* The other tensors are brought up to date first, since the session's
   * device copies are all reloaded from the host tensors afterwards. */
  OX_TRY(ox_ckpt_sync(ck));
  if (dst->bytes) memcpy(dst->data, src->data, dst->bytes);
  if (ck->mirror_stale) ck->mirror_stale(ck->mirror);
  return NULL;
}

ONYX_API int onyx_checkpoint_parameter_trainable(const OnyxCheckpoint* ck, const char* name) {
  size_t i = ox_ckpt_find_param(ck, name);
  return i == SIZE_MAX ? -1 : ck->trainable[i];
}

ONYX_API size_t onyx_checkpoint_state_count(const OnyxCheckpoint* ck) {
  return ck ? ck->n_state : 0;
}

ONYX_API const char* onyx_checkpoint_state_name(const OnyxCheckpoint* ck, size_t i) {
  return ck && i < ck->n_state ? ck->state_names[i] : NULL;
}

ONYX_API OnyxStatus* onyx_checkpoint_get_state(const OnyxCheckpoint* ck, const char* name,
                                               OnyxValue** out) {
  if (out) *out = NULL;
  if (!ck || !name || !out)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_checkpoint_get_state: NULL argument");
  size_t i = ox_ckpt_find_state(ck, name);
  if (i == SIZE_MAX) return ox_status(ONYX_NOT_FOUND, "checkpoint: no optimizer state '%s'", name);
  OX_TRY(ox_ckpt_state_present(ck, i, "onyx_checkpoint_get_state"));
  OX_TRY(ox_ckpt_sync(ck));
  return ox_share_value(ck->state[i], out);
}

ONYX_API int64_t onyx_checkpoint_step(const OnyxCheckpoint* ck) {
  return ck ? ck->step : 0;
}
