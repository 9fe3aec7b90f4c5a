/* test_tcp_store.c — the TCP store of torchrun-style launches
 * (host/dist/ox_tcp_store.h), in one process: the server and its clients
 * run on threads over loopback.
 *
 * Covered: set/get/check/add/wait/barrier with many clients, a client that
 * starts before the server, timeouts and cancellation, a client that dies in
 * the middle of a frame, hostile frames, a fake server that sends a
 * truncated reply or none, IPv6, argument errors. Expected values are
 * computed here from what each client wrote. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "onyx/onyx.h"
#include "ox_tcp_store.h"

static int g_failures = 0;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
      __atomic_add_fetch(&g_failures, 1, __ATOMIC_RELAXED);                                        \
    }                                                                                              \
  } while (0)

static void ok(OnyxStatus* st, const char* what) {
  if (!st) return;
  fprintf(stderr, "%s: unexpected error %s: %s\n", what,
          onyx_status_code_name(onyx_status_code(st)), onyx_status_message(st));
  onyx_status_release(st);
  exit(1);
}

/* Checks an error of `code` whose message holds every needle (NULL-ended). */
static void expect_error(OnyxStatus* st, OnyxStatusCode code, const char* what, ...) {
  if (!st) {
    fprintf(stderr, "%s: expected an error, got success\n", what);
    __atomic_add_fetch(&g_failures, 1, __ATOMIC_RELAXED);
    return;
  }
  const char* msg = onyx_status_message(st);
  if (onyx_status_code(st) != code) {
    fprintf(stderr, "%s: expected %s, got %s: %s\n", what, onyx_status_code_name(code),
            onyx_status_code_name(onyx_status_code(st)), msg);
    __atomic_add_fetch(&g_failures, 1, __ATOMIC_RELAXED);
  }
  va_list ap;
  va_start(ap, what);
  for (const char* needle; (needle = va_arg(ap, const char*));)
    if (!strstr(msg, needle)) {
      fprintf(stderr, "%s: message lacks '%s': %s\n", what, needle, msg);
      __atomic_add_fetch(&g_failures, 1, __ATOMIC_RELAXED);
    }
  va_end(ap);
  onyx_status_release(st);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* A loopback port free a moment ago. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr*)&a, sizeof a) ||
      getsockname(fd, (struct sockaddr*)&a, &len)) {
    perror("free_port");
    exit(1);
  }
  close(fd);
  return ntohs(a.sin_port);
}

static OxStoreOptions client_opts(const char* port, uint32_t timeout_ms) {
  return (OxStoreOptions){.host = "127.0.0.1", .port = port, .timeout_ms = timeout_ms};
}

/* --- Many clients ------------------------------------------------------------------ */

#define N_CLIENTS 8

typedef struct Client {
  int id;
  char port[16];
} Client;

/* Client i sets "value/i" to i+1 bytes of value (i*7+j) & 255, adds i+1 to
 * "sum", meets the others at a barrier, then reads every client's value and
 * the sum. */
static void* client_main(void* arg) {
  const Client* c = arg;
  OxStoreOptions o = client_opts(c->port, 10000);
  OxStore* s = NULL;
  ok(ox_store_open(&o, &s), "client open");
  char key[32];
  unsigned char val[N_CLIENTS + 1];
  for (int j = 0; j <= c->id; j++)
    val[j] = (unsigned char)((c->id * 7 + j) & 255);
  snprintf(key, sizeof key, "value/%d", c->id);
  ok(ox_store_set(s, key, val, (size_t)c->id + 1, NULL), "set");
  int64_t after = 0;
  ok(ox_store_add(s, "sum", c->id + 1, &after, NULL), "add");
  CHECK(after >= c->id + 1 && after <= N_CLIENTS * (N_CLIENTS + 1) / 2);
  ok(ox_store_barrier(s, "all-added", N_CLIENTS + 1, NULL), "barrier");
  for (int i = 0; i < N_CLIENTS; i++) {
    snprintf(key, sizeof key, "value/%d", i);
    void* got = NULL;
    size_t len = 0;
    ok(ox_store_get(s, key, &got, &len, NULL), "get");
    CHECK(len == (size_t)i + 1);
    for (size_t j = 0; j < len && j <= (size_t)i; j++)
      CHECK(((unsigned char*)got)[j] == (unsigned char)((i * 7 + (int)j) & 255));
    free(got);
  }
  int64_t sum = 0;
  ok(ox_store_add(s, "sum", 0, &sum, NULL), "read the sum");
  CHECK(sum == N_CLIENTS * (N_CLIENTS + 1) / 2);
  ok(ox_store_barrier(s, "all-read", N_CLIENTS + 1, NULL), "barrier");
  ox_store_close(s);
  return NULL;
}

static void test_many_clients(void) {
  OxStoreOptions so = {.host = "127.0.0.1", .port = "0", .serve = 1, .timeout_ms = 10000};
  OxStore* server = NULL;
  ok(ox_store_open(&so, &server), "server open");
  const int port = ox_store_server_port(server);
  CHECK(port > 0);
  pthread_t t[N_CLIENTS];
  Client c[N_CLIENTS];
  for (int i = 0; i < N_CLIENTS; i++) {
    c[i].id = i;
    snprintf(c[i].port, sizeof c[i].port, "%d", port);
    CHECK(pthread_create(&t[i], NULL, client_main, &c[i]) == 0);
  }
  /* The owner waits for every value, then meets the clients. */
  const char* keys[N_CLIENTS];
  char names[N_CLIENTS][24];
  for (int i = 0; i < N_CLIENTS; i++) {
    snprintf(names[i], sizeof names[i], "value/%d", i);
    keys[i] = names[i];
  }
  ok(ox_store_wait(server, keys, N_CLIENTS, NULL), "wait for every value");
  ok(ox_store_barrier(server, "all-added", N_CLIENTS + 1, NULL), "owner barrier");
  ok(ox_store_barrier(server, "all-read", N_CLIENTS + 1, NULL), "owner barrier 2");
  int present = -1;
  ok(ox_store_check(server, "value/3", &present, NULL), "check");
  CHECK(present == 1);
  ok(ox_store_check(server, "never-set", &present, NULL), "check missing");
  CHECK(present == 0);
  /* A key set to something that is not a counter cannot be added to. */
  ok(ox_store_set(server, "text", "abc", 3, NULL), "set text");
  expect_error(ox_store_add(server, "text", 1, NULL, NULL), ONYX_RUNTIME_ERROR, "add to text",
               "not a counter", NULL);
  /* Overwriting a key replaces its value; an empty value is a value. */
  ok(ox_store_set(server, "text", "", 0, NULL), "set empty");
  void* v = NULL;
  size_t len = 99;
  ok(ox_store_get(server, "text", &v, &len, NULL), "get empty");
  CHECK(v != NULL && len == 0);
  free(v);
  /* The largest value: byte i = (i * 131 + 7) mod 251, read back whole. */
  unsigned char* big = malloc(OX_STORE_MAX_VALUE);
  CHECK(big != NULL);
  for (size_t i = 0; big && i < OX_STORE_MAX_VALUE; i++)
    big[i] = (unsigned char)((i * 131u + 7u) % 251u);
  ok(ox_store_set(server, "big", big, OX_STORE_MAX_VALUE, NULL), "set the largest value");
  ok(ox_store_get(server, "big", &v, &len, NULL), "get the largest value");
  CHECK(len == OX_STORE_MAX_VALUE && big && !memcmp(v, big, len));
  free(v);
  free(big);
  for (int i = 0; i < N_CLIENTS; i++)
    pthread_join(t[i], NULL);
  char reason[128] = "";
  CHECK(ox_store_server_rejected(server, reason, sizeof reason) == 0);
  ox_store_close(server);
}

/* --- A client that starts first ---------------------------------------------------- */

typedef struct Early {
  char port[16];
  OnyxStatus* st;
  char value[16];
} Early;

static void* early_main(void* arg) {
  Early* e = arg;
  OxStoreOptions o = client_opts(e->port, 10000);
  OxStore* s = NULL;
  e->st = ox_store_open(&o, &s);
  if (e->st) return NULL;
  void* v = NULL;
  size_t len = 0;
  e->st = ox_store_get(s, "greeting", &v, &len, NULL);
  if (!e->st) snprintf(e->value, sizeof e->value, "%.*s", (int)len, (char*)v);
  free(v);
  ox_store_close(s);
  return NULL;
}

static void test_client_first(void) {
  Early e = {.st = NULL};
  snprintf(e.port, sizeof e.port, "%d", free_port());
  pthread_t t;
  CHECK(pthread_create(&t, NULL, early_main, &e) == 0);
  sleep_ms(300); /* the client retries meanwhile */
  OxStoreOptions so = {.host = "127.0.0.1", .port = e.port, .serve = 1, .timeout_ms = 10000};
  OxStore* server = NULL;
  ok(ox_store_open(&so, &server), "late server open");
  ok(ox_store_set(server, "greeting", "hello", 5, NULL), "set greeting");
  pthread_join(t, NULL);
  ok(e.st, "early client");
  CHECK(!strcmp(e.value, "hello"));
  /* A second server on the same port is refused, naming the variables. */
  OxStore* twice = NULL;
  expect_error(ox_store_open(&so, &twice), ONYX_RUNTIME_ERROR, "second server", "cannot listen",
               "MASTER_PORT", NULL);
  CHECK(twice == NULL);
  ox_store_close(server);
}

/* --- Timeouts and cancellation ----------------------------------------------------- */

static int32_t stop_when_set(const void* arg) {
  return __atomic_load_n((const int*)arg, __ATOMIC_ACQUIRE);
}

static void* set_flag_later(void* arg) {
  sleep_ms(150);
  __atomic_store_n((int*)arg, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void test_timeouts(void) {
  OxStoreOptions so = {.host = "127.0.0.1", .port = "0", .serve = 1, .timeout_ms = 10000};
  OxStore* server = NULL;
  ok(ox_store_open(&so, &server), "server open");
  OxDistWait w = {.timeout_ms = 200};
  double t0 = now_ms();
  void* v = NULL;
  size_t len = 0;
  expect_error(ox_store_get(server, "missing", &v, &len, &w), ONYX_RUNTIME_ERROR, "get timeout",
               "timed out after 200 ms", "missing", NULL);
  double dt = now_ms() - t0;
  CHECK(dt >= 195 && dt < 3000);
  CHECK(v == NULL);
  /* A barrier that one rank never reaches says how many arrived. */
  expect_error(ox_store_barrier(server, "lonely", 2, &w), ONYX_RUNTIME_ERROR, "barrier timeout",
               "timed out", "1 of 2 ranks arrived", NULL);
  /* Cancellation stops a wait early. */
  int flag = 0;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, set_flag_later, &flag) == 0);
  OxDistWait cw = {.timeout_ms = 10000, .stop = stop_when_set, .stop_arg = &flag};
  t0 = now_ms();
  expect_error(ox_store_get(server, "missing", &v, &len, &cw), ONYX_CANCELLED, "get cancelled",
               "cancelled", NULL);
  CHECK(now_ms() - t0 < 3000);
  pthread_join(t, NULL);
  /* The store still serves after a timed-out wait (GET polls never leave a
   * request half-done). */
  ok(ox_store_set(server, "after", "x", 1, NULL), "set after timeouts");
  ox_store_close(server);

  /* Nobody listening: connecting gives up at the timeout and names the
   * variables to check. */
  char port[16];
  snprintf(port, sizeof port, "%d", free_port());
  OxStoreOptions co = client_opts(port, 300);
  OxStore* s = NULL;
  t0 = now_ms();
  expect_error(ox_store_open(&co, &s), ONYX_RUNTIME_ERROR, "connect timeout", "connecting",
               "timed out after 300 ms", "MASTER_ADDR", NULL);
  CHECK(now_ms() - t0 < 3000);
  CHECK(s == NULL);
}

/* --- Hostile and dying peers ------------------------------------------------------- */

static int raw_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd < 0 || connect(fd, (struct sockaddr*)&a, sizeof a)) {
    perror("raw_connect");
    exit(1);
  }
  return fd;
}

/* A frame of a request: op, key and value, as the store's wire format says
 * (4-byte big-endian body length, op byte, 2-byte big-endian key length). */
static size_t frame(unsigned char* out, int op, const char* key, const char* val) {
  size_t k = strlen(key), v = val ? strlen(val) : 0, body = 3 + k + v;
  out[0] = (unsigned char)(body >> 24);
  out[1] = (unsigned char)(body >> 16);
  out[2] = (unsigned char)(body >> 8);
  out[3] = (unsigned char)body;
  out[4] = (unsigned char)op;
  out[5] = (unsigned char)(k >> 8);
  out[6] = (unsigned char)k;
  memcpy(out + 7, key, k);
  if (v) memcpy(out + 7 + k, val, v);
  return 4 + body;
}

/* Waits (up to 2 s) for the server to have rejected `n` connections. */
static uint64_t wait_rejected(OxStore* s, uint64_t n, char* reason, size_t len) {
  uint64_t got = 0;
  for (int i = 0; i < 200 && (got = ox_store_server_rejected(s, reason, len)) < n; i++)
    sleep_ms(10);
  return got;
}

static void test_hostile_clients(void) {
  OxStoreOptions so = {.host = "127.0.0.1", .port = "0", .serve = 1, .timeout_ms = 10000};
  OxStore* server = NULL;
  ok(ox_store_open(&so, &server), "server open");
  const int port = ox_store_server_port(server);
  unsigned char buf[256];
  char reason[128] = "";

  /* A client that dies in the middle of a SET frame. */
  int fd = raw_connect(port);
  size_t n = frame(buf, 0, OX_STORE_MAGIC, NULL);
  CHECK(send(fd, buf, n, 0) == (ssize_t)n);
  n = frame(buf, 1, "half", "0123456789");
  CHECK(send(fd, buf, n - 4, 0) == (ssize_t)(n - 4));
  close(fd);
  CHECK(wait_rejected(server, 1, reason, sizeof reason) == 1);
  CHECK(strstr(reason, "middle of a frame") != NULL);

  /* A frame longer than the bound. */
  fd = raw_connect(port);
  memset(buf, 0xff, 4);
  CHECK(send(fd, buf, 4, 0) == 4);
  CHECK(wait_rejected(server, 2, reason, sizeof reason) == 2);
  CHECK(strstr(reason, "size bound") != NULL);
  close(fd);

  /* No greeting first. */
  fd = raw_connect(port);
  n = frame(buf, 1, "k", "v");
  CHECK(send(fd, buf, n, 0) == (ssize_t)n);
  CHECK(wait_rejected(server, 3, reason, sizeof reason) == 3);
  CHECK(strstr(reason, "HELLO") != NULL);
  close(fd);

  /* A key length past the body. */
  fd = raw_connect(port);
  n = frame(buf, 0, OX_STORE_MAGIC, NULL);
  CHECK(send(fd, buf, n, 0) == (ssize_t)n);
  const unsigned char bad[] = {0, 0, 0, 5, 1, 0, 200, 'a', 'b'};
  CHECK(send(fd, bad, sizeof bad, 0) == (ssize_t)sizeof bad);
  CHECK(wait_rejected(server, 4, reason, sizeof reason) == 4);
  CHECK(strstr(reason, "key length") != NULL);
  close(fd);

  /* A client that hangs up cleanly between frames is no rejection, and the
   * store still serves. */
  fd = raw_connect(port);
  close(fd);
  ok(ox_store_set(server, "still", "here", 4, NULL), "set after hostile clients");
  int present = -1;
  ok(ox_store_check(server, "half", &present, NULL), "check the half-sent key");
  CHECK(present == 0); /* a truncated SET stores nothing */
  void* v = NULL;
  size_t len = 0;
  ok(ox_store_get(server, "still", &v, &len, NULL), "get after hostile clients");
  CHECK(len == 4 && !memcmp(v, "here", 4));
  free(v);
  CHECK(ox_store_server_rejected(server, NULL, 0) == 4);

  /* Argument bounds on the client side. */
  char long_key[OX_STORE_MAX_KEY + 2];
  memset(long_key, 'k', sizeof long_key - 1);
  long_key[sizeof long_key - 1] = '\0';
  expect_error(ox_store_set(server, long_key, "v", 1, NULL), ONYX_INVALID_ARGUMENT, "long key",
               "key of 1025 bytes", NULL);
  expect_error(ox_store_set(server, "", "v", 1, NULL), ONYX_INVALID_ARGUMENT, "empty key",
               "key of 0 bytes", NULL);
  void* big = calloc(OX_STORE_MAX_VALUE + 1, 1);
  CHECK(big != NULL);
  expect_error(ox_store_set(server, "big", big, OX_STORE_MAX_VALUE + 1, NULL),
               ONYX_INVALID_ARGUMENT, "big value", "value of", NULL);
  free(big);
  ox_store_close(server);
}

/* A fake server: accepts one client, reads its greeting, then misbehaves:
 * mode 0 replies a frame that announces 10 bytes and sends 3, then closes;
 * mode 1 never replies; mode 2 replies a frame length of 0. */
typedef struct Fake {
  int listen_fd;
  int mode;
} Fake;

static void* fake_main(void* arg) {
  Fake* f = arg;
  int fd = accept(f->listen_fd, NULL, NULL);
  if (fd < 0) return NULL;
  unsigned char buf[64];
  ssize_t got = recv(fd, buf, sizeof buf, 0);
  (void)got;
  if (f->mode == 0) {
    const unsigned char part[] = {0, 0, 0, 10, 0, 1, 2};
    CHECK(send(fd, part, sizeof part, 0) == (ssize_t)sizeof part);
  } else if (f->mode == 1) {
    sleep_ms(600);
  } else {
    const unsigned char zero[] = {0, 0, 0, 0};
    CHECK(send(fd, zero, sizeof zero, 0) == (ssize_t)sizeof zero);
    sleep_ms(100);
  }
  close(fd);
  return NULL;
}

static void test_fake_servers(void) {
  const char* needles[] = {"closed the connection (3 of 10 bytes", "timed out after 300 ms",
                           "reply frame of 0 bytes"};
  for (int mode = 0; mode < 3; mode++) {
    Fake f = {.listen_fd = socket(AF_INET, SOCK_STREAM, 0), .mode = mode};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    CHECK(f.listen_fd >= 0 && !bind(f.listen_fd, (struct sockaddr*)&a, sizeof a) &&
          !listen(f.listen_fd, 1) && !getsockname(f.listen_fd, (struct sockaddr*)&a, &alen));
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fake_main, &f) == 0);
    char port[16];
    snprintf(port, sizeof port, "%d", ntohs(a.sin_port));
    OxStoreOptions co = client_opts(port, 300);
    OxStore* s = NULL;
    double t0 = now_ms();
    expect_error(ox_store_open(&co, &s), ONYX_RUNTIME_ERROR, "fake server", needles[mode], NULL);
    CHECK(now_ms() - t0 < 3000);
    CHECK(s == NULL);
    pthread_join(t, NULL);
    close(f.listen_fd);
  }
}

/* --- IPv6 ------------------------------------------------------------------------------ */

static void test_ipv6(void) {
  int probe = socket(AF_INET6, SOCK_STREAM, 0);
  struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
  int usable = probe >= 0 && !bind(probe, (struct sockaddr*)&a, sizeof a);
  if (probe >= 0) close(probe);
  if (!usable) {
    printf("IPv6 loopback unavailable: the IPv6 case is skipped\n");
    return;
  }
  OxStoreOptions so = {.host = "::1", .port = "0", .serve = 1, .timeout_ms = 5000};
  OxStore* server = NULL;
  ok(ox_store_open(&so, &server), "IPv6 server open");
  CHECK(strstr(ox_store_address(server), "[::1]:") != NULL);
  char port[16];
  snprintf(port, sizeof port, "%d", ox_store_server_port(server));
  OxStoreOptions co = {.host = "::1", .port = port, .timeout_ms = 5000};
  OxStore* client = NULL;
  ok(ox_store_open(&co, &client), "IPv6 client open");
  ok(ox_store_set(client, "v6", "yes", 3, NULL), "IPv6 set");
  void* v = NULL;
  size_t len = 0;
  ok(ox_store_get(server, "v6", &v, &len, NULL), "IPv6 get");
  CHECK(len == 3 && !memcmp(v, "yes", 3));
  free(v);
  ox_store_close(client);
  ox_store_close(server);
}

static void test_bad_options(void) {
  OxStore* s = NULL;
  expect_error(ox_store_open(NULL, &s), ONYX_INVALID_ARGUMENT, "NULL options", "MASTER_ADDR", NULL);
  OxStoreOptions o = {.host = "127.0.0.1", .port = "no-such-service-xyz", .timeout_ms = 200};
  expect_error(ox_store_open(&o, &s), ONYX_INVALID_ARGUMENT, "bad port", "MASTER_PORT", NULL);
  CHECK(s == NULL);
}

int main(void) {
  test_bad_options();
  test_many_clients();
  test_client_first();
  test_timeouts();
  test_hostile_clients();
  test_fake_servers();
  test_ipv6();
  if (g_failures)
    fprintf(stderr, "%d check(s) failed\n", g_failures);
  else
    printf("test_tcp_store: all passed\n");
  return g_failures ? 1 : 0;
}
