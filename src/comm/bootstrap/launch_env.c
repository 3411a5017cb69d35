/* strata_comm_config_t from knobs and from a launcher's environment. This file is where strata
 * learns who it is: the STRATA_* knobs (timeout, transport, secret, job id, store address) are read
 * through the knob table in src/base/env.c, and the launcher variables it merely understands are
 * documented here:
 *
 *   rank / size        first pair found, in this order
 *     RANK / WORLD_SIZE                            strata launch, torchrun
 *     OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE  Open MPI mpirun
 *     PMI_RANK / PMI_SIZE                          MPICH / Intel MPI (Hydra)
 *     SLURM_PROCID / SLURM_NTASKS                  Slurm srun
 *   store address      STRATA_STORE_ADDR=host:port, else MASTER_ADDR:MASTER_PORT (port default
 *                      29500), else, for ranks from Slurm, SLURM_LAUNCH_NODE_IPADDR:MASTER_PORT
 *                      (MASTER_PORT required: there is no safe default port on a shared cluster)
 *   STRATA_STORE_EXTERNAL=1   a standalone `strata store` serves the store, not rank 0
 *
 * Slurm comes last although it is the most common scheduler: its variables leak into processes that
 * mpirun or mpiexec start inside an allocation (their daemons are Slurm tasks, so SLURM_PROCID is
 * the daemon's node index there), while the MPI launchers' own variables are always right. The
 * launch node address is only right when rank 0 runs on the node srun was started from, which holds
 * for sbatch scripts but not for srun typed on a login node; MASTER_ADDR or STRATA_STORE_ADDR is
 * the dependable choice, and the errors say so. Every value is validated: a malformed or
 * out-of-range value is STRATA_ERR_INVALID_ARG naming the variable and its value.
 *
 * Strings in the returned config point into the environment (they stay valid while that variable is
 * not changed) or, for a composed store address and a derived job id, into thread-local buffers
 * that the next strata_comm_config_from_env() on the same thread overwrites. A communicator copies
 * what it keeps. Left to others: connecting to the store (store_tcp.c) and deciding shm vs tcp per
 * peer. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/base.h"
#include "comm/bootstrap/rendezvous.h"
#include "strata/comm.h"

#define DEFAULT_MASTER_PORT 29500

typedef struct launcher {
    const char *who; /* launchers that set these variables, for messages */
    const char *rank_var;
    const char *size_var;
} launcher_t;

/* In order of precedence. */
enum { LAUNCHER_TORCHRUN, LAUNCHER_OMPI, LAUNCHER_PMI, LAUNCHER_SLURM, LAUNCHER_COUNT };
static const launcher_t launchers[LAUNCHER_COUNT] = {
    [LAUNCHER_TORCHRUN] = {"strata launch, torchrun", "RANK", "WORLD_SIZE"},
    [LAUNCHER_OMPI] = {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    [LAUNCHER_PMI] = {"MPICH", "PMI_RANK", "PMI_SIZE"},
    [LAUNCHER_SLURM] = {"Slurm", "SLURM_PROCID", "SLURM_NTASKS"},
};

static _Thread_local char store_buf[320];
static _Thread_local char job_buf[64];

/* An environment variable, NULL when unset or empty (launchers sometimes export "" for "none"). */
static const char *env(const char *name)
{
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

/* A strict decimal integer in [lo, hi]: optional sign, digits, nothing else. */
static strata_status_t parse_int(const char *var, const char *text, long long lo, long long hi,
                                 long long *out)
{
    const char *p = text;
    if (*p == '+' || *p == '-')
        p++;
    if (!isdigit((unsigned char)*p))
        return st_error(STRATA_ERR_INVALID_ARG, "%s='%s' is not an integer", var, text);
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (*end != '\0')
        return st_error(STRATA_ERR_INVALID_ARG, "%s='%s' is not an integer", var, text);
    if (errno == ERANGE || v < lo || v > hi)
        return st_error(STRATA_ERR_INVALID_ARG, "%s=%s is out of range (%lld..%lld)", var, text, lo,
                        hi);
    *out = v;
    return STRATA_OK;
}

/* STRATA_COMM_TIMEOUT_MS: a size-style number ("300000", "5K") or a negative number for "never". */
static bool parse_timeout(const char *text, long long *out)
{
    long long v = 0;
    if (text[0] == '-') {
        char *end = NULL;
        errno = 0;
        v = strtoll(text, &end, 10);
        if (errno || end == text || *end != '\0' || v >= 0)
            return false;
        *out = -1;
        return true;
    }
    if (!st_parse_size(text, &v))
        return false;
    *out = v;
    return true;
}

/* The declared default of a knob (the table in src/base/env.c), "" if not declared. */
static const char *knob_default(const char *name)
{
    for (int i = 0; i < strata_knob_count(); i++) {
        const strata_knob_t *k = strata_knob_at(i);
        if (strcmp(k->name, name) == 0)
            return k->dflt;
    }
    return "";
}

static bool parse_transport(const char *text, bool *force_tcp, strata_comm_ucx_t *ucx)
{
    static const struct {
        const char *name;
        bool force_tcp;
        strata_comm_ucx_t ucx;
    } kinds[] = {{"auto", false, STRATA_COMM_UCX_OFF},
                 {"", false, STRATA_COMM_UCX_OFF},
                 {"tcp", true, STRATA_COMM_UCX_OFF},
                 {"ucx", false, STRATA_COMM_UCX_ALL},
                 {"shm+ucx", false, STRATA_COMM_UCX_HOSTS}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcasecmp(text, kinds[i].name) == 0) {
            *force_tcp = kinds[i].force_tcp;
            *ucx = kinds[i].ucx;
            return true;
        }
    return false;
}

/* Fills `cfg` with the knob-derived fields. strict: a malformed knob is an error (from_env);
 * otherwise it is warned about and replaced by its default (config_default, which cannot fail). */
static strata_status_t read_knobs(strata_comm_config_t *cfg, bool strict)
{
    *cfg = (strata_comm_config_t){
        .rank = -1,
        .nranks = -1,
        .store_addr = NULL,
        .host_store = false,
        .secret = st_knob_str("STRATA_SECRET"),
        .job_id = NULL,
        .timeout_ms = -1,
        .force_tcp = false,
        .ucx = STRATA_COMM_UCX_OFF,
    };
    const char *addr = st_knob_str("STRATA_STORE_ADDR");
    if (*addr)
        cfg->store_addr = addr;
    const char *job = st_knob_str("STRATA_JOB_ID");
    if (*job)
        cfg->job_id = job;

    const char *t = st_knob_str("STRATA_COMM_TIMEOUT_MS");
    if (!parse_timeout(t, &cfg->timeout_ms)) {
        const char *dflt = knob_default("STRATA_COMM_TIMEOUT_MS");
        if (strict)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "STRATA_COMM_TIMEOUT_MS='%s' is not a number of milliseconds "
                            "(negative = never)",
                            t);
        ST_LOG_WARN(ST_SUB_COMM, "STRATA_COMM_TIMEOUT_MS='%s' is not a number of ms; using %s", t,
                    dflt);
        if (!parse_timeout(dflt, &cfg->timeout_ms))
            cfg->timeout_ms = -1;
    }
    const char *tr = st_knob_str("STRATA_COMM_TRANSPORT");
    if (!parse_transport(tr, &cfg->force_tcp, &cfg->ucx)) {
        if (strict)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "STRATA_COMM_TRANSPORT='%s' is not auto, tcp, ucx or shm+ucx", tr);
        ST_LOG_WARN(ST_SUB_COMM,
                    "STRATA_COMM_TRANSPORT='%s' is not auto, tcp, ucx or shm+ucx; using auto", tr);
    }
    return STRATA_OK;
}

strata_comm_config_t strata_comm_config_default(void)
{
    strata_comm_config_t cfg;
    read_knobs(&cfg, false);
    return cfg;
}

/* Rank and size from the first launcher whose variables are present; *which = its index. */
static strata_status_t read_rank(int *rank, int *nranks, int *which)
{
    for (int i = 0; i < LAUNCHER_COUNT; i++) {
        const launcher_t *l = &launchers[i];
        const char *r = env(l->rank_var), *s = env(l->size_var);
        if (!r && !s)
            continue;
        if (!r || !s)
            return st_error(STRATA_ERR_INVALID_ARG, "%s is set but %s is not (%s set both)",
                            r ? l->rank_var : l->size_var, r ? l->size_var : l->rank_var, l->who);
        long long size = 0, rk = 0;
        ST_TRY(parse_int(l->size_var, s, 1, INT_MAX, &size));
        ST_TRY(parse_int(l->rank_var, r, LLONG_MIN, LLONG_MAX, &rk));
        if (rk < 0 || rk >= size)
            return st_error(STRATA_ERR_INVALID_ARG, "%s=%s is out of range for %s=%s (0..%lld)",
                            l->rank_var, r, l->size_var, s, size - 1);
        *rank = (int)rk;
        *nranks = (int)size;
        *which = i;
        return STRATA_OK;
    }
    return st_error(STRATA_ERR_INVALID_ARG,
                    "no rank in the environment: looked for RANK/WORLD_SIZE (strata launch, "
                    "torchrun), OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (Open MPI), "
                    "PMI_RANK/PMI_SIZE (MPICH), SLURM_PROCID/SLURM_NTASKS (Slurm); start the "
                    "program with one of these launchers or fill strata_comm_config_t yourself");
}

/* Checks "host:port" (the port after the last ':'; "[v6]:port" works) and returns the port. */
static strata_status_t check_addr(const char *var, const char *addr, int *port)
{
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr)
        return st_error(STRATA_ERR_INVALID_ARG, "%s='%s' is not host:port", var, addr);
    for (const char *p = addr; *p; p++)
        if (isspace((unsigned char)*p))
            return st_error(STRATA_ERR_INVALID_ARG, "%s='%s' contains a space", var, addr);
    long long v = 0;
    if (parse_int(var, colon + 1, 1, 65535, &v) < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "%s='%s': port '%s' is not a number in 1..65535",
                        var, addr, colon + 1);
    *port = (int)v;
    return STRATA_OK;
}

/* Joins host and port into the thread's store buffer, bracketing a bare IPv6 address. */
static strata_status_t compose_addr(const char *host_var, const char *host, int port,
                                    const char **out)
{
    for (const char *p = host; *p; p++)
        if (isspace((unsigned char)*p))
            return st_error(STRATA_ERR_INVALID_ARG, "%s='%s' contains a space", host_var, host);
    bool v6 = strchr(host, ':') && host[0] != '[';
    int n = snprintf(store_buf, sizeof store_buf, v6 ? "[%s]:%d" : "%s:%d", host, port);
    if (n < 0 || (size_t)n >= sizeof store_buf)
        return st_error(STRATA_ERR_INVALID_ARG, "%s='%.40s...' is too long", host_var, host);
    *out = store_buf;
    return STRATA_OK;
}

static strata_status_t read_master_port(int *port)
{
    const char *p = env("MASTER_PORT");
    if (!p)
        return STRATA_OK;
    long long v = 0;
    ST_TRY(parse_int("MASTER_PORT", p, 1, 65535, &v));
    *port = (int)v;
    return STRATA_OK;
}

/* The first host of a Slurm host list ("n[03-05,9],m1" -> "n03"). */
static bool first_host(const char *list, char *out, size_t size)
{
    size_t n = strcspn(list, ",[");
    if (n == 0 || n >= size)
        return false;
    memcpy(out, list, n);
    out[n] = 0;
    if (list[n] != '[')
        return true;
    size_t d = strspn(list + n + 1, "0123456789"); // the first number, zero padding kept
    if (d == 0 || n + d >= size)
        return false;
    memcpy(out + n, list + n + 1, d);
    out[n + d] = 0;
    return true;
}

/* Under srun without a PMI plugin: task 0's node and a port only this job step uses. srun's block
 * and cyclic distributions put task 0 on the step's first node; an arbitrary one on the hostfile's
 * first line. The port is the step's first reserved one (SLURM_STEP_RESV_PORTS, from Slurm's
 * MpiParams=ports=) or one derived from the job and step ids in 15000..31999: below Linux's
 * ephemeral ports (32768 up), which the host's outgoing connections hold at random. */
static strata_status_t slurm_store(const char **addr, int *port)
{
    char host[256] = "";
    const char *dist = env("SLURM_DISTRIBUTION"), *hf = env("SLURM_HOSTFILE");
    FILE *f = dist && !strncmp(dist, "arbitrary", 9) && hf ? fopen(hf, "r") : NULL;
    if (f) {
        if (!fgets(host, sizeof host, f))
            host[0] = 0;
        host[strcspn(host, " \t\r\n")] = 0;
        fclose(f);
    }
    const char *nodes = env("SLURM_STEP_NODELIST") ? env("SLURM_STEP_NODELIST")
                                                   : env("SLURM_JOB_NODELIST");
    if (!host[0] && !(nodes && first_host(nodes, host, sizeof host)))
        return st_error(STRATA_ERR_INVALID_ARG, "under Slurm (SLURM_PROCID is set) but neither "
                        "SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST names the step's nodes: start "
                        "the program with srun, or set MASTER_ADDR and MASTER_PORT");
    const char *resv = env("SLURM_STEP_RESV_PORTS");
    const char *job = env("SLURM_JOB_ID"), *stepid = env("SLURM_STEP_ID");
    if (resv && isdigit((unsigned char)resv[0])) {
        *port = atoi(resv);
    } else {
        char id[160];
        snprintf(id, sizeof id, "%s.%s", job ? job : "", stepid ? stepid : "");
        *port = 15000 + (int)(st_fnv1a(id) % 17000);
    }
    return compose_addr("the Slurm step's first node", host, *port, addr);
}

/* torchrun hosts its own store on MASTER_ADDR:MASTER_PORT (its default static rendezvous): strata
 * then meets there rather than listening on the same port. */
static bool torch_agent_store(void)
{
    const char *v = env("TORCHELASTIC_USE_AGENT_STORE");
    return v && (!strcasecmp(v, "true") || !strcmp(v, "1"));
}

static strata_status_t read_store(int launcher, const char **addr, int *port)
{
    const char *sa = st_knob_str("STRATA_STORE_ADDR");
    if (*sa) {
        ST_TRY(check_addr("STRATA_STORE_ADDR", sa, port));
        *addr = sa;
        return STRATA_OK;
    }
    const char *host = env("MASTER_ADDR");
    if (host) {
        *port = DEFAULT_MASTER_PORT;
        ST_TRY(read_master_port(port));
        if (torch_agent_store()) {
            ST_TRY(compose_addr("MASTER_ADDR", host, *port, addr));
            memmove(store_buf + 6, store_buf, strlen(store_buf) + 1); // "torch:" + host:port
            memcpy(store_buf, "torch:", 6);
            return STRATA_OK;
        }
        return compose_addr("MASTER_ADDR", host, *port, addr);
    }
    if (env("MASTER_PORT"))
        return st_error(STRATA_ERR_INVALID_ARG, "MASTER_PORT is set but MASTER_ADDR is not; set "
                                                "MASTER_ADDR (or STRATA_STORE_ADDR=host:port)");
    if (env("PMIX_NAMESPACE") && env("PMIX_RANK")) { // Open MPI, srun --mpi=pmix, PRRTE
        *addr = "pmix:";
        return STRATA_OK;
    }
    if (launcher == LAUNCHER_PMI && env("PMI_FD") && !env("SLURM_STEP_ID")) { // Hydra's PMI-1
        *addr = "pmi:";
        return STRATA_OK;
    }
    if (env("SLURM_STEP_ID") && (launcher == LAUNCHER_SLURM || launcher == LAUNCHER_PMI))
        return slurm_store(addr, port);
    return st_error(STRATA_ERR_INVALID_ARG,
                    "no bootstrap store address: started by %s (%s is set), which offers no place "
                    "to meet (no MASTER_ADDR, PMIx, PMI_FD or Slurm step); set "
                    "STRATA_STORE_ADDR=host:port, or MASTER_ADDR (with MASTER_PORT, default %d)",
                    launchers[launcher].who, launchers[launcher].rank_var, DEFAULT_MASTER_PORT);
}

/* STRATA_STORE_EXTERNAL: unset/0/false/no or 1/true/yes. Read with getenv: it is set by launchers
 * and the test harness, like RANK, rather than being a tuning knob. */
static strata_status_t read_external(bool *external)
{
    const char *v = env("STRATA_STORE_EXTERNAL");
    *external = false;
    if (!v || !strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no"))
        return STRATA_OK;
    if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes")) {
        *external = true;
        return STRATA_OK;
    }
    return st_error(STRATA_ERR_INVALID_ARG, "STRATA_STORE_EXTERNAL='%s' is not 0 or 1", v);
}

/* The job id names shared-memory segments (/dev/shm/strata-<id>-...), so it must be a short plain
 * token. Derived: "p<port>-<hash of the whole address>", so that two jobs whose stores share a port
 * on different hosts do not collide on a node they share. */
static strata_status_t read_job_id(const char *store_addr, int port, const char **out)
{
    const char *j = st_knob_str("STRATA_JOB_ID");
    if (*j) {
        size_t n = strlen(j);
        bool ok = n <= 48;
        for (size_t i = 0; ok && i < n; i++)
            ok = isalnum((unsigned char)j[i]) || j[i] == '_' || j[i] == '-' || j[i] == '.';
        if (!ok)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "STRATA_JOB_ID='%s' must be 1..48 characters of [A-Za-z0-9_.-]", j);
        *out = j;
        return STRATA_OK;
    }
    snprintf(job_buf, sizeof job_buf, "p%d-%08x", port, (unsigned)st_fnv1a(store_addr));
    *out = job_buf;
    return STRATA_OK;
}

const char *strata_comm_launcher(void)
{
    for (int i = 0; i < LAUNCHER_COUNT; i++)
        if (env(launchers[i].rank_var) || env(launchers[i].size_var))
            return launchers[i].who;
    return NULL;
}

strata_status_t strata_comm_config_from_env(strata_comm_config_t *cfg)
{
    if (!cfg)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_comm_config_from_env: cfg is NULL");
    strata_comm_config_t c;
    ST_TRY(read_knobs(&c, true));
    int launcher = -1, port = 0;
    bool external;
    ST_TRY(read_rank(&c.rank, &c.nranks, &launcher));
    ST_TRY(read_external(&external));
    ST_TRY(read_store(launcher, &c.store_addr, &port));
    ST_TRY(read_job_id(c.store_addr, port, &c.job_id));
    if (st_rdzv_scheme(c.store_addr) && c.job_id == job_buf) // the store's address completes it
        snprintf(job_buf, sizeof job_buf, "%.*s", (int)strcspn(c.store_addr, ":"), c.store_addr);
    // Only the process that must serve the store gets host_store, so a communicator may act on
    // the flag without looking at the rank.
    c.host_store = c.rank == 0 && !external;
    c.store_on_rank0 = !external;
    ST_LOG_DEBUG(ST_SUB_COMM, "from env (%s): rank %d/%d store %s%s job %s",
                 launchers[launcher].who, c.rank, c.nranks, c.store_addr,
                 c.host_store ? " (hosted here)" : "", c.job_id);
    *cfg = c;
    return STRATA_OK;
}
