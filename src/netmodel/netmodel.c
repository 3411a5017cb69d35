/* Alpha-beta-gamma costs of the flat collective algorithms (Thakur, Rabenseifner & Gropp, 2005,
 * with the usual n-1 / n bandwidth terms). Topology-aware and hierarchical costs build on these by
 * applying them per level of the fabric; that lives beside this file, not inside the communicator.
 */
#include "strata/netmodel.h"

#include <math.h>

static const char *const algo_names[STRATA_ALGO_COUNT] = {
    "ring",
    "recursive_doubling",
    "halving_doubling",
    "binomial",
    "scatter_allgather",
    "reduce_scatter_gather",
    "pairwise",
    "linear",
    "dissemination",
    "direct",
};

const char *strata_algo_name(strata_algo_t algo)
{
    return (unsigned)algo < STRATA_ALGO_COUNT ? algo_names[algo] : "unknown";
}

strata_link_t strata_link_default_shm(void)
{
    // Measured on the development machine: ~1 us per small message, ~8 GB/s per copy stream.
    return (strata_link_t){
        .alpha_s = 1.5e-6, .beta_s_per_b = 1.0 / 8e9, .gamma_s_per_b = 1.0 / 10e9};
}

strata_link_t strata_link_default_tcp(void)
{
    return (strata_link_t){
        .alpha_s = 25e-6, .beta_s_per_b = 1.0 / 2.5e9, .gamma_s_per_b = 1.0 / 10e9};
}

void strata_fabric_default_levels(int nlevels, strata_topo_t *out)
{
    strata_topo_init(out, "default");
    strata_link_t shm = strata_link_default_shm(), tcp = strata_link_default_tcp();
    for (int l = 0; l < nlevels && l < STRATA_TOPO_MAX_LEVELS; l++) {
        const strata_link_t *k = l == 0 ? &shm : &tcp;
        strata_topo_level_t lv = {.fanout = 1,
                                  .bw_Bps = 1.0 / k->beta_s_per_b,
                                  .latency_s = k->alpha_s,
                                  .oversub = 1,
                                  .link_class =
                                      l == 0 ? STRATA_LINK_SCALE_UP : STRATA_LINK_SCALE_OUT};
        snprintf(lv.name, sizeof lv.name, l == 0 ? "host" : "tier%d", l);
        out->level[out->nlevels++] = lv;
    }
}

static int ceil_log2(int n)
{
    int l = 0;
    while ((1 << l) < n)
        l++;
    return l;
}

static int floor_pow2(int n)
{
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    return p;
}

double strata_netmodel_cost(strata_coll_t coll, strata_algo_t algo, int nranks, double bytes,
                            const strata_link_t *link)
{
    if (nranks <= 1)
        return 0.0;
    const double n = nranks, a = link->alpha_s, b = link->beta_s_per_b, g = link->gamma_s_per_b;
    const double lg = ceil_log2(nranks), frac = (n - 1) / n;
    const int p2 = floor_pow2(nranks);
    // Non-power-of-two halving-doubling folds the extra ranks in before and out after.
    const double fold = p2 == nranks ? 0.0 : 1.0;
    switch (coll) {
    case STRATA_COLL_ALLREDUCE:
        switch (algo) {
        case STRATA_ALGO_RING:
            return 2 * (n - 1) * a + 2 * frac * bytes * b + frac * bytes * g;
        case STRATA_ALGO_RECURSIVE_DOUBLING:
            return (log2(p2) + 2 * fold) * (a + bytes * b) + (log2(p2) + fold) * bytes * g;
        case STRATA_ALGO_HALVING_DOUBLING: {
            double f2 = (p2 - 1.0) / p2;
            return (2 * log2(p2) + 2 * fold) * a + (2 * f2 + 2 * fold) * bytes * b +
                   (f2 + fold) * bytes * g;
        }
        case STRATA_ALGO_DIRECT: // b prices a message byte: a copy in and a copy out
            return (n - 1 + lg) * a + frac * bytes * (b + g);
        default:
            return -1;
        }
    case STRATA_COLL_REDUCE:
        switch (algo) {
        case STRATA_ALGO_BINOMIAL:
            return lg * (a + bytes * b + bytes * g);
        case STRATA_ALGO_REDUCE_SCATTER_GATHER:
            return 2 * (n - 1) * a + 2 * frac * bytes * b + frac * bytes * g;
        default:
            return -1;
        }
    case STRATA_COLL_BCAST:
        switch (algo) {
        case STRATA_ALGO_BINOMIAL:
            return lg * (a + bytes * b);
        case STRATA_ALGO_SCATTER_ALLGATHER:
            return (lg + n - 1) * a + 2 * frac * bytes * b;
        default:
            return -1;
        }
    case STRATA_COLL_REDUCE_SCATTER:
        switch (algo) {
        case STRATA_ALGO_RING:
            return (n - 1) * a + frac * bytes * (b + g);
        case STRATA_ALGO_DIRECT:
            return (n - 1 + lg) * a + frac * bytes * (b / 2 + g);
        default:
            return -1;
        }
    case STRATA_COLL_ALLGATHER:
        switch (algo) {
        case STRATA_ALGO_RING:
            return (n - 1) * a + frac * bytes * b;
        case STRATA_ALGO_RECURSIVE_DOUBLING: // Bruck: any n, plus a local rotation of the result
            return lg * a + frac * bytes * b + bytes * g;
        case STRATA_ALGO_DIRECT:
            return (n - 1 + lg) * a + frac * bytes * b / 2;
        default:
            return -1;
        }
    case STRATA_COLL_ALLTOALL:
        switch (algo) {
        case STRATA_ALGO_PAIRWISE:
            return (n - 1) * (a + bytes / n * b);
        case STRATA_ALGO_LINEAR:
            return a + (n - 1) * (bytes / n) * b + (n - 1) * 0.2 * a;
        default:
            return -1;
        }
    case STRATA_COLL_GATHER:
    case STRATA_COLL_SCATTER:
        switch (algo) {
        case STRATA_ALGO_LINEAR:
            return (n - 1) * a + frac * bytes * b;
        case STRATA_ALGO_BINOMIAL:
            return lg * a + lg / 2 * frac * bytes * b + frac * bytes * b;
        default:
            return -1;
        }
    case STRATA_COLL_BARRIER:
        return algo == STRATA_ALGO_DISSEMINATION ? lg * a : -1;
    case STRATA_COLL_COUNT:
        break;
    }
    return -1;
}
