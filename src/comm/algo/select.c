/* Algorithm selection: the STRATA_COMM_ALGO override, else the cheapest algorithm that can serve
 * the call by the price of the communicator's group (strata/price.h), chosen by the same function
 * that gives the planner its prediction. STRATA_COMM_ALGO is a comma list of coll:algo pairs
 * ("allreduce:ring,bcast:binomial"). The group's shape and price lines are computed on first use
 * and kept with the communicator (st_topo_t), so a call evaluates a few lines. */
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

bool st_algo_forced(strata_coll_t coll)
{
    pthread_once(&forced_once, parse_forced);
    return (unsigned)coll < STRATA_COLL_COUNT && forced_table[coll];
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

/* The registry entry of each collective's algorithm as the price names it (unique per collective,
 * tests/unit/test_price.c checks the registry against strata_price_serves). */
static const st_algo_t *by_model[STRATA_COLL_COUNT][STRATA_ALGO_COUNT];
static pthread_once_t by_model_once = PTHREAD_ONCE_INIT;

static void index_registry(void)
{
    for (int i = 0; i < st_nalgos; i++)
        by_model[st_algos[i]->coll][st_algos[i]->model] = st_algos[i];
}

/* Gives the shape the communicator's pool, when it has one: its nodes sit where a switch would, a
 * packet away at the outermost level's latency, each on a link of STRATA_POOL_MBIT (default: a
 * member's own link at that level). */
static void shape_pool(const st_coll_args_t *a, strata_price_shape_t *s)
{
    if (!a->pool || s->top < 0)
        return;
    const strata_price_level_t *t = &s->level[s->top];
    long long mbit = st_knob_int("STRATA_POOL_MBIT", 0);
    strata_price_shape_pool(s, st_pool_conn_nodes(a->pool), mbit > 0 ? mbit * 1e6 / 8 : t->link_Bps,
                            t->latency_s, st_pool_conn_multicast(a->pool));
}

/* The price table of the call's collective: memoised with the communicator's place on the fabric,
 * or, while a communicator is being created and knows no fabric yet, for n ranks on `link`. */
static const strata_price_table_t *table_for(const st_coll_args_t *a, const strata_link_t *link,
                                             strata_price_table_t *scratch)
{
    st_topo_t *t = a->topo;
    if (!t || t->fabric.nranks != a->nranks) {
        strata_price_shape_t flat;
        strata_price_shape_flat(a->nranks, link, &flat);
        shape_pool(a, &flat);
        strata_price_table(&flat, a->coll, scratch);
        return scratch;
    }
    st_topo_memo_t *m = t->memo;
    if (!m->shaped) {
        // The communicator prices with full link efficiency and its own reduction speed.
        const strata_net_eff_t eff = {{1.0, 1.0}, link->gamma_s_per_b};
        if (strata_price_shape_fabric(&t->fabric, &eff, &m->shape) < 0) {
            ST_LOG_WARN(ST_SUB_COMM, "pricing on one link: %s", strata_last_error());
            strata_price_shape_flat(a->nranks, link, &m->shape);
        }
        shape_pool(a, &m->shape);
        m->shaped = true;
    }
    if (!(m->known & (1u << a->coll))) {
        strata_price_table(&m->shape, a->coll, &m->table[a->coll]);
        m->known |= 1u << a->coll;
    }
    return &m->table[a->coll];
}

double st_algo_cost(const st_algo_t *al, const st_coll_args_t *a, size_t bytes,
                    const strata_link_t *link, strata_xfer_pipe_t *pipe)
{
    *pipe = (strata_xfer_pipe_t){1, 1};
    // Through cross-memory attach (buffers from malloc) every copy pins the peer's 4 KiB pages, and
    // the direct path only matches the rings (docs/comm.md); it is priced for strata_mem_alloc
    // memory only, where it is twice as fast. STRATA_COMM_ALGO can still force it.
    if (al->model == STRATA_ALGO_DIRECT && !a->registered)
        return -1;
    strata_price_table_t scratch;
    strata_price_line_t line;
    double c = strata_price_table_algo(table_for(a, link, &scratch), al->model, (double)bytes, &line);
    if (c >= 0)
        *pipe = line.pipe;
    return c;
}

const st_algo_t *st_algo_select(st_coll_args_t *a, size_t bytes, const strata_link_t *link)
{
    const st_algo_t *f = forced(a);
    if (f) {
        if (st_algo_cost(f, a, bytes, link, &a->pipe) < 0)
            a->pipe = (strata_xfer_pipe_t){1, 1};
        return f;
    }
    pthread_once(&by_model_once, index_registry);
    unsigned offer = 0; // the algorithms that can serve this call
    for (int i = 0; i < st_nalgos; i++) {
        const st_algo_t *al = st_algos[i];
        if (al->coll == a->coll && (!al->supports || al->supports(a)) &&
            (al->model != STRATA_ALGO_DIRECT || a->registered))
            offer |= STRATA_PRICE_OFFER(al->model);
    }
    strata_price_table_t scratch;
    strata_price_t p;
    if (strata_price_table_choose(table_for(a, link, &scratch), (double)bytes, offer, &p) < 0 ||
        p.algo == STRATA_ALGO_COUNT)
        return NULL;
    a->pipe = p.pipe;
    return by_model[a->coll][p.algo];
}
