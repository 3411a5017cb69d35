/* Scratch for tests/layering, a control: the strata command sees every public header. */
#include "strata/cmd.h"
#include "strata/plan.h"
#include "strata/sched.h"
#include "strata/strata.h"
#include "strata/train.h"

int layering_tool_control(void);
int layering_tool_control(void)
{
    return STRATA_DIM_COUNT;
}
