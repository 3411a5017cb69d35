/* The trainer's data pipeline: who reads which rows, the loader thread that reads them ahead of the
 * step (train/prefetch.h), and the tensor-parallel group's broadcast of them. Megatron-LM's
 * arrangement: each data-parallel rank reads only its own rows; of a tensor-parallel group only
 * TP rank 0 reads and broadcasts the batch over the group; of a pipeline only the stage holding
 * the first chunk (the embeddings) reads the tokens and only the stage holding the last chunk (the
 * head and the loss) reads the targets, both from the file, as Megatron-LM's first and last stages
 * each run a data iterator; the middle stages read nothing. The last stage reading its targets
 * itself costs no message along the pipeline (which the cost model may have put on the slowest
 * tier), and both ends draw the same rows because a batch is a pure function of the step. */
#include <inttypes.h>
#include <stdlib.h>

#include "base/base.h"
#include "strata/trace.h"
#include "train/prefetch.h"
#include "train/trainer.h"

/* Which parts of a row this rank's stage uses. */
static void parts(const strata_trainer_t *t, bool *tokens, bool *targets)
{
    const strata_train_config_t *c = &t->cfg;
    int P = t->pp, V = c->vp, C = P * V;
    *tokens = P <= 1 || strata_pp_chunk_stage(c->schedule, P, V, 0) == t->pp_rank;
    *targets = P <= 1 || strata_pp_chunk_stage(c->schedule, P, V, C - 1) == t->pp_rank;
}

bool st_trainer_reads_data(const strata_trainer_t *t)
{
    bool tk, tg;
    parts(t, &tk, &tg);
    return t->tp_rank == 0 && (tk || tg);
}

/* Rows [row_begin, row_begin + rows) of batch `index` of a split, the parts this stage uses. */
static strata_status_t read_rows(const strata_trainer_t *t, int split, int64_t index, int row_begin,
                                 int rows, int32_t *tokens, int32_t *targets)
{
    const strata_train_config_t *c = &t->cfg;
    bool tk, tg;
    parts(t, &tk, &tg);
    strata_status_t rc = strata_data_batch(t->data, split, c->seed, index, row_begin, rows, c->seq,
                                           tk ? tokens : NULL, tg ? targets : NULL);
    if (rc < 0)
        return st_error(rc, "train: %s batch %" PRId64 ": %s", split == 0 ? "training" :
                        "validation", index, strata_last_error());
    return STRATA_OK;
}

strata_status_t st_trainer_read_rows(const strata_trainer_t *t, int split, int64_t index,
                                     int32_t *tokens, int32_t *targets)
{
    bool tk, tg;
    parts(t, &tk, &tg);
    int rows = t->cfg.batch / t->dp;
    return tk || tg ? read_rows(t, split, index, t->dp_rank * rows, rows, tokens, targets)
                    : STRATA_OK;
}

/* The loader thread's fill: this rank's rows of step `index`. */
static strata_status_t fill(void *ctx, int64_t index, int32_t *tokens, int32_t *targets)
{
    return st_trainer_read_rows(ctx, 0, index, tokens, targets);
}

/* TP rank 0's rows to the other ranks of its group: the parts the stage uses. */
static strata_status_t tp_share(strata_trainer_t *t, int rows)
{
    bool tk, tg;
    parts(t, &tk, &tg);
    size_t n = (size_t)rows * (size_t)t->cfg.seq;
    if (t->tp <= 1)
        return STRATA_OK;
    if (tk)
        ST_TRY(strata_bcast(t->tp_comm, t->tokens, n, STRATA_DTYPE_I32, 0));
    if (tg)
        ST_TRY(strata_bcast(t->tp_comm, t->targets, n, STRATA_DTYPE_I32, 0));
    return STRATA_OK;
}

strata_status_t st_trainer_batch(strata_trainer_t *t, int64_t step, int row_begin, int rows,
                                 double *wait_s)
{
    const strata_train_config_t *c = &t->cfg;
    uint64_t t0 = st_now_ns();
    strata_trace_begin("data", "batch");
    strata_status_t rc = STRATA_OK;
    bool queued = row_begin == t->dp_rank * (c->batch / t->dp) && rows == c->batch / t->dp &&
                  step <= c->steps; // the rows the thread reads, of the run's steps
    if (!st_trainer_reads_data(t)) {
        // receives its rows (TP ranks > 0) or needs none (a pipeline's middle stages)
    } else if (t->side_data && st_side_data_take(t->side_data, step, &t->tokens, &t->targets)) {
        // read in a bubble by the data side task
    } else if (!queued) { // a caller's own cut of the batch (strata_trainer_forward_backward)
        rc = read_rows(t, 0, step, row_begin, rows, t->tokens, t->targets);
    } else {
        // With the data side task the bubbles read ahead: no thread (what they missed is read here).
        if (!t->loader)
            rc = st_prefetch_create(t->side_data ? 0 : c->prefetch,
                                    (size_t)c->batch * (size_t)c->seq, c->steps, fill, t,
                                    &t->loader);
        if (rc == STRATA_OK)
            rc = st_prefetch_take(t->loader, step, &t->tokens, &t->targets, NULL);
    }
    if (rc == STRATA_OK)
        rc = tp_share(t, rows);
    strata_trace_end("data", "batch");
    if (wait_s)
        *wait_s = (double)(st_now_ns() - t0) * 1e-9;
    return rc;
}

strata_status_t st_trainer_val_batch(strata_trainer_t *t, int64_t index)
{
    // TP rank 0 reads (nothing on a pipeline's middle stage), the group's others receive.
    if (t->tp_rank == 0)
        ST_TRY(st_trainer_read_rows(t, 1, index, t->tokens, t->targets));
    return tp_share(t, t->cfg.batch / t->dp);
}

void st_trainer_data_stop(strata_trainer_t *t)
{
    st_prefetch_destroy(t->loader);
    t->loader = NULL;
}

uint64_t strata_trainer_data_bytes_read(const strata_trainer_t *t)
{
    return strata_data_bytes_read(t->data);
}
