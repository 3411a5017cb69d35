/* Direct algorithms for a communicator on one host: every rank reaches its peers' buffers through
 * their windows (window.h) instead of sending messages.
 *
 *   1. exchange: each rank sends every peer a description of its send and receive buffers;
 *   2. work: rank r owns block r. allreduce reads block r of every peer's input, reduces it in
 *      cache-sized chunks into its own output and writes each finished chunk into every peer's
 *      output ("two-shot": reduce-scatter and allgather fused); reduce_scatter only reads and
 *      reduces; allgather only writes its block into every peer's output;
 *   3. a dissemination barrier: nobody returns while a peer may still read or write its buffers.
 *
 * Each byte crosses between processes once (a load from a mapped peer region, or one kernel copy
 * through CMA), where a ring over the shared-memory transport copies it into a slot and out again.
 * In place is safe: the only rank that writes block r of a peer's output is the one that has
 * already read that chunk of the peer's input. Owners visit peers starting at their right-hand
 * neighbour, so that at any moment different owners read different peers.
 */
#include <errno.h>
#include <string.h>

#include "base/base.h"
#include "comm/algo/algo.h"
#include "comm/algo/reduce_op.h"
#include "comm/window.h"

#define CHUNK (128u << 10) /* a chunk and its staging copy stay in L2 */
/* Blocks from this size write their results with non-temporal stores (out of place only): the
 * outputs are far larger than the cache, and reading every output line for ownership before
 * overwriting it would cost as much memory traffic as the inputs. In place, the lines were just
 * read and are already owned. */
#define STREAM_MIN (2u << 20)

typedef struct bufs {
    st_buf_desc_t send, recv;
} bufs_t;

typedef struct direct {
    strata_coll_t coll;
    int rank, nranks;
    const char *sendbuf;
    char *recvbuf;
    size_t off, len; /* this rank's block, bytes: its offset in the full buffers and length */
    size_t recv_off; /* where the block goes in this rank's recvbuf */
    char *stage;     /* CHUNK bytes for operands that come through CMA */
    char *sum;       /* CHUNK bytes where a streamed chunk is reduced, or NULL */
    void **outs;     /* [nranks]: where a streamed chunk's result goes */
    bufs_t mine;
    bufs_t *peers; /* [nranks], filled by the exchange */
} direct_t;

static bool supports(const st_coll_args_t *a)
{
    return a->direct_ok;
}

/* A peer's memory could not be reached: as for a closed connection, the endpoint reports the root
 * cause when the store names one (the peer usually gave up after a failure elsewhere). */
static strata_status_t unreachable(st_ep_t *ep, const int *world, int q, int err, const char *how)
{
    return st_ep_peer_lost(
        ep, world[q], "could not be reached during a direct collective (%s: %s%s)", how,
        strerror(err), err == EPERM ? "; STRATA_SHM_CMA=0 on every rank uses messages" : "");
}

/* Peer q's input at byte `at`, `len` bytes: mapped memory, or a staged CMA copy. */
static const void *peer_input(direct_t *d, st_ep_t *ep, const int *world, int q, size_t at,
                              size_t len, strata_status_t *rc)
{
    const st_buf_desc_t *b = &d->peers[q].send;
    void *p;
    int err = st_win_map(st_ep_window(ep), world[q], b, at, len, &p);
    if (!err && p)
        return p;
    if (!err)
        err = st_win_copy(b, at, d->stage, len, false);
    if (err) {
        *rc = unreachable(ep, world, q, err, p || b->region ? "mapping its buffer" : "reading it");
        return NULL;
    }
    return d->stage;
}

/* Writes `len` bytes from `src` to byte `at` of peer q's output (streamed: see STREAM_MIN). */
static strata_status_t peer_output(direct_t *d, st_ep_t *ep, const int *world, int q, size_t at,
                                   const void *src, size_t len, bool stream)
{
    const st_buf_desc_t *b = &d->peers[q].recv;
    void *p;
    int err = st_win_map(st_ep_window(ep), world[q], b, at, len, &p);
    if (!err && p) {
        if (stream)
            st_copy_stream(p, src, len);
        else
            memcpy(p, src, len);
        return STRATA_OK;
    }
    if (!err)
        err = st_win_copy(b, at, (void *)src, len, true);
    return err ? unreachable(ep, world, q, err, "writing its buffer") : STRATA_OK;
}

/* Streamed, the last reduction of a chunk stores its result straight into every output it goes
 * to, when all of them are mapped: out, then (allreduce) each peer's. False: some peer's output
 * is reached through CMA (or not at all), and the result goes the long way. */
static bool outputs_mapped(direct_t *d, st_ep_t *ep, const int *world, char *out, size_t at,
                           size_t len, bool writes, int *nout)
{
    const int n = d->nranks;
    d->outs[0] = out;
    *nout = 1;
    for (int k = 1; writes && k < n; k++) {
        int q = (d->rank + k) % n;
        void *p = NULL;
        if (st_win_map(st_ep_window(ep), world[q], &d->peers[q].recv, at, len, &p) || !p)
            return false;
        d->outs[(*nout)++] = p;
    }
    return true;
}

static strata_status_t run(st_sched_t *s, st_ep_t *ep, const int *world, void *arg)
{
    direct_t *d = arg;
    const int n = d->nranks, r = d->rank;
    const bool reduces = d->coll != STRATA_COLL_ALLGATHER;
    const bool writes = d->coll != STRATA_COLL_REDUCE_SCATTER;
    const bool stream = d->sum != NULL;
    for (size_t c = 0; c < d->len; c += CHUNK) {
        size_t len = ST_MIN((size_t)CHUNK, d->len - c), count = len / s->esize;
        char *out = d->recvbuf + d->recv_off + c;
        const char *mine = d->sendbuf + (reduces ? d->off : 0) + c;
        const char *result = out; // where the chunk's result is once this rank has it
        bool written = false;     // every output of the chunk holds its result
        if (reduces) {
            char *acc = stream ? d->sum : out; // streamed: partial results stay in cache
            for (int k = 1; k < n; k++) {
                int q = (r + k) % n;
                strata_status_t rc = STRATA_ERR_INTERNAL;
                const void *in = peer_input(d, ep, world, q, d->off + c, len, &rc);
                if (!in)
                    return rc;
                const void *prev = k == 1 ? mine : acc;
                int nout = 0;
                if (stream && k == n - 1 &&
                    outputs_mapped(d, ep, world, out, d->off + c, len, writes, &nout)) {
                    st_reduce_stream(s->dtype, s->op, d->outs, nout, prev, in, count);
                    written = true;
                } else {
                    st_reduce(s->dtype, s->op, acc, prev, in, count);
                }
            }
            if (stream && !written)
                st_copy_stream(out, acc, len);
            result = acc;
        } else if (out != mine) {
            if (stream)
                st_copy_stream(out, mine, len);
            else
                memcpy(out, mine, len);
            result = mine;
        }
        if (writes && !written)
            for (int k = 1; k < n; k++)
                ST_TRY(peer_output(d, ep, world, (r + k) % n, d->off + c, result, len, stream));
    }
    return STRATA_OK;
}

/* Builds exchange, work and barrier for this rank's block [off, off + len) of the full buffers. */
static strata_status_t build(st_sched_t *s, const st_coll_args_t *a, size_t send_bytes,
                             size_t recv_bytes, size_t off, size_t len, size_t recv_off)
{
    const int n = a->nranks, r = a->rank;
    const bool reduces = a->coll != STRATA_COLL_ALLGATHER;
    const char *mine = (const char *)a->sendbuf + (reduces ? off : 0);
    const bool stream = len >= STREAM_MIN && (const char *)a->recvbuf + recv_off != mine;
    direct_t *d = st_sched_scratch(s, sizeof *d + (size_t)n * (sizeof(bufs_t) + sizeof(void *)) +
                                          (stream ? 2 : 1) * CHUNK);
    if (!d)
        return s->build_rc;
    *d = (direct_t){.coll = a->coll,
                    .rank = r,
                    .nranks = n,
                    .sendbuf = a->sendbuf,
                    .recvbuf = a->recvbuf,
                    .off = off,
                    .len = len,
                    .recv_off = recv_off,
                    .peers = (bufs_t *)(d + 1)};
    d->outs = (void **)(d->peers + n);
    d->stage = (char *)(d->outs + n);
    d->sum = stream ? d->stage + CHUNK : NULL;
    st_win_describe_pair(a->win, a->sendbuf, send_bytes, &d->mine.send, a->recvbuf, recv_bytes,
                         &d->mine.recv);
    for (int k = 1; k < n; k++) {
        st_sched_recv(s, (r - k + n) % n, 0, &d->peers[(r - k + n) % n], sizeof(bufs_t));
        st_sched_send(s, (r + k) % n, 0, &d->mine, sizeof(bufs_t));
    }
    st_sched_round(s);
    st_sched_call(s, run, d); // runs first in the barrier's first round
    st_sched_barrier(s, r, n, 1);
    return s->build_rc;
}

static strata_status_t allreduce_direct(st_sched_t *s, const st_coll_args_t *a)
{
    size_t *off = st_sched_scratch(s, 2 * (size_t)a->nranks * sizeof(size_t));
    if (!off)
        return s->build_rc;
    size_t *len = off + a->nranks, bytes = a->count * a->esize;
    st_blocks_even(a->count, a->nranks, a->esize, off, len);
    return build(s, a, bytes, bytes, off[a->rank], len[a->rank], off[a->rank]);
}

static size_t span(const st_coll_args_t *a)
{
    size_t end = 0;
    for (int i = 0; i < a->nranks; i++)
        end = ST_MAX(end, a->displs[i] + a->counts[i]);
    return end * a->esize;
}

static strata_status_t reduce_scatter_direct(st_sched_t *s, const st_coll_args_t *a)
{
    const size_t es = a->esize, mine = a->counts[a->rank] * es;
    return build(s, a, span(a), mine, a->displs[a->rank] * es, mine, 0);
}

static strata_status_t allgather_direct(st_sched_t *s, const st_coll_args_t *a)
{
    const size_t es = a->esize, mine = a->counts[a->rank] * es, at = a->displs[a->rank] * es;
    return build(s, a, mine, span(a), at, mine, at);
}

const st_algo_t st_algo_allreduce_direct = {
    "direct",
    "one host: each rank reduces its block straight from its peers' buffers and writes "
    "the result into theirs (one copy per byte)",
    STRATA_COLL_ALLREDUCE,
    STRATA_ALGO_DIRECT,
    supports,
    allreduce_direct};
const st_algo_t st_algo_reduce_scatter_direct = {
    "direct",
    "one host: each rank reduces its block straight from its peers' buffers",
    STRATA_COLL_REDUCE_SCATTER,
    STRATA_ALGO_DIRECT,
    supports,
    reduce_scatter_direct};
const st_algo_t st_algo_allgather_direct = {
    "direct",
    "one host: each rank writes its block straight into its peers' buffers",
    STRATA_COLL_ALLGATHER,
    STRATA_ALGO_DIRECT,
    supports,
    allgather_direct};
