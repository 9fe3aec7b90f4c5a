/* ox_dist_backend.h — the table a collective backend library fills
 * (libonyx_mpi.so, host/dist/mpi/), and what the host passes it.
 *
 * The host dlopens the library and calls its one exported function,
 * OX_DIST_BACKEND_INIT_SYMBOL. Every function returns 0 on success, or an
 * OnyxStatusCode with a message written into err (NUL-terminated, at most
 * err_len bytes). Buffers are host memory; counts are elements of `type`
 * (OnyxElemType); reductions are OnyxReduceOp values without AVG (the host
 * divides a SUM). A collective waits at most wait->timeout_ms and returns
 * ONYX_CANCELLED as soon as wait->stop says so; after either, the backend is
 * broken and fails every later call at once. The backend never writes a
 * caller's buffer after a call returned.
 */
#ifndef OX_DIST_BACKEND_H
#define OX_DIST_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#define OX_DIST_BACKEND_VERSION     1u
#define OX_DIST_BACKEND_INIT_SYMBOL "onyx_dist_backend_init"

typedef struct OxDistWait {
  uint32_t timeout_ms;
  /* Optional: polled while waiting; nonzero stops the wait (cancellation). */
  int32_t (*stop)(const void* arg);
  const void* stop_arg;
} OxDistWait;

typedef struct OxDistBackendArgs {
  uint32_t version;    /* OX_DIST_BACKEND_VERSION */
  uint32_t timeout_ms; /* for the set-up's own waits */
} OxDistBackendArgs;

typedef struct OxDistBackend {
  uint32_t version; /* OX_DIST_BACKEND_VERSION */
  void* ctx;
  int32_t rank, size, local_rank;
  const char* name; /* "mpi" */
  int (*all_reduce)(void* ctx, void* buf, size_t count, int32_t type, int32_t op,
                    const OxDistWait* w, char* err, size_t err_len);
  int (*all_gather)(void* ctx, const void* send, void* recv, size_t count_per_rank,
                    size_t elem_size, const OxDistWait* w, char* err, size_t err_len);
  int (*reduce_scatter)(void* ctx, const void* send, void* recv, size_t count_per_rank,
                        int32_t type, int32_t op, const OxDistWait* w, char* err, size_t err_len);
  int (*broadcast)(void* ctx, void* buf, size_t bytes, int32_t root, const OxDistWait* w, char* err,
                   size_t err_len);
  int (*all_to_all)(void* ctx, const void* send, void* recv, size_t count_per_rank,
                    size_t elem_size, const OxDistWait* w, char* err, size_t err_len);
  int (*barrier)(void* ctx, const OxDistWait* w, char* err, size_t err_len);
  /* Waits (bounded by the timeout) for work a broken call left pending, then
   * frees everything and finalizes MPI if the backend initialized it. */
  void (*release)(void* ctx);
} OxDistBackend;

typedef int (*OxDistBackendInitFn)(const OxDistBackendArgs* args, OxDistBackend* out, char* err,
                                   size_t err_len);

#endif /* OX_DIST_BACKEND_H */
