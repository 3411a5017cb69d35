/* Helpers shared by the scheduler's files (place.c, sim.c, job.c); not part of the public API. */
#ifndef ST_SCHED_INTERNAL_H
#define ST_SCHED_INTERNAL_H

#include "strata/sched.h"

#include <stdint.h>

/* splitmix64: the scheduler's seeded generator (same seed, same sequence on every platform). */
uint64_t st_sched_rand(uint64_t *state);

/* Validates the layout against the cluster; gives processes per host and hosts needed. */
strata_status_t st_job_check(const strata_cluster_t *c, const strata_job_t *job, int *pph,
                             int *nhosts);

/* Marks `spares` free hosts of every unit of `level` (the last ones of each) in is_spare. */
strata_status_t st_mark_spares(const strata_cluster_t *c, int spares, int level, bool *is_spare);

#endif
