/* `strata launch`: starts N ranks of a program on this machine with a launcher environment, the way
 * torchrun does for one node. It picks a free port on 127.0.0.1 for the bootstrap store (rank 0
 * hosts it), makes a random job secret and job id, and gives each rank RANK, WORLD_SIZE,
 * LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR/MASTER_PORT and the STRATA_* bootstrap
 * variables. Every line a rank writes comes out whole, prefixed with "[r<rank>] ", through two
 * pipes per rank that one poll loop reads; signals arrive in the same loop through a self-pipe.
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
 * Failures: the first rank that exits non-zero or by a signal is named, the others get SIGTERM
 * (their whole groups), and SIGKILL 5 s later; launch exits with that rank's status (128+signal for
 * a signal). SIGINT, SIGTERM and SIGHUP sent to the launcher are forwarded to every rank, which
 * decides how to stop (a trainer may checkpoint first); a second such signal kills all ranks. A
 * signal the launcher inherited as ignored (nohup, a background job of a script) stays ignored, and
 * the ranks inherit that too. The launcher itself never calls into the communicator.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
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
#include "strata/cmd.h"

#define LAUNCH_MAX_RANKS     65536
#define LAUNCH_KILL_GRACE_MS 5000 /* SIGTERM, then SIGKILL this much later */
#define LAUNCH_DRAIN_MS      1000 /* after the last rank exited, how long stray writers may linger */
#define LAUNCH_LINE_MAX      (1 << 20) /* a longer line is written out in pieces */
#define LAUNCH_READ_CHUNK    65536
#define LAUNCH_OUT_BUF       (LAUNCH_READ_CHUNK * 2)
#define LAUNCH_SPARE_FDS     32 /* stdio, signal pipe, /dev/null, the exec'd program's own needs */

typedef struct launch_opts {
    int nranks;
    bool tcp;
    long long timeout_ms; /* < 0: not given */
    bool prefix;
    char **argv; /* PROGRAM ARGS..., NULL-terminated */
} launch_opts_t;

/* One rank's stdout or stderr pipe, read end. A partial line waits in buf until its newline. */
typedef struct stream {
    int fd; /* -1 once closed */
    int rank;
    int dest;     /* 1 or 2: where the launcher writes it */
    bool midline; /* an over-long line was partly written: no prefix before the rest */
    char *buf;
    size_t len, cap;
} stream_t;

typedef struct rank_proc {
    pid_t pid; /* also the rank's process group id; 0 when never started */
    bool alive;
} rank_proc_t;

/* Output buffer for one destination fd; flushed whenever a line would not fit, and after each read,
 * so a line is never split across a write that another line could get in between. */
typedef struct outbuf {
    int fd;
    bool broken; /* EPIPE or another write error: drop output from now on */
    size_t len;
    char data[LAUNCH_OUT_BUF];
} outbuf_t;

typedef struct launcher {
    launch_opts_t opt;
    rank_proc_t *procs;
    stream_t *streams; /* 2 per rank when prefixing */
    int nstreams_open;
    int alive;
    int sigfd; /* read end of the signal pipe */
    struct sigaction old_sigpipe;
    int handled[3]; /* SIGINT, SIGTERM, SIGHUP: 1 if forwarded, 0 if inherited as ignored */

    bool failed; /* the first failure has been recorded */
    int fail_rank;
    int fail_code;  /* launcher exit code for it */
    int got_signal; /* last forwarded signal, 0 if none */
    int signals_seen;

    uint64_t kill_deadline;  /* 0: none armed */
    bool killed;             /* SIGKILL sent */
    uint64_t drain_deadline; /* 0: none armed */

    outbuf_t out[2]; /* [0] stdout, [1] stderr */

    /* Every rank's environment: the launcher's plus RANK and LOCAL_RANK, whose texts are rewritten
     * before each spawn (a vfork child must not allocate or touch the parent's environ). */
    char **envp;
    char rank_kv[32], local_kv[32];
} launcher_t;

static const int forwarded_signals[3] = {SIGINT, SIGTERM, SIGHUP};

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: strata launch -n N [options] [--] PROGRAM [ARGS...]\n"
        "\n"
        "Starts N ranks of PROGRAM (found through PATH) on this machine with a launcher\n"
        "environment: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK=0,\n"
        "MASTER_ADDR=127.0.0.1, MASTER_PORT, STRATA_STORE_ADDR (rank 0 hosts the store on a free\n"
        "port), STRATA_SECRET (random) and STRATA_JOB_ID; with N > 1, OMP_NUM_THREADS=1 and\n"
        "OPENBLAS_NUM_THREADS=1 unless already set (as torchrun does).\n"
        "\n"
        "options:\n"
        "  -n, --nproc N       number of ranks (1..%d)\n"
        "  --tcp               set STRATA_COMM_TRANSPORT=tcp (no shared memory between ranks)\n"
        "  --timeout-ms T      set STRATA_COMM_TIMEOUT_MS=T (timeout of every blocking call)\n"
        "  --no-prefix         pass rank output through untouched instead of prefixing\n"
        "                      each line with \"[r<rank>] \"\n"
        "  -h, --help          this text\n"
        "\n"
        "If a rank exits non-zero or by a signal, launch names it, sends SIGTERM to the other\n"
        "ranks (SIGKILL 5 s later) and exits with that rank's status (128+signal for a signal).\n"
        "SIGINT, SIGTERM and SIGHUP are forwarded to every rank; a second one kills them.\n"
        "\n"
        "example: strata launch -n 2 -- strata bench allreduce -b 8 -e 256M -f 4\n",
        LAUNCH_MAX_RANKS);
}

static int usage_error(const char *fmt, ...) ST_PRINTF(1, 2);
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("strata launch: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(
        "\nusage: strata launch -n N [--tcp] [--timeout-ms T] [--no-prefix] [--] PROGRAM [ARGS...]"
        "\n(see `strata launch --help`)\n",
        stderr);
    return 2;
}

/* Returns 0, or 2 after printing a usage error, or -1 for --help. Options end at the first
 * argument that is not one (the program) or after "--". */
static int parse_args(int argc, char **argv, launch_opts_t *o)
{
    *o = (launch_opts_t){.nranks = -1, .timeout_ms = -1, .prefix = true};
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
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
        bool is_n = !strcmp(a, "-n") || !strcmp(a, "--nproc") || !strcmp(a, "--nproc-per-node");
        bool is_t = !strcmp(a, "--timeout-ms");
        if (is_n || is_t) {
            if (i + 1 >= argc)
                return usage_error("%s needs a value", a);
            val = argv[++i];
        } else if (a[1] == 'n' && a[2] != '\0') {
            is_n = true; // -n4
            val = a + 2;
        } else if (!strncmp(a, "--nproc=", 8) || !strncmp(a, "--nproc-per-node=", 17)) {
            is_n = true;
            val = strchr(a, '=') + 1;
        } else if (!strncmp(a, "--timeout-ms=", 13)) {
            is_t = true;
            val = a + 13;
        } else {
            return usage_error("unknown option '%s'", a);
        }
        long long v;
        if (is_n) {
            if (!cmd_parse_int(val, LLONG_MIN, LLONG_MAX, &v))
                return usage_error("-n wants a number of ranks, got '%s'", val);
            if (v < 1)
                return usage_error("-n must be at least 1, got %s", val);
            if (v > LAUNCH_MAX_RANKS)
                return usage_error("-n %s: too many ranks for one machine", val);
            o->nranks = (int)v;
        } else {
            if (!cmd_parse_int(val, -1, LLONG_MAX, &v))
                return usage_error("--timeout-ms wants milliseconds (-1 = never), got '%s'", val);
            o->timeout_ms = v;
        }
    }
    if (o->nranks < 0)
        return usage_error("%s", "missing -n N (the number of ranks)");
    if (i >= argc)
        return usage_error("%s", "missing the program to run");
    o->argv = argv + i;
    return 0;
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

/* A port that was free a moment ago on 127.0.0.1. Rank 0 binds it moments later; another process
 * could take it in between, which makes rank 0's store fail to start (a clear error, not a hang).
 */
static int pick_free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -errno;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(s, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    else
        port = -errno;
    close(s);
    return port;
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

static int setenv_int(const char *name, long long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    return setenv(name, buf, 1);
}

/* The variables every rank shares, set in the launcher's own environment before forking. */
static int set_common_env(const launch_opts_t *o, int port)
{
    unsigned char rnd[24];
    if (!random_bytes(rnd, sizeof rnd))
        return cmd_fail(NULL, "launch: cannot get random bytes for the job secret");
    char secret[33], job[64], addr[64], jobhex[17];
    hex(secret, rnd, 16);
    hex(jobhex, rnd + 16, 8);
    snprintf(job, sizeof job, "launch-%s", jobhex);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);

    int rc = 0;
    rc |= setenv("MASTER_ADDR", "127.0.0.1", 1);
    rc |= setenv_int("MASTER_PORT", port);
    rc |= setenv("STRATA_STORE_ADDR", addr, 1);
    rc |= setenv("STRATA_SECRET", secret, 1);
    rc |= setenv("STRATA_JOB_ID", job, 1);
    rc |= setenv_int("WORLD_SIZE", o->nranks);
    rc |= setenv_int("LOCAL_WORLD_SIZE", o->nranks);
    rc |= setenv("GROUP_RANK", "0", 1);
    rc |= setenv("GROUP_WORLD_SIZE", "1", 1);
    // Rank 0 hosts the store on the port picked above, whatever the caller's shell says.
    rc |= unsetenv("STRATA_STORE_EXTERNAL");
    if (o->tcp)
        rc |= setenv("STRATA_COMM_TRANSPORT", "tcp", 1);
    if (o->timeout_ms >= 0)
        rc |= setenv_int("STRATA_COMM_TIMEOUT_MS", o->timeout_ms);
    // As torchrun does: several ranks on one machine each get one OpenMP / OpenBLAS thread unless
    // the caller chose, so N ranks do not start N thread pools of nproc threads each (a program
    // asks for more explicitly, e.g. `strata train --threads`).
    if (o->nranks > 1) {
        rc |= setenv("OMP_NUM_THREADS", "1", 0);
        rc |= setenv("OPENBLAS_NUM_THREADS", "1", 0);
    }
    if (rc != 0)
        return cmd_fail(NULL, "launch: setenv: %s", strerror(errno));
    return 0;
}

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
static int setup_signals(launcher_t *L)
{
    int p[2];
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0)
        return cmd_fail(NULL, "launch: pipe: %s", strerror(errno));
    L->sigfd = p[0];
    signal_pipe_w = p[1];
    struct sigaction catch = {.sa_handler = on_signal_write, .sa_flags = SA_RESTART};
    sigemptyset(&catch.sa_mask);
    for (int i = 0; i < 3; i++) {
        struct sigaction cur;
        sigaction(forwarded_signals[i], NULL, &cur);
        L->handled[i] = cur.sa_handler != SIG_IGN;
        if (L->handled[i])
            sigaction(forwarded_signals[i], &catch, NULL);
    }
    // An inherited SIGCHLD = SIG_IGN would reap the ranks behind our back and hide their status.
    sigaction(SIGCHLD, &catch, NULL);
    // A closed stdout must not kill the launcher (and with it the job); ranks get the old action.
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &L->old_sigpipe);
    return 0;
}

/* ---- output --------------------------------------------------------------------------------- */

static void write_all(outbuf_t *b, const char *data, size_t len)
{
    size_t off = 0;
    while (off < len && !b->broken) {
        ssize_t n = write(b->fd, data + off, len - off);
        if (n > 0) {
            off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && errno == EAGAIN) {
            // Someone made our stdout non-blocking; wait until it drains.
            struct pollfd p = {.fd = b->fd, .events = POLLOUT};
            poll(&p, 1, 1000);
        } else {
            b->broken = true;
        }
    }
}

static void out_flush(outbuf_t *b)
{
    write_all(b, b->data, b->len);
    b->len = 0;
}

static void out_put(outbuf_t *b, const char *data, size_t n)
{
    if (b->broken || n == 0)
        return;
    if (b->len + n > sizeof b->data) {
        out_flush(b);
        if (n > sizeof b->data) {
            // Larger than the buffer: straight through (still in order, still the only writer).
            write_all(b, data, n);
            return;
        }
    }
    memcpy(b->data + b->len, data, n);
    b->len += n;
}

static void out_prefix(outbuf_t *b, int rank)
{
    char p[24];
    int n = snprintf(p, sizeof p, "[r%d] ", rank);
    out_put(b, p, (size_t)n);
}

/* Emits one complete line: what waits in s->buf, then `data` (which ends with '\n'). */
static void emit_line(launcher_t *L, stream_t *s, const char *data, size_t n)
{
    outbuf_t *b = &L->out[s->dest - 1];
    // Keep the prefix, the line and its newline in one buffer so they go out together.
    if (b->len + 24 + s->len + n > sizeof b->data)
        out_flush(b);
    if (!s->midline)
        out_prefix(b, s->rank);
    out_put(b, s->buf, s->len);
    out_put(b, data, n);
    s->len = 0;
    s->midline = false;
}

static bool buf_append(stream_t *s, const char *data, size_t n)
{
    if (s->len + n > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->len + n)
            cap *= 2;
        char *nb = realloc(s->buf, cap);
        if (!nb)
            return false;
        s->buf = nb;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, data, n);
    s->len += n;
    return true;
}

/* Writes out what waits in s->buf without ending the line (too long, or out of memory). */
static void emit_partial(launcher_t *L, stream_t *s, const char *data, size_t n)
{
    outbuf_t *b = &L->out[s->dest - 1];
    if (!s->midline)
        out_prefix(b, s->rank);
    out_put(b, s->buf, s->len);
    out_put(b, data, n);
    s->len = 0;
    s->midline = true;
}

static void stream_close(launcher_t *L, stream_t *s)
{
    if (s->fd < 0)
        return;
    if (s->len > 0 || s->midline)
        emit_line(L, s, "\n",
                  1); // the partial last line, ended so the next rank's line starts clean
    close(s->fd);
    s->fd = -1;
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
    L->nstreams_open--;
}

/* Reads once from a readable stream and writes out its complete lines. Returns true when data
 * came, false on EOF (the stream is then closed) or when nothing was there. */
static bool stream_read(launcher_t *L, stream_t *s)
{
    char chunk[LAUNCH_READ_CHUNK];
    ssize_t n = read(s->fd, chunk, sizeof chunk);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return false;
    if (n <= 0) {
        stream_close(L, s);
        out_flush(&L->out[s->dest - 1]);
        return false;
    }
    const char *p = chunk, *end = chunk + n;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (nl) {
            emit_line(L, s, p, (size_t)(nl + 1 - p));
            p = nl + 1;
            continue;
        }
        size_t rest = (size_t)(end - p);
        if (s->len + rest > LAUNCH_LINE_MAX || !buf_append(s, p, rest))
            emit_partial(L, s, p, rest);
        break;
    }
    out_flush(&L->out[s->dest - 1]);
    return true;
}

/* ---- ranks ---------------------------------------------------------------------------------- */

/* The ranks' environment (see launcher_t.envp); 0 or 1 after printing why not. */
static int build_envp(launcher_t *L)
{
    extern char **environ;
    size_t n = 0;
    while (environ[n])
        n++;
    L->envp = calloc(n + 3, sizeof *L->envp);
    if (!L->envp)
        return cmd_fail(NULL, "launch: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "RANK=", 5) && strncmp(environ[i], "LOCAL_RANK=", 11))
            L->envp[k++] = environ[i];
    L->envp[k++] = L->rank_kv;
    L->envp[k++] = L->local_kv;
    return 0;
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
    sigaction(SIGPIPE, &L->old_sigpipe, NULL);
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

/* Starts rank r. Returns 0, or 1 after printing why not. */
static int spawn_rank(launcher_t *L, int r, int devnull, bool stdin_to_rank0)
{
    int po[2] = {-1, -1}, pe[2] = {-1, -1};
    if (L->opt.prefix && (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0)) {
        int err = errno;
        if (po[0] >= 0) {
            close(po[0]);
            close(po[1]);
        }
        return cmd_fail(err == EMFILE ? "raise the limit with `ulimit -n`, or pass --no-prefix"
                                      : NULL,
                        "launch: pipe for rank %d: %s", r, strerror(err));
    }
    int in_fd = (r == 0 && stdin_to_rank0) ? 0 : devnull;
    snprintf(L->rank_kv, sizeof L->rank_kv, "RANK=%d", r);
    snprintf(L->local_kv, sizeof L->local_kv, "LOCAL_RANK=%d", r);
    pid_t pid = start_child(L, po[1], pe[1], in_fd);
    if (pid < 0) {
        int err = errno;
        if (L->opt.prefix) {
            close(po[0]);
            close(po[1]);
            close(pe[0]);
            close(pe[1]);
        }
        return cmd_fail(err == EAGAIN ? "the process limit (ulimit -u) may be too low" : NULL,
                        "launch: fork for rank %d: %s", r, strerror(err));
    }
    // Both sides set the group so a signal sent right after fork cannot miss it.
    setpgid(pid, pid);
    L->procs[r] = (rank_proc_t){.pid = pid, .alive = true};
    L->alive++;
    if (L->opt.prefix) {
        close(po[1]);
        close(pe[1]);
        set_nonblock(po[0]);
        set_nonblock(pe[0]);
        L->streams[2 * r] = (stream_t){.fd = po[0], .rank = r, .dest = 1};
        L->streams[2 * r + 1] = (stream_t){.fd = pe[0], .rank = r, .dest = 2};
        L->nstreams_open += 2;
    }
    return 0;
}

/* Sends sig to every rank's process group. Groups of ranks that already exited are included: a
 * rank's children may outlive it and hold its pipes. */
static void signal_ranks(launcher_t *L, int sig)
{
    for (int r = 0; r < L->opt.nranks; r++)
        if (L->procs[r].pid > 0 && kill(-L->procs[r].pid, sig) != 0 && L->procs[r].alive)
            kill(L->procs[r].pid, sig); // not a group leader yet (setpgid raced): the rank alone
}

static void begin_teardown(launcher_t *L)
{
    if (L->kill_deadline)
        return;
    if (L->alive > 0)
        fprintf(stderr, "strata launch: stopping the other %d rank%s\n", L->alive,
                L->alive == 1 ? "" : "s");
    signal_ranks(L, SIGTERM);
    L->kill_deadline = st_deadline_ms(LAUNCH_KILL_GRACE_MS);
}

static int find_rank(const launcher_t *L, pid_t pid)
{
    for (int r = 0; r < L->opt.nranks; r++)
        if (L->procs[r].pid == pid)
            return r;
    return -1;
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
        L->procs[r].alive = false;
        L->alive--;
        bool bad = !WIFEXITED(st) || WEXITSTATUS(st) != 0;
        if (!bad || L->failed)
            continue;
        // The first failure wins; ranks we stop afterwards are its consequences, not news.
        L->failed = true;
        L->fail_rank = r;
        // Whatever the rank wrote before dying comes out before the verdict (bounded: a child it
        // left behind could keep writing).
        for (int k = 0; L->opt.prefix && k < 2; k++)
            for (int i = 0; i < 64 && L->streams[2 * r + k].fd >= 0; i++)
                if (!stream_read(L, &L->streams[2 * r + k]))
                    break;
        for (int k = 0; k < 2; k++)
            out_flush(&L->out[k]);
        if (WIFEXITED(st)) {
            L->fail_code = WEXITSTATUS(st);
            fprintf(stderr, "strata launch: rank %d exited with status %d\n", r, L->fail_code);
        } else {
            int sig = WTERMSIG(st);
            const char *abbrev = sigabbrev_np(sig);
            L->fail_code = 128 + sig;
            if (abbrev)
                fprintf(stderr, "strata launch: rank %d killed by signal SIG%s%s\n", r, abbrev,
                        WCOREDUMP(st) ? " (core dumped)" : "");
            else
                fprintf(stderr, "strata launch: rank %d killed by signal %d\n", r, sig);
        }
        begin_teardown(L);
    }
}

static void on_signal(launcher_t *L, int sig)
{
    L->signals_seen++;
    L->got_signal = sig;
    const char *abbrev = sigabbrev_np(sig);
    if (L->signals_seen == 1) {
        fprintf(stderr, "strata launch: got SIG%s, forwarding it to %d rank%s\n",
                abbrev ? abbrev : "?", L->alive, L->alive == 1 ? "" : "s");
        signal_ranks(L, sig);
    } else if (!L->killed) {
        fprintf(stderr, "strata launch: got SIG%s again, killing all ranks\n",
                abbrev ? abbrev : "?");
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

static int run_loop(launcher_t *L)
{
    int nstreams = L->opt.prefix ? 2 * L->opt.nranks : 0;
    struct pollfd *pfds = calloc((size_t)nstreams + 1, sizeof *pfds);
    int *which = calloc((size_t)nstreams + 1, sizeof *which);
    if (!pfds || !which) {
        free(pfds);
        free(which);
        fprintf(stderr, "strata launch: out of memory\n");
        signal_ranks(L, SIGKILL);
        return 1;
    }
    // A rank may have exited before the loop started; its SIGCHLD byte waits in the pipe then.
    while (L->alive > 0 || L->nstreams_open > 0) {
        int np = 0;
        pfds[np++] = (struct pollfd){.fd = L->sigfd, .events = POLLIN};
        for (int i = 0; i < nstreams; i++)
            if (L->streams[i].fd >= 0) {
                which[np] = i;
                pfds[np++] = (struct pollfd){.fd = L->streams[i].fd, .events = POLLIN};
            }
        int rc = poll(pfds, (nfds_t)np, poll_timeout(L));
        if (rc < 0 && errno != EINTR) {
            fprintf(stderr, "strata launch: poll: %s\n", strerror(errno));
            signal_ranks(L, SIGKILL);
            break;
        }
        if (rc > 0) {
            // Output first, so a rank's last words come out before the verdict on its exit.
            for (int k = 1; k < np; k++)
                if (pfds[k].revents)
                    stream_read(L, &L->streams[which[k]]);
            if (pfds[0].revents)
                drain_signals(L);
        }
        uint64_t now = st_now_ns();
        if (L->kill_deadline && !L->killed && now >= L->kill_deadline) {
            if (L->alive > 0)
                fprintf(stderr,
                        "strata launch: %d rank%s still running after %d ms, sending SIGKILL\n",
                        L->alive, L->alive == 1 ? "" : "s", LAUNCH_KILL_GRACE_MS);
            signal_ranks(L, SIGKILL);
            L->killed = true;
        }
        if (L->alive == 0 && L->nstreams_open > 0) {
            // Every rank is gone; only something they left behind can still hold a pipe open.
            if (!L->drain_deadline)
                L->drain_deadline = st_deadline_ms(LAUNCH_DRAIN_MS);
            else if (now >= L->drain_deadline) {
                if (L->kill_deadline && !L->killed)
                    signal_ranks(L, SIGKILL);
                for (int i = 0; i < nstreams; i++)
                    stream_close(L, &L->streams[i]);
            }
        }
    }
    for (int k = 0; k < 2; k++)
        out_flush(&L->out[k]);
    free(pfds);
    free(which);
    if (L->failed)
        return L->fail_code;
    if (L->got_signal)
        return 128 + L->got_signal;
    return 0;
}

int cmd_launch(int argc, char **argv)
{
    launcher_t *L = calloc(1, sizeof *L);
    if (!L)
        return cmd_fail(NULL, "launch: out of memory");
    L->sigfd = -1;
    int rc = parse_args(argc, argv, &L->opt);
    if (rc != 0) {
        free(L);
        if (rc < 0) {
            usage(stdout);
            return 0;
        }
        return rc;
    }
    const launch_opts_t *o = &L->opt;
    if (!program_found(o->argv[0])) {
        fprintf(stderr, "strata launch: %s: command not found (or not executable)\n", o->argv[0]);
        free(L);
        return 127;
    }
    ensure_stdio();
    L->out[0].fd = 1;
    L->out[1].fd = 2;

    unsigned long long limit = raise_nofile();
    unsigned long long need = (o->prefix ? 2ull * (unsigned)o->nranks : 0) + LAUNCH_SPARE_FDS;
    if (need > limit) {
        int nranks = o->nranks;
        free(L);
        return cmd_fail("raise it with `ulimit -n` (as root, or in /etc/security/limits.conf), or "
                        "pass --no-prefix",
                        "launch: -n %d needs about %llu file descriptors for output pipes, but the "
                        "limit is %llu",
                        nranks, need, limit);
    }
    int port = pick_free_port();
    if (port < 0) {
        free(L);
        return cmd_fail(NULL, "launch: cannot find a free port on 127.0.0.1: %s", strerror(-port));
    }
    if ((rc = set_common_env(o, port)) != 0) {
        free(L);
        return rc;
    }

    L->procs = calloc((size_t)o->nranks, sizeof *L->procs);
    L->streams = o->prefix ? calloc((size_t)o->nranks * 2, sizeof *L->streams) : NULL;
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (!L->procs || (o->prefix && !L->streams) || devnull < 0) {
        rc = cmd_fail(NULL, "launch: %s", devnull < 0 ? "cannot open /dev/null" : "out of memory");
        goto out;
    }
    for (int i = 0; o->prefix && i < 2 * o->nranks; i++)
        L->streams[i].fd = -1;
    if ((rc = setup_signals(L)) != 0 || (rc = build_envp(L)) != 0)
        goto out;

    // Rank 0 reads the launcher's stdin when it is a file or a pipe (as mpirun does); a terminal
    // cannot be read from a background process group, so then every rank reads /dev/null.
    bool stdin_to_rank0 = !isatty(0);
    for (int r = 0; r < o->nranks; r++) {
        if (spawn_rank(L, r, devnull, stdin_to_rank0) != 0) {
            L->failed = true; // so teardown does not report a consequence as the cause
            L->fail_code = 1;
            begin_teardown(L);
            break;
        }
    }
    close(devnull);
    devnull = -1;
    rc = run_loop(L);

out:
    if (devnull >= 0)
        close(devnull);
    if (L->sigfd >= 0)
        close(L->sigfd);
    if (signal_pipe_w >= 0)
        close(signal_pipe_w);
    signal_pipe_w = -1;
    for (int i = 0; L->streams && i < 2 * o->nranks; i++)
        if (L->streams[i].fd >= 0)
            close(L->streams[i].fd);
    free(L->streams);
    free(L->procs);
    free(L->envp);
    free(L);
    return rc;
}
