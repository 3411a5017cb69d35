/* strata train: training from flags or a JSON config (flags override the file). Under a launcher
 * (strata launch, torchrun, Slurm, mpirun) with more than one rank it trains data parallel with the
 * ZeRO engine; otherwise in this one process. SIGTERM and SIGINT ask the trainer to stop after the
 * current step with a final checkpoint (exit status 0); a second one kills the process. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/cmd.h"
#include "strata/comm.h"
#include "strata/topo.h"
#include "strata/train.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: strata train [--config FILE.json] [options]\n"
            "  --data FILE        training text (bytes are tokens) [data/corpus/strata_tales.txt]\n"
            "  --layers N --heads N --dim N --ff N --max-seq N   model size [2 4 64 4*dim 64]\n"
            "model options (docs/train.md; defaults: GPT-2's shape):\n"
            "  --parallel-block   attention and MLP read one norm's output, both added (GPT-J)\n"
            "  --window W         sliding-window attention over the last W keys [0 = full]\n"
            "  --norm layernorm|rmsnorm  --mlp gelu|swiglu  --pos learned|rope  --no-bias\n"
            "  --rope-theta X     RoPE base [10000]\n"
            "  --kv-heads N       grouped-query attention: N k/v heads, dividing --heads [= heads]\n"
            "  --untied           the head has its own weight (lm_head), not the embedding's\n"
            "  --llama            the Llama shape: --norm rmsnorm --mlp swiglu --pos rope --no-bias\n"
            "                     --untied\n"
            "  --batch N --seq N --steps N  global batch rows, sequence length, steps [8 64 100]\n"
            "  --optimizer adamw|lamb --lr X --min-lr X --warmup N --wd X --clip X\n"
            "  --seed N --threads N   (BLAS threads; 0 = OpenBLAS default)\n"
            "  --precision fp32|bf16  matrix products in bf16 (AMX / AVX512-BF16 through oneDNN)\n"
            "                     with fp32 master weights and optimizer state; fp32 where the\n"
            "                     CPU has no bf16 units [fp32]\n"
            "  --ckpt-dir DIR --ckpt-every N --keep N --resume   checkpoints (safetensors)\n"
            "  --mem-ckpt-every K  also a memory checkpoint every K steps (a restart resumes from\n"
            "                     it, losing at most K steps, when it is newer than the disk's)\n"
            "  --mem-ckpt-dir DIR  its directory [$STRATA_MEM_CKPT_DIR, set by strata launch]\n"
            "  --nonfinite stop|skip   a NaN/inf loss or gradient norm stops the run or skips\n"
            "                     the step's update [stop]\n"
            "  --metrics FILE     JSON lines, one per step\n"
            "  --trace FILE --trace-step N   Chrome trace of one step (Perfetto)\n"
            "  --eval-every N     validation loss every N steps\n"
            "  --prefetch N       batches a loader thread reads ahead of the step [2; 0 = none]\n"
            "  --quiet            no progress and no summary\n"
            "  --progress-every S  seconds between progress lines when stderr is not a terminal\n"
            "                     (a file, a pipe, a launcher's log; STRATA_PROGRESS=lines|bar\n"
            "                     chooses) [5; 0 = every step]\n"
            "SIGTERM/SIGINT: finish the step, write a final checkpoint (--ckpt-dir), exit 0;\n"
            "a second signal kills.\n");
    // Two strings: ISO C guarantees string literals of 4095 characters, no more.
    fprintf(f,
            "data parallel (under strata launch -n N / torchrun / Slurm / mpirun, N > 1):\n"
            "  --zero 0..3        ZeRO stage [0]\n"
            "  --hpz LEVEL        ZeRO++ hpZ: secondary partition inside fabric level LEVEL (host,\n"
            "                     rack, ... or a level number; STRATA_TOPO_PATH places ranks)\n"
            "  --tiers 3          3-level partition over the fabric's two fastest splitting levels\n"
            "  --qwz --qgz        int8 weight all-gathers / gradient reduce-scatters\n"
            "  --grad-dtype fp32|bf16   gradient reductions in bf16: half the bytes (fp32\n"
            "                     accumulation per addition; master weights, optimizer and\n"
            "                     norm stay fp32; not with --qgz) [fp32]\n"
            "  --bucket N         floats per gradient bucket [engine default]\n"
            "  --tp N             tensor parallelism over groups of N ranks (Megatron-LM cuts; N\n"
            "                     divides heads, vocab, d_ff); data parallelism over the rest\n"
            "  --sp               sequence parallelism inside the TP group\n"
            "  --order tp,cp,pp,dp   mesh order, innermost first [chosen by the cost model]\n"
            "  --no-tp-overlap    TP collectives in one piece (no overlap with the products)\n"
            "  --pp N             pipeline parallelism over N stages (layers cut by compute)\n"
            "  --vp V             model chunks per stage (interleaved: 2+, zb-v: 2) [1]\n"
            "  --schedule S       gpipe, 1f1b, interleaved, zb-h1, zb-v [1f1b]\n"
            "  --micro-batch R    rows per micro-batch [1]\n"
            "  --pp-layers 3,3,2  layers per chunk (stages x chunks entries) [balanced]\n"
            "  --pp-svg FILE      the planned and measured pipeline timeline of --trace-step\n"
            "  --harvest LIST     side work in the pipeline's bubbles, in priority order: eval, sample,\n"
            "                     data, gemm (e.g. eval,sample,gemm; docs/harvest.md)\n"
            "  --optimizer-in-pool  AdamW's master weights, m and v live on the pool nodes of\n"
            "                     $STRATA_POOL_NODES (secret $STRATA_POOL_SECRET), which apply the\n"
            "                     update; ranks push gradients, read parameters (docs/pool.md)\n"
            "  --plan PLAN.json   the layout of strata plan --json (predict or search): tp, pp,\n"
            "                     vp, zero, schedule, micro-batch, sp, order (flags after it\n"
            "                     override it); the job must have its tp x pp x dp ranks\n"
            "  --straggler-window N   steps per straggler and slow-link window; a rank 20%%\n"
            "                     busier than the others, or a TCP link 8x slower than the\n"
            "                     others, in 3 windows in a row is flagged [20; 0 = off]\n");
}

/* The signal that asked to stop (0 = none); the trainer reads it once per step. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    stop_signal = sig;
}

/* SIGTERM/SIGINT: stop after this step with a checkpoint; the handler is reset after the first, so a
 * second signal kills. A signal inherited as ignored (nohup) stays ignored. */
static void catch_stop_signals(void)
{
    struct sigaction sa = {.sa_handler = on_stop_signal, .sa_flags = SA_RESTART | SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    const int sigs[2] = {SIGTERM, SIGINT};
    for (int i = 0; i < 2; i++) {
        struct sigaction cur;
        if (sigaction(sigs[i], NULL, &cur) == 0 && cur.sa_handler != SIG_IGN)
            sigaction(sigs[i], &sa, NULL);
    }
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

/* The fabric level named `name` (a level name such as host or rack, or its number), or -1 with a
 * message listing the levels. */
static int find_level(const strata_fabric_t *f, const char *name)
{
    char *end;
    long l = strtol(name, &end, 10);
    if (*name && !*end && l >= 0 && l < f->topo.nlevels)
        return (int)l;
    int i = strata_topo_find_level(&f->topo, name);
    if (i >= 0)
        return i;
    char known[512] = "";
    for (int k = 0; k < f->topo.nlevels; k++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%d=%s", k ? ", " : "", k,
                 f->topo.level[k].name);
    cmd_fail("set STRATA_TOPO_PATH (zone/rack/host) or STRATA_TOPO_FILE to place ranks",
             "--hpz %s: no such fabric level (levels: %s)", name, known);
    return -1;
}

/* Tier colours of the hierarchical partitions: --hpz LEVEL (1 tier) or --tiers 3 (the two fastest
 * levels that split the job, each into fewer units than the one before). Returns 0 or 1 (printed). */
static int tier_colors(strata_comm_t *comm, const strata_train_config_t *cfg,
                       strata_zero_config_t *zc)
{
    zc->stage = cfg->zero;
    zc->quant_weights = cfg->qwz;
    zc->quant_grads = cfg->qgz;
    zc->bf16_grads = cfg->bf16_grads;
    zc->bucket_count = (size_t)cfg->bucket;
    const strata_fabric_t *f = strata_comm_fabric(comm);
    int r = strata_comm_rank(comm);
    if (cfg->hpz[0]) {
        int l = find_level(f, cfg->hpz);
        if (l < 0)
            return 1;
        zc->ntiers = 1;
        zc->tier_colors[0] = strata_fabric_unit(f, l, r);
    } else if (cfg->tiers == 3) {
        int found = 0, prev_units = f->nranks + 1;
        char seen[256] = "";
        for (int l = 0; l < f->topo.nlevels && found < 2; l++) {
            int u = f->nunits[l];
            snprintf(seen + strlen(seen), sizeof seen - strlen(seen), "%s%s:%d units",
                     l ? ", " : "", f->topo.level[l].name, u);
            if (u > 1 && u < prev_units) {
                zc->tier_colors[found++] = strata_fabric_unit(f, l, r);
                prev_units = u;
            }
        }
        if (found < 2)
            return cmd_fail("place ranks with STRATA_TOPO_PATH=rack/host per rank",
                            "--tiers 3 needs two fabric levels that split the job (%s)", seen);
        zc->ntiers = 2;
    }
    return 0;
}

/* A run started without --resume in a directory holding a committed step of a run would start over
 * at step 1 and overwrite that run's steps (then prune them): refused. Every rank checks before
 * the communicator exists, so all refuse alike. Returns 0, or 1 after printing why. */
static int refuse_run_dir(const char *dir)
{
    int64_t step;
    if (strata_ckpt_steps(dir, &step, 1) < 1)
        return 0;
    char run[17] = "?";
    strata_ckpt_manifest_t mf;
    if (strata_ckpt_manifest_read(dir, step, &mf) == STRATA_OK) {
        snprintf(run, sizeof run, "%s", mf.run_id);
        strata_ckpt_manifest_free(&mf);
    }
    return cmd_fail("continue it with --resume, or start over in another --ckpt-dir (or remove "
                    "its ckpt_* files)", "--ckpt-dir %s holds checkpoint step %lld of run %s: a "
                    "new run there would overwrite its steps and prune them", dir,
                    (long long)step, run);
}

/* The resume line: where the step came from, and what the other place had. */
static void print_resumed(const strata_train_config_t *cfg, strata_resume_info_t ri,
                          const char *run)
{
    bool mem = cfg->mem_ckpt_every > 0;
    char disk[64] = "no --ckpt-dir", memory[64] = "none";
    if (cfg->ckpt_dir[0] && ri.disk_step >= 0)
        snprintf(disk, sizeof disk, "%lld", (long long)ri.disk_step);
    else if (cfg->ckpt_dir[0])
        snprintf(disk, sizeof disk, "none");
    if (ri.memory_step >= 0)
        snprintf(memory, sizeof memory, "step %lld", (long long)ri.memory_step);
    if (ri.step > 0 && ri.from_memory)
        fprintf(stderr, "strata train: resumed from memory step %lld (disk has %s) in %.2f s: %s "
                "(run %s)\n", (long long)ri.step, disk, ri.seconds, cfg->mem_ckpt_dir, run);
    else if (ri.step > 0)
        fprintf(stderr, "strata train: resumed at step %lld from %s (run %s)%s%s\n",
                (long long)ri.step, cfg->ckpt_dir, run, mem ? "; memory has " : "",
                mem ? memory : "");
    else
        fprintf(stderr, "strata train: --resume: no checkpoint in %s%s%s (empty or new); "
                "starting from step 0\n", cfg->ckpt_dir[0] ? cfg->ckpt_dir : "",
                cfg->ckpt_dir[0] && mem ? " or memory " : mem ? "memory " : "",
                mem ? cfg->mem_ckpt_dir : "");
}

int cmd_train(int argc, char **argv)
{
    // oneDNN and the layers run on libgomp, whose idle threads spin for milliseconds by default:
    // beside the communicator's threads or other ranks on the host, that took the cores they
    // needed (2.6x slower at --threads 2 on a busy host). Sleeping at once costs a wake-up at
    // nearly every parallel region instead (9% of the 3.3M model's step at 2 threads), so they
    // spin 300 rounds, a few microseconds, first: on a busy host 2% slower than not at all.
    // libgomp reads both only when it loads, hence the re-exec; a user's settings win.
    if (!getenv("OMP_WAIT_POLICY")) {
        setenv("GOMP_SPINCOUNT", "300", 0);
        cmd_reexec_with_env("OMP_WAIT_POLICY", "PASSIVE");
    }
    strata_train_config_t cfg = strata_train_config_default();
    snprintf(cfg.data, sizeof cfg.data, "data/corpus/strata_tales.txt");
    // The config file first, so flags override it.
    for (int i = 1; i < argc - 1; i++)
        if (!strcmp(argv[i], "--config") && strata_train_config_load(argv[i + 1], &cfg) < 0)
            return cmd_fail(NULL, "%s", strata_last_error());
    bool resume = false;
    int plan_ranks = 0; // --plan: the ranks the plan is for
    enum { O_CONFIG = 256, O_DATA, O_LAYERS, O_HEADS, O_DIM, O_FF, O_MAXSEQ, O_BATCH, O_SEQ,
           O_STEPS, O_OPT, O_LR, O_MINLR, O_WARMUP, O_WD, O_CLIP, O_SEED, O_THREADS, O_CKDIR,
           O_CKEVERY, O_KEEP, O_RESUME, O_METRICS, O_TRACE, O_TRACESTEP, O_EVAL, O_QUIET, O_PROGEVERY, O_ZERO, O_HPZ, O_TIERS, O_QWZ, O_QGZ, O_GRADDT, O_BUCKET,
           O_NONFINITE, O_MEMDIR, O_MEMEVERY, O_STRAGGLER, O_TP, O_SP, O_ORDER, O_NOOVERLAP,
           O_PP, O_VP, O_SCHEDULE, O_MICRO, O_PPLAYERS, O_PPSVG, O_PLAN, O_HARVEST, O_POOLOPT,
           O_PRECISION, O_PARALLEL, O_WINDOW, O_NORM, O_MLP, O_POS, O_NOBIAS, O_THETA, O_LLAMA,
           O_KVHEADS, O_UNTIED, O_PREFETCH, O_HELP };
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
        {"progress-every", 1, 0, O_PROGEVERY},
        {"zero", 1, 0, O_ZERO},         {"hpz", 1, 0, O_HPZ},         {"tiers", 1, 0, O_TIERS},
        {"qwz", 0, 0, O_QWZ},           {"qgz", 0, 0, O_QGZ},         {"grad-dtype", 1, 0, O_GRADDT},
        {"bucket", 1, 0, O_BUCKET},
        {"nonfinite", 1, 0, O_NONFINITE}, {"mem-ckpt-dir", 1, 0, O_MEMDIR},
        {"mem-ckpt-every", 1, 0, O_MEMEVERY}, {"straggler-window", 1, 0, O_STRAGGLER},
        {"tp", 1, 0, O_TP},             {"sp", 0, 0, O_SP},           {"order", 1, 0, O_ORDER},
        {"no-tp-overlap", 0, 0, O_NOOVERLAP}, {"pp", 1, 0, O_PP},         {"vp", 1, 0, O_VP},
        {"schedule", 1, 0, O_SCHEDULE}, {"micro-batch", 1, 0, O_MICRO},
        {"pp-layers", 1, 0, O_PPLAYERS}, {"pp-svg", 1, 0, O_PPSVG},   {"plan", 1, 0, O_PLAN},
        {"harvest", 1, 0, O_HARVEST},   {"optimizer-in-pool", 0, 0, O_POOLOPT},
        {"precision", 1, 0, O_PRECISION},
        {"parallel-block", 0, 0, O_PARALLEL}, {"window", 1, 0, O_WINDOW}, {"norm", 1, 0, O_NORM},
        {"mlp", 1, 0, O_MLP},           {"pos", 1, 0, O_POS},         {"no-bias", 0, 0, O_NOBIAS},
        {"rope-theta", 1, 0, O_THETA},  {"llama", 0, 0, O_LLAMA},     {"kv-heads", 1, 0, O_KVHEADS},
        {"untied", 0, 0, O_UNTIED},
        {"prefetch", 1, 0, O_PREFETCH},
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
        case O_PROGEVERY: if (!num(flag, optarg, 0, 86400, &d)) return 2; cfg.progress_every = d; break;
        case O_PREFETCH: if (!num(flag, optarg, 0, 64, &d)) return 2; cfg.prefetch = (int)d; break;
        case O_STRAGGLER: if (!num(flag, optarg, 0, 1 << 20, &d)) return 2; cfg.straggler_window = (int)d; break;
        case O_ZERO: INT(0, 3, cfg.zero); break;
        case O_HPZ: snprintf(cfg.hpz, sizeof cfg.hpz, "%s", optarg); break;
        case O_TIERS:
            if (strcmp(optarg, "3") && strcmp(optarg, "0")) {
                fprintf(stderr, "strata train: --tiers expects 3 (the 3-level scheme), got '%s'\n",
                        optarg);
                return 2;
            }
            cfg.tiers = atoi(optarg);
            break;
        case O_QWZ: cfg.qwz = true; break;
        case O_TP: INT(1, 1024, cfg.tp); break;
        case O_SP: cfg.sp = true; break;
        case O_NOOVERLAP: cfg.tp_overlap = false; break;
        case O_PP: INT(1, 1024, cfg.pp); break;
        case O_VP: INT(1, 8, cfg.vp); break;
        case O_MICRO: INT(1, 1 << 20, cfg.micro_batch); break;
        case O_PPLAYERS: snprintf(cfg.pp_layers, sizeof cfg.pp_layers, "%s", optarg); break;
        case O_PPSVG: snprintf(cfg.pp_svg, sizeof cfg.pp_svg, "%s", optarg); break;
        case O_HARVEST: snprintf(cfg.harvest, sizeof cfg.harvest, "%s", optarg); break;
        case O_POOLOPT: cfg.optimizer_in_pool = true; break;
        case O_PRECISION:
            if (strata_precision_parse(optarg, &cfg.precision) < 0 ||
                (cfg.precision != STRATA_PREC_FP32 && cfg.precision != STRATA_PREC_BF16)) {
                fprintf(stderr, "strata train: --precision expects fp32 or bf16, got '%s'\n", optarg);
                return 2;
            }
            break;
        case O_PLAN:
            if (strata_train_config_apply_plan(optarg, &cfg, &plan_ranks) < 0)
                return cmd_fail(NULL, "--plan: %s", strata_last_error());
            break;
        case O_SCHEDULE:
            if (strata_schedule_parse(optarg, &cfg.schedule) < 0)
                return cmd_fail(NULL, "--schedule: %s", strata_last_error());
            break;
        case O_ORDER: {
            strata_dim_t order[STRATA_DIM_COUNT];
            if (strata_order_parse(optarg, order) < 0)
                return cmd_fail(NULL, "--order: %s", strata_last_error());
            snprintf(cfg.order, sizeof cfg.order, "%s", optarg);
            break;
        }
        case O_QGZ: cfg.qgz = true; break;
        case O_GRADDT:
            if (strata_grad_dtype_parse(optarg, &cfg.bf16_grads) < 0) {
                fprintf(stderr, "strata train: --grad-dtype expects fp32 or bf16, got '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case O_BUCKET: if (!num(flag, optarg, 0, 1e12, &d)) return 2; cfg.bucket = (int64_t)d; break;
        case O_NONFINITE:
            if (strata_nonfinite_parse(optarg, &cfg.nonfinite) < 0) {
                fprintf(stderr, "strata train: --nonfinite expects stop or skip, got '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case O_MEMDIR: snprintf(cfg.mem_ckpt_dir, sizeof cfg.mem_ckpt_dir, "%s", optarg); break;
        case O_MEMEVERY:
            if (!num(flag, optarg, 0, 1e12, &d))
                return 2;
            cfg.mem_ckpt_every = (int64_t)d;
            break;
        case O_PARALLEL: cfg.model.parallel = true; break;
        case O_WINDOW: INT(0, 65536, cfg.model.window); break;
        case O_NORM:
        case O_MLP:
        case O_POS:
            if (strata_gpt_config_set_choice(&cfg.model, fl, optarg) < 0)
                return cmd_fail(NULL, "%s: %s", flag, strata_last_error());
            break;
        case O_NOBIAS: cfg.model.no_bias = true; break;
        case O_THETA: FLT(1.001, 1e12, cfg.model.rope_theta); break;
        case O_LLAMA: strata_gpt_config_llama(&cfg.model); break;
        case O_KVHEADS: INT(1, 65536, cfg.model.n_kv_head); break;
        case O_UNTIED: cfg.model.untied = true; break;
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
    // Memory checkpoints: the directory given, else the launcher's (one per launch, kept across
    // its restarts of the ranks, removed when it exits).
    const char *env_mem = getenv("STRATA_MEM_CKPT_DIR");
    if (cfg.mem_ckpt_every > 0 && !cfg.mem_ckpt_dir[0] && env_mem && env_mem[0])
        snprintf(cfg.mem_ckpt_dir, sizeof cfg.mem_ckpt_dir, "%s", env_mem);
    if (cfg.mem_ckpt_every > 0 && !cfg.mem_ckpt_dir[0]) {
        fprintf(stderr, "strata train: --mem-ckpt-every %lld needs a directory that outlives the "
                "ranks: --mem-ckpt-dir DIR (e.g. under /dev/shm), or run under strata launch, "
                "which sets STRATA_MEM_CKPT_DIR\n", (long long)cfg.mem_ckpt_every);
        return 2;
    }
    if (resume && !cfg.ckpt_dir[0] && cfg.mem_ckpt_every == 0)
        return cmd_fail("give --ckpt-dir DIR (or --mem-ckpt-every K)",
                        "--resume needs a checkpoint directory");
    if (!resume && cfg.ckpt_dir[0] && refuse_run_dir(cfg.ckpt_dir) != 0)
        return 1;
    if (cfg.hpz[0] && cfg.tiers == 3)
        return cmd_fail("give one of them", "--hpz and --tiers 3 are two different partitions");
    if (cfg.bf16_grads && cfg.qgz)
        return cmd_fail("give one of them", "--grad-dtype bf16 and --qgz are two encodings of the "
                        "gradient reductions (qgZ already sends int8)");
    if (cfg.bf16_grads && cfg.optimizer_in_pool)
        return cmd_fail("drop --grad-dtype bf16", "--grad-dtype bf16 with --optimizer-in-pool: the "
                        "gradients go to the pool, not through the ZeRO engine's reductions");
    // A launcher's environment with more than one rank: data parallel.
    strata_comm_t *comm = NULL;
    strata_comm_config_t cc;
    bool env_ok = strata_comm_config_from_env(&cc) == STRATA_OK;
    if (!env_ok && strata_comm_launcher()) // started by a launcher: never train alone silently
        return cmd_fail(NULL, "train: cannot join the job: %s", strata_last_error());
    if (env_ok && cc.nranks > 1 && strata_comm_create(&cc, &comm) < 0)
        return cmd_fail(NULL, "%s", strata_last_error());
    int rank = comm ? strata_comm_rank(comm) : 0;
    int world = comm ? strata_comm_size(comm) : 1;
    if (plan_ranks && plan_ranks != world) {
        strata_comm_destroy(comm);
        return cmd_fail("run it with that many ranks, or plan for this job's", "--plan: the plan "
                        "is for %d ranks (tp x pp x dp), this job has %d", plan_ranks, world);
    }
    if (!comm && (cfg.zero || cfg.hpz[0] || cfg.tiers || cfg.qwz || cfg.qgz || cfg.bf16_grads ||
                  cfg.sp || cfg.order[0]))
        fprintf(stderr, "strata train: one process: --zero/--hpz/--tiers/--qwz/--qgz/--grad-dtype/"
                "--sp/--order "
                "have no effect (run under strata launch -n N)\n");
    if (!comm && cfg.pp > 1)
        return cmd_fail("run it under a launcher with a multiple of that many ranks, e.g. strata "
                        "launch -n 2 -- strata train --pp 2", "--pp %d needs %d ranks or more, "
                        "this is one process", cfg.pp, cfg.pp);
    if (!comm && cfg.optimizer_in_pool)
        return cmd_fail("run it under a launcher with 2 ranks or more, e.g. strata launch -n 2 -- "
                        "strata train --optimizer-in-pool", "--optimizer-in-pool: the ranks push "
                        "gradients to the pool and read parameters back; this is one process");
    if (!comm && cfg.tp > 1)
        return cmd_fail("run it under a launcher with a multiple of that many ranks, e.g. strata "
                        "launch -n 2 -- strata train --tp 2", "--tp %d needs %d ranks or more, "
                        "this is one process", cfg.tp, cfg.tp);
    strata_zero_config_t zc = strata_zero_config_default();
    if (comm && tier_colors(comm, &cfg, &zc) < 0) {
        strata_comm_destroy(comm);
        return 1;
    }
    strata_trainer_t *t = NULL;
    int rc = 0;
    if (strata_trainer_create(&cfg, &t) < 0 || (comm && strata_trainer_distribute(t, comm, &zc) < 0)) {
        rc = cmd_fail(NULL, "%s", strata_last_error());
        goto out;
    }
    strata_gpt_t *m = strata_trainer_model(t);
    if (rank == 0) {
        fprintf(stderr, "strata train: %zu parameters (L=%d C=%d heads=%d T=%d), batch %d, %lld "
                "steps, %s", strata_model_full_nparams(m), cfg.model.n_layer, cfg.model.d_model,
                cfg.model.n_head, cfg.seq, cfg.batch, (long long)cfg.steps,
                strata_precision_name(strata_blas_precision()));
        if (strata_blas_precision() == STRATA_PREC_BF16)
            fprintf(stderr, " (%s)", strata_blas_bf16_units());
        else if (cfg.precision == STRATA_PREC_BF16)
            fprintf(stderr, " (bf16 asked for: this CPU has no bf16 units; %s)",
                    strata_blas_f32_library());
        else
            fprintf(stderr, " (%s)", strata_blas_f32_library());
        if (comm)
            fprintf(stderr, ", %d ranks%s%.0d%s%s%.0d%s%s, ZeRO-%d%s%s%s%s%s%s%s",
                    strata_comm_size(comm), cfg.tp > 1 ? ", TP=" : "", cfg.tp > 1 ? cfg.tp : 0,
                    cfg.tp > 1 ? (cfg.sp ? " with SP" : "") : "", cfg.pp > 1 ? ", PP=" : "",
                    cfg.pp > 1 ? cfg.pp : 0, cfg.pp > 1 ? " " : "",
                    cfg.pp > 1 ? strata_schedule_name(cfg.schedule) : "", cfg.zero,
                    cfg.hpz[0] ? ", hpZ in " : "", cfg.hpz, cfg.tiers == 3 ? ", 3-level" : "",
                    cfg.qwz ? ", qwZ" : "", cfg.qgz ? ", qgZ" : "",
                    cfg.bf16_grads ? ", bf16 gradients" : "",
                    cfg.optimizer_in_pool ? ", optimizer in the pool" : "");
        fputc('\n', stderr);
    }
    catch_stop_signals();
    strata_trainer_set_stop_flag(t, &stop_signal);
    if (resume) {
        int64_t step;
        if (strata_trainer_resume(t, &step) < 0) {
            rc = cmd_fail("look at the files named, or start without --resume", "%s",
                          strata_last_error());
            goto out;
        }
        if (rank == 0)
            print_resumed(&cfg, strata_trainer_resume_info(t), strata_trainer_run_id(t));
    }
    if (strata_trainer_run(t, NULL) < 0) {
        rc = cmd_fail(NULL, "%s", strata_last_error());
    } else if (strata_trainer_stopped(t) && rank == 0) {
        int sig = strata_trainer_stopped(t);
        const char *name = sig > 0 ? sigabbrev_np(sig) : NULL;
        fprintf(stderr, "strata train: stopped by %s%s after step %lld of %lld; ",
                sig < 0 ? "a signal on another rank" : name ? "SIG" : "signal ",
                sig < 0 ? "" : name ? name : "?", (long long)strata_trainer_step_count(t),
                (long long)cfg.steps);
        if (cfg.ckpt_dir[0])
            fprintf(stderr, "checkpoint step %lld written to %s (continue with --resume)\n",
                    (long long)strata_trainer_step_count(t), cfg.ckpt_dir);
        else
            fprintf(stderr, "nothing saved (no --ckpt-dir)\n");
    }
out:
    // A failing rank tells the others (they fail naming it instead of waiting for a timeout).
    if (rc != 0 && comm && strata_comm_get_error(comm) == STRATA_OK)
        strata_comm_abort(comm, "strata train failed on this rank");
    strata_trainer_destroy(t);
    strata_comm_destroy(comm);
    return rc;
}
