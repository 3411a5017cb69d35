/* Fuzz target: Slurm topology.conf (src/topo/topo_slurm.c, strata_slurm_topo_parse). An accepted
 * file must give every node a path (STRATA_TOPO_PATH) and, when small, become the scheduler's
 * cluster and take a placement, as `strata place --slurm FILE` does. */
#include "common.h"

#include "strata/sched.h"
#include "strata/topo.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    strata_slurm_topo_t st;
    if (strata_slurm_topo_parse(text, "topology.conf", &st) < 0) {
        FUZZ_CHECK(strata_last_error()[0]);
        FUZZ_CHECK(st.nnodes == 0 && st.nswitches == 0);
        free(text);
        return 0;
    }
    FUZZ_CHECK(st.nnodes > 0);
    for (int i = 0; i < st.nnodes && i < 64; i++) {
        char path[4096];
        int depth = strata_slurm_topo_host_path(&st, st.nodes[i].name, path, sizeof path);
        FUZZ_CHECK(depth >= 1 || strata_last_error()[0]);
    }
    if (st.nnodes <= 512) {
        strata_cluster_t c;
        if (strata_cluster_from_slurm(&st, NULL, 4, &c) == STRATA_OK) {
            FUZZ_CHECK(c.nhosts == st.nnodes);
            for (int i = 0; i < c.nhosts; i++)
                FUZZ_CHECK(strata_cluster_find_host(&c, c.hosts[i].name) == i);
            strata_job_t job = strata_job_default();
            job.tp = 4;
            job.dp = c.nhosts > 1 ? 2 : 1;
            strata_place_opts_t o = strata_place_opts_default();
            strata_placement_t p;
            for (int pol = 0; pol < STRATA_POLICY_COUNT; pol++) {
                o.policy = (strata_policy_t)pol;
                if (strata_place(&c, &job, &o, &p) == STRATA_OK)
                    strata_placement_free(&p);
            }
            strata_cluster_free(&c);
        }
    }
    strata_slurm_topo_free(&st);
    free(text);
    return 0;
}
