/* make_models.c — writes the models and the ONNX-layout test suite that
 * test_cli.sh runs the `onyx` command on, with the test model builder
 * (tests/util/ox_test_models.h).
 *
 * usage: make_models OUTDIR
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <onyx/onyx_types.h>
#include "ox_test_models.h"

/* --- Files ---------------------------------------------------------------------------------- */
static char out_dir[4096];

static void make_dir(const char* rel) {
  char path[8192];
  snprintf(path, sizeof path, "%s/%s", out_dir, rel);
  if (mkdir(path, 0777) && errno != EEXIST) {
    fprintf(stderr, "make_models: mkdir %s: %s\n", path, strerror(errno));
    exit(1);
  }
}

static void write_file(const char* rel, const void* data, size_t len) {
  char path[8192];
  snprintf(path, sizeof path, "%s/%s", out_dir, rel);
  FILE* f = fopen(path, "wb");
  if (!f || fwrite(data, 1, len, f) != len || fclose(f)) {
    fprintf(stderr, "make_models: cannot write %s\n", path);
    exit(1);
  }
}

static void write_model(const char* rel, OxTestModel* m) {
  char path[8192];
  snprintf(path, sizeof path, "%s/%s", out_dir, rel);
  if (!otm_write(m, path)) {
    fprintf(stderr, "make_models: cannot write %s\n", path);
    exit(1);
  }
  otm_free(m);
}

/* A TensorProto of `type` (float32 or int32); name "" leaves it unnamed
 * (matched by position). */
static void write_tensor_of(const char* rel, const char* name, int type, const int64_t* dims,
                            size_t rank, const void* v) {
  OxTestModel* m = otm_new(13); /* only owns the tensor */
  Onnx__TensorProto* t = otm_tensor(m, name, type, (int)rank, dims, v);
  if (type != ONYX_ELEM_BOOL) otm_tensor_typed(t); /* float_data, as most ONNX test files */
  size_t len = onnx__tensor_proto__get_packed_size(t);
  uint8_t* bytes = malloc(len ? len : 1);
  if (!bytes) exit(1);
  onnx__tensor_proto__pack(t, bytes);
  write_file(rel, bytes, len);
  free(bytes);
  otm_free(m);
}

static void write_tensor(const char* rel, const char* name, const int64_t* dims, size_t rank,
                         const float* v) {
  write_tensor_of(rel, name, ONYX_ELEM_FLOAT32, dims, rank, v);
}

/* y = Relu(Add(a, b)), a, b, y float [2,3]. */
static void write_add_relu(const char* rel) {
  static const int64_t dims[2] = {2, 3};
  OxTestModel* m = otm_new(13);
  otm_set_graph_name(m, "add_relu");
  otm_input(m, "a", ONYX_ELEM_FLOAT32, 2, dims);
  otm_input(m, "b", ONYX_ELEM_FLOAT32, 2, dims);
  otm_node(m, "Add", "add0", "a,b", "sum");
  otm_node(m, "Relu", "relu0", "sum", "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, dims);
  write_model(rel, m);
}

/* y = Relu(x), x float [N,4] with a symbolic N. */
static void write_relu_sym(const char* rel) {
  OxTestModel* m = otm_new(13);
  otm_set_graph_name(m, "relu_sym");
  otm_input_s(m, "x", ONYX_ELEM_FLOAT32, "N,4");
  otm_node(m, "Relu", "relu0", "x", "y");
  otm_output_s(m, "y", ONYX_ELEM_FLOAT32, "N,4");
  write_model(rel, m);
}

/* y = Exp(Relu(x)), x float [N,4] with a symbolic N: one planned value,
 * Relu's output [N,4] (16 N bytes). */
static void write_relu_exp_sym(const char* rel) {
  OxTestModel* m = otm_new(13);
  otm_set_graph_name(m, "relu_exp_sym");
  otm_input_s(m, "x", ONYX_ELEM_FLOAT32, "N,4");
  otm_node(m, "Relu", "relu0", "x", "r");
  otm_node(m, "Exp", "exp0", "r", "y");
  otm_output_s(m, "y", ONYX_ELEM_FLOAT32, "N,4");
  write_model(rel, m);
}

/* Inputs of every add_relu case, and Relu(a + b) worked out by hand. */
static const int64_t kDims[2] = {2, 3};
static const float kA[6] = {1, -2, 3, -4, 5, -6};
static const float kB[6] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
static const float kY[6] = {1.5f, 0, 3.5f, 0, 5.5f, 0};

/* One test folder: `names` 0 leaves the tensors unnamed (matched by position). */
static void write_case(const char* test, int names, const int64_t* y_dims, const float* y) {
  char rel[1024];
  make_dir(test);
  snprintf(rel, sizeof rel, "%s/model.onnx", test);
  write_add_relu(rel);
  snprintf(rel, sizeof rel, "%s/test_data_set_0", test);
  make_dir(rel);
  snprintf(rel, sizeof rel, "%s/test_data_set_0/input_0.pb", test);
  write_tensor(rel, names ? "a" : "", kDims, 2, kA);
  snprintf(rel, sizeof rel, "%s/test_data_set_0/input_1.pb", test);
  write_tensor(rel, names ? "b" : "", kDims, 2, kB);
  snprintf(rel, sizeof rel, "%s/test_data_set_0/output_0.pb", test);
  write_tensor(rel, names ? "y" : "", y_dims, 2, y);
}

/* --- The kit suite: `onyx test --provider fake --only` ------------------------------------------
 * Cases for the fake provider (tests/providers/fake: float32 Add, Mul, Relu
 * by default), one model each, in kit/test_kit_NAME. Inputs a, b float [2,3]
 * (kA, kB) unless said otherwise; expected outputs worked out by hand, or
 * with libm for Sigmoid. */
typedef struct KitCase {
  const char* name;
  OxTestModel* m;
} KitCase;

static KitCase kit_begin(const char* name) {
  KitCase k = {name, otm_new(13)};
  otm_set_graph_name(k.m, name);
  return k;
}

/* Writes the model and test_data_set_0 with the float inputs a, b (nin of
 * them) and the one output y. */
static void kit_end(KitCase k, size_t nin, int y_type, const void* y) {
  char rel[1024];
  snprintf(rel, sizeof rel, "kit/%s", k.name);
  make_dir(rel);
  snprintf(rel, sizeof rel, "kit/%s/model.onnx", k.name);
  write_model(rel, k.m);
  snprintf(rel, sizeof rel, "kit/%s/test_data_set_0", k.name);
  make_dir(rel);
  static const char* const names[2] = {"a", "b"};
  const float* vals[2] = {kA, kB};
  for (size_t i = 0; i < nin; i++) {
    snprintf(rel, sizeof rel, "kit/%s/test_data_set_0/input_%zu.pb", k.name, i);
    write_tensor(rel, names[i], kDims, 2, vals[i]);
  }
  snprintf(rel, sizeof rel, "kit/%s/test_data_set_0/output_0.pb", k.name);
  write_tensor_of(rel, "y", y_type, kDims, 2, y);
}

/* y = If(c, then: THEN_OP(a[, b]), else: a * b); the data set feeds c = true. */
static void write_kit_if(const char* name, const char* then_op, const float* y) {
  KitCase k = kit_begin(name);
  otm_input(k.m, "c", ONYX_ELEM_BOOL, 0, NULL);
  otm_input(k.m, "a", ONYX_ELEM_FLOAT32, 2, kDims);
  otm_input(k.m, "b", ONYX_ELEM_FLOAT32, 2, kDims);
  otm_begin_graph(k.m, "then");
  otm_node(k.m, then_op, "then_node", strcmp(then_op, "Sigmoid") ? "a,b" : "a", "y_then");
  otm_output(k.m, "y_then", ONYX_ELEM_FLOAT32, 2, kDims);
  Onnx__GraphProto* then_g = otm_end_graph(k.m);
  otm_begin_graph(k.m, "else");
  otm_node(k.m, "Mul", "else_mul", "a,b", "y_else");
  otm_output(k.m, "y_else", ONYX_ELEM_FLOAT32, 2, kDims);
  Onnx__GraphProto* else_g = otm_end_graph(k.m);
  OxTestNode* n = otm_node(k.m, "If", "if0", "c", "y");
  otm_attr_graph(n, "then_branch", then_g);
  otm_attr_graph(n, "else_branch", else_g);
  otm_output(k.m, "y", ONYX_ELEM_FLOAT32, 2, kDims);
  kit_end(k, 2, ONYX_ELEM_FLOAT32, y);
  char rel[1024];
  static const uint8_t yes = 1;
  snprintf(rel, sizeof rel, "kit/%s/test_data_set_0/input_2.pb", name);
  write_tensor_of(rel, "c", ONYX_ELEM_BOOL, NULL, 0, &yes);
}

static void write_kit(void) {
  make_dir("kit");
  /* y = Sigmoid(a): the fake provider declines Sigmoid. */
  KitCase k = kit_begin("test_kit_sigmoid");
  otm_input(k.m, "a", ONYX_ELEM_FLOAT32, 2, kDims);
  otm_node(k.m, "Sigmoid", "sig0", "a", "y");
  otm_output(k.m, "y", ONYX_ELEM_FLOAT32, 2, kDims);
  float sig[6];
  for (int i = 0; i < 6; i++)
    sig[i] = (float)(1.0 / (1.0 + exp(-(double)kA[i])));
  kit_end(k, 1, ONYX_ELEM_FLOAT32, sig);

  /* y = Sigmoid(a + b): the provider takes the Add, not the Sigmoid. */
  k = kit_begin("test_kit_add_sigmoid");
  otm_input(k.m, "a", ONYX_ELEM_FLOAT32, 2, kDims);
  otm_input(k.m, "b", ONYX_ELEM_FLOAT32, 2, kDims);
  otm_node(k.m, "Add", "add0", "a,b", "sum");
  otm_node(k.m, "Sigmoid", "sig0", "sum", "y");
  otm_output(k.m, "y", ONYX_ELEM_FLOAT32, 2, kDims);
  for (int i = 0; i < 6; i++)
    sig[i] = (float)(1.0 / (1.0 + exp(-((double)kA[i] + (double)kB[i]))));
  kit_end(k, 2, ONYX_ELEM_FLOAT32, sig);

  /* y = a + c, int32: the provider's kernels are float32 only. c is an
   * initializer, so the case has one int32 input (written below). */
  k = kit_begin("test_kit_add_int32");
  static const int32_t ia[6] = {1, -2, 3, -4, 5, -6}, ic[6] = {10, 20, 30, 40, 50, 60};
  static const int32_t isum[6] = {11, 18, 33, 36, 55, 54};
  otm_input(k.m, "a", ONYX_ELEM_INT32, 2, kDims);
  otm_initializer(k.m, "c", ONYX_ELEM_INT32, 2, kDims, ic);
  otm_node(k.m, "Add", "add0", "a,c", "y");
  otm_output(k.m, "y", ONYX_ELEM_INT32, 2, kDims);
  kit_end(k, 0, ONYX_ELEM_INT32, isum);
  write_tensor_of("kit/test_kit_add_int32/test_data_set_0/input_0.pb", "a", ONYX_ELEM_INT32, kDims,
                  2, ia);

  /* y = a * b, float32: wholly the provider's. */
  k = kit_begin("test_kit_mul");
  otm_input(k.m, "a", ONYX_ELEM_FLOAT32, 2, kDims);
  otm_input(k.m, "b", ONYX_ELEM_FLOAT32, 2, kDims);
  otm_node(k.m, "Mul", "mul0", "a,b", "y");
  otm_output(k.m, "y", ONYX_ELEM_FLOAT32, 2, kDims);
  static const float prod[6] = {0.5f, -1, 1.5f, -2, 2.5f, -3};
  kit_end(k, 2, ONYX_ELEM_FLOAT32, prod);

  /* y = a + SequenceAt(SequenceConstruct(a, b), 1) = a + b: the sequence
   * nodes are host ops, the Add the provider's. */
  k = kit_begin("test_kit_seq_add");
  static const int64_t one = 1;
  otm_input(k.m, "a", ONYX_ELEM_FLOAT32, 2, kDims);
  otm_input(k.m, "b", ONYX_ELEM_FLOAT32, 2, kDims);
  otm_initializer(k.m, "one", ONYX_ELEM_INT64, 0, NULL, &one);
  otm_node(k.m, "SequenceConstruct", "seq0", "a,b", "s");
  otm_node(k.m, "SequenceAt", "at0", "s,one", "t");
  otm_node(k.m, "Add", "add0", "a,t", "y");
  otm_output(k.m, "y", ONYX_ELEM_FLOAT32, 2, kDims);
  static const float sum[6] = {1.5f, -1.5f, 3.5f, -3.5f, 5.5f, -5.5f};
  kit_end(k, 2, ONYX_ELEM_FLOAT32, sum);

  /* y = SequenceAt(SequenceConstruct(a, b), 1) = b: host ops only. */
  k = kit_begin("test_kit_seq_only");
  otm_input(k.m, "a", ONYX_ELEM_FLOAT32, 2, kDims);
  otm_input(k.m, "b", ONYX_ELEM_FLOAT32, 2, kDims);
  otm_initializer(k.m, "one", ONYX_ELEM_INT64, 0, NULL, &one);
  otm_node(k.m, "SequenceConstruct", "seq0", "a,b", "s");
  otm_node(k.m, "SequenceAt", "at0", "s,one", "y");
  otm_output(k.m, "y", ONYX_ELEM_FLOAT32, 2, kDims);
  kit_end(k, 2, ONYX_ELEM_FLOAT32, kB);

  /* y = If(c, then: a + b, else: a * b) with c = true: the If is a host op,
   * the nodes of its branches the provider's. */
  write_kit_if("test_kit_if", "Add", sum);
  /* The then branch is Sigmoid(a): a subgraph node the provider declines. */
  for (int i = 0; i < 6; i++)
    sig[i] = (float)(1.0 / (1.0 + exp(-(double)kA[i])));
  write_kit_if("test_kit_if_sigmoid", "Sigmoid", sig);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_models OUTDIR\n");
    return 2;
  }
  snprintf(out_dir, sizeof out_dir, "%s", argv[1]);
  make_dir("");
  write_add_relu("add_relu.onnx");
  write_relu_sym("relu_sym.onnx");
  write_relu_exp_sym("relu_exp_sym.onnx");
  write_tensor("a.pb", "a", kDims, 2, kA);
  write_tensor("b.pb", "b", kDims, 2, kB);

  static const float wrong[6] = {1.5f, 0, 3.5f, 0, 5.5f, 1}; /* last one should be 0 */
  static const int64_t transposed[2] = {3, 2};
  make_dir("suite");
  write_case("suite/test_add_relu_pass", 1, kDims, kY);
  write_case("suite/test_add_relu_positional", 0, kDims, kY);
  write_case("suite/test_add_relu_wrong_value", 1, kDims, wrong);
  write_case("suite/test_add_relu_wrong_shape", 1, transposed, kY);
  make_dir("suite/test_broken_model");
  write_file("suite/test_broken_model/model.onnx", "this is not a protobuf", 22);
  make_dir("suite/test_no_data");
  write_add_relu("suite/test_no_data/model.onnx");
  make_dir("suite/not_a_test"); /* no model.onnx: not a test */
  write_kit();
  return 0;
}
