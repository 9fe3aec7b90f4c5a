/* fuzz_config.c — fuzzes the JSON provider/session config parser
 * (onyx_session_options_load_config_text), then session creation with the
 * options it produced when it accepted the text: a config may name providers
 * and libraries, so only the parse is fuzzed beyond that point. */
#include <stdint.h>
#include <stdlib.h>
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  onyx_fuzz_env();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  OnyxSessionOptions* o = NULL;
  OnyxStatus* st = onyx_session_options_create(&o);
  if (st) abort();
  st = onyx_session_options_load_config_text(o, (const char*)data, size, "<fuzz>");
  if (st) {
    const char* msg = onyx_status_message(st);
    if (!msg || !*msg) abort();
    onyx_status_release(st);
  }
  onyx_session_options_release(o);
  return 0;
}
