/* cli_util.c — errors, option parsing, sessions and feeds for the `onyx` command. */
#include "cli_util.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* --- Errors ------------------------------------------------------------------ */
static char* cli_vformat(const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  char* s = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (s) vsnprintf(s, (size_t)n + 1, fmt, ap);
  return s;
}

static void cli_err_set(CliError* e, char* msg) {
  free(e->msg);
  e->msg = msg;
  e->oom = msg == NULL;
}

int cli_err(CliError* e, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char* msg = cli_vformat(fmt, ap);
  va_end(ap);
  cli_err_set(e, msg);
  return -1;
}

int cli_err_status(CliError* e, OnyxStatus* st, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char* prefix = cli_vformat(fmt, ap);
  va_end(ap);
  const char* text = onyx_status_message(st);
  if (!text) text = "";
  char* msg = prefix ? malloc(strlen(prefix) + strlen(text) + 3) : NULL;
  if (msg) sprintf(msg, "%s: %s", prefix, text);
  free(prefix);
  onyx_status_release(st);
  cli_err_set(e, msg);
  return -1;
}

const char* cli_err_msg(const CliError* e) {
  if (e->msg) return e->msg;
  return e->oom ? "out of memory (while formatting an error message)" : "";
}

void cli_err_clear(CliError* e) {
  free(e->msg);
  e->msg = NULL;
  e->oom = 0;
}

int cli_report(const char* cmd, CliError* e) {
  fprintf(stderr, "onyx %s: ", cmd);
  cli_fputs_escaped(stderr, cli_err_msg(e), 0);
  fputc('\n', stderr);
  cli_err_clear(e);
  return CLI_EXIT_FAIL;
}

/* --- Escaping ------------------------------------------------------------------------ */
/* Writes the escaped form of s into out (NULL: only counts); returns its length. */
static size_t cli_escape_to(const char* s, int keep_newlines, char* out) {
  size_t n = 0;
  for (const unsigned char* c = (const unsigned char*)s; *c; c++) {
    char esc[5] = {0};
    int c1 = c[0] == 0xc2 && c[1] >= 0x80 && c[1] <= 0x9f;
    if (*c == '\\')
      memcpy(esc, "\\\\", 2);
    else if (*c == '\n' && !keep_newlines)
      memcpy(esc, "\\n", 2);
    else if (*c == '\r')
      memcpy(esc, "\\r", 2);
    else if (*c == '\t')
      memcpy(esc, "\\t", 2);
    else if ((*c < 0x20 && *c != '\n') || *c == 0x7f || c1)
      snprintf(esc, sizeof esc, "\\x%02x", *c);
    if (esc[0]) {
      size_t k = strlen(esc);
      if (out) memcpy(out + n, esc, k);
      n += k;
      if (c1) { /* the second byte of a C1 control */
        c++;
        if (out) snprintf(out + n, 5, "\\x%02x", *c);
        n += 4;
      }
    } else {
      if (out) out[n] = (char)*c;
      n++;
    }
  }
  if (out) out[n] = '\0';
  return n;
}

char* cli_escape(const char* s, int keep_newlines) {
  if (!s) s = "";
  char* out = malloc(cli_escape_to(s, keep_newlines, NULL) + 1);
  if (out) cli_escape_to(s, keep_newlines, out);
  return out;
}

void cli_fputs_escaped(FILE* f, const char* s, int keep_newlines) {
  char* esc = cli_escape(s, keep_newlines);
  fputs(esc ? esc : "(out of memory)", f);
  free(esc);
}

/* --- Command-line options ----------------------------------------------------------- */
int cli_usage_error(const CliCommand* cmd, const char* fmt, ...) {
  va_list ap;
  fprintf(stderr, "onyx %s: ", cmd->name);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nusage: %s\n(onyx %s --help for details)\n", cmd->synopsis, cmd->name);
  return CLI_EXIT_USAGE;
}

void cli_list_free(CliList* l) {
  free(l->items);
  l->items = NULL;
  l->count = 0;
}

static int parse_int(const char* s, int* out) {
  char* end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < INT_MIN || v > INT_MAX) return -1;
  *out = (int)v;
  return 0;
}

static int parse_double(const char* s, double* out) {
  char* end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

static int list_append(CliList* l, const char* item) {
  const char** grown = realloc(l->items, (l->count + 1) * sizeof *grown);
  if (!grown) return -1;
  grown[l->count++] = item;
  l->items = grown;
  return 0;
}

/* Stores one option's value; returns 0 or a usage error (already printed). */
static int store_opt(const CliCommand* cmd, const CliOpt* o, const char* val) {
  switch (o->kind) {
  case CLI_OPT_FLAG:
    *(int*)o->dest = 1;
    return 0;
  case CLI_OPT_STRING:
    *(const char**)o->dest = val;
    return 0;
  case CLI_OPT_INT:
    if (parse_int(val, (int*)o->dest) || *(int*)o->dest < o->min_int)
      return cli_usage_error(cmd, "%s wants an integer >= %d, not '%s'", o->name, o->min_int, val);
    return 0;
  case CLI_OPT_DOUBLE:
    if (parse_double(val, (double*)o->dest) || *(double*)o->dest < 0)
      return cli_usage_error(cmd, "%s wants a non-negative number, not '%s'", o->name, val);
    return 0;
  case CLI_OPT_LIST:
    if (list_append((CliList*)o->dest, val)) {
      fprintf(stderr, "onyx %s: out of memory\n", cmd->name);
      return CLI_EXIT_USAGE;
    }
    return 0;
  }
  return 0;
}

static const CliOpt* find_opt(const CliCommand* cmd, const char* name, size_t len) {
  for (size_t i = 0; i < cmd->opt_count; i++)
    if (strlen(cmd->opts[i].name) == len && !strncmp(cmd->opts[i].name, name, len))
      return &cmd->opts[i];
  return NULL;
}

static void print_help(const CliCommand* cmd) {
  printf("usage: %s\n\n%s", cmd->synopsis, cmd->help);
}

/* One "--name[=value]" argument at argv[*i]; advances *i past its value. */
static int parse_option(const CliCommand* cmd, int argc, char** argv, int* i) {
  const char* arg = argv[*i];
  const char* eq = strchr(arg, '=');
  size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
  const CliOpt* o = find_opt(cmd, arg, len);
  if (!o) return cli_usage_error(cmd, "unknown option '%.*s'", (int)len, arg);
  if (o->kind == CLI_OPT_FLAG) {
    if (eq) return cli_usage_error(cmd, "%s takes no value", o->name);
    return store_opt(cmd, o, NULL);
  }
  if (eq) return store_opt(cmd, o, eq + 1);
  if (*i + 1 >= argc) return cli_usage_error(cmd, "%s needs a value", o->name);
  *i += 1;
  return store_opt(cmd, o, argv[*i]);
}

CliParse cli_parse(const CliCommand* cmd, int argc, char** argv, const char** positional,
                   size_t* positional_count) {
  size_t npos = 0;
  int options_done = 0;
  for (int i = 1; i < argc; i++) {
    const char* arg = argv[i];
    if (!options_done && (!strcmp(arg, "--help") || !strcmp(arg, "-h"))) {
      print_help(cmd);
      return CLI_PARSE_HELP;
    }
    if (!options_done && !strcmp(arg, "--")) {
      options_done = 1;
    } else if (!options_done && arg[0] == '-' && arg[1] != '\0') {
      if (parse_option(cmd, argc, argv, &i)) return CLI_PARSE_USAGE;
    } else {
      if (npos == cmd->max_positional) {
        cli_usage_error(cmd, "unexpected argument '%s'", arg);
        return CLI_PARSE_USAGE;
      }
      positional[npos++] = arg;
    }
  }
  if (npos < cmd->min_positional) {
    cli_usage_error(cmd, "missing %s", cmd->positional_name);
    return CLI_PARSE_USAGE;
  }
  *positional_count = npos;
  return CLI_PARSED;
}

/* --- Sessions ------------------------------------------------------------------------ */
char* cli_path_join(const char* a, const char* b) {
  size_t la = strlen(a), lb = strlen(b);
  int slash = la > 0 && a[la - 1] != '/';
  char* p = malloc(la + slash + lb + 1);
  if (!p) return NULL;
  memcpy(p, a, la);
  if (slash) p[la] = '/';
  memcpy(p + la + slash, b, lb + 1);
  return p;
}

int cli_is_dir(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int cli_is_file(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

char* cli_model_path(const char* model) {
  return cli_is_dir(model) ? cli_path_join(model, "model.onnx") : strdup(model);
}

/* The last path component of p (without trailing slashes), malloc'ed. */
static char* base_name(const char* p, size_t len) {
  while (len > 1 && p[len - 1] == '/')
    len--;
  size_t start = len;
  while (start > 0 && p[start - 1] != '/')
    start--;
  return strndup(p + start, len - start);
}

char* cli_model_name(const char* model_path) {
  char* base = base_name(model_path, strlen(model_path));
  if (!base) return NULL;
  size_t n = strlen(base);
  if (n > 5 && !strcmp(base + n - 5, ".onnx")) base[n - 5] = '\0';
  if (strcmp(base, "model")) return base;
  /* ONNX test folders: folder/model.onnx is known by the folder's name. */
  size_t dir_len = strlen(model_path);
  while (dir_len > 0 && model_path[dir_len - 1] == '/')
    dir_len--;
  while (dir_len > 0 && model_path[dir_len - 1] != '/')
    dir_len--;
  if (dir_len == 0) return base;
  char* folder = base_name(model_path, dir_len);
  if (!folder || !folder[0] || !strcmp(folder, "/") || !strcmp(folder, ".")) {
    free(folder);
    return base;
  }
  free(base);
  return folder;
}

int cli_session_open(const char* model_path, const char* config, int threads, OnyxSession** out,
                     double* ms, CliError* e) {
  return cli_session_open_ex(model_path, config, threads, NULL, out, ms, e);
}

/* The overlay that leaves `provider` alone of the config's providers: its
 * entry of "providers" (or {"name": provider}) made required, the config's
 * pins to it, "implicit_cpu" as `implicit_cpu` says and "fallback": "allow"
 * (with the implicit CPU, a node left to it is what the caller looks for);
 * with `unfused`, "session": {"optimization_level": "basic"} unless the
 * config disables the optimizer. Loaded on top of the whole config, it
 * replaces the provider list and the pins (docs/config.md). */
static int load_exclusive(OnyxSessionOptions* opts, const char* config, const char* provider,
                          int implicit_cpu, int unfused, CliError* e) {
  json_error_t jerr;
  json_t* root = config ? json_load_file(config, 0, &jerr) : json_object();
  if (!root) return cli_err(e, "--config %s: %s", config, jerr.text);
  json_t* entry = NULL;
  json_t* pins = json_array();
  size_t i;
  json_t* item;
  json_array_foreach(json_object_get(root, "providers"), i, item) {
    const char* name = json_string_value(json_object_get(item, "name"));
    if (name && !strcmp(name, provider) && !entry) entry = json_deep_copy(item);
  }
  json_array_foreach(json_object_get(root, "placement"), i, item) {
    const char* to = json_string_value(json_object_get(item, "provider"));
    if (to && !strcmp(to, provider) && pins) json_array_append(pins, item);
  }
  if (!entry) entry = json_pack("{ss}", "name", provider);
  /* An optional provider that fails to load would leave no provider at all:
   * required, its load error is the verdict. */
  if (entry) json_object_set_new(entry, "required", json_true());
  json_t* overlay = entry && pins ? json_pack("{s[O]sbsOss}", "providers", entry, "implicit_cpu",
                                              implicit_cpu, "placement", pins, "fallback", "allow")
                                  : NULL;
  const char* level =
      json_string_value(json_object_get(json_object_get(root, "session"), "optimization_level"));
  if (overlay && unfused && !(level && !strcmp(level, "disabled")))
    json_object_set_new(overlay, "session", json_pack("{ss}", "optimization_level", "basic"));
  char* text = overlay ? json_dumps(overlay, JSON_COMPACT) : NULL;
  int rc = text ? 0 : cli_err(e, "out of memory");
  OnyxStatus* st = NULL;
  if (!rc)
    st =
        onyx_session_options_load_config_text(opts, text, strlen(text), config ? config : "--only");
  if (st) rc = cli_err_status(e, st, "--provider %s --only", provider);
  free(text);
  json_decref(overlay);
  json_decref(pins);
  json_decref(entry);
  json_decref(root);
  return rc;
}

/* Applies `extra` to the options. */
static OnyxStatus* apply_extra(OnyxSessionOptions* opts, const CliSessionExtra* x) {
  OnyxStatus* st = NULL;
  if (x->first_provider && !x->exclusive) {
    st = onyx_session_options_add_provider(opts, x->first_provider, NULL, 0, 1);
    /* Listed by the config already: its entry (with its options) stays. */
    if (st && strstr(onyx_status_message(st), "is already added")) {
      onyx_status_release(st);
      st = NULL;
    }
  }
  if (!st && x->no_implicit_cpu) st = onyx_session_options_set_no_implicit_cpu(opts, 1);
  if (!st && x->profile) st = onyx_session_options_set_profile(opts, x->profile);
  if (!st && x->dims) st = cli_dims_apply(x->dims, opts);
  return st;
}

int cli_session_open_ex(const char* model_path, const char* config, int threads,
                        const CliSessionExtra* extra, OnyxSession** out, double* ms, CliError* e) {
  OnyxSessionOptions* opts = NULL;
  OnyxStatus* st = onyx_session_options_create(&opts);
  if (st) return cli_err_status(e, st, "cannot create session options");
  if (config && (st = onyx_session_options_load_config(opts, config))) {
    onyx_session_options_release(opts);
    if (strstr(onyx_status_message(st), config)) return cli_err_status(e, st, "--config");
    return cli_err_status(e, st, "--config %s", config);
  }
  if (threads > 0 && (st = onyx_session_options_set_threads(opts, threads))) {
    onyx_session_options_release(opts);
    return cli_err_status(e, st, "--threads %d", threads);
  }
  if (extra && extra->exclusive && extra->first_provider &&
      load_exclusive(opts, config, extra->first_provider, !extra->no_implicit_cpu, extra->unfused,
                     e)) {
    onyx_session_options_release(opts);
    return -1;
  }
  if (extra && (st = apply_extra(opts, extra))) {
    onyx_session_options_release(opts);
    return cli_err_status(e, st, "--provider %s",
                          extra->first_provider ? extra->first_provider : "");
  }
  double t0 = cli_now_ms();
  st = onyx_session_create(opts, model_path, out);
  if (ms) *ms = cli_now_ms() - t0;
  onyx_session_options_release(opts);
  if (!st && extra && extra->first_provider && onyx_session_provider_count(*out) > 0 &&
      strcmp(onyx_session_provider_name(*out, 0), extra->first_provider)) {
    int rc =
        cli_err(e, "--provider %s: the config lists provider '%s' before it; list '%s' first",
                extra->first_provider, onyx_session_provider_name(*out, 0), extra->first_provider);
    onyx_session_release(*out);
    *out = NULL;
    return rc;
  }
  if (!st) return 0;
  /* Load errors usually name the model already; say it only when they do not. */
  if (strstr(onyx_status_message(st), model_path)) {
    cli_err(e, "%s", onyx_status_message(st));
    onyx_status_release(st);
    return -1;
  }
  return cli_err_status(e, st, "%s", model_path);
}

/* --- Symbolic dims (--dim NAME=VALUE) ------------------------------------------------------ */
int cli_dims_add(CliDims* d, const char* name, int64_t value) {
  for (size_t i = 0; i < d->count; i++)
    if (!strcmp(d->names[i], name)) {
      d->values[i] = value;
      return 0;
    }
  char** names = realloc(d->names, (d->count + 1) * sizeof *names);
  if (!names) return -1;
  d->names = names;
  int64_t* values = realloc(d->values, (d->count + 1) * sizeof *values);
  if (!values) return -1;
  d->values = values;
  if (!(d->names[d->count] = strdup(name))) return -1;
  d->values[d->count++] = value;
  return 0;
}

int cli_dims_parse(const CliList* l, CliDims* d, char* msg, size_t msg_size) {
  for (size_t i = 0; i < l->count; i++) {
    const char* item = l->items[i];
    const char* eq = strchr(item, '=');
    if (!eq || eq == item) {
      snprintf(msg, msg_size, "--dim '%s': expected NAME=VALUE (a symbolic input dim and its size)",
               item);
      return -1;
    }
    const char* v = eq + 1;
    char* end = NULL;
    errno = 0;
    long long value = *v >= '0' && *v <= '9' ? strtoll(v, &end, 10) : -1;
    if (value < 0 || errno || !end || *end) {
      snprintf(msg, msg_size, "--dim '%s': the value must be an integer >= 0", item);
      return -1;
    }
    char* name = strndup(item, (size_t)(eq - item));
    int rc = name ? cli_dims_add(d, name, (int64_t)value) : -1;
    free(name);
    if (rc) {
      snprintf(msg, msg_size, "out of memory");
      return -1;
    }
  }
  return 0;
}

void cli_dims_free(CliDims* d) {
  for (size_t i = 0; i < d->count; i++)
    free(d->names[i]);
  free(d->names);
  free(d->values);
  memset(d, 0, sizeof *d);
}

OnyxStatus* cli_dims_apply(const CliDims* d, OnyxSessionOptions* o) {
  OnyxStatus* st = NULL;
  for (size_t i = 0; !st && i < d->count; i++)
    st = onyx_session_options_set_dim_value(o, d->names[i], d->values[i]);
  return st;
}

int cli_dims_check(const CliDims* d, const OnyxSession* s, const char* what, CliError* e) {
  size_t n_in = onyx_session_input_count(s);
  for (size_t i = 0; i < d->count; i++) {
    int found = 0;
    for (size_t k = 0; k < n_in && !found; k++) {
      int32_t rank = -1;
      OnyxStatus* st = onyx_session_input_info(s, k, NULL, &rank, NULL);
      onyx_status_release(st);
      for (int32_t j = 0; j < rank && !found; j++) {
        const char* p = onyx_session_input_dim_param(s, k, (size_t)j);
        found = p && !strcmp(p, d->names[i]);
      }
    }
    if (found) continue;
    /* The model's symbolic dims, each once, for the message. */
    char list[512] = "";
    size_t at = 0;
    for (size_t k = 0; k < n_in; k++) {
      int32_t rank = -1;
      OnyxStatus* st = onyx_session_input_info(s, k, NULL, &rank, NULL);
      onyx_status_release(st);
      for (int32_t j = 0; j < rank; j++) {
        const char* p = onyx_session_input_dim_param(s, k, (size_t)j);
        if (!p) continue;
        char quoted[160];
        snprintf(quoted, sizeof quoted, "'%.150s'", p);
        if (strstr(list, quoted) || at + strlen(quoted) + 3 >= sizeof list) continue;
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", at ? ", " : "", quoted);
      }
    }
    return cli_err(e,
                   "--dim %s: no input of %s has a symbolic dimension named '%s' (its symbolic "
                   "dimensions: %s)",
                   d->names[i], what, d->names[i], at ? list : "none");
  }
  return 0;
}

void cli_print_placement(FILE* f, const OnyxSession* s) {
  size_t n = onyx_session_provider_count(s);
  for (size_t i = 0; i < n; i++) {
    size_t nodes = onyx_session_provider_node_count(s, i);
    fputs("provider ", f);
    cli_fputs_escaped(f, onyx_session_provider_name(s, i), 0);
    fprintf(f, ": %zu node%s\n", nodes, nodes == 1 ? "" : "s");
  }
}

/* --- Feeds ---------------------------------------------------------------------------------- */
int cli_feeds_init(CliFeeds* f, const OnyxSession* s, CliError* e) {
  size_t n = onyx_session_input_count(s);
  f->count = 0;
  f->names = calloc(n ? n : 1, sizeof *f->names);
  f->values = calloc(n ? n : 1, sizeof *f->values);
  if (!f->names || !f->values) {
    cli_feeds_release(f);
    return cli_err(e, "out of memory");
  }
  return 0;
}

void cli_feeds_release(CliFeeds* f) {
  if (f->values) onyx_values_release(f->values, f->count);
  free(f->values);
  free(f->names);
  f->values = NULL;
  f->names = NULL;
  f->count = 0;
}

OnyxValue* cli_feeds_find(const CliFeeds* f, const char* name) {
  for (size_t i = 0; i < f->count; i++)
    if (!strcmp(f->names[i], name)) return f->values[i];
  return NULL;
}

/* The session's own copy of an input name, or NULL when the model has none. */
static const char* session_input(const OnyxSession* s, const char* name, size_t* index) {
  size_t n = onyx_session_input_count(s);
  for (size_t i = 0; i < n; i++) {
    const char* in = onyx_session_input_name(s, i);
    if (!strcmp(in, name)) {
      if (index) *index = i;
      return in;
    }
  }
  return NULL;
}

int cli_feeds_add(CliFeeds* f, const char* name, OnyxValue* v, CliError* e) {
  if (cli_feeds_find(f, name)) {
    onyx_value_release(v);
    return cli_err(e, "input %s is given twice", name);
  }
  /* cli_feeds_init made room for every input, and names are checked unique. */
  f->names[f->count] = name;
  f->values[f->count++] = v;
  return 0;
}

static void free_names(char** names, size_t n) {
  for (size_t i = 0; i < n; i++)
    onyx_free(names[i]);
  free(names);
}

static int all_names_match(const OnyxSession* s, char** names, size_t n) {
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++)
    if (!names[i] || !session_input(s, names[i], NULL)) return 0;
  return 1;
}

int cli_feeds_load(CliFeeds* f, const OnyxSession* s, char* const* files, size_t n, CliError* e) {
  size_t inputs = onyx_session_input_count(s);
  if (n > inputs) return cli_err(e, "%zu input files for %zu model inputs", n, inputs);
  OnyxValue** vals = calloc(n ? n : 1, sizeof *vals);
  char** names = calloc(n ? n : 1, sizeof *names);
  int rc = 0;
  if (!vals || !names) rc = cli_err(e, "out of memory");
  for (size_t i = 0; i < n && !rc; i++) {
    OnyxStatus* st = onyx_value_load_tensor_proto(files[i], &vals[i], &names[i]);
    const char* slash = strrchr(files[i], '/');
    if (st) rc = cli_err_status(e, st, "cannot read %s", slash ? slash + 1 : files[i]);
  }
  int by_name = !rc && all_names_match(s, names, n);
  for (size_t i = 0; i < n && !rc; i++) {
    const char* name = by_name ? session_input(s, names[i], NULL) : onyx_session_input_name(s, i);
    rc = cli_feeds_add(f, name, vals[i], e);
    vals[i] = NULL;
  }
  if (vals) onyx_values_release(vals, n);
  free(vals);
  if (names) free_names(names, n);
  return rc;
}

static const char* const kGeneratedNote = "fixed seed; floats in [-1,1), ints in [0,10)";

int cli_feeds_generate_missing(CliFeeds* f, const OnyxSession* s, FILE* note, CliError* e) {
  size_t n = onyx_session_input_count(s);
  for (size_t i = 0; i < n; i++) {
    const char* name = onyx_session_input_name(s, i);
    if (cli_feeds_find(f, name)) continue;
    OnyxElemType type = ONYX_ELEM_UNDEFINED;
    int32_t rank = -1;
    const int64_t* dims = NULL;
    OnyxStatus* st = onyx_session_input_info(s, i, &type, &rank, &dims);
    if (st) return cli_err_status(e, st, "input %s", name);
    if (rank < 0)
      return cli_err(e, "input %s has no declared shape; give it with --input %s=FILE.pb", name,
                     name);
    OnyxValue* v = NULL;
    if (cli_generate_tensor(type, dims, (size_t)rank, i, &v, e)) return -1;
    char shape[256];
    const OnyxTensor* t = onyx_value_tensor(v);
    cli_format_dims(onyx_tensor_dims(t), onyx_tensor_rank(t), shape, sizeof shape);
    if (note) {
      fputs("note: input ", note);
      cli_fputs_escaped(note, name, 0);
      fprintf(note, " not given: generated %s %s (%s)\n", onyx_elem_type_name(type), shape,
              kGeneratedNote);
    }
    if (cli_feeds_add(f, name, v, e)) return -1;
  }
  return 0;
}

/* --- Generated data ------------------------------------------------------------------ */
/* xorshift32 with the seed of the peer harness (bench/peer/lib.js), so that
 * generated float inputs equal the ones ONNX Runtime is timed with. */
static uint32_t xorshift_seed(size_t index) {
  return 0x9e3779b9u ^ (uint32_t)((uint32_t)(index + 1) * 0x85ebca6bu);
}

static uint32_t xorshift_next(uint32_t* s) {
  uint32_t x = *s;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  *s = x;
  return x;
}

static double uniform(uint32_t* s) {
  return (double)xorshift_next(s) / 4294967296.0 * 2.0 - 1.0;
}

/* Fills element i of a numeric tensor. */
static void generate_scalar(OnyxElemType t, void* data, size_t i, uint32_t* s) {
  switch (t) {
  case ONYX_ELEM_FLOAT32:
    ((float*)data)[i] = (float)uniform(s);
    return;
  case ONYX_ELEM_FLOAT64:
    ((double*)data)[i] = uniform(s);
    return;
  case ONYX_ELEM_FLOAT16:
    ((uint16_t*)data)[i] = cli_float_to_half((float)uniform(s));
    return;
  case ONYX_ELEM_BFLOAT16:
    ((uint16_t*)data)[i] = cli_float_to_bf16((float)uniform(s));
    return;
  case ONYX_ELEM_BOOL:
    ((uint8_t*)data)[i] = (uint8_t)(i & 1);
    return;
  default:
    break;
  }
  uint32_t v = xorshift_next(s) % 10;
  switch (onyx_elem_type_size(t)) {
  case 1:
    ((uint8_t*)data)[i] = (uint8_t)v;
    return;
  case 2:
    ((uint16_t*)data)[i] = (uint16_t)v;
    return;
  case 4:
    ((uint32_t*)data)[i] = v;
    return;
  case 8:
    ((uint64_t*)data)[i] = v;
    return;
  default:
    return;
  }
}

static int generate_strings(const int64_t* dims, size_t rank, size_t n, OnyxValue** out,
                            CliError* e) {
  char** strs = calloc(n ? n : 1, sizeof *strs);
  int rc = strs ? 0 : cli_err(e, "out of memory");
  for (size_t i = 0; i < n && !rc; i++) {
    char buf[32];
    snprintf(buf, sizeof buf, "s%zu", i);
    if (!(strs[i] = strdup(buf))) rc = cli_err(e, "out of memory");
  }
  OnyxStatus* st = NULL;
  if (!rc) st = onyx_value_create_tensor(ONYX_ELEM_STRING, dims, rank, strs, n * sizeof *strs, out);
  if (st) rc = cli_err_status(e, st, "cannot create a string tensor");
  for (size_t i = 0; strs && i < n; i++)
    free(strs[i]);
  free(strs);
  return rc;
}

int cli_generate_tensor(OnyxElemType type, const int64_t* dims, size_t rank, size_t index,
                        OnyxValue** out, CliError* e) {
  int64_t shape[64];
  if (rank > 64) return cli_err(e, "rank %zu is too large to generate", rank);
  size_t n = 1;
  for (size_t d = 0; d < rank; d++) {
    shape[d] = dims[d] >= 0 ? dims[d] : 1; /* symbolic dims -> 1 */
    n *= (size_t)shape[d];
  }
  CliKind kind = cli_elem_kind(type);
  if (kind == CLI_KIND_STRING) return generate_strings(shape, rank, n, out, e);
  size_t size = onyx_elem_type_size(type);
  if (kind == CLI_KIND_NONE || kind == CLI_KIND_PACKED || kind == CLI_KIND_COMPLEX || size == 0)
    return cli_err(e, "cannot generate %s data; give the input with --input",
                   onyx_elem_type_name(type));
  void* data = calloc(n ? n : 1, size);
  if (!data) return cli_err(e, "out of memory");
  uint32_t s = xorshift_seed(index);
  for (size_t i = 0; i < n; i++)
    generate_scalar(type, data, i, &s);
  OnyxStatus* st = onyx_value_create_tensor(type, shape, rank, data, n * size, out);
  free(data);
  if (st) return cli_err_status(e, st, "cannot create a %s tensor", onyx_elem_type_name(type));
  return 0;
}

/* --- Files -------------------------------------------------------------------------------- */
void cli_strings_free(char** s, size_t n) {
  for (size_t i = 0; s && i < n; i++)
    free(s[i]);
  free(s);
}

/* The number of a name PREFIX<digits>SUFFIX, or -1. */
static long indexed_number(const char* name, const char* prefix, const char* suffix) {
  size_t lp = strlen(prefix), ls = strlen(suffix), ln = strlen(name);
  if (ln <= lp + ls || strncmp(name, prefix, lp) || strcmp(name + ln - ls, suffix)) return -1;
  long v = 0;
  for (size_t i = lp; i < ln - ls; i++) {
    if (name[i] < '0' || name[i] > '9' || v > 100000000) return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

typedef struct Indexed {
  long number;
  char* path;
} Indexed;

static int by_number(const void* a, const void* b) {
  long x = ((const Indexed*)a)->number, y = ((const Indexed*)b)->number;
  return (x > y) - (x < y);
}

int cli_list_indexed(const char* dir, const char* prefix, const char* suffix, int want_dir,
                     char*** out, size_t* count, CliError* e) {
  *out = NULL;
  *count = 0;
  DIR* d = opendir(dir);
  if (!d) return cli_err(e, "cannot open %s: %s", dir, strerror(errno));
  Indexed* items = NULL;
  size_t n = 0;
  int rc = 0;
  for (struct dirent* ent; !rc && (ent = readdir(d));) {
    long number = indexed_number(ent->d_name, prefix, suffix);
    if (number < 0) continue;
    char* path = cli_path_join(dir, ent->d_name);
    Indexed* grown = path ? realloc(items, (n + 1) * sizeof *items) : NULL;
    if (!grown) {
      free(path);
      rc = cli_err(e, "out of memory");
      break;
    }
    items = grown;
    if (want_dir ? cli_is_dir(path) : cli_is_file(path))
      items[n++] = (Indexed){number, path};
    else
      free(path);
  }
  closedir(d);
  char** paths = rc ? NULL : calloc(n ? n : 1, sizeof *paths);
  if (!rc && !paths) rc = cli_err(e, "out of memory");
  if (!rc && n) qsort(items, n, sizeof *items, by_number);
  for (size_t i = 0; i < n; i++) {
    if (paths)
      paths[i] = items[i].path;
    else
      free(items[i].path);
  }
  free(items);
  if (rc) return rc;
  *out = paths;
  *count = n;
  return 0;
}

int cli_mkdirs(const char* path, CliError* e) {
  char* p = strdup(path);
  if (!p) return cli_err(e, "out of memory");
  for (char* c = p + 1;; c++) {
    if (*c != '/' && *c != '\0') continue;
    char saved = *c;
    *c = '\0';
    if (mkdir(p, 0777) && errno != EEXIST) {
      cli_err(e, "cannot create %s: %s", p, strerror(errno));
      free(p);
      return -1;
    }
    *c = saved;
    if (!saved) break;
  }
  free(p);
  if (!cli_is_dir(path)) return cli_err(e, "%s exists and is not a folder", path);
  return 0;
}

/* --- Misc --------------------------------------------------------------------------------- */
double cli_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void cli_json_string(FILE* f, const char* s) {
  fputc('"', f);
  for (const unsigned char* c = (const unsigned char*)s; *c; c++) {
    if (*c == '"' || *c == '\\')
      fprintf(f, "\\%c", *c);
    else if (*c < 0x20)
      fprintf(f, "\\u%04x", *c);
    else
      fputc(*c, f);
  }
  fputc('"', f);
}
