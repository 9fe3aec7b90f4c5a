/* program.c — the logging of a program's runs, and the per-thread log scope
 * that routes provider logs to the session's callback. */
#include <stdarg.h>
#include <stdio.h>
#include "ox_program.h"

static void ox_program_vlog(const OxProgram* p, const OnyxRunOptions* run, OnyxLogSeverity sev,
                            const char* fmt, va_list ap) {
  const OxRunConfig* c = p ? &p->cfg : NULL;
  OnyxLogSeverity min = c ? c->log_severity : ox_log_default_severity();
  if (run && run->log_severity_set) min = run->log_severity;
  if (sev < min) return;
  char buf[2048];
  vsnprintf(buf, sizeof buf, fmt, ap);
  const char* tag = run && run->tag && *run->tag ? run->tag : NULL;
  OxLogSink sink = c && c->log_fn ? (OxLogSink)c->log_fn : NULL;
  void* user = c ? c->log_user : NULL;
  if (tag)
    ox_log_to(sink, user, min, sev, "[run '%s'] %s", tag, buf);
  else
    ox_log_to(sink, user, min, sev, "%s", buf);
}

void ox_program_log(const OxProgram* p, OnyxLogSeverity sev, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ox_program_vlog(p, NULL, sev, fmt, ap);
  va_end(ap);
}

void ox_run_log(const OxProgram* p, const OnyxRunOptions* run, OnyxLogSeverity sev, const char* fmt,
                ...) {
  va_list ap;
  va_start(ap, fmt);
  ox_program_vlog(p, run, sev, fmt, ap);
  va_end(ap);
}

/* --- log scope ---------------------------------------------------------------------------------
 */
static _Thread_local OxLogScope ox_scope;

OxLogScope ox_log_scope_enter(const OxProgram* p, const OnyxRunOptions* run) {
  OxLogScope prev = ox_scope;
  ox_scope = (OxLogScope){p, run};
  return prev;
}

void ox_log_scope_leave(OxLogScope previous) {
  ox_scope = previous;
}

const OxLogScope* ox_log_scope_current(void) {
  return ox_scope.program ? &ox_scope : NULL;
}
