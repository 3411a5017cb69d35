/* The scheduler simulation: a trace of job arrivals and host failures replayed on a cluster under
 * one placement policy.
 *
 * Events are processed in time order (arrivals and failures from the trace, completions and
 * repairs as they come). Waiting jobs are tried highest priority first, then by arrival, and a job
 * that does not fit lets smaller ones behind it start (backfill without reservations). Under the
 * topology-aware policy `spares` free hosts of every failure domain are kept out of new jobs and
 * serve only as replacements. When a host of a running job fails, the job gets a replacement from
 * the same rack, else zone, else anywhere (strata_place_replace), so only that host's ranks move;
 * with no free host the job is requeued whole. The wall time of each replacement decision is the
 * reported rescheduling time. Jobs run for their duration: the simulation measures placement, not
 * the slow-down a bad placement would cause (that is the cost, reported as traffic). */
#include "base/base.h"
#include "sched/sched_internal.h"
#include "strata/sched.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

strata_sim_opts_t strata_sim_opts_default(void)
{
    strata_sim_opts_t o = {.policy = STRATA_POLICY_TOPO, .seed = 1, .spares = 2, .spare_level = 0,
                           .samples = 200};
    return o;
}

void strata_trace_free(strata_trace_t *t)
{
    if (!t)
        return;
    free(t->ev);
    memset(t, 0, sizeof *t);
}

static int cmp_event(const void *a, const void *b)
{
    const strata_trace_event_t *x = a, *y = b;
    if (x->time_s != y->time_s)
        return x->time_s < y->time_s ? -1 : 1;
    if (x->kind != y->kind)
        return (int)x->kind - (int)y->kind;
    return (x->id > y->id) - (x->id < y->id); // ids come from the file: no subtraction
}

static double urand(uint64_t *s)
{
    return (double)(st_sched_rand(s) >> 11) * (1.0 / 9007199254740992.0);
}

strata_status_t strata_trace_generate(const strata_cluster_t *c, int njobs, int nfail,
                                      uint64_t seed, strata_trace_t *out)
{
    memset(out, 0, sizeof *out);
    if (njobs < 0 || nfail < 0 || njobs + nfail > 10000000 || c->nhosts < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "trace: expected 0 to 10M jobs and failures");
    out->ev = calloc((size_t)(njobs + nfail) + 1, sizeof *out->ev);
    if (!out->ev)
        return st_error(STRATA_ERR_NO_MEMORY, "trace: out of memory");
    uint64_t s = seed ? seed : 1;
    int acc = c->hosts[0].accels;
    int maxk = 0;
    while ((2LL << maxk) <= c->nhosts / 4)
        maxk++;
    double capacity = (double)c->nhosts * acc, t = 0, work = 0;
    // First the jobs with unit interarrival gaps, then rescale time for ~85% load.
    for (int i = 0; i < njobs; i++) {
        strata_trace_event_t *e = &out->ev[i];
        e->kind = STRATA_EV_JOB;
        e->id = i;
        // Sizes: hosts = 2^k, small jobs more likely (k drawn as the min of two uniforms).
        int k1 = (int)(urand(&s) * (maxk + 1)), k2 = (int)(urand(&s) * (maxk + 1));
        int hosts = 1 << ST_MIN(k1, k2);
        strata_job_t j = strata_job_default();
        j.tp = acc;
        j.pp = 1;
        while (j.pp < 16 && j.pp * 2 <= hosts && urand(&s) < 0.7)
            j.pp *= 2;
        j.dp = hosts / j.pp;
        e->job = j;
        e->duration_s = 600 + -log(1 - urand(&s)) * 7200;
        e->priority = (int)(urand(&s) * 3);
        t += -log(1 - urand(&s));
        e->time_s = t;
        work += e->duration_s * hosts * acc;
    }
    double span = work / (0.85 * capacity);
    double scale = njobs > 0 && t > 0 ? span / t : 1;
    for (int i = 0; i < njobs; i++)
        out->ev[i].time_s *= scale;
    for (int i = 0; i < nfail; i++) {
        strata_trace_event_t *e = &out->ev[njobs + i];
        e->kind = STRATA_EV_FAIL;
        e->id = i;
        e->time_s = urand(&s) * (span > 0 ? span : 3600);
        e->host = (int)(st_sched_rand(&s) % (uint64_t)c->nhosts);
        e->repair_s = 4 * 3600;
    }
    out->nevents = njobs + nfail;
    qsort(out->ev, (size_t)out->nevents, sizeof *out->ev, cmp_event);
    return STRATA_OK;
}

void strata_trace_write(const strata_cluster_t *c, const strata_trace_t *t, FILE *f)
{
    fprintf(f, "# strata sched trace: job TIME ID ACCELS tp= pp= cp= duration= priority=; "
               "fail TIME HOST repair=\n");
    // Times in the shortest exact text: a written trace replays exactly (with %.3f a duration of
    // 1e-4 came back as 0, which the reader refuses).
    char a[32], b[32];
    for (int i = 0; i < t->nevents; i++) {
        const strata_trace_event_t *e = &t->ev[i];
        if (e->kind == STRATA_EV_JOB)
            fprintf(f, "job %s %d %lld tp=%d pp=%d cp=%d duration=%s priority=%d\n",
                    st_format_double(e->time_s, a, sizeof a), e->id, strata_job_world(&e->job),
                    e->job.tp, e->job.pp, e->job.cp, st_format_double(e->duration_s, b, sizeof b),
                    e->priority);
        else
            fprintf(f, "fail %s %s repair=%s\n", st_format_double(e->time_s, a, sizeof a),
                    c->hosts[e->host].name, st_format_double(e->repair_s, b, sizeof b));
    }
}

/* Accelerators of one job in a trace (and so each of its tp, pp, cp), as strata_place allows. */
#define TRACE_MAX_ACCELS (1 << 24)

/* Times and durations: finite, >= 0, at most a millennium (so sums of them stay exact enough). */
static bool time_ok(double t)
{
    return t >= 0 && t <= 3.2e10;
}

/* A whole decimal in [lo, hi]. */
static bool int_value(const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

/* A number of seconds, time_ok. */
static bool seconds_value(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !time_ok(v))
        return false;
    *out = v;
    return true;
}

strata_status_t strata_trace_load(const strata_cluster_t *c, const char *path,
                                  strata_trace_t *out)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f)
        return st_error_errno(STRATA_ERR_IO, errno, "%s: cannot open", path);
    char line[1024];
    int ln = 0, cap = 0;
    strata_status_t rc = STRATA_OK;
    while (rc >= 0 && fgets(line, sizeof line, f)) {
        ln++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char kind[16];
        int off = 0;
        if (sscanf(line, "%15s%n", kind, &off) != 1)
            continue;
        if (out->nevents == cap) {
            cap = cap ? cap * 2 : 256;
            strata_trace_event_t *n = realloc(out->ev, (size_t)cap * sizeof *n);
            if (!n) {
                rc = st_error(STRATA_ERR_NO_MEMORY, "%s: out of memory", path);
                break;
            }
            out->ev = n;
        }
        strata_trace_event_t *e = &out->ev[out->nevents];
        memset(e, 0, sizeof *e);
        char *p = line + off;
        int n = 0;
        if (!strcmp(kind, "job")) {
            long long accels;
            e->kind = STRATA_EV_JOB;
            e->job = strata_job_default();
            e->job.tp = c->hosts[0].accels;
            if (sscanf(p, "%lf %d %lld%n", &e->time_s, &e->id, &accels, &n) != 3 || accels < 1 ||
                accels > TRACE_MAX_ACCELS || !time_ok(e->time_s)) {
                rc = st_error(STRATA_ERR_PARSE, "%s:%d: expected \"job TIME ID ACCELS key=value "
                              "...\" with TIME >= 0 and ACCELS from 1 to %d", path, ln,
                              TRACE_MAX_ACCELS);
                break;
            }
            p += n;
            e->duration_s = -1;
            char kv[64];
            while (rc >= 0 && sscanf(p, "%63s%n", kv, &n) == 1) {
                p += n;
                char *eq = strchr(kv, '=');
                const char *v = eq ? eq + 1 : "";
                if (eq)
                    *eq = '\0';
                // Each value checked for its range before it is converted or multiplied.
                bool ok = eq != NULL;
                if (ok && !strcmp(kv, "tp"))
                    ok = int_value(v, 1, TRACE_MAX_ACCELS, &e->job.tp);
                else if (ok && !strcmp(kv, "pp"))
                    ok = int_value(v, 1, TRACE_MAX_ACCELS, &e->job.pp);
                else if (ok && !strcmp(kv, "cp"))
                    ok = int_value(v, 1, TRACE_MAX_ACCELS, &e->job.cp);
                else if (ok && !strcmp(kv, "duration"))
                    ok = seconds_value(v, &e->duration_s) && e->duration_s > 0;
                else if (ok && !strcmp(kv, "priority"))
                    ok = int_value(v, -1000000, 1000000, &e->priority);
                else
                    ok = false;
                if (!ok)
                    rc = st_error(STRATA_ERR_PARSE, "%s:%d: expected tp=, pp=, cp= (1 to %d), "
                                  "duration= (seconds > 0) or priority= (an integer), got \"%s%s%s\"",
                                  path, ln, TRACE_MAX_ACCELS, kv, eq ? "=" : "", v);
            }
            long long inner = (long long)e->job.tp * e->job.pp * e->job.cp;
            if (rc >= 0 && (accels % inner || e->duration_s <= 0))
                rc = st_error(STRATA_ERR_PARSE, "%s:%d: expected ACCELS a multiple of tp*pp*cp "
                              "and a duration=", path, ln);
            e->job.dp = (int)(accels / inner);
        } else if (!strcmp(kind, "fail")) {
            char host[STRATA_HOSTNAME_MAX], kv[64];
            e->kind = STRATA_EV_FAIL;
            e->repair_s = 4 * 3600;
            if (sscanf(p, "%lf %63s%n", &e->time_s, host, &n) != 2 || !time_ok(e->time_s)) {
                rc = st_error(STRATA_ERR_PARSE, "%s:%d: expected \"fail TIME HOST\" with TIME "
                              ">= 0", path, ln);
                break;
            }
            p += n;
            e->host = strata_cluster_find_host(c, host);
            if (e->host < 0)
                rc = st_error(STRATA_ERR_PARSE, "%s:%d: expected a host of the cluster, got "
                              "unknown host \"%s\"", path, ln, host);
            if (rc >= 0 && sscanf(p, "%63s", kv) == 1 &&
                (strncmp(kv, "repair=", 7) || !seconds_value(kv + 7, &e->repair_s)))
                rc = st_error(STRATA_ERR_PARSE, "%s:%d: expected repair=SECONDS, got \"%s\"", path,
                              ln, kv);
        } else {
            rc = st_error(STRATA_ERR_PARSE, "%s:%d: expected a line starting with job or fail, got "
                          "\"%s\"", path, ln, kind);
        }
        if (rc >= 0)
            out->nevents++;
    }
    fclose(f);
    if (rc < 0) {
        strata_trace_free(out);
        return rc;
    }
    if (out->nevents > 1) // a trace of comments only has no array: qsort(NULL, 0) is undefined
        qsort(out->ev, (size_t)out->nevents, sizeof *out->ev, cmp_event);
    return STRATA_OK;
}

/* ---- replay ------------------------------------------------------------------------------------ */

typedef struct run {
    const strata_trace_event_t *ev;
    double arrive, start, end, remaining;
    int state; /* 0 waiting, 1 running, 2 done */
    int nhosts;
    int *hosts;
} run_t;

typedef struct sim {
    strata_cluster_t c; /* copy: hosts are ours */
    const strata_sim_opts_t *o;
    run_t *runs;
    int nruns;
    int *owner;
    double *repair_at;
    bool *spare;
    uint64_t rng;
    int zone_level;
    double busy_accels, last_t, util_int, frag_int;
    double capacity;  /* accelerators of the cluster */
    int max_samples;  /* utilisation samples kept; neighbours merge beyond */
    strata_sim_report_t *r;
    double *waits;
    int nwaits;
} sim_t;

static double fragmentation(const sim_t *s)
{
    const strata_cluster_t *c = &s->c;
    if (c->topo.nlevels < 2)
        return 0;
    int nr = c->ndom[1];
    int *tot = calloc((size_t)nr * 2, sizeof *tot);
    if (!tot)
        return 0;
    int nfree = 0, outside = 0;
    for (int h = 0; h < c->nhosts; h++) {
        tot[c->hosts[h].dom[1]]++;
        if (c->hosts[h].state == STRATA_HOST_FREE)
            tot[nr + c->hosts[h].dom[1]]++;
    }
    for (int h = 0; h < c->nhosts; h++)
        if (c->hosts[h].state == STRATA_HOST_FREE) {
            nfree++;
            int u = c->hosts[h].dom[1];
            outside += tot[nr + u] != tot[u];
        }
    free(tot);
    return nfree ? (double)outside / nfree : 0;
}

/* Adds busy accelerator-seconds over [t0, t1) to the equal-width samples. Until the end of the run
 * a sample holds accelerator-seconds; sample_finish turns them into means. A run longer than the
 * samples hold merges neighbours pairwise and doubles the width, so the samples always cover the
 * run from 0 at one width (keeping every other instant instead thinned the early hours away). */
static void sample_add(sim_t *s, double t0, double t1, double busy)
{
    strata_sim_report_t *r = s->r;
    while (t0 < t1) {
        long long k = (long long)(t0 / r->sample_width_s);
        if ((k + 1) * r->sample_width_s <= t0) // rounding put t0 at the end of sample k
            k++;
        if (k >= s->max_samples) {
            for (int i = 0; i < s->max_samples; i++)
                r->sample_util[i] = 2 * i >= r->nsamples ? 0
                                    : r->sample_util[2 * i] +
                                          (2 * i + 1 < r->nsamples ? r->sample_util[2 * i + 1] : 0);
            r->nsamples = (r->nsamples + 1) / 2;
            r->sample_width_s *= 2;
            continue;
        }
        double end = ST_MIN(t1, (k + 1) * r->sample_width_s);
        r->sample_util[k] += busy * (end - t0);
        r->nsamples = ST_MAX(r->nsamples, (int)k + 1);
        t0 = end;
    }
}

/* Accelerator-seconds to mean utilisation, over samples that end at the makespan. */
static void sample_finish(sim_t *s)
{
    strata_sim_report_t *r = s->r;
    const double w = r->sample_width_s, end = r->makespan_s;
    int n = end > 0 ? (int)ceil(end / w - 1e-9) : 0;
    n = ST_MAX(1, ST_MIN(n, s->max_samples));
    for (int k = 0; k < n; k++) {
        double len = ST_MIN(w, end - k * w);
        r->sample_util[k] = len > 0 && s->capacity > 0 ? r->sample_util[k] / (s->capacity * len) : 0;
    }
    for (int k = n; k < r->nsamples; k++)
        r->sample_util[k] = 0;
    r->nsamples = n;
}

static void advance(sim_t *s, double t)
{
    double dt = t - s->last_t;
    if (dt > 0) {
        s->util_int += s->busy_accels * dt;
        s->frag_int += fragmentation(s) * dt;
        sample_add(s, s->last_t, t, s->busy_accels);
    }
    s->last_t = t;
}

static strata_status_t try_start(sim_t *s, double t)
{
    {
        bool started = false;
        // Waiting jobs by priority, then arrival; a job that does not fit lets later ones try. (waiting jobs are few at a time).
        int *idx = malloc((size_t)s->nruns * sizeof *idx);
        if (!idx)
            return st_error(STRATA_ERR_NO_MEMORY, "sim: out of memory");
        int n = 0;
        for (int i = 0; i < s->nruns; i++)
            if (s->runs[i].state == 0 && s->runs[i].arrive <= t)
                idx[n++] = i;
        for (int a = 1; a < n; a++)
            for (int b = a; b > 0; b--) {
                run_t *x = &s->runs[idx[b]], *y = &s->runs[idx[b - 1]];
                if (x->ev->priority > y->ev->priority ||
                    (x->ev->priority == y->ev->priority && x->arrive < y->arrive)) {
                    int tmp = idx[b];
                    idx[b] = idx[b - 1];
                    idx[b - 1] = tmp;
                } else {
                    break;
                }
            }
        for (int q = 0; q < n; q++) {
            run_t *x = &s->runs[idx[q]];
            strata_place_opts_t po = strata_place_opts_default();
            po.policy = s->o->policy;
            po.seed = st_sched_rand(&s->rng);
            po.spares = s->o->policy == STRATA_POLICY_TOPO ? s->o->spares : 0;
            po.spare_level = s->o->spare_level;
            strata_placement_t p;
            if (strata_place(&s->c, &x->ev->job, &po, &p) < 0)
                continue;
            x->hosts = realloc(x->hosts, (size_t)p.nhosts * sizeof *x->hosts);
            if (!x->hosts) {
                strata_placement_free(&p);
                free(idx);
                return st_error(STRATA_ERR_NO_MEMORY, "sim: out of memory");
            }
            memcpy(x->hosts, p.hosts, (size_t)p.nhosts * sizeof *x->hosts);
            x->nhosts = p.nhosts;
            for (int j = 0; j < p.nhosts; j++) {
                s->c.hosts[p.hosts[j]].state = STRATA_HOST_BUSY;
                s->owner[p.hosts[j]] = idx[q];
                s->busy_accels += s->c.hosts[p.hosts[j]].accels;
            }
            if (x->start < 0) {
                x->start = t;
                s->waits[s->nwaits++] = t - x->arrive;
                s->r->started++;
                s->r->comm_s_mean += p.cost.total_s;
                s->r->cross_rack_bytes +=
                    p.cost.cross_bytes[ST_MIN(2, s->c.topo.nlevels - 1)] * x->remaining;
                s->r->cross_zone_bytes += p.cost.cross_bytes[s->zone_level] * x->remaining;
            }
            x->state = 1;
            x->end = t + x->remaining;
            strata_placement_free(&p);
            started = true;
        }
        free(idx);
        (void)started;
        return STRATA_OK;
    }
}

static void finish_run(sim_t *s, run_t *x)
{
    for (int j = 0; j < x->nhosts; j++) {
        int h = x->hosts[j];
        s->owner[h] = -1;
        s->busy_accels -= s->c.hosts[h].accels;
        if (s->c.hosts[h].state == STRATA_HOST_BUSY)
            s->c.hosts[h].state = STRATA_HOST_FREE;
    }
    x->nhosts = 0;
}

static strata_status_t fail_host(sim_t *s, const strata_trace_event_t *e, double t)
{
    int h = e->host;
    s->r->failures++;
    int j = s->owner[h];
    if (s->c.hosts[h].state == STRATA_HOST_FAILED)
        return STRATA_OK;
    s->repair_at[h] = t + e->repair_s;
    if (j < 0) {
        s->c.hosts[h].state = STRATA_HOST_FAILED;
        return STRATA_OK;
    }
    run_t *x = &s->runs[j];
    s->r->failures_hit_jobs++;
    uint64_t t0 = st_now_ns();
    int rep = -1;
    if (s->o->policy == STRATA_POLICY_TOPO) {
        ST_TRY(st_mark_spares(&s->c, s->o->spares, s->o->spare_level, s->spare));
        ST_TRY(strata_place_replace(&s->c, h, s->spare, &rep));
    } else {
        int nfree = 0;
        for (int k = 0; k < s->c.nhosts; k++)
            nfree += s->c.hosts[k].state == STRATA_HOST_FREE;
        if (nfree > 0) {
            int want = s->o->policy == STRATA_POLICY_RANDOM
                           ? (int)(st_sched_rand(&s->rng) % (uint64_t)nfree)
                           : 0;
            for (int k = 0; k < s->c.nhosts && rep < 0; k++)
                if (s->c.hosts[s->c.by_name[k]].state == STRATA_HOST_FREE && want-- == 0)
                    rep = s->c.by_name[k];
        }
    }
    double us = (double)(st_now_ns() - t0) / 1e3;
    s->r->resched_mean_us += us;
    s->r->resched_max_us = ST_MAX(s->r->resched_max_us, us);
    long long pph = strata_job_world(&x->ev->job) / x->nhosts;
    if (rep >= 0) {
        if (s->o->policy == STRATA_POLICY_TOPO && s->spare[rep])
            s->r->spare_used++;
        int dl = ST_MAX(0, s->zone_level - 1); // the failed host's zone (or rack)
        if (s->c.hosts[rep].dom[dl] == s->c.hosts[h].dom[dl])
            s->r->same_domain++;
        for (int k = 0; k < x->nhosts; k++)
            if (x->hosts[k] == h)
                x->hosts[k] = rep;
        s->owner[h] = -1;
        s->owner[rep] = j;
        s->c.hosts[rep].state = STRATA_HOST_BUSY;
        s->c.hosts[h].state = STRATA_HOST_FAILED;
        s->r->ranks_moved += pph;
        return STRATA_OK;
    }
    // No free host: requeue the job whole with what it has left.
    s->r->restarts++;
    s->r->ranks_moved += strata_job_world(&x->ev->job);
    finish_run(s, x);
    s->c.hosts[h].state = STRATA_HOST_FAILED;
    x->remaining = x->end - t;
    x->state = 0;
    return STRATA_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

strata_status_t strata_sim_run(const strata_cluster_t *c, const strata_trace_t *trace,
                               const strata_sim_opts_t *opts, strata_sim_report_t *out)
{
    memset(out, 0, sizeof *out);
    strata_sim_opts_t o = opts ? *opts : strata_sim_opts_default();
    uint64_t wall0 = st_now_ns();
    sim_t s = {.o = &o, .r = out, .rng = o.seed ? o.seed : 1};
    out->policy = o.policy;
    strata_status_t rc = STRATA_OK;
    s.c = *c;
    s.c.hosts = malloc((size_t)c->nhosts * sizeof *s.c.hosts);
    s.owner = malloc((size_t)c->nhosts * sizeof *s.owner);
    s.repair_at = malloc((size_t)c->nhosts * sizeof *s.repair_at);
    s.spare = calloc((size_t)c->nhosts, sizeof *s.spare);
    s.runs = calloc((size_t)trace->nevents + 1, sizeof *s.runs);
    s.waits = calloc((size_t)trace->nevents + 1, sizeof *s.waits);
    if (!s.c.hosts || !s.owner || !s.repair_at || !s.spare || !s.runs || !s.waits) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "sim: out of memory");
        goto out;
    }
    memcpy(s.c.hosts, c->hosts, (size_t)c->nhosts * sizeof *s.c.hosts);
    for (int h = 0; h < c->nhosts; h++) {
        s.owner[h] = -1;
        s.repair_at[h] = -1;
        s.capacity += c->hosts[h].accels;
    }
    // Samples start a little finer than the trace's last arrival needs; merging widens them.
    s.max_samples = o.samples >= 2 && o.samples <= 256 ? o.samples : o.samples > 256 ? 256 : 200;
    out->sample_width_s = 1;
    if (trace->nevents > 0 && trace->ev[trace->nevents - 1].time_s > s.max_samples)
        out->sample_width_s = trace->ev[trace->nevents - 1].time_s / s.max_samples;
    // Crossing zones = crossing between the top level's children; racks: between level-1 units.
    s.zone_level = c->topo.nlevels - 1;
    for (int i = 0; i < trace->nevents; i++)
        if (trace->ev[i].kind == STRATA_EV_JOB) {
            run_t *x = &s.runs[s.nruns++];
            x->ev = &trace->ev[i];
            x->arrive = x->ev->time_s;
            x->remaining = x->ev->duration_s;
            x->start = -1;
        }
    out->jobs = s.nruns;
    int next = 0;
    double t = 0;
    for (;;) {
        // Next event: trace, completion or repair.
        double tn = next < trace->nevents ? trace->ev[next].time_s : INFINITY;
        int which = 0;
        for (int i = 0; i < s.nruns; i++)
            if (s.runs[i].state == 1 && s.runs[i].end < tn) {
                tn = s.runs[i].end;
                which = 1;
            }
        for (int h = 0; h < c->nhosts; h++)
            if (s.repair_at[h] >= 0 && s.repair_at[h] < tn) {
                tn = s.repair_at[h];
                which = 2;
            }
        if (!isfinite(tn))
            break;
        advance(&s, tn);
        t = tn;
        if (which == 1) {
            for (int i = 0; i < s.nruns; i++)
                if (s.runs[i].state == 1 && s.runs[i].end <= t) {
                    finish_run(&s, &s.runs[i]);
                    s.runs[i].state = 2;
                    out->finished++;
                    out->makespan_s = ST_MAX(out->makespan_s, t);
                }
        } else if (which == 2) {
            for (int h = 0; h < c->nhosts; h++)
                if (s.repair_at[h] >= 0 && s.repair_at[h] <= t) {
                    s.repair_at[h] = -1;
                    if (s.c.hosts[h].state == STRATA_HOST_FAILED)
                        s.c.hosts[h].state = STRATA_HOST_FREE;
                }
        } else {
            const strata_trace_event_t *e = &trace->ev[next++];
            if (e->kind == STRATA_EV_FAIL)
                ST_TRY_GOTO(fail_host(&s, e, t), rc, out);
        }
        ST_TRY_GOTO(try_start(&s, t), rc, out);
    }
    out->never_started = out->jobs - out->started;
    if (out->makespan_s <= 0)
        out->makespan_s = t;
    sample_finish(&s);
    const double cap = s.capacity;
    out->utilisation = out->makespan_s > 0 ? s.util_int / (cap * out->makespan_s) : 0;
    out->fragmentation = s.last_t > 0 ? s.frag_int / s.last_t : 0;
    if (out->started)
        out->comm_s_mean /= out->started;
    if (out->failures_hit_jobs)
        out->resched_mean_us /= out->failures_hit_jobs;
    if (s.nwaits) {
        qsort(s.waits, (size_t)s.nwaits, sizeof *s.waits, cmp_double);
        double sum = 0;
        for (int i = 0; i < s.nwaits; i++)
            sum += s.waits[i];
        out->wait_mean_s = sum / s.nwaits;
        out->wait_p95_s = s.waits[(int)(0.95 * (s.nwaits - 1))];
    }
out:
    for (int i = 0; i < s.nruns; i++)
        free(s.runs[i].hosts);
    free(s.runs);
    free(s.c.hosts);
    free(s.owner);
    free(s.repair_at);
    free(s.spare);
    free(s.waits);
    out->wall_s = (double)(st_now_ns() - wall0) / 1e9;
    return rc;
}
