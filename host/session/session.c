/* session.c — the session's services over its options and provider table:
 * logging through its logger, and the provider memory and copies
 * (host/partition/ep_memory.c) with its max_tensor_bytes. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include "ox_model.h"
#include "ox_session.h"

void ox_session_log(const OnyxSession* s, OnyxLogSeverity sev, const char* fmt, ...) {
  const OnyxSessionOptions* o = s ? s->opts : NULL;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  OnyxLogSeverity min = o ? o->log_severity : ox_log_default_severity();
  if (o && o->log_fn)
    ox_log_to((OxLogSink)o->log_fn, o->log_user, min, sev, "%s", buf);
  else
    ox_log_to(NULL, NULL, min, sev, "%s", buf);
}

void ox_session_bind(OnyxSession* s) {
  const OnyxSessionOptions* o = s->opts;
  s->prog.cfg = (OxRunConfig){.log_fn = o->log_fn,
                              .log_user = o->log_user,
                              .log_severity = o->log_severity,
                              .max_tensor_bytes = o->max_tensor_bytes,
                              .max_session_bytes = o->max_session_bytes,
                              .max_model_bytes = o->max_model_bytes,
                              .max_run_ms = o->max_run_ms,
                              .max_fold_ms = o->max_fold_ms,
                              .memory_pattern = o->memory_pattern,
                              .deterministic = o->deterministic,
                              .cache_dir = o->cache_dir,
                              .providers = o->providers,
                              .n_providers = o->n_providers};
  s->prog.cfg.rt = ox_session_rt(s);
}

/* --- memory and copies: the provider table's (host/partition/ep_memory.c) ---------- */

OnyxMemoryDevice ox_session_ep_memory(OnyxSession* s, int32_t ep, OnyxMemType mem) {
  return ox_ep_memory(s->prog.eps, ep, mem);
}

OnyxStatus* ox_session_check_tensor_limit(const OnyxSession* s, OnyxElemType type,
                                          const int64_t* dims, size_t rank) {
  return ox_tensor_limit_check(s->opts->max_tensor_bytes, type, dims, rank);
}

OnyxStatus* ox_session_alloc_tensor(OnyxSession* s, int32_t ep, OnyxMemType mem, OnyxElemType type,
                                    const int64_t* dims, size_t rank, OxTensor** out) {
  return ox_ep_alloc_tensor(s->prog.eps, ep, mem, s->opts->max_tensor_bytes, type, dims, rank, out);
}

OnyxStatus* ox_session_ep_copy(OnyxSession* s, int32_t ep, const OxTensor* src, OxTensor* dst) {
  return ox_ep_copy(s->prog.eps, ep, src, dst);
}

OnyxStatus* ox_copy_tensor(OnyxSession* s, const OxTensor* src, OxTensor* dst, int32_t src_ep,
                           int32_t dst_ep) {
  return ox_ep_copy_tensor(s->prog.eps, src, dst, src_ep, dst_ep);
}
