/* Scratch for tests/layering, a control: sched's own and netmodel's headers compile. */
#include "base/base.h"
#include "sched/sched_internal.h"
#include "strata/price.h"
#include "strata/sched.h"

int layering_sched_control(void);
int layering_sched_control(void)
{
    return STRATA_DIM_COUNT;
}
