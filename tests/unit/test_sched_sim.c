/* The scheduler simulation: a seeded trace and its replay are reproducible, a failure inside a
 * running job moves only that host's ranks to a spare of the same zone, traces are read and
 * malformed ones refused with file:line, utilisation samples cover the whole run. */
#include "harness/st_test.h"
#include "strata/sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void small_preset(strata_cluster_t *c)
{
    // 8 accelerators per host, racks of 2, zones of 8 racks, 4 zones: 64 hosts.
    strata_topo_t t;
    strata_topo_init(&t, "sim-small");
    const char *names[] = {"host", "rack", "zone", "dc"};
    int fan[] = {8, 2, 8, 4};
    double over[] = {1, 1, 1, 4};
    for (int i = 0; i < 4; i++) {
        strata_topo_level_t lv = {.fanout = fan[i], .bw_Bps = i ? 50e9 : 450e9,
                                  .latency_s = 3e-6 + i * 1e-6, .oversub = over[i],
                                  .link_class = i ? STRATA_LINK_SCALE_OUT : STRATA_LINK_SCALE_UP};
        snprintf(lv.name, sizeof lv.name, "%s", names[i]);
        assert_int_equal(strata_topo_add_level(&t, &lv), STRATA_OK);
    }
    assert_int_equal(strata_cluster_from_topo(&t, "h", c), STRATA_OK);
    assert_int_equal(c->nhosts, 64);
}

static void same_report(const strata_sim_report_t *a, const strata_sim_report_t *b)
{
    assert_int_equal(a->started, b->started);
    assert_int_equal(a->finished, b->finished);
    assert_true(a->makespan_s == b->makespan_s);
    assert_true(a->utilisation == b->utilisation);
    assert_true(a->wait_mean_s == b->wait_mean_s);
    assert_true(a->cross_zone_bytes == b->cross_zone_bytes);
    assert_true(a->fragmentation == b->fragmentation);
    assert_int_equal(a->spare_used, b->spare_used);
    assert_int_equal(a->ranks_moved, b->ranks_moved);
}

static void test_reproducible(void **state)
{
    (void)state;
    strata_cluster_t c;
    small_preset(&c);
    strata_trace_t t1, t2, t3;
    assert_int_equal(strata_trace_generate(&c, 60, 6, 42, &t1), STRATA_OK);
    assert_int_equal(strata_trace_generate(&c, 60, 6, 42, &t2), STRATA_OK);
    assert_int_equal(strata_trace_generate(&c, 60, 6, 43, &t3), STRATA_OK);
    assert_int_equal(t1.nevents, 66);
    assert_memory_equal(t1.ev, t2.ev, (size_t)t1.nevents * sizeof *t1.ev);
    assert_memory_not_equal(t1.ev, t3.ev, (size_t)t1.nevents * sizeof *t1.ev);
    for (int p = 0; p < STRATA_POLICY_COUNT; p++) {
        strata_sim_opts_t o = strata_sim_opts_default();
        o.policy = (strata_policy_t)p;
        o.seed = 5;
        strata_sim_report_t a, b;
        assert_int_equal(strata_sim_run(&c, &t1, &o, &a), STRATA_OK);
        assert_int_equal(strata_sim_run(&c, &t2, &o, &b), STRATA_OK);
        same_report(&a, &b);
        assert_int_equal(a.jobs, 60);
        assert_int_equal(a.finished, 60);
        assert_true(a.utilisation > 0 && a.utilisation <= 1);
    }
    // The cluster given is not changed by a replay.
    for (int h = 0; h < c.nhosts; h++)
        assert_int_equal(c.hosts[h].state, STRATA_HOST_FREE);
    strata_trace_free(&t1);
    strata_trace_free(&t2);
    strata_trace_free(&t3);
    strata_cluster_free(&c);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A 4-host job in zone 0; one of its hosts fails: with 2 spares per zone the replacement is a
 * spare of zone 0, one host's 8 ranks move, nothing restarts. */
static void test_failure_uses_spare(void **state)
{
    (void)state;
    strata_cluster_t c;
    small_preset(&c);
    char path[] = "/tmp/strata-test-trace-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    // Where the policy puts the job (the simulation places it the same way at time 0).
    strata_job_t j = strata_job_default();
    j.tp = 8;
    j.pp = 4;
    strata_place_opts_t po = strata_place_opts_default();
    po.spares = 2;
    strata_placement_t p;
    assert_int_equal(strata_place(&c, &j, &po, &p), STRATA_OK);
    char text[256];
    snprintf(text, sizeof text, "job 0 0 32 tp=8 pp=4 duration=1000\nfail 10 %s repair=50\n",
             c.hosts[p.hosts[1]].name);
    strata_placement_free(&p);
    write_file(path, text);
    strata_trace_t t;
    assert_int_equal(strata_trace_load(&c, path, &t), STRATA_OK);
    assert_int_equal(t.nevents, 2);
    strata_sim_opts_t o = strata_sim_opts_default();
    strata_sim_report_t r;
    assert_int_equal(strata_sim_run(&c, &t, &o, &r), STRATA_OK);
    assert_int_equal(r.started, 1);
    assert_int_equal(r.failures_hit_jobs, 1);
    assert_int_equal(r.ranks_moved, 8);
    assert_int_equal(r.restarts, 0);
    assert_int_equal(r.spare_used, 1);
    assert_int_equal(r.same_domain, 1);
    assert_int_equal(r.finished, 1);
    strata_trace_free(&t);
    write_file(path, "job 0 0 32 tp=8 pp=4 duration=1000\njob 1 1 12 tp=8 duration=5\n");
    assert_int_equal(strata_trace_load(&c, path, &t), STRATA_ERR_PARSE);
    assert_non_null(strstr(strata_last_error(), ":2: expected ACCELS a multiple"));
    write_file(path, "fail 3 nohost\n");
    assert_int_equal(strata_trace_load(&c, path, &t), STRATA_ERR_PARSE);
    assert_non_null(strstr(strata_last_error(), ":1: expected a host of the cluster"));
    write_file(path, "boot 3 h00001\n");
    assert_int_equal(strata_trace_load(&c, path, &t), STRATA_ERR_PARSE);
    assert_non_null(strstr(strata_last_error(), ":1: expected a line starting with job or fail"));
    // Found by fuzzing `strata sched --trace` (UBSan): values converted to int before any range
    // check (tp=7.7e16), and a trace without events sorted as qsort(NULL, 0).
    write_file(path, "job 0 0 32 tp=77777777777777777 duration=5\n");
    assert_int_equal(strata_trace_load(&c, path, &t), STRATA_ERR_PARSE);
    assert_non_null(strstr(strata_last_error(), ":1: expected tp=, pp=, cp= (1 to"));
    write_file(path, "job 0 0 32 tp=8 priority=1e300 duration=5\n");
    assert_int_equal(strata_trace_load(&c, path, &t), STRATA_ERR_PARSE);
    write_file(path, "job 0 0 32 tp=8 duration=nan\n");
    assert_int_equal(strata_trace_load(&c, path, &t), STRATA_ERR_PARSE);
    write_file(path, "job inf 0 32 tp=8 duration=5\n");
    assert_int_equal(strata_trace_load(&c, path, &t), STRATA_ERR_PARSE);
    write_file(path, "fail 3 h00001 repair=-5\n");
    assert_int_equal(strata_trace_load(&c, path, &t), STRATA_ERR_PARSE);
    assert_non_null(strstr(strata_last_error(), ":1: expected repair=SECONDS"));
    // A written trace reads back as exactly the same events (with %.3f a duration of 1e-4 was
    // written as 0.000 and refused; generated times were rounded, so a replay differed).
    strata_trace_t g, back;
    assert_int_equal(strata_trace_generate(&c, 40, 4, 7, &g), STRATA_OK);
    g.ev[0].duration_s = 1e-4;
    FILE *f = fopen(path, "w");
    strata_trace_write(&c, &g, f);
    fclose(f);
    assert_int_equal(strata_trace_load(&c, path, &back), STRATA_OK);
    assert_int_equal(back.nevents, g.nevents);
    for (int i = 0; i < g.nevents; i++) {
        assert_true(back.ev[i].time_s == g.ev[i].time_s);
        assert_true(back.ev[i].duration_s == g.ev[i].duration_s);
        assert_true(back.ev[i].repair_s == g.ev[i].repair_s);
    }
    strata_trace_free(&g);
    strata_trace_free(&back);
    write_file(path, "# only a comment\n");
    assert_int_equal(strata_trace_load(&c, path, &t), STRATA_OK);
    assert_int_equal(t.nevents, 0);
    assert_int_equal(strata_sim_run(&c, &t, &o, &r), STRATA_OK);
    assert_int_equal(r.jobs, 0);
    strata_trace_free(&t);
    remove(path);
    strata_cluster_free(&c);
}

/* The spare buffer is kept out of new jobs: a job needing every free host waits forever under
 * the topology policy with spares, and runs under first-fit. */
static void test_spares_kept(void **state)
{
    (void)state;
    strata_cluster_t c;
    small_preset(&c);
    strata_trace_t t;
    char path[] = "/tmp/strata-test-trace-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_file(path, "job 0 0 512 tp=8 pp=4 duration=100\n");
    assert_int_equal(strata_trace_load(&c, path, &t), STRATA_OK);
    strata_sim_opts_t o = strata_sim_opts_default();
    strata_sim_report_t r;
    assert_int_equal(strata_sim_run(&c, &t, &o, &r), STRATA_OK);
    assert_int_equal(r.never_started, 1);
    o.policy = STRATA_POLICY_FIRST_FIT;
    assert_int_equal(strata_sim_run(&c, &t, &o, &r), STRATA_OK);
    assert_int_equal(r.finished, 1);
    strata_trace_free(&t);
    remove(path);
    strata_cluster_free(&c);
}

/* Utilisation samples for the plot: equal widths from time 0 to the makespan, each the mean over
 * its span. Half the cluster busy for 4000 s, then all of it for 4000 s: 8 samples are 4 x 0.5 and
 * 4 x 1 (the width doubled from 500 s once the run outgrew it); 3 samples of 2666.7 s give 0.5,
 * 0.75, 1. (Keeping every other instant instead left the first hours with a sample or two.) */
static void test_samples_cover_the_run(void **state)
{
    (void)state;
    strata_cluster_t c;
    small_preset(&c);
    strata_trace_t t;
    char path[] = "/tmp/strata-test-trace-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_file(path, "job 0 0 256 tp=8 pp=1 duration=4000\njob 4000 1 512 tp=8 pp=1 duration=4000\n");
    assert_int_equal(strata_trace_load(&c, path, &t), STRATA_OK);
    strata_sim_opts_t o = strata_sim_opts_default();
    o.policy = STRATA_POLICY_FIRST_FIT;
    o.samples = 8;
    strata_sim_report_t r;
    assert_int_equal(strata_sim_run(&c, &t, &o, &r), STRATA_OK);
    assert_true(r.makespan_s == 8000);
    assert_int_equal(r.nsamples, 8);
    assert_true(fabs(r.sample_width_s - 1000) < 1e-9);
    for (int k = 0; k < 8; k++)
        assert_true(fabs(r.sample_util[k] - (k < 4 ? 0.5 : 1.0)) < 1e-12);
    o.samples = 3;
    assert_int_equal(strata_sim_run(&c, &t, &o, &r), STRATA_OK);
    assert_int_equal(r.nsamples, 3);
    assert_true(fabs(r.sample_width_s - 8000.0 / 3) < 1e-9);
    const double want[3] = {0.5, 0.75, 1.0};
    for (int k = 0; k < 3; k++)
        assert_true(fabs(r.sample_util[k] - want[k]) < 1e-12);
    strata_trace_free(&t);
    remove(path);

    // A generated trace of a thousand events: the samples still start at 0, end at the makespan,
    // and add up to the reported utilisation.
    assert_int_equal(strata_trace_generate(&c, 1000, 30, 7, &t), STRATA_OK);
    for (int p = 0; p < STRATA_POLICY_COUNT; p++) {
        o = strata_sim_opts_default();
        o.policy = (strata_policy_t)p;
        assert_int_equal(strata_sim_run(&c, &t, &o, &r), STRATA_OK);
        assert_true(r.nsamples > o.samples / 4 && r.nsamples <= o.samples);
        const double w = r.sample_width_s;
        assert_true((r.nsamples - 1) * w < r.makespan_s && r.makespan_s <= r.nsamples * w * (1 + 1e-12));
        double busy = 0;
        for (int k = 0; k < r.nsamples; k++) {
            assert_true(r.sample_util[k] >= 0 && r.sample_util[k] <= 1 + 1e-12);
            busy += r.sample_util[k] * fmin(w, r.makespan_s - k * w);
        }
        assert_true(fabs(busy / r.makespan_s - r.utilisation) < 1e-9);
    }
    strata_trace_free(&t);
    strata_cluster_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reproducible),
        cmocka_unit_test(test_failure_uses_spare),
        cmocka_unit_test(test_spares_kept),
        cmocka_unit_test(test_samples_cover_the_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
