/* Slow-link detection. A link that delivers far below the others (a NIC that renegotiated down, a
 * bad cable, a shaped or congested path) slows every rank of a synchronous job alike: step times
 * name nobody, and busy times (straggler.h) do not either, since the ranks only wait longer. The
 * TCP transport meters each link at its receiving end (strata_comm_link_stats: large messages from
 * the arrival of their first byte to that of their last).
 *
 * Each rank measures every link into it in rounds: a round ends at the first window's end by which
 * ST_SLOWLINK_MIN_BYTES were timed on the link since the last round ended, and gives the link's
 * rate (those bytes over their seconds). Every `window` steps each rank writes a row of its links'
 * latest rates, "fresh" where a round ended in this window and "stale" (no news, the last rate)
 * otherwise, keeps its ST_SLOWLINK_SLOTS slowest, and the ranks sum their rows into one table (one
 * small collective). A fresh link is slow in a window when its rate is below the yardstick by
 * ST_SLOWLINK_RATIO: the median rate of the links that do not touch the host of its sender, or of
 * those that do not touch the host of its receiver (at least ST_SLOWLINK_MIN_OTHERS of them),
 * whichever is higher. A host whose NIC is slow makes all its links slow, and they must not be the
 * yardstick of one another: one of the two leaves them all out. A fresh link that is not slow is
 * not.
 * Slow in ST_SLOWLINK_STREAK fresh windows in a row, a link is flagged, until a fresh window finds
 * it no longer slow or ST_SLOWLINK_STREAK windows in a row bring no news of it. Keeping only each
 * rank's slowest links biases the median down, which makes the test stricter, never looser.
 * Internal to src/train.
 */
#ifndef ST_TRAIN_SLOWLINK_H
#define ST_TRAIN_SLOWLINK_H

#include <stdbool.h>

#include "strata/comm.h"
#include "strata/status.h"

#define ST_SLOWLINK_SLOTS      4           /* links per rank in the table: its slowest */
#define ST_SLOWLINK_STREAK     3           /* fresh windows in a row that make a link slow */
#define ST_SLOWLINK_RATIO      8.0         /* the others' median over a link's rate that is slow */
#define ST_SLOWLINK_MIN_BYTES  (256 << 10) /* bytes timed on a link that end a round */
#define ST_SLOWLINK_MIN_OTHERS 2           /* links to compare with */

/* One link of the table: data from rank `from` to rank `to`. */
typedef struct st_link {
    int from, to;  /* from < 0: none */
    double rate;   /* bytes per second in its latest round */
    double median; /* the yardstick in the window: the median rate of other hosts' links */
} st_link_t;

typedef struct st_slowlink {
    int window; /* steps per window; 0 = off */
    int steps;  /* steps in the current window */
    int nranks, nhosts;
    int *host;  /* [nranks] each rank's host, 0..nhosts-1 */
    /* each link into this rank, [nranks]: */
    strata_link_stats_t *mark; /* its counts when its current round began */
    strata_link_stats_t *now;  /* ... at this window's end */
    double *last;              /* the rate its latest round gave (0: none yet) */
    /* the table, [nranks][SLOTS]: */
    double *table; /* (sender + 1, rate) per slot, sender + 1 negated when stale; 0 = empty */
    bool *slow;    /* the judgement */
    double *median;
    int *streak;   /* fresh windows in a row the slot's link has been slow */
    int *quiet;    /* windows in a row it has been stale */
    double *prev;  /* the previous window's table, streaks and quiet counts, to go on from */
    int *prev_streak, *prev_quiet;
    /* the judgement's working space, so that nothing is allocated in a step */
    struct st_rated {
        double rate;
        int slot;
    } *sorted;         /* [slots] the links by rate */
    int *bucket_start; /* [nhosts + 1] */
    int *bucket;       /* [2 * slots] places in sorted of the links touching each host, ascending */
    int *fill;         /* [nhosts] */
    st_link_t flagged; /* the slow link (from -1: none) */
    bool window_ended; /* the last step closed a window: table is fresh */
} st_slowlink_t;

/* Sets up for nranks ranks on the hosts host[r] (dense from 0; NULL: a host per rank). Window 0 or
 * fewer than 3 hosts: off (no link between two other hosts to compare a link with). */
strata_status_t st_slowlink_init(st_slowlink_t *s, int window, int nranks, const int *host);
void st_slowlink_free(st_slowlink_t *s);

/* Ends a step on this rank (`rank` of `comm`); at a window's end, reads the link counts, sums the
 * ranks' rows through `all_sum` (collective: every rank calls it at the same steps) and judges.
 * comm NULL: no counts (all links empty), for tests of the window logic. */
strata_status_t st_slowlink_end(st_slowlink_t *s, const strata_comm_t *comm,
                                strata_status_t (*all_sum)(void *ctx, double *v, int n), void *ctx,
                                int rank);

/* This rank's row of the table at a window's end, from the counts `now` of each link into it
 * (cumulative, as strata_comm_link_stats gives them): each link with a rate, slowest first, at
 * most SLOTS, stale where its round goes on. For tests and st_slowlink_end. */
void st_slowlink_row(st_slowlink_t *s, const strata_link_stats_t *now, double *row);

/* Judges s->table (the window's, summed): s->slow[i] for slot i when its link is fresh and slow;
 * s->median[i] its yardstick (0 for an empty slot, or too few links to compare with). */
void st_slowlink_judge(st_slowlink_t *s);

#endif
