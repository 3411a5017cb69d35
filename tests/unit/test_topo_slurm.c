/* Slurm hostlists and topology.conf: expansion (ranges, padding, products), natural host order,
 * tree and block forms, and refusal of malformed files with file:line messages. */
#include "harness/st_test.h"
#include "strata/topo.h"

#include <string.h>

static void test_hostlist_expand(void **state)
{
    (void)state;
    char **n;
    int c;
    assert_int_equal(strata_hostlist_expand("node[01-03,10],gpu7", &n, &c), STRATA_OK);
    assert_int_equal(c, 5);
    assert_string_equal(n[0], "node01");
    assert_string_equal(n[2], "node03");
    assert_string_equal(n[3], "node10");
    assert_string_equal(n[4], "gpu7");
    strata_hostlist_free(n, c);
    assert_int_equal(strata_hostlist_expand("r[1-2]n[08-09]", &n, &c), STRATA_OK);
    assert_int_equal(c, 4);
    assert_string_equal(n[0], "r1n08");
    assert_string_equal(n[1], "r1n09");
    assert_string_equal(n[3], "r2n09");
    strata_hostlist_free(n, c);
    assert_int_equal(strata_hostlist_expand("solo", &n, &c), STRATA_OK);
    assert_int_equal(c, 1);
    strata_hostlist_free(n, c);
    const char *bad[] = {"node[01-03", "node]1[", "node[3-1]", "node[]", "a,,b", "n[x-2]", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(strata_hostlist_expand(bad[i], &n, &c), STRATA_ERR_PARSE);
        assert_null(n);
        assert_non_null(strstr(strata_last_error(), "expected"));
    }
}

static void test_hostname_order(void **state)
{
    (void)state;
    assert_true(strata_hostname_cmp("n9", "n10") < 0);
    assert_true(strata_hostname_cmp("n10", "n9") > 0);
    assert_true(strata_hostname_cmp("a2b10", "a2b9") > 0);
    assert_int_equal(strata_hostname_cmp("gpu01", "gpu01"), 0);
    assert_true(strata_hostname_cmp("abc", "abd") < 0);
    // Equal values, different padding: two hosts (the fuzzer found "n000" == "n0"), ordered
    // consistently so a sorted index finds each.
    assert_true(strata_hostname_cmp("n1", "n01") < 0);
    assert_true(strata_hostname_cmp("n01", "n1") > 0);
    assert_true(strata_hostname_cmp("n01", "n2") < 0);
    assert_true(strata_hostname_cmp("r01n1", "r1n01") > 0);
}

static void test_tree_form(void **state)
{
    (void)state;
    strata_slurm_topo_t t;
    const char *text = "# comment\n"
                       "SwitchName=s0 Nodes=n[01-04] LinkSpeed=100\n"
                       "SwitchName=s1 Nodes=n[05-06]\n"
                       "switchname=top Switches=s[0-1]\n";
    assert_int_equal(strata_slurm_topo_parse(text, "t.conf", &t), STRATA_OK);
    assert_false(t.block);
    assert_int_equal(t.nswitches, 3);
    assert_int_equal(t.nnodes, 6);
    assert_int_equal(t.switches[0].parent, 2);
    assert_int_equal(t.switches[1].parent, 2);
    assert_int_equal(t.switches[2].parent, -1);
    assert_true(t.switches[0].link_speed == 100);
    assert_string_equal(t.nodes[4].name, "n05");
    assert_int_equal(t.nodes[4].sw, 1);
    // A node's path runs through its switches, outermost first (what STRATA_TOPO_FILE uses).
    char path[64];
    assert_int_equal(strata_slurm_topo_host_path(&t, "n05", path, sizeof path), 3);
    assert_string_equal(path, "top/s1/n05");
    assert_int_equal(strata_slurm_topo_host_path(&t, "n99", path, sizeof path),
                     STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "n99"));
    assert_int_equal(strata_slurm_topo_host_path(&t, "n05", path, 6), STRATA_ERR_INVALID_ARG);
    strata_slurm_topo_free(&t);
}

static void test_block_form(void **state)
{
    (void)state;
    strata_slurm_topo_t t;
    const char *text = "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\nBlockSizes=4,8\n";
    assert_int_equal(strata_slurm_topo_parse(text, "b.conf", &t), STRATA_OK);
    assert_true(t.block);
    assert_int_equal(t.nswitches, 2);
    assert_int_equal(t.nnodes, 8);
    assert_int_equal(t.nblock_sizes, 2);
    assert_int_equal(t.block_sizes[1], 8);
    char path[64];
    assert_int_equal(strata_slurm_topo_host_path(&t, "n6", path, sizeof path), 2);
    assert_string_equal(path, "b2/n6");
    strata_slurm_topo_free(&t);
}

static void expect_error(const char *text, const char *needle)
{
    strata_slurm_topo_t t;
    strata_status_t rc = strata_slurm_topo_parse(text, "bad.conf", &t);
    if (rc != STRATA_ERR_PARSE || !strstr(strata_last_error(), needle))
        fail_msg("for %s expected PARSE with \"%s\", got %d: %s", text, needle, rc,
                 strata_last_error());
    assert_int_equal(t.nnodes, 0);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("SwitchName=s0 Nodes=n[1-2]\nSwitchName=s1 Nodes=n[3-4\n", "bad.conf:2:");
    expect_error("SwitchName=s0 Nodes=n1\nFoo=bar\n", "bad.conf:2: expected a line starting");
    expect_error("SwitchName=s0 Nodes=n1 Colour=red\n", "bad.conf:1: expected Nodes=");
    expect_error("SwitchName=top Switches=s[0-1]\nSwitchName=s0 Nodes=n1\n",
                 "bad.conf:1: expected switch \"s1\"");
    expect_error("SwitchName=s0 Nodes=n[1-2]\nSwitchName=s1 Nodes=n2\n", "expected each node once");
    expect_error("SwitchName=s0 Nodes=n1\nSwitchName=s0 Nodes=n2\n", "already defined at line 1");
    expect_error("SwitchName=a Switches=b Nodes=n1\nSwitchName=b Switches=a\n", "cycle");
    expect_error("SwitchName=s0 Nodes=n1\nBlockName=b Nodes=n2\n", "not both");
    expect_error("SwitchName=s0 Nodes=n1 LinkSpeed=fast\n", "bad.conf:1: expected LinkSpeed=");
    expect_error("# nothing\n", "expected at least one Nodes=");
    expect_error("SwitchName=s0 Nodes\n", "bad.conf:1: expected Key=Value");
    // Keys after BlockSizes= had no switch (index -1): a heap overflow found by fuzzing.
    expect_error("BlockName=b1 Nodes=n[1-2]\nBlockSizes=2 LinkSpeed=5\n",
                 "bad.conf:2: expected BlockSizes= alone");
    expect_error("BlockName=b1 Nodes=n1\nBlockSizes=2 Nodes=n1\n", "bad.conf:2: expected BlockSizes=");
    strata_slurm_topo_t t;
    assert_int_equal(strata_slurm_topo_load("/nonexistent/topology.conf", &t), STRATA_ERR_IO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostlist_expand), cmocka_unit_test(test_hostname_order),
        cmocka_unit_test(test_tree_form),       cmocka_unit_test(test_block_form),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
