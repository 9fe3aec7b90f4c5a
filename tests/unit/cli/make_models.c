/* make_models.c — writes the models and the ONNX-layout test suite that
 * test_cli.sh runs the `onyx` command on, with the test model builder
 * (tests/util/ox_test_models.h).
 *
 * usage: make_models OUTDIR
 */
#include <errno.h>
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

/* A float TensorProto; name "" leaves it unnamed (matched by position). */
static void write_tensor(const char* rel, const char* name, const int64_t* dims, size_t rank,
                         const float* v) {
  OxTestModel* m = otm_new(13); /* only owns the tensor */
  Onnx__TensorProto* t = otm_tensor(m, name, ONYX_ELEM_FLOAT32, (int)rank, dims, v);
  otm_tensor_typed(t); /* float_data, as most ONNX test files */
  size_t len = onnx__tensor_proto__get_packed_size(t);
  uint8_t* bytes = malloc(len ? len : 1);
  if (!bytes) exit(1);
  onnx__tensor_proto__pack(t, bytes);
  write_file(rel, bytes, len);
  free(bytes);
  otm_free(m);
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

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_models OUTDIR\n");
    return 2;
  }
  snprintf(out_dir, sizeof out_dir, "%s", argv[1]);
  make_dir("");
  write_add_relu("add_relu.onnx");
  write_relu_sym("relu_sym.onnx");
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
  return 0;
}
