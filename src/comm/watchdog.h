/* The watchdog: finds the rank a timed-out job is stuck behind.
 *
 * A rank whose wait lasts longer than one heartbeat period (a quarter of the timeout, 100 ms to
 * 1 s) publishes a heartbeat in the store, "wait/<rank>" = "<beat> <awaited rank> <unix ms>
 * <what>", once per period until the wait ends, and withdraws it then ("... -1 ... idle; <last
 * completed operation>"). A rank whose waits are short says how far it got at most once a period,
 * at the end of a wait ("... idle; allreduce #1233 completed (1240 operations in all)"): one
 * message without an answer per period.
 *
 * When a wait reaches its deadline the rank takes a census: it reads every rank's heartbeat, waits
 * two periods (beating itself), and reads them again. Ranks whose beat advanced are alive and
 * waiting; while more than one has not, it looks again (up to two more windows), so that a live
 * rank that merely did not run for a while is not taken for the stopped one. The ranks still silent
 * are suspects (stopped, stuck outside the library, or dead). The culprit is the suspect at the end
 * of the waiting chain (it waits on no other suspect), the one most ranks wait on. It is reported
 * to the store (st_store_report), whose first notice every rank then returns:
 * "rank 3 (host h pid p, rack1/h) failed: stopped responding during allreduce #12; ranks 0-2,4-7
 * were waiting for it; its last heartbeat, 0.4 s before: idle; allreduce #11 completed (11
 * operations in all) (seen by rank 5)".
 * A store that does not answer the census is itself the suspect: rank 0, when rank 0 serves it.
 * When every rank is alive and waiting (mismatched collectives) there is no culprit and the rank
 * aborts naming what it waited for.
 */
#ifndef ST_WATCHDOG_H
#define ST_WATCHDOG_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/status.h"

typedef struct st_ep st_ep_t;

typedef struct st_watch {
    uint64_t period_ns; /* heartbeat period */
    uint64_t beats;     /* heartbeats published so far */
    uint64_t next_ns;   /* when the next one is due */
    bool waiting;       /* a "waiting" heartbeat is out: withdraw it when the wait ends */
} st_watch_t;

void st_watch_init(st_watch_t *w, long long timeout_ms);

/* True when a wait that began at `since_ns` owes a heartbeat now. */
bool st_watch_due(const st_watch_t *w, uint64_t since_ns);

/* Publishes a heartbeat: this rank waits for `what`, on world rank `awaited` (-1: none). */
void st_watch_beat(st_ep_t *ep, st_watch_t *w, const char *what, int awaited);

/* A wait ended at `now_ns`: withdraws the "waiting" heartbeat if one is out, and otherwise
 * publishes a progress heartbeat ("idle; allreduce #12 completed (...)") once per period. */
void st_watch_rest(st_ep_t *ep, st_watch_t *w, uint64_t now_ns);

/* A wait reached its deadline waiting for `what` (on world rank `awaited`, -1 if none): takes the
 * census, reports the culprit, and fails the endpoint with STRATA_ERR_TIMEOUT and the job's first
 * notice (or with the abort message when there is no culprit). Returns that failure. */
strata_status_t st_watch_verdict(st_ep_t *ep, st_watch_t *w, const char *what, int awaited);

#endif
