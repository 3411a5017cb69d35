/* Scratch for tests/layering: a part never sees another part's internal headers. */
#include "comm/algo/algo.h"
#include "plan/plan_internal.h"

int layering_comm_includes_plan_internals(void);
int layering_comm_includes_plan_internals(void)
{
    return 0;
}
