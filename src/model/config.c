/* The model configuration as JSON: written into checkpoint metadata and read back from it or from
 * the "model" section of a training config. Reading refuses unknown keys and names origin:line. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "base/json.h"
#include "strata/model.h"

int strata_gpt_config_to_json(const strata_gpt_config_t *c, char *buf, size_t size)
{
    int n = snprintf(buf, size,
                     "{\"vocab\":%d,\"max_seq\":%d,\"n_layer\":%d,\"n_head\":%d,\"d_model\":%d,"
                     "\"d_ff\":%d,\"ln_eps\":%.9g,\"init_std\":%.9g}",
                     c->vocab, c->max_seq, c->n_layer, c->n_head, c->d_model, c->d_ff,
                     (double)c->ln_eps, (double)c->init_std);
    return (n < 0 || (size_t)n >= size) ? -1 : n;
}

strata_status_t strata_gpt_config_from_json(const char *text, const char *origin,
                                            strata_gpt_config_t *c)
{
    st_json_doc_t doc = {0};
    ST_TRY(st_json_parse(text, origin, &doc));
    strata_status_t rc = STRATA_OK;
    static const char *const known[] = {"vocab", "max_seq", "n_layer", "n_head", "d_model",
                                        "d_ff",  "ln_eps",  "init_std", NULL};
    if (!json_object_is_type(doc.root, json_type_object)) {
        rc = st_error(STRATA_ERR_PARSE, "%s:1: expected a JSON object for the model", origin);
        goto out;
    }
    double eps = c->ln_eps, std = c->init_std;
    ST_TRY_GOTO(st_json_check_keys(&doc, doc.root, "model", known), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, doc.root, "vocab", 0, false, 2, 1 << 24, &c->vocab), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, doc.root, "max_seq", 0, false, 1, 65536, &c->max_seq), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, doc.root, "n_layer", 0, false, 1, 1024, &c->n_layer), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, doc.root, "n_head", 0, false, 1, 65536, &c->n_head), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, doc.root, "d_model", 0, false, 1, 65536, &c->d_model), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, doc.root, "d_ff", 0, false, 0, 1 << 20, &c->d_ff), rc, out);
    ST_TRY_GOTO(st_json_get_double(&doc, doc.root, "ln_eps", 0, false, 1e-12, 0.5, &eps), rc, out);
    ST_TRY_GOTO(st_json_get_double(&doc, doc.root, "init_std", 0, false, 1e-6, 9, &std), rc, out);
    c->ln_eps = (float)eps;
    c->init_std = (float)std;
out:
    st_json_free(&doc);
    return rc;
}
