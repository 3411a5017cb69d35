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
    free(s->role);
    s->busy_all = NULL;
    s->role = NULL;
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

/* The slow rank among the ranks of one role (all when role is NULL), or -1. */
static int judge_role(const double *busy, const int *role, int want, int n, double *ratio)
{
    *ratio = 0;
    int worst = -1, m = 0;
    for (int r = 0; r < n; r++)
        if (!role || role[r] == want) {
            m++;
            if (worst < 0 || busy[r] > busy[worst])
                worst = r;
        }
    if (m < 2)
        return -1;
    double *others = malloc((size_t)(m - 1) * sizeof *others);
    if (!others)
        return -1;
    for (int r = 0, k = 0; r < n; r++)
        if (r != worst && (!role || role[r] == want))
            others[k++] = busy[r];
    m--;
    qsort(others, (size_t)m, sizeof *others, cmp_double);
    double median = m % 2 ? others[m / 2] : (others[m / 2 - 1] + others[m / 2]) / 2;
    free(others);
    *ratio = median > 0 ? busy[worst] / median : 0;
    bool slow = busy[worst] > ST_STRAGGLER_RATIO * median &&
                busy[worst] - median > ST_STRAGGLER_MIN_S;
    return slow ? worst : -1;
}

int st_straggler_judge(const double *busy, const int *role, int n, double *ratio)
{
    *ratio = 0;
    int slow = -1;
    for (int r = 0; r < n; r++) { // each role once: at its first rank
        bool first = true;
        for (int q = 0; role && q < r && first; q++)
            first = role[q] != role[r];
        if (!first || (!role && r > 0))
            continue;
        double x;
        int s = judge_role(busy, role, role ? role[r] : 0, n, &x);
        if (s >= 0 && x > *ratio) {
            slow = s;
            *ratio = x;
        }
    }
    return slow;
}

strata_status_t st_straggler_set_roles(st_straggler_t *s, const int *role, int nranks)
{
    if (!s->window)
        return STRATA_OK;
    free(s->role);
    s->role = malloc((size_t)nranks * sizeof *s->role);
    if (!s->role)
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
    memcpy(s->role, role, (size_t)nranks * sizeof *s->role);
    return STRATA_OK;
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
    int slow = st_straggler_judge(s->busy_all, s->role, nranks, &ratio);
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
