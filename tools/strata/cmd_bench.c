/* `strata bench`: times one collective over a range of sizes, in the manner of nccl-tests, and runs
 * under a launcher (`strata launch -n 2 -- strata bench allreduce -b 8 -e 256M -f 4`).
 *
 * Sizes mean what they mean in nccl-tests: the bytes of the collective's largest buffer, so for
 * allreduce, reduce and bcast the one buffer, and for reduce_scatter, allgather, alltoall, gather
 * and scatter the full nranks-block buffer (the per-rank count is bytes / size / nranks, rounded
 * down). For each size every rank runs `-w` warm-up calls, a barrier, then `-n` calls back to back;
 * the loop's time divided by `-n` is the rank's time, and the table shows the maximum over ranks.
 * algbw = bytes / time; busbw = algbw times the factor nccl-tests uses (its PERFORMANCE.md and, for
 * gather/scatter/alltoall, its source): allreduce 2(n-1)/n; reduce_scatter, allgather, alltoall,
 * gather, scatter (n-1)/n; bcast and reduce 1. `strata bench barrier` reports the barrier's
 * latency.
 *
 * With `-c 1` the inputs are filled per rank with small integers chosen so every partial result is
 * exact in the chosen dtype (sums stay below the dtype's largest exact integer, a product has one
 * factor 2, an average has rank offsets summing to zero), the collective runs once more after
 * timing into poisoned output, and each rank compares its output exactly with a value computed
 * locally in closed form; the verdict is reduced over ranks. Only an average in a floating type is
 * allowed 2 ulps, since dividing by nranks may be done as a multiplication by 1/nranks.
 *
 * It is a thin tool: it parses, calls the public communicator API, and prints. It does not know
 * how any collective is implemented beyond the algorithm name the communicator reports.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include "strata/cmd.h"
#include "strata/link_calib.h"
#include "strata/strata.h"

#define BENCH_MAX_SIZES 64
#define BENCH_ALIGN     64

typedef struct bench_opts {
    strata_coll_t coll;
    long long min_bytes, max_bytes, factor;
    long long sizes[BENCH_MAX_SIZES]; /* --sizes list; nsizes 0 = the -b/-e/-f range */
    int nsizes;
    int iters, warmup;
    bool check;
    strata_dtype_t dtype;
    strata_op_t op;
    int root;
    bool json;
    bool registered; /* -R 1: buffers from strata_mem_alloc */
} bench_opts_t;

/* One benchmarked size, resolved for this communicator. */
typedef struct shape {
    size_t param;      /* the count passed to the API (per rank or per block, as the API wants) */
    size_t send_count; /* elements in this rank's send buffer (on root for scatter) */
    size_t recv_count; /* elements in this rank's receive buffer (on root for gather) */
    size_t total;      /* elements nccl-tests reports: the largest buffer */
} shape_t;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: strata bench COLLECTIVE [options]     (run it under `strata launch`)\n"
            "\n"
            "COLLECTIVE: allreduce reduce bcast reduce_scatter allgather alltoall gather scatter\n"
            "            barrier\n"
            "\n"
            "options (nccl-tests style):\n"
            "  -b MIN        smallest size in bytes, K/M/G suffixes (default 8)\n"
            "  -e MAX        largest size (default 64M)\n"
            "  -f FACTOR     multiply the size by FACTOR each step (default 2)\n"
            "  --sizes LIST  explicit comma-separated sizes instead of -b/-e/-f (8,64K,1M)\n"
            "  -n ITERS      timed iterations per size (default 20)\n"
            "  -w WARMUP     warm-up iterations per size (default 5)\n"
            "  -c 0|1        check the results (default 1)\n"
            "  -d DTYPE      f32 f64 f16 bf16 i32 i64 u8 (default f32)\n"
            "  -o OP         sum prod min max avg (default sum)\n"
            "  -r ROOT       root of reduce, bcast, gather, scatter (default 0)\n"
            "  -R 0|1        1: buffers from strata_mem_alloc, which peers on the host reach\n"
            "                directly (as nccl-tests' -R registers them; default 0: malloc)\n"
            "  --json        one JSON object per size instead of the table\n"
            "\n"
            "SIZE is the collective's largest buffer, as in nccl-tests: for reduce_scatter,\n"
            "allgather, alltoall, gather and scatter it holds all nranks blocks.\n"
            "time_us is the maximum over ranks of the average time per call; algbw = size / time;\n"
            "busbw = algbw * (2(n-1)/n for allreduce; (n-1)/n for reduce_scatter, allgather,\n"
            "alltoall, gather, scatter; 1 for bcast, reduce).\n"
            "\n"
            "example: strata launch -n 2 -- strata bench allreduce -b 8 -e 256M -f 4\n");
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("strata bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n(see `strata bench --help`)\n", stderr);
    return 2;
}

/* Returns 0, 2 after a usage error, or -1 for --help. */
static int parse_args(int argc, char **argv, bench_opts_t *o)
{
    *o = (bench_opts_t){.min_bytes = 8,
                        .max_bytes = 64LL << 20,
                        .factor = 2,
                        .iters = 20,
                        .warmup = 5,
                        .check = true,
                        .dtype = STRATA_DTYPE_F32,
                        .op = STRATA_OP_SUM,
                        .root = 0};
    const char *coll = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return -1;
        if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        }
        if (a[0] != '-') {
            if (coll)
                return usage_error("unexpected argument '%s'", a);
            coll = a;
            continue;
        }
        if (i + 1 >= argc)
            return usage_error("%s needs a value", a);
        const char *v = argv[++i];
        long long n;
        if (!strcmp(a, "-b") || !strcmp(a, "-e")) {
            if (!strata_parse_size(v, &n))
                return usage_error("%s wants a size such as 8, 64K or 256M, got '%s'", a, v);
            *(a[1] == 'b' ? &o->min_bytes : &o->max_bytes) = n;
        } else if (!strcmp(a, "--sizes")) {
            char *copy = strdup(v);
            if (!copy)
                return usage_error("%s", "out of memory");
            o->nsizes = 0;
            for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
                 tok = strtok_r(NULL, ",", &save)) {
                if (o->nsizes == BENCH_MAX_SIZES || !strata_parse_size(tok, &n)) {
                    free(copy);
                    return usage_error("--sizes wants up to %d sizes such as 8,64K,1M, got '%s'",
                                       BENCH_MAX_SIZES, v);
                }
                o->sizes[o->nsizes++] = n;
            }
            free(copy);
            if (o->nsizes == 0)
                return usage_error("%s", "--sizes is empty");
        } else if (!strcmp(a, "-f")) {
            if (!cmd_parse_int(v, 1, 1 << 20, &o->factor))
                return usage_error("-f wants a whole factor >= 1, got '%s'", v);
        } else if (!strcmp(a, "-n")) {
            if (!cmd_parse_int(v, 1, INT_MAX, &n))
                return usage_error("-n wants a number of iterations >= 1, got '%s'", v);
            o->iters = (int)n;
        } else if (!strcmp(a, "-w")) {
            if (!cmd_parse_int(v, 0, INT_MAX, &n))
                return usage_error("-w wants a number of warm-up iterations >= 0, got '%s'", v);
            o->warmup = (int)n;
        } else if (!strcmp(a, "-c")) {
            if (!cmd_parse_int(v, 0, 1, &n))
                return usage_error("-c wants 0 or 1, got '%s'", v);
            o->check = n != 0;
        } else if (!strcmp(a, "-R")) {
            if (!cmd_parse_int(v, 0, 1, &n))
                return usage_error("-R wants 0 or 1, got '%s'", v);
            o->registered = n != 0;
        } else if (!strcmp(a, "-d")) {
            if (strata_dtype_parse(v, &o->dtype) != STRATA_OK)
                return usage_error("-d: unknown dtype '%s' (f32 f64 f16 bf16 i32 i64 u8)", v);
        } else if (!strcmp(a, "-o")) {
            if (strata_op_parse(v, &o->op) != STRATA_OK)
                return usage_error("-o: unknown op '%s' (sum prod min max avg)", v);
        } else if (!strcmp(a, "-r")) {
            if (!cmd_parse_int(v, 0, INT_MAX, &n))
                return usage_error("-r wants a rank >= 0, got '%s'", v);
            o->root = (int)n;
        } else {
            return usage_error("unknown option '%s'", a);
        }
    }
    if (!coll)
        return usage_error("%s", "missing COLLECTIVE (allreduce, reduce, bcast, reduce_scatter, "
                                 "allgather, alltoall, gather, scatter or barrier)");
    if (strata_coll_parse(coll, &o->coll) != STRATA_OK)
        return usage_error("unknown collective '%s'", coll);
    if (o->min_bytes > o->max_bytes && o->nsizes == 0)
        return usage_error("-b %lld is larger than -e %lld", o->min_bytes, o->max_bytes);
    if (o->factor < 2 && o->min_bytes != o->max_bytes && o->nsizes == 0)
        return usage_error("%s", "-f must be at least 2 unless -b equals -e");
    return 0;
}

/* ---- sizes --------------------------------------------------------------------------------- */

static bool has_op(strata_coll_t c)
{
    return c == STRATA_COLL_ALLREDUCE || c == STRATA_COLL_REDUCE || c == STRATA_COLL_REDUCE_SCATTER;
}

static bool has_root(strata_coll_t c)
{
    return c == STRATA_COLL_REDUCE || c == STRATA_COLL_BCAST || c == STRATA_COLL_GATHER ||
           c == STRATA_COLL_SCATTER;
}

static shape_t shape_for(strata_coll_t c, size_t bytes, size_t esize, int nranks)
{
    size_t n = (size_t)nranks, elems = bytes / esize, blk = elems / n;
    switch (c) {
    case STRATA_COLL_ALLREDUCE:
    case STRATA_COLL_REDUCE:
    case STRATA_COLL_BCAST:
        return (shape_t){elems, elems, elems, elems};
    case STRATA_COLL_REDUCE_SCATTER:
    case STRATA_COLL_SCATTER:
        return (shape_t){blk, blk * n, blk, blk * n};
    case STRATA_COLL_ALLGATHER:
    case STRATA_COLL_GATHER:
        return (shape_t){blk, blk, blk * n, blk * n};
    case STRATA_COLL_ALLTOALL:
        return (shape_t){blk, blk * n, blk * n, blk * n};
    default:
        return (shape_t){0, 0, 0, 0};
    }
}

/* The bus-bandwidth factor of nccl-tests for each collective. */
static double busbw_factor(strata_coll_t c, int nranks)
{
    double n = nranks;
    switch (c) {
    case STRATA_COLL_ALLREDUCE:
        return 2.0 * (n - 1) / n;
    case STRATA_COLL_REDUCE_SCATTER:
    case STRATA_COLL_ALLGATHER:
    case STRATA_COLL_ALLTOALL:
    case STRATA_COLL_GATHER:
    case STRATA_COLL_SCATTER:
        return (n - 1) / n;
    default:
        return 1.0;
    }
}

/* ---- element access ------------------------------------------------------------------------ */

/* ---- deterministic data and its expected reduction ----------------------------------------- */

/* What a rank contributes and what the result must be, for the reduction collectives. Values are
 * (rank + i) % m for sum, min and max, where m keeps any partial sum exact in the dtype. */
typedef struct fill {
    strata_dtype_t dtype;
    strata_op_t op;
    int nranks;
    unsigned m;    /* sum/min/max: values cycle through 0..m-1 */
    unsigned kmod; /* avg: the expected value cycles through 1..kmod */
} fill_t;

static double largest_exact(strata_dtype_t dt)
{
    switch (dt) {
    case STRATA_DTYPE_F16:
        return 2048;
    case STRATA_DTYPE_BF16:
        return 256;
    case STRATA_DTYPE_F32:
        return 16777216;
    case STRATA_DTYPE_U8:
        return 255;
    case STRATA_DTYPE_I32:
        return 2147483647.0;
    default:
        return 9007199254740992.0; // f64, i64 (as far as the double holding it is exact)
    }
}

static fill_t fill_make(strata_dtype_t dt, strata_op_t op, int nranks)
{
    fill_t f = {.dtype = dt, .op = op, .nranks = nranks, .m = 7};
    if (op == STRATA_OP_SUM || op == STRATA_OP_AVG) {
        double cap =
            largest_exact(dt) / nranks; // largest value with nranks of them summing exactly
        f.m = cap >= 6 ? 7 : (unsigned)cap + 1;
    }
    f.kmod = f.m > 3 ? f.m - 2 : 1; // avg values k-1..k+1 stay inside 0..m-1
    return f;
}

static double red_value(const fill_t *f, int rank, size_t i)
{
    switch (f->op) {
    case STRATA_OP_PROD:
        return (((size_t)rank + i) % (size_t)f->nranks == 0) ? 2 : 1;
    case STRATA_OP_AVG: {
        // Offsets +1/-1 in pairs (0 for the last rank of an odd count) sum to zero over ranks.
        int d = (f->nranks % 2 && rank == f->nranks - 1) ? 0 : (rank % 2 ? -1 : 1);
        return (double)(1 + i % f->kmod) + d;
    }
    default:
        return (double)(((size_t)rank + i) % f->m);
    }
}

static double red_expect(const fill_t *f, size_t i)
{
    size_t n = (size_t)f->nranks, m = f->m, start = i % m;
    switch (f->op) {
    case STRATA_OP_PROD:
        return 2;
    case STRATA_OP_AVG:
        return (double)(1 + i % f->kmod);
    case STRATA_OP_MIN:
        return (n >= m || start + n - 1 >= m) ? 0 : (double)start;
    case STRATA_OP_MAX:
        return (n >= m || start + n - 1 >= m) ? (double)(m - 1) : (double)(start + n - 1);
    default: {
        double s = (double)(n / m) * (double)(m * (m - 1) / 2);
        for (size_t t = 0; t < n % m; t++)
            s += (double)((start + t) % m);
        return s;
    }
    }
}

/* Data moved unchanged (bcast, gather, ...): block `dst` of what rank `src` sends, element k. */
static double data_value(int src, int dst, size_t k)
{
    return (double)(((size_t)src * 13 + (size_t)dst * 5 + k) % 113);
}

static bool close_enough(const fill_t *f, double got, double want)
{
    if (got == want)
        return true;
    if (f->op != STRATA_OP_AVG)
        return false;
    double ulp;
    switch (f->dtype) {
    case STRATA_DTYPE_F32:
        ulp = 1.0 / (1 << 23);
        break;
    case STRATA_DTYPE_F64:
        ulp = 1.0 / 4503599627370496.0;
        break;
    case STRATA_DTYPE_F16:
        ulp = 1.0 / (1 << 10);
        break;
    case STRATA_DTYPE_BF16:
        ulp = 1.0 / (1 << 7);
        break;
    default:
        return false;
    }
    double d = got > want ? got - want : want - got;
    return d <= 2 * ulp * want;
}

/* Fills this rank's inputs for a run that will be checked; poisons every output. */
static void fill_inputs(const bench_opts_t *o, const fill_t *f, const shape_t *sh, int rank,
                        int nranks, void *send, void *recv, size_t esize)
{
    strata_dtype_t dt = o->dtype;
    memset(recv, 0xA5, sh->recv_count * esize);
    switch (o->coll) {
    case STRATA_COLL_ALLREDUCE:
    case STRATA_COLL_REDUCE:
    case STRATA_COLL_REDUCE_SCATTER:
        for (size_t i = 0; i < sh->send_count; i++)
            strata_dtype_set(dt, send, i, red_value(f, rank, i));
        break;
    case STRATA_COLL_BCAST:
        if (rank == o->root)
            for (size_t k = 0; k < sh->recv_count; k++)
                strata_dtype_set(dt, recv, k, data_value(rank, 0, k));
        break;
    case STRATA_COLL_ALLGATHER:
    case STRATA_COLL_GATHER:
        for (size_t k = 0; k < sh->send_count; k++)
            strata_dtype_set(dt, send, k, data_value(rank, 0, k));
        break;
    case STRATA_COLL_ALLTOALL:
    case STRATA_COLL_SCATTER:
        if (o->coll == STRATA_COLL_SCATTER && rank != o->root)
            break;
        for (int j = 0; j < nranks; j++)
            for (size_t k = 0; k < sh->param; k++)
                strata_dtype_set(dt, send, (size_t)j * sh->param + k, data_value(rank, j, k));
        break;
    default:
        break;
    }
}

/* Counts wrong elements in this rank's output. */
static size_t count_wrong(const bench_opts_t *o, const fill_t *f, const shape_t *sh, int rank,
                          int nranks, const void *recv)
{
    strata_dtype_t dt = o->dtype;
    size_t wrong = 0;
    switch (o->coll) {
    case STRATA_COLL_ALLREDUCE:
    case STRATA_COLL_REDUCE:
        if (o->coll == STRATA_COLL_REDUCE && rank != o->root)
            break;
        for (size_t i = 0; i < sh->recv_count; i++)
            wrong += !close_enough(f, strata_dtype_get(dt, recv, i), red_expect(f, i));
        break;
    case STRATA_COLL_REDUCE_SCATTER:
        for (size_t k = 0; k < sh->recv_count; k++)
            wrong +=
                !close_enough(f, strata_dtype_get(dt, recv, k), red_expect(f, (size_t)rank * sh->param + k));
        break;
    case STRATA_COLL_BCAST:
        for (size_t k = 0; k < sh->recv_count; k++)
            wrong += strata_dtype_get(dt, recv, k) != data_value(o->root, 0, k);
        break;
    case STRATA_COLL_ALLGATHER:
    case STRATA_COLL_GATHER:
        if (o->coll == STRATA_COLL_GATHER && rank != o->root)
            break;
        for (int j = 0; j < nranks; j++)
            for (size_t k = 0; k < sh->param; k++)
                wrong += strata_dtype_get(dt, recv, (size_t)j * sh->param + k) != data_value(j, 0, k);
        break;
    case STRATA_COLL_ALLTOALL:
        for (int i = 0; i < nranks; i++)
            for (size_t k = 0; k < sh->param; k++)
                wrong += strata_dtype_get(dt, recv, (size_t)i * sh->param + k) != data_value(i, rank, k);
        break;
    case STRATA_COLL_SCATTER:
        for (size_t k = 0; k < sh->param; k++)
            wrong += strata_dtype_get(dt, recv, k) != data_value(o->root, rank, k);
        break;
    default:
        break;
    }
    return wrong;
}

/* ---- running ------------------------------------------------------------------------------- */

static strata_status_t run_once(strata_comm_t *comm, const bench_opts_t *o, const shape_t *sh,
                                void *send, void *recv)
{
    size_t c = sh->param;
    strata_dtype_t dt = o->dtype;
    switch (o->coll) {
    case STRATA_COLL_ALLREDUCE:
        return strata_allreduce(comm, send, recv, c, dt, o->op);
    case STRATA_COLL_REDUCE:
        return strata_reduce(comm, send, recv, c, dt, o->op, o->root);
    case STRATA_COLL_BCAST:
        return strata_bcast(comm, recv, c, dt, o->root);
    case STRATA_COLL_REDUCE_SCATTER:
        return strata_reduce_scatter(comm, send, recv, c, dt, o->op);
    case STRATA_COLL_ALLGATHER:
        return strata_allgather(comm, send, recv, c, dt);
    case STRATA_COLL_ALLTOALL:
        return strata_alltoall(comm, send, recv, c, dt);
    case STRATA_COLL_GATHER:
        return strata_gather(comm, send, recv, c, dt, o->root);
    case STRATA_COLL_SCATTER:
        return strata_scatter(comm, send, recv, c, dt, o->root);
    case STRATA_COLL_BARRIER:
        return strata_barrier(comm);
    default:
        return STRATA_ERR_INVALID_ARG;
    }
}

/* Reports an API failure, tells the other ranks (so they fail now rather than at their timeout)
 * and releases the communicator. Returns the exit code. */
static int api_fail(strata_comm_t *comm, const char *what, size_t bytes)
{
    char msg[768];
    snprintf(msg, sizeof msg, "bench: %s (%zu bytes) failed on rank %d: %s", what, bytes,
             comm ? strata_comm_rank(comm) : -1, strata_last_error());
    cmd_fail(NULL, "%s", msg);
    if (comm) {
        strata_comm_abort(comm, msg);
        strata_comm_destroy(comm);
    }
    return 1;
}

typedef struct result {
    size_t bytes, count;
    const char *algo;
    double time_us, algbw, busbw;
    double model_us; /* the cost model's prediction for this algorithm (negative: none) */
    int correct;     /* 1, 0, or -1 = not checked */
} result_t;

static void print_header(const bench_opts_t *o, int nranks, const strata_link_calib_t *calib)
{
    printf(
        "# strata bench %s: nranks %d, dtype %s, op %s, root %d, iters %d, warmup %d, check %d\n",
        strata_coll_name(o->coll), nranks,
        o->coll == STRATA_COLL_BARRIER ? "none" : strata_dtype_name(o->dtype),
        has_op(o->coll) ? strata_op_name(o->op) : "none", has_root(o->coll) ? o->root : -1,
        o->iters, o->warmup, o->check ? 1 : 0);
    printf(
        "# transport %s (STRATA_COMM_TRANSPORT); size = largest buffer, time = max over ranks of "
        "the mean\n#\n",
        strata_knob_value("STRATA_COMM_TRANSPORT"));
    if (calib->done) { // the links the model prices with were measured as the communicator began
        printf("# links calibrated at creation in %.3f s (STRATA_TOPO_CALIBRATE):\n",
               calib->seconds);
        char *table = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&table, &len);
        if (m) {
            strata_link_calib_describe(calib, m);
            fclose(m);
            for (char *line = table, *nl; line && *line; line = nl ? nl + 1 : NULL) {
                nl = strchr(line, '\n');
                printf("#   %.*s\n", nl ? (int)(nl - line) : (int)strlen(line), line);
            }
        }
        free(table);
        printf("#\n");
    }
    printf("# %12s %12s %6s %6s %5s %18s %11s %9s %9s %11s %8s\n", "size", "count", "type",
           "redop", "root", "algo", "time", "algbw", "busbw", "model", "correct");
    printf("# %12s %12s %6s %6s %5s %18s %11s %9s %9s %11s %8s\n", "(B)", "(elements)", "", "", "",
           "", "(us)", "(GB/s)", "(GB/s)", "(us)", "");
}

static void print_result(const bench_opts_t *o, int nranks, const result_t *r,
                         const strata_link_calib_t *calib)
{
    const char *op = has_op(o->coll) ? strata_op_name(o->op) : "none";
    const char *dt = o->coll == STRATA_COLL_BARRIER ? "none" : strata_dtype_name(o->dtype);
    int root = has_root(o->coll) ? o->root : -1;
    if (o->json) {
        const char *ok = r->correct < 0 ? "null" : r->correct ? "true" : "false";
        printf("{\"impl\":\"strata\",\"coll\":\"%s\",\"transport\":\"%s\",\"size_bytes\":%zu,"
               "\"count\":%zu,\"dtype\":\"%s\",\"op\":\"%s\",\"root\":%d,\"algo\":\"%s\","
               "\"nranks\":%d,\"iters\":%d,\"time_us\":%.3f,\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,"
               "\"model_us\":%.3f,\"calib_s\":%.3f,\"registered\":%s,\"correct\":%s}\n",
               strata_coll_name(o->coll), strata_knob_value("STRATA_COMM_TRANSPORT"), r->bytes,
               r->count, dt, op, root, r->algo, nranks, o->iters, r->time_us, r->algbw, r->busbw,
               r->model_us, calib->done ? calib->seconds : 0.0, o->registered ? "true" : "false",
               ok);
    } else {
        const char *ok = r->correct < 0 ? "-" : r->correct ? "ok" : "FAIL";
        printf("  %12zu %12zu %6s %6s %5d %18s %11.2f %9.3f %9.3f %11.2f %8s\n", r->bytes, r->count,
               dt, op, root, r->algo, r->time_us, r->algbw, r->busbw, r->model_us, ok);
    }
    fflush(stdout);
}

/* Returns the status of `expr` from the calling function when it fails. */
#define TRY(expr)                                                                                  \
    do {                                                                                           \
        strata_status_t rc_ = (expr);                                                              \
        if (rc_ < 0)                                                                               \
            return rc_;                                                                            \
    } while (0)

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Times one shape. On an API failure returns the status with *what naming the step. */
static strata_status_t bench_size(strata_comm_t *comm, const bench_opts_t *o, const fill_t *f,
                                  const shape_t *sh, void *send, void *recv, result_t *res,
                                  const char **what)
{
    int rank = strata_comm_rank(comm), nranks = strata_comm_size(comm);
    size_t esize = strata_dtype_size(o->dtype);
    if (o->coll != STRATA_COLL_BARRIER)
        fill_inputs(o, f, sh, rank, nranks, send, recv, esize);
    // The barrier that starts the timing runs once before too, so its first-use costs (code
    // paths and pages touched for the first time) do not land in the timed calls.
    *what = "barrier before warm-up";
    TRY(strata_barrier(comm));
    *what = strata_coll_name(o->coll);
    for (int i = 0; i < o->warmup; i++)
        TRY(run_once(comm, o, sh, send, recv));
    *what = "barrier before timing";
    TRY(strata_barrier(comm));
    *what = strata_coll_name(o->coll);
    uint64_t t0 = now_ns();
    for (int i = 0; i < o->iters; i++)
        TRY(run_once(comm, o, sh, send, recv));
    double mine = (double)(now_ns() - t0) / 1e3 / o->iters, slowest = 0;
    *what = "allreduce of the times";
    TRY(strata_allreduce(comm, &mine, &slowest, 1, STRATA_DTYPE_F64, STRATA_OP_MAX));

    res->time_us = slowest;
    res->bytes = sh->total * esize;
    res->count = sh->total;
    res->algbw = slowest > 0 ? (double)res->bytes / (slowest * 1e3) : 0; // bytes/ns = GB/s
    res->busbw = res->algbw * busbw_factor(o->coll, nranks);
    res->correct = -1;
    if (o->check && o->coll != STRATA_COLL_BARRIER) {
        fill_inputs(o, f, sh, rank, nranks, send, recv, esize);
        *what = strata_coll_name(o->coll);
        TRY(run_once(comm, o, sh, send, recv));
        int32_t ok = count_wrong(o, f, sh, rank, nranks, recv) == 0, all = 0;
        *what = "allreduce of the check";
        TRY(strata_allreduce(comm, &ok, &all, 1, STRATA_DTYPE_I32, STRATA_OP_MIN));
        res->correct = all != 0;
    }
    return STRATA_OK;
}

/* A buffer with every page faulted in before anything is timed: from malloc, or with -R 1 from
 * strata_mem_alloc (which faults its pages in itself). */
static void *bench_alloc(strata_comm_t *comm, const bench_opts_t *o, size_t bytes)
{
    void *p = NULL;
    if (o->registered)
        return strata_mem_alloc(comm, bytes ? bytes : BENCH_ALIGN, &p) == STRATA_OK ? p : NULL;
    if (posix_memalign(&p, BENCH_ALIGN, bytes ? bytes : BENCH_ALIGN) != 0)
        return NULL;
    memset(p, 0, bytes ? bytes : BENCH_ALIGN);
    return p;
}

static void bench_free(strata_comm_t *comm, const bench_opts_t *o, void *p)
{
    if (o->registered)
        strata_mem_free(comm, p);
    else
        free(p);
}

int cmd_bench(int argc, char **argv)
{
    bench_opts_t o;
    int rc = parse_args(argc, argv, &o);
    if (rc < 0) {
        usage(stdout);
        return 0;
    }
    if (rc)
        return rc;

    strata_comm_t *comm = NULL;
    if (cmd_comm_from_env("bench", "strata launch -n 2 -- strata bench allreduce", &comm) != 0)
        return 1;
    int rank = strata_comm_rank(comm), nranks = strata_comm_size(comm);
    if (has_root(o.coll) && o.root >= nranks) {
        if (rank == 0)
            usage_error("-r %d: the root must be below nranks = %d", o.root, nranks);
        strata_comm_destroy(comm);
        return 2;
    }

    // The sizes to run, and buffers large enough for the largest.
    long long sizes[BENCH_MAX_SIZES];
    int nsizes = 0;
    if (o.coll == STRATA_COLL_BARRIER) {
        sizes[nsizes++] = 0;
    } else if (o.nsizes) {
        memcpy(sizes, o.sizes, sizeof sizes);
        nsizes = o.nsizes;
    } else {
        for (long long b = o.min_bytes; b <= o.max_bytes && nsizes < BENCH_MAX_SIZES;
             b *= o.factor) {
            sizes[nsizes++] = b;
            if (o.factor < 2 || b > LLONG_MAX / o.factor)
                break;
        }
    }
    size_t esize = strata_dtype_size(o.dtype), max_send = 0, max_recv = 0;
    for (int i = 0; i < nsizes; i++) {
        shape_t sh = shape_for(o.coll, (size_t)sizes[i], esize, nranks);
        max_send = sh.send_count * esize > max_send ? sh.send_count * esize : max_send;
        max_recv = sh.recv_count * esize > max_recv ? sh.recv_count * esize : max_recv;
    }
    void *send = bench_alloc(comm, &o, max_send), *recv = bench_alloc(comm, &o, max_recv);
    if (!send || !recv) {
        bench_free(comm, &o, send);
        bench_free(comm, &o, recv);
        char msg[160];
        snprintf(msg, sizeof msg, "out of memory for %zu + %zu bytes of buffers", max_send,
                 max_recv);
        cmd_fail(NULL, "bench: %s", msg);
        strata_comm_abort(comm, msg);
        strata_comm_destroy(comm);
        return 1;
    }

    if (rank == 0 && !o.json)
        print_header(&o, nranks, strata_comm_calibration(comm));
    fill_t f = fill_make(o.dtype, o.op, nranks);
    int failed = 0, done = 0;
    double bus_sum = 0, last_us = 0;
    for (int i = 0; i < nsizes; i++) {
        shape_t sh = shape_for(o.coll, (size_t)sizes[i], esize, nranks);
        size_t bytes = sh.total * esize;
        result_t res = {.algo = strata_comm_algo_for(comm, o.coll, bytes, o.registered),
                        .model_us = strata_comm_predict(comm, o.coll, bytes, o.registered) * 1e6};
        const char *what = "";
        if (bench_size(comm, &o, &f, &sh, send, recv, &res, &what) != STRATA_OK) {
            bench_free(comm, &o, send);
            bench_free(comm, &o, recv);
            return api_fail(comm, what, sh.total * esize);
        }
        if (!res.algo)
            res.algo = "?";
        failed += res.correct == 0;
        bus_sum += res.busbw;
        last_us = res.time_us;
        done++;
        if (rank == 0)
            print_result(&o, nranks, &res, strata_comm_calibration(comm));
    }
    if (rank == 0 && !o.json) {
        if (o.coll != STRATA_COLL_BARRIER)
            printf("# avg bus bandwidth: %.3f GB/s over %d sizes\n", done ? bus_sum / done : 0,
                   done);
        else
            printf("# barrier latency: %.2f us\n", last_us);
        if (o.check && o.coll != STRATA_COLL_BARRIER)
            printf("# %s\n", failed ? "CHECK FAILED" : "all results correct");
    }
    if (rank == 0 && failed)
        cmd_fail(NULL, "bench: %d of %d sizes gave wrong results", failed, done);
    fflush(stdout);
    bench_free(comm, &o, send);
    bench_free(comm, &o, recv);
    // Hold every rank until rank 0 has printed: a launcher stops the job at the first non-zero
    // exit, and rank 0's verdict must not be cut off by another rank leaving first.
    strata_status_t brc = strata_barrier(comm);
    strata_comm_destroy(comm);
    if (brc != STRATA_OK)
        return cmd_fail(NULL, "bench: final barrier: %s", strata_last_error());
    return failed ? 1 : 0;
}
