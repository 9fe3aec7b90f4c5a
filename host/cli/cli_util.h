/* cli_util.h — helpers shared by the subcommands of the `onyx` command.
 *
 * The CLI is an application of libonyx: it sees only the public API
 * (onyx.h). Since applications cannot create an OnyxStatus, helpers here
 * report errors through a CliError (a message buffer) and return -1.
 */
#ifndef ONYX_CLI_UTIL_H
#define ONYX_CLI_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <onyx/onyx.h>

/* Exit statuses of every subcommand. */
enum { CLI_EXIT_OK = 0, CLI_EXIT_FAIL = 1, CLI_EXIT_USAGE = 2 };

/* --- Errors ------------------------------------------------------------------ */
/* An error message of any length, malloc'ed (NULL: none yet). Initialise with
 * CLI_ERROR_INIT; cli_report and cli_err_clear free it. */
typedef struct CliError {
  char* msg;
  int oom; /* the message itself could not be allocated */
} CliError;
#define CLI_ERROR_INIT                                                                             \
  { NULL, 0 }

/* Formats the message into e (replacing one already there); returns -1 so
 * callers can `return cli_err(...)`. */
int cli_err(CliError* e, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* "prefix: <status message>"; releases st; returns -1. */
int cli_err_status(CliError* e, OnyxStatus* st, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The message ("" when none). */
const char* cli_err_msg(const CliError* e);
void cli_err_clear(CliError* e);
/* Prints "onyx CMD: MESSAGE" (escaped, see cli_escape) to stderr, frees the
 * message and returns CLI_EXIT_FAIL. */
int cli_report(const char* cmd, CliError* e);

/* --- Escaping ------------------------------------------------------------------------ */
/* Names and messages from a model are printed escaped, so that no byte of
 * them can move the cursor, recolour the terminal or start a line of its
 * own: a backslash becomes "\\", newline, carriage return and tab "\n",
 * "\r", "\t", every other control byte (0x00-0x1f, 0x7f) and the UTF-8 C1
 * controls (U+0080-U+009F) "\xHH" per byte. Other bytes are kept. With
 * keep_newlines, '\n' itself is kept (multi-line reports). */
void cli_fputs_escaped(FILE* f, const char* s, int keep_newlines);
/* The same into a malloc'ed string; NULL when out of memory. */
char* cli_escape(const char* s, int keep_newlines);

/* --- Command-line options ----------------------------------------------------------- */
typedef enum CliOptKind {
  CLI_OPT_FLAG,   /* int*: set to 1 */
  CLI_OPT_STRING, /* const char**: last one wins */
  CLI_OPT_INT,    /* int*: a decimal integer */
  CLI_OPT_DOUBLE, /* double* */
  CLI_OPT_LIST,   /* CliList*: every occurrence appended */
} CliOptKind;

typedef struct CliList {
  const char** items; /* borrowed from argv; the array is malloc'ed */
  size_t count;
} CliList;

typedef struct CliOpt {
  const char* name; /* "--threads" */
  CliOptKind kind;
  void* dest;
  int min_int; /* CLI_OPT_INT: smallest accepted value */
} CliOpt;

typedef struct CliCommand {
  const char* name;     /* "run" */
  const char* synopsis; /* one line: "onyx run MODEL [--config FILE] ..." */
  const char* help;     /* the rest of --help */
  const CliOpt* opts;
  size_t opt_count;
  size_t min_positional, max_positional;
  const char* positional_name; /* "MODEL", for "missing MODEL" */
} CliCommand;

typedef enum CliParse { CLI_PARSED = 0, CLI_PARSE_HELP = 1, CLI_PARSE_USAGE = 2 } CliParse;

/* Parses argv (argv[0] is the subcommand's name) into the option table and
 * `positional` (which must hold max_positional entries). --help prints the
 * full help to stdout; a usage error prints a message and the synopsis to
 * stderr. Returns what happened; the caller exits 0 / 2 for the last two. */
CliParse cli_parse(const CliCommand* cmd, int argc, char** argv, const char** positional,
                   size_t* positional_count);
/* Prints "onyx CMD: message" and the synopsis to stderr; returns CLI_EXIT_USAGE. */
int cli_usage_error(const CliCommand* cmd, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
void cli_list_free(CliList* l);

/* --- Sessions ------------------------------------------------------------------------ */
/* MODEL as given on the command line: a .onnx file, or a folder holding model.onnx.
 * Returns a malloc'ed path, or NULL when out of memory. */
char* cli_model_path(const char* model);
/* Short name of a model for reports: the file name without .onnx, or the
 * folder's name when the file is model.onnx. Malloc'ed. */
char* cli_model_name(const char* model_path);
/* Creates options (config file when non-NULL, then threads when > 0) and the
 * session. *ms receives the creation time in milliseconds (may be NULL). */
int cli_session_open(const char* model_path, const char* config, int threads, OnyxSession** out,
                     double* ms, CliError* e);
/* What cli_session_open_ex adds to the options. */
typedef struct CliSessionExtra {
  /* A provider that must come first: added by name when the config does not
   * list it; refused when the config lists another provider before it. */
  const char* first_provider;
  int no_implicit_cpu; /* 1: the CPU provider is not appended */
  /* 1: first_provider is the only provider taken from the config. The config
   * is read whole (its session settings and first_provider's entry, options
   * included, stay), then its other providers and their pins are dropped and
   * first_provider becomes required; the implicit CPU follows no_implicit_cpu
   * alone (with no_implicit_cpu, first_provider runs every node or the
   * session is not created). */
  int exclusive;
  /* With exclusive: the optimizer's level is "basic" at most (the config's
   * "disabled" stays), so the session's nodes keep the model's ops instead of
   * the CPU's fused com.onyx ones: what a report of the nodes a provider left
   * should name. */
  int unfused;
  const char* profile;        /* non-NULL: write the session's profile there */
  const struct CliDims* dims; /* non-NULL: symbolic input dims to fix */
} CliSessionExtra;
int cli_session_open_ex(const char* model_path, const char* config, int threads,
                        const CliSessionExtra* extra, OnyxSession** out, double* ms, CliError* e);
/* --dim NAME=VALUE options: symbolic input dims fixed before planning
 * (onyx_session_options_set_dim_value). */
typedef struct CliDims {
  char** names;
  int64_t* values;
  size_t count;
} CliDims;
/* Parses each "NAME=VALUE" of l (VALUE a decimal integer >= 0; a name given
 * twice keeps the last value). Returns 0, or -1 with msg (of msg_size
 * bytes) saying what is wrong with which item. */
int cli_dims_parse(const CliList* l, CliDims* d, char* msg, size_t msg_size);
/* Adds one NAME=VALUE (as cli_dims_parse). */
int cli_dims_add(CliDims* d, const char* name, int64_t value);
void cli_dims_free(CliDims* d);
/* Applies the dims to options. */
OnyxStatus* cli_dims_apply(const CliDims* d, OnyxSessionOptions* o);
/* Every name of d is a symbolic dim of some input of s: otherwise an error
 * naming it and the model's symbolic dims. */
int cli_dims_check(const CliDims* d, const OnyxSession* s, const char* what, CliError* e);

/* Prints "provider NAME: N nodes" for every provider of the session. */
void cli_print_placement(FILE* f, const OnyxSession* s);

/* --- Feeds (input name/value pairs) ---------------------------------------------------- */
typedef struct CliFeeds {
  const char** names; /* borrowed from the session */
  OnyxValue** values; /* owned */
  size_t count;
} CliFeeds;

/* Room for every input of the session; count starts at 0. */
int cli_feeds_init(CliFeeds* f, const OnyxSession* s, CliError* e);
void cli_feeds_release(CliFeeds* f);
/* The feed for `name`, or NULL. */
OnyxValue* cli_feeds_find(const CliFeeds* f, const char* name);
/* Takes ownership of v (released on error too). */
int cli_feeds_add(CliFeeds* f, const char* name, OnyxValue* v, CliError* e);
/* Loads the files (TensorProtos) and matches them to the session's inputs:
 * by the tensors' names when every name is an input's name, else by position. */
int cli_feeds_load(CliFeeds* f, const OnyxSession* s, char* const* files, size_t n, CliError* e);
/* Generates every session input not fed yet, deterministically (see
 * cli_generate_tensor); prints one note per generated input to `note`. */
int cli_feeds_generate_missing(CliFeeds* f, const OnyxSession* s, FILE* note, CliError* e);
/* Deterministic input data: xorshift32 seeded by the input's index; floats
 * uniform in [-1, 1), integers in [0, 10), bools alternate, strings "s<i>".
 * Unknown or symbolic dims become 1. */
int cli_generate_tensor(OnyxElemType type, const int64_t* dims, size_t rank, size_t index,
                        OnyxValue** out, CliError* e);

/* --- Files -------------------------------------------------------------------------------- */
/* Names in `dir` of the form PREFIX<digits>SUFFIX, sorted by the number, as
 * malloc'ed "dir/name" paths. want_dir: only folders (else only files). */
int cli_list_indexed(const char* dir, const char* prefix, const char* suffix, int want_dir,
                     char*** out, size_t* count, CliError* e);
void cli_strings_free(char** s, size_t n);
/* malloc'ed "a/b". */
char* cli_path_join(const char* a, const char* b);
int cli_is_dir(const char* path);
int cli_is_file(const char* path);
/* mkdir -p. */
int cli_mkdirs(const char* path, CliError* e);

/* --- Element types and values ---------------------------------------------------------- */
typedef enum CliKind {
  CLI_KIND_NONE,    /* undefined/unknown: compared bytewise */
  CLI_KIND_FLOAT,   /* float32/64, float16, bfloat16: read as double */
  CLI_KIND_COMPLEX, /* complex64/128: pairs of float32/64 */
  CLI_KIND_SINT,
  CLI_KIND_UINT,
  CLI_KIND_BOOL,
  CLI_KIND_STRING,
  CLI_KIND_PACKED, /* float8, int4, ...: compared bytewise */
} CliKind;

CliKind cli_elem_kind(OnyxElemType t);
/* Number of scalars read from the tensor: elements, or 2x for complex. */
size_t cli_scalar_count(const OnyxTensor* t);
/* Scalar i of a FLOAT or COMPLEX tensor as a double. */
double cli_get_double(OnyxElemType t, const void* data, size_t i);
int64_t cli_get_int(OnyxElemType t, const void* data, size_t i);
uint64_t cli_get_uint(OnyxElemType t, const void* data, size_t i);
/* Writes scalar i (in the type's natural format; %g with `digits`
 * significant digits for floats) into buf. */
void cli_format_scalar(const OnyxTensor* t, size_t i, int digits, char* buf, size_t cap);
/* "[1,3,224,224]" ("[]" for scalars). */
void cli_format_dims(const int64_t* dims, size_t rank, char* buf, size_t cap);
/* A map or sequence of maps on one line (cli_values.c):
 * "seq(map(int64, float32)) of 2: [{0: 0.25, 1: 0.75}, {...}]", at most
 * max_items maps and entries per map shown. */
void cli_print_map_value(FILE* f, const OnyxValue* v, size_t max_items);
/* Compares maps as dictionaries (keys in any order, values as cli_compare
 * does) and sequences of maps map by map; 0 when they match, else 1 with a
 * reason. */
int cli_compare_map_values(const OnyxValue* expected, const OnyxValue* got, double rtol,
                           double atol, char* reason, size_t cap);

float cli_half_to_float(uint16_t h);
uint16_t cli_float_to_half(float f);
float cli_bf16_to_float(uint16_t h);
uint16_t cli_float_to_bf16(float f);

/* --- Misc ----------------------------------------------------------------------------------- */
double cli_now_ms(void); /* CLOCK_MONOTONIC */
/* Writes s as a JSON string literal (with quotes). */
void cli_json_string(FILE* f, const char* s);

/* The subcommands. argv[0] is the subcommand's name. */
int cli_cmd_run(int argc, char** argv);
int cli_cmd_partition(int argc, char** argv);
int cli_cmd_test(int argc, char** argv);
int cli_cmd_bench(int argc, char** argv);

/* Compares a produced tensor with the expected one (cli_compare.c). Returns
 * 0 when they match, else 1 with a one-line reason in `reason`. */
int cli_compare(const OnyxTensor* expected, const OnyxTensor* got, double rtol, double atol,
                char* reason, size_t cap);

#endif /* ONYX_CLI_UTIL_H */
