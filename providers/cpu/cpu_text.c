/* cpu_text.c — the string ops: StringNormalizer (10), StringConcat (20),
 * StringSplit (20), RegexFullMatch (20) and TfIdfVectorizer (9, over int32,
 * int64 or string tokens).
 *
 * Case changes are per Unicode code point through the C library's C.UTF-8
 * locale (towlower_l/towupper_l); invalid UTF-8 bytes are kept as they are.
 * RegexFullMatch takes the spec's RE2 syntax and runs it with the C library's
 * POSIX extended regular expressions (GNU flavour, which knows \w \W \s \S \b
 * \B outside brackets): the pattern is translated first — \d \D, the class
 * escapes inside brackets, and non-capturing groups "(?:" — and anything POSIX
 * cannot express (look-around, lazy quantifiers, named groups) is refused
 * with an error naming the node and the pattern.
 *
 * Strings are byte strings of a known length: tensor elements through
 * tensor_string_len, the entries of list attributes (stopwords,
 * pool_strings) through node_attr_strings_lens. A NUL byte is an ordinary
 * byte everywhere (matched, concatenated, split on, counted, compared).
 * Single-string attributes: StringSplit's delimiter is used with its length
 * (a NUL in it is a byte to split on); the keywords (case_change_action,
 * TfIdfVectorizer's mode) compare with their length, so a NUL makes them
 * unknown and refused; RegexFullMatch refuses a pattern holding a NUL (the
 * POSIX engine takes NUL-terminated patterns); StringNormalizer's locale is
 * not read (case mapping is C.UTF-8's for every locale). */
#include <locale.h>
#include <regex.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

#include "cpu_util.h"

/* --- Small string helpers ---------------------------------------------------------------- */

typedef struct Buf {
  char* p;
  size_t len, cap;
} Buf;

static bool buf_add(Buf* b, const char* s, size_t n) {
  if (n > PTRDIFF_MAX - 1 - b->len) return false;
  if (b->len + n + 1 > b->cap) {
    size_t need = b->len + n + 1, cap = b->cap ? b->cap : 64;
    while (cap < need)
      cap = cap > PTRDIFF_MAX / 2 ? need : cap * 2;
    char* p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
  return true;
}

static bool buf_adds(Buf* b, const char* s) {
  return buf_add(b, s, strlen(s));
}

/* String i of t and its byte length, NUL bytes included (a 1.0 host has no
 * tensor_string_len: there the string ends at its first NUL). */
static const char* text_str(const OnyxTensor* t, size_t i, size_t* len) {
  const OnyxHostApi* H = cpu_host;
  const char* s = H->tensor_string(t, i);
  if (!s) s = "";
  bool has_len =
      H->struct_size >= offsetof(OnyxHostApi, tensor_string_len) + sizeof H->tensor_string_len &&
      H->tensor_string_len;
  *len = has_len ? H->tensor_string_len(t, i) : strlen(s);
  return s;
}

/* A list-of-strings attribute (NULL, *count 0 when absent); *lens gets the
 * entries' byte lengths, NUL bytes included, or NULL from a host without
 * node_attr_strings_lens (then each entry ends at its first NUL). */
static const char* const* text_attr_strings(const OnyxNode* node, const char* name, size_t* count,
                                            const size_t** lens) {
  const OnyxHostApi* H = cpu_host;
  const char* const* s = H->node_attr_strings(node, name, count);
  *lens = NULL;
  if (!s || !*count) return s;
  size_t n_lens = 0;
  if (H->struct_size >=
          offsetof(OnyxHostApi, node_attr_strings_lens) + sizeof H->node_attr_strings_lens &&
      H->node_attr_strings_lens) {
    const size_t* l = H->node_attr_strings_lens(node, name, &n_lens);
    if (l && n_lens == *count) *lens = l;
  }
  return s;
}

/* Whether the attribute value (len bytes, NULs included) is the keyword. */
static bool text_is(const char* v, size_t len, const char* keyword) {
  return v && len == strlen(keyword) && !memcmp(v, keyword, len);
}

/* True when the run should stop (ABI 1.1; a 1.0 host never asks). */
static bool text_should_stop(const OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  return H->struct_size >= offsetof(OnyxHostApi, ctx_should_stop) + sizeof H->ctx_should_stop &&
         H->ctx_should_stop && H->ctx_should_stop(ctx) != 0;
}

static OnyxStatus* cpu_cancelled_text(const OnyxKernelContext* ctx, const char* op) {
  return cpu_ctx_error(ctx, ONYX_CANCELLED, "%s stopped: the run was cancelled", op);
}

/* Decodes one UTF-8 code point at s (n bytes left); *used gets its length.
 * Returns -1 for an invalid sequence (then *used = 1). */
static long utf8_decode(const unsigned char* s, size_t n, size_t* used) {
  *used = 1;
  if (s[0] < 0x80) return s[0];
  int len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 0;
  if (!len || (size_t)len > n) return -1;
  long cp = s[0] & (0x3f >> (len - 1));
  for (int i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return -1;
    cp = (cp << 6) | (s[i] & 0x3f);
  }
  *used = (size_t)len;
  return cp;
}

static size_t utf8_encode(long cp, char* out) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xe0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  out[0] = (char)(0xf0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  out[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* The C.UTF-8 locale for case mapping; (locale_t)0 when unavailable (then
 * only ASCII letters change case). Created once, freed when the library unloads. */
static locale_t utf8_loc;

static locale_t utf8_locale(void) {
  static int tried;
  if (!__atomic_load_n(&tried, __ATOMIC_ACQUIRE)) {
    locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    locale_t expected = (locale_t)0;
    if (l && !__atomic_compare_exchange_n(&utf8_loc, &expected, l, false, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE))
      freelocale(l); /* another thread won */
    __atomic_store_n(&tried, 1, __ATOMIC_RELEASE);
  }
  return __atomic_load_n(&utf8_loc, __ATOMIC_ACQUIRE);
}

/* The locale goes with the library: freed when the provider is unloaded. */
__attribute__((destructor)) static void utf8_locale_free(void) {
  locale_t l = __atomic_exchange_n(&utf8_loc, (locale_t)0, __ATOMIC_ACQ_REL);
  if (l) freelocale(l);
}

/* The n bytes of s with every code point lowered (upper = false) or raised;
 * malloc'ed and NUL-terminated, *out_len gets its length. */
static char* change_case(const char* s, size_t n, bool upper, size_t* out_len) {
  locale_t loc = utf8_locale();
  char* out = n <= (SIZE_MAX - 1) / 4 ? malloc(n * 4 + 1) : NULL;
  if (!out) return NULL;
  size_t w = 0;
  for (size_t i = 0; i < n;) {
    size_t used;
    long cp = utf8_decode((const unsigned char*)s + i, n - i, &used);
    if (cp < 0) {
      out[w++] = s[i++];
      continue;
    }
    long c2 = cp;
    if (loc)
      c2 = upper ? (long)towupper_l((wint_t)cp, loc) : (long)towlower_l((wint_t)cp, loc);
    else if (cp < 0x80)
      c2 =
          upper ? (cp >= 'a' && cp <= 'z' ? cp - 32 : cp) : (cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    w += utf8_encode(c2, out + w);
    i += used;
  }
  out[w] = '\0';
  *out_len = w;
  return out;
}

/* --- StringNormalizer ---------------------------------------------------------------------- */

typedef struct NormState {
  int action; /* 0 none, 1 lower, 2 upper */
  bool case_sensitive;
  char** stop; /* compared as is, or lowered when case-insensitive */
  size_t* stop_len;
  size_t n_stop;
} NormState;

static void norm_release(void* state) {
  NormState* s = state;
  if (!s) return;
  for (size_t i = 0; i < s->n_stop; i++)
    free(s->stop[i]);
  free(s->stop);
  free(s->stop_len);
  free(s);
}

static OnyxStatus* norm_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  const OnyxHostApi* H = cpu_host;
  NormState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  size_t len = 0;
  const char* action = H->node_attr_string(node, "case_change_action", &len);
  if (!action || text_is(action, len, "NONE"))
    s->action = 0;
  else if (text_is(action, len, "LOWER"))
    s->action = 1;
  else if (text_is(action, len, "UPPER"))
    s->action = 2;
  else {
    const char* nul = memchr(action, '\0', len);
    OnyxStatus* st =
        nul ? cpu_error(node, ONYX_INVALID_MODEL,
                        "attribute 'case_change_action' holds a NUL byte at offset %zu; want "
                        "LOWER, UPPER or NONE",
                        (size_t)(nul - action))
            : cpu_error(node, ONYX_INVALID_MODEL,
                        "case_change_action '%s' is not LOWER, UPPER or NONE", action);
    norm_release(s);
    return st;
  }
  s->case_sensitive = H->node_attr_int(node, "is_case_sensitive", 0) != 0;
  size_t n = 0;
  const size_t* lens = NULL;
  const char* const* stop = text_attr_strings(node, "stopwords", &n, &lens);
  s->stop = calloc(n ? n : 1, sizeof *s->stop);
  s->stop_len = calloc(n ? n : 1, sizeof *s->stop_len);
  if (!s->stop || !s->stop_len) {
    norm_release(s);
    return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    size_t sl = lens ? lens[i] : strlen(stop[i]);
    s->stop_len[i] = sl;
    if (s->case_sensitive) { /* the bytes, NULs included */
      if (sl < SIZE_MAX && (s->stop[i] = malloc(sl + 1))) {
        memcpy(s->stop[i], stop[i], sl);
        s->stop[i][sl] = '\0';
      }
    } else {
      s->stop[i] = change_case(stop[i], sl, false, &s->stop_len[i]);
    }
    s->n_stop++;
    if (!s->stop[i]) {
      norm_release(s);
      return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
    }
  }
  *out = s;
  return NULL;
}

/* 1: w (n bytes) is a stop word, 0: not, -1: out of memory. */
static int is_stopword(const NormState* s, const char* w, size_t n) {
  if (!s->n_stop) return 0;
  size_t kl = n;
  char* key = s->case_sensitive ? NULL : change_case(w, n, false, &kl);
  if (!s->case_sensitive && !key) return -1;
  const char* k = key ? key : w;
  bool hit = false;
  for (size_t i = 0; i < s->n_stop && !hit; i++)
    hit = s->stop_len[i] == kl && !memcmp(s->stop[i], k, kl);
  free(key);
  return hit;
}

static OnyxStatus* norm_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const NormState* s = state;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  size_t rank = H->tensor_rank(x);
  const int64_t* d = H->tensor_dims(x);
  if (rank != 1 && !(rank == 2 && d[0] == 1))
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input must be [C] or [1, C]");
  size_t n = H->tensor_elem_count(x), kept = 0;
  size_t* keep = H->ctx_scratch(ctx, (n ? n : 1) * sizeof *keep);
  if (!keep) return cpu_oom(ctx);
  for (size_t i = 0; i < n; i++) {
    size_t len;
    const char* w = text_str(x, i, &len);
    int stop = is_stopword(s, w, len);
    if (stop < 0) return cpu_oom(ctx);
    if (!stop) keep[kept++] = i;
  }
  int64_t dims[2] = {1, (int64_t)(kept ? kept : 1)};
  OnyxTensor* y = NULL;
  OnyxStatus* st =
      rank == 1 ? H->ctx_output(ctx, 0, dims + 1, 1, &y) : H->ctx_output(ctx, 0, dims, 2, &y);
  if (st) return st;
  if (!kept) return H->tensor_set_string(y, 0, "", 0);
  for (size_t i = 0; i < kept && !st; i++) {
    size_t len;
    const char* w = text_str(x, keep[i], &len);
    char* c = s->action ? change_case(w, len, s->action == 2, &len) : NULL;
    if (s->action && !c) return cpu_oom(ctx);
    st = H->tensor_set_string(y, i, c ? c : w, len);
    free(c);
  }
  return st;
}

/* --- StringConcat -------------------------------------------------------------------------- */

typedef struct ConcatRun {
  const OnyxTensor *a, *b;
  OnyxTensor* y;
  OnyxStatus* err;
} ConcatRun;

static void concat_row(void* user, const int64_t* in_off, const int64_t* in_step, size_t out_off,
                       size_t len) {
  ConcatRun* r = user;
  const OnyxHostApi* H = cpu_host;
  for (size_t i = 0; i < len && !r->err; i++) {
    size_t al, bl;
    const char* a = text_str(r->a, (size_t)(in_off[0] + (int64_t)i * in_step[0]), &al);
    const char* b = text_str(r->b, (size_t)(in_off[1] + (int64_t)i * in_step[1]), &bl);
    Buf buf = {0};
    if (!buf_add(&buf, a, al) || !buf_add(&buf, b, bl)) {
      free(buf.p);
      r->err = cpu_host->status_create(ONYX_OUT_OF_MEMORY, "StringConcat: out of memory");
      return;
    }
    r->err = H->tensor_set_string(r->y, out_off + i, buf.p ? buf.p : "", buf.len);
    free(buf.p);
  }
}

static OnyxStatus* concat_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxHostApi* H = cpu_host;
  ConcatRun r = {H->ctx_input(ctx, 0), H->ctx_input(ctx, 1), NULL, NULL};
  const int64_t* dims[2] = {H->tensor_dims(r.a), H->tensor_dims(r.b)};
  size_t ranks[2] = {H->tensor_rank(r.a), H->tensor_rank(r.b)};
  int64_t od[CPU_MAX_RANK];
  size_t orank = 0;
  if (ranks[0] > CPU_MAX_RANK || ranks[1] > CPU_MAX_RANK)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "rank above %d", CPU_MAX_RANK);
  OnyxStatus* st = cpu_bcast_shape(ctx, 2, dims, ranks, od, &orank);
  if (!st) st = H->ctx_output(ctx, 0, od, orank, &r.y);
  if (st) return st;
  CpuBcast plan;
  cpu_bcast_plan(&plan, od, orank, 2, dims, ranks);
  cpu_bcast_run(&plan, concat_row, &r);
  return r.err;
}

/* --- StringSplit ---------------------------------------------------------------------------- */

typedef struct SplitState {
  char* delim;      /* NULL: split on runs of whitespace (an empty delimiter) */
  size_t delim_len; /* >= 1 when delim is set; NUL bytes are ordinary */
  int64_t maxsplit; /* < 0: no limit */
} SplitState;

static void split_release(void* state) {
  SplitState* s = state;
  if (s) free(s->delim);
  free(s);
}

static OnyxStatus* split_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  SplitState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  size_t len = 0;
  const char* d = cpu_host->node_attr_string(node, "delimiter", &len);
  if (d && len) { /* the attribute's bytes as they are: "\0" splits on the NUL byte */
    s->delim = malloc(len);
    if (!s->delim) {
      free(s);
      return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
    }
    memcpy(s->delim, d, len);
    s->delim_len = len;
  }
  s->maxsplit = cpu_host->node_attr_int(node, "maxsplit", -1);
  *out = s;
  return NULL;
}

static bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Splits the n bytes at s as Python's bytes.split(delim, maxsplit) does;
 * calls emit for each piece (emit NULL: count only). Returns the number of
 * pieces. Every step moves forward by at least one byte (a delimiter is
 * never empty), so the loops end within n steps. */
static size_t split_one(const SplitState* st, const char* s, size_t n,
                        void (*emit)(void* u, const char* p, size_t n), void* u) {
  size_t pieces = 0;
  int64_t splits = 0;
  const char* end = s + n;
  if (st->delim) {
    const size_t dl = st->delim_len;
    const char* p = s;
    for (;;) {
      const char* hit = NULL;
      if (st->maxsplit < 0 || splits < st->maxsplit)
        hit = memmem(p, (size_t)(end - p), st->delim, dl);
      if (!hit) {
        if (emit) emit(u, p, (size_t)(end - p));
        return pieces + 1;
      }
      if (emit) emit(u, p, (size_t)(hit - p));
      pieces++;
      splits++;
      p = hit + dl;
    }
  }
  const char* p = s;
  for (;;) {
    while (p < end && is_space(*p))
      p++;
    if (p == end) return pieces;
    if (st->maxsplit >= 0 && splits >= st->maxsplit) { /* the rest, as is (like Python) */
      if (emit) emit(u, p, (size_t)(end - p));
      return pieces + 1;
    }
    const char* e = p;
    while (e < end && !is_space(*e))
      e++;
    if (emit) emit(u, p, (size_t)(e - p));
    pieces++;
    splits++;
    p = e;
  }
}

typedef struct SplitEmit {
  OnyxTensor* y;
  size_t base, k;
  OnyxStatus* err;
} SplitEmit;

static void split_emit(void* u, const char* p, size_t n) {
  SplitEmit* e = u;
  if (!e->err) e->err = cpu_host->tensor_set_string(e->y, e->base + e->k, p, n);
  e->k++;
}

static OnyxStatus* split_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const SplitState* st = state;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  size_t n = H->tensor_elem_count(x), rank = H->tensor_rank(x);
  if (rank + 1 > CPU_MAX_RANK) return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "rank too high");
  int64_t* counts = H->ctx_scratch(ctx, (n ? n : 1) * sizeof *counts);
  if (!counts) return cpu_oom(ctx);
  int64_t widest = 0;
  for (size_t i = 0; i < n; i++) {
    size_t len;
    const char* str = text_str(x, i, &len);
    counts[i] = (int64_t)split_one(st, str, len, NULL, NULL);
    if (counts[i] > widest) widest = counts[i];
  }
  int64_t dims[CPU_MAX_RANK];
  memcpy(dims, H->tensor_dims(x), rank * sizeof *dims);
  dims[rank] = widest;
  OnyxTensor *y = NULL, *z = NULL;
  OnyxStatus* err = H->ctx_output(ctx, 0, dims, rank + 1, &y);
  if (!err) err = H->ctx_output(ctx, 1, dims, rank, &z);
  if (err) return err;
  size_t total = n * (size_t)widest;
  for (size_t i = 0; i < total && !err; i++) /* padding */
    err = H->tensor_set_string(y, i, "", 0);
  cpu_memcpy(H->tensor_mutable_data(z), counts, n * sizeof *counts);
  for (size_t i = 0; i < n && !err; i++) {
    if (i % 1024 == 1023 && text_should_stop(ctx)) return cpu_cancelled_text(ctx, "StringSplit");
    size_t len;
    const char* str = text_str(x, i, &len);
    SplitEmit e = {y, i * (size_t)widest, 0, NULL};
    split_one(st, str, len, split_emit, &e);
    err = e.err;
  }
  return err;
}

/* --- RegexFullMatch ------------------------------------------------------------------------- */

typedef struct RegexState {
  regex_t re;
} RegexState;

static void regex_release(void* state) {
  RegexState* s = state;
  if (s) regfree(&s->re);
  free(s);
}

/* Translates the bracket expression starting at p ('[') into b; returns the
 * position of its closing ']' or NULL (with *why) when it cannot. POSIX
 * brackets have no escapes, so escaped literals move to where POSIX reads
 * them literally: ']' first, '^' not first, '-' last. */
static const char* bracket_to_posix(const char* p, Buf* b, const char** why) {
  Buf body = {0};
  bool negated = false, rbracket = false, caret = false, dash = false, ok = true;
  p++;
  if (*p == '^') {
    negated = true;
    p++;
  }
  if (*p == ']') { /* a leading ']' is literal in both syntaxes */
    rbracket = true;
    p++;
  }
  for (; *p && *p != ']' && ok; p++) {
    if (*p == '\\' && p[1]) {
      char c = *++p;
      if (c == 'd')
        ok = buf_adds(&body, "[:digit:]");
      else if (c == 'w')
        ok = buf_adds(&body, "[:alnum:]_");
      else if (c == 's')
        ok = buf_adds(&body, "[:space:]");
      else if (c == 'D' || c == 'W' || c == 'S') {
        *why = "a negated class escape inside brackets";
        ok = false;
      } else if (c == ']')
        rbracket = true;
      else if (c == '^')
        caret = true;
      else if (c == '-')
        dash = true;
      else if (c == 'n' || c == 't')
        ok = buf_add(&body, c == 'n' ? "\n" : "\t", 1);
      else
        ok = buf_add(&body, &c, 1); /* \. \\ \[ ... are the character itself */
      continue;
    }
    if (*p == '[' && p[1] == ':') { /* a POSIX class [:alpha:] inside: copy it whole */
      const char* e = strstr(p + 2, ":]");
      if (!e) break;
      ok = buf_add(&body, p, (size_t)(e + 2 - p));
      p = e + 1;
      continue;
    }
    ok = buf_add(&body, p, 1);
  }
  if (ok && *p != ']') {
    *why = "an unterminated bracket expression";
    ok = false;
  }
  if (ok) ok = buf_adds(b, negated ? "[^" : "[");
  if (ok && rbracket) ok = buf_adds(b, "]");
  if (ok && body.len) ok = buf_add(b, body.p, body.len);
  if (ok && caret) ok = buf_adds(b, "^");
  if (ok && dash) ok = buf_adds(b, "-");
  if (ok) ok = buf_adds(b, "]");
  free(body.p);
  if (!ok && !*why) *why = "out of memory";
  return ok ? p : NULL;
}

/* RE2 pattern -> POSIX ERE (GNU), anchored for a full match. Returns NULL
 * with *why set for what POSIX cannot express. */
static char* re2_to_posix(const char* pat, const char** why) {
  Buf b = {0};
  bool ok = buf_adds(&b, "^(");
  for (const char* p = pat; *p && ok; p++) {
    if (*p == '[') {
      p = bracket_to_posix(p, &b, why);
      ok = p != NULL;
      if (!ok) break;
      continue;
    }
    if (*p == '\\' && p[1]) {
      char c = *++p;
      if (c == 'd')
        ok = buf_adds(&b, "[[:digit:]]");
      else if (c == 'D')
        ok = buf_adds(&b, "[^[:digit:]]");
      else if (strchr("wWsSbB", c) || strchr(".[]{}()*+?|^$\\/-", c)) {
        char e[2] = {'\\', c};
        ok = buf_add(&b, e, 2);
      } else if (c == 'n' || c == 't') {
        ok = buf_add(&b, c == 'n' ? "\n" : "\t", 1);
      } else {
        *why = "an escape POSIX regular expressions do not have";
        ok = false;
      }
      continue;
    }
    if (*p == '(' && p[1] == '?') {
      if (p[2] == ':') {
        ok = buf_add(&b, "(", 1);
        p += 2;
        continue;
      }
      *why = "a (?...) group other than (?:...)";
      ok = false;
      continue;
    }
    if (*p == '.') { /* RE2's dot: any character but a newline (a NUL byte too) */
      ok = buf_adds(&b, "[^\n]");
      continue;
    }
    if ((*p == '*' || *p == '+' || *p == '?' || *p == '}') && p[1] == '?') {
      *why = "a lazy quantifier";
      ok = false;
      continue;
    }
    ok = buf_add(&b, p, 1);
  }
  if (ok) ok = buf_adds(&b, ")$");
  if (!ok) {
    if (!*why) *why = "out of memory";
    free(b.p);
    return NULL;
  }
  return b.p;
}

static OnyxStatus* regex_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  size_t len = 0;
  const char* pat = cpu_host->node_attr_string(node, "pattern", &len);
  if (!pat) return cpu_error(node, ONYX_INVALID_MODEL, "the attribute 'pattern' is missing");
  const char* nul = memchr(pat, '\0', len);
  if (nul) /* regcomp reads the pattern up to its first NUL: refuse rather than cut it */
    return cpu_error(node, ONYX_NOT_IMPLEMENTED,
                     "attribute 'pattern' holds a NUL byte at offset %zu, which the POSIX regex "
                     "engine cannot take",
                     (size_t)(nul - pat));
  const char* why = NULL;
  char* posix = re2_to_posix(pat, &why);
  if (!posix)
    return cpu_error(node, ONYX_NOT_IMPLEMENTED,
                     "pattern '%s' uses %s, which the POSIX regex engine cannot run", pat, why);
  RegexState* s = calloc(1, sizeof *s);
  if (!s) {
    free(posix);
    return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  }
  int rc = regcomp(&s->re, posix, REG_EXTENDED | REG_NOSUB);
  if (rc) {
    char msg[256];
    regerror(rc, &s->re, msg, sizeof msg);
    free(s);
    OnyxStatus* st =
        cpu_error(node, ONYX_INVALID_MODEL, "pattern '%s' does not compile: %s", pat, msg);
    free(posix);
    return st;
  }
  free(posix);
  *out = s;
  return NULL;
}

static OnyxStatus* regex_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  RegexState* s = state;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  OnyxTensor* y = NULL;
  OnyxStatus* st = H->ctx_output(ctx, 0, H->tensor_dims(x), H->tensor_rank(x), &y);
  if (st) return st;
  uint8_t* out = H->tensor_mutable_data(y);
  for (size_t i = 0, n = H->tensor_elem_count(x); i < n; i++) {
    if (i % 256 == 255 && text_should_stop(ctx)) return cpu_cancelled_text(ctx, "RegexFullMatch");
    /* REG_STARTEND: the whole string is matched, NUL bytes included. */
    size_t len;
    const char* str = text_str(x, i, &len);
    regmatch_t span = {.rm_so = 0, .rm_eo = (regoff_t)len};
    out[i] = (size_t)span.rm_eo == len && regexec(&s->re, str, 1, &span, REG_STARTEND) == 0;
  }
  return NULL;
}

/* --- TfIdfVectorizer ------------------------------------------------------------------------- */

/* The pool as n-gram entries: each has n tokens (ints or strings) and an
 * output index. Lookups are linear per n (pools are small in practice). */
typedef struct TfIdfState {
  int mode; /* 0 TF, 1 IDF, 2 TFIDF */
  int64_t min_n, max_n, max_skip;
  bool strings;
  size_t pool_len;
  const int64_t* pool_ints;
  const char* const* pool_strs;
  const size_t* pool_lens; /* their byte lengths; NULL: each ends at its first NUL */
  const int64_t* counts;   /* ngram_counts: start of each n's group in the pool */
  size_t n_counts;
  const int64_t* indexes;
  size_t n_indexes;
  const float* weights;
  size_t n_weights;
  int64_t out_size;
} TfIdfState;

static OnyxStatus* tfidf_create(OnyxEp* ep, const OnyxNode* node, void* user, void** out) {
  (void)ep;
  (void)user;
  const OnyxHostApi* H = cpu_host;
  TfIdfState* s = calloc(1, sizeof *s);
  if (!s) return cpu_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  size_t len = 0;
  const char* mode = H->node_attr_string(node, "mode", &len);
  s->mode = text_is(mode, len, "TF")      ? 0
            : text_is(mode, len, "IDF")   ? 1
            : text_is(mode, len, "TFIDF") ? 2
                                          : -1;
  s->min_n = H->node_attr_int(node, "min_gram_length", 0);
  s->max_n = H->node_attr_int(node, "max_gram_length", 0);
  s->max_skip = H->node_attr_int(node, "max_skip_count", 0);
  s->counts = H->node_attr_ints(node, "ngram_counts", &s->n_counts);
  s->indexes = H->node_attr_ints(node, "ngram_indexes", &s->n_indexes);
  s->weights = H->node_attr_floats(node, "weights", &s->n_weights);
  size_t n_int = 0, n_str = 0;
  s->pool_ints = H->node_attr_ints(node, "pool_int64s", &n_int);
  s->pool_strs = text_attr_strings(node, "pool_strings", &n_str, &s->pool_lens);
  s->strings = n_str > 0;
  s->pool_len = s->strings ? n_str : n_int;
  OnyxStatus* st = NULL;
  if (s->mode < 0)
    st = mode && memchr(mode, '\0', len)
             ? cpu_error(node, ONYX_INVALID_MODEL,
                         "attribute 'mode' holds a NUL byte; it must be TF, IDF or TFIDF")
             : cpu_error(node, ONYX_INVALID_MODEL, "mode must be TF, IDF or TFIDF");
  else if (s->min_n < 1 || s->max_n < s->min_n || s->max_skip < 0)
    st = cpu_error(node, ONYX_INVALID_MODEL,
                   "need 1 <= min_gram_length (%lld) <= max_gram_length (%lld) and "
                   "max_skip_count (%lld) >= 0",
                   (long long)s->min_n, (long long)s->max_n, (long long)s->max_skip);
  else if ((size_t)s->max_n > s->n_counts)
    st = cpu_error(node, ONYX_INVALID_MODEL,
                   "ngram_counts has %zu entries; max_gram_length %lld needs one per length",
                   s->n_counts, (long long)s->max_n);
  else if (s->n_weights && s->n_weights != s->n_indexes)
    st = cpu_error(node, ONYX_INVALID_MODEL, "weights has %zu entries, ngram_indexes %zu",
                   s->n_weights, s->n_indexes);
  /* The pool must hold exactly n_indexes n-grams. */
  size_t grams = 0;
  for (size_t n = 1; !st && n <= s->n_counts; n++) {
    int64_t start = s->counts[n - 1];
    int64_t end = n < s->n_counts ? s->counts[n] : (int64_t)s->pool_len;
    if (start < 0 || end < start || end > (int64_t)s->pool_len || (end - start) % (int64_t)n)
      st = cpu_error(node, ONYX_INVALID_MODEL,
                     "ngram_counts[%zu] = %lld does not split the pool of %zu into %zu-grams",
                     n - 1, (long long)start, s->pool_len, n);
    else
      grams += (size_t)((end - start) / (int64_t)n);
  }
  if (!st && grams != s->n_indexes)
    st = cpu_error(node, ONYX_INVALID_MODEL, "the pool holds %zu n-grams but ngram_indexes has %zu",
                   grams, s->n_indexes);
  /* The output has max(ngram_indexes) + 1 floats a row: an index must keep
   * that size representable (the run's memory limit judges the rest). */
  const int64_t max_index = (int64_t)(PTRDIFF_MAX / (ptrdiff_t)sizeof(float)) - 1;
  for (size_t i = 0; !st && i < s->n_indexes; i++) {
    if (s->indexes[i] < 0 || s->indexes[i] > max_index)
      st =
          cpu_error(node, ONYX_INVALID_MODEL, "ngram_indexes[%zu] = %lld is out of range [0, %lld]",
                    i, (long long)s->indexes[i], (long long)max_index);
    else if (s->indexes[i] + 1 > s->out_size)
      s->out_size = s->indexes[i] + 1;
  }
  if (st) {
    free(s);
    return st;
  }
  *out = s;
  return NULL;
}

/* Token k of row r as an int or a string. */
typedef struct Tokens {
  const OnyxTensor* x;
  int32_t type;
  size_t row_len;
} Tokens;

static bool token_eq_pool(const TfIdfState* s, const Tokens* t, size_t tok, size_t pool_i) {
  const OnyxHostApi* H = cpu_host;
  if (s->strings) { /* byte strings: equal lengths and bytes, NULs included */
    size_t len;
    const char* w = text_str(t->x, tok, &len);
    const char* p = s->pool_strs[pool_i];
    size_t plen = s->pool_lens ? s->pool_lens[pool_i] : strlen(p);
    return plen == len && !memcmp(w, p, len);
  }
  const void* d = H->tensor_data(t->x);
  int64_t v = t->type == ONYX_ELEM_INT32 ? ((const int32_t*)d)[tok] : ((const int64_t*)d)[tok];
  return v == s->pool_ints[pool_i];
}

/* Index of the n-gram formed by tokens pos, pos+step, ... (n of them) in the
 * pool group of length n, or -1. */
static int64_t find_gram(const TfIdfState* s, const Tokens* t, size_t base, size_t pos, size_t step,
                         size_t n, size_t* gram_ordinal_base) {
  int64_t start = s->counts[n - 1];
  int64_t end = n < s->n_counts ? s->counts[n] : (int64_t)s->pool_len;
  for (int64_t g = start; g < end; g += (int64_t)n) {
    bool eq = true;
    for (size_t k = 0; k < n && eq; k++)
      eq = token_eq_pool(s, t, base + pos + k * step, (size_t)g + k);
    if (eq) return (int64_t)gram_ordinal_base[n - 1] + (g - start) / (int64_t)n;
  }
  return -1;
}

static OnyxStatus* tfidf_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = cpu_host;
  const TfIdfState* s = state;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  size_t rank = H->tensor_rank(x);
  const int64_t* d = H->tensor_dims(x);
  Tokens t = {x, H->tensor_elem_type(x), 0};
  if ((t.type == ONYX_ELEM_STRING) != s->strings)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input is %s but the pool holds %s",
                         cpu_elem_name(t.type), s->strings ? "strings" : "integers");
  if (rank != 1 && rank != 2)
    return cpu_ctx_error(ctx, ONYX_INVALID_ARGUMENT, "input must be [C] or [N, C]");
  size_t rows = rank == 2 ? (size_t)d[0] : 1;
  t.row_len = (size_t)d[rank - 1];
  int64_t od[2] = {(int64_t)rows, s->out_size};
  OnyxTensor* y = NULL;
  OnyxStatus* st =
      rank == 2 ? H->ctx_output(ctx, 0, od, 2, &y) : H->ctx_output(ctx, 0, od + 1, 1, &y);
  if (st) return st;
  float* out = H->tensor_mutable_data(y);
  memset(out, 0, rows * (size_t)s->out_size * sizeof *out);
  size_t ordinal_base[64] = {0}; /* first n-gram ordinal of each length */
  for (size_t n = 1; n < s->n_counts && n < 64; n++) {
    int64_t start = s->counts[n - 1], end = s->counts[n];
    ordinal_base[n] = ordinal_base[n - 1] + (size_t)((end - start) / (int64_t)n);
  }
  for (size_t r = 0; r < rows; r++) {
    float* o = out + r * (size_t)s->out_size;
    size_t base = r * t.row_len;
    for (size_t n = (size_t)s->min_n; n <= (size_t)s->max_n && n < 64 && n <= t.row_len; n++) {
      /* Unigrams do not depend on the skip: count them once. An n-gram with
       * skip k spans (n - 1) * (k + 1) + 1 tokens, so skips beyond
       * (row_len - 1) / (n - 1) - 1 find nothing: the row bounds the loop,
       * whatever max_skip_count says. */
      size_t skips = 0;
      if (n > 1) {
        size_t fit = (t.row_len - 1) / (n - 1) - 1; /* row_len >= n: fit >= 0 */
        skips = (uint64_t)s->max_skip < fit ? (size_t)s->max_skip : fit;
      }
      for (size_t skip = 0; skip <= skips; skip++) {
        if (text_should_stop(ctx)) return cpu_cancelled_text(ctx, "TfIdfVectorizer");
        size_t step = skip + 1;
        for (size_t pos = 0; pos + (n - 1) * step < t.row_len; pos++) {
          int64_t g = find_gram(s, &t, base, pos, step, n, ordinal_base);
          if (g >= 0) o[s->indexes[g]] += 1.0f;
        }
      }
    }
    for (size_t g = 0; g < s->n_indexes; g++) {
      float* v = &o[s->indexes[g]];
      float w = s->n_weights ? s->weights[g] : 1.0f;
      if (s->mode == 1)
        *v = *v > 0 ? w : 0.0f;
      else if (s->mode == 2)
        *v *= w;
    }
  }
  return NULL;
}

/* --- Registration ---------------------------------------------------------------------------- */

static const int32_t str_types[] = {ONYX_ELEM_STRING};
static const int32_t tfidf_types[] = {ONYX_ELEM_STRING, ONYX_ELEM_INT32, ONYX_ELEM_INT64};
static const OnyxTypeConstraint str_tc[] = {{"T", str_types, 1}};
static const OnyxTypeConstraint regex_tc[] = {{"T1", str_types, 1}};
static const OnyxTypeConstraint split_tc[] = {{"T1", str_types, 1}};
static const OnyxTypeConstraint tfidf_tc[] = {{"T", tfidf_types, 3}, {"T1", cpu_types_f32, 1}};

static const CpuKernelSpec text_specs[] = {
    {"StringNormalizer", 10, ONYX_OPSET_LATEST, NULL, 0, norm_create, norm_compute, norm_release,
     NULL},
    {"StringConcat", 20, ONYX_OPSET_LATEST, str_tc, 1, NULL, concat_compute, NULL, NULL},
    {"StringSplit", 20, ONYX_OPSET_LATEST, split_tc, 1, split_create, split_compute, split_release,
     NULL},
    {"RegexFullMatch", 20, ONYX_OPSET_LATEST, regex_tc, 1, regex_create, regex_compute,
     regex_release, NULL},
    {"TfIdfVectorizer", 9, ONYX_OPSET_LATEST, tfidf_tc, 2, tfidf_create, tfidf_compute,
     cpu_free_state, NULL},
};

OnyxStatus* cpu_register_text(OnyxKernelRegistry* r) {
  return cpu_register_specs(r, text_specs, CPU_ARRAY_LEN(text_specs));
}
