/* Link calibration arithmetic (link_calib.h) on hand-made measurements: the fit of latency,
 * bandwidth and oversubscription, its refusals, and that levels fitted from what an emulated
 * cluster of unequal racks would measure make the flow model reproduce its links and choose the
 * hierarchical allreduce where strata's default links choose halving-doubling (the defect the
 * calibration exists for). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness/st_test.h"
#include "strata/link_calib.h"
#include "strata/netmodel.h"

#define MiB (1024.0 * 1024.0)

/* A sample as a pair with one-way latency `lat` and rate `bw` would give it: one stream of
 * `bytes`, and `pairs` concurrent streams of `pair_bytes` reaching `agg` together. */
static strata_link_sample_t sample(double lat, double bw, double bytes, int pairs,
                                   double pair_bytes, double agg)
{
    strata_link_sample_t s = {.measured = true,
                              .a = 0,
                              .b = 1,
                              .latency_s = lat,
                              .bytes = bytes,
                              .secs = bytes / bw + 2 * lat};
    if (pairs >= 2) {
        s.pairs = pairs;
        s.pair_bytes = pair_bytes;
        s.pair_secs = pairs * pair_bytes / agg + 2 * lat;
    }
    return s;
}

static void assert_near(double got, double want)
{
    if (!(fabs(got - want) <= 1e-9 * fabs(want)))
        fail_msg("got %.12g, want %.12g", got, want);
}

static strata_topo_level_t level(const char *name)
{
    strata_topo_level_t lv = {.fanout = 7,
                              .bw_Bps = 1e9,
                              .latency_s = 1e-6,
                              .oversub = 1,
                              .link_class = STRATA_LINK_SCALE_OUT,
                              .efficiency = 0.5};
    snprintf(lv.name, sizeof lv.name, "%s", name);
    return lv;
}

static void test_fit_level(void **state)
{
    (void)state;
    // 4 MiB at 50 MB/s after 100 us each way; 4 pairs of 2 MiB sharing 50 MB/s: 4:1.
    strata_link_sample_t s = sample(100e-6, 50e6, 4 * MiB, 4, 2 * MiB, 50e6);
    strata_topo_level_t lv = level("rack");
    assert_int_equal(strata_link_calib_fit_level(&s, &lv), STRATA_OK);
    assert_near(lv.latency_s, 100e-6);
    assert_near(lv.bw_Bps, 50e6);
    assert_near(lv.oversub, 4);
    assert_string_equal(lv.name, "rack"); // what the fabric said stays
    assert_int_equal(lv.fanout, 7);
    assert_int_equal(lv.link_class, STRATA_LINK_SCALE_OUT);
    assert_true(lv.efficiency == 0); // the measured rate is what collectives reach

    // Pairs that together beat k single streams (noise, or a single stream held back by its own
    // window) are not "undersubscribed": 1.
    s = sample(10e-6, 100e6, MiB, 3, MiB, 400e6);
    assert_int_equal(strata_link_calib_fit_level(&s, &lv), STRATA_OK);
    assert_near(lv.oversub, 1);
    // A loaded machine's ping-pong (10 ms one way) slower than its stream (1 MiB in 12 ms): the
    // latencies take off at most half the stream's time.
    s = sample(0, 100e6, MiB, 0, 0, 0);
    s.latency_s = 10e-3;
    s.secs = 12e-3;
    assert_int_equal(strata_link_calib_fit_level(&s, &lv), STRATA_OK);
    assert_near(lv.bw_Bps, MiB / 6e-3);
    // One pair, or none: nothing says the uplink is shared.
    s = sample(10e-6, 100e6, MiB, 1, MiB, 10e6);
    assert_int_equal(strata_link_calib_fit_level(&s, &lv), STRATA_OK);
    assert_near(lv.oversub, 1);
    assert_near(lv.bw_Bps, 100e6);
}

static void test_fit_refuses(void **state)
{
    (void)state;
    strata_link_sample_t bad[6];
    for (int i = 0; i < 6; i++)
        bad[i] = sample(100e-6, 50e6, MiB, 2, MiB, 50e6);
    bad[0].measured = false;
    bad[1].latency_s = -1e-6;
    bad[2].secs = 0; // no time to move the bytes in
    bad[3].bytes = 0;
    bad[4].secs = NAN;
    bad[5].pair_secs = 0; // a concurrent test that took no time
    const char *why[6] = {"nothing was measured", "latency",
                          "stream of some bytes", "stream of some bytes",
                          "stream of some bytes", "2 concurrent streams"};
    for (int i = 0; i < 6; i++) {
        strata_topo_level_t lv = level("spine"), before = lv;
        assert_int_equal(strata_link_calib_fit_level(&bad[i], &lv), STRATA_ERR_INVALID_ARG);
        assert_non_null(strstr(strata_last_error(), "spine"));
        if (!strstr(strata_last_error(), why[i]))
            fail_msg("sample %d: '%s' does not say '%s'", i, strata_last_error(), why[i]);
        assert_memory_equal(&lv, &before, sizeof lv); // untouched
    }
}

static void test_fit_tree(void **state)
{
    (void)state;
    strata_topo_t t, before;
    strata_fabric_default_levels(3, &t);
    before = t;
    strata_link_sample_t s[STRATA_TOPO_MAX_LEVELS] = {{0}};
    s[1] = sample(50e-6, 100e6, 4 * MiB, 0, 0, 0);
    s[2] = sample(60e-6, 25e6, 2 * MiB, 2, 2 * MiB, 25e6);
    assert_int_equal(strata_link_calib_fit(&t, s), STRATA_OK);
    assert_memory_equal(&t.level[0], &before.level[0], sizeof t.level[0]); // nobody crosses it
    assert_near(t.level[1].bw_Bps, 100e6);
    assert_near(t.level[2].bw_Bps, 25e6);
    assert_near(t.level[2].oversub, 2);
    // One bad level and nothing changes.
    strata_topo_t again = before;
    s[2].secs = 0;
    assert_int_equal(strata_link_calib_fit(&again, s), STRATA_ERR_INVALID_ARG);
    assert_memory_equal(&again, &before, sizeof again);
}

/* Racks of 3, 1 and 2 hosts, one rank each, 800 Mbit/s NICs and 8:1 uplinks (37.5, 12.5 and
 * 25 MB/s), as bench/emu_cluster.sh --rack-hosts 3,1,2 builds them. The calibration measures the
 * two largest racks (0 and 2): one stream 25 MB/s, two together 25 MB/s. */
static void test_fitted_links_reproduce_uplinks(void **state)
{
    (void)state;
    const char *paths[] = {"r0/a", "r0/b", "r0/c", "r1/d", "r2/e", "r2/f"};
    strata_topo_t t;
    strata_fabric_default_levels(3, &t);
    strata_link_sample_t s[STRATA_TOPO_MAX_LEVELS] = {{0}};
    s[1] = sample(50e-6, 100e6, 4 * MiB, 0, 0, 0);
    s[2] = sample(60e-6, 25e6, 2 * MiB, 2, 2 * MiB, 25e6);
    assert_int_equal(strata_link_calib_fit(&t, s), STRATA_OK);
    strata_fabric_t f;
    assert_int_equal(strata_fabric_from_paths(&t, 6, paths, &f), STRATA_OK);
    const double B = 1e6, lat = 60e-6;
    // One flow between the big racks: 25 MB/s. Into the lone host's rack: its 12.5 MB/s.
    assert_near(strata_netmodel_flows_time(&f, 1, (int[]){2}, (int[]){5}, (double[]){B}),
                lat + B / 25e6);
    assert_near(strata_netmodel_flows_time(&f, 1, (int[]){0}, (int[]){3}, (double[]){B}),
                lat + B / 12.5e6);
    // All three of rack 0 out at once: 12.5 into rack 1, 2 x 12.5 into rack 2 (its 25 MB/s):
    // rack 0's 37.5 MB/s uplink exactly full, as built.
    assert_near(
        strata_netmodel_flows_time(&f, 3, (int[]){0, 1, 2}, (int[]){3, 4, 5}, (double[]){B, B, B}),
        lat + B / 12.5e6);
    // Inside a rack: the NIC's 100 MB/s.
    assert_near(strata_netmodel_flows_time(&f, 1, (int[]){0}, (int[]){1}, (double[]){B}),
                50e-6 + B / 100e6);
    strata_fabric_free(&f);
}

/* The cheapest allreduce plan for 16 MiB on `t` over racks of 3 and 5 hosts, ranks numbered
 * round-robin across the racks. */
static strata_plan_kind_t cheapest(const strata_topo_t *t)
{
    const char *paths[] = {"r0/h0", "r1/h3", "r0/h1", "r1/h4", "r0/h2", "r1/h5", "r1/h6", "r1/h7"};
    strata_fabric_t f;
    assert_int_equal(strata_fabric_from_paths(t, 8, paths, &f), STRATA_OK);
    strata_plan_kind_t best = STRATA_PLAN_KIND_COUNT;
    double best_s = 0;
    for (int k = 0; k < STRATA_PLAN_KIND_COUNT; k++) {
        double s = strata_netmodel_fabric_cost(&f, STRATA_COLL_ALLREDUCE, (strata_plan_kind_t)k,
                                               16 * MiB, 4, NULL);
        if (s >= 0 && (best == STRATA_PLAN_KIND_COUNT || s < best_s)) {
            best = (strata_plan_kind_t)k;
            best_s = s;
        }
    }
    strata_fabric_free(&f);
    return best;
}

static void test_calibrated_choice(void **state)
{
    (void)state;
    strata_topo_t t;
    strata_fabric_default_levels(3, &t);
    // strata's defaults see no slow uplink: halving-doubling looks cheapest (it ran ~3x slower
    // than hier on the emulated cluster).
    assert_int_equal(cheapest(&t), STRATA_PLAN_HALVING_DOUBLING);
    // What the calibration measures there (800 Mbit/s NICs, 8:1 uplinks of 300 and 500 Mbit/s):
    // in a rack 100 MB/s; between the racks one stream 37.5 MB/s and 3 together the same.
    strata_link_sample_t s[STRATA_TOPO_MAX_LEVELS] = {{0}};
    s[1] = sample(50e-6, 100e6, 4 * MiB, 0, 0, 0);
    s[2] = sample(60e-6, 37.5e6, 2 * MiB, 3, 1.5 * MiB, 37.5e6);
    assert_int_equal(strata_link_calib_fit(&t, s), STRATA_OK);
    assert_int_equal(cheapest(&t), STRATA_PLAN_HIER);
}

static void test_describe(void **state)
{
    (void)state;
    strata_link_calib_t c = {.done = true, .nlevels = 3};
    strata_topo_t t;
    strata_fabric_default_levels(3, &t);
    c.sample[1] = sample(50e-6, 100e6, 4 * MiB, 0, 0, 0);
    c.sample[2] = sample(60e-6, 25e6, 2 * MiB, 2, 2 * MiB, 25e6);
    assert_int_equal(strata_link_calib_fit(&t, c.sample), STRATA_OK);
    memcpy(c.level, t.level, sizeof c.level);
    char buf[1024] = "";
    FILE *m = fmemopen(buf, sizeof buf - 1, "w");
    strata_link_calib_describe(&c, m);
    fclose(m);
    assert_non_null(strstr(buf, "host             -   (no pair of ranks crosses this level)"));
    assert_non_null(strstr(buf, "tier2"));
    assert_non_null(strstr(buf, "25.0")); // MB/s, and the 2:1 fitted from two pairs
    assert_non_null(strstr(buf, "2.00"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit_level),
        cmocka_unit_test(test_fit_refuses),
        cmocka_unit_test(test_fit_tree),
        cmocka_unit_test(test_fitted_links_reproduce_uplinks),
        cmocka_unit_test(test_calibrated_choice),
        cmocka_unit_test(test_describe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
