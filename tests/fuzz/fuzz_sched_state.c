/* Fuzz target: host state files (src/sched/cluster.c, strata_cluster_parse_state) on the cluster of
 * data/sched/topology.conf. After an accepted file every host holds a known state, and the cluster
 * still takes a placement, as `strata place --state FILE` does. */
#include "common.h"

#include "strata/sched.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    strata_cluster_t *c = fuzz_small_cluster();
    for (int i = 0; i < c->nhosts; i++)
        c->hosts[i].state = STRATA_HOST_FREE;
    char *text = fuzz_cstr(data, size);
    if (strata_cluster_parse_state(c, text, "fuzz.state") < 0) {
        FUZZ_CHECK(strata_last_error()[0]);
        free(text);
        return 0;
    }
    for (int i = 0; i < c->nhosts; i++)
        FUZZ_CHECK((unsigned)c->hosts[i].state <= STRATA_HOST_FAILED);
    strata_job_t job = strata_job_default();
    job.tp = 4;
    job.pp = 2;
    strata_place_opts_t o = strata_place_opts_default();
    o.spares = 1;
    strata_placement_t p;
    if (strata_place(c, &job, &o, &p) == STRATA_OK) {
        for (int r = 0; r < p.world; r++)
            FUZZ_CHECK(c->hosts[p.rank_host[r]].state == STRATA_HOST_FREE);
        strata_placement_free(&p);
    }
    free(text);
    return 0;
}
