/* process_group.c — the process group of onyx_distributed.h: launch
 * detection, loading the backend library, argument checks and the
 * collectives (local copies for a world of one rank), the provider extension
 * and the session's world check. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ox_checked.h"
#include "ox_common.h"
#include "ox_dist.h"
#include "ox_dist_backend.h"
#include "ox_providers.h"

#define OX_MPI_LIB_NAME "libonyx_mpi.so"
#define OX_MPI_PACKAGE_HINT                                                                        \
  "libonyx_mpi.so is built when CMake finds MPI (ONYX_WITH_MPI) and needs Open MPI's "             \
  "libmpi.so.40 (Debian: apt install libopenmpi-dev openmpi-bin)"

struct OnyxProcessGroup {
  int32_t rank, size, local_rank;
  uint32_t timeout_ms;
  void* lib;        /* dlopen handle of the backend; NULL for a world of one */
  OxDistBackend be; /* valid when lib is set */
  char* broken;     /* first failure that broke the group; NULL: healthy */
  OnyxCollectivesExt ext;
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

static OnyxStatus* ox_load_backend(OnyxProcessGroup* g, const OnyxProcessGroupOptions* o) {
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
  OxDistBackendArgs args = {.version = OX_DIST_BACKEND_VERSION, .timeout_ms = g->timeout_ms};
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
  if (strcmp(backend, "auto") && strcmp(backend, "mpi") && strcmp(backend, "none"))
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_process_group_create: backend '%s' (expected \"auto\", \"mpi\" or "
                     "\"none\")",
                     backend);
  OxLaunch launch = {.size = 1, .source = "none"};
  OX_TRY(ox_detect_launch(&o, &launch));
  bool want_mpi = !strcmp(backend, "mpi") || (!strcmp(backend, "auto") && launch.size > 1);
  if (launch.size > 1 && !strcmp(backend, "none"))
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_process_group_create: backend \"none\" serves a world of one rank; "
                     "this one has %d (%s)",
                     (int)launch.size, launch.source);
  if (want_mpi && !strcmp(launch.source, "torchrun") && !getenv("OMPI_COMM_WORLD_SIZE")) {
    const char* addr = getenv("MASTER_ADDR");
    const char* port = getenv("MASTER_PORT");
    return ox_status(ONYX_NOT_IMPLEMENTED,
                     "onyx_process_group_create: launched torchrun-style (RANK=%d WORLD_SIZE=%d "
                     "MASTER_ADDR=%s MASTER_PORT=%s) without mpirun; Onyx's process groups meet "
                     "through MPI, which has no rendezvous at MASTER_ADDR: launch with "
                     "`mpirun -np %d ...`",
                     (int)launch.rank, (int)launch.size, addr ? addr : "(unset)",
                     port ? port : "(unset)", (int)launch.size);
  }
  OnyxProcessGroup* g = calloc(1, sizeof *g);
  if (!g) return ox_oom();
  pthread_mutex_init(&g->lock, NULL);
  g->rank = launch.rank;
  g->size = launch.size;
  g->local_rank = o.local_rank >= 0 ? o.local_rank : launch.local_rank;
  g->timeout_ms = o.timeout_ms ? o.timeout_ms : ONYX_PROCESS_GROUP_DEFAULT_TIMEOUT_MS;
  if (want_mpi) {
    OnyxStatus* st = ox_load_backend(g, &o);
    if (!st && (g->be.size != launch.size || g->be.rank != launch.rank)) {
      st = ox_status(ONYX_INVALID_ARGUMENT,
                     "onyx_process_group_create: rank %d of %d (%s) disagrees with MPI's rank "
                     "%d of %d; start the %d processes with `mpirun -np %d ...`",
                     (int)launch.rank, (int)launch.size, launch.source, (int)g->be.rank,
                     (int)g->be.size, (int)launch.size, (int)launch.size);
    }
    if (st) {
      onyx_process_group_release(g);
      return st;
    }
    if (o.local_rank < 0) g->local_rank = g->be.local_rank;
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
  if (g->lib) {
    if (g->be.release) g->be.release(g->be.ctx);
    dlclose(g->lib);
  }
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
  return g && g->lib ? "mpi" : "none";
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

static const OnyxCollectivesExt ox_collectives_template = {
    .base = {.struct_size = sizeof(OnyxCollectivesExt), .type = ONYX_EXT_COLLECTIVES},
    .all_reduce = ox_ext_all_reduce,
    .all_gather = ox_ext_all_gather,
    .reduce_scatter = ox_ext_reduce_scatter,
    .broadcast = ox_ext_broadcast,
    .all_to_all = ox_ext_all_to_all,
    .barrier = ox_ext_barrier,
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
