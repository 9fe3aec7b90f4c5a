/* test_pad_ref.c — the CPU provider's Pad against a reference computed
 * here: every mode (constant, reflect, edge, wrap), ranks 1 to 5, negative
 * pads (crops), zero-size axes, integer and float element types, and the
 * opset-2 (pads and value attributes), opset-11 (pads and constant_value
 * inputs) and opset-18 (axes input) forms, through the public API.
 *
 * The reference crops every axis first and then pads one axis at a time,
 * numpy.pad's order, copying whole elements of the already padded array:
 * a different algorithm from the kernel's per-row index mapping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "onyx/onyx.h"
#include "ox_test_models.h"

enum { M_CONSTANT, M_REFLECT, M_EDGE, M_WRAP };
static const char* const mode_names[] = {"constant", "reflect", "edge", "wrap"};

#define MAXR 5

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static size_t type_size(int type) {
  switch (type) {
  case ONYX_ELEM_FLOAT64:
  case ONYX_ELEM_INT64:
    return 8;
  case ONYX_ELEM_FLOAT32:
  case ONYX_ELEM_INT32:
    return 4;
  case ONYX_ELEM_UINT16:
    return 2;
  default:
    return 1;
  }
}

/* Element i's value (small integers, exact in every type). */
static void put_value(int type, void* at, int64_t v) {
  switch (type) {
  case ONYX_ELEM_FLOAT32:
    *(float*)at = (float)v;
    break;
  case ONYX_ELEM_FLOAT64:
    *(double*)at = (double)v;
    break;
  case ONYX_ELEM_INT64:
    *(int64_t*)at = v;
    break;
  case ONYX_ELEM_INT32:
    *(int32_t*)at = (int32_t)v;
    break;
  case ONYX_ELEM_UINT16:
    *(uint16_t*)at = (uint16_t)v;
    break;
  case ONYX_ELEM_INT8:
    *(int8_t*)at = (int8_t)v;
    break;
  default:
    *(uint8_t*)at = (uint8_t)v;
    break;
  }
}

static size_t count_of(const int64_t* d, int rank) {
  size_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= (size_t)d[i];
  return n;
}

/* Index of coordinate r (relative to a window of n elements) in [0, n), by
 * the mode; -1 for constant mode outside the window. Reflect and wrap are
 * only asked within one period (the cases keep their pads that small). */
static int64_t ref_index(int mode, int64_t r, int64_t n) {
  if (r >= 0 && r < n) return r;
  switch (mode) {
  case M_EDGE:
    return r < 0 ? 0 : n - 1;
  case M_WRAP:
    return r < 0 ? r + n : r - n;
  case M_REFLECT:
    return r < 0 ? -r : 2 * (n - 1) - r;
  default:
    return -1;
  }
}

/* The reference: crop every axis (negative pads), then pad axis by axis. */
static void* ref_pad(int mode, int type, int rank, const int64_t* in_dims, const void* x,
                     const int64_t* begin, const int64_t* end, int64_t value, int64_t* out_dims) {
  const size_t es = type_size(type);
  int64_t cur[MAXR], c0[MAXR];
  for (int d = 0; d < rank; d++) {
    c0[d] = begin[d] < 0 ? -begin[d] : 0;
    cur[d] = in_dims[d] - c0[d] - (end[d] < 0 ? -end[d] : 0);
  }
  /* crop */
  size_t n = count_of(cur, rank);
  char* a = malloc(n * es + 1);
  int64_t in_st[MAXR], idx[MAXR] = {0};
  for (int d = rank; d-- > 0;)
    in_st[d] = d == rank - 1 ? 1 : in_st[d + 1] * in_dims[d + 1];
  for (size_t i = 0; i < n; i++) {
    size_t off = 0;
    for (int d = 0; d < rank; d++)
      off += (size_t)((idx[d] + c0[d]) * in_st[d]);
    memcpy(a + i * es, (const char*)x + off * es, es);
    for (int d = rank; d-- > 0;) {
      if (++idx[d] < cur[d]) break;
      idx[d] = 0;
    }
  }
  /* pad one axis at a time */
  char fill[8];
  put_value(type, fill, value);
  for (int ax = 0; ax < rank; ax++) {
    int64_t lead = begin[ax] > 0 ? begin[ax] : 0, trail = end[ax] > 0 ? end[ax] : 0;
    int64_t nd[MAXR];
    memcpy(nd, cur, sizeof nd);
    nd[ax] = cur[ax] + lead + trail;
    size_t outer = count_of(cur, ax), inner = count_of(cur + ax + 1, rank - ax - 1);
    char* b = malloc(count_of(nd, rank) * es + 1);
    for (size_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < nd[ax]; j++) {
        int64_t k = ref_index(mode, j - lead, cur[ax]);
        char* dst = b + ((o * (size_t)nd[ax] + (size_t)j) * inner) * es;
        for (size_t i = 0; i < inner; i++) {
          const char* src = k < 0 ? fill : a + ((o * (size_t)cur[ax] + (size_t)k) * inner + i) * es;
          memcpy(dst + i * es, src, es);
        }
      }
    free(a);
    a = b;
    memcpy(cur, nd, sizeof cur);
  }
  memcpy(out_dims, cur, (size_t)rank * sizeof *out_dims);
  return a;
}

typedef struct PadCase {
  int opset; /* 2, 11, 18 (axes) or 19 (wrap) */
  int mode;
  int type;
  int rank;
  int64_t dims[MAXR];
  int64_t begin[MAXR], end[MAXR];
  int64_t value;
  bool give_value; /* opset >= 11: the constant_value input is given */
} PadCase;

static void run_pad_case(const PadCase* c, const char* label) {
  const int rank = c->rank;
  const size_t es = type_size(c->type);
  const size_t n_in = count_of(c->dims, rank);
  char* x = malloc(n_in * es + 1);
  for (size_t i = 0; i < n_in; i++)
    put_value(c->type, x + i * es, (int64_t)(i % 97) + 1);
  int64_t want_dims[MAXR];
  const int64_t fill = c->opset < 11 || c->give_value ? c->value : 0;
  void* want = ref_pad(c->mode, c->type, rank, c->dims, x, c->begin, c->end, fill, want_dims);

  /* opset 18: the pads of the axes listed (every axis, last first, with
   * one negative index) through the axes input */
  int64_t pads[2 * MAXR], axes[MAXR];
  for (int i = 0; i < rank; i++) {
    int d = c->opset >= 18 ? rank - 1 - i : i;
    axes[i] = i == 0 ? (int64_t)d - rank : d;
    pads[i] = c->begin[d];
    pads[rank + i] = c->end[d];
  }
  OxTestModel* m = otm_new(c->opset);
  otm_input(m, "x", c->type, rank, c->dims);
  otm_output(m, "y", c->type, -1, NULL);
  const int64_t np = 2 * rank, na = rank;
  OxTestNode* n;
  if (c->opset < 11) {
    n = otm_node(m, "Pad", "pad_under_test", "x", "y");
    otm_attr_ints(n, "pads", (size_t)np, pads);
    otm_attr_float(n, "value", (float)c->value);
  } else {
    otm_input(m, "p", ONYX_ELEM_INT64, 1, &np);
    if (c->give_value) otm_input(m, "v", c->type, 0, NULL);
    if (c->opset >= 18) otm_input(m, "a", ONYX_ELEM_INT64, 1, &na);
    const char* ins =
        c->opset >= 18 ? (c->give_value ? "x,p,v,a" : "x,p,,a") : (c->give_value ? "x,p,v" : "x,p");
    n = otm_node(m, "Pad", "pad_under_test", ins, "y");
  }
  otm_attr_string(n, "mode", mode_names[c->mode]);
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(NULL, bytes, len, NULL, &s));
  free(bytes);

  OnyxValue* in[4] = {NULL};
  const char* names[4];
  size_t k = 0;
  ok(onyx_value_create_tensor(c->type, c->dims, (size_t)rank, x, n_in * es, &in[k]));
  names[k++] = "x";
  if (c->opset >= 11) {
    ok(onyx_value_create_tensor(ONYX_ELEM_INT64, &np, 1, pads, (size_t)np * 8, &in[k]));
    names[k++] = "p";
    if (c->give_value) {
      char v[8];
      put_value(c->type, v, c->value);
      ok(onyx_value_create_tensor(c->type, NULL, 0, v, es, &in[k]));
      names[k++] = "v";
    }
    if (c->opset >= 18) {
      ok(onyx_value_create_tensor(ONYX_ELEM_INT64, &na, 1, axes, (size_t)na * 8, &in[k]));
      names[k++] = "a";
    }
  }
  const char* out_name = "y";
  OnyxValue* out = NULL;
  OnyxStatus* st =
      onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, k, &out_name, 1, &out);
  if (st) fail_msg("%s: %s", label, onyx_status_message(st));
  const OnyxTensor* t = onyx_value_tensor(out);
  if ((int)onyx_tensor_rank(t) != rank) fail_msg("%s: rank %zu", label, onyx_tensor_rank(t));
  for (int d = 0; d < rank; d++)
    if (onyx_tensor_dims(t)[d] != want_dims[d])
      fail_msg("%s: dim %d is %lld, expected %lld", label, d, (long long)onyx_tensor_dims(t)[d],
               (long long)want_dims[d]);
  size_t n_out = count_of(want_dims, rank);
  const char* got = onyx_tensor_data(t);
  for (size_t i = 0; i < n_out; i++)
    if (memcmp(got + i * es, (const char*)want + i * es, es))
      fail_msg("%s: element %zu of %zu differs from the reference", label, i, n_out);
  onyx_value_release(out);
  for (size_t i = 0; i < k; i++)
    onyx_value_release(in[i]);
  onyx_session_release(s);
  free(want);
  free(x);
}

/* A small deterministic generator for the cases' shapes and pads. */
static uint32_t lcg(uint32_t* s) {
  *s = *s * 1664525u + 1013904223u;
  return *s >> 8;
}

static void test_pad_table(void** state) {
  (void)state;
  static const int forms[] = {2, 11, 18, 19};
  static const int int_types[] = {ONYX_ELEM_INT32, ONYX_ELEM_INT8, ONYX_ELEM_INT64,
                                  ONYX_ELEM_UINT16, ONYX_ELEM_UINT8};
  uint32_t seed = 12345;
  size_t cases = 0;
  for (size_t f = 0; f < sizeof forms / sizeof *forms; f++)
    for (int mode = M_CONSTANT; mode <= M_WRAP; mode++) {
      const int opset = forms[f];
      if (mode == M_WRAP && opset < 19) continue; /* wrap is opset 19's */
      for (int rank = 1; rank <= MAXR; rank++)
        for (int variant = 0; variant < 3; variant++) {
          PadCase c = {0};
          c.opset = opset;
          c.mode = mode;
          c.rank = rank;
          /* opset 2 takes float types only; the others take all */
          c.type = variant == 0   ? ONYX_ELEM_FLOAT32
                   : opset < 11   ? ONYX_ELEM_FLOAT64
                   : variant == 1 ? int_types[(size_t)(rank + mode) % 5]
                                  : ONYX_ELEM_FLOAT64;
          c.value = variant == 2 ? 0 : 7;
          c.give_value = (variant + rank) % 2 == 0;
          /* a zero-size axis in every third constant-mode case */
          const int empty_axis = mode == M_CONSTANT && (rank + variant) % 3 == 0
                                     ? (int)(lcg(&seed) % (uint32_t)rank)
                                     : -1;
          for (int d = 0; d < rank; d++) {
            /* rows of 1 to 9 elements; outer axes kept small */
            int64_t size = d == rank - 1 ? 1 + lcg(&seed) % 9 : 1 + lcg(&seed) % 3;
            if (d == empty_axis) size = 0;
            c.dims[d] = size;
            /* pads from -1 to 3, kept within one reflection (size - 1)
             * or wrap (size) of what the crop leaves, and no crop of an
             * axis of one element */
            for (int side = 0; side < 2; side++) {
              int64_t p = (int64_t)(lcg(&seed) % 5) - 1;
              if (p < 0 && size < 3) p = 0;
              int64_t* at = side ? &c.end[d] : &c.begin[d];
              *at = p;
            }
            int64_t keep = size - (c.begin[d] < 0) - (c.end[d] < 0);
            int64_t lim = mode == M_REFLECT ? keep - 1 : mode == M_WRAP ? keep : 3;
            if (mode != M_CONSTANT && keep == 0) lim = 0;
            if (c.begin[d] > lim) c.begin[d] = lim;
            if (c.end[d] > lim) c.end[d] = lim;
          }
          char label[96];
          snprintf(label, sizeof label, "opset %d %s rank %d type %d variant %d", opset,
                   mode_names[mode], rank, c.type, variant);
          run_pad_case(&c, label);
          cases++;
        }
    }
  assert_true(cases >= 150);
}

/* Rows long enough that the kernel polls for cancellation between them,
 * and a fill that is not zero bytes (filled by doubling copies): 300 rows
 * of 300 int16-sized elements, edge and constant. */
static void test_pad_large(void** state) {
  (void)state;
  PadCase c = {.opset = 11, .mode = M_CONSTANT, .type = ONYX_ELEM_UINT16, .rank = 2};
  c.dims[0] = 300;
  c.dims[1] = 280;
  c.begin[0] = 1;
  c.end[0] = 2;
  c.begin[1] = 13;
  c.end[1] = 7;
  c.value = 0x1234;
  c.give_value = true;
  run_pad_case(&c, "large constant");
  c.mode = M_EDGE;
  c.begin[0] = -3;
  run_pad_case(&c, "large edge");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pad_table),
      cmocka_unit_test(test_pad_large),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
