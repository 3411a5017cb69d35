/* The communicator's pool allreduce (src/comm/algo/pool.c) against the serial reference: every rank
 * count it serves (2..9), float32 and bfloat16, sum and average, sizes around a block and a slot,
 * over 1..3 pool nodes, with the nodes' seeded drop/duplicate/reorder mode on, with slots smaller
 * than the buffer (several chunks), and a pool node dead before the call (every rank fails, none
 * hangs). The pool nodes are processes of their own, forked before the ranks. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/ref.h"
#include "harness/st_test.h"
#include "strata/pool.h"

#define SECRET "mr-pool-secret"
#define MAX_NODES 3

typedef struct nodes {
    int n;
    pid_t pid[MAX_NODES];
    char env[512]; /* extra_env for the ranks */
} nodes_t;

/* Forks n pool nodes of `bytes` each (fault mode `faults`: drop = dup = reorder), each serving
 * until killed; fills the ranks' STRATA_POOL_NODES. */
static void start_nodes(nodes_t *ns, int n, size_t bytes, double faults, const char *more_env)
{
    ns->n = n;
    int len = snprintf(ns->env, sizeof ns->env,
                       "STRATA_COMM_ALGO=allreduce:pool;%s%s"
                       "STRATA_POOL_NODES=",
                       more_env ? more_env : "", more_env ? ";" : "");
    for (int i = 0; i < n; i++) {
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            strata_pool_node_config_t cfg = {.listen = "127.0.0.1:0", .bytes = bytes,
                                             .secret = SECRET, .drop = faults, .dup = faults,
                                             .reorder = faults, .seed = 11u + (uint64_t)i};
            strata_pool_node_t *node;
            int port = strata_pool_node_open(&cfg, &node) == STRATA_OK ? strata_pool_node_port(node)
                                                                      : -1;
            if (write(fds[1], &port, sizeof port) != sizeof port || port < 0)
                _exit(1);
            close(fds[1]);
            for (;;)
                strata_pool_node_poll(node, 1000);
        }
        close(fds[1]);
        int port = -1;
        assert_int_equal(read(fds[0], &port, sizeof port), (ssize_t)sizeof port);
        close(fds[0]);
        assert_true(port > 0);
        ns->pid[i] = pid;
        len += snprintf(ns->env + len, sizeof ns->env - (size_t)len, "%s127.0.0.1:%d",
                        i ? "," : "", port);
    }
}

static void stop_nodes(nodes_t *ns)
{
    for (int i = 0; i < ns->n; i++) {
        kill(ns->pid[i], SIGKILL);
        waitpid(ns->pid[i], NULL, 0);
    }
}

/* ---- against the reference --------------------------------------------------------------------- */

static const size_t counts[] = {1, 7, 2048, 2049, 100003};

static int allreduce_matches(int rank, int n, void *arg)
{
    (void)arg;
    strata_comm_t *c = st_test_comm();
    if (!c)
        return ST_RANK_FAIL("communicator: %s", strata_last_error());
    const strata_dtype_t dtypes[] = {STRATA_DTYPE_F32, STRATA_DTYPE_BF16};
    const strata_op_t ops[] = {STRATA_OP_SUM, STRATA_OP_AVG};
    for (size_t d = 0; d < 2; d++)
        for (size_t o = 0; o < 2; o++)
            for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
                size_t count = counts[k], es = strata_dtype_size(dtypes[d]);
                uint64_t seed = 100 * d + 10 * o + k;
                char *in = malloc(count * es), *out = malloc(count * es),
                     *want = malloc(count * es), why[256];
                st_ref_fill(dtypes[d], in, count, rank, seed);
                ST_RANK_CHECK_OK(strata_allreduce(c, in, out, count, dtypes[d], ops[o]));
                st_ref_allreduce(dtypes[d], ops[o], n, count, seed, want);
                bool ok = st_ref_compare(dtypes[d], ops[o], n, want, out, count, why, sizeof why);
                // In place too: the send buffer is the result.
                ST_RANK_CHECK_OK(strata_allreduce(c, in, in, count, dtypes[d], ops[o]));
                bool ok2 = st_ref_compare(dtypes[d], ops[o], n, want, in, count, why, sizeof why);
                free(in);
                free(out);
                free(want);
                if (!ok || !ok2)
                    return ST_RANK_FAIL("%s %s count %zu%s: %s", strata_dtype_name(dtypes[d]),
                                        strata_op_name(ops[o]), count, ok ? " in place" : "", why);
            }
    strata_comm_destroy(c);
    return 0;
}

/* Two communicators at once (even and odd ranks), each with its own slots and group: every rank
 * gets its own half's sum. */
static int halves(int rank, int n, void *arg)
{
    (void)arg;
    strata_comm_t *c = st_test_comm(), *half = NULL;
    if (!c)
        return ST_RANK_FAIL("communicator: %s", strata_last_error());
    ST_RANK_CHECK_OK(strata_comm_split(c, rank % 2, rank, &half));
    const size_t count = 100003;
    float *x = malloc(count * 4);
    st_ref_fill(STRATA_DTYPE_F32, x, count, rank, 5);
    for (int rep = 0; rep < 3; rep++) {
        st_ref_fill(STRATA_DTYPE_F32, x, count, rank, 5);
        ST_RANK_CHECK_OK(strata_allreduce(half, x, x, count, STRATA_DTYPE_F32, STRATA_OP_SUM));
        for (size_t i = 0; i < count; i++) {
            double want = 0;
            for (int r = rank % 2; r < n; r += 2)
                want += st_ref_input(STRATA_DTYPE_F32, r, 5, i);
            if (x[i] != (float)want)
                return ST_RANK_FAIL("half %d, element %zu: %g, expected %g", rank % 2, i,
                                    (double)x[i], want);
        }
    }
    free(x);
    strata_comm_destroy(half);
    strata_comm_destroy(c);
    return 0;
}

static void run(int nodes, size_t bytes, double faults, const char *more_env, int from, int to)
{
    nodes_t ns;
    start_nodes(&ns, nodes, bytes, faults, more_env);
    for (int n = from; n <= to; n++) {
        st_ranks_opts_t o = {.deadline_ms = 120000, .extra_env = ns.env, .expect_fail_rank = -1,
                             .secret = SECRET};
        int rc = st_test_ranks(n, allreduce_matches, NULL, &o);
        if (rc != 0) {
            stop_nodes(&ns);
            fail_msg("%d ranks on %d pool nodes (faults %.2f, env %s) failed", n, nodes, faults,
                     ns.env);
        }
    }
    stop_nodes(&ns);
}

/* 2..9 ranks (9: the most hops a packet carries, plus the first rank) on 1, 2 and 3 nodes. */
static void test_ranks_and_nodes(void **state)
{
    (void)state;
    run(1, 16u << 20, 0, NULL, 2, 9);
    run(2, 16u << 20, 0, NULL, 2, 5);
    run(3, 16u << 20, 0, NULL, 9, 9);
}

/* Over tcp between the ranks (the pool is UDP either way). */
static void test_tcp(void **state)
{
    (void)state;
    run(2, 16u << 20, 0, "STRATA_COMM_TRANSPORT=tcp", 3, 3);
}

/* Results by multicast (each communicator's group on loopback), with and without faults, and a
 * split: its own group, so two communicators' results never mix. */
static void test_multicast(void **state)
{
    (void)state;
    run(2, 16u << 20, 0, "STRATA_POOL_MULTICAST=239.192.78.0:47110", 2, 5);
    run(2, 16u << 20, 0.02, "STRATA_POOL_MULTICAST=239.192.78.0:47110;STRATA_POOL_RETRY_MS=5", 4, 4);
    for (int mc = 0; mc < 2; mc++) {
        nodes_t ns;
        start_nodes(&ns, 2, 16u << 20, 0, mc ? "STRATA_POOL_MULTICAST=239.192.78.0:47110" : NULL);
        st_ranks_opts_t o = {.deadline_ms = 120000, .extra_env = ns.env, .expect_fail_rank = -1,
                             .secret = SECRET};
        int rc = st_test_ranks(6, halves, NULL, &o);
        stop_nodes(&ns);
        assert_int_equal(rc, 0);
    }
}

/* Lost, duplicated and reordered packets at every node: results still exact. */
static void test_faults(void **state)
{
    (void)state;
    run(2, 16u << 20, 0.02, "STRATA_POOL_RETRY_MS=5", 2, 4);
}

/* Slots of 16 KiB (64 KiB nodes, 4 ranks per node): the 100003-element calls run in chunks. */
static void test_chunks(void **state)
{
    (void)state;
    run(1, 64u << 10, 0, NULL, 4, 4);
}

/* ---- a dead node ------------------------------------------------------------------------------- */

/* With a node's pid as arg, rank 0 kills it after one good allreduce (mid-run: every client is
 * open); without, the node died before the communicator first used the pool. */
static int dead_node(int rank, int n, void *arg)
{
    const pid_t *victim = arg;
    strata_comm_t *c = st_test_comm();
    if (!c)
        return ST_RANK_FAIL("communicator: %s", strata_last_error());
    float x[4096];
    for (int i = 0; i < 4096; i++)
        x[i] = (float)rank;
    if (victim) {
        ST_RANK_CHECK_OK(strata_allreduce(c, x, x, 4096, STRATA_DTYPE_F32, STRATA_OP_SUM));
        if (x[0] != (float)(n * (n - 1) / 2))
            return ST_RANK_FAIL("sum before the kill: %g", (double)x[0]);
        if (rank == 0)
            kill(*victim, SIGKILL);
        ST_RANK_CHECK_OK(strata_barrier(c));
    }
    strata_status_t rc = strata_allreduce(c, x, x, 4096, STRATA_DTYPE_F32, STRATA_OP_SUM);
    if (rc == STRATA_OK)
        return ST_RANK_FAIL("allreduce through a dead pool node succeeded");
    if (!strstr(strata_last_error(), "pool"))
        return ST_RANK_FAIL("error does not say the pool failed: %s", strata_last_error());
    fprintf(stderr, "rank %d: %s\n", rank, strata_last_error());
    // No strata_comm_abort here: another rank may still be waiting for rank 0's verdict on this
    // call, and an abort reaching it first would end its wait with "rank N aborted" instead.
    strata_comm_destroy(c);
    return 0;
}

/* Node 1 of 2 dies before the first call, or between two calls: every rank returns an error
 * naming the pool within the timeout (the test's deadline is the hang check). */
static void test_dead_node(void **state)
{
    (void)state;
    for (int mid = 0; mid < 2; mid++) {
        nodes_t ns;
        start_nodes(&ns, 2, 1u << 20, 0, "STRATA_POOL_TIMEOUT_MS=1500");
        if (!mid)
            kill(ns.pid[1], SIGKILL);
        st_ranks_opts_t o = {.deadline_ms = 60000, .extra_env = ns.env, .expect_fail_rank = -1,
                             .secret = SECRET};
        int rc = st_test_ranks(4, dead_node, mid ? &ns.pid[1] : NULL, &o);
        stop_nodes(&ns);
        assert_int_equal(rc, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranks_and_nodes), cmocka_unit_test(test_tcp),
        cmocka_unit_test(test_multicast),
        cmocka_unit_test(test_faults),          cmocka_unit_test(test_chunks),
        cmocka_unit_test(test_dead_node),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
