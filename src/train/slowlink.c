/* Slow-link detection (slowlink.h). */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "train/slowlink.h"

#define SLOTS ST_SLOWLINK_SLOTS

strata_status_t st_slowlink_init(st_slowlink_t *s, int window, int nranks)
{
    *s = (st_slowlink_t){.window = window, .nranks = nranks, .flagged = {.from = -1, .to = -1}};
    if (window <= 0 || nranks < 3) {
        s->window = 0;
        return STRATA_OK;
    }
    size_t slots = (size_t)nranks * SLOTS;
    s->mark = calloc((size_t)nranks, sizeof *s->mark);
    s->now = calloc((size_t)nranks, sizeof *s->now);
    s->last = calloc((size_t)nranks, sizeof *s->last);
    s->table = calloc(2 * slots, sizeof *s->table);
    s->prev = calloc(2 * slots, sizeof *s->prev);
    s->streak = calloc(slots, sizeof *s->streak);
    s->prev_streak = calloc(slots, sizeof *s->prev_streak);
    s->scratch = calloc(slots, sizeof *s->scratch);
    s->slow = calloc(slots, sizeof *s->slow);
    s->median = calloc(slots, sizeof *s->median);
    if (!s->mark || !s->now || !s->last || !s->table || !s->prev || !s->streak || !s->prev_streak ||
        !s->scratch || !s->slow || !s->median) {
        st_slowlink_free(s);
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
    }
    return STRATA_OK;
}

void st_slowlink_free(st_slowlink_t *s)
{
    free(s->mark);
    free(s->now);
    free(s->last);
    free(s->table);
    free(s->prev);
    free(s->streak);
    free(s->prev_streak);
    free(s->scratch);
    free(s->slow);
    free(s->median);
    *s = (st_slowlink_t){.flagged = {.from = -1, .to = -1}};
}

void st_slowlink_row(st_slowlink_t *s, const strata_link_stats_t *now, double *row)
{
    int kept = 0;
    for (int p = 0; p < s->nranks; p++) {
        uint64_t bytes = now[p].bytes - s->mark[p].bytes;
        double seconds = now[p].seconds - s->mark[p].seconds;
        s->mark[p] = now[p];
        bool fresh = bytes >= ST_SLOWLINK_MIN_BYTES && seconds > 0;
        if (fresh)
            s->last[p] = (double)bytes / seconds;
        double rate = s->last[p];
        if (rate <= 0 || (kept == SLOTS && rate >= row[2 * (SLOTS - 1) + 1]))
            continue; // never timed, or faster than every link kept
        int i = kept < SLOTS ? kept++ : SLOTS - 1; // when full, the fastest kept makes room
        for (; i > 0 && row[2 * (i - 1) + 1] > rate; i--) {
            row[2 * i] = row[2 * (i - 1)];
            row[2 * i + 1] = row[2 * (i - 1) + 1];
        }
        row[2 * i] = fresh ? p + 1 : -(p + 1);
        row[2 * i + 1] = rate;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of sorted a[0..m) without a[k]. */
static double median_without(const double *a, int m, int k)
{
    int n = m - 1;
#define AT(j) a[(j) < k ? (j) : (j) + 1]
    return n % 2 ? AT(n / 2) : (AT(n / 2 - 1) + AT(n / 2)) / 2;
#undef AT
}

void st_slowlink_judge(const double *table, int nranks, double *scratch, bool *slow,
                       double *median)
{
    int slots = nranks * SLOTS, m = 0;
    for (int i = 0; i < slots; i++)
        if (table[2 * i] != 0)
            scratch[m++] = table[2 * i + 1];
    qsort(scratch, (size_t)m, sizeof *scratch, cmp_double);
    for (int i = 0; i < slots; i++) {
        slow[i] = false;
        median[i] = 0;
        if (table[2 * i] <= 0 || m - 1 < ST_SLOWLINK_MIN_OTHERS) // empty or stale: not judged
            continue;
        // Links of equal rate are interchangeable: leaving out any one of them is leaving out this.
        const double *at = bsearch(&table[2 * i + 1], scratch, (size_t)m, sizeof *scratch,
                                   cmp_double);
        median[i] = median_without(scratch, m, (int)(at - scratch));
        slow[i] = table[2 * i + 1] * ST_SLOWLINK_RATIO < median[i];
    }
}

/* Rank 0's debug line per window: the slowest link and what it is compared with. */
static void log_window(const st_slowlink_t *s)
{
    int slots = s->nranks * SLOTS, slowest = -1, links = 0;
    for (int i = 0; i < slots; i++) {
        if (s->table[2 * i] <= 0)
            continue;
        links++; // fresh ones
        if (slowest < 0 || s->table[2 * i + 1] < s->table[2 * slowest + 1])
            slowest = i;
    }
    if (slowest < 0)
        ST_LOG_DEBUG(ST_SUB_TRAIN, "links: none timed in this window");
    else
        ST_LOG_DEBUG(ST_SUB_TRAIN, "links: %d timed; the slowest, rank %d -> rank %d, at %.2f MB/s, "
                     "the others' median %.2f MB/s%s", links, (int)s->table[2 * slowest] - 1,
                     slowest / SLOTS, s->table[2 * slowest + 1] / 1e6, s->median[slowest] / 1e6,
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
    ST_LOG_WARN(ST_SUB_TRAIN, "slow link: rank %d%s%s%s -> rank %d%s%s%s at %.2f MB/s, the other "
                "links' median %.1f MB/s, %d windows of %d steps in a row", s->flagged.from,
                from[0] ? " (" : "", from, from[0] ? ")" : "", s->flagged.to, to[0] ? " (" : "",
                to, to[0] ? ")" : "", s->flagged.rate / 1e6, s->flagged.median / 1e6, streak,
                s->window);
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
    st_slowlink_judge(s->table, s->nranks, s->scratch, s->slow, s->median);
    // A link's streak goes on where the same sender sat in the same receiver's row last window.
    st_link_t worst = {.from = -1, .to = -1};
    int worst_streak = 0;
    for (int i = 0; i < slots; i++) {
        s->streak[i] = 0;
        if (!s->slow[i])
            continue;
        int row = i / SLOTS, before = 0;
        for (int j = row * SLOTS; j < (row + 1) * SLOTS; j++)
            if (s->prev[2 * j] == s->table[2 * i])
                before = s->prev_streak[j];
        s->streak[i] = before + 1;
        if (s->streak[i] >= ST_SLOWLINK_STREAK &&
            (worst.from < 0 || s->table[2 * i + 1] < worst.rate)) {
            worst = (st_link_t){(int)s->table[2 * i] - 1, row, s->table[2 * i + 1], s->median[i]};
            worst_streak = s->streak[i];
        }
    }
    if (rank == 0)
        log_window(s);
    memcpy(s->prev, s->table, 2 * (size_t)slots * sizeof *s->prev);
    memcpy(s->prev_streak, s->streak, (size_t)slots * sizeof *s->prev_streak);
    bool news = worst.from >= 0 && (worst.from != s->flagged.from || worst.to != s->flagged.to);
    s->flagged = worst;
    if (news && rank == 0)
        warn_flagged(s, comm, worst_streak);
    return STRATA_OK;
}
