/* The trace recorder behind include/strata/trace.h: an in-memory array of events and of the spans
 * still open, written as Chrome trace-event JSON at close. It pairs begins with ends as the viewer
 * will (a thread's end closes its latest open begin; an async end its (cat, id)), so what it writes
 * has no unmatched event. It does not interpret spans (overlap analysis reads the file); merging
 * files is merge.c. */
#include "strata/trace.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "base/json.h"

typedef struct trace_event {
    const char *cat;
    const char *name;
    uint64_t ts_ns; /* monotonic */
    uint64_t id;
    size_t args;    /* index of its first argument in g_trace.arg */
    int nargs;
    int tid;
    char ph;        /* 'B', 'E', 'b', 'e' */
    bool at_close;  /* an end written by strata_trace_close for a span left open */
} trace_event_t;

/* A growing array. */
typedef struct vec {
    void *p;
    size_t n, cap;
} vec_t;

static struct {
    bool open;
    bool full;         /* out of memory: nothing more is recorded, open spans end at full_ns */
    char *path;
    int pid;
    uint64_t t0_ns;    /* monotonic at open */
    uint64_t real0_ns; /* CLOCK_REALTIME at open */
    uint64_t full_ns;
    vec_t ev;          /* trace_event_t */
    vec_t arg;         /* strata_trace_arg_t */
    vec_t open_sync;   /* size_t: indices of the 'B' events not ended yet */
    vec_t open_async;  /* size_t: indices of the 'b' events not ended yet */
} g_trace;

static _Thread_local int tls_tid;

static int this_tid(void)
{
    if (!tls_tid)
        tls_tid = (int)gettid();
    return tls_tid;
}

/* Room for `more` elements of `size` bytes; false (and the trace marked full) when memory runs
 * out. */
static bool vec_reserve(vec_t *v, size_t size, size_t more)
{
    if (v->n + more <= v->cap)
        return true;
    size_t cap = v->cap ? 2 * v->cap : 1024;
    while (cap < v->n + more)
        cap *= 2;
    void *p = realloc(v->p, cap * size);
    if (!p) { // a trace is best effort: stop recording rather than fail the step
        g_trace.full = true;
        g_trace.full_ns = st_now_ns();
        return false;
    }
    v->p = p;
    v->cap = cap;
    return true;
}

static trace_event_t *events(void)
{
    return g_trace.ev.p;
}

static size_t *indices(vec_t *v)
{
    return v->p;
}

strata_status_t strata_trace_open(const char *path, int pid)
{
    if (!path || g_trace.open)
        return st_error(STRATA_ERR_INVALID_ARG, "trace: %s", path ? "already open" : "path is NULL");
    g_trace.path = strdup(path);
    if (!g_trace.path)
        return st_error(STRATA_ERR_NO_MEMORY, "trace: out of memory");
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    g_trace.t0_ns = st_now_ns();
    g_trace.real0_ns = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
    g_trace.pid = pid;
    g_trace.open = true;
    return STRATA_OK;
}

bool strata_trace_enabled(void)
{
    return g_trace.open;
}

/* Appends an event (and its arguments); its index, or -1 when not recording. */
static long record(char ph, const char *cat, const char *name, uint64_t id,
                   const strata_trace_arg_t *args, int nargs)
{
    if (!g_trace.open || g_trace.full)
        return -1;
    nargs = args ? ST_MIN(ST_MAX(nargs, 0), STRATA_TRACE_MAX_ARGS) : 0;
    if (!vec_reserve(&g_trace.ev, sizeof(trace_event_t), 1) ||
        !vec_reserve(&g_trace.arg, sizeof(strata_trace_arg_t), (size_t)nargs))
        return -1;
    if (nargs > 0)
        memcpy((strata_trace_arg_t *)g_trace.arg.p + g_trace.arg.n, args,
               (size_t)nargs * sizeof *args);
    events()[g_trace.ev.n] = (trace_event_t){cat, name, st_now_ns(), id, g_trace.arg.n, nargs,
                                             this_tid(), ph, false};
    g_trace.arg.n += (size_t)nargs;
    return (long)g_trace.ev.n++;
}

static void begin(char ph, const char *cat, const char *name, uint64_t id,
                  const strata_trace_arg_t *args, int nargs)
{
    vec_t *open = ph == 'B' ? &g_trace.open_sync : &g_trace.open_async;
    if (!g_trace.open || g_trace.full || !vec_reserve(open, sizeof(size_t), 1))
        return;
    long i = record(ph, cat, name, id, args, nargs);
    if (i >= 0)
        indices(open)[open->n++] = (size_t)i;
}

/* Removes from the open list the begin that an end (ph, cat, id) on this thread closes: a thread's
 * latest open 'B', or the 'b' of (cat, id). False when there is none (the span began before the
 * trace was opened). */
static bool take_open(char ph, const char *cat, uint64_t id)
{
    vec_t *open = ph == 'E' ? &g_trace.open_sync : &g_trace.open_async;
    size_t *o = indices(open);
    for (size_t k = open->n; k-- > 0;) {
        const trace_event_t *b = &events()[o[k]];
        bool match = ph == 'E' ? b->tid == this_tid() : b->id == id && !strcmp(b->cat, cat);
        if (match) {
            memmove(o + k, o + k + 1, (open->n - k - 1) * sizeof *o);
            open->n--;
            return true;
        }
    }
    return false;
}

static void end(char ph, const char *cat, const char *name, uint64_t id)
{
    if (g_trace.open && !g_trace.full && take_open(ph, cat, id))
        record(ph, cat, name, id, NULL, 0);
}

void strata_trace_begin(const char *cat, const char *name)
{
    begin('B', cat, name, 0, NULL, 0);
}

void strata_trace_begin_args(const char *cat, const char *name, const strata_trace_arg_t *args,
                             int nargs)
{
    begin('B', cat, name, 0, args, nargs);
}

void strata_trace_end(const char *cat, const char *name)
{
    end('E', cat, name, 0);
}

void strata_trace_async_begin(const char *cat, const char *name, uint64_t id)
{
    begin('b', cat, name, id, NULL, 0);
}

void strata_trace_async_begin_args(const char *cat, const char *name, uint64_t id,
                                   const strata_trace_arg_t *args, int nargs)
{
    begin('b', cat, name, id, args, nargs);
}

void strata_trace_async_end(const char *cat, const char *name, uint64_t id)
{
    end('e', cat, name, id);
}

/* ---- writing ------------------------------------------------------------------------------------ */

/* Microseconds on the common clock, exactly: "<us>.<ns>". */
static void put_ts(FILE *f, uint64_t mono_ns)
{
    uint64_t ns = g_trace.real0_ns + (mono_ns - g_trace.t0_ns);
    fprintf(f, "\"ts\":%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
}

static void put_args(FILE *f, const trace_event_t *e)
{
    if (!e->nargs && !e->at_close)
        return;
    fputs(",\"args\":{", f);
    const strata_trace_arg_t *a = (const strata_trace_arg_t *)g_trace.arg.p + e->args;
    for (int i = 0; i < e->nargs; i++) {
        if (i)
            fputc(',', f);
        st_json_write_string(f, a[i].key ? a[i].key : "?");
        fputc(':', f);
        if (a[i].str)
            st_json_write_string(f, a[i].str);
        else if (isfinite(a[i].num))
            fprintf(f, "%.15g", a[i].num);
        else
            fputs("null", f);
    }
    if (e->at_close)
        fprintf(f, "%s\"closed_at_close\":true", e->nargs ? "," : "");
    fputc('}', f);
}

static void put_event(FILE *f, const trace_event_t *e)
{
    fprintf(f, ",\n{\"ph\":\"%c\",\"cat\":", e->ph);
    st_json_write_string(f, e->cat ? e->cat : "");
    fputs(",\"name\":", f);
    st_json_write_string(f, e->name ? e->name : "");
    fprintf(f, ",\"pid\":%d,\"tid\":%d,", g_trace.pid, e->tid);
    put_ts(f, e->ts_ns);
    if (e->ph == 'b' || e->ph == 'e')
        fprintf(f, ",\"id\":\"0x%" PRIx64 "\"", e->id);
    put_args(f, e);
    fputc('}', f);
}

/* The metadata: the process's name, order and host, each recording thread's name. */
static void put_metadata(FILE *f, const char *host)
{
    int pid = g_trace.pid;
    fprintf(f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,"
               "\"args\":{\"name\":\"rank %d\"}},\n", pid, pid);
    fprintf(f, "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"tid\":0,"
               "\"args\":{\"sort_index\":%d}},\n", pid, pid);
    fprintf(f, "{\"ph\":\"M\",\"name\":\"process_labels\",\"pid\":%d,\"tid\":0,\"args\":{"
               "\"labels\":", pid);
    st_json_write_string(f, host);
    fputs("}}", f);
    const trace_event_t *ev = events();
    for (size_t i = 0; i < g_trace.ev.n; i++) {
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = ev[j].tid == ev[i].tid;
        if (seen)
            continue;
        char name[32];
        if (ev[i].tid == (int)getpid())
            snprintf(name, sizeof name, "main");
        else
            snprintf(name, sizeof name, "thread %d", ev[i].tid);
        fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,"
                   "\"args\":{\"name\":\"%s\"}}", pid, ev[i].tid, name);
    }
}

/* Ends every span still open (innermost first) at `ts`, as events after the others. */
static void put_closing_ends(FILE *f, uint64_t ts)
{
    vec_t *lists[2] = {&g_trace.open_sync, &g_trace.open_async};
    for (int l = 0; l < 2; l++) {
        const size_t *o = indices(lists[l]);
        for (size_t k = lists[l]->n; k-- > 0;) {
            trace_event_t e = events()[o[k]];
            e.ph = e.ph == 'B' ? 'E' : 'e';
            e.ts_ns = ts;
            e.nargs = 0;
            e.at_close = true;
            put_event(f, &e);
        }
    }
}

static strata_status_t write_file(void)
{
    uint64_t end_ns = g_trace.full ? g_trace.full_ns : st_now_ns();
    FILE *f = fopen(g_trace.path, "w");
    if (!f)
        return st_error_errno(STRATA_ERR_IO, errno, "trace: cannot write %s", g_trace.path);
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "?");
    fputs("{\"traceEvents\": [\n", f);
    put_metadata(f, host);
    for (size_t i = 0; i < g_trace.ev.n; i++)
        put_event(f, &events()[i]);
    put_closing_ends(f, end_ns);
    fprintf(f, "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"clock\": \"realtime_us\", "
               "\"pid\": %d, \"host\": ", g_trace.pid);
    st_json_write_string(f, host);
    fprintf(f, ", \"truncated\": %s}}\n", g_trace.full ? "true" : "false");
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad)
        return st_error(STRATA_ERR_IO, "trace: cannot write %s", g_trace.path);
    return STRATA_OK;
}

strata_status_t strata_trace_close(void)
{
    if (!g_trace.open)
        return STRATA_OK;
    strata_status_t rc = write_file();
    free(g_trace.path);
    free(g_trace.ev.p);
    free(g_trace.arg.p);
    free(g_trace.open_sync.p);
    free(g_trace.open_async.p);
    memset(&g_trace, 0, sizeof g_trace);
    return rc;
}
