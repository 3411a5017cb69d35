/* What several trainer tests share (train_checks.c): a tiny model's configuration and checks. */
#ifndef ST_TEST_TRAIN_CHECKS_H
#define ST_TEST_TRAIN_CHECKS_H

#include "strata/strata.h"
#include "strata/train.h"

/* The quiet configuration of a tiny GPT (2 layers, width 32, 2 heads, sequences of 16, 2 warm-up
 * steps) training on the corpus file `data` for `steps` steps of `batch` rows. */
strata_train_config_t st_tiny_train_config(int batch, int steps, const char *data);

/* A trainer sync hook (strata_trainer_set_sync) that makes rank 1's loss of step 3 NaN; ctx points
 * at the calling rank's number. */
strata_status_t st_poison_rank1_step3(void *ctx, strata_trainer_t *t, float *loss);

/* 0 when every rank of `comm` holds the same finite parameters (compared by their sum); otherwise
 * reports the sums (ST_RANK_FAIL) and returns 1. */
int st_same_params(strata_comm_t *comm, strata_trainer_t *t);

#endif
