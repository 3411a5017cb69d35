/* The kinds comm, plan and sched share, by name: collectives, parallel dimensions, algorithms.
 * They live in netmodel, the part below all three, so none of them includes another for them. */
#include <string.h>
#include <strings.h>

#include "base/base.h"
#include "strata/netmodel.h"

static const char *const coll_names[STRATA_COLL_COUNT] = {
    [STRATA_COLL_ALLREDUCE] = "allreduce", [STRATA_COLL_REDUCE] = "reduce",
    [STRATA_COLL_BCAST] = "bcast",         [STRATA_COLL_REDUCE_SCATTER] = "reduce_scatter",
    [STRATA_COLL_ALLGATHER] = "allgather", [STRATA_COLL_ALLTOALL] = "alltoall",
    [STRATA_COLL_GATHER] = "gather",       [STRATA_COLL_SCATTER] = "scatter",
    [STRATA_COLL_BARRIER] = "barrier",
};

static const char *const dim_names[STRATA_DIM_COUNT] = {"tp", "cp", "pp", "dp"};

static const char *const algo_names[STRATA_ALGO_COUNT] = {
    [STRATA_ALGO_RING] = "ring",
    [STRATA_ALGO_RECURSIVE_DOUBLING] = "recursive_doubling",
    [STRATA_ALGO_HALVING_DOUBLING] = "halving_doubling",
    [STRATA_ALGO_BINOMIAL] = "binomial",
    [STRATA_ALGO_SCATTER_ALLGATHER] = "scatter_allgather",
    [STRATA_ALGO_REDUCE_SCATTER_GATHER] = "reduce_scatter_gather",
    [STRATA_ALGO_PAIRWISE] = "pairwise",
    [STRATA_ALGO_LINEAR] = "linear",
    [STRATA_ALGO_DISSEMINATION] = "dissemination",
    [STRATA_ALGO_DIRECT] = "direct",
    [STRATA_ALGO_RING_TREE] = "ring_tree",
    [STRATA_ALGO_HIER] = "hier",
    [STRATA_ALGO_TORUS] = "torus",
    [STRATA_ALGO_POOL] = "pool",
};

const char *strata_coll_name(strata_coll_t coll)
{
    return (unsigned)coll < STRATA_COLL_COUNT ? coll_names[coll] : NULL;
}

strata_status_t strata_coll_parse(const char *name, strata_coll_t *out)
{
    if (!out)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_coll_parse: out is NULL");
    for (int i = 0; name && i < STRATA_COLL_COUNT; i++)
        if (strcasecmp(name, coll_names[i]) == 0) {
            *out = (strata_coll_t)i;
            return STRATA_OK;
        }
    if (name && strcasecmp(name, "broadcast") == 0) {
        *out = STRATA_COLL_BCAST;
        return STRATA_OK;
    }
    return st_error(STRATA_ERR_INVALID_ARG,
                    "unknown collective '%s' (valid: allreduce reduce bcast reduce_scatter "
                    "allgather alltoall gather scatter barrier; broadcast = bcast)",
                    name ? name : "(null)");
}

const char *strata_dim_name(strata_dim_t d)
{
    return (unsigned)d < STRATA_DIM_COUNT ? dim_names[d] : "?";
}

const char *strata_algo_name(strata_algo_t algo)
{
    return (unsigned)algo < STRATA_ALGO_COUNT ? algo_names[algo] : "unknown";
}

static int dim_index(const char *s, size_t len)
{
    for (int i = 0; i < STRATA_DIM_COUNT; i++)
        if (strlen(dim_names[i]) == len && !strncmp(s, dim_names[i], len))
            return i;
    return -1;
}

strata_status_t strata_order_parse(const char *s, strata_dim_t order[STRATA_DIM_COUNT])
{
    int n = 0;
    unsigned seen = 0;
    const char *p = s;
    while (*p) {
        size_t len = strcspn(p, ",+ ");
        int d = dim_index(p, len);
        if (d < 0 || (seen & (1u << d)) || n >= STRATA_DIM_COUNT)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "expected an order of tp,cp,pp,dp, each once, "
                            "innermost first, got '%s'",
                            s);
        seen |= 1u << d;
        order[n++] = (strata_dim_t)d;
        p += len;
        while (*p == ',' || *p == '+' || *p == ' ')
            p++;
    }
    if (n != STRATA_DIM_COUNT)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "expected an order naming all of tp,cp,pp,dp, got "
                        "'%s'",
                        s);
    return STRATA_OK;
}
