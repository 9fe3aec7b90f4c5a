/* host_api.c — the OnyxHostApi table: what providers may call. Every
 * function only reads through the opaque handles, so the IR behind them can
 * change without breaking a provider. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_compile_cache.h"
#include "ox_host_api.h"
#include "ox_optimizer.h"
#include "ox_providers.h"
#include "ox_session.h"

/* --- status, logging ------------------------------------------------------------------ */
static OnyxStatus* h_status_create(OnyxStatusCode code, const char* fmt, ...) {
  if (code == ONYX_OK) code = ONYX_FAIL; /* documented: never NULL */
  va_list ap;
  va_start(ap, fmt);
  OnyxStatus* st = ox_status_v(code, fmt ? fmt : "", ap);
  va_end(ap);
  return st;
}
static OnyxStatusCode h_status_code(const OnyxStatus* st) {
  return st ? st->code : ONYX_OK;
}
static const char* h_status_message(const OnyxStatus* st) {
  return st && st->message ? st->message : "";
}
static void h_status_release(OnyxStatus* st) {
  ox_status_free(st);
}

static void h_log(OnyxLogSeverity sev, const char* who, const char* fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt ? fmt : "", ap);
  va_end(ap);
  /* Inside a run (or session creation) on this thread: the session's logger,
   * its callback, severity and the run's tag. Elsewhere: the process log. */
  const OxLogScope* scope = ox_log_scope_current();
  if (scope)
    ox_run_log(scope->program, scope->run, sev, "provider '%s': %s", who ? who : "?", buf);
  else
    ox_log(sev, "provider '%s': %s", who ? who : "?", buf);
}

static const char* h_library_path(const void* address) {
  Dl_info info;
  /* dli_fname lives as long as the library stays loaded. */
  return dladdr(address, &info) && info.dli_fname ? info.dli_fname : NULL;
}

/* --- options ------------------------------------------------------------------------------- */
static size_t h_options_count(const OnyxOptions* o) {
  return o ? o->count : 0;
}
static const char* h_options_key(const OnyxOptions* o, size_t i) {
  return o && i < o->count ? o->keys[i] : NULL;
}
static const char* h_options_get(const OnyxOptions* o, const char* key) {
  return o && key ? ox_options_get(o, key) : NULL;
}

/* --- graph views, nodes, values ---------------------------------------------------------- */
static size_t h_graph_node_count(const OnyxGraphView* g) {
  return g ? g->n_nodes : 0;
}
static const OnyxNode* h_graph_node(const OnyxGraphView* g, size_t i) {
  return g && i < g->n_nodes ? g->nodes[i] : NULL;
}
static size_t h_graph_input_count(const OnyxGraphView* g) {
  return g ? g->n_inputs : 0;
}
static const OnyxValueInfo* h_graph_input(const OnyxGraphView* g, size_t i) {
  return g && i < g->n_inputs ? g->inputs[i] : NULL;
}
static size_t h_graph_output_count(const OnyxGraphView* g) {
  return g ? g->n_outputs : 0;
}
static const OnyxValueInfo* h_graph_output(const OnyxGraphView* g, size_t i) {
  return g && i < g->n_outputs ? g->outputs[i] : NULL;
}

static const char* h_node_name(const OnyxNode* n) {
  return n->name;
}
static const char* h_node_op_type(const OnyxNode* n) {
  return n->op_type;
}
static const char* h_node_domain(const OnyxNode* n) {
  return n->domain;
}
static int32_t h_node_since_version(const OnyxNode* n) {
  return n->since_version;
}
static size_t h_node_input_count(const OnyxNode* n) {
  return n->n_inputs;
}
static const OnyxValueInfo* h_node_input(const OnyxNode* n, size_t i) {
  return i < n->n_inputs ? n->inputs[i] : NULL;
}
static size_t h_node_output_count(const OnyxNode* n) {
  return n->n_outputs;
}
static const OnyxValueInfo* h_node_output(const OnyxNode* n, size_t i) {
  return i < n->n_outputs ? n->outputs[i] : NULL;
}

static OnyxAttrType h_node_attr_type(const OnyxNode* n, const char* name) {
  const OxAttr* a = ox_node_attr(n, name);
  return a ? a->type : ONYX_ATTR_UNDEFINED;
}
static int64_t h_node_attr_int(const OnyxNode* n, const char* name, int64_t fb) {
  return ox_node_attr_int(n, name, fb);
}
static float h_node_attr_float(const OnyxNode* n, const char* name, float fb) {
  return ox_node_attr_float(n, name, fb);
}
static const char* h_node_attr_string(const OnyxNode* n, const char* name, size_t* len) {
  const OxAttr* a = ox_node_attr(n, name);
  bool ok = a && a->type == ONYX_ATTR_STRING;
  if (len) *len = ok ? a->s_len : 0;
  return ok ? a->s : NULL;
}
static const int64_t* h_node_attr_ints(const OnyxNode* n, const char* name, size_t* count) {
  size_t c = 0;
  const int64_t* p = ox_node_attr_ints(n, name, &c);
  if (count) *count = c;
  return p;
}
static const OxAttr* h_attr_of(const OnyxNode* n, const char* name, OnyxAttrType t, size_t* count) {
  const OxAttr* a = ox_node_attr(n, name);
  if (!a || a->type != t) a = NULL;
  if (count) *count = a ? a->count : 0;
  return a;
}
static const float* h_node_attr_floats(const OnyxNode* n, const char* name, size_t* count) {
  const OxAttr* a = h_attr_of(n, name, ONYX_ATTR_FLOATS, count);
  return a ? a->floats : NULL;
}
static const char* const* h_node_attr_strings(const OnyxNode* n, const char* name, size_t* count) {
  const OxAttr* a = h_attr_of(n, name, ONYX_ATTR_STRINGS, count);
  return a ? (const char* const*)a->strings : NULL;
}
static const OnyxTensor* h_node_attr_tensor(const OnyxNode* n, const char* name) {
  const OxAttr* a = h_attr_of(n, name, ONYX_ATTR_TENSOR, NULL);
  return a ? a->t : NULL;
}

static const char* h_value_name(const OnyxValueInfo* v) {
  return v->name;
}
static OnyxElemType h_value_elem_type(const OnyxValueInfo* v) {
  return v->type;
}
static int32_t h_value_rank(const OnyxValueInfo* v) {
  return v->rank;
}
static const int64_t* h_value_dims(const OnyxValueInfo* v) {
  return v->dims;
}
static const OnyxTensor* h_value_constant(const OnyxValueInfo* v) {
  return v->constant;
}
static const OnyxNode* h_value_producer(const OnyxValueInfo* v) {
  return v->producer;
}

/* --- tensors ------------------------------------------------------------------------------- */
static OnyxElemType h_tensor_elem_type(const OnyxTensor* t) {
  return t->type;
}
static size_t h_tensor_rank(const OnyxTensor* t) {
  return t->rank;
}
static const int64_t* h_tensor_dims(const OnyxTensor* t) {
  return t->dims;
}
static size_t h_tensor_elem_count(const OnyxTensor* t) {
  return t->count;
}
static size_t h_tensor_byte_size(const OnyxTensor* t) {
  return t->bytes;
}
static const void* h_tensor_data(const OnyxTensor* t) {
  return t->data;
}
static void* h_tensor_mutable_data(OnyxTensor* t) {
  return t->data;
}
static const OnyxMemoryDevice* h_tensor_memory(const OnyxTensor* t) {
  return &t->device;
}
static const char* h_tensor_string(const OnyxTensor* t, size_t i) {
  if (t->type != ONYX_ELEM_STRING || i >= t->count) return NULL;
  return ox_tensor_string(t, i);
}
/* Stores exactly len bytes (NULs included); the copy is NUL-terminated. */
static OnyxStatus* h_tensor_set_string(OnyxTensor* t, size_t i, const char* s, size_t len) {
  if (t->type != ONYX_ELEM_STRING || i >= t->count)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "tensor_set_string: not a string tensor or index %zu "
                     "out of range",
                     i);
  return ox_tensor_set_string(t, i, s, len);
}

/* --- kernel context ----------------------------------------------------------------------- */
static const OnyxNode* h_ctx_node(const OnyxKernelContext* c) {
  return c->step->node;
}
static size_t h_ctx_input_count(const OnyxKernelContext* c) {
  return c->step->n_in;
}
static const OnyxTensor* h_ctx_input(const OnyxKernelContext* c, size_t i) {
  if (i >= c->step->n_in || c->step->in[i] == OX_NO_SLOT) return NULL;
  return c->frame->values[c->step->in[i]];
}
static size_t h_ctx_output_count(const OnyxKernelContext* c) {
  return c->step->n_out;
}

static OnyxStatus* ox_ctx_output_slot(OnyxKernelContext* c, size_t i, size_t* slot) {
  const OxStep* st = c->step;
  if (i >= st->n_out)
    return ox_status(ONYX_INVALID_ARGUMENT, "ctx_output: output %zu of %zu", i, st->n_out);
  if (st->out[i] == OX_NO_SLOT) {
    *slot = OX_NO_SLOT; /* an absent optional output: the kernel may skip it */
    return NULL;
  }
  if (c->frame->values[st->out[i]])
    return ox_status(ONYX_INVALID_ARGUMENT, "ctx_output: output %zu allocated twice", i);
  *slot = st->out[i];
  return NULL;
}

static OnyxStatus* h_ctx_output(OnyxKernelContext* c, size_t i, const int64_t* dims, size_t rank,
                                OnyxTensor** out) {
  *out = NULL;
  size_t slot = OX_NO_SLOT;
  OX_TRY(ox_ctx_output_slot(c, i, &slot));
  if (slot == OX_NO_SLOT)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "ctx_output: output %zu is absent from the graph; check "
                     "host->node_output(node, i) before allocating it",
                     i);
  OxTensor* t = NULL;
  OX_TRY(ox_frame_alloc_output(c->frame, c->step, i, dims, rank, &t));
  c->frame->values[slot] = t;
  *out = t;
  return NULL;
}

static OnyxStatus* h_ctx_output_view(OnyxKernelContext* c, size_t oi, size_t ii,
                                     const int64_t* dims, size_t rank, OnyxTensor** out) {
  *out = NULL;
  const OxStep* st = c->step;
  bool declared = false;
  if (st->kind == OX_STEP_KERNEL)
    for (size_t a = 0; a < st->kernel->def.alias_count && !declared; a++) {
      const OnyxAlias* al = &st->kernel->def.aliases[a];
      declared = al->kind == ONYX_ALIAS_VIEW && (size_t)al->output == oi && (size_t)al->input == ii;
    }
  if (!declared)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "ctx_output_view: output %zu -> input %zu is not declared ONYX_ALIAS_VIEW", oi,
                     ii);
  const OnyxTensor* in = h_ctx_input(c, ii);
  if (!in) return ox_status(ONYX_INVALID_ARGUMENT, "ctx_output_view: input %zu is absent", ii);
  size_t slot = OX_NO_SLOT;
  OX_TRY(ox_ctx_output_slot(c, oi, &slot));
  if (slot == OX_NO_SLOT)
    return ox_status(ONYX_INVALID_ARGUMENT, "ctx_output_view: output %zu is not used", oi);
  OxTensor* t;
  OX_TRY(ox_tensor_view(in, dims, rank, &t));
  if (!t->buffer && c->frame->prog->plan.slots[slot].is_output) {
    /* A view of borrowed memory (a feed or constant) must not escape: copy. */
    OxTensor* copy;
    OnyxStatus* err = ox_tensor_clone(t, &copy);
    ox_tensor_free(t);
    OX_TRY(err);
    t = copy;
  }
  c->frame->values[slot] = t;
  *out = t;
  return NULL;
}

static OnyxStream* h_ctx_stream(const OnyxKernelContext* c) {
  return c->step->ep >= 0 ? c->frame->prog->eps[c->step->ep].stream : NULL;
}
static OnyxThreadPool* h_ctx_thread_pool(const OnyxKernelContext* c) {
  return c->frame->prog->pool;
}
static void* h_ctx_scratch(OnyxKernelContext* c, size_t bytes) {
  /* Scratch is a kernel's working tensor: bounded by the same limit (a
   * hostile geometry asking for 2^40 bytes gets NULL, not an attempt). */
  size_t limit = c->frame->prog->cfg.max_tensor_bytes;
  if (bytes > SIZE_MAX - OX_HOST_ALIGN || (limit && bytes > limit)) return NULL;
  if (!ox_grow((void**)&c->scratch, &c->cap_scratch, c->n_scratch + 1, sizeof(void*))) return NULL;
  size_t rounded = (bytes + OX_HOST_ALIGN - 1) / OX_HOST_ALIGN * OX_HOST_ALIGN;
  void* p = aligned_alloc(OX_HOST_ALIGN, rounded ? rounded : OX_HOST_ALIGN);
  if (p) c->scratch[c->n_scratch++] = p;
  return p;
}

/* --- thread pool ---------------------------------------------------------------------------- */
static size_t h_thread_pool_size(const OnyxThreadPool* p) {
  return ox_threadpool_size(p);
}
static void h_parallel_for(OnyxThreadPool* p, size_t n, void (*fn)(void*, size_t, size_t),
                           void* user) {
  ox_threadpool_parallel_for(p, n, fn, user);
}

/* --- registration --------------------------------------------------------------------------- */
static OnyxStatus* h_register_kernel(OnyxKernelRegistry* r, const OnyxKernelDef* def) {
  if (!r || !def) return ox_status(ONYX_INVALID_ARGUMENT, "register_kernel: NULL argument");
  return ox_kreg_add(r, def);
}
static OnyxStatus* h_register_schema(OnyxSchemaRegistry* r, const OnyxSchemaDef* def) {
  if (!r || !def) return ox_status(ONYX_INVALID_ARGUMENT, "register_schema: NULL argument");
  return ox_schema_registry_add(r, def);
}

/* --- inference ------------------------------------------------------------------------------ */
static const OnyxNode* h_infer_node(const OnyxInferenceContext* c) {
  return c->node;
}
static size_t h_infer_input_count(const OnyxInferenceContext* c) {
  return c->node->n_inputs;
}
static const OnyxValueInfo* h_infer_input(const OnyxInferenceContext* c, size_t i) {
  return i < c->node->n_inputs ? c->node->inputs[i] : NULL;
}
static OnyxStatus* h_infer_set_output(OnyxInferenceContext* c, size_t i, OnyxElemType type,
                                      int32_t rank, const int64_t* dims) {
  if (i >= c->node->n_outputs)
    return ox_status(ONYX_INVALID_ARGUMENT, "infer_set_output: node '%s' has %zu outputs",
                     c->node->name, c->node->n_outputs);
  if (!c->node->outputs[i]) return NULL;
  if (rank > 0 && !dims)
    return ox_status(ONYX_INVALID_ARGUMENT, "infer_set_output: rank %d without dims", rank);
  return ox_value_set(c->node->outputs[i], type, rank, dims);
}

/* --- values (1.1) ---------------------------------------------------------------------------- */
static size_t h_value_consumer_count(const OnyxValueInfo* v) {
  return v ? v->n_consumers : 0;
}
static const OnyxNode* h_value_consumer(const OnyxValueInfo* v, size_t i) {
  return v && i < v->n_consumers ? v->consumers[i] : NULL;
}
static int32_t h_value_is_graph_output(const OnyxValueInfo* v) {
  return v && v->is_graph_output;
}

/* --- cancellation, string lengths (1.1) ---------------------------------------------------- */
static int32_t h_ctx_should_stop(const OnyxKernelContext* c) {
  return c && c->frame && ox_frame_should_stop(c->frame);
}
static size_t h_tensor_string_len(const OnyxTensor* t, size_t i) {
  return ox_tensor_string_len(t, i);
}
/* The byte lengths beside node_attr_strings' array (same count), NUL bytes
 * inside a string included. */
static const size_t* h_node_attr_strings_lens(const OnyxNode* n, const char* name, size_t* count) {
  const OxAttr* a = h_attr_of(n, name, ONYX_ATTR_STRINGS, count);
  if (a && a->count && !a->strings_len) { /* the loader gives every list its lengths */
    if (count) *count = 0;
    return NULL;
  }
  return a ? a->strings_len : NULL;
}

/* --- compiled-group cache (1.1) ------------------------------------------------------------- */
OnyxStatus* ox_blob_write(OnyxBlobWriter* w, const void* data, size_t bytes) {
  if (!w || (bytes && !data)) return ox_status(ONYX_INVALID_ARGUMENT, "blob_write: NULL argument");
  if (bytes > SIZE_MAX - w->len)
    return ox_status(ONYX_INVALID_ARGUMENT, "blob_write: entry larger than memory");
  if (!ox_grow((void**)&w->data, &w->cap, w->len + bytes, 1)) return ox_oom();
  if (bytes) memcpy(w->data + w->len, data, bytes);
  w->len += bytes;
  return NULL;
}

static const OnyxHostApi ox_host_api_table = {
    .struct_size = sizeof(OnyxHostApi),
    .abi_major = ONYX_ABI_VERSION_MAJOR,
    .abi_minor = ONYX_ABI_VERSION_MINOR,
    .status_create = h_status_create,
    .status_code = h_status_code,
    .status_message = h_status_message,
    .status_release = h_status_release,
    .log = h_log,
    .library_path = h_library_path,
    .options_count = h_options_count,
    .options_key = h_options_key,
    .options_get = h_options_get,
    .graph_node_count = h_graph_node_count,
    .graph_node = h_graph_node,
    .graph_input_count = h_graph_input_count,
    .graph_input = h_graph_input,
    .graph_output_count = h_graph_output_count,
    .graph_output = h_graph_output,
    .node_name = h_node_name,
    .node_op_type = h_node_op_type,
    .node_domain = h_node_domain,
    .node_since_version = h_node_since_version,
    .node_input_count = h_node_input_count,
    .node_input = h_node_input,
    .node_output_count = h_node_output_count,
    .node_output = h_node_output,
    .node_attr_type = h_node_attr_type,
    .node_attr_int = h_node_attr_int,
    .node_attr_float = h_node_attr_float,
    .node_attr_string = h_node_attr_string,
    .node_attr_ints = h_node_attr_ints,
    .node_attr_floats = h_node_attr_floats,
    .node_attr_strings = h_node_attr_strings,
    .node_attr_tensor = h_node_attr_tensor,
    .value_name = h_value_name,
    .value_elem_type = h_value_elem_type,
    .value_rank = h_value_rank,
    .value_dims = h_value_dims,
    .value_constant = h_value_constant,
    .value_producer = h_value_producer,
    .tensor_elem_type = h_tensor_elem_type,
    .tensor_rank = h_tensor_rank,
    .tensor_dims = h_tensor_dims,
    .tensor_elem_count = h_tensor_elem_count,
    .tensor_byte_size = h_tensor_byte_size,
    .tensor_data = h_tensor_data,
    .tensor_mutable_data = h_tensor_mutable_data,
    .tensor_memory = h_tensor_memory,
    .tensor_string = h_tensor_string,
    .tensor_set_string = h_tensor_set_string,
    .ctx_node = h_ctx_node,
    .ctx_input_count = h_ctx_input_count,
    .ctx_input = h_ctx_input,
    .ctx_output_count = h_ctx_output_count,
    .ctx_output = h_ctx_output,
    .ctx_output_view = h_ctx_output_view,
    .ctx_stream = h_ctx_stream,
    .ctx_thread_pool = h_ctx_thread_pool,
    .ctx_scratch = h_ctx_scratch,
    .thread_pool_size = h_thread_pool_size,
    .parallel_for = h_parallel_for,
    .claim_node = ox_builder_claim_node,
    .claim_group = ox_builder_claim_group,
    .decline_node = ox_builder_decline,
    .mark_cheap = ox_builder_mark_cheap,
    .has_kernel = ox_builder_has_kernel,
    .register_kernel = h_register_kernel,
    .register_schema = h_register_schema,
    .infer_node = h_infer_node,
    .infer_input_count = h_infer_input_count,
    .infer_input = h_infer_input,
    .infer_set_output = h_infer_set_output,
    .value_consumer_count = h_value_consumer_count,
    .value_consumer = h_value_consumer,
    .value_is_graph_output = h_value_is_graph_output,
    .edit_replace = ox_edit_replace,
    .edit_set_attr_int = ox_edit_set_attr_int,
    .edit_set_attr_float = ox_edit_set_attr_float,
    .edit_set_attr_ints = ox_edit_set_attr_ints,
    .edit_set_attr_string = ox_edit_set_attr_string,
    .blob_write = ox_blob_write,
    .ctx_should_stop = h_ctx_should_stop,
    .tensor_string_len = h_tensor_string_len,
    .node_attr_strings_lens = h_node_attr_strings_lens,
};

const OnyxHostApi* ox_host_api(void) {
  return &ox_host_api_table;
}

/* The public listing loads each library as a session would, with this table. */
OnyxStatus* onyx_provider_list_create(OnyxProviderList** out) {
  return ox_provider_list_scan(&ox_host_api_table, out);
}
