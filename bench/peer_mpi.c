/* peer_mpi: the measurement loop of `strata bench`, for an MPI library, so bench/compare.sh can put
 * strata next to Open MPI and MPICH in the same run. Built outside CMake with the MPI's own
 * wrapper:
 *
 *   mpicc.openmpi -O2 -o peer_openmpi bench/peer_mpi.c
 *   mpicc.mpich   -O2 -o peer_mpich   bench/peer_mpi.c
 *   mpirun.openmpi -np 2 ./peer_openmpi -C allreduce,allgather --sizes 8,1M --json
 *
 * Same definitions as strata bench (and nccl-tests): SIZE is the collective's largest buffer (for
 * allgather and reduce_scatter all nranks blocks), float32, sum; warm-up, barrier, ITERS calls back
 * to back, time = the maximum over ranks of the mean; algbw = size / time; busbw = algbw * 2(n-1)/n
 * for allreduce, (n-1)/n for allgather and reduce_scatter, 1 for bcast. With -c 1 the inputs are
 * small integers ((rank + i) % 7), so the sums are exact and the output is compared exactly.
 * Collectives: MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Bcast (root 0). It
 * depends only on MPI and libc, not on strata.
 */
#include <errno.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SIZES 64
#define MAX_COLLS 8

enum { C_ALLREDUCE, C_ALLGATHER, C_REDUCE_SCATTER, C_BCAST };
static const char *const coll_names[] = {"allreduce", "allgather", "reduce_scatter", "bcast"};

typedef struct opts {
    int colls[MAX_COLLS], ncolls;
    long long sizes[MAX_SIZES];
    int nsizes;
    long long min_bytes, max_bytes, factor;
    int iters, warmup, check, json;
} opts_t;

static int rank, nranks;

static int parse_size(const char *s, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v < 0)
        return 0;
    long long mul = 1;
    if (*end == 'k' || *end == 'K')
        mul = 1LL << 10, end++;
    else if (*end == 'm' || *end == 'M')
        mul = 1LL << 20, end++;
    else if (*end == 'g' || *end == 'G')
        mul = 1LL << 30, end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end)
        return 0;
    *out = v * mul;
    return 1;
}

static void usage(void)
{
    if (rank == 0)
        fprintf(
            stderr,
            "usage: peer_mpi [-C allreduce,allgather,reduce_scatter,bcast] [--sizes LIST |\n"
            "                -b MIN -e MAX -f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1] [--json]\n");
}

static int parse(int argc, char **argv, opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->min_bytes = 8;
    o->max_bytes = 64LL << 20;
    o->factor = 2;
    o->iters = 20;
    o->warmup = 5;
    o->check = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help") || i + 1 >= argc)
            return 0;
        char *v = argv[++i];
        if (!strcmp(a, "-C")) {
            for (char *save = NULL, *t = strtok_r(v, ",", &save); t;
                 t = strtok_r(NULL, ",", &save)) {
                int k = -1;
                for (int c = 0; c < 4; c++)
                    if (!strcmp(t, coll_names[c]) || (c == C_BCAST && !strcmp(t, "broadcast")))
                        k = c;
                if (k < 0 || o->ncolls == MAX_COLLS)
                    return 0;
                o->colls[o->ncolls++] = k;
            }
        } else if (!strcmp(a, "--sizes")) {
            for (char *save = NULL, *t = strtok_r(v, ",", &save); t; t = strtok_r(NULL, ",", &save))
                if (o->nsizes == MAX_SIZES || !parse_size(t, &o->sizes[o->nsizes++]))
                    return 0;
        } else if (!strcmp(a, "-b")) {
            if (!parse_size(v, &o->min_bytes))
                return 0;
        } else if (!strcmp(a, "-e")) {
            if (!parse_size(v, &o->max_bytes))
                return 0;
        } else if (!strcmp(a, "-f")) {
            o->factor = atoll(v);
        } else if (!strcmp(a, "-n")) {
            o->iters = atoi(v);
        } else if (!strcmp(a, "-w")) {
            o->warmup = atoi(v);
        } else if (!strcmp(a, "-c")) {
            o->check = atoi(v);
        } else {
            return 0;
        }
    }
    if (o->ncolls == 0)
        o->colls[o->ncolls++] = C_ALLREDUCE;
    if (o->nsizes == 0) {
        if (o->factor < 2)
            o->factor = 2;
        for (long long b = o->min_bytes; b <= o->max_bytes && o->nsizes < MAX_SIZES; b *= o->factor)
            o->sizes[o->nsizes++] = b;
    }
    return o->iters >= 1 && o->warmup >= 0;
}

/* Element counts of one size, nccl-tests style: param is what the MPI call takes per rank. */
static void shape(int coll, long long bytes, size_t *param, size_t *send, size_t *recv,
                  size_t *total)
{
    size_t elems = (size_t)bytes / sizeof(float), blk = elems / (size_t)nranks;
    switch (coll) {
    case C_ALLGATHER:
        *param = blk, *send = blk, *recv = blk * (size_t)nranks, *total = *recv;
        break;
    case C_REDUCE_SCATTER:
        *param = blk, *send = blk * (size_t)nranks, *recv = blk, *total = *send;
        break;
    default:
        *param = elems, *send = elems, *recv = elems, *total = elems;
    }
}

static double busbw_factor(int coll)
{
    double n = nranks;
    return coll == C_ALLREDUCE ? 2 * (n - 1) / n : coll == C_BCAST ? 1 : (n - 1) / n;
}

static void run(int coll, size_t param, float *send, float *recv)
{
    int c = (int)param;
    switch (coll) {
    case C_ALLREDUCE:
        MPI_Allreduce(send, recv, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case C_ALLGATHER:
        MPI_Allgather(send, c, MPI_FLOAT, recv, c, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    case C_REDUCE_SCATTER:
        MPI_Reduce_scatter_block(send, recv, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case C_BCAST:
        MPI_Bcast(recv, c, MPI_FLOAT, 0, MPI_COMM_WORLD);
        break;
    }
}

static double sum_expect(size_t i)
{
    double s = 0;
    for (int r = 0; r < nranks; r++)
        s += (double)(((size_t)r + i) % 7);
    return s;
}

static void fill(int coll, size_t param, size_t nsend, size_t nrecv, float *send, float *recv)
{
    memset(recv, 0xA5, nrecv * sizeof(float));
    if (coll == C_BCAST) {
        if (rank == 0)
            for (size_t k = 0; k < nrecv; k++)
                recv[k] = (float)(k % 113);
    } else if (coll == C_ALLGATHER) {
        for (size_t k = 0; k < param; k++)
            send[k] = (float)(((size_t)rank * 13 + k) % 113);
    } else {
        for (size_t i = 0; i < nsend; i++)
            send[i] = (float)(((size_t)rank + i) % 7);
    }
}

static long long count_wrong(int coll, size_t param, size_t nrecv, const float *recv)
{
    long long wrong = 0;
    for (size_t k = 0; k < nrecv; k++) {
        double want;
        if (coll == C_BCAST)
            want = (double)(k % 113);
        else if (coll == C_ALLGATHER)
            want = (double)(((k / param) * 13 + k % param) % 113);
        else if (coll == C_REDUCE_SCATTER)
            want = sum_expect((size_t)rank * param + k);
        else
            want = sum_expect(k);
        wrong += recv[k] != (float)want;
    }
    return wrong;
}

static const char *impl_name(void)
{
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(v, &len);
    if (strstr(v, "Open MPI"))
        return "openmpi";
    if (strstr(v, "MPICH"))
        return "mpich";
    return "mpi";
}

static void *alloc_touched(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        return NULL;
    memset(p, 0, bytes ? bytes : 64);
    return p;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    opts_t o;
    if (!parse(argc, argv, &o)) {
        usage();
        MPI_Finalize();
        return 2;
    }
    const char *impl = impl_name();
    size_t max_send = 0, max_recv = 0;
    for (int c = 0; c < o.ncolls; c++)
        for (int s = 0; s < o.nsizes; s++) {
            size_t p, ns, nr, t;
            shape(o.colls[c], o.sizes[s], &p, &ns, &nr, &t);
            if (p > 2147483647u) {
                if (rank == 0)
                    fprintf(stderr, "peer_mpi: %lld bytes is too large for an int count\n",
                            o.sizes[s]);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            max_send = ns > max_send ? ns : max_send;
            max_recv = nr > max_recv ? nr : max_recv;
        }
    float *send = alloc_touched(max_send * sizeof(float));
    float *recv = alloc_touched(max_recv * sizeof(float));
    if (!send || !recv) {
        fprintf(stderr, "peer_mpi: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int failures = 0;
    if (rank == 0 && !o.json)
        printf("# peer_mpi (%s): nranks %d, float32 sum, iters %d, warmup %d\n"
               "# %-14s %12s %12s %11s %9s %9s %8s\n",
               impl, nranks, o.iters, o.warmup, "coll", "size(B)", "count", "time(us)", "algbw",
               "busbw", "correct");
    for (int c = 0; c < o.ncolls; c++) {
        int coll = o.colls[c];
        for (int s = 0; s < o.nsizes; s++) {
            size_t param, ns, nr, total;
            shape(coll, o.sizes[s], &param, &ns, &nr, &total);
            fill(coll, param, ns, nr, send, recv);
            for (int i = 0; i < o.warmup; i++)
                run(coll, param, send, recv);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int i = 0; i < o.iters; i++)
                run(coll, param, send, recv);
            double mine = (MPI_Wtime() - t0) * 1e6 / o.iters, us = 0;
            MPI_Allreduce(&mine, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            int correct = -1;
            if (o.check) {
                fill(coll, param, ns, nr, send, recv);
                run(coll, param, send, recv);
                int ok = count_wrong(coll, param, nr, recv) == 0;
                MPI_Allreduce(&ok, &correct, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
                failures += !correct;
            }
            size_t bytes = total * sizeof(float);
            double algbw = us > 0 ? (double)bytes / (us * 1e3) : 0,
                   busbw = algbw * busbw_factor(coll);
            if (rank != 0)
                continue;
            const char *ok = correct < 0 ? "null" : correct ? "true" : "false";
            if (o.json)
                printf("{\"impl\":\"%s\",\"coll\":\"%s\",\"size_bytes\":%zu,\"count\":%zu,"
                       "\"dtype\":\"f32\",\"op\":\"%s\",\"root\":%d,\"algo\":\"mpi-default\","
                       "\"nranks\":%d,\"iters\":%d,\"time_us\":%.3f,\"algbw_gbs\":%.4f,"
                       "\"busbw_gbs\":%.4f,\"correct\":%s}\n",
                       impl, coll_names[coll], bytes, total,
                       coll == C_BCAST || coll == C_ALLGATHER ? "none" : "sum",
                       coll == C_BCAST ? 0 : -1, nranks, o.iters, us, algbw, busbw, ok);
            else
                printf("  %-14s %12zu %12zu %11.2f %9.3f %9.3f %8s\n", coll_names[coll], bytes,
                       total, us, algbw, busbw,
                       correct < 0 ? "-"
                       : correct   ? "ok"
                                   : "FAIL");
            fflush(stdout);
        }
    }
    free(send);
    free(recv);
    MPI_Finalize();
    return failures ? 1 : 0;
}
