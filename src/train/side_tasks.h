/* The trainer's side tasks (strata train --harvest): work a training user wants anyway, run in the
 * pipeline's bubbles by the harvester (strata/harvest.h). Internal to src/train.
 *
 * eval and sample need the whole model, which no stage holds: they run as a side pipeline. At a
 * snapshot step every stage copies its chunks' parameters into a model of its own (the snapshot),
 * then, bubble by bubble, runs its chunks' forwards of the side work's micro-batches and passes the
 * activations to the next chunk's stage over a communicator of their own, in the order the chunks
 * come; a step is one piece's forward (the stage's chunks cut into up to STRATA_GPT_MAX_CHUNKS runs
 * of layers) of one micro-batch, or nothing (STRATA_INPROGRESS) while the
 * previous chunk's activation has not arrived. The trainer decides the snapshot steps for every
 * stage alike (st_side_chain_idle, st_side_chain_snapshot) and reports the results.
 *   eval    the validation loss of the snapshot over the trainer's validation batches (the same
 *           batches and micro-batches as the blocking evaluation, so the same loss)
 *   sample  text generated from the snapshot (the last chunk's stage samples the next token and
 *           sends it back to the first chunk's stage)
 * data prefetches the coming steps' batches (the loader's work for them), which the step then
 * takes instead of reading its own. */
#ifndef ST_TRAIN_SIDE_TASKS_H
#define ST_TRAIN_SIDE_TASKS_H

#include "strata/harvest.h"
#include "strata/train.h"

enum { ST_MAX_SIDE_TASKS = 4 }; /* eval, sample, data, gemm */

typedef enum { ST_SIDE_EVAL, ST_SIDE_SAMPLE } st_side_kind_t;

typedef struct st_side_chain st_side_chain_t;

/* A side pipeline of `kind` on this stage of the trainer's pipeline (the model's chunks, its layout
 * and the schedule's chunk placement), over its own split of the pipeline's communicator
 * (collective over the pipeline). *ops receives its harvester interface. Errors: INVALID_ARG
 * (tensor parallelism or ZeRO-3: a stage's snapshot would need collectives), NO_MEMORY. */
strata_status_t st_side_chain_create(strata_trainer_t *t, st_side_kind_t kind,
                                     st_side_chain_t **out, strata_side_task_ops_t *ops);
/* Waits for its messages still in flight, frees everything. NULL is a no-op. */
void st_side_chain_destroy(st_side_chain_t *c);

/* Whether this stage has no pass running, and whether its snapshot model exists (init ran). */
bool st_side_chain_idle(const st_side_chain_t *c);
bool st_side_chain_ready(const st_side_chain_t *c);
/* Copies the trainer's current parameters of this stage (after step `step`'s update) and starts a
 * pass on them. Every stage must do it at the same step (the trainer agrees on it). */
void st_side_chain_snapshot(st_side_chain_t *c, int64_t step);
/* Runs this stage's part of the running pass to its end outside the bubbles (the run is over): every
 * stage drains together. */
strata_status_t st_side_chain_drain(st_side_chain_t *c);

/* The finished pass's result when this stage holds it (after st_side_chain_idle says the pass is
 * over): eval's loss on the stage of the last chunk, sample's text (NUL-terminated, the generated
 * bytes) on the stage of the first; false elsewhere. */
bool st_side_chain_result(const st_side_chain_t *c, double *loss, const char **text);

/* The data prefetch: the batches of the steps after the current one, `ahead` of them. */
typedef struct st_side_data st_side_data_t;
strata_status_t st_side_data_create(strata_trainer_t *t, int ahead, st_side_data_t **out,
                                    strata_side_task_ops_t *ops);
void st_side_data_destroy(st_side_data_t *d);
/* Step `step`'s batch (this data-parallel rank's rows) swapped into *tokens / *targets (the ring
 * keeps the old buffers) when prefetched: true;
 * false when the step must read it itself. */
bool st_side_data_take(st_side_data_t *d, int64_t step, int32_t **tokens, int32_t **targets);

#endif
