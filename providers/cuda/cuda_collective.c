/* cuda_collective.c — the com.onyx.collective ops (schemas/schemas_collective.c)
 * on NCCL, for tensors in the CUDA provider's device memory.
 *
 * libnccl.so.2 is opened with dlopen when the first collective node of a
 * session is created, so the provider loads and runs without NCCL; missing,
 * that node's creation fails naming the library. One communicator per EP
 * (device), shared by the EP's collective kernels and destroyed with the
 * last of them. Bootstrap, as in ONNX Runtime: rank 0 makes the
 * ncclUniqueId, the host's process group broadcasts it (ONYX_EXT_COLLECTIVES,
 * onyx_ep.h), every rank calls ncclCommInitRankConfig. The broadcast runs on
 * MPI, or, in a group launched without mpirun with backend "store", through
 * the TCP store at MASTER_ADDR:MASTER_PORT (rank 0 sets a key, the others
 * wait for it), so NCCL then needs no MPI at all. Without a process group
 * (group_size 1) the communicator has one rank.
 *
 * The communicator is non-blocking (ncclConfig_t.blocking = 0): every call
 * returns at once, and the kernel polls ncclCommGetAsyncError, and an event
 * recorded behind the collective, against the process group's timeout and
 * the run's cancellation; on a timeout, an NCCL error or a cancellation it
 * calls ncclCommAbort, and every later collective of that EP fails at once.
 * The kernel thus returns when its collective has completed on the device
 * (the host thread waits; other streams keep running).
 *
 * Layouts follow cpu_collective.c: an AllGather along an inner axis gathers
 * into a device scratch buffer [rank][outer][chunk] and interleaves it with
 * cudaMemcpy2DAsync; ReduceScatter and AllToAll along an inner axis pack
 * X's blocks the same way first. */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_vendor.h"

#define COLLECTIVE "com.onyx.collective"
#define NCCL_LIB   "libnccl.so.2"

/* --- libnccl, loaded at first use ----------------------------------------------------- */

typedef struct NcclApi {
  ncclResult_t (*get_unique_id)(ncclUniqueId*);
  ncclResult_t (*comm_init_rank_config)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*);
  ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t*);
  ncclResult_t (*comm_abort)(ncclComm_t);
  ncclResult_t (*comm_destroy)(ncclComm_t);
  const char* (*get_error_string)(ncclResult_t);
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t);
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*reduce_scatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                 ncclComm_t, cudaStream_t);
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*group_start)(void);
  ncclResult_t (*group_end)(void);
} NcclApi;

static NcclApi g_nccl;
static char g_nccl_error[512];
static pthread_once_t g_nccl_once = PTHREAD_ONCE_INIT;

static void nccl_load(void) {
  void* lib = dlopen(NCCL_LIB, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    snprintf(g_nccl_error, sizeof g_nccl_error,
             "cannot load %s (%s): NCCL comes with the CUDA toolkit's libraries "
             "(/usr/local/cuda/lib64) or NVIDIA's libnccl2 package; put its folder on "
             "LD_LIBRARY_PATH",
             NCCL_LIB, why ? why : "unknown dlopen error");
    return;
  }
  struct {
    const char* name;
    void** slot;
  } syms[] = {
      {"ncclGetUniqueId", (void**)&g_nccl.get_unique_id},
      {"ncclCommInitRankConfig", (void**)&g_nccl.comm_init_rank_config},
      {"ncclCommGetAsyncError", (void**)&g_nccl.comm_get_async_error},
      {"ncclCommAbort", (void**)&g_nccl.comm_abort},
      {"ncclCommDestroy", (void**)&g_nccl.comm_destroy},
      {"ncclGetErrorString", (void**)&g_nccl.get_error_string},
      {"ncclAllReduce", (void**)&g_nccl.all_reduce},
      {"ncclAllGather", (void**)&g_nccl.all_gather},
      {"ncclReduceScatter", (void**)&g_nccl.reduce_scatter},
      {"ncclBroadcast", (void**)&g_nccl.broadcast},
      {"ncclSend", (void**)&g_nccl.send},
      {"ncclRecv", (void**)&g_nccl.recv},
      {"ncclGroupStart", (void**)&g_nccl.group_start},
      {"ncclGroupEnd", (void**)&g_nccl.group_end},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void* f = dlsym(lib, syms[i].name);
    if (!f) {
      snprintf(g_nccl_error, sizeof g_nccl_error,
               "%s lacks %s (NCCL 2.14 or newer is needed for non-blocking communicators)",
               NCCL_LIB, syms[i].name);
      memset(&g_nccl, 0, sizeof g_nccl);
      dlclose(lib);
      return;
    }
    memcpy(syms[i].slot, &f, sizeof f);
  }
  /* Kept open for the process's lifetime: communicators may outlive a session. */
}

static const char* nccl_text(ncclResult_t r) {
  return g_nccl.get_error_string ? g_nccl.get_error_string(r) : "unknown NCCL error";
}

/* --- One communicator per EP ------------------------------------------------------------- */

typedef struct NcclComm {
  GpuEp* ep;
  ncclComm_t comm;
  int rank, size;
  uint32_t timeout_ms;
  int refs;
  bool broken;          /* aborted: every later collective fails at once */
  char why[256];        /* what broke it */
  pthread_mutex_t lock; /* one collective at a time on the communicator */
  struct NcclComm* next;
} NcclComm;

static pthread_mutex_t g_comms_lock = PTHREAD_MUTEX_INITIALIZER;
static NcclComm* g_comms;

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void nap(void) {
  struct timespec ts = {0, 100000};
  nanosleep(&ts, NULL);
}

/* Waits until the communicator's pending call leaves ncclInProgress, bounded
 * by timeout_ms from `start` and by `stop`; aborts it otherwise. */
static OnyxStatus* nccl_settle(const OnyxNode* node, NcclComm* c, uint64_t start, OnyxStopFn stop,
                               const OnyxKernelContext* ctx, const char* what) {
  for (;;) {
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = g_nccl.comm_get_async_error(c->comm, &async);
    if (r == ncclSuccess && async == ncclSuccess) return NULL;
    const bool stopped = stop && ctx && stop(ctx);
    const bool late = now_ms() - start >= c->timeout_ms;
    if (r != ncclSuccess || (async != ncclInProgress && async != ncclSuccess) || stopped || late) {
      snprintf(c->why, sizeof c->why, "%s on rank %d of %d: %s", what, c->rank, c->size,
               r != ncclSuccess                                  ? nccl_text(r)
               : async != ncclInProgress && async != ncclSuccess ? nccl_text(async)
               : stopped                                         ? "cancelled"
                                                                 : "timed out");
      g_nccl.comm_abort(c->comm);
      c->broken = true;
      return gpu_node_error(node, stopped ? ONYX_CANCELLED : ONYX_RUNTIME_ERROR,
                            "%s%s (timeout %u ms); the NCCL communicator is aborted", c->why,
                            late && !stopped ? ": a rank stalled or died" : "",
                            (unsigned)c->timeout_ms);
    }
    nap();
  }
}

/* The EP's communicator, made on first use (collective across the ranks). */
static OnyxStatus* nccl_acquire(GpuEp* g, const OnyxNode* node, NcclComm** out) {
  *out = NULL;
  pthread_once(&g_nccl_once, nccl_load);
  if (!g_nccl.get_unique_id) return gpu_node_error(node, ONYX_NOT_FOUND, "%s", g_nccl_error);
  pthread_mutex_lock(&g_comms_lock);
  for (NcclComm* c = g_comms; c; c = c->next)
    if (c->ep == g) {
      c->refs++;
      pthread_mutex_unlock(&g_comms_lock);
      *out = c;
      return NULL;
    }
  const OnyxCollectivesExt* ext = g->collectives;
  NcclComm* c = calloc(1, sizeof *c);
  if (!c) {
    pthread_mutex_unlock(&g_comms_lock);
    return gpu_node_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  }
  c->ep = g;
  c->rank = ext ? ext->rank : 0;
  c->size = ext ? ext->size : 1;
  c->timeout_ms = ext ? ext->timeout_ms : 300000u;
  pthread_mutex_init(&c->lock, NULL);
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  OnyxStatus* st = NULL;
  if (c->rank == 0) {
    ncclResult_t r = g_nccl.get_unique_id(&id);
    if (r != ncclSuccess)
      st = gpu_node_error(node, ONYX_RUNTIME_ERROR, "ncclGetUniqueId: %s", nccl_text(r));
  }
  /* Rank 0's id to every rank; a failure on rank 0 still broadcasts (zeros),
   * so the others fail in ncclCommInitRankConfig instead of waiting. */
  if (ext) {
    OnyxStatus* bst = ext->broadcast(ext->group, &id, sizeof id, 0, NULL, NULL);
    if (bst && !st)
      st = bst;
    else if (bst)
      gpu_host->status_release(bst);
  }
  int err = st ? 0 : gpurt_set_device(g->device);
  if (err) st = gpu_launch_status(node, err, "selecting the device");
  if (!st) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    uint64_t start = now_ms();
    ncclResult_t r = g_nccl.comm_init_rank_config(&c->comm, c->size, id, c->rank, &config);
    if (r != ncclSuccess && r != ncclInProgress)
      st = gpu_node_error(node, ONYX_RUNTIME_ERROR, "ncclCommInitRankConfig (rank %d of %d): %s",
                          c->rank, c->size, nccl_text(r));
    else
      st = nccl_settle(node, c, start, NULL, NULL, "ncclCommInitRankConfig");
    if (st && c->comm && !c->broken) g_nccl.comm_abort(c->comm);
  }
  if (st) {
    pthread_mutex_unlock(&g_comms_lock);
    pthread_mutex_destroy(&c->lock);
    free(c);
    return st;
  }
  c->refs = 1;
  c->next = g_comms;
  g_comms = c;
  pthread_mutex_unlock(&g_comms_lock);
  *out = c;
  return NULL;
}

static void nccl_release(NcclComm* c) {
  if (!c) return;
  pthread_mutex_lock(&g_comms_lock);
  if (--c->refs > 0) {
    pthread_mutex_unlock(&g_comms_lock);
    return;
  }
  for (NcclComm** p = &g_comms; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      break;
    }
  pthread_mutex_unlock(&g_comms_lock);
  if (!c->broken) {
    gpurt_set_device(c->ep->device);
    g_nccl.comm_destroy(c->comm);
  }
  pthread_mutex_destroy(&c->lock);
  free(c);
}

/* --- Kernels ---------------------------------------------------------------------------- */

typedef enum CollKind {
  COLL_ALL_REDUCE,
  COLL_ALL_GATHER,
  COLL_REDUCE_SCATTER,
  COLL_BROADCAST,
  COLL_ALL_TO_ALL,
} CollKind;

typedef struct CudaColl {
  GpuKernel k; /* first: gpu_kernel_begin takes it */
  CollKind kind;
  NcclComm* comm;
  int64_t group_size, axis;
  int32_t root;
  ncclRedOp_t red;
} CudaColl;

static bool nccl_red(const char* s, ncclRedOp_t* out) {
  if (!strcmp(s, "sum"))
    *out = ncclSum;
  else if (!strcmp(s, "avg"))
    *out = ncclAvg;
  else if (!strcmp(s, "max"))
    *out = ncclMax;
  else if (!strcmp(s, "min"))
    *out = ncclMin;
  else
    return false;
  return true;
}

/* NCCL's type for a reduction; false where NCCL has none (16-bit integers, bool). */
static bool nccl_type(int32_t t, ncclDataType_t* out) {
  switch (t) {
  case ONYX_ELEM_FLOAT32:
    *out = ncclFloat32;
    return true;
  case ONYX_ELEM_FLOAT64:
    *out = ncclFloat64;
    return true;
  case ONYX_ELEM_FLOAT16:
    *out = ncclFloat16;
    return true;
  case ONYX_ELEM_BFLOAT16:
    *out = ncclBfloat16;
    return true;
  case ONYX_ELEM_INT8:
    *out = ncclInt8;
    return true;
  case ONYX_ELEM_UINT8:
    *out = ncclUint8;
    return true;
  case ONYX_ELEM_INT32:
    *out = ncclInt32;
    return true;
  case ONYX_ELEM_UINT32:
    *out = ncclUint32;
    return true;
  case ONYX_ELEM_INT64:
    *out = ncclInt64;
    return true;
  case ONYX_ELEM_UINT64:
    *out = ncclUint64;
    return true;
  default:
    return false;
  }
}

static OnyxStatus* coll_create(OnyxEp* ep, const OnyxNode* node, void* user, void** state) {
  *state = NULL;
  const OnyxHostApi* h = gpu_host;
  GpuEp* g = gpu_ep(ep);
  CudaColl* s = calloc(1, sizeof *s);
  if (!s) return gpu_node_error(node, ONYX_OUT_OF_MEMORY, "out of memory");
  s->k.ep = g;
  s->k.node = node;
  s->kind = (CollKind)(intptr_t)user;
  s->group_size = h->node_attr_int(node, "group_size", 0);
  s->axis = h->node_attr_int(node, "axis", 0);
  s->root = (int32_t)h->node_attr_int(node, "root", 0);
  size_t len = 0;
  const char* red = h->node_attr_string(node, "reduce", &len);
  const int ranks = g->collectives ? g->collectives->size : 1;
  OnyxStatus* st = NULL;
  if (!nccl_red(red ? red : "sum", &s->red))
    st = gpu_node_error(node, ONYX_INVALID_MODEL, "reduce '%s' is not one of sum, avg, max, min",
                        red ? red : "");
  else if (s->group_size != ranks)
    st = gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                        "group_size is %lld but the session's process group has %d ranks%s",
                        (long long)s->group_size, ranks,
                        g->collectives ? "" : " (no process group: onyx_distributed.h)");
  if (!st) st = nccl_acquire(g, node, &s->comm);
  if (st) {
    free(s);
    return st;
  }
  *state = s;
  return NULL;
}

static void coll_release(void* state) {
  CudaColl* s = state;
  if (!s) return;
  nccl_release(s->comm);
  free(s);
}

/* dst[j][i][chunk] = src[i][j][chunk] for i < a, j < b, on the stream. */
static int dev_transpose(char* dst, const char* src, size_t a, size_t b, size_t chunk,
                         cudaStream_t stream) {
  for (size_t i = 0; i < a; i++) {
    cudaError_t e = cudaMemcpy2DAsync(dst + i * chunk, a * chunk, src + i * b * chunk, chunk, chunk,
                                      b, cudaMemcpyDeviceToDevice, stream);
    if (e != cudaSuccess) return (int)e;
  }
  return 0;
}

/* The host's cancellation poll, when its table has one (ABI 1.1). */
static OnyxStopFn coll_stop_fn(void) {
  const OnyxHostApi* h = gpu_host;
  if (h->struct_size < offsetof(OnyxHostApi, ctx_should_stop) + sizeof h->ctx_should_stop)
    return NULL;
  return h->ctx_should_stop;
}

/* Waits, bounded by the timeout and watching the communicator's async
 * error, until the call left ncclInProgress and the work queued on `stream`
 * so far has completed (an event recorded behind it). */
static OnyxStatus* coll_wait(CudaColl* s, OnyxKernelContext* ctx, cudaStream_t stream,
                             uint64_t start, const char* what) {
  NcclComm* c = s->comm;
  const OnyxNode* node = s->k.node;
  OnyxStopFn stop = coll_stop_fn();
  OnyxStatus* st = nccl_settle(node, c, start, stop, ctx, what);
  if (st) return st;
  cudaEvent_t ev;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(ev, stream);
  if (e != cudaSuccess) return gpu_launch_status(node, (int)e, "recording the collective's event");
  for (;;) {
    e = cudaEventQuery(ev);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady) {
      cudaEventDestroy(ev);
      return gpu_launch_status(node, (int)e, what);
    }
    st = nccl_settle(node, c, start, stop, ctx, what);
    if (!st && now_ms() - start >= c->timeout_ms) {
      snprintf(c->why, sizeof c->why, "%s on rank %d of %d: timed out", what, c->rank, c->size);
      g_nccl.comm_abort(c->comm);
      c->broken = true;
      st = gpu_node_error(node, ONYX_RUNTIME_ERROR,
                          "%s: a rank stalled or died (timeout %u ms); the NCCL communicator is "
                          "aborted",
                          c->why, (unsigned)c->timeout_ms);
    }
    if (st) {
      cudaEventDestroy(ev);
      return st;
    }
    nap();
  }
  cudaEventDestroy(ev);
  return NULL;
}

static OnyxStatus* coll_nccl(const OnyxNode* node, ncclResult_t r, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return NULL;
  return gpu_node_error(node, ONYX_RUNTIME_ERROR, "%s: %s", what, nccl_text(r));
}

static OnyxStatus* coll_run(CudaColl* s, OnyxKernelContext* ctx, cudaStream_t stream,
                            void** scratch) {
  const OnyxHostApi* h = gpu_host;
  const OnyxNode* node = s->k.node;
  NcclComm* c = s->comm;
  const OnyxTensor* x = h->ctx_input(ctx, 0);
  const int32_t type = h->tensor_elem_type(x);
  const size_t rank = h->tensor_rank(x);
  const size_t count = h->tensor_elem_count(x);
  const size_t bytes = h->tensor_byte_size(x);
  const size_t n = (size_t)s->group_size;
  int64_t dims[GPU_MAX_RANK];
  if (rank > GPU_MAX_RANK)
    return gpu_node_error(node, ONYX_NOT_IMPLEMENTED, "rank %zu is above %d", rank, GPU_MAX_RANK);
  memcpy(dims, h->tensor_dims(x), rank * sizeof *dims);
  ncclDataType_t dt;
  const bool typed = nccl_type(type, &dt);
  if (!typed && (s->kind == COLL_ALL_REDUCE || s->kind == COLL_REDUCE_SCATTER))
    return gpu_node_error(node, ONYX_NOT_IMPLEMENTED, "NCCL cannot reduce element type %d",
                          (int)type);
  /* Byte-moving ops on a type NCCL lacks move bytes. */
  const size_t es = count ? bytes / count : 1;
  const size_t unit = typed ? 1 : es; /* NCCL elements per tensor element */
  if (!typed) dt = ncclUint8;
  size_t axis = 0, outer = 1, rest = 1;
  if (s->kind == COLL_ALL_GATHER || s->kind == COLL_REDUCE_SCATTER || s->kind == COLL_ALL_TO_ALL) {
    int64_t a = s->axis < 0 ? s->axis + (int64_t)rank : s->axis;
    if (rank == 0 || a < 0 || a >= (int64_t)rank)
      return gpu_node_error(node, ONYX_INVALID_ARGUMENT, "axis %lld is out of range for rank %zu",
                            (long long)s->axis, rank);
    axis = (size_t)a;
    if (s->kind != COLL_ALL_GATHER && dims[axis] % s->group_size)
      return gpu_node_error(node, ONYX_INVALID_ARGUMENT,
                            "dimension %zu of X (%lld) does not split into %lld blocks", axis,
                            (long long)dims[axis], (long long)s->group_size);
    for (size_t i = 0; i < axis; i++)
      outer *= (size_t)dims[i];
    for (size_t i = axis + 1; i < rank; i++)
      rest *= (size_t)dims[i];
  }
  const int64_t x_axis = rank ? dims[axis] : 0;
  if (s->kind == COLL_ALL_GATHER) dims[axis] *= s->group_size;
  if (s->kind == COLL_REDUCE_SCATTER) dims[axis] /= s->group_size;
  OnyxTensor* y = NULL;
  OnyxStatus* st = h->ctx_output(ctx, 0, dims, rank, &y);
  if (st) return st;
  char* yp = h->tensor_mutable_data(y);
  const char* xp = h->tensor_data(x);
  if (!count) return NULL;
  const uint64_t start = now_ms();
  ncclResult_t r = ncclSuccess;
  const char* what = "";
  switch (s->kind) {
  case COLL_ALL_REDUCE:
    what = "ncclAllReduce";
    r = g_nccl.all_reduce(xp, yp, count, dt, s->red, c->comm, stream);
    break;
  case COLL_BROADCAST:
    what = "ncclBroadcast";
    r = g_nccl.broadcast(xp, yp, count * unit, dt, s->root, c->comm, stream);
    break;
  case COLL_ALL_GATHER: {
    what = "ncclAllGather";
    char* recv = yp;
    if (outer > 1) {
      cudaError_t e = cudaMallocAsync(scratch, bytes * n, stream);
      if (e != cudaSuccess) return gpu_launch_status(node, (int)e, "scratch for AllGather");
      recv = *scratch;
    }
    r = g_nccl.all_gather(xp, recv, count * unit, dt, c->comm, stream);
    if (outer > 1) {
      /* A non-blocking communicator's call is on the stream only once it
       * left ncclInProgress: settle before queuing the copies behind it. */
      st = coll_nccl(node, r, what);
      if (!st) st = nccl_settle(node, c, start, coll_stop_fn(), ctx, what);
      if (st) return st;
      int e = dev_transpose(yp, recv, n, outer, (size_t)x_axis * rest * es, stream);
      if (e) return gpu_launch_status(node, e, "interleaving the gathered blocks");
    }
    break;
  }
  case COLL_REDUCE_SCATTER:
  case COLL_ALL_TO_ALL: {
    const size_t block = (size_t)(x_axis / s->group_size) * rest * es;
    const char* send = xp;
    char* buf = NULL;
    if (outer > 1) {
      cudaError_t e = cudaMallocAsync(scratch, 2 * bytes, stream);
      if (e != cudaSuccess) return gpu_launch_status(node, (int)e, "scratch for packing");
      buf = *scratch;
      int te = dev_transpose(buf, xp, outer, n, block, stream);
      if (te) return gpu_launch_status(node, te, "packing X's blocks");
      send = buf;
    }
    const size_t per_rank = count / n;
    if (s->kind == COLL_REDUCE_SCATTER) {
      what = "ncclReduceScatter";
      r = g_nccl.reduce_scatter(send, yp, per_rank, dt, s->red, c->comm, stream);
      break;
    }
    what = "ncclSend/ncclRecv (AllToAll)";
    char* recv = outer > 1 ? buf + bytes : yp;
    r = g_nccl.group_start();
    for (size_t j = 0; j < n && (r == ncclSuccess || r == ncclInProgress); j++) {
      const size_t off = j * per_rank * es;
      r = g_nccl.send(send + off, per_rank * unit, dt, (int)j, c->comm, stream);
      if (r == ncclSuccess || r == ncclInProgress)
        r = g_nccl.recv(recv + off, per_rank * unit, dt, (int)j, c->comm, stream);
    }
    ncclResult_t end = g_nccl.group_end();
    if (r == ncclSuccess || r == ncclInProgress) r = end;
    if (outer > 1) {
      st = coll_nccl(node, r, what);
      if (!st) st = nccl_settle(node, c, start, coll_stop_fn(), ctx, what);
      if (st) return st;
      int e = dev_transpose(yp, recv, n, outer, block, stream);
      if (e) return gpu_launch_status(node, e, "unpacking the received blocks");
    }
    break;
  }
  }
  st = coll_nccl(node, r, what);
  if (!st) st = coll_wait(s, ctx, stream, start, what);
  return st;
}

static OnyxStatus* coll_compute(void* state, OnyxKernelContext* ctx) {
  CudaColl* s = state;
  NcclComm* c = s->comm;
  void* stream = NULL;
  OnyxStatus* st = gpu_kernel_begin(&s->k, ctx, &stream);
  if (st) return st;
  pthread_mutex_lock(&c->lock);
  if (c->broken) {
    st = gpu_node_error(s->k.node, ONYX_RUNTIME_ERROR,
                        "the NCCL communicator was aborted by an earlier failure: %s", c->why);
    pthread_mutex_unlock(&c->lock);
    return st;
  }
  void* scratch = NULL;
  st = coll_run(s, ctx, (cudaStream_t)stream, &scratch);
  /* Freed in stream order; after an abort the stream's work is gone with the
   * communicator, and freeing then is still ordered behind it. */
  if (scratch) cudaFreeAsync(scratch, (cudaStream_t)stream);
  pthread_mutex_unlock(&c->lock);
  return st;
}

static const int32_t T_REDUCE[] = {
    ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64, ONYX_ELEM_FLOAT16, ONYX_ELEM_BFLOAT16, ONYX_ELEM_INT8,
    ONYX_ELEM_UINT8,   ONYX_ELEM_INT32,   ONYX_ELEM_UINT32,  ONYX_ELEM_INT64,    ONYX_ELEM_UINT64,
};
static const int32_t T_MOVE[] = {
    ONYX_ELEM_FLOAT32, ONYX_ELEM_FLOAT64, ONYX_ELEM_FLOAT16, ONYX_ELEM_BFLOAT16, ONYX_ELEM_INT8,
    ONYX_ELEM_UINT8,   ONYX_ELEM_INT16,   ONYX_ELEM_UINT16,  ONYX_ELEM_INT32,    ONYX_ELEM_UINT32,
    ONYX_ELEM_INT64,   ONYX_ELEM_UINT64,  ONYX_ELEM_BOOL,
};
static const OnyxTypeConstraint TC_REDUCE[] = {
    {"T", T_REDUCE, sizeof T_REDUCE / sizeof T_REDUCE[0]}};
static const OnyxTypeConstraint TC_MOVE[] = {{"T", T_MOVE, sizeof T_MOVE / sizeof T_MOVE[0]}};

OnyxStatus* cuda_register_collective_kernels(OnyxKernelRegistry* r) {
  static const struct {
    const char* op;
    const OnyxTypeConstraint* tc;
    CollKind kind;
  } ops[] = {
      {"AllReduce", TC_REDUCE, COLL_ALL_REDUCE},
      {"AllGather", TC_MOVE, COLL_ALL_GATHER},
      {"ReduceScatter", TC_REDUCE, COLL_REDUCE_SCATTER},
      {"Broadcast", TC_MOVE, COLL_BROADCAST},
      {"AllToAll", TC_MOVE, COLL_ALL_TO_ALL},
  };
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    OnyxKernelDef d = {.struct_size = sizeof d,
                       .domain = COLLECTIVE,
                       .op_type = ops[i].op,
                       .since_version = 1,
                       .end_version = ONYX_OPSET_LATEST,
                       .type_constraints = ops[i].tc,
                       .type_constraint_count = 1,
                       .create = coll_create,
                       .compute = coll_compute,
                       .release = coll_release,
                       .user_data = (void*)(intptr_t)ops[i].kind};
    OnyxStatus* st = gpu_host->register_kernel(r, &d);
    if (st) return st;
  }
  return NULL;
}
