/* The strata command's subcommands. Each is thin: parse arguments, call the library, print.
 * Exit codes: 0 ok, 1 error ("strata: error: <msg>"), 2 usage. */
#ifndef STRATA_TOOL_CMD_H
#define STRATA_TOOL_CMD_H

#include <stdbool.h>

#include "strata/comm.h"
#include "strata/model.h"

typedef struct strata_cmd {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
} strata_cmd_t;

/* Runs this command again, in the same process (execv keeps the pid), with name=value added to
 * the environment, for a setting a library reads only when it loads; returns without doing
 * anything when name is already set (by the user, or by the first run) or when the exec fails. */
void cmd_reexec_with_env(const char *name, const char *value);

int cmd_env(int argc, char **argv);
int cmd_algos(int argc, char **argv);
int cmd_launch(int argc, char **argv);
int cmd_diagnose(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_store(int argc, char **argv);
int cmd_pool(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_plan_schedule(int argc, char **argv); /* `strata plan schedule` (cmd_schedule.c) */
int cmd_place(int argc, char **argv);
int cmd_sched(int argc, char **argv);
int cmd_probe(int argc, char **argv);
int cmd_topo(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_trace(int argc, char **argv);

/* The whole model of a checkpoint (ckpt_model.c): a directory, a shard file or an unsharded file;
 * `who` names the command in warnings. Returns 0, or 1 after printing why. */
int cmd_load_model(const char *who, const char *ckpt, strata_gpt_t **m, strata_gpt_config_t *cfg);

/* Shared by `strata place` and `strata sched` (defined in cmd_place.c): loads a preset or cluster
 * file, or a Slurm topology.conf with optional level speeds, then a host-state file. Returns 0 or a
 * cmd_fail status. */
struct strata_cluster;
int cmd_load_cluster(const char *cluster, const char *slurm, int gpus_per_host, const char *state,
                     struct strata_cluster *out);

/* Parses a whole decimal integer in [lo, hi] into *out; false on garbage or out of range. */
bool cmd_parse_int(const char *s, long long lo, long long hi, long long *out);

/* An integer option value: parses `value` of option `flag` into *out (an int in [lo, hi]), or
 * prints "strata CMD: FLAG expects an integer in [lo, hi], got 'value'" and returns false (a usage
 * error). */
bool cmd_int_option(const char *cmd, const char *flag, const char *value, long long lo,
                    long long hi, int *out);

/* The world communicator from the launcher's environment (timeout_ms > 0 replaces its timeout); on
 * failure prints why, with "run it under a launcher: <example>" only when no launcher started this
 * process, and returns 1. */
int cmd_comm_from_env(const char *who, const char *example, long long timeout_ms,
                      strata_comm_t **out);

/* Prints "strata: error: <msg>" (and "hint: <hint>" when hint is not NULL) to stderr; returns 1. */
int cmd_fail(const char *hint, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
