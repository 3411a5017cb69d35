/* Start-up probe: each rank times strata_comm_create_from_env() plus its first barrier; rank 0 prints
 * the slowest rank's time as one JSON line. Run under `strata launch -n N`; bench/init_scale.sh
 * drives it at growing N beside torch.distributed's Gloo. */
#include <stdio.h>
#include <time.h>

#include "strata/strata.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void)
{
    double t0 = now_s();
    strata_comm_t *comm;
    if (strata_comm_create_from_env(&comm) != STRATA_OK || strata_barrier(comm) != STRATA_OK) {
        fprintf(stderr, "init_probe: %s\n", strata_last_error());
        return 1;
    }
    double mine = now_s() - t0, slowest = 0;
    if (strata_allreduce(comm, &mine, &slowest, 1, STRATA_DTYPE_F64, STRATA_OP_MAX) != STRATA_OK) {
        fprintf(stderr, "init_probe: %s\n", strata_last_error());
        return 1;
    }
    if (strata_comm_rank(comm) == 0)
        printf("{\"impl\":\"strata\",\"nranks\":%d,\"init_s\":%.4f}\n", strata_comm_size(comm), slowest);
    strata_comm_destroy(comm);
    return 0;
}
