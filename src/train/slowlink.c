/* Slow-link detection (slowlink.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "train/slowlink.h"

#define SLOTS ST_SLOWLINK_SLOTS

strata_status_t st_slowlink_init(st_slowlink_t *s, int window, int nranks, const int *host)
{
    *s = (st_slowlink_t){.window = window, .nranks = nranks, .flagged = {.from = -1, .to = -1}};
    if (window <= 0 || nranks < 3) {
        s->window = 0;
        return STRATA_OK;
    }
    size_t n = (size_t)nranks, slots = n * SLOTS;
    s->host = calloc(n, sizeof *s->host);
    s->mark = calloc(n, sizeof *s->mark);
    s->now = calloc(n, sizeof *s->now);
    s->last = calloc(n, sizeof *s->last);
    s->table = calloc(2 * slots, sizeof *s->table);
    s->slow = calloc(slots, sizeof *s->slow);
    s->median = calloc(slots, sizeof *s->median);
    s->streak = calloc(slots, sizeof *s->streak);
    s->quiet = calloc(slots, sizeof *s->quiet);
    s->prev = calloc(2 * slots, sizeof *s->prev);
    s->prev_streak = calloc(slots, sizeof *s->prev_streak);
    s->prev_quiet = calloc(slots, sizeof *s->prev_quiet);
    s->sorted = calloc(slots, sizeof *s->sorted);
    s->bucket_start = calloc(n + 1, sizeof *s->bucket_start);
    s->bucket = calloc(2 * slots, sizeof *s->bucket);
    s->fill = calloc(n, sizeof *s->fill);
    if (!s->host || !s->mark || !s->now || !s->last || !s->table || !s->slow || !s->median ||
        !s->streak || !s->quiet || !s->prev || !s->prev_streak || !s->prev_quiet || !s->sorted ||
        !s->bucket_start || !s->bucket || !s->fill) {
        st_slowlink_free(s);
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
    }
    for (int r = 0; r < nranks; r++) {
        s->host[r] = host ? host[r] : r;
        if (s->host[r] < 0 || s->host[r] >= nranks) {
            st_slowlink_free(s);
            return st_error(STRATA_ERR_INVALID_ARG, "train: rank %d's host %d is outside 0..%d",
                            r, host[r], nranks - 1);
        }
        s->nhosts = ST_MAX(s->nhosts, s->host[r] + 1);
    }
    if (s->nhosts < 3) // no link between two other hosts to compare a link with
        st_slowlink_free(s);
    return STRATA_OK;
}

void st_slowlink_free(st_slowlink_t *s)
{
    free(s->host);
    free(s->mark);
    free(s->now);
    free(s->last);
    free(s->table);
    free(s->slow);
    free(s->median);
    free(s->streak);
    free(s->quiet);
    free(s->prev);
    free(s->prev_streak);
    free(s->prev_quiet);
    free(s->sorted);
    free(s->bucket_start);
    free(s->bucket);
    free(s->fill);
    *s = (st_slowlink_t){.flagged = {.from = -1, .to = -1}};
}

void st_slowlink_row(st_slowlink_t *s, const strata_link_stats_t *now, double *row)
{
    int kept = 0;
    for (int p = 0; p < s->nranks; p++) {
        uint64_t bytes = now[p].bytes - s->mark[p].bytes;
        double seconds = now[p].seconds - s->mark[p].seconds;
        bool fresh = bytes >= ST_SLOWLINK_MIN_BYTES && seconds > 0;
        if (fresh) { // the round ends; the next begins
            s->last[p] = (double)bytes / seconds;
            s->mark[p] = now[p];
        }
        double rate = s->last[p];
        if (rate <= 0 || (kept == SLOTS && rate >= row[2 * (SLOTS - 1) + 1]))
            continue; // no round ended yet, or faster than every link kept
        int i = kept < SLOTS ? kept++ : SLOTS - 1; // when full, the fastest kept makes room
        for (; i > 0 && row[2 * (i - 1) + 1] > rate; i--) {
            row[2 * i] = row[2 * (i - 1)];
            row[2 * i + 1] = row[2 * (i - 1) + 1];
        }
        row[2 * i] = fresh ? p + 1 : -(p + 1);
        row[2 * i + 1] = rate;
    }
}

static int by_rate(const void *a, const void *b)
{
    const struct st_rated *x = a, *y = b;
    if (x->rate != y->rate)
        return x->rate < y->rate ? -1 : 1;
    return (x->slot > y->slot) - (x->slot < y->slot);
}

/* The k-th smallest of the links in sorted without the places skip[0..n) (ascending). */
static double kth_without(const struct st_rated *sorted, const int *skip, int n, int k)
{
    for (int j = 0; j < n && skip[j] <= k; j++)
        k++;
    return sorted[k].rate;
}

/* The median of sorted[0..m) without the links touching host h; 0 with too few left. */
static double median_without_host(const st_slowlink_t *s, int m, int h)
{
    const int *skip = s->bucket + s->bucket_start[h];
    int n = s->bucket_start[h + 1] - s->bucket_start[h], others = m - n;
    if (others < ST_SLOWLINK_MIN_OTHERS)
        return 0;
    return (kth_without(s->sorted, skip, n, (others - 1) / 2) +
            kth_without(s->sorted, skip, n, others / 2)) / 2;
}

void st_slowlink_judge(st_slowlink_t *s)
{
    const double *t = s->table;
    int slots = s->nranks * SLOTS, m = 0;
    for (int i = 0; i < slots; i++)
        if (t[2 * i] != 0)
            s->sorted[m++] = (struct st_rated){t[2 * i + 1], i};
    qsort(s->sorted, (size_t)m, sizeof *s->sorted, by_rate);
    // Each host's links, by their places in sorted (a counting sort: ascending within a host).
    memset(s->bucket_start, 0, ((size_t)s->nhosts + 1) * sizeof *s->bucket_start);
    for (int k = 0; k < m; k++) {
        int i = s->sorted[k].slot, a = s->host[(int)fabs(t[2 * i]) - 1], b = s->host[i / SLOTS];
        s->bucket_start[a + 1]++;
        s->bucket_start[b + 1] += a != b;
    }
    for (int h = 0; h < s->nhosts; h++)
        s->bucket_start[h + 1] += s->bucket_start[h];
    memcpy(s->fill, s->bucket_start, (size_t)s->nhosts * sizeof *s->fill);
    for (int k = 0; k < m; k++) {
        int i = s->sorted[k].slot, a = s->host[(int)fabs(t[2 * i]) - 1], b = s->host[i / SLOTS];
        s->bucket[s->fill[a]++] = k;
        if (a != b)
            s->bucket[s->fill[b]++] = k;
    }
    // A link is compared with the links of the hosts other than its sender's, and with those of
    // the hosts other than its receiver's, whichever run faster: when one end's host is slow,
    // the other comparison leaves all of its links out.
    for (int i = 0; i < slots; i++) {
        s->slow[i] = false;
        s->median[i] = 0;
        if (t[2 * i] == 0)
            continue;
        s->median[i] = ST_MAX(median_without_host(s, m, s->host[(int)fabs(t[2 * i]) - 1]),
                              median_without_host(s, m, s->host[i / SLOTS]));
        s->slow[i] = t[2 * i] > 0 && t[2 * i + 1] * ST_SLOWLINK_RATIO < s->median[i];
    }
}

/* Rank 0's debug line per window: the slowest fresh link and what it was compared with. */
static void log_window(const st_slowlink_t *s)
{
    int slots = s->nranks * SLOTS, slowest = -1, fresh = 0, stale = 0;
    for (int i = 0; i < slots; i++) {
        stale += s->table[2 * i] < 0;
        if (s->table[2 * i] <= 0)
            continue;
        fresh++;
        if (slowest < 0 || s->table[2 * i + 1] < s->table[2 * slowest + 1])
            slowest = i;
    }
    if (slowest < 0)
        ST_LOG_DEBUG(ST_SUB_TRAIN, "links: no round ended in this window (%d stale)", stale);
    else
        ST_LOG_DEBUG(ST_SUB_TRAIN,
                     "links: %d fresh, %d stale; the slowest fresh, rank %d -> rank %d, at %.2f "
                     "MB/s, the others' median %.2f MB/s%s",
                     fresh, stale, (int)s->table[2 * slowest] - 1, slowest / SLOTS,
                     s->table[2 * slowest + 1] / 1e6, s->median[slowest] / 1e6,
                     s->slow[slowest] ? " (slow)" : "");
}

/* Rank 0's warning when a link is first flagged, naming where both ends are. */
static void warn_flagged(const st_slowlink_t *s, const strata_comm_t *comm, int streak)
{
    char from[256] = "", to[256] = "";
    if (comm) {
        strata_comm_rank_where(comm, s->flagged.from, from, sizeof from);
        strata_comm_rank_where(comm, s->flagged.to, to, sizeof to);
    }
    ST_LOG_WARN(ST_SUB_TRAIN,
                "slow link: rank %d%s%s%s -> rank %d%s%s%s at %.2f MB/s, the other links' median "
                "%.1f MB/s, slow in %d windows of %d steps in a row",
                s->flagged.from, from[0] ? " (" : "", from, from[0] ? ")" : "", s->flagged.to,
                to[0] ? " (" : "", to, to[0] ? ")" : "", s->flagged.rate / 1e6,
                s->flagged.median / 1e6, streak, s->window);
}

/* Carries each slot's streak and quiet count on from where the same link (the same sender in the
 * same receiver's row) was in the last window, and returns the link to flag (from -1: none): the
 * flagged one while it qualifies, else the slowest that does, so that a host whose links are all
 * slow is named once, not once per link. */
static st_link_t carry_on(st_slowlink_t *s, int *streak_out)
{
    st_link_t worst = {.from = -1, .to = -1}, kept = worst;
    for (int i = 0; i < s->nranks * SLOTS; i++) {
        double who = fabs(s->table[2 * i]);
        s->streak[i] = s->quiet[i] = 0;
        if (who == 0)
            continue;
        int row = i / SLOTS, streak = 0, quiet = 0;
        for (int j = row * SLOTS; j < (row + 1) * SLOTS; j++)
            if (fabs(s->prev[2 * j]) == who) {
                streak = s->prev_streak[j];
                quiet = s->prev_quiet[j];
            }
        if (s->table[2 * i] > 0) { // fresh: news
            streak = s->slow[i] ? streak + 1 : 0;
            quiet = 0;
        } else {
            quiet++;
        }
        s->streak[i] = streak;
        s->quiet[i] = quiet;
        if (streak < ST_SLOWLINK_STREAK || quiet >= ST_SLOWLINK_STREAK)
            continue;
        st_link_t l = {(int)who - 1, row, s->table[2 * i + 1], s->median[i]};
        if (l.from == s->flagged.from && l.to == s->flagged.to) {
            kept = l;
            *streak_out = streak;
        } else if (kept.from < 0 && (worst.from < 0 || l.rate < worst.rate)) {
            worst = l;
            *streak_out = streak;
        }
    }
    return kept.from >= 0 ? kept : worst;
}

strata_status_t st_slowlink_end(st_slowlink_t *s, const strata_comm_t *comm,
                                strata_status_t (*all_sum)(void *ctx, double *v, int n), void *ctx,
                                int rank)
{
    s->window_ended = false;
    if (!s->window || ++s->steps < s->window)
        return STRATA_OK;
    s->steps = 0;
    int slots = s->nranks * SLOTS;
    memset(s->table, 0, 2 * (size_t)slots * sizeof *s->table);
    for (int p = 0; p < s->nranks; p++)
        if (!comm || p == rank || strata_comm_link_stats(comm, p, &s->now[p]) < 0)
            s->now[p] = (strata_link_stats_t){0, 0, 0};
    st_slowlink_row(s, s->now, s->table + 2 * (size_t)rank * SLOTS);
    ST_TRY(all_sum(ctx, s->table, 2 * slots));
    s->window_ended = true;
    st_slowlink_judge(s);
    int streak = 0;
    st_link_t worst = carry_on(s, &streak);
    if (rank == 0)
        log_window(s);
    memcpy(s->prev, s->table, 2 * (size_t)slots * sizeof *s->prev);
    memcpy(s->prev_streak, s->streak, (size_t)slots * sizeof *s->prev_streak);
    memcpy(s->prev_quiet, s->quiet, (size_t)slots * sizeof *s->prev_quiet);
    bool news = worst.from >= 0 && (worst.from != s->flagged.from || worst.to != s->flagged.to);
    s->flagged = worst;
    if (news && rank == 0)
        warn_flagged(s, comm, streak);
    return STRATA_OK;
}
