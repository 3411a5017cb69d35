/* Scratch for tests/layering: the strata command uses public headers only. */
#include "strata/strata.h"
#include "comm/algo/algo.h"

int layering_tool_includes_comm_internals(void);
int layering_tool_includes_comm_internals(void)
{
    return 0;
}
