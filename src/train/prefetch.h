/* The loader thread: batches read ahead into a bounded queue while the step computes. Internal to
 * src/train (the trainer's data pipeline, train/trainer_data.c) and its tests. */
#ifndef ST_TRAIN_PREFETCH_H
#define ST_TRAIN_PREFETCH_H

#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

/* Fills batch `index` (n int32 tokens and n targets). Runs on the loader thread, one call at a time;
 * it must be a pure function of index (the queue may drop a batch and read it again). An error's
 * message (strata_last_error on that thread) is handed to the take that needs the batch. */
typedef strata_status_t (*st_prefetch_fill_fn)(void *ctx, int64_t index, int32_t *tokens,
                                               int32_t *targets);

typedef struct st_prefetch st_prefetch_t;

/* A queue of `depth` batches of n elements each (tokens and targets), filled in index order by a
 * thread started at the first take, up to index `last`. depth 0: no thread, each take fills on
 * the caller's thread. Errors: INVALID_ARG, NO_MEMORY. */
strata_status_t st_prefetch_create(int depth, size_t n, int64_t last, st_prefetch_fill_fn fill,
                                   void *ctx, st_prefetch_t **out);

/* Batch `index` (1 <= index <= last): waits until the thread has read it, then swaps the caller's
 * buffers *tokens / *targets (n elements each) with the batch's, so nothing is copied and the
 * queue refills the caller's old buffers. The queue expects the index after the previous take; any
 * other (the first take, a resumed run's) drops what was read ahead and restarts the thread there.
 * *wait_s (may be NULL): the seconds the caller waited (depth 0: the fill's own time).
 * Errors: the fill's, with its message, for the batch it failed on (the thread stops there; a take
 * of that index again reads it again); INVALID_ARG for an index outside [1, last]. */
strata_status_t st_prefetch_take(st_prefetch_t *q, int64_t index, int32_t **tokens,
                                 int32_t **targets, double *wait_s);

/* Stops the thread (after the fill it is in, if any: a full queue or an idle thread stops at once)
 * and joins it, then frees every buffer. NULL is a no-op. */
void st_prefetch_destroy(st_prefetch_t *q);

#endif
