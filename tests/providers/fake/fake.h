/* fake.h — internals of the test-only "fake" provider (libonyx_ep_fake.so).
 *
 * The fake device is host memory behind an allocator that tracks every live
 * buffer, so that kernels can prove the host copied their inputs into device
 * memory, copies can be counted, and leaks show at EP release. Everything a
 * test needs to observe leaves through the "stats_file" option; the library
 * exports only onyx_provider_init. Built against sdk/include only.
 *
 * The same sources build two libraries: libonyx_ep_fake.so ("fake", device
 * 0) and libonyx_ep_fake2.so ("fake2", device 1, FAKE_NAME and
 * FAKE_DEVICE_ID set by CMake), so a session can hold two fake providers with
 * distinct memories. */
#ifndef FAKE_H
#define FAKE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include "onyx/onyx_ep.h"

#ifndef FAKE_NAME
#define FAKE_NAME "fake"
#endif
#ifndef FAKE_DEVICE_ID
#define FAKE_DEVICE_ID 0
#endif
#define FAKE_VENDOR   0xFA4Eu
#define FAKE_ALIGN    64u
#define FAKE_MAX_RANK 8

extern const OnyxHostApi* fake_host;

/* Failure injection points ("fail" option). */
typedef enum FakeFail {
  FAKE_FAIL_NONE = 0,
  FAKE_FAIL_DEVICE_COUNT,
  FAKE_FAIL_CREATE_EP,
  FAKE_FAIL_GET_CAPABILITY,
  FAKE_FAIL_COMPILE,
  FAKE_FAIL_COMPUTE,
  FAKE_FAIL_ALLOC,
  FAKE_FAIL_QUEUED, /* the kernels' queued work fails (after its latency) */
} FakeFail;

/* Counters written to the stats file at EP release. */
typedef struct FakeStats {
  atomic_size_t allocs, frees;
  atomic_size_t copies_in, copies_out, copies_device;
  atomic_size_t kernels_run, compiled_groups;
  atomic_size_t streams, syncs, events, records, waits;
} FakeStats;

typedef struct FakeBuffer {
  void* ptr;
  size_t bytes;
} FakeBuffer;

/* A comma-separated option parsed into op names. */
typedef struct FakeOpSet {
  char** names;
  size_t count;
} FakeOpSet;

typedef struct FakeEp {
  OnyxEp ep; /* first: an OnyxEp* is a FakeEp* */
  OnyxAllocator allocator;
  FakeOpSet ops, fuse;
  char* decline_reason;
  char* stats_file;
  FakeFail fail;
  bool bad_group, cheap_relu, no_device;
  /* "async": the stream is a worker thread running queued work in order;
   * "latency_ms": each kernel's work first sleeps this long. */
  bool async;
  long latency_ms;
  /* Event state (OnyxEvent's generations and errors) is guarded by
   * event_lock; event_cond is signalled whenever an event completes. */
  pthread_mutex_t event_lock;
  pthread_cond_t event_cond;
  /* Live device buffers; guarded by lock (alloc/free come from any thread). */
  pthread_mutex_t lock;
  FakeBuffer* live;
  size_t n_live, cap_live;
  /* Decline reasons handed to the host, kept until release. */
  char** reasons;
  size_t n_reasons, cap_reasons;
  FakeStats stats;
} FakeEp;

static inline FakeEp* fake_ep(OnyxEp* ep) {
  return (FakeEp*)ep;
}

/* --- memory (fake_memory.c) --- */
extern const OnyxMemoryDevice fake_memory;
bool fake_is_device_memory(const OnyxMemoryDevice* m);
bool fake_is_cpu_memory(const OnyxMemoryDevice* m);
void fake_allocator_init(FakeEp* f);
/* 1 if [ptr, ptr+bytes) lies inside one live buffer. */
bool fake_owns(FakeEp* f, const void* ptr, size_t bytes);
/* Logs and frees buffers the host left behind; returns how many. */
size_t fake_release_live(FakeEp* f);
void fake_install_memory_slots(OnyxEp* ep);
/* Error unless tensor t is in live fake memory; `who` ("node 'x'") and
 * `what` ("0 ('y')") name it in the message. */
OnyxStatus* fake_check_input(FakeEp* f, const OnyxTensor* t, const char* what, const char* who);

/* --- streams (fake_memory.c) --- */
/* Work queued on an asynchronous stream: run on the stream's thread, then
 * drop(arg) (may be NULL). An error it returns is the stream's until the
 * next sync_stream, and reaches events recorded after it. */
typedef OnyxStatus* (*FakeWorkFn)(void* arg);
bool fake_stream_is_async(const OnyxStream* s);
/* Queues run(arg); on failure drop(arg) is called at once. */
OnyxStatus* fake_stream_enqueue(OnyxStream* s, FakeWorkFn run, void (*drop)(void*), void* arg);
/* Blocks until everything queued on s so far has finished. */
void fake_stream_drain(OnyxStream* s);
void fake_sleep_ms(long ms);

/* --- kernels (fake_kernels.c) --- */
typedef float (*FakeUnaryFn)(float);
typedef float (*FakeBinaryFn)(float, float);
typedef struct FakeOp {
  const char* name;
  int32_t since;     /* first opset with today's semantics */
  FakeUnaryFn unary; /* exactly one of unary/binary is set */
  FakeBinaryFn binary;
} FakeOp;
const FakeOp* fake_op_find(const char* name);
OnyxStatus* fake_register_kernels(const OnyxProvider* p, OnyxKernelRegistry* r);
/* Output shape of op over inputs (broadcasting binaries); error names `node`. */
OnyxStatus* fake_op_shape(const FakeOp* op, const int64_t* const dims[2], const size_t rank[2],
                          int64_t* out, size_t* out_rank, const char* node);
void fake_op_apply(const FakeOp* op, const float* const in[2], const int64_t* const dims[2],
                   const size_t rank[2], float* out, const int64_t* out_dims, size_t out_rank);
OnyxStatus* fake_injected_compute_failure(FakeEp* f, const char* who);

/* --- capability and compile (fake_capability.c, fake_compile.c) --- */
OnyxStatus* fake_get_capability(OnyxEp* ep, const OnyxGraphView* g, OnyxCapabilityBuilder* b);
OnyxStatus* fake_compile(OnyxEp* ep, const OnyxGraphView* group, OnyxCompiledKernel* out);

/* --- helpers (fake_provider.c) --- */
bool fake_opset_has(const FakeOpSet* s, const char* name);
/* Keeps a copy of a reason string alive until EP release; NULL on OOM. */
const char* fake_keep_reason(FakeEp* f, const char* reason);

#endif /* FAKE_H */
