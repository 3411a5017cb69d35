/* `strata plan`: predict a training step, search the best parallel configuration, validate the
 * model against published measurements and calibrate it. Thin: parses flags into a problem, calls
 * src/plan, prints tables (or --json, or an SVG timeline). */
#include "strata/cmd.h"
#include "strata/plan.h"
#include "strata/strata.h"

#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: strata plan [predict] --model M [problem flags] [parallel flags] [--json] [--svg "
    "FILE]\n"
    "       strata plan search --model M [problem flags] [search flags] [--json] [--svg FILE]\n"
    "       strata plan validate [TABLE.csv ...] [--no-loo] [--json]\n"
    "       strata plan calibrate [TABLE.csv ...] [--fit NAMES] [--write FILE]\n"
    "       strata plan calibrate-cpu [--threads N] [--write FILE]\n"
    "       strata plan presets | show model|accel|cluster NAME\n"
    "       strata plan schedule --schedule S --pp P --micro M [--vp V] [--svg FILE] (--help)\n"
    "\n"
    "problem:  --model NAME|FILE.json  --cluster NAME|FILE.json  --accel NAME|FILE.json  --gpus N\n"
    "          --train FILE.json  --global-batch B  --micro-batch b  --seq S  --precision "
    "bf16|fp16|fp32|fp8\n"
    "          --optimizer adam|adamw|lamb  --recompute none|selective|full  --sp on|off\n"
    "          --flash on|off  --grad-bytes 2|4  --calib FILE.json  --calib-set name=value,...\n"
    "parallel: --tp --cp --pp --vp --dp N  --zero 0-3  --zero-secondary N\n"
    "          --zero-keep-params on|off (ZeRO-3)  --zero-reduce-once on|off (ZeRO-2/3)\n"
    "          --schedule gpipe|1f1b|interleaved|zb-h1|zb-v (zb-v: --vp 2 implied)\n"
    "          --overlap none|all|tp+cp+pp+dp\n"
    "          --order tp,cp,pp,dp (innermost first)\n"
    "search:   --top N  --all-orders  --max-tp N  --max-cp N  --max-vp N  --max-micro-batch N\n"
    "          --zero-stages 0123  --allow-no-fit  --zero-secondary N\n"
    "data:     --data DIR (default: ./data, else next to the strata binary)\n";

typedef struct opts {
    strata_plan_problem_t pb;
    strata_parallel_t par;
    bool have[16];
    bool json;
    const char *svg;
    strata_search_opts_t so;
    const char *data;
} opts_t;

enum { H_DP, H_GB, H_GPUS, H_ACCEL, H_MODEL, H_OVERLAP };

static const char *find_data(const char *given)
{
    static char buf[PATH_MAX];
    if (given)
        return given;
    if (access("data/validation", R_OK) == 0)
        return "data";
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 64);
    if (n > 0) {
        buf[n] = 0;
        char *slash = strrchr(buf, '/');
        static const char *const rel[] = {"/../../data", "/../data", "/../share/strata/data"};
        for (int i = 0; slash && i < 3; i++) {
            snprintf(slash, sizeof buf - (size_t)(slash - buf), "%s", rel[i]);
            char probe[PATH_MAX + 16];
            snprintf(probe, sizeof probe, "%s/validation", buf);
            if (access(probe, R_OK) == 0)
                return buf;
            n = readlink("/proc/self/exe", buf, sizeof buf - 64);
            buf[n > 0 ? n : 0] = 0;
            slash = strrchr(buf, '/');
        }
    }
    return "data";
}

static bool is_file(const char *s)
{
    size_t n = strlen(s);
    return n > 5 && !strcmp(s + n - 5, ".json");
}

static int int_arg(const char *flag, const char *v, int lo, int *out)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > INT_MAX)
        return cmd_fail(NULL, "%s: expected an integer >= %d, got '%s'", flag, lo, v);
    *out = (int)x;
    return 0;
}

static int onoff(const char *flag, const char *v, bool *out)
{
    if (!strcmp(v, "on") || !strcmp(v, "yes") || !strcmp(v, "true")) {
        *out = true;
        return 0;
    }
    if (!strcmp(v, "off") || !strcmp(v, "no") || !strcmp(v, "false")) {
        *out = false;
        return 0;
    }
    return cmd_fail(NULL, "%s: expected on or off, got '%s'", flag, v);
}

#define LIB(call)                                             \
    do {                                                      \
        if ((call) < 0)                                       \
            return cmd_fail(NULL, "%s", strata_last_error()); \
    } while (0)

/* Parses problem, parallel, output and search flags from argv[first..]. Returns 0, 1 (error) or
 * 2 (usage). */
static int parse(int argc, char **argv, int first, opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->pb.train = strata_training_default();
    o->pb.train.global_batch = 0;
    o->pb.calib = strata_calib_default();
    o->par = strata_parallel_default();
    o->so = strata_search_opts_default();
    const char *cluster = "h100-roce-24k", *accel = NULL, *model = NULL, *train = NULL;
    const char *calib = NULL, *calib_set = NULL;
    // Training flags are applied after --train, whatever their order.
    const char *tflag[16][2];
    int ntflag = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        }
        if (!strcmp(a, "--all-orders")) {
            o->so.all_orders = true;
            continue;
        }
        if (!strcmp(a, "--allow-no-fit")) {
            o->so.allow_no_fit = true;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            return 3;
        }
        if (strncmp(a, "--", 2) || i + 1 >= argc) {
            fprintf(stderr, "strata plan: unexpected argument '%s'\n%s", a, usage_text);
            return 2;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--cluster"))
            cluster = v;
        else if (!strcmp(a, "--accel"))
            accel = v;
        else if (!strcmp(a, "--train"))
            train = v;
        else if (!strcmp(a, "--calib"))
            calib = v;
        else if (!strcmp(a, "--calib-set"))
            calib_set = v;
        else if (!strcmp(a, "--data"))
            o->data = v;
        else if (!strcmp(a, "--svg"))
            o->svg = v;
        else if (!strcmp(a, "--gpus")) {
            int g = 0;
            rc = int_arg(a, v, 1, &g);
            o->pb.gpus = g;
            o->have[H_GPUS] = true;
        } else if (!strcmp(a, "--global-batch") || !strcmp(a, "--micro-batch") ||
                   !strcmp(a, "--seq") || !strcmp(a, "--precision") || !strcmp(a, "--optimizer") ||
                   !strcmp(a, "--recompute") || !strcmp(a, "--sp") || !strcmp(a, "--flash") ||
                   !strcmp(a, "--grad-bytes")) {
            if (ntflag < 16) {
                tflag[ntflag][0] = a;
                tflag[ntflag][1] = v;
                ntflag++;
            }
        } else if (!strcmp(a, "--tp"))
            rc = int_arg(a, v, 1, &o->par.tp);
        else if (!strcmp(a, "--cp"))
            rc = int_arg(a, v, 1, &o->par.cp);
        else if (!strcmp(a, "--pp"))
            rc = int_arg(a, v, 1, &o->par.pp);
        else if (!strcmp(a, "--vp"))
            rc = int_arg(a, v, 1, &o->par.vp);
        else if (!strcmp(a, "--dp")) {
            rc = int_arg(a, v, 1, &o->par.dp);
            o->have[H_DP] = true;
        } else if (!strcmp(a, "--zero"))
            rc = int_arg(a, v, 0, &o->par.zero);
        else if (!strcmp(a, "--zero-secondary")) {
            rc = int_arg(a, v, 1, &o->par.zero_secondary);
            o->so.zero_secondary = o->par.zero_secondary;
        } else if (!strcmp(a, "--zero-keep-params"))
            rc = onoff(a, v, &o->par.zero_keep_params);
        else if (!strcmp(a, "--zero-reduce-once"))
            rc = onoff(a, v, &o->par.zero_reduce_once);
        else if (!strcmp(a, "--schedule")) {
            LIB(strata_schedule_parse(v, &o->par.schedule));
        } else if (!strcmp(a, "--overlap")) {
            LIB(strata_overlap_parse(v, o->par.overlap));
            memcpy(o->so.overlap, o->par.overlap, sizeof o->so.overlap);
        } else if (!strcmp(a, "--order"))
            LIB(strata_order_parse(v, o->par.order));
        else if (!strcmp(a, "--top"))
            rc = int_arg(a, v, 1, &o->so.top);
        else if (!strcmp(a, "--max-tp"))
            rc = int_arg(a, v, 1, &o->so.max_tp);
        else if (!strcmp(a, "--max-cp"))
            rc = int_arg(a, v, 1, &o->so.max_cp);
        else if (!strcmp(a, "--max-vp"))
            rc = int_arg(a, v, 1, &o->so.max_vp);
        else if (!strcmp(a, "--max-micro-batch"))
            rc = int_arg(a, v, 1, &o->so.max_micro_batch);
        else if (!strcmp(a, "--zero-stages")) {
            o->so.zero_mask = 0;
            for (const char *p = v; *p; p++) {
                if (*p < '0' || *p > '3')
                    return cmd_fail(NULL, "--zero-stages: expected digits 0-3, got '%s'", v);
                o->so.zero_mask |= 1u << (*p - '0');
            }
        } else {
            fprintf(stderr, "strata plan: unknown flag '%s'\n%s", a, usage_text);
            return 2;
        }
        if (rc)
            return rc;
    }
    if (!model) {
        fprintf(stderr, "strata plan: --model is required\n%s", usage_text);
        return 2;
    }
    LIB(is_file(model) ? strata_model_load(model, &o->pb.model)
                       : strata_model_preset(model, &o->pb.model));
    LIB(is_file(cluster) ? strata_topo_load(cluster, &o->pb.topo)
                         : strata_topo_preset(cluster, &o->pb.topo));
    if (!accel)
        accel = o->pb.topo.accel[0] ? o->pb.topo.accel : "h100-sxm";
    LIB(is_file(accel) ? strata_accel_load(accel, &o->pb.accel)
                       : strata_accel_preset(accel, &o->pb.accel));
    if (train)
        LIB(strata_training_load(train, &o->pb.train));
    for (int k = 0; k < ntflag; k++) {
        const char *a = tflag[k][0], *v = tflag[k][1];
        strata_training_t *t = &o->pb.train;
        int rc = 0;
        if (!strcmp(a, "--global-batch"))
            rc = int_arg(a, v, 1, &t->global_batch);
        else if (!strcmp(a, "--micro-batch"))
            rc = int_arg(a, v, 1, &t->micro_batch);
        else if (!strcmp(a, "--seq"))
            rc = int_arg(a, v, 1, &t->seq);
        else if (!strcmp(a, "--precision"))
            LIB(strata_precision_parse(v, &t->precision));
        else if (!strcmp(a, "--optimizer"))
            LIB(strata_optimizer_parse(v, &t->optimizer));
        else if (!strcmp(a, "--recompute"))
            LIB(strata_recompute_parse(v, &t->recompute));
        else if (!strcmp(a, "--sp"))
            rc = onoff(a, v, &t->sequence_parallel);
        else if (!strcmp(a, "--flash"))
            rc = onoff(a, v, &t->flash_attention);
        else if (!strcmp(a, "--grad-bytes"))
            rc = int_arg(a, v, 0, &t->grad_bytes);
        if (rc)
            return rc;
    }
    if (!o->pb.train.global_batch) {
        // Default: about 4M tokens per step, a power of two of sequences.
        int seq = o->pb.train.seq ? o->pb.train.seq : o->pb.model.seq, gb = 1;
        while ((long long)gb * 2 * seq <= 4 * 1024 * 1024)
            gb *= 2;
        o->pb.train.global_batch = gb;
    }
    if (calib)
        LIB(strata_calib_load(calib, &o->pb.calib));
    if (calib_set)
        LIB(strata_calib_apply(&o->pb.calib, calib_set));
    // Accelerators: given, or tp*cp*pp*dp when dp is given, or the whole cluster.
    long long cap = strata_topo_capacity(&o->pb.topo);
    if (!o->have[H_GPUS])
        o->pb.gpus = o->have[H_DP] ? (long long)o->par.tp * o->par.cp * o->par.pp * o->par.dp : cap;
    if (!o->have[H_DP]) {
        long long mp = (long long)o->par.tp * o->par.cp * o->par.pp;
        o->par.dp = o->pb.gpus % mp ? 0 : (int)(o->pb.gpus / mp);
    }
    if (o->par.vp > 1 && o->par.schedule == STRATA_SCHED_1F1B)
        o->par.schedule = STRATA_SCHED_INTERLEAVED;
    if (o->par.vp == 1 && o->par.schedule == STRATA_SCHED_ZB_V)
        o->par.vp = 2; /* a V: two chunks per stage */
    o->data = find_data(o->data);
    return 0;
}

/* ---- printing ----------------------------------------------------------------------------------
 */

static long long st_gpus_of(const strata_plan_problem_t *pb)
{
    return pb->gpus > 0 ? pb->gpus : strata_topo_capacity(&pb->topo);
}

static const char *level_name(const strata_topo_t *t, int level)
{
    return level <= 0 ? "-" : level <= t->nlevels ? t->level[level - 1].name : "?";
}

static double gib(double b)
{
    return b / 1073741824.0;
}

static void print_pred(const strata_plan_problem_t *pb, const strata_parallel_t *par,
                       const strata_prediction_t *p)
{
    char cfg[160];
    const strata_training_t *t = &pb->train;
    printf(
        "model    %s: %.4gB parameters, %d layers, hidden %d, %d heads (%d KV), FFN %d, vocab %d\n",
        pb->model.name, strata_model_params(&pb->model) / 1e9, pb->model.layers, pb->model.hidden,
        pb->model.heads, pb->model.kv_heads, pb->model.ffn, pb->model.vocab);
    printf("cluster  %s: %lld x %s\n", pb->topo.name, pb->gpus, pb->accel.name);
    printf("config   %s, order %s,%s,%s,%s\n", strata_parallel_format(par, cfg, sizeof cfg),
           strata_dim_name(par->order[0]), strata_dim_name(par->order[1]),
           strata_dim_name(par->order[2]), strata_dim_name(par->order[3]));
    printf("training batch %d x seq %d, micro-batch %d (%d per pipeline), %s, %s, recompute %s, "
           "SP %s, flash %s\n\n",
           t->global_batch, t->seq ? t->seq : pb->model.seq, t->micro_batch, p->microbatches,
           strata_precision_name(t->precision), strata_optimizer_name(t->optimizer),
           strata_recompute_name(t->recompute), t->sequence_parallel ? "on" : "off",
           t->flash_attention ? "on" : "off");
    printf("step time                    %10.4f s\n", p->step_s);
    printf("  compute (fwd+bwd+recompute)%10.4f s  %5.1f%%\n", p->compute_s,
           100 * p->compute_s / p->step_s);
    printf("  pipeline bubble            %10.4f s  %5.1f%%\n", p->bubble_s,
           100 * p->bubble_s / p->step_s);
    static const char *const nm[] = {"TP", "CP", "PP", "DP"};
    for (int d = 0; d < STRATA_DIM_COUNT; d++)
        printf(
            "  %s comm exposed             %10.4f s  %5.1f%%  (total %.4f s, %.3g GB sent, spans "
            "%s)\n",
            nm[d], p->comm[d].exposed_s, 100 * p->comm[d].exposed_s / p->step_s, p->comm[d].total_s,
            p->comm[d].bytes / 1e9, level_name(&pb->topo, p->comm[d].level));
    printf("  optimizer                  %10.4f s  %5.1f%%\n", p->optimizer_s,
           100 * p->optimizer_s / p->step_s);
    printf("  straggler wait             %10.4f s  %5.1f%%  (the slowest of %lld accelerators)\n",
           p->straggler_s, 100 * p->straggler_s / p->step_s, st_gpus_of(pb));
    printf("throughput   %.0f tokens/s, %.1f model TFLOP/s per accelerator\n", p->tokens_per_s,
           p->tflops_per_accel);
    printf("MFU          %.1f%%  (model FLOPs = 3 x forward incl. full s^2 attention and logits, "
           "no recompute: the Megatron-LM / MegaScale convention)\n",
           100 * p->mfu);
    printf("HFU          %.1f%%  (with recomputed FLOPs)\n", 100 * p->hfu);
    printf("memory/accel %.2f GiB of %.2f GiB: %s (stage %d)\n", gib(p->mem.total),
           gib(p->mem.capacity), p->mem.fits ? "fits" : "DOES NOT FIT", p->mem.stage);
    printf("  weights %.2f, gradients %.2f, optimizer %.2f, activations %.2f, comm buffers %.2f, "
           "fragmentation %.2f, reserved %.2f GiB\n",
           gib(p->mem.weights), gib(p->mem.grads), gib(p->mem.optimizer), gib(p->mem.activations),
           gib(p->mem.comm_buffers), gib(p->mem.fragmentation), gib(p->mem.reserved));
}

static json_object *pred_json(const strata_plan_problem_t *pb, const strata_parallel_t *par,
                              const strata_training_t *t, const strata_prediction_t *p)
{
    json_object *o = json_object_new_object();
    json_object *c = json_object_new_object();
    json_object_object_add(c, "tp", json_object_new_int(par->tp));
    json_object_object_add(c, "cp", json_object_new_int(par->cp));
    json_object_object_add(c, "pp", json_object_new_int(par->pp));
    json_object_object_add(c, "vp", json_object_new_int(par->vp));
    json_object_object_add(c, "dp", json_object_new_int(par->dp));
    json_object_object_add(c, "zero", json_object_new_int(par->zero));
    json_object_object_add(c, "zero_secondary", json_object_new_int(par->zero_secondary));
    json_object_object_add(c, "zero_keep_params", json_object_new_boolean(par->zero_keep_params));
    json_object_object_add(c, "zero_reduce_once", json_object_new_boolean(par->zero_reduce_once));
    json_object_object_add(c, "precision",
                           json_object_new_string(strata_precision_name(t->precision)));
    json_object_object_add(c, "schedule",
                           json_object_new_string(strata_schedule_name(par->schedule)));
    json_object_object_add(c, "micro_batch", json_object_new_int(t->micro_batch));
    json_object_object_add(c, "recompute",
                           json_object_new_string(strata_recompute_name(t->recompute)));
    json_object_object_add(c, "sequence_parallel", json_object_new_boolean(t->sequence_parallel));
    json_object *ord = json_object_new_array();
    for (int i = 0; i < STRATA_DIM_COUNT; i++)
        json_object_array_add(ord, json_object_new_string(strata_dim_name(par->order[i])));
    json_object_object_add(c, "order", ord);
    json_object_object_add(o, "config", c);
    json_object_object_add(o, "step_s", json_object_new_double(p->step_s));
    json_object_object_add(o, "compute_s", json_object_new_double(p->compute_s));
    json_object_object_add(o, "bubble_s", json_object_new_double(p->bubble_s));
    json_object_object_add(o, "optimizer_s", json_object_new_double(p->optimizer_s));
    json_object_object_add(o, "straggler_s", json_object_new_double(p->straggler_s));
    json_object *cm = json_object_new_object();
    for (int d = 0; d < STRATA_DIM_COUNT; d++) {
        json_object *e = json_object_new_object();
        json_object_object_add(e, "total_s", json_object_new_double(p->comm[d].total_s));
        json_object_object_add(e, "exposed_s", json_object_new_double(p->comm[d].exposed_s));
        json_object_object_add(e, "bytes", json_object_new_double(p->comm[d].bytes));
        json_object_object_add(e, "level",
                               json_object_new_string(level_name(&pb->topo, p->comm[d].level)));
        json_object_object_add(cm, strata_dim_name((strata_dim_t)d), e);
    }
    json_object_object_add(o, "comm", cm);
    json_object_object_add(o, "microbatches", json_object_new_int(p->microbatches));
    json_object_object_add(o, "tokens_per_s", json_object_new_double(p->tokens_per_s));
    json_object_object_add(o, "tflops_per_accel", json_object_new_double(p->tflops_per_accel));
    json_object_object_add(o, "mfu", json_object_new_double(p->mfu));
    json_object_object_add(o, "hfu", json_object_new_double(p->hfu));
    json_object *m = json_object_new_object();
    json_object_object_add(m, "weights", json_object_new_double(p->mem.weights));
    json_object_object_add(m, "grads", json_object_new_double(p->mem.grads));
    json_object_object_add(m, "optimizer", json_object_new_double(p->mem.optimizer));
    json_object_object_add(m, "activations", json_object_new_double(p->mem.activations));
    json_object_object_add(m, "comm_buffers", json_object_new_double(p->mem.comm_buffers));
    json_object_object_add(m, "fragmentation", json_object_new_double(p->mem.fragmentation));
    json_object_object_add(m, "reserved", json_object_new_double(p->mem.reserved));
    json_object_object_add(m, "total", json_object_new_double(p->mem.total));
    json_object_object_add(m, "capacity", json_object_new_double(p->mem.capacity));
    json_object_object_add(m, "fits", json_object_new_boolean(p->mem.fits));
    json_object_object_add(o, "memory_bytes", m);
    return o;
}

static void print_json(json_object *o)
{
    puts(json_object_to_json_string_ext(o,
                                        JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
}

static int write_svg(const char *path, const strata_plan_problem_t *pb,
                     const strata_parallel_t *par, const strata_prediction_t *p)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return cmd_fail(NULL, "%s: cannot open for writing", path);
    strata_status_t rc = strata_plan_svg(pb, par, p, f);
    if (fclose(f) != 0 && rc >= 0)
        return cmd_fail(NULL, "%s: write failed", path);
    if (rc < 0)
        return cmd_fail(NULL, "%s", strata_last_error());
    fprintf(stderr, "timeline written to %s\n", path);
    return 0;
}

/* ---- subcommands -------------------------------------------------------------------------------
 */

static int do_predict(opts_t *o)
{
    strata_prediction_t p;
    if (o->par.dp < 1)
        return cmd_fail("give --dp, or --gpus divisible by tp*cp*pp",
                        "tp*cp*pp = %d does not divide %lld accelerators",
                        o->par.tp * o->par.cp * o->par.pp, o->pb.gpus);
    LIB(strata_plan_predict(&o->pb, &o->par, &p));
    if (o->json)
        print_json(pred_json(&o->pb, &o->par, &o->pb.train, &p));
    else
        print_pred(&o->pb, &o->par, &p);
    return o->svg ? write_svg(o->svg, &o->pb, &o->par, &p) : 0;
}

/* Why the winner wins: the terms in which it beats the runner-up most. */
static void explain(const strata_candidate_t *a, const strata_candidate_t *b, const char *whom)
{
    enum { NT = 8 };
    const char *names[NT] = {"compute", "bubble",  "TP comm",   "CP comm",
                             "PP comm", "DP comm", "optimizer", "straggler wait"};
    double da[NT] = {a->pred.compute_s,         a->pred.bubble_s,
                     a->pred.comm[0].exposed_s, a->pred.comm[1].exposed_s,
                     a->pred.comm[2].exposed_s, a->pred.comm[3].exposed_s,
                     a->pred.optimizer_s,       a->pred.straggler_s};
    double db[NT] = {b->pred.compute_s,         b->pred.bubble_s,
                     b->pred.comm[0].exposed_s, b->pred.comm[1].exposed_s,
                     b->pred.comm[2].exposed_s, b->pred.comm[3].exposed_s,
                     b->pred.optimizer_s,       b->pred.straggler_s};
    char cfg[160];
    strata_parallel_format(&b->par, cfg, sizeof cfg);
    printf("  vs %s (%s, mb %d, recompute %s, SP %s): %.1f%% faster;", whom, cfg,
           b->train.micro_batch, strata_recompute_name(b->train.recompute),
           b->train.sequence_parallel ? "on" : "off", 100 * (b->pred.step_s / a->pred.step_s - 1));
    int shown = 0;
    for (int k = 0; k < 3; k++) {
        int best = -1;
        double gain = 1e-9 * a->pred.step_s;
        for (int i = 0; i < NT; i++)
            if (db[i] - da[i] > gain) {
                gain = db[i] - da[i];
                best = i;
            }
        if (best < 0)
            break;
        printf("%s %s %.3f s less", shown ? "," : "", names[best], gain);
        db[best] = da[best];
        shown++;
    }
    for (int i = 0; i < NT; i++)
        if (da[i] - db[i] > 0.005 * a->pred.step_s) {
            printf("%s pays %.3f s more %s", shown ? "; it" : " it", da[i] - db[i], names[i]);
            shown++;
        }
    printf("\n");
}

static int do_search(opts_t *o)
{
    strata_search_result_t r;
    LIB(strata_plan_search(&o->pb, &o->so, &r));
    if (o->json) {
        json_object *root = json_object_new_object();
        json_object_object_add(root, "enumerated", json_object_new_int64(r.enumerated));
        json_object_object_add(root, "valid", json_object_new_int64(r.valid));
        json_object_object_add(root, "fitting", json_object_new_int64(r.fitting));
        json_object_object_add(root, "evaluated", json_object_new_int64(r.evaluated));
        json_object_object_add(root, "seconds", json_object_new_double(r.seconds));
        json_object_object_add(root, "configs_per_s", json_object_new_double(r.configs_per_s));
        json_object *arr = json_object_new_array();
        for (int i = 0; i < r.ntop; i++) {
            strata_plan_problem_t pb = o->pb;
            pb.train = r.top[i].train;
            json_object_array_add(arr,
                                  pred_json(&pb, &r.top[i].par, &r.top[i].train, &r.top[i].pred));
        }
        json_object_object_add(root, "top", arr);
        print_json(root);
    } else {
        printf("search: %s on %lld x %s (%s), batch %d x seq %d\n", o->pb.model.name, o->pb.gpus,
               o->pb.accel.name, o->pb.topo.name, o->pb.train.global_batch,
               o->pb.train.seq ? o->pb.train.seq : o->pb.model.seq);
        printf("%lld configurations enumerated, %lld valid, %lld fit in memory, %lld evaluated in "
               "%.3f s: %.0f configurations/s\n\n",
               r.enumerated, r.valid, r.fitting, r.evaluated, r.seconds, r.configs_per_s);
        printf("%-4s %-44s %3s %-9s %-3s %9s %7s %6s %8s %8s %8s %8s %8s %7s %7s\n", "rank",
               "configuration", "mb", "recompute", "sp", "step(s)", "MFU%", "mem", "compute",
               "bubble", "TP", "PP", "DP", "CP", "strag");
        for (int i = 0; i < r.ntop; i++) {
            const strata_candidate_t *c = &r.top[i];
            char cfg[160];
            strata_parallel_format(&c->par, cfg, sizeof cfg);
            printf("%-4d %-44s %3d %-9s %-3s %9.4f %7.2f %6.1f %8.3f %8.3f %8.3f %8.3f %8.3f "
                   "%7.3f %7.3f%s\n",
                   i + 1, cfg, c->train.micro_batch, strata_recompute_name(c->train.recompute),
                   c->train.sequence_parallel ? "on" : "off", c->pred.step_s, 100 * c->pred.mfu,
                   gib(c->pred.mem.total), c->pred.compute_s, c->pred.bubble_s,
                   c->pred.comm[0].exposed_s, c->pred.comm[2].exposed_s, c->pred.comm[3].exposed_s,
                   c->pred.comm[1].exposed_s, c->pred.straggler_s,
                   c->pred.mem.fits ? "" : " (no fit)");
        }
        printf("\nwhy #1 wins:\n");
        if (r.ntop > 1)
            explain(&r.top[0], &r.top[1], "#2");
        for (int i = 1; i < r.ntop; i++)
            if (r.top[i].par.tp != r.top[0].par.tp || r.top[i].par.pp != r.top[0].par.pp) {
                char who[64];
                snprintf(who, sizeof who, "#%d, the best other tp x pp", i + 1);
                explain(&r.top[0], &r.top[i], who);
                break;
            }
        printf("\nbest in detail:\n\n");
        strata_plan_problem_t pb = o->pb;
        pb.train = r.top[0].train;
        print_pred(&pb, &r.top[0].par, &r.top[0].pred);
    }
    int rc = 0;
    if (o->svg) {
        strata_plan_problem_t pb = o->pb;
        pb.train = r.top[0].train;
        rc = write_svg(o->svg, &pb, &r.top[0].par, &r.top[0].pred);
    }
    strata_search_result_free(&r);
    return rc;
}

static int load_tables(int argc, char **argv, int first, const char *data, strata_vtable_t *t,
                       bool *loo, bool *json, unsigned *mask, const char **write)
{
    int nfiles = 0;
    for (int i = first; i < argc; i++) {
        if (!strcmp(argv[i], "--no-loo"))
            *loo = false;
        else if (!strcmp(argv[i], "--json"))
            *json = true;
        else if (!strcmp(argv[i], "--data") && i + 1 < argc)
            i++;
        else if (!strcmp(argv[i], "--write") && i + 1 < argc)
            *write = argv[++i];
        else if (!strcmp(argv[i], "--fit") && i + 1 < argc) {
            *mask = 0;
            const char *v = argv[++i];
            while (*v) {
                size_t len = strcspn(v, ",");
                int k = 0;
                while (k < STRATA_CALIB_NPARAMS && (strlen(strata_calib_param_name(k)) != len ||
                                                    strncmp(v, strata_calib_param_name(k), len)))
                    k++;
                if (k == STRATA_CALIB_NPARAMS)
                    return cmd_fail(NULL, "--fit: unknown constant '%.*s'", (int)len, v);
                *mask |= 1u << k;
                v += len + (v[len] == ',');
            }
        } else if (!strncmp(argv[i], "--", 2)) {
            fprintf(stderr, "strata plan: unknown flag '%s'\n%s", argv[i], usage_text);
            return 2;
        } else {
            LIB(strata_vtable_load(argv[i], t));
            nfiles++;
        }
    }
    if (!nfiles) {
        static const char *const defaults[] = {"megatron_sc21_table1.csv",
                                               "megatron_sc21_zero3.csv", "megascale_headline.csv",
                                               "holdout_from_memory.csv"};
        for (int i = 0; i < 4; i++) {
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/validation/%s", data, defaults[i]);
            if (access(path, R_OK) == 0)
                LIB(strata_vtable_load(path, t));
        }
        if (!t->nrows)
            return cmd_fail("pass table files or --data DIR",
                            "no validation tables under %s/validation", data);
    }
    return 0;
}

static const char *data_flag(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--data"))
            return argv[i + 1];
    return NULL;
}

static const char *const metric_names[] = {"TFLOP/s (Eq.3)", "MFU %", "HFU %", "model TFLOP/s",
                                           "tokens/s"};

/* Writes the constants to `path` (when given). */
static int write_calib(const char *path, const strata_calib_t *c)
{
    if (!path)
        return 0;
    FILE *f = fopen(path, "w");
    if (!f)
        return cmd_fail(NULL, "%s: cannot open for writing", path);
    strata_calib_write_json(c, f);
    if (fclose(f) != 0)
        return cmd_fail(NULL, "%s: write failed", path);
    return 0;
}

static void print_calib(const char *title, const strata_calib_t *c, unsigned mask)
{
    printf("%s:", title);
    for (int i = 0; i < STRATA_CALIB_NPARAMS; i++)
        printf(" %s=%.4g%s", strata_calib_param_name(i),
               *strata_calib_param((strata_calib_t *)c, i), mask & (1u << i) ? "" : "(fixed)");
    printf("\n");
}

static json_object *vreport_json(const strata_vtable_t *t, const strata_vreport_t *r, bool loo)
{
    json_object *root = json_object_new_object(), *rows = json_object_new_array();
    for (int i = 0; i < t->nrows; i++) {
        const strata_vrow_t *row = &t->rows[i];
        const strata_vresult_t *v = &r->rows[i];
        json_object *o = json_object_new_object();
        json_object_object_add(o, "id", json_object_new_string(row->id));
        json_object_object_add(o, "source", json_object_new_string(row->source));
        json_object_object_add(o, "metric", json_object_new_string(metric_names[row->metric]));
        json_object_object_add(o, "measured", json_object_new_double(row->measured));
        json_object_object_add(o, "calibrated_on", json_object_new_boolean(row->calibrate));
        json_object *st = json_object_new_object();
        for (int s = 0; s < STRATA_VSTAGE_COUNT; s++) {
            json_object *e = json_object_new_object();
            json_object_object_add(e, "predicted", json_object_new_double(v->predicted[s]));
            json_object_object_add(e, "error", json_object_new_double(v->error[s]));
            json_object_object_add(e, "memory_bytes", json_object_new_double(v->mem_bytes[s]));
            json_object_object_add(e, "fits", json_object_new_boolean(v->fits[s]));
            json_object_object_add(st, strata_vstage_name((strata_vstage_t)s), e);
        }
        json_object_object_add(o, "stages", st);
        json_object_array_add(rows, o);
    }
    json_object_object_add(root, "rows", rows);
    json_object_object_add(root, "leave_one_out", json_object_new_boolean(loo));
    json_object *sum = json_object_new_object();
    for (int s = 0; s < STRATA_VSTAGE_COUNT; s++) {
        json_object *e = json_object_new_object(), *c = json_object_new_object();
        json_object_object_add(e, "mae_calibration_rows",
                               json_object_new_double(r->mae_calibration[s]));
        json_object_object_add(e, "mae_held_out_rows", json_object_new_double(r->mae_held_out[s]));
        json_object_object_add(e, "mae_all_rows", json_object_new_double(r->mae_all[s]));
        for (int i = 0; i < STRATA_CALIB_NPARAMS; i++)
            json_object_object_add(
                c, strata_calib_param_name(i),
                json_object_new_double(*strata_calib_param((strata_calib_t *)&r->fit[s], i)));
        json_object_object_add(e, "calibration", c);
        json_object_object_add(sum, strata_vstage_name((strata_vstage_t)s), e);
    }
    json_object_object_add(root, "stages", sum);
    return root;
}

static void vreport_print(const strata_vtable_t *t, const strata_vreport_t *r, bool loo,
                          unsigned mask)
{
    const int full = STRATA_VSTAGE_COUNT - 1;
    printf("error of each row %s, as each group of terms is added (docs/plan.md):\n\n",
           loo ? "out of sample (calibration rows: leave-one-out)" : "in sample");
    printf("%-24s %-14s %9s %9s |", "id", "metric", "measured", "predicted");
    for (int s = 0; s < STRATA_VSTAGE_COUNT; s++)
        printf(" %7s", strata_vstage_name((strata_vstage_t)s));
    printf(" | memory GiB base > all\n");
    for (int i = 0; i < t->nrows; i++) {
        const strata_vrow_t *row = &t->rows[i];
        const strata_vresult_t *v = &r->rows[i];
        printf("%-24s %-14s %9.1f %9.1f |", row->id, metric_names[row->metric], row->measured,
               v->predicted[full]);
        for (int s = 0; s < STRATA_VSTAGE_COUNT; s++)
            printf(" %+6.1f%%", 100 * v->error[s]);
        printf(" | %5.1f%s > %5.1f%s%s\n", gib(v->mem_bytes[0]), v->fits[0] ? " " : "!",
               gib(v->mem_bytes[full]), v->fits[full] ? " " : "!",
               row->calibrate ? "" : "  (held out)");
    }
    printf("\n(! = predicted not to fit in the accelerator's memory)\n\n%-32s",
           "mean absolute error");
    for (int s = 0; s < STRATA_VSTAGE_COUNT; s++)
        printf(" %8s", strata_vstage_name((strata_vstage_t)s));
    printf("\n");
    const struct {
        const char *what;
        int n;
        const double *mae;
    } lines[] = {
        {loo ? "calibration rows, LOO" : "calibration rows", r->n_calibration, r->mae_calibration},
        {"held-out rows", r->n_held_out, r->mae_held_out},
        {"all rows", r->n_calibration + r->n_held_out, r->mae_all}};
    for (int k = 0; k < 3; k++) {
        if (!lines[k].n)
            continue;
        char label[64];
        snprintf(label, sizeof label, "  %s (%d)", lines[k].what, lines[k].n);
        printf("%-32s", label);
        for (int s = 0; s < STRATA_VSTAGE_COUNT; s++)
            printf(" %7.2f%%", 100 * lines[k].mae[s]);
        printf("\n");
    }
    int refused[2] = {0, 0};
    for (int i = 0; i < t->nrows; i++) {
        refused[0] += !r->rows[i].fits[0];
        refused[1] += !r->rows[i].fits[full];
    }
    printf("\nbefore (base) -> after (all terms): %.2f%% -> %.2f%% mean absolute error over all %d "
           "rows; published configurations refused for memory: %d -> %d\n",
           100 * r->mae_all[0], 100 * r->mae_all[full], r->n_calibration + r->n_held_out,
           refused[0], refused[1]);
    print_calib("calibration of the full model (fitted now on the calibration rows)", &r->fit[full],
                mask);
}

static int do_validate(int argc, char **argv)
{
    strata_vtable_t t = {0};
    bool loo = true, json = false;
    unsigned mask = STRATA_CALIB_FIT_DEFAULT;
    const char *write = NULL;
    int rc = load_tables(argc, argv, 2, find_data(data_flag(argc, argv)), &t, &loo, &json, &mask,
                         &write);
    if (rc) {
        strata_vtable_free(&t);
        return rc;
    }
    strata_calib_t start = strata_calib_default();
    strata_vreport_t r;
    if (strata_validate(&t, mask, &start, loo, &r) < 0) {
        strata_vtable_free(&t);
        return cmd_fail(NULL, "%s", strata_last_error());
    }
    if (json)
        print_json(vreport_json(&t, &r, loo));
    else
        vreport_print(&t, &r, loo, mask);
    rc = write_calib(write, &r.fit[STRATA_VSTAGE_COUNT - 1]);
    strata_vreport_free(&r);
    strata_vtable_free(&t);
    return rc;
}

/* `strata plan calibrate`: fits the full model's constants on the calibration rows and shows
 * every row under them (in sample). */
static int do_calibrate(int argc, char **argv)
{
    strata_vtable_t t = {0};
    bool loo = true, json = false;
    unsigned mask = STRATA_CALIB_FIT_DEFAULT;
    const char *write = NULL;
    int rc = load_tables(argc, argv, 2, find_data(data_flag(argc, argv)), &t, &loo, &json, &mask,
                         &write);
    if (rc) {
        strata_vtable_free(&t);
        return rc;
    }
    strata_calib_t start = strata_calib_default(), fit;
    double mape = 0;
    if (strata_calib_fit(&t, -1, mask, &start, &fit, &mape) < 0) {
        strata_vtable_free(&t);
        return cmd_fail(NULL, "%s", strata_last_error());
    }
    json_object *rows = json ? json_object_new_array() : NULL;
    if (!json)
        printf("%-26s %-16s %9s %9s %8s\n", "id", "metric", "measured", "predicted", "error");
    for (int i = 0; i < t.nrows; i++) {
        const strata_vrow_t *row = &t.rows[i];
        double v = 0;
        if (strata_vrow_predict(row, &fit, &v, NULL) < 0) {
            json_object_put(rows);
            strata_vtable_free(&t);
            return cmd_fail(NULL, "%s", strata_last_error());
        }
        if (json) {
            json_object *o = json_object_new_object();
            json_object_object_add(o, "id", json_object_new_string(row->id));
            json_object_object_add(o, "measured", json_object_new_double(row->measured));
            json_object_object_add(o, "predicted", json_object_new_double(v));
            json_object_object_add(o, "calibrated_on", json_object_new_boolean(row->calibrate));
            json_object_array_add(rows, o);
        } else {
            printf("%-26s %-16s %9.1f %9.1f %+7.1f%%%s\n", row->id, metric_names[row->metric],
                   row->measured, v, 100 * (v / row->measured - 1),
                   row->calibrate ? "" : "  (held out)");
        }
    }
    if (json) {
        json_object *root = json_object_new_object(), *c = json_object_new_object();
        json_object_object_add(root, "rows", rows);
        json_object_object_add(root, "mape_calibration_rows", json_object_new_double(mape));
        for (int i = 0; i < STRATA_CALIB_NPARAMS; i++)
            json_object_object_add(c, strata_calib_param_name(i),
                                   json_object_new_double(*strata_calib_param(&fit, i)));
        json_object_object_add(root, "calibration", c);
        print_json(root);
    } else {
        printf("\nmean absolute percentage error on the calibration rows (in sample): %.2f%%\n",
               100 * mape);
        print_calib("calibration (fitted now)", &fit, mask);
    }
    rc = write_calib(write, &fit);
    strata_vtable_free(&t);
    return rc;
}

static int do_cpu(int argc, char **argv)
{
    int threads = 1;
    const char *write = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (int_arg("--threads", argv[++i], 1, &threads))
                return 1;
        } else if (!strcmp(argv[i], "--write") && i + 1 < argc)
            write = argv[++i];
        else
            return fprintf(stderr, "%s", usage_text), 2;
    }
    strata_accel_t a;
    LIB(strata_accel_measure_cpu(threads, &a));
    strata_accel_write_json(&a, stdout);
    if (write) {
        FILE *f = fopen(write, "w");
        if (!f)
            return cmd_fail(NULL, "%s: cannot open for writing", write);
        strata_accel_write_json(&a, f);
        fclose(f);
    }
    return 0;
}

static int do_presets(int argc, char **argv)
{
    if (argc >= 4 && !strcmp(argv[1], "show")) {
        if (!strcmp(argv[2], "model")) {
            strata_model_t m;
            LIB(strata_model_preset(argv[3], &m));
            strata_model_write_json(&m, stdout);
        } else if (!strcmp(argv[2], "accel")) {
            strata_accel_t a;
            LIB(strata_accel_preset(argv[3], &a));
            strata_accel_write_json(&a, stdout);
        } else if (!strcmp(argv[2], "cluster")) {
            strata_topo_t t;
            LIB(strata_topo_preset(argv[3], &t));
            strata_topo_write_json(&t, stdout);
        } else {
            return fprintf(stderr, "%s", usage_text), 2;
        }
        return 0;
    }
    printf("models:\n");
    for (int i = 0; i < strata_model_preset_count(); i++) {
        strata_model_t m;
        strata_model_preset(strata_model_preset_name(i), &m);
        printf("  %-16s %7.1fB  %3d layers, hidden %5d, %3d heads (%d KV), seq %d\n", m.name,
               strata_model_params(&m) / 1e9, m.layers, m.hidden, m.heads, m.kv_heads, m.seq);
    }
    printf("accelerators:\n");
    for (int i = 0; i < strata_accel_preset_count(); i++) {
        strata_accel_t a;
        strata_accel_preset(strata_accel_preset_name(i), &a);
        printf(
            "  %-12s %7.1f TFLOP/s 16-bit, %6.1f GiB at %6.0f GB/s, large-GEMM efficiency %.2f\n",
            a.name, a.peak_flops_16 / 1e12, gib(a.mem_bytes), a.mem_bw_Bps / 1e9, a.gemm_eff);
    }
    printf("clusters:\n");
    for (int i = 0; i < strata_topo_preset_count(); i++)
        printf("  %-18s %s\n", strata_topo_preset_name(i), strata_topo_preset_summary(i));
    return 0;
}

int cmd_plan(int argc, char **argv)
{
    const char *sub = argc > 1 ? argv[1] : "--help";
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        fputs(usage_text, argc > 1 ? stdout : stderr);
        return argc > 1 ? 0 : 2;
    }
    if (!strcmp(sub, "validate"))
        return do_validate(argc, argv);
    if (!strcmp(sub, "calibrate"))
        return do_calibrate(argc, argv);
    if (!strcmp(sub, "calibrate-cpu"))
        return do_cpu(argc, argv);
    if (!strcmp(sub, "presets") || !strcmp(sub, "show"))
        return do_presets(argc, argv);
    if (!strcmp(sub, "schedule"))
        return cmd_plan_schedule(argc, argv);
    bool search = !strcmp(sub, "search");
    int first = search || !strcmp(sub, "predict") ? 2 : 1;
    if (first == 1 && strncmp(sub, "--", 2)) {
        fprintf(stderr, "strata plan: unknown subcommand '%s'\n%s", sub, usage_text);
        return 2;
    }
    opts_t *o = malloc(sizeof *o);
    if (!o)
        return cmd_fail(NULL, "out of memory");
    int rc = parse(argc, argv, first, o);
    if (rc == 3)
        rc = 0;
    else if (!rc)
        rc = search ? do_search(o) : do_predict(o);
    free(o);
    return rc;
}
