/* Fuzz target: scheduler traces (src/sched/sim.c, strata_trace_load) for the cluster of
 * data/sched/topology.conf. An accepted trace must write back to one that reads again with the
 * same events, and replay under every policy, as `strata sched --trace FILE` does. */
#include "common.h"

#include "strata/sched.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 8192) // the replay is the slow part; a few hundred events cover it
        return 0;
    const strata_cluster_t *c = fuzz_small_cluster();
    const char *path = fuzz_file("fuzz.trace", data, size);
    strata_trace_t t;
    if (strata_trace_load(c, path, &t) < 0) {
        FUZZ_CHECK(strata_last_error()[0]);
        return 0;
    }
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    strata_trace_write(c, &t, f);
    fclose(f);
    strata_trace_t back;
    path = fuzz_file("written.trace", out, len);
    free(out);
    FUZZ_CHECK(strata_trace_load(c, path, &back) == STRATA_OK);
    FUZZ_CHECK(back.nevents == t.nevents);
    for (int i = 0; i < t.nevents; i++) // exactly the same events, so a replay is the same
        FUZZ_CHECK(back.ev[i].kind == t.ev[i].kind && back.ev[i].time_s == t.ev[i].time_s &&
                   back.ev[i].duration_s == t.ev[i].duration_s &&
                   back.ev[i].repair_s == t.ev[i].repair_s && back.ev[i].id == t.ev[i].id);
    strata_trace_free(&back);

    strata_sim_opts_t o = strata_sim_opts_default();
    o.spares = 1;
    for (int pol = 0; pol < STRATA_POLICY_COUNT; pol++) {
        o.policy = (strata_policy_t)pol;
        strata_sim_report_t r;
        if (strata_sim_run(c, &t, &o, &r) == STRATA_OK)
            FUZZ_CHECK(r.jobs >= r.started && r.started >= r.finished);
    }
    strata_trace_free(&t);
    return 0;
}
