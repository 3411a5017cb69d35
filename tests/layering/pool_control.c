/* Scratch for tests/layering, a control: the pool's own internal and public headers compile. */
#include "base/base.h"
#include "pool/proto.h"
#include "strata/pool.h"

int layering_pool_control(void);
int layering_pool_control(void)
{
    return PL_HDR + STRATA_POOL_MAX_HOPS;
}
