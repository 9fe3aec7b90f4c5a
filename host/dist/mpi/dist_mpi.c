/* dist_mpi.c — libonyx_mpi.so, the MPI backend of Onyx's process groups
 * (ox_dist_backend.h).
 *
 * Every collective is one nonblocking MPI call (MPI_Iallreduce, ...) on a
 * duplicate of MPI_COMM_WORLD whose error handler is MPI_ERRORS_RETURN,
 * polled with MPI_Test against the caller's timeout and stop flag. MPI
 * works on staging buffers the backend owns, so a call that gives up (timeout,
 * cancellation) leaves MPI writing only into memory the backend keeps: the
 * request and its buffer go onto a pending list, and the backend is broken
 * from then on. MPI is initialized (MPI_THREAD_SERIALIZED) by the first
 * backend of the process unless the application did it, and then finalized
 * at exit (once, for all the process's groups: MPI cannot start again after
 * MPI_Finalize); the host loads this library with RTLD_NODELETE, so the exit
 * handler's code stays mapped.
 *
 * Without mpirun (a torchrun-style launch, OxDistBackendArgs.rendezvous set)
 * every process starts MPI as a singleton and the world is built through the
 * host's TCP store: Open MPI 4.1 connects separately started jobs only
 * through an ompi-server, so rank 0 starts one (unless
 * OMPI_MCA_pmix_server_uri names one already) and publishes its URI, every
 * rank points its singleton at it before MPI_Init, rank 0 opens an MPI port
 * and publishes its name, and ranks 1, 2, ... connect in turn, each
 * connection merged into one intracommunicator in rank order
 * (MPI_Comm_accept / MPI_Comm_connect / MPI_Intercomm_merge). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "../ox_dist_backend.h"
#include "onyx/onyx_distributed.h"

#define OX_EXPORT __attribute__((visibility("default")))

/* The least time a release waits for calls a broken group left pending. */
#define OX_RELEASE_GRACE_MS 5000u

typedef struct OxPending {
  MPI_Request req;
  void* buf; /* staging memory MPI may still write */
} OxPending;

/* A started all-reduce: its request, its staging buffer and handle. */
typedef struct OxAsync {
  MPI_Request req;
  void* buf;
  size_t bytes, count;
  uint64_t handle;
} OxAsync;

typedef struct OxMpi {
  MPI_Comm comm;
  /* A second duplicate for the who-is-missing exchange after a timeout
   * (ox_missing); MPI_COMM_NULL until made. */
  MPI_Comm side;
  int64_t seq;      /* collectives this rank has entered on comm */
  int64_t query_no; /* who-is-missing queries this rank has sent */
  int rank, size;
  bool broken;
  OxPending* pending;
  size_t n_pending, cap_pending;
  /* Started all-reduces not yet waited for (all_reduce_start). */
  OxAsync* async;
  size_t n_async, cap_async;
  uint64_t next_handle;
  uint32_t timeout_ms;
} OxMpi;

/* The world joined through a rendezvous (launch without mpirun), made by the
 * process's first group and kept for its later ones until MPI_Finalize. */
static MPI_Comm ox_joined_world = MPI_COMM_NULL;

/* MPI started by this library: finalized at exit, unless work is left pending. */
static bool ox_mpi_started;
static bool ox_mpi_unfinished;

static void ox_mpi_at_exit(void) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !ox_mpi_unfinished) MPI_Finalize();
}

static int ox_fail(char* err, size_t n, int code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return code;
}

static int ox_mpi_error(char* err, size_t n, const char* call, int rc) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
  return ox_fail(err, n, ONYX_RUNTIME_ERROR, "%s failed: %s", call, text);
}

static uint64_t ox_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Keeps a request MPI may still complete, with its staging buffer. */
static void ox_keep_pending(OxMpi* m, MPI_Request req, void* buf) {
  if (m->n_pending == m->cap_pending) {
    size_t cap = m->cap_pending ? 2 * m->cap_pending : 4;
    OxPending* p = realloc(m->pending, cap * sizeof *p);
    if (!p) {
      /* Without room to track it the buffer must stay allocated for good. */
      ox_mpi_unfinished = true;
      return;
    }
    m->pending = p;
    m->cap_pending = cap;
  }
  m->pending[m->n_pending++] = (OxPending){.req = req, .buf = buf};
}

/* The who-is-missing exchange. While a rank waits in a collective it answers
 * queries on the side communicator with the number of collectives it has
 * entered; a rank that times out asks every other rank and, for a short
 * window, collects the answers: a rank that does not answer is stalled
 * outside a collective (or dead), one with a smaller count is behind, and
 * when every rank has reached the collective they disagree on what they
 * called. Messages are two int64: a query {query number, sender's count}, an
 * answer {the query's number, the answerer's count}. */
#define OX_TAG_QUERY       7101
#define OX_TAG_ANSWER      7102
#define OX_QUERY_WINDOW_MS 300u

/* Sends two int64 without blocking; the buffer stays with the request. */
static void ox_send_pair(OxMpi* m, int to, int tag, int64_t a, int64_t b) {
  int64_t* buf = malloc(2 * sizeof *buf);
  if (!buf) return;
  buf[0] = a;
  buf[1] = b;
  MPI_Request r = MPI_REQUEST_NULL;
  if (MPI_Isend(buf, 2, MPI_INT64_T, to, tag, m->side, &r) != MPI_SUCCESS) {
    free(buf);
    return;
  }
  ox_keep_pending(m, r, buf);
}

/* Receives one waiting message of `tag`, if any: false when none. */
static bool ox_recv_pair(OxMpi* m, int tag, int* from, int64_t* pair) {
  int flag = 0;
  MPI_Status st;
  if (MPI_Iprobe(MPI_ANY_SOURCE, tag, m->side, &flag, &st) != MPI_SUCCESS || !flag) return false;
  if (MPI_Recv(pair, 2, MPI_INT64_T, st.MPI_SOURCE, tag, m->side, MPI_STATUS_IGNORE) != MPI_SUCCESS)
    return false;
  *from = st.MPI_SOURCE;
  return true;
}

static void ox_serve_queries(OxMpi* m) {
  if (m->side == MPI_COMM_NULL) return;
  int from;
  int64_t q[2];
  while (ox_recv_pair(m, OX_TAG_QUERY, &from, q))
    ox_send_pair(m, from, OX_TAG_ANSWER, q[0], m->seq);
}

/* Appends "rank a, b <one | many>" to out, for the ranks where state[r] == want. */
static void ox_list_ranks(char* out, size_t n, const int8_t* state, int size, int8_t want,
                          const char* one, const char* many) {
  size_t len = strlen(out);
  int count = 0;
  for (int r = 0; r < size; r++)
    if (state[r] == want) count++;
  if (!count) return;
  len += (size_t)snprintf(out + len, len < n ? n - len : 0, "%srank%s", len ? "; " : "",
                          count > 1 ? "s" : "");
  for (int r = 0, shown = 0; r < size && len < n; r++)
    if (state[r] == want)
      len += (size_t)snprintf(out + len, n - len, "%s %d", shown++ ? "," : "", r);
  if (len < n) snprintf(out + len, n - len, " %s", count > 1 ? many : one);
}

/* Asks the other ranks where they are; writes what it learned into out. */
static void ox_missing(OxMpi* m, char* out, size_t n) {
  out[0] = '\0';
  if (m->side == MPI_COMM_NULL || m->size < 2) return;
  int8_t* state = calloc((size_t)m->size, 1); /* 0 silent, 1 behind, 2 here, 3 self */
  if (!state) return;
  state[m->rank] = 3;
  /* Answers to older queries are dropped. */
  int from;
  int64_t pair[2];
  while (ox_recv_pair(m, OX_TAG_ANSWER, &from, pair)) {
  }
  const int64_t qno = ++m->query_no;
  for (int r = 0; r < m->size; r++)
    if (r != m->rank) ox_send_pair(m, r, OX_TAG_QUERY, qno, m->seq);
  int answered = 0;
  const uint64_t start = ox_now_ms();
  while (answered < m->size - 1 && ox_now_ms() - start < OX_QUERY_WINDOW_MS) {
    ox_serve_queries(m);
    if (ox_recv_pair(m, OX_TAG_ANSWER, &from, pair)) {
      if (pair[0] == qno && from >= 0 && from < m->size && !state[from]) {
        state[from] = pair[1] >= m->seq ? 2 : 1;
        answered++;
      }
      continue;
    }
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  ox_list_ranks(out, n, state, m->size, 0, "did not answer: stalled outside a collective, or dead",
                "did not answer: stalled outside a collective, or dead");
  ox_list_ranks(out, n, state, m->size, 1, "is at an earlier collective",
                "are at an earlier collective");
  if (!out[0] && answered == m->size - 1)
    snprintf(out, n,
             "every rank has reached this collective: they called different collectives or "
             "passed different counts");
  free(state);
}

/* Polls `req` until it completes, the timeout passes or the caller stops.
 * On success frees nothing; otherwise keeps (req, buf) pending, breaks the
 * backend and writes why. */
static int ox_wait(OxMpi* m, MPI_Request* req, void* buf, const char* call, const OxDistWait* w,
                   char* err, size_t n) {
  uint64_t start = ox_now_ms();
  long sleep_ns = 1000;
  for (unsigned spins = 0;; spins++) {
    int done = 0;
    int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      m->broken = true;
      if (*req != MPI_REQUEST_NULL)
        ox_keep_pending(m, *req, buf);
      else
        free(buf);
      return ox_mpi_error(err, n, call, rc);
    }
    if (done) return 0;
    if (w && w->stop && w->stop(w->stop_arg)) {
      m->broken = true;
      ox_keep_pending(m, *req, buf);
      return ox_fail(err, n, ONYX_CANCELLED,
                     "%s: cancelled while waiting for the other ranks; the process group cannot "
                     "be used after this",
                     call);
    }
    ox_serve_queries(m);
    uint64_t waited = ox_now_ms() - start;
    uint32_t limit = w ? w->timeout_ms : m->timeout_ms;
    if (waited >= limit) {
      m->broken = true;
      ox_keep_pending(m, *req, buf);
      char who[256];
      ox_missing(m, who, sizeof who);
      return ox_fail(err, n, ONYX_RUNTIME_ERROR,
                     "%s: timed out after %u ms waiting for the other %d rank%s of the group "
                     "(%s); the process group cannot be used after this",
                     call, (unsigned)limit, m->size - 1, m->size == 2 ? "" : "s",
                     who[0] ? who : "a rank stalled, died, or called another collective");
    }
    /* Spin briefly for short collectives, then back off to at most 1 ms. */
    if (spins > 200) {
      struct timespec ts = {0, sleep_ns};
      nanosleep(&ts, NULL);
      if (sleep_ns < 1000000) sleep_ns *= 2;
    }
  }
}

/* Fails when broken; otherwise counts the collective being entered. */
static int ox_check_usable(OxMpi* m, const char* call, char* err, size_t n) {
  if (m->broken)
    return ox_fail(err, n, ONYX_RUNTIME_ERROR,
                   "%s: the MPI backend is broken by an earlier failure", call);
  m->seq++;
  return 0;
}

static bool ox_mpi_type(int32_t t, MPI_Datatype* out) {
  switch (t) {
  case ONYX_ELEM_FLOAT32:
    *out = MPI_FLOAT;
    return true;
  case ONYX_ELEM_FLOAT64:
    *out = MPI_DOUBLE;
    return true;
  case ONYX_ELEM_INT8:
    *out = MPI_INT8_T;
    return true;
  case ONYX_ELEM_INT16:
    *out = MPI_INT16_T;
    return true;
  case ONYX_ELEM_INT32:
    *out = MPI_INT32_T;
    return true;
  case ONYX_ELEM_INT64:
    *out = MPI_INT64_T;
    return true;
  case ONYX_ELEM_UINT8:
    *out = MPI_UINT8_T;
    return true;
  case ONYX_ELEM_UINT16:
    *out = MPI_UINT16_T;
    return true;
  case ONYX_ELEM_UINT32:
    *out = MPI_UINT32_T;
    return true;
  case ONYX_ELEM_UINT64:
    *out = MPI_UINT64_T;
    return true;
  default:
    return false;
  }
}

static bool ox_mpi_op(int32_t op, MPI_Op* out) {
  switch (op) {
  case ONYX_REDUCE_SUM:
    *out = MPI_SUM;
    return true;
  case ONYX_REDUCE_MAX:
    *out = MPI_MAX;
    return true;
  case ONYX_REDUCE_MIN:
    *out = MPI_MIN;
    return true;
  default:
    return false;
  }
}

static size_t ox_type_size(MPI_Datatype t) {
  int s = 0;
  MPI_Type_size(t, &s);
  return (size_t)s;
}

/* The int count MPI takes; fails for counts past INT_MAX. */
static int ox_count(size_t count, const char* call, int* out, char* err, size_t n) {
  if (count > (size_t)INT_MAX)
    return ox_fail(err, n, ONYX_INVALID_ARGUMENT,
                   "%s: %zu elements exceed MPI's int count (%d); split the call", call, count,
                   INT_MAX);
  *out = (int)count;
  return 0;
}

static int ox_all_reduce(void* ctx, void* buf, size_t count, int32_t type, int32_t op,
                         const OxDistWait* w, char* err, size_t n) {
  OxMpi* m = ctx;
  const char* call = "MPI_Iallreduce";
  int rc = ox_check_usable(m, call, err, n);
  if (rc) return rc;
  MPI_Datatype dt;
  MPI_Op mop;
  if (!ox_mpi_type(type, &dt) || !ox_mpi_op(op, &mop))
    return ox_fail(err, n, ONYX_NOT_IMPLEMENTED, "%s: type %d or op %d unsupported", call,
                   (int)type, (int)op);
  int c = 0;
  if ((rc = ox_count(count, call, &c, err, n))) return rc;
  size_t bytes = count * ox_type_size(dt);
  void* tmp = malloc(bytes ? bytes : 1);
  if (!tmp) return ox_fail(err, n, ONYX_OUT_OF_MEMORY, "%s: out of memory", call);
  memcpy(tmp, buf, bytes);
  MPI_Request req = MPI_REQUEST_NULL;
  rc = MPI_Iallreduce(MPI_IN_PLACE, tmp, c, dt, mop, m->comm, &req);
  if (rc != MPI_SUCCESS) {
    free(tmp);
    m->broken = true;
    return ox_mpi_error(err, n, call, rc);
  }
  if ((rc = ox_wait(m, &req, tmp, call, w, err, n))) return rc;
  memcpy(buf, tmp, bytes);
  free(tmp);
  return 0;
}

/* Polls every started all-reduce once: Open MPI moves a nonblocking
 * collective forward only inside MPI calls, so each start and wait gives the
 * earlier ones a chance to progress while the caller computes. */
static size_t ox_progress(OxMpi* m) {
  size_t left = 0;
  for (size_t i = 0; i < m->n_async; i++) {
    int done = 0;
    if (m->async[i].req != MPI_REQUEST_NULL) MPI_Test(&m->async[i].req, &done, MPI_STATUS_IGNORE);
    if (m->async[i].req != MPI_REQUEST_NULL) left++;
  }
  return left;
}

static size_t ox_progress_fn(void* ctx) {
  OxMpi* m = ctx;
  return m->broken ? 0 : ox_progress(m);
}

static int ox_all_reduce_start(void* ctx, const void* buf, size_t count, int32_t type, int32_t op,
                               uint64_t* handle, char* err, size_t n) {
  OxMpi* m = ctx;
  const char* call = "MPI_Iallreduce (started)";
  int rc = ox_check_usable(m, call, err, n);
  if (rc) return rc;
  MPI_Datatype dt;
  MPI_Op mop;
  if (!ox_mpi_type(type, &dt) || !ox_mpi_op(op, &mop))
    return ox_fail(err, n, ONYX_NOT_IMPLEMENTED, "%s: type %d or op %d unsupported", call,
                   (int)type, (int)op);
  int c = 0;
  if ((rc = ox_count(count, call, &c, err, n))) return rc;
  if (m->n_async == m->cap_async) {
    size_t cap = m->cap_async ? 2 * m->cap_async : 8;
    OxAsync* a = realloc(m->async, cap * sizeof *a);
    if (!a) return ox_fail(err, n, ONYX_OUT_OF_MEMORY, "%s: out of memory", call);
    m->async = a;
    m->cap_async = cap;
  }
  size_t bytes = count * ox_type_size(dt);
  void* tmp = malloc(bytes ? bytes : 1);
  if (!tmp) return ox_fail(err, n, ONYX_OUT_OF_MEMORY, "%s: out of memory", call);
  memcpy(tmp, buf, bytes);
  MPI_Request req = MPI_REQUEST_NULL;
  rc = MPI_Iallreduce(MPI_IN_PLACE, tmp, c, dt, mop, m->comm, &req);
  if (rc != MPI_SUCCESS) {
    free(tmp);
    m->broken = true;
    return ox_mpi_error(err, n, call, rc);
  }
  *handle = ++m->next_handle;
  m->async[m->n_async++] =
      (OxAsync){.req = req, .buf = tmp, .bytes = bytes, .count = count, .handle = *handle};
  ox_progress(m);
  return 0;
}

static int ox_all_reduce_wait(void* ctx, uint64_t handle, void* buf, size_t count, int* done_before,
                              const OxDistWait* w, char* err, size_t n) {
  OxMpi* m = ctx;
  const char* call = "MPI_Iallreduce (waited)";
  *done_before = 0;
  size_t i = 0;
  while (i < m->n_async && m->async[i].handle != handle)
    i++;
  if (i == m->n_async)
    return ox_fail(err, n, ONYX_INVALID_ARGUMENT,
                   "%s: handle %llu is no started all-reduce (waited twice, or never started)",
                   call, (unsigned long long)handle);
  OxAsync a = m->async[i];
  memmove(m->async + i, m->async + i + 1, (m->n_async - i - 1) * sizeof *m->async);
  m->n_async--;
  if (m->broken) {
    ox_keep_pending(m, a.req, a.buf);
    return ox_fail(err, n, ONYX_RUNTIME_ERROR,
                   "%s: the MPI backend is broken by an earlier failure", call);
  }
  int done = 0;
  if (MPI_Test(&a.req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) *done_before = 1;
  int rc = done ? 0 : ox_wait(m, &a.req, a.buf, call, w, err, n);
  if (rc) return rc; /* ox_wait kept or freed the buffer */
  if (count != a.count) {
    free(a.buf);
    return ox_fail(err, n, ONYX_INVALID_ARGUMENT, "%s: %zu elements waited for, %zu started", call,
                   count, a.count);
  }
  memcpy(buf, a.buf, a.bytes);
  free(a.buf);
  return 0;
}

/* Staging for the byte-moving collectives: `in` bytes of input (copied from
 * send) followed by `out` bytes of output. */
static int ox_stage(const void* send, size_t in, size_t out, const char* call, void** tmp,
                    char* err, size_t n) {
  size_t total = in + out;
  if (total < in) return ox_fail(err, n, ONYX_INVALID_ARGUMENT, "%s: size overflows", call);
  *tmp = malloc(total ? total : 1);
  if (!*tmp) return ox_fail(err, n, ONYX_OUT_OF_MEMORY, "%s: out of memory", call);
  if (in) memcpy(*tmp, send, in);
  return 0;
}

static int ox_all_gather(void* ctx, const void* send, void* recv, size_t count, size_t elem,
                         const OxDistWait* w, char* err, size_t n) {
  OxMpi* m = ctx;
  const char* call = "MPI_Iallgather";
  int rc = ox_check_usable(m, call, err, n);
  if (rc) return rc;
  int c = 0;
  size_t bytes = count * elem; /* the host checked the products */
  if ((rc = ox_count(bytes, call, &c, err, n))) return rc;
  size_t all = bytes * (size_t)m->size;
  void* tmp = NULL;
  if ((rc = ox_stage(send, bytes, all, call, &tmp, err, n))) return rc;
  MPI_Request req = MPI_REQUEST_NULL;
  rc = MPI_Iallgather(tmp, c, MPI_BYTE, (char*)tmp + bytes, c, MPI_BYTE, m->comm, &req);
  if (rc != MPI_SUCCESS) {
    free(tmp);
    m->broken = true;
    return ox_mpi_error(err, n, call, rc);
  }
  if ((rc = ox_wait(m, &req, tmp, call, w, err, n))) return rc;
  memcpy(recv, (char*)tmp + bytes, all);
  free(tmp);
  return 0;
}

static int ox_reduce_scatter(void* ctx, const void* send, void* recv, size_t count, int32_t type,
                             int32_t op, const OxDistWait* w, char* err, size_t n) {
  OxMpi* m = ctx;
  const char* call = "MPI_Ireduce_scatter_block";
  int rc = ox_check_usable(m, call, err, n);
  if (rc) return rc;
  MPI_Datatype dt;
  MPI_Op mop;
  if (!ox_mpi_type(type, &dt) || !ox_mpi_op(op, &mop))
    return ox_fail(err, n, ONYX_NOT_IMPLEMENTED, "%s: type %d or op %d unsupported", call,
                   (int)type, (int)op);
  int c = 0;
  if ((rc = ox_count(count, call, &c, err, n))) return rc;
  size_t bytes = count * ox_type_size(dt);
  void* tmp = NULL;
  if ((rc = ox_stage(send, bytes * (size_t)m->size, bytes, call, &tmp, err, n))) return rc;
  char* out = (char*)tmp + bytes * (size_t)m->size;
  MPI_Request req = MPI_REQUEST_NULL;
  rc = MPI_Ireduce_scatter_block(tmp, out, c, dt, mop, m->comm, &req);
  if (rc != MPI_SUCCESS) {
    free(tmp);
    m->broken = true;
    return ox_mpi_error(err, n, call, rc);
  }
  if ((rc = ox_wait(m, &req, tmp, call, w, err, n))) return rc;
  memcpy(recv, out, bytes);
  free(tmp);
  return 0;
}

static int ox_broadcast(void* ctx, void* buf, size_t bytes, int32_t root, const OxDistWait* w,
                        char* err, size_t n) {
  OxMpi* m = ctx;
  const char* call = "MPI_Ibcast";
  int rc = ox_check_usable(m, call, err, n);
  if (rc) return rc;
  int c = 0;
  if ((rc = ox_count(bytes, call, &c, err, n))) return rc;
  void* tmp = NULL;
  if ((rc = ox_stage(buf, bytes, 0, call, &tmp, err, n))) return rc;
  MPI_Request req = MPI_REQUEST_NULL;
  rc = MPI_Ibcast(tmp, c, MPI_BYTE, root, m->comm, &req);
  if (rc != MPI_SUCCESS) {
    free(tmp);
    m->broken = true;
    return ox_mpi_error(err, n, call, rc);
  }
  if ((rc = ox_wait(m, &req, tmp, call, w, err, n))) return rc;
  memcpy(buf, tmp, bytes);
  free(tmp);
  return 0;
}

static int ox_all_to_all(void* ctx, const void* send, void* recv, size_t count, size_t elem,
                         const OxDistWait* w, char* err, size_t n) {
  OxMpi* m = ctx;
  const char* call = "MPI_Ialltoall";
  int rc = ox_check_usable(m, call, err, n);
  if (rc) return rc;
  int c = 0;
  size_t bytes = count * elem;
  if ((rc = ox_count(bytes, call, &c, err, n))) return rc;
  size_t all = bytes * (size_t)m->size;
  void* tmp = NULL;
  if ((rc = ox_stage(send, all, all, call, &tmp, err, n))) return rc;
  MPI_Request req = MPI_REQUEST_NULL;
  rc = MPI_Ialltoall(tmp, c, MPI_BYTE, (char*)tmp + all, c, MPI_BYTE, m->comm, &req);
  if (rc != MPI_SUCCESS) {
    free(tmp);
    m->broken = true;
    return ox_mpi_error(err, n, call, rc);
  }
  if ((rc = ox_wait(m, &req, tmp, call, w, err, n))) return rc;
  memcpy(recv, (char*)tmp + all, all);
  free(tmp);
  return 0;
}

static int ox_barrier(void* ctx, const OxDistWait* w, char* err, size_t n) {
  OxMpi* m = ctx;
  const char* call = "MPI_Ibarrier";
  int rc = ox_check_usable(m, call, err, n);
  if (rc) return rc;
  MPI_Request req = MPI_REQUEST_NULL;
  rc = MPI_Ibarrier(m->comm, &req);
  if (rc != MPI_SUCCESS) {
    m->broken = true;
    return ox_mpi_error(err, n, call, rc);
  }
  return ox_wait(m, &req, NULL, call, w, err, n);
}

static void ox_release(void* ctx) {
  OxMpi* m = ctx;
  if (!m) return;
  /* Work a broken call left: give the other ranks one more timeout (at least
   * OX_RELEASE_GRACE_MS) to match it, so that its buffers can be freed and
   * MPI finalized cleanly. */
  uint64_t start = ox_now_ms();
  const uint64_t grace =
      m->timeout_ms > OX_RELEASE_GRACE_MS ? m->timeout_ms : (uint64_t)OX_RELEASE_GRACE_MS;
  for (size_t i = 0; i < m->n_async; i++)
    ox_keep_pending(m, m->async[i].req, m->async[i].buf);
  free(m->async);
  size_t left = 0;
  for (size_t i = 0; i < m->n_pending; i++) {
    OxPending* p = &m->pending[i];
    int done = 0;
    while (!done) {
      if (MPI_Test(&p->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
      if (done || ox_now_ms() - start >= grace) break;
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
    if (done)
      free(p->buf);
    else
      left++; /* MPI may still write it: kept for the process's lifetime */
  }
  free(m->pending);
  if (left) {
    ox_mpi_unfinished = true;
  } else {
    if (m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    if (m->side != MPI_COMM_NULL) MPI_Comm_free(&m->side);
  }
  free(m);
}

/* --- The world of a launch without mpirun ------------------------------------------- */

#define OX_KEY_SERVER_URI "onyx/mpi/ompi-server-uri"
#define OX_KEY_PORT       "onyx/mpi/port"
#define OX_URI_MAX        1024

/* Starts `ompi-server` (openmpi-bin) as a child that dies with this process
 * and reads the URI it reports into uri. */
static int ox_start_ompi_server(uint32_t timeout_ms, char* uri, size_t cap, char* err, size_t n) {
  char dir[] = "/tmp/onyx-ompi-server-XXXXXX";
  if (!mkdtemp(dir))
    return ox_fail(err, n, ONYX_RUNTIME_ERROR, "cannot make a folder for ompi-server's URI: %s",
                   strerror(errno));
  char path[sizeof dir + 8];
  snprintf(path, sizeof path, "%s/uri", dir);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    rmdir(dir);
    return ox_fail(err, n, ONYX_RUNTIME_ERROR, "cannot fork to start ompi-server: %s",
                   strerror(errno));
  }
  if (pid == 0) {
    /* The server lives as long as rank 0's creating thread. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
    }
    execlp("ompi-server", "ompi-server", "--no-daemonize", "-r", path, (char*)NULL);
    _exit(127);
  }
  const uint64_t start = ox_now_ms();
  int rc = 0;
  for (;;) {
    FILE* f = fopen(path, "r");
    if (f) {
      char line[OX_URI_MAX];
      bool got = fgets(line, sizeof line, f) && strchr(line, '\n');
      fclose(f);
      if (got) {
        line[strcspn(line, "\r\n")] = '\0';
        snprintf(uri, cap, "%s", line);
        break;
      }
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      rc = ox_fail(err, n, ONYX_NOT_FOUND,
                   "ompi-server exited (%s %d) before reporting its URI; a launch without mpirun "
                   "needs Open MPI's ompi-server (Debian: openmpi-bin) on rank 0's PATH, or "
                   "OMPI_MCA_pmix_server_uri naming a running one",
                   WIFEXITED(status) ? "status" : "signal",
                   WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
      break;
    }
    if (ox_now_ms() - start >= timeout_ms) {
      kill(pid, SIGTERM);
      waitpid(pid, NULL, 0);
      rc = ox_fail(err, n, ONYX_RUNTIME_ERROR, "ompi-server reported no URI within %u ms",
                   (unsigned)timeout_ms);
      break;
    }
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
  }
  unlink(path);
  rmdir(dir);
  return rc;
}

/* Points this process's MPI at rank 0's ompi-server (before MPI_Init). */
static int ox_server_uri(const OxDistRendezvous* rv, uint32_t timeout_ms, char* err, size_t n) {
  char uri[OX_URI_MAX] = "";
  const char* given = getenv("OMPI_MCA_pmix_server_uri");
  if (rv->rank == 0) {
    if (given && *given) {
      snprintf(uri, sizeof uri, "%s", given);
    } else {
      int rc = ox_start_ompi_server(timeout_ms, uri, sizeof uri, err, n);
      if (rc) return rc;
    }
    int rc = rv->set(rv->ctx, OX_KEY_SERVER_URI, uri, strlen(uri), err, n);
    if (rc) return rc;
  } else {
    size_t len = 0;
    int rc = rv->get(rv->ctx, OX_KEY_SERVER_URI, uri, sizeof uri - 1, &len, err, n);
    if (rc) return rc;
    uri[len] = '\0';
  }
  /* Open MPI reads its MCA parameters from the environment at MPI_Init. */
  if ((!given || strcmp(given, uri)) && setenv("OMPI_MCA_pmix_server_uri", uri, 1))
    return ox_fail(err, n, ONYX_OUT_OF_MEMORY, "setenv OMPI_MCA_pmix_server_uri failed");
  return 0;
}

/* Joins the singletons into one intracommunicator in rank order. */
static int ox_join(const OxDistRendezvous* rv, MPI_Comm* out, char* err, size_t n) {
  *out = MPI_COMM_NULL;
  int self_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &self_size);
  if (self_size != 1)
    return ox_fail(err, n, ONYX_INVALID_ARGUMENT,
                   "a launch without mpirun found an MPI world of %d processes (expected an MPI "
                   "singleton); unset RANK/WORLD_SIZE under mpirun",
                   self_size);
  char port[MPI_MAX_PORT_NAME + 1] = "";
  int rc = 0;
  if (rv->rank == 0) {
    if ((rc = MPI_Open_port(MPI_INFO_NULL, port)) != MPI_SUCCESS)
      return ox_mpi_error(err, n, "MPI_Open_port", rc);
    if ((rc = rv->set(rv->ctx, OX_KEY_PORT, port, strlen(port), err, n))) {
      MPI_Close_port(port);
      return rc;
    }
  } else {
    size_t len = 0;
    if ((rc = rv->get(rv->ctx, OX_KEY_PORT, port, MPI_MAX_PORT_NAME, &len, err, n))) return rc;
    port[len] = '\0';
  }
  MPI_Comm intra = MPI_COMM_NULL;
  if (rv->rank == 0 && (rc = MPI_Comm_dup(MPI_COMM_SELF, &intra)) != MPI_SUCCESS) {
    MPI_Close_port(port);
    return ox_mpi_error(err, n, "MPI_Comm_dup", rc);
  }
  /* Step k adds rank k: it connects, ranks 0..k-1 accept together. The
   * acceptors first wait (bounded) for rank k's "ready" key, so a rank that
   * never starts gives a timeout instead of an accept that never returns. */
  for (int32_t k = 1; k < rv->size && !rc; k++) {
    if (rv->rank > k) continue;
    char ready[64];
    snprintf(ready, sizeof ready, "onyx/mpi/ready/%d", (int)k);
    MPI_Comm inter = MPI_COMM_NULL;
    if (rv->rank == k) {
      if ((rc = rv->set(rv->ctx, ready, "1", 1, err, n))) break;
      rc = MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
      if (rc != MPI_SUCCESS) {
        rc = ox_mpi_error(err, n, "MPI_Comm_connect", rc);
        break;
      }
    } else {
      char one[2];
      size_t len = 0;
      if ((rc = rv->get(rv->ctx, ready, one, sizeof one, &len, err, n))) {
        char why[512];
        snprintf(why, sizeof why, "%s", err);
        ox_fail(err, n, rc, "rank %d never came to join the MPI world: %s", (int)k, why);
        break;
      }
      rc = MPI_Comm_accept(port, MPI_INFO_NULL, 0, intra, &inter);
      if (rc != MPI_SUCCESS) {
        rc = ox_mpi_error(err, n, "MPI_Comm_accept", rc);
        break;
      }
    }
    MPI_Comm merged = MPI_COMM_NULL;
    rc = MPI_Intercomm_merge(inter, rv->rank == k, &merged);
    MPI_Comm_disconnect(&inter);
    if (rc != MPI_SUCCESS) {
      rc = ox_mpi_error(err, n, "MPI_Intercomm_merge", rc);
      break;
    }
    if (intra != MPI_COMM_NULL) MPI_Comm_free(&intra);
    intra = merged;
    MPI_Comm_set_errhandler(intra, MPI_ERRORS_RETURN);
  }
  if (rv->rank == 0) MPI_Close_port(port);
  if (!rc) {
    int r = -1, s = 0;
    MPI_Comm_rank(intra, &r);
    MPI_Comm_size(intra, &s);
    if (r != rv->rank || s != rv->size)
      rc =
          ox_fail(err, n, ONYX_RUNTIME_ERROR,
                  "the joined MPI world gives this process rank %d of %d, the launch rank %d of %d",
                  r, s, (int)rv->rank, (int)rv->size);
  }
  if (rc) {
    if (intra != MPI_COMM_NULL) MPI_Comm_free(&intra);
    return rc;
  }
  *out = intra;
  return 0;
}

OX_EXPORT int onyx_dist_backend_init(const OxDistBackendArgs* args, OxDistBackend* out, char* err,
                                     size_t n);

OX_EXPORT int onyx_dist_backend_init(const OxDistBackendArgs* args, OxDistBackend* out, char* err,
                                     size_t n) {
  if (!args || !out || args->version != OX_DIST_BACKEND_VERSION)
    return ox_fail(err, n, ONYX_ABI_MISMATCH, "backend interface version %u, expected %u",
                   args ? (unsigned)args->version : 0u, (unsigned)OX_DIST_BACKEND_VERSION);
  int inited = 0, finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    return ox_fail(err, n, ONYX_FAIL,
                   "MPI was finalized already in this process, and MPI cannot start twice");
  const OxDistRendezvous* rv = args->rendezvous;
  const uint32_t timeout_ms =
      args->timeout_ms ? args->timeout_ms : ONYX_PROCESS_GROUP_DEFAULT_TIMEOUT_MS;
  MPI_Initialized(&inited);
  if (rv && ox_joined_world != MPI_COMM_NULL) {
    /* A later group of the process: the world joined by the first. */
    int r = -1, sz = 0;
    MPI_Comm_rank(ox_joined_world, &r);
    MPI_Comm_size(ox_joined_world, &sz);
    if (r != rv->rank || sz != rv->size)
      return ox_fail(err, n, ONYX_INVALID_ARGUMENT,
                     "this process joined an MPI world as rank %d of %d; a group of rank %d of %d "
                     "cannot be made in it",
                     r, sz, (int)rv->rank, (int)rv->size);
  } else if (rv && inited) {
    return ox_fail(err, n, ONYX_FAIL,
                   "MPI was initialized before the process group of a launch without mpirun: "
                   "the rendezvous must point MPI at the ompi-server first (create the group "
                   "before calling MPI_Init, or launch with mpirun)");
  } else if (rv) {
    int rc = ox_server_uri(rv, timeout_ms, err, n);
    if (rc) return rc;
  }
  if (!inited) {
    int provided = 0;
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) return ox_mpi_error(err, n, "MPI_Init_thread", rc);
    if (!ox_mpi_started) {
      ox_mpi_started = true;
      atexit(ox_mpi_at_exit);
    }
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (rv && ox_joined_world == MPI_COMM_NULL) {
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    int rc = ox_join(rv, &ox_joined_world, err, n);
    if (rc) {
      ox_mpi_unfinished = true; /* a half-made connection: no clean finalize */
      return rc;
    }
  }
  MPI_Comm world = rv ? ox_joined_world : MPI_COMM_WORLD;
  OxMpi* m = calloc(1, sizeof *m);
  if (!m) return ox_fail(err, n, ONYX_OUT_OF_MEMORY, "out of memory");
  m->comm = MPI_COMM_NULL;
  m->side = MPI_COMM_NULL;
  m->timeout_ms = timeout_ms;
  MPI_Comm_rank(world, &m->rank);
  MPI_Comm_size(world, &m->size);
  /* The group's own communicator, so the application's MPI traffic never
   * matches ours; duplicated without blocking, bounded like a collective. */
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Comm_idup(world, &m->comm, &req);
  if (rc != MPI_SUCCESS) {
    free(m);
    return ox_mpi_error(err, n, "MPI_Comm_idup", rc);
  }
  OxDistWait w = {.timeout_ms = m->timeout_ms};
  if ((rc = ox_wait(m, &req, NULL, "MPI_Comm_idup", &w, err, n))) {
    free(m->pending);
    free(m);
    ox_mpi_unfinished = true;
    return rc;
  }
  MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
  /* The side communicator is stored only once made: the wait below answers
   * queries on m->side when it is set. */
  MPI_Comm side = MPI_COMM_NULL;
  rc = MPI_Comm_idup(world, &side, &req);
  if (rc != MPI_SUCCESS) rc = ox_mpi_error(err, n, "MPI_Comm_idup", rc);
  if (!rc) rc = ox_wait(m, &req, NULL, "MPI_Comm_idup", &w, err, n);
  if (rc) {
    free(m->pending);
    free(m);
    ox_mpi_unfinished = true;
    return rc;
  }
  m->side = side;
  MPI_Comm_set_errhandler(m->side, MPI_ERRORS_RETURN);
  const char* local = rv ? NULL : getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  *out = (OxDistBackend){
      .version = OX_DIST_BACKEND_VERSION,
      .ctx = m,
      .rank = m->rank,
      .size = m->size,
      .local_rank = rv      ? rv->local_rank
                    : local ? atoi(local)
                            : 0,
      .name = "mpi",
      .all_reduce = ox_all_reduce,
      .all_gather = ox_all_gather,
      .reduce_scatter = ox_reduce_scatter,
      .broadcast = ox_broadcast,
      .all_to_all = ox_all_to_all,
      .barrier = ox_barrier,
      .all_reduce_start = ox_all_reduce_start,
      .all_reduce_wait = ox_all_reduce_wait,
      .progress = ox_progress_fn,
      .release = ox_release,
  };
  return 0;
}
