/* The trainer with its optimizer in the pool (cfg.optimizer_in_pool), 3 ranks, against the ordinary
 * ZeRO-0 trainer from the same seed, with --nonfinite skip and rank 1's loss NaN at step 3 (its step
 * hook, as in mr_train_faults.c): both runs skip step 3 alike, every other step's loss and gradient
 * norm agree, and the parameters are the same on every rank. A skipped step must leave the pool's
 * gradient region empty: left there, step 3's gradients would be added into step 4's, whose norm
 * (and every later loss) would differ. Two pool nodes run in forked processes (the harness forks the ranks from a
 * parent without threads), one dropping, duplicating and reordering datagrams.
 *
 * Tolerance: 1e-5 relative. With 3 ranks the pool adds (0 + g_a) + g_b + g_c in arrival order, the
 * ring in its own order, so the averaged gradients differ in the last float bits; AdamW's
 * per-element normalisation keeps that near 1e-7 over 6 steps. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/st_test.h"
#include "harness/train_checks.h"
#include "strata/pool.h"
#include "strata/train.h"

#define SECRET "mr-train-pool"
#define STEPS  6
#define NODES  2

typedef struct run {
    float loss[STEPS], norm[STEPS];
    bool skipped[STEPS];
} run_t;

static char corpus[1024];

/* STEPS steps of a 3-rank ZeRO-0 trainer, in the pool or not, into *out. */
static int train(strata_comm_t *comm, int rank, bool pool, run_t *out)
{
    strata_train_config_t c = st_tiny_train_config(6, STEPS, corpus);
    c.nonfinite = STRATA_NONFINITE_SKIP;
    c.optimizer_in_pool = pool;
    strata_trainer_t *t;
    ST_RANK_CHECK_OK(strata_trainer_create(&c, &t));
    strata_zero_config_t zc = strata_zero_config_default();
    ST_RANK_CHECK_OK(strata_trainer_distribute(t, comm, &zc));
    strata_trainer_set_sync(t, st_poison_rank1_step3, &rank);
    for (int s = 0; s < STEPS; s++) {
        strata_step_info_t info;
        ST_RANK_CHECK_OK(strata_trainer_step(t, &info));
        out->loss[s] = info.loss;
        out->norm[s] = info.grad_norm;
        out->skipped[s] = info.skipped;
    }
    int bad = st_same_params(comm, t);
    strata_trainer_destroy(t);
    return bad;
}

static bool close_to(float a, float b)
{
    return fabsf(a - b) <= 1e-5f * fabsf(b);
}

static int pool_rank(int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    strata_comm_t *comm = st_test_comm();
    run_t ref, pool;
    if (train(comm, rank, false, &ref) || train(comm, rank, true, &pool))
        return 1;
    for (int s = 0; s < STEPS; s++) {
        if (ref.skipped[s] != (s == 2) || pool.skipped[s] != ref.skipped[s])
            return ST_RANK_FAIL("step %d: skipped %d (ordinary) %d (pool), expected step 3 alone",
                                s + 1, ref.skipped[s], pool.skipped[s]);
        if (!ref.skipped[s] && (!close_to(pool.loss[s], ref.loss[s]) ||
                                !close_to(pool.norm[s], ref.norm[s])))
            return ST_RANK_FAIL("step %d: loss %.7g norm %.7g in the pool, %.7g %.7g ordinary",
                                s + 1, (double)pool.loss[s], (double)pool.norm[s],
                                (double)ref.loss[s], (double)ref.norm[s]);
    }
    strata_comm_destroy(comm);
    return 0;
}

/* A pool node served by a forked child until it is killed; its address into addr. */
static pid_t fork_node(double faults, uint64_t seed, char *addr, size_t size)
{
    strata_pool_node_config_t cfg = {.listen = "127.0.0.1:0", .bytes = 4 << 20, .secret = SECRET,
                                     .drop = faults, .dup = faults, .reorder = faults,
                                     .seed = seed};
    strata_pool_node_t *node;
    assert_int_equal(strata_pool_node_open(&cfg, &node), STRATA_OK);
    snprintf(addr, size, "127.0.0.1:%d", strata_pool_node_port(node));
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        for (;;)
            strata_pool_node_poll(node, 100);
    strata_pool_node_close(node); // the child's copy serves
    return pid;
}

static void test_skip_matches_ordinary(void **state)
{
    (void)state;
    char a[2][32], nodes[80];
    pid_t pid[NODES];
    for (int i = 0; i < NODES; i++)
        pid[i] = fork_node(i == 1 ? 0.05 : 0, 9 + (uint64_t)i, a[i], sizeof a[i]);
    snprintf(nodes, sizeof nodes, "%s,%s", a[0], a[1]);
    setenv("STRATA_POOL_NODES", nodes, 1);
    setenv("STRATA_POOL_SECRET", SECRET, 1);
    int rc = st_test_ranks(3, pool_rank, NULL, NULL);
    for (int i = 0; i < NODES; i++) {
        kill(pid[i], SIGKILL);
        waitpid(pid[i], NULL, 0);
    }
    assert_int_equal(rc, 0);
}

int main(void)
{
    snprintf(corpus, sizeof corpus, "%s", __FILE__);
    *strrchr(corpus, '/') = 0;
    strncat(corpus, "/../../data/corpus/strata_tales.txt", sizeof corpus - strlen(corpus) - 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_skip_matches_ordinary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
