/* Internal shape of communicators and requests, shared by comm.c, request.c and coll.c. */
#ifndef ST_COMM_INTERNAL_H
#define ST_COMM_INTERNAL_H

#include "comm/algo/algo.h"
#include "comm/endpoint.h"
#include "strata/link_calib.h"
#include "strata/netmodel.h"

/* What a world communicator and its splits share: the endpoint and the requests in flight. Every
 * wait advances every request in flight, so collectives posted in any order cannot deadlock. */
typedef struct st_shared {
    st_ep_t *ep;
    strata_request_t *active;
    int refs;
} st_shared_t;

struct strata_comm {
    st_shared_t *sh;
    int rank, nranks;
    int *world;          /* communicator rank -> endpoint rank */
    uint32_t ctx;        /* context id, 24 bits, part of every message tag */
    uint32_t seq;        /* collectives issued so far */
    uint32_t nsplits;
    strata_link_t link;  /* the link class the cost model assumes for this communicator */
    st_topo_t *topo;     /* its place on the fabric (topo.c); NULL only while being created */
    strata_link_calib_t calib; /* how its fabric's links were calibrated (calibrate.c; a split's are
                             its parent's) */
    struct st_mailbox *mailbox; /* small allreduces on one host (mailbox.c); NULL until first used */
    st_pool_conn_t *pool;  /* the pool allreduce's nodes (algo/pool.c); NULL: STRATA_POOL_NODES unset */
};

/* Where this rank sits (topo.c): its path on the fabric ("" when nothing says) and the fabric's
 * levels when a cluster file gives them. */
typedef struct st_place {
    char path[512];
    strata_topo_t levels;
    bool have_levels;
} st_place_t;

/* Finds this rank's place from STRATA_TOPO_PATH and STRATA_TOPO_FILE (topo.c). */
strata_status_t st_comm_locate(st_place_t *place);

/* The placement of a new world communicator: exchanges every rank's path (topo.c). */
strata_status_t st_comm_topo_create(strata_comm_t *c, const st_place_t *place);
/* The placement of a split: its members' part of the parent's (parent_ranks: parent comm ranks). */
strata_status_t st_comm_topo_split(const strata_comm_t *parent, strata_comm_t *child,
                                   const int *parent_ranks);
void st_comm_topo_free(st_topo_t *t);

/* Link calibration at creation (calibrate.c). A rank's wish, from STRATA_TOPO_CALIBRATE and
 * whether its cluster file gave the levels' links; the communicator calibrates when every rank's
 * wish allows it: all ALWAYS, or at least AUTO with ranks on more than one host. */
enum { ST_CALIB_NEVER = 0, ST_CALIB_AUTO = 1, ST_CALIB_ALWAYS = 2 };
strata_status_t st_calib_wish(bool have_levels, int *wish);
/* Measures every level of `f` that the communicator's ranks span and fits f->topo's levels from
 * the measurements; collective over `c` (every rank calls it and gets the same levels); *out
 * records what was measured. */
strata_status_t st_comm_calibrate(strata_comm_t *c, strata_fabric_t *f, strata_link_calib_t *out);

struct strata_request {
    strata_comm_t *comm;
    strata_request_t *next, *prev;
    st_sched_t sched;
    uint64_t tag_base;
    const char *what;    /* "allreduce", "send", ... */
    uint32_t seq;        /* its number on the communicator (collectives; 0 for send/recv) */
    uint64_t flight;     /* its flight-recorder entry */
    const char *algo;
    size_t bytes;
    int peer;            /* send/recv: the other rank; -1 for collectives */
    bool traced;         /* its trace span is open (strata/trace.h) */
    bool finished;
    strata_status_t status;
    size_t *vec;         /* owned normalised counts/displacements */
};

/* Tag layout: [63..40] context, [39] point-to-point flag, then either [38..21] collective sequence
 * and [20..0] algorithm tag, or [30..0] the user's tag. */
#define ST_TAG_CTX_SHIFT 40
#define ST_TAG_P2P       (1ull << 39)
#define ST_TAG_SEQ_SHIFT 21
#define ST_TAG_SEQ_MASK  0x3FFFFu

/* Allocates a request for a schedule about to be built on `comm`. */
strata_status_t st_request_new(strata_comm_t *comm, const char *what, strata_request_t **out);

/* Starts the built schedule and puts the request in flight; on error frees it. */
strata_status_t st_request_start(strata_request_t *req, strata_request_t **out);

/* Frees a request that never started. */
void st_request_free(strata_request_t *req);

/* Opens and closes a collective's flight-recorder entry and trace span (what, algo, bytes and seq
 * set): st_request_start and completion do it for schedules; mailbox.c, which runs collectives
 * without one, calls them on a request of its own. */
void st_request_record_begin(strata_request_t *req);
void st_request_record_end(strata_request_t *req, strata_status_t rc);

/* Advances every request in flight on `sh` (a finished one leaves the list). */
void st_request_step_all(st_shared_t *sh);

#endif
