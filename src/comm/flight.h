/* The flight recorder: the last collectives and point-to-point operations of this process, kept in
 * a fixed ring so recording costs a few stores and no allocation. It answers "what was this rank
 * doing" after a failure: each entry has the communicator's context, the operation's sequence
 * number on it, its name, size, algorithm, state (started, done, failed) and times. The endpoint
 * dumps it as JSON when the job fails (STRATA_DIAG_DIR), for `strata diagnose` and the launcher.
 */
#ifndef ST_FLIGHT_H
#define ST_FLIGHT_H

#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "strata/status.h"

#define ST_FLIGHT_LEN 64 /* entries kept */

enum st_flight_state { ST_FLIGHT_STARTED = 0, ST_FLIGHT_DONE, ST_FLIGHT_FAILED };

typedef struct st_flight_entry {
    uint64_t id;       /* position in the ring's history (1, 2, ...); 0 = empty */
    uint32_t ctx;      /* the communicator's context id (1 = world) */
    uint32_t seq;      /* the operation's number on that communicator (1-based) */
    const char *what;  /* "allreduce", "send", ... (static strings) */
    const char *algo;  /* static string or NULL */
    uint64_t bytes;
    int state;
    uint64_t start_ns, end_ns;
} st_flight_entry_t;

typedef struct st_flight {
    st_flight_entry_t ring[ST_FLIGHT_LEN];
    uint64_t next;      /* entries recorded so far */
    uint64_t completed; /* operations that ended (done or failed) */
} st_flight_t;

/* Records the start of an operation; returns its id for st_flight_end. */
uint64_t st_flight_begin(st_flight_t *f, uint32_t ctx, uint32_t seq, const char *what,
                         const char *algo, uint64_t bytes);

/* Records the end of operation `id` (no-op if it has left the ring). */
void st_flight_end(st_flight_t *f, uint64_t id, strata_status_t rc);

/* Writes "allreduce #12" for the newest operation that ended well ("on communicator C" added
 * outside the world's), plus how many operations ended so far; "nothing completed" if none. */
void st_flight_last_done(const st_flight_t *f, char *buf, size_t len);

/* The ring, oldest first, as a new JSON array of objects {ctx, seq, op, algo, bytes, state, ms}
 * (ms: duration, -1 while started). The caller owns it. */
json_object *st_flight_to_json(const st_flight_t *f);

#endif
