/* test_gpu.c — a GPU provider (GPU_NAME: "cuda", "rocm", or the test-only
 * "gpuemu" whose device is a host emulation; one executable each) as this
 * machine and CI see it: it loads, registers its kernels, reports zero
 * devices with the runtime's reason, a config that requires it fails with
 * that reason while "required": false runs on the CPU and logs why, and
 * every option is validated (before the device is looked for, so the errors
 * are the same with or without a GPU). The tests that need a device skip
 * with a message when there is none (for gpuemu they run, and the no-device
 * ones skip).
 *
 * Expected messages and values come from the provider's contract
 * (docs/providers/GPU_NAME.md) and from hand computation, not from a run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onyx/onyx.h"
#include "ox_ir.h"
#include "ox_options.h"
#include "ox_providers.h"
#include "ox_test_models.h"

#if !defined(GPU_NAME) || !defined(GPU_LABEL) || !defined(GPU_COUNT_FN) || !defined(GPU_PCI)
#error "GPU_NAME, GPU_LABEL, GPU_COUNT_FN and GPU_PCI come from tests/unit/gpu/CMakeLists.txt"
#endif

static void ok(OnyxStatus* st) {
  if (st) fail_msg("unexpected error: %s", onyx_status_message(st));
}

static void expect(OnyxStatus* st, OnyxStatusCode code, const char* frag1, const char* frag2) {
  if (!st) fail_msg("expected an error containing '%s'", frag1);
  if (st->code != code || !strstr(st->message, frag1) || (frag2 && !strstr(st->message, frag2)))
    fprintf(stderr, "message (code %d): %s\n", (int)st->code, st->message);
  assert_int_equal(st->code, code);
  assert_non_null(strstr(st->message, frag1));
  if (frag2) assert_non_null(strstr(st->message, frag2));
  ox_status_free(st);
}

/* Device count as the provider reports it (0 with an error when none). */
static size_t device_count(OxProviderLib* lib, OnyxStatus** why) {
  size_t n = 99;
  *why = lib->provider->device_count(lib->provider, &n);
  return n;
}

static OxProviderLib* acquire(void) {
  OxProviderLib* lib = NULL;
  OnyxStatus* st = ox_provider_lib_acquire(GPU_NAME, NULL, &lib);
  if (st) fail_msg("loading %s: %s", GPU_NAME, st->message);
  return lib;
}

static bool have_device(void) {
  OxProviderLib* lib = acquire();
  OnyxStatus* why = NULL;
  size_t n = device_count(lib, &why);
  ox_status_free(why);
  ox_provider_lib_release(lib);
  return n > 0;
}

/* --- loading -------------------------------------------------------------------------- */

static bool has_op(const OxProviderLib* lib, const char* op) {
  for (size_t i = 0; i < ox_kreg_count(lib->kernels); i++)
    if (!strcmp(ox_kreg_at(lib->kernels, i)->def.op_type, op)) return true;
  return false;
}

static void test_loads_and_registers_kernels(void** state) {
  (void)state;
  OxProviderLib* lib = acquire();
  assert_string_equal(lib->provider->name, GPU_NAME);
  assert_int_equal(lib->provider->abi_major, ONYX_ABI_VERSION_MAJOR);
  assert_non_null(lib->provider->device_info);
  assert_non_null(strstr(lib->path, "libonyx_ep_" GPU_NAME ".so"));
  /* The shared kernels of gpu-common, in both providers. */
  static const char* const common[] = {"Add",       "Mul",       "Pow",     "Where",
                                       "Relu",      "Gelu",      "Softmax", "LayerNormalization",
                                       "ReduceSum", "Transpose", "Concat",  "Split",
                                       "Slice",     "Gather",    "Cast",    "Expand",
                                       "Reshape",   "Flatten",   "Squeeze", "Unsqueeze",
                                       "MatMul",    "Gemm"};
  for (size_t i = 0; i < sizeof common / sizeof common[0]; i++) {
    if (!has_op(lib, common[i])) fail_msg("%s has no %s kernel", GPU_NAME, common[i]);
  }
#ifdef GPU_IS_CUDA
  assert_true(has_op(lib, "Conv"));
  assert_true(has_op(lib, "ConvTranspose"));
  assert_true(has_op(lib, "MaxPool"));
  assert_true(has_op(lib, "BatchNormalization"));
#else
  assert_false(has_op(lib, "Conv")); /* no MIOpen / cuDNN: convolutions stay on the CPU */
#endif
  /* Int64 Add is not a GPU kernel: it falls back to the CPU. */
  for (size_t i = 0; i < ox_kreg_count(lib->kernels); i++) {
    const OnyxKernelDef* d = &ox_kreg_at(lib->kernels, i)->def;
    if (strcmp(d->op_type, "Add")) continue;
    assert_int_equal(d->type_constraint_count, 1);
    assert_int_equal(d->type_constraints[0].type_count, 1);
    assert_int_equal(d->type_constraints[0].types[0], ONYX_ELEM_FLOAT32);
  }
  ox_provider_lib_release(lib);
}

/* Shape-carrying inputs are declared host memory; views alias their input. */
static void test_shape_inputs_in_host_memory(void** state) {
  (void)state;
  OxProviderLib* lib = acquire();
  int seen = 0;
  for (size_t i = 0; i < ox_kreg_count(lib->kernels); i++) {
    const OnyxKernelDef* d = &ox_kreg_at(lib->kernels, i)->def;
    if (!strcmp(d->op_type, "Reshape")) {
      assert_true(d->input_mem_type_count >= 2);
      assert_int_equal(d->input_mem_types[0], ONYX_MEM_DEFAULT);
      assert_int_equal(d->input_mem_types[1], ONYX_MEM_HOST_ACCESSIBLE);
      assert_int_equal(d->alias_count, 1);
      assert_int_equal(d->aliases[0].kind, ONYX_ALIAS_VIEW);
      seen++;
    }
    if (!strcmp(d->op_type, "Slice")) {
      assert_int_equal(d->input_mem_type_count, 5);
      for (int k = 1; k < 5; k++)
        assert_int_equal(d->input_mem_types[k], ONYX_MEM_HOST_ACCESSIBLE);
      seen++;
    }
  }
  assert_int_equal(seen, 2);
  ox_provider_lib_release(lib);
}

/* --- no device ------------------------------------------------------------------------ */

static void test_zero_devices_with_reason(void** state) {
  (void)state;
  if (have_device()) skip(); /* covered by the GPU tests below */
  OxProviderLib* lib = acquire();
  OnyxStatus* why = NULL;
  size_t n = device_count(lib, &why);
  assert_int_equal(n, 0);
  expect(why, ONYX_NO_DEVICE, GPU_NAME ": no " GPU_LABEL " device (" GPU_COUNT_FN ": ", NULL);
  OnyxDeviceInfo info = {.struct_size = sizeof info};
  expect(lib->provider->device_info(lib->provider, 0, &info), ONYX_NO_DEVICE, "no " GPU_LABEL,
         NULL);
  ox_provider_lib_release(lib);
}

/* Relu over [4]: the smallest model the CPU provider can always run. */
static void relu_model(uint8_t** bytes, size_t* len) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){4});
  otm_node(m, "Relu", "relu", "x", "y");
  otm_serialize(m, bytes, len);
  otm_free(m);
}

typedef struct LogCapture {
  char text[8192];
} LogCapture;

static void capture(void* user, OnyxLogSeverity sev, const char* msg) {
  LogCapture* c = user;
  size_t used = strlen(c->text);
  snprintf(c->text + used, sizeof c->text - used, "[%d] %s\n", (int)sev, msg);
}

static OnyxStatus* session_with(const char* config, LogCapture* log, OnyxSession** s) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  relu_model(&bytes, &len);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_load_config_text(o, config, strlen(config), "test.json"));
  if (log) ok(onyx_session_options_set_log_callback(o, capture, log));
  OnyxStatus* st = onyx_session_create_from_bytes(o, bytes, len, NULL, s);
  onyx_session_options_release(o);
  free(bytes);
  return st;
}

static void test_required_config_fails_without_device(void** state) {
  (void)state;
  if (have_device()) skip();
  OnyxSession* s = NULL;
  OnyxStatus* st = session_with(
      "{\"providers\": [{\"name\": \"" GPU_NAME "\"}, {\"name\": \"cpu\"}]}", NULL, &s);
  assert_null(s);
  expect(st, ONYX_NO_DEVICE, "provider '" GPU_NAME "'", "no " GPU_LABEL " device (" GPU_COUNT_FN);
}

static void test_optional_config_runs_on_cpu(void** state) {
  (void)state;
  if (have_device()) skip();
  LogCapture log = {{0}};
  OnyxSession* s = NULL;
  ok(session_with("{\"providers\": [{\"name\": \"" GPU_NAME "\", \"required\": false}, "
                  "{\"name\": \"cpu\"}], \"session\": {\"log_severity\": \"info\"}}",
                  &log, &s));
  assert_non_null(s);
  /* The session says the provider is left out, and why. */
  if (!strstr(log.text, "provider '" GPU_NAME "' is optional") ||
      !strstr(log.text, "no " GPU_LABEL " device"))
    fail_msg("log lacks the reason:\n%s", log.text);
  /* ... and that the CPU took the node. */
  assert_non_null(strstr(log.text, "placement of 1 nodes: cpu: 1"));
  float x[4] = {-1.5f, 0.0f, 2.0f, -0.25f};
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){4}, 1, x, sizeof x, &in));
  const char* in_name = "x";
  const char* out_name = "y";
  OnyxValue* out = NULL;
  ok(onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &out));
  const float* y = onyx_tensor_data(onyx_value_tensor(out));
  const float want[4] = {0.0f, 0.0f, 2.0f, 0.0f};
  for (int i = 0; i < 4; i++)
    assert_true(y[i] == want[i]);
  onyx_value_release(in);
  onyx_value_release(out);
  onyx_session_release(s);
}

/* --- options --------------------------------------------------------------------------- */

/* create_ep with the given key/value pairs (NULL-terminated) on device idx. */
static OnyxStatus* create_with(size_t idx, ...) {
  OxProviderLib* lib = acquire();
  OnyxOptions opts = {0};
  va_list ap;
  va_start(ap, idx);
  for (const char* k; (k = va_arg(ap, const char*));) {
    const char* v = va_arg(ap, const char*);
    ok(ox_options_set(&opts, k, v));
  }
  va_end(ap);
  OnyxEpCreateArgs args = {.struct_size = sizeof args, .device_index = idx, .options = &opts};
  OnyxEp* ep = NULL;
  OnyxStatus* st = lib->provider->create_ep(lib->provider, &args, &ep);
  if (!st) {
    assert_non_null(ep);
    ep->release(ep);
  } else {
    assert_null(ep);
  }
  ox_options_clear(&opts);
  ox_provider_lib_release(lib);
  return st;
}

static void test_option_errors(void** state) {
  (void)state;
  expect(create_with(0, "bogus", "1", NULL), ONYX_INVALID_CONFIG,
         GPU_NAME ": unknown option 'bogus'", "gpu_mem_limit");
  expect(create_with(0, "gpu_mem_limit", "lots", NULL), ONYX_INVALID_CONFIG,
         "option 'gpu_mem_limit' has value 'lots'", "positive number of bytes");
  expect(create_with(0, "gpu_mem_limit", "0", NULL), ONYX_INVALID_CONFIG,
         "option 'gpu_mem_limit' has value '0'", NULL);
  expect(create_with(0, "gpu_mem_limit", "-4096", NULL), ONYX_INVALID_CONFIG,
         "option 'gpu_mem_limit' has value '-4096'", NULL);
  expect(create_with(0, "gpu_mem_limit", "99999999999999999999999", NULL), ONYX_INVALID_CONFIG,
         "option 'gpu_mem_limit'", NULL);
  expect(create_with(0, "arena_extend_strategy", "sometimes", NULL), ONYX_INVALID_CONFIG,
         "option 'arena_extend_strategy' has value 'sometimes'", "next_power_of_two");
  expect(create_with(0, "device_id", "first", NULL), ONYX_INVALID_CONFIG,
         "option 'device_id' has value 'first'", NULL);
  expect(create_with(0, "device_id", "64", NULL), ONYX_INVALID_CONFIG,
         "option 'device_id' has value '64'", NULL);
  expect(create_with(2, "device_id", "1", NULL), ONYX_INVALID_CONFIG, "contradicts", NULL);
#ifdef GPU_IS_CUDA
  expect(create_with(0, "cudnn_conv_algo_search", "FASTEST", NULL), ONYX_INVALID_CONFIG,
         "option 'cudnn_conv_algo_search' has value 'FASTEST'", "EXHAUSTIVE, HEURISTIC");
#else
  /* cuDNN's option means nothing to the others. */
  expect(create_with(0, "cudnn_conv_algo_search", "DEFAULT", NULL), ONYX_INVALID_CONFIG,
         GPU_NAME ": unknown option 'cudnn_conv_algo_search'", NULL);
#endif
}

/* Valid options pass validation and then meet the device check. */
static void test_valid_options_reach_device_check(void** state) {
  (void)state;
  if (have_device()) skip();
  expect(create_with(0, "gpu_mem_limit", "2147483648", "arena_extend_strategy", "same_as_requested",
                     "device_id", "0",
#ifdef GPU_IS_CUDA
                     "cudnn_conv_algo_search", "HEURISTIC",
#endif
                     NULL),
         ONYX_NO_DEVICE, "no " GPU_LABEL " device", NULL);
}

/* --- with a device (skipped here) ----------------------------------------------------------- */

static int skip_without_device(void** state) {
  (void)state;
  return 0;
}

static void gpu_required(void) {
  if (!have_device()) {
    fprintf(stderr, "[  SKIP    ] no " GPU_LABEL " device on this machine: the device tests "
                    "did not run (they need a GPU)\n");
    skip();
  }
}

static void test_device_info(void** state) {
  (void)state;
  gpu_required();
  OxProviderLib* lib = acquire();
  OnyxStatus* why = NULL;
  size_t n = device_count(lib, &why);
  assert_null(why);
  assert_true(n >= 1);
  OnyxDeviceInfo info = {.struct_size = sizeof info};
  ok(lib->provider->device_info(lib->provider, 0, &info));
  assert_non_null(info.name);
  assert_true(info.memory_bytes > 0);
  assert_int_equal(info.memory.kind, ONYX_DEVICE_GPU);
  assert_int_equal(info.memory.vendor_id, GPU_PCI);
  assert_true(info.property_count >= 1);
  assert_string_equal(info.property_keys[0], "compute_capability");
  ox_provider_lib_release(lib);
}

static void test_valid_options_with_device(void** state) {
  (void)state;
  gpu_required();
  ok(create_with(0, "gpu_mem_limit", "2147483648", "arena_extend_strategy", "same_as_requested",
                 "device_id", "0",
#ifdef GPU_IS_CUDA
                 "cudnn_conv_algo_search", "HEURISTIC",
#endif
                 NULL));
}

/* gpu_mem_limit caps the device allocator: a 64 KiB activation does not fit
 * in 4 KiB, and the run fails with out-of-memory naming the provider. */
static void test_mem_limit_enforced(void** state) {
  (void)state;
  gpu_required();
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 1, (int64_t[]){16384});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 1, (int64_t[]){16384});
  otm_node(m, "Relu", "r1", "x", "t");
  otm_node(m, "Sigmoid", "s1", "t", "y");
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  const char* cfg = "{\"providers\": [{\"name\": \"" GPU_NAME
                    "\", \"options\": {\"gpu_mem_limit\": 4096}}, {\"name\": \"cpu\"}]}";
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "limit.json"));
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_options_release(o);
  free(bytes);
  float* x = calloc(16384, sizeof *x);
  assert_non_null(x);
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){16384}, 1, x, 16384 * sizeof *x, &in));
  const char* in_name = "x";
  const char* out_name = "y";
  OnyxValue* out = NULL;
  OnyxStatus* st =
      onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &out);
  assert_null(out);
  expect(st, ONYX_OUT_OF_MEMORY, GPU_NAME, NULL);
  onyx_value_release(in);
  free(x);
  onyx_session_release(s);
}

/* An EP on device 0 with options (key, value, ..., NULL); NULL on error. */
static OnyxEp* make_ep(OxProviderLib* lib, OnyxOptions* opts) {
  OnyxEpCreateArgs args = {.struct_size = sizeof args, .device_index = 0, .options = opts};
  OnyxEp* ep = NULL;
  ok(lib->provider->create_ep(lib->provider, &args, &ep));
  return ep;
}

/* The EP's memory slots directly: allocators, can_copy, copies host ->
 * device -> device -> host on the stream, size and stream checks, events. */
static void test_ep_memory_copies_streams(void** state) {
  (void)state;
  gpu_required();
  OxProviderLib* lib = acquire();
  OnyxOptions opts = {0};
  OnyxEp* ep = make_ep(lib, &opts);
  const OnyxAllocator* dev = ep->get_allocator(ep, ONYX_MEM_DEFAULT);
  const OnyxAllocator* pin = ep->get_allocator(ep, ONYX_MEM_HOST_ACCESSIBLE);
  assert_non_null(dev);
  assert_non_null(pin);
  assert_null(ep->get_allocator(ep, ONYX_MEM_READ_ONLY));
  assert_int_equal(dev->device.kind, ONYX_DEVICE_GPU);
  assert_int_equal(dev->device.vendor_id, GPU_PCI);
  assert_int_equal(dev->device.mem_type, ONYX_MEM_DEFAULT);
  assert_int_equal(dev->device.alignment, 256);
  assert_int_equal(pin->device.kind, ONYX_DEVICE_CPU); /* host code may read it */
  assert_int_equal(pin->device.mem_type, ONYX_MEM_HOST_ACCESSIBLE);
  OnyxMemoryDevice other = dev->device;
  other.vendor_id ^= 1;
  assert_true(ep->can_copy(ep, &OX_HOST_MEMORY, &dev->device));
  assert_true(ep->can_copy(ep, &dev->device, &OX_HOST_MEMORY));
  assert_true(ep->can_copy(ep, &dev->device, &dev->device));
  assert_true(ep->can_copy(ep, &pin->device, &dev->device));
  assert_false(ep->can_copy(ep, &OX_HOST_MEMORY, &OX_HOST_MEMORY));
  assert_false(ep->can_copy(ep, &other, &dev->device));

  OnyxStream* s = NULL;
  ok(ep->create_stream(ep, &s));
  float src[16], back[16];
  for (int i = 0; i < 16; i++) {
    src[i] = (float)i * 0.5f - 3.0f;
    back[i] = 0.0f;
  }
  void* d1 = dev->alloc(dev->ctx, sizeof src, 256);
  void* d2 = dev->alloc(dev->ctx, sizeof src, 256);
  assert_non_null(d1);
  assert_non_null(d2);
  assert_int_equal((uintptr_t)d1 % 256, 0);
  int64_t dims[1] = {16};
  OxTensor *th, *t1, *t2, *tb, *small;
  ok(ox_tensor_wrap(ONYX_ELEM_FLOAT32, dims, 1, src, &OX_HOST_MEMORY, &th));
  ok(ox_tensor_wrap(ONYX_ELEM_FLOAT32, dims, 1, d1, &dev->device, &t1));
  ok(ox_tensor_wrap(ONYX_ELEM_FLOAT32, dims, 1, d2, &dev->device, &t2));
  ok(ox_tensor_wrap(ONYX_ELEM_FLOAT32, dims, 1, back, &OX_HOST_MEMORY, &tb));
  ok(ox_tensor_wrap(ONYX_ELEM_FLOAT32, (int64_t[]){8}, 1, back, &OX_HOST_MEMORY, &small));
  const OnyxTensor* from[3] = {th, t1, t2};
  OnyxTensor* to[3] = {t1, t2, tb};
  ok(ep->copy_tensors(ep, from, to, 3, s)); /* H2D, D2D, D2H in order on one stream */
  ok(ep->sync_stream(ep, s));
  for (int i = 0; i < 16; i++)
    assert_true(back[i] == src[i]);
  /* Pairs of different sizes, and a stream of no one. */
  const OnyxTensor* bad_from[1] = {t1};
  OnyxTensor* bad_to[1] = {small};
  expect(ep->copy_tensors(ep, bad_from, bad_to, 1, s), ONYX_INVALID_ARGUMENT,
         "source has 64 bytes, destination 32", NULL);
  uint64_t junk[4] = {0};
  expect(ep->copy_tensors(ep, from, to, 1, (OnyxStream*)junk), ONYX_INVALID_ARGUMENT,
         "is not this EP's", NULL);
  expect(ep->sync_stream(ep, (OnyxStream*)junk), ONYX_INVALID_ARGUMENT, "is not this EP's", NULL);
  /* Events: record on the stream, the stream and the host wait for it. */
  OnyxEvent* e = NULL;
  ok(ep->create_event(ep, &e));
  ok(ep->record_event(ep, e, s));
  ok(ep->wait_event(ep, e, s));
  ok(ep->wait_event(ep, e, NULL));
  expect(ep->record_event(ep, (OnyxEvent*)junk, s), ONYX_INVALID_ARGUMENT, "is not this EP's",
         NULL);
  ep->release_event(ep, e);
  ox_tensor_free(th);
  ox_tensor_free(t1);
  ox_tensor_free(t2);
  ox_tensor_free(tb);
  ox_tensor_free(small);
  dev->free(dev->ctx, d1);
  dev->free(dev->ctx, d2);
  void* p = pin->alloc(pin->ctx, 100, 64);
  assert_non_null(p);
  memset(p, 7, 100); /* host-writable */
  pin->free(pin->ctx, p);
  ep->release_stream(ep, s);
  ep->release(ep);
  ox_options_clear(&opts);
  ox_provider_lib_release(lib);
}

/* gpu_mem_limit counts what the allocator holds, rounded as
 * arena_extend_strategy says (next_power_of_two by default). */
static void test_allocator_limit(void** state) {
  (void)state;
  gpu_required();
  OxProviderLib* lib = acquire();
  OnyxOptions opts = {0};
  ok(ox_options_set(&opts, "gpu_mem_limit", "1024"));
  OnyxEp* ep = make_ep(lib, &opts);
  const OnyxAllocator* dev = ep->get_allocator(ep, ONYX_MEM_DEFAULT);
  assert_null(dev->alloc(dev->ctx, 2048, 256)); /* over the limit by itself */
  void* a = dev->alloc(dev->ctx, 300, 256);     /* holds 512 (rounded up) */
  assert_non_null(a);
  void* b = dev->alloc(dev->ctx, 600, 256); /* 1024 rounded, 600 exact: 512 + 600 > 1024 */
  assert_null(b);
  void* c = dev->alloc(dev->ctx, 500, 256); /* 512: 512 + 512 = 1024 fits */
  assert_non_null(c);
  assert_null(dev->alloc(dev->ctx, 1, 256));
  dev->free(dev->ctx, a);
  void* d = dev->alloc(dev->ctx, 512, 256);
  assert_non_null(d);
  dev->free(dev->ctx, c);
  dev->free(dev->ctx, d);
  ep->release(ep);
  ox_options_clear(&opts);
  ox_provider_lib_release(lib);
}

/* y = Softmax(Relu(x @ W + b) * 2) over [2, 3] @ [3, 2] on the GPU, against
 * values computed by hand. */
static void test_small_model_on_device(void** state) {
  (void)state;
  gpu_required();
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_initializer(m, "w", ONYX_ELEM_FLOAT32, 2, (int64_t[]){3, 2}, (float[]){1, 0, 0, 1, 1, -1});
  otm_initializer(m, "b", ONYX_ELEM_FLOAT32, 1, (int64_t[]){2}, (float[]){0.5f, 0});
  otm_initializer(m, "two", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){2});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 2});
  otm_node(m, "MatMul", "mm", "x,w", "p");
  otm_node(m, "Add", "add", "p,b", "q");
  otm_node(m, "Relu", "relu", "q", "r");
  otm_node(m, "Mul", "mul", "r,two", "t");
  otm_node(m, "Softmax", "sm", "t", "y");
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  const char* cfg = "{\"providers\": [{\"name\": \"" GPU_NAME "\"}, {\"name\": \"cpu\"}], "
                    "\"session\": {\"log_severity\": \"info\"}}";
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "gpu.json"));
  LogCapture log = {{0}};
  ok(onyx_session_options_set_log_callback(o, capture, &log));
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_options_release(o);
  free(bytes);
  /* The optimizer fuses MatMul + Add into Gemm; the four nodes left are
   * float32 with GPU kernels and all run there. */
  if (!strstr(log.text, "placement of 4 nodes: " GPU_NAME ": 4"))
    fail_msg("not all on " GPU_NAME ":\n%s", log.text);
  /* x rows [1,2,3], [0,-1,1]: p = [1+3, 2-3] = [4,-1], [0+1, -1-1] = [1,-2];
   * q = [4.5,-1], [1.5,-2]; r = [4.5,0], [1.5,0]; t = [9,0], [3,0];
   * softmax: [e^9, 1]/(e^9+1), [e^3, 1]/(e^3+1). */
  float x[6] = {1, 2, 3, 0, -1, 1};
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){2, 3}, 2, x, sizeof x, &in));
  const char* in_name = "x";
  const char* out_name = "y";
  OnyxValue* out = NULL;
  ok(onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, &out_name, 1, &out));
  const float* y = onyx_tensor_data(onyx_value_tensor(out));
  double want[4] = {exp(9.0) / (exp(9.0) + 1), 1 / (exp(9.0) + 1), exp(3.0) / (exp(3.0) + 1),
                    1 / (exp(3.0) + 1)};
  for (int i = 0; i < 4; i++)
    assert_true(fabs(y[i] - want[i]) < 1e-5);
  onyx_value_release(in);
  onyx_value_release(out);
  onyx_session_release(s);
}

/* Keeps the provider (and so the vendor runtime it links) mapped for the
 * whole process: the host dlcloses a provider when its last session ends,
 * and the runtime's one-time allocations would then be reported by LSan
 * against an unknown module. Mapped, they are attributed to the vendor
 * library and lsan-gpu.supp can name it. */
static int keep_mapped(void** state) {
  (void)state;
  const char* dir = getenv("ONYX_PROVIDER_PATH");
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/libonyx_ep_" GPU_NAME ".so", dir ? dir : ".");
  if (!dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
    return -1;
  }
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_loads_and_registers_kernels),
      cmocka_unit_test(test_shape_inputs_in_host_memory),
      cmocka_unit_test(test_zero_devices_with_reason),
      cmocka_unit_test(test_required_config_fails_without_device),
      cmocka_unit_test(test_optional_config_runs_on_cpu),
      cmocka_unit_test(test_option_errors),
      cmocka_unit_test(test_valid_options_reach_device_check),
      cmocka_unit_test_setup(test_device_info, skip_without_device),
      cmocka_unit_test_setup(test_small_model_on_device, skip_without_device),
      cmocka_unit_test(test_valid_options_with_device),
      cmocka_unit_test(test_mem_limit_enforced),
      cmocka_unit_test(test_ep_memory_copies_streams),
      cmocka_unit_test(test_allocator_limit),
  };
  return cmocka_run_group_tests_name("gpu_" GPU_NAME, tests, keep_mapped, NULL);
}
