/* strata export: writes the whole model of a checkpoint (any layout: one process, ZeRO shards,
 * tensor-parallel parts, pipeline stages) without optimizer state: as one safetensors file with
 * every parameter by strata's name and whole shape (the file bench/torch_gpt.py loads with
 * load_state_dict and strata sample reads), or as a HuggingFace GPT-2 directory (--format hf). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/cmd.h"
#include "strata/train.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: strata export --ckpt DIR|FILE.safetensors --out FILE.safetensors\n"
               "       strata export --ckpt DIR|FILE.safetensors --format hf --out DIR\n"
               "  the checkpoint's newest usable step (or the file's), assembled into the whole\n"
               "  model, written atomically without optimizer state:\n"
               "  --format strata  (default) one file, parameters by strata's names\n"
               "                   (h.3.attn.qkv.weight ...), which strata sample also reads\n"
               "  --format hf      a HuggingFace GPT-2 directory: DIR/model.safetensors with\n"
               "                   GPT2LMHeadModel's names and Conv1D layout, DIR/config.json\n");
}

int cmd_export(int argc, char **argv)
{
    const char *ckpt = NULL, *out = NULL, *format = "strata";
    static const struct option opts[] = {{"ckpt", 1, 0, 'c'},   {"out", 1, 0, 'o'},
                                         {"format", 1, 0, 'f'}, {"help", 0, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'c': ckpt = optarg; break;
        case 'o': out = optarg; break;
        case 'f': format = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!ckpt || !out || optind < argc) {
        usage(stderr);
        return 2;
    }
    bool hf = !strcmp(format, "hf");
    if (!hf && strcmp(format, "strata") != 0) {
        fprintf(stderr, "strata export: --format is strata or hf, not '%s'\n", format);
        return 2;
    }
    strata_gpt_t *m = NULL;
    strata_gpt_config_t cfg;
    if (cmd_load_model("export", ckpt, &m, &cfg) != 0)
        return 1;
    if (hf) {
        int rc = 0;
        if (strata_export_hf_gpt2(m, out) < 0)
            rc = cmd_fail(NULL, "%s", strata_last_error());
        else
            fprintf(stderr, "strata export: %zu parameters of %s written to %s/model.safetensors "
                    "and %s/config.json (HuggingFace GPT-2)\n", strata_model_nparams(m), ckpt,
                    out, out);
        strata_model_destroy(m);
        return rc;
    }
    int n = strata_model_ntensors(m);
    strata_ckpt_tensor_t *ts = calloc((size_t)n, sizeof *ts);
    if (!ts) {
        strata_model_destroy(m);
        return cmd_fail(NULL, "out of memory");
    }
    float *P = strata_model_param_arena(m);
    for (int i = 0; i < n; i++) {
        const strata_tensor_info_t *t = strata_model_tensor(m, i);
        ts[i] = (strata_ckpt_tensor_t){t->name, t->ndim, {t->shape[0], t->shape[1]}, P + t->offset};
    }
    // The model's configuration goes with it, so strata sample can rebuild it from the file alone.
    strata_train_config_t tc = strata_train_config_default();
    tc.model = cfg;
    strata_ckpt_meta_t meta = {.nranks = 1, .shard_count = (int64_t)strata_model_nparams(m)};
    strata_train_config_to_json(&tc, meta.config, sizeof meta.config);
    strata_ckpt_digest_t d;
    int rc = 0;
    if (strata_ckpt_write(out, ts, n, &meta, &d) < 0)
        rc = cmd_fail(NULL, "%s", strata_last_error());
    else
        fprintf(stderr, "strata export: %zu parameters of %s written to %s\n",
                strata_model_nparams(m), ckpt, out);
    free(ts);
    strata_model_destroy(m);
    return rc;
}
