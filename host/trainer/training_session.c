/* training_session.c — the training session (onyx_training.h): sessions
 * over the training, eval and optimizer models of an artifacts folder,
 * sharing the checkpoint's parameter buffers (each is fed as a value that
 * shares the checkpoint tensor's memory), gradient accumulators, the
 * learning-rate scheduler, gradient clipping and the non-finite policy. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_data_parallel.h"
#include "ox_model.h"
#include "ox_session.h"
#include "ox_train_api.h"

struct OnyxTrainingSession {
  OnyxCheckpoint* ck;
  OnyxSession* train;
  OnyxSession* eval;
  OnyxSession* opt;
  size_t n_inputs; /* the model's inputs, then the labels */
  char** input_names;
  size_t n_params;
  size_t* pidx;      /* checkpoint index of each parameter */
  OnyxValue** pvals; /* share the checkpoint's parameter buffers */
  OnyxValue** gvals; /* the gradient accumulators */
  size_t n_buffers;  /* BatchNormalization running statistics */
  size_t* bidx;      /* their checkpoint indices */
  OnyxValue** bvals; /* share the checkpoint's buffers */
  size_t n_slots;    /* optimizer state tensors per parameter */
  char** slots;      /* their names ("exp_avg") */
  size_t* sidx;      /* checkpoint state index, [slot * n_params + param] */
  OnyxValue** svals; /* share the checkpoint's state buffers */
  bool has_clip;     /* the optimizer model takes max_norm */
  float max_norm;    /* <= 0: off */
  float last_norm;
  OnyxNonfinitePolicy policy;
  int64_t skipped;
  /* Names for the runs: inputs + parameters; loss + gradients; the
   * optimizer's inputs and outputs. */
  const char** feed_names;
  const OnyxValue** feeds;
  char** train_outs;
  const char** opt_in_names;
  const OnyxValue** opt_feeds;
  char** opt_outs;
  size_t n_opt_in, n_opt_out;
  char* inference_path;
  /* The optimizer session is made at the first optimizer step, so train and
   * eval steps work where no provider has the optimizer kernels. */
  char* opt_path;
  OnyxSessionOptions* opts; /* a copy of the creation options; NULL: defaults */
  OxDataParallel* dp;       /* data-parallel training (data_parallel.c); NULL: off */
};

static void ox_free_strs(char** s, size_t n) {
  for (size_t i = 0; s && i < n; i++)
    free(s[i]);
  free(s);
}

static void ox_release_vals(OnyxValue** v, size_t n) {
  if (v) onyx_values_release(v, n);
  free(v);
}

ONYX_API void onyx_training_session_release(OnyxTrainingSession* ts) {
  if (!ts) return;
  onyx_session_release(ts->train);
  onyx_session_release(ts->eval);
  onyx_session_release(ts->opt);
  ox_free_strs(ts->input_names, ts->n_inputs);
  free(ts->pidx);
  ox_release_vals(ts->pvals, ts->n_params);
  ox_release_vals(ts->gvals, ts->n_params);
  free(ts->bidx);
  ox_release_vals(ts->bvals, ts->n_buffers);
  ox_free_strs(ts->slots, ts->n_slots);
  free(ts->sidx);
  ox_release_vals(ts->svals, ts->n_params * ts->n_slots);
  free(ts->feed_names);
  free(ts->feeds);
  ox_free_strs(ts->train_outs, 1 + ts->n_params + ts->n_buffers);
  free(ts->opt_in_names);
  free(ts->opt_feeds);
  ox_free_strs(ts->opt_outs, ts->n_opt_out);
  free(ts->inference_path);
  free(ts->opt_path);
  onyx_session_options_release(ts->opts);
  ox_dp_free(ts->dp);
  free(ts);
}

static OnyxStatus* ox_value_of(OxTensor* t, OnyxValue** out) {
  OnyxValue* v = malloc(sizeof *v);
  if (!v) {
    ox_tensor_free(t);
    return ox_oom();
  }
  v->tensor = t;
  *out = v;
  return NULL;
}

static OnyxStatus* ox_share(const OxTensor* t, OnyxValue** out) {
  OxTensor* v = NULL;
  OX_TRY(ox_value_share(t, &v));
  return ox_value_of(v, out);
}

/* The strings of a JSON array (absent: none); *bad set when an entry is no
 * string. NULL on OOM or a bad entry. */
static char** ox_json_strs(json_t* a, size_t* n, bool* bad) {
  *n = json_array_size(a);
  char** s = calloc(*n + 1, sizeof *s);
  for (size_t i = 0; s && i < *n; i++) {
    const char* v = json_string_value(json_array_get(a, i));
    if (!v) *bad = true;
    s[i] = v ? ox_strdup(v) : NULL;
    if (!s[i]) {
      ox_free_strs(s, i);
      *n = 0;
      return NULL;
    }
  }
  return s;
}

/* Checks the checkpoint tensor t against input `name` of session s. */
static OnyxStatus* ox_check_input(OnyxSession* s, const char* what, const char* name,
                                  const OxTensor* t) {
  size_t n = onyx_session_input_count(s);
  for (size_t i = 0; i < n; i++) {
    if (strcmp(onyx_session_input_name(s, i), name)) continue;
    OnyxElemType type;
    int32_t rank;
    const int64_t* dims;
    OX_TRY(onyx_session_input_info(s, i, &type, &rank, &dims));
    bool same = type == t->type && (rank < 0 || (size_t)rank == t->rank);
    for (int32_t d = 0; same && rank > 0 && d < rank; d++)
      same = dims[d] == ONYX_DIM_UNKNOWN || dims[d] == t->dims[d];
    if (!same) {
      char a[128], b[128];
      ox_shape_str(type, dims, rank, a, sizeof a);
      ox_shape_str(t->type, t->dims, (int64_t)t->rank, b, sizeof b);
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "training session: checkpoint %s '%s' is %s, the %s model takes %s", what,
                       name, b, "training", a);
    }
    return NULL;
  }
  return ox_status(ONYX_INVALID_MODEL, "training session: the training model has no input '%s'",
                   name);
}

static OnyxStatus* ox_ts_meta(OnyxTrainingSession* ts, const char* dir, char*** params,
                              size_t* n_params, char*** buffers, size_t* n_buffers) {
  char* p = ox_asprintf("%s/%s", dir, OX_ARTIFACTS_META);
  if (!p) return ox_oom();
  json_error_t jerr;
  json_t* j = json_load_file(p, 0, &jerr);
  OnyxStatus* st = NULL;
  if (!j || !json_is_array(json_object_get(j, "inputs")) ||
      !json_is_array(json_object_get(j, "parameters")))
    st = ox_status(ONYX_NOT_FOUND, "training session: cannot read the artifacts' %s: %s", p,
                   j ? "no inputs or parameters" : jerr.text);
  free(p);
  size_t n_in = 0;
  bool bad = false;
  char** ins = st ? NULL : ox_json_strs(json_object_get(j, "inputs"), &n_in, &bad);
  const char* labels = st ? NULL : json_string_value(json_object_get(j, "labels"));
  if (!st && !ins)
    st = bad ? ox_status(ONYX_INVALID_ARGUMENT,
                         "training session: %s/%s: an input name is no string", dir,
                         OX_ARTIFACTS_META)
             : ox_oom();
  if (!st) {
    ts->n_inputs = n_in + (labels ? 1 : 0);
    ts->input_names = calloc(ts->n_inputs + 1, sizeof *ts->input_names);
    if (!ts->input_names) st = ox_oom();
    for (size_t i = 0; !st && i < n_in; i++) {
      ts->input_names[i] = ins[i];
      ins[i] = NULL;
    }
    if (!st && labels && !(ts->input_names[n_in] = ox_strdup(labels))) st = ox_oom();
  }
  ox_free_strs(ins, n_in);
  if (!st) {
    *params = ox_json_strs(json_object_get(j, "parameters"), n_params, &bad);
    ts->slots = ox_json_strs(json_object_get(j, "state_slots"), &ts->n_slots, &bad);
    *buffers = ox_json_strs(json_object_get(j, "buffers"), n_buffers, &bad);
    ts->has_clip = json_is_true(json_object_get(j, "clip_grad_norm"));
    if (bad)
      st = ox_status(ONYX_INVALID_ARGUMENT,
                     "training session: %s/%s: parameters, buffers and state_slots must be "
                     "arrays of strings",
                     dir, OX_ARTIFACTS_META);
    else if (!*params || !ts->slots || !*buffers)
      st = ox_oom();
  }
  json_decref(j);
  return st;
}

/* Wires the checkpoint to the models: parameters, accumulators, state. */
static OnyxStatus* ox_ts_bind(OnyxTrainingSession* ts, char** params, size_t n, char** buffers,
                              size_t nb) {
  OnyxCheckpoint* ck = ts->ck;
  ts->n_params = n;
  ts->n_buffers = nb;
  ts->bidx = calloc(nb + 1, sizeof *ts->bidx);
  ts->bvals = calloc(nb + 1, sizeof *ts->bvals);
  if (!ts->bidx || !ts->bvals) return ox_oom();
  for (size_t i = 0; i < nb; i++) {
    size_t k = ox_ckpt_find_param(ck, buffers[i]);
    if (k == SIZE_MAX)
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "training session: the checkpoint has no buffer '%s' (missing), which the "
                       "training model takes",
                       buffers[i]);
    OX_TRY(ox_check_input(ts->train, "buffer", buffers[i], ck->params[k]));
    ts->bidx[i] = k;
    OX_TRY(ox_share(ck->params[k], &ts->bvals[i]));
  }
  ts->pidx = calloc(n + 1, sizeof *ts->pidx);
  ts->pvals = calloc(n + 1, sizeof *ts->pvals);
  ts->gvals = calloc(n + 1, sizeof *ts->gvals);
  ts->sidx = calloc(n * ts->n_slots + 1, sizeof *ts->sidx);
  ts->svals = calloc(n * ts->n_slots + 1, sizeof *ts->svals);
  if (!ts->pidx || !ts->pvals || !ts->gvals || !ts->sidx || !ts->svals) return ox_oom();
  for (size_t i = 0; i < n; i++) {
    size_t k = ox_ckpt_find_param(ck, params[i]);
    if (k == SIZE_MAX)
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "training session: the checkpoint has no parameter '%s' (missing), which "
                       "the training model takes",
                       params[i]);
    OX_TRY(ox_check_input(ts->train, "parameter", params[i], ck->params[k]));
    ts->pidx[i] = k;
    OX_TRY(ox_share(ck->params[k], &ts->pvals[i]));
    OxTensor* g = NULL;
    OX_TRY(ox_tensor_new(ck->params[k]->type, ck->params[k]->dims, ck->params[k]->rank, &g));
    OX_TRY(ox_value_of(g, &ts->gvals[i]));
  }
  for (size_t k = 0; k < ck->n_params; k++) {
    bool used = false;
    for (size_t i = 0; !used && i < n; i++)
      used = ts->pidx[i] == k;
    for (size_t i = 0; !used && i < nb; i++)
      used = ts->bidx[i] == k;
    if (!used)
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "training session: checkpoint parameter '%s' (extra) is no parameter of "
                       "the training model",
                       ck->names[k]);
  }
  /* Optimizer state: the checkpoint's, or zeros for a fresh start. */
  for (size_t s = 0; s < ts->n_slots; s++) {
    for (size_t i = 0; i < n; i++) {
      const OxTensor* p = ck->params[ts->pidx[i]];
      char* name = ox_asprintf("%s.%s", params[i], ts->slots[s]);
      if (!name) return ox_oom();
      size_t k = ox_ckpt_find_state(ck, name);
      OnyxStatus* st = NULL;
      if (k == SIZE_MAX) {
        OxTensor* z = NULL;
        st = ox_tensor_new(p->type, p->dims, p->rank, &z);
        if (!st) st = ox_ckpt_add_state(ck, name, z);
        k = ck->n_state - 1;
      } else {
        const OxTensor* t = ck->state[k];
        bool same = t->type == p->type && t->rank == p->rank;
        for (size_t d = 0; same && d < t->rank; d++)
          same = t->dims[d] == p->dims[d];
        if (!same) {
          char a[128], b[128];
          ox_shape_str(t->type, t->dims, (int64_t)t->rank, a, sizeof a);
          ox_shape_str(p->type, p->dims, (int64_t)p->rank, b, sizeof b);
          st = ox_status(ONYX_INVALID_ARGUMENT,
                         "training session: checkpoint optimizer state '%s' is %s, its parameter "
                         "is %s",
                         name, a, b);
        }
      }
      free(name);
      OX_TRY(st);
      ts->sidx[s * n + i] = k;
    }
  }
  for (size_t k = 0; k < ck->n_state; k++) {
    bool used = false;
    for (size_t i = 0; !used && i < n * ts->n_slots; i++)
      used = ts->sidx[i] == k;
    if (!used)
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "training session: checkpoint optimizer state '%s' (extra) belongs to no "
                       "parameter and slot of this optimizer",
                       ck->state_names[k]);
  }
  for (size_t i = 0; i < n * ts->n_slots; i++)
    OX_TRY(ox_share(ck->state[ts->sidx[i]], &ts->svals[i]));
  return NULL;
}

/* The name arrays of the runs. */
static OnyxStatus* ox_ts_names(OnyxTrainingSession* ts, char* const* params) {
  size_t n = ts->n_params, ni = ts->n_inputs, ns = ts->n_slots, nb = ts->n_buffers;
  ts->feed_names = calloc(ni + n + nb + 1, sizeof *ts->feed_names);
  ts->feeds = calloc(ni + n + nb + 1, sizeof *ts->feeds);
  ts->train_outs = calloc(n + nb + 2, sizeof *ts->train_outs);
  ts->n_opt_in = 2 + (ts->has_clip ? 1 : 0) + n * (2 + ns);
  ts->n_opt_out = n * (1 + ns) + (ts->has_clip ? 1 : 0);
  ts->opt_in_names = calloc(ts->n_opt_in + 1, sizeof *ts->opt_in_names);
  ts->opt_feeds = calloc(ts->n_opt_in + 1, sizeof *ts->opt_feeds);
  ts->opt_outs = calloc(ts->n_opt_out + 1, sizeof *ts->opt_outs);
  if (!ts->feed_names || !ts->feeds || !ts->train_outs || !ts->opt_in_names || !ts->opt_feeds ||
      !ts->opt_outs)
    return ox_oom();
  for (size_t i = 0; i < ni; i++)
    ts->feed_names[i] = ts->input_names[i];
  for (size_t i = 0; i < n; i++) {
    ts->feed_names[ni + i] = ts->ck->names[ts->pidx[i]];
    ts->feeds[ni + i] = ts->pvals[i];
  }
  for (size_t i = 0; i < nb; i++) {
    ts->feed_names[ni + n + i] = ts->ck->names[ts->bidx[i]];
    ts->feeds[ni + n + i] = ts->bvals[i];
  }
  if (!(ts->train_outs[0] = ox_strdup("loss"))) return ox_oom();
  for (size_t i = 0; i < n; i++)
    if (!(ts->train_outs[1 + i] = ox_asprintf("%s_grad", params[i]))) return ox_oom();
  for (size_t i = 0; i < nb; i++)
    if (!(ts->train_outs[1 + n + i] = ox_asprintf("%s.updated", ts->ck->names[ts->bidx[i]])))
      return ox_oom();
  size_t k = 0;
  ts->opt_in_names[k++] = "lr";
  ts->opt_in_names[k++] = "step";
  if (ts->has_clip) ts->opt_in_names[k++] = "max_norm";
  for (size_t i = 0; i < n; i++) {
    ts->opt_in_names[k + i] = ts->feed_names[ni + i];
    ts->opt_feeds[k + i] = ts->pvals[i];
    ts->opt_in_names[k + n + i] = ts->train_outs[1 + i];
    ts->opt_feeds[k + n + i] = ts->gvals[i];
  }
  k += 2 * n;
  for (size_t i = 0; i < n * ns; i++) {
    ts->opt_in_names[k + i] = ts->ck->state_names[ts->sidx[i]];
    ts->opt_feeds[k + i] = ts->svals[i];
  }
  for (size_t i = 0; i < n; i++)
    if (!(ts->opt_outs[i] = ox_asprintf("%s.new", params[i]))) return ox_oom();
  for (size_t i = 0; i < n * ns; i++)
    if (!(ts->opt_outs[n + i] = ox_asprintf("%s.new", ts->ck->state_names[ts->sidx[i]])))
      return ox_oom();
  if (ts->has_clip && !(ts->opt_outs[n * (1 + ns)] = ox_strdup("total_norm"))) return ox_oom();
  return NULL;
}

ONYX_API OnyxStatus* onyx_training_session_create(const OnyxSessionOptions* opts,
                                                  OnyxCheckpoint* ck, const char* artifacts_dir,
                                                  OnyxTrainingSession** out) {
  if (out) *out = NULL;
  if (!ck || !artifacts_dir || !out)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_training_session_create: NULL argument");
  OnyxTrainingSession* ts = calloc(1, sizeof *ts);
  if (!ts) return ox_oom();
  ts->ck = ck;
  char** params = NULL;
  char** buffers = NULL;
  size_t n = 0, nb = 0;
  char* p_train = ox_asprintf("%s/training_model.onnx", artifacts_dir);
  char* p_eval = ox_asprintf("%s/eval_model.onnx", artifacts_dir);
  ts->opt_path = ox_asprintf("%s/optimizer_model.onnx", artifacts_dir);
  ts->inference_path = ox_asprintf("%s/inference_model.onnx", artifacts_dir);
  OnyxStatus* st = p_train && p_eval && ts->opt_path && ts->inference_path ? NULL : ox_oom();
  if (!st) st = ox_ts_meta(ts, artifacts_dir, &params, &n, &buffers, &nb);
  if (!st) st = onyx_session_create(opts, p_train, &ts->train);
  if (!st) st = onyx_session_create(opts, p_eval, &ts->eval);
  if (!st && opts) st = ox_session_options_clone(opts, &ts->opts);
  if (!st) st = ox_ts_bind(ts, params, n, buffers, nb);
  if (!st) st = ox_ts_names(ts, params);
  ox_free_strs(params, n);
  ox_free_strs(buffers, nb);
  free(p_train);
  free(p_eval);
  if (st) {
    onyx_training_session_release(ts);
    return st;
  }
  *out = ts;
  return NULL;
}

ONYX_API size_t onyx_training_session_input_count(const OnyxTrainingSession* ts) {
  return ts ? ts->n_inputs : 0;
}

ONYX_API const char* onyx_training_session_input_name(const OnyxTrainingSession* ts, size_t i) {
  return ts && i < ts->n_inputs ? ts->input_names[i] : NULL;
}

/* --- steps -------------------------------------------------------------------------------- */

static bool ox_all_finite(const OxTensor* t) {
  if (t->type == ONYX_ELEM_FLOAT32) {
    const float* d = t->data;
    for (size_t i = 0; i < t->count; i++)
      if (!isfinite(d[i])) return false;
  } else if (t->type == ONYX_ELEM_FLOAT64) {
    const double* d = t->data;
    for (size_t i = 0; i < t->count; i++)
      if (!isfinite(d[i])) return false;
  }
  return true;
}

static OnyxStatus* ox_ts_feed(OnyxTrainingSession* ts, const char* what,
                              const OnyxValue* const* inputs, size_t n) {
  if (!ts || (n && !inputs))
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_training_session_%s: NULL argument", what);
  if (n != ts->n_inputs)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_training_session_%s: %zu inputs given, the model takes %zu (its inputs, "
                     "then the labels)",
                     what, n, ts->n_inputs);
  for (size_t i = 0; i < n; i++)
    ts->feeds[i] = inputs[i];
  return NULL;
}

ONYX_API OnyxStatus* onyx_training_session_train_step(OnyxTrainingSession* ts,
                                                      const OnyxValue* const* inputs, size_t n,
                                                      OnyxValue** loss_out) {
  if (loss_out) *loss_out = NULL;
  OX_TRY(ox_ts_feed(ts, "train_step", inputs, n));
  size_t np = ts->n_params, nb = ts->n_buffers, n_out = 1 + np + nb;
  OnyxValue** outs = calloc(n_out, sizeof *outs);
  if (!outs) return ox_oom();
  OnyxStatus* st = onyx_session_run(ts->train, NULL, ts->feed_names, ts->feeds, n + np + nb,
                                    (const char* const*)ts->train_outs, n_out, outs);
  if (st) {
    free(outs);
    return ox_status_wrap(st, "training session: train step");
  }
  ts->ck->train_steps++;
  /* Data-parallel: the loss averaged over the ranks, before the finite
   * check, so that every rank takes the same decision. */
  if (ts->dp && (st = ox_dp_loss(ts->dp, outs[0]->tensor))) {
    onyx_values_release(outs, n_out);
    free(outs);
    return st;
  }
  const OxTensor* loss = outs[0]->tensor;
  bool finite = ox_all_finite(loss);
  if (!finite && ts->policy == ONYX_NONFINITE_ERROR) {
    double v = loss->type == ONYX_ELEM_FLOAT64 ? *(const double*)loss->data
                                               : (double)*(const float*)loss->data;
    st = ox_status(ONYX_RUNTIME_ERROR,
                   "training session: train step: the loss is %g (the gradients were not "
                   "accumulated; onyx_training_session_set_nonfinite_policy SKIP_STEP drops such "
                   "batches instead)",
                   v);
  } else if (!finite) {
    ts->skipped++;
  } else {
    for (size_t i = 0; i < np; i++) {
      OxTensor* acc = ts->gvals[i]->tensor;
      const OxTensor* g = outs[1 + i]->tensor;
      if (g->type != acc->type || g->count != acc->count) {
        st = ox_status(ONYX_RUNTIME_ERROR,
                       "training session: gradient '%s' has %zu elements, its parameter %zu",
                       ts->train_outs[1 + i], g->count, acc->count);
        break;
      }
      if (acc->type == ONYX_ELEM_FLOAT64) {
        double* a = acc->data;
        const double* d = g->data;
        for (size_t k = 0; k < acc->count; k++)
          a[k] += d[k];
      } else {
        float* a = acc->data;
        const float* d = g->data;
        for (size_t k = 0; k < acc->count; k++)
          a[k] += d[k];
      }
    }
  }
  /* The running statistics of a counted batch replace the buffers. */
  for (size_t i = 0; !st && finite && i < nb; i++) {
    OxTensor* dst = ts->ck->params[ts->bidx[i]];
    const OxTensor* src = outs[1 + np + i]->tensor;
    if (src->type != dst->type || src->bytes != dst->bytes)
      st = ox_status(ONYX_RUNTIME_ERROR,
                     "training session: buffer output '%s' is %zu bytes, "
                     "the buffer %zu",
                     ts->train_outs[1 + np + i], src->bytes, dst->bytes);
    else if (dst->bytes)
      memcpy(dst->data, src->data, dst->bytes);
  }
  if (!st && loss_out) {
    *loss_out = outs[0];
    outs[0] = NULL;
  }
  onyx_values_release(outs, n_out);
  free(outs);
  return st;
}

ONYX_API OnyxStatus* onyx_training_session_eval_step(OnyxTrainingSession* ts,
                                                     const OnyxValue* const* inputs, size_t n,
                                                     OnyxValue** loss_out) {
  if (loss_out) *loss_out = NULL;
  OX_TRY(ox_ts_feed(ts, "eval_step", inputs, n));
  const char* name = "loss";
  OnyxValue* loss = NULL;
  OnyxStatus* st = onyx_session_run(ts->eval, NULL, ts->feed_names, ts->feeds,
                                    n + ts->n_params + ts->n_buffers, &name, 1, &loss);
  if (st) return ox_status_wrap(st, "training session: eval step");
  if (loss_out)
    *loss_out = loss;
  else
    onyx_value_release(loss);
  return NULL;
}

ONYX_API OnyxStatus* onyx_training_session_lazy_reset_grad(OnyxTrainingSession* ts) {
  if (!ts) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_training_session_lazy_reset_grad: NULL");
  for (size_t i = 0; i < ts->n_params; i++) {
    OxTensor* t = ts->gvals[i]->tensor;
    if (t->bytes) memset(t->data, 0, t->bytes);
  }
  return NULL;
}

/* The scheduled rate of step t. */
static float ox_ts_lr(const OnyxCheckpoint* ck, int64_t t) {
  double base = ck->lr, lo = ck->min_lr;
  int64_t w = ck->warmup_steps, total = ck->total_steps;
  if (ck->sched_kind == ONYX_LR_CONSTANT) return (float)base;
  if (t < w) return (float)(base * (double)t / (double)w);
  double span = (double)(total - w);
  double progress = span > 0 ? (double)(t - w) / span : 1.0;
  if (progress > 1) progress = 1;
  double f = ck->sched_kind == ONYX_LR_LINEAR
                 ? 1.0 - progress
                 : 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
  return (float)(lo + (base - lo) * f);
}

ONYX_API OnyxStatus* onyx_training_session_optimizer_step(OnyxTrainingSession* ts) {
  if (!ts) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_training_session_optimizer_step: NULL");
  OnyxCheckpoint* ck = ts->ck;
  size_t np = ts->n_params;
  /* Data-parallel: ZeRO-1's sharded step, or the gradients averaged over the ranks first. */
  if (ts->dp && ox_dp_zero(ts->dp))
    return ox_dp_zero_step(ts->dp, ox_ts_lr(ck, ck->step), ts->policy, &ts->skipped);
  if (ts->dp) OX_TRY(ox_dp_average_grads(ts->dp));
  for (size_t i = 0; i < np; i++) {
    if (ox_all_finite(ts->gvals[i]->tensor)) continue;
    if (ts->policy == ONYX_NONFINITE_SKIP_STEP) {
      ts->skipped++;
      return NULL;
    }
    return ox_status(ONYX_RUNTIME_ERROR,
                     "training session: optimizer step: the accumulated gradient '%s' holds NaN "
                     "or Inf (the step was not taken)",
                     ts->train_outs[1 + i]);
  }
  if (!ts->opt) OX_TRY(onyx_session_create(ts->opts, ts->opt_path, &ts->opt));
  float lr = ox_ts_lr(ck, ck->step);
  float max_norm = ts->max_norm > 0 ? ts->max_norm : INFINITY;
  int64_t step = ck->step;
  OnyxValue* v_lr = NULL;
  OnyxValue* v_step = NULL;
  OnyxValue* v_norm = NULL;
  OX_TRY(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, NULL, 0, &lr, sizeof lr, &v_lr));
  OnyxStatus* st = onyx_value_create_tensor(ONYX_ELEM_INT64, NULL, 0, &step, sizeof step, &v_step);
  if (!st && ts->has_clip)
    st = onyx_value_create_tensor(ONYX_ELEM_FLOAT32, NULL, 0, &max_norm, sizeof max_norm, &v_norm);
  OnyxValue** outs = st ? NULL : calloc(ts->n_opt_out + 1, sizeof *outs);
  if (!st && !outs) st = ox_oom();
  if (!st) {
    ts->opt_feeds[0] = v_lr;
    ts->opt_feeds[1] = v_step;
    if (ts->has_clip) ts->opt_feeds[2] = v_norm;
    st = onyx_session_run(ts->opt, NULL, ts->opt_in_names, ts->opt_feeds, ts->n_opt_in,
                          (const char* const*)ts->opt_outs, ts->n_opt_out, outs);
    if (st) st = ox_status_wrap(st, "training session: optimizer step");
  }
  /* New parameters and state replace the checkpoint's contents in place,
   * so every value sharing them sees the update. */
  for (size_t k = 0; !st && k < np * (1 + ts->n_slots); k++) {
    OxTensor* dst = k < np ? ck->params[ts->pidx[k]] : ck->state[ts->sidx[k - np]];
    const OxTensor* src = outs[k]->tensor;
    if (src->bytes != dst->bytes || src->type != dst->type)
      st = ox_status(ONYX_RUNTIME_ERROR,
                     "training session: optimizer output '%s' is %zu bytes, "
                     "expected %zu",
                     ts->opt_outs[k], src->bytes, dst->bytes);
    else if (dst->bytes)
      memcpy(dst->data, src->data, dst->bytes);
  }
  if (!st && ts->has_clip) {
    const OxTensor* tn = outs[ts->n_opt_out - 1]->tensor;
    ts->last_norm = tn->type == ONYX_ELEM_FLOAT32 && tn->count ? *(const float*)tn->data : 0.0f;
  }
  if (!st) ck->step++;
  if (outs) onyx_values_release(outs, ts->n_opt_out);
  free(outs);
  onyx_value_release(v_lr);
  onyx_value_release(v_step);
  onyx_value_release(v_norm);
  return st;
}

/* --- settings ----------------------------------------------------------------------------- */

ONYX_API OnyxStatus* onyx_training_session_set_learning_rate(OnyxTrainingSession* ts, float lr) {
  if (!ts || !(lr >= 0) || !isfinite(lr))
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_training_session_set_learning_rate: NULL session or rate %g",
                     (double)lr);
  ts->ck->lr = lr;
  return NULL;
}

ONYX_API float onyx_training_session_get_learning_rate(const OnyxTrainingSession* ts) {
  return ts ? ox_ts_lr(ts->ck, ts->ck->step) : 0.0f;
}

ONYX_API OnyxStatus* onyx_training_session_set_lr_scheduler(OnyxTrainingSession* ts,
                                                            OnyxLrSchedulerKind kind,
                                                            int64_t warmup_steps,
                                                            int64_t total_steps, float min_lr) {
  if (!ts) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_training_session_set_lr_scheduler: NULL");
  if ((int)kind < 0 || kind > ONYX_LR_COSINE || warmup_steps < 0 || total_steps < warmup_steps ||
      !(min_lr >= 0))
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_training_session_set_lr_scheduler: kind %d, warmup_steps %lld, "
                     "total_steps %lld, min_lr %g (need 0 <= warmup <= total, min_lr >= 0)",
                     (int)kind, (long long)warmup_steps, (long long)total_steps, (double)min_lr);
  ts->ck->sched_kind = (int32_t)kind;
  ts->ck->warmup_steps = warmup_steps;
  ts->ck->total_steps = total_steps;
  ts->ck->min_lr = min_lr;
  return NULL;
}

ONYX_API OnyxStatus* onyx_training_session_set_grad_clip_norm(OnyxTrainingSession* ts,
                                                              float max_norm) {
  if (!ts)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_training_session_set_grad_clip_norm: NULL");
  if (max_norm > 0 && !ts->has_clip)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_training_session_set_grad_clip_norm: the artifacts were generated "
                     "without clip_grad_norm");
  ts->max_norm = max_norm > 0 ? max_norm : 0.0f;
  return NULL;
}

ONYX_API float onyx_training_session_last_grad_norm(const OnyxTrainingSession* ts) {
  return ts ? ts->last_norm : 0.0f;
}

ONYX_API OnyxStatus* onyx_training_session_set_seed(OnyxTrainingSession* ts, uint64_t seed) {
  if (!ts) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_training_session_set_seed: NULL");
  ts->ck->seed = seed;
  return NULL;
}

ONYX_API OnyxStatus* onyx_training_session_set_nonfinite_policy(OnyxTrainingSession* ts,
                                                                OnyxNonfinitePolicy policy) {
  if (!ts || (policy != ONYX_NONFINITE_ERROR && policy != ONYX_NONFINITE_SKIP_STEP))
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_training_session_set_nonfinite_policy: NULL session or policy %d",
                     (int)policy);
  ts->policy = policy;
  return NULL;
}

ONYX_API int64_t onyx_training_session_skipped_steps(const OnyxTrainingSession* ts) {
  return ts ? ts->skipped : 0;
}

ONYX_API OnyxStatus* onyx_training_session_export_for_inference(const OnyxTrainingSession* ts,
                                                                const char* out_path) {
  if (!ts || !out_path)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_training_session_export_for_inference: NULL");
  OxGraph* g = NULL;
  OX_TRY(ox_model_load_file(ts->inference_path, NULL, &g));
  OnyxStatus* st = NULL;
  for (size_t k = 0; !st && k < ts->ck->n_params; k++) {
    OxValue* v = ox_graph_find(g, ts->ck->names[k]);
    if (!v || !v->constant) {
      st = ox_status(ONYX_INVALID_MODEL,
                     "training session: export: parameter '%s' is no initializer of %s",
                     ts->ck->names[k], ts->inference_path);
      break;
    }
    OxTensor* t = NULL;
    st = ox_tensor_clone(ts->ck->params[k], &t);
    if (!st) {
      ox_tensor_free(v->constant);
      v->constant = t;
    }
  }
  if (!st) st = ox_model_save(g, out_path);
  ox_graph_free(g);
  return st;
}

/* --- data-parallel training (data_parallel.c) ---------------------------------------------- */

ONYX_API OnyxStatus* onyx_training_session_set_data_parallel(OnyxTrainingSession* ts,
                                                             const OnyxDataParallelOptions* o) {
  if (!ts || ts->dp)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_training_session_set_data_parallel: %s",
                     ts ? "already data-parallel" : "NULL session");
  OxDpBind b = {.ck = ts->ck,
                .n_params = ts->n_params,
                .pidx = ts->pidx,
                .gvals = ts->gvals,
                .n_slots = ts->n_slots,
                .sidx = ts->sidx,
                .opt_path = ts->opt_path,
                .grad_names = ts->train_outs + 1,
                .train = &ts->train,
                .opts = ts->opts,
                .has_clip = ts->has_clip};
  return ox_dp_create(o, &b, &ts->dp);
}

ONYX_API OnyxStatus* onyx_training_session_gather_optimizer_state(OnyxTrainingSession* ts) {
  if (!ts)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_training_session_gather_optimizer_state: NULL");
  return ts->dp ? ox_dp_gather_state(ts->dp) : NULL;
}
