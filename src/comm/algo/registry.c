/* The algorithm registry: every collective algorithm strata has, with its name and description
 * (listed by `strata algos`, named by STRATA_COMM_ALGO). One file per family implements them. */
#include "comm/algo/algo.h"

extern const st_algo_t st_algo_allreduce_ring, st_algo_allreduce_rd, st_algo_allreduce_rhd,
    st_algo_reduce_binomial, st_algo_reduce_rs_gather, st_algo_bcast_binomial,
    st_algo_bcast_scatter_allgather, st_algo_reduce_scatter_ring, st_algo_allgather_ring,
    st_algo_allgather_bruck, st_algo_alltoall_pairwise, st_algo_alltoall_linear,
    st_algo_gather_linear, st_algo_scatter_linear, st_algo_barrier_dissemination,
    st_algo_allreduce_ring_tree, st_algo_allreduce_hier, st_algo_reduce_scatter_ring_tree,
    st_algo_reduce_scatter_hier, st_algo_allgather_ring_tree, st_algo_allgather_hier,
    st_algo_allreduce_direct, st_algo_reduce_scatter_direct, st_algo_allgather_direct,
    st_algo_allreduce_torus, st_algo_allreduce_pool;

const st_algo_t *const st_algos[] = {
    &st_algo_allreduce_ring,        &st_algo_allreduce_rd,          &st_algo_allreduce_rhd,
    &st_algo_reduce_binomial,       &st_algo_reduce_rs_gather,      &st_algo_bcast_binomial,
    &st_algo_bcast_scatter_allgather, &st_algo_reduce_scatter_ring, &st_algo_allgather_ring,
    &st_algo_allgather_bruck,       &st_algo_alltoall_pairwise,     &st_algo_alltoall_linear,
    &st_algo_gather_linear,         &st_algo_scatter_linear,        &st_algo_barrier_dissemination,
    &st_algo_allreduce_ring_tree,   &st_algo_allreduce_hier,        &st_algo_reduce_scatter_ring_tree,
    &st_algo_reduce_scatter_hier,   &st_algo_allgather_ring_tree,   &st_algo_allgather_hier,
    &st_algo_allreduce_direct,      &st_algo_reduce_scatter_direct, &st_algo_allgather_direct,
    &st_algo_allreduce_torus,       &st_algo_allreduce_pool,
};
const int st_nalgos = (int)(sizeof st_algos / sizeof st_algos[0]);

bool strata_algo_info(strata_coll_t coll, int i, const char **name, const char **desc)
{
    for (int k = 0; k < st_nalgos; k++) {
        if (st_algos[k]->coll != coll || i-- > 0)
            continue;
        if (name)
            *name = st_algos[k]->name;
        if (desc)
            *desc = st_algos[k]->desc;
        return true;
    }
    return false;
}
