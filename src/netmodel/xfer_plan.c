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
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "strata/netmodel.h"

typedef struct planner {
    const strata_fabric_t *f;
    const size_t *off, *len; /* block ranges of the segment being planned */
    int me;
    strata_xfer_plan_t *out;
    strata_status_t rc;
    int *scratch; /* f->nranks entries, all -1 between uses */
} planner_t;

const char *strata_plan_kind_name(strata_plan_kind_t kind)
{
    static const char *const names[] = {
        "ring", "ring_tree", "hier", "halving_doubling", "recursive_doubling", "binomial"};
    return kind >= 0 && kind < STRATA_PLAN_KIND_COUNT ? names[kind] : NULL;
}

bool strata_plan_kind_serves(strata_plan_kind_t kind, strata_plan_phase_t phase)
{
    switch (kind) {
    case STRATA_PLAN_RING:
    case STRATA_PLAN_RING_TREE:
    case STRATA_PLAN_HIER:
        return phase >= STRATA_PHASE_REDUCE_SCATTER && phase <= STRATA_PHASE_ALLREDUCE;
    case STRATA_PLAN_HALVING_DOUBLING:
    case STRATA_PLAN_RECURSIVE_DOUBLING:
        return phase == STRATA_PHASE_ALLREDUCE;
    case STRATA_PLAN_BINOMIAL:
        return phase == STRATA_PHASE_BCAST || phase == STRATA_PHASE_REDUCE;
    default:
        return false;
    }
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
static void emit_range(planner_t *P, int slot, int src, int dst, size_t off, size_t len,
                       bool reduce, bool join)
{
    if (!len || (P->me >= 0 && src != P->me && dst != P->me) || P->rc < 0)
        return;
    strata_xfer_plan_t *o = P->out;
    if (slot + 1 > o->nslots)
        o->nslots = slot + 1;
    if (o->n && join) {
        strata_xfer_t *last = &o->x[o->n - 1];
        if (last->slot == slot && last->src == src && last->dst == dst && last->reduce == reduce &&
            last->off + last->len == off) {
            last->len += len;
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
    o->x[o->n++] = (strata_xfer_t){slot, src, dst, off, len, reduce};
}

static void emit(planner_t *P, int slot, int src, int dst, int b, bool reduce, bool join)
{
    emit_range(P, slot, src, dst, P->off[b], P->len[b], reduce, join);
}

/* ---- the flat algorithms' patterns (recursive.c, tree.c), on a vector of `count` elements ---- */

static int floor_pow2(int n)
{
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    return p;
}

/* Extra ranks of a non-power-of-two count fold in first (rank p2+i hands its vector to i) and get
 * the result back last. Returns p2. */
static int fold(planner_t *P, int n, size_t count, bool in, int slot)
{
    int p2 = floor_pow2(n);
    for (int i = 0; i + p2 < n; i++)
        emit_range(P, slot, in ? i + p2 : i, in ? i : i + p2, 0, count, in, false);
    return p2;
}

static void halving_doubling(planner_t *P, int n, size_t count)
{
    int p2 = fold(P, n, count, true, 0), steps = 0;
    while ((1 << steps) < p2)
        steps++;
    for (int r = 0; r < p2; r++) {
        size_t l = 0, h = count, lo[32], hi[32];
        for (int k = 0; k < steps; k++) { // halving: send the half the partner keeps
            int d = p2 >> (k + 1);
            size_t mid = l + (h - l) / 2;
            size_t sl = (r & d) ? l : mid, sh = (r & d) ? mid : h;
            emit_range(P, 1 + k, r, r ^ d, sl, sh - sl, true, false);
            lo[k] = l;
            hi[k] = h;
            l = (r & d) ? mid : l;
            h = (r & d) ? h : mid;
        }
        for (int k = steps - 1; k >= 0; k--) { // doubling: send what this rank holds
            emit_range(P, 1 + 2 * steps - 1 - k, r, r ^ (p2 >> (k + 1)), l, h - l, false, false);
            l = lo[k];
            h = hi[k];
        }
    }
    fold(P, n, count, false, 1 + 2 * steps);
}

static void recursive_doubling(planner_t *P, int n, size_t count)
{
    int p2 = fold(P, n, count, true, 0), k = 0;
    for (int d = 1; d < p2; d <<= 1, k++)
        for (int r = 0; r < p2; r++)
            emit_range(P, 1 + k, r, r ^ d, 0, count, true, false);
    fold(P, n, count, false, 1 + k);
}

static int popcount(int v)
{
    int c = 0;
    for (; v; v &= v - 1)
        c++;
    return c;
}

/* Binomial tree from rank 0: node v's parent is v minus its lowest set bit. A bcast edge leaves a
 * node in slot popcount(parent); a reduce edge in slot depth - popcount(child). */
static void binomial(planner_t *P, int n, size_t count, bool reduce)
{
    int depth = 0;
    for (int v = 0; v < n; v++)
        depth = popcount(v) > depth ? popcount(v) : depth;
    for (int v = 1; v < n; v++) {
        int parent = v & (v - 1);
        if (reduce)
            emit_range(P, depth - popcount(v), v, parent, 0, count, true, false);
        else
            emit_range(P, popcount(parent), parent, v, 0, count, false, false);
    }
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

/* How a set S of m ranks (tree order) splits: at the lowest level >= `from` where it falls into
 * 1 < g < m units. Per member: its unit (dense 0..g-1 in order of appearance), its index inside
 * it, and the unit's size; per unit its members in S order (ustart/umem); M = the largest unit.
 * level < 0: no level splits S (a flat ring). Per block (owner = the block id, a member): cls =
 * the owner's index in its unit, or its position in S for a flat ring. */
typedef struct split {
    int level, g, M;
    int *unit, *idx, *usize, *ustart, *umem, *cls;
} split_t;

static void split_free(split_t *sp)
{
    free(sp->unit);
    sp->unit = NULL;
}

static bool split_make(planner_t *P, const int *S, int m, const int *blocks, int nb, int from,
                       split_t *sp)
{
    const strata_fabric_t *f = P->f;
    memset(sp, 0, sizeof *sp);
    sp->unit = malloc(((size_t)m * 6 + (size_t)nb + 1) * sizeof *sp->unit);
    if (!sp->unit) {
        P->rc = st_error(STRATA_ERR_NO_MEMORY, "transfer plan: out of memory");
        return false;
    }
    sp->idx = sp->unit + m;
    sp->usize = sp->idx + m;
    sp->ustart = sp->usize + m; // g + 1 <= m + 1 entries
    sp->umem = sp->ustart + m + 1;
    sp->cls = sp->umem + m;
    int *dense = P->scratch; // unit id at the level -> dense id, -1 when unseen
    sp->level = -1;
    for (int l = from; l < f->topo.nlevels && sp->level < 0; l++) {
        int g = 0;
        for (int i = 0; i < m; i++) {
            int u = strata_fabric_unit(f, l, S[i]);
            if (dense[u] < 0)
                dense[u] = g++;
            sp->unit[i] = dense[u];
        }
        for (int i = 0; i < m; i++)
            dense[strata_fabric_unit(f, l, S[i])] = -1;
        if (g > 1 && g < m) {
            sp->level = l;
            sp->g = g;
        }
    }
    int *pos = P->scratch; // rank -> position in S (scratch is free again)
    for (int i = 0; i < m; i++)
        pos[S[i]] = i;
    if (sp->level < 0) {
        for (int q = 0; q < nb; q++)
            sp->cls[q] = pos[blocks[q]];
    } else {
        memset(sp->ustart, 0, (size_t)(sp->g + 1) * sizeof *sp->ustart);
        for (int i = 0; i < m; i++)
            sp->idx[i] = sp->ustart[sp->unit[i] + 1]++;
        for (int i = 0; i < m; i++) {
            sp->usize[i] = sp->ustart[sp->unit[i] + 1];
            sp->M = sp->usize[i] > sp->M ? sp->usize[i] : sp->M;
        }
        for (int u = 0; u < sp->g; u++)
            sp->ustart[u + 1] += sp->ustart[u];
        for (int i = 0; i < m; i++)
            sp->umem[sp->ustart[sp->unit[i]] + sp->idx[i]] = S[i];
        for (int q = 0; q < nb; q++)
            sp->cls[q] = sp->idx[pos[blocks[q]]];
    }
    for (int i = 0; i < m; i++)
        pos[S[i]] = -1;
    return true;
}

/* Column c of a split: the member of index c mod size of every unit, and the blocks of class c. */
static void split_column(const split_t *sp, const int *S, int m, const int *blocks, int nb, int c,
                         int *col, int *cm, int *colblk, int *cb)
{
    *cm = *cb = 0;
    for (int i = 0; i < m; i++)
        if (sp->idx[i] == c % sp->usize[i])
            col[(*cm)++] = S[i];
    for (int q = 0; q < nb; q++)
        if (sp->cls[q] == c)
            colblk[(*cb)++] = blocks[q];
}

/* Hierarchical reduce-scatter (rs) or allgather of `blocks` (owners: the block ids themselves,
 * all in S) among S from `level` up, starting at slot0. Returns the slots used; the count depends
 * only on the structure, so every rank agrees on it whatever it filters. */
static int hier(planner_t *P, const int *S, int m, const int *blocks, int nb, int level, bool rs,
                int slot0)
{
    if (m < 2 || nb == 0 || P->rc < 0)
        return 0;
    split_t sp;
    if (!split_make(P, S, m, blocks, nb, level, &sp))
        return 0;
    if (sp.level < 0) { // flat ring: bin = the owner's position in S
        ring(P, S, m, blocks, sp.cls, nb, rs, slot0);
        split_free(&sp);
        return m - 1;
    }
    int *col = malloc((size_t)(m + 2 * nb + 1) * sizeof *col);
    if (!col) {
        P->rc = st_error(STRATA_ERR_NO_MEMORY, "transfer plan: out of memory");
        split_free(&sp);
        return 0;
    }
    int *colblk = col + m, *binof = colblk + nb;
    // Column phase: before the unit rings for allgather, after them for reduce-scatter.
    int intra_at = slot0, col_at = slot0 + sp.M - 1, col_depth = 0;
    for (int pass = 0; pass < 2; pass++) {
        if ((pass == 0) != rs) {
            for (int c = 0; c < sp.M; c++) {
                int cm, cb;
                split_column(&sp, S, m, blocks, nb, c, col, &cm, colblk, &cb);
                int d = hier(P, col, cm, colblk, cb, sp.level + 1, rs, rs ? col_at : slot0);
                col_depth = d > col_depth ? d : col_depth;
            }
            if (!rs)
                intra_at = slot0 + col_depth;
        } else {
            for (int u = 0; u < sp.g; u++) { // one ring per unit
                int um = sp.ustart[u + 1] - sp.ustart[u];
                for (int q = 0; q < nb; q++)
                    binof[q] = sp.cls[q] % um;
                ring(P, sp.umem + sp.ustart[u], um, blocks, binof, nb, rs, intra_at);
            }
        }
    }
    int depth = sp.M - 1 + col_depth;
    free(col);
    split_free(&sp);
    return depth;
}

/* The block order that keeps every bin of every ring of the plan contiguous: the flat ring's
 * positions, or, for the hierarchical plan, column by column recursively. */
static void order_blocks(planner_t *P, const int *S, int m, const int *blocks, int nb, int level,
                         int *out, int *k)
{
    split_t sp;
    if (nb == 0 || P->rc < 0 || !split_make(P, S, m, blocks, nb, level, &sp))
        return;
    if (sp.level < 0) { // by owner position
        for (int i = 0; i < m; i++)
            for (int q = 0; q < nb; q++)
                if (sp.cls[q] == i)
                    out[(*k)++] = blocks[q];
    } else {
        int *col = malloc((size_t)(m + nb + 1) * sizeof *col);
        if (!col)
            P->rc = st_error(STRATA_ERR_NO_MEMORY, "transfer plan: out of memory");
        for (int c = 0; col && c < sp.M; c++) {
            int cm, cb;
            split_column(&sp, S, m, blocks, nb, c, col, &cm, col + m, &cb);
            order_blocks(P, col, cm, col + m, cb, sp.level + 1, out, k);
        }
        free(col);
    }
    split_free(&sp);
}

/* The ranks in the plan's ring order: rank order for the topology-blind ring, tree order else. */
static void plan_order(const strata_fabric_t *f, strata_plan_kind_t kind, int *S)
{
    if (kind == STRATA_PLAN_RING)
        for (int r = 0; r < f->nranks; r++)
            S[r] = r;
    else
        strata_fabric_tree_order(f, S);
}

static int pipeline_segments(strata_plan_kind_t kind, const strata_xfer_pipe_t *pipe)
{
    return pipe && kind == STRATA_PLAN_HIER ? pipe->segments : 1;
}

static int *scratch_new(int n)
{
    int *s = malloc((size_t)n * sizeof *s + 1);
    for (int i = 0; s && i < n; i++)
        s[i] = -1;
    return s;
}

strata_status_t strata_xfer_plan_layout(const strata_fabric_t *f, strata_plan_kind_t kind,
                                        const size_t *len, const strata_xfer_pipe_t *pipe,
                                        size_t *off_out, size_t *len_out)
{
    const int n = f->nranks, segments = pipeline_segments(kind, pipe);
    if (kind < 0 || kind >= STRATA_PLAN_KIND_COUNT || segments < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "transfer plan: bad kind or pipeline");
    int *S = malloc((size_t)n * 3 * sizeof *S), *scratch = scratch_new(n);
    if (!S || !scratch) {
        free(S);
        free(scratch);
        return st_error(STRATA_ERR_NO_MEMORY, "transfer plan: out of memory");
    }
    int *blocks = S + n, *order = S + 2 * n, k = 0;
    plan_order(
        f, kind == STRATA_PLAN_RING_TREE || kind == STRATA_PLAN_HIER ? kind : STRATA_PLAN_RING, S);
    for (int b = 0; b < n; b++)
        blocks[b] = b;
    planner_t P = {.f = f, .scratch = scratch};
    if (kind == STRATA_PLAN_HIER)
        order_blocks(&P, S, n, blocks, n, 0, order, &k);
    else
        memcpy(order, S, (size_t)n * sizeof *order);
    size_t at = 0;
    for (int sg = 0; sg < segments; sg++) // segment-major, blocks in order inside a segment
        for (int i = 0; i < n; i++) {
            int b = order[i];
            size_t base = len[b] / (size_t)segments, rem = len[b] % (size_t)segments;
            size_t piece = base + ((size_t)sg < rem);
            off_out[(size_t)sg * (size_t)n + (size_t)b] = at;
            len_out[(size_t)sg * (size_t)n + (size_t)b] = piece;
            at += piece;
        }
    free(S);
    free(scratch);
    return P.rc;
}

strata_status_t strata_xfer_plan_build(const strata_fabric_t *f, strata_plan_kind_t kind,
                                       strata_plan_phase_t phase, const size_t *off,
                                       const size_t *len, const strata_xfer_pipe_t *pipe,
                                       int only_rank, strata_xfer_plan_t *out)
{
    memset(out, 0, sizeof *out);
    const int n = f->nranks, segments = pipeline_segments(kind, pipe);
    int stagger = pipe ? pipe->stagger : 1;
    if (!strata_plan_kind_serves(kind, phase) || segments < 1 || stagger < 1 || only_rank >= n)
        return st_error(STRATA_ERR_INVALID_ARG, "transfer plan: bad kind, phase or pipeline");
    if (kind >= STRATA_PLAN_HALVING_DOUBLING) { // the flat patterns: one vector from offset 0
        size_t count = 0;
        for (int b = 0; b < n; b++)
            count += len[b];
        planner_t P = {.f = f, .me = only_rank, .out = out};
        if (kind == STRATA_PLAN_HALVING_DOUBLING)
            halving_doubling(&P, n, count);
        else if (kind == STRATA_PLAN_RECURSIVE_DOUBLING)
            recursive_doubling(&P, n, count);
        else
            binomial(&P, n, count, phase == STRATA_PHASE_REDUCE);
        if (P.rc < 0)
            strata_xfer_plan_free(out);
        return P.rc;
    }
    int *S = malloc((size_t)n * 3 * sizeof *S), *scratch = scratch_new(n);
    if (!S || !scratch) {
        free(S);
        free(scratch);
        return st_error(STRATA_ERR_NO_MEMORY, "transfer plan: out of memory");
    }
    int *blocks = S + n, *pos = S + 2 * n; // a flat ring's bins: block b at its owner's position
    plan_order(f, kind, S);
    for (int r = 0; r < n; r++) {
        blocks[r] = r;
        pos[S[r]] = r;
    }
    planner_t P = {.f = f, .me = only_rank, .out = out, .scratch = scratch};
    int depth_rs = 0;
    for (int k = 0; k < segments && P.rc == STRATA_OK; k++) {
        P.off = off + (size_t)k * (size_t)n; // piece k of every block
        P.len = len + (size_t)k * (size_t)n;
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
    free(scratch);
    if (P.rc < 0)
        strata_xfer_plan_free(out);
    return P.rc;
}
