/* Scratch for tests/layering, a control: what comm may include (its internals, base's toolkit,
 * its own and lower parts' public headers) compiles in the same set-up. */
#include "base/base.h"
#include "comm/algo/algo.h"
#include "strata/comm.h"
#include "strata/price.h"
#include "strata/topo.h"

int layering_comm_control(void);
int layering_comm_control(void)
{
    return STRATA_COLL_COUNT + STRATA_ALGO_COUNT;
}
