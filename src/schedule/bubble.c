/* The planner's view of a schedule (strata_pp_bubble, strata_pp_peak_act): the bubble and the
 * peak activation memory of the generator's own lists with every chunk's FWD taking 1, BWD b and
 * WGT w, no hop time. A search asks this hundreds of thousands of times, for a few hundred
 * schedules (kind, P, V, M) and as many (b, w) as configurations, so:
 *
 * - Each schedule's compute actions are compiled once into a graph in a topological order (each
 *   node: the previous action of its stage, the action whose data it needs, its kind); its
 *   makespan for given durations is one pass over it (the longest path; without hop time the sends
 *   and receives cost nothing, and a RECV never waits longer than the action needing its data).
 * - Above 4P micro-batches the lists of M1 = 3P + M mod P and M1 + P micro-batches are timed and
 *   the difference extended to M: the steady state repeats every P micro-batches (makespan and
 *   peak memory are affine in M along M mod P from 3P on, which the tests check against the whole
 *   lists for every schedule).
 * - The makespan is the longest of a fixed set of paths, a maximum of linear functions of (b, w):
 *   convex. Where the longest path at the corners of a cell of (b, w) is one and the same linear
 *   function, it is that function on the whole cell: no less (that path exists everywhere) and no
 *   more (convexity). Cells are found by halving a box of (b, w) until that holds (at most 10
 *   times); what is left, or outside the box, is timed at the point itself.
 * Per thread, like the price tables: nothing is shared, nothing locked. */
#include "base/base.h"
#include "base/thread_value.h"
#include "schedule/schedule_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- a schedule's compute actions as a graph ------------------------------------------------ */

typedef struct graph {
    int n, P;
    int32_t *prev, *data; /* [n] predecessors; n (a node ending at 0) when none */
    uint8_t *op;          /* [n] FWD, BWD or WGT */
    int32_t *last;        /* [P] the last node of each stage */
    double *end;          /* [n + 1] scratch */
    double *peak;         /* [P] peak activation memory of each stage */
} graph_t;

static void graph_free(graph_t *g)
{
    free(g->prev), free(g->data), free(g->op), free(g->last), free(g->end), free(g->peak);
    memset(g, 0, sizeof *g);
}

static size_t graph_bytes(const graph_t *g)
{
    return (size_t)g->n * (2 * sizeof(int32_t) + 1 + sizeof(double)) +
           (size_t)g->P * (sizeof(int32_t) + sizeof(double));
}

static strata_status_t graph_build(strata_schedule_t kind, int P, int V, int M, graph_t *g)
{
    memset(g, 0, sizeof *g);
    const int per = st_pp_order_len(kind, V, M), C = P * V;
    const long units = (long)M * C;
    const bool split = strata_schedule_splits_backward(kind);
    strata_status_t rc = STRATA_OK;
    g->n = P * per;
    g->P = P;
    strata_pp_action_t *order = malloc((size_t)g->n * sizeof *order + 1);
    int32_t *fnode = malloc((size_t)units * sizeof *fnode), *bnode = malloc((size_t)units * sizeof *bnode);
    int *at = calloc((size_t)P, sizeof *at);
    g->prev = malloc((size_t)g->n * sizeof *g->prev + 1);
    g->data = malloc((size_t)g->n * sizeof *g->data + 1);
    g->op = malloc((size_t)g->n + 1);
    g->last = malloc((size_t)P * sizeof *g->last);
    g->end = malloc(((size_t)g->n + 1) * sizeof *g->end);
    g->peak = calloc((size_t)P, sizeof *g->peak);
    if (!order || !fnode || !bnode || !at || !g->prev || !g->data || !g->op || !g->last ||
        !g->end || !g->peak) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "pipeline schedule: out of memory");
        goto done;
    }
    for (long u = 0; u < units; u++)
        fnode[u] = bnode[u] = -1;
    for (int s = 0; s < P; s++) {
        const strata_pp_action_t *l = order + (size_t)s * per;
        st_pp_order(kind, P, V, M, s, order + (size_t)s * per);
        double mem = 0; /* a unit's activation, held from its FWD to its WGT (or its BWD) */
        for (int i = 0; i < per; i++) {
            if (l[i].op == STRATA_PP_FWD)
                mem += 1;
            else if (l[i].op == STRATA_PP_WGT || !split)
                mem -= 1;
            if (mem > g->peak[s])
                g->peak[s] = mem;
        }
        g->last[s] = g->n;
    }
    // Number the actions in an order every predecessor comes first in: stage by stage, as far as
    // each can go before it needs another stage's data.
    for (int placed = 0; placed < g->n;) {
        const int before = placed;
        for (int s = 0; s < P; s++)
            for (; at[s] < per; at[s]++) {
                const strata_pp_action_t *a = &order[(size_t)s * per + at[s]];
                const long u = st_pp_unit(C, a->mb, a->chunk);
                int32_t data = g->n;
                if (a->op == STRATA_PP_FWD && a->chunk > 0)
                    data = fnode[u - 1];
                else if (a->op == STRATA_PP_BWD && a->chunk + 1 < C)
                    data = bnode[u + 1];
                if (data < 0)
                    break; /* not computed yet */
                const int32_t id = placed++;
                g->prev[id] = g->last[s];
                g->data[id] = data;
                g->op[id] = a->op;
                g->last[s] = id;
                if (a->op == STRATA_PP_FWD)
                    fnode[u] = id;
                else if (a->op == STRATA_PP_BWD)
                    bnode[u] = id;
            }
        if (placed == before) {
            rc = st_error(STRATA_ERR_INTERNAL, "%s schedule (P=%d V=%d M=%d): its compute order "
                                               "cannot run",
                          strata_schedule_name(kind), P, V, M);
            goto done;
        }
    }
done:
    free(order), free(fnode), free(bnode), free(at);
    if (rc < 0)
        graph_free(g);
    return rc;
}

/* The makespan for durations d[op], and the counts of each kind of action on a longest path. */
static double graph_time(const graph_t *g, const double d[3], double count[3])
{
    double *end = g->end;
    end[g->n] = 0;
    for (int i = 0; i < g->n; i++) {
        const double a = end[g->prev[i]], b = end[g->data[i]];
        end[i] = (a > b ? a : b) + d[g->op[i]];
    }
    int tail = g->last[0];
    for (int s = 1; s < g->P; s++)
        if (end[g->last[s]] > end[tail])
            tail = g->last[s];
    const double T = end[tail];
    if (count) {
        count[0] = count[1] = count[2] = 0;
        for (int i = tail; i != g->n; i = end[g->prev[i]] >= end[g->data[i]] ? g->prev[i] : g->data[i])
            count[g->op[i]]++;
    }
    return T;
}

/* ---- the memo ------------------------------------------------------------------------------- */

#define GRID     1024 /* finest cells per axis of the box */
#define LEVELS   10   /* halvings: GRID = 1 << LEVELS */
#define BOX_LO   (1.0 / 1024)
#define BOX_HI   1024.0
#define MEMO_CAP ((size_t)192 << 20) /* bytes of graphs and vertices per thread before a flush */

typedef struct vertex {
    uint32_t key; /* 0: empty */
    double t[2];        /* makespan of each graph at the vertex */
    double coef[2][3];  /* the longest path's (FWD, b, w) coefficients */
} vertex_t;

/* A cell of the grid where each graph's makespan is one linear function. */
typedef struct cell {
    int i0, i1, j0, j1;
    double coef[2][3];
} cell_t;

#define CELLS 8 /* the cells found last, tried before the halving: queries come in runs */

typedef struct entry {
    strata_schedule_t kind;
    int P, V, M1;
    int ngraph; /* 2: extrapolating from M1 and M1 + P */
    graph_t g[2];
    vertex_t *vx;
    int vcap, vn;
    cell_t cell[CELLS];
    int ncell, next_cell;
} entry_t;

typedef struct memo {
    entry_t **slot;
    int cap, n;
    size_t bytes;
} memo_t;

static void entry_free(entry_t *e)
{
    graph_free(&e->g[0]);
    graph_free(&e->g[1]);
    free(e->vx);
    free(e);
}

static void memo_clear(memo_t *m)
{
    for (int i = 0; i < m->cap; i++)
        if (m->slot[i])
            entry_free(m->slot[i]);
    memset(m->slot, 0, (size_t)m->cap * sizeof *m->slot);
    m->n = 0;
    m->bytes = 0;
}

static void memo_destroy(void *p)
{
    memo_t *m = p;
    memo_clear(m);
    free(m->slot);
    free(m);
}

static void *memo_make(void)
{
    memo_t *m = calloc(1, sizeof *m);
    if (!m || !(m->slot = calloc(1024, sizeof *m->slot))) {
        free(m);
        return NULL;
    }
    m->cap = 1024;
    return m;
}

static st_thread_value_t memos = ST_THREAD_VALUE(memo_make, memo_destroy);

static memo_t *memo_get(void)
{
    return st_thread_value(&memos);
}

static unsigned hash4(unsigned a, unsigned b, unsigned c, unsigned d)
{
    unsigned h = 2166136261u;
    const unsigned v[4] = {a, b, c, d};
    for (int i = 0; i < 4; i++)
        h = (h ^ v[i]) * 16777619u;
    return h;
}

/* The entry of (kind, P, V, M1, ngraph), built on first use. */
static strata_status_t entry_get(strata_schedule_t kind, int P, int V, int M1, int ngraph,
                                 entry_t **out)
{
    memo_t *m = memo_get();
    if (!m)
        return st_error(STRATA_ERR_NO_MEMORY, "pipeline schedule: out of memory");
    unsigned h = hash4((unsigned)kind * 2 + (unsigned)ngraph, (unsigned)P, (unsigned)V, (unsigned)M1) & (unsigned)(m->cap - 1);
    for (entry_t *e; (e = m->slot[h]); h = (h + 1) & (unsigned)(m->cap - 1))
        if (e->kind == kind && e->P == P && e->V == V && e->M1 == M1 && e->ngraph == ngraph) {
            *out = e;
            return STRATA_OK;
        }
    if (m->bytes > MEMO_CAP || 2 * (m->n + 1) > m->cap) {
        memo_clear(m); /* rare: a search touches a few hundred schedules */
        h = hash4((unsigned)kind * 2 + (unsigned)ngraph, (unsigned)P, (unsigned)V, (unsigned)M1) & (unsigned)(m->cap - 1);
    }
    entry_t *e = calloc(1, sizeof *e);
    if (!e)
        return st_error(STRATA_ERR_NO_MEMORY, "pipeline schedule: out of memory");
    *e = (entry_t){.kind = kind, .P = P, .V = V, .M1 = M1, .ngraph = ngraph};
    for (int k = 0; k < ngraph; k++) {
        strata_status_t rc = graph_build(kind, P, V, M1 + k * P, &e->g[k]);
        if (rc < 0) {
            entry_free(e);
            return rc;
        }
        m->bytes += graph_bytes(&e->g[k]);
    }
    m->slot[h] = e;
    m->n++;
    *out = e;
    return STRATA_OK;
}

/* The box's coordinate of a duration ratio: x / (1 + x) spread over [0, GRID]; w starts at 0. */
static double box_lo(bool starts_at_zero)
{
    return starts_at_zero ? 0 : BOX_LO / (1 + BOX_LO);
}

static double to_grid(double x, bool zero)
{
    const double lo = box_lo(zero), hi = BOX_HI / (1 + BOX_HI);
    return (x / (1 + x) - lo) / (hi - lo) * GRID;
}

static double from_grid(int i, bool zero)
{
    const double lo = box_lo(zero), hi = BOX_HI / (1 + BOX_HI);
    const double t = lo + (hi - lo) * i / GRID;
    return t / (1 - t);
}

/* Durations of (FWD, BWD, WGT) for the ratios x = (b, w): a schedule that does not split the
 * backward runs BWD in b + w. */
static void durations(const entry_t *e, double b, double w, double d[3])
{
    const bool split = strata_schedule_splits_backward(e->kind);
    d[0] = 1;
    d[1] = split ? b : b + w;
    d[2] = split ? w : 0;
}

/* The vertex (i, j) of the grid: (b, w) = (from_grid(i), from_grid(j)) when split; (s, 0) with s
 * = from_grid(i) the whole backward otherwise. */
static vertex_t *vertex(entry_t *e, int i, int j, memo_t *m)
{
    const uint32_t key = (uint32_t)i * (GRID + 1) + (uint32_t)j + 1;
    if (2 * (e->vn + 1) > e->vcap) {
        int cap = e->vcap ? 2 * e->vcap : 64;
        vertex_t *vx = calloc((size_t)cap, sizeof *vx);
        if (!vx)
            return NULL;
        for (int k = 0; k < e->vcap; k++)
            if (e->vx[k].key) {
                unsigned h = e->vx[k].key * 2654435761u & (unsigned)(cap - 1);
                while (vx[h].key)
                    h = (h + 1) & (unsigned)(cap - 1);
                vx[h] = e->vx[k];
            }
        free(e->vx);
        m->bytes += (size_t)(cap - e->vcap) * sizeof *vx;
        e->vx = vx;
        e->vcap = cap;
    }
    unsigned h = key * 2654435761u & (unsigned)(e->vcap - 1);
    for (; e->vx[h].key; h = (h + 1) & (unsigned)(e->vcap - 1))
        if (e->vx[h].key == key)
            return &e->vx[h];
    vertex_t *v = &e->vx[h];
    v->key = key;
    e->vn++;
    const bool split = strata_schedule_splits_backward(e->kind);
    double d[3], count[3];
    durations(e, from_grid(i, false), split ? from_grid(j, true) : 0, d);
    for (int k = 0; k < e->ngraph; k++) {
        v->t[k] = graph_time(&e->g[k], d, count);
        v->coef[k][0] = count[0];
        v->coef[k][1] = count[1];
        v->coef[k][2] = split ? count[2] : count[1];
    }
    return v;
}

/* Whether one corner's longest path is, for every graph, the makespan at all the corners: then
 * it is the makespan on the whole cell (it is a path, so no less; convexity, so no more). At a
 * kink the corners' own paths may be the other side's: each corner's path is tried. */
static bool certify(const entry_t *e, const vertex_t *corner, int ncorner, const int *ci,
                    const int *cj, cell_t *out)
{
    const bool split = strata_schedule_splits_backward(e->kind);
    for (int from = 0; from < ncorner; from++) {
        bool ok = true;
        for (int k = 0; k < e->ngraph && ok; k++)
            for (int c = 0; c < ncorner && ok; c++) {
                const double *q = corner[from].coef[k];
                const double cx = from_grid(ci[c], false), cy = split ? from_grid(cj[c], true) : 0;
                ok = fabs(q[0] + q[1] * cx + q[2] * cy - corner[c].t[k]) <= 1e-9 * corner[c].t[k];
            }
        if (ok) {
            memcpy(out->coef, corner[from].coef, sizeof out->coef);
            return true;
        }
    }
    return false;
}

/* The makespans at (b, w): from a cell whose corners share one longest path, else timed. */
static strata_status_t makespans(entry_t *e, double b, double w, double t[2])
{
    memo_t *m = memo_get();
    const bool split = strata_schedule_splits_backward(e->kind);
    const double x = split ? b : b + w, y = split ? w : 0;
    const double gx = to_grid(x, false), gy = split ? to_grid(y, true) : 0;
    const cell_t *hit = NULL;
    for (int c = 0; c < e->ncell && !hit; c++)
        if (gx >= e->cell[c].i0 && gx <= e->cell[c].i1 && gy >= e->cell[c].j0 &&
            gy <= e->cell[c].j1)
            hit = &e->cell[c];
    for (int level = 0; m && !hit && level <= LEVELS && gx >= 0 && gx <= GRID && gy >= 0 &&
                        gy <= GRID;
         level++) {
        const int size = GRID >> level, ncorner = split ? 4 : 2;
        int i0 = (int)(gx / size) * size, j0 = split ? (int)(gy / size) * size : 0;
        i0 = i0 >= GRID ? GRID - size : i0;
        j0 = j0 >= GRID ? GRID - size : j0;
        vertex_t corner[4]; /* copies: the table may grow under a pointer */
        int ci[4], cj[4];
        bool ok = true;
        for (int c = 0; c < ncorner && ok; c++) {
            ci[c] = i0 + (c & 1) * size;
            cj[c] = j0 + (c >> 1) * size;
            const vertex_t *v = vertex(e, ci[c], cj[c], m);
            if ((ok = v != NULL))
                corner[c] = *v;
        }
        cell_t *slot = &e->cell[e->next_cell];
        if (ok && certify(e, corner, ncorner, ci, cj, slot)) {
            slot->i0 = i0, slot->i1 = i0 + size;
            slot->j0 = j0, slot->j1 = split ? j0 + size : 0;
            e->next_cell = (e->next_cell + 1) % CELLS;
            e->ncell += e->ncell < CELLS;
            hit = slot;
        }
    }
    if (hit) {
        for (int k = 0; k < e->ngraph; k++)
            t[k] = hit->coef[k][0] + hit->coef[k][1] * x + hit->coef[k][2] * y;
        return STRATA_OK;
    }
    double d[3];
    durations(e, b, w, d);
    for (int k = 0; k < e->ngraph; k++)
        t[k] = graph_time(&e->g[k], d, NULL);
    return STRATA_OK;
}

/* The entry for (kind, P, V, M) and where M sits against it: k periods of P beyond M1. */
static strata_status_t lookup(strata_schedule_t kind, int P, int V, int M, entry_t **e, double *k)
{
    const bool extend = M >= 3 * P && P <= INT16_MAX;
    const int M1 = extend ? 2 * P + M % P : M;
    ST_TRY(st_pp_validate(kind, P, V, M, extend ? M1 + P : M));
    ST_TRY(entry_get(kind, P, V, M1, extend ? 2 : 1, e));
    *k = (double)(M - M1) / P;
    return STRATA_OK;
}

static double stage_peak(const entry_t *e, int s, double k)
{
    const double a = e->g[0].peak[s];
    return e->ngraph == 2 ? a + k * (e->g[1].peak[s] - a) : a;
}

static double max_peak(const entry_t *e, double k)
{
    double best = 0;
    for (int s = 0; s < e->P; s++)
        if (stage_peak(e, s, k) > best)
            best = stage_peak(e, s, k);
    return best;
}

strata_status_t strata_pp_peak_act(strata_schedule_t kind, int stages, int vstages, int micro,
                                   int stage, double *peak_act)
{
    if (stage < -1 || stage >= stages)
        return st_error(STRATA_ERR_INVALID_ARG, "pipeline schedule: no stage %d of %d", stage,
                        stages);
    entry_t *e;
    double k;
    ST_TRY(lookup(kind, stages, vstages, micro, &e, &k));
    *peak_act = stage < 0 ? max_peak(e, k) : stage_peak(e, stage, k);
    return STRATA_OK;
}

strata_status_t strata_pp_bubble(strata_schedule_t kind, int stages, int vstages, int micro,
                                 double b, double w, double *bubble, double *peak_act)
{
    if (!(b >= 0 && w >= 0) || b > 1e300 || w > 1e300)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "pipeline bubble: expected backward and weight-gradient times >= 0 and "
                        "finite, got b=%g w=%g",
                        b, w);
    entry_t *e;
    double k, t[2];
    ST_TRY(lookup(kind, stages, vstages, micro, &e, &k));
    ST_TRY(makespans(e, b, w, t));
    const double T = e->ngraph == 2 ? t[0] + k * (t[1] - t[0]) : t[0];
    const double busy = (double)micro * vstages * (1 + b + w);
    if (bubble)
        *bubble = T > 0 ? 1 - busy / T : 0;
    if (peak_act)
        *peak_act = max_peak(e, k);
    return STRATA_OK;
}
