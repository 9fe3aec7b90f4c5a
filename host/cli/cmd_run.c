/* cmd_run.c — `onyx run`: one run of a model, its outputs printed and saved. */
#include "cli_util.h"

#include <onyx/onyx_distributed.h>
#include <stdlib.h>
#include <string.h>

enum { kShownValues = 8 };

typedef struct RunArgs {
  const char* model;
  const char* config;
  const char* output_dir;
  const char* save_optimized; /* --save-optimized FILE */
  CliList inputs;             /* NAME=FILE.pb */
  int threads;
  const char* profile;  /* --profile FILE */
  int tensor_parallel;  /* --tensor-parallel */
  OnyxProcessGroup* pg; /* with --tensor-parallel */
  int rank;             /* this process's rank: only rank 0 prints and saves */
} RunArgs;

static const char kRunHelp[] =
    "Creates a session for MODEL (a .onnx file, or a folder holding model.onnx),\n"
    "runs it once and prints how many nodes each provider took and, for each\n"
    "output, its name, element type, shape and first 8 values.\n\n"
    "options:\n"
    "  --config FILE        provider/session configuration (JSON, docs/config.md)\n"
    "  --input NAME=FILE    feed input NAME from a serialized TensorProto; repeatable.\n"
    "                       Inputs not given are generated: fixed-seed xorshift, floats\n"
    "                       in [-1,1), ints in [0,10), bools alternate, symbolic dims 1\n"
    "  --threads N          intra-op threads (default: the session's default)\n"
    "  --output-dir DIR     also write each output as DIR/NAME.pb (TensorProto; a map\n"
    "                       or sequence of maps as MapProto / SequenceProto)\n"
    "  --profile FILE       write a Chrome-trace / Perfetto profile of the session's\n"
    "                       phases and the run's nodes to FILE (docs/debugging.md)\n"
    "  --save-optimized FILE  write the graph after optimization as an ONNX model\n"
    "                       (docs/optimizer.md)\n"
    "  --tensor-parallel    shard the model's attention and MLP blocks across the\n"
    "                       ranks (mpirun -np N onyx run ...; docs/distributed.md);\n"
    "                       every rank runs the same inputs, rank 0 alone prints\n"
    "                       and writes the outputs\n"
    "\nexit status: 0 ok, 1 runtime error, 2 usage error\n";

/* A file name for an output: '/' and other awkward bytes become '_'. */
static char* output_file(const char* dir, const char* name) {
  char* safe = strdup(name[0] ? name : "output");
  if (!safe) return NULL;
  for (char* c = safe; *c; c++)
    if (*c == '/' || *c == '\\' || (unsigned char)*c < 0x20) *c = '_';
  if (!strcmp(safe, ".") || !strcmp(safe, "..")) safe[0] = '_';
  size_t n = strlen(safe);
  char* file = malloc(n + 4);
  if (file) snprintf(file, n + 4, "%s.pb", safe);
  free(safe);
  char* path = file ? cli_path_join(dir, file) : NULL;
  free(file);
  return path;
}

static void print_output(const char* name, const OnyxValue* v) {
  const OnyxTensor* t = onyx_value_tensor(v);
  printf("output ");
  cli_fputs_escaped(stdout, name, 0);
  OnyxValueKind kind = onyx_value_kind(v);
  if (!t && (kind == ONYX_VALUE_MAP || kind == ONYX_VALUE_SEQUENCE_MAP)) {
    printf(": ");
    cli_print_map_value(stdout, v, kShownValues);
    printf("\n");
    return;
  }
  if (!t) {
    printf(": (not a tensor)\n");
    return;
  }
  char shape[512], val[128];
  cli_format_dims(onyx_tensor_dims(t), onyx_tensor_rank(t), shape, sizeof shape);
  printf(": %s %s:", onyx_elem_type_name(onyx_tensor_elem_type(t)), shape);
  size_t n = cli_scalar_count(t);
  for (size_t i = 0; i < n && i < kShownValues; i++) {
    cli_format_scalar(t, i, 6, val, sizeof val);
    printf(" %s", val);
  }
  if (n > kShownValues) printf(" ... (%zu values)", n);
  printf("\n");
}

/* Feeds the --input NAME=FILE options. */
static int load_named_inputs(CliFeeds* f, const OnyxSession* s, const CliList* inputs,
                             CliError* e) {
  for (size_t i = 0; i < inputs->count; i++) {
    const char* arg = inputs->items[i];
    const char* eq = strchr(arg, '=');
    size_t len = (size_t)(eq - arg), n = onyx_session_input_count(s);
    const char* name = NULL;
    size_t at = 0;
    for (size_t k = 0; k < n && !name; k++) {
      const char* in = onyx_session_input_name(s, k);
      if (strlen(in) == len && !strncmp(in, arg, len)) name = in, at = k;
    }
    if (!name)
      return cli_err(e, "--input %s: the model has no input named '%.*s'", arg, (int)len, arg);
    OnyxValue* v = NULL;
    /* a MapProto / SequenceProto where the input is a map or a container */
    OnyxStatus* st = onyx_value_load_proto(eq + 1, onyx_session_input_kind(s, at), &v, NULL);
    if (st) return cli_err_status(e, st, "--input %s", arg);
    if (cli_feeds_add(f, name, v, e)) return -1;
  }
  return 0;
}

static int save_outputs(const char* dir, const char* const* names, OnyxValue** outs, size_t n,
                        CliError* e) {
  if (cli_mkdirs(dir, e)) return -1;
  for (size_t i = 0; i < n; i++) {
    char* path = output_file(dir, names[i]);
    if (!path) return cli_err(e, "out of memory");
    OnyxValueKind kind = onyx_value_kind(outs[i]);
    OnyxStatus* st = kind == ONYX_VALUE_MAP || kind == ONYX_VALUE_SEQUENCE_MAP
                         ? onyx_value_save_map_proto(outs[i], names[i], path)
                         : onyx_value_save_tensor_proto(outs[i], names[i], path);
    int rc = st ? cli_err_status(e, st, "cannot write %s", path) : 0;
    if (!rc) {
      fputs("note: wrote ", stderr);
      cli_fputs_escaped(stderr, path, 0);
      fputc('\n', stderr);
    }
    free(path);
    if (rc) return rc;
  }
  return 0;
}

static int run_model(OnyxSession* s, const RunArgs* a, CliError* e) {
  CliFeeds feeds = {0};
  size_t n_out = onyx_session_output_count(s);
  const char** out_names = calloc(n_out ? n_out : 1, sizeof *out_names);
  OnyxValue** outs = calloc(n_out ? n_out : 1, sizeof *outs);
  int rc = (!out_names || !outs) ? cli_err(e, "out of memory") : 0;
  if (!rc) rc = cli_feeds_init(&feeds, s, e);
  if (!rc) rc = load_named_inputs(&feeds, s, &a->inputs, e);
  if (!rc) rc = cli_feeds_generate_missing(&feeds, s, stderr, e);
  for (size_t i = 0; !rc && i < n_out; i++)
    out_names[i] = onyx_session_output_name(s, i);
  if (!rc && a->rank == 0) {
    cli_print_placement(stdout, s); /* before running: it helps to read a failed run */
    fflush(stdout);
  }
  if (!rc) {
    OnyxStatus* st = onyx_session_run(s, NULL, feeds.names, (const OnyxValue* const*)feeds.values,
                                      feeds.count, out_names, n_out, outs);
    if (st) rc = cli_err_status(e, st, "run failed");
  }
  if (!rc && a->rank == 0) {
    for (size_t i = 0; i < n_out; i++)
      print_output(out_names[i], outs[i]);
    fflush(stdout);
  }
  if (!rc && a->rank == 0 && a->output_dir)
    rc = save_outputs(a->output_dir, out_names, outs, n_out, e);
  if (outs) onyx_values_release(outs, n_out);
  free(outs);
  free(out_names);
  cli_feeds_release(&feeds);
  return rc;
}

/* cli_session_open with profiling (--profile FILE) or tensor parallelism
 * (--tensor-parallel). */
static int open_profiled(const char* model_path, const RunArgs* a, OnyxSession** out, CliError* e) {
  OnyxSessionOptions* opts = NULL;
  OnyxStatus* st = onyx_session_options_create(&opts);
  if (st) return cli_err_status(e, st, "cannot create session options");
  int rc = 0;
  if (a->config && (st = onyx_session_options_load_config(opts, a->config)))
    rc = cli_err_status(e, st, "--config %s", a->config);
  if (!rc && a->threads > 0 && (st = onyx_session_options_set_threads(opts, a->threads)))
    rc = cli_err_status(e, st, "--threads %d", a->threads);
  if (!rc && a->profile && (st = onyx_session_options_set_profile(opts, a->profile)))
    rc = cli_err_status(e, st, "--profile %s", a->profile);
  if (!rc && a->pg &&
      ((st = onyx_session_options_set_process_group(opts, a->pg)) ||
       (st = onyx_session_options_set_tensor_parallel(opts, 1))))
    rc = cli_err_status(e, st, "--tensor-parallel");
  if (!rc && (st = onyx_session_create(opts, model_path, out)))
    rc = cli_err_status(e, st, "%s", model_path);
  onyx_session_options_release(opts);
  return rc;
}

int cli_cmd_run(int argc, char** argv) {
  RunArgs a = {0};
  const CliOpt opts[] = {
      {"--config", CLI_OPT_STRING, &a.config, 0},
      {"--input", CLI_OPT_LIST, &a.inputs, 0},
      {"--threads", CLI_OPT_INT, &a.threads, 0},
      {"--output-dir", CLI_OPT_STRING, &a.output_dir, 0},
      {"--profile", CLI_OPT_STRING, &a.profile, 0},
      {"--save-optimized", CLI_OPT_STRING, &a.save_optimized, 0},
      {"--tensor-parallel", CLI_OPT_FLAG, &a.tensor_parallel, 0},
  };
  const CliCommand cmd = {
      .name = "run",
      .synopsis = "onyx run MODEL [--config FILE] [--input NAME=FILE.pb ...] "
                  "[--threads N] [--output-dir DIR] [--profile FILE] [--save-optimized FILE] "
                  "[--tensor-parallel]",
      .help = kRunHelp,
      .opts = opts,
      .opt_count = sizeof opts / sizeof opts[0],
      .min_positional = 1,
      .max_positional = 1,
      .positional_name = "MODEL"};
  size_t npos = 0;
  CliParse p = cli_parse(&cmd, argc, argv, &a.model, &npos);
  int rc = p == CLI_PARSE_HELP ? CLI_EXIT_OK : CLI_EXIT_USAGE;
  for (size_t i = 0; p == CLI_PARSED && i < a.inputs.count; i++) {
    const char* eq = strchr(a.inputs.items[i], '=');
    if (!eq || eq == a.inputs.items[i] || !eq[1]) {
      cli_usage_error(&cmd, "--input wants NAME=FILE.pb, not '%s'", a.inputs.items[i]);
      p = CLI_PARSE_USAGE;
    }
  }
  if (p != CLI_PARSED) {
    cli_list_free(&a.inputs);
    return rc;
  }
  CliError e = CLI_ERROR_INIT;
  OnyxSession* s = NULL;
  char* path = cli_model_path(a.model);
  rc = path ? 0 : cli_err(&e, "out of memory");
  if (!rc && a.tensor_parallel) {
    OnyxStatus* st = onyx_process_group_create(NULL, &a.pg);
    if (st)
      rc = cli_err_status(&e, st, "--tensor-parallel: making the process group");
    else
      a.rank = onyx_process_group_rank(a.pg);
  }
  if (!rc)
    rc = a.profile || a.pg ? open_profiled(path, &a, &s, &e)
                           : cli_session_open(path, a.config, a.threads, &s, NULL, &e);
  if (!rc && a.save_optimized && a.rank == 0) {
    OnyxStatus* st = onyx_session_save_model(s, a.save_optimized);
    if (st) rc = cli_err_status(&e, st, "--save-optimized");
  }
  if (!rc) rc = run_model(s, &a, &e);
  onyx_session_release(s);
  onyx_process_group_release(a.pg);
  free(path);
  cli_list_free(&a.inputs);
  return rc ? cli_report("run", &e) : CLI_EXIT_OK;
}
