/* UCX transport: strata's messages over UCP active messages, so that on an InfiniBand or RoCE
 * cluster they ride verbs/RDMA (and elsewhere UCX's own tcp or shared memory) with no code of
 * strata's for the hardware. Chosen only when asked (STRATA_COMM_TRANSPORT=ucx or shm+ucx, see
 * docs/comm.md); compiled only when libucx was found at build time.
 *
 * One UCP worker per process; its address is published in the store (hex, key "ucx/<rank>") and a
 * peer's is looked up when this rank first talks to it. A message is sent as fragments of at most
 * STRATA_UCX_FRAG_BYTES, each one active message whose header carries (tag, size, offset, sender,
 * sequence). UCX picks eager or rendezvous per fragment: a rendezvous fragment is fetched straight
 * into the receive buffer (zero-copy, RDMA where the fabric has it), or into a staging buffer when
 * the receive reduces, so a large reduction overlaps the transfer fragment by fragment.
 *
 * Arrivals are queued per peer and handed to the endpoint's matcher in sequence order, whatever
 * order UCX's lanes delivered them in; an arrival nobody has asked for yet stays in UCX's hands
 * (its eager buffer or rendezvous descriptor) until a receive is posted or the endpoint drains.
 * Sending keeps at most INFLIGHT fragments per peer in UCX. Progress never blocks; the endpoint
 * sleeps in poll() on the worker's event fd (armed first). A peer's death is reported by UCX's
 * error handler (UCP_ERR_HANDLING_MODE_PEER) or, on this host, by its pid disappearing: either is
 * STRATA_ERR_PEER_FAILED naming it. Timeouts are the endpoint's, as for every transport.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <ucp/api/ucp.h>
#include <ucs/config/global_opts.h>

#include "base/base.h"
#include "comm/transport/transport.h"

#define AM_ID         0x5354u /* "ST" */
#define INFLIGHT      16      /* fragments per peer handed to UCX and not yet completed */
#define PROGRESS_MAX  64      /* worker progress calls per pass (each may complete many events) */

typedef struct am_hdr {
    uint64_t tag;
    uint64_t total; /* the message's bytes */
    uint64_t off;   /* this fragment's offset in it */
    uint32_t seq;   /* fragment sequence of this sender towards this receiver */
    int32_t src;    /* sender's world rank */
} am_hdr_t;

/* A fragment that arrived and waits for its turn and its receive. */
typedef struct arrival {
    struct arrival *next;
    am_hdr_t hdr;
    void *data; /* eager: the bytes; rendezvous: UCX's descriptor */
    size_t len;
    bool rndv;
    bool owned; /* data is our malloc'd copy (UCX could not lend it) */
} arrival_t;

typedef struct ucx_conn ucx_conn_t;

/* A fragment handed to UCX to send; lives in its connection's ring until completed. */
typedef struct send_op {
    am_hdr_t hdr; /* UCX may read it until the send completes */
    st_msg_t *m;
    bool last;    /* the message's last fragment */
    bool done;
    ucx_conn_t *c;
} send_op_t;

/* A rendezvous fragment being fetched; listed in its transport until completed. */
typedef struct recv_op {
    struct recv_op *prev, *next;
    struct st_transport *t;
    ucx_conn_t *c;
    st_msg_t *m;
    size_t off, len;
    char *stage; /* the receive reduces: fetched here, then reduced into place */
} recv_op_t;

struct ucx_conn {
    ucx_conn_t *next_orphan; /* disconnected while UCX still held its operations */
    struct st_transport *t;
    int rank;
    ucp_ep_h ep;           /* NULL until created (adopted peers create it on their first pass) */
    ucs_status_t err;      /* first failure UCX reported on this peer */
    send_op_t ring[INFLIGHT];
    unsigned ring_head, ring_count;
    st_msg_t *tx_msg;      /* message being fragmented (on sendq), NULL: the next unissued one */
    size_t tx_off;
    unsigned tx_issued;    /* messages of sendq fully issued, not yet completed */
    uint32_t tx_seq, rx_seq;
    arrival_t *arrivals, *arrivals_tail; /* sorted by seq */
    st_msg_t *rx_cur;      /* the message whose later fragments are arriving */
    int rx_pending;        /* rendezvous fetches in flight */
};

struct st_transport {
    st_ep_t *ep;
    ucp_context_h ctx;
    ucp_worker_h worker;
    int efd;               /* the worker's event fd */
    int kick;              /* an eventfd made readable when sleeping must not wait */
    bool all;              /* every peer (else: peers on other hosts) */
    bool closing;          /* completions after this only free memory */
    bool forced;           /* an endpoint was closed by force: progress no more */
    size_t frag;
    bool events;           /* a callback queued or completed work since last looked */
    bool kicked;           /* the kick fd was made readable */
    recv_op_t *fetches;    /* in flight */
    ucx_conn_t *orphans;   /* freed once the worker is gone */
};

static strata_status_t ucx_error(strata_status_t code, ucs_status_t s, const char *what)
{
    return st_error(code, "ucx: %s: %s", what, ucs_status_string(s));
}

/* ---- the worker and its address ---------------------------------------------------------------- */

static ucs_status_t on_am(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param);

static strata_status_t publish_address(st_ep_t *ep, st_transport_t *t)
{
    ucp_address_t *addr;
    size_t len;
    ucs_status_t s = ucp_worker_get_address(t->worker, &addr, &len);
    if (s != UCS_OK)
        return ucx_error(STRATA_ERR_SYSTEM, s, "getting the worker address");
    char *hex = malloc(2 * len + 1);
    if (!hex) {
        ucp_worker_release_address(t->worker, addr);
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < len; i++)
        snprintf(hex + 2 * i, 3, "%02x", ((const unsigned char *)addr)[i]);
    ucp_worker_release_address(t->worker, addr);
    char key[32];
    snprintf(key, sizeof key, "ucx/%d", st_ep_rank(ep));
    strata_status_t rc = st_store_set(st_ep_store(ep), key, hex, 2 * len);
    free(hex);
    return rc;
}

static void ucx_close_tp(st_ep_t *ep, st_transport_t *t);

static strata_status_t ucx_open(st_ep_t *ep, st_transport_t **out)
{
    strata_comm_ucx_t mode = st_ep_ucx(ep);
    if (mode == STRATA_COMM_UCX_OFF)
        return STRATA_OK; // not asked for: no UCX start-up cost
    st_transport_t *t = calloc(1, sizeof *t);
    if (!t)
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
    t->ep = ep;
    t->efd = t->kick = -1;
    t->all = mode == STRATA_COMM_UCX_ALL;
    t->frag = (size_t)ST_MAX(st_knob_int("STRATA_UCX_FRAG_BYTES", 4ll << 20), 4096ll) & ~(size_t)63;
    strata_status_t rc = STRATA_OK;
    ucp_config_t *cfg = NULL;
    ucs_status_t s = ucp_config_read(NULL, NULL, &cfg);
    if (s != UCS_OK) {
        rc = ucx_error(STRATA_ERR_INVALID_ARG, s, "reading the UCX_* settings");
        goto fail;
    }
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
        .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
        .mt_workers_shared = 0,
    };
    s = ucp_init(&params, cfg, &t->ctx);
    ucp_config_release(cfg);
    if (s != UCS_OK) {
        rc = ucx_error(STRATA_ERR_SYSTEM, s, "ucp_init (is UCX_TLS valid here? `ucx_info -d` lists the transports)");
        goto fail;
    }
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    s = ucp_worker_create(t->ctx, &wp, &t->worker);
    if (s != UCS_OK) {
        rc = ucx_error(STRATA_ERR_SYSTEM, s, "creating the worker");
        goto fail;
    }
    ucp_am_handler_param_t hp = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = AM_ID,
        .flags = UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA,
        .cb = on_am,
        .arg = t,
    };
    s = ucp_worker_set_am_recv_handler(t->worker, &hp);
    if (s == UCS_OK)
        s = ucp_worker_get_efd(t->worker, &t->efd);
    if (s != UCS_OK) {
        rc = ucx_error(STRATA_ERR_SYSTEM, s, "setting up the worker");
        goto fail;
    }
    t->kick = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (t->kick < 0) {
        rc = st_error_errno(STRATA_ERR_SYSTEM, errno, "eventfd");
        goto fail;
    }
    ST_TRY_GOTO(publish_address(ep, t), rc, fail);
    *out = t;
    return STRATA_OK;
fail:
    ucx_close_tp(ep, t);
    return rc;
}

static void ucx_address(st_transport_t *t, char *buf, size_t len)
{
    (void)t; // published under its own key: a worker address is binary and long
    if (len)
        buf[0] = '\0';
}

static bool ucx_can_connect(st_ep_t *ep, st_transport_t *t, const st_peer_t *peer)
{
    return t && (t->all || peer->host_hash != st_ep_host_hash(ep));
}

static ucx_conn_t *conn_of(st_transport_t *t, st_peer_t *peer)
{
    if (!peer->conn) {
        ucx_conn_t *c = calloc(1, sizeof *c);
        if (!c)
            return NULL;
        c->t = t;
        c->rank = peer->rank;
        c->err = UCS_OK;
        peer->conn = c;
    }
    return peer->conn;
}

static void on_ep_error(void *arg, ucp_ep_h uep, ucs_status_t status)
{
    (void)uep;
    ucx_conn_t *c = arg;
    ST_LOG_DEBUG(ST_SUB_NET, "ucx: the endpoint to rank %d failed: %s", c->rank,
                 ucs_status_string(status));
    if (c->err == UCS_OK)
        c->err = status;
    c->t->events = true; // a sleeping rank wakes to report it
}

/* Creates the UCP endpoint to `peer` from the address it published. */
static strata_status_t create_ep(st_ep_t *ep, st_transport_t *t, st_peer_t *peer, ucx_conn_t *c)
{
    char key[32];
    snprintf(key, sizeof key, "ucx/%d", peer->rank);
    void *val = NULL;
    size_t len = 0;
    strata_status_t rc = st_store_get(st_ep_store(ep), key, &val, &len, st_ep_timeout_ms(ep));
    if (rc < 0)
        return st_error(rc, "looking up the UCX address of %s (is STRATA_COMM_TRANSPORT set alike "
                        "on every rank?): %s", st_ep_peer_name(ep, peer->rank), strata_last_error());
    unsigned char *addr = malloc(len / 2 + 1);
    if (!addr) {
        free(val);
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
    }
    bool ok = len % 2 == 0;
    for (size_t i = 0; ok && i < len / 2; i++) {
        unsigned v;
        ok = sscanf((const char *)val + 2 * i, "%2x", &v) == 1;
        addr[i] = (unsigned char)v;
    }
    free(val);
    if (!ok) {
        free(addr);
        return st_error(STRATA_ERR_REMOTE, "%s published a malformed UCX address",
                        st_ep_peer_name(ep, peer->rank));
    }
    // UCX reports a dead peer only over transports that can detect one (tcp, verbs; in UCX 1.13 not
    // its shared memory). Where none can, the endpoint is made without that promise, and the peer's
    // death is seen by its pid (ucx_check_peer) or the store. The first try is made with UCX's log
    // muted: its refusal is expected, not an error to print.
    ucs_status_t s = UCS_ERR_UNREACHABLE;
    const ucp_err_handling_mode_t modes[] = {UCP_ERR_HANDLING_MODE_PEER, UCP_ERR_HANDLING_MODE_NONE};
    for (int i = 0; i < 2 && s == UCS_ERR_UNREACHABLE; i++) {
        ucp_ep_params_t ep_params = {
            .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                          UCP_EP_PARAM_FIELD_ERR_HANDLER,
            .address = (const ucp_address_t *)addr,
            .err_mode = modes[i],
            .err_handler = {.cb = on_ep_error, .arg = c},
        };
        ucs_log_level_t level = ucs_global_opts.log_component.log_level;
        if (i == 0)
            ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_FATAL;
        s = ucp_ep_create(t->worker, &ep_params, &c->ep);
        ucs_global_opts.log_component.log_level = level;
        if (i == 1 && s == UCS_OK)
            ST_LOG_INFO(ST_SUB_NET, "ucx: no transport to %s reports peer failures; its process "
                        "and the store are watched instead", st_ep_peer_name(ep, peer->rank));
    }
    free(addr);
    if (s == UCS_ERR_UNREACHABLE)
        return st_error(STRATA_ERR_UNSUPPORTED, "ucx: no UCX transport reaches %s (UCX_TLS=%s; "
                        "`ucx_info -d` lists this host's)", st_ep_peer_name(ep, peer->rank),
                        getenv("UCX_TLS") ? getenv("UCX_TLS") : "all");
    if (s != UCS_OK)
        return ucx_error(STRATA_ERR_PEER_FAILED, s, "creating an endpoint");
    return STRATA_OK;
}

static strata_status_t ucx_connect(st_ep_t *ep, st_transport_t *t, st_peer_t *peer)
{
    ucx_conn_t *c = conn_of(t, peer);
    if (!c)
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
    return c->ep ? STRATA_OK : create_ep(ep, t, peer, c);
}

/* ---- receiving --------------------------------------------------------------------------------- */

/* Queues an arrival in its peer's list, in sequence order (almost always at the tail). */
static void queue_arrival(ucx_conn_t *c, arrival_t *a)
{
    a->next = NULL;
    if (!c->arrivals_tail || c->arrivals_tail->hdr.seq - a->hdr.seq > UINT32_MAX / 2) {
        if (c->arrivals_tail)
            c->arrivals_tail->next = a;
        else
            c->arrivals = a;
        c->arrivals_tail = a;
        return;
    }
    arrival_t **pp = &c->arrivals;
    while (*pp && (*pp)->hdr.seq - a->hdr.seq > UINT32_MAX / 2) // (*pp)->seq < a->seq, wrapping
        pp = &(*pp)->next;
    a->next = *pp;
    *pp = a;
}

static ucs_status_t on_am(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param)
{
    st_transport_t *t = arg;
    am_hdr_t h;
    if (t->closing || header_length != sizeof h)
        return UCS_OK;
    memcpy(&h, header, sizeof h);
    if (h.src < 0 || h.src >= st_ep_size(t->ep) || h.src == st_ep_rank(t->ep)) {
        ST_LOG_WARN(ST_SUB_NET, "ucx: dropped a message claiming to come from rank %d", (int)h.src);
        return UCS_OK;
    }
    st_peer_t *peer = st_ep_peer(t->ep, h.src);
    if (peer->tp && peer->tp != &st_ucx_ops) {
        ST_LOG_WARN(ST_SUB_NET, "ucx: %s sent over UCX but is served by %s here (set "
                    "STRATA_COMM_TRANSPORT alike on every rank); message dropped",
                    st_ep_peer_name(t->ep, h.src), peer->tp->name);
        return UCS_OK;
    }
    ucx_conn_t *c = conn_of(t, peer);
    arrival_t *a = calloc(1, sizeof *a);
    if (!c || !a) {
        free(a);
        st_ep_fail(t->ep, STRATA_ERR_NO_MEMORY, "out of memory queueing a UCX arrival");
        return UCS_OK;
    }
    if (!peer->tp)
        st_ep_adopt_peer(t->ep, peer, &st_ucx_ops); // it talks to us first: progress it
    a->hdr = h;
    a->len = length;
    a->data = data;
    ucs_status_t keep = UCS_INPROGRESS;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        a->rndv = true;
    } else if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA)) {
        // UCX lends these bytes only for this call: keep a copy.
        a->data = malloc(length ? length : 1);
        if (!a->data) {
            free(a);
            st_ep_fail(t->ep, STRATA_ERR_NO_MEMORY, "out of memory copying a UCX arrival");
            return UCS_OK;
        }
        memcpy(a->data, data, length);
        a->owned = true;
        keep = UCS_OK;
    }
    queue_arrival(c, a);
    t->events = true;
    return keep;
}

static void release_arrival(st_transport_t *t, arrival_t *a)
{
    if (a->owned)
        free(a->data);
    else
        ucp_am_data_release(t->worker, a->data);
    free(a);
}

/* Copies or reduces a fragment into its receive. Reductions read whole, aligned elements: bytes
 * that UCX placed at an odd address are copied out first. */
static strata_status_t deliver(st_ep_t *ep, st_msg_t *m, size_t off, const void *data, size_t len)
{
    if (m->reduce && !m->unexpected && ((uintptr_t)data & 7u)) {
        void *tmp = malloc(len ? len : 1);
        if (!tmp)
            return st_ep_fail(ep, STRATA_ERR_NO_MEMORY, "out of memory aligning a UCX fragment");
        memcpy(tmp, data, len);
        st_msg_deliver(ep, m, off, tmp, len);
        free(tmp);
        return STRATA_OK;
    }
    st_msg_deliver(ep, m, off, data, len);
    return STRATA_OK;
}

static void fetched(void *request, ucs_status_t status, size_t length, void *user_data);

/* A rendezvous fetch completed (in a callback or at once). */
static void fetch_done(recv_op_t *op, ucs_status_t status)
{
    ucx_conn_t *c = op->c;
    c->rx_pending--;
    if (op->prev)
        op->prev->next = op->next;
    else
        op->t->fetches = op->next;
    if (op->next)
        op->next->prev = op->prev;
    op->t->events = true;
    if (status != UCS_OK) {
        if (c->err == UCS_OK)
            c->err = status;
    } else if (!op->t->closing) {
        const void *src = op->stage ? op->stage : (const char *)op->m->rbuf + op->off;
        st_msg_deliver(op->t->ep, op->m, op->off, src, op->len); // the last one may free m
    }
    free(op->stage);
    free(op);
}

static void fetched(void *request, ucs_status_t status, size_t length, void *user_data)
{
    (void)length;
    fetch_done(user_data, status);
    ucp_request_free(request);
}

/* Starts fetching a rendezvous fragment into its receive (or a staging buffer when it reduces). */
static strata_status_t fetch(st_ep_t *ep, st_transport_t *t, ucx_conn_t *c, arrival_t *a,
                             st_msg_t *m)
{
    recv_op_t *op = calloc(1, sizeof *op);
    bool staged = m->reduce && !m->unexpected;
    if (!op || (staged && !(op->stage = malloc(a->len ? a->len : 1)))) {
        free(op);
        return st_ep_fail(ep, STRATA_ERR_NO_MEMORY, "out of memory receiving from %s",
                          st_ep_peer_name(ep, c->rank));
    }
    *op = (recv_op_t){.next = t->fetches, .t = t, .c = c, .m = m, .off = a->hdr.off,
                      .len = a->len, .stage = op->stage};
    if (t->fetches)
        t->fetches->prev = op;
    t->fetches = op;
    void *dst = staged ? (void *)op->stage : (char *)m->rbuf + a->hdr.off;
    ucp_request_param_t rp = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb = {.recv_am = fetched},
        .user_data = op,
    };
    c->rx_pending++;
    ucs_status_ptr_t r = ucp_am_recv_data_nbx(t->worker, a->data, dst, a->len, &rp);
    free(a); // the descriptor is UCX's again
    if (r == NULL)
        fetch_done(op, UCS_OK);
    else if (UCS_PTR_IS_ERR(r))
        fetch_done(op, UCS_PTR_STATUS(r));
    return STRATA_OK;
}

/* Hands the peer's arrivals, in sequence, to their receives. Without `drain`, an arrival no receive
 * wants yet stays queued (in UCX's buffers); with it, the matcher buffers it as unexpected. */
static strata_status_t take_arrivals(st_ep_t *ep, st_transport_t *t, st_peer_t *peer,
                                     ucx_conn_t *c, bool drain, bool *moved)
{
    arrival_t *a;
    while ((a = c->arrivals) && a->hdr.seq == c->rx_seq) {
        st_msg_t *m = c->rx_cur;
        if (a->hdr.off == 0) {
            m = st_ep_match(ep, peer, a->hdr.tag, a->hdr.total, drain);
            if (!m)
                return st_ep_error(ep);
        }
        if (!m || a->hdr.off + a->len > a->hdr.total)
            return st_ep_fail(ep, STRATA_ERR_REMOTE, "%s sent a UCX fragment out of place",
                              st_ep_peer_name(ep, peer->rank));
        c->arrivals = a->next;
        if (!c->arrivals)
            c->arrivals_tail = NULL;
        c->rx_seq++;
        *moved = true;
        bool last = a->hdr.off + a->len == a->hdr.total;
        c->rx_cur = last ? NULL : m;
        if (a->rndv) {
            ST_TRY(fetch(ep, t, c, a, m));
        } else {
            strata_status_t rc = deliver(ep, m, a->hdr.off, a->data, a->len);
            release_arrival(t, a);
            ST_TRY(rc);
        }
    }
    return STRATA_OK;
}

/* ---- sending ----------------------------------------------------------------------------------- */

static void sent(void *request, ucs_status_t status, void *user_data)
{
    send_op_t *op = user_data;
    op->done = true;
    op->c->t->events = true;
    if (status != UCS_OK && op->c->err == UCS_OK)
        op->c->err = status;
    ucp_request_free(request);
}

/* Hands fragments of the queued messages to UCX while the ring has room. */
static strata_status_t issue_sends(st_ep_t *ep, st_transport_t *t, st_peer_t *peer, ucx_conn_t *c,
                                   bool *moved)
{
    while (c->ring_count < INFLIGHT) {
        if (!c->tx_msg) {
            st_msg_t *m = peer->sendq;
            for (unsigned i = 0; m && i < c->tx_issued; i++)
                m = m->next;
            if (!m)
                return STRATA_OK;
            c->tx_msg = m;
            c->tx_off = 0;
        }
        st_msg_t *m = c->tx_msg;
        size_t len = ST_MIN(t->frag, m->bytes - c->tx_off);
        send_op_t *op = &c->ring[(c->ring_head + c->ring_count) % INFLIGHT];
        *op = (send_op_t){.hdr = {.tag = m->tag, .total = m->bytes, .off = c->tx_off,
                                  .seq = c->tx_seq++, .src = st_ep_rank(ep)},
                          .m = m, .last = c->tx_off + len == m->bytes, .c = c};
        ucp_request_param_t rp = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            .cb = {.send = sent},
            .user_data = op,
        };
        ucs_status_ptr_t r = ucp_am_send_nbx(c->ep, AM_ID, &op->hdr, sizeof op->hdr,
                                             (const char *)m->sbuf + c->tx_off, len, &rp);
        if (UCS_PTR_IS_ERR(r)) {
            if (c->err == UCS_OK)
                c->err = UCS_PTR_STATUS(r);
            return STRATA_OK; // reported by the caller, as a peer failure
        }
        op->done = r == NULL;
        c->ring_count++;
        c->tx_off += len;
        *moved = true;
        if (op->last) {
            c->tx_msg = NULL;
            c->tx_issued++;
        }
    }
    return STRATA_OK;
}

/* Completes, in order, the messages whose fragments UCX has all sent. */
static void retire_sends(st_ep_t *ep, st_peer_t *peer, ucx_conn_t *c, bool *moved)
{
    while (c->ring_count && c->ring[c->ring_head].done) {
        send_op_t *op = &c->ring[c->ring_head];
        c->ring_head = (c->ring_head + 1) % INFLIGHT;
        c->ring_count--;
        if (!op->last)
            continue;
        st_msg_t *m = peer->sendq; // == op->m: issued, and so completed, in queue order
        peer->sendq = m->next;
        if (!peer->sendq)
            peer->sendq_tail = NULL;
        c->tx_issued--;
        *moved = true;
        st_msg_complete(ep, m);
    }
}

/* ---- progress and sleeping --------------------------------------------------------------------- */

static strata_status_t peer_failed(st_ep_t *ep, ucx_conn_t *c)
{
    return st_ep_peer_lost(ep, c->rank, "failed: UCX reports %s", ucs_status_string(c->err));
}

/* An endpoint UCX reported failed is closed at once, forced, as UCP asks of an error handler's
 * endpoint: left open while the worker progresses, UCX 1.13's tcp transport can complete one of
 * its internal requests twice and abort the process (seen in mr_failure_ucx, about 1 run in 5
 * under ASan). Sends still in flight complete with an error through their callbacks. */
static void close_failed(st_transport_t *t, ucx_conn_t *c)
{
    if (!c->ep)
        return;
    t->forced = true; // after one forced close, every later one is forced too (ucx_disconnect)
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = UCP_EP_CLOSE_FLAG_FORCE};
    ucs_status_ptr_t r = ucp_ep_close_nbx(c->ep, &rp);
    if (r && !UCS_PTR_IS_ERR(r))
        ucp_request_free(r);
    c->ep = NULL;
}

static strata_status_t ucx_progress(st_ep_t *ep, st_transport_t *t, st_peer_t *peer, bool drain,
                                    bool *moved)
{
    ucx_conn_t *c = conn_of(t, peer);
    if (!c)
        return st_ep_fail(ep, STRATA_ERR_NO_MEMORY, "out of memory");
    // What arrived before a failure is still delivered: a peer that finished and left is lost only
    // if something of it is still awaited.
    ST_TRY(take_arrivals(ep, t, peer, c, drain, moved));
    retire_sends(ep, peer, c, moved);
    if (c->err != UCS_OK) {
        close_failed(t, c);
        if (peer->sendq || peer->recvq || c->rx_pending || c->rx_cur)
            return peer_failed(ep, c);
        return STRATA_OK;
    }
    if (!peer->sendq)
        return STRATA_OK;
    if (!c->ep) { // adopted through its first message: connect to send back
        strata_status_t rc = create_ep(ep, t, peer, c);
        if (rc == STRATA_ERR_PEER_FAILED)
            return st_ep_peer_lost(ep, peer->rank, "could not be reached (%s)", strata_last_error());
        if (rc < 0)
            return st_ep_fail(ep, rc, "%s", strata_last_error());
    }
    ST_TRY(issue_sends(ep, t, peer, c, moved));
    if (c->err != UCS_OK) {
        close_failed(t, c);
        return peer_failed(ep, c);
    }
    return STRATA_OK;
}

static strata_status_t ucx_progress_global(st_ep_t *ep, st_transport_t *t, bool *moved)
{
    (void)ep;
    if (!t)
        return STRATA_OK;
    for (int i = 0; i < PROGRESS_MAX && ucp_worker_progress(t->worker); i++)
        ;
    if (t->events) {
        t->events = false;
        *moved = true;
    }
    if (t->kicked) {
        uint64_t v;
        if (read(t->kick, &v, sizeof v) < 0)
            ST_LOG_DEBUG(ST_SUB_NET, "ucx: kick: %s", strerror(errno));
        t->kicked = false;
        *moved = true;
    }
    return STRATA_OK;
}

/* The worker's event fd, armed. Arming fails while events are pending: they are progressed here,
 * and when that produced work for strata the kick fd is made readable so the poll returns at once. */
static int ucx_pollfds_global(st_ep_t *ep, st_transport_t *t, struct pollfd *fds, int max)
{
    (void)ep;
    if (!t || max < 2)
        return 0;
    for (;;) {
        ucs_status_t s = ucp_worker_arm(t->worker);
        if (s == UCS_OK)
            break;
        while (ucp_worker_progress(t->worker))
            ;
        if (s != UCS_ERR_BUSY || t->events) {
            uint64_t one = 1;
            if (write(t->kick, &one, sizeof one) < 0)
                ST_LOG_DEBUG(ST_SUB_NET, "ucx: kick: %s", strerror(errno));
            t->kicked = true;
            break;
        }
    }
    fds[0] = (struct pollfd){.fd = t->efd, .events = POLLIN};
    fds[1] = (struct pollfd){.fd = t->kick, .events = POLLIN};
    return 2;
}

/* A peer on this host that is gone is lost even before UCX notices (shared-memory transports see
 * no close); its zombie counts as gone. */
static strata_status_t ucx_check_peer(st_ep_t *ep, st_transport_t *t, st_peer_t *peer)
{
    (void)t;
    ucx_conn_t *c = peer->conn;
    if (peer->pid <= 0 || peer->host_hash != st_ep_host_hash(ep) || (c && c->arrivals))
        return STRATA_OK;
    char path[64], stat[256] = "";
    snprintf(path, sizeof path, "/proc/%d/stat", peer->pid);
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(stat, sizeof stat, f))
            stat[0] = '\0';
        fclose(f);
    }
    const char *paren = strrchr(stat, ')');
    bool gone = !f || (paren && (paren[2] == 'Z' || paren[2] == 'X'));
    if (!gone)
        return STRATA_OK;
    return st_ep_peer_lost(ep, peer->rank, "exited while this rank was exchanging data with it");
}

/* ---- closing ----------------------------------------------------------------------------------- */

static void ucx_disconnect(st_ep_t *ep, st_transport_t *t, st_peer_t *peer)
{
    (void)ep;
    ucx_conn_t *c = peer->conn;
    if (!c)
        return;
    t->closing = true;
    while (c->arrivals) {
        arrival_t *a = c->arrivals;
        c->arrivals = a->next;
        release_arrival(t, a);
    }
    if (c->ep) {
        // Flush what was sent, bounded in time, unless the peer or the endpoint failed: then close
        // at once and progress no more. (UCX 1.13's tcp asserts when progress meets a send it
        // already failed on a forced close, so after one, every later close is forced too.)
        t->forced = t->forced || c->err != UCS_OK || st_ep_error(ep) < 0;
        ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                  .flags = t->forced ? UCP_EP_CLOSE_FLAG_FORCE : 0};
        ucs_status_ptr_t r = ucp_ep_close_nbx(c->ep, &rp);
        uint64_t until = st_now_ns() + 2000000000ull;
        while (!t->forced && r && !UCS_PTR_IS_ERR(r) &&
               ucp_request_check_status(r) == UCS_INPROGRESS && st_now_ns() < until)
            ucp_worker_progress(t->worker);
        if (r && !UCS_PTR_IS_ERR(r))
            ucp_request_free(r); // released by UCX when it completes, if it has not
    }
    // Operations still in flight point at c: it is freed with the worker.
    if (c->rx_pending == 0 && c->ring_count == 0) {
        free(c);
    } else {
        c->next_orphan = t->orphans;
        t->orphans = c;
    }
    peer->conn = NULL;
}

static void ucx_close_tp(st_ep_t *ep, st_transport_t *t)
{
    if (!t)
        return;
    t->closing = true;
    if (t->worker) {
        // Sends to a peer that died over a transport that cannot report it (UCX's shared memory)
        // can never complete, and UCX warns about each at destruction: after a failure that is
        // expected, not news.
        ucs_log_level_t level = ucs_global_opts.log_component.log_level;
        if (st_ep_error(ep) < 0)
            ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_ERROR;
        ucp_worker_destroy(t->worker);
        ucs_global_opts.log_component.log_level = level;
    }
    while (t->fetches) { // never completed: their peer died mid-transfer
        recv_op_t *op = t->fetches;
        t->fetches = op->next;
        free(op->stage);
        free(op);
    }
    while (t->orphans) {
        ucx_conn_t *c = t->orphans;
        t->orphans = c->next_orphan;
        free(c);
    }
    if (t->ctx)
        ucp_cleanup(t->ctx);
    if (t->kick >= 0)
        close(t->kick);
    free(t);
}

const st_transport_ops_t st_ucx_ops = {
    .name = "ucx",
    .open = ucx_open,
    .address = ucx_address,
    .can_connect = ucx_can_connect,
    .connect = ucx_connect,
    .progress = ucx_progress,
    .progress_global = ucx_progress_global,
    .pollfds_global = ucx_pollfds_global,
    .needs_poll = true,
    .check_peer = ucx_check_peer,
    .disconnect = ucx_disconnect,
    .close = ucx_close_tp,
};
