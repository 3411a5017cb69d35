/* Tensor-parallel collectives: the model's strata_tp_ops_t (start, wait, progress) on a
 * communicator, with the measurements that say how much of the communication the model hid behind
 * its products (time in flight vs time spent waiting). In the Chrome trace each collective is an
 * async span of category "tp" from start to completion ("tp.allreduce", "tp.allgather", ...) and
 * each wait a
 * "tp.wait" span on the rank's thread. */
#include <stdlib.h>

#include "base/base.h"
#include "strata/parallel.h"
#include "strata/trace.h"

#define TP_SLOTS 32

typedef struct tp_slot {
    strata_request_t *req; /* NULL once complete */
    const char *name;      /* its span in the trace */
    uint64_t id;
    bool used;
    strata_status_t status; /* when completed by progress */
    uint64_t started_ns;
    size_t bytes;
} tp_slot_t;

struct strata_tp_group {
    strata_comm_t *comm;
    uint64_t next_id;
    tp_slot_t slot[TP_SLOTS];
    strata_tp_stats_t stats;
};

strata_status_t strata_tp_group_create(strata_comm_t *comm, strata_tp_group_t **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return st_error(STRATA_ERR_NO_MEMORY, "tp: out of memory");
    (*out)->comm = comm;
    return STRATA_OK;
}

void strata_tp_group_destroy(strata_tp_group_t *g)
{
    if (!g)
        return;
    for (int i = 0; i < TP_SLOTS; i++) // after an error: release what is left
        if (g->slot[i].req)
            (void)strata_request_wait(g->slot[i].req);
    free(g);
}

strata_tp_stats_t strata_tp_group_stats(const strata_tp_group_t *g)
{
    return g->stats;
}

void strata_tp_group_reset_stats(strata_tp_group_t *g)
{
    g->stats = (strata_tp_stats_t){0};
}

static void finish(strata_tp_group_t *g, tp_slot_t *s, uint64_t now)
{
    strata_trace_async_end("tp", s->name, s->id);
    g->stats.flight_s += (double)(now - s->started_ns) * 1e-9;
    g->stats.ops++;
    g->stats.bytes += s->bytes;
}

static strata_status_t tp_start(void *ctx, strata_tp_coll_t coll, const float *in, float *out,
                                size_t n, void **handle)
{
    strata_tp_group_t *g = ctx;
    tp_slot_t *s = NULL;
    for (int i = 0; i < TP_SLOTS && !s; i++)
        if (!g->slot[i].used)
            s = &g->slot[i];
    if (!s)
        return st_error(STRATA_ERR_INTERNAL, "tp: more than %d collectives in flight", TP_SLOTS);
    strata_status_t rc;
    switch (coll) {
    case STRATA_TP_ALLREDUCE_SUM:
    case STRATA_TP_ALLREDUCE_MAX:
        rc = strata_iallreduce(g->comm, in, out, n, STRATA_DTYPE_F32,
                               coll == STRATA_TP_ALLREDUCE_SUM ? STRATA_OP_SUM : STRATA_OP_MAX,
                               &s->req);
        break;
    case STRATA_TP_ALLGATHER:
        rc = strata_iallgather(g->comm, in, out, n, STRATA_DTYPE_F32, &s->req);
        break;
    case STRATA_TP_REDUCE_SCATTER:
        rc = strata_ireduce_scatter(g->comm, in, out, n, STRATA_DTYPE_F32, STRATA_OP_SUM, &s->req);
        break;
    default:
        return st_error(STRATA_ERR_INVALID_ARG, "tp: unknown collective %d", (int)coll);
    }
    ST_TRY(rc);
    static const char *const names[] = {"tp.allreduce", "tp.allreduce_max", "tp.allgather",
                                        "tp.reduce_scatter"};
    s->name = names[coll];
    s->id = ++g->next_id;
    strata_trace_arg_t arg = {"bytes", NULL, (double)(n * sizeof(float))};
    strata_trace_async_begin_args("tp", s->name, s->id, &arg, 1);
    s->used = true;
    s->status = STRATA_OK;
    s->started_ns = st_now_ns();
    s->bytes = n * sizeof(float);
    *handle = s;
    return STRATA_OK;
}

static strata_status_t tp_wait(void *ctx, void *handle)
{
    strata_tp_group_t *g = ctx;
    tp_slot_t *s = handle;
    strata_status_t rc = s->status;
    if (s->req) {
        uint64_t t0 = st_now_ns();
        strata_trace_begin("comm", "tp.wait");
        rc = strata_request_wait(s->req);
        strata_trace_end("comm", "tp.wait");
        uint64_t t1 = st_now_ns();
        s->req = NULL;
        g->stats.wait_s += (double)(t1 - t0) * 1e-9;
        finish(g, s, t1);
    }
    s->used = false;
    return rc;
}

static void tp_progress(void *ctx)
{
    strata_tp_group_t *g = ctx;
    for (int i = 0; i < TP_SLOTS; i++) {
        tp_slot_t *s = &g->slot[i];
        if (!s->req)
            continue;
        bool done = false;
        strata_status_t rc = strata_request_test(s->req, &done);
        if (done || rc < 0) { // released by test when done; an error is kept for the wait
            if (!done)
                continue;
            s->req = NULL;
            s->status = rc;
            finish(g, s, st_now_ns());
        }
    }
}

strata_tp_ops_t strata_tp_group_ops(strata_tp_group_t *g)
{
    return (strata_tp_ops_t){.ctx = g, .start = tp_start, .wait = tp_wait, .progress = tp_progress};
}
