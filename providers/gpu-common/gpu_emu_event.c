/* gpu_emu_event.c — the polled and bounded event waits of gpu_rt.h on the
 * host emulation (gpu_emu.c), with a gate the tests control.
 *
 * The emulated kernels run when they are launched, so every event's work is
 * done when it is recorded. To let the tests see a run that has returned
 * before its device work finished, gpuemu_event_gate (looked up with dlsym
 * in the loaded provider) sets how gpurt_event_query and
 * gpurt_event_wait_for answer for every event:
 *   GPUEMU_GATE_OPEN (the default): complete;
 *   GPUEMU_GATE_HELD: not complete; a wait blocks until the gate changes or
 *     its time runs out;
 *   GPUEMU_GATE_FAIL: the work failed (an asynchronous device fault).
 * The gate changes nothing else (stream and event synchronization of
 * gpu_emu.c return at once). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "gpu_rt.h"

#define EMU_OK        0
#define EMU_FAIL      1
#define EMU_NOT_READY 3

enum { GPUEMU_GATE_OPEN = 0, GPUEMU_GATE_HELD = 1, GPUEMU_GATE_FAIL = 2 };

static pthread_mutex_t g_gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_gate_changed = PTHREAD_COND_INITIALIZER;
static int g_gate = GPUEMU_GATE_OPEN;

/* A test hook: sets the gate (one of the GPUEMU_GATE_ values) and wakes the
 * waits. Returns the previous value, or -1 for an unknown one. */
__attribute__((visibility("default"))) int gpuemu_event_gate(int mode) {
  if (mode != GPUEMU_GATE_OPEN && mode != GPUEMU_GATE_HELD && mode != GPUEMU_GATE_FAIL) return -1;
  pthread_mutex_lock(&g_gate_lock);
  int old = g_gate;
  g_gate = mode;
  pthread_cond_broadcast(&g_gate_changed);
  pthread_mutex_unlock(&g_gate_lock);
  return old;
}

static int gate_code(int gate) {
  return gate == GPUEMU_GATE_OPEN ? EMU_OK : gate == GPUEMU_GATE_HELD ? EMU_NOT_READY : EMU_FAIL;
}

int gpurt_error_not_ready(void) {
  return EMU_NOT_READY;
}

int gpurt_event_query(void* e) {
  (void)e;
  pthread_mutex_lock(&g_gate_lock);
  int code = gate_code(g_gate);
  pthread_mutex_unlock(&g_gate_lock);
  return code;
}

int gpurt_event_wait_for(void* e, int64_t timeout_ms) {
  (void)e;
  struct timespec end;
  clock_gettime(CLOCK_REALTIME, &end); /* pthread_cond_timedwait's clock */
  if (timeout_ms >= 0) {
    int64_t ms = timeout_ms > INT32_MAX ? INT32_MAX : timeout_ms;
    end.tv_sec += (time_t)(ms / 1000);
    end.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (end.tv_nsec >= 1000000000L) {
      end.tv_sec++;
      end.tv_nsec -= 1000000000L;
    }
  }
  pthread_mutex_lock(&g_gate_lock);
  while (g_gate == GPUEMU_GATE_HELD) {
    if (timeout_ms < 0) {
      pthread_cond_wait(&g_gate_changed, &g_gate_lock);
    } else if (pthread_cond_timedwait(&g_gate_changed, &g_gate_lock, &end) == ETIMEDOUT) {
      break;
    }
  }
  int code = gate_code(g_gate);
  pthread_mutex_unlock(&g_gate_lock);
  return code;
}
