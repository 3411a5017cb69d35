/* Straggler detection (straggler.h). */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "train/straggler.h"

strata_status_t st_straggler_init(st_straggler_t *s, int window, int nranks)
{
    *s = (st_straggler_t){.window = window, .suspect = -1, .flagged = -1};
    if (window <= 0 || nranks < 2) {
        s->window = 0;
        return STRATA_OK;
    }
    s->busy_all = calloc((size_t)nranks, sizeof *s->busy_all);
    return s->busy_all ? STRATA_OK : st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
}

void st_straggler_free(st_straggler_t *s)
{
    free(s->busy_all);
    s->busy_all = NULL;
}

static double blocked_s(strata_comm_t *comm)
{
    strata_comm_stats_t st;
    return strata_comm_stats(comm, &st) == STRATA_OK ? st.wait_s : 0;
}

void st_straggler_begin(st_straggler_t *s, strata_comm_t *comm)
{
    if (s->window)
        s->wait_mark = blocked_s(comm);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int st_straggler_judge(const double *busy, int n, double *ratio)
{
    *ratio = 0;
    if (n < 2)
        return -1;
    int worst = 0;
    for (int r = 1; r < n; r++)
        if (busy[r] > busy[worst])
            worst = r;
    double *others = malloc((size_t)(n - 1) * sizeof *others);
    if (!others)
        return -1;
    for (int r = 0, k = 0; r < n; r++)
        if (r != worst)
            others[k++] = busy[r];
    qsort(others, (size_t)(n - 1), sizeof *others, cmp_double);
    int m = n - 1;
    double median = m % 2 ? others[m / 2] : (others[m / 2 - 1] + others[m / 2]) / 2;
    free(others);
    *ratio = median > 0 ? busy[worst] / median : 0;
    bool slow = busy[worst] > ST_STRAGGLER_RATIO * median &&
                busy[worst] - median > ST_STRAGGLER_MIN_S;
    return slow ? worst : -1;
}

strata_status_t st_straggler_end(st_straggler_t *s, strata_comm_t *comm, double seconds,
                                 strata_status_t (*all_sum)(void *ctx, double *v, int n), void *ctx,
                                 int rank, int nranks)
{
    s->window_ended = false;
    if (!s->window)
        return STRATA_OK;
    double busy = seconds - (blocked_s(comm) - s->wait_mark);
    s->busy += busy > 0 ? busy : 0;
    if (++s->steps < s->window)
        return STRATA_OK;
    memset(s->busy_all, 0, (size_t)nranks * sizeof *s->busy_all);
    s->busy_all[rank] = s->busy / s->steps;
    s->busy = 0;
    s->steps = 0;
    ST_TRY(all_sum(ctx, s->busy_all, nranks));
    s->window_ended = true;
    double ratio;
    int slow = st_straggler_judge(s->busy_all, nranks, &ratio);
    s->streak = slow >= 0 && slow == s->suspect ? s->streak + 1 : slow >= 0;
    s->suspect = slow;
    if (slow != s->flagged) // the straggler caught up (or another rank is slow now)
        s->flagged = -1;
    if (slow >= 0 && s->streak >= ST_STRAGGLER_STREAK) {
        if (s->flagged != slow && rank == 0)
            ST_LOG_WARN(ST_SUB_TRAIN, "rank %d is a straggler: busy %.1f ms a step, %.2fx the "
                        "others' median, %d windows of %d steps in a row", slow,
                        s->busy_all[slow] * 1e3, ratio, s->streak, s->window);
        s->flagged = slow;
        s->ratio = ratio;
    }
    return STRATA_OK;
}
