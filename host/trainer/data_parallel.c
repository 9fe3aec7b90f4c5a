/* data_parallel.c — data-parallel training (ox_data_parallel.h,
 * docs/distributed.md): averages of the loss and gradients across the ranks
 * of a process group (onyx_distributed.h), and ZeRO stage 1.
 *
 * Gradients are averaged in one of two places:
 * - in the training graph (the default): the gradient outputs, in reverse
 *   parameter order (about the order the backward pass completes them),
 *   are grouped into buckets of bucket_bytes; each bucket is flattened
 *   (Reshape to 1-D, Concat), averaged by one com.onyx.collective
 *   AllReduce(avg) and cut back (Split, Reshape) into the gradient outputs,
 *   so every train step returns averaged gradients (and accumulation sums
 *   averages);
 * - on the host (allreduce_in_graph 0): between the train step and the
 *   optimizer step the accumulators, flattened in parameter order, are cut
 *   into buckets of bucket_bytes, each summed over the ranks with one
 *   all-reduce and scaled by 1/N.
 *
 * ZeRO-1 flattens the T trainable elements into a vector padded to N*S
 * (S = ceil(T/N)); rank r owns elements [rS, (r+1)S). A step reduce-scatters
 * the flattened gradients (rank r receives the sum of its slice), scales by
 * 1/N, updates its slice of the parameters with its slice of the optimizer
 * state through an optimizer model made for one 1-D tensor of S elements
 * (the artifacts' optimizer op and attributes; SGD and AdamW update each
 * element independently, so the slice's update equals the full update's
 * restricted to it), then all-gathers the parameters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "onyx/onyx_distributed.h"
#include "ox_checked.h"
#include "ox_data_parallel.h"
#include "ox_graph.h"
#include "ox_model.h"
#include "ox_training.h"

/* The default bucket: 25 MiB, as PyTorch's DistributedDataParallel. */
#define OX_DP_BUCKET_DEFAULT ((size_t)25 << 20)
#define OX_DP_COLLECTIVE     "com.onyx.collective"

struct OxDataParallel {
  OxDpBind b;
  OnyxProcessGroup* pg;
  int rank, size;
  int32_t zero;
  size_t bucket_bytes;
  bool in_graph;     /* the gradients are averaged in the training graph */
  OnyxElemType type; /* of every trainable parameter */
  size_t esize;      /* its element size */
  size_t total;      /* trainable elements */
  void* bucket;      /* bucket_bytes */
  /* ZeRO-1 */
  size_t shard;  /* S */
  void* flat;    /* N*S elements: gradients, then gathered parameters */
  OnyxValue* p;  /* this rank's slice of the parameters [S] */
  OnyxValue* g;  /* its slice of the averaged gradients [S] */
  OnyxValue** s; /* its slices of the state, one per slot [S] */
  OnyxSession* opt;
  char** ins; /* the optimizer's input names */
  const OnyxValue** feeds;
  char** out_names;
  size_t n_in, n_out;
};

ONYX_API void onyx_data_parallel_options_init(OnyxDataParallelOptions* o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->bucket_bytes = OX_DP_BUCKET_DEFAULT;
  o->allreduce_in_graph = 1;
}

static void ox_dp_free_strs(char** s, size_t n) {
  for (size_t i = 0; s && i < n; i++)
    free(s[i]);
  free(s);
}

void ox_dp_free(OxDataParallel* dp) {
  if (!dp) return;
  free(dp->bucket);
  free(dp->flat);
  onyx_value_release(dp->p);
  onyx_value_release(dp->g);
  if (dp->s) onyx_values_release(dp->s, dp->b.n_slots);
  free(dp->s);
  onyx_session_release(dp->opt);
  ox_dp_free_strs(dp->ins, dp->n_in);
  free(dp->feeds);
  ox_dp_free_strs(dp->out_names, dp->n_out);
  free(dp);
}

bool ox_dp_zero(const OxDataParallel* dp) {
  return dp && dp->zero == 1;
}

static OxTensor* ox_dp_param(const OxDataParallel* dp, size_t i) {
  return dp->b.ck->params[dp->b.pidx[i]];
}

static OxTensor* ox_dp_state(const OxDataParallel* dp, size_t slot, size_t i) {
  return dp->b.ck->state[dp->b.sidx[slot * dp->b.n_params + i]];
}

static OnyxStatus* ox_dp_err(OnyxStatus* st, const char* what) {
  return st ? ox_status_wrap(st, "data-parallel training: %s", what) : NULL;
}

/* Multiplies n elements of buf by 1/size. */
static void ox_dp_scale(const OxDataParallel* dp, void* buf, size_t n) {
  if (dp->size == 1) return;
  if (dp->type == ONYX_ELEM_FLOAT64) {
    double* d = buf;
    double f = 1.0 / (double)dp->size;
    for (size_t i = 0; i < n; i++)
      d[i] *= f;
  } else {
    float* d = buf;
    float f = 1.0f / (float)dp->size;
    for (size_t i = 0; i < n; i++)
      d[i] *= f;
  }
}

/* Copies the flattened elements [off, off + n) of the tensors `get` names
 * (parameter i's tensor of kind k: 0 gradients, 1 parameters, 2 + s state
 * slot s) to buf (out 1) or from buf (out 0). */
static void ox_dp_flat_copy(const OxDataParallel* dp, int kind, size_t off, size_t n, void* buf,
                            bool to_buf) {
  size_t pos = 0;
  unsigned char* c = buf;
  for (size_t i = 0; i < dp->b.n_params && n; i++) {
    OxTensor* t = kind == 0   ? dp->b.gvals[i]->tensor
                  : kind == 1 ? ox_dp_param(dp, i)
                              : ox_dp_state(dp, (size_t)(kind - 2), i);
    size_t cnt = t->count;
    if (off >= pos + cnt) {
      pos += cnt;
      continue;
    }
    size_t from = off > pos ? off - pos : 0, take = cnt - from;
    if (take > n) take = n;
    unsigned char* p = (unsigned char*)t->data + from * dp->esize;
    if (to_buf)
      memcpy(c, p, take * dp->esize);
    else
      memcpy(p, c, take * dp->esize);
    c += take * dp->esize;
    off += take;
    n -= take;
    pos += cnt;
  }
}

/* --- creation ----------------------------------------------------------------------------- */

/* Every rank must train the same parameters with the same options: each
 * compares its parameter count, element count, state tensors, element type,
 * zero stage, gradient path and bucket size with rank 0's; a mismatch names
 * the first differing rank on every rank, before any broadcast could mix
 * unequal buffers. */
static OnyxStatus* ox_dp_check_world(OxDataParallel* dp) {
  enum { K = 7 };
  int64_t mine[K] = {(int64_t)dp->b.n_params,  (int64_t)dp->total, (int64_t)dp->b.ck->n_state,
                     (int64_t)dp->type,        (int64_t)dp->zero,  (int64_t)dp->in_graph,
                     (int64_t)dp->bucket_bytes};
  int64_t* all = calloc((size_t)dp->size * K, sizeof *all);
  if (!all) return ox_oom();
  OnyxStatus* st = ox_dp_err(onyx_process_group_all_gather(dp->pg, mine, all, K, ONYX_ELEM_INT64),
                             "comparing the ranks' models and options");
  for (int r = 1; !st && r < dp->size; r++) {
    const int64_t* o = all + (size_t)r * K;
    if (!memcmp(all, o, K * sizeof *all)) continue;
    st = ox_status(ONYX_INVALID_ARGUMENT,
                   "data-parallel training: rank %d trains %lld parameters (%lld elements, %lld "
                   "state tensors, %s, zero_stage %lld, gradients averaged %s, buckets of %lld "
                   "bytes), rank 0 %lld (%lld, %lld, %s, zero_stage %lld, %s, %lld bytes): every "
                   "rank must use the same model, optimizer and options",
                   r, (long long)o[0], (long long)o[1], (long long)o[2],
                   onyx_elem_type_name((OnyxElemType)o[3]), (long long)o[4],
                   o[5] ? "in the graph" : "on the host", (long long)o[6], (long long)all[0],
                   (long long)all[1], (long long)all[2], onyx_elem_type_name((OnyxElemType)all[3]),
                   (long long)all[4], all[5] ? "in the graph" : "on the host", (long long)all[6]);
  }
  free(all);
  return st;
}

/* Broadcasts every parameter, buffer and state tensor of the checkpoint, and
 * its step count, from rank 0. */
static OnyxStatus* ox_dp_broadcast(OxDataParallel* dp) {
  OnyxCheckpoint* ck = dp->b.ck;
  for (size_t k = 0; k < ck->n_params; k++)
    if (ck->params[k]->bytes)
      OX_TRY(ox_dp_err(
          onyx_process_group_broadcast(dp->pg, ck->params[k]->data, ck->params[k]->bytes, 0),
          "broadcasting the parameters from rank 0"));
  for (size_t k = 0; k < ck->n_state; k++)
    if (ck->state[k]->bytes)
      OX_TRY(ox_dp_err(
          onyx_process_group_broadcast(dp->pg, ck->state[k]->data, ck->state[k]->bytes, 0),
          "broadcasting the optimizer state from rank 0"));
  int64_t step[2] = {ck->step, ck->train_steps};
  return ox_dp_err(onyx_process_group_broadcast(dp->pg, step, sizeof step, 0),
                   "broadcasting the step count from rank 0");
}

static OnyxStatus* ox_dp_input(OxGraph* g, const char* name, OnyxElemType type, int32_t rank,
                               const int64_t* dims) {
  OxValue* v = NULL;
  OX_TRY(ox_graph_value(g, name, &v));
  OX_TRY(ox_value_set(v, type, rank, dims));
  return ox_graph_add_input(g, v);
}

static OnyxStatus* ox_dp_output(OxGraph* g, const char* name, OnyxElemType type,
                                const int64_t* dims) {
  OxValue* v = ox_graph_find(g, name);
  if (!v) return ox_status(ONYX_FAIL, "data-parallel training: no value '%s'", name);
  OX_TRY(ox_value_set(v, type, 1, dims));
  return ox_graph_add_output(g, v);
}

/* A new empty temporary file "<TMPDIR>/<stem>-XXXXXX.onnx"; path "" on error. */
static OnyxStatus* ox_dp_temp_path(char* path, size_t len, const char* stem) {
  const char* tmp = getenv("TMPDIR");
  snprintf(path, len, "%s/%s-XXXXXX.onnx", tmp && *tmp && strlen(tmp) < 60 ? tmp : "/tmp", stem);
  int fd = mkstemps(path, 5);
  if (fd < 0) {
    OnyxStatus* st = ox_status(ONYX_FAIL, "cannot create a temporary file %s", path);
    path[0] = '\0';
    return st;
  }
  close(fd);
  return NULL;
}

/* Deep copy of an attribute of a scalar or list kind (the optimizer's). */
static OnyxStatus* ox_dp_attr_copy(OxNode* n, const OxAttr* a) {
  OxAttr c = {.name = ox_strdup(a->name), .type = a->type, .i = a->i, .f = a->f};
  if (!c.name) return ox_oom();
  OnyxStatus* st = NULL;
  if (a->type == ONYX_ATTR_STRING) {
    c.s = malloc(a->s_len + 1);
    if (!c.s)
      st = ox_oom();
    else {
      memcpy(c.s, a->s, a->s_len + 1);
      c.s_len = a->s_len;
    }
  } else if (a->type != ONYX_ATTR_INT && a->type != ONYX_ATTR_FLOAT) {
    st = ox_status(ONYX_NOT_IMPLEMENTED,
                   "data-parallel training: ZeRO-1: optimizer attribute '%s' has a kind the "
                   "sharded optimizer does not copy",
                   a->name);
  }
  if (!st) st = ox_node_add_attr(n, &c);
  ox_attr_clear(&c);
  return st;
}

/* The optimizer model of the artifacts, rewritten for one parameter: this
 * rank's 1-D slice "p" of S elements, its gradient "p_grad" and its state
 * "p.<slot>"; outputs "p.new" and "p.<slot>.new". Written to a temporary
 * file the session is made from (removed afterwards). */
static OnyxStatus* ox_dp_zero_session(OxDataParallel* dp, char* const* slot_names) {
  OxGraph* src = NULL;
  OX_TRY(ox_model_load_file(dp->b.opt_path, NULL, &src));
  const OxNode* op = NULL;
  for (size_t i = 0; i < src->n_nodes; i++)
    if (!strcmp(src->nodes[i]->domain, OX_TRAINING_DOMAIN)) op = src->nodes[i];
  OnyxStatus* st = NULL;
  if (!op || src->n_nodes != 1)
    st = ox_status(ONYX_INVALID_MODEL,
                   "ZeRO-1 needs an optimizer model of one optimizer "
                   "node (%s has %zu nodes)",
                   dp->b.opt_path, src->n_nodes);
  else if (strcmp(op->op_type, "SGDOptimizer") && strcmp(op->op_type, "AdamWOptimizer"))
    st = ox_status(ONYX_NOT_IMPLEMENTED,
                   "ZeRO-1 supports the SGD and AdamW optimizers, whose "
                   "update is per element; %s's per-tensor trust ratio needs whole tensors",
                   op->op_type);
  OxGraph* g = NULL;
  if (!st) st = ox_graph_new("optimizer_zero1", &g);
  size_t ns = dp->b.n_slots;
  dp->n_in = 4 + ns;
  dp->n_out = 1 + ns;
  char** ins = dp->ins = calloc(dp->n_in, sizeof *ins);
  dp->out_names = calloc(dp->n_out, sizeof *dp->out_names);
  dp->feeds = calloc(dp->n_in, sizeof *dp->feeds);
  if (!st && (!ins || !dp->out_names || !dp->feeds)) st = ox_oom();
  if (!st) {
    g->ir_version = src->ir_version;
    g->opsets = calloc(src->n_opsets ? src->n_opsets : 1, sizeof *g->opsets);
    if (!g->opsets) st = ox_oom();
    for (size_t i = 0; !st && i < src->n_opsets; i++) {
      g->opsets[i].version = src->opsets[i].version;
      if (!(g->opsets[i].domain = ox_strdup(src->opsets[i].domain))) st = ox_oom();
      g->n_opsets++;
    }
  }
  if (!st) {
    ins[0] = ox_strdup("lr");
    ins[1] = ox_strdup("step");
    ins[2] = ox_strdup("p");
    ins[3] = ox_strdup("p_grad");
    dp->out_names[0] = ox_strdup("p.new");
    for (size_t s = 0; s < ns; s++) {
      ins[4 + s] = ox_asprintf("p.%s", slot_names[s]);
      dp->out_names[1 + s] = ox_asprintf("p.%s.new", slot_names[s]);
    }
    for (size_t i = 0; i < dp->n_in; i++)
      if (!ins[i]) st = ox_oom();
    for (size_t i = 0; i < dp->n_out; i++)
      if (!dp->out_names[i]) st = ox_oom();
  }
  int64_t dims[1] = {(int64_t)dp->shard};
  if (!st) st = ox_dp_input(g, "lr", ONYX_ELEM_FLOAT32, 0, NULL);
  if (!st) st = ox_dp_input(g, "step", ONYX_ELEM_INT64, 0, NULL);
  for (size_t i = 2; !st && i < dp->n_in; i++)
    st = ox_dp_input(g, ins[i], dp->type, 1, dims);
  OxNode* node = NULL;
  if (!st)
    st = ox_graph_add_node(g, "onyx_optimizer_zero1", op->op_type, op->domain,
                           (const char* const*)ins, dp->n_in, (const char* const*)dp->out_names,
                           dp->n_out, &node);
  for (size_t i = 0; !st && i < op->n_attrs; i++) {
    const OxAttr* a = &op->attrs[i];
    if (!strcmp(a->name, "n"))
      st = ox_node_add_attr(node, &(OxAttr){.name = ox_strdup("n"), .type = ONYX_ATTR_INT, .i = 1});
    else
      st = ox_dp_attr_copy(node, a);
  }
  for (size_t i = 0; !st && i < dp->n_out; i++)
    st = ox_dp_output(g, dp->out_names[i], dp->type, dims);
  char path[96] = "";
  if (!st) st = ox_dp_temp_path(path, sizeof path, "onyx-zero1");
  if (!st) st = ox_model_save(g, path);
  if (!st) st = onyx_session_create(dp->b.opts, path, &dp->opt);
  if (path[0]) remove(path);
  ox_graph_free(g);
  ox_graph_free(src);
  return ox_dp_err(st, "making the ZeRO-1 optimizer");
}

static OnyxStatus* ox_dp_vec(OxDataParallel* dp, OnyxValue** out) {
  int64_t dims[1] = {(int64_t)dp->shard};
  OxTensor* t = NULL;
  OX_TRY(ox_tensor_new(dp->type, dims, 1, &t));
  OnyxValue* v = malloc(sizeof *v);
  if (!v) {
    ox_tensor_free(t);
    return ox_oom();
  }
  v->tensor = t;
  *out = v;
  return NULL;
}

/* The slot names ("exp_avg") from the checkpoint state names of parameter 0
 * ("<param>.<slot>"). */
static OnyxStatus* ox_dp_slot_names(const OxDataParallel* dp, char*** out) {
  char** s = calloc(dp->b.n_slots + 1, sizeof *s);
  if (!s) return ox_oom();
  const char* p0 = dp->b.ck->names[dp->b.pidx[0]];
  size_t len = strlen(p0);
  for (size_t k = 0; k < dp->b.n_slots; k++) {
    const char* full = dp->b.ck->state_names[dp->b.sidx[k * dp->b.n_params]];
    if (strncmp(full, p0, len) || full[len] != '.' || !(s[k] = ox_strdup(full + len + 1))) {
      ox_dp_free_strs(s, k);
      return ox_status(ONYX_FAIL, "data-parallel training: state '%s' is not named '%s.<slot>'",
                       full, p0);
    }
  }
  *out = s;
  return NULL;
}

static OnyxStatus* ox_dp_zero_init(OxDataParallel* dp) {
  if (dp->b.has_clip)
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "data-parallel training: ZeRO-1 with gradient clipping (the artifacts' "
                     "clip_grad_norm) is not supported: make the artifacts without it");
  size_t n = (size_t)dp->size, padded = 0;
  dp->shard = (dp->total + n - 1) / n;
  size_t bytes = 0;
  if (!ox_mul_size(dp->shard, n, &padded) || !ox_mul_size(padded, dp->esize, &bytes))
    return ox_status(ONYX_INVALID_ARGUMENT, "data-parallel training: %zu parameters overflow",
                     dp->total);
  dp->flat = calloc(padded ? padded : 1, dp->esize);
  dp->s = calloc(dp->b.n_slots + 1, sizeof *dp->s);
  if (!dp->flat || !dp->s) return ox_oom();
  OX_TRY(ox_dp_vec(dp, &dp->p));
  OX_TRY(ox_dp_vec(dp, &dp->g));
  size_t off = (size_t)dp->rank * dp->shard;
  size_t have = off < dp->total ? dp->total - off : 0;
  if (have > dp->shard) have = dp->shard;
  for (size_t s = 0; s < dp->b.n_slots; s++) {
    OX_TRY(ox_dp_vec(dp, &dp->s[s]));
    /* This rank's slice of the (broadcast) state; the padding stays zero. */
    ox_dp_flat_copy(dp, 2 + (int)s, off, have, dp->s[s]->tensor->data, true);
  }
  char** slots = NULL;
  OX_TRY(ox_dp_slot_names(dp, &slots));
  OnyxStatus* st = ox_dp_zero_session(dp, slots);
  ox_dp_free_strs(slots, dp->b.n_slots);
  if (st) return st;
  dp->feeds[2] = dp->p;
  dp->feeds[3] = dp->g;
  for (size_t s = 0; s < dp->b.n_slots; s++)
    dp->feeds[4 + s] = dp->s[s];
  return NULL;
}

/* --- the gradient all-reduce in the training graph ------------------------------------------ */

/* A new value `base` + suffix, created empty. */
static OnyxStatus* ox_dp_value(OxGraph* g, const char* base, const char* suffix, OxValue** out) {
  char* name = ox_asprintf("%s%s", base, suffix);
  if (!name) return ox_oom();
  OnyxStatus* st = ox_graph_find(g, name)
                       ? ox_status(ONYX_INVALID_MODEL,
                                   "data-parallel training: the training model already has a "
                                   "value '%s'",
                                   name)
                       : ox_graph_value(g, name, out);
  free(name);
  return st;
}

static OnyxStatus* ox_dp_ints(OxGraph* g, const char* base, const char* suffix, const int64_t* v,
                              size_t n, OxValue** out) {
  OX_TRY(ox_dp_value(g, base, suffix, out));
  int64_t dims[1] = {(int64_t)n};
  OxTensor* t = NULL;
  OX_TRY(ox_tensor_new(ONYX_ELEM_INT64, dims, 1, &t));
  if (n) memcpy(t->data, v, n * sizeof *v);
  (*out)->constant = t;
  return ox_value_set(*out, ONYX_ELEM_INT64, 1, dims);
}

static OnyxStatus* ox_dp_add(OxGraph* g, const char* op, const char* domain, const char* const* ins,
                             size_t n_in, const char* const* outs, size_t n_out, OxNode** out) {
  OxNode* n = NULL;
  OnyxStatus* st = ox_graph_add_node(g, NULL, op, domain, ins, n_in, outs, n_out, &n);
  if (st) return ox_status_wrap(st, "data-parallel training: adding %s", op);
  if (out) *out = n;
  return NULL;
}

/* Bucket k of gradients i in [lo, hi) (reverse parameter order, so hi > lo
 * means parameters hi-1 down to lo): their Gradient outputs are renamed
 * "<grad>/local" and the outputs "<grad>" become the averaged ones. */
static OnyxStatus* ox_dp_bucket(OxDataParallel* dp, OxGraph* g, size_t k, size_t lo, size_t hi) {
  size_t n = hi - lo;
  char** flat = calloc(n, sizeof *flat);
  char** avg = calloc(n, sizeof *avg);
  int64_t* sizes = calloc(n, sizeof *sizes);
  char* bname = ox_asprintf("onyx_dp_bucket%zu", k);
  OnyxStatus* st = flat && avg && sizes && bname ? NULL : ox_oom();
  int64_t opset = ox_graph_opset(g, "");
  const int64_t minus1[1] = {-1};
  OxValue* v_flat_shape = NULL;
  if (!st) st = ox_dp_ints(g, bname, "/flat_shape", minus1, 1, &v_flat_shape);
  for (size_t j = 0; !st && j < n; j++) {
    size_t i = hi - 1 - j;
    const OxTensor* p = ox_dp_param(dp, i);
    const char* gname = dp->b.grad_names[i];
    OxValue* out = ox_graph_find(g, gname);
    if (!out || !out->producer || !out->is_graph_output) {
      st = ox_status(ONYX_INVALID_MODEL,
                     "data-parallel training: the training model has no gradient output '%s'",
                     gname);
      break;
    }
    OxValue* local = NULL;
    st = ox_dp_value(g, gname, "/local", &local);
    if (st) break;
    /* The Gradient node now writes "<grad>/local"; "<grad>" is made below. */
    OxNode* prod = out->producer;
    int32_t slot = out->producer_slot;
    prod->outputs[slot] = local;
    local->producer = prod;
    local->producer_slot = slot;
    out->producer = NULL;
    flat[j] = ox_asprintf("%s/flat", gname);
    avg[j] = ox_asprintf("%s/avg", gname);
    if (!flat[j] || !avg[j]) {
      st = ox_oom();
      break;
    }
    sizes[j] = (int64_t)p->count;
    const char* ins[2] = {local->name, v_flat_shape->name};
    const char* outs[1] = {flat[j]};
    st = ox_dp_add(g, "Reshape", "", ins, 2, outs, 1, NULL);
    OxValue* shape = NULL;
    if (!st) st = ox_dp_ints(g, gname, "/shape", p->dims, p->rank, &shape);
    const char* ins2[2] = {avg[j], shape ? shape->name : ""};
    const char* outs2[1] = {gname};
    if (!st) st = ox_dp_add(g, "Reshape", "", ins2, 2, outs2, 1, NULL);
  }
  char* cat = bname ? ox_asprintf("%s/concat", bname) : NULL;
  char* red = bname ? ox_asprintf("%s/avg", bname) : NULL;
  if (!st && (!cat || !red)) st = ox_oom();
  OxNode* node = NULL;
  if (!st)
    st = ox_dp_add(g, "Concat", "", (const char* const*)flat, n, (const char**)&cat, 1, &node);
  if (!st) {
    OxAttr a = {.name = ox_strdup("axis"), .type = ONYX_ATTR_INT, .i = 0};
    st = a.name ? ox_node_add_attr(node, &a) : ox_oom();
    ox_attr_clear(&a);
  }
  const char* ar_in[1] = {cat};
  if (!st) st = ox_dp_add(g, "AllReduce", OX_DP_COLLECTIVE, ar_in, 1, (const char**)&red, 1, &node);
  if (!st) {
    OxAttr a = {
        .name = ox_strdup("reduce"), .type = ONYX_ATTR_STRING, .s = ox_strdup("avg"), .s_len = 3};
    st = a.name && a.s ? ox_node_add_attr(node, &a) : ox_oom();
    ox_attr_clear(&a);
  }
  if (!st) {
    OxAttr a = {.name = ox_strdup("group_size"), .type = ONYX_ATTR_INT, .i = dp->size};
    st = a.name ? ox_node_add_attr(node, &a) : ox_oom();
    ox_attr_clear(&a);
  }
  /* Split back: sizes as an input from opset 13, as an attribute before. */
  OxValue* v_sizes = NULL;
  if (!st && opset >= 13) st = ox_dp_ints(g, bname, "/sizes", sizes, n, &v_sizes);
  const char* sp_in[2] = {red, v_sizes ? v_sizes->name : ""};
  if (!st)
    st = ox_dp_add(g, "Split", "", sp_in, v_sizes ? 2 : 1, (const char* const*)avg, n, &node);
  if (!st) {
    OxAttr a = {.name = ox_strdup("axis"), .type = ONYX_ATTR_INT, .i = 0};
    st = a.name ? ox_node_add_attr(node, &a) : ox_oom();
    ox_attr_clear(&a);
  }
  if (!st && opset < 13) {
    OxAttr a = {.name = ox_strdup("split"), .type = ONYX_ATTR_INTS, .count = n};
    a.ints = malloc(n * sizeof *a.ints);
    if (a.ints) memcpy(a.ints, sizes, n * sizeof *sizes);
    st = a.name && a.ints ? ox_node_add_attr(node, &a) : ox_oom();
    ox_attr_clear(&a);
  }
  ox_dp_free_strs(flat, n);
  ox_dp_free_strs(avg, n);
  free(sizes);
  free(bname);
  free(cat);
  free(red);
  return st;
}

/* Rewrites the training model with the bucketed AllReduce nodes and
 * replaces the session's training session by one over it, made with the
 * process group. */
static OnyxStatus* ox_dp_graph_grads(OxDataParallel* dp) {
  const char* slash = strrchr(dp->b.opt_path, '/');
  char* train_path =
      ox_asprintf("%.*s/training_model.onnx", slash ? (int)(slash - dp->b.opt_path) : 1,
                  slash ? dp->b.opt_path : ".");
  if (!train_path) return ox_oom();
  OxGraph* g = NULL;
  OnyxStatus* st = ox_model_load_file(train_path, NULL, &g);
  free(train_path);
  if (st) return ox_dp_err(st, "reading the training model");
  if (ox_graph_opset(g, OX_DP_COLLECTIVE) < 0) {
    OxOpsetImport* ops = realloc(g->opsets, (g->n_opsets + 1) * sizeof *ops);
    if (!ops)
      st = ox_oom();
    else {
      g->opsets = ops;
      ops[g->n_opsets].version = 1;
      if (!(ops[g->n_opsets].domain = ox_strdup(OX_DP_COLLECTIVE)))
        st = ox_oom();
      else
        g->n_opsets++;
    }
  }
  /* Buckets in reverse parameter order, each up to bucket_bytes (at least
   * one gradient). */
  size_t hi = dp->b.n_params, k = 0;
  while (!st && hi > 0) {
    size_t lo = hi - 1, bytes = ox_dp_param(dp, lo)->bytes;
    while (lo > 0 && bytes + ox_dp_param(dp, lo - 1)->bytes <= dp->bucket_bytes)
      bytes += ox_dp_param(dp, --lo)->bytes;
    st = ox_dp_bucket(dp, g, k++, lo, hi);
    hi = lo;
  }
  char path[96] = "";
  if (!st) st = ox_dp_temp_path(path, sizeof path, "onyx-dp-train");
  if (!st) st = ox_model_save(g, path);
  ox_graph_free(g);
  OnyxSessionOptions* so = NULL;
  if (!st)
    st = dp->b.opts ? ox_session_options_clone(dp->b.opts, &so) : onyx_session_options_create(&so);
  if (!st) st = onyx_session_options_set_process_group(so, dp->pg);
  OnyxSession* train = NULL;
  if (!st) st = onyx_session_create(so, path, &train);
  if (path[0]) remove(path);
  onyx_session_options_release(so);
  if (st) return ox_dp_err(st, "the training model with the gradient all-reduce");
  onyx_session_release(*dp->b.train);
  *dp->b.train = train;
  return NULL;
}

OnyxStatus* ox_dp_create(const OnyxDataParallelOptions* o, const OxDpBind* b,
                         OxDataParallel** out) {
  *out = NULL;
  if (!o || o->struct_size < sizeof *o || !o->process_group)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_training_session_set_data_parallel: %s",
                     !o ? "NULL options"
                     : o->struct_size < sizeof *o
                         ? "options not made by onyx_data_parallel_options_init (struct_size)"
                         : "no process_group");
  if (o->zero_stage != 0 && o->zero_stage != 1)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_training_session_set_data_parallel: zero_stage %d (0 or 1)",
                     (int)o->zero_stage);
  if (!b->n_params)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "data-parallel training: the training model has no trainable parameter");
  OxDataParallel* dp = calloc(1, sizeof *dp);
  if (!dp) return ox_oom();
  dp->b = *b;
  dp->pg = o->process_group;
  dp->rank = onyx_process_group_rank(dp->pg);
  dp->size = onyx_process_group_size(dp->pg);
  dp->zero = o->zero_stage;
  dp->type = ox_dp_param(dp, 0)->type;
  OnyxStatus* st = NULL;
  if (dp->size < 1 || dp->rank < 0 || dp->rank >= dp->size)
    st = ox_status(ONYX_INVALID_ARGUMENT, "data-parallel training: rank %d of a world of %d",
                   dp->rank, dp->size);
  if (!st && dp->type != ONYX_ELEM_FLOAT32 && dp->type != ONYX_ELEM_FLOAT64)
    st = ox_status(ONYX_NOT_IMPLEMENTED,
                   "data-parallel training: parameter '%s' is %s; gradients are averaged in "
                   "float32 or float64",
                   dp->b.ck->names[dp->b.pidx[0]], onyx_elem_type_name(dp->type));
  dp->esize = dp->type == ONYX_ELEM_FLOAT64 ? 8 : 4;
  for (size_t i = 0; !st && i < b->n_params; i++) {
    const OxTensor* t = ox_dp_param(dp, i);
    if (t->type != dp->type)
      st = ox_status(ONYX_NOT_IMPLEMENTED,
                     "data-parallel training: parameter '%s' is %s and '%s' %s: the flattened "
                     "gradients need one element type",
                     dp->b.ck->names[dp->b.pidx[i]], onyx_elem_type_name(t->type),
                     dp->b.ck->names[dp->b.pidx[0]], onyx_elem_type_name(dp->type));
    else if (!ox_add_size(dp->total, t->count, &dp->total))
      st = ox_status(ONYX_INVALID_ARGUMENT, "data-parallel training: parameter count overflows");
  }
  dp->bucket_bytes = o->bucket_bytes ? o->bucket_bytes : OX_DP_BUCKET_DEFAULT;
  if (!st && dp->bucket_bytes < dp->esize)
    st = ox_status(ONYX_INVALID_ARGUMENT,
                   "data-parallel training: bucket_bytes %zu is less than one element",
                   dp->bucket_bytes);
  dp->bucket_bytes -= dp->bucket_bytes % dp->esize;
  dp->in_graph = dp->zero == 0 && o->allreduce_in_graph && dp->size > 1;
  if (!st && dp->zero == 0 && !dp->in_graph) {
    size_t need = dp->total * dp->esize;
    if (dp->bucket_bytes > need) dp->bucket_bytes = need ? need : dp->esize;
    if (!(dp->bucket = malloc(dp->bucket_bytes))) st = ox_oom();
  }
  if (!st) st = ox_dp_check_world(dp);
  if (!st) st = ox_dp_broadcast(dp);
  if (!st && dp->zero == 1) st = ox_dp_zero_init(dp);
  if (!st && dp->in_graph) st = ox_dp_graph_grads(dp);
  if (st) {
    ox_dp_free(dp);
    return st;
  }
  *out = dp;
  return NULL;
}

/* --- steps -------------------------------------------------------------------------------- */

OnyxStatus* ox_dp_loss(OxDataParallel* dp, OxTensor* loss) {
  if (loss->count != 1 || (loss->type != ONYX_ELEM_FLOAT32 && loss->type != ONYX_ELEM_FLOAT64))
    return ox_status(ONYX_RUNTIME_ERROR,
                     "data-parallel training: the loss is no float32/float64 scalar");
  OX_TRY(
      ox_dp_err(onyx_process_group_all_reduce(dp->pg, loss->data, 1, loss->type, ONYX_REDUCE_SUM),
                "all-reduce of the loss"));
  if (loss->type == ONYX_ELEM_FLOAT64)
    *(double*)loss->data /= (double)dp->size;
  else
    *(float*)loss->data /= (float)dp->size;
  return NULL;
}

OnyxStatus* ox_dp_average_grads(OxDataParallel* dp) {
  if (dp->size == 1 || dp->in_graph) return NULL;
  size_t per = dp->bucket_bytes / dp->esize;
  for (size_t off = 0; off < dp->total; off += per) {
    size_t n = dp->total - off < per ? dp->total - off : per;
    ox_dp_flat_copy(dp, 0, off, n, dp->bucket, true);
    OX_TRY(
        ox_dp_err(onyx_process_group_all_reduce(dp->pg, dp->bucket, n, dp->type, ONYX_REDUCE_SUM),
                  "all-reduce of a gradient bucket"));
    ox_dp_scale(dp, dp->bucket, n);
    ox_dp_flat_copy(dp, 0, off, n, dp->bucket, false);
  }
  return NULL;
}

static bool ox_dp_finite(const OxDataParallel* dp, const void* buf, size_t n) {
  if (dp->type == ONYX_ELEM_FLOAT64) {
    const double* d = buf;
    for (size_t i = 0; i < n; i++)
      if (d[i] - d[i] != 0) return false;
  } else {
    const float* d = buf;
    for (size_t i = 0; i < n; i++)
      if (d[i] - d[i] != 0) return false;
  }
  return true;
}

OnyxStatus* ox_dp_zero_step(OxDataParallel* dp, float lr, OnyxNonfinitePolicy policy,
                            int64_t* skipped) {
  OnyxCheckpoint* ck = dp->b.ck;
  size_t S = dp->shard, padded = S * (size_t)dp->size;
  memset(dp->flat, 0, padded * dp->esize);
  ox_dp_flat_copy(dp, 0, 0, dp->total, dp->flat, true);
  OX_TRY(ox_dp_err(onyx_process_group_reduce_scatter(dp->pg, dp->flat, dp->g->tensor->data, S,
                                                     dp->type, ONYX_REDUCE_SUM),
                   "reduce-scatter of the gradients"));
  ox_dp_scale(dp, dp->g->tensor->data, S);
  /* Every rank takes the same decision on a non-finite gradient. */
  float bad = ox_dp_finite(dp, dp->g->tensor->data, S) ? 0.0f : 1.0f;
  OX_TRY(
      ox_dp_err(onyx_process_group_all_reduce(dp->pg, &bad, 1, ONYX_ELEM_FLOAT32, ONYX_REDUCE_MAX),
                "all-reduce of the finite-gradient flag"));
  if (bad > 0) {
    if (policy == ONYX_NONFINITE_SKIP_STEP) {
      (*skipped)++;
      return NULL;
    }
    return ox_status(ONYX_RUNTIME_ERROR,
                     "training session: optimizer step: the averaged gradients hold NaN or Inf "
                     "(the step was not taken)");
  }
  /* This rank's slice of the parameters, equal on every rank. */
  size_t off = (size_t)dp->rank * S;
  size_t have = off < dp->total ? dp->total - off : 0;
  if (have > S) have = S;
  ox_dp_flat_copy(dp, 1, off, have, dp->p->tensor->data, true);
  int64_t step = ck->step;
  OnyxValue* v_lr = NULL;
  OnyxValue* v_step = NULL;
  OX_TRY(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, NULL, 0, &lr, sizeof lr, &v_lr));
  OnyxStatus* st = onyx_value_create_tensor(ONYX_ELEM_INT64, NULL, 0, &step, sizeof step, &v_step);
  OnyxValue** outs = st ? NULL : calloc(dp->n_out, sizeof *outs);
  if (!st && !outs) st = ox_oom();
  if (!st) {
    dp->feeds[0] = v_lr;
    dp->feeds[1] = v_step;
    st = onyx_session_run(dp->opt, NULL, (const char* const*)dp->ins, dp->feeds, dp->n_in,
                          (const char* const*)dp->out_names, dp->n_out, outs);
    if (st) st = ox_status_wrap(st, "training session: ZeRO-1 optimizer step");
  }
  for (size_t k = 0; !st && k < dp->n_out; k++) {
    OxTensor* dst = k == 0 ? dp->p->tensor : dp->s[k - 1]->tensor;
    const OxTensor* src = outs[k]->tensor;
    if (src->bytes != dst->bytes || src->type != dst->type)
      st = ox_status(ONYX_RUNTIME_ERROR,
                     "training session: ZeRO-1 optimizer output '%s' is %zu bytes, expected %zu",
                     dp->out_names[k], src->bytes, dst->bytes);
    else
      memcpy(dst->data, src->data, dst->bytes);
  }
  if (outs) onyx_values_release(outs, dp->n_out);
  free(outs);
  onyx_value_release(v_lr);
  onyx_value_release(v_step);
  if (!st)
    st =
        ox_dp_err(onyx_process_group_all_gather(dp->pg, dp->p->tensor->data, dp->flat, S, dp->type),
                  "all-gather of the parameters");
  if (st) return st;
  ox_dp_flat_copy(dp, 1, 0, dp->total, dp->flat, false);
  ck->step++;
  return NULL;
}

OnyxStatus* ox_dp_gather_state(OxDataParallel* dp) {
  if (!ox_dp_zero(dp)) return NULL;
  for (size_t s = 0; s < dp->b.n_slots; s++) {
    OX_TRY(ox_dp_err(onyx_process_group_all_gather(dp->pg, dp->s[s]->tensor->data, dp->flat,
                                                   dp->shard, dp->type),
                     "all-gather of the optimizer state"));
    ox_dp_flat_copy(dp, 2 + (int)s, 0, dp->total, dp->flat, false);
  }
  return NULL;
}
