/* Topology-aware algorithms: allreduce, reduce-scatter and allgather executed from a transfer plan
 * (netmodel.h, src/netmodel/xfer_plan.c) on the communicator's fabric: a ring in tree order, and
 * the hierarchical, pipelined plan. The plan is the single description of the traffic: the
 * flow-level simulation runs it (the reference the price is checked against), this file turns
 * this rank's share of it into a schedule, one round per slot, the slot number as the message
 * tag. The pipeline (a->pipe) is the one the price chose.
 *
 * Data stays in one working vector per rank: the receive buffer (allreduce, allgather) or a
 * scratch copy of the send buffer (reduce-scatter, whose result block is copied out at the end).
 */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "comm/algo/algo.h"

static bool has_topo(const st_coll_args_t *a)
{
    return a->topo != NULL && a->topo->fabric.nranks == a->nranks;
}

/* This rank's transfers of the plan as rounds on `work`. Ordering by slot keeps the plan's order
 * inside a slot (messages between two ranks in one slot match in that order), hence a counting
 * sort, which is stable. */
static strata_status_t emit_plan(st_sched_t *s, const st_coll_args_t *a, strata_plan_kind_t kind,
                                 strata_plan_phase_t phase, const size_t *off, const size_t *len,
                                 char *work)
{
    strata_xfer_plan_t p;
    ST_TRY(strata_xfer_plan_build(&a->topo->fabric, kind, phase, off, len, &a->pipe, a->rank, &p));
    int *first = calloc((size_t)p.nslots + 1, sizeof *first);
    strata_xfer_t *x_sorted = malloc((size_t)p.n * sizeof *x_sorted + 1);
    if (!first || !x_sorted) {
        free(first);
        free(x_sorted);
        strata_xfer_plan_free(&p);
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory building a topology plan");
    }
    for (int i = 0; i < p.n; i++)
        first[p.x[i].slot + 1]++;
    for (int t = 0; t < p.nslots; t++)
        first[t + 1] += first[t];
    for (int i = 0; i < p.n; i++)
        x_sorted[first[p.x[i].slot]++] = p.x[i];
    free(first);
    const size_t es = a->esize;
    int prev = -1;
    for (int i = 0; i < p.n; i++) {
        const strata_xfer_t *x = &x_sorted[i];
        int slot = x->slot;
        if (slot != prev)
            st_sched_round(s);
        prev = slot;
        char *at = work + x->off * es;
        if (x->dst == a->rank) {
            if (x->reduce)
                st_sched_recv_reduce(s, x->src, (uint32_t)slot, at, at, x->len * es);
            else
                st_sched_recv(s, x->src, (uint32_t)slot, at, x->len * es);
        } else {
            st_sched_send(s, x->dst, (uint32_t)slot, at, x->len * es);
        }
    }
    st_sched_round(s);
    free(x_sorted);
    strata_xfer_plan_free(&p);
    return s->build_rc;
}

/* Where each block's pieces live in the working vector: the plan's own layout (an allreduce, or the
 * pipelined hierarchical plan), else the caller's (a ring moves v-shaped blocks where they are).
 * Fills off/len with n * segments pieces; *total = the working vector's length; *own = whether
 * the working vector is the caller's layout. */
static strata_status_t layout(st_sched_t *s, const st_coll_args_t *a, strata_plan_kind_t kind,
                              size_t **off, size_t **len, size_t *total, bool *own)
{
    const int n = a->nranks, K = kind == STRATA_PLAN_HIER ? a->pipe.segments : 1;
    size_t *buf = st_sched_scratch(s, (size_t)n * (1 + 2 * (size_t)K) * sizeof *buf);
    if (!buf)
        return s->build_rc;
    size_t *blen = buf;
    *off = buf + n;
    *len = *off + (size_t)n * (size_t)K;
    for (int b = 0; b < n; b++)
        blen[b] = a->coll == STRATA_COLL_ALLREDUCE
                      ? a->count / (size_t)n + ((size_t)b < a->count % (size_t)n)
                      : a->counts[b];
    *own = a->coll != STRATA_COLL_ALLREDUCE && kind != STRATA_PLAN_HIER;
    *total = 0;
    if (*own) {
        for (int b = 0; b < n; b++) {
            (*off)[b] = a->displs[b];
            (*len)[b] = blen[b];
            *total = (*off)[b] + blen[b] > *total ? (*off)[b] + blen[b] : *total;
        }
        return STRATA_OK;
    }
    ST_TRY(strata_xfer_plan_layout(&a->topo->fabric, kind, blen, &a->pipe, *off, *len));
    for (size_t i = 0; i < (size_t)n * (size_t)K; i++)
        *total += (*len)[i];
    return STRATA_OK;
}

/* Copies block b between the caller's copy of it (`user`, contiguous) and its pieces in the plan
 * layout. */
static void copy_block(st_sched_t *s, const st_coll_args_t *a, int K, const size_t *off,
                       const size_t *len, int b, char *work, char *user, bool to_work)
{
    const size_t es = a->esize, n = (size_t)a->nranks;
    size_t at = 0;
    for (int k = 0; k < K; k++) {
        size_t i = (size_t)k * n + (size_t)b;
        if (len[i] && to_work)
            st_sched_copy(s, work + off[i] * es, user + at * es, len[i] * es);
        else if (len[i])
            st_sched_copy(s, user + at * es, work + off[i] * es, len[i] * es);
        at += len[i];
    }
}

static strata_status_t build(st_sched_t *s, const st_coll_args_t *a, strata_plan_kind_t kind)
{
    size_t *off = NULL, *len = NULL, total = 0;
    bool own = false;
    ST_TRY(layout(s, a, kind, &off, &len, &total, &own));
    const size_t es = a->esize;
    const int K = kind == STRATA_PLAN_HIER ? a->pipe.segments : 1, me = a->rank;
    char *work = a->recvbuf;
    if (a->coll != STRATA_COLL_ALLREDUCE && !own) {
        work = st_sched_scratch(s, total * es + 1);
        if (!work)
            return s->build_rc;
    }
    switch (a->coll) {
    case STRATA_COLL_ALLREDUCE: // elements are interchangeable: the plan layout in place
        if (a->sendbuf != a->recvbuf)
            st_sched_copy(s, work, a->sendbuf, a->count * es);
        return emit_plan(s, a, kind, STRATA_PHASE_ALLREDUCE, off, len, work);
    case STRATA_COLL_REDUCE_SCATTER:
        if (own) {
            work = st_sched_scratch(s, total * es + 1);
            if (!work)
                return s->build_rc;
            st_sched_copy(s, work, a->sendbuf, total * es);
        } else {
            for (int b = 0; b < a->nranks; b++)
                copy_block(s, a, K, off, len, b, work, (char *)a->sendbuf + a->displs[b] * es,
                           true);
        }
        ST_TRY(emit_plan(s, a, kind, STRATA_PHASE_REDUCE_SCATTER, off, len, work));
        copy_block(s, a, K, off, len, me, work, a->recvbuf, false); // my block, reduced
        st_sched_round(s);
        return s->build_rc;
    case STRATA_COLL_ALLGATHER:
        if (own) {
            if ((const char *)a->sendbuf != work + off[me] * es)
                st_sched_copy(s, work + off[me] * es, a->sendbuf, len[me] * es);
            return emit_plan(s, a, kind, STRATA_PHASE_ALLGATHER, off, len, work);
        }
        copy_block(s, a, K, off, len, me, work, (char *)a->sendbuf, true);
        ST_TRY(emit_plan(s, a, kind, STRATA_PHASE_ALLGATHER, off, len, work));
        for (int b = 0; b < a->nranks; b++)
            copy_block(s, a, K, off, len, b, work, (char *)a->recvbuf + a->displs[b] * es, false);
        st_sched_round(s);
        return s->build_rc;
    default:
        return st_error(STRATA_ERR_INTERNAL, "topology plan for %s", strata_coll_name(a->coll));
    }
}

static strata_status_t build_ring_tree(st_sched_t *s, const st_coll_args_t *a)
{
    return build(s, a, STRATA_PLAN_RING_TREE);
}

static strata_status_t build_hier(st_sched_t *s, const st_coll_args_t *a)
{
    return build(s, a, STRATA_PLAN_HIER);
}

#define TOPO_ALGOS(coll, cname)                                                           \
    const st_algo_t st_algo_##cname##_ring_tree = {                                       \
        "ring_tree",                                                                      \
        "ring in fabric order: each rack/host contiguous, every uplink crossed twice",    \
        coll,                                                                             \
        STRATA_ALGO_RING_TREE,                                                            \
        has_topo,                                                                         \
        build_ring_tree};                                                                 \
    const st_algo_t st_algo_##cname##_hier = {                                            \
        "hier",                                                                           \
        "hierarchical: reduce-scatter in each level, recurse across the next, pipelined", \
        coll,                                                                             \
        STRATA_ALGO_HIER,                                                                 \
        has_topo,                                                                         \
        build_hier};

TOPO_ALGOS(STRATA_COLL_ALLREDUCE, allreduce)
TOPO_ALGOS(STRATA_COLL_REDUCE_SCATTER, reduce_scatter)
TOPO_ALGOS(STRATA_COLL_ALLGATHER, allgather)
