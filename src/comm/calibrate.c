/* Link calibration at creation: a new communicator whose ranks know their places on the fabric but
 * not its links (no cluster file with levels) measures the levels it spans before it prices any
 * collective, so automatic algorithm selection sees the real links. Per level, innermost first,
 * with every other rank waiting:
 *
 *   1. a pair (a, b) meeting at that level, from the two largest child units of one unit (so a
 *      small unit's uplink limits it least: pick_units), opens its connection, then a 20-round
 *      ping-pong (latency: the fastest) and streams a -> b of 1, 2, 4, ... chunks until one lasts
 *      half of STRATA_TOPO_CALIBRATE_MS, that size twice (bandwidth: the faster);
 *   2. an allreduce (max) hands a's numbers to every rank, exactly;
 *   3. above the host level, the k ranks of a's child unit stream at once to k partners in b's
 *      (k = the smaller unit's size; 4 x the single stream's bytes in all), the slowest time taken
 *      by an allreduce: what the uplink carries.
 *
 * Every rank then holds the same samples and fits the same levels (netmodel/link_calib.c): every
 * rank prices alike and picks the same algorithm. Measuring is the communicator's business; the
 * fit is the network model's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "comm/comm_internal.h"

enum { TAG_HDR = 0x7ca10, TAG_DATA, TAG_ACK, TAG_PING };

#define CHUNK      (512u << 10) /* bytes per message of a stream */
#define MAX_CHUNKS 64           /* a sized-by-time stream moves at most 32 MiB */
#define LAT_ROUNDS 20           /* timed ping-pong round trips by default (after 3 untimed) */
#define MAX_ASKED  (1 << 16)    /* chunks a stream of a given size may have: 32 GiB */

/* How one measurement runs: the ping-pong's round trips, and streams either of a given size or
 * sized by time. */
typedef struct plan {
    int lat_rounds;
    int64_t chunks; /* > 0: every stream has this many; 0: sized to last about target_s */
    double target_s;
} plan_t;

strata_status_t st_calib_wish(bool have_levels, int *wish)
{
    const char *v = st_knob_str("STRATA_TOPO_CALIBRATE");
    if (!strcmp(v, "off") || !strcmp(v, "0"))
        *wish = ST_CALIB_NEVER;
    else if (!strcmp(v, "auto"))
        *wish = have_levels ? ST_CALIB_NEVER : ST_CALIB_AUTO;
    else if (!strcmp(v, "on") || !strcmp(v, "1"))
        *wish = ST_CALIB_ALWAYS;
    else
        return st_error(STRATA_ERR_INVALID_ARG,
                        "STRATA_TOPO_CALIBRATE: expected auto, on or off, got '%s'", v);
    return STRATA_OK;
}

static double now_s(void)
{
    return (double)st_now_ns() * 1e-9;
}

/* Streams `chunks` messages of CHUNK bytes to dst after a header saying how many, then waits for
 * dst's acknowledgement (dst runs receive()); *secs: from the header sent to the acknowledgement.
 * chunks = 0 just opens the connection; chunks < 0 tells dst that no stream follows. */
static strata_status_t send_stream(strata_comm_t *c, int dst, char *buf, int64_t chunks,
                                   double *secs)
{
    char ack = 0;
    double t0 = now_s();
    ST_TRY(strata_send(c, &chunks, 1, STRATA_DTYPE_I64, dst, TAG_HDR));
    if (chunks < 0)
        return STRATA_OK;
    for (int64_t i = 0; i < chunks; i++)
        ST_TRY(strata_send(c, buf, CHUNK, STRATA_DTYPE_U8, dst, TAG_DATA));
    ST_TRY(strata_recv(c, &ack, 1, STRATA_DTYPE_U8, dst, TAG_ACK));
    *secs = now_s() - t0;
    return STRATA_OK;
}

/* The other end of send_stream: takes one stream from src; *chunks < 0 when src said that no
 * stream follows. */
static strata_status_t receive(strata_comm_t *c, int src, char *buf, int64_t *chunks)
{
    char ack = 0;
    ST_TRY(strata_recv(c, chunks, 1, STRATA_DTYPE_I64, src, TAG_HDR));
    if (*chunks < 0)
        return STRATA_OK;
    if (*chunks > MAX_ASKED)
        return st_error(STRATA_ERR_INTERNAL, "calibration: rank %d announced %lld chunks", src,
                        (long long)*chunks);
    for (int64_t i = 0; i < *chunks; i++)
        ST_TRY(strata_recv(c, buf, CHUNK, STRATA_DTYPE_U8, src, TAG_DATA));
    return strata_send(c, &ack, 1, STRATA_DTYPE_U8, src, TAG_ACK);
}

/* One-way latency between a and b (on a): half the fastest of `rounds` round trips. The link's
 * latency, not a busy host's: on a loaded machine most round trips wait for a core (the median
 * was 2 ms where the link takes 20 us), and collectives that keep their ranks busy wait far less
 * than a ping-pong that puts them to sleep at every message. */
static strata_status_t pingpong(strata_comm_t *c, int a, int b, int rounds, double *one_way)
{
    const int me = strata_comm_rank(c), peer = me == a ? b : a;
    char x[8] = {0};
    double best = 0;
    for (int i = -3; i < rounds; i++) {
        double t0 = now_s();
        if (me == a) {
            ST_TRY(strata_send(c, x, sizeof x, STRATA_DTYPE_U8, peer, TAG_PING));
            ST_TRY(strata_recv(c, x, sizeof x, STRATA_DTYPE_U8, peer, TAG_PING));
        } else {
            ST_TRY(strata_recv(c, x, sizeof x, STRATA_DTYPE_U8, peer, TAG_PING));
            ST_TRY(strata_send(c, x, sizeof x, STRATA_DTYPE_U8, peer, TAG_PING));
        }
        double rt = now_s() - t0;
        if (i == 0 || (i > 0 && rt < best))
            best = rt;
    }
    *one_way = best / 2;
    return STRATA_OK;
}

/* The units measured at level l: U and V, two children (level l-1 units; single ranks at level 0)
 * of one level-l unit: of each unit its two largest children, and of those pairs the one with the
 * largest smaller child, then the largest larger one, then the lowest ranks (children and units
 * are numbered in order of their lowest rank, and only a strictly better pair replaces one). So a
 * small unit's uplink limits the measured pair as little as the fabric allows. Fills their ranks,
 * ascending, into u and v (n entries each); *nu = 0 when no two ranks meet at level l. */
static strata_status_t pick_units(const strata_fabric_t *f, int l, int *u, int *nu, int *v, int *nv)
{
    const int n = f->nranks, nchild = l ? f->nunits[l - 1] : n, npar = f->nunits[l];
    *nu = *nv = 0;
    int *size = calloc((size_t)nchild + 2 * (size_t)npar, sizeof *size);
    if (!size)
        return st_error(STRATA_ERR_NO_MEMORY, "calibration: out of memory");
    int *top = size + nchild; // per unit: its largest child, then its second largest (-1: none)
    for (int p = 0; p < 2 * npar; p++)
        top[p] = -1;
    for (int r = 0; r < n; r++)
        size[l ? strata_fabric_unit(f, l - 1, r) : r]++;
    for (int r = 0; r < n; r++) { // each child once, at its lowest rank
        int x = l ? strata_fabric_unit(f, l - 1, r) : r, *t = &top[2 * strata_fabric_unit(f, l, r)];
        if (x == t[0] || x == t[1])
            continue;
        if (t[0] < 0 || size[x] > size[t[0]]) {
            t[1] = t[0];
            t[0] = x;
        } else if (t[1] < 0 || size[x] > size[t[1]]) {
            t[1] = x;
        }
    }
    int bu = -1, bv = -1;
    for (int p = 0; p < npar; p++) {
        const int *t = &top[2 * p];
        if (t[1] < 0)
            continue;
        if (bu < 0 || size[t[1]] > size[bv] || (size[t[1]] == size[bv] && size[t[0]] > size[bu])) {
            bu = t[0];
            bv = t[1];
        }
    }
    if (bu > bv) { // a is the lower-numbered child's first rank
        int x = bu;
        bu = bv;
        bv = x;
    }
    for (int r = 0; bu >= 0 && r < n; r++) {
        int x = l ? strata_fabric_unit(f, l - 1, r) : r;
        if (x == bu)
            u[(*nu)++] = r;
        else if (x == bv)
            v[(*nv)++] = r;
    }
    free(size);
    return STRATA_OK;
}

/* On a: the bandwidth stream to b. Sized by time: streams of 1, 2, 4, ... chunks until one lasts
 * half the target (shorter ones mostly measure the switches' burst buffers and TCP's slow start).
 * That size then runs once more and the faster of the two counts: what slows a stream on a shared
 * machine (a descheduled rank, another job's burst) only ever slows it. */
static strata_status_t bandwidth(strata_comm_t *c, int b, char *buf, const plan_t *p, double *bytes,
                                 double *secs)
{
    int64_t chunks = p->chunks ? p->chunks : 1;
    for (;; chunks *= 2) {
        ST_TRY(send_stream(c, b, buf, chunks, secs));
        if (p->chunks || *secs >= p->target_s / 2 || chunks * 2 > MAX_CHUNKS)
            break;
    }
    double again;
    ST_TRY(send_stream(c, b, buf, chunks, &again));
    *secs = again < *secs ? again : *secs;
    *bytes = (double)chunks * CHUNK;
    return send_stream(c, b, buf, -1, &again);
}

/* Measures level l into *s (every rank gets the same sample). */
static strata_status_t measure_level(strata_comm_t *c, const strata_fabric_t *f, int l, char *buf,
                                     int *u, int *v, const plan_t *p, strata_link_sample_t *s)
{
    int nu, nv;
    memset(s, 0, sizeof *s);
    ST_TRY(pick_units(f, l, u, &nu, v, &nv));
    if (nu == 0)
        return STRATA_OK;
    const int me = strata_comm_rank(c), a = u[0], b = v[0];
    double res[3] = {0, 0, 0}, secs; // latency, bytes, seconds: measured on a, 0 elsewhere
    int64_t got = 0;
    // No barrier first: the collective that ended the previous step (the placement's allgather at
    // creation, strata_comm_measure_links' barrier, the previous level's allreduce) returned only
    // once every rank had entered it.
    if (me == a || me == b) // its untimed rounds open the connection
        ST_TRY(pingpong(c, a, b, p->lat_rounds, me == a ? &res[0] : &secs));
    if (me == a)
        ST_TRY(bandwidth(c, b, buf, p, &res[1], &res[2]));
    while (me == b && got >= 0)
        ST_TRY(receive(c, a, buf, &got));
    ST_TRY(strata_allreduce(c, res, res, 3, STRATA_DTYPE_F64, STRATA_OP_MAX)); // a's, exactly
    *s = (strata_link_sample_t){
        .measured = true, .a = a, .b = b, .latency_s = res[0], .bytes = res[1], .secs = res[2]};
    const int k = ST_MIN(nu, nv);
    if (l == 0 || k < 2)
        return STRATA_OK;
    // Every rank of a's unit streams to a partner in b's at once (4 x the single stream's bytes in
    // all when sized by time, so that a switch's burst buffer hardly counts even where the uplink
    // holds them all to one stream's rate; as many each when given): connections first, then the
    // timed streams together.
    int64_t chunks = p->chunks ? p->chunks : (int64_t)ceil(4 * res[1] / CHUNK / k);
    int src = -1, dst = -1;
    for (int i = 0; i < k; i++)
        if (u[i] == me || v[i] == me) {
            src = u[i];
            dst = v[i];
        }
    secs = 0;
    for (int round = 0; round < 2; round++) { // an empty stream, then the timed one
        if (round)
            ST_TRY(strata_barrier(c));
        if (me == src)
            ST_TRY(send_stream(c, dst, buf, round ? chunks : 0, &secs));
        else if (me == dst)
            ST_TRY(receive(c, src, buf, &got));
    }
    ST_TRY(strata_allreduce(c, &secs, &secs, 1, STRATA_DTYPE_F64, STRATA_OP_MAX));
    s->pairs = k;
    s->pair_bytes = (double)chunks * CHUNK;
    s->pair_secs = secs;
    return STRATA_OK;
}

/* Measures every level of f that c's ranks span into out->sample. */
static strata_status_t measure(strata_comm_t *c, const strata_fabric_t *f, const plan_t *p,
                               strata_link_calib_t *out)
{
    const double t0 = now_s();
    memset(out, 0, sizeof *out);
    out->nlevels = f->topo.nlevels;
    char *buf = malloc(CHUNK);
    int *u = malloc((size_t)f->nranks * 2 * sizeof *u);
    strata_status_t rc =
        buf && u ? STRATA_OK : st_error(STRATA_ERR_NO_MEMORY, "calibration: out of memory");
    if (rc == STRATA_OK)
        memset(buf, 0x5a, CHUNK);
    for (int l = 0; rc == STRATA_OK && l < f->topo.nlevels; l++) {
        double tl = now_s();
        rc = measure_level(c, f, l, buf, u, u + f->nranks, p, &out->sample[l]);
        ST_LOG_DEBUG(ST_SUB_TOPO, "calibration of level %s: %.3f s", f->topo.level[l].name,
                     now_s() - tl);
    }
    free(buf);
    free(u);
    out->seconds = now_s() - t0;
    return rc;
}

/* Fits out->level from out->sample (f's levels where nothing was measured); out->done on success.
 * Every rank holds the same samples, so every rank succeeds or fails alike. */
static strata_status_t fit(const strata_fabric_t *f, strata_link_calib_t *out)
{
    strata_topo_t fitted = f->topo;
    strata_status_t rc = strata_link_calib_fit(&fitted, out->sample);
    memcpy(out->level, fitted.level, sizeof out->level);
    out->done = rc == STRATA_OK;
    return rc;
}

strata_status_t st_comm_calibrate(strata_comm_t *c, strata_fabric_t *f, strata_link_calib_t *out)
{
    const plan_t p = {.lat_rounds = LAT_ROUNDS,
                      .target_s = (double)st_knob_int("STRATA_TOPO_CALIBRATE_MS", 50) / 1e3};
    ST_TRY(measure(c, f, &p, out));
    if (fit(f, out) < 0) { // measured, but nothing physical came back: keep the links alike
        ST_LOG_WARN(ST_SUB_TOPO, "keeping the fabric's links unmeasured: %s", strata_last_error());
        return STRATA_OK;
    }
    memcpy(f->topo.level, out->level, sizeof f->topo.level);
    ST_LOG_INFO(ST_SUB_TOPO, "calibrated the fabric's links in %.3f s", out->seconds);
    return STRATA_OK;
}

strata_status_t strata_comm_measure_links(strata_comm_t *comm, int lat_rounds, size_t stream_bytes,
                                          strata_link_calib_t *out)
{
    if (!comm || !out || lat_rounds < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_comm_measure_links: expected a "
                                                "communicator, a result and lat_rounds >= 0");
    int64_t chunks = (int64_t)((stream_bytes + CHUNK - 1) / CHUNK);
    if (chunks > MAX_ASKED)
        return st_error(STRATA_ERR_INVALID_ARG,
                        "strata_comm_measure_links: a stream of %zu bytes is over %lld MiB",
                        stream_bytes, (long long)MAX_ASKED * CHUNK >> 20);
    const plan_t p = {.lat_rounds = lat_rounds ? lat_rounds : LAT_ROUNDS,
                      .chunks = chunks,
                      .target_s = (double)st_knob_int("STRATA_TOPO_CALIBRATE_MS", 50) / 1e3};
    ST_TRY(strata_barrier(comm)); // the caller's traffic is over everywhere
    ST_TRY(measure(comm, &comm->topo->fabric, &p, out));
    return fit(&comm->topo->fabric, out);
}

const strata_link_calib_t *strata_comm_calibration(const strata_comm_t *comm)
{
    return comm ? &comm->calib : NULL;
}
