/* Flows on a fabric: the time of concurrent point-to-point flows, each limited by the most shared
 * link on its path, and from it the time of a whole transfer plan (xfer_plan.c). This is the
 * "slowest shared link and how many flows share it" half of the network model; the flat
 * alpha-beta formulas are in netmodel.c.
 *
 * Links: a flow from a to b with lowest common level L leaves a through a's own link of level L
 * (bw of level L, per rank) and, for every level j < L, the uplink of a's level-j unit (capacity
 * size * bw(j+1) / oversub(j+1)); it enters b the same way. Directions are separate (full duplex).
 */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "strata/netmodel.h"

static double level_bw(const strata_topo_level_t *lv)
{
    return lv->bw_Bps * (lv->efficiency > 0 ? lv->efficiency : 1.0);
}

/* Link ids: rank links (rank, level, direction) first, then unit uplinks (level j, unit,
 * direction) from ubase[j]. */
typedef struct linkmap {
    int L, total;
    int ubase[STRATA_TOPO_MAX_LEVELS];
} linkmap_t;

static void linkmap_init(const strata_fabric_t *f, linkmap_t *m)
{
    m->L = f->topo.nlevels;
    int at = 2 * f->nranks * m->L;
    for (int j = 0; j < m->L; j++) {
        m->ubase[j] = at;
        at += 2 * f->nunits[j];
    }
    m->total = at;
}

#define MAX_PATH (2 * (STRATA_TOPO_MAX_LEVELS + 1))

/* The rate (bytes/s) and latency of each of n concurrent flows, shared max-min fairly
 * (progressive filling): the most contended link splits its capacity evenly among its flows,
 * those flows are fixed at that share, the capacity they use elsewhere is taken off, and so on.
 * So a flow held back by an oversubscribed uplink leaves the rest of its NIC to the others, as TCP
 * flows do. False when out of memory. */
static bool flow_rates(const strata_fabric_t *f, int n, const int *src, const int *dst,
                       double *rate_out, double *lat_out)
{
    linkmap_t m;
    linkmap_init(f, &m);
    int *cnt = calloc((size_t)m.total, sizeof *cnt);
    int *usize = calloc((size_t)m.total, sizeof *usize); // members per unit, at its uplink id
    double *cap = malloc((size_t)m.total * sizeof *cap + 1);
    int *path = malloc((size_t)n * MAX_PATH * sizeof *path + 1),
        *plen = calloc((size_t)n + 1, sizeof *plen);
    int *used = malloc((size_t)m.total * sizeof *used + 1), nused = 0;
    bool ok = cnt && usize && cap && path && plen && used;
    for (int j = 0; ok && j < m.L; j++)
        for (int r = 0; r < f->nranks; r++)
            usize[m.ubase[j] + 2 * strata_fabric_unit(f, j, r)]++;
    for (int i = 0; ok && i < n; i++) { // each flow's links and their capacities
        int L = strata_fabric_common_level(f, src[i], dst[i]);
        rate_out[i] = 1e300;
        lat_out[i] = L < 0 ? 0 : f->topo.level[L].latency_s;
        if (L < 0)
            continue;
        for (int d = 0; d < 2; d++) {
            int r = d ? dst[i] : src[i];
            int id = (r * m.L + L) * 2 + d;
            cap[id] = level_bw(&f->topo.level[L]);
            path[i * MAX_PATH + plen[i]++] = id;
            for (int j = 0; j < L; j++) {
                const strata_topo_level_t *up = &f->topo.level[j + 1];
                id = m.ubase[j] + 2 * strata_fabric_unit(f, j, r) + d;
                cap[id] = usize[id - d] * level_bw(up) / up->oversub;
                path[i * MAX_PATH + plen[i]++] = id;
            }
        }
        for (int k = 0; k < plen[i]; k++)
            if (cnt[path[i * MAX_PATH + k]]++ == 0)
                used[nused++] = path[i * MAX_PATH + k];
    }
    for (int left = n; ok && left > 0;) {
        int best = -1;
        double share = 0;
        for (int u = 0; u < nused; u++) {
            int id = used[u];
            if (cnt[id] > 0 && (best < 0 || cap[id] / cnt[id] < share)) {
                best = id;
                share = cap[id] / cnt[id];
            }
        }
        if (best < 0)
            break; // only flows inside one rank remain
        for (int i = 0; i < n; i++) {
            if (rate_out[i] < 1e300 || !plen[i])
                continue;
            bool through = false;
            for (int k = 0; k < plen[i] && !through; k++)
                through = path[i * MAX_PATH + k] == best;
            if (!through)
                continue;
            rate_out[i] = share > 0 ? share : 1e-30;
            left--;
            for (int k = 0; k < plen[i]; k++) {
                int id = path[i * MAX_PATH + k];
                cap[id] -= share;
                cnt[id]--;
            }
        }
    }
    free(cnt);
    free(usize);
    free(cap);
    free(path);
    free(plen);
    free(used);
    return ok;
}

/* Seconds of each of n concurrent flows of bytes[i] into t[i]. */
static bool flows_each(const strata_fabric_t *f, int n, const int *src, const int *dst,
                       const double *bytes, double *t)
{
    double *lat = malloc((size_t)n * sizeof *lat + 1);
    bool ok = lat && flow_rates(f, n, src, dst, t, lat);
    for (int i = 0; ok && i < n; i++)
        t[i] = lat[i] + bytes[i] / t[i];
    free(lat);
    return ok;
}

double strata_netmodel_flows_time(const strata_fabric_t *f, int n, const int *src, const int *dst,
                                  const double *bytes)
{
    if (n <= 0)
        return 0;
    double *t = malloc((size_t)n * sizeof *t), worst = 0;
    if (!t || !flows_each(f, n, src, dst, bytes, t)) {
        free(t);
        return -1;
    }
    for (int i = 0; i < n; i++)
        worst = t[i] > worst ? t[i] : worst;
    free(t);
    return worst;
}

static int xfer_slot_cmp(const void *a, const void *b)
{
    const strata_xfer_t *x = a, *y = b;
    if (x->slot != y->slot)
        return x->slot < y->slot ? -1 : 1;
    if (x->src != y->src)
        return x->src < y->src ? -1 : 1;
    return (x->dst > y->dst) - (x->dst < y->dst);
}

/* The plan's flows, one per (slot, sender, receiver) with the bytes of all its pieces, sorted by
 * slot. Returns the count, or -1 when out of memory. */
static int plan_flows(const strata_xfer_plan_t *p, size_t esize, int **src_out, int **dst_out,
                      int **slot_out, double **bytes_out)
{
    strata_xfer_t *x = malloc((size_t)p->n * sizeof *x + 1);
    int *src = malloc((size_t)p->n * 3 * sizeof *src + 1);
    double *bytes = malloc((size_t)p->n * sizeof *bytes + 1);
    if (!x || !src || !bytes) {
        free(x);
        free(src);
        free(bytes);
        return -1;
    }
    memcpy(x, p->x, (size_t)p->n * sizeof *x);
    qsort(x, (size_t)p->n, sizeof *x, xfer_slot_cmp);
    int *dst = src + p->n, *slot = dst + p->n, k = 0;
    for (int i = 0; i < p->n; i++) { // pieces between one pair in one slot share a connection
        if (k && slot[k - 1] == x[i].slot && src[k - 1] == x[i].src && dst[k - 1] == x[i].dst) {
            bytes[k - 1] += (double)(x[i].len * esize);
            continue;
        }
        src[k] = x[i].src;
        dst[k] = x[i].dst;
        slot[k] = x[i].slot;
        bytes[k++] = (double)(x[i].len * esize);
    }
    free(x);
    *src_out = src;
    *dst_out = dst;
    *slot_out = slot;
    *bytes_out = bytes;
    return k;
}

/* Large plans: slot by slot, each flow's time from the slot's sharing; a flow starts when both
 * ends finished their previous slot. Linear in the plan's size. */
static double plan_time_slots(const strata_fabric_t *f, const strata_xfer_plan_t *p, size_t esize)
{
    int *src, *dst, *slot;
    double *bytes;
    int nf = plan_flows(p, esize, &src, &dst, &slot, &bytes);
    if (nf < 0)
        return -1;
    const int nr = f->nranks;
    double *fin = calloc((size_t)nr * 2, sizeof *fin), *dur = malloc((size_t)nf * sizeof *dur + 1);
    double total = fin && dur ? 0 : -1;
    for (int i = 0; i < nf && total >= 0;) {
        int k = i;
        while (k < nf && slot[k] == slot[i])
            k++;
        if (!flows_each(f, k - i, src + i, dst + i, bytes + i, dur + i)) {
            total = -1;
            break;
        }
        double *next = fin + nr;
        memcpy(next, fin, (size_t)nr * sizeof *fin);
        for (int j = i; j < k; j++) {
            double start = fin[src[j]] > fin[dst[j]] ? fin[src[j]] : fin[dst[j]];
            double end = start + dur[j];
            next[src[j]] = end > next[src[j]] ? end : next[src[j]];
            next[dst[j]] = end > next[dst[j]] ? end : next[dst[j]];
            total = end > total ? end : total;
        }
        memcpy(fin, next, (size_t)nr * sizeof *fin);
        i = k;
    }
    free(fin);
    free(dur);
    free(src);
    free(bytes);
    return total;
}

/* Small plans: a fluid simulation. Each rank runs its slots in order; a flow starts when both
 * its ends have reached its slot, waits its level's latency, then moves its bytes at the fair share
 * of its most shared link among the flows moving at that moment; shares are recomputed whenever a
 * flow starts or ends. A rank's slot ends when its last flow of the slot ends. */
static double plan_time_fluid(const strata_fabric_t *f, const strata_xfer_plan_t *p, size_t esize)
{
    int *src, *dst, *slot;
    double *bytes;
    int nf = plan_flows(p, esize, &src, &dst, &slot, &bytes);
    if (nf < 0)
        return -1;
    const int nr = f->nranks;
    // Per rank: its flows in slot order (rf[rfo[r] .. rfo[r+1])), a cursor, and what is pending.
    int *rfo = calloc((size_t)nr + 1, sizeof *rfo), *rf = malloc((size_t)nf * 2 * sizeof *rf + 1);
    int *cur = calloc((size_t)nr * 2, sizeof *cur), *ready = calloc((size_t)nf + 1, sizeof *ready);
    int *act = malloc((size_t)nf * sizeof *act + 1),
        *asrc = malloc((size_t)nf * 2 * sizeof *asrc + 1);
    double *left = malloc((size_t)nf * 4 * sizeof *left + 1);
    double total = -1;
    if (!rfo || !rf || !cur || !ready || !act || !asrc || !left)
        goto out;
    for (int i = 0; i < nf; i++) {
        rfo[src[i] + 1]++;
        rfo[dst[i] + 1]++;
    }
    for (int r = 0; r < nr; r++)
        rfo[r + 1] += rfo[r];
    int *fill = cur + nr; // temporary fill cursors
    memcpy(fill, rfo, (size_t)nr * sizeof *fill);
    for (int i = 0; i < nf; i++) {
        rf[fill[src[i]]++] = i;
        rf[fill[dst[i]]++] = i;
    }
    for (int r = 0; r < nr; r++)
        cur[r] = rfo[r];
    int *pend = fill; // flows of a rank's current slot not yet finished
    double *go = left + nf, *rate = go + nf, *lat = rate + nf, now = 0;
    int nact = 0, done = 0;
    int *adst = asrc + nf;
    // Enter the first slot of every rank; a flow is active once both ends are in its slot.
    for (int r = 0; r < nr; r++) {
        pend[r] = 0;
        for (int j = cur[r]; j < rfo[r + 1] && slot[rf[j]] == slot[rf[cur[r]]]; j++) {
            pend[r]++;
            if (++ready[rf[j]] == 2)
                act[nact++] = rf[j];
        }
    }
    for (int i = 0; i < nf; i++)
        left[i] = bytes[i];
    for (int i = 0; i < nact; i++)
        go[act[i]] = -1; // latency to be set below
    bool fresh = true;
    while (done < nf) {
        if (nact == 0) // cannot happen for a valid plan: every flow's ends reach its slot
            goto out;
        for (int i = 0; i < nact; i++) {
            asrc[i] = src[act[i]];
            adst[i] = dst[act[i]];
        }
        if (!flow_rates(f, nact, asrc, adst, rate, lat))
            goto out;
        if (fresh)
            for (int i = 0; i < nact; i++)
                if (go[act[i]] < 0)
                    go[act[i]] = now + lat[i];
        fresh = false;
        // Rates among the flows moving now (those past their latency).
        int nmove = 0;
        for (int i = 0; i < nact; i++)
            if (go[act[i]] <= now) {
                asrc[nmove] = src[act[i]];
                adst[nmove++] = dst[act[i]];
            }
        if (nmove && !flow_rates(f, nmove, asrc, adst, rate, lat))
            goto out;
        double next = 1e300;
        for (int i = 0, m = 0; i < nact; i++) {
            int fl = act[i];
            double t = go[fl] > now ? go[fl] : now + left[fl] / rate[m++];
            next = t < next ? t : next;
        }
        for (int i = 0, m = 0; i < nact; i++) // move bytes until the next event
            if (go[act[i]] <= now)
                left[act[i]] -= rate[m++] * (next - now);
        now = next;
        int keep = 0, nnew = 0;
        int *newly = asrc; // reuse: flows that became active
        for (int i = 0; i < nact; i++) {
            int fl = act[i];
            if (go[fl] > now || left[fl] > 1e-9 * (bytes[fl] + 1)) {
                act[keep++] = fl;
                continue;
            }
            done++;
            int ends[2] = {src[fl], dst[fl]};
            for (int e = 0; e < 2; e++) {
                int r = ends[e];
                if (--pend[r] > 0)
                    continue;
                // Slot over: move r to its next slot.
                int s0 = slot[rf[cur[r]]];
                while (cur[r] < rfo[r + 1] && slot[rf[cur[r]]] == s0)
                    cur[r]++;
                for (int j = cur[r]; j < rfo[r + 1] && slot[rf[j]] == slot[rf[cur[r]]]; j++) {
                    pend[r]++;
                    if (++ready[rf[j]] == 2)
                        newly[nnew++] = rf[j];
                }
            }
        }
        nact = keep;
        for (int i = 0; i < nnew; i++) {
            act[nact++] = newly[i];
            go[newly[i]] = -1;
            fresh = true;
        }
    }
    total = now;
out:
    free(src);
    free(bytes);
    free(rfo);
    free(rf);
    free(cur);
    free(ready);
    free(act);
    free(asrc);
    free(left);
    return total;
}

double strata_netmodel_plan_time(const strata_fabric_t *f, const strata_xfer_plan_t *p,
                                 size_t esize)
{
    if (p->n == 0)
        return 0;
    // The fluid simulation costs (flows x concurrent flows); beyond this the slot model.
    return p->n <= 20000 ? plan_time_fluid(f, p, esize) : plan_time_slots(f, p, esize);
}

double strata_netmodel_fabric_cost(const strata_fabric_t *f, strata_coll_t coll,
                                   strata_plan_kind_t kind, double bytes, size_t esize,
                                   strata_xfer_pipe_t *pipe)
{
    static const strata_plan_phase_t phase_of[STRATA_COLL_COUNT] = {
        [STRATA_COLL_ALLREDUCE] = STRATA_PHASE_ALLREDUCE,
        [STRATA_COLL_REDUCE_SCATTER] = STRATA_PHASE_REDUCE_SCATTER,
        [STRATA_COLL_ALLGATHER] = STRATA_PHASE_ALLGATHER,
        [STRATA_COLL_BCAST] = STRATA_PHASE_BCAST,
        [STRATA_COLL_REDUCE] = STRATA_PHASE_REDUCE,
    };
    if (coll < 0 || coll >= STRATA_COLL_COUNT || !phase_of[coll] || esize == 0 ||
        !strata_plan_kind_serves(kind, phase_of[coll]))
        return -1;
    const int n = f->nranks, max_segs = kind == STRATA_PLAN_HIER ? 16 : 1;
    size_t count = (size_t)(bytes / (double)esize);
    size_t *blen = malloc((size_t)n * (1 + 2 * (size_t)max_segs) * sizeof *blen);
    if (!blen)
        return -1;
    size_t *off = blen + n, *len = off + (size_t)n * (size_t)max_segs;
    for (int b = 0; b < n; b++)
        blen[b] = count / (size_t)n + ((size_t)b < count % (size_t)n);
    double best = -1;
    // The hierarchical plan is priced at every pipeline of the grid; the best one is its cost.
    for (int segs = 1; segs <= max_segs; segs *= 2)
        for (int stagger = 1; stagger <= (segs > 1 ? 4 : 1); stagger++) {
            strata_xfer_pipe_t pl = {segs, stagger};
            strata_xfer_plan_t p;
            if (strata_xfer_plan_layout(f, kind, blen, &pl, off, len) < 0 ||
                strata_xfer_plan_build(f, kind, phase_of[coll], off, len, &pl, -1, &p) < 0)
                break;
            double t = strata_netmodel_plan_time(f, &p, esize);
            strata_xfer_plan_free(&p);
            if (t >= 0 && (best < 0 || t < best)) {
                best = t;
                if (pipe)
                    *pipe = pl;
            }
        }
    free(blen);
    return best;
}
