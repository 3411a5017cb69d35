/* The trainer's side work in the pipeline's bubbles (--harvest): the side tasks named, in priority
 * order, on the harvester; the pipeline's bubble hook; the step-end agreement on the side passes'
 * snapshots and their results; the drain at the run's end. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "train/trainer.h"

enum { DATA_AHEAD = 2 }; /* coming steps' batches the data task holds */
/* The gemm task's matrices: about 0.05 ms a step on one core here, at the rate of larger ones (they
 * stay in cache), so it fills the short bubbles too (256: 0.25 ms, a few points less of them). */
enum { GEMM_N = 160 };

static bool bubble_over(void *pipe)
{
    return strata_pipeline_bubble_over(pipe);
}

/* The pipeline's bubble hook: the predicted idle time goes to the side tasks, until the data the
 * stage waits for arrives. */
static void harvest_bubble(void *ctx, const strata_pp_bubble_t *predicted)
{
    strata_trainer_t *t = ctx;
    strata_harvest_bubble_t b = {.budget_s = predicted->dur_s, .mem_free = predicted->mem_free,
                                 .over = bubble_over, .over_ctx = t->pipe};
    if (b.budget_s > 0)
        strata_harvester_bubble(t->harvester, &b);
}

/* Creates the named task (named once: the caller checks), its ops in *ops. */
static strata_status_t make_task(strata_trainer_t *t, const char *name, strata_side_task_ops_t *ops,
                                 void **self)
{
    if (!strcmp(name, "eval") || !strcmp(name, "sample")) {
        bool eval = name[0] == 'e';
        st_side_chain_t **c = eval ? &t->side_eval : &t->side_sample;
        ST_TRY(st_side_chain_create(t, eval ? ST_SIDE_EVAL : ST_SIDE_SAMPLE, c, ops));
        *self = *c;
        return STRATA_OK;
    }
    if (!strcmp(name, "data")) {
        ST_TRY(st_side_data_create(t, DATA_AHEAD, &t->side_data, ops));
        *self = t->side_data;
        return STRATA_OK;
    }
    if (!strcmp(name, "gemm")) {
        ST_TRY(strata_side_task_gemm(GEMM_N, ops, &t->side_gemm));
        *self = t->side_gemm;
        return STRATA_OK;
    }
    return st_error(STRATA_ERR_INVALID_ARG, "train: --harvest: unknown side task '%s' (the shipped "
                    "ones: eval, sample, data, gemm)", name);
}

strata_status_t st_trainer_harvest_create(strata_trainer_t *t)
{
    const char *list = t->cfg.harvest;
    if (!list[0])
        return STRATA_OK;
    if (!t->pipe)
        return st_error(STRATA_ERR_INVALID_ARG, "train: --harvest runs side work inside pipeline "
                        "bubbles: it needs --pp 2 or more");
    ST_TRY(strata_harvester_create(0.25, &t->harvester));
    int n = 0; // the first named goes first: priorities count down
    for (const char *s = list; *s;) { // each shipped task at most once: n stays in bounds
        size_t len = strcspn(s, ",");
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), s);
        for (int k = 0; k < n; k++)
            if (!strcmp(t->side[k].name, name))
                return st_error(STRATA_ERR_INVALID_ARG, "train: --harvest names %s twice", name);
        strata_side_task_ops_t ops;
        void *self = NULL;
        ST_TRY(make_task(t, name, &ops, &self));
        ST_TRY(strata_harvester_add(t->harvester, &ops, self, ST_MAX_SIDE_TASKS - n, &t->side[n].id));
        t->side[n].name = ops.name;
        n++;
        s += len + (s[len] == ',');
    }
    t->nside = n;
    strata_pipeline_set_bubble_hook(t->pipe, harvest_bubble, t);
    return STRATA_OK;
}

void st_trainer_harvest_destroy(strata_trainer_t *t)
{
    strata_harvester_destroy(t->harvester); // finalizes the tasks it initialised
    st_side_chain_destroy(t->side_eval);
    st_side_chain_destroy(t->side_sample);
    st_side_data_destroy(t->side_data);
    strata_side_task_free(t->side_gemm);
}

/* Every rank's side pass of chain k (0 eval, 1 sample, each run by every rank or by none): whether
 * it is over everywhere and every rank's snapshot model exists; eval's loss (the mean over the
 * data-parallel replicas, as the blocking evaluation averages them). One collective for both. */
static strata_status_t agree(strata_trainer_t *t, bool idle[2], bool ready[2], double *loss)
{
    st_side_chain_t *ch[2] = {t->side_eval, t->side_sample};
    double v[6] = {0}; // idle, ready per chain; eval loss, replicas holding one
    for (int k = 0; k < 2; k++) {
        v[2 * k] = !ch[k] || st_side_chain_idle(ch[k]);
        v[2 * k + 1] = !ch[k] || st_side_chain_ready(ch[k]);
    }
    const char *text;
    if (t->side_eval && st_side_chain_result(t->side_eval, &v[4], &text))
        v[5] = 1;
    ST_TRY(st_trainer_all_sum(t, v, 6));
    for (int k = 0; k < 2; k++) {
        idle[k] = v[2 * k] == t->nranks;
        ready[k] = v[2 * k + 1] == t->nranks;
    }
    *loss = v[5] > 0 ? v[4] / v[5] : 0;
    return STRATA_OK;
}

/* Chain k's finished pass into s (the sample's text on the rank holding it). */
static void result(strata_trainer_t *t, int k, double loss, strata_step_info_t *s)
{
    const char *text;
    double unused;
    if (k == 0) {
        s->side_val_loss = loss;
        s->side_val_step = t->side_pass_step[0];
    } else if (st_side_chain_result(t->side_sample, &unused, &text)) {
        s->side_sample = text;
        s->side_sample_step = t->side_pass_step[1];
    }
    t->side_pass_step[k] = 0;
}

strata_status_t st_trainer_harvest_report(strata_trainer_t *t, strata_step_info_t *s)
{
    s->harvest_s = strata_harvester_stats(t->harvester).harvested_s - t->harvested_before;
    t->harvested_before += s->harvest_s;
    st_side_chain_t *ch[2] = {t->side_eval, t->side_sample};
    if (!ch[0] && !ch[1])
        return STRATA_OK;
    bool idle[2], ready[2];
    double loss;
    ST_TRY(agree(t, idle, ready, &loss));
    int64_t every = t->cfg.eval_every;
    bool due = (every <= 0 || t->step % every == 0) && t->step < t->cfg.steps;
    for (int k = 0; k < 2; k++) {
        if (!ch[k] || !idle[k])
            continue;
        if (t->side_pass_step[k] > 0)
            result(t, k, loss, s);
        if (ready[k] && due) { // every rank at this step: one snapshot of the whole model
            st_side_chain_snapshot(ch[k], t->step);
            t->side_pass_step[k] = t->step;
        }
    }
    return STRATA_OK;
}

strata_status_t st_trainer_harvest_finish(strata_trainer_t *t, strata_step_info_t *s)
{
    st_side_chain_t *ch[2] = {t->side_eval, t->side_sample};
    bool running = false;
    for (int k = 0; k < 2; k++)
        if (t->side_pass_step[k] > 0) {
            ST_TRY(st_side_chain_drain(ch[k]));
            running = true;
        }
    if (!running)
        return STRATA_OK;
    bool idle[2], ready[2];
    double loss;
    ST_TRY(agree(t, idle, ready, &loss));
    for (int k = 0; k < 2; k++)
        if (t->side_pass_step[k] > 0)
            result(t, k, loss, s);
    return STRATA_OK;
}

void st_trainer_harvest_snprint(const strata_trainer_t *t, char *out, size_t size)
{
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < t->nside && at < size; i++) {
        double p = strata_harvester_progress(t->harvester, t->side[i].id);
        int k = p >= 0 && p < 1 ? snprintf(out + at, size - at, "%s%s %.0f%%", i ? ", " : "",
                                           t->side[i].name, 100 * p)
                                : snprintf(out + at, size - at, "%s%s", i ? ", " : "",
                                           t->side[i].name);
        at += k > 0 ? (size_t)k : 0;
    }
}
