/* The trainer on a device mesh: the mesh over the world communicator, this rank's part of the model
 * (its tensor-parallel cut, its pipeline stage's chunks) with the TP group's collectives, and the
 * sums that must count a replicated tensor once although every TP rank holds it (gradient norm,
 * LAMB's per-tensor norms) and a tied copy of wte not at all. */
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "train/trainer.h"

strata_status_t st_trainer_build_mesh(strata_trainer_t *t, strata_comm_t *comm,
                                      strata_comm_t **dp_comm)
{
    const strata_train_config_t *c = &t->cfg;
    int N = strata_comm_size(comm), tp = c->tp, pp = c->pp;
    if (tp > 1)
        ST_TRY(strata_gpt_config_check_tp(&c->model, tp));
    strata_mesh_config_t mc = strata_mesh_config_default();
    mc.size[STRATA_DIM_TP] = tp;
    mc.size[STRATA_DIM_PP] = pp;
    mc.size[STRATA_DIM_DP] = 0;
    if (c->order[0]) {
        ST_TRY(strata_order_parse(c->order, mc.order));
        mc.order_given = true;
    }
    int dp = N % (tp * pp) == 0 ? N / (tp * pp) : 1;
    strata_mesh_traffic_gpt(&c->model, ST_MAX(c->batch / dp, 1), c->seq, mc.size, c->sp, c->zero,
                            &mc.traffic);
    ST_TRY(strata_mesh_create(comm, &mc, &t->mesh));
    if (strata_comm_rank(comm) == 0) // where every dimension landed: one line, even when quiet
        strata_mesh_describe(t->mesh, stderr);
    t->tp = strata_mesh_size(t->mesh, STRATA_DIM_TP);
    t->tp_rank = strata_mesh_coord(t->mesh, STRATA_DIM_TP);
    t->pp = strata_mesh_size(t->mesh, STRATA_DIM_PP);
    t->pp_rank = strata_mesh_coord(t->mesh, STRATA_DIM_PP);
    t->dp = strata_mesh_size(t->mesh, STRATA_DIM_DP);
    t->dp_rank = strata_mesh_coord(t->mesh, STRATA_DIM_DP);
    t->tp_comm = strata_mesh_comm(t->mesh, STRATA_DIM_TP);
    t->pp_comm = strata_mesh_comm(t->mesh, STRATA_DIM_PP);
    t->embed_comm = strata_mesh_embed_comm(t->mesh);
    *dp_comm = strata_mesh_dp_cp_comm(t->mesh);
    if (t->tp == 1 && t->pp == 1)
        return STRATA_OK;
    strata_gpt_shard_t sh = strata_gpt_shard_none();
    if (t->tp > 1) {
        ST_TRY(strata_tp_group_create(t->tp_comm, &t->tpg));
        sh = (strata_gpt_shard_t){.tp = t->tp, .tp_rank = t->tp_rank, .sp = c->sp,
                                  .chunks = c->tp_overlap ? 0 : 1,
                                  .ops = strata_tp_group_ops(t->tpg)};
    }
    int rows = c->batch / t->dp;
    if (t->pp > 1) {
        ST_TRY(st_trainer_pp_cut(t));
        t->micro_rows = c->micro_batch > 0 ? c->micro_batch : 1;
        if (c->batch % t->dp || rows % t->micro_rows)
            return st_error(STRATA_ERR_INVALID_ARG, "train: the %d rows of a data-parallel rank "
                            "(batch %d over %d) do not split into micro-batches of %d rows",
                            rows, c->batch, t->dp, t->micro_rows);
        t->micro = rows / t->micro_rows;
        rows = t->micro_rows;
        sh.layers = t->stage_layers[t->pp_rank];
        sh.slots = c->vp * t->micro;
        sh.split_backward = strata_schedule_splits_backward(c->schedule);
        if (sh.slots > STRATA_GPT_MAX_SLOTS)
            return st_error(STRATA_ERR_INVALID_ARG, "train: %d micro-batches x %d chunks per stage "
                            "hold more than %d activation slots (use larger micro-batches)",
                            t->micro, c->vp, STRATA_GPT_MAX_SLOTS);
    }
    strata_gpt_t *m = NULL;
    ST_TRY(strata_model_create_shard(&c->model, &sh, ST_MAX(rows, 1), c->seed, &m));
    strata_model_destroy(t->model); // the whole model built by create: this rank's part replaces it
    t->model = m;
    return STRATA_OK;
}

double st_trainer_grad_sumsq(const strata_trainer_t *t, const strata_zero_shard_t *sh, int ns)
{
    double ss = 0;
    int nt = strata_model_ntensors(t->model);
    for (int i = 0; i < ns; i++) {
        size_t b = sh[i].offset, e = b + sh[i].count;
        for (int k = 0; k < nt; k++) { // the tensors the range meets, each with its weight
            const strata_tensor_info_t *ti = strata_model_tensor(t->model, k);
            size_t tb = ST_MAX(b, ti->offset), te = ST_MIN(e, ti->offset + ti->count);
            if (tb >= te)
                continue;
            double part = strata_sumsq(sh[i].grads + (tb - b), te - tb);
            ss += ti->tied_copy ? 0 : ti->split_dim < 0 ? part / t->tp : part;
        }
    }
    return ss;
}

/* Sums n doubles over the TP group (nothing at tp 1). */
static strata_status_t tp_sum(strata_trainer_t *t, double *v, int n)
{
    if (t->tp <= 1)
        return STRATA_OK;
    return strata_allreduce(t->tp_comm, v, v, (size_t)n, STRATA_DTYPE_F64, STRATA_OP_SUM);
}

strata_status_t st_trainer_tp_tensor_sums(strata_trainer_t *t, double *wsq, double *usq)
{
    if (t->tp <= 1)
        return STRATA_OK;
    int nt = strata_model_ntensors(t->model);
    for (int k = 0; k < nt; k++)
        if (strata_model_tensor(t->model, k)->split_dim < 0) {
            wsq[k] /= t->tp;
            usq[k] /= t->tp;
        }
    return tp_sum(t, wsq, 2 * nt); // wsq | usq are one block (strata_trainer_create)
}

strata_status_t st_trainer_straggler_roles(strata_trainer_t *t)
{
    int *role = malloc((size_t)t->nranks * sizeof *role);
    if (!role)
        return st_error(STRATA_ERR_NO_MEMORY, "train: out of memory");
    for (int d = 0; d < t->dp; d++) // cp is 1 in the trainer
        for (int p = 0; p < t->pp; p++)
            for (int k = 0; k < t->tp; k++) {
                int coord[STRATA_DIM_COUNT] = {[STRATA_DIM_TP] = k, [STRATA_DIM_PP] = p,
                                               [STRATA_DIM_DP] = d};
                role[strata_mesh_rank_of(t->mesh, coord)] = p * t->tp + k;
            }
    strata_status_t rc = st_straggler_set_roles(&t->strag, role, t->nranks);
    free(role);
    return rc;
}
