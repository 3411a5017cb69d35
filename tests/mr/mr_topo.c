/* Topology-aware collectives on fabrics given by STRATA_TOPO_PATH (ranks on one machine pretend to
 * sit in racks and hosts): ring in tree order and the hierarchical plans for allreduce,
 * reduce-scatter(v) and allgather(v), on regular and irregular trees of 2 and 3 levels, every
 * result against the serial reference. Also: a cluster file makes the cost model choose the
 * hierarchical plan for large messages, and splits keep their members' places. Tori (2x2, 2x3,
 * 2x2x2, 3x3, and 2x2 with two ranks per host) run the multi-dimensional ring for every dtype and
 * op against the reference, the model picks it on a torus and not on a tree, splits of a torus
 * (no torus any more) decline it, and a torus with too few cells for the job is refused. */
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

/* ---- tori ---------------------------------------------------------------------------------- */

typedef struct torus_case {
    const char *dims; /* "2x3" */
    int hosts, per_host;
} torus_case_t;

/* A cluster file: `per_host` ranks in a host over shared memory, hosts joined as a torus. */
static void torus_file(char *file, const char *dims, int per_host)
{
    int fd = mkstemp(file);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f,
            "{\"name\": \"torus\", \"levels\": [\n"
            " {\"name\": \"host\", \"fanout\": %d, \"bandwidth_GBps\": 8, \"latency_us\": 2},\n"
            " {\"name\": \"torus\", \"torus\": \"%s\", \"bandwidth_GBps\": 0.05,"
            " \"latency_us\": 30}]}\n",
            per_host, dims);
    fclose(f);
}

/* Host of rank r: round-robin over the hosts, so host i (cell i) gets ranks i, i + hosts, ... */
static int torus_place(int rank, const torus_case_t *tc)
{
    char path[32];
    snprintf(path, sizeof path, "h%d", rank % tc->hosts);
    return setenv("STRATA_TOPO_PATH", path, 1);
}

static int torus_ranks(int rank, int n, void *arg)
{
    const torus_case_t *tc = arg;
    if (torus_place(rank, tc))
        return ST_RANK_FAIL("setenv");
    strata_comm_t *c = st_test_comm();
    if (!c)
        return ST_RANK_FAIL("no communicator: %s", strata_last_error());
    int bad = 0;
    const char *used = strata_comm_algo_for(c, STRATA_COLL_ALLREDUCE, 1 << 20, false);
    if (strcmp(used, "torus"))
        bad = ST_RANK_FAIL("%s torus: allreduce runs %s, not the forced torus", tc->dims, used);
    const size_t counts[] = {0, 1, 7, 1001, 70001}; // 70001: blocks of unequal size on any grid
    uint64_t seed = 4000;
    for (int dt = 0; dt < STRATA_DTYPE_COUNT && !bad; dt++)
        for (int op = 0; op < STRATA_OP_COUNT && !bad; op++)
            for (size_t k = 0; k < sizeof counts / sizeof counts[0] && !bad; k++)
                bad |= check_allreduce(c, rank, n, (strata_dtype_t)dt, (strata_op_t)op, counts[k],
                                       seed++);
    // Half of a torus is no torus: the algorithm declines and the split still gets it right.
    strata_comm_t *half;
    ST_RANK_CHECK_OK(strata_comm_split(c, rank % 2, rank, &half));
    used = strata_comm_algo_for(half, STRATA_COLL_ALLREDUCE, 1 << 20, false);
    if (!bad && strata_comm_size(half) > 1 && !strcmp(used, "torus"))
        bad = ST_RANK_FAIL("a split of the %s torus runs torus", tc->dims);
    if (!bad)
        bad |= check_allreduce(half, strata_comm_rank(half), strata_comm_size(half),
                               STRATA_DTYPE_F32, STRATA_OP_SUM, 4099, seed);
    strata_comm_destroy(half);
    strata_comm_destroy(c);
    return bad;
}

static void run_torus(const torus_case_t *tc, const char *transport)
{
    char file[] = "/tmp/strata_torus_XXXXXX", env[160];
    torus_file(file, tc->dims, tc->per_host);
    snprintf(env, sizeof env, "STRATA_TOPO_FILE=%s;STRATA_COMM_ALGO=allreduce:torus%s", file,
             transport);
    st_ranks_opts_t o = {.deadline_ms = 240000, .extra_env = env, .expect_fail_rank = -1};
    int rc = st_test_ranks(tc->hosts * tc->per_host, torus_ranks, (void *)tc, &o);
    unlink(file);
    if (rc != 0)
        fail_msg("%s torus, %d per host, failed", tc->dims, tc->per_host);
}

static void test_torus(void **state)
{
    (void)state;
    static const torus_case_t cases[] = {
        {"2x2", 4, 1}, {"2x3", 6, 1}, {"2x2x2", 8, 1}, {"3x3", 9, 1}, {"2x2", 4, 2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_torus(&cases[i], "");
}

static void test_torus_tcp(void **state)
{
    (void)state;
    static const torus_case_t c = {"2x3", 6, 1};
    run_torus(&c, ";STRATA_COMM_TRANSPORT=tcp");
}

/* The price picks the torus for large messages on a torus, a latency algorithm for tiny ones,
 * and never the torus on the same ranks behind a switch (it declines there). */
static int torus_choice(int rank, int n, void *arg)
{
    (void)n;
    const torus_case_t *tc = arg;
    if (torus_place(rank, tc))
        return ST_RANK_FAIL("setenv");
    strata_comm_t *c = st_test_comm();
    if (!c)
        return ST_RANK_FAIL("no communicator: %s", strata_last_error());
    const char *big = strata_comm_algo_for(c, STRATA_COLL_ALLREDUCE, 64u << 20, false);
    const char *tiny = strata_comm_algo_for(c, STRATA_COLL_ALLREDUCE, 8, false);
    const bool torus = tc->dims != NULL;
    int bad = 0;
    if (torus && strcmp(big, "torus"))
        bad = ST_RANK_FAIL("64 MiB allreduce on a %s torus chose %s", tc->dims, big);
    if (!torus && !strcmp(big, "torus"))
        bad = ST_RANK_FAIL("64 MiB allreduce behind a switch chose torus");
    if (!strcmp(tiny, "torus"))
        bad = ST_RANK_FAIL("8 B allreduce chose torus, expected a latency algorithm");
    strata_comm_destroy(c);
    return bad;
}

static void test_torus_choice(void **state)
{
    (void)state;
    static const torus_case_t torus = {"2x3", 6, 1}, tree = {NULL, 6, 1};
    char file[] = "/tmp/strata_torus_XXXXXX", env[96];
    torus_file(file, torus.dims, 1);
    snprintf(env, sizeof env, "STRATA_TOPO_FILE=%s", file);
    st_ranks_opts_t o = {.deadline_ms = 60000, .extra_env = env, .expect_fail_rank = -1};
    int rc = st_test_ranks(6, torus_choice, (void *)&torus, &o);
    unlink(file);
    assert_int_equal(rc, 0);
    // The same links behind a switch (a plain level): no torus to fill.
    char tfile[] = "/tmp/strata_tree_XXXXXX";
    int fd = mkstemp(tfile);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"name\": \"tree\", \"levels\": [\n"
          " {\"name\": \"host\", \"fanout\": 1, \"bandwidth_GBps\": 8, \"latency_us\": 2},\n"
          " {\"name\": \"switch\", \"fanout\": 6, \"bandwidth_GBps\": 0.05, \"latency_us\": 30}]}\n",
          f);
    fclose(f);
    snprintf(env, sizeof env, "STRATA_TOPO_FILE=%s", tfile);
    rc = st_test_ranks(6, torus_choice, (void *)&tree, &o);
    unlink(tfile);
    assert_int_equal(rc, 0);
}

/* Five hosts on a 2x2 torus: every rank's creation fails, naming the file and the torus. */
static int torus_too_small(int rank, int n, void *arg)
{
    (void)n;
    const char *file = arg;
    const torus_case_t tc = {"2x2", 5, 1};
    if (torus_place(rank, &tc))
        return ST_RANK_FAIL("setenv");
    strata_comm_t *c = NULL;
    if (strata_comm_create_from_env(&c) == STRATA_OK) {
        strata_comm_destroy(c);
        return ST_RANK_FAIL("5 hosts on a 2x2 torus were accepted");
    }
    const char *msg = strata_last_error();
    if (!strstr(msg, file) || !strstr(msg, "2x2 torus of 4 cells") || !strstr(msg, "in 5 hosts"))
        return ST_RANK_FAIL("unclear error: %s", msg);
    return 0;
}

static void test_torus_too_small(void **state)
{
    (void)state;
    char file[] = "/tmp/strata_torus_XXXXXX", env[96];
    torus_file(file, "2x2", 1);
    snprintf(env, sizeof env, "STRATA_TOPO_FILE=%s", file);
    st_ranks_opts_t o = {.deadline_ms = 60000, .extra_env = env, .expect_fail_rank = -1};
    int rc = st_test_ranks(5, torus_too_small, file, &o);
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
        cmocka_unit_test(test_torus),
        cmocka_unit_test(test_torus_tcp),
        cmocka_unit_test(test_torus_choice),
        cmocka_unit_test(test_torus_too_small),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
