/* Direct-exchange algorithms: gather, scatter, all-to-all, and the dissemination barrier.
 *
 * - linear gather/scatter: the root posts one receive/send per rank at once.
 * - pairwise all-to-all: n-1 rounds; in round s rank r sends to r+s and receives from r-s, so
 *   each rank has one message in and one out at a time (good for large blocks).
 * - linear all-to-all: every message at once (good for small blocks, few ranks).
 * - dissemination barrier: in round k rank r signals r+2^k and waits for r-2^k.
 */
#include "comm/algo/algo.h"

static strata_status_t gather_linear(st_sched_t *s, const st_coll_args_t *a)
{
    const size_t es = a->esize;
    char *out = a->recvbuf;
    if (a->rank != a->root) {
        if (a->counts[a->rank])
            st_sched_send(s, a->root, 0, a->sendbuf, a->counts[a->rank] * es);
    } else {
        for (int i = 0; i < a->nranks; i++)
            if (i != a->root && a->counts[i])
                st_sched_recv(s, i, 0, out + a->displs[i] * es, a->counts[i] * es);
        st_sched_copy(s, out + a->displs[a->root] * es, a->sendbuf, a->counts[a->root] * es);
    }
    st_sched_round(s);
    return s->build_rc;
}

static strata_status_t scatter_linear(st_sched_t *s, const st_coll_args_t *a)
{
    const size_t es = a->esize;
    const char *in = a->sendbuf;
    if (a->rank != a->root) {
        if (a->counts[a->rank])
            st_sched_recv(s, a->root, 0, a->recvbuf, a->counts[a->rank] * es);
    } else {
        for (int i = 0; i < a->nranks; i++)
            if (i != a->root && a->counts[i])
                st_sched_send(s, i, 0, in + a->displs[i] * es, a->counts[i] * es);
        st_sched_copy(s, a->recvbuf, in + a->displs[a->root] * es, a->counts[a->root] * es);
    }
    st_sched_round(s);
    return s->build_rc;
}

/* In-place all-to-all reads blocks after overwriting others: work from a copy of the input. */
static const char *alltoall_source(st_sched_t *s, const st_coll_args_t *a)
{
    if (a->sendbuf != a->recvbuf)
        return a->sendbuf;
    size_t total = 0;
    for (int i = 0; i < a->nranks; i++) {
        size_t end = (a->sdispls[i] + a->scounts[i]) * a->esize;
        total = end > total ? end : total;
    }
    char *copy = st_sched_scratch(s, total);
    if (copy) {
        st_sched_copy(s, copy, a->sendbuf, total);
        st_sched_round(s);
    }
    return copy;
}

static void exchange(st_sched_t *s, const st_coll_args_t *a, const char *in, int to, int from,
                     uint32_t tag)
{
    const size_t es = a->esize;
    char *out = a->recvbuf;
    if (a->counts[from])
        st_sched_recv(s, from, tag, out + a->displs[from] * es, a->counts[from] * es);
    if (a->scounts[to])
        st_sched_send(s, to, tag, in + a->sdispls[to] * es, a->scounts[to] * es);
}

static strata_status_t alltoall_pairwise(st_sched_t *s, const st_coll_args_t *a)
{
    const int n = a->nranks, r = a->rank;
    const char *in = alltoall_source(s, a);
    if (!in)
        return s->build_rc;
    st_sched_copy(s, (char *)a->recvbuf + a->displs[r] * a->esize, in + a->sdispls[r] * a->esize,
                  a->counts[r] * a->esize);
    for (int step = 1; step < n; step++) {
        exchange(s, a, in, (r + step) % n, (r - step + n) % n, (uint32_t)step);
        st_sched_round(s);
    }
    st_sched_round(s);
    return s->build_rc;
}

static strata_status_t alltoall_linear(st_sched_t *s, const st_coll_args_t *a)
{
    const int n = a->nranks, r = a->rank;
    const char *in = alltoall_source(s, a);
    if (!in)
        return s->build_rc;
    st_sched_copy(s, (char *)a->recvbuf + a->displs[r] * a->esize, in + a->sdispls[r] * a->esize,
                  a->counts[r] * a->esize);
    for (int step = 1; step < n; step++)
        exchange(s, a, in, (r + step) % n, (r - step + n) % n, 0);
    st_sched_round(s);
    return s->build_rc;
}

void st_sched_barrier(st_sched_t *s, int rank, int n, uint32_t tag0)
{
    uint32_t k = tag0;
    for (int d = 1; d < n; d <<= 1, k++) {
        st_sched_recv(s, (rank - d + n) % n, k, NULL, 0);
        st_sched_send(s, (rank + d) % n, k, NULL, 0);
        st_sched_round(s);
    }
}

static strata_status_t barrier_dissemination(st_sched_t *s, const st_coll_args_t *a)
{
    st_sched_barrier(s, a->rank, a->nranks, 0);
    return s->build_rc;
}

const st_algo_t st_algo_gather_linear = {
    "linear", "every rank sends its block to the root at once", STRATA_COLL_GATHER,
    STRATA_ALGO_LINEAR, NULL, gather_linear};
const st_algo_t st_algo_scatter_linear = {
    "linear", "the root sends every block at once", STRATA_COLL_SCATTER, STRATA_ALGO_LINEAR, NULL,
    scatter_linear};
const st_algo_t st_algo_alltoall_pairwise = {
    "pairwise", "n-1 rounds of one-in one-out exchanges; for large blocks", STRATA_COLL_ALLTOALL,
    STRATA_ALGO_PAIRWISE, NULL, alltoall_pairwise};
const st_algo_t st_algo_alltoall_linear = {
    "linear", "all messages at once; for small blocks", STRATA_COLL_ALLTOALL, STRATA_ALGO_LINEAR,
    NULL, alltoall_linear};
const st_algo_t st_algo_barrier_dissemination = {
    "dissemination", "ceil(log2 n) rounds of signals", STRATA_COLL_BARRIER,
    STRATA_ALGO_DISSEMINATION, NULL, barrier_dissemination};
