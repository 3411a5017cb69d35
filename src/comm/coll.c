/* The public collective and point-to-point calls: validate, normalise to the v-shaped arguments the
 * algorithms take, pick an algorithm, build its schedule and start it. Blocking calls are the
 * non-blocking call plus strata_request_wait(). */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "comm/comm_internal.h"
#include "comm/mailbox.h"
#include "comm/window.h"

/* ---- common path ------------------------------------------------------------------------------- */

static strata_status_t check_comm(const strata_comm_t *comm, strata_request_t **req, const char *fn)
{
    if (!comm)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: comm is NULL", fn);
    if (!req)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: request pointer is NULL", fn);
    *req = NULL;
    return STRATA_OK;
}

static strata_status_t check_type(strata_dtype_t dtype, strata_op_t op, bool reduces, const char *fn)
{
    if ((unsigned)dtype >= STRATA_DTYPE_COUNT)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: invalid dtype %d", fn, (int)dtype);
    if (reduces && (unsigned)op >= STRATA_OP_COUNT)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: invalid op %d", fn, (int)op);
    return STRATA_OK;
}

static strata_status_t check_buf(const void *p, size_t count, const char *fn, const char *name)
{
    if (!p && count)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: %s is NULL but count is %zu", fn, name, count);
    return STRATA_OK;
}

static strata_status_t check_root(const strata_comm_t *comm, int root, const char *fn)
{
    if (root < 0 || root >= comm->nranks)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: root %d is outside 0..%d", fn, root,
                        comm->nranks - 1);
    return STRATA_OK;
}

static strata_status_t check_count(size_t count, size_t esize, int blocks, const char *fn)
{
    if (count && (count > SIZE_MAX / esize / (size_t)blocks))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: count %zu overflows the address space", fn, count);
    return STRATA_OK;
}

static st_coll_args_t args_for(const strata_comm_t *comm, strata_coll_t coll, strata_dtype_t dtype,
                               strata_op_t op)
{
    st_win_t *win = st_ep_window(comm->sh->ep);
    return (st_coll_args_t){.coll = coll, .dtype = dtype, .op = op, .rank = comm->rank,
                            .nranks = comm->nranks, .esize = strata_dtype_size(dtype),
                            .topo = comm->topo, .win = win, .pool = comm->pool,
                            .direct_ok = st_ep_single_host(comm->sh->ep) && st_win_cma_ok(win)};
}

/* One rank: the collective is a local copy (a reduction of one operand is that operand). */
static void build_self(st_sched_t *s, const st_coll_args_t *a)
{
    const size_t es = a->esize;
    switch (a->coll) {
    case STRATA_COLL_ALLREDUCE:
    case STRATA_COLL_REDUCE: st_sched_copy(s, a->recvbuf, a->sendbuf, a->count * es); break;
    case STRATA_COLL_REDUCE_SCATTER:
    case STRATA_COLL_SCATTER:
        st_sched_copy(s, a->recvbuf, (const char *)a->sendbuf + a->displs[0] * es, a->counts[0] * es);
        break;
    case STRATA_COLL_ALLGATHER:
    case STRATA_COLL_GATHER:
        st_sched_copy(s, (char *)a->recvbuf + a->displs[0] * es, a->sendbuf, a->counts[0] * es);
        break;
    case STRATA_COLL_ALLTOALL:
        st_sched_copy(s, (char *)a->recvbuf + a->displs[0] * es,
                      (const char *)a->sendbuf + a->sdispls[0] * es, a->counts[0] * es);
        break;
    default: break;
    }
    st_sched_round(s);
}

/* Where the reduced result lives on this rank, for AVG's final division. */
static void avg_region(const st_coll_args_t *a, void **buf, size_t *bytes)
{
    *buf = NULL;
    *bytes = 0;
    if (a->coll == STRATA_COLL_ALLREDUCE || (a->coll == STRATA_COLL_REDUCE && a->rank == a->root)) {
        *buf = a->recvbuf;
        *bytes = a->count * a->esize;
    } else if (a->coll == STRATA_COLL_REDUCE_SCATTER) {
        *buf = a->recvbuf;
        *bytes = a->counts[a->rank] * a->esize;
    }
}

/* Whether peers will reach the call's buffers as mapped memory: strata_mem_alloc buffers (`mem`), or
 * buffers large enough for the window to adopt. The size rule is the same on every rank, so they
 * all choose alike. */
static bool mapped(const st_coll_args_t *a, size_t bytes, bool mem)
{
    size_t adopt_min = a->direct_ok ? st_win_adopt_min(a->win) : 0;
    return a->direct_ok && (mem || (adopt_min && bytes >= adopt_min));
}

static strata_status_t start(strata_comm_t *comm, st_coll_args_t *a, size_t bytes, size_t *vec,
                             strata_request_t **out)
{
    strata_request_t *r;
    strata_status_t rc = st_request_new(comm, strata_coll_name(a->coll), &r);
    if (rc < 0) {
        free(vec);
        return rc;
    }
    r->vec = vec;
    r->bytes = bytes;
    r->seq = ++comm->seq;
    r->tag_base = ((uint64_t)comm->ctx << ST_TAG_CTX_SHIFT) |
                  ((uint64_t)((r->seq - 1) & ST_TAG_SEQ_MASK) << ST_TAG_SEQ_SHIFT);
    st_sched_init(&r->sched, a->dtype, a->op, comm->nranks);
    a->registered = mapped(a, bytes, (!a->sendbuf || st_win_owns(a->win, a->sendbuf)) &&
                                         (!a->recvbuf || st_win_owns(a->win, a->recvbuf)));
    if (comm->nranks == 1) {
        build_self(&r->sched, a);
    } else {
        const st_algo_t *algo = st_algo_select(a, bytes, &comm->link);
        if (!algo) {
            st_request_free(r);
            return st_error(STRATA_ERR_INTERNAL, "no algorithm serves %s", strata_coll_name(a->coll));
        }
        r->algo = algo->name;
        rc = algo->build(&r->sched, a);
        if (rc < 0) {
            st_request_free(r);
            return rc;
        }
        if (a->op == STRATA_OP_AVG) {
            void *buf;
            size_t n;
            avg_region(a, &buf, &n);
            st_sched_round(&r->sched);
            if (n)
                st_sched_avg(&r->sched, buf, n);
            st_sched_round(&r->sched);
        }
    }
    return st_request_start(r, out);
}

/* counts/displs arrays for collectives with equal blocks: [counts | displs]. */
static size_t *uniform_blocks(int n, size_t count)
{
    size_t *v = malloc(2 * (size_t)n * sizeof *v);
    if (!v) {
        st_error(STRATA_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        v[i] = count;
        v[n + i] = (size_t)i * count;
    }
    return v;
}

/* Copies user counts (and displacements, or packed ones when NULL) into [counts | displs]. */
static size_t *copy_blocks(int n, const size_t *counts, const size_t *displs, size_t *total)
{
    size_t *v = malloc(2 * (size_t)n * sizeof *v);
    if (!v) {
        st_error(STRATA_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    size_t at = 0, end = 0;
    for (int i = 0; i < n; i++) {
        v[i] = counts[i];
        v[n + i] = displs ? displs[i] : at;
        at += counts[i];
        end = ST_MAX(end, v[n + i] + counts[i]);
    }
    *total = end;
    return v;
}

static bool is_uniform(int n, const size_t *v)
{
    for (int i = 0; i < n; i++)
        if (v[i] != v[0] || v[n + i] != (size_t)i * v[0])
            return false;
    return true;
}

/* Starts a collective of one block per rank (a's buffers, type and kind set): `counts` and
 * `displs` (NULL: packed) lay the blocks out in the whole buffer, the send buffer when
 * `whole_is_send` (reduce-scatter), else the receive buffer (allgather); the other holds this
 * rank's block only. */
static strata_status_t start_blocks(strata_comm_t *comm, st_coll_args_t *a, const char *fn,
                                    const size_t *counts, const size_t *displs,
                                    bool whole_is_send, strata_request_t **req)
{
    if (!counts)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: recvcounts is NULL", fn);
    size_t total = 0;
    size_t *v = copy_blocks(comm->nranks, counts, displs, &total);
    if (!v)
        return STRATA_ERR_NO_MEMORY;
    size_t mine = counts[comm->rank];
    strata_status_t rc = check_count(total, a->esize, 1, fn);
    if (rc >= 0)
        rc = check_buf(a->sendbuf, whole_is_send ? total : mine, fn, "sendbuf");
    if (rc >= 0)
        rc = check_buf(a->recvbuf, whole_is_send ? mine : total, fn, "recvbuf");
    if (rc < 0) {
        free(v);
        return rc;
    }
    a->counts = v;
    a->displs = v + comm->nranks;
    a->uniform = is_uniform(comm->nranks, v);
    return start(comm, a, total * a->esize, v, req);
}

/* ---- reductions -------------------------------------------------------------------------------- */

static strata_status_t check_allreduce(const strata_comm_t *comm, const void *sendbuf,
                                      const void *recvbuf, size_t count, strata_dtype_t dtype,
                                      strata_op_t op, strata_request_t **req)
{
    static const char fn[] = "strata_allreduce";
    ST_TRY(check_comm(comm, req, fn));
    ST_TRY(check_type(dtype, op, true, fn));
    ST_TRY(check_count(count, strata_dtype_size(dtype), 1, fn));
    ST_TRY(check_buf(sendbuf, count, fn, "sendbuf"));
    return check_buf(recvbuf, count, fn, "recvbuf");
}

strata_status_t strata_iallreduce(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                  size_t count, strata_dtype_t dtype, strata_op_t op,
                                  strata_request_t **req)
{
    ST_TRY(check_allreduce(comm, sendbuf, recvbuf, count, dtype, op, req));
    st_coll_args_t a = args_for(comm, STRATA_COLL_ALLREDUCE, dtype, op);
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.count = count;
    return start(comm, &a, count * a.esize, NULL, req);
}

strata_status_t strata_ireduce(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                               size_t count, strata_dtype_t dtype, strata_op_t op, int root,
                               strata_request_t **req)
{
    static const char fn[] = "strata_reduce";
    ST_TRY(check_comm(comm, req, fn));
    ST_TRY(check_type(dtype, op, true, fn));
    ST_TRY(check_root(comm, root, fn));
    ST_TRY(check_count(count, strata_dtype_size(dtype), 1, fn));
    ST_TRY(check_buf(sendbuf, count, fn, "sendbuf"));
    if (comm->rank == root)
        ST_TRY(check_buf(recvbuf, count, fn, "recvbuf on the root"));
    st_coll_args_t a = args_for(comm, STRATA_COLL_REDUCE, dtype, op);
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.count = count;
    a.root = root;
    return start(comm, &a, count * a.esize, NULL, req);
}

strata_status_t strata_ireduce_scatterv(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                        const size_t *recvcounts, strata_dtype_t dtype,
                                        strata_op_t op, strata_request_t **req)
{
    static const char fn[] = "strata_reduce_scatter";
    ST_TRY(check_comm(comm, req, fn));
    ST_TRY(check_type(dtype, op, true, fn));
    st_coll_args_t a = args_for(comm, STRATA_COLL_REDUCE_SCATTER, dtype, op);
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    return start_blocks(comm, &a, fn, recvcounts, NULL, true, req);
}

strata_status_t strata_ireduce_scatter(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       size_t recvcount, strata_dtype_t dtype, strata_op_t op,
                                       strata_request_t **req)
{
    if (!comm)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_reduce_scatter: comm is NULL");
    size_t *v = uniform_blocks(comm->nranks, recvcount);
    if (!v)
        return STRATA_ERR_NO_MEMORY;
    strata_status_t rc = strata_ireduce_scatterv(comm, sendbuf, recvbuf, v, dtype, op, req);
    free(v);
    return rc;
}

/* ---- data movement ----------------------------------------------------------------------------- */

strata_status_t strata_ibcast(strata_comm_t *comm, void *buf, size_t count, strata_dtype_t dtype,
                              int root, strata_request_t **req)
{
    static const char fn[] = "strata_bcast";
    ST_TRY(check_comm(comm, req, fn));
    ST_TRY(check_type(dtype, STRATA_OP_SUM, false, fn));
    ST_TRY(check_root(comm, root, fn));
    ST_TRY(check_count(count, strata_dtype_size(dtype), 1, fn));
    ST_TRY(check_buf(buf, count, fn, "buf"));
    st_coll_args_t a = args_for(comm, STRATA_COLL_BCAST, dtype, STRATA_OP_SUM);
    a.sendbuf = buf;
    a.recvbuf = buf;
    a.count = count;
    a.root = root;
    return start(comm, &a, count * a.esize, NULL, req);
}

strata_status_t strata_iallgatherv(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   const size_t *recvcounts, const size_t *displs,
                                   strata_dtype_t dtype, strata_request_t **req)
{
    static const char fn[] = "strata_allgather";
    ST_TRY(check_comm(comm, req, fn));
    ST_TRY(check_type(dtype, STRATA_OP_SUM, false, fn));
    st_coll_args_t a = args_for(comm, STRATA_COLL_ALLGATHER, dtype, STRATA_OP_SUM);
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    return start_blocks(comm, &a, fn, recvcounts, displs, false, req);
}

strata_status_t strata_iallgather(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                  size_t sendcount, strata_dtype_t dtype, strata_request_t **req)
{
    if (!comm)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_allgather: comm is NULL");
    size_t *v = uniform_blocks(comm->nranks, sendcount);
    if (!v)
        return STRATA_ERR_NO_MEMORY;
    strata_status_t rc = strata_iallgatherv(comm, sendbuf, recvbuf, v, v + comm->nranks, dtype, req);
    free(v);
    return rc;
}

strata_status_t strata_ialltoallv(strata_comm_t *comm, const void *sendbuf,
                                  const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
                                  const size_t *recvcounts, const size_t *rdispls,
                                  strata_dtype_t dtype, strata_request_t **req)
{
    static const char fn[] = "strata_alltoall";
    ST_TRY(check_comm(comm, req, fn));
    ST_TRY(check_type(dtype, STRATA_OP_SUM, false, fn));
    if (!sendcounts || !recvcounts)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: sendcounts or recvcounts is NULL", fn);
    const int n = comm->nranks;
    size_t stotal = 0, rtotal = 0;
    size_t *sv = copy_blocks(n, sendcounts, sdispls, &stotal);
    size_t *rv = sv ? copy_blocks(n, recvcounts, rdispls, &rtotal) : NULL;
    size_t *v = rv ? malloc(4 * (size_t)n * sizeof *v) : NULL;
    if (!v) {
        free(sv);
        free(rv);
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
    }
    memcpy(v, rv, 2 * (size_t)n * sizeof *v);
    memcpy(v + 2 * n, sv, 2 * (size_t)n * sizeof *v);
    free(sv);
    free(rv);
    strata_status_t rc = check_count(ST_MAX(stotal, rtotal), strata_dtype_size(dtype), 1, fn);
    if (rc >= 0)
        rc = check_buf(sendbuf, stotal, fn, "sendbuf");
    if (rc >= 0)
        rc = check_buf(recvbuf, rtotal, fn, "recvbuf");
    if (rc < 0) {
        free(v);
        return rc;
    }
    st_coll_args_t a = args_for(comm, STRATA_COLL_ALLTOALL, dtype, STRATA_OP_SUM);
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.counts = v;
    a.displs = v + n;
    a.scounts = v + 2 * n;
    a.sdispls = v + 3 * n;
    a.uniform = is_uniform(n, v) && is_uniform(n, v + 2 * n);
    return start(comm, &a, stotal * a.esize, v, req);
}

strata_status_t strata_ialltoall(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                 size_t count, strata_dtype_t dtype, strata_request_t **req)
{
    if (!comm)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_alltoall: comm is NULL");
    size_t *v = uniform_blocks(comm->nranks, count);
    if (!v)
        return STRATA_ERR_NO_MEMORY;
    const size_t *d = v + comm->nranks;
    strata_status_t rc = strata_ialltoallv(comm, sendbuf, v, d, recvbuf, v, d, dtype, req);
    free(v);
    return rc;
}

/* gather and scatter share their shape: rooted, equal blocks. */
static strata_status_t rooted_blocks(strata_comm_t *comm, strata_coll_t coll, const void *sendbuf,
                                     void *recvbuf, size_t count, strata_dtype_t dtype, int root,
                                     strata_request_t **req, const char *fn)
{
    ST_TRY(check_comm(comm, req, fn));
    ST_TRY(check_type(dtype, STRATA_OP_SUM, false, fn));
    ST_TRY(check_root(comm, root, fn));
    ST_TRY(check_count(count, strata_dtype_size(dtype), comm->nranks, fn));
    bool gather = coll == STRATA_COLL_GATHER, at_root = comm->rank == root;
    ST_TRY(check_buf(sendbuf, gather || at_root ? count : 0, fn, "sendbuf"));
    ST_TRY(check_buf(recvbuf, !gather || at_root ? count : 0, fn, "recvbuf"));
    size_t *v = uniform_blocks(comm->nranks, count);
    if (!v)
        return STRATA_ERR_NO_MEMORY;
    st_coll_args_t a = args_for(comm, coll, dtype, STRATA_OP_SUM);
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.root = root;
    a.counts = v;
    a.displs = v + comm->nranks;
    a.uniform = true;
    return start(comm, &a, (size_t)comm->nranks * count * a.esize, v, req);
}

strata_status_t strata_igather(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                               size_t count, strata_dtype_t dtype, int root, strata_request_t **req)
{
    return rooted_blocks(comm, STRATA_COLL_GATHER, sendbuf, recvbuf, count, dtype, root, req,
                         "strata_gather");
}

strata_status_t strata_iscatter(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                size_t count, strata_dtype_t dtype, int root, strata_request_t **req)
{
    return rooted_blocks(comm, STRATA_COLL_SCATTER, sendbuf, recvbuf, count, dtype, root, req,
                         "strata_scatter");
}

strata_status_t strata_ibarrier(strata_comm_t *comm, strata_request_t **req)
{
    ST_TRY(check_comm(comm, req, "strata_barrier"));
    st_coll_args_t a = args_for(comm, STRATA_COLL_BARRIER, STRATA_DTYPE_U8, STRATA_OP_SUM);
    return start(comm, &a, 0, NULL, req);
}

/* ---- point to point ---------------------------------------------------------------------------- */

static strata_status_t p2p(strata_comm_t *comm, bool send, void *buf, size_t count,
                           strata_dtype_t dtype, int peer, int tag, strata_request_t **req)
{
    const char *fn = send ? "strata_send" : "strata_recv";
    ST_TRY(check_comm(comm, req, fn));
    ST_TRY(check_type(dtype, STRATA_OP_SUM, false, fn));
    ST_TRY(check_count(count, strata_dtype_size(dtype), 1, fn));
    ST_TRY(check_buf(buf, count, fn, "buf"));
    if (peer < 0 || peer >= comm->nranks)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: peer %d is outside 0..%d", fn, peer,
                        comm->nranks - 1);
    if (tag < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: tag %d is negative", fn, tag);
    strata_request_t *r;
    ST_TRY(st_request_new(comm, send ? "send" : "recv", &r));
    const size_t bytes = count * strata_dtype_size(dtype);
    r->bytes = bytes;
    r->peer = peer;
    r->tag_base = ((uint64_t)comm->ctx << ST_TAG_CTX_SHIFT) | ST_TAG_P2P;
    st_sched_init(&r->sched, dtype, STRATA_OP_SUM, comm->nranks);
    if (send)
        st_sched_send(&r->sched, peer, (uint32_t)tag, buf, bytes);
    else
        st_sched_recv(&r->sched, peer, (uint32_t)tag, buf, bytes);
    st_sched_round(&r->sched);
    return st_request_start(r, req);
}

strata_status_t strata_isend(strata_comm_t *comm, const void *buf, size_t count,
                             strata_dtype_t dtype, int peer, int tag, strata_request_t **req)
{
    return p2p(comm, true, (void *)buf, count, dtype, peer, tag, req);
}

strata_status_t strata_irecv(strata_comm_t *comm, void *buf, size_t count, strata_dtype_t dtype,
                             int peer, int tag, strata_request_t **req)
{
    return p2p(comm, false, buf, count, dtype, peer, tag, req);
}

/* ---- blocking forms ---------------------------------------------------------------------------- */

#define ST_BLOCKING(call)                                                                          \
    do {                                                                                           \
        strata_request_t *req_;                                                                    \
        ST_TRY(call);                                                                              \
        return strata_request_wait(req_);                                                          \
    } while (0)

strata_status_t strata_allreduce(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                 size_t count, strata_dtype_t dtype, strata_op_t op)
{
    strata_request_t *unused;
    ST_TRY(check_allreduce(comm, sendbuf, recvbuf, count, dtype, op, &unused));
    if (st_mailbox_serves(comm, count * strata_dtype_size(dtype))) {
        bool served;
        strata_status_t rc = st_mailbox_allreduce(comm, sendbuf, recvbuf, count, dtype, op, &served);
        if (served || rc < 0)
            return rc;
    }
    ST_BLOCKING(strata_iallreduce(comm, sendbuf, recvbuf, count, dtype, op, &req_));
}

strata_status_t strata_reduce(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                              size_t count, strata_dtype_t dtype, strata_op_t op, int root)
{
    ST_BLOCKING(strata_ireduce(comm, sendbuf, recvbuf, count, dtype, op, root, &req_));
}

strata_status_t strata_bcast(strata_comm_t *comm, void *buf, size_t count, strata_dtype_t dtype,
                             int root)
{
    ST_BLOCKING(strata_ibcast(comm, buf, count, dtype, root, &req_));
}

strata_status_t strata_reduce_scatter(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t recvcount, strata_dtype_t dtype, strata_op_t op)
{
    ST_BLOCKING(strata_ireduce_scatter(comm, sendbuf, recvbuf, recvcount, dtype, op, &req_));
}

strata_status_t strata_reduce_scatterv(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       const size_t *recvcounts, strata_dtype_t dtype,
                                       strata_op_t op)
{
    ST_BLOCKING(strata_ireduce_scatterv(comm, sendbuf, recvbuf, recvcounts, dtype, op, &req_));
}

strata_status_t strata_allgather(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                 size_t sendcount, strata_dtype_t dtype)
{
    ST_BLOCKING(strata_iallgather(comm, sendbuf, recvbuf, sendcount, dtype, &req_));
}

strata_status_t strata_allgatherv(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                  const size_t *recvcounts, const size_t *displs,
                                  strata_dtype_t dtype)
{
    ST_BLOCKING(strata_iallgatherv(comm, sendbuf, recvbuf, recvcounts, displs, dtype, &req_));
}

strata_status_t strata_alltoall(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                size_t count, strata_dtype_t dtype)
{
    ST_BLOCKING(strata_ialltoall(comm, sendbuf, recvbuf, count, dtype, &req_));
}

strata_status_t strata_alltoallv(strata_comm_t *comm, const void *sendbuf,
                                 const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
                                 const size_t *recvcounts, const size_t *rdispls,
                                 strata_dtype_t dtype)
{
    ST_BLOCKING(strata_ialltoallv(comm, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls,
                                  dtype, &req_));
}

strata_status_t strata_gather(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                              size_t count, strata_dtype_t dtype, int root)
{
    ST_BLOCKING(strata_igather(comm, sendbuf, recvbuf, count, dtype, root, &req_));
}

strata_status_t strata_scatter(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                               size_t count, strata_dtype_t dtype, int root)
{
    ST_BLOCKING(strata_iscatter(comm, sendbuf, recvbuf, count, dtype, root, &req_));
}

strata_status_t strata_barrier(strata_comm_t *comm)
{
    ST_BLOCKING(strata_ibarrier(comm, &req_));
}

strata_status_t strata_send(strata_comm_t *comm, const void *buf, size_t count,
                            strata_dtype_t dtype, int peer, int tag)
{
    ST_BLOCKING(strata_isend(comm, buf, count, dtype, peer, tag, &req_));
}

strata_status_t strata_recv(strata_comm_t *comm, void *buf, size_t count, strata_dtype_t dtype,
                            int peer, int tag)
{
    ST_BLOCKING(strata_irecv(comm, buf, count, dtype, peer, tag, &req_));
}

/* ---- introspection ----------------------------------------------------------------------------- */

const char *strata_comm_algo_for(const strata_comm_t *comm, strata_coll_t coll, size_t bytes,
                                 bool mem)
{
    if (!comm || (unsigned)coll >= STRATA_COLL_COUNT)
        return "none";
    if (comm->nranks == 1)
        return "self";
    if (coll == STRATA_COLL_ALLREDUCE && st_mailbox_serves(comm, bytes))
        return "mailbox";
    st_coll_args_t a = args_for(comm, coll, STRATA_DTYPE_F32, STRATA_OP_SUM);
    a.uniform = true;
    a.count = bytes / 4;
    a.registered = mapped(&a, bytes, mem);
    const st_algo_t *al = st_algo_select(&a, bytes, &comm->link);
    return al ? al->name : "none";
}

const struct strata_fabric *strata_comm_fabric(const strata_comm_t *comm)
{
    return comm && comm->topo ? &comm->topo->fabric : NULL;
}

double strata_comm_predict(const strata_comm_t *comm, strata_coll_t coll, size_t bytes, bool mem)
{
    if (!comm || (unsigned)coll >= STRATA_COLL_COUNT)
        return -1;
    if (comm->nranks == 1)
        return 0;
    st_coll_args_t a = args_for(comm, coll, STRATA_DTYPE_F32, STRATA_OP_SUM);
    a.uniform = true;
    a.count = bytes / 4;
    a.registered = mapped(&a, bytes, mem);
    const st_algo_t *al = st_algo_select(&a, bytes, &comm->link);
    strata_xfer_pipe_t pipe;
    return al ? st_algo_cost(al, &a, bytes, &comm->link, &pipe) : -1;
}
