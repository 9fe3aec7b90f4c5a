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

#define OX_DIST_BACKEND_VERSION     3u
#define OX_DIST_BACKEND_INIT_SYMBOL "onyx_dist_backend_init"

typedef struct OxDistWait {
  uint32_t timeout_ms;
  /* Optional: polled while waiting; nonzero stops the wait (cancellation). */
  int32_t (*stop)(const void* arg);
  const void* stop_arg;
} OxDistWait;

/* The rendezvous of a launch without mpirun (the host's TCP store): the
 * backend builds its world over it. set and get return 0 or an
 * OnyxStatusCode with err written; get waits (bounded by the timeout) until
 * the key is set and copies at most cap bytes of its value (*len: the
 * value's size; a larger value is an error). */
typedef struct OxDistRendezvous {
  void* ctx;
  int32_t rank, size, local_rank;
  int (*set)(void* ctx, const char* key, const void* value, size_t len, char* err, size_t err_len);
  int (*get)(void* ctx, const char* key, void* value, size_t cap, size_t* len, char* err,
             size_t err_len);
} OxDistRendezvous;

typedef struct OxDistBackendArgs {
  uint32_t version;    /* OX_DIST_BACKEND_VERSION */
  uint32_t timeout_ms; /* for the set-up's own waits */
  /* NULL: the world is MPI_COMM_WORLD (mpirun). Otherwise every process is
   * an MPI singleton and the backend joins them, in rank order, through
   * this rendezvous (docs/distributed.md, "Launch without mpirun"). */
  const OxDistRendezvous* rendezvous;
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
  /* A nonblocking all-reduce in two halves: start copies buf into memory the
   * backend owns, posts the reduction and returns a handle; wait polls it
   * (bounded by w) and copies the result into buf (count elements of the
   * start's type). *done_before is set to 1 when the reduction had already
   * completed at the wait's first poll. Every rank starts in the same order. */
  int (*all_reduce_start)(void* ctx, const void* buf, size_t count, int32_t type, int32_t op,
                          uint64_t* handle, char* err, size_t err_len);
  int (*all_reduce_wait)(void* ctx, uint64_t handle, void* buf, size_t count, int* done_before,
                         const OxDistWait* w, char* err, size_t err_len);
  /* Polls the started all-reduces once; returns how many are still in
   * flight. Called between collectives (never concurrently with one). */
  size_t (*progress)(void* ctx);
  /* Waits (bounded by the timeout) for work a broken call left pending (and
   * started all-reduces never waited for), then
   * frees everything and finalizes MPI if the backend initialized it. */
  void (*release)(void* ctx);
} OxDistBackend;

typedef int (*OxDistBackendInitFn)(const OxDistBackendArgs* args, OxDistBackend* out, char* err,
                                   size_t err_len);

#endif /* OX_DIST_BACKEND_H */
