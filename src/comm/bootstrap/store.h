/* The bootstrap key-value store: a TCP server and its client.
 *
 * Ranks rendezvous through it (each publishes its address; peers look it up lazily) and it doubles as
 * the job's failure detector: every rank keeps one connection to it, and when a ranked client's
 * connection drops without a goodbye, or a client calls st_store_abort(), the server pushes a notice
 * to every connected client naming the failed rank. Clients see the notice through
 * st_store_check_notice(), which they call while they wait.
 *
 * Protocol (little endian): every frame is u32 length, u8 type, body. A client's first frame must be
 * HELLO carrying the protocol magic, the job secret and its rank/host/pid; anything else, a wrong
 * secret, an oversized frame or silence past the hello timeout closes that connection without
 * disturbing the others.
 *
 * The server is a single-threaded poll loop, so it can run in a thread of rank 0, in `strata store`,
 * or be driven step by step by a test parent that must not have threads when it forks.
 */
#ifndef ST_STORE_H
#define ST_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/comm.h"
#include "strata/status.h"

typedef struct strata_store_server st_store_server_t; /* strata_store_server_t in comm.h */
typedef struct st_store st_store_t;

/* ---- server ------------------------------------------------------------------------------------ */

/* How many connections that have not completed HELLO the server keeps open at once; a newcomer
 * closes the one that has waited longest. Each costs a descriptor and at most ST_STORE_HELLO_MAX
 * bytes (store_proto.h). */
#define ST_STORE_PENDING_MAX 64

/* Listens on `addr` ("host:port"; port 0 picks a free port; host "" or "0.0.0.0" = all). `secret`
 * may be "" (then any client with the right magic is accepted). Nothing runs until polled. */
strata_status_t st_store_server_open(const char *addr, const char *secret,
                                     st_store_server_t **out);

/* The port actually bound. */
int st_store_server_port(const st_store_server_t *srv);

/* Serves for up to timeout_ms (0 = do what is ready, return): one poll round that waits at most
 * timeout_ms (< 0 = no limit) for activity, serves what is ready and returns, so callers loop and
 * can do other work (waitpid) between rounds. Not while the server thread runs. Returns STRATA_OK,
 * or an error only for a failure of the listening socket itself; bad clients are dropped silently
 * (logged). */
strata_status_t st_store_server_poll(st_store_server_t *srv, int timeout_ms);

/* Starts a thread that polls until st_store_server_close(). */
strata_status_t st_store_server_start_thread(st_store_server_t *srv);

/* Number of ranked clients connected and not yet said goodbye. */
int st_store_server_live_ranks(const st_store_server_t *srv);

/* Stops the thread (if any), first serving until every ranked client has said goodbye,
 * disconnected or been reported failed by another rank (st_store_report: a stopped rank keeps its
 * connection open), or `linger_ms` passed, so a rank-0 host does not pull the store from under
 * peers that are still finishing. Frees everything. NULL is a no-op. */
void st_store_server_close(st_store_server_t *srv, int linger_ms);

/* A snapshot of the server's counters, safe to take from any thread while the server thread runs
 * (for tests, and for tools that report on a store). */
typedef strata_store_stats_t st_store_server_stats_t; /* comm.h */

void st_store_server_stats(const st_store_server_t *srv, st_store_server_stats_t *out);

/* Changes how long a new connection may stay silent before HELLO (default 5000 ms). Call before
 * serving; tests use it to check the silent-client rule quickly. */
void st_store_server_set_hello_timeout(st_store_server_t *srv, int timeout_ms);

/* In a child forked from the process that serves `srv`: closes the child's copies of the server's
 * sockets and frees the child's copy of the state, without serving or telling any client, so the
 * parent keeps serving alone (a child holding a copy of the listener or of a connection would keep
 * that socket open after the parent closes it). NULL is a no-op. */
void st_store_server_atfork_child(st_store_server_t *srv);

/* ---- client ------------------------------------------------------------------------------------ */

/* A blocking TCP connection to "host:port", retrying (the server may start after us) until the
 * deadline (st_deadline_ms); the rendezvous clients use it too. */
strata_status_t st_store_dial(const char *addr, uint64_t deadline, long long timeout_ms, int *fd_out);

/* Connects (retrying until timeout_ms, as the server may start later), sends HELLO with the secret
 * and identity (rank -1 for tools), and waits for the server's acceptance. A refused hello is
 * STRATA_ERR_REMOTE with the server's reason. timeout_ms (< 0 = never) also bounds how long later
 * calls wait for the store to answer a SET, ADD or ABORT. A client is used by one thread at a time. */
strata_status_t st_store_connect(const char *addr, const char *secret, int rank,
                                 long long timeout_ms, st_store_t **out);

/* st_store_connect for a rank that knows its place on the fabric ("rack1/h07"): the store names
 * it with its host and place in the notices it sends about it. */
strata_status_t st_store_connect_at(const char *addr, const char *secret, int rank,
                                    const char *place, long long timeout_ms, st_store_t **out);

strata_status_t st_store_set(st_store_t *st, const char *key, const void *val, size_t len);

/* A SET that does not wait for its answer (heartbeats: a store that stopped answering must not stall
 * the caller). Blocks only while the socket's buffer is full, bounded by the housekeeping limit. */
strata_status_t st_store_post_set(st_store_t *st, const char *key, const void *val, size_t len);

/* Waits until `key` exists (or timeout_ms passes: STRATA_ERR_TIMEOUT naming the key; 0 = only if
 * already set; < 0 = never), then returns a malloc'd copy of its value (caller frees) and its
 * length. A failure notice, received while waiting or before (the job is dead, so keys may never
 * come), ends it with STRATA_ERR_PEER_FAILED and the notice's text. The copy has a NUL byte after
 * its `len` bytes (not counted), so text values can be used as C strings. */
strata_status_t st_store_get(st_store_t *st, const char *key, void **val, size_t *len,
                             long long timeout_ms);

/* Atomically adds `delta` to the integer stored at `key` (missing = 0); returns the new value. The
 * value is stored as decimal text ("42"), so a GET of the key reads it; adding to a key holding
 * anything else, or overflowing int64, is STRATA_ERR_REMOTE naming the key. */
strata_status_t st_store_add(st_store_t *st, const char *key, int64_t delta, int64_t *result);

/* Waits until all keys exist; errors as st_store_get (the timeout message names the keys). */
strata_status_t st_store_wait(st_store_t *st, const char *const *keys, int nkeys,
                              long long timeout_ms);

/* Tells the server to push a failure notice naming this client and `reason` to everyone. */
strata_status_t st_store_abort(st_store_t *st, const char *reason);

/* Reports that this rank saw `rank` die (`what`: how, e.g. "exited while ..."), and waits for the
 * answer. The store announces it unless a failure was announced already; either way the job's
 * first notice has arrived when this returns, so st_store_check_notice() then names the root
 * cause. An error means the store could not be asked (lost: see st_store_lost()). */
strata_status_t st_store_report(st_store_t *st, int rank, const char *what);

/* The timeout for answers (as given to st_store_connect), and a way to change it for a while. */
long long st_store_timeout(const st_store_t *st);
void st_store_set_timeout(st_store_t *st, long long timeout_ms);

/* True when the connection to the store broke without a goodbye (the store, or its host, is gone). */
bool st_store_lost(const st_store_t *st);

/* The client's socket, for callers that poll it while sleeping (readable = a notice may be there). */
int st_store_fd(const st_store_t *st);

/* Reads any pending notices without blocking. Returns STRATA_OK if none arrived so far, else
 * STRATA_ERR_PEER_FAILED (sticky) with the notice text ("rank 3 (host h pid 42) failed: ...");
 * *failed_rank (may be NULL) gets the rank named. Loss of the store itself is also
 * STRATA_ERR_PEER_FAILED naming the store. */
strata_status_t st_store_check_notice(st_store_t *st, int *failed_rank);

/* Closes the connection; with `goodbye` the server is told this was a clean exit. NULL is a no-op. */
void st_store_close(st_store_t *st, bool goodbye);

#endif
