/* `strata probe`: measures the fabric a job runs on and calibrates the cost model with it.
 *
 * Run collectively by every rank of a communicator that knows its place (strata_comm_fabric: from
 * STRATA_TOPO_PATH / STRATA_TOPO_FILE, else hosts). It is the measurement a communicator makes at
 * creation when no cluster file gives its links (strata_comm_measure_links, link_calib.h): for
 * each level of the tree, a pair of ranks whose lowest common unit is that level (from the two
 * largest child units) measures, with the other ranks quiet,
 *   latency     half the round trip of a small ping-pong
 *   bandwidth   one direction, one stream (per-rank bandwidth of the level)
 * and, above the host level, the oversubscription of the uplinks: every rank of one child unit
 * streams at once to a partner in another; oversubscription = pairs * bandwidth / aggregate.
 * The result is a tree of levels (topo.h) that strata_topo_write_json turns into a cluster file.
 */
#ifndef STRATA_PROBE_H
#define STRATA_PROBE_H

#include "strata/comm.h"
#include "strata/link_calib.h"
#include "strata/topo.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct strata_probe_opts {
    size_t stream_bytes; /* bytes of every bandwidth stream; 0 (default): each sized to last about
                            STRATA_TOPO_CALIBRATE_MS */
    int lat_iters;       /* ping-pong round trips per latency test (default 20) */
} strata_probe_opts_t;

typedef struct strata_probe_result {
    strata_topo_t topo;        /* the fabric's levels with the measured numbers written in and
                                  fanouts as the job sees them: a cluster file */
    strata_link_calib_t calib; /* per level, what was measured (calib.sample) */
} strata_probe_result_t;

STRATA_API strata_probe_opts_t strata_probe_opts_default(void);

/* Collective over `comm`: every rank calls it; every rank gets the result. Errors: those of the
 * communicator (a dead peer is named), STRATA_ERR_INVALID_ARG for bad options or a measurement
 * that is not physical (the message names the level). */
STRATA_API strata_status_t strata_probe_run(strata_comm_t *comm, const strata_probe_opts_t *opts,
                                            strata_probe_result_t *out);

#ifdef __cplusplus
}
#endif
#endif
