/* Status codes and error messages shared by every strata call.
 *
 * Every fallible call returns a strata_status_t: 0 is success, a positive value is "not an error"
 * (an operation still in progress), a negative value is an error. The code that detects an error also
 * writes a readable message into a per-thread buffer; strata_last_error() returns it. The message is
 * valid until the next failing strata call on the same thread.
 */
#ifndef STRATA_STATUS_H
#define STRATA_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define STRATA_API __attribute__((visibility("default")))
#else
#define STRATA_API
#endif

typedef enum strata_status {
    STRATA_OK = 0,
    STRATA_INPROGRESS = 1,        /* not an error: the operation has not finished yet */
    STRATA_ERR_INVALID_ARG = -1,  /* a caller passed a bad argument */
    STRATA_ERR_NO_MEMORY = -2,    /* an allocation failed */
    STRATA_ERR_SYSTEM = -3,       /* a system call failed; the message carries strerror */
    STRATA_ERR_IO = -4,           /* reading or writing a file failed */
    STRATA_ERR_PARSE = -5,        /* malformed input; the message names file, line and expectation */
    STRATA_ERR_TIMEOUT = -6,      /* an operation did not finish within its timeout */
    STRATA_ERR_PEER_FAILED = -7,  /* a peer died or closed its connection; the message names it */
    STRATA_ERR_REMOTE = -8,       /* a remote party reported an error or broke the protocol */
    STRATA_ERR_UNSUPPORTED = -9,  /* valid request that this build or algorithm cannot serve */
    STRATA_ERR_INTERNAL = -10,    /* a broken invariant inside strata: a bug */
    STRATA_ERR_ABORTED = -11,     /* the communicator was aborted */
} strata_status_t;

/* A constant, static name for a status ("STRATA_ERR_TIMEOUT"); never NULL. */
STRATA_API const char *strata_status_name(strata_status_t status);

/* A short constant description of a status ("operation timed out"); never NULL. */
STRATA_API const char *strata_status_str(strata_status_t status);

/* The message of the last error raised on the calling thread, or "" if none. Thread-safe: each
 * thread has its own buffer. The string stays valid until the next error on this thread. */
STRATA_API const char *strata_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
