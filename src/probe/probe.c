/* The fabric probe (probe.h): the communicator's link measurement (strata_comm_measure_links,
 * the one a communicator makes at creation when it calibrates) written into the fabric's levels,
 * with the fanouts the job sees, ready to be saved as a cluster file. */
#include "strata/probe.h"

#include <string.h>

#include "base/base.h"

strata_probe_opts_t strata_probe_opts_default(void)
{
    return (strata_probe_opts_t){.stream_bytes = 0, .lat_iters = 20};
}

/* Children of the largest unit of level l: for l = 0 ranks in a host, above it units of l - 1. */
static int fanout(const strata_fabric_t *f, int l)
{
    int best = 1;
    for (int u = 0; u < f->nunits[l]; u++) {
        int kids = 0;
        for (int r = 0; r < f->nranks; r++) {
            if (strata_fabric_unit(f, l, r) != u)
                continue;
            int child = l ? strata_fabric_unit(f, l - 1, r) : r, seen = 0;
            for (int q = 0; q < r && !seen; q++) // count each child once, at its lowest rank
                seen = strata_fabric_unit(f, l, q) == u &&
                       (l ? strata_fabric_unit(f, l - 1, q) : q) == child;
            kids += !seen;
        }
        best = kids > best ? kids : best;
    }
    return best;
}

strata_status_t strata_probe_run(strata_comm_t *comm, const strata_probe_opts_t *opts,
                                 strata_probe_result_t *out)
{
    strata_probe_opts_t o = opts ? *opts : strata_probe_opts_default();
    if (!comm || !out || o.lat_iters < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "probe: expected a communicator, a result and a "
                                                "positive number of ping-pongs");
    memset(out, 0, sizeof *out);
    ST_TRY(strata_comm_measure_links(comm, o.lat_iters, o.stream_bytes, &out->calib));
    const strata_fabric_t *f = strata_comm_fabric(comm);
    out->topo = f->topo;
    memcpy(out->topo.level, out->calib.level, sizeof out->topo.level);
    for (int l = 0; l < f->topo.nlevels; l++)
        out->topo.level[l].fanout = fanout(f, l);
    return STRATA_OK;
}
