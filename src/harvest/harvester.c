/* The harvester (strata/harvest.h): a priority queue of side tasks, each with its state and its
 * learned step cost, run step by step inside the bubbles it is handed. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "strata/harvest.h"

#define RECENT 8 /* steps the learned cost looks back over */

typedef struct task {
    strata_side_task_ops_t ops;
    void *self;
    int priority, order;
    strata_task_state_t state;
    double recent[RECENT]; /* the last step durations */
    int nrecent, at;
    bool benched;          /* sits out the next bubble (it overran) */
    bool skip;             /* out of the bubble being run (benched, refused, done for now) */
    uint64_t steps;        /* steps run, and their seconds */
    double seconds;
} task_t;

struct strata_harvester {
    double margin;
    task_t *task;
    int n, cap;
    strata_harvest_stats_t stats;
};

const char *strata_task_state_name(strata_task_state_t s)
{
    static const char *const names[] = {"created", "paused", "running", "finished", "stopped"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

strata_status_t strata_harvester_create(double margin, strata_harvester_t **out)
{
    *out = NULL;
    if (!(margin >= 0 && margin <= 10))
        return st_error(STRATA_ERR_INVALID_ARG, "harvest: margin %g outside [0, 10]", margin);
    strata_harvester_t *h = calloc(1, sizeof *h);
    if (!h)
        return st_error(STRATA_ERR_NO_MEMORY, "harvest: out of memory");
    h->margin = margin;
    *out = h;
    return STRATA_OK;
}

void strata_harvester_destroy(strata_harvester_t *h)
{
    if (!h)
        return;
    for (int i = 0; i < h->n; i++) { // finished and stopped tasks were finalized already
        task_t *t = &h->task[i];
        if (t->state != STRATA_TASK_PAUSED && t->state != STRATA_TASK_RUNNING)
            continue;
        t->state = STRATA_TASK_STOPPED;
        if (t->ops.finalize)
            t->ops.finalize(t->self);
    }
    free(h->task);
    free(h);
}

strata_status_t strata_harvester_add(strata_harvester_t *h, const strata_side_task_ops_t *ops,
                                     void *self, int priority, int *id)
{
    if (!ops || !ops->step)
        return st_error(STRATA_ERR_INVALID_ARG, "harvest: a side task needs a step function");
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 4;
        task_t *t = realloc(h->task, (size_t)cap * sizeof *t);
        if (!t)
            return st_error(STRATA_ERR_NO_MEMORY, "harvest: out of memory");
        h->task = t;
        h->cap = cap;
    }
    h->task[h->n] = (task_t){.ops = *ops, .self = self, .priority = priority, .order = h->n};
    if (id)
        *id = h->n;
    h->n++;
    return STRATA_OK;
}

/* The learned cost: the longest recent step (0 before the first). */
static double cost(const task_t *t)
{
    double c = 0;
    for (int i = 0; i < t->nrecent; i++)
        c = ST_MAX(c, t->recent[i]);
    return c;
}

static void learn(task_t *t, double d)
{
    t->recent[t->at] = d;
    t->at = (t->at + 1) % RECENT;
    t->nrecent = ST_MIN(t->nrecent + 1, RECENT);
}

/* The next task to run: the highest priority (then the earliest added) that is not done, not
 * benched and not refused in this bubble. */
static task_t *next_task(strata_harvester_t *h)
{
    task_t *best = NULL;
    for (int i = 0; i < h->n; i++) {
        task_t *t = &h->task[i];
        if (t->skip || t->state == STRATA_TASK_FINISHED || t->state == STRATA_TASK_STOPPED)
            continue;
        if (!best || t->priority > best->priority)
            best = t;
    }
    return best;
}

static void stop(task_t *t, const char *why)
{
    ST_LOG_WARN(ST_SUB_TRAIN, "harvest: side task %s stopped: %s", t->ops.name ? t->ops.name : "?",
                why);
    t->state = STRATA_TASK_STOPPED;
    if (t->ops.finalize)
        t->ops.finalize(t->self);
}

double strata_harvester_bubble(strata_harvester_t *h, const strata_harvest_bubble_t *b)
{
    double budget_s = b->budget_s;
    size_t mem_free = b->mem_free;
    h->stats.bubbles++;
    h->stats.bubble_s += budget_s > 0 ? budget_s : 0;
    uint64_t t0 = st_now_ns();
    double done = 0;
    for (int i = 0; i < h->n; i++) { // an overrun sits this bubble out, then may go again
        task_t *t = &h->task[i];
        t->skip = t->benched;
        h->stats.benched += t->benched;
        t->benched = false;
    }
    task_t *t;
    bool ended = b->over && b->over(b->over_ctx); // polled once after every step
    while (budget_s > 0 && !ended && (t = next_task(h))) {
        double left = budget_s - (double)(st_now_ns() - t0) * 1e-9;
        // The first step is the measurement; after it, the learned cost with its margin must fit.
        if (t->nrecent && cost(t) * (1 + h->margin) > left) {
            t->skip = true;
            continue;
        }
        if (t->state == STRATA_TASK_CREATED) {
            if (t->ops.mem_bytes > mem_free) { // not even initialised: it would not fit
                h->stats.refused_memory++;
                t->skip = true;
                continue;
            }
            strata_status_t rc = t->ops.init ? t->ops.init(t->self) : STRATA_OK;
            if (rc < 0) {
                t->state = STRATA_TASK_STOPPED; // nothing to finalize
                ST_LOG_WARN(ST_SUB_TRAIN, "harvest: side task %s: init failed: %s",
                            t->ops.name ? t->ops.name : "?", strata_last_error());
                continue;
            }
            t->state = STRATA_TASK_PAUSED;
        }
        if (t->ops.mem_bytes > mem_free && t->state == STRATA_TASK_PAUSED) {
            h->stats.refused_memory++;
            t->skip = true;
            continue;
        }
        if (t->state == STRATA_TASK_PAUSED && t->ops.resume)
            t->ops.resume(t->self);
        t->state = STRATA_TASK_RUNNING;
        double predicted = cost(t);
        uint64_t s0 = st_now_ns();
        strata_status_t rc = t->ops.step(t->self);
        double d = (double)(st_now_ns() - s0) * 1e-9;
        ended = b->over && b->over(b->over_ctx);
        if (rc == STRATA_INPROGRESS) { // nothing to do now: it yields the rest of the bubble
            t->skip = true;
            continue;
        }
        done += d;
        h->stats.steps++;
        t->steps++;
        t->seconds += d;
        learn(t, d);
        if (rc < 0) {
            stop(t, strata_last_error());
            continue;
        }
        if (t->ops.is_finished && t->ops.is_finished(t->self)) {
            t->state = STRATA_TASK_FINISHED;
            if (t->ops.finalize)
                t->ops.finalize(t->self);
            continue;
        }
        if (predicted > 0 && d > predicted * (1 + h->margin)) { // it overran its learned cost
            h->stats.overruns++;
            // Past the bubble's end the training waited for it: benched from the next bubble.
            if ((double)(st_now_ns() - t0) * 1e-9 > budget_s || ended) {
                t->benched = true;
                t->skip = true;
            }
        }
    }
    for (int i = 0; i < h->n; i++) // the bubble is over: every running task pauses
        if (h->task[i].state == STRATA_TASK_RUNNING) {
            if (h->task[i].ops.pause)
                h->task[i].ops.pause(h->task[i].self);
            h->task[i].state = STRATA_TASK_PAUSED;
        }
    h->stats.harvested_s += done;
    return done;
}

strata_task_state_t strata_harvester_state(const strata_harvester_t *h, int id)
{
    return id >= 0 && id < h->n ? h->task[id].state : STRATA_TASK_STOPPED;
}

strata_harvest_stats_t strata_harvester_stats(const strata_harvester_t *h)
{
    return h->stats;
}

double strata_harvester_step_cost(const strata_harvester_t *h, int id)
{
    return id >= 0 && id < h->n ? cost(&h->task[id]) : 0;
}

double strata_harvester_progress(const strata_harvester_t *h, int id)
{
    if (id < 0 || id >= h->n || !h->task[id].ops.progress)
        return -1;
    return h->task[id].ops.progress(h->task[id].self);
}

uint64_t strata_harvester_task_steps(const strata_harvester_t *h, int id)
{
    return id >= 0 && id < h->n ? h->task[id].steps : 0;
}

double strata_harvester_task_seconds(const strata_harvester_t *h, int id)
{
    return id >= 0 && id < h->n ? h->task[id].seconds : 0;
}
