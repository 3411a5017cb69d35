/* A diagnosis as JSON, for `strata diagnose --json`: the verdict, then each rank's dump (or null)
 * and the launcher's observation of it (or null), the ranks without a dump, and the files that
 * could not be read. Field names follow the dumps' own, so a reader of one knows the other.
 */
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "strata/launch.h"

static const char *basis_name(strata_verdict_basis_t b)
{
    static const char *const names[] = {"none", "signal", "stopped", "dumps", "no_dump", "exit"};
    return (unsigned)b < sizeof names / sizeof names[0] ? names[b] : "none";
}

static const char *state_name(int s)
{
    return s == STRATA_FLIGHT_DONE ? "done" : s == STRATA_FLIGHT_FAILED ? "failed" : "started";
}

static json_object *dump_json(const strata_rank_dump_t *r)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "pid", json_object_new_int(r->pid));
    json_object_object_add(o, "host", json_object_new_string(r->host));
    json_object_object_add(o, "status", json_object_new_string(r->status));
    json_object_object_add(o, "error", json_object_new_string(r->error));
    json_object_object_add(o, "culprit", json_object_new_int(r->culprit));
    json_object_object_add(o, "completed", json_object_new_int64(r->completed));
    json_object *fl = json_object_new_array();
    for (int i = 0; i < r->nflight; i++) {
        const strata_flight_op_t *f = &r->flight[i];
        json_object *e = json_object_new_object();
        json_object_object_add(e, "ctx", json_object_new_int64(f->ctx));
        json_object_object_add(e, "seq", json_object_new_int64(f->seq));
        json_object_object_add(e, "op", json_object_new_string(f->op));
        json_object_object_add(e, "algo", json_object_new_string(f->algo));
        json_object_object_add(e, "bytes", json_object_new_int64(f->bytes));
        json_object_object_add(e, "state", json_object_new_string(state_name(f->state)));
        json_object_object_add(e, "ms", json_object_new_double(f->ms));
        json_object_array_add(fl, e);
    }
    json_object_object_add(o, "flight", fl);
    return o;
}

static json_object *obs_json(const strata_rank_obs_t *b)
{
    json_object *o = json_object_new_object();
    const char *end = b->end == STRATA_RANK_EXITED     ? "exit"
                      : b->end == STRATA_RANK_SIGNALED ? "signal"
                                                       : "unknown";
    json_object_object_add(o, "pid", json_object_new_int(b->pid));
    json_object_object_add(o, "end", json_object_new_string(end));
    json_object_object_add(o, "status", json_object_new_int(b->status));
    json_object_object_add(o, "by_launcher", json_object_new_boolean(b->by_launcher));
    json_object_object_add(o, "stopped", json_object_new_boolean(b->stopped));
    json_object_object_add(o, "order", json_object_new_int(b->order));
    return o;
}

char *strata_diag_to_json(const strata_diag_t *d, const strata_verdict_t *v)
{
    json_object *root = json_object_new_object();
    json_object_object_add(root, "dir", json_object_new_string(d->dir));
    json_object_object_add(root, "nranks", json_object_new_int(d->nranks));
    json_object *vj = json_object_new_object();
    json_object_object_add(vj, "rank", json_object_new_int(v->rank));
    json_object_object_add(vj, "pid", json_object_new_int(v->pid));
    json_object_object_add(vj, "basis", json_object_new_string(basis_name(v->basis)));
    json_object_object_add(vj, "blamed_by", json_object_new_int(v->blamed_by));
    json_object_object_add(vj, "exit_code", json_object_new_int(v->exit_code));
    json_object_object_add(vj, "text", json_object_new_string(v->text));
    json_object_object_add(root, "verdict", vj);
    json_object *ranks = json_object_new_array(), *missing = json_object_new_array();
    for (int r = 0; r < d->nranks; r++) {
        json_object *e = json_object_new_object();
        json_object_object_add(e, "rank", json_object_new_int(r));
        const strata_rank_dump_t *dump = d->dumps ? d->dumps[r] : NULL;
        json_object_object_add(e, "dump", dump ? dump_json(dump) : NULL);
        json_object_object_add(e, "launcher", d->obs ? obs_json(&d->obs[r]) : NULL);
        json_object_array_add(ranks, e);
        if (!dump)
            json_object_array_add(missing, json_object_new_int(r));
    }
    json_object_object_add(root, "ranks", ranks);
    json_object_object_add(root, "no_dump", missing);
    json_object *probs = json_object_new_array();
    for (int i = 0; i < d->nproblems; i++)
        json_object_array_add(probs, json_object_new_string(d->problems[i]));
    json_object_object_add(root, "problems", probs);
    const char *s = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
                                                             JSON_C_TO_STRING_NOSLASHESCAPE);
    char *out = s ? strdup(s) : NULL;
    json_object_put(root);
    return out;
}
