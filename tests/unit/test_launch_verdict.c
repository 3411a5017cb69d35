/* The verdict on a failed job (src/launch/verdict.c) and the reading of its dump directory
 * (src/launch/dumps.c), on hand-made observations and dumps, so each rule is checked in the order
 * of events that defeated the old launcher (it named the first rank to exit):
 *   - the survivors exit with status 1 before the rank that was SIGKILLed is reaped: the killed
 *     rank is named (the launcher had blamed a healthy rank over TCP);
 *   - a SIGSTOPped rank never exits: it is named from its stopped state, with the dumps' sentence;
 *   - the dumps' consensus, the one rank without a dump, and the first non-zero exit as last
 * resort;
 *   - a malformed dump is reported naming the file and what was expected, and the rest is used.
 * tests/cli/faults.sh checks the same on real jobs under `strata launch`.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/st_test.h"
#include "strata/launch.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/strata_verdict_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void write_file(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A dump as the communicator writes it: two done allreduces, then #12 started. */
static void write_dump(int rank, int nranks, int culprit, const char *error)
{
    char name[32], text[4096];
    snprintf(name, sizeof name, "rank%d.json", rank);
    snprintf(text, sizeof text,
             "{\n  \"rank\":%d,\n  \"nranks\":%d,\n  \"host\":\"h\",\n  \"pid\":%d,\n"
             "  \"status\":\"STRATA_ERR_TIMEOUT\",\n  \"error\":\"%s\",\n  \"culprit\":%d,\n"
             "  \"completed\":11,\n  \"flight\":[\n"
             "    {\"ctx\":1, \"seq\":10, \"op\":\"allreduce\", \"algo\":\"ring\", \"bytes\":8,"
             " \"state\":\"done\", \"ms\":0.5},\n"
             "    {\"ctx\":1, \"seq\":11, \"op\":\"allreduce\", \"algo\":\"ring\", \"bytes\":8,"
             " \"state\":\"done\", \"ms\":0.5},\n"
             "    {\"ctx\":1, \"seq\":12, \"op\":\"allreduce\", \"algo\":\"ring\", \"bytes\":8,"
             " \"state\":\"started\", \"ms\":-1}\n  ]\n}\n",
             rank, nranks, 100 + rank, error, culprit);
    write_file(name, text);
}

static strata_rank_obs_t exited(int rank, int status, int order)
{
    return (strata_rank_obs_t){
        .pid = 100 + rank, .end = STRATA_RANK_EXITED, .status = status, .order = order};
}

static strata_rank_obs_t signaled(int rank, int sig, bool by_launcher, int order)
{
    return (strata_rank_obs_t){.pid = 100 + rank,
                               .end = STRATA_RANK_SIGNALED,
                               .status = sig,
                               .by_launcher = by_launcher,
                               .order = order};
}

/* Loads the directory with the launcher's observations (obs may be NULL: dumps alone). */
static strata_diag_t *load(const strata_rank_obs_t *obs, int n)
{
    strata_diag_t *d = NULL;
    assert_int_equal(strata_diag_load(dir, obs ? n : 0, &d), STRATA_OK);
    if (obs) {
        free(d->obs);
        d->obs = malloc((size_t)n * sizeof *obs);
        memcpy(d->obs, obs, (size_t)n * sizeof *obs);
    }
    return d;
}

#define STOPPED_MSG                                                                               \
    "rank 2 (host h pid 102) failed: stopped responding during allreduce #12; ranks 0-1, 3 were " \
    "waiting for it (seen by rank 0)"

/* Rank 0 was SIGKILLed (by the OOM killer, say); rank 3 noticed first and exited 1 before rank 0
 * was reaped, and its dump blames rank 1. The launcher's SIGTERM killed the rest. */
static void test_foreign_signal_beats_first_exit(void **state)
{
    (void)state;
    write_dump(3, 4, 1, "rank 1 (host h pid 101) failed: connection reset");
    strata_rank_obs_t obs[4] = {signaled(0, SIGKILL, false, 2), signaled(1, SIGTERM, true, 3),
                                signaled(2, SIGTERM, true, 4), exited(3, 1, 1)};
    strata_diag_t *d = load(obs, 4);
    strata_verdict_t v;
    strata_verdict_decide(d, &v);
    assert_int_equal(v.rank, 0);
    assert_int_equal(v.basis, STRATA_VERDICT_SIGNAL);
    assert_int_equal(v.exit_code, 128 + SIGKILL);
    assert_string_equal(v.text, "rank 0 (pid 100) was killed by signal SIGKILL (not sent by the "
                                "launcher)");
    strata_diag_free(d);
}

/* Rank 2 was SIGSTOPped: the survivors' census blamed it, rank 3 exited first, and the launcher
 * found rank 2 stopped and killed it itself. */
static void test_stopped_beats_first_exit(void **state)
{
    (void)state;
    for (int r = 0; r < 4; r++)
        if (r != 2)
            write_dump(r, 4, 2, STOPPED_MSG);
    strata_rank_obs_t obs[4] = {exited(0, 1, 2), exited(1, 1, 3), signaled(2, SIGKILL, true, 4),
                                exited(3, 1, 1)};
    obs[2].stopped = true;
    strata_diag_t *d = load(obs, 4);
    assert_int_equal(d->nproblems, 0);
    strata_verdict_t v;
    strata_verdict_decide(d, &v);
    assert_int_equal(v.rank, 2);
    assert_int_equal(v.basis, STRATA_VERDICT_STOPPED);
    assert_int_equal(v.blamed_by, 3);
    assert_int_equal(v.exit_code, 1); // the stopped rank was killed by the launcher: rank 3's code
    assert_string_equal(v.text, "rank 2 (pid 102) was found stopped (SIGSTOP/SIGTSTP): "
                                "stopped responding during allreduce #12; ranks 0-1, 3 were "
                                "waiting for it (seen by rank 0)");
    strata_diag_free(d);
}

/* Two ranks were stopped (one only for a moment on its way out, say): the one the dumps blame. */
static void test_several_stopped(void **state)
{
    (void)state;
    for (int r = 0; r < 4; r++)
        if (r != 2)
            write_dump(r, 4, 2, STOPPED_MSG);
    strata_rank_obs_t obs[4] = {exited(0, 1, 2), exited(1, 1, 1), signaled(2, SIGKILL, true, 4),
                                signaled(3, SIGKILL, true, 3)};
    obs[2].stopped = obs[3].stopped = true;
    strata_diag_t *d = load(obs, 4);
    strata_verdict_t v;
    strata_verdict_decide(d, &v);
    assert_int_equal(v.rank, 2);
    assert_int_equal(v.basis, STRATA_VERDICT_STOPPED);
    strata_diag_free(d);
    // Without dumps, the first of them to end.
    for (int r = 0; r < 4; r++) {
        char path[128];
        snprintf(path, sizeof path, "%s/rank%d.json", dir, r);
        unlink(path);
    }
    d = load(obs, 4);
    strata_verdict_decide(d, &v);
    assert_int_equal(v.rank, 3);
    strata_diag_free(d);
}

/* No signal, nothing stopped: the rank the dumps agree on, not rank 1 that exited first. */
static void test_dumps_consensus(void **state)
{
    (void)state;
    const char *msg = "rank 3 (host h pid 103), which serves the store, failed: lost connection";
    write_dump(0, 4, 3, msg);
    write_dump(1, 4, 3, msg);
    write_dump(2, 4, 1, "rank 1 (host h pid 101) failed: gone"); // a minority opinion
    write_dump(3, 4, -1, "the store stopped");
    strata_rank_obs_t obs[4] = {exited(0, 1, 2), exited(1, 1, 1), exited(2, 1, 3), exited(3, 3, 4)};
    strata_diag_t *d = load(obs, 4);
    strata_verdict_t v;
    strata_verdict_decide(d, &v);
    assert_int_equal(v.rank, 3);
    assert_int_equal(v.basis, STRATA_VERDICT_DUMPS);
    assert_int_equal(v.exit_code, 3); // its own status
    assert_string_equal(v.text, "rank 3 (pid 103), which serves the store, failed: lost connection "
                                "(it had completed 11 operations)");
    strata_diag_free(d);
}

/* Programs that write no dumps: the first rank to exit non-zero; exits the launcher caused by its
 * SIGTERM are not failures. */
static void test_first_exit_is_the_last_resort(void **state)
{
    (void)state;
    strata_rank_obs_t obs[3] = {signaled(0, SIGTERM, true, 2), exited(1, 7, 1), exited(2, 0, 3)};
    strata_diag_t *d = load(obs, 3);
    strata_verdict_t v;
    strata_verdict_decide(d, &v);
    assert_int_equal(v.rank, 1);
    assert_int_equal(v.basis, STRATA_VERDICT_EXIT);
    assert_int_equal(v.exit_code, 7);
    assert_string_equal(v.text, "rank 1 (pid 101) exited with status 7");
    strata_diag_free(d);

    strata_rank_obs_t ok[2] = {exited(0, 0, 1), exited(1, 0, 2)};
    d = load(ok, 2);
    strata_verdict_decide(d, &v);
    assert_int_equal(v.rank, -1);
    assert_int_equal(v.basis, STRATA_VERDICT_NONE);
    strata_diag_free(d);
}

/* `strata diagnose` on dumps alone, none blaming anyone: the one rank without a dump. */
static void test_missing_dump(void **state)
{
    (void)state;
    for (int r = 0; r < 4; r++)
        if (r != 1)
            write_dump(r, 4, -1, "timed out waiting for rank 1");
    strata_diag_t *d = load(NULL, 0);
    assert_int_equal(d->nranks, 4);
    assert_null(d->obs);
    assert_null(d->dumps[1]);
    strata_verdict_t v;
    strata_verdict_decide(d, &v);
    assert_int_equal(v.rank, 1);
    assert_int_equal(v.basis, STRATA_VERDICT_NO_DUMP);
    assert_non_null(strstr(v.text, "rank 1 left no dump (dead or stopped)"));
    strata_diag_free(d);
}

/* A malformed dump names its file and what was expected; the others are still read and judged. */
static void test_malformed_dump(void **state)
{
    (void)state;
    write_dump(0, 4, 2, STOPPED_MSG);
    write_dump(3, 4, 2, STOPPED_MSG);
    write_file("rank1.json",
               "{\"rank\":1, \"nranks\":4, \"host\":\"h\", \"pid\":5, \"status\":\"x\","
               "\n \"error\":\"e\",\n \"culprit\":\"two\", \"completed\":1, "
               "\"flight\":[]}\n");
    write_file("rank2.json", "{\"rank\":2, \"nranks\":4, \"host\"");
    write_file("notes.txt", "not a dump");
    strata_diag_t *d = load(NULL, 0);
    assert_int_equal(d->nproblems, 2);
    const char *p1 = strstr(d->problems[0], "rank1.json") ? d->problems[0] : d->problems[1];
    const char *p2 = p1 == d->problems[0] ? d->problems[1] : d->problems[0];
    assert_non_null(strstr(p1, "rank1.json:3: expected an integer"));
    assert_non_null(strstr(p1, "\"culprit\""));
    assert_non_null(strstr(p2, "rank2.json:1: expected valid JSON"));
    assert_non_null(d->dumps[0]);
    assert_non_null(d->dumps[3]);
    assert_int_equal(d->dumps[0]->nflight, 3);
    assert_int_equal(d->dumps[0]->flight[2].state, STRATA_FLIGHT_STARTED);
    assert_int_equal(d->dumps[0]->flight[2].seq, 12);
    strata_verdict_t v;
    strata_verdict_decide(d, &v);
    assert_int_equal(v.rank, 2);
    assert_int_equal(v.basis, STRATA_VERDICT_DUMPS);
    assert_string_equal(v.text, "rank 2 stopped responding during allreduce #12; ranks 0-1, 3 were "
                                "waiting for it (seen by rank 0)");
    strata_diag_free(d);
}

/* A dump whose name and content disagree, or from a job of another size, is not taken. */
static void test_inconsistent_dumps(void **state)
{
    (void)state;
    write_dump(0, 4, 2, STOPPED_MSG);
    write_dump(1, 8, 2, STOPPED_MSG); // another job's size: the majority says 4
    write_dump(2, 4, 2, STOPPED_MSG);
    write_dump(3, 4, 2, STOPPED_MSG);
    char path[128], path2[128];
    snprintf(path, sizeof path, "%s/rank3.json", dir);
    snprintf(path2, sizeof path2, "%s/rank1.json", dir);
    assert_int_equal(rename(path2, path), 0); // rank3.json now says "rank": 1
    write_dump(1, 8, 2, STOPPED_MSG);
    strata_diag_t *d = load(NULL, 0);
    assert_int_equal(d->nranks, 4);
    assert_int_equal(d->nproblems, 2);
    bool size = false, name = false;
    for (int i = 0; i < 2; i++) {
        size |= strstr(d->problems[i], "rank1.json: expected \"nranks\": 4") != NULL;
        name |= strstr(d->problems[i], "rank3.json:2: expected \"rank\": 3") != NULL;
    }
    assert_true(size);
    assert_true(name);
    assert_non_null(d->dumps[0]);
    assert_null(d->dumps[1]);
    assert_non_null(d->dumps[2]);
    assert_null(d->dumps[3]);
    strata_diag_free(d);
}

/* launch.json round trip: diagnose later sees what the launcher saw. */
static void test_observations_round_trip(void **state)
{
    (void)state;
    strata_rank_obs_t obs[3] = {signaled(0, SIGKILL, false, 1), signaled(1, SIGTERM, true, 2),
                                exited(2, 1, 3)};
    obs[1].stopped = true;
    assert_int_equal(strata_diag_save_obs(dir, "job-1", 3, obs, "rank 0 ..."), STRATA_OK);
    strata_diag_t *d = NULL;
    assert_int_equal(strata_diag_load(dir, 0, &d), STRATA_OK);
    assert_int_equal(d->nproblems, 0);
    assert_int_equal(d->nranks, 3);
    assert_non_null(d->obs);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(d->obs[r].pid, obs[r].pid);
        assert_int_equal(d->obs[r].end, obs[r].end);
        assert_int_equal(d->obs[r].status, obs[r].status);
        assert_int_equal(d->obs[r].by_launcher, obs[r].by_launcher);
        assert_int_equal(d->obs[r].stopped, obs[r].stopped);
        assert_int_equal(d->obs[r].order, obs[r].order);
    }
    strata_verdict_t v;
    strata_verdict_decide(d, &v);
    assert_int_equal(v.rank, 0);
    assert_int_equal(v.exit_code, 137);
    char *json = strata_diag_to_json(d, &v);
    assert_non_null(json);
    assert_non_null(strstr(json, "\"basis\":\"signal\""));
    free(json);
    strata_diag_free(d);
}

static void test_rank_ranges(void **state)
{
    (void)state;
    bool f[8] = {1, 1, 1, 0, 1, 0, 1, 1};
    char buf[64];
    strata_rank_ranges(f, 8, buf, sizeof buf);
    assert_string_equal(buf, "0-2, 4, 6-7");
    bool none[2] = {0, 0};
    strata_rank_ranges(none, 2, buf, sizeof buf);
    assert_string_equal(buf, "");
}

static void test_missing_directory(void **state)
{
    (void)state;
    strata_diag_t *d = NULL;
    assert_int_equal(strata_diag_load("/nonexistent/strata-dumps", 0, &d), STRATA_ERR_IO);
    assert_null(d);
    assert_non_null(strstr(strata_last_error(), "/nonexistent/strata-dumps"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_foreign_signal_beats_first_exit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stopped_beats_first_exit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_several_stopped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dumps_consensus, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_exit_is_the_last_resort, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_dump, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_dump, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inconsistent_dumps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_observations_round_trip, setup, teardown),
        cmocka_unit_test(test_rank_ranges),
        cmocka_unit_test(test_missing_directory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
