/* `strata probe`: measures the fabric a job runs on and calibrates the cost model with it.
 *
 * Run collectively by every rank of a communicator that knows its place (strata_comm_fabric: from
 * STRATA_TOPO_PATH / STRATA_TOPO_FILE, else hosts). For each level of the tree it picks a
 * representative pair of ranks whose lowest common unit is that level and measures, with the other
 * ranks quiet:
 *   latency     half the round trip of a small ping-pong
 *   bandwidth   one direction, large messages back to back (per-rank bandwidth of the level)
 * and, above the host level, the oversubscription of the uplinks: every rank of one child unit
 * sends at once to a partner in another child; oversubscription = pairs * bandwidth / aggregate.
 * The result is a tree of levels (topo.h) that strata_topo_write_json turns into a cluster file.
 */
#ifndef STRATA_PROBE_H
#define STRATA_PROBE_H

#include "strata/comm.h"
#include "strata/topo.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct strata_probe_opts {
    size_t bw_bytes;   /* message size of the bandwidth test (default 4 MiB) */
    int bw_iters;      /* messages per bandwidth test (default 8) */
    int lat_iters;     /* ping-pongs per latency test (default 200) */
} strata_probe_opts_t;

typedef struct strata_probe_level {
    bool measured;     /* false: the job has no pair crossing this level; the input values stay */
    int a, b;          /* the representative pair (communicator ranks) */
    double latency_s;  /* one way */
    double bw_Bps;     /* one pair, one direction */
    int pairs;         /* concurrent pairs of the uplink test (0: not run) */
    double agg_Bps;    /* their aggregate */
    double oversub;    /* >= 1 */
} strata_probe_level_t;

typedef struct strata_probe_result {
    strata_topo_t topo; /* the fabric's levels with the measured numbers written in */
    strata_probe_level_t level[STRATA_TOPO_MAX_LEVELS];
} strata_probe_result_t;

STRATA_API strata_probe_opts_t strata_probe_opts_default(void);

/* Collective over `comm`: every rank calls it; every rank gets the result. Errors: those of the
 * communicator (a dead peer is named), STRATA_ERR_INVALID_ARG for bad options. */
STRATA_API strata_status_t strata_probe_run(strata_comm_t *comm, const strata_probe_opts_t *opts,
                                            strata_probe_result_t *out);

#ifdef __cplusplus
}
#endif
#endif
