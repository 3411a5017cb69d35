/* Link calibration (link_calib.h): level parameters fitted from a probe's samples. Pure arithmetic
 * on what it is given; the measuring is the communicator's (comm/calibrate.c). */
#include "strata/link_calib.h"

#include <math.h>

#include "base/base.h"

/* Bytes per second of `bytes` moved in `secs`, of which two latencies were waiting, but never
 * more than half: on a loaded machine a ping-pong, which wakes a rank at every message, can be
 * slower than a stream, which keeps it busy. */
static double rate(double bytes, double secs, double latency_s)
{
    double wait = 2 * latency_s < secs / 2 ? 2 * latency_s : secs / 2;
    return bytes / (secs - wait);
}

static strata_status_t check(const strata_link_sample_t *s, const char *level)
{
    if (!s->measured)
        return st_error(STRATA_ERR_INVALID_ARG, "calibration of level %s: nothing was measured",
                        level);
    if (!(s->latency_s >= 0) || !isfinite(s->latency_s))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "calibration of level %s: expected a latency >= 0, got %g s", level,
                        s->latency_s);
    if (!(s->bytes > 0) || !isfinite(s->bytes) || !(s->secs > 0) || !isfinite(s->secs))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "calibration of level %s: expected a stream of some bytes taking some "
                        "time, got %g bytes in %g s",
                        level, s->bytes, s->secs);
    if (s->pairs >= 2 && (!(s->pair_bytes > 0) || !isfinite(s->pair_bytes) || !(s->pair_secs > 0) ||
                          !isfinite(s->pair_secs)))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "calibration of level %s: expected %d concurrent streams of some bytes "
                        "taking some time, got %g bytes in %g s",
                        level, s->pairs, s->pair_bytes, s->pair_secs);
    return STRATA_OK;
}

void strata_link_sample_rates(const strata_link_sample_t *s, double *bw_Bps, double *agg_Bps)
{
    *bw_Bps = rate(s->bytes, s->secs, s->latency_s);
    *agg_Bps = s->pairs >= 2 ? s->pairs * rate(s->pair_bytes, s->pair_secs, s->latency_s) : 0;
}

strata_status_t strata_link_calib_fit_level(const strata_link_sample_t *s, strata_topo_level_t *lv)
{
    ST_TRY(check(s, lv->name));
    double bw, agg, oversub = 1;
    strata_link_sample_rates(s, &bw, &agg);
    if (s->pairs >= 2) {
        oversub = s->pairs * bw / agg;
        oversub = oversub > 1 ? oversub : 1; // pairs never share less than one stream got alone
    }
    lv->latency_s = s->latency_s;
    lv->bw_Bps = bw;
    lv->oversub = oversub;
    lv->efficiency = 0;
    return STRATA_OK;
}

strata_status_t strata_link_calib_fit(strata_topo_t *levels, const strata_link_sample_t *samples)
{
    strata_topo_t fitted = *levels;
    for (int l = 0; l < levels->nlevels; l++)
        if (samples[l].measured)
            ST_TRY(strata_link_calib_fit_level(&samples[l], &fitted.level[l]));
    *levels = fitted;
    return STRATA_OK;
}

void strata_link_calib_describe(const strata_link_calib_t *calib, FILE *f)
{
    fprintf(f, "%-8s %9s %12s %14s %6s %14s %8s\n", "level", "pair", "latency_us", "bandwidth_MBps",
            "pairs", "aggregate_MBps", "oversub");
    for (int l = 0; l < calib->nlevels; l++) {
        const strata_link_sample_t *s = &calib->sample[l];
        const strata_topo_level_t *lv = &calib->level[l];
        if (!s->measured) {
            fprintf(f, "%-8s %9s   (no pair of ranks crosses this level)\n", lv->name, "-");
            continue;
        }
        char pair[32], agg[32] = "-";
        double bw, agg_Bps;
        strata_link_sample_rates(s, &bw, &agg_Bps);
        snprintf(pair, sizeof pair, "%d-%d", s->a, s->b);
        if (s->pairs >= 2)
            snprintf(agg, sizeof agg, "%.1f", agg_Bps / 1e6);
        fprintf(f, "%-8s %9s %12.1f %14.1f %6d %14s %8.2f\n", lv->name, pair, lv->latency_s * 1e6,
                lv->bw_Bps / 1e6, s->pairs >= 2 ? s->pairs : 1, agg, lv->oversub);
    }
}
