/* Checking the model against published measurements: validation tables as CSV (one row per
 * published run, every configuration column spelled out), the predicted value of each row's metric,
 * and the fit of the calibration constants (Nelder-Mead on the sum of squared log errors over the
 * rows marked calibrate=yes, parameters kept in their physical ranges by a logistic transform). */
#include "base/base.h"
#include "plan/plan_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- CSV ---------------------------------------------------------------------------------------
 */

#define MAX_COLS 48

/* Splits one CSV line in place (double quotes protect commas; "" is a quote). */
static int split_csv(char *line, char **cols, int max)
{
    int n = 0;
    char *p = line;
    while (n < max) {
        char *w = p;
        cols[n++] = w;
        if (*p == '"') {
            p++;
            for (;;) {
                if (!*p)
                    break;
                if (*p == '"' && p[1] == '"') {
                    *w++ = '"';
                    p += 2;
                } else if (*p == '"') {
                    p++;
                    break;
                } else {
                    *w++ = *p++;
                }
            }
            while (*p && *p != ',')
                p++;
        } else {
            while (*p && *p != ',')
                *w++ = *p++;
        }
        char *end = p;
        if (*p == ',') {
            *w = 0;
            p = end + 1;
        } else {
            *w = 0;
            break;
        }
    }
    return n;
}

static const char *const columns[] = {"id",
                                      "source",
                                      "arch",
                                      "layers",
                                      "hidden",
                                      "heads",
                                      "kv_heads",
                                      "ffn",
                                      "vocab",
                                      "seq",
                                      "gpus",
                                      "cluster",
                                      "accelerator",
                                      "tp",
                                      "cp",
                                      "pp",
                                      "vp",
                                      "dp",
                                      "global_batch",
                                      "micro_batch",
                                      "schedule",
                                      "zero",
                                      "zero_secondary",
                                      "zero_variant",
                                      "recompute",
                                      "sequence_parallel",
                                      "flash_attention",
                                      "precision",
                                      "optimizer",
                                      "overlap",
                                      "order",
                                      "metric",
                                      "measured",
                                      "calibrate",
                                      "notes",
                                      NULL};

static int col_index(const char *name)
{
    for (int i = 0; columns[i]; i++)
        if (!strcmp(columns[i], name))
            return i;
    return -1;
}

typedef struct rowctx {
    const char *path;
    int line;
    char *v[MAX_COLS]; /* by column index of `columns` */
} rowctx_t;

static strata_status_t get_int(const rowctx_t *r, const char *col, int lo, int *out)
{
    const char *s = r->v[col_index(col)];
    char *end;
    errno = 0;
    long x = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || x < lo || x > (1L << 30))
        return st_error(STRATA_ERR_PARSE, "%s:%d: expected an integer >= %d in column %s, got '%s'",
                        r->path, r->line, lo, col, s ? s : "");
    *out = (int)x;
    return STRATA_OK;
}

static strata_status_t get_bool(const rowctx_t *r, const char *col, bool *out)
{
    const char *s = r->v[col_index(col)];
    if (s && (!strcmp(s, "yes") || !strcmp(s, "true") || !strcmp(s, "1"))) {
        *out = true;
        return STRATA_OK;
    }
    if (s && (!strcmp(s, "no") || !strcmp(s, "false") || !strcmp(s, "0"))) {
        *out = false;
        return STRATA_OK;
    }
    return st_error(STRATA_ERR_PARSE, "%s:%d: expected yes or no in column %s, got '%s'", r->path,
                    r->line, col, s ? s : "");
}

static strata_status_t wrap(const rowctx_t *r, const char *col, strata_status_t rc)
{
    if (rc >= 0)
        return rc;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", strata_last_error());
    return st_error(STRATA_ERR_PARSE, "%s:%d: column %s: %s", r->path, r->line, col, msg);
}

/* A file named in a table is found as given, else next to the table. */
static const char *resolve(const rowctx_t *r, const char *name, char *buf, size_t size)
{
    FILE *f = fopen(name, "r");
    if (f || name[0] == '/') {
        if (f)
            fclose(f);
        return name;
    }
    const char *slash = strrchr(r->path, '/');
    if (!slash)
        return name;
    snprintf(buf, size, "%.*s/%s", (int)(slash - r->path), r->path, name);
    return buf;
}

static strata_status_t parse_row(const rowctx_t *r, strata_vrow_t *row)
{
    char pathbuf[1024];
    memset(row, 0, sizeof *row);
    row->line = r->line;
    snprintf(row->id, sizeof row->id, "%s", r->v[col_index("id")]);
    snprintf(row->source, sizeof row->source, "%s", r->v[col_index("source")]);
    strata_model_t *m = &row->pb.model;
    int layers, hidden, heads, vocab, seq;
    ST_TRY(get_int(r, "layers", 1, &layers));
    ST_TRY(get_int(r, "hidden", 1, &hidden));
    ST_TRY(get_int(r, "heads", 1, &heads));
    ST_TRY(get_int(r, "vocab", 1, &vocab));
    ST_TRY(get_int(r, "seq", 1, &seq));
    *m = strata_model_gpt(row->id, layers, hidden, heads, vocab, seq);
    ST_TRY(get_int(r, "kv_heads", 1, &m->kv_heads));
    ST_TRY(get_int(r, "ffn", 1, &m->ffn));
    const char *arch = r->v[col_index("arch")];
    if (!strcmp(arch, "llama")) {
        m->mlp = STRATA_MLP_SWIGLU;
        m->rmsnorm = true;
        m->bias = m->tied_embeddings = m->learned_pos = m->dropout = false;
    } else if (strcmp(arch, "gpt")) {
        return st_error(STRATA_ERR_PARSE, "%s:%d: expected arch gpt or llama, got '%s'", r->path,
                        r->line, arch);
    }
    ST_TRY(wrap(r, "layers", strata_model_validate(m)));

    strata_training_t *t = &row->pb.train;
    *t = strata_training_default();
    ST_TRY(get_int(r, "global_batch", 1, &t->global_batch));
    ST_TRY(get_int(r, "micro_batch", 1, &t->micro_batch));
    ST_TRY(
        wrap(r, "recompute", strata_recompute_parse(r->v[col_index("recompute")], &t->recompute)));
    ST_TRY(
        wrap(r, "precision", strata_precision_parse(r->v[col_index("precision")], &t->precision)));
    ST_TRY(
        wrap(r, "optimizer", strata_optimizer_parse(r->v[col_index("optimizer")], &t->optimizer)));
    ST_TRY(get_bool(r, "sequence_parallel", &t->sequence_parallel));
    ST_TRY(get_bool(r, "flash_attention", &t->flash_attention));

    const char *acc = r->v[col_index("accelerator")];
    if (strstr(acc, ".json"))
        ST_TRY(wrap(r, "accelerator",
                    strata_accel_load(resolve(r, acc, pathbuf, sizeof pathbuf), &row->pb.accel)));
    else
        ST_TRY(wrap(r, "accelerator", strata_accel_preset(acc, &row->pb.accel)));
    const char *cl = r->v[col_index("cluster")];
    if (strstr(cl, ".json"))
        ST_TRY(wrap(r, "cluster",
                    strata_topo_load(resolve(r, cl, pathbuf, sizeof pathbuf), &row->pb.topo)));
    else
        ST_TRY(wrap(r, "cluster", strata_topo_preset(cl, &row->pb.topo)));
    int gpus;
    ST_TRY(get_int(r, "gpus", 1, &gpus));
    row->pb.gpus = gpus;
    row->pb.calib = strata_calib_default();

    strata_parallel_t *p = &row->par;
    *p = strata_parallel_default();
    ST_TRY(get_int(r, "tp", 1, &p->tp));
    ST_TRY(get_int(r, "cp", 1, &p->cp));
    ST_TRY(get_int(r, "pp", 1, &p->pp));
    ST_TRY(get_int(r, "vp", 1, &p->vp));
    ST_TRY(get_int(r, "dp", 1, &p->dp));
    ST_TRY(get_int(r, "zero", 0, &p->zero));
    ST_TRY(get_int(r, "zero_secondary", 1, &p->zero_secondary));
    const char *zv = r->v[col_index("zero_variant")];
    if (zv && *zv && strcmp(zv, "none")) {
        p->zero_keep_params = !strcmp(zv, "keep-params") || !strcmp(zv, "keep-params+reduce-once");
        p->zero_reduce_once = !strcmp(zv, "reduce-once") || !strcmp(zv, "keep-params+reduce-once");
        if (!p->zero_keep_params && !p->zero_reduce_once)
            return st_error(STRATA_ERR_PARSE,
                            "%s:%d: expected zero_variant none, keep-params, reduce-once or "
                            "keep-params+reduce-once, got '%s'",
                            r->path, r->line, zv);
    }
    ST_TRY(wrap(r, "schedule", strata_schedule_parse(r->v[col_index("schedule")], &p->schedule)));
    ST_TRY(wrap(r, "overlap", strata_overlap_parse(r->v[col_index("overlap")], p->overlap)));
    const char *ord = r->v[col_index("order")];
    if (ord && *ord)
        ST_TRY(wrap(r, "order", strata_order_parse(ord, p->order)));

    const char *met = r->v[col_index("metric")];
    static const char *const metrics[] = {"tflops_megatron", "mfu", "hfu", "tflops_model",
                                          "tokens_per_s"};
    int found = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(met, metrics[i]))
            found = i;
    if (found < 0)
        return st_error(STRATA_ERR_PARSE,
                        "%s:%d: expected metric tflops_megatron, mfu, hfu, "
                        "tflops_model or tokens_per_s, got '%s'",
                        r->path, r->line, met);
    row->metric = (strata_metric_t)found;
    char *end;
    const char *ms = r->v[col_index("measured")];
    row->measured = strtod(ms, &end);
    if (!*ms || *end || !(row->measured > 0))
        return st_error(STRATA_ERR_PARSE,
                        "%s:%d: expected a positive number in column measured, got "
                        "'%s'",
                        r->path, r->line, ms);
    ST_TRY(get_bool(r, "calibrate", &row->calibrate));
    return wrap(r, "tp", strata_plan_check(&row->pb, &row->par));
}

strata_status_t strata_vtable_load(const char *path, strata_vtable_t *t)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return st_error_errno(STRATA_ERR_IO, errno, "%s: cannot open", path);
    char line[4096];
    int lineno = 0, map[MAX_COLS], ncols = 0;
    strata_status_t rc = STRATA_OK;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len && line[len - 1] != '\n' && !feof(f)) {
            rc = st_error(STRATA_ERR_PARSE, "%s:%d: expected a line shorter than %zu characters",
                          path, lineno, sizeof line);
            break;
        }
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        if (!len || line[0] == '#')
            continue;
        char *cells[MAX_COLS];
        int n = split_csv(line, cells, MAX_COLS);
        if (!ncols) {
            // The header: every known column must appear once; unknown columns are an error.
            ncols = n;
            unsigned long long seen = 0;
            for (int i = 0; i < n; i++) {
                map[i] = col_index(cells[i]);
                if (map[i] < 0) {
                    rc = st_error(STRATA_ERR_PARSE, "%s:%d: unknown column '%s'", path, lineno,
                                  cells[i]);
                    goto out;
                }
                seen |= 1ull << map[i];
            }
            for (int i = 0; columns[i]; i++)
                if (!(seen & (1ull << i)) && strcmp(columns[i], "order") &&
                    strcmp(columns[i], "zero_variant")) {
                    rc = st_error(STRATA_ERR_PARSE, "%s:%d: expected a column named %s", path,
                                  lineno, columns[i]);
                    goto out;
                }
            continue;
        }
        if (n != ncols) {
            rc = st_error(STRATA_ERR_PARSE, "%s:%d: expected %d columns, got %d", path, lineno,
                          ncols, n);
            break;
        }
        rowctx_t r = {.path = path, .line = lineno};
        static char empty[] = "";
        for (int i = 0; i < MAX_COLS; i++)
            r.v[i] = empty;
        for (int i = 0; i < n; i++)
            r.v[map[i]] = cells[i];
        strata_vrow_t *nr = realloc(t->rows, (size_t)(t->nrows + 1) * sizeof *nr);
        if (!nr) {
            rc = st_error(STRATA_ERR_NO_MEMORY, "%s: out of memory", path);
            break;
        }
        t->rows = nr;
        rc = parse_row(&r, &t->rows[t->nrows]);
        if (rc < 0)
            break;
        t->nrows++;
    }
out:
    fclose(f);
    if (rc >= 0 && !ncols)
        rc = st_error(STRATA_ERR_PARSE, "%s:1: expected a header line", path);
    return rc;
}

void strata_vtable_free(strata_vtable_t *t)
{
    free(t->rows);
    t->rows = NULL;
    t->nrows = 0;
}

/* The row's metric under `calib` with the STRATA_TERM_* bits `terms_off` switched off too. */
static strata_status_t predict_terms(const strata_vrow_t *row, const strata_calib_t *calib,
                                     unsigned terms_off, double *value, strata_prediction_t *pred)
{
    strata_plan_problem_t pb = row->pb;
    pb.calib = *calib;
    pb.terms_off |= terms_off;
    strata_prediction_t local;
    strata_prediction_t *p = pred ? pred : &local;
    ST_TRY(strata_plan_predict(&pb, &row->par, p));
    double n = (double)st_gpus(&pb);
    switch (row->metric) {
    case STRATA_METRIC_TFLOPS_MEGATRON:
        *value = p->megatron_flops / p->step_s / n / 1e12;
        break;
    case STRATA_METRIC_MFU:
        *value = 100 * p->mfu;
        break;
    case STRATA_METRIC_HFU:
        *value = 100 * p->hfu;
        break;
    case STRATA_METRIC_TFLOPS_MODEL:
        *value = p->tflops_per_accel;
        break;
    case STRATA_METRIC_TOKENS_PER_S:
        *value = p->tokens_per_s;
        break;
    }
    return STRATA_OK;
}

strata_status_t strata_vrow_predict(const strata_vrow_t *row, const strata_calib_t *calib,
                                    double *value, strata_prediction_t *pred)
{
    return predict_terms(row, calib, 0, value, pred);
}

/* ---- fit ---------------------------------------------------------------------------------------
 */

/* The physical range each constant is fitted in. */
static const double lo[STRATA_CALIB_NPARAMS] = {0.3, 0.2, 0.2, 0.2, 0.01, 0.0, 0.0, 0.0, 1, 0.0};
static const double hi[STRATA_CALIB_NPARAMS] = {1.3, 1.0, 1.0, 1.0, 1.0, 0.6, 1.0, 0.1, 64, 0.5};

typedef struct fitctx {
    const strata_vtable_t *t;
    int skip;
    unsigned terms_off;
    int idx[STRATA_CALIB_NPARAMS], nfree;
    strata_calib_t base;
} fitctx_t;

static void decode(const fitctx_t *fc, const double *x, strata_calib_t *c)
{
    *c = fc->base;
    for (int j = 0; j < fc->nfree; j++) {
        int i = fc->idx[j];
        *strata_calib_param(c, i) = lo[i] + (hi[i] - lo[i]) / (1 + exp(-x[j]));
    }
}

static double encode1(int i, double v)
{
    double u = (v - lo[i]) / (hi[i] - lo[i]);
    u = u < 1e-6 ? 1e-6 : u > 1 - 1e-6 ? 1 - 1e-6 : u;
    return log(u / (1 - u));
}

static double objective(const fitctx_t *fc, const double *x, double *mape)
{
    strata_calib_t c;
    decode(fc, x, &c);
    double sse = 0, ape = 0;
    int n = 0;
    for (int r = 0; r < fc->t->nrows; r++) {
        const strata_vrow_t *row = &fc->t->rows[r];
        if (!row->calibrate || r == fc->skip)
            continue;
        double v;
        if (predict_terms(row, &c, fc->terms_off, &v, NULL) < 0 || !(v > 0))
            return 1e30;
        double e = log(v / row->measured);
        sse += e * e;
        ape += fabs(v - row->measured) / row->measured;
        n++;
    }
    if (mape)
        *mape = n ? ape / n : 0;
    return sse;
}

/* strata_calib_fit with the STRATA_TERM_* bits `terms_off` switched off in every row. */
static strata_status_t fit_terms(const strata_vtable_t *t, int skip, unsigned free_mask,
                                 unsigned terms_off, const strata_calib_t *start,
                                 strata_calib_t *out, double *mape)
{
    fitctx_t fc = {.t = t, .skip = skip, .terms_off = terms_off, .base = *start};
    int usable = 0;
    for (int r = 0; r < t->nrows; r++)
        usable += t->rows[r].calibrate && r != skip;
    if (!usable)
        return st_error(STRATA_ERR_INVALID_ARG, "calibration: no row marked calibrate=yes");
    for (int i = 0; i < STRATA_CALIB_NPARAMS; i++)
        if (free_mask & (1u << i))
            fc.idx[fc.nfree++] = i;
    const int n = fc.nfree;
    if (!n) {
        *out = *start;
        if (mape)
            objective(&fc, NULL, mape);
        return STRATA_OK;
    }
    // Nelder-Mead simplex (reflection 1, expansion 2, contraction 0.5, shrink 0.5).
    double x[STRATA_CALIB_NPARAMS + 1][STRATA_CALIB_NPARAMS], fx[STRATA_CALIB_NPARAMS + 1];
    for (int j = 0; j < n; j++)
        x[0][j] = encode1(fc.idx[j], *strata_calib_param(&fc.base, fc.idx[j]));
    for (int k = 1; k <= n; k++) {
        for (int j = 0; j < n; j++)
            x[k][j] = x[0][j] + (j == k - 1 ? 0.8 : 0);
    }
    for (int k = 0; k <= n; k++)
        fx[k] = objective(&fc, x[k], NULL);
    for (int iter = 0; iter < 600; iter++) {
        // Order the simplex, best first.
        for (int a = 0; a <= n; a++)
            for (int b = a + 1; b <= n; b++)
                if (fx[b] < fx[a]) {
                    double tf = fx[a];
                    fx[a] = fx[b];
                    fx[b] = tf;
                    for (int j = 0; j < n; j++) {
                        double tx = x[a][j];
                        x[a][j] = x[b][j];
                        x[b][j] = tx;
                    }
                }
        if (fx[n] - fx[0] < 1e-12 * (1 + fx[0]) && iter > 50)
            break;
        double cen[STRATA_CALIB_NPARAMS] = {0}, xr[STRATA_CALIB_NPARAMS], xe[STRATA_CALIB_NPARAMS];
        for (int k = 0; k < n; k++)
            for (int j = 0; j < n; j++)
                cen[j] += x[k][j] / n;
        for (int j = 0; j < n; j++)
            xr[j] = cen[j] + (cen[j] - x[n][j]);
        double fr = objective(&fc, xr, NULL);
        if (fr < fx[0]) {
            for (int j = 0; j < n; j++)
                xe[j] = cen[j] + 2 * (cen[j] - x[n][j]);
            double fe = objective(&fc, xe, NULL);
            const double *take = fe < fr ? xe : xr;
            for (int j = 0; j < n; j++)
                x[n][j] = take[j];
            fx[n] = fe < fr ? fe : fr;
        } else if (fr < fx[n - 1]) {
            for (int j = 0; j < n; j++)
                x[n][j] = xr[j];
            fx[n] = fr;
        } else {
            for (int j = 0; j < n; j++)
                xe[j] = cen[j] + 0.5 * (x[n][j] - cen[j]);
            double fc2 = objective(&fc, xe, NULL);
            if (fc2 < fx[n]) {
                for (int j = 0; j < n; j++)
                    x[n][j] = xe[j];
                fx[n] = fc2;
            } else {
                for (int k = 1; k <= n; k++) {
                    for (int j = 0; j < n; j++)
                        x[k][j] = x[0][j] + 0.5 * (x[k][j] - x[0][j]);
                    fx[k] = objective(&fc, x[k], NULL);
                }
            }
        }
    }
    int best = 0;
    for (int k = 1; k <= n; k++)
        if (fx[k] < fx[best])
            best = k;
    decode(&fc, x[best], out);
    if (mape)
        objective(&fc, x[best], mape);
    return STRATA_OK;
}

strata_status_t strata_calib_fit(const strata_vtable_t *t, int skip, unsigned free_mask,
                                 const strata_calib_t *start, strata_calib_t *out, double *mape)
{
    return fit_terms(t, skip, free_mask, 0, start, out, mape);
}

/* ---- validation stage by stage -----------------------------------------------------------------
 */

static const char *const stage_names[STRATA_VSTAGE_COUNT] = {"base", "+scale", "+memory", "+hw"};

const char *strata_vstage_name(strata_vstage_t s)
{
    return (unsigned)s < STRATA_VSTAGE_COUNT ? stage_names[s] : "?";
}

unsigned strata_vstage_terms_off(strata_vstage_t s)
{
    static const unsigned off[STRATA_VSTAGE_COUNT] = {
        STRATA_TERM_ALL, STRATA_TERM_MEMORY | STRATA_TERM_HW, STRATA_TERM_HW, 0};
    return (unsigned)s < STRATA_VSTAGE_COUNT ? off[s] : 0;
}

/* Constants a stage's step times depend on: the scale terms' only with them on; mem_frag never
 * (it moves memory, not time), so a fit leaves it where it is. */
static unsigned stage_fit_mask(strata_vstage_t s, unsigned free_mask)
{
    unsigned scale = (1u << 7) | (1u << 8);
    if (strata_vstage_terms_off(s) & STRATA_TERM_SCALE)
        free_mask &= ~scale;
    return free_mask & ~(1u << 9);
}

void strata_vreport_free(strata_vreport_t *r)
{
    free(r->rows);
    r->rows = NULL;
    r->nrows = 0;
}

strata_status_t strata_validate(const strata_vtable_t *t, unsigned free_mask,
                                const strata_calib_t *start, bool loo, strata_vreport_t *out)
{
    memset(out, 0, sizeof *out);
    out->rows = calloc((size_t)(t->nrows > 0 ? t->nrows : 1), sizeof *out->rows);
    if (!out->rows)
        return st_error(STRATA_ERR_NO_MEMORY, "validate: out of memory");
    out->nrows = t->nrows;
    bool any_cal = false;
    for (int r = 0; r < t->nrows; r++)
        any_cal |= t->rows[r].calibrate;
    strata_status_t rc = STRATA_OK;
    for (int st = 0; st < STRATA_VSTAGE_COUNT && rc >= 0; st++) {
        unsigned off = strata_vstage_terms_off((strata_vstage_t)st);
        unsigned mask = stage_fit_mask((strata_vstage_t)st, free_mask);
        strata_calib_t *fit = &out->fit[st];
        *fit = *start;
        if (any_cal)
            rc = fit_terms(t, -1, mask, off, start, fit, NULL);
        double sum_c = 0, sum_h = 0;
        int n_c = 0, n_h = 0;
        for (int r = 0; r < t->nrows && rc >= 0; r++) {
            const strata_vrow_t *row = &t->rows[r];
            strata_vresult_t *v = &out->rows[r];
            strata_prediction_t p;
            rc = predict_terms(row, fit, off, &v->predicted[st], &p);
            if (rc < 0)
                break;
            v->mem_bytes[st] = p.mem.total;
            v->fits[st] = p.mem.fits;
            double pred = v->predicted[st];
            if (row->calibrate && loo) {
                // From `start`, not from the fit that saw this row: nothing of it leaks in.
                strata_calib_t f2;
                rc = fit_terms(t, r, mask, off, start, &f2, NULL);
                if (rc >= 0)
                    rc = predict_terms(row, &f2, off, &pred, NULL);
            }
            v->error[st] = pred / row->measured - 1;
            if (row->calibrate) {
                sum_c += fabs(v->error[st]);
                n_c++;
            } else {
                sum_h += fabs(v->error[st]);
                n_h++;
            }
        }
        out->n_calibration = n_c;
        out->n_held_out = n_h;
        out->mae_calibration[st] = n_c ? sum_c / n_c : 0;
        out->mae_held_out[st] = n_h ? sum_h / n_h : 0;
        out->mae_all[st] = n_c + n_h ? (sum_c + sum_h) / (n_c + n_h) : 0;
    }
    if (rc < 0)
        strata_vreport_free(out);
    return rc;
}
