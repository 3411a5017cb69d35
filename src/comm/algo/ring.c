/* Ring algorithms: allreduce as reduce-scatter + allgather, reduce-scatter, allgather.
 *
 * Bandwidth-optimal: every rank sends and receives (n-1)/n of the data per phase, one neighbour
 * each way, so each link carries the minimum. Latency grows with n, which is why the cost model
 * prefers recursive algorithms for small messages. The receive of each step reduces straight out
 * of the transport (recv-reduce), and the transport pipelines each step's block in chunks.
 *
 *   step s of reduce-scatter on rank r: send block (r-s-1) mod n, receive+reduce block (r-s-2) mod n
 *   step s of allgather on rank r:      send block (r-s)   mod n, receive block (r-s-1) mod n
 */
#include "base/base.h"
#include "comm/algo/algo.h"

static int mod(int a, int n)
{
    return ((a % n) + n) % n;
}

void st_blocks_even(size_t count, int n, size_t esize, size_t *off, size_t *len)
{
    size_t base = count / (size_t)n, rem = count % (size_t)n, at = 0;
    for (int i = 0; i < n; i++) {
        size_t c = base + ((size_t)i < rem);
        off[i] = at * esize;
        len[i] = c * esize;
        at += c;
    }
}

void st_ring_rs_step(st_sched_t *s, const st_ring_t *r, int step, const char *in, char *work,
                     const size_t *off, const size_t *len, uint32_t tag)
{
    int sb = mod(r->pos - step - 1, r->n), rb = mod(r->pos - step - 2, r->n);
    if (len[rb])
        st_sched_recv_reduce(s, r->left, tag, work + off[rb], in + off[rb], len[rb]);
    if (len[sb])
        st_sched_send(s, r->right, tag, (step == 0 ? in : work) + off[sb], len[sb]);
}

void st_ring_ag_step(st_sched_t *s, const st_ring_t *r, int step, char *buf, const void *mine,
                     const size_t *off, const size_t *len, uint32_t tag)
{
    int sb = mod(r->pos - step, r->n), rb = mod(r->pos - step - 1, r->n);
    if (len[rb])
        st_sched_recv(s, r->left, tag, buf + off[rb], len[rb]);
    if (len[sb])
        st_sched_send(s, r->right, tag, step == 0 ? mine : buf + off[sb], len[sb]);
}

void st_ring_reduce_scatter(st_sched_t *s, int rank, int n, const void *src, char *work,
                            void *final, const size_t *off, const size_t *len, uint32_t tag0)
{
    const st_ring_t ring = {n, rank, mod(rank - 1, n), mod(rank + 1, n)};
    const char *in = src;
    char *inter[2] = {NULL, NULL};
    if (!work && n > 2) {
        size_t maxlen = 0;
        for (int i = 0; i < n; i++)
            maxlen = len[i] > maxlen ? len[i] : maxlen;
        char *tmp = st_sched_scratch(s, 2 * maxlen);
        if (!tmp)
            return;
        inter[0] = tmp;
        inter[1] = tmp + maxlen;
    }
    for (int step = 0; step < n - 1; step++) {
        if (work) {
            st_ring_rs_step(s, &ring, step, in, work, off, len, tag0 + (uint32_t)step);
        } else { // partial sums through two scratch blocks, the last step into `final`
            int sb = mod(rank - step - 1, n), rb = mod(rank - step - 2, n);
            const void *sendp = step == 0 ? in + off[sb] : inter[(step - 1) % 2];
            void *recvp = step == n - 2 ? final : inter[step % 2];
            if (len[rb])
                st_sched_recv_reduce(s, ring.left, tag0 + (uint32_t)step, recvp, in + off[rb],
                                     len[rb]);
            if (len[sb])
                st_sched_send(s, ring.right, tag0 + (uint32_t)step, sendp, len[sb]);
        }
        st_sched_round(s);
    }
}

void st_ring_allgather(st_sched_t *s, int rank, int n, char *buf, const void *mine,
                       const size_t *off, const size_t *len, uint32_t tag0)
{
    const st_ring_t ring = {n, rank, mod(rank - 1, n), mod(rank + 1, n)};
    for (int step = 0; step < n - 1; step++) {
        st_ring_ag_step(s, &ring, step, buf, mine, off, len, tag0 + (uint32_t)step);
        st_sched_round(s);
    }
}

/* Offsets and lengths in bytes of the per-rank blocks of a v-shaped call. */
static strata_status_t block_bytes(st_sched_t *s, const st_coll_args_t *a, size_t **off, size_t **len)
{
    size_t *buf = st_sched_scratch(s, 2 * (size_t)a->nranks * sizeof(size_t));
    if (!buf)
        return s->build_rc;
    *off = buf;
    *len = buf + a->nranks;
    for (int i = 0; i < a->nranks; i++) {
        (*off)[i] = a->displs[i] * a->esize;
        (*len)[i] = a->counts[i] * a->esize;
    }
    return STRATA_OK;
}

static strata_status_t allreduce_ring(st_sched_t *s, const st_coll_args_t *a)
{
    size_t *off = st_sched_scratch(s, 2 * (size_t)a->nranks * sizeof(size_t));
    if (!off)
        return s->build_rc;
    size_t *len = off + a->nranks;
    st_blocks_even(a->count, a->nranks, a->esize, off, len);
    char *work = a->recvbuf;
    st_ring_reduce_scatter(s, a->rank, a->nranks, a->sendbuf, work, NULL, off, len, 0);
    st_ring_allgather(s, a->rank, a->nranks, work, work + off[a->rank], off, len,
                      (uint32_t)a->nranks);
    return s->build_rc;
}

static strata_status_t reduce_scatter_ring(st_sched_t *s, const st_coll_args_t *a)
{
    size_t *off = NULL, *len = NULL;
    ST_TRY(block_bytes(s, a, &off, &len));
    st_ring_reduce_scatter(s, a->rank, a->nranks, a->sendbuf, NULL, a->recvbuf, off, len, 0);
    return s->build_rc;
}

static strata_status_t allgather_ring(st_sched_t *s, const st_coll_args_t *a)
{
    size_t *off = NULL, *len = NULL;
    ST_TRY(block_bytes(s, a, &off, &len));
    char *buf = a->recvbuf;
    // Our own block goes out on step 0 straight from sendbuf; its copy into place is local work.
    st_sched_copy(s, buf + off[a->rank], a->sendbuf, len[a->rank]);
    st_ring_allgather(s, a->rank, a->nranks, buf, a->sendbuf, off, len, 0);
    return s->build_rc;
}

const st_algo_t st_algo_allreduce_ring = {
    "ring", "reduce-scatter then allgather around a ring; bandwidth-optimal for large messages",
    STRATA_COLL_ALLREDUCE, STRATA_ALGO_RING, NULL, allreduce_ring};
const st_algo_t st_algo_reduce_scatter_ring = {
    "ring", "ring reduce-scatter, any block sizes", STRATA_COLL_REDUCE_SCATTER, STRATA_ALGO_RING,
    NULL, reduce_scatter_ring};
const st_algo_t st_algo_allgather_ring = {
    "ring", "ring allgather, any block sizes and displacements", STRATA_COLL_ALLGATHER,
    STRATA_ALGO_RING, NULL, allgather_ring};
