/* The event simulation of a plan: every stage runs its list in order under the header's
 * semantics, with the given durations. A compute action starts when its stage is free (its inputs
 * are on the stage by then: local ones were computed earlier in the list, remote ones received by
 * an earlier RECV); a SEND is posted when its stage reaches it and costs the stage nothing; a RECV
 * holds its stage until the data has arrived, p2p_s after its SEND was posted. Stages are advanced
 * with the checker's work list (a RECV waits for its SEND to be processed), so times never depend
 * on the order the stages are visited in. Activation memory: a FWD allocates act_bytes, a BWD frees
 * it, keeping wgt_bytes until the WGT of split schedules. The plan is checked first. */
#include "base/base.h"
#include "schedule/schedule_internal.h"

#include <stdlib.h>
#include <string.h>

void strata_pp_timeline_free(strata_pp_timeline_t *t)
{
    if (!t)
        return;
    for (int s = 0; t->spans && s < t->stages; s++)
        free(t->spans[s]);
    free(t->spans);
    free(t->count);
    free(t->busy_s);
    free(t->bubble);
    free(t->peak_act);
    memset(t, 0, sizeof *t);
}

static double at_or(const double *v, int i, double fallback)
{
    return v ? v[i] : fallback;
}

strata_status_t strata_pp_simulate(const strata_pp_plan_t *p, const strata_pp_costs_t *c,
                                   strata_pp_timeline_t *out)
{
    if (!out)
        return st_error(STRATA_ERR_INVALID_ARG, "pipeline simulation: no timeline to fill");
    memset(out, 0, sizeof *out);
    ST_TRY(strata_pp_check(p));
    static const strata_pp_costs_t none = {0};
    if (!c)
        c = &none;
    const int P = p->stages, C = p->stages * p->vstages;
    const double *const arrays[] = {c->fwd_s, c->bwd_s, c->wgt_s, c->act_bytes, c->wgt_bytes};
    static const char *const names[] = {"fwd_s", "bwd_s", "wgt_s", "act_bytes", "wgt_bytes"};
    for (int k = 0; k < 5; k++)
        for (int ch = 0; arrays[k] && ch < C; ch++)
            if (!(arrays[k][ch] >= 0) || arrays[k][ch] > 1e300)
                return st_error(STRATA_ERR_INVALID_ARG,
                                "pipeline simulation: expected %s[%d] >= 0 and finite, got %g",
                                names[k], ch, arrays[k][ch]);
    if (!(c->p2p_s >= 0) || c->p2p_s > 1e300)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "pipeline simulation: expected p2p_s >= 0 and finite, got %g", c->p2p_s);
    const long units = (long)p->micro * C;
    const double hop = c->p2p_s;
    strata_status_t rc = STRATA_OK;
    double *clock = calloc((size_t)P, sizeof *clock), *mem = calloc((size_t)P, sizeof *mem);
    double *sent = malloc(2 * (size_t)units * sizeof *sent + 1);
    int *at = calloc((size_t)P, sizeof *at), *queue = malloc((size_t)P * sizeof *queue);
    int *nspan = calloc((size_t)P, sizeof *nspan);
    bool *queued = calloc((size_t)P, sizeof *queued);
    out->stages = P;
    out->count = calloc((size_t)P, sizeof *out->count);
    out->spans = calloc((size_t)P, sizeof *out->spans);
    out->busy_s = calloc((size_t)P, sizeof *out->busy_s);
    out->bubble = calloc((size_t)P, sizeof *out->bubble);
    out->peak_act = calloc((size_t)P, sizeof *out->peak_act);
    if (!clock || !mem || !sent || !at || !queue || !nspan || !queued || !out->count ||
        !out->spans || !out->busy_s || !out->bubble || !out->peak_act) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "pipeline simulation: out of memory");
        goto done;
    }
    for (int s = 0; s < P; s++) {
        int n = 0;
        for (int i = 0; i < p->count[s]; i++)
            n += p->actions[s][i].op <= STRATA_PP_WGT;
        out->spans[s] = malloc((size_t)n * sizeof *out->spans[s] + 1);
        if (!out->spans[s]) {
            rc = st_error(STRATA_ERR_NO_MEMORY, "pipeline simulation: out of memory");
            goto done;
        }
    }
    for (long k = 0; k < 2 * units; k++)
        sent[k] = -1;

    int head = 0, n = 0;
    for (int s = 0; s < P; s++)
        queue[n++] = s, queued[s] = true;
    while (n > 0) {
        const int s = queue[head];
        head = (head + 1) % P, n--;
        queued[s] = false;
        for (; at[s] < p->count[s]; at[s]++) {
            const strata_pp_action_t *a = &p->actions[s][at[s]];
            const int ch = a->chunk;
            const long u = st_pp_unit(C, a->mb, ch);
            switch (a->op) {
            case STRATA_PP_FWD:
            case STRATA_PP_BWD:
            case STRATA_PP_WGT: {
                const double *d = a->op == STRATA_PP_FWD ? c->fwd_s
                                  : a->op == STRATA_PP_BWD ? c->bwd_s
                                                           : c->wgt_s;
                const double start = clock[s], dur = at_or(d, ch, 0);
                clock[s] = start + dur;
                out->spans[s][nspan[s]++] = (strata_pp_span_t){start, clock[s], a->op, a->chunk,
                                                               a->mb};
                out->busy_s[s] += dur;
                const double act = at_or(c->act_bytes, ch, 1), wgt = at_or(c->wgt_bytes, ch, 1);
                if (a->op == STRATA_PP_FWD)
                    mem[s] += act;
                else if (a->op == STRATA_PP_BWD)
                    mem[s] -= p->split ? act - wgt : act;
                else
                    mem[s] -= wgt;
                if (mem[s] > out->peak_act[s])
                    out->peak_act[s] = mem[s];
                break;
            }
            case STRATA_PP_SEND_ACT:
            case STRATA_PP_SEND_GRAD: {
                const long id = a->op == STRATA_PP_SEND_ACT ? u : units + u;
                sent[id] = clock[s];
                if (!queued[a->peer] && at[a->peer] < p->count[a->peer]) {
                    queue[(head + n++) % P] = a->peer;
                    queued[a->peer] = true;
                }
                break;
            }
            default: { /* a receive: wait for its send, then for the data */
                const long id = a->op == STRATA_PP_RECV_ACT ? u - 1 : units + u + 1;
                if (sent[id] < 0)
                    goto next_stage; /* the send will wake this stage */
                if (sent[id] + hop > clock[s])
                    clock[s] = sent[id] + hop;
                break;
            }
            }
        }
    next_stage:;
    }
    for (int s = 0; s < P; s++) {
        out->count[s] = nspan[s];
        for (int i = 0; i < nspan[s]; i++)
            if (out->spans[s][i].end > out->makespan)
                out->makespan = out->spans[s][i].end;
    }
    for (int s = 0; s < P; s++) {
        out->bubble[s] = out->makespan > 0 ? 1 - out->busy_s[s] / out->makespan : 0;
        out->bubble_mean += out->bubble[s] / P;
    }
done:
    free(clock), free(mem), free(sent), free(at), free(queue), free(nspan), free(queued);
    if (rc < 0)
        strata_pp_timeline_free(out);
    return rc;
}
