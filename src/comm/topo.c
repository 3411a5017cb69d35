/* A communicator's place on the fabric: at creation every rank states its path (STRATA_TOPO_PATH,
 * else its host's entry in the STRATA_TOPO_FILE cluster file, else just its host identity) and
 * the ranks exchange one small record each; splits take their members' part. The levels' links
 * come from the cluster file, or are measured (calibrate.c), or are strata's defaults (shared
 * memory in a host, TCP above). The path itself is published with the rank's address (endpoint.c),
 * so messages can say where a rank is (strata_comm_rank_where). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "comm/comm_internal.h"

#define KEYS (STRATA_TOPO_MAX_LEVELS)
#define REC  (2 + KEYS)

/* This rank's record: [0] = path depth, [1 + l] = key of its level-l unit (innermost first),
 * [1 + KEYS] = its calibration wish. */
static strata_status_t my_record(st_ep_t *ep, const st_place_t *place, int64_t rec[REC])
{
    const char *path = place->path;
    memset(rec, 0, REC * sizeof *rec);
    int wish;
    ST_TRY(st_calib_wish(place->have_levels, &wish));
    rec[1 + KEYS] = wish;
    if (!*path) { // no placement given: the host is all we know
        rec[0] = 1;
        rec[1] = (int64_t)st_ep_host_hash(ep);
        return STRATA_OK;
    }
    uint64_t keys[KEYS];
    int depth;
    if (strata_topo_path_keys(path, keys, &depth) < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "STRATA_TOPO_PATH: %s", strata_last_error());
    rec[0] = depth;
    for (int l = 0; l < depth; l++)
        rec[1 + l] = (int64_t)keys[l];
    return STRATA_OK;
}

/* This rank's path and the fabric's levels: STRATA_TOPO_PATH wins for the path; STRATA_TOPO_FILE
 * gives the levels (a cluster file) and, by host name, the path (its "hosts", or a Slurm
 * topology.conf's switches, whose levels get strata's default links). */
strata_status_t st_comm_locate(st_place_t *place)
{
    char *path = place->path;
    const size_t cap = sizeof place->path;
    strata_topo_t *levels = &place->levels;
    bool *have_levels = &place->have_levels;
    const char *given = st_knob_str("STRATA_TOPO_PATH");
    const char *file = st_knob_str("STRATA_TOPO_FILE");
    *have_levels = false;
    path[0] = '\0';
    if (*file) {
        char host[256];
        ST_TRY(strata_topo_this_host(host, sizeof host));
        if (strata_topo_file_is_json(file)) {
            ST_TRY(strata_topo_load(file, levels));
            *have_levels = true;
            strata_status_t rc = *given ? STRATA_OK : strata_topo_host_path(file, host, path, cap);
            if (rc < 0 && rc != STRATA_ERR_UNSUPPORTED) // a file without hosts: fine
                return rc;
        } else if (!*given) {
            strata_slurm_topo_t st;
            ST_TRY(strata_slurm_topo_load(file, &st));
            int d = strata_slurm_topo_host_path(&st, host, path, cap);
            strata_slurm_topo_free(&st);
            if (d < 0)
                return st_error(STRATA_ERR_INVALID_ARG, "%s: %s (set STRATA_TOPO_PATH instead)",
                                file, strata_last_error());
        }
    }
    if (*given)
        snprintf(path, cap, "%s", given);
    return STRATA_OK;
}

static void memo_reset(st_topo_t *t)
{
    memset(t->memo, 0, sizeof t->memo);
    t->multi = false;
    for (int l = 0; l < t->fabric.topo.nlevels; l++)
        t->multi |= t->fabric.nunits[l] > 1 && t->fabric.nunits[l] < t->fabric.nranks;
    strata_fabric_torus(&t->fabric, &t->torus, NULL);
}

strata_status_t st_comm_topo_create(strata_comm_t *c, const st_place_t *place)
{
    const char *path = place->path;
    strata_topo_t levels = place->levels;
    const bool have_levels = place->have_levels;
    int64_t mine[REC];
    ST_TRY(my_record(c->sh->ep, place, mine));
    const int n = c->nranks;
    int64_t *all = malloc((size_t)n * sizeof mine);
    uint64_t *keys = NULL;
    st_topo_t *t = calloc(1, sizeof *t);
    strata_status_t rc =
        all && t ? STRATA_OK : st_error(STRATA_ERR_NO_MEMORY, "out of memory placing ranks");
    // A single-host job with no placement given needs no exchange: every rank has the same
    // record. This keeps creation O(1) per rank where jobs grow largest on one machine.
    bool uniform = !*path && st_ep_single_host(c->sh->ep);
    for (int r = 0; rc == STRATA_OK && uniform && r < n; r++)
        memcpy(all + (size_t)r * REC, mine, sizeof mine);
    if (rc == STRATA_OK && !uniform)
        rc = strata_allgather(c, mine, all, REC, STRATA_DTYPE_I64);
    int depth = 1, wish = ST_CALIB_ALWAYS;
    for (int r = 0; rc == STRATA_OK && r < n; r++) {
        depth = all[r * REC] > depth ? (int)all[r * REC] : depth;
        wish = all[r * REC + 1 + KEYS] < wish ? (int)all[r * REC + 1 + KEYS] : wish;
    }
    if (rc == STRATA_OK) {
        if (!have_levels)
            strata_fabric_default_levels(depth + 1, &levels);
        else if (depth > levels.nlevels)
            rc = st_error(STRATA_ERR_INVALID_ARG,
                          "placement: paths are %d deep but %s has %d levels", depth,
                          st_knob_str("STRATA_TOPO_FILE"), levels.nlevels);
    }
    if (rc == STRATA_OK && !(keys = calloc((size_t)n * KEYS, sizeof *keys)))
        rc = st_error(STRATA_ERR_NO_MEMORY, "out of memory placing ranks");
    for (int r = 0; rc == STRATA_OK && r < n; r++)
        for (int l = 0; l < KEYS; l++)
            keys[(size_t)r * KEYS + (size_t)l] = (uint64_t)all[r * REC + 1 + l];
    if (rc == STRATA_OK && (rc = strata_fabric_from_keys(&levels, n, keys, KEYS, &t->fabric)) < 0 &&
        have_levels)
        rc = st_error(rc, "%s: %s", st_knob_str("STRATA_TOPO_FILE"), strata_last_error());
    free(all);
    free(keys);
    // The links are measured before anything is priced on them; every rank decides alike from
    // the records and the store's single-host verdict.
    bool calibrate =
        wish == ST_CALIB_ALWAYS || (wish == ST_CALIB_AUTO && !st_ep_single_host(c->sh->ep));
    if (rc == STRATA_OK && calibrate && n > 1)
        rc = st_comm_calibrate(c, &t->fabric, &c->calib);
    if (rc < 0) {
        if (t)
            strata_fabric_free(&t->fabric);
        free(t);
        return rc;
    }
    memo_reset(t);
    c->topo = t;
    if (t->multi && (have_levels || c->calib.done)) { // flat algorithms see the outermost link
        const strata_topo_level_t *top = &t->fabric.topo.level[t->fabric.topo.nlevels - 1];
        c->link.alpha_s = top->latency_s;
        c->link.beta_s_per_b = top->oversub / top->bw_Bps;
    }
    return STRATA_OK;
}

strata_status_t st_comm_topo_split(const strata_comm_t *parent, strata_comm_t *child,
                                   const int *parent_ranks)
{
    child->topo = NULL;
    if (!parent->topo)
        return STRATA_OK;
    st_topo_t *t = calloc(1, sizeof *t);
    if (!t)
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory placing a split");
    strata_status_t rc =
        strata_fabric_subset(&parent->topo->fabric, child->nranks, parent_ranks, &t->fabric);
    if (rc < 0) {
        free(t);
        return rc;
    }
    memo_reset(t);
    child->topo = t;
    child->calib = parent->calib;
    return STRATA_OK;
}

void st_comm_topo_free(st_topo_t *t)
{
    if (!t)
        return;
    strata_fabric_free(&t->fabric);
    free(t);
}

strata_status_t strata_comm_rank_where(const strata_comm_t *comm, int rank, char *buf, size_t len)
{
    if (!comm || !buf)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_comm_rank_where: %s is NULL",
                        comm ? "buf" : "comm");
    if (rank < 0 || rank >= comm->nranks)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_comm_rank_where: rank %d is outside 0..%d",
                        rank, comm->nranks - 1);
    st_ep_where(comm->sh->ep, comm->world[rank], buf, len);
    return STRATA_OK;
}
