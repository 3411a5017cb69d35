/* strata sample: prints text generated from a checkpoint written by strata train: a checkpoint
 * directory (its newest committed step that assembles; a refused newer step is skipped with a
 * warning naming why), one rank's shard file of a step (that step, assembled from every rank's file),
 * or one unsharded file. The model is built from the configuration recorded with the step. */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include "strata/cmd.h"
#include "strata/train.h"

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

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

/* The model of --ckpt: a directory (newest usable committed step), a shard file (its step) or an
 * unsharded file. Returns 0, or 1 after printing why. */
static int load_model(const char *ckpt, strata_gpt_t **m, strata_gpt_config_t *cfg)
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
                    fprintf(stderr, "strata sample: warning: using step %" PRId64 ", not the "
                            "newest (%" PRId64 ")\n", steps[i], steps[0]);
                return 0;
            }
            fprintf(stderr, "strata sample: warning: skipping step %" PRId64 ": %s%s\n", steps[i],
                    strata_last_error(), i + 1 < n ? "; trying the previous step" : "");
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

int cmd_sample(int argc, char **argv)
{
    const char *ckpt = NULL, *prompt = "\n";
    int ntok = 200;
    double temp = 0.8;
    long long seed = 1;
    static const struct option opts[] = {{"ckpt", 1, 0, 'c'},   {"prompt", 1, 0, 'p'},
                                         {"tokens", 1, 0, 'n'}, {"temperature", 1, 0, 't'},
                                         {"seed", 1, 0, 's'},   {"help", 0, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'c': ckpt = optarg; break;
        case 'p': prompt = optarg; break;
        case 'n': if (!cmd_int_option("sample", "--tokens", optarg, 1, 1000000, &ntok)) return 2; break;
        case 't': temp = atof(optarg); break;
        case 's': if (!cmd_parse_int(optarg, 0, 1LL << 62, &seed)) return 2; break;
        case 'h':
            printf("usage: strata sample --ckpt DIR|FILE.safetensors [--prompt TEXT] [--tokens N] "
                   "[--temperature X] [--seed N]\n");
            return 0;
        default: return 2;
        }
    }
    if (!ckpt) {
        fprintf(stderr, "usage: strata sample --ckpt DIR|FILE.safetensors [--prompt TEXT] [--tokens N] "
                        "[--temperature X] [--seed N]\n");
        return 2;
    }
    strata_gpt_t *m = NULL;
    strata_gpt_config_t cfg;
    if (load_model(ckpt, &m, &cfg) != 0)
        return 1;
    int T = cfg.max_seq, V = cfg.vocab, n = 0;
    int32_t *ctx = malloc(sizeof(int32_t) * (size_t)(strlen(prompt) + ntok + 1));
    float *prob = malloc(sizeof(float) * (size_t)V);
    for (const unsigned char *p = (const unsigned char *)prompt; *p; p++)
        ctx[n++] = *p;
    fputs(prompt, stdout);
    uint64_t rs = (uint64_t)seed;
    int rc = 0;
    for (int k = 0; k < ntok; k++) {
        int start = n > T ? n - T : 0, len = n - start;
        if (strata_model_forward(m, ctx + start, NULL, 1, len, NULL) < 0) {
            rc = cmd_fail(NULL, "%s", strata_last_error());
            break;
        }
        const float *lg = strata_model_logits(m) + (size_t)(len - 1) * V;
        int next = 0;
        if (temp <= 0) {
            for (int i = 1; i < V; i++)
                next = lg[i] > lg[next] ? i : next;
        } else {
            float mx = lg[0];
            for (int i = 1; i < V; i++)
                mx = lg[i] > mx ? lg[i] : mx;
            double sum = 0;
            for (int i = 0; i < V; i++)
                sum += prob[i] = expf((lg[i] - mx) / (float)temp);
            double u = (double)(rng_next(&rs) >> 11) * 0x1.0p-53 * sum, acc = 0;
            next = V - 1;
            for (int i = 0; i < V; i++) {
                acc += prob[i];
                if (u < acc) {
                    next = i;
                    break;
                }
            }
        }
        ctx[n++] = next;
        putchar(next);
    }
    putchar('\n');
    free(ctx);
    free(prob);
    strata_model_destroy(m);
    return rc;
}
