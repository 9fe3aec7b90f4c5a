/* onyx_distributed.h — process groups and collectives of Onyx.
 *
 * A process group is the set of processes (ranks) of one distributed job.
 * Each process makes one, from the environment its launcher set or from the
 * rank and size the application gives, and uses it for host-memory
 * collectives or hands it to sessions, which run the ops of the
 * com.onyx.collective domain (AllReduce, AllGather, ReduceScatter, Broadcast,
 * AllToAll) on it:
 *
 *   OnyxProcessGroupOptions po;
 *   onyx_process_group_options_init(&po);
 *   po.timeout_ms = 60000;
 *   OnyxProcessGroup* pg = NULL;
 *   OnyxStatus* st = onyx_process_group_create(&po, &pg);
 *   float grad[4] = {...};
 *   if (!st) st = onyx_process_group_all_reduce(pg, grad, 4, ONYX_ELEM_FLOAT32, ONYX_REDUCE_AVG);
 *   if (!st) st = onyx_session_options_set_process_group(opts, pg);
 *   ...
 *   onyx_process_group_release(pg);  // after every session made with it
 *
 * Launch detection, in order:
 *   1. options.rank / options.size when size > 0 (the application's own);
 *   2. Open MPI's mpirun: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
 *      OMPI_COMM_WORLD_LOCAL_RANK;
 *   3. torchrun-style: RANK, WORLD_SIZE, LOCAL_RANK; a larger world without
 *      mpirun meets at a TCP store that rank 0 serves on MASTER_ADDR:
 *      MASTER_PORT (both required), over which the MPI backend joins the
 *      processes into one MPI world (scripts/onyx-launch.sh N cmd starts
 *      such a launch; docs/distributed.md, "Launch without mpirun");
 *   4. none of them: a world of one rank.
 * A world of one rank needs no library: every collective is a local copy. A
 * larger world (or backend "mpi") loads the MPI backend, libonyx_mpi.so (the
 * path in options.library_path, else $ONYX_MPI_LIBRARY, else the folder of
 * libonyx.so, else the loader's search path), which needs Open MPI's
 * libmpi.so.40 (Debian: libopenmpi-dev / openmpi-bin). Either missing is an
 * error naming the library and the package. MPI is initialized by the
 * backend (MPI_THREAD_SERIALIZED) unless the application did it before; it is
 * finalized at release only if the backend initialized it.
 *
 * Collectives are blocking and collective: every rank of the group calls the
 * same sequence with matching arguments. Each one waits through nonblocking
 * MPI calls polled against options.timeout_ms: a rank that stalls or dies
 * makes the others return ONYX_RUNTIME_ERROR naming the op and the timeout
 * (and the missing ranks when the backend knows them). After a timeout the
 * group is broken: every later collective fails at once.
 *
 * Conventions are those of onyx.h: NULL status on success, out-parameters
 * NULL on failure, release accepts NULL. The collectives of one group may be
 * called from several threads: a lock runs them one at a time. Every rank
 * must still issue them in the same order, so sessions that share a group
 * and run concurrently can mismatch their collectives across ranks; run
 * them in one agreed order.
 */
#ifndef ONYX_DISTRIBUTED_H
#define ONYX_DISTRIBUTED_H

#include <stddef.h>
#include <stdint.h>
#include "onyx.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct OnyxProcessGroup OnyxProcessGroup;

/* Reductions: OnyxReduceOp (onyx_types.h, shared with the provider ABI). */

/* Default collective timeout when timeout_ms is 0: five minutes. */
#define ONYX_PROCESS_GROUP_DEFAULT_TIMEOUT_MS 300000u

typedef struct OnyxProcessGroupOptions {
  size_t struct_size; /* sizeof(OnyxProcessGroupOptions); set by _init */
  /* "auto" (or NULL): none for a world of one rank, MPI otherwise
   * ($ONYX_DIST_BACKEND overrides "auto"); "mpi": MPI even for a world of
   * one rank; "none": refuse a larger world; "store": a launch without
   * mpirun with no MPI: broadcast, all-gather and barrier of at most 64 KiB
   * through the TCP store (NCCL's bootstrap), other host collectives
   * refused. */
  const char* backend;
  /* Rank and size given by the application; size 0 (default): from the
   * environment. With MPI, they must agree with MPI_COMM_WORLD's. */
  int32_t rank;
  int32_t size;
  int32_t local_rank; /* -1 (default): from the environment, else 0 */
  /* Bound on every wait of a collective, in milliseconds; 0: the default. */
  uint32_t timeout_ms;
  /* Path of libonyx_mpi.so; NULL: $ONYX_MPI_LIBRARY, then next to libonyx.so,
   * then the loader's search path. */
  const char* library_path;
} OnyxProcessGroupOptions;

/* Fills the defaults: backend "auto", size 0, local_rank -1, timeout 0. */
ONYX_API void onyx_process_group_options_init(OnyxProcessGroupOptions* o);
/* Makes the process's group (see "Launch detection" above). o may be NULL
 * (the defaults). Collective across the world when it has more than one
 * rank: every rank calls it. */
ONYX_API OnyxStatus* onyx_process_group_create(const OnyxProcessGroupOptions* o,
                                               OnyxProcessGroup** out);
/* Releases the group (finalizing MPI if it initialized it). Every session
 * made with it must have been released before. */
ONYX_API void onyx_process_group_release(OnyxProcessGroup* g);

ONYX_API int onyx_process_group_rank(const OnyxProcessGroup* g);       /* 0 for NULL */
ONYX_API int onyx_process_group_size(const OnyxProcessGroup* g);       /* 1 for NULL */
ONYX_API int onyx_process_group_local_rank(const OnyxProcessGroup* g); /* 0 for NULL */
/* "none", "mpi" or "store". */
ONYX_API const char* onyx_process_group_backend(const OnyxProcessGroup* g);

/* --- Host-memory collectives: blocking, bounded by the timeout ------------ */
/* Element types: float32, float64, float16 and bfloat16 (reduced in float32),
 * int8/16/32/64, uint8/16/32/64 and bool (as uint8); broadcast and
 * all_gather move bytes of any fixed-size type. */

/* buf[i] = op over the ranks of buf[i], in place. */
ONYX_API OnyxStatus* onyx_process_group_all_reduce(OnyxProcessGroup* g, void* buf, size_t count,
                                                   OnyxElemType type, OnyxReduceOp op);
/* recv (size * count_per_rank elements) = every rank's send, in rank order. */
ONYX_API OnyxStatus* onyx_process_group_all_gather(OnyxProcessGroup* g, const void* send,
                                                   void* recv, size_t count_per_rank,
                                                   OnyxElemType type);
/* send holds size * count_per_rank elements; rank r's recv (count_per_rank)
 * is the reduction over ranks of send's block r. */
ONYX_API OnyxStatus* onyx_process_group_reduce_scatter(OnyxProcessGroup* g, const void* send,
                                                       void* recv, size_t count_per_rank,
                                                       OnyxElemType type, OnyxReduceOp op);
/* buf on every rank = buf on `root`. */
ONYX_API OnyxStatus* onyx_process_group_broadcast(OnyxProcessGroup* g, void* buf, size_t bytes,
                                                  int root);
/* send holds size blocks of count_per_rank elements; block j goes to rank j,
 * which stores it as its recv block r (r the sender). */
ONYX_API OnyxStatus* onyx_process_group_all_to_all(OnyxProcessGroup* g, const void* send,
                                                   void* recv, size_t count_per_rank,
                                                   OnyxElemType type);
ONYX_API OnyxStatus* onyx_process_group_barrier(OnyxProcessGroup* g);

/* --- Sessions ------------------------------------------------------------------ */
/* Sessions made with these options run com.onyx.collective ops on `g` (not
 * owned; it must outlive them; NULL: none). At session creation every node's
 * group_size attribute is checked against the group's size, and, when the
 * model has collective ops and the world has more than one rank, the ranks
 * compare a hash of the model's bytes and of the options collectives depend
 * on: a rank whose hash differs from rank 0's is named in the error every
 * rank gets. Session creation is then collective: every rank creates it. */
ONYX_API OnyxStatus* onyx_session_options_set_process_group(OnyxSessionOptions* o,
                                                            OnyxProcessGroup* g);
/* 1: the session shards the model across the process group's ranks,
 * Megatron-style (docs/distributed.md, "Tensor parallelism"): the attention
 * and MLP blocks' first projections split by columns, the second ones by
 * rows followed by an AllReduce(sum); what is not recognised stays whole.
 * Every rank makes its session from the same model. Without a process group
 * (a world of one rank) nothing changes.
 * Default 0. */
ONYX_API OnyxStatus* onyx_session_options_set_tensor_parallel(OnyxSessionOptions* o, int on);

#ifdef __cplusplus
}
#endif
#endif /* ONYX_DISTRIBUTED_H */
