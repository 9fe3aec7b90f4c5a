/* make_corpus.c — writes the seed corpora of the fuzz targets:
 *   make_corpus OUTDIR
 * creates OUTDIR/{model_load,config,tensor_proto,run}/ with models built by
 * the test model builder, configs, TensorProtos and run inputs. The seeds
 * are generated at build/run time and never committed; scripts/fuzz.sh adds
 * the small models and .pb files of the ONNX node tests when present. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "ox_test_models.h"

static const char* g_out;
static int g_count;

static void put(const char* target, const char* name, const void* data, size_t len) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", g_out, target);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/%s/%s", g_out, target, name);
  if (!otm_write_file(path, data, len)) {
    fprintf(stderr, "make_corpus: cannot write %s\n", path);
    exit(1);
  }
  g_count++;
}

static void put_model(const char* name, OxTestModel* m) {
  uint8_t* bytes;
  size_t len;
  otm_serialize(m, &bytes, &len);
  put("model_load", name, bytes, len);
  free(bytes);
  otm_free(m);
}

#define DIMS(...)                                                                                  \
  (int64_t[]) {                                                                                    \
    __VA_ARGS__                                                                                    \
  }
#define F32 ONYX_ELEM_FLOAT32
#define I64 ONYX_ELEM_INT64

static void models(void) {
  OxTestModel* m = otm_new(17);
  otm_input_s(m, "X", F32, "N,3");
  otm_initializer(m, "W", F32, 2, DIMS(3, 2), (float[]){1, 2, 3, 4, 5, 6});
  otm_initializer(m, "B", F32, 1, DIMS(2), (float[]){1, -1});
  otm_attr_int(otm_node(m, "Gemm", "gemm", "X,W,B", "G"), "transB", 0);
  otm_node(m, "Relu", "relu", "G", "Y");
  otm_output_s(m, "Y", F32, "N,2");
  put_model("gemm_relu.onnx", m);

  m = otm_new(17);
  otm_input(m, "X", F32, 2, DIMS(2, 2));
  Onnx__TensorProto* t = otm_initializer(m, "W", F32, 1, DIMS(2), (float[]){1, 2});
  otm_tensor_typed(t);
  otm_initializer(m, "S", I64, 1, DIMS(2), (int64_t[]){4, 1});
  otm_node(m, "Add", "add", "X,W", "A");
  otm_node(m, "Reshape", "reshape", "A,S", "R");
  otm_attr_int(otm_node(m, "Softmax", "sm", "R", "Y"), "axis", 0);
  otm_output(m, "Y", F32, 2, DIMS(4, 1));
  put_model("typed_reshape_softmax.onnx", m);

  m = otm_new(17);
  otm_input(m, "X", F32, 1, DIMS(4));
  t = otm_initializer(m, "W", F32, 1, DIMS(4), NULL);
  otm_tensor_external(t, "weights.bin", 0, 16);
  otm_node(m, "Mul", "mul", "X,W", "Y");
  otm_output(m, "Y", F32, 1, DIMS(4));
  put_model("external.onnx", m);

  m = otm_new(17);
  otm_input_s(m, "C", ONYX_ELEM_BOOL, "");
  otm_input(m, "X", F32, 1, DIMS(2));
  OxTestNode* iff = otm_node(m, "If", "if", "C", "R");
  otm_begin_graph(m, "then");
  otm_node(m, "Neg", "neg", "X", "t");
  otm_output(m, "t", F32, 1, DIMS(2));
  otm_attr_graph(iff, "then_branch", otm_end_graph(m));
  otm_begin_graph(m, "else");
  otm_node(m, "Abs", "abs", "X", "e");
  otm_output(m, "e", F32, 1, DIMS(2));
  otm_attr_graph(iff, "else_branch", otm_end_graph(m));
  otm_output(m, "R", F32, 1, DIMS(2));
  put_model("if.onnx", m);

  m = otm_new(17);
  otm_input_s(m, "N", I64, "");
  otm_input(m, "X", F32, 1, DIMS(2));
  OxTestNode* loop = otm_node(m, "Loop", "loop", "N,,X", "Out");
  otm_begin_graph(m, "body");
  otm_input_s(m, "i", I64, "");
  otm_input_s(m, "cond", ONYX_ELEM_BOOL, "");
  otm_input(m, "acc", F32, 1, DIMS(2));
  otm_node(m, "Identity", "keep", "cond", "cond_out");
  otm_node(m, "Add", "add", "acc,X", "next");
  otm_output(m, "cond_out", ONYX_ELEM_BOOL, 0, NULL);
  otm_output(m, "next", F32, 1, DIMS(2));
  otm_attr_graph(loop, "body", otm_end_graph(m));
  otm_output(m, "Out", F32, 1, DIMS(2));
  put_model("loop.onnx", m);

  m = otm_new(17);
  otm_input(m, "X", F32, 4, DIMS(1, 1, 4, 4));
  otm_initializer(m, "W", F32, 4, DIMS(1, 1, 2, 2), (float[]){1, 0, 0, 1});
  OxTestNode* conv = otm_node(m, "Conv", "conv", "X,W", "C");
  otm_attr_ints(conv, "pads", 4, DIMS(0, 0, 1, 1));
  otm_attr_string(otm_node(m, "MaxPool", "pool", "C", "P"), "auto_pad", "SAME_UPPER");
  OxTestNode* pool = otm_node(m, "Transpose", "tr", "P", "Y");
  otm_attr_ints(pool, "perm", 4, DIMS(0, 1, 3, 2));
  otm_output_s(m, "Y", F32, NULL);
  put_model("conv_pool.onnx", m);

  m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_STRING, 1, DIMS(2));
  otm_initializer(m, "T", ONYX_ELEM_STRING, 1, DIMS(1), (const char* const[]){"abc"});
  otm_node(m, "Concat", "cat", "X,T", "Y");
  otm_output(m, "Y", ONYX_ELEM_STRING, 1, DIMS(3));
  put_model("strings.onnx", m);

  m = otm_new(17);
  otm_input(m, "X", F32, 2, DIMS(2, 3));
  OxTestNode* n = otm_node(m, "Constant", "k", "", "K");
  otm_attr_tensor(n, "value", otm_tensor(m, "kv", F32, 1, DIMS(3), (float[]){1, 2, 3}));
  otm_node(m, "Sub", "sub", "X,K", "D");
  otm_attr_ints(otm_node(m, "ReduceMean", "mean", "D", "Y"), "axes", 1, DIMS(1));
  otm_output_s(m, "Y", F32, NULL);
  put_model("constant_reduce.onnx", m);
}

static void configs(void) {
  static const char* const texts[] = {
      "{}",
      "{\"providers\": [{\"name\": \"cpu\", \"options\": {\"threads\": 2}}], \"fallback\": "
      "\"allow\", \"session\": {\"optimization_level\": \"all\", \"execution_order\": "
      "\"default\", \"log_severity\": \"warning\"}}",
      "{\"providers\": [{\"name\": \"fake\", \"library\": \"libnone.so\", \"device\": 0, "
      "\"required\": false}, {\"name\": \"cpu\"}], \"placement\": [{\"op_type\": \"Add\", "
      "\"provider\": \"cpu\"}, {\"node\": \"n0\", \"provider\": \"cpu\"}], \"implicit_cpu\": "
      "false}",
      "{\"session\": {\"threads\": 1, \"memory_pattern\": true, \"deterministic\": false, "
      "\"profile\": \"/dev/null\", \"node_priorities\": {\"a\": 1, \"b\": -2}, \"limits\": "
      "{\"max_model_bytes\": 1048576, \"max_tensor_bytes\": 65536, \"max_nodes\": 100, "
      "\"max_graph_depth\": 4}}}",
      "{\"fallback\": \"deny\", \"session\": {\"execution_order\": \"priority\"}}",
  };
  char name[32];
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    snprintf(name, sizeof name, "config%zu.json", i);
    put("config", name, texts[i], strlen(texts[i]));
  }
}

static void tensor_protos(void) {
  OxTestModel* m = otm_new(17);
  Onnx__TensorProto* tps[] = {
      otm_tensor(m, "f", F32, 2, DIMS(2, 2), (float[]){1, 2, 3, 4}),
      otm_tensor(m, "i", I64, 1, DIMS(3), (int64_t[]){-1, 0, 1}),
      otm_tensor(m, "s", ONYX_ELEM_STRING, 1, DIMS(2), (const char* const[]){"x", "yz"}),
      otm_tensor(m, "b", ONYX_ELEM_BOOL, 0, NULL, (uint8_t[]){1}),
      otm_tensor(m, "h", ONYX_ELEM_FLOAT16, 1, DIMS(2), (uint16_t[]){0x3c00, 0xc000}),
      otm_tensor(m, "u4", ONYX_ELEM_UINT4, 1, DIMS(3), (uint8_t[]){0x21, 0x03}),
      otm_tensor(m, "e", ONYX_ELEM_INT32, 2, DIMS(0, 3), NULL),
  };
  char name[32];
  for (size_t i = 0; i < sizeof tps / sizeof tps[0]; i++) {
    for (int typed = 0; typed < 2; typed++) {
      if (typed) otm_tensor_typed(tps[i]);
      size_t len = onnx__tensor_proto__get_packed_size(tps[i]);
      uint8_t* buf = malloc(len ? len : 1);
      if (!buf) exit(1);
      onnx__tensor_proto__pack(tps[i], buf);
      snprintf(name, sizeof name, "tensor%zu_%d.pb", i, typed);
      put("tensor_proto", name, buf, len);
      free(buf);
    }
  }
  otm_free(m); /* frees the detached tensors too */
}

/* fuzz_run inputs: model byte, then per input a rank byte, dim bytes and
 * element bytes (see fuzz_run.c). */
static void run_inputs(void) {
  char name[32];
  for (int model = 0; model < 12; model++) {
    uint8_t buf[256];
    size_t n = 0;
    buf[n++] = (uint8_t)model;
    for (int input = 0; input < 4; input++) {
      buf[n++] = 2; /* rank 2 float / rank 0 int64 */
      buf[n++] = 2;
      buf[n++] = 3;
      for (int i = 0; i < 24 && n < sizeof buf; i++)
        buf[n++] = (uint8_t)(i * 37 + model);
    }
    snprintf(name, sizeof name, "run%02d.bin", model);
    put("run", name, buf, n);
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_corpus OUTDIR\n");
    return 2;
  }
  g_out = argv[1];
  mkdir(g_out, 0755);
  models();
  configs();
  tensor_protos();
  run_inputs();
  printf("make_corpus: %d seeds in %s\n", g_count, g_out);
  return 0;
}
