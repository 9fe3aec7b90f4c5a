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
 * handler's code stays mapped. */
#include <limits.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../ox_dist_backend.h"
#include "onyx/onyx_distributed.h"

#define OX_EXPORT __attribute__((visibility("default")))

/* The least time a release waits for calls a broken group left pending. */
#define OX_RELEASE_GRACE_MS 5000u

typedef struct OxPending {
  MPI_Request req;
  void* buf; /* staging memory MPI may still write */
} OxPending;

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
  uint32_t timeout_ms;
} OxMpi;

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
  MPI_Initialized(&inited);
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
  OxMpi* m = calloc(1, sizeof *m);
  if (!m) return ox_fail(err, n, ONYX_OUT_OF_MEMORY, "out of memory");
  m->comm = MPI_COMM_NULL;
  m->side = MPI_COMM_NULL;
  m->timeout_ms = args->timeout_ms ? args->timeout_ms : ONYX_PROCESS_GROUP_DEFAULT_TIMEOUT_MS;
  MPI_Comm_rank(MPI_COMM_WORLD, &m->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &m->size);
  /* The group's own communicator, so the application's MPI traffic never
   * matches ours; duplicated without blocking, bounded like a collective. */
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Comm_idup(MPI_COMM_WORLD, &m->comm, &req);
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
  rc = MPI_Comm_idup(MPI_COMM_WORLD, &side, &req);
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
  const char* local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  *out = (OxDistBackend){
      .version = OX_DIST_BACKEND_VERSION,
      .ctx = m,
      .rank = m->rank,
      .size = m->size,
      .local_rank = local ? atoi(local) : 0,
      .name = "mpi",
      .all_reduce = ox_all_reduce,
      .all_gather = ox_all_gather,
      .reduce_scatter = ox_reduce_scatter,
      .broadcast = ox_broadcast,
      .all_to_all = ox_all_to_all,
      .barrier = ox_barrier,
      .release = ox_release,
  };
  return 0;
}
