/* Link calibration: the fabric's level parameters (topo.h) fitted from measurements.
 *
 * A job that knows where its ranks sit (STRATA_TOPO_PATH, a Slurm topology.conf) but not how fast
 * the links are measures them: per level of the fabric, one pair of ranks whose lowest common
 * unit is that level exchanges a ping-pong (latency) and one stream (bandwidth), and the k ranks
 * of one child unit stream at once to k partners in another (what the child's uplink carries).
 * The communicator takes these measurements at creation (comm/calibrate.c, docs/topology.md);
 * this file only turns them into level parameters, so every rank that holds the same samples
 * derives bit-identical levels and so picks the same algorithms.
 *
 * The fit, for a level with a measured sample:
 *   latency_s  = the sample's one-way latency (half a ping-pong round trip)
 *   bw_Bps     = bytes / (secs - 2 latency): a stream's time runs from its first byte sent to the
 *                receiver's acknowledgement, one latency each way (the two latencies are taken
 *                off only up to half of secs: on a loaded machine a ping-pong, which wakes a rank
 *                at every message, can be slower than a stream)
 *   oversub    = pairs * bw_Bps / aggregate, at least 1, where aggregate = pairs * pair_bytes /
 *                (pair_secs - 2 latency), the same way, pair_secs the slowest pair's: so a child
 *                unit of s ranks gets the uplink the model prices as s * bw_Bps / oversub
 *                (flows.c), the capacity the k pairs reached (exact when k = s; the model assumes
 *                one ratio per level for the rest). 1 when fewer than two pairs ran.
 *   efficiency = 0 (the measured rate is what collectives reach; the fabric model then uses it
 *                as is)
 * Name, fanout and link class stay as they were. A level without a measured sample keeps its
 * parameters: no pair of ranks crosses it, so no flow of the job prices it.
 *
 * Thread-safety: every function only reads or writes what it is given.
 */
#ifndef STRATA_LINK_CALIB_H
#define STRATA_LINK_CALIB_H

#include "strata/status.h"
#include "strata/topo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What was measured at one level. All times in seconds, sizes in bytes. */
typedef struct strata_link_sample {
    bool measured;     /* a pair of ranks meets at this level and was measured */
    int a, b;          /* the pair (communicator ranks): a sends */
    double latency_s;  /* one-way latency: half the ping-pong round trip */
    double bytes;      /* one stream from a to b ... */
    double secs;       /* ... taking this long, first byte sent to acknowledgement received */
    int pairs;         /* concurrent pairs across one child unit's uplink (< 2: not run) */
    double pair_bytes; /* bytes each of those pairs streamed */
    double pair_secs;  /* the slowest pair's time */
} strata_link_sample_t;

/* The calibration of a fabric's levels: the samples, and the levels fitted from them. */
typedef struct strata_link_calib {
    bool done;      /* levels were calibrated */
    double seconds; /* what measuring cost (wall clock) */
    int nlevels;
    strata_link_sample_t sample[STRATA_TOPO_MAX_LEVELS];
    strata_topo_level_t level[STRATA_TOPO_MAX_LEVELS]; /* as fitted (unmeasured: as given) */
} strata_link_calib_t;

/* The rates a measured sample shows, bytes/s: one stream's (bw_Bps), and the concurrent streams'
 * aggregate (0 when fewer than two pairs ran), as the fit computes them. */
STRATA_API void strata_link_sample_rates(const strata_link_sample_t *s, double *bw_Bps,
                                         double *agg_Bps);

/* Fits one level from its sample as described above, writing latency_s, bw_Bps, oversub and
 * efficiency into *lv (which keeps its name, fanout and class). Errors: STRATA_ERR_INVALID_ARG
 * when the sample is not measured or not physical (latency < 0, a stream without bytes or time, a
 * concurrent test without bytes or time, anything not finite); the message names the level and
 * the field, and *lv is unchanged. */
STRATA_API strata_status_t strata_link_calib_fit_level(const strata_link_sample_t *s,
                                                       strata_topo_level_t *lv);

/* Fits every measured level of `levels` (samples[l] for level l, l < levels->nlevels) in place;
 * levels without a measured sample keep theirs. On error (the first bad sample) `levels` is
 * unchanged. */
STRATA_API strata_status_t strata_link_calib_fit(strata_topo_t *levels,
                                                 const strata_link_sample_t *samples);

/* Writes a table of the calibration: per level the pair, latency, bandwidth, concurrent pairs,
 * their aggregate and the oversubscription fitted. */
STRATA_API void strata_link_calib_describe(const strata_link_calib_t *calib, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
