/* The one table of STRATA_* knobs: name, default, one-line doc. Readers look values up here so an
 * undeclared knob cannot creep in unnoticed; `strata env` prints the table. Launcher variables that
 * strata merely understands (RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, ...) are documented in
 * src/comm/bootstrap/launch_env.c, not here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static const strata_knob_t knobs[] = {
    {"STRATA_LOG", "warn", "log level: error, warn, info, debug, trace"},
    {"STRATA_LOG_SUBSYS", "all", "comma list of subsystems to log: base,comm,store,net,topo,plan,train,tool"},
    {"STRATA_LOG_FILE", "", "write logs to this file instead of stderr; %h = host, %p = pid"},
    {"STRATA_COMM_TIMEOUT_MS", "300000", "timeout of every blocking call and wait, in ms"},
    {"STRATA_DIAG_DIR", "", "directory for failure dumps (rank<r>.json: error, culprit, flight recorder), read by `strata diagnose`"},
    {"STRATA_COMM_ALGO", "", "force algorithms, e.g. allreduce:ring,bcast:binomial (see `strata algos`)"},
    {"STRATA_COMM_TRANSPORT", "auto", "auto (shm on one host, tcp between hosts), tcp (tcp everywhere), ucx (UCX everywhere) or shm+ucx (shm on one host, UCX between hosts); UCX only in builds with libucx; set alike on every rank"},
    {"STRATA_COMM_SPIN_US", "auto", "how long a waiting rank polls before it sleeps, in microseconds (auto: 1000, or 50 when the host's ranks outnumber its cores)"},
    {"STRATA_SHM_SLOT_BYTES", "256K", "payload bytes per shared-memory ring slot"},
    {"STRATA_SHM_SLOTS", "8", "slots per directed shared-memory ring"},
    {"STRATA_SHM_ADOPT", "1M", "buffers from malloc of at least this many bytes are adopted (their pages remapped onto shareable memory, once) so the direct algorithms map them; 0 turns adoption off; set alike on every rank"},
    {"STRATA_SHM_MAILBOX", "1K", "blocking allreduces of at most this many bytes among 2-8 ranks of one host go through per-rank shared slots (the latency path) instead of messages; 0 turns it off; set alike on every rank"},
    {"STRATA_SHM_CMA", "1", "0 turns off cross-memory attach and with it the direct algorithms (ranks of one host then exchange only messages); set alike on every rank"},
    {"STRATA_TCP_IFADDR", "", "IPv4 address to listen on and publish (default: the one that reaches the store)"},
    {"STRATA_TCP_BUF_BYTES", "", "socket send/receive buffer size (default: kernel autotuning)"},
    {"STRATA_TCP_HELLO_MS", "20000", "a connection to a rank's tcp port that has not sent its 24-byte hello within this is closed (long, so a peer's hello delayed by loss is not)"},
    {"STRATA_TCP_CONNS", "4", "tcp connections per peer and direction (1-16); messages of at least 2 x STRATA_TCP_STRIPE_MIN are striped over them, so ECMP spreads one transfer over several paths"},
    {"STRATA_TCP_STRIPE_MIN", "256K", "smallest slice of a striped tcp message; smaller messages stay whole on one connection"},
    {"STRATA_TCP_USER_TIMEOUT_MS", "auto", "TCP_USER_TIMEOUT: a connection with data unacknowledged this long fails its peer (auto: the communicator timeout; 0: the kernel's retransmit limit, ~15 min)"},
    {"STRATA_TCP_KEEPALIVE", "auto", "keepalive IDLE_S,INTERVAL_S,COUNT, off, or auto (idle T/4, interval T/12, 3 probes for communicator timeout T: a silent host fails at T/2)"},
    {"STRATA_UCX_FRAG_BYTES", "4M", "the UCX transport sends a message in fragments of this size (each eager or rendezvous as UCX decides; a reducing receive reduces fragment by fragment)"},
    {"STRATA_STORE_ADDR", "", "host:port of the bootstrap store (default MASTER_ADDR:MASTER_PORT)"},
    {"STRATA_SECRET", "", "job secret a store client must present (strata launch sets one)"},
    {"STRATA_STORE_EXTERNAL", "0", "1: a standalone `strata store` serves the job, rank 0 does not host it"},
    {"STRATA_JOB_ID", "", "job identifier used to name shared-memory segments (default from the store address)"},
    {"STRATA_POOL_NODES", "", "pool nodes (comma list of ADDR:PORT of `strata pool serve`) for the pool allreduce algorithm and `strata train --optimizer-in-pool`"},
    {"STRATA_POOL_MBIT", "", "a pool node's link in Mbit/s, for the price of the pool allreduce (default: a rank's own link at the outermost level its communicator crosses)"},
    {"STRATA_POOL_MULTICAST", "", "multicast ADDR:PORT (224.0.0.0/4) from which each communicator's pool allreduce takes its group (the address plus the communicator's context in the low 12 bits): the result crosses each link once; unset: one unicast copy per rank"},
    {"STRATA_POOL_SECRET", "", "the secret the pool nodes hold (`strata pool serve` reads it from STRATA_SECRET by default), for the pool allreduce and --optimizer-in-pool; unset: STRATA_SECRET (which `strata launch` makes anew for every job)"},
    {"STRATA_POOL_TIMEOUT_MS", "10000", "a pool client call fails after this long without an answer, naming the silent node (strata_pool_open's timeout < 0 uses it)"},
    {"STRATA_POOL_RETRY_MS", "20", "the least retransmission timeout of a pool client, in ms, and the timeout before it has measured a round trip (retransmissions are harmless: ADD, WRITE and ADAMW apply once)"},
    {"STRATA_POOL_WINDOW", "64", "the most packets a pool client keeps in flight per operation (1-256); its congestion window stays below it"},
    {"STRATA_POOL_MTU", "", "cap on the path MTU the pool discovers (e.g. 1500 to test small frames; default: what IP_MTU reports, the block size is at most 8192 bytes)"},
    {"STRATA_POOL_ZERO_THRESHOLD", "0", "pool ADD/REDUCE blocks whose every |x| is at most this travel as short ZERO records (0: exact zeros only; above 0 it is lossy)"},
    {"STRATA_TOPO_PATH", "", "this rank's place in the fabric, outermost first: zone1/rack3/host7"},
    {"STRATA_TOPO_FILE", "", "cluster file: the fabric's levels and links, and hosts' paths (docs/topology.md)"},
    {"STRATA_TOPO_CALIBRATE", "auto", "measure the fabric's links at communicator creation: auto (when no cluster file gives them and the ranks span several hosts), on (always, over a cluster file's too), off; set alike on every rank"},
    {"STRATA_TOPO_CALIBRATE_MS", "50", "how long each bandwidth test of that calibration aims to last, in ms (longer: more accurate, slower creation)"},
    {"STRATA_HOST_ID", "", "override the host identity used to decide shared memory vs tcp"},
    {"STRATA_GEMM", "auto", "the model's float32 matrix products: auto (oneDNN wherever its engine runs, else OpenBLAS), onednn, openblas"},
    {"STRATA_PROGRESS", "auto", "strata train's progress: auto (redrawn in place when stderr is a terminal, else a complete line every --progress-every seconds), bar, lines; strata launch sets bar for its ranks when its own stderr is a terminal"},
    {"STRATA_ZERO_BUCKET", "4M", "ZeRO gradient bucket size in floats (reduced while the backward runs)"},
};

int strata_knob_count(void)
{
    return (int)(sizeof knobs / sizeof knobs[0]);
}

const strata_knob_t *strata_knob_at(int i)
{
    if (i < 0 || i >= strata_knob_count())
        return NULL;
    return &knobs[i];
}

static const strata_knob_t *find(const char *name)
{
    for (int i = 0; i < strata_knob_count(); i++)
        if (strcmp(knobs[i].name, name) == 0)
            return &knobs[i];
    return NULL;
}

const char *strata_knob_value(const char *name)
{
    const strata_knob_t *k = find(name);
    if (!k)
        return NULL;
    const char *v = getenv(name);
    return (v && *v) ? v : k->dflt;
}

const char *st_knob_str(const char *name)
{
    const char *v = strata_knob_value(name);
    return v ? v : "";
}

bool st_parse_size(const char *text, long long *out)
{
    if (!text || !*text)
        return false;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || v < 0)
        return false;
    long long mul = 1;
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': mul = 1LL << 10; end++; break;
    case 'm': case 'M': mul = 1LL << 20; end++; break;
    case 'g': case 'G': mul = 1LL << 30; end++; break;
    default: return false;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0' || v > (1LL << 62) / mul)
        return false;
    *out = v * mul;
    return true;
}

long long st_knob_int(const char *name, long long fallback)
{
    const strata_knob_t *k = find(name);
    if (!k)
        return fallback;
    const char *v = strata_knob_value(name);
    long long out;
    if (st_parse_size(v, &out))
        return out;
    if (st_parse_size(k->dflt, &out)) {
        ST_LOG_WARN(ST_SUB_BASE, "%s=%s is not a number; using the default %s", name, v, k->dflt);
        return out;
    }
    return fallback;
}

bool strata_parse_size(const char *text, long long *out)
{
    return st_parse_size(text, out);
}
