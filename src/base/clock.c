/* Monotonic clock and deadlines. */
#include <time.h>

#include "base/base.h"

uint64_t st_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t st_deadline_ms(long long timeout_ms)
{
    if (timeout_ms < 0)
        return UINT64_MAX;
    return st_now_ns() + (uint64_t)timeout_ms * 1000000ull;
}
