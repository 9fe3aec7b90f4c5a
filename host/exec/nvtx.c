/* nvtx.c — NVTX ranges of a session (ox_nvtx.h).
 *
 * NVTX v3 is header-only: its first call looks for a tool (the library named
 * by NVTX_INJECTION64_PATH, which nsys sets) and hands it the function table;
 * without one every call returns at once. That first call is made inside
 * pthread_once, so the table NVTX fills is published to every thread that
 * later pushes a range (the header's own initialization is not race-free
 * when two threads make their first call at once).
 *
 * Ranges are push/pop ranges, so the tool nests them per thread. The number
 * of ranges this module has open on a thread is kept beside them, so that
 * session creation can pop the phases an error return left open. */
#include "ox_nvtx.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static _Thread_local int ox_nvtx_depth;

enum { OX_NVTX_CAT_SESSION = 1, OX_NVTX_CAT_RUN = 2, OX_NVTX_CAT_NODE = 3, OX_NVTX_CAT_COPY = 4 };

/* ARGB colours: session creation, runs and copies have their own; nodes take
 * one of the palette by a hash of their provider's name, so each provider
 * keeps one colour in the timeline. */
#define OX_NVTX_SESSION_COLOR 0xff7f7f7fu
#define OX_NVTX_RUN_COLOR     0xff2f4f9fu
#define OX_NVTX_COPY_COLOR    0xffc0c0c0u
static const uint32_t ox_nvtx_palette[] = {0xff76b900u, 0xff1f77b4u, 0xffff7f0eu, 0xffd62728u,
                                           0xff9467bdu, 0xff8c564bu, 0xffe377c2u, 0xff17becfu};

#ifdef ONYX_HAVE_NVTX
#include <pthread.h>
#include <nvtx3/nvToolsExt.h>

static pthread_once_t ox_nvtx_once = PTHREAD_ONCE_INIT;
static nvtxDomainHandle_t ox_nvtx_domain;

static void ox_nvtx_init(void) {
  ox_nvtx_domain = nvtxDomainCreateA("onyx");
  nvtxDomainNameCategoryA(ox_nvtx_domain, OX_NVTX_CAT_SESSION, "session");
  nvtxDomainNameCategoryA(ox_nvtx_domain, OX_NVTX_CAT_RUN, "run");
  nvtxDomainNameCategoryA(ox_nvtx_domain, OX_NVTX_CAT_NODE, "node");
  nvtxDomainNameCategoryA(ox_nvtx_domain, OX_NVTX_CAT_COPY, "copy");
}

bool ox_nvtx_available(void) {
  return true;
}

static void ox_nvtx_push(const char* name, uint32_t color, uint32_t category) {
  pthread_once(&ox_nvtx_once, ox_nvtx_init);
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof a);
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.category = category;
  a.colorType = NVTX_COLOR_ARGB;
  a.color = color;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  nvtxDomainRangePushEx(ox_nvtx_domain, &a);
  ox_nvtx_depth++;
}

void ox_nvtx_pop(void) {
  /* Only after a push on this thread, which ran the pthread_once. */
  if (ox_nvtx_depth <= 0) return;
  nvtxDomainRangePop(ox_nvtx_domain);
  ox_nvtx_depth--;
}

#else /* no NVTX headers: the switch never turns on, and nothing is pushed */

bool ox_nvtx_available(void) {
  return false;
}

static void ox_nvtx_push(const char* name, uint32_t color, uint32_t category) {
  (void)name;
  (void)color;
  (void)category;
}

void ox_nvtx_pop(void) {}

#endif

static bool ox_nvtx_on(OxProgram* s) {
  OxSessionRt* rt = s ? s->cfg.rt : NULL;
  return rt && rt->nvtx;
}

int ox_nvtx_create_begin(OxProgram* s) {
  int depth = ox_nvtx_depth;
  if (!ox_nvtx_on(s)) return depth;
  char name[512];
  snprintf(name, sizeof name, "session create %s", s->source ? s->source : "");
  ox_nvtx_push(name, OX_NVTX_SESSION_COLOR, OX_NVTX_CAT_SESSION);
  return depth;
}

void ox_nvtx_unwind(int depth) {
  while (ox_nvtx_depth > depth && ox_nvtx_depth > 0)
    ox_nvtx_pop();
}

void ox_nvtx_phase_push(OxProgram* s, const char* phase) {
  if (ox_nvtx_on(s)) ox_nvtx_push(phase, OX_NVTX_SESSION_COLOR, OX_NVTX_CAT_SESSION);
}

void ox_nvtx_phase_pop(OxProgram* s) {
  if (ox_nvtx_on(s)) ox_nvtx_pop();
}

bool ox_nvtx_run_push(const OxSessionRt* rt, const OnyxRunOptions* run) {
  if (!rt || !rt->nvtx) return false;
  if (run && run->tag && *run->tag) {
    char name[512];
    snprintf(name, sizeof name, "run %s", run->tag);
    ox_nvtx_push(name, OX_NVTX_RUN_COLOR, OX_NVTX_CAT_RUN);
  } else {
    ox_nvtx_push("run", OX_NVTX_RUN_COLOR, OX_NVTX_CAT_RUN);
  }
  return true;
}

static const char* ox_nvtx_ep(const OxProgram* s, int32_t ep) {
  return ep >= 0 && (size_t)ep < s->n_eps ? s->eps[ep].name : "host";
}

static uint32_t ox_nvtx_color(const char* provider) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const unsigned char* p = (const unsigned char*)provider; *p; p++)
    h = (h ^ *p) * 16777619u;
  return ox_nvtx_palette[h % (sizeof ox_nvtx_palette / sizeof *ox_nvtx_palette)];
}

void ox_nvtx_step_push(const OxProgram* s, const OxStep* st) {
  char name[512];
  if (st->kind == OX_STEP_COPY) {
    const char* value = s->plan.slots[st->in[0]].value->name;
    snprintf(name, sizeof name, "copy %s %s\xe2\x86\x92%s", value ? value : "",
             ox_nvtx_ep(s, st->copy_src_ep), ox_nvtx_ep(s, st->copy_dst_ep));
    ox_nvtx_push(name, OX_NVTX_COPY_COLOR, OX_NVTX_CAT_COPY);
    return;
  }
  const char* provider = ox_nvtx_ep(s, st->ep);
  if (st->kind == OX_STEP_GROUP) {
    const char* group = s->part.groups[st->group].name;
    snprintf(name, sizeof name, "%s [%s]", group ? group : "", provider);
  } else {
    snprintf(name, sizeof name, "%s (%s) [%s]", st->node->name ? st->node->name : "",
             st->node->op_type, provider);
  }
  ox_nvtx_push(name, ox_nvtx_color(provider), OX_NVTX_CAT_NODE);
}
