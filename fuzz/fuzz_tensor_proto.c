/* fuzz_tensor_proto.c — fuzzes the TensorProto reader `onyx test` uses for
 * the .pb files of ONNX test folders (onyx_value_parse_tensor_proto), and
 * reads back every element of what it accepts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz_common.h"

volatile unsigned onyx_fuzz_sink; /* keeps the reads below from being optimized away */

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  onyx_fuzz_env();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  OnyxValue* v = NULL;
  char* name = NULL;
  OnyxStatus* st = onyx_value_parse_tensor_proto(data, size, &v, &name);
  if (st) {
    const char* msg = onyx_status_message(st);
    if (!msg || !*msg) abort();
    onyx_status_release(st);
    return 0;
  }
  const OnyxTensor* t = onyx_value_tensor(v);
  if (!t || !name) abort();
  size_t n = onyx_tensor_elem_count(t), bytes = onyx_tensor_byte_size(t);
  const void* p = onyx_tensor_data(t);
  unsigned sum = 0;
  if (onyx_tensor_elem_type(t) == ONYX_ELEM_STRING) {
    const char* const* s = p;
    for (size_t i = 0; i < n; i++)
      sum += s[i] ? (unsigned)strlen(s[i]) : 0; /* each string is terminated */
  } else {
    for (size_t i = 0; i < bytes; i++)
      sum += ((const uint8_t*)p)[i]; /* every byte is in bounds */
  }
  onyx_fuzz_sink = sum;
  size_t count = 1;
  for (size_t i = 0; i < onyx_tensor_rank(t); i++)
    count *= (size_t)onyx_tensor_dims(t)[i];
  if (count != n) abort();
  onyx_free(name);
  onyx_value_release(v);
  return 0;
}
