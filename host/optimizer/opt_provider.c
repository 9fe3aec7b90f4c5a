/* opt_provider.c — provider graph transformers (OnyxEp.transform, ABI 1.1):
 * the graph edits a provider makes on its own nodes after placement. */
#include "ox_session.h"

OnyxStatus* ox_edit_replace(OnyxGraphEdit* e, const OnyxNode* const* nodes, size_t n_nodes,
                            const char* domain, const char* op_type, const char* name,
                            const OnyxValueInfo* const* inputs, size_t n_inputs,
                            const OnyxValueInfo* const* outputs, size_t n_outputs,
                            const OnyxNode** out) {
  (void)e, (void)nodes, (void)n_nodes, (void)domain, (void)op_type, (void)name, (void)inputs,
      (void)n_inputs, (void)outputs, (void)n_outputs, (void)out;
  return ox_status(ONYX_NOT_IMPLEMENTED, "edit_replace: not available");
}
OnyxStatus* ox_edit_set_attr_int(OnyxGraphEdit* e, const OnyxNode* n, const char* name, int64_t v) {
  (void)e, (void)n, (void)name, (void)v;
  return ox_status(ONYX_NOT_IMPLEMENTED, "edit_set_attr_int: not available");
}
OnyxStatus* ox_edit_set_attr_float(OnyxGraphEdit* e, const OnyxNode* n, const char* name, float v) {
  (void)e, (void)n, (void)name, (void)v;
  return ox_status(ONYX_NOT_IMPLEMENTED, "edit_set_attr_float: not available");
}
OnyxStatus* ox_edit_set_attr_ints(OnyxGraphEdit* e, const OnyxNode* n, const char* name,
                                  const int64_t* v, size_t count) {
  (void)e, (void)n, (void)name, (void)v, (void)count;
  return ox_status(ONYX_NOT_IMPLEMENTED, "edit_set_attr_ints: not available");
}
OnyxStatus* ox_edit_set_attr_string(OnyxGraphEdit* e, const OnyxNode* n, const char* name,
                                    const char* v) {
  (void)e, (void)n, (void)name, (void)v;
  return ox_status(ONYX_NOT_IMPLEMENTED, "edit_set_attr_string: not available");
}
