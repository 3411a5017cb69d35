/* strata sample: prints text generated from a checkpoint written by strata train (any form
 * cmd_load_model reads: a directory, a shard file, an unsharded or exported file). */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/cmd.h"
#include "strata/train.h"

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
    if (cmd_load_model("sample", ckpt, &m, &cfg) != 0)
        return 1;
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
