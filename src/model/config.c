/* The model configuration as JSON: written into checkpoint metadata and read back from it or from
 * the "model" section of a training config. Reading refuses unknown keys and names origin:line.
 * Also the named choices of the model options (norm, mlp, pos) and the Llama preset of them. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "base/json.h"
#include "strata/model.h"

/* The text of each choice, indexed by its enum value. */
static const char *const norm_names[] = {"layernorm", "rmsnorm", NULL};
static const char *const mlp_names[] = {"gelu", "swiglu", NULL};
static const char *const pos_names[] = {"learned", "rope", NULL};

void strata_gpt_config_llama(strata_gpt_config_t *c)
{
    c->norm = STRATA_GPT_NORM_RMSNORM;
    c->mlp = STRATA_GPT_MLP_SWIGLU;
    c->pos = STRATA_GPT_POS_ROPE;
    c->no_bias = true;
    c->untied = true;
}

strata_status_t strata_gpt_config_set_choice(strata_gpt_config_t *c, const char *key,
                                             const char *value)
{
    const char *const *names = !strcmp(key, "norm") ? norm_names
                               : !strcmp(key, "mlp") ? mlp_names
                               : !strcmp(key, "pos") ? pos_names
                                                     : NULL;
    if (!names)
        return st_error(STRATA_ERR_INVALID_ARG, "model: no choice named '%s' (norm, mlp, pos)",
                        key);
    for (int i = 0; names[i]; i++) {
        if (strcmp(value, names[i]) != 0)
            continue;
        if (names == norm_names)
            c->norm = (strata_gpt_norm_t)i;
        else if (names == mlp_names)
            c->mlp = (strata_gpt_mlp_t)i;
        else
            c->pos = (strata_gpt_pos_t)i;
        return STRATA_OK;
    }
    return st_error(STRATA_ERR_INVALID_ARG, "model: %s must be %s or %s, got '%s'", key, names[0],
                    names[1], value);
}

/* names[v] for a choice read back as text; "?" for a value no validated configuration holds. */
static const char *choice_name(const char *const *names, int v)
{
    return v == 0 || v == 1 ? names[v] : "?";
}

int strata_gpt_config_to_json(const strata_gpt_config_t *c, char *buf, size_t size)
{
    int n = snprintf(buf, size,
                     "{\"vocab\":%d,\"max_seq\":%d,\"n_layer\":%d,\"n_head\":%d,\"d_model\":%d,"
                     "\"d_ff\":%d,\"ln_eps\":%.9g,\"init_std\":%.9g,\"parallel\":%s,\"window\":%d,"
                     "\"norm\":\"%s\",\"mlp\":\"%s\",\"pos\":\"%s\",\"bias\":%s,"
                     "\"rope_theta\":%.9g,\"n_kv_head\":%d,\"tied\":%s}",
                     c->vocab, c->max_seq, c->n_layer, c->n_head, c->d_model, c->d_ff,
                     (double)c->ln_eps, (double)c->init_std, c->parallel ? "true" : "false",
                     c->window, choice_name(norm_names, c->norm),
                     choice_name(mlp_names, c->mlp), choice_name(pos_names, c->pos),
                     c->no_bias ? "false" : "true", (double)c->rope_theta, c->n_kv_head,
                     c->untied ? "false" : "true");
    return (n < 0 || (size_t)n >= size) ? -1 : n;
}

strata_status_t strata_gpt_config_from_json(const char *text, const char *origin,
                                            strata_gpt_config_t *c)
{
    st_json_doc_t doc = {0};
    ST_TRY(st_json_parse(text, origin, &doc));
    strata_status_t rc = STRATA_OK;
    static const char *const known[] = {"vocab",  "max_seq",  "n_layer", "n_head", "d_model",
                                        "d_ff",   "ln_eps",   "init_std", "parallel", "window",
                                        "norm",   "mlp",      "pos",     "bias",   "rope_theta",
                                        "n_kv_head", "tied",  NULL};
    static const char *const choices[] = {"norm", "mlp", "pos"};
    if (!json_object_is_type(doc.root, json_type_object)) {
        rc = st_error(STRATA_ERR_PARSE, "%s:1: expected a JSON object for the model", origin);
        goto out;
    }
    double eps = c->ln_eps, std = c->init_std, theta = c->rope_theta;
    bool bias = !c->no_bias, tied = !c->untied;
    ST_TRY_GOTO(st_json_check_keys(&doc, doc.root, "model", known), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, doc.root, "vocab", 0, false, 2, 1 << 24, &c->vocab), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, doc.root, "max_seq", 0, false, 1, 65536, &c->max_seq), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, doc.root, "n_layer", 0, false, 1, 1024, &c->n_layer), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, doc.root, "n_head", 0, false, 1, 65536, &c->n_head), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, doc.root, "d_model", 0, false, 1, 65536, &c->d_model), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, doc.root, "d_ff", 0, false, 0, 1 << 20, &c->d_ff), rc, out);
    ST_TRY_GOTO(st_json_get_double(&doc, doc.root, "ln_eps", 0, false, 1e-12, 0.5, &eps), rc, out);
    ST_TRY_GOTO(st_json_get_double(&doc, doc.root, "init_std", 0, false, 1e-6, 9, &std), rc, out);
    ST_TRY_GOTO(st_json_get_bool(&doc, doc.root, "parallel", 0, false, &c->parallel), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, doc.root, "window", 0, false, 0, 65536, &c->window), rc, out);
    ST_TRY_GOTO(st_json_get_bool(&doc, doc.root, "bias", 0, false, &bias), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, doc.root, "n_kv_head", 0, false, 0, 65536, &c->n_kv_head), rc,
                out);
    ST_TRY_GOTO(st_json_get_bool(&doc, doc.root, "tied", 0, false, &tied), rc, out);
    ST_TRY_GOTO(st_json_get_double(&doc, doc.root, "rope_theta", 0, false, 0, 1e12, &theta), rc,
                out);
    for (int i = 0; i < 3; i++) {
        char s[32] = "";
        ST_TRY_GOTO(st_json_get_string(&doc, doc.root, choices[i], 0, false, s, sizeof s), rc, out);
        if (s[0] && strata_gpt_config_set_choice(c, choices[i], s) < 0) {
            rc = st_error(STRATA_ERR_PARSE, "%s:%d: %s", origin,
                          st_json_key_line(&doc, choices[i], 0), strata_last_error());
            goto out;
        }
    }
    c->ln_eps = (float)eps;
    c->init_std = (float)std;
    c->rope_theta = (float)theta;
    c->no_bias = !bias;
    c->untied = !tied;
out:
    st_json_free(&doc);
    return rc;
}
