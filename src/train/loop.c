/* The single-process training loop: batch -> forward/backward -> (sync hook) -> clip + optimizer,
 * with a progress bar (step, loss, tokens/s, MFU against the measured GEMM peak, ETA), JSON-lines
 * metrics, a Chrome trace of one chosen step, periodic atomic checkpoints with pruning, and resume
 * from the newest valid checkpoint. Nothing is allocated inside a step. A data-parallel engine uses
 * the three phases separately (train.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "model/layers.h"
#include "strata/trace.h"
#include "strata/train.h"

struct strata_trainer {
    strata_train_config_t cfg;
    strata_gpt_t *model;
    strata_data_t *data;
    float *m, *v;
    double *wsq, *usq;
    int32_t *tokens, *targets;
    int64_t step;
    strata_grad_sync_fn sync;
    void *sync_ctx;
    FILE *metrics;
    double peak_gflops;
    /* data parallel (strata_trainer_distribute): NULL zero = single process */
    strata_comm_t *comm;
    strata_zero_t *zero;
    strata_zero_config_t zcfg;
    strata_zero_segment_t *segs;
    strata_zero_shard_t *ranges;
    int nranges, rank, nranks;
    size_t state_count; /* elements of m and v */
};

strata_status_t strata_trainer_create(const strata_train_config_t *cfg, strata_trainer_t **out)
{
    *out = NULL;
    if (cfg->seq > cfg->model.max_seq)
        return st_error(STRATA_ERR_INVALID_ARG, "train: seq %d exceeds the model's max_seq %d",
                        cfg->seq, cfg->model.max_seq);
    if (cfg->batch < 1 || cfg->seq < 1 || cfg->steps < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "train: batch, seq and steps must be >= 1");
    strata_trainer_t *t = calloc(1, sizeof *t);
    if (!t)
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
    t->cfg = *cfg;
    t->nranks = 1;
    strata_status_t rc;
    strata_blas_set_threads(cfg->threads);
    ST_TRY_GOTO(strata_gpt_config_validate(&t->cfg.model), rc, fail);
    ST_TRY_GOTO(strata_model_create(&t->cfg.model, cfg->batch, cfg->seed, &t->model), rc, fail);
    ST_TRY_GOTO(strata_data_open(cfg->data, cfg->val_fraction, &t->data), rc, fail);
    size_t P = t->state_count = strata_model_nparams(t->model), BT = (size_t)cfg->batch * cfg->seq;
    int nt = strata_model_ntensors(t->model);
    t->m = calloc(P, sizeof(float));
    t->v = calloc(P, sizeof(float));
    t->wsq = calloc(2 * (size_t)nt, sizeof(double)); // wsq | usq, one block to all-reduce
    t->usq = t->wsq ? t->wsq + nt : NULL;
    t->tokens = calloc(BT, sizeof(int32_t));
    t->targets = calloc(BT, sizeof(int32_t));
    if (!t->m || !t->v || !t->wsq || !t->usq || !t->tokens || !t->targets) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "train: out of memory for optimizer state");
        goto fail;
    }
    if (cfg->ckpt_dir[0] && mkdir(cfg->ckpt_dir, 0755) != 0 && errno != EEXIST) {
        rc = st_error_errno(STRATA_ERR_IO, errno, "train: cannot create %s", cfg->ckpt_dir);
        goto fail;
    }
    if (cfg->metrics[0]) {
        t->metrics = fopen(cfg->metrics, "a");
        if (!t->metrics) {
            rc = st_error_errno(STRATA_ERR_IO, errno, "train: cannot open metrics file %s",
                                cfg->metrics);
            goto fail;
        }
    }
    *out = t;
    return STRATA_OK;
fail:
    strata_trainer_destroy(t);
    return rc;
}

void strata_trainer_destroy(strata_trainer_t *t)
{
    if (!t)
        return;
    if (t->zero) // stages 1-2 leave the last step's all-gathers in flight; after an error: fails fast
        (void)strata_zero_sync(t->zero);
    strata_zero_destroy(t->zero);
    free(t->segs);
    free(t->ranges);
    strata_model_destroy(t->model);
    strata_data_close(t->data);
    free(t->m);
    free(t->v);
    free(t->wsq);
    free(t->tokens);
    free(t->targets);
    if (t->metrics)
        fclose(t->metrics);
    free(t);
}

strata_gpt_t *strata_trainer_model(strata_trainer_t *t)
{
    return t->model;
}

int64_t strata_trainer_step_count(const strata_trainer_t *t)
{
    return t->step;
}

void strata_trainer_set_sync(strata_trainer_t *t, strata_grad_sync_fn fn, void *ctx)
{
    t->sync = fn;
    t->sync_ctx = ctx;
}

/* ---- data parallel ------------------------------------------------------------------------------ */

static void zero_progress_cb(void *ctx)
{
    (void)strata_zero_progress(ctx); // an error repeats at the engine's next hook
}

strata_status_t strata_trainer_distribute(strata_trainer_t *t, strata_comm_t *comm,
                                          const strata_zero_config_t *zc)
{
    if (t->zero)
        return st_error(STRATA_ERR_INVALID_ARG, "train: already distributed");
    int N = strata_comm_size(comm), r = strata_comm_rank(comm);
    if (t->cfg.batch % N != 0)
        return st_error(STRATA_ERR_INVALID_ARG, "train: the global batch of %d rows does not "
                        "split evenly over %d ranks (use a multiple of %d)", t->cfg.batch, N, N);
    int S = strata_model_nsegments(t->model);
    t->segs = calloc((size_t)S, sizeof *t->segs);
    t->ranges = calloc((size_t)S, sizeof *t->ranges);
    if (!t->segs || !t->ranges)
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
    for (int i = 0; i < S; i++)
        strata_model_segment(t->model, i, &t->segs[i].offset, &t->segs[i].count);
    t->zcfg = *zc;
    t->zcfg.nparams = strata_model_nparams(t->model);
    t->zcfg.nsegments = S;
    t->zcfg.segments = t->segs;
    ST_TRY(strata_zero_create(comm, &t->zcfg, strata_model_param_arena(t->model),
                              strata_model_grad_arena(t->model), &t->zero));
    t->comm = comm;
    t->rank = r;
    t->nranks = N;
    strata_zero_hooks_t h = strata_zero_hooks(t->zero);
    strata_param_hooks_t ph = {h.ctx, h.acquire, h.release, h.grad_ready};
    strata_model_set_hooks(t->model, &ph);
    strata_model_set_progress(t->model, zero_progress_cb, t->zero);
    t->nranges = strata_zero_ranges(t->zero, t->ranges, S);
    t->state_count = strata_zero_state_count(t->zero);
    free(t->m);
    free(t->v);
    t->m = calloc(t->state_count + 1, sizeof(float));
    t->v = calloc(t->state_count + 1, sizeof(float));
    if (!t->m || !t->v)
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory for optimizer state");
    if (r != 0) { // rank 0 alone reports
        t->cfg.progress = false;
        if (t->metrics)
            fclose(t->metrics);
        t->metrics = NULL;
    }
    return STRATA_OK;
}

/* One data-parallel step: this rank's rows, then the engine's step with the optimizer on the shards. */
static strata_status_t dist_step(strata_trainer_t *t, float *loss_out, float *norm_out,
                                 float *lr_out)
{
    const strata_train_config_t *c = &t->cfg;
    int rows = c->batch / t->nranks;
    float loss = 0;
    ST_TRY(strata_trainer_forward_backward(t, t->rank * rows, rows, &loss));
    const strata_zero_shard_t *sh;
    int ns;
    ST_TRY(strata_zero_step_begin(t->zero, &sh, &ns));
    double lsum = loss, norm = 0;
    ST_TRY(strata_zero_allreduce_f64(t->zero, &lsum, 1));
    ST_TRY(strata_zero_grad_norm(t->zero, &norm));
    float scale = strata_clip_scale(norm * norm, c->grad_clip);
    int64_t step = t->step + 1;
    strata_lr_schedule_t sched = {c->lr, c->min_lr, c->warmup, c->steps};
    float lr = strata_lr_at(&sched, step);
    strata_status_t rc = STRATA_OK;
    strata_trace_begin("compute", "optimizer");
    if (c->optim.kind == STRATA_OPTIM_LAMB) {
        int nt = strata_model_ntensors(t->model);
        memset(t->wsq, 0, 2 * (size_t)nt * sizeof(double));
        for (int i = 0; i < ns && rc == STRATA_OK; i++)
            rc = strata_lamb_partial(t->model, &c->optim, sh[i].params, sh[i].grads,
                                     t->m + sh[i].state_offset, t->v + sh[i].state_offset,
                                     sh[i].offset, sh[i].count, step, scale, t->wsq, t->usq);
        if (rc == STRATA_OK && t->zcfg.stage > 0) // stage 0: every rank holds the whole arena
            rc = strata_zero_allreduce_f64(t->zero, t->wsq, 2 * nt);
        for (int i = 0; i < ns && rc == STRATA_OK; i++)
            rc = strata_lamb_apply(t->model, &c->optim, sh[i].params, t->m + sh[i].state_offset,
                                   t->v + sh[i].state_offset, sh[i].offset, sh[i].count, lr, step,
                                   t->wsq, t->usq);
    } else {
        for (int i = 0; i < ns && rc == STRATA_OK; i++)
            rc = strata_adamw_update(t->model, &c->optim, sh[i].params, sh[i].grads,
                                     t->m + sh[i].state_offset, t->v + sh[i].state_offset,
                                     sh[i].offset, sh[i].count, lr, step, scale);
    }
    strata_trace_end("compute", "optimizer");
    ST_TRY(rc);
    ST_TRY(strata_zero_step_end(t->zero));
    t->step = step;
    *loss_out = (float)(lsum / t->nranks);
    *norm_out = (float)norm;
    *lr_out = lr;
    return STRATA_OK;
}

strata_status_t strata_trainer_forward_backward(strata_trainer_t *t, int row_begin, int rows,
                                                float *loss)
{
    const strata_train_config_t *c = &t->cfg;
    if (row_begin < 0 || rows < 1 || row_begin + rows > c->batch)
        return st_error(STRATA_ERR_INVALID_ARG, "train: rows [%d, %d) outside the batch of %d",
                        row_begin, row_begin + rows, c->batch);
    strata_trace_begin("data", "batch");
    strata_status_t rc = strata_data_batch(t->data, 0, c->seed, t->step + 1, row_begin, rows,
                                           c->seq, t->tokens, t->targets);
    strata_trace_end("data", "batch");
    ST_TRY(rc);
    ST_TRY(strata_model_forward(t->model, t->tokens, t->targets, rows, c->seq, loss));
    return strata_model_backward(t->model);
}

strata_status_t strata_trainer_update(strata_trainer_t *t, float *grad_norm, float *lr_out)
{
    const strata_train_config_t *c = &t->cfg;
    if (t->zero)
        return st_error(STRATA_ERR_INVALID_ARG, "train: a distributed trainer updates through its "
                        "engine (strata_trainer_step)");
    strata_trace_begin("compute", "optimizer");
    size_t P = strata_model_nparams(t->model);
    float *params = strata_model_param_arena(t->model);
    const float *grads = strata_model_grad_arena(t->model);
    double ss = strata_sumsq(grads, P);
    float scale = strata_clip_scale(ss, c->grad_clip);
    int64_t step = t->step + 1;
    strata_lr_schedule_t sched = {c->lr, c->min_lr, c->warmup, c->steps};
    float lr = strata_lr_at(&sched, step);
    strata_status_t rc;
    if (c->optim.kind == STRATA_OPTIM_LAMB) {
        size_t nt = (size_t)strata_model_ntensors(t->model);
        memset(t->wsq, 0, nt * sizeof(double));
        memset(t->usq, 0, nt * sizeof(double));
        rc = strata_lamb_partial(t->model, &c->optim, params, grads, t->m, t->v, 0, P, step, scale,
                                 t->wsq, t->usq);
        if (rc == STRATA_OK)
            rc = strata_lamb_apply(t->model, &c->optim, params, t->m, t->v, 0, P, lr, step, t->wsq,
                                   t->usq);
    } else {
        rc = strata_adamw_update(t->model, &c->optim, params, grads, t->m, t->v, 0, P, lr, step,
                                 scale);
    }
    strata_trace_end("compute", "optimizer");
    ST_TRY(rc);
    t->step = step;
    if (grad_norm)
        *grad_norm = (float)sqrt(ss);
    if (lr_out)
        *lr_out = lr;
    return STRATA_OK;
}

strata_status_t strata_trainer_step(strata_trainer_t *t, strata_step_info_t *info)
{
    uint64_t t0 = st_now_ns();
    float loss = 0, norm = 0, lr = 0;
    if (t->zero) {
        ST_TRY(dist_step(t, &loss, &norm, &lr));
        goto done;
    }
    ST_TRY(strata_trainer_forward_backward(t, 0, t->cfg.batch, &loss));
    if (t->sync) {
        strata_trace_begin("comm", "grad_sync");
        strata_status_t rc = t->sync(t->sync_ctx, t, &loss);
        strata_trace_end("comm", "grad_sync");
        ST_TRY(rc);
    }
    ST_TRY(strata_trainer_update(t, &norm, &lr));
done:
    if (info) {
        info->step = t->step;
        info->loss = loss;
        info->grad_norm = norm;
        info->lr = lr;
        info->seconds = (double)(st_now_ns() - t0) * 1e-9;
        info->tokens_per_s = (double)t->cfg.batch * t->cfg.seq / info->seconds;
    }
    return STRATA_OK;
}

/* ---- checkpoints ----------------------------------------------------------------------------------- */

static strata_status_t make_tensors(strata_trainer_t *t, strata_ckpt_tensor_t *ts, int *n)
{
    int nt = strata_model_ntensors(t->model);
    float *P = strata_model_param_arena(t->model);
    for (int i = 0; i < nt; i++) {
        const strata_tensor_info_t *ti = strata_model_tensor(t->model, i);
        ts[i] = (strata_ckpt_tensor_t){ti->name, ti->ndim, {ti->shape[0], ti->shape[1]},
                                       P + ti->offset};
    }
    int64_t np = (int64_t)strata_model_nparams(t->model);
    ts[nt] = (strata_ckpt_tensor_t){"optim.m", 1, {np}, t->m};
    ts[nt + 1] = (strata_ckpt_tensor_t){"optim.v", 1, {np}, t->v};
    *n = nt + 2;
    return STRATA_OK;
}

/* This rank's shard file: every range it owns as params@off, optim.m@off, optim.v@off. At stage 0
 * (every rank holds everything) rank r writes the r-th of N equal cuts of the arena. */
static strata_status_t save_shard(strata_trainer_t *t, const char *path)
{
    ST_TRY(strata_zero_sync(t->zero)); // stages 1-2: the arena's all-gathers have landed
    strata_zero_shard_t cut, *rg = t->ranges;
    int nr = t->nranges;
    if (t->zcfg.stage == 0) {
        size_t P = strata_model_nparams(t->model), N = (size_t)t->nranks, r = (size_t)t->rank;
        size_t b = P * r / N, e = P * (r + 1) / N;
        cut = (strata_zero_shard_t){b, e - b, b, strata_model_param_arena(t->model) + b, NULL};
        rg = &cut;
        nr = e > b;
    }
    strata_ckpt_tensor_t *ts = calloc(3 * (size_t)nr + 1, sizeof *ts);
    char(*names)[48] = calloc(3 * (size_t)nr + 1, sizeof *names);
    if (!ts || !names) {
        free(ts);
        free(names);
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
    }
    int64_t total = 0;
    for (int i = 0; i < nr; i++) {
        float *src[3] = {rg[i].params, t->m + rg[i].state_offset, t->v + rg[i].state_offset};
        const char *pre[3] = {"params", "optim.m", "optim.v"};
        for (int k = 0; k < 3; k++) {
            snprintf(names[3 * i + k], sizeof names[0], "%s@%zu", pre[k], rg[i].offset);
            ts[3 * i + k] = (strata_ckpt_tensor_t){names[3 * i + k], 1, {(int64_t)rg[i].count},
                                                   src[k]};
        }
        total += (int64_t)rg[i].count;
    }
    strata_ckpt_meta_t meta = {.step = t->step, .seed = t->cfg.seed, .data_pos = t->step + 1,
                               .rank = t->rank, .nranks = t->nranks,
                               .shard_offset = nr ? (int64_t)rg[0].offset : 0,
                               .shard_count = total};
    strata_train_config_to_json(&t->cfg, meta.config, sizeof meta.config);
    strata_trace_begin("io", "checkpoint");
    strata_status_t rc = strata_ckpt_write(path, ts, 3 * nr, &meta);
    strata_trace_end("io", "checkpoint");
    free(ts);
    free(names);
    return rc;
}

/* Distributed resume: rank 0 proposes its steps newest first; every rank assembles the proposal
 * from all shard files; a step is taken only when it assembled on every rank. */
static strata_status_t resume_dist(strata_trainer_t *t, int64_t *resumed_step)
{
    int64_t steps[256];
    int n = t->rank == 0 ? strata_ckpt_steps(t->cfg.ckpt_dir, steps, 256) : 0;
    char first_err[1024] = "";
    for (int i = 0;; i++) {
        double cand = t->rank == 0 ? (i < n ? (double)steps[i] : -1.0) : 0.0;
        ST_TRY(strata_zero_allreduce_f64(t->zero, &cand, 1));
        if (cand < 0)
            break;
        strata_ckpt_full_t full;
        strata_status_t rc = strata_ckpt_assemble(t->model, t->cfg.ckpt_dir, (int64_t)cand, true,
                                                  &full);
        double bad[2] = {rc < 0, rc < 0 && t->rank == 0};
        char msg[1024] = "";
        if (rc < 0)
            snprintf(msg, sizeof msg, "%s", strata_last_error());
        ST_TRY(strata_zero_allreduce_f64(t->zero, bad, 2));
        if (bad[0] == 0) {
            memcpy(strata_model_param_arena(t->model), full.params,
                   full.nparams * sizeof(float));
            for (int k = 0; k < t->nranges; k++) {
                const strata_zero_shard_t *g = &t->ranges[k];
                if (t->zcfg.stage == 3) // the engine's own shard
                    memcpy(g->params, full.params + g->offset, g->count * sizeof(float));
                memcpy(t->m + g->state_offset, full.m + g->offset, g->count * sizeof(float));
                memcpy(t->v + g->state_offset, full.v + g->offset, g->count * sizeof(float));
            }
            t->step = full.meta.step;
            *resumed_step = t->step;
            strata_ckpt_full_free(&full);
            if (i > 0 && t->rank == 0)
                ST_LOG_WARN(ST_SUB_TRAIN, "resumed from step %" PRId64 ", an older checkpoint",
                            t->step);
            return STRATA_OK;
        }
        if (!first_err[0])
            snprintf(first_err, sizeof first_err, "%s",
                     msg[0] ? msg : "unreadable on another rank");
        // One message per bad step: rank 0's own, else from the ranks that failed.
        if (rc < 0 && (t->rank == 0 || bad[1] == 0))
            fprintf(stderr, "strata: warning: %s; refusing step %" PRId64 "%s\n", msg,
                    (int64_t)cand, " and falling back to the previous checkpoint");
    }
    if (n > 0 || first_err[0])
        return st_error(STRATA_ERR_PARSE, "train: no complete checkpoint in %s (newest: %s)",
                        t->cfg.ckpt_dir, first_err[0] ? first_err : "see rank 0");
    return STRATA_OK;
}

strata_status_t strata_trainer_save(strata_trainer_t *t, const char *path)
{
    if (t->zero)
        return save_shard(t, path);
    int nt = strata_model_ntensors(t->model) + 2, n;
    strata_ckpt_tensor_t *ts = calloc((size_t)nt, sizeof *ts);
    if (!ts)
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
    make_tensors(t, ts, &n);
    strata_ckpt_meta_t meta = {.step = t->step, .seed = t->cfg.seed, .data_pos = t->step + 1,
                               .rank = 0, .nranks = 1, .shard_offset = 0,
                               .shard_count = (int64_t)strata_model_nparams(t->model)};
    strata_train_config_to_json(&t->cfg, meta.config, sizeof meta.config);
    strata_trace_begin("io", "checkpoint");
    strata_status_t rc = strata_ckpt_write(path, ts, n, &meta);
    strata_trace_end("io", "checkpoint");
    free(ts);
    return rc;
}

strata_status_t strata_trainer_load(strata_trainer_t *t, const char *path)
{
    strata_ckpt_t *ck;
    ST_TRY(strata_ckpt_open(path, &ck));
    int nt = strata_model_ntensors(t->model) + 2, n;
    strata_ckpt_tensor_t *ts = calloc((size_t)nt, sizeof *ts);
    float *pcopy = malloc(strata_model_nparams(t->model) * sizeof(float));
    strata_status_t rc = STRATA_OK;
    if (!ts || !pcopy) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
        goto out;
    }
    // Load into the live arrays only after every tensor checked out: keep a copy to roll back.
    memcpy(pcopy, strata_model_param_arena(t->model), strata_model_nparams(t->model) * 4);
    make_tensors(t, ts, &n);
    rc = strata_ckpt_load(ck, ts, n);
    if (rc < 0) {
        memcpy(strata_model_param_arena(t->model), pcopy, strata_model_nparams(t->model) * 4);
        goto out;
    }
    t->step = strata_ckpt_meta(ck)->step;
out:
    free(ts);
    free(pcopy);
    strata_ckpt_close(ck);
    return rc;
}

strata_status_t strata_trainer_resume(strata_trainer_t *t, int64_t *resumed_step)
{
    *resumed_step = 0;
    if (!t->cfg.ckpt_dir[0])
        return STRATA_OK;
    if (t->zero)
        return resume_dist(t, resumed_step);
    int64_t steps[64];
    int n = strata_ckpt_list(t->cfg.ckpt_dir, 0, 1, steps, 64);
    char path[2048], first_err[1024] = "";
    for (int i = 0; i < n; i++) {
        strata_ckpt_path(t->cfg.ckpt_dir, steps[i], 0, 1, path, sizeof path);
        if (strata_trainer_load(t, path) == STRATA_OK) {
            *resumed_step = t->step;
            if (i > 0)
                ST_LOG_WARN(ST_SUB_TRAIN, "resumed from %s, an older checkpoint", path);
            return STRATA_OK;
        }
        if (!first_err[0])
            snprintf(first_err, sizeof first_err, "%s", strata_last_error());
        fprintf(stderr, "strata: warning: %s; refusing it%s\n", strata_last_error(),
                i + 1 < n ? " and falling back to the previous checkpoint" : "");
    }
    if (n > 0)
        return st_error(STRATA_ERR_PARSE, "train: no valid checkpoint in %s (newest: %s)",
                        t->cfg.ckpt_dir, first_err);
    return STRATA_OK;
}

static void prune(strata_trainer_t *t)
{
    int64_t steps[4096];
    int n = strata_ckpt_list(t->cfg.ckpt_dir, t->rank, t->nranks, steps, 4096);
    char path[2048];
    for (int i = t->cfg.ckpt_keep; i < n; i++) {
        strata_ckpt_path(t->cfg.ckpt_dir, steps[i], t->rank, t->nranks, path, sizeof path);
        unlink(path);
    }
}

/* ---- peak, progress, metrics --------------------------------------------------------------------- */

double strata_measure_gemm_peak(int n)
{
    if (n < 64)
        n = 64;
    float *a = malloc((size_t)n * n * sizeof(float) * 3);
    if (!a)
        return 0;
    float *b = a + (size_t)n * n, *c = b + (size_t)n * n;
    for (size_t i = 0; i < (size_t)n * n; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
    }
    st_sgemm(0, 0, n, n, n, 1.f, a, n, b, n, 0.f, c, n); // warm-up
    double best = 1e30, total = 0;
    for (int r = 0; r < 20 && total < 0.5; r++) {
        uint64_t t0 = st_now_ns();
        st_sgemm(0, 0, n, n, n, 1.f, a, n, b, n, 0.f, c, n);
        double s = (double)(st_now_ns() - t0) * 1e-9;
        total += s;
        best = s < best ? s : best;
    }
    free(a);
    return 2.0 * n * n * (double)n / best * 1e-9;
}

static double eval_loss(strata_trainer_t *t)
{
    const strata_train_config_t *c = &t->cfg;
    if (strata_data_ntokens(t->data, 1) < (size_t)c->seq + 1)
        return NAN;
    double sum = 0;
    int rows = c->batch / t->nranks; // distributed: this rank's rows, averaged below
    for (int e = 0; e < c->eval_batches; e++) {
        float l;
        if (strata_data_batch(t->data, 1, c->seed, e, t->rank * rows, rows, c->seq, t->tokens,
                              t->targets) < 0 ||
            strata_model_forward(t->model, t->tokens, t->targets, rows, c->seq, &l) < 0)
            return NAN;
        sum += l;
    }
    if (t->zero && strata_zero_allreduce_f64(t->zero, &sum, 1) < 0)
        return NAN;
    return sum / c->eval_batches / t->nranks;
}

static void progress(const strata_trainer_t *t, const strata_step_info_t *s, double mfu,
                     double avg_tps, double eta_s, bool last)
{
    int width = 24, filled = (int)((double)s->step / (double)t->cfg.steps * width);
    char bar[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[width] = 0;
    int eta = (int)eta_s;
    fprintf(stderr, "\rstep %" PRId64 "/%" PRId64 " [%s] loss %.4f | %.0f tok/s | MFU %.1f%% | "
            "ETA %d:%02d:%02d ", s->step, t->cfg.steps, bar, (double)s->loss, avg_tps, mfu * 100,
            eta / 3600, eta / 60 % 60, eta % 60);
    if (last)
        fputc('\n', stderr);
    fflush(stderr);
}

strata_status_t strata_trainer_run(strata_trainer_t *t, float *losses)
{
    const strata_train_config_t *c = &t->cfg;
    bool want_mfu = c->progress || t->metrics;
    if (want_mfu && t->peak_gflops == 0)
        t->peak_gflops = strata_measure_gemm_peak(1024);
    double flops_tok = strata_model_flops_per_token(t->model, c->seq);
    double total_s = 0;
    int64_t first = t->step;
    while (t->step < c->steps) {
        bool tracing = c->trace[0] && t->step + 1 == c->trace_step;
        if (tracing) {
            char tp[1100];
            size_t len = strlen(c->trace);
            if (t->nranks > 1) // one file per rank: step.json -> step.r<rank>.json
                snprintf(tp, sizeof tp, "%.*s.r%d.json",
                         (int)(len > 5 && !strcmp(c->trace + len - 5, ".json") ? len - 5 : len),
                         c->trace, t->rank);
            else
                snprintf(tp, sizeof tp, "%s", c->trace);
            ST_TRY(strata_trace_open(tp, t->rank));
        }
        strata_step_info_t s;
        strata_status_t rc = strata_trainer_step(t, &s);
        if (tracing) {
            strata_status_t rc2 = strata_trace_close();
            if (rc == STRATA_OK)
                rc = rc2;
        }
        ST_TRY(rc);
        if (losses)
            losses[s.step - 1] = s.loss;
        total_s += s.seconds;
        double avg_tps = (double)(t->step - first) * c->batch * c->seq / total_s;
        double mfu = t->peak_gflops > 0 ? s.tokens_per_s * flops_tok /
                                               (t->peak_gflops * 1e9 * t->nranks) : 0;
        double eta = (double)(c->steps - t->step) * total_s / (double)(t->step - first);
        double val = NAN;
        if (c->eval_every > 0 && (t->step % c->eval_every == 0 || t->step == c->steps))
            val = eval_loss(t);
        if (c->progress)
            progress(t, &s, mfu, avg_tps, eta, t->step == c->steps);
        if (t->metrics) {
            fprintf(t->metrics, "{\"step\":%" PRId64 ",\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":"
                    "%.6g,\"tokens_per_s\":%.1f,\"mfu\":%.5f,\"step_s\":%.6f", s.step,
                    (double)s.loss, (double)s.lr, (double)s.grad_norm, s.tokens_per_s, mfu,
                    s.seconds);
            if (!isnan(val))
                fprintf(t->metrics, ",\"val_loss\":%.6f", val);
            fputs("}\n", t->metrics);
            fflush(t->metrics);
        }
        if (!c->progress && !isnan(val))
            ST_LOG_INFO(ST_SUB_TRAIN, "step %" PRId64 " val_loss %.4f", t->step, val);
        if (c->ckpt_dir[0] && ((c->ckpt_every > 0 && t->step % c->ckpt_every == 0) ||
                               t->step == c->steps)) {
            char path[2048];
            strata_ckpt_path(c->ckpt_dir, t->step, t->rank, t->nranks, path, sizeof path);
            ST_TRY(strata_trainer_save(t, path));
            if (t->zero) { // every shard of this step written before any older one goes
                double one = 1;
                ST_TRY(strata_zero_allreduce_f64(t->zero, &one, 1));
            }
            prune(t);
        }
    }
    if (t->zero) // the last step's parameter all-gathers: the arena is consistent on return
        ST_TRY(strata_zero_sync(t->zero));
    return STRATA_OK;
}
