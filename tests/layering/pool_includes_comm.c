/* Scratch for tests/layering: the pool sits below comm, so it cannot include comm's header. */
#include "strata/pool.h"
#include "strata/comm.h"

int layering_pool_includes_comm(void);
int layering_pool_includes_comm(void)
{
    return 0;
}
