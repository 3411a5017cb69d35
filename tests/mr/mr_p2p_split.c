/* Point-to-point, non-blocking overlap, splits, every registered algorithm forced in turn, the
 * per-process statistics that find stragglers and the link meters that find slow links. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness/ref.h"
#include "harness/st_test.h"

/* ---- point to point ---------------------------------------------------------------------------- */

static int p2p(int rank, int n, void *arg)
{
    (void)arg;
    strata_comm_t *c = st_test_comm();
    const size_t big = (3u << 20) + 5; // several shm slots, odd
    int32_t *a = malloc(big * 4), *b = malloc(big * 4);
    int right = (rank + 1) % n, left = (rank - 1 + n) % n;
    // Two messages with different tags, received in the opposite order: matching is by tag.
    for (size_t i = 0; i < big; i++)
        a[i] = (int32_t)(rank * 1000003 + (int)i);
    int32_t small = rank * 7, got_small = -1;
    strata_request_t *rs[4];
    ST_RANK_CHECK_OK(strata_isend(c, a, big, STRATA_DTYPE_I32, right, 5, &rs[0]));
    ST_RANK_CHECK_OK(strata_isend(c, &small, 1, STRATA_DTYPE_I32, right, 9, &rs[1]));
    ST_RANK_CHECK_OK(strata_recv(c, &got_small, 1, STRATA_DTYPE_I32, left, 9));
    ST_RANK_CHECK_OK(strata_irecv(c, b, big, STRATA_DTYPE_I32, left, 5, &rs[2]));
    ST_RANK_CHECK_OK(strata_request_wait_all(rs, 3));
    if (got_small != left * 7)
        return ST_RANK_FAIL("small message from %d: got %d", left, got_small);
    for (size_t i = 0; i < big; i++)
        if (b[i] != (int32_t)(left * 1000003 + (int)i))
            return ST_RANK_FAIL("large message from %d differs at %zu", left, i);
    // Same tag twice: arrival order is send order.
    int32_t one = 1, two = 2, x = 0, y = 0;
    ST_RANK_CHECK_OK(strata_isend(c, &one, 1, STRATA_DTYPE_I32, right, 3, &rs[0]));
    ST_RANK_CHECK_OK(strata_isend(c, &two, 1, STRATA_DTYPE_I32, right, 3, &rs[1]));
    ST_RANK_CHECK_OK(strata_recv(c, &x, 1, STRATA_DTYPE_I32, left, 3));
    ST_RANK_CHECK_OK(strata_recv(c, &y, 1, STRATA_DTYPE_I32, left, 3));
    ST_RANK_CHECK_OK(strata_request_wait_all(rs, 2));
    if (x != 1 || y != 2)
        return ST_RANK_FAIL("same-tag messages out of order: %d %d", x, y);
    // To self.
    int64_t me = rank, back = -1;
    ST_RANK_CHECK_OK(strata_isend(c, &me, 1, STRATA_DTYPE_I64, rank, 1, &rs[0]));
    ST_RANK_CHECK_OK(strata_recv(c, &back, 1, STRATA_DTYPE_I64, rank, 1));
    ST_RANK_CHECK_OK(strata_request_wait(rs[0]));
    if (back != rank)
        return ST_RANK_FAIL("message to self: got %lld", (long long)back);
    // A receive smaller than the message is an error, not a silent truncation.
    if (n >= 2) {
        if (rank == 0)
            ST_RANK_CHECK_OK(strata_send(c, a, 4, STRATA_DTYPE_I32, 1, 77));
        if (rank == 1) {
            strata_status_t rc = strata_recv(c, b, 2, STRATA_DTYPE_I32, 0, 77);
            if (rc != STRATA_ERR_INVALID_ARG || !strstr(strata_last_error(), "larger"))
                return ST_RANK_FAIL("truncation not reported: %s %s", strata_status_name(rc),
                                    strata_last_error());
        }
    }
    free(a);
    free(b);
    strata_comm_destroy(c);
    return 0;
}

/* ---- two operations in flight at once ---------------------------------------------------------- */

static int overlap(int rank, int n, void *arg)
{
    (void)arg;
    strata_comm_t *c = st_test_comm();
    const size_t count = (1u << 20) + 3;
    float *a = malloc(count * 4), *ea = malloc(count * 4);
    int64_t *b = malloc(count * 8), *eb = malloc(count * 8);
    st_ref_fill(STRATA_DTYPE_F32, a, count, rank, 11);
    st_ref_fill(STRATA_DTYPE_I64, b, count, rank, 12);
    st_ref_allreduce(STRATA_DTYPE_F32, STRATA_OP_SUM, n, count, 11, ea);
    st_ref_allreduce(STRATA_DTYPE_I64, STRATA_OP_MAX, n, count, 12, eb);
    // Both in flight; waited in the opposite order of issue, with a test() poll in between.
    strata_request_t *ra, *rb;
    ST_RANK_CHECK_OK(strata_iallreduce(c, a, a, count, STRATA_DTYPE_F32, STRATA_OP_SUM, &ra));
    ST_RANK_CHECK_OK(strata_iallreduce(c, b, b, count, STRATA_DTYPE_I64, STRATA_OP_MAX, &rb));
    bool done = false;
    strata_status_t rc = strata_request_test(ra, &done);
    if (rc < 0)
        return ST_RANK_FAIL("test: %s", strata_last_error());
    ST_RANK_CHECK_OK(strata_request_wait(rb));
    if (!done)
        ST_RANK_CHECK_OK(strata_request_wait(ra));
    char why[256];
    if (!st_ref_compare(STRATA_DTYPE_F32, STRATA_OP_SUM, n, ea, a, count, why, sizeof why))
        return ST_RANK_FAIL("overlapped f32 allreduce: %s", why);
    if (!st_ref_compare(STRATA_DTYPE_I64, STRATA_OP_MAX, n, eb, b, count, why, sizeof why))
        return ST_RANK_FAIL("overlapped i64 allreduce: %s", why);
    // Collectives on two communicators in flight at once (world and a split).
    strata_comm_t *half;
    ST_RANK_CHECK_OK(strata_comm_split(c, rank % 2, rank, &half));
    int32_t x = rank, sumx = -1, y = 1, sumy = -1;
    ST_RANK_CHECK_OK(strata_iallreduce(half, &x, &sumx, 1, STRATA_DTYPE_I32, STRATA_OP_SUM, &rb));
    ST_RANK_CHECK_OK(strata_iallreduce(c, &y, &sumy, 1, STRATA_DTYPE_I32, STRATA_OP_SUM, &ra));
    strata_request_t *both[2] = {ra, rb};
    ST_RANK_CHECK_OK(strata_request_wait_all(both, 2));
    int expect = 0;
    for (int r = rank % 2; r < n; r += 2)
        expect += r;
    if (sumy != n || sumx != expect)
        return ST_RANK_FAIL("concurrent world/split allreduce: %d (want %d), %d (want %d)", sumy, n,
                            sumx, expect);
    strata_comm_destroy(half);
    free(a);
    free(ea);
    free(b);
    free(eb);
    strata_comm_destroy(c);
    return 0;
}

/* ---- splits ------------------------------------------------------------------------------------ */

static int split(int rank, int n, void *arg)
{
    (void)arg;
    strata_comm_t *c = st_test_comm();
    // Three colors, reversed key order; rank 0 opts out when n > 2.
    int color = (n > 2 && rank == 0) ? -1 : rank % 3;
    strata_comm_t *sub;
    ST_RANK_CHECK_OK(strata_comm_split(c, color, n - rank, &sub));
    if (color < 0) {
        if (sub)
            return ST_RANK_FAIL("color -1 got a communicator");
    } else {
        int members[64], m = 0;
        for (int r = n - 1; r >= 0; r--) // keys n - r ascend as r descends
            if (!(n > 2 && r == 0) && r % 3 == color)
                members[m++] = r;
        if (strata_comm_size(sub) != m)
            return ST_RANK_FAIL("split size %d, want %d", strata_comm_size(sub), m);
        int myidx = -1;
        for (int i = 0; i < m; i++)
            if (members[i] == rank)
                myidx = i;
        if (strata_comm_rank(sub) != myidx)
            return ST_RANK_FAIL("split rank %d, want %d", strata_comm_rank(sub), myidx);
        // The new communicator works, and its ranks are the old ranks in key order.
        int32_t *all = malloc((size_t)m * sizeof *all), me = rank;
        ST_RANK_CHECK_OK(strata_allgather(sub, &me, all, 1, STRATA_DTYPE_I32));
        for (int i = 0; i < m; i++)
            if (all[i] != members[i])
                return ST_RANK_FAIL("split allgather[%d] = %d, want %d", i, all[i], members[i]);
        // A split of a split.
        strata_comm_t *sub2;
        ST_RANK_CHECK_OK(strata_comm_split(sub, strata_comm_rank(sub) % 2, 0, &sub2));
        ST_RANK_CHECK_OK(strata_barrier(sub2));
        int32_t one = 1, cnt = 0;
        ST_RANK_CHECK_OK(strata_allreduce(sub2, &one, &cnt, 1, STRATA_DTYPE_I32, STRATA_OP_SUM));
        if (cnt != strata_comm_size(sub2))
            return ST_RANK_FAIL("sub-split size mismatch %d vs %d", cnt, strata_comm_size(sub2));
        strata_comm_destroy(sub2);
        free(all);
    }
    strata_comm_destroy(sub);
    ST_RANK_CHECK_OK(strata_barrier(c));
    strata_comm_destroy(c);
    return 0;
}

/* ---- every algorithm, forced ------------------------------------------------------------------- */

static int forced_algos(int rank, int n, void *arg)
{
    (void)arg;
    strata_comm_t *c = st_test_comm();
    const size_t counts[] = {0, 1, 5, 777, 40000};
    uint64_t seed = 500;
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        size_t cnt = counts[k];
        // The algorithm in force comes from STRATA_COMM_ALGO, set by the test for this run.
        float *s = malloc(cnt * 4 + 4), *r = malloc(cnt * 4 + 4), *e = malloc(cnt * 4 + 4);
        st_ref_fill(STRATA_DTYPE_F32, s, cnt, rank, seed);
        st_ref_allreduce(STRATA_DTYPE_F32, STRATA_OP_SUM, n, cnt, seed, e);
        char why[256];
        ST_RANK_CHECK_OK(strata_allreduce(c, s, r, cnt, STRATA_DTYPE_F32, STRATA_OP_SUM));
        if (!st_ref_compare(STRATA_DTYPE_F32, STRATA_OP_SUM, n, e, r, cnt, why, sizeof why))
            return ST_RANK_FAIL("allreduce %zu: %s", cnt, why);
        ST_RANK_CHECK_OK(strata_reduce(c, s, r, cnt, STRATA_DTYPE_F32, STRATA_OP_SUM, 1 % n));
        if (rank == 1 % n && !st_ref_compare(STRATA_DTYPE_F32, STRATA_OP_SUM, n, e, r, cnt, why, sizeof why))
            return ST_RANK_FAIL("reduce %zu: %s", cnt, why);
        if (rank == n - 1)
            memcpy(r, e, cnt * 4);
        ST_RANK_CHECK_OK(strata_bcast(c, r, cnt, STRATA_DTYPE_F32, n - 1));
        if (cnt && memcmp(r, e, cnt * 4))
            return ST_RANK_FAIL("bcast %zu differs", cnt);
        float *all = malloc((size_t)n * cnt * 4 + 4), *two = malloc((size_t)n * cnt * 4 + 4);
        ST_RANK_CHECK_OK(strata_allgather(c, s, all, cnt, STRATA_DTYPE_F32));
        for (int i = 0; i < n; i++) {
            st_ref_fill(STRATA_DTYPE_F32, e, cnt, i, seed);
            if (cnt && memcmp(all + (size_t)i * cnt, e, cnt * 4))
                return ST_RANK_FAIL("allgather %zu block %d differs", cnt, i);
        }
        ST_RANK_CHECK_OK(strata_alltoall(c, all, two, cnt, STRATA_DTYPE_F32));
        for (int i = 0; i < n; i++) {
            st_ref_fill(STRATA_DTYPE_F32, e, cnt, rank, seed);
            if (cnt && memcmp(two + (size_t)i * cnt, e, cnt * 4))
                return ST_RANK_FAIL("alltoall %zu block %d differs", cnt, i);
        }
        ST_RANK_CHECK_OK(strata_barrier(c));
        free(all);
        free(two);
        free(s);
        free(r);
        free(e);
        seed++;
    }
    strata_comm_destroy(c);
    return 0;
}

/* Every other rank sends rank 0 one message and leaves at once; rank 0 receives them only later.
 * A send completes once its data is in the shared ring, so the sender may be gone before the
 * receiver has mapped the ring: the data must survive that (the sender lingers until it has). */
static int send_and_leave(int rank, int n, void *arg)
{
    (void)arg;
    strata_comm_t *c = st_test_comm();
    if (rank > 0) {
        int64_t v = 1000 + rank;
        ST_RANK_CHECK_OK(strata_send(c, &v, 1, STRATA_DTYPE_I64, 0, 7));
        strata_comm_destroy(c);
        return 0;
    }
    struct timespec late = {0, 300 * 1000000L};
    nanosleep(&late, NULL);
    for (int r = 1; r < n; r++) {
        int64_t v = -1;
        ST_RANK_CHECK_OK(strata_recv(c, &v, 1, STRATA_DTYPE_I64, r, 7));
        if (v != 1000 + r)
            return ST_RANK_FAIL("from rank %d: got %lld", r, (long long)v);
    }
    strata_comm_destroy(c);
    return 0;
}

static void run_all_sizes(st_rank_fn fn, const char *env)
{
    const int sizes[] = {1, 2, 3, 5, 8};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        st_ranks_opts_t o = {.deadline_ms = 120000, .extra_env = env, .expect_fail_rank = -1};
        if (st_test_ranks(sizes[i], fn, NULL, &o) != 0)
            fail_msg("%d ranks failed (env %s)", sizes[i], env ? env : "-");
    }
}

/* ---- statistics -------------------------------------------------------------------------------- */

/* The last rank is a straggler: it arrives 300 ms late at each of 3 allreduces, so every other rank
 * waits most of 0.9 s in them (not all: a rank may leave an allreduce a little after the straggler
 * did, and the call's own work outside its wait is not waiting) and the straggler waits less than
 * any of them; every rank counts its operations. */
static int stats(int rank, int n, void *arg)
{
    (void)arg;
    strata_comm_t *c = st_test_comm();
    strata_comm_stats_t before, after;
    // A first small allreduce sets up the mailboxes (2 collectives of their own) outside the count.
    float warm = 1;
    ST_RANK_CHECK_OK(strata_allreduce(c, &warm, &warm, 1, STRATA_DTYPE_F32, STRATA_OP_SUM));
    ST_RANK_CHECK_OK(strata_barrier(c));
    ST_RANK_CHECK_OK(strata_comm_stats(c, &before));
    for (int i = 0; i < 3; i++) {
        if (rank == n - 1)
            usleep(300 * 1000);
        float x = 1;
        ST_RANK_CHECK_OK(strata_allreduce(c, &x, &x, 1, STRATA_DTYPE_F32, STRATA_OP_SUM));
    }
    ST_RANK_CHECK_OK(strata_comm_stats(c, &after));
    double waited = after.wait_s - before.wait_s, all[16];
    if (after.ops - before.ops != 3)
        return ST_RANK_FAIL("%llu operations counted, 3 done",
                            (unsigned long long)(after.ops - before.ops));
    if (rank != n - 1 && waited < 0.6)
        return ST_RANK_FAIL("waited %.3f s for a rank 0.9 s late", waited);
    ST_RANK_CHECK_OK(strata_allgather(c, &waited, all, 1, STRATA_DTYPE_F64));
    for (int r = 0; r < n - 1; r++)
        if (all[n - 1] >= all[r])
            return ST_RANK_FAIL("the straggler waited %.3f s, rank %d only %.3f s", all[n - 1], r,
                                all[r]);
    if (strata_comm_stats(NULL, &after) != STRATA_ERR_INVALID_ARG ||
        strata_comm_stats(c, NULL) != STRATA_ERR_INVALID_ARG)
        return ST_RANK_FAIL("NULL arguments accepted");
    strata_comm_destroy(c);
    return 0;
}

static void test_stats(void **state)
{
    (void)state;
    const int sizes[] = {2, 3, 5};
    for (int i = 0; i < 3; i++)
        if (st_test_ranks(sizes[i], stats, NULL, NULL) != 0)
            fail_msg("%d ranks failed", sizes[i]);
}

/* The link meters over TCP with 64 KiB socket buffers (3 ranks): rank 0 sends rank 1 three
 * messages of 1 MiB, which cannot sit whole in a socket, so each arrives in several reads and is
 * timed: 3 messages, all but what a first read can hold of each, a positive time. Rank 2's three
 * 16 KiB messages are below the size worth timing, and a rank has no link to itself. Every rank
 * can say where every other runs: its address and the path it was given. */
static int link_stats(int rank, int n, void *arg)
{
    (void)arg;
    char path[32];
    snprintf(path, sizeof path, "rack%d/host%d", rank / 2, rank);
    if (setenv("STRATA_TOPO_PATH", path, 1) != 0)
        return ST_RANK_FAIL("setenv");
    strata_comm_t *c = st_test_comm();
    const size_t big = 1u << 20, small = 16u << 10;
    char *buf = calloc(big, 1);
    for (int i = 0; i < 3; i++) {
        if (rank == 0)
            ST_RANK_CHECK_OK(strata_send(c, buf, big, STRATA_DTYPE_U8, 1, 7));
        if (rank == 2)
            ST_RANK_CHECK_OK(strata_send(c, buf, small, STRATA_DTYPE_U8, 1, 8));
        if (rank == 1) {
            ST_RANK_CHECK_OK(strata_recv(c, buf, big, STRATA_DTYPE_U8, 0, 7));
            ST_RANK_CHECK_OK(strata_recv(c, buf, small, STRATA_DTYPE_U8, 2, 8));
        }
    }
    free(buf);
    strata_link_stats_t ls[3];
    for (int r = 0; r < n; r++)
        ST_RANK_CHECK_OK(strata_comm_link_stats(c, r, &ls[r]));
    if (rank == 1 && (ls[0].messages != 3 || ls[0].bytes > 3 * big ||
                      ls[0].bytes < 3 * (big - (256u << 10)) || !(ls[0].seconds > 0)))
        return ST_RANK_FAIL("from rank 0: %llu messages, %llu bytes in %g s; expected 3 of 1 MiB",
                            (unsigned long long)ls[0].messages, (unsigned long long)ls[0].bytes,
                            ls[0].seconds);
    for (int r = 0; r < n; r++)
        if ((rank != 1 || r != 0) && (ls[r].messages || ls[r].bytes || ls[r].seconds != 0))
            return ST_RANK_FAIL("from rank %d: %llu messages timed, none expected", r,
                                (unsigned long long)ls[r].messages);
    for (int r = 0; r < n; r++) {
        char where[256], want[64];
        ST_RANK_CHECK_OK(strata_comm_rank_where(c, r, where, sizeof where));
        snprintf(want, sizeof want, " 127.0.0.1, rack%d/host%d", r / 2, r);
        if (strncmp(where, "host ", 5) != 0 || !strstr(where, want))
            return ST_RANK_FAIL("rank %d is '%s', expected 'host <name>%s'", r, where, want);
    }
    char where[64];
    if (strata_comm_link_stats(c, n, &ls[0]) != STRATA_ERR_INVALID_ARG ||
        strata_comm_link_stats(c, 0, NULL) != STRATA_ERR_INVALID_ARG ||
        strata_comm_rank_where(c, -1, where, sizeof where) != STRATA_ERR_INVALID_ARG ||
        strata_comm_rank_where(NULL, 0, where, sizeof where) != STRATA_ERR_INVALID_ARG)
        return ST_RANK_FAIL("a bad rank or a NULL argument accepted");
    ST_RANK_CHECK_OK(strata_barrier(c));
    strata_comm_destroy(c);
    return 0;
}

static void test_link_stats(void **state)
{
    (void)state;
    st_ranks_opts_t o = {.deadline_ms = 120000,
                         // No link calibration at creation: its streams would be timed too.
                         .extra_env = "STRATA_COMM_TRANSPORT=tcp;STRATA_TCP_BUF_BYTES=65536;"
                                      "STRATA_TOPO_CALIBRATE=off",
                         .expect_fail_rank = -1};
    if (st_test_ranks(3, link_stats, NULL, &o) != 0)
        fail_msg("3 ranks over tcp failed");
}

static void test_p2p(void **state)
{
    (void)state;
    run_all_sizes(p2p, NULL);
}

static void test_send_and_leave(void **state)
{
    (void)state;
    run_all_sizes(send_and_leave, NULL);
    run_all_sizes(send_and_leave, "STRATA_COMM_TRANSPORT=tcp");
}

static void test_p2p_tcp(void **state)
{
    (void)state;
    run_all_sizes(p2p, "STRATA_COMM_TRANSPORT=tcp");
}

static void test_overlap(void **state)
{
    (void)state;
    run_all_sizes(overlap, NULL);
    run_all_sizes(overlap, "STRATA_COMM_TRANSPORT=tcp");
}

static void test_split(void **state)
{
    (void)state;
    run_all_sizes(split, NULL);
}

/* Each algorithm of each collective, at every rank count, over shm; and over tcp at 3 ranks. */
static void test_forced_algos(void **state)
{
    (void)state;
    for (int coll = 0; coll < STRATA_COLL_COUNT; coll++) {
        const char *name;
        for (int i = 0; strata_algo_info((strata_coll_t)coll, i, &name, NULL); i++) {
            char env[128];
            snprintf(env, sizeof env, "STRATA_COMM_ALGO=%s:%s", strata_coll_name((strata_coll_t)coll), name);
            run_all_sizes(forced_algos, env);
            snprintf(env, sizeof env, "STRATA_COMM_ALGO=%s:%s;STRATA_COMM_TRANSPORT=tcp",
                     strata_coll_name((strata_coll_t)coll), name);
            st_ranks_opts_t o = {.deadline_ms = 120000, .extra_env = env, .expect_fail_rank = -1};
            if (st_test_ranks(3, forced_algos, NULL, &o) != 0)
                fail_msg("3 ranks over tcp failed (env %s)", env);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_p2p),   cmocka_unit_test(test_p2p_tcp),
        cmocka_unit_test(test_send_and_leave),
        cmocka_unit_test(test_overlap), cmocka_unit_test(test_split),
        cmocka_unit_test(test_forced_algos), cmocka_unit_test(test_stats),
        cmocka_unit_test(test_link_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
