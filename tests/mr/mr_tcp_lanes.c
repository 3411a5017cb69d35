/* The TCP transport with several connections per peer (STRATA_TCP_CONNS): many small and large
 * messages interleaved, all with one tag, must arrive whole and in the order they were sent, whether
 * each receive was posted before its message arrived (straight into the buffer) or after (buffered
 * as unexpected), and each large one striped over the lanes (a tiny STRATA_TCP_STRIPE_MIN cuts even
 * a few KiB into four slices). The collectives over striped lanes, reductions included, are the
 * mr_collectives_tcp4 entry (tests/mr/mr_collectives.cmake). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/st_test.h"

#define NMSG 160
#define TAG  11

/* Size of message i: mostly small, every fourth one large and odd-sized. */
static size_t msg_bytes(int i)
{
    static const size_t small[] = {0, 1, 7, 64, 200, 1000};
    if (i % 4 == 3)
        return ((size_t)(i % 7) + 1) * (193u << 10) + (size_t)i; // ~0.2 .. 1.3 MiB
    return small[i % 6];
}

static void fill(uint8_t *p, size_t n, int from, int i)
{
    for (size_t k = 0; k < n; k++)
        p[k] = (uint8_t)(from * 31 + i * 7 + (int)(k % 251));
}

static int check(const uint8_t *p, size_t n, int from, int i)
{
    for (size_t k = 0; k < n; k++)
        if (p[k] != (uint8_t)(from * 31 + i * 7 + (int)(k % 251)))
            return ST_RANK_FAIL("message %d from rank %d (%zu bytes) differs at byte %zu: out of "
                                "order or torn",
                                i, from, n, k);
    return 0;
}

/* One round: every rank sends NMSG messages to its right neighbour and receives as many from its
 * left; receives are posted before the sends when `early`, after everything arrived otherwise. */
static int round_trip(strata_comm_t *c, int rank, int n, bool early)
{
    int right = (rank + 1) % n, left = (rank + n - 1) % n;
    size_t cap = 2u << 20;
    uint8_t **out = calloc(NMSG, sizeof *out), **in = calloc(NMSG, sizeof *in);
    strata_request_t **rs = calloc(2 * NMSG, sizeof *rs);
    int bad = 0, nr = 0;
    for (int i = 0; i < NMSG; i++) {
        out[i] = malloc(msg_bytes(i) + 1);
        in[i] = malloc(cap);
        fill(out[i], msg_bytes(i), rank, i);
    }
    // The capacity is larger than every message: a receive takes whatever comes next, so only the
    // order of arrival puts the right bytes in the right buffer.
    for (int i = 0; early && i < NMSG; i++)
        ST_RANK_CHECK_OK(strata_irecv(c, in[i], cap, STRATA_DTYPE_U8, left, TAG, &rs[nr++]));
    for (int i = 0; i < NMSG; i++)
        ST_RANK_CHECK_OK(strata_isend(c, out[i], msg_bytes(i), STRATA_DTYPE_U8, right, TAG, &rs[nr++]));
    if (!early) {
        ST_RANK_CHECK_OK(strata_barrier(c)); // the messages are on their way (or buffered) by now
        for (int i = 0; i < NMSG; i++)
            ST_RANK_CHECK_OK(strata_irecv(c, in[i], cap, STRATA_DTYPE_U8, left, TAG, &rs[nr++]));
    }
    ST_RANK_CHECK_OK(strata_request_wait_all(rs, nr));
    for (int i = 0; i < NMSG && !bad; i++)
        bad = check(in[i], msg_bytes(i), left, i);
    for (int i = 0; i < NMSG; i++) {
        free(out[i]);
        free(in[i]);
    }
    free(out);
    free(in);
    free(rs);
    return bad;
}

static int interleaved(int rank, int n, void *arg)
{
    (void)arg;
    strata_comm_t *c = st_test_comm();
    int bad = round_trip(c, rank, n, true);
    if (!bad)
        bad = round_trip(c, rank, n, false);
    strata_comm_destroy(c);
    return bad;
}

static void run(int n, const char *env)
{
    st_ranks_opts_t o = {.deadline_ms = 120000, .extra_env = env, .expect_fail_rank = -1};
    assert_int_equal(st_test_ranks(n, interleaved, NULL, &o), 0);
}

static void four_lanes_2(void **state)
{
    (void)state;
    run(2, "STRATA_COMM_TRANSPORT=tcp;STRATA_TCP_CONNS=4;STRATA_TCP_STRIPE_MIN=4K");
}

static void four_lanes_3(void **state)
{
    (void)state;
    run(3, "STRATA_COMM_TRANSPORT=tcp;STRATA_TCP_CONNS=4;STRATA_TCP_STRIPE_MIN=4K");
}

/* The most lanes, with slices of at least the 64-byte minimum. */
static void sixteen_lanes(void **state)
{
    (void)state;
    run(2, "STRATA_COMM_TRANSPORT=tcp;STRATA_TCP_CONNS=16;STRATA_TCP_STRIPE_MIN=64");
}

/* A sender with more lanes than its receiver would open: the slice count travels in each header,
 * so the sender's setting alone decides. Rank 0 uses 3 lanes, rank 1 one. */
static int mixed(int rank, int n, void *arg)
{
    if (rank == 0)
        setenv("STRATA_TCP_CONNS", "3", 1);
    return interleaved(rank, n, arg);
}

static void mixed_lanes(void **state)
{
    (void)state;
    st_ranks_opts_t o = {.deadline_ms = 120000,
                         .extra_env = "STRATA_COMM_TRANSPORT=tcp;STRATA_TCP_CONNS=1;"
                                      "STRATA_TCP_STRIPE_MIN=4K",
                         .expect_fail_rank = -1};
    assert_int_equal(st_test_ranks(2, mixed, NULL, &o), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(four_lanes_2),
        cmocka_unit_test(four_lanes_3),
        cmocka_unit_test(sixteen_lanes),
        cmocka_unit_test(mixed_lanes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
