/* Slow-link detection. A link that delivers far below the others (a NIC that renegotiated down, a
 * bad cable, a shaped or congested path) slows every rank of a synchronous job alike: step times
 * name nobody, and busy times (straggler.h) do not either, since the ranks only wait longer. The
 * TCP transport meters each link at its receiving end (strata_comm_link_stats: the rate of large
 * messages from their first byte to their last, so a late sender does not count).
 *
 * Every `window` steps each rank takes the rate of each link into it over the window (a link with
 * at least ST_SLOWLINK_MIN_BYTES timed in it is "fresh"; one without keeps the rate it last showed,
 * "stale": while a slow link holds the job back, the other links' messages wait whole in their
 * sockets until wanted and are not timed at all, yet they are the yardstick), keeps its
 * ST_SLOWLINK_SLOTS slowest, and the ranks sum their rows into one table (one small collective). A
 * fresh link in the table whose rate is below the median of all the other links in it by
 * ST_SLOWLINK_RATIO (with at least ST_SLOWLINK_MIN_OTHERS others to compare with) is slow in that
 * window; slow in ST_SLOWLINK_STREAK windows in a row, it is flagged until a window finds it no
 * longer slow. Keeping only each rank's slowest links biases the median down, which makes the test
 * stricter, never looser. Internal to src/train.
 */
#ifndef ST_TRAIN_SLOWLINK_H
#define ST_TRAIN_SLOWLINK_H

#include <stdbool.h>

#include "strata/comm.h"
#include "strata/status.h"

#define ST_SLOWLINK_SLOTS      4           /* links per rank in the table: its slowest */
#define ST_SLOWLINK_STREAK     3           /* windows in a row that make a link slow */
#define ST_SLOWLINK_RATIO      4.0         /* the others' median over a link's rate that is slow */
#define ST_SLOWLINK_MIN_BYTES  (256 << 10) /* bytes timed on a link in a window to judge it */
#define ST_SLOWLINK_MIN_OTHERS 2           /* links to compare with */

/* One link of the table: data from rank `from` to rank `to`. */
typedef struct st_link {
    int from, to;  /* from < 0: none */
    double rate;   /* bytes per second in the window */
    double median; /* the other links' median rate in the window */
} st_link_t;

typedef struct st_slowlink {
    int window;        /* steps per window; 0 = off */
    int steps;         /* steps in the current window */
    int nranks;
    strata_link_stats_t *mark; /* [nranks] each link into this rank: counts when the window began */
    strata_link_stats_t *now;  /* [nranks] ... and at its end */
    double *last;      /* [nranks] ... and the rate it showed last (0: never timed) */
    double *table;     /* [nranks][SLOTS][2]: (sender + 1, rate) of each rank's slowest links,
                          sender + 1 negated for a stale link; 0 = empty slot */
    int *streak;       /* [nranks][SLOTS]: windows in a row the slot's link has been slow */
    double *prev;      /* the previous window's table, for the streaks */
    int *prev_streak;
    double *scratch;   /* [nranks * SLOTS] for the judgement, so nothing is allocated in a step */
    bool *slow;        /* [nranks * SLOTS] */
    double *median;    /* [nranks * SLOTS] */
    st_link_t flagged; /* the slow link (from -1: none) */
    bool window_ended; /* the last step closed a window: table is fresh */
} st_slowlink_t;

/* Sets up for nranks ranks (window 0 or fewer than 3 ranks: off; two ranks have one link each
 * way, nothing to compare). */
strata_status_t st_slowlink_init(st_slowlink_t *s, int window, int nranks);
void st_slowlink_free(st_slowlink_t *s);

/* Ends a step on this rank (`rank` of `comm`); at a window's end, reads the link counts, sums the
 * ranks' rows through `all_sum` (collective: every rank calls it at the same steps) and judges.
 * comm NULL: no counts (all links empty), for tests of the window logic. */
strata_status_t st_slowlink_end(st_slowlink_t *s, const strata_comm_t *comm,
                                strata_status_t (*all_sum)(void *ctx, double *v, int n), void *ctx,
                                int rank);

/* This rank's row of the table at a window's end, from the counts `now` of each link into it
 * (cumulative, as strata_comm_link_stats gives them): the links' rates in the window, slowest
 * first, at most SLOTS, a link timed less than ST_SLOWLINK_MIN_BYTES with the rate it showed last
 * (marked stale; never timed: left out). The next window starts at `now`. For tests and
 * st_slowlink_end. */
void st_slowlink_row(st_slowlink_t *s, const strata_link_stats_t *now, double *row);

/* Pure judgement of one window's table, for tests: slow[i] for slot i (of nranks * SLOTS) when its
 * link is fresh and slow, median[i] the other links' median rate (0 where there are too few to
 * compare, or the slot is empty or stale). scratch holds nranks * SLOTS doubles. */
void st_slowlink_judge(const double *table, int nranks, double *scratch, bool *slow,
                       double *median);

#endif
