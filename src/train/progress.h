/* The progress display of strata_trainer_run, on rank 0's stderr. Internal to src/train.
 *
 * On a terminal (or with STRATA_PROGRESS=bar, which strata launch sets for its ranks when its own
 * stderr is a terminal) one line is redrawn in place with '\r', at most 10 times a second; otherwise
 * (a file, a pipe, a launcher's log) a complete line is printed for the first step, every
 * cfg.progress_every seconds, at each step with a validation loss, and at the last step. The line
 * shows the loss, the last validation loss (and its step), and tokens/s and MFU over the same window,
 * the last ST_PROGRESS_WINDOW steps; the ETA is the wall time per step so far (evaluations and
 * checkpoints included). A summary line ends the run. */
#ifndef ST_TRAIN_PROGRESS_H
#define ST_TRAIN_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/train.h"

#define ST_PROGRESS_WINDOW 20 /* steps behind the line's tokens/s and MFU */

typedef struct st_progress {
    bool on;             /* this rank shows progress (rank 0, cfg.progress) */
    bool redraw;         /* '\r' in place; else complete lines */
    bool open;           /* a redrawn line is on the terminal without its newline */
    int width;           /* that line's length: a shorter one blanks the rest */
    double every_s;      /* lines: seconds between lines */
    uint64_t start_ns;   /* the run's start */
    uint64_t shown_ns;   /* the last line's time */
    int64_t first_step;  /* the step count the run started at (a resumed run's is not 0) */
    double win_s[ST_PROGRESS_WINDOW]; /* the window's step times, a ring */
    int win_n, win_at;
    int64_t nsteps, step; /* steps seen, the last one */
    double steps_s;      /* every step's time, for the summary's means */
    double tokens_step;  /* tokens of one step (the global batch) */
    double flops_tok;    /* model flops per token (forward and backward) */
    double peak_flops;   /* every rank's measured GEMM peak together, flop/s; 0 = unknown */
    double rank_peak_flops; /* one rank's, for the summary */
    float loss;          /* the last step's */
    double val;          /* the last validation loss; NaN = none yet */
    int64_t val_step;    /* the step it was computed after */
} st_progress_t;

/* Starts the display of a run from step t->step (the style from STRATA_PROGRESS and stderr). */
void st_progress_start(st_progress_t *p, const strata_trainer_t *t, double flops_tok);

/* A finished step: s's time and loss into the window and the totals; `val` the validation loss
 * computed after it (NaN: none; a side evaluation finished in it counts too). Shows the line when
 * due; `last` the run's last step (always shown, and a redrawn line then ends). */
void st_progress_step(st_progress_t *p, const strata_trainer_t *t, const strata_step_info_t *s,
                      double val, bool last);

/* Ends a redrawn line still open, so that other output starts on a line of its own. */
void st_progress_break(st_progress_t *p);

/* The run's summary: steps, wall time, the last loss and validation loss, mean tokens/s and MFU
 * over the steps' time. */
void st_progress_summary(st_progress_t *p);

#endif
