/* The transport interface. A transport moves the messages queued on a peer (st_peer_t sendq) and
 * hands arriving messages to the endpoint's matcher; it never sees dtypes or collectives. The
 * endpoint picks, per peer, the first transport in st_transports[] whose can_connect() accepts. */
#ifndef ST_TRANSPORT_H
#define ST_TRANSPORT_H

#include <poll.h>

#include "comm/endpoint.h"

typedef struct st_transport st_transport_t; /* per-endpoint transport state */

struct st_transport_ops {
    const char *name;
    /* Endpoint-wide setup: listeners, doorbells. *out may stay NULL if nothing is needed. */
    strata_status_t (*open)(st_ep_t *ep, st_transport_t **out);
    /* Text this rank publishes for peers (e.g. "ip:port"); may be empty. */
    void (*address)(st_transport_t *t, char *buf, size_t len);
    bool (*can_connect)(st_ep_t *ep, st_transport_t *t, const st_peer_t *peer);
    /* Sets up peer->conn (lazily, on first use of the peer). */
    strata_status_t (*connect)(st_ep_t *ep, st_transport_t *t, st_peer_t *peer);
    /* Moves data for one peer; sets *moved when anything happened. */
    strata_status_t (*progress)(st_ep_t *ep, st_transport_t *t, st_peer_t *peer, bool drain,
                                bool *moved);
    /* Endpoint-wide progress not tied to a connected peer (accepting connections). */
    strata_status_t (*progress_global)(st_ep_t *ep, st_transport_t *t, bool *moved);
    /* Adds what to sleep on for `peer` (fds) and whether a poll-less sleep (futex) is possible. */
    int (*pollfds)(st_ep_t *ep, st_transport_t *t, st_peer_t *peer, struct pollfd *fds, int max);
    /* Endpoint-wide fds (listeners). */
    int (*pollfds_global)(st_ep_t *ep, st_transport_t *t, struct pollfd *fds, int max);
    /* True when the transport needs poll() on sockets to sleep (else the shm doorbell suffices). */
    bool needs_poll;
    /* Wakes the peer's process if it sleeps waiting (shm: rings its doorbell); NULL where a peer
     * sleeping in poll() wakes on its own when data arrives. */
    void (*wake)(st_ep_t *ep, st_transport_t *t, st_peer_t *peer);
    /* Checks liveness of the peer's process where the transport cannot see a close (shm). */
    strata_status_t (*check_peer)(st_ep_t *ep, st_transport_t *t, st_peer_t *peer);
    void (*disconnect)(st_ep_t *ep, st_transport_t *t, st_peer_t *peer);
    void (*close)(st_ep_t *ep, st_transport_t *t);
};

extern const st_transport_ops_t st_shm_ops;
extern const st_transport_ops_t st_tcp_ops;
#ifdef STRATA_HAVE_UCX
extern const st_transport_ops_t st_ucx_ops; /* ucx.c: built only when libucx is found */
#endif

/* shm only: the process's doorbell. A sleeper announces itself with begin (which returns the bell's
 * sequence), re-checks for work, then waits until a peer rings (the sequence moves) or timeout_ms;
 * end withdraws the announcement. Peers ring only announced sleepers, so the fast path stays free
 * of syscalls. */
uint32_t st_shm_sleep_begin(st_transport_t *t);
void st_shm_sleep_wait(st_transport_t *t, uint32_t seq, int timeout_ms);
void st_shm_sleep_end(st_transport_t *t);

#endif
