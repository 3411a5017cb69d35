/* The endpoint: one per process, shared by the world communicator and all its splits.
 *
 * It owns the store connection, the transports and one st_peer_t per world rank, and it moves
 * tagged messages: a send is queued on its peer and pushed by the peer's transport; an incoming
 * message is matched (by exact 64-bit tag, FIFO per peer) to a posted receive, or parked as
 * "unexpected" until one is posted. A receive may reduce instead of copy: the transport hands each
 * arriving chunk to st_msg_deliver(), which computes dst = src op chunk, so a reduction overlaps
 * the transfer and costs no extra copy.
 *
 * Waiting: st_ep_wait() polls for STRATA_COMM_SPIN_US, then sleeps on the process's doorbell (a
 * futex in shared memory that shm peers ring) or in poll() on sockets, so ranks can outnumber
 * cores. While waiting it watches for failures: a peer's process exiting (pidfd), a TCP connection
 * closing, a failure notice from the store. The first failure is sticky: every later operation
 * of the process fails with it.
 */
#ifndef ST_ENDPOINT_H
#define ST_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/bootstrap/store.h"
#include "comm/flight.h"
#include "strata/comm.h"

typedef struct st_ep st_ep_t;
typedef struct st_peer st_peer_t;
typedef struct st_msg st_msg_t;
typedef struct st_transport_ops st_transport_ops_t;

enum st_msg_state { ST_MSG_IDLE = 0, ST_MSG_QUEUED, ST_MSG_ACTIVE, ST_MSG_DONE };

/* What a transport measured of the messages it received from one peer (strata_link_stats_t: which
 * messages, and how). */
typedef struct st_link_meter {
    uint64_t messages, bytes, ns;
} st_link_meter_t;

/* One send or receive in flight. Embedded in schedules; the endpoint never allocates these for
 * posted operations, only for unexpected arrivals. */
struct st_msg {
    st_msg_t *next;
    int peer;          /* world rank */
    uint64_t tag;
    bool is_send;
    bool reduce;       /* receive combines: rbuf = rsrc op incoming */
    uint8_t state;
    uint8_t dtype, op;
    uint8_t esize;     /* element size: reductions need whole elements */
    const void *sbuf;  /* send: data */
    void *rbuf;        /* receive: destination */
    const void *rsrc;  /* receive-reduce: the other operand (may equal rbuf) */
    size_t bytes;      /* send: size; receive: capacity; unexpected: size */
    size_t done;       /* bytes moved so far */
    int *pending;      /* decremented when the message completes (NULL: none) */
    st_msg_t *bound;   /* unexpected: the receive waiting for it */
    bool unexpected;
};

struct st_peer {
    int rank;
    bool resolved;               /* address fetched from the store */
    bool failed;
    uint64_t host_hash;
    int pid;
    char addr[64];               /* tcp "ip:port" */
    char host[64];               /* for messages */
    char path[128];              /* its place on the fabric, for messages ("" if unknown) */
    const st_transport_ops_t *tp; /* chosen transport, NULL until first use */
    void *conn;                  /* transport state */
    st_msg_t *sendq, *sendq_tail;
    st_msg_t *recvq, *recvq_tail;
    st_msg_t *unexq, *unexq_tail;
    bool listed;                 /* in ep->live */
    st_link_meter_t rx_meter;    /* large messages received from this peer, timed (tcp) */
};

typedef struct st_win st_win_t;

/* Creates the endpoint of `rank`: connects to the store (hosting it first on rank 0 when asked),
 * opens the transports, publishes this rank's address (with `path`, its place on the fabric, for
 * messages naming it and st_ep_where; "" when unknown) and waits until all ranks have. */
strata_status_t st_ep_create(const strata_comm_config_t *cfg, const char *path, st_ep_t **out);

/* Says goodbye to the store (unless failed), closes every connection, frees. */
void st_ep_destroy(st_ep_t *ep);

int st_ep_rank(const st_ep_t *ep);
/* This process's window (window.h): its shareable memory and its view of peers' memory. */
st_win_t *st_ep_window(const st_ep_t *ep);
/* This process's flight recorder (flight.h). */
st_flight_t *st_ep_flight(st_ep_t *ep);
/* True when rank 0's process serves the store (losing the store is losing rank 0). */
bool st_ep_store_on_rank0(const st_ep_t *ep);
/* Nanoseconds spent in st_ep_wait so far. */
uint64_t st_ep_wait_ns(const st_ep_t *ep);
int st_ep_size(const st_ep_t *ep);
long long st_ep_timeout_ms(const st_ep_t *ep);
/* True when every rank of the job shares this host and shared memory is allowed. */
bool st_ep_single_host(const st_ep_t *ep);
bool st_ep_force_tcp(const st_ep_t *ep);
/* Which peers the UCX transport serves (strata_comm_config_t.ucx). */
strata_comm_ucx_t st_ep_ucx(const st_ep_t *ep);
/* This process's host identity (host name, network namespace, boot id), hashed. */
uint64_t st_ep_host_hash(const st_ep_t *ep);

/* Queues a send / posts a receive. `m` must be filled (peer, tag, buffers, bytes, reduce fields)
 * and stay alive until it is ST_MSG_DONE. Fails fast if the endpoint has failed. */
strata_status_t st_ep_post_send(st_ep_t *ep, st_msg_t *m);
strata_status_t st_ep_post_recv(st_ep_t *ep, st_msg_t *m);

/* One pass over the transports. `drain` lets unmatched arrivals be buffered as unexpected
 * (otherwise they wait in the transport, keeping back-pressure). Sets *moved when anything moved.
 * Returns the sticky failure, if any. */
strata_status_t st_ep_progress(st_ep_t *ep, bool drain, bool *moved);

/* Says what a wait waits for: a sentence for messages, and the world rank it waits on first (-1
 * when none), for the watchdog (watchdog.h). */
typedef void (*st_wait_what_fn)(void *arg, char *buf, size_t len, int *awaited);

/* Wakes rank `rank`'s process if it sleeps in st_ep_wait (connecting to it first if need be), for
 * callers that hand it data outside the transports (comm/mailbox.c). */
strata_status_t st_ep_wake(st_ep_t *ep, int rank);

/* Waits until done(arg) is true, progressing; spins briefly then sleeps. A long wait publishes
 * heartbeats; at `deadline_ns` the watchdog finds the rank that stopped responding and the wait
 * fails with STRATA_ERR_TIMEOUT naming it (or what was awaited, from what(arg)). */
strata_status_t st_ep_wait(st_ep_t *ep, bool (*done)(void *arg), void *arg, st_wait_what_fn what,
                           uint64_t deadline_ns);

/* Records a failure (first one wins), raising it in the thread's message; returns it. The first
 * failure also dumps the flight recorder when STRATA_DIAG_DIR is set. */
strata_status_t st_ep_fail(st_ep_t *ep, strata_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A transport saw `rank` close or die ("<peer name> <fmt...>"). Reports the store's failure notice
 * instead when one arrives within a moment (the root cause elsewhere), else this. */
strata_status_t st_ep_peer_lost(st_ep_t *ep, int rank, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* As st_ep_fail, naming `culprit` (a world rank, -1 = unknown) as the rank the failure is blamed on,
 * for the flight-recorder dump. */
strata_status_t st_ep_fail_blaming(st_ep_t *ep, int culprit, strata_status_t status,
                                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The rank the failure is blamed on (-1: none or unknown). */
int st_ep_culprit(const st_ep_t *ep);

/* Reads the store's failure notices; on one, fails the endpoint with it (the job's root cause) and
 * returns that failure. */
strata_status_t st_ep_check_store(st_ep_t *ep);

/* The sticky failure (STRATA_OK if none); re-raises its message on this thread. */
strata_status_t st_ep_error(const st_ep_t *ep);

/* Aborts: tells the store, fails everything locally with STRATA_ERR_ABORTED. */
void st_ep_abort(st_ep_t *ep, const char *reason);

/* Names a peer for messages: "rank 3 (host h)". Static per-thread buffer. */
const char *st_ep_peer_name(st_ep_t *ep, int rank);

/* Writes where `rank` runs, as it published it: "host h 10.0.0.3, rack1/h" (its host name, the
 * address of its TCP port, its fabric path if it had one), looked up in the store; "" when the
 * lookup fails, which does not fail the endpoint. */
void st_ep_where(st_ep_t *ep, int rank, char *buf, size_t len);

/* ---- for transports ---------------------------------------------------------------------------- */

/* A message header arrived from `peer`: returns the receive it goes to (a posted receive, or a new
 * unexpected buffer when `drain`), or NULL to leave it waiting. Errors (truncation) fail the ep. */
st_msg_t *st_ep_match(st_ep_t *ep, st_peer_t *peer, uint64_t tag, size_t bytes, bool drain);

/* Delivers `len` bytes at offset `off` of receive `m` (copy or reduce); completes it when full.
 * `data` may already be the destination (a transport that received in place). A transport must not
 * touch `m` after delivering its last bytes: an unexpected message is freed then. */
void st_msg_deliver(st_ep_t *ep, st_msg_t *m, size_t off, const void *data, size_t len);

/* Marks a message complete (send drained or receive filled). */
void st_msg_complete(st_ep_t *ep, st_msg_t *m);

/* The endpoint's job identity and store, for transports. */
const char *st_ep_job_id(const st_ep_t *ep);
const char *st_ep_secret(const st_ep_t *ep);
st_peer_t *st_ep_peer(st_ep_t *ep, int rank);
st_store_t *st_ep_store(const st_ep_t *ep);

/* A transport accepted a connection from a peer this rank has not used yet: it serves that peer. */
void st_ep_adopt_peer(st_ep_t *ep, st_peer_t *p, const st_transport_ops_t *ops);

#endif
