/* test_hostile_limits.c — hostile models against the limits of every path
 * (docs/security.md): max_tensor_bytes for the tensors host ops make
 * (ConcatFromSequence, a Loop's scan output, also with trip count
 * INT64_MAX), SplitToSequence sizes whose sum wraps, max_session_bytes over
 * kernel outputs and a Loop's accumulation, max_run_ms for a host Loop and a
 * kernel that polls ctx_should_stop, onyx_run_options_terminate reaching a
 * kernel, the constant-folding budgets of session creation (time: a kernel
 * that runs until told to stop; size: a huge Range), If/Loop/Scan bodies
 * whose output types differ from the node's, and pins naming nothing. Each
 * case asserts the code and the words of the message; under ASan the same
 * cases show there is no leak. Normal models run under the same limits. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <cmocka.h>
#include "onyx/onyx.h"
#include "onyx/onyx_ep.h"
#include "ox_test_models.h"

#define F32  ONYX_ELEM_FLOAT32
#define I64  ONYX_ELEM_INT64
#define BOOL ONYX_ELEM_BOOL
#define DIMS(...)                                                                                  \
  (int64_t[]) {                                                                                    \
    __VA_ARGS__                                                                                    \
  }

static const int64_t kScalar[1] = {0};

/* --- helpers -------------------------------------------------------------------------- */

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

/* st must have `code` and contain every string of the NULL-ended list. */
static void expect(OnyxStatus* st, OnyxStatusCode code, ...) {
  if (!st) fail_msg("expected an error of code %d, got success", (int)code);
  const char* msg = onyx_status_message(st);
  if (onyx_status_code(st) != code)
    fail_msg("expected code %d, got %d: %s", (int)code, (int)onyx_status_code(st), msg);
  va_list ap;
  va_start(ap, code);
  for (const char* sub = va_arg(ap, const char*); sub; sub = va_arg(ap, const char*))
    if (!strstr(msg, sub)) fail_msg("message lacks '%s': %s", sub, msg);
  va_end(ap);
  onyx_status_release(st);
}

typedef struct Limits {
  size_t tensor;  /* max_tensor_bytes (0: default) */
  size_t session; /* max_session_bytes (0: none) */
  uint64_t run_ms, fold_ms;
} Limits;

/* What the session logged at info level and above. */
typedef struct Log {
  char text[8192];
  size_t len;
  pthread_mutex_t lock;
} Log;

static void log_fn(void* user, OnyxLogSeverity sev, const char* msg) {
  (void)sev;
  Log* l = user;
  pthread_mutex_lock(&l->lock);
  int n = snprintf(l->text + l->len, sizeof l->text - l->len, "%s\n", msg);
  if (n > 0)
    l->len += (size_t)n < sizeof l->text - l->len ? (size_t)n : sizeof l->text - l->len - 1;
  pthread_mutex_unlock(&l->lock);
}

static OnyxSessionOptions* options(const Limits* lim, Log* log) {
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_set_threads(o, 1));
  ok(onyx_session_options_set_log_severity(o, log ? ONYX_LOG_INFO : ONYX_LOG_FATAL));
  if (log) ok(onyx_session_options_set_log_callback(o, log_fn, log));
  if (lim) {
    ok(onyx_session_options_set_limits(o, 0, lim->tensor, 0, 0));
    ok(onyx_session_options_set_max_session_bytes(o, lim->session));
    ok(onyx_session_options_set_max_run_ms(o, lim->run_ms));
    ok(onyx_session_options_set_max_fold_ms(o, lim->fold_ms));
  }
  return o;
}

/* Creates a session from m (freed) with options o (released). */
static OnyxStatus* create(OxTestModel* m, OnyxSessionOptions* o, OnyxSession** s) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  *s = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, s);
  onyx_session_options_release(o);
  free(bytes);
  return st;
}

static OnyxSession* open_session(OxTestModel* m, OnyxSessionOptions* o) {
  OnyxSession* s = NULL;
  ok(create(m, o, &s));
  assert_non_null(s);
  return s;
}

static OnyxValue* tensor(OnyxElemType t, size_t rank, const int64_t* dims, const void* data) {
  size_t count = 1;
  for (size_t i = 0; i < rank; i++)
    count *= (size_t)dims[i];
  OnyxValue* v = NULL;
  ok(onyx_value_create_tensor(t, dims, rank, data, count * onyx_elem_type_size(t), &v));
  return v;
}

/* A float tensor of `count` ones, shaped [count]. */
static OnyxValue* ones(size_t count) {
  float* d = malloc(count * sizeof *d);
  assert_non_null(d);
  for (size_t i = 0; i < count; i++)
    d[i] = 1;
  OnyxValue* v = tensor(F32, 1, DIMS((int64_t)count), d);
  free(d);
  return v;
}

/* Runs s with the given feeds, releasing them; on success *out (may be
 * NULL) receives the one output `out_name`. */
static OnyxStatus* run_with(OnyxSession* s, const OnyxRunOptions* ro, const char* const* names,
                            OnyxValue** in, size_t n, const char* out_name, OnyxValue** out) {
  OnyxValue* y = NULL;
  OnyxStatus* st = onyx_session_run(s, ro, names, (const OnyxValue* const*)in, n, &out_name, 1, &y);
  onyx_values_release(in, n);
  if (st) assert_null(y);
  if (out)
    *out = y;
  else
    onyx_value_release(y);
  return st;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --- max_tensor_bytes for host ops ------------------------------------------------------ */

/* ConcatFromSequence of four 1 MiB tensors with a 1 MiB limit: refused
 * before the 4 MiB result is allocated. */
static void test_concat_from_sequence_over_tensor_limit(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(262144));
  otm_node(m, "SequenceConstruct", "make", "X,X,X,X", "S");
  otm_attr_int(otm_node(m, "ConcatFromSequence", "cat", "S", "Y"), "axis", 0);
  otm_output(m, "Y", F32, 1, DIMS(-1));
  OnyxSession* s = open_session(m, options(&(Limits){.tensor = 1 << 20}, NULL));
  const char* names[] = {"X"};
  OnyxValue* in[] = {ones(262144)};
  expect(run_with(s, NULL, names, in, 1, "Y", NULL), ONYX_LIMIT_EXCEEDED,
         "node 'cat' (ConcatFromSequence)", "4194304 bytes", "limit of 1048576 bytes",
         "max_tensor_bytes", NULL);
  onyx_session_release(s);
}

/* Loop whose body stacks a 256 KiB outer value per iteration: with M trips
 * (INT64_MAX too) and a 1 MiB limit the scan output is refused as it grows,
 * after four iterations, not after allocating what M asks for. */
static OxTestModel* stacking_loop(void) {
  OxTestModel* m = otm_new(13);
  otm_input(m, "M", I64, 0, kScalar);
  otm_input(m, "X", F32, 1, DIMS(65536));
  otm_begin_graph(m, "body");
  otm_input(m, "i", I64, 0, kScalar);
  otm_input(m, "cond", BOOL, 0, kScalar);
  otm_node(m, "Identity", "keep", "cond", "cond_out");
  otm_node(m, "Identity", "scan", "X", "x_out");
  otm_output(m, "cond_out", BOOL, 0, kScalar);
  otm_output(m, "x_out", F32, 1, DIMS(65536));
  Onnx__GraphProto* body = otm_end_graph(m);
  otm_attr_graph(otm_node(m, "Loop", "loop", "M,", "S"), "body", body);
  otm_output(m, "S", F32, 2, DIMS(-1, 65536));
  return m;
}

static OnyxStatus* run_stacking(OnyxSession* s, int64_t trips) {
  const char* names[] = {"M", "X"};
  OnyxValue* in[] = {tensor(I64, 0, NULL, &trips), ones(65536)};
  return run_with(s, NULL, names, in, 2, "S", NULL);
}

static void test_loop_scan_output_over_tensor_limit(void** state) {
  (void)state;
  OnyxSession* s = open_session(stacking_loop(), options(&(Limits){.tensor = 1 << 20}, NULL));
  /* Three iterations fit (768 KiB and the items' headers). */
  OnyxValue* y = NULL;
  const char* names[] = {"M", "X"};
  int64_t three = 3;
  OnyxValue* in[] = {tensor(I64, 0, NULL, &three), ones(65536)};
  ok(run_with(s, NULL, names, in, 2, "S", &y));
  assert_int_equal(onyx_tensor_elem_count(onyx_value_tensor(y)), 3 * 65536);
  onyx_value_release(y);
  expect(run_stacking(s, 2000), ONYX_LIMIT_EXCEEDED, "node 'loop' (Loop)", "output 0",
         "after 4 iterations", "limit of 1048576 bytes", "max_tensor_bytes", NULL);
  double t0 = now_s();
  expect(run_stacking(s, INT64_MAX), ONYX_LIMIT_EXCEEDED, "node 'loop' (Loop)",
         "after 4 iterations", "limit of 1048576 bytes", NULL);
  assert_true(now_s() - t0 < 30); /* stopped by the limit, not by the trip count */
  onyx_session_release(s);
}

/* SplitToSequence with four sizes of 2^62: their sum wraps to 0, the
 * length of the (empty) axis. */
static void test_split_sizes_that_wrap(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 2, DIMS(0, 0));
  const int64_t q = (int64_t)1 << 62;
  otm_initializer(m, "sizes", I64, 1, DIMS(4), (int64_t[]){q, q, q, q});
  otm_attr_int(otm_node(m, "SplitToSequence", "split", "X,sizes", "S"), "axis", 1);
  otm_node(m, "SequenceLength", "len", "S", "L");
  otm_output(m, "L", I64, 0, kScalar);
  OnyxSession* s = open_session(m, options(NULL, NULL));
  const char* names[] = {"X"};
  OnyxValue* in[] = {tensor(F32, 2, DIMS(0, 0), NULL)};
  expect(run_with(s, NULL, names, in, 1, "L", NULL), ONYX_INVALID_ARGUMENT,
         "node 'split' (SplitToSequence)", "'split' sizes overflow", NULL);
  onyx_session_release(s);
}

/* Makes a value's tensor type a sequence of it. */
static void as_sequence(Onnx__ValueInfoProto* vi) {
  Onnx__TypeProto* outer = otm_alloc(sizeof *outer);
  onnx__type_proto__init(outer);
  Onnx__TypeProto__Sequence* sq = otm_alloc(sizeof *sq);
  onnx__type_proto__sequence__init(sq);
  sq->elem_type = vi->type;
  outer->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
  outer->sequence_type = sq;
  vi->type = outer;
}

/* A Loop of INT64_MAX trips that inserts into a carried sequence: the items
 * are shared, but the item table grows until max_tensor_bytes refuses it. */
static void test_sequence_insert_grows_to_limit(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_input(m, "M", I64, 0, kScalar);
  otm_input(m, "X", F32, 1, DIMS(1));
  otm_attr_int(otm_node(m, "SequenceEmpty", "empty", "", "S0"), "dtype", F32);
  otm_begin_graph(m, "body");
  otm_input(m, "i", I64, 0, kScalar);
  otm_input(m, "cond", BOOL, 0, kScalar);
  as_sequence(otm_input(m, "s", F32, 1, DIMS(1)));
  otm_node(m, "Identity", "keep", "cond", "cond_out");
  otm_node(m, "SequenceInsert", "insert", "s,X", "s_out");
  otm_output(m, "cond_out", BOOL, 0, kScalar);
  as_sequence(otm_output(m, "s_out", F32, 1, DIMS(1)));
  Onnx__GraphProto* body = otm_end_graph(m);
  otm_attr_graph(otm_node(m, "Loop", "loop", "M,,S0", "S"), "body", body);
  otm_node(m, "SequenceLength", "len", "S", "L");
  otm_output(m, "L", I64, 0, kScalar);
  OnyxSession* s = open_session(m, options(&(Limits){.tensor = 1 << 16}, NULL));
  const char* names[] = {"M", "X"};
  int64_t trips = INT64_MAX;
  OnyxValue* in[] = {tensor(I64, 0, NULL, &trips), tensor(F32, 1, DIMS(1), (float[]){1})};
  expect(run_with(s, NULL, names, in, 2, "L", NULL), ONYX_LIMIT_EXCEEDED,
         "node 'insert' (SequenceInsert)", "limit of 65536 bytes", "max_tensor_bytes", NULL);
  onyx_session_release(s);
}

/* --- max_session_bytes --------------------------------------------------------------- */

/* a = x + x, b = a + x, c = a + b: 4 KiB each, all three live at c. */
static OxTestModel* three_adds(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(1024));
  otm_node(m, "Add", "a", "X,X", "A");
  otm_node(m, "Add", "b", "A,X", "B");
  otm_node(m, "Add", "c", "A,B", "C");
  otm_output(m, "C", F32, 1, DIMS(1024));
  return m;
}

static OnyxStatus* run_three_adds(const Limits* lim, OnyxValue** y) {
  OnyxSession* s = open_session(three_adds(), options(lim, NULL));
  const char* names[] = {"X"};
  OnyxValue* in[] = {ones(1024)};
  OnyxStatus* st = run_with(s, NULL, names, in, 1, "C", y);
  onyx_session_release(s);
  return st;
}

static void test_session_bytes_kernels(void** state) {
  (void)state;
  expect(run_three_adds(&(Limits){.session = 10240}, NULL), ONYX_LIMIT_EXCEEDED, "node 'c' (Add)",
         "limit of 10240 bytes", "max_session_bytes", "8192 bytes are held", NULL);
  OnyxValue* y = NULL;
  ok(run_three_adds(&(Limits){.session = 16384}, &y)); /* 12 KiB at most: fits */
  const float* c = onyx_tensor_data(onyx_value_tensor(y));
  assert_true(c[0] == 5.0f && c[1023] == 5.0f); /* 2 + 3 */
  onyx_value_release(y);
}

static long peak_rss_kib(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

/* ConstantOfShape asked for 1 GiB with max_session_bytes = 1 MiB: refused
 * when its output is allocated, so the process never takes the memory (its
 * peak RSS grows by far less than the 1 GiB a charge after the kernel would
 * have let it touch). */
static void test_session_bytes_before_allocation(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_input(m, "S", I64, 1, DIMS(1));
  otm_node(m, "ConstantOfShape", "fill", "S", "Y");
  otm_output(m, "Y", F32, 1, DIMS(-1));
  OnyxSession* s = open_session(m, options(&(Limits){.session = 1 << 20}, NULL));
  const char* names[] = {"S"};
  OnyxValue* in[] = {tensor(I64, 1, DIMS(1), (int64_t[]){(int64_t)1 << 28})};
  const long before = peak_rss_kib();
  expect(run_with(s, NULL, names, in, 1, "Y", NULL), ONYX_LIMIT_EXCEEDED,
         "node 'fill' (ConstantOfShape)", "1073741824 more bytes", "limit of 1048576 bytes",
         "max_session_bytes", NULL);
  const long grew = peak_rss_kib() - before;
  if (grew > 128 * 1024) fail_msg("the refused output still took %ld KiB", grew);
  /* a small one still runs */
  in[0] = tensor(I64, 1, DIMS(1), (int64_t[]){1000});
  OnyxValue* y = NULL;
  ok(run_with(s, NULL, names, in, 1, "Y", &y));
  assert_int_equal(onyx_tensor_elem_count(onyx_value_tensor(y)), 1000);
  onyx_value_release(y);
  onyx_session_release(s);
}

/* Constants folded at session creation count against max_session_bytes
 * together: with 1 MiB, the first 768 KiB ConstantOfShape is folded, the
 * second would bring the folded bytes to 1.5 MiB and stays a node, which
 * the run then computes within the limit (its sum is all the run keeps). */
static void test_session_bytes_folding(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_initializer(m, "shape", I64, 1, DIMS(1), (int64_t[]){196608});
  otm_input(m, "X", F32, 1, DIMS(1));
  otm_node(m, "ConstantOfShape", "c1", "shape", "C1");
  OxTestNode* c2 = otm_node(m, "ConstantOfShape", "c2", "shape", "C2");
  /* a value of its own, so the two are not one node after CSE */
  otm_attr_tensor(c2, "value", otm_tensor(m, "v", F32, 1, DIMS(1), (float[]){2}));
  otm_node(m, "ReduceSum", "r1", "C1", "R1");
  otm_node(m, "ReduceSum", "r2", "C2", "R2");
  otm_node(m, "Add", "y1", "R1,X", "Y1");
  otm_node(m, "Add", "y2", "R2,X", "Y2");
  otm_output(m, "Y1", F32, 1, DIMS(1));
  otm_output(m, "Y2", F32, 1, DIMS(1));
  Log log = {.lock = PTHREAD_MUTEX_INITIALIZER};
  OnyxSession* s = open_session(m, options(&(Limits){.session = 1 << 20}, &log));
  /* (the optimizer tries the second node once per round) */
  if (!strstr(log.text, "constant folding left") || !strstr(log.text, "max_session_bytes"))
    fail_msg("no log of a node left unfolded: %s", log.text);
  const char* names[] = {"X"};
  OnyxValue* in[] = {ones(1)};
  OnyxValue* y = NULL;
  ok(run_with(s, NULL, names, in, 1, "Y2", &y));
  /* 196608 twos, plus one */
  assert_true(*(const float*)onyx_tensor_data(onyx_value_tensor(y)) == 393217.0f);
  onyx_value_release(y);
  onyx_session_release(s);
}

static void test_session_bytes_loop(void** state) {
  (void)state;
  OnyxSession* s = open_session(stacking_loop(), options(&(Limits){.session = 1 << 20}, NULL));
  expect(run_stacking(s, 100), ONYX_LIMIT_EXCEEDED, "node 'loop' (Loop)", "max_session_bytes",
         "limit of 1048576 bytes", NULL);
  /* The next, smaller run works (nothing stayed charged): one 256 KiB item
   * and the stacked output, 512 KiB at the peak. */
  ok(run_stacking(s, 1));
  onyx_session_release(s);
}

/* --- run time limits and terminate ------------------------------------------------------- */

/* A Loop of M trips whose body only passes its condition on. */
static OxTestModel* idle_loop(void) {
  OxTestModel* m = otm_new(13);
  otm_input(m, "M", I64, 0, kScalar);
  otm_input(m, "A", F32, 1, DIMS(1));
  otm_begin_graph(m, "body");
  otm_input(m, "i", I64, 0, kScalar);
  otm_input(m, "cond", BOOL, 0, kScalar);
  otm_input(m, "a", F32, 1, DIMS(1));
  otm_node(m, "Identity", "keep", "cond", "cond_out");
  otm_node(m, "Neg", "neg", "a", "a_out");
  otm_output(m, "cond_out", BOOL, 0, kScalar);
  otm_output(m, "a_out", F32, 1, DIMS(1));
  Onnx__GraphProto* body = otm_end_graph(m);
  otm_attr_graph(otm_node(m, "Loop", "loop", "M,,A", "Y"), "body", body);
  otm_output(m, "Y", F32, 1, DIMS(1));
  return m;
}

static OnyxStatus* run_idle_loop(OnyxSession* s, const OnyxRunOptions* ro, int64_t trips,
                                 float* y) {
  const char* names[] = {"M", "A"};
  float a = 1;
  OnyxValue* in[] = {tensor(I64, 0, NULL, &trips), tensor(F32, 1, DIMS(1), &a)};
  OnyxValue* out = NULL;
  OnyxStatus* st = run_with(s, ro, names, in, 2, "Y", &out);
  if (!st) *y = ((const float*)onyx_tensor_data(onyx_value_tensor(out)))[0];
  onyx_value_release(out);
  return st;
}

static void test_run_time_limit_loop(void** state) {
  (void)state;
  OnyxSession* s = open_session(idle_loop(), options(&(Limits){.run_ms = 200}, NULL));
  float y = 0;
  ok(run_idle_loop(s, NULL, 3, &y)); /* a short run is not affected */
  assert_true(y == -1.0f);
  double t0 = now_s();
  expect(run_idle_loop(s, NULL, INT64_MAX, &y), ONYX_CANCELLED, "node 'loop' (Loop)",
         "passed its time limit of 200 ms (max_run_ms)", NULL);
  assert_true(now_s() - t0 < 60);
  onyx_session_release(s);
}

/* An in-process provider named "cpu" (so constant folding uses it too) with
 * Add and a Neg that runs until the host tells it to stop. */
static const OnyxHostApi* g_host;

static OnyxStatus* spin_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  while (!g_host->ctx_should_stop(ctx)) {
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  return g_host->status_create(ONYX_CANCELLED, "spin: stopped");
}

static OnyxStatus* add_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxTensor *a = g_host->ctx_input(ctx, 0), *b = g_host->ctx_input(ctx, 1);
  size_t n = g_host->tensor_elem_count(a);
  if (g_host->tensor_elem_count(b) != n)
    return g_host->status_create(ONYX_INVALID_ARGUMENT, "spin: Add takes equal shapes");
  OnyxTensor* y;
  OnyxStatus* st = g_host->ctx_output(ctx, 0, g_host->tensor_dims(a), g_host->tensor_rank(a), &y);
  if (st) return st;
  const float *x0 = g_host->tensor_data(a), *x1 = g_host->tensor_data(b);
  float* out = g_host->tensor_mutable_data(y);
  for (size_t i = 0; i < n; i++)
    out[i] = x0[i] + x1[i];
  return NULL;
}

static OnyxStatus* spin_kernels(const OnyxProvider* p, OnyxKernelRegistry* r) {
  (void)p;
  static const int32_t f32[] = {ONYX_ELEM_FLOAT32};
  static const OnyxTypeConstraint tc[] = {{"T", f32, 1}};
  OnyxKernelDef d = {.struct_size = sizeof d,
                     .domain = "",
                     .op_type = "Neg",
                     .since_version = 1,
                     .end_version = ONYX_OPSET_LATEST,
                     .type_constraints = tc,
                     .type_constraint_count = 1,
                     .compute = spin_compute};
  OnyxStatus* st = g_host->register_kernel(r, &d);
  if (st) return st;
  d.op_type = "Add";
  d.compute = add_compute;
  return g_host->register_kernel(r, &d);
}

static OnyxStatus* spin_count(const OnyxProvider* p, size_t* n) {
  (void)p;
  *n = 1;
  return NULL;
}

static void spin_ep_release(OnyxEp* ep) {
  free(ep);
}

static OnyxStatus* spin_create(const OnyxProvider* p, const OnyxEpCreateArgs* a, OnyxEp** out) {
  (void)a;
  OnyxEp* ep = calloc(1, sizeof *ep);
  if (!ep) return g_host->status_create(ONYX_OUT_OF_MEMORY, "spin: out of memory");
  *ep = (OnyxEp){.struct_size = sizeof *ep, .provider = p, .release = spin_ep_release};
  *out = ep;
  return NULL;
}

static const OnyxProvider spin_provider = {.struct_size = sizeof spin_provider,
                                           .abi_major = ONYX_ABI_VERSION_MAJOR,
                                           .abi_minor = ONYX_ABI_VERSION_MINOR,
                                           .name = "cpu",
                                           .vendor = "onyx tests",
                                           .version = "1",
                                           .device_count = spin_count,
                                           .register_kernels = spin_kernels,
                                           .create_ep = spin_create};

static OnyxStatus* spin_init(const OnyxHostApi* host, const OnyxProvider** out) {
  g_host = host;
  *out = &spin_provider;
  return NULL;
}

static OnyxSessionOptions* spin_options(const Limits* lim, Log* log) {
  OnyxSessionOptions* o = options(lim, log);
  ok(onyx_session_options_add_provider_init(o, "cpu", spin_init, 1));
  return o;
}

/* Y = X + Neg(X): Neg spins. */
static OxTestModel* spin_model(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(2));
  otm_node(m, "Neg", "spin", "X", "N");
  otm_node(m, "Add", "add", "X,N", "Y");
  otm_output(m, "Y", F32, 1, DIMS(2));
  return m;
}

static OnyxStatus* run_spin(OnyxSession* s, const OnyxRunOptions* ro) {
  const char* names[] = {"X"};
  OnyxValue* in[] = {tensor(F32, 1, DIMS(2), (float[]){1, 2})};
  return run_with(s, ro, names, in, 1, "Y", NULL);
}

static void test_run_time_limit_kernel(void** state) {
  (void)state;
  OnyxSession* s = open_session(spin_model(), spin_options(&(Limits){.run_ms = 100}, NULL));
  expect(run_spin(s, NULL), ONYX_CANCELLED, "node 'spin' (Neg) on provider 'cpu'",
         "passed its time limit of 100 ms (max_run_ms)", NULL);
  onyx_session_release(s);
}

typedef struct Terminator {
  OnyxRunOptions* ro;
} Terminator;

static void* terminate_later(void* arg) {
  struct timespec ts = {0, 50 * 1000000};
  nanosleep(&ts, NULL);
  onyx_run_options_terminate(((Terminator*)arg)->ro);
  return NULL;
}

static void test_terminate_reaches_kernel(void** state) {
  (void)state;
  OnyxSession* s = open_session(spin_model(), spin_options(NULL, NULL));
  OnyxRunOptions* ro = NULL;
  ok(onyx_run_options_create(&ro));
  ok(onyx_run_options_set_tag(ro, "spinner"));
  Terminator t = {ro};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, terminate_later, &t), 0);
  expect(run_spin(s, ro), ONYX_CANCELLED, "node 'spin' (Neg)", "the run 'spinner' was cancelled",
         NULL);
  pthread_join(th, NULL);
  onyx_run_options_release(ro);
  onyx_session_release(s);
}

/* terminate from another thread ends a host Loop of INT64_MAX trips. */
static void test_terminate_ends_loop(void** state) {
  (void)state;
  OnyxSession* s = open_session(idle_loop(), options(NULL, NULL));
  OnyxRunOptions* ro = NULL;
  ok(onyx_run_options_create(&ro));
  ok(onyx_run_options_set_tag(ro, "looper"));
  Terminator t = {ro};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, terminate_later, &t), 0);
  float y = 0;
  expect(run_idle_loop(s, ro, INT64_MAX, &y), ONYX_CANCELLED, "node 'loop' (Loop)",
         "the run 'looper' was cancelled", NULL);
  pthread_join(th, NULL);
  onyx_run_options_release(ro);
  onyx_session_release(s);
}

/* --- session creation: the budgets of constant folding ----------------------------------- */

/* Neg(C) of a constant C is folded at creation: its kernel spins until the
 * fold's deadline stops it; the node stays a node, so the run spins too,
 * until max_run_ms. */
static void test_fold_time_budget(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(2));
  otm_initializer(m, "C", F32, 1, DIMS(2), (float[]){1, 2});
  otm_node(m, "Neg", "spin", "C", "N");
  otm_node(m, "Add", "add", "X,N", "Y");
  otm_output(m, "Y", F32, 1, DIMS(2));
  Log log = {.lock = PTHREAD_MUTEX_INITIALIZER};
  double t0 = now_s();
  OnyxSession* s = open_session(m, spin_options(&(Limits){.fold_ms = 100, .run_ms = 100}, &log));
  assert_true(now_s() - t0 < 60);
  if (!strstr(log.text, "constant folding stopped") || !strstr(log.text, "100 ms (max_fold_ms)"))
    fail_msg("no log of the spent fold budget: %s", log.text);
  char* text = NULL;
  ok(onyx_session_explain(s, &text));
  assert_non_null(strstr(text, "spin")); /* the node is still there */
  onyx_free(text);
  expect(run_spin(s, NULL), ONYX_CANCELLED, "node 'spin' (Neg)", "max_run_ms", NULL);
  onyx_session_release(s);
}

/* Range(0, 2^40) on constants: not folded (its output would be over the
 * fold size budget); the run then refuses it by max_tensor_bytes. */
static void test_fold_size_budget(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_initializer(m, "start", I64, 0, kScalar, (int64_t[]){0});
  otm_initializer(m, "limit", I64, 0, kScalar, (int64_t[]){(int64_t)1 << 40});
  otm_initializer(m, "delta", I64, 0, kScalar, (int64_t[]){1});
  otm_input(m, "X", I64, 1, DIMS(1));
  otm_node(m, "Range", "range", "start,limit,delta", "R");
  otm_node(m, "Add", "add", "R,X", "Y");
  otm_output(m, "Y", I64, 1, DIMS(-1));
  Log log = {.lock = PTHREAD_MUTEX_INITIALIZER};
  double t0 = now_s();
  OnyxSession* s = open_session(m, options(&(Limits){.tensor = 1 << 20}, &log));
  assert_true(now_s() - t0 < 60);
  if (!strstr(log.text, "constant folding left 1 node unfolded"))
    fail_msg("no log of the unfolded node: %s", log.text);
  const char* names[] = {"X"};
  OnyxValue* in[] = {tensor(I64, 1, DIMS(1), (int64_t[]){1})};
  OnyxStatus* st = run_with(s, NULL, names, in, 1, "Y", NULL);
  assert_non_null(st);
  assert_true(onyx_status_code(st) == ONYX_LIMIT_EXCEEDED ||
              onyx_status_code(st) == ONYX_INVALID_ARGUMENT);
  assert_non_null(strstr(onyx_status_message(st), "range"));
  onyx_status_release(st);
  onyx_session_release(s);
}

/* --- subgraph output types --------------------------------------------------------------- */

/* If whose then_branch yields int64 where the node (and else_branch) yield
 * float. */
static void test_if_branch_type(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_input(m, "C", BOOL, 0, kScalar);
  otm_input(m, "X", F32, 1, DIMS(2));
  otm_begin_graph(m, "then");
  otm_attr_int(otm_node(m, "Cast", "to_int", "X", "T"), "to", I64);
  otm_output(m, "T", I64, 1, DIMS(2));
  Onnx__GraphProto* then_g = otm_end_graph(m);
  otm_begin_graph(m, "else");
  otm_node(m, "Neg", "neg", "X", "E");
  otm_output(m, "E", F32, 1, DIMS(2));
  Onnx__GraphProto* else_g = otm_end_graph(m);
  OxTestNode* n = otm_node(m, "If", "if0", "C", "Y");
  otm_attr_graph(n, "then_branch", then_g);
  otm_attr_graph(n, "else_branch", else_g);
  otm_output(m, "Y", F32, 1, DIMS(2));
  OnyxSession* s = NULL;
  expect(create(m, options(NULL, NULL), &s), ONYX_INVALID_MODEL, "node 'if0' (If)",
         "subgraph 'then_branch' output 0 ('T') has element type int64",
         "the node's output 0 ('Y') is float", NULL);
  assert_null(s);
}

/* Loop whose body turns its float carried value into int64. */
static void test_loop_body_type(void** state) {
  (void)state;
  OxTestModel* m = otm_new(13);
  otm_input(m, "M", I64, 0, kScalar);
  otm_input(m, "A", F32, 1, DIMS(1));
  otm_begin_graph(m, "body");
  otm_input(m, "i", I64, 0, kScalar);
  otm_input(m, "cond", BOOL, 0, kScalar);
  otm_input(m, "a", F32, 1, DIMS(1));
  otm_node(m, "Identity", "keep", "cond", "cond_out");
  otm_attr_int(otm_node(m, "Cast", "to_int", "a", "a_out"), "to", I64);
  otm_output(m, "cond_out", BOOL, 0, kScalar);
  otm_output(m, "a_out", I64, 1, DIMS(1));
  Onnx__GraphProto* body = otm_end_graph(m);
  otm_attr_graph(otm_node(m, "Loop", "loop", "M,,A", "Y"), "body", body);
  otm_output(m, "Y", F32, 1, DIMS(1));
  OnyxSession* s = NULL;
  expect(create(m, options(NULL, NULL), &s), ONYX_INVALID_MODEL, "node 'loop' (Loop)",
         "subgraph 'body' output 1 ('a_out') has element type int64",
         "loop-carried input 0 ('A') is float", NULL);
  assert_null(s);
}

/* Scan whose state output is int64 for a float state. */
static void test_scan_body_type(void** state) {
  (void)state;
  OxTestModel* m = otm_new(11);
  otm_input(m, "S0", F32, 1, DIMS(2));
  otm_input(m, "X", F32, 2, DIMS(3, 2));
  otm_begin_graph(m, "body");
  otm_input(m, "s", F32, 1, DIMS(2));
  otm_input(m, "x", F32, 1, DIMS(2));
  otm_node(m, "Add", "acc", "s,x", "s2");
  otm_attr_int(otm_node(m, "Cast", "to_int", "s2", "s3"), "to", I64);
  otm_node(m, "Identity", "out", "s2", "y");
  otm_output(m, "s3", I64, 1, DIMS(2));
  otm_output(m, "y", F32, 1, DIMS(2));
  Onnx__GraphProto* body = otm_end_graph(m);
  OxTestNode* n = otm_node(m, "Scan", "scan", "S0,X", "S,Y");
  otm_attr_graph(n, "body", body);
  otm_attr_int(n, "num_scan_inputs", 1);
  otm_output(m, "S", F32, 1, DIMS(2));
  otm_output(m, "Y", F32, 2, DIMS(3, 2));
  OnyxSession* s = NULL;
  expect(create(m, options(NULL, NULL), &s), ONYX_INVALID_MODEL, "node 'scan' (Scan)",
         "subgraph 'body' output 0 ('s3') has element type int64", "state input 0 ('S0')", NULL);
  assert_null(s);
}

/* --- pins ------------------------------------------------------------------------------------ */

static OxTestModel* if_model(void) {
  OxTestModel* m = otm_new(13);
  otm_input(m, "C", BOOL, 0, kScalar);
  otm_input(m, "X", F32, 1, DIMS(2));
  otm_begin_graph(m, "then");
  otm_node(m, "Abs", "then_abs", "X", "T");
  otm_output(m, "T", F32, 1, DIMS(2));
  Onnx__GraphProto* then_g = otm_end_graph(m);
  otm_begin_graph(m, "else");
  otm_node(m, "Neg", "else_neg", "X", "E");
  otm_output(m, "E", F32, 1, DIMS(2));
  Onnx__GraphProto* else_g = otm_end_graph(m);
  OxTestNode* n = otm_node(m, "If", "if0", "C", "Y");
  otm_attr_graph(n, "then_branch", then_g);
  otm_attr_graph(n, "else_branch", else_g);
  otm_output(m, "Y", F32, 1, DIMS(2));
  return m;
}

static OnyxStatus* create_pinned(const char* node, const char* op, Log* log) {
  OnyxSessionOptions* o = options(NULL, log);
  ok(onyx_session_options_add_pin(o, node, op, "cpu"));
  OnyxSession* s = NULL;
  OnyxStatus* st = create(if_model(), o, &s);
  onyx_session_release(s);
  return st;
}

/* A pin naming a node the model lacks, or an op type nothing knows, fails
 * creation; a known op type the model lacks (one config serving many
 * models) is a warning. */
static void test_pins_must_name_something(void** state) {
  (void)state;
  expect(create_pinned("ghost", NULL, NULL), ONYX_INVALID_CONFIG, "pin 0",
         "the model has no node named 'ghost'", "provider 'cpu'", NULL);
  expect(create_pinned(NULL, "Sigmod", NULL), ONYX_INVALID_CONFIG, "pin 0",
         "no node of op type 'Sigmod'", "no schema knows", NULL);
  Log log = {.lock = PTHREAD_MUTEX_INITIALIZER};
  ok(create_pinned(NULL, "Conv", &log));
  if (!strstr(log.text, "pin 0: the model has no node of op type 'Conv'"))
    fail_msg("no warning for the pin: %s", log.text);
  /* Nodes and op types of subgraphs count. */
  ok(create_pinned("else_neg", NULL, NULL));
  ok(create_pinned(NULL, "Abs", NULL));
}

/* --- normal models under the limits ------------------------------------------------------- */

static void test_normal_models_within_limits(void** state) {
  (void)state;
  const Limits lim = {.tensor = 1 << 20, .session = 4 << 20, .run_ms = 60000, .fold_ms = 60000};
  OnyxSession* s = open_session(idle_loop(), options(&lim, NULL));
  float y = 0;
  ok(run_idle_loop(s, NULL, 5, &y));
  assert_true(y == -1.0f); /* Neg five times */
  onyx_session_release(s);
  s = open_session(stacking_loop(), options(&lim, NULL));
  ok(run_stacking(s, 2));
  onyx_session_release(s);
  OnyxValue* out = NULL;
  ok(run_three_adds(&lim, &out));
  onyx_value_release(out);
}

/* The limits from a config file's "limits" object. */
static void test_limits_from_config(void** state) {
  (void)state;
  OnyxSessionOptions* o = options(NULL, NULL);
  static const char cfg[] = "{\"session\": {\"limits\": {\"max_session_bytes\": 10240, "
                            "\"max_run_ms\": 5000, \"max_fold_ms\": 0}}}";
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "limits.json"));
  OnyxSession* s = open_session(three_adds(), o);
  const char* names[] = {"X"};
  OnyxValue* in[] = {ones(1024)};
  expect(run_with(s, NULL, names, in, 1, "C", NULL), ONYX_LIMIT_EXCEEDED, "max_session_bytes",
         NULL);
  onyx_session_release(s);
  o = options(NULL, NULL);
  static const char bad[] = "{\"session\": {\"limits\": {\"max_run_ms\": -1}}}";
  expect(onyx_session_options_load_config_text(o, bad, strlen(bad), "bad.json"),
         ONYX_INVALID_CONFIG, "session.limits.max_run_ms", NULL);
  onyx_session_options_release(o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_concat_from_sequence_over_tensor_limit),
      cmocka_unit_test(test_loop_scan_output_over_tensor_limit),
      cmocka_unit_test(test_split_sizes_that_wrap),
      cmocka_unit_test(test_sequence_insert_grows_to_limit),
      cmocka_unit_test(test_session_bytes_kernels),
      cmocka_unit_test(test_session_bytes_before_allocation),
      cmocka_unit_test(test_session_bytes_folding),
      cmocka_unit_test(test_session_bytes_loop),
      cmocka_unit_test(test_run_time_limit_loop),
      cmocka_unit_test(test_run_time_limit_kernel),
      cmocka_unit_test(test_terminate_reaches_kernel),
      cmocka_unit_test(test_terminate_ends_loop),
      cmocka_unit_test(test_fold_time_budget),
      cmocka_unit_test(test_fold_size_budget),
      cmocka_unit_test(test_if_branch_type),
      cmocka_unit_test(test_loop_body_type),
      cmocka_unit_test(test_scan_body_type),
      cmocka_unit_test(test_pins_must_name_something),
      cmocka_unit_test(test_normal_models_within_limits),
      cmocka_unit_test(test_limits_from_config),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
