/* test_dist.c — process groups and the com.onyx.collective ops
 * (onyx_distributed.h).
 *
 *   test_dist local        a world of one rank, without MPI: local
 *                          collectives, argument errors, the missing backend
 *                          library, torchrun-style launches, the ops in a
 *                          session, inference errors
 *   mpirun -np 2 test_dist mpi     every collective and every op in a session
 *                          (the split all-reduce, two in flight, as well),
 *                          shape inference, group_size and mismatched worlds
 *   mpirun -np 2 test_dist fault   a stalled rank: the other errors within
 *                          the timeout, and the group is broken after it;
 *                          the same in a session run
 *   scripts/onyx-launch.sh 2 test_dist mpi|fault   the same without mpirun:
 *                          MPI singletons joined through the TCP store
 *   ONYX_DIST_BACKEND=store scripts/onyx-launch.sh 2 test_dist store
 *                          no MPI: broadcast, all-gather and barrier
 *                          through the store, data collectives refused
 *   test_dist cuda         the ops on the CUDA provider (NCCL, one rank);
 *                          skipped (77) without a CUDA device
 *
 * Every expected value is computed here from the rank's inputs by the
 * formula of the collective. A failed check prints the rank and exits 1. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "onyx/onyx.h"
#include "onyx/onyx_distributed.h"
#include "ox_test_models.h"

static int g_rank = 0;
static int g_failures = 0;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", g_rank, __FILE__, __LINE__, #cond);    \
      g_failures++;                                                                                \
    }                                                                                              \
  } while (0)

/* Fails (and exits) on an error status. */
static void ok(OnyxStatus* st, const char* what) {
  if (!st) return;
  fprintf(stderr, "rank %d: %s: unexpected error %s: %s\n", g_rank, what,
          onyx_status_code_name(onyx_status_code(st)), onyx_status_message(st));
  onyx_status_release(st);
  exit(1);
}

/* Checks an error of `code` whose message holds every needle (NULL-ended). */
static void expect_error(OnyxStatus* st, OnyxStatusCode code, const char* what, ...) {
  if (!st) {
    fprintf(stderr, "rank %d: %s: expected an error, got success\n", g_rank, what);
    g_failures++;
    return;
  }
  const char* msg = onyx_status_message(st);
  if (onyx_status_code(st) != code) {
    fprintf(stderr, "rank %d: %s: expected %s, got %s: %s\n", g_rank, what,
            onyx_status_code_name(code), onyx_status_code_name(onyx_status_code(st)), msg);
    g_failures++;
  }
  va_list ap;
  va_start(ap, what);
  for (const char* needle; (needle = va_arg(ap, const char*));)
    if (!strstr(msg, needle)) {
      fprintf(stderr, "rank %d: %s: message lacks '%s': %s\n", g_rank, what, needle, msg);
      g_failures++;
    }
  va_end(ap);
  onyx_status_release(st);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* --- Models ------------------------------------------------------------------------- */

/* X [2, 4] float32 into each of the five collectives (group_size g), each
 * output a graph output without a declared shape. `reduce` is AllReduce's. */
static OxTestModel* all_ops_model(int64_t g, const char* reduce) {
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "com.onyx.collective", 1);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 4});
  OxTestNode* n = otm_node(m, "AllReduce", "ar", "X", "ar_y");
  otm_node_domain(n, "com.onyx.collective");
  otm_attr_int(n, "group_size", g);
  otm_attr_string(n, "reduce", reduce);
  n = otm_node(m, "AllGather", "ag", "X", "ag_y");
  otm_node_domain(n, "com.onyx.collective");
  otm_attr_int(n, "group_size", g);
  otm_attr_int(n, "axis", 1);
  n = otm_node(m, "ReduceScatter", "rs", "X", "rs_y");
  otm_node_domain(n, "com.onyx.collective");
  otm_attr_int(n, "group_size", g);
  otm_attr_int(n, "axis", -1);
  n = otm_node(m, "Broadcast", "bc", "X", "bc_y");
  otm_node_domain(n, "com.onyx.collective");
  otm_attr_int(n, "group_size", g);
  otm_attr_int(n, "root", g - 1);
  n = otm_node(m, "AllToAll", "a2a", "X", "a2a_y");
  otm_node_domain(n, "com.onyx.collective");
  otm_attr_int(n, "group_size", g);
  otm_attr_int(n, "axis", 1);
  const char* outs[] = {"ar_y", "ag_y", "rs_y", "bc_y", "a2a_y"};
  for (size_t i = 0; i < 5; i++)
    otm_output(m, outs[i], ONYX_ELEM_FLOAT32, -1, NULL);
  return m;
}

/* A session of m on pg; max_run_ms 0: no run time limit. */
static OnyxStatus* make_session_limited(OxTestModel* m, OnyxProcessGroup* pg, uint64_t max_run_ms,
                                        OnyxSession** out) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o), "options");
  ok(onyx_session_options_set_process_group(o, pg), "set_process_group");
  if (max_run_ms) ok(onyx_session_options_set_max_run_ms(o, max_run_ms), "max_run_ms");
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, out);
  onyx_session_options_release(o);
  free(bytes);
  return st;
}

static OnyxStatus* make_session(OxTestModel* m, OnyxProcessGroup* pg, OnyxSession** out) {
  return make_session_limited(m, pg, 0, out);
}

/* X of rank r: x[i][j] = 100 r + 10 i + j. */
static float x_of(int r, int i, int j) {
  return (float)(100 * r + 10 * i + j);
}

/* Runs the all-ops model and checks each output against the collectives'
 * definitions over `size` ranks with X as in x_of. */
static void run_all_ops(OnyxSession* s, int rank, int size) {
  float x[8];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++)
      x[i * 4 + j] = x_of(rank, i, j);
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){2, 4}, 2, x, sizeof x, &in), "x");
  const char* in_name = "X";
  const char* outs[] = {"ar_y", "ag_y", "rs_y", "bc_y", "a2a_y"};
  OnyxValue* got[5] = {0};
  ok(onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, outs, 5, got), "run");
  const int cols = 4, blk = cols / size;
  /* AllReduce (sum): sum over ranks. */
  const OnyxTensor* t = onyx_value_tensor(got[0]);
  const float* y = onyx_tensor_data(t);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < cols; j++) {
      float want = 0;
      for (int r = 0; r < size; r++)
        want += x_of(r, i, j);
      CHECK(y[i * cols + j] == want);
    }
  /* AllGather on axis 1: [2, 4 size], rank r's columns at 4r. */
  t = onyx_value_tensor(got[1]);
  CHECK(onyx_tensor_rank(t) == 2 && onyx_tensor_dims(t)[1] == cols * size);
  y = onyx_tensor_data(t);
  for (int i = 0; i < 2; i++)
    for (int r = 0; r < size; r++)
      for (int j = 0; j < cols; j++)
        CHECK(y[i * cols * size + r * cols + j] == x_of(r, i, j));
  /* ReduceScatter on the last axis: this rank's block of columns, summed. */
  t = onyx_value_tensor(got[2]);
  CHECK(onyx_tensor_rank(t) == 2 && onyx_tensor_dims(t)[1] == blk);
  y = onyx_tensor_data(t);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < blk; j++) {
      float want = 0;
      for (int r = 0; r < size; r++)
        want += x_of(r, i, rank * blk + j);
      CHECK(y[i * blk + j] == want);
    }
  /* Broadcast from the last rank. */
  y = onyx_tensor_data(onyx_value_tensor(got[3]));
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < cols; j++)
      CHECK(y[i * cols + j] == x_of(size - 1, i, j));
  /* AllToAll on axis 1: column block r of the output is rank r's block `rank`. */
  t = onyx_value_tensor(got[4]);
  CHECK(onyx_tensor_dims(t)[1] == cols);
  y = onyx_tensor_data(t);
  for (int i = 0; i < 2; i++)
    for (int r = 0; r < size; r++)
      for (int j = 0; j < blk; j++)
        CHECK(y[i * cols + r * blk + j] == x_of(r, i, rank * blk + j));
  onyx_values_release(got, 5);
  onyx_value_release(in);
}

/* The split all-reduce: A [2, 3] and B [4] float32; start0 = AllReduceStart
 * (sum) of A and B, start1 = AllReduceStart(avg) of B, both in flight, then
 * wait1 and wait0 (the reverse order): YA, YB the sums, YB2 the average. */
static OxTestModel* split_model(int64_t g) {
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "com.onyx.collective", 1);
  otm_input(m, "A", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_input(m, "B", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4});
  OxTestNode* n = otm_node(m, "AllReduceStart", "start0", "A,B", "tok0");
  otm_node_domain(n, "com.onyx.collective");
  otm_attr_int(n, "group_size", g);
  n = otm_node(m, "AllReduceStart", "start1", "B", "tok1");
  otm_node_domain(n, "com.onyx.collective");
  otm_attr_int(n, "group_size", g);
  otm_attr_string(n, "reduce", "avg");
  n = otm_node(m, "AllReduceWait", "wait1", "tok1,B", "YB2");
  otm_node_domain(n, "com.onyx.collective");
  otm_attr_int(n, "group_size", g);
  otm_attr_string(n, "reduce", "avg");
  n = otm_node(m, "AllReduceWait", "wait0", "tok0,A,B", "YA,YB");
  otm_node_domain(n, "com.onyx.collective");
  otm_attr_int(n, "group_size", g);
  otm_output(m, "YA", ONYX_ELEM_FLOAT32, -1, NULL);
  otm_output(m, "YB", ONYX_ELEM_FLOAT32, -1, NULL);
  otm_output(m, "YB2", ONYX_ELEM_FLOAT32, -1, NULL);
  return m;
}

/* Rank r's A[i] = r + 0.5 i (6 values), B[j] = 10 r - j (4 values). */
static void run_split(OnyxSession* s, int rank, int size) {
  float a[6], b[4];
  for (int i = 0; i < 6; i++)
    a[i] = (float)rank + 0.5f * (float)i;
  for (int j = 0; j < 4; j++)
    b[j] = 10.0f * (float)rank - (float)j;
  OnyxValue* in[2] = {NULL, NULL};
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){2, 3}, 2, a, sizeof a, &in[0]), "A");
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){4}, 1, b, sizeof b, &in[1]), "B");
  const char* in_names[] = {"A", "B"};
  const char* outs[] = {"YA", "YB", "YB2"};
  OnyxValue* got[3] = {0};
  ok(onyx_session_run(s, NULL, in_names, (const OnyxValue* const*)in, 2, outs, 3, got),
     "run split");
  const OnyxTensor* t = onyx_value_tensor(got[0]);
  CHECK(onyx_tensor_rank(t) == 2 && onyx_tensor_dims(t)[0] == 2 && onyx_tensor_dims(t)[1] == 3);
  const float* y = onyx_tensor_data(t);
  for (int i = 0; i < 6; i++) {
    float want = 0;
    for (int r = 0; r < size; r++)
      want += (float)r + 0.5f * (float)i;
    CHECK(y[i] == want);
  }
  t = onyx_value_tensor(got[1]);
  CHECK(onyx_tensor_rank(t) == 1 && onyx_tensor_dims(t)[0] == 4);
  y = onyx_tensor_data(t);
  const float* y2 = onyx_tensor_data(onyx_value_tensor(got[2]));
  for (int j = 0; j < 4; j++) {
    float want = 0;
    for (int r = 0; r < size; r++)
      want += 10.0f * (float)r - (float)j;
    CHECK(y[j] == want);
    CHECK(y2[j] == want / (float)size);
  }
  onyx_values_release(got, 3);
  onyx_values_release(in, 2);
}

/* --- A world of one rank --------------------------------------------------------------- */

static void test_local(void) {
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  OnyxProcessGroup* pg = NULL;
  ok(onyx_process_group_create(NULL, &pg), "create");
  CHECK(onyx_process_group_rank(pg) == 0 && onyx_process_group_size(pg) == 1);
  CHECK(onyx_process_group_local_rank(pg) == 0);
  CHECK(!strcmp(onyx_process_group_backend(pg), "none"));

  /* Collectives of one rank leave the data as it is. */
  float a[3] = {1.5f, -2.0f, 3.0f};
  ok(onyx_process_group_all_reduce(pg, a, 3, ONYX_ELEM_FLOAT32, ONYX_REDUCE_AVG), "avg");
  CHECK(a[0] == 1.5f && a[1] == -2.0f && a[2] == 3.0f);
  int64_t s[2] = {5, 7}, r[2] = {0, 0};
  ok(onyx_process_group_all_gather(pg, s, r, 2, ONYX_ELEM_INT64), "all_gather");
  CHECK(r[0] == 5 && r[1] == 7);
  r[0] = r[1] = 0;
  ok(onyx_process_group_reduce_scatter(pg, s, r, 2, ONYX_ELEM_INT64, ONYX_REDUCE_MAX), "rs");
  CHECK(r[0] == 5 && r[1] == 7);
  ok(onyx_process_group_broadcast(pg, s, sizeof s, 0), "broadcast");
  ok(onyx_process_group_barrier(pg), "barrier");
  expect_error(onyx_process_group_broadcast(pg, s, sizeof s, 1), ONYX_INVALID_ARGUMENT,
               "broadcast root 1", "root 1", NULL);
  uint16_t h[2] = {0, 0};
  expect_error(onyx_process_group_all_reduce(pg, h, 2, ONYX_ELEM_FLOAT16, ONYX_REDUCE_SUM),
               ONYX_NOT_IMPLEMENTED, "float16 all_reduce", "float16", NULL);
  expect_error(onyx_process_group_all_reduce(pg, a, 3, ONYX_ELEM_FLOAT32, (OnyxReduceOp)9),
               ONYX_INVALID_ARGUMENT, "bad reduce op", "reduce op 9", NULL);
  expect_error(onyx_process_group_all_reduce(pg, NULL, 3, ONYX_ELEM_FLOAT32, ONYX_REDUCE_SUM),
               ONYX_INVALID_ARGUMENT, "NULL buffer", "NULL", NULL);
  expect_error(onyx_process_group_all_gather(pg, s, r, SIZE_MAX / 4, ONYX_ELEM_INT64),
               ONYX_INVALID_ARGUMENT, "overflowing count", "overflow", NULL);

  /* The ops in a session with group_size 1 are copies. */
  OxTestModel* m = all_ops_model(1, "avg");
  OnyxSession* sess = NULL;
  ok(make_session(m, pg, &sess), "session of one rank");
  run_all_ops(sess, 0, 1);
  onyx_session_release(sess);
  /* ... with or without a process group. */
  ok(make_session(m, NULL, &sess), "session without a group");
  run_all_ops(sess, 0, 1);
  onyx_session_release(sess);
  otm_free(m);
  onyx_process_group_release(pg);

  /* The split all-reduce of one rank: copies. */
  m = split_model(1);
  ok(make_session(m, NULL, &sess), "split session without a group");
  run_split(sess, 0, 1);
  onyx_session_release(sess);
  otm_free(m);
  /* AllReduceWait needs one output per X. */
  m = otm_new(17);
  otm_add_opset(m, "com.onyx.collective", 1);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4});
  OxTestNode* w = otm_node(m, "AllReduceStart", "st", "X", "tok");
  otm_node_domain(w, "com.onyx.collective");
  otm_attr_int(w, "group_size", 1);
  w = otm_node(m, "AllReduceWait", "wt", "tok,X,X", "Y");
  otm_node_domain(w, "com.onyx.collective");
  otm_attr_int(w, "group_size", 1);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, -1, NULL);
  expect_error(make_session(m, NULL, &sess), ONYX_INVALID_MODEL, "wait outputs", "wt",
               "one Y per X", NULL);
  otm_free(m);

  /* group_size 2 needs a group of two. */
  m = all_ops_model(2, "sum");
  expect_error(make_session(m, NULL, &sess), ONYX_INVALID_ARGUMENT, "no group", "group_size is 2",
               "no process group", "AllReduce", NULL);
  otm_free(m);

  /* Inference errors name the node. */
  m = otm_new(17);
  otm_add_opset(m, "com.onyx.collective", 1);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 4});
  OxTestNode* n = otm_node(m, "ReduceScatter", "rs3", "X", "Y");
  otm_node_domain(n, "com.onyx.collective");
  otm_attr_int(n, "group_size", 2);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, -1, NULL);
  expect_error(make_session(m, NULL, &sess), ONYX_INVALID_MODEL, "indivisible", "rs3",
               "does not split", NULL);
  otm_free(m);
  m = otm_new(17);
  otm_add_opset(m, "com.onyx.collective", 1);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4});
  n = otm_node(m, "AllReduce", "ar0", "X", "Y");
  otm_node_domain(n, "com.onyx.collective");
  otm_attr_int(n, "group_size", 0);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, -1, NULL);
  expect_error(make_session(m, NULL, &sess), ONYX_INVALID_MODEL, "group_size 0", "ar0",
               "group_size 0", NULL);
  otm_free(m);

  /* The MPI backend, asked for where it cannot load: a clear error. */
  OnyxProcessGroupOptions po;
  onyx_process_group_options_init(&po);
  po.backend = "mpi";
  po.library_path = "/nonexistent/libonyx_mpi.so";
  pg = NULL;
  expect_error(onyx_process_group_create(&po, &pg), ONYX_NOT_FOUND, "missing backend",
               "/nonexistent/libonyx_mpi.so", "libmpi.so.40", "libopenmpi-dev", NULL);
  CHECK(pg == NULL);

  /* torchrun-style variables without mpirun meet at MASTER_ADDR:MASTER_PORT;
   * a missing or malformed one is named before anything starts. */
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  unsetenv("MASTER_PORT");
  expect_error(onyx_process_group_create(NULL, &pg), ONYX_INVALID_ARGUMENT, "no MASTER_PORT",
               "MASTER_PORT is unset", "torchrun", "rank 1 of 2", "mpirun -np 2", NULL);
  setenv("MASTER_PORT", "70000", 1);
  expect_error(onyx_process_group_create(NULL, &pg), ONYX_INVALID_ARGUMENT, "bad MASTER_PORT",
               "MASTER_PORT='70000' is not a port number", NULL);
  unsetenv("MASTER_ADDR");
  setenv("MASTER_PORT", "29500", 1);
  expect_error(onyx_process_group_create(NULL, &pg), ONYX_INVALID_ARGUMENT, "no MASTER_ADDR",
               "MASTER_ADDR is unset", NULL);
  setenv("RANK", "2", 1);
  expect_error(onyx_process_group_create(NULL, &pg), ONYX_INVALID_ARGUMENT, "torchrun rank 2",
               "RANK", NULL);
  setenv("RANK", "1", 1);
  setenv("ONYX_DIST_BACKEND", "tcp", 1);
  expect_error(onyx_process_group_create(NULL, &pg), ONYX_INVALID_ARGUMENT, "bad ONYX_DIST_BACKEND",
               "ONYX_DIST_BACKEND 'tcp'", "\"store\"", NULL);
  unsetenv("ONYX_DIST_BACKEND");
  /* Rank 1 with nobody serving the store: it gives up at the timeout and
   * says where it looked. */
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "1", 1); /* a privileged port nobody serves here */
  OnyxProcessGroupOptions to;
  onyx_process_group_options_init(&to);
  to.timeout_ms = 300;
  to.backend = "store";
  double t0 = now_ms();
  expect_error(onyx_process_group_create(&to, &pg), ONYX_RUNTIME_ERROR, "no store", "rank 1 of 2",
               "127.0.0.1:1", "connecting", "timed out after 300 ms", NULL);
  CHECK(now_ms() - t0 < 5000);
  CHECK(pg == NULL);
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
  /* The store backend serves launches without mpirun only. */
  onyx_process_group_options_init(&to);
  to.rank = 0;
  to.size = 2;
  to.backend = "store";
  expect_error(onyx_process_group_create(&to, &pg), ONYX_INVALID_ARGUMENT, "store from options",
               "backend \"store\"", "without MASTER_ADDR", NULL);

  /* Explicit rank and size. */
  onyx_process_group_options_init(&po);
  po.rank = 3;
  po.size = 2;
  expect_error(onyx_process_group_create(&po, &pg), ONYX_INVALID_ARGUMENT, "rank 3 of 2", "rank 3",
               NULL);
  po.rank = 0;
  po.size = 2;
  po.backend = "none";
  expect_error(onyx_process_group_create(&po, &pg), ONYX_INVALID_ARGUMENT, "none of 2", "\"none\"",
               NULL);
  po.backend = "tcp";
  expect_error(onyx_process_group_create(&po, &pg), ONYX_INVALID_ARGUMENT, "bad backend", "'tcp'",
               NULL);
  onyx_process_group_options_init(&po);
  po.size = 1;
  po.local_rank = 5;
  ok(onyx_process_group_create(&po, &pg), "explicit world of one");
  CHECK(onyx_process_group_size(pg) == 1 && onyx_process_group_local_rank(pg) == 5);
  onyx_process_group_release(pg);
  onyx_process_group_release(NULL);
  CHECK(onyx_process_group_size(NULL) == 1);
}

/* --- Two ranks under mpirun ---------------------------------------------------------------- */

static void test_mpi(void) {
  OnyxProcessGroupOptions po;
  onyx_process_group_options_init(&po);
  po.timeout_ms = 20000;
  OnyxProcessGroup* pg = NULL;
  ok(onyx_process_group_create(&po, &pg), "create");
  const int rank = onyx_process_group_rank(pg), size = onyx_process_group_size(pg);
  g_rank = rank;
  CHECK(size == 2);
  CHECK(!strcmp(onyx_process_group_backend(pg), "mpi"));

  /* all_reduce: rank r holds (r + 1)(i + 1). */
  static const OnyxReduceOp ops[] = {ONYX_REDUCE_SUM, ONYX_REDUCE_AVG, ONYX_REDUCE_MAX,
                                     ONYX_REDUCE_MIN};
  for (size_t k = 0; k < 4; k++) {
    float f[5];
    int64_t q[5];
    for (int i = 0; i < 5; i++) {
      f[i] = (float)((rank + 1) * (i + 1));
      q[i] = (int64_t)(rank + 1) * (i + 1) * 1000000000LL;
    }
    ok(onyx_process_group_all_reduce(pg, f, 5, ONYX_ELEM_FLOAT32, ops[k]), "all_reduce f32");
    ok(onyx_process_group_all_reduce(pg, q, 5, ONYX_ELEM_INT64, ops[k]), "all_reduce i64");
    for (int i = 0; i < 5; i++) {
      double vals[8], sum = 0, mx = -1e300, mn = 1e300;
      for (int r = 0; r < size; r++) {
        vals[r] = (double)((r + 1) * (i + 1));
        sum += vals[r];
        mx = fmax(mx, vals[r]);
        mn = fmin(mn, vals[r]);
      }
      double want = ops[k] == ONYX_REDUCE_SUM   ? sum
                    : ops[k] == ONYX_REDUCE_AVG ? sum / size
                    : ops[k] == ONYX_REDUCE_MAX ? mx
                                                : mn;
      CHECK(f[i] == (float)want);
      CHECK(q[i] == (int64_t)(want * 1e9));
    }
  }
  /* all_gather: rank r sends 10 r + j. */
  int32_t send[3], recv[6];
  for (int j = 0; j < 3; j++)
    send[j] = 10 * rank + j;
  ok(onyx_process_group_all_gather(pg, send, recv, 3, ONYX_ELEM_INT32), "all_gather");
  for (int r = 0; r < size; r++)
    for (int j = 0; j < 3; j++)
      CHECK(recv[r * 3 + j] == 10 * r + j);
  /* reduce_scatter: rank r sends 100 r + j (j < 6); rank k gets the sum of
   * block k. */
  double rs_send[6], rs_recv[3];
  for (int j = 0; j < 6; j++)
    rs_send[j] = 100.0 * rank + j;
  ok(onyx_process_group_reduce_scatter(pg, rs_send, rs_recv, 3, ONYX_ELEM_FLOAT64, ONYX_REDUCE_SUM),
     "reduce_scatter");
  for (int j = 0; j < 3; j++) {
    double want = 0;
    for (int r = 0; r < size; r++)
      want += 100.0 * r + rank * 3 + j;
    CHECK(rs_recv[j] == want);
  }
  /* broadcast from rank 1. */
  char text[8] = {0};
  if (rank == 1) memcpy(text, "hello", 6);
  ok(onyx_process_group_broadcast(pg, text, sizeof text, 1), "broadcast");
  CHECK(!strcmp(text, "hello"));
  /* all_to_all: rank r sends 10 r + j (j < 4), block k (2 values) to rank k. */
  int16_t a2a_send[4], a2a_recv[4];
  for (int j = 0; j < 4; j++)
    a2a_send[j] = (int16_t)(10 * rank + j);
  ok(onyx_process_group_all_to_all(pg, a2a_send, a2a_recv, 2, ONYX_ELEM_INT16), "all_to_all");
  for (int r = 0; r < size; r++)
    for (int j = 0; j < 2; j++)
      CHECK(a2a_recv[r * 2 + j] == 10 * r + 2 * rank + j);
  ok(onyx_process_group_barrier(pg), "barrier");

  /* The ops in a session, with shapes inferred for group_size 2. */
  OxTestModel* m = all_ops_model(2, "sum");
  OnyxSession* sess = NULL;
  ok(make_session(m, pg, &sess), "session");
  OnyxElemType type;
  int32_t r;
  const int64_t* dims;
  ok(onyx_session_output_info(sess, 1, &type, &r, &dims), "ag info");
  CHECK(type == ONYX_ELEM_FLOAT32 && r == 2 && dims[0] == 2 && dims[1] == 8);
  ok(onyx_session_output_info(sess, 2, &type, &r, &dims), "rs info");
  CHECK(r == 2 && dims[0] == 2 && dims[1] == 2);
  ok(onyx_session_output_info(sess, 4, &type, &r, &dims), "a2a info");
  CHECK(r == 2 && dims[0] == 2 && dims[1] == 4);
  run_all_ops(sess, rank, size);
  run_all_ops(sess, rank, size); /* again: the group stays usable */
  onyx_session_release(sess);
  otm_free(m);

  /* The split all-reduce over 2 ranks, two in flight at once. */
  m = split_model(2);
  ok(make_session(m, pg, &sess), "split session");
  run_split(sess, rank, size);
  run_split(sess, rank, size);
  onyx_session_release(sess);
  otm_free(m);

  /* group_size 3 in a world of 2. */
  m = otm_new(17);
  otm_add_opset(m, "com.onyx.collective", 1);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4});
  OxTestNode* n = otm_node(m, "AllReduce", "ar3", "X", "Y");
  otm_node_domain(n, "com.onyx.collective");
  otm_attr_int(n, "group_size", 3);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, -1, NULL);
  expect_error(make_session(m, pg, &sess), ONYX_INVALID_ARGUMENT, "group_size 3", "group_size is 3",
               "2 ranks", NULL);
  otm_free(m);

  /* A mismatched world: rank 1 has another model (AllReduce with max). */
  m = all_ops_model(2, rank == 1 ? "max" : "sum");
  expect_error(make_session(m, pg, &sess), ONYX_INVALID_MODEL, "mismatched world",
               "mismatched world", "rank 1 has a different model", NULL);
  otm_free(m);
  /* The check left the group usable. */
  ok(onyx_process_group_barrier(pg), "barrier after the check");
  onyx_process_group_release(pg);
}

/* --- A stalled rank ------------------------------------------------------------------------- */

/* Both ranks run an AllReduce node on a new group made with po, rank 1 1.5 s
 * late: rank 0 fails after the group's timeout (max_run_ms 0) or when its
 * run's time limit cancels the wait; rank 1's late run still completes with
 * the sum, as rank 0's abandoned call matches it. */
static void late_run(const OnyxProcessGroupOptions* po, uint64_t max_run_ms) {
  OnyxProcessGroup* pg = NULL;
  ok(onyx_process_group_create(po, &pg), "group");
  const int rank = onyx_process_group_rank(pg);
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "com.onyx.collective", 1);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4});
  OxTestNode* n = otm_node(m, "AllReduce", "ar_late", "X", "Y");
  otm_node_domain(n, "com.onyx.collective");
  otm_attr_int(n, "group_size", 2);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, -1, NULL);
  OnyxSession* sess = NULL;
  ok(make_session_limited(m, pg, rank == 0 ? max_run_ms : 0, &sess), "session");
  otm_free(m);
  float x[4] = {1, 2, 3, 4};
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){4}, 1, x, sizeof x, &in), "x");
  const char* in_name = "X";
  const char* out_name = "Y";
  OnyxValue* out = NULL;
  if (rank == 1) usleep(1500 * 1000);
  double t0 = now_ms();
  OnyxStatus* st =
      onyx_session_run(sess, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &out);
  const double took = now_ms() - t0;
  if (rank == 0 && !max_run_ms) {
    CHECK(took < 1750);
    expect_error(st, ONYX_RUNTIME_ERROR, "stalled peer in a run", "ar_late", "timed out", NULL);
  } else if (rank == 0) {
    CHECK(took >= 250 && took < 1000);
    expect_error(st, ONYX_CANCELLED, "run time limit", "ar_late", NULL);
  } else {
    ok(st, "late run");
    const float* y = onyx_tensor_data(onyx_value_tensor(out));
    for (int i = 0; i < 4; i++)
      CHECK(y[i] == 2.0f * (float)(i + 1));
  }
  onyx_value_release(out);
  onyx_value_release(in);
  onyx_session_release(sess);
  onyx_process_group_release(pg);
}

static void test_fault(void) {
  OnyxProcessGroupOptions po;
  onyx_process_group_options_init(&po);
  po.timeout_ms = 1000;
  OnyxProcessGroup* pg = NULL;
  ok(onyx_process_group_create(&po, &pg), "create");
  const int rank = onyx_process_group_rank(pg);
  g_rank = rank;
  CHECK(onyx_process_group_size(pg) == 2);
  ok(onyx_process_group_barrier(pg), "barrier");
  float v[4] = {1, 2, 3, 4};
  if (rank == 0) {
    /* Rank 1 stalls for 1.5 s: rank 0 gives up at its 1 s timeout. */
    double t0 = now_ms();
    expect_error(onyx_process_group_all_reduce(pg, v, 4, ONYX_ELEM_FLOAT32, ONYX_REDUCE_SUM),
                 ONYX_RUNTIME_ERROR, "stalled peer", "all_reduce", "timed out", "1000 ms",
                 "rank 0 of 2", "rank 1 did not answer", NULL);
    /* The timeout, then at most the 300 ms the ranks are asked where they are. */
    double took = now_ms() - t0;
    CHECK(took >= 950 && took < 1750);
    /* The group is broken from then on: later calls fail at once. */
    t0 = now_ms();
    expect_error(onyx_process_group_barrier(pg), ONYX_RUNTIME_ERROR, "broken group", "broken",
                 NULL);
    CHECK(now_ms() - t0 < 100);
  } else {
    usleep(1500 * 1000);
    /* The late call still matches rank 0's abandoned one, whose data MPI
     * kept: the sum of both ranks' {1, 2, 3, 4}. */
    ok(onyx_process_group_all_reduce(pg, v, 4, ONYX_ELEM_FLOAT32, ONYX_REDUCE_SUM), "late");
    for (int i = 0; i < 4; i++)
      CHECK(v[i] == 2.0f * (float)(i + 1));
  }
  onyx_process_group_release(pg);

  /* The same in a session: a new group (MPI stays initialized), an AllReduce
   * node, rank 1 late by 1.5 s. Rank 0's run fails naming the node. */
  late_run(&po, 0);
  /* A run's time limit cancels the wait long before the group's timeout. */
  po.timeout_ms = 10000;
  late_run(&po, 300);
}

/* --- NCCL in the CUDA provider, one rank -------------------------------------------------- */

/* The five ops on the CUDA provider with group_size 1 (a one-rank NCCL
 * communicator; the inner-axis layouts go through the pack and unpack
 * copies). Returns 77 (skip) without a CUDA device or provider. */
static int test_cuda(void) {
  OxTestModel* m = all_ops_model(1, "sum");
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o), "options");
  ok(onyx_session_options_add_provider(o, "cuda", NULL, 0, 1), "add cuda");
  OnyxSession* sess = NULL;
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, &sess);
  onyx_session_options_release(o);
  free(bytes);
  if (st && (onyx_status_code(st) == ONYX_NO_DEVICE || onyx_status_code(st) == ONYX_NOT_FOUND)) {
    printf("SKIP: no CUDA device or provider: %s\n", onyx_status_message(st));
    onyx_status_release(st);
    return 77;
  }
  ok(st, "cuda session");
  for (size_t i = 0; i < onyx_session_provider_count(sess); i++)
    if (!strcmp(onyx_session_provider_name(sess, i), "cuda"))
      CHECK(onyx_session_provider_node_count(sess, i) == 5);
  run_all_ops(sess, 0, 1);
  onyx_session_release(sess);
  return 0;
}

/* --- Two ranks without mpirun, backend "store" ------------------------------------------ */

/* Started by scripts/onyx-launch.sh 2 (RANK, WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT) with ONYX_DIST_BACKEND=store: no MPI at all. The group's
 * broadcast, all-gather and barrier go through the TCP store (what NCCL's
 * bootstrap and the world check need); data collectives are refused. */
static void test_store(void) {
  OnyxProcessGroupOptions po;
  onyx_process_group_options_init(&po);
  po.timeout_ms = 3000;
  OnyxProcessGroup* pg = NULL;
  ok(onyx_process_group_create(&po, &pg), "create");
  const int rank = onyx_process_group_rank(pg);
  g_rank = rank;
  CHECK(onyx_process_group_size(pg) == 2);
  CHECK(!strcmp(onyx_process_group_backend(pg), "store"));
  CHECK(onyx_process_group_local_rank(pg) == rank); /* LOCAL_RANK from the launcher */
  /* NCCL's bootstrap: rank 0's 128-byte ncclUniqueId to every rank (byte i
   * = (3 i + 1) mod 256 on rank 0, zeros elsewhere), then the same from
   * rank 1 (byte i = 255 - i). */
  unsigned char id[128];
  for (int i = 0; i < 128; i++)
    id[i] = rank == 0 ? (unsigned char)((3 * i + 1) & 255) : 0;
  ok(onyx_process_group_broadcast(pg, id, sizeof id, 0), "broadcast");
  for (int i = 0; i < 128; i++)
    CHECK(id[i] == (unsigned char)((3 * i + 1) & 255));
  for (int i = 0; i < 128; i++)
    id[i] = rank == 1 ? (unsigned char)(255 - i) : 0;
  ok(onyx_process_group_broadcast(pg, id, sizeof id, 1), "broadcast from rank 1");
  for (int i = 0; i < 128; i++)
    CHECK(id[i] == (unsigned char)(255 - i));
  /* all_gather: rank r sends 10 r + j. */
  int64_t send[3], recv[6];
  for (int j = 0; j < 3; j++)
    send[j] = 10 * rank + j;
  ok(onyx_process_group_all_gather(pg, send, recv, 3, ONYX_ELEM_INT64), "all_gather");
  for (int r = 0; r < 2; r++)
    for (int j = 0; j < 3; j++)
      CHECK(recv[r * 3 + j] == 10 * r + j);
  ok(onyx_process_group_barrier(pg), "barrier");
  /* Data collectives need MPI; large payloads are no rendezvous. Neither
   * breaks the group. */
  float f[4] = {1, 2, 3, 4};
  expect_error(onyx_process_group_all_reduce(pg, f, 4, ONYX_ELEM_FLOAT32, ONYX_REDUCE_SUM),
               ONYX_NOT_IMPLEMENTED, "all_reduce on the store", "needs the MPI backend",
               "backend \"store\"", NULL);
  static unsigned char big[70000];
  expect_error(onyx_process_group_broadcast(pg, big, sizeof big, 0), ONYX_NOT_IMPLEMENTED,
               "big broadcast", "70000 bytes", "at most 65536", NULL);
  ok(onyx_process_group_barrier(pg), "barrier after refusals");
  /* A stalled rank: rank 1 sleeps past the 3 s timeout before its
   * broadcast; rank 0 gives up at the timeout, and its group is broken. */
  if (rank == 0) {
    double t0 = now_ms();
    expect_error(onyx_process_group_broadcast(pg, id, 16, 1), ONYX_RUNTIME_ERROR, "stalled rank 1",
                 "broadcast", "rank 0 of 2", "timed out after 3000 ms", NULL);
    double took = now_ms() - t0;
    CHECK(took >= 2950 && took < 3900);
    expect_error(onyx_process_group_barrier(pg), ONYX_RUNTIME_ERROR, "broken group", "broken",
                 NULL);
  } else {
    usleep(3500 * 1000);
    /* The root's part of a broadcast only writes to the store. */
    ok(onyx_process_group_broadcast(pg, id, 16, 1), "late broadcast");
  }
  onyx_process_group_release(pg);
}

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "local";
  if (!strcmp(what, "local"))
    test_local();
  else if (!strcmp(what, "mpi"))
    test_mpi();
  else if (!strcmp(what, "fault"))
    test_fault();
  else if (!strcmp(what, "store"))
    test_store();
  else if (!strcmp(what, "cuda")) {
    int rc = test_cuda();
    if (rc) return rc;
  } else {
    fprintf(stderr, "usage: test_dist local|mpi|fault|store|cuda\n");
    return 2;
  }
  if (g_failures) fprintf(stderr, "rank %d: %d check(s) failed\n", g_rank, g_failures);
  return g_failures ? 1 : 0;
}
