/* Algorithm selection: the STRATA_COMM_ALGO override, else the lowest cost in the network model.
 * STRATA_COMM_ALGO is a comma list of coll:algo pairs ("allreduce:ring,bcast:binomial"). */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "comm/algo/algo.h"

static const st_algo_t *forced(const st_coll_args_t *a)
{
    const char *spec = st_knob_str("STRATA_COMM_ALGO");
    const char *coll = strata_coll_name(a->coll);
    size_t cl = strlen(coll);
    for (const char *p = spec; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > cl && strncmp(p, coll, cl) == 0 && p[cl] == ':') {
            const char *name = p + cl + 1;
            size_t nl = len - cl - 1;
            for (int i = 0; i < st_nalgos; i++) {
                const st_algo_t *al = st_algos[i];
                if (al->coll == a->coll && strlen(al->name) == nl && !strncmp(al->name, name, nl)) {
                    if (!al->supports || al->supports(a))
                        return al;
                    ST_LOG_WARN(ST_SUB_COMM, "STRATA_COMM_ALGO: %s:%s cannot serve this call; choosing by cost",
                                coll, al->name);
                    return NULL;
                }
            }
            ST_LOG_WARN(ST_SUB_COMM, "STRATA_COMM_ALGO: no %s algorithm named '%.*s' (see `strata algos`)",
                        coll, (int)nl, name);
        }
        p = end ? end + 1 : NULL;
    }
    return NULL;
}

const st_algo_t *st_algo_select(const st_coll_args_t *a, size_t bytes, const strata_link_t *link)
{
    const st_algo_t *f = forced(a);
    if (f)
        return f;
    const st_algo_t *best = NULL;
    double best_cost = 0;
    for (int i = 0; i < st_nalgos; i++) {
        const st_algo_t *al = st_algos[i];
        if (al->coll != a->coll || (al->supports && !al->supports(a)))
            continue;
        double c = strata_netmodel_cost(a->coll, al->model, a->nranks, (double)bytes, link);
        if (c < 0)
            continue;
        if (!best || c < best_cost) {
            best = al;
            best_cost = c;
        }
    }
    return best;
}
