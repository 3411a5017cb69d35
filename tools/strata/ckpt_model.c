/* The model of a checkpoint, for the commands that read one (sample, export): a checkpoint
 * directory (its newest committed step that assembles; a refused newer step is skipped with a
 * warning naming why), one rank's shard file of a step (that step, assembled from every rank's
 * file, whatever the layout: ZeRO shards, tensor-parallel parts), or one unsharded file (a
 * one-process checkpoint or an exported model). The model is built from the configuration recorded
 * with it. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include "strata/cmd.h"
#include "strata/train.h"

/* Builds the model recorded with step `step` of dir and assembles its parameters. */
static strata_status_t load_step(const char *dir, int64_t step, strata_gpt_t **m,
                                 strata_gpt_config_t *cfg)
{
    strata_ckpt_manifest_t mf;
    strata_status_t rc = strata_ckpt_manifest_read(dir, step, &mf);
    if (rc < 0)
        return rc;
    rc = strata_ckpt_manifest_model(&mf, cfg);
    strata_ckpt_manifest_free(&mf);
    if (rc < 0 || (rc = strata_model_create(cfg, 1, 0, m)) < 0)
        return rc;
    strata_ckpt_full_t full;
    if ((rc = strata_ckpt_assemble(*m, dir, step, false, &full)) < 0) {
        strata_model_destroy(*m);
        *m = NULL;
        return rc;
    }
    memcpy(strata_model_param_arena(*m), full.params, full.nparams * sizeof(float));
    strata_ckpt_full_free(&full);
    return STRATA_OK;
}

/* One unsharded file, outside any step: its own config and tensors. Returns 0, or 1 after printing
 * why. */
static int load_file(const char *path, strata_gpt_t **m, strata_gpt_config_t *cfg)
{
    strata_ckpt_t *ck;
    if (strata_ckpt_open(path, &ck) < 0)
        return cmd_fail(NULL, "%s", strata_last_error());
    *cfg = strata_gpt_config_default();
    json_object *root = json_tokener_parse(strata_ckpt_meta(ck)->config), *model;
    bool usable = root && json_object_object_get_ex(root, "model", &model) &&
                  strata_gpt_config_from_json(json_object_to_json_string(model), path, cfg) == 0;
    if (root)
        json_object_put(root);
    if (!usable) {
        strata_ckpt_close(ck);
        return cmd_fail(NULL, "checkpoint %s: no usable model config in its metadata", path);
    }
    strata_status_t rc = strata_model_create(cfg, 1, 0, m);
    float *P = rc == STRATA_OK ? strata_model_param_arena(*m) : NULL;
    for (int i = 0; rc == STRATA_OK && i < strata_model_ntensors(*m); i++) {
        const strata_tensor_info_t *t = strata_model_tensor(*m, i);
        strata_ckpt_tensor_t ct = {t->name, t->ndim, {t->shape[0], t->shape[1]}, P + t->offset};
        rc = strata_ckpt_load(ck, &ct, 1);
    }
    strata_ckpt_close(ck);
    if (rc < 0) {
        strata_model_destroy(*m);
        *m = NULL;
        return cmd_fail(NULL, "%s", strata_last_error());
    }
    return 0;
}

int cmd_load_model(const char *who, const char *ckpt, strata_gpt_t **m, strata_gpt_config_t *cfg)
{
    struct stat st;
    const char *base = strrchr(ckpt, '/');
    base = base ? base + 1 : ckpt;
    char dir[1024];
    snprintf(dir, sizeof dir, "%.*s", base > ckpt ? (int)(base - ckpt - 1) : 1,
             base > ckpt ? ckpt : ".");
    long long step;
    int rank, used = 0;
    if (stat(ckpt, &st) == 0 && S_ISDIR(st.st_mode)) {
        int64_t steps[256];
        int n = strata_ckpt_steps(ckpt, steps, 256);
        for (int i = 0; i < n; i++) {
            if (load_step(ckpt, steps[i], m, cfg) == STRATA_OK) {
                if (i > 0)
                    fprintf(stderr, "strata %s: warning: using step %" PRId64 ", not the "
                            "newest (%" PRId64 ")\n", who, steps[i], steps[0]);
                return 0;
            }
            fprintf(stderr, "strata %s: warning: skipping step %" PRId64 ": %s%s\n", who,
                    steps[i], strata_last_error(), i + 1 < n ? "; trying the previous step" : "");
        }
        char name[256];
        int files = strata_ckpt_count_files(ckpt, name, sizeof name);
        if (n > 0)
            return cmd_fail(NULL, "no usable checkpoint step in %s (%d committed, all refused)",
                            ckpt, n);
        if (files > 0)
            return cmd_fail(NULL, "no committed checkpoint step in %s: %d checkpoint files "
                            "(newest %s) without a manifest (an interrupted write, or an older "
                            "strata)", ckpt, files, name);
        return cmd_fail(NULL, "no checkpoint in %s", ckpt);
    }
    if (sscanf(base, "ckpt_%lld.rank%d.safetensors%n", &step, &rank, &used) == 2 && !base[used]) {
        if (load_step(dir, step, m, cfg) < 0)
            return cmd_fail(NULL, "%s", strata_last_error());
        return 0;
    }
    return load_file(ckpt, m, cfg);
}

