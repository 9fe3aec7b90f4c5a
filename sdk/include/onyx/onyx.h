/* onyx.h — the application API of Onyx.
 *
 * Load a model, choose providers, run it:
 *
 *   OnyxSessionOptions* opts = NULL;
 *   OnyxSession* sess = NULL;
 *   OnyxStatus* st = onyx_session_options_create(&opts);
 *   if (!st) st = onyx_session_options_load_config(opts, "providers.json");
 *   if (!st) st = onyx_session_create(opts, "model.onnx", &sess);
 *   int64_t dims[2] = {1, 4};
 *   float x[4] = {1, 2, 3, 4};
 *   OnyxValue* in = NULL;
 *   OnyxValue* out = NULL;
 *   if (!st) st = onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dims, 2, x, sizeof x, &in);
 *   const char* in_name = "x";
 *   const char* out_name = "y";
 *   if (!st) st = onyx_session_run(sess, NULL, &in_name, (const OnyxValue* const*)&in, 1,
 *                                  &out_name, 1, &out);
 *   if (!st) {
 *     const OnyxTensor* y = onyx_value_tensor(out);
 *     const float* yd = onyx_tensor_data(y);
 *     printf("%g\n", yd[0]);
 *   } else {
 *     fprintf(stderr, "%s\n", onyx_status_message(st));
 *   }
 *   onyx_values_release(&out, 1);
 *   onyx_value_release(in);
 *   onyx_status_release(st);
 *   onyx_session_release(sess);
 *   onyx_session_options_release(opts);
 *
 * Conventions: every function that can fail returns OnyxStatus*, NULL on
 * success; on failure out-parameters are left NULL and nothing is leaked.
 * Every _create has a _release, and every release accepts NULL. Strings
 * returned as `const char*` are owned by the object they came from; strings
 * returned through `char**` are the caller's, freed with onyx_free.
 */
#ifndef ONYX_H
#define ONYX_H

#include <stddef.h>
#include <stdint.h>
#include "onyx_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Symbols of libonyx itself. */
#define ONYX_API ONYX_EXPORT

typedef struct OnyxSessionOptions OnyxSessionOptions;
typedef struct OnyxSession OnyxSession;
typedef struct OnyxRunOptions OnyxRunOptions;
typedef struct OnyxValue OnyxValue;

/* --- Library -------------------------------------------------------------- */
ONYX_API const char* onyx_version_string(void); /* "0.1.0" */
ONYX_API void onyx_free(void* p);               /* for memory Onyx handed out */

/* --- Status ---------------------------------------------------------------- */
ONYX_API OnyxStatusCode onyx_status_code(const OnyxStatus* st);  /* ONYX_OK for NULL */
ONYX_API const char* onyx_status_message(const OnyxStatus* st);  /* "" for NULL */
ONYX_API const char* onyx_status_code_name(OnyxStatusCode code); /* "INVALID_MODEL" */
ONYX_API void onyx_status_release(OnyxStatus* st);

/* --- Element types ---------------------------------------------------------- */
ONYX_API const char* onyx_elem_type_name(OnyxElemType t); /* "float32"; "?" if unknown */
/* Bytes per element; 0 for strings, sub-byte types and unknown types. */
ONYX_API size_t onyx_elem_type_size(OnyxElemType t);

/* --- Session options ---------------------------------------------------------- */
typedef enum OnyxExecutionOrder {
  ONYX_ORDER_DEFAULT = 0,  /* deterministic topological order */
  ONYX_ORDER_PRIORITY = 1, /* Kahn's algorithm with per-node priority */
} OnyxExecutionOrder;

typedef enum OnyxOptimizationLevel {
  ONYX_OPT_DISABLED = 0,
  ONYX_OPT_BASIC = 1,
  ONYX_OPT_EXTENDED = 2,
  ONYX_OPT_LAYOUT = 3,
  ONYX_OPT_ALL = 99,
} OnyxOptimizationLevel;

typedef void (*OnyxLogFn)(void* user, OnyxLogSeverity severity, const char* message);

ONYX_API OnyxStatus* onyx_session_options_create(OnyxSessionOptions** out);
ONYX_API void onyx_session_options_release(OnyxSessionOptions* o);
/* Reads a JSON provider/session config (docs/config.md). Errors name the file,
 * line and column, or the field at fault. Settings made in code before the
 * call are overwritten by the ones the file has. */
ONYX_API OnyxStatus* onyx_session_options_load_config(OnyxSessionOptions* o, const char* path);
/* The same, from text in memory; `origin` names it in messages. */
ONYX_API OnyxStatus* onyx_session_options_load_config_text(OnyxSessionOptions* o, const char* text,
                                                           size_t len, const char* origin);
ONYX_API OnyxStatus* onyx_session_options_set_threads(OnyxSessionOptions* o, int threads);
ONYX_API OnyxStatus* onyx_session_options_set_log_severity(OnyxSessionOptions* o,
                                                           OnyxLogSeverity s);
ONYX_API OnyxStatus* onyx_session_options_set_log_callback(OnyxSessionOptions* o, OnyxLogFn fn,
                                                           void* user);
ONYX_API OnyxStatus* onyx_session_options_set_execution_order(OnyxSessionOptions* o,
                                                              OnyxExecutionOrder order);
ONYX_API OnyxStatus* onyx_session_options_set_optimization_level(OnyxSessionOptions* o,
                                                                 OnyxOptimizationLevel level);
ONYX_API OnyxStatus* onyx_session_options_set_deterministic(OnyxSessionOptions* o, int on);
/* 1 (default): precompute buffer offsets for static shapes. */
ONYX_API OnyxStatus* onyx_session_options_set_memory_pattern(OnyxSessionOptions* o, int on);
/* Writes a Chrome-trace profile of every run to `path` (NULL: off). */
ONYX_API OnyxStatus* onyx_session_options_set_profile(OnyxSessionOptions* o, const char* path);
/* Resource limits checked while loading and running; 0 keeps the default
 * (docs/config.md lists them). */
ONYX_API OnyxStatus* onyx_session_options_set_limits(OnyxSessionOptions* o, size_t max_model_bytes,
                                                     size_t max_tensor_bytes, size_t max_nodes,
                                                     int max_graph_depth);
/* 1: a node left to the CPU provider because no earlier provider took it is
 * an error ("fallback": "deny" in the config). */
ONYX_API OnyxStatus* onyx_session_options_set_fallback_deny(OnyxSessionOptions* o, int deny);

/* Providers, in priority order. `library` may be NULL: the name resolves to
 * libonyx_ep_<name>.so in ONYX_PROVIDER_PATH, the install's provider folder,
 * then beside libonyx.so. `device` is the device index (usually 0).
 * `required` 0: a provider that fails to load or has no device is skipped
 * with a warning instead of failing session creation. The CPU provider is
 * appended last unless listed or forbidden. */
ONYX_API OnyxStatus* onyx_session_options_add_provider(OnyxSessionOptions* o, const char* name,
                                                       const char* library, int device,
                                                       int required);
/* An in-process provider: `init` plays the part of a library's
 * onyx_provider_init (see onyx_ep.h), so an application can bring its own
 * kernels, custom-domain schemas or a whole provider without building a
 * shared library. The table it returns is checked like a library's. */
struct OnyxHostApi;
struct OnyxProvider;
ONYX_API OnyxStatus* onyx_session_options_add_provider_init(
    OnyxSessionOptions* o, const char* name,
    OnyxStatus* (*init)(const struct OnyxHostApi* host, const struct OnyxProvider** out),
    int required);
/* A provider option (given to the provider at create_ep). `provider` must
 * have been added. */
ONYX_API OnyxStatus* onyx_session_options_set_provider_option(OnyxSessionOptions* o,
                                                              const char* provider, const char* key,
                                                              const char* value);
/* 1: do not append the CPU provider implicitly. */
ONYX_API OnyxStatus* onyx_session_options_set_no_implicit_cpu(OnyxSessionOptions* o, int off);
/* Pins nodes to a provider: by node name (node_name != NULL) or by op type. */
ONYX_API OnyxStatus* onyx_session_options_add_pin(OnyxSessionOptions* o, const char* node_name,
                                                  const char* op_type, const char* provider);

/* --- Session --------------------------------------------------------------------- */
/* Loads, resolves, optimizes, partitions and plans. `opts` may be NULL
 * (defaults: CPU provider only). The options may be released afterwards. */
ONYX_API OnyxStatus* onyx_session_create(const OnyxSessionOptions* opts, const char* model_path,
                                         OnyxSession** out);
/* The same from bytes in memory; external data resolves against `base_dir`
 * (NULL: external data is refused). */
ONYX_API OnyxStatus* onyx_session_create_from_bytes(const OnyxSessionOptions* opts,
                                                    const void* bytes, size_t len,
                                                    const char* base_dir, OnyxSession** out);
ONYX_API void onyx_session_release(OnyxSession* s);

ONYX_API size_t onyx_session_input_count(const OnyxSession* s);
ONYX_API size_t onyx_session_output_count(const OnyxSession* s);
ONYX_API const char* onyx_session_input_name(const OnyxSession* s, size_t i);
ONYX_API const char* onyx_session_output_name(const OnyxSession* s, size_t i);
/* Declared type and shape of an input or output: *rank -1 when unknown; dims
 * hold ONYX_DIM_UNKNOWN for symbolic dims. Pointers owned by the session. */
ONYX_API OnyxStatus* onyx_session_input_info(const OnyxSession* s, size_t i, OnyxElemType* type,
                                             int32_t* rank, const int64_t** dims);
ONYX_API OnyxStatus* onyx_session_output_info(const OnyxSession* s, size_t i, OnyxElemType* type,
                                              int32_t* rank, const int64_t** dims);

/* Placement: which providers the session uses and how many nodes each runs. */
ONYX_API size_t onyx_session_provider_count(const OnyxSession* s);
ONYX_API const char* onyx_session_provider_name(const OnyxSession* s, size_t i);
ONYX_API size_t onyx_session_provider_node_count(const OnyxSession* s, size_t i);
/* A human-readable report: every node's placement, the reasons providers
 * declined nodes, the fused groups and every copy inserted. Free with
 * onyx_free. */
ONYX_API OnyxStatus* onyx_session_explain(const OnyxSession* s, char** text);

/* --- Run ----------------------------------------------------------------------------- */
ONYX_API OnyxStatus* onyx_run_options_create(OnyxRunOptions** out);
ONYX_API void onyx_run_options_release(OnyxRunOptions* r);
ONYX_API OnyxStatus* onyx_run_options_set_tag(OnyxRunOptions* r, const char* tag);
ONYX_API OnyxStatus* onyx_run_options_set_log_severity(OnyxRunOptions* r, OnyxLogSeverity s);
/* Asks runs using these options to stop at the next node boundary; they
 * return ONYX_CANCELLED. Safe to call from any thread. */
ONYX_API void onyx_run_options_terminate(OnyxRunOptions* r);

/* Runs the model. `run_options` may be NULL. Feeds are matched by name;
 * every graph input without an initializer must be fed, with the declared
 * element type and a shape compatible with the declared one. outputs[i]
 * receives a new value for output_names[i], in host memory; release them
 * all with onyx_values_release. On error no output is returned. Safe to call
 * concurrently on one session. */
ONYX_API OnyxStatus* onyx_session_run(OnyxSession* s, const OnyxRunOptions* run_options,
                                      const char* const* input_names,
                                      const OnyxValue* const* inputs, size_t input_count,
                                      const char* const* output_names, size_t output_count,
                                      OnyxValue** outputs);

/* --- Values and tensors ------------------------------------------------------------- */
/* A tensor in host memory. `data` (may be NULL: zero-filled) is copied and
 * must hold exactly the tensor's bytes; for ONYX_ELEM_STRING, `data` is an
 * array of `const char*` and `bytes` is count * sizeof(char*). */
ONYX_API OnyxStatus* onyx_value_create_tensor(OnyxElemType type, const int64_t* dims, size_t rank,
                                              const void* data, size_t bytes, OnyxValue** out);
ONYX_API void onyx_value_release(OnyxValue* v);
/* Releases n values and sets each pointer to NULL. */
ONYX_API void onyx_values_release(OnyxValue** values, size_t n);
/* The value's tensor; NULL if the value is not a tensor. Owned by the value. */
ONYX_API const OnyxTensor* onyx_value_tensor(const OnyxValue* v);
ONYX_API OnyxElemType onyx_tensor_elem_type(const OnyxTensor* t);
ONYX_API size_t onyx_tensor_rank(const OnyxTensor* t);
ONYX_API const int64_t* onyx_tensor_dims(const OnyxTensor* t);
ONYX_API size_t onyx_tensor_elem_count(const OnyxTensor* t);
ONYX_API size_t onyx_tensor_byte_size(const OnyxTensor* t);
ONYX_API const void* onyx_tensor_data(const OnyxTensor* t); /* strings: const char* const* */
ONYX_API const OnyxMemoryDevice* onyx_tensor_memory(const OnyxTensor* t);

/* Reads a serialized onnx.TensorProto (the .pb files of ONNX test folders).
 * *name (may be NULL) receives the tensor's name, free with onyx_free. */
ONYX_API OnyxStatus* onyx_value_load_tensor_proto(const char* path, OnyxValue** out, char** name);
ONYX_API OnyxStatus* onyx_value_parse_tensor_proto(const void* bytes, size_t len, OnyxValue** out,
                                                   char** name);
/* Writes a value as a serialized onnx.TensorProto. */
ONYX_API OnyxStatus* onyx_value_save_tensor_proto(const OnyxValue* v, const char* name,
                                                  const char* path);

/* --- Placement introspection ------------------------------------------------------- */
/* The nodes of the session's final graph (after optimization), in execution
 * order, with the provider each was placed on. Used by `onyx test --coverage`
 * and by tools that report placement. Strings are owned by the session. */
typedef struct OnyxNodeInfo {
  size_t struct_size; /* set by the caller to sizeof(OnyxNodeInfo) */
  const char* name;
  const char* op_type;
  const char* domain;    /* "" for ai.onnx */
  int32_t since_version; /* of the schema the node resolved to */
  const char* provider;  /* the provider it runs on */
  const char* group;     /* the fused group's name, or NULL */
  /* Element types of the node's inputs ("float32,int64"; absent ones empty);
   * valid until the next onyx_session_node_info call on the same thread. */
  const char* input_types;
} OnyxNodeInfo;
ONYX_API size_t onyx_session_node_count(const OnyxSession* s);
ONYX_API OnyxStatus* onyx_session_node_info(const OnyxSession* s, size_t i, OnyxNodeInfo* out);

#ifdef __cplusplus
}
#endif
#endif /* ONYX_H */
