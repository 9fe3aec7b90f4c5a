/* ox_streams.h — ordering a run's work across provider streams.
 *
 * Every step's work goes to one "agent": the stream of the provider that
 * queues it (an EP index), or the host thread (OX_AGENT_HOST: synchronous,
 * finished when the step returns). Work on one stream runs in order. Where a
 * step reads a value that another agent's stream produced (a crossing), the
 * producer's provider records an event after the producing step and the host
 * thread waits on it (wait_event(e, NULL)) before queuing the consumer. A
 * provider's events and streams belong to that provider's EP (wait_event
 * checks both are its own), so another provider's stream cannot wait on the
 * device: the host waits on the event, which returns as soon as the producer's
 * work is done rather than everything queued on that stream (sync_stream).
 * A provider without event slots is synchronized with sync_stream instead.
 *
 * Built by host/plan/streams.c at plan time (events are created once per
 * crossing and reused: each run takes a set from a pool owned by the plan, so
 * concurrent runs never share an event); applied by host/exec/executor.c. */
#ifndef OX_STREAMS_H
#define OX_STREAMS_H

#include <pthread.h>
#include "ox_program.h"

#define OX_AGENT_HOST (-1)
#define OX_NO_EVENT   SIZE_MAX

/* How a copy step moves its value; the same order of choice as
 * ox_ep_copy_tensor. STAGED goes through ox_ep_copy_tensor itself, which
 * synchronizes both providers' streams. */
typedef enum OxCopyPath {
  OX_COPY_HOST = 0, /* memcpy on the host thread: both memories are host-addressable */
  OX_COPY_BY_DST,   /* the destination provider's copy_tensors, on its stream */
  OX_COPY_BY_SRC,   /* the source provider's copy_tensors, on its stream */
  OX_COPY_STAGED,   /* through a host buffer, synchronously */
} OxCopyPath;

/* One crossing: an event recorded on `ep`'s stream after step `step`. */
typedef struct OxCrossing {
  int32_t ep;
  size_t step;
  bool has_event; /* false: the provider has no event slots; consumers sync its stream */
} OxCrossing;

typedef struct OxStepSync {
  int32_t agent;     /* OX_AGENT_HOST or the EP whose stream gets the step's work */
  int32_t copy_path; /* OxCopyPath, COPY steps only */
  size_t record;     /* crossing whose event is recorded after this step, or OX_NO_EVENT */
  size_t* waits;     /* crossings the host waits for before this step */
  size_t n_waits;
} OxStepSync;

/* A stream that touched a slot and the last step it did so. */
typedef struct OxStreamUse {
  int32_t ep;
  size_t last;
} OxStreamUse;

/* When a slot's memory may go back to its allocator after its last use.
 * Immediately, when every step touching it ran on the host thread (it is
 * finished), or on one stream whose memory only that stream ever writes (a
 * later owner of the memory is written by work queued behind every reader).
 * Otherwise the free is deferred until the host knows each stream in
 * uses[first .. first + n) has finished its last step on the slot (an event
 * it waited on, or the synchronization at the end of the run). */
typedef struct OxSlotSync {
  bool deferred;
  size_t first, n;
} OxSlotSync;

/* One event per crossing, for one run at a time. */
typedef struct OxEventSet {
  struct OxEventSet* next;
  OnyxEvent** ev; /* per crossing; NULL where the crossing has no event */
} OxEventSet;

typedef struct OxStreamPlan {
  OxStepSync* steps; /* per plan step */
  size_t n_steps;
  OxSlotSync* slots; /* per plan slot */
  size_t n_slots;
  OxStreamUse* uses;
  size_t n_uses;
  OxCrossing* crossings;
  size_t n_crossings;
  size_t n_events;      /* crossings with has_event */
  pthread_mutex_t lock; /* guards free_sets */
  OxEventSet* free_sets;
} OxStreamPlan;

/* Builds s->plan.streams from the finished steps and slots (called by
 * ox_plan_build, before the memory plan, which keeps deferred slots' memory
 * to the end of the run) and creates the first event set. */
OnyxStatus* ox_plan_streams(struct OxProgram* s);
/* Releases the events and the tables (with the plan). */
void ox_plan_streams_clear(struct OxProgram* s);
/* True when slot k's free is deferred (see OxSlotSync). */
bool ox_slot_deferred(const OxPlan* P, size_t k);
/* An event set for one run, from the pool or newly created (NULL set when
 * the plan has no events); give it back once every stream is synchronized. */
OnyxStatus* ox_event_set_take(struct OxProgram* s, OxEventSet** out);
void ox_event_set_give(struct OxProgram* s, OxEventSet* set);

#endif
