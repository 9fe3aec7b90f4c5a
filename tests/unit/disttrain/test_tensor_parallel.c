/* test_tensor_parallel.c — tensor-parallel inference (docs/distributed.md,
 * "Tensor parallelism"): under `mpirun -np 2`, every rank runs the model of
 * make_bert_block.py whole (a session without the option) and sharded (a
 * session with its process group and tensor_parallel), on the same inputs
 * computed here; the outputs must agree within float32 tolerance, and the
 * explain report must show the rewrite: one AllReduce per row-parallel
 * product, four for the two layers (the attention output and the second
 * MLP projection of each). In a world of one rank nothing is sharded and
 * the outputs are equal.
 *
 * usage: test_tensor_parallel MODEL.onnx; exit 0 pass, 1 fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <onyx/onyx.h>
#include <onyx/onyx_distributed.h>

enum { B = 2, S = 5, H = 32 };

static int failed(OnyxStatus* st, const char* what) {
  if (!st) return 0;
  fprintf(stderr, "FAIL: %s: %s\n", what, onyx_status_message(st));
  onyx_status_release(st);
  return 1;
}

/* Runs the model on x and the mask; *y gets B*S*H floats. */
static int run(OnyxSessionOptions* so, const char* model, const float* x, const float* mask,
               float* y, char** explain) {
  OnyxSession* s = NULL;
  if (failed(onyx_session_create(so, model, &s), "session")) return 1;
  int64_t dx[3] = {B, S, H}, dm[2] = {B, S};
  OnyxValue* in[2] = {NULL, NULL};
  OnyxValue* out = NULL;
  const char* names[2] = {"x", "attention_mask"};
  const char* oname = "y";
  int rc = failed(
      onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dx, 3, x, sizeof(float) * B * S * H, &in[0]),
      "x");
  if (!rc)
    rc = failed(
        onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dm, 2, mask, sizeof(float) * B * S, &in[1]),
        "mask");
  if (!rc)
    rc = failed(onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, 2, &oname, 1, &out),
                "run");
  const OnyxTensor* t = rc ? NULL : onyx_value_tensor(out);
  if (!rc && (!t || onyx_tensor_elem_count(t) != (size_t)B * S * H)) {
    fprintf(stderr, "FAIL: the output is not [%d, %d, %d]\n", B, S, H);
    rc = 1;
  }
  if (!rc) memcpy(y, onyx_tensor_data(t), sizeof(float) * B * S * H);
  if (!rc && explain) rc = failed(onyx_session_explain(s, explain), "explain");
  onyx_value_release(out);
  onyx_value_release(in[0]);
  onyx_value_release(in[1]);
  onyx_session_release(s);
  return rc;
}

static size_t count(const char* text, const char* word) {
  size_t n = 0;
  for (const char* p = text; (p = strstr(p, word)); p += strlen(word))
    n++;
  return n;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_tensor_parallel MODEL.onnx\n");
    return 2;
  }
  static float x[B * S * H], mask[B * S], whole[B * S * H], sharded[B * S * H];
  for (int i = 0; i < B * S * H; i++)
    x[i] = (float)sin(0.37 * i + 0.1) * 0.8f;
  for (int i = 0; i < B * S; i++)
    mask[i] = i == B * S - 1 ? 0.0f : 1.0f; /* the last position of batch 1 masked */
  OnyxProcessGroup* pg = NULL;
  if (failed(onyx_process_group_create(NULL, &pg), "process group")) return 1;
  int rank = onyx_process_group_rank(pg), size = onyx_process_group_size(pg);
  OnyxSessionOptions* plain = NULL;
  OnyxSessionOptions* tp = NULL;
  char* explain = NULL;
  int rc = failed(onyx_session_options_create(&plain), "options");
  if (!rc) rc = failed(onyx_session_options_create(&tp), "options");
  if (!rc) rc = failed(onyx_session_options_set_process_group(tp, pg), "set_process_group");
  if (!rc) rc = failed(onyx_session_options_set_tensor_parallel(tp, 1), "set_tensor_parallel");
  if (!rc) rc = run(plain, argv[1], x, mask, whole, NULL);
  if (!rc) rc = run(tp, argv[1], x, mask, sharded, &explain);
  double worst = 0;
  for (int i = 0; !rc && i < B * S * H; i++) {
    double d = fabs((double)whole[i] - (double)sharded[i]);
    if (!(d <= worst)) worst = d;
  }
  if (!rc && !(worst <= 1e-4)) {
    fprintf(stderr, "FAIL: rank %d: sharded and whole outputs differ by %g\n", rank, worst);
    rc = 1;
  }
  size_t want = size > 1 ? 4 : 0, got = explain ? count(explain, "AllReduce") : 0;
  if (!rc && got != want) {
    fprintf(stderr, "FAIL: rank %d: %zu AllReduce nodes in the explain report, expected %zu\n%s\n",
            rank, got, want, explain);
    rc = 1;
  }
  if (!rc && size > 1 && !strstr(explain, "made by tensor_parallel")) {
    fprintf(stderr, "FAIL: the explain report names no tensor_parallel rewrite\n");
    rc = 1;
  }
  if (!rc)
    printf("rank %d of %d: outputs agree (max |diff| %.3g), %zu AllReduce\n", rank, size, worst,
           got);
  onyx_free(explain);
  onyx_session_options_release(plain);
  onyx_session_options_release(tp);
  onyx_process_group_release(pg);
  return rc;
}
