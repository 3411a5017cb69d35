/* strata sample: prints text generated from a checkpoint written by strata train: one file, one
 * rank's shard file of a sharded (ZeRO) checkpoint (the step is assembled from every rank's file),
 * or a checkpoint directory (its newest complete step). */
#include <getopt.h>
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
            printf("usage: strata sample --ckpt FILE.safetensors [--prompt TEXT] [--tokens N] "
                   "[--temperature X] [--seed N]\n");
            return 0;
        default: return 2;
        }
    }
    if (!ckpt) {
        fprintf(stderr, "usage: strata sample --ckpt FILE.safetensors [--prompt TEXT] [--tokens N] "
                        "[--temperature X] [--seed N]\n");
        return 2;
    }
    // A directory or a shard file: assemble a step from every rank's file.
    char dir[1024] = "", first[2048];
    int64_t steps[256];
    int nsteps = 0;
    struct stat st;
    const char *base = strrchr(ckpt, '/');
    long long sstep;
    int srank, used = 0;
    if (stat(ckpt, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof dir, "%s", ckpt);
        nsteps = strata_ckpt_steps(dir, steps, 256);
        if (nsteps == 0)
            return cmd_fail(NULL, "no checkpoint in %s", dir);
    } else if (sscanf(base ? base + 1 : ckpt, "ckpt_%lld.rank%d.safetensors%n", &sstep, &srank,
                      &used) == 2 && !(base ? base + 1 : ckpt)[used]) {
        snprintf(dir, sizeof dir, "%.*s", base ? (int)(base - ckpt) : 1, base ? ckpt : ".");
        steps[nsteps++] = sstep;
    }
    if (dir[0]) { // the config from the step's first file
        strata_ckpt_path(dir, steps[0], 0, 1, first, sizeof first);
        if (stat(first, &st) != 0)
            strata_ckpt_path(dir, steps[0], 0, 2, first, sizeof first);
        ckpt = first;
    }
    strata_ckpt_t *ck;
    if (strata_ckpt_open(ckpt, &ck) < 0)
        return cmd_fail(NULL, "%s", strata_last_error());
    strata_gpt_config_t cfg = strata_gpt_config_default();
    json_object *root = json_tokener_parse(strata_ckpt_meta(ck)->config), *model;
    if (!root || !json_object_object_get_ex(root, "model", &model) ||
        strata_gpt_config_from_json(json_object_to_json_string(model), ckpt, &cfg) < 0) {
        if (root)
            json_object_put(root);
        strata_ckpt_close(ck);
        return cmd_fail(NULL, "checkpoint %s: no usable model config in its metadata", ckpt);
    }
    json_object_put(root);
    strata_gpt_t *m;
    if (strata_model_create(&cfg, 1, 0, &m) < 0) {
        strata_ckpt_close(ck);
        return cmd_fail(NULL, "%s", strata_last_error());
    }
    float *P = strata_model_param_arena(m);
    if (dir[0]) {
        strata_ckpt_close(ck);
        ck = NULL;
        strata_ckpt_full_t full;
        int i = 0;
        for (; i < nsteps; i++) {
            if (strata_ckpt_assemble(m, dir, steps[i], false, &full) == STRATA_OK)
                break;
            fprintf(stderr, "strata: warning: %s%s\n", strata_last_error(),
                    i + 1 < nsteps ? "; trying the previous step" : "");
        }
        if (i == nsteps) {
            strata_model_destroy(m);
            return cmd_fail(NULL, "no complete checkpoint in %s", dir);
        }
        memcpy(P, full.params, full.nparams * sizeof(float));
        strata_ckpt_full_free(&full);
    }
    for (int i = 0; ck && i < strata_model_ntensors(m); i++) {
        const strata_tensor_info_t *t = strata_model_tensor(m, i);
        strata_ckpt_tensor_t ct = {t->name, t->ndim, {t->shape[0], t->shape[1]}, P + t->offset};
        if (strata_ckpt_load(ck, &ct, 1) < 0) {
            strata_model_destroy(m);
            strata_ckpt_close(ck);
            return cmd_fail(NULL, "%s", strata_last_error());
        }
    }
    strata_ckpt_close(ck);
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
