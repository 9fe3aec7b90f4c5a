/* training_session.c — the training session (onyx_training.h): sessions
 * over the training, eval and optimizer models of an artifacts folder,
 * sharing the checkpoint's parameter buffers (each is fed as a value that
 * shares the checkpoint tensor's memory), gradient accumulators, the
 * learning-rate scheduler, gradient clipping and the non-finite policy.
 * Where the training model reads its parameters in device memory, the
 * trained state stays there across steps (OxTsDev below) and the
 * checkpoint's host tensors are a mirror synced before they are read. */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_data_parallel.h"
#include "ox_finite_check.h"
#include "ox_model.h"
#include "ox_session.h"
#include "ox_train_api.h"

/* The trained state in device memory: the values the sessions are fed
 * through IO bindings, each in the memory its consumers read it in or its
 * producer writes it in. A step replaces a value by the step's output (no
 * copy), so only the batch goes in and the loss comes out. */
typedef struct OxTsDev {
  OnyxValue** p; /* [n_params] parameters */
  OnyxValue** b; /* [n_buffers] BatchNormalization running statistics */
  OnyxValue** s; /* [n_params * n_slots] optimizer state */
  OnyxValue** g; /* [n_params] the accumulated gradients of one train step */
  /* No gradient accumulated since creation or the last reset: g holds
   * nothing and the host accumulators (gvals) are zero. */
  bool grads_zero;
  /* A second train step before a reset: the sum is kept in the host
   * accumulators (gvals), as on the host path, and g holds nothing. */
  bool acc_host;
  bool host_stale;        /* p, b, s newer than the checkpoint's host tensors */
  bool dev_stale;         /* the host tensors were written: reload p, b, s */
  OnyxMemoryDevice* pmem; /* [n_params] where the training model reads each */
  OnyxMemoryDevice* bmem; /* [n_buffers] */
  OnyxMemoryDevice* gout; /* [n_params] where each gradient output is produced */
  OnyxMemoryDevice* bout; /* [n_buffers] where each updated buffer is produced */
  OnyxMemoryDevice* oout; /* [n_opt_out] the optimizer's outputs (made with it) */
  bool check_ready;       /* check, cidx and zero are made (at the first check) */
  OnyxSession* check;     /* ox_finite_check.h's model; NULL: no gradient for it */
  size_t* cidx;           /* the gradients it reads, [n_cidx] */
  size_t n_cidx;
  OnyxValue* zero; /* its "zero" input */
  /* Held by a step and by the checkpoint's sync and stale calls, so that a
   * checkpoint read on another thread waits for the step's values. */
  pthread_mutex_t mu;
  bool mu_init;
} OxTsDev;

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
  OxTsDev* dev;             /* the state in device memory; NULL: the host path */
  /* Dynamic loss scaling (the artifacts' "loss_scaling"): the training
   * model takes input "loss_scale", fed from scale_val (a host float32
   * scalar set from the checkpoint's scaler before each train step).
   * found_inf: a train step since the last optimizer step or reset had a
   * non-finite loss, so the next optimizer step is skipped. The init_*
   * settings start the checkpoint's scaler when it has none. */
  bool has_scaler;
  bool found_inf;
  OnyxValue* scale_val;
  float init_scale, init_growth, init_backoff;
  int64_t init_interval;
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

static void ox_ts_dev_free(OnyxTrainingSession* ts) {
  OxTsDev* d = ts->dev;
  if (!d) return;
  ts->dev = NULL;
  if (ts->ck && ts->ck->mirror == ts) {
    ts->ck->mirror = NULL;
    ts->ck->mirror_sync = NULL;
    ts->ck->mirror_stale = NULL;
  }
  ox_release_vals(d->p, ts->n_params);
  ox_release_vals(d->b, ts->n_buffers);
  ox_release_vals(d->s, ts->n_params * ts->n_slots);
  ox_release_vals(d->g, ts->n_params);
  onyx_value_release(d->zero);
  onyx_session_release(d->check);
  if (d->mu_init) pthread_mutex_destroy(&d->mu);
  free(d->cidx);
  free(d->pmem);
  free(d->bmem);
  free(d->gout);
  free(d->bout);
  free(d->oout);
  free(d);
}

ONYX_API void onyx_training_session_release(OnyxTrainingSession* ts) {
  if (!ts) return;
  /* Device values live in the sessions' arenas: released before them. */
  ox_ts_dev_free(ts);
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
  onyx_value_release(ts->scale_val);
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
    json_t* ls = json_object_get(j, "loss_scaling");
    if (json_is_object(ls)) {
      ts->has_scaler = true;
      ts->init_scale = (float)json_number_value(json_object_get(ls, "init_scale"));
      ts->init_growth = (float)json_number_value(json_object_get(ls, "growth_factor"));
      ts->init_backoff = (float)json_number_value(json_object_get(ls, "backoff_factor"));
      ts->init_interval = json_integer_value(json_object_get(ls, "growth_interval"));
      if (!(ts->init_scale > 0) || !isfinite(ts->init_scale) || !(ts->init_growth >= 1) ||
          !isfinite(ts->init_growth) || !(ts->init_backoff > 0) || !(ts->init_backoff <= 1) ||
          ts->init_interval < 1)
        bad = true;
    }
    if (bad)
      st = ox_status(ONYX_INVALID_ARGUMENT,
                     "training session: %s/%s: parameters, buffers and state_slots must be "
                     "arrays of strings, and loss_scaling's settings in range",
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

/* --- the state in device memory ------------------------------------------------------------ */

static size_t ox_input_index(const OnyxSession* s, const char* name) {
  size_t n = onyx_session_input_count(s);
  for (size_t i = 0; i < n; i++)
    if (!strcmp(onyx_session_input_name(s, i), name)) return i;
  return SIZE_MAX;
}

static size_t ox_output_index(const OnyxSession* s, const char* name) {
  size_t n = onyx_session_output_count(s);
  for (size_t i = 0; i < n; i++)
    if (!strcmp(onyx_session_output_name(s, i), name)) return i;
  return SIZE_MAX;
}

static bool ox_mem_host(const OnyxMemoryDevice* m) {
  return m->kind == ONYX_DEVICE_CPU;
}

/* Where session s reads input `name` (*m) or makes output `name`; false
 * when it has no such value or reads it in several memories. */
static bool ox_ts_mem(const OnyxSession* s, const char* name, bool output, OnyxMemoryDevice* m) {
  size_t i = output ? ox_output_index(s, name) : ox_input_index(s, name);
  if (i == SIZE_MAX) return false;
  OnyxStatus* st =
      output ? onyx_session_output_memory(s, i, m) : onyx_session_input_memory(s, i, m);
  onyx_status_release(st);
  return !st;
}

/* Waits for the work queued on provider ep's stream of the training
 * session: ox_copy_tensor waits for its source provider's stream before it
 * copies, so an empty copy from that provider is the wait. */
static OnyxStatus* ox_ts_wait(OnyxTrainingSession* ts, int32_t ep) {
  int64_t zero = 0;
  OxTensor* t = NULL;
  OX_TRY(ox_tensor_new(ONYX_ELEM_FLOAT32, &zero, 1, &t));
  OnyxStatus* st = ox_copy_tensor(ts->train, t, t, ep, -1);
  ox_tensor_free(t);
  return st;
}

static OnyxStatus* ox_ts_ep_of(OnyxTrainingSession* ts, const OnyxMemoryDevice* m, const char* name,
                               int32_t* ep) {
  *ep = ox_program_ep_for_memory(&ts->train->prog, m);
  if (*ep < 0)
    return ox_status(ONYX_FAIL,
                     "training session: no provider of the training session serves the memory of "
                     "'%s'",
                     name);
  return NULL;
}

/* A copy of host tensor t in memory m, as a new value. */
static OnyxStatus* ox_ts_upload(OnyxTrainingSession* ts, const OxTensor* t,
                                const OnyxMemoryDevice* m, const char* name, OnyxValue** out) {
  *out = NULL;
  OxTensor* c = NULL;
  if (ox_mem_host(m)) {
    OX_TRY(ox_tensor_clone(t, &c));
    return ox_value_of(c, out);
  }
  int32_t ep;
  OX_TRY(ox_ts_ep_of(ts, m, name, &ep));
  OX_TRY(ox_session_alloc_tensor(ts->train, ep, (OnyxMemType)m->mem_type, t->type, t->dims, t->rank,
                                 &c));
  OnyxStatus* st = ox_copy_tensor(ts->train, t, c, -1, ep);
  if (!st) st = ox_ts_wait(ts, ep);
  if (st) {
    ox_tensor_free(c);
    return st;
  }
  return ox_value_of(c, out);
}

/* Copies value v (any memory) into host tensor dst. */
static OnyxStatus* ox_ts_download(OnyxTrainingSession* ts, const OnyxValue* v, OxTensor* dst,
                                  const char* name) {
  const OxTensor* src = v->tensor;
  if (src->type != dst->type || src->bytes != dst->bytes)
    return ox_status(ONYX_RUNTIME_ERROR, "training session: '%s' is %zu bytes, expected %zu", name,
                     src->bytes, dst->bytes);
  if (ox_mem_host(&src->device)) {
    if (dst->bytes) memcpy(dst->data, src->data, dst->bytes);
    return NULL;
  }
  int32_t ep;
  OX_TRY(ox_ts_ep_of(ts, &src->device, name, &ep));
  OX_TRY(ox_copy_tensor(ts->train, src, dst, ep, -1));
  return ox_ts_wait(ts, ep);
}

/* Device copies into the host tensors (mu held). */
static OnyxStatus* ox_ts_sync_locked(OnyxTrainingSession* ts) {
  OxTsDev* d = ts->dev;
  if (!d->host_stale) return NULL;
  OnyxCheckpoint* ck = ts->ck;
  size_t np = ts->n_params;
  for (size_t i = 0; i < np; i++)
    OX_TRY(ox_ts_download(ts, d->p[i], ck->params[ts->pidx[i]], ck->names[ts->pidx[i]]));
  for (size_t i = 0; i < ts->n_buffers; i++)
    OX_TRY(ox_ts_download(ts, d->b[i], ck->params[ts->bidx[i]], ck->names[ts->bidx[i]]));
  for (size_t i = 0; i < np * ts->n_slots; i++)
    OX_TRY(ox_ts_download(ts, d->s[i], ck->state[ts->sidx[i]], ck->state_names[ts->sidx[i]]));
  d->host_stale = false;
  return NULL;
}

/* The checkpoint's mirror_sync: device copies into the host tensors. */
static OnyxStatus* ox_ts_sync(void* ctx) {
  OnyxTrainingSession* ts = ctx;
  if (!ts->dev) return NULL;
  pthread_mutex_lock(&ts->dev->mu);
  OnyxStatus* st = ox_ts_sync_locked(ts);
  pthread_mutex_unlock(&ts->dev->mu);
  return st;
}

/* The checkpoint's mirror_stale: reload before the next step. */
static void ox_ts_stale(void* ctx) {
  OnyxTrainingSession* ts = ctx;
  if (!ts->dev) return;
  pthread_mutex_lock(&ts->dev->mu);
  ts->dev->dev_stale = true;
  pthread_mutex_unlock(&ts->dev->mu);
}

/* Loads parameters, buffers and state from the checkpoint's host tensors
 * when those are newer (the first step, a set_parameter). */
static OnyxStatus* ox_ts_dev_load(OnyxTrainingSession* ts) {
  OxTsDev* d = ts->dev;
  if (!d->dev_stale) return NULL;
  OnyxCheckpoint* ck = ts->ck;
  size_t np = ts->n_params;
  for (size_t k = 0; k < np + ts->n_buffers + np * ts->n_slots; k++) {
    bool param = k < np, buf = !param && k < np + ts->n_buffers;
    size_t i = param ? k : buf ? k - np : k - np - ts->n_buffers;
    size_t ci = param ? ts->pidx[i] : buf ? ts->bidx[i] : ts->sidx[i];
    const OxTensor* t = param || buf ? ck->params[ci] : ck->state[ci];
    const char* name = param || buf ? ck->names[ci] : ck->state_names[ci];
    /* State sits where its parameter is read. */
    const OnyxMemoryDevice* m = param ? &d->pmem[i] : buf ? &d->bmem[i] : &d->pmem[i % np];
    OnyxValue* v = NULL;
    OX_TRY(ox_ts_upload(ts, t, m, name, &v));
    OnyxValue** slot = param ? &d->p[i] : buf ? &d->b[i] : &d->s[i];
    onyx_value_release(*slot);
    *slot = v;
  }
  d->dev_stale = false;
  return NULL;
}

/* Keeps the state in device memory when the training model reads a
 * parameter or buffer there and training is not data-parallel. */
static OnyxStatus* ox_ts_dev_setup(OnyxTrainingSession* ts) {
  size_t np = ts->n_params, nb = ts->n_buffers;
  OxTsDev* d = calloc(1, sizeof *d);
  if (!d) return ox_oom();
  ts->dev = d;
  d->pmem = calloc(np + 1, sizeof *d->pmem);
  d->bmem = calloc(nb + 1, sizeof *d->bmem);
  d->gout = calloc(np + 1, sizeof *d->gout);
  d->bout = calloc(nb + 1, sizeof *d->bout);
  d->p = calloc(np + 1, sizeof *d->p);
  d->b = calloc(nb + 1, sizeof *d->b);
  d->s = calloc(np * ts->n_slots + 1, sizeof *d->s);
  d->g = calloc(np + 1, sizeof *d->g);
  if (!d->pmem || !d->bmem || !d->gout || !d->bout || !d->p || !d->b || !d->s || !d->g)
    return ox_oom();
  bool device = false, known = true;
  for (size_t i = 0; known && i < np; i++) {
    known = ox_ts_mem(ts->train, ts->ck->names[ts->pidx[i]], false, &d->pmem[i]) &&
            ox_ts_mem(ts->train, ts->train_outs[1 + i], true, &d->gout[i]);
    device = device || (known && !ox_mem_host(&d->pmem[i]));
  }
  for (size_t i = 0; known && i < nb; i++) {
    known = ox_ts_mem(ts->train, ts->ck->names[ts->bidx[i]], false, &d->bmem[i]) &&
            ox_ts_mem(ts->train, ts->train_outs[1 + np + i], true, &d->bout[i]);
    device = device || (known && !ox_mem_host(&d->bmem[i]));
  }
  /* One session per checkpoint keeps it in device memory; another one on
   * the same checkpoint runs on the host path, syncing through the mirror. */
  if (!known || !device || ts->ck->mirror) {
    ox_ts_dev_free(ts);
    return NULL;
  }
  if (pthread_mutex_init(&d->mu, NULL)) return ox_oom();
  d->mu_init = true;
  d->grads_zero = true;
  d->dev_stale = true;
  ts->ck->mirror = ts;
  ts->ck->mirror_sync = ox_ts_sync;
  ts->ck->mirror_stale = ox_ts_stale;
  return NULL;
}

/* The name arrays of the runs. */
static OnyxStatus* ox_ts_names(OnyxTrainingSession* ts, char* const* params) {
  size_t n = ts->n_params, ni = ts->n_inputs, ns = ts->n_slots, nb = ts->n_buffers;
  ts->feed_names = calloc(ni + n + nb + 2, sizeof *ts->feed_names);
  ts->feeds = calloc(ni + n + nb + 2, sizeof *ts->feeds);
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
  if (ts->has_scaler) {
    float one = 1.0f;
    OX_TRY(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, NULL, 0, &one, sizeof one, &ts->scale_val));
    ts->feed_names[ni + n + nb] = "loss_scale";
    ts->feeds[ni + n + nb] = ts->scale_val;
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
  if (!st && ts->has_scaler && !ck->has_scaler) {
    /* A checkpoint without a scaler (one saved before loss scaling was
     * chosen) starts it from the artifacts' settings. */
    ck->has_scaler = true;
    ck->loss_scale = ts->init_scale;
    ck->scale_growth_factor = ts->init_growth;
    ck->scale_backoff_factor = ts->init_backoff;
    ck->scale_growth_interval = ts->init_interval;
    ck->scale_growth_tracker = 0;
  }
  if (!st) st = ox_ts_dev_setup(ts);
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

/* The train step's loss against the non-finite policy: *finite false
 * counts a skipped batch, or is an error under ONYX_NONFINITE_ERROR. */
static OnyxStatus* ox_ts_loss_check(OnyxTrainingSession* ts, const OxTensor* loss, bool* finite) {
  *finite = ox_all_finite(loss);
  /* Under a loss scaler an overflow is expected now and then: the batch is
   * dropped and the next optimizer step skipped (ox_ts_scaler_skip). */
  if (!*finite && ts->has_scaler) {
    ts->found_inf = true;
    return NULL;
  }
  if (!*finite && ts->policy == ONYX_NONFINITE_ERROR) {
    double v = loss->type == ONYX_ELEM_FLOAT64 ? *(const double*)loss->data
                                               : (double)*(const float*)loss->data;
    return ox_status(ONYX_RUNTIME_ERROR,
                     "training session: train step: the loss is %g (the gradients were not "
                     "accumulated; onyx_training_session_set_nonfinite_policy SKIP_STEP drops such "
                     "batches instead)",
                     v);
  }
  if (!*finite) ts->skipped++;
  return NULL;
}

/* acc += g on the host (gradient i). */
static OnyxStatus* ox_ts_add(OnyxTrainingSession* ts, size_t i, OxTensor* acc, const OxTensor* g) {
  if (g->type != acc->type || g->count != acc->count)
    return ox_status(ONYX_RUNTIME_ERROR,
                     "training session: gradient '%s' has %zu elements, its parameter %zu",
                     ts->train_outs[1 + i], g->count, acc->count);
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
  return NULL;
}

/* Binds values[i] as input names[i] for i < n. */
static OnyxStatus* ox_bind_ins(OnyxIoBinding* b, const char* const* names,
                               const OnyxValue* const* values, size_t n) {
  for (size_t i = 0; i < n; i++)
    OX_TRY(onyx_io_binding_bind_input(b, names[i], values[i]));
  return NULL;
}

/* Adds one train step's gradients (any memory) to the host accumulators,
 * moving the sum of the earlier steps there first: gradient accumulation
 * over several train steps runs on the host path. */
static OnyxStatus* ox_ts_dev_acc_host(OnyxTrainingSession* ts, OnyxValue* const* grads) {
  OxTsDev* d = ts->dev;
  size_t np = ts->n_params;
  if (!d->acc_host) {
    for (size_t i = 0; i < np; i++)
      OX_TRY(ox_ts_download(ts, d->g[i], ts->gvals[i]->tensor, ts->train_outs[1 + i]));
    for (size_t i = 0; i < np; i++) {
      onyx_value_release(d->g[i]);
      d->g[i] = NULL;
    }
    d->acc_host = true;
  }
  for (size_t i = 0; i < np; i++) {
    OxTensor* acc = ts->gvals[i]->tensor;
    OxTensor* tmp = NULL;
    OX_TRY(ox_tensor_new(acc->type, acc->dims, acc->rank, &tmp));
    OnyxStatus* st = ox_ts_download(ts, grads[i], tmp, ts->train_outs[1 + i]);
    if (!st) st = ox_ts_add(ts, i, acc, tmp);
    ox_tensor_free(tmp);
    OX_TRY(st);
  }
  return NULL;
}

static OnyxStatus* ox_ts_dev_train_locked(OnyxTrainingSession* ts, const OnyxValue* const* inputs,
                                          size_t n, OnyxValue** loss_out) {
  OxTsDev* d = ts->dev;
  size_t np = ts->n_params, nb = ts->n_buffers, n_out = 1 + np + nb;
  OX_TRY(ox_ts_dev_load(ts));
  OnyxValue** outs = calloc(n_out, sizeof *outs);
  if (!outs) return ox_oom();
  OnyxIoBinding* b = NULL;
  OnyxStatus* st = onyx_io_binding_create(ts->train, &b);
  if (!st) st = ox_bind_ins(b, (const char* const*)ts->input_names, inputs, n);
  if (!st) st = ox_bind_ins(b, ts->feed_names + n, (const OnyxValue* const*)d->p, np);
  if (!st) st = ox_bind_ins(b, ts->feed_names + n + np, (const OnyxValue* const*)d->b, nb);
  if (!st && ts->has_scaler) {
    *(float*)ts->scale_val->tensor->data = ts->ck->loss_scale;
    st = onyx_io_binding_bind_input(b, "loss_scale", ts->scale_val);
  }
  /* The loss comes to the host; gradients and buffers stay where they are made. */
  if (!st) st = onyx_io_binding_bind_output_to_device(b, ts->train_outs[0], NULL);
  for (size_t i = 0; !st && i < np + nb; i++)
    st = onyx_io_binding_bind_output_to_device(b, ts->train_outs[1 + i],
                                               i < np ? &d->gout[i] : &d->bout[i - np]);
  if (!st && (st = onyx_session_run_with_binding(ts->train, NULL, b)))
    st = ox_status_wrap(st, "training session: train step");
  if (!st) st = onyx_io_binding_get_outputs(b, outs, n_out);
  onyx_io_binding_release(b);
  bool finite = false;
  if (!st) {
    ts->ck->train_steps++;
    st = ox_ts_loss_check(ts, outs[0]->tensor, &finite);
  }
  if (!st && finite) {
    if (d->grads_zero) {
      /* The first step after a reset: its gradients are the sum. */
      for (size_t i = 0; i < np; i++) {
        d->g[i] = outs[1 + i];
        outs[1 + i] = NULL;
      }
      d->grads_zero = false;
    } else {
      st = ox_ts_dev_acc_host(ts, outs + 1);
    }
  }
  /* The running statistics of a counted batch replace the buffers. */
  for (size_t i = 0; !st && finite && i < nb; i++) {
    onyx_value_release(d->b[i]);
    d->b[i] = outs[1 + np + i];
    outs[1 + np + i] = NULL;
    d->host_stale = true;
  }
  if (!st && loss_out) {
    *loss_out = outs[0];
    outs[0] = NULL;
  }
  onyx_values_release(outs, n_out);
  free(outs);
  return st;
}

/* The host path wrote the checkpoint's host tensors: a session keeping
 * them in device memory reloads them. */
static void ox_ts_host_wrote(OnyxTrainingSession* ts) {
  if (ts->ck->mirror_stale) ts->ck->mirror_stale(ts->ck->mirror);
}

ONYX_API OnyxStatus* onyx_training_session_train_step(OnyxTrainingSession* ts,
                                                      const OnyxValue* const* inputs, size_t n,
                                                      OnyxValue** loss_out) {
  if (loss_out) *loss_out = NULL;
  OX_TRY(ox_ts_feed(ts, "train_step", inputs, n));
  if (ts->dev) {
    pthread_mutex_lock(&ts->dev->mu);
    OnyxStatus* st = ox_ts_dev_train_locked(ts, inputs, n, loss_out);
    pthread_mutex_unlock(&ts->dev->mu);
    return st;
  }
  OX_TRY(ox_ckpt_sync(ts->ck));
  size_t np = ts->n_params, nb = ts->n_buffers, n_out = 1 + np + nb;
  OnyxValue** outs = calloc(n_out, sizeof *outs);
  if (!outs) return ox_oom();
  if (ts->has_scaler) *(float*)ts->scale_val->tensor->data = ts->ck->loss_scale;
  OnyxStatus* st =
      onyx_session_run(ts->train, NULL, ts->feed_names, ts->feeds, n + np + nb + ts->has_scaler,
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
  bool finite;
  st = ox_ts_loss_check(ts, outs[0]->tensor, &finite);
  for (size_t i = 0; !st && finite && i < np; i++)
    st = ox_ts_add(ts, i, ts->gvals[i]->tensor, outs[1 + i]->tensor);
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
  if (!st && finite && nb) ox_ts_host_wrote(ts);
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
  OnyxStatus* st = NULL;
  if (ts->dev) {
    /* The eval model reads the device copies where they are. */
    OxTsDev* d = ts->dev;
    OnyxIoBinding* b = NULL;
    pthread_mutex_lock(&d->mu);
    st = ox_ts_dev_load(ts);
    if (!st) st = onyx_io_binding_create(ts->eval, &b);
    if (!st) st = ox_bind_ins(b, (const char* const*)ts->input_names, inputs, n);
    if (!st) st = ox_bind_ins(b, ts->feed_names + n, (const OnyxValue* const*)d->p, ts->n_params);
    if (!st)
      st = ox_bind_ins(b, ts->feed_names + n + ts->n_params, (const OnyxValue* const*)d->b,
                       ts->n_buffers);
    if (!st) st = onyx_io_binding_bind_output_to_device(b, name, NULL);
    if (!st) st = onyx_session_run_with_binding(ts->eval, NULL, b);
    if (!st) st = onyx_io_binding_get_outputs(b, &loss, 1);
    onyx_io_binding_release(b);
    pthread_mutex_unlock(&d->mu);
  } else {
    st = ox_ckpt_sync(ts->ck);
    if (!st)
      st = onyx_session_run(ts->eval, NULL, ts->feed_names, ts->feeds,
                            n + ts->n_params + ts->n_buffers, &name, 1, &loss);
  }
  if (st) return ox_status_wrap(st, "training session: eval step");
  if (loss_out)
    *loss_out = loss;
  else
    onyx_value_release(loss);
  return NULL;
}

ONYX_API OnyxStatus* onyx_training_session_lazy_reset_grad(OnyxTrainingSession* ts) {
  if (!ts) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_training_session_lazy_reset_grad: NULL");
  ts->found_inf = false;
  if (ts->dev) {
    pthread_mutex_lock(&ts->dev->mu);
    for (size_t i = 0; i < ts->n_params; i++) {
      onyx_value_release(ts->dev->g[i]);
      ts->dev->g[i] = NULL;
    }
    ts->dev->grads_zero = true;
    ts->dev->acc_host = false;
    pthread_mutex_unlock(&ts->dev->mu);
  }
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

/* The loss scaler after a skipped optimizer step (an overflow): the scale
 * backs off and the run of good steps restarts (GradScaler.update). The
 * scale stays a normal float32 number. */
static void ox_ts_scaler_skip(OnyxTrainingSession* ts) {
  OnyxCheckpoint* ck = ts->ck;
  ts->skipped++;
  ts->found_inf = false;
  float s = ck->loss_scale * ck->scale_backoff_factor;
  ck->loss_scale = s >= 1.17549435e-38f ? s : 1.17549435e-38f;
  ck->scale_growth_tracker = 0;
}

/* The loss scaler after an optimizer step taken: growth_interval of them
 * in a row multiply the scale by the growth factor (kept finite). */
static void ox_ts_scaler_good(OnyxTrainingSession* ts) {
  OnyxCheckpoint* ck = ts->ck;
  if (!ts->has_scaler) return;
  if (++ck->scale_growth_tracker < ck->scale_growth_interval) return;
  float s = ck->loss_scale * ck->scale_growth_factor;
  if (isfinite(s)) ck->loss_scale = s;
  ck->scale_growth_tracker = 0;
}

/* Gradient i holds NaN or Inf: the step is not taken; an error, or a
 * skipped step under ONYX_NONFINITE_SKIP_STEP (NULL). */
static OnyxStatus* ox_ts_grad_nonfinite(OnyxTrainingSession* ts, size_t i) {
  if (ts->has_scaler) {
    ox_ts_scaler_skip(ts);
    return NULL;
  }
  if (ts->policy == ONYX_NONFINITE_SKIP_STEP) {
    ts->skipped++;
    return NULL;
  }
  return ox_status(ONYX_RUNTIME_ERROR,
                   "training session: optimizer step: the accumulated gradient '%s' holds NaN "
                   "or Inf (the step was not taken)",
                   ts->train_outs[1 + i]);
}

/* The first device gradient holding NaN or Inf, read through host copies
 * (*bad SIZE_MAX: none). */
static OnyxStatus* ox_ts_dev_find_nonfinite(OnyxTrainingSession* ts, size_t* bad) {
  *bad = SIZE_MAX;
  for (size_t i = 0; i < ts->n_params; i++) {
    const OxTensor* g = ts->dev->g[i]->tensor;
    OxTensor* tmp = NULL;
    OX_TRY(ox_tensor_new(g->type, g->dims, g->rank, &tmp));
    OnyxStatus* st = ox_ts_download(ts, ts->dev->g[i], tmp, ts->train_outs[1 + i]);
    bool finite = ox_all_finite(tmp);
    ox_tensor_free(tmp);
    OX_TRY(st);
    if (!finite) {
      *bad = i;
      return NULL;
    }
  }
  return NULL;
}

/* Builds the finite check over the float32 gradients in device memory
 * (d->cidx); the others are checked on the host. */
static OnyxStatus* ox_ts_dev_check_model(OnyxTrainingSession* ts) {
  OxTsDev* d = ts->dev;
  size_t np = ts->n_params;
  d->cidx = calloc(np + 1, sizeof *d->cidx);
  const int64_t** dims = calloc(np + 1, sizeof *dims);
  size_t* ranks = calloc(np + 1, sizeof *ranks);
  OnyxStatus* st = d->cidx && dims && ranks ? NULL : ox_oom();
  for (size_t i = 0; !st && i < np; i++) {
    const OxTensor* g = d->g[i]->tensor;
    if (g->type != ONYX_ELEM_FLOAT32 || ox_mem_host(&g->device)) continue;
    dims[d->n_cidx] = g->dims;
    ranks[d->n_cidx] = g->rank;
    d->cidx[d->n_cidx++] = i;
  }
  void* bytes = NULL;
  size_t len = 0;
  if (!st && d->n_cidx) st = ox_finite_check_model(d->n_cidx, dims, ranks, &bytes, &len);
  if (!st && d->n_cidx) st = onyx_session_create_from_bytes(ts->opts, bytes, len, NULL, &d->check);
  free(bytes);
  free(dims);
  free(ranks);
  /* "zero" is put once where the check reads it, so a check moves only its
   * one float out. */
  float zero = 0.0f;
  OnyxValue* z = NULL;
  OnyxMemoryDevice zm;
  if (!st && d->n_cidx)
    st = onyx_value_create_tensor(ONYX_ELEM_FLOAT32, NULL, 0, &zero, sizeof zero, &z);
  if (!st && d->n_cidx && !ox_ts_mem(d->check, "zero", false, &zm)) zm = (OnyxMemoryDevice){0};
  if (!st && d->n_cidx) st = ox_ts_upload(ts, z->tensor, &zm, "zero", &d->zero);
  onyx_value_release(z);
  if (!st) d->check_ready = true;
  return st ? ox_status_wrap(st, "training session: the gradients' finite check") : NULL;
}

/* Whether the accumulated gradients are all finite: those in host memory
 * read there, the float32 ones in device memory by ox_finite_check.h's
 * model run where they are (its one float comes to the host), others
 * through host copies. */
static OnyxStatus* ox_ts_dev_check(OnyxTrainingSession* ts, bool* finite) {
  OxTsDev* d = ts->dev;
  size_t np = ts->n_params;
  *finite = true;
  if (!d->check_ready) OX_TRY(ox_ts_dev_check_model(ts));
  for (size_t i = 0, c = 0; *finite && i < np; i++) {
    if (c < d->n_cidx && d->cidx[c] == i) {
      c++;
      continue;
    }
    const OxTensor* g = d->g[i]->tensor;
    if (ox_mem_host(&g->device)) {
      *finite = ox_all_finite(g);
      continue;
    }
    OxTensor* tmp = NULL;
    OX_TRY(ox_tensor_new(g->type, g->dims, g->rank, &tmp));
    OnyxStatus* st = ox_ts_download(ts, d->g[i], tmp, ts->train_outs[1 + i]);
    *finite = ox_all_finite(tmp);
    ox_tensor_free(tmp);
    OX_TRY(st);
  }
  if (!*finite || !d->n_cidx) return NULL;
  OnyxIoBinding* b = NULL;
  OnyxValue* bad = NULL;
  char name[32];
  OnyxStatus* st = onyx_io_binding_create(d->check, &b);
  if (!st) st = onyx_io_binding_bind_input(b, "zero", d->zero);
  for (size_t c = 0; !st && c < d->n_cidx; c++) {
    snprintf(name, sizeof name, "g%zu", c);
    st = onyx_io_binding_bind_input(b, name, d->g[d->cidx[c]]);
  }
  if (!st) st = onyx_io_binding_bind_output_to_device(b, "bad", NULL);
  if (!st) st = onyx_session_run_with_binding(d->check, NULL, b);
  if (!st) st = onyx_io_binding_get_outputs(b, &bad, 1);
  onyx_io_binding_release(b);
  if (!st) *finite = ox_all_finite(bad->tensor);
  onyx_value_release(bad);
  return st ? ox_status_wrap(st, "training session: the gradients' finite check") : NULL;
}

/* The optimizer step on the device state: parameters, gradients and state
 * are bound where they are, and the new parameters and state, made where
 * the optimizer makes them, replace them (no copy). lr, step and max_norm
 * go in from the host, the global norm comes out. */
static OnyxStatus* ox_ts_dev_optimizer_locked(OnyxTrainingSession* ts) {
  OxTsDev* d = ts->dev;
  OnyxCheckpoint* ck = ts->ck;
  size_t np = ts->n_params, ns = ts->n_slots, n_new = np * (1 + ns);
  OX_TRY(ox_ts_dev_load(ts));
  /* Gradients summed on the host (or zero) are checked there, as on the
   * host path; device gradients by ClipGradNorm's norm when the optimizer
   * has it, else by the finite check model. */
  bool dev_grads = !d->grads_zero && !d->acc_host;
  for (size_t i = 0; !dev_grads && i < np; i++)
    if (!ox_all_finite(ts->gvals[i]->tensor)) return ox_ts_grad_nonfinite(ts, i);
  if (dev_grads && !ts->has_clip) {
    bool finite;
    OX_TRY(ox_ts_dev_check(ts, &finite));
    if (!finite) {
      size_t bad;
      OX_TRY(ox_ts_dev_find_nonfinite(ts, &bad));
      if (bad != SIZE_MAX) return ox_ts_grad_nonfinite(ts, bad);
    }
  }
  if (!ts->opt) {
    OX_TRY(onyx_session_create(ts->opts, ts->opt_path, &ts->opt));
    d->oout = calloc(n_new + 1, sizeof *d->oout);
    if (!d->oout) return ox_oom();
    for (size_t k = 0; k < n_new; k++)
      if (!ox_ts_mem(ts->opt, ts->opt_outs[k], true, &d->oout[k]))
        d->oout[k] = (OnyxMemoryDevice){0};
  }
  float lr = ox_ts_lr(ck, ck->step);
  float max_norm = ts->max_norm > 0 ? ts->max_norm : INFINITY;
  int64_t step = ck->step;
  size_t k0 = 2 + (ts->has_clip ? 1 : 0);
  OnyxValue* scalars[3] = {NULL, NULL, NULL};
  OnyxValue** outs = calloc(ts->n_opt_out + 1, sizeof *outs);
  OnyxIoBinding* b = NULL;
  OnyxStatus* st = outs ? NULL : ox_oom();
  if (!st) st = onyx_value_create_tensor(ONYX_ELEM_FLOAT32, NULL, 0, &lr, sizeof lr, &scalars[0]);
  if (!st) st = onyx_value_create_tensor(ONYX_ELEM_INT64, NULL, 0, &step, sizeof step, &scalars[1]);
  if (!st && ts->has_clip)
    st = onyx_value_create_tensor(ONYX_ELEM_FLOAT32, NULL, 0, &max_norm, sizeof max_norm,
                                  &scalars[2]);
  if (!st) st = onyx_io_binding_create(ts->opt, &b);
  if (!st) st = ox_bind_ins(b, ts->opt_in_names, (const OnyxValue* const*)scalars, k0);
  for (size_t i = 0; !st && i < np; i++) {
    st = onyx_io_binding_bind_input(b, ts->opt_in_names[k0 + i], d->p[i]);
    if (!st)
      st = onyx_io_binding_bind_input(b, ts->opt_in_names[k0 + np + i],
                                      dev_grads ? d->g[i] : ts->gvals[i]);
  }
  if (!st)
    st = ox_bind_ins(b, ts->opt_in_names + k0 + 2 * np, (const OnyxValue* const*)d->s, np * ns);
  for (size_t k = 0; !st && k < ts->n_opt_out; k++)
    st = onyx_io_binding_bind_output_to_device(b, ts->opt_outs[k], k < n_new ? &d->oout[k] : NULL);
  if (!st && (st = onyx_session_run_with_binding(ts->opt, NULL, b)))
    st = ox_status_wrap(st, "training session: optimizer step");
  if (!st) st = onyx_io_binding_get_outputs(b, outs, ts->n_opt_out);
  onyx_io_binding_release(b);
  float norm = 0.0f;
  if (!st && ts->has_clip) {
    const OxTensor* tn = outs[ts->n_opt_out - 1]->tensor;
    norm = tn->type == ONYX_ELEM_FLOAT32 && tn->count ? *(const float*)tn->data : 0.0f;
  }
  /* A non-finite norm: find the gradient at fault (the norm of finite
   * gradients can overflow too); the new values are dropped if there is one. */
  size_t bad = SIZE_MAX;
  if (!st && dev_grads && ts->has_clip && !isfinite(norm)) st = ox_ts_dev_find_nonfinite(ts, &bad);
  if (!st && bad != SIZE_MAX) st = ox_ts_grad_nonfinite(ts, bad);
  if (!st && bad == SIZE_MAX) {
    for (size_t k = 0; k < n_new; k++) {
      OnyxValue** slot = k < np ? &d->p[k] : &d->s[k - np];
      onyx_value_release(*slot);
      *slot = outs[k];
      outs[k] = NULL;
    }
    d->host_stale = true;
    if (ts->has_clip) ts->last_norm = norm;
    ck->step++;
    ox_ts_scaler_good(ts);
  }
  if (outs) onyx_values_release(outs, ts->n_opt_out);
  free(outs);
  for (size_t i = 0; i < 3; i++)
    onyx_value_release(scalars[i]);
  return st;
}

ONYX_API OnyxStatus* onyx_training_session_optimizer_step(OnyxTrainingSession* ts) {
  if (!ts) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_training_session_optimizer_step: NULL");
  OnyxCheckpoint* ck = ts->ck;
  size_t np = ts->n_params;
  /* Data-parallel: ZeRO-1's sharded step, or the gradients averaged over the ranks first. */
  if (ts->dp && ox_dp_zero(ts->dp) && ts->has_scaler)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_training_session_optimizer_step: ZeRO stage 1 does not take a loss "
                     "scaler (artifacts made with loss_scaling)");
  if (ts->dp && ox_dp_zero(ts->dp))
    return ox_dp_zero_step(ts->dp, ox_ts_lr(ck, ck->step), ts->policy, &ts->skipped);
  /* A train step overflowed under the loss scaler: skip the step. */
  if (ts->has_scaler && ts->found_inf) {
    ox_ts_scaler_skip(ts);
    return NULL;
  }
  if (ts->dp) OX_TRY(ox_dp_average_grads(ts->dp));
  if (ts->dev) {
    pthread_mutex_lock(&ts->dev->mu);
    OnyxStatus* st = ox_ts_dev_optimizer_locked(ts);
    pthread_mutex_unlock(&ts->dev->mu);
    return st;
  }
  OX_TRY(ox_ckpt_sync(ck));
  for (size_t i = 0; i < np; i++) {
    if (ox_all_finite(ts->gvals[i]->tensor)) continue;
    return ox_ts_grad_nonfinite(ts, i);
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
  if (!st) ox_ts_scaler_good(ts);
  if (!st) ox_ts_host_wrote(ts);
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

ONYX_API float onyx_training_session_get_loss_scale(const OnyxTrainingSession* ts) {
  return ts && ts->has_scaler ? ts->ck->loss_scale : 0.0f;
}

ONYX_API int64_t onyx_training_session_loss_scale_growth_tracker(const OnyxTrainingSession* ts) {
  return ts && ts->has_scaler ? ts->ck->scale_growth_tracker : 0;
}

ONYX_API OnyxStatus* onyx_training_session_set_loss_scaler(OnyxTrainingSession* ts, float scale,
                                                           float growth_factor,
                                                           float backoff_factor,
                                                           int64_t growth_interval) {
  if (!ts) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_training_session_set_loss_scaler: NULL");
  if (!ts->has_scaler)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_training_session_set_loss_scaler: the artifacts were generated without "
                     "loss_scaling");
  if (!(scale > 0) || !isfinite(scale) || !(growth_factor >= 1) || !isfinite(growth_factor) ||
      !(backoff_factor > 0) || !(backoff_factor <= 1) || growth_interval < 1)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_training_session_set_loss_scaler: scale %g, growth_factor %g, "
                     "backoff_factor %g, growth_interval %lld (need scale > 0, growth_factor >= "
                     "1, 0 < backoff_factor <= 1, growth_interval >= 1)",
                     (double)scale, (double)growth_factor, (double)backoff_factor,
                     (long long)growth_interval);
  OnyxCheckpoint* ck = ts->ck;
  ck->loss_scale = scale;
  ck->scale_growth_factor = growth_factor;
  ck->scale_backoff_factor = backoff_factor;
  ck->scale_growth_interval = growth_interval;
  ck->scale_growth_tracker = 0;
  return NULL;
}

ONYX_API OnyxStatus* onyx_training_session_export_for_inference(const OnyxTrainingSession* ts,
                                                                const char* out_path) {
  if (!ts || !out_path)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_training_session_export_for_inference: NULL");
  OX_TRY(ox_ckpt_sync(ts->ck));
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
  if (o && o->struct_size >= sizeof *o && o->zero_stage == 1 && ts->has_scaler)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_training_session_set_data_parallel: ZeRO stage 1 does not take a loss "
                     "scaler (artifacts made with loss_scaling)");
  /* Data-parallel training runs on the host path: the state and a device
   * gradient sum come back to the host tensors the ranks share. */
  if (ts->dev) {
    OxTsDev* d = ts->dev;
    OX_TRY(ox_ts_sync(ts));
    for (size_t i = 0; !d->grads_zero && !d->acc_host && i < ts->n_params; i++)
      OX_TRY(ox_ts_download(ts, d->g[i], ts->gvals[i]->tensor, ts->train_outs[1 + i]));
    ox_ts_dev_free(ts);
  }
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
