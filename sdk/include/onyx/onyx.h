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
/* Writes a Chrome-trace / Perfetto JSON profile to `path` (NULL: off): the
 * session's phases and one complete event per node of every run
 * (docs/debugging.md). The file is valid JSON after every event and is
 * closed when the session is released. */
ONYX_API OnyxStatus* onyx_session_options_set_profile(OnyxSessionOptions* o, const char* path);
/* 1: NVTX ranges (domain "onyx") of session creation, runs and every step,
 * for Nsight Systems (`nsys profile -t nvtx`); ONYX_NVTX=1 turns them on as
 * well ("nvtx" in the config; docs/debugging.md). Default 0. */
ONYX_API OnyxStatus* onyx_session_options_set_nvtx(OnyxSessionOptions* o, int on);
/* Folder of the compiled-group cache (NULL: off, the default): a provider
 * that can save and load its compiled groups stores each one there, and later
 * sessions load it instead of compiling the group again ("cache_dir" in the
 * config; docs/config.md). Problems with the cache only log warnings. */
ONYX_API OnyxStatus* onyx_session_options_set_cache_dir(OnyxSessionOptions* o, const char* path);
/* Resource limits checked while loading and running; 0 keeps the default
 * (docs/config.md lists them). */
ONYX_API OnyxStatus* onyx_session_options_set_limits(OnyxSessionOptions* o, size_t max_model_bytes,
                                                     size_t max_tensor_bytes, size_t max_nodes,
                                                     int max_graph_depth);
/* The bytes one run's live tensors may hold together, nested control-flow
 * runs included (0, the default: no cap); a run over it fails with
 * ONYX_LIMIT_EXCEEDED ("max_session_bytes" in the config's limits). */
ONYX_API OnyxStatus* onyx_session_options_set_max_session_bytes(OnyxSessionOptions* o,
                                                                size_t bytes);
/* A run's time limit in milliseconds (0, the default: none): a run past it
 * stops at the next node boundary, loop iteration or kernel poll
 * (host->ctx_should_stop) with ONYX_CANCELLED ("max_run_ms"). */
ONYX_API OnyxStatus* onyx_session_options_set_max_run_ms(OnyxSessionOptions* o, uint64_t ms);
/* The time budget of constant folding at session creation, in milliseconds
 * (0: the default, 10000): once spent, the folding kernel is asked to stop
 * and the remaining constant nodes stay nodes ("max_fold_ms"). */
ONYX_API OnyxStatus* onyx_session_options_set_max_fold_ms(OnyxSessionOptions* o, uint64_t ms);
/* 1: a node left to the CPU provider because no earlier provider took it is
 * an error ("fallback": "deny" in the config). */
ONYX_API OnyxStatus* onyx_session_options_set_fallback_deny(OnyxSessionOptions* o, int deny);

/* Providers, in priority order. `library` may be NULL: the name resolves to
 * libonyx_ep_<name>.so in ONYX_PROVIDER_PATH, the install's provider folder,
 * then beside libonyx.so; when several of those folders hold it, the copy of
 * highest score is used (OnyxProvider.score; docs/api.md, "Providers and
 * devices"). A library of negative score is never used. `device` is the
 * device index (usually 0).
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
/* Run options: a tag that prefixes the run's log messages ("[run 'TAG'] ")
 * and marks its profile events; a log severity that replaces the session's
 * for that run (unset: the session's); and terminate. One OnyxRunOptions may
 * be shared by concurrent runs. */
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

/* Strings may hold any bytes, NUL included. A string tensor's data stays an
 * array of NUL-terminated `const char*` (a reader that ignores lengths sees
 * each string up to its first NUL); its byte length, NULs included, is
 * onyx_tensor_string_len (0 for an index out of range or another type). */
ONYX_API size_t onyx_tensor_string_len(const OnyxTensor* t, size_t i);
/* A string tensor in host memory holding copies of exactly lens[i] bytes of
 * strings[i] (lens NULL: each string up to its NUL; strings[i] may be NULL
 * only with length 0). strings may be NULL for a tensor of no elements. */
ONYX_API OnyxStatus* onyx_value_create_string_tensor(const int64_t* dims, size_t rank,
                                                     const char* const* strings, const size_t* lens,
                                                     OnyxValue** out);

/* Reads a serialized onnx.TensorProto (the .pb files of ONNX test folders).
 * *name (may be NULL) receives the tensor's name, free with onyx_free. */
ONYX_API OnyxStatus* onyx_value_load_tensor_proto(const char* path, OnyxValue** out, char** name);
ONYX_API OnyxStatus* onyx_value_parse_tensor_proto(const void* bytes, size_t len, OnyxValue** out,
                                                   char** name);
/* Writes a value as a serialized onnx.TensorProto. */
ONYX_API OnyxStatus* onyx_value_save_tensor_proto(const OnyxValue* v, const char* name,
                                                  const char* path);

/* --- Graph optimizer (docs/optimizer.md) -------------------------------------------- */
/* Writes the session's graph as it runs (after optimization; the model
 * `onyx run --save-optimized` writes) as an ONNX model. Fused ops of the
 * optimizer are in the "com.onyx" domain. */
ONYX_API OnyxStatus* onyx_session_save_model(const OnyxSession* s, const char* path);

/* A graph being optimized, handed to a user transformer. Nodes are named by
 * index (0 .. onyx_graph_node_count - 1); values by name. Indices change when
 * nodes are added or removed. */
typedef struct OnyxGraph OnyxGraph;
/* A transformer rewrites the graph and sets *modified to 1 when it changed
 * anything; the optimizer then sorts and re-resolves the graph (an error
 * there names the transformer) and runs its level again, up to an iteration
 * cap, until no transformer changes anything. It must keep the model's
 * outputs equal. An error it returns fails session creation. */
typedef OnyxStatus* (*OnyxTransformerFn)(OnyxGraph* graph, void* user, int* modified);
/* Registers a transformer process-wide, for every session created later
 * whose optimization level includes `level` (ONYX_OPT_BASIC, _EXTENDED or
 * _LAYOUT). Names are unique. */
ONYX_API OnyxStatus* onyx_register_transformer(const char* name, OnyxOptimizationLevel level,
                                               OnyxTransformerFn fn, void* user);
ONYX_API OnyxStatus* onyx_unregister_transformer(const char* name);

ONYX_API size_t onyx_graph_node_count(const OnyxGraph* g);
/* NULL when i is out of range. Domain "" is ai.onnx. */
ONYX_API const char* onyx_graph_node_name(const OnyxGraph* g, size_t i);
ONYX_API const char* onyx_graph_node_op_type(const OnyxGraph* g, size_t i);
ONYX_API const char* onyx_graph_node_domain(const OnyxGraph* g, size_t i);
ONYX_API size_t onyx_graph_node_input_count(const OnyxGraph* g, size_t i);
ONYX_API size_t onyx_graph_node_output_count(const OnyxGraph* g, size_t i);
/* Name of input/output k of node i; "" for an absent optional one. */
ONYX_API const char* onyx_graph_node_input(const OnyxGraph* g, size_t i, size_t k);
ONYX_API const char* onyx_graph_node_output(const OnyxGraph* g, size_t i, size_t k);
ONYX_API OnyxStatus* onyx_graph_node_attr_int(const OnyxGraph* g, size_t i, const char* name,
                                              int64_t* out);
ONYX_API OnyxStatus* onyx_graph_node_attr_float(const OnyxGraph* g, size_t i, const char* name,
                                                float* out);
/* 1 when the value is a graph input or output or read by a subgraph: such a
 * value keeps its name and its uses. */
ONYX_API int onyx_graph_value_is_output(const OnyxGraph* g, const char* value);
/* Removes node i; its outputs are left without a producer (give them a new
 * one with onyx_graph_add_node, or stop every use with
 * onyx_graph_replace_uses). */
ONYX_API OnyxStatus* onyx_graph_remove_node(OnyxGraph* g, size_t i);
/* Every node reading value `from` reads `to` instead. */
ONYX_API OnyxStatus* onyx_graph_replace_uses(OnyxGraph* g, const char* from, const char* to);
/* Adds a node; inputs must exist, outputs must have no producer ("" for an
 * absent optional one). *index (may be NULL) receives its index. */
ONYX_API OnyxStatus* onyx_graph_add_node(OnyxGraph* g, const char* name, const char* op_type,
                                         const char* domain, const char* const* inputs,
                                         size_t input_count, const char* const* outputs,
                                         size_t output_count, size_t* index);
ONYX_API OnyxStatus* onyx_graph_set_attr_int(OnyxGraph* g, size_t i, const char* name, int64_t v);
ONYX_API OnyxStatus* onyx_graph_set_attr_float(OnyxGraph* g, size_t i, const char* name, float v);
ONYX_API OnyxStatus* onyx_graph_set_attr_string(OnyxGraph* g, size_t i, const char* name,
                                                const char* v);

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

/* --- Node priorities ----------------------------------------------------------------- */
/* The priority of a node (by name) for ONYX_ORDER_PRIORITY: among the nodes
 * whose inputs are ready, the lowest priority runs first, then model order.
 * Nodes not named keep priority 0. A name that matches no node of the model
 * fails session creation. Setting a node twice keeps the last value. */
ONYX_API OnyxStatus* onyx_session_options_set_node_priority(OnyxSessionOptions* o,
                                                            const char* node_name,
                                                            int64_t priority);

/* --- Symbolic dimensions ------------------------------------------------------------ */
/* Fixes the symbolic input dimension `name` (a dim_param of the model's
 * inputs, such as a batch "N") to `value` before the session infers shapes
 * and plans, as ONNX Runtime's AddFreeDimensionOverrideByName does: shape
 * inference, rewrites, the memory plan (onyx_session_explain's planned peak)
 * and kernel choice see the fixed size, and a run fed another size fails as
 * for any static input dim. value >= 0. A name that no input of a model
 * uses is ignored, so one options object can serve several models (the
 * training, eval and optimizer models of training artifacts). Setting a
 * name again replaces its value. */
ONYX_API OnyxStatus* onyx_session_options_set_dim_value(OnyxSessionOptions* o, const char* name,
                                                        int64_t value);
/* The symbolic name (dim_param) that the model gives dimension k of input
 * i, whether or not onyx_session_options_set_dim_value fixed it; NULL when
 * the dimension has none or i or k is out of range. Owned by the session. */
ONYX_API const char* onyx_session_input_dim_param(const OnyxSession* s, size_t i, size_t k);

/* --- IO binding ---------------------------------------------------------------------- */
/* Binds inputs and outputs by name once and runs many times without
 * allocating them again.
 *
 *   OnyxIoBinding* b = NULL;
 *   onyx_io_binding_create(sess, &b);
 *   onyx_io_binding_bind_input(b, "x", x);            // x may be released now
 *   onyx_io_binding_bind_output(b, "y", y);           // results written into y
 *   onyx_io_binding_bind_output_to_device(b, "z", NULL);  // the session allocates (host)
 *   for (...) { fill x's data; onyx_session_run_with_binding(sess, NULL, b); read y; }
 *   onyx_io_binding_release(b);
 *
 * Keeping a GPU session's inputs and outputs on the device:
 *
 *   onyx_io_binding_bind_input_to_device(b, "x", x, NULL);   // copied to the GPU once
 *   OnyxMemoryDevice m;
 *   onyx_session_output_memory(sess, 0, &m);                  // where output 0 is made
 *   onyx_io_binding_bind_output_to_device(b, "y", &m);
 *   onyx_session_run_with_binding(sess, NULL, b);             // no host<->device copy
 *
 * Lifetimes:
 * - A binding belongs to one session and must be released before it. Use a
 *   binding from one thread at a time; several bindings may run on one
 *   session concurrently.
 * - bind_input and bind_output share the value's memory (no copy): the binding
 *   holds a reference, so the caller may release its value at once, and every
 *   run reads the input's current contents.
 * - bind_input_to_device(b, name, value, device) copies `value` (host or
 *   device memory) once, at bind time, into memory of `device` that the
 *   session allocates (its provider's arena) and the binding holds until it
 *   is cleared, rebound or released: later changes to `value` are not seen,
 *   and the caller may release it at once. device NULL: the memory the
 *   session's consumers read the input in (onyx_session_input_memory; an
 *   error naming the input and the memories when they are several).
 * - When a copy happens at run time: an input already in the memory its
 *   consumers read it in (a device input whose consumers all run on that
 *   device) is used as it is, without a copy. A device input that a consumer
 *   reads in host memory (a node on the CPU, a control-flow node, or the
 *   input being a graph output too) is copied to host memory at each run,
 *   for those consumers only; the device consumers still read it directly.
 * - A preallocated output must have the element type and exact shape the run
 *   produces (an error names the output and both shapes otherwise). Where the
 *   producing node writes the same memory it is written in place; otherwise
 *   the result is copied into it (also across devices).
 * - bind_output_to_device(b, name, device): the session allocates the output
 *   in `device` (NULL: host memory; otherwise a memory one of the session's
 *   providers serves). An output whose shape the model declares static is
 *   allocated before the first run. The buffer is reused by later runs of the
 *   binding unless a value obtained from get_outputs still holds it, in which
 *   case the run allocates a new one and the held value keeps the old result.
 *   Device results live in the session's arenas and must be released before
 *   the session; host results may outlive it.
 * - An output bound in the memory its producer writes (a preallocated device
 *   tensor, or bind_output_to_device with onyx_session_output_memory's
 *   memory) is written there by the producer, without the copy to host and
 *   back, unless a node on the host also reads it.
 * - Every run of onyx_session_run_with_binding ends synchronized: the host
 *   has waited for every provider's stream before it returns, so device
 *   results are complete. onyx_session_run_with_binding_async (below) ends
 *   with an event instead.
 * - On a failed run, the contents of the bound outputs are unspecified.
 * - clear_* drop the bindings (and the binding's references and copies). */
typedef struct OnyxIoBinding OnyxIoBinding;
ONYX_API OnyxStatus* onyx_io_binding_create(OnyxSession* s, OnyxIoBinding** out);
ONYX_API void onyx_io_binding_release(OnyxIoBinding* b);
ONYX_API OnyxStatus* onyx_io_binding_bind_input(OnyxIoBinding* b, const char* name,
                                                const OnyxValue* value);
/* Errors name the input: unknown name (with the model's inputs), NULL value,
 * element type or shape other than the model's, a device (or the value's
 * memory) no provider of the session serves, strings on a device. */
ONYX_API OnyxStatus* onyx_io_binding_bind_input_to_device(OnyxIoBinding* b, const char* name,
                                                          const OnyxValue* value,
                                                          const OnyxMemoryDevice* device);
ONYX_API OnyxStatus* onyx_io_binding_bind_output(OnyxIoBinding* b, const char* name,
                                                 OnyxValue* value);
ONYX_API OnyxStatus* onyx_io_binding_bind_output_to_device(OnyxIoBinding* b, const char* name,
                                                           const OnyxMemoryDevice* device);
ONYX_API void onyx_io_binding_clear_inputs(OnyxIoBinding* b);
ONYX_API void onyx_io_binding_clear_outputs(OnyxIoBinding* b);
ONYX_API void onyx_io_binding_clear(OnyxIoBinding* b); /* both */
/* Bound outputs, in the order they were bound. */
ONYX_API size_t onyx_io_binding_output_count(const OnyxIoBinding* b);
ONYX_API const char* onyx_io_binding_output_name(const OnyxIoBinding* b, size_t i);
/* The memory the session's consumers read input i in (host memory for the
 * CPU provider and the host; host when nothing reads it); an error naming the
 * input and the memories when they read it in several. */
ONYX_API OnyxStatus* onyx_session_input_memory(const OnyxSession* s, size_t i,
                                               OnyxMemoryDevice* out);
/* The memory output i is produced in: its producer's provider memory, or
 * host memory for an output made on the host or by the CPU provider (a plain
 * onyx_session_run then copies it to host memory). */
ONYX_API OnyxStatus* onyx_session_output_memory(const OnyxSession* s, size_t i,
                                                OnyxMemoryDevice* out);
/* Runs with the bound inputs and outputs. Every graph input must be bound,
 * and at least one output. */
ONYX_API OnyxStatus*
onyx_session_run_with_binding(OnyxSession* s, const OnyxRunOptions* run_options, OnyxIoBinding* b);
/* The last run's outputs, in binding order: `count` must equal
 * onyx_io_binding_output_count. Each value is new (release it) and shares the
 * binding's memory, without a copy. */
ONYX_API OnyxStatus* onyx_io_binding_get_outputs(const OnyxIoBinding* b, OnyxValue** values,
                                                 size_t count);

/* --- Asynchronous runs --------------------------------------------------------------
 * onyx_session_run_with_binding_async runs like onyx_session_run_with_binding
 * but returns once the run's device work is queued, with an event to wait
 * on instead of a synchronized stream (docs/api.md, "Asynchronous runs"):
 *
 *   OnyxRunEvent* ev = NULL;
 *   onyx_session_run_with_binding_async(sess, NULL, b, &ev);
 *   ...                                       // the host is free meanwhile
 *   OnyxStatus* st = onyx_run_event_wait(ev, -1, NULL);  // the run's result
 *   onyx_run_event_release(ev);
 *
 * - The run ends with an event when the session's only provider stream
 *   belongs to a provider that offers them (the CUDA and ROCm providers;
 *   docs/abi.md, ONYX_EXT_RUN_EVENT). Otherwise (a CPU-only session, several
 *   provider streams, a run that must free memory behind a stream, a run
 *   that captures a CUDA graph) it ends synchronized and the event is
 *   complete on return.
 * - When the call returns: outputs bound in host memory are complete (their
 *   copy to the host waited for the device); outputs in device memory are
 *   complete once the event is (query COMPLETE, or wait returned NULL).
 *   Host inputs may be changed at once: they were copied to the device
 *   (through the provider's page-locked staging buffer) before the call
 *   returned. Device inputs are read by the queued work: the caller's own
 *   device work on other streams waits for the event before overwriting
 *   them (work queued through Onyx is ordered on the provider's stream).
 * - Errors found while the call queues the work (bad inputs, a kernel that
 *   fails on launch, cancellation through the run options' terminate flag
 *   or time limit) are returned by the call, with *out NULL. An error the
 *   device reports later (an asynchronous fault) is returned by wait, naming
 *   the provider and the last node queued on its stream. Cancellation
 *   cannot stop device work that is already queued.
 * - The binding waits for its in-flight run before its next run (either
 *   kind), a bind or clear, or its release. Runs of other bindings of the
 *   session do not wait; on one provider stream the device runs them in
 *   order. get_outputs may be called at once; the values are complete with
 *   the event.
 * - onyx_session_release waits for the session's in-flight runs. A run
 *   event may outlive its session and its binding: it then reports the
 *   run's final state. Do not release the session while another thread
 *   starts calls on its run events.
 * - One event may be queried and waited on from several threads. */
typedef struct OnyxRunEvent OnyxRunEvent;
typedef enum OnyxRunState {
  ONYX_RUN_PENDING = 0,  /* the device work has not finished */
  ONYX_RUN_COMPLETE = 1, /* finished; device outputs are complete */
  ONYX_RUN_FAILED = 2    /* the device reported an error (wait returns it) */
} OnyxRunState;
ONYX_API OnyxStatus* onyx_session_run_with_binding_async(OnyxSession* s,
                                                         const OnyxRunOptions* run_options,
                                                         OnyxIoBinding* b, OnyxRunEvent** out);
/* Polls without blocking (ONYX_RUN_FAILED for NULL). */
ONYX_API OnyxRunState onyx_run_event_query(OnyxRunEvent* e);
/* Waits at most timeout_ms milliseconds (negative: without limit; 0: polls).
 * NULL when the run completed; the run's error when it failed; when the time
 * runs out first, ONYX_LIMIT_EXCEEDED ("has not completed within N ms"), and
 * the run goes on. state (may be NULL) receives the event's state. */
ONYX_API OnyxStatus* onyx_run_event_wait(OnyxRunEvent* e, int64_t timeout_ms, OnyxRunState* state);
/* The vendor's event recorded behind the run (cudaEvent_t, hipEvent_t), for
 * the caller's own streams to wait on; NULL once the event is known complete
 * or when the run ended synchronized. Valid until the event is waited for,
 * queried complete or released. */
ONYX_API void* onyx_run_event_native(OnyxRunEvent* e);
/* Releases the caller's reference; the run itself goes on (its binding
 * waits for it when next used). */
ONYX_API void onyx_run_event_release(OnyxRunEvent* e);

/* --- DLPack -------------------------------------------------------------------------- */
/* Zero-copy exchange with DLPack (dlpack.h, version 0.6; include it to use
 * these). Types: float16/32/64, bfloat16, int8..64, uint8..64, complex64/128
 * (bool and strings have no DLPack 0.6 type and are refused). Devices: kDLCPU,
 * kDLCUDA and kDLROCM (GPU memory of vendor 0x10de / 0x1002).
 *
 * onyx_value_from_dlpack: on success the value owns `managed`: Onyx calls
 * managed->deleter(managed) exactly once, when the value and everything that
 * shares its memory (IO bindings, values from get_outputs, exported tensors)
 * are released. On failure nothing is taken and the caller still owns it.
 * Only compact row-major tensors are accepted (strides NULL or compact).
 *
 * onyx_value_to_dlpack: *out shares the value's memory (no copy) and keeps it
 * alive independently of the value; the consumer calls (*out)->deleter(*out)
 * exactly once. A value that merely borrows host memory is copied. */
struct DLManagedTensor;
ONYX_API OnyxStatus* onyx_value_from_dlpack(struct DLManagedTensor* managed, OnyxValue** out);
ONYX_API OnyxStatus* onyx_value_to_dlpack(const OnyxValue* v, struct DLManagedTensor** out);

/* --- Sequences and optionals ---------------------------------------------------------
 * A value is a tensor, a sequence of tensors (one element type), or "none"
 * (an empty optional). An optional that holds something is just that value.
 * onyx_value_tensor returns NULL for a sequence or none.
 *
 * onyx_value_sequence_at: item i, borrowed from the sequence (valid while the
 * sequence value lives), NULL when i is out of range or v is no sequence.
 * onyx_value_create_sequence copies the items' tensors (the caller keeps and
 * releases its items); every item must have `elem_type`. */
typedef enum OnyxValueKind {
  ONYX_VALUE_TENSOR = 0,
  ONYX_VALUE_SEQUENCE = 1,
  ONYX_VALUE_NONE = 2,
  ONYX_VALUE_MAP = 3,          /* see "Maps" below */
  ONYX_VALUE_SEQUENCE_MAP = 4, /* a sequence of maps */
} OnyxValueKind;
ONYX_API OnyxValueKind onyx_value_kind(const OnyxValue* v);
ONYX_API size_t onyx_value_sequence_length(const OnyxValue* v);
ONYX_API const OnyxTensor* onyx_value_sequence_at(const OnyxValue* v, size_t i);
ONYX_API OnyxElemType onyx_value_elem_type(const OnyxValue* v);
ONYX_API OnyxStatus* onyx_value_create_sequence(OnyxElemType elem_type,
                                                const OnyxValue* const* items, size_t count,
                                                OnyxValue** out);
ONYX_API OnyxStatus* onyx_value_create_none(OnyxElemType elem_type, OnyxValue** out);

/* What a session input or output holds (for onyx_session_input_info's type,
 * the element type): a tensor, a sequence, or an optional of either. */
typedef enum OnyxTypeKind {
  ONYX_TYPE_TENSOR = 0,
  ONYX_TYPE_SEQUENCE = 1,
  ONYX_TYPE_OPTIONAL_TENSOR = 2,
  ONYX_TYPE_OPTIONAL_SEQUENCE = 3,
  ONYX_TYPE_MAP = 4,          /* map(K, V): see "Maps" below */
  ONYX_TYPE_SEQUENCE_MAP = 5, /* seq(map(K, V)) */
} OnyxTypeKind;
ONYX_API OnyxTypeKind onyx_session_input_kind(const OnyxSession* s, size_t i);
ONYX_API OnyxTypeKind onyx_session_output_kind(const OnyxSession* s, size_t i);

/* Reads a serialized TensorProto (kind TENSOR), SequenceProto (SEQUENCE) or
 * OptionalProto (OPTIONAL_*) from a file, as the ONNX backend tests store
 * them. `name` as for onyx_value_load_tensor_proto. */
ONYX_API OnyxStatus* onyx_value_load_proto(const char* path, OnyxTypeKind kind, OnyxValue** out,
                                           char** name);

/* --- Maps --------------------------------------------------------------------------
 * ONNX-ML's map(K, V) and seq(map(K, V)): what ZipMap returns (one map of
 * class label -> probability per row), DictVectorizer and CastMap read. Keys
 * are int64 or string and distinct; values are of one element type. A map
 * holds its keys and values as two 1-D host tensors of equal length, in the
 * order they were given (ZipMap: the order of its class labels). Only the
 * host runs the ops over maps; providers never see them.
 *
 * onyx_value_create_map_int64 / _string: a map of `count` keys and the
 * elements of `values` (a 1-D tensor of `count` elements), all copied; a
 * key given twice is refused. String keys: lens NULL means each is
 * NUL-terminated, else lens[i] bytes (NULs included).
 * onyx_value_map_key_type / _value_type: of a map or a sequence of maps
 * (UNDEFINED for other values). onyx_value_map_size: its entries (0 for
 * other values). onyx_value_map_keys / _values: the 1-D tensors, borrowed
 * from the map (valid while it lives), NULL for other values.
 * onyx_value_create_map_sequence copies `count` maps of the given key and
 * value types (each must have them) into a new sequence of maps.
 * onyx_value_map_sequence_at: a new value (released by the caller) sharing
 * map i of a sequence of maps; an error when i is out of range or v is no
 * sequence of maps. onyx_session_input_kind / _output_kind say
 * ONYX_TYPE_MAP or ONYX_TYPE_SEQUENCE_MAP for such inputs and outputs, and
 * onyx_session_input_map_key / _output_map_key their key type.
 * onyx_value_save_map_proto writes a map as a MapProto, a sequence of maps
 * as a SequenceProto of MapProto (each value a scalar TensorProto), the
 * files onyx_value_load_proto reads back; name may be NULL. */
ONYX_API OnyxStatus* onyx_value_create_map_int64(const int64_t* keys, size_t count,
                                                 const OnyxValue* values, OnyxValue** out);
ONYX_API OnyxStatus* onyx_value_create_map_string(const char* const* keys, const size_t* lens,
                                                  size_t count, const OnyxValue* values,
                                                  OnyxValue** out);
ONYX_API OnyxElemType onyx_value_map_key_type(const OnyxValue* v);
ONYX_API OnyxElemType onyx_value_map_value_type(const OnyxValue* v);
ONYX_API size_t onyx_value_map_size(const OnyxValue* v);
ONYX_API const OnyxTensor* onyx_value_map_keys(const OnyxValue* v);
ONYX_API const OnyxTensor* onyx_value_map_values(const OnyxValue* v);
ONYX_API OnyxStatus* onyx_value_create_map_sequence(OnyxElemType key_type, OnyxElemType value_type,
                                                    const OnyxValue* const* maps, size_t count,
                                                    OnyxValue** out);
ONYX_API size_t onyx_value_map_sequence_length(const OnyxValue* v);
ONYX_API OnyxStatus* onyx_value_map_sequence_at(const OnyxValue* v, size_t i, OnyxValue** out);
ONYX_API OnyxElemType onyx_session_input_map_key(const OnyxSession* s, size_t i);
ONYX_API OnyxElemType onyx_session_output_map_key(const OnyxSession* s, size_t i);
ONYX_API OnyxStatus* onyx_value_save_map_proto(const OnyxValue* v, const char* name,
                                               const char* path);

/* --- Providers and devices ------------------------------------------------------------
 * Which provider libraries there are and which devices they see, without a
 * session (`onyx devices`; docs/api.md). Listing loads each library, calls
 * its score, device_count and device_info, and lets it go again (a library a
 * session holds stays loaded); the list keeps copies of everything it read.
 * A library that does not load and a provider without a device are entries
 * that say why, not errors: the calls fail only on bad arguments and when
 * out of memory.
 *
 *   OnyxProviderList* l = NULL;
 *   OnyxStatus* st = onyx_provider_list_create(&l);
 *   for (size_t i = 0; !st && i < onyx_provider_list_count(l); i++) {
 *     OnyxProviderInfo p = {.struct_size = sizeof p};
 *     onyx_provider_list_info(l, i, &p);
 *     printf("%s: %zu devices %s\n", p.name, p.device_count, p.message);
 *     for (size_t d = 0; d < p.device_count; d++) {
 *       OnyxProviderDevice dev = {.struct_size = sizeof dev};
 *       onyx_provider_list_device(l, i, d, &dev);
 *       printf("  %s\n", dev.name);
 *     }
 *   }
 *   onyx_provider_list_release(l);
 *
 * Every string and array handed out is owned by the list and valid until
 * onyx_provider_list_release. A list is read-only once made: any number of
 * threads may read it at once. */
typedef struct OnyxProviderList OnyxProviderList;

/* One provider library. The caller sets struct_size to sizeof(OnyxProviderInfo). */
typedef struct OnyxProviderInfo {
  size_t struct_size;
  const char* name; /* the provider's name, as configs spell it */
  /* Resolved path of the library; NULL when none was found or none could be
   * used (the message names each one tried). For a provider added with
   * onyx_session_options_add_provider_init: where its init function lives. */
  const char* library;
  int32_t loaded;      /* 1: the library loaded and its provider table was accepted */
  const char* vendor;  /* the provider table's vendor; NULL when not loaded */
  const char* version; /* the provider table's version; NULL when not loaded */
  int32_t score;       /* OnyxProvider.score: 0 without one or when not loaded */
  /* 1: the library a session naming this provider uses. Of several libraries
   * of one name on the search path that is the loaded one of highest score,
   * never a negative one, the first in search order among equal scores. */
  int32_t selected;
  /* ONYX_OK when device_count > 0. Otherwise why the provider has no device:
   * the load error (naming the library), the provider's own device_count
   * error (usually ONYX_NO_DEVICE: "no CUDA driver found"), ONYX_NO_DEVICE
   * for a provider that reports zero devices or a negative score. */
  OnyxStatusCode status;
  const char* message; /* "" when status is ONYX_OK */
  size_t device_count;
} OnyxProviderInfo;

/* One device of a provider. The caller sets struct_size to sizeof(OnyxProviderDevice). */
typedef struct OnyxProviderDevice {
  size_t struct_size;
  /* The provider's device_info; for a provider without device_info the
   * device is the host CPU: "host CPU", host memory, no properties. */
  const char* name;
  OnyxMemoryDevice memory; /* the device's default memory: kind, PCI vendor, device id */
  uint64_t memory_bytes;   /* 0 if unknown */
  /* Free-form properties ("compute_capability" -> "9.0"), in the provider's order. */
  const char* const* property_keys;
  const char* const* property_values;
  size_t property_count;
  /* ONYX_OK, or the error device_info returned for this device (then name is
   * "", memory and memory_bytes are zero and there are no properties). */
  OnyxStatusCode status;
  const char* message; /* "" when status is ONYX_OK */
} OnyxProviderDevice;

/* Every provider library on the search path (the folders
 * onyx_session_options_add_provider names): each libonyx_ep_<name>.so of
 * each folder, in search order and by name within a folder, a file found
 * twice (a folder given twice, a link) listed once. Several libraries may
 * share a name: `selected` marks the one a session uses. */
ONYX_API OnyxStatus* onyx_provider_list_create(OnyxProviderList** out);
/* The providers a session created with `o` uses, in its order: the ones
 * added (by name, library or init function), then the CPU provider unless
 * it is listed or the implicit one is switched off; `o` NULL: the defaults
 * (the CPU provider). One entry each, for the library the session loads
 * (`selected` is 1 for every entry that loaded). */
ONYX_API OnyxStatus* onyx_session_options_list_providers(const OnyxSessionOptions* o,
                                                         OnyxProviderList** out);
ONYX_API void onyx_provider_list_release(OnyxProviderList* l);
ONYX_API size_t onyx_provider_list_count(const OnyxProviderList* l); /* 0 for NULL */
/* Entry i. ONYX_INVALID_ARGUMENT when i is out of range or struct_size too small. */
ONYX_API OnyxStatus* onyx_provider_list_info(const OnyxProviderList* l, size_t i,
                                             OnyxProviderInfo* out);
/* Device `device` of entry i. ONYX_INVALID_ARGUMENT, naming the provider and
 * its library, when there is no such device. */
ONYX_API OnyxStatus* onyx_provider_list_device(const OnyxProviderList* l, size_t i, size_t device,
                                               OnyxProviderDevice* out);

#ifdef __cplusplus
}
#endif
#endif /* ONYX_H */
