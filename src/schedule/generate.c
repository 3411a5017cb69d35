/* The generator: every stage's list of actions for a schedule. First the compute order of each
 * stage (st_pp_order: the schedule itself, as Megatron-LM, Qi et al. and PyTorch define it), then
 * the messages that order implies: a SEND right after the action producing data another stage
 * needs, a RECV right before the action needing it, and before that RECV those its channel
 * delivers first (sent earlier, so already on their way). The lists are checked (check.c) before
 * they are handed out. Timing them is simulate.c's and bubble.c's business. */
#include "base/base.h"
#include "schedule/schedule_internal.h"

#include <stdlib.h>
#include <string.h>

int st_pp_order_len(strata_schedule_t kind, int vstages, int micro)
{
    return micro * vstages * (strata_schedule_splits_backward(kind) ? 3 : 2);
}

typedef struct emit {
    strata_pp_action_t *out;
    int n;
    int micro; /* actions of micro-batches >= micro are dropped (ZB-V's pattern for few) */
} emit_t;

static void put(emit_t *e, strata_pp_op_t op, int mb, int chunk)
{
    if (mb < e->micro)
        e->out[e->n++] = (strata_pp_action_t){
            .op = (uint8_t)op, .chunk = (int16_t)chunk, .mb = mb, .peer = -1};
}

/* GPipe: every forward, then every backward. */
static void gpipe(emit_t *e, int s, int M)
{
    for (int m = 0; m < M; m++)
        put(e, STRATA_PP_FWD, m, s);
    for (int m = 0; m < M; m++)
        put(e, STRATA_PP_BWD, m, s);
}

/* 1F1B (PipeDream-Flush): P-1-s warm-up forwards on stage s, then one forward one backward, then
 * the remaining backwards. ZB-H1 is the same with each weight gradient run s steps after its
 * backward, so every stage holds at most P micro-batches and the last ones fill the drain. */
static void one_f_one_b(emit_t *e, int P, int s, int M, bool zb)
{
    int warm = P - 1 - s < M ? P - 1 - s : M;
    int f = 0, b = 0, w = 0;
    while (f < warm)
        put(e, STRATA_PP_FWD, f++, s);
    while (b < M) {
        if (f < M)
            put(e, STRATA_PP_FWD, f++, s);
        put(e, STRATA_PP_BWD, b++, s);
        if (zb && b - w > s)
            put(e, STRATA_PP_WGT, w++, s);
    }
    while (zb && w < M)
        put(e, STRATA_PP_WGT, w++, s);
}

/* Megatron-LM's interleaved 1F1B: forward unit k runs micro-batch (k / PV) P + k % P on the stage's
 * chunk (k / P) % V, backwards visit the chunks in reverse; 2(P-1-s) + (V-1)P warm-up units. */
static void interleaved(emit_t *e, int P, int V, int s, int M)
{
    const int total = M * V;
    int warm = 2 * (P - 1 - s) + (V - 1) * P;
    if (warm > total)
        warm = total;
#define UNIT_MB(k)  ((k) / (P * V) * P + (k) % P)
#define UNIT_FWD(k) (((k) / P % V) * P + s)
#define UNIT_BWD(k) ((V - 1 - (k) / P % V) * P + s)
    int f = 0, b = 0;
    for (; f < warm; f++)
        put(e, STRATA_PP_FWD, UNIT_MB(f), UNIT_FWD(f));
    for (; f < total; f++, b++) {
        put(e, STRATA_PP_FWD, UNIT_MB(f), UNIT_FWD(f));
        put(e, STRATA_PP_BWD, UNIT_MB(b), UNIT_BWD(b));
    }
    for (; b < total; b++)
        put(e, STRATA_PP_BWD, UNIT_MB(b), UNIT_BWD(b));
#undef UNIT_MB
#undef UNIT_FWD
#undef UNIT_BWD
}

/* ZB-V (Qi et al.), in the order of PyTorch's ScheduleZBVZeroBubble: stage s holds chunk s on the
 * way down and chunk 2P-1-s on the way up. The pattern is laid out for n = max(M, 2P-1)
 * micro-batches and those beyond M are dropped (the rest keep their order, so it stays valid). */
static void zb_v(emit_t *e, int P, int s, int M)
{
    const int n = M > 2 * P - 1 ? M : 2 * P - 1;
    const int c0 = s, c1 = 2 * P - 1 - s;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    for (int i = 0; i < 2 * (P - s) - 1; i++)
        put(e, STRATA_PP_FWD, f0++, c0);
    for (int i = 0; i < s; i++) {
        put(e, STRATA_PP_FWD, f1++, c1);
        put(e, STRATA_PP_FWD, f0++, c0);
    }
    for (int i = 0; i < P - s; i++) {
        put(e, STRATA_PP_FWD, f1++, c1);
        put(e, STRATA_PP_BWD, b1, c1);
        put(e, STRATA_PP_WGT, b1++, c1);
    }
    while (f1 < f0 || f0 < n) { /* steady: F0 B0 W0 F1 B1 W1 */
        if (f0 < n)
            put(e, STRATA_PP_FWD, f0++, c0);
        put(e, STRATA_PP_BWD, b0, c0);
        put(e, STRATA_PP_WGT, b0++, c0);
        put(e, STRATA_PP_FWD, f1++, c1);
        put(e, STRATA_PP_BWD, b1, c1);
        put(e, STRATA_PP_WGT, b1++, c1);
    }
    int w0 = b0, w1 = b1;
    for (int i = 0; i < s; i++) { /* cool-down: weight gradients wait for the drain */
        put(e, STRATA_PP_BWD, b0++, c0);
        put(e, STRATA_PP_BWD, b1++, c1);
    }
    for (int i = 0; i < P - s; i++) {
        put(e, STRATA_PP_BWD, b0++, c0);
        put(e, STRATA_PP_WGT, w0++, c0);
    }
    while (w1 < b1)
        put(e, STRATA_PP_WGT, w1++, c1);
    while (w0 < b0)
        put(e, STRATA_PP_WGT, w0++, c0);
}

int st_pp_order(strata_schedule_t kind, int P, int V, int M, int s, strata_pp_action_t *out)
{
    emit_t e = {out, 0, M};
    switch (kind) {
    case STRATA_SCHED_GPIPE:
        gpipe(&e, s, M);
        break;
    case STRATA_SCHED_1F1B:
    case STRATA_SCHED_ZB_H1:
        one_f_one_b(&e, P, s, M, kind == STRATA_SCHED_ZB_H1);
        break;
    case STRATA_SCHED_INTERLEAVED:
        interleaved(&e, P, V, s, M);
        break;
    case STRATA_SCHED_ZB_V:
        zb_v(&e, P, s, M);
        break;
    default:
        break;
    }
    return e.n;
}

/* ---- messages ------------------------------------------------------------------------------- */

/* Message ids: the output activation of unit u is u, the input gradient of unit u is units + u. */
typedef struct msgs {
    int P, C;
    long units;
    int *off;   /* [2P + 1] start of each channel in seq */
    long *seq;  /* message ids in the order their channel carries them */
    int *where; /* [2 units] position of a message in its channel */
} msgs_t;

/* The message a compute action produces for another stage (-1: none) and the stage it goes to. */
static long produced(const msgs_t *g, strata_schedule_t kind, int V, int s,
                     const strata_pp_action_t *a, int *to)
{
    const int c = a->chunk;
    if (a->op == STRATA_PP_FWD && c + 1 < g->C &&
        (*to = strata_pp_chunk_stage(kind, g->P, V, c + 1)) != s)
        return st_pp_unit(g->C, a->mb, c);
    if (a->op == STRATA_PP_BWD && c > 0 && (*to = strata_pp_chunk_stage(kind, g->P, V, c - 1)) != s)
        return g->units + st_pp_unit(g->C, a->mb, c);
    return -1;
}

/* The message a compute action needs from another stage (-1: none) and the stage it comes from. */
static long needed(const msgs_t *g, strata_schedule_t kind, int V, int s,
                   const strata_pp_action_t *a, int *from)
{
    const int c = a->chunk;
    if (a->op == STRATA_PP_FWD && c > 0 &&
        (*from = strata_pp_chunk_stage(kind, g->P, V, c - 1)) != s)
        return st_pp_unit(g->C, a->mb, c - 1);
    if (a->op == STRATA_PP_BWD && c + 1 < g->C &&
        (*from = strata_pp_chunk_stage(kind, g->P, V, c + 1)) != s)
        return g->units + st_pp_unit(g->C, a->mb, c + 1);
    return -1;
}

static strata_pp_action_t recv_of(const msgs_t *g, long id, int from)
{
    const bool grad = id >= g->units;
    const long u = grad ? id - g->units : id;
    const int mb = (int)(u / g->C), c = (int)(u % g->C);
    return (strata_pp_action_t){.op = grad ? STRATA_PP_RECV_GRAD : STRATA_PP_RECV_ACT,
                                .chunk = (int16_t)(grad ? c - 1 : c + 1),
                                .mb = mb,
                                .peer = (int16_t)from};
}

void strata_pp_plan_free(strata_pp_plan_t *p)
{
    if (!p)
        return;
    for (int s = 0; p->actions && s < p->stages; s++)
        free(p->actions[s]);
    free(p->actions);
    free(p->count);
    memset(p, 0, sizeof *p);
}

strata_status_t strata_pp_generate(strata_schedule_t kind, int P, int V, int M,
                                   strata_pp_plan_t *out)
{
    if (!out)
        return st_error(STRATA_ERR_INVALID_ARG, "pipeline schedule: no plan to fill");
    memset(out, 0, sizeof *out);
    ST_TRY(st_pp_validate(kind, P, V, M, M));
    const int per = st_pp_order_len(kind, V, M);
    msgs_t g = {.P = P, .C = P * V, .units = (long)M * P * V};
    strata_status_t rc = STRATA_OK;
    strata_pp_action_t *order = malloc((size_t)P * per * sizeof *order);
    int *len = calloc((size_t)P, sizeof *len), *extra = calloc((size_t)P, sizeof *extra);
    int *cursor = calloc(2 * (size_t)P, sizeof *cursor);
    g.off = calloc(2 * (size_t)P + 1, sizeof *g.off);
    g.seq = malloc(2 * (size_t)g.units * sizeof *g.seq + 1);
    g.where = malloc(2 * (size_t)g.units * sizeof *g.where + 1);
    out->count = calloc((size_t)P, sizeof *out->count);
    out->actions = calloc((size_t)P, sizeof *out->actions);
    if (!order || !len || !extra || !cursor || !g.off || !g.seq || !g.where || !out->count ||
        !out->actions) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "pipeline schedule: out of memory");
        goto done;
    }
    out->kind = kind;
    out->stages = P;
    out->vstages = V;
    out->micro = M;
    out->split = strata_schedule_splits_backward(kind);

    // Compute orders; then each channel's messages in the order their producer runs.
    for (int s = 0; s < P; s++)
        len[s] = st_pp_order(kind, P, V, M, s, order + (size_t)s * per);
    for (int pass = 0; pass < 2; pass++) {
        int *fill = cursor; /* pass 0 counts into off[ch + 1], pass 1 places */
        if (pass == 1) {
            for (int ch = 0; ch < 2 * P; ch++)
                g.off[ch + 1] += g.off[ch];
            memset(fill, 0, 2 * (size_t)P * sizeof *fill);
        }
        for (int s = 0; s < P; s++)
            for (int i = 0; i < len[s]; i++) {
                int to = -1;
                long id = produced(&g, kind, V, s, &order[(size_t)s * per + i], &to);
                if (id < 0)
                    continue;
                int ch = st_pp_channel(P, s, to);
                if (pass == 0) {
                    g.off[ch + 1]++;
                    extra[s]++;   /* the SEND */
                    extra[to]++;  /* the RECV */
                } else {
                    g.where[id] = fill[ch];
                    g.seq[g.off[ch] + fill[ch]++] = id;
                }
            }
    }

    // The lists: compute actions with their receives before and their sends after.
    for (int s = 0; s < P; s++) {
        strata_pp_action_t *list = malloc(((size_t)len[s] + extra[s]) * sizeof *list + 1);
        if (!list) {
            rc = st_error(STRATA_ERR_NO_MEMORY, "pipeline schedule: out of memory");
            goto done;
        }
        out->actions[s] = list;
        int n = 0;
        memset(cursor, 0, 2 * (size_t)P * sizeof *cursor);
        for (int i = 0; i < len[s]; i++) {
            const strata_pp_action_t *a = &order[(size_t)s * per + i];
            int from = -1, to = -1;
            long id = needed(&g, kind, V, s, a, &from);
            if (id >= 0) {
                int ch = st_pp_channel(P, from, s);
                while (cursor[ch] <= g.where[id])
                    list[n++] = recv_of(&g, g.seq[g.off[ch] + cursor[ch]++], from);
            }
            list[n++] = *a;
            id = produced(&g, kind, V, s, a, &to);
            if (id >= 0) {
                strata_pp_action_t send = *a;
                send.op = a->op == STRATA_PP_FWD ? STRATA_PP_SEND_ACT : STRATA_PP_SEND_GRAD;
                send.peer = (int16_t)to;
                list[n++] = send;
            }
        }
        out->count[s] = n;
    }
    rc = strata_pp_check(out);
    if (rc < 0) { /* a generator bug: say which lists */
        char why[768];
        snprintf(why, sizeof why, "%s", strata_last_error());
        rc = st_error(STRATA_ERR_INTERNAL,
                      "generated %s schedule (P=%d V=%d M=%d) fails its check: %s",
                      strata_schedule_name(kind), P, V, M, why);
    }
done:
    free(order), free(len), free(extra), free(cursor), free(g.off), free(g.seq), free(g.where);
    if (rc < 0)
        strata_pp_plan_free(out);
    return rc;
}
