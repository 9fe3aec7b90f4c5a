/* hello.c — the smallest complete Onyx application: load a model, run it,
 * print its outputs.
 *
 *   hello MODEL.onnx [CONFIG.json]
 *
 * Every float32 input is fed a fixed pattern (element i gets
 * 0.5 * (i % 7) - 1.5); unknown dimensions are taken as 1. The output lists
 * where the nodes ran, then each output's shape and values. */
#include <stdio.h>
#include <stdlib.h>
#include "onyx/onyx.h"

/* Prints the error and releases it; returns 1 if there was one. */
static int failed(OnyxStatus* st, const char* what) {
  if (!st) return 0;
  fprintf(stderr, "hello: %s: %s (%s)\n", what, onyx_status_message(st),
          onyx_status_code_name(onyx_status_code(st)));
  onyx_status_release(st);
  return 1;
}

/* A float32 input of the declared shape, filled with the pattern; 1 on error. */
static int make_input(const OnyxSession* s, size_t i, OnyxValue** out) {
  const char* name = onyx_session_input_name(s, i);
  OnyxElemType type;
  int32_t rank;
  const int64_t* declared;
  if (failed(onyx_session_input_info(s, i, &type, &rank, &declared), name)) return 1;
  if (type != ONYX_ELEM_FLOAT32 || rank < 0 || rank > 8) {
    fprintf(stderr, "hello: input '%s' is not a float32 tensor of known rank <= 8\n", name);
    return 1;
  }
  int64_t dims[8];
  size_t count = 1;
  for (int32_t d = 0; d < rank; d++) {
    dims[d] = declared[d] < 0 ? 1 : declared[d];
    count *= (size_t)dims[d];
  }
  float* data = malloc((count ? count : 1) * sizeof *data);
  if (!data) {
    fprintf(stderr, "hello: out of memory\n");
    return 1;
  }
  for (size_t k = 0; k < count; k++)
    data[k] = 0.5f * (float)(k % 7) - 1.5f;
  OnyxStatus* st = onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dims, (size_t)rank, data,
                                            count * sizeof *data, out);
  free(data);
  return failed(st, name);
}

static void print_tensor(const char* name, const OnyxTensor* t) {
  printf("%s [", name);
  for (size_t d = 0; d < onyx_tensor_rank(t); d++)
    printf("%s%lld", d ? "," : "", (long long)onyx_tensor_dims(t)[d]);
  printf("] %s:", onyx_elem_type_name(onyx_tensor_elem_type(t)));
  if (onyx_tensor_elem_type(t) == ONYX_ELEM_FLOAT32) {
    const float* v = onyx_tensor_data(t);
    for (size_t k = 0; k < onyx_tensor_elem_count(t); k++)
      printf(" %.6g", (double)v[k]);
  } else {
    printf(" (%zu elements)", onyx_tensor_elem_count(t));
  }
  printf("\n");
}

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: %s MODEL.onnx [CONFIG.json]\n", argv[0]);
    return 2;
  }
  printf("onyx %s\n", onyx_version_string());
  OnyxSessionOptions* opts = NULL;
  OnyxSession* session = NULL;
  OnyxValue** inputs = NULL;
  OnyxValue** outputs = NULL;
  const char** in_names = NULL;
  const char** out_names = NULL;
  size_t n_in = 0, n_out = 0;
  int rc = 1;

  if (failed(onyx_session_options_create(&opts), "options")) goto done;
  if (argc == 3 && failed(onyx_session_options_load_config(opts, argv[2]), "config")) goto done;
  if (failed(onyx_session_create(opts, argv[1], &session), "session")) goto done;

  printf("placement:");
  for (size_t p = 0; p < onyx_session_provider_count(session); p++)
    printf(" %s=%zu", onyx_session_provider_name(session, p),
           onyx_session_provider_node_count(session, p));
  printf("\n");

  n_in = onyx_session_input_count(session);
  n_out = onyx_session_output_count(session);
  inputs = calloc(n_in + 1, sizeof *inputs);
  in_names = calloc(n_in + 1, sizeof *in_names);
  outputs = calloc(n_out + 1, sizeof *outputs);
  out_names = calloc(n_out + 1, sizeof *out_names);
  if (!inputs || !in_names || !outputs || !out_names) {
    fprintf(stderr, "hello: out of memory\n");
    goto done;
  }
  for (size_t i = 0; i < n_in; i++) {
    in_names[i] = onyx_session_input_name(session, i);
    if (make_input(session, i, &inputs[i])) goto done;
  }
  for (size_t i = 0; i < n_out; i++)
    out_names[i] = onyx_session_output_name(session, i);

  if (failed(onyx_session_run(session, NULL, in_names, (const OnyxValue* const*)inputs, n_in,
                              out_names, n_out, outputs),
             "run"))
    goto done;
  for (size_t i = 0; i < n_out; i++)
    print_tensor(out_names[i], onyx_value_tensor(outputs[i]));
  rc = 0;

done:
  if (outputs) onyx_values_release(outputs, n_out);
  if (inputs) onyx_values_release(inputs, n_in);
  free(outputs);
  free(inputs);
  free(out_names);
  free(in_names);
  onyx_session_release(session); /* before the options: any order is fine */
  onyx_session_options_release(opts);
  return rc;
}
