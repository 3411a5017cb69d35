/* strata train: single-process training from flags or a JSON config (flags override the file). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/cmd.h"
#include "strata/train.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: strata train [--config FILE.json] [options]\n"
            "  --data FILE        training text (bytes are tokens) [data/corpus/strata_tales.txt]\n"
            "  --layers N --heads N --dim N --ff N --max-seq N   model size [2 4 64 4*dim 64]\n"
            "  --batch N --seq N --steps N  global batch rows, sequence length, steps [8 64 100]\n"
            "  --optimizer adamw|lamb --lr X --min-lr X --warmup N --wd X --clip X\n"
            "  --seed N --threads N   (BLAS threads; 0 = OpenBLAS default)\n"
            "  --ckpt-dir DIR --ckpt-every N --keep N --resume   checkpoints (safetensors)\n"
            "  --metrics FILE     JSON lines, one per step\n"
            "  --trace FILE --trace-step N   Chrome trace of one step (Perfetto)\n"
            "  --eval-every N     validation loss every N steps\n"
            "  --quiet            no progress bar\n");
}

static bool num(const char *flag, const char *v, double lo, double hi, double *out)
{
    char *end;
    double d = strtod(v, &end);
    if (!*v || *end || !(d >= lo && d <= hi)) {
        fprintf(stderr, "strata train: %s expects a number in [%g, %g], got '%s'\n", flag, lo, hi,
                v);
        return false;
    }
    *out = d;
    return true;
}

int cmd_train(int argc, char **argv)
{
    strata_train_config_t cfg = strata_train_config_default();
    snprintf(cfg.data, sizeof cfg.data, "data/corpus/strata_tales.txt");
    // The config file first, so flags override it.
    for (int i = 1; i < argc - 1; i++)
        if (!strcmp(argv[i], "--config") && strata_train_config_load(argv[i + 1], &cfg) < 0)
            return cmd_fail(NULL, "%s", strata_last_error());
    bool resume = false;
    enum { O_CONFIG = 256, O_DATA, O_LAYERS, O_HEADS, O_DIM, O_FF, O_MAXSEQ, O_BATCH, O_SEQ,
           O_STEPS, O_OPT, O_LR, O_MINLR, O_WARMUP, O_WD, O_CLIP, O_SEED, O_THREADS, O_CKDIR,
           O_CKEVERY, O_KEEP, O_RESUME, O_METRICS, O_TRACE, O_TRACESTEP, O_EVAL, O_QUIET, O_HELP };
    static const struct option opts[] = {
        {"config", 1, 0, O_CONFIG},     {"data", 1, 0, O_DATA},       {"layers", 1, 0, O_LAYERS},
        {"heads", 1, 0, O_HEADS},       {"dim", 1, 0, O_DIM},         {"ff", 1, 0, O_FF},
        {"max-seq", 1, 0, O_MAXSEQ},    {"batch", 1, 0, O_BATCH},     {"seq", 1, 0, O_SEQ},
        {"steps", 1, 0, O_STEPS},       {"optimizer", 1, 0, O_OPT},   {"lr", 1, 0, O_LR},
        {"min-lr", 1, 0, O_MINLR},      {"warmup", 1, 0, O_WARMUP},   {"wd", 1, 0, O_WD},
        {"clip", 1, 0, O_CLIP},         {"seed", 1, 0, O_SEED},       {"threads", 1, 0, O_THREADS},
        {"ckpt-dir", 1, 0, O_CKDIR},    {"ckpt-every", 1, 0, O_CKEVERY}, {"keep", 1, 0, O_KEEP},
        {"resume", 0, 0, O_RESUME},     {"metrics", 1, 0, O_METRICS}, {"trace", 1, 0, O_TRACE},
        {"trace-step", 1, 0, O_TRACESTEP}, {"eval-every", 1, 0, O_EVAL}, {"quiet", 0, 0, O_QUIET},
        {"help", 0, 0, O_HELP},         {0, 0, 0, 0}};
    int c;
    double d;
    bool seq_set = false, maxseq_set = false;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        const char *fl = c >= O_CONFIG && c <= O_HELP ? opts[c - O_CONFIG].name : "?";
        char flag[64];
        snprintf(flag, sizeof flag, "--%s", fl);
#define INT(lo, hi, field)                                                                         \
    do {                                                                                           \
        if (!num(flag, optarg, lo, hi, &d))                                                        \
            return 2;                                                                              \
        field = (int)d;                                                                            \
    } while (0)
#define FLT(lo, hi, field)                                                                         \
    do {                                                                                           \
        if (!num(flag, optarg, lo, hi, &d))                                                        \
            return 2;                                                                              \
        field = (float)d;                                                                          \
    } while (0)
        switch (c) {
        case O_CONFIG: break;
        case O_DATA: snprintf(cfg.data, sizeof cfg.data, "%s", optarg); break;
        case O_LAYERS: INT(1, 1024, cfg.model.n_layer); break;
        case O_HEADS: INT(1, 65536, cfg.model.n_head); break;
        case O_DIM: INT(1, 65536, cfg.model.d_model); break;
        case O_FF: INT(0, 1 << 20, cfg.model.d_ff); break;
        case O_MAXSEQ: INT(1, 65536, cfg.model.max_seq); maxseq_set = true; break;
        case O_BATCH: INT(1, 1 << 20, cfg.batch); break;
        case O_SEQ: INT(1, 65536, cfg.seq); seq_set = true; break;
        case O_STEPS: if (!num(flag, optarg, 1, 1e12, &d)) return 2; cfg.steps = (int64_t)d; break;
        case O_OPT:
            if (!strcmp(optarg, "adamw"))
                cfg.optim.kind = STRATA_OPTIM_ADAMW;
            else if (!strcmp(optarg, "lamb"))
                cfg.optim.kind = STRATA_OPTIM_LAMB;
            else {
                fprintf(stderr, "strata train: --optimizer expects adamw or lamb, got '%s'\n", optarg);
                return 2;
            }
            break;
        case O_LR: FLT(0, 10, cfg.lr); break;
        case O_MINLR: FLT(0, 10, cfg.min_lr); break;
        case O_WARMUP: if (!num(flag, optarg, 0, 1e12, &d)) return 2; cfg.warmup = (int64_t)d; break;
        case O_WD: FLT(0, 10, cfg.optim.weight_decay); break;
        case O_CLIP: FLT(0, 1e9, cfg.grad_clip); break;
        case O_SEED: if (!num(flag, optarg, 0, 1e15, &d)) return 2; cfg.seed = (uint64_t)d; break;
        case O_THREADS: INT(0, 1024, cfg.threads); break;
        case O_CKDIR: snprintf(cfg.ckpt_dir, sizeof cfg.ckpt_dir, "%s", optarg); break;
        case O_CKEVERY: if (!num(flag, optarg, 0, 1e12, &d)) return 2; cfg.ckpt_every = (int64_t)d; break;
        case O_KEEP: INT(1, 1000, cfg.ckpt_keep); break;
        case O_RESUME: resume = true; break;
        case O_METRICS: snprintf(cfg.metrics, sizeof cfg.metrics, "%s", optarg); break;
        case O_TRACE: snprintf(cfg.trace, sizeof cfg.trace, "%s", optarg); break;
        case O_TRACESTEP: if (!num(flag, optarg, 1, 1e12, &d)) return 2; cfg.trace_step = (int64_t)d; break;
        case O_EVAL: if (!num(flag, optarg, 0, 1e12, &d)) return 2; cfg.eval_every = (int64_t)d; break;
        case O_QUIET: cfg.progress = false; break;
        case O_HELP: usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
#undef INT
#undef FLT
    }
    if (optind < argc) {
        fprintf(stderr, "strata train: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    // One of --seq / --max-seq alone sets both.
    if (seq_set && !maxseq_set && cfg.model.max_seq < cfg.seq)
        cfg.model.max_seq = cfg.seq;
    if (maxseq_set && !seq_set)
        cfg.seq = cfg.model.max_seq;
    if (resume && !cfg.ckpt_dir[0])
        return cmd_fail("give --ckpt-dir DIR", "--resume needs a checkpoint directory");
    strata_trainer_t *t;
    if (strata_trainer_create(&cfg, &t) < 0)
        return cmd_fail(NULL, "%s", strata_last_error());
    strata_gpt_t *m = strata_trainer_model(t);
    fprintf(stderr, "strata train: %zu parameters (L=%d C=%d heads=%d T=%d), batch %d, %lld steps\n",
            strata_model_nparams(m), cfg.model.n_layer, cfg.model.d_model, cfg.model.n_head,
            cfg.seq, cfg.batch, (long long)cfg.steps);
    if (resume) {
        int64_t step;
        if (strata_trainer_resume(t, &step) < 0) {
            strata_trainer_destroy(t);
            return cmd_fail("remove the bad files or start without --resume", "%s",
                            strata_last_error());
        }
        if (step > 0)
            fprintf(stderr, "strata train: resumed at step %lld from %s\n", (long long)step,
                    cfg.ckpt_dir);
    }
    int rc = 0;
    if (strata_trainer_run(t, NULL) < 0)
        rc = cmd_fail(NULL, "%s", strata_last_error());
    strata_trainer_destroy(t);
    return rc;
}
