/* What the files of the schedule part share: argument checks, the compute order of a stage (the
 * generator's core, which strata_pp_generate completes with sends and receives and the planner's
 * memo times directly), and the indexing of (micro-batch, chunk) units and their messages. */
#ifndef ST_SCHEDULE_INTERNAL_H
#define ST_SCHEDULE_INTERNAL_H

#include "strata/schedule.h"

/* The most (micro-batch, chunk) units a schedule may have: keeps every list length and index in
 * an int with room to spare (a stage's list holds at most 5 actions per unit). */
#define ST_PP_MAX_UNITS (1 << 24)

/* Checks kind, stages, vstages and micro as strata_pp_generate documents (STRATA_ERR_INVALID_ARG
 * naming the constraint), and that lists of `listed` micro-batches stay within ST_PP_MAX_UNITS. */
strata_status_t st_pp_validate(strata_schedule_t kind, int stages, int vstages, int micro,
                               int listed);

/* Compute actions (FWD, BWD, WGT) one stage runs: M x V x (3 if split, else 2). */
int st_pp_order_len(strata_schedule_t kind, int vstages, int micro);

/* Writes stage `stage`'s compute actions, in the order the schedule runs them, to out (room for
 * st_pp_order_len()); peer is -1. Arguments already validated. Returns the count written. */
int st_pp_order(strata_schedule_t kind, int stages, int vstages, int micro, int stage,
                strata_pp_action_t *out);

/* Index of the unit (micro-batch mb, chunk c) among the M x C units. */
static inline long st_pp_unit(int chunks, int mb, int chunk)
{
    return (long)mb * chunks + chunk;
}

/* The channel from stage `from` to its neighbour `to` (s +- 1 mod P) among the 2P channels. */
static inline int st_pp_channel(int stages, int from, int to)
{
    return 2 * from + (to == (from + 1) % stages ? 0 : 1);
}

/* "stage 2, action 17 (B mb 3 chunk 2)" into buf. */
const char *st_pp_describe(int stage, int index, const strata_pp_action_t *a, char *buf,
                           size_t size);

#endif
