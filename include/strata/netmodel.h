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
#include "strata/topo.h"

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
    STRATA_ALGO_DIRECT,             /* one host: ranks load/store each other's buffers, so a byte
                                       is copied once, not into a message and out of it */
    STRATA_ALGO_COUNT
} strata_algo_t;

STRATA_API const char *strata_algo_name(strata_algo_t algo);

/* Default links: ranks of one host over shared memory, and hosts over TCP (loopback-class). */
STRATA_API strata_link_t strata_link_default_shm(void);
STRATA_API strata_link_t strata_link_default_tcp(void);

/* Levels strata assumes without a cluster file: "host" over shared memory, then `nlevels - 1`
 * levels "tier1".. over TCP (the two links above), oversubscription 1. */
STRATA_API void strata_fabric_default_levels(int nlevels, strata_topo_t *out);

/* Predicted seconds for `algo` performing `coll` among `nranks` ranks over `link`, or a negative
 * value when the algorithm does not implement that collective. */
STRATA_API double strata_netmodel_cost(strata_coll_t coll, strata_algo_t algo, int nranks,
                                       double bytes, const strata_link_t *link);

/* ---- groups spanning the fabric tree (src/netmodel/hier.c) ----------------------------------- */

/* One dimension of a process group laid out on the tree: `size` members whose accelerator numbers
 * differ by `stride` (a tensor-parallel group of 8 has stride 1; a data-parallel group has stride
 * tp*cp*pp under the default mapping). A group may combine dimensions (data x context parallel). */
typedef struct strata_group_dim {
    int size;
    long long stride;
} strata_group_dim_t;

#define STRATA_GROUP_MAX_DIMS 4

typedef struct strata_group {
    int ndims;
    strata_group_dim_t dim[STRATA_GROUP_MAX_DIMS];
} strata_group_t;

/* Efficiencies the model applies per link class, and the local reduction cost. */
typedef struct strata_net_eff {
    double eff[STRATA_LINK_CLASS_COUNT]; /* fraction of link bandwidth reached by collectives */
    double gamma_s_per_b;                /* seconds per byte reduced on the accelerator */
} strata_net_eff_t;

/* How one member of `group` sees the fabric when every group of the same shape runs its collective
 * at the same time (as all data-parallel groups do). For each level the group crosses (its members
 * sit in more than one child of that level), the bandwidth a group gets is
 *     k * bw * efficiency / oversubscription
 * where k is the number of members inside one child: a topology-aware collective (NCCL's rails,
 * a hierarchical ring) drives all k members' links at once, while the D/k groups with members in a
 * child of D accelerators share its uplink of D * bw / oversubscription. The flat link returned has the slowest crossed level's bandwidth and the largest
 * crossed latency, so strata_netmodel_cost() on it gives the group's collective time.
 *   aggregate  true for collectives; false for point-to-point flows, which use one link (k = 1).
 *   top_level  receives the outermost level crossed (0 when the group stays on one accelerator,
 *              i + 1 for topo->level[i]); may be NULL.
 * Errors: STRATA_ERR_INVALID_ARG for a malformed group or a group larger than the tree. */
STRATA_API strata_status_t strata_netmodel_group_link(const strata_topo_t *topo,
                                                      const strata_group_t *group,
                                                      const strata_net_eff_t *eff, bool aggregate,
                                                      strata_link_t *out, int *top_level);

/* Point-to-point time of `bytes` over `link`: alpha + bytes * beta. */
STRATA_API double strata_netmodel_p2p(double bytes, const strata_link_t *link);

/* Members of `group`. */
STRATA_API long long strata_group_size(const strata_group_t *group);


/* ---- collectives on a fabric: transfer plans and their cost (src/netmodel/xfer_plan.c, flows.c)
 *
 * A topology-aware algorithm is written once as a transfer plan: every point-to-point transfer of
 * the collective, for every rank, each in a numbered slot. In slot t a rank sends and receives its
 * transfers of slot t; slot t+1 starts when they are done. The communicator executes the transfers
 * of its own rank (comm/algo/topo.c); the cost model prices the whole plan, slot by slot, with
 * every transfer of a slot sharing the links it crosses. So what is predicted is exactly what runs.
 *
 * Data is one vector per rank, cut into per-rank blocks (off/len in elements): after a
 * reduce-scatter, rank b holds the reduction of block b; an allgather starts with rank b holding
 * block b; an allreduce is both. Transfers move element ranges at the same offset from the
 * sender's vector to the receiver's, adding (reduce) or copying. */

typedef enum strata_plan_kind {
    STRATA_PLAN_RING = 0,  /* flat ring in communicator rank order (what a topology-blind ring does) */
    STRATA_PLAN_RING_TREE, /* flat ring in tree order: every unit contiguous */
    STRATA_PLAN_HIER,      /* hierarchical: reduce-scatter inside the lowest level, recurse across
                              the next level on the shards, allgather back; pipelined in segments */
    STRATA_PLAN_HALVING_DOUBLING, /* allreduce: recursive halving then doubling (Rabenseifner) */
    STRATA_PLAN_RECURSIVE_DOUBLING, /* allreduce: log2 n full-vector exchanges */
    STRATA_PLAN_BINOMIAL,  /* bcast / reduce from rank 0 along a binomial tree */
    STRATA_PLAN_KIND_COUNT
} strata_plan_kind_t;

typedef enum strata_plan_phase {
    STRATA_PHASE_REDUCE_SCATTER = 1,
    STRATA_PHASE_ALLGATHER = 2,
    STRATA_PHASE_ALLREDUCE = 3, /* both */
    STRATA_PHASE_BCAST = 4,     /* rank 0's vector to everyone */
    STRATA_PHASE_REDUCE = 5,    /* everyone's vectors combined on rank 0 */
} strata_plan_phase_t;

typedef struct strata_xfer {
    int slot;
    int src, dst;      /* ranks of the fabric */
    size_t off, len;   /* elements */
    bool reduce;       /* the receiver adds (reduce-scatter) instead of copying (allgather) */
} strata_xfer_t;

typedef struct strata_xfer_plan {
    strata_xfer_t *x;
    int n, cap;
    int nslots;        /* slots used by the whole plan (the same on every rank) */
} strata_xfer_plan_t;

/* Which phases a plan kind serves: the rings and "hier" reduce-scatter, allgather and allreduce;
 * halving/recursive doubling allreduce; binomial bcast and reduce. The last three mirror the
 * communicator's flat algorithms of the same names (recursive.c, tree.c) so the model can price
 * them on a fabric; the communicator executes the first three from their plans. */
STRATA_API bool strata_plan_kind_serves(strata_plan_kind_t kind, strata_plan_phase_t phase);

/* "ring", "ring_tree", "hier", "halving_doubling", "recursive_doubling", "binomial"; NULL when out
 * of range. */
STRATA_API const char *strata_plan_kind_name(strata_plan_kind_t kind);

/* Pipelining of the hierarchical plan: every block is cut into `segments` pieces, piece k
 * starting `k * stagger` slots after piece 0, so the levels of the fabric work at once. */
typedef struct strata_pipeline {
    int segments; /* >= 1 */
    int stagger;  /* >= 1 */
} strata_pipeline_t;

/* Builds the plan of `kind` for `phase` on fabric `f`. Blocks are given as pieces: piece k of
 * block b is off[k * n + b], len[k * n + b] (elements), k < the pipeline's segments (one for the
 * rings: then simply off[b], len[b]). `pipe` pipelines the hierarchical plan (NULL: one segment;
 * rings ignore it). `only_rank` >= 0 keeps only the transfers that rank sends or receives (what
 * the communicator executes); -1 keeps all (what the model prices). Pieces of one bin that lie
 * back to back travel as one message (strata_xfer_plan_layout arranges that). Errors:
 * STRATA_ERR_NO_MEMORY, STRATA_ERR_INVALID_ARG. The plan is freed with strata_xfer_plan_free. */
STRATA_API strata_status_t strata_xfer_plan_build(const strata_fabric_t *f, strata_plan_kind_t kind,
                                                  strata_plan_phase_t phase, const size_t *off,
                                                  const size_t *len, const strata_pipeline_t *pipe,
                                                  int only_rank, strata_xfer_plan_t *out);
STRATA_API void strata_xfer_plan_free(strata_xfer_plan_t *p);

/* The layout the plan moves best: blocks of len[b] elements cut into the pipeline's segments
 * (piece k of block b gets len[b] / segments, the first len[b] % segments one more), laid out
 * segment after segment, the blocks of a segment in the order that keeps every ring's bins
 * contiguous, so each ring step is one message per neighbour. Fills off_out / len_out as
 * strata_xfer_plan_build reads them (n * segments entries). An allreduce can use it directly;
 * reduce-scatter and allgather copy between it and the caller's layout. */
STRATA_API strata_status_t strata_xfer_plan_layout(const strata_fabric_t *f, strata_plan_kind_t kind,
                                                   const size_t *len, const strata_pipeline_t *pipe,
                                                   size_t *off_out, size_t *len_out);

/* Seconds for concurrent flows (src -> dst, bytes each) on `f`: each flow crosses its endpoints'
 * unit uplinks up to their common level (capacity size * bw / oversubscription, times the level's
 * efficiency when set) and the sender's and receiver's own link at that level (bw); it gets the
 * smallest fair share along its path; the slowest flow, plus its level's latency, sets the time. */
STRATA_API double strata_netmodel_flows_time(const strata_fabric_t *f, int n, const int *src,
                                             const int *dst, const double *bytes);

/* Predicted seconds of a whole plan. Slot by slot, the slot's transfers share links as in
 * strata_netmodel_flows_time; a transfer starts when both its ends have finished their previous
 * slot (ranks wait for their own messages only, as the communicator does), so the plan's time is
 * the latest finish, not the sum of the slowest transfer of every slot. */
STRATA_API double strata_netmodel_plan_time(const strata_fabric_t *f, const strata_xfer_plan_t *p,
                                            size_t esize);

/* Predicted seconds of allreduce / reduce_scatter / allgather / bcast / reduce (`bytes` as defined
 * at the top) with the plan `kind` on `f`, blocks even; negative when the kind does not serve it. The hierarchical plan is
 * priced over a small grid of pipelines (1..16 segments, staggers 1..4) and the best is returned,
 * with its pipeline in *pipe (may be NULL). The communicator chooses with it; `strata bench`
 * prints it. */
STRATA_API double strata_netmodel_fabric_cost(const strata_fabric_t *f, strata_coll_t coll,
                                              strata_plan_kind_t kind, double bytes, size_t esize,
                                              strata_pipeline_t *pipe);

#ifdef __cplusplus
}
#endif
#endif
