/* strata_trace_merge: several processes' trace files (trace.c, one per rank, all on the common
 * clock) into one timeline of the job. Events are copied as they are, only their timestamps shifted
 * so the job starts at 0; nothing is re-paired or re-ordered (each input already pairs its own). */
#include "strata/trace.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/json.h"

/* The input's events array, checked to be on the common clock; its pid in *pid. */
static strata_status_t check_input(const st_json_doc_t *d, json_object **events, int *pid)
{
    json_object *other, *clock, *p;
    if (!json_object_is_type(d->root, json_type_object) ||
        !json_object_object_get_ex(d->root, "traceEvents", events) ||
        !json_object_is_type(*events, json_type_array))
        return st_error(STRATA_ERR_PARSE, "%s:1: expected a Chrome trace, an object with a "
                        "\"traceEvents\" array", d->origin);
    if (!json_object_object_get_ex(d->root, "otherData", &other) ||
        !json_object_object_get_ex(other, "clock", &clock) ||
        strcmp(json_object_get_string(clock), "realtime_us") != 0 ||
        !json_object_object_get_ex(other, "pid", &p) || !json_object_is_type(p, json_type_int))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: not on the job-wide clock (no otherData "
                        "{\"clock\": \"realtime_us\", \"pid\": N}: written by an older strata or "
                        "another tool); its events would land at the wrong times", d->origin);
    *pid = json_object_get_int(p);
    return STRATA_OK;
}

/* A timestamp in nanoseconds, exactly from the "<us>.<ns>" text trace.c writes (json-c keeps a
 * number's text; a double would round a time since the epoch to 0.25 us). */
static uint64_t ts_ns(json_object *ts)
{
    const char *s = json_object_get_string(ts);
    char *end;
    uint64_t us = strtoull(s, &end, 10), ns = 0;
    int k = 0;
    if (*end == '.')
        for (end++; *end >= '0' && *end <= '9'; end++)
            if (k++ < 3)
                ns = 10 * ns + (uint64_t)(*end - '0');
    for (; k < 3; k++)
        ns *= 10;
    if (*end || !(*s >= '0' && *s <= '9')) // another form ("1e3", negative): through a double
        return (uint64_t)llround(fmax(json_object_get_double(ts), 0) * 1e3);
    return us * 1000 + ns;
}

/* The earliest timestamp of the events that have one (metadata has none). */
static uint64_t first_ts(json_object *events, uint64_t t)
{
    for (size_t i = 0; i < json_object_array_length(events); i++) {
        json_object *ts, *e = json_object_array_get_idx(events, i);
        if (json_object_object_get_ex(e, "ts", &ts))
            t = ST_MIN(t, ts_ns(ts));
    }
    return t;
}

static strata_status_t write_merged(json_object **events, int n, uint64_t origin,
                                    const char *out)
{
    FILE *f = fopen(out, "w");
    if (!f)
        return st_error_errno(STRATA_ERR_IO, errno, "trace merge: cannot write %s", out);
    fputs("{\"traceEvents\": [", f);
    bool first = true;
    for (int k = 0; k < n; k++) {
        for (size_t i = 0; i < json_object_array_length(events[k]); i++) {
            json_object *ts, *e = json_object_array_get_idx(events[k], i);
            if (json_object_object_get_ex(e, "ts", &ts)) {
                char txt[48];
                uint64_t v = ts_ns(ts) - origin;
                snprintf(txt, sizeof txt, "%" PRIu64 ".%03u", v / 1000, (unsigned)(v % 1000));
                json_object_object_add(e, "ts", json_object_new_double_s((double)v / 1e3, txt));
            }
            fprintf(f, "%s\n%s", first ? "" : ",",
                    json_object_to_json_string_ext(e, JSON_C_TO_STRING_PLAIN |
                                                          JSON_C_TO_STRING_NOSLASHESCAPE));
            first = false;
        }
    }
    fprintf(f, "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"clock\": \"realtime_us\", "
               "\"origin_us\": %" PRIu64 ".%03u, \"merged\": %d}}\n", origin / 1000,
            (unsigned)(origin % 1000), n);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad)
        return st_error(STRATA_ERR_IO, "trace merge: cannot write %s", out);
    return STRATA_OK;
}

strata_status_t strata_trace_merge(const char *const *paths, int n, const char *out)
{
    if (n < 1 || !paths || !out)
        return st_error(STRATA_ERR_INVALID_ARG, "trace merge: no input files or no output");
    st_json_doc_t *doc = calloc((size_t)n, sizeof *doc);
    json_object **events = calloc((size_t)n, sizeof *events);
    int *pid = calloc((size_t)n, sizeof *pid);
    strata_status_t rc = STRATA_OK;
    if (!doc || !events || !pid) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "trace merge: out of memory");
        goto out;
    }
    uint64_t origin = UINT64_MAX;
    for (int k = 0; k < n; k++) {
        ST_TRY_GOTO(st_json_load_file(paths[k], &doc[k]), rc, out);
        ST_TRY_GOTO(check_input(&doc[k], &events[k], &pid[k]), rc, out);
        for (int j = 0; j < k; j++)
            if (pid[j] == pid[k]) {
                rc = st_error(STRATA_ERR_INVALID_ARG, "trace merge: %s and %s both hold process %d "
                              "(rank %d): traces of different runs, or one file given twice",
                              paths[j], paths[k], pid[k], pid[k]);
                goto out;
            }
        origin = first_ts(events[k], origin);
    }
    rc = write_merged(events, n, origin == UINT64_MAX ? 0 : origin, out);
out:
    for (int k = 0; doc && k < n; k++)
        st_json_free(&doc[k]);
    free(doc);
    free(events);
    free(pid);
    return rc;
}
