/* main.c — the `onyx` command: dispatches to one subcommand per file. */
#include "cli_util.h"

#include <string.h>

/* cmd_devices.c (cli_util.h declares the other commands). */
int cli_cmd_devices(int argc, char** argv);
/* cmd_train.c. */
int cli_cmd_train(int argc, char** argv);

typedef struct Subcommand {
  const char* name;
  int (*main)(int argc, char** argv);
  const char* summary;
} Subcommand;

static const Subcommand kSubcommands[] = {
    {"run", cli_cmd_run, "run a model once and print its outputs"},
    {"partition", cli_cmd_partition, "show which provider runs which nodes"},
    {"test", cli_cmd_test, "run ONNX backend test folders and compare outputs"},
    {"bench", cli_cmd_bench, "time a model's runs (one JSON line)"},
    {"train", cli_cmd_train, "train a model on .npy data (training API)"},
    {"devices", cli_cmd_devices, "list provider libraries and the devices they see"},
};
enum { kSubcommandCount = sizeof kSubcommands / sizeof kSubcommands[0] };

static void print_usage(FILE* f) {
  fprintf(f, "usage: onyx <command> [options]\n       onyx --help | --version\n\ncommands:\n");
  for (size_t i = 0; i < kSubcommandCount; i++)
    fprintf(f, "  %-10s %s\n", kSubcommands[i].name, kSubcommands[i].summary);
  fprintf(f, "\n'onyx <command> --help' describes a command's options.\n"
             "Exit status: 0 success, 1 runtime error (or failed tests), 2 usage error.\n");
}

static const Subcommand* find_subcommand(const char* name) {
  for (size_t i = 0; i < kSubcommandCount; i++)
    if (!strcmp(kSubcommands[i].name, name)) return &kSubcommands[i];
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return CLI_EXIT_USAGE;
  }
  const char* first = argv[1];
  if (!strcmp(first, "--help") || !strcmp(first, "-h")) {
    print_usage(stdout);
    return CLI_EXIT_OK;
  }
  if (!strcmp(first, "--version")) {
    printf("onyx %s\n", onyx_version_string());
    return CLI_EXIT_OK;
  }
  /* `onyx help CMD` is `onyx CMD --help`. */
  if (!strcmp(first, "help") && argc == 3 && find_subcommand(argv[2])) {
    char* help_argv[] = {argv[2], "--help", NULL};
    return find_subcommand(argv[2])->main(2, help_argv);
  }
  const Subcommand* sub = find_subcommand(first);
  if (!sub) {
    fprintf(stderr, "onyx: unknown command '%s'\n\n", first);
    print_usage(stderr);
    return CLI_EXIT_USAGE;
  }
  return sub->main(argc - 1, argv + 1);
}
