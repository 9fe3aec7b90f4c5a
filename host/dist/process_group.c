/* process_group.c — the process group of onyx_distributed.h: launch
 * detection, the TCP store rendezvous of a launch without mpirun, loading
 * the backend library, argument checks and the collectives (local copies
 * for a world of one rank), the provider extension and the session's world
 * check. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "ox_checked.h"
#include "ox_common.h"
#include "ox_dist.h"
#include "ox_dist_backend.h"
#include "ox_providers.h"
#include "ox_tcp_store.h"

#define OX_MPI_LIB_NAME "libonyx_mpi.so"
#define OX_MPI_PACKAGE_HINT                                                                        \
  "libonyx_mpi.so is built when CMake finds MPI (ONYX_WITH_MPI) and needs Open MPI's "             \
  "libmpi.so.40 (Debian: apt install libopenmpi-dev openmpi-bin)"

/* Groups of this process with a backend. MPI runs at MPI_THREAD_SERIALIZED
 * and each group serializes its own calls only, so a progress thread polls
 * only while its group is the process's one group with a backend. */
static int ox_live_backends;

/* The store backend moves at most this many bytes per rank and call: it is
 * a rendezvous (NCCL's unique id, the world check's hashes), never the
 * transport of a collective's data. */
#define OX_STORE_BACKEND_MAX_BYTES 65536u

struct OnyxProcessGroup {
  int32_t rank, size, local_rank;
  uint32_t timeout_ms;
  void* lib;        /* dlopen handle of the MPI backend */
  OxDistBackend be; /* valid when lib or store_backend is set */
  /* The TCP store of a launch without mpirun: kept for the group's life by
   * the store backend, closed once MPI's world is joined otherwise. */
  OxStore* store;
  bool store_backend; /* be is the host's store backend (backend "store") */
  uint64_t store_seq; /* store collectives entered, the same on every rank */
  char* broken;       /* first failure that broke the group; NULL: healthy */
  OnyxCollectivesExt ext;
  /* The split all-reduces (all_reduce_start / all_reduce_wait): how many
   * started, how many are in flight now and at most, and how many had
   * completed when their wait began. ONYX_DIST_STATS=1 prints them at
   * release (the overlap test reads that line). */
  uint64_t async_started, async_in_flight, async_max_in_flight, async_done_before;
  /* The progress thread (started with the first split all-reduce unless
   * ONYX_DIST_PROGRESS_THREAD=0): while all-reduces are in flight it polls
   * them every 100 us under the lock, so that Open MPI moves large
   * messages on while the kernels between a start and its wait compute. */
  pthread_t progress;
  bool progress_on, progress_stop;
  bool counted; /* in ox_live_backends */
  /* One collective at a time: MPI runs at MPI_THREAD_SERIALIZED, and two
   * sessions sharing the group may run from two threads. */
  pthread_mutex_t lock;
};

uint64_t ox_fnv1a(uint64_t h, const void* data, size_t bytes) {
  const unsigned char* p = data;
  for (size_t i = 0; i < bytes; i++) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

void onyx_process_group_options_init(OnyxProcessGroupOptions* o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->backend = "auto";
  o->local_rank = -1;
}

/* --- Launch detection ------------------------------------------------------------- */

/* The environment variable `name` as a non-negative int; -1 when unset,
 * -2 when set but not a number in [0, INT32_MAX]. */
static int64_t ox_env_int(const char* name) {
  const char* s = getenv(name);
  if (!s || !*s) return -1;
  char* end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || !end || *end || v < 0 || v > INT32_MAX) return -2;
  return (int64_t)v;
}

typedef struct OxLaunch {
  int32_t rank, size, local_rank;
  const char* source; /* "options", "mpirun", "torchrun", "none" */
} OxLaunch;

static OnyxStatus* ox_env_pair(const char* rank_var, const char* size_var, const char* local_var,
                               const char* source, OxLaunch* out, bool* found) {
  int64_t r = ox_env_int(rank_var), n = ox_env_int(size_var), l = ox_env_int(local_var);
  *found = false;
  if (r == -1 && n == -1) return NULL;
  if (r < 0 || n < 1 || r >= n || l == -2)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_process_group_create: %s launch: %s='%s' and %s='%s' are not a rank "
                     "below a world size of at least 1",
                     source, rank_var, getenv(rank_var) ? getenv(rank_var) : "(unset)", size_var,
                     getenv(size_var) ? getenv(size_var) : "(unset)");
  *out = (OxLaunch){.rank = (int32_t)r,
                    .size = (int32_t)n,
                    .local_rank = l >= 0 ? (int32_t)l : 0,
                    .source = source};
  *found = true;
  return NULL;
}

static OnyxStatus* ox_detect_launch(const OnyxProcessGroupOptions* o, OxLaunch* out) {
  if (o->size > 0) {
    if (o->rank < 0 || o->rank >= o->size)
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "onyx_process_group_create: rank %d is outside a world of size %d",
                       (int)o->rank, (int)o->size);
    *out = (OxLaunch){.rank = o->rank, .size = o->size, .local_rank = 0, .source = "options"};
    return NULL;
  }
  if (o->size < 0)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_process_group_create: size %d (0: from the environment)", (int)o->size);
  bool found = false;
  OX_TRY(ox_env_pair("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                     "mpirun", out, &found));
  if (found) return NULL;
  OX_TRY(ox_env_pair("RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun", out, &found));
  if (found) return NULL;
  *out = (OxLaunch){.rank = 0, .size = 1, .local_rank = 0, .source = "none"};
  return NULL;
}

/* --- The backend library -------------------------------------------------------------- */

static OnyxStatus* ox_load_backend(OnyxProcessGroup* g, const OnyxProcessGroupOptions* o,
                                   const OxDistRendezvous* rv) {
  const char* explicit_path = o->library_path;
  if (!explicit_path || !*explicit_path) explicit_path = getenv("ONYX_MPI_LIBRARY");
  char* beside = NULL;
  const char* path = NULL;
  if (explicit_path && *explicit_path) {
    path = explicit_path;
  } else {
    /* Next to libonyx.so (or the program linking the host statically). */
    const char* dir = ox_self_dir();
    if (dir) {
      size_t n = strlen(dir) + sizeof "/" OX_MPI_LIB_NAME;
      beside = malloc(n);
      if (!beside) return ox_oom();
      snprintf(beside, n, "%s/%s", dir, OX_MPI_LIB_NAME);
      if (access(beside, F_OK) == 0) path = beside;
    }
    if (!path) path = OX_MPI_LIB_NAME; /* the loader's search path */
  }
  dlerror();
  /* RTLD_GLOBAL: Open MPI's own plugins resolve libmpi's symbols globally.
   * RTLD_NODELETE: the backend finalizes MPI at exit, from its own code. */
  void* lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
  if (!lib) {
    const char* why = dlerror();
    OnyxStatus* st =
        ox_status(ONYX_NOT_FOUND,
                  "process group of %d ranks: cannot load the MPI backend '%s': %s. "
                  "%s",
                  (int)g->size, path, why ? why : "unknown dlopen error", OX_MPI_PACKAGE_HINT);
    free(beside);
    return st;
  }
  void* sym = dlsym(lib, OX_DIST_BACKEND_INIT_SYMBOL);
  if (!sym) {
    OnyxStatus* st = ox_status(ONYX_NOT_FOUND, "MPI backend '%s' does not export %s", path,
                               OX_DIST_BACKEND_INIT_SYMBOL);
    dlclose(lib);
    free(beside);
    return st;
  }
  OxDistBackendInitFn init;
  memcpy(&init, &sym, sizeof init);
  OxDistBackendArgs args = {
      .version = OX_DIST_BACKEND_VERSION, .timeout_ms = g->timeout_ms, .rendezvous = rv};
  char err[512] = "";
  memset(&g->be, 0, sizeof g->be);
  int rc = init(&args, &g->be, err, sizeof err);
  if (rc) {
    OnyxStatus* st =
        ox_status((OnyxStatusCode)rc, "MPI backend '%s' failed to start: %s", path, err);
    dlclose(lib);
    free(beside);
    return st;
  }
  free(beside);
  g->lib = lib;
  return NULL;
}

/* --- The rendezvous of a launch without mpirun ----------------------------------------- */

/* A status as a backend return code and message (0 for NULL); frees st. */
static int ox_status_to_err(OnyxStatus* st, char* err, size_t n) {
  if (!st) return 0;
  snprintf(err, n, "%s", st->message ? st->message : "error");
  int code = (int)st->code;
  ox_status_free(st);
  return code ? code : ONYX_FAIL;
}

static int ox_rv_set(void* ctx, const char* key, const void* value, size_t len, char* err,
                     size_t n) {
  OnyxProcessGroup* g = ctx;
  return ox_status_to_err(ox_store_set(g->store, key, value, len, NULL), err, n);
}

static int ox_rv_get(void* ctx, const char* key, void* value, size_t cap, size_t* len, char* err,
                     size_t n) {
  OnyxProcessGroup* g = ctx;
  void* v = NULL;
  size_t l = 0;
  int rc = ox_status_to_err(ox_store_get(g->store, key, &v, &l, NULL), err, n);
  if (!rc && l > cap) {
    snprintf(err, n, "TCP store at %s: key '%s' holds %zu bytes, more than the %zu expected",
             ox_store_address(g->store), key, l, cap);
    rc = ONYX_RUNTIME_ERROR;
  }
  if (!rc) {
    if (l) memcpy(value, v, l);
    *len = l;
  }
  free(v);
  return rc;
}

/* MASTER_ADDR and MASTER_PORT of a launch without mpirun, checked. */
static OnyxStatus* ox_master(const OxLaunch* l, const char** addr, const char** port) {
  *addr = getenv("MASTER_ADDR");
  *port = getenv("MASTER_PORT");
  const char* missing = !*addr || !**addr   ? "MASTER_ADDR"
                        : !*port || !**port ? "MASTER_PORT"
                                            : NULL;
  if (missing)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_process_group_create: %s is unset; a %s launch of rank %d of %d "
                     "without mpirun meets at rank 0's MASTER_ADDR:MASTER_PORT (a TCP store): set "
                     "both on every rank (scripts/onyx-launch.sh does), or launch with `mpirun "
                     "-np %d ...`",
                     missing, l->source, (int)l->rank, (int)l->size, (int)l->size);
  char* end = NULL;
  errno = 0;
  long p = strtol(*port, &end, 10);
  if (errno || !end || *end || p < 1 || p > 65535)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_process_group_create: MASTER_PORT='%s' is not a port number (1 to "
                     "65535)",
                     *port);
  return NULL;
}

/* The store backend (backend "store"): broadcast, all-gather and barrier of
 * small payloads through the store, enough for NCCL's bootstrap and the
 * world check; the other collectives need MPI. ctx is the group; its lock is
 * held. */
static int ox_sb_too_big(const OnyxProcessGroup* g, const char* call, size_t bytes, char* err,
                         size_t n) {
  if (bytes <= OX_STORE_BACKEND_MAX_BYTES) return 0;
  snprintf(err, n,
           "%s of %zu bytes per rank: the \"store\" backend (rank %d of %d, launched without "
           "mpirun) carries rendezvous payloads of at most %u bytes; use the MPI backend "
           "(backend \"auto\" or \"mpi\") for data",
           call, bytes, (int)g->rank, (int)g->size, OX_STORE_BACKEND_MAX_BYTES);
  return ONYX_NOT_IMPLEMENTED;
}

static int ox_sb_needs_mpi(void* ctx, const char* call, char* err, size_t n) {
  const OnyxProcessGroup* g = ctx;
  snprintf(err, n,
           "%s on host memory needs the MPI backend: this group (rank %d of %d, launched without "
           "mpirun, backend \"store\") has only the TCP store's rendezvous (broadcast, "
           "all-gather and barrier of small payloads, for NCCL's bootstrap); create it with "
           "backend \"auto\" or \"mpi\"",
           call, (int)g->rank, (int)g->size);
  return ONYX_NOT_IMPLEMENTED;
}

static int ox_sb_broadcast(void* ctx, void* buf, size_t bytes, int32_t root, const OxDistWait* w,
                           char* err, size_t n) {
  OnyxProcessGroup* g = ctx;
  int rc = ox_sb_too_big(g, "broadcast", bytes, err, n);
  if (rc) return rc;
  char key[64];
  snprintf(key, sizeof key, "onyx/coll/%llu", (unsigned long long)g->store_seq++);
  if (g->rank == root) return ox_status_to_err(ox_store_set(g->store, key, buf, bytes, w), err, n);
  void* v = NULL;
  size_t len = 0;
  rc = ox_status_to_err(ox_store_get(g->store, key, &v, &len, w), err, n);
  if (!rc && len != bytes) {
    snprintf(err, n, "broadcast: rank %d sent %zu bytes, this rank expects %zu", (int)root, len,
             bytes);
    rc = ONYX_RUNTIME_ERROR;
  }
  if (!rc) memcpy(buf, v, bytes);
  free(v);
  return rc;
}

static int ox_sb_all_gather(void* ctx, const void* send, void* recv, size_t count, size_t elem,
                            const OxDistWait* w, char* err, size_t n) {
  OnyxProcessGroup* g = ctx;
  const size_t bytes = count * elem; /* the host checked the products */
  int rc = ox_sb_too_big(g, "all_gather", bytes, err, n);
  if (rc) return rc;
  const unsigned long long seq = (unsigned long long)g->store_seq++;
  char key[80];
  snprintf(key, sizeof key, "onyx/coll/%llu/%d", seq, (int)g->rank);
  rc = ox_status_to_err(ox_store_set(g->store, key, send, bytes, w), err, n);
  for (int32_t r = 0; r < g->size && !rc; r++) {
    snprintf(key, sizeof key, "onyx/coll/%llu/%d", seq, (int)r);
    void* v = NULL;
    size_t len = 0;
    rc = ox_status_to_err(ox_store_get(g->store, key, &v, &len, w), err, n);
    if (!rc && len != bytes) {
      snprintf(err, n, "all_gather: rank %d sent %zu bytes, this rank %zu", (int)r, len, bytes);
      rc = ONYX_RUNTIME_ERROR;
    }
    if (!rc) memcpy((char*)recv + (size_t)r * bytes, v, bytes);
    free(v);
  }
  return rc;
}

static int ox_sb_barrier(void* ctx, const OxDistWait* w, char* err, size_t n) {
  OnyxProcessGroup* g = ctx;
  char name[64];
  snprintf(name, sizeof name, "onyx/coll/%llu", (unsigned long long)g->store_seq++);
  return ox_status_to_err(ox_store_barrier(g->store, name, g->size, w), err, n);
}

static int ox_sb_all_reduce(void* ctx, void* buf, size_t count, int32_t type, int32_t op,
                            const OxDistWait* w, char* err, size_t n) {
  return ox_sb_needs_mpi(ctx, "all_reduce", err, n);
}
static int ox_sb_reduce_scatter(void* ctx, const void* send, void* recv, size_t count, int32_t type,
                                int32_t op, const OxDistWait* w, char* err, size_t n) {
  return ox_sb_needs_mpi(ctx, "reduce_scatter", err, n);
}
static int ox_sb_all_to_all(void* ctx, const void* send, void* recv, size_t count, size_t elem,
                            const OxDistWait* w, char* err, size_t n) {
  return ox_sb_needs_mpi(ctx, "all_to_all", err, n);
}
static int ox_sb_all_reduce_start(void* ctx, const void* buf, size_t count, int32_t type,
                                  int32_t op, uint64_t* handle, char* err, size_t n) {
  return ox_sb_needs_mpi(ctx, "the split all-reduce", err, n);
}
static int ox_sb_all_reduce_wait(void* ctx, uint64_t handle, void* buf, size_t count,
                                 int* done_before, const OxDistWait* w, char* err, size_t n) {
  return ox_sb_needs_mpi(ctx, "the split all-reduce", err, n);
}
static size_t ox_sb_progress(void* ctx) {
  return 0;
}

/* --- Create and release ------------------------------------------------------------- */

static const OnyxCollectivesExt ox_collectives_template;

OnyxStatus* onyx_process_group_create(const OnyxProcessGroupOptions* o_in, OnyxProcessGroup** out) {
  if (!out) return ox_status(ONYX_INVALID_ARGUMENT, "onyx_process_group_create: out is NULL");
  *out = NULL;
  /* Fields past the caller's struct_size take their defaults. */
  OnyxProcessGroupOptions o;
  onyx_process_group_options_init(&o);
  if (o_in) {
    if (o_in->struct_size < offsetof(OnyxProcessGroupOptions, backend))
      return ox_status(ONYX_INVALID_ARGUMENT,
                       "onyx_process_group_create: options.struct_size %zu is too small (call "
                       "onyx_process_group_options_init)",
                       o_in->struct_size);
    memcpy(&o, o_in, o_in->struct_size < sizeof o ? o_in->struct_size : sizeof o);
    o.struct_size = sizeof o;
  }
  const char* backend = o.backend && *o.backend ? o.backend : "auto";
  const char* env_backend = getenv("ONYX_DIST_BACKEND");
  const bool from_env = !strcmp(backend, "auto") && env_backend && *env_backend;
  if (from_env) backend = env_backend;
  if (strcmp(backend, "auto") && strcmp(backend, "mpi") && strcmp(backend, "none") &&
      strcmp(backend, "store"))
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_process_group_create: %s '%s' (expected \"auto\", \"mpi\", \"store\" "
                     "or \"none\")",
                     from_env ? "ONYX_DIST_BACKEND" : "backend", backend);
  OxLaunch launch = {.size = 1, .source = "none"};
  OX_TRY(ox_detect_launch(&o, &launch));
  bool want_mpi = !strcmp(backend, "mpi") || (!strcmp(backend, "auto") && launch.size > 1);
  const bool want_store = !strcmp(backend, "store") && launch.size > 1;
  if (launch.size > 1 && !strcmp(backend, "none"))
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_process_group_create: backend \"none\" serves a world of one rank; "
                     "this one has %d (%s)",
                     (int)launch.size, launch.source);
  /* Without mpirun a larger world meets through the TCP store at
   * MASTER_ADDR:MASTER_PORT: a torchrun-style launch always, the
   * application's rank and size when it sets MASTER_ADDR. */
  const bool under_mpirun = getenv("OMPI_COMM_WORLD_SIZE") != NULL;
  const bool rendezvous = launch.size > 1 && !under_mpirun &&
                          (!strcmp(launch.source, "torchrun") ||
                           (!strcmp(launch.source, "options") && getenv("MASTER_ADDR")));
  if (want_store && !rendezvous)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_process_group_create: backend \"store\" serves a launch without mpirun "
                     "(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); this one is %s",
                     under_mpirun ? "under mpirun (use backend \"auto\" or \"mpi\")"
                                  : "given by the application without MASTER_ADDR");
  const char* master_addr = NULL;
  const char* master_port = NULL;
  if (rendezvous) OX_TRY(ox_master(&launch, &master_addr, &master_port));
  OnyxProcessGroup* g = calloc(1, sizeof *g);
  if (!g) return ox_oom();
  pthread_mutex_init(&g->lock, NULL);
  g->rank = launch.rank;
  g->size = launch.size;
  g->local_rank = o.local_rank >= 0 ? o.local_rank : launch.local_rank;
  g->timeout_ms = o.timeout_ms ? o.timeout_ms : ONYX_PROCESS_GROUP_DEFAULT_TIMEOUT_MS;
  if (rendezvous) {
    OxStoreOptions so = {.host = master_addr,
                         .port = master_port,
                         .serve = launch.rank == 0,
                         .timeout_ms = g->timeout_ms};
    OnyxStatus* st = ox_store_open(&so, &g->store);
    if (st) {
      OnyxStatus* out = ox_status(st->code, "onyx_process_group_create (rank %d of %d, %s): %s",
                                  (int)launch.rank, (int)launch.size, launch.source, st->message);
      ox_status_free(st);
      onyx_process_group_release(g);
      return out;
    }
  }
  if (want_store) {
    g->be = (OxDistBackend){.version = OX_DIST_BACKEND_VERSION,
                            .ctx = g,
                            .rank = g->rank,
                            .size = g->size,
                            .local_rank = g->local_rank,
                            .name = "store",
                            .all_reduce = ox_sb_all_reduce,
                            .all_gather = ox_sb_all_gather,
                            .reduce_scatter = ox_sb_reduce_scatter,
                            .broadcast = ox_sb_broadcast,
                            .all_to_all = ox_sb_all_to_all,
                            .barrier = ox_sb_barrier,
                            .all_reduce_start = ox_sb_all_reduce_start,
                            .all_reduce_wait = ox_sb_all_reduce_wait,
                            .progress = ox_sb_progress};
    g->store_backend = true;
    /* Every rank has reached the store: a missing rank fails here, at
     * creation, rather than in the first collective. */
    char err[512] = "";
    int rc = ox_sb_barrier(g, NULL, err, sizeof err);
    if (rc) {
      OnyxStatus* st =
          ox_status((OnyxStatusCode)rc, "onyx_process_group_create (rank %d of %d): %s",
                    (int)launch.rank, (int)launch.size, err);
      onyx_process_group_release(g);
      return st;
    }
  } else if (want_mpi) {
    const OxDistRendezvous rv = {.ctx = g,
                                 .rank = g->rank,
                                 .size = g->size,
                                 .local_rank = g->local_rank,
                                 .set = ox_rv_set,
                                 .get = ox_rv_get};
    OnyxStatus* st = ox_load_backend(g, &o, g->store ? &rv : NULL);
    if (!st && (g->be.size != launch.size || g->be.rank != launch.rank)) {
      st = ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_process_group_create: rank %d of %d (%s) disagrees with MPI's rank "
                     "%d of %d; start the %d processes with `mpirun -np %d ...`, or without "
                     "mpirun set MASTER_ADDR and MASTER_PORT",
                     (int)launch.rank, (int)launch.size, launch.source, (int)g->be.rank,
                     (int)g->be.size, (int)launch.size, (int)launch.size);
    }
    if (st) {
      onyx_process_group_release(g);
      return st;
    }
    if (o.local_rank < 0) g->local_rank = g->be.local_rank;
    __atomic_add_fetch(&ox_live_backends, 1, __ATOMIC_ACQ_REL);
    g->counted = true;
    /* MPI's world is joined: the store has served its purpose. */
    ox_store_close(g->store);
    g->store = NULL;
  }
  g->ext = ox_collectives_template;
  g->ext.group = g;
  g->ext.rank = g->rank;
  g->ext.size = g->size;
  g->ext.local_rank = g->local_rank;
  g->ext.timeout_ms = g->timeout_ms;
  *out = g;
  return NULL;
}

void onyx_process_group_release(OnyxProcessGroup* g) {
  if (!g) return;
  if (g->progress_on) {
    pthread_mutex_lock(&g->lock);
    g->progress_stop = true;
    pthread_mutex_unlock(&g->lock);
    pthread_join(g->progress, NULL);
  }
  const char* stats = getenv("ONYX_DIST_STATS");
  if (stats && !strcmp(stats, "1") && g->async_started)
    fprintf(stderr,
            "onyx dist: rank %d: %llu split all-reduces, at most %llu in flight, %llu complete "
            "before their wait\n",
            (int)g->rank, (unsigned long long)g->async_started,
            (unsigned long long)g->async_max_in_flight, (unsigned long long)g->async_done_before);
  if (g->lib) {
    if (g->counted) __atomic_sub_fetch(&ox_live_backends, 1, __ATOMIC_ACQ_REL);
    if (g->be.release) g->be.release(g->be.ctx);
    dlclose(g->lib);
  }
  ox_store_close(g->store);
  free(g->broken);
  pthread_mutex_destroy(&g->lock);
  free(g);
}

int onyx_process_group_rank(const OnyxProcessGroup* g) {
  return g ? g->rank : 0;
}
int onyx_process_group_size(const OnyxProcessGroup* g) {
  return g ? g->size : 1;
}
int onyx_process_group_local_rank(const OnyxProcessGroup* g) {
  return g ? g->local_rank : 0;
}
const char* onyx_process_group_backend(const OnyxProcessGroup* g) {
  return !g ? "none" : g->lib ? "mpi" : g->store_backend ? "store" : "none";
}

const OnyxExtension* ox_process_group_extension(OnyxProcessGroup* g) {
  return g ? &g->ext.base : NULL;
}

/* --- Collectives ----------------------------------------------------------------------- */

typedef struct OxCall {
  const char* op;  /* "AllReduce" */
  OnyxStopFn stop; /* may be NULL */
  const OnyxKernelContext* ctx;
} OxCall;

static int32_t ox_call_stop(const void* arg) {
  const OxCall* c = arg;
  return c->stop ? c->stop(c->ctx) : 0;
}

static const char* ox_reduce_name(int32_t op) {
  switch (op) {
  case ONYX_REDUCE_SUM:
    return "sum";
  case ONYX_REDUCE_AVG:
    return "avg";
  case ONYX_REDUCE_MAX:
    return "max";
  case ONYX_REDUCE_MIN:
    return "min";
  default:
    return NULL;
  }
}

static bool ox_reducible(int32_t t) {
  switch (t) {
  case ONYX_ELEM_FLOAT32:
  case ONYX_ELEM_FLOAT64:
  case ONYX_ELEM_INT8:
  case ONYX_ELEM_INT16:
  case ONYX_ELEM_INT32:
  case ONYX_ELEM_INT64:
  case ONYX_ELEM_UINT8:
  case ONYX_ELEM_UINT16:
  case ONYX_ELEM_UINT32:
  case ONYX_ELEM_UINT64:
    return true;
  default:
    return false;
  }
}

/* Checks shared by every collective; *elem gets the element size and
 * *bytes count * elem (and *total, when not NULL, size times that). */
static OnyxStatus* ox_check(const OnyxProcessGroup* g, const OxCall* c, int32_t type, size_t count,
                            const void* a, const void* b, size_t* elem, size_t* bytes,
                            size_t* total) {
  if (!g) return ox_status(ONYX_INVALID_ARGUMENT, "%s: process group is NULL", c->op);
  if (g->broken)
    return ox_status(ONYX_RUNTIME_ERROR,
                     "%s on rank %d of %d: the process group is broken by an earlier failure: %s",
                     c->op, (int)g->rank, (int)g->size, g->broken);
  size_t es = (type >= 0 && type < ONYX_ELEM_TYPE_COUNT) ? ox_elem_size((OnyxElemType)type) : 0;
  if (!es)
    return ox_status(ONYX_INVALID_ARGUMENT, "%s: element type %d has no fixed size", c->op,
                     (int)type);
  size_t n = 0, all = 0;
  if (!ox_mul_size(count, es, &n) || !ox_mul_size(n, (size_t)g->size, &all))
    return ox_status(ONYX_INVALID_ARGUMENT, "%s: %zu elements of %s overflow size_t", c->op, count,
                     ox_elem_name((OnyxElemType)type));
  if (count && (!a || !b))
    return ox_status(ONYX_INVALID_ARGUMENT, "%s: a buffer of %zu elements is NULL", c->op, count);
  *elem = es;
  *bytes = n;
  if (total) *total = all;
  return NULL;
}

static OnyxStatus* ox_check_reduce(const OxCall* c, int32_t type, int32_t op) {
  if (!ox_reduce_name(op))
    return ox_status(ONYX_INVALID_ARGUMENT, "%s: reduce op %d (expected sum, avg, max or min)",
                     c->op, (int)op);
  if (!ox_reducible(type))
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "%s: cannot reduce %s (float32, float64 and 8- to 64-bit integers only)",
                     c->op, ox_elem_name((OnyxElemType)type));
  return NULL;
}

/* A backend failure: the status, and the group broken when the backend is. */
static OnyxStatus* ox_backend_error(OnyxProcessGroup* g, const OxCall* c, int rc, const char* err) {
  OnyxStatus* st = ox_status((OnyxStatusCode)rc, "%s on rank %d of %d (timeout %u ms): %s", c->op,
                             (int)g->rank, (int)g->size, (unsigned)g->timeout_ms, err);
  if ((rc == ONYX_RUNTIME_ERROR || rc == ONYX_CANCELLED) && !g->broken)
    g->broken = ox_strdup(st->message ? st->message : c->op);
  return st;
}

/* Divides a SUM by the group size, for AVG. */
static void ox_divide(void* buf, size_t count, int32_t type, int32_t size) {
#define OX_DIV_CASE(E, T)                                                                          \
  case E: {                                                                                        \
    T* p = buf;                                                                                    \
    for (size_t i = 0; i < count; i++)                                                             \
      p[i] = (T)(p[i] / (T)size);                                                                  \
    break;                                                                                         \
  }
  switch (type) {
    OX_DIV_CASE(ONYX_ELEM_FLOAT32, float)
    OX_DIV_CASE(ONYX_ELEM_FLOAT64, double)
    OX_DIV_CASE(ONYX_ELEM_INT8, int8_t)
    OX_DIV_CASE(ONYX_ELEM_INT16, int16_t)
    OX_DIV_CASE(ONYX_ELEM_INT32, int32_t)
    OX_DIV_CASE(ONYX_ELEM_INT64, int64_t)
    OX_DIV_CASE(ONYX_ELEM_UINT8, uint8_t)
    OX_DIV_CASE(ONYX_ELEM_UINT16, uint16_t)
    OX_DIV_CASE(ONYX_ELEM_UINT32, uint32_t)
    OX_DIV_CASE(ONYX_ELEM_UINT64, uint64_t)
  default:
    break;
  }
#undef OX_DIV_CASE
}

static OxDistWait ox_wait(const OnyxProcessGroup* g, const OxCall* c) {
  return (OxDistWait){.timeout_ms = g->timeout_ms, .stop = ox_call_stop, .stop_arg = c};
}

static OnyxStatus* ox_all_reduce(OnyxProcessGroup* g, const OxCall* c, void* buf, size_t count,
                                 int32_t type, int32_t op) {
  size_t es, bytes;
  OX_TRY(ox_check(g, c, type, count, buf, buf, &es, &bytes, NULL));
  OX_TRY(ox_check_reduce(c, type, op));
  if (g->size == 1 || !count) return NULL; /* the reduction of one rank is its own data */
  char err[512] = "";
  OxDistWait w = ox_wait(g, c);
  int32_t be_op = op == ONYX_REDUCE_AVG ? ONYX_REDUCE_SUM : op;
  int rc = g->be.all_reduce(g->be.ctx, buf, count, type, be_op, &w, err, sizeof err);
  if (rc) return ox_backend_error(g, c, rc, err);
  if (op == ONYX_REDUCE_AVG) ox_divide(buf, count, type, g->size);
  return NULL;
}

static OnyxStatus* ox_all_gather(OnyxProcessGroup* g, const OxCall* c, const void* send, void* recv,
                                 size_t count, int32_t type) {
  size_t es, bytes;
  OX_TRY(ox_check(g, c, type, count, send, recv, &es, &bytes, NULL));
  if (!count) return NULL;
  if (g->size == 1) {
    if (send != recv) memmove(recv, send, bytes);
    return NULL;
  }
  char err[512] = "";
  OxDistWait w = ox_wait(g, c);
  int rc = g->be.all_gather(g->be.ctx, send, recv, count, es, &w, err, sizeof err);
  return rc ? ox_backend_error(g, c, rc, err) : NULL;
}

static OnyxStatus* ox_reduce_scatter(OnyxProcessGroup* g, const OxCall* c, const void* send,
                                     void* recv, size_t count, int32_t type, int32_t op) {
  size_t es, bytes;
  OX_TRY(ox_check(g, c, type, count, send, recv, &es, &bytes, NULL));
  OX_TRY(ox_check_reduce(c, type, op));
  if (!count) return NULL;
  if (g->size == 1) {
    if (send != recv) memmove(recv, send, bytes);
    return NULL;
  }
  char err[512] = "";
  OxDistWait w = ox_wait(g, c);
  int32_t be_op = op == ONYX_REDUCE_AVG ? ONYX_REDUCE_SUM : op;
  int rc = g->be.reduce_scatter(g->be.ctx, send, recv, count, type, be_op, &w, err, sizeof err);
  if (rc) return ox_backend_error(g, c, rc, err);
  if (op == ONYX_REDUCE_AVG) ox_divide(recv, count, type, g->size);
  return NULL;
}

static OnyxStatus* ox_broadcast(OnyxProcessGroup* g, const OxCall* c, void* buf, size_t bytes,
                                int32_t root) {
  size_t es, n;
  OX_TRY(ox_check(g, c, ONYX_ELEM_UINT8, bytes, buf, buf, &es, &n, NULL));
  if (root < 0 || root >= g->size)
    return ox_status(ONYX_INVALID_ARGUMENT, "%s: root %d is outside a world of size %d", c->op,
                     (int)root, (int)g->size);
  if (g->size == 1 || !bytes) return NULL;
  char err[512] = "";
  OxDistWait w = ox_wait(g, c);
  int rc = g->be.broadcast(g->be.ctx, buf, bytes, root, &w, err, sizeof err);
  return rc ? ox_backend_error(g, c, rc, err) : NULL;
}

static OnyxStatus* ox_all_to_all(OnyxProcessGroup* g, const OxCall* c, const void* send, void* recv,
                                 size_t count, int32_t type) {
  size_t es, bytes;
  OX_TRY(ox_check(g, c, type, count, send, recv, &es, &bytes, NULL));
  if (!count) return NULL;
  if (g->size == 1) {
    if (send != recv) memmove(recv, send, bytes);
    return NULL;
  }
  char err[512] = "";
  OxDistWait w = ox_wait(g, c);
  int rc = g->be.all_to_all(g->be.ctx, send, recv, count, es, &w, err, sizeof err);
  return rc ? ox_backend_error(g, c, rc, err) : NULL;
}

static OnyxStatus* ox_barrier(OnyxProcessGroup* g, const OxCall* c) {
  size_t es, n;
  OX_TRY(ox_check(g, c, ONYX_ELEM_UINT8, 0, NULL, NULL, &es, &n, NULL));
  if (g->size == 1) return NULL;
  char err[512] = "";
  OxDistWait w = ox_wait(g, c);
  int rc = g->be.barrier(g->be.ctx, &w, err, sizeof err);
  return rc ? ox_backend_error(g, c, rc, err) : NULL;
}

/* The public functions. */

OnyxStatus* onyx_process_group_all_reduce(OnyxProcessGroup* g, void* buf, size_t count,
                                          OnyxElemType type, OnyxReduceOp op) {
  OxCall c = {.op = "onyx_process_group_all_reduce"};
  OnyxProcessGroup* locked = g;
  if (locked) pthread_mutex_lock(&locked->lock);
  OnyxStatus* st = ox_all_reduce(g, &c, buf, count, (int32_t)type, (int32_t)op);
  if (locked) pthread_mutex_unlock(&locked->lock);
  return st;
}

OnyxStatus* onyx_process_group_all_gather(OnyxProcessGroup* g, const void* send, void* recv,
                                          size_t count_per_rank, OnyxElemType type) {
  OxCall c = {.op = "onyx_process_group_all_gather"};
  OnyxProcessGroup* locked = g;
  if (locked) pthread_mutex_lock(&locked->lock);
  OnyxStatus* st = ox_all_gather(g, &c, send, recv, count_per_rank, (int32_t)type);
  if (locked) pthread_mutex_unlock(&locked->lock);
  return st;
}

OnyxStatus* onyx_process_group_reduce_scatter(OnyxProcessGroup* g, const void* send, void* recv,
                                              size_t count_per_rank, OnyxElemType type,
                                              OnyxReduceOp op) {
  OxCall c = {.op = "onyx_process_group_reduce_scatter"};
  OnyxProcessGroup* locked = g;
  if (locked) pthread_mutex_lock(&locked->lock);
  OnyxStatus* st = ox_reduce_scatter(g, &c, send, recv, count_per_rank, (int32_t)type, (int32_t)op);
  if (locked) pthread_mutex_unlock(&locked->lock);
  return st;
}

OnyxStatus* onyx_process_group_broadcast(OnyxProcessGroup* g, void* buf, size_t bytes, int root) {
  OxCall c = {.op = "onyx_process_group_broadcast"};
  OnyxProcessGroup* locked = g;
  if (locked) pthread_mutex_lock(&locked->lock);
  OnyxStatus* st = ox_broadcast(g, &c, buf, bytes, root);
  if (locked) pthread_mutex_unlock(&locked->lock);
  return st;
}

OnyxStatus* onyx_process_group_all_to_all(OnyxProcessGroup* g, const void* send, void* recv,
                                          size_t count_per_rank, OnyxElemType type) {
  OxCall c = {.op = "onyx_process_group_all_to_all"};
  OnyxProcessGroup* locked = g;
  if (locked) pthread_mutex_lock(&locked->lock);
  OnyxStatus* st = ox_all_to_all(g, &c, send, recv, count_per_rank, (int32_t)type);
  if (locked) pthread_mutex_unlock(&locked->lock);
  return st;
}

OnyxStatus* onyx_process_group_barrier(OnyxProcessGroup* g) {
  OxCall c = {.op = "onyx_process_group_barrier"};
  OnyxProcessGroup* locked = g;
  if (locked) pthread_mutex_lock(&locked->lock);
  OnyxStatus* st = ox_barrier(g, &c);
  if (locked) pthread_mutex_unlock(&locked->lock);
  return st;
}

/* --- The provider extension (ONYX_EXT_COLLECTIVES) --------------------------------------- */

static OnyxStatus* ox_ext_all_reduce(void* group, void* buf, size_t count, int32_t type, int32_t op,
                                     OnyxStopFn stop, const OnyxKernelContext* ctx) {
  OxCall c = {.op = "AllReduce", .stop = stop, .ctx = ctx};
  OnyxProcessGroup* locked = group;
  if (locked) pthread_mutex_lock(&locked->lock);
  OnyxStatus* st = ox_all_reduce(group, &c, buf, count, type, op);
  if (locked) pthread_mutex_unlock(&locked->lock);
  return st;
}
static OnyxStatus* ox_ext_all_gather(void* group, const void* send, void* recv, size_t count,
                                     int32_t type, OnyxStopFn stop, const OnyxKernelContext* ctx) {
  OxCall c = {.op = "AllGather", .stop = stop, .ctx = ctx};
  OnyxProcessGroup* locked = group;
  if (locked) pthread_mutex_lock(&locked->lock);
  OnyxStatus* st = ox_all_gather(group, &c, send, recv, count, type);
  if (locked) pthread_mutex_unlock(&locked->lock);
  return st;
}
static OnyxStatus* ox_ext_reduce_scatter(void* group, const void* send, void* recv, size_t count,
                                         int32_t type, int32_t op, OnyxStopFn stop,
                                         const OnyxKernelContext* ctx) {
  OxCall c = {.op = "ReduceScatter", .stop = stop, .ctx = ctx};
  OnyxProcessGroup* locked = group;
  if (locked) pthread_mutex_lock(&locked->lock);
  OnyxStatus* st = ox_reduce_scatter(group, &c, send, recv, count, type, op);
  if (locked) pthread_mutex_unlock(&locked->lock);
  return st;
}
static OnyxStatus* ox_ext_broadcast(void* group, void* buf, size_t bytes, int32_t root,
                                    OnyxStopFn stop, const OnyxKernelContext* ctx) {
  OxCall c = {.op = "Broadcast", .stop = stop, .ctx = ctx};
  OnyxProcessGroup* locked = group;
  if (locked) pthread_mutex_lock(&locked->lock);
  OnyxStatus* st = ox_broadcast(group, &c, buf, bytes, root);
  if (locked) pthread_mutex_unlock(&locked->lock);
  return st;
}
static OnyxStatus* ox_ext_all_to_all(void* group, const void* send, void* recv, size_t count,
                                     int32_t type, OnyxStopFn stop, const OnyxKernelContext* ctx) {
  OxCall c = {.op = "AllToAll", .stop = stop, .ctx = ctx};
  OnyxProcessGroup* locked = group;
  if (locked) pthread_mutex_lock(&locked->lock);
  OnyxStatus* st = ox_all_to_all(group, &c, send, recv, count, type);
  if (locked) pthread_mutex_unlock(&locked->lock);
  return st;
}
static OnyxStatus* ox_ext_barrier(void* group, OnyxStopFn stop, const OnyxKernelContext* ctx) {
  OxCall c = {.op = "Barrier", .stop = stop, .ctx = ctx};
  OnyxProcessGroup* locked = group;
  if (locked) pthread_mutex_lock(&locked->lock);
  OnyxStatus* st = ox_barrier(group, &c);
  if (locked) pthread_mutex_unlock(&locked->lock);
  return st;
}

static void* ox_progress_main(void* arg) {
  OnyxProcessGroup* g = arg;
  for (;;) {
    pthread_mutex_lock(&g->lock);
    const bool stop = g->progress_stop;
    const bool busy = !stop && !g->broken && g->async_in_flight &&
                      __atomic_load_n(&ox_live_backends, __ATOMIC_ACQUIRE) == 1;
    if (busy) g->be.progress(g->be.ctx);
    pthread_mutex_unlock(&g->lock);
    if (stop) return NULL;
    struct timespec ts = {0, busy ? 100000 : 1000000};
    nanosleep(&ts, NULL);
  }
}

/* Starts the progress thread once (called under the lock). */
static void ox_progress_start(OnyxProcessGroup* g) {
  if (g->progress_on || !g->be.progress) return;
  const char* env = getenv("ONYX_DIST_PROGRESS_THREAD");
  if (env && !strcmp(env, "0")) return;
  /* Without a thread the waits still progress the all-reduces. */
  g->progress_on = pthread_create(&g->progress, NULL, ox_progress_main, g) == 0;
}

/* The split all-reduce. A world of one rank keeps nothing: the wait leaves
 * buf (the caller's own data) as it is. AVG is a SUM divided at the wait. */
static OnyxStatus* ox_ext_all_reduce_start(void* group, const void* buf, size_t count, int32_t type,
                                           int32_t op, uint64_t* handle,
                                           const OnyxKernelContext* ctx) {
  OxCall c = {.op = "AllReduceStart", .ctx = ctx};
  OnyxProcessGroup* g = group;
  size_t es, bytes;
  *handle = 0;
  if (!g) return ox_status(ONYX_INVALID_ARGUMENT, "%s: process group is NULL", c.op);
  pthread_mutex_lock(&g->lock);
  OnyxStatus* st = ox_check(g, &c, type, count, buf, buf, &es, &bytes, NULL);
  if (!st) st = ox_check_reduce(&c, type, op);
  if (!st && g->size > 1 && count) {
    char err[512] = "";
    int32_t be_op = op == ONYX_REDUCE_AVG ? ONYX_REDUCE_SUM : op;
    int rc = g->be.all_reduce_start(g->be.ctx, buf, count, type, be_op, handle, err, sizeof err);
    if (rc)
      st = ox_backend_error(g, &c, rc, err);
    else
      ox_progress_start(g);
  }
  if (!st) {
    g->async_started++;
    if (++g->async_in_flight > g->async_max_in_flight) g->async_max_in_flight = g->async_in_flight;
  }
  pthread_mutex_unlock(&g->lock);
  return st;
}

static OnyxStatus* ox_ext_all_reduce_wait(void* group, uint64_t handle, void* buf, size_t count,
                                          int32_t type, int32_t op, OnyxStopFn stop,
                                          const OnyxKernelContext* ctx) {
  OxCall c = {.op = "AllReduceWait", .stop = stop, .ctx = ctx};
  OnyxProcessGroup* g = group;
  size_t es, bytes;
  if (!g) return ox_status(ONYX_INVALID_ARGUMENT, "%s: process group is NULL", c.op);
  pthread_mutex_lock(&g->lock);
  if (g->async_in_flight) g->async_in_flight--;
  OnyxStatus* st = ox_check(g, &c, type, count, buf, buf, &es, &bytes, NULL);
  if (!st) st = ox_check_reduce(&c, type, op);
  if (!st && g->size > 1 && count) {
    char err[512] = "";
    OxDistWait w = ox_wait(g, &c);
    int done_before = 0;
    int rc =
        g->be.all_reduce_wait(g->be.ctx, handle, buf, count, &done_before, &w, err, sizeof err);
    if (rc)
      st = ox_backend_error(g, &c, rc, err);
    else {
      if (done_before) g->async_done_before++;
      if (op == ONYX_REDUCE_AVG) ox_divide(buf, count, type, g->size);
    }
  }
  pthread_mutex_unlock(&g->lock);
  return st;
}

static const OnyxCollectivesExt ox_collectives_template = {
    .base = {.struct_size = sizeof(OnyxCollectivesExt), .type = ONYX_EXT_COLLECTIVES},
    .all_reduce = ox_ext_all_reduce,
    .all_gather = ox_ext_all_gather,
    .reduce_scatter = ox_ext_reduce_scatter,
    .broadcast = ox_ext_broadcast,
    .all_to_all = ox_ext_all_to_all,
    .barrier = ox_ext_barrier,
    .all_reduce_start = ox_ext_all_reduce_start,
    .all_reduce_wait = ox_ext_all_reduce_wait,
};

/* --- The world check ------------------------------------------------------------------- */

OnyxStatus* ox_process_group_check_world(OnyxProcessGroup* g, uint64_t hash, const char* what) {
  if (!g || g->size == 1) return NULL;
  uint64_t* all = calloc((size_t)g->size, sizeof *all);
  if (!all) return ox_oom();
  OxCall c = {.op = "the world check at session creation"};
  pthread_mutex_lock(&g->lock);
  OnyxStatus* st = ox_all_gather(g, &c, &hash, all, 1, ONYX_ELEM_UINT64);
  pthread_mutex_unlock(&g->lock);
  if (!st) {
    OxStr differ = {0};
    int n = 0;
    for (int32_t r = 1; r < g->size; r++)
      if (all[r] != all[0]) ox_str_addf(&differ, "%s%d", n++ ? ", " : "", (int)r);
    if (n) {
      char* text = ox_str_take(&differ);
      st = ox_status(ONYX_INVALID_MODEL,
                     "%s: mismatched world: rank%s %s %s a different model or different "
                     "collective options than rank 0 (hash %016llx on rank 0; this is rank %d)",
                     what, n > 1 ? "s" : "", text ? text : "?", n > 1 ? "have" : "has",
                     (unsigned long long)all[0], (int)g->rank);
      free(text);
    } else {
      free(ox_str_take(&differ));
    }
  }
  free(all);
  return st;
}
