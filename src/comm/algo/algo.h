/* Collective algorithms: each builds a schedule (sched.h) for one collective.
 *
 * Collectives reach the algorithms in one normalised form (st_coll_args_t): the uneven "v" shape,
 * with per-rank block counts and displacements in elements, so allgather is allgatherv with equal
 * blocks, reduce_scatter is reduce_scatterv, alltoall is alltoallv, and one implementation serves
 * both. Algorithms are listed in registry.c with a name and a description; an algorithm may
 * decline a call it cannot serve (supports() false, e.g. recursive doubling on uneven blocks) and
 * select.c then takes the cheapest remaining one by the price (strata/price.h).
 */
#ifndef ST_ALGO_H
#define ST_ALGO_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/algo/sched.h"
#include "strata/price.h"

/* The price of this communicator's group (strata/price.h), computed on first use: its shape on
 * the fabric and, per collective, every algorithm's lines. Zeroed, it is unknown. */
typedef struct st_topo_memo {
    bool shaped;
    unsigned known; /* collectives whose table is filled */
    strata_price_shape_t shape;
    strata_price_table_t table[STRATA_COLL_COUNT];
} st_topo_memo_t;

/* A communicator's place on the fabric (comm/topo.c) and its memoised price. */
typedef struct st_topo {
    strata_fabric_t fabric;
    bool multi; /* some level splits the communicator: topology-aware plans differ from flat ones */
    strata_torus_grid_t torus; /* the ranks' torus (strata_fabric_torus); ndims 0: they fill none */
    st_topo_memo_t memo[1]; /* cleared with the rest when the fabric changes (comm/topo.c) */
} st_topo_t;

/* The pool a communicator's pool allreduce runs through (pool.c): the nodes of STRATA_POOL_NODES and
 * a client opened on first use. */
typedef struct st_pool_conn st_pool_conn_t;
/* NULL when STRATA_POOL_NODES names no node (or memory is short): the algorithm is not offered.
 * world_size: ranks of the world, each of which owns a slot of the pool; ctx: the communicator's
 * context id, which picks its multicast group (STRATA_POOL_MULTICAST). */
st_pool_conn_t *st_pool_conn_new(int world_size, uint32_t ctx);
void st_pool_conn_free(st_pool_conn_t *c);
/* Nodes of the pool (0 for NULL), and whether results go by multicast (STRATA_POOL_MULTICAST). */
int st_pool_conn_nodes(const st_pool_conn_t *c);
bool st_pool_conn_multicast(const st_pool_conn_t *c);

typedef struct st_coll_args {
    strata_coll_t coll;
    const void *sendbuf;
    void *recvbuf;
    size_t count;           /* allreduce, reduce, bcast: elements per rank */
    const size_t *counts;   /* per-rank block counts (elements): gather/scatter/allgather/
                               reduce_scatter blocks, alltoall receive blocks */
    const size_t *displs;   /* per-rank displacements (elements) matching counts */
    const size_t *scounts;  /* alltoall send blocks */
    const size_t *sdispls;
    bool uniform;           /* every block has the same count and blocks are packed */
    strata_dtype_t dtype;
    strata_op_t op;
    int root;
    int rank, nranks;
    size_t esize;
    st_topo_t *topo;        /* the communicator's fabric (NULL: unknown) */
    st_win_t *win;          /* this process's window (direct algorithms) */
    bool direct_ok;         /* every rank is on this host and can reach its peers' memory */
    bool registered;        /* sendbuf and recvbuf are strata_mem_alloc memory */
    st_pool_conn_t *pool;   /* the communicator's pool (NULL: STRATA_POOL_NODES unset) */
    strata_xfer_pipe_t pipe; /* set by selection for the hierarchical plans */
} st_coll_args_t;

typedef struct st_algo {
    const char *name;
    const char *desc;
    strata_coll_t coll;
    strata_algo_t model;  /* how the price knows it (strata/price.h); unique per collective */
    bool (*supports)(const st_coll_args_t *a); /* NULL: serves every call */
    strata_status_t (*build)(st_sched_t *s, const st_coll_args_t *a);
} st_algo_t;

/* The registry (registry.c): all algorithms, grouped by collective. */
extern const st_algo_t *const st_algos[];
extern const int st_nalgos;

/* Picks the algorithm for a call: STRATA_COMM_ALGO if it names one that supports the call, else the
 * cheapest supported one by the price of the communicator's group (its fabric, else `link` for
 * every pair), chosen by strata_price_table_choose as the planner's prediction is; sets a->pipe.
 * Never NULL for a valid call. */
const st_algo_t *st_algo_select(st_coll_args_t *a, size_t bytes, const strata_link_t *link);

/* True when STRATA_COMM_ALGO names an algorithm for `coll`. */
bool st_algo_forced(strata_coll_t coll);

/* The price in seconds of `al` for the call (negative: it cannot be priced here), and the pipeline
 * it would run with. */
double st_algo_cost(const st_algo_t *al, const st_coll_args_t *a, size_t bytes,
                    const strata_link_t *link, strata_xfer_pipe_t *pipe);

/* ---- pieces shared by several algorithms (ring.c) ----------------------------------------------- */

/* Splits `count` elements into n near-equal blocks; fills byte offsets and lengths. */
void st_blocks_even(size_t count, int n, size_t esize, size_t *off, size_t *len);

/* One ring among some ranks: this rank's position in it and its neighbours (communicator ranks);
 * the ring sends to `right` and receives from `left`. Block i (byte offsets/lengths) is the one
 * position i ends with. */
typedef struct st_ring {
    int n, pos, left, right;
} st_ring_t;

/* Step `step` (0 .. n-2) of a ring reduce-scatter that keeps partial sums in `work` (reading step
 * 0's block and every received block's own contribution from `in`; work may be in): a send and a
 * receive-reduce added to the open round, which the caller closes. After step n-2, block pos of
 * work holds the reduction. */
void st_ring_rs_step(st_sched_t *s, const st_ring_t *r, int step, const char *in, char *work,
                     const size_t *off, const size_t *len, uint32_t tag);

/* Step `step` (0 .. n-2) of a ring allgather inside `buf`, this position's block read from `mine`
 * on step 0; added to the open round. */
void st_ring_ag_step(st_sched_t *s, const st_ring_t *r, int step, char *buf, const void *mine,
                     const size_t *off, const size_t *len, uint32_t tag);

/* Ring reduce-scatter of n blocks (byte offsets/lengths) read from `src`. With `work` non-NULL the
 * partial sums are kept in work (same layout as src; allreduce passes its recvbuf) and the result
 * block r ends in work too; with `work` NULL the partial sums go through two scratch blocks and the
 * result lands in `final`. Uses tags tag0 .. tag0+n-2. */
void st_ring_reduce_scatter(st_sched_t *s, int rank, int n, const void *src, char *work,
                            void *final, const size_t *off, const size_t *len, uint32_t tag0);

/* Ring allgather of n blocks inside `buf` (byte offsets/lengths); this rank's block is read from
 * `mine` on the first step (usually buf + off[rank]). Uses tags tag0 .. tag0+n-2. */
void st_ring_allgather(st_sched_t *s, int rank, int n, char *buf, const void *mine,
                       const size_t *off, const size_t *len, uint32_t tag0);

/* Dissemination barrier rounds (linear.c): in round k rank r signals r+2^k and waits for r-2^k.
 * Uses tags tag0 .. tag0+ceil(log2 n)-1. Operations already in the open round run before it. */
void st_sched_barrier(st_sched_t *s, int rank, int n, uint32_t tag0);

#endif
