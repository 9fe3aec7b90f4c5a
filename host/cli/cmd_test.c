/* cmd_test.c — `onyx test`: runs ONNX backend test folders, each in a forked
 * child with a timeout, and writes one verdict per test in the format of the
 * ONNX Runtime peer harness (bench/peer/node_suite.js). */
#include "cli_util.h"

#include <dirent.h>
#include <jansson.h>
#include <stdbool.h>
#include <errno.h>
#include <poll.h>
#include <regex.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { kReasonMax = 300, kVerdictMax = 1024 };

typedef struct TestArgs {
  const char* dir;
  const char* config;
  const char* verdicts;
  const char* filter;
  const char* provider; /* --provider: first claim */
  const char* coverage; /* --coverage FILE */
  double timeout_s, rtol, atol;
  int jobs, threads;
  int only, strict, patterns;
  char* scratch; /* temp folder for the children's node lists (--coverage) */
} TestArgs;

static const char kTestHelp[] =
    "Runs every immediate sub-folder of DIR that holds model.onnx and\n"
    "test_data_set_N/{input_K.pb,output_K.pb} (the ONNX backend test layout),\n"
    "in name order, each in a forked child with a timeout, and compares the\n"
    "outputs with the expected ones.\n\n"
    "options:\n"
    "  --patterns        instead of DIR, the pattern suite installed with onyx\n"
    "                    (share/onyx/patterns: the subgraphs providers fuse)\n"
    "  --config FILE     provider/session configuration (JSON, docs/config.md)\n"
    "  --verdicts FILE   also write the verdicts to FILE\n"
    "  --filter REGEX    only tests whose folder name matches (POSIX extended)\n"
    "  --timeout-s N     seconds per test before it is killed (default 120)\n"
    "  --jobs N          tests run at once (default 1)\n"
    "  --threads N       intra-op threads per session (default: the session's)\n"
    "  --rtol R          relative tolerance for floats (default 1e-3)\n"
    "  --atol A          absolute tolerance for floats (default 1e-5)\n"
    "  --provider NAME   give provider NAME the first claim (loaded by name unless\n"
    "                    the config lists it, in which case it must be listed first)\n"
    "  --only            with --provider: NAME is the only provider (the config's\n"
    "                    others and the CPU are dropped); a case with a node NAME\n"
    "                    does not claim is reported 'not-claimed' instead of run,\n"
    "                    and a pass needs every node run by NAME (host ops aside)\n"
    "  --strict          count not-claimed cases as failures\n"
    "  --coverage FILE   write one line per node of every case that loaded:\n"
    "                    TEST OP DOMAIN VERSION INPUT_TYPES PROVIDER VERDICT (TSV);\n"
    "                    tools/gen_operator_docs.py turns it into docs/operators/\n\n"
    "Floats pass when |got-exp| <= atol + rtol*|exp| (NaN matches NaN, equal\n"
    "infinities match); integers, bools and strings must be equal; element type\n"
    "and shape must match exactly. One line per test, on stdout and in --verdicts:\n"
    "  NAME<TAB>pass | fail: REASON | load-error: REASON | skip: REASON\n"
    "         | not-claimed: REASON\n"
    "NAME and REASON are escaped: backslash as \\\\, tab \\t, newline \\n, carriage\n"
    "return \\r, other control bytes \\xHH.\n"
    "The last line printed is 'N passed, M failed, S skipped' (load-errors count as failed; "
    "not-claimed cases as skipped, or as failed\n"
    "with --strict).\n"
    "\nexit status: 0 no test failed, 1 a test failed or a runtime error, 2 usage error\n";

/* --- Verdicts ---------------------------------------------------------------------------- */
/* Makes the reason after "kind: " one line of at most kReasonMax bytes,
 * cut on a UTF-8 character boundary. */
static void one_line(char* v) {
  char* w = v;
  int space = 0;
  for (const char* r = v; *r; r++) {
    int ws = *r == ' ' || *r == '\t' || *r == '\n' || *r == '\r' || *r == '\v' || *r == '\f';
    if (ws) {
      space = w > v;
      continue;
    }
    if (space) *w++ = ' ';
    space = 0;
    *w++ = *r;
  }
  *w = '\0';
  char* colon = strstr(v, ": ");
  char* reason = colon ? colon + 2 : v;
  if (strlen(reason) <= kReasonMax) return;
  size_t cut = kReasonMax;
  while (cut > 0 && ((unsigned char)reason[cut] & 0xc0) == 0x80)
    cut--;
  reason[cut] = '\0';
}

static void set_verdict(char* v, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_verdict(char* v, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v, kVerdictMax, fmt, ap);
  va_end(ap);
}

static const char* base(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* --- One test case (in the child) ------------------------------------------------------- */
typedef struct Expected {
  OnyxValue** values;
  size_t count;
} Expected;

static int load_expected(const OnyxSession* s, const char* set_dir, Expected* x, CliError* e) {
  char** files = NULL;
  if (cli_list_indexed(set_dir, "output_", ".pb", 0, &files, &x->count, e)) return -1;
  x->values = calloc(x->count ? x->count : 1, sizeof *x->values);
  int rc = x->values ? 0 : cli_err(e, "out of memory");
  for (size_t i = 0; !rc && i < x->count; i++) {
    /* SequenceProto / OptionalProto where the model's output is one */
    OnyxStatus* st =
        onyx_value_load_proto(files[i], onyx_session_output_kind(s, i), &x->values[i], NULL);
    if (st) rc = cli_err_status(e, st, "cannot read %s", base(files[i]));
  }
  cli_strings_free(files, x->count);
  return rc;
}

/* Sequences item by item; none equals none. 0: equal. */
static int compare_containers(const OnyxValue* ev, const OnyxValue* gv, const TestArgs* a,
                              char* reason, size_t cap) {
  OnyxValueKind ek = onyx_value_kind(ev), gk = onyx_value_kind(gv);
  if (ek == ONYX_VALUE_MAP || ek == ONYX_VALUE_SEQUENCE_MAP || gk == ONYX_VALUE_MAP ||
      gk == ONYX_VALUE_SEQUENCE_MAP)
    return cli_compare_map_values(ev, gv, a->rtol, a->atol, reason, cap);
  static const char* const kinds[] = {"tensor", "sequence", "none"};
  if (ek != gk) {
    snprintf(reason, cap, "expected a %s, got a %s", kinds[ek], kinds[gk]);
    return 1;
  }
  if (ek == ONYX_VALUE_NONE) return 0;
  size_t n = onyx_value_sequence_length(ev);
  if (n != onyx_value_sequence_length(gv)) {
    snprintf(reason, cap, "expected %zu sequence items, got %zu", n,
             onyx_value_sequence_length(gv));
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    char why[kVerdictMax];
    if (cli_compare(onyx_value_sequence_at(ev, i), onyx_value_sequence_at(gv, i), a->rtol, a->atol,
                    why, sizeof why)) {
      snprintf(reason, cap, "sequence item %zu: %.900s", i, why);
      return 1;
    }
  }
  return 0;
}

static void compare_outputs(const OnyxSession* s, const char* set, const Expected* x,
                            OnyxValue** got, const TestArgs* a, char* v) {
  for (size_t k = 0; k < x->count; k++) {
    const char* name = onyx_session_output_name(s, k);
    if (onyx_value_kind(x->values[k]) != ONYX_VALUE_TENSOR ||
        onyx_value_kind(got[k]) != ONYX_VALUE_TENSOR) {
      char why[kVerdictMax];
      if (compare_containers(x->values[k], got[k], a, why, sizeof why)) {
        set_verdict(v, "fail: %s output %zu (%s): %s", set, k, name, why);
        return;
      }
      continue;
    }
    const OnyxTensor* et = onyx_value_tensor(x->values[k]);
    const OnyxTensor* gt = onyx_value_tensor(got[k]);
    char reason[kVerdictMax];
    if (!gt || !et) {
      set_verdict(v, "fail: %s output %zu (%s): not a tensor", set, k, name);
      return;
    }
    if (cli_compare(et, gt, a->rtol, a->atol, reason, sizeof reason)) {
      set_verdict(v, "fail: %s output %zu (%s): %s", set, k, name, reason);
      return;
    }
  }
}

/* Inputs by position when the model has sequence/optional inputs (their
 * files are SequenceProto / OptionalProto). */
static int load_container_feeds(CliFeeds* f, const OnyxSession* s, char* const* files, size_t n,
                                CliError* e) {
  if (n > onyx_session_input_count(s))
    return cli_err(e, "%zu input files for %zu model inputs", n, onyx_session_input_count(s));
  for (size_t i = 0; i < n; i++) {
    OnyxValue* val = NULL;
    OnyxStatus* st = onyx_value_load_proto(files[i], onyx_session_input_kind(s, i), &val, NULL);
    if (st) return cli_err_status(e, st, "cannot read %s", base(files[i]));
    if (onyx_value_kind(val) != ONYX_VALUE_TENSOR &&
        onyx_value_elem_type(val) == ONYX_ELEM_UNDEFINED) {
      /* an empty sequence or a none: the declared element type */
      OnyxElemType t = ONYX_ELEM_UNDEFINED;
      onyx_status_release(onyx_session_input_info(s, i, &t, NULL, NULL));
      OnyxValue* typed = NULL;
      st = onyx_value_kind(val) == ONYX_VALUE_NONE ? onyx_value_create_none(t, &typed)
                                                   : onyx_value_create_sequence(t, NULL, 0, &typed);
      onyx_value_release(val);
      if (st) return cli_err_status(e, st, "input %zu", i);
      val = typed;
    }
    if (cli_feeds_add(f, onyx_session_input_name(s, i), val, e)) return -1;
  }
  return 0;
}

static int has_container_inputs(const OnyxSession* s) {
  for (size_t i = 0; i < onyx_session_input_count(s); i++)
    if (onyx_session_input_kind(s, i) != ONYX_TYPE_TENSOR) return 1;
  return 0;
}

/* Runs one test_data_set; leaves v untouched when it passes. */
static void run_set(OnyxSession* s, const char* set_dir, const TestArgs* a, char* v) {
  const char* set = base(set_dir);
  CliError e = CLI_ERROR_INIT;
  CliFeeds feeds = {0};
  Expected x = {0};
  char** inputs = NULL;
  size_t n_in = 0, n_out = onyx_session_output_count(s);
  const char** names = calloc(n_out ? n_out : 1, sizeof *names);
  OnyxValue** got = calloc(n_out ? n_out : 1, sizeof *got);
  int rc = (!names || !got) ? cli_err(&e, "out of memory") : 0;
  if (!rc) rc = cli_list_indexed(set_dir, "input_", ".pb", 0, &inputs, &n_in, &e);
  if (!rc) rc = cli_feeds_init(&feeds, s, &e);
  if (!rc)
    rc = has_container_inputs(s) ? load_container_feeds(&feeds, s, inputs, n_in, &e)
                                 : cli_feeds_load(&feeds, s, inputs, n_in, &e);
  if (!rc) rc = load_expected(s, set_dir, &x, &e);
  if (!rc && x.count > n_out)
    rc = cli_err(&e, "%zu expected outputs, model has %zu", x.count, n_out);
  if (rc) set_verdict(v, "fail: %s: %s", set, cli_err_msg(&e));
  cli_err_clear(&e);
  /* nothing to compare would be a pass that checked nothing */
  if (!rc && x.count == 0 && n_out > 0) {
    set_verdict(v, "skip: %s has no expected outputs (output_K.pb)", set);
    rc = -1;
  }
  for (size_t k = 0; !rc && k < n_out; k++)
    names[k] = onyx_session_output_name(s, k);
  OnyxStatus* st = NULL;
  if (!rc)
    st = onyx_session_run(s, NULL, feeds.names, (const OnyxValue* const*)feeds.values, feeds.count,
                          names, n_out, got);
  if (st) set_verdict(v, "fail: run-error: %s", onyx_status_message(st));
  if (!rc && !st) compare_outputs(s, set, &x, got, a, v);
  onyx_status_release(st);
  if (got) onyx_values_release(got, n_out);
  if (x.values) onyx_values_release(x.values, x.count);
  free(x.values);
  free(got);
  free(names);
  cli_feeds_release(&feeds);
  cli_strings_free(inputs, n_in);
}

/* The node list of a loaded case for --coverage: "OP\tDOMAIN\tVER\tTYPES\tPROVIDER" lines in
 * SCRATCH/INDEX.nodes; the parent adds the test name and verdict. */
static void write_nodes(const TestArgs* a, size_t index, const OnyxSession* s) {
  if (!a->scratch) return;
  char path[4096];
  snprintf(path, sizeof path, "%s/%zu.nodes", a->scratch, index);
  FILE* f = fopen(path, "w");
  if (!f) return;
  for (size_t i = 0, n = onyx_session_node_count(s); i < n; i++) {
    OnyxNodeInfo info = {.struct_size = sizeof info};
    if (onyx_session_node_info(s, i, &info)) continue;
    /* fields escaped as in the verdicts: a model's names may hold tabs */
    cli_fputs_escaped(f, info.op_type, 0);
    fputc('\t', f);
    cli_fputs_escaped(f, *info.domain ? info.domain : "ai.onnx", 0);
    fprintf(f, "\t%d\t", (int)info.since_version);
    cli_fputs_escaped(f, info.input_types, 0);
    fputc('\t', f);
    cli_fputs_escaped(f, info.provider ? info.provider : "-", 0);
    fputc('\n', f);
  }
  fclose(f);
}

/* Drops the test's own model path from the front of a load error. */
static const char* strip_model(const char* msg, const char* model) {
  size_t n = strlen(model);
  return strncmp(msg, model, n) || strncmp(msg + n, ": ", 2) ? msg : msg + n + 2;
}

/* With --only, a case whose exclusive session (the provider alone) was not
 * created: loads it again with the CPU behind the provider (and the
 * optimizer's basic level at most, so the ops counted are the model's, not
 * the CPU's fusions) to tell "not claimed" (how many nodes, which ops) from a
 * real load error. The first
 * error holds the provider's decline reason for the first node it left (in
 * the main graph or in a subgraph: "node 'If_0' (If): subgraph 'then_branch':
 * no provider can run node ..."). A node nobody could run is the provider's
 * "not claimed" even where the CPU behind it leaves no node of the main graph
 * to count: a subgraph's node, or a node the optimizer folds only with the
 * CPU there (Constant). */
static void explain_unloaded(const TestArgs* a, const char* model, const char* first_error,
                             char* v) {
  const char* why = strip_model(first_error, model);
  static const char kUnplaced[] = "no provider can run ";
  const char* unplaced = strstr(why, kUnplaced);
  /* "node 'n' (Op vK): provider: reason" when that is the whole error */
  const char* decline = unplaced == why ? why + sizeof kUnplaced - 1 : why;
  CliError e = CLI_ERROR_INIT;
  OnyxSession* s = NULL;
  CliSessionExtra extra = {.first_provider = a->provider, .exclusive = 1, .unfused = 1};
  if (cli_session_open_ex(model, a->config, a->threads, &extra, &s, NULL, &e)) {
    cli_err_clear(&e);
    /* The CPU cannot run it either; still, a node nobody claims is the
     * provider's "not claimed", not a broken case. */
    if (unplaced)
      set_verdict(v, "not-claimed: provider '%s': %s", a->provider, why);
    else
      set_verdict(v, "load-error: %s", why);
    return;
  }
  char ops[256] = "";
  size_t len = 0, missed = 0, n = onyx_session_node_count(s);
  for (size_t i = 0; i < n; i++) {
    OnyxNodeInfo info = {.struct_size = sizeof info};
    /* host ops (no provider) are nobody's to claim */
    if (onyx_session_node_info(s, i, &info) || !info.provider ||
        !strcmp(info.provider, a->provider))
      continue;
    missed++;
    if (len < sizeof ops && !strstr(ops, info.op_type)) {
      int w = snprintf(ops + len, sizeof ops - len, "%s%s", len ? ", " : "", info.op_type);
      if (w > 0) len += (size_t)w;
    }
  }
  if (missed)
    set_verdict(v, "not-claimed: provider '%s' did not claim %zu of %zu nodes (%s); %s",
                a->provider, missed, n, ops, decline);
  else if (unplaced)
    set_verdict(v, "not-claimed: provider '%s': %s", a->provider, why);
  else
    set_verdict(v, "load-error: %s", why);
  onyx_session_release(s);
}

/* Whether the profile has a "node" event (a kernel or a fused group; copies
 * are "copy" events named after their value) named `step` run by `provider`. */
static bool ran_on(json_t* events, const char* step, const char* provider) {
  size_t k;
  json_t* ev;
  json_array_foreach(events, k, ev) {
    const char* cat = json_string_value(json_object_get(ev, "cat"));
    const char* name = json_string_value(json_object_get(ev, "name"));
    const char* prov = json_string_value(json_object_get(json_object_get(ev, "args"), "provider"));
    if (cat && name && prov && !strcmp(cat, "node") && !strcmp(name, step) &&
        !strcmp(prov, provider))
      return true;
  }
  return false;
}

/* Host ops whose subgraphs hold nodes for providers (host/exec/ox_control.h). */
static bool has_subgraphs(const OnyxNodeInfo* info) {
  static const struct {
    const char* domain;
    const char* op;
  } kOps[] = {{"", "If"},
              {"", "Loop"},
              {"", "Scan"},
              {"", "SequenceMap"},
              {"ai.onnx.preview", "FlexAttention"}};
  for (size_t i = 0; i < sizeof kOps / sizeof kOps[0]; i++)
    if (!strcmp(info->domain, kOps[i].domain) && !strcmp(info->op_type, kOps[i].op)) return true;
  return false;
}

/* After a passing run with --provider: every node placed on the provider
 * must have run there. The session's profile (one event per kernel or fused
 * group of the main graph, with the provider that ran it) is the witness.
 * With --only, also: every node is placed on the provider, except host ops
 * (control flow, sequences: the host runs them itself, no provider can);
 * every node event of the profile names the provider or "host"; and the
 * provider ran something, else the case tested nothing of it and is not
 * claimed. Subgraphs are partitioned with the session's providers, the
 * provider alone here, so a control-flow node's subgraphs ran on it. */
static void check_ran(const TestArgs* a, const OnyxSession* s, const char* profile, char* v) {
  json_error_t jerr;
  json_t* root = json_load_file(profile, 0, &jerr);
  json_t* events = root ? json_object_get(root, "traceEvents") : NULL;
  if (!json_is_array(events)) {
    set_verdict(v, "fail: harness-error: cannot read the run's profile: %s", jerr.text);
    json_decref(root);
    return;
  }
  size_t n = onyx_session_node_count(s), on_provider = 0, control_flow = 0;
  for (size_t i = 0; i < n; i++) {
    OnyxNodeInfo info = {.struct_size = sizeof info};
    if (onyx_session_node_info(s, i, &info)) {
      set_verdict(v, "fail: harness-error: no information on node %zu", i);
      break;
    }
    if (!info.provider) { /* a host op */
      control_flow += has_subgraphs(&info);
      continue;
    }
    if (strcmp(info.provider, a->provider)) {
      if (!a->only) continue;
      set_verdict(v, "fail: node '%s' (%s) was placed on provider '%s', not on '%s' (--only)",
                  info.name, info.op_type, info.provider, a->provider);
      break;
    }
    on_provider++;
    if (!ran_on(events, info.group ? info.group : info.name, a->provider)) {
      set_verdict(v, "fail: node '%s' (%s) was placed on provider '%s' but never ran there",
                  info.name, info.op_type, a->provider);
      break;
    }
  }
  size_t k;
  json_t* ev;
  json_array_foreach(events, k, ev) {
    if (!a->only || strcmp(v, "pass")) break;
    const char* cat = json_string_value(json_object_get(ev, "cat"));
    const char* name = json_string_value(json_object_get(ev, "name"));
    json_t* args = json_object_get(ev, "args");
    const char* prov = json_string_value(json_object_get(args, "provider"));
    const char* op = json_string_value(json_object_get(args, "op"));
    if (cat && !strcmp(cat, "node") && prov && strcmp(prov, a->provider) && strcmp(prov, "host"))
      set_verdict(v, "fail: node '%s' (%s) ran on provider '%s', not on '%s' (--only)",
                  name ? name : "?", op ? op : "?", prov, a->provider);
  }
  if (a->only && !strcmp(v, "pass") && on_provider == 0 && control_flow == 0)
    set_verdict(v,
                "not-claimed: provider '%s' ran none of the %zu nodes (host ops only: the host "
                "runs them)",
                a->provider, n);
  json_decref(root);
}

static void run_case(const TestArgs* a, size_t index, const char* test_dir, char* v) {
  CliError e = CLI_ERROR_INIT;
  OnyxSession* s = NULL;
  char* model = cli_path_join(test_dir, "model.onnx");
  if (!model) {
    set_verdict(v, "fail: harness-error: out of memory");
    return;
  }
  /* With --provider, the run is profiled to check where nodes ran. */
  char profile[] = "/tmp/onyx-test-profile-XXXXXX";
  int pfd = a->provider ? mkstemp(profile) : -1;
  if (pfd >= 0) close(pfd);
  CliSessionExtra extra = {.first_provider = a->provider,
                           .no_implicit_cpu = a->only,
                           .exclusive = a->only,
                           .profile = pfd >= 0 ? profile : NULL};
  int rc =
      cli_session_open_ex(model, a->config, a->threads, a->provider ? &extra : NULL, &s, NULL, &e);
  if (rc && pfd >= 0) unlink(profile);
  if (rc) {
    if (a->only)
      explain_unloaded(a, model, cli_err_msg(&e), v);
    else
      set_verdict(v, "load-error: %s", strip_model(cli_err_msg(&e), model));
    cli_err_clear(&e);
    free(model);
    return;
  }
  free(model);
  write_nodes(a, index, s);
  char** sets = NULL;
  size_t n_sets = 0;
  set_verdict(v, "pass");
  if (cli_list_indexed(test_dir, "test_data_set_", "", 1, &sets, &n_sets, &e))
    set_verdict(v, "fail: harness-error: %s", cli_err_msg(&e));
  else if (n_sets == 0)
    set_verdict(v, "skip: no test_data_set_*");
  cli_err_clear(&e);
  for (size_t i = 0; i < n_sets && !strcmp(v, "pass"); i++)
    run_set(s, sets[i], a, v);
  if (pfd >= 0) { /* the profile is complete JSON after every event */
    if (n_sets && !strcmp(v, "pass")) check_ran(a, s, profile, v);
    unlink(profile);
  }
  cli_strings_free(sets, n_sets);
  onyx_session_release(s);
}

/* --- Children ------------------------------------------------------------------------------ */
typedef struct Slot {
  pid_t pid; /* 0: free */
  int fd;    /* read end of the verdict pipe; -1 once at EOF */
  size_t index;
  double deadline_ms;
  int timed_out;
  size_t len;
  char buf[kVerdictMax];
} Slot;

typedef struct Runner {
  const TestArgs* args;
  char** tests; /* folder names */
  char** verdicts;
  size_t count, next, done, printed;
  size_t passed, failed, skipped, load_errors, not_claimed;
  FILE* coverage; /* --coverage, or NULL */
  Slot* slots;
  FILE* out; /* --verdicts, or NULL */
  int oom;
} Runner;

static void write_all(int fd, const char* s, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

/* The child: runs the test and reports its verdict through the pipe. */
static void child_main(Runner* r, size_t index, int fd) {
  for (int i = 0; i < r->args->jobs; i++)
    if (r->slots[i].pid && r->slots[i].fd >= 0) close(r->slots[i].fd);
  if (r->out) fclose(r->out);
  r->out = NULL;
  if (r->coverage) fclose(r->coverage);
  r->coverage = NULL;
  char* dir = cli_path_join(r->args->dir, r->tests[index]);
  char v[kVerdictMax];
  if (dir)
    run_case(r->args, index, dir, v);
  else
    set_verdict(v, "fail: harness-error: out of memory");
  free(dir);
  one_line(v);
  write_all(fd, v, strlen(v));
  close(fd);
}

static int launch(Runner* r, Slot* slot, size_t index) {
  int fds[2];
  if (pipe(fds)) return -1;
  fflush(NULL); /* the child must not repeat buffered output */
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    close(fds[0]);
    child_main(r, index, fds[1]);
    exit(0);
  }
  close(fds[1]);
  *slot = (Slot){.pid = pid, .fd = fds[0], .index = index};
  slot->deadline_ms = cli_now_ms() + r->args->timeout_s * 1e3;
  return 0;
}

/* One "NAME<TAB>VERDICT" line; both fields escaped (cli_escape), so a tab
 * or newline in a folder name or a message cannot break the TSV. */
static void print_verdict(FILE* f, const char* name, const char* verdict) {
  cli_fputs_escaped(f, name, 0);
  fputc('\t', f);
  cli_fputs_escaped(f, verdict, 0);
  fputc('\n', f);
}

/* Prints and writes every verdict that is ready, in test order. */
static void flush_verdicts(Runner* r) {
  for (; r->printed < r->count && r->verdicts[r->printed]; r->printed++) {
    const char* v = r->verdicts[r->printed];
    print_verdict(stdout, r->tests[r->printed], v);
    if (r->out) print_verdict(r->out, r->tests[r->printed], v);
    bool not_claimed = !strncmp(v, "not-claimed:", 12);
    if (!strcmp(v, "pass"))
      r->passed++;
    else if (!strncmp(v, "skip:", 5) || (not_claimed && !r->args->strict))
      r->skipped++;
    else
      r->failed++;
    if (!strncmp(v, "load-error:", 11)) r->load_errors++;
    if (not_claimed) r->not_claimed++;
  }
  fflush(stdout);
  if (r->out) fflush(r->out);
}

/* Moves a finished case's node list into the --coverage file with its verdict. */
static void add_coverage(Runner* r, size_t index, const char* verdict) {
  if (!r->coverage || !r->args->scratch) return;
  char path[4096], line[2048];
  snprintf(path, sizeof path, "%s/%zu.nodes", r->args->scratch, index);
  FILE* f = fopen(path, "r");
  if (!f) return;
  size_t kind = strcspn(verdict, ":");
  while (fgets(line, sizeof line, f)) {
    cli_fputs_escaped(r->coverage, r->tests[index], 0);
    fprintf(r->coverage, "\t%.*s\t", (int)strcspn(line, "\n"), line);
    char* k = strndup(verdict, kind);
    cli_fputs_escaped(r->coverage, k ? k : "?", 0);
    free(k);
    fputc('\n', r->coverage);
  }
  fclose(f);
  unlink(path);
}

/* Keeps a verdict; out of memory stops the whole run (r->oom). */
static void record(Runner* r, size_t index, const char* verdict) {
  add_coverage(r, index, verdict);
  r->verdicts[index] = strdup(verdict);
  if (!r->verdicts[index]) r->oom = 1;
  r->done++;
}

/* The verdict of a child that has exited with `status`. */
static void finish(Runner* r, Slot* slot, int status) {
  char v[kVerdictMax + 64];
  slot->buf[slot->len] = '\0';
  if (slot->timed_out)
    snprintf(v, sizeof v, "fail: timed out after %g s", r->args->timeout_s);
  else if (WIFSIGNALED(status))
    snprintf(v, sizeof v, "fail: crashed (signal %d)", WTERMSIG(status));
  else if (slot->len > 0)
    snprintf(v, sizeof v, "%s", slot->buf);
  else
    snprintf(v, sizeof v, "fail: crashed (exit %d)", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  record(r, slot->index, v);
  if (slot->fd >= 0) close(slot->fd);
  slot->pid = 0;
  slot->fd = -1;
}

static void read_pipe(Slot* slot) {
  ssize_t n = read(slot->fd, slot->buf + slot->len, sizeof slot->buf - 1 - slot->len);
  if (n < 0 && errno == EINTR) return;
  if (n > 0) {
    slot->len += (size_t)n;
    if (slot->len < sizeof slot->buf - 1) return;
  }
  close(slot->fd); /* EOF, error, or a verdict too long to be one */
  slot->fd = -1;
}

/* Reaps children that have exited and kills those past their deadline. */
static void reap(Runner* r) {
  double now = cli_now_ms();
  for (int i = 0; i < r->args->jobs; i++) {
    Slot* slot = &r->slots[i];
    if (!slot->pid) continue;
    int status = 0;
    if (slot->fd < 0 && waitpid(slot->pid, &status, WNOHANG) == slot->pid) {
      finish(r, slot, status);
    } else if (now >= slot->deadline_ms) {
      kill(slot->pid, SIGKILL);
      while (waitpid(slot->pid, &status, 0) < 0 && errno == EINTR) {
      }
      slot->timed_out = 1;
      finish(r, slot, status);
    }
  }
}

/* Waits for the next event: verdict bytes, a child's EOF or a deadline. */
static void wait_children(Runner* r) {
  struct pollfd fds[64];
  Slot* owners[64];
  nfds_t n = 0;
  double now = cli_now_ms(), wait_ms = 1e9;
  for (int i = 0; i < r->args->jobs; i++) {
    Slot* slot = &r->slots[i];
    if (!slot->pid) continue;
    double left = slot->deadline_ms - now;
    if (slot->fd < 0) left = left < 5 ? left : 5; /* at EOF: poll for the exit */
    if (left < wait_ms) wait_ms = left;
    if (slot->fd >= 0 && n < 64) {
      fds[n] = (struct pollfd){.fd = slot->fd, .events = POLLIN};
      owners[n++] = slot;
    }
  }
  int timeout = wait_ms < 0 ? 0 : (int)(wait_ms + 1);
  if (poll(fds, n, timeout) > 0)
    for (nfds_t k = 0; k < n; k++)
      if (fds[k].revents) read_pipe(owners[k]);
  reap(r);
}

/* Stops early only when out of memory; children still running are killed. */
static int run_all(Runner* r, CliError* e) {
  while (r->done < r->count && !r->oom) {
    for (int i = 0; i < r->args->jobs && r->next < r->count; i++) {
      if (r->slots[i].pid) continue;
      size_t index = r->next++;
      if (launch(r, &r->slots[i], index)) {
        char v[256];
        snprintf(v, sizeof v, "fail: harness-error: cannot start a child: %s", strerror(errno));
        record(r, index, v);
      }
    }
    if (r->done < r->count) wait_children(r);
    flush_verdicts(r);
  }
  if (!r->oom) return 0;
  for (int i = 0; i < r->args->jobs; i++)
    if (r->slots[i].pid) {
      kill(r->slots[i].pid, SIGKILL);
      waitpid(r->slots[i].pid, NULL, 0);
      if (r->slots[i].fd >= 0) close(r->slots[i].fd);
    }
  return cli_err(e, "out of memory");
}

/* --- Test discovery -------------------------------------------------------------------------- */
static int by_name(const void* a, const void* b) {
  return strcmp(*(char* const*)a, *(char* const*)b);
}

static int is_test_folder(const char* dir, const char* name) {
  char* folder = cli_path_join(dir, name);
  char* model = folder ? cli_path_join(folder, "model.onnx") : NULL;
  int yes = model && cli_is_file(model);
  free(model);
  free(folder);
  return yes;
}

static int find_tests(const char* dir, const regex_t* re, char*** out, size_t* count, CliError* e) {
  DIR* d = opendir(dir);
  if (!d) return cli_err(e, "cannot open test folder %s: %s", dir, strerror(errno));
  char** names = NULL;
  size_t n = 0;
  int rc = 0;
  for (struct dirent* ent; !rc && (ent = readdir(d));) {
    if (ent->d_name[0] == '.' || (re && regexec(re, ent->d_name, 0, NULL, 0))) continue;
    if (!is_test_folder(dir, ent->d_name)) continue;
    char** grown = realloc(names, (n + 1) * sizeof *names);
    char* name = grown ? strdup(ent->d_name) : NULL;
    if (grown) names = grown;
    if (!name)
      rc = cli_err(e, "out of memory");
    else
      names[n++] = name;
  }
  closedir(d);
  if (rc) {
    cli_strings_free(names, n);
    return rc;
  }
  if (n) qsort(names, n, sizeof *names, by_name);
  *out = names;
  *count = n;
  return 0;
}

/* --- The command ------------------------------------------------------------------------------ */
#ifndef ONYX_CLI_DATADIR
#define ONYX_CLI_DATADIR "share" /* CMAKE_INSTALL_DATADIR, relative to the prefix */
#endif

/* The pattern suite (tools/gen_patterns.py): DATADIR/onyx/patterns under the
 * folder above the executable's, which is the build tree's root for
 * build/bin/onyx (generated into build/share/onyx/patterns) and the prefix
 * for PREFIX/bin/onyx (installed into PREFIX/share/onyx/patterns). */
static char* patterns_dir(CliError* e) {
  static const char kSub[] = "/onyx/patterns";
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n < 0) {
    cli_err(e, "--patterns: cannot find the onyx executable (/proc/self/exe): %s", strerror(errno));
    return NULL;
  }
  exe[n] = '\0';
  for (int up = 0; up < 2; up++) { /* PREFIX/bin/onyx -> PREFIX */
    char* slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
  }
  const char* data = ONYX_CLI_DATADIR;
  size_t cap = strlen(exe) + strlen(data) + sizeof kSub + 2;
  char* dir = malloc(cap);
  if (!dir) {
    cli_err(e, "out of memory");
    return NULL;
  }
  if (data[0] == '/')
    snprintf(dir, cap, "%s%s", data, kSub);
  else
    snprintf(dir, cap, "%s/%s%s", exe, data, kSub);
  if (!cli_is_dir(dir)) {
    cli_err(e,
            "--patterns: the pattern suite is not installed: no folder %s (it is generated at "
            "build time by tools/gen_patterns.py when /usr/bin/python3 has the onnx and numpy "
            "packages: apt-get install python3-onnx python3-numpy, then configure and build again)",
            dir);
    free(dir);
    return NULL;
  }
  return dir;
}

/* Removes the --coverage temp folder and what children left in it. */
static void remove_scratch(const char* dir) {
  DIR* d = opendir(dir);
  if (d) {
    for (struct dirent* ent; (ent = readdir(d));) {
      if (ent->d_name[0] == '.') continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(dir);
}

static void print_summary(const Runner* r, double seconds) {
  char* suite = cli_model_name(r->args->dir);
  printf("suite %s: %zu tests in %.1f s (%zu of the failed are load-errors)",
         suite ? suite : r->args->dir, r->count, seconds, r->load_errors);
  if (r->args->verdicts) printf("; verdicts in %s", r->args->verdicts);
  printf("\n");
  if (r->args->provider)
    printf("provider %s: %zu case%s not claimed%s\n", r->args->provider, r->not_claimed,
           r->not_claimed == 1 ? "" : "s", r->args->strict ? " (counted as failed: --strict)" : "");
  printf("%zu passed, %zu failed, %zu skipped\n", r->passed, r->failed, r->skipped);
  free(suite);
}

static int run_tests(const TestArgs* a, const regex_t* re, CliError* e) {
  Runner r = {.args = a};
  double t0 = cli_now_ms();
  int rc = find_tests(a->dir, re, &r.tests, &r.count, e);
  if (!rc && a->verdicts && !(r.out = fopen(a->verdicts, "w")))
    rc = cli_err(e, "cannot write %s: %s", a->verdicts, strerror(errno));
  if (!rc && a->coverage && !(r.coverage = fopen(a->coverage, "w")))
    rc = cli_err(e, "cannot write %s: %s", a->coverage, strerror(errno));
  if (r.coverage)
    fprintf(r.coverage, "# test\top\tdomain\tversion\tinput_types\tprovider\tverdict\n");
  if (!rc) {
    r.verdicts = calloc(r.count ? r.count : 1, sizeof *r.verdicts);
    r.slots = calloc((size_t)a->jobs, sizeof *r.slots);
    if (!r.verdicts || !r.slots) rc = cli_err(e, "out of memory");
  }
  if (!rc) rc = run_all(&r, e);
  if (!rc) print_summary(&r, (cli_now_ms() - t0) / 1e3);
  if (r.out && fclose(r.out) && !rc) rc = cli_err(e, "cannot write %s", a->verdicts);
  if (r.coverage && fclose(r.coverage) && !rc) rc = cli_err(e, "cannot write %s", a->coverage);
  cli_strings_free(r.verdicts, r.count);
  free(r.slots);
  cli_strings_free(r.tests, r.count);
  if (rc) return rc;
  return r.failed ? 1 : 0;
}

int cli_cmd_test(int argc, char** argv) {
  TestArgs a = {.timeout_s = 120, .rtol = 1e-3, .atol = 1e-5, .jobs = 1};
  const CliOpt opts[] = {
      {"--config", CLI_OPT_STRING, &a.config, 0},
      {"--verdicts", CLI_OPT_STRING, &a.verdicts, 0},
      {"--filter", CLI_OPT_STRING, &a.filter, 0},
      {"--timeout-s", CLI_OPT_DOUBLE, &a.timeout_s, 0},
      {"--jobs", CLI_OPT_INT, &a.jobs, 1},
      {"--threads", CLI_OPT_INT, &a.threads, 0},
      {"--rtol", CLI_OPT_DOUBLE, &a.rtol, 0},
      {"--atol", CLI_OPT_DOUBLE, &a.atol, 0},
      {"--provider", CLI_OPT_STRING, &a.provider, 0},
      {"--only", CLI_OPT_FLAG, &a.only, 0},
      {"--strict", CLI_OPT_FLAG, &a.strict, 0},
      {"--coverage", CLI_OPT_STRING, &a.coverage, 0},
      {"--patterns", CLI_OPT_FLAG, &a.patterns, 0},
  };
  const CliCommand cmd = {.name = "test",
                          .synopsis =
                              "onyx test DIR|--patterns [--config FILE] [--verdicts FILE] "
                              "[--filter REGEX] "
                              "[--timeout-s N] [--jobs N] [--threads N] [--rtol R] [--atol A] "
                              "[--provider NAME [--only]] [--strict] [--coverage FILE]",
                          .help = kTestHelp,
                          .opts = opts,
                          .opt_count = sizeof opts / sizeof opts[0],
                          .min_positional = 0,
                          .max_positional = 1,
                          .positional_name = "DIR"};
  size_t npos = 0;
  CliParse p = cli_parse(&cmd, argc, argv, &a.dir, &npos);
  if (p != CLI_PARSED) return p == CLI_PARSE_HELP ? CLI_EXIT_OK : CLI_EXIT_USAGE;
  if (a.patterns && npos) return cli_usage_error(&cmd, "give DIR or --patterns, not both");
  if (!a.patterns && !npos) return cli_usage_error(&cmd, "missing DIR (or --patterns)");
  if (a.timeout_s <= 0) return cli_usage_error(&cmd, "--timeout-s wants a positive number");
  if (a.jobs > 64) return cli_usage_error(&cmd, "--jobs is at most 64");
  if (a.only && !a.provider) return cli_usage_error(&cmd, "--only needs --provider NAME");
  char scratch[] = "/tmp/onyx-test-XXXXXX";
  if (a.coverage) {
    if (!mkdtemp(scratch))
      return cli_usage_error(&cmd, "cannot create a temp folder: %s", strerror(errno));
    a.scratch = scratch;
  }
  regex_t re;
  if (a.filter) {
    int err = regcomp(&re, a.filter, REG_EXTENDED | REG_NOSUB);
    if (err) {
      char msg[256];
      regerror(err, &re, msg, sizeof msg);
      return cli_usage_error(&cmd, "--filter '%s': %s", a.filter, msg);
    }
  }
  CliError e = CLI_ERROR_INIT;
  char* patterns = a.patterns ? patterns_dir(&e) : NULL;
  if (a.patterns) a.dir = patterns;
  int rc = a.patterns && !patterns ? -1 : run_tests(&a, a.filter ? &re : NULL, &e);
  free(patterns);
  if (a.filter) regfree(&re);
  if (a.scratch) {
    remove_scratch(a.scratch);
  }
  if (rc < 0) return cli_report("test", &e);
  return rc;
}
