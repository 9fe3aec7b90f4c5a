/* profile.c — the Chrome-trace profiler: complete events appended to a JSON
 * trace file, one mutex per profiler. The session's run-time state that
 * carries it lives in host/session/session_rt.c. */
#include "ox_profile.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* --- profiler -------------------------------------------------------------------------- */
static const char ox_trailer[] = "\n]}\n";

struct OxProfiler {
  pthread_mutex_t mu;
  FILE* f;
  char* path;
  double t0;
  size_t events;
  bool failed;
};

static double ox_mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

OnyxStatus* ox_profiler_open(const char* path, OxProfiler** out) {
  *out = NULL;
  OxProfiler* p = calloc(1, sizeof *p);
  if (!p || !(p->path = ox_strdup(path))) {
    free(p);
    return ox_oom();
  }
  p->f = fopen(path, "w+");
  if (!p->f) {
    OnyxStatus* st = ox_status(ONYX_INVALID_ARGUMENT, "profile '%s': cannot create the file", path);
    free(p->path);
    free(p);
    return st;
  }
  pthread_mutex_init(&p->mu, NULL);
  p->t0 = ox_mono_us();
  fprintf(p->f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[%s", ox_trailer);
  fflush(p->f);
  *out = p;
  return NULL;
}

void ox_profiler_close(OxProfiler* p) {
  if (!p) return;
  if (fclose(p->f) != 0 && !p->failed)
    ox_log(ONYX_LOG_WARNING, "profile '%s': write failed", p->path);
  pthread_mutex_destroy(&p->mu);
  free(p->path);
  free(p);
}

double ox_profiler_now(const OxProfiler* p) {
  return p ? ox_mono_us() - p->t0 : 0;
}

static long ox_thread_id(void) {
  return (long)syscall(SYS_gettid);
}

void ox_profiler_complete(OxProfiler* p, const char* cat, const char* name, double ts_us,
                          double dur_us, json_t* args) {
  if (!p) {
    json_decref(args);
    return;
  }
  json_t* ev = json_object();
  if (ev) {
    json_object_set_new(ev, "name", json_string(name ? name : ""));
    json_object_set_new(ev, "cat", json_string(cat));
    json_object_set_new(ev, "ph", json_string("X"));
    json_object_set_new(ev, "ts", json_real(ts_us));
    json_object_set_new(ev, "dur", json_real(dur_us < 0 ? 0 : dur_us));
    json_object_set_new(ev, "pid", json_integer((json_int_t)getpid()));
    json_object_set_new(ev, "tid", json_integer((json_int_t)ox_thread_id()));
    if (args) json_object_set(ev, "args", args);
  }
  json_decref(args);
  char* text = ev ? json_dumps(ev, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
  json_decref(ev);
  if (!text) return;
  pthread_mutex_lock(&p->mu);
  if (!p->failed) {
    bool ok = fseek(p->f, -(long)(sizeof ox_trailer - 1), SEEK_END) == 0;
    ok = ok && fprintf(p->f, "%s%s%s", p->events ? ",\n" : "\n", text, ox_trailer) > 0;
    ok = ok && fflush(p->f) == 0;
    if (!ok) {
      p->failed = true;
      ox_log(ONYX_LOG_WARNING, "profile '%s': write failed; profiling stops", p->path);
    }
    p->events++;
  }
  pthread_mutex_unlock(&p->mu);
  free(text);
}
