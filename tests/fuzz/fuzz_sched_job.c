/* Fuzz target: a job read from `strata plan --json` output (src/sched/output.c,
 * strata_job_load_plan), then placed on the cluster of data/sched/topology.conf and written out
 * as a hostfile, a rankfile and an environment, as `strata place --plan FILE` does. */
#include "common.h"

#include "strata/sched.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file("plan.json", data, size);
    strata_job_t job;
    if (strata_job_load_plan(path, &job) < 0) {
        FUZZ_CHECK(strata_last_error()[0]);
        return 0;
    }
    FUZZ_CHECK(strata_job_world(&job) >= 1);
    const strata_cluster_t *c = fuzz_small_cluster();
    strata_place_opts_t o = strata_place_opts_default();
    strata_placement_t p;
    if (strata_place(c, &job, &o, &p) == STRATA_OK) {
        FILE *f = fopen("/dev/null", "w");
        strata_write_slurm_hostfile(c, &p, f);
        strata_write_rankfile(c, &p, f);
        strata_write_env(c, &p, &job, f);
        fclose(f);
        strata_placement_free(&p);
    }
    return 0;
}
