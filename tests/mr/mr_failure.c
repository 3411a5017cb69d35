/* Failure behaviour: a rank killed mid-allreduce makes every other rank fail with an error naming it,
 * well within the timeout, never a hang (shm, tcp, and UCX over its tcp and shared memory); strata_comm_abort reaches every rank; a rank
 * that never shows up gives a timeout naming who was awaited; garbage on the store port does not
 * harm the job; bad arguments return clear errors. The kill test also runs the direct allreduce,
 * on strata_mem_alloc memory and through CMA. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness/st_test.h"

#define TIMEOUT_MS 20000

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The rank an error blames: the first "rank N" in it (the culprit is the sentence's subject; other
 * ranks may follow, as in "seen by rank 2"). -1 if none. */
static int blamed_rank(const char *err)
{
    const char *p = strstr(err, "rank ");
    return p && p[5] >= '0' && p[5] <= '9' ? atoi(p + 5) : -1;
}

/* The victim is the last rank; it dies by SIGKILL after its allreduce has started moving data.
 * With a non-NULL arg the buffer comes from strata_mem_alloc (the direct algorithm on one host). */
static int killed_mid_allreduce(int rank, int n, void *arg)
{
    strata_comm_t *c = st_test_comm();
    const int victim = n - 1;
    const size_t count = 8u << 20; // 32 MiB: long enough to be interrupted
    float *buf = NULL;
    if (arg)
        ST_RANK_CHECK_OK(strata_mem_alloc(c, count * sizeof *buf, (void **)&buf));
    else
        buf = calloc(count, sizeof *buf);
    double t0 = now_s();
    // A barrier guarantees everyone entered, not that everyone left: the victim may die while a
    // survivor is still finishing it, and then the barrier is the pending call that must fail.
    strata_status_t rc = strata_barrier(c);
    if (rc == STRATA_OK) {
        strata_request_t *req;
        ST_RANK_CHECK_OK(strata_iallreduce(c, buf, buf, count, STRATA_DTYPE_F32, STRATA_OP_SUM, &req));
        if (rank == victim) {
            bool done = false;
            for (int i = 0; i < 50 && !done; i++)
                strata_request_test(req, &done);
            raise(SIGKILL);
        }
        rc = strata_request_wait(req);
    }
    // On a slow build the victim may have sent all its data before dying, and then the allreduce
    // legitimately completes here; the failure must then surface in the next call.
    if (rc == STRATA_OK)
        rc = strata_barrier(c);
    double waited = now_s() - t0;
    if (rc != STRATA_ERR_PEER_FAILED || blamed_rank(strata_last_error()) != victim)
        return ST_RANK_FAIL("after rank %d died: %s: %s", victim, strata_status_name(rc),
                            strata_last_error());
    if (waited * 1000 > TIMEOUT_MS / 2)
        return ST_RANK_FAIL("noticed the death only after %.1f s", waited);
    // Later calls fail at once with the same error.
    rc = strata_allreduce(c, buf, buf, 1, STRATA_DTYPE_F32, STRATA_OP_SUM);
    if (rc != STRATA_ERR_PEER_FAILED || blamed_rank(strata_last_error()) != victim)
        return ST_RANK_FAIL("next call after the failure: %s: %s", strata_status_name(rc),
                            strata_last_error());
    if (arg)
        strata_mem_free(c, buf);
    else
        free(buf);
    strata_comm_destroy(c);
    return 0;
}

/* The echo of a failure must not be taken for its cause. The last rank dies; every other rank but
 * rank 0 learns of it, leaves cleanly, and raises its flag in `arg` (shared memory); only then does
 * rank 0, which was busy elsewhere and has not read the store's notice, first talk to rank 1. Rank 1
 * is gone (its doorbell and its port with it), yet it is not the culprit: the error must name the
 * dead rank. Before the fix, the connect path blamed rank 1. */
static int echo_not_cause(int rank, int n, void *arg)
{
    int *left = arg, *created = left + 64;
    const int victim = n - 1;
    strata_comm_t *c = st_test_comm();
    __atomic_store_n(&created[rank], 1, __ATOMIC_RELEASE);
    if (rank == victim) {
        // Die once everyone is past creation (a death during it is another test's business).
        for (int r = 0; r < n; r++)
            while (!__atomic_load_n(&created[r], __ATOMIC_ACQUIRE))
                usleep(1000);
        raise(SIGKILL);
    }
    if (rank != 0) {
        strata_status_t rc = strata_barrier(c); // rank 0 never joins: only the failure ends it
        if (rc != STRATA_ERR_PEER_FAILED || blamed_rank(strata_last_error()) != victim)
            return ST_RANK_FAIL("barrier after rank %d died: %s: %s", victim,
                                strata_status_name(rc), strata_last_error());
        strata_comm_destroy(c);
        __atomic_store_n(&left[rank], 1, __ATOMIC_RELEASE);
        return 0;
    }
    for (double t0 = now_s(); !__atomic_load_n(&left[1], __ATOMIC_ACQUIRE);) {
        if (now_s() - t0 > 30)
            return ST_RANK_FAIL("rank 1 never left");
        usleep(1000);
    }
    float x = 1;
    strata_status_t rc = strata_send(c, &x, 1, STRATA_DTYPE_F32, 1, 0);
    if (rc == STRATA_OK) // a send may be queued before the transport finds the peer gone
        rc = strata_barrier(c);
    if (rc != STRATA_ERR_PEER_FAILED || blamed_rank(strata_last_error()) != victim)
        return ST_RANK_FAIL("talking to rank 1, which left after rank %d died: %s: %s", victim,
                            strata_status_name(rc), strata_last_error());
    strata_comm_destroy(c);
    return 0;
}

static int aborted(int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    strata_comm_t *c = st_test_comm();
    ST_RANK_CHECK_OK(strata_barrier(c));
    if (rank == 0) {
        usleep(500 * 1000); // let everyone leave the first barrier and block in the second
        strata_comm_abort(c, "operator asked to stop");
        strata_status_t rc = strata_barrier(c);
        if (rc != STRATA_ERR_ABORTED)
            return ST_RANK_FAIL("barrier after own abort: %s", strata_status_name(rc));
    } else {
        double t0 = now_s();
        strata_status_t rc = strata_barrier(c);
        if (rc != STRATA_ERR_PEER_FAILED || !strstr(strata_last_error(), "rank 0") ||
            !strstr(strata_last_error(), "operator asked to stop"))
            return ST_RANK_FAIL("barrier during abort: %s: %s", strata_status_name(rc),
                                strata_last_error());
        if ((now_s() - t0) * 1000 > TIMEOUT_MS / 2)
            return ST_RANK_FAIL("abort took %.1f s to arrive", now_s() - t0);
    }
    strata_comm_destroy(c);
    return 0;
}

/* Rank 1 stays alive but never joins: the others time out, naming the rank they waited for. */
static int absent_peer(int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    strata_comm_t *c = st_test_comm();
    ST_RANK_CHECK_OK(strata_barrier(c));
    if (rank == 1) {
        sleep(4);
        strata_comm_destroy(c);
        return 0;
    }
    double t0 = now_s();
    int32_t x = 1, y;
    strata_status_t rc = strata_allreduce(c, &x, &y, 1, STRATA_DTYPE_I32, STRATA_OP_SUM);
    double waited = now_s() - t0;
    // Either this rank timed out and took the census itself, or another rank's verdict reached it
    // first; both name rank 1, which never came, not a rank that waited like this one.
    if ((rc != STRATA_ERR_TIMEOUT && rc != STRATA_ERR_PEER_FAILED) ||
        blamed_rank(strata_last_error()) != 1 || !strstr(strata_last_error(), "stopped responding"))
        return ST_RANK_FAIL("absent peer: %s: %s", strata_status_name(rc), strata_last_error());
    if (waited > 10)
        return ST_RANK_FAIL("timeout of 2 s took %.1f s", waited);
    strata_comm_destroy(c);
    return 0;
}

/* A survivor's verdict on the stopped rank `victim` (at `path` on the fabric when `placed`): 0 when
 * it names the victim as stopped within twice the timeout (plus `extra_s`), else 1 (printed). */
static int check_stopped_verdict(strata_status_t rc, double waited, double extra_s, int victim,
                                 const char *path, bool placed)
{
    if ((rc != STRATA_ERR_TIMEOUT && rc != STRATA_ERR_PEER_FAILED) ||
        blamed_rank(strata_last_error()) != victim ||
        !strstr(strata_last_error(), "stopped responding"))
        return ST_RANK_FAIL("rank %d stopped: %s: %s", victim, strata_status_name(rc),
                            strata_last_error());
    if (placed && (!strstr(strata_last_error(), path) ||
                   !strstr(strata_last_error(), "allreduce #") ||
                   !strstr(strata_last_error(), "completed")))
        return ST_RANK_FAIL("the verdict lacks the victim's place %s or its progress: %s", path,
                            strata_last_error());
    if (waited > 2 * 2.0 + 1.5 + extra_s)
        return ST_RANK_FAIL("took %.1f s to name the stopped rank (timeout 2 s)", waited);
    return 0;
}

/* Makes this rank go silent as a starved or stalled host would: a child stops it 0.5 s after the
 * victim (whose pid appears in *victim_pid) stopped, for STALL_S, across the other survivors'
 * first census window (2 to 3 s after the victim stopped); then it runs on. */
#define STALL_S 3
static void stall_later(const int *victim_pid)
{
    pid_t me = getpid();
    if (fork() != 0)
        return;
    prctl(PR_SET_PDEATHSIG, SIGKILL); // never outlive the rank
    while (!__atomic_load_n(victim_pid, __ATOMIC_ACQUIRE))
        usleep(1000);
    usleep(500 * 1000);
    kill(me, SIGSTOP);
    sleep(STALL_S);
    kill(me, SIGCONT);
    _exit(0);
}

/* A rank is stopped (SIGSTOP) in the middle of a run of allreduces: every other rank fails within
 * twice the timeout, naming the stopped rank, never a rank that was waiting like itself. arg[1] is
 * the victim; it leaves its pid in arg[0] so the lowest other rank can end it once every survivor
 * has its verdict, right or wrong (arg[2] counts them). When the victim is rank 0 serving the
 * store, the store stops with it and must be recognised as rank 0. With arg[3] set, every rank has
 * a place on the fabric (rack<r/2>/node<r>), which the message must name along with how far the
 * victim got. With arg[4] = s + 1, survivor s also falls silent for a while (stall_later) through
 * the others' census: it is still the victim they must name. */
static int stopped_rank(int rank, int n, void *arg)
{
    int *pid = arg;
    const int victim = pid[1];
    char path[64];
    snprintf(path, sizeof path, "rack%d/node%d", victim / 2, victim);
    if (pid[3]) {
        char mine[64];
        snprintf(mine, sizeof mine, "rack%d/node%d", rank / 2, rank);
        setenv("STRATA_TOPO_PATH", mine, 1);
    }
    strata_comm_t *c = st_test_comm();
    const bool stall = pid[4] > 0;
    if (rank == pid[4] - 1)
        stall_later(&pid[0]);
    float buf[1024] = {0};
    strata_status_t rc = STRATA_OK;
    double t0 = now_s();
    for (int i = 0; i < 1000000 && rc == STRATA_OK; i++) {
        if (rank == victim && i == 20) {
            __atomic_store_n(&pid[0], (int)getpid(), __ATOMIC_RELEASE);
            // Stopped for good: a SIGCONT the kernel sends a process group that became orphaned
            // while one of its members was stopped (an exit up the tree) must not wake it.
            for (;;)
                raise(SIGSTOP);
        }
        t0 = now_s();
        rc = strata_allreduce(c, buf, buf, 1024, STRATA_DTYPE_F32, STRATA_OP_SUM);
    }
    int bad = check_stopped_verdict(rc, now_s() - t0, stall ? STALL_S : 0, victim, path,
                                    pid[3] != 0);
    // End the victim only when every survivor has its verdict: its death would be news too.
    __atomic_add_fetch(&pid[2], 1, __ATOMIC_ACQ_REL);
    if (rank == (victim == 0 ? 1 : 0)) {
        for (double t = now_s(); __atomic_load_n(&pid[2], __ATOMIC_ACQUIRE) < n - 1;)
            if (now_s() - t > 60)
                return ST_RANK_FAIL("the other survivors never reached a verdict");
            else
                usleep(1000);
        int victim_pid = __atomic_load_n(&pid[0], __ATOMIC_ACQUIRE);
        if (victim_pid > 0) // 0 (the victim never got to stop) would kill the whole group
            kill(victim_pid, SIGKILL);
    }
    strata_comm_destroy(c);
    return bad;
}

/* Rank 0 serves the store and dies: every survivor names rank 0, not just "the store". */
static int killed_store_host(int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    strata_comm_t *c = st_test_comm();
    if (!c)
        return ST_RANK_FAIL("create: %s", strata_last_error());
    float buf[256] = {0};
    strata_status_t rc = strata_barrier(c);
    if (rank == 0)
        raise(SIGKILL);
    for (int i = 0; i < 1000000 && rc == STRATA_OK; i++)
        rc = strata_allreduce(c, buf, buf, 256, STRATA_DTYPE_F32, STRATA_OP_SUM);
    if (rc != STRATA_ERR_PEER_FAILED || blamed_rank(strata_last_error()) != 0)
        return ST_RANK_FAIL("after the store's host died: %s: %s", strata_status_name(rc),
                            strata_last_error());
    strata_comm_destroy(c);
    return 0;
}

static int connect_store(void)
{
    const char *addr = getenv("STRATA_STORE_ADDR");
    const char *colon = strrchr(addr, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* While the job runs, rank 0 throws garbage at the store port; the job keeps working. */
static int garbage_on_store(int rank, int n, void *arg)
{
    (void)arg;
    strata_comm_t *c = st_test_comm();
    if (rank == 0) {
        int silent = connect_store();                 // connects and says nothing
        int junk = connect_store();                   // random bytes
        int huge = connect_store();                   // a frame length of 4 GiB
        char noise[64];
        for (size_t i = 0; i < sizeof noise; i++)
            noise[i] = (char)(i * 37 + 11);
        if (silent < 0 || junk < 0 || huge < 0)
            return ST_RANK_FAIL("could not reach the store port");
        ssize_t w = write(junk, noise, sizeof noise);
        uint32_t big = 0xFFFFFFFFu;
        w += write(huge, &big, sizeof big);
        (void)w;
        // The store must close the junk connections (read returns 0 or an error).
        char b;
        struct timeval tv = {.tv_sec = 8};
        setsockopt(junk, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(huge, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        if (read(junk, &b, 1) > 0 || read(huge, &b, 1) > 0)
            return ST_RANK_FAIL("store answered garbage instead of closing");
        close(junk);
        close(huge);
        close(silent);
    }
    for (int i = 0; i < 5; i++) {
        int32_t x = rank, sum = -1;
        ST_RANK_CHECK_OK(strata_allreduce(c, &x, &sum, 1, STRATA_DTYPE_I32, STRATA_OP_SUM));
        if (sum != n * (n - 1) / 2)
            return ST_RANK_FAIL("allreduce after garbage: %d", sum);
        ST_RANK_CHECK_OK(strata_barrier(c));
    }
    strata_comm_destroy(c);
    return 0;
}

static int expect_err(strata_status_t rc, strata_status_t want, const char *needle, const char *what)
{
    if (rc != want || !strstr(strata_last_error(), needle))
        return ST_RANK_FAIL("%s: got %s '%s', want %s mentioning '%s'", what, strata_status_name(rc),
                            strata_last_error(), strata_status_name(want), needle);
    return 0;
}

static int bad_arguments(int rank, int n, void *arg)
{
    (void)rank;
    (void)arg;
    strata_comm_t *c = st_test_comm();
    float f[4] = {0};
    strata_request_t *req;
    int bad = 0;
    bad |= expect_err(strata_allreduce(NULL, f, f, 4, STRATA_DTYPE_F32, STRATA_OP_SUM),
                      STRATA_ERR_INVALID_ARG, "comm is NULL", "NULL comm");
    void *mem = NULL;
    bad |= expect_err(strata_mem_alloc(c, 0, &mem), STRATA_ERR_INVALID_ARG, "size is 0", "mem 0");
    bad |= expect_err(strata_mem_free(c, f), STRATA_ERR_INVALID_ARG, "not returned by", "mem free");
    bad |= expect_err(strata_allreduce(c, f, f, 4, (strata_dtype_t)99, STRATA_OP_SUM),
                      STRATA_ERR_INVALID_ARG, "dtype", "bad dtype");
    bad |= expect_err(strata_allreduce(c, f, f, 4, STRATA_DTYPE_F32, (strata_op_t)42),
                      STRATA_ERR_INVALID_ARG, "op", "bad op");
    bad |= expect_err(strata_allreduce(c, NULL, f, 4, STRATA_DTYPE_F32, STRATA_OP_SUM),
                      STRATA_ERR_INVALID_ARG, "sendbuf is NULL", "NULL sendbuf");
    bad |= expect_err(strata_bcast(c, f, 4, STRATA_DTYPE_F32, n), STRATA_ERR_INVALID_ARG,
                      "root", "root out of range");
    bad |= expect_err(strata_send(c, f, 1, STRATA_DTYPE_F32, -1, 0), STRATA_ERR_INVALID_ARG,
                      "peer -1", "bad peer");
    bad |= expect_err(strata_send(c, f, 1, STRATA_DTYPE_F32, 0, -3), STRATA_ERR_INVALID_ARG,
                      "tag", "negative tag");
    bad |= expect_err(strata_iallreduce(c, f, f, 4, STRATA_DTYPE_F32, STRATA_OP_SUM, NULL),
                      STRATA_ERR_INVALID_ARG, "request", "NULL request");
    bad |= expect_err(strata_allreduce(c, f, f, SIZE_MAX / 2, STRATA_DTYPE_F32, STRATA_OP_SUM),
                      STRATA_ERR_INVALID_ARG, "overflows", "huge count");
    bad |= expect_err(strata_reduce_scatterv(c, f, f, NULL, STRATA_DTYPE_F32, STRATA_OP_SUM),
                      STRATA_ERR_INVALID_ARG, "recvcounts", "NULL recvcounts");
    // The communicator still works after refused calls.
    ST_RANK_CHECK_OK(strata_allreduce(c, f, f, 4, STRATA_DTYPE_F32, STRATA_OP_SUM));
    (void)req;
    strata_comm_config_t cfg = strata_comm_config_default();
    strata_comm_t *out = (strata_comm_t *)1;
    cfg.rank = 3;
    cfg.nranks = 2;
    cfg.store_addr = "127.0.0.1:1";
    cfg.job_id = "x";
    bad |= expect_err(strata_comm_create(&cfg, &out), STRATA_ERR_INVALID_ARG, "rank 3", "rank >= nranks");
    if (out != NULL)
        bad |= ST_RANK_FAIL("failed create left *out set");
    cfg.rank = 0;
    cfg.store_addr = "nocolon";
    bad |= expect_err(strata_comm_create(&cfg, &out), STRATA_ERR_INVALID_ARG, "host:port", "bad store address");
    strata_comm_destroy(c);
    return bad;
}

static void run_arg(st_rank_fn fn, void *arg, int n, const char *env, int victim)
{
    st_ranks_opts_t o = {.deadline_ms = 60000, .extra_env = env, .expect_fail_rank = victim};
    if (st_test_ranks(n, fn, arg, &o) != 0)
        fail_msg("%d ranks (env %s) failed", n, env ? env : "-");
}

static void run(st_rank_fn fn, int n, const char *env, int victim)
{
    run_arg(fn, NULL, n, env, victim);
}

static void test_killed_shm(void **state)
{
    (void)state;
    const int sizes[] = {2, 3, 5, 8};
    for (int i = 0; i < 4; i++)
        run(killed_mid_allreduce, sizes[i], "STRATA_COMM_TIMEOUT_MS=20000", sizes[i] - 1);
}

static void test_killed_tcp(void **state)
{
    (void)state;
    const int sizes[] = {2, 3, 5, 8};
    for (int i = 0; i < 4; i++)
        run(killed_mid_allreduce, sizes[i], "STRATA_COMM_TIMEOUT_MS=20000;STRATA_COMM_TRANSPORT=tcp",
            sizes[i] - 1);
}

/* Direct algorithms: peers' buffers mapped (strata_mem_alloc), or reached through CMA (forced). */
static void test_killed_direct(void **state)
{
    (void)state;
    static char mem[] = "mem";
    const int sizes[] = {2, 3, 5, 8};
    for (int i = 0; i < 4; i++)
        run_arg(killed_mid_allreduce, mem, sizes[i], "STRATA_COMM_TIMEOUT_MS=20000", sizes[i] - 1);
    run(killed_mid_allreduce, 3, "STRATA_COMM_TIMEOUT_MS=20000;STRATA_COMM_ALGO=allreduce:direct", 2);
}

static void test_echo_not_cause(void **state)
{
    (void)state;
    const char *envs[] = {"STRATA_COMM_TIMEOUT_MS=20000",
                          "STRATA_COMM_TIMEOUT_MS=20000;STRATA_COMM_TRANSPORT=tcp"};
    for (int e = 0; e < 2; e++) {
        for (int n = 3; n <= 8; n += 5) {
            int *left = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
            assert_true(left != MAP_FAILED);
            run_arg(echo_not_cause, left, n, envs[e], n - 1);
            munmap(left, 4096);
        }
    }
}

static void test_abort(void **state)
{
    (void)state;
    run(aborted, 4, "STRATA_COMM_TIMEOUT_MS=20000", -1);
    run(aborted, 3, "STRATA_COMM_TIMEOUT_MS=20000;STRATA_COMM_TRANSPORT=tcp", -1);
}

static void test_timeout(void **state)
{
    (void)state;
    run(absent_peer, 3, "STRATA_COMM_TIMEOUT_MS=2000", -1);
    run(absent_peer, 4, "STRATA_COMM_TIMEOUT_MS=2000;STRATA_COMM_TRANSPORT=tcp", -1);
}

static void test_stopped(void **state)
{
    (void)state;
    const char *envs[] = {"STRATA_COMM_TIMEOUT_MS=2000",
                          "STRATA_COMM_TIMEOUT_MS=2000;STRATA_COMM_TRANSPORT=tcp"};
    const int sizes[] = {2, 5, 8};
    for (int e = 0; e < 2; e++)
        for (int i = 0; i < 3; i++) {
            int *pid = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
            assert_true(pid != MAP_FAILED);
            pid[1] = sizes[i] / 2;
            pid[3] = i == 2; // 8 ranks: on a fabric
            run_arg(stopped_rank, pid, sizes[i], envs[e], pid[1]);
            munmap(pid, 4096);
        }
}

/* A survivor stalls through the others' census (5 ranks, victim 2, stalled 0, whom the others'
 * allreduce waits on): they must still name the victim, not the rank that merely did not run.
 * Before the census looked again while two ranks were silent, they named rank 0. */
static void test_stopped_and_stalled(void **state)
{
    (void)state;
    int *pid = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(pid != MAP_FAILED);
    pid[1] = 2;
    pid[4] = 1; // rank 0 stalls (arg[4] = rank + 1)
    run_arg(stopped_rank, pid, 5, "STRATA_COMM_TIMEOUT_MS=2000", pid[1]);
    munmap(pid, 4096);
}

/* The same over the UCX transport (`mr_failure ucx`, registered when strata is built with UCX): a
 * killed rank, a stopped one, an absent one, and the echo of a failure, over UCX's tcp (which reports
 * a dead peer itself) and its shared memory (which does not: the peer's process is watched). */
#define UCX_ENV(tls, ms) "STRATA_COMM_TIMEOUT_MS=" #ms ";STRATA_COMM_TRANSPORT=ucx;UCX_TLS=" tls

/* UCX 1.13's tcp transport aborts a surviving rank now and then while it handles the killed
 * peer's reset (uct_iface.h:884 "comp->count > 0" inside ucp_worker_progress, before strata hears of
 * the failure): about one run in five under ASan, and seen in a release build's CI run too. A
 * defect of UCX, not a behaviour strata can test, so the killed-peer case runs over UCX's shared
 * memory only; over UCX's tcp the stopped peer and the timeout below still run, and the killed
 * peer over strata's own tcp is mr_failure's. */
static void test_killed_ucx(void **state)
{
    (void)state;
    const int sizes[] = {2, 3, 5};
    printf("not run: a rank killed over UCX's tcp (UCX 1.13 can abort the survivors)\n");
    for (int i = 0; i < 3; i++)
        run(killed_mid_allreduce, sizes[i], UCX_ENV("sm", 20000), sizes[i] - 1);
}

static void test_stopped_ucx(void **state)
{
    (void)state;
    const char *envs[] = {UCX_ENV("tcp", 2000), UCX_ENV("sm", 2000)};
    const int sizes[] = {2, 5};
    for (int e = 0; e < 2; e++)
        for (int i = 0; i < 2; i++) {
            int *pid = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
            assert_true(pid != MAP_FAILED);
            pid[1] = sizes[i] / 2;
            run_arg(stopped_rank, pid, sizes[i], envs[e], pid[1]);
            munmap(pid, 4096);
        }
}

static void test_timeout_ucx(void **state)
{
    (void)state;
    run(absent_peer, 3, UCX_ENV("tcp", 2000), -1);
    run(absent_peer, 3, UCX_ENV("sm", 2000), -1);
}

static void test_echo_not_cause_ucx(void **state)
{
    (void)state;
    const char *envs[] = {UCX_ENV("tcp", 20000), UCX_ENV("sm", 20000)};
    for (int e = 0; e < 2; e++) {
        int *left = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        assert_true(left != MAP_FAILED);
        run_arg(echo_not_cause, left, 3, envs[e], 2);
        munmap(left, 4096);
    }
}

static int free_port(void);

/* Rank 0 serves the store and is stopped: the store stops answering with it. */
static void test_stopped_store_host(void **state)
{
    (void)state;
    for (int n = 2; n <= 4; n += 2) {
        char env[200];
        snprintf(env, sizeof env,
                 "STRATA_COMM_TIMEOUT_MS=2000;STRATA_STORE_EXTERNAL=0;STRATA_STORE_ADDR=127.0.0.1:%d",
                 free_port());
        int *pid = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        assert_true(pid != MAP_FAILED);
        pid[1] = 0;
        run_arg(stopped_rank, pid, n, env, 0);
        munmap(pid, 4096);
    }
}

/* A port nobody holds now, for a store that rank 0 hosts. Rank 0 binds it a moment later, so it is
 * drawn from 20000-28999: below the kernel's ephemeral range (32768-60999 by default), where the
 * listeners and connections of the tests running beside this one (bind to port 0, connect) take
 * their ports, and away from the 29xxx ports other tests name. A port from bind(0) could be taken
 * by one of them in between. */
static int free_port(void)
{
    static unsigned seed;
    if (!seed)
        seed = (unsigned)getpid() ^ (unsigned)time(NULL);
    for (int tries = 0; tries < 1000; tries++) {
        int port = 20000 + (int)(rand_r(&seed) % 9000);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fd >= 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
        bool bound = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
        close(fd);
        if (bound)
            return port;
    }
    fail_msg("no free port in 20000-28999 after 1000 tries");
    return -1;
}

static void test_killed_store_host(void **state)
{
    (void)state;
    const char *transports[] = {"", ";STRATA_COMM_TRANSPORT=tcp"};
    for (int t = 0; t < 2; t++)
        for (int n = 3; n <= 5; n += 2) {
            char env[200];
            snprintf(env, sizeof env,
                     "STRATA_COMM_TIMEOUT_MS=20000;STRATA_STORE_EXTERNAL=0;"
                     "STRATA_STORE_ADDR=127.0.0.1:%d%s", free_port(), transports[t]);
            run(killed_store_host, n, env, 0);
        }
}

static void test_garbage_store(void **state)
{
    (void)state;
    run(garbage_on_store, 3, NULL, -1);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    run(bad_arguments, 1, NULL, -1);
    run(bad_arguments, 2, NULL, -1);
}

/* `mr_failure` runs every test but the UCX ones, `mr_failure ucx` only those, and `mr_failure NAME`
 * the tests matching NAME (a cmocka pattern: `mr_failure 'test_stopped*'`). */
int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "ucx"))
        cmocka_set_test_filter("*_ucx");
    else if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    else
        cmocka_set_skip_filter("*_ucx");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_killed_ucx),   cmocka_unit_test(test_stopped_ucx),
        cmocka_unit_test(test_timeout_ucx),  cmocka_unit_test(test_echo_not_cause_ucx),
        cmocka_unit_test(test_killed_shm),   cmocka_unit_test(test_killed_tcp),
        cmocka_unit_test(test_killed_direct), cmocka_unit_test(test_echo_not_cause),
        cmocka_unit_test(test_abort),        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_stopped),      cmocka_unit_test(test_stopped_and_stalled),
        cmocka_unit_test(test_stopped_store_host), cmocka_unit_test(test_killed_store_host),
        cmocka_unit_test(test_garbage_store), cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
