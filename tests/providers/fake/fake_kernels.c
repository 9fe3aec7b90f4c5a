/* fake_kernels.c — float32 elementwise kernels of the fake device: Add and
 * Mul with numpy broadcasting, Relu, Sigmoid, Tanh. The same op table serves
 * single-node kernels and the interpreter of compiled groups. On an
 * asynchronous stream a kernel checks its inputs, allocates its output and
 * queues the work (latency, then the computation) before returning. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fake.h"

static float op_add(float a, float b) {
  return a + b;
}
static float op_mul(float a, float b) {
  return a * b;
}
static float op_relu(float x) {
  return x > 0.0f ? x : 0.0f;
}
static float op_sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}
static float op_tanh(float x) {
  return tanhf(x);
}

/* `since`: Add/Mul broadcast numpy-style only from opset 7 (earlier versions
 * had a "broadcast" attribute this device does not implement); the unary ops
 * kept their meaning since opset 1. */
static const FakeOp fake_ops[] = {
    {"Add", 7, NULL, op_add},         {"Mul", 7, NULL, op_mul},   {"Relu", 1, op_relu, NULL},
    {"Sigmoid", 1, op_sigmoid, NULL}, {"Tanh", 1, op_tanh, NULL},
};

const FakeOp* fake_op_find(const char* name) {
  for (size_t i = 0; i < sizeof fake_ops / sizeof fake_ops[0]; i++)
    if (strcmp(fake_ops[i].name, name) == 0) return &fake_ops[i];
  return NULL;
}

/* --- shapes and broadcasting ------------------------------------------------------- */

static OnyxStatus* broadcast_shape(const int64_t* const dims[2], const size_t rank[2], int64_t* out,
                                   size_t* out_rank, const char* node) {
  size_t r = rank[0] > rank[1] ? rank[0] : rank[1];
  if (r > FAKE_MAX_RANK)
    return fake_host->status_create(ONYX_NOT_IMPLEMENTED,
                                    "fake: node '%s': rank %zu is above the fake device's %d", node,
                                    r, FAKE_MAX_RANK);
  for (size_t j = 0; j < r; j++) {
    /* Align trailing axes; a missing leading axis acts as 1. */
    int64_t a = j + rank[0] >= r ? dims[0][j + rank[0] - r] : 1;
    int64_t b = j + rank[1] >= r ? dims[1][j + rank[1] - r] : 1;
    if (a != b && a != 1 && b != 1)
      return fake_host->status_create(ONYX_INVALID_ARGUMENT,
                                      "fake: node '%s': shapes do not broadcast at axis %zu "
                                      "(%lld vs %lld)",
                                      node, j, (long long)a, (long long)b);
    out[j] = a == 1 ? b : a;
  }
  *out_rank = r;
  return NULL;
}

OnyxStatus* fake_op_shape(const FakeOp* op, const int64_t* const dims[2], const size_t rank[2],
                          int64_t* out, size_t* out_rank, const char* node) {
  if (op->binary) return broadcast_shape(dims, rank, out, out_rank, node);
  if (rank[0] > FAKE_MAX_RANK)
    return fake_host->status_create(ONYX_NOT_IMPLEMENTED,
                                    "fake: node '%s': rank %zu is above the fake device's %d", node,
                                    rank[0], FAKE_MAX_RANK);
  memcpy(out, dims[0], rank[0] * sizeof *out);
  *out_rank = rank[0];
  return NULL;
}

static size_t elem_count(const int64_t* dims, size_t rank) {
  size_t n = 1;
  for (size_t i = 0; i < rank; i++)
    n *= (size_t)dims[i];
  return n;
}

/* Element strides of an input read through the output's index space: 0 on
 * broadcast axes, so one index walk serves every shape pair. */
static void broadcast_strides(const int64_t* dims, size_t rank, size_t out_rank, int64_t* strides) {
  int64_t s = 1;
  for (size_t j = out_rank; j-- > 0;) {
    if (j + rank < out_rank || dims[j + rank - out_rank] == 1) {
      strides[j] = 0;
    } else {
      strides[j] = s;
      s *= dims[j + rank - out_rank];
    }
  }
}

static void apply_broadcast(FakeBinaryFn fn, const float* const in[2], const int64_t* const dims[2],
                            const size_t rank[2], float* out, const int64_t* out_dims, size_t r) {
  int64_t sa[FAKE_MAX_RANK], sb[FAKE_MAX_RANK], idx[FAKE_MAX_RANK] = {0};
  broadcast_strides(dims[0], rank[0], r, sa);
  broadcast_strides(dims[1], rank[1], r, sb);
  int64_t ia = 0, ib = 0;
  for (size_t i = 0, n = elem_count(out_dims, r); i < n; i++) {
    out[i] = fn(in[0][ia], in[1][ib]);
    for (size_t j = r; j-- > 0;) { /* odometer step over the output index */
      idx[j]++;
      ia += sa[j];
      ib += sb[j];
      if (idx[j] < out_dims[j]) break;
      ia -= sa[j] * out_dims[j];
      ib -= sb[j] * out_dims[j];
      idx[j] = 0;
    }
  }
}

void fake_op_apply(const FakeOp* op, const float* const in[2], const int64_t* const dims[2],
                   const size_t rank[2], float* out, const int64_t* out_dims, size_t out_rank) {
  size_t n = elem_count(out_dims, out_rank);
  if (op->unary) {
    for (size_t i = 0; i < n; i++)
      out[i] = op->unary(in[0][i]);
  } else if (rank[0] == rank[1] && memcmp(dims[0], dims[1], rank[0] * sizeof(int64_t)) == 0) {
    for (size_t i = 0; i < n; i++)
      out[i] = op->binary(in[0][i], in[1][i]);
  } else {
    apply_broadcast(op->binary, in, dims, rank, out, out_dims, out_rank);
  }
}

OnyxStatus* fake_injected_compute_failure(FakeEp* f, const char* who) {
  return fake_host->status_create(ONYX_RUNTIME_ERROR,
                                  "fake: %s: injected kernel failure (option fail=compute)", who);
}

/* --- single-node kernels ------------------------------------------------------------- */

/* One kernel's work, self-contained: the host may free the tensor headers
 * (not the memory) once compute returns. */
typedef struct FakeJob {
  FakeEp* f;
  const FakeOp* op;
  const float* in[2];
  int64_t dims[2][FAKE_MAX_RANK];
  size_t rank[2];
  float* out;
  int64_t out_dims[FAKE_MAX_RANK];
  size_t out_rank;
  char who[256];
} FakeJob;

static OnyxStatus* job_run(void* arg) {
  FakeJob* j = arg;
  fake_sleep_ms(j->f->latency_ms);
  if (j->f->fail == FAKE_FAIL_QUEUED)
    return fake_host->status_create(ONYX_RUNTIME_ERROR,
                                    "fake: %s: injected failure of queued work (option "
                                    "fail=queued)",
                                    j->who);
  const int64_t* const dims[2] = {j->dims[0], j->dims[1]};
  fake_op_apply(j->op, j->in, dims, j->rank, j->out, j->out_dims, j->out_rank);
  atomic_fetch_add(&j->f->stats.kernels_run, 1);
  return NULL;
}

typedef struct FakeKernel {
  FakeEp* f;
  const FakeOp* op;
} FakeKernel;

static OnyxStatus* kernel_create(OnyxEp* ep, const OnyxNode* node, void* user_data, void** state) {
  FakeKernel* k = malloc(sizeof *k);
  if (!k)
    return fake_host->status_create(ONYX_OUT_OF_MEMORY, "fake: node '%s': out of memory",
                                    fake_host->node_name(node));
  *k = (FakeKernel){fake_ep(ep), user_data};
  *state = k;
  return NULL;
}

static OnyxStatus* kernel_input(FakeKernel* k, OnyxKernelContext* ctx, const OnyxNode* node,
                                const char* who, size_t i, const OnyxTensor** out) {
  const OnyxHostApi* H = fake_host;
  const OnyxValueInfo* v = H->node_input(node, i);
  char what[160];
  snprintf(what, sizeof what, "%zu ('%s')", i, v ? H->value_name(v) : "?");
  const OnyxTensor* t = H->ctx_input(ctx, i);
  if (!t)
    return H->status_create(ONYX_INVALID_ARGUMENT, "fake: %s: input %s is missing", who, what);
  if (H->tensor_elem_type(t) != ONYX_ELEM_FLOAT32)
    return H->status_create(ONYX_INVALID_ARGUMENT, "fake: %s: input %s is not float32", who, what);
  *out = t;
  return fake_check_input(k->f, t, what, who);
}

static OnyxStatus* kernel_compute(void* state, OnyxKernelContext* ctx) {
  const OnyxHostApi* H = fake_host;
  FakeKernel* k = state;
  const OnyxNode* node = H->ctx_node(ctx);
  if (!node)
    return H->status_create(ONYX_INVALID_ARGUMENT, "fake: %s kernel called without a node",
                            k->op->name);
  const char* name = H->node_name(node);
  char who[256];
  snprintf(who, sizeof who, "node '%s' (%s)", name, k->op->name);
  if (k->f->fail == FAKE_FAIL_COMPUTE) return fake_injected_compute_failure(k->f, who);
  size_t n_in = k->op->binary ? 2 : 1;
  const OnyxTensor* t[2] = {NULL, NULL};
  const float* in[2] = {NULL, NULL};
  const int64_t* dims[2] = {NULL, NULL};
  size_t rank[2] = {0, 0};
  for (size_t i = 0; i < n_in; i++) {
    OnyxStatus* st = kernel_input(k, ctx, node, who, i, &t[i]);
    if (st) return st;
    in[i] = H->tensor_data(t[i]);
    dims[i] = H->tensor_dims(t[i]);
    rank[i] = H->tensor_rank(t[i]);
  }
  FakeJob job = {.f = k->f, .op = k->op};
  OnyxTensor* y = NULL;
  OnyxStatus* st = fake_op_shape(k->op, dims, rank, job.out_dims, &job.out_rank, name);
  if (!st) st = H->ctx_output(ctx, 0, job.out_dims, job.out_rank, &y);
  if (st) return st;
  for (size_t i = 0; i < n_in; i++) {
    job.in[i] = in[i];
    job.rank[i] = rank[i];
    memcpy(job.dims[i], dims[i], rank[i] * sizeof *dims[i]);
  }
  job.out = H->tensor_mutable_data(y);
  snprintf(job.who, sizeof job.who, "%s", who);
  OnyxStream* stream = H->ctx_stream(ctx);
  if (!fake_stream_is_async(stream)) return job_run(&job);
  FakeJob* queued = malloc(sizeof *queued);
  if (!queued)
    return H->status_create(ONYX_OUT_OF_MEMORY, "fake: %s: out of memory queuing work", who);
  *queued = job;
  return fake_stream_enqueue(stream, job_run, free, queued);
}

OnyxStatus* fake_register_kernels(const OnyxProvider* p, OnyxKernelRegistry* r) {
  static const int32_t f32[] = {ONYX_ELEM_FLOAT32};
  static const OnyxTypeConstraint T[] = {{"T", f32, 1}};
  for (size_t i = 0; i < sizeof fake_ops / sizeof fake_ops[0]; i++) {
    OnyxKernelDef d = {.struct_size = sizeof d,
                       .domain = "",
                       .op_type = fake_ops[i].name,
                       .since_version = fake_ops[i].since,
                       .end_version = ONYX_OPSET_LATEST,
                       .type_constraints = T,
                       .type_constraint_count = 1,
                       .create = kernel_create,
                       .compute = kernel_compute,
                       .release = free,
                       .user_data = (void*)&fake_ops[i]};
    OnyxStatus* st = fake_host->register_kernel(r, &d);
    if (st) return st;
  }
  return NULL;
}
