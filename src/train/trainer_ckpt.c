/* The trainer's checkpoints: writing this rank's file, committing a step once every rank's file is
 * known written (the manifest, then pruning, decided by rank 0 for the whole job), and resume from
 * the newest committed step that assembles on every rank; never a silent fresh start. The file
 * format is checkpoint.c, the step (manifest, assembly, pruning rules) ckpt_step.c. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "strata/trace.h"
#include "train/trainer.h"

/* ---- writing ------------------------------------------------------------------------------------- */

/* The one-process file: every parameter by name, then optim.m and optim.v over the whole arena. */
static strata_status_t write_unsharded(strata_trainer_t *t, const char *path,
                                       const strata_ckpt_meta_t *meta, strata_ckpt_digest_t *d)
{
    int nt = strata_model_ntensors(t->model);
    strata_ckpt_tensor_t *ts = calloc((size_t)nt + 2, sizeof *ts);
    if (!ts)
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
    float *P = strata_model_param_arena(t->model);
    for (int i = 0; i < nt; i++) {
        const strata_tensor_info_t *ti = strata_model_tensor(t->model, i);
        ts[i] = (strata_ckpt_tensor_t){ti->name, ti->ndim, {ti->shape[0], ti->shape[1]},
                                       P + ti->offset};
    }
    int64_t np = (int64_t)strata_model_nparams(t->model);
    ts[nt] = (strata_ckpt_tensor_t){"optim.m", 1, {np}, t->m};
    ts[nt + 1] = (strata_ckpt_tensor_t){"optim.v", 1, {np}, t->v};
    strata_status_t rc = strata_ckpt_write(path, ts, nt + 2, meta, d);
    free(ts);
    return rc;
}

/* This rank's shard file: every range it owns as params@off, optim.m@off, optim.v@off. At stage 0
 * (every rank holds everything) rank r writes the r-th of N equal cuts of the arena. */
static strata_status_t write_shard(strata_trainer_t *t, const char *path, strata_ckpt_meta_t *meta,
                                   strata_ckpt_digest_t *d)
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
    meta->shard_offset = nr ? (int64_t)rg[0].offset : 0;
    meta->shard_count = total;
    strata_status_t rc = strata_ckpt_write(path, ts, 3 * nr, meta, d);
    free(ts);
    free(names);
    return rc;
}

/* This rank's file of the current step. */
static strata_status_t write_own(strata_trainer_t *t, strata_ckpt_digest_t *d)
{
    char path[2048];
    strata_ckpt_path(t->cfg.ckpt_dir, t->step, t->rank, t->nranks, path, sizeof path);
    strata_ckpt_meta_t meta = {.step = t->step, .seed = t->cfg.seed, .data_pos = t->step + 1,
                               .rank = t->rank, .nranks = t->nranks, .shard_offset = 0,
                               .shard_count = (int64_t)strata_model_nparams(t->model)};
    snprintf(meta.run_id, sizeof meta.run_id, "%s", t->run_id);
    strata_train_config_to_json(&t->cfg, meta.config, sizeof meta.config);
    strata_trace_begin("io", "checkpoint");
    strata_status_t rc = t->zero ? write_shard(t, path, &meta, d)
                                 : write_unsharded(t, path, &meta, d);
    strata_trace_end("io", "checkpoint");
    return rc;
}

/* ", r" for every rank whose slot k of 3 is 0 (it failed), at most 16. */
static void failed_ranks(const double *g, int n, char *out, size_t size)
{
    int shown = 0;
    out[0] = 0;
    for (int r = 0; r < n && shown < 16; r++)
        if (g[3 * r] == 0)
            snprintf(out + strlen(out), size - strlen(out), "%s%d", shown++ ? ", " : "", r);
}

strata_status_t strata_trainer_checkpoint(strata_trainer_t *t)
{
    const char *dir = t->cfg.ckpt_dir;
    if (!dir[0])
        return st_error(STRATA_ERR_INVALID_ARG, "train: no checkpoint directory configured");
    int N = t->nranks, r = t->rank;
    // A step being rewritten stops existing first; its old shards never pass for the new ones.
    strata_status_t rc = r == 0 ? strata_ckpt_uncommit(dir, t->step) : STRATA_OK;
    strata_ckpt_digest_t d = {0, 0};
    if (rc == STRATA_OK)
        rc = write_own(t, &d);
    char msg[1024] = "";
    if (rc < 0)
        snprintf(msg, sizeof msg, "%s", strata_last_error());
    // Every rank learns every rank's outcome and digest (slots of 3; a sum of one value per slot).
    double *g = calloc(3 * (size_t)N, sizeof *g);
    if (!g)
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
    g[3 * r] = rc == STRATA_OK;
    g[3 * r + 1] = d.header_crc32;
    g[3 * r + 2] = (double)d.bytes;
    strata_status_t grc = st_trainer_all_sum(t, g, 3 * N);
    if (grc < 0) {
        free(g);
        return grc;
    }
    char bad[160];
    failed_ranks(g, N, bad, sizeof bad);
    if (bad[0]) {
        free(g);
        if (rc < 0)
            return st_error(rc, "%s", msg);
        return st_error(STRATA_ERR_IO, "train: checkpoint step %" PRId64 " not committed: rank %s "
                        "could not write its file (see its message)", t->step, bad);
    }
    // Rank 0 commits, then prunes: every shard of the step is known written.
    double ok = 0;
    if (r == 0) {
        strata_ckpt_manifest_t m = {.step = t->step, .nranks = N,
                                    .nparams = (int64_t)strata_model_nparams(t->model),
                                    .seed = t->cfg.seed};
        snprintf(m.run_id, sizeof m.run_id, "%s", t->run_id);
        strata_train_config_to_json(&t->cfg, m.config, sizeof m.config);
        m.shards = calloc((size_t)N, sizeof *m.shards);
        if (!m.shards) {
            rc = st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
        } else {
            for (int k = 0; k < N; k++)
                m.shards[k] = (strata_ckpt_digest_t){(uint32_t)g[3 * k + 1],
                                                     (uint64_t)g[3 * k + 2]};
            rc = strata_ckpt_commit(dir, &m);
        }
        free(m.shards);
        if (rc == STRATA_OK) {
            (void)strata_ckpt_prune(dir, t->step, t->cfg.ckpt_keep);
            (void)strata_ckpt_clean_tmp(dir);
        } else {
            snprintf(msg, sizeof msg, "%s", strata_last_error());
        }
        ok = rc == STRATA_OK;
    }
    free(g);
    ST_TRY(st_trainer_all_sum(t, &ok, 1));
    if (ok == 0)
        return r == 0 ? st_error(rc, "%s", msg)
                      : st_error(STRATA_ERR_IO, "train: checkpoint step %" PRId64 " not "
                                 "committed: rank 0 could not write its manifest", t->step);
    return STRATA_OK;
}

/* ---- reading ------------------------------------------------------------------------------------- */

strata_status_t strata_trainer_load(strata_trainer_t *t, const char *path)
{
    strata_ckpt_t *ck;
    ST_TRY(strata_ckpt_open(path, &ck));
    size_t P = strata_model_nparams(t->model);
    int nt = strata_model_ntensors(t->model);
    float *p = malloc((P * 3 + 1) * sizeof(float)); // params, m, v, installed only once all loaded
    strata_ckpt_tensor_t *ts = calloc((size_t)nt + 2, sizeof *ts);
    strata_status_t rc = STRATA_OK;
    if (!p || !ts || t->zero) {
        rc = t->zero ? st_error(STRATA_ERR_INVALID_ARG, "train: load one file only in one process")
                     : st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
        goto out;
    }
    for (int i = 0; i < nt; i++) {
        const strata_tensor_info_t *ti = strata_model_tensor(t->model, i);
        ts[i] = (strata_ckpt_tensor_t){ti->name, ti->ndim, {ti->shape[0], ti->shape[1]},
                                       p + ti->offset};
    }
    ts[nt] = (strata_ckpt_tensor_t){"optim.m", 1, {(int64_t)P}, p + P};
    ts[nt + 1] = (strata_ckpt_tensor_t){"optim.v", 1, {(int64_t)P}, p + 2 * P};
    ST_TRY_GOTO(strata_ckpt_load(ck, ts, nt + 2), rc, out);
    memcpy(strata_model_param_arena(t->model), p, P * sizeof(float));
    memcpy(t->m, p + P, P * sizeof(float));
    memcpy(t->v, p + 2 * P, P * sizeof(float));
    t->step = strata_ckpt_meta(ck)->step;
    if (strata_ckpt_meta(ck)->run_id[0])
        snprintf(t->run_id, sizeof t->run_id, "%s", strata_ckpt_meta(ck)->run_id);
out:
    free(ts);
    free(p);
    strata_ckpt_close(ck);
    return rc;
}

/* Installs an assembled step: the arena, this rank's optimizer state, the step and the run id. */
static void install(strata_trainer_t *t, const strata_ckpt_full_t *full)
{
    size_t P = full->nparams;
    memcpy(strata_model_param_arena(t->model), full->params, P * sizeof(float));
    if (!t->zero) {
        memcpy(t->m, full->m, P * sizeof(float));
        memcpy(t->v, full->v, P * sizeof(float));
    }
    for (int k = 0; k < t->nranges; k++) {
        const strata_zero_shard_t *g = &t->ranges[k];
        if (t->zcfg.stage == 3) // the engine's own shard
            memcpy(g->params, full->params + g->offset, g->count * sizeof(float));
        memcpy(t->m + g->state_offset, full->m + g->offset, g->count * sizeof(float));
        memcpy(t->v + g->state_offset, full->v + g->offset, g->count * sizeof(float));
    }
    t->step = full->meta.step;
    snprintf(t->run_id, sizeof t->run_id, "%s", full->meta.run_id);
}

/* Rank 0's value of x, on every rank. */
static strata_status_t from_rank0(strata_trainer_t *t, double *x)
{
    if (t->rank != 0)
        *x = 0;
    return st_trainer_all_sum(t, x, 1);
}

strata_status_t strata_trainer_resume(strata_trainer_t *t, int64_t *resumed_step)
{
    *resumed_step = 0;
    const char *dir = t->cfg.ckpt_dir;
    if (!dir[0])
        return STRATA_OK;
    (void)strata_ckpt_clean_tmp(dir); // no writer of this job is running yet
    int64_t steps[256];
    int n = t->rank == 0 ? strata_ckpt_steps(dir, steps, 256) : 0;
    char first_err[1024] = "";
    int64_t first_bad = -1;
    for (int i = 0;; i++) {
        double cand = i < n ? (double)steps[i] : -1.0;
        ST_TRY(from_rank0(t, &cand));
        if (cand < 0)
            break;
        strata_ckpt_full_t full;
        strata_status_t rc = strata_ckpt_assemble(t->model, dir, (int64_t)cand, true, &full);
        double bad[2] = {rc < 0, rc < 0 && t->rank == 0};
        char msg[1024] = "";
        if (rc < 0)
            snprintf(msg, sizeof msg, "%s", strata_last_error());
        ST_TRY(st_trainer_all_sum(t, bad, 2));
        if (bad[0] == 0) {
            install(t, &full);
            strata_ckpt_full_free(&full);
            *resumed_step = t->step;
            if (first_bad >= 0 && t->rank == 0)
                fprintf(stderr, "strata train: warning: resumed from step %" PRId64 ", older than "
                        "the newest committed step %" PRId64 " (refused above)\n", t->step,
                        first_bad);
            return STRATA_OK;
        }
        if (first_bad < 0) {
            first_bad = (int64_t)cand;
            snprintf(first_err, sizeof first_err, "%s", msg[0] ? msg : "refused on another rank");
        }
        // One message per refused step: rank 0's own, else the failing ranks'.
        if (rc < 0 && (t->rank == 0 || bad[1] == 0))
            fprintf(stderr, "strata train: warning: refusing checkpoint step %" PRId64 ": %s\n",
                    (int64_t)cand, msg);
    }
    if (first_bad >= 0)
        return st_error(STRATA_ERR_PARSE, "train: --resume: no usable checkpoint step in %s (the "
                        "newest, step %" PRId64 ": %s); refusing to start over", dir, first_bad,
                        first_err);
    // No committed step: start fresh only if the directory holds no checkpoint file at all.
    char name[256] = "";
    double files = t->rank == 0 ? strata_ckpt_count_files(dir, name, sizeof name) : 0;
    ST_TRY(from_rank0(t, &files));
    if (files > 0)
        return st_error(STRATA_ERR_PARSE, "train: --resume: %s holds %.0f checkpoint file%s "
                        "(newest: %s) but no committed step (a write interrupted by a crash, a "
                        "full disk, or files of another strata); refusing to start over: remove "
                        "them, or run without --resume", dir, files, files == 1 ? "" : "s",
                        t->rank == 0 ? name : "see rank 0");
    return STRATA_OK;
}
