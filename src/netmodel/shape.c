/* Shapes (price.h): how a group of ranks sits on the fabric tree, reduced to what the price needs.
 * One scan over a fabric computes it; the placer's host lists and the planner's strided groups are
 * first written out as a fabric of their members, so every caller's group goes through the same
 * code and equal groups get bitwise-equal shapes. Prices are in price.c.
 *
 * The scan, for members 0..n-1 of a fabric (unit of member r at level l, dense ids):
 *   per level: members per unit, occupied children per unit -> units_max, members_min, top;
 *   the ring in rank order and in tree order: for each edge r -> next, the level it meets at and,
 *   for every unit it leaves below that level, how many ring edges leave that unit (they share
 *   its uplink, m x bw / oversub for m members) -> the slowest edge's rate, the largest latency;
 *   consecutive members (pipeline hops), butterfly partners r ^ 2^k and the fold pairs -> the
 *   outermost level each pattern meets at. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "strata/price.h"

#define MAX_MEMBERS (1 << 24)

static double level_eff(const strata_topo_level_t *lv, const strata_net_eff_t *eff)
{
    if (lv->efficiency > 0)
        return lv->efficiency;
    if (eff && (unsigned)lv->link_class < STRATA_LINK_CLASS_COUNT && eff->eff[lv->link_class] > 0)
        return eff->eff[lv->link_class];
    return 1.0;
}

/* The links of every level as a member sees them (price.h: strata_price_level_t). */
static void shape_links(strata_price_shape_t *s, const strata_topo_t *topo,
                        const strata_net_eff_t *eff)
{
    double all = INFINITY;
    for (int l = 0; l < topo->nlevels; l++) {
        const strata_topo_level_t *lv = &topo->level[l];
        strata_price_level_t *p = &s->level[l];
        double bw = lv->bw_Bps * level_eff(lv, eff);
        p->latency_s = lv->latency_s;
        p->link_Bps = bw;
        p->uplink_Bps = l == 0 ? bw : bw / (lv->oversub >= 1 ? lv->oversub : 1);
        all = fmin(all, p->uplink_Bps);
        p->all_Bps = fmin(all, bw);
        p->units_max = 1;
        p->members_min = 1;
        p->link_class = (unsigned)lv->link_class < STRATA_LINK_CLASS_COUNT ? (int)lv->link_class : 0;
    }
}

static inline int unit_of(const strata_fabric_t *f, int l, int r)
{
    return f->unit[l * f->nranks + r];
}

/* The lowest level whose unit holds both members (a != b). */
static inline int meet(const strata_fabric_t *f, int a, int b)
{
    for (int l = 0; l < f->topo.nlevels - 1; l++)
        if (unit_of(f, l, a) == unit_of(f, l, b))
            return l;
    return f->topo.nlevels - 1;
}

/* Scratch of the scan: per level, members per unit (cnt) and ring edges leaving each unit (out),
 * at base[l] .. base[l] + nunits[l]. */
typedef struct scan {
    const strata_fabric_t *f;
    int base[STRATA_TOPO_MAX_LEVELS + 1];
    int *cnt, *out;
} scan_t;

/* The ring that visits the members in `order` (NULL: rank order). */
static void ring_step(scan_t *sc, const strata_price_shape_t *s, const int *order,
                      strata_price_ring_t *ring)
{
    const strata_fabric_t *f = sc->f;
    const int n = f->nranks;
    memset(sc->out, 0, (size_t)sc->base[f->topo.nlevels] * sizeof *sc->out);
    for (int i = 0; i < n; i++) {
        int a = order ? order[i] : i, b = order ? order[(i + 1) % n] : (i + 1) % n;
        int L = meet(f, a, b);
        for (int j = 0; j < L; j++)
            sc->out[sc->base[j] + unit_of(f, j, a)]++;
    }
    *ring = (strata_price_ring_t){.latency_s = 0, .rate_Bps = INFINITY, .level = 0};
    for (int i = 0; i < n; i++) {
        int a = order ? order[i] : i, b = order ? order[(i + 1) % n] : (i + 1) % n;
        int L = meet(f, a, b);
        double rate = s->level[L].link_Bps;
        for (int j = 0; j < L; j++) { // the uplink of a's level-j unit into level j + 1
            int u = sc->base[j] + unit_of(f, j, a);
            rate = fmin(rate, (double)sc->cnt[u] / sc->out[u] * s->level[j + 1].uplink_Bps);
        }
        ring->latency_s = fmax(ring->latency_s, s->level[L].latency_s);
        if (rate < ring->rate_Bps || (rate == ring->rate_Bps && L > ring->level)) {
            ring->rate_Bps = rate;
            ring->level = L;
        }
    }
}

/* The multi-dimensional ring's dimensions when the members fill a torus. The ranks of one child
 * meet at the outermost level below the torus that the group crosses. */
static void shape_torus(const strata_fabric_t *f, strata_price_shape_t *s)
{
    strata_torus_grid_t g;
    if (!strata_fabric_torus(f, &g, NULL))
        return;
    int inner = 0;
    for (int l = 0; l < g.level; l++)
        if (s->level[l].units_max >= 2)
            inner = l;
    for (int d = 0; d < g.ndims; d++) {
        bool in_child = g.inner && d == 0;
        s->torus_dim[d] = (strata_price_torus_dim_t){
            .size = g.dims[d], .level = in_child ? inner : g.level,
            .both_ways = !in_child && g.dims[d] >= 3};
    }
    s->torus_ndims = g.ndims;
}

/* True when rank order is tree order: at every level unit ids never decrease along the ranks
 * (strata_fabric_tree_order would return the identity). */
static bool rank_order_is_tree_order(const strata_fabric_t *f)
{
    for (int l = 0; l < f->topo.nlevels; l++)
        for (int r = 1; r < f->nranks; r++)
            if (unit_of(f, l, r) < unit_of(f, l, r - 1))
                return false;
    return true;
}

static int floor_log2(int n)
{
    int k = 0;
    while ((2LL << k) <= n)
        k++;
    return k;
}

strata_status_t strata_price_shape_fabric(const strata_fabric_t *f, const strata_net_eff_t *eff,
                                          strata_price_shape_t *out)
{
    memset(out, 0, sizeof *out);
    const int n = f ? f->nranks : 0, L = f ? f->topo.nlevels : 0;
    if (n < 1 || L < 1 || L > STRATA_TOPO_MAX_LEVELS || !f->unit || !f->nunits)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "price: expected a fabric of >= 1 rank and 1 to %d levels",
                        STRATA_TOPO_MAX_LEVELS);
    out->n = n;
    out->nlevels = L;
    out->gamma_s_per_b = eff ? eff->gamma_s_per_b : 0;
    out->top = out->hop_level = out->fold_level = -1;
    shape_links(out, &f->topo, eff);
    if (n == 1)
        return STRATA_OK;

    scan_t sc = {.f = f};
    for (int l = 0; l < L; l++)
        sc.base[l + 1] = sc.base[l] + f->nunits[l];
    const int total = sc.base[L];
    sc.cnt = calloc((size_t)total * 3 + 1, sizeof *sc.cnt);
    int *order = NULL;
    if (!sc.cnt)
        return st_error(STRATA_ERR_NO_MEMORY, "price: out of memory");
    sc.out = sc.cnt + total;
    int *occ = sc.out + total; // occupied children per unit (then reused)
    for (int l = 0; l < L; l++)
        for (int r = 0; r < n; r++)
            sc.cnt[sc.base[l] + unit_of(f, l, r)]++;

    // Levels: occupied children and fewest members per child.
    for (int l = 0; l < L; l++) {
        strata_price_level_t *p = &out->level[l];
        if (l == 0) {
            for (int u = 0; u < f->nunits[0]; u++)
                p->units_max = ST_MAX(p->units_max, sc.cnt[u]);
        } else {
            // A child (level l-1 unit) counts once in its parent: at its first member.
            memset(occ + sc.base[l], 0, (size_t)f->nunits[l] * sizeof *occ);
            for (int c = 0; c < f->nunits[l - 1]; c++)
                sc.out[sc.base[l - 1] + c] = 0;
            p->members_min = INT_MAX;
            for (int r = 0; r < n; r++) {
                int c = sc.base[l - 1] + unit_of(f, l - 1, r);
                if (sc.out[c]++ == 0) {
                    int g = ++occ[sc.base[l] + unit_of(f, l, r)];
                    p->units_max = ST_MAX(p->units_max, g);
                    p->members_min = ST_MIN(p->members_min, sc.cnt[c]);
                }
            }
        }
        if (p->units_max >= 2) {
            out->top = l;
            out->ncrossed++;
        }
    }

    ring_step(&sc, out, NULL, &out->ring);
    if (rank_order_is_tree_order(f)) {
        out->tree = out->ring;
    } else {
        order = malloc((size_t)n * sizeof *order);
        if (!order) {
            free(sc.cnt);
            return st_error(STRATA_ERR_NO_MEMORY, "price: out of memory");
        }
        strata_fabric_tree_order(f, order);
        ring_step(&sc, out, order, &out->tree);
        free(order);
    }

    for (int r = 0; r + 1 < n && out->hop_level < out->top; r++)
        out->hop_level = ST_MAX(out->hop_level, meet(f, r, r + 1));
    out->nxor = floor_log2(n);
    const int p2 = 1 << out->nxor;
    for (int k = 0; k < out->nxor; k++) {
        int d = 1 << k, lv = 0;
        for (int r = 0; r < p2 && lv < out->top; r++) // no pair meets above the top
            if (!(r & d))
                lv = ST_MAX(lv, meet(f, r, r ^ d));
        out->xor_level[k] = lv;
    }
    for (int i = 0; i + p2 < n && out->fold_level < out->top; i++)
        out->fold_level = ST_MAX(out->fold_level, meet(f, i, p2 + i));
    free(sc.cnt);
    shape_torus(f, out);
    return STRATA_OK;
}

/* ---- groups given some other way, written out as a fabric of their members --------------------- */

/* Dense unit ids, nested and in order of first appearance, from raw ids: level l's unit of member
 * r is raw(r, l) within its level-(l+1) unit. An open-addressing table maps (raw, parent) to the
 * dense id; when the raw ids never decrease along the members (`sorted`, a strided group in
 * rank order), a new id starts wherever the pair changes. */
typedef long long (*raw_fn)(const void *ctx, int r, int l);

static strata_status_t fabric_of(const strata_topo_t *topo, int n, raw_fn raw, const void *ctx,
                                 bool sorted, strata_fabric_t *f)
{
    const int L = topo->nlevels;
    memset(f, 0, sizeof *f);
    f->topo = *topo;
    f->nranks = n;
    size_t cap = 16;
    while (cap < 2 * (size_t)n)
        cap *= 2;
    f->unit = malloc((size_t)n * (size_t)L * sizeof *f->unit);
    f->nunits = calloc((size_t)L, sizeof *f->nunits);
    long long *key = malloc(cap * sizeof *key);
    int *par = malloc(cap * sizeof *par), *val = malloc(cap * sizeof *val);
    if (!f->unit || !f->nunits || !key || !par || !val) {
        free(key);
        free(par);
        free(val);
        strata_fabric_free(f);
        return st_error(STRATA_ERR_NO_MEMORY, "price: out of memory");
    }
    for (int r = 0; r < n; r++) // the outermost level is one unit
        f->unit[(L - 1) * n + r] = 0;
    f->nunits[L - 1] = 1;
    for (int l = L - 2; l >= 0; l--) {
        int nu = 0;
        if (sorted) {
            long long prev = 0;
            for (int r = 0; r < n; r++) {
                long long k = raw(ctx, r, l);
                if (r == 0 || k != prev || f->unit[(l + 1) * n + r] != f->unit[(l + 1) * n + r - 1])
                    nu++;
                prev = k;
                f->unit[l * n + r] = nu - 1;
            }
            f->nunits[l] = nu;
            continue;
        }
        for (size_t i = 0; i < cap; i++)
            val[i] = -1;
        for (int r = 0; r < n; r++) {
            long long k = raw(ctx, r, l);
            int p = f->unit[(l + 1) * n + r];
            size_t h = (size_t)(((uint64_t)k * 0x9e3779b97f4a7c15ull) ^ (uint64_t)p * 0xbf58476d1ce4e5b9ull);
            for (h &= cap - 1; val[h] >= 0 && (key[h] != k || par[h] != p); h = (h + 1) & (cap - 1))
                ;
            if (val[h] < 0) {
                key[h] = k;
                par[h] = p;
                val[h] = nu++;
            }
            f->unit[l * n + r] = val[h];
        }
        f->nunits[l] = nu;
    }
    free(key);
    free(par);
    free(val);
    return STRATA_OK;
}

typedef struct units_ctx {
    const int *units;
    int L;
} units_ctx_t;

static long long raw_units(const void *ctx, int r, int l)
{
    const units_ctx_t *u = ctx;
    return u->units[(size_t)r * (size_t)u->L + (size_t)l];
}

strata_status_t strata_price_shape_units(const strata_topo_t *levels, int n, const int *units,
                                         const strata_net_eff_t *eff, strata_price_shape_t *out)
{
    memset(out, 0, sizeof *out);
    if (!levels || levels->nlevels < 1 || levels->nlevels > STRATA_TOPO_MAX_LEVELS || n < 1 ||
        n > MAX_MEMBERS || !units)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "price: expected 1 to %d members on 1 to %d levels, got %d on %d",
                        MAX_MEMBERS, STRATA_TOPO_MAX_LEVELS, n, levels ? levels->nlevels : 0);
    for (size_t i = 0; i < (size_t)n * (size_t)levels->nlevels; i++)
        if (units[i] < 0)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "price: member %zu has unit %d at level %zu; expected ids >= 0",
                            i / (size_t)levels->nlevels, units[i], i % (size_t)levels->nlevels);
    units_ctx_t ctx = {units, levels->nlevels};
    strata_fabric_t f;
    ST_TRY(fabric_of(levels, n, raw_units, &ctx, false, &f));
    strata_status_t rc = strata_price_shape_fabric(&f, eff, out);
    strata_fabric_free(&f);
    return rc;
}

typedef struct group_ctx {
    const long long *acc; /* accelerator of each member */
    long long dom[STRATA_TOPO_MAX_LEVELS + 1];
} group_ctx_t;

static long long raw_group(const void *ctx, int r, int l)
{
    const group_ctx_t *g = ctx;
    return g->acc[r] / g->dom[l + 1];
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

strata_status_t strata_price_shape_group(const strata_topo_t *topo, const strata_group_t *g,
                                         const strata_net_eff_t *eff, strata_price_shape_t *out)
{
    memset(out, 0, sizeof *out);
    if (!topo || topo->nlevels < 1 || topo->nlevels > STRATA_TOPO_MAX_LEVELS)
        return st_error(STRATA_ERR_INVALID_ARG, "group: expected a tree of 1 to %d levels",
                        STRATA_TOPO_MAX_LEVELS);
    if (g->ndims < 0 || g->ndims > STRATA_GROUP_MAX_DIMS)
        return st_error(STRATA_ERR_INVALID_ARG, "group: expected 0 to %d dimensions, got %d",
                        STRATA_GROUP_MAX_DIMS, g->ndims);
    long long n = 1, last = 0;
    for (int i = 0; i < g->ndims; i++) {
        if (g->dim[i].size < 1 || g->dim[i].stride < 1)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "group: dimension %d: expected size >= 1 and stride >= 1, got %d and "
                            "%lld",
                            i, g->dim[i].size, g->dim[i].stride);
        n = st_mul_sat(n, g->dim[i].size);
        long long span = st_mul_sat(g->dim[i].stride, g->dim[i].size - 1);
        last = __builtin_add_overflow(last, span, &last) ? LLONG_MAX : last;
    }
    if (n > MAX_MEMBERS)
        return st_error(STRATA_ERR_INVALID_ARG, "group: expected at most %d members, got %lld",
                        MAX_MEMBERS, n);
    if (last >= strata_topo_capacity(topo))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "group of %lld spanning %lld accelerators does not fit cluster %s of %lld",
                        n, last + 1, topo->name, strata_topo_capacity(topo));
    group_ctx_t ctx = {0};
    long long *acc = malloc((size_t)n * sizeof *acc);
    if (!acc)
        return st_error(STRATA_ERR_NO_MEMORY, "price: out of memory");
    bool rising = true;
    for (long long m = 0; m < n; m++) { // member m: digits of m, dim[0] fastest
        long long rest = m, a = 0;
        for (int i = 0; i < g->ndims; i++) {
            a += (rest % g->dim[i].size) * g->dim[i].stride;
            rest /= g->dim[i].size;
        }
        acc[m] = a;
        rising = rising && (m == 0 || a > acc[m - 1]);
    }
    strata_status_t rc = STRATA_OK;
    if (!rising) { // members must be distinct: sort a copy and look for neighbours that are equal
        long long *c = malloc((size_t)n * sizeof *c);
        if (!c)
            rc = st_error(STRATA_ERR_NO_MEMORY, "price: out of memory");
        if (c) {
            memcpy(c, acc, (size_t)n * sizeof *c);
            qsort(c, (size_t)n, sizeof *c, cmp_ll);
            for (long long i = 1; i < n && rc == STRATA_OK; i++)
                if (c[i] == c[i - 1])
                    rc = st_error(STRATA_ERR_INVALID_ARG,
                                  "group: accelerator %lld is in it twice (dimensions overlap)",
                                  c[i]);
            free(c);
        }
    }
    ctx.acc = acc;
    for (int l = 0; l <= topo->nlevels; l++)
        ctx.dom[l] = strata_topo_domain_size(topo, l);
    strata_fabric_t f;
    if (rc == STRATA_OK)
        rc = fabric_of(topo, (int)n, raw_group, &ctx, rising, &f);
    if (rc == STRATA_OK) {
        rc = strata_price_shape_fabric(&f, eff, out);
        strata_fabric_free(&f);
    }
    free(acc);
    return rc;
}

void strata_price_shape_pool(strata_price_shape_t *s, int nodes, double link_Bps, double latency_s,
                             bool multicast)
{
    s->pool_multicast = multicast;
    s->pool_nodes = nodes > 0 && link_Bps > 0 ? nodes : 0;
    s->pool_Bps = link_Bps;
    s->pool_latency_s = latency_s;
}

void strata_price_shape_flat(int n, const strata_link_t *link, strata_price_shape_t *out)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    out->nlevels = 1;
    out->gamma_s_per_b = link->gamma_s_per_b;
    double bw = link->beta_s_per_b > 0 ? 1.0 / link->beta_s_per_b : INFINITY;
    out->level[0] = (strata_price_level_t){.latency_s = link->alpha_s,
                                           .link_Bps = bw,
                                           .uplink_Bps = bw,
                                           .all_Bps = bw,
                                           .units_max = n > 1 ? n : 1,
                                           .members_min = 1};
    out->top = out->hop_level = out->fold_level = -1;
    if (n <= 1)
        return;
    out->top = 0;
    out->ncrossed = 1;
    out->ring = out->tree = (strata_price_ring_t){link->alpha_s, bw, 0};
    out->hop_level = 0;
    out->nxor = floor_log2(n);
    out->fold_level = (1 << out->nxor) < n ? 0 : -1;
}

long long strata_group_size(const strata_group_t *group)
{
    long long n = 1;
    for (int i = 0; i < group->ndims; i++)
        n *= group->dim[i].size;
    return n;
}
