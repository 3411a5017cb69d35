/* Scratch for tests/layering: netmodel is below plan, so plan's header is not on its path. */
#include "strata/netmodel.h"
#include "strata/plan.h"

int layering_netmodel_includes_plan(void);
int layering_netmodel_includes_plan(void)
{
    return STRATA_COLL_COUNT;
}
