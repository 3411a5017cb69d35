/* `strata launch`: parses the command line and runs the local process manager (src/launch,
 * strata/launch.h), which starts the ranks, names the rank that failed, and restarts the job. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/cmd.h"
#include "strata/launch.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: strata launch -n N [options] [--] PROGRAM [ARGS...]\n"
        "\n"
        "Starts N ranks of PROGRAM (found through PATH) on this machine with a launcher\n"
        "environment: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK=0,\n"
        "MASTER_ADDR=127.0.0.1, MASTER_PORT, STRATA_STORE_ADDR (rank 0 hosts the store on a free\n"
        "port), STRATA_SECRET (random), STRATA_JOB_ID, STRATA_DIAG_DIR, STRATA_RESTART_COUNT and\n"
        "TORCHELASTIC_RESTART_COUNT; with N > 1, OMP_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1\n"
        "unless already set (as torchrun does).\n"
        "\n"
        "options:\n"
        "  -n, --nproc N       number of ranks (1..%d)\n"
        "  --tcp               set STRATA_COMM_TRANSPORT=tcp (no shared memory between ranks)\n"
        "  --timeout-ms T      set STRATA_COMM_TIMEOUT_MS=T (timeout of every blocking call)\n"
        "  --max-restarts K    after a failure, stop every rank and start them all again, up\n"
        "                      to K times (default 0); run a trainer with --resume\n"
        "  --diag-dir DIR      where ranks write failure dumps (default $STRATA_DIAG_DIR, else a\n"
        "                      temporary directory, removed unless the job failed)\n"
        "  --no-prefix         pass rank output through untouched instead of prefixing\n"
        "  --bind-to WHAT      each rank's CPUs: core (rank r on the r-th core the launcher may\n"
        "                      use, as mpirun; NUMA nodes when the ranks outnumber the cores),\n"
        "                      numa (blocks of ranks per NUMA node) or none [core]\n"
        "                      each line with \"[r<rank>] \"\n"
        "  -h, --help          this text\n"
        "\n"
        "If a rank fails (exits non-zero or dies by a signal), launch gives the others 1 s to\n"
        "fail on their own, then sends SIGTERM (SIGKILL 5 s later, at once to a stopped rank),\n"
        "and names the rank that caused it: one killed by a signal launch did not send, else\n"
        "one found stopped, else the one the ranks' dumps blame, else the first that exited\n"
        "non-zero. It exits with that rank's status (128+signal for a signal), and removes\n"
        "the job's /dev/shm leftovers. `strata diagnose DIR` reads the dumps later.\n"
        "SIGINT, SIGTERM and SIGHUP are forwarded to every rank and end the job without a\n"
        "restart; a second one kills the ranks.\n"
        "\n"
        "example: strata launch -n 2 -- strata bench allreduce -b 8 -e 256M -f 4\n"
        "         strata launch -n 4 --max-restarts 3 -- strata train --ckpt-dir ck --resume\n",
        STRATA_LAUNCH_MAX_RANKS);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("strata launch: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nusage: strata launch -n N [--tcp] [--timeout-ms T] [--max-restarts K] [--diag-dir DIR]"
          " [--no-prefix] [--bind-to core|numa|none] [--] PROGRAM [ARGS...]\n(see `strata launch --help`)\n",
          stderr);
    return 2;
}

/* "--name VALUE" or "--name=VALUE" (also "-n4" for -n): the value, advancing *i past it; NULL when
 * a is not this option. *missing is set when the option has no value. */
static const char *option_value(int argc, char **argv, int *i, const char *name, bool *missing)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    if (a[n] == '\0') {
        if (*i + 1 >= argc) {
            *missing = true;
            return NULL;
        }
        return argv[++*i];
    }
    if (!strcmp(name, "-n"))
        return a + 2; // -n4
    return NULL;
}

/* Returns 0, or 2 after printing a usage error, or -1 for --help. Options end at the first
 * argument that is not one (the program) or after "--". */
static int parse_args(int argc, char **argv, strata_launch_opts_t *o)
{
    *o = strata_launch_opts_default();
    o->nranks = -1;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0')
            break;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return -1;
        if (!strcmp(a, "--tcp")) {
            o->tcp = true;
            continue;
        }
        if (!strcmp(a, "--no-prefix")) {
            o->prefix = false;
            continue;
        }
        bool missing = false;
        const char *v;
        long long x;
        if ((v = option_value(argc, argv, &i, "--nproc-per-node", &missing)) ||
            (v = option_value(argc, argv, &i, "--nproc", &missing)) ||
            (v = option_value(argc, argv, &i, "-n", &missing))) {
            if (!cmd_parse_int(v, LLONG_MIN, LLONG_MAX, &x))
                return usage_error("-n wants a number of ranks, got '%s'", v);
            if (x < 1)
                return usage_error("-n must be at least 1, got %s", v);
            if (x > STRATA_LAUNCH_MAX_RANKS)
                return usage_error("-n %s: too many ranks for one machine", v);
            o->nranks = (int)x;
        } else if ((v = option_value(argc, argv, &i, "--timeout-ms", &missing))) {
            if (!cmd_parse_int(v, -1, LLONG_MAX, &x))
                return usage_error("--timeout-ms wants milliseconds (-1 = never), got '%s'", v);
            o->timeout_ms = x;
        } else if ((v = option_value(argc, argv, &i, "--max-restarts", &missing))) {
            if (!cmd_parse_int(v, 0, 1000000, &x))
                return usage_error("--max-restarts wants a count in [0, 1000000], got '%s'", v);
            o->max_restarts = (int)x;
        } else if ((v = option_value(argc, argv, &i, "--bind-to", &missing))) {
            if (strcmp(v, "core") && strcmp(v, "numa") && strcmp(v, "none"))
                return usage_error("--bind-to wants core, numa or none, got '%s'", v);
            o->bind = v;
        } else if ((v = option_value(argc, argv, &i, "--diag-dir", &missing))) {
            if (!*v)
                return usage_error("%s", "--diag-dir wants a directory");
            o->diag_dir = v;
        } else if (missing) {
            return usage_error("%s needs a value", a);
        } else {
            return usage_error("unknown option '%s'", a);
        }
    }
    if (o->nranks < 0)
        return usage_error("%s", "missing -n N (the number of ranks)");
    if (i >= argc)
        return usage_error("%s", "missing the program to run");
    o->argv = argv + i;
    return 0;
}

int cmd_launch(int argc, char **argv)
{
    strata_launch_opts_t o;
    int rc = parse_args(argc, argv, &o);
    if (rc < 0) {
        usage(stdout);
        return 0;
    }
    if (rc != 0)
        return rc;
    int code = 1;
    if (strata_launch_run(&o, &code) != STRATA_OK)
        fprintf(stderr, "strata launch: %s\n", strata_last_error());
    return code;
}
