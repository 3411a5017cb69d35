/* The distributed trainer when something goes wrong on one rank (issue 11), 3 ranks:
 *   - rank 1's loss not finite at step 3 (its step hook replaces it by NaN, the way a diverged
 *     forward would; the model itself is not poisoned, so nothing else is at stake): every rank
 *     fails at that step with the same report naming the step, the loss, the norm and rank 1, and
 *     nothing of the step is applied or checkpointed;
 *   - the same with --nonfinite skip: every rank skips step 3, the parameters stay identical on every
 *     rank, training goes on;
 *   - a stop request (the flag a SIGTERM handler sets) on one rank only: every rank stops after the
 *     same step, a final checkpoint of it is committed, the flagged rank reports its signal, the
 *     others -1; a resume on another ZeRO stage continues from that step;
 *   - rank 2 is 60 ms slower than the others in every step (its hook sleeps): every rank's step
 *     reports rank 2 as the straggler once three windows have shown it, and never another rank;
 *   - memory checkpoints every step and disk ones every 4 (ZeRO-3): a job that dies at step 7 on
 *     every rank resumes from memory step 6 (every rank's shard, rank 0's manifest), and steps 7-8
 *     are those of the uninterrupted job;
 *   - rank 1 cannot write its memory shard (a file size limit): every rank agrees the step is not
 *     committed, warns, and trains on. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "harness/st_test.h"
#include "harness/train_checks.h"
#include "strata/train.h"

typedef struct job {
    char dir[256];
    char mem[300];   /* memory checkpoints every step there when set */
    char corpus[1024];
    int stage;
    strata_nonfinite_t policy;
    int straggler_window;
    int steps;
} job_t;

static strata_train_config_t job_cfg(const job_t *j)
{
    strata_train_config_t c = st_tiny_train_config(6, j->steps, j->corpus);
    c.zero = j->stage;
    c.nonfinite = j->policy;
    c.ckpt_keep = 10;
    c.straggler_window = j->straggler_window;
    snprintf(c.ckpt_dir, sizeof c.ckpt_dir, "%s", j->dir);
    if (j->mem[0]) {
        c.steps = 8;
        c.ckpt_every = 4;
        c.mem_ckpt_every = 1;
        snprintf(c.mem_ckpt_dir, sizeof c.mem_ckpt_dir, "%s", j->mem);
    }
    return c;
}

/* A trainer distributed over comm at j's stage (NULL and a message on failure). */
static strata_trainer_t *make_trainer(const job_t *j, strata_comm_t *comm)
{
    strata_train_config_t c = job_cfg(j);
    strata_trainer_t *t;
    if (strata_trainer_create(&c, &t) != STRATA_OK)
        return NULL;
    strata_zero_config_t zc = strata_zero_config_default();
    zc.stage = j->stage;
    if (strata_trainer_distribute(t, comm, &zc) != STRATA_OK) {
        strata_trainer_destroy(t);
        return NULL;
    }
    return t;
}

static int nonfinite_rank(int rank, int n, void *arg)
{
    (void)n;
    const job_t *j = arg;
    strata_comm_t *comm = st_test_comm();
    strata_trainer_t *t = make_trainer(j, comm);
    if (!t)
        return ST_RANK_FAIL("trainer: %s", strata_last_error());
    strata_trainer_set_sync(t, st_poison_rank1_step3, &rank);
    strata_step_info_t info;
    for (int s = 0; s < 2; s++)
        ST_RANK_CHECK_OK(strata_trainer_step(t, &info));
    strata_status_t rc = strata_trainer_step(t, &info);
    int bad = 0;
    if (j->policy == STRATA_NONFINITE_STOP) {
        const char *e = strata_last_error();
        if (rc != STRATA_ERR_INVALID_ARG)
            bad = ST_RANK_FAIL("step 3 returned %s, expected a failure", strata_status_name(rc));
        else if (!strstr(e, "step 3: loss nan, grad norm ") ||
                 !strstr(e, ": not finite (non-finite loss on rank 1); stopped before the update"))
            bad = ST_RANK_FAIL("unexpected report: %s", e);
        else if (strata_trainer_step_count(t) != 2)
            bad = ST_RANK_FAIL("step count %lld after the refused step",
                               (long long)strata_trainer_step_count(t));
    } else {
        if (rc != STRATA_OK || !info.skipped || info.step != 3)
            bad = ST_RANK_FAIL("step 3: %s, skipped %d, step %lld", strata_status_name(rc),
                               info.skipped, (long long)info.step);
        for (int s = 0; !bad && s < 3; s++) {
            rc = strata_trainer_step(t, &info);
            if (rc != STRATA_OK || info.skipped || !isfinite(info.loss))
                bad = ST_RANK_FAIL("step %d after the skip: %s", 4 + s, strata_last_error());
        }
        // Stage 0 holds the whole arena on every rank: it must be the same everywhere.
        if (!bad && j->stage == 0)
            bad = st_same_params(comm, t);
    }
    strata_trainer_destroy(t);
    strata_comm_destroy(comm);
    return bad;
}

static volatile sig_atomic_t stop_flag;

static int stop_rank(int rank, int n, void *arg)
{
    (void)n;
    job_t *j = arg;
    strata_comm_t *comm = st_test_comm();
    strata_trainer_t *t = make_trainer(j, comm);
    if (!t)
        return ST_RANK_FAIL("trainer: %s", strata_last_error());
    for (int s = 0; s < 2; s++)
        ST_RANK_CHECK_OK(strata_trainer_step(t, NULL));
    strata_trainer_set_stop_flag(t, &stop_flag);
    if (rank == 1)
        stop_flag = SIGTERM; // as the handler would: this rank alone got the signal
    ST_RANK_CHECK_OK(strata_trainer_run(t, NULL));
    int want = rank == 1 ? SIGTERM : -1;
    if (strata_trainer_step_count(t) != 3 || strata_trainer_stopped(t) != want)
        return ST_RANK_FAIL("stopped at step %lld (%d), expected 3 (%d)",
                            (long long)strata_trainer_step_count(t), strata_trainer_stopped(t),
                            want);
    strata_trainer_destroy(t);
    int64_t steps[4];
    if (strata_ckpt_steps(j->dir, steps, 4) != 1 || steps[0] != 3)
        return ST_RANK_FAIL("no final checkpoint of step 3 in %s", j->dir);
    // A resume on another stage continues from it (and runs to the end).
    j->stage = 1;
    t = make_trainer(j, comm);
    if (!t)
        return ST_RANK_FAIL("trainer: %s", strata_last_error());
    int64_t at = 0;
    ST_RANK_CHECK_OK(strata_trainer_resume(t, &at));
    if (at != 3)
        return ST_RANK_FAIL("resumed at %lld, expected 3", (long long)at);
    ST_RANK_CHECK_OK(strata_trainer_run(t, NULL));
    if (strata_trainer_stopped(t) != 0 || strata_trainer_step_count(t) != 6)
        return ST_RANK_FAIL("the resumed run stopped at %lld", (long long)strata_trainer_step_count(t));
    strata_trainer_destroy(t);
    strata_comm_destroy(comm);
    return 0;
}

/* Rank 2 computes 60 ms longer every step. */
static strata_status_t slow_rank2(void *ctx, strata_trainer_t *t, float *loss)
{
    (void)t;
    (void)loss;
    if (*(int *)ctx == 2)
        usleep(60 * 1000);
    return STRATA_OK;
}

static int straggler_rank(int rank, int n, void *arg)
{
    (void)n;
    const job_t *j = arg;
    strata_comm_t *comm = st_test_comm();
    strata_trainer_t *t = make_trainer(j, comm);
    if (!t)
        return ST_RANK_FAIL("trainer: %s", strata_last_error());
    strata_trainer_set_sync(t, slow_rank2, &rank);
    bool seen = false;
    for (int s = 1; s <= 20; s++) {
        strata_step_info_t info;
        ST_RANK_CHECK_OK(strata_trainer_step(t, &info));
        if (info.straggler >= 0 && info.straggler != 2)
            return ST_RANK_FAIL("step %d: rank %d flagged, rank 2 is the slow one", s,
                                info.straggler);
        if (info.straggler == 2 && s < 3 * j->straggler_window)
            return ST_RANK_FAIL("step %d: flagged before three windows of %d steps", s,
                                j->straggler_window);
        if (info.straggler == 2 && info.straggler_ratio < 1.2f)
            return ST_RANK_FAIL("step %d: ratio %.2f", s, (double)info.straggler_ratio);
        seen |= info.straggler == 2;
    }
    if (!seen)
        return ST_RANK_FAIL("rank 2, 60 ms slower every step, was never flagged");
    strata_trainer_destroy(t);
    strata_comm_destroy(comm);
    return 0;
}

/* Fails step *ctx on every rank (before its collectives), the way a dead rank ends a job. */
static strata_status_t fail_at(void *ctx, strata_trainer_t *t, float *loss)
{
    (void)loss;
    return strata_trainer_step_count(t) + 1 == *(const int64_t *)ctx ? STRATA_ERR_ABORTED
                                                                     : STRATA_OK;
}

static int memory_resume_rank(int rank, int n, void *arg)
{
    (void)rank, (void)n;
    const job_t *j = arg;
    strata_comm_t *comm = st_test_comm();
    // The job dies at step 7: disk step 4, memory step 6 left.
    strata_trainer_t *t = make_trainer(j, comm);
    if (!t)
        return ST_RANK_FAIL("trainer: %s", strata_last_error());
    int64_t fail = 7;
    float part[8] = {0}, whole[8];
    strata_trainer_set_sync(t, fail_at, &fail);
    if (strata_trainer_run(t, part) != STRATA_ERR_ABORTED || strata_trainer_step_count(t) != 6)
        return ST_RANK_FAIL("the job did not stop at step 7: %s", strata_last_error());
    strata_trainer_destroy(t);
    int64_t steps[4];
    if (strata_ckpt_steps(j->mem, steps, 4) != 1 || steps[0] != 6 ||
        strata_ckpt_steps(j->dir, steps, 4) != 1 || steps[0] != 4)
        return ST_RANK_FAIL("expected memory step 6 and disk step 4");
    // It resumes from memory step 6 and runs 7-8.
    t = make_trainer(j, comm);
    if (!t)
        return ST_RANK_FAIL("trainer: %s", strata_last_error());
    int64_t at = 0;
    ST_RANK_CHECK_OK(strata_trainer_resume(t, &at));
    strata_resume_info_t ri = strata_trainer_resume_info(t);
    if (at != 6 || !ri.from_memory || ri.disk_step != 4 || ri.memory_step != 6)
        return ST_RANK_FAIL("resumed at %lld (memory %d, disk has %lld), expected memory step 6",
                            (long long)at, ri.from_memory, (long long)ri.disk_step);
    ST_RANK_CHECK_OK(strata_trainer_run(t, part));
    strata_trainer_destroy(t);
    // The same job uninterrupted (its memory checkpoints elsewhere, no disk ones).
    job_t ref = *j;
    ref.dir[0] = 0;
    snprintf(ref.mem, sizeof ref.mem, "%s/refmem", j->dir);
    t = make_trainer(&ref, comm);
    if (!t)
        return ST_RANK_FAIL("trainer: %s", strata_last_error());
    ST_RANK_CHECK_OK(strata_trainer_run(t, whole));
    strata_trainer_destroy(t);
    for (int s = 0; s < 8; s++)
        if (whole[s] != part[s])
            return ST_RANK_FAIL("step %d: loss %.9g with the memory resume, %.9g uninterrupted",
                                s + 1, (double)part[s], (double)whole[s]);
    strata_comm_destroy(comm);
    return 0;
}

/* Rank 1 alone cannot write (a file size limit, SIGXFSZ ignored: write() fails with EFBIG). */
static int memory_failure_rank(int rank, int n, void *arg)
{
    (void)n;
    job_t *j = arg;
    j->dir[0] = 0; // memory checkpoints only
    strata_comm_t *comm = st_test_comm();
    strata_trainer_t *t = make_trainer(j, comm);
    if (!t)
        return ST_RANK_FAIL("trainer: %s", strata_last_error());
    // One step first: the transports' shared-memory files are made (the limit would refuse them).
    ST_RANK_CHECK_OK(strata_trainer_step(t, NULL));
    if (rank == 1) {
        struct rlimit lim = {4096, 4096};
        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &lim) != 0)
            return ST_RANK_FAIL("setrlimit failed");
    }
    ST_RANK_CHECK_OK(strata_trainer_run(t, NULL));
    if (strata_trainer_step_count(t) != 8)
        return ST_RANK_FAIL("stopped at step %lld", (long long)strata_trainer_step_count(t));
    strata_trainer_destroy(t);
    int64_t steps[2];
    if (strata_ckpt_steps(j->mem, steps, 2) != 0)
        return ST_RANK_FAIL("memory step %lld committed without rank 1's shard",
                            (long long)steps[0]);
    strata_comm_destroy(comm);
    return 0;
}

static job_t new_job(int stage, strata_nonfinite_t policy)
{
    job_t j = {.stage = stage, .policy = policy, .straggler_window = 20, .steps = 6};
    snprintf(j.corpus, sizeof j.corpus, "%s", __FILE__);
    *strrchr(j.corpus, '/') = 0;
    strncat(j.corpus, "/../../data/corpus/strata_tales.txt", sizeof j.corpus - strlen(j.corpus) - 1);
    snprintf(j.dir, sizeof j.dir, "/tmp/strata_mrtf_XXXXXX");
    assert_non_null(mkdtemp(j.dir));
    return j;
}

static void rm_job(const job_t *j)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", j->dir);
    assert_int_equal(system(cmd), 0);
}

static void test_nonfinite_stop(void **state)
{
    (void)state;
    for (int stage = 0; stage <= 3; stage += 3) {
        job_t j = new_job(stage, STRATA_NONFINITE_STOP);
        assert_int_equal(st_test_ranks(3, nonfinite_rank, &j, NULL), 0);
        int64_t steps[2];
        assert_int_equal(strata_ckpt_steps(j.dir, steps, 2), 0);
        rm_job(&j);
    }
}

static void test_nonfinite_skip(void **state)
{
    (void)state;
    for (int stage = 0; stage <= 3; stage += 3) {
        job_t j = new_job(stage, STRATA_NONFINITE_SKIP);
        assert_int_equal(st_test_ranks(3, nonfinite_rank, &j, NULL), 0);
        rm_job(&j);
    }
}

static void test_memory_resume(void **state)
{
    (void)state;
    job_t j = new_job(3, STRATA_NONFINITE_STOP);
    snprintf(j.mem, sizeof j.mem, "%s/mem", j.dir);
    assert_int_equal(st_test_ranks(3, memory_resume_rank, &j, NULL), 0);
    rm_job(&j);
}

static void test_memory_failure(void **state)
{
    (void)state;
    job_t j = new_job(3, STRATA_NONFINITE_STOP);
    snprintf(j.mem, sizeof j.mem, "%s/mem", j.dir);
    assert_int_equal(st_test_ranks(3, memory_failure_rank, &j, NULL), 0);
    rm_job(&j);
}

static void test_stop_agreed(void **state)
{
    (void)state;
    job_t j = new_job(3, STRATA_NONFINITE_STOP);
    assert_int_equal(st_test_ranks(3, stop_rank, &j, NULL), 0);
    rm_job(&j);
}

static void test_straggler(void **state)
{
    (void)state;
    job_t j = new_job(3, STRATA_NONFINITE_STOP);
    j.straggler_window = 4;
    j.steps = 20;
    assert_int_equal(st_test_ranks(3, straggler_rank, &j, NULL), 0);
    rm_job(&j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nonfinite_stop),
        cmocka_unit_test(test_nonfinite_skip),
        cmocka_unit_test(test_stop_agreed),
        cmocka_unit_test(test_straggler),
        cmocka_unit_test(test_memory_resume),
        cmocka_unit_test(test_memory_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
