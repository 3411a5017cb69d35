/* What Slurm, Open MPI and torchrun take from a placement, and a picture of it.
 *
 *   SLURM_HOSTFILE   one host name per line, line r = the host of task r; used with
 *                    `srun --distribution=arbitrary` (Slurm repeats a name once per task on it)
 *   Open MPI rankfile  "rank R=HOST slot=S" (mpirun --rankfile FILE, or --map-by rankfile:file=)
 *   environment      per host: NNODES, NODE_RANK, NPROC_PER_NODE, MASTER_ADDR/PORT,
 *                    STRATA_RANKS (global ranks by local rank) and STRATA_TOPO_PATH
 * The job layout reader (`strata plan --json`) is here too. Nothing here chooses hosts. */
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

/* A colour per data-parallel replica, from a fixed hue walk. */
static void replica_colour(int i, char *buf, size_t size)
{
    int hue = (i * 137) % 360;
    snprintf(buf, size, "hsl(%d,70%%,55%%)", hue);
}

void strata_write_place_svg(const strata_cluster_t *c, const strata_placement_t *p,
                            const strata_job_t *job, FILE *f)
{
    int nl = c->topo.nlevels;
    int row_level = nl >= 2 ? nl - 2 : 0; // one row per child of the top
    int nrows = c->ndom[row_level];
    int *replica = malloc((size_t)c->nhosts * sizeof *replica);
    int *col = calloc((size_t)nrows, sizeof *col);
    bool *spare = calloc((size_t)c->nhosts, sizeof *spare);
    if (!replica || !col || !spare) {
        free(replica);
        free(col);
        free(spare);
        return;
    }
    for (int h = 0; h < c->nhosts; h++)
        replica[h] = -1;
    long long per_replica = strata_job_world(job) / (job->dp > 0 ? job->dp : 1);
    long long pph = p->nhosts ? p->world / p->nhosts : 1;
    for (int j = 0; j < p->nhosts; j++)
        replica[p->hosts[j]] = (int)((long long)j * pph / (per_replica > 0 ? per_replica : 1));
    for (int s = 0; s < p->nspares; s++)
        spare[p->spares[s]] = true;
    int maxcol = 0;
    for (int h = 0; h < c->nhosts; h++)
        maxcol = ST_MAX(maxcol, ++col[c->hosts[h].dom[row_level]]);
    int cell = maxcol > 400 ? 3 : maxcol > 100 ? 5 : 12, gap = 1;
    int W = 140 + maxcol * (cell + gap) + 20, H = 60 + nrows * (cell + 6) + 40;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"10\" y=\"20\" font-size=\"14\">%s: job tp%d cp%d pp%d dp%d on %d hosts; "
               "colour = data-parallel replica, grey = busy, red = failed, outline = spare; "
               "comm %.4g s/step</text>\n",
            c->topo.name, job->tp, job->cp, job->pp, job->dp, p->nhosts, p->cost.total_s);
    memset(col, 0, (size_t)nrows * sizeof *col);
    for (int h = 0; h < c->nhosts; h++) {
        int r = c->hosts[h].dom[row_level];
        int x = 130 + col[r]++ * (cell + gap), y = 40 + r * (cell + 6);
        // A small gap between units of the level below the rows (racks).
        if (row_level >= 1 && h > 0 && c->hosts[h - 1].dom[row_level] == r &&
            c->hosts[h - 1].dom[row_level - 1] != c->hosts[h].dom[row_level - 1])
            col[r]++;
        char fill[40] = "#eeeeee";
        if (replica[h] >= 0)
            replica_colour(replica[h], fill, sizeof fill);
        else if (c->hosts[h].state == STRATA_HOST_BUSY)
            snprintf(fill, sizeof fill, "#9e9e9e");
        else if (c->hosts[h].state == STRATA_HOST_FAILED)
            snprintf(fill, sizeof fill, "#d32f2f");
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"%s>"
                   "<title>%s</title></rect>\n",
                x, y, cell, cell, fill, spare[h] ? " stroke=\"black\" stroke-width=\"1\"" : "",
                c->hosts[h].name);
        if (col[r] == 1)
            fprintf(f, "<text x=\"10\" y=\"%d\">%s</text>\n", y + cell,
                    c->dom_name[c->dom_off[row_level] + r]);
    }
    fprintf(f, "</svg>\n");
    free(replica);
    free(col);
    free(spare);
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
