/* cmd_devices.c — `onyx devices`: the provider libraries and their devices. */
#include "cli_util.h"

#include <inttypes.h>
#include <string.h>

/* cli_util.h declares the other commands; main.c declares this one too. */
int cli_cmd_devices(int argc, char** argv);

static const char kDevicesHelp[] =
    "Lists provider libraries and the devices each one sees. Without --config:\n"
    "every libonyx_ep_<name>.so on the provider search path (ONYX_PROVIDER_PATH,\n"
    "the install's provider folder, beside libonyx), in search order. With\n"
    "--config: the providers a session with that configuration uses, in its\n"
    "order, the implicit CPU provider included.\n\n"
    "A provider without a device says why (\"no CUDA driver found\"); a library\n"
    "that does not load is listed with its load error. Neither is an error.\n\n"
    "options:\n"
    "  --config FILE   provider/session configuration (JSON, docs/config.md)\n"
    "\nexit status: 0 listed (also when some provider has no device), 1 the\n"
    "configuration could not be read, 2 usage error\n";

static const char* kind_name(int32_t kind) {
  switch (kind) {
  case ONYX_DEVICE_CPU:
    return "cpu";
  case ONYX_DEVICE_GPU:
    return "gpu";
  case ONYX_DEVICE_NPU:
    return "npu";
  case ONYX_DEVICE_OTHER:
    return "other";
  }
  return "unknown";
}

/* "80.0 GiB (85899345920 bytes)", or "size unknown" for 0. */
static void format_bytes(uint64_t bytes, char* buf, size_t cap) {
  static const char* const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  if (!bytes) {
    snprintf(buf, cap, "size unknown");
    return;
  }
  double v = (double)bytes;
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
    v /= 1024.0;
    u++;
  }
  if (u == 0)
    snprintf(buf, cap, "%" PRIu64 " bytes", bytes);
  else
    snprintf(buf, cap, "%.1f %s (%" PRIu64 " bytes)", v, units[u], bytes);
}

static int print_device(const OnyxProviderList* l, size_t i, size_t d, CliError* e) {
  OnyxProviderDevice dev = {.struct_size = sizeof dev};
  OnyxStatus* st = onyx_provider_list_device(l, i, d, &dev);
  if (st) return cli_err_status(e, st, "reading device %zu", d);
  if (dev.status != ONYX_OK) {
    printf("  device %zu: unknown: %s (%s)\n", d, dev.message, onyx_status_code_name(dev.status));
    return 0;
  }
  char size[64];
  format_bytes(dev.memory_bytes, size, sizeof size);
  printf("  device %zu: %s\n", d, dev.name[0] ? dev.name : "(no name)");
  printf("    memory: %s, vendor 0x%04" PRIx32 ", device %" PRId32 ", %s\n",
         kind_name(dev.memory.kind), dev.memory.vendor_id, dev.memory.device_id, size);
  for (size_t k = 0; k < dev.property_count; k++)
    printf("    %s: %s\n", dev.property_keys[k], dev.property_values[k]);
  return 0;
}

/* The library sessions use for this entry's name, if another entry's. */
static const char* selected_library(const OnyxProviderList* l, const OnyxProviderInfo* p) {
  for (size_t k = 0; k < onyx_provider_list_count(l); k++) {
    OnyxProviderInfo o = {.struct_size = sizeof o};
    if (onyx_provider_list_info(l, k, &o) == NULL && o.selected && !strcmp(o.name, p->name))
      return o.library;
  }
  return NULL;
}

static int print_provider(const OnyxProviderList* l, size_t i, size_t* devices, CliError* e) {
  OnyxProviderInfo p = {.struct_size = sizeof p};
  OnyxStatus* st = onyx_provider_list_info(l, i, &p);
  if (st) return cli_err_status(e, st, "reading entry %zu", i);
  if (!p.loaded)
    printf("provider %s: not loaded\n", p.name);
  else if (p.device_count)
    printf("provider %s: %zu device%s\n", p.name, p.device_count, p.device_count == 1 ? "" : "s");
  else
    printf("provider %s: no device\n", p.name);
  if (p.library) printf("  library: %s\n", p.library);
  if (p.loaded)
    printf("  vendor: %s, version %s, score %" PRId32 "\n", p.vendor, p.version, p.score);
  if (p.loaded && !p.selected) {
    const char* used = selected_library(l, &p);
    if (used)
      printf("  not used: sessions load %s\n", used);
    else
      printf("  not used: no library of this name can be used\n");
  }
  if (p.status != ONYX_OK)
    printf("  reason: %s (%s)\n", p.message, onyx_status_code_name(p.status));
  for (size_t d = 0; d < p.device_count; d++)
    if (print_device(l, i, d, e)) return -1;
  *devices += p.device_count;
  return 0;
}

static int list_devices(const char* config, CliError* e) {
  OnyxProviderList* l = NULL;
  OnyxStatus* st = NULL;
  if (config) {
    OnyxSessionOptions* o = NULL;
    st = onyx_session_options_create(&o);
    if (!st) st = onyx_session_options_load_config(o, config);
    if (!st) st = onyx_session_options_list_providers(o, &l);
    onyx_session_options_release(o);
    if (st) return cli_err_status(e, st, "cannot list the providers of %s", config);
  } else {
    st = onyx_provider_list_create(&l);
    if (st) return cli_err_status(e, st, "cannot list the providers");
  }
  size_t n = onyx_provider_list_count(l), devices = 0;
  int rc = 0;
  for (size_t i = 0; !rc && i < n; i++)
    rc = print_provider(l, i, &devices, e);
  if (!rc && n == 0)
    printf("no provider library found on the provider search path (ONYX_PROVIDER_PATH, the "
           "install's provider folder, beside libonyx)\n");
  else if (!rc)
    printf("%zu provider%s, %zu device%s\n", n, n == 1 ? "" : "s", devices,
           devices == 1 ? "" : "s");
  onyx_provider_list_release(l);
  return rc;
}

int cli_cmd_devices(int argc, char** argv) {
  const char* config = NULL;
  const CliOpt opts[] = {
      {"--config", CLI_OPT_STRING, &config, 0},
  };
  const CliCommand cmd = {.name = "devices",
                          .synopsis = "onyx devices [--config FILE]",
                          .help = kDevicesHelp,
                          .opts = opts,
                          .opt_count = sizeof opts / sizeof opts[0],
                          .min_positional = 0,
                          .max_positional = 0,
                          .positional_name = NULL};
  size_t npos = 0;
  CliParse p = cli_parse(&cmd, argc, argv, NULL, &npos);
  if (p != CLI_PARSED) return p == CLI_PARSE_HELP ? CLI_EXIT_OK : CLI_EXIT_USAGE;
  CliError e = CLI_ERROR_INIT;
  return list_devices(config, &e) ? cli_report("devices", &e) : CLI_EXIT_OK;
}
