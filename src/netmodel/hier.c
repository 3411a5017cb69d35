/* Cost of a collective whose group spans several levels of the fabric tree. The group is reduced to
 * one flat link (alpha, beta, gamma) that the flat algorithms in netmodel.c then price: the slowest
 * level the group crosses sets the bandwidth, shared between the concurrent groups that cross it
 * from the same child and cut by that level's oversubscription; the largest crossed latency sets
 * alpha. This is the piece the planner, the scheduler and the communicator's hierarchical
 * algorithms share, so that a placement is priced the same everywhere. */
#include "base/base.h"
#include "strata/netmodel.h"

#include <math.h>

long long strata_group_size(const strata_group_t *group)
{
    long long n = 1;
    for (int i = 0; i < group->ndims; i++)
        n *= group->dim[i].size;
    return n;
}

/* Members of the group inside one aligned block of `block` consecutive accelerators. */
static long long members_in_block(const strata_group_t *g, long long block)
{
    long long k = 1;
    for (int i = 0; i < g->ndims; i++) {
        long long s = g->dim[i].stride, n = g->dim[i].size;
        long long in = block >= s ? block / s : 1;
        k *= in < n ? (in > 1 ? in : 1) : n;
    }
    return k;
}

strata_status_t strata_netmodel_group_link(const strata_topo_t *topo, const strata_group_t *group,
                                           const strata_net_eff_t *eff, bool aggregate,
                                           strata_link_t *out, int *top_level)
{
    if (group->ndims < 0 || group->ndims > STRATA_GROUP_MAX_DIMS)
        return st_error(STRATA_ERR_INVALID_ARG, "group: expected 0 to %d dimensions, got %d",
                        STRATA_GROUP_MAX_DIMS, group->ndims);
    long long extent = 1;
    for (int i = 0; i < group->ndims; i++) {
        if (group->dim[i].size < 1 || group->dim[i].stride < 1)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "group: dimension %d: expected size >= 1 and "
                            "stride >= 1, got %d and %lld",
                            i, group->dim[i].size, group->dim[i].stride);
        long long e = group->dim[i].stride * group->dim[i].size;
        if (e > extent)
            extent = e;
    }
    long long n = strata_group_size(group);
    if (extent > strata_topo_capacity(topo))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "group of %lld spanning %lld accelerators does not "
                        "fit cluster %s of %lld",
                        n, extent, topo->name, strata_topo_capacity(topo));

    double bw = INFINITY, alpha = 0;
    int top = 0;
    for (int l = 0; l < topo->nlevels && n > 1; l++) {
        const strata_topo_level_t *lv = &topo->level[l];
        long long child = strata_topo_domain_size(topo, l);
        long long k = members_in_block(group, child);
        if (k >= n)
            break; /* the whole group lives inside one child of this level */
        double e = lv->efficiency > 0 ? lv->efficiency : eff->eff[lv->link_class];
        double b = (aggregate ? (double)k : 1.0) * lv->bw_Bps * e / lv->oversub;
        // A single flow never exceeds one accelerator's link at this level.
        if (!aggregate && b > lv->bw_Bps * e)
            b = lv->bw_Bps * e;
        if (b < bw)
            bw = b;
        if (lv->latency_s > alpha)
            alpha = lv->latency_s;
        top = l + 1;
    }
    out->alpha_s = alpha;
    out->beta_s_per_b = isfinite(bw) ? 1.0 / bw : 0.0;
    out->gamma_s_per_b = eff->gamma_s_per_b;
    if (top_level)
        *top_level = top;
    return STRATA_OK;
}

double strata_netmodel_p2p(double bytes, const strata_link_t *link)
{
    return bytes > 0 ? link->alpha_s + bytes * link->beta_s_per_b : 0.0;
}
