/* What several trainer tests share (train_checks.h). */
#include <math.h>
#include <stdio.h>

#include "harness/st_test.h"
#include "harness/train_checks.h"

strata_train_config_t st_tiny_train_config(int batch, int steps, const char *data)
{
    strata_train_config_t c = strata_train_config_default();
    c.model.n_layer = 2;
    c.model.d_model = 32;
    c.model.n_head = 2;
    c.model.max_seq = 16;
    c.seq = 16;
    c.batch = batch;
    c.steps = steps;
    c.warmup = 2;
    c.progress = false;
    snprintf(c.data, sizeof c.data, "%s", data);
    return c;
}

strata_status_t st_poison_rank1_step3(void *ctx, strata_trainer_t *t, float *loss)
{
    if (*(int *)ctx == 1 && strata_trainer_step_count(t) + 1 == 3)
        *loss = NAN;
    return STRATA_OK;
}

int st_same_params(strata_comm_t *comm, strata_trainer_t *t)
{
    size_t P = strata_model_nparams(strata_trainer_model(t));
    const float *p = strata_model_param_arena(strata_trainer_model(t));
    double sum = 0, lo, hi;
    for (size_t i = 0; i < P; i++)
        sum += p[i];
    if (strata_allreduce(comm, &sum, &lo, 1, STRATA_DTYPE_F64, STRATA_OP_MIN) != 0 ||
        strata_allreduce(comm, &sum, &hi, 1, STRATA_DTYPE_F64, STRATA_OP_MAX) != 0)
        return ST_RANK_FAIL("allreduce: %s", strata_last_error());
    if (lo != hi || !isfinite(sum))
        return ST_RANK_FAIL("parameters differ between ranks: sums from %.9g to %.9g", lo, hi);
    return 0;
}
