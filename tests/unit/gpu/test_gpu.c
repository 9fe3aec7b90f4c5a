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

#include "ox_host_api.h"
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
  OnyxStatus* st = ox_provider_lib_acquire(ox_host_api(), GPU_NAME, NULL, &lib);
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
  /* Add takes float32, float16 and bfloat16; int64 Add is not a GPU
   * kernel: it falls back to the CPU. */
  for (size_t i = 0; i < ox_kreg_count(lib->kernels); i++) {
    const OnyxKernelDef* d = &ox_kreg_at(lib->kernels, i)->def;
    if (strcmp(d->op_type, "Add")) continue;
    assert_int_equal(d->type_constraint_count, 1);
    assert_int_equal(d->type_constraints[0].type_count, 3);
    assert_int_equal(d->type_constraints[0].types[0], ONYX_ELEM_FLOAT32);
    assert_int_equal(d->type_constraints[0].types[1], ONYX_ELEM_FLOAT16);
    assert_int_equal(d->type_constraints[0].types[2], ONYX_ELEM_BFLOAT16);
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
  /* The optimizer fuses MatMul + Add into Gemm, and after placement Gemm +
   * Relu into com.onyx FusedMatMul, which the GPU has: the three nodes left
   * are float32 with GPU kernels and all run there. */
  if (!strstr(log.text, "placement of 3 nodes: " GPU_NAME ": 3"))
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

/* --- kernels against double-precision references --------------------------------------- */

/* Deterministic values in [-scale, scale) + shift (a 64-bit LCG). */
static void fill(float* v, size_t n, uint64_t seed, float scale, float shift) {
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0) * scale + shift;
  }
}

/* A session over the model with the GPU provider first; fails unless the
 * GPU runs all `nodes` of it (after the optimizer's fusions). */
static OnyxSession* gpu_session(OxTestModel* m, size_t nodes) {
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  const char* cfg = "{\"providers\": [{\"name\": \"" GPU_NAME "\"}, {\"name\": \"cpu\"}]}";
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "gpu.json"));
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_options_release(o);
  free(bytes);
  assert_string_equal(onyx_session_provider_name(s, 0), GPU_NAME);
  if (onyx_session_provider_node_count(s, 0) != nodes) {
    char* text = NULL;
    ok(onyx_session_explain(s, &text));
    fail_msg("%zu of %zu nodes on " GPU_NAME ":\n%s", onyx_session_provider_node_count(s, 0), nodes,
             text);
  }
  return s;
}

/* Runs s on one float input "x" of `dims`; returns the float outputs named
 * in `outs` (copied into malloc'd arrays). */
static void run1(OnyxSession* s, const float* x, const int64_t* dims, size_t rank, size_t n_outs,
                 const char* const* outs, float** got) {
  size_t n = 1;
  for (size_t d = 0; d < rank; d++)
    n *= (size_t)dims[d];
  OnyxValue* in = NULL;
  ok(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, dims, rank, x, n * sizeof *x, &in));
  const char* in_name = "x";
  OnyxValue* out[4] = {NULL};
  assert_true(n_outs <= 4);
  ok(onyx_session_run(s, NULL, &in_name, (const OnyxValue* const*)&in, 1, outs, n_outs, out));
  for (size_t i = 0; i < n_outs; i++) {
    const OnyxTensor* t = onyx_value_tensor(out[i]);
    size_t c = onyx_tensor_elem_count(t);
    got[i] = malloc((c ? c : 1) * sizeof(float));
    assert_non_null(got[i]);
    memcpy(got[i], onyx_tensor_data(t), c * sizeof(float));
    onyx_value_release(out[i]);
  }
  onyx_value_release(in);
}

static void near(double got, double want, double tol, const char* what, size_t i) {
  if (!(fabs(got - want) <= tol)) /* also fails on NaN */
    fail_msg("%s[%zu]: got %.9g, want %.9g (tolerance %.3g)", what, i, got, want, tol);
}

/* Softmax / LogSoftmax (opset 13) of x [outer, axis, inner] over dim 1, or
 * over the last dim of [rows, cols] when inner == 1 (the contiguous rows). */
static void check_softmax(int64_t outer, int64_t len, int64_t inner, bool log_sm) {
  const bool rows_layout = inner == 1;
  int64_t dims[3] = {outer, len, inner};
  size_t rank = rows_layout ? 2 : 3;
  size_t n = (size_t)(outer * len * inner);
  OxTestModel* m = otm_new(13);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, (int)rank, dims);
  otm_output(m, "y", ONYX_ELEM_FLOAT32, (int)rank, dims);
  OxTestNode* nd = otm_node(m, log_sm ? "LogSoftmax" : "Softmax", "sm", "x", "y");
  otm_attr_int(nd, "axis", 1);
  OnyxSession* s = gpu_session(m, 1);
  float* x = malloc(n * sizeof *x);
  assert_non_null(x);
  fill(x, n, (uint64_t)(outer * 7919 + len * 31 + inner), 8.0f, 1.0f);
  float* y = NULL;
  const char* out = "y";
  run1(s, x, dims, rank, 1, &out, &y);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      const float* xp = x + o * len * inner + i;
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < len; j++)
        mx = fmax(mx, xp[j * inner]);
      for (int64_t j = 0; j < len; j++)
        sum += exp(xp[j * inner] - mx);
      for (int64_t j = 0; j < len; j++) {
        size_t at = (size_t)(o * len * inner + j * inner + i);
        double e = xp[j * inner] - mx;
        if (log_sm)
          near(y[at], e - log(sum), 1e-5 * (1 + fabs(e - log(sum))), "logsoftmax", at);
        else
          near(y[at], exp(e) / sum, 1e-5 * exp(e) / sum + 1e-9, "softmax", at);
      }
    }
  free(x);
  free(y);
  onyx_session_release(s);
}

/* Rows of 1, 31, 32, 33, 1000 and 5000 columns; 3 rows take a block per row
 * for the longer ones, 1100 rows of up to 1024 a warp per row. inner > 1:
 * few columns take a warp or a block per column, many columns (>= 8192) or
 * a short axis (< 32) a thread per column. */
static void test_softmax_rows_and_columns(void** state) {
  (void)state;
  gpu_required();
  static const int64_t cols[] = {1, 31, 32, 33, 64, 200, 1000, 1024, 1025, 5000};
  for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) {
    check_softmax(3, cols[c], 1, false);
    check_softmax(2, cols[c], 1, true);
  }
  check_softmax(1100, 200, 1, false); /* warp per row */
  check_softmax(1100, 1000, 1, true); /* warp per row, long rows */
  check_softmax(1, 70000, 1, false);  /* one block, many columns per thread */
  check_softmax(2, 33, 5, false);     /* strided: a warp per column */
  check_softmax(3, 1000, 7, true);    /* strided, long axis: a block per column */
  check_softmax(1, 4, 300, false);    /* strided, short axis: a thread per column */
  check_softmax(4, 40, 2500, true);   /* strided, 10,000 columns: a thread per column */
}

/* LayerNormalization-17 over the last axis, Y, Mean and InvStdDev against a
 * double reference (two passes) within 1e-5 relative. */
static void check_layernorm(int64_t rows, int64_t cols, bool with_bias) {
  int64_t dims[2] = {rows, cols}, sdims[2] = {rows, 1};
  size_t n = (size_t)(rows * cols);
  float* scale = malloc((size_t)cols * sizeof *scale);
  float* bias = malloc((size_t)cols * sizeof *bias);
  float* x = malloc(n * sizeof *x);
  assert_true(scale && bias && x);
  fill(scale, (size_t)cols, 11, 1.0f, 0.5f);
  fill(bias, (size_t)cols, 12, 0.5f, 0.0f);
  fill(x, n, (uint64_t)(rows * 131 + cols), 2.0f, 0.75f);
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, dims);
  otm_initializer(m, "scale", ONYX_ELEM_FLOAT32, 1, (int64_t[]){cols}, scale);
  if (with_bias) otm_initializer(m, "bias", ONYX_ELEM_FLOAT32, 1, (int64_t[]){cols}, bias);
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, dims);
  otm_output(m, "mean", ONYX_ELEM_FLOAT32, 2, sdims);
  otm_output(m, "inv", ONYX_ELEM_FLOAT32, 2, sdims);
  OxTestNode* nd =
      otm_node(m, "LayerNormalization", "ln", with_bias ? "x,scale,bias" : "x,scale", "y,mean,inv");
  otm_attr_float(nd, "epsilon", 1e-5f);
  OnyxSession* s = gpu_session(m, 1);
  float* got[3] = {NULL};
  const char* outs[3] = {"y", "mean", "inv"};
  run1(s, x, dims, 2, 3, outs, got);
  for (int64_t r = 0; r < rows; r++) {
    const float* xp = x + r * cols;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < cols; j++)
      mean += xp[j];
    mean /= (double)cols;
    for (int64_t j = 0; j < cols; j++)
      var += (xp[j] - mean) * (xp[j] - mean);
    var /= (double)cols;
    double inv = 1.0 / sqrt(var + 1e-5);
    near(got[1][r], mean, 1e-5 * (fabs(mean) + 1e-2), "mean", (size_t)r);
    near(got[2][r], inv, 1e-5 * inv, "inv_std", (size_t)r);
    for (int64_t j = 0; j < cols; j++) {
      double want = (xp[j] - mean) * inv * scale[j] + (with_bias ? bias[j] : 0.0);
      near(got[0][r * cols + j], want, 1e-5 * (1 + fabs(want)), "layernorm",
           (size_t)(r * cols + j));
    }
  }
  for (int i = 0; i < 3; i++)
    free(got[i]);
  free(scale);
  free(bias);
  free(x);
  onyx_session_release(s);
}

static void test_layernorm_rows(void** state) {
  (void)state;
  gpu_required();
  static const int64_t cols[] = {1, 31, 32, 33, 768, 1000, 1025, 4096, 5000};
  for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++)
    check_layernorm(3, cols[c], c % 2 == 0);
  check_layernorm(128, 768, true);  /* a BERT layer's: a block per row */
  check_layernorm(1100, 100, true); /* warp per row */
  check_layernorm(1100, 768, false);
}

/* ReduceX-18 of x `dims` (rank <= 4) over `axes` with keepdims 0, against a
 * double reference (the mean of nothing is NaN, the others' identities). */
static void check_reduce(const char* op, const int64_t* dims, size_t rank, const int64_t* axes,
                         size_t n_axes) {
  size_t n = 1;
  bool red[4] = {false};
  for (size_t d = 0; d < rank; d++)
    n *= (size_t)dims[d];
  for (size_t i = 0; i < n_axes; i++)
    red[axes[i]] = true;
  int64_t od[4];
  size_t orank = 0, n_out = 1;
  for (size_t d = 0; d < rank; d++)
    if (!red[d]) n_out *= (size_t)(od[orank++] = dims[d]);
  OxTestModel* m = otm_new(18);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, (int)rank, dims);
  otm_initializer(m, "axes", ONYX_ELEM_INT64, 1, (int64_t[]){(int64_t)n_axes}, axes);
  otm_output(m, "y", ONYX_ELEM_FLOAT32, (int)orank, od);
  OxTestNode* nd = otm_node(m, op, "red", "x,axes", "y");
  otm_attr_int(nd, "keepdims", 0);
  OnyxSession* s = gpu_session(m, 1);
  float* x = malloc((n ? n : 1) * sizeof *x);
  assert_non_null(x);
  fill(x, n, n + rank, 4.0f, 0.5f);
  float* y = NULL;
  const char* out = "y";
  run1(s, x, dims, rank, 1, &out, &y);
  int64_t dd[4] = {1, 1, 1, 1};
  for (size_t d = 0; d < rank; d++)
    dd[4 - rank + d] = dims[d];
  bool rr[4] = {false};
  for (size_t d = 0; d < rank; d++)
    rr[4 - rank + d] = red[d];
  int kind = !strcmp(op, "ReduceSum")    ? 0
             : !strcmp(op, "ReduceMean") ? 1
             : !strcmp(op, "ReduceMax")  ? 2
                                         : 3;
  double* acc = malloc(n_out * sizeof *acc);
  double* mag = calloc(n_out, sizeof *mag);
  assert_true(acc && mag);
  for (size_t o = 0; o < n_out; o++)
    acc[o] = kind == 2 ? -INFINITY : kind == 3 ? INFINITY : 0.0;
  size_t i = 0;
  for (int64_t a = 0; a < dd[0]; a++)
    for (int64_t b = 0; b < dd[1]; b++)
      for (int64_t c = 0; c < dd[2]; c++)
        for (int64_t e = 0; e < dd[3]; e++, i++) {
          int64_t idx[4] = {a, b, c, e};
          size_t o = 0;
          for (int d = 0; d < 4; d++)
            if (!rr[d]) o = o * (size_t)dd[d] + (size_t)idx[d];
          double v = x[i];
          acc[o] = kind == 2 ? fmax(acc[o], v) : kind == 3 ? fmin(acc[o], v) : acc[o] + v;
          mag[o] += fabs(v);
        }
  size_t count = n_out ? n / n_out : 0;
  for (size_t o = 0; o < n_out; o++) {
    double want = kind == 1 ? acc[o] / (double)count : acc[o];
    double tol = kind >= 2 ? 0.0 : 1e-5 * (kind == 1 ? mag[o] / (double)count : mag[o]) + 1e-6;
    near(y[o], want, tol, op, o);
  }
  free(acc);
  free(mag);
  free(x);
  free(y);
  onyx_session_release(s);
}

/* The innermost axes (a warp or a block per output); an outer or middle
 * axis with a contiguous inner run (few outputs: a warp or a block per
 * output; many outputs or a short axis: a thread per output); all axes; and
 * axes that are not one run (the general path). */
static void test_reductions_by_layout(void** state) {
  (void)state;
  gpu_required();
  static const char* const ops[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"};
  for (size_t k = 0; k < 4; k++) {
    const char* op = ops[k];
    check_reduce(op, (int64_t[]){3, 5000}, 2, (int64_t[]){1}, 1);       /* last, block */
    check_reduce(op, (int64_t[]){1100, 33}, 2, (int64_t[]){1}, 1);      /* last, warp */
    check_reduce(op, (int64_t[]){4, 31, 32}, 3, (int64_t[]){1, 2}, 2);  /* last two */
    check_reduce(op, (int64_t[]){4, 1, 1000}, 3, (int64_t[]){2}, 1);    /* last past a 1 */
    check_reduce(op, (int64_t[]){1000, 7}, 2, (int64_t[]){0}, 1);       /* first */
    check_reduce(op, (int64_t[]){3, 100, 9}, 3, (int64_t[]){1}, 1);     /* middle */
    check_reduce(op, (int64_t[]){3, 10, 9}, 3, (int64_t[]){1}, 1);      /* middle, short */
    check_reduce(op, (int64_t[]){4, 50, 2500}, 3, (int64_t[]){1}, 1);   /* middle, many outputs */
    check_reduce(op, (int64_t[]){6, 5, 4}, 3, (int64_t[]){0, 1, 2}, 3); /* all */
    check_reduce(op, (int64_t[]){6, 5, 4}, 3, (int64_t[]){0, 2}, 2);    /* not one run */
    check_reduce(op, (int64_t[]){2, 3, 4, 5}, 4, (int64_t[]){1, 3}, 2); /* not one run */
  }
}

/* The host's fusions after placement make com.onyx FusedMatMul (MatMul + Add
 * + Relu) and com.onyx Gelu (the erf pattern after MatMul + Add: a
 * FusedMatMul without activation, then Gelu) for the GPU, which runs them:
 * every node of the explain report is on the GPU and was made by a fusion,
 * and the outputs are those of a double reference and of the CPU provider. */
static OnyxSession* fused_model_session(const char* cfg, const float* w1, const float* b1,
                                        const float* w2, const float* b2) {
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 3, 4});
  otm_initializer(m, "w1", ONYX_ELEM_FLOAT32, 2, (int64_t[]){4, 5}, w1);
  otm_initializer(m, "b1", ONYX_ELEM_FLOAT32, 1, (int64_t[]){5}, b1);
  otm_initializer(m, "w2", ONYX_ELEM_FLOAT32, 2, (int64_t[]){4, 6}, w2);
  otm_initializer(m, "b2", ONYX_ELEM_FLOAT32, 1, (int64_t[]){6}, b2);
  otm_initializer(m, "sqrt2", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){1.41421356f});
  otm_initializer(m, "one", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){1.0f});
  otm_initializer(m, "half", ONYX_ELEM_FLOAT32, 0, NULL, (float[]){0.5f});
  otm_output(m, "y1", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 3, 5});
  otm_output(m, "y2", ONYX_ELEM_FLOAT32, 3, (int64_t[]){2, 3, 6});
  otm_node(m, "MatMul", "mm1", "x,w1", "p1");
  otm_node(m, "Add", "add1", "p1,b1", "q1");
  otm_node(m, "Relu", "relu1", "q1", "y1");
  otm_node(m, "MatMul", "mm2", "x,w2", "p2");
  otm_node(m, "Add", "add2", "p2,b2", "q2");
  otm_node(m, "Div", "div2", "q2,sqrt2", "d2");
  otm_node(m, "Erf", "erf2", "d2", "e2");
  otm_node(m, "Add", "inc2", "e2,one", "f2");
  otm_node(m, "Mul", "mul2", "q2,f2", "g2");
  otm_node(m, "Mul", "half2", "g2,half", "y2");
  uint8_t* bytes = NULL;
  size_t len = 0;
  otm_serialize(m, &bytes, &len);
  otm_free(m);
  OnyxSessionOptions* o = NULL;
  ok(onyx_session_options_create(&o));
  ok(onyx_session_options_load_config_text(o, cfg, strlen(cfg), "fused.json"));
  OnyxSession* s = NULL;
  ok(onyx_session_create_from_bytes(o, bytes, len, NULL, &s));
  onyx_session_options_release(o);
  free(bytes);
  return s;
}

static void test_fused_matmul_and_gelu(void** state) {
  (void)state;
  gpu_required();
  float x[24], w1[20], b1[5], w2[24], b2[6];
  fill(x, 24, 1, 1.5f, 0.0f);
  fill(w1, 20, 2, 1.0f, 0.0f);
  fill(b1, 5, 3, 0.5f, 0.0f);
  fill(w2, 24, 4, 1.0f, 0.0f);
  fill(b2, 6, 5, 0.5f, 0.0f);
  OnyxSession* s = fused_model_session(
      "{\"providers\": [{\"name\": \"" GPU_NAME "\"}, {\"name\": \"cpu\"}]}", w1, b1, w2, b2);
  char* text = NULL;
  ok(onyx_session_explain(s, &text));
  /* Three nodes, all made by fusions and run on the GPU. */
  const char* fused_relu = strstr(text, "FusedMatMul");
  const char* gelu = strstr(text, "Gelu");
  bool on_gpu = fused_relu && gelu && strstr(text, "-> " GPU_NAME) && !strstr(text, "-> cpu");
  size_t made = 0, nodes = 0;
  for (const char* p = text; (p = strstr(p, "made by ")); p++)
    made++;
  for (const char* p = text; (p = strstr(p, "-> " GPU_NAME)); p++)
    nodes++;
  if (!on_gpu || made != 3 || nodes != 3) fail_msg("not fused on " GPU_NAME ":\n%s", text);
  onyx_free(text);
  OnyxSession* cpu = fused_model_session("{\"providers\": [{\"name\": \"cpu\"}]}", w1, b1, w2, b2);
  const char* outs[2] = {"y1", "y2"};
  float *got[2] = {NULL}, *ref[2] = {NULL};
  run1(s, x, (int64_t[]){2, 3, 4}, 3, 2, outs, got);
  run1(cpu, x, (int64_t[]){2, 3, 4}, 3, 2, outs, ref);
  for (int r = 0; r < 6; r++) {
    for (int j = 0; j < 5; j++) {
      double q = b1[j];
      for (int k = 0; k < 4; k++)
        q += (double)x[r * 4 + k] * w1[k * 5 + j];
      double want = q > 0 ? q : 0;
      near(got[0][r * 5 + j], want, 1e-5, "relu branch", (size_t)(r * 5 + j));
      near(got[0][r * 5 + j], ref[0][r * 5 + j], 1e-5, "relu branch vs cpu", (size_t)(r * 5 + j));
    }
    for (int j = 0; j < 6; j++) {
      double q = b2[j];
      for (int k = 0; k < 4; k++)
        q += (double)x[r * 4 + k] * w2[k * 6 + j];
      double want = 0.5 * q * (1 + erf(q / sqrt(2.0)));
      near(got[1][r * 6 + j], want, 1e-5, "gelu branch", (size_t)(r * 6 + j));
      near(got[1][r * 6 + j], ref[1][r * 6 + j], 1e-5, "gelu branch vs cpu", (size_t)(r * 6 + j));
    }
  }
  for (int i = 0; i < 2; i++) {
    free(got[i]);
    free(ref[i]);
  }
  onyx_session_release(cpu);
  onyx_session_release(s);
}

/* com.onyx FusedMatMul as a model's own node: every activation the GPU takes,
 * with and without the residual Z (the host's fusions make Z and the Gelu
 * activation only for the CPU provider, so only such a node reaches them). */
static void check_fused_node(const char* act, float alpha, float lo, float hi, bool with_z) {
  enum { R = 3, S = 5, K = 7, N = 9 };
  float x[R * S * K], b[K * N], bias[N], z[R * S * N];
  fill(x, R * S * K, 21, 1.5f, 0.0f);
  fill(b, K * N, 22, 1.0f, 0.0f);
  fill(bias, N, 23, 0.5f, 0.0f);
  fill(z, R * S * N, 24, 1.0f, 0.0f);
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "com.onyx", 1);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 3, (int64_t[]){R, S, K});
  otm_initializer(m, "b", ONYX_ELEM_FLOAT32, 2, (int64_t[]){K, N}, b);
  otm_initializer(m, "bias", ONYX_ELEM_FLOAT32, 1, (int64_t[]){N}, bias);
  otm_initializer(m, "z", ONYX_ELEM_FLOAT32, 3, (int64_t[]){R, S, N}, z);
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 3, (int64_t[]){R, S, N});
  OxTestNode* nd = otm_node(m, "FusedMatMul", "fmm", with_z ? "x,b,bias,z" : "x,b,bias", "y");
  otm_node_domain(nd, "com.onyx");
  if (*act) otm_attr_string(nd, "activation", act);
  if (!strcmp(act, "LeakyRelu")) otm_attr_float(nd, "alpha", alpha);
  if (!strcmp(act, "Clip")) {
    otm_attr_float(nd, "clip_min", lo);
    otm_attr_float(nd, "clip_max", hi);
  }
  OnyxSession* s = gpu_session(m, 1);
  float* y = NULL;
  const char* out = "y";
  run1(s, x, (int64_t[]){R, S, K}, 3, 1, &out, &y);
  for (int r = 0; r < R * S; r++)
    for (int j = 0; j < N; j++) {
      double v = bias[j] + (with_z ? z[r * N + j] : 0.0);
      for (int k = 0; k < K; k++)
        v += (double)x[r * K + k] * b[k * N + j];
      double want = v;
      if (!strcmp(act, "Relu")) want = v > 0 ? v : 0;
      if (!strcmp(act, "LeakyRelu")) want = v >= 0 ? v : alpha * v;
      if (!strcmp(act, "Clip")) want = v < lo ? lo : v > hi ? hi : v;
      if (!strcmp(act, "Gelu")) want = 0.5 * v * (1 + erf(v / sqrt(2.0)));
      near(y[r * N + j], want, 1e-5 * (1 + fabs(want)), *act ? act : "FusedMatMul",
           (size_t)(r * N + j));
    }
  free(y);
  onyx_session_release(s);
}

static void test_fused_matmul_node(void** state) {
  (void)state;
  gpu_required();
  static const char* const acts[] = {"", "Relu", "LeakyRelu", "Clip", "Gelu"};
  for (size_t i = 0; i < 5; i++) {
    check_fused_node(acts[i], 0.2f, -0.5f, 0.7f, false);
    check_fused_node(acts[i], 0.2f, -0.5f, 0.7f, true);
  }
}

/* Element-wise ops over 37 x 29 = 1,073 elements (268 float4 groups and a
 * tail of 1): same-shape operands and one-value operands take the flat
 * kernels, a row broadcast the general one; against the C operators. */
static void test_elementwise_layouts(void** state) {
  (void)state;
  gpu_required();
  enum { R = 37, C = 29 };
  static float x[R * C], same[R * C], row[C];
  fill(x, R * C, 31, 3.0f, 0.25f);
  fill(same, R * C, 32, 2.0f, 0.0f);
  fill(row, C, 33, 2.0f, 3.0f); /* in [1, 5]: a divisor away from zero */
  const float k = 1.75f;
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){R, C});
  otm_initializer(m, "same", ONYX_ELEM_FLOAT32, 2, (int64_t[]){R, C}, same);
  otm_initializer(m, "k", ONYX_ELEM_FLOAT32, 0, NULL, &k);
  otm_initializer(m, "row", ONYX_ELEM_FLOAT32, 1, (int64_t[]){C}, row);
  static const char* const outs[5] = {"y_add", "y_mul", "y_sub", "y_div", "y_sig"};
  for (int i = 0; i < 5; i++)
    otm_output(m, outs[i], ONYX_ELEM_FLOAT32, 2, (int64_t[]){R, C});
  otm_node(m, "Add", "add", "x,same", "y_add");
  otm_node(m, "Mul", "mul", "x,k", "y_mul");
  otm_node(m, "Sub", "sub", "k,x", "y_sub");
  otm_node(m, "Div", "div", "x,row", "y_div");
  otm_node(m, "Sigmoid", "sig", "x", "y_sig");
  OnyxSession* s = gpu_session(m, 5);
  float* got[5] = {NULL};
  run1(s, x, (int64_t[]){R, C}, 2, 4, outs, got);
  run1(s, x, (int64_t[]){R, C}, 2, 1, outs + 4, got + 4);
  for (size_t i = 0; i < R * C; i++) {
    near(got[0][i], x[i] + same[i], 1e-6 * fabs(x[i] + same[i]), "add", i);
    near(got[1][i], x[i] * k, 1e-6 * fabs(x[i] * k), "mul by one value", i);
    near(got[2][i], k - x[i], 1e-6 * fabs(k - x[i]), "one value minus", i);
    double d = (double)x[i] / row[i % C];
    near(got[3][i], d, 1e-6 * fabs(d), "div by a row", i);
    double sg = 1 / (1 + exp(-(double)x[i]));
    near(got[4][i], sg, 1e-6, "sigmoid", i);
  }
  for (int i = 0; i < 5; i++)
    free(got[i]);
  onyx_session_release(s);
}

/* Binary ops whose input repeats over the outer dims (a mask [4, 8] added
 * over [2, 3, 4, 8], a bias [8] on either side, periods a multiple of 4 or
 * not) take the flat kernels' cycle index; a per-channel [3, 1, 1] operand
 * is no cycle and takes the general path. Every case against the C
 * operators with the numpy broadcasting rule written out. */
static void test_broadcast_cycles(void** state) {
  (void)state;
  gpu_required();
  enum { A = 2, B = 3, H = 4, W = 8, N = A * B * H * W };
  static float x[N], mask[H * W], bias[W], chan[B], odd[H * W - 1];
  fill(x, N, 41, 3.0f, 0.5f);
  fill(mask, H * W, 42, 2.0f, 0.0f);
  fill(bias, W, 43, 2.0f, 3.0f); /* in [1, 5] */
  fill(chan, B, 44, 1.0f, 0.0f);
  fill(odd, H * W - 1, 45, 2.0f, 3.0f); /* in [1, 5] */
  OxTestModel* m = otm_new(17);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 4, (int64_t[]){A, B, H, W});
  otm_initializer(m, "mask", ONYX_ELEM_FLOAT32, 2, (int64_t[]){H, W}, mask);
  otm_initializer(m, "bias", ONYX_ELEM_FLOAT32, 1, (int64_t[]){W}, bias);
  otm_initializer(m, "chan", ONYX_ELEM_FLOAT32, 3, (int64_t[]){B, 1, 1}, chan);
  static const char* const outs[4] = {"y_mask", "y_bias", "y_chan", "y_odd"};
  for (int i = 0; i < 3; i++)
    otm_output(m, outs[i], ONYX_ELEM_FLOAT32, 4, (int64_t[]){A, B, H, W});
  /* A period of 31 over [5, 31]: the cycle's scalar path. */
  otm_input(m, "x2", ONYX_ELEM_FLOAT32, 2, (int64_t[]){5, H * W - 1});
  otm_initializer(m, "odd", ONYX_ELEM_FLOAT32, 1, (int64_t[]){H * W - 1}, odd);
  otm_output(m, outs[3], ONYX_ELEM_FLOAT32, 2, (int64_t[]){5, H * W - 1});
  otm_node(m, "Add", "add_mask", "x,mask", "y_mask");
  otm_node(m, "Sub", "sub_bias", "bias,x", "y_bias");
  otm_node(m, "Mul", "mul_chan", "x,chan", "y_chan");
  otm_node(m, "Div", "div_odd", "x2,odd", "y_odd");
  OnyxSession* s = gpu_session(m, 4);
  static float x2[5 * (H * W - 1)];
  fill(x2, 5 * (H * W - 1), 46, 3.0f, 0.0f);
  const char* names[2] = {"x", "x2"};
  OnyxValue* in[2] = {NULL, NULL};
  assert_null(
      onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){A, B, H, W}, 4, x, sizeof x, &in[0]));
  assert_null(onyx_value_create_tensor(ONYX_ELEM_FLOAT32, (int64_t[]){5, H * W - 1}, 2, x2,
                                       sizeof x2, &in[1]));
  OnyxValue* out[4] = {NULL};
  assert_null(onyx_session_run(s, NULL, names, (const OnyxValue* const*)in, 2, outs, 4, out));
  const float* y[4];
  for (int i = 0; i < 4; i++)
    y[i] = onyx_tensor_data(onyx_value_tensor(out[i]));
  for (size_t i = 0; i < N; i++) {
    size_t w = i % W, h = i / W % H, b = i / (W * H) % B;
    double e = (double)x[i] + mask[h * W + w];
    near(y[0][i], e, 1e-6 * fabs(e), "x + mask[H, W]", i);
    e = (double)bias[w] - x[i];
    near(y[1][i], e, 1e-6 * fabs(e), "bias[W] - x", i);
    e = (double)x[i] * chan[b];
    near(y[2][i], e, 1e-6 * fabs(e), "x * chan[B, 1, 1]", i);
  }
  for (size_t i = 0; i < 5 * (H * W - 1); i++) {
    double e = (double)x2[i] / odd[i % (H * W - 1)];
    near(y[3][i], e, 1e-6 * fabs(e), "x2 / odd[31]", i);
  }
  onyx_values_release(in, 2);
  onyx_values_release(out, 4);
  onyx_session_release(s);
}

/* MatMul and FusedMatMul over an empty inner dim (K = 0): the product is
 * zeros, FusedMatMul's Y is then act(Bias). */
static void test_empty_inner_dim(void** state) {
  (void)state;
  gpu_required();
  OxTestModel* m = otm_new(17);
  otm_add_opset(m, "com.onyx", 1);
  otm_input(m, "x", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 0});
  otm_initializer(m, "w", ONYX_ELEM_FLOAT32, 2, (int64_t[]){0, 3}, NULL);
  otm_initializer(m, "bias", ONYX_ELEM_FLOAT32, 1, (int64_t[]){3}, (float[]){-1.0f, 0.5f, 2.0f});
  otm_output(m, "y", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_output(m, "f", ONYX_ELEM_FLOAT32, 2, (int64_t[]){2, 3});
  otm_node(m, "MatMul", "mm", "x,w", "y");
  OxTestNode* nd = otm_node(m, "FusedMatMul", "fmm", "x,w,bias", "f");
  otm_node_domain(nd, "com.onyx");
  otm_attr_string(nd, "activation", "Relu");
  OnyxSession* s = gpu_session(m, 2);
  float* got[2] = {NULL};
  const char* outs[2] = {"y", "f"};
  run1(s, NULL, (int64_t[]){2, 0}, 2, 2, outs, got);
  const float want_f[3] = {0.0f, 0.5f, 2.0f};
  for (size_t i = 0; i < 6; i++) {
    near(got[0][i], 0.0, 0.0, "MatMul", i);
    near(got[1][i], want_f[i % 3], 0.0, "FusedMatMul", i);
  }
  free(got[0]);
  free(got[1]);
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
      cmocka_unit_test(test_softmax_rows_and_columns),
      cmocka_unit_test(test_layernorm_rows),
      cmocka_unit_test(test_reductions_by_layout),
      cmocka_unit_test(test_fused_matmul_and_gelu),
      cmocka_unit_test(test_fused_matmul_node),
      cmocka_unit_test(test_elementwise_layouts),
      cmocka_unit_test(test_broadcast_cycles),
      cmocka_unit_test(test_empty_inner_dim),
  };
  return cmocka_run_group_tests_name("gpu_" GPU_NAME, tests, keep_mapped, NULL);
}
