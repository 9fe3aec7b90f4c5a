/* cmd_bench.c — `onyx bench`: times a model's runs, one JSON line on stdout,
 * with the keys and statistics of the peer harness (bench/peer/ort_run.js). */
#include "cli_util.h"

#include <stdlib.h>
#include <string.h>

typedef struct BenchArgs {
  const char* model;
  const char* config;
  const char* inputs;
  const char* io; /* "host" or "device" */
  int threads, iters, warmup, serve;
} BenchArgs;

static const char kBenchHelp[] =
    "Creates a session for MODEL (a .onnx file, or a folder holding model.onnx),\n"
    "runs it W times untimed, then K times timed (CLOCK_MONOTONIC around each\n"
    "onyx_session_run), and prints one JSON line:\n"
    "  {\"model\":NAME,\"threads\":N,\"iters\":K,\"min_ms\":..,\"median_ms\":..,\"p90_ms\":..,\n"
    "   \"mean_ms\":..,\"warmup\":W,\"session_ms\":..,\"inputs\":{NAME:\"TYPE[DIMS]\",..},\n"
    "   \"io\":\"host\"|\"device\"}\n"
    "NAME is the file name without .onnx, or the folder's name for model.onnx.\n\n"
    "options:\n"
    "  --config FILE   provider/session configuration (JSON, docs/config.md)\n"
    "  --inputs DIR    a test_data_set folder: its input_K.pb feed the model (by\n"
    "                  tensor name when all match, else by position). Without it,\n"
    "                  inputs are generated as by 'onyx run'\n"
    "  --threads N     intra-op threads (default 1, as the peer harness)\n"
    "  --iters K       timed runs (default 100)\n"
    "  --warmup W      untimed runs first (default 10)\n"
    "  --io host|device  host (default): each run feeds host tensors and returns\n"
    "                  its outputs in host memory, so a GPU session's time includes\n"
    "                  the copies to and from the device. device: every input is\n"
    "                  copied once, before the runs, into the memory its consumers\n"
    "                  read it in, and every output is bound to the memory of the\n"
    "                  provider that produces it (IO binding); the runs\n"
    "                  (onyx_session_run_with_binding) then copy nothing between\n"
    "                  host and device. Every run still ends synchronized (the\n"
    "                  host waits for every provider's stream before it returns)\n"
    "  --serve         after the warmup, print 'ready' and then run once per line\n"
    "                  read from stdin, printing that run's ms (one line each)\n"
    "                  until end of input; --iters is unused. For harnesses that\n"
    "                  interleave runtimes run by run (bench/pair.js)\n"
    "\nexit status: 0 ok, 1 runtime error, 2 usage error\n";

static int by_value(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Quantile with linear interpolation between the closest ranks (as numpy and ort_run.js). */
static double quantile(const double* sorted, size_t n, double q) {
  double pos = (double)(n - 1) * q;
  size_t lo = (size_t)pos, hi = lo + 1 < n ? lo + 1 : lo;
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - (double)lo);
}

static int load_feeds(CliFeeds* f, const OnyxSession* s, const char* dir, CliError* e) {
  if (cli_feeds_init(f, s, e)) return -1;
  if (!dir) return cli_feeds_generate_missing(f, s, stderr, e);
  char** files = NULL;
  size_t n = 0;
  if (cli_list_indexed(dir, "input_", ".pb", 0, &files, &n, e)) return -1;
  int rc = cli_feeds_load(f, s, files, n, e);
  cli_strings_free(files, n);
  return rc;
}

/* What a timed run needs: the feeds and output names for onyx_session_run
 * (--io host), or an IO binding (--io device). */
typedef struct Runner {
  OnyxSession* s;
  const CliFeeds* feeds;
  const char** names;
  OnyxValue** outs;
  size_t n_out;
  OnyxIoBinding* binding;
} Runner;

/* One run; *ms receives its duration. Outputs are released outside the timing. */
static int timed_run(const Runner* r, double* ms, CliError* e) {
  double t0 = cli_now_ms();
  OnyxStatus* st = r->binding ? onyx_session_run_with_binding(r->s, NULL, r->binding)
                              : onyx_session_run(r->s, NULL, r->feeds->names,
                                                 (const OnyxValue* const*)r->feeds->values,
                                                 r->feeds->count, r->names, r->n_out, r->outs);
  *ms = cli_now_ms() - t0;
  if (st) return cli_err_status(e, st, "run failed");
  if (!r->binding) onyx_values_release(r->outs, r->n_out);
  return 0;
}

/* --io device: every input copied once into the memory its consumers read
 * it in, every output bound to the memory its producer writes. */
static int bind_device(Runner* r, CliError* e) {
  OnyxStatus* st = onyx_io_binding_create(r->s, &r->binding);
  if (st) return cli_err_status(e, st, "creating the IO binding");
  for (size_t i = 0; i < r->feeds->count; i++) {
    const char* name = r->feeds->names[i];
    size_t k = 0; /* the input's index, for onyx_session_input_memory */
    while (k < onyx_session_input_count(r->s) && strcmp(onyx_session_input_name(r->s, k), name))
      k++;
    OnyxMemoryDevice m;
    st = onyx_session_input_memory(r->s, k, &m);
    if (st) {
      /* Read in several memories: bound in host memory, the run copies it
       * to the device consumers' memory. */
      fprintf(stderr, "note: %s; bound in host memory, copied at each run\n",
              onyx_status_message(st));
      onyx_status_release(st);
      st = onyx_io_binding_bind_input(r->binding, name, r->feeds->values[i]);
    } else {
      st = onyx_io_binding_bind_input_to_device(r->binding, name, r->feeds->values[i], &m);
    }
    if (st) return cli_err_status(e, st, "binding input '%s'", name);
  }
  for (size_t i = 0; i < r->n_out; i++) {
    OnyxMemoryDevice m;
    st = onyx_session_output_memory(r->s, i, &m);
    if (!st)
      st = onyx_io_binding_bind_output_to_device(r->binding, r->names[i],
                                                 m.kind == ONYX_DEVICE_CPU ? NULL : &m);
    if (st) return cli_err_status(e, st, "binding output '%s' to its device", r->names[i]);
  }
  return 0;
}

static void print_inputs(const CliFeeds* f) {
  printf("\"inputs\":{");
  for (size_t i = 0; i < f->count; i++) {
    const OnyxTensor* t = onyx_value_tensor(f->values[i]);
    char desc[600], dims[512] = "[]";
    if (t) cli_format_dims(onyx_tensor_dims(t), onyx_tensor_rank(t), dims, sizeof dims);
    snprintf(desc, sizeof desc, "%s%s", t ? onyx_elem_type_name(onyx_tensor_elem_type(t)) : "?",
             dims);
    printf("%s", i ? "," : "");
    cli_json_string(stdout, f->names[i]);
    printf(":");
    cli_json_string(stdout, desc);
  }
  printf("}");
}

static void print_result(const BenchArgs* a, const char* name, double* times, double session_ms,
                         const CliFeeds* f) {
  size_t n = (size_t)a->iters;
  double sum = 0;
  for (size_t i = 0; i < n; i++)
    sum += times[i];
  qsort(times, n, sizeof *times, by_value);
  printf("{\"model\":");
  cli_json_string(stdout, name);
  printf(",\"threads\":%d,\"iters\":%d,\"min_ms\":%.3f,\"median_ms\":%.3f,\"p90_ms\":"
         "%.3f,"
         "\"mean_ms\":%.3f,\"warmup\":%d,\"session_ms\":%.3f,",
         a->threads, a->iters, times[0], quantile(times, n, 0.5), quantile(times, n, 0.9),
         sum / (double)n, a->warmup, session_ms);
  print_inputs(f);
  printf(",\"io\":\"%s\"}\n", a->io);
}

/* --serve: one timed run per line of stdin (its content is ignored), each
 * answered with the run's ms on a line of its own, flushed at once. */
static int serve(const Runner* r, CliError* e) {
  printf("ready\n");
  fflush(stdout);
  char line[256];
  while (fgets(line, sizeof line, stdin)) {
    double ms = 0;
    if (timed_run(r, &ms, e)) return -1;
    printf("%.3f\n", ms);
    fflush(stdout);
  }
  return 0;
}

static int bench(OnyxSession* s, const BenchArgs* a, const char* name, double session_ms,
                 CliError* e) {
  CliFeeds feeds = {0};
  size_t n_out = onyx_session_output_count(s);
  Runner r = {.s = s, .feeds = &feeds, .n_out = n_out};
  r.names = calloc(n_out ? n_out : 1, sizeof *r.names);
  r.outs = calloc(n_out ? n_out : 1, sizeof *r.outs);
  double* times = calloc((size_t)a->iters, sizeof *times);
  int rc = (!r.names || !r.outs || !times) ? cli_err(e, "out of memory") : 0;
  for (size_t i = 0; !rc && i < n_out; i++)
    r.names[i] = onyx_session_output_name(s, i);
  if (!rc) rc = load_feeds(&feeds, s, a->inputs, e);
  if (!rc && !strcmp(a->io, "device")) rc = bind_device(&r, e);
  double ms = 0;
  for (int i = 0; !rc && i < a->warmup; i++)
    rc = timed_run(&r, &ms, e);
  if (a->serve) {
    if (!rc) rc = serve(&r, e);
  } else {
    for (int i = 0; !rc && i < a->iters; i++)
      rc = timed_run(&r, &times[i], e);
    if (!rc) print_result(a, name, times, session_ms, &feeds);
  }
  onyx_io_binding_release(r.binding);
  cli_feeds_release(&feeds);
  free(times);
  free(r.outs);
  free(r.names);
  return rc;
}

int cli_cmd_bench(int argc, char** argv) {
  BenchArgs a = {.threads = 1, .iters = 100, .warmup = 10, .io = "host"};
  const CliOpt opts[] = {
      {"--config", CLI_OPT_STRING, &a.config, 0}, {"--inputs", CLI_OPT_STRING, &a.inputs, 0},
      {"--threads", CLI_OPT_INT, &a.threads, 1},  {"--iters", CLI_OPT_INT, &a.iters, 1},
      {"--warmup", CLI_OPT_INT, &a.warmup, 0},    {"--serve", CLI_OPT_FLAG, &a.serve, 0},
      {"--io", CLI_OPT_STRING, &a.io, 0},
  };
  const CliCommand cmd = {.name = "bench",
                          .synopsis =
                              "onyx bench MODEL [--config FILE] [--inputs DIR] [--threads N] "
                              "[--iters K] [--warmup W] [--io host|device] [--serve]",
                          .help = kBenchHelp,
                          .opts = opts,
                          .opt_count = sizeof opts / sizeof opts[0],
                          .min_positional = 1,
                          .max_positional = 1,
                          .positional_name = "MODEL"};
  size_t npos = 0;
  CliParse p = cli_parse(&cmd, argc, argv, &a.model, &npos);
  if (p != CLI_PARSED) return p == CLI_PARSE_HELP ? CLI_EXIT_OK : CLI_EXIT_USAGE;
  if (strcmp(a.io, "host") && strcmp(a.io, "device"))
    return cli_usage_error(&cmd, "--io: expected 'host' or 'device', got '%s'", a.io);

  CliError e = CLI_ERROR_INIT;
  OnyxSession* s = NULL;
  double session_ms = 0;
  char* path = cli_model_path(a.model);
  char* name = path ? cli_model_name(path) : NULL;
  int rc = name ? 0 : cli_err(&e, "out of memory");
  if (!rc) rc = cli_session_open(path, a.config, a.threads, &s, &session_ms, &e);
  if (!rc) rc = bench(s, &a, name, session_ms, &e);
  onyx_session_release(s);
  free(name);
  free(path);
  return rc ? cli_report("bench", &e) : CLI_EXIT_OK;
}
