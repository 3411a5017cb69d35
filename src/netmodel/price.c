/* Prices (price.h): every algorithm of every collective as lines on a shape (shape.c), the choice
 * among the offered ones, the breakdown by level, and the planner's memoised entry point.
 *
 * An algorithm is accounted as steps, each at one level of the tree: `count` times the step's
 * latency, plus its bytes (a fraction of the collective's) at its rate, plus gamma per byte
 * reduced. Per level the latencies (a) and the seconds per byte (b) add up; a line is their sums,
 * and a level's share at a size is a + b * bytes. The hierarchical algorithm is pipelined: with S
 * segments every level works on a segment at once, so after the first segment has gone through
 * every level, the busiest level (most seconds per byte) sets the pace for the other S - 1. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/thread_value.h"
#include "strata/price.h"

typedef struct acc {
    double a[STRATA_TOPO_MAX_LEVELS]; /* seconds of latency */
    double b[STRATA_TOPO_MAX_LEVELS]; /* seconds per byte of the collective */
} acc_t;

/* `count` steps at `level`, each with latency `lat` and `frac` of the bytes at `rate`. */
static void step(acc_t *c, int level, double count, double lat, double frac, double rate)
{
    c->a[level] += count * lat;
    if (frac > 0)
        c->b[level] += count * frac / rate;
}

/* The same, at the top level's latency and all-members rate (the flat formulas' link). */
static void flat(acc_t *c, const strata_price_shape_t *s, double nlat, double frac)
{
    const strata_price_level_t *t = &s->level[s->top];
    step(c, s->top, 1, nlat * t->latency_s, frac, t->all_Bps);
}

/* A butterfly exchange of `frac` of the bytes meeting at `level`, every member at once. */
static void exchange(acc_t *c, const strata_price_shape_t *s, int level, double count, double frac)
{
    step(c, level, count, s->level[level].latency_s, frac, s->level[level].all_Bps);
}

static void reduce(acc_t *c, const strata_price_shape_t *s, int level, double frac)
{
    c->b[level] += frac * s->gamma_s_per_b;
}

static void ring(acc_t *c, const strata_price_shape_t *s, const strata_price_ring_t *r, int steps,
                 bool reduces)
{
    step(c, r->level, steps, r->latency_s, 1.0 / s->n, r->rate_Bps);
    if (reduces)
        reduce(c, s, r->level, (s->n - 1.0) / s->n);
}

static int ceil_log2(int n)
{
    int l = 0;
    while ((1LL << l) < n)
        l++;
    return l;
}

/* The hierarchical algorithm with `segs` segments: per crossed level l, a ring among the
 * units_max children of a unit on the shard 1 / members_min, reduce-scatter then allgather.
 * Pipelined, the levels work at once and the busiest resource sets the pace: a member's own link
 * of each class (its NIC carries every scale-out level's phase), the uplink into each level
 * (every phase at that level or above), or the reductions. */
static void hier(acc_t *c, const strata_price_shape_t *s, bool rs, bool ag, int segs)
{
    acc_t lv = {0};
    double own[STRATA_LINK_CLASS_COUNT] = {0}, own_lat[STRATA_LINK_CLASS_COUNT] = {0};
    double up[STRATA_TOPO_MAX_LEVELS] = {0}, up_lat[STRATA_TOPO_MAX_LEVELS] = {0}, red = 0;
    int own_at[STRATA_LINK_CLASS_COUNT] = {0};
    for (int l = 0; l < s->nlevels; l++) {
        const strata_price_level_t *p = &s->level[l];
        if (p->units_max < 2)
            continue;
        double g = p->units_max, shard = 1.0 / p->members_min;
        double x = (rs + ag) * (g - 1) * shard / g; // bytes a member sends at this level
        step(&lv, l, (rs + ag) * (g - 1), p->latency_s, shard / g, p->all_Bps);
        if (rs) {
            reduce(&lv, s, l, (g - 1) / g * shard);
            red += (g - 1) / g * shard * s->gamma_s_per_b;
        }
        int k = p->link_class;
        own[k] += x / p->link_Bps;
        own_lat[k] += lv.a[l];
        own_at[k] = l;
        for (int j = 1; j <= l; j++) {
            up[j] += x / s->level[j].uplink_Bps;
            up_lat[j] += lv.a[l];
        }
    }
    // The busiest resource: its seconds per byte, the latency of the steps that use it, a level.
    double work = red, lat = 0;
    int at = s->top;
    for (int k = 0; k < STRATA_LINK_CLASS_COUNT; k++)
        if (own[k] > work) {
            work = own[k];
            lat = own_lat[k];
            at = own_at[k];
        }
    for (int j = 1; j < s->nlevels; j++)
        if (up[j] > work) {
            work = up[j];
            lat = up_lat[j];
            at = j;
        }
    for (int l = 0; l < s->nlevels; l++) {
        c->a[l] += lv.a[l];
        c->b[l] += lv.b[l] / segs;
    }
    if (segs > 1 && at >= 0) {
        c->a[at] += (segs - 1) * lat;
        c->b[at] += (segs - 1) * work / segs;
    }
}

/* The multi-dimensional ring allreduce on a torus (price.h): per dimension, in order, a ring
 * reduce-scatter on the shard the dimensions before left, then the allgathers back; a dimension
 * whose members have a link to either neighbour sends half of each step each way at once. */
static void torus(acc_t *c, const strata_price_shape_t *s)
{
    double shard = 1;
    for (int d = 0; d < s->torus_ndims; d++) {
        const strata_price_torus_dim_t *t = &s->torus_dim[d];
        const strata_price_level_t *p = &s->level[t->level];
        const double D = t->size, ways = t->both_ways ? 2 : 1;
        step(c, t->level, 2 * (D - 1), p->latency_s, shard / D / ways, p->all_Bps);
        reduce(c, s, t->level, shard * (D - 1) / D);
        shard /= D;
    }
}

/* The allreduce through the pool (price.h): the members' writes to nodes beside them, a gather at
 * the first member, then the chain and the fan-out of the result pipelined by packets, at the pace
 * of the busiest link: a member's own, the last node's (n copies, one by multicast), or a unit's
 * uplink, which the chain crosses once and the copies for the other units cross (once by
 * multicast). */
static void pool(acc_t *c, const strata_price_shape_t *s)
{
    const strata_price_level_t *t = &s->level[s->top];
    const double n = s->n, hops = n - 1, per_node = ceil(hops / s->pool_nodes);
    const double up = s->top > 0 ? t->uplink_Bps * t->members_min : INFINITY; // a unit's uplink
    const double away = s->pool_multicast ? 1 : n - t->members_min; // copies leaving the unit
    c->a[s->top] += 2 * s->pool_latency_s + t->latency_s; // write and its answer, the gather
    c->b[s->top] += fmax(1.0 / t->link_Bps, per_node / s->pool_Bps);
    c->a[s->top] += (hops + 1) * s->pool_latency_s; // the chain's hops, then the result's
    double pace = fmax(1.0 / t->link_Bps, (s->pool_multicast ? 1 : n) / s->pool_Bps);
    c->b[s->top] += fmax(pace, fmax(1.0, away) / up);
    reduce(c, s, s->top, per_node);
}

bool strata_price_serves(strata_coll_t coll, strata_algo_t algo)
{
    static const unsigned served[STRATA_COLL_COUNT] = {
        [STRATA_COLL_ALLREDUCE] =
            STRATA_PRICE_OFFER(STRATA_ALGO_RING) |
            STRATA_PRICE_OFFER(STRATA_ALGO_RECURSIVE_DOUBLING) |
            STRATA_PRICE_OFFER(STRATA_ALGO_HALVING_DOUBLING) |
            STRATA_PRICE_OFFER(STRATA_ALGO_DIRECT) | STRATA_PRICE_OFFER(STRATA_ALGO_RING_TREE) |
            STRATA_PRICE_OFFER(STRATA_ALGO_HIER) | STRATA_PRICE_OFFER(STRATA_ALGO_TORUS) |
            STRATA_PRICE_OFFER(STRATA_ALGO_POOL),
        [STRATA_COLL_REDUCE] = STRATA_PRICE_OFFER(STRATA_ALGO_BINOMIAL) |
                               STRATA_PRICE_OFFER(STRATA_ALGO_REDUCE_SCATTER_GATHER),
        [STRATA_COLL_BCAST] = STRATA_PRICE_OFFER(STRATA_ALGO_BINOMIAL) |
                              STRATA_PRICE_OFFER(STRATA_ALGO_SCATTER_ALLGATHER),
        [STRATA_COLL_REDUCE_SCATTER] =
            STRATA_PRICE_OFFER(STRATA_ALGO_RING) | STRATA_PRICE_OFFER(STRATA_ALGO_DIRECT) |
            STRATA_PRICE_OFFER(STRATA_ALGO_RING_TREE) | STRATA_PRICE_OFFER(STRATA_ALGO_HIER),
        [STRATA_COLL_ALLGATHER] =
            STRATA_PRICE_OFFER(STRATA_ALGO_RING) |
            STRATA_PRICE_OFFER(STRATA_ALGO_RECURSIVE_DOUBLING) |
            STRATA_PRICE_OFFER(STRATA_ALGO_DIRECT) | STRATA_PRICE_OFFER(STRATA_ALGO_RING_TREE) |
            STRATA_PRICE_OFFER(STRATA_ALGO_HIER),
        [STRATA_COLL_ALLTOALL] =
            STRATA_PRICE_OFFER(STRATA_ALGO_PAIRWISE) | STRATA_PRICE_OFFER(STRATA_ALGO_LINEAR),
        [STRATA_COLL_GATHER] = STRATA_PRICE_OFFER(STRATA_ALGO_LINEAR),
        [STRATA_COLL_SCATTER] = STRATA_PRICE_OFFER(STRATA_ALGO_LINEAR),
        [STRATA_COLL_BARRIER] = STRATA_PRICE_OFFER(STRATA_ALGO_DISSEMINATION),
    };
    return (unsigned)coll < STRATA_COLL_COUNT && (unsigned)algo < STRATA_ALGO_COUNT &&
           (served[coll] & STRATA_PRICE_OFFER(algo));
}

/* Accounts `algo` performing `coll` on `s` (segs: the hierarchical pipeline). False when it does
 * not serve the collective on this shape. */
static bool account(const strata_price_shape_t *s, strata_coll_t coll, strata_algo_t algo,
                    int segs, acc_t *c)
{
    memset(c, 0, sizeof *c);
    if (s->n <= 1 || !strata_price_serves(coll, algo))
        return false;
    const int n = s->n, lg = ceil_log2(n), m = s->nxor;
    const double frac = (n - 1.0) / n;
    const bool ar = coll == STRATA_COLL_ALLREDUCE, rs = coll == STRATA_COLL_REDUCE_SCATTER;
    switch (algo) {
    case STRATA_ALGO_RING:
        ring(c, s, &s->ring, ar ? 2 * (n - 1) : n - 1, ar || rs);
        return true;
    case STRATA_ALGO_RING_TREE: // in tree order; on a group crossing one level, the ring itself
        if (s->ncrossed < 2)
            return false;
        ring(c, s, &s->tree, ar ? 2 * (n - 1) : n - 1, ar || rs);
        return true;
    case STRATA_ALGO_HIER:
        if (s->ncrossed < 2)
            return false;
        hier(c, s, ar || rs, !rs, segs);
        return true;
    case STRATA_ALGO_TORUS:
        if (s->torus_ndims == 0)
            return false;
        torus(c, s);
        return true;
    case STRATA_ALGO_RECURSIVE_DOUBLING:
        if (coll == STRATA_COLL_ALLGATHER) { // Bruck: shifts of 2^k blocks, then a local rotation
            for (int k = 0; k < lg; k++) {
                double blocks = ST_MIN((double)(1LL << k), (double)(n - (1LL << k)));
                flat(c, s, 1, blocks / n);
            }
            reduce(c, s, s->top, 1);
            return true;
        }
        for (int k = 0; k < m; k++) {
            exchange(c, s, s->xor_level[k], 1, 1);
            reduce(c, s, s->xor_level[k], 1);
        }
        if (s->fold_level >= 0) { // the extra ranks fold in (reduced) and get the result back
            exchange(c, s, s->fold_level, 2, 1);
            reduce(c, s, s->fold_level, 1);
        }
        return true;
    case STRATA_ALGO_HALVING_DOUBLING:
        for (int k = 0; k < m; k++) { // halving step k and its mirror: partner r ^ (p >> (k + 1))
            int level = s->xor_level[m - 1 - k];
            double part = 1.0 / (double)(2LL << k);
            exchange(c, s, level, 2, part);
            reduce(c, s, level, part);
        }
        if (s->fold_level >= 0) {
            exchange(c, s, s->fold_level, 2, 1);
            reduce(c, s, s->fold_level, 1);
        }
        return true;
    case STRATA_ALGO_BINOMIAL: // step k: partners r and r + 2^k
        for (int k = 0; k < lg; k++) {
            int level = k < m ? s->xor_level[k] : s->fold_level;
            exchange(c, s, level, 1, 1);
            if (coll == STRATA_COLL_REDUCE)
                reduce(c, s, level, 1);
        }
        return true;
    case STRATA_ALGO_SCATTER_ALLGATHER:
        flat(c, s, lg, frac);
        ring(c, s, &s->ring, n - 1, false);
        return true;
    case STRATA_ALGO_REDUCE_SCATTER_GATHER:
        ring(c, s, &s->ring, n - 1, true);
        flat(c, s, n - 1, frac);
        return true;
    case STRATA_ALGO_PAIRWISE:
        flat(c, s, n - 1, frac);
        return true;
    case STRATA_ALGO_LINEAR: // alltoall: one latency, plus a fifth of one per extra message in flight
        if (coll == STRATA_COLL_ALLTOALL)
            flat(c, s, 1 + 0.2 * (n - 1), frac);
        else
            flat(c, s, n - 1, frac);
        return true;
    case STRATA_ALGO_DISSEMINATION:
        flat(c, s, lg, 0);
        return true;
    case STRATA_ALGO_DIRECT: // one host only; a byte crosses between processes once
        if (s->top != 0)
            return false;
        flat(c, s, n - 1 + lg, coll == STRATA_COLL_ALLREDUCE ? frac : frac / 2);
        if (ar || rs)
            reduce(c, s, 0, frac);
        return true;
    case STRATA_ALGO_POOL:
        if (s->pool_nodes < 1)
            return false;
        pool(c, s);
        return true;
    case STRATA_ALGO_COUNT:
        break;
    }
    return false;
}

static strata_price_line_t line_of(const acc_t *c, int levels, int segs)
{
    strata_price_line_t ln = {.pipe = {segs, 1}};
    for (int l = 0; l < levels; l++) {
        ln.alpha_s += c->a[l];
        ln.beta_s_per_b += c->b[l];
    }
    return ln;
}

/* Consecutive members, all at once, at the slowest hop's level. */
static strata_price_line_t hop_line(const strata_price_shape_t *s)
{
    strata_price_line_t ln = {.pipe = {1, 1}};
    if (s->n > 1) {
        ln.alpha_s = s->level[s->hop_level].latency_s;
        ln.beta_s_per_b = 1.0 / s->level[s->hop_level].all_Bps;
    }
    return ln;
}

void strata_price_table(const strata_price_shape_t *s, strata_coll_t coll,
                        strata_price_table_t *out)
{
    memset(out, 0, sizeof *out);
    out->coll = coll;
    out->top = s->top;
    out->hop = hop_line(s);
    int at = 0;
    for (int a = 0; a < STRATA_ALGO_COUNT; a++) {
        int nseg = a == STRATA_ALGO_HIER ? STRATA_PRICE_MAX_LINES : 1;
        out->first[a] = (unsigned char)at;
        for (int k = 0; k < nseg && at < STRATA_PRICE_TABLE_LINES; k++) {
            acc_t c; // the hierarchical algorithm at 1, 2, 4, 8, 16 segments
            if (!account(s, coll, (strata_algo_t)a, 1 << k, &c))
                break;
            out->line[at++] = line_of(&c, s->nlevels, 1 << k);
            out->nlines[a]++;
        }
    }
}

double strata_price_table_algo(const strata_price_table_t *t, strata_algo_t algo, double bytes,
                               strata_price_line_t *line)
{
    if ((unsigned)algo >= STRATA_ALGO_COUNT || t->nlines[algo] == 0)
        return -1;
    const strata_price_line_t *ln = &t->line[t->first[algo]], *best = ln;
    double cost = 0;
    for (int k = 0; k < t->nlines[algo]; k++, ln++) {
        double c = ln->alpha_s + ln->beta_s_per_b * bytes;
        if (k == 0 || c < cost) {
            cost = c;
            best = ln;
        }
    }
    if (line)
        *line = *best;
    return cost;
}

double strata_price_table_choose(const strata_price_table_t *t, double bytes, unsigned offer,
                                 strata_price_t *out)
{
    memset(out, 0, sizeof *out);
    out->algo = STRATA_ALGO_COUNT;
    out->pipe = (strata_xfer_pipe_t){1, 1};
    out->top_level = t->top;
    if (t->top < 0) // one member: nothing moves
        return 0;
    double best = -1;
    for (int a = 0; a < STRATA_ALGO_COUNT; a++) {
        if (!(offer & STRATA_PRICE_OFFER(a)))
            continue;
        strata_price_line_t ln;
        double c = strata_price_table_algo(t, (strata_algo_t)a, bytes, &ln);
        if (c >= 0 && (best < 0 || c < best)) {
            best = c;
            out->algo = (strata_algo_t)a;
            out->pipe = ln.pipe;
        }
    }
    out->seconds = best >= 0 ? best : 0;
    return best;
}

/* The breakdown of out->algo at out->pipe. */
static void breakdown(const strata_price_shape_t *s, strata_coll_t coll, double bytes,
                      strata_price_t *out)
{
    acc_t c;
    if (out->algo >= STRATA_ALGO_COUNT || !account(s, coll, out->algo, out->pipe.segments, &c))
        return;
    for (int l = 0; l < s->nlevels; l++)
        out->level_s[l] = c.a[l] + c.b[l] * bytes;
}

strata_status_t strata_price_coll(const strata_price_shape_t *s, strata_coll_t coll, double bytes,
                                  unsigned offer, strata_price_t *out)
{
    memset(out, 0, sizeof *out);
    if ((unsigned)coll >= STRATA_COLL_COUNT)
        return st_error(STRATA_ERR_INVALID_ARG, "price: collective %d out of range", (int)coll);
    strata_price_table_t t;
    strata_price_table(s, coll, &t);
    if (strata_price_table_choose(&t, bytes, offer, out) < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "price: no offered algorithm serves %s here",
                        strata_coll_name(coll));
    breakdown(s, coll, bytes, out);
    return STRATA_OK;
}

strata_status_t strata_price_algo(const strata_price_shape_t *s, strata_coll_t coll,
                                  strata_algo_t algo, double bytes, strata_price_t *out)
{
    memset(out, 0, sizeof *out);
    if ((unsigned)coll >= STRATA_COLL_COUNT || (unsigned)algo >= STRATA_ALGO_COUNT)
        return st_error(STRATA_ERR_INVALID_ARG, "price: collective or algorithm out of range");
    strata_price_table_t t;
    strata_price_table(s, coll, &t);
    strata_price_line_t ln;
    double c = strata_price_table_algo(&t, algo, bytes, &ln);
    if (c < 0)
        return st_error(STRATA_ERR_UNSUPPORTED, "price: %s does not serve %s on this group",
                        strata_algo_name(algo), strata_coll_name(coll));
    out->algo = algo;
    out->seconds = c;
    out->pipe = ln.pipe;
    out->top_level = s->top;
    breakdown(s, coll, bytes, out);
    return STRATA_OK;
}

double strata_price_table_p2p(const strata_price_table_t *t, double bytes)
{
    if (t->top < 0 || !(bytes > 0))
        return 0;
    return t->hop.alpha_s + t->hop.beta_s_per_b * bytes;
}

double strata_price_p2p(const strata_price_shape_t *s, double bytes)
{
    if (s->n <= 1 || !(bytes > 0))
        return 0;
    strata_price_line_t ln = hop_line(s);
    return ln.alpha_s + ln.beta_s_per_b * bytes;
}

/* ---- the planner's memo: shapes and tables of recent strided groups, per thread --------------- */

#define MEMO_SETS 128 /* x MEMO_WAYS entries, least recently used replaced */
#define MEMO_WAYS 4

typedef struct memo_key {
    int nlevels, ndims;
    struct {
        double bw, lat, oversub, eff;
        int fanout, cls, torus[STRATA_TORUS_MAX_DIMS];
    } lv[STRATA_TOPO_MAX_LEVELS];
    double eff[STRATA_LINK_CLASS_COUNT], gamma;
    struct {
        long long size, stride;
    } dim[STRATA_GROUP_MAX_DIMS];
} memo_key_t;

typedef struct memo_entry {
    bool valid;
    unsigned known; /* collectives whose table is filled */
    unsigned long long used;
    memo_key_t key;
    strata_price_shape_t shape;
    strata_price_table_t table[STRATA_COLL_COUNT];
} memo_entry_t;

typedef struct memo {
    unsigned long long clock;
    memo_entry_t set[MEMO_SETS][MEMO_WAYS];
} memo_t;

static void *memo_make(void)
{
    return calloc(1, sizeof(memo_t));
}

static st_thread_value_t memos = ST_THREAD_VALUE(memo_make, free);

static memo_t *memo_get(void)
{
    return st_thread_value(&memos);
}

static void key_of(const strata_topo_t *topo, const strata_group_t *g, const strata_net_eff_t *eff,
                   memo_key_t *k)
{
    memset(k, 0, sizeof *k); // padding too: keys are compared with memcmp
    k->nlevels = topo->nlevels;
    for (int l = 0; l < topo->nlevels && l < STRATA_TOPO_MAX_LEVELS; l++) {
        const strata_topo_level_t *lv = &topo->level[l];
        k->lv[l].bw = lv->bw_Bps;
        k->lv[l].lat = lv->latency_s;
        k->lv[l].oversub = lv->oversub;
        k->lv[l].eff = lv->efficiency;
        k->lv[l].fanout = lv->fanout;
        k->lv[l].cls = (int)lv->link_class;
        memcpy(k->lv[l].torus, lv->torus, sizeof lv->torus);
    }
    if (eff) {
        for (int c = 0; c < STRATA_LINK_CLASS_COUNT; c++)
            k->eff[c] = eff->eff[c];
        k->gamma = eff->gamma_s_per_b;
    } else {
        k->eff[0] = k->eff[1] = -1; // not the same as an explicit 0
    }
    k->ndims = g->ndims;
    for (int i = 0; i < g->ndims && i < STRATA_GROUP_MAX_DIMS; i++) {
        k->dim[i].size = g->dim[i].size;
        k->dim[i].stride = g->dim[i].stride;
    }
}

static unsigned key_hash(const memo_key_t *k)
{
    uint64_t h = (uint64_t)k->ndims * 0x9e3779b97f4a7c15ull + (uint64_t)k->nlevels;
    for (int i = 0; i < k->ndims && i < STRATA_GROUP_MAX_DIMS; i++)
        h = (h ^ (uint64_t)k->dim[i].size) * 0xbf58476d1ce4e5b9ull ^ (uint64_t)k->dim[i].stride;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull; // splitmix64's finaliser spreads every bit
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    return (unsigned)((h ^ (h >> 31)) % MEMO_SETS);
}

strata_status_t strata_price_group_table(const strata_topo_t *topo, const strata_group_t *g,
                                         const strata_net_eff_t *eff, strata_coll_t coll,
                                         strata_price_table_t *out)
{
    if ((unsigned)coll >= STRATA_COLL_COUNT)
        return st_error(STRATA_ERR_INVALID_ARG, "price: collective %d out of range", (int)coll);
    memo_t *m = memo_get();
    memo_key_t key;
    key_of(topo, g, eff, &key);
    if (!m) { // no per-thread memo: compute and forget
        strata_price_shape_t s;
        ST_TRY(strata_price_shape_group(topo, g, eff, &s));
        strata_price_table(&s, coll, out);
        return STRATA_OK;
    }
    memo_entry_t *set = m->set[key_hash(&key)], *e = NULL;
    for (int w = 0; w < MEMO_WAYS && !e; w++)
        if (set[w].valid && memcmp(&set[w].key, &key, sizeof key) == 0)
            e = &set[w];
    if (!e) {
        e = &set[0];
        for (int w = 1; w < MEMO_WAYS; w++)
            if (set[w].used < e->used)
                e = &set[w];
        e->valid = false;
        ST_TRY(strata_price_shape_group(topo, g, eff, &e->shape));
        e->key = key;
        e->known = 0;
        e->valid = true;
    }
    e->used = ++m->clock;
    if (!(e->known & (1u << coll))) {
        strata_price_table(&e->shape, coll, &e->table[coll]);
        e->known |= 1u << coll;
    }
    *out = e->table[coll];
    return STRATA_OK;
}
