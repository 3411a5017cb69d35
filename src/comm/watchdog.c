/* The watchdog (watchdog.h): heartbeats during long waits, and the census that names the culprit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "comm/endpoint.h"
#include "comm/flight.h"
#include "comm/watchdog.h"

void st_watch_init(st_watch_t *w, long long timeout_ms)
{
    long long ms = timeout_ms < 0 ? 1000 : ST_MAX(100, ST_MIN(timeout_ms / 4, 1000));
    *w = (st_watch_t){.period_ns = (uint64_t)ms * 1000000u};
}

/* Wall-clock milliseconds: heartbeats say when they were sent, for ranks on other hosts. */
static long long wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void publish(st_ep_t *ep, st_watch_t *w, int awaited, const char *what)
{
    char key[32], val[512];
    snprintf(key, sizeof key, "wait/%d", st_ep_rank(ep));
    int n = snprintf(val, sizeof val, "%llu %d %lld %s", (unsigned long long)++w->beats, awaited,
                     wall_ms(), what);
    // A heartbeat that cannot be sent is no news: the census will see this rank as silent.
    if (st_store_post_set(st_ep_store(ep), key, val, (size_t)ST_MIN(n, (int)sizeof val - 1)) < 0)
        ST_LOG_DEBUG(ST_SUB_COMM, "heartbeat not sent: %s", strata_last_error());
    w->next_ns = st_now_ns() + w->period_ns;
}

bool st_watch_due(const st_watch_t *w, uint64_t since_ns)
{
    uint64_t now = st_now_ns();
    return now - since_ns >= w->period_ns && (!w->waiting || now >= w->next_ns);
}

void st_watch_beat(st_ep_t *ep, st_watch_t *w, const char *what, int awaited)
{
    publish(ep, w, awaited, what);
    w->waiting = true;
}

void st_watch_rest(st_ep_t *ep, st_watch_t *w, uint64_t now_ns)
{
    if (!w->waiting && now_ns < w->next_ns)
        return;
    // Withdraws a "waiting" heartbeat, or says once a period how far this rank got: the census
    // then tells a rank that stopped in its own work from one that never arrived.
    char what[200] = "idle; ";
    st_flight_last_done(st_ep_flight(ep), what + 6, sizeof what - 6);
    publish(ep, w, -1, what);
    w->waiting = false;
}

/* Windows the census adds while more than one rank is silent (two heartbeat periods each). */
#define EXTRA_LOOKS 2

/* ---- the census -------------------------------------------------------------------------------- */

typedef struct beat {
    long long n; /* -1: no heartbeat */
    int awaited;
    long long sent_ms; /* wall clock when it was sent */
    char what[400];
} beat_t;

/* Reads every rank's heartbeat. STRATA_ERR_TIMEOUT when the store does not answer. */
static strata_status_t read_beats(st_ep_t *ep, beat_t *b)
{
    // A missing key and a silent store both end a GET in a timeout: ask something that is
    // always answered first, so a silent store costs one timeout, not one per rank.
    int64_t v;
    ST_TRY(st_store_add(st_ep_store(ep), "census", 1, &v));
    for (int r = 0; r < st_ep_size(ep); r++) {
        char key[32];
        snprintf(key, sizeof key, "wait/%d", r);
        void *val = NULL;
        size_t len = 0;
        b[r] = (beat_t){.n = -1, .awaited = -1};
        strata_status_t rc = st_store_get(st_ep_store(ep), key, &val, &len, 0);
        if (rc == STRATA_ERR_TIMEOUT && strstr(strata_last_error(), "waiting for key"))
            continue; // "only if set" and it was not: this rank never beat
        if (rc < 0)
            return rc;
        int off = 0;
        if (sscanf(val, "%lld %d %lld %n", &b[r].n, &b[r].awaited, &b[r].sent_ms, &off) < 3)
            b[r].n = -1;
        else
            snprintf(b[r].what, sizeof b[r].what, "%s", (char *)val + off);
        free(val);
    }
    return STRATA_OK;
}

/* Sleeps `ns` in short naps, beating, until a failure notice arrives (returns it) or time is up. */
static strata_status_t nap_beating(st_ep_t *ep, st_watch_t *w, uint64_t ns, const char *what,
                                   int awaited)
{
    uint64_t until = st_now_ns() + ns;
    while (st_now_ns() < until) {
        if (st_now_ns() >= w->next_ns)
            publish(ep, w, awaited, what);
        if (st_ep_check_store(ep) < 0)
            return st_ep_error(ep);
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return STRATA_OK;
}

/* Ranks the census has not yet seen alive. */
static int count_silent(const bool *alive, int n)
{
    int silent = 0;
    for (int r = 0; r < n; r++)
        silent += !alive[r];
    return silent;
}

/* Picks the culprit among the suspects: the end of a waiting chain (its own heartbeat, if any,
 * waits on no other suspect) that most ranks wait on; ties go to the lowest rank. -1 if none. */
static int pick_culprit(const beat_t *b, const bool *suspect, int n, int me, int awaited)
{
    int best = -1, best_waiters = -1;
    for (int s = 0; s < n; s++) {
        if (!suspect[s])
            continue;
        int a = b[s].n >= 0 ? b[s].awaited : -1;
        if (a >= 0 && a < n && suspect[a] && a != s)
            continue; // it waits on another suspect: the cause is further down the chain
        int waiters = awaited == s;
        for (int r = 0; r < n; r++)
            waiters += r != me && !suspect[r] && b[r].n >= 0 && b[r].awaited == s;
        if (waiters > best_waiters) {
            best = s;
            best_waiters = waiters;
        }
    }
    return best;
}

strata_status_t st_watch_verdict(st_ep_t *ep, st_watch_t *w, const char *what, int awaited)
{
    const int n = st_ep_size(ep), me = st_ep_rank(ep);
    st_store_t *store = st_ep_store(ep);
    if (st_ep_check_store(ep) < 0) // someone else's verdict, or a death, is already known
        return st_ep_error(ep);
    beat_t *before = calloc((size_t)n, sizeof *before), *after = calloc((size_t)n, sizeof *after);
    bool *suspect = calloc((size_t)n, sizeof *suspect), *alive = calloc((size_t)n, sizeof *alive);
    strata_status_t rc = STRATA_OK;
    int culprit = -1;
    char text[1024] = "";
    if (!before || !after || !suspect || !alive) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "out of memory for the census of %d ranks", n);
        goto out;
    }
    // The census must not outlast the timeout it explains: a store that does not answer within
    // two heartbeat periods is taken as stopped.
    long long saved = st_store_timeout(store);
    st_store_set_timeout(store, (long long)(2 * w->period_ns / 1000000u));
    rc = read_beats(ep, before);
    for (int r = 0; r < n; r++)
        alive[r] = r == me;
    // A rank is alive once its beat advances between two reads. A live rank that did not run for
    // the whole window (descheduled, swapped out, a stalled host) looks like the stopped one, and
    // the tie between them could blame it: so while more than one rank is silent, look again, up
    // to EXTRA_LOOKS more windows. A stopped rank stays silent; a starved one speaks up.
    for (int look = 0; rc == STRATA_OK && look <= EXTRA_LOOKS; look++) {
        if (look > 0) {
            if (count_silent(alive, n) < 2)
                break;
            beat_t *last = after; // this look starts from the previous one's reading
            after = before;
            before = last;
        }
        rc = nap_beating(ep, w, w->period_ns * 2, what, awaited);
        if (rc == STRATA_OK && !st_ep_error(ep))
            rc = read_beats(ep, after);
        for (int r = 0; rc == STRATA_OK && r < n; r++)
            alive[r] |= after[r].n >= 0 && after[r].n != before[r].n;
    }
    st_store_set_timeout(store, saved);
    if (st_ep_error(ep) < 0) {
        rc = st_ep_error(ep);
        goto out;
    }
    if (rc == STRATA_ERR_TIMEOUT || rc == STRATA_ERR_PEER_FAILED) {
        if (st_ep_check_store(ep) < 0) {
            rc = st_ep_error(ep);
            goto out;
        }
        if (st_ep_store_on_rank0(ep) && me != 0) {
            rc = st_ep_fail_blaming(ep, 0, STRATA_ERR_TIMEOUT,
                                    "%s, which serves the store, stopped responding: the store "
                                    "did not answer the census after rank %d timed out %s",
                                    st_ep_peer_name(ep, 0), me, what);
            goto out;
        }
    }
    if (rc < 0)
        ST_LOG_WARN(ST_SUB_COMM, "census failed: %s", strata_last_error());
    else {
        for (int r = 0; r < n; r++)
            suspect[r] = !alive[r];
        culprit = pick_culprit(after, suspect, n, me, awaited);
    }
    if (culprit >= 0) {
        char waiting[256], others[256];
        st_format_ranks(alive, n, waiting, sizeof waiting);
        suspect[culprit] = false;
        st_format_ranks(suspect, n, others, sizeof others);
        const char *op = strstr(what, "in ") == what ? what + 3 : what;
        char opname[160];
        int oplen = (int)strcspn(op, "(");
        while (oplen > 0 && op[oplen - 1] == ' ')
            oplen--;
        snprintf(opname, sizeof opname, "%.*s", oplen, op);
        bool many = strchr(waiting, ',') || strchr(waiting, '-');
        int len = snprintf(text, sizeof text, "stopped responding during %s; rank%s %s %s waiting for it",
                           opname, many ? "s" : "", waiting, many ? "were" : "was");
        if (after[culprit].n >= 0 && len > 0 && (size_t)len < sizeof text)
            len += snprintf(text + len, sizeof text - (size_t)len,
                            "; its last heartbeat, %.1f s before: %s",
                            (double)(wall_ms() - after[culprit].sent_ms) / 1000, after[culprit].what);
        if (others[0] && len > 0 && (size_t)len < sizeof text)
            snprintf(text + len, sizeof text - (size_t)len, "; ranks %s did not respond either",
                     others);
        rc = st_store_report(store, culprit, text);
        int who = -1;
        if (st_store_check_notice(store, &who) < 0) // ours, or an earlier verdict: the same story
            rc = st_ep_fail_blaming(ep, who, STRATA_ERR_TIMEOUT, "%s", strata_last_error());
        else
            rc = st_ep_fail_blaming(ep, culprit, STRATA_ERR_TIMEOUT, "%s %s",
                                    st_ep_peer_name(ep, culprit), text);
        goto out;
    }
    // No culprit: every rank is alive and waiting (mismatched calls?), or the census failed.
    char msg[600];
    snprintf(msg, sizeof msg, "timed out after %lld ms %s%s", st_ep_timeout_ms(ep), what,
             rc < 0 ? "" : " (every rank is alive and waiting: do the ranks call different "
                           "collectives?)");
    st_store_abort(store, msg);
    rc = st_ep_fail_blaming(ep, awaited, STRATA_ERR_TIMEOUT, "rank %d %s", me, msg);
out:
    free(before);
    free(after);
    free(suspect);
    free(alive);
    return rc;
}
