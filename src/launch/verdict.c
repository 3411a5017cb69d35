/* The verdict on a failed job: which rank caused it, in one sentence. The rules and their order are
 * in include/strata/launch.h; the reasoning behind the order: what the launcher saw happen to a
 * process (a signal nobody in the job sent, a stopped process) is a fact, what the ranks' dumps say
 * is a judgement made by the communicator from inside (usually right: the store names the first
 * failure, the watchdog's census finds a stopped rank), and which rank exited first is an accident
 * of scheduling (the ranks that noticed the failure exit before the dead one is reaped).
 * The sentence reuses the dumps' own wording, so the launcher, `strata diagnose` and every
 * survivor's error say the same thing.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "strata/launch.h"

void strata_rank_ranges(const bool *flags, int n, char *buf, size_t len)
{
    st_format_ranks(flags, n, buf, len);
}

static bool ended_badly(const strata_rank_obs_t *o)
{
    return (o->end == STRATA_RANK_EXITED && o->status != 0) ||
           (o->end == STRATA_RANK_SIGNALED && !o->by_launcher);
}

/* A failure's exit code for the launcher: the status, 128 + signal for a signal. */
static int code_of(const strata_rank_obs_t *o)
{
    return o->end == STRATA_RANK_SIGNALED ? 128 + o->status : o->status;
}

/* Of the ranks that satisfy `pick`, the one that ended first (order 0, unknown, counts as last). */
static int first_rank(const strata_diag_t *d, bool (*pick)(const strata_rank_obs_t *))
{
    int best = -1;
    unsigned best_order = 0;
    for (int r = 0; d->obs && r < d->nranks; r++) {
        const strata_rank_obs_t *o = &d->obs[r];
        unsigned order = o->order > 0 ? (unsigned)o->order : ~0u;
        if (pick(o) && (best < 0 || order < best_order)) {
            best = r;
            best_order = order;
        }
    }
    return best;
}

static bool foreign_signal(const strata_rank_obs_t *o)
{
    return o->end == STRATA_RANK_SIGNALED && !o->by_launcher;
}

static bool is_stopped(const strata_rank_obs_t *o)
{
    return o->stopped;
}

/* The rank most dumps blame (ties: the one blamed by the lowest rank's dump); -1 if none. */
static int most_blamed(const strata_diag_t *d, int *votes)
{
    int best = -1, best_votes = 0;
    for (int r = 0; d->dumps && r < d->nranks; r++) {
        if (!d->dumps[r] || d->dumps[r]->culprit < 0)
            continue;
        int c = d->dumps[r]->culprit, n = 0;
        for (int k = 0; k < d->nranks; k++)
            n += d->dumps[k] && d->dumps[k]->culprit == c;
        if (n > best_votes) {
            best = c;
            best_votes = n;
        }
    }
    *votes = best_votes;
    return best;
}

/* The lowest-ranked dump that blames c, or NULL. */
static const strata_rank_dump_t *blaming_dump(const strata_diag_t *d, int c)
{
    for (int r = 0; d->dumps && r < d->nranks; r++)
        if (d->dumps[r] && d->dumps[r]->culprit == c)
            return d->dumps[r];
    return NULL;
}

/* What an error says about rank c after naming it: for "rank 3 (host h pid 9) failed: stopped
 * responding ..." the rest " failed: stopped responding ...", for "rank 0 (host h pid 9), which
 * serves the store, failed: ..." the rest ", which serves ...". NULL when the error does not start
 * by naming c. */
static const char *after_name(const char *error, int c)
{
    char head[32];
    int n = snprintf(head, sizeof head, "rank %d", c);
    if (strncmp(error, head, (size_t)n) != 0 || (error[n] >= '0' && error[n] <= '9'))
        return NULL;
    const char *p = error + n;
    if (p[0] == ' ' && p[1] == '(') {
        const char *close = strchr(p, ')');
        if (close)
            p = close + 1;
    }
    return p;
}

/* "rank 3 (pid 1234)" with the pid the launcher saw, else the one the rank's own dump gives. */
static int pid_of(const strata_diag_t *d, int r)
{
    if (d->obs && d->obs[r].pid > 0)
        return d->obs[r].pid;
    if (d->dumps && d->dumps[r])
        return d->dumps[r]->pid;
    return 0;
}

static void describe_end(const strata_rank_obs_t *o, char *buf, size_t len)
{
    if (o->end == STRATA_RANK_EXITED) {
        snprintf(buf, len, "exited with status %d", o->status);
    } else {
        const char *abbrev = sigabbrev_np(o->status);
        if (abbrev)
            snprintf(buf, len, "was killed by signal SIG%s", abbrev);
        else
            snprintf(buf, len, "was killed by signal %d", o->status);
    }
}

/* Appends to v->text. */
static void say(strata_verdict_t *v, const char *fmt, ...) ST_PRINTF(2, 3);
static void say(strata_verdict_t *v, const char *fmt, ...)
{
    size_t used = strlen(v->text);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->text + used, sizeof v->text - used, fmt, ap);
    va_end(ap);
}

/* The sentence for culprit c on the given basis. */
static void compose(const strata_diag_t *d, strata_verdict_t *v)
{
    int c = v->rank;
    v->text[0] = '\0';
    if (v->pid > 0)
        say(v, "rank %d (pid %d)", c, v->pid);
    else
        say(v, "rank %d", c);
    const strata_rank_dump_t *blamer = blaming_dump(d, c);
    const char *rest = blamer ? after_name(blamer->error, c) : NULL;
    // The dumps' clause about c: "stopped responding during allreduce #12; ranks 0-2 were waiting
    // for it (seen by rank 0)" (after "failed: "), or ", which serves the store, failed: ...".
    const char *clause = rest && !strncmp(rest, " failed: ", 9) ? rest + 9 : rest;
    const strata_rank_obs_t *o = d->obs ? &d->obs[c] : NULL;
    char end[64];
    switch (v->basis) {
    case STRATA_VERDICT_SIGNAL:
        describe_end(o, end, sizeof end);
        say(v, " %s (not sent by the launcher)", end);
        break;
    case STRATA_VERDICT_STOPPED:
        say(v, " was found stopped (SIGSTOP/SIGTSTP)");
        if (clause && clause != rest)
            say(v, ": %s", clause);
        break;
    case STRATA_VERDICT_DUMPS:
        if (clause == rest && rest)
            say(v, "%s", rest);
        else if (clause)
            say(v, " %s", clause);
        else
            say(v, " is blamed by %d rank%s: %s", v->blamed_by, v->blamed_by == 1 ? "" : "s",
                blamer ? blamer->error : "");
        break;
    case STRATA_VERDICT_NO_DUMP: {
        const strata_rank_dump_t *any = NULL;
        for (int r = 0; !any && r < d->nranks; r++)
            any = d->dumps[r];
        say(v, " left no dump (dead or stopped) while every other rank failed%s%s",
            any ? "; the first of them says: " : "", any ? any->error : "");
        break;
    }
    case STRATA_VERDICT_EXIT:
        describe_end(o, end, sizeof end);
        say(v, " %s", end);
        if (d->dumps && d->dumps[c])
            say(v, ": %s", d->dumps[c]->error);
        break;
    case STRATA_VERDICT_NONE:
        break;
    }
    if (d->dumps && d->dumps[c] && v->basis != STRATA_VERDICT_EXIT)
        say(v, " (it had completed %lld operations)", d->dumps[c]->completed);
}

void strata_verdict_decide(const strata_diag_t *d, strata_verdict_t *v)
{
    *v = (strata_verdict_t){.rank = -1, .exit_code = -1};
    int votes = 0;
    int blamed = most_blamed(d, &votes);
    int first_fail = first_rank(d, ended_badly);
    // Of several killed (or stopped) ranks, the one the dumps blame, else the first to end.
    bool blamed_killed = blamed >= 0 && d->obs && foreign_signal(&d->obs[blamed]);
    bool blamed_stopped = blamed >= 0 && d->obs && is_stopped(&d->obs[blamed]);
    int c;
    if ((c = blamed_killed ? blamed : first_rank(d, foreign_signal)) >= 0) {
        v->basis = STRATA_VERDICT_SIGNAL;
    } else if ((c = blamed_stopped ? blamed : first_rank(d, is_stopped)) >= 0) {
        v->basis = STRATA_VERDICT_STOPPED;
    } else if ((c = blamed) >= 0) {
        v->basis = STRATA_VERDICT_DUMPS;
    } else if (!d->obs && d->dumps) {
        // Dumps alone: a rank that left none while all others did is the one that could not.
        int missing = -1, nmissing = 0;
        for (int r = 0; r < d->nranks; r++)
            if (!d->dumps[r]) {
                missing = r;
                nmissing++;
            }
        if (nmissing == 1 && d->nranks > 1) {
            c = missing;
            v->basis = STRATA_VERDICT_NO_DUMP;
        }
    }
    if (c < 0 && (c = first_fail) >= 0)
        v->basis = STRATA_VERDICT_EXIT;
    if (c < 0)
        return;
    v->rank = c;
    v->pid = pid_of(d, c);
    for (int r = 0; d->dumps && r < d->nranks; r++)
        v->blamed_by += d->dumps[r] && d->dumps[r]->culprit == c;
    if (d->obs) {
        if (ended_badly(&d->obs[c]))
            v->exit_code = code_of(&d->obs[c]);
        else if (first_fail >= 0)
            v->exit_code = code_of(&d->obs[first_fail]);
        else
            v->exit_code = 1; // blamed by the dumps, yet no rank ended badly: still a failure
    }
    compose(d, v);
}
