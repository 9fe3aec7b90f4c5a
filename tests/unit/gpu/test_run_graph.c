/* test_run_graph.c — the host's side of run graphs (ONYX_EXT_RUN_GRAPH,
 * onyx_ep.h; docs/abi.md "Run graphs"), with an in-process provider "gfake"
 * that behaves like a GPU under stream capture: its memory is a device of its
 * own (host memory underneath, so the test reads and writes it), each kernel
 * queues its operation on the EP's stream, and while the stream captures the
 * operation is recorded instead of run. capture_end launches the recording
 * once, replay runs it again. Counters and a trace of the extension's calls
 * show what the host did; every output is checked against a reference
 * computed here.
 *
 * Model: X [2, 3] -> Relu -> a; b = Add(a, X); Y = Mul(b, a), so
 * y = (relu(x) + x) * relu(x). Options of gfake: "graphs" (0, 1, required:
 * whether the EP offers the extension and its `required`), "warmup"
 * (warmup_runs), "fail_capture" (1: capture_end fails, as a CUDA capture
 * invalidated by a synchronizing kernel does). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onyx/onyx.h"
#include "onyx/onyx_ep.h"
#include "ox_test_models.h"

/* --- the fake provider ------------------------------------------------------------------- */

#define GF_VENDOR  0x6FA4u
#define GF_MAX_OPS 64

typedef enum { GF_RELU, GF_ADD, GF_MUL } GfKind;

typedef struct GfOp {
  GfKind kind;
  const float *a, *b;
  float* y;
  size_t n;
} GfOp;

struct OnyxStream {
  bool capturing;
  GfOp ops[GF_MAX_OPS]; /* recorded while capturing */
  size_t n_ops;
};

typedef struct GfGraph {
  GfOp ops[GF_MAX_OPS];
  size_t n_ops;
} GfGraph;

typedef struct GfEp {
  OnyxEp ep;
  OnyxRunGraphExt ext;
  OnyxAllocator alloc;
  bool fail_capture;
  GfGraph* graphs[4];
  size_t n_graphs;
} GfEp;

/* What the host did, reset by each test. */
static struct {
  int computes;    /* kernel compute calls */
  int executed;    /* operations run on the "device" (kernels, graph launches' operations) */
  int captures;    /* graphs kept */
  int replays;     /* replay calls */
  int released;    /* release_graph calls */
  char trace[256]; /* B: capture_begin, E: capture_end keep, X: capture_end discard, R: replay */
  float* last_h2d; /* the destination of the last host -> device copy */
} G;

static const OnyxHostApi* H;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* G, when runs are concurrent */

static void gf_trace(char c) {
  pthread_mutex_lock(&g_lock);
  size_t n = strlen(G.trace);
  if (n + 1 < sizeof G.trace) G.trace[n] = c;
  pthread_mutex_unlock(&g_lock);
}

static void gf_bump(int* counter) {
  pthread_mutex_lock(&g_lock);
  (*counter)++;
  pthread_mutex_unlock(&g_lock);
}

static void gf_run(const GfOp* op) {
  for (size_t i = 0; i < op->n; i++) {
    float a = op->a[i];
    op->y[i] = op->kind == GF_RELU  ? (a > 0 ? a : 0)
               : op->kind == GF_ADD ? a + op->b[i]
                                    : a * op->b[i];
  }
  gf_bump(&G.executed);
}

static OnyxStatus* gf_compute(void* state, OnyxKernelContext* ctx) {
  GfKind kind = (GfKind)(intptr_t)state;
  gf_bump(&G.computes);
  const OnyxTensor* a = H->ctx_input(ctx, 0);
  const OnyxTensor* b = kind == GF_RELU ? NULL : H->ctx_input(ctx, 1);
  if (b && H->tensor_elem_count(b) != H->tensor_elem_count(a))
    return H->status_create(ONYX_INVALID_ARGUMENT, "gfake: no broadcasting");
  OnyxTensor* y = NULL;
  OnyxStatus* st = H->ctx_output(ctx, 0, H->tensor_dims(a), H->tensor_rank(a), &y);
  if (st) return st;
  GfOp op = {kind, H->tensor_data(a), b ? H->tensor_data(b) : NULL, H->tensor_mutable_data(y),
             H->tensor_elem_count(a)};
  OnyxStream* s = H->ctx_stream(ctx);
  if (!s) return H->status_create(ONYX_FAIL, "gfake: no stream");
  if (!s->capturing) {
    gf_run(&op);
    return NULL;
  }
  if (s->n_ops == GF_MAX_OPS) return H->status_create(ONYX_FAIL, "gfake: too many operations");
  s->ops[s->n_ops++] = op;
  return NULL;
}

static const OnyxMemoryDevice GF_MEM = {.kind = ONYX_DEVICE_GPU,
                                        .vendor_id = GF_VENDOR,
                                        .device_id = 0,
                                        .mem_type = ONYX_MEM_DEFAULT,
                                        .alignment = 64};

static void* gf_alloc(void* ctx, size_t bytes, size_t alignment) {
  (void)ctx;
  size_t rounded = (bytes + 63) / 64 * 64;
  return aligned_alloc(64, rounded ? rounded : 64);
}

static void gf_free(void* ctx, void* p) {
  (void)ctx;
  free(p);
}

static const OnyxAllocator* gf_get_allocator(OnyxEp* ep, OnyxMemType t) {
  return t == ONYX_MEM_DEFAULT ? &((GfEp*)ep)->alloc : NULL;
}

static bool gf_mine(const OnyxMemoryDevice* m) {
  return m->kind == ONYX_DEVICE_GPU && m->vendor_id == GF_VENDOR;
}

static int gf_can_copy(OnyxEp* ep, const OnyxMemoryDevice* src, const OnyxMemoryDevice* dst) {
  (void)ep;
  return (gf_mine(src) || src->kind == ONYX_DEVICE_CPU) &&
         (gf_mine(dst) || dst->kind == ONYX_DEVICE_CPU);
}

static OnyxStatus* gf_copy(OnyxEp* ep, const OnyxTensor* const* src, OnyxTensor* const* dst,
                           size_t n, OnyxStream* s) {
  (void)ep;
  for (size_t i = 0; i < n; i++) {
    if (s && s->capturing)
      return H->status_create(ONYX_RUNTIME_ERROR, "gfake: a copy during a capture");
    memcpy(H->tensor_mutable_data(dst[i]), H->tensor_data(src[i]), H->tensor_byte_size(src[i]));
    if (gf_mine(H->tensor_memory(dst[i])) && !gf_mine(H->tensor_memory(src[i])))
      G.last_h2d = H->tensor_mutable_data(dst[i]);
  }
  return NULL;
}

static OnyxStatus* gf_create_stream(OnyxEp* ep, OnyxStream** out) {
  (void)ep;
  *out = calloc(1, sizeof **out);
  return *out ? NULL : H->status_create(ONYX_OUT_OF_MEMORY, "gfake: out of memory");
}

static void gf_release_stream(OnyxEp* ep, OnyxStream* s) {
  (void)ep;
  free(s);
}

static OnyxStatus* gf_sync(OnyxEp* ep, OnyxStream* s) {
  (void)ep;
  if (s && s->capturing)
    return H->status_create(ONYX_RUNTIME_ERROR, "gfake: synchronizing a capturing stream");
  return NULL;
}

static OnyxStatus* gf_capture_begin(OnyxEp* ep, OnyxStream* s) {
  (void)ep;
  gf_trace('B');
  if (s->capturing) return H->status_create(ONYX_FAIL, "gfake: already capturing");
  s->capturing = true;
  s->n_ops = 0;
  return NULL;
}

static OnyxStatus* gf_capture_end(OnyxEp* ep, OnyxStream* s, int32_t keep, uint64_t* id) {
  GfEp* g = (GfEp*)ep;
  *id = 0;
  gf_trace(keep ? 'E' : 'X');
  s->capturing = false;
  if (g->fail_capture) return H->status_create(ONYX_RUNTIME_ERROR, "gfake: capture invalidated");
  if (!keep) return NULL;
  GfGraph* gr = malloc(sizeof *gr);
  if (!gr || g->n_graphs == 4) {
    free(gr);
    return H->status_create(ONYX_OUT_OF_MEMORY, "gfake: no room for a graph");
  }
  memcpy(gr->ops, s->ops, sizeof gr->ops);
  gr->n_ops = s->n_ops;
  g->graphs[g->n_graphs++] = gr;
  *id = g->n_graphs;
  gf_bump(&G.captures);
  for (size_t i = 0; i < gr->n_ops; i++) /* the launch of the captured run */
    gf_run(&gr->ops[i]);
  return NULL;
}

static OnyxStatus* gf_replay(OnyxEp* ep, OnyxStream* s, uint64_t id) {
  GfEp* g = (GfEp*)ep;
  (void)s;
  gf_trace('R');
  if (id < 1 || id > g->n_graphs || !g->graphs[id - 1])
    return H->status_create(ONYX_INVALID_ARGUMENT, "gfake: no graph %llu", (unsigned long long)id);
  gf_bump(&G.replays);
  const GfGraph* gr = g->graphs[id - 1];
  for (size_t i = 0; i < gr->n_ops; i++)
    gf_run(&gr->ops[i]);
  return NULL;
}

static void gf_release_graph(OnyxEp* ep, uint64_t id) {
  GfEp* g = (GfEp*)ep;
  if (id < 1 || id > g->n_graphs) return;
  free(g->graphs[id - 1]);
  g->graphs[id - 1] = NULL;
  gf_bump(&G.released);
}

static void gf_release(OnyxEp* ep) {
  GfEp* g = (GfEp*)ep;
  for (size_t i = 0; i < g->n_graphs; i++)
    assert_null(g->graphs[i]); /* the host released every graph before the EP */
  free(g);
}

static OnyxStatus* gf_create_ep(const OnyxProvider* p, const OnyxEpCreateArgs* a, OnyxEp** out) {
  GfEp* g = calloc(1, sizeof *g);
  if (!g) return H->status_create(ONYX_OUT_OF_MEMORY, "gfake: out of memory");
  const char* graphs = H->options_get(a->options, "graphs");
  const char* warm = H->options_get(a->options, "warmup");
  const char* fail = H->options_get(a->options, "fail_capture");
  g->fail_capture = fail && !strcmp(fail, "1");
  g->alloc = (OnyxAllocator){
      .struct_size = sizeof g->alloc, .device = GF_MEM, .alloc = gf_alloc, .free = gf_free};
  g->ep = (OnyxEp){.struct_size = sizeof g->ep,
                   .ctx = g,
                   .provider = p,
                   .get_allocator = gf_get_allocator,
                   .can_copy = gf_can_copy,
                   .copy_tensors = gf_copy,
                   .create_stream = gf_create_stream,
                   .release_stream = gf_release_stream,
                   .sync_stream = gf_sync,
                   .release = gf_release};
  if (graphs && strcmp(graphs, "0")) {
    g->ext = (OnyxRunGraphExt){.base = {.struct_size = sizeof g->ext, .type = ONYX_EXT_RUN_GRAPH},
                               .required = !strcmp(graphs, "required"),
                               .warmup_runs = warm ? (uint32_t)atoi(warm) : 1,
                               .capture_begin = gf_capture_begin,
                               .capture_end = gf_capture_end,
                               .replay = gf_replay,
                               .release_graph = gf_release_graph};
    g->ep.next = &g->ext.base;
  }
  *out = &g->ep;
  return NULL;
}

static OnyxStatus* gf_count(const OnyxProvider* p, size_t* n) {
  (void)p;
  *n = 1;
  return NULL;
}

static const int32_t F32[] = {ONYX_ELEM_FLOAT32};
static const OnyxTypeConstraint TC[] = {{"T", F32, 1}};

static OnyxStatus* gf_register(const OnyxProvider* p, OnyxKernelRegistry* r) {
  (void)p;
  static const char* const ops[] = {"Relu", "Add", "Mul"};
  for (int k = 0; k < 3; k++) {
    OnyxKernelDef d = {.struct_size = sizeof d,
                       .domain = "",
                       .op_type = ops[k],
                       .since_version = 1,
                       .end_version = ONYX_OPSET_LATEST,
                       .type_constraints = TC,
                       .type_constraint_count = 1,
                       .compute = gf_compute,
                       .user_data = (void*)(intptr_t)k};
    OnyxStatus* st = H->register_kernel(r, &d);
    if (st) return st;
  }
  return NULL;
}

static const OnyxProvider GF = {.struct_size = sizeof GF,
                                .abi_major = ONYX_ABI_VERSION_MAJOR,
                                .abi_minor = ONYX_ABI_VERSION_MINOR,
                                .name = "gfake",
                                .vendor = "test",
                                .version = "1",
                                .device_count = gf_count,
                                .register_kernels = gf_register,
                                .create_ep = gf_create_ep};

static OnyxStatus* gf_init(const OnyxHostApi* host, const OnyxProvider** out) {
  H = host;
  *out = &GF;
  return NULL;
}

/* --- helpers ------------------------------------------------------------------------------- */

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

typedef struct Log {
  char text[65536];
} Log;

static void on_log(void* user, OnyxLogSeverity sev, const char* msg) {
  Log* l = user;
  size_t used = strlen(l->text);
  if (used + 1 < sizeof l->text)
    snprintf(l->text + used, sizeof l->text - used, "[%d] %s\n", (int)sev, msg);
}

static int count(const char* text, const char* what) {
  int n = 0;
  for (const char* p = strstr(text, what); p; p = strstr(p + 1, what))
    n++;
  return n;
}

/* Y = (Relu(X) + X) * Relu(X); with_tanh: Y = Tanh of that (Tanh runs on the CPU). */
static OnyxSession* make_session(const char* graphs, const char* warmup, bool fail_capture,
                                 bool with_tanh, Log* log) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_node(m, "Relu", "relu", "X", "a");
  otm_node(m, "Add", "add", "a,X", "b");
  otm_node(m, "Mul", "mul", "b,a", with_tanh ? "c" : "Y");
  if (with_tanh) otm_node(m, "Tanh", "tanh", "c", "Y");
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_add_provider_init(o, "gfake", gf_init, 1));
  ok(onyx_session_options_set_provider_option(o, "gfake", "graphs", graphs));
  if (warmup) ok(onyx_session_options_set_provider_option(o, "gfake", "warmup", warmup));
  if (fail_capture) ok(onyx_session_options_set_provider_option(o, "gfake", "fail_capture", "1"));
  ok(onyx_session_options_set_optimization_level(o, ONYX_OPT_DISABLED));
  ok(onyx_session_options_set_log_severity(o, ONYX_LOG_VERBOSE));
  ok(onyx_session_options_set_log_callback(o, on_log, log));
  OnyxSession* s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &s);
  onyx_session_options_release(o);
  free(bytes);
  ok(st);
  memset(&G, 0, sizeof G);
  return s;
}

static float ref(float x, bool with_tanh) {
  float a = x > 0 ? x : 0;
  float y = (a + x) * a;
  return with_tanh ? tanhf(y) : y;
}

/* Input of run r: distinct values of both signs. */
static void input_of(int r, float* x) {
  for (int i = 0; i < 6; i++)
    x[i] = (float)((i * 7 + r * 3) % 11 - 5) * 0.5f;
}

/* A binding with X copied into gfake's memory (its address in *dev_x) and Y
 * allocated there by the session. */
static OnyxIoBinding* bind_device(OnyxSession* s, float** dev_x) {
  OnyxIoBinding* b = NULL;
  ok(onyx_io_binding_create(s, &b));
  float x[6];
  input_of(0, x);
  OnyxValue* v = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){2, 3}, 2, x, sizeof x, &v));
  G.last_h2d = NULL;
  ok(onyx_io_binding_bind_input_to_device(b, "X", v, NULL));
  onyx_value_release(v);
  assert_non_null(G.last_h2d);
  *dev_x = G.last_h2d;
  OnyxMemoryDevice m;
  ok(onyx_session_output_memory(s, 0, &m));
  assert_int_equal(m.vendor_id, GF_VENDOR);
  ok(onyx_io_binding_bind_output_to_device(b, "Y", &m));
  return b;
}

/* Runs the binding with run r's input written into the device copy of X and
 * checks Y. keep: the output value is returned (holding the binding's
 * buffer) instead of released. */
static OnyxStatus* run_checked(OnyxSession* s, OnyxIoBinding* b, float* dev_x, int r,
                               bool with_tanh, OnyxValue** keep) {
  float x[6];
  input_of(r, x);
  memcpy(dev_x, x, sizeof x);
  OnyxStatus* st = onyx_session_run_with_binding(s, NULL, b);
  if (st) return st;
  OnyxValue* y = NULL;
  ok(onyx_io_binding_get_outputs(b, &y, 1));
  const OnyxTensor* t = onyx_value_tensor(y);
  assert_int_equal(onyx_tensor_memory(t)->vendor_id, GF_VENDOR);
  const float* got = onyx_tensor_data(t);
  for (int i = 0; i < 6; i++)
    if (fabsf(got[i] - ref(x[i], with_tanh)) > 1e-6f)
      fail_msg("run %d: Y[%d] = %g, expected %g", r, i, (double)got[i],
               (double)ref(x[i], with_tanh));
  if (keep)
    *keep = y;
  else
    onyx_value_release(y);
  return NULL;
}

/* --- tests --------------------------------------------------------------------------------- */

/* One warm-up run, one captured run, then eight replays with new input
 * data each: the kernels are called only by the first two runs. */
static void test_capture_then_replay(void** state) {
  (void)state;
  Log* log = calloc(1, sizeof *log);
  OnyxSession* s = make_session("1", NULL, false, false, log);
  float* dx = NULL;
  OnyxIoBinding* b = bind_device(s, &dx);
  ok(run_checked(s, b, dx, 1, false, NULL));
  assert_int_equal(G.computes, 3);
  assert_string_equal(G.trace, "");
  ok(run_checked(s, b, dx, 2, false, NULL));
  assert_int_equal(G.computes, 6); /* recorded, not run ... */
  assert_int_equal(G.executed, 6); /* ... until capture_end launched them */
  assert_int_equal(G.captures, 1);
  assert_string_equal(G.trace, "BE");
  for (int r = 3; r <= 10; r++)
    ok(run_checked(s, b, dx, r, false, NULL));
  assert_int_equal(G.computes, 6);
  assert_int_equal(G.replays, 8);
  assert_int_equal(G.executed, 6 + 8 * 3);
  assert_string_equal(G.trace, "BERRRRRRRR");
  assert_int_equal(count(log->text, "captured the run as a graph ("), 1);
  assert_int_equal(count(log->text, "replayed the run's graph"), 8);
  onyx_io_binding_release(b);
  onyx_session_release(s);
  assert_int_equal(G.released, 1);
  free(log);
}

static void test_warmup_runs(void** state) {
  (void)state;
  Log* log = calloc(1, sizeof *log);
  OnyxSession* s = make_session("1", "3", false, false, log);
  float* dx = NULL;
  OnyxIoBinding* b = bind_device(s, &dx);
  for (int r = 1; r <= 3; r++)
    ok(run_checked(s, b, dx, r, false, NULL));
  assert_string_equal(G.trace, "");
  ok(run_checked(s, b, dx, 4, false, NULL));
  ok(run_checked(s, b, dx, 5, false, NULL));
  assert_string_equal(G.trace, "BER");
  onyx_io_binding_release(b);
  onyx_session_release(s);
  free(log);
}

/* Host inputs and outputs (onyx_session_run): node by node, the reason
 * logged at info once, then at verbose; required: the run fails. */
static void test_host_io_runs_nodes(void** state) {
  (void)state;
  for (int required = 0; required < 2; required++) {
    Log* log = calloc(1, sizeof *log);
    OnyxSession* s = make_session(required ? "required" : "1", NULL, false, false, log);
    for (int r = 1; r <= 3; r++) {
      float x[6];
      input_of(r, x);
      OnyxValue* in = NULL;
      ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){2, 3}, 2, x, sizeof x, &in));
      const char* in_name = "X";
      const char* out_name = "Y";
      OnyxValue* y = NULL;
      OnyxStatus* st =
          onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &y);
      onyx_value_release(in);
      if (required) {
        assert_non_null(st);
        assert_int_equal(onyx_status_code(st), ONYX_RUNTIME_ERROR);
        assert_non_null(strstr(onyx_status_message(st), "graphs are required"));
        assert_non_null(strstr(onyx_status_message(st), "input 'X' is not bound"));
        onyx_status_release(st);
        continue;
      }
      ok(st);
      const float* got = onyx_tensor_data(onyx_value_tensor(y));
      for (int i = 0; i < 6; i++)
        assert_float_equal(got[i], ref(x[i], false), 1e-6);
      onyx_value_release(y);
    }
    assert_string_equal(G.trace, "");
    if (!required) {
      assert_int_equal(G.computes, 9);
      assert_int_equal(count(log->text, "[1] provider 'gfake': this run executes node by node "
                                        "instead of replaying a graph: input 'X' is not bound"),
                       1);
      assert_int_equal(count(log->text, "[0] provider 'gfake': this run executes node by node"), 2);
    }
    onyx_session_release(s);
    free(log);
  }
}

/* A node on another provider rules graphs out for the session. */
static void test_node_elsewhere_runs_nodes(void** state) {
  (void)state;
  Log* log = calloc(1, sizeof *log);
  OnyxSession* s = make_session("1", NULL, false, true, log);
  OnyxIoBinding* b = NULL;
  ok(onyx_io_binding_create(s, &b));
  float x[6];
  input_of(0, x);
  OnyxValue* v = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){2, 3}, 2, x, sizeof x, &v));
  OnyxMemoryDevice m = GF_MEM;
  G.last_h2d = NULL;
  ok(onyx_io_binding_bind_input_to_device(b, "X", v, &m));
  onyx_value_release(v);
  float* dx = G.last_h2d;
  assert_non_null(dx);
  ok(onyx_io_binding_bind_output_to_device(b, "Y", &m));
  for (int r = 1; r <= 4; r++)
    ok(run_checked(s, b, dx, r, true, NULL));
  assert_string_equal(G.trace, "");
  assert_int_equal(G.computes, 12);
  assert_int_equal(count(log->text, "[2] provider 'gfake': run graphs are on but this session "
                                    "cannot use them: node 'tanh' (Tanh) runs on provider 'cpu'"),
                   1);
  onyx_io_binding_release(b);
  onyx_session_release(s);
  free(log);
}

/* After the capture, a run whose output buffer moved (the caller holds last
 * run's result, so the binding allocates a new one) runs node by node; the
 * replays go on once the addresses are the captured ones again. */
static void test_moved_output_runs_nodes(void** state) {
  (void)state;
  Log* log = calloc(1, sizeof *log);
  OnyxSession* s = make_session("1", NULL, false, false, log);
  float* dx = NULL;
  OnyxIoBinding* b = bind_device(s, &dx);
  ok(run_checked(s, b, dx, 1, false, NULL));
  OnyxValue* held = NULL;
  ok(run_checked(s, b, dx, 2, false, &held)); /* captured; its Y buffer is held */
  assert_string_equal(G.trace, "BE");
  int computes = G.computes;
  ok(run_checked(s, b, dx, 3, false, NULL)); /* Y is a new buffer */
  assert_string_equal(G.trace, "BE");
  assert_int_equal(G.computes, computes + 3);
  assert_int_equal(count(log->text, "bound input and output addresses differ from the captured"),
                   1);
  /* The result of run 2 kept its data: the graph did not write over it. */
  const float* kept = onyx_tensor_data(onyx_value_tensor(held));
  float x2[6];
  input_of(2, x2);
  for (int i = 0; i < 6; i++)
    assert_float_equal(kept[i], ref(x2[i], false), 1e-6);
  onyx_value_release(held);
  onyx_io_binding_release(b);
  onyx_session_release(s);
  free(log);
}

/* A capture that fails (here capture_end; on CUDA a kernel that synchronizes
 * or allocates) : the run is executed again node by node, with a warning, and
 * later runs do not try again; required: the run fails. */
static void test_failed_capture(void** state) {
  (void)state;
  for (int required = 0; required < 2; required++) {
    Log* log = calloc(1, sizeof *log);
    OnyxSession* s = make_session(required ? "required" : "1", NULL, true, false, log);
    float* dx = NULL;
    OnyxIoBinding* b = bind_device(s, &dx);
    ok(run_checked(s, b, dx, 1, false, NULL));
    OnyxStatus* st = run_checked(s, b, dx, 2, false, NULL);
    assert_string_equal(G.trace, "BE");
    if (required) {
      assert_non_null(st);
      assert_non_null(strstr(onyx_status_message(st), "capture invalidated"));
      onyx_status_release(st);
      st = run_checked(s, b, dx, 3, false, NULL);
      assert_non_null(st);
      assert_non_null(strstr(onyx_status_message(st), "capturing the run failed earlier"));
      onyx_status_release(st);
    } else {
      ok(st);
      assert_int_equal(G.computes, 9); /* warm-up, the capture, the same run again */
      for (int r = 3; r <= 5; r++)
        ok(run_checked(s, b, dx, r, false, NULL));
      assert_string_equal(G.trace, "BE");
      assert_int_equal(G.computes, 18);
      assert_int_equal(count(log->text, "[2] provider 'gfake': capturing the run as a graph "
                                        "failed: provider 'gfake': ending the capture: gfake: "
                                        "capture invalidated"),
                       1);
    }
    onyx_io_binding_release(b);
    onyx_session_release(s);
    assert_int_equal(G.released, 0);
    free(log);
  }
}

/* Runs from four threads, each with its own binding (its own addresses):
 * a capture waits until no other run is in flight, only the captured
 * binding's runs replay, and every run's output is right while replays and
 * node-by-node runs overlap (the graph's buffers are never handed to
 * another run). Then each binding runs alone: one capture in all. */
typedef struct Worker {
  OnyxSession* s;
  OnyxIoBinding* b;
  float* dx;
  int id, wrong, errors;
} Worker;

static void* worker(void* arg) {
  Worker* w = arg;
  for (int k = 0; k < 6; k++) {
    float x[6];
    input_of(w->id * 100 + k, x);
    memcpy(w->dx, x, sizeof x);
    OnyxStatus* st = onyx_session_run_with_binding(w->s, NULL, w->b);
    if (st) {
      w->errors++;
      onyx_status_release(st);
      continue;
    }
    OnyxValue* y = NULL;
    st = onyx_io_binding_get_outputs(w->b, &y, 1);
    if (st) {
      w->errors++;
      onyx_status_release(st);
      continue;
    }
    const float* got = onyx_tensor_data(onyx_value_tensor(y));
    for (int i = 0; i < 6; i++)
      if (fabsf(got[i] - ref(x[i], false)) > 1e-6f) w->wrong++;
    onyx_value_release(y);
  }
  return NULL;
}

static void test_concurrent_runs(void** state) {
  (void)state;
  Log* log = calloc(1, sizeof *log);
  OnyxSession* s = make_session("1", NULL, false, false, log);
  Worker w[4];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (Worker){.s = s, .id = i};
    w[i].b = bind_device(s, &w[i].dx);
  }
  for (int i = 0; i < 4; i++)
    assert_int_equal(pthread_create(&t[i], NULL, worker, &w[i]), 0);
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(w[i].errors, 0);
    assert_int_equal(w[i].wrong, 0);
  }
  assert_true(G.captures <= 1);
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < 3; k++)
      ok(run_checked(s, w[i].b, w[i].dx, 50 + k, false, NULL));
  assert_int_equal(G.captures, 1);
  assert_true(G.replays >= 2);
  for (int i = 0; i < 4; i++)
    onyx_io_binding_release(w[i].b);
  onyx_session_release(s);
  assert_int_equal(G.released, 1);
  free(log);
}

/* Without the extension the EP's runs never reach it. */
static void test_off_by_default(void** state) {
  (void)state;
  Log* log = calloc(1, sizeof *log);
  OnyxSession* s = make_session("0", NULL, false, false, log);
  float* dx = NULL;
  OnyxIoBinding* b = bind_device(s, &dx);
  for (int r = 1; r <= 4; r++)
    ok(run_checked(s, b, dx, r, false, NULL));
  assert_string_equal(G.trace, "");
  assert_int_equal(G.computes, 12);
  assert_null(strstr(log->text, "captur"));
  assert_null(strstr(log->text, "replay"));
  onyx_io_binding_release(b);
  onyx_session_release(s);
  free(log);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_capture_then_replay),
      cmocka_unit_test(test_warmup_runs),
      cmocka_unit_test(test_host_io_runs_nodes),
      cmocka_unit_test(test_node_elsewhere_runs_nodes),
      cmocka_unit_test(test_moved_output_runs_nodes),
      cmocka_unit_test(test_failed_capture),
      cmocka_unit_test(test_concurrent_runs),
      cmocka_unit_test(test_off_by_default),
  };
  return cmocka_run_group_tests_name("run_graph", tests, NULL, NULL);
}
