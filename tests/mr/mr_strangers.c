/* Strangers on the data ports: while the ranks of a TCP job keep running collectives, a thread in
 * rank 0 (the stranger) looks every rank's data port up in the store, as anyone on the network
 * could, and opens silent connections to each (more than the pending-handshake limit) plus others
 * that send garbage: random bytes, a hello with a bad magic, one with a wrong secret, one with an
 * out-of-range rank, half a hello. The job must keep its results right and never wait on a stranger
 * (before the fix, each silent connection held a rank in its progress loop for 2 s, so peers timed
 * out), and every rank must close every stranger on its own: a stranger costs a bounded time. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness/st_test.h"

#include "base/base.h"
#include "comm/bootstrap/store.h"

#define SILENT  40    /* per rank and wave: above the transport's 32 pending handshakes */
#define GARBAGE 6     /* kinds of garbage per rank and wave */
#define WAVES   2     /* waves of strangers while the job runs */
#define LONG_MS 60000 /* generous bound for a stranger to be closed; never reached when passing */
#define COUNT   1024  /* int32 elements per allreduce */

typedef struct stranger {
    pthread_t thread;
    int nranks;
    atomic_bool done; /* all waves sent and every stranger closed by its rank (or a failure) */
    char error[512];  /* empty when everything went as it should */
} stranger_t;

ST_PRINTF(2, 3) static void stranger_fail(stranger_t *s, const char *fmt, ...)
{
    if (s->error[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->error, sizeof s->error, fmt, ap);
    va_end(ap);
}

static int dial(const struct sockaddr_in *sa)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (const struct sockaddr *)sa, sizeof *sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The transport's hello, as a stranger would forge it. */
typedef struct hello {
    uint32_t magic;
    int32_t rank;
    uint64_t secret_hash;
    uint32_t lane;
    uint32_t reserved;
} hello_t;

/* Garbage kind k for a job of n ranks. */
static size_t garbage(int k, int n, uint8_t *buf, size_t cap)
{
    hello_t h = {.magic = 0x53545443u, .rank = 0, .secret_hash = 0x0123456789abcdefull};
    switch (k) {
    case 0: // random bytes
        for (size_t i = 0; i < cap; i++)
            buf[i] = (uint8_t)(i * 131 + 7);
        return cap;
    case 1: // a bad magic
        h.magic = 0xdeadbeefu;
        break;
    case 2: // the right magic, a wrong secret
        break;
    case 3: // a rank beyond the job
        h.rank = n + 5;
        break;
    case 4: // a negative rank
        h.rank = -1;
        break;
    default: // half a hello, then silence
        memcpy(buf, &h, sizeof h);
        return sizeof h / 2;
    }
    memcpy(buf, &h, sizeof h);
    return sizeof h;
}

/* Waits until the far end has closed every fd in fds (EOF or reset), up to LONG_MS. */
static bool all_closed(int *fds, int nfds)
{
    uint64_t deadline = st_deadline_ms(LONG_MS);
    int open = nfds;
    struct pollfd *p = calloc((size_t)nfds, sizeof *p);
    if (!p)
        return false;
    while (open > 0 && st_now_ns() < deadline) {
        for (int i = 0; i < nfds; i++)
            p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
        if (poll(p, (nfds_t)nfds, 100) <= 0)
            continue;
        for (int i = 0; i < nfds; i++) {
            if (fds[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char b[64];
            if (recv(fds[i], b, sizeof b, MSG_DONTWAIT) <= 0) {
                close(fds[i]);
                fds[i] = -1; // poll ignores negative fds
                open--;
            }
        }
    }
    free(p);
    return open == 0;
}

static void *stranger_main(void *arg)
{
    stranger_t *s = arg;
    int n = s->nranks;
    struct sockaddr_in *sa = calloc((size_t)n, sizeof *sa);
    int nfds = n * (SILENT + GARBAGE);
    int *fds = calloc((size_t)nfds, sizeof *fds);
    st_store_t *st = NULL;
    if (!sa || !fds) {
        stranger_fail(s, "out of memory");
        goto out;
    }
    // The addresses are in the store, under addr/<rank>: "hosthash pid host ip:port".
    if (st_store_connect(getenv("STRATA_STORE_ADDR"), getenv("STRATA_SECRET"), -1, LONG_MS,
                         &st) != STRATA_OK) {
        stranger_fail(s, "store: %s", strata_last_error());
        goto out;
    }
    for (int r = 0; r < n; r++) {
        char key[32], ip[64], addr[64];
        snprintf(key, sizeof key, "addr/%d", r);
        void *val = NULL;
        size_t len = 0;
        if (st_store_get(st, key, &val, &len, LONG_MS) != STRATA_OK ||
            sscanf(val, "%*s %*d %*s %63s", addr) != 1 || !strchr(addr, ':')) {
            stranger_fail(s, "no tcp address for rank %d: %s", r, val ? (char *)val : "-");
            free(val);
            goto out;
        }
        free(val);
        snprintf(ip, sizeof ip, "%.*s", (int)(strrchr(addr, ':') - addr), addr);
        sa[r] = (struct sockaddr_in){.sin_family = AF_INET,
                                     .sin_port = htons((uint16_t)atoi(strrchr(addr, ':') + 1))};
        inet_pton(AF_INET, ip, &sa[r].sin_addr);
    }
    for (int wave = 0; wave < WAVES; wave++) {
        int k = 0;
        for (int r = 0; r < n; r++) {
            for (int i = 0; i < SILENT; i++)
                fds[k++] = dial(&sa[r]);
            for (int g = 0; g < GARBAGE; g++) {
                uint8_t buf[4096];
                size_t len = garbage(g, n, buf, sizeof buf);
                int fd = dial(&sa[r]);
                if (fd >= 0 && send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len) {
                    close(fd); // closed already: as good an outcome as any
                    fd = -1;
                }
                fds[k++] = fd;
            }
        }
        for (int i = 0; i < nfds; i++)
            if (fds[i] < 0 && i % (SILENT + GARBAGE) < SILENT) {
                stranger_fail(s, "wave %d: could not connect stranger %d", wave, i);
                goto out;
            }
        // Every rank must close every stranger itself, silent ones included, while the job runs.
        if (!all_closed(fds, nfds)) {
            stranger_fail(s, "wave %d: strangers still open after %d ms", wave, LONG_MS);
            goto out;
        }
    }
out:
    for (int i = 0; fds && i < nfds; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    st_store_close(st, true);
    free(fds);
    free(sa);
    atomic_store(&s->done, true);
    return NULL;
}

/* Every rank runs allreduces until rank 0's stranger is done, checking every result. */
static int collectives_among_strangers(int rank, int n, void *arg)
{
    (void)arg;
    strata_comm_t *c = st_test_comm();
    stranger_t s = {.nranks = n};
    if (rank == 0 && pthread_create(&s.thread, NULL, stranger_main, &s) != 0)
        return ST_RANK_FAIL("cannot start the stranger thread");
    int32_t *buf = malloc((COUNT + 1) * sizeof *buf);
    if (!buf)
        return ST_RANK_FAIL("out of memory");
    int iter = 0;
    for (bool done = false; !done; iter++) {
        for (int j = 0; j < COUNT; j++)
            buf[j] = rank + iter + j;
        // The last element carries rank 0's "the stranger is done", so all ranks stop together.
        buf[COUNT] = rank == 0 && atomic_load(&s.done);
        ST_RANK_CHECK_OK(strata_allreduce(c, buf, buf, COUNT + 1, STRATA_DTYPE_I32, STRATA_OP_SUM));
        for (int j = 0; j < COUNT; j++)
            if (buf[j] != n * (iter + j) + n * (n - 1) / 2)
                return ST_RANK_FAIL("iteration %d element %d: %d", iter, j, buf[j]);
        done = buf[COUNT] != 0;
        ST_RANK_CHECK_OK(strata_barrier(c));
    }
    free(buf);
    if (rank == 0) {
        pthread_join(s.thread, NULL);
        if (s.error[0])
            return ST_RANK_FAIL("stranger: %s (after %d iterations)", s.error, iter);
    }
    strata_comm_destroy(c);
    return 0;
}

static void run(int n)
{
    // A 15 s timeout: a rank held by strangers for long (2 s each, before the fix) makes its peers
    // time out; a rank that never waits on one finishes each call in milliseconds. A 2 s hello
    // deadline (20 s by default, where the kernel holds a silent connection 31 s before it is
    // accepted): the silent strangers are closed within LONG_MS.
    st_ranks_opts_t o = {.deadline_ms = 240000,
                         .extra_env = "STRATA_COMM_TRANSPORT=tcp;STRATA_COMM_TIMEOUT_MS=15000;"
                                      "STRATA_TCP_HELLO_MS=2000",
                         .expect_fail_rank = -1};
    if (st_test_ranks(n, collectives_among_strangers, NULL, &o) != 0)
        fail_msg("%d tcp ranks among strangers failed", n);
}

static void test_strangers_tcp(void **state)
{
    (void)state;
    run(4);
    run(3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_strangers_tcp)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
