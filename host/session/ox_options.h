/* ox_options.h — session options, provider options and pins: what code and
 * the JSON config set, and what the session reads. */
#ifndef OX_OPTIONS_H
#define OX_OPTIONS_H

#include "ox_common.h"
#include "ox_partition.h" /* OxPin */
#include "ox_program.h"   /* OnyxRunOptions, OxSessionRt */
#include "onyx/onyx.h"
#include "onyx/onyx_ep.h"

/* Provider options (OnyxOptions) and OxProviderSpec: host/providers/ox_providers.h;
 * run options and the run-time state (OxSessionRt): host/plan/ox_program.h. */
OnyxStatus* ox_options_set(OnyxOptions* o, const char* key, const char* value);
const char* ox_options_get(const OnyxOptions* o, const char* key);
OnyxStatus* ox_options_copy(OnyxOptions* dst, const OnyxOptions* src);
void ox_options_clear(OnyxOptions* o);

struct OnyxSessionOptions {
  OxProviderSpec* providers;
  size_t n_providers, cap_providers;
  OxPin* pins;
  size_t n_pins, cap_pins;
  bool fallback_deny;
  bool no_implicit_cpu;
  int threads; /* 0: one per core */
  OnyxLogSeverity log_severity;
  OnyxLogFn log_fn;
  void* log_user;
  OnyxExecutionOrder order;
  OnyxOptimizationLevel opt_level;
  bool deterministic;
  bool memory_pattern;
  char* profile_path;
  /* NVTX ranges (host/exec/ox_nvtx.h); ONYX_NVTX=1 turns them on too. */
  bool nvtx;
  /* Folder of the compiled-group cache (host/plan/ox_compile_cache.h); NULL: off. */
  char* cache_dir;
  /* Per-node priorities for the "priority" execution order (lower first). */
  char** prio_nodes;
  int64_t* prio_values;
  size_t n_prio, cap_prio;
  /* Symbolic input dims fixed before planning (onyx_session_options_set_dim_value). */
  char** dim_names;
  int64_t* dim_values;
  size_t n_dims, cap_dims;
  /* Run-time state of the session owning this (private) copy; never cloned. */
  struct OxSessionRt* rt;
  /* Resource limits (docs/security.md): never 0 once set through the API or
   * a config, which both map 0 to the default (ox_session_limits_defaults). */
  size_t max_model_bytes, max_tensor_bytes, max_nodes;
  int max_graph_depth;
  /* Run-time bounds (docs/config.md, "Resource limits"): the bytes one run's
   * live tensors may hold (0: no cap); a run's time limit (0: none); the
   * time budget of constant folding at session creation (0 once set means
   * the default, OX_DEFAULT_MAX_FOLD_MS). */
  size_t max_session_bytes, max_run_ms, max_fold_ms;
  /* Runs the com.onyx.collective ops (onyx_distributed.h); not owned. */
  struct OnyxProcessGroup* process_group;
  /* Megatron-style tensor parallelism over process_group (opt_tensor_parallel.c). */
  bool tensor_parallel;
};

struct OnyxSession;
/* The session's run-time state, created on first call (thread-safe). NULL
 * only when out of memory. */
OxSessionRt* ox_session_rt(struct OnyxSession* s);
void ox_session_rt_free(OxSessionRt* rt);
/* Session phases for the profile (load, optimize, partition, plan):
 * ox_session_phase_begin returns a timestamp for ox_session_phase_end. */
double ox_session_phase_begin(struct OnyxSession* s);
void ox_session_phase_end(struct OnyxSession* s, const char* phase, double begin_us);

#define OX_DEFAULT_MAX_FOLD_MS ((size_t)10000)

/* Replaces every limit left at 0 with its default (OX_DEFAULT_MAX_*). */
void ox_session_limits_defaults(OnyxSessionOptions* o);

/* Deep copy, so a session keeps its options after the caller releases theirs. */
OnyxStatus* ox_session_options_clone(const OnyxSessionOptions* src, OnyxSessionOptions** out);

#endif
