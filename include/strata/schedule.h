/* Pipeline schedules as data: for P pipeline stages, V model chunks per stage and M micro-batches,
 * a schedule is a generated list of actions per stage (forward of micro-batch m on model chunk c,
 * backward, weight gradient, sends and receives between the stages holding neighbouring chunks),
 * checked for dependencies and deadlock freedom before anything runs it. The trainer's executor
 * (src/parallel/pipeline.c) runs exactly these lists; the planner prices a pipeline by simulating
 * the same lists (strata_pp_simulate), so plan and train cannot disagree on what a schedule is.
 * Part of the schedule part (src/schedule/: generate.c, check.c, simulate.c, svg.c), which depends on
 * base only, so both the planner and the parallel engines use it.
 *
 * Chunks. The model's layers are cut into C = P x V chunks in layer order; chunk 0 holds the
 * embedding, chunk C-1 the final norm, the head and the loss. strata_pp_chunk_stage() says which
 * stage holds a chunk: chunk c on stage c % P (GPipe, 1F1B, ZB-H1 with V = 1; interleaved 1F1B,
 * Megatron-LM's virtual stages), or in a V (ZB-V, V = 2: chunk c < P on stage c, chunk c >= P on
 * stage 2P-1-c, so the last chunk is on stage 0 again).
 *
 * Semantics the checker and the executor share. A stage runs its list in order. SEND_* never blocks
 * (the executor posts it non-blocking and completes it later); RECV_* blocks until the matching
 * send has been posted; FWD of (m, c) needs chunk c's input: the tokens (c = 0) or the activation
 * received from chunk c-1's stage (a RECV_ACT earlier in the list; none when chunk c-1 is on the
 * same stage); BWD of (m, c) needs its FWD done and the output gradient: the loss (c = C-1) or the
 * gradient received from chunk c+1's stage (or computed locally); WGT of (m, c) needs its BWD. The
 * messages between two stages in one direction arrive in the order they were sent: the channel from
 * stage a to stage b carries activations and gradients alike, so its RECVs on b come in the order of
 * its SENDs on a. Chunks that talk are always on neighbouring stages (s and s +- 1 mod P).
 *
 * Generated lists. Each SEND comes right after the action that produced its data; each RECV comes
 * right before the action that needs it, preceded by the RECVs of any message its channel delivers
 * first (those were sent earlier, so waiting for them costs nothing).
 *
 * Schedules (M micro-batches, P stages; bubble with equal forward and backward times):
 *   gpipe        every forward, then every backward                     (P-1)/(M+P-1)
 *   1f1b         PipeDream-Flush: P-1-s warm-up forwards on stage s, then one forward one backward
 *                                                                        (P-1)/(M+P-1), at most P
 *                                                                        micro-batches in flight
 *   interleaved  1F1B over V chunks per stage (Megatron-LM), M a multiple of P
 *                                                                        (P-1)/(V M + P - 1)
 *   zb-h1        1F1B with the backward split: BWD = input gradient, WGT = weight gradient,
 *                deferred into the drain (Qi et al., zero bubble H1)     about 1/3 of 1F1B's, same
 *                                                                        activation memory
 *   zb-v         V-shaped, V = 2, backward split, WGT filling the bubbles (Qi et al., ZB-V; the
 *                order of PyTorch's ScheduleZBVZeroBubble)                 zb-h1's up to M = P, below
 *                                                                        it beyond, (P-1)/(6M+P-1)
 *                                                                        from M = 2P (F = B = W);
 *                                                                        1f1b's peak activation
 *                                                                        memory (docs/pipeline.md)
 *
 * Thread-safety: every function reads only its arguments, except strata_pp_bubble and
 * strata_pp_peak_act, which keep a memo per thread. Errors: status + strata_last_error(). */
#ifndef STRATA_SCHEDULE_H
#define STRATA_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum strata_schedule {
    STRATA_SCHED_GPIPE = 0,   /* all forwards, then all backwards */
    STRATA_SCHED_1F1B,        /* PipeDream-Flush */
    STRATA_SCHED_INTERLEAVED, /* 1F1B over V model chunks per stage (Megatron-LM) */
    STRATA_SCHED_ZB_H1,       /* zero-bubble H1: weight gradients fill the drain (Qi et al.) */
    STRATA_SCHED_ZB_V,        /* zero-bubble V: two chunks per stage in a V (Qi et al.) */
    STRATA_SCHED_COUNT
} strata_schedule_t;

/* "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"; "?" out of range. */
STRATA_API const char *strata_schedule_name(strata_schedule_t s);
/* The names above (also "zbh1", "zero-bubble", "zbv"). Errors: STRATA_ERR_INVALID_ARG listing them. */
STRATA_API strata_status_t strata_schedule_parse(const char *s, strata_schedule_t *out);
/* True when the schedule splits the backward into BWD (input gradient) and WGT. */
STRATA_API bool strata_schedule_splits_backward(strata_schedule_t s);
/* The chunks per stage a schedule runs with: 1, V >= 2 (interleaved, given), 2 (zb-v). */
STRATA_API bool strata_schedule_chunks_ok(strata_schedule_t s, int vstages);

typedef enum strata_pp_op {
    STRATA_PP_FWD = 0,   /* forward of (mb, chunk) */
    STRATA_PP_BWD,       /* backward of (mb, chunk): the input gradient, and the weight gradient
                            too unless the schedule splits the backward */
    STRATA_PP_WGT,       /* weight gradient of (mb, chunk) (split schedules) */
    STRATA_PP_SEND_ACT,  /* send the output activation of (mb, chunk) to chunk+1's stage */
    STRATA_PP_RECV_ACT,  /* receive the input activation of (mb, chunk) from chunk-1's stage */
    STRATA_PP_SEND_GRAD, /* send the input gradient of (mb, chunk) to chunk-1's stage */
    STRATA_PP_RECV_GRAD, /* receive the output gradient of (mb, chunk) from chunk+1's stage */
    STRATA_PP_OP_COUNT
} strata_pp_op_t;

/* "F", "B", "W", "send_act", "recv_act", "send_grad", "recv_grad". */
STRATA_API const char *strata_pp_op_name(strata_pp_op_t op);

typedef struct strata_pp_action {
    uint8_t op;    /* strata_pp_op_t */
    int16_t chunk; /* 0 .. P*V-1 */
    int32_t mb;    /* 0 .. M-1 */
    int16_t peer;  /* SEND/RECV: the other stage; -1 otherwise */
} strata_pp_action_t;

/* A generated schedule: the action list of every stage. */
typedef struct strata_pp_plan {
    strata_schedule_t kind;
    int stages;   /* P */
    int vstages;  /* V: chunks per stage */
    int micro;    /* M */
    bool split;   /* backward split into BWD + WGT */
    int *count;   /* [P] actions per stage */
    strata_pp_action_t **actions; /* [P][count[s]] */
} strata_pp_plan_t;

/* The stage holding chunk c (see the file comment). */
STRATA_API int strata_pp_chunk_stage(strata_schedule_t kind, int stages, int vstages, int chunk);

/* Generates the schedule's action lists, then checks them (strata_pp_check). Refused with
 * STRATA_ERR_INVALID_ARG naming the constraint: stages, vstages or micro below 1; V not what the
 * schedule runs with (strata_schedule_chunks_ok); interleaved with M not a multiple of P. M below P
 * is allowed (the warm-up is cut short). *out is zeroed on failure. Errors also: NO_MEMORY. */
STRATA_API strata_status_t strata_pp_generate(strata_schedule_t kind, int stages, int vstages,
                                              int micro, strata_pp_plan_t *out);
STRATA_API void strata_pp_plan_free(strata_pp_plan_t *p);

/* Checks a plan (generated or built by hand): every (mb, chunk) has one FWD and one BWD on chunk's
 * stage (and one WGT, after its BWD, iff split); FWD before BWD; every chunk input and output
 * gradient that crosses stages has exactly one SEND on the producing stage and one RECV on the
 * consuming stage, the RECV before the action that needs it, and the SENDs and RECVs of every
 * (stage, stage, direction) channel in the same order; and the lists run to the end under the
 * semantics above (no deadlock). Errors: STRATA_ERR_INVALID_ARG naming the stage, the action index,
 * the action (e.g. "stage 2, action 17 (B mb 3 chunk 2): its output gradient is never received")
 * and, for a deadlock, what every stage is blocked on. */
STRATA_API strata_status_t strata_pp_check(const strata_pp_plan_t *p);

/* ---- simulation ---------------------------------------------------------------------------------- */

/* Durations of one action of each kind, per chunk (arrays of P*V; NULL: all zero), and the hop. */
typedef struct strata_pp_costs {
    const double *fwd_s;   /* FWD of one micro-batch on the chunk */
    const double *bwd_s;   /* BWD (input gradient only when split; the whole backward otherwise) */
    const double *wgt_s;   /* WGT (split schedules) */
    double p2p_s;          /* a SEND's data reaching the other stage after the SEND is posted */
    const double *act_bytes; /* activation memory of one (mb, chunk) from its FWD to its BWD; the
                                part kept for WGT (wgt_bytes) until its WGT; NULL: 1 each */
    const double *wgt_bytes;
} strata_pp_costs_t;

/* One compute action as run (simulated or measured). */
typedef struct strata_pp_span {
    double start, end; /* seconds from the step's start */
    uint8_t op;        /* FWD, BWD or WGT */
    int16_t chunk;
    int32_t mb;
} strata_pp_span_t;

/* A step's timeline: what every stage computed when, and what it cost. */
typedef struct strata_pp_timeline {
    int stages;
    double makespan;          /* the last action's end on any stage */
    int *count;               /* [P] spans per stage */
    strata_pp_span_t **spans; /* [P][count[s]], in list order */
    double *busy_s;           /* [P] */
    double *bubble;           /* [P] idle share of [0, makespan]: 1 - busy / makespan */
    double bubble_mean;       /* mean over the stages */
    double *peak_act;         /* [P] most activation memory held at once (act_bytes units) */
} strata_pp_timeline_t;

/* Runs the plan under the semantics above with the given durations: every action starts when its
 * stage is free and its inputs have arrived (a RECV's data p2p_s after its SEND was posted; a
 * RECV holds its stage until then). Memory: a FWD allocates act_bytes[c], a BWD frees it (keeping
 * wgt_bytes[c] until the WGT when the plan splits the backward). c may be NULL (every duration 0).
 * The plan is checked first (strata_pp_check's errors). Errors also: STRATA_ERR_INVALID_ARG for a
 * negative or non-finite cost; NO_MEMORY. *out is zeroed on failure. */
STRATA_API strata_status_t strata_pp_simulate(const strata_pp_plan_t *p, const strata_pp_costs_t *c,
                                              strata_pp_timeline_t *out);
/* Frees count, every spans[s], spans, busy_s, bubble and peak_act (each its own malloc'd block, or
 * NULL: a measured timeline built by hand is freed the same way) and zeroes *t. */
STRATA_API void strata_pp_timeline_free(strata_pp_timeline_t *t);

/* The bubble of a schedule with every chunk's FWD taking 1, BWD b and WGT w (b + w = the whole
 * backward: a schedule that does not split it runs BWD in b + w), no hop time: the mean idle share,
 * and in *peak_act (may be NULL) the peak activation memory of the stage holding the most, in
 * activations of one (micro-batch, chunk) kept from its FWD to its WGT (act_bytes = wgt_bytes = 1).
 * For the planner's search, which asks it hundreds of thousands of times: memoised per thread. It
 * times the generator's own lists (compute actions; without hop time the sends and receives cost
 * nothing) by their longest path, with two shortcuts that change no result: above 3P micro-batches
 * it times M1 and M1 + P micro-batches (M1 = M mod P, plus 3P) and extends the difference to M (the
 * steady state repeats every P micro-batches; the tests compare it with whole lists), and where
 * the makespan is one linear function of (b, w) at the corners of a cell of (b, w) it is that
 * function inside the cell (the makespan is a maximum of linear functions, hence convex).
 * b and w >= 0. Errors as strata_pp_generate. */
STRATA_API strata_status_t strata_pp_bubble(strata_schedule_t kind, int stages, int vstages,
                                            int micro, double b, double w, double *bubble,
                                            double *peak_act);

/* The peak activation memory of stage `stage` (-1: of the stage holding the most) under the
 * schedule, in the units of strata_pp_bubble's peak_act: it depends on the order of each stage's
 * list alone. Memoised with strata_pp_bubble. Errors as strata_pp_generate; stage out of range. */
STRATA_API strata_status_t strata_pp_peak_act(strata_schedule_t kind, int stages, int vstages,
                                              int micro, int stage, double *peak_act);

/* Draws a timeline as SVG (one row per stage, F/B/W coloured, idle time blank), or two (planned
 * above, measured below, on one time axis) when `second` is not NULL; titles name each. */
STRATA_API strata_status_t strata_pp_timeline_svg(const strata_pp_timeline_t *first,
                                                  const char *first_title,
                                                  const strata_pp_timeline_t *second,
                                                  const char *second_title, FILE *f);

/* What a picture may carry besides its timelines (all optional: zero means none). */
typedef struct strata_pp_svg_opts {
    const char *title;      /* bold first line */
    const char *subtitle;   /* second line */
    double tail_s;          /* a block after each timeline's makespan on every stage: what follows
                               the pipeline (the planner's data-parallel tail and optimizer) */
    const char *tail_label; /* its name in the legend */
    const char *const *notes; /* lines of text below the legend */
    int nnotes;
} strata_pp_svg_opts_t;

/* strata_pp_timeline_svg with a title, a tail and notes (opts may be NULL). */
STRATA_API strata_status_t strata_pp_timeline_svg_opts(const strata_pp_timeline_t *first,
                                                       const char *first_title,
                                                       const strata_pp_timeline_t *second,
                                                       const char *second_title,
                                                       const strata_pp_svg_opts_t *opts, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
