/* Harvesting pipeline bubbles: side work run inside a training rank's idle intervals (FreeRide's
 * iterative interface), never making the training's next action late. Part of src/harvest/.
 *
 * A side task is a C object behind strata_side_task_ops_t with an iterative life cycle: init
 * (allocates the memory it declares), step (one bounded unit of work), is_finished, pause and resume
 * around each bubble (its state kept between bubbles), finalize. States:
 *
 *   created --init--> paused <--> running --> finished (is_finished) / stopped (an error, or the
 *                                                                             harvester destroyed)
 *
 * The harvester keeps the tasks in a priority queue and, for each bubble it is handed (its predicted
 * length, the memory free, and a poll that says when it has ended), runs steps of the
 * highest-priority task that can go, polling between steps:
 *   - the bubble ends at once when the poll says so (the training's data arrived), whatever the
 *     prediction said;
 *   - a step runs only while its learned cost (the longest of its recent steps) times (1 + margin)
 *     fits the predicted time left;
 *   - a task is refused a bubble whose free memory is below what it declares (it is not even
 *     initialised);
 *   - a step that overruns its learned cost x (1 + margin) past the bubble's end (the training
 *     waited for it) benches the task for the next bubble; every overrun raises its learned cost;
 *   - a step that returns STRATA_INPROGRESS had nothing to do (it waits for something outside):
 *     the task yields the rest of the bubble to the next one.
 * How side work yields on this CPU machine: in-process, between steps, on the rank's own thread
 * while it waits for a neighbour (the pipeline's bubble hook) — no second thread or process
 * competes with the training for the core, and the training resumes at the end of the current
 * step, whose length the harvester bounds (docs/harvest.md).
 *
 * Thread-safety: a harvester is used by one thread. Errors: status + strata_last_error(). */
#ifndef STRATA_HARVEST_H
#define STRATA_HARVEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct strata_side_task_ops {
    const char *name;
    size_t mem_bytes;                            /* what init allocates (the refusal's measure) */
    strata_status_t (*init)(void *self);         /* may be NULL */
    strata_status_t (*step)(void *self);         /* one bounded unit of work (required); returns
                                                    STRATA_INPROGRESS when it had nothing to do */
    bool (*is_finished)(const void *self);       /* NULL: never (a task that runs for ever) */
    void (*pause)(void *self);                   /* at a bubble's end (may be NULL) */
    void (*resume)(void *self);                  /* at a bubble's start (may be NULL) */
    void (*finalize)(void *self);                /* frees what init allocated (may be NULL) */
    double (*progress)(const void *self);        /* 0..1 for the progress line (may be NULL) */
} strata_side_task_ops_t;

typedef enum strata_task_state {
    STRATA_TASK_CREATED = 0,
    STRATA_TASK_PAUSED,
    STRATA_TASK_RUNNING,
    STRATA_TASK_FINISHED,
    STRATA_TASK_STOPPED,
} strata_task_state_t;

/* "created", "paused", "running", "finished", "stopped". */
STRATA_API const char *strata_task_state_name(strata_task_state_t s);

typedef struct strata_harvester strata_harvester_t;

/* margin: a step runs only when learned cost x (1 + margin) fits the time left (0.25 is a sensible
 * value). Errors: INVALID_ARG (a margin outside [0, 10]), NO_MEMORY. */
STRATA_API strata_status_t strata_harvester_create(double margin, strata_harvester_t **out);
/* Finalizes every task that was initialised (an unfinished one ends stopped). NULL is a no-op. */
STRATA_API void strata_harvester_destroy(strata_harvester_t *h);

/* Queues a task (ops copied; self borrowed until destroy); a higher priority goes first, equal
 * priorities in the order added. *id (may be NULL) names it. Errors: INVALID_ARG (no step). */
STRATA_API strata_status_t strata_harvester_add(strata_harvester_t *h,
                                                const strata_side_task_ops_t *ops, void *self,
                                                int priority, int *id);

/* One bubble as the harvester is told it. */
typedef struct strata_harvest_bubble {
    double budget_s;          /* its predicted length from now (s) */
    size_t mem_free;          /* bytes free for side tasks */
    bool (*over)(void *ctx);  /* polled between steps: true once it has ended (NULL: it lasts
                                 budget_s) */
    void *over_ctx;
} strata_harvest_bubble_t;

/* One bubble: runs steps under the rules above; returns the seconds of side work done. A task whose
 * step fails is stopped (its error logged) and the bubble goes on with the next. */
STRATA_API double strata_harvester_bubble(strata_harvester_t *h, const strata_harvest_bubble_t *b);

STRATA_API strata_task_state_t strata_harvester_state(const strata_harvester_t *h, int id);

typedef struct strata_harvest_stats {
    uint64_t bubbles;          /* bubbles handed in */
    double bubble_s;           /* their predicted seconds */
    double harvested_s;        /* side work done */
    uint64_t steps;            /* side-task steps run */
    uint64_t refused_memory;   /* a task refused a bubble for its memory */
    uint64_t overruns;         /* steps longer than their learned cost x (1 + margin) */
    uint64_t benched;          /* bubbles a task sat out after an overrun past a bubble's end */
} strata_harvest_stats_t;

STRATA_API strata_harvest_stats_t strata_harvester_stats(const strata_harvester_t *h);

/* The task's learned step cost (seconds; 0 before its first step) and its progress (0..1, or -1). */
STRATA_API double strata_harvester_step_cost(const strata_harvester_t *h, int id);
STRATA_API double strata_harvester_progress(const strata_harvester_t *h, int id);

/* One task's account: its steps run and the seconds they took (idle steps not counted). */
STRATA_API uint64_t strata_harvester_task_steps(const strata_harvester_t *h, int id);
STRATA_API double strata_harvester_task_seconds(const strata_harvester_t *h, int id);

/* ---- shipped side tasks ----------------------------------------------------------------------- */

/* A compute-heavy kernel: one n x n sgemm per step (OpenBLAS), for ever; *self is freed with
 * strata_side_task_free after the harvester that ran it is destroyed. Errors: INVALID_ARG (n outside
 * [1, 16384]), NO_MEMORY. */
STRATA_API strata_status_t strata_side_task_gemm(int n, strata_side_task_ops_t *ops, void **self);
/* The floating-point operations a gemm side task has done. */
STRATA_API uint64_t strata_side_task_gemm_flops(const void *self);
STRATA_API void strata_side_task_free(void *self);

#ifdef __cplusplus
}
#endif
#endif
