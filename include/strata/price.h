/* The price of a collective: one answer to "which algorithm, how long, over which levels", asked by
 * the communicator (to choose its algorithm), the planner (to predict a step) and the placer (to
 * score a placement), so the three agree by construction. Part of netmodel (src/netmodel/shape.c,
 * price.c).
 *
 * Two steps. A group of ranks on the fabric is first reduced to its SHAPE: for every level of the
 * tree, how many children of one unit it occupies and its fewest members in one, the speed of the
 * level's links as a member sees them, and where the edges of its rings and butterflies meet. A
 * shape depends on the group and the fabric, never on a size. Then every algorithm the
 * communicator has is priced on the shape as LINES, seconds = alpha + beta * bytes (one line, or
 * one per pipeline depth for the hierarchical algorithm); at a given size the cheapest line of the
 * offered algorithms wins. Ties go to the lower strata_algo_t.
 *
 * The link model. A member has its own link at every level (bw x efficiency). A child unit holding
 * m members of the group has an uplink into its parent level of m x bw x efficiency /
 * oversubscription: every group of the same shape runs at the same time and fills the units it
 * spans alike, as the data-parallel groups of a job do; the flows that leave the child share it.
 * A flow whose ends meet at level L runs at the smallest share on its way: its own link at L and
 * the uplink of every unit it leaves below L. A step of an algorithm costs its largest latency
 * plus its bytes at its slowest flow's rate; reducing a byte costs gamma. Efficiency: a level's
 * own `efficiency` when set, else the caller's per class (strata_net_eff_t), else 1.
 *
 * What each algorithm is priced as (n members, B bytes, "top" = the outermost level crossed):
 *   ring, ring_tree   2(n-1) ring steps of B/n for allreduce, n-1 for reduce_scatter/allgather, the
 *                     ring in rank order or in tree order; ring_tree only where they can differ
 *   hier              per crossed level l: a ring among the children of a unit (units_max of them)
 *                     on the member's shard B / members_min, every member sending at once;
 *                     reduce-scatter up, allgather down; pipelined in 1..16 segments: the levels
 *                     overlap, the busiest level's links set the pace (one line per depth)
 *   halving_doubling  log2 steps each way, the step to partner rank^d at the level those pairs
 *                     meet, B/2 .. B/p bytes; ranks beyond a power of two fold in and out
 *   recursive_doubling allreduce: the same exchanges with the full vector; allgather (Bruck): shifts
 *                     of 1, 2, 4 .. blocks, which cross the top level
 *   binomial          bcast / reduce: ceil(log2 n) steps of B, step k at the level of partner rank^2^k
 *   scatter_allgather, reduce_scatter_gather, pairwise, linear, dissemination: their flat formulas
 *                     with the top level's latency and all-members rate (ring parts on the ring)
 *   direct            one host only (top level 0): (n-1+log2 n) latencies, one copy per byte
 *   torus             allreduce on members that fill a torus (topo.h): per dimension of size D,
 *                     in order, a ring reduce-scatter of D-1 steps on the shard left by the
 *                     dimensions before (1 / their product), then the allgathers in reverse;
 *                     each step moves shard / D at the level's all-members rate, half each way
 *                     round (both at that rate) on a torus dimension of 3 or more. The flat
 *                     rings on a torus are priced as on a switch: a hop between cells that are
 *                     not neighbours is routed over several links but priced as one
 *   pool              allreduce through N pool nodes (strata_price_shape_pool; none: no line)
 *                     that sit beside the members, as a switch's memory would: the members but
 *                     the first write B to a node each (at a member's own link; a node's link
 *                     takes ceil((n-1)/N) of them), one latency to gather at the first member,
 *                     then the chain, pipelined by packets: B through n-1 hops (one node's share
 *                     of the hops reduced per byte) while the last sends the result and every
 *                     member receives B. The pace is the busiest of a member's link, the last
 *                     node's (n copies; by multicast one) and a unit's uplink at the top level
 *                     (the chain crosses it once; n - members_min copies leave the last node's
 *                     unit, by multicast one)
 * On a group with one link (strata_price_shape_flat) every line is the textbook alpha-beta-gamma
 * cost (Thakur, Rabenseifner & Gropp 2005). tests/unit/test_price.c checks hand-computed lines and
 * keeps ring, ring_tree, hier and halving_doubling near the flow-level simulation of their transfer
 * plans (strata_netmodel_fabric_cost in netmodel.h).
 *
 * Groups arrive however the caller holds them:
 *   strata_price_shape_fabric   the communicator's fabric (strata_fabric_t, members in rank order)
 *   strata_price_shape_units    each member's unit id at every level (the placer's host list)
 *   strata_price_shape_group    a strided group of a layout on a regular tree (the planner)
 *   strata_price_shape_flat     n ranks on one link (a communicator that knows no fabric)
 * and strata_price_group_table() gives a strided group's table in one call, memoised per thread,
 * for searches that price millions of configurations (`strata plan search`).
 *
 * Thread-safety: everything reads only its arguments, except the per-thread memo of
 * strata_price_group_table(), which never changes an answer.
 */
#ifndef STRATA_PRICE_H
#define STRATA_PRICE_H

#include "strata/netmodel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- shapes ------------------------------------------------------------------------------------ */

/* One level of the tree as the members of a group see it. */
typedef struct strata_price_level {
    double latency_s;   /* a message between two members meeting at this level */
    double link_Bps;    /* a member's own link at this level: bw x efficiency */
    double uplink_Bps;  /* per member, its child's uplink into this level when every member of the
                           child sends: bw x efficiency / oversubscription (level 0: link_Bps) */
    double all_Bps;     /* one flow per member, all at once, meeting at this level: the least of
                           link_Bps here and uplink_Bps here and at every level below */
    int units_max;      /* most children of one unit of this level that hold members (level 0:
                           members on one host); 2 or more: the group crosses this level */
    int members_min;    /* fewest members in a child of this level that holds any (level 0: 1) */
    int link_class;     /* strata_link_class_t: a member's own links of one class are one link
                           (its NIC serves every scale-out level) when levels work at once */
} strata_price_level_t;

/* One step of a ring: every member sends to the next at once. */
typedef struct strata_price_ring {
    double latency_s; /* the largest latency among its edges */
    double rate_Bps;  /* the slowest edge's rate */
    int level;        /* the level that edge meets at */
} strata_price_ring_t;

#define STRATA_PRICE_MAX_STEPS 31

/* One dimension of the multi-dimensional ring on a torus. */
typedef struct strata_price_torus_dim {
    int size;  /* members along it */
    int level; /* the level its rings meet at: the torus level, or below it for the ranks of one
                  child (which share one link, so going both ways round gains nothing there) */
    bool both_ways; /* a torus dimension of 3 or more: each member has a link to either neighbour
                       and half the data goes each way round, both at the level's rate */
} strata_price_torus_dim_t;

typedef struct strata_price_shape {
    int n;                /* members */
    int nlevels;          /* levels of the tree */
    int top;              /* outermost level the group crosses; -1 when n <= 1 */
    int ncrossed;         /* levels it crosses; with fewer than 2, ring_tree and hier are a ring */
    double gamma_s_per_b; /* seconds per byte reduced */
    strata_price_level_t level[STRATA_TOPO_MAX_LEVELS];
    strata_price_ring_t ring; /* in rank order */
    strata_price_ring_t tree; /* in tree order (strata_fabric_tree_order) */
    int hop_level;            /* outermost level between consecutive members (a pipeline's hops);
                                 -1 when n <= 1 */
    int nxor;                 /* log2 of the largest power of two p <= n */
    int xor_level[STRATA_PRICE_MAX_STEPS]; /* [k]: the outermost level at which members r and
                                              r ^ 2^k (both < p) meet */
    int fold_level;           /* the same for members p + i and i (i < n - p); -1 when n = p */
    int torus_ndims;          /* dimensions of the multi-dimensional ring when the members fill a
                                 torus (strata_fabric_torus), innermost first; 0 when they do not */
    strata_price_torus_dim_t torus_dim[STRATA_TORUS_MAX_DIMS + 1];
    int pool_nodes;           /* pool nodes an allreduce may run through (strata_price_shape_pool);
                                 0: none, and the pool algorithm has no line */
    double pool_Bps;          /* a pool node's link, each direction */
    double pool_latency_s;    /* a packet between a member and a pool node, or two pool nodes */
    bool pool_multicast;      /* the result leaves the last node once (IP multicast), not n times */
} strata_price_shape_t;

/* The shape of the ranks of fabric `f` (all of them, in rank order), for ranks whose collectives
 * reach `eff` (NULL: efficiency 1, gamma 0). Errors: STRATA_ERR_INVALID_ARG for an empty fabric,
 * STRATA_ERR_NO_MEMORY. Linear in ranks x levels, plus n log n for a rank order that is not the
 * tree order and n log n x levels for the butterflies. */
STRATA_API strata_status_t strata_price_shape_fabric(const strata_fabric_t *f,
                                                     const strata_net_eff_t *eff,
                                                     strata_price_shape_t *out);

/* The shape of `n` members given as their unit at every level of `levels`:
 * units[r * levels->nlevels + l] identifies member r's unit at level l (any int >= 0; equal ids
 * at a level are the same unit; the outermost level is taken as one unit whatever it says). This
 * is how a host list arrives: each member's host's domain per level. Errors: those of
 * strata_price_shape_fabric, and STRATA_ERR_INVALID_ARG for a negative id. */
STRATA_API strata_status_t strata_price_shape_units(const strata_topo_t *levels, int n,
                                                    const int *units, const strata_net_eff_t *eff,
                                                    strata_price_shape_t *out);

/* The shape of the strided group `g` on the regular tree `topo` (accelerators numbered by packing
 * the tree, topo.h), members in the group's order. Errors: STRATA_ERR_INVALID_ARG for a malformed
 * group (0 to 4 dimensions of size >= 1 and stride >= 1, at most 2^24 members, distinct members)
 * or one that does not fit the tree; STRATA_ERR_NO_MEMORY. */
STRATA_API strata_status_t strata_price_shape_group(const strata_topo_t *topo,
                                                    const strata_group_t *g,
                                                    const strata_net_eff_t *eff,
                                                    strata_price_shape_t *out);

/* The shape of `n` ranks that all meet on one `link` (its gamma included): what a communicator
 * prices with before it knows its fabric. */
STRATA_API void strata_price_shape_flat(int n, const strata_link_t *link, strata_price_shape_t *out);

/* Gives shape `s` a pool of `nodes` nodes, each with a `link_Bps` link and `latency_s` away from
 * the members and from each other, sending results by multicast or not (the communicator does,
 * with STRATA_POOL_NODES and STRATA_POOL_MULTICAST; docs/pool.md). */
STRATA_API void strata_price_shape_pool(strata_price_shape_t *s, int nodes, double link_Bps,
                                        double latency_s, bool multicast);

/* ---- prices ------------------------------------------------------------------------------------ */

/* seconds = alpha_s + beta_s_per_b * bytes, running with `pipe` (hier; {1, 1} for the others). */
typedef struct strata_price_line {
    double alpha_s;
    double beta_s_per_b;
    strata_xfer_pipe_t pipe;
} strata_price_line_t;

#define STRATA_PRICE_MAX_LINES  5  /* of one algorithm */
#define STRATA_PRICE_TABLE_LINES 16 /* of all the algorithms of one collective */

/* Every line of every algorithm of one collective on one shape: what a caller keeps to price many
 * sizes (the communicator keeps one per collective). Algorithm a has nlines[a] lines from
 * line[first[a]]; none: it does not serve the collective on this shape. */
typedef struct strata_price_table {
    strata_coll_t coll;
    int top;                  /* the shape's top level */
    strata_price_line_t hop;  /* the pipeline hops (strata_price_p2p), the same in every table */
    unsigned char first[STRATA_ALGO_COUNT], nlines[STRATA_ALGO_COUNT];
    strata_price_line_t line[STRATA_PRICE_TABLE_LINES];
} strata_price_table_t;

/* A price: the algorithm, its seconds and pipeline, the group's top level, and where the time goes. */
typedef struct strata_price {
    strata_algo_t algo;     /* STRATA_ALGO_COUNT when nothing moves (one member) */
    double seconds;
    strata_xfer_pipe_t pipe; /* segments and stagger the hierarchical algorithm runs with */
    int top_level;          /* outermost level the group crosses, -1 for one member */
    double level_s[STRATA_TOPO_MAX_LEVELS]; /* seconds spent at each level (reductions count
                                               where their step meets); sum to seconds; filled
                                               by strata_price_coll and strata_price_algo only */
} strata_price_t;

/* Offers: a bit per strata_algo_t that the caller may run. */
#define STRATA_PRICE_OFFER(algo) (1u << (algo))
#define STRATA_PRICE_OFFER_ALL   ((1u << STRATA_ALGO_COUNT) - 1)
/* What a communicator offers an even call in ordinary memory: all but direct, which it takes only
 * for strata_mem_alloc buffers (docs/comm.md). The planner predicts with this offer. */
#define STRATA_PRICE_OFFER_PLAIN (STRATA_PRICE_OFFER_ALL & ~STRATA_PRICE_OFFER(STRATA_ALGO_DIRECT))

/* The catalogue: whether the communicator has `algo` for `coll` at all. */
STRATA_API bool strata_price_serves(strata_coll_t coll, strata_algo_t algo);

/* Fills every algorithm's lines of `coll` on shape `s`. */
STRATA_API void strata_price_table(const strata_price_shape_t *s, strata_coll_t coll,
                                   strata_price_table_t *out);

/* The cheapest of algorithm `algo`'s lines on `t` at `bytes`: its seconds (negative when it has
 * none) and, when `line` is not NULL, the line (its pipeline). */
STRATA_API double strata_price_table_algo(const strata_price_table_t *t, strata_algo_t algo,
                                          double bytes, strata_price_line_t *line);

/* The cheapest offered algorithm on `t` at `bytes` into *out (all but level_s, zeroed); returns
 * its seconds, or a negative value with out->algo = STRATA_ALGO_COUNT when the offer leaves no
 * algorithm. A table of a one-member shape costs 0 with out->algo = STRATA_ALGO_COUNT. */
STRATA_API double strata_price_table_choose(const strata_price_table_t *t, double bytes,
                                            unsigned offer, strata_price_t *out);

/* Table, choice and breakdown in one call. Errors: STRATA_ERR_INVALID_ARG for a collective out of
 * range or an offer that serves nothing. */
STRATA_API strata_status_t strata_price_coll(const strata_price_shape_t *s, strata_coll_t coll,
                                             double bytes, unsigned offer, strata_price_t *out);

/* One algorithm (the cheapest of its lines), with breakdown. Errors: STRATA_ERR_UNSUPPORTED when
 * it does not serve `coll` on this shape. */
STRATA_API strata_status_t strata_price_algo(const strata_price_shape_t *s, strata_coll_t coll,
                                             strata_algo_t algo, double bytes,
                                             strata_price_t *out);

/* Seconds for `bytes` between consecutive members when every member sends at once (the hops of
 * a pipeline): the slowest hop's latency plus bytes at its level's all-members rate, evaluated
 * from the hop line of the shape's tables. 0 when bytes <= 0 or n <= 1. */
STRATA_API double strata_price_p2p(const strata_price_shape_t *s, double bytes);

/* The same from a table's hop line. */
STRATA_API double strata_price_table_p2p(const strata_price_table_t *t, double bytes);

/* The planner's hot path: the table of `coll` for strided group `g` of `topo` with efficiencies
 * `eff`, as strata_price_shape_group then strata_price_table would give it. Shapes and tables are
 * memoised per thread, keyed by the tree's levels, `eff` and `g`, so a group seen before costs a
 * lookup and a copy. Errors: those of strata_price_shape_group; STRATA_ERR_INVALID_ARG for a
 * collective out of range. */
STRATA_API strata_status_t strata_price_group_table(const strata_topo_t *topo,
                                                    const strata_group_t *g,
                                                    const strata_net_eff_t *eff,
                                                    strata_coll_t coll, strata_price_table_t *out);

#ifdef __cplusplus
}
#endif
#endif
