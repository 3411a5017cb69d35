/* Scratch for tests/layering: sched sits on netmodel, beside comm, not above it. */
#include "strata/sched.h"
#include "strata/comm.h"

int layering_sched_includes_comm(void);
int layering_sched_includes_comm(void)
{
    return 0;
}
