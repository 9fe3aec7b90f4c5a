/* tcp_store.c — the TCP key-value store of ox_tcp_store.h: a poll()-driven
 * server thread and a blocking client with deadlines. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "ox_common.h"
#include "ox_tcp_store.h"
#include "onyx/onyx_distributed.h"

enum { OX_OP_HELLO = 0, OX_OP_SET = 1, OX_OP_GET = 2, OX_OP_ADD = 3 };
enum { OX_ST_OK = 0, OX_ST_MISSING = 1, OX_ST_BAD = 2 };

#define OX_STORE_MAX_LISTEN 4
#define OX_STORE_MAX_CONN   4096
#define OX_STORE_TICK_MS    20
/* How long a request in flight ignores a cancellation (ox_request). */
#define OX_STORE_REQUEST_GRACE_MS 500

static uint64_t ox_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void ox_sleep_ms(unsigned ms) {
  struct timespec ts = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000L};
  nanosleep(&ts, NULL);
}

static void ox_put_u32(unsigned char* p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}
static uint32_t ox_get_u32(const unsigned char* p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}
static void ox_put_i64(unsigned char* p, int64_t v) {
  uint64_t u = (uint64_t)v;
  for (int i = 7; i >= 0; i--, u >>= 8)
    p[i] = (unsigned char)u;
}
static int64_t ox_get_i64(const unsigned char* p) {
  uint64_t u = 0;
  for (int i = 0; i < 8; i++)
    u = u << 8 | p[i];
  return (int64_t)u;
}

static bool ox_set_nonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  return fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

/* --- The server -------------------------------------------------------------------- */

typedef struct OxEntry {
  char* key;
  unsigned char* val;
  size_t len;
} OxEntry;

typedef struct OxConn {
  int fd;
  unsigned char* in; /* the frame being read: 4 length bytes, then the body */
  size_t in_len, in_cap;
  unsigned char* out; /* replies not yet written */
  size_t out_len, out_off;
  bool hello; /* the HELLO frame arrived */
} OxConn;

typedef struct OxServer {
  int listen_fd[OX_STORE_MAX_LISTEN];
  int n_listen;
  int port;
  OxConn* conn;
  size_t n_conn;
  OxEntry* entries;
  size_t n_entries, cap_entries, total_bytes;
  pthread_t thread;
  pthread_mutex_t lock; /* guards closing, close_deadline, rejected and reason */
  /* Set by the owner's close: the thread ends once no client is connected,
   * or at the deadline. */
  bool closing;
  uint64_t close_deadline;
  uint64_t rejected;
  char reason[256];
} OxServer;

struct OxStore {
  int fd;
  OxServer* server; /* owned when this process serves */
  uint32_t timeout_ms, close_grace_ms;
  int32_t (*stop)(const void*);
  const void* stop_arg;
  pthread_mutex_t lock; /* one request at a time on fd */
  bool broken;          /* a request failed half-way: the stream is out of step */
  char address[300];
};

static void ox_conn_close(OxServer* sv, size_t i, const char* why) {
  OxConn* c = &sv->conn[i];
  if (why) {
    pthread_mutex_lock(&sv->lock);
    sv->rejected++;
    snprintf(sv->reason, sizeof sv->reason, "%s", why);
    pthread_mutex_unlock(&sv->lock);
  }
  close(c->fd);
  free(c->in);
  free(c->out);
  sv->conn[i] = sv->conn[--sv->n_conn];
}

static OxEntry* ox_find(OxServer* sv, const char* key, size_t klen) {
  for (size_t i = 0; i < sv->n_entries; i++)
    if (strlen(sv->entries[i].key) == klen && !memcmp(sv->entries[i].key, key, klen))
      return &sv->entries[i];
  return NULL;
}

/* Stores (key, val); false when out of memory or over the total bound. */
static bool ox_put(OxServer* sv, const char* key, size_t klen, const unsigned char* val,
                   size_t len) {
  OxEntry* e = ox_find(sv, key, klen);
  size_t old = e ? e->len : 0;
  if (sv->total_bytes - old + len > OX_STORE_MAX_TOTAL) return false;
  unsigned char* copy = malloc(len ? len : 1);
  if (!copy) return false;
  if (len) memcpy(copy, val, len);
  if (!e) {
    if (sv->n_entries == sv->cap_entries) {
      size_t cap = sv->cap_entries ? 2 * sv->cap_entries : 16;
      OxEntry* ne = realloc(sv->entries, cap * sizeof *ne);
      if (!ne) {
        free(copy);
        return false;
      }
      sv->entries = ne;
      sv->cap_entries = cap;
    }
    char* k = malloc(klen + 1);
    if (!k) {
      free(copy);
      return false;
    }
    memcpy(k, key, klen);
    k[klen] = '\0';
    e = &sv->entries[sv->n_entries++];
    *e = (OxEntry){.key = k};
  }
  free(e->val);
  e->val = copy;
  e->len = len;
  sv->total_bytes = sv->total_bytes - old + len;
  return true;
}

/* Queues a reply frame; false when out of memory. */
static bool ox_reply(OxConn* c, int status, const void* payload, size_t len) {
  size_t frame = 4 + 1 + len;
  unsigned char* out = realloc(c->out, c->out_len + frame);
  if (!out) return false;
  c->out = out;
  unsigned char* p = out + c->out_len;
  ox_put_u32(p, (uint32_t)(1 + len));
  p[4] = (unsigned char)status;
  if (len) memcpy(p + 5, payload, len);
  c->out_len += frame;
  return true;
}

/* Handles one complete request body; NULL, or why the connection is dropped. */
static const char* ox_handle(OxServer* sv, OxConn* c, const unsigned char* b, size_t n) {
  if (n < 3) return "a request shorter than its header";
  const int op = b[0];
  const size_t klen = (size_t)b[1] << 8 | b[2];
  if (!klen || klen > OX_STORE_MAX_KEY || 3 + klen > n) return "a request with a bad key length";
  const char* key = (const char*)b + 3;
  const unsigned char* val = b + 3 + klen;
  const size_t vlen = n - 3 - klen;
  if (!c->hello) {
    if (op != OX_OP_HELLO || klen != strlen(OX_STORE_MAGIC) || memcmp(key, OX_STORE_MAGIC, klen))
      return "a first request that is not the store's HELLO";
    c->hello = true;
    return ox_reply(c, OX_ST_OK, NULL, 0) ? NULL : "out of memory";
  }
  switch (op) {
  case OX_OP_SET:
    if (vlen > OX_STORE_MAX_VALUE) return "a value over the size bound";
    if (!ox_put(sv, key, klen, val, vlen))
      return ox_reply(c, OX_ST_BAD, "out of memory or over the store's total bound", 46)
                 ? NULL
                 : "out of memory";
    return ox_reply(c, OX_ST_OK, NULL, 0) ? NULL : "out of memory";
  case OX_OP_GET: {
    if (vlen) return "a GET with a value";
    OxEntry* e = ox_find(sv, key, klen);
    bool ok = e ? ox_reply(c, OX_ST_OK, e->val, e->len) : ox_reply(c, OX_ST_MISSING, NULL, 0);
    return ok ? NULL : "out of memory";
  }
  case OX_OP_ADD: {
    if (vlen != 8) return "an ADD without an 8-byte delta";
    OxEntry* e = ox_find(sv, key, klen);
    if (e && e->len != 8) {
      static const char msg[] = "the key holds a value that is not a counter";
      return ox_reply(c, OX_ST_BAD, msg, sizeof msg - 1) ? NULL : "out of memory";
    }
    int64_t sum = (e ? ox_get_i64(e->val) : 0) + ox_get_i64(val);
    unsigned char enc[8];
    ox_put_i64(enc, sum);
    if (!ox_put(sv, key, klen, enc, 8))
      return ox_reply(c, OX_ST_BAD, "out of memory", 13) ? NULL : "out of memory";
    return ox_reply(c, OX_ST_OK, enc, 8) ? NULL : "out of memory";
  }
  default:
    return "an unknown op";
  }
}

/* Reads what is available on c; NULL, or why the connection is dropped
 * ("" for a clean hang-up between frames). */
static const char* ox_conn_read(OxServer* sv, OxConn* c) {
  for (;;) {
    size_t want = 4;
    if (c->in_len >= 4) {
      uint32_t body = ox_get_u32(c->in);
      if (body > OX_STORE_MAX_FRAME) return "a frame over the size bound";
      want = 4 + (size_t)body;
    }
    if (c->in_len == want && want > 4) {
      const char* why = ox_handle(sv, c, c->in + 4, want - 4);
      c->in_len = 0;
      if (why) return why;
      continue;
    }
    /* The buffer grows with what arrives (doubling from 64 KiB), not with
     * what a frame announces: a peer that announces large frames and sends
     * little holds little memory. */
    if (c->in_len == c->in_cap) {
      size_t cap = 2 * c->in_cap < 65536u ? 65536u : 2 * c->in_cap;
      if (cap > want) cap = want;
      unsigned char* in = realloc(c->in, cap);
      if (!in) return "out of memory";
      c->in = in;
      c->in_cap = cap;
    }
    const size_t room = (want < c->in_cap ? want : c->in_cap) - c->in_len;
    ssize_t r = recv(c->fd, c->in + c->in_len, room, 0);
    if (r > 0) {
      c->in_len += (size_t)r;
      if (c->in_len == 4 && ox_get_u32(c->in) == 0) return "an empty frame";
      continue;
    }
    if (r == 0) return c->in_len ? "a connection closed in the middle of a frame" : "";
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return NULL;
    return c->in_len ? "a connection reset in the middle of a frame" : "";
  }
}

static bool ox_conn_write(OxConn* c) {
  while (c->out_off < c->out_len) {
    ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
    if (w > 0) {
      c->out_off += (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;
  }
  c->out_len = c->out_off = 0;
  return true;
}

static void* ox_server_main(void* arg) {
  OxServer* sv = arg;
  struct pollfd* pf = NULL;
  size_t pf_cap = 0;
  for (;;) {
    pthread_mutex_lock(&sv->lock);
    const bool closing = sv->closing;
    const uint64_t deadline = sv->close_deadline;
    pthread_mutex_unlock(&sv->lock);
    if (closing && (!sv->n_conn || ox_now_ms() >= deadline)) break;
    size_t n = (size_t)sv->n_listen + sv->n_conn;
    if (n > pf_cap) {
      struct pollfd* np = realloc(pf, n * sizeof *np);
      if (!np) {
        ox_sleep_ms(OX_STORE_TICK_MS); /* retried on the next tick */
        continue;
      }
      pf = np;
      pf_cap = n;
    }
    for (int i = 0; i < sv->n_listen; i++)
      pf[i] = (struct pollfd){.fd = sv->listen_fd[i], .events = POLLIN};
    for (size_t i = 0; i < sv->n_conn; i++)
      pf[(size_t)sv->n_listen + i] = (struct pollfd){
          .fd = sv->conn[i].fd, .events = (short)(POLLIN | (sv->conn[i].out_len ? POLLOUT : 0))};
    int r = poll(pf, (nfds_t)n, OX_STORE_TICK_MS);
    if (r <= 0) continue;
    /* Connections, from the last so that closing one (swapped with the last)
     * does not skip another. */
    for (size_t k = sv->n_conn; k-- > 0;) {
      short ev = pf[(size_t)sv->n_listen + k].revents;
      if (!ev) continue;
      OxConn* c = &sv->conn[k];
      const char* why = NULL;
      if (ev & (POLLIN | POLLHUP | POLLERR)) why = ox_conn_read(sv, c);
      if (!why && c->out_len && !ox_conn_write(c)) why = "";
      if (why) ox_conn_close(sv, k, *why ? why : NULL);
    }
    for (int i = 0; i < sv->n_listen; i++) {
      if (!(pf[i].revents & POLLIN)) continue;
      for (;;) {
        int fd = accept4(sv->listen_fd[i], NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) break;
        if (sv->n_conn >= OX_STORE_MAX_CONN || !ox_set_nonblocking(fd)) {
          close(fd);
          continue;
        }
        OxConn* nc = realloc(sv->conn, (sv->n_conn + 1) * sizeof *nc);
        if (!nc) {
          close(fd);
          continue;
        }
        sv->conn = nc;
        sv->conn[sv->n_conn++] = (OxConn){.fd = fd};
      }
    }
  }
  free(pf);
  return NULL;
}

static void ox_server_free(OxServer* sv) {
  for (int i = 0; i < sv->n_listen; i++)
    close(sv->listen_fd[i]);
  while (sv->n_conn)
    ox_conn_close(sv, sv->n_conn - 1, NULL);
  free(sv->conn);
  for (size_t i = 0; i < sv->n_entries; i++) {
    free(sv->entries[i].key);
    free(sv->entries[i].val);
  }
  free(sv->entries);
  pthread_mutex_destroy(&sv->lock);
  free(sv);
}

static int ox_sock_port(int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(fd, (struct sockaddr*)&ss, &len)) return 0;
  if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in*)&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6*)&ss)->sin6_port);
  return 0;
}

/* Binds every address host:port resolves to (the first bound port for the
 * others when port is "0") and starts the thread. */
static OnyxStatus* ox_server_start(const char* host, const char* port, OxServer** out) {
  *out = NULL;
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_ADDRCONFIG};
  struct addrinfo* res = NULL;
  int gai = getaddrinfo(host, port, &hints, &res);
  if (gai)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "TCP store: cannot resolve MASTER_ADDR='%s' MASTER_PORT='%s' to listen on: %s",
                     host, port, gai_strerror(gai));
  OxServer* sv = calloc(1, sizeof *sv);
  if (!sv) {
    freeaddrinfo(res);
    return ox_oom();
  }
  pthread_mutex_init(&sv->lock, NULL);
  char last[160] = "no address";
  for (struct addrinfo* a = res; a && sv->n_listen < OX_STORE_MAX_LISTEN; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (sv->port) { /* the port chosen by the first socket */
      if (a->ai_family == AF_INET)
        ((struct sockaddr_in*)a->ai_addr)->sin_port = htons((uint16_t)sv->port);
      if (a->ai_family == AF_INET6)
        ((struct sockaddr_in6*)a->ai_addr)->sin6_port = htons((uint16_t)sv->port);
    }
    if (bind(fd, a->ai_addr, a->ai_addrlen) || listen(fd, 128) || !ox_set_nonblocking(fd)) {
      snprintf(last, sizeof last, "%s", strerror(errno));
      close(fd);
      continue;
    }
    if (!sv->port) sv->port = ox_sock_port(fd);
    sv->listen_fd[sv->n_listen++] = fd;
  }
  freeaddrinfo(res);
  if (!sv->n_listen) {
    ox_server_free(sv);
    return ox_status(ONYX_RUNTIME_ERROR,
                     "TCP store: rank 0 cannot listen on MASTER_ADDR='%s' MASTER_PORT='%s': %s "
                     "(the port in use, or the address not this machine's)",
                     host, port, last);
  }
  if (pthread_create(&sv->thread, NULL, ox_server_main, sv)) {
    ox_server_free(sv);
    return ox_status(ONYX_RUNTIME_ERROR, "TCP store: cannot start the server thread");
  }
  *out = sv;
  return NULL;
}

/* The other clients hang up after their last request: serve them until
 * they have, or until the grace passes. */
static void ox_server_stop(OxServer* sv, uint32_t grace_ms) {
  pthread_mutex_lock(&sv->lock);
  sv->closing = true;
  sv->close_deadline = ox_now_ms() + grace_ms;
  pthread_mutex_unlock(&sv->lock);
  pthread_join(sv->thread, NULL);
  ox_server_free(sv);
}

/* --- The client -------------------------------------------------------------------- */

typedef struct OxDeadline {
  uint64_t end;
  uint64_t stop_from; /* the stop function is polled from this time on */
  uint32_t timeout_ms;
  int32_t (*stop)(const void*);
  const void* stop_arg;
} OxDeadline;

static OxDeadline ox_deadline(const OxStore* s, const OxDistWait* w) {
  OxDeadline d = {.timeout_ms = s->timeout_ms, .stop = s->stop, .stop_arg = s->stop_arg};
  if (w) {
    if (w->timeout_ms) d.timeout_ms = w->timeout_ms;
    if (w->stop) {
      d.stop = w->stop;
      d.stop_arg = w->stop_arg;
    }
  }
  d.stop_from = ox_now_ms();
  d.end = d.stop_from + d.timeout_ms;
  return d;
}

/* NULL while the wait may go on; otherwise the status that ends it. */
static OnyxStatus* ox_expired(const OxStore* s, const OxDeadline* d, const char* what) {
  if (d->stop && ox_now_ms() >= d->stop_from && d->stop(d->stop_arg))
    return ox_status(ONYX_CANCELLED, "TCP store at %s: %s: cancelled", s->address, what);
  if (ox_now_ms() >= d->end)
    return ox_status(ONYX_RUNTIME_ERROR, "TCP store at %s: %s: timed out after %u ms", s->address,
                     what, (unsigned)d->timeout_ms);
  return NULL;
}

/* Waits for fd to be ready for `events`, a tick at a time. */
static OnyxStatus* ox_wait_fd(const OxStore* s, int fd, short events, const OxDeadline* d,
                              const char* what) {
  for (;;) {
    OX_TRY(ox_expired(s, d, what));
    struct pollfd p = {.fd = fd, .events = events};
    uint64_t left = d->end > ox_now_ms() ? d->end - ox_now_ms() : 0;
    int r = poll(&p, 1, (int)(left < OX_STORE_TICK_MS ? left : OX_STORE_TICK_MS));
    if (r > 0) return NULL;
    if (r < 0 && errno != EINTR)
      return ox_status(ONYX_RUNTIME_ERROR, "TCP store at %s: %s: poll: %s", s->address, what,
                       strerror(errno));
  }
}

static OnyxStatus* ox_send_all(const OxStore* s, const unsigned char* p, size_t n,
                               const OxDeadline* d, const char* what) {
  while (n) {
    ssize_t w = send(s->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      OX_TRY(ox_wait_fd(s, s->fd, POLLOUT, d, what));
      continue;
    }
    return ox_status(ONYX_RUNTIME_ERROR, "TCP store at %s: %s: sending: %s", s->address, what,
                     w < 0 ? strerror(errno) : "nothing sent");
  }
  return NULL;
}

static OnyxStatus* ox_recv_all(const OxStore* s, unsigned char* p, size_t n, const OxDeadline* d,
                               const char* what) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = recv(s->fd, p + got, n - got, MSG_DONTWAIT);
    if (r > 0) {
      got += (size_t)r;
      continue;
    }
    if (r == 0)
      return ox_status(ONYX_RUNTIME_ERROR,
                       "TCP store at %s: %s: the server closed the connection (%zu of %zu bytes "
                       "of a reply read): rank 0 exited or the peer is no Onyx store",
                       s->address, what, got, n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      OX_TRY(ox_wait_fd(s, s->fd, POLLIN, d, what));
      continue;
    }
    return ox_status(ONYX_RUNTIME_ERROR, "TCP store at %s: %s: receiving: %s", s->address, what,
                     strerror(errno));
  }
  return NULL;
}

/* One request and its reply: *status and the payload (malloc'ed, NUL-ended,
 * *len bytes). The round trip has its own deadline, a whole timeout from
 * now, so that a wait whose time is nearly up never abandons a request half
 * done (which would leave the stream out of step). */
static OnyxStatus* ox_request(OxStore* s, int op, const char* key, const void* val, size_t vlen,
                              const OxDistWait* w, const char* what, int* status,
                              unsigned char** payload, size_t* len) {
  OxDeadline dl = ox_deadline(s, w);
  /* A cancellation waits OX_STORE_REQUEST_GRACE_MS for a reply in flight
   * before it gives up on the connection. */
  dl.stop_from += OX_STORE_REQUEST_GRACE_MS;
  const OxDeadline* d = &dl;
  *payload = NULL;
  *len = 0;
  size_t klen = strlen(key);
  if (!klen || klen > OX_STORE_MAX_KEY)
    return ox_status(ONYX_INVALID_ARGUMENT, "TCP store: %s: key of %zu bytes (1 to %u)", what, klen,
                     OX_STORE_MAX_KEY);
  if (vlen > OX_STORE_MAX_VALUE)
    return ox_status(ONYX_INVALID_ARGUMENT, "TCP store: %s: value of %zu bytes (at most %u)", what,
                     vlen, OX_STORE_MAX_VALUE);
  if (s->broken)
    return ox_status(ONYX_RUNTIME_ERROR,
                     "TCP store at %s: %s: the connection failed in an earlier request", s->address,
                     what);
  size_t body = 3 + klen + vlen;
  unsigned char* frame = malloc(4 + body);
  if (!frame) return ox_oom();
  ox_put_u32(frame, (uint32_t)body);
  frame[4] = (unsigned char)op;
  frame[5] = (unsigned char)(klen >> 8);
  frame[6] = (unsigned char)klen;
  memcpy(frame + 7, key, klen);
  if (vlen) memcpy(frame + 7 + klen, val, vlen);
  OnyxStatus* st = ox_send_all(s, frame, 4 + body, d, what);
  free(frame);
  unsigned char head[4];
  if (!st) st = ox_recv_all(s, head, 4, d, what);
  uint32_t rlen = st ? 0 : ox_get_u32(head);
  if (!st && (rlen < 1 || rlen > OX_STORE_MAX_FRAME))
    st = ox_status(ONYX_RUNTIME_ERROR,
                   "TCP store at %s: %s: a reply frame of %u bytes (1 to %u): the peer is no Onyx "
                   "store",
                   s->address, what, (unsigned)rlen, OX_STORE_MAX_FRAME);
  unsigned char* buf = NULL;
  if (!st) {
    buf = malloc((size_t)rlen + 1);
    if (!buf) st = ox_oom();
  }
  if (!st) st = ox_recv_all(s, buf, rlen, d, what);
  if (st) {
    free(buf);
    s->broken = true;
    return st;
  }
  *status = buf[0];
  *len = rlen - 1;
  memmove(buf, buf + 1, *len);
  buf[*len] = '\0';
  *payload = buf;
  if (*status > OX_ST_BAD) {
    s->broken = true;
    free(buf);
    *payload = NULL;
    return ox_status(ONYX_RUNTIME_ERROR,
                     "TCP store at %s: %s: reply status %d: the peer is no Onyx store", s->address,
                     what, *status);
  }
  return NULL;
}

/* A connected, blocking-free socket to host:port, retried until the deadline. */
static OnyxStatus* ox_connect(OxStore* s, const char* host, const char* port, const OxDeadline* d) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  char last[200] = "no address";
  unsigned backoff = 10;
  for (;;) {
    struct addrinfo* res = NULL;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai == EAI_NONAME || gai == EAI_SERVICE)
      return ox_status(ONYX_INVALID_ARGUMENT, "TCP store: MASTER_ADDR='%s' MASTER_PORT='%s': %s",
                       host, port, gai_strerror(gai));
    if (gai) snprintf(last, sizeof last, "%s", gai_strerror(gai));
    for (struct addrinfo* a = res; a; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (!ox_set_nonblocking(fd)) {
        close(fd);
        continue;
      }
      int rc = connect(fd, a->ai_addr, a->ai_addrlen);
      if (rc && errno == EINPROGRESS) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        uint64_t left = d->end > ox_now_ms() ? d->end - ox_now_ms() : 0;
        int err = 0;
        socklen_t el = sizeof err;
        if (poll(&p, 1, (int)(left < 1000 ? left : 1000)) > 0 &&
            !getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) && !err)
          rc = 0;
        else
          errno = err ? err : ETIMEDOUT;
      }
      if (!rc) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        s->fd = fd;
        freeaddrinfo(res);
        return NULL;
      }
      snprintf(last, sizeof last, "%s", strerror(errno));
      close(fd);
    }
    if (res) freeaddrinfo(res);
    OnyxStatus* st = ox_expired(s, d, "connecting");
    if (st) {
      OnyxStatus* out = ox_status(st->code,
                                  "%s (%s; rank 0 serves the store at MASTER_ADDR:MASTER_PORT: is "
                                  "it running, and are MASTER_ADDR and MASTER_PORT the same on "
                                  "every rank?)",
                                  st->message, last);
      ox_status_free(st);
      return out;
    }
    ox_sleep_ms(backoff);
    if (backoff < 200) backoff *= 2;
  }
}

OnyxStatus* ox_store_open(const OxStoreOptions* o, OxStore** out) {
  if (!out) return ox_status(ONYX_INVALID_ARGUMENT, "ox_store_open: out is NULL");
  *out = NULL;
  if (!o || !o->host || !*o->host || !o->port || !*o->port)
    return ox_status(ONYX_INVALID_ARGUMENT,
                     "TCP store: MASTER_ADDR and MASTER_PORT are needed (address '%s', port '%s')",
                     o && o->host ? o->host : "(unset)", o && o->port ? o->port : "(unset)");
  OxStore* s = calloc(1, sizeof *s);
  if (!s) return ox_oom();
  s->fd = -1;
  s->timeout_ms = o->timeout_ms ? o->timeout_ms : ONYX_PROCESS_GROUP_DEFAULT_TIMEOUT_MS;
  s->close_grace_ms = o->close_grace_ms ? o->close_grace_ms : 5000u;
  s->stop = o->stop;
  s->stop_arg = o->stop_arg;
  pthread_mutex_init(&s->lock, NULL);
  const bool v6 = strchr(o->host, ':') != NULL;
  snprintf(s->address, sizeof s->address, "%s%s%s:%s", v6 ? "[" : "", o->host, v6 ? "]" : "",
           o->port);
  OnyxStatus* st = NULL;
  char port_buf[16];
  const char* port = o->port;
  if (o->serve) {
    st = ox_server_start(o->host, o->port, &s->server);
    if (!st) {
      snprintf(port_buf, sizeof port_buf, "%d", s->server->port);
      port = port_buf;
      snprintf(s->address, sizeof s->address, "%s%s%s:%s", v6 ? "[" : "", o->host, v6 ? "]" : "",
               port);
    }
  }
  OxDeadline d = ox_deadline(s, NULL);
  if (!st) st = ox_connect(s, o->host, port, &d);
  if (!st) {
    int status = 0;
    unsigned char* payload = NULL;
    size_t len = 0;
    st = ox_request(s, OX_OP_HELLO, OX_STORE_MAGIC, NULL, 0, NULL, "greeting the server", &status,
                    &payload, &len);
    if (!st && status != OX_ST_OK)
      st = ox_status(ONYX_RUNTIME_ERROR,
                     "TCP store at %s: the server refused the greeting: the peer is no Onyx store "
                     "of this version",
                     s->address);
    free(payload);
  }
  if (st) {
    ox_store_close(s);
    return st;
  }
  *out = s;
  return NULL;
}

void ox_store_close(OxStore* s) {
  if (!s) return;
  if (s->fd >= 0) close(s->fd);
  if (s->server) ox_server_stop(s->server, s->close_grace_ms);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

OnyxStatus* ox_store_set(OxStore* s, const char* key, const void* value, size_t len,
                         const OxDistWait* w) {
  if (!s || !key || (len && !value))
    return ox_status(ONYX_INVALID_ARGUMENT, "ox_store_set: NULL store, key or value");
  int status = 0;
  unsigned char* payload = NULL;
  size_t plen = 0;
  pthread_mutex_lock(&s->lock);
  OnyxStatus* st = ox_request(s, OX_OP_SET, key, value, len, w, "set", &status, &payload, &plen);
  pthread_mutex_unlock(&s->lock);
  if (!st && status != OX_ST_OK)
    st = ox_status(ONYX_RUNTIME_ERROR, "TCP store at %s: set '%s' refused: %s", s->address, key,
                   payload ? (char*)payload : "");
  free(payload);
  return st;
}

OnyxStatus* ox_store_check(OxStore* s, const char* key, int* present, const OxDistWait* w) {
  if (!s || !key || !present)
    return ox_status(ONYX_INVALID_ARGUMENT, "ox_store_check: NULL argument");
  int status = 0;
  unsigned char* payload = NULL;
  size_t plen = 0;
  pthread_mutex_lock(&s->lock);
  OnyxStatus* st = ox_request(s, OX_OP_GET, key, NULL, 0, w, "check", &status, &payload, &plen);
  pthread_mutex_unlock(&s->lock);
  free(payload);
  if (!st) *present = status == OX_ST_OK;
  return st;
}

OnyxStatus* ox_store_get(OxStore* s, const char* key, void** value, size_t* len,
                         const OxDistWait* w) {
  if (!s || !key || !value || !len)
    return ox_status(ONYX_INVALID_ARGUMENT, "ox_store_get: NULL argument");
  *value = NULL;
  *len = 0;
  OxDeadline d = ox_deadline(s, w);
  char what[96];
  snprintf(what, sizeof what, "waiting for key '%.60s'", key);
  unsigned pause = 1;
  for (;;) {
    int status = 0;
    unsigned char* payload = NULL;
    size_t plen = 0;
    pthread_mutex_lock(&s->lock);
    OnyxStatus* st = ox_request(s, OX_OP_GET, key, NULL, 0, w, what, &status, &payload, &plen);
    pthread_mutex_unlock(&s->lock);
    if (st) return st;
    if (status == OX_ST_OK) {
      *value = payload;
      *len = plen;
      return NULL;
    }
    free(payload);
    OX_TRY(ox_expired(s, &d, what));
    ox_sleep_ms(pause);
    if (pause < 20) pause *= 2;
  }
}

OnyxStatus* ox_store_wait(OxStore* s, const char* const* keys, size_t n, const OxDistWait* w) {
  if (!s || (n && !keys)) return ox_status(ONYX_INVALID_ARGUMENT, "ox_store_wait: NULL argument");
  OxDeadline d = ox_deadline(s, w);
  for (size_t i = 0; i < n; i++) {
    uint64_t now = ox_now_ms();
    OxDistWait left = {.timeout_ms = d.end > now ? (uint32_t)(d.end - now) : 1u,
                       .stop = d.stop,
                       .stop_arg = d.stop_arg};
    void* v = NULL;
    size_t len = 0;
    OX_TRY(ox_store_get(s, keys[i], &v, &len, &left));
    free(v);
  }
  return NULL;
}

OnyxStatus* ox_store_add(OxStore* s, const char* key, int64_t delta, int64_t* result,
                         const OxDistWait* w) {
  if (!s || !key) return ox_status(ONYX_INVALID_ARGUMENT, "ox_store_add: NULL argument");
  unsigned char enc[8];
  ox_put_i64(enc, delta);
  int status = 0;
  unsigned char* payload = NULL;
  size_t plen = 0;
  pthread_mutex_lock(&s->lock);
  OnyxStatus* st = ox_request(s, OX_OP_ADD, key, enc, 8, w, "add", &status, &payload, &plen);
  pthread_mutex_unlock(&s->lock);
  if (!st && status != OX_ST_OK)
    st = ox_status(ONYX_RUNTIME_ERROR, "TCP store at %s: add to '%s' refused: %s", s->address, key,
                   payload ? (char*)payload : "");
  if (!st && plen != 8)
    st = ox_status(ONYX_RUNTIME_ERROR,
                   "TCP store at %s: add to '%s': a reply of %zu bytes, not 8: the peer is no Onyx "
                   "store",
                   s->address, key, plen);
  if (!st && result) *result = ox_get_i64(payload);
  free(payload);
  return st;
}

OnyxStatus* ox_store_barrier(OxStore* s, const char* name, int32_t count, const OxDistWait* w) {
  if (!s || !name || count < 1)
    return ox_status(ONYX_INVALID_ARGUMENT, "ox_store_barrier: NULL store or name, or count < 1");
  char key[OX_STORE_MAX_KEY + 1];
  int kl = snprintf(key, sizeof key, "barrier/%s", name);
  if (kl < 0 || (size_t)kl >= sizeof key)
    return ox_status(ONYX_INVALID_ARGUMENT, "ox_store_barrier: name too long");
  OxDeadline d = ox_deadline(s, w);
  int64_t n = 0;
  OX_TRY(ox_store_add(s, key, 1, &n, w));
  char what[96];
  snprintf(what, sizeof what, "barrier '%.60s'", name);
  unsigned pause = 1;
  while (n < count) {
    OnyxStatus* st = ox_expired(s, &d, what);
    if (st) {
      OnyxStatus* out = ox_status(st->code, "%s (%lld of %d ranks arrived)", st->message,
                                  (long long)n, (int)count);
      ox_status_free(st);
      return out;
    }
    ox_sleep_ms(pause);
    if (pause < 20) pause *= 2;
    OX_TRY(ox_store_add(s, key, 0, &n, w));
  }
  return NULL;
}

const char* ox_store_address(const OxStore* s) {
  return s ? s->address : "(no store)";
}

int ox_store_server_port(const OxStore* s) {
  return s && s->server ? s->server->port : 0;
}

uint64_t ox_store_server_rejected(OxStore* s, char* reason, size_t reason_len) {
  if (!s || !s->server) return 0;
  pthread_mutex_lock(&s->server->lock);
  uint64_t n = s->server->rejected;
  if (reason && reason_len) snprintf(reason, reason_len, "%s", s->server->reason);
  pthread_mutex_unlock(&s->server->lock);
  return n;
}
