/* Straggler detection (MegaScale's diagnosis): in synchronous data parallelism every rank's step
 * takes as long as the slowest rank's, so step time alone names nobody. What differs is where the
 * time goes: a slow rank computes longer and waits less in the collectives, because the others wait
 * for it. Each rank measures its busy time per step (step time minus time blocked in the
 * communicator, strata_comm_stats); every `window` steps the ranks sum their busy times into one
 * per-rank array (one small collective), and the rank whose busy time exceeds the median of the
 * others by 20% and by 2 ms a step is slow in that window (rank 0 alone serves the store and
 * writes metrics and manifests: about a millisecond a step more, which is no news). Slow
 * in 3 windows in a row, it is flagged as a straggler until a window finds it (or any rank) no
 * longer slow. Internal to src/train.
 */
#ifndef ST_TRAIN_STRAGGLER_H
#define ST_TRAIN_STRAGGLER_H

#include <stdbool.h>

#include "strata/train.h"

#define ST_STRAGGLER_STREAK 3    /* windows in a row that make a rank a straggler */
#define ST_STRAGGLER_RATIO  1.2  /* busy time over the others' median that counts as slow */
#define ST_STRAGGLER_MIN_S  0.002 /* ... and by at least this much per step */

typedef struct st_straggler {
    int window;        /* steps per window; 0 = off */
    int steps;         /* steps in the current window */
    double busy;       /* this rank's busy seconds in it */
    double wait_mark;  /* the communicator's blocked seconds when the current step began */
    int suspect;       /* the rank slow in the last windows (-1 none) */
    int streak;        /* in how many windows in a row */
    int flagged;       /* the straggler (-1 none) */
    double ratio;      /* its busy time over the others' median in the last window */
    double *busy_all;  /* every rank's busy seconds per step in the last window (nranks) */
    int *role;         /* ranks doing the same work share a role (their TP and PP place): a rank
                          is compared with those only; NULL: every rank the same */
    bool window_ended; /* the last step closed a window: busy_all is fresh */
} st_straggler_t;

/* Sets up for nranks ranks (window 0: off). */
strata_status_t st_straggler_init(st_straggler_t *s, int window, int nranks);
void st_straggler_free(st_straggler_t *s);

/* Marks the start of a step (reads the communicator's blocked time). */
void st_straggler_begin(st_straggler_t *s, strata_comm_t *comm);

/* Ends a step that took `seconds` on this rank; at a window's end, sums the ranks' busy times
 * through `all_sum` (collective: every rank calls it at the same steps) and judges. */
strata_status_t st_straggler_end(st_straggler_t *s, strata_comm_t *comm, double seconds,
                                 strata_status_t (*all_sum)(void *ctx, double *v, int n), void *ctx,
                                 int rank, int nranks);

/* Ranks with different work (a pipeline's stages, a TP group's places) must not be compared: role[r]
 * names rank r's work; only ranks of the same role are (copied; NULL: all alike). */
strata_status_t st_straggler_set_roles(st_straggler_t *s, const int *role, int nranks);

/* Pure judgement of one window, for tests: the slow rank among `busy` (per-step seconds), or -1;
 * *ratio gets its busy time over the others' median. With `role` (may be NULL), a rank is compared
 * only with the other ranks of its role; the slow rank with the largest ratio is the answer. */
int st_straggler_judge(const double *busy, const int *role, int n, double *ratio);

#endif
