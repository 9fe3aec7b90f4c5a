/* ox_profile.h — the Chrome-trace / Perfetto profiler of a session.
 *
 * The file is a JSON object {"traceEvents": [...]} that is valid after every
 * event: each event is written over the closing "]}" and the closing is
 * written again, so a crash or a reader in the middle of a run still sees a
 * complete file. Events are "ph":"X" (complete) events with microsecond
 * timestamps relative to the profiler's start. Thread-safe. */
#ifndef OX_PROFILE_H
#define OX_PROFILE_H

#include <jansson.h>
#include "ox_common.h"

typedef struct OxProfiler OxProfiler;

/* Creates (truncates) the file at `path`. */
OnyxStatus* ox_profiler_open(const char* path, OxProfiler** out);
void ox_profiler_close(OxProfiler* p);
/* Microseconds since the profiler started (monotonic clock). */
double ox_profiler_now(const OxProfiler* p);
/* Appends one complete event; `args` (may be NULL) is consumed. */
void ox_profiler_complete(OxProfiler* p, const char* cat, const char* name, double ts_us,
                          double dur_us, json_t* args);

#endif
