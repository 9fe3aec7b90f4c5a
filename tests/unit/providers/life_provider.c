/* life_provider.c — a small working provider for the lifecycle tests
 * (test_lifecycle.c), built from this one file under several names
 * (LIFE_NAME) each running one op (LIFE_OP: Relu or Neg, float32, host
 * memory). Like every provider it sees only the SDK headers.
 *
 * It records what the host does to it in the environment, which outlives
 * the unloaded library: ONYX_TEST_LIFE_LOG gets "<name>:<event>;" for init,
 * ep (create_ep), ep_release and release; ONYX_TEST_LIFE_PATH_<name> gets
 * what host->library_path says about the library itself. With
 * ONYX_TEST_LIFE_QUIET set, create_ep and ep_release log nothing (for tests
 * that run sessions on several threads). */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "onyx/onyx_ep.h"

#ifndef LIFE_NAME
#error "set LIFE_NAME"
#endif
#ifndef LIFE_OP
#error "set LIFE_OP (Relu or Neg)"
#endif

static const OnyxHostApi* H;

static void life_log(const char* event) {
  /* Quiet while several threads run sessions: setenv is not thread-safe. */
  if (getenv("ONYX_TEST_LIFE_QUIET")) return;
  const char* old = getenv("ONYX_TEST_LIFE_LOG");
  char buf[2048];
  snprintf(buf, sizeof buf, "%s%s:%s;", old ? old : "", LIFE_NAME, event);
  setenv("ONYX_TEST_LIFE_LOG", buf, 1);
}

static OnyxStatus* life_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxTensor* x = H->ctx_input(ctx, 0);
  OnyxTensor* y = NULL;
  OnyxStatus* st = H->ctx_output(ctx, 0, H->tensor_dims(x), H->tensor_rank(x), &y);
  if (st) return st;
  const float* a = H->tensor_data(x);
  float* b = H->tensor_mutable_data(y);
  bool relu = strcmp(LIFE_OP, "Relu") == 0;
  for (size_t i = 0, n = H->tensor_elem_count(x); i < n; i++)
    b[i] = relu ? (a[i] > 0 ? a[i] : 0) : -a[i];
  return NULL;
}

static OnyxStatus* life_register(const OnyxProvider* p, OnyxKernelRegistry* r) {
  (void)p;
  static const int32_t f32[] = {ONYX_ELEM_FLOAT32};
  static const OnyxTypeConstraint tc[] = {{"T", f32, 1}};
  OnyxKernelDef d = {.struct_size = sizeof d,
                     .domain = "",
                     .op_type = LIFE_OP,
                     .since_version = 6,
                     .end_version = ONYX_OPSET_LATEST,
                     .type_constraints = tc,
                     .type_constraint_count = 1,
                     .compute = life_compute};
  return H->register_kernel(r, &d);
}

static OnyxStatus* life_count(const OnyxProvider* p, size_t* n) {
  (void)p;
  *n = 1;
  return NULL;
}

static void life_ep_release(OnyxEp* ep) {
  life_log("ep_release");
  free(ep);
}

/* ONYX_TEST_LIFE_STRICT set: create_ep refuses to be entered by two threads
 * at once (onyx_ep.h: the host calls provider slots one thread at a time),
 * and stays inside a while so that an overlap is likely to show. */
static atomic_int life_inside;

static OnyxStatus* life_create(const OnyxProvider* p, const OnyxEpCreateArgs* a, OnyxEp** out) {
  (void)a;
  if (getenv("ONYX_TEST_LIFE_STRICT")) {
    if (atomic_fetch_add(&life_inside, 1) != 0) {
      atomic_fetch_sub(&life_inside, 1);
      return H->status_create(ONYX_FAIL, "life: create_ep entered by two threads at once");
    }
    nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL);
    atomic_fetch_sub(&life_inside, 1);
  }
  OnyxEp* ep = calloc(1, sizeof *ep);
  if (!ep) return H->status_create(ONYX_OUT_OF_MEMORY, "life: out of memory");
  *ep = (OnyxEp){.struct_size = sizeof *ep, .provider = p, .release = life_ep_release};
  life_log("ep");
  *out = ep;
  return NULL;
}

static void life_release(const OnyxProvider* p) {
  (void)p;
  life_log("release");
}

static const OnyxProvider life_table = {.struct_size = sizeof(OnyxProvider),
                                        .abi_major = ONYX_ABI_VERSION_MAJOR,
                                        .abi_minor = ONYX_ABI_VERSION_MINOR,
                                        .name = LIFE_NAME,
                                        .vendor = "onyx tests",
                                        .version = "1",
                                        .device_count = life_count,
                                        .register_kernels = life_register,
                                        .create_ep = life_create,
                                        .release = life_release};

ONYX_EXPORT OnyxStatus* onyx_provider_init(const OnyxHostApi* host, const OnyxProvider** out) {
  H = host;
  const char* self = host->library_path((const void*)&life_table);
  setenv("ONYX_TEST_LIFE_PATH_" LIFE_NAME, self ? self : "(null)", 1);
  life_log("init");
  *out = &life_table;
  return NULL;
}
