/* Algorithm selection: the STRATA_COMM_ALGO override, else the lowest cost in the network model.
 * STRATA_COMM_ALGO is a comma list of coll:algo pairs ("allreduce:ring,bcast:binomial").
 * When the communicator spans several units of its fabric, algorithms with a transfer plan are
 * priced on the fabric (flows sharing links) and the others on the flat link. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "comm/algo/algo.h"

/* STRATA_COMM_ALGO parsed once: the forced algorithm per collective (NULL = choose by cost). Knobs
 * are read on first use, like every other; the small-message path then costs no getenv. */
static const st_algo_t *forced_table[STRATA_COLL_COUNT];
static pthread_once_t forced_once = PTHREAD_ONCE_INIT;

static void parse_forced(void)
{
    const char *spec = st_knob_str("STRATA_COMM_ALGO");
    for (const char *p = spec; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        strata_coll_t coll;
        char cname[32];
        size_t cl = colon ? (size_t)(colon - p) : 0;
        if (!colon || cl >= sizeof cname) {
            ST_LOG_WARN(ST_SUB_COMM, "STRATA_COMM_ALGO: '%.*s' is not coll:algo", (int)len, p);
        } else {
            memcpy(cname, p, cl);
            cname[cl] = '\0';
            const char *name = colon + 1;
            size_t nl = len - cl - 1;
            const st_algo_t *found = NULL;
            if (strata_coll_parse(cname, &coll) == STRATA_OK)
                for (int i = 0; i < st_nalgos && !found; i++)
                    if (st_algos[i]->coll == coll && strlen(st_algos[i]->name) == nl &&
                        !strncmp(st_algos[i]->name, name, nl))
                        found = st_algos[i];
            if (found)
                forced_table[coll] = found;
            else
                ST_LOG_WARN(ST_SUB_COMM,
                            "STRATA_COMM_ALGO: no algorithm '%.*s' (see `strata algos`)", (int)len,
                            p);
        }
        p = end ? end + 1 : NULL;
    }
}

static const st_algo_t *forced(const st_coll_args_t *a)
{
    pthread_once(&forced_once, parse_forced);
    const st_algo_t *al = forced_table[a->coll];
    if (!al || !al->supports || al->supports(a))
        return al;
    ST_LOG_DEBUG(ST_SUB_COMM, "STRATA_COMM_ALGO: %s:%s cannot serve this call; choosing by cost",
                 strata_coll_name(a->coll), al->name);
    return NULL;
}

/* Modelled seconds of plan `kind` for `coll` of `bytes` on the communicator's fabric, and the
 * pipeline it should run with (negative when the plan does not serve the collective); memoised
 * per collective, plan and power-of-two size. */
static double topo_cost(st_topo_t *t, strata_coll_t coll, strata_plan_kind_t kind, size_t bytes,
                        size_t esize, strata_pipeline_t *pipe)
{
    int ci = coll == STRATA_COLL_ALLREDUCE        ? 0
             : coll == STRATA_COLL_REDUCE_SCATTER ? 1
             : coll == STRATA_COLL_ALLGATHER      ? 2
             : coll == STRATA_COLL_BCAST          ? 3
             : coll == STRATA_COLL_REDUCE         ? 4
                                                  : -1;
    if (ci < 0 || kind < 0 || kind >= STRATA_PLAN_KIND_COUNT)
        return -1;
    int bucket = 0;
    while (bucket < 63 && (2ull << bucket) <= bytes)
        bucket++;
    st_topo_memo_t *m = &t->memo[ci][kind][bucket];
    if (!m->known) {
        m->pipe = (strata_pipeline_t){1, 1};
        m->cost =
            strata_netmodel_fabric_cost(&t->fabric, coll, kind, (double)bytes, esize, &m->pipe);
        m->known = true;
    }
    *pipe = m->pipe;
    return m->cost;
}

double st_algo_cost(const st_algo_t *al, const st_coll_args_t *a, size_t bytes,
                    const strata_link_t *link, strata_pipeline_t *pipe)
{
    *pipe = (strata_pipeline_t){1, 1};
    bool on_fabric = a->topo && a->topo->multi;
    if (al->plan && on_fabric)
        return topo_cost(a->topo, a->coll, (strata_plan_kind_t)(al->plan - 1), bytes, a->esize,
                         pipe);
    if (al->plan == 1 + STRATA_PLAN_RING_TREE || al->plan == 1 + STRATA_PLAN_HIER)
        return -1; // a topology plan on a flat communicator is a plain ring
    // Through cross-memory attach (buffers from malloc) every copy pins the peer's 4 KiB pages, and
    // the direct path only matches the rings (docs/comm.md); it is priced for strata_mem_alloc
    // memory only, where it is twice as fast. STRATA_COMM_ALGO can still force it.
    if (al->model == STRATA_ALGO_DIRECT && !a->registered)
        return -1;

    return strata_netmodel_cost(a->coll, al->model, a->nranks, (double)bytes, link);
}

const st_algo_t *st_algo_select(st_coll_args_t *a, size_t bytes, const strata_link_t *link)
{
    const st_algo_t *f = forced(a);
    if (f) {
        if (f->plan && st_algo_cost(f, a, bytes, link, &a->pipe) < 0)
            a->pipe = (strata_pipeline_t){1, 1};
        return f;
    }
    const st_algo_t *best = NULL;
    double best_cost = 0;
    for (int i = 0; i < st_nalgos; i++) {
        const st_algo_t *al = st_algos[i];
        if (al->coll != a->coll || (al->supports && !al->supports(a)))
            continue;
        strata_pipeline_t pipe;
        double c = st_algo_cost(al, a, bytes, link, &pipe);
        if (c < 0)
            continue;
        if (!best || c < best_cost) {
            best = al;
            best_cost = c;
            a->pipe = pipe;
        }
    }
    return best;
}
