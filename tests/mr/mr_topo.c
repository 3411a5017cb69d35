/* Topology-aware collectives on fabrics given by STRATA_TOPO_PATH (ranks on one machine pretend to
 * sit in racks and hosts): ring in tree order and the hierarchical plans for allreduce,
 * reduce-scatter(v) and allgather(v), on regular and irregular trees of 2 and 3 levels, every
 * result against the serial reference. Also: a cluster file makes the cost model choose the
 * hierarchical plan for large messages, and splits keep their members' places. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/ref.h"
#include "harness/st_test.h"

typedef struct layout {
    int n;
    const char *paths[8];
} layout_t;

static const layout_t layouts[] = {
    {2, {"ra/h0", "rb/h1"}},
    {3, {"r0/h0", "r0/h0", "r1/h1"}},                                      // lone host in a rack
    {5, {"r0/h0", "r1/h1", "r0/h0", "r0/h2", "r1/h1"}},                    // racks of 3 and 2
    {8, {"a/h0", "b/h4", "a/h1", "b/h5", "a/h2", "b/h6", "a/h3", "b/h7"}}, // round-robin racks
    {8,
     {"z0/r0/h0", "z0/r0/h0", "z0/r1/h1", "z1/r2/h2", "z1/r2/h2", "z1/r3/h3", "z0/r1/h4",
      "z1/r3/h3"}}, // 3 levels, uneven
};

static int place(int rank, const layout_t *lay)
{
    return setenv("STRATA_TOPO_PATH", lay->paths[rank], 1);
}

static int check_allreduce(strata_comm_t *c, int rank, int n, strata_dtype_t dt, strata_op_t op,
                           size_t cnt, uint64_t seed)
{
    size_t es = strata_dtype_size(dt);
    char *s = malloc(cnt * es + 8), *r = malloc(cnt * es + 8), *e = malloc(cnt * es + 8);
    st_ref_fill(dt, s, cnt, rank, seed);
    st_ref_allreduce(dt, op, n, cnt, seed, e);
    char why[256];
    int bad = 0;
    ST_RANK_CHECK_OK(strata_allreduce(c, s, r, cnt, dt, op));
    if (!st_ref_compare(dt, op, n, e, r, cnt, why, sizeof why))
        bad = ST_RANK_FAIL("allreduce %s %s %zu: %s", strata_dtype_name(dt), strata_op_name(op),
                           cnt, why);
    ST_RANK_CHECK_OK(strata_allreduce(c, s, s, cnt, dt, op)); // in place
    if (!bad && !st_ref_compare(dt, op, n, e, s, cnt, why, sizeof why))
        bad = ST_RANK_FAIL("in-place allreduce %zu: %s", cnt, why);
    free(s);
    free(r);
    free(e);
    return bad;
}

/* reduce_scatterv and allgatherv with uneven blocks (rank r has (r * 3 + cnt) % (cnt + 2)). */
static int check_rs_ag(strata_comm_t *c, int rank, int n, size_t cnt, uint64_t seed)
{
    size_t counts[8], displs[8], total = 0;
    for (int b = 0; b < n; b++) {
        counts[b] = ((size_t)b * 3 + cnt) % (cnt + 2);
        displs[b] = total;
        total += counts[b];
    }
    float *s = malloc(total * 4 + 4), *r = malloc(total * 4 + 4), *e = malloc(total * 4 + 4);
    st_ref_fill(STRATA_DTYPE_F32, s, total, rank, seed);
    st_ref_allreduce(STRATA_DTYPE_F32, STRATA_OP_SUM, n, total, seed, e);
    char why[256];
    int bad = 0;
    ST_RANK_CHECK_OK(strata_reduce_scatterv(c, s, r, counts, STRATA_DTYPE_F32, STRATA_OP_SUM));
    if (!st_ref_compare(STRATA_DTYPE_F32, STRATA_OP_SUM, n, e + displs[rank], r, counts[rank], why,
                        sizeof why))
        bad = ST_RANK_FAIL("reduce_scatterv %zu: %s", cnt, why);
    // allgatherv: every rank contributes its reduced block; everyone ends with e.
    ST_RANK_CHECK_OK(strata_allgatherv(c, r, s, counts, displs, STRATA_DTYPE_F32));
    if (!bad && !st_ref_compare(STRATA_DTYPE_F32, STRATA_OP_SUM, n, e, s, total, why, sizeof why))
        bad = ST_RANK_FAIL("allgatherv %zu: %s", cnt, why);
    free(s);
    free(r);
    free(e);
    return bad;
}

static int collectives(int rank, int n, void *arg)
{
    const layout_t *lay = arg;
    if (place(rank, lay))
        return ST_RANK_FAIL("setenv");
    strata_comm_t *c = st_test_comm();
    if (!c)
        return ST_RANK_FAIL("no communicator: %s", strata_last_error());
    const size_t counts[] = {0, 1, 7, 1001, 70001};
    uint64_t seed = 900;
    int bad = 0;
    const char *forced = getenv("STRATA_COMM_ALGO"),
               *used = strata_comm_algo_for(c, STRATA_COLL_ALLREDUCE, 1 << 20, false);
    if (n > 1 && forced && !strstr(forced, used))
        return ST_RANK_FAIL("allreduce runs %s, not the forced %s", used, forced);
    for (size_t k = 0; k < sizeof counts / sizeof counts[0] && !bad; k++, seed++) {
        bad |= check_allreduce(c, rank, n, STRATA_DTYPE_F32, STRATA_OP_SUM, counts[k], seed);
        bad |= check_allreduce(c, rank, n, STRATA_DTYPE_I32, STRATA_OP_MAX, counts[k], seed);
        bad |= check_allreduce(c, rank, n, STRATA_DTYPE_BF16, STRATA_OP_AVG, counts[k], seed);
        bad |= check_allreduce(c, rank, n, STRATA_DTYPE_F64, STRATA_OP_PROD, counts[k], seed);
        bad |= check_rs_ag(c, rank, n, counts[k], seed);
    }
    // A split (even ranks) keeps working with its members' places.
    strata_comm_t *half;
    ST_RANK_CHECK_OK(strata_comm_split(c, rank % 2, rank, &half));
    if (!bad)
        bad |= check_allreduce(half, strata_comm_rank(half), strata_comm_size(half),
                               STRATA_DTYPE_F32, STRATA_OP_SUM, 4099, seed);
    strata_comm_destroy(half);
    strata_comm_destroy(c);
    return bad;
}

static void run_layouts(const char *algo_env)
{
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        st_ranks_opts_t o = {.deadline_ms = 120000, .extra_env = algo_env, .expect_fail_rank = -1};
        if (st_test_ranks(layouts[i].n, collectives, (void *)&layouts[i], &o) != 0)
            fail_msg("layout %zu (%d ranks) failed with %s", i, layouts[i].n, algo_env);
    }
}

static void test_hier(void **state)
{
    (void)state;
    run_layouts("STRATA_COMM_ALGO=allreduce:hier,reduce_scatter:hier,allgather:hier");
}

static void test_ring_tree(void **state)
{
    (void)state;
    run_layouts(
        "STRATA_COMM_ALGO=allreduce:ring_tree,reduce_scatter:ring_tree,allgather:ring_tree");
}

static void test_hier_tcp(void **state)
{
    (void)state;
    st_ranks_opts_t o = {.deadline_ms = 120000,
                         .expect_fail_rank = -1,
                         .extra_env = "STRATA_COMM_TRANSPORT=tcp;STRATA_COMM_ALGO=allreduce:hier,"
                                      "reduce_scatter:hier,allgather:hier"};
    if (st_test_ranks(layouts[2].n, collectives, (void *)&layouts[2], &o) != 0)
        fail_msg("hier over tcp failed");
}

/* With a cluster file describing an 8:1 oversubscribed spine, the model picks the hierarchical
 * allreduce for large messages on a rack-oblivious numbering and a latency algorithm for tiny. */
static int choice(int rank, int n, void *arg)
{
    (void)n;
    if (place(rank, arg))
        return ST_RANK_FAIL("setenv");
    strata_comm_t *c = st_test_comm();
    if (!c)
        return ST_RANK_FAIL("no communicator: %s", strata_last_error());
    const char *big = strata_comm_algo_for(c, STRATA_COLL_ALLREDUCE, 64u << 20, false);
    const char *tiny = strata_comm_algo_for(c, STRATA_COLL_ALLREDUCE, 8, false);
    int bad = 0;
    if (strcmp(big, "hier") != 0)
        bad = ST_RANK_FAIL("64 MiB allreduce chose %s, expected hier", big);
    if (!strcmp(tiny, "hier") || !strcmp(tiny, "ring") || !strcmp(tiny, "ring_tree"))
        bad = ST_RANK_FAIL("8 B allreduce chose %s, expected a latency algorithm", tiny);
    strata_comm_destroy(c);
    return bad;
}

static void test_cost_model_choice(void **state)
{
    (void)state;
    char file[] = "/tmp/strata_topo_XXXXXX";
    int fd = mkstemp(file);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"name\": \"two-racks\", \"levels\": [\n"
          " {\"name\": \"host\", \"fanout\": 1, \"bandwidth_GBps\": 8, \"latency_us\": 2},\n"
          " {\"name\": \"rack\", \"fanout\": 4, \"bandwidth_GBps\": 0.125, \"latency_us\": 50},\n"
          " {\"name\": \"spine\", \"fanout\": 2, \"bandwidth_GBps\": 0.125, \"latency_us\": 80,"
          "  \"oversubscription\": 8}]}\n",
          f);
    fclose(f);
    char env[128];
    snprintf(env, sizeof env, "STRATA_TOPO_FILE=%s", file);
    st_ranks_opts_t o = {.deadline_ms = 60000, .extra_env = env, .expect_fail_rank = -1};
    int rc = st_test_ranks(8, choice, (void *)&layouts[3], &o);
    unlink(file);
    assert_int_equal(rc, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hier),
        cmocka_unit_test(test_ring_tree),
        cmocka_unit_test(test_hier_tcp),
        cmocka_unit_test(test_cost_model_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
