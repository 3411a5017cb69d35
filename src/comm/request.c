/* Requests: a schedule in flight, waited on or tested by the caller. Every wait advances all
 * requests in flight on the endpoint, not just its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "comm/comm_internal.h"
#include "strata/trace.h"

strata_status_t st_request_new(strata_comm_t *comm, const char *what, strata_request_t **out)
{
    strata_request_t *req = calloc(1, sizeof *req);
    if (!req)
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory for a request");
    req->comm = comm;
    req->what = what;
    req->peer = -1;
    *out = req;
    return STRATA_OK;
}

/* The request's span in the trace, from start to completion (category "coll"): its size, algorithm
 * and group, or its peer. */
static void trace_begin(strata_request_t *req)
{
    if (!strata_trace_enabled())
        return;
    strata_trace_arg_t a[5];
    int n = 0;
    a[n++] = (strata_trace_arg_t){"bytes", NULL, (double)req->bytes};
    if (req->peer >= 0) {
        a[n++] = (strata_trace_arg_t){"peer", NULL, req->peer};
    } else { // one rank runs no algorithm: a local copy
        a[n++] = (strata_trace_arg_t){"algo", req->algo ? req->algo : "self", 0};
        a[n++] = (strata_trace_arg_t){"ranks", NULL, req->comm->nranks};
        // (comm, seq) names the same collective on every rank of the communicator
        a[n++] = (strata_trace_arg_t){"comm", NULL, req->comm->ctx};
        a[n++] = (strata_trace_arg_t){"seq", NULL, req->seq};
    }
    strata_trace_async_begin_args("coll", req->what, (uint64_t)(uintptr_t)req, a, n);
    req->traced = true;
}

static void trace_end(strata_request_t *req)
{
    if (req->traced)
        strata_trace_async_end("coll", req->what, (uint64_t)(uintptr_t)req);
    req->traced = false;
}

void st_request_free(strata_request_t *req)
{
    if (!req)
        return;
    trace_end(req); // a request released before it finished (an error): its span ends here
    st_sched_fini(&req->sched);
    free(req->vec);
    free(req);
}

static void unlink_active(strata_request_t *req)
{
    st_shared_t *sh = req->comm->sh;
    if (req->prev)
        req->prev->next = req->next;
    else if (sh->active == req)
        sh->active = req->next;
    if (req->next)
        req->next->prev = req->prev;
    req->next = req->prev = NULL;
}

void st_request_record_begin(strata_request_t *req)
{
    req->flight = st_flight_begin(st_ep_flight(req->comm->sh->ep), req->comm->ctx, req->seq,
                                  req->what, req->algo, req->bytes);
    trace_begin(req);
}

void st_request_record_end(strata_request_t *req, strata_status_t rc)
{
    if (req->comm->sh->ep)
        st_flight_end(st_ep_flight(req->comm->sh->ep), req->flight, rc);
    trace_end(req);
}

static void finish(strata_request_t *req, strata_status_t rc)
{
    st_request_record_end(req, rc);
    req->finished = true;
    req->status = rc;
    unlink_active(req);
}

static void step_one(strata_request_t *req)
{
    strata_comm_t *c = req->comm;
    strata_status_t rc = st_sched_step(&req->sched, c->sh->ep, c->world, req->tag_base);
    if (rc != STRATA_INPROGRESS)
        finish(req, rc);
}

void st_request_step_all(st_shared_t *sh)
{
    for (strata_request_t *r = sh->active, *next; r; r = next) {
        next = r->next;
        step_one(r);
    }
}

strata_status_t st_request_start(strata_request_t *req, strata_request_t **out)
{
    *out = NULL;
    if (req->sched.build_rc < 0) {
        strata_status_t rc = req->sched.build_rc;
        st_request_free(req);
        return rc;
    }
    st_shared_t *sh = req->comm->sh;
    strata_status_t rc = st_ep_error(sh->ep);
    if (rc < 0) {
        st_request_free(req);
        return rc;
    }
    st_request_record_begin(req);
    req->next = sh->active;
    if (sh->active)
        sh->active->prev = req;
    sh->active = req;
    step_one(req);
    *out = req;
    return STRATA_OK;
}

static bool req_done(void *arg)
{
    strata_request_t *req = arg;
    st_request_step_all(req->comm->sh);
    return req->finished;
}

static void req_what(void *arg, char *buf, size_t len, int *awaited)
{
    strata_request_t *req = arg;
    *awaited = st_sched_awaited(&req->sched);
    char where[192];
    st_sched_describe(&req->sched, req->comm->sh->ep, where, sizeof where);
    char seq[24] = "";
    if (req->seq)
        snprintf(seq, sizeof seq, " #%u", req->seq);
    snprintf(buf, len, "in %s%s (%s, %zu bytes, rank %d of %d) %s", req->what, seq,
             req->algo ? req->algo : "direct", req->bytes, req->comm->rank, req->comm->nranks, where);
}

/* Ends a request: on error, makes sure its message is this thread's. */
static strata_status_t release(strata_request_t *req)
{
    strata_status_t rc = req->status;
    if (rc < 0 && req->comm->sh->ep)
        st_ep_error(req->comm->sh->ep);
    if (!req->finished)
        unlink_active(req);
    st_request_free(req);
    return rc;
}

strata_status_t strata_request_wait(strata_request_t *req)
{
    if (!req)
        return STRATA_OK;
    if (!req->finished) {
        st_ep_t *ep = req->comm->sh->ep;
        strata_status_t rc = st_ep_wait(ep, req_done, req, req_what,
                                        st_deadline_ms(st_ep_timeout_ms(ep)));
        if (rc < 0 && !req->finished)
            finish(req, rc);
    }
    return release(req);
}

strata_status_t strata_request_test(strata_request_t *req, bool *done)
{
    if (!req || !done) {
        if (done)
            *done = true;
        return req ? st_error(STRATA_ERR_INVALID_ARG, "strata_request_test: done is NULL") : STRATA_OK;
    }
    if (!req->finished) {
        bool moved = false;
        strata_status_t rc = st_ep_progress(req->comm->sh->ep, true, &moved);
        if (rc < 0)
            finish(req, rc);
        else
            req_done(req);
    }
    *done = req->finished;
    return *done ? release(req) : STRATA_INPROGRESS;
}

strata_status_t strata_request_wait_all(strata_request_t **reqs, int n)
{
    strata_status_t first = STRATA_OK;
    char msg[1024] = "";
    for (int i = 0; i < n; i++) {
        strata_status_t rc = strata_request_wait(reqs[i]);
        reqs[i] = NULL;
        if (rc < 0 && first == STRATA_OK) {
            first = rc;
            snprintf(msg, sizeof msg, "%s", strata_last_error());
        }
    }
    if (first < 0)
        st_error_set(msg);
    return first;
}
