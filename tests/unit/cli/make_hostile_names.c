/* make_hostile_names.c — writes the models of test_cli_escape.sh:
 *   make_hostile_names OUTDIR
 * OUTDIR/names.onnx: y = Relu(x) where the input, the node and the output
 * have names holding terminal escapes, a newline and a tab;
 * OUTDIR/long_error.onnx: a node of an unknown op whose type is 3000 bytes
 * long and ends in "END_OF_MESSAGE", so its load error is longer than any
 * fixed message buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ox_test_models.h"

static void write_model(OxTestModel* m, const char* dir, const char* file) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  if (!otm_write(m, path)) {
    fprintf(stderr, "make_hostile_names: cannot write %s\n", path);
    exit(1);
  }
  otm_free(m);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_hostile_names OUTDIR\n");
    return 2;
  }
  static const int64_t dims[1] = {2};
  OxTestModel* m = otm_new(17);
  otm_input(m, "x\x1b[31m\nfake", ONYX_ELEM_FLOAT32, 1, dims);
  otm_node(m, "Relu", "relu\x1b]0;title\x07", "x\x1b[31m\nfake", "y\x1b[2J\tz");
  otm_output(m, "y\x1b[2J\tz", ONYX_ELEM_FLOAT32, 1, dims);
  write_model(m, argv[1], "names.onnx");

  char op[3100];
  memset(op, 'Q', 3000);
  strcpy(op + 3000, "END_OF_MESSAGE");
  m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 1, dims);
  otm_node(m, op, "n", "x", "y");
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 1, dims);
  write_model(m, argv[1], "long_error.onnx");
  return 0;
}
