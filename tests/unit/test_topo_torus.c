/* A torus as a level of the fabric (strata/topo.h): cluster files say it ("torus": "2x3"), write
 * it back, and refuse malformed or inconsistent dimensions with the file and line; a fabric whose
 * ranks fill the torus gives the multi-dimensional ring's grid (cells by host order, an inner
 * dimension for several ranks per host), a part of it or an uneven spread gives none, and more
 * hosts than cells are refused. */
#include "harness/st_test.h"
#include "strata/topo.h"

#include <stdio.h>
#include <string.h>

static const char *file_with(const char *torus_level)
{
    static char text[512];
    snprintf(text, sizeof text,
             "{\"name\": \"t\", \"levels\": [\n"
             " {\"name\": \"host\", \"fanout\": 2, \"bandwidth_GBps\": 8},\n"
             " %s]}\n",
             torus_level);
    return text;
}

/* Parses and expects failure whose message holds `want`. */
static void refused(const char *level, const char *want)
{
    strata_topo_t t;
    assert_int_equal(strata_topo_parse(file_with(level), "c.json", &t), STRATA_ERR_PARSE);
    if (!strstr(strata_last_error(), want))
        fail_msg("'%s': message '%s' lacks '%s'", level, strata_last_error(), want);
}

static void test_cluster_file(void **state)
{
    (void)state;
    strata_topo_t t;
    assert_int_equal(strata_topo_parse(file_with("{\"name\": \"torus\", \"torus\": \"2x3\", "
                                                 "\"bandwidth_GBps\": 0.05}"),
                                       "c.json", &t),
                     STRATA_OK);
    assert_int_equal(t.level[1].fanout, 6); /* left out: the torus's cells */
    assert_int_equal(strata_topo_torus_ndims(&t.level[1]), 2);
    assert_int_equal(t.level[1].torus[0], 2);
    assert_int_equal(t.level[1].torus[1], 3);
    assert_int_equal(strata_topo_torus_ndims(&t.level[0]), 0);
    // Written and read back: the same levels.
    char buf[1024] = "";
    FILE *f = fmemopen(buf, sizeof buf, "w");
    strata_topo_write_json(&t, f);
    fclose(f);
    assert_non_null(strstr(buf, "\"torus\": \"2x3\""));
    strata_topo_t back;
    assert_int_equal(strata_topo_parse(buf, "back", &back), STRATA_OK);
    assert_memory_equal(&back.level[1].torus, &t.level[1].torus, sizeof t.level[1].torus);
    assert_int_equal(strata_topo_parse(file_with("{\"name\": \"cube\", \"fanout\": 8, "
                                                 "\"torus\": \"2x2x2\", \"bandwidth_GBps\": 1}"),
                                       "c.json", &t),
                     STRATA_OK);
    assert_int_equal(strata_topo_torus_ndims(&t.level[1]), 3);

    refused("{\"name\": \"x\", \"fanout\": 8, \"torus\": \"4x4\", \"bandwidth_GBps\": 1}",
            "c.json:3: topo t: level 1 (x): a 4x4 torus has 16 children, but fanout is 8");
    refused("{\"name\": \"x\", \"torus\": \"4x\", \"bandwidth_GBps\": 1}",
            "c.json:3: expected torus dimensions like \"4x4\"");
    refused("{\"name\": \"x\", \"torus\": \"1x4\", \"bandwidth_GBps\": 1}", "c.json:3: expected");
    refused("{\"name\": \"x\", \"torus\": \"2x2x2x2\", \"bandwidth_GBps\": 1}", "c.json:3: expected");
    refused("{\"name\": \"x\", \"torus\": \"4 x 4\", \"bandwidth_GBps\": 1}", "c.json:3: expected");
    refused("{\"name\": \"x\", \"torus\": \"\", \"bandwidth_GBps\": 1}", "c.json:3: expected");
    // Two torus levels: the second is refused at its line.
    assert_int_equal(strata_topo_parse("{\"levels\": [\n"
                                       " {\"name\": \"a\", \"torus\": \"2x2\", \"bandwidth_GBps\": 8},\n"
                                       " {\"name\": \"b\", \"torus\": \"3\", \"bandwidth_GBps\": 1}]}",
                                       "two.json", &t),
                     STRATA_ERR_PARSE);
    assert_non_null(strstr(strata_last_error(), "two.json:3:"));
    assert_non_null(strstr(strata_last_error(), "at most one torus level"));
}

static void torus_topo(strata_topo_t *t, int per_host, const char *dims)
{
    strata_topo_init(t, "t");
    strata_topo_level_t host = {.fanout = per_host, .bw_Bps = 8e9, .oversub = 1};
    strata_topo_level_t torus = {.bw_Bps = 5e7, .oversub = 1,
                                 .link_class = STRATA_LINK_SCALE_OUT};
    snprintf(host.name, sizeof host.name, "host");
    snprintf(torus.name, sizeof torus.name, "torus");
    assert_int_equal(strata_topo_torus_parse(dims, torus.torus), STRATA_OK);
    torus.fanout = 1;
    for (int d = 0; d < strata_topo_torus_ndims(&torus); d++)
        torus.fanout *= torus.torus[d];
    assert_int_equal(strata_topo_add_level(t, &host), STRATA_OK);
    assert_int_equal(strata_topo_add_level(t, &torus), STRATA_OK);
}

static void test_fabric_grid(void **state)
{
    (void)state;
    strata_topo_t t;
    torus_topo(&t, 2, "2x3");
    // 12 ranks, two per host, numbered round-robin over hosts h0..h5 (cell = host order).
    const char *paths[12];
    char buf[12][8];
    for (int r = 0; r < 12; r++) {
        snprintf(buf[r], sizeof buf[r], "h%d", r % 6);
        paths[r] = buf[r];
    }
    strata_fabric_t f;
    assert_int_equal(strata_fabric_from_paths(&t, 12, paths, &f), STRATA_OK);
    strata_torus_grid_t g;
    int cell[12];
    assert_true(strata_fabric_torus(&f, &g, cell));
    assert_int_equal(g.level, 1);
    assert_true(g.inner);
    assert_int_equal(g.ndims, 3);
    assert_int_equal(g.dims[0], 2);
    assert_int_equal(g.dims[1], 2);
    assert_int_equal(g.dims[2], 3);
    for (int r = 0; r < 12; r++) // host r % 6, place r / 6 among its ranks
        assert_int_equal(cell[r], r / 6 + 2 * (r % 6));
    // A split (the first 6 ranks: one per host) still fills it; the first 3 hosts do not.
    strata_fabric_t sub;
    const int six[6] = {0, 1, 2, 3, 4, 5}, three[3] = {0, 1, 2};
    assert_int_equal(strata_fabric_subset(&f, 6, six, &sub), STRATA_OK);
    assert_true(strata_fabric_torus(&sub, &g, NULL));
    assert_false(g.inner);
    assert_int_equal(g.ndims, 2);
    strata_fabric_free(&sub);
    assert_int_equal(strata_fabric_subset(&f, 3, three, &sub), STRATA_OK);
    assert_false(strata_fabric_torus(&sub, &g, NULL));
    assert_int_equal(g.ndims, 0);
    strata_fabric_free(&sub);
    // Uneven: 7 ranks, host h0 with two.
    assert_int_equal(strata_fabric_from_paths(&t, 7, paths, &sub), STRATA_OK);
    assert_false(strata_fabric_torus(&sub, &g, NULL));
    strata_fabric_free(&sub);
    strata_fabric_free(&f);
    // Seven hosts on a 2x3 torus cannot be placed.
    const char *seven[7] = {"a", "b", "c", "d", "e", "f", "g"};
    assert_int_equal(strata_fabric_from_paths(&t, 7, seven, &f), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "2x3 torus of 6 cells (one host each), but the "
                                                "ranks sit in 7 hosts"));
    // A tree has no torus.
    strata_topo_t tree;
    strata_topo_init(&tree, "tree");
    strata_topo_level_t host = {.name = "host", .fanout = 1, .bw_Bps = 1e9, .oversub = 1};
    strata_topo_level_t sw = {.name = "switch", .fanout = 6, .bw_Bps = 1e9, .oversub = 1};
    assert_int_equal(strata_topo_add_level(&tree, &host), STRATA_OK);
    assert_int_equal(strata_topo_add_level(&tree, &sw), STRATA_OK);
    assert_int_equal(strata_fabric_from_paths(&tree, 6, paths, &f), STRATA_OK);
    assert_false(strata_fabric_torus(&f, &g, NULL));
    strata_fabric_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_file),
        cmocka_unit_test(test_fabric_grid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
