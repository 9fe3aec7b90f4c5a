/* npy.c — NumPy .npy reader and writer (npy.h).
 *
 * A file is the magic "\x93NUMPY", a major and a minor version byte, the
 * header length (uint16 little-endian in version 1, uint32 in 2 and 3),
 * then the header: a Python dict literal with exactly the keys 'descr',
 * 'fortran_order' and 'shape', padded with spaces and ended by '\n'. The
 * data follows in C order. The parser below accepts that dict literal with
 * any whitespace and an optional trailing comma, in any key order, and
 * nothing else. */
#include "npy.h"

#include "../../common/ox_checked.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c reads and writes little-endian data in place: a big-endian host needs byte swaps"
#endif

static const char kMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

static const struct {
  NpyType type;
  const char* descr;
  size_t size;
} kTypes[] = {
    {NPY_FLOAT32, "<f4", 4}, {NPY_FLOAT64, "<f8", 8}, {NPY_INT64, "<i8", 8},
    {NPY_INT32, "<i4", 4},   {NPY_UINT8, "|u1", 1},   {NPY_BOOL, "|b1", 1},
};
enum { kTypeCount = sizeof kTypes / sizeof kTypes[0] };

size_t npy_elem_size(NpyType t) {
  for (size_t i = 0; i < kTypeCount; i++)
    if (kTypes[i].type == t) return kTypes[i].size;
  return 0;
}

const char* npy_descr(NpyType t) {
  for (size_t i = 0; i < kTypeCount; i++)
    if (kTypes[i].type == t) return kTypes[i].descr;
  return "?";
}

static int fail(char* err, size_t cap, const char* name, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char* err, size_t cap, const char* name, const char* fmt, ...) {
  if (!cap) return -1;
  int n = snprintf(err, cap, "%s: ", name);
  if (n < 0 || (size_t)n >= cap) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err + n, cap - (size_t)n, fmt, ap);
  va_end(ap);
  return -1;
}

/* --- The header's dict literal ---------------------------------------------------- */
typedef struct Cursor {
  const char* p;
  const char* end;
} Cursor;

static void skip_ws(Cursor* c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
    c->p++;
}

static int accept(Cursor* c, char ch) {
  skip_ws(c);
  if (c->p < c->end && *c->p == ch) {
    c->p++;
    return 1;
  }
  return 0;
}

/* A quoted string ('...' or "..."), without escapes, into buf. */
static int parse_string(Cursor* c, char* buf, size_t cap) {
  skip_ws(c);
  if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return -1;
  char q = *c->p++;
  size_t n = 0;
  while (c->p < c->end && *c->p != q) {
    if (*c->p == '\\' || n + 1 >= cap) return -1;
    buf[n++] = *c->p++;
  }
  if (c->p >= c->end) return -1;
  c->p++;
  buf[n] = '\0';
  return 0;
}

static int accept_word(Cursor* c, const char* w) {
  skip_ws(c);
  size_t n = strlen(w);
  if ((size_t)(c->end - c->p) >= n && !memcmp(c->p, w, n)) {
    c->p += n;
    return 1;
  }
  return 0;
}

/* A non-negative decimal integer that fits int64. */
static int parse_dim(Cursor* c, int64_t* out) {
  skip_ws(c);
  if (c->p >= c->end || *c->p < '0' || *c->p > '9') return -1;
  int64_t v = 0;
  while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
    if (!ox_mul_i64(v, 10, &v) || !ox_add_i64(v, *c->p - '0', &v)) return -2;
    c->p++;
  }
  *out = v;
  return 0;
}

/* Parses the header into out->type, rank and dims. */
static int parse_header(const char* h, size_t len, const char* name, NpyArray* out, char* err,
                        size_t cap) {
  Cursor c = {h, h + len};
  int have_descr = 0, have_order = 0, have_shape = 0;
  if (!accept(&c, '{')) return fail(err, cap, name, "bad .npy header: expected '{'");
  for (;;) {
    if (accept(&c, '}')) break;
    char key[32];
    if (parse_string(&c, key, sizeof key))
      return fail(err, cap, name, "bad .npy header: expected a quoted key or '}'");
    if (!accept(&c, ':'))
      return fail(err, cap, name, "bad .npy header: expected ':' after '%s'", key);
    if (!strcmp(key, "descr")) {
      char descr[32];
      if (have_descr++ || parse_string(&c, descr, sizeof descr))
        return fail(err, cap, name, "bad .npy header: 'descr' must be one quoted dtype string");
      size_t i = 0;
      while (i < kTypeCount && strcmp(kTypes[i].descr, descr))
        i++;
      /* One-byte types may be written with '<' or '=' too. */
      if (i == kTypeCount && (descr[0] == '<' || descr[0] == '=') && descr[1])
        for (i = 0; i < kTypeCount; i++)
          if (kTypes[i].size == 1 && !strcmp(kTypes[i].descr + 1, descr + 1)) break;
      if (i == kTypeCount) {
        if (descr[0] == '>' && strcmp(descr + 1, "u1") && strcmp(descr + 1, "b1"))
          return fail(err, cap, name,
                      "dtype '%s' is big-endian: only little-endian data is read "
                      "(numpy: a.astype(a.dtype.newbyteorder('<')))",
                      descr);
        return fail(err, cap, name,
                    "dtype '%s' is not supported (float32 '<f4', float64 '<f8', int64 '<i8', "
                    "int32 '<i4', uint8 '|u1', bool '|b1')",
                    descr);
      }
      out->type = kTypes[i].type;
      out->elem_size = kTypes[i].size;
    } else if (!strcmp(key, "fortran_order")) {
      if (have_order++) return fail(err, cap, name, "bad .npy header: 'fortran_order' twice");
      if (accept_word(&c, "True"))
        return fail(err, cap, name,
                    "fortran_order is True: only C-order arrays are read "
                    "(numpy: np.ascontiguousarray)");
      if (!accept_word(&c, "False"))
        return fail(err, cap, name, "bad .npy header: 'fortran_order' must be True or False");
    } else if (!strcmp(key, "shape")) {
      if (have_shape++) return fail(err, cap, name, "bad .npy header: 'shape' twice");
      if (!accept(&c, '(')) return fail(err, cap, name, "bad .npy header: 'shape' must be a tuple");
      out->rank = 0;
      while (!accept(&c, ')')) {
        int64_t d = 0;
        int rc = parse_dim(&c, &d);
        if (rc == -2) return fail(err, cap, name, "shape: a dimension overflows int64");
        if (rc) return fail(err, cap, name, "bad .npy header: 'shape' must hold integers");
        if (out->rank == NPY_MAX_RANK)
          return fail(err, cap, name, "shape: more than %d dimensions", NPY_MAX_RANK);
        out->dims[out->rank++] = d;
        if (!accept(&c, ',')) {
          if (!accept(&c, ')')) return fail(err, cap, name, "bad .npy header: unclosed 'shape'");
          break;
        }
      }
    } else {
      return fail(err, cap, name, "bad .npy header: unknown key '%s'", key);
    }
    if (!accept(&c, ',')) {
      if (!accept(&c, '}')) return fail(err, cap, name, "bad .npy header: expected ',' or '}'");
      break;
    }
  }
  skip_ws(&c);
  if (c.p != c.end) return fail(err, cap, name, "bad .npy header: text after the closing '}'");
  if (!have_descr || !have_order || !have_shape)
    return fail(err, cap, name, "bad .npy header: missing '%s'",
                !have_descr   ? "descr"
                : !have_order ? "fortran_order"
                              : "shape");
  return 0;
}

int npy_parse(const void* buf, size_t len, const char* name, NpyArray* out, char* err, size_t cap) {
  memset(out, 0, sizeof *out);
  const unsigned char* b = buf;
  if (len < 10 || memcmp(b, kMagic, sizeof kMagic))
    return fail(err, cap, name, "not a .npy file (no \\x93NUMPY magic)");
  unsigned major = b[6], minor = b[7];
  size_t hlen = 0, start = 0;
  if (major == 1) {
    hlen = (size_t)b[8] | (size_t)b[9] << 8;
    start = 10;
  } else if (major == 2 || major == 3) {
    if (len < 12) return fail(err, cap, name, "truncated .npy header");
    hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    start = 12;
  } else {
    return fail(err, cap, name, ".npy format version %u.%u is not supported (1.0, 2.0, 3.0)", major,
                minor);
  }
  if (hlen > len - start)
    return fail(err, cap, name, "truncated .npy header (%zu bytes announced, %zu present)", hlen,
                len - start);
  for (size_t i = 0; i < hlen; i++) /* ASCII (1.0, 2.0) or UTF-8 (3.0): never a NUL */
    if (!b[start + i]) return fail(err, cap, name, "bad .npy header: a NUL byte");
  if (parse_header((const char*)b + start, hlen, name, out, err, cap)) {
    memset(out, 0, sizeof *out);
    return -1;
  }
  size_t count = 1, bytes = 0;
  for (size_t i = 0; i < out->rank; i++)
    if (out->dims[i] < 0 || !ox_mul_size(count, (size_t)out->dims[i], &count))
      return fail(err, cap, name, "shape: the element count overflows");
  if (!ox_mul_size(count, out->elem_size, &bytes))
    return fail(err, cap, name, "shape: the byte size overflows");
  size_t have = len - start - hlen;
  if (have < bytes)
    return fail(err, cap, name, "truncated data: the shape needs %zu bytes, the file holds %zu",
                bytes, have);
  if (have > bytes)
    return fail(err, cap, name, "%zu bytes after the data the shape describes", have - bytes);
  out->count = count;
  out->data = malloc(bytes ? bytes : 1);
  if (!out->data) return fail(err, cap, name, "out of memory (%zu bytes)", bytes);
  if (bytes) memcpy(out->data, b + start + hlen, bytes);
  return 0;
}

int npy_load(const char* path, NpyArray* out, char* err, size_t cap) {
  memset(out, 0, sizeof *out);
  FILE* f = fopen(path, "rb");
  if (!f) return fail(err, cap, path, "cannot open: %s", strerror(errno));
  unsigned char* buf = NULL;
  size_t len = 0, room = 0;
  int rc = 0;
  for (;;) {
    if (len == room) {
      size_t grow = room ? room * 2 : 1 << 16;
      unsigned char* nb = grow > room ? realloc(buf, grow) : NULL;
      if (!nb) {
        rc = fail(err, cap, path, "out of memory reading the file");
        break;
      }
      buf = nb;
      room = grow;
    }
    size_t got = fread(buf + len, 1, room - len, f);
    len += got;
    if (got == 0) {
      if (ferror(f)) rc = fail(err, cap, path, "read error");
      break;
    }
  }
  fclose(f);
  if (!rc) rc = npy_parse(buf, len, path, out, err, cap);
  free(buf);
  return rc;
}

int npy_save(const char* path, NpyType type, const int64_t* dims, size_t rank, const void* data,
             char* err, size_t cap) {
  size_t count = 1, bytes = 0, esize = npy_elem_size(type);
  if (!esize || rank > NPY_MAX_RANK) return fail(err, cap, path, "bad type or rank");
  for (size_t i = 0; i < rank; i++)
    if (dims[i] < 0 || !ox_mul_size(count, (size_t)dims[i], &count))
      return fail(err, cap, path, "shape: the element count overflows");
  if (!ox_mul_size(count, esize, &bytes)) return fail(err, cap, path, "the byte size overflows");
  char shape[NPY_MAX_RANK * 22 + 4];
  size_t n = 0;
  for (size_t i = 0; i < rank; i++)
    n += (size_t)snprintf(shape + n, sizeof shape - n, "%lld%s", (long long)dims[i],
                          rank == 1      ? ","
                          : i + 1 < rank ? ", "
                                         : "");
  shape[n] = '\0';
  char header[sizeof shape + 192];
  int hn =
      snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
               npy_descr(type), shape);
  /* Version 1.0 (the header is under 1 KiB: a 2-byte length suffices), padded
   * with spaces and a final '\n' so that the data starts on a multiple of 64. */
  if (hn < 0 || (size_t)hn + 64 > sizeof header) return fail(err, cap, path, "header too long");
  size_t total = ((10 + (size_t)hn + 1 + 63) / 64) * 64, hlen = total - 10;
  memset(header + hn, ' ', hlen - (size_t)hn - 1);
  header[hlen - 1] = '\n';
  unsigned char pre[10];
  memcpy(pre, kMagic, sizeof kMagic);
  pre[6] = 1;
  pre[7] = 0;
  pre[8] = (unsigned char)(hlen & 0xff);
  pre[9] = (unsigned char)(hlen >> 8);
  const size_t prefix = sizeof pre;
  FILE* f = fopen(path, "wb");
  if (!f) return fail(err, cap, path, "cannot create: %s", strerror(errno));
  int ok = fwrite(pre, 1, prefix, f) == prefix && fwrite(header, 1, hlen, f) == hlen &&
           (!bytes || fwrite(data, 1, bytes, f) == bytes);
  if (fclose(f) || !ok) return fail(err, cap, path, "write error");
  return 0;
}

void npy_free(NpyArray* a) {
  if (!a) return;
  free(a->data);
  memset(a, 0, sizeof *a);
}
