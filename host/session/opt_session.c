/* opt_session.c — the optimizer inside a session (before placement, and the
 * fusions and provider transforms after it): constant folding runs the
 * CPU provider's own kernels on constant inputs (so a folded value is
 * exactly what the node would have computed), and the public entry points
 * that need the session (saving the optimized model). */
#include <stdlib.h>
#include <string.h>
#include "opt_session.h"
#include "ox_checked.h"
#include "ox_control.h"
#include "ox_model.h"

/* The CPU provider's slot in the session, or -1. */
static int32_t ox_cpu_ep(const OnyxSession* s) {
  for (size_t i = 0; i < s->prog.n_eps; i++)
    if (!strcmp(s->prog.eps[i].name, "cpu")) return (int32_t)i;
  return -1;
}

/* The budgets of constant folding in one optimizer run: a deadline
 * (max_fold_ms) after which kernels are asked to stop and nothing more is
 * folded, and the most bytes one folded output may take. */
typedef struct OxFoldCtx {
  OnyxSession* s;
  uint64_t deadline_ns;
  size_t max_bytes;
  bool stopped;      /* the time budget ran out */
  size_t over_bytes; /* folds skipped for their size */
  size_t folded;     /* bytes of the folded outputs, against max_session_bytes */
} OxFoldCtx;

/* Bytes of a value whose shape is static, or SIZE_MAX when it is not known
 * (or overflows). */
static size_t ox_static_bytes(const OxValue* v) {
  if (!v || v->rank < 0 || v->type == ONYX_ELEM_UNDEFINED || v->type == ONYX_ELEM_STRING)
    return SIZE_MAX;
  size_t count = 1, bytes;
  for (int32_t i = 0; i < v->rank; i++)
    if (v->dims[i] < 0 || !ox_mul_size(count, (size_t)v->dims[i], &count)) return SIZE_MAX;
  size_t esz = ox_elem_size(v->type);
  return esz && ox_mul_size(count, esz, &bytes) ? bytes : SIZE_MAX;
}

/* Runs one node through the CPU kernel the partitioner would pick, with a
 * private frame whose every output is allocated on the heap, within the
 * fold budgets: a known output over the size budget is not computed, an
 * output allocation over it fails before allocating, and the frame's
 * deadline stops a kernel that polls ctx_should_stop. */
static OnyxStatus* ox_eval_cpu(void* ctx, OxNode* n, OxTensor** outs) {
  OxFoldCtx* fc = ctx;
  OnyxSession* s = fc->s;
  if (fc->stopped || (fc->deadline_ns && ox_now_ns() >= fc->deadline_ns)) {
    fc->stopped = true;
    return ox_status(ONYX_CANCELLED, "the time budget of constant folding is spent");
  }
  for (size_t i = 0; i < n->n_outputs; i++) {
    size_t b = ox_static_bytes(n->outputs[i]);
    if (b != SIZE_MAX && b > fc->max_bytes) {
      fc->over_bytes++;
      return ox_status(ONYX_LIMIT_EXCEEDED, "output %zu would take %zu bytes", i, b);
    }
  }
  int32_t e = ox_cpu_ep(s);
  if (e < 0) return ox_status(ONYX_NOT_IMPLEMENTED, "no CPU provider");
  const OxKernel* k = ox_kreg_match(s->prog.eps[e].lib->kernels, n, NULL);
  if (!k) return ox_status(ONYX_NOT_IMPLEMENTED, "no CPU kernel");
  OnyxMemoryDevice host = ox_session_ep_memory(s, e, ONYX_MEM_DEFAULT);
  if (!ox_memory_equal(&host, &OX_HOST_MEMORY))
    return ox_status(ONYX_NOT_IMPLEMENTED, "the CPU provider's memory is not host memory");
  for (size_t i = 0; i < n->n_inputs; i++)
    if (ox_kernel_input_mem(k, i) != ONYX_MEM_DEFAULT)
      return ox_status(ONYX_NOT_IMPLEMENTED, "special input memory");
  size_t n_in = n->n_inputs, n_out = n->n_outputs, n_slots = n_in + n_out;
  OxSlot* slots = calloc(n_slots + 1, sizeof *slots);
  OxTensor** vals = calloc(n_slots + 1, sizeof *vals);
  size_t* io = malloc((n_slots + 1) * sizeof *io);
  OnyxMemoryDevice* out_mem = calloc(n_out + 1, sizeof *out_mem);
  int32_t* out_ep = calloc(n_out + 1, sizeof *out_ep);
  OnyxStatus* st = (!slots || !vals || !io || !out_mem || !out_ep) ? ox_oom() : NULL;
  for (size_t i = 0; !st && i < n_slots; i++) {
    OxValue* v = i < n_in ? n->inputs[i] : n->outputs[i - n_in];
    io[i] = v ? i : SIZE_MAX;
    slots[i] = (OxSlot){.value = v, .mem = OX_HOST_MEMORY, .is_output = i >= n_in};
    if (i < n_in && v) {
      slots[i].constant = v->constant;
      vals[i] = v->constant;
    }
  }
  for (size_t i = 0; !st && i < n_out; i++) {
    out_mem[i] = OX_HOST_MEMORY;
    out_ep[i] = e;
  }
  void* state = NULL;
  bool created = false;
  const OnyxKernelDef* d = &k->def;
  if (!st) {
    state = d->user_data;
    if (d->create) st = d->create(s->prog.eps[e].ep, n, d->user_data, &state);
    created = !st && d->create;
  }
  if (!st) {
    OxProgram tmp = s->prog;
    /* the size budget bounds every output */
    if (!tmp.cfg.max_tensor_bytes || tmp.cfg.max_tensor_bytes > fc->max_bytes)
      tmp.cfg.max_tensor_bytes = fc->max_bytes;
    tmp.plan = (OxPlan){.slots = slots, .n_slots = n_slots};
    OxStep step = {.kind = OX_STEP_KERNEL,
                   .ep = e,
                   .node = n,
                   .kernel = k,
                   .state = state,
                   .in = io,
                   .n_in = n_in,
                   .out = io + n_in,
                   .n_out = n_out,
                   .out_mem = out_mem,
                   .out_ep = out_ep,
                   .group = -1};
    OxFrame f = {.prog = &tmp,
                 .values = vals,
                 .deadline_ns = fc->deadline_ns,
                 .deadline_what = "constant folding",
                 .live_bytes = &fc->folded};
    const size_t folded = fc->folded;
    OnyxKernelContext kc = {.frame = &f, .step = &step};
    st = d->compute(state, &kc);
    if (st && st->code == ONYX_CANCELLED) fc->stopped = true;
    if (!st && ox_frame_should_stop(&f)) fc->stopped = true; /* finished just past it */
    if (st && st->code == ONYX_LIMIT_EXCEEDED) fc->over_bytes++;
    if (st) fc->folded = folded; /* a fold not done holds nothing */
    for (size_t i = 0; i < kc.n_scratch; i++)
      free(kc.scratch[i]);
    free(kc.scratch);
  }
  if (created && d->release) d->release(state);
  for (size_t i = 0; i < n_out; i++) {
    OxTensor* t = vals ? vals[n_in + i] : NULL;
    if (!st && n->outputs[i] && (!t || !t->data || t->device.kind != ONYX_DEVICE_CPU))
      st = ox_status(ONYX_NOT_IMPLEMENTED, "output %zu not produced in host memory", i);
    outs[i] = t;
  }
  if (st)
    for (size_t i = 0; i < n_out; i++) {
      ox_tensor_free(outs[i]);
      outs[i] = NULL;
    }
  free(slots);
  free(vals);
  free(io);
  free(out_mem);
  free(out_ep);
  return st;
}

/* r registers a kernel for `op` of `domain` ("" for ONNX) that covers the
 * opset `version` and takes float32 for its first type constraint (the
 * fused ops are float32; the quantized ones of opt_qdq.c, QLinear* and
 * NhwcMaxPool, int8 or uint8), or float16 / bfloat16 where `elem` (the
 * asking node's type) is one of those (the GPU providers' fused kernels).
 * The node the fusion makes is matched exactly afterwards
 * (ox_session_check_fused). */
static bool ox_kreg_has_op(const OxKernelRegistry* r, const char* domain, const char* op,
                           int64_t version, int32_t elem) {
  const bool half = elem == ONYX_ELEM_FLOAT16 || elem == ONYX_ELEM_BFLOAT16;
  for (size_t i = 0; r && i < ox_kreg_count(r); i++) {
    const OxKernel* k = ox_kreg_at(r, i);
    const OnyxKernelDef* d = &k->def;
    const char* kd = d->domain && strcmp(d->domain, "ai.onnx") ? d->domain : "";
    if (strcmp(d->op_type, op) || strcmp(kd, domain)) continue;
    if (version < d->since_version || version > d->end_version) continue;
    const bool q8 = !strncmp(op, "QLinear", 7) || !strcmp(op, "NhwcMaxPool");
    const uint64_t want = OX_T(half ? elem : ONYX_ELEM_FLOAT32) |
                          (q8 ? OX_T(ONYX_ELEM_UINT8) | OX_T(ONYX_ELEM_INT8) : 0);
    if (d->type_constraint_count && !(k->allowed[0] & want)) continue;
    return true;
  }
  return false;
}

/* OxOptConfig.may_fuse after placement: n's provider has a kernel for the
 * fused op, so the rewrite keeps the nodes where the model put them. */
static bool ox_session_may_fuse(void* ctx, const OxNode* n, const char* domain, const char* op) {
  const OnyxSession* s = ctx;
  if (n->ep < 0 || (size_t)n->ep >= s->prog.n_eps) return false;
  int64_t version = ox_graph_opset(s->prog.graph, domain);
  if (version < 0) version = !strcmp(domain, OX_CONTRIB_DOMAIN) ? 1 : 0;
  const int32_t elem =
      n->n_inputs && n->inputs[0] ? (int32_t)n->inputs[0]->type : (int32_t)ONYX_ELEM_FLOAT32;
  return ox_kreg_has_op(s->prog.eps[n->ep].lib->kernels, domain, op, version, elem);
}

/* Schema registries of the session's providers, for re-resolving. */
static const OxSchemaRegistry** ox_session_customs(const OnyxSession* s) {
  const OxSchemaRegistry** customs = calloc(s->prog.n_eps + 1, sizeof *customs);
  for (size_t i = 0; customs && i < s->prog.n_eps; i++)
    customs[i] = s->prog.eps[i].lib->schemas;
  return customs;
}

static OnyxStatus* ox_session_run_optimizer(OnyxSession* s, int phase) {
  OnyxOptimizationLevel level = s->opts->opt_level;
  if (level == ONYX_OPT_DISABLED) return NULL;
  if (phase == OX_OPT_PHASE_FUSION && level < ONYX_OPT_EXTENDED) return NULL;
  const OxSchemaRegistry** customs = ox_session_customs(s);
  if (!customs) return ox_oom();
  int32_t cpu = ox_cpu_ep(s);
  size_t fold_bytes = (size_t)64 << 20;
  if (s->opts->max_tensor_bytes && s->opts->max_tensor_bytes < fold_bytes)
    fold_bytes = s->opts->max_tensor_bytes;
  /* One time budget for all of creation's folding (both phases). */
  OxSessionRt* rt = ox_session_rt(s);
  uint64_t deadline = rt ? rt->fold_deadline_ns : 0;
  if (!deadline) deadline = ox_deadline_after_ms(s->opts->max_fold_ms);
  if (rt) rt->fold_deadline_ns = deadline;
  OxFoldCtx fold = {.s = s, .deadline_ns = deadline, .max_bytes = fold_bytes};
  OxOptConfig cfg = {
      .level = level,
      .customs = customs,
      .n_customs = s->prog.n_eps,
      .eval = cpu >= 0 ? ox_eval_cpu : NULL,
      .eval_ctx = &fold,
      .max_fold_bytes = fold_bytes,
      /* After placement each fusion asks the provider of its nodes. */
      .contrib_available = true,
      .may_fuse = ox_session_may_fuse,
      .fuse_ctx = s,
      .phase = phase,
      .cpu_ep = cpu,
  };
  OxOptStats stats;
  OnyxStatus* st = ox_optimize(s->prog.graph, &cfg, &stats);
  free(customs);
  if (st) return st;
  if (fold.stopped)
    ox_session_log(s, ONYX_LOG_INFO,
                   "%s: constant folding stopped: its time budget of %zu ms (max_fold_ms) is "
                   "spent; the constant nodes not folded yet stay nodes",
                   s->prog.source, s->opts->max_fold_ms);
  if (fold.over_bytes)
    ox_session_log(s, ONYX_LOG_INFO,
                   "%s: constant folding left %zu node%s unfolded: %s outputs would exceed "
                   "%zu bytes, or bring the folded constants over max_session_bytes",
                   s->prog.source, fold.over_bytes, fold.over_bytes == 1 ? "" : "s",
                   fold.over_bytes == 1 ? "its" : "their", fold_bytes);
  char* text = ox_opt_stats_str(&stats);
  ox_session_log(s, ONYX_LOG_INFO, "%s: optimizer (%s, %s): %s", s->prog.source,
                 ox_opt_level_name(level),
                 phase == OX_OPT_PHASE_FUSION ? "fusions after placement" : "before placement",
                 text ? text : "");
  free(text);
  return NULL;
}

OnyxStatus* ox_session_optimize(OnyxSession* s) {
  return ox_session_run_optimizer(s, OX_OPT_PHASE_PLACEMENT);
}

/* Every node a rewrite made runs on its provider's kernel: a fusion the
 * provider cannot run is reported, never moved elsewhere. */
static OnyxStatus* ox_session_check_fused(const OnyxSession* s) {
  for (size_t i = 0; i < s->prog.graph->n_nodes; i++) {
    const OxNode* n = s->prog.graph->nodes[i];
    if (!n->origin_pass || n->group >= 0 || n->ep == OX_EP_HOST) continue;
    if (n->ep < 0 || (size_t)n->ep >= s->prog.n_eps)
      return ox_status(ONYX_PLACEMENT_ERROR,
                       "transformer '%s' made node '%s' (%s) from %s without a provider",
                       n->origin_pass, n->name, n->op_type, n->origin_nodes ? n->origin_nodes : "");
    const OxKernelRegistry* r = s->prog.eps[n->ep].lib->kernels;
    const char* why = NULL;
    if (!r || !ox_kreg_match(r, n, &why))
      return ox_status(ONYX_PLACEMENT_ERROR,
                       "transformer '%s' made node '%s' (%s%s%s) from %s for provider '%s', which "
                       "has no kernel for it: %s",
                       n->origin_pass, n->name, *n->domain ? n->domain : "", *n->domain ? "." : "",
                       n->op_type, n->origin_nodes ? n->origin_nodes : "", s->prog.eps[n->ep].name,
                       why ? why : "no kernel registry");
  }
  return NULL;
}

/* The providers' OnyxEp.transform slots, in priority order; *changed when
 * any edited the graph (then not yet resolved). */
static OnyxStatus* ox_session_provider_transforms(OnyxSession* s, bool* changed) {
  *changed = false;
  const OxSchemaRegistry** schemas = ox_session_customs(s);
  if (!schemas) return ox_oom();
  OnyxStatus* st = NULL;
  for (size_t i = 0; !st && i < s->prog.n_eps; i++) {
    bool edited = false;
    st = ox_provider_transform(s->prog.graph, s->prog.eps[i].ep, (int32_t)i, s->prog.eps[i].name,
                               schemas, s->prog.n_eps, &edited);
    *changed = *changed || edited;
  }
  free(schemas);
  return st;
}

OnyxStatus* ox_session_fuse(OnyxSession* s) {
  bool edited = false;
  OX_TRY(ox_session_provider_transforms(s, &edited));
  if (edited) {
    const OxSchemaRegistry** customs = ox_session_customs(s);
    if (!customs) return ox_oom();
    OxOptConfig cfg = {.customs = customs, .n_customs = s->prog.n_eps};
    OnyxStatus* st = ox_optimize_tidy(s->prog.graph, &cfg);
    free(customs);
    if (st) return ox_status_wrap(st, "after the providers' transforms");
  }
  OX_TRY(ox_session_run_optimizer(s, OX_OPT_PHASE_FUSION));
  return ox_session_check_fused(s);
}

ONYX_API OnyxStatus* onyx_session_save_model(const OnyxSession* s, const char* path) {
  if (!s || !path)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_session_save_model: NULL argument");
  return ox_model_save(s->prog.graph, path);
}
