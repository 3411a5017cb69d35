/* The fabric tree: presets are valid, domain sizes and rank paths pack innermost first, cluster
 * files round-trip, malformed levels are rejected, and the CPU preset's links are the
 * communicator's default links. */
#include "harness/st_test.h"
#include "strata/netmodel.h"
#include "strata/topo.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void test_presets(void **state)
{
    (void)state;
    for (int i = 0; i < strata_topo_preset_count(); i++) {
        strata_topo_t t;
        assert_int_equal(strata_topo_preset(strata_topo_preset_name(i), &t), STRATA_OK);
        assert_int_equal(strata_topo_validate(&t), STRATA_OK);
        assert_non_null(strata_topo_preset_summary(i));
    }
    strata_topo_t t;
    assert_int_equal(strata_topo_preset("h100-roce-24k", &t), STRATA_OK);
    assert_int_equal(strata_topo_capacity(&t), 24576);
    assert_int_equal(strata_topo_domain_size(&t, 1), 8);
    assert_int_equal(strata_topo_domain_size(&t, 2), 16);
    assert_int_equal(strata_topo_domain_size(&t, 3), 3072);
    assert_int_equal(strata_topo_find_level(&t, "zone"), 2);
    assert_int_equal(strata_topo_preset("frontier", &t), STRATA_OK);
    assert_int_equal(strata_topo_domain_size(&t, 2), 8); /* a Frontier node: 8 GCDs */
    assert_int_equal(strata_topo_preset("nope", &t), STRATA_ERR_INVALID_ARG);
}

static void test_paths(void **state)
{
    (void)state;
    strata_topo_t t;
    assert_int_equal(strata_topo_preset("h100-roce-24k", &t), STRATA_OK);
    int c[STRATA_TOPO_MAX_LEVELS];
    assert_int_equal(strata_topo_rank_path(&t, 3072 + 16 + 8 + 5, c), STRATA_OK);
    assert_int_equal(c[0], 5); /* GPU in host */
    assert_int_equal(c[1], 1); /* host in rack */
    assert_int_equal(c[2], 1); /* rack in zone */
    assert_int_equal(c[3], 1); /* zone in dc */
    assert_int_equal(strata_topo_rank_path(&t, 24576, c), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_topo_common_level(&t, 0, 7), 1);
    assert_int_equal(strata_topo_common_level(&t, 0, 8), 2);
    assert_int_equal(strata_topo_common_level(&t, 0, 3072), 4);
    assert_int_equal(strata_topo_common_level(&t, 5, 5), 0);
}

static void test_levels_and_roundtrip(void **state)
{
    (void)state;
    strata_topo_t t;
    strata_topo_init(&t, "x");
    strata_topo_level_t bad = {.name = "host", .fanout = 0, .bw_Bps = 1e9, .oversub = 1};
    assert_int_equal(strata_topo_add_level(&t, &bad), STRATA_ERR_INVALID_ARG);
    bad.fanout = 4;
    bad.oversub = 0.5;
    assert_int_equal(strata_topo_add_level(&t, &bad), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_topo_validate(&t), STRATA_ERR_INVALID_ARG); /* no levels */

    strata_topo_t a, b;
    assert_int_equal(strata_topo_preset("frontier", &a), STRATA_OK);
    char path[64];
    snprintf(path, sizeof path, "/tmp/strata_test_topo_%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    strata_topo_write_json(&a, f);
    fclose(f);
    assert_int_equal(strata_topo_load(path, &b), STRATA_OK);
    unlink(path);
    assert_string_equal(a.name, b.name);
    assert_string_equal(a.accel, b.accel);
    assert_int_equal(a.nlevels, b.nlevels);
    for (int i = 0; i < a.nlevels; i++) {
        assert_string_equal(a.level[i].name, b.level[i].name);
        assert_int_equal(a.level[i].fanout, b.level[i].fanout);
        assert_true(fabs(a.level[i].bw_Bps - b.level[i].bw_Bps) < 1);
        assert_true(fabs(a.level[i].latency_s - b.level[i].latency_s) < 1e-12);
        assert_true(a.level[i].oversub == b.level[i].oversub);
        assert_int_equal(a.level[i].link_class, b.level[i].link_class);
    }
    assert_int_equal(strata_topo_parse("{\"levels\": []}", "inline", &b), STRATA_ERR_PARSE);
    assert_non_null(strstr(strata_last_error(), "inline:1: expected 1 to"));
}

static void test_cpu_preset_uses_comm_links(void **state)
{
    (void)state;
    strata_topo_t t;
    assert_int_equal(strata_topo_preset("cpu-local", &t), STRATA_OK);
    strata_link_t shm = strata_link_default_shm(), tcp = strata_link_default_tcp();
    assert_true(fabs(t.level[0].bw_Bps * shm.beta_s_per_b - 1) < 1e-9);
    assert_true(fabs(t.level[0].latency_s - shm.alpha_s) < 1e-12);
    assert_true(fabs(t.level[1].bw_Bps * tcp.beta_s_per_b - 1) < 1e-9);
    assert_true(fabs(t.level[1].latency_s - tcp.alpha_s) < 1e-12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_levels_and_roundtrip),
        cmocka_unit_test(test_cpu_preset_uses_comm_links),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
