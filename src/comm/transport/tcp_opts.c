/* Parsing of the STRATA_TCP_* knobs and the striping rule (tcp_opts.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "comm/transport/tcp_opts.h"

/* Parses a whole decimal integer in [lo, hi]. */
static bool parse_int(const char *s, long long lo, long long hi, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static strata_status_t read_conns(st_tcp_opts_t *o)
{
    const char *v = st_knob_str("STRATA_TCP_CONNS");
    long long n;
    if (!parse_int(v, 1, ST_TCP_CONNS_MAX, &n))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "STRATA_TCP_CONNS='%s': expected a number of connections from 1 to %d", v,
                        ST_TCP_CONNS_MAX);
    o->conns = (int)n;
    return STRATA_OK;
}

static strata_status_t read_size(const char *name, long long lo, long long hi, long long *out)
{
    const char *v = st_knob_str(name);
    if (!*v) {
        *out = 0;
        return STRATA_OK;
    }
    if (!st_parse_size(v, out) || *out < lo || *out > hi)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "%s='%s': expected a size in bytes from %lld to %lld (K/M/G allowed)", name,
                        v, lo, hi);
    return STRATA_OK;
}

static strata_status_t read_user_timeout(long long comm_timeout_ms, st_tcp_opts_t *o)
{
    const char *v = st_knob_str("STRATA_TCP_USER_TIMEOUT_MS");
    long long ms;
    if (!strcmp(v, "auto")) {
        // Unacknowledged data for the whole timeout: any wait on it would have failed by now.
        o->user_timeout_ms = comm_timeout_ms > 0 ? (int)ST_MIN(comm_timeout_ms, 1ll << 30) : 0;
        return STRATA_OK;
    }
    if (!parse_int(v, 0, 1 << 30, &ms))
        return st_error(STRATA_ERR_INVALID_ARG,
                        "STRATA_TCP_USER_TIMEOUT_MS='%s': expected auto, or milliseconds from 0 "
                        "(the kernel's retransmit limit) to %d",
                        v, 1 << 30);
    o->user_timeout_ms = (int)ms;
    return STRATA_OK;
}

static strata_status_t read_keepalive(long long comm_timeout_ms, st_tcp_opts_t *o)
{
    const char *v = st_knob_str("STRATA_TCP_KEEPALIVE");
    if (!strcmp(v, "off")) {
        o->keepidle_s = o->keepintvl_s = o->keepcnt = 0;
        return STRATA_OK;
    }
    if (!strcmp(v, "auto")) {
        // Silent for T/4, then 3 probes T/12 apart: declared dead at T/2, before waits time out.
        // Without a timeout: a minute of silence, then 6 probes 10 s apart.
        long long t_s = comm_timeout_ms > 0 ? comm_timeout_ms / 1000 : 0;
        o->keepidle_s = t_s > 0 ? (int)ST_MAX(ST_MIN(t_s / 4, 32767ll), 1ll) : 60;
        o->keepintvl_s = t_s > 0 ? (int)ST_MAX(ST_MIN(t_s / 12, 32767ll), 1ll) : 10;
        o->keepcnt = t_s > 0 ? 3 : 6;
        return STRATA_OK;
    }
    // IDLE,INTVL,COUNT: the kernel takes idle and interval up to 32767 s and at most 127 probes.
    char buf[64], *save = NULL;
    long long f[3];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", v);
    size_t len = strlen(v);
    bool ok = len > 0 && len < sizeof buf && !strstr(v, ",,") && v[0] != ',' && v[len - 1] != ',';
    for (char *tok = strtok_r(buf, ",", &save); ok && tok; tok = strtok_r(NULL, ",", &save))
        if ((ok = n < 3 && parse_int(tok, 1, n == 2 ? 127 : 32767, &f[n])))
            n++;
    if (!ok || n != 3)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "STRATA_TCP_KEEPALIVE='%s': expected auto, off, or IDLE_S,INTERVAL_S,COUNT "
                        "(seconds 1..32767, probes 1..127), e.g. 60,10,3",
                        v);
    o->keepidle_s = (int)f[0];
    o->keepintvl_s = (int)f[1];
    o->keepcnt = (int)f[2];
    return STRATA_OK;
}

strata_status_t st_tcp_opts_read(long long comm_timeout_ms, st_tcp_opts_t *out)
{
    st_tcp_opts_t o = {0};
    long long v;
    ST_TRY(read_conns(&o));
    ST_TRY(read_size("STRATA_TCP_STRIPE_MIN", 64, 1ll << 40, &v));
    o.stripe_min = (size_t)v;
    ST_TRY(read_size("STRATA_TCP_BUF_BYTES", 4096, 1 << 30, &v));
    o.bufsize = (int)v;
    ST_TRY(read_user_timeout(comm_timeout_ms, &o));
    ST_TRY(read_keepalive(comm_timeout_ms, &o));
    *out = o;
    return STRATA_OK;
}

int st_tcp_stripes(size_t bytes, int conns, size_t stripe_min, size_t *slice)
{
    size_t k = stripe_min ? bytes / stripe_min : 1;
    if (k < 2 || conns < 2) {
        *slice = bytes;
        return 1;
    }
    k = ST_MIN(k, (size_t)conns);
    // Round slices up to 64 bytes, then drop the slices that rounding left empty.
    *slice = ((bytes + k - 1) / k + 63) & ~(size_t)63;
    return (int)((bytes + *slice - 1) / *slice);
}
