/* ox_common.h — host-internal utilities shared by host/, schemas/ and
 * kernels-registry/: status objects, logging, growable arrays, string maps.
 * Never included by providers (they see only sdk/include). */
#ifndef OX_COMMON_H
#define OX_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "onyx/onyx_types.h"

#if defined(__GNUC__)
#define OX_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define OX_UNUSED       __attribute__((unused))
#else
#define OX_PRINTF(a, b)
#define OX_UNUSED
#endif

#define OX_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* --- Status --------------------------------------------------------------- */
/* The concrete status: a code and a heap message. */
struct OnyxStatus {
  OnyxStatusCode code;
  char* message;
};

OnyxStatus* ox_status(OnyxStatusCode code, const char* fmt, ...) OX_PRINTF(2, 3);
OnyxStatus* ox_status_v(OnyxStatusCode code, const char* fmt, va_list ap);
/* Returns a new status "<prefix>: <st's message>" with st's code, releasing st.
 * NULL stays NULL. Used to add context ("model.onnx: node 'x' (Conv): ..."). */
OnyxStatus* ox_status_wrap(OnyxStatus* st, const char* fmt, ...) OX_PRINTF(2, 3);
void ox_status_free(OnyxStatus* st);
OnyxStatus* ox_oom(void); /* ONYX_OUT_OF_MEMORY "out of memory" */

/* Returns early with the status when an expression fails. */
#define OX_TRY(expr)                                                                               \
  do {                                                                                             \
    OnyxStatus* ox_try_st_ = (expr);                                                               \
    if (ox_try_st_) return ox_try_st_;                                                             \
  } while (0)

/* --- Logging --------------------------------------------------------------- */
typedef void (*OxLogSink)(void* user, OnyxLogSeverity sev, const char* msg);
/* Process-wide default sink: stderr, minimum severity WARNING (ONYX_LOG_LEVEL
 * env var: verbose|info|warning|error overrides). */
void ox_log(OnyxLogSeverity sev, const char* fmt, ...) OX_PRINTF(2, 3);
void ox_log_to(OxLogSink sink, void* user, OnyxLogSeverity min_sev, OnyxLogSeverity sev,
               const char* fmt, ...) OX_PRINTF(5, 6);
OnyxLogSeverity ox_log_default_severity(void);
const char* ox_log_severity_name(OnyxLogSeverity s);

/* --- Memory and strings ------------------------------------------------------ */
char* ox_strdup(const char* s); /* NULL for NULL or OOM */
char* ox_strndup(const char* s, size_t n);
/* `name` is one whole item of `list`, items separated by `sep` (e.g. "," or
 * ", "); false for a NULL list. */
bool ox_list_has(const char* list, const char* sep, const char* name);
char* ox_asprintf(const char* fmt, ...) OX_PRINTF(1, 2); /* NULL on OOM */
/* Overflow-checked a*b; false on overflow. */
static inline bool ox_mul_ok(size_t a, size_t b, size_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
/* Grows *arr (of *cap elements of elem bytes) so that it holds need; false
 * on OOM (the array is untouched). */
bool ox_grow(void** arr, size_t* cap, size_t need, size_t elem);

/* A growable text buffer, for reports. */
typedef struct OxStr {
  char* data;
  size_t len, cap;
  bool oom;
} OxStr;
void ox_str_addf(OxStr* s, const char* fmt, ...) OX_PRINTF(2, 3);
/* Appends text (NULL: "") escaped as the `onyx` command prints names: a
 * backslash as \\, newline, CR and tab as \n \r \t, other C0 controls,
 * DEL and C1 controls (UTF-8 0xc2 0x80..0x9f) as \xHH per byte; then
 * spaces up to `width` bytes. A name from a model cannot start a terminal
 * sequence or a line of its own in a report. */
void ox_str_add_escaped(OxStr* s, const char* text, size_t width);
/* Takes the text (never NULL unless OOM) and resets s. */
char* ox_str_take(OxStr* s);
void ox_str_free(OxStr* s);

/* --- String -> pointer map (open addressing; keys are borrowed) --------------- */
typedef struct OxMap {
  const char** keys;
  void** vals;
  size_t cap, count;
} OxMap;
void* ox_map_get(const OxMap* m, const char* key);     /* NULL if absent */
bool ox_map_put(OxMap* m, const char* key, void* val); /* replaces; false on OOM */
void ox_map_free(OxMap* m);

/* --- Element types ---------------------------------------------------------- */
size_t ox_elem_size(OnyxElemType t); /* 0 for strings/sub-byte/unknown */
const char* ox_elem_name(OnyxElemType t);
/* Bit for a type in a type-set mask; every type < 64. */
#define OX_T(t) (UINT64_C(1) << (t))

#endif /* OX_COMMON_H */
