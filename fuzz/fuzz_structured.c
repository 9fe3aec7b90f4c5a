/* fuzz_structured.c — a structure-aware model fuzzer. Its custom mutator
 * (LLVMFuzzerCustomMutator) parses the input as an onnx.ModelProto, moves a
 * few numbers of the graph (attribute ints/floats and their lists, dims of
 * graph inputs and initializers, initializer values, strings) to boundary
 * values — 0, +-1, INT32/INT64 min and max, 2^31, 2^62, NaN, +-Inf, empty
 * strings, strings holding a NUL — and serializes it again; inputs that do
 * not parse get libFuzzer's byte mutations. Each input then becomes a session
 * (CPU provider, the small limits of fuzz_common.h) that runs once on inputs
 * generated from the declared shapes. The session's own limits bound each
 * input: max_run_ms = ONYX_FUZZ_RUN_MS (default 2000) for the run,
 * max_fold_ms = 1000 for constant folding at creation, max_session_bytes =
 * 256 MiB for the run's live tensors; every kernel whose work attributes or
 * data set polls the run's cancellation, so libFuzzer's -timeout (fuzz.sh:
 * 20 s) catches only a loop that ignores it. Seeds: the models of
 * fuzz_make_corpus and the small ONNX node-test models (fuzz/fuzz.sh). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz_common.h"
#include "onnx.pb-c.h"

size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

volatile uint8_t onyx_fuzz_sink; /* keeps the output reads from being optimized away */

/* --- the mutator ------------------------------------------------------------------------ */

typedef struct {
  uint64_t s;
} Rng;

static uint64_t rng_next(Rng* r) {
  r->s ^= r->s << 13;
  r->s ^= r->s >> 7;
  r->s ^= r->s << 17;
  return r->s;
}

static size_t rng_below(Rng* r, size_t n) {
  return n ? (size_t)(rng_next(r) % n) : 0;
}

static const int64_t k_ints[] = {0,
                                 -1,
                                 1,
                                 2,
                                 -2,
                                 3,
                                 INT32_MIN,
                                 INT32_MAX,
                                 (int64_t)INT32_MAX + 1, /* 2^31 */
                                 (int64_t)1 << 32,
                                 (int64_t)1 << 62,
                                 -((int64_t)1 << 62),
                                 INT64_MIN,
                                 INT64_MIN + 1,
                                 INT64_MAX,
                                 INT64_MAX - 1,
                                 255,
                                 65536,
                                 ((int64_t)1 << 24) + 1};
#define N_INTS (sizeof k_ints / sizeof k_ints[0])

static int64_t pick_int(Rng* r, int64_t old) {
  switch (rng_below(r, 6)) {
  case 0:
    return old == INT64_MIN ? old : -old;
  case 1:
    return (int64_t)((uint64_t)old + 1);
  case 2:
    return (int64_t)((uint64_t)old - 1);
  default:
    return k_ints[rng_below(r, N_INTS)];
  }
}

static float pick_float(Rng* r) {
  static const float v[] = {0.0f,  -0.0f,  1.0f,          -1.0f,         0.5f,         1e-45f,
                            1e30f, -1e30f, 3.4028235e38f, 2147483648.0f, 9.2233720e18f};
  switch (rng_below(r, 5)) {
  case 0:
    return NAN;
  case 1:
    return INFINITY;
  case 2:
    return -INFINITY;
  default:
    return v[rng_below(r, sizeof v / sizeof v[0])];
  }
}

typedef enum {
  SITE_I64,       /* one int64 */
  SITE_I32,       /* one int32 */
  SITE_F32,       /* one float */
  SITE_I64_LIST,  /* an int64 list: emptied, grown or shrunk */
  SITE_F32_LIST,  /* a float list */
  SITE_BYTES,     /* a string or bytes field */
  SITE_RAW,       /* raw_data of an initializer of element width `width` */
  SITE_DIM,       /* a dimension of a declared shape */
  SITE_DIMS_DATA, /* an initializer's dims and data, resized together */
} SiteKind;

typedef struct {
  SiteKind kind;
  void* p;
  size_t* n;
  int width;
} Site;

#define MAX_SITES 4096

typedef struct {
  Site site[MAX_SITES];
  size_t n;
} Sites;

static void add_site(Sites* s, SiteKind kind, void* p, size_t* n, int width) {
  if (s->n < MAX_SITES) s->site[s->n++] = (Site){kind, p, n, width};
}

static int raw_width(int32_t data_type) {
  switch (data_type) {
  case ONYX_ELEM_INT64:
  case ONYX_ELEM_UINT64:
  case ONYX_ELEM_FLOAT64:
    return 8;
  case ONYX_ELEM_INT32:
  case ONYX_ELEM_UINT32:
  case ONYX_ELEM_FLOAT32:
    return 4;
  case ONYX_ELEM_INT16:
  case ONYX_ELEM_UINT16:
  case ONYX_ELEM_FLOAT16:
  case ONYX_ELEM_BFLOAT16:
    return 2;
  default:
    return 1;
  }
}

static void tensor_sites(Sites* s, Onnx__TensorProto* t) {
  if (!t) return;
  add_site(s, SITE_DIMS_DATA, t, NULL, 0);
  for (size_t i = 0; i < t->n_dims; i++)
    add_site(s, SITE_I64, &t->dims[i], NULL, 0);
  for (size_t i = 0; i < t->n_int64_data; i++)
    add_site(s, SITE_I64, &t->int64_data[i], NULL, 0);
  for (size_t i = 0; i < t->n_int32_data; i++)
    add_site(s, SITE_I32, &t->int32_data[i], NULL, 0);
  for (size_t i = 0; i < t->n_float_data; i++)
    add_site(s, SITE_F32, &t->float_data[i], NULL, 0);
  for (size_t i = 0; i < t->n_string_data; i++)
    add_site(s, SITE_BYTES, &t->string_data[i], NULL, 0);
  if (t->has_raw_data && t->raw_data.len)
    add_site(s, SITE_RAW, &t->raw_data, NULL, raw_width(t->data_type));
}

static void type_sites(Sites* s, Onnx__TypeProto* tp) {
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type ||
      !tp->tensor_type->shape)
    return;
  Onnx__TensorShapeProto* sh = tp->tensor_type->shape;
  for (size_t i = 0; i < sh->n_dim; i++)
    add_site(s, SITE_DIM, sh->dim[i], NULL, 0);
}

static void graph_sites(Sites* s, Onnx__GraphProto* g, int depth) {
  if (!g || depth > 4) return;
  for (size_t i = 0; i < g->n_input; i++)
    type_sites(s, g->input[i]->type);
  for (size_t i = 0; i < g->n_initializer; i++)
    tensor_sites(s, g->initializer[i]);
  for (size_t n = 0; n < g->n_node; n++) {
    Onnx__NodeProto* node = g->node[n];
    for (size_t a = 0; a < node->n_attribute; a++) {
      Onnx__AttributeProto* at = node->attribute[a];
      switch (at->type) {
      /* proto2: a value is written only when its has_ flag is set. */
      case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
        at->has_i = 1;
        add_site(s, SITE_I64, &at->i, NULL, 0);
        break;
      case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
        at->has_f = 1;
        add_site(s, SITE_F32, &at->f, NULL, 0);
        break;
      case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
        at->has_s = 1;
        add_site(s, SITE_BYTES, &at->s, NULL, 0);
        break;
      case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
        add_site(s, SITE_I64_LIST, &at->ints, &at->n_ints, 0);
        for (size_t i = 0; i < at->n_ints; i++)
          add_site(s, SITE_I64, &at->ints[i], NULL, 0);
        break;
      case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
        add_site(s, SITE_F32_LIST, &at->floats, &at->n_floats, 0);
        for (size_t i = 0; i < at->n_floats; i++)
          add_site(s, SITE_F32, &at->floats[i], NULL, 0);
        break;
      case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS:
        for (size_t i = 0; i < at->n_strings; i++)
          add_site(s, SITE_BYTES, &at->strings[i], NULL, 0);
        break;
      case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR:
        tensor_sites(s, at->t);
        break;
      case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH:
        graph_sites(s, at->g, depth + 1);
        break;
      case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS:
        for (size_t i = 0; i < at->n_graphs; i++)
          graph_sites(s, at->graphs[i], depth + 1);
        break;
      default:
        break;
      }
    }
  }
}

/* Lists are resized with realloc: protobuf-c's default allocator is malloc. */
static void mutate_list(Rng* r, void** arr, size_t* n, size_t width, int is_float) {
  size_t len = *n;
  switch (rng_below(r, 3)) {
  case 0:
    len = 0;
    break;
  case 1:
    len = len ? len - 1 : 0;
    break;
  default:
    len = len + 1 + rng_below(r, 3);
    break;
  }
  if (len == 0) {
    free(*arr);
    *arr = NULL;
    *n = 0;
    return;
  }
  uint8_t* p = realloc(*arr, len * width);
  if (!p) return;
  for (size_t i = *n; i < len; i++) {
    if (is_float) {
      float f = pick_float(r);
      memcpy(p + i * width, &f, width);
    } else {
      int64_t v = k_ints[rng_below(r, N_INTS)];
      memcpy(p + i * width, &v, width);
    }
  }
  *arr = p;
  *n = len;
}

static void mutate_bytes(Rng* r, ProtobufCBinaryData* b) {
  static const char* v[] = {"", "a\0b", "\0", "\x1b[2J\n\t", "-1", "NaN"};
  static const size_t vlen[] = {0, 3, 1, 6, 2, 3};
  size_t k = rng_below(r, sizeof v / sizeof v[0]);
  uint8_t* p = malloc(vlen[k] + 1);
  if (!p) return;
  memcpy(p, v[k], vlen[k] + 1);
  free(b->data);
  b->data = p;
  b->len = vlen[k];
}

static void mutate_raw(Rng* r, ProtobufCBinaryData* b, int width) {
  size_t slots = b->len / (size_t)width;
  if (!slots) return;
  uint8_t* at = b->data + rng_below(r, slots) * (size_t)width;
  if (width == 8) {
    int64_t v = k_ints[rng_below(r, N_INTS)];
    if (rng_below(r, 4) == 0) {
      double d = (double)pick_float(r);
      memcpy(at, &d, 8);
    } else {
      memcpy(at, &v, 8);
    }
  } else if (width == 4) {
    if (rng_below(r, 2)) {
      float f = pick_float(r);
      memcpy(at, &f, 4);
    } else {
      int32_t v = (int32_t)k_ints[rng_below(r, N_INTS)];
      memcpy(at, &v, 4);
    }
  } else {
    static const uint8_t v[] = {0x00, 0xff, 0x80, 0x7f, 0x01, 0x7c, 0xfc};
    for (int i = 0; i < width; i++)
      at[i] = v[rng_below(r, sizeof v)];
  }
}

/* Gives an initializer new small dims and raw data to match them, so the
 * model still loads and a kernel meets an unusual shape (empty, scalar). */
static void mutate_dims_data(Rng* r, Onnx__TensorProto* t) {
  if (!t->has_data_type || t->data_type == ONYX_ELEM_STRING || t->n_external_data ||
      t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
    return;
  int width = raw_width(t->data_type);
  size_t rank = rng_below(r, 4), count = 1;
  int64_t* dims = rank ? malloc(rank * sizeof *dims) : NULL;
  if (rank && !dims) return;
  for (size_t i = 0; i < rank; i++) {
    dims[i] = (int64_t)rng_below(r, 4);
    count *= (size_t)dims[i];
  }
  uint8_t* raw = malloc(count * (size_t)width + 1);
  if (!raw) {
    free(dims);
    return;
  }
  for (size_t i = 0; i < count * (size_t)width; i++)
    raw[i] = (uint8_t)(t->data_type == ONYX_ELEM_BOOL ? rng_below(r, 2) : rng_below(r, 5));
  free(t->dims);
  t->dims = dims;
  t->n_dims = rank;
  free(t->float_data);
  free(t->int32_data);
  free(t->int64_data);
  free(t->double_data);
  free(t->uint64_data);
  t->float_data = NULL;
  t->int32_data = NULL;
  t->int64_data = NULL;
  t->double_data = NULL;
  t->uint64_data = NULL;
  t->n_float_data = t->n_int32_data = t->n_int64_data = t->n_double_data = t->n_uint64_data = 0;
  free(t->raw_data.data);
  t->raw_data.data = raw;
  t->raw_data.len = count * (size_t)width;
  t->has_raw_data = 1;
}

static void mutate_dim(Rng* r, Onnx__TensorShapeProto__Dimension* d) {
  if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM) free(d->dim_param);
  switch (rng_below(r, 4)) {
  case 0:
    d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE__NOT_SET;
    break;
  case 1: {
    char* name = malloc(2);
    if (!name) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE__NOT_SET;
      break;
    }
    memcpy(name, "N", 2);
    d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
    d->dim_param = name;
    break;
  }
  default:
    d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    d->dim_value = rng_below(r, 2) ? (int64_t)rng_below(r, 4) : k_ints[rng_below(r, N_INTS)];
    break;
  }
}

static void apply(Rng* r, const Site* s) {
  switch (s->kind) {
  case SITE_I64:
    *(int64_t*)s->p = pick_int(r, *(int64_t*)s->p);
    break;
  case SITE_I32:
    *(int32_t*)s->p = (int32_t)pick_int(r, *(int32_t*)s->p);
    break;
  case SITE_F32:
    *(float*)s->p = pick_float(r);
    break;
  case SITE_I64_LIST:
    mutate_list(r, s->p, s->n, sizeof(int64_t), 0);
    break;
  case SITE_F32_LIST:
    mutate_list(r, s->p, s->n, sizeof(float), 1);
    break;
  case SITE_BYTES:
    mutate_bytes(r, s->p);
    break;
  case SITE_RAW:
    mutate_raw(r, s->p, s->width);
    break;
  case SITE_DIM:
    mutate_dim(r, s->p);
    break;
  case SITE_DIMS_DATA:
    mutate_dims_data(r, s->p);
    break;
  }
}

static Sites g_sites;

size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  Rng r = {((uint64_t)seed << 1) | 1};
  /* One input in eight takes byte mutations, which reach what structure
   * cannot (field numbers, wire types, lengths). */
  if (rng_below(&r, 8) == 0) return LLVMFuzzerMutate(data, size, max_size);
  Onnx__ModelProto* m = onnx__model_proto__unpack(NULL, size, data);
  if (!m) return LLVMFuzzerMutate(data, size, max_size);
  g_sites.n = 0;
  graph_sites(&g_sites, m->graph, 0);
  if (!g_sites.n) {
    onnx__model_proto__free_unpacked(m, NULL);
    return LLVMFuzzerMutate(data, size, max_size);
  }
  /* Sites point into the message: a list mutation may move the elements
   * it listed, so each round collects them again. */
  size_t rounds = 1 + rng_below(&r, 3);
  for (size_t i = 0; i < rounds; i++) {
    if (i) {
      g_sites.n = 0;
      graph_sites(&g_sites, m->graph, 0);
      if (!g_sites.n) break;
    }
    apply(&r, &g_sites.site[rng_below(&r, g_sites.n)]);
  }
  size_t len = onnx__model_proto__get_packed_size(m);
  if (len > max_size) {
    onnx__model_proto__free_unpacked(m, NULL);
    return LLVMFuzzerMutate(data, size, max_size);
  }
  onnx__model_proto__pack(m, data);
  onnx__model_proto__free_unpacked(m, NULL);
  return len;
}

/* --- the target ------------------------------------------------------------------------- */

static OnyxSessionOptions* g_opts;

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  onyx_fuzz_env();
  g_opts = onyx_fuzz_options();
  const char* ms = getenv("ONYX_FUZZ_RUN_MS");
  long run_ms = ms && atol(ms) > 0 ? atol(ms) : 2000;
  OnyxStatus* st = onyx_session_options_set_max_run_ms(g_opts, (uint64_t)run_ms);
  if (!st) st = onyx_session_options_set_max_fold_ms(g_opts, 1000);
  if (!st) st = onyx_session_options_set_max_session_bytes(g_opts, (size_t)256 << 20);
  if (st) abort(); /* setup, not input */
  return 0;
}

static size_t elem_width(OnyxElemType t) {
  switch (t) {
  case ONYX_ELEM_FLOAT32:
  case ONYX_ELEM_INT32:
  case ONYX_ELEM_UINT32:
    return 4;
  case ONYX_ELEM_INT64:
  case ONYX_ELEM_UINT64:
  case ONYX_ELEM_FLOAT64:
  case ONYX_ELEM_COMPLEX64:
    return 8;
  case ONYX_ELEM_COMPLEX128:
    return 16;
  case ONYX_ELEM_UINT16:
  case ONYX_ELEM_INT16:
  case ONYX_ELEM_FLOAT16:
  case ONYX_ELEM_BFLOAT16:
    return 2;
  case ONYX_ELEM_UINT8:
  case ONYX_ELEM_INT8:
  case ONYX_ELEM_BOOL:
  case ONYX_ELEM_FLOAT8E4M3FN:
  case ONYX_ELEM_FLOAT8E4M3FNUZ:
  case ONYX_ELEM_FLOAT8E5M2:
  case ONYX_ELEM_FLOAT8E5M2FNUZ:
    return 1;
  default:
    return 0; /* strings are built apart; sub-byte types are not generated */
  }
}

#define MAX_INPUTS      16
#define MAX_INPUT_BYTES ((size_t)1 << 20)

/* A tensor of the declared type and shape (unknown dims: 1..3), holding small
 * values: indices, axes and shapes stay meaningful. NULL: not generated. */
static OnyxValue* make_tensor(Rng* r, OnyxElemType type, int32_t rank, const int64_t* dims) {
  if (rank < 0) rank = (int32_t)rng_below(r, 3);
  if (rank > 8) return NULL;
  int64_t d[8];
  size_t count = 1;
  for (int32_t i = 0; i < rank; i++) {
    d[i] = dims && dims[i] >= 0 ? dims[i] : 1 + (int64_t)rng_below(r, 3);
    if (d[i] > 4096) return NULL;
    count *= (size_t)d[i];
    if (count > MAX_INPUT_BYTES) return NULL;
  }
  OnyxValue* v = NULL;
  OnyxStatus* st;
  if (type == ONYX_ELEM_STRING) {
    const char** s = calloc(count ? count : 1, sizeof *s);
    if (!s) abort();
    for (size_t i = 0; i < count; i++)
      s[i] = rng_below(r, 2) ? "a" : "";
    st = onyx_value_create_tensor(type, d, (size_t)rank, s, count * sizeof *s, &v);
    free(s);
  } else {
    size_t w = elem_width(type);
    if (!w || count * w > MAX_INPUT_BYTES) return NULL;
    uint8_t* p = calloc(count ? count : 1, w);
    if (!p) abort();
    for (size_t i = 0; i < count; i++) {
      int64_t small = (int64_t)rng_below(r, 4) - 1; /* -1..2 */
      switch (type) {
      case ONYX_ELEM_FLOAT32: {
        float f = (float)small * 0.5f;
        memcpy(p + i * w, &f, w);
        break;
      }
      case ONYX_ELEM_FLOAT64: {
        double f = (double)small * 0.5;
        memcpy(p + i * w, &f, w);
        break;
      }
      case ONYX_ELEM_BOOL:
        p[i] = (uint8_t)(small > 0);
        break;
      case ONYX_ELEM_INT64:
      case ONYX_ELEM_UINT64:
        memcpy(p + i * w, &small, w);
        break;
      case ONYX_ELEM_INT32:
      case ONYX_ELEM_UINT32: {
        int32_t x = (int32_t)small;
        memcpy(p + i * w, &x, w);
        break;
      }
      default:
        p[i * w] = (uint8_t)small;
        break;
      }
    }
    st = onyx_value_create_tensor(type, d, (size_t)rank, p, count * w, &v);
    free(p);
  }
  if (st) {
    onyx_status_release(st);
    return NULL;
  }
  return v;
}

static void expect_message(OnyxStatus* st) {
  const char* msg = onyx_status_message(st);
  if (!msg || !*msg) abort(); /* every failure must say something */
  onyx_status_release(st);
}

static void run_once(OnyxSession* s, Rng* r) {
  size_t n_in = onyx_session_input_count(s), n_out = onyx_session_output_count(s);
  if (n_in > MAX_INPUTS || n_out > MAX_INPUTS || n_out == 0) return;
  const char* in_names[MAX_INPUTS];
  const char* out_names[MAX_INPUTS];
  OnyxValue* in[MAX_INPUTS] = {0};
  OnyxValue* out[MAX_INPUTS] = {0};
  int ok = 1;
  for (size_t i = 0; i < n_in && ok; i++) {
    OnyxElemType type;
    int32_t rank;
    const int64_t* dims;
    in_names[i] = onyx_session_input_name(s, i);
    OnyxStatus* st = onyx_session_input_info(s, i, &type, &rank, &dims);
    if (st) {
      expect_message(st);
      ok = 0;
      break;
    }
    switch (onyx_session_input_kind(s, i)) {
    case ONYX_TYPE_TENSOR:
      in[i] = make_tensor(r, type, rank, dims);
      break;
    case ONYX_TYPE_OPTIONAL_TENSOR:
    case ONYX_TYPE_OPTIONAL_SEQUENCE:
      st = onyx_value_create_none(type, &in[i]);
      if (st) onyx_status_release(st);
      break;
    case ONYX_TYPE_SEQUENCE:
      st = onyx_value_create_sequence(type, NULL, 0, &in[i]);
      if (st) onyx_status_release(st);
      break;
    case ONYX_TYPE_MAP:
    case ONYX_TYPE_SEQUENCE_MAP:
      /* No map feeds are made: such a model is loaded and planned, not run. */
      break;
    }
    if (!in[i]) ok = 0;
  }
  for (size_t i = 0; i < n_out; i++)
    out_names[i] = onyx_session_output_name(s, i);
  if (ok) {
    OnyxStatus* st = onyx_session_run(s, NULL, in_names, (const OnyxValue* const*)in, n_in,
                                      out_names, n_out, out);
    if (st) {
      expect_message(st);
    } else {
      uint8_t sink = 0;
      for (size_t i = 0; i < n_out; i++) {
        const OnyxTensor* t = onyx_value_tensor(out[i]);
        if (!t || onyx_tensor_elem_type(t) == ONYX_ELEM_STRING) continue;
        const uint8_t* p = onyx_tensor_data(t);
        size_t bytes = onyx_tensor_byte_size(t);
        for (size_t b = 0; b < bytes; b++)
          sink ^= p[b];
      }
      onyx_fuzz_sink = sink;
      onyx_values_release(out, n_out);
    }
  }
  onyx_values_release(in, n_in);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(g_opts, data, size, NULL, &s);
  if (st) {
    expect_message(st);
    return 0;
  }
  uint64_t h = 1469598103934665603ull; /* FNV-1a: the same input, the same run */
  for (size_t i = 0; i < size; i++)
    h = (h ^ data[i]) * 1099511628211ull;
  Rng r = {h | 1};
  run_once(s, &r);
  onyx_session_release(s);
  return 0;
}
