/* strata sample: prints text generated from a checkpoint written by strata train (any form
 * cmd_load_model reads: a directory, a shard file, an unsharded or exported file); --logits writes
 * the model's logits at every prompt position, to compare it with another implementation. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/cmd.h"
#include "strata/train.h"

/* The logits of the prompt's tokens (one forward pass) into path, a line of V numbers per
 * position. Returns 0, or 1 after printing why. */
static int write_logits(strata_gpt_t *m, const char *prompt, const char *path)
{
    const strata_gpt_config_t *cfg = strata_model_config(m);
    int n = (int)strlen(prompt), V = cfg->vocab;
    if (n < 1 || n > cfg->max_seq)
        return cmd_fail(NULL, "--logits: the prompt has %d tokens, the model takes 1 to %d", n,
                        cfg->max_seq);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n);
    FILE *f = tok ? fopen(path, "w") : NULL;
    if (!f) {
        free(tok);
        return cmd_fail(NULL, "--logits: cannot write %s", path);
    }
    for (int i = 0; i < n; i++)
        tok[i] = (unsigned char)prompt[i];
    int rc = 0;
    if (strata_model_forward(m, tok, NULL, 1, n, NULL) < 0) {
        rc = cmd_fail(NULL, "%s", strata_last_error());
    } else {
        const float *lg = strata_model_logits(m);
        for (int i = 0; i < n; i++)
            for (int v = 0; v < V; v++)
                fprintf(f, "%.9g%c", (double)lg[(size_t)i * V + v], v + 1 < V ? ' ' : '\n');
    }
    if (fclose(f) != 0 && rc == 0)
        rc = cmd_fail(NULL, "--logits: cannot write %s", path);
    free(tok);
    return rc;
}

int cmd_sample(int argc, char **argv)
{
    const char *ckpt = NULL, *prompt = "\n", *logits = NULL;
    int ntok = 200;
    double temp = 0.8;
    long long seed = 1;
    static const struct option opts[] = {{"ckpt", 1, 0, 'c'},   {"prompt", 1, 0, 'p'},
                                         {"tokens", 1, 0, 'n'}, {"temperature", 1, 0, 't'},
                                         {"seed", 1, 0, 's'},   {"logits", 1, 0, 'l'},
                                         {"help", 0, 0, 'h'},   {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'c': ckpt = optarg; break;
        case 'p': prompt = optarg; break;
        case 'n': if (!cmd_int_option("sample", "--tokens", optarg, 0, 1000000, &ntok)) return 2; break;
        case 'l': logits = optarg; break;
        case 't': temp = atof(optarg); break;
        case 's': if (!cmd_parse_int(optarg, 0, 1LL << 62, &seed)) return 2; break;
        case 'h':
            printf("usage: strata sample --ckpt DIR|FILE.safetensors [--prompt TEXT] [--tokens N] "
                   "[--temperature X] [--seed N] [--logits FILE]\n"
                   "  --logits FILE  the logits at every prompt position (at most the model's\n"
                   "                 context), one line of vocab numbers per position\n");
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
    if (cmd_load_model("sample", ckpt, &m, &cfg) != 0)
        return 1;
    if (logits && write_logits(m, prompt, logits) != 0) {
        strata_model_destroy(m);
        return 1;
    }
    int T = cfg.max_seq, V = cfg.vocab, n = 0;
    int32_t *ctx = malloc(sizeof(int32_t) * (size_t)(strlen(prompt) + ntok + 1));
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
        int next = strata_sample_token(strata_model_logits(m) + (size_t)(len - 1) * V, V, temp,
                                       &rs);
        ctx[n++] = next;
        putchar(next);
    }
    putchar('\n');
    free(ctx);
    strata_model_destroy(m);
    return rc;
}
