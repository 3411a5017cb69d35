/* strata's collective-communication library.
 *
 * A communicator (strata_comm_t) is a group of ranks that run collectives together. The world
 * communicator is created from an explicit config or from a launcher's environment and bootstraps
 * through a TCP key-value store; sub-communicators come from strata_comm_split(). Peers on the same
 * host talk through shared memory, other peers through TCP; connections are made lazily, only to the
 * peers an algorithm actually talks to, so start-up cost per rank does not grow with the job.
 *
 * Conventions
 * - Counts are in elements of `dtype`, byte sizes end in `_bytes`.
 * - In-place follows NCCL: allreduce/reduce/bcast with sendbuf == recvbuf; allgather with
 *   sendbuf == recvbuf + rank * count * size; reduce_scatter with recvbuf == sendbuf + rank * count *
 *   size.
 * - Blocking calls are the non-blocking call followed by strata_request_wait().
 * - Non-blocking calls borrow their buffers until the request completes.
 * - Every blocking call and wait gives up after the communicator's timeout (STRATA_COMM_TIMEOUT_MS)
 *   with STRATA_ERR_TIMEOUT naming the peer that was awaited.
 * - When a peer dies or closes its connection, every pending and later call on every communicator of
 *   the process fails with STRATA_ERR_PEER_FAILED and a message naming that peer; the job must then be
 *   torn down (destroy or abort).
 * - Thread-safety: a communicator is used by one thread at a time. Different communicators created
 *   by strata_comm_create() may be used from different threads; a communicator and its splits share
 *   state and must be used from one thread.
 */
#ifndef STRATA_COMM_H
#define STRATA_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/netmodel.h" /* strata_coll_t, the kinds the parts share */
#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct strata_comm strata_comm_t;
typedef struct strata_request strata_request_t;

typedef enum strata_dtype {
    STRATA_DTYPE_F32 = 0,
    STRATA_DTYPE_F64,
    STRATA_DTYPE_F16,  /* IEEE half; reductions accumulate in float32 */
    STRATA_DTYPE_BF16, /* bfloat16; reductions accumulate in float32 */
    STRATA_DTYPE_I32,
    STRATA_DTYPE_I64,
    STRATA_DTYPE_U8,
    STRATA_DTYPE_COUNT
} strata_dtype_t;

typedef enum strata_op {
    STRATA_OP_SUM = 0,
    STRATA_OP_PROD,
    STRATA_OP_MIN,
    STRATA_OP_MAX,
    STRATA_OP_AVG, /* sum divided by the number of ranks (integer division for integer types) */
    STRATA_OP_COUNT
} strata_op_t;

/* Size in bytes of one element, or 0 for an invalid dtype. */
STRATA_API size_t strata_dtype_size(strata_dtype_t dtype);
/* "f32", "bf16", ...; NULL for an invalid dtype. */
STRATA_API const char *strata_dtype_name(strata_dtype_t dtype);

/* Element i of a buffer of `dtype` as a double (f16 and bf16 widened), and the reverse (rounded to
 * the type as the reductions round): for tools and tests that fill and check buffers of any type. */
STRATA_API double strata_dtype_get(strata_dtype_t dtype, const void *buf, size_t i);
STRATA_API void strata_dtype_set(strata_dtype_t dtype, void *buf, size_t i, double v);
/* Parses a dtype name ("float32" and "f32" both work). */
STRATA_API strata_status_t strata_dtype_parse(const char *name, strata_dtype_t *out);
/* "sum", "prod", ...; NULL for an invalid op. */
STRATA_API const char *strata_op_name(strata_op_t op);
STRATA_API strata_status_t strata_op_parse(const char *name, strata_op_t *out);

/* ---- creation ---------------------------------------------------------------------------------- */

/* Where the UCX transport serves peers (STRATA_COMM_TRANSPORT, docs/comm.md "UCX transport"). */
typedef enum strata_comm_ucx {
    STRATA_COMM_UCX_OFF = 0, /* never: shared memory on one host, TCP between hosts */
    STRATA_COMM_UCX_HOSTS,   /* between hosts; shared memory within one ("shm+ucx") */
    STRATA_COMM_UCX_ALL,     /* every peer, within a host too, over UCX's own transports ("ucx") */
} strata_comm_ucx_t;

typedef struct strata_comm_config {
    int rank;               /* this process's rank, 0 <= rank < nranks */
    int nranks;             /* number of ranks in the job */
    const char *store_addr; /* "host:port" of the bootstrap store */
    bool host_store;        /* rank 0 serves the store on store_addr (port 0 is not allowed) */
    bool store_on_rank0;    /* rank 0's process serves the store (true on every rank of such a job:
                               losing the store then means losing rank 0, and errors say so) */
    const char *secret;     /* job secret presented to the store and to peers; NULL = "" */
    const char *job_id;     /* names shared-memory segments; unique per job on a host; required
                               (strata_comm_config_from_env derives one from the store address) */
    long long timeout_ms;   /* timeout for every blocking call; < 0 = never */
    bool force_tcp;         /* use TCP even between ranks of one host */
    strata_comm_ucx_t ucx;  /* which peers UCX serves (a build without UCX refuses all but OFF);
                               set alike on every rank */
} strata_comm_config_t;

/* A config filled from the knobs (STRATA_COMM_TIMEOUT_MS, STRATA_COMM_TRANSPORT, STRATA_SECRET,
 * STRATA_JOB_ID, STRATA_STORE_ADDR); rank and nranks are -1 and must be set. */
STRATA_API strata_comm_config_t strata_comm_config_default(void);

/* Fills `cfg` from the environment of a launcher: strata launch / torchrun (RANK, WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT), Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LAUNCH_NODE_IPADDR), Open MPI
 * (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE) or MPICH/PMI (PMI_RANK, PMI_SIZE). The store address
 * comes from STRATA_STORE_ADDR, else MASTER_ADDR:MASTER_PORT. Rank 0 hosts the store unless
 * STRATA_STORE_EXTERNAL=1 (a standalone `strata store` serves it). The string fields point into the
 * environment or static storage. Errors name the variable that is missing or malformed. */
STRATA_API strata_status_t strata_comm_config_from_env(strata_comm_config_t *cfg);

/* The launcher whose rank variables this process has ("strata launch, torchrun", "Open MPI",
 * "MPICH", "Slurm"), or NULL when none: for messages that suggest starting under one. */
STRATA_API const char *strata_comm_launcher(void);

/* Creates the world communicator; collective over all nranks processes. On failure *out is NULL and
 * nothing leaks. Release with strata_comm_destroy(). */
STRATA_API strata_status_t strata_comm_create(const strata_comm_config_t *cfg,
                                              strata_comm_t **out);

/* strata_comm_config_from_env() then strata_comm_create(). */
STRATA_API strata_status_t strata_comm_create_from_env(strata_comm_t **out);

/* Splits `comm` into disjoint communicators, one per color, ranked by (key, old rank). Collective
 * over `comm`. A rank passing color < 0 takes part but gets *out = NULL. The child shares the
 * parent's connections; destroy children before the parent's world communicator. */
STRATA_API strata_status_t strata_comm_split(strata_comm_t *comm, int color, int key,
                                             strata_comm_t **out);

/* Releases a communicator. Pending requests must have completed. Destroying the world communicator
 * says goodbye to the store so peers do not mistake the exit for a failure. NULL is a no-op. */
STRATA_API void strata_comm_destroy(strata_comm_t *comm);

/* Aborts the whole job's communication: pending and later calls on every communicator of this
 * process fail with STRATA_ERR_ABORTED, and the store tells every other rank, whose calls fail with
 * STRATA_ERR_PEER_FAILED naming this rank and `reason`. The communicator must still be destroyed. */
STRATA_API void strata_comm_abort(strata_comm_t *comm, const char *reason);

STRATA_API int strata_comm_rank(const strata_comm_t *comm);
STRATA_API int strata_comm_size(const strata_comm_t *comm);

/* The first failure seen by this process's communication layer, or STRATA_OK; its message is copied
 * into the calling thread's error buffer (strata_last_error()). */
STRATA_API strata_status_t strata_comm_get_error(const strata_comm_t *comm);

/* What this process's communication has cost so far, for finding stragglers: a rank that waits
 * much less than its peers in the same collectives is the one they wait for. Counts cover every
 * communicator of the process (the world and its splits). */
typedef struct strata_comm_stats {
    uint64_t ops;   /* operations completed (collectives, including the communicator's own set-up
                       exchanges such as the mailboxes' on a first small allreduce, and
                       point-to-point) */
    double wait_s;  /* seconds spent blocked in strata_request_wait and the blocking calls */
} strata_comm_stats_t;

STRATA_API strata_status_t strata_comm_stats(const strata_comm_t *comm, strata_comm_stats_t *out);

/* What this process has measured of the link from one peer, for finding slow links (strata train
 * flags one that runs far below the others; docs/train.md). Every message of at least
 * STRATA_LINK_TIMED_BYTES that arrives from the peer over TCP in more than one read adds the bytes
 * after its first read and the time from the arrival of that read's last byte to the arrival of
 * the message's last byte, as the kernel stamps them (SO_TIMESTAMPNS; where there are no stamps,
 * the clock at the reads): the rate the link delivered while the message was arriving. Neither a
 * late sender (the clock starts with data in hand) nor a late reader (stamps say when bytes
 * arrived, not when they were read) counts, nor do the bytes that waited in the socket for the
 * first read. Counts since creation, over every communicator of the process; all zero for a peer
 * reached through shared memory and for a link whose messages always arrive whole before they are
 * read. The cost: such messages are read with recvmsg() for the stamps, and the kernel stamps
 * arriving packets. */
#define STRATA_LINK_TIMED_BYTES (32 * 1024)

typedef struct strata_link_stats {
    uint64_t messages; /* messages timed */
    uint64_t bytes;    /* their bytes after each one's first read */
    double seconds;    /* from the arrival of each one's first read's last byte to that of its
                          last byte, summed */
} strata_link_stats_t;

/* The link from `peer` (a rank of comm) to this rank. Errors: STRATA_ERR_INVALID_ARG for a NULL
 * argument or a rank outside comm. */
STRATA_API strata_status_t strata_comm_link_stats(const strata_comm_t *comm, int peer,
                                                  strata_link_stats_t *out);

/* Where `rank` (of comm) runs, for messages: "host h07 10.0.0.7, rack1/h07" (its host name, the
 * address of its TCP port, and its path on the fabric when one was given: STRATA_TOPO_PATH or a
 * cluster file), looked up in the bootstrap store when this rank never talked to it; whatever the
 * store cannot say is left out ("" at worst). Not collective; a store round trip at most. Errors:
 * STRATA_ERR_INVALID_ARG for a NULL argument or a rank outside comm. */
STRATA_API strata_status_t strata_comm_rank_where(const strata_comm_t *comm, int rank, char *buf,
                                                  size_t len);

/* ---- memory peers reach directly ---------------------------------------------------------------- */

/* Allocates `bytes` (zeroed, page-aligned) that the other ranks of this host can map: the analogue of
 * ncclMemAlloc or torch's symmetric memory. Any call takes it like other memory; allreduce,
 * reduce_scatter and allgather on a single-host communicator whose buffers all lie in such memory
 * run with plain loads and stores on the peers' buffers (the `direct` algorithms), the fastest path
 * strata has. Other buffers reach peers through cross-memory attach (one kernel copy) or messages.
 * Local to this rank (not collective). Free with strata_mem_free() before destroying the world
 * communicator (destroying it frees what is left). */
STRATA_API strata_status_t strata_mem_alloc(strata_comm_t *comm, size_t bytes, void **out);
/* Frees memory from strata_mem_alloc(); collectives using it must have completed on every rank
 * that may still reach it. NULL is a no-op; any other pointer is an error. */
STRATA_API strata_status_t strata_mem_free(strata_comm_t *comm, void *ptr);

/* ---- requests ---------------------------------------------------------------------------------- */

/* Waits until the request completes or the communicator's timeout passes, then releases it (also on
 * error). Returns the operation's status. NULL is STRATA_OK. */
STRATA_API strata_status_t strata_request_wait(strata_request_t *req);

/* Advances the request without blocking. Sets *done; when *done is true the request has been
 * released and the returned status is the operation's. */
STRATA_API strata_status_t strata_request_test(strata_request_t *req, bool *done);

/* Waits for every request in `reqs` (NULL entries skipped), releasing them all; returns the first
 * error, or STRATA_OK. */
STRATA_API strata_status_t strata_request_wait_all(strata_request_t **reqs, int n);

/* ---- collectives (blocking, then non-blocking) -------------------------------------------------- */

STRATA_API strata_status_t strata_allreduce(strata_comm_t *comm, const void *sendbuf,
                                            void *recvbuf, size_t count, strata_dtype_t dtype,
                                            strata_op_t op);
STRATA_API strata_status_t strata_iallreduce(strata_comm_t *comm, const void *sendbuf,
                                             void *recvbuf, size_t count, strata_dtype_t dtype,
                                             strata_op_t op, strata_request_t **req);

/* recvbuf is significant on root only. */
STRATA_API strata_status_t strata_reduce(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, strata_dtype_t dtype, strata_op_t op,
                                         int root);
STRATA_API strata_status_t strata_ireduce(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                          size_t count, strata_dtype_t dtype, strata_op_t op,
                                          int root, strata_request_t **req);

/* Root's buf is sent; everyone else's buf is overwritten. */
STRATA_API strata_status_t strata_bcast(strata_comm_t *comm, void *buf, size_t count,
                                        strata_dtype_t dtype, int root);
STRATA_API strata_status_t strata_ibcast(strata_comm_t *comm, void *buf, size_t count,
                                         strata_dtype_t dtype, int root, strata_request_t **req);

/* sendbuf holds nranks * recvcount elements; rank r receives the reduced block r. */
STRATA_API strata_status_t strata_reduce_scatter(strata_comm_t *comm, const void *sendbuf,
                                                 void *recvbuf, size_t recvcount,
                                                 strata_dtype_t dtype, strata_op_t op);
STRATA_API strata_status_t strata_ireduce_scatter(strata_comm_t *comm, const void *sendbuf,
                                                  void *recvbuf, size_t recvcount,
                                                  strata_dtype_t dtype, strata_op_t op,
                                                  strata_request_t **req);
/* Uneven blocks: rank r receives recvcounts[r] elements, blocks packed in rank order in sendbuf.
 * In place when recvbuf == sendbuf + (sum of recvcounts[0..rank-1]) * size. */
STRATA_API strata_status_t strata_reduce_scatterv(strata_comm_t *comm, const void *sendbuf,
                                                  void *recvbuf, const size_t *recvcounts,
                                                  strata_dtype_t dtype, strata_op_t op);
STRATA_API strata_status_t strata_ireduce_scatterv(strata_comm_t *comm, const void *sendbuf,
                                                   void *recvbuf, const size_t *recvcounts,
                                                   strata_dtype_t dtype, strata_op_t op,
                                                   strata_request_t **req);

/* recvbuf holds nranks * sendcount elements, block r from rank r. */
STRATA_API strata_status_t strata_allgather(strata_comm_t *comm, const void *sendbuf,
                                            void *recvbuf, size_t sendcount,
                                            strata_dtype_t dtype);
STRATA_API strata_status_t strata_iallgather(strata_comm_t *comm, const void *sendbuf,
                                             void *recvbuf, size_t sendcount, strata_dtype_t dtype,
                                             strata_request_t **req);
/* Rank r contributes recvcounts[r] elements, placed at displs[r] (elements) in recvbuf;
 * displs NULL = packed in rank order. */
STRATA_API strata_status_t strata_allgatherv(strata_comm_t *comm, const void *sendbuf,
                                             void *recvbuf, const size_t *recvcounts,
                                             const size_t *displs, strata_dtype_t dtype);
STRATA_API strata_status_t strata_iallgatherv(strata_comm_t *comm, const void *sendbuf,
                                              void *recvbuf, const size_t *recvcounts,
                                              const size_t *displs, strata_dtype_t dtype,
                                              strata_request_t **req);

/* Block j of sendbuf (count elements) goes to rank j; block i of recvbuf comes from rank i.
 * In place when sendbuf == recvbuf. */
STRATA_API strata_status_t strata_alltoall(strata_comm_t *comm, const void *sendbuf,
                                           void *recvbuf, size_t count, strata_dtype_t dtype);
STRATA_API strata_status_t strata_ialltoall(strata_comm_t *comm, const void *sendbuf,
                                            void *recvbuf, size_t count, strata_dtype_t dtype,
                                            strata_request_t **req);
/* Counts and displacements in elements, one per rank; displs NULL = packed. Not in place. */
STRATA_API strata_status_t strata_alltoallv(strata_comm_t *comm, const void *sendbuf,
                                            const size_t *sendcounts, const size_t *sdispls,
                                            void *recvbuf, const size_t *recvcounts,
                                            const size_t *rdispls, strata_dtype_t dtype);
STRATA_API strata_status_t strata_ialltoallv(strata_comm_t *comm, const void *sendbuf,
                                             const size_t *sendcounts, const size_t *sdispls,
                                             void *recvbuf, const size_t *recvcounts,
                                             const size_t *rdispls, strata_dtype_t dtype,
                                             strata_request_t **req);

/* Root's recvbuf gets nranks * count elements (block r from rank r). In place on root when
 * sendbuf == recvbuf + root * count * size. */
STRATA_API strata_status_t strata_gather(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, strata_dtype_t dtype, int root);
STRATA_API strata_status_t strata_igather(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                          size_t count, strata_dtype_t dtype, int root,
                                          strata_request_t **req);
/* Root's sendbuf holds nranks * count elements; rank r receives block r. In place on root when
 * recvbuf == sendbuf + root * count * size. */
STRATA_API strata_status_t strata_scatter(strata_comm_t *comm, const void *sendbuf, void *recvbuf,
                                          size_t count, strata_dtype_t dtype, int root);
STRATA_API strata_status_t strata_iscatter(strata_comm_t *comm, const void *sendbuf,
                                           void *recvbuf, size_t count, strata_dtype_t dtype,
                                           int root, strata_request_t **req);

STRATA_API strata_status_t strata_barrier(strata_comm_t *comm);
STRATA_API strata_status_t strata_ibarrier(strata_comm_t *comm, strata_request_t **req);

/* ---- point to point ---------------------------------------------------------------------------- */

/* Messages between a pair with the same tag arrive in the order sent. 0 <= tag < 2^31. A receive
 * must be at least as large as the matching send. */
STRATA_API strata_status_t strata_send(strata_comm_t *comm, const void *buf, size_t count,
                                       strata_dtype_t dtype, int peer, int tag);
STRATA_API strata_status_t strata_isend(strata_comm_t *comm, const void *buf, size_t count,
                                        strata_dtype_t dtype, int peer, int tag,
                                        strata_request_t **req);
STRATA_API strata_status_t strata_recv(strata_comm_t *comm, void *buf, size_t count,
                                       strata_dtype_t dtype, int peer, int tag);
STRATA_API strata_status_t strata_irecv(strata_comm_t *comm, void *buf, size_t count,
                                        strata_dtype_t dtype, int peer, int tag,
                                        strata_request_t **req);

/* ---- a standalone bootstrap store (`strata store`, src/comm/bootstrap/store_server.c) ---------- */

/* The job's rendezvous and failure detector, served by a process of its own for jobs whose ranks
 * run with STRATA_STORE_EXTERNAL=1. Single-threaded: the caller polls it. */
typedef struct strata_store_server strata_store_server_t;

typedef struct strata_store_stats {
    int clients;    /* open connections, including those that have not said HELLO yet */
    int live_ranks; /* ranked clients connected and not yet said goodbye */
    int waiting;    /* GET/WAIT requests parked until their keys are set */
    int keys;       /* keys holding a value */
    int notices;    /* failure and abort notices issued so far */
} strata_store_stats_t;

/* Listens on `addr` ("HOST:PORT", port 0 picks one); clients must present `secret` ("" accepts
 * any). Errors: STRATA_ERR_INVALID_ARG for a malformed address, STRATA_ERR_SYSTEM when it cannot
 * bind. */
STRATA_API strata_status_t strata_store_server_open(const char *addr, const char *secret,
                                                    strata_store_server_t **out);
/* The port it listens on. */
STRATA_API int strata_store_server_port(const strata_store_server_t *srv);
/* Serves for up to `timeout_ms` (returns early when a signal interrupts the wait). */
STRATA_API strata_status_t strata_store_server_poll(strata_store_server_t *srv, int timeout_ms);
STRATA_API void strata_store_server_stats(const strata_store_server_t *srv,
                                          strata_store_stats_t *out);
/* Closes every connection and frees the server. NULL is a no-op. */
STRATA_API void strata_store_server_close(strata_store_server_t *srv);

/* ---- algorithms -------------------------------------------------------------------------------- */

/* Collectives are named by strata_coll_t, with strata_coll_name / strata_coll_parse (netmodel.h). */

/* The algorithm registry, for `strata algos` and tools: name and description of the i-th algorithm
 * of a collective; returns false past the end. */
STRATA_API bool strata_algo_info(strata_coll_t coll, int i, const char **name, const char **desc);

/* Name of the algorithm the communicator would pick for `bytes` of float32 sums of this
 * collective (the price,
 * strata/price.h, plus the STRATA_COMM_ALGO override), on buffers from strata_mem_alloc when `mem`
 * is true, from anywhere else otherwise; "mailbox" for a blocking allreduce small enough for the
 * mailboxes (docs/comm.md). Static storage. */
STRATA_API const char *strata_comm_algo_for(const strata_comm_t *comm, strata_coll_t coll,
                                            size_t bytes, bool mem);

/* Where the communicator's ranks sit (topo.h): for each level (innermost first: host, rack, ...),
 * each rank's unit. Built at creation from STRATA_TOPO_PATH / STRATA_TOPO_FILE, else from host
 * identity alone (levels "host" and "tier1"); a split keeps its members' part. Owned by the
 * communicator; NULL only for a NULL comm. Tier colours for hierarchical partitions are
 * strata_fabric_unit(f, level, rank). */
STRATA_API const struct strata_fabric *strata_comm_fabric(const strata_comm_t *comm);

/* How the communicator's fabric links were calibrated at creation (link_calib.h): done = false
 * when they were not (a cluster file gave them, every rank is on one host, or
 * STRATA_TOPO_CALIBRATE=off); otherwise the per-level measurements, the levels fitted from them
 * (the same on every rank; strata_comm_fabric's levels) and what measuring cost. A split reports
 * its parent's. Owned by the communicator; NULL only for a NULL comm. */
STRATA_API const struct strata_link_calib *strata_comm_calibration(const strata_comm_t *comm);

/* Measures the links of every level of the communicator's fabric that its ranks span, as
 * creation does when it calibrates (docs/topology.md): per level a ping-pong of `lat_rounds`
 * round trips (0: 20), a stream between one pair and concurrent streams across one uplink, each
 * of `stream_bytes` (0: sized to last about STRATA_TOPO_CALIBRATE_MS). Collective: every rank
 * calls it and gets the same samples and fitted levels in *out; the communicator keeps its own
 * levels. `strata probe` runs it. Errors: those of the communicator; STRATA_ERR_INVALID_ARG for
 * bad arguments, or when a level's measurement is not physical (then *out has the samples and
 * done = false). */
STRATA_API strata_status_t strata_comm_measure_links(strata_comm_t *comm, int lat_rounds,
                                                     size_t stream_bytes,
                                                     struct strata_link_calib *out);

/* The price (strata/price.h), in seconds, of `coll` on `bytes` (sized as for strata_comm_algo_for)
 * with the algorithm strata_comm_algo_for names; negative when there is none. The price is taken
 * on the communicator's fabric (STRATA_TOPO_PATH / STRATA_TOPO_FILE, else host identity) with
 * efficiency 1 and the reduction cost of its link: the same price the planner predicts for a
 * group of that shape. */
STRATA_API double strata_comm_predict(const strata_comm_t *comm, strata_coll_t coll, size_t bytes,
                                      bool mem);

#ifdef __cplusplus
}
#endif
#endif
