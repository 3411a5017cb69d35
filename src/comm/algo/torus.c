/* The multi-dimensional ring allreduce for ranks that fill a torus (strata_fabric_torus in
 * strata/topo.h): a reduce-scatter along each dimension of the grid in turn, each on the shard the
 * dimensions before it left, then the allgathers back in reverse order. Every ring runs between
 * neighbours of the torus, and on a dimension of 3 or more half of every block goes each way
 * round, so a rank keeps both of its links in that dimension busy in both directions. It sends as
 * many bytes as one flat ring (1 - 1/n of the vector each way) in sum(D - 1) steps instead of
 * n - 1. It declines (supports() false) on any other fabric; the price is in src/netmodel/price.c.
 *
 * Blocks: the vector is cut into one block per cell of the grid (st_blocks_even), block b holding
 * the cell whose coordinates, read with dimension 0 most significant, are b. So after the
 * reduce-scatter along dimensions 0..d-1 a rank holds the contiguous range of blocks that start
 * with its own first d coordinates, and dimension d's ring splits that range into D parts:
 *
 *   2x3 grid, rank at (1, 2):  dim 0 ring over {(0,2), (1,2)}: keeps blocks 3..5 (first coord 1)
 *                              dim 1 ring over {(1,0), (1,1), (1,2)}: keeps block 5 (= 1*3 + 2)
 *   then allgather along dim 1 (blocks 3..5), then along dim 0 (blocks 0..5).
 */
#include "base/base.h"
#include "comm/algo/algo.h"

static bool fills_torus(const st_coll_args_t *a)
{
    return a->topo && a->topo->fabric.nranks == a->nranks && a->topo->torus.ndims > 0;
}

typedef struct grid {
    strata_torus_grid_t g;
    int *cell, *rank_at; /* rank -> cell, cell -> rank */
    int coord[STRATA_TORUS_MAX_DIMS + 1];
    size_t *edge;        /* byte offset of block b, edge[ncells] = the vector's bytes */
} grid_t;

/* One dimension's ring: this rank's neighbours along dimension d, and the D parts of the range of
 * blocks [lo, lo + span) as byte offsets: whole in off[0]/len[0], or, going both ways round, part
 * j's first half there (clockwise) and its second half in off[1]/len[1] at the counter-clockwise
 * ring's position of j. The four arrays hold D entries each. */
typedef struct dim_ring {
    st_ring_t cw, ccw;
    bool both;
    size_t *off[2], *len[2];
} dim_ring_t;

static void dim_ring(const grid_t *gr, int d, int lo, int span, size_t esize, dim_ring_t *r)
{
    const int D = gr->g.dims[d], pos = gr->coord[d];
    int stride = 1, here = 0; // cells between neighbours along d (dims[0] fastest); this cell
    for (int i = 0; i < d; i++)
        stride *= gr->g.dims[i];
    for (int i = gr->g.ndims - 1; i >= 0; i--)
        here = here * gr->g.dims[i] + gr->coord[i];
    const int base = here - pos * stride;
    const int left = gr->rank_at[base + ((pos + D - 1) % D) * stride];
    const int right = gr->rank_at[base + ((pos + 1) % D) * stride];
    r->cw = (st_ring_t){D, pos, left, right};
    r->ccw = (st_ring_t){D, D - 1 - pos, right, left};
    r->both = D >= 3 && !(gr->g.inner && d == 0); // the ranks of one host share one link
    const int part = span / D;
    for (int j = 0; j < D; j++) {
        size_t a = gr->edge[lo + j * part], b = gr->edge[lo + (j + 1) * part];
        size_t half = r->both ? (b - a) / esize / 2 * esize : b - a;
        r->off[0][j] = a;
        r->len[0][j] = half;
        r->off[1][D - 1 - j] = a + half;
        r->len[1][D - 1 - j] = b - a - half;
    }
}

/* Adds dimension d's reduce-scatter (rs) or allgather steps, both ways round at once. */
static void dim_steps(st_sched_t *s, const dim_ring_t *r, bool rs, const char *in, char *work,
                      uint32_t tag)
{
    const uint32_t other = (uint32_t)(r->cw.n - 1); // the counter-clockwise ring's tags follow
    for (int step = 0; step < r->cw.n - 1; step++) {
        for (int w = 0; w < 1 + r->both; w++) {
            const st_ring_t *ring = w ? &r->ccw : &r->cw;
            uint32_t t = tag + (uint32_t)step + (w ? other : 0);
            if (rs)
                st_ring_rs_step(s, ring, step, in, work, r->off[w], r->len[w], t);
            else
                st_ring_ag_step(s, ring, step, work, work + r->off[w][ring->pos], r->off[w],
                                r->len[w], t);
        }
        st_sched_round(s);
    }
}

static strata_status_t allreduce_torus(st_sched_t *s, const st_coll_args_t *a)
{
    const int n = a->nranks;
    grid_t gr;
    gr.cell = st_sched_scratch(s, 2 * (size_t)n * sizeof(int));
    gr.edge = st_sched_scratch(s, (6 * (size_t)n + 1) * sizeof(size_t));
    if (!gr.cell || !gr.edge)
        return s->build_rc;
    gr.rank_at = gr.cell + n;
    if (!strata_fabric_torus(&a->topo->fabric, &gr.g, gr.cell))
        return st_error(STRATA_ERR_INTERNAL, "torus allreduce on ranks that fill no torus");
    for (int r = 0; r < n; r++)
        gr.rank_at[gr.cell[r]] = r;
    for (int d = 0, c = gr.cell[a->rank]; d < gr.g.ndims; d++) {
        gr.coord[d] = c % gr.g.dims[d];
        c /= gr.g.dims[d];
    }
    size_t *len = gr.edge + n + 1; // st_blocks_even's lengths, then the rings' parts
    st_blocks_even(a->count, n, a->esize, gr.edge, len);
    gr.edge[n] = a->count * a->esize;
    dim_ring_t r = {.off = {len, len + n}, .len = {len + 2 * n, len + 3 * n}};

    // The range of blocks dimension d's ring splits: [lo[d], lo[d] + span[d]).
    int lo[STRATA_TORUS_MAX_DIMS + 1], span[STRATA_TORUS_MAX_DIMS + 1];
    for (int d = 0; d < gr.g.ndims; d++) {
        span[d] = d ? span[d - 1] / gr.g.dims[d - 1] : n;
        lo[d] = d ? lo[d - 1] + gr.coord[d - 1] * span[d] : 0;
    }
    char *work = a->recvbuf;
    uint32_t tag = 0;
    for (int d = 0; d < gr.g.ndims; d++) { // reduce-scatter, dimension 0 first
        dim_ring(&gr, d, lo[d], span[d], a->esize, &r);
        dim_steps(s, &r, true, d ? work : a->sendbuf, work, tag);
        tag += 2 * (uint32_t)(r.cw.n - 1);
    }
    for (int d = gr.g.ndims - 1; d >= 0; d--) { // allgather back, the last dimension first
        dim_ring(&gr, d, lo[d], span[d], a->esize, &r);
        dim_steps(s, &r, false, NULL, work, tag);
        tag += 2 * (uint32_t)(r.cw.n - 1);
    }
    return s->build_rc;
}

const st_algo_t st_algo_allreduce_torus = {
    "torus",
    "multi-dimensional ring on a torus fabric: reduce-scatter along each dimension, allgather back",
    STRATA_COLL_ALLREDUCE, STRATA_ALGO_TORUS, fills_torus, allreduce_torus};
