/* The TCP transport's settings, read from the STRATA_TCP_* knobs (docs/comm.md, "TCP"): how many
 * connections carry each direction of a pair and how large messages are striped over them, and the
 * retransmit and keepalive limits that let a dead host be found within the communicator timeout
 * instead of the kernel's minutes (retransmits) or hours (keepalive). Kept apart from tcp.c so the
 * parsing and its errors can be tested without sockets. */
#ifndef ST_TCP_OPTS_H
#define ST_TCP_OPTS_H

#include <stddef.h>

#include "strata/status.h"

#define ST_TCP_CONNS_MAX 16 /* connections per peer and direction */

typedef struct st_tcp_opts {
    int conns;              /* connections per peer and direction, 1..ST_TCP_CONNS_MAX */
    size_t stripe_min;      /* a message of at least twice this is striped; each slice >= this */
    int bufsize;            /* SO_SNDBUF/SO_RCVBUF, 0: kernel autotuning */
    int user_timeout_ms;    /* TCP_USER_TIMEOUT, 0: the kernel's retransmit limit */
    int keepidle_s;         /* SO_KEEPALIVE after this much silence, 0: keepalive off */
    int keepintvl_s;        /* ... probing every this many seconds */
    int keepcnt;            /* ... and giving up after this many unanswered probes */
} st_tcp_opts_t;

/* Reads the knobs. "auto" settings derive from `comm_timeout_ms` (the communicator timeout, < 0 =
 * none): TCP_USER_TIMEOUT = the timeout, keepalive idle T/4, interval T/12, 3 probes (a silent host
 * is declared dead after T/2). A value that does not parse or is out of range is an error naming
 * the knob, what it holds and what was expected. */
strata_status_t st_tcp_opts_read(long long comm_timeout_ms, st_tcp_opts_t *out);

/* How a message of `bytes` is cut for `conns` connections: returns the number of slices k (1 for a
 * message under 2 * stripe_min); slice i starts at i * *slice (a multiple of 64 bytes, so reductions
 * see whole elements) and the last one, never empty, ends at `bytes`. Given the k it returned and
 * stripe_min 1, it returns k and the same slice again: a receiver recomputes the cut from k. */
int st_tcp_stripes(size_t bytes, int conns, size_t stripe_min, size_t *slice);

#endif
