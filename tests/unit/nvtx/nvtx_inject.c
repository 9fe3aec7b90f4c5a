/* nvtx_inject.c — a minimal NVTX tool for test_nvtx: the library that
 * NVTX_INJECTION64_PATH names. NVTX's first call in the process loads it and
 * calls InitializeInjectionNvtx2, which asks NVTX's export table for the
 * CORE2 (domain) module's function table and writes its own functions into
 * the slots; NVTX sets every slot left empty to a no-op.
 *
 * It records, per process, every domain created and every range push and pop
 * with its domain's name, the message and the calling thread. test_nvtx
 * reads the record through nvtx_inject_events / nvtx_inject_clear (found
 * with dlsym). */
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "nvtx_inject.h"

#define NVTX_INJECT_EXPORT __attribute__((visibility("default")))

/* A domain handle is a pointer to one of these (NVTX treats it as opaque). */
typedef struct InjectDomain {
  char name[64];
} InjectDomain;

static pthread_mutex_t inject_lock = PTHREAD_MUTEX_INITIALIZER;
static InjectDomain inject_domains[16];
static size_t inject_n_domains;
static NvtxInjectEvent* inject_events;
static size_t inject_n_events, inject_cap_events;
static size_t inject_n_inits;

/* Copies a C string into a fixed buffer, cut to fit. */
static void inject_copy(char* dst, size_t cap, const char* src) {
  size_t n = src ? strlen(src) : 0;
  if (n >= cap) n = cap - 1;
  if (n) memcpy(dst, src, n);
  dst[n] = '\0';
}

static void inject_record(NvtxInjectKind kind, const InjectDomain* d, const char* message,
                          uint32_t category, uint32_t color) {
  NvtxInjectEvent e = {
      .kind = kind, .tid = (long)syscall(SYS_gettid), .category = category, .color = color};
  inject_copy(e.domain, sizeof e.domain, d ? d->name : "");
  inject_copy(e.message, sizeof e.message, message);
  pthread_mutex_lock(&inject_lock);
  if (inject_n_events == inject_cap_events) {
    size_t cap = inject_cap_events ? 2 * inject_cap_events : 256;
    NvtxInjectEvent* grown = realloc(inject_events, cap * sizeof *grown);
    if (!grown) abort(); /* a test tool: out of memory ends the test */
    inject_events = grown;
    inject_cap_events = cap;
  }
  inject_events[inject_n_events++] = e;
  pthread_mutex_unlock(&inject_lock);
}

static nvtxDomainHandle_t NVTX_API inject_domain_create(const char* name) {
  pthread_mutex_lock(&inject_lock);
  InjectDomain* d = NULL;
  if (inject_n_domains < sizeof inject_domains / sizeof *inject_domains) {
    d = &inject_domains[inject_n_domains++];
    inject_copy(d->name, sizeof d->name, name);
  }
  pthread_mutex_unlock(&inject_lock);
  inject_record(NVTX_INJECT_DOMAIN, d, name, 0, 0);
  return (nvtxDomainHandle_t)d;
}

/* Onyx names its ranges with ASCII messages. */
static const char* inject_message(const nvtxEventAttributes_t* a) {
  if (!a) return "";
  return a->messageType == NVTX_MESSAGE_TYPE_ASCII ? a->message.ascii : "(not an ASCII message)";
}

static int NVTX_API inject_push(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* a) {
  inject_record(NVTX_INJECT_PUSH, (const InjectDomain*)domain, inject_message(a),
                a ? a->category : 0, a && a->colorType == NVTX_COLOR_ARGB ? a->color : 0);
  return 0;
}

static int NVTX_API inject_pop(nvtxDomainHandle_t domain) {
  inject_record(NVTX_INJECT_POP, (const InjectDomain*)domain, NULL, 0, 0);
  return 0;
}

static void NVTX_API inject_name_category(nvtxDomainHandle_t domain, uint32_t category,
                                          const char* name) {
  (void)domain;
  (void)category;
  (void)name;
}

NVTX_INJECT_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const NvtxExportTableCallbacks* cb =
      (const NvtxExportTableCallbacks*)get_table(NVTX_ETID_CALLBACKS);
  if (!cb || cb->struct_size < sizeof *cb || !cb->GetModuleFunctionTable) return 0;
  NvtxFunctionTable table = NULL;
  unsigned int size = 0;
  if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) || !table ||
      size <= NVTX_CBID_CORE2_DomainCreateA)
    return 0;
  *table[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)inject_domain_create;
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = (NvtxFunctionPointer)inject_push;
  *table[NVTX_CBID_CORE2_DomainRangePop] = (NvtxFunctionPointer)inject_pop;
  *table[NVTX_CBID_CORE2_DomainNameCategoryA] = (NvtxFunctionPointer)inject_name_category;
  pthread_mutex_lock(&inject_lock);
  inject_n_inits++;
  pthread_mutex_unlock(&inject_lock);
  return 1;
}

NVTX_INJECT_EXPORT size_t nvtx_inject_events(NvtxInjectEvent* out, size_t cap, size_t* inits) {
  pthread_mutex_lock(&inject_lock);
  size_t n = inject_n_events;
  if (out) memcpy(out, inject_events, (n < cap ? n : cap) * sizeof *out);
  if (inits) *inits = inject_n_inits;
  pthread_mutex_unlock(&inject_lock);
  return n;
}

NVTX_INJECT_EXPORT void nvtx_inject_clear(void) {
  pthread_mutex_lock(&inject_lock);
  inject_n_events = 0;
  pthread_mutex_unlock(&inject_lock);
}
