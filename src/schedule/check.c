/* The checker: is a plan (generated or built by hand) one an executor can run to the end? In
 * order, and naming the first offending action: every action's fields (operation, chunk, micro-
 * batch, on the stage that holds the chunk, a peer that is the neighbouring chunk's stage);
 * dependencies within each stage's list (FWD after its input is computed or received, BWD after its
 * FWD and its output gradient, WGT after its BWD, SEND after what it sends); every unit's FWD, BWD
 * and WGT once; every message that crosses stages sent once and received once; the receives of
 * every channel in the order of its sends; and no deadlock, found by running the lists under the
 * header's semantics (a SEND never blocks, a RECV waits for its SEND) with a work list. Times are
 * simulate.c's. */
#include "base/base.h"
#include "schedule/schedule_internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct ck {
    const strata_pp_plan_t *p;
    int P, V, C, M;
    long units;
    int *pos[3];   /* [units] index of the unit's FWD, BWD, WGT in its stage's list; -1 none */
    int *send_at;  /* [2 units] index of a message's SEND in the producer's list; -1 none */
    int *recv_at;  /* [2 units] index of its RECV in the consumer's list */
    int *send_nth; /* [2 units] its place among the sends of its channel */
    int *recv_nth; /* [2 units] its place among the receives of its channel */
    int *nsend, *nrecv; /* [2P] per channel */
} ck_t;

#define FAIL(c, s, i, ...) fail_at(c, s, i, __VA_ARGS__)

static strata_status_t fail_at(const ck_t *c, int s, int i, const char *fmt, ...) ST_PRINTF(4, 5);
static strata_status_t fail_at(const ck_t *c, int s, int i, const char *fmt, ...)
{
    char who[96], what[400];
    st_pp_describe(s, i, &c->p->actions[s][i], who, sizeof who);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return st_error(STRATA_ERR_INVALID_ARG, "pipeline plan: %s: %s", who, what);
}

static int stage_of(const ck_t *c, int chunk)
{
    return strata_pp_chunk_stage(c->p->kind, c->P, c->V, chunk);
}

/* The message a SEND or RECV action moves: its id and the stages it goes between. */
static long message(const ck_t *c, const strata_pp_action_t *a, int *from, int *to, int s)
{
    const int ch = a->chunk;
    switch (a->op) {
    case STRATA_PP_SEND_ACT:
        *from = s, *to = stage_of(c, ch + 1);
        return st_pp_unit(c->C, a->mb, ch);
    case STRATA_PP_RECV_ACT:
        *from = stage_of(c, ch - 1), *to = s;
        return st_pp_unit(c->C, a->mb, ch - 1);
    case STRATA_PP_SEND_GRAD:
        *from = s, *to = stage_of(c, ch - 1);
        return c->units + st_pp_unit(c->C, a->mb, ch);
    default: /* RECV_GRAD */
        *from = stage_of(c, ch + 1), *to = s;
        return c->units + st_pp_unit(c->C, a->mb, ch + 1);
    }
}

/* Fields, duplicates, and where every action sits. */
static strata_status_t index_actions(ck_t *c)
{
    const strata_pp_plan_t *p = c->p;
    for (int s = 0; s < c->P; s++)
        for (int i = 0; i < p->count[s]; i++) {
            const strata_pp_action_t *a = &p->actions[s][i];
            if (a->op >= STRATA_PP_OP_COUNT)
                return st_error(STRATA_ERR_INVALID_ARG,
                                "pipeline plan: stage %d, action %d: unknown operation %d", s, i,
                                a->op);
            if (a->chunk < 0 || a->chunk >= c->C || a->mb < 0 || a->mb >= c->M)
                return FAIL(c, s, i, "expected chunk 0..%d and micro-batch 0..%d", c->C - 1,
                            c->M - 1);
            if (stage_of(c, a->chunk) != s)
                return FAIL(c, s, i, "chunk %d is on stage %d, not this one", a->chunk,
                            stage_of(c, a->chunk));
            const long u = st_pp_unit(c->C, a->mb, a->chunk);
            if (a->op <= STRATA_PP_WGT) {
                if (a->op == STRATA_PP_WGT && !p->split)
                    return FAIL(c, s, i, "a weight gradient in a plan that does not split the "
                                         "backward");
                int *at = &c->pos[a->op][u];
                if (*at >= 0)
                    return FAIL(c, s, i, "the unit's second %s (the first is action %d)",
                                strata_pp_op_name((strata_pp_op_t)a->op), *at);
                *at = i;
                continue;
            }
            const bool act = a->op == STRATA_PP_SEND_ACT || a->op == STRATA_PP_RECV_ACT;
            const bool sending = a->op == STRATA_PP_SEND_ACT || a->op == STRATA_PP_SEND_GRAD;
            const int other = a->chunk + ((act == sending) ? 1 : -1);
            if (other < 0 || other >= c->C)
                return FAIL(c, s, i, "chunk %d has no %s chunk to %s", a->chunk,
                            other < 0 ? "previous" : "next", sending ? "send to" : "receive from");
            if (stage_of(c, other) == s)
                return FAIL(c, s, i, "chunk %d is on this stage too: nothing crosses stages", other);
            if (a->peer != stage_of(c, other))
                return FAIL(c, s, i, "peer %d, but chunk %d is on stage %d", a->peer, other,
                            stage_of(c, other));
            int from = 0, to = 0;
            const long id = message(c, a, &from, &to, s);
            const int ch = st_pp_channel(c->P, from, to);
            int *at = sending ? &c->send_at[id] : &c->recv_at[id];
            if (*at >= 0)
                return FAIL(c, s, i, "the message's second %s (the first is action %d)",
                            sending ? "send" : "receive", *at);
            *at = i;
            if (sending)
                c->send_nth[id] = c->nsend[ch]++;
            else
                c->recv_nth[id] = c->nrecv[ch]++;
        }
    return STRATA_OK;
}

/* What action i needs (`what` is `done`) must happen at `at` of this list, before it. */
static strata_status_t before(const ck_t *c, int s, int i, int at, const char *what,
                              const char *done)
{
    if (at < 0)
        return FAIL(c, s, i, "%s is never %s", what, done);
    if (at > i)
        return FAIL(c, s, i, "%s is %s only at action %d, after it", what, done, at);
    return STRATA_OK;
}

/* Dependencies within each list, in list order. */
static strata_status_t dependencies(const ck_t *c)
{
    const strata_pp_plan_t *p = c->p;
    for (int s = 0; s < c->P; s++)
        for (int i = 0; i < p->count[s]; i++) {
            const strata_pp_action_t *a = &p->actions[s][i];
            const int ch = a->chunk, mb = a->mb;
            const long u = st_pp_unit(c->C, mb, ch);
            switch (a->op) {
            case STRATA_PP_FWD:
                if (ch > 0 && stage_of(c, ch - 1) == s)
                    ST_TRY(before(c, s, i, c->pos[STRATA_PP_FWD][u - 1],
                                  "its input activation (F of the chunk before)", "computed"));
                else if (ch > 0)
                    ST_TRY(before(c, s, i, c->recv_at[u - 1], "its input activation", "received"));
                break;
            case STRATA_PP_BWD:
                ST_TRY(before(c, s, i, c->pos[STRATA_PP_FWD][u], "its forward (F)", "run"));
                if (ch + 1 < c->C && stage_of(c, ch + 1) == s)
                    ST_TRY(before(c, s, i, c->pos[STRATA_PP_BWD][u + 1],
                                  "its output gradient (B of the chunk after)", "computed"));
                else if (ch + 1 < c->C)
                    ST_TRY(before(c, s, i, c->recv_at[c->units + u + 1],
                                  "its output gradient", "received"));
                break;
            case STRATA_PP_WGT:
                ST_TRY(before(c, s, i, c->pos[STRATA_PP_BWD][u], "its backward (B)", "run"));
                break;
            case STRATA_PP_SEND_ACT:
                ST_TRY(before(c, s, i, c->pos[STRATA_PP_FWD][u], "the activation it sends", "computed"));
                break;
            case STRATA_PP_SEND_GRAD:
                ST_TRY(before(c, s, i, c->pos[STRATA_PP_BWD][u], "the gradient it sends", "computed"));
                break;
            default: { /* a receive: someone must send it */
                int from = 0, to = 0;
                const long id = message(c, a, &from, &to, s);
                if (c->send_at[id] < 0)
                    return FAIL(c, s, i, "stage %d never sends it", from);
                break;
            }
            }
        }
    return STRATA_OK;
}

/* Every unit computed once on its stage, and every crossing output sent. */
static strata_status_t complete(const ck_t *c)
{
    static const char *const what[3] = {"forward (F)", "backward (B)", "weight gradient (W)"};
    for (int mb = 0; mb < c->M; mb++)
        for (int ch = 0; ch < c->C; ch++) {
            const long u = st_pp_unit(c->C, mb, ch);
            const int s = stage_of(c, ch);
            for (int op = 0; op < (c->p->split ? 3 : 2); op++)
                if (c->pos[op][u] < 0)
                    return st_error(STRATA_ERR_INVALID_ARG,
                                    "pipeline plan: stage %d never runs the %s of micro-batch %d on "
                                    "chunk %d",
                                    s, what[op], mb, ch);
            if (ch + 1 < c->C && stage_of(c, ch + 1) != s && c->send_at[u] < 0)
                return FAIL(c, s, c->pos[STRATA_PP_FWD][u],
                            "its output activation is never sent to stage %d", stage_of(c, ch + 1));
            if (ch > 0 && stage_of(c, ch - 1) != s && c->send_at[c->units + u] < 0)
                return FAIL(c, s, c->pos[STRATA_PP_BWD][u],
                            "its input gradient is never sent to stage %d", stage_of(c, ch - 1));
        }
    return STRATA_OK;
}

/* The receives of each channel in the order of its sends. */
static strata_status_t channel_order(const ck_t *c)
{
    for (int s = 0; s < c->P; s++)
        for (int i = 0; i < c->p->count[s]; i++) {
            const strata_pp_action_t *a = &c->p->actions[s][i];
            if (a->op != STRATA_PP_RECV_ACT && a->op != STRATA_PP_RECV_GRAD)
                continue;
            int from = 0, to = 0;
            const long id = message(c, a, &from, &to, s);
            if (c->recv_nth[id] != c->send_nth[id])
                return FAIL(c, s, i,
                            "out of order on the channel from stage %d: it is receive %d there, "
                            "but stage %d sends it as message %d (its action %d)",
                            from, c->recv_nth[id] + 1, from, c->send_nth[id] + 1, c->send_at[id]);
        }
    return STRATA_OK;
}

/* Runs the lists: a stage goes on until it reaches a RECV whose SEND has not been posted; a SEND
 * wakes the stage waiting on its channel. What is left unfinished is a deadlock. */
static strata_status_t run(const ck_t *c)
{
    const int P = c->P;
    strata_status_t rc = STRATA_OK;
    int *at = calloc((size_t)P, sizeof *at), *queue = malloc((size_t)P * sizeof *queue);
    int *posted = calloc(2 * (size_t)P, sizeof *posted);
    bool *queued = calloc((size_t)P, sizeof *queued);
    if (!at || !queue || !posted || !queued) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "pipeline plan: out of memory");
        goto done;
    }
    int head = 0, n = 0; /* a ring of the stages that may move */
    for (int s = 0; s < P; s++)
        queue[n++] = s, queued[s] = true;
    while (n > 0) {
        const int s = queue[head];
        head = (head + 1) % P, n--;
        queued[s] = false;
        for (; at[s] < c->p->count[s]; at[s]++) {
            const strata_pp_action_t *a = &c->p->actions[s][at[s]];
            if (a->op <= STRATA_PP_WGT)
                continue;
            int from = 0, to = 0;
            const long id = message(c, a, &from, &to, s);
            const int ch = st_pp_channel(P, from, to);
            if (a->op == STRATA_PP_RECV_ACT || a->op == STRATA_PP_RECV_GRAD) {
                if (posted[ch] <= c->recv_nth[id])
                    break; /* waits; the SEND wakes it */
                continue;
            }
            posted[ch]++;
            if (!queued[to] && at[to] < c->p->count[to]) {
                queue[(head + n++) % P] = to;
                queued[to] = true;
            }
        }
    }
    char msg[900];
    size_t used = 0;
    int blocked = 0;
    for (int s = 0; s < P; s++) {
        if (at[s] >= c->p->count[s])
            continue;
        const strata_pp_action_t *a = &c->p->actions[s][at[s]];
        int from = 0, to = 0;
        const long id = message(c, a, &from, &to, s);
        char who[96];
        st_pp_describe(s, at[s], a, who, sizeof who);
        if (blocked++ < 6 && used < sizeof msg) {
            int w = snprintf(msg + used, sizeof msg - used,
                             "%s%s waits for stage %d's send (its action %d, not reached: stage %d "
                             "stopped at action %d)",
                             blocked > 1 ? "; " : "", who, from, c->send_at[id], from, at[from]);
            used += w > 0 ? (size_t)w : 0;
        }
    }
    if (blocked)
        rc = st_error(STRATA_ERR_INVALID_ARG, "pipeline plan: deadlock, %d stage%s blocked: %s%s",
                      blocked, blocked > 1 ? "s" : "", msg, blocked > 6 ? "; ..." : "");
done:
    free(at), free(queue), free(posted), free(queued);
    return rc;
}

strata_status_t strata_pp_check(const strata_pp_plan_t *p)
{
    if (!p || !p->count || !p->actions)
        return st_error(STRATA_ERR_INVALID_ARG, "pipeline plan: empty (no lists)");
    ST_TRY(st_pp_validate(p->kind, p->stages, p->vstages, p->micro, p->micro));
    for (int s = 0; s < p->stages; s++)
        if (p->count[s] < 0 || (p->count[s] > 0 && !p->actions[s]))
            return st_error(STRATA_ERR_INVALID_ARG, "pipeline plan: stage %d has no list", s);
    ck_t c = {.p = p, .P = p->stages, .V = p->vstages, .C = p->stages * p->vstages, .M = p->micro};
    c.units = (long)c.M * c.C;
    const size_t n = (size_t)c.units, n2 = 2 * n;
    int *block = malloc((3 * n + 4 * n2) * sizeof *block + 1);
    c.nsend = calloc(4 * (size_t)c.P, sizeof *c.nsend);
    if (!block || !c.nsend) {
        free(block), free(c.nsend);
        return st_error(STRATA_ERR_NO_MEMORY, "pipeline plan: out of memory");
    }
    c.nrecv = c.nsend + 2 * c.P;
    for (size_t k = 0; k < 3 * n + 4 * n2; k++)
        block[k] = -1;
    c.pos[0] = block, c.pos[1] = block + n, c.pos[2] = block + 2 * n;
    c.send_at = block + 3 * n, c.recv_at = c.send_at + n2;
    c.send_nth = c.recv_at + n2, c.recv_nth = c.send_nth + n2;
    strata_status_t rc = index_actions(&c);
    if (rc == STRATA_OK)
        rc = dependencies(&c);
    if (rc == STRATA_OK)
        rc = complete(&c);
    if (rc == STRATA_OK)
        rc = channel_order(&c);
    if (rc == STRATA_OK)
        rc = run(&c);
    free(block), free(c.nsend);
    return rc;
}
