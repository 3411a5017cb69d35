/* Placement of one job on a cluster, and its price.
 *
 * Ranks are laid out by the job's order (innermost first), so consecutive ranks fill a host and
 * host-slot j of the job holds ranks j*pph .. (j+1)*pph-1. Placing is then choosing which physical
 * host serves each host-slot. The topology-aware policy works top down: at every level it takes
 * the fewest child units whose free hosts hold the job (a minimum cut of that level), in counts
 * that are multiples of the largest layout chunk that fits a child (a pipeline replica, a TP group)
 * so no chunk straddles a boundary, spread as evenly as those multiples allow (so every
 * data-parallel group has as many members as possible in each child it touches), then recurses
 * into each child in tree order. Hostname order and a seeded shuffle are the baselines.
 *
 * The price is the step's communication time by the pricing module (strata/price.h), each group
 * priced as its communicator would price it; see sched.h. What this file does not do: touch host
 * states (the simulation does), or write files (output.c). */
#include "base/base.h"
#include "sched/sched_internal.h"
#include "strata/price.h"
#include "strata/sched.h"

#include <stdlib.h>
#include <string.h>

const char *strata_policy_name(strata_policy_t p)
{
    switch (p) {
    case STRATA_POLICY_TOPO:
        return "topo";
    case STRATA_POLICY_FIRST_FIT:
        return "first-fit";
    case STRATA_POLICY_RANDOM:
        return "random";
    default:
        return "?";
    }
}

strata_status_t strata_policy_parse(const char *s, strata_policy_t *out)
{
    for (int p = 0; p < STRATA_POLICY_COUNT; p++)
        if (!strcmp(s, strata_policy_name((strata_policy_t)p))) {
            *out = (strata_policy_t)p;
            return STRATA_OK;
        }
    if (!strcmp(s, "hostname")) {
        *out = STRATA_POLICY_FIRST_FIT;
        return STRATA_OK;
    }
    return st_error(STRATA_ERR_INVALID_ARG, "expected a policy topo, first-fit or random, got \"%s\"",
                    s);
}

strata_place_opts_t strata_place_opts_default(void)
{
    strata_place_opts_t o = {.policy = STRATA_POLICY_TOPO, .seed = 1, .spares = 0,
                             .spare_level = 0};
    return o;
}

strata_job_t strata_job_default(void)
{
    strata_job_t j = {.tp = 1, .cp = 1, .pp = 1, .dp = 1};
    for (int d = 0; d < STRATA_DIM_COUNT; d++)
        j.order[d] = (strata_dim_t)d;
    j.bytes[STRATA_DIM_TP] = 4e9;
    j.bytes[STRATA_DIM_PP] = 0.5e9;
    j.bytes[STRATA_DIM_DP] = 2e9;
    return j;
}

static int dim_size(const strata_job_t *j, strata_dim_t d)
{
    switch (d) {
    case STRATA_DIM_TP:
        return j->tp;
    case STRATA_DIM_CP:
        return j->cp;
    case STRATA_DIM_PP:
        return j->pp;
    default:
        return j->dp;
    }
}

long long strata_job_world(const strata_job_t *j)
{
    return st_mul_sat(st_mul_sat(j->tp, j->cp), st_mul_sat(j->pp, j->dp));
}

int strata_job_coord(const strata_job_t *j, long long rank, strata_dim_t d)
{
    long long stride = 1;
    for (int oi = 0; oi < STRATA_DIM_COUNT && j->order[oi] != d; oi++)
        stride *= dim_size(j, j->order[oi]);
    int n = dim_size(j, d);
    return n > 0 ? (int)((rank / stride) % n) : 0;
}

uint64_t st_sched_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

strata_status_t st_job_check(const strata_cluster_t *c, const strata_job_t *job, int *pph_out,
                             int *nhosts_out)
{
    const int sizes[4] = {job->tp, job->cp, job->pp, job->dp};
    for (int d = 0; d < STRATA_DIM_COUNT; d++)
        if (sizes[d] < 1 || sizes[d] > 1 << 20)
            return st_error(STRATA_ERR_INVALID_ARG, "job: expected %s between 1 and %d, got %d",
                            strata_dim_name((strata_dim_t)d), 1 << 20, sizes[d]);
    unsigned seen = 0;
    for (int d = 0; d < STRATA_DIM_COUNT; d++) {
        if ((unsigned)job->order[d] >= STRATA_DIM_COUNT || (seen & (1u << job->order[d])))
            return st_error(STRATA_ERR_INVALID_ARG,
                            "job: expected the order to be a permutation of tp,cp,pp,dp");
        seen |= 1u << job->order[d];
    }
    long long world = strata_job_world(job);
    if (world > 1LL << 24)
        return st_error(STRATA_ERR_INVALID_ARG, "job: expected at most %d ranks, got %lld",
                        1 << 24, world);
    int maxacc = 0;
    for (int h = 0; h < c->nhosts; h++)
        maxacc = ST_MAX(maxacc, c->hosts[h].accels);
    int pph = job->procs_per_host > 0 ? job->procs_per_host : maxacc;
    if (pph < 1 || pph > maxacc)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "job: expected at most %d processes per host (the largest host), got %d",
                        maxacc, pph);
    if (world % pph)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "job: expected the world size %lld to be a multiple of %d processes per "
                        "host",
                        world, pph);
    *pph_out = pph;
    *nhosts_out = (int)(world / pph);
    return STRATA_OK;
}

/* ---- pricing ----------------------------------------------------------------------------------- */

static int common_level(const strata_cluster_t *c, int a, int b)
{
    if (a == b)
        return 0;
    for (int i = 1; i < c->topo.nlevels; i++)
        if (c->hosts[a].dom[i] == c->hosts[b].dom[i])
            return i;
    return c->topo.nlevels - 1;
}

strata_status_t strata_place_cost(const strata_cluster_t *c, const strata_job_t *job,
                                  const int *rank_host, strata_cost_t *out)
{
    memset(out, 0, sizeof *out);
    for (int d = 0; d < STRATA_DIM_COUNT; d++)
        out->dim_level[d] = -1;
    long long world = strata_job_world(job);
    long long stride = 1;
    const int nl = c->topo.nlevels;
    int maxn = 1;
    for (int d = 0; d < STRATA_DIM_COUNT; d++)
        maxn = ST_MAX(maxn, dim_size(job, job->order[d]));
    int *hs = malloc((size_t)maxn * sizeof *hs), *units = malloc((size_t)maxn * nl * sizeof *units);
    // seen[dom_off[l] + u]: the last group (numbered from 1) with a member in unit u of level l.
    long long *seen = calloc((size_t)c->dom_off[nl] + 1, sizeof *seen), group = 0;
    if (!hs || !units || !seen) {
        free(hs);
        free(units);
        free(seen);
        return st_error(STRATA_ERR_NO_MEMORY, "placement cost: out of memory");
    }
    strata_status_t rc = STRATA_OK;
    for (int oi = 0; oi < STRATA_DIM_COUNT && rc == STRATA_OK; oi++) {
        strata_dim_t d = job->order[oi];
        int n = dim_size(job, d);
        long long st = stride;
        stride *= n;
        double bytes = job->bytes[d];
        for (int l = 0; l < nl; l++)
            out->group_span[d][l] = 1;
        if (n < 2)
            continue;
        double worst = 0;
        int worst_level = 0;
        // Groups: every rank whose coordinate in d is 0 starts one. Each is priced by the pricing
        // module on its members' hosts, as its communicator would price it (network only: gamma 0).
        for (long long r0 = 0; r0 < world && rc == STRATA_OK; r0++) {
            if ((r0 / st) % n)
                continue;
            int span[STRATA_TOPO_MAX_LEVELS] = {0};
            group++;
            for (int k = 0; k < n; k++) {
                hs[k] = rank_host[r0 + (long long)k * st];
                memcpy(units + (size_t)k * nl, c->hosts[hs[k]].dom, (size_t)nl * sizeof *units);
                for (int l = 0; l < nl; l++) {
                    long long *mark = &seen[c->dom_off[l] + c->hosts[hs[k]].dom[l]];
                    span[l] += *mark != group;
                    *mark = group;
                }
            }
            for (int l = 0; l < nl; l++)
                out->group_span[d][l] = ST_MAX(out->group_span[d][l], span[l]);
            if (!(bytes > 0)) // no traffic to price: the span is all there is to say
                continue;
            strata_price_shape_t shape;
            rc = strata_price_shape_units(&c->topo, n, units, NULL, &shape);
            if (rc < 0)
                break;
            double t;
            if (d == STRATA_DIM_PP) { // hop by hop, every stage sending at once
                t = strata_price_p2p(&shape, bytes);
                for (int k = 0; k + 1 < n; k++)
                    for (int i = 1; i <= common_level(c, hs[k], hs[k + 1]); i++)
                        out->cross_bytes[i] += bytes;
            } else {
                // bytes is what one member sends; a ring allreduce of V sends 2(n-1)/n V.
                strata_price_table_t table;
                strata_price_t price;
                strata_price_table(&shape, STRATA_COLL_ALLREDUCE, &table);
                t = strata_price_table_choose(&table, bytes * n / (2.0 * (n - 1)),
                                              STRATA_PRICE_OFFER_PLAIN, &price);
                for (int i = 1; i <= shape.top; i++)
                    out->cross_bytes[i] += bytes * n;
            }
            worst = ST_MAX(worst, t);
            worst_level = ST_MAX(worst_level, shape.top);
        }
        if (!(bytes > 0))
            continue;
        out->dim_s[d] = worst;
        out->dim_level[d] = worst_level;
        out->total_s += worst;
    }
    free(hs);
    free(units);
    free(seen);
    if (rc < 0)
        return rc;
    // Units of each level the job touches.
    for (int i = 0; i < nl; i++) {
        int cnt = 0;
        unsigned char *mark = calloc((size_t)c->ndom[i] + 1, 1);
        if (!mark)
            return st_error(STRATA_ERR_NO_MEMORY, "placement cost: out of memory");
        for (long long r = 0; r < world; r++) {
            int u = c->hosts[rank_host[r]].dom[i];
            if (!mark[u]) {
                mark[u] = 1;
                cnt++;
            }
        }
        free(mark);
        out->hosts_per_level[i] = cnt;
    }
    return STRATA_OK;
}

/* ---- host choice ------------------------------------------------------------------------------- */

/* Children of every unit, per level: kids of unit u of level i (i >= 1) are the level-(i-1) units
 * kid[i][koff[i][u] .. koff[i][u+1]). Built once per call from the hosts' paths. */
typedef struct tree {
    int nl;
    int *koff[STRATA_TOPO_MAX_LEVELS];
    int *kid[STRATA_TOPO_MAX_LEVELS];
    int *avail[STRATA_TOPO_MAX_LEVELS]; /* free, non-spare hosts under each unit */
} tree_t;

static void tree_free(tree_t *t)
{
    for (int i = 0; i < STRATA_TOPO_MAX_LEVELS; i++) {
        free(t->koff[i]);
        free(t->kid[i]);
        free(t->avail[i]);
    }
}

static strata_status_t tree_build(const strata_cluster_t *c, const bool *usable, tree_t *t)
{
    memset(t, 0, sizeof *t);
    t->nl = c->topo.nlevels;
    for (int i = 0; i < t->nl; i++) {
        t->avail[i] = calloc((size_t)c->ndom[i], sizeof(int));
        if (!t->avail[i])
            return st_error(STRATA_ERR_NO_MEMORY, "placement: out of memory");
    }
    for (int h = 0; h < c->nhosts; h++)
        if (usable[h])
            for (int i = 0; i < t->nl; i++)
                t->avail[i][c->hosts[h].dom[i]]++;
    for (int i = 1; i < t->nl; i++) {
        int nk = c->ndom[i - 1], nu = c->ndom[i];
        int *parent = malloc((size_t)nk * sizeof *parent);
        t->koff[i] = calloc((size_t)nu + 1, sizeof(int));
        t->kid[i] = malloc((size_t)nk * sizeof(int));
        if (!parent || !t->koff[i] || !t->kid[i]) {
            free(parent);
            return st_error(STRATA_ERR_NO_MEMORY, "placement: out of memory");
        }
        for (int h = 0; h < c->nhosts; h++)
            parent[c->hosts[h].dom[i - 1]] = c->hosts[h].dom[i];
        for (int k = 0; k < nk; k++)
            t->koff[i][parent[k] + 1]++;
        for (int u = 0; u < nu; u++)
            t->koff[i][u + 1] += t->koff[i][u];
        int *fill = calloc((size_t)nu, sizeof *fill);
        if (!fill) {
            free(parent);
            return st_error(STRATA_ERR_NO_MEMORY, "placement: out of memory");
        }
        for (int k = 0; k < nk; k++)
            t->kid[i][t->koff[i][parent[k]] + fill[parent[k]]++] = k;
        free(fill);
        free(parent);
    }
    return STRATA_OK;
}

typedef struct alloc_ctx {
    const strata_cluster_t *c;
    const bool *usable;
    tree_t *t;
    const int *chunks; /* ascending host-chunk sizes of the layout, chunks[0] = 1 */
    int nchunks;
    int *out, nout;
    int *host_of_unit0; /* level-0 unit (host) id -> host index: identity */
} alloc_ctx_t;

/* Sorts unit ids by free hosts, most first, ties in tree order; `key` holds (avail, id) pairs. */
static int cmp_avail_desc(const void *a, const void *b)
{
    const int *x = a, *y = b;
    if (x[0] != y[0])
        return y[0] - x[0];
    return x[1] - y[1];
}

static strata_status_t sort_by_avail(int *k, int m, const int *avail)
{
    int *pair = malloc((size_t)(m > 0 ? m : 1) * 2 * sizeof *pair);
    if (!pair)
        return st_error(STRATA_ERR_NO_MEMORY, "placement: out of memory");
    for (int j = 0; j < m; j++) {
        pair[2 * j] = avail[k[j]];
        pair[2 * j + 1] = k[j];
    }
    qsort(pair, (size_t)m, 2 * sizeof *pair, cmp_avail_desc);
    for (int j = 0; j < m; j++)
        k[j] = pair[2 * j + 1];
    free(pair);
    return STRATA_OK;
}

/* Takes n usable hosts under unit u of level i, appending them to ctx->out. */
static strata_status_t alloc_unit(alloc_ctx_t *x, int i, int u, int n)
{
    if (n <= 0)
        return STRATA_OK;
    if (i == 0) {
        x->out[x->nout++] = u;
        return STRATA_OK;
    }
    tree_t *t = x->t;
    int nk = t->koff[i][u + 1] - t->koff[i][u];
    int *k = malloc((size_t)nk * 3 * sizeof *k);
    if (!k)
        return st_error(STRATA_ERR_NO_MEMORY, "placement: out of memory");
    int *cnt = k + nk, *cap = k + 2 * nk;
    int m = 0;
    for (int j = 0; j < nk; j++) {
        int kk = t->kid[i][t->koff[i][u] + j];
        if (t->avail[i - 1][kk] > 0)
            k[m++] = kk;
    }
    // Biggest free fragments first: the fewest children hold the job (a minimum cut).
    strata_status_t src = sort_by_avail(k, m, t->avail[i - 1]);
    if (src < 0) {
        free(k);
        return src;
    }
    int use = m, chunk = 1;
    for (int ci = x->nchunks - 1; ci >= 0; ci--) {
        int cs = x->chunks[ci];
        if (cs > n || n % cs)
            continue;
        // Best fit when one child holds it all (keeps large free blocks whole for later jobs),
        // else the fewest children, largest first.
        int fit = -1;
        for (int j = 0; j < m; j++)
            if (t->avail[i - 1][k[j]] / cs * cs >= n)
                fit = j;
        if (fit >= 0) {
            int tmp = k[0];
            k[0] = k[fit];
            k[fit] = tmp;
            use = 1;
            chunk = cs;
            break;
        }
        long long sum = 0;
        int j = 0;
        while (j < m && sum < n) {
            sum += t->avail[i - 1][k[j]] / cs * cs;
            j++;
        }
        if (sum >= n) {
            use = j;
            chunk = cs;
            break;
        }
    }
    if (chunk == 1) { // no chunk fits whole: fewest children by plain counts
        long long sum = 0;
        int j = 0;
        while (j < m && sum < n)
            sum += t->avail[i - 1][k[j++]];
        use = j;
    }
    // Even spread over the chosen children, in whole chunks (water filling).
    for (int j = 0; j < use; j++) {
        cnt[j] = 0;
        cap[j] = t->avail[i - 1][k[j]] / chunk;
    }
    int units = n / chunk;
    while (units > 0) {
        int best = -1;
        for (int j = 0; j < use; j++)
            if (cnt[j] < cap[j] && (best < 0 || cnt[j] < cnt[best]))
                best = j;
        if (best < 0)
            break;
        // Give the least-filled child as many units as keeps it level with the next one.
        int second = -1;
        for (int j = 0; j < use; j++)
            if (j != best && cnt[j] < cap[j] && (second < 0 || cnt[j] < cnt[second]))
                second = j;
        int add = second < 0 ? units : ST_MAX(1, cnt[second] - cnt[best] + 1);
        add = ST_MIN(add, ST_MIN(units, cap[best] - cnt[best]));
        cnt[best] += add;
        units -= add;
    }
    strata_status_t rc = STRATA_OK;
    if (units > 0) {
        free(k);
        return st_error(STRATA_ERR_INTERNAL, "placement: chunked allocation fell short");
    }
    // Back to tree order so that neighbouring slots are neighbouring units.
    for (int a = 1; a < use; a++)
        for (int b = a; b > 0 && k[b - 1] > k[b]; b--) {
            int tk = k[b], tc = cnt[b];
            k[b] = k[b - 1];
            cnt[b] = cnt[b - 1];
            k[b - 1] = tk;
            cnt[b - 1] = tc;
        }
    for (int j = 0; j < use && rc >= 0; j++)
        rc = alloc_unit(x, i - 1, k[j], cnt[j] * chunk);
    free(k);
    return rc;
}

void strata_placement_free(strata_placement_t *p)
{
    if (!p)
        return;
    free(p->hosts);
    free(p->rank_host);
    free(p->rank_slot);
    free(p->spares);
    memset(p, 0, sizeof *p);
}

strata_status_t st_mark_spares(const strata_cluster_t *c, int spares, int level, bool *is_spare)
{
    memset(is_spare, 0, (size_t)c->nhosts * sizeof *is_spare);
    if (spares <= 0)
        return STRATA_OK;
    if (level < 1 || level >= c->topo.nlevels) // auto: the children of the top (zones)
        level = ST_MAX(1, c->topo.nlevels - 2);
    if (level >= c->topo.nlevels)
        return STRATA_OK;
    int *left = malloc((size_t)c->ndom[level] * sizeof *left);
    if (!left)
        return st_error(STRATA_ERR_NO_MEMORY, "placement: out of memory");
    for (int u = 0; u < c->ndom[level]; u++)
        left[u] = spares;
    // The last free hosts of each failure domain, so the first ones stay contiguous for jobs.
    for (int h = c->nhosts - 1; h >= 0; h--) {
        int u = c->hosts[h].dom[level];
        if (c->hosts[h].state == STRATA_HOST_FREE && left[u] > 0) {
            is_spare[h] = true;
            left[u]--;
        }
    }
    free(left);
    return STRATA_OK;
}

strata_status_t strata_place(const strata_cluster_t *c, const strata_job_t *job,
                             const strata_place_opts_t *opts, strata_placement_t *out)
{
    memset(out, 0, sizeof *out);
    strata_place_opts_t o = opts ? *opts : strata_place_opts_default();
    int pph, need;
    ST_TRY(st_job_check(c, job, &pph, &need));
    strata_status_t rc = STRATA_OK;
    bool *spare = calloc((size_t)c->nhosts, sizeof *spare);
    bool *usable = calloc((size_t)c->nhosts, sizeof *usable);
    int *cand = malloc((size_t)c->nhosts * sizeof *cand);
    long long world = strata_job_world(job);
    out->world = world;
    out->hosts = malloc((size_t)need * sizeof *out->hosts);
    out->rank_host = malloc((size_t)world * sizeof *out->rank_host);
    out->rank_slot = malloc((size_t)world * sizeof *out->rank_slot);
    tree_t t = {0};
    if (!spare || !usable || !cand || !out->hosts || !out->rank_host || !out->rank_slot) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "placement: out of memory");
        goto out;
    }
    if (o.policy == STRATA_POLICY_TOPO)
        ST_TRY_GOTO(st_mark_spares(c, o.spares, o.spare_level, spare), rc, out);
    int nfree = 0, nspare = 0;
    for (int h = 0; h < c->nhosts; h++) {
        usable[h] = c->hosts[h].state == STRATA_HOST_FREE && !spare[h] && c->hosts[h].accels >= pph;
        nfree += usable[h];
        nspare += spare[h];
    }
    if (need > nfree) {
        rc = st_error(STRATA_ERR_INVALID_ARG,
                      "job needs %d hosts (%lld ranks, %d per host) but only %d free hosts%s can "
                      "take it",
                      need, world, pph, nfree, nspare ? " outside the spare buffer" : "");
        goto out;
    }
    if (o.policy == STRATA_POLICY_TOPO) {
        // Host chunks of the layout: ranks up to each dimension, in hosts.
        int chunks[STRATA_DIM_COUNT + 2], nch = 0;
        chunks[nch++] = 1;
        long long cum = 1;
        for (int d = 0; d < STRATA_DIM_COUNT; d++) {
            cum *= dim_size(job, job->order[d]);
            if (cum % pph == 0 && cum / pph > chunks[nch - 1] && cum / pph <= need)
                chunks[nch++] = (int)(cum / pph);
        }
        ST_TRY_GOTO(tree_build(c, usable, &t), rc, out);
        alloc_ctx_t x = {.c = c, .usable = usable, .t = &t, .chunks = chunks, .nchunks = nch,
                         .out = out->hosts};
        int top = c->topo.nlevels - 1;
        if (c->ndom[top] == 1) {
            ST_TRY_GOTO(alloc_unit(&x, top, 0, need), rc, out);
        } else {
            rc = st_error(STRATA_ERR_INTERNAL, "placement: the top level has %d units",
                          c->ndom[top]);
            goto out;
        }
        out->nhosts = x.nout;
    } else {
        int n = 0;
        for (int q = 0; q < c->nhosts; q++) { // hostname order
            int h = c->by_name[q];
            if (usable[h])
                cand[n++] = h;
        }
        if (o.policy == STRATA_POLICY_RANDOM) {
            uint64_t s = o.seed;
            for (int i = n - 1; i > 0; i--) {
                int j = (int)(st_sched_rand(&s) % (uint64_t)(i + 1));
                int tmp = cand[i];
                cand[i] = cand[j];
                cand[j] = tmp;
            }
        }
        memcpy(out->hosts, cand, (size_t)need * sizeof *cand);
        out->nhosts = need;
    }
    if (out->nhosts != need) {
        rc = st_error(STRATA_ERR_INTERNAL, "placement: chose %d hosts, needed %d", out->nhosts,
                      need);
        goto out;
    }
    for (long long r = 0; r < world; r++) {
        out->rank_host[r] = out->hosts[r / pph];
        out->rank_slot[r] = (int)(r % pph);
    }
    if (nspare) {
        out->spares = malloc((size_t)nspare * sizeof *out->spares);
        if (!out->spares) {
            rc = st_error(STRATA_ERR_NO_MEMORY, "placement: out of memory");
            goto out;
        }
        for (int h = 0; h < c->nhosts; h++)
            if (spare[h])
                out->spares[out->nspares++] = h;
    }
    rc = strata_place_cost(c, job, out->rank_host, &out->cost);
out:
    tree_free(&t);
    free(spare);
    free(usable);
    free(cand);
    if (rc < 0)
        strata_placement_free(out);
    return rc;
}

strata_status_t strata_place_replace(const strata_cluster_t *c, int failed, const bool *is_spare,
                                     int *out)
{
    *out = -1;
    if (failed < 0 || failed >= c->nhosts)
        return st_error(STRATA_ERR_INVALID_ARG, "replace: expected a host index below %d, got %d",
                        c->nhosts, failed);
    const strata_host_t *f = &c->hosts[failed];
    // Walk up the failure domains; inside each, a spare first, then any free host.
    for (int i = 1; i < c->topo.nlevels; i++)
        for (int pass = 0; pass < 2; pass++)
            for (int h = 0; h < c->nhosts; h++) {
                if (h == failed || c->hosts[h].state != STRATA_HOST_FREE ||
                    c->hosts[h].dom[i] != f->dom[i] || c->hosts[h].accels < f->accels)
                    continue;
                bool sp = is_spare && is_spare[h];
                if (pass == 0 && !sp)
                    continue;
                *out = h;
                return STRATA_OK;
            }
    return STRATA_OK;
}
