/* status.c — error values, logging and small utilities. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "ox_common.h"

static OnyxStatus ox_oom_status = {ONYX_OUT_OF_MEMORY, (char*)"out of memory"};

OnyxStatus* ox_oom(void) {
  OnyxStatus* st = malloc(sizeof *st);
  if (!st) return &ox_oom_status; /* static fallback: ox_status_free knows it */
  st->code = ONYX_OUT_OF_MEMORY;
  st->message = ox_strdup("out of memory");
  return st;
}

OnyxStatus* ox_status_v(OnyxStatusCode code, const char* fmt, va_list ap) {
  if (code == ONYX_OK) return NULL;
  OnyxStatus* st = malloc(sizeof *st);
  if (!st) return &ox_oom_status;
  st->code = code;
  va_list cp;
  va_copy(cp, ap);
  int n = vsnprintf(NULL, 0, fmt, cp);
  va_end(cp);
  st->message = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (st->message) vsnprintf(st->message, (size_t)n + 1, fmt, ap);
  return st;
}

OnyxStatus* ox_status(OnyxStatusCode code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  OnyxStatus* st = ox_status_v(code, fmt, ap);
  va_end(ap);
  return st;
}

OnyxStatus* ox_status_wrap(OnyxStatus* st, const char* fmt, ...) {
  if (!st || st == &ox_oom_status) return st;
  va_list ap;
  va_start(ap, fmt);
  char prefix[1024];
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  char* msg = ox_asprintf("%s: %s", prefix, st->message ? st->message : "");
  if (msg) {
    free(st->message);
    st->message = msg;
  }
  return st;
}

void ox_status_free(OnyxStatus* st) {
  if (!st || st == &ox_oom_status) return;
  free(st->message);
  free(st);
}

/* --- logging --------------------------------------------------------------- */
static const char* const ox_sev_names[] = {"verbose", "info", "warning", "error", "fatal"};

const char* ox_log_severity_name(OnyxLogSeverity s) {
  return (unsigned)s < OX_ARRAY_LEN(ox_sev_names) ? ox_sev_names[s] : "?";
}

static OnyxLogSeverity ox_default_sev = ONYX_LOG_WARNING;
static pthread_once_t ox_sev_once = PTHREAD_ONCE_INIT;

static void ox_read_log_env(void) {
  const char* e = getenv("ONYX_LOG_LEVEL");
  if (!e) return;
  for (size_t i = 0; i < OX_ARRAY_LEN(ox_sev_names); i++)
    if (!strcasecmp(e, ox_sev_names[i])) ox_default_sev = (OnyxLogSeverity)i;
}

OnyxLogSeverity ox_log_default_severity(void) {
  pthread_once(&ox_sev_once, ox_read_log_env);
  return ox_default_sev;
}

static void ox_vlog_to(OxLogSink sink, void* user, OnyxLogSeverity min_sev, OnyxLogSeverity sev,
                       const char* fmt, va_list ap) {
  if (sev < min_sev) return;
  char buf[2048];
  vsnprintf(buf, sizeof buf, fmt, ap);
  if (sink) {
    sink(user, sev, buf);
    return;
  }
  fprintf(stderr, "onyx %s: %s\n", ox_log_severity_name(sev), buf);
}

void ox_log_to(OxLogSink sink, void* user, OnyxLogSeverity min_sev, OnyxLogSeverity sev,
               const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ox_vlog_to(sink, user, min_sev, sev, fmt, ap);
  va_end(ap);
}

void ox_log(OnyxLogSeverity sev, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ox_vlog_to(NULL, NULL, ox_log_default_severity(), sev, fmt, ap);
  va_end(ap);
}

/* --- strings and arrays --------------------------------------------------------- */
char* ox_strdup(const char* s) {
  return s ? strdup(s) : NULL;
}
char* ox_strndup(const char* s, size_t n) {
  return s ? strndup(s, n) : NULL;
}

bool ox_list_has(const char* list, const char* sep, const char* name) {
  size_t len = strlen(name), sep_len = strlen(sep);
  for (const char* p = list; p && *p;) {
    const char* end = sep_len ? strstr(p, sep) : NULL;
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == len && !strncmp(p, name, n)) return true;
    p = end ? end + sep_len : NULL;
  }
  return false;
}

char* ox_asprintf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char* out = NULL;
  if (vasprintf(&out, fmt, ap) < 0) out = NULL;
  va_end(ap);
  return out;
}

bool ox_grow(void** arr, size_t* cap, size_t need, size_t elem) {
  if (need <= *cap) return true;
  size_t ncap = *cap ? *cap : 4;
  while (ncap < need) {
    if (ncap > SIZE_MAX / 2) return false;
    ncap *= 2;
  }
  size_t bytes;
  if (!ox_mul_ok(ncap, elem, &bytes)) return false;
  void* p = realloc(*arr, bytes);
  if (!p) return false;
  memset((char*)p + *cap * elem, 0, (ncap - *cap) * elem);
  *arr = p;
  *cap = ncap;
  return true;
}

void ox_str_addf(OxStr* s, const char* fmt, ...) {
  if (s->oom) return;
  va_list ap;
  va_start(ap, fmt);
  va_list cp;
  va_copy(cp, ap);
  int n = vsnprintf(NULL, 0, fmt, cp);
  va_end(cp);
  if (n < 0 || !ox_grow((void**)&s->data, &s->cap, s->len + (size_t)n + 1, 1)) {
    s->oom = true;
    va_end(ap);
    return;
  }
  vsnprintf(s->data + s->len, (size_t)n + 1, fmt, ap);
  s->len += (size_t)n;
  va_end(ap);
}

void ox_str_add_escaped(OxStr* s, const char* text, size_t width) {
  size_t start = s->len;
  for (const unsigned char* c = (const unsigned char*)(text ? text : ""); *c; c++) {
    const bool c1 = c[0] == 0xc2 && c[1] >= 0x80 && c[1] <= 0x9f;
    if (*c == '\\')
      ox_str_addf(s, "\\\\");
    else if (*c == '\n')
      ox_str_addf(s, "\\n");
    else if (*c == '\r')
      ox_str_addf(s, "\\r");
    else if (*c == '\t')
      ox_str_addf(s, "\\t");
    else if (*c < 0x20 || *c == 0x7f)
      ox_str_addf(s, "\\x%02x", *c);
    else if (c1)
      ox_str_addf(s, "\\x%02x\\x%02x", c[0], c[1]), c++;
    else
      ox_str_addf(s, "%c", *c);
  }
  if (!s->oom && s->len - start < width) ox_str_addf(s, "%*s", (int)(width - (s->len - start)), "");
}

char* ox_str_take(OxStr* s) {
  char* out = s->oom ? NULL : (s->data ? s->data : ox_strdup(""));
  if (s->oom) free(s->data);
  *s = (OxStr){0};
  return out;
}

void ox_str_free(OxStr* s) {
  free(s->data);
  *s = (OxStr){0};
}

/* --- string map: open addressing, FNV-1a ------------------------------------------ */
static size_t ox_hash(const char* s) {
  size_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

void* ox_map_get(const OxMap* m, const char* key) {
  if (!m->cap) return NULL;
  for (size_t i = ox_hash(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (!m->keys[i]) return NULL;
    if (!strcmp(m->keys[i], key)) return m->vals[i];
  }
}

static bool ox_map_rehash(OxMap* m, size_t ncap) {
  const char** keys = calloc(ncap, sizeof *keys);
  void** vals = calloc(ncap, sizeof *vals);
  if (!keys || !vals) {
    free(keys);
    free(vals);
    return false;
  }
  for (size_t j = 0; j < m->cap; j++) {
    if (!m->keys[j]) continue;
    size_t i = ox_hash(m->keys[j]) & (ncap - 1);
    while (keys[i])
      i = (i + 1) & (ncap - 1);
    keys[i] = m->keys[j];
    vals[i] = m->vals[j];
  }
  free(m->keys);
  free(m->vals);
  m->keys = keys;
  m->vals = vals;
  m->cap = ncap;
  return true;
}

bool ox_map_put(OxMap* m, const char* key, void* val) {
  if ((m->count + 1) * 2 > m->cap && !ox_map_rehash(m, m->cap ? m->cap * 2 : 16)) return false;
  size_t i = ox_hash(key) & (m->cap - 1);
  while (m->keys[i] && strcmp(m->keys[i], key))
    i = (i + 1) & (m->cap - 1);
  if (!m->keys[i]) m->count++;
  m->keys[i] = key;
  m->vals[i] = val;
  return true;
}

void ox_map_free(OxMap* m) {
  free(m->keys);
  free(m->vals);
  *m = (OxMap){0};
}

/* --- element types: one table ------------------------------------------------------ */
static const struct {
  const char* name;
  uint8_t size;
} ox_elem_table[ONYX_ELEM_TYPE_COUNT] = {
    [ONYX_ELEM_UNDEFINED] = {"undefined", 0},
    [ONYX_ELEM_FLOAT32] = {"float32", 4},
    [ONYX_ELEM_UINT8] = {"uint8", 1},
    [ONYX_ELEM_INT8] = {"int8", 1},
    [ONYX_ELEM_UINT16] = {"uint16", 2},
    [ONYX_ELEM_INT16] = {"int16", 2},
    [ONYX_ELEM_INT32] = {"int32", 4},
    [ONYX_ELEM_INT64] = {"int64", 8},
    [ONYX_ELEM_STRING] = {"string", 0},
    [ONYX_ELEM_BOOL] = {"bool", 1},
    [ONYX_ELEM_FLOAT16] = {"float16", 2},
    [ONYX_ELEM_FLOAT64] = {"float64", 8},
    [ONYX_ELEM_UINT32] = {"uint32", 4},
    [ONYX_ELEM_UINT64] = {"uint64", 8},
    [ONYX_ELEM_COMPLEX64] = {"complex64", 8},
    [ONYX_ELEM_COMPLEX128] = {"complex128", 16},
    [ONYX_ELEM_BFLOAT16] = {"bfloat16", 2},
    [ONYX_ELEM_FLOAT8E4M3FN] = {"float8e4m3fn", 1},
    [ONYX_ELEM_FLOAT8E4M3FNUZ] = {"float8e4m3fnuz", 1},
    [ONYX_ELEM_FLOAT8E5M2] = {"float8e5m2", 1},
    [ONYX_ELEM_FLOAT8E5M2FNUZ] = {"float8e5m2fnuz", 1},
    [ONYX_ELEM_UINT4] = {"uint4", 0},
    [ONYX_ELEM_INT4] = {"int4", 0},
    [ONYX_ELEM_FLOAT4E2M1] = {"float4e2m1", 0},
    [ONYX_ELEM_FLOAT8E8M0] = {"float8e8m0", 1},
    [ONYX_ELEM_UINT2] = {"uint2", 0},
    [ONYX_ELEM_INT2] = {"int2", 0},
};

size_t ox_elem_size(OnyxElemType t) {
  return (unsigned)t < ONYX_ELEM_TYPE_COUNT ? ox_elem_table[t].size : 0;
}

const char* ox_elem_name(OnyxElemType t) {
  return (unsigned)t < ONYX_ELEM_TYPE_COUNT && ox_elem_table[t].name ? ox_elem_table[t].name : "?";
}
