/* Reading a failed job's directory: the dumps the communicator writes at each rank's first failure
 * (rank<r>.json, see src/comm/endpoint.c dump_diag) and the launcher's observations (launch.json,
 * written here too). A malformed file is a problem to report, not a reason to stop: the others are
 * still read, because a post-mortem is most needed when something went badly wrong. Deciding who is
 * to blame is verdict.c's job.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "base/json.h"
#include "strata/launch.h"

#define DIAG_MAX_RANKS (1 << 20)

static void add_problem(strata_diag_t *d, const char *fmt, ...) ST_PRINTF(2, 3);
static void add_problem(strata_diag_t *d, const char *fmt, ...)
{
    char **p = realloc(d->problems, (size_t)(d->nproblems + 1) * sizeof *p);
    if (!p)
        return;
    d->problems = p;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&p[d->nproblems], fmt, ap) >= 0)
        d->nproblems++;
    va_end(ap);
}

/* A 64-bit integer field (json-c's int), required. */
static strata_status_t get_int64(const st_json_doc_t *doc, json_object *obj, const char *key,
                                 int nth, long long lo, long long *out)
{
    json_object *v;
    int line = st_json_key_line(doc, key, nth);
    if (!json_object_object_get_ex(obj, key, &v))
        return st_error(STRATA_ERR_PARSE, "%s: expected a field \"%s\" (an integer)", doc->origin,
                        key);
    if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < lo)
        return st_error(STRATA_ERR_PARSE, "%s:%d: expected an integer >= %lld for \"%s\"",
                        doc->origin, line, lo, key);
    *out = json_object_get_int64(v);
    return STRATA_OK;
}

static strata_status_t parse_flight(const st_json_doc_t *doc, json_object *arr,
                                    strata_rank_dump_t *r)
{
    size_t n = json_object_array_length(arr);
    r->flight = n ? calloc(n, sizeof *r->flight) : NULL;
    if (n && !r->flight)
        return st_error(STRATA_ERR_NO_MEMORY, "%s: out of memory", doc->origin);
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(arr, i);
        int nth = (int)i; // every entry has each key once, so the i-th "seq" is entry i's
        if (!json_object_is_type(e, json_type_object))
            return st_error(STRATA_ERR_PARSE, "%s:%d: expected an object for flight entry %zu",
                            doc->origin, st_json_key_line(doc, "flight", 0), i);
        strata_flight_op_t *f = &r->flight[i];
        char state[16] = "";
        ST_TRY(get_int64(doc, e, "ctx", nth, 0, &f->ctx));
        ST_TRY(get_int64(doc, e, "seq", nth, 0, &f->seq));
        ST_TRY(st_json_get_string(doc, e, "op", nth, true, f->op, sizeof f->op));
        ST_TRY(st_json_get_string(doc, e, "algo", nth, false, f->algo, sizeof f->algo));
        ST_TRY(get_int64(doc, e, "bytes", nth, 0, &f->bytes));
        ST_TRY(st_json_get_string(doc, e, "state", nth, true, state, sizeof state));
        f->ms = -1;
        ST_TRY(st_json_get_double(doc, e, "ms", nth, false, -1, 1e300, &f->ms));
        if (!strcmp(state, "started"))
            f->state = STRATA_FLIGHT_STARTED;
        else if (!strcmp(state, "done"))
            f->state = STRATA_FLIGHT_DONE;
        else if (!strcmp(state, "failed"))
            f->state = STRATA_FLIGHT_FAILED;
        else
            return st_error(STRATA_ERR_PARSE,
                            "%s:%d: expected \"started\", \"done\" or \"failed\" for \"state\", "
                            "got \"%s\"",
                            doc->origin, st_json_key_line(doc, "state", nth), state);
        r->nflight++;
    }
    return STRATA_OK;
}

static void dump_free(strata_rank_dump_t *r)
{
    if (r)
        free(r->flight);
    free(r);
}

/* Parses one dump; `file_rank` is the r of its name rank<r>.json. */
static strata_status_t parse_dump(const char *path, int file_rank, strata_rank_dump_t **out)
{
    *out = NULL;
    st_json_doc_t doc;
    ST_TRY(st_json_load_file(path, &doc));
    strata_rank_dump_t *r = calloc(1, sizeof *r);
    strata_status_t rc = STRATA_OK;
    if (!r) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "%s: out of memory", path);
        goto out;
    }
    json_object *o = doc.root, *flight;
    long long completed = 0;
    ST_TRY_GOTO(st_json_get_int(&doc, o, "rank", 0, true, 0, DIAG_MAX_RANKS - 1, &r->rank), rc,
                out);
    ST_TRY_GOTO(st_json_get_int(&doc, o, "nranks", 0, true, 1, DIAG_MAX_RANKS, &r->nranks), rc,
                out);
    ST_TRY_GOTO(st_json_get_string(&doc, o, "host", 0, true, r->host, sizeof r->host), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, o, "pid", 0, true, 0, INT32_MAX, &r->pid), rc, out);
    ST_TRY_GOTO(st_json_get_string(&doc, o, "status", 0, true, r->status, sizeof r->status), rc,
                out);
    ST_TRY_GOTO(st_json_get_string(&doc, o, "error", 0, true, r->error, sizeof r->error), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, o, "culprit", 0, true, -1, DIAG_MAX_RANKS - 1, &r->culprit),
                rc, out);
    ST_TRY_GOTO(get_int64(&doc, o, "completed", 0, 0, &completed), rc, out);
    r->completed = completed;
    if (!json_object_object_get_ex(o, "flight", &flight) ||
        !json_object_is_type(flight, json_type_array)) {
        rc = st_error(STRATA_ERR_PARSE, "%s:%d: expected an array for \"flight\"", path,
                      st_json_key_line(&doc, "flight", 0));
        goto out;
    }
    ST_TRY_GOTO(parse_flight(&doc, flight, r), rc, out);
    if (r->rank != file_rank) {
        rc = st_error(STRATA_ERR_PARSE,
                      "%s:%d: expected \"rank\": %d (as the file's name says), got %d", path,
                      st_json_key_line(&doc, "rank", 0), file_rank, r->rank);
        goto out;
    }
    if (r->rank >= r->nranks || r->culprit >= r->nranks) {
        rc = st_error(STRATA_ERR_PARSE,
                      "%s: expected \"rank\" and \"culprit\" below \"nranks\" (%d)", path,
                      r->nranks);
        goto out;
    }
    *out = r;
    r = NULL;
out:
    dump_free(r);
    st_json_free(&doc);
    return rc;
}

/* Reads launch.json into d->obs (d->nranks from it). */
static strata_status_t parse_obs(const char *path, strata_diag_t *d)
{
    st_json_doc_t doc;
    ST_TRY(st_json_load_file(path, &doc));
    strata_status_t rc = STRATA_OK;
    json_object *ranks;
    int n = 0;
    ST_TRY_GOTO(st_json_get_int(&doc, doc.root, "nranks", 0, true, 1, DIAG_MAX_RANKS, &n), rc, out);
    if (d->nranks && n != d->nranks) {
        rc = st_error(STRATA_ERR_PARSE, "%s:%d: expected \"nranks\": %d (the job's size), got %d",
                      path, st_json_key_line(&doc, "nranks", 0), d->nranks, n);
        goto out;
    }
    if (!json_object_object_get_ex(doc.root, "ranks", &ranks) ||
        !json_object_is_type(ranks, json_type_array) || (int)json_object_array_length(ranks) != n) {
        rc = st_error(STRATA_ERR_PARSE, "%s:%d: expected an array of %d entries for \"ranks\"",
                      path, st_json_key_line(&doc, "ranks", 0), n);
        goto out;
    }
    strata_rank_obs_t *obs = calloc((size_t)n, sizeof *obs);
    if (!obs) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "%s: out of memory", path);
        goto out;
    }
    for (int i = 0; i < n && rc == STRATA_OK; i++) {
        json_object *e = json_object_array_get_idx(ranks, (size_t)i);
        strata_rank_obs_t *b = &obs[i];
        char end[16] = "";
        if (!json_object_is_type(e, json_type_object)) {
            rc = st_error(STRATA_ERR_PARSE, "%s: expected an object for ranks[%d]", path, i);
            break;
        }
        rc = st_json_get_int(&doc, e, "pid", i, true, 0, INT32_MAX, &b->pid);
        if (rc == STRATA_OK)
            rc = st_json_get_string(&doc, e, "end", i, true, end, sizeof end);
        if (rc == STRATA_OK)
            rc = st_json_get_int(&doc, e, "status", i, true, 0, 255, &b->status);
        if (rc == STRATA_OK)
            rc = st_json_get_bool(&doc, e, "by_launcher", i, true, &b->by_launcher);
        if (rc == STRATA_OK)
            rc = st_json_get_bool(&doc, e, "stopped", i, true, &b->stopped);
        if (rc == STRATA_OK)
            rc = st_json_get_int(&doc, e, "order", i, true, 0, DIAG_MAX_RANKS, &b->order);
        if (rc != STRATA_OK)
            break;
        if (!strcmp(end, "exit"))
            b->end = STRATA_RANK_EXITED;
        else if (!strcmp(end, "signal"))
            b->end = STRATA_RANK_SIGNALED;
        else if (!strcmp(end, "unknown"))
            b->end = STRATA_RANK_UNKNOWN;
        else
            rc = st_error(
                STRATA_ERR_PARSE,
                "%s:%d: expected \"exit\", \"signal\" or \"unknown\" for \"end\", got \"%s\"", path,
                st_json_key_line(&doc, "end", i), end);
    }
    if (rc == STRATA_OK) {
        d->obs = obs;
        d->nranks = n;
    } else {
        free(obs);
    }
out:
    st_json_free(&doc);
    return rc;
}

/* r from "rank<r>.json", or -1 for any other name. */
static int dump_file_rank(const char *name)
{
    if (strncmp(name, "rank", 4) != 0)
        return -1;
    const char *p = name + 4;
    long r = 0;
    if (*p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        r = r * 10 + (*p - '0');
        if (r >= DIAG_MAX_RANKS)
            return -1;
    }
    return strcmp(p, ".json") ? -1 : (int)r;
}

strata_status_t strata_diag_load(const char *dir, int nranks, strata_diag_t **out)
{
    *out = NULL;
    DIR *dh = opendir(dir);
    if (!dh)
        return st_error_errno(STRATA_ERR_IO, errno, "cannot read the dump directory %s", dir);
    strata_diag_t *d = calloc(1, sizeof *d);
    if (!d) {
        closedir(dh);
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
    }
    snprintf(d->dir, sizeof d->dir, "%s", dir);
    d->nranks = nranks > 0 ? nranks : 0;
    char path[2048];
    snprintf(path, sizeof path, "%s/launch.json", dir);
    if (access(path, F_OK) == 0 && parse_obs(path, d) != STRATA_OK)
        add_problem(d, "%s", strata_last_error());

    // Read every dump first: the job's size comes from them when launch.json is absent.
    strata_rank_dump_t **got = NULL;
    int ngot = 0;
    struct dirent *de;
    while ((de = readdir(dh)) != NULL) {
        int r = dump_file_rank(de->d_name);
        if (r < 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        strata_rank_dump_t *dump;
        if (parse_dump(path, r, &dump) != STRATA_OK) {
            add_problem(d, "%s", strata_last_error());
            continue;
        }
        strata_rank_dump_t **g = realloc(got, (size_t)(ngot + 1) * sizeof *g);
        if (!g) {
            dump_free(dump);
            break;
        }
        got = g;
        got[ngot++] = dump;
    }
    closedir(dh);

    // Without launch.json, the job's size is what most dumps say (a stray dump of another job
    // must not decide it).
    int n = d->nranks, best = 0;
    for (int i = 0; n == 0 && i < ngot; i++) {
        int votes = 0;
        for (int k = 0; k < ngot; k++)
            votes += got[k]->nranks == got[i]->nranks;
        if (votes > best) {
            best = votes;
            d->nranks = got[i]->nranks;
        }
    }
    n = d->nranks;
    d->nranks = n;
    d->dumps = n ? calloc((size_t)n, sizeof *d->dumps) : NULL;
    for (int i = 0; i < ngot; i++) {
        strata_rank_dump_t *r = got[i];
        if (!d->dumps || r->nranks != n) {
            add_problem(d, "%s/rank%d.json: expected \"nranks\": %d (the job's size), got %d", dir,
                        r->rank, n, r->nranks);
            dump_free(r);
            continue;
        }
        d->dumps[r->rank] = r;
    }
    free(got);
    *out = d;
    return STRATA_OK;
}

void strata_diag_free(strata_diag_t *d)
{
    if (!d)
        return;
    for (int i = 0; d->dumps && i < d->nranks; i++)
        dump_free(d->dumps[i]);
    free(d->dumps);
    free(d->obs);
    for (int i = 0; i < d->nproblems; i++)
        free(d->problems[i]);
    free(d->problems);
    free(d);
}

static const char *end_name(int end)
{
    return end == STRATA_RANK_EXITED ? "exit" : end == STRATA_RANK_SIGNALED ? "signal" : "unknown";
}

strata_status_t strata_diag_save_obs(const char *dir, const char *job_id, int nranks,
                                     const strata_rank_obs_t *obs, const char *verdict)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "job_id", json_object_new_string(job_id ? job_id : ""));
    json_object_object_add(o, "nranks", json_object_new_int(nranks));
    json_object_object_add(o, "verdict", json_object_new_string(verdict ? verdict : ""));
    json_object *arr = json_object_new_array();
    for (int r = 0; r < nranks; r++) {
        json_object *e = json_object_new_object();
        json_object_object_add(e, "rank", json_object_new_int(r));
        json_object_object_add(e, "pid", json_object_new_int(obs[r].pid));
        json_object_object_add(e, "end", json_object_new_string(end_name(obs[r].end)));
        json_object_object_add(e, "status", json_object_new_int(obs[r].status));
        json_object_object_add(e, "by_launcher", json_object_new_boolean(obs[r].by_launcher));
        json_object_object_add(e, "stopped", json_object_new_boolean(obs[r].stopped));
        json_object_object_add(e, "order", json_object_new_int(obs[r].order));
        json_object_array_add(arr, e);
    }
    json_object_object_add(o, "ranks", arr);
    char path[2048], tmp[2100];
    snprintf(path, sizeof path, "%s/launch.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    strata_status_t rc = STRATA_OK;
    if (json_object_to_file_ext(tmp, o, JSON_C_TO_STRING_PRETTY) != 0 || rename(tmp, path) != 0) {
        rc = st_error_errno(STRATA_ERR_IO, errno, "cannot write %s", path);
        unlink(tmp);
    }
    json_object_put(o);
    return rc;
}
