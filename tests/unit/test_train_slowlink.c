/* Slow-link detection (src/train/slowlink.c) on hand-made numbers: a rank's row of link rates from
 * its cumulative counts (rounds of enough timed bytes, slowest first, capped, stale links keeping
 * their last rate), the judgement of a window's table against the median of the other links, and
 * the streak that flags a link and lets it go. The windows' tables are scripted through the
 * all-sum callback, so every case is exact. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness/st_test.h"
#include "train/slowlink.h"

#define SLOTS ST_SLOWLINK_SLOTS
#define MB    1e6

/* Adds link from -> to at `rate` (fresh or stale) to the first free slot of `to`'s row. */
static void put(double *table, int from, int to, double rate, bool fresh)
{
    for (int k = 0; k < SLOTS; k++)
        if (table[2 * (to * SLOTS + k)] == 0) {
            table[2 * (to * SLOTS + k)] = fresh ? from + 1 : -(from + 1);
            table[2 * (to * SLOTS + k) + 1] = rate;
            return;
        }
    fail_msg("row %d is full", to);
}

/* Judges `table` with s; returns how many links are slow, each one's ends in from_to[] (up to 8),
 * and the median of the first in *median. */
static int judge(st_slowlink_t *s, const double *table, int from_to[8][2], double *median)
{
    memcpy(s->table, table, 2 * (size_t)s->nranks * SLOTS * sizeof *table);
    st_slowlink_judge(s);
    int n = 0;
    for (int i = 0; i < s->nranks * SLOTS; i++)
        if (s->slow[i]) {
            if (n == 0)
                *median = s->median[i];
            if (n < 8) {
                from_to[n][0] = (int)table[2 * i] - 1;
                from_to[n][1] = i / SLOTS;
            }
            n++;
        }
    return n;
}

/* Four hosts of one rank, every link of the 12 at `rate`, fresh. */
static void full(double *t, double rate)
{
    memset(t, 0, 4 * SLOTS * 2 * sizeof *t);
    for (int from = 0; from < 4; from++)
        for (int to = 0; to < 4; to++)
            if (from != to)
                put(t, from, to, rate, true);
}

/* Sets the rate (and freshness) of link from -> to, which must be in the table. */
static void set(double *t, int from, int to, double rate, bool fresh)
{
    for (int k = 0; k < SLOTS; k++)
        if (fabs(t[2 * (to * SLOTS + k)]) == from + 1) {
            t[2 * (to * SLOTS + k)] = fresh ? from + 1 : -(from + 1);
            t[2 * (to * SLOTS + k) + 1] = rate;
            return;
        }
    fail_msg("no link %d -> %d", from, to);
}

static void test_judge(void **state)
{
    (void)state;
    st_slowlink_t s;
    assert_int_equal(st_slowlink_init(&s, 1, 4, NULL), STRATA_OK);
    double t[4 * SLOTS * 2], med = 0;
    int ft[8][2];
    // Every link at 100 MB/s: nothing slow.
    full(t, 100 * MB);
    assert_int_equal(judge(&s, t, ft, &med), 0);
    // Link 1 -> 2 at 10 MB/s: slow, against the links of the other hosts.
    set(t, 1, 2, 10 * MB, true);
    assert_int_equal(judge(&s, t, ft, &med), 1);
    assert_int_equal(ft[0][0], 1);
    assert_int_equal(ft[0][1], 2);
    assert_true(med == 100 * MB);
    // At 15 MB/s it is not far enough below them (6.7x); at 12 it is (8.3x).
    set(t, 1, 2, 15 * MB, true);
    assert_int_equal(judge(&s, t, ft, &med), 0);
    set(t, 1, 2, 12 * MB, true);
    assert_int_equal(judge(&s, t, ft, &med), 1);
    // Stale (no round ended in this window): no news, whatever its last rate ...
    set(t, 1, 2, 10 * MB, false);
    assert_int_equal(judge(&s, t, ft, &med), 0);
    // ... but stale links are the yardstick of a fresh one.
    full(t, 100 * MB);
    for (int from = 0; from < 4; from++)
        for (int to = 0; to < 4; to++)
            if (from != to)
                set(t, from, to, 100 * MB, false);
    set(t, 1, 2, 10 * MB, true);
    assert_int_equal(judge(&s, t, ft, &med), 1);
    // Too few links to compare with: one that touches neither host 1 nor host 2.
    memset(t, 0, sizeof t);
    put(t, 1, 2, 1 * MB, true);
    put(t, 0, 3, 100 * MB, true);
    assert_int_equal(judge(&s, t, ft, &med), 0);
    put(t, 3, 0, 100 * MB, true); // two
    assert_int_equal(judge(&s, t, ft, &med), 1);
    // Host 2's NIC slow both ways, its 6 links most of the 9 in the table: each is compared with
    // the links that leave host 2 out, and is slow; no link of another host is.
    memset(t, 0, sizeof t);
    for (int r = 0; r < 4; r++)
        if (r != 2) {
            put(t, 2, r, 5 * MB, true);
            put(t, r, 2, 5 * MB, true);
        }
    put(t, 0, 3, 100 * MB, true);
    put(t, 3, 0, 100 * MB, true);
    put(t, 1, 3, 100 * MB, true);
    assert_int_equal(judge(&s, t, ft, &med), 6);
    for (int k = 0; k < 6; k++)
        assert_true(ft[k][0] == 2 || ft[k][1] == 2);
    assert_true(med == 100 * MB);
    st_slowlink_free(&s);
    // Two ranks per host (0-1, 2-3, 4-5, 6-7); host 1's NIC slow: each of its links is compared
    // with the links that leave host 1 out.
    double t8[8 * SLOTS * 2] = {0};
    put(t8, 0, 2, 5 * MB, true);
    put(t8, 2, 0, 5 * MB, true);
    put(t8, 1, 3, 5 * MB, true);
    put(t8, 3, 1, 5 * MB, true);
    put(t8, 5, 3, 5 * MB, true);
    put(t8, 3, 4, 5 * MB, true);
    put(t8, 4, 6, 100 * MB, true);
    put(t8, 6, 4, 100 * MB, true);
    const int hosts[8] = {0, 0, 1, 1, 2, 2, 3, 3};
    assert_int_equal(st_slowlink_init(&s, 1, 8, hosts), STRATA_OK);
    assert_int_equal(judge(&s, t8, ft, &med), 6);
    for (int k = 0; k < 6; k++)
        assert_true(ft[k][0] == 2 || ft[k][0] == 3 || ft[k][1] == 2 || ft[k][1] == 3);
    st_slowlink_free(&s);
    // Taken for hosts of their own, the ranks of host 1 would each be left out alone, and 0 -> 2
    // compared with host 1's other links, most of them slow: it would not stand out.
    assert_int_equal(st_slowlink_init(&s, 1, 8, NULL), STRATA_OK);
    judge(&s, t8, ft, &med);
    assert_false(s.slow[2 * SLOTS]); // 0 -> 2, the first link in rank 2's row
    st_slowlink_free(&s);
    const int bad[4] = {0, 5, 1, 2};
    assert_int_equal(st_slowlink_init(&s, 1, 4, bad), STRATA_ERR_INVALID_ARG);
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
    assert_int_equal(st_slowlink_init(&s, 1, 6, NULL), STRATA_OK);
    // Rank 0's links from ranks 1-5 (cumulative counts); rank 3's 100 KB is too little for a round.
    strata_link_stats_t now[6] = {
        {0, 0, 0}, {8, 8000000, 1.0}, {1, 1000000, 0.01}, {1, 100000, 0.001},
        {4, 4000000, 0.1}, {2, 2000000, 0.1},
    };
    double row[2 * SLOTS];
    memset(row, 0, sizeof row);
    st_slowlink_row(&s, now, row);
    const double want1[2 * SLOTS] = {2, 8 * MB, 6, 20 * MB, 5, 40 * MB, 3, 100 * MB};
    check_row(row, want1, 1);
    // Next window: rank 1 again 8 MB/s; rank 3's round ends (its 100 KB and 1 MB more, 1.1 MB in
    // 0.501 s); 2, 4 and 5 had nothing timed and keep their rates, stale; the fastest (2) drops
    // out.
    now[1] = (strata_link_stats_t){16, 16000000, 2.0};
    now[3] = (strata_link_stats_t){2, 1100000, 0.501};
    memset(row, 0, sizeof row);
    st_slowlink_row(&s, now, row);
    const double want2[2 * SLOTS] = {4, 1.1e6 / 0.501, 2, 8 * MB, -6, 20 * MB, -5, 40 * MB};
    check_row(row, want2, 2);
    // Rank 5's 200 KB do not end a round; 100 KB more in the next window do, at 300 KB / 0.3 s.
    now[5] = (strata_link_stats_t){3, 2200000, 0.2};
    memset(row, 0, sizeof row);
    st_slowlink_row(&s, now, row);
    const double want3[2 * SLOTS] = {-4, 1.1e6 / 0.501, -2, 8 * MB, -6, 20 * MB, -5, 40 * MB};
    check_row(row, want3, 3);
    now[5] = (strata_link_stats_t){4, 2300000, 0.4};
    memset(row, 0, sizeof row);
    st_slowlink_row(&s, now, row);
    const double want4[2 * SLOTS] = {6, 1 * MB, -4, 1.1e6 / 0.501, -2, 8 * MB, -5, 40 * MB};
    check_row(row, want4, 4);
    st_slowlink_free(&s);
    // Off: a window of 0 steps, or fewer than 3 hosts (no link between two other hosts to compare
    // a link with).
    assert_int_equal(st_slowlink_init(&s, 0, 8, NULL), STRATA_OK);
    assert_int_equal(s.window, 0);
    st_slowlink_free(&s);
    assert_int_equal(st_slowlink_init(&s, 20, 2, NULL), STRATA_OK);
    assert_int_equal(s.window, 0);
    st_slowlink_free(&s);
    const int two_hosts[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    assert_int_equal(st_slowlink_init(&s, 20, 8, two_hosts), STRATA_OK);
    assert_int_equal(s.window, 0);
    st_slowlink_free(&s);
}

/* The all-sum of a window: the script's next table (this rank's own row, from comm NULL, is
 * empty, so the sum is the script's). */
typedef struct script {
    const double (*tables)[4 * SLOTS * 2];
    int next;
} script_t;

static strata_status_t scripted_sum(void *ctx, double *v, int n)
{
    script_t *s = ctx;
    assert_int_equal(n, 4 * SLOTS * 2);
    for (int i = 0; i < n; i++)
        v[i] += s->tables[s->next][i];
    s->next++;
    return STRATA_OK;
}

/* Slot k of rank `to`'s row in a 4-rank table, as initialiser indices. */
#define AT(to, k) (2 * ((to)*SLOTS + (k)))
/* 4 ranks on 4 hosts: links 0 <-> 3 and 2 <-> 3 at 100 MB/s, 0 -> 1 at `r01`, and 1 -> 2 at `r`
 * (fresh when f) in slot k of rank 2's row. */
#define LINKS(r01, r, f, k)                                                                        \
    {                                                                                              \
        [AT(3, 0)] = 1, [AT(3, 0) + 1] = 100 * MB, [AT(0, 0)] = 4, [AT(0, 0) + 1] = 100 * MB,      \
        [AT(3, 1)] = 3, [AT(3, 1) + 1] = 100 * MB, [AT(2, 3)] = 4, [AT(2, 3) + 1] = 100 * MB,      \
        [AT(1, 0)] = 1, [AT(1, 0) + 1] = (r01), [AT(2, k)] = (f) ? 2 : -2, [AT(2, k) + 1] = (r),   \
    }
#define TABLE(r, f, k) LINKS(100 * MB, r, f, k) /* 1 -> 2 is the subject */
#define TABLE01        LINKS(10 * MB, 100 * MB, 1, 0) /* 0 -> 1 is slow instead */

static void test_streak(void **state)
{
    (void)state;
    static const double tables[][4 * SLOTS * 2] = {
        TABLE(10 * MB, 1, 0), TABLE(10 * MB, 1, 0), TABLE(10 * MB, 1, 2), // 3 in a row: flagged
        TABLE(10 * MB, 1, 1),                       // still (another slot of the same row)
        TABLE(100 * MB, 1, 0),                      // caught up: let go
        TABLE(10 * MB, 1, 0),  TABLE01,             // alternating links: nobody
        TABLE(10 * MB, 1, 0),  TABLE(10 * MB, 1, 0), // slow twice,
        TABLE(10 * MB, 0, 0),                       // no news (no round ended): counts neither way,
        TABLE(10 * MB, 1, 0),                       // slow a third time: flagged
        TABLE(10 * MB, 0, 0),  TABLE(10 * MB, 0, 0), // no news twice: still flagged,
        TABLE(10 * MB, 0, 0),                       // three times: let go
        TABLE01,               TABLE01,   TABLE01,  // 0 -> 1 three in a row
    };
    const int want_from[] = {-1, -1, 1, 1, -1, -1, -1, -1, -1, -1, 1, 1, 1, -1, -1, -1, 0};
    const int n = (int)(sizeof want_from / sizeof *want_from);
    assert_int_equal(n, (int)(sizeof tables / sizeof *tables));
    script_t sc = {tables, 0};
    st_slowlink_t s;
    assert_int_equal(st_slowlink_init(&s, 2, 4, NULL), STRATA_OK);
    for (int w = 0; w < n; w++) {
        for (int k = 0; k < 2; k++) {
            assert_int_equal(st_slowlink_end(&s, NULL, scripted_sum, &sc, 1), STRATA_OK);
            assert_int_equal(s.window_ended, k == 1);
        }
        if (s.flagged.from != want_from[w])
            fail_msg("window %d: flagged %d -> %d, expected from %d", w, s.flagged.from,
                     s.flagged.to, want_from[w]);
        if (want_from[w] >= 0 && (s.flagged.to != want_from[w] + 1 ||
                                  s.flagged.rate != 10 * MB || s.flagged.median != 100 * MB))
            fail_msg("window %d: flagged %d -> %d at %g, median %g", w, s.flagged.from,
                     s.flagged.to, s.flagged.rate, s.flagged.median);
    }
    assert_int_equal(sc.next, n);
    st_slowlink_free(&s);
}

/* A flagged link stays flagged while it is slow, even when another becomes slower: a host whose
 * links are all slow is named once. */
static void test_sticky(void **state)
{
    (void)state;
    static const double tables[][4 * SLOTS * 2] = {
        LINKS(100 * MB, 10 * MB, 1, 0), LINKS(100 * MB, 10 * MB, 1, 0),
        LINKS(100 * MB, 10 * MB, 1, 0),                               // 1 -> 2 flagged
        LINKS(5 * MB, 10 * MB, 1, 0),   LINKS(5 * MB, 10 * MB, 1, 0),
        LINKS(5 * MB, 10 * MB, 1, 0),                                 // 0 -> 1 slower: kept
        LINKS(5 * MB, 100 * MB, 1, 0),                                // 1 -> 2 well: 0 -> 1
    };
    const int want_from[] = {-1, -1, 1, 1, 1, 1, 0};
    const double want_rate[] = {0, 0, 10 * MB, 10 * MB, 10 * MB, 10 * MB, 5 * MB};
    script_t sc = {tables, 0};
    st_slowlink_t s;
    assert_int_equal(st_slowlink_init(&s, 1, 4, NULL), STRATA_OK);
    for (int w = 0; w < 7; w++) {
        assert_int_equal(st_slowlink_end(&s, NULL, scripted_sum, &sc, 1), STRATA_OK);
        if (s.flagged.from != want_from[w] || (want_from[w] >= 0 && s.flagged.rate != want_rate[w]))
            fail_msg("window %d: flagged %d -> %d at %g, expected from %d at %g", w,
                     s.flagged.from, s.flagged.to, s.flagged.rate, want_from[w], want_rate[w]);
    }
    st_slowlink_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_judge),
        cmocka_unit_test(test_row),
        cmocka_unit_test(test_streak),
        cmocka_unit_test(test_sticky),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
