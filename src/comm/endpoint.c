/* The endpoint: peers, tagged message matching, progress, waiting and failure.
 *
 * Start-up cost per rank is constant: a rank publishes one store key with its address and joins one
 * store-side counter; it looks a peer up (one store round trip) only when an algorithm first talks
 * to that peer, and connects then. Transports do the byte moving; this file decides which transport
 * serves a peer, matches arrivals to receives, and sleeps when there is nothing to do.
 */
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "comm/algo/reduce_op.h"
#include "comm/bootstrap/rendezvous.h"
#include "comm/bootstrap/store_proto.h"
#include "comm/endpoint.h"
#include "comm/transport/transport.h"
#include "comm/watchdog.h"
#include "comm/window.h"

#include <json-c/json.h>

/* In order of preference: the first whose can_connect() accepts a peer serves it. UCX comes first
 * because it only accepts when asked for (strata_comm_config_t.ucx). */
static const st_transport_ops_t *const transports[] = {
#ifdef STRATA_HAVE_UCX
    &st_ucx_ops,
#endif
    &st_shm_ops, &st_tcp_ops};
#define ST_NTP ((int)(sizeof transports / sizeof transports[0]))

static int tp_index(const st_transport_ops_t *ops)
{
    int i = 0;
    while (transports[i] != ops)
        i++;
    return i;
}

struct st_ep {
    int rank, nranks;
    long long timeout_ms;
    bool force_tcp, single_host;
    strata_comm_ucx_t ucx;
    bool store_on_rank0; /* losing the store means losing rank 0 */
    char job_id[96], secret[128];
    uint64_t host_hash;
    char host[64];
    st_store_t *store;
    st_store_server_t *server;
    st_peer_t *peers;
    int *live; /* ranks of peers that have a connection, progressed every pass */
    int nlive;
    st_transport_t *tp[ST_NTP];
    st_win_t *win;
    strata_status_t failed;
    char failed_msg[512];
    int culprit; /* the rank the failure is blamed on, -1 unknown */
    st_flight_t flight;
    st_watch_t watch;
    uint64_t wait_ns; /* time spent in st_ep_wait */
    uint64_t spin_ns;
    uint64_t last_check_ns;
    bool joined; /* creation completed: a destroy is a deliberate, clean exit */
};


/* ---- small helpers ----------------------------------------------------------------------------- */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The host identity decides shm vs tcp: same host name, network namespace and boot. Emulated
 * hosts (one network namespace each) therefore count as different hosts, as they should. */
static uint64_t host_identity(char *host, size_t hostlen)
{
    gethostname(host, hostlen - 1);
    const char *forced = st_knob_str("STRATA_HOST_ID");
    if (*forced)
        return fnv1a(forced);
    char id[512];
    struct stat st;
    unsigned long long netns = stat("/proc/self/ns/net", &st) == 0 ? (unsigned long long)st.st_ino : 0;
    char boot[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f))
            boot[0] = '\0';
        fclose(f);
    }
    snprintf(id, sizeof id, "%s/%llu/%s", host, netns, boot);
    return fnv1a(id);
}

/* How long a waiting rank polls before it sleeps. With at most one rank per core a rank polls long
 * (1 ms): nobody else needs its core, and waking a sleeping core costs far more than polling (tens
 * to hundreds of microseconds on a virtual machine, which a large transfer pays at every stall).
 * With more ranks than cores on the host it sleeps after 50 us, so the rank it waits for can run. */
static uint64_t spin_ns(const st_ep_t *ep)
{
    long long us = st_knob_int("STRATA_COMM_SPIN_US", -1);
    if (us >= 0)
        return (uint64_t)us * 1000u;
    const char *lws = getenv("LOCAL_WORLD_SIZE"); // torchrun, strata launch
    long long local = ep->single_host ? ep->nranks : lws && atoi(lws) > 0 ? atoi(lws) : ep->nranks;
    cpu_set_t set;
    long cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                            : sysconf(_SC_NPROCESSORS_ONLN);
    return (local > cpus ? 50 : 1000) * 1000ull;
}

int st_ep_rank(const st_ep_t *ep) { return ep->rank; }
int st_ep_size(const st_ep_t *ep) { return ep->nranks; }
long long st_ep_timeout_ms(const st_ep_t *ep) { return ep->timeout_ms; }
bool st_ep_single_host(const st_ep_t *ep)
{
    return ep->single_host && !ep->force_tcp && ep->ucx != STRATA_COMM_UCX_ALL;
}
strata_comm_ucx_t st_ep_ucx(const st_ep_t *ep) { return ep->ucx; }
bool st_ep_force_tcp(const st_ep_t *ep) { return ep->force_tcp; }
uint64_t st_ep_host_hash(const st_ep_t *ep) { return ep->host_hash; }
const char *st_ep_job_id(const st_ep_t *ep) { return ep->job_id; }
const char *st_ep_secret(const st_ep_t *ep) { return ep->secret; }
st_peer_t *st_ep_peer(st_ep_t *ep, int rank) { return &ep->peers[rank]; }
st_store_t *st_ep_store(const st_ep_t *ep) { return ep->store; }
st_win_t *st_ep_window(const st_ep_t *ep) { return ep->win; }
st_flight_t *st_ep_flight(st_ep_t *ep) { return &ep->flight; }
bool st_ep_store_on_rank0(const st_ep_t *ep) { return ep->store_on_rank0; }
int st_ep_culprit(const st_ep_t *ep) { return ep->culprit; }
uint64_t st_ep_wait_ns(const st_ep_t *ep) { return ep->wait_ns; }

const char *st_ep_peer_name(st_ep_t *ep, int rank)
{
    static _Thread_local char buf[288];
    st_peer_t *p = &ep->peers[rank];
    if (p->host[0] && p->path[0])
        snprintf(buf, sizeof buf, "rank %d (host %s pid %d, %s)", rank, p->host, p->pid, p->path);
    else if (p->host[0])
        snprintf(buf, sizeof buf, "rank %d (host %s pid %d)", rank, p->host, p->pid);
    else
        snprintf(buf, sizeof buf, "rank %d", rank);
    return buf;
}

void st_ep_where(st_ep_t *ep, int rank, char *buf, size_t len)
{
    char key[32], host[64] = "", addr[64] = "";
    snprintf(key, sizeof key, "addr/%d", rank);
    void *val = NULL;
    size_t n = 0;
    unsigned long long hash;
    int pid, end = 0;
    buf[0] = '\0';
    // Published before the job started (st_ep_create): there or never, no need to wait.
    if (st_store_get(ep->store, key, &val, &n, 0) == STRATA_OK &&
        sscanf(val, "%llx %d %63s %63s %n", &hash, &pid, host, addr, &end) == 4) {
        char *colon = strrchr(addr, ':');
        if (colon)
            *colon = '\0'; // the port says nothing about where
        const char *path = end > 0 && strcmp((char *)val + end, "-") ? (char *)val + end : "";
        snprintf(buf, len, "host %s %s%s%s", host, strcmp(addr, "-") ? addr : "", *path ? ", " : "",
                 path);
    }
    free(val);
}

/* ---- failure ----------------------------------------------------------------------------------- */

/* Writes STRATA_DIAG_DIR/rank<r>.json: who this rank is, how it failed, whom it blames, and its
 * flight recorder. Written once, at the first failure, through a temporary file and a rename so a
 * reader never sees half of it. Best effort: a dump that cannot be written is logged. */
static void dump_diag(const st_ep_t *ep)
{
    const char *dir = st_knob_str("STRATA_DIAG_DIR");
    if (!*dir)
        return;
    json_object *o = json_object_new_object();
    json_object_object_add(o, "rank", json_object_new_int(ep->rank));
    json_object_object_add(o, "nranks", json_object_new_int(ep->nranks));
    json_object_object_add(o, "host", json_object_new_string(ep->host));
    json_object_object_add(o, "pid", json_object_new_int((int)getpid()));
    json_object_object_add(o, "status", json_object_new_string(strata_status_name(ep->failed)));
    json_object_object_add(o, "error", json_object_new_string(ep->failed_msg));
    json_object_object_add(o, "culprit", json_object_new_int(ep->culprit));
    json_object_object_add(o, "completed", json_object_new_int64((int64_t)ep->flight.completed));
    json_object_object_add(o, "flight", st_flight_to_json(&ep->flight));
    char path[1024], tmp[1100];
    snprintf(path, sizeof path, "%s/rank%d.json", dir, ep->rank);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    if (json_object_to_file_ext(tmp, o, JSON_C_TO_STRING_PRETTY) != 0 || rename(tmp, path) != 0) {
        ST_LOG_WARN(ST_SUB_COMM, "could not write the failure dump %s: %s", path, strerror(errno));
        unlink(tmp);
    }
    json_object_put(o);
}

static strata_status_t vfail(st_ep_t *ep, int culprit, strata_status_t status, const char *fmt,
                             va_list ap) ST_PRINTF(4, 0);
static strata_status_t vfail(st_ep_t *ep, int culprit, strata_status_t status, const char *fmt,
                             va_list ap)
{
    if (ep->failed == STRATA_OK) {
        vsnprintf(ep->failed_msg, sizeof ep->failed_msg, fmt, ap);
        ep->failed = status;
        ep->culprit = culprit;
        ST_LOG_WARN(ST_SUB_COMM, "%s", ep->failed_msg);
        dump_diag(ep);
    }
    st_error_set(ep->failed_msg);
    return ep->failed;
}

strata_status_t st_ep_fail(st_ep_t *ep, strata_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    strata_status_t rc = vfail(ep, -1, status, fmt, ap);
    va_end(ap);
    return rc;
}

strata_status_t st_ep_fail_blaming(st_ep_t *ep, int culprit, strata_status_t status,
                                   const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    strata_status_t rc = vfail(ep, culprit, status, fmt, ap);
    va_end(ap);
    return rc;
}

strata_status_t st_ep_error(const st_ep_t *ep)
{
    if (ep->failed != STRATA_OK)
        st_error_set(ep->failed_msg);
    return ep->failed;
}

void st_ep_abort(st_ep_t *ep, const char *reason)
{
    if (ep->failed == STRATA_OK && ep->store)
        st_store_abort(ep->store, reason ? reason : "strata_comm_abort");
    st_ep_fail_blaming(ep, ep->rank, STRATA_ERR_ABORTED, "communicator aborted by rank %d: %s", ep->rank,
               reason ? reason : "strata_comm_abort");
}

/* Fails the endpoint with the store's failure notice (the job's root cause). A store that is gone
 * when rank 0 served it means rank 0 is gone: the error names rank 0, not just a socket. */
static strata_status_t fail_from_notice(st_ep_t *ep, int who)
{
    if (st_store_lost(ep->store) && ep->store_on_rank0 && ep->rank != 0) {
        char notice[512];
        snprintf(notice, sizeof notice, "%s", strata_last_error());
        return st_ep_fail_blaming(ep, 0, STRATA_ERR_PEER_FAILED,
                                  "%s, which serves the store, failed: %s", st_ep_peer_name(ep, 0),
                                  notice);
    }
    return st_ep_fail_blaming(ep, who, STRATA_ERR_PEER_FAILED, "%s", strata_last_error());
}

strata_status_t st_ep_check_store(st_ep_t *ep)
{
    int who = -1;
    if (st_store_check_notice(ep->store, &who) < 0)
        return fail_from_notice(ep, who);
    return STRATA_OK;
}

strata_status_t st_ep_peer_lost(st_ep_t *ep, int rank, const char *fmt, ...)
{
    if (ep->failed)
        return st_ep_error(ep);
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    // A peer that is gone has often just learned of a failure elsewhere and left. Every rank
    // that leaves on a failure has the store record its cause first (through this very report,
    // or because the store announced it), and the store answers a report only after sending
    // the job's first notice: so once it answers, the notice in hand is the root cause, whatever
    // order the processes and the store ran in.
    strata_status_t rc = st_store_report(ep->store, rank, msg);
    if (st_ep_check_store(ep) < 0)
        return ep->failed;
    if (rc < 0)
        ST_LOG_WARN(ST_SUB_COMM, "could not report the loss of rank %d to the store: %s", rank,
                    strata_last_error());
    return st_ep_fail_blaming(ep, rank, STRATA_ERR_PEER_FAILED, "%s %s", st_ep_peer_name(ep, rank),
                              msg);
}

/* ---- creation ---------------------------------------------------------------------------------- */

static strata_status_t store_barrier(st_ep_t *ep)
{
    // Hosts are counted on the way in so every rank learns whether the job fits on one host.
    char key[160];
    int64_t v;
    snprintf(key, sizeof key, "host/%016llx", (unsigned long long)ep->host_hash);
    ST_TRY(st_store_add(ep->store, key, 1, &v));
    if (v == 1)
        ST_TRY(st_store_add(ep->store, "nhosts", 1, &v));
    ST_TRY(st_store_add(ep->store, "init/count", 1, &v));
    if (v == ep->nranks) {
        int64_t hosts;
        ST_TRY(st_store_add(ep->store, "nhosts", 0, &hosts));
        char val[32];
        int n = snprintf(val, sizeof val, "%lld", (long long)hosts);
        ST_TRY(st_store_set(ep->store, "init/done", val, (size_t)n));
    }
    void *val = NULL;
    size_t len = 0;
    ST_TRY(st_store_get(ep->store, "init/done", &val, &len, ep->timeout_ms));
    ep->single_host = len > 0 && atoi((char *)val) == 1;
    free(val);
    return STRATA_OK;
}

/* A job met at a launcher's meeting place learns what makes it unique only there: the job id (which
 * names shared-memory segments and keys the peers' handshake) gets the store's address hashed on. */
static strata_status_t unique_job_id(st_ep_t *ep, const char *addr)
{
    size_t n = strlen(ep->job_id);
    snprintf(ep->job_id + n, sizeof ep->job_id - n, "-%08x", (unsigned)st_fnv1a(addr));
    return STRATA_OK;
}

/* Rank 0 of a job that serves its store starts it; the store's address into addr. When the
 * address names the launcher's meeting place (rendezvous.h), the store takes a free port, rank 0
 * publishes where it is and the others look it up. */
static strata_status_t open_store(st_ep_t *ep, const strata_comm_config_t *cfg, char *addr,
                                  size_t size)
{
    bool meet = st_rdzv_scheme(cfg->store_addr);
    if (!meet)
        snprintf(addr, size, "%s", cfg->store_addr);
    if (meet && cfg->rank != 0) {
        ST_TRY(st_rdzv_lookup(cfg->store_addr, addr, size, ep->timeout_ms));
        return unique_job_id(ep, addr);
    }
    if (!cfg->host_store || cfg->rank != 0)
        return STRATA_OK;
    ST_TRY(st_store_server_open(meet ? ":0" : cfg->store_addr, ep->secret, &ep->server));
    ST_TRY(st_store_server_start_thread(ep->server));
    if (!meet)
        return STRATA_OK;
    // Where the others reach rank 0: torchrun's master address (rank 0 runs on the master node),
    // else this host's name.
    char host[256] = "";
    int port = 0;
    if (!strncmp(cfg->store_addr, "torch:", 6))
        st_store_split_addr(cfg->store_addr + 6, host, sizeof host, &port);
    else
        gethostname(host, sizeof host - 1);
    snprintf(addr, size, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host,
             st_store_server_port(ep->server));
    ST_TRY(st_rdzv_publish(cfg->store_addr, addr, ep->timeout_ms));
    return unique_job_id(ep, addr);
}

strata_status_t st_ep_create(const strata_comm_config_t *cfg, const char *path, st_ep_t **out)
{
    *out = NULL;
#ifndef STRATA_HAVE_UCX
    if (cfg->ucx != STRATA_COMM_UCX_OFF)
        return st_error(STRATA_ERR_UNSUPPORTED,
                        "the UCX transport was asked for (STRATA_COMM_TRANSPORT=%s) but this strata "
                        "was built without UCX: install libucx-dev and rebuild (docs/comm.md)",
                        cfg->ucx == STRATA_COMM_UCX_ALL ? "ucx" : "shm+ucx");
#endif
    st_ep_t *ep = calloc(1, sizeof *ep);
    if (!ep)
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory creating the endpoint");
    strata_status_t rc = STRATA_OK;
    ep->rank = cfg->rank;
    ep->nranks = cfg->nranks;
    ep->timeout_ms = cfg->timeout_ms;
    ep->force_tcp = cfg->force_tcp;
    ep->ucx = cfg->ucx;
    ep->store_on_rank0 = cfg->store_on_rank0 || cfg->host_store;
    ep->culprit = -1;
    st_watch_init(&ep->watch, cfg->timeout_ms);
    snprintf(ep->secret, sizeof ep->secret, "%s", cfg->secret ? cfg->secret : "");
    snprintf(ep->job_id, sizeof ep->job_id, "%s", cfg->job_id ? cfg->job_id : "");
    ep->host_hash = host_identity(ep->host, sizeof ep->host);
    ep->peers = calloc((size_t)cfg->nranks, sizeof *ep->peers);
    ep->live = calloc((size_t)cfg->nranks, sizeof *ep->live);
    if (!ep->peers || !ep->live) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "out of memory for %d peers", cfg->nranks);
        goto fail;
    }
    for (int r = 0; r < cfg->nranks; r++)
        ep->peers[r].rank = r;
    st_peer_t *me = &ep->peers[ep->rank];
    me->resolved = true;
    me->host_hash = ep->host_hash;
    me->pid = (int)getpid();
    snprintf(me->host, sizeof me->host, "%s", ep->host);
    snprintf(me->path, sizeof me->path, "%s", path);
    st_log_set_rank(cfg->rank);

    char store_addr[320];
    ST_TRY_GOTO(open_store(ep, cfg, store_addr, sizeof store_addr), rc, fail);
    ST_TRY_GOTO(st_store_connect_at(store_addr, ep->secret, cfg->rank, path, ep->timeout_ms,
                                    &ep->store),
                rc, fail);
    for (int i = 0; i < ST_NTP; i++)
        ST_TRY_GOTO(transports[i]->open(ep, &ep->tp[i]), rc, fail);
    ST_TRY_GOTO(st_win_create(&ep->win), rc, fail);

    char tcpaddr[64] = "";
    st_tcp_ops.address(ep->tp[tp_index(&st_tcp_ops)], tcpaddr, sizeof tcpaddr);
    char key[32], val[800];
    snprintf(key, sizeof key, "addr/%d", ep->rank);
    int n = snprintf(val, sizeof val, "%016llx %d %s %s %s", (unsigned long long)ep->host_hash,
                     (int)getpid(), ep->host, tcpaddr[0] ? tcpaddr : "-",
                     me->path[0] ? me->path : "-");
    ST_TRY_GOTO(st_store_set(ep->store, key, val, (size_t)n), rc, fail);
    ST_TRY_GOTO(store_barrier(ep), rc, fail);
    ep->spin_ns = spin_ns(ep);
    ST_LOG_INFO(ST_SUB_COMM, "endpoint up: rank %d/%d host %s%s, polls %llu us before sleeping",
                ep->rank, ep->nranks, ep->host, ep->single_host ? " (single host)" : "",
                (unsigned long long)(ep->spin_ns / 1000));
    ep->joined = true;
    *out = ep;
    return STRATA_OK;
fail: {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", strata_last_error());
    st_ep_destroy(ep); // not joined: no goodbye, so the store tells the others at once
    st_error_set(msg);
    return rc;
}
}

void st_ep_destroy(st_ep_t *ep)
{
    if (!ep)
        return;
    for (int i = 0; i < ep->nlive; i++) {
        st_peer_t *p = &ep->peers[ep->live[i]];
        if (p->tp)
            p->tp->disconnect(ep, ep->tp[tp_index(p->tp)], p);
    }
    if (ep->peers)
        for (int r = 0; r < ep->nranks; r++)
            while (ep->peers[r].unexq) {
                st_msg_t *u = ep->peers[r].unexq;
                ep->peers[r].unexq = u->next;
                free(u->rbuf);
                free(u);
            }
    for (int i = 0; i < ST_NTP; i++)
        if (ep->tp[i])
            transports[i]->close(ep, ep->tp[i]);
    st_win_destroy(ep->win);
    // Destroying is a deliberate exit even after a peer failed: say goodbye, so the store does not
    // report this rank as failed too.
    st_store_close(ep->store, ep->joined);
    st_store_server_close(ep->server, (int)ST_MIN(ep->timeout_ms < 0 ? 60000 : ep->timeout_ms, 60000));
    free(ep->peers);
    free(ep->live);
    free(ep);
}

/* ---- peers ------------------------------------------------------------------------------------- */

/* Fetches p's address record from the store: "hosthash pid host tcpaddr path" ("-": none). */
static strata_status_t lookup(st_ep_t *ep, st_peer_t *p)
{
    char key[32];
    snprintf(key, sizeof key, "addr/%d", p->rank);
    void *val = NULL;
    size_t len = 0;
    ST_TRY(st_store_get(ep->store, key, &val, &len, ep->timeout_ms));
    unsigned long long hash = 0;
    char addr[64] = "", path[128] = "";
    int fields = sscanf(val, "%llx %d %63s %63s %127s", &hash, &p->pid, p->host, addr, path);
    free(val);
    if (fields < 4)
        return st_error(STRATA_ERR_REMOTE, "rank %d published a malformed address", p->rank);
    snprintf(p->addr, sizeof p->addr, "%s", strcmp(addr, "-") ? addr : "");
    snprintf(p->path, sizeof p->path, "%s", fields == 5 && strcmp(path, "-") ? path : "");
    p->host_hash = hash;
    p->resolved = true;
    return STRATA_OK;
}

static strata_status_t resolve(st_ep_t *ep, st_peer_t *p)
{
    if (p->resolved)
        return STRATA_OK;
    if (st_ep_single_host(ep)) {
        // Every rank is here and talks shared memory, which learns the peer's pid from its
        // doorbell: no store round trip (served by one thread, it was most of a 512-rank start).
        p->host_hash = ep->host_hash;
        snprintf(p->host, sizeof p->host, "%s", ep->host);
        p->resolved = true;
        return STRATA_OK;
    }
    strata_status_t rc = lookup(ep, p);
    if (rc == STRATA_ERR_PEER_FAILED && st_ep_check_store(ep) < 0)
        return ep->failed; // the job failed meanwhile: its root cause, not this lookup, is news
    if (rc < 0)
        return st_ep_fail(ep, rc, "looking up rank %d: %s", p->rank, strata_last_error());
    return STRATA_OK;
}

static void make_live(st_ep_t *ep, st_peer_t *p)
{
    if (!p->listed) {
        p->listed = true;
        ep->live[ep->nlive++] = p->rank;
    }
}


/* Picks and connects the peer's transport on first use; both sides pick the same one. */
static strata_status_t ensure_conn(st_ep_t *ep, st_peer_t *p)
{
    if (p->tp)
        return STRATA_OK;
    ST_TRY(resolve(ep, p));
    for (int i = 0; i < ST_NTP; i++) {
        if (!transports[i]->can_connect(ep, ep->tp[i], p))
            continue;
        strata_status_t rc = transports[i]->connect(ep, ep->tp[i], p);
        if (rc == STRATA_ERR_PEER_FAILED)
            return st_ep_peer_lost(ep, p->rank, "could not be reached over %s (%s)",
                                   transports[i]->name, strata_last_error());
        if (rc < 0)
            return st_ep_fail(ep, rc, "connecting to %s over %s: %s", st_ep_peer_name(ep, p->rank),
                              transports[i]->name, strata_last_error());
        p->tp = transports[i];
        make_live(ep, p);
        ST_LOG_DEBUG(ST_SUB_COMM, "connected to %s over %s", st_ep_peer_name(ep, p->rank),
                     transports[i]->name);
        return STRATA_OK;
    }
    return st_ep_fail(ep, STRATA_ERR_UNSUPPORTED, "no transport reaches %s",
                      st_ep_peer_name(ep, p->rank));
}

strata_status_t st_ep_wake(st_ep_t *ep, int rank)
{
    if (rank == ep->rank)
        return STRATA_OK;
    st_peer_t *p = &ep->peers[rank];
    ST_TRY(ensure_conn(ep, p));
    if (p->tp->wake)
        p->tp->wake(ep, ep->tp[tp_index(p->tp)], p);
    return STRATA_OK;
}

void st_ep_adopt_peer(st_ep_t *ep, st_peer_t *p, const st_transport_ops_t *ops)
{
    p->tp = ops;
    make_live(ep, p);
}

/* ---- queues and matching ----------------------------------------------------------------------- */

static void enqueue(st_msg_t **head, st_msg_t **tail, st_msg_t *m)
{
    m->next = NULL;
    if (*tail)
        (*tail)->next = m;
    else
        *head = m;
    *tail = m;
}

/* Removes and returns the first message with `tag`, or NULL. */
static st_msg_t *take(st_msg_t **head, st_msg_t **tail, uint64_t tag)
{
    st_msg_t *prev = NULL;
    for (st_msg_t *m = *head; m; prev = m, m = m->next) {
        if (m->tag != tag)
            continue;
        if (prev)
            prev->next = m->next;
        else
            *head = m->next;
        if (*tail == m)
            *tail = prev;
        m->next = NULL;
        return m;
    }
    return NULL;
}

void st_msg_complete(st_ep_t *ep, st_msg_t *m)
{
    (void)ep;
    m->state = ST_MSG_DONE;
    if (m->pending)
        (*m->pending)--;
}

void st_msg_deliver(st_ep_t *ep, st_msg_t *m, size_t off, const void *data, size_t len)
{
    char *dst = (char *)m->rbuf + off;
    // An unexpected message (even one a receive is now bound to) is filled as a plain copy and
    // handed over whole when complete.
    if (m->reduce && !m->unexpected)
        st_reduce(m->dtype, m->op, dst, (const char *)m->rsrc + off, data, len / m->esize);
    else if (len && dst != data)
        memcpy(dst, data, len);
    m->done += len;
    if (m->done < m->bytes)
        return;
    if (m->unexpected && m->bound) {
        st_msg_t *r = m->bound;
        m->bound = NULL;
        m->unexpected = false; // deliver as the bound receive would have
        r->done = 0;
        st_msg_deliver(ep, r, 0, m->rbuf, m->bytes);
        free(m->rbuf);
        free(m);
        return;
    }
    st_msg_complete(ep, m);
}

st_msg_t *st_ep_match(st_ep_t *ep, st_peer_t *p, uint64_t tag, size_t bytes, bool drain)
{
    st_msg_t *m = take(&p->recvq, &p->recvq_tail, tag);
    if (m) {
        if (bytes > m->bytes) {
            st_ep_fail(ep, STRATA_ERR_INVALID_ARG,
                       "message of %zu bytes from %s is larger than the %zu-byte receive posted for it",
                       bytes, st_ep_peer_name(ep, p->rank), m->bytes);
            return NULL;
        }
        m->bytes = bytes;
        m->state = ST_MSG_ACTIVE;
        return m;
    }
    if (!drain)
        return NULL;
    st_msg_t *u = calloc(1, sizeof *u);
    void *buf = malloc(bytes ? bytes : 1);
    if (!u || !buf) {
        free(u);
        free(buf);
        st_ep_fail(ep, STRATA_ERR_NO_MEMORY, "out of memory buffering %zu unexpected bytes from %s",
                   bytes, st_ep_peer_name(ep, p->rank));
        return NULL;
    }
    u->peer = p->rank;
    u->tag = tag;
    u->rbuf = buf;
    u->bytes = bytes;
    u->unexpected = true;
    u->state = ST_MSG_ACTIVE;
    enqueue(&p->unexq, &p->unexq_tail, u);
    return u;
}

static strata_status_t post_to_self(st_ep_t *ep, st_msg_t *m)
{
    st_peer_t *p = &ep->peers[ep->rank];
    st_msg_t *r = st_ep_match(ep, p, m->tag, m->bytes, true);
    if (!r)
        return st_ep_error(ep);
    st_msg_deliver(ep, r, 0, m->sbuf, m->bytes);
    st_msg_complete(ep, m);
    return STRATA_OK;
}

strata_status_t st_ep_post_send(st_ep_t *ep, st_msg_t *m)
{
    if (ST_UNLIKELY(ep->failed))
        return st_ep_error(ep);
    m->is_send = true;
    m->done = 0;
    m->state = ST_MSG_QUEUED;
    if (m->peer == ep->rank)
        return post_to_self(ep, m);
    st_peer_t *p = &ep->peers[m->peer];
    // A peer adopted through its incoming connection is not resolved yet; sending needs its address.
    ST_TRY(resolve(ep, p));
    ST_TRY(ensure_conn(ep, p));
    enqueue(&p->sendq, &p->sendq_tail, m);
    return STRATA_OK;
}

strata_status_t st_ep_post_recv(st_ep_t *ep, st_msg_t *m)
{
    if (ST_UNLIKELY(ep->failed))
        return st_ep_error(ep);
    m->is_send = false;
    m->unexpected = false;
    m->done = 0;
    m->state = ST_MSG_QUEUED;
    st_peer_t *p = &ep->peers[m->peer];
    st_msg_t *u = take(&p->unexq, &p->unexq_tail, m->tag);
    if (u) {
        if (u->bytes > m->bytes)
            return st_ep_fail(ep, STRATA_ERR_INVALID_ARG,
                              "message of %zu bytes from %s is larger than the %zu-byte receive",
                              u->bytes, st_ep_peer_name(ep, m->peer), m->bytes);
        m->bytes = u->bytes;
        m->state = ST_MSG_ACTIVE;
        if (u->done == u->bytes) {
            st_msg_deliver(ep, m, 0, u->rbuf, u->bytes);
            free(u->rbuf);
            free(u);
        } else {
            u->bound = m; // the transport keeps filling u; delivery happens when it completes
        }
        return STRATA_OK;
    }
    if (m->peer != ep->rank)
        ST_TRY(ensure_conn(ep, p));
    enqueue(&p->recvq, &p->recvq_tail, m);
    return STRATA_OK;
}

/* ---- progress and waiting ---------------------------------------------------------------------- */

strata_status_t st_ep_progress(st_ep_t *ep, bool drain, bool *moved)
{
    if (ST_UNLIKELY(ep->failed))
        return st_ep_error(ep);
    for (int i = 0; i < ST_NTP; i++)
        if (transports[i]->progress_global)
            ST_TRY(transports[i]->progress_global(ep, ep->tp[i], moved));
    for (int i = 0; i < ep->nlive; i++) {
        st_peer_t *p = &ep->peers[ep->live[i]];
        strata_status_t rc = p->tp->progress(ep, ep->tp[tp_index(p->tp)], p, drain, moved);
        if (rc < 0)
            return st_ep_error(ep) < 0 ? ep->failed : rc;
    }
    return STRATA_OK;
}

static bool peer_busy(const st_peer_t *p)
{
    return p->sendq || p->recvq;
}

/* Liveness checks that cost syscalls: the store's notices and the processes of shm peers we wait
 * on. Run when about to sleep, at most every few milliseconds. */
static strata_status_t check_failures(st_ep_t *ep)
{
    ST_TRY(st_ep_check_store(ep));
    for (int i = 0; i < ep->nlive; i++) {
        st_peer_t *p = &ep->peers[ep->live[i]];
        if (peer_busy(p) && p->tp->check_peer)
            ST_TRY(p->tp->check_peer(ep, ep->tp[tp_index(p->tp)], p));
    }
    return STRATA_OK;
}

/* Sleeps until a peer rings or data arrives, or timeout_ms; done(arg) is checked again after the
 * announcement, since work that completes it may come outside the transports (st_ep_wake). */
static void sleep_once(st_ep_t *ep, int timeout_ms, bool (*done)(void *arg), void *arg)
{
    bool need_poll = false, shm_busy = false;
    for (int i = 0; i < ep->nlive; i++) {
        st_peer_t *p = &ep->peers[ep->live[i]];
        if (p->tp->needs_poll)
            need_poll = true;
        else if (peer_busy(p))
            shm_busy = true;
    }
    if (!need_poll) {
        st_transport_t *shm = ep->tp[tp_index(&st_shm_ops)];
        uint32_t seq = st_shm_sleep_begin(shm);
        bool moved = false;
        // Re-check after announcing: a peer that published before the announcement did not ring.
        if (st_ep_progress(ep, true, &moved) >= 0 && !moved && !done(arg))
            st_shm_sleep_wait(shm, seq, timeout_ms);
        st_shm_sleep_end(shm);
        return;
    }
    bool moved = false;
    if (st_ep_progress(ep, true, &moved) < 0 || moved || done(arg))
        return;
    struct pollfd fds[256];
    int n = 0;
    fds[n++] = (struct pollfd){.fd = st_store_fd(ep->store), .events = POLLIN};
    for (int i = 0; i < ST_NTP; i++)
        if (transports[i]->pollfds_global)
            n += transports[i]->pollfds_global(ep, ep->tp[i], fds + n, 256 - n);
    for (int i = 0; i < ep->nlive && n < 250; i++) {
        st_peer_t *p = &ep->peers[ep->live[i]];
        if (p->tp->pollfds)
            n += p->tp->pollfds(ep, ep->tp[tp_index(p->tp)], p, fds + n, 256 - n);
    }
    // Shared-memory peers cannot wake a poll(): nap briefly when they are involved too.
    int r;
    ST_RETRY_EINTR(r, poll(fds, (nfds_t)n, shm_busy ? 1 : timeout_ms));
    (void)r;
}

#define YIELD_AFTER_NS 5000u /* a hand-off takes ~1 us: by then the peer is not running */

/* Heartbeats while a wait is long (watchdog.h): what it waits for, as what() says. */
static void beat(st_ep_t *ep, void *arg, st_wait_what_fn what, uint64_t since)
{
    if (!st_watch_due(&ep->watch, since))
        return;
    char buf[400] = "";
    int awaited = -1;
    if (what)
        what(arg, buf, sizeof buf, &awaited);
    st_watch_beat(ep, &ep->watch, buf, awaited);
}

/* The wait itself; `began` is when it began (heartbeats start one period later). */
static strata_status_t wait_loop(st_ep_t *ep, bool (*done)(void *arg), void *arg,
                                 st_wait_what_fn what, uint64_t deadline_ns, uint64_t began)
{
    uint64_t idle_since = 0;
    unsigned idle = 0;
    for (;;) {
        bool moved = false;
        // Unmatched arrivals stay in the transport (flow control, no extra copy) while we spin;
        // sleep_once() buffers them before sleeping, so nothing can deadlock behind them.
        strata_status_t rc = st_ep_progress(ep, false, &moved);
        if (rc < 0)
            return rc;
        if (done(arg))
            return STRATA_OK;
        if (moved) {
            idle = 0;
            continue;
        }
        // Reading the clock costs as much as a shared-memory handoff: look at it now and then.
        if ((idle++ & 31) != 0) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
            continue;
        }
        uint64_t now = st_now_ns();
        if (idle == 1)
            idle_since = now;
        if (now >= deadline_ns) {
            char buf[400] = "";
            int awaited = -1;
            if (what)
                what(arg, buf, sizeof buf, &awaited);
            ST_TRY(check_failures(ep));
            // Messages of the abandoned operation stay posted, so the endpoint cannot be trusted
            // any more: a timeout is fatal, as a watchdog abort is in NCCL and torch. The census
            // names the rank the job is stuck behind, for this rank and (through the store) all.
            return st_watch_verdict(ep, &ep->watch, buf, awaited);
        }
        if (now - idle_since < ep->spin_ns) {
            // The rank we wait for may be queued on this very core (the scheduler does put two
            // ranks that wake each other on one core): let it run instead of polling it out.
            if (now - idle_since >= YIELD_AFTER_NS)
                sched_yield();
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
            continue;
        }
        if (now - ep->last_check_ns > 20 * 1000000ull) {
            ep->last_check_ns = now;
            ST_TRY(check_failures(ep));
            beat(ep, arg, what, began);
        }
        uint64_t left_ms = (deadline_ns - now) / 1000000u + 1;
        sleep_once(ep, (int)ST_MIN(left_ms, 50u), done, arg);
    }
}

strata_status_t st_ep_wait(st_ep_t *ep, bool (*done)(void *arg), void *arg, st_wait_what_fn what,
                           uint64_t deadline_ns)
{
    uint64_t began = st_now_ns();
    strata_status_t rc = wait_loop(ep, done, arg, what, deadline_ns, began);
    uint64_t now = st_now_ns();
    ep->wait_ns += now - began;
    if (rc >= 0)
        st_watch_rest(ep, &ep->watch, now);
    return rc;
}
