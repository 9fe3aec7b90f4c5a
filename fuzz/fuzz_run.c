/* fuzz_run.c — runs small fixed models (built once, at start-up) on fuzzed
 * input shapes and values. The first byte picks the model; then each input
 * takes a rank byte, one byte per dim and its elements (missing bytes read
 * as zero). Float inputs have ranks 0-4 and dims 0-7; int64 inputs (shapes,
 * indices, slice bounds) ranks 0-1, up to 4 values in [-128, 127], so every
 * output stays small whatever the kernel is asked. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz_common.h"
#include "ox_test_models.h"

volatile uint8_t onyx_fuzz_sink; /* keeps the output reads from being optimized away */

typedef struct {
  const char* op;
  const char* inputs; /* comma-separated; "S" "I" "st" "en" "ax" are int64 */
  int n_inputs;
  const char* attr; /* one int attribute, or NULL */
  int64_t attr_value;
} FuzzModel;

static const FuzzModel g_models[] = {
    {"Add", "A,B", 2, NULL, 0},
    {"MatMul", "A,B", 2, NULL, 0},
    {"Softmax", "A", 1, "axis", -1},
    {"Concat", "A,B", 2, "axis", 1},
    {"Reshape", "A,S", 2, NULL, 0},
    {"Gather", "A,I", 2, "axis", 0},
    {"Transpose", "A", 1, NULL, 0},
    {"Slice", "A,st,en,ax", 4, NULL, 0},
    {"Conv", "A,B", 2, NULL, 0},
    {"MaxPool", "A", 1, NULL, 0},
    {"ReduceSum", "A,I", 2, "keepdims", 0},
    {"Flatten", "A", 1, "axis", 1},
};
#define N_MODELS (sizeof g_models / sizeof g_models[0])

static OnyxSession* g_sessions[N_MODELS];

static int is_int64_input(const char* name) {
  return strcmp(name, "A") && strcmp(name, "B");
}

static void build_model(size_t m, OnyxSessionOptions* o) {
  const FuzzModel* fm = &g_models[m];
  OxTestModel* t = otm_new(17);
  char names[64];
  strcpy(names, fm->inputs);
  for (char* tok = strtok(names, ","); tok; tok = strtok(NULL, ","))
    otm_input(t, tok, is_int64_input(tok) ? ONYX_ELEM_INT64 : ONYX_ELEM_FLOAT32, -1, NULL);
  OxTestNode* n = otm_node(t, fm->op, "n0", fm->inputs, "Y");
  if (fm->attr) otm_attr_int(n, fm->attr, fm->attr_value);
  if (!strcmp(fm->op, "MaxPool")) otm_attr_ints(n, "kernel_shape", 2, (int64_t[]){2, 2});
  otm_output(t, "Y", ONYX_ELEM_FLOAT32, -1, NULL);
  uint8_t* bytes;
  size_t len;
  otm_serialize(t, &bytes, &len);
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &g_sessions[m]);
  free(bytes);
  otm_free(t);
  if (st) abort(); /* the fixed models must load */
}

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  onyx_fuzz_env();
  OnyxSessionOptions* o = onyx_fuzz_options();
  for (size_t m = 0; m < N_MODELS; m++)
    build_model(m, o);
  onyx_session_options_release(o);
  return 0;
}

typedef struct {
  const uint8_t* p;
  size_t left;
} Reader;

static uint8_t next_byte(Reader* r) {
  if (!r->left) return 0;
  r->left--;
  return *r->p++;
}

static OnyxValue* make_input(Reader* r, int int64) {
  int64_t dims[4];
  size_t rank = next_byte(r) % (int64 ? 2 : 5), count = 1;
  for (size_t i = 0; i < rank; i++) {
    dims[i] = next_byte(r) % (int64 ? 5 : 8);
    count *= (size_t)dims[i];
  }
  size_t elem = int64 ? sizeof(int64_t) : sizeof(float);
  uint8_t* data = calloc(count ? count : 1, elem);
  if (!data) abort();
  for (size_t i = 0; i < count; i++) {
    if (int64) {
      int64_t v = (int8_t)next_byte(r);
      memcpy(data + i * elem, &v, elem);
    } else {
      for (size_t b = 0; b < elem; b++)
        data[i * elem + b] = next_byte(r);
    }
  }
  OnyxValue* v = NULL;
  OnyxStatus* st = onyx_value_create_tensor(int64 ? ONYX_ELEM_INT64 : ONYX_ELEM_FLOAT32, dims, rank,
                                            data, count * elem, &v);
  free(data);
  if (st) abort();
  return v;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r = {data, size};
  size_t m = next_byte(&r) % N_MODELS;
  const FuzzModel* fm = &g_models[m];
  const char* names[4];
  OnyxValue* in[4] = {0};
  char buf[64];
  strcpy(buf, fm->inputs);
  int n = 0;
  for (char* tok = strtok(buf, ","); tok && n < 4; tok = strtok(NULL, ",")) {
    names[n] = tok;
    in[n] = make_input(&r, is_int64_input(tok));
    n++;
  }
  const char* out_name = "Y";
  OnyxValue* out = NULL;
  OnyxStatus* st = onyx_session_run(g_sessions[m], NULL, names, (const OnyxValue* const*)in,
                                    (size_t)n, &out_name, 1, &out);
  if (st) {
    const char* msg = onyx_status_message(st);
    if (!msg || !*msg) abort();
    onyx_status_release(st);
  } else {
    const OnyxTensor* t = onyx_value_tensor(out);
    size_t bytes = onyx_tensor_byte_size(t);
    uint8_t sink = 0;
    for (size_t i = 0; i < bytes; i++)
      sink ^= ((const uint8_t*)onyx_tensor_data(t))[i];
    onyx_fuzz_sink = sink;
    onyx_value_release(out);
  }
  for (int i = 0; i < n; i++)
    onyx_value_release(in[i]);
  return 0;
}
