/* The data side task (train/side_tasks.h): the loader's work for the coming steps, done in the
 * bubbles. Each step of the task reads one coming step's batch (this data-parallel rank's rows, the
 * parts its stage uses; only on the rank that reads, trainer_data.c) into a ring; the trainer's
 * step takes its batch from the ring (a pointer swap) when it is there. The loader is a pure
 * function of the step, so the batches are the ones the step would read. */
#include <stdlib.h>

#include "base/base.h"
#include "train/side_tasks.h"
#include "train/trainer.h"

typedef struct slot {
    int64_t step; /* the step whose batch it holds, or 0 */
    int32_t *tokens, *targets;
} slot_t;

struct st_side_data {
    strata_trainer_t *t;
    int ahead;
    size_t n; /* tokens of a buffer: the trainer's (the whole batch), as they are swapped */
    slot_t *ring;
    uint64_t read;
};

static strata_status_t data_init(void *self)
{
    st_side_data_t *d = self;
    for (int i = 0; i < d->ahead; i++) {
        d->ring[i].tokens = malloc(d->n * sizeof(int32_t));
        d->ring[i].targets = malloc(d->n * sizeof(int32_t));
        if (!d->ring[i].tokens || !d->ring[i].targets)
            return st_error(STRATA_ERR_NO_MEMORY, "harvest: out of memory");
    }
    return STRATA_OK;
}

static void data_finalize(void *self)
{
    st_side_data_t *d = self;
    for (int i = 0; i < d->ahead; i++) {
        free(d->ring[i].tokens);
        free(d->ring[i].targets);
        d->ring[i] = (slot_t){0};
    }
}

/* Reads the first coming step (after the one running, t->step + 1) not held yet. */
static strata_status_t data_step(void *self)
{
    st_side_data_t *d = self;
    const strata_trainer_t *t = d->t;
    const strata_train_config_t *c = &t->cfg;
    if (!st_trainer_reads_data(t))
        return STRATA_INPROGRESS; // its rows come from TP rank 0, or its stage uses none
    for (int64_t s = t->step + 2; s <= t->step + 1 + d->ahead && s <= c->steps; s++) {
        slot_t *sl = &d->ring[s % d->ahead];
        if (sl->step == s)
            continue;
        ST_TRY(st_trainer_read_rows(t, 0, s, sl->tokens, sl->targets));
        sl->step = s;
        d->read++;
        return STRATA_OK;
    }
    return STRATA_INPROGRESS; // every coming step's batch is read
}

static double data_progress(const void *self)
{
    const st_side_data_t *d = self;
    int held = 0;
    for (int i = 0; i < d->ahead; i++)
        held += d->ring[i].step > d->t->step;
    return (double)held / d->ahead;
}

strata_status_t st_side_data_create(strata_trainer_t *t, int ahead, st_side_data_t **out,
                                    strata_side_task_ops_t *ops)
{
    *out = NULL;
    st_side_data_t *d = calloc(1, sizeof *d);
    if (!d || !(d->ring = calloc((size_t)ahead, sizeof *d->ring))) {
        free(d);
        return st_error(STRATA_ERR_NO_MEMORY, "harvest: out of memory");
    }
    d->t = t;
    d->ahead = ahead;
    d->n = (size_t)t->cfg.batch * (size_t)t->cfg.seq;
    *ops = (strata_side_task_ops_t){.name = "data", .mem_bytes = 2 * d->n * (size_t)ahead *
                                                                 sizeof(int32_t),
                                    .init = data_init, .step = data_step,
                                    .finalize = data_finalize, .progress = data_progress};
    *out = d;
    return STRATA_OK;
}

void st_side_data_destroy(st_side_data_t *d)
{
    if (!d)
        return;
    data_finalize(d);
    free(d->ring);
    free(d);
}

bool st_side_data_take(st_side_data_t *d, int64_t step, int32_t **tokens, int32_t **targets)
{
    slot_t *sl = &d->ring[step % d->ahead];
    if (sl->step != step || !sl->tokens)
        return false;
    int32_t *tk = *tokens, *tg = *targets; // swapped: the ring slot takes the step's old buffers
    *tokens = sl->tokens;
    *targets = sl->targets;
    sl->tokens = tk;
    sl->targets = tg;
    sl->step = 0;
    return true;
}
