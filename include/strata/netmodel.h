/* The network cost model: alpha-beta-gamma cost of each collective algorithm.
 *
 * One model serves three users: the communicator picks algorithms with it, the planner predicts a
 * training step with it, the scheduler scores placements with it. A link is described by its
 * per-message latency alpha (s), its inverse bandwidth beta (s/byte) and the local reduction cost
 * gamma (s/byte). Costs are in seconds for `bytes` as defined per collective:
 *   allreduce, reduce, bcast:   the full vector each rank holds
 *   reduce_scatter, allgather:  the full (nranks-block) vector
 *   alltoall, gather, scatter:  the full vector one rank sends/holds (nranks blocks)
 *   barrier:                    ignored
 */
#ifndef STRATA_NETMODEL_H
#define STRATA_NETMODEL_H

#include "strata/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct strata_link {
    double alpha_s;        /* latency per message, seconds */
    double beta_s_per_b;   /* seconds per byte = 1 / bandwidth */
    double gamma_s_per_b;  /* seconds per byte reduced locally */
} strata_link_t;

/* Flat algorithms every communicator has. Names match the registry in `strata algos`. */
typedef enum strata_algo {
    STRATA_ALGO_RING = 0,           /* ring; allreduce = reduce-scatter + allgather */
    STRATA_ALGO_RECURSIVE_DOUBLING, /* log2(n) rounds of full-size exchanges */
    STRATA_ALGO_HALVING_DOUBLING,   /* Rabenseifner: recursive halving then doubling */
    STRATA_ALGO_BINOMIAL,           /* binomial tree */
    STRATA_ALGO_SCATTER_ALLGATHER,  /* bcast as scatter + ring allgather (van de Geijn) */
    STRATA_ALGO_REDUCE_SCATTER_GATHER, /* reduce as ring reduce-scatter + gather */
    STRATA_ALGO_PAIRWISE,           /* n-1 rounds of pairwise exchange */
    STRATA_ALGO_LINEAR,             /* everyone talks to one rank (or all) at once */
    STRATA_ALGO_DISSEMINATION,      /* barrier in ceil(log2 n) rounds */
    STRATA_ALGO_COUNT
} strata_algo_t;

STRATA_API const char *strata_algo_name(strata_algo_t algo);

/* Default links: ranks of one host over shared memory, and hosts over TCP (loopback-class). */
STRATA_API strata_link_t strata_link_default_shm(void);
STRATA_API strata_link_t strata_link_default_tcp(void);

/* Predicted seconds for `algo` performing `coll` among `nranks` ranks over `link`, or a negative
 * value when the algorithm does not implement that collective. */
STRATA_API double strata_netmodel_cost(strata_coll_t coll, strata_algo_t algo, int nranks,
                                       double bytes, const strata_link_t *link);

#ifdef __cplusplus
}
#endif
#endif
