/* The planner and the communicator price a collective alike: for fabrics flat, of 2 levels, of 3
 * levels with oversubscribed uplinks, and irregular, for strided groups of a layout and sizes from
 * 8 bytes to 1 GiB, the planner's prediction (st_plan_coll, what step.c and model.c use) equals the
 * price of the algorithm a real communicator of that group chooses (strata_comm_predict and
 * strata_comm_algo_for on a split of a world whose ranks were placed by STRATA_TOPO_PATH and
 * STRATA_TOPO_FILE). Also: the communicator's registry and the price's catalogue list the same
 * algorithms for every collective. */
#include "comm/algo/algo.h"
#include "harness/st_test.h"
#include "plan/plan_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_GROUPS 4

typedef struct fabric_case {
    const char *name;
    const char *json; /* every level with its own efficiency: both sides read the same numbers */
    strata_group_t groups[MAX_GROUPS];
    int ngroups;
} fabric_case_t;

static fabric_case_t cases[] = {
    {"flat",
     "{\"name\":\"flat\",\"levels\":["
     "{\"name\":\"host\",\"fanout\":4,\"bandwidth_GBps\":100,\"latency_us\":3,\"class\":\"scale-up\","
     "\"efficiency\":0.9},"
     "{\"name\":\"rack\",\"fanout\":1,\"bandwidth_GBps\":10,\"latency_us\":5,\"efficiency\":0.8}]}",
     {{1, {{4, 1}}}, {1, {{2, 1}}}, {1, {{2, 2}}}},
     3},
    {"two-level",
     "{\"name\":\"two-level\",\"levels\":["
     "{\"name\":\"host\",\"fanout\":2,\"bandwidth_GBps\":100,\"latency_us\":3,\"class\":\"scale-up\","
     "\"efficiency\":0.9},"
     "{\"name\":\"rack\",\"fanout\":3,\"bandwidth_GBps\":12.5,\"latency_us\":5,\"efficiency\":0.8}]}",
     {{1, {{6, 1}}}, {1, {{3, 2}}}, {1, {{2, 3}}}},
     3},
    {"three-level-oversubscribed",
     "{\"name\":\"three-level\",\"levels\":["
     "{\"name\":\"host\",\"fanout\":2,\"bandwidth_GBps\":100,\"latency_us\":3,\"class\":\"scale-up\","
     "\"efficiency\":0.9},"
     "{\"name\":\"rack\",\"fanout\":2,\"bandwidth_GBps\":12.5,\"latency_us\":5,\"oversubscription\":2,"
     "\"efficiency\":0.8},"
     "{\"name\":\"spine\",\"fanout\":2,\"bandwidth_GBps\":12.5,\"latency_us\":9,"
     "\"oversubscription\":4,\"efficiency\":0.8}]}",
     {{1, {{8, 1}}}, {1, {{4, 2}}}, {1, {{2, 4}}}, {2, {{2, 1}, {2, 4}}}},
     4},
    {"irregular",
     "{\"name\":\"irregular\",\"levels\":["
     "{\"name\":\"host\",\"fanout\":4,\"bandwidth_GBps\":100,\"latency_us\":3,\"class\":\"scale-up\","
     "\"efficiency\":0.9},"
     "{\"name\":\"rack\",\"fanout\":3,\"bandwidth_GBps\":10,\"latency_us\":7,\"oversubscription\":3,"
     "\"efficiency\":0.7}]}",
     /* members 0,3 | 6 | 9;  0,2 | 4,6 | 8;  0 | 5 | 10 */
     {{1, {{4, 3}}}, {1, {{5, 2}}}, {1, {{3, 5}}}},
     3},
};

static const size_t sizes[] = {8, 4096, 1u << 20, 64u << 20, 1u << 30};
static const strata_coll_t colls[] = {STRATA_COLL_ALLREDUCE, STRATA_COLL_REDUCE_SCATTER,
                                      STRATA_COLL_ALLGATHER};

/* The planner's problem on this fabric: its tree, and an accelerator whose reduction cost
 * 3 / (mem_bw x eta_mem) equals the communicator's 1e-10 s/B. */
static strata_plan_problem_t problem(const fabric_case_t *fc)
{
    strata_plan_problem_t pb = {0};
    if (strata_topo_parse(fc->json, fc->name, &pb.topo) != STRATA_OK)
        fprintf(stderr, "%s: %s\n", fc->name, strata_last_error()); /* the parent asserts it */
    pb.accel.mem_bw_Bps = 3e10;
    pb.calib = strata_calib_default();
    pb.calib.eta_mem = 1;
    return pb;
}

/* Member index of accelerator `acc` in g, or -1. */
static int member_of(const strata_group_t *g, long long acc)
{
    long long n = strata_group_size(g);
    for (long long m = 0; m < n; m++) {
        long long rest = m, a = 0;
        for (int d = 0; d < g->ndims; d++) {
            a += rest % g->dim[d].size * g->dim[d].stride;
            rest /= g->dim[d].size;
        }
        if (a == acc)
            return (int)m;
    }
    return -1;
}

/* "u1_0/u0_3": the units holding accelerator `acc` at every level below the outermost. */
static void path_of(const strata_topo_t *t, long long acc, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int l = t->nlevels - 2; l >= 0; l--)
        at += (size_t)snprintf(buf + at, cap - at, "%su%d_%lld", at ? "/" : "", l,
                               acc / strata_topo_domain_size(t, l + 1));
}

/* The price's name of the communicator's algorithm `name` for `coll` (allgather's "bruck" is the
 * price's recursive_doubling). */
static strata_algo_t model_of(strata_coll_t coll, const char *name)
{
    for (int i = 0; i < st_nalgos; i++)
        if (st_algos[i]->coll == coll && !strcmp(st_algos[i]->name, name))
            return st_algos[i]->model;
    return STRATA_ALGO_COUNT;
}

static int agree(int rank, int n, void *arg)
{
    (void)n;
    const fabric_case_t *fc = arg;
    const strata_plan_problem_t pb = problem(fc);
    char path[256];
    path_of(&pb.topo, rank, path, sizeof path);
    if (setenv("STRATA_TOPO_PATH", path, 1) || unsetenv("STRATA_COMM_ALGO"))
        return ST_RANK_FAIL("setenv");
    strata_comm_t *world = st_test_comm();
    if (!world)
        return ST_RANK_FAIL("no communicator: %s", strata_last_error());
    int bad = 0;
    for (int gi = 0; gi < fc->ngroups; gi++) {
        const strata_group_t *g = &fc->groups[gi];
        int m = member_of(g, rank);
        strata_comm_t *sub = NULL;
        ST_RANK_CHECK_OK(strata_comm_split(world, m >= 0 ? 0 : -1, m, &sub));
        if (!sub)
            continue;
        for (size_t c = 0; c < sizeof colls / sizeof colls[0] && !bad; c++)
            for (size_t k = 0; k < sizeof sizes / sizeof sizes[0] && !bad; k++) {
                strata_price_t plan;
                ST_RANK_CHECK_OK(st_plan_coll(&pb, g, colls[c], (double)sizes[k], &plan));
                double comm = strata_comm_predict(sub, colls[c], sizes[k], false);
                const char *algo = strata_comm_algo_for(sub, colls[c], sizes[k], false);
                if (model_of(colls[c], algo) != plan.algo ||
                    fabs(comm - plan.seconds) > 1e-12 * plan.seconds)
                    bad = ST_RANK_FAIL("%s, group %d, %s of %zu B: the planner predicts %s in "
                                       "%.17g s, the communicator runs %s priced %.17g s",
                                       fc->name, gi, strata_coll_name(colls[c]), sizes[k],
                                       strata_algo_name(plan.algo), plan.seconds, algo, comm);
            }
        strata_comm_destroy(sub);
    }
    strata_comm_destroy(world);
    return bad;
}

static void test_planner_and_communicator_agree(void **state)
{
    (void)state;
    unsigned chosen = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fabric_case_t *fc = &cases[i];
        strata_topo_t topo;
        assert_int_equal(strata_topo_parse(fc->json, fc->name, &topo), STRATA_OK);
        char file[] = "/tmp/strata_agree_XXXXXX";
        int fd = mkstemp(file);
        assert_true(fd >= 0);
        assert_true(write(fd, fc->json, strlen(fc->json)) == (ssize_t)strlen(fc->json));
        close(fd);
        // The ranks share this one machine, which the fabric spreads over hosts: without adoption
        // of malloc buffers (STRATA_SHM_ADOPT=0) and the mailboxes (STRATA_SHM_MAILBOX=0) they use
        // the same algorithms as on real hosts, where those single-host paths cannot run.
        char env[200];
        snprintf(env, sizeof env, "STRATA_TOPO_FILE=%s;STRATA_SHM_ADOPT=0;STRATA_SHM_MAILBOX=0",
                 file);
        st_ranks_opts_t o = {.deadline_ms = 120000, .extra_env = env, .expect_fail_rank = -1};
        int rc = st_test_ranks((int)strata_topo_capacity(&topo), agree, fc, &o);
        unlink(file);
        if (rc != 0)
            fail_msg("%s: the planner and the communicator disagree", fc->name);
        // Which algorithms the agreement covered.
        strata_plan_problem_t pb = problem(fc);
        for (int gi = 0; gi < fc->ngroups; gi++)
            for (size_t c = 0; c < sizeof colls / sizeof colls[0]; c++)
                for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
                    strata_price_t p;
                    assert_int_equal(
                        st_plan_coll(&pb, &fc->groups[gi], colls[c], (double)sizes[k], &p),
                        STRATA_OK);
                    chosen |= STRATA_PRICE_OFFER(p.algo);
                }
    }
    const strata_algo_t want[] = {STRATA_ALGO_RING, STRATA_ALGO_RECURSIVE_DOUBLING,
                                  STRATA_ALGO_HALVING_DOUBLING, STRATA_ALGO_HIER};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!(chosen & STRATA_PRICE_OFFER(want[i])))
            fail_msg("no case chose %s", strata_algo_name(want[i]));
}

static void test_registry_matches_catalogue(void **state)
{
    (void)state;
    for (int c = 0; c < STRATA_COLL_COUNT; c++)
        for (int a = 0; a < STRATA_ALGO_COUNT; a++) {
            int entries = 0;
            for (int i = 0; i < st_nalgos; i++)
                entries += st_algos[i]->coll == (strata_coll_t)c && st_algos[i]->model == (strata_algo_t)a;
            if (entries != (strata_price_serves((strata_coll_t)c, (strata_algo_t)a) ? 1 : 0))
                fail_msg("%s: the registry has %d %s, the price %s it",
                         strata_coll_name((strata_coll_t)c), entries,
                         strata_algo_name((strata_algo_t)a),
                         strata_price_serves((strata_coll_t)c, (strata_algo_t)a) ? "serves"
                                                                                 : "does not serve");
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_matches_catalogue),
        cmocka_unit_test(test_planner_and_communicator_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
