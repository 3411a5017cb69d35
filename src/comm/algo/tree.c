/* Rooted collectives: broadcast and reduce.
 *
 * - binomial tree (bcast, reduce): ceil(log2 n) levels; in relative rank v = (rank - root) mod n a
 *   node's parent is v minus its lowest set bit and its children are v + 2^j below that bit.
 * - scatter + allgather (bcast, van de Geijn): root hands block i to rank i, then a ring
 *   allgather; about twice the bandwidth of a tree for large messages.
 * - reduce-scatter + gather (reduce): ring reduce-scatter, then every rank sends its reduced block
 *   to the root; bandwidth-optimal for large messages.
 */
#include "comm/algo/algo.h"

static int real_rank(int v, int root, int n)
{
    return (v + root) % n;
}

static strata_status_t bcast_binomial(st_sched_t *s, const st_coll_args_t *a)
{
    const int n = a->nranks, v = (a->rank - a->root + n) % n;
    const size_t bytes = a->count * a->esize;
    int mask = 1;
    while (mask < n) {
        if (v & mask) {
            st_sched_recv(s, real_rank(v - mask, a->root, n), 0, a->recvbuf, bytes);
            st_sched_round(s);
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (v + mask < n)
            st_sched_send(s, real_rank(v + mask, a->root, n), 0, a->recvbuf, bytes);
    st_sched_round(s);
    return s->build_rc;
}

static strata_status_t bcast_scatter_allgather(st_sched_t *s, const st_coll_args_t *a)
{
    const int n = a->nranks, r = a->rank;
    size_t *off = st_sched_scratch(s, 2 * (size_t)n * sizeof(size_t));
    if (!off)
        return s->build_rc;
    size_t *len = off + n;
    st_blocks_even(a->count, n, a->esize, off, len);
    char *buf = a->recvbuf;
    if (r == a->root) {
        for (int i = 0; i < n; i++)
            if (i != r && len[i])
                st_sched_send(s, i, 0, buf + off[i], len[i]);
    } else if (len[r]) {
        st_sched_recv(s, a->root, 0, buf + off[r], len[r]);
    }
    st_sched_round(s);
    st_ring_allgather(s, r, n, buf, buf + off[r], off, len, 1);
    return s->build_rc;
}

static strata_status_t reduce_binomial(st_sched_t *s, const st_coll_args_t *a)
{
    const int n = a->nranks, v = (a->rank - a->root + n) % n;
    const size_t bytes = a->count * a->esize;
    const void *cur = a->sendbuf;
    void *acc = a->rank == a->root ? a->recvbuf : NULL;
    for (int mask = 1; mask < n; mask <<= 1) {
        if (v & mask) {
            st_sched_send(s, real_rank(v - mask, a->root, n), 0, cur, bytes);
            st_sched_round(s);
            break;
        }
        if (v + mask < n) {
            if (!acc && !(acc = st_sched_scratch(s, bytes)))
                return s->build_rc;
            st_sched_recv_reduce(s, real_rank(v + mask, a->root, n), 0, acc, cur, bytes);
            st_sched_round(s);
            cur = acc;
        }
    }
    if (a->rank == a->root)
        st_sched_copy(s, a->recvbuf, cur, bytes);
    return s->build_rc;
}

static strata_status_t reduce_rs_gather(st_sched_t *s, const st_coll_args_t *a)
{
    const int n = a->nranks, r = a->rank;
    size_t *off = st_sched_scratch(s, 2 * (size_t)n * sizeof(size_t));
    if (!off)
        return s->build_rc;
    size_t *len = off + n;
    st_blocks_even(a->count, n, a->esize, off, len);
    char *mine = r == a->root ? (char *)a->recvbuf + off[r] : st_sched_scratch(s, len[r]);
    if (!mine)
        return s->build_rc;
    st_ring_reduce_scatter(s, r, n, a->sendbuf, NULL, mine, off, len, 0);
    if (r == a->root) {
        for (int i = 0; i < n; i++)
            if (i != r && len[i])
                st_sched_recv(s, i, (uint32_t)n, (char *)a->recvbuf + off[i], len[i]);
    } else if (len[r]) {
        st_sched_send(s, a->root, (uint32_t)n, mine, len[r]);
    }
    st_sched_round(s);
    return s->build_rc;
}

const st_algo_t st_algo_bcast_binomial = {"binomial",
                                          "binomial tree from the root; log2(n) latency",
                                          STRATA_COLL_BCAST,
                                          STRATA_ALGO_BINOMIAL,
                                          NULL,
                                          bcast_binomial};
const st_algo_t st_algo_bcast_scatter_allgather = {
    "scatter_allgather",
    "root scatters blocks, ring allgather; for large messages",
    STRATA_COLL_BCAST,
    STRATA_ALGO_SCATTER_ALLGATHER,
    NULL,
    bcast_scatter_allgather};
const st_algo_t st_algo_reduce_binomial = {"binomial",
                                           "binomial tree towards the root; log2(n) latency",
                                           STRATA_COLL_REDUCE,
                                           STRATA_ALGO_BINOMIAL,
                                           NULL,
                                           reduce_binomial};
const st_algo_t st_algo_reduce_rs_gather = {
    "reduce_scatter_gather",
    "ring reduce-scatter, then gather to the root; for large messages",
    STRATA_COLL_REDUCE,
    STRATA_ALGO_REDUCE_SCATTER_GATHER,
    NULL,
    reduce_rs_gather};
