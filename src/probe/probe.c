/* The fabric probe (probe.h): per level of the communicator's fabric, a ping-pong for latency, a
 * one-way stream for bandwidth, and concurrent streams across one uplink for oversubscription.
 * Every measurement runs between barriers so the rest of the job stays quiet; results are
 * broadcast from the measuring rank so every rank returns the same tree. */
#include "strata/probe.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"

enum { TAG_PING = 0x5001, TAG_DATA, TAG_ACK };

strata_probe_opts_t strata_probe_opts_default(void)
{
    return (strata_probe_opts_t){.bw_bytes = 4u << 20, .bw_iters = 8, .lat_iters = 200};
}

static double now_s(void)
{
    return (double)st_now_ns() * 1e-9;
}

/* Streams `iters` messages of `bytes` from src to dst (one warm-up first, which also opens the
 * connection); returns on src the seconds from the first timed send to the final ack. */
static strata_status_t stream(strata_comm_t *c, int src, int dst, char *buf, size_t bytes,
                              int iters, double *secs)
{
    const int me = strata_comm_rank(c);
    char ack = 0;
    *secs = 0;
    if (me == src) {
        ST_TRY(strata_send(c, buf, bytes, STRATA_DTYPE_U8, dst, TAG_DATA));
        ST_TRY(strata_recv(c, &ack, 1, STRATA_DTYPE_U8, dst, TAG_ACK));
        double t0 = now_s();
        for (int i = 0; i < iters; i++)
            ST_TRY(strata_send(c, buf, bytes, STRATA_DTYPE_U8, dst, TAG_DATA));
        ST_TRY(strata_recv(c, &ack, 1, STRATA_DTYPE_U8, dst, TAG_ACK));
        *secs = now_s() - t0;
    } else if (me == dst) {
        for (int round = 0; round < 2; round++) {
            for (int i = 0; i < (round ? iters : 1); i++)
                ST_TRY(strata_recv(c, buf, bytes, STRATA_DTYPE_U8, src, TAG_DATA));
            ST_TRY(strata_send(c, &ack, 1, STRATA_DTYPE_U8, src, TAG_ACK));
        }
    }
    return STRATA_OK;
}

static strata_status_t pingpong(strata_comm_t *c, int a, int b, int iters, double *one_way)
{
    const int me = strata_comm_rank(c);
    char x[8] = {0};
    *one_way = 0;
    if (me != a && me != b)
        return STRATA_OK;
    int peer = me == a ? b : a;
    double t0 = 0;
    for (int i = -10; i < iters; i++) { // ten warm-ups
        if (i == 0)
            t0 = now_s();
        if (me == a) {
            ST_TRY(strata_send(c, x, 8, STRATA_DTYPE_U8, peer, TAG_PING));
            ST_TRY(strata_recv(c, x, 8, STRATA_DTYPE_U8, peer, TAG_PING));
        } else {
            ST_TRY(strata_recv(c, x, 8, STRATA_DTYPE_U8, peer, TAG_PING));
            ST_TRY(strata_send(c, x, 8, STRATA_DTYPE_U8, peer, TAG_PING));
        }
    }
    *one_way = (now_s() - t0) / iters / 2;
    return STRATA_OK;
}

/* The first pair in tree order whose lowest common level is l. */
static bool pick_pair(const strata_fabric_t *f, const int *order, int l, int *a, int *b)
{
    for (int i = 0; i < f->nranks; i++)
        for (int j = i + 1; j < f->nranks; j++)
            if (strata_fabric_common_level(f, order[i], order[j]) == l) {
                *a = order[i];
                *b = order[j];
                return true;
            }
    return false;
}

/* Every rank of a's level-(l-1) unit streams to a partner in b's at once; returns the aggregate
 * bytes/s (on every rank) and the number of pairs. */
static strata_status_t uplink(strata_comm_t *c, const strata_fabric_t *f, int l, int a, int b,
                              char *buf, const strata_probe_opts_t *o, int *pairs, double *agg)
{
    const int n = f->nranks, me = strata_comm_rank(c);
    int *U = malloc((size_t)n * 2 * sizeof *U), nu = 0, nv = 0;
    if (!U)
        return st_error(STRATA_ERR_NO_MEMORY, "probe: out of memory");
    int *V = U + n;
    for (int r = 0; r < n; r++) {
        if (strata_fabric_unit(f, l - 1, r) == strata_fabric_unit(f, l - 1, a))
            U[nu++] = r;
        else if (strata_fabric_unit(f, l - 1, r) == strata_fabric_unit(f, l - 1, b))
            V[nv++] = r;
    }
    int k = nu < nv ? nu : nv, src = -1, dst = -1;
    for (int i = 0; i < k; i++) {
        if (U[i] == me || V[i] == me) {
            src = U[i];
            dst = V[i];
        }
    }
    free(U);
    *pairs = k;
    double secs = 0;
    strata_status_t rc = strata_barrier(c);
    if (rc == STRATA_OK && src >= 0)
        rc = stream(c, src, dst, buf, o->bw_bytes, o->bw_iters, &secs);
    if (rc == STRATA_OK) // the slowest sender sets the aggregate
        rc = strata_allreduce(c, &secs, &secs, 1, STRATA_DTYPE_F64, STRATA_OP_MAX);
    *agg = secs > 0 ? (double)k * (double)o->bw_iters * (double)o->bw_bytes / secs : 0;
    return rc;
}

strata_status_t strata_probe_run(strata_comm_t *comm, const strata_probe_opts_t *opts,
                                 strata_probe_result_t *out)
{
    strata_probe_opts_t o = opts ? *opts : strata_probe_opts_default();
    if (!comm || !out || o.bw_bytes < 1 || o.bw_iters < 1 || o.lat_iters < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "probe: expected a communicator, a result and "
                                                "positive sizes and iteration counts");
    memset(out, 0, sizeof *out);
    const strata_fabric_t *f = strata_comm_fabric(comm);
    out->topo = f->topo;
    const int n = f->nranks;
    int *order = malloc((size_t)n * sizeof *order);
    char *buf = malloc(o.bw_bytes);
    if (!order || !buf) {
        free(order);
        free(buf);
        return st_error(STRATA_ERR_NO_MEMORY, "probe: out of memory");
    }
    memset(buf, 0x5a, o.bw_bytes);
    strata_fabric_tree_order(f, order);
    strata_status_t rc = STRATA_OK;
    for (int l = 0; l < f->topo.nlevels && rc == STRATA_OK; l++) {
        strata_probe_level_t *pl = &out->level[l];
        if (!pick_pair(f, order, l, &pl->a, &pl->b))
            continue;
        double res[2] = {0, 0}; // latency, bandwidth: measured on a, then broadcast
        double secs = 0;
        rc = strata_barrier(comm);
        if (rc == STRATA_OK)
            rc = pingpong(comm, pl->a, pl->b, o.lat_iters, &res[0]);
        if (rc == STRATA_OK)
            rc = strata_barrier(comm);
        if (rc == STRATA_OK)
            rc = stream(comm, pl->a, pl->b, buf, o.bw_bytes, o.bw_iters, &secs);
        if (rc == STRATA_OK) {
            res[1] = secs > 0 ? (double)o.bw_iters * (double)o.bw_bytes / secs : 0;
            rc = strata_bcast(comm, res, 2, STRATA_DTYPE_F64, pl->a);
        }
        if (rc < 0)
            break;
        pl->measured = true;
        pl->latency_s = res[0];
        pl->bw_Bps = res[1];
        pl->oversub = 1;
        if (l > 0) {
            rc = uplink(comm, f, l, pl->a, pl->b, buf, &o, &pl->pairs, &pl->agg_Bps);
            if (rc == STRATA_OK && pl->pairs > 1 && pl->agg_Bps > 0) {
                double os = pl->pairs * pl->bw_Bps / pl->agg_Bps;
                pl->oversub = os > 1 ? os : 1;
            }
        }
        strata_topo_level_t *lv = &out->topo.level[l];
        lv->bw_Bps = pl->bw_Bps;
        lv->latency_s = pl->latency_s;
        lv->oversub = pl->oversub;
        lv->efficiency = 0; // measured numbers are what collectives reach
    }
    // Fanouts as the job sees them: the largest number of children in a unit of each level.
    for (int l = 0; l < f->topo.nlevels; l++) {
        int best = 1;
        for (int u = 0; u < f->nunits[l]; u++) {
            int kids = 0;
            for (int r = 0; r < n; r++) {
                if (strata_fabric_unit(f, l, r) != u)
                    continue;
                int child = l ? strata_fabric_unit(f, l - 1, r) : r, seen = 0;
                for (int q = 0; q < r && !seen; q++)
                    seen = strata_fabric_unit(f, l, q) == u &&
                           (l ? strata_fabric_unit(f, l - 1, q) : q) == child;
                kids += !seen;
            }
            best = kids > best ? kids : best;
        }
        out->topo.level[l].fanout = best;
    }
    free(order);
    free(buf);
    return rc;
}
