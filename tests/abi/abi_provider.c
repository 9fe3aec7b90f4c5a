/* abi_provider.c — providers of several ABI versions for test_abi.c, built
 * from this one file with ABI_KIND set (tests/abi/CMakeLists.txt):
 *
 *   ABI_OLD     "abiold": compiled against the FROZEN 1.0 headers
 *               (tests/abi/v1_0), runs Add with the host's default placement.
 *   ABI_NEWER   "abinewer": built "for a newer minor": reports minor + 1 and
 *               hands the host a provider table, an EP and kernel definitions
 *               that are larger than the host knows (fields appended at the
 *               end, as a minor bump does). Runs Mul with its own
 *               get_capability. Must load and run in this host.
 *   ABI_NEEDS   "abineeds": a newer-minor provider that cannot work without a
 *               host function of that minor: it refuses in init, and the host
 *               must report the refusal naming the library.
 *   ABI_MAJOR   "abimajor": reports the next major: the host must refuse it.
 *   ABI_SMALL   "abismall": reports a newer minor but a provider table smaller
 *               than ABI 1.0's: the host must refuse it.
 *
 * Only the SDK headers are included, like any provider. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "onyx/onyx_ep.h"

#define ABI_OLD   0
#define ABI_NEWER 1
#define ABI_NEEDS 2
#define ABI_MAJOR 3
#define ABI_SMALL 4

#ifndef ABI_KIND
#error "set ABI_KIND"
#endif
#ifndef ABI_NAME
#error "set ABI_NAME"
#endif

/* What this library reports. */
#if ABI_KIND == ABI_MAJOR
#define REPORTED_MAJOR (ONYX_ABI_VERSION_MAJOR + 1)
#define REPORTED_MINOR 0
#elif ABI_KIND == ABI_OLD
#define REPORTED_MAJOR ONYX_ABI_VERSION_MAJOR
#define REPORTED_MINOR ONYX_ABI_VERSION_MINOR /* 1.0: these are the frozen headers */
#else
#define REPORTED_MAJOR ONYX_ABI_VERSION_MAJOR
#define REPORTED_MINOR (ONYX_ABI_VERSION_MINOR + 1)
#endif

#if ABI_KIND == ABI_OLD
#define KERNEL_OP "Add"
#else
#define KERNEL_OP "Mul"
#endif

/* The structs as "the newer minor" has them: the current ones plus fields
 * appended at the end. */
typedef struct {
  OnyxProvider base;
  OnyxStatus* (*future_slot)(const OnyxProvider* p, uint64_t flags);
  uint64_t future_flags;
} ProviderNext;
typedef struct {
  OnyxEp base;
  OnyxStatus* (*future_ep_slot)(OnyxEp* ep);
} EpNext;
typedef struct {
  OnyxKernelDef base;
  int64_t future_kernel_field;
} KernelDefNext;

static const OnyxHostApi* H;

static OnyxStatus* abi_compute(void* state, OnyxKernelContext* ctx) {
  (void)state;
  const OnyxTensor* a = H->ctx_input(ctx, 0);
  const OnyxTensor* b = H->ctx_input(ctx, 1);
  if (H->tensor_elem_count(a) != H->tensor_elem_count(b))
    return H->status_create(ONYX_NOT_IMPLEMENTED, "%s: no broadcasting", ABI_NAME);
  OnyxTensor* y = NULL;
  OnyxStatus* st = H->ctx_output(ctx, 0, H->tensor_dims(a), H->tensor_rank(a), &y);
  if (st) return st;
  const float* pa = H->tensor_data(a);
  const float* pb = H->tensor_data(b);
  float* py = H->tensor_mutable_data(y);
  for (size_t i = 0, n = H->tensor_elem_count(a); i < n; i++)
    py[i] = strcmp(KERNEL_OP, "Add") == 0 ? pa[i] + pb[i] : pa[i] * pb[i];
  return NULL;
}

static OnyxStatus* abi_register(const OnyxProvider* p, OnyxKernelRegistry* r) {
  (void)p;
  static const int32_t f32[] = {ONYX_ELEM_FLOAT32};
  static const OnyxTypeConstraint tc[] = {{"T", f32, 1}};
  OnyxKernelDef d = {.struct_size = sizeof d,
                     .domain = "",
                     .op_type = KERNEL_OP,
                     .since_version = 7,
                     .end_version = ONYX_OPSET_LATEST,
                     .type_constraints = tc,
                     .type_constraint_count = 1,
                     .compute = abi_compute};
#if ABI_KIND == ABI_NEWER
  /* A larger definition, its struct_size saying so: the host copies what it
   * knows and ignores the rest. */
  KernelDefNext next = {.base = d, .future_kernel_field = 0x5eed};
  next.base.struct_size = sizeof next;
  return H->register_kernel(r, &next.base);
#else
  return H->register_kernel(r, &d);
#endif
}

static OnyxStatus* abi_count(const OnyxProvider* p, size_t* n) {
  (void)p;
  *n = 1;
  return NULL;
}

#if ABI_KIND == ABI_NEWER
/* Its own placement: Mul nodes, and a reason for everything else. */
static OnyxStatus* abi_capability(OnyxEp* ep, const OnyxGraphView* g, OnyxCapabilityBuilder* b) {
  (void)ep;
  for (size_t i = 0; i < H->graph_node_count(g); i++) {
    const OnyxNode* n = H->graph_node(g, i);
    if (strcmp(H->node_op_type(n), KERNEL_OP) == 0) {
      OnyxStatus* st = H->claim_node(b, n);
      if (st) return st;
    } else {
      H->decline_node(b, n, ABI_NAME ": only Mul");
    }
  }
  return NULL;
}

static OnyxStatus* abi_future_ep_slot(OnyxEp* ep) {
  (void)ep; /* a 1.0 host never calls it: it does not know the slot exists */
  return H->status_create(ONYX_FAIL, "%s: future EP slot called", ABI_NAME);
}
#endif

static void abi_ep_release(OnyxEp* ep) {
  free(ep);
}

static OnyxStatus* abi_create(const OnyxProvider* p, const OnyxEpCreateArgs* a, OnyxEp** out) {
  (void)a;
#if ABI_KIND == ABI_NEWER
  EpNext* e = calloc(1, sizeof *e);
  if (!e) return H->status_create(ONYX_OUT_OF_MEMORY, "oom");
  e->base = (OnyxEp){.struct_size = sizeof *e,
                     .provider = p,
                     .get_capability = abi_capability,
                     .release = abi_ep_release};
  e->future_ep_slot = abi_future_ep_slot;
  *out = &e->base;
#else
  OnyxEp* e = calloc(1, sizeof *e);
  if (!e) return H->status_create(ONYX_OUT_OF_MEMORY, "oom");
  *e = (OnyxEp){.struct_size = sizeof *e, .provider = p, .release = abi_ep_release};
  *out = e;
#endif
  return NULL;
}

static OnyxStatus* abi_future_slot(const OnyxProvider* p, uint64_t flags) {
  (void)p, (void)flags; /* see abi_future_ep_slot */
  return H->status_create(ONYX_FAIL, "%s: future provider slot called", ABI_NAME);
}

static const ProviderNext abi_table = {
    .base = {.struct_size =
#if ABI_KIND == ABI_OLD || ABI_KIND == ABI_MAJOR
                 sizeof(OnyxProvider),
#elif ABI_KIND == ABI_SMALL
                 offsetof(OnyxProvider, device_count),
#else
                 sizeof(ProviderNext),
#endif
             .abi_major = REPORTED_MAJOR,
             .abi_minor = REPORTED_MINOR,
             .name = ABI_NAME,
             .vendor = "onyx tests",
             .version = "1",
             .device_count = abi_count,
             .register_kernels = abi_register,
             .create_ep = abi_create},
    .future_slot = abi_future_slot,
    .future_flags = 1,
};

ONYX_EXPORT OnyxStatus* onyx_provider_init(const OnyxHostApi* host, const OnyxProvider** out) {
  H = host;
  if (host->abi_major != ONYX_ABI_VERSION_MAJOR)
    return host->status_create(ONYX_ABI_MISMATCH, "%s: host ABI major %u", ABI_NAME,
                               (unsigned)host->abi_major);
#if ABI_KIND == ABI_NEEDS
  /* The provider calls a host function appended in its minor: the slot
   * would lie just past the end of the current table. An older host's table
   * does not reach it, so the provider refuses to load, saying why. */
  size_t needed = sizeof(OnyxHostApi) + sizeof(void (*)(void));
  if (host->abi_minor < REPORTED_MINOR || host->struct_size < needed)
    return host->status_create(ONYX_ABI_MISMATCH,
                               "%s needs a host of ABI %d.%d or newer (host API table of %zu "
                               "bytes); this host implements ABI %u.%u (%zu bytes)",
                               ABI_NAME, REPORTED_MAJOR, REPORTED_MINOR, needed,
                               (unsigned)host->abi_major, (unsigned)host->abi_minor,
                               host->struct_size);
#endif
  *out = &abi_table.base;
  return NULL;
}
