/* cmd_partition.c — `onyx partition`: where the nodes of a model would run. */
#include "cli_util.h"

#include <stdlib.h>

static const char kPartitionHelp[] =
    "Creates a session for MODEL (a .onnx file, or a folder holding model.onnx)\n"
    "and prints how many nodes each provider took. Nothing is run.\n\n"
    "options:\n"
    "  --config FILE   provider/session configuration (JSON, docs/config.md)\n"
    "  --explain       print the full placement report instead: every node's\n"
    "                  provider, the reasons providers declined nodes, the fused\n"
    "                  groups, every copy inserted and the planned memory peak\n"
    "  --dim NAME=VALUE  fix the symbolic input dimension NAME (a dim_param such\n"
    "                  as a batch 'N') to VALUE before planning, so the memory\n"
    "                  plan sizes the values that depend on it (repeatable)\n"
    "\nexit status: 0 ok, 1 runtime error (e.g. placement failed), 2 usage error\n";

static int explain(const OnyxSession* s, CliError* e) {
  char* text = NULL;
  OnyxStatus* st = onyx_session_explain(s, &text);
  if (st) return cli_err_status(e, st, "explain failed");
  /* onyx_session_explain escapes the names in it as this command does. */
  fputs(text ? text : "", stdout);
  onyx_free(text);
  return 0;
}

int cli_cmd_partition(int argc, char** argv) {
  const char* model = NULL;
  const char* config = NULL;
  int want_explain = 0;
  CliList dim_list = {0};
  const CliOpt opts[] = {
      {"--config", CLI_OPT_STRING, &config, 0},
      {"--explain", CLI_OPT_FLAG, &want_explain, 0},
      {"--dim", CLI_OPT_LIST, &dim_list, 0},
  };
  const CliCommand cmd = {
      .name = "partition",
      .synopsis = "onyx partition MODEL [--config FILE] [--explain] [--dim NAME=VALUE ...]",
      .help = kPartitionHelp,
      .opts = opts,
      .opt_count = sizeof opts / sizeof opts[0],
      .min_positional = 1,
      .max_positional = 1,
      .positional_name = "MODEL"};
  size_t npos = 0;
  CliParse p = cli_parse(&cmd, argc, argv, &model, &npos);
  if (p != CLI_PARSED) {
    cli_list_free(&dim_list);
    return p == CLI_PARSE_HELP ? CLI_EXIT_OK : CLI_EXIT_USAGE;
  }
  CliDims dims = {0};
  char msg[512];
  int bad = cli_dims_parse(&dim_list, &dims, msg, sizeof msg);
  cli_list_free(&dim_list);
  if (bad) {
    cli_dims_free(&dims);
    return cli_usage_error(&cmd, "%s", msg);
  }

  CliError e = CLI_ERROR_INIT;
  OnyxSession* s = NULL;
  char* path = cli_model_path(model);
  const CliSessionExtra extra = {.dims = &dims};
  int rc = path ? cli_session_open_ex(path, config, 0, &extra, &s, NULL, &e)
                : cli_err(&e, "out of memory");
  /* A --dim that names no symbolic input dim of the model is a mistake here
   * (the API ignores it, for options shared by several models). */
  if (!rc) rc = cli_dims_check(&dims, s, "the model", &e);
  if (!rc && want_explain) rc = explain(s, &e);
  if (!rc && !want_explain) cli_print_placement(stdout, s);
  onyx_session_release(s);
  cli_dims_free(&dims);
  free(path);
  return rc ? cli_report("partition", &e) : CLI_EXIT_OK;
}
