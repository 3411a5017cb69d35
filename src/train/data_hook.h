/* Test hooks of the data loader (data.c), internal to src/train and its tests. */
#ifndef ST_TRAIN_DATA_HOOK_H
#define ST_TRAIN_DATA_HOOK_H

#include "strata/train.h"

/* Every row's read sleeps `us` microseconds first: a slow disk or network filesystem, made
 * deterministic, to measure how much of the reading the loader thread hides. Set before any read. */
void st_data_set_read_delay(strata_data_t *d, unsigned us);

#endif
