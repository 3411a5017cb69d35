/* The pipeline executor: runs one stage's action list of a generated schedule (strata/schedule.h)
 * over this rank's model chunks, sending activations forward and gradients backward to the
 * neighbouring stages over non-blocking point-to-point messages, and records every idle interval of
 * a step (a bubble): when, how long, what it waited for (which micro-batch, which neighbour), and
 * the memory free at that moment. Part of src/parallel (pipeline.c).
 *
 * A step: strata_pipeline_step() runs the list once: FWD of micro-batch m on chunk c reads the
 * tokens (chunk 0, from the caller's batch callback), the activation received from the previous
 * chunk's stage, or the previous chunk's output when it is on this stage too; the last chunk
 * computes the loss; BWD reads the loss (last chunk) or the gradient received from the next chunk's
 * stage (or computed here); WGT adds the weight gradients (split schedules). Every receive is posted
 * when the step starts, so data arrives while the stage computes; a RECV action waits for it. Sends
 * are posted as their actions come and completed at the end of the step. Gradients accumulate over
 * the micro-batches (each backward scaled by 1/M): the caller zeroes them before and finishes them
 * (tie, strata_model_grads_done, the optimizer) after.
 *
 * Bubbles. While a step runs, strata_pipeline_next_bubble() predicts this stage's next idle
 * interval from the schedule simulated with the durations measured in earlier steps
 * (strata_pp_simulate), and a bubble hook, when set, is called at the start of every wait for a
 * neighbour's data with its predicted length: the longer of the simulated gap and the same wait's
 * length in the previous step (until the data arrived). Inside the hook,
 * strata_pipeline_bubble_over() tells at once when the data has arrived (the bubble-harvesting
 * engine polls it between its steps). After the step, strata_pipeline_bubbles()
 * hands out what was measured, and strata_pipeline_timelines() the measured and the predicted
 * timelines (strata_pp_timeline_svg draws them).
 *
 * Failures: a dead or silent neighbour makes the waiting call return the communicator's error
 * (PEER_FAILED naming the rank, or a timeout), like every collective. Thread-safety: one thread. */
#ifndef STRATA_PIPELINE_H
#define STRATA_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "strata/comm.h"
#include "strata/model.h"
#include "strata/schedule.h"
#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct strata_pipeline strata_pipeline_t;

typedef struct strata_pipeline_config {
    strata_schedule_t schedule;
    int vstages;          /* chunks per stage (1; interleaved >= 2; zb-v 2) */
    int micro;            /* micro-batches per step, M */
    int rows, seq;        /* one micro-batch: rows x seq tokens */
    strata_gpt_t *model;  /* this stage's chunks, in chunk order (shard.layers; borrowed), made
                             with slots >= vstages x micro (chunk k's micro-batch m in slot
                             k * micro + m) and split_backward iff the schedule splits */
} strata_pipeline_config_t;

/* The tokens and targets of micro-batch mb (rows x seq each), for the first and the last chunk. */
typedef strata_status_t (*strata_pipeline_batch_fn)(void *ctx, int mb, const int32_t **tokens,
                                                    const int32_t **targets);

/* One idle interval of a stage. */
typedef struct strata_pp_bubble {
    double start_s, dur_s;   /* from the step's start on this rank; length */
    uint8_t waits_for;       /* STRATA_PP_RECV_ACT / RECV_GRAD (a neighbour's data), or
                                STRATA_PP_SEND_ACT at the step's end (its sends completing) */
    int32_t mb;              /* the micro-batch waited for (-1 at the end) */
    int16_t chunk;
    int16_t peer;            /* the stage waited for (-1 at the end) */
    size_t mem_free;         /* bytes of memory available when it began (the system's) */
} strata_pp_bubble_t;

/* Called at the start of every wait for a neighbour's data with the predicted bubble (dur_s: the
 * longer of the simulated gap and this wait's length in the previous step; 0 when neither is known
 * yet). The training goes on when the hook returns: it is the hook's to return as soon as
 * strata_pipeline_bubble_over() says the data arrived, and before the prediction runs out. */
typedef void (*strata_pipeline_bubble_fn)(void *ctx, const strata_pp_bubble_t *predicted);

/* Creates the executor for this rank's stage: pp_comm's rank is the stage, its size the stage
 * count. Generates and checks the schedule. Errors: INVALID_ARG (a schedule refused by
 * strata_pp_generate, chunks missing, too few slots), NO_MEMORY. */
STRATA_API strata_status_t strata_pipeline_create(strata_comm_t *pp_comm,
                                                  const strata_pipeline_config_t *cfg,
                                                  strata_pipeline_t **out);
STRATA_API void strata_pipeline_destroy(strata_pipeline_t *p);

/* The generated schedule (valid while p lives). */
STRATA_API const strata_pp_plan_t *strata_pipeline_plan(const strata_pipeline_t *p);

/* Runs one step of this stage's actions; *loss_sum receives the sum of the micro-batches' losses
 * on the stage holding the last chunk (0 elsewhere). Collective over the pipeline. */
STRATA_API strata_status_t strata_pipeline_step(strata_pipeline_t *p, strata_pipeline_batch_fn batch,
                                                void *ctx, double *loss_sum);

/* The forwards of a step only (evaluation): FWD and its messages of every micro-batch, the loss of
 * the last chunk summed in *loss_sum; no backward, no timing. Collective over the pipeline. */
STRATA_API strata_status_t strata_pipeline_forward(strata_pipeline_t *p,
                                                   strata_pipeline_batch_fn batch, void *ctx,
                                                   double *loss_sum);

/* Advances this stage's outstanding sends and receives without blocking (strata's messages move
 * only inside strata calls): the model calls it between its products (strata_model_set_progress),
 * so a neighbour's data flows while this stage computes. */
STRATA_API void strata_pipeline_progress(strata_pipeline_t *p);

STRATA_API void strata_pipeline_set_bubble_hook(strata_pipeline_t *p, strata_pipeline_bubble_fn fn,
                                                void *ctx);

/* Inside a bubble hook: true once the data the bubble waits for has arrived (or failed; the wait
 * that follows reports it), tested without blocking; outside a hook, true. */
STRATA_API bool strata_pipeline_bubble_over(strata_pipeline_t *p);

/* During a step: this stage's next predicted idle interval after the action now running. Returns
 * false when none is predicted (or nothing is measured yet). */
STRATA_API bool strata_pipeline_next_bubble(const strata_pipeline_t *p, strata_pp_bubble_t *out);

/* After a step: its measured bubbles (valid until the next step). */
STRATA_API int strata_pipeline_bubbles(const strata_pipeline_t *p, const strata_pp_bubble_t **out);

/* After a step: this stage's measured step time, time computing, and the bubble fraction measured
 * (idle share of the step) and predicted (the schedule simulated with the measured durations, this
 * stage's share). */
typedef struct strata_pipeline_stats {
    double step_s, busy_s, bubble, bubble_predicted;
    double fwd_s, bwd_s, wgt_s; /* mean durations of one action per chunk, this stage, last step */
} strata_pipeline_stats_t;
STRATA_API strata_pipeline_stats_t strata_pipeline_stats(const strata_pipeline_t *p);

/* After a step: this stage's measured spans (one stage's row) and the predicted timeline of every
 * stage, simulated with the durations gathered from every stage (collective over the pipeline:
 * every stage calls it). `measured` gets every stage's measured spans (gathered). Free both with
 * strata_pp_timeline_free. */
STRATA_API strata_status_t strata_pipeline_timelines(strata_pipeline_t *p,
                                                     strata_pp_timeline_t *measured,
                                                     strata_pp_timeline_t *predicted);

#ifdef __cplusplus
}
#endif
#endif
