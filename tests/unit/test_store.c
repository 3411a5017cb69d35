/* Unit tests of the bootstrap store (src/comm/bootstrap/store_*.c): the key-value operations,
 * parked GET/WAIT, timeouts and cancellation, the handshake, robustness against clients that do not
 * speak the protocol, failure and abort notices, and the server's linger on close. The server runs
 * in its own thread (these tests never fork), except one test that drives it with
 * st_store_server_poll() the way the multi-rank harness does. Raw sockets speak the protocol badly
 * on purpose; the stranger tests fork a child that holds hundreds of them. */
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness/st_test.h"

#include "comm/bootstrap/store.h"
#include "comm/bootstrap/store_proto.h"

#define SECRET  "s3cret"
#define LONG_MS 20000 /* generous bound for things that must happen; never reached when passing */

/* ---- helpers --------------------------------------------------------------------------------- */

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Polls `cond` every millisecond until it holds or LONG_MS passes; fails the test in that case. */
#define WAIT_UNTIL(cond)                                 \
    do {                                                 \
        uint64_t wu_deadline_ = st_deadline_ms(LONG_MS); \
        while (!(cond) && st_now_ns() < wu_deadline_)    \
            sleep_ms(1);                                 \
        assert_true(cond);                               \
    } while (0)

typedef struct server {
    st_store_server_t *srv;
    char addr[64];
} server_t;

static server_t start_server(const char *secret)
{
    server_t s;
    assert_int_equal(st_store_server_open("127.0.0.1:0", secret, &s.srv), STRATA_OK);
    snprintf(s.addr, sizeof s.addr, "127.0.0.1:%d", st_store_server_port(s.srv));
    assert_int_equal(st_store_server_start_thread(s.srv), STRATA_OK);
    return s;
}

static st_store_server_stats_t stats(const server_t *s)
{
    st_store_server_stats_t st;
    st_store_server_stats(s->srv, &st);
    return st;
}

static st_store_t *join(const server_t *s, int rank)
{
    st_store_t *st = NULL;
    strata_status_t rc = st_store_connect(s->addr, SECRET, rank, LONG_MS, &st);
    if (rc != STRATA_OK)
        fail_msg("connect: %s", strata_last_error());
    return st;
}

static void assert_get(st_store_t *st, const char *key, const char *expect)
{
    void *val = NULL;
    size_t len = 0;
    strata_status_t rc = st_store_get(st, key, &val, &len, LONG_MS);
    if (rc != STRATA_OK)
        fail_msg("get %s: %s", key, strata_last_error());
    assert_int_equal(len, strlen(expect));
    assert_string_equal(val, expect); // the copy is NUL-terminated
    free(val);
}

static void assert_error_has(const char *needle)
{
    if (!strstr(strata_last_error(), needle))
        fail_msg("expected '%s' in the error, got '%s'", needle, strata_last_error());
}

/* Waits until the store pushed something to `st`, then expects a notice naming `rank`. */
static void expect_notice(st_store_t *st, int rank, const char *text)
{
    int failed = -2;
    uint64_t deadline = st_deadline_ms(LONG_MS);
    strata_status_t rc;
    while ((rc = st_store_check_notice(st, &failed)) == STRATA_OK && st_now_ns() < deadline) {
        struct pollfd pfd = {.fd = st_store_fd(st), .events = POLLIN};
        poll(&pfd, 1, 100);
    }
    assert_int_equal(rc, STRATA_ERR_PEER_FAILED);
    assert_int_equal(failed, rank);
    assert_error_has(text);
}

/* A GET run on its own thread, so the main thread can act while it is parked. */
typedef struct getter {
    pthread_t thread;
    st_store_t *st;
    const char *key;
    long long timeout_ms;
    strata_status_t rc;
    char value[64];
    char error[1024];
} getter_t;

static void *getter_main(void *arg)
{
    getter_t *g = arg;
    void *val = NULL;
    size_t len = 0;
    g->rc = st_store_get(g->st, g->key, &val, &len, g->timeout_ms);
    snprintf(g->error, sizeof g->error, "%s", strata_last_error());
    if (val)
        snprintf(g->value, sizeof g->value, "%s", (char *)val);
    free(val);
    return NULL;
}

static void getter_start(getter_t *g, st_store_t *st, const char *key)
{
    *g = (getter_t){.st = st, .key = key, .timeout_ms = LONG_MS};
    assert_int_equal(pthread_create(&g->thread, NULL, getter_main, g), 0);
}

/* ---- raw sockets ----------------------------------------------------------------------------- */

static int raw_connect(const server_t *s)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(st_store_server_port(s->srv)),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

static void raw_send(int fd, const void *buf, size_t len)
{
    assert_int_equal(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* Reads until the server closes the connection; fails if it stays open. */
static void raw_expect_closed(int fd)
{
    uint64_t deadline = st_deadline_ms(LONG_MS);
    char buf[4096];
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        assert_true(poll(&pfd, 1, st_store_ms_until(deadline)) > 0);
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0)
            break; // EOF or ECONNRESET: closed
    }
    close(fd);
}

/* A HELLO frame with the given fields, as a client would send it. */
static st_buf_t hello_frame(uint32_t magic, const char *secret, int rank)
{
    st_buf_t b = {0};
    size_t start = st_frame_begin(&b, ST_MSG_HELLO);
    st_buf_put_u32(&b, 1);
    st_buf_put_u32(&b, magic);
    st_buf_put_u32(&b, ST_STORE_VERSION);
    st_buf_put_u32(&b, (uint32_t)rank);
    st_buf_put_u32(&b, 4242);
    st_buf_put_str(&b, secret, strlen(secret));
    st_buf_put_str(&b, "rawhost", 7);
    st_buf_put_str(&b, "", 0); // no place
    assert_true(st_frame_end(&b, start));
    return b;
}

/* ---- key-value operations -------------------------------------------------------------------- */

static void test_set_get(void **state)
{
    (void)state;
    server_t s = start_server(SECRET);
    st_store_t *a = join(&s, 0), *b = join(&s, 1);

    assert_int_equal(st_store_set(a, "addr/0", "10.0.0.1:4000", 13), STRATA_OK);
    assert_get(b, "addr/0", "10.0.0.1:4000");
    assert_int_equal(st_store_set(b, "addr/0", "overwritten", 11), STRATA_OK);
    assert_get(a, "addr/0", "overwritten");
    assert_int_equal(st_store_set(a, "empty", NULL, 0), STRATA_OK);
    assert_get(b, "empty", "");

    // A value far larger than a socket buffer, with every byte value: partial reads and writes.
    size_t big = 5u << 20;
    uint8_t *val = malloc(big);
    for (size_t i = 0; i < big; i++)
        val[i] = (uint8_t)(i * 7 + (i >> 11));
    assert_int_equal(st_store_set(a, "big", val, big), STRATA_OK);
    void *got = NULL;
    size_t len = 0;
    assert_int_equal(st_store_get(b, "big", &got, &len, LONG_MS), STRATA_OK);
    assert_int_equal(len, big);
    assert_memory_equal(got, val, big);
    free(got);
    free(val);

    // Values beyond the frame limit are refused on the client, naming the key.
    static char small[1];
    assert_int_equal(st_store_set(a, "huge", small, (size_t)ST_STORE_MAX_FRAME + 1),
                     STRATA_ERR_INVALID_ARG);
    assert_error_has("huge");
    assert_int_equal(st_store_set(a, "", "x", 1), STRATA_ERR_INVALID_ARG);

    assert_int_equal(stats(&s).keys, 3);
    st_store_close(a, true);
    st_store_close(b, true);
    st_store_server_close(s.srv, 0);
}

static void test_get_waits_for_set(void **state)
{
    (void)state;
    server_t s = start_server(SECRET);
    st_store_t *a = join(&s, 0), *b = join(&s, 1);
    getter_t g;
    getter_start(&g, a, "late");
    WAIT_UNTIL(stats(&s).waiting == 1); // parked on the server, not answered
    assert_int_equal(st_store_set(b, "late", "here", 4), STRATA_OK);
    pthread_join(g.thread, NULL);
    assert_int_equal(g.rc, STRATA_OK);
    assert_string_equal(g.value, "here");
    assert_int_equal(stats(&s).waiting, 0);
    st_store_close(a, true);
    st_store_close(b, true);
    st_store_server_close(s.srv, 0);
}

typedef struct waiter {
    st_store_t *st;
    const char *const *keys;
    int nkeys;
    strata_status_t rc;
} waiter_t;

static void *waiter_main(void *arg)
{
    waiter_t *w = arg;
    w->rc = st_store_wait(w->st, w->keys, w->nkeys, LONG_MS);
    return NULL;
}

static void test_wait_keys(void **state)
{
    (void)state;
    server_t s = start_server(SECRET);
    st_store_t *a = join(&s, 0), *b = join(&s, 1);
    static const char *const keys[] = {"k1", "k2", "k1", "k3"}; // a repeated key counts once
    assert_int_equal(st_store_set(b, "k2", "x", 1), STRATA_OK);
    waiter_t w = {.st = a, .keys = keys, .nkeys = 4, .rc = STRATA_INPROGRESS};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
    WAIT_UNTIL(stats(&s).waiting == 1);
    assert_int_equal(st_store_set(b, "k1", "x", 1), STRATA_OK);
    assert_int_equal(stats(&s).waiting, 1); // k3 is still missing
    assert_int_equal(st_store_set(b, "k3", "x", 1), STRATA_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, STRATA_OK);
    assert_int_equal(st_store_wait(a, keys, 4, 0), STRATA_OK); // all present: no wait at all
    assert_int_equal(st_store_wait(a, NULL, 0, 0), STRATA_OK);
    st_store_close(a, true);
    st_store_close(b, true);
    st_store_server_close(s.srv, 0);
}

static void test_get_timeout(void **state)
{
    (void)state;
    server_t s = start_server(SECRET);
    st_store_t *a = join(&s, 0);
    void *val = NULL;
    size_t len = 0;
    assert_int_equal(st_store_get(a, "never/set", &val, &len, 50), STRATA_ERR_TIMEOUT);
    assert_null(val);
    assert_error_has("never/set");
    assert_error_has(s.addr);
    assert_int_equal(stats(&s).waiting, 0); // the client withdrew the parked GET

    static const char *const keys[] = {"w1", "w2"};
    assert_int_equal(st_store_wait(a, keys, 2, 20), STRATA_ERR_TIMEOUT);
    assert_error_has("'w1', 'w2'");

    // The connection stays usable, and a late answer is never mistaken for a new one.
    assert_int_equal(st_store_set(a, "never/set", "now", 3), STRATA_OK);
    assert_get(a, "never/set", "now");
    assert_int_equal(st_store_get(a, "still/missing", &val, &len, 0), STRATA_ERR_TIMEOUT);
    assert_get(a, "never/set", "now");
    assert_int_equal(stats(&s).waiting, 0);

    // A timeout of 0 means "only if it is already there".
    assert_int_equal(st_store_get(a, "never/set", &val, &len, 0), STRATA_OK);
    assert_string_equal(val, "now");
    free(val);
    st_store_close(a, true);
    st_store_server_close(s.srv, 0);
}

#define ADDERS 4
#define ADDS   200

static void *adder_main(void *arg)
{
    st_store_t *st = arg;
    for (int i = 0; i < ADDS; i++)
        if (st_store_add(st, "counter", 1, NULL) != STRATA_OK)
            return (void *)1;
    return NULL;
}

static void test_add(void **state)
{
    (void)state;
    server_t s = start_server(SECRET);
    st_store_t *c[ADDERS];
    pthread_t t[ADDERS];
    for (int i = 0; i < ADDERS; i++)
        c[i] = join(&s, i);
    for (int i = 0; i < ADDERS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, adder_main, c[i]), 0);
    for (int i = 0; i < ADDERS; i++) {
        void *ret;
        pthread_join(t[i], &ret);
        assert_null(ret);
    }
    int64_t v = 0;
    assert_int_equal(st_store_add(c[0], "counter", 0, &v), STRATA_OK);
    assert_int_equal(v, ADDERS * ADDS);
    assert_get(c[1], "counter", "800"); // stored as decimal text
    assert_int_equal(st_store_add(c[1], "counter", -801, &v), STRATA_OK);
    assert_int_equal(v, -1);
    assert_int_equal(st_store_set(c[0], "41", "41", 2), STRATA_OK);
    assert_int_equal(st_store_add(c[0], "41", 1, &v), STRATA_OK);
    assert_int_equal(v, 42);
    assert_int_equal(st_store_add(c[0], "fresh", 5, &v), STRATA_OK); // missing counts as 0
    assert_int_equal(v, 5);

    // A GET parked on a key is answered by an ADD creating it.
    getter_t g;
    getter_start(&g, c[2], "made/by/add");
    WAIT_UNTIL(stats(&s).waiting == 1);
    assert_int_equal(st_store_add(c[3], "made/by/add", 7, NULL), STRATA_OK);
    pthread_join(g.thread, NULL);
    assert_int_equal(g.rc, STRATA_OK);
    assert_string_equal(g.value, "7");

    assert_int_equal(st_store_set(c[0], "text", "hello", 5), STRATA_OK);
    assert_int_equal(st_store_add(c[0], "text", 1, &v), STRATA_ERR_REMOTE);
    assert_error_has("'text'");
    assert_error_has("integer");
    assert_int_equal(st_store_set(c[0], "max", "9223372036854775807", 19), STRATA_OK);
    assert_int_equal(st_store_add(c[0], "max", 1, &v), STRATA_ERR_REMOTE);
    assert_error_has("overflow");
    for (int i = 0; i < ADDERS; i++)
        st_store_close(c[i], true);
    st_store_server_close(s.srv, 0);
}

/* ---- handshake and bad clients --------------------------------------------------------------- */

static void test_wrong_secret(void **state)
{
    (void)state;
    server_t s = start_server(SECRET);
    st_store_t *st = NULL;
    assert_int_equal(st_store_connect(s.addr, "guess", 0, LONG_MS, &st), STRATA_ERR_REMOTE);
    assert_null(st);
    assert_error_has("wrong secret");
    assert_error_has(s.addr);
    assert_int_equal(st_store_connect(s.addr, "s3cret-and-more", 0, LONG_MS, &st),
                     STRATA_ERR_REMOTE);
    assert_int_equal(st_store_connect(s.addr, "", 0, LONG_MS, &st), STRATA_ERR_REMOTE);
    st = join(&s, 0);
    assert_int_equal(stats(&s).notices, 0);
    st_store_close(st, true);
    st_store_server_close(s.srv, 0);

    // An empty server secret accepts any secret.
    server_t open = start_server("");
    assert_int_equal(st_store_connect(open.addr, "anything", -1, LONG_MS, &st), STRATA_OK);
    st_store_close(st, true);
    st_store_server_close(open.srv, 0);
}

static void test_garbage_clients(void **state)
{
    (void)state;
    server_t s = start_server(SECRET);
    st_store_server_set_hello_timeout(s.srv, 300);
    st_store_t *good = join(&s, 0);
    assert_int_equal(st_store_set(good, "k", "v", 1), STRATA_OK);

    // Random bytes.
    int fd = raw_connect(&s);
    uint8_t noise[4096];
    srand(7);
    for (size_t i = 0; i < sizeof noise; i++)
        noise[i] = (uint8_t)rand();
    raw_send(fd, noise, sizeof noise);
    raw_expect_closed(fd);
    assert_get(good, "k", "v");

    // Someone else's protocol: "GET " read as a length is far beyond the limit.
    fd = raw_connect(&s);
    raw_send(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
    raw_expect_closed(fd);

    // A huge length prefix, then nothing.
    fd = raw_connect(&s);
    raw_send(fd, "\xff\xff\xff\xff", 4);
    raw_expect_closed(fd);

    // A zero-length frame.
    fd = raw_connect(&s);
    raw_send(fd, "\0\0\0\0", 4);
    raw_expect_closed(fd);

    // A well-formed HELLO with the wrong magic.
    fd = raw_connect(&s);
    st_buf_t b = hello_frame(0xdeadbeef, SECRET, 5);
    raw_send(fd, b.data, b.len);
    st_buf_free(&b);
    raw_expect_closed(fd);

    // A well-formed SET as the first frame.
    fd = raw_connect(&s);
    size_t start = st_frame_begin(&b, ST_MSG_SET);
    st_buf_put_u32(&b, 1);
    st_buf_put_str(&b, "k", 1);
    st_buf_put(&b, "evil", 4);
    assert_true(st_frame_end(&b, start));
    raw_send(fd, b.data, b.len);
    st_buf_free(&b);
    raw_expect_closed(fd);

    // A client that connects and says nothing: closed after the HELLO timeout.
    fd = raw_connect(&s);
    raw_expect_closed(fd);

    // Half a HELLO, then silence: the partial frame is not waited for forever either.
    fd = raw_connect(&s);
    b = hello_frame(ST_STORE_MAGIC, SECRET, 5);
    raw_send(fd, b.data, b.len / 2);
    st_buf_free(&b);
    raw_expect_closed(fd);

    // The good client never noticed: same value, no notice, and it is the only client left.
    assert_get(good, "k", "v");
    assert_int_equal(st_store_check_notice(good, NULL), STRATA_OK);
    WAIT_UNTIL(stats(&s).clients == 1);
    assert_int_equal(stats(&s).notices, 0);
    st_store_close(good, true);
    st_store_server_close(s.srv, 0);
}

static void test_ranked_client_breaking_protocol(void **state)
{
    (void)state;
    server_t s = start_server(SECRET);
    st_store_t *good = join(&s, 0);
    int fd = raw_connect(&s);
    st_buf_t b = hello_frame(ST_STORE_MAGIC, SECRET, 5);
    size_t start = st_frame_begin(&b, 200); // an unknown message type after a valid HELLO
    st_buf_put_u32(&b, 2);
    assert_true(st_frame_end(&b, start));
    raw_send(fd, b.data, b.len);
    st_buf_free(&b);
    raw_expect_closed(fd);
    // A rank the store had to drop is gone for the job: everyone hears about it.
    expect_notice(good, 5, "rank 5 (host rawhost pid 4242) failed: was dropped by the store");
    st_store_close(good, true);
    st_store_server_close(s.srv, 0);
}

/* ---- strangers: what a client costs before HELLO --------------------------------------------- */

/* Open descriptors of this process, or -1 when it cannot open one more. */
static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1; // out of descriptors
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; // the directory's own
}

enum { CHILD_OK, CHILD_NO_CONNECT, CHILD_NOT_CLOSED, CHILD_PIPE };

/* The stranger process: `silent` connections that say nothing (or half a HELLO) and `noisy` ones
 * that send garbage, all held open; reports on `ready` once the store has closed all but
 * ST_STORE_PENDING_MAX of them (it may keep that many waiting for HELLO), then waits on `done`. */
static _Noreturn void strangers_main(int port, int silent, int noisy, int ready, int done)
{
    int n = silent + noisy;
    int *fds = calloc((size_t)n, sizeof *fds);
    struct pollfd *p = calloc((size_t)n, sizeof *p);
    if (!fds || !p)
        _exit(CHILD_PIPE);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    uint8_t noise[4096];
    for (size_t i = 0; i < sizeof noise; i++)
        noise[i] = (uint8_t)(i * 151 + 3);
    st_buf_t half = hello_frame(ST_STORE_MAGIC, SECRET, 3);
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&sa, sizeof sa) != 0)
            _exit(CHILD_NO_CONNECT);
        if (i < silent) {
            if (i % 10 == 0 && send(fds[i], half.data, half.len / 2, MSG_NOSIGNAL) < 0)
                _exit(CHILD_NO_CONNECT);
            continue;
        }
        // Garbage of a few kinds: random bytes, another protocol, a 4 GiB length, a zero length.
        static const char *const kinds[] = {NULL, "GET / HTTP/1.1\r\n\r\n", "\xff\xff\xff\xff",
                                            "\0\0\0\0"};
        const char *k = kinds[i % 4];
        ssize_t w = k ? send(fds[i], k, i % 4 == 1 ? strlen(k) : 4, MSG_NOSIGNAL)
                      : send(fds[i], noise, sizeof noise, MSG_NOSIGNAL);
        (void)w; // the store may already have closed it: fine
    }
    // Wait for the store to close all but the ones it may keep waiting.
    uint64_t deadline = st_deadline_ms(LONG_MS);
    int open = n;
    while (open > ST_STORE_PENDING_MAX && st_now_ns() < deadline) {
        for (int i = 0; i < n; i++)
            p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
        if (poll(p, (nfds_t)n, 100) <= 0)
            continue;
        for (int i = 0; i < n; i++) {
            char b[256];
            if (fds[i] >= 0 && p[i].revents && recv(fds[i], b, sizeof b, MSG_DONTWAIT) <= 0) {
                close(fds[i]);
                fds[i] = -1;
                open--;
            }
        }
    }
    char c = open > ST_STORE_PENDING_MAX ? CHILD_NOT_CLOSED : CHILD_OK;
    if (write(ready, &c, 1) != 1 || read(done, &c, 1) < 0)
        _exit(CHILD_PIPE);
    _exit(c);
}

/* Hundreds of silent and garbage clients, with the descriptor limit torchrun and Slurm set (1024):
 * the store keeps its descriptors bounded, the process can still open files (before, held
 * connections filled the table and rank 0's checkpoint write failed with EMFILE), and a real
 * client is served while strangers hold every slot for connections that have not said HELLO. */
static void test_strangers_bounded(void **state)
{
    (void)state;
    struct rlimit saved;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
    struct rlimit lim = {.rlim_cur = ST_MIN(saved.rlim_max, (rlim_t)1024), .rlim_max = saved.rlim_max};
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
    // More strangers than the parent's descriptor table holds, when the child may hold them.
    int total = (int)ST_MIN(saved.rlim_max - 64, (rlim_t)1200);
    int noisy = total / 8, silent = total - noisy;

    st_store_server_t *srv;
    assert_int_equal(st_store_server_open("127.0.0.1:0", SECRET, &srv), STRATA_OK);
    st_store_server_set_hello_timeout(srv, LONG_MS); // bounded by the cap, not by the timeout
    int port = st_store_server_port(srv);
    int base = count_fds();
    int ready[2], done[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(done), 0);
    fflush(stdout);
    pid_t pid = fork(); // before the server thread exists: the child is single-threaded
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        close(done[1]); // or the child would never see the parent's end of `done` close
        st_store_server_atfork_child(srv);
        struct rlimit more = {.rlim_cur = saved.rlim_max, .rlim_max = saved.rlim_max};
        setrlimit(RLIMIT_NOFILE, &more);
        strangers_main(port, silent, noisy, ready[1], done[0]);
    }
    close(ready[1]);
    close(done[0]);
    server_t s = {.srv = srv};
    snprintf(s.addr, sizeof s.addr, "127.0.0.1:%d", port);
    assert_int_equal(st_store_server_start_thread(srv), STRATA_OK);

    // Watch the descriptors while the strangers come and go.
    int most = base, emfile = 0;
    char c = -1;
    uint64_t deadline = st_deadline_ms(2 * LONG_MS);
    for (;;) {
        struct pollfd pfd = {.fd = ready[0], .events = POLLIN};
        if (poll(&pfd, 1, 5) > 0) {
            assert_int_equal(read(ready[0], &c, 1), 1);
            break;
        }
        assert_true(st_now_ns() < deadline);
        int fds = count_fds();
        most = ST_MAX(most, fds);
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC); // a checkpoint write, in miniature
        if (fd < 0 || fds < 0)
            emfile++;
        else
            close(fd);
    }
    assert_int_equal(c, CHILD_OK);
    // A real client gets in and is served while the strangers hold every waiting slot.
    st_store_t *good = join(&s, 0);
    assert_int_equal(st_store_set(good, "k", "v", 1), STRATA_OK);
    assert_get(good, "k", "v");
    most = ST_MAX(most, count_fds());
    assert_true(stats(&s).clients <= ST_STORE_PENDING_MAX + 1);
    assert_int_equal(close(done[1]), 0);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == CHILD_OK);
    close(ready[0]);
    assert_int_equal(emfile, 0);
    // Nothing per stranger: the waiting slots (and a newcomer accepted before the oldest is
    // evicted), the two pipes, the server thread's eventfd and the good client's two ends.
    int bound = base + ST_STORE_PENDING_MAX + 1 + 2 + 1 + 2;
    if (most > bound)
        fail_msg("%d descriptors open at most during %d strangers (%d before, at most %d)", most,
                 total, base, bound);
    assert_int_equal(stats(&s).notices, 0);
    st_store_close(good, true);
    st_store_server_close(srv, 0);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
}

/* A client announcing a 64 MiB HELLO and sending it is cut off after a few bytes: before HELLO the
 * store reads at most ST_STORE_HELLO_MAX bytes of a client (before, it buffered the whole frame). */
static void test_big_hello_cut_off(void **state)
{
    (void)state;
    server_t s = start_server(SECRET);
    int fd = raw_connect(&s);
    int small = 64 << 10;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    size_t total = ST_STORE_MAX_FRAME;
    uint8_t *chunk = calloc(1, 64 << 10);
    assert_non_null(chunk);
    st_le32_store(chunk, (uint32_t)(total - 4)); // a frame of the largest size allowed
    chunk[4] = ST_MSG_HELLO;
    size_t sent = 0;
    while (sent < total) {
        ssize_t w = send(fd, chunk, ST_MIN((size_t)64 << 10, total - sent), MSG_NOSIGNAL);
        if (w <= 0)
            break; // reset by the store
        sent += (size_t)w;
        memset(chunk, 0x5a, 8);
    }
    free(chunk);
    // What got out is what the kernel buffers took before the reset arrived, never the frame.
    if (sent >= total / 4)
        fail_msg("the store took %zu bytes of a HELLO before cutting the client off", sent);
    raw_expect_closed(fd);
    st_store_t *good = join(&s, 0);
    assert_int_equal(st_store_set(good, "k", "v", 1), STRATA_OK);
    st_store_close(good, true);
    st_store_server_close(s.srv, 0);
}

/* A secret too long for a HELLO is the client's clear error, not a dropped connection. */
static void test_secret_too_long(void **state)
{
    (void)state;
    char *secret = malloc(ST_STORE_HELLO_MAX + 1);
    assert_non_null(secret);
    memset(secret, 'x', ST_STORE_HELLO_MAX);
    secret[ST_STORE_HELLO_MAX] = '\0';
    server_t s = start_server(secret);
    st_store_t *st = NULL;
    assert_int_equal(st_store_connect(s.addr, secret, 0, LONG_MS, &st), STRATA_ERR_INVALID_ARG);
    assert_null(st);
    assert_error_has("secret");
    // The longest secret that fits is fine.
    secret[ST_STORE_HELLO_MAX - 128] = '\0';
    st_store_server_close(s.srv, 0);
    s = start_server(secret);
    assert_int_equal(st_store_connect(s.addr, secret, 0, LONG_MS, &st), STRATA_OK);
    st_store_close(st, true);
    st_store_server_close(s.srv, 0);
    free(secret);
}

/* ---- failure detection ----------------------------------------------------------------------- */

static void test_failure_notice(void **state)
{
    (void)state;
    server_t s = start_server(SECRET);
    st_store_t *a = join(&s, 0), *b = join(&s, 1), *tool = join(&s, -1);
    getter_t g;
    getter_start(&g, a, "never");
    WAIT_UNTIL(stats(&s).waiting == 1);

    st_store_close(b, false); // a crash, as far as the store can tell
    pthread_join(g.thread, NULL);
    assert_int_equal(g.rc, STRATA_ERR_PEER_FAILED);
    if (!strstr(g.error, "rank 1 (host ") || !strstr(g.error, "failed: lost its connection") ||
        !strstr(g.error, "'never'"))
        fail_msg("unexpected message: %s", g.error);
    expect_notice(a, 1, "rank 1 (host ");
    expect_notice(tool, 1, "failed: lost its connection to the store");
    WAIT_UNTIL(stats(&s).waiting == 0);

    // The job is dead: gets fail at once; sets still work.
    void *val = NULL;
    size_t len = 0;
    assert_int_equal(st_store_get(a, "k", &val, &len, LONG_MS), STRATA_ERR_PEER_FAILED);
    assert_error_has("rank 1");
    assert_int_equal(st_store_set(a, "k", "v", 1), STRATA_OK);

    // Latecomers are told too.
    st_store_t *late = join(&s, 2);
    expect_notice(late, 1, "rank 1 (host ");

    // Rank 1 is announced once, even if it shows up and vanishes again.
    st_store_t *again = join(&s, 1);
    st_store_close(again, false);
    WAIT_UNTIL(stats(&s).clients == 3);
    assert_int_equal(stats(&s).notices, 1);

    st_store_close(a, true);
    st_store_close(tool, true);
    st_store_close(late, true);
    st_store_server_close(s.srv, 0);
}

static void test_goodbye_is_not_a_failure(void **state)
{
    (void)state;
    server_t s = start_server(SECRET);
    st_store_t *a = join(&s, 0), *b = join(&s, 1), *tool = join(&s, -1);
    assert_int_equal(st_store_server_live_ranks(s.srv), 2);
    st_store_close(b, true);
    st_store_close(tool, false); // tools are not ranks: leaving without goodbye is fine
    assert_int_equal(st_store_server_live_ranks(s.srv), 1);
    WAIT_UNTIL(stats(&s).clients == 1);
    assert_int_equal(st_store_check_notice(a, NULL), STRATA_OK);
    assert_int_equal(st_store_set(a, "k", "v", 1), STRATA_OK);
    assert_get(a, "k", "v");
    assert_int_equal(stats(&s).notices, 0);
    st_store_close(a, true);
    st_store_server_close(s.srv, 0);
}

static void test_abort_notice(void **state)
{
    (void)state;
    server_t s = start_server(SECRET);
    st_store_t *a = join(&s, 0), *b = join(&s, 1);
    getter_t g;
    getter_start(&g, b, "never");
    WAIT_UNTIL(stats(&s).waiting == 1);
    assert_int_equal(st_store_abort(a, "loss is NaN at step 12"), STRATA_OK);
    pthread_join(g.thread, NULL);
    assert_int_equal(g.rc, STRATA_ERR_PEER_FAILED);
    if (!strstr(g.error, "rank 0 (host ") || !strstr(g.error, "aborted: loss is NaN at step 12"))
        fail_msg("unexpected message: %s", g.error);
    expect_notice(b, 0, "aborted: loss is NaN at step 12");
    assert_int_equal(st_store_check_notice(a, NULL), STRATA_OK); // not told about itself

    // The aborting rank then exits without goodbye: no second notice.
    st_store_close(a, false);
    WAIT_UNTIL(stats(&s).clients == 1);
    assert_int_equal(stats(&s).notices, 1);
    st_store_close(b, true);
    st_store_server_close(s.srv, 0);
}

/* REPORT: the first failure announced is the root cause; a report answered after it (the echo of a
 * rank that left because of it) names the cause, never the rank that left. */
static void test_report_names_root_cause(void **state)
{
    (void)state;
    server_t s = start_server(SECRET);
    st_store_t *a = join(&s, 0), *b = join(&s, 1), *c = join(&s, 2), *d = join(&s, 3);
    // Rank 1 sees rank 3 die before the store does: the store announces rank 3 on its word.
    assert_int_equal(st_store_report(b, 3, "exited while this rank was exchanging data with it"),
                     STRATA_OK);
    // The reporter has the notice in hand when the answer comes: no waiting.
    int who = -2;
    assert_int_equal(st_store_check_notice(b, &who), STRATA_ERR_PEER_FAILED);
    assert_int_equal(who, 3);
    assert_error_has("rank 3 (host ");
    assert_error_has("failed: exited while this rank was exchanging data with it (seen by rank 1)");
    // Rank 1 leaves cleanly; rank 0 finds it gone and reports it: the answer carries rank 3's notice.
    st_store_close(b, true);
    assert_int_equal(st_store_report(a, 1, "could not be reached over shm"), STRATA_OK);
    who = -2;
    assert_int_equal(st_store_check_notice(a, &who), STRATA_ERR_PEER_FAILED);
    assert_int_equal(who, 3);
    // Rank 3's own connection closing later is no second notice; rank 3 never hears of itself.
    expect_notice(c, 3, "seen by rank 1");
    st_store_close(d, false);
    WAIT_UNTIL(stats(&s).clients == 2);
    assert_int_equal(stats(&s).notices, 1);
    st_store_close(a, true);
    st_store_close(c, true);
    st_store_server_close(s.srv, 0);
}

static void test_lost_store(void **state)
{
    (void)state;
    server_t s = start_server(SECRET);
    st_store_t *a = join(&s, 0);
    st_store_server_close(s.srv, 0); // linger 0: rank 0 is still connected
    expect_notice(a, -1, "lost connection to the store at 127.0.0.1:");
    void *val = NULL;
    size_t len = 0;
    assert_int_equal(st_store_get(a, "k", &val, &len, LONG_MS), STRATA_ERR_PEER_FAILED);
    assert_int_equal(st_store_set(a, "k", "v", 1), STRATA_ERR_PEER_FAILED);
    assert_error_has("lost connection to the store");
    st_store_close(a, true);
}

/* ---- server lifetime ------------------------------------------------------------------------- */

typedef struct closer {
    st_store_server_t *srv;
    int linger_ms;
    atomic_int started, done;
} closer_t;

static void *closer_main(void *arg)
{
    closer_t *c = arg;
    atomic_store(&c->started, 1);
    st_store_server_close(c->srv, c->linger_ms);
    atomic_store(&c->done, 1);
    return NULL;
}

static void test_close_lingers(void **state)
{
    (void)state;
    server_t s = start_server(SECRET);
    st_store_t *a = join(&s, 0), *tool = join(&s, -1);
    closer_t c = {.srv = s.srv, .linger_ms = LONG_MS};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, closer_main, &c), 0);
    WAIT_UNTIL(atomic_load(&c.started));
    sleep_ms(20); // let close() begin lingering; correctness does not depend on it
    // Still serving while rank 0 has not said goodbye (the tool does not hold it open).
    assert_int_equal(st_store_set(a, "k", "v", 1), STRATA_OK);
    assert_get(a, "k", "v");
    assert_false(atomic_load(&c.done));
    st_store_close(a, true);
    pthread_join(t, NULL);
    assert_true(atomic_load(&c.done));
    expect_notice(tool, -1, "lost connection to the store");
    st_store_close(tool, true);

    // A rank reported failed by another (stopped, or cut off without a FIN: its connection stays
    // open) holds close() no longer: the job was told it is gone.
    s = start_server(SECRET);
    a = join(&s, 0);
    st_store_t *stopped = join(&s, 1);
    assert_int_equal(st_store_report(a, 1, "stopped responding"), STRATA_OK);
    st_store_close(a, true);
    uint64_t t0 = st_now_ns();
    st_store_server_close(s.srv, LONG_MS);
    assert_true(st_now_ns() - t0 < (uint64_t)LONG_MS * 1000000u / 2);
    expect_notice(stopped, -1, "lost connection to the store");
    st_store_close(stopped, true);

    // A rank that never says goodbye holds close() only until the linger expires.
    s = start_server(SECRET);
    a = join(&s, 0);
    st_store_server_close(s.srv, 50);
    expect_notice(a, -1, "lost connection to the store");
    st_store_close(a, true);
}

typedef struct poll_client {
    const char *addr;
    strata_status_t rc;
    atomic_int done;
} poll_client_t;

static void *poll_client_main(void *arg)
{
    poll_client_t *p = arg;
    st_store_t *st = NULL;
    void *val = NULL;
    size_t len = 0;
    p->rc = st_store_connect(p->addr, SECRET, 0, LONG_MS, &st);
    if (p->rc == STRATA_OK)
        p->rc = st_store_set(st, "k", "v", 1);
    if (p->rc == STRATA_OK)
        p->rc = st_store_get(st, "k", &val, &len, LONG_MS);
    free(val);
    st_store_close(st, true);
    atomic_store(&p->done, 1);
    return NULL;
}

/* The harness's way: no server thread, the caller pumps st_store_server_poll(). */
static void test_poll_driven(void **state)
{
    (void)state;
    st_store_server_t *srv;
    assert_int_equal(st_store_server_open("127.0.0.1:0", SECRET, &srv), STRATA_OK);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", st_store_server_port(srv));
    poll_client_t p = {.addr = addr};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, poll_client_main, &p), 0);
    uint64_t deadline = st_deadline_ms(LONG_MS);
    while (!atomic_load(&p.done) && st_now_ns() < deadline)
        assert_int_equal(st_store_server_poll(srv, 10), STRATA_OK);
    pthread_join(t, NULL);
    assert_int_equal(p.rc, STRATA_OK);
    assert_int_equal(st_store_server_poll(srv, 0), STRATA_OK);
    assert_int_equal(st_store_server_live_ranks(srv), 0);
    st_store_server_close(srv, 0);
}

static void *late_server_main(void *arg)
{
    int port = *(int *)arg;
    sleep_ms(100);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    st_store_server_t *srv;
    if (st_store_server_open(addr, SECRET, &srv) != STRATA_OK)
        return NULL;
    st_store_server_start_thread(srv);
    return srv;
}

static void test_connect_retries(void **state)
{
    (void)state;
    // Find a free port, release it, and start a server there only after the client began trying.
    st_store_server_t *probe;
    assert_int_equal(st_store_server_open("127.0.0.1:0", SECRET, &probe), STRATA_OK);
    int port = st_store_server_port(probe);
    st_store_server_close(probe, 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);

    st_store_t *st = NULL;
    assert_int_equal(st_store_connect(addr, SECRET, 0, 30, &st), STRATA_ERR_TIMEOUT);
    assert_error_has(addr);

    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, late_server_main, &port), 0);
    strata_status_t rc = st_store_connect(addr, SECRET, 0, LONG_MS, &st);
    void *srv = NULL;
    pthread_join(t, &srv);
    if (!srv)
        skip(); // someone else took the port in between
    assert_int_equal(rc, STRATA_OK);
    st_store_close(st, true);
    st_store_server_close(srv, 0);

    assert_int_equal(st_store_connect("no-port", SECRET, 0, 10, &st), STRATA_ERR_INVALID_ARG);
    assert_error_has("no-port");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_get),
        cmocka_unit_test(test_get_waits_for_set),
        cmocka_unit_test(test_wait_keys),
        cmocka_unit_test(test_get_timeout),
        cmocka_unit_test(test_add),
        cmocka_unit_test(test_wrong_secret),
        cmocka_unit_test(test_garbage_clients),
        cmocka_unit_test(test_strangers_bounded),
        cmocka_unit_test(test_big_hello_cut_off),
        cmocka_unit_test(test_secret_too_long),
        cmocka_unit_test(test_ranked_client_breaking_protocol),
        cmocka_unit_test(test_failure_notice),
        cmocka_unit_test(test_report_names_root_cause),
        cmocka_unit_test(test_goodbye_is_not_a_failure),
        cmocka_unit_test(test_abort_notice),
        cmocka_unit_test(test_lost_store),
        cmocka_unit_test(test_close_lingers),
        cmocka_unit_test(test_poll_driven),
        cmocka_unit_test(test_connect_retries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
