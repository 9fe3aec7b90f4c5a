/* ox_program.h — a program: one graph with its placement and plan over a
 * session's providers, and what its runs read of the session's options
 * (OxRunConfig). The session embeds its program (host/session/ox_session.h)
 * and hands it to the plan and the executor; the nested plan of a
 * control-flow step is a program of its own over the parent's providers
 * (host/plan/nested.c). Also the run options, the session's run-time state
 * and the logging of a program's runs (program.c). */
#ifndef OX_PROGRAM_H
#define OX_PROGRAM_H

#include "ox_partition.h"
#include "ox_plan.h"
#include "onyx/onyx.h"

/* --- Run options ----------------------------------------------------------------------- */
struct OnyxRunOptions {
  char* tag;
  OnyxLogSeverity log_severity;
  bool log_severity_set; /* false: the session's severity applies */
  int terminate;         /* atomic */
};

/* --- The session's run-time state (profiler, debug dumps, counters) -------------
 * Created by the session (host/session/session_rt.c) and owned by its private
 * copy of its options, so it is released with the session; its programs hold
 * a pointer to it (OxRunConfig.rt). */
struct OxProfiler;
typedef struct OxSessionRt {
  struct OxProfiler* profiler; /* NULL: profiling off */
  bool nvtx;                   /* NVTX ranges on (host/exec/ox_nvtx.h) */
  /* Debug dumps (docs/debugging.md), read from the environment once. */
  int dump_nodes;         /* bit 1: inputs, bit 2: outputs */
  char* dump_node_filter; /* comma-separated node names, NULL: all */
  char* dump_op_filter;   /* comma-separated op types, NULL: all */
  size_t dump_max_values;
  bool dump_plan, dump_memory;
  int plans_dumped; /* atomic: the plan dumps are written once */
  uint64_t runs;    /* atomic: run counter, for traces */
  /* atomic: the data copies runs made (copy steps that moved data, feeds
   * staged into host memory); a copy step that aliased its source is not
   * counted. Read by tests. */
  uint64_t copies;
  /* When constant folding at session creation must end (max_fold_ms, from
   * the first fold; 0: not started). Creation runs on one thread. */
  uint64_t fold_deadline_ns;
} OxSessionRt;

/* What a program's plan and runs read of the session's options, copied when
 * the session is created (ox_session_bind, host/session/session.c). */
typedef struct OxRunConfig {
  OnyxLogFn log_fn; /* NULL: the process log */
  void* log_user;
  OnyxLogSeverity log_severity;
  /* Limits (docs/security.md, docs/config.md): 0 is none. */
  size_t max_tensor_bytes, max_session_bytes, max_model_bytes, max_run_ms, max_fold_ms;
  bool memory_pattern;
  bool deterministic;
  const char* cache_dir; /* the compiled-group cache's folder, NULL: off */
  /* The providers as the options name them (their device and options key
   * the compiled-group cache). */
  const OxProviderSpec* providers;
  size_t n_providers;
  OxSessionRt* rt; /* NULL only when out of memory */
} OxRunConfig;

typedef struct OxProgram {
  OxRunConfig cfg;
  OxGraph* graph;
  OxEpSlot* eps; /* the session's providers, in priority order */
  size_t n_eps;
  OnyxThreadPool* pool;
  OxPartition part;
  OxPlan plan;
  char* source; /* the model's path, or "<memory>" */
} OxProgram;

/* Logs through the program's logger (its session's callback and severity). */
void ox_program_log(const OxProgram* p, OnyxLogSeverity sev, const char* fmt, ...) OX_PRINTF(3, 4);
/* The same within a run: the run's severity (when set) and its tag
 * ("[run 'tag'] ") apply. */
void ox_run_log(const OxProgram* p, const OnyxRunOptions* run, OnyxLogSeverity sev, const char* fmt,
                ...) OX_PRINTF(4, 5);

/* The program (and run) whose work the calling thread is doing, so that a
 * provider's host->log reaches that session's log callback. Set by the
 * executor for a run; returns the previous pair for restoring. */
typedef struct OxLogScope {
  const OxProgram* program;
  const OnyxRunOptions* run;
} OxLogScope;
OxLogScope ox_log_scope_enter(const OxProgram* p, const OnyxRunOptions* run);
void ox_log_scope_leave(OxLogScope previous);
const OxLogScope* ox_log_scope_current(void); /* NULL outside any scope */

#endif
