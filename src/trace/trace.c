/* The trace recorder behind include/strata/trace.h: an in-memory array of events, written as
 * Chrome trace-event JSON at close. It does not interpret spans (overlap analysis reads the file). */
#include "strata/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

typedef struct trace_event {
    const char *cat;
    const char *name;
    uint64_t ts_ns;
    uint64_t id;
    char ph; /* 'B', 'E', 'b', 'e' */
} trace_event_t;

static struct {
    bool open;
    char *path;
    int pid;
    uint64_t t0_ns;
    trace_event_t *ev;
    size_t n, cap;
} g_trace;

strata_status_t strata_trace_open(const char *path, int pid) {
    if (!path || g_trace.open)
        return st_error(STRATA_ERR_INVALID_ARG, "trace: %s",
                        path ? "already open" : "path is NULL");
    g_trace.path = strdup(path);
    if (!g_trace.path) return st_error(STRATA_ERR_NO_MEMORY, "trace: out of memory");
    g_trace.pid = pid;
    g_trace.t0_ns = st_now_ns();
    g_trace.n = 0;
    g_trace.open = true;
    return STRATA_OK;
}

bool strata_trace_enabled(void) { return g_trace.open; }

static void trace_record(char ph, const char *cat, const char *name, uint64_t id) {
    if (!g_trace.open) return;
    if (g_trace.n == g_trace.cap) {
        size_t cap = g_trace.cap ? 2 * g_trace.cap : 4096;
        trace_event_t *ev = realloc(g_trace.ev, cap * sizeof *ev);
        if (!ev) return; /* a trace is best effort: drop the event rather than fail the step */
        g_trace.ev = ev;
        g_trace.cap = cap;
    }
    g_trace.ev[g_trace.n++] = (trace_event_t){cat, name, st_now_ns(), id, ph};
}

void strata_trace_begin(const char *cat, const char *name) { trace_record('B', cat, name, 0); }
void strata_trace_end(const char *cat, const char *name) { trace_record('E', cat, name, 0); }
void strata_trace_async_begin(const char *cat, const char *name, uint64_t id) {
    trace_record('b', cat, name, id);
}
void strata_trace_async_end(const char *cat, const char *name, uint64_t id) {
    trace_record('e', cat, name, id);
}

strata_status_t strata_trace_close(void) {
    if (!g_trace.open) return STRATA_OK;
    g_trace.open = false;
    strata_status_t rc = STRATA_OK;
    FILE *f = fopen(g_trace.path, "w");
    if (!f) {
        rc = st_error(STRATA_ERR_IO, "trace: cannot write %s", g_trace.path);
    } else {
        fputs("{\"traceEvents\": [\n", f);
        for (size_t i = 0; i < g_trace.n; i++) {
            const trace_event_t *e = &g_trace.ev[i];
            fprintf(f, "%s{\"ph\":\"%c\",\"cat\":\"%s\",\"name\":\"%s\",\"pid\":%d,\"tid\":0,"
                       "\"ts\":%.3f",
                    i ? ",\n" : "", e->ph, e->cat, e->name, g_trace.pid,
                    (double)(e->ts_ns - g_trace.t0_ns) / 1e3);
            if (e->ph == 'b' || e->ph == 'e') fprintf(f, ",\"id\":\"0x%llx\"", (unsigned long long)e->id);
            fputc('}', f);
        }
        fputs("\n]}\n", f);
        if (fclose(f) != 0) rc = st_error(STRATA_ERR_IO, "trace: cannot write %s", g_trace.path);
    }
    free(g_trace.path);
    free(g_trace.ev);
    memset(&g_trace, 0, sizeof g_trace);
    return rc;
}
