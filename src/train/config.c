/* The training configuration: defaults, the JSON file form (unknown keys refused, errors at
 * file:line) and the JSON text stored in checkpoints. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "base/json.h"
#include "strata/netmodel.h"
#include "strata/train.h"

strata_train_config_t strata_train_config_default(void)
{
    strata_train_config_t c;
    memset(&c, 0, sizeof c);
    c.model = strata_gpt_config_default();
    c.val_fraction = 0.1;
    c.batch = 8;
    c.seq = 64;
    c.steps = 100;
    c.seed = 1;
    c.optim = strata_optim_config_default();
    c.optim.beta2 = 0.95f;
    c.optim.weight_decay = 0.1f;
    c.lr = 1e-3f;
    c.min_lr = 1e-4f;
    c.warmup = 10;
    c.grad_clip = 1.0f;
    c.ckpt_keep = 2;
    c.trace_step = 2;
    c.eval_batches = 4;
    c.prefetch = 2;
    c.straggler_window = 20;
    c.tp = 1;
    c.tp_overlap = true;
    c.pp = 1;
    c.vp = 1;
    c.schedule = STRATA_SCHED_1F1B;
    c.progress = true;
    c.progress_every = 5;
    c.precision = STRATA_PREC_FP32;
    return c;
}

strata_status_t strata_train_config_load(const char *path, strata_train_config_t *c)
{
    st_json_doc_t doc = {0};
    ST_TRY(st_json_load_file(path, &doc));
    strata_status_t rc = STRATA_OK;
    static const char *const known[] = {
        "model", "data", "val_fraction", "batch", "seq", "steps", "seed", "optimizer", "lr",
        "min_lr", "warmup", "weight_decay", "beta1", "beta2", "eps", "grad_clip", "threads",
        "ckpt_dir", "ckpt_every", "ckpt_keep", "metrics", "trace", "trace_step", "eval_every",
        "eval_batches", "zero", "hpz", "tiers", "qwz", "qgz", "grad_dtype", "bucket", "nonfinite", "mem_ckpt_dir",
        "mem_ckpt_every", "straggler_window", "tp", "sp", "order", "tp_overlap", "pp", "vp",
        "schedule", "micro_batch", "pp_layers", "pp_svg", "harvest", "progress_every",
        "optimizer_in_pool", "precision", "prefetch", NULL};
    json_object *r = doc.root, *model;
    if (!json_object_is_type(r, json_type_object)) {
        rc = st_error(STRATA_ERR_PARSE, "%s:1: expected a JSON object", path);
        goto out;
    }
    ST_TRY_GOTO(st_json_check_keys(&doc, r, "training config", known), rc, out);
    if (json_object_object_get_ex(r, "model", &model)) {
        // Reuse the model reader, then translate its message's line to this file.
        const char *txt = json_object_to_json_string(model);
        if (strata_gpt_config_from_json(txt, path, &c->model) < 0) {
            rc = st_error(STRATA_ERR_PARSE, "%s:%d: in \"model\": %s", path,
                          st_json_key_line(&doc, "model", 0), strata_last_error());
            goto out;
        }
    }
    int i;
    double d;
    char s[64];
    ST_TRY_GOTO(st_json_get_string(&doc, r, "data", 0, false, c->data, sizeof c->data), rc, out);
    ST_TRY_GOTO(st_json_get_double(&doc, r, "val_fraction", 0, false, 0, 0.5, &c->val_fraction),
                rc, out);
    ST_TRY_GOTO(st_json_get_double(&doc, r, "progress_every", 0, false, 0, 86400,
                                   &c->progress_every), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, r, "batch", 0, false, 1, 1 << 20, &c->batch), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, r, "seq", 0, false, 1, 65536, &c->seq), rc, out);
#define GET_I64(key, lo, hi, field)                                                                \
    i = -1;                                                                                        \
    ST_TRY_GOTO(st_json_get_int(&doc, r, key, 0, false, lo, hi, &i), rc, out);                     \
    if (i >= 0)                                                                                    \
    field = i
#define GET_F(key, lo, hi, field)                                                                  \
    d = -1;                                                                                        \
    ST_TRY_GOTO(st_json_get_double(&doc, r, key, 0, false, lo, hi, &d), rc, out);                  \
    if (d >= 0)                                                                                    \
    field = (float)d
    GET_I64("steps", 1, 1 << 30, c->steps);
    GET_I64("seed", 0, 1 << 30, c->seed);
    GET_F("lr", 0, 10, c->lr);
    GET_F("min_lr", 0, 10, c->min_lr);
    GET_I64("warmup", 0, 1 << 30, c->warmup);
    GET_F("weight_decay", 0, 10, c->optim.weight_decay);
    GET_F("beta1", 0, 0.999999, c->optim.beta1);
    GET_F("beta2", 0, 0.999999, c->optim.beta2);
    GET_F("eps", 1e-30, 1, c->optim.eps);
    GET_F("grad_clip", 0, 1e9, c->grad_clip);
    GET_I64("threads", 0, 1024, c->threads);
    GET_I64("ckpt_every", 0, 1 << 30, c->ckpt_every);
    GET_I64("ckpt_keep", 1, 1000, c->ckpt_keep);
    GET_I64("mem_ckpt_every", 0, 1 << 30, c->mem_ckpt_every);
    GET_I64("trace_step", 1, 1 << 30, c->trace_step);
    GET_I64("eval_every", 0, 1 << 30, c->eval_every);
    GET_I64("eval_batches", 1, 1 << 20, c->eval_batches);
    GET_I64("prefetch", 0, 64, c->prefetch);
    GET_I64("straggler_window", 0, 1 << 20, c->straggler_window);
    GET_I64("zero", 0, 3, c->zero);
    GET_I64("tiers", 0, 3, c->tiers);
    GET_I64("bucket", 0, 1 << 30, c->bucket);
    GET_I64("tp", 1, 1024, c->tp);
    GET_I64("pp", 1, 1024, c->pp);
    GET_I64("vp", 1, STRATA_GPT_MAX_CHUNKS, c->vp);
    GET_I64("micro_batch", 0, 1 << 20, c->micro_batch);
#undef GET_I64
#undef GET_F
    ST_TRY_GOTO(st_json_get_string(&doc, r, "ckpt_dir", 0, false, c->ckpt_dir, sizeof c->ckpt_dir),
                rc, out);
    ST_TRY_GOTO(st_json_get_string(&doc, r, "mem_ckpt_dir", 0, false, c->mem_ckpt_dir,
                                   sizeof c->mem_ckpt_dir), rc, out);
    ST_TRY_GOTO(st_json_get_string(&doc, r, "metrics", 0, false, c->metrics, sizeof c->metrics),
                rc, out);
    ST_TRY_GOTO(st_json_get_string(&doc, r, "trace", 0, false, c->trace, sizeof c->trace), rc, out);
    ST_TRY_GOTO(st_json_get_string(&doc, r, "hpz", 0, false, c->hpz, sizeof c->hpz), rc, out);
    ST_TRY_GOTO(st_json_get_bool(&doc, r, "qwz", 0, false, &c->qwz), rc, out);
    ST_TRY_GOTO(st_json_get_bool(&doc, r, "qgz", 0, false, &c->qgz), rc, out);
    ST_TRY_GOTO(st_json_get_bool(&doc, r, "sp", 0, false, &c->sp), rc, out);
    ST_TRY_GOTO(st_json_get_bool(&doc, r, "tp_overlap", 0, false, &c->tp_overlap), rc, out);
    ST_TRY_GOTO(st_json_get_bool(&doc, r, "optimizer_in_pool", 0, false, &c->optimizer_in_pool), rc,
                out);
    ST_TRY_GOTO(st_json_get_string(&doc, r, "order", 0, false, c->order, sizeof c->order), rc, out);
    ST_TRY_GOTO(st_json_get_string(&doc, r, "pp_layers", 0, false, c->pp_layers,
                                   sizeof c->pp_layers), rc, out);
    ST_TRY_GOTO(st_json_get_string(&doc, r, "pp_svg", 0, false, c->pp_svg, sizeof c->pp_svg), rc,
                out);
    ST_TRY_GOTO(st_json_get_string(&doc, r, "harvest", 0, false, c->harvest, sizeof c->harvest), rc,
                out);
    s[0] = 0;
    ST_TRY_GOTO(st_json_get_string(&doc, r, "precision", 0, false, s, sizeof s), rc, out);
    if (s[0] && (strata_precision_parse(s, &c->precision) < 0 ||
                 (c->precision != STRATA_PREC_FP32 && c->precision != STRATA_PREC_BF16))) {
        rc = st_error(STRATA_ERR_PARSE, "%s:%d: \"precision\": expected fp32 or bf16, got '%s'",
                      path, st_json_key_line(&doc, "precision", 0), s);
        goto out;
    }
    s[0] = 0;
    ST_TRY_GOTO(st_json_get_string(&doc, r, "grad_dtype", 0, false, s, sizeof s), rc, out);
    if (s[0] && strata_grad_dtype_parse(s, &c->bf16_grads) < 0) {
        rc = st_error(STRATA_ERR_PARSE, "%s:%d: \"grad_dtype\": %s", path,
                      st_json_key_line(&doc, "grad_dtype", 0), strata_last_error());
        goto out;
    }
    s[0] = 0;
    ST_TRY_GOTO(st_json_get_string(&doc, r, "schedule", 0, false, s, sizeof s), rc, out);
    if (s[0] && strata_schedule_parse(s, &c->schedule) < 0) {
        rc = st_error(STRATA_ERR_PARSE, "%s:%d: \"schedule\": %s", path,
                      st_json_key_line(&doc, "schedule", 0), strata_last_error());
        goto out;
    }
    strata_dim_t order[STRATA_DIM_COUNT];
    if (c->order[0] && strata_order_parse(c->order, order) < 0) {
        rc = st_error(STRATA_ERR_PARSE, "%s:%d: \"order\": %s", path,
                      st_json_key_line(&doc, "order", 0), strata_last_error());
        goto out;
    }
    s[0] = 0;
    ST_TRY_GOTO(st_json_get_string(&doc, r, "nonfinite", 0, false, s, sizeof s), rc, out);
    if (s[0] && strata_nonfinite_parse(s, &c->nonfinite) < 0) {
        rc = st_error(STRATA_ERR_PARSE, "%s:%d: \"nonfinite\" must be \"stop\" or \"skip\", got "
                      "\"%s\"", path, st_json_key_line(&doc, "nonfinite", 0), s);
        goto out;
    }
    s[0] = 0;
    ST_TRY_GOTO(st_json_get_string(&doc, r, "optimizer", 0, false, s, sizeof s), rc, out);
    if (!strcmp(s, "adamw"))
        c->optim.kind = STRATA_OPTIM_ADAMW;
    else if (!strcmp(s, "lamb"))
        c->optim.kind = STRATA_OPTIM_LAMB;
    else if (s[0]) {
        rc = st_error(STRATA_ERR_PARSE, "%s:%d: \"optimizer\" must be \"adamw\" or \"lamb\", got "
                      "\"%s\"", path, st_json_key_line(&doc, "optimizer", 0), s);
        goto out;
    }
out:
    st_json_free(&doc);
    return rc;
}

strata_status_t strata_grad_dtype_parse(const char *text, bool *bf16)
{
    if (!strcmp(text, "fp32"))
        *bf16 = false;
    else if (!strcmp(text, "bf16"))
        *bf16 = true;
    else
        return st_error(STRATA_ERR_INVALID_ARG, "grad_dtype: expected fp32 or bf16, got '%s'", text);
    return STRATA_OK;
}

strata_status_t strata_nonfinite_parse(const char *text, strata_nonfinite_t *out)
{
    if (!strcmp(text, "stop"))
        *out = STRATA_NONFINITE_STOP;
    else if (!strcmp(text, "skip"))
        *out = STRATA_NONFINITE_SKIP;
    else
        return st_error(STRATA_ERR_INVALID_ARG, "nonfinite: expected stop or skip, got '%s'", text);
    return STRATA_OK;
}

int strata_train_config_to_json(const strata_train_config_t *c, char *buf, size_t size)
{
    char model[1024], hpz[6 * sizeof c->hpz + 3], order[6 * sizeof c->order + 3];
    char ppl[6 * sizeof c->pp_layers + 3];
    if (strata_gpt_config_to_json(&c->model, model, sizeof model) < 0)
        return -1;
    st_json_quote(c->hpz, hpz, sizeof hpz); // from a file or the command line: may hold a quote
    st_json_quote(c->order, order, sizeof order);
    st_json_quote(c->pp_layers, ppl, sizeof ppl);
    int n = snprintf(buf, size,
                     "{\"model\":%s,\"batch\":%d,\"seq\":%d,\"steps\":%" PRId64 ",\"seed\":%" PRIu64
                     ",\"optimizer\":\"%s\",\"lr\":%.9g,\"min_lr\":%.9g,\"warmup\":%" PRId64
                     ",\"weight_decay\":%.9g,\"beta1\":%.9g,\"beta2\":%.9g,\"eps\":%.9g,"
                     "\"grad_clip\":%.9g,\"val_fraction\":%.9g,\"zero\":%d,\"hpz\":%s,"
                     "\"tiers\":%d,\"qwz\":%s,\"qgz\":%s,\"grad_dtype\":\"%s\",\"tp\":%d,\"sp\":%s,\"order\":%s,"
                     "\"tp_overlap\":%s,\"pp\":%d,\"vp\":%d,\"schedule\":\"%s\","
                     "\"micro_batch\":%d,\"pp_layers\":%s,\"optimizer_in_pool\":%s,"
                     "\"precision\":\"%s\"}",
                     model, c->batch, c->seq, c->steps, c->seed,
                     c->optim.kind == STRATA_OPTIM_LAMB ? "lamb" : "adamw", (double)c->lr,
                     (double)c->min_lr, c->warmup, (double)c->optim.weight_decay,
                     (double)c->optim.beta1, (double)c->optim.beta2, (double)c->optim.eps,
                     (double)c->grad_clip, c->val_fraction, c->zero, hpz, c->tiers,
                     c->qwz ? "true" : "false", c->qgz ? "true" : "false",
                     c->bf16_grads ? "bf16" : "fp32", c->tp,
                     c->sp ? "true" : "false", order, c->tp_overlap ? "true" : "false", c->pp,
                     c->vp, strata_schedule_name(c->schedule), c->micro_batch, ppl,
                     c->optimizer_in_pool ? "true" : "false", strata_precision_name(c->precision));
    return (n < 0 || (size_t)n >= size) ? -1 : n;
}

strata_status_t strata_train_config_apply_plan(const char *path, strata_train_config_t *c,
                                               int *ranks)
{
    st_json_doc_t doc = {0};
    ST_TRY(st_json_load_file(path, &doc));
    strata_status_t rc = STRATA_OK;
    json_object *cfg = NULL, *top;
    // strata plan --json (predict): {"config": {...}}; strata plan search --json: {"top": [{...}]}.
    if (json_object_object_get_ex(doc.root, "top", &top) &&
        json_object_is_type(top, json_type_array) && json_object_array_length(top) > 0)
        json_object_object_get_ex(json_object_array_get_idx(top, 0), "config", &cfg);
    else
        json_object_object_get_ex(doc.root, "config", &cfg);
    if (!json_object_is_type(cfg, json_type_object)) {
        rc = st_error(STRATA_ERR_PARSE, "%s:1: expected the output of strata plan --json (a "
                      "\"config\" object, or \"top\" with one)", path);
        goto out;
    }
    int tp = 1, cp = 1, pp = 1, vp = 1, dp = 1, zero = c->zero, micro = 1;
    bool sp = false;
    char sched[32] = "1f1b";
    ST_TRY_GOTO(st_json_get_int(&doc, cfg, "tp", 0, true, 1, 1024, &tp), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, cfg, "cp", 0, false, 1, 1024, &cp), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, cfg, "pp", 0, true, 1, 1024, &pp), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, cfg, "vp", 0, false, 1, STRATA_GPT_MAX_CHUNKS, &vp), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, cfg, "dp", 0, true, 1, 1 << 24, &dp), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, cfg, "zero", 0, false, 0, 3, &zero), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, cfg, "micro_batch", 0, false, 1, 1 << 20, &micro), rc, out);
    ST_TRY_GOTO(st_json_get_bool(&doc, cfg, "sequence_parallel", 0, false, &sp), rc, out);
    ST_TRY_GOTO(st_json_get_string(&doc, cfg, "schedule", 0, false, sched, sizeof sched), rc, out);
    if (cp > 1) {
        rc = st_error(STRATA_ERR_INVALID_ARG, "%s:%d: the plan uses context parallelism (cp %d), "
                      "which strata train does not run yet; plan with --max-cp 1", path,
                      st_json_key_line(&doc, "cp", 0), cp);
        goto out;
    }
    strata_schedule_t kind;
    if (strata_schedule_parse(sched, &kind) < 0) {
        rc = st_error(STRATA_ERR_PARSE, "%s:%d: \"schedule\": %s", path,
                      st_json_key_line(&doc, "schedule", 0), strata_last_error());
        goto out;
    }
    json_object *order;
    c->order[0] = 0;
    if (json_object_object_get_ex(cfg, "order", &order) && json_object_is_type(order, json_type_array))
        for (size_t i = 0; i < json_object_array_length(order); i++) {
            const char *d = json_object_get_string(json_object_array_get_idx(order, i));
            size_t n = strlen(c->order);
            snprintf(c->order + n, sizeof c->order - n, "%s%s", i ? "," : "", d ? d : "?");
        }
    strata_dim_t parsed[STRATA_DIM_COUNT];
    if (c->order[0] && strata_order_parse(c->order, parsed) < 0) {
        rc = st_error(STRATA_ERR_PARSE, "%s:%d: \"order\": %s", path,
                      st_json_key_line(&doc, "order", 0), strata_last_error());
        goto out;
    }
    c->tp = tp;
    c->pp = pp;
    c->vp = vp;
    c->zero = zero;
    c->sp = sp && tp > 1;
    c->schedule = kind;
    c->micro_batch = micro;
    *ranks = tp * pp * dp;
out:
    st_json_free(&doc);
    return rc;
}
