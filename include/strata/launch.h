/* Launch: the local process manager behind `strata launch`, and the post-mortem of a failed job
 * behind `strata diagnose`.
 *
 * strata_launch_run() starts N ranks of a program on this machine with a launcher environment (as
 * torchrun does for one node), prefixes their output, forwards signals, and when a rank fails stops
 * the job, names the rank that caused it (the verdict, below), removes the job's shared-memory
 * leftovers and, if asked, starts every rank again.
 *
 * The verdict. When a job fails, every survivor returns an error naming the rank it blames, and
 * with STRATA_DIAG_DIR set writes DIR/rank<r>.json (the "dump": status, error, culprit, flight
 * recorder) at its first failure. Which rank failed first in time says little: the ranks that
 * noticed the failure exit with status 1 while the dead or stopped rank may be reaped later or not
 * at all. The culprit is therefore, in this order:
 *   1. a rank killed by a signal the launcher did not send (SIGKILL from the OOM killer, SIGSEGV);
 *   2. a rank found stopped (process state T: SIGSTOP, SIGTSTP) when the job failed;
 *   3. the rank most dumps blame;
 *   4. with no observations (strata diagnose on dumps alone), the one rank that left no dump when
 *      every other rank did;
 *   5. the first rank that exited non-zero.
 * Where 1 or 2 finds several ranks, the one the dumps blame is taken, else the first to end.
 * The launcher saves its observations beside the dumps (DIR/launch.json), so `strata diagnose DIR`
 * later reaches the same verdict.
 *
 * Ownership: structures returned by strata_diag_load are freed with strata_diag_free. Errors:
 * strata_status_t with strata_last_error().
 */
#ifndef STRATA_LAUNCH_H
#define STRATA_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- failure dumps -------------------------------------------------------------------------- */

enum { STRATA_FLIGHT_STARTED = 0, STRATA_FLIGHT_DONE, STRATA_FLIGHT_FAILED };

/* One entry of a rank's flight recorder: an operation it started, and whether it ended. */
typedef struct strata_flight_op {
    long long ctx, seq; /* communicator context (0 = world) and the operation's number on it */
    char op[32];        /* "allreduce", "send", ... */
    char algo[48];
    long long bytes;
    int state; /* STRATA_FLIGHT_* */
    double ms; /* duration; -1 while started */
} strata_flight_op_t;

/* One rank's dump, DIR/rank<r>.json. */
typedef struct strata_rank_dump {
    int rank, nranks, pid;
    char host[256];
    char status[64];     /* "STRATA_ERR_TIMEOUT" */
    char error[1024];    /* the error the rank returned */
    int culprit;         /* the world rank it blames, -1 if none */
    long long completed; /* operations it completed */
    int nflight;
    strata_flight_op_t *flight; /* oldest first */
} strata_rank_dump_t;

/* How a rank ended, as the launcher saw it. */
enum { STRATA_RANK_UNKNOWN = 0, STRATA_RANK_EXITED, STRATA_RANK_SIGNALED };

typedef struct strata_rank_obs {
    int pid;          /* 0: never started */
    int end;          /* STRATA_RANK_* */
    int status;       /* exit status, or the signal number */
    bool by_launcher; /* killed by a signal the launcher itself sent to it */
    bool stopped;     /* found stopped (state T) when the job failed */
    int order;        /* 1 for the first rank to end, 2 for the next ...; 0 if unknown */
} strata_rank_obs_t;

/* Everything known about a failed job: the dumps of a directory and, when the launcher wrote them,
 * its observations. */
typedef struct strata_diag {
    char dir[1024];
    int nranks;                 /* from the observations or the dumps; 0 if nothing was read */
    strata_rank_dump_t **dumps; /* [nranks]; NULL where a rank left no (readable) dump */
    strata_rank_obs_t *obs;     /* [nranks], or NULL without launch.json */
    int nproblems;
    char **problems; /* one line per unreadable or malformed file, naming it */
} strata_diag_t;

/* Reads every DIR/rank<r>.json and DIR/launch.json. nranks is the job's size when the caller knows
 * it, else 0 (then launch.json or the dumps tell). A malformed file does not fail the call: it is
 * recorded in problems ("DIR/rank3.json:7: expected an integer ... for \"culprit\"") and the rest
 * is read. Errors: STRATA_ERR_IO when DIR cannot be read. */
STRATA_API strata_status_t strata_diag_load(const char *dir, int nranks, strata_diag_t **out);
STRATA_API void strata_diag_free(strata_diag_t *d);

/* Writes DIR/launch.json (atomically) with the launcher's observations of nranks ranks, its job id
 * and the verdict text. */
STRATA_API strata_status_t strata_diag_save_obs(const char *dir, const char *job_id, int nranks,
                                                const strata_rank_obs_t *obs, const char *verdict);

/* ---- the verdict ---------------------------------------------------------------------------- */

typedef enum strata_verdict_basis {
    STRATA_VERDICT_NONE = 0, /* no rank failed */
    STRATA_VERDICT_SIGNAL,   /* killed by a signal the launcher did not send */
    STRATA_VERDICT_STOPPED,  /* found stopped */
    STRATA_VERDICT_DUMPS,    /* blamed by the dumps */
    STRATA_VERDICT_NO_DUMP,  /* the one rank without a dump */
    STRATA_VERDICT_EXIT,     /* the first non-zero exit */
} strata_verdict_basis_t;

typedef struct strata_verdict {
    strata_verdict_basis_t basis;
    int rank;        /* the culprit, -1 if none */
    int pid;         /* its pid, 0 if unknown */
    int blamed_by;   /* dumps that blame `rank` */
    int exit_code;   /* what the launcher exits with: the culprit's status when it ended on its
                        own (128 + signal for a signal), else the first failure's; -1 unknown */
    char text[1536]; /* one sentence: "rank 3 (pid 1234) stopped responding during allreduce #12
                        ...; ranks 0-2 were waiting for it" */
} strata_verdict_t;

/* Decides the culprit of a failed job from d's observations (if any) and dumps; see the top of this
 * header for the rules. Never fails: with nothing to go on, basis is STRATA_VERDICT_NONE. */
STRATA_API void strata_verdict_decide(const strata_diag_t *d, strata_verdict_t *v);

/* "0-2, 4, 6-7": the ranks in [0, n) whose flag is set, as ranges; "" when none. */
STRATA_API void strata_rank_ranges(const bool *flags, int n, char *buf, size_t len);

/* d as one JSON document (the verdict, then per rank: dump fields or null, observation, problems);
 * a new string the caller frees, or NULL without memory. */
STRATA_API char *strata_diag_to_json(const strata_diag_t *d, const strata_verdict_t *v);

/* ---- the process manager -------------------------------------------------------------------- */

#define STRATA_LAUNCH_MAX_RANKS 65536

typedef struct strata_launch_opts {
    int nranks;
    bool tcp;             /* STRATA_COMM_TRANSPORT=tcp */
    long long timeout_ms; /* STRATA_COMM_TIMEOUT_MS; < 0: leave it alone */
    bool prefix;          /* "[r<rank>] " before every output line */
    int max_restarts;     /* restart the whole job after a failure up to this many times */
    const char *diag_dir; /* where dumps go; NULL: $STRATA_DIAG_DIR, else a temporary directory */
    const char *bind;     /* each rank's CPUs (--bind-to): "core" (rank r on the r-th core of the
                             CPUs the launcher may use; NUMA nodes, else none, when the ranks
                             outnumber the cores), "numa" (blocks of ranks per NUMA node) or
                             "none"; NULL: "core" */
    char *const *argv;    /* PROGRAM ARGS..., NULL-terminated; PROGRAM is looked up in PATH */
} strata_launch_opts_t;

STRATA_API strata_launch_opts_t strata_launch_opts_default(void);

/* Runs the job to its end and sets *exit_code: 0 when the (last) attempt succeeded, else the
 * verdict's exit code, 128 + signal after a forwarded signal, 127 when PROGRAM is not found.
 * Prints rank output to stdout/stderr and its own lines, "strata launch: ...", to stderr.
 * While it runs it catches SIGINT, SIGTERM, SIGHUP (forwarded to every rank; no restart after
 * one), SIGCHLD and SIGPIPE, and it sets the ranks' variables in its own environment. Returns an
 * error (and starts nothing) when the job cannot be set up: no free port, fd limit too low. */
STRATA_API strata_status_t strata_launch_run(const strata_launch_opts_t *o, int *exit_code);

#ifdef __cplusplus
}
#endif
#endif
