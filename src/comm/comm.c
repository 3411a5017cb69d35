/* Communicators: creation of the world, splits, destruction and abort. Collectives are in coll.c,
 * requests in request.c, the byte moving in endpoint.c and the transports. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "comm/comm_internal.h"
#include "comm/mailbox.h"
#include "comm/window.h"

static strata_status_t validate(const strata_comm_config_t *cfg)
{
    if (!cfg)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_comm_create: config is NULL");
    if (cfg->nranks < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_comm_create: nranks is %d, must be >= 1",
                        cfg->nranks);
    if (cfg->rank < 0 || cfg->rank >= cfg->nranks)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "strata_comm_create: rank %d is outside 0..%d", cfg->rank, cfg->nranks - 1);
    if (!cfg->store_addr || !strchr(cfg->store_addr, ':'))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "strata_comm_create: store address '%s' is not host:port",
                        cfg->store_addr ? cfg->store_addr : "(null)");
    if (!cfg->job_id || !*cfg->job_id)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_comm_create: job_id is empty");
    for (const char *p = cfg->job_id; *p; p++)
        if (*p == '/' || *p == ' ')
            return st_error(STRATA_ERR_INVALID_ARG,
                            "strata_comm_create: job_id '%s' must not contain '/' or spaces", cfg->job_id);
    return STRATA_OK;
}

strata_status_t strata_comm_create(const strata_comm_config_t *cfg, strata_comm_t **out)
{
    if (!out)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_comm_create: out is NULL");
    *out = NULL;
    ST_TRY(validate(cfg));
    strata_comm_t *c = calloc(1, sizeof *c);
    st_shared_t *sh = calloc(1, sizeof *sh);
    int *world = calloc((size_t)cfg->nranks, sizeof *world);
    st_place_t *place = malloc(sizeof *place); // where this rank sits: published, then placed
    strata_status_t rc = c && sh && world && place ? st_comm_locate(place)
                                                   : st_error(STRATA_ERR_NO_MEMORY, "out of memory "
                                                              "creating a communicator");
    if (rc == STRATA_OK)
        rc = st_ep_create(cfg, place->path, &sh->ep);
    if (rc < 0) {
        free(c);
        free(sh);
        free(world);
        free(place);
        return rc;
    }
    for (int i = 0; i < cfg->nranks; i++)
        world[i] = i;
    sh->refs = 1;
    c->sh = sh;
    c->rank = cfg->rank;
    c->nranks = cfg->nranks;
    c->world = world;
    c->ctx = 1;
    c->link = st_ep_single_host(sh->ep) ? strata_link_default_shm() : strata_link_default_tcp();
    c->pool = st_pool_conn_new(cfg->nranks, c->ctx);
    rc = st_comm_topo_create(c, place);
    free(place);
    if (rc < 0) {
        strata_comm_destroy(c);
        return rc;
    }
    *out = c;
    return STRATA_OK;
}

strata_status_t strata_comm_create_from_env(strata_comm_t **out)
{
    if (out)
        *out = NULL;
    strata_comm_config_t cfg;
    ST_TRY(strata_comm_config_from_env(&cfg));
    return strata_comm_create(&cfg, out);
}

static void release_shared(st_shared_t *sh)
{
    if (--sh->refs > 0)
        return;
    st_ep_destroy(sh->ep);
    free(sh);
}

void strata_comm_destroy(strata_comm_t *comm)
{
    if (!comm)
        return;
    st_mailbox_free(comm, comm->mailbox);
    st_pool_conn_free(comm->pool);
    release_shared(comm->sh);
    st_comm_topo_free(comm->topo);
    free(comm->world);
    free(comm);
}

void strata_comm_abort(strata_comm_t *comm, const char *reason)
{
    if (!comm)
        return;
    st_ep_abort(comm->sh->ep, reason);
}

strata_status_t strata_comm_stats(const strata_comm_t *comm, strata_comm_stats_t *out)
{
    if (!comm || !out)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_comm_stats: %s is NULL",
                        comm ? "out" : "comm");
    const st_flight_t *f = st_ep_flight(comm->sh->ep);
    *out = (strata_comm_stats_t){.ops = f->completed, .wait_s = st_ep_wait_ns(comm->sh->ep) / 1e9};
    return STRATA_OK;
}

strata_status_t strata_comm_link_stats(const strata_comm_t *comm, int peer,
                                       strata_link_stats_t *out)
{
    if (!comm || !out)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_comm_link_stats: %s is NULL",
                        comm ? "out" : "comm");
    if (peer < 0 || peer >= comm->nranks)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_comm_link_stats: rank %d is outside 0..%d",
                        peer, comm->nranks - 1);
    const st_link_meter_t *m = &st_ep_peer(comm->sh->ep, comm->world[peer])->rx_meter;
    *out = (strata_link_stats_t){m->messages, m->bytes, (double)m->ns / 1e9};
    return STRATA_OK;
}

int strata_comm_rank(const strata_comm_t *comm)
{
    return comm ? comm->rank : -1;
}

int strata_comm_size(const strata_comm_t *comm)
{
    return comm ? comm->nranks : -1;
}

strata_status_t strata_comm_get_error(const strata_comm_t *comm)
{
    if (!comm)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_comm_get_error: comm is NULL");
    return st_ep_error(comm->sh->ep);
}

static uint32_t mix_ctx(uint32_t parent, uint32_t nth, int color)
{
    uint64_t x = ((uint64_t)parent << 32) ^ ((uint64_t)nth << 16) ^ (uint64_t)(uint32_t)color;
    x += 0x9e3779b97f4a7c15ull; // splitmix64 finaliser
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    uint32_t ctx = (uint32_t)(x & 0xFFFFFFu);
    return ctx < 2 ? ctx + 2 : ctx; // 1 is the world's
}

strata_status_t strata_comm_split(strata_comm_t *comm, int color, int key, strata_comm_t **out)
{
    if (!out)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_comm_split: out is NULL");
    *out = NULL;
    if (!comm)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_comm_split: comm is NULL");
    const int n = comm->nranks;
    int64_t mine[2] = {color, key};
    int64_t *all = malloc((size_t)n * sizeof mine);
    if (!all)
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory splitting a communicator");
    strata_status_t rc = strata_allgather(comm, mine, all, 2, STRATA_DTYPE_I64);
    uint32_t nth = comm->nsplits++;
    if (rc < 0 || color < 0) {
        free(all);
        return rc;
    }
    // Members of my color ordered by (key, old rank): a stable insertion sort over the old ranks.
    int *members = malloc((size_t)n * sizeof *members);
    strata_comm_t *c = calloc(1, sizeof *c);
    if (!members || !c) {
        free(all);
        free(members);
        free(c);
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory splitting a communicator");
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (all[2 * i] != color)
            continue;
        int j = m++;
        while (j > 0 && all[2 * members[j - 1] + 1] > all[2 * i + 1]) {
            members[j] = members[j - 1];
            j--;
        }
        members[j] = i;
    }
    free(all);
    c->nranks = m;
    rc = st_comm_topo_split(comm, c, members);
    if (rc < 0) {
        free(members);
        free(c);
        return rc;
    }
    for (int j = 0; j < m; j++) {
        if (members[j] == comm->rank)
            c->rank = j;
        members[j] = comm->world[members[j]];
    }
    c->sh = comm->sh;
    c->sh->refs++;
    c->world = members;
    c->ctx = mix_ctx(comm->ctx, nth, color);
    c->pool = st_pool_conn_new(st_ep_size(comm->sh->ep), c->ctx);
    c->link = comm->link;
    *out = c;
    return STRATA_OK;
}

strata_status_t strata_mem_alloc(strata_comm_t *comm, size_t bytes, void **out)
{
    if (!out)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_mem_alloc: out is NULL");
    *out = NULL;
    if (!comm)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_mem_alloc: comm is NULL");
    return st_win_alloc(st_ep_window(comm->sh->ep), bytes, out);
}

strata_status_t strata_mem_free(strata_comm_t *comm, void *ptr)
{
    if (!ptr)
        return STRATA_OK;
    if (!comm)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_mem_free: comm is NULL");
    return st_win_free(st_ep_window(comm->sh->ep), ptr);
}
