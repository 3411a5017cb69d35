/* Slow-link detection (src/train/slowlink.c) on hand-made numbers: a rank's row of link rates from
 * its cumulative counts (slowest first, capped, stale links keeping their last rate), the judgement
 * of a window's table against the median of the other links, and the streak that flags a link and
 * lets it go. The windows' tables are scripted through the all-sum callback, so every case is
 * exact. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness/st_test.h"
#include "train/slowlink.h"

#define SLOTS ST_SLOWLINK_SLOTS
#define MB    1e6

/* Puts link from -> to at `rate` (fresh or stale) into slot k of `to`'s row. */
static void put(double *table, int to, int k, int from, double rate, bool fresh)
{
    table[2 * (to * SLOTS + k)] = fresh ? from + 1 : -(from + 1);
    table[2 * (to * SLOTS + k) + 1] = rate;
}

/* Judges a 4-rank table; returns how many slots are slow, and the first in *which. */
static int judge4(const double *table, int *which, double *median_of_which)
{
    double scratch[4 * SLOTS], median[4 * SLOTS];
    bool slow[4 * SLOTS];
    st_slowlink_judge(table, 4, scratch, slow, median);
    int n = 0;
    *which = -1;
    for (int i = 0; i < 4 * SLOTS; i++)
        if (slow[i] && n++ == 0) {
            *which = i;
            *median_of_which = median[i];
        }
    return n;
}

static void test_judge(void **state)
{
    (void)state;
    double t[4 * SLOTS * 2], med = 0;
    int which;
    // A ring at 100 MB/s: nothing slow.
    memset(t, 0, sizeof t);
    for (int r = 0; r < 4; r++)
        put(t, (r + 1) % 4, 0, r, 100 * MB, true);
    assert_int_equal(judge4(t, &which, &med), 0);
    // Link 1 -> 2 at 10 MB/s: slow, against the others' 100.
    put(t, 2, 0, 1, 10 * MB, true);
    assert_int_equal(judge4(t, &which, &med), 1);
    assert_int_equal(which, 2 * SLOTS);
    assert_true(med == 100 * MB);
    // At 30 MB/s it is a third of the others: not far enough below them.
    put(t, 2, 0, 1, 30 * MB, true);
    assert_int_equal(judge4(t, &which, &med), 0);
    // Stale (not timed in this window): never judged, whatever its last rate.
    put(t, 2, 0, 1, 10 * MB, false);
    assert_int_equal(judge4(t, &which, &med), 0);
    // ... but stale links are the yardstick of a fresh one: the others are not timed while it is
    // slow (their messages wait whole in the sockets).
    for (int r = 0; r < 4; r++)
        put(t, (r + 1) % 4, 0, r, 100 * MB, false);
    put(t, 2, 0, 1, 10 * MB, true);
    assert_int_equal(judge4(t, &which, &med), 1);
    assert_int_equal(which, 2 * SLOTS);
    // Too few links to compare with: one other.
    memset(t, 0, sizeof t);
    put(t, 2, 0, 1, 1 * MB, true);
    put(t, 1, 0, 0, 100 * MB, true);
    assert_int_equal(judge4(t, &which, &med), 0);
    put(t, 0, 0, 3, 100 * MB, true); // two others
    assert_int_equal(judge4(t, &which, &med), 1);
    // A host whose NIC is slow both ways, in a job using 8 links: its 4 links are slow (each one's
    // others: 3 slow, 4 fast; the median is fast). Equal rates are told apart.
    memset(t, 0, sizeof t);
    put(t, 2, 0, 1, 5 * MB, true);
    put(t, 2, 1, 3, 5 * MB, true);
    put(t, 0, 0, 2, 5 * MB, true);
    put(t, 3, 0, 2, 5 * MB, true);
    put(t, 1, 0, 0, 100 * MB, true);
    put(t, 0, 1, 3, 90 * MB, true);
    put(t, 3, 1, 1, 110 * MB, true);
    put(t, 1, 1, 3, 100 * MB, true);
    assert_int_equal(judge4(t, &which, &med), 4);
    assert_true(med == 90 * MB);
    // Most links slow: the slow are the yardstick, nothing stands out (the documented limit).
    put(t, 1, 1, 3, 5 * MB, true);
    assert_int_equal(judge4(t, &which, &med), 0);
}

/* Senders exactly, rates to rounding (bytes / seconds). */
static void check_row(const double *row, const double *want, int window)
{
    for (int i = 0; i < 2 * SLOTS; i++)
        if (i % 2 == 0 ? row[i] != want[i] : fabs(row[i] - want[i]) > 1e-9 * want[i])
            fail_msg("window %d, row[%d] = %.17g, expected %g", window, i, row[i], want[i]);
}

static void test_row(void **state)
{
    (void)state;
    st_slowlink_t s;
    assert_int_equal(st_slowlink_init(&s, 1, 6), STRATA_OK);
    // Rank 0's links from ranks 1-5 (cumulative counts); rank 3's 100 KB is too little to judge.
    strata_link_stats_t now[6] = {
        {0, 0, 0}, {8, 8000000, 1.0}, {1, 1000000, 0.01}, {1, 100000, 0.001},
        {4, 4000000, 0.1}, {2, 2000000, 0.1},
    };
    double row[2 * SLOTS];
    memset(row, 0, sizeof row);
    st_slowlink_row(&s, now, row);
    const double want1[2 * SLOTS] = {2, 8 * MB, 6, 20 * MB, 5, 40 * MB, 3, 100 * MB};
    check_row(row, want1, 1);
    // Next window: rank 1 again 8 MB/s, rank 3 now 2 MB/s (1 MB in 0.5 s); 2, 4 and 5 sent
    // nothing timed and keep their last rates, marked stale; the fastest (rank 2) drops out.
    now[1] = (strata_link_stats_t){16, 16000000, 2.0};
    now[3] = (strata_link_stats_t){2, 1100000, 0.501};
    memset(row, 0, sizeof row);
    st_slowlink_row(&s, now, row);
    const double want2[2 * SLOTS] = {4, 2 * MB, 2, 8 * MB, -6, 20 * MB, -5, 40 * MB};
    check_row(row, want2, 2);
    st_slowlink_free(&s);
    // Off: a window of 0 steps, or two ranks (one link each way, nothing to compare).
    assert_int_equal(st_slowlink_init(&s, 0, 8), STRATA_OK);
    assert_int_equal(s.window, 0);
    st_slowlink_free(&s);
    assert_int_equal(st_slowlink_init(&s, 20, 2), STRATA_OK);
    assert_int_equal(s.window, 0);
    st_slowlink_free(&s);
}

/* The all-sum of a window: the script's next table (this rank's own row, from comm NULL, is
 * empty, so the sum is the script's). */
typedef struct script {
    const double (*tables)[3 * SLOTS * 2];
    int next;
} script_t;

static strata_status_t scripted_sum(void *ctx, double *v, int n)
{
    script_t *s = ctx;
    assert_int_equal(n, 3 * SLOTS * 2);
    for (int i = 0; i < n; i++)
        v[i] += s->tables[s->next][i];
    s->next++;
    return STRATA_OK;
}

/* Slot k of rank `to`'s row in a 3-rank table, as initialiser indices. */
#define AT(to, k) (2 * ((to)*SLOTS + (k)))
/* 3 ranks, links 0->1 and 2->0 at 100 MB/s; 1->2 at `r` (fresh when f), in slot `k` of rank 2. */
#define TABLE(r, f, k)                                                                             \
    {                                                                                              \
        [AT(1, 0)] = 1, [AT(1, 0) + 1] = 100 * MB, [AT(0, 0)] = 3, [AT(0, 0) + 1] = 100 * MB,      \
        [AT(2, k)] = (f) ? 2 : -2, [AT(2, k) + 1] = (r),                                           \
    }
/* ... and a table where 0->1 is the slow one. */
#define TABLE01                                                                                    \
    {                                                                                              \
        [AT(1, 0)] = 1, [AT(1, 0) + 1] = 10 * MB, [AT(0, 0)] = 3, [AT(0, 0) + 1] = 100 * MB,       \
        [AT(2, 0)] = 2, [AT(2, 0) + 1] = 100 * MB,                                                 \
    }

static void test_streak(void **state)
{
    (void)state;
    static const double tables[][3 * SLOTS * 2] = {
        TABLE(10 * MB, 1, 0), TABLE(10 * MB, 1, 0), TABLE(10 * MB, 1, 2), // 3 in a row: flagged
        TABLE(10 * MB, 1, 1),                       // still (another slot of the same row)
        TABLE(100 * MB, 1, 0),                      // caught up: let go
        TABLE(10 * MB, 1, 0),  TABLE01,             // alternating links: nobody
        TABLE(10 * MB, 1, 0),  TABLE(10 * MB, 1, 0), TABLE(10 * MB, 1, 0), // flagged again
        TABLE(10 * MB, 0, 0),                       // not timed this window: not found slow
        TABLE01,               TABLE01,   TABLE01,  // 0 -> 1 three in a row
    };
    const int want_from[] = {-1, -1, 1, 1, -1, -1, -1, -1, -1, 1, -1, -1, -1, 0};
    const int n = (int)(sizeof want_from / sizeof *want_from);
    script_t sc = {tables, 0};
    st_slowlink_t s;
    assert_int_equal(st_slowlink_init(&s, 2, 3), STRATA_OK);
    for (int w = 0; w < n; w++) {
        for (int k = 0; k < 2; k++) {
            assert_int_equal(st_slowlink_end(&s, NULL, scripted_sum, &sc, 1), STRATA_OK);
            assert_int_equal(s.window_ended, k == 1);
        }
        if (s.flagged.from != want_from[w])
            fail_msg("window %d: flagged %d -> %d, expected from %d", w, s.flagged.from,
                     s.flagged.to, want_from[w]);
        if (want_from[w] >= 0 && (s.flagged.to != (want_from[w] + 1) % 3 ||
                                  s.flagged.rate != 10 * MB || s.flagged.median != 100 * MB))
            fail_msg("window %d: flagged %d -> %d at %g, median %g", w, s.flagged.from,
                     s.flagged.to, s.flagged.rate, s.flagged.median);
    }
    assert_int_equal(sc.next, n);
    st_slowlink_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_judge),
        cmocka_unit_test(test_row),
        cmocka_unit_test(test_streak),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
