/* Internals shared by the node's files: the STATS payload layout. */
#ifndef ST_POOL_NODE_H
#define ST_POOL_NODE_H

#include <stddef.h>
#include <stdint.h>

#include "strata/pool.h"

#define PL_STATS_FIELDS 14

/* The counters as the u64 array a STATS_REPLY carries, and back. */
void pl_stats_pack(const strata_pool_stats_t *s, uint64_t out[PL_STATS_FIELDS]);
void pl_stats_unpack(const uint64_t in[PL_STATS_FIELDS], strata_pool_stats_t *s);
/* The zero filter's threshold (STRATA_POOL_ZERO_THRESHOLD). */
float pl_zero_threshold(void);

#endif
