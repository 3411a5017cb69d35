/* What Slurm, Open MPI and torchrun take from a placement.
 *
 *   SLURM_HOSTFILE   one host name per line, line r = the host of task r; used with
 *                    `srun --distribution=arbitrary` (Slurm repeats a name once per task on it)
 *   Open MPI rankfile  "rank R=HOST slot=S" (mpirun --rankfile FILE, or --map-by rankfile:file=)
 *   environment      per host: NNODES, NODE_RANK, NPROC_PER_NODE, MASTER_ADDR/PORT,
 *                    STRATA_RANKS (global ranks by local rank) and STRATA_TOPO_PATH
 * The job layout reader (`strata plan --json`) is here too; the pictures are in svg.c. Nothing
 * here chooses hosts. */
#include "base/base.h"
#include "base/json.h"
#include "strata/sched.h"

#include <stdlib.h>
#include <string.h>

void strata_write_slurm_hostfile(const strata_cluster_t *c, const strata_placement_t *p, FILE *f)
{
    for (long long r = 0; r < p->world; r++)
        fprintf(f, "%s\n", c->hosts[p->rank_host[r]].name);
}

void strata_write_rankfile(const strata_cluster_t *c, const strata_placement_t *p, FILE *f)
{
    for (long long r = 0; r < p->world; r++)
        fprintf(f, "rank %lld=%s slot=%d\n", r, c->hosts[p->rank_host[r]].name, p->rank_slot[r]);
}

void strata_write_env(const strata_cluster_t *c, const strata_placement_t *p,
                      const strata_job_t *job, FILE *f)
{
    long long pph = p->nhosts ? p->world / p->nhosts : 0;
    char path[512];
    (void)job;
    for (int j = 0; j < p->nhosts; j++) {
        int h = p->hosts[j];
        fprintf(f, "# host %s\n", c->hosts[h].name);
        fprintf(f, "NNODES=%d\nNODE_RANK=%d\nNPROC_PER_NODE=%lld\n", p->nhosts, j, pph);
        fprintf(f, "WORLD_SIZE=%lld\nMASTER_ADDR=%s\nMASTER_PORT=29500\n", p->world,
                c->hosts[p->hosts[0]].name);
        fprintf(f, "STRATA_RANKS=");
        for (long long r = 0; r < pph; r++)
            fprintf(f, "%s%lld", r ? "," : "", (long long)j * pph + r);
        fprintf(f, "\nSTRATA_TOPO_PATH=%s\n\n",
                strata_cluster_host_path(c, h, path, sizeof path));
    }
}

/* ---- job from `strata plan --json` ------------------------------------------------------------- */

strata_status_t strata_job_load_plan(const char *path, strata_job_t *out)
{
    *out = strata_job_default();
    st_json_doc_t doc;
    ST_TRY(st_json_load_file(path, &doc));
    strata_status_t rc = STRATA_OK;
    json_object *root = doc.root, *cfg = NULL, *top = NULL, *comm = NULL;
    if (json_object_object_get_ex(root, "top", &top) && json_object_is_type(top, json_type_array) &&
        json_object_array_length(top) > 0)
        root = json_object_array_get_idx(top, 0);
    if (!json_object_is_type(root, json_type_object) ||
        !json_object_object_get_ex(root, "config", &cfg)) {
        rc = st_error(STRATA_ERR_PARSE,
                      "%s:1: expected `strata plan --json` output with a \"config\" object",
                      path);
        goto out;
    }
    ST_TRY_GOTO(st_json_get_int(&doc, cfg, "tp", 0, true, 1, 1 << 20, &out->tp), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, cfg, "cp", 0, false, 1, 1 << 20, &out->cp), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, cfg, "pp", 0, true, 1, 1 << 20, &out->pp), rc, out);
    ST_TRY_GOTO(st_json_get_int(&doc, cfg, "dp", 0, true, 1, 1 << 20, &out->dp), rc, out);
    json_object *ord;
    if (json_object_object_get_ex(cfg, "order", &ord)) {
        if (!json_object_is_type(ord, json_type_array) ||
            json_object_array_length(ord) != STRATA_DIM_COUNT) {
            rc = st_error(STRATA_ERR_PARSE, "%s:%d: expected \"order\" as 4 dimension names",
                          path, st_json_key_line(&doc, "order", 0));
            goto out;
        }
        char buf[64] = "";
        for (int i = 0; i < STRATA_DIM_COUNT; i++) {
            const char *s = json_object_get_string(json_object_array_get_idx(ord, (size_t)i));
            strncat(buf, s ? s : "?", 8);
            if (i + 1 < STRATA_DIM_COUNT)
                strcat(buf, ",");
        }
        if (strata_order_parse(buf, out->order) < 0) {
            rc = st_error(STRATA_ERR_PARSE, "%s:%d: expected \"order\" as a permutation of "
                          "tp,cp,pp,dp, got %s", path, st_json_key_line(&doc, "order", 0), buf);
            goto out;
        }
    }
    if (json_object_object_get_ex(root, "comm", &comm))
        for (int d = 0; d < STRATA_DIM_COUNT; d++) {
            json_object *e;
            if (json_object_object_get_ex(comm, strata_dim_name((strata_dim_t)d), &e))
                ST_TRY_GOTO(st_json_get_double(&doc, e, "bytes", 0, false, 0, 1e18,
                                               &out->bytes[d]),
                            rc, out);
        }
out:
    st_json_free(&doc);
    return rc;
}
