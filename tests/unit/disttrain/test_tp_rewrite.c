/* test_tp_rewrite.c — the tensor-parallel rewrite (ox_tensor_parallel) on
 * the model of make_bert_block.py, for rank 0 and rank 1 of 2, without MPI:
 * the sliced weights are checked element by element against the original
 * ones (the QKV columns per block of Q, K and V; the output and second MLP
 * projections by rows), the Reshape shapes and Split sizes rescaled, four
 * AllReduce(sum, group_size 2) nodes, and the rewritten graph resolves with
 * the output's shape unchanged.
 *
 * usage: test_tp_rewrite MODEL.onnx; exit 0 pass, 1 fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_graph.h"
#include "ox_model.h"
#include "ox_tensor_parallel.h"

enum { H = 32, F = 64, SIZE = 2 };

static int failures;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL (line %d): ", __LINE__);                                               \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

/* The constant a node reads at input i, when its value's name starts with
 * `base` followed by '/' (the rewrite's fresh names): the first such node. */
static const OxTensor* sliced(const OxGraph* g, const char* base, size_t i, const OxNode** at) {
  size_t len = strlen(base);
  for (size_t k = 0; k < g->n_nodes; k++) {
    const OxNode* n = g->nodes[k];
    if (i < n->n_inputs && n->inputs[i] && n->inputs[i]->constant &&
        !strncmp(n->inputs[i]->name, base, len) && n->inputs[i]->name[len] == '/') {
      if (at) *at = n;
      return n->inputs[i]->constant;
    }
  }
  return NULL;
}

static const OxTensor* original(const OxGraph* g, const char* name) {
  const OxValue* v = ox_graph_find(g, name);
  return v ? v->constant : NULL;
}

/* new[r, c] == old[map(r, c)] for a 2-D float tensor; cols_per_block 0:
 * a row slice from row0. */
static void check_cols(const OxTensor* old, const OxTensor* t, int64_t blocks, int rank,
                       const char* what) {
  CHECK(t && t->rank == 2 && t->dims[0] == old->dims[0] && t->dims[1] == old->dims[1] / SIZE,
        "%s: not [%lld, %lld]", what, (long long)old->dims[0], (long long)old->dims[1] / SIZE);
  if (!t || t->rank != 2 || t->dims[1] != old->dims[1] / SIZE) return;
  int64_t D = old->dims[1], part = D / (blocks * SIZE);
  const float* a = old->data;
  const float* b = t->data;
  for (int64_t r = 0; r < t->dims[0]; r++)
    for (int64_t c = 0; c < t->dims[1]; c++) {
      int64_t blk = c / part, k = c % part, src = blk * (D / blocks) + rank * part + k;
      if (b[r * t->dims[1] + c] != a[r * D + src]) {
        CHECK(0, "%s: [%lld, %lld] is not the original's [%lld, %lld]", what, (long long)r,
              (long long)c, (long long)r, (long long)src);
        return;
      }
    }
}

static void check_rows(const OxTensor* old, const OxTensor* t, int rank, const char* what) {
  CHECK(t && t->rank == 2 && t->dims[0] == old->dims[0] / SIZE && t->dims[1] == old->dims[1],
        "%s: not [%lld, %lld]", what, (long long)old->dims[0] / SIZE, (long long)old->dims[1]);
  if (!t || t->rank != 2 || t->dims[0] != old->dims[0] / SIZE) return;
  size_t row = (size_t)t->dims[1] * sizeof(float);
  CHECK(!memcmp(t->data, (const char*)old->data + (size_t)rank * (size_t)t->dims[0] * row,
                (size_t)t->dims[0] * row),
        "%s: not rows [%lld, %lld) of the original", what, (long long)(rank * t->dims[0]),
        (long long)((rank + 1) * t->dims[0]));
}

static void check_ints(const OxTensor* t, const int64_t* want, size_t n, const char* what) {
  CHECK(t && t->type == ONYX_ELEM_INT64 && t->count == n && !memcmp(t->data, want, n * 8),
        "%s: not the rescaled values", what);
}

static void rewrite(const char* path, int rank) {
  OxGraph* g = NULL;    /* rewritten */
  OxGraph* orig = NULL; /* the original weights */
  OnyxStatus* st = ox_model_load_file(path, NULL, &g);
  if (!st) st = ox_model_load_file(path, NULL, &orig);
  if (!st) st = ox_graph_toposort(g);
  if (!st) st = ox_graph_resolve(g, NULL, 0);
  char* report = NULL;
  if (!st) st = ox_tensor_parallel(g, rank, SIZE, &report);
  if (!st) st = ox_graph_resolve(g, NULL, 0);
  CHECK(!st, "rank %d: %s", rank, st ? st->message : "");
  if (st) {
    ox_status_free(st);
    ox_graph_free(g);
    ox_graph_free(orig);
    return;
  }
  printf("rank %d: %s\n", rank, report ? report : "(no report)");
  CHECK(report && strstr(report, "4 regions sharded"), "rank %d: report '%s'", rank,
        report ? report : "");
  free(report);
  size_t n_ar = 0;
  for (size_t k = 0; k < g->n_nodes; k++) {
    const OxNode* n = g->nodes[k];
    if (strcmp(n->op_type, "AllReduce")) continue;
    n_ar++;
    CHECK(!strcmp(n->domain, "com.onyx.collective"), "AllReduce domain '%s'", n->domain);
    CHECK(ox_node_attr_int(n, "group_size", 0) == SIZE, "AllReduce group_size");
    CHECK(!strcmp(ox_node_attr_string(n, "reduce", ""), "sum"), "AllReduce reduce");
    const OxNode* p = n->inputs[0] ? n->inputs[0]->producer : NULL;
    CHECK(p && !strcmp(p->op_type, "MatMul"), "an AllReduce does not follow a MatMul");
  }
  CHECK(n_ar == 4, "rank %d: %zu AllReduce nodes, expected 4", rank, n_ar);
  for (int l = 0; l < 2; l++) {
    char name[32], what[64];
    const char* cols[][2] = {{"qkv.w", "3"}, {"f1.w", "1"}};
    for (int c = 0; c < 2; c++) {
      snprintf(name, sizeof name, "l%d.%s", l, cols[c][0]);
      snprintf(what, sizeof what, "rank %d %s", rank, name);
      check_cols(original(orig, name), sliced(g, name, 1, NULL), atoi(cols[c][1]), rank, what);
    }
    const char* rows[] = {"o.w", "f2.w"};
    for (int c = 0; c < 2; c++) {
      snprintf(name, sizeof name, "l%d.%s", l, rows[c]);
      snprintf(what, sizeof what, "rank %d %s", rank, name);
      check_rows(original(orig, name), sliced(g, name, 1, NULL), rank, what);
    }
    /* Biases of the column-parallel products: sliced as their columns. */
    snprintf(name, sizeof name, "l%d.qkv.b", l);
    const OxTensor* qb = sliced(g, name, 0, NULL);
    const OxTensor* qo = original(orig, name);
    CHECK(qb && qb->count == 3 * H / SIZE, "rank %d %s: %zu elements", rank, name,
          qb ? qb->count : 0);
    for (size_t c = 0; qb && qo && c < qb->count && c < 3 * H / SIZE; c++) {
      size_t part = H / SIZE, src = (c / part) * H + (size_t)rank * part + c % part;
      CHECK(((const float*)qb->data)[c] == ((const float*)qo->data)[src], "%s[%zu]", name, c);
    }
    /* The biases of the row-parallel products are whole, after the AllReduce. */
    snprintf(name, sizeof name, "l%d.o.b", l);
    CHECK(!sliced(g, name, 0, NULL) && ox_graph_find(g, name), "%s was sliced", name);
    snprintf(name, sizeof name, "l%d.split", l);
    const int64_t split[3] = {H / SIZE, H / SIZE, H / SIZE};
    check_ints(sliced(g, name, 1, NULL), split, 3, name);
    snprintf(name, sizeof name, "l%d.heads", l);
    const int64_t heads0[4] = {0, 0, 4 / SIZE, 8}, heads1[4] = {0, 0, -1, 8};
    check_ints(sliced(g, name, 1, NULL), l == 0 ? heads0 : heads1, 4, name);
    snprintf(name, sizeof name, "l%d.merge", l);
    const int64_t merge0[3] = {0, 0, H / SIZE}, merge1[3] = {0, 0, -1};
    check_ints(sliced(g, name, 1, NULL), l == 0 ? merge0 : merge1, 3, name);
  }
  const OxValue* y = g->n_outputs ? g->outputs[0] : NULL;
  CHECK(y && y->rank == 3 && y->dims[2] == H, "the output is no longer [B, S, %d]", H);
  ox_graph_free(g);
  ox_graph_free(orig);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_tp_rewrite MODEL.onnx\n");
    return 2;
  }
  for (int r = 0; r < SIZE; r++)
    rewrite(argv[1], r);
  /* A world of one rank changes nothing. */
  OxGraph* g = NULL;
  char* report = NULL;
  OnyxStatus* st = ox_model_load_file(argv[1], NULL, &g);
  size_t before = g ? g->n_nodes : 0;
  if (!st) st = ox_tensor_parallel(g, 0, 1, &report);
  CHECK(!st && g->n_nodes == before, "a world of one rank changed the graph");
  if (st) ox_status_free(st);
  free(report);
  ox_graph_free(g);
  printf("%s: %d failure%s\n", failures ? "FAIL" : "pass", failures, failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
