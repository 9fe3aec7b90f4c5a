/* cli_compare.c — output comparison for `onyx test`, with the rules and the
 * reason texts of the ONNX Runtime peer harness (bench/peer/lib.js), so that
 * the two verdict files can be diffed. */
#include "cli_util.h"

#include <math.h>
#include <string.h>

/* Floats match within atol + rtol*|exp|; NaN matches NaN; infinities match
 * only an equal infinity. */
static int float_matches(double e, double g, double rtol, double atol, double* err) {
  if (isnan(e) || isnan(g)) return isnan(e) && isnan(g);
  if (isinf(e) || isinf(g)) return e == g;
  double d = fabs(e - g);
  if (d > *err) *err = d;
  return d <= atol + rtol * fabs(e);
}

static int compare_floats(const OnyxTensor* exp, const OnyxTensor* got, double rtol, double atol,
                          char* reason, size_t cap) {
  OnyxElemType t = onyx_tensor_elem_type(exp);
  const void *ed = onyx_tensor_data(exp), *gd = onyx_tensor_data(got);
  size_t n = cli_scalar_count(exp), bad = 0, first = 0;
  double max_err = 0;
  for (size_t i = 0; i < n; i++) {
    if (float_matches(cli_get_double(t, ed, i), cli_get_double(t, gd, i), rtol, atol, &max_err))
      continue;
    if (!bad++) first = i;
  }
  if (!bad) return 0;
  char e[64], g[64];
  cli_format_scalar(exp, first, 9, e, sizeof e);
  cli_format_scalar(got, first, 9, g, sizeof g);
  snprintf(reason, cap,
           "values: %zu/%zu mismatched (rtol %g, atol %g), max abs err %.3g, first at [%zu]: "
           "expected %s, got %s",
           bad, n, rtol, atol, max_err, first, e, g);
  return 1;
}

static int scalar_equal(const OnyxTensor* exp, const OnyxTensor* got, size_t i) {
  OnyxElemType t = onyx_tensor_elem_type(exp);
  const void *ed = onyx_tensor_data(exp), *gd = onyx_tensor_data(got);
  switch (cli_elem_kind(t)) {
  case CLI_KIND_SINT:
    return cli_get_int(t, ed, i) == cli_get_int(t, gd, i);
  case CLI_KIND_UINT:
    return cli_get_uint(t, ed, i) == cli_get_uint(t, gd, i);
  case CLI_KIND_BOOL:
    return !((const uint8_t*)ed)[i] == !((const uint8_t*)gd)[i];
  case CLI_KIND_STRING: {
    /* The bytes, NULs included. */
    const char* a = ((const char* const*)ed)[i];
    const char* b = ((const char* const*)gd)[i];
    size_t al = a ? onyx_tensor_string_len(exp, i) : 0, bl = b ? onyx_tensor_string_len(got, i) : 0;
    return al == bl && (!al || !memcmp(a, b, al));
  }
  default:
    return 1;
  }
}

static int compare_exact(const OnyxTensor* exp, const OnyxTensor* got, char* reason, size_t cap) {
  size_t n = onyx_tensor_elem_count(exp), bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (!scalar_equal(exp, got, i) && !bad++) first = i;
  if (!bad) return 0;
  char e[128], g[128];
  cli_format_scalar(exp, first, 9, e, sizeof e);
  cli_format_scalar(got, first, 9, g, sizeof g);
  snprintf(reason, cap, "values: %zu/%zu differ (exact), first at [%zu]: expected %s, got %s", bad,
           n, first, e, g);
  return 1;
}

/* float8, int4 and other packed types: the bytes must be equal. */
static int compare_bytes(const OnyxTensor* exp, const OnyxTensor* got, char* reason, size_t cap) {
  size_t n = onyx_tensor_byte_size(exp);
  if (onyx_tensor_byte_size(got) != n) {
    snprintf(reason, cap, "size: expected %zu bytes, got %zu", n, onyx_tensor_byte_size(got));
    return 1;
  }
  const uint8_t *e = onyx_tensor_data(exp), *g = onyx_tensor_data(got);
  for (size_t i = 0; i < n; i++) {
    if (e[i] == g[i]) continue;
    snprintf(reason, cap,
             "values: bytes differ (exact), first at byte %zu: expected 0x%02x, got 0x%02x", i,
             e[i], g[i]);
    return 1;
  }
  return 0;
}

static int same_shape(const OnyxTensor* a, const OnyxTensor* b) {
  size_t rank = onyx_tensor_rank(a);
  if (onyx_tensor_rank(b) != rank) return 0;
  return rank == 0 || !memcmp(onyx_tensor_dims(a), onyx_tensor_dims(b), rank * sizeof(int64_t));
}

int cli_compare(const OnyxTensor* exp, const OnyxTensor* got, double rtol, double atol,
                char* reason, size_t cap) {
  OnyxElemType et = onyx_tensor_elem_type(exp), gt = onyx_tensor_elem_type(got);
  if (et != gt) {
    snprintf(reason, cap, "dtype: expected %s, got %s", onyx_elem_type_name(et),
             onyx_elem_type_name(gt));
    return 1;
  }
  if (!same_shape(exp, got)) {
    char e[256], g[256];
    cli_format_dims(onyx_tensor_dims(exp), onyx_tensor_rank(exp), e, sizeof e);
    cli_format_dims(onyx_tensor_dims(got), onyx_tensor_rank(got), g, sizeof g);
    snprintf(reason, cap, "shape: expected %s, got %s", e, g);
    return 1;
  }
  switch (cli_elem_kind(et)) {
  case CLI_KIND_FLOAT:
  case CLI_KIND_COMPLEX:
    return compare_floats(exp, got, rtol, atol, reason, cap);
  case CLI_KIND_SINT:
  case CLI_KIND_UINT:
  case CLI_KIND_BOOL:
  case CLI_KIND_STRING:
    return compare_exact(exp, got, reason, cap);
  case CLI_KIND_PACKED:
  case CLI_KIND_NONE:
    break;
  }
  return compare_bytes(exp, got, reason, cap);
}
