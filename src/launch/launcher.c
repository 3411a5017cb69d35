/* The local process manager behind `strata launch`: starts N ranks of a program on this machine
 * with a launcher environment, the way torchrun does for one node. It picks a free port on
 * 127.0.0.1 for the bootstrap store (rank 0 hosts it), makes a random job secret and job id, and
 * gives each rank RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
 * MASTER_ADDR/MASTER_PORT, the STRATA_* bootstrap variables, STRATA_DIAG_DIR, STRATA_MEM_CKPT_DIR
 * and the restart count (and STRATA_PROGRESS=bar when its stderr is a terminal).
 * Rank output goes through output.c; signals arrive in the same poll loop through a self-pipe.
 *
 * Process groups: each rank runs in a process group of its own (setpgid), not in the launcher's.
 * A Ctrl-C in a terminal therefore reaches only the launcher (the terminal's foreground group),
 * which forwards it once to every rank group; ranks do not see it twice. Signalling whole groups
 * also reaches whatever a rank started itself (a shell's `sleep`), so a failing job cannot leave a
 * stray child holding the output pipes. The price of background groups: ranks cannot read the
 * terminal (they get /dev/null as stdin, except rank 0 when the launcher's stdin is a file or
 * pipe), and Ctrl-Z stops only the launcher. If the launcher dies without cleaning up (SIGKILL),
 * every rank gets SIGTERM through PR_SET_PDEATHSIG.
 *
 * Failures: when a rank exits non-zero or dies by a signal the launcher did not send, the launcher
 * looks for stopped ranks (/proc: they get SIGKILL at once, SIGTERM cannot reach them), gives the
 * others 1 s to fail on their own (the communicator tells every survivor the root cause within
 * milliseconds, and each writes its dump on the way out: a rank SIGTERMed first writes none), then
 * sends SIGTERM to the groups still there and SIGKILL 5 s later. When every rank is gone it decides the
 * verdict (verdict.c: the dead or stopped rank, not the first to exit), prints it, saves its
 * observations beside the dumps, and removes the job's /dev/shm names, which a killed rank cannot
 * unlink. With restarts left it starts every rank again (new port, secret and job id; the same
 * command) and counts the attempt in STRATA_RESTART_COUNT / TORCHELASTIC_RESTART_COUNT; a trainer
 * run with --resume continues from its newest checkpoint. SIGINT, SIGTERM and SIGHUP sent to the
 * launcher are forwarded to every rank, which decides how to stop (a trainer may checkpoint first),
 * and end the job without a restart; a second such signal kills all ranks. A signal the launcher
 * inherited as ignored (nohup, a background job of a script) stays ignored, and the ranks inherit
 * that too. The launcher itself never calls into the communicator.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "launch/launch_internal.h"
#include "strata/launch.h"

#define LAUNCH_SETTLE_MS     1000 /* after a failure, how long the others may fail on their own */
#define LAUNCH_KILL_GRACE_MS 5000 /* SIGTERM, then SIGKILL this much later */
#define LAUNCH_DRAIN_MS      1000 /* after the last rank exited, how long stray writers may linger */
#define LAUNCH_SPARE_FDS     32 /* stdio, signal pipe, /dev/null, the exec'd program's own needs */

typedef struct rank_proc {
    pid_t pid; /* also the rank's process group id; 0 when never started */
    bool alive;
    uint64_t sent; /* signals the launcher sent to the rank's group: bit s for signal s */
    strata_rank_obs_t obs;
} rank_proc_t;

typedef struct launcher {
    strata_launch_opts_t opt;
    rank_proc_t *procs;
    st_stream_t *streams; /* 2 per rank when prefixing */
    int alive;
    int sigfd;                 /* read end of the signal pipe */
    struct sigaction saved[5]; /* SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE as they were */
    int handled[3]; /* SIGINT, SIGTERM, SIGHUP: 1 if forwarded, 0 if inherited as ignored */
    int devnull;
    bool stdin_to_rank0;

    /* The current attempt. */
    int attempt; /* 0 for the first run, k for the k-th restart */
    char job_id[64];
    bool failed;            /* a rank failed (the first failure has been handled) */
    bool setup_failed;      /* a rank could not be started: no verdict, no restart */
    uint64_t fail_ns;       /* when the failure was detected */
    int nended;             /* ranks that ended so far (their obs.order) */
    uint64_t settle_deadline; /* 0: none armed; then SIGTERM */
    uint64_t kill_deadline;   /* 0: none armed; then SIGKILL */
    bool killed;            /* SIGKILL sent to every rank */
    uint64_t drain_deadline;

    int got_signal; /* last forwarded signal, 0 if none */
    int signals_seen;
    bool keep_diag; /* an attempt failed and left dumps: the directory is kept */

    st_outbuf_t out[2]; /* [0] stdout, [1] stderr */

    /* Every rank's environment: the launcher's plus RANK and LOCAL_RANK, whose texts are rewritten
     * before each spawn (a vfork child must not allocate or touch the parent's environ). */
    char **envp;
    char rank_kv[32], local_kv[32];
    cpu_set_t *cpus;       /* [nranks] each rank's CPUs, or NULL: not bound */
    int spawning;          /* the rank being started (read by the vfork child) */

    char diag_dir[PATH_MAX];
    bool diag_temp; /* a directory the launcher made, removed after a clean run */
    char mem_dir[PATH_MAX]; /* the job's memory checkpoints (tmpfs), "" when the user chose one */
} launcher_t;

static const int forwarded_signals[3] = {SIGINT, SIGTERM, SIGHUP};

/* The launcher's own lines, on stderr between rank lines (never inside one). */
static void note(launcher_t *L, const char *fmt, ...) ST_PRINTF(2, 3);
static void note(launcher_t *L, const char *fmt, ...)
{
    st_out_flush(&L->out[0]);
    st_out_break(&L->out[1]); // a rank's progress bar left open: this line goes below it
    va_list ap;
    va_start(ap, fmt);
    fputs("strata launch: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
}

/* True when execvp(prog) can find an executable: a path with a '/', or a name on PATH. Checked
 * once up front so a typo gives one clear error instead of N failing ranks. */
static bool program_found(const char *prog)
{
    if (strchr(prog, '/'))
        return access(prog, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path)
        path = "/bin:/usr/bin";
    char buf[PATH_MAX];
    for (const char *p = path;; p++) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        int len = n ? snprintf(buf, sizeof buf, "%.*s/%s", (int)n, p, prog)
                    : snprintf(buf, sizeof buf, "%s", prog);
        struct stat st;
        if (len > 0 && (size_t)len < sizeof buf && stat(buf, &st) == 0 && S_ISREG(st.st_mode) &&
            access(buf, X_OK) == 0)
            return true;
        if (!colon)
            return false;
        p = colon;
    }
}

/* ---- set-up --------------------------------------------------------------------------------- */

/* Makes sure fds 0..2 exist, so a pipe can never land on them and be clobbered by dup2 later. */
static void ensure_stdio(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0)
            continue;
        int n = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
        if (n >= 0 && n != fd) {
            dup2(n, fd);
            close(n);
        }
    }
}

/* Raises the soft fd limit to the hard one: the launcher needs 2 fds per rank, and rank 0 hosts a
 * store with one connection per rank. Returns the soft limit in force. */
static unsigned long long raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 1024;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit want = rl;
        want.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &want) == 0) {
            rl = want;
        } else if (rl.rlim_max == RLIM_INFINITY) {
            // The kernel caps at fs.nr_open; try a large finite value.
            want.rlim_cur = 1u << 20;
            if (setrlimit(RLIMIT_NOFILE, &want) == 0)
                rl = want;
        }
    }
    return rl.rlim_cur == RLIM_INFINITY ? ULLONG_MAX : (unsigned long long)rl.rlim_cur;
}

static bool random_bytes(unsigned char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(buf + got, n - got, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        got += (size_t)r;
    }
    if (got == n)
        return true;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t r = read(fd, buf, n);
    close(fd);
    return r == (ssize_t)n;
}

static void hex(char *dst, const unsigned char *src, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        dst[2 * i] = digits[src[i] >> 4];
        dst[2 * i + 1] = digits[src[i] & 15];
    }
    dst[2 * n] = '\0';
}

/* 0 when `port` (0: any) can be bound on 127.0.0.1 now, with the port bound in *got; else -errno. */
static int try_port(int port, int *got)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -errno;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int rc = 0;
    if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(s, (struct sockaddr *)&a, &len) == 0)
        *got = ntohs(a.sin_port);
    else
        rc = -errno;
    close(s);
    return rc;
}

/* A port that was free a moment ago on 127.0.0.1, for rank 0's store, which binds it moments later.
 * It is drawn below the kernel's ephemeral range (ip_local_port_range): ports there are handed out
 * to every connect() and bind(0) on the machine, and under load (parallel tests, a busy node) one
 * was taken in that moment often enough to fail a job. Below it, only a process binding this very
 * port can. Falls back to any free port. Returns the port or -errno. */
static int pick_free_port(void)
{
    int lo = 32768, hi = 60999, port;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2)
            lo = 32768;
        fclose(f);
    }
    int base = lo / 2; // 16384..32767 with the default range
    for (int i = 0; lo - base >= 1024 && i < 32; i++) {
        unsigned char r[4];
        if (!random_bytes(r, sizeof r))
            break;
        uint32_t x = (uint32_t)r[0] | (uint32_t)r[1] << 8 | (uint32_t)r[2] << 16;
        if (try_port(base + (int)(x % (uint32_t)(lo - base)), &port) == 0)
            return port;
    }
    int rc = try_port(0, &port);
    return rc == 0 ? port : rc;
}

static int setenv_int(const char *name, long long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    return setenv(name, buf, 1);
}

/* The variables every rank of this attempt shares, set in the launcher's own environment before
 * forking: a fresh port, secret and job id each attempt, so nothing of a failed attempt (a
 * straggler, a leftover segment) can meet the next one. */
static strata_status_t set_common_env(launcher_t *L)
{
    const strata_launch_opts_t *o = &L->opt;
    int port = pick_free_port();
    if (port < 0)
        return st_error_errno(STRATA_ERR_SYSTEM, -port, "cannot find a free port on 127.0.0.1");
    unsigned char rnd[24];
    if (!random_bytes(rnd, sizeof rnd))
        return st_error(STRATA_ERR_SYSTEM, "cannot get random bytes for the job secret");
    char secret[33], addr[64], jobhex[17];
    hex(secret, rnd, 16);
    hex(jobhex, rnd + 16, 8);
    snprintf(L->job_id, sizeof L->job_id, "launch-%s", jobhex);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);

    int rc = 0;
    rc |= setenv("MASTER_ADDR", "127.0.0.1", 1);
    rc |= setenv_int("MASTER_PORT", port);
    rc |= setenv("STRATA_STORE_ADDR", addr, 1);
    rc |= setenv("STRATA_SECRET", secret, 1);
    rc |= setenv("STRATA_JOB_ID", L->job_id, 1);
    rc |= setenv_int("WORLD_SIZE", o->nranks);
    rc |= setenv_int("LOCAL_WORLD_SIZE", o->nranks);
    rc |= setenv("GROUP_RANK", "0", 1);
    rc |= setenv("GROUP_WORLD_SIZE", "1", 1);
    rc |= setenv("STRATA_DIAG_DIR", L->diag_dir, 1);
    rc |= setenv_int("STRATA_RESTART_COUNT", L->attempt);
    rc |= setenv_int("TORCHELASTIC_RESTART_COUNT", L->attempt);
    rc |= setenv_int("TORCHELASTIC_MAX_RESTARTS", o->max_restarts);
    // Rank 0 hosts the store on the port picked above, whatever the caller's shell says.
    rc |= unsetenv("STRATA_STORE_EXTERNAL");
    if (o->tcp)
        rc |= setenv("STRATA_COMM_TRANSPORT", "tcp", 1);
    if (o->timeout_ms >= 0)
        rc |= setenv_int("STRATA_COMM_TIMEOUT_MS", o->timeout_ms);
    // The ranks' stderr is a pipe to us; when ours is a terminal, their progress may be redrawn
    // in place (we pass the redraws through live), unless the caller chose.
    if (o->prefix && L->out[1].live)
        rc |= setenv("STRATA_PROGRESS", "bar", 0);
    // As torchrun does: several ranks on one machine each get one OpenMP / OpenBLAS thread unless
    // the caller chose, so N ranks do not start N thread pools of nproc threads each (a program
    // asks for more explicitly, e.g. `strata train --threads`).
    if (o->nranks > 1) {
        rc |= setenv("OMP_NUM_THREADS", "1", 0);
        rc |= setenv("OPENBLAS_NUM_THREADS", "1", 0);
    }
    if (rc != 0)
        return st_error_errno(STRATA_ERR_SYSTEM, errno, "setenv");
    return STRATA_OK;
}

/* ---- the dump directory --------------------------------------------------------------------- */

/* True for the names the ranks and the launcher write there: rank<r>.json (and the temporary
 * rank<r>.json.tmp.<pid> of a rank killed while writing), launch.json. */
static bool is_dump_name(const char *n)
{
    if (!strcmp(n, "launch.json") || !strncmp(n, "launch.json.tmp.", 16))
        return true;
    if (strncmp(n, "rank", 4) || n[4] < '0' || n[4] > '9')
        return false;
    const char *p = n + 4;
    while (*p >= '0' && *p <= '9')
        p++;
    return !strcmp(p, ".json") || !strncmp(p, ".json.tmp.", 10);
}

static bool is_attempt_dir(const char *n)
{
    if (strncmp(n, "attempt", 7) || !n[7])
        return false;
    for (const char *p = n + 7; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

/* Removes the dumps in dir (and its attempt<k>/ directories); other files stay. */
static void clear_dumps(const char *dir, bool recurse)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char sub[PATH_MAX + 300];
    while ((de = readdir(d)) != NULL) {
        if (is_dump_name(de->d_name)) {
            unlinkat(dirfd(d), de->d_name, 0);
        } else if (recurse && is_attempt_dir(de->d_name)) {
            snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
            clear_dumps(sub, false);
            unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
        }
    }
    closedir(d);
}

/* Moves the attempt's dumps into dir/attempt<k>/, so the next attempt starts with none and a
 * post-mortem of each restart stays possible. Returns false when they could not be moved. */
static bool archive_dumps(launcher_t *L, char *where, size_t len)
{
    snprintf(where, len, "%s/attempt%d", L->diag_dir, L->attempt);
    if (mkdir(where, 0700) != 0 && errno != EEXIST)
        return false;
    DIR *d = opendir(L->diag_dir);
    if (!d)
        return false;
    int to = open(where, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    bool ok = to >= 0;
    struct dirent *de;
    while (ok && (de = readdir(d)) != NULL)
        if (is_dump_name(de->d_name) && renameat(dirfd(d), de->d_name, to, de->d_name) != 0)
            ok = false;
    if (to >= 0)
        close(to);
    closedir(d);
    return ok;
}

/* The directory where ranks keep their memory checkpoints (strata train --mem-ckpt-every): memory
 * of this launcher, the per-host agent, which outlives any rank and every restart, and goes with
 * the launcher. A tmpfs directory rather than the launcher's own heap: the ranks write it with the
 * checkpoint code they use for disks, at memory speed. A STRATA_MEM_CKPT_DIR the user set is left
 * to them. */
static strata_status_t setup_mem_dir(launcher_t *L)
{
    const char *user = getenv("STRATA_MEM_CKPT_DIR");
    if (user && *user)
        return STRATA_OK;
    snprintf(L->mem_dir, sizeof L->mem_dir, "/dev/shm/strata-mem-%d-XXXXXX", (int)getpid());
    if (!mkdtemp(L->mem_dir)) {
        // No /dev/shm (a container without it): memory checkpoints are then unavailable, and a
        // trainer asked for them says so; the launch itself goes on.
        L->mem_dir[0] = '\0';
        return STRATA_OK;
    }
    if (setenv("STRATA_MEM_CKPT_DIR", L->mem_dir, 1) != 0)
        return st_error_errno(STRATA_ERR_SYSTEM, errno, "setenv");
    return STRATA_OK;
}

/* Removes the memory checkpoints' directory and what the ranks left in it (flat: files only). */
static void remove_mem_dir(launcher_t *L)
{
    if (!L->mem_dir[0])
        return;
    DIR *d = opendir(L->mem_dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    rmdir(L->mem_dir);
}

/* Chooses the dump directory: --diag-dir, else $STRATA_DIAG_DIR, else a new temporary one. */
static strata_status_t setup_diag_dir(launcher_t *L)
{
    const char *dir = L->opt.diag_dir;
    if (!dir || !*dir)
        dir = st_knob_str("STRATA_DIAG_DIR");
    if (dir && *dir) {
        if (strlen(dir) >= sizeof L->diag_dir - 64)
            return st_error(STRATA_ERR_INVALID_ARG, "the dump directory path %s is too long", dir);
        if (mkdir(dir, 0700) != 0 && errno != EEXIST)
            return st_error_errno(STRATA_ERR_IO, errno, "cannot create the dump directory %s", dir);
        snprintf(L->diag_dir, sizeof L->diag_dir, "%s", dir);
        clear_dumps(L->diag_dir, true); // a previous job's dumps would be taken for this one's
        return STRATA_OK;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(L->diag_dir, sizeof L->diag_dir, "%s/strata-diag-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(L->diag_dir))
        return st_error_errno(STRATA_ERR_IO, errno, "cannot create a dump directory %s",
                              L->diag_dir);
    L->diag_temp = true;
    return STRATA_OK;
}

/* ---- signals -------------------------------------------------------------------------------- */

/* Write end of the signal pipe: the handler's only state. */
static int signal_pipe_w = -1;

static void on_signal_write(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (write(signal_pipe_w, &b, 1) < 0) {
        // A full pipe already holds a wake-up; the loop reaps and reads every rank anyway.
    }
    errno = saved;
}

/* Catches the forwarded signals and SIGCHLD with a handler that writes the signal's number into a
 * pipe the poll loop reads (the self-pipe trick). Not a signalfd: that needs the signals blocked in
 * every thread, and a library may have started threads before main (OpenBLAS's pool, loaded with
 * the strata command), which would then take the signal and die of it. */
static strata_status_t setup_signals(launcher_t *L)
{
    int p[2];
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0)
        return st_error_errno(STRATA_ERR_SYSTEM, errno, "pipe");
    L->sigfd = p[0];
    signal_pipe_w = p[1];
    struct sigaction catch = {.sa_handler = on_signal_write, .sa_flags = SA_RESTART};
    sigemptyset(&catch.sa_mask);
    for (int i = 0; i < 3; i++) {
        sigaction(forwarded_signals[i], NULL, &L->saved[i]);
        L->handled[i] = L->saved[i].sa_handler != SIG_IGN;
        if (L->handled[i])
            sigaction(forwarded_signals[i], &catch, NULL);
    }
    // An inherited SIGCHLD = SIG_IGN would reap the ranks behind our back and hide their status.
    sigaction(SIGCHLD, &catch, &L->saved[3]);
    // A closed stdout must not kill the launcher (and with it the job); ranks get the old action.
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &L->saved[4]);
    return STRATA_OK;
}

static void restore_signals(launcher_t *L)
{
    if (L->sigfd < 0)
        return;
    for (int i = 0; i < 3; i++)
        if (L->handled[i])
            sigaction(forwarded_signals[i], &L->saved[i], NULL);
    sigaction(SIGCHLD, &L->saved[3], NULL);
    sigaction(SIGPIPE, &L->saved[4], NULL);
    close(L->sigfd);
    close(signal_pipe_w);
    L->sigfd = signal_pipe_w = -1;
}

/* ---- ranks ---------------------------------------------------------------------------------- */

/* The ranks' environment (see launcher_t.envp), rebuilt each attempt: setenv may have moved
 * environ. */
static strata_status_t build_envp(launcher_t *L)
{
    extern char **environ;
    size_t n = 0;
    while (environ[n])
        n++;
    free(L->envp);
    L->envp = calloc(n + 3, sizeof *L->envp);
    if (!L->envp)
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "RANK=", 5) && strncmp(environ[i], "LOCAL_RANK=", 11))
            L->envp[k++] = environ[i];
    L->envp[k++] = L->rank_kv;
    L->envp[k++] = L->local_kv;
    return STRATA_OK;
}

/* In the vfork child until exec: it shares the launcher's memory, so only system calls on its own
 * stack (no allocation, no setenv). vfork rather than fork: copying the launcher's page tables for
 * every rank made starting 512 ranks take a second longer on a virtual machine. */
static void child_exec(launcher_t *L, int out_w, int err_w, int in_fd, pid_t parent)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(1); // the launcher died before prctl took effect
    if (in_fd >= 0 && in_fd != 0)
        dup2(in_fd, 0);
    if (out_w >= 0) {
        dup2(out_w, 1);
        dup2(err_w, 2);
    }
    sigaction(SIGPIPE, &L->saved[4], NULL);
    if (L->cpus)
        sched_setaffinity(0, sizeof(cpu_set_t), &L->cpus[L->spawning]);
    execvpe(L->opt.argv[0], L->opt.argv, L->envp);
    int err = errno;
    dprintf(2, "strata launch: cannot run '%s': %s\n", L->opt.argv[0], strerror(err));
    _exit(err == ENOENT ? 127 : 126);
}

/* vforks a rank (its RANK texts already set); kept apart so nothing of the caller's is live across
 * vfork. Returns the pid, or -1 with errno. */
static pid_t start_child(launcher_t *L, int out_w, int err_w, int in_fd)
{
    pid_t parent = getpid();
    pid_t pid = vfork();
    if (pid == 0)
        child_exec(L, out_w, err_w, in_fd, parent);
    return pid;
}

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Starts rank r. Returns false after printing why not. */
static bool spawn_rank(launcher_t *L, int r)
{
    int po[2] = {-1, -1}, pe[2] = {-1, -1};
    if (L->opt.prefix && (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0)) {
        int err = errno;
        if (po[0] >= 0) {
            close(po[0]);
            close(po[1]);
        }
        note(L, "pipe for rank %d: %s%s", r, strerror(err),
             err == EMFILE ? " (raise the limit with `ulimit -n`, or pass --no-prefix)" : "");
        return false;
    }
    int in_fd = (r == 0 && L->stdin_to_rank0) ? 0 : L->devnull;
    snprintf(L->rank_kv, sizeof L->rank_kv, "RANK=%d", r);
    snprintf(L->local_kv, sizeof L->local_kv, "LOCAL_RANK=%d", r);
    L->spawning = r;
    pid_t pid = start_child(L, po[1], pe[1], in_fd);
    if (pid < 0) {
        int err = errno;
        if (L->opt.prefix) {
            close(po[0]);
            close(po[1]);
            close(pe[0]);
            close(pe[1]);
        }
        note(L, "fork for rank %d: %s%s", r, strerror(err),
             err == EAGAIN ? " (the process limit, ulimit -u, may be too low)" : "");
        return false;
    }
    // Both sides set the group so a signal sent right after fork cannot miss it.
    setpgid(pid, pid);
    L->procs[r] = (rank_proc_t){.pid = pid, .alive = true, .obs = {.pid = pid}};
    L->alive++;
    if (L->opt.prefix) {
        close(po[1]);
        close(pe[1]);
        set_nonblock(po[0]);
        set_nonblock(pe[0]);
        L->streams[2 * r] = (st_stream_t){.fd = po[0], .rank = r, .out = &L->out[0]};
        L->streams[2 * r + 1] = (st_stream_t){.fd = pe[0], .rank = r, .out = &L->out[1]};
    }
    return true;
}

/* Sends sig to rank r's process group, and remembers it was the launcher's. The group may outlive
 * the rank: a rank's children may hold its pipes. */
static void signal_rank(launcher_t *L, int r, int sig)
{
    rank_proc_t *p = &L->procs[r];
    if (p->pid <= 0)
        return;
    p->sent |= 1ull << sig;
    if (kill(-p->pid, sig) != 0 && p->alive)
        kill(p->pid, sig); // not a group leader yet (setpgid raced): the rank alone
}

static void signal_ranks(launcher_t *L, int sig)
{
    for (int r = 0; r < L->opt.nranks; r++)
        signal_rank(L, r, sig);
}

static void begin_teardown(launcher_t *L)
{
    if (L->kill_deadline)
        return;
    if (L->alive > 0)
        note(L, "stopping the other %d rank%s", L->alive, L->alive == 1 ? "" : "s");
    signal_ranks(L, SIGTERM);
    L->kill_deadline = st_deadline_ms(LAUNCH_KILL_GRACE_MS);
}

/* At the first failure: a rank that is stopped cannot have failed by itself, and cannot be asked
 * to stop either (SIGTERM waits until it continues), so it is marked and killed right away. */
static void find_stopped(launcher_t *L)
{
    int n = L->opt.nranks;
    pid_t *pg = calloc((size_t)n, sizeof *pg);
    bool *stopped = calloc((size_t)n, sizeof *stopped);
    if (pg && stopped) {
        for (int r = 0; r < n; r++)
            pg[r] = L->procs[r].alive ? L->procs[r].pid : 0;
        st_launch_find_stopped(pg, n, stopped);
        for (int r = 0; r < n; r++) {
            if (!stopped[r])
                continue;
            L->procs[r].obs.stopped = true;
            note(L, "rank %d (pid %d) is stopped; killing it", r, (int)L->procs[r].pid);
            signal_rank(L, r, SIGKILL);
        }
    }
    free(pg);
    free(stopped);
}

static int find_rank(const launcher_t *L, pid_t pid)
{
    for (int r = 0; r < L->opt.nranks; r++)
        if (L->procs[r].pid == pid)
            return r;
    return -1;
}

static void describe_status(int st, char *buf, size_t len)
{
    if (WIFEXITED(st)) {
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(st));
        return;
    }
    int sig = WTERMSIG(st);
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev)
        snprintf(buf, len, "killed by signal SIG%s%s", abbrev,
                 WCOREDUMP(st) ? " (core dumped)" : "");
    else
        snprintf(buf, len, "killed by signal %d", sig);
}

static void reap(launcher_t *L)
{
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid <= 0)
            return;
        int r = find_rank(L, pid);
        if (r < 0 || !L->procs[r].alive)
            continue;
        rank_proc_t *p = &L->procs[r];
        p->alive = false;
        L->alive--;
        p->obs.order = ++L->nended;
        if (WIFEXITED(st)) {
            p->obs.end = STRATA_RANK_EXITED;
            p->obs.status = WEXITSTATUS(st);
        } else {
            p->obs.end = STRATA_RANK_SIGNALED;
            p->obs.status = WTERMSIG(st);
            p->obs.by_launcher = WTERMSIG(st) < 64 && (p->sent >> WTERMSIG(st)) & 1;
        }
        bool bad = (p->obs.end == STRATA_RANK_EXITED && p->obs.status != 0) ||
                   (p->obs.end == STRATA_RANK_SIGNALED && !p->obs.by_launcher);
        if (!bad || L->failed)
            continue;
        // The first failure stops the job; what it is blamed on is decided once every rank is
        // gone (finish_attempt): the first to exit is often a rank that noticed the failure.
        L->failed = true;
        L->fail_ns = st_now_ns();
        // Whatever the rank wrote before dying comes out first (bounded: a child it left behind
        // could keep writing).
        for (int k = 0; L->opt.prefix && k < 2; k++)
            for (int i = 0; i < 64 && L->streams[2 * r + k].fd >= 0; i++)
                if (!st_stream_read(&L->streams[2 * r + k]))
                    break;
        char how[96];
        describe_status(st, how, sizeof how);
        note(L, "rank %d %s", r, how);
        find_stopped(L);
        L->settle_deadline = st_deadline_ms(LAUNCH_SETTLE_MS);
    }
}

static void on_signal(launcher_t *L, int sig)
{
    L->signals_seen++;
    L->got_signal = sig;
    const char *abbrev = sigabbrev_np(sig);
    if (L->signals_seen == 1) {
        note(L, "got SIG%s, forwarding it to %d rank%s", abbrev ? abbrev : "?", L->alive,
             L->alive == 1 ? "" : "s");
        signal_ranks(L, sig);
    } else if (!L->killed) {
        note(L, "got SIG%s again, killing all ranks", abbrev ? abbrev : "?");
        signal_ranks(L, SIGKILL);
        L->killed = true;
    }
}

static void drain_signals(launcher_t *L)
{
    unsigned char sig;
    while (read(L->sigfd, &sig, 1) == 1) {
        if (sig == SIGCHLD)
            reap(L);
        else
            on_signal(L, sig);
    }
}

static int poll_timeout(const launcher_t *L)
{
    uint64_t deadline = UINT64_MAX;
    if (L->settle_deadline && !L->kill_deadline)
        deadline = L->settle_deadline;
    if (L->kill_deadline && !L->killed)
        deadline = L->kill_deadline;
    if (L->drain_deadline && L->drain_deadline < deadline)
        deadline = L->drain_deadline;
    if (deadline == UINT64_MAX)
        return -1;
    uint64_t now = st_now_ns();
    if (deadline <= now)
        return 0;
    uint64_t ms = (deadline - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Runs until every rank of the attempt has ended and its output is drained. */
static void run_loop(launcher_t *L, struct pollfd *pfds, int *which)
{
    int nstreams = L->opt.prefix ? 2 * L->opt.nranks : 0;
    // A rank may have exited before the loop started; its SIGCHLD byte waits in the pipe then.
    for (;;) {
        int np = 0;
        pfds[np++] = (struct pollfd){.fd = L->sigfd, .events = POLLIN};
        for (int i = 0; i < nstreams; i++)
            if (L->streams[i].fd >= 0) {
                which[np] = i;
                pfds[np++] = (struct pollfd){.fd = L->streams[i].fd, .events = POLLIN};
            }
        if (L->alive == 0 && np == 1)
            break;
        int rc = poll(pfds, (nfds_t)np, poll_timeout(L));
        if (rc < 0 && errno != EINTR) {
            note(L, "poll: %s", strerror(errno));
            signal_ranks(L, SIGKILL);
            break;
        }
        if (rc > 0) {
            // Output first, so a rank's last words come out before the verdict on its exit.
            for (int k = 1; k < np; k++)
                if (pfds[k].revents)
                    st_stream_read(&L->streams[which[k]]);
            if (pfds[0].revents)
                drain_signals(L);
        }
        uint64_t now = st_now_ns();
        // Also when every rank is gone: what they started may still run.
        if (L->settle_deadline && !L->kill_deadline &&
            (now >= L->settle_deadline || L->alive == 0))
            begin_teardown(L);
        if (L->kill_deadline && !L->killed && now >= L->kill_deadline) {
            if (L->alive > 0)
                note(L, "%d rank%s still running after %d ms, sending SIGKILL", L->alive,
                     L->alive == 1 ? "" : "s", LAUNCH_KILL_GRACE_MS);
            signal_ranks(L, SIGKILL);
            L->killed = true;
        }
        if (L->alive == 0 && np > 1) {
            // Every rank is gone; only something they left behind can still hold a pipe open.
            if (!L->drain_deadline) {
                L->drain_deadline = st_deadline_ms(LAUNCH_DRAIN_MS);
            } else if (now >= L->drain_deadline) {
                if (L->kill_deadline && !L->killed)
                    signal_ranks(L, SIGKILL);
                for (int i = 0; i < nstreams; i++)
                    st_stream_close(&L->streams[i]);
            }
        }
    }
    st_out_flush(&L->out[0]);
    st_out_flush(&L->out[1]);
    // Ranks killed while the loop was failing (poll error) are collected here.
    while (L->alive > 0 && waitpid(-1, NULL, 0) > 0)
        L->alive--;
}

/* Starts every rank of an attempt. False when one could not be started (the others are then
 * being torn down). */
static bool start_attempt(launcher_t *L)
{
    int n = L->opt.nranks;
    memset(L->procs, 0, (size_t)n * sizeof *L->procs);
    for (int i = 0; L->opt.prefix && i < 2 * n; i++)
        L->streams[i] = (st_stream_t){.fd = -1};
    L->failed = L->setup_failed = L->killed = false;
    L->nended = 0;
    L->settle_deadline = L->kill_deadline = L->drain_deadline = 0;
    strata_status_t rc = set_common_env(L);
    if (rc == STRATA_OK)
        rc = build_envp(L);
    if (rc != STRATA_OK) {
        note(L, "%s", strata_last_error());
        L->setup_failed = true;
        return false;
    }
    for (int r = 0; r < n; r++) {
        if (!spawn_rank(L, r)) {
            L->setup_failed = true; // no verdict on ranks that were never all started
            L->failed = true;
            begin_teardown(L);
            return false;
        }
    }
    return true;
}

/* After an attempt failed: the verdict from what the launcher saw and the ranks' dumps. Returns
 * whether the dump directory is worth keeping: it is the user's, or a rank wrote a dump into it
 * (then the observations are saved beside them for `strata diagnose`); a temporary directory no
 * rank wrote into (a program that does not use the communicator) is not kept. */
static bool decide(launcher_t *L, strata_verdict_t *v)
{
    int n = L->opt.nranks;
    strata_diag_t *d = NULL;
    if (strata_diag_load(L->diag_dir, n, &d) != STRATA_OK) {
        note(L, "warning: %s", strata_last_error());
        d = calloc(1, sizeof *d);
        if (d)
            d->nranks = n;
    }
    strata_rank_obs_t *obs = calloc((size_t)n, sizeof *obs);
    if (!d || !obs) {
        free(obs);
        strata_diag_free(d);
        *v = (strata_verdict_t){.rank = -1, .exit_code = 1};
        snprintf(v->text, sizeof v->text, "a rank failed (out of memory for the verdict)");
        return !L->diag_temp;
    }
    for (int r = 0; r < n; r++)
        obs[r] = L->procs[r].obs;
    free(d->obs);
    d->obs = obs;
    for (int i = 0; i < d->nproblems; i++)
        note(L, "warning: %s", d->problems[i]);
    strata_verdict_decide(d, v);
    if (v->exit_code <= 0)
        v->exit_code = 1;
    bool keep = !L->diag_temp || d->nproblems > 0;
    for (int r = 0; d->dumps && r < n; r++)
        keep = keep || d->dumps[r];
    if (keep && strata_diag_save_obs(L->diag_dir, L->job_id, n, obs, v->text) != STRATA_OK)
        note(L, "warning: %s", strata_last_error());
    strata_diag_free(d);
    return keep;
}

/* The ranks' CPUs under the --bind-to policy (a coarser one, or none, when the ranks outnumber the
 * cores: said once). */
static strata_status_t setup_binding(launcher_t *L)
{
    st_bind_t want;
    const char *b = L->opt.bind ? L->opt.bind : "core";
    if (!st_bind_parse(b, &want))
        return st_error(STRATA_ERR_INVALID_ARG, "--bind-to '%s': expected core, numa or none", b);
    if (want == ST_BIND_NONE)
        return STRATA_OK;
    if (!(L->cpus = calloc((size_t)L->opt.nranks, sizeof *L->cpus)))
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory for %d ranks", L->opt.nranks);
    char why[160];
    st_bind_t got = st_bind_sets(want, L->opt.nranks, L->cpus, why, sizeof why);
    if (why[0])
        note(L, "--bind-to %s: %s", st_bind_name(want), why);
    if (got == ST_BIND_NONE) {
        free(L->cpus);
        L->cpus = NULL;
    }
    return STRATA_OK;
}

strata_launch_opts_t strata_launch_opts_default(void)
{
    return (strata_launch_opts_t){.nranks = 1, .timeout_ms = -1, .prefix = true, .bind = "core"};
}

static void launcher_free(launcher_t *L)
{
    restore_signals(L);
    if (L->devnull >= 0)
        close(L->devnull);
    for (int i = 0; L->streams && i < 2 * L->opt.nranks; i++)
        if (L->streams[i].fd >= 0)
            st_stream_close(&L->streams[i]);
    free(L->streams);
    free(L->procs);
    free(L->cpus);
    free(L->envp);
    free(L);
}

/* Set-up shared by all attempts; on failure *code is what the launcher should exit with. */
static strata_status_t launcher_init(launcher_t *L, int *code)
{
    const strata_launch_opts_t *o = &L->opt;
    *code = 1;
    if (o->nranks < 1 || o->nranks > STRATA_LAUNCH_MAX_RANKS)
        return st_error(STRATA_ERR_INVALID_ARG, "the number of ranks must be in [1, %d], got %d",
                        STRATA_LAUNCH_MAX_RANKS, o->nranks);
    if (o->max_restarts < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "max_restarts must be >= 0, got %d",
                        o->max_restarts);
    if (!o->argv || !o->argv[0])
        return st_error(STRATA_ERR_INVALID_ARG, "no program to run");
    if (!program_found(o->argv[0])) {
        *code = 127;
        return st_error(STRATA_ERR_INVALID_ARG, "%s: command not found (or not executable)",
                        o->argv[0]);
    }
    ensure_stdio();
    L->out[0].fd = 1;
    L->out[1].fd = 2;
    L->out[0].live = isatty(1) == 1;
    L->out[1].live = isatty(2) == 1;
    unsigned long long limit = raise_nofile();
    unsigned long long need = (o->prefix ? 2ull * (unsigned)o->nranks : 0) + LAUNCH_SPARE_FDS;
    if (need > limit)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "-n %d needs about %llu file descriptors for output pipes, but the limit "
                        "is %llu: raise it with `ulimit -n` (as root, or in "
                        "/etc/security/limits.conf), or pass --no-prefix",
                        o->nranks, need, limit);
    L->procs = calloc((size_t)o->nranks, sizeof *L->procs);
    L->streams = o->prefix ? calloc((size_t)o->nranks * 2, sizeof *L->streams) : NULL;
    if (!L->procs || (o->prefix && !L->streams))
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory for %d ranks", o->nranks);
    for (int i = 0; o->prefix && i < 2 * o->nranks; i++)
        L->streams[i].fd = -1;
    L->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (L->devnull < 0)
        return st_error_errno(STRATA_ERR_IO, errno, "cannot open /dev/null");
    // Rank 0 reads the launcher's stdin when it is a file or a pipe (as mpirun does); a terminal
    // cannot be read from a background process group, so then every rank reads /dev/null.
    L->stdin_to_rank0 = !isatty(0);
    ST_TRY(setup_binding(L));
    ST_TRY(setup_diag_dir(L));
    ST_TRY(setup_mem_dir(L));
    return setup_signals(L);
}

strata_status_t strata_launch_run(const strata_launch_opts_t *o, int *exit_code)
{
    *exit_code = 1;
    launcher_t *L = calloc(1, sizeof *L);
    if (!L)
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
    L->opt = *o;
    L->sigfd = L->devnull = -1;
    strata_status_t rc = launcher_init(L, exit_code);
    int n = o->nranks;
    struct pollfd *pfds = rc == STRATA_OK ? calloc((size_t)2 * n + 1, sizeof *pfds) : NULL;
    int *which = rc == STRATA_OK ? calloc((size_t)2 * n + 1, sizeof *which) : NULL;
    if (rc == STRATA_OK && (!pfds || !which))
        rc = st_error(STRATA_ERR_NO_MEMORY, "out of memory for %d ranks", n);
    if (rc != STRATA_OK) {
        free(pfds);
        free(which);
        if (L->diag_temp)
            rmdir(L->diag_dir);
        remove_mem_dir(L);
        launcher_free(L);
        return rc;
    }

    int code = 0;
    char last_verdict[2 * PATH_MAX] = "";
    for (;;) {
        bool started = start_attempt(L);
        if (started && L->attempt > 0) {
            double s = (double)(st_now_ns() - L->fail_ns) / 1e9;
            note(L,
                 "restart %d of %d after %s; ranks started again %.2f s after the failure was "
                 "detected",
                 L->attempt, o->max_restarts, last_verdict, s);
        }
        run_loop(L, pfds, which);
        int removed = st_launch_remove_shm(L->job_id);
        if (!L->failed) {
            code = L->got_signal ? 128 + L->got_signal : 0;
            if (removed > 0)
                note(L, "removed %d shared-memory file%s the ranks left in /dev/shm", removed,
                     removed == 1 ? "" : "s");
            break;
        }
        if (L->setup_failed) {
            code = 1;
            break;
        }
        strata_verdict_t v;
        bool keep = decide(L, &v);
        L->keep_diag = L->keep_diag || keep;
        code = v.exit_code;
        char where[PATH_MAX + 32] = "";
        if (keep)
            snprintf(where, sizeof where, "%s", L->diag_dir);
        if (!L->got_signal && L->attempt < o->max_restarts) {
            if (keep && !archive_dumps(L, where, sizeof where))
                note(L, "warning: cannot move the dumps of attempt %d into %s: %s", L->attempt,
                     where, strerror(errno));
            if (keep)
                snprintf(last_verdict, sizeof last_verdict, "%s (dumps: %s)", v.text, where);
            else
                snprintf(last_verdict, sizeof last_verdict, "%s", v.text);
        } else {
            note(L, "%s.%s%s", v.text, keep ? " Dumps: " : "", where);
            if (removed > 0)
                note(L, "removed %d shared-memory file%s the ranks left in /dev/shm", removed,
                     removed == 1 ? "" : "s");
            break;
        }
        L->attempt++;
    }
    if (L->diag_temp && !L->keep_diag) {
        clear_dumps(L->diag_dir, true);
        rmdir(L->diag_dir);
    }
    remove_mem_dir(L);
    free(pfds);
    free(which);
    launcher_free(L);
    *exit_code = code;
    return STRATA_OK;
}
