/* The training loop: batch -> forward/backward -> (sync hook) -> clip + optimizer, in one process or
 * data parallel through a ZeRO engine, with progress (progress.c: step, loss, validation loss,
 * tokens/s, MFU against the measured GEMM peak, ETA, a summary), JSON-lines metrics, a Chrome trace of one chosen step, the non-finite
 * guard (a NaN/inf loss or gradient norm stops the run or skips the update, decided alike on every
 * rank), the stop request (a signal: finish the step, agree on it, checkpoint, return) and periodic
 * checkpoints. Nothing is allocated inside a step. Checkpoints and resume are trainer_ckpt.c; the
 * optimizer in the pool (cfg.optimizer_in_pool) is trainer_pool.c. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "base/json.h"
#include "strata/topo.h"
#include "strata/trace.h"
#include "train/trainer.h"

/* Creates the memory checkpoint directory (0700: it sits in a tmpfs shared by every user) and makes
 * sure it is not the disk one, whose older and newer steps its pruning would remove. */
static strata_status_t memory_dir(const strata_train_config_t *cfg)
{
    const char *dir = cfg->mem_ckpt_dir;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return st_error_errno(STRATA_ERR_IO, errno, "train: cannot create the memory checkpoint "
                              "directory %s", dir);
    struct stat a, b;
    if (stat(dir, &a) != 0)
        return st_error_errno(STRATA_ERR_IO, errno, "train: memory checkpoint directory %s", dir);
    if (cfg->ckpt_dir[0] && stat(cfg->ckpt_dir, &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino)
        return st_error(STRATA_ERR_INVALID_ARG, "train: the memory checkpoint directory %s is the "
                        "checkpoint directory %s: give two directories (memory pruning keeps one "
                        "step)", dir, cfg->ckpt_dir);
    return STRATA_OK;
}

strata_status_t strata_trainer_create(const strata_train_config_t *cfg, strata_trainer_t **out)
{
    *out = NULL;
    if (cfg->seq > cfg->model.max_seq)
        return st_error(STRATA_ERR_INVALID_ARG, "train: seq %d exceeds the model's max_seq %d",
                        cfg->seq, cfg->model.max_seq);
    if (cfg->batch < 1 || cfg->seq < 1 || cfg->steps < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "train: batch, seq and steps must be >= 1");
    if (cfg->mem_ckpt_every > 0 && !cfg->mem_ckpt_dir[0])
        return st_error(STRATA_ERR_INVALID_ARG, "train: memory checkpoints every %" PRId64 " steps "
                        "need a directory (mem_ckpt_dir, e.g. the launcher's STRATA_MEM_CKPT_DIR)",
                        cfg->mem_ckpt_every);
    strata_trainer_t *t = calloc(1, sizeof *t);
    if (!t)
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
    t->cfg = *cfg;
    t->nranks = 1;
    t->tp = t->dp = t->pp = 1;
    st_trainer_new_run_id(t->run_id);
    strata_status_t rc;
    strata_blas_set_threads(cfg->threads);
    ST_TRY_GOTO(strata_blas_set_precision(cfg->precision, &t->cfg.precision), rc, fail);
    ST_TRY_GOTO(strata_gpt_config_validate(&t->cfg.model), rc, fail);
    if (cfg->harvest[0] && cfg->pp < 2) {
        rc = st_error(STRATA_ERR_INVALID_ARG, "train: --harvest runs side work inside pipeline "
                      "bubbles: it needs --pp 2 or more");
        goto fail;
    }
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
    if (cfg->mem_ckpt_every > 0)
        ST_TRY_GOTO(memory_dir(cfg), rc, fail);
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
    strata_pool_close(t->pool);
    strata_pipeline_destroy(t->pipe);
    st_trainer_harvest_destroy(t);
    strata_tp_group_destroy(t->tpg);
    strata_mesh_destroy(t->mesh);
    free(t->stage_layers);
    free(t->pp_bubbles);
    st_straggler_free(&t->strag);
    st_slowlink_free(&t->links);
    free(t->segs);
    free(t->ranges);
    st_trainer_data_stop(t); // the loader thread reads t->data and the trainer's fields
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

strata_pipeline_t *strata_trainer_pipeline(strata_trainer_t *t)
{
    return t->pipe;
}

int64_t strata_trainer_step_count(const strata_trainer_t *t)
{
    return t->step;
}

void strata_trainer_set_stop_flag(strata_trainer_t *t, const volatile sig_atomic_t *flag)
{
    t->stop_flag = flag;
}

int strata_trainer_stopped(const strata_trainer_t *t)
{
    return t->stopped;
}

const char *strata_trainer_run_id(const strata_trainer_t *t)
{
    return t->run_id;
}

void st_trainer_new_run_id(char out[17])
{
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, GRND_NONBLOCK) != (ssize_t)sizeof x) // no entropy yet: time and pid
        x = st_now_ns() * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() << 32;
    snprintf(out, 17, "%016" PRIx64, x);
}

strata_status_t st_trainer_all_sum(strata_trainer_t *t, double *v, int n)
{
    if (t->mesh) // the world, not only the data-parallel group
        return strata_allreduce(t->comm, v, v, (size_t)n, STRATA_DTYPE_F64, STRATA_OP_SUM);
    return t->zero ? strata_zero_allreduce_f64(t->zero, v, n) : STRATA_OK;
}

static bool stop_requested(const strata_trainer_t *t)
{
    return t->stop_flag && *t->stop_flag != 0;
}

void strata_trainer_set_sync(strata_trainer_t *t, strata_grad_sync_fn fn, void *ctx)
{
    t->sync = fn;
    t->sync_ctx = ctx;
}

/* ---- data parallel ------------------------------------------------------------------------------ */

static void zero_progress_cb(void *ctx)
{
    strata_trainer_t *t = ctx;
    (void)strata_zero_progress(t->zero); // an error repeats at the engine's next hook
    if (t->pipe) // the neighbours' activations and gradients move while this stage computes
        strata_pipeline_progress(t->pipe);
}

/* Slow-link detection over the communicator's hosts (the fabric's "host" level, else its
 * innermost). */
static strata_status_t init_slowlink(strata_trainer_t *t, const strata_comm_t *comm)
{
    const strata_fabric_t *f = strata_comm_fabric(comm);
    int level = ST_MAX(strata_topo_find_level(&f->topo, "host"), 0);
    int *host = malloc((size_t)t->nranks * sizeof *host);
    if (!host)
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
    for (int r = 0; r < t->nranks; r++)
        host[r] = strata_fabric_unit(f, level, r);
    strata_status_t rc = st_slowlink_init(&t->links, t->cfg.straggler_window, t->nranks, host);
    free(host);
    return rc;
}

strata_status_t strata_trainer_distribute(strata_trainer_t *t, strata_comm_t *comm,
                                          const strata_zero_config_t *zc)
{
    if (t->zero)
        return st_error(STRATA_ERR_INVALID_ARG, "train: already distributed");
    int N = strata_comm_size(comm), r = strata_comm_rank(comm);
    strata_comm_t *dp_comm = comm;
    st_trainer_data_stop(t); // a batch taken before: its thread read another rank's rows
    t->comm = comm;
    t->rank = r;
    t->nranks = N;
    t->dp = N;
    t->dp_rank = r;
    if (t->cfg.optimizer_in_pool)
        ST_TRY(st_trainer_pool_open(t));
    if (t->cfg.tp > 1 || t->cfg.pp > 1 || t->cfg.order[0])
        ST_TRY(st_trainer_build_mesh(t, comm, &dp_comm));
    if (t->cfg.batch % t->dp != 0)
        return st_error(STRATA_ERR_INVALID_ARG, "train: the global batch of %d rows does not "
                        "split evenly over %d data-parallel ranks (use a multiple of %d)",
                        t->cfg.batch, t->dp, t->dp);
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
    t->zcfg.head_segment = ST_MAX(strata_model_head_segment(t->model), 0); // 0: no head here
    ST_TRY(strata_zero_create(dp_comm, &t->zcfg, strata_model_param_arena(t->model),
                              strata_model_grad_arena(t->model), &t->zero));
    // With the optimizer in the pool the gradients go there, not through the engine's reductions:
    // the engine (stage 0) serves only its collectives and ranges.
    if (!t->pool) {
        strata_zero_hooks_t h = strata_zero_hooks(t->zero);
        strata_param_hooks_t ph = {h.ctx, h.acquire, h.release, h.grad_ready};
        strata_model_set_hooks(t->model, &ph);
        strata_model_set_progress(t->model, zero_progress_cb, t);
    }
    if (t->pp > 1)
        ST_TRY(st_trainer_pp_create(t));
    ST_TRY(st_trainer_harvest_create(t));
    t->nranges = strata_zero_ranges(t->zero, t->ranges, S);
    t->state_count = strata_zero_state_count(t->zero);
    free(t->m);
    free(t->v);
    t->m = calloc(t->state_count + 1, sizeof(float));
    t->v = calloc(t->state_count + 1, sizeof(float));
    if (!t->m || !t->v)
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory for optimizer state");
    ST_TRY(st_straggler_init(&t->strag, t->cfg.straggler_window, N));
    if (t->tp > 1 || t->pp > 1) // compare each rank with the ranks of the same TP and PP place
        ST_TRY(st_trainer_straggler_roles(t));
    ST_TRY(init_slowlink(t, comm));
    // One run id for every rank: rank 0's, as two 32-bit halves (exact in a double).
    uint64_t id = strtoull(t->run_id, NULL, 16);
    double halves[2] = {r == 0 ? (double)(id >> 32) : 0, r == 0 ? (double)(id & 0xffffffffu) : 0};
    ST_TRY(st_trainer_all_sum(t, halves, 2));
    snprintf(t->run_id, sizeof t->run_id, "%08" PRIx32 "%08" PRIx32, (uint32_t)halves[0],
             (uint32_t)halves[1]);
    if (r != 0) { // rank 0 alone reports
        t->cfg.progress = false;
        if (t->metrics)
            fclose(t->metrics);
        t->metrics = NULL;
    }
    return STRATA_OK;
}

/* ---- the non-finite guard ------------------------------------------------------------------------ */

static bool all_finite(const float *x, size_t n)
{
    bool ok = true;
    for (size_t i = 0; i < n; i++)
        ok &= isfinite(x[i]) != 0;
    return ok;
}

/* Appends ", r" for every rank whose flags have `bit`, at most 16. */
static void list_ranks(const double *flags, int n, int bit, char *out, size_t size)
{
    int shown = 0, total = 0;
    out[0] = 0;
    for (int r = 0; r < n; r++) {
        if (!((int)flags[r] & bit))
            continue;
        if (shown++ < 16)
            snprintf(out + strlen(out), size - strlen(out), "%s%d", total ? ", " : "", r);
        total++;
    }
    if (total > 16)
        snprintf(out + strlen(out), size - strlen(out), " and %d more", total - 16);
}

/* A step whose loss or gradient norm is not finite (the same values on every rank): finds out which
 * ranks' own loss (flag 1) or gradient shard (flag 2) is not finite (collective), then fails with the
 * report (policy stop) or warns and returns OK (skip; rank 0 prints). */
static strata_status_t nonfinite_step(strata_trainer_t *t, int64_t step, float local_loss,
                                      bool local_grads_bad, float loss, float norm)
{
    int N = t->nranks;
    double *flags = calloc((size_t)N, sizeof *flags);
    if (!flags)
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
    flags[t->rank] = (isfinite(local_loss) ? 0 : 1) | (local_grads_bad ? 2 : 0);
    strata_status_t rc = st_trainer_all_sum(t, flags, N);
    char lossr[160], gradr[160], where[512];
    list_ranks(flags, N, 1, lossr, sizeof lossr);
    list_ranks(flags, N, 2, gradr, sizeof gradr);
    free(flags);
    ST_TRY(rc);
    const char *on = N > 1 ? " on rank " : ""; // one process: no ranks to name
    int w = snprintf(where, sizeof where, "%s%s%s", lossr[0] ? "non-finite loss" : "",
                     lossr[0] ? on : "", N > 1 ? lossr : "");
    if (gradr[0])
        snprintf(where + w, sizeof where - (size_t)w, "%snon-finite gradients%s%s",
                 lossr[0] ? "; " : "", on, N > 1 ? gradr : "");
    if (!lossr[0] && !gradr[0])
        snprintf(where, sizeof where, "every rank's own loss and gradients finite: the reduction "
                 "overflowed");
    if (t->cfg.nonfinite == STRATA_NONFINITE_STOP)
        return st_error(STRATA_ERR_INVALID_ARG, "train: step %" PRId64 ": loss %g, grad norm %g: "
                        "not finite (%s); stopped before the update, nothing of this step was "
                        "applied or checkpointed (--nonfinite skip skips such steps)", step,
                        (double)loss, (double)norm, where);
    st_progress_break(&t->prog);
    if (t->rank == 0)
        fprintf(stderr, "strata train: warning: step %" PRId64 ": loss %g, grad norm %g: not "
                "finite (%s); skipping its update (--nonfinite skip)\n", step, (double)loss,
                (double)norm, where);
    return STRATA_OK;
}

/* ---- steps --------------------------------------------------------------------------------------- */

/* The optimizer on this rank's shards (or the whole arena) for `step`, gradients scaled by `scale`. */
static strata_status_t optimizer(strata_trainer_t *t, const strata_zero_shard_t *sh, int ns,
                                 int64_t step, float scale, float lr)
{
    const strata_train_config_t *c = &t->cfg;
    strata_status_t rc = STRATA_OK;
    strata_trace_begin("compute", "optimizer");
    if (c->optim.kind == STRATA_OPTIM_LAMB) {
        int nt = strata_model_ntensors(t->model);
        memset(t->wsq, 0, 2 * (size_t)nt * sizeof(double));
        for (int i = 0; i < ns && rc == STRATA_OK; i++)
            rc = strata_lamb_partial(t->model, &c->optim, sh[i].params, sh[i].grads,
                                     t->m + sh[i].state_offset, t->v + sh[i].state_offset,
                                     sh[i].offset, sh[i].count, step, scale, t->wsq, t->usq);
        if (rc == STRATA_OK && t->zero && t->zcfg.stage > 0) // stage 0: every rank holds all
            rc = strata_zero_allreduce_f64(t->zero, t->wsq, 2 * nt);
        if (rc == STRATA_OK)
            rc = st_trainer_tp_tensor_sums(t, t->wsq, t->usq);
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
    return rc;
}

static float lr_at(const strata_trainer_t *t, int64_t step)
{
    const strata_train_config_t *c = &t->cfg;
    strata_lr_schedule_t sched = {c->lr, c->min_lr, c->warmup, c->steps};
    return strata_lr_at(&sched, step);
}

/* The whole arena as one shard: the single-process update. */
static strata_zero_shard_t whole_arena(strata_trainer_t *t)
{
    size_t P = strata_model_nparams(t->model);
    return (strata_zero_shard_t){0, P, 0, strata_model_param_arena(t->model),
                                 strata_model_grad_arena(t->model)};
}

/* One data-parallel step: this rank's rows, then the engine's step with the optimizer on the shards.
 * The stop request rides on the loss reduction, so every rank sees the same answer. */
static strata_status_t dist_step(strata_trainer_t *t, strata_step_info_t *info)
{
    const strata_train_config_t *c = &t->cfg;
    int rows = c->batch / t->dp;
    float loss = 0;
    if (t->pool && t->pool_stale) // the first step, or the first after a resume
        ST_TRY(st_trainer_pool_upload(t));
    if (t->pipe)
        ST_TRY(st_trainer_pp_forward_backward(t, &loss));
    else
        ST_TRY(strata_trainer_forward_backward(t, t->dp_rank * rows, rows, &loss));
    if (t->sync)
        ST_TRY(t->sync(t->sync_ctx, t, &loss));
    const strata_zero_shard_t *sh = NULL;
    int ns = 0;
    if (t->pool)
        ST_TRY(st_trainer_pool_push(t));
    else
        ST_TRY(strata_zero_step_begin(t->zero, &sh, &ns));
    double red[2] = {loss, stop_requested(t) ? 1 : 0}, norm = 0;
    // Every TP and PP rank of a pipeline has its loss; with the pool, every rank's push is done.
    ST_TRY(st_trainer_all_sum(t, red, 2));
    if (t->pool) {
        ST_TRY(st_trainer_pool_grad_norm(t, &norm));
    } else if (t->tp > 1 || t->pp > 1) {
        norm = st_trainer_grad_sumsq(t, sh, ns);
        ST_TRY(st_trainer_all_sum(t, &norm, 1));
        if (t->zcfg.stage == 0) // every data-parallel rank holds every gradient
            norm /= t->dp;
        norm = sqrt(norm);
    } else {
        ST_TRY(strata_zero_grad_norm(t->zero, &norm));
    }
    int64_t step = t->step + 1;
    float lr = lr_at(t, step);
    info->loss = (float)(red[0] / t->nranks);
    info->grad_norm = (float)norm;
    info->lr = lr;
    info->stop = red[1] > 0;
    info->skipped = !isfinite(info->loss) || !isfinite(norm);
    float scale = strata_clip_scale(norm * norm, c->grad_clip);
    if (info->skipped) {
        bool bad = t->pool && !all_finite(strata_model_grad_arena(t->model),
                                          strata_model_nparams(t->model));
        for (int i = 0; i < ns; i++)
            bad |= !all_finite(sh[i].grads, sh[i].count);
        ST_TRY(nonfinite_step(t, step, loss, bad, info->loss, info->grad_norm));
        if (t->pool)
            ST_TRY(st_trainer_pool_clear_grads(t));
    } else if (t->pool) {
        ST_TRY(st_trainer_pool_update(t, step, scale, lr));
    } else {
        ST_TRY(optimizer(t, sh, ns, step, scale, lr));
    }
    if (!t->pool)
        ST_TRY(strata_zero_step_end(t->zero));
    t->step = step;
    return STRATA_OK;
}

strata_status_t strata_trainer_forward_backward(strata_trainer_t *t, int row_begin, int rows,
                                                float *loss)
{
    const strata_train_config_t *c = &t->cfg;
    if (row_begin < 0 || rows < 1 || row_begin + rows > c->batch)
        return st_error(STRATA_ERR_INVALID_ARG, "train: rows [%d, %d) outside the batch of %d",
                        row_begin, row_begin + rows, c->batch);
    ST_TRY(st_trainer_batch(t, t->step + 1, row_begin, rows, &t->data_wait_s));
    ST_TRY(strata_model_forward(t->model, t->tokens, t->targets, rows, c->seq, loss));
    return strata_model_backward(t->model);
}

/* The single-process update for a gradient sum of squares ss already known finite. */
static strata_status_t local_update(strata_trainer_t *t, double ss, float *lr_out)
{
    if (t->zero)
        return st_error(STRATA_ERR_INVALID_ARG, "train: a distributed trainer updates through its "
                        "engine (strata_trainer_step)");
    int64_t step = t->step + 1;
    float lr = lr_at(t, step);
    strata_zero_shard_t all = whole_arena(t);
    ST_TRY(optimizer(t, &all, 1, step, strata_clip_scale(ss, t->cfg.grad_clip), lr));
    t->step = step;
    if (lr_out)
        *lr_out = lr;
    return STRATA_OK;
}

strata_status_t strata_trainer_update(strata_trainer_t *t, float *grad_norm, float *lr_out)
{
    double ss = strata_sumsq(strata_model_grad_arena(t->model), strata_model_nparams(t->model));
    if (grad_norm)
        *grad_norm = (float)sqrt(ss);
    if (!isfinite(ss))
        return st_error(STRATA_ERR_INVALID_ARG, "train: step %" PRId64 ": the gradient norm is "
                        "not finite; nothing updated", t->step + 1);
    return local_update(t, ss, lr_out);
}

static strata_status_t all_sum_cb(void *ctx, double *v, int n)
{
    return st_trainer_all_sum(ctx, v, n);
}

strata_status_t strata_trainer_step(strata_trainer_t *t, strata_step_info_t *info)
{
    uint64_t t0 = st_now_ns();
    strata_step_info_t s = {.straggler = -1, .slow_link_from = -1, .slow_link_to = -1};
    if (t->tpg)
        strata_tp_group_reset_stats(t->tpg);
    if (t->cfg.optimizer_in_pool && !t->pool)
        return st_error(STRATA_ERR_INVALID_ARG, "train: --optimizer-in-pool runs data parallel: "
                        "distribute the trainer first (strata launch -n N -- strata train ...)");
    if (t->zero) {
        st_straggler_begin(&t->strag, t->comm);
        strata_zero_stats_t z0 = strata_zero_stats(t->zero);
        ST_TRY(dist_step(t, &s));
        strata_zero_stats_t z1 = strata_zero_stats(t->zero);
        s.zero_gather_bytes = z1.bytes_sent_gather - z0.bytes_sent_gather;
        s.zero_reduce_bytes = z1.bytes_sent_reduce - z0.bytes_sent_reduce;
    } else {
        float loss = 0;
        ST_TRY(strata_trainer_forward_backward(t, 0, t->cfg.batch, &loss));
        if (t->sync) {
            strata_trace_begin("comm", "grad_sync");
            strata_status_t rc = t->sync(t->sync_ctx, t, &loss);
            strata_trace_end("comm", "grad_sync");
            ST_TRY(rc);
        }
        const float *g = strata_model_grad_arena(t->model);
        size_t P = strata_model_nparams(t->model);
        double ss = strata_sumsq(g, P);
        s.loss = loss;
        s.grad_norm = (float)sqrt(ss);
        s.stop = stop_requested(t);
        s.skipped = !isfinite(loss) || !isfinite(ss);
        if (s.skipped) {
            ST_TRY(nonfinite_step(t, t->step + 1, loss, !all_finite(g, P), loss, s.grad_norm));
            s.lr = lr_at(t, ++t->step);
        } else {
            ST_TRY(local_update(t, ss, &s.lr));
        }
    }
    s.step = t->step;
    s.seconds = (double)(st_now_ns() - t0) * 1e-9;
    s.data_wait_s = t->data_wait_s;
    if (t->tpg) {
        strata_tp_stats_t ts = strata_tp_group_stats(t->tpg);
        s.tp_flight_s = ts.flight_s;
        s.tp_wait_s = ts.wait_s;
    }
    if (t->pipe) { // the picture at the traced step (or the last one without a trace step)
        const strata_train_config_t *c = &t->cfg;
        bool draw = c->pp_svg[0] && t->step == (c->trace_step <= c->steps ? c->trace_step : c->steps);
        ST_TRY(st_trainer_pp_report(t, &s, draw ? c->pp_svg : NULL));
    }
    s.tokens_per_s = (double)t->cfg.batch * t->cfg.seq / s.seconds;
    if (t->zero) {
        ST_TRY(st_straggler_end(&t->strag, t->comm, s.seconds, all_sum_cb, t, t->rank,
                                t->nranks));
        s.straggler = t->strag.flagged;
        s.straggler_ratio = (float)t->strag.ratio;
        ST_TRY(st_slowlink_end(&t->links, t->comm, all_sum_cb, t, t->rank));
        s.slow_link_from = t->links.flagged.from;
        s.slow_link_to = t->links.flagged.to;
        s.slow_link_MBps = (float)(t->links.flagged.rate / 1e6);
        s.slow_link_median_MBps = (float)(t->links.flagged.median / 1e6);
    }
    if (info)
        *info = s;
    return STRATA_OK;
}

/* ---- evaluation, metrics -------------------------------------------------------------------------- */

static double eval_loss(strata_trainer_t *t)
{
    const strata_train_config_t *c = &t->cfg;
    if (strata_data_ntokens(t->data, 1) < (size_t)c->seq + 1)
        return NAN;
    double sum = 0;
    int rows = c->batch / t->dp; // distributed: this rank's rows, averaged below
    for (int e = 0; e < c->eval_batches; e++) {
        float l;
        if (t->pipe ? st_trainer_pp_eval(t, e, &l) < 0
                    : (st_trainer_val_batch(t, e) < 0 ||
                       strata_model_forward(t->model, t->tokens, t->targets, rows, c->seq, &l) < 0))
            return NAN;
        sum += l;
    }
    if (t->zero && st_trainer_all_sum(t, &sum, 1) < 0)
        return NAN;
    return sum / c->eval_batches / t->nranks;
}

/* ,"key":value with value in printf's %.*f (g false) or %.*g form, or null: JSON has no NaN. */
static void put_num(FILE *f, const char *key, double v, int prec, bool g)
{
    if (!isfinite(v))
        fprintf(f, ",\"%s\":null", key);
    else if (g)
        fprintf(f, ",\"%s\":%.*g", key, prec, v);
    else
        fprintf(f, ",\"%s\":%.*f", key, prec, v);
}

/* The side tasks (--harvest): each one's steps and seconds so far, and the side passes finished at
 * this step. */
static void write_side(const strata_trainer_t *t, FILE *f, const strata_step_info_t *s)
{
    if (!t->harvester)
        return;
    fputs(",\"side\":{", f);
    for (int i = 0; i < t->nside; i++)
        fprintf(f, "%s\"%s\":{\"steps\":%" PRIu64 ",\"s\":%.6f}", i ? "," : "", t->side[i].name,
                strata_harvester_task_steps(t->harvester, t->side[i].id),
                strata_harvester_task_seconds(t->harvester, t->side[i].id));
    fputc('}', f);
    if (s->side_val_step > 0) {
        put_num(f, "side_val_loss", s->side_val_loss, 6, false);
        fprintf(f, ",\"side_val_step\":%" PRId64, s->side_val_step);
    }
    if (s->side_sample) {
        fputs(",\"side_sample\":", f);
        st_json_write_string(f, s->side_sample);
        fprintf(f, ",\"side_sample_step\":%" PRId64, s->side_sample_step);
    }
}

/* The checkpoint written after a step: which (NULL: none) and its wall time. */
typedef struct step_ckpt {
    const char *kind; /* "disk", "memory", or "disk_failed" / "memory_failed": not committed */
    double seconds;
} step_ckpt_t;

static void write_metrics(const strata_trainer_t *t, FILE *f, const strata_step_info_t *s,
                          double mfu, double val, const step_ckpt_t *ck)
{
    fprintf(f, "{\"step\":%" PRId64, s->step);
    put_num(f, "loss", s->loss, 6, false);
    put_num(f, "lr", s->lr, 6, true);
    put_num(f, "grad_norm", s->grad_norm, 6, true);
    put_num(f, "tokens_per_s", s->tokens_per_s, 1, false);
    put_num(f, "mfu", mfu, 5, false);
    put_num(f, "step_s", s->seconds, 6, false);
    put_num(f, "data_wait_s", s->data_wait_s, 6, false);
    if (!isnan(val))
        put_num(f, "val_loss", val, 6, false);
    if (s->skipped)
        fputs(",\"skipped\":true", f);
    if (ck->kind) {
        fprintf(f, ",\"ckpt\":\"%s\"", ck->kind);
        put_num(f, "ckpt_s", ck->seconds, 6, false);
    }
    if (s->straggler >= 0) {
        fprintf(f, ",\"straggler\":%d", s->straggler);
        put_num(f, "straggler_x", s->straggler_ratio, 3, false);
    }
    if (t->zero && !t->pool)
        fprintf(f, ",\"zero_gather_bytes\":%" PRIu64 ",\"zero_reduce_bytes\":%" PRIu64,
                s->zero_gather_bytes, s->zero_reduce_bytes);
    if (t->tpg) {
        put_num(f, "tp_comm_s", s->tp_flight_s, 6, false);
        put_num(f, "tp_wait_s", s->tp_wait_s, 6, false);
    }
    if (t->pipe) {
        put_num(f, "bubble_s", s->bubble_s, 6, false);
        if (t->harvester)
            put_num(f, "harvest_s", s->harvest_s, 6, false);
    }
    write_side(t, f, s);
    if (t->pipe) { // every stage's bubble, measured and as the schedule predicts it
        const char *key[2] = {"pp_bubble", "pp_bubble_predicted"};
        const double *v[2] = {s->pp_bubble, s->pp_bubble_predicted};
        for (int k = 0; k < 2; k++) {
            fprintf(f, ",\"%s\":[", key[k]);
            for (int i = 0; i < t->pp; i++)
                fprintf(f, "%s%.4f", i ? "," : "", v[k][i]);
            fputc(']', f);
        }
    }
    if (s->slow_link_from >= 0) {
        fprintf(f, ",\"slow_link\":[%d,%d]", s->slow_link_from, s->slow_link_to);
        put_num(f, "slow_link_MBps", s->slow_link_MBps, 3, false);
        put_num(f, "slow_link_median_MBps", s->slow_link_median_MBps, 3, false);
    }
    if (t->strag.window_ended) { // every rank's busy time per step over the window just ended
        fputs(",\"rank_busy_ms\":[", f);
        for (int r = 0; r < t->nranks; r++)
            fprintf(f, "%s%.3f", r ? "," : "", t->strag.busy_all[r] * 1e3);
        fputc(']', f);
    }
    fputs("}\n", f);
    fflush(f);
}

/* A memory checkpoint: a failure every rank agrees on (a full tmpfs) is a warning, once, and the
 * run goes on: the memory copy only shortens a recovery, the disk checkpoints are still written. */
static strata_status_t memory_checkpoint(strata_trainer_t *t, step_ckpt_t *ck)
{
    bool agreed, here;
    strata_status_t rc = st_trainer_write_step(t, true, &agreed, &here);
    ck->kind = "memory";
    if (rc == STRATA_OK || !agreed)
        return rc;
    ck->kind = "memory_failed";
    st_progress_break(&t->prog);
    if (!t->mem_failed && (here || t->rank == 0)) // the failing ranks' reasons, rank 0's summary
        fprintf(stderr, "strata train: warning: %s; training goes on without this memory "
                "checkpoint (a recovery falls back to the older memory step or the disk; further "
                "failures are not reported)\n", strata_last_error());
    t->mem_failed = true;
    return STRATA_OK;
}

/* Rank 0 prints the side passes finished at this step (the progress line goes on below). */
static void print_side(strata_trainer_t *t, const strata_step_info_t *s)
{
    if (t->rank != 0 || (s->side_val_step <= 0 && !s->side_sample))
        return;
    st_progress_break(&t->prog);
    if (s->side_val_step > 0)
        fprintf(stderr, "strata train: step %" PRId64 ": side eval of step %" PRId64 ": val_loss "
                "%.4f\n", s->step, s->side_val_step, s->side_val_loss);
    if (s->side_sample)
        fprintf(stderr, "strata train: step %" PRId64 ": side sample of step %" PRId64 ": %s\n",
                s->step, s->side_sample_step, s->side_sample);
}

/* The steps to cfg.steps (or a stop request): each one's trace, progress, evaluation, checkpoint and
 * metrics line. */
static strata_status_t run_steps(strata_trainer_t *t, float *losses, double flops_tok)
{
    const strata_train_config_t *c = &t->cfg;
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
        if (t->harvester && (t->step == c->steps || s.stop)) // the side passes end with the run
            ST_TRY(st_trainer_harvest_finish(t, &s));
        if (losses)
            losses[s.step - 1] = s.loss;
        double mfu = t->peak_gflops > 0 ? s.tokens_per_s * flops_tok /
                                               (t->peak_gflops * 1e9 * t->nranks) : 0;
        double val = NAN;
        // With the eval side task the evaluation runs in the bubbles, but the last step's here.
        if (c->eval_every > 0 && (t->step == c->steps ||
                                  (t->step % c->eval_every == 0 && !t->side_eval)))
            val = eval_loss(t);
        bool stop = s.stop && t->step < c->steps;
        print_side(t, &s);
        st_progress_step(&t->prog, t, &s, val, t->step == c->steps || stop);
        if (!c->progress && isfinite(val))
            ST_LOG_INFO(ST_SUB_TRAIN, "step %" PRId64 " val_loss %.4f", t->step, val);
        // The step's checkpoint, then its metrics line (which says what was written, how fast).
        bool disk = c->ckpt_dir[0] && ((c->ckpt_every > 0 && t->step % c->ckpt_every == 0) ||
                                       t->step == c->steps || stop);
        step_ckpt_t ck = {NULL, 0};
        uint64_t c0 = st_now_ns();
        if (disk) {
            ck.kind = "disk";
            rc = strata_trainer_checkpoint(t);
        } else if (c->mem_ckpt_every > 0 && t->step % c->mem_ckpt_every == 0) {
            rc = memory_checkpoint(t, &ck); // a step on disk needs no memory copy: it is as new
        }
        ck.seconds = (double)(st_now_ns() - c0) * 1e-9;
        if (rc < 0) // the run ends with the error; the line says the step was not saved
            ck.kind = disk ? "disk_failed" : "memory_failed";
        if (t->metrics)
            write_metrics(t, t->metrics, &s, mfu, val, &ck);
        ST_TRY(rc);
        if (stop) {
            t->stopped = stop_requested(t) ? (int)*t->stop_flag : -1;
            break;
        }
    }
    if (t->zero) // the last step's parameter all-gathers: the arena is consistent on return
        ST_TRY(strata_zero_sync(t->zero));
    return STRATA_OK;
}

strata_status_t strata_trainer_run(strata_trainer_t *t, float *losses)
{
    const strata_train_config_t *c = &t->cfg;
    if ((c->progress || t->metrics) && t->peak_gflops == 0) // for MFU
        t->peak_gflops = strata_measure_gemm_peak(1024);
    double flops_tok = strata_model_flops_per_token(t->model, c->seq);
    st_progress_start(&t->prog, t, flops_tok);
    strata_status_t rc = run_steps(t, losses, flops_tok);
    if (rc == STRATA_OK)
        st_progress_summary(&t->prog);
    else // the error's message starts on a line of its own
        st_progress_break(&t->prog);
    return rc;
}
