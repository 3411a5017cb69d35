/* The node's counters on the wire, and the zero filter's threshold knob. */
#include <stdlib.h>

#include "base/base.h"
#include "pool/node.h"

#define FIELDS(X)                                                                                  \
    X(rx_packets) X(tx_packets) X(malformed) X(unauthorized) X(injected_drops) X(injected_dups)   \
    X(injected_reorders) X(duplicates) X(zero_in) X(zero_out) X(adds) X(forwards) X(results)      \
    X(sessions)

void pl_stats_pack(const strata_pool_stats_t *s, uint64_t out[PL_STATS_FIELDS])
{
    int i = 0;
#define PACK(f) out[i++] = s->f;
    FIELDS(PACK)
#undef PACK
}

void pl_stats_unpack(const uint64_t in[PL_STATS_FIELDS], strata_pool_stats_t *s)
{
    int i = 0;
#define UNPACK(f) s->f = in[i++];
    FIELDS(UNPACK)
#undef UNPACK
}

float pl_zero_threshold(void)
{
    const char *t = st_knob_str("STRATA_POOL_ZERO_THRESHOLD");
    char *end = NULL;
    double v = *t ? strtod(t, &end) : 0.0;
    if (*t && (*end || !(v >= 0))) {
        ST_LOG_WARN(ST_SUB_NET, "STRATA_POOL_ZERO_THRESHOLD='%s' is not a number >= 0: using 0", t);
        return 0.0f;
    }
    return (float)v;
}
