/* Mailboxes: the latency path of small blocking allreduces among the ranks of one host.
 *
 * A message through the schedules costs a request, an algorithm choice, a schedule, matching and a
 * transport ring: ~0.8 us for 8 bytes between two ranks, where the data itself crosses in one cache
 * line. Here every rank of the communicator owns a small region of shared memory (strata_mem_alloc
 * memory, mapped by its peers once) with two slots; a call writes its contribution into its slot
 * and publishes the call's number, then reads each peer's slot as soon as that peer has published
 * the same number, and reduces all contributions in rank order, so every rank computes the same
 * bits. Slots alternate between calls: a rank can be at most one call ahead of a peer, so the slot
 * it writes was read by everyone already.
 *
 * A waiting rank spins, then sleeps on its process's doorbell through the endpoint (st_ep_wait),
 * which a publishing peer rings; the wait keeps the endpoint and other requests in flight moving,
 * and honours the communicator's timeout and failure detection like any other wait.
 *
 * Served: blocking allreduces of at most STRATA_SHM_MAILBOX bytes, on communicators of 2 to
 * ST_MAILBOX_MAX_RANKS ranks all on this host, unless STRATA_COMM_ALGO forces an allreduce
 * algorithm. The first such call sets the mailboxes up, collectively; if any rank cannot, none uses
 * them on that communicator.
 */
#ifndef ST_MAILBOX_H
#define ST_MAILBOX_H

#include <stdbool.h>
#include <stddef.h>

#include "strata/comm.h"

#define ST_MAILBOX_MAX_RANKS 8

typedef struct st_mailbox st_mailbox_t;

/* True when a blocking allreduce of `bytes` on `comm` goes through the mailboxes; the same answer
 * on every rank of the communicator. */
bool st_mailbox_serves(const strata_comm_t *comm, size_t bytes);

/* The allreduce through the mailboxes (arguments already checked; sendbuf may equal recvbuf),
 * setting them up on the communicator's first such call. *served is false when the communicator
 * cannot use them (the call is then the caller's to make, on every rank alike). */
strata_status_t st_mailbox_allreduce(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, strata_dtype_t dtype, strata_op_t op,
                                     bool *served);

/* Frees this rank's mailbox of a communicator being destroyed (NULL: nothing). */
void st_mailbox_free(strata_comm_t *comm, st_mailbox_t *mb);

#endif
