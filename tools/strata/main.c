/* The strata command: dispatches to subcommands listed in one table. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strata/cmd.h"
#include "strata/comm.h"
#include "strata/strata.h"

static const strata_cmd_t commands[] = {
    {"launch", "start N local ranks of a program with a launcher environment", cmd_launch},
    {"diagnose", "name the rank that caused a failed job, from its dumps (STRATA_DIAG_DIR)",
     cmd_diagnose},
    {"bench", "measure a collective, nccl-tests style (run under strata launch)", cmd_bench},
    {"probe", "measure the fabric level by level and write a calibrated cluster file", cmd_probe},
    {"topo", "show a cluster file or Slurm topology.conf, a host's path, the local host (hwloc)",
     cmd_topo},
    {"store", "serve a standalone bootstrap store", cmd_store},
    {"pool", "serve or query a UDP memory pool node that reduces data in flight", cmd_pool},
    {"plan", "predict a training step and search the best parallel configuration", cmd_plan},
    {"place", "place one job's ranks on a cluster by its topology (Slurm/mpirun files)", cmd_place},
    {"sched", "simulate many jobs and failures on a cluster under placement policies", cmd_sched},
    {"train", "train a GPT on a text file on this CPU (progress, metrics, checkpoints)", cmd_train},
    {"sample", "print text generated from a training checkpoint", cmd_sample},
    {"export", "write a checkpoint's whole model as one named safetensors file (PyTorch)",
     cmd_export},
    {"trace", "merge the ranks' Chrome traces into one timeline of the job", cmd_trace},
    {"algos", "list the collective algorithms", cmd_algos},
    {"env", "list every STRATA_* setting with its default, value and meaning", cmd_env},
};

static char **main_argv;

void cmd_reexec_with_env(const char *name, const char *value)
{
    if (getenv(name) || !main_argv || setenv(name, value, 1) != 0)
        return;
    execv("/proc/self/exe", main_argv);
    unsetenv(name); // exec failed: go on as we are
}

bool cmd_parse_int(const char *s, long long lo, long long hi, long long *out)
{
    if (!s || !*s)
        return false;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

bool cmd_int_option(const char *cmd, const char *flag, const char *value, long long lo,
                    long long hi, int *out)
{
    long long v;
    if (!cmd_parse_int(value, lo, hi, &v)) {
        fprintf(stderr, "strata %s: %s expects an integer in [%lld, %lld], got '%s'\n", cmd, flag,
                lo, hi, value);
        return false;
    }
    *out = (int)v;
    return true;
}

int cmd_comm_from_env(const char *who, const char *example, long long timeout_ms,
                      strata_comm_t **out)
{
    *out = NULL;
    strata_comm_config_t cfg;
    strata_status_t st = strata_comm_config_from_env(&cfg);
    if (st == STRATA_OK && timeout_ms > 0)
        cfg.timeout_ms = timeout_ms;
    if (st == STRATA_OK && strata_comm_create(&cfg, out) == STRATA_OK)
        return 0;
    char hint[256];
    snprintf(hint, sizeof hint, "run it under a launcher: %s", example);
    return cmd_fail(strata_comm_launcher() ? NULL : hint, "%s: cannot create the communicator: %s",
                    who, strata_last_error());
}

int cmd_fail(const char *hint, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("strata: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (hint)
        fprintf(stderr, "hint: %s\n", hint);
    return 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "strata %s: topology-aware distributed training\n\nusage: strata <command> [args]\n\n",
            STRATA_VERSION_STRING);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`strata <command> --help` describes a command.\n");
}

int main(int argc, char **argv)
{
    main_argv = argv;
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("strata %s\n", STRATA_VERSION_STRING);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "strata: error: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
