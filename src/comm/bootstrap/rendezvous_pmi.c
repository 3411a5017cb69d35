/* A PMI-1 client over PMI_FD (MPICH's Hydra and Intel MPI's mpiexec), enough to meet there. The
 * wire is text, one command per line: init, get_my_kvsname, put (rank 0), barrier_in/out (every
 * rank), get (the others), finalize, each answered with rc=0 on success. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "comm/bootstrap/rendezvous.h"

/* Sends one command line and reads the answer line into ans. */
static strata_status_t call(int fd, const char *cmd, char *ans, size_t size)
{
    size_t n = strlen(cmd);
    for (size_t at = 0; at < n;) {
        ssize_t w = write(fd, cmd + at, n - at);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return st_error_errno(STRATA_ERR_PEER_FAILED, errno, "rendezvous: PMI: cannot send "
                                  "'%.*s' on PMI_FD %d", (int)n - 1, cmd, fd);
        at += (size_t)w;
    }
    size_t got = 0;
    while (got + 1 < size) { // byte by byte: the answer ends at its newline, nothing is read past it
        ssize_t r = read(fd, ans + got, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return st_error(STRATA_ERR_PEER_FAILED, "rendezvous: PMI: no answer to '%.*s' on "
                            "PMI_FD %d (the launcher went away)", (int)n - 1, cmd, fd);
        if (ans[got] == '\n')
            break;
        got++;
    }
    ans[got] = 0;
    const char *rc = strstr(ans, "rc=");
    if (rc && atoi(rc + 3) != 0)
        return st_error(STRATA_ERR_REMOTE, "rendezvous: PMI refused '%.*s': %s", (int)n - 1, cmd,
                        ans);
    return STRATA_OK;
}

/* The value of `name=` in an answer line, into out. */
static bool field(const char *ans, const char *name, char *out, size_t size)
{
    char pat[32];
    snprintf(pat, sizeof pat, "%s=", name);
    const char *p = strstr(ans, pat);
    if (!p)
        return false;
    p += strlen(pat);
    size_t n = strcspn(p, " \n");
    if (n >= size)
        return false;
    memcpy(out, p, n);
    out[n] = 0;
    return true;
}

strata_status_t st_rdzv_pmi(bool set, const char *key, char *val, size_t size)
{
    const char *fdv = getenv("PMI_FD");
    char *end = NULL;
    long fd = fdv ? strtol(fdv, &end, 10) : -1;
    if (!fdv || *end || fd < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "rendezvous: PMI_FD='%s' is not a descriptor",
                        fdv ? fdv : "");
    char ans[1280], kvs[256], cmd[1280];
    ST_TRY(call((int)fd, "cmd=init pmi_version=1 pmi_subversion=1\n", ans, sizeof ans));
    ST_TRY(call((int)fd, "cmd=get_my_kvsname\n", ans, sizeof ans));
    if (!field(ans, "kvsname", kvs, sizeof kvs))
        return st_error(STRATA_ERR_REMOTE, "rendezvous: PMI: no kvsname in '%s'", ans);
    if (set) {
        snprintf(cmd, sizeof cmd, "cmd=put kvsname=%s key=%s value=%s\n", kvs, key, val);
        ST_TRY(call((int)fd, cmd, ans, sizeof ans));
    }
    ST_TRY(call((int)fd, "cmd=barrier_in\n", ans, sizeof ans)); // every rank: the put is visible
    if (!set) {
        snprintf(cmd, sizeof cmd, "cmd=get kvsname=%s key=%s\n", kvs, key);
        ST_TRY(call((int)fd, cmd, ans, sizeof ans));
        if (!field(ans, "value", val, size))
            return st_error(STRATA_ERR_REMOTE, "rendezvous: PMI: no value for %s in '%s'", key,
                            ans);
    }
    // Done with PMI: finalize, so the launcher counts a later exit as a normal one.
    return call((int)fd, "cmd=finalize\n", ans, sizeof ans);
}
