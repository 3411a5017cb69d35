/* The trainer's checkpoints: writing this rank's file, committing a step once every rank's file is
 * known written (the manifest, then pruning, decided by rank 0 for the whole job), to the disk or
 * to memory (a directory that outlives the ranks, not the host: no fsync, one step kept), and
 * resume from the newest committed step of either that assembles on every rank and belongs to this
 * run; never a silent fresh start. The file format is checkpoint.c, the step (manifest, assembly,
 * pruning rules) ckpt_step.c. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "base/base.h"
#include "strata/trace.h"
#include "train/ckpt_internal.h"
#include "train/trainer.h"

/* ---- writing ------------------------------------------------------------------------------------- */

/* The one-process file: every parameter by name, then optim.m and optim.v over the whole arena. */
static strata_status_t write_unsharded(strata_trainer_t *t, const char *path,
                                       const strata_ckpt_meta_t *meta, strata_ckpt_digest_t *d,
                                       bool durable)
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
    strata_status_t rc = st_ckpt_write(path, ts, nt + 2, meta, NULL, 0, d, durable);
    free(ts);
    return rc;
}

/* The floats that stage s's TP parts hold together (the whole model without a pipeline). */
static size_t stage_floats(const strata_trainer_t *t, int s)
{
    return strata_gpt_config_part_nparams(&t->cfg.model, t->tp,
                                          t->stage_layers ? &t->stage_layers[s] : NULL) *
           (size_t)t->tp;
}

/* The pieces of the model's tensors that the ranges rg[0..nr) of this rank's arena hold (the
 * shard's "tensors" record), written at `base` (the ranges' offset in the step's arenas); *np the
 * count. NULL when out of memory. */
static strata_ckpt_piece_t *shard_pieces(const strata_trainer_t *t, const strata_zero_shard_t *rg,
                                         int nr, size_t base, int *np)
{
    int nt = strata_model_ntensors(t->model), n = 0;
    strata_ckpt_piece_t *p = calloc((size_t)nr * (size_t)nt + 1, sizeof *p);
    for (int i = 0; p && i < nr; i++) {
        size_t b0 = rg[i].offset, e0 = b0 + rg[i].count;
        for (int k = 0; k < nt; k++) {
            const strata_tensor_info_t *ti = strata_model_tensor(t->model, k);
            size_t b = ST_MAX(b0, ti->offset), e = ST_MIN(e0, ti->offset + ti->count);
            if (b >= e)
                continue;
            bool split = ti->split_dim >= 0 && t->tp > 1;
            p[n++] = (strata_ckpt_piece_t){
                .name = ti->name, .ndim = ti->ndim,
                .shape = {ti->full_shape[0], ti->full_shape[1]}, .tp = t->tp, .tp_rank = t->tp_rank,
                .split_dim = split ? ti->split_dim : -1, .split_groups = split ? ti->split_groups : 1,
                .part_shape = {ti->shape[0], ti->shape[1]},
                .begin = (int64_t)(b - ti->offset), .end = (int64_t)(e - ti->offset),
                .range = (int64_t)(base + b0), .at = (int64_t)(b - b0), .tied_copy = ti->tied_copy};
        }
    }
    *np = n;
    return p;
}

/* This rank's shard file: every range it owns as params@off, optim.m@off, optim.v@off, and what
 * they hold tensor by tensor (the pieces). At stage 0 (every rank holds everything) rank r writes
 * the r-th of N equal cuts of the arena. */
static strata_status_t write_shard(strata_trainer_t *t, const char *path, strata_ckpt_meta_t *meta,
                                   strata_ckpt_digest_t *d, bool durable)
{
    ST_TRY(strata_zero_sync(t->zero)); // stages 1-2: the arena's all-gathers have landed
    strata_zero_shard_t cut, *rg = t->ranges;
    int nr = t->nranges;
    if (t->zcfg.stage == 0) { // the data-parallel group's cut of this TP part
        size_t P = strata_model_nparams(t->model), N = (size_t)t->dp, r = (size_t)t->dp_rank;
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
    // Offsets in the parts of every (stage, TP rank) laid one after another: what assembling reads.
    size_t base = (size_t)t->tp_rank * strata_model_nparams(t->model);
    for (int s = 0; s < t->pp_rank; s++)
        base += stage_floats(t, s);
    int64_t total = 0;
    for (int i = 0; i < nr; i++) {
        float *src[3] = {rg[i].params, t->m + rg[i].state_offset, t->v + rg[i].state_offset};
        const char *pre[3] = {"params", "optim.m", "optim.v"};
        for (int k = 0; k < 3; k++) {
            snprintf(names[3 * i + k], sizeof names[0], "%s@%zu", pre[k], base + rg[i].offset);
            ts[3 * i + k] = (strata_ckpt_tensor_t){names[3 * i + k], 1, {(int64_t)rg[i].count},
                                                   src[k]};
        }
        total += (int64_t)rg[i].count;
    }
    meta->shard_offset = nr ? (int64_t)(base + rg[0].offset) : 0;
    meta->shard_count = total;
    int np = 0;
    strata_ckpt_piece_t *pieces = shard_pieces(t, rg, nr, base, &np);
    strata_status_t rc = pieces ? st_ckpt_write(path, ts, 3 * nr, meta, pieces, np, d, durable)
                                : st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
    free(pieces);
    free(ts);
    free(names);
    return rc;
}

/* This rank's file of the current step in dir. */
static strata_status_t write_own(strata_trainer_t *t, const char *dir, bool durable,
                                 strata_ckpt_digest_t *d)
{
    char path[2048];
    strata_ckpt_path(dir, t->step, t->rank, t->nranks, path, sizeof path);
    strata_ckpt_meta_t meta = {.step = t->step, .seed = t->cfg.seed, .data_pos = t->step + 1,
                               .rank = t->rank, .nranks = t->nranks, .shard_offset = 0,
                               .shard_count = (int64_t)strata_model_nparams(t->model)};
    snprintf(meta.run_id, sizeof meta.run_id, "%s", t->run_id);
    strata_train_config_to_json(&t->cfg, meta.config, sizeof meta.config);
    const char *span = durable ? "checkpoint" : "memory_checkpoint";
    strata_trace_begin("io", span);
    strata_status_t rc = t->zero ? write_shard(t, path, &meta, d, durable)
                                 : write_unsharded(t, path, &meta, d, durable);
    strata_trace_end("io", span);
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

strata_status_t st_trainer_write_step(strata_trainer_t *t, bool memory, bool *agreed, bool *here)
{
    *agreed = *here = false;
    const char *dir = memory ? t->cfg.mem_ckpt_dir : t->cfg.ckpt_dir;
    if (!dir[0])
        return st_error(STRATA_ERR_INVALID_ARG, "train: no %scheckpoint directory configured",
                        memory ? "memory " : "");
    int N = t->nranks, r = t->rank;
    // A step being rewritten stops existing first; its old shards never pass for the new ones.
    strata_status_t rc = r == 0 ? strata_ckpt_uncommit(dir, t->step) : STRATA_OK;
    strata_ckpt_digest_t d = {0, 0};
    if (rc == STRATA_OK) // the optimizer in the pool: this rank's cut of m and v comes from there
        rc = st_trainer_pool_pull_state(t);
    if (rc == STRATA_OK)
        rc = write_own(t, dir, !memory, &d);
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
        *agreed = true;
        *here = rc < 0;
        if (rc < 0)
            return st_error(rc, "%s", msg);
        return st_error(STRATA_ERR_IO, "train: %scheckpoint step %" PRId64 " not committed: rank "
                        "%s could not write its file (see its message)", memory ? "memory " : "",
                        t->step, bad);
    }
    // Rank 0 commits, then prunes: every shard of the step is known written.
    double ok = 0;
    if (r == 0) {
        strata_ckpt_manifest_t m = {.step = t->step, .nranks = N, .tp = t->tp, .pp = t->pp,
                                    .stages = t->stage_layers, .seed = t->cfg.seed};
        for (int s = 0; s < t->pp; s++)
            m.nparams += (int64_t)stage_floats(t, s);
        snprintf(m.run_id, sizeof m.run_id, "%s", t->run_id);
        strata_train_config_to_json(&t->cfg, m.config, sizeof m.config);
        m.shards = calloc((size_t)N, sizeof *m.shards);
        if (!m.shards) {
            rc = st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
        } else {
            for (int k = 0; k < N; k++)
                m.shards[k] = (strata_ckpt_digest_t){(uint32_t)g[3 * k + 1],
                                                     (uint64_t)g[3 * k + 2]};
            rc = st_ckpt_commit(dir, &m, !memory);
        }
        free(m.shards);
        if (rc == STRATA_OK) {
            if (memory) // the memory directory holds this job's newest step, nothing else
                (void)st_ckpt_keep_only(dir, t->step);
            else
                (void)strata_ckpt_prune(dir, t->step, t->cfg.ckpt_keep);
            (void)strata_ckpt_clean_tmp(dir);
        } else {
            snprintf(msg, sizeof msg, "%s", strata_last_error());
        }
        ok = rc == STRATA_OK;
    }
    free(g);
    ST_TRY(st_trainer_all_sum(t, &ok, 1));
    *agreed = true;
    *here = r == 0;
    if (ok == 0)
        return r == 0 ? st_error(rc, "%s", msg)
                      : st_error(STRATA_ERR_IO, "train: %scheckpoint step %" PRId64 " not "
                                 "committed: rank 0 could not write its manifest",
                                 memory ? "memory " : "", t->step);
    return STRATA_OK;
}

strata_status_t strata_trainer_checkpoint(strata_trainer_t *t)
{
    bool agreed, here;
    return st_trainer_write_step(t, false, &agreed, &here);
}

strata_status_t strata_trainer_checkpoint_memory(strata_trainer_t *t)
{
    bool agreed, here;
    return st_trainer_write_step(t, true, &agreed, &here);
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

/* Replaces a whole-model arena (full->nparams floats) by this rank's TP part of it. */
static strata_status_t take_part(strata_trainer_t *t, float **a)
{
    if (!*a || (t->tp <= 1 && t->pp <= 1))
        return STRATA_OK;
    size_t part = strata_model_nparams(t->model);
    float *all = malloc(part * (size_t)t->tp * sizeof(float));
    if (!all)
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
    strata_status_t rc = strata_gpt_arena_convert(
        &t->cfg.model, t->tp, t->stage_layers ? &t->stage_layers[t->pp_rank] : NULL, *a, all, true);
    if (rc == STRATA_OK) {
        memmove(all, all + (size_t)t->tp_rank * part, part * sizeof(float));
        free(*a);
        *a = all;
    } else {
        free(all);
    }
    return rc;
}

/* An assembled step (the whole model's arena) cut to this rank's TP part, ready to install. */
static strata_status_t to_part(strata_trainer_t *t, strata_ckpt_full_t *full)
{
    ST_TRY(take_part(t, &full->params));
    ST_TRY(take_part(t, &full->m));
    return take_part(t, &full->v);
}

/* Installs an assembled step cut by to_part: the arena, this rank's optimizer state, the step and
 * the run id. */
static void install(strata_trainer_t *t, const strata_ckpt_full_t *full)
{
    size_t P = strata_model_nparams(t->model);
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
    t->pool_stale = true; // the optimizer in the pool: the next step writes this state there
}

/* Rank 0's values of x[0..n), on every rank. */
static strata_status_t from_rank0(strata_trainer_t *t, double *x, int n)
{
    if (t->rank != 0)
        for (int i = 0; i < n; i++)
            x[i] = 0;
    return st_trainer_all_sum(t, x, n);
}

/* A committed step a resume may propose, and where it is. */
typedef struct candidate {
    int64_t step;
    bool memory;
} candidate_t;

/* Newest first; memory before disk at the same step. */
static int newest_first(const void *a, const void *b)
{
    const candidate_t *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? 1 : -1;
    return (int)y->memory - (int)x->memory;
}

/* Rank 0: the committed steps of the disk and memory directories, merged newest first (at most 256
 * of each), and the newest committed step of each (-1: none). */
static candidate_t *list_candidates(const char *disk, const char *mem, int *n, int64_t *disk_step,
                                    int64_t *mem_step)
{
    int64_t ds[256], ms[256];
    int nd = disk[0] ? strata_ckpt_steps(disk, ds, 256) : 0;
    int nm = mem[0] ? strata_ckpt_steps(mem, ms, 256) : 0;
    *disk_step = nd ? ds[0] : -1;
    *mem_step = nm ? ms[0] : -1;
    candidate_t *c = malloc(((size_t)nd + (size_t)nm + 1) * sizeof *c);
    *n = 0;
    if (!c)
        return NULL;
    for (int i = 0; i < nd; i++)
        c[(*n)++] = (candidate_t){ds[i], false};
    for (int i = 0; i < nm; i++)
        c[(*n)++] = (candidate_t){ms[i], true};
    qsort(c, (size_t)*n, sizeof *c, newest_first);
    return c;
}

/* Rank 0: the run of the disk's checkpoints, the run id of its newest manifest that reads back
 * ("" when none does). */
static void disk_run(const char *disk, char run[17])
{
    int64_t steps[256];
    int n = disk[0] ? strata_ckpt_steps(disk, steps, 256) : 0;
    run[0] = 0;
    for (int i = 0; i < n && !run[0]; i++) {
        strata_ckpt_manifest_t m;
        if (strata_ckpt_manifest_read(disk, steps[i], &m) == STRATA_OK)
            snprintf(run, 17, "%s", m.run_id);
        strata_ckpt_manifest_free(&m);
    }
}

/* The first key whose value differs between two training configs (JSON text), as
 * "\"key\" recorded V, this run's W"; "" when they are equal. */
static void config_diff(const char *recorded, const char *mine, char *out, size_t size)
{
    out[0] = 0;
    if (!strcmp(recorded, mine))
        return;
    json_object *a = json_tokener_parse(recorded), *b = json_tokener_parse(mine);
    snprintf(out, size, "not JSON");
    if (a && b && json_object_is_type(a, json_type_object)) {
        snprintf(out, size, "another set of keys");
        json_object_object_foreach(a, key, va) {
            json_object *vb;
            if (!json_object_object_get_ex(b, key, &vb))
                continue;
            // Each object prints into its own buffer: both strings stay valid.
            const char *x = json_object_to_json_string(va), *y = json_object_to_json_string(vb);
            if (strcmp(x, y) != 0) {
                snprintf(out, size, "\"%s\" recorded %.200s, this run's %.200s", key, x, y);
                break;
            }
        }
    }
    json_object_put(a);
    json_object_put(b);
}

/* Rank 0: why memory step `step` is not one of this run's ("" when it may be). The memory directory
 * may have been left by another job (shared by mistake): with committed steps on disk, the memory
 * step must belong to their run; with none, to a run of this very training config. A manifest that
 * does not read back is left to the assembly to report. */
static void memory_refusal(strata_trainer_t *t, int64_t step, bool disk_committed, const char *run,
                           char *why, size_t size)
{
    const char *disk = t->cfg.ckpt_dir, *mem = t->cfg.mem_ckpt_dir;
    strata_ckpt_manifest_t m;
    why[0] = 0;
    if (strata_ckpt_manifest_read(mem, step, &m) < 0)
        return;
    char mine[sizeof m.config];
    if (disk_committed && !run[0])
        snprintf(why, size, "%s/ckpt_%08" PRId64 ".manifest.json: no manifest of the committed "
                 "steps in %s reads back, so their run is unknown and this memory step cannot be "
                 "matched to it", mem, step, disk);
    else if (disk_committed && strcmp(m.run_id, run) != 0)
        snprintf(why, size, "%s/ckpt_%08" PRId64 ".manifest.json: it belongs to run %s, the "
                 "checkpoints in %s to run %s (a memory directory of another job?)", mem, step,
                 m.run_id, disk, run);
    else if (!disk_committed) {
        char diff[600];
        if (strata_train_config_to_json(&t->cfg, mine, sizeof mine) < 0)
            snprintf(diff, sizeof diff, "this run's config does not fit in a manifest");
        else
            config_diff(m.config, mine, diff, sizeof diff);
        if (diff[0])
            snprintf(why, size, "%s/ckpt_%08" PRId64 ".manifest.json: no committed step on disk "
                     "to match its run (%s) against, and it was written with another training "
                     "config (%s): a memory directory of another job?", mem, step, m.run_id, diff);
    }
    strata_ckpt_manifest_free(&m);
}

/* Rank 0: the "resumed_from" record of the metrics file. */
static void record_resume(strata_trainer_t *t)
{
    if (!t->metrics)
        return;
    const strata_resume_info_t *ri = &t->resumed;
    const char *src = ri->step == 0 ? "none" : ri->from_memory ? "memory" : "disk";
    json_object *o = json_object_new_object();
    json_object_object_add(o, "event", json_object_new_string("resumed_from"));
    json_object_object_add(o, "step", json_object_new_int64(ri->step));
    json_object_object_add(o, "source", json_object_new_string(src));
    json_object_object_add(o, "dir", json_object_new_string(ri->step == 0 ? ""
                                                            : ri->from_memory ? t->cfg.mem_ckpt_dir
                                                                              : t->cfg.ckpt_dir));
    json_object_object_add(o, "disk_step", json_object_new_int64(ri->disk_step));
    json_object_object_add(o, "memory_step", json_object_new_int64(ri->memory_step));
    char secs[32];
    snprintf(secs, sizeof secs, "%.6f", ri->seconds);
    json_object_object_add(o, "resume_s", json_object_new_double_s(ri->seconds, secs));
    int flags = JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE;
    fprintf(t->metrics, "%s\n", json_object_to_json_string_ext(o, flags));
    fflush(t->metrics);
    json_object_put(o);
}

strata_resume_info_t strata_trainer_resume_info(const strata_trainer_t *t)
{
    return t->resumed;
}

/* Tries rank 0's candidates newest first until one assembles on every rank (*found), reporting each
 * refused one; *first_bad / first_err: the newest refused ("" and -1 when none). */
static strata_status_t try_candidates(strata_trainer_t *t, const candidate_t *cs, int nc,
                                      bool *found, int64_t *first_bad, char *first_err,
                                      size_t err_size)
{
    const char *disk = t->cfg.ckpt_dir, *mem = t->cfg.mem_ckpt_dir;
    bool disk_committed = false;
    char run[17] = "";
    for (int i = 0; i < nc; i++)
        disk_committed |= !cs[i].memory;
    if (t->rank == 0 && disk_committed)
        disk_run(disk, run);
    *found = false;
    for (int i = 0;; i++) {
        // Rank 0 proposes {step, from memory, refused by rank 0 alone}.
        char msg[4096] = "";
        double p[3] = {-1, 0, 0};
        if (t->rank == 0 && i < nc) {
            p[0] = (double)cs[i].step;
            p[1] = cs[i].memory;
            if (cs[i].memory)
                memory_refusal(t, cs[i].step, disk_committed, run, msg, sizeof msg);
            p[2] = msg[0] != 0;
        }
        ST_TRY(from_rank0(t, p, 3));
        if (p[0] < 0)
            return STRATA_OK;
        int64_t step = (int64_t)p[0];
        bool memory = p[1] != 0;
        const char *what = memory ? "memory step" : "checkpoint step";
        strata_ckpt_full_t full;
        strata_status_t rc = p[2] != 0 ? STRATA_ERR_PARSE
                                       : strata_ckpt_assemble(t->model, memory ? mem : disk, step,
                                                              true, &full);
        if (rc == STRATA_OK && (rc = to_part(t, &full)) < 0)
            strata_ckpt_full_free(&full);
        double bad[2] = {rc < 0, rc < 0 && t->rank == 0};
        if (rc < 0 && p[2] == 0)
            snprintf(msg, sizeof msg, "%s", strata_last_error());
        ST_TRY(st_trainer_all_sum(t, bad, 2));
        if (bad[0] == 0) {
            install(t, &full);
            strata_ckpt_full_free(&full);
            t->resumed.from_memory = memory;
            if (*first_bad >= 0 && t->rank == 0)
                fprintf(stderr, "strata train: warning: resumed from %s %" PRId64 ", older than "
                        "the newest committed step %" PRId64 " (refused above)\n", what, t->step,
                        *first_bad);
            *found = true;
            return STRATA_OK;
        }
        if (rc == STRATA_OK)
            strata_ckpt_full_free(&full);
        if (*first_bad < 0) {
            *first_bad = step;
            snprintf(first_err, err_size, "%sstep %" PRId64 ": %s", memory ? "memory " : "",
                     step, msg[0] ? msg : p[2] != 0 ? "refused by rank 0 (see its message)"
                                                    : "refused on another rank");
        }
        // One message per refused step: rank 0's own, else the failing ranks'.
        if (rc < 0 && (t->rank == 0 || bad[1] == 0))
            fprintf(stderr, "strata train: warning: refusing %s %" PRId64 ": %s\n", what, step,
                    msg);
    }
}

strata_status_t strata_trainer_resume(strata_trainer_t *t, int64_t *resumed_step)
{
    uint64_t t0 = st_now_ns();
    *resumed_step = 0;
    t->resumed = (strata_resume_info_t){0, false, -1, -1, 0};
    const char *disk = t->cfg.ckpt_dir, *mem = t->cfg.mem_ckpt_every > 0 ? t->cfg.mem_ckpt_dir : "";
    if (!disk[0] && !mem[0])
        return STRATA_OK;
    // No writer of this job is running yet.
    if (disk[0])
        (void)strata_ckpt_clean_tmp(disk);
    if (mem[0])
        (void)strata_ckpt_clean_tmp(mem);
    int nc = 0;
    int64_t newest[2] = {-1, -1}; // disk, memory
    candidate_t *cs = NULL;
    if (t->rank == 0 && !(cs = list_candidates(disk, mem, &nc, &newest[0], &newest[1])))
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
    double nw[2] = {(double)newest[0], (double)newest[1]};
    strata_status_t rc = from_rank0(t, nw, 2);
    t->resumed.disk_step = (int64_t)nw[0];
    t->resumed.memory_step = (int64_t)nw[1];
    bool found = false;
    int64_t first_bad = -1;
    char first_err[4200] = "";
    if (rc == STRATA_OK)
        rc = try_candidates(t, cs, nc, &found, &first_bad, first_err, sizeof first_err);
    free(cs);
    ST_TRY(rc);
    t->resumed.seconds = (double)(st_now_ns() - t0) * 1e-9;
    if (found) {
        t->resumed.step = *resumed_step = t->step;
        record_resume(t);
        return STRATA_OK;
    }
    char where[2200];
    snprintf(where, sizeof where, "%s%s%s%s", disk, disk[0] && mem[0] ? " or " : "",
             mem[0] ? "memory " : "", mem);
    if (first_bad >= 0)
        return st_error(STRATA_ERR_PARSE, "train: --resume: no usable checkpoint step in %s (the "
                        "newest, %s); refusing to start over", where, first_err);
    // No committed step: start fresh only if the disk directory holds no checkpoint file at all.
    // (Files in memory without a committed step are a first memory write cut short: K steps.)
    char name[256] = "";
    double files = t->rank == 0 && disk[0] ? strata_ckpt_count_files(disk, name, sizeof name) : 0;
    ST_TRY(from_rank0(t, &files, 1));
    if (files > 0)
        return st_error(STRATA_ERR_PARSE, "train: --resume: %s holds %.0f checkpoint file%s "
                        "(newest: %s) but no committed step (a write interrupted by a crash, a "
                        "full disk, or files of another strata); refusing to start over: remove "
                        "them, or run without --resume", disk, files, files == 1 ? "" : "s",
                        t->rank == 0 ? name : "see rank 0");
    record_resume(t);
    return STRATA_OK;
}
