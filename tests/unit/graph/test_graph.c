/* test_graph.c — the IR builder, topological sort and resolve. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include "ox_graph.h"

#define NAMES(...) ((const char* const[]){__VA_ARGS__})

static OxGraph* new_graph(void) {
  OxGraph* g = NULL;
  assert_null(ox_graph_new("g", &g));
  g->opsets = calloc(1, sizeof *g->opsets);
  g->opsets[0].domain = strdup("");
  g->opsets[0].version = 17;
  g->n_opsets = 1;
  return g;
}

static void add_input(OxGraph* g, const char* name, int64_t n) {
  OxValue* v;
  assert_null(ox_graph_value(g, name, &v));
  assert_null(ox_value_set(v, ONYX_ELEM_FLOAT32, 1, &n));
  assert_null(ox_graph_add_input(g, v));
}

static void expect_error(OnyxStatus* st, OnyxStatusCode code, const char* needle) {
  assert_non_null(st);
  assert_int_equal(st->code, code);
  if (!strstr(st->message, needle)) fail_msg("'%s' not in '%s'", needle, st->message);
  ox_status_free(st);
}

/* Nodes added out of order come out in dependency order; among ready nodes
 * the model's order is kept. */
static void test_toposort_orders_and_is_stable(void** state) {
  (void)state;
  OxGraph* g = new_graph();
  add_input(g, "x", 4);
  assert_null(ox_graph_add_node(g, "c", "Relu", "", NAMES("b"), 1, NAMES("out"), 1, NULL));
  assert_null(ox_graph_add_node(g, "a", "Relu", "", NAMES("x"), 1, NAMES("a_out"), 1, NULL));
  assert_null(ox_graph_add_node(g, "d", "Relu", "", NAMES("x"), 1, NAMES("d_out"), 1, NULL));
  assert_null(
      ox_graph_add_node(g, "b", "Add", "", NAMES("a_out", "d_out"), 2, NAMES("b"), 1, NULL));
  assert_null(ox_graph_toposort(g));
  const char* want[] = {"a", "d", "b", "c"};
  for (size_t i = 0; i < 4; i++) {
    assert_string_equal(g->nodes[i]->name, want[i]);
    assert_int_equal(g->nodes[i]->index, i);
  }
  ox_graph_free(g);
}

/* Priority order: among ready nodes the lower priority runs first; a
 * dependency still wins over any priority. */
static void test_priority_order(void** state) {
  (void)state;
  OxGraph* g = new_graph();
  add_input(g, "x", 4);
  OxNode *a, *b, *c;
  assert_null(ox_graph_add_node(g, "a", "Relu", "", NAMES("x"), 1, NAMES("a_out"), 1, &a));
  assert_null(ox_graph_add_node(g, "b", "Relu", "", NAMES("x"), 1, NAMES("b_out"), 1, &b));
  assert_null(ox_graph_add_node(g, "c", "Relu", "", NAMES("b_out"), 1, NAMES("c_out"), 1, &c));
  a->priority = 5;
  b->priority = 1;
  c->priority = -9;                  /* cannot run before its producer b */
  assert_null(ox_graph_toposort(g)); /* the default ignores priorities */
  const char* plain[] = {"a", "b", "c"};
  for (size_t i = 0; i < 3; i++)
    assert_string_equal(g->nodes[i]->name, plain[i]);
  assert_null(ox_graph_order(g, true));
  const char* want[] = {"b", "c", "a"};
  for (size_t i = 0; i < 3; i++)
    assert_string_equal(g->nodes[i]->name, want[i]);
  ox_graph_free(g);
}

static void test_cycle_names_a_node(void** state) {
  (void)state;
  OxGraph* g = new_graph();
  add_input(g, "x", 4);
  assert_null(
      ox_graph_add_node(g, "p", "Add", "", NAMES("x", "q_out"), 2, NAMES("p_out"), 1, NULL));
  assert_null(ox_graph_add_node(g, "q", "Relu", "", NAMES("p_out"), 1, NAMES("q_out"), 1, NULL));
  expect_error(ox_graph_toposort(g), ONYX_INVALID_MODEL, "cycle through node 'p'");
  ox_graph_free(g);
}

static void test_dangling_input_is_named(void** state) {
  (void)state;
  OxGraph* g = new_graph();
  add_input(g, "x", 4);
  assert_null(ox_graph_add_node(g, "n", "Add", "", NAMES("x", "ghost"), 2, NAMES("y"), 1, NULL));
  expect_error(ox_graph_toposort(g), ONYX_INVALID_MODEL, "'ghost'");
  ox_graph_free(g);
}

static void test_value_produced_twice(void** state) {
  (void)state;
  OxGraph* g = new_graph();
  add_input(g, "x", 4);
  assert_null(ox_graph_add_node(g, "n1", "Relu", "", NAMES("x"), 1, NAMES("y"), 1, NULL));
  OnyxStatus* st = ox_graph_add_node(g, "n2", "Relu", "", NAMES("x"), 1, NAMES("y"), 1, NULL);
  expect_error(st, ONYX_INVALID_MODEL, "node 'n1'");
  st = ox_graph_add_node(g, "n3", "Relu", "", NAMES("y"), 1, NAMES("x"), 1, NULL);
  expect_error(st, ONYX_INVALID_MODEL, "graph input");
  ox_graph_free(g);
}

static void test_unnamed_nodes_get_names(void** state) {
  (void)state;
  OxGraph* g = new_graph();
  add_input(g, "x", 4);
  OxNode* n = NULL;
  assert_null(ox_graph_add_node(g, NULL, "Relu", "ai.onnx", NAMES("x"), 1, NAMES("y"), 1, &n));
  assert_string_equal(n->name, "Relu_0");
  assert_string_equal(n->domain, ""); /* ai.onnx is normalized */
  ox_graph_free(g);
}

static void test_remove_node_unlinks(void** state) {
  (void)state;
  OxGraph* g = new_graph();
  add_input(g, "x", 4);
  OxNode* a = NULL;
  assert_null(ox_graph_add_node(g, "a", "Relu", "", NAMES("x"), 1, NAMES("y"), 1, &a));
  assert_null(ox_graph_add_node(g, "b", "Relu", "", NAMES("y"), 1, NAMES("z"), 1, NULL));
  OxValue* x = ox_graph_find(g, "x");
  assert_int_equal(x->n_consumers, 1);
  ox_graph_remove_node(g, a);
  assert_int_equal(x->n_consumers, 0);
  assert_null(ox_graph_find(g, "y")->producer);
  assert_int_equal(g->n_nodes, 1);
  assert_int_equal(g->nodes[0]->index, 0);
  ox_graph_free(g);
}

/* Resolve: schemas fill defaults and infer types and shapes. */
static void test_resolve_infers_and_fills_defaults(void** state) {
  (void)state;
  OxGraph* g = new_graph();
  add_input(g, "x", 4);
  OxNode* n = NULL;
  assert_null(ox_graph_add_node(g, "sm", "Softmax", "", NAMES("x"), 1, NAMES("y"), 1, &n));
  assert_null(ox_graph_add_output(g, ox_graph_find(g, "y")));
  assert_null(ox_graph_resolve(g, NULL, 0));
  assert_int_equal(n->since_version, 13);
  assert_int_equal(ox_node_attr_int(n, "axis", 99), -1); /* the v13 default */
  OxValue* y = ox_graph_find(g, "y");
  assert_int_equal(y->type, ONYX_ELEM_FLOAT32);
  assert_int_equal(y->rank, 1);
  assert_int_equal(y->dims[0], 4);
  ox_graph_free(g);
}

static void test_resolve_unknown_op_and_domain(void** state) {
  (void)state;
  OxGraph* g = new_graph();
  add_input(g, "x", 4);
  assert_null(ox_graph_add_node(g, "w", "Wibble", "", NAMES("x"), 1, NAMES("y"), 1, NULL));
  expect_error(ox_graph_resolve(g, NULL, 0), ONYX_NOT_IMPLEMENTED, "node 'w' (Wibble)");
  ox_graph_free(g);
  g = new_graph();
  add_input(g, "x", 4);
  assert_null(ox_graph_add_node(g, "c", "Thing", "com.acme", NAMES("x"), 1, NAMES("y"), 1, NULL));
  expect_error(ox_graph_resolve(g, NULL, 0), ONYX_INVALID_MODEL, "com.acme");
  ox_graph_free(g);
}

static void test_resolve_input_without_type(void** state) {
  (void)state;
  OxGraph* g = new_graph();
  OxValue* v;
  assert_null(ox_graph_value(g, "x", &v));
  assert_null(ox_graph_add_input(g, v));
  expect_error(ox_graph_resolve(g, NULL, 0), ONYX_INVALID_MODEL, "'x' has no element type");
  ox_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_toposort_orders_and_is_stable),
      cmocka_unit_test(test_priority_order),
      cmocka_unit_test(test_cycle_names_a_node),
      cmocka_unit_test(test_dangling_input_is_named),
      cmocka_unit_test(test_value_produced_twice),
      cmocka_unit_test(test_unnamed_nodes_get_names),
      cmocka_unit_test(test_remove_node_unlinks),
      cmocka_unit_test(test_resolve_infers_and_fills_defaults),
      cmocka_unit_test(test_resolve_unknown_op_and_domain),
      cmocka_unit_test(test_resolve_input_without_type),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
