/* Scratch for tests/layering: base is the bottom part; topo's header is not on its path. */
#include "base/base.h"
#include "strata/topo.h"

int layering_base_includes_topo(void);
int layering_base_includes_topo(void)
{
    return 0;
}
