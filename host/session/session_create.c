/* session_create.c — the path of a model: load, providers, resolve,
 * partition, plan (ARCHITECTURE.md §1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "opt_session.h"
#include "ox_host_api.h"
#include "ox_dist.h"
#include "ox_memplan.h"
#include "ox_model.h"
#include "ox_nvtx.h"
#include "ox_tensor_parallel.h"
#include "ox_session.h"
#include "ox_training.h"

static OnyxStatus* ox_provider_unavailable(OnyxSession* s, const OxProviderSpec* spec,
                                           OnyxStatus* why) {
  if (spec->required) return why;
  ox_session_log(s, ONYX_LOG_WARNING,
                 "provider '%s' is optional (\"required\": false) and not available, so the "
                 "session runs without it: %s",
                 spec->name, why->message ? why->message : "");
  ox_status_free(why);
  return NULL;
}

static OnyxStatus* ox_device_check(const OxProviderSpec* spec, const OxProviderLib* lib) {
  size_t count = 0;
  OnyxStatus* st = ox_provider_lib_device_count(lib, &count);
  if (st)
    return ox_status_wrap(st, "provider '%s' (%s) has no usable device", spec->name, lib->path);
  if (!count)
    return ox_status(ONYX_NO_DEVICE, "provider '%s' (%s) reports zero devices", spec->name,
                     lib->path);
  if (spec->device < 0 || (size_t)spec->device >= count)
    return ox_status(ONYX_INVALID_CONFIG,
                     "provider '%s' (%s): device %d does not exist (it has %zu)", spec->name,
                     lib->path, spec->device, count);
  return NULL;
}

static OnyxStatus* ox_session_add_ep(OnyxSession* s, const OxProviderSpec* spec, bool implicit) {
  OxProviderLib* lib = NULL;
  OnyxStatus* st = spec->init
                       ? ox_provider_lib_acquire_init(ox_host_api(), spec->name, spec->init, &lib)
                       : ox_provider_lib_acquire(ox_host_api(), spec->name, spec->library, &lib);
  if (!st) st = ox_device_check(spec, lib);
  if (st) {
    ox_provider_lib_release(lib);
    return ox_provider_unavailable(s, spec, st);
  }
  OnyxEpCreateArgs args = {
      .struct_size = sizeof args,
      .device_index = (size_t)spec->device,
      .options = &spec->options,
      .thread_pool = s->prog.pool,
      .deterministic = s->opts->deterministic,
      .log_severity = (int32_t)s->opts->log_severity,
      .next = ox_process_group_extension(s->opts->process_group),
  };
  OnyxEp* ep = NULL;
  st = ox_provider_lib_create_ep(lib, &args, &ep);
  if (st) {
    st = ox_status_wrap(st, "provider '%s' (%s): create_ep failed", spec->name, lib->path);
  } else if (!ep || ep->struct_size < offsetof(OnyxEp, release) + sizeof ep->release ||
             !ep->release) {
    st = ox_status(ONYX_FAIL,
                   "provider '%s' (%s): create_ep returned %s; the EP's release slot is required",
                   spec->name, lib->path, ep ? "an EP without a release function" : "no EP");
    ep = NULL; /* cannot release it safely */
  }
  if (st) {
    ox_provider_lib_release(lib);
    /* A device that turns out to be missing only at create_ep time is
     * "unavailable" like one device_count did not find. */
    return st->code == ONYX_NO_DEVICE ? ox_provider_unavailable(s, spec, st) : st;
  }
  OxEpSlot* slots = realloc(s->prog.eps, (s->prog.n_eps + 1) * sizeof *slots);
  char* name = ox_strdup(spec->name);
  if (!slots || !name) {
    free(name);
    if (slots) s->prog.eps = slots;
    ep->release(ep);
    ox_provider_lib_release(lib);
    return ox_oom();
  }
  s->prog.eps = slots;
  OxEpSlot* slot = &s->prog.eps[s->prog.n_eps++];
  *slot = (OxEpSlot){.name = name, .lib = lib, .ep = ep, .implicit = implicit};
  pthread_mutex_init(&slot->arena_lock, NULL);
  const OnyxProvider* p = lib->provider;
  ox_session_log(s, ONYX_LOG_INFO, "provider '%s' (%s %s, ABI %u.%u) from %s, device %d%s",
                 spec->name, p->vendor ? p->vendor : "?", p->version ? p->version : "?",
                 (unsigned)p->abi_major, (unsigned)p->abi_minor, lib->path, spec->device,
                 implicit ? " (appended as fallback)" : "");
  if (ep->create_stream) {
    st = ep->create_stream(ep, &slot->stream);
    if (st) return ox_status_wrap(st, "provider '%s': create_stream failed", spec->name);
  }
  return NULL;
}

static bool ox_lists_cpu(const OnyxSessionOptions* o) {
  for (size_t i = 0; i < o->n_providers; i++)
    if (!strcmp(o->providers[i].name, "cpu")) return true;
  return false;
}

static OnyxStatus* ox_session_providers(OnyxSession* s) {
  const OnyxSessionOptions* o = s->opts;
  for (size_t i = 0; i < o->n_providers; i++)
    OX_TRY(ox_session_add_ep(s, &o->providers[i], false));
  if (!ox_lists_cpu(o) && !o->no_implicit_cpu) {
    OxProviderSpec cpu = {.name = (char*)"cpu", .required = true};
    OX_TRY(ox_session_add_ep(s, &cpu, true));
  }
  if (!s->prog.n_eps) return ox_status(ONYX_NO_DEVICE, "no execution provider is available");
  return NULL;
}

static OnyxStatus* ox_session_resolve(OnyxSession* s) {
  const OxSchemaRegistry** customs = calloc(s->prog.n_eps + 1, sizeof *customs);
  if (!customs) return ox_oom();
  for (size_t i = 0; i < s->prog.n_eps; i++)
    customs[i] = s->prog.eps[i].lib->schemas;
  /* Gradient nodes are built into their backward ops here (host/training). */
  OnyxStatus* st =
      ox_graph_resolve_expanding(s->prog.graph, customs, s->prog.n_eps, ox_gradient_expand);
  free(customs);
  return st;
}

static void ox_session_log_placement(OnyxSession* s) {
  OxStr t = {0};
  for (size_t i = 0; i < s->prog.n_eps; i++)
    ox_str_addf(&t, "%s%s: %zu", i ? ", " : "", s->prog.eps[i].name, s->prog.eps[i].n_nodes);
  char* text = ox_str_take(&t);
  ox_session_log(s, ONYX_LOG_INFO, "%s: placement of %zu nodes: %s", s->prog.source,
                 s->prog.graph->n_nodes, text ? text : "");
  free(text);
}

/* ONYX_DUMP_PLACEMENT=1: the explain report on stderr at session creation. */
static void ox_session_dump_placement(const OnyxSession* s) {
  const char* e = getenv("ONYX_DUMP_PLACEMENT");
  if (!e || !*e || !strcmp(e, "0")) return;
  char* text = NULL;
  OnyxStatus* st = onyx_session_explain(s, &text);
  if (!st) fprintf(stderr, "%s", text);
  ox_status_free(st);
  free(text);
}

/* The session's graph and providers with its placement rules, unplaced. */
static OxPartition ox_session_placement(const OnyxSession* s) {
  return (OxPartition){.graph = s->prog.graph,
                       .eps = s->prog.eps,
                       .n_eps = s->prog.n_eps,
                       .pins = s->opts->pins,
                       .n_pins = s->opts->n_pins,
                       .fallback_deny = s->opts->fallback_deny};
}

static void ox_session_pin_warning(void* ctx, const char* msg) {
  const OnyxSession* s = ctx;
  ox_session_log(s, ONYX_LOG_WARNING, "%s: %s", s->prog.source, msg);
}

/* tensor_parallel: the graph rewritten for this rank (host/optimizer), then resolved again. */
static OnyxStatus* ox_session_tensor_parallel(OnyxSession* s) {
  const OnyxProcessGroup* pg = s->opts->process_group;
  char* report = NULL;
  OX_TRY(ox_tensor_parallel(s->prog.graph, onyx_process_group_rank(pg), onyx_process_group_size(pg),
                            &report));
  ox_session_log(s, ONYX_LOG_INFO, "%s: tensor parallel: %s", s->prog.source, report ? report : "");
  free(report);
  return ox_session_resolve(s);
}

/* onyx_session_options_set_dim_value: every input dim whose dim_param is
 * a name given there takes its value, before shapes are inferred. The
 * dim_param is kept (onyx_session_input_dim_param reports it). */
static void ox_session_fix_dims(OnyxSession* s) {
  const OnyxSessionOptions* o = s->opts;
  OxGraph* g = s->prog.graph;
  for (size_t i = 0; o->n_dims && i < g->n_inputs; i++) {
    OxValue* v = g->inputs[i];
    for (int32_t k = 0; v->dim_params && k < v->rank; k++)
      for (size_t d = 0; v->dim_params[k] && d < o->n_dims; d++)
        if (!strcmp(v->dim_params[k], o->dim_names[d])) v->dims[k] = o->dim_values[d];
  }
}

/* Everything after loading. */
static OnyxStatus* ox_session_build_steps(OnyxSession* s) {
  OX_TRY(ox_threadpool_create(s->opts->threads, &s->prog.pool));
  OX_TRY(ox_session_providers(s));
  ox_session_fix_dims(s);
  OX_TRY(ox_session_resolve(s));
  ox_nvtx_phase_push(&s->prog, "optimize");
  double t = ox_session_phase_begin(s);
  OxPartition pins = ox_session_placement(s); /* before rewrites rename or remove nodes */
  OX_TRY(ox_partition_check_pins(&pins, ox_session_pin_warning, s));
  OX_TRY(ox_session_optimize(s)); /* host/optimizer: the graph stays resolved */
  if (s->opts->tensor_parallel) OX_TRY(ox_session_tensor_parallel(s));
  ox_session_phase_end(s, "optimize", t);
  ox_nvtx_phase_pop(&s->prog);
  /* Before partitioning: node indices are fixed from here on. */
  if (s->opts->order == ONYX_ORDER_PRIORITY) {
    OX_TRY(ox_session_apply_priorities(s));
    OX_TRY(ox_graph_order(s->prog.graph, true));
  }
  s->prog.part = ox_session_placement(s);
  ox_nvtx_phase_push(&s->prog, "partition");
  t = ox_session_phase_begin(s);
  OX_TRY(ox_partition_run(&s->prog.part));
  ox_session_phase_end(s, "partition", t);
  ox_nvtx_phase_pop(&s->prog);
  ox_nvtx_phase_push(&s->prog, "fuse");
  t = ox_session_phase_begin(s);
  OX_TRY(ox_session_fuse(s)); /* host/optimizer: inside each provider's nodes */
  ox_partition_count(&s->prog.part);
  if (s->opts->order == ONYX_ORDER_PRIORITY) OX_TRY(ox_graph_order(s->prog.graph, true));
  OX_TRY(ox_partition_kernels(&s->prog.part)); /* the graph and its order are final */
  ox_session_phase_end(s, "fuse", t);
  ox_nvtx_phase_pop(&s->prog);
  ox_nvtx_phase_push(&s->prog, "plan");
  t = ox_session_phase_begin(s);
  OX_TRY(ox_plan_build(&s->prog));
  ox_session_phase_end(s, "plan", t);
  ox_nvtx_phase_pop(&s->prog);
  char* mem = ox_memplan_summary(&s->prog); /* host/plan/ox_memplan.h: the planned peak */
  size_t mem_len = mem ? strlen(mem) : 0;
  if (mem_len && mem[mem_len - 1] == '\n') mem[mem_len - 1] = '\0';
  if (mem) ox_session_log(s, ONYX_LOG_INFO, "%s: %s", s->prog.source, mem);
  free(mem);
  ox_session_log_placement(s);
  ox_session_dump_placement(s);
  return NULL;
}

/* Provider logs during creation (create_ep, get_capability, compile) reach
 * the session's log callback. */
static OnyxStatus* ox_session_build(OnyxSession* s) {
  OxLogScope scope = ox_log_scope_enter(&s->prog, NULL);
  OnyxStatus* st = ox_session_build_steps(s);
  ox_log_scope_leave(scope);
  return st;
}

/* A model with com.onyx.collective ops runs only when every rank of the
 * process group loaded the same model bytes with the same options that
 * decide what the ranks' collectives are (placement, rewrites, order): the
 * ranks compare a hash of them (ox_process_group_check_world). */
static OnyxStatus* ox_session_check_world(OnyxSession* s, const void* bytes, size_t len) {
  OnyxProcessGroup* pg = s->opts->process_group;
  if (!pg || onyx_process_group_size(pg) == 1 || !s->prog.graph) return NULL;
  bool collective = s->opts->tensor_parallel; /* its rewrite adds AllReduce nodes */
  for (size_t i = 0; i < s->prog.graph->n_nodes && !collective; i++)
    collective = !strcmp(s->prog.graph->nodes[i]->domain, "com.onyx.collective");
  if (!collective) return NULL;
  const OnyxSessionOptions* o = s->opts;
  uint64_t h = ox_fnv1a(OX_FNV_OFFSET, bytes, len);
  const int32_t flags[4] = {(int32_t)o->opt_level, (int32_t)o->order, o->deterministic,
                            o->tensor_parallel};
  h = ox_fnv1a(h, flags, sizeof flags);
  for (size_t i = 0; i < o->n_providers; i++)
    h = ox_fnv1a(h, o->providers[i].name, strlen(o->providers[i].name) + 1);
  return ox_process_group_check_world(pg, h, s->prog.source);
}

static OnyxStatus* ox_session_check_world_file(OnyxSession* s, const char* path) {
  if (!s->opts->process_group || onyx_process_group_size(s->opts->process_group) == 1) return NULL;
  void* bytes;
  size_t len;
  bool mapped;
  OX_TRY(ox_map_file(path, s->opts->max_model_bytes, &bytes, &len, &mapped));
  OnyxStatus* st = ox_session_check_world(s, bytes, len);
  ox_unmap_file(bytes, len, mapped);
  return st;
}

static OxModelLimits ox_limits(const OnyxSessionOptions* o) {
  return (OxModelLimits){o->max_model_bytes, o->max_tensor_bytes, o->max_nodes, o->max_graph_depth};
}

static OnyxStatus* ox_session_start(const OnyxSessionOptions* opts, const char* source,
                                    OnyxSession** out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return ox_oom();
  ox_host_cache_hold(); /* dropped by onyx_session_release */
  OnyxStatus* st = opts ? ox_session_options_clone(opts, &(*out)->opts)
                        : onyx_session_options_create(&(*out)->opts);
  if (!st && !((*out)->prog.source = ox_strdup(source))) st = ox_oom();
  if (!st) ox_session_bind(*out);
  return st;
}

static OnyxStatus* ox_session_finish(OnyxSession* s, OnyxStatus* st, OnyxSession** out) {
  if (!st) st = ox_session_build(s);
  if (st) {
    if (!strstr(st->message ? st->message : "", s->prog.source ? s->prog.source : "\x01"))
      st = ox_status_wrap(st, "%s", s->prog.source ? s->prog.source : "model");
    onyx_session_release(s);
    return st;
  }
  *out = s;
  return NULL;
}

ONYX_API OnyxStatus* onyx_session_create(const OnyxSessionOptions* opts, const char* model_path,
                                         OnyxSession** out) {
  if (!out || !model_path)
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_session_create: NULL argument");
  *out = NULL;
  OnyxSession* s;
  OnyxStatus* st = ox_session_start(opts, model_path, &s);
  int nvtx_depth =
      ox_nvtx_create_begin(st ? NULL : &s->prog); /* NVTX ranges: host/exec/ox_nvtx.h */
  if (!st) {
    OxModelLimits lim = ox_limits(s->opts);
    ox_nvtx_phase_push(&s->prog, "load");
    double t = ox_session_phase_begin(s);
    st = ox_model_load_file(model_path, &lim, &s->prog.graph);
    if (!st) ox_session_phase_end(s, "load", t);
    ox_nvtx_phase_pop(&s->prog);
    if (!st) st = ox_session_check_world_file(s, model_path);
  }
  st = ox_session_finish(s, st, out);
  ox_nvtx_unwind(nvtx_depth); /* the phases an error left open, and the creation's range */
  return st;
}

ONYX_API OnyxStatus* onyx_session_create_from_bytes(const OnyxSessionOptions* opts,
                                                    const void* bytes, size_t len,
                                                    const char* base_dir, OnyxSession** out) {
  if (!out || (!bytes && len))
    return ox_status(ONYX_INVALID_ARGUMENT, "onyx_session_create_from_bytes: NULL argument");
  *out = NULL;
  OnyxSession* s;
  OnyxStatus* st = ox_session_start(opts, "<memory>", &s);
  int nvtx_depth =
      ox_nvtx_create_begin(st ? NULL : &s->prog); /* NVTX ranges: host/exec/ox_nvtx.h */
  if (!st) {
    OxModelLimits lim = ox_limits(s->opts);
    ox_nvtx_phase_push(&s->prog, "load");
    double t = ox_session_phase_begin(s);
    st = ox_model_load_bytes(bytes, len, base_dir, "<memory>", &lim, &s->prog.graph);
    if (!st) ox_session_phase_end(s, "load", t);
    ox_nvtx_phase_pop(&s->prog);
    if (!st) st = ox_session_check_world(s, bytes, len);
  }
  st = ox_session_finish(s, st, out);
  ox_nvtx_unwind(nvtx_depth); /* the phases an error left open, and the creation's range */
  return st;
}

ONYX_API void onyx_session_release(OnyxSession* s) {
  if (!s) return;
  ox_session_settle_runs(s);   /* in-flight asynchronous runs, before anything they use */
  ox_run_graph_free(&s->prog); /* before the kernels and EPs it uses */
  ox_plan_clear(&s->prog);
  ox_partition_clear(&s->prog.part);
  /* Kernel states are gone; now streams, arenas, EPs, then the libraries. */
  for (size_t i = 0; i < s->prog.n_eps; i++) {
    OxEpSlot* slot = &s->prog.eps[i];
    if (slot->stream && slot->ep->release_stream) slot->ep->release_stream(slot->ep, slot->stream);
    for (int m = 0; m < 3; m++)
      if (slot->arenas[m]) ox_arena_destroy(slot->arenas[m]);
    slot->ep->release(slot->ep);
    pthread_mutex_destroy(&slot->arena_lock);
  }
  ox_graph_free(s->prog.graph);
  for (size_t i = 0; i < s->prog.n_eps; i++) {
    ox_provider_lib_release(s->prog.eps[i].lib);
    free(s->prog.eps[i].name);
  }
  free(s->prog.eps);
  ox_threadpool_free(s->prog.pool);
  onyx_session_options_release(s->opts);
  free(s->prog.source);
  free(s);
  ox_host_cache_drop();
}
