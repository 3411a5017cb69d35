/* The pipeline executor (strata/pipeline.h): one stage's action list of a generated schedule, run
 * over the stage's model chunks with non-blocking point-to-point messages, every idle interval
 * recorded, the next one predicted from the schedule simulated with measured durations. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

#include "base/base.h"
#include "strata/pipeline.h"
#include "strata/trace.h"

struct strata_pipeline {
    strata_comm_t *comm;
    strata_pipeline_config_t cfg;
    int stage, P, V, M, C; /* C: chunks in all */
    strata_pp_plan_t plan;
    strata_gpt_t *model;   /* this stage's V chunks */
    int *local;            /* [C] chunk -> its index among the stage's chunks, or -1 */
    size_t msg;            /* floats of one activation or gradient message */
    float *act_in, *grad_in, *grad_out; /* [M][V][msg] */
    strata_request_t **rreq, **sreq;    /* per action of this stage */
    /* the step just run */
    double t0;
    strata_pp_span_t *spans;
    int nspans;
    strata_pp_bubble_t *bubbles;
    int nbubbles, maxbubbles;
    strata_pipeline_stats_t stats;
    strata_pp_timeline_t predicted; /* the schedule simulated with the durations */
    bool have_predicted;
    strata_pipeline_bubble_fn hook;
    void *hook_ctx;
    double *last_wait;            /* [n] the wait for action i's data in the last step (s) */
    strata_request_t **waiting;   /* the request the hook's bubble waits on */
    double arrived;               /* when bubble_over first saw it complete (0: not yet) */
    strata_status_t err;   /* a request completed with an error by progress, for its wait */
    char errmsg[512];
};

static double now_s(void)
{
    return (double)st_now_ns() * 1e-9;
}

static size_t mem_free(void)
{
    struct sysinfo si;
    if (sysinfo(&si) != 0)
        return 0;
    return (size_t)si.freeram * si.mem_unit + (size_t)si.bufferram * si.mem_unit;
}

static float *buf(const strata_pipeline_t *p, float *base, int mb, int k)
{
    return base + ((size_t)mb * p->V + (size_t)k) * p->msg;
}

static int tag(const strata_pipeline_t *p, int grad, int mb, int chunk)
{
    return (grad * p->M + mb) * p->C + chunk;
}

strata_status_t strata_pipeline_create(strata_comm_t *pp_comm, const strata_pipeline_config_t *cfg,
                                       strata_pipeline_t **out)
{
    *out = NULL;
    if (!cfg->model || cfg->vstages < 1 || cfg->micro < 1 || cfg->rows < 1 || cfg->seq < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "pipeline: chunks, vstages, micro-batches, rows "
                        "and seq are required");
    strata_pipeline_t *p = calloc(1, sizeof *p);
    if (!p)
        return st_error(STRATA_ERR_NO_MEMORY, "pipeline: out of memory");
    p->comm = pp_comm;
    p->cfg = *cfg;
    p->stage = strata_comm_rank(pp_comm);
    p->P = strata_comm_size(pp_comm);
    p->V = cfg->vstages;
    p->M = cfg->micro;
    p->C = p->P * p->V;
    strata_status_t rc = strata_pp_generate(cfg->schedule, p->P, p->V, p->M, &p->plan);
    if (rc < 0) {
        free(p);
        return rc;
    }
    p->model = cfg->model;
    p->local = malloc((size_t)p->C * sizeof *p->local);
    int n = p->plan.count[p->stage];
    p->rreq = calloc((size_t)n + 1, sizeof *p->rreq);
    p->sreq = calloc((size_t)n + 1, sizeof *p->sreq);
    p->spans = calloc((size_t)n + 1, sizeof *p->spans);
    p->last_wait = calloc((size_t)n + 1, sizeof *p->last_wait);
    p->maxbubbles = n + 1;
    p->bubbles = calloc((size_t)p->maxbubbles, sizeof *p->bubbles);
    if (!p->local || !p->rreq || !p->sreq || !p->spans || !p->bubbles ||
        !p->last_wait) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "pipeline: out of memory");
        goto fail;
    }
    int held = 0;
    for (int c = 0; c < p->C; c++) {
        bool here = strata_pp_chunk_stage(cfg->schedule, p->P, p->V, c) == p->stage;
        p->local[c] = here ? held++ : -1;
    }
    const strata_gpt_shard_t *sh = strata_model_shard(p->model);
    size_t N = (size_t)cfg->rows * cfg->seq, C = (size_t)strata_model_config(p->model)->d_model;
    p->msg = (sh->sp ? N / (size_t)sh->tp : N) * C;
    int nch = sh->layers.n ? sh->layers.n : 1;
    if (held != p->V || nch != p->V || sh->slots < p->V * p->M ||
        sh->split_backward != p->plan.split) {
        rc = st_error(STRATA_ERR_INVALID_ARG, "pipeline: stage %d's model holds %d chunks with %d "
                      "activation slots and a %s backward; the %s schedule of %d micro-batches "
                      "needs %d chunks (%d here), %d slots and a %s one", p->stage, nch,
                      sh->slots, sh->split_backward ? "split" : "whole",
                      strata_schedule_name(cfg->schedule), p->M, p->V, held, p->V * p->M,
                      p->plan.split ? "split" : "whole");
        goto fail;
    }
    size_t each = (size_t)p->M * p->V * p->msg;
    p->act_in = malloc(each * sizeof(float));
    p->grad_in = malloc(each * sizeof(float));
    p->grad_out = malloc(each * sizeof(float));
    if (!p->act_in || !p->grad_in || !p->grad_out) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "pipeline: out of memory for %zu message floats",
                      3 * each);
        goto fail;
    }
    *out = p;
    return STRATA_OK;
fail:
    strata_pipeline_destroy(p);
    return rc;
}

static void release_requests(strata_pipeline_t *p)
{
    int n = p->plan.count ? p->plan.count[p->stage] : 0;
    for (int i = 0; i < n; i++) { // after an error: whatever is left
        if (p->rreq && p->rreq[i])
            (void)strata_request_wait(p->rreq[i]);
        if (p->sreq && p->sreq[i])
            (void)strata_request_wait(p->sreq[i]);
        if (p->rreq)
            p->rreq[i] = NULL;
        if (p->sreq)
            p->sreq[i] = NULL;
    }
}

void strata_pipeline_destroy(strata_pipeline_t *p)
{
    if (!p)
        return;
    release_requests(p);
    strata_pp_plan_free(&p->plan);
    strata_pp_timeline_free(&p->predicted);
    free(p->local);
    free(p->rreq);
    free(p->sreq);
    free(p->spans);
    free(p->bubbles);
    free(p->last_wait);
    free(p->act_in);
    free(p->grad_in);
    free(p->grad_out);
    free(p);
}

const strata_pp_plan_t *strata_pipeline_plan(const strata_pipeline_t *p)
{
    return &p->plan;
}

void strata_pipeline_set_bubble_hook(strata_pipeline_t *p, strata_pipeline_bubble_fn fn, void *ctx)
{
    p->hook = fn;
    p->hook_ctx = ctx;
}

/* The predicted gap before this stage's k-th compute span (0 when none). */
static bool predicted_gap(const strata_pipeline_t *p, int span_index, double *dur)
{
    if (!p->have_predicted)
        return false;
    int n = p->predicted.count[p->stage];
    const strata_pp_span_t *s = p->predicted.spans[p->stage];
    if (span_index >= n)
        return false;
    double prev = span_index > 0 ? s[span_index - 1].end : 0;
    *dur = s[span_index].start - prev;
    return *dur > 0;
}

bool strata_pipeline_next_bubble(const strata_pipeline_t *p, strata_pp_bubble_t *out)
{
    if (!p->have_predicted)
        return false;
    int n = p->predicted.count[p->stage];
    for (int k = p->nspans; k < n; k++) {
        double d;
        if (predicted_gap(p, k, &d)) {
            const strata_pp_span_t *s = &p->predicted.spans[p->stage][k];
            *out = (strata_pp_bubble_t){.start_s = s->start - d, .dur_s = d, .mb = s->mb,
                                        .chunk = s->chunk, .peer = -1,
                                        .waits_for = s->op == STRATA_PP_FWD ? STRATA_PP_RECV_ACT
                                                                            : STRATA_PP_RECV_GRAD,
                                        .mem_free = mem_free()};
            return true;
        }
    }
    return false;
}

/* Tests request *r without blocking; a completed one is released (its error kept for its wait).
 * Returns true when *r is complete or absent. */
static bool poll_request(strata_pipeline_t *p, strata_request_t **r)
{
    bool done = false;
    if (!*r)
        return true;
    strata_status_t rc = strata_request_test(*r, &done);
    if (!done)
        return false; // an error not yet final surfaces at the wait
    *r = NULL;
    if (rc < 0 && p->err == STRATA_OK) {
        p->err = rc;
        snprintf(p->errmsg, sizeof p->errmsg, "%s", strata_last_error());
    }
    return true;
}

/* Waits for request *r (the receive of action i, or one of the step's sends: i = -1), recording the
 * idle time and the wait's length for the next step's prediction. */
static strata_status_t wait_idle(strata_pipeline_t *p, strata_request_t **r, int i)
{
    const strata_pp_action_t *a = i >= 0 ? &p->plan.actions[p->stage][i] : NULL;
    if (!*r) { // done already (progress), or never posted
        if (a)
            p->last_wait[i] = 0;
        return p->err == STRATA_OK ? STRATA_OK : st_error(p->err, "%s", p->errmsg);
    }
    strata_pp_bubble_t b = {.start_s = now_s() - p->t0, .waits_for = a ? a->op : STRATA_PP_SEND_ACT,
                            .mb = a ? a->mb : -1, .chunk = a ? a->chunk : -1,
                            .peer = a ? a->peer : -1, .mem_free = mem_free()};
    p->arrived = 0;
    if (p->hook && a) {
        strata_pp_bubble_t pred = b;
        double d = 0;
        pred.dur_s = ST_MAX(predicted_gap(p, p->nspans, &d) ? d : 0, p->last_wait[i]);
        p->waiting = r;
        p->hook(p->hook_ctx, &pred);
        p->waiting = NULL;
    }
    strata_trace_begin("pipeline", "pp.bubble");
    strata_status_t rc = *r ? strata_request_wait(*r) : STRATA_OK;
    if (!*r && p->err < 0) // the hook's poll completed it with an error
        rc = st_error(p->err, "%s", p->errmsg);
    strata_trace_end("pipeline", "pp.bubble");
    *r = NULL;
    double end = now_s();
    b.dur_s = end - p->t0 - b.start_s;
    if (a) // when the data arrived: the poll saw it, or the wait returned
        p->last_wait[i] = (p->arrived > 0 ? p->arrived : end) - p->t0 - b.start_s;
    if (p->nbubbles < p->maxbubbles)
        p->bubbles[p->nbubbles++] = b;
    return rc;
}

bool strata_pipeline_bubble_over(strata_pipeline_t *p)
{
    if (!p->waiting)
        return true;
    if (p->arrived > 0)
        return true;
    if (!poll_request(p, p->waiting))
        return false;
    p->arrived = now_s();
    return true;
}

void strata_pipeline_progress(strata_pipeline_t *p)
{
    int n = p->plan.count[p->stage];
    for (int i = 0; i < n; i++) { // a completed request stays until its wait, which then returns at once
        poll_request(p, &p->rreq[i]);
        poll_request(p, &p->sreq[i]);
    }
}

/* Posts the receive of action i. */
static strata_status_t post_recv(strata_pipeline_t *p, int i)
{
    const strata_pp_action_t *a = &p->plan.actions[p->stage][i];
    int k = p->local[a->chunk], grad = a->op == STRATA_PP_RECV_GRAD;
    float *dst = buf(p, grad ? p->grad_in : p->act_in, a->mb, k);
    // A gradient received for chunk c is the gradient of c's output, sent by chunk c+1's stage.
    int src_chunk = grad ? a->chunk + 1 : a->chunk - 1;
    return strata_irecv(p->comm, dst, p->msg, STRATA_DTYPE_F32, a->peer,
                        tag(p, grad, a->mb, src_chunk), &p->rreq[i]);
}

static void span_done(strata_pipeline_t *p, const strata_pp_action_t *a, double start)
{
    double end = now_s() - p->t0;
    p->spans[p->nspans++] = (strata_pp_span_t){start, end, a->op, a->chunk, a->mb};
    p->stats.busy_s += end - start;
}

static strata_status_t run_action(strata_pipeline_t *p, int i, strata_pipeline_batch_fn batch,
                                  void *ctx, double *loss_sum)
{
    const strata_pp_action_t *a = &p->plan.actions[p->stage][i];
    int c = a->chunk, mb = a->mb, k = p->local[c], slot = k * p->M + mb;
    strata_gpt_t *m = p->model;
    if (k < 0)
        return st_error(STRATA_ERR_INTERNAL, "pipeline: stage %d has no chunk %d", p->stage, c);
    double start = now_s() - p->t0;
    switch ((strata_pp_op_t)a->op) {
    case STRATA_PP_FWD: {
        const int32_t *tok = NULL, *tgt = NULL;
        if (c == 0 || c == p->C - 1)
            ST_TRY(batch(ctx, mb, &tok, &tgt));
        const float *in = NULL;
        if (c > 0)
            in = p->local[c - 1] >= 0
                     ? strata_model_chunk_output(m, p->local[c - 1] * p->M + mb)
                     : buf(p, p->act_in, mb, k);
        float loss = 0;
        strata_trace_begin("pipeline", "pp.fwd");
        strata_status_t rc = strata_model_forward_chunk(m, k, slot, c == 0 ? tok : NULL, in,
                                                        c == p->C - 1 ? tgt : NULL, p->cfg.rows,
                                                        p->cfg.seq, &loss);
        strata_trace_end("pipeline", "pp.fwd");
        ST_TRY(rc);
        if (c == p->C - 1)
            *loss_sum += loss;
        span_done(p, a, start);
        return STRATA_OK;
    }
    case STRATA_PP_BWD: {
        const float *dout = NULL;
        if (c < p->C - 1)
            dout = buf(p, p->local[c + 1] >= 0 ? p->grad_out : p->grad_in, mb,
                       p->local[c + 1] >= 0 ? p->local[c + 1] : k);
        strata_trace_begin("pipeline", "pp.bwd");
        strata_status_t rc = strata_model_backward_chunk(m, slot, dout, 1.f / (float)p->M);
        strata_trace_end("pipeline", "pp.bwd");
        ST_TRY(rc);
        if (c > 0) // kept for the previous chunk, here or on its stage
            memcpy(buf(p, p->grad_out, mb, k), strata_model_chunk_input_grad(m),
                   p->msg * sizeof(float));
        span_done(p, a, start);
        return STRATA_OK;
    }
    case STRATA_PP_WGT: {
        strata_trace_begin("pipeline", "pp.wgt");
        strata_status_t rc = strata_model_backward_weights(m, slot);
        strata_trace_end("pipeline", "pp.wgt");
        ST_TRY(rc);
        span_done(p, a, start);
        return STRATA_OK;
    }
    case STRATA_PP_SEND_ACT:
        return strata_isend(p->comm, strata_model_chunk_output(m, slot), p->msg, STRATA_DTYPE_F32,
                            a->peer, tag(p, 0, mb, c), &p->sreq[i]);
    case STRATA_PP_SEND_GRAD:
        return strata_isend(p->comm, buf(p, p->grad_out, mb, k), p->msg, STRATA_DTYPE_F32, a->peer,
                            tag(p, 1, mb, c), &p->sreq[i]);
    case STRATA_PP_RECV_ACT:
    case STRATA_PP_RECV_GRAD:
        return wait_idle(p, &p->rreq[i], i);
    default:
        return st_error(STRATA_ERR_INTERNAL, "pipeline: unknown action %d", a->op);
    }
}

/* Every chunk's mean F/B/W durations of this step, gathered from every stage; the schedule
 * simulated with them: the predicted timeline. Collective over the pipeline. */
static strata_status_t predict(strata_pipeline_t *p)
{
    // Per chunk: F, B, W sums and the count of F; then the mean F, B, W of every chunk.
    double *sum = calloc((size_t)p->C * 7, sizeof *sum);
    if (!sum)
        return st_error(STRATA_ERR_NO_MEMORY, "pipeline: out of memory");
    double cnt[3] = {0};
    for (int i = 0; i < p->nspans; i++) {
        const strata_pp_span_t *s = &p->spans[i];
        sum[s->chunk * 4 + s->op] += s->end - s->start;
        sum[s->chunk * 4 + 3] += s->op == STRATA_PP_FWD;
        cnt[s->op] += 1;
    }
    p->stats.fwd_s = p->stats.bwd_s = p->stats.wgt_s = 0;
    for (int c = 0; c < p->C; c++) {
        p->stats.fwd_s += sum[c * 4 + 0];
        p->stats.bwd_s += sum[c * 4 + 1];
        p->stats.wgt_s += sum[c * 4 + 2];
    }
    p->stats.fwd_s /= cnt[0] > 0 ? cnt[0] : 1;
    p->stats.bwd_s /= cnt[1] > 0 ? cnt[1] : 1;
    p->stats.wgt_s /= cnt[2] > 0 ? cnt[2] : 1;
    strata_status_t rc = strata_allreduce(p->comm, sum, sum, (size_t)p->C * 4, STRATA_DTYPE_F64,
                                          STRATA_OP_SUM);
    if (rc == STRATA_OK) {
        double *f = sum + 4 * p->C, *b = f + p->C, *w = b + p->C;
        for (int c = 0; c < p->C; c++) {
            double n = sum[c * 4 + 3] > 0 ? sum[c * 4 + 3] : 1;
            f[c] = sum[c * 4 + 0] / n;
            b[c] = sum[c * 4 + 1] / n;
            w[c] = sum[c * 4 + 2] / n;
        }
        strata_pp_costs_t costs = {.fwd_s = f, .bwd_s = b, .wgt_s = w, .p2p_s = 0};
        strata_pp_timeline_free(&p->predicted);
        p->have_predicted = false;
        rc = strata_pp_simulate(&p->plan, &costs, &p->predicted);
        p->have_predicted = rc == STRATA_OK;
    }
    free(sum);
    return rc;
}

/* True for the actions of a forward-only pass (evaluation): the forwards and their messages. */
static bool forward_part(uint8_t op)
{
    return op == STRATA_PP_FWD || op == STRATA_PP_SEND_ACT || op == STRATA_PP_RECV_ACT;
}

/* Runs this stage's actions (the forward ones only when fwd_only). */
static strata_status_t run(strata_pipeline_t *p, strata_pipeline_batch_fn batch, void *ctx,
                           double *loss_sum, bool fwd_only)
{
    *loss_sum = 0;
    p->t0 = now_s();
    p->nspans = p->nbubbles = 0;
    p->stats.busy_s = 0;
    int n = p->plan.count[p->stage];
    strata_status_t rc = STRATA_OK;
    for (int i = 0; i < n && rc == STRATA_OK; i++) {
        uint8_t op = p->plan.actions[p->stage][i].op;
        if ((op == STRATA_PP_RECV_ACT || op == STRATA_PP_RECV_GRAD) && (!fwd_only || forward_part(op)))
            rc = post_recv(p, i);
    }
    for (int i = 0; i < n && rc == STRATA_OK; i++) {
        if (!fwd_only || forward_part(p->plan.actions[p->stage][i].op))
            rc = run_action(p, i, batch, ctx, loss_sum);
    }
    for (int i = 0; i < n && rc == STRATA_OK; i++) // the sends of the step, complete
        rc = wait_idle(p, &p->sreq[i], -1);
    if (rc < 0)
        release_requests(p);
    return rc;
}

strata_status_t strata_pipeline_forward(strata_pipeline_t *p, strata_pipeline_batch_fn batch,
                                        void *ctx, double *loss_sum)
{
    return run(p, batch, ctx, loss_sum, true);
}

strata_status_t strata_pipeline_step(strata_pipeline_t *p, strata_pipeline_batch_fn batch,
                                     void *ctx, double *loss_sum)
{
    ST_TRY(run(p, batch, ctx, loss_sum, false));
    p->stats.step_s = now_s() - p->t0;
    p->stats.bubble = p->stats.step_s > 0 ? 1 - p->stats.busy_s / p->stats.step_s : 0;
    ST_TRY(predict(p));
    p->stats.bubble_predicted = p->predicted.bubble[p->stage];
    return STRATA_OK;
}

int strata_pipeline_bubbles(const strata_pipeline_t *p, const strata_pp_bubble_t **out)
{
    *out = p->bubbles;
    return p->nbubbles;
}

strata_pipeline_stats_t strata_pipeline_stats(const strata_pipeline_t *p)
{
    return p->stats;
}

strata_status_t strata_pipeline_timelines(strata_pipeline_t *p, strata_pp_timeline_t *measured,
                                          strata_pp_timeline_t *predicted)
{
    memset(measured, 0, sizeof *measured);
    memset(predicted, 0, sizeof *predicted);
    if (!p->have_predicted)
        return st_error(STRATA_ERR_INVALID_ARG, "pipeline: no step run yet");
    // Every stage's spans: counts first, then the spans as doubles (5 per span).
    int P = p->P;
    double *cnt = calloc((size_t)P, sizeof *cnt);
    if (!cnt)
        return st_error(STRATA_ERR_NO_MEMORY, "pipeline: out of memory");
    cnt[p->stage] = p->nspans;
    strata_status_t rc = strata_allreduce(p->comm, cnt, cnt, (size_t)P, STRATA_DTYPE_F64,
                                          STRATA_OP_SUM);
    size_t total = 0, mine = 0;
    for (int s = 0; s < P; s++) {
        if (s < p->stage)
            mine += (size_t)cnt[s];
        total += (size_t)cnt[s];
    }
    double *all = rc == STRATA_OK ? calloc(total * 5 + 1, sizeof *all) : NULL;
    if (rc == STRATA_OK && !all)
        rc = st_error(STRATA_ERR_NO_MEMORY, "pipeline: out of memory");
    if (rc == STRATA_OK) {
        for (int i = 0; i < p->nspans; i++) {
            const strata_pp_span_t *s = &p->spans[i];
            double *d = all + (mine + (size_t)i) * 5;
            d[0] = s->start, d[1] = s->end, d[2] = s->op, d[3] = s->chunk, d[4] = s->mb;
        }
        rc = strata_allreduce(p->comm, all, all, total * 5, STRATA_DTYPE_F64, STRATA_OP_SUM);
    }
    if (rc == STRATA_OK) {
        measured->stages = P;
        measured->count = calloc((size_t)P, sizeof(int));
        measured->spans = calloc((size_t)P, sizeof(strata_pp_span_t *));
        measured->busy_s = calloc((size_t)P, sizeof(double));
        measured->bubble = calloc((size_t)P, sizeof(double));
        measured->peak_act = calloc((size_t)P, sizeof(double));
        if (!measured->count || !measured->spans || !measured->busy_s || !measured->bubble ||
            !measured->peak_act)
            rc = st_error(STRATA_ERR_NO_MEMORY, "pipeline: out of memory");
        size_t at = 0;
        for (int s = 0; s < P && rc == STRATA_OK; s++) {
            int n = (int)cnt[s];
            measured->count[s] = n;
            measured->spans[s] = calloc((size_t)n + 1, sizeof(strata_pp_span_t));
            if (!measured->spans[s]) {
                rc = st_error(STRATA_ERR_NO_MEMORY, "pipeline: out of memory");
                break;
            }
            for (int i = 0; i < n; i++, at++) {
                const double *d = all + at * 5;
                measured->spans[s][i] = (strata_pp_span_t){d[0], d[1], (uint8_t)d[2],
                                                           (int16_t)d[3], (int32_t)d[4]};
                measured->busy_s[s] += d[1] - d[0];
                measured->makespan = fmax(measured->makespan, d[1]);
            }
        }
        for (int s = 0; s < P && rc == STRATA_OK; s++) {
            measured->bubble[s] = measured->makespan > 0
                                      ? 1 - measured->busy_s[s] / measured->makespan : 0;
            measured->bubble_mean += measured->bubble[s] / P;
        }
    }
    if (rc == STRATA_OK) { // the prediction, copied
        const strata_pp_timeline_t *q = &p->predicted;
        *predicted = (strata_pp_timeline_t){.stages = q->stages, .makespan = q->makespan,
                                            .bubble_mean = q->bubble_mean};
        predicted->count = calloc((size_t)P, sizeof(int));
        predicted->spans = calloc((size_t)P, sizeof(strata_pp_span_t *));
        predicted->busy_s = calloc((size_t)P, sizeof(double));
        predicted->bubble = calloc((size_t)P, sizeof(double));
        predicted->peak_act = calloc((size_t)P, sizeof(double));
        if (!predicted->count || !predicted->spans || !predicted->busy_s || !predicted->bubble ||
            !predicted->peak_act)
            rc = st_error(STRATA_ERR_NO_MEMORY, "pipeline: out of memory");
        for (int s = 0; s < P && rc == STRATA_OK; s++) {
            predicted->count[s] = q->count[s];
            predicted->busy_s[s] = q->busy_s[s];
            predicted->bubble[s] = q->bubble[s];
            predicted->peak_act[s] = q->peak_act[s];
            predicted->spans[s] = malloc(((size_t)q->count[s] + 1) * sizeof(strata_pp_span_t));
            if (!predicted->spans[s])
                rc = st_error(STRATA_ERR_NO_MEMORY, "pipeline: out of memory");
            else
                memcpy(predicted->spans[s], q->spans[s], (size_t)q->count[s] * sizeof(strata_pp_span_t));
        }
    }
    free(cnt);
    free(all);
    if (rc < 0) {
        strata_pp_timeline_free(measured);
        strata_pp_timeline_free(predicted);
    }
    return rc;
}
