/* test_io_binding_device.c — IO binding that keeps inputs and outputs in a
 * device's memory, with the test-only "gpuemu" provider (tests/unit/gpu: an
 * emulated GPU whose device memory is a distinct memory, kind GPU, vendor
 * 0xE4E4) beside the CPU provider. The number of copies a run made is read
 * from the session's run-time counter (OxSessionRt.copies); expected values
 * are computed here in plain C. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "onyx/onyx.h"
#include "ox_session.h"
#include "ox_test_models.h"

#define EMU_VENDOR 0xE4E4u

static const float X_DATA[6] = {1.0f, -2.0f, 0.5f, -1.0f, 3.0f, 0.25f};
static const float W_DATA[6] = {1.0f, 0.5f, -1.0f, 2.0f, 0.25f, -0.5f}; /* [3, 2] */
static const float B_DATA[2] = {0.5f, -1.0f};

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static void expect(OnyxStatus* st, OnyxStatusCode code, const char* frag1, const char* frag2) {
  if (!st) fail_msg("expected an error containing '%s'", frag1);
  const char* msg = onyx_status_message(st);
  if (onyx_status_code(st) != code || !strstr(msg, frag1) || (frag2 && !strstr(msg, frag2)))
    fprintf(stderr, "message (code %d): %s\n", (int)onyx_status_code(st), msg);
  assert_int_equal(onyx_status_code(st), code);
  assert_non_null(strstr(msg, frag1));
  if (frag2) assert_non_null(strstr(msg, frag2));
  onyx_status_release(st);
}

static OnyxSession* session_from(OxTestModel* m, const char* config) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_load_config_text(o, config, strlen(config), "gpuemu.json"));
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_options_release(o);
  free(bytes);
  return s;
}

static const char kConfig[] = "{\"providers\": [{\"name\": \"gpuemu\"}, {\"name\": \"cpu\"}]}";

/* Y = Relu(X @ W + B): X [2, 3], W [3, 2], Y [2, 2]. */
static OxTestModel* gpu_model(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_initializer(m, "W", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 2}, W_DATA);
  otm_initializer(m, "B", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2}, B_DATA);
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2});
  otm_node(m, "MatMul", "mm", "X,W", "p");
  otm_node(m, "Add", "add", "p,B", "q");
  otm_node(m, "Relu", "relu", "q", "Y");
  return m;
}

/* The model of gpu_model with every node on gpuemu. */
static OnyxSession* gpu_session(void) {
  OnyxSession* s = session_from(gpu_model(), kConfig);
  size_t gpu = 0, nodes = 0;
  for (size_t i = 0; i < onyx_session_provider_count(s); i++)
    if (!strcmp(onyx_session_provider_name(s, i), "gpuemu"))
      gpu = onyx_session_provider_node_count(s, i);
    else
      nodes += onyx_session_provider_node_count(s, i);
  assert_true(gpu > 0);
  assert_int_equal(nodes, 0); /* nothing on the CPU */
  return s;
}

static void gpu_ref(const float* x, float* y) {
  for (int r = 0; r < 2; r++)
    for (int c = 0; c < 2; c++) {
      double acc = B_DATA[c];
      for (int k = 0; k < 3; k++)
        acc += (double)x[r * 3 + k] * W_DATA[k * 2 + c];
      y[r * 2 + c] = (float)(acc > 0 ? acc : 0);
    }
}

/* Y = Relu(X) + Neg(X) with Neg pinned to the CPU: X is read on gpuemu
 * (Relu) and in host memory (Neg). */
static OnyxSession* mixed_session(void) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_node(m, "Relu", "relu", "X", "a");
  otm_node(m, "Neg", "neg", "X", "n");
  otm_node(m, "Add", "add", "a,n", "Y");
  return session_from(m, "{\"providers\": [{\"name\": \"gpuemu\"}, {\"name\": \"cpu\"}], "
                         "\"placement\": [{\"node\": \"neg\", \"provider\": \"cpu\"}]}");
}

static uint64_t copies(OnyxSession* s) {
  OxSessionRt* rt = ox_session_rt(s);
  assert_non_null(rt);
  return __atomic_load_n(&rt->copies, __ATOMIC_RELAXED);
}

static OnyxValue* host_value(const float* data, const int64_t* dims, size_t rank, size_t n) {
  OnyxValue* v = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dims, rank, data, n * sizeof(float), &v));
  return v;
}

static int32_t gpu_ep(OnyxSession* s) {
  for (size_t e = 0; e < s->prog.n_eps; e++)
    if (!strcmp(s->prog.eps[e].name, "gpuemu")) return (int32_t)e;
  fail_msg("no gpuemu provider in the session");
  return -1;
}

/* The values of a float tensor in any memory, copied to the host by the
 * provider that owns it. */
static void read_floats(OnyxSession* s, const OnyxValue* v, float* out, size_t n) {
  const OxTensor* t = v->tensor;
  assert_int_equal(t->count, n);
  OxTensor* h = NULL;
  ok(ox_tensor_new(t->type, t->dims, t->rank, &h));
  int32_t ep = ox_program_ep_for_memory(&s->prog, &t->device);
  ok(ox_copy_tensor(s, t, h, ep, -1));
  if (ep >= 0 && s->prog.eps[ep].stream)
    ok(s->prog.eps[ep].ep->sync_stream(s->prog.eps[ep].ep, s->prog.eps[ep].stream));
  memcpy(out, h->data, n * sizeof *out);
  ox_tensor_free(h);
}

static bool is_emu(const OnyxMemoryDevice* m) {
  return m->kind == ONYX_DEVICE_GPU && m->vendor_id == EMU_VENDOR;
}

/* Inputs and outputs bound on gpuemu: no copy in any run, results right,
 * the binding holds its own copy of the input. */
static void test_device_inputs_outputs_no_copy(void** state) {
  (void)state;
  OnyxSession* s = gpu_session();
  OnyxMemoryDevice in_mem, out_mem;
  ok(onyx_session_input_memory(s, 0, &in_mem));
  ok(onyx_session_output_memory(s, 0, &out_mem));
  assert_true(is_emu(&in_mem));
  assert_true(is_emu(&out_mem));
  float x[6];
  memcpy(x, X_DATA, sizeof x);
  OnyxValue* xv = host_value(x, (int64_t[]){2, 3}, 2, 6);
  OnyxIoBinding* b = NULL;
  ok(onyx_io_binding_create(s, &b));
  ok(onyx_io_binding_bind_input_to_device(b, "X", xv, NULL));
  ok(onyx_io_binding_bind_output_to_device(b, "Y", &out_mem));
  /* The binding copied X: changing the caller's value changes nothing. */
  float* xd = (float*)onyx_tensor_data(onyx_value_tensor(xv));
  xd[0] = 100.0f;
  float want[4], got[4];
  gpu_ref(X_DATA, want);
  uint64_t before = copies(s);
  for (int run = 0; run < 2; run++) {
    ok(onyx_session_run_with_binding(s, NULL, b));
    assert_int_equal(copies(s), before); /* no copy step moved data, nothing staged */
    OnyxValue* y = NULL;
    ok(onyx_io_binding_get_outputs(b, &y, 1));
    assert_true(is_emu(onyx_tensor_memory(onyx_value_tensor(y))));
    read_floats(s, y, got, 4);
    for (int i = 0; i < 4; i++)
      assert_float_equal(got[i], want[i], 1e-5);
    onyx_value_release(y);
  }
  /* Binding again copies the new contents. */
  ok(onyx_io_binding_bind_input_to_device(b, "X", xv, NULL));
  ok(onyx_session_run_with_binding(s, NULL, b));
  assert_int_equal(copies(s), before);
  OnyxValue* y = NULL;
  ok(onyx_io_binding_get_outputs(b, &y, 1));
  read_floats(s, y, got, 4);
  gpu_ref(xd, want);
  for (int i = 0; i < 4; i++)
    assert_float_equal(got[i], want[i], 1e-5);
  onyx_value_release(y);
  onyx_io_binding_release(b);
  onyx_value_release(xv);
  onyx_session_release(s);
}

/* bind_input with a value already in gpuemu's memory: not staged through
 * the host; the only copy of a run is the output's, to host memory. */
static void test_bind_input_device_value(void** state) {
  (void)state;
  OnyxSession* s = gpu_session();
  int32_t ep = gpu_ep(s);
  OxTensor* dev = NULL;
  ok(ox_session_alloc_tensor(s, ep, ONYX_MEM_DEFAULT, ONYX_ELEM_FLOAT32, (int64_t[]){2, 3}, 2,
                             &dev));
  OnyxValue* xv = host_value(X_DATA, (int64_t[]){2, 3}, 2, 6);
  ok(ox_copy_tensor(s, xv->tensor, dev, -1, ep));
  if (s->prog.eps[ep].stream)
    ok(s->prog.eps[ep].ep->sync_stream(s->prog.eps[ep].ep, s->prog.eps[ep].stream));
  OnyxValue dv = {dev};
  OnyxIoBinding* b = NULL;
  ok(onyx_io_binding_create(s, &b));
  ok(onyx_io_binding_bind_input(b, "X", &dv));
  ok(onyx_io_binding_bind_output_to_device(b, "Y", NULL)); /* host */
  float want[4], got[4];
  gpu_ref(X_DATA, want);
  for (int run = 0; run < 2; run++) {
    uint64_t before = copies(s);
    ok(onyx_session_run_with_binding(s, NULL, b));
    assert_int_equal(copies(s) - before, 1); /* Y to the host */
    OnyxValue* y = NULL;
    ok(onyx_io_binding_get_outputs(b, &y, 1));
    const OnyxTensor* yt = onyx_value_tensor(y);
    assert_int_equal(onyx_tensor_memory(yt)->kind, ONYX_DEVICE_CPU);
    memcpy(got, onyx_tensor_data(yt), sizeof got);
    for (int i = 0; i < 4; i++)
      assert_float_equal(got[i], want[i], 1e-5);
    onyx_value_release(y);
  }
  onyx_io_binding_release(b);
  ox_tensor_free(dev);
  onyx_value_release(xv);
  onyx_session_release(s);
}

/* An input read on gpuemu and on the CPU: NULL device names both memories;
 * bound to gpuemu it is staged to the host for the CPU's node only. */
static void test_mixed_consumers_stage(void** state) {
  (void)state;
  OnyxSession* s = mixed_session();
  OnyxMemoryDevice mem;
  expect(onyx_session_input_memory(s, 0, &mem), ONYX_INVALID_ARGUMENT,
         "input 'X' is read in more than one memory", "gpuemu");
  OnyxValue* xv = host_value(X_DATA, (int64_t[]){2, 3}, 2, 6);
  OnyxIoBinding* b = NULL;
  ok(onyx_io_binding_create(s, &b));
  OnyxStatus* st = onyx_io_binding_bind_input_to_device(b, "X", xv, NULL);
  if (st && !strstr(onyx_status_message(st), "host"))
    fail_msg("the error does not name host memory: %s", onyx_status_message(st));
  expect(st, ONYX_INVALID_ARGUMENT, "input 'X' is read in more than one memory", "gpuemu");
  OnyxMemoryDevice emu = {.kind = ONYX_DEVICE_GPU, .vendor_id = EMU_VENDOR};
  ok(onyx_io_binding_bind_input_to_device(b, "X", xv, &emu));
  OnyxMemoryDevice out_mem;
  ok(onyx_session_output_memory(s, 0, &out_mem));
  assert_true(is_emu(&out_mem)); /* Add runs on gpuemu */
  ok(onyx_io_binding_bind_output_to_device(b, "Y", &out_mem));
  for (int run = 0; run < 2; run++) {
    uint64_t before = copies(s);
    ok(onyx_session_run_with_binding(s, NULL, b));
    /* X staged to the host for Neg, and Neg's result copied to gpuemu for
     * Add; Relu reads the bound X directly and Y stays on gpuemu. */
    assert_int_equal(copies(s) - before, 2);
    OnyxValue* y = NULL;
    ok(onyx_io_binding_get_outputs(b, &y, 1));
    float got[6];
    read_floats(s, y, got, 6);
    for (int i = 0; i < 6; i++) {
      float x = X_DATA[i];
      assert_float_equal(got[i], (x > 0 ? x : 0) - x, 1e-6);
    }
    onyx_value_release(y);
  }
  onyx_io_binding_release(b);
  onyx_value_release(xv);
  onyx_session_release(s);
}

static void test_errors_name_the_input(void** state) {
  (void)state;
  OnyxSession* s = gpu_session();
  OnyxIoBinding* b = NULL;
  ok(onyx_io_binding_create(s, &b));
  OnyxValue* xv = host_value(X_DATA, (int64_t[]){2, 3}, 2, 6);
  expect(onyx_io_binding_bind_input_to_device(b, "nope", xv, NULL), ONYX_INVALID_ARGUMENT,
         "unknown input 'nope'", "'X'");
  expect(onyx_io_binding_bind_input_to_device(b, "X", NULL, NULL), ONYX_INVALID_ARGUMENT,
         "input 'X': the value is NULL", NULL);
  OnyxMemoryDevice nv = {.kind = ONYX_DEVICE_GPU, .vendor_id = 0x10DE};
  expect(onyx_io_binding_bind_input_to_device(b, "X", xv, &nv), ONYX_INVALID_ARGUMENT,
         "input 'X': no provider of the session serves", "vendor 0x10de");
  int64_t ints[6] = {1, 2, 3, 4, 5, 6};
  OnyxValue* iv = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_INT64, (int64_t[]){2, 3}, 2, ints, sizeof ints, &iv));
  expect(onyx_io_binding_bind_input_to_device(b, "X", iv, NULL), ONYX_INVALID_ARGUMENT,
         "input 'X': expected element type float32, got int64", NULL);
  OnyxValue* wrong = host_value(X_DATA, (int64_t[]){3, 2}, 2, 6);
  expect(onyx_io_binding_bind_input_to_device(b, "X", wrong, NULL), ONYX_INVALID_ARGUMENT,
         "input 'X': expected shape", "3");
  expect(onyx_io_binding_bind_input_to_device(NULL, "X", xv, NULL), ONYX_INVALID_ARGUMENT,
         "NULL argument", NULL);
  /* Nothing was bound by the failed calls. */
  ok(onyx_io_binding_bind_output_to_device(b, "Y", NULL));
  expect(onyx_session_run_with_binding(s, NULL, b), ONYX_INVALID_ARGUMENT, "input 'X' is not bound",
         NULL);
  expect(onyx_session_input_memory(s, 5, &nv), ONYX_INVALID_ARGUMENT, "out of range", NULL);
  expect(onyx_session_output_memory(s, 5, &nv), ONYX_INVALID_ARGUMENT, "out of range", NULL);
  onyx_value_release(iv);
  onyx_value_release(wrong);
  onyx_value_release(xv);
  onyx_io_binding_release(b);
  onyx_session_release(s);
}

/* A held output keeps its values when the binding runs again. */
static void test_held_device_output(void** state) {
  (void)state;
  OnyxSession* s = gpu_session();
  OnyxMemoryDevice out_mem;
  ok(onyx_session_output_memory(s, 0, &out_mem));
  OnyxIoBinding* b = NULL;
  ok(onyx_io_binding_create(s, &b));
  OnyxValue* xv = host_value(X_DATA, (int64_t[]){2, 3}, 2, 6);
  ok(onyx_io_binding_bind_input_to_device(b, "X", xv, NULL));
  ok(onyx_io_binding_bind_output_to_device(b, "Y", &out_mem));
  ok(onyx_session_run_with_binding(s, NULL, b));
  OnyxValue* held = NULL;
  ok(onyx_io_binding_get_outputs(b, &held, 1));
  float x2[6];
  for (int i = 0; i < 6; i++)
    x2[i] = -X_DATA[i];
  OnyxValue* xv2 = host_value(x2, (int64_t[]){2, 3}, 2, 6);
  ok(onyx_io_binding_bind_input_to_device(b, "X", xv2, NULL));
  ok(onyx_session_run_with_binding(s, NULL, b));
  OnyxValue* y2 = NULL;
  ok(onyx_io_binding_get_outputs(b, &y2, 1));
  assert_ptr_not_equal(onyx_tensor_data(onyx_value_tensor(held)),
                       onyx_tensor_data(onyx_value_tensor(y2)));
  float want[4], got[4];
  gpu_ref(X_DATA, want);
  read_floats(s, held, got, 4);
  for (int i = 0; i < 4; i++)
    assert_float_equal(got[i], want[i], 1e-5);
  gpu_ref(x2, want);
  read_floats(s, y2, got, 4);
  for (int i = 0; i < 4; i++)
    assert_float_equal(got[i], want[i], 1e-5);
  onyx_value_release(held);
  onyx_value_release(y2);
  onyx_value_release(xv);
  onyx_value_release(xv2);
  onyx_io_binding_release(b);
  onyx_session_release(s);
}

/* Runs the onyx command; its stdout goes to out (cap bytes); returns its exit status. */
static int run_cli(const char* args, char* out, size_t cap) {
  const char* bin = getenv("ONYX_BINARY_DIR");
  if (!bin) fail_msg("ONYX_BINARY_DIR is not set (run through ctest)");
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s/bin/onyx' %s 2>/dev/null", bin, args);
  FILE* p = popen(cmd, "r");
  assert_non_null(p);
  size_t n = fread(out, 1, cap - 1, p);
  out[n] = 0;
  int rc = pclose(p);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Y = Relu(X) on gpuemu is a graph output and read by Neg on the CPU
 * (Z = Neg(Y)): bound on gpuemu, Y keeps the plan's copy to host for Neg and
 * is copied into the bound memory; both results are right. */
static void test_output_read_on_host_too(void** state) {
  (void)state;
  OxTestModel* m = otm_new(17);
  otm_input(m, "X", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_output(m, "Y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_output(m, "Z", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_node(m, "Relu", "relu", "X", "Y");
  otm_node(m, "Neg", "neg", "Y", "Z");
  OnyxSession* s = session_from(m, "{\"providers\": [{\"name\": \"gpuemu\"}, {\"name\": \"cpu\"}], "
                                   "\"placement\": [{\"node\": \"neg\", \"provider\": \"cpu\"}]}");
  OnyxMemoryDevice ym, zm;
  ok(onyx_session_output_memory(s, 0, &ym));
  ok(onyx_session_output_memory(s, 1, &zm));
  assert_true(is_emu(&ym));
  assert_int_equal(zm.kind, ONYX_DEVICE_CPU);
  OnyxValue* xv = host_value(X_DATA, (int64_t[]){2, 3}, 2, 6);
  OnyxIoBinding* b = NULL;
  ok(onyx_io_binding_create(s, &b));
  ok(onyx_io_binding_bind_input_to_device(b, "X", xv, NULL));
  ok(onyx_io_binding_bind_output_to_device(b, "Y", &ym));
  ok(onyx_io_binding_bind_output_to_device(b, "Z", NULL));
  for (int run = 0; run < 2; run++) {
    ok(onyx_session_run_with_binding(s, NULL, b));
    OnyxValue* outs[2] = {NULL, NULL};
    ok(onyx_io_binding_get_outputs(b, outs, 2));
    assert_true(is_emu(onyx_tensor_memory(onyx_value_tensor(outs[0]))));
    float y[6];
    read_floats(s, outs[0], y, 6);
    const float* z = onyx_tensor_data(onyx_value_tensor(outs[1]));
    for (int i = 0; i < 6; i++) {
      float r = X_DATA[i] > 0 ? X_DATA[i] : 0;
      assert_float_equal(y[i], r, 0);
      assert_float_equal(z[i], -r, 0);
    }
    onyx_values_release(outs, 2);
  }
  onyx_io_binding_release(b);
  onyx_value_release(xv);
  onyx_session_release(s);
}

/* onyx bench --io device times runs with the inputs and outputs on gpuemu
 * and says so in its JSON line; --io host is the default. */
static void test_bench_io_device(void** state) {
  (void)state;
  char* dir = otm_temp_dir();
  char model[1024], cfg[1024], args[3072], out[4096];
  snprintf(model, sizeof model, "%s/mlp.onnx", dir);
  snprintf(cfg, sizeof cfg, "%s/gpuemu.json", dir);
  OxTestModel* m = gpu_model();
  assert_true(otm_write(m, model));
  otm_free(m);
  assert_true(otm_write_file(cfg, kConfig, strlen(kConfig)));
  snprintf(args, sizeof args, "bench '%s' --config '%s' --iters 3 --warmup 1 --io device", model,
           cfg);
  assert_int_equal(run_cli(args, out, sizeof out), 0);
  assert_non_null(strstr(out, "\"model\":\"mlp\""));
  assert_non_null(strstr(out, "\"iters\":3"));
  assert_non_null(strstr(out, "\"io\":\"device\"}"));
  snprintf(args, sizeof args, "bench '%s' --config '%s' --iters 2 --warmup 0", model, cfg);
  assert_int_equal(run_cli(args, out, sizeof out), 0);
  assert_non_null(strstr(out, "\"io\":\"host\"}"));
  snprintf(args, sizeof args, "bench '%s' --io gpu", model);
  assert_int_equal(run_cli(args, out, sizeof out), 2); /* a usage error */
  otm_remove_dir(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_inputs_outputs_no_copy),
      cmocka_unit_test(test_bind_input_device_value),
      cmocka_unit_test(test_mixed_consumers_stage),
      cmocka_unit_test(test_errors_name_the_input),
      cmocka_unit_test(test_held_device_output),
      cmocka_unit_test(test_output_read_on_host_too),
      cmocka_unit_test(test_bench_io_device),
  };
  return cmocka_run_group_tests_name("io_binding_device", tests, NULL, NULL);
}
