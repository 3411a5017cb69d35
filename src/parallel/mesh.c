/* The device mesh: the rank layout of tp x cp x pp x dp, the traffic of a GPT step per dimension,
 * the order the pricing module prefers for it on a fabric, and the sub-communicators of a job laid
 * out that way. The pricing is netmodel's (strata/price.h); this file only cuts the groups out of
 * the fabric and adds their prices up. What the engines do on the groups is theirs. */
#include "strata/mesh.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "strata/price.h"

#define D STRATA_DIM_COUNT

typedef enum { ORDER_DEFAULT, ORDER_GIVEN, ORDER_CHOSEN } order_how_t;

struct strata_mesh {
    strata_comm_t *world; /* borrowed */
    int rank;
    int size[D], coord[D], stride[D];
    strata_dim_t order[D];
    order_how_t how;
    strata_mesh_traffic_t traffic;
    double seconds[D];
    strata_comm_t *comm[D], *dp_cp, *embed; /* owned */
};

/* ---- layout ---------------------------------------------------------------------------------- */

void strata_mesh_default_order(strata_dim_t order[D])
{
    for (int i = 0; i < D; i++)
        order[i] = (strata_dim_t)i;
}

strata_mesh_config_t strata_mesh_config_default(void)
{
    strata_mesh_config_t c;
    memset(&c, 0, sizeof c);
    for (int d = 0; d < D; d++)
        c.size[d] = 1;
    c.size[STRATA_DIM_DP] = 0;
    strata_mesh_default_order(c.order);
    return c;
}

/* Sizes with dp 0 resolved to the ranks left over; refuses what does not make `nranks`. */
static strata_status_t resolve_sizes(const int in[D], int nranks, int out[D])
{
    for (int d = 0; d < D; d++)
        if (in[d] < (d == STRATA_DIM_DP ? 0 : 1))
            return st_error(STRATA_ERR_INVALID_ARG,
                            "mesh: %s %d: every dimension needs a size of at least 1 (dp 0: the "
                            "ranks left over)",
                            strata_dim_name((strata_dim_t)d), in[d]);
    long long inner =
        st_mul_sat(st_mul_sat(in[STRATA_DIM_TP], in[STRATA_DIM_CP]), in[STRATA_DIM_PP]);
    if (in[STRATA_DIM_DP] == 0) {
        if (nranks % inner != 0 || inner > nranks)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "mesh: tp %d x cp %d x pp %d does not divide %d ranks",
                            in[STRATA_DIM_TP], in[STRATA_DIM_CP], in[STRATA_DIM_PP], nranks);
        memcpy(out, in, D * sizeof *out);
        out[STRATA_DIM_DP] = (int)(nranks / inner);
        return STRATA_OK;
    }
    if (st_mul_sat(inner, in[STRATA_DIM_DP]) != nranks)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "mesh: tp %d x cp %d x pp %d x dp %d does not make the job's %d ranks",
                        in[STRATA_DIM_TP], in[STRATA_DIM_CP], in[STRATA_DIM_PP], in[STRATA_DIM_DP],
                        nranks);
    memcpy(out, in, D * sizeof *out);
    return STRATA_OK;
}

static strata_status_t check_order(const strata_dim_t order[D])
{
    unsigned seen = 0;
    for (int i = 0; i < D; i++) {
        if ((unsigned)order[i] >= D)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "mesh: order[%d] = %d is not a dimension (tp, cp, pp, dp)", i,
                            (int)order[i]);
        if (seen & (1u << order[i]))
            return st_error(STRATA_ERR_INVALID_ARG,
                            "mesh: the order names %s twice: each of tp, cp, pp, dp once, "
                            "innermost first",
                            strata_dim_name(order[i]));
        seen |= 1u << order[i];
    }
    return STRATA_OK;
}

/* stride[d]: the world-rank distance between neighbours along d. */
static void strides(const int size[D], const strata_dim_t order[D], int stride[D])
{
    int s = 1;
    for (int i = 0; i < D; i++) {
        stride[order[i]] = s;
        s *= size[order[i]];
    }
}

static int coord_of(int rank, const int size[D], const int stride[D], strata_dim_t d)
{
    return rank / stride[d] % size[d];
}

/* ---- traffic --------------------------------------------------------------------------------- */

static void put(strata_mesh_traffic_t *t, strata_dim_t d, strata_coll_t coll, double bytes,
                double calls)
{
    t->coll[d] = coll;
    t->bytes[d] = bytes;
    t->calls[d] = calls;
}

static void put_more(strata_mesh_traffic_t *t, strata_dim_t d, int i, strata_coll_t coll,
                     double bytes, double calls)
{
    t->more[d][i] = (strata_mesh_call_t){coll, bytes, calls};
}

void strata_mesh_traffic_gpt(const strata_gpt_config_t *m, int rows, int seq, const int size[D],
                             bool sp, int zero, strata_mesh_traffic_t *out)
{
    memset(out, 0, sizeof *out);
    const double F = 4, T = (double)rows * seq, C = m->d_model, L = m->n_layer;
    const double t = ST_MAX(size[STRATA_DIM_TP], 1), p = ST_MAX(size[STRATA_DIM_PP], 1);
    const double X = T * C * F;
    if (t > 1) {
        const double n = 4 * L + 2;
        if (sp) {
            put(out, STRATA_DIM_TP, STRATA_COLL_ALLGATHER, X, n);
            put_more(out, STRATA_DIM_TP, 0, STRATA_COLL_REDUCE_SCATTER, X, n);
            put_more(out, STRATA_DIM_TP, 1, STRATA_COLL_ALLREDUCE, T * F, 3);
        } else {
            put(out, STRATA_DIM_TP, STRATA_COLL_ALLREDUCE, X, n);
            put_more(out, STRATA_DIM_TP, 0, STRATA_COLL_ALLREDUCE, T * F, 3);
        }
    }
    if (size[STRATA_DIM_CP] > 1) {
        const double kv = T * 2 * C / t * F;
        put(out, STRATA_DIM_CP, STRATA_COLL_ALLGATHER, kv, L);
        put_more(out, STRATA_DIM_CP, 0, STRATA_COLL_REDUCE_SCATTER, kv, L);
    }
    if (p > 1) {
        put(out, STRATA_DIM_PP, STRATA_COLL_ALLREDUCE, X, 2);
        out->p2p[STRATA_DIM_PP] = true;
    }
    if (size[STRATA_DIM_DP] != 1) {
        const double G = (double)strata_gpt_config_nparams(m) / (t * p) * F;
        switch (zero) {
        case 1:
            put(out, STRATA_DIM_DP, STRATA_COLL_ALLREDUCE, G, 1);
            put_more(out, STRATA_DIM_DP, 0, STRATA_COLL_ALLGATHER, G, 1);
            break;
        case 2:
        case 3:
            put(out, STRATA_DIM_DP, STRATA_COLL_REDUCE_SCATTER, G, 1);
            put_more(out, STRATA_DIM_DP, 0, STRATA_COLL_ALLGATHER, G, zero == 3 ? 2 : 1);
            break;
        default:
            put(out, STRATA_DIM_DP, STRATA_COLL_ALLREDUCE, G, 1);
            break;
        }
    }
}

static bool bad_amount(double v)
{
    return !isfinite(v) || v < 0;
}

static strata_status_t check_traffic(const strata_mesh_traffic_t *tr)
{
    for (int d = 0; d < D; d++) {
        const char *name = strata_dim_name((strata_dim_t)d);
        if ((unsigned)tr->coll[d] >= STRATA_COLL_COUNT || bad_amount(tr->bytes[d]) ||
            bad_amount(tr->calls[d]))
            return st_error(STRATA_ERR_INVALID_ARG,
                            "mesh: the %s traffic needs a collective and finite bytes and calls "
                            ">= 0",
                            name);
        for (int i = 0; i < STRATA_MESH_MORE_CALLS; i++) {
            const strata_mesh_call_t *c = &tr->more[d][i];
            if ((unsigned)c->coll >= STRATA_COLL_COUNT || bad_amount(c->bytes) ||
                bad_amount(c->calls))
                return st_error(STRATA_ERR_INVALID_ARG,
                                "mesh: the %s traffic's further call %d needs a collective and "
                                "finite bytes and calls >= 0",
                                name, i);
        }
    }
    return STRATA_OK;
}

static bool traffic_any(const strata_mesh_traffic_t *tr)
{
    for (int d = 0; tr && d < D; d++) {
        if (tr->calls[d] > 0 && tr->bytes[d] > 0)
            return true;
        for (int i = 0; i < STRATA_MESH_MORE_CALLS; i++)
            if (tr->more[d][i].calls > 0 && tr->more[d][i].bytes > 0)
                return true;
    }
    return false;
}

/* ---- pricing --------------------------------------------------------------------------------- */

/* Seconds per step of dimension d's traffic on one of its groups. */
static strata_status_t price_group(const strata_price_shape_t *s, const strata_mesh_traffic_t *tr,
                                   strata_dim_t d, double *seconds)
{
    strata_price_t p;
    double sum = 0;
    if (tr->calls[d] > 0 && tr->bytes[d] > 0) {
        if (tr->p2p[d]) {
            sum += tr->calls[d] * strata_price_p2p(s, tr->bytes[d]);
        } else {
            ST_TRY(strata_price_coll(s, tr->coll[d], tr->bytes[d], STRATA_PRICE_OFFER_PLAIN, &p));
            sum += tr->calls[d] * p.seconds;
        }
    }
    for (int i = 0; i < STRATA_MESH_MORE_CALLS; i++) {
        const strata_mesh_call_t *c = &tr->more[d][i];
        if (c->calls > 0 && c->bytes > 0) {
            ST_TRY(strata_price_coll(s, c->coll, c->bytes, STRATA_PRICE_OFFER_PLAIN, &p));
            sum += c->calls * p.seconds;
        }
    }
    *seconds = sum;
    return STRATA_OK;
}

/* Dimension d's groups cut from `f` and priced: the slowest group's seconds, the outermost level
 * any of them crosses. */
static strata_status_t price_dim(const strata_fabric_t *f, const int size[D], const int stride[D],
                                 strata_dim_t d, const strata_mesh_traffic_t *tr, double *seconds,
                                 int *span)
{
    *seconds = 0;
    *span = -1;
    if (size[d] == 1)
        return STRATA_OK;
    // The communicator prices with full link efficiency and a reduction cost (select.c).
    const strata_net_eff_t eff = {{1.0, 1.0}, strata_link_default_shm().gamma_s_per_b};
    int *members = malloc((size_t)size[d] * sizeof *members);
    if (!members)
        return st_error(STRATA_ERR_NO_MEMORY, "mesh: out of memory");
    strata_status_t rc = STRATA_OK;
    for (int base = 0; base < f->nranks && rc == STRATA_OK; base++) {
        if (coord_of(base, size, stride, d) != 0)
            continue;
        for (int i = 0; i < size[d]; i++)
            members[i] = base + i * stride[d];
        strata_fabric_t sub;
        strata_price_shape_t shape;
        double s = 0;
        rc = strata_fabric_subset(f, size[d], members, &sub);
        if (rc != STRATA_OK)
            break;
        rc = strata_price_shape_fabric(&sub, &eff, &shape);
        strata_fabric_free(&sub);
        if (rc == STRATA_OK && tr)
            rc = price_group(&shape, tr, d, &s);
        if (rc == STRATA_OK) {
            *seconds = fmax(*seconds, s);
            *span = ST_MAX(*span, shape.top);
        }
    }
    free(members);
    return rc;
}

strata_status_t strata_mesh_price_order(const strata_fabric_t *f, const int size[D],
                                        const strata_mesh_traffic_t *tr,
                                        const strata_dim_t order[D], double seconds[D], int span[D])
{
    if (!f || f->nranks < 1 || !size || !order)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "mesh: price_order needs a fabric, sizes and an order");
    int sz[D], stride[D];
    ST_TRY(resolve_sizes(size, f->nranks, sz));
    ST_TRY(check_order(order));
    if (tr)
        ST_TRY(check_traffic(tr));
    strides(sz, order, stride);
    for (int d = 0; d < D; d++) {
        double s;
        int top;
        ST_TRY(price_dim(f, sz, stride, (strata_dim_t)d, tr, &s, &top));
        if (seconds)
            seconds[d] = s;
        if (span)
            span[d] = top;
    }
    return STRATA_OK;
}

/* The next permutation of idx[0..k) in lexicographic order; false after the last. */
static bool next_perm(int *idx, int k)
{
    int i = k - 2;
    while (i >= 0 && idx[i] >= idx[i + 1])
        i--;
    if (i < 0)
        return false;
    int j = k - 1;
    while (idx[j] <= idx[i])
        j--;
    int tmp = idx[i];
    idx[i] = idx[j];
    idx[j] = tmp;
    for (int a = i + 1, b = k - 1; a < b; a++, b--) {
        tmp = idx[a];
        idx[a] = idx[b];
        idx[b] = tmp;
    }
    return true;
}

strata_status_t strata_mesh_choose_order(const strata_fabric_t *f, const int size[D],
                                         const strata_mesh_traffic_t *tr, strata_dim_t order[D],
                                         double seconds[D])
{
    if (!f || f->nranks < 1 || !size || !order)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "mesh: choose_order needs a fabric, sizes and an order to fill");
    int sz[D];
    ST_TRY(resolve_sizes(size, f->nranks, sz));
    // Only the dimensions of size > 1 move; the others keep their default slots, so the first
    // permutation tried is the default order and a tie keeps it.
    int big[D], k = 0;
    for (int d = 0; d < D; d++)
        if (sz[d] > 1)
            big[k++] = d;
    int idx[D] = {0, 1, 2, 3};
    strata_dim_t best[D];
    strata_mesh_default_order(best);
    double best_s = INFINITY, best_sec[D] = {0};
    do {
        strata_dim_t cand[D];
        strata_mesh_default_order(cand);
        for (int i = 0; i < k; i++)
            cand[big[i]] = (strata_dim_t)big[idx[i]];
        double sec[D], total = 0;
        ST_TRY(strata_mesh_price_order(f, sz, tr, cand, sec, NULL));
        for (int d = 0; d < D; d++)
            total += sec[d];
        if (total < best_s * (1 - 1e-9)) {
            best_s = total;
            memcpy(best, cand, sizeof best);
            memcpy(best_sec, sec, sizeof best_sec);
        }
    } while (next_perm(idx, k));
    memcpy(order, best, sizeof best);
    if (seconds)
        memcpy(seconds, best_sec, sizeof best_sec);
    return STRATA_OK;
}

strata_status_t strata_mesh_describe_order(const strata_fabric_t *f, const int size[D],
                                           const strata_mesh_traffic_t *tr,
                                           const strata_dim_t order[D], FILE *out)
{
    double sec[D];
    int span[D], sz[D];
    ST_TRY(strata_mesh_price_order(f, size, tr, order, sec, span));
    ST_TRY(resolve_sizes(size, f->nranks, sz));
    const bool priced = traffic_any(tr);
    int n = 0;
    // Innermost first, as the ranks are laid out.
    for (int i = 0; i < D; i++) {
        strata_dim_t d = order[i];
        if (sz[d] == 1)
            continue;
        fprintf(out, "%s%s=%d ", n++ ? ", " : "", strata_dim_name(d), sz[d]);
        if (span[d] <= 0)
            fprintf(out, "inside %s", f->topo.level[0].name);
        else
            fprintf(out, "across %s", f->topo.level[span[d] - 1].name);
        if (priced)
            fprintf(out, " (%.3g ms/step)", sec[d] * 1e3);
    }
    if (n == 0)
        fputs("one rank", out);
    return STRATA_OK;
}

/* ---- the mesh -------------------------------------------------------------------------------- */

/* Splits `world` by `color` (< 0: no group) and `key`; names the group in the error. */
static strata_status_t split(strata_comm_t *world, int color, int key, const char *what,
                             strata_comm_t **out)
{
    strata_status_t rc = strata_comm_split(world, color, key, out);
    if (rc != STRATA_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", strata_last_error());
        return st_error(rc, "mesh: forming the %s groups: %s", what, why);
    }
    return STRATA_OK;
}

strata_status_t strata_mesh_create(strata_comm_t *world, const strata_mesh_config_t *cfg,
                                   strata_mesh_t **out)
{
    if (out)
        *out = NULL;
    if (!world || !cfg || !out)
        return st_error(STRATA_ERR_INVALID_ARG, "mesh: create needs a world, a config and out");
    const int n = strata_comm_size(world), rank = strata_comm_rank(world);
    int sz[D];
    ST_TRY(resolve_sizes(cfg->size, n, sz));
    ST_TRY(check_traffic(&cfg->traffic));
    const strata_fabric_t *f = strata_comm_fabric(world);
    if (!f || f->nranks != n)
        return st_error(STRATA_ERR_INTERNAL, "mesh: the world's fabric does not hold its %d ranks",
                        n);

    strata_mesh_t *m = calloc(1, sizeof *m);
    if (!m)
        return st_error(STRATA_ERR_NO_MEMORY, "mesh: out of memory");
    m->world = world;
    m->rank = rank;
    memcpy(m->size, sz, sizeof sz);
    m->traffic = cfg->traffic;
    strata_status_t rc = STRATA_OK;
    if (cfg->order_given) {
        ST_TRY_GOTO(check_order(cfg->order), rc, fail);
        memcpy(m->order, cfg->order, sizeof m->order);
        m->how = ORDER_GIVEN;
    } else if (traffic_any(&cfg->traffic)) {
        ST_TRY_GOTO(strata_mesh_choose_order(f, sz, &cfg->traffic, m->order, NULL), rc, fail);
        m->how = ORDER_CHOSEN;
    } else {
        strata_mesh_default_order(m->order);
        m->how = ORDER_DEFAULT;
    }
    ST_TRY_GOTO(strata_mesh_price_order(f, sz, &cfg->traffic, m->order, m->seconds, NULL), rc,
                fail);
    strides(sz, m->order, m->stride);
    for (int d = 0; d < D; d++)
        m->coord[d] = coord_of(rank, sz, m->stride, (strata_dim_t)d);

    // Every split is collective over the world, in the same sequence on every rank. A group's
    // colour is its lowest world rank (the member with coordinate 0 along the split dimensions).
    for (int d = 0; d < D; d++)
        ST_TRY_GOTO(split(world, rank - m->coord[d] * m->stride[d], m->coord[d],
                          strata_dim_name((strata_dim_t)d), &m->comm[d]),
                    rc, fail);
    const int dp = STRATA_DIM_DP, cp = STRATA_DIM_CP, pp = STRATA_DIM_PP;
    ST_TRY_GOTO(split(world, rank - m->coord[dp] * m->stride[dp] - m->coord[cp] * m->stride[cp],
                      rank, "dp x cp", &m->dp_cp),
                rc, fail);
    if (sz[pp] > 1) {
        const bool end = m->coord[pp] == 0 || m->coord[pp] == sz[pp] - 1;
        ST_TRY_GOTO(split(world, end ? rank - m->coord[pp] * m->stride[pp] : -1, m->coord[pp],
                          "embedding (first and last pp stage)", &m->embed),
                    rc, fail);
    }
    *out = m;
    return STRATA_OK;
fail:
    strata_mesh_destroy(m);
    return rc;
}

void strata_mesh_destroy(strata_mesh_t *m)
{
    if (!m)
        return;
    strata_comm_destroy(m->embed);
    strata_comm_destroy(m->dp_cp);
    for (int d = D - 1; d >= 0; d--)
        strata_comm_destroy(m->comm[d]);
    free(m);
}

int strata_mesh_size(const strata_mesh_t *m, strata_dim_t d)
{
    return m && (unsigned)d < D ? m->size[d] : 0;
}

int strata_mesh_coord(const strata_mesh_t *m, strata_dim_t d)
{
    return m && (unsigned)d < D ? m->coord[d] : 0;
}

int strata_mesh_rank_of(const strata_mesh_t *m, const int coord[D])
{
    if (!m || !coord)
        return -1;
    int r = 0;
    for (int d = 0; d < D; d++) {
        if (coord[d] < 0 || coord[d] >= m->size[d])
            return -1;
        r += coord[d] * m->stride[d];
    }
    return r;
}

strata_comm_t *strata_mesh_comm(const strata_mesh_t *m, strata_dim_t d)
{
    return m && (unsigned)d < D ? m->comm[d] : NULL;
}

strata_comm_t *strata_mesh_dp_cp_comm(const strata_mesh_t *m)
{
    return m ? m->dp_cp : NULL;
}

strata_comm_t *strata_mesh_embed_comm(const strata_mesh_t *m)
{
    return m ? m->embed : NULL;
}

const strata_dim_t *strata_mesh_order(const strata_mesh_t *m)
{
    return m ? m->order : NULL;
}

double strata_mesh_seconds(const strata_mesh_t *m, strata_dim_t d)
{
    return m && (unsigned)d < D ? m->seconds[d] : 0;
}

void strata_mesh_describe(const strata_mesh_t *m, FILE *f)
{
    if (!m || !f)
        return;
    static const char *const how[] = {[ORDER_DEFAULT] = "default",
                                      [ORDER_GIVEN] = "given",
                                      [ORDER_CHOSEN] = "chosen by the cost model"};
    fputs("mesh: ", f);
    if (strata_mesh_describe_order(strata_comm_fabric(m->world), m->size, &m->traffic, m->order,
                                   f) != STRATA_OK)
        fprintf(f, "(not priced: %s)", strata_last_error());
    fprintf(f, "; order %s,%s,%s,%s (%s)\n", strata_dim_name(m->order[0]),
            strata_dim_name(m->order[1]), strata_dim_name(m->order[2]),
            strata_dim_name(m->order[3]), how[m->how]);
}
