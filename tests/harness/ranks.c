/* The multi-rank test runner: st_test_ranks() forks n ranks that rendezvous through a store served
 * by the parent, the way a launcher would start them, and reports every rank's fate.
 *
 * The parent must have no threads when it forks, so it serves the store itself from a
 * single-threaded loop (st_store_server_poll) interleaved with waitpid(WNOHANG) until every rank
 * has exited or the deadline passes; then stragglers are SIGKILLed. Each child closes its copy of
 * the store's sockets, gets its identity through the environment (RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, STRATA_STORE_ADDR, STRATA_STORE_EXTERNAL=1, STRATA_SECRET and a job id unique
 * to the call) and leaves with _exit(fn(...)), so cmocka's and atexit state is never run twice.
 * Shared memory a killed rank leaves in /dev/shm under the job's name is removed afterwards. This
 * file only starts and watches processes; the checks are the rank functions'. */
#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/st_test.h"

#include "base/base.h"
#include "comm/bootstrap/store.h"
#include "strata/model.h"

#define DEFAULT_DEADLINE_MS 120000
#define PUMP_MS             10 /* longest the parent serves the store before looking at children */

/* Writes one line to stderr in a single write(), so lines of concurrent ranks do not interleave. */
ST_PRINTF(1, 2) static void say(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = ST_MIN((size_t)n, sizeof line - 2);
    line[len++] = '\n';
    ssize_t w = write(2, line, len);
    (void)w;
}

static const char *rank_env(void)
{
    const char *r = getenv("RANK");
    return r ? r : "?";
}

/* ---- the recap of failed jobs ------------------------------------------------------------------
 * A failing multi-rank test prints many lines (every survivor's warnings, the later tests' output),
 * and a CI log shows only its head and tail. So the first check that failed in each failed job is
 * kept and printed again when the test program exits, after cmocka's summary. A rank writes its
 * failure into a page shared with the parent (the first one wins); the parent copies it into the
 * recap when the job fails. */

#define RECAP_JOBS 8

typedef struct first_failure {
    int taken; /* set by the first rank that fails in the current job */
    char line[1000];
} first_failure_t;

static first_failure_t *shared_failure; /* MAP_SHARED, inherited by every rank */
static char recap[RECAP_JOBS][1100];
static int recap_jobs, recap_failed;

static void print_recap(void)
{
    if (!recap_failed)
        return;
    fprintf(stderr, "st_test_ranks: %d multi-rank job(s) failed in this run; the first check that "
            "failed in each", recap_failed);
    if (recap_failed > RECAP_JOBS)
        fprintf(stderr, " of the first %d", RECAP_JOBS);
    fprintf(stderr, ":\n");
    for (int i = 0; i < recap_jobs; i++)
        fprintf(stderr, "  %s\n", recap[i]);
}

/* Before a job's forks: the shared page (once per process) and an empty slot. */
static void recap_begin_job(void)
{
    if (!shared_failure) {
        void *p = mmap(NULL, sizeof *shared_failure, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return; // no recap, nothing else lost
        shared_failure = p;
        atexit(print_recap);
    }
    __atomic_store_n(&shared_failure->taken, 0, __ATOMIC_RELEASE);
    shared_failure->line[0] = '\0';
}

/* After a failed job: what its first failing rank said, or `why` (the parent's own finding). */
static void recap_failed_job(const char *job_id, const char *why)
{
    recap_failed++;
    if (recap_jobs == RECAP_JOBS)
        return;
    bool said = shared_failure && __atomic_load_n(&shared_failure->taken, __ATOMIC_ACQUIRE) == 2;
    snprintf(recap[recap_jobs++], sizeof recap[0], "job %s: %s", job_id,
             said ? shared_failure->line : why);
}

int st_rank_fail(const char *file, int line, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    say("rank %s: %s:%d: %s", rank_env(), file, line, msg);
    int free_slot = 0;
    if (shared_failure && __atomic_compare_exchange_n(&shared_failure->taken, &free_slot, 1, false,
                                                      __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        snprintf(shared_failure->line, sizeof shared_failure->line, "rank %s: %s:%d: %s",
                 rank_env(), file, line, msg);
        __atomic_store_n(&shared_failure->taken, 2, __ATOMIC_RELEASE); // the line is complete
    }
    return 1;
}

strata_comm_t *st_test_comm(void)
{
    strata_comm_t *comm = NULL;
    strata_status_t rc = strata_comm_create_from_env(&comm);
    if (rc != STRATA_OK) {
        say("rank %s: strata_comm_create_from_env: %s: %s", rank_env(), strata_status_name(rc),
            strata_last_error());
        fflush(stdout);
        _exit(3);
    }
    return comm;
}

/* ---- the child ------------------------------------------------------------------------------- */

static void set_env(const char *name, const char *value)
{
    if (setenv(name, value, 1) != 0) {
        say("rank %s: cannot set %s", rank_env(), name);
        _exit(4);
    }
}

/* Applies "K=V;K2=V2" (empty items are skipped). */
static void set_extra_env(const char *extra)
{
    if (!extra)
        return;
    char *copy = strdup(extra);
    if (!copy)
        _exit(4);
    char *save = NULL;
    for (char *item = strtok_r(copy, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(item, '=');
        if (!eq || eq == item) {
            say("rank %s: extra_env item '%s' is not NAME=VALUE", rank_env(), item);
            _exit(4);
        }
        *eq = '\0';
        set_env(item, eq + 1);
    }
    free(copy);
}

typedef struct job {
    int nranks;
    char addr[64];
    char secret[40];
    char job_id[48];
} job_t;

static _Noreturn void run_rank(const job_t *job, st_store_server_t *srv, int rank, st_rank_fn fn,
                               void *arg, const char *extra_env)
{
    st_store_server_atfork_child(srv); // the parent alone serves
    char num[16];
    snprintf(num, sizeof num, "%d", rank);
    set_env("RANK", num);
    set_env("LOCAL_RANK", num);
    snprintf(num, sizeof num, "%d", job->nranks);
    set_env("WORLD_SIZE", num);
    set_env("LOCAL_WORLD_SIZE", num);
    set_env("STRATA_STORE_ADDR", job->addr);
    set_env("STRATA_STORE_EXTERNAL", "1");
    set_env("STRATA_SECRET", job->secret);
    set_env("STRATA_JOB_ID", job->job_id);
    set_extra_env(extra_env);
    // One thread for the rank's products and layers, as strata launch and torchrun give each of
    // several ranks (OMP_NUM_THREADS=1): each rank with a pool as large as the host, spinning on
    // the cores the others need, took 6 times as long a step (a trainer's --threads still sets it).
    strata_blas_set_threads(1);
    st_log_set_rank(rank);
    int rc = fn(rank, job->nranks, arg);
    // _exit skips stdio's flush as well as atexit handlers; the rank's output must not be lost.
    fflush(stdout);
    fflush(stderr);
    _exit(rc == 0 ? 0 : (rc > 0 && rc < 256 ? rc : 1));
}

/* ---- the parent ------------------------------------------------------------------------------ */

/* A fresh job id ("t<pid>-<call>", unique per call) and the given or a random secret. */
static void make_job(job_t *job, int nranks, const char *secret)
{
    static int calls;
    job->nranks = nranks;
    snprintf(job->job_id, sizeof job->job_id, "t%d-%d", (int)getpid(), ++calls);
    uint8_t rnd[16];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        uint64_t t = st_now_ns() ^ ((uint64_t)getpid() << 32);
        for (size_t i = 0; i < sizeof rnd; i++)
            rnd[i] = (uint8_t)(t >> (8 * (i % 8))) ^ (uint8_t)(i * 131);
    }
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(job->secret + 2 * i, 3, "%02x", rnd[i]);
    if (secret)
        snprintf(job->secret, sizeof job->secret, "%s", secret);
}

/* Prints how a rank ended; true if that counts as passing. The first failure's line goes to `why`
 * when that is still empty. */
static bool report(int rank, int status, int expect_fail_rank, char *why, size_t why_len)
{
    const char *note = rank == expect_fail_rank ? " (allowed)" : "";
    char line[200] = "";
    if (WIFEXITED(status)) {
        if (WEXITSTATUS(status) == 0)
            return true;
        snprintf(line, sizeof line, "rank %d exited with status %d%s", rank, WEXITSTATUS(status),
                 note);
    } else if (WIFSIGNALED(status)) {
        snprintf(line, sizeof line, "rank %d was killed by signal %d (%s)%s", rank,
                 WTERMSIG(status), strsignal(WTERMSIG(status)), note);
    }
    say("st_test_ranks: %s", line);
    if (rank == expect_fail_rank)
        return true;
    if (!why[0])
        snprintf(why, why_len, "%s", line);
    return false;
}

/* Removes /dev/shm/strata-<job_id>-* (segments of ranks that did not get to clean up). */
static void remove_shm(const char *job_id)
{
    char prefix[96];
    int plen = snprintf(prefix, sizeof prefix, "strata-%s-", job_id);
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    int removed = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strncmp(e->d_name, prefix, (size_t)plen) == 0 && unlinkat(dirfd(d), e->d_name, 0) == 0)
            removed++;
    closedir(d);
    if (removed)
        say("st_test_ranks: removed %d shared-memory file(s) left by job %s", removed, job_id);
}

int st_test_ranks(int n, st_rank_fn fn, void *arg, const st_ranks_opts_t *opts)
{
    st_ranks_opts_t o = {.deadline_ms = DEFAULT_DEADLINE_MS, .expect_fail_rank = -1};
    if (opts) {
        o = *opts;
        if (o.deadline_ms <= 0)
            o.deadline_ms = DEFAULT_DEADLINE_MS;
    }
    if (n < 1 || !fn) {
        say("st_test_ranks: bad arguments (n=%d)", n);
        return 1;
    }
    job_t job;
    st_store_server_t *srv = NULL;
    make_job(&job, n, o.secret);
    if (st_store_server_open("127.0.0.1:0", job.secret, &srv) != STRATA_OK) {
        say("st_test_ranks: cannot open the store: %s", strata_last_error());
        return 1;
    }
    snprintf(job.addr, sizeof job.addr, "127.0.0.1:%d", st_store_server_port(srv));
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    if (!pids) {
        st_store_server_close(srv, 0);
        return 1;
    }
    fflush(stdout); // or buffered output would be written once per child
    fflush(stderr);
    int live = 0, failed = 0;
    char why[200] = "";
    recap_begin_job();
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid == 0)
            run_rank(&job, srv, r, fn, arg, o.extra_env);
        if (pid < 0) {
            say("st_test_ranks: fork of rank %d failed: %s", r, strerror(errno));
            snprintf(why, sizeof why, "fork of rank %d failed: %s", r, strerror(errno));
            failed++;
            break;
        }
        pids[r] = pid;
        live++;
    }

    // Serve the store and reap ranks as they finish; a failed rank does not end the wait, since
    // failure tests need to see what the others do about it.
    uint64_t deadline = st_deadline_ms(failed ? 0 : o.deadline_ms);
    while (live > 0 && st_now_ns() < deadline) {
        if (st_store_server_poll(srv, PUMP_MS) != STRATA_OK)
            say("st_test_ranks: store: %s", strata_last_error());
        for (int r = 0; r < n; r++) {
            int status;
            if (pids[r] > 0 && waitpid(pids[r], &status, WNOHANG) == pids[r]) {
                pids[r] = 0;
                live--;
                failed += !report(r, status, o.expect_fail_rank, why, sizeof why);
            }
        }
    }
    for (int r = 0; r < n; r++) {
        if (pids[r] > 0) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], NULL, 0);
            say("st_test_ranks: rank %d was still running after %d ms; killed", r, o.deadline_ms);
            if (!why[0])
                snprintf(why, sizeof why, "rank %d was still running after %d ms", r,
                         o.deadline_ms);
            failed++;
        }
    }
    st_store_server_close(srv, 0);
    remove_shm(job.job_id);
    free(pids);
    if (failed) {
        say("st_test_ranks: %d of %d rank(s) failed (job %s)", failed, n, job.job_id);
        recap_failed_job(job.job_id, why[0] ? why : "(the harness could not start it: see above)");
    }
    return failed ? 1 : 0;
}
