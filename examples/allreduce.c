/* The library from outside: a program built against an installed strata (docs/install.md) that
 * averages a gradient-sized buffer over the ranks in place, then gathers every rank's shard with a
 * non-blocking all-gather, and checks both results. The launcher's environment (strata launch,
 * torchrun, Slurm, Open MPI, MPICH) says who is who:
 *     strata launch -n 2 -- ./allreduce
 * Exits 0 when every value is what it must be, 1 otherwise (naming the first wrong one). */
#include <stdio.h>
#include <stdlib.h>

#include <strata/strata.h>

#define GRADS (1 << 16)
#define SHARD 4

int main(void)
{
    strata_comm_t *comm;
    if (strata_comm_create_from_env(&comm) != STRATA_OK) {
        fprintf(stderr, "allreduce: %s\n", strata_last_error());
        return 1;
    }
    int rank = strata_comm_rank(comm), n = strata_comm_size(comm), bad = 0;
    float *grads = malloc(GRADS * sizeof *grads), *all = malloc((size_t)n * SHARD * sizeof *all);
    float shard[SHARD];
    for (int i = 0; i < GRADS; i++)
        grads[i] = (float)(rank + 1); // rank r holds r + 1: the average is (n + 1) / 2
    for (int k = 0; k < SHARD; k++)
        shard[k] = (float)(10 * rank + k);

    strata_request_t *req = NULL;
    strata_status_t rc = strata_allreduce(comm, grads, grads, GRADS, STRATA_DTYPE_F32,
                                          STRATA_OP_AVG); /* in place */
    if (rc == STRATA_OK)
        rc = strata_iallgather(comm, shard, all, SHARD, STRATA_DTYPE_F32, &req);
    /* ... computation here overlaps the all-gather ... */
    if (rc == STRATA_OK)
        rc = strata_request_wait(req);
    if (rc != STRATA_OK) {
        fprintf(stderr, "allreduce: rank %d: %s\n", rank, strata_last_error());
        strata_comm_destroy(comm);
        return 1;
    }
    float avg = (float)(n + 1) / 2.f;
    for (int i = 0; i < GRADS && !bad; i++)
        if (grads[i] != avg)
            bad = fprintf(stderr, "allreduce: rank %d: element %d is %g, expected %g\n", rank, i,
                          (double)grads[i], (double)avg);
    for (int i = 0; i < n * SHARD && !bad; i++)
        if (all[i] != (float)(10 * (i / SHARD) + i % SHARD))
            bad = fprintf(stderr, "allreduce: rank %d: gathered element %d is %g, expected %d\n",
                          rank, i, (double)all[i], 10 * (i / SHARD) + i % SHARD);
    if (!bad)
        printf("rank %d of %d: allreduce avg %g, allgather of %d shards ok (strata %s)\n", rank, n,
               (double)grads[0], n, STRATA_VERSION_STRING);
    free(grads);
    free(all);
    strata_comm_destroy(comm);
    return bad ? 1 : 0;
}
