/* The network model: what the communicator, the planner and the placer share about a network.
 *
 * This header holds the kinds the three share (collectives, parallel dimensions, algorithms), the
 * links of a flat network, groups of accelerators laid out on the fabric tree, and the transfer
 * plans of the topology-aware collectives with their flow-level simulation. The PRICE of a
 * collective, which all three ask for, is in strata/price.h; a part that needs a price includes
 * that. Sizes in bytes are as defined per collective:
 *   allreduce, reduce, bcast:   the full vector each rank holds
 *   reduce_scatter, allgather:  the full (nranks-block) vector
 *   alltoall, gather, scatter:  the full vector one rank sends/holds (nranks blocks)
 *   barrier:                    ignored
 */
#ifndef STRATA_NETMODEL_H
#define STRATA_NETMODEL_H

#include "strata/status.h"
#include "strata/topo.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- kinds shared by comm, plan and sched (src/netmodel/kinds.c) ------------------------------ */

typedef enum strata_coll {
    STRATA_COLL_ALLREDUCE = 0,
    STRATA_COLL_REDUCE,
    STRATA_COLL_BCAST,
    STRATA_COLL_REDUCE_SCATTER,
    STRATA_COLL_ALLGATHER,
    STRATA_COLL_ALLTOALL,
    STRATA_COLL_GATHER,
    STRATA_COLL_SCATTER,
    STRATA_COLL_BARRIER,
    STRATA_COLL_COUNT
} strata_coll_t;

/* "allreduce", "reduce_scatter", ...; NULL out of range. Parsing is case-insensitive and accepts
 * "broadcast" for bcast; an unknown name is STRATA_ERR_INVALID_ARG with the valid names listed. */
STRATA_API const char *strata_coll_name(strata_coll_t coll);
STRATA_API strata_status_t strata_coll_parse(const char *name, strata_coll_t *out);

/* The dimensions of a parallel layout, as the planner maps them and the placer places them. */
typedef enum strata_dim {
    STRATA_DIM_TP = 0,
    STRATA_DIM_CP,
    STRATA_DIM_PP,
    STRATA_DIM_DP,
    STRATA_DIM_COUNT
} strata_dim_t;

/* "tp", "cp", "pp", "dp"; "?" out of range. */
STRATA_API const char *strata_dim_name(strata_dim_t d);

/* Parses a mapping order "tp,cp,pp,dp" (any permutation, innermost first; ',', '+' or ' '
 * between names). Errors: STRATA_ERR_INVALID_ARG naming what was expected. */
STRATA_API strata_status_t strata_order_parse(const char *s, strata_dim_t order[STRATA_DIM_COUNT]);

/* Every algorithm the communicator has, as the price knows it. Names match the registry in
 * `strata algos`. Which collectives each serves: strata_price_serves() (strata/price.h). */
typedef enum strata_algo {
    STRATA_ALGO_RING = 0,           /* ring in rank order; allreduce = reduce-scatter + allgather */
    STRATA_ALGO_RECURSIVE_DOUBLING, /* log2(n) rounds of full-size exchanges (allgather: Bruck) */
    STRATA_ALGO_HALVING_DOUBLING,   /* Rabenseifner: recursive halving then doubling */
    STRATA_ALGO_BINOMIAL,           /* binomial tree */
    STRATA_ALGO_SCATTER_ALLGATHER,  /* bcast as scatter + ring allgather (van de Geijn) */
    STRATA_ALGO_REDUCE_SCATTER_GATHER, /* reduce as ring reduce-scatter + gather */
    STRATA_ALGO_PAIRWISE,           /* n-1 rounds of pairwise exchange */
    STRATA_ALGO_LINEAR,             /* everyone talks to one rank (or all) at once */
    STRATA_ALGO_DISSEMINATION,      /* barrier in ceil(log2 n) rounds */
    STRATA_ALGO_DIRECT,             /* one host: ranks load/store each other's buffers, so a byte
                                       is copied once, not into a message and out of it */
    STRATA_ALGO_RING_TREE,          /* ring in tree order: every unit of the fabric contiguous */
    STRATA_ALGO_HIER,               /* hierarchical: reduce-scatter inside each level, recurse across
                                       the next on the shards, allgather back; pipelined */
    STRATA_ALGO_TORUS,              /* multi-dimensional ring on a torus: reduce-scatter along each
                                       dimension in turn on shrinking shards, allgather back */
    STRATA_ALGO_POOL,               /* through pool nodes (strata/pool.h): the chain adds every
                                       member's block in flight, the last node sends the result */
    STRATA_ALGO_COUNT
} strata_algo_t;

/* "ring", "hier", ...; "unknown" out of range. */
STRATA_API const char *strata_algo_name(strata_algo_t algo);

/* ---- links (src/netmodel/netmodel.c) ----------------------------------------------------------- */

/* A link: per-message latency alpha (s), inverse bandwidth beta (s/byte), and the cost gamma (s/byte)
 * of reducing a byte locally. */
typedef struct strata_link {
    double alpha_s;        /* latency per message, seconds */
    double beta_s_per_b;   /* seconds per byte = 1 / bandwidth */
    double gamma_s_per_b;  /* seconds per byte reduced locally */
} strata_link_t;

/* Default links: ranks of one host over shared memory, and hosts over TCP (loopback-class). */
STRATA_API strata_link_t strata_link_default_shm(void);
STRATA_API strata_link_t strata_link_default_tcp(void);

/* Levels strata assumes without a cluster file: "host" over shared memory, then `nlevels - 1`
 * levels "tier1".. over TCP (the two links above), oversubscription 1. */
STRATA_API void strata_fabric_default_levels(int nlevels, strata_topo_t *out);

/* ---- groups of a layout on the fabric tree (src/netmodel/shape.c) ---------------------------- */

/* One dimension of a process group laid out on the tree: `size` members whose accelerator numbers
 * differ by `stride` (a tensor-parallel group of 8 has stride 1; a data-parallel group has stride
 * tp*cp*pp under the default mapping). A group may combine dimensions (data x context parallel);
 * its members are numbered innermost dimension first (dim[0] varies fastest), which is the order
 * of their ranks in the communicator that would run the group. */
typedef struct strata_group_dim {
    int size;
    long long stride;
} strata_group_dim_t;

#define STRATA_GROUP_MAX_DIMS 4

typedef struct strata_group {
    int ndims;
    strata_group_dim_t dim[STRATA_GROUP_MAX_DIMS];
} strata_group_t;

/* Members of `group`. */
STRATA_API long long strata_group_size(const strata_group_t *group);

/* What the ranks of a group add to the links: the fraction of a level's bandwidth collectives
 * reach, per link class, for levels whose own `efficiency` is 0; and the seconds a rank needs to
 * reduce one byte. The planner fills it from its calibration and accelerator; a communicator uses
 * 1 and its link's gamma; the placer 1 and 0 (it prices the network alone). */
typedef struct strata_net_eff {
    double eff[STRATA_LINK_CLASS_COUNT]; /* fraction of link bandwidth reached by collectives */
    double gamma_s_per_b;                /* seconds per byte reduced on the accelerator */
} strata_net_eff_t;

/* ---- collectives on a fabric: transfer plans and their simulation (src/netmodel/xfer_plan.c,
 * flows.c)
 *
 * A topology-aware algorithm is written once as a transfer plan: every point-to-point transfer of
 * the collective, for every rank, each in a numbered slot. In slot t a rank sends and receives its
 * transfers of slot t; slot t+1 starts when they are done. The communicator executes the transfers
 * of its own rank (comm/algo/topo.c); the simulation below runs the whole plan, slot by slot, with
 * every transfer of a slot sharing the links it crosses: the flow-level reference the closed-form
 * price (strata/price.h) is checked against.
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
typedef struct strata_xfer_pipe {
    int segments; /* >= 1 */
    int stagger;  /* >= 1 */
} strata_xfer_pipe_t;

/* Builds the plan of `kind` for `phase` on fabric `f`. Blocks are given as pieces: piece k of
 * block b is off[k * n + b], len[k * n + b] (elements), k < the pipeline's segments (one for the
 * rings: then simply off[b], len[b]). `pipe` pipelines the hierarchical plan (NULL: one segment;
 * rings ignore it). `only_rank` >= 0 keeps only the transfers that rank sends or receives (what
 * the communicator executes); -1 keeps all (what the model prices). Pieces of one bin that lie
 * back to back travel as one message (strata_xfer_plan_layout arranges that). Errors:
 * STRATA_ERR_NO_MEMORY, STRATA_ERR_INVALID_ARG. The plan is freed with strata_xfer_plan_free. */
STRATA_API strata_status_t strata_xfer_plan_build(const strata_fabric_t *f, strata_plan_kind_t kind,
                                                  strata_plan_phase_t phase, const size_t *off,
                                                  const size_t *len, const strata_xfer_pipe_t *pipe,
                                                  int only_rank, strata_xfer_plan_t *out);
STRATA_API void strata_xfer_plan_free(strata_xfer_plan_t *p);

/* The layout the plan moves best: blocks of len[b] elements cut into the pipeline's segments
 * (piece k of block b gets len[b] / segments, the first len[b] % segments one more), laid out
 * segment after segment, the blocks of a segment in the order that keeps every ring's bins
 * contiguous, so each ring step is one message per neighbour. Fills off_out / len_out as
 * strata_xfer_plan_build reads them (n * segments entries). An allreduce can use it directly;
 * reduce-scatter and allgather copy between it and the caller's layout. */
STRATA_API strata_status_t strata_xfer_plan_layout(const strata_fabric_t *f, strata_plan_kind_t kind,
                                                   const size_t *len, const strata_xfer_pipe_t *pipe,
                                                   size_t *off_out, size_t *len_out);

/* Seconds for concurrent flows (src -> dst, bytes each) on `f`: each flow crosses its endpoints'
 * unit uplinks up to their common level (capacity size * bw / oversubscription, times the level's
 * efficiency when set) and the sender's and receiver's own link at that level (bw); it gets the
 * smallest fair share along its path; the slowest flow, plus its level's latency, sets the time. */
STRATA_API double strata_netmodel_flows_time(const strata_fabric_t *f, int n, const int *src,
                                             const int *dst, const double *bytes);

/* Simulated seconds of a whole plan. Slot by slot, the slot's transfers share links as in
 * strata_netmodel_flows_time; a transfer starts when both its ends have finished their previous
 * slot (ranks wait for their own messages only, as the communicator does), so the plan's time is
 * the latest finish, not the sum of the slowest transfer of every slot. */
STRATA_API double strata_netmodel_plan_time(const strata_fabric_t *f, const strata_xfer_plan_t *p,
                                            size_t esize);

/* Simulated seconds of allreduce / reduce_scatter / allgather / bcast / reduce (`bytes` as defined
 * at the top) with the plan `kind` on `f`, blocks even; negative when the kind does not serve it.
 * The hierarchical plan is simulated over a small grid of pipelines (1..16 segments, staggers
 * 1..4) and the best is returned, with its pipeline in *pipe (may be NULL). This is the
 * flow-by-flow REFERENCE for the closed-form price (strata/price.h), which is what the
 * communicator chooses with: tests/unit/test_price.c keeps the two within a stated distance. It
 * costs (transfers x concurrent flows): do not call it per operation or per planned
 * configuration. */
STRATA_API double strata_netmodel_fabric_cost(const strata_fabric_t *f, strata_coll_t coll,
                                              strata_plan_kind_t kind, double bytes, size_t esize,
                                              strata_xfer_pipe_t *pipe);

#ifdef __cplusplus
}
#endif
#endif
