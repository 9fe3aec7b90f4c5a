/* make_ml_map_models.c — writes the models and ONNX test folders that
 * test_ml_map_cli.sh runs `onyx run` and `onyx test` on:
 *   DIR/suite/test_zip/model.onnx: ZipMap with labels 7, 9 over X [2, 2]
 *   DIR/suite/test_zip/test_data_set_0: X = [[0.25, 0.75], [1, 0]]; the
 *     expected output is a SequenceProto of two MapProto, {9: 0.75, 7: 0.25}
 *     and {9: 0, 7: 1} (keys in another order than ZipMap's: compared as
 *     dicts)
 *   DIR/suite_wrong/test_zip_wrong: the same with 0.5 for key 7 of map 1
 *     (must fail)
 *   DIR/suite/test_zip_empty: the same ZipMap over X [N, 2] fed [0, 2]: no
 *     rows, no maps; the expected output an empty SequenceProto
 *   DIR/dv/model.onnx + dv/m.pb: DictVectorizer over int64 vocabulary
 *     [1, 2] of a map(int64, float) input; m.pb is the MapProto {2: 4.5}
 * Expected values by hand: ZipMap copies row r, column c to label c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "proto_bytes.h"

/* out = a/b; a path too long for out ends the program. */
static void join(char* out, size_t cap, const char* a, const char* b) {
  int n = snprintf(out, cap, "%s/%s", a, b);
  if (n < 0 || (size_t)n >= cap) {
    fprintf(stderr, "path too long: %s/%s\n", a, b);
    exit(1);
  }
}

static void write_file(const char* dir, const char* name, const void* p, size_t n) {
  char path[4096];
  join(path, sizeof path, dir, name);
  FILE* f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
}

static void wrap_map(Onnx__ValueInfoProto* vi, int key, int seq) {
  Onnx__TypeProto__Map* mp = otm_alloc(sizeof *mp);
  onnx__type_proto__map__init(mp);
  mp->has_key_type = 1;
  mp->key_type = key;
  mp->value_type = vi->type;
  Onnx__TypeProto* mt = otm_alloc(sizeof *mt);
  onnx__type_proto__init(mt);
  mt->value_case = ONNX__TYPE_PROTO__VALUE_MAP_TYPE;
  mt->map_type = mp;
  vi->type = mt;
  if (!seq) return;
  Onnx__TypeProto__Sequence* sq = otm_alloc(sizeof *sq);
  onnx__type_proto__sequence__init(sq);
  sq->elem_type = mt;
  Onnx__TypeProto* st = otm_alloc(sizeof *st);
  onnx__type_proto__init(st);
  st->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
  st->sequence_type = sq;
  vi->type = st;
}

static void zip_folder(const char* root, const char* name, float second_key7) {
  char dir[4096], set[4096];
  join(dir, sizeof dir, root, name);
  join(set, sizeof set, dir, "test_data_set_0");
  mkdir(dir, 0755);
  mkdir(set, 0755);
  OxTestModel* m = otm_new(13);
  otm_add_opset(m, "ai.onnx.ml", 1);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2});
  OxTestNode* n = otm_node(m, "ZipMap", "zip", "X", "Z");
  otm_node_domain(n, "ai.onnx.ml");
  otm_attr_ints(n, "classlabels_int64s", 2, (int64_t[]){7, 9});
  wrap_map(otm_output(m, "Z", ONYX_ELEM_FLOAT32, -1, NULL), ONYX_ELEM_INT64, 1);
  char path[4096];
  join(path, sizeof path, dir, "model.onnx");
  otm_write(m, path);
  /* input_0.pb */
  const float x[4] = {0.25f, 0.75f, 1, 0};
  Onnx__TensorProto* t = otm_tensor(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2}, x);
  size_t len = onnx__tensor_proto__get_packed_size(t);
  uint8_t* buf = malloc(len);
  if (!buf) abort();
  onnx__tensor_proto__pack(t, buf);
  write_file(set, "input_0.pb", buf, len);
  free(buf);
  /* output_0.pb: SequenceProto { name, elem_type 4, map_values x2 } */
  PbBuf seq = {0};
  pb_bytes(&seq, 1, "Z", 1);
  pb_key(&seq, 2, 0);
  pb_varint(&seq, 4);
  const float rows[2][2] = {{0.75f, 0.25f}, {0, second_key7}};
  for (int r = 0; r < 2; r++) {
    PbBuf one = {0};
    pb_map_f32(&one, NULL, (const int64_t[]){9, 7}, NULL, 2, rows[r]);
    pb_bytes(&seq, 6, one.p, one.len);
    free(one.p);
  }
  write_file(set, "output_0.pb", seq.p, seq.len);
  free(seq.p);
  otm_free(m);
}

static void zip_empty_folder(const char* root) {
  char dir[4096], set[4096], path[4096];
  join(dir, sizeof dir, root, "test_zip_empty");
  join(set, sizeof set, dir, "test_data_set_0");
  mkdir(dir, 0755);
  mkdir(set, 0755);
  OxTestModel* m = otm_new(13);
  otm_add_opset(m, "ai.onnx.ml", 1);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){-1, 2});
  OxTestNode* n = otm_node(m, "ZipMap", "zip", "X", "Z");
  otm_node_domain(n, "ai.onnx.ml");
  otm_attr_ints(n, "classlabels_int64s", 2, (int64_t[]){7, 9});
  wrap_map(otm_output(m, "Z", ONYX_ELEM_FLOAT32, -1, NULL), ONYX_ELEM_INT64, 1);
  join(path, sizeof path, dir, "model.onnx");
  otm_write(m, path);
  Onnx__TensorProto* t = otm_tensor(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){0, 2}, NULL);
  size_t len = onnx__tensor_proto__get_packed_size(t);
  uint8_t* buf = malloc(len ? len : 1);
  if (!buf) abort();
  onnx__tensor_proto__pack(t, buf);
  write_file(set, "input_0.pb", buf, len);
  free(buf);
  PbBuf seq = {0};
  pb_key(&seq, 2, 0);
  pb_varint(&seq, 4);
  write_file(set, "output_0.pb", seq.p, seq.len);
  free(seq.p);
  otm_free(m);
}

static void dv_folder(const char* root) {
  char dir[4096];
  join(dir, sizeof dir, root, "dv");
  mkdir(dir, 0755);
  OxTestModel* m = otm_new(13);
  otm_add_opset(m, "ai.onnx.ml", 1);
  wrap_map(otm_input(m, "M", ONYX_ELEM_FLOAT32, -1, NULL), ONYX_ELEM_INT64, 0);
  OxTestNode* n = otm_node(m, "DictVectorizer", "dv", "M", "Y");
  otm_node_domain(n, "ai.onnx.ml");
  otm_attr_ints(n, "int64_vocabulary", 2, (int64_t[]){1, 2});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){1, 2});
  char path[4096];
  join(path, sizeof path, dir, "model.onnx");
  otm_write(m, path);
  otm_free(m);
  PbBuf b = {0};
  pb_map_f32(&b, "M", (const int64_t[]){2}, NULL, 1, (const float[]){4.5f});
  write_file(dir, "m.pb", b.p, b.len);
  free(b.p);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_ml_map_models DIR\n");
    return 2;
  }
  char suite[4096], wrong[4096];
  mkdir(argv[1], 0755);
  join(suite, sizeof suite, argv[1], "suite");
  join(wrong, sizeof wrong, argv[1], "suite_wrong");
  mkdir(suite, 0755);
  mkdir(wrong, 0755);
  zip_folder(suite, "test_zip", 1);
  zip_empty_folder(suite);
  zip_folder(wrong, "test_zip_wrong", 0.5f);
  dv_folder(argv[1]);
  return 0;
}
