/* session_rt.c — the session's run-time state (OxSessionRt in ox_program.h):
 * the debug-dump switches read from the environment, the profiler and the
 * NVTX switch, created on first use; the session's phases in the profile. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_nvtx.h"
#include "ox_profile.h"
#include "ox_session.h"

/* --- session run-time state ------------------------------------------------------------------ */
static pthread_mutex_t ox_rt_lock = PTHREAD_MUTEX_INITIALIZER;

static bool ox_env_on(const char* name) {
  const char* e = getenv(name);
  return e && *e && strcmp(e, "0") != 0;
}

static void ox_rt_read_env(OxSessionRt* rt) {
  const char* nodes = getenv("ONYX_DUMP_NODES");
  if (nodes && *nodes && strcmp(nodes, "0")) {
    if (!strcmp(nodes, "inputs"))
      rt->dump_nodes = 1;
    else if (!strcmp(nodes, "outputs"))
      rt->dump_nodes = 2;
    else
      rt->dump_nodes = 3;
  }
  const char* nf = getenv("ONYX_DUMP_NODE_FILTER");
  const char* of = getenv("ONYX_DUMP_OP_FILTER");
  if (nf && *nf) rt->dump_node_filter = ox_strdup(nf);
  if (of && *of) rt->dump_op_filter = ox_strdup(of);
  rt->dump_max_values = 16;
  const char* mv = getenv("ONYX_DUMP_MAX_VALUES");
  if (mv && *mv) {
    char* end = NULL;
    unsigned long long v = strtoull(mv, &end, 10);
    if (end && !*end) rt->dump_max_values = (size_t)v;
  }
  rt->dump_plan = ox_env_on("ONYX_DUMP_PLAN");
  rt->dump_memory = ox_env_on("ONYX_DUMP_MEMORY_PLAN");
}

OxSessionRt* ox_session_rt(OnyxSession* s) {
  OxSessionRt* rt = __atomic_load_n(&s->opts->rt, __ATOMIC_ACQUIRE);
  if (rt) return rt;
  OnyxStatus* st = NULL;
  bool nvtx_missing = false;
  pthread_mutex_lock(&ox_rt_lock);
  rt = s->opts->rt;
  if (!rt && (rt = calloc(1, sizeof *rt))) {
    ox_rt_read_env(rt);
    if (s->opts->profile_path) st = ox_profiler_open(s->opts->profile_path, &rt->profiler);
    bool nvtx = s->opts->nvtx || ox_env_on("ONYX_NVTX");
    rt->nvtx = nvtx && ox_nvtx_available();
    nvtx_missing = nvtx && !rt->nvtx;
    __atomic_store_n(&s->opts->rt, rt, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&ox_rt_lock);
  /* Logged outside the lock: the callback is the application's code. */
  if (st) ox_session_log(s, ONYX_LOG_WARNING, "%s; profiling is off", st->message);
  if (nvtx_missing)
    ox_session_log(s, ONYX_LOG_WARNING,
                   "nvtx: this build has no NVTX support (nvtx3/nvToolsExt.h was not found when "
                   "it was configured); no NVTX ranges are made");
  ox_status_free(st);
  return rt;
}

void ox_session_rt_free(OxSessionRt* rt) {
  if (!rt) return;
  ox_profiler_close(rt->profiler);
  free(rt->dump_node_filter);
  free(rt->dump_op_filter);
  free(rt);
}

double ox_session_phase_begin(OnyxSession* s) {
  OxSessionRt* rt = s && s->opts ? ox_session_rt(s) : NULL;
  return rt && rt->profiler ? ox_profiler_now(rt->profiler) : 0;
}

void ox_session_phase_end(OnyxSession* s, const char* phase, double begin_us) {
  OxSessionRt* rt = s && s->opts ? ox_session_rt(s) : NULL;
  if (!rt || !rt->profiler) return;
  double now = ox_profiler_now(rt->profiler);
  json_t* args = json_object();
  if (args && s->prog.source) json_object_set_new(args, "model", json_string(s->prog.source));
  ox_profiler_complete(rt->profiler, "session", phase, begin_us, now - begin_us, args);
}
