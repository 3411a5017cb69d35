/* Reproducible random test data (random.h). */
#include "harness/random.h"

float st_test_uniform(uint64_t *state)
{
    uint64_t s = *state;
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    *state = s;
    return (float)((double)(s >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}
