/* Transfer plans of the topology-aware collectives (netmodel.h): flat rings in a given rank order
 * and the hierarchical reduce-scatter / allgather / allreduce, for every rank, slot by slot. Pure
 * rank arithmetic: the communicator executes one rank's transfers, the cost model prices all.
 *
 * Hierarchical reduce-scatter of a set of blocks among ranks S (each block owned by a member):
 *   1. find the lowest level that splits S into units U_1..U_g with 1 < g < |S|; none: a ring.
 *   2. inside every unit, a ring reduce-scatter; member j of U takes the blocks whose owner has
 *      index c in its own unit with c mod |U| == j (so units of unequal size still cover all).
 *   3. for each index c < max |U|, the "column" S_c = {U[c mod |U|]} reduces the blocks of index
 *      c across units: recursively, one level up, all columns at once.
 *   Allgather is the mirror image; allreduce is the two. Everything that crosses an upper level
 *   crosses it once, split over all members of a unit: the uplinks carry the minimum.
 *
 *        rack A: a0 a1 a2 a3          rack B: b0 b1 b2 b3
 *        ring RS inside A, inside B   (each a_j, b_j holds a quarter, summed over its rack)
 *        column j: a_j <-> b_j        (a quarter crosses the spine, four flows at once)
 *        ring AG inside A, inside B
 */
#include "base/base.h"
#include "strata/netmodel.h"

#include <stdlib.h>
#include <string.h>

typedef struct planner {
    const strata_fabric_t *f;
    const size_t *off, *len; /* block ranges of the segment being planned */
    int me;
    strata_xfer_plan_t *out;
    strata_status_t rc;
} planner_t;

const char *strata_plan_kind_name(strata_plan_kind_t kind)
{
    static const char *const names[] = {"ring", "ring_tree", "hier"};
    return kind >= 0 && kind < STRATA_PLAN_KIND_COUNT ? names[kind] : NULL;
}

void strata_xfer_plan_free(strata_xfer_plan_t *p)
{
    if (!p)
        return;
    free(p->x);
    memset(p, 0, sizeof *p);
}

/* Appends a transfer of block b. `join` (the next block of the same bin of the same ring step)
 * lets contiguous blocks travel as one message; it depends only on the step, never on the rank
 * filter, so sender and receiver cut their messages alike. */
static void emit(planner_t *P, int slot, int src, int dst, int b, bool reduce, bool join)
{
    if (!P->len[b] || (P->me >= 0 && src != P->me && dst != P->me) || P->rc < 0)
        return;
    strata_xfer_plan_t *o = P->out;
    if (slot + 1 > o->nslots)
        o->nslots = slot + 1;
    if (o->n && join) {
        strata_xfer_t *last = &o->x[o->n - 1];
        if (last->slot == slot && last->src == src && last->dst == dst && last->reduce == reduce &&
            last->off + last->len == P->off[b]) {
            last->len += P->len[b];
            return;
        }
    }
    if (o->n == o->cap) {
        int cap = o->cap ? 2 * o->cap : 64;
        strata_xfer_t *x = realloc(o->x, (size_t)cap * sizeof *x);
        if (!x) {
            P->rc = st_error(STRATA_ERR_NO_MEMORY, "transfer plan: out of memory");
            return;
        }
        o->x = x;
        o->cap = cap;
    }
    o->x[o->n++] = (strata_xfer_t){slot, src, dst, P->off[b], P->len[b], reduce};
}

/* A ring among R[0..m) over bins: block blocks[i] belongs to bin binof[i] (a ring position).
 * Reduce-scatter leaves bin j reduced on R[j]; allgather spreads bin j from R[j]. m-1 slots. */
static void ring(planner_t *P, const int *R, int m, const int *blocks, const int *binof, int nb,
                 bool rs, int slot0)
{
    if (m < 2 || P->rc < 0)
        return;
    int pos = -1; // with a rank filter, only my two ring edges matter
    if (P->me >= 0) {
        for (int i = 0; i < m && pos < 0; i++)
            pos = R[i] == P->me ? i : -1;
        if (pos < 0)
            return;
    }
    int *first = calloc((size_t)(m + 1 + nb), sizeof *first); // blocks bucketed by bin
    if (!first) {
        P->rc = st_error(STRATA_ERR_NO_MEMORY, "transfer plan: out of memory");
        return;
    }
    int *list = first + m + 1;
    for (int q = 0; q < nb; q++)
        first[binof[q] + 1]++;
    for (int j = 0; j < m; j++)
        first[j + 1] += first[j];
    int *at = malloc((size_t)m * sizeof *at);
    if (!at) {
        free(first);
        P->rc = st_error(STRATA_ERR_NO_MEMORY, "transfer plan: out of memory");
        return;
    }
    memcpy(at, first, (size_t)m * sizeof *at);
    for (int q = 0; q < nb; q++)
        list[at[binof[q]]++] = blocks[q];
    free(at);
    for (int s = 0; s < m - 1; s++) {
        // Senders in position order; filtered, only my left neighbour and me, in the same order.
        int lo = pos < 0 ? 0 : (pos + m - 1) % m, hi = pos;
        if (pos >= 0 && lo > hi) {
            lo = pos;
            hi = (pos + m - 1) % m;
        }
        for (int k = 0; k < (pos < 0 ? m : 2); k++) {
            int i = pos < 0 ? k : (k == 0 ? lo : hi);
            int bin = rs ? ((i - s - 1) % m + m) % m : ((i - s) % m + m) % m;
            for (int q = first[bin]; q < first[bin + 1]; q++)
                emit(P, slot0 + s, R[i], R[(i + 1) % m], list[q], rs, q > first[bin]);
        }
    }
    free(first);
}

/* The lowest level >= `from` that splits S into 1 < g < m units; -1 if none. */
static int split_level(const strata_fabric_t *f, const int *S, int m, int from, int *unit_of)
{
    for (int l = from; l < f->topo.nlevels; l++) {
        int g = 0;
        for (int i = 0; i < m; i++) {
            int u = strata_fabric_unit(f, l, S[i]), j = 0;
            while (j < i && strata_fabric_unit(f, l, S[j]) != u)
                j++;
            g += j == i;
        }
        if (g > 1 && g < m) {
            for (int i = 0; i < m; i++)
                unit_of[i] = strata_fabric_unit(f, l, S[i]);
            return l;
        }
    }
    return -1;
}

/* Hierarchical reduce-scatter (rs) or allgather of `blocks` (owners: the block ids themselves,
 * all in S) among S from `level` up, starting at slot0. Returns the slots used; the count depends
 * only on the structure, so every rank agrees on it whatever it filters. */
static int hier(planner_t *P, const int *S, int m, const int *blocks, int nb, int level, bool rs,
                int slot0)
{
    if (m < 2 || nb == 0 || P->rc < 0)
        return 0;
    int *unit_of = malloc((size_t)m * 4 * sizeof *unit_of);
    int *binof = malloc((size_t)nb * 2 * sizeof *binof);
    if (!unit_of || !binof) {
        free(unit_of);
        free(binof);
        P->rc = st_error(STRATA_ERR_NO_MEMORY, "transfer plan: out of memory");
        return 0;
    }
    int *idx = unit_of + m, *usize = unit_of + 2 * m, *umem = unit_of + 3 * m;
    int *cls = binof + nb;
    int depth;
    int l = split_level(P->f, S, m, level, unit_of);
    if (l < 0) {
        for (int q = 0; q < nb; q++) { // flat ring: bin = the owner's position in S
            binof[q] = 0;
            while (S[binof[q]] != blocks[q])
                binof[q]++;
        }
        ring(P, S, m, blocks, binof, nb, rs, slot0);
        depth = m - 1;
    } else {
        // Members of each unit, in S order: umem lists S positions grouped by unit.
        int g = 0, M = 0;
        for (int i = 0; i < m; i++) {
            int j = 0;
            while (j < i && unit_of[j] != unit_of[i])
                j++;
            idx[i] = 0;
            for (int k = 0; k < i; k++)
                idx[i] += unit_of[k] == unit_of[i];
            if (j == i)
                g++;
        }
        for (int i = 0; i < m; i++) {
            usize[i] = 0;
            for (int k = 0; k < m; k++)
                usize[i] += unit_of[k] == unit_of[i];
            M = usize[i] > M ? usize[i] : M;
        }
        for (int q = 0; q < nb; q++) { // a block's class: its owner's index in its unit
            int o = 0;
            while (S[o] != blocks[q])
                o++;
            cls[q] = idx[o];
        }
        int *col = malloc((size_t)(m + nb) * sizeof *col);
        if (!col) {
            P->rc = st_error(STRATA_ERR_NO_MEMORY, "transfer plan: out of memory");
            free(unit_of);
            free(binof);
            return 0;
        }
        int *colblk = col + m;
        // Column phase: before the unit rings for allgather, after them for reduce-scatter.
        int intra_at = slot0, col_at = slot0 + M - 1, col_depth = 0;
        for (int pass = 0; pass < 2; pass++) {
            bool do_cols = (pass == 0) != rs;
            if (do_cols) {
                for (int c = 0; c < M; c++) {
                    int cm = 0, cb = 0;
                    for (int i = 0; i < m; i++) // first member of each unit with idx c mod size
                        if (idx[i] == c % usize[i])
                            col[cm++] = S[i];
                    for (int q = 0; q < nb; q++)
                        if (cls[q] == c)
                            colblk[cb++] = blocks[q];
                    int d = hier(P, col, cm, colblk, cb, l + 1, rs, rs ? col_at : slot0);
                    col_depth = d > col_depth ? d : col_depth;
                }
                if (!rs)
                    intra_at = slot0 + col_depth;
            } else {
                for (int i = 0; i < m; i++) { // one ring per unit, led by its first member
                    if (idx[i] != 0)
                        continue;
                    int um = 0;
                    for (int k = 0; k < m; k++)
                        if (unit_of[k] == unit_of[i])
                            umem[um++] = S[k];
                    for (int q = 0; q < nb; q++)
                        binof[q] = cls[q] % um;
                    ring(P, umem, um, blocks, binof, nb, rs, intra_at);
                }
            }
        }
        free(col);
        depth = M - 1 + col_depth;
    }
    free(unit_of);
    free(binof);
    return depth;
}

strata_status_t strata_xfer_plan_build(const strata_fabric_t *f, strata_plan_kind_t kind,
                                       strata_plan_phase_t phase, const size_t *off,
                                       const size_t *len, const strata_pipeline_t *pipe,
                                       int only_rank, strata_xfer_plan_t *out)
{
    memset(out, 0, sizeof *out);
    const int n = f->nranks;
    int segments = pipe && kind == STRATA_PLAN_HIER ? pipe->segments : 1;
    int stagger = pipe ? pipe->stagger : 1;
    if (kind < 0 || kind >= STRATA_PLAN_KIND_COUNT || phase < 1 || phase > 3 || segments < 1 ||
        stagger < 1 || only_rank >= n)
        return st_error(STRATA_ERR_INVALID_ARG, "transfer plan: bad kind, phase or pipeline");
    int *S = malloc((size_t)n * 3 * sizeof *S);
    size_t *seg = malloc((size_t)n * 2 * sizeof *seg);
    if (!S || !seg) {
        free(S);
        free(seg);
        return st_error(STRATA_ERR_NO_MEMORY, "transfer plan: out of memory");
    }
    int *blocks = S + n;
    if (kind == STRATA_PLAN_RING)
        for (int r = 0; r < n; r++)
            S[r] = r;
    else
        strata_fabric_tree_order(f, S);
    int *pos = S + 2 * n; // bins of a flat ring: block b goes with its owner's ring position
    for (int r = 0; r < n; r++) {
        blocks[r] = r;
        pos[S[r]] = r;
    }
    planner_t P = {.f = f, .off = seg, .len = seg + n, .me = only_rank, .out = out};
    int depth_rs = 0;
    for (int k = 0; k < segments && P.rc == STRATA_OK; k++) {
        for (int b = 0; b < n; b++) { // piece k of every block
            size_t base = len[b] / (size_t)segments, rem = len[b] % (size_t)segments;
            seg[b] = off[b] + base * (size_t)k + ((size_t)k < rem ? (size_t)k : rem);
            seg[n + b] = base + ((size_t)k < rem);
        }
        int at = k * stagger;
        if (kind == STRATA_PLAN_HIER) {
            if (phase & STRATA_PHASE_REDUCE_SCATTER)
                depth_rs = hier(&P, S, n, blocks, n, 0, true, at);
            if (phase & STRATA_PHASE_ALLGATHER)
                hier(&P, S, n, blocks, n, 0, false, at + depth_rs);
        } else {
            if (phase & STRATA_PHASE_REDUCE_SCATTER) {
                ring(&P, S, n, blocks, pos, n, true, at);
                depth_rs = n - 1;
            }
            if (phase & STRATA_PHASE_ALLGATHER)
                ring(&P, S, n, blocks, pos, n, false, at + depth_rs);
        }
    }
    free(S);
    free(seg);
    if (P.rc < 0)
        strata_xfer_plan_free(out);
    return P.rc;
}
