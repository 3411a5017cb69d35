/* The mailboxes (src/comm/mailbox.c), the latency path of small blocking allreduces on one host:
 * - every rank gets the same bits: floats summed at 2, 3, 5 and 8 ranks, compared across ranks
 *   byte for byte and against the serial reference, every slot size up to the limit, in place too;
 * - consecutive calls reuse the two slots alternately with ranks running ahead, and the mailboxes
 *   match the schedules' results (STRATA_SHM_MAILBOX=0) call for call;
 * - a non-blocking allreduce still in flight progresses while a rank waits in a mailbox: one rank
 *   waits for the big request before its small allreduce, the others after (this deadlocked
 *   before the mailbox's wait stepped the other requests);
 * - a rank killed while the others wait in a mailbox is named by every survivor within half the
 *   timeout, and later calls fail at once.
 * mr_collectives and mr_failure's timeout test cover every dtype and op and the absent rank. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness/ref.h"
#include "harness/st_test.h"

#define MAX_BYTES 1024 /* STRATA_SHM_MAILBOX's default */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Every count up to the limit in f32 and bf16, some in place, with the results gathered and
 * compared byte for byte across ranks. */
static int same_bits(int rank, int n, void *arg)
{
    (void)arg;
    strata_comm_t *c = st_test_comm();
    const strata_dtype_t dts[] = {STRATA_DTYPE_F32, STRATA_DTYPE_BF16, STRATA_DTYPE_F64};
    uint64_t seed = 11;
    char *all = malloc((size_t)n * MAX_BYTES);
    for (int d = 0; d < 3; d++) {
        size_t es = strata_dtype_size(dts[d]);
        for (size_t count = 1; count * es <= MAX_BYTES; count += 1 + count / 3) {
            char send[MAX_BYTES], recv[MAX_BYTES], exp[MAX_BYTES], why[256];
            bool in_place = count % 2;
            char *out = in_place ? send : recv;
            st_ref_fill(dts[d], send, count, rank, seed);
            st_ref_allreduce(dts[d], STRATA_OP_SUM, n, count, seed++, exp);
            ST_RANK_CHECK_OK(strata_allreduce(c, send, out, count, dts[d], STRATA_OP_SUM));
            if (!st_ref_compare(dts[d], STRATA_OP_SUM, n, exp, out, count, why, sizeof why))
                return ST_RANK_FAIL("%s count %zu: %s", strata_dtype_name(dts[d]), count, why);
            ST_RANK_CHECK_OK(strata_allgather(c, out, all, count * es, STRATA_DTYPE_U8));
            for (int q = 0; q < n; q++)
                if (memcmp(all + (size_t)q * count * es, out, count * es))
                    return ST_RANK_FAIL("%s count %zu: rank %d's result differs from rank %d's",
                                        strata_dtype_name(dts[d]), count, q, rank);
        }
    }
    free(all);
    strata_comm_destroy(c);
    return 0;
}

/* 2000 calls in a row with a rank that sometimes naps (the others run ahead into the next call):
 * each call's result must be its own. Run with and without the mailboxes. */
static int many_calls(int rank, int n, void *arg)
{
    (void)arg;
    strata_comm_t *c = st_test_comm();
    for (int i = 0; i < 2000; i++) {
        int64_t x[4] = {i, rank, (int64_t)i * rank, 1}, y[4];
        if (rank == i % n && i % 97 == 0)
            usleep(2000);
        ST_RANK_CHECK_OK(strata_allreduce(c, x, y, 4, STRATA_DTYPE_I64, STRATA_OP_SUM));
        int64_t ranks = (int64_t)n * (n - 1) / 2;
        if (y[0] != (int64_t)i * n || y[1] != ranks || y[2] != i * ranks || y[3] != n)
            return ST_RANK_FAIL("call %d: got %lld %lld %lld %lld", i, (long long)y[0],
                                (long long)y[1], (long long)y[2], (long long)y[3]);
    }
    strata_comm_destroy(c);
    return 0;
}

/* Rank 0 waits for a big non-blocking allreduce before its small blocking one; the other ranks
 * make the small one first. They sit in the mailbox while rank 0 needs their part of the big one. */
static int progress_in_flight(int rank, int n, void *arg)
{
    (void)arg;
    strata_comm_t *c = st_test_comm();
    const size_t count = 1u << 20;
    float *big = malloc(count * sizeof *big);
    for (size_t i = 0; i < count; i++)
        big[i] = (float)(i % 5);
    float x = (float)rank, sum = 0;
    // The mailboxes are set up first: their set-up waits like any collective, stepping requests.
    ST_RANK_CHECK_OK(strata_allreduce(c, &x, &sum, 1, STRATA_DTYPE_F32, STRATA_OP_SUM));
    strata_request_t *req;
    ST_RANK_CHECK_OK(strata_iallreduce(c, big, big, count, STRATA_DTYPE_F32, STRATA_OP_SUM, &req));
    if (rank == 0)
        ST_RANK_CHECK_OK(strata_request_wait(req));
    ST_RANK_CHECK_OK(strata_allreduce(c, &x, &sum, 1, STRATA_DTYPE_F32, STRATA_OP_SUM));
    if (rank != 0)
        ST_RANK_CHECK_OK(strata_request_wait(req));
    if (sum != (float)(n * (n - 1) / 2))
        return ST_RANK_FAIL("small allreduce: %g", (double)sum);
    for (size_t i = 0; i < count; i++)
        if (big[i] != (float)(i % 5) * (float)n)
            return ST_RANK_FAIL("big allreduce: element %zu is %g", i, (double)big[i]);
    free(big);
    strata_comm_destroy(c);
    return 0;
}

/* The last rank dies while the others wait for it in a mailbox. */
static int killed_in_mailbox(int rank, int n, void *arg)
{
    (void)arg;
    strata_comm_t *c = st_test_comm();
    const int victim = n - 1;
    float x = 1, y;
    ST_RANK_CHECK_OK(strata_allreduce(c, &x, &y, 1, STRATA_DTYPE_F32, STRATA_OP_SUM));
    if (rank == victim) {
        usleep(300 * 1000); // the others are in the next call by now
        raise(SIGKILL);
    }
    double t0 = now_s();
    strata_status_t rc = strata_allreduce(c, &x, &y, 1, STRATA_DTYPE_F32, STRATA_OP_SUM);
    double waited = now_s() - t0;
    char victim_name[32];
    snprintf(victim_name, sizeof victim_name, "rank %d", victim);
    if (rc != STRATA_ERR_PEER_FAILED || !strstr(strata_last_error(), victim_name))
        return ST_RANK_FAIL("after rank %d died: %s: %s", victim, strata_status_name(rc),
                            strata_last_error());
    if (waited > 10)
        return ST_RANK_FAIL("noticed the death only after %.1f s (timeout 20 s)", waited);
    rc = strata_allreduce(c, &x, &y, 1, STRATA_DTYPE_F32, STRATA_OP_SUM);
    if (rc != STRATA_ERR_PEER_FAILED)
        return ST_RANK_FAIL("next call after the failure: %s", strata_status_name(rc));
    strata_comm_destroy(c);
    return 0;
}

static void run(st_rank_fn fn, int n, const char *env, int victim)
{
    st_ranks_opts_t o = {.deadline_ms = 60000, .extra_env = env, .expect_fail_rank = victim};
    if (st_test_ranks(n, fn, NULL, &o) != 0)
        fail_msg("%d ranks (env %s) failed", n, env ? env : "-");
}

static void test_same_bits(void **state)
{
    (void)state;
    const int sizes[] = {2, 3, 5, 8};
    for (int i = 0; i < 4; i++)
        run(same_bits, sizes[i], NULL, -1);
}

static void test_many_calls(void **state)
{
    (void)state;
    run(many_calls, 3, NULL, -1);
    run(many_calls, 2, NULL, -1);
    run(many_calls, 3, "STRATA_SHM_MAILBOX=0", -1);
}

static void test_progress_in_flight(void **state)
{
    (void)state;
    run(progress_in_flight, 3, "STRATA_COMM_TIMEOUT_MS=20000", -1);
}

static void test_killed(void **state)
{
    (void)state;
    run(killed_in_mailbox, 2, "STRATA_COMM_TIMEOUT_MS=20000", 1);
    run(killed_in_mailbox, 4, "STRATA_COMM_TIMEOUT_MS=20000", 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_bits),
        cmocka_unit_test(test_many_calls),
        cmocka_unit_test(test_progress_in_flight),
        cmocka_unit_test(test_killed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
