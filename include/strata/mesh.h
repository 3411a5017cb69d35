/* The device mesh: a job of N ranks as a grid of named dimensions tp x cp x pp x dp (tensor,
 * context, pipeline and data parallelism), each dimension a sub-communicator, mapped onto the
 * fabric by the shared cost model. Part of parallel (src/parallel/mesh.c). docs/parallel.md, "The
 * device mesh", explains it for users.
 *
 * Rank layout. An order o0 (innermost), o1, o2, o3 of the four dimensions numbers the ranks:
 *
 *     world rank = c_o0 + s_o0 * (c_o1 + s_o1 * (c_o2 + s_o2 * c_o3))
 *
 * (c_d = the rank's coordinate along d, s_d = d's size), so the innermost dimension's groups are
 * consecutive world ranks, which the placement puts on one host, and the outermost dimension's
 * groups are the farthest apart. A dimension's group of a rank holds the ranks that differ from it
 * only along that dimension; its rank in that group is its coordinate.
 *
 * Mapping. The default order is Llama 3's: tp, cp, pp, dp (TP innermost, on the fastest links).
 * Given each dimension's traffic per step (strata_mesh_traffic_gpt for the GPT), the mesh instead
 * takes the order whose groups cost the least communication time on the job's fabric, as priced by
 * the one pricing module the communicator and the planner use (strata/price.h); an order given by
 * the caller (--order) is used as is.
 *
 * Ownership: a mesh borrows its world communicator (destroy the mesh first) and owns its
 * sub-communicators. Thread-safety: as its communicators (one thread at a time); the pure functions
 * (traffic, pricing, choosing) read only their arguments.
 */
#ifndef STRATA_MESH_H
#define STRATA_MESH_H

#include <stdbool.h>
#include <stdio.h>

#include "strata/comm.h"
#include "strata/model.h"
#include "strata/netmodel.h"
#include "strata/status.h"
#include "strata/topo.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct strata_mesh strata_mesh_t;

/* ---- traffic: what each dimension's groups carry per training step --------------------------- */

/* A further kind of call a dimension's groups make (e.g. the all-gather half of ZeRO-2). */
typedef struct strata_mesh_call {
    strata_coll_t coll;
    double bytes; /* per call, per rank, sized as netmodel.h defines per collective */
    double calls; /* per step; 0 = none */
} strata_mesh_call_t;

#define STRATA_MESH_MORE_CALLS 2

/* Per dimension: its main call (coll or, with p2p, point-to-point sends to the next member of its
 * group, every member at once: the pipeline's hops), `calls` of `bytes` each per step, plus up to
 * STRATA_MESH_MORE_CALLS further collectives. All zero: no traffic (the default order is kept). */
typedef struct strata_mesh_traffic {
    strata_coll_t coll[STRATA_DIM_COUNT]; /* allreduce / allgather / reduce_scatter ... */
    bool p2p[STRATA_DIM_COUNT];           /* true: point-to-point sends between neighbours (pp) */
    double bytes[STRATA_DIM_COUNT];       /* bytes per call, per rank */
    double calls[STRATA_DIM_COUNT];       /* calls per step */
    strata_mesh_call_t more[STRATA_DIM_COUNT][STRATA_MESH_MORE_CALLS];
} strata_mesh_traffic_t;

/* The traffic of one training step of the GPT `m` (one micro-batch of `rows` rows of `seq` tokens
 * per data-parallel rank; strata trains without gradient accumulation), in float32 (F = 4 bytes),
 * with T = rows * seq tokens, C = d_model, L = n_layer, t = size[tp], p = size[pp], P =
 * strata_gpt_config_nparams(m), X = T * C * F (one activation of the micro-batch):
 *
 *   tp  Megatron-LM: per layer 2 all-reduces forward (after the attention output projection and
 *       after the MLP's second GEMM) and 2 backward (the input gradients of QKV and of fc1), plus
 *       the vocabulary-parallel embedding (an all-reduce of its output forward) and tied head (an
 *       all-reduce of its input gradient backward): 4L + 2 all-reduces of X; and the
 *       vocabulary-parallel cross-entropy: 3 all-reduces of T * F (max, sum of exponentials,
 *       target logit). With `sp` (sequence parallelism) each all-reduce of X becomes an all-gather
 *       and a reduce-scatter of X: 4L + 2 of each.
 *   cp  as the planner prices it: per layer an all-gather of the keys and values of the whole
 *       sequence for this rank's heads forward, a reduce-scatter of their gradients backward:
 *       L of each, of T * 2C / t * F.
 *   pp  point-to-point: the activation forward and its gradient backward between neighbouring
 *       stages: 2 sends of X (the tied embedding's gradient between the first and last stage is
 *       not counted).
 *   dp  the gradients of this rank's parameter share, G = P / (t * p) * F, reduced once per step
 *       (priced as one call: bucketing changes only the latency terms), by ZeRO stage `zero`:
 *       0: all-reduce of G;  1: all-reduce of G + all-gather of G (the parameters after the
 *       optimizer step on the shards);  2: reduce-scatter of G + all-gather of G;
 *       3: reduce-scatter of G + 2 all-gathers of G (the parameters gathered for the forward and
 *       again for the backward).
 * A dimension of size 1 gets no traffic (dp 0, the ranks left over, counts as more than 1).
 * Sizes below 1 count as 1 and a `zero` outside 0-3 as 0, so the function cannot fail;
 * strata_mesh_create refuses such sizes. */
STRATA_API void strata_mesh_traffic_gpt(const strata_gpt_config_t *m, int rows, int seq,
                                        const int size[STRATA_DIM_COUNT], bool sp, int zero,
                                        strata_mesh_traffic_t *out);

/* ---- choosing the order (pure: no ranks) ----------------------------------------------------- */

/* The Llama 3 order: tp, cp, pp, dp. */
STRATA_API void strata_mesh_default_order(strata_dim_t order[STRATA_DIM_COUNT]);

/* Prices `order` on fabric `f` (f->nranks ranks, the product of `size`; a 0 for dp = the ranks
 * left over). For every dimension of size > 1, each of its groups is cut from the fabric
 * (strata_fabric_subset, members in coordinate order) and priced (strata_price_shape_fabric with
 * efficiency 1 and the shared-memory link's reduction cost, as the communicator prices; then
 * strata_price_coll with the communicator's plain offer for collectives, strata_price_p2p for p2p)
 * at its calls x bytes; seconds[d] receives the slowest group's total, span[d] the outermost fabric
 * level its groups cross (strata_price_shape_t.top: 0 = inside one unit of level 0, a host; -1 for
 * a dimension of size 1). Either output may be NULL. `tr` may be NULL (no traffic). Cost: every
 * rank appears once per dimension, each group priced in O(n log n x levels). Errors:
 * STRATA_ERR_INVALID_ARG for a bad order, sizes that do not make f->nranks or a malformed traffic
 * (collective out of range, negative or non-finite bytes or calls), naming it; those of pricing. */
STRATA_API strata_status_t strata_mesh_price_order(const strata_fabric_t *f,
                                                   const int size[STRATA_DIM_COUNT],
                                                   const strata_mesh_traffic_t *tr,
                                                   const strata_dim_t order[STRATA_DIM_COUNT],
                                                   double seconds[STRATA_DIM_COUNT],
                                                   int span[STRATA_DIM_COUNT]);

/* The order that minimises the step's communication seconds (the sum over dimensions of
 * strata_mesh_price_order's seconds) on fabric `f`, over every permutation of the dimensions of
 * size > 1; dimensions of size 1 keep their default slots, and ties (within 1e-9 relative) keep the
 * default order. seconds[d] receives each dimension's predicted seconds per step under the chosen
 * order (may be NULL). Errors: those of strata_mesh_price_order. */
STRATA_API strata_status_t strata_mesh_choose_order(const strata_fabric_t *f,
                                                    const int size[STRATA_DIM_COUNT],
                                                    const strata_mesh_traffic_t *tr,
                                                    strata_dim_t order[STRATA_DIM_COUNT],
                                                    double seconds[STRATA_DIM_COUNT]);

/* Writes, for an order on fabric `f`, what strata_mesh_describe lists per dimension: for each
 * dimension of size > 1, "<dim>=<size> inside <level 0's name>" when its groups stay inside one
 * host, else "across <name>" with the name of the outermost level whose units its members differ
 * in, then " (<seconds> ms/step)" when `tr` carries any traffic; comma-separated, no newline, e.g.
 * "tp=2 inside host (0.8 ms/step), dp=4 across rack (12.1 ms/step)"; "one rank" when every size
 * is 1. Errors: those of strata_mesh_price_order (nothing written). */
STRATA_API strata_status_t strata_mesh_describe_order(const strata_fabric_t *f,
                                                      const int size[STRATA_DIM_COUNT],
                                                      const strata_mesh_traffic_t *tr,
                                                      const strata_dim_t order[STRATA_DIM_COUNT],
                                                      FILE *out);

/* ---- the mesh -------------------------------------------------------------------------------- */

typedef struct strata_mesh_config {
    int size[STRATA_DIM_COUNT];           /* tp, cp, pp, dp; a 0 for dp = the ranks left over */
    bool order_given;                     /* --order: use `order` as is */
    strata_dim_t order[STRATA_DIM_COUNT]; /* innermost first */
    strata_mesh_traffic_t traffic;        /* to choose the order when not given (all zero: default
                                             order) */
} strata_mesh_config_t;

/* All sizes 1, dp 0 (every rank data-parallel), the default order, no traffic. */
STRATA_API strata_mesh_config_t strata_mesh_config_default(void);

/* Builds the mesh over `world` (collective over it: every rank passes the same config). Sizes are
 * resolved (dp 0 = world size / (tp x cp x pp)), the order taken as given, else chosen by
 * strata_mesh_choose_order on strata_comm_fabric(world) when the traffic is not all zero, else the
 * default; then every dimension's groups, the dp x cp group and the embedding group are split from
 * `world`. On failure *out is NULL and nothing leaks. Errors: STRATA_ERR_INVALID_ARG with a message
 * naming the dimension and the constraint: a size below 1 (dp below 0), a product that does not
 * divide the world ("mesh: tp 3 x cp 1 x pp 1 does not divide 8 ranks") or, with dp given, does
 * not equal it, a repeated or unknown dimension in the order, a malformed traffic; a failed split
 * returns its error with the message naming the group ("mesh: forming the pp groups: ..."). */
STRATA_API strata_status_t strata_mesh_create(strata_comm_t *world, const strata_mesh_config_t *cfg,
                                              strata_mesh_t **out);

/* Destroys the sub-communicators and the mesh (not the world). NULL is a no-op. */
STRATA_API void strata_mesh_destroy(strata_mesh_t *m);

/* Size of dimension d (dp resolved), and this rank's coordinate along it; 0 for d out of range. */
STRATA_API int strata_mesh_size(const strata_mesh_t *m, strata_dim_t d);
STRATA_API int strata_mesh_coord(const strata_mesh_t *m, strata_dim_t d);

/* The world rank at coordinates coord[tp, cp, pp, dp] (the rank layout above); -1 when a
 * coordinate is out of range. For finding a neighbour stage or a peer along any dimension. */
STRATA_API int strata_mesh_rank_of(const strata_mesh_t *m, const int coord[STRATA_DIM_COUNT]);

/* This rank's group along d: the ranks that differ from it only along d, ranked by their
 * coordinate (so strata_comm_rank() of it is strata_mesh_coord(m, d)). Size-1 groups too. Owned by
 * the mesh; NULL for d out of range. */
STRATA_API strata_comm_t *strata_mesh_comm(const strata_mesh_t *m, strata_dim_t d);

/* The dp x cp group ZeRO shards over: the ranks that differ from this one only along dp and cp,
 * ranked by world rank (the inner of the two dimensions varies fastest). Owned by the mesh. */
STRATA_API strata_comm_t *strata_mesh_dp_cp_comm(const strata_mesh_t *m);

/* The tied embedding's group: the first and the last pipeline stage with this rank's tp, cp and dp
 * coordinates (rank 0 = the first stage). NULL when pp == 1 or this rank is on neither stage.
 * Owned by the mesh. */
STRATA_API strata_comm_t *strata_mesh_embed_comm(const strata_mesh_t *m);

/* The order the ranks are laid out in, innermost first (STRATA_DIM_COUNT entries). */
STRATA_API const strata_dim_t *strata_mesh_order(const strata_mesh_t *m);

/* The predicted communication seconds per step of dimension d's traffic under the mesh's order
 * (strata_mesh_price_order on the world's fabric; 0 without traffic or for a size-1 dimension). */
STRATA_API double strata_mesh_seconds(const strata_mesh_t *m, strata_dim_t d);

/* Writes one line: "mesh: " + strata_mesh_describe_order's list + "; order tp,cp,pp,dp (given |
 * chosen by the cost model | default)" + newline; e.g.
 * "mesh: tp=2 inside host (0.8 ms/step), dp=4 across rack (12.1 ms/step); order tp,cp,pp,dp
 * (chosen by the cost model)". */
STRATA_API void strata_mesh_describe(const strata_mesh_t *m, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
