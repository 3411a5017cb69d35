/* Model, training, accelerator and calibration files: JSON read with "file:line: expected ..."
 * messages (unknown fields are errors, so a typo is not silently ignored) and written back in the
 * same format. Field names and units are documented in docs/plan.md. */
#include "base/base.h"
#include "plan/plan_internal.h"
#include "base/json.h"

#include <stdio.h>
#include <string.h>

#define BIG (1 << 30)

static strata_status_t model_from(const st_json_doc_t *d, strata_model_t *m)
{
    static const char *const keys[] = {
        "name", "layers", "hidden", "heads",           "kv_heads", "ffn",     "vocab",   "seq",
        "mlp",  "norm",   "bias",   "tied_embeddings", "position", "dropout", "comment", NULL};
    json_object *o = d->root;
    ST_TRY(st_json_check_keys(d, o, "model", keys));
    *m = strata_model_gpt("model", 1, 1, 1, 1, 1);
    ST_TRY(st_json_get_string(d, o, "name", 0, false, m->name, sizeof m->name));
    // Each size within its STRATA_MODEL_MAX_*, so that no product of them overflows (the default
    // ffn, 4 x hidden, did for a hidden of 2^30: found by fuzzing).
    ST_TRY(st_json_get_int(d, o, "layers", 0, true, 1, STRATA_MODEL_MAX_LAYERS, &m->layers));
    ST_TRY(st_json_get_int(d, o, "hidden", 0, true, 1, STRATA_MODEL_MAX_HIDDEN, &m->hidden));
    ST_TRY(st_json_get_int(d, o, "heads", 0, true, 1, m->hidden, &m->heads));
    m->kv_heads = m->heads;
    m->ffn = 4 * m->hidden;
    ST_TRY(st_json_get_int(d, o, "kv_heads", 0, false, 1, m->heads, &m->kv_heads));
    ST_TRY(st_json_get_int(d, o, "ffn", 0, false, 1, STRATA_MODEL_MAX_FFN, &m->ffn));
    ST_TRY(st_json_get_int(d, o, "vocab", 0, true, 1, STRATA_MODEL_MAX_VOCAB, &m->vocab));
    ST_TRY(st_json_get_int(d, o, "seq", 0, true, 1, STRATA_MODEL_MAX_SEQ, &m->seq));
    char s[32] = "gelu";
    ST_TRY(st_json_get_string(d, o, "mlp", 0, false, s, sizeof s));
    if (!strcmp(s, "gelu"))
        m->mlp = STRATA_MLP_GELU;
    else if (!strcmp(s, "swiglu"))
        m->mlp = STRATA_MLP_SWIGLU;
    else
        return st_error(STRATA_ERR_PARSE,
                        "%s:%d: expected \"mlp\" to be \"gelu\" or \"swiglu\", got "
                        "\"%s\"",
                        d->origin, st_json_key_line(d, "mlp", 0), s);
    snprintf(s, sizeof s, "layernorm");
    ST_TRY(st_json_get_string(d, o, "norm", 0, false, s, sizeof s));
    if (strcmp(s, "layernorm") && strcmp(s, "rmsnorm"))
        return st_error(STRATA_ERR_PARSE,
                        "%s:%d: expected \"norm\" to be \"layernorm\" or "
                        "\"rmsnorm\", got \"%s\"",
                        d->origin, st_json_key_line(d, "norm", 0), s);
    m->rmsnorm = !strcmp(s, "rmsnorm");
    snprintf(s, sizeof s, "learned");
    ST_TRY(st_json_get_string(d, o, "position", 0, false, s, sizeof s));
    if (strcmp(s, "learned") && strcmp(s, "rotary"))
        return st_error(STRATA_ERR_PARSE,
                        "%s:%d: expected \"position\" to be \"learned\" or "
                        "\"rotary\", got \"%s\"",
                        d->origin, st_json_key_line(d, "position", 0), s);
    m->learned_pos = !strcmp(s, "learned");
    ST_TRY(st_json_get_bool(d, o, "bias", 0, false, &m->bias));
    ST_TRY(st_json_get_bool(d, o, "tied_embeddings", 0, false, &m->tied_embeddings));
    ST_TRY(st_json_get_bool(d, o, "dropout", 0, false, &m->dropout));
    strata_status_t rc = strata_model_validate(m);
    if (rc < 0)
        return st_error(STRATA_ERR_PARSE, "%s:1: %s", d->origin, strata_last_error());
    return STRATA_OK;
}

typedef strata_status_t (*from_fn)(const st_json_doc_t *, void *);

static strata_status_t load(const char *path, from_fn fn, void *out)
{
    st_json_doc_t d;
    ST_TRY(st_json_load_file(path, &d));
    strata_status_t rc = fn(&d, out);
    st_json_free(&d);
    return rc;
}

static strata_status_t model_from_v(const st_json_doc_t *d, void *out)
{
    return model_from(d, out);
}

strata_status_t strata_model_load(const char *path, strata_model_t *out)
{
    return load(path, model_from_v, out);
}

void strata_model_write_json(const strata_model_t *m, FILE *f)
{
    fprintf(f, "{\n  \"name\": ");
    st_json_write_string(f, m->name);
    fprintf(f,
            ",\n  \"layers\": %d,\n  \"hidden\": %d,\n  \"heads\": %d,\n"
            "  \"kv_heads\": %d,\n  \"ffn\": %d,\n  \"vocab\": %d,\n  \"seq\": %d,\n"
            "  \"mlp\": \"%s\",\n  \"norm\": \"%s\",\n  \"position\": \"%s\",\n  \"bias\": %s,\n"
            "  \"tied_embeddings\": %s,\n  \"dropout\": %s\n}\n",
            m->layers, m->hidden, m->heads, m->kv_heads, m->ffn, m->vocab, m->seq,
            m->mlp == STRATA_MLP_SWIGLU ? "swiglu" : "gelu", m->rmsnorm ? "rmsnorm" : "layernorm",
            m->learned_pos ? "learned" : "rotary", m->bias ? "true" : "false",
            m->tied_embeddings ? "true" : "false", m->dropout ? "true" : "false");
}

static strata_status_t enum_field(const st_json_doc_t *d, json_object *o, const char *key,
                                  strata_status_t (*parse)(const char *, void *), void *out)
{
    char s[32] = "";
    if (!json_object_object_get_ex(o, key, NULL))
        return STRATA_OK;
    ST_TRY(st_json_get_string(d, o, key, 0, false, s, sizeof s));
    if (parse(s, out) < 0)
        return st_error(STRATA_ERR_PARSE, "%s:%d: %s", d->origin, st_json_key_line(d, key, 0),
                        strata_last_error());
    return STRATA_OK;
}

static strata_status_t p_prec(const char *s, void *o)
{
    return strata_precision_parse(s, o);
}
static strata_status_t p_opt(const char *s, void *o)
{
    return strata_optimizer_parse(s, o);
}
static strata_status_t p_rc(const char *s, void *o)
{
    return strata_recompute_parse(s, o);
}

static strata_status_t training_from(const st_json_doc_t *d, void *out)
{
    static const char *const keys[] = {
        "global_batch",      "micro_batch",     "seq",        "precision", "optimizer", "recompute",
        "sequence_parallel", "flash_attention", "grad_bytes", "comment",   NULL};
    strata_training_t *t = out;
    json_object *o = d->root;
    ST_TRY(st_json_check_keys(d, o, "training", keys));
    *t = strata_training_default();
    ST_TRY(st_json_get_int(d, o, "global_batch", 0, true, 1, BIG, &t->global_batch));
    ST_TRY(st_json_get_int(d, o, "micro_batch", 0, false, 1, BIG, &t->micro_batch));
    ST_TRY(st_json_get_int(d, o, "seq", 0, false, 0, STRATA_MODEL_MAX_SEQ, &t->seq));
    ST_TRY(enum_field(d, o, "precision", p_prec, &t->precision));
    ST_TRY(enum_field(d, o, "optimizer", p_opt, &t->optimizer));
    ST_TRY(enum_field(d, o, "recompute", p_rc, &t->recompute));
    ST_TRY(st_json_get_bool(d, o, "sequence_parallel", 0, false, &t->sequence_parallel));
    ST_TRY(st_json_get_bool(d, o, "flash_attention", 0, false, &t->flash_attention));
    ST_TRY(st_json_get_int(d, o, "grad_bytes", 0, false, 0, 4, &t->grad_bytes));
    if (t->grad_bytes == 1 || t->grad_bytes == 3)
        return st_error(STRATA_ERR_PARSE, "%s:%d: expected \"grad_bytes\" 0, 2 or 4", d->origin,
                        st_json_key_line(d, "grad_bytes", 0));
    return STRATA_OK;
}

strata_status_t strata_training_load(const char *path, strata_training_t *out)
{
    return load(path, training_from, out);
}

static strata_status_t accel_from(const st_json_doc_t *d, void *out)
{
    static const char *const keys[] = {"name",
                                       "peak_tflops_16",
                                       "peak_tflops_32",
                                       "memory_GiB",
                                       "memory_bandwidth_GBps",
                                       "gemm_efficiency",
                                       "gemm_dim0",
                                       "reserved_GiB",
                                       "kernel_floor_us",
                                       "peak_tflops_8",
                                       "gemm_efficiency_8",
                                       "sms",
                                       "gemm_tile_m",
                                       "gemm_tile_n",
                                       "comment",
                                       NULL};
    strata_accel_t *a = out;
    json_object *o = d->root;
    ST_TRY(st_json_check_keys(d, o, "accelerator", keys));
    memset(a, 0, sizeof *a);
    double p16 = 0, p32 = 0, p8 = 0, mem = 0, bw = 0, res = 0, floor_us = 0;
    a->gemm_eff = 1;
    ST_TRY(st_json_get_string(d, o, "name", 0, false, a->name, sizeof a->name));
    ST_TRY(st_json_get_double(d, o, "peak_tflops_16", 0, true, 1e-9, 1e9, &p16));
    p32 = p16;
    ST_TRY(st_json_get_double(d, o, "peak_tflops_32", 0, false, 1e-9, 1e9, &p32));
    ST_TRY(st_json_get_double(d, o, "memory_GiB", 0, true, 1e-9, 1e9, &mem));
    ST_TRY(st_json_get_double(d, o, "memory_bandwidth_GBps", 0, true, 1e-9, 1e9, &bw));
    ST_TRY(st_json_get_double(d, o, "gemm_efficiency", 0, false, 1e-6, 1, &a->gemm_eff));
    ST_TRY(st_json_get_double(d, o, "gemm_dim0", 0, false, 0, 1e6, &a->gemm_dim0));
    ST_TRY(st_json_get_double(d, o, "reserved_GiB", 0, false, 0, 1e9, &res));
    ST_TRY(st_json_get_double(d, o, "kernel_floor_us", 0, false, 0, 1e9, &floor_us));
    ST_TRY(st_json_get_double(d, o, "peak_tflops_8", 0, false, 0, 1e9, &p8));
    ST_TRY(st_json_get_double(d, o, "gemm_efficiency_8", 0, false, 0, 1, &a->gemm_eff_8));
    ST_TRY(st_json_get_int(d, o, "sms", 0, false, 0, 1 << 20, &a->sms));
    ST_TRY(st_json_get_int(d, o, "gemm_tile_m", 0, false, 0, 1 << 16, &a->tile_m));
    ST_TRY(st_json_get_int(d, o, "gemm_tile_n", 0, false, 0, 1 << 16, &a->tile_n));
    const double GiB = 1024.0 * 1024.0 * 1024.0;
    a->peak_flops_16 = p16 * 1e12;
    a->peak_flops_32 = p32 * 1e12;
    a->peak_flops_8 = p8 * 1e12;
    a->mem_bytes = mem * GiB;
    a->mem_bw_Bps = bw * 1e9;
    a->reserved_bytes = res * GiB;
    a->kernel_floor_s = floor_us * 1e-6;
    if (strata_accel_validate(a) < 0)
        return st_error(STRATA_ERR_PARSE, "%s:1: %s", d->origin, strata_last_error());
    return STRATA_OK;
}

strata_status_t strata_accel_load(const char *path, strata_accel_t *out)
{
    return load(path, accel_from, out);
}

void strata_accel_write_json(const strata_accel_t *a, FILE *f)
{
    // Exact numbers: rounded ones could break a relation the reader checks (reserved < memory).
    const double GiB = 1024.0 * 1024.0 * 1024.0;
    const char *keys[] = {
        "peak_tflops_16",  "peak_tflops_32",    "memory_GiB",   "memory_bandwidth_GBps",
        "gemm_efficiency", "gemm_dim0",         "reserved_GiB", "kernel_floor_us",
        "peak_tflops_8",   "gemm_efficiency_8", "sms",          "gemm_tile_m",
        "gemm_tile_n"};
    const double vals[] = {a->peak_flops_16 / 1e12,
                           a->peak_flops_32 / 1e12,
                           a->mem_bytes / GiB,
                           a->mem_bw_Bps / 1e9,
                           a->gemm_eff,
                           a->gemm_dim0,
                           a->reserved_bytes / GiB,
                           a->kernel_floor_s * 1e6,
                           a->peak_flops_8 / 1e12,
                           a->gemm_eff_8,
                           a->sms,
                           a->tile_m,
                           a->tile_n};
    char num[32];
    fprintf(f, "{\n  \"name\": ");
    st_json_write_string(f, a->name);
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
        fprintf(f, ",\n  \"%s\": %s", keys[i], st_format_double(vals[i], num, sizeof num));
    fprintf(f, "\n}\n");
}

static strata_status_t calib_from(const st_json_doc_t *d, void *out)
{
    const char *keys[STRATA_CALIB_NPARAMS + 3];
    for (int i = 0; i < STRATA_CALIB_NPARAMS; i++)
        keys[i] = strata_calib_param_name(i);
    keys[STRATA_CALIB_NPARAMS] = "comment";
    keys[STRATA_CALIB_NPARAMS + 1] = "fit";
    keys[STRATA_CALIB_NPARAMS + 2] = NULL;
    strata_calib_t *c = out;
    ST_TRY(st_json_check_keys(d, d->root, "calibration", keys));
    *c = strata_calib_default();
    for (int i = 0; i < STRATA_CALIB_NPARAMS; i++) {
        double lo, hi;
        strata_calib_param_range(i, &lo, &hi);
        ST_TRY(st_json_get_double(d, d->root, strata_calib_param_name(i), 0, false, lo, hi,
                                  strata_calib_param(c, i)));
    }
    return STRATA_OK;
}

strata_status_t strata_calib_load(const char *path, strata_calib_t *out)
{
    return load(path, calib_from, out);
}

void strata_calib_write_json(const strata_calib_t *c, FILE *f)
{
    fprintf(f, "{\n");
    for (int i = 0; i < STRATA_CALIB_NPARAMS; i++)
        fprintf(f, "  \"%s\": %.4f%s\n", strata_calib_param_name(i),
                *strata_calib_param((strata_calib_t *)c, i),
                i + 1 < STRATA_CALIB_NPARAMS ? "," : "");
    fprintf(f, "}\n");
}
