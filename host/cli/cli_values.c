/* cli_values.c — reading, formatting and converting tensor elements for the CLI. */
#include "cli_util.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* How each element type is read; indexed by OnyxElemType. */
static const CliKind kKinds[ONYX_ELEM_TYPE_COUNT] = {
    [ONYX_ELEM_FLOAT32] = CLI_KIND_FLOAT,       [ONYX_ELEM_UINT8] = CLI_KIND_UINT,
    [ONYX_ELEM_INT8] = CLI_KIND_SINT,           [ONYX_ELEM_UINT16] = CLI_KIND_UINT,
    [ONYX_ELEM_INT16] = CLI_KIND_SINT,          [ONYX_ELEM_INT32] = CLI_KIND_SINT,
    [ONYX_ELEM_INT64] = CLI_KIND_SINT,          [ONYX_ELEM_STRING] = CLI_KIND_STRING,
    [ONYX_ELEM_BOOL] = CLI_KIND_BOOL,           [ONYX_ELEM_FLOAT16] = CLI_KIND_FLOAT,
    [ONYX_ELEM_FLOAT64] = CLI_KIND_FLOAT,       [ONYX_ELEM_UINT32] = CLI_KIND_UINT,
    [ONYX_ELEM_UINT64] = CLI_KIND_UINT,         [ONYX_ELEM_COMPLEX64] = CLI_KIND_COMPLEX,
    [ONYX_ELEM_COMPLEX128] = CLI_KIND_COMPLEX,  [ONYX_ELEM_BFLOAT16] = CLI_KIND_FLOAT,
    [ONYX_ELEM_FLOAT8E4M3FN] = CLI_KIND_PACKED, [ONYX_ELEM_FLOAT8E4M3FNUZ] = CLI_KIND_PACKED,
    [ONYX_ELEM_FLOAT8E5M2] = CLI_KIND_PACKED,   [ONYX_ELEM_FLOAT8E5M2FNUZ] = CLI_KIND_PACKED,
    [ONYX_ELEM_UINT4] = CLI_KIND_PACKED,        [ONYX_ELEM_INT4] = CLI_KIND_PACKED,
    [ONYX_ELEM_FLOAT4E2M1] = CLI_KIND_PACKED,   [ONYX_ELEM_FLOAT8E8M0] = CLI_KIND_PACKED,
    [ONYX_ELEM_UINT2] = CLI_KIND_PACKED,        [ONYX_ELEM_INT2] = CLI_KIND_PACKED,
};

CliKind cli_elem_kind(OnyxElemType t) {
  return (unsigned)t < ONYX_ELEM_TYPE_COUNT ? kKinds[t] : CLI_KIND_NONE;
}

size_t cli_scalar_count(const OnyxTensor* t) {
  size_t n = onyx_tensor_elem_count(t);
  return cli_elem_kind(onyx_tensor_elem_type(t)) == CLI_KIND_COMPLEX ? 2 * n : n;
}

double cli_get_double(OnyxElemType t, const void* data, size_t i) {
  switch (t) {
  case ONYX_ELEM_FLOAT32:
  case ONYX_ELEM_COMPLEX64:
    return ((const float*)data)[i];
  case ONYX_ELEM_FLOAT64:
  case ONYX_ELEM_COMPLEX128:
    return ((const double*)data)[i];
  case ONYX_ELEM_FLOAT16:
    return cli_half_to_float(((const uint16_t*)data)[i]);
  case ONYX_ELEM_BFLOAT16:
    return cli_bf16_to_float(((const uint16_t*)data)[i]);
  default:
    return NAN;
  }
}

int64_t cli_get_int(OnyxElemType t, const void* data, size_t i) {
  switch (t) {
  case ONYX_ELEM_INT8:
    return ((const int8_t*)data)[i];
  case ONYX_ELEM_INT16:
    return ((const int16_t*)data)[i];
  case ONYX_ELEM_INT32:
    return ((const int32_t*)data)[i];
  case ONYX_ELEM_INT64:
    return ((const int64_t*)data)[i];
  default:
    return (int64_t)cli_get_uint(t, data, i);
  }
}

uint64_t cli_get_uint(OnyxElemType t, const void* data, size_t i) {
  switch (t) {
  case ONYX_ELEM_UINT8:
  case ONYX_ELEM_BOOL:
    return ((const uint8_t*)data)[i];
  case ONYX_ELEM_UINT16:
    return ((const uint16_t*)data)[i];
  case ONYX_ELEM_UINT32:
    return ((const uint32_t*)data)[i];
  case ONYX_ELEM_UINT64:
    return ((const uint64_t*)data)[i];
  default:
    return 0;
  }
}

/* Length of the valid UTF-8 sequence at s (n bytes left) that is neither
 * ASCII nor a C1 control (U+0080..U+009F); 0 otherwise. */
static size_t utf8_printable_len(const unsigned char* s, size_t n) {
  size_t len = s[0] >= 0xc2 && s[0] <= 0xdf   ? 2
               : s[0] >= 0xe0 && s[0] <= 0xef ? 3
               : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4
                                              : 0;
  if (!len || len > n) return 0;
  for (size_t k = 1; k < len; k++)
    if ((s[k] & 0xc0) != 0x80) return 0;
  if (s[0] == 0xc2 && s[1] < 0xa0) return 0;
  return len;
}

/* String i of t in double quotes, its first bytes (up to 60) with NUL,
 * control characters, invalid UTF-8, '"' and '\' escaped (\n \t \r \"
 * \\ \xHH), "..." when cut: a string from a model can neither end the
 * line early nor drive the terminal. */
static void format_string(const OnyxTensor* t, size_t i, char* buf, size_t cap) {
  if (!cap) return;
  const char* s = ((const char* const*)onyx_tensor_data(t))[i];
  const unsigned char* u = (const unsigned char*)(s ? s : "");
  const size_t len = s ? onyx_tensor_string_len(t, i) : 0;
  if (cap < 6) { /* no room for even one escaped byte */
    snprintf(buf, cap, "\"");
    return;
  }
  size_t w = 0, k = 0;
  buf[w++] = '"';
  while (k < len && k < 60) {
    char esc[8];
    const char* src = esc;
    size_t n = 1, used = 1;
    unsigned char c = u[k];
    if (c == '"' || c == '\\')
      n = (size_t)snprintf(esc, sizeof esc, "\\%c", c);
    else if (c == '\n' || c == '\t' || c == '\r')
      n = (size_t)snprintf(esc, sizeof esc, "\\%c", c == '\n' ? 'n' : c == '\t' ? 't' : 'r');
    else if (c < 0x20 || c == 0x7f)
      n = (size_t)snprintf(esc, sizeof esc, "\\x%02x", c);
    else if (c < 0x80)
      esc[0] = (char)c;
    else if ((used = utf8_printable_len(u + k, len - k)) > 0) {
      n = used;
      src = (const char*)u + k;
    } else {
      used = 1;
      n = (size_t)snprintf(esc, sizeof esc, "\\x%02x", c);
    }
    if (w + n + 5 > cap) break; /* keep room for ..." and the NUL */
    memcpy(buf + w, src, n);
    w += n;
    k += used;
  }
  if (k < len) {
    memcpy(buf + w, "...", 3);
    w += 3;
  }
  buf[w++] = '"';
  buf[w] = '\0';
}

void cli_format_scalar(const OnyxTensor* t, size_t i, int digits, char* buf, size_t cap) {
  OnyxElemType type = onyx_tensor_elem_type(t);
  const void* data = onyx_tensor_data(t);
  switch (cli_elem_kind(type)) {
  case CLI_KIND_FLOAT:
  case CLI_KIND_COMPLEX:
    snprintf(buf, cap, "%.*g", digits, cli_get_double(type, data, i));
    return;
  case CLI_KIND_SINT:
    snprintf(buf, cap, "%" PRId64, cli_get_int(type, data, i));
    return;
  case CLI_KIND_UINT:
    snprintf(buf, cap, "%" PRIu64, cli_get_uint(type, data, i));
    return;
  case CLI_KIND_BOOL:
    snprintf(buf, cap, "%s", ((const uint8_t*)data)[i] ? "true" : "false");
    return;
  case CLI_KIND_STRING:
    format_string(t, i, buf, cap);
    return;
  case CLI_KIND_PACKED:
  case CLI_KIND_NONE:
    break;
  }
  /* Sub-byte and float8 types: show the raw byte that holds the element. */
  size_t size = onyx_elem_type_size(type);
  size_t byte = size ? i * size : i / 2;
  if (byte < onyx_tensor_byte_size(t))
    snprintf(buf, cap, "0x%02x", ((const uint8_t*)data)[byte]);
  else
    snprintf(buf, cap, "?");
}

void cli_format_dims(const int64_t* dims, size_t rank, char* buf, size_t cap) {
  size_t used = (size_t)snprintf(buf, cap, "[");
  for (size_t d = 0; d < rank && used < cap; d++)
    used += (size_t)snprintf(buf + used, cap - used, "%s%" PRId64, d ? "," : "", dims[d]);
  if (used < cap) snprintf(buf + used, cap - used, "]");
}

/* --- 16-bit floats ----------------------------------------------------------------- */
static float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint32_t float_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

float cli_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13)); /* inf / NaN */
  if (exp == 0) { /* zero and subnormals: man * 2^-24 */
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t cli_float_to_half(float f) {
  uint32_t x = float_to_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return sign | (abs > 0x7f800000u ? 0x7e00 : 0x7c00);
  if (abs >= 0x477ff000u) return sign | 0x7c00; /* rounds past 65504 */
  if (abs < 0x38800000u) { /* below 2^-14: subnormal half, round to nearest even */
    float v = bits_to_float(abs) * 16777216.0f; /* in units of 2^-24 */
    return sign | (uint16_t)lrintf(v);
  }
  uint32_t half = ((abs >> 13) - (112u << 10));
  uint32_t rest = abs & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) half++;
  return sign | (uint16_t)half;
}

float cli_bf16_to_float(uint16_t h) {
  return bits_to_float((uint32_t)h << 16);
}

uint16_t cli_float_to_bf16(float f) {
  uint32_t x = float_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1); /* round to nearest even */
  return (uint16_t)(x >> 16);
}

/* --- maps and sequences of maps (ONNX-ML: ZipMap's output, DictVectorizer's input) ------------ */

static void print_one_map(FILE* f, const OnyxValue* m, size_t max_entries) {
  const OnyxTensor* k = onyx_value_map_keys(m);
  const OnyxTensor* v = onyx_value_map_values(m);
  size_t n = onyx_value_map_size(m);
  char kb[128], vb[128];
  fputc('{', f);
  for (size_t i = 0; i < n && i < max_entries; i++) {
    cli_format_scalar(k, i, 6, kb, sizeof kb);
    cli_format_scalar(v, i, 6, vb, sizeof vb);
    fprintf(f, "%s%s: %s", i ? ", " : "", kb, vb);
  }
  if (n > max_entries) fprintf(f, ", ... (%zu entries)", n);
  fputc('}', f);
}

void cli_print_map_value(FILE* f, const OnyxValue* v, size_t max_items) {
  OnyxValueKind kind = onyx_value_kind(v);
  const char* kt = onyx_elem_type_name(onyx_value_map_key_type(v));
  const char* vt = onyx_elem_type_name(onyx_value_map_value_type(v));
  if (kind == ONYX_VALUE_MAP) {
    fprintf(f, "map(%s, %s) of %zu: ", kt, vt, onyx_value_map_size(v));
    print_one_map(f, v, max_items);
    return;
  }
  if (kind != ONYX_VALUE_SEQUENCE_MAP) {
    fputs("(not a map)", f);
    return;
  }
  size_t n = onyx_value_map_sequence_length(v);
  fprintf(f, "seq(map(%s, %s)) of %zu: [", kt, vt, n);
  for (size_t i = 0; i < n && i < max_items; i++) {
    OnyxValue* m = NULL;
    OnyxStatus* st = onyx_value_map_sequence_at(v, i, &m);
    if (i) fputs(", ", f);
    if (st) {
      fputs("?", f);
      onyx_status_release(st);
      continue;
    }
    print_one_map(f, m, max_items);
    onyx_value_release(m);
  }
  if (n > max_items) fprintf(f, ", ... (%zu maps)", n);
  fputc(']', f);
}

/* Whether key i of map a equals key j of map b (same key type). */
static int same_key(const OnyxTensor* a, size_t i, const OnyxTensor* b, size_t j) {
  if (onyx_tensor_elem_type(a) == ONYX_ELEM_INT64)
    return ((const int64_t*)onyx_tensor_data(a))[i] == ((const int64_t*)onyx_tensor_data(b))[j];
  size_t la = onyx_tensor_string_len(a, i), lb = onyx_tensor_string_len(b, j);
  const char* sa = ((const char* const*)onyx_tensor_data(a))[i];
  const char* sb = ((const char* const*)onyx_tensor_data(b))[j];
  return la == lb && (!la || !memcmp(sa, sb, la));
}

/* Two maps as dictionaries: the same keys, in any order, and values that
 * cli_compare accepts (got's values are put in expected's key order). */
static int compare_one_map(const OnyxValue* ev, const OnyxValue* gv, double rtol, double atol,
                           char* reason, size_t cap) {
  size_t n = onyx_value_map_size(ev);
  if (n != onyx_value_map_size(gv)) {
    snprintf(reason, cap, "expected %zu map entries, got %zu", n, onyx_value_map_size(gv));
    return 1;
  }
  const OnyxTensor *ek = onyx_value_map_keys(ev), *gk = onyx_value_map_keys(gv);
  const OnyxTensor *evals = onyx_value_map_values(ev), *gvals = onyx_value_map_values(gv);
  OnyxElemType vt = onyx_tensor_elem_type(gvals);
  size_t esz = onyx_elem_type_size(vt);
  if (vt != ONYX_ELEM_STRING && !esz) {
    snprintf(reason, cap, "map values of type %s cannot be compared", onyx_elem_type_name(vt));
    return 1;
  }
  /* got's values in expected's key order */
  size_t* at = malloc((n ? n : 1) * sizeof *at);
  if (!at) {
    snprintf(reason, cap, "out of memory");
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    size_t j = 0;
    while (j < n && !same_key(ek, i, gk, j))
      j++;
    if (j == n) {
      char kb[128];
      cli_format_scalar(ek, i, 6, kb, sizeof kb);
      snprintf(reason, cap, "key %s is missing", kb);
      free(at);
      return 1;
    }
    at[i] = j;
  }
  int64_t dim = (int64_t)n;
  OnyxValue* ordered = NULL;
  OnyxStatus* st = NULL;
  if (vt == ONYX_ELEM_STRING) {
    const char** s = malloc((n ? n : 1) * sizeof *s);
    size_t* lens = malloc((n ? n : 1) * sizeof *lens);
    if (s && lens)
      for (size_t i = 0; i < n; i++) {
        s[i] = ((const char* const*)onyx_tensor_data(gvals))[at[i]];
        lens[i] = onyx_tensor_string_len(gvals, at[i]);
      }
    st = s && lens ? onyx_value_create_string_tensor(&dim, 1, s, lens, &ordered) : NULL;
    if (!s || !lens) snprintf(reason, cap, "out of memory");
    free(s);
    free(lens);
  } else {
    unsigned char* buf = malloc(n * esz + 1);
    if (buf)
      for (size_t i = 0; i < n; i++)
        memcpy(buf + i * esz, (const unsigned char*)onyx_tensor_data(gvals) + at[i] * esz, esz);
    st = buf ? onyx_value_create_tensor(vt, &dim, 1, buf, n * esz, &ordered) : NULL;
    if (!buf) snprintf(reason, cap, "out of memory");
    free(buf);
  }
  free(at);
  int rc = 1;
  if (st) {
    snprintf(reason, cap, "%.400s", onyx_status_message(st));
    onyx_status_release(st);
  } else if (ordered) {
    rc = cli_compare(evals, onyx_value_tensor(ordered), rtol, atol, reason, cap);
  }
  onyx_value_release(ordered);
  return rc;
}

int cli_compare_map_values(const OnyxValue* ev, const OnyxValue* gv, double rtol, double atol,
                           char* reason, size_t cap) {
  OnyxValueKind ek = onyx_value_kind(ev), gk = onyx_value_kind(gv);
  static const char* const kinds[] = {"tensor", "sequence", "none", "map", "sequence of maps"};
  if (ek != gk) {
    snprintf(reason, cap, "expected a %s, got a %s", (unsigned)ek < 5 ? kinds[ek] : "?",
             (unsigned)gk < 5 ? kinds[gk] : "?");
    return 1;
  }
  /* An empty expected sequence of maps may not say its types (an empty
   * SequenceProto): then only the length is compared. */
  int typed = onyx_value_map_key_type(ev) != ONYX_ELEM_UNDEFINED;
  if (typed && (onyx_value_map_key_type(ev) != onyx_value_map_key_type(gv) ||
                onyx_value_map_value_type(ev) != onyx_value_map_value_type(gv))) {
    snprintf(reason, cap, "expected map(%s, %s), got map(%s, %s)",
             onyx_elem_type_name(onyx_value_map_key_type(ev)),
             onyx_elem_type_name(onyx_value_map_value_type(ev)),
             onyx_elem_type_name(onyx_value_map_key_type(gv)),
             onyx_elem_type_name(onyx_value_map_value_type(gv)));
    return 1;
  }
  if (ek == ONYX_VALUE_MAP) return compare_one_map(ev, gv, rtol, atol, reason, cap);
  size_t n = onyx_value_map_sequence_length(ev);
  if (n != onyx_value_map_sequence_length(gv)) {
    snprintf(reason, cap, "expected %zu maps, got %zu", n, onyx_value_map_sequence_length(gv));
    return 1;
  }
  int rc = 0;
  for (size_t i = 0; !rc && i < n; i++) {
    OnyxValue *e = NULL, *g = NULL;
    OnyxStatus* st = onyx_value_map_sequence_at(ev, i, &e);
    if (!st) st = onyx_value_map_sequence_at(gv, i, &g);
    char why[512];
    if (st) {
      snprintf(reason, cap, "%.400s", onyx_status_message(st));
      onyx_status_release(st);
      rc = 1;
    } else if (compare_one_map(e, g, rtol, atol, why, sizeof why)) {
      snprintf(reason, cap, "map %zu: %s", i, why);
      rc = 1;
    }
    onyx_value_release(e);
    onyx_value_release(g);
  }
  return rc;
}
