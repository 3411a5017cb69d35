/* `strata bench`: times one collective over a range of sizes the way nccl-tests does, with
 * nccl-tests' options and output, so scripts written for nccl-tests run unchanged; runs under a
 * launcher (`strata launch -n 2 -- strata bench allreduce -b 8 -e 256M -f 4`).
 *
 * For every dtype (-d, or all), op (-o, or all; reductions only) and size, two passes as in
 * nccl-tests: out of place, then in place (bench_data.h says where the buffers sit). A pass runs
 * a barrier, `-w` warm-up calls, a barrier, then `-n` x `-m` timed calls (`-G N` repeats the timed
 * loop N times, as N CUDA-graph launches would; `-z 1` puts a barrier after every call). The
 * rank's time per call is combined over ranks by `-a` (0 rank 0's, 1 the average, the default, 2
 * the minimum, 3 the maximum); algbw = bytes / time, busbw = algbw x the nccl-tests factor. With
 * `-c N` the pass then runs N more times on fresh inputs into poisoned outputs and counts the
 * wrong elements over all ranks (#wrong). The table is nccl-tests' with strata's columns after
 * it (the algorithm the communicator picked, the cost model's time), and its footer lines:
 * "# Out of bounds values : N OK|FAILED" (passes with wrong elements, counted per rank) and
 * "# Avg bus bandwidth    : X" (the mean busbw of all passes), then strata's own verdict.
 *
 * It is a thin tool: it parses, calls the public communicator API, and prints. It does not know how
 * any collective is implemented beyond the algorithm name the communicator reports.
 */
#include <getopt.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "strata/bench_data.h"
#include "strata/cmd.h"
#include "strata/link_calib.h"
#include "strata/strata.h"

#define BENCH_MAX_SIZES 4096
#define BENCH_ALIGN     64

typedef enum average { AVG_RANK0 = 0, AVG_MEAN, AVG_MIN, AVG_MAX } average_t;

typedef struct bench_opts {
    strata_coll_t coll;
    long long min_bytes, max_bytes, factor, step;
    bool factor_given, step_given;
    long long *sizes; /* --sizes list (owned); nsizes 0 = the -b/-e/-f/-i range */
    int nsizes;
    int iters, agg, warmup, check, graphs, timeout_s;
    bool blocking, cputime;
    average_t average;
    strata_dtype_t dtypes[STRATA_DTYPE_COUNT]; /* -d: one, or all */
    int ndtypes;
    strata_op_t ops[STRATA_OP_COUNT]; /* -o: one, or all */
    int nops;
    int root;
    bool json;
    bool registered; /* -R 1: buffers from strata_mem_alloc */
    int zero_pct;    /* --zero-blocks: percent of 8 KiB blocks that are all zero */
} bench_opts_t;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: strata bench COLLECTIVE [options]     (run it under `strata launch`)\n"
            "\n"
            "COLLECTIVE: allreduce reduce bcast reduce_scatter allgather alltoall gather scatter\n"
            "            barrier (nccl-tests names also: all_reduce, broadcast, all_gather, ...)\n"
            "\n"
            "nccl-tests options (short or long form, same meaning):\n"
            "  -b,--minbytes N       smallest size in bytes, K/M/G suffixes (default 8)\n"
            "  -e,--maxbytes N       largest size (default 64M)\n"
            "  -f,--stepfactor F     multiply the size by F each step (default 2)\n"
            "  -i,--stepbytes N      add N bytes each step instead (when -f is not given or is 1)\n"
            "  -n,--iters N          timed iterations per size (default 20)\n"
            "  -m,--agg_iters N      calls per timed iteration (default 1)\n"
            "  -w,--warmup_iters N   warm-up iterations per size and pass (default 5)\n"
            "  -c,--check N          check the results N times per pass, 0 = no check (default 1)\n"
            "  -d,--datatype T       float double half bfloat16 int32 int64 uint8 (or f32 f64 f16\n"
            "                        bf16 i32 i64 u8), or all (default float)\n"
            "  -o,--op OP            sum prod min max avg, or all (default sum)\n"
            "  -r,--root N           root of reduce, bcast, gather, scatter (default 0)\n"
            "  -a,--average 0|1|2|3  time over ranks: 0 rank 0's, 1 average, 2 min, 3 max "
            "(default 1)\n"
            "  -z,--blocking 0|1     1: a barrier after every call\n"
            "  -G,--cudagraph N      repeat the timed loop N times (there are no graphs on a CPU)\n"
            "  -C,--report_cputime 0|1  name the time column cputime (calls block: the same)\n"
            "  -T,--timeout S        give up on a call after S seconds (0: STRATA_COMM_TIMEOUT_MS)\n"
            "  -R,--local_register 0|1|2  1, 2: buffers from strata_mem_alloc, which peers on the\n"
            "                        host reach directly (default 0: malloc)\n"
            "  -g,--ngpus 1  -t,--nthreads 1  -p,--parallel_init 0|1  -y,--stream_null 0|1\n"
            "                        accepted for nccl-tests scripts: one rank per process, no\n"
            "                        streams; other counts are refused\n"
            "strata's own:\n"
            "  --sizes LIST          explicit comma-separated sizes instead of -b/-e/-f (8,64K,1M)\n"
            "  --json                one JSON object per size instead of the table\n"
            "  --zero-blocks PCT     PCT percent of the inputs' 8 KiB blocks are all zero on every\n"
            "                        rank (sparse gradients; sum only): what the pool's zero\n"
            "                        filter skips\n"
            "\n"
            "SIZE is the collective's largest buffer, as in nccl-tests: for reduce_scatter,\n"
            "allgather, alltoall, gather and scatter it holds all nranks blocks. Each size runs\n"
            "out of place, then in place. algbw = size / time; busbw = algbw * (2(n-1)/n for\n"
            "allreduce; (n-1)/n for reduce_scatter, allgather, alltoall, gather, scatter; 1 for\n"
            "bcast, reduce). #wrong: wrong elements over all ranks (N/A without -c).\n"
            "NCCL_TESTS_MIN_BW=X fails the run when the average bus bandwidth is below 0.9 X.\n"
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

/* ---- names as nccl-tests prints and takes them --------------------------------------------------- */

/* nccl-tests' order of its types, those strata has; the name it prints for each. */
static const struct {
    strata_dtype_t dtype;
    const char *name;
} nccl_types[] = {
    {STRATA_DTYPE_U8, "uint8"},  {STRATA_DTYPE_I32, "int32"},  {STRATA_DTYPE_I64, "int64"},
    {STRATA_DTYPE_F16, "half"},  {STRATA_DTYPE_F32, "float"},  {STRATA_DTYPE_F64, "double"},
    {STRATA_DTYPE_BF16, "bfloat16"},
};
static const strata_op_t nccl_ops[] = {STRATA_OP_SUM, STRATA_OP_PROD, STRATA_OP_MAX, STRATA_OP_MIN,
                                       STRATA_OP_AVG};

static const char *type_name(strata_dtype_t dt)
{
    for (size_t i = 0; i < sizeof nccl_types / sizeof nccl_types[0]; i++)
        if (nccl_types[i].dtype == dt)
            return nccl_types[i].name;
    return strata_dtype_name(dt);
}

static int parse_dtype(const char *v, bench_opts_t *o)
{
    o->ndtypes = 0;
    if (!strcmp(v, "all")) {
        for (size_t i = 0; i < sizeof nccl_types / sizeof nccl_types[0]; i++)
            o->dtypes[o->ndtypes++] = nccl_types[i].dtype;
        return 0;
    }
    if (!strcmp(v, "int8") || !strcmp(v, "uint32") || !strcmp(v, "uint64") || !strcmp(v, "char") ||
        !strcmp(v, "int") || !strncmp(v, "fp8", 3) || !strncmp(v, "f8", 2))
        return usage_error("-d %s: strata has no such type; it has float double half bfloat16 "
                           "int32 int64 uint8 (or all)", v);
    if (strata_dtype_parse(v, &o->dtypes[0]) != STRATA_OK)
        return usage_error("-d: unknown type '%s' (float double half bfloat16 int32 int64 uint8, "
                           "f32 f64 f16 bf16 i32 i64 u8, or all)", v);
    o->ndtypes = 1;
    return 0;
}

static int parse_op(const char *v, bench_opts_t *o)
{
    o->nops = 0;
    if (!strcmp(v, "all")) {
        for (size_t i = 0; i < sizeof nccl_ops / sizeof nccl_ops[0]; i++)
            o->ops[o->nops++] = nccl_ops[i];
        return 0;
    }
    if (!strcmp(v, "mulsum"))
        return usage_error("-o mulsum: strata has no pre-multiplied sum (sum prod min max avg, or "
                           "all)");
    if (strata_op_parse(v, &o->ops[0]) != STRATA_OK)
        return usage_error("-o: unknown op '%s' (sum prod min max avg, or all)", v);
    o->nops = 1;
    return 0;
}

/* nccl-tests' binaries are all_reduce_perf, broadcast_perf, ...: take their spellings too. */
static strata_status_t parse_coll(const char *v, strata_coll_t *out)
{
    static const struct {
        const char *alias, *name;
    } alias[] = {{"all_reduce", "allreduce"}, {"all_gather", "allgather"}, {"broadcast", "bcast"},
                 {"alltoall", "alltoall"},   {"all_to_all", "alltoall"}};
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        if (!strcmp(v, alias[i].alias))
            return strata_coll_parse(alias[i].name, out);
    return strata_coll_parse(v, out);
}

/* ---- options ------------------------------------------------------------------------------------- */

static int int_arg(const char *flag, const char *v, long long lo, long long hi, int *out)
{
    long long n;
    if (!cmd_parse_int(v, lo, hi, &n))
        return usage_error("%s wants a whole number from %lld to %lld, got '%s'", flag, lo, hi, v);
    *out = (int)n;
    return 0;
}

static int size_arg(const char *flag, const char *v, long long *out)
{
    if (!strata_parse_size(v, out) || *out < 0)
        return usage_error("%s wants a size in bytes such as 8, 64K or 256M, got '%s'", flag, v);
    return 0;
}

/* A count nccl-tests takes that strata has one of (-g GPUs per thread, -t threads per process). */
static int one_only(const char *flag, const char *v, const char *what)
{
    int n = 1;
    if (int_arg(flag, v, 0, INT_MAX, &n))
        return 2;
    if (n != 1)
        return usage_error("%s %d: a strata rank is one process driving one CPU, so %s can only "
                           "be 1; for more, start more ranks with the launcher (strata launch -n N "
                           "-- strata bench ...)", flag, n, what);
    return 0;
}

/* Returns 0, 2 after a usage error, or -1 for --help. */
static int parse_args(int argc, char **argv, bench_opts_t *o)
{
    *o = (bench_opts_t){.min_bytes = 8, .max_bytes = 64LL << 20, .factor = 2, .step = 1 << 20,
                        .iters = 20, .agg = 1, .warmup = 5, .check = 1, .average = AVG_MEAN,
                        .dtypes = {STRATA_DTYPE_F32}, .ndtypes = 1, .ops = {STRATA_OP_SUM},
                        .nops = 1};
    enum { OPT_SIZES = 1000, OPT_JSON, OPT_ZERO };
    static const struct option longopts[] = {
        {"nthreads", 1, 0, 't'},     {"ngpus", 1, 0, 'g'},          {"minbytes", 1, 0, 'b'},
        {"maxbytes", 1, 0, 'e'},     {"stepbytes", 1, 0, 'i'},      {"stepfactor", 1, 0, 'f'},
        {"iters", 1, 0, 'n'},        {"agg_iters", 1, 0, 'm'},      {"warmup_iters", 1, 0, 'w'},
        {"parallel_init", 1, 0, 'p'}, {"check", 1, 0, 'c'},         {"op", 1, 0, 'o'},
        {"datatype", 1, 0, 'd'},     {"root", 1, 0, 'r'},           {"blocking", 1, 0, 'z'},
        {"stream_null", 1, 0, 'y'},  {"timeout", 1, 0, 'T'},        {"cudagraph", 1, 0, 'G'},
        {"report_cputime", 1, 0, 'C'}, {"average", 1, 0, 'a'},      {"output_file", 1, 0, 'F'},
        {"local_register", 1, 0, 'R'}, {"help", 0, 0, 'h'},        {"sizes", 1, 0, OPT_SIZES},
        {"json", 0, 0, OPT_JSON},    {"zero-blocks", 1, 0, OPT_ZERO}, {0, 0, 0, 0}};
    int c, flag01 = 0, rc = 0;
    optind = 0; // GNU getopt: full reinitialisation
    opterr = 0;
    while (rc == 0 &&
           (c = getopt_long(argc, argv, ":t:g:b:e:i:f:n:m:w:p:c:o:d:r:z:y:T:G:C:a:F:R:h", longopts,
                            NULL)) != -1) {
        const char *v = optarg;
        switch (c) {
        case 'h':
            return -1;
        case 't':
            rc = one_only("-t", v, "the number of threads");
            break;
        case 'g':
            rc = one_only("-g", v, "the number of devices per rank");
            break;
        case 'b':
            rc = size_arg("-b", v, &o->min_bytes);
            break;
        case 'e':
            rc = size_arg("-e", v, &o->max_bytes);
            break;
        case 'i':
            rc = size_arg("-i", v, &o->step);
            o->step_given = true;
            break;
        case 'f': {
            int f = 2;
            rc = int_arg("-f", v, 1, 1 << 20, &f);
            o->factor = f;
            o->factor_given = true;
            break;
        }
        case 'n':
            rc = int_arg("-n", v, 1, INT_MAX, &o->iters);
            break;
        case 'm':
            rc = int_arg("-m", v, 1, INT_MAX, &o->agg);
            break;
        case 'w':
            rc = int_arg("-w", v, 0, INT_MAX, &o->warmup);
            break;
        case 'c':
            rc = int_arg("-c", v, 0, 1000, &o->check);
            break;
        case 'p':
        case 'y':
            rc = int_arg(c == 'p' ? "-p" : "-y", v, 0, 1, &flag01);
            break;
        case 'z':
            rc = int_arg("-z", v, 0, 1, &flag01);
            o->blocking = flag01;
            break;
        case 'C':
            rc = int_arg("-C", v, 0, 1, &flag01);
            o->cputime = flag01;
            break;
        case 'G':
            rc = int_arg("-G", v, 0, 1 << 20, &o->graphs);
            break;
        case 'T':
            rc = int_arg("-T", v, 0, INT_MAX / 1000, &o->timeout_s);
            break;
        case 'a': {
            int a = AVG_MEAN;
            rc = int_arg("-a", v, 0, 3, &a);
            o->average = (average_t)a;
            break;
        }
        case 'R':
            rc = int_arg("-R", v, 0, 2, &flag01);
            o->registered = flag01 != 0;
            break;
        case 'F':
            rc = usage_error("-F %s: strata writes no CSV file; --json gives every number", v);
            break;
        case 'd':
            rc = parse_dtype(v, o);
            break;
        case 'o':
            rc = parse_op(v, o);
            break;
        case 'r':
            rc = int_arg("-r", v, 0, INT_MAX, &o->root);
            break;
        case OPT_SIZES: {
            free(o->sizes);
            o->sizes = calloc(BENCH_MAX_SIZES, sizeof *o->sizes);
            char *copy = strdup(v);
            if (!o->sizes || !copy) {
                free(copy);
                return usage_error("%s", "out of memory");
            }
            o->nsizes = 0;
            for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok && rc == 0;
                 tok = strtok_r(NULL, ",", &save))
                if (o->nsizes == BENCH_MAX_SIZES || !strata_parse_size(tok, &o->sizes[o->nsizes++]))
                    rc = usage_error("--sizes wants up to %d sizes such as 8,64K,1M, got '%s'",
                                     BENCH_MAX_SIZES, v);
            free(copy);
            if (rc == 0 && o->nsizes == 0)
                rc = usage_error("%s", "--sizes is empty");
            break;
        }
        case OPT_JSON:
            o->json = true;
            break;
        case OPT_ZERO:
            rc = int_arg("--zero-blocks", v, 0, 100, &o->zero_pct);
            break;
        case ':':
            rc = usage_error("%s needs a value", argv[optind - 1]);
            break;
        default:
            rc = usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (rc)
        return rc;
    if (optind >= argc)
        return usage_error("%s", "missing COLLECTIVE (allreduce, reduce, bcast, reduce_scatter, "
                                 "allgather, alltoall, gather, scatter or barrier)");
    if (optind + 1 < argc)
        return usage_error("unexpected argument '%s'", argv[optind + 1]);
    if (parse_coll(argv[optind], &o->coll) != STRATA_OK)
        return usage_error("unknown collective '%s'", argv[optind]);
    if (o->zero_pct && (!bench_has_op(o->coll) || o->nops != 1 || o->ops[0] != STRATA_OP_SUM))
        return usage_error("%s", "--zero-blocks is for reductions with -o sum");
    if (o->nsizes)
        return 0;
    if (o->min_bytes > o->max_bytes)
        return usage_error("-b %lld is larger than -e %lld", o->min_bytes, o->max_bytes);
    // As nccl-tests: multiply by -f when it is above 1, else add -i. A lone -i means adding.
    if (o->step_given && !o->factor_given)
        o->factor = 1;
    if (o->factor < 2 && o->step < 1 && o->min_bytes != o->max_bytes)
        return usage_error("%s", "-i must be at least 1 when sizes are added (-f 1)");
    return 0;
}

/* The sizes to run, from --sizes or the range; NULL with *n = -1 when there are too many. */
static long long *size_list(const bench_opts_t *o, int *n)
{
    long long *s = malloc(BENCH_MAX_SIZES * sizeof *s);
    *n = 0;
    if (!s)
        return NULL;
    if (o->coll == STRATA_COLL_BARRIER) {
        s[(*n)++] = 0;
    } else if (o->nsizes) {
        memcpy(s, o->sizes, (size_t)o->nsizes * sizeof *s);
        *n = o->nsizes;
    } else {
        for (long long b = o->min_bytes; b <= o->max_bytes;) {
            if (*n == BENCH_MAX_SIZES) {
                free(s);
                *n = -1;
                return NULL;
            }
            s[(*n)++] = b;
            if (o->factor > 1 ? b > LLONG_MAX / o->factor : b > LLONG_MAX - o->step)
                break;
            b = o->factor > 1 ? (b ? b * o->factor : 1) : b + o->step; // 0 grows by factors from 1
        }
    }
    return s;
}

/* ---- running --------------------------------------------------------------------------------- */

/* One combination of the loops: collective, dtype, op, root. */
typedef struct bench_case {
    strata_coll_t coll;
    strata_dtype_t dtype;
    strata_op_t op;
    int root;
} bench_case_t;

static strata_status_t run_once(strata_comm_t *comm, const bench_case_t *k, size_t c, void *send,
                                void *recv)
{
    const strata_dtype_t dt = k->dtype;
    switch (k->coll) {
    case STRATA_COLL_ALLREDUCE:
        return strata_allreduce(comm, send, recv, c, dt, k->op);
    case STRATA_COLL_REDUCE:
        return strata_reduce(comm, send, recv, c, dt, k->op, k->root);
    case STRATA_COLL_BCAST:
        return strata_bcast(comm, recv, c, dt, k->root);
    case STRATA_COLL_REDUCE_SCATTER:
        return strata_reduce_scatter(comm, send, recv, c, dt, k->op);
    case STRATA_COLL_ALLGATHER:
        return strata_allgather(comm, send, recv, c, dt);
    case STRATA_COLL_ALLTOALL:
        return strata_alltoall(comm, send, recv, c, dt);
    case STRATA_COLL_GATHER:
        return strata_gather(comm, send, recv, c, dt, k->root);
    case STRATA_COLL_SCATTER:
        return strata_scatter(comm, send, recv, c, dt, k->root);
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

/* One pass (out of place or in place) of one size. */
typedef struct pass {
    double time_us, algbw, busbw;
    long long wrong;  /* over all ranks; -1 = not checked */
    int ranks_wrong;  /* ranks that saw a wrong element (nccl-tests' "out of bounds values") */
} pass_t;

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

/* This rank's time per call combined over ranks as -a says. */
static strata_status_t combine_time(strata_comm_t *comm, average_t how, double mine, double *out)
{
    switch (how) {
    case AVG_RANK0:
        *out = mine;
        return strata_bcast(comm, out, 1, STRATA_DTYPE_F64, 0);
    case AVG_MIN:
        return strata_allreduce(comm, &mine, out, 1, STRATA_DTYPE_F64, STRATA_OP_MIN);
    case AVG_MAX:
        return strata_allreduce(comm, &mine, out, 1, STRATA_DTYPE_F64, STRATA_OP_MAX);
    default:
        return strata_allreduce(comm, &mine, out, 1, STRATA_DTYPE_F64, STRATA_OP_AVG);
    }
}

/* Times and checks one pass. `send`/`recv` are where the collective reads and writes (the same
 * buffer in place). On an API failure returns the status with *what naming the step. */
static strata_status_t bench_pass(strata_comm_t *comm, const bench_opts_t *o, const bench_case_t *k,
                                  const bench_shape_t *sh, void *send, void *recv, pass_t *res,
                                  const char **what)
{
    const int rank = strata_comm_rank(comm), nranks = strata_comm_size(comm);
    bench_fill_t f = bench_fill_make(k->coll, k->dtype, k->op, nranks, k->root);
    f.zero_pct = o->zero_pct;
    const bool data = k->coll != STRATA_COLL_BARRIER;
    if (data && o->check)
        bench_fill_inputs(&f, sh, rank, send, recv);
    // The barrier that starts the timing runs once before too, so its first-use costs (code
    // paths and pages touched for the first time) do not land in the timed calls.
    *what = "barrier before warm-up";
    TRY(strata_barrier(comm));
    *what = strata_coll_name(k->coll);
    for (int i = 0; i < o->warmup; i++)
        TRY(run_once(comm, k, sh->param, send, recv));
    *what = "barrier before timing";
    TRY(strata_barrier(comm));
    const int loops = o->graphs > 0 ? o->graphs : 1;
    uint64_t t0 = now_ns();
    for (int g = 0; g < loops; g++)
        for (int i = 0; i < o->iters; i++)
            for (int a = 0; a < o->agg; a++) {
                *what = strata_coll_name(k->coll);
                TRY(run_once(comm, k, sh->param, send, recv));
                if (o->blocking) {
                    *what = "barrier after a call (-z 1)";
                    TRY(strata_barrier(comm));
                }
            }
    const double mine = (double)(now_ns() - t0) / 1e3 / ((double)loops * o->iters * o->agg);
    *what = "combining the times";
    TRY(combine_time(comm, o->average, mine, &res->time_us));
    const size_t bytes = sh->total * strata_dtype_size(k->dtype);
    res->algbw = res->time_us > 0 ? (double)bytes / (res->time_us * 1e3) : 0; // bytes/ns = GB/s
    res->busbw = res->algbw * bench_busbw_factor(k->coll, nranks);
    res->wrong = -1;
    res->ranks_wrong = 0;
    if (!data || !o->check)
        return STRATA_OK;
    res->wrong = 0;
    for (int c = 0; c < o->check && res->wrong == 0; c++) {
        bench_fill_inputs(&f, sh, rank, send, recv);
        *what = strata_coll_name(k->coll);
        TRY(run_once(comm, k, sh->param, send, recv));
        int64_t counts[2] = {(int64_t)bench_count_wrong(&f, sh, rank, recv), 0}, all[2];
        counts[1] = counts[0] > 0;
        *what = "summing the wrong elements";
        TRY(strata_allreduce(comm, counts, all, 2, STRATA_DTYPE_I64, STRATA_OP_SUM));
        res->wrong = all[0];
        res->ranks_wrong = (int)all[1];
    }
    return STRATA_OK;
}

/* ---- printing ------------------------------------------------------------------------------- */

/* nccl-tests' time format: fewer decimals as the time grows. */
static void format_time(double us, char out[16])
{
    snprintf(out, 16, us >= 10000.0 ? "%7.0f" : us >= 100.0 ? "%7.1f" : "%7.2f", us);
}

/* -a in words, and as --json's "average" field. */
static const char *average_words(average_t a)
{
    return a == AVG_RANK0 ? "rank 0's mean"
           : a == AVG_MIN ? "the minimum over ranks of each rank's mean"
           : a == AVG_MAX ? "the maximum over ranks of each rank's mean"
                          : "the average over ranks of each rank's mean";
}

static const char *average_name(average_t a)
{
    return a == AVG_RANK0 ? "rank0" : a == AVG_MIN ? "min" : a == AVG_MAX ? "max" : "avg";
}

/* What nccl-tests prints before its table, then strata's own lines. */
static strata_status_t print_header(strata_comm_t *comm, const bench_opts_t *o, long long minb,
                                    long long maxb, const strata_link_calib_t *calib)
{
    const int rank = strata_comm_rank(comm), nranks = strata_comm_size(comm);
    enum { LINE = 160 };
    char mine[LINE], host[64] = "?";
    gethostname(host, sizeof host - 1);
    snprintf(mine, sizeof mine, "#  Rank %2d Group  0 Pid %6d on %10s device %2d [cpu] CPU", rank,
             (int)getpid(), host, sched_getcpu());
    char *all = malloc((size_t)nranks * LINE); // every rank: the allgather writes it
    if (!all)
        return STRATA_ERR_NO_MEMORY;
    strata_status_t rc = strata_allgather(comm, mine, all, LINE, STRATA_DTYPE_U8);
    if (rc < 0 || rank != 0) {
        free(all);
        return rc;
    }
    const bool add = o->factor < 2;
    printf("# nThread 1 nGpus 1 minBytes %lld maxBytes %lld step: %lld(%s) warmup iters: %d "
           "iters: %d agg iters: %d validation: %d graph: %d\n",
           minb, maxb, o->nsizes ? 0 : add ? o->step : o->factor,
           o->nsizes ? "list" : add ? "bytes" : "factor", o->warmup, o->iters, o->agg, o->check,
           o->graphs);
    if (o->blocking)
        printf("# Blocking Enabled: wait for completion and barrier after each collective \n");
    printf("#\n# Using devices\n");
    for (int r = 0; r < nranks; r++)
        printf("%.*s\n", LINE, all + (size_t)r * LINE);
    free(all);
    printf("#\n# strata bench %s: nranks %d, transport %s (STRATA_COMM_TRANSPORT); time per call: "
           "%s (-a %d)\n",
           strata_coll_name(o->coll), nranks, strata_knob_value("STRATA_COMM_TRANSPORT"),
           average_words(o->average), (int)o->average);
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
    }
    printf("#\n");
    const char *t = o->cputime ? "cputime" : "time";
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place    "
           "        %18s  %9s\n", "", "", "", "", "", "strata", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s  %18s  %9s\n", "size",
           "count", "type", "redop", "root", t, "algbw", "busbw", "#wrong", t, "algbw", "busbw",
           "#wrong", "algo", "model");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s  %18s  %9s\n",
           "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
           "(GB/s)", "", "", "(us)");
    return STRATA_OK;
}

typedef struct row {
    const bench_case_t *k;
    size_t bytes, count;
    const char *algo;
    double model_us; /* the cost model's prediction for that algorithm (negative: none) */
    pass_t pass[2];  /* out of place, in place */
    bool in_place;   /* the in-place pass ran (not for barrier) */
} row_t;

static void print_row(const bench_opts_t *o, int nranks, const row_t *r,
                      const strata_link_calib_t *calib)
{
    const bench_case_t *k = r->k;
    const char *op = bench_has_op(k->coll) ? strata_op_name(k->op) : "none";
    const char *dt = k->coll == STRATA_COLL_BARRIER ? "none" : type_name(k->dtype);
    const int root = bench_has_root(k->coll) ? k->root : -1;
    if (o->json) {
        char ip[256] = "null";
        const pass_t *a = &r->pass[0], *b = &r->pass[1];
        if (r->in_place)
            snprintf(ip, sizeof ip, "{\"time_us\":%.3f,\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,"
                                    "\"wrong\":%lld}",
                     b->time_us, b->algbw, b->busbw, b->wrong);
        const bool checked = a->wrong >= 0;
        const bool ok = a->wrong == 0 && (!r->in_place || b->wrong == 0);
        printf("{\"impl\":\"strata\",\"coll\":\"%s\",\"transport\":\"%s\",\"size_bytes\":%zu,"
               "\"count\":%zu,\"dtype\":\"%s\",\"op\":\"%s\",\"root\":%d,\"algo\":\"%s\","
               "\"nranks\":%d,\"iters\":%d,\"average\":\"%s\",\"time_us\":%.3f,\"algbw_gbs\":%.4f,"
               "\"busbw_gbs\":%.4f,\"wrong\":%lld,\"in_place\":%s,\"model_us\":%.3f,"
               "\"calib_s\":%.3f,\"registered\":%s,\"correct\":%s}\n",
               strata_coll_name(k->coll), strata_knob_value("STRATA_COMM_TRANSPORT"), r->bytes,
               r->count, dt, op, root, r->algo, nranks, o->iters, average_name(o->average),
               a->time_us, a->algbw, a->busbw, a->wrong, ip, r->model_us,
               calib->done ? calib->seconds : 0.0, o->registered ? "true" : "false",
               !checked ? "null" : ok ? "true" : "false");
    } else {
        printf("%12zu  %12zu  %8s  %6s  %6d", r->bytes, r->count, dt, op, root);
        for (int p = 0; p < 2; p++) {
            const pass_t *q = &r->pass[p];
            if (p == 1 && !r->in_place) {
                printf("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
                continue;
            }
            char t[16], w[24] = "N/A";
            format_time(q->time_us, t);
            if (q->wrong >= 0)
                snprintf(w, sizeof w, "%lld", q->wrong);
            printf("  %7s  %6.2f  %6.2f  %5s", t, q->algbw, q->busbw, w);
        }
        printf("  %18s  %9.2f\n", r->algo, r->model_us);
    }
    fflush(stdout);
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

/* ---- the command ------------------------------------------------------------------------------ */

typedef struct totals {
    double bus_sum;
    int passes, rows, rows_wrong, out_of_bounds;
    double last_us;
} totals_t;

/* Runs every size of one case. On an API failure returns its status, with *what naming the step
 * and *bytes the size. */
static strata_status_t run_case(strata_comm_t *comm, const bench_opts_t *o, const bench_case_t *k,
                                const long long *sizes, int nsizes, void *send, void *recv,
                                totals_t *tot, const char **what, size_t *bytes)
{
    const int rank = strata_comm_rank(comm), nranks = strata_comm_size(comm);
    const size_t esize = strata_dtype_size(k->dtype);
    for (int i = 0; i < nsizes; i++) {
        const bench_shape_t sh = bench_shape(k->coll, (size_t)sizes[i], esize, nranks, rank);
        row_t r = {.k = k, .bytes = sh.total * esize, .count = sh.total,
                   .in_place = k->coll != STRATA_COLL_BARRIER};
        r.algo = strata_comm_algo_for(comm, k->coll, r.bytes, o->registered);
        r.model_us = strata_comm_predict(comm, k->coll, r.bytes, o->registered) * 1e6;
        if (!r.algo)
            r.algo = "?";
        for (int p = 0; p < (r.in_place ? 2 : 1); p++) {
            char *base = recv; // in place: input and output in the receive buffer
            void *sp = p ? base + sh.send_inplace * esize : send;
            void *rp = p ? base + sh.recv_inplace * esize : recv;
            *bytes = r.bytes;
            TRY(bench_pass(comm, o, k, &sh, sp, rp, &r.pass[p], what));
            tot->bus_sum += r.pass[p].busbw;
            tot->passes++;
            tot->out_of_bounds += r.pass[p].ranks_wrong;
            tot->last_us = r.pass[p].time_us;
        }
        tot->rows++;
        tot->rows_wrong += r.pass[0].wrong > 0 || (r.in_place && r.pass[1].wrong > 0);
        if (rank == 0)
            print_row(o, nranks, &r, strata_comm_calibration(comm));
    }
    return STRATA_OK;
}

int cmd_bench(int argc, char **argv)
{
    bench_opts_t o;
    int rc = parse_args(argc, argv, &o);
    if (rc < 0) {
        usage(stdout);
        free(o.sizes);
        return 0;
    }
    if (rc) {
        free(o.sizes);
        return rc;
    }
    int nsizes;
    long long *sizes = size_list(&o, &nsizes);
    free(o.sizes);
    o.sizes = NULL;
    if (!sizes) {
        if (nsizes < 0)
            return usage_error("-b %lld -e %lld -i %lld gives more than %d sizes", o.min_bytes,
                               o.max_bytes, o.step, BENCH_MAX_SIZES);
        return cmd_fail(NULL, "bench: out of memory");
    }

    strata_comm_t *comm = NULL;
    if (cmd_comm_from_env("bench", "strata launch -n 2 -- strata bench allreduce",
                          o.timeout_s > 0 ? 1000LL * o.timeout_s : 0, &comm) != 0) {
        free(sizes);
        return 1;
    }
    const int rank = strata_comm_rank(comm), nranks = strata_comm_size(comm);
    if (bench_has_root(o.coll) && o.root >= nranks) {
        if (rank == 0)
            usage_error("-r %d: the root must be below nranks = %d", o.root, nranks);
        strata_comm_destroy(comm);
        free(sizes);
        return 2;
    }

    // Buffers for the largest size of the widest dtype; in place works in the receive buffer,
    // which therefore holds the larger of the two.
    size_t max_send = 0, max_recv = 0;
    long long minb = nsizes ? sizes[0] : 0, maxb = minb;
    for (int i = 0; i < nsizes; i++) {
        minb = sizes[i] < minb ? sizes[i] : minb;
        maxb = sizes[i] > maxb ? sizes[i] : maxb;
        for (int d = 0; d < o.ndtypes; d++) {
            const size_t es = strata_dtype_size(o.dtypes[d]);
            const bench_shape_t sh = bench_shape(o.coll, (size_t)sizes[i], es, nranks, rank);
            max_send = sh.send_count * es > max_send ? sh.send_count * es : max_send;
            max_recv = sh.recv_count * es > max_recv ? sh.recv_count * es : max_recv;
        }
    }
    max_recv = max_send > max_recv ? max_send : max_recv;
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
        free(sizes);
        return 1;
    }

    if (!o.json && print_header(comm, &o, minb, maxb, strata_comm_calibration(comm)) < 0) {
        bench_free(comm, &o, send);
        bench_free(comm, &o, recv);
        free(sizes);
        return api_fail(comm, "gathering the ranks' hosts", 0);
    }
    totals_t tot = {0};
    // nccl-tests' loops: every type, every op (reductions only), every size.
    const bool data = o.coll != STRATA_COLL_BARRIER;
    const int ntypes = data ? o.ndtypes : 1, nops = bench_has_op(o.coll) ? o.nops : 1;
    const char *what = "";
    size_t failed_bytes = 0;
    strata_status_t st = STRATA_OK;
    for (int d = 0; d < ntypes && st == STRATA_OK; d++)
        for (int p = 0; p < nops && st == STRATA_OK; p++) {
            const bench_case_t k = {o.coll, data ? o.dtypes[d] : STRATA_DTYPE_U8,
                                    bench_has_op(o.coll) ? o.ops[p] : STRATA_OP_SUM, o.root};
            st = run_case(comm, &o, &k, sizes, nsizes, send, recv, &tot, &what, &failed_bytes);
        }
    free(sizes);
    if (st != STRATA_OK) {
        bench_free(comm, &o, send);
        bench_free(comm, &o, recv);
        return api_fail(comm, what, failed_bytes);
    }
    const double avg_bw = tot.passes ? tot.bus_sum / tot.passes : 0;
    const char *min_env = getenv("NCCL_TESTS_MIN_BW");
    const double min_bw = min_env && *min_env ? atof(min_env) : -1;
    const bool bw_low = min_bw >= 0 && avg_bw < 0.9 * min_bw;
    if (rank == 0 && !o.json) {
        printf("# Out of bounds values : %d %s\n", tot.out_of_bounds,
               tot.out_of_bounds ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g %s\n", avg_bw, min_bw < 0 ? "" : bw_low ? "FAILED" : "OK");
        printf("#\n");
        if (!data)
            printf("# barrier latency: %.2f us\n", tot.last_us);
        else if (o.check)
            printf("# %s\n", tot.rows_wrong ? "CHECK FAILED" : "all results correct");
    }
    if (rank == 0 && tot.rows_wrong)
        cmd_fail(NULL, "bench: %d of %d sizes gave wrong results", tot.rows_wrong, tot.rows);
    if (rank == 0 && bw_low)
        cmd_fail(NULL, "bench: average bus bandwidth %g GB/s is below 0.9 x NCCL_TESTS_MIN_BW = %g",
                 avg_bw, 0.9 * min_bw);
    fflush(stdout);
    bench_free(comm, &o, send);
    bench_free(comm, &o, recv);
    // Hold every rank until rank 0 has printed: a launcher stops the job at the first non-zero
    // exit, and rank 0's verdict must not be cut off by another rank leaving first.
    strata_status_t brc = strata_barrier(comm);
    strata_comm_destroy(comm);
    if (brc != STRATA_OK)
        return cmd_fail(NULL, "bench: final barrier: %s", strata_last_error());
    return tot.rows_wrong || bw_low ? 1 : 0;
}
