/* Flows on a fabric: the time of concurrent point-to-point flows, each limited by the most shared
 * link on its path, and from it the time of a whole transfer plan (xfer_plan.c). This is the
 * "slowest shared link and how many flows share it" half of the network model; the flat
 * alpha-beta formulas are in netmodel.c.
 *
 * Links: a flow from a to b with lowest common level L leaves a through a's own link of level L
 * (bw of level L, per rank) and, for every level j < L, the uplink of a's level-j unit (capacity
 * size * bw(j+1) / oversub(j+1)); it enters b the same way. Directions are separate (full duplex). */
#include "base/base.h"
#include "strata/netmodel.h"

#include <stdlib.h>
#include <string.h>

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

/* Seconds of each of n concurrent flows into t[i]; false when out of memory. */
static bool flows_each(const strata_fabric_t *f, int n, const int *src, const int *dst,
                       const double *bytes, double *t)
{
    linkmap_t m;
    linkmap_init(f, &m);
    int *flows = calloc((size_t)m.total, sizeof *flows);
    int *usize = calloc((size_t)m.total, sizeof *usize); // members per unit, at its uplink id
    if (!flows || !usize) {
        free(flows);
        free(usize);
        return false;
    }
    for (int j = 0; j < m.L; j++)
        for (int r = 0; r < f->nranks; r++)
            usize[m.ubase[j] + 2 * strata_fabric_unit(f, j, r)]++;
    for (int i = 0; i < n; i++) {
        int a = src[i], b = dst[i];
        int L = strata_fabric_common_level(f, a, b);
        if (L < 0)
            continue;
        for (int d = 0; d < 2; d++) {
            int r = d ? b : a;
            flows[(r * m.L + L) * 2 + d]++;
            for (int j = 0; j < L; j++)
                flows[m.ubase[j] + 2 * strata_fabric_unit(f, j, r) + d]++;
        }
    }
    for (int i = 0; i < n; i++) {
        int a = src[i], b = dst[i];
        int L = strata_fabric_common_level(f, a, b);
        t[i] = 0;
        if (L < 0)
            continue;
        const strata_topo_level_t *lv = &f->topo.level[L];
        double rate = level_bw(lv);
        for (int d = 0; d < 2; d++) {
            int r = d ? b : a;
            double share = level_bw(lv) / flows[(r * m.L + L) * 2 + d];
            rate = share < rate ? share : rate;
            for (int j = 0; j < L; j++) {
                const strata_topo_level_t *up = &f->topo.level[j + 1];
                int id = m.ubase[j] + 2 * strata_fabric_unit(f, j, r);
                double cap = usize[id] * level_bw(up) / up->oversub;
                share = cap / flows[id + d];
                rate = share < rate ? share : rate;
            }
        }
        t[i] = lv->latency_s + bytes[i] / rate;
    }
    free(flows);
    free(usize);
    return true;
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

double strata_netmodel_plan_time(const strata_fabric_t *f, const strata_xfer_plan_t *p,
                                 size_t esize)
{
    if (p->n == 0)
        return 0;
    const int nr = f->nranks;
    strata_xfer_t *x = malloc((size_t)p->n * sizeof *x);
    int *src = malloc((size_t)p->n * 2 * sizeof *src);
    double *bytes = malloc((size_t)p->n * 2 * sizeof *bytes);
    double *fin = calloc((size_t)nr * 2, sizeof *fin);
    if (!x || !src || !bytes || !fin) {
        free(x);
        free(src);
        free(bytes);
        free(fin);
        return -1;
    }
    memcpy(x, p->x, (size_t)p->n * sizeof *x);
    qsort(x, (size_t)p->n, sizeof *x, xfer_slot_cmp);
    int *dst = src + p->n;
    double *dur = bytes + p->n, *next = fin + nr;
    double total = 0;
    for (int i = 0; i < p->n;) {
        int k = 0, slot = x[i].slot;
        for (; i < p->n && x[i].slot == slot; i++) { // one flow per pair: pieces share a connection
            if (k && src[k - 1] == x[i].src && dst[k - 1] == x[i].dst) {
                bytes[k - 1] += (double)(x[i].len * esize);
                continue;
            }
            src[k] = x[i].src;
            dst[k] = x[i].dst;
            bytes[k++] = (double)(x[i].len * esize);
        }
        if (!flows_each(f, k, src, dst, bytes, dur)) {
            total = -1;
            break;
        }
        // A transfer starts when both ends have finished their previous slot (a rank waits only
        // for its own messages, not for the whole job), and ends its duration later.
        memcpy(next, fin, (size_t)nr * sizeof *fin);
        for (int j = 0; j < k; j++) {
            double start = fin[src[j]] > fin[dst[j]] ? fin[src[j]] : fin[dst[j]];
            double end = start + dur[j];
            next[src[j]] = end > next[src[j]] ? end : next[src[j]];
            next[dst[j]] = end > next[dst[j]] ? end : next[dst[j]];
            total = end > total ? end : total;
        }
        memcpy(fin, next, (size_t)nr * sizeof *fin);
    }
    free(x);
    free(src);
    free(bytes);
    free(fin);
    return total;
}

double strata_netmodel_fabric_cost(const strata_fabric_t *f, strata_coll_t coll,
                                   strata_plan_kind_t kind, double bytes, size_t esize,
                                   strata_pipeline_t *pipe)
{
    static const strata_plan_phase_t phase_of[STRATA_COLL_COUNT] = {
        [STRATA_COLL_ALLREDUCE] = STRATA_PHASE_ALLREDUCE,
        [STRATA_COLL_REDUCE_SCATTER] = STRATA_PHASE_REDUCE_SCATTER,
        [STRATA_COLL_ALLGATHER] = STRATA_PHASE_ALLGATHER,
    };
    if (coll < 0 || coll >= STRATA_COLL_COUNT || !phase_of[coll] || esize == 0)
        return -1;
    const int n = f->nranks;
    size_t count = (size_t)(bytes / (double)esize);
    size_t *off = malloc((size_t)n * 2 * sizeof *off);
    if (!off)
        return -1;
    size_t *len = off + n;
    size_t at = 0;
    for (int b = 0; b < n; b++) {
        len[b] = count / (size_t)n + ((size_t)b < count % (size_t)n);
        off[b] = at;
        at += len[b];
    }
    double best = -1;
    // The hierarchical plan is priced at every pipeline of the grid; the best one is its cost.
    const bool hier = kind == STRATA_PLAN_HIER;
    for (int segs = 1; segs <= (hier ? 16 : 1); segs *= 2)
        for (int stagger = 1; stagger <= (hier && segs > 1 ? 4 : 1); stagger++) {
            strata_pipeline_t pl = {segs, stagger};
            strata_xfer_plan_t p;
            if (strata_xfer_plan_build(f, kind, phase_of[coll], off, len, &pl, -1, &p) < 0)
                break;
            double t = strata_netmodel_plan_time(f, &p, esize);
            strata_xfer_plan_free(&p);
            if (t >= 0 && (best < 0 || t < best)) {
                best = t;
                if (pipe)
                    *pipe = pl;
            }
        }
    free(off);
    return best;
}
