/* Status names and the per-thread error message. The detector of an error formats the message once;
 * callers only propagate the code. A thread-local buffer (not a process-global one) keeps messages
 * from racing between communicators and threads. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"

static _Thread_local char last_error[1024];

const char *strata_status_name(strata_status_t status)
{
    switch (status) {
    case STRATA_OK: return "STRATA_OK";
    case STRATA_INPROGRESS: return "STRATA_INPROGRESS";
    case STRATA_ERR_INVALID_ARG: return "STRATA_ERR_INVALID_ARG";
    case STRATA_ERR_NO_MEMORY: return "STRATA_ERR_NO_MEMORY";
    case STRATA_ERR_SYSTEM: return "STRATA_ERR_SYSTEM";
    case STRATA_ERR_IO: return "STRATA_ERR_IO";
    case STRATA_ERR_PARSE: return "STRATA_ERR_PARSE";
    case STRATA_ERR_TIMEOUT: return "STRATA_ERR_TIMEOUT";
    case STRATA_ERR_PEER_FAILED: return "STRATA_ERR_PEER_FAILED";
    case STRATA_ERR_REMOTE: return "STRATA_ERR_REMOTE";
    case STRATA_ERR_UNSUPPORTED: return "STRATA_ERR_UNSUPPORTED";
    case STRATA_ERR_INTERNAL: return "STRATA_ERR_INTERNAL";
    case STRATA_ERR_ABORTED: return "STRATA_ERR_ABORTED";
    }
    return "STRATA_ERR_UNKNOWN";
}

const char *strata_status_str(strata_status_t status)
{
    switch (status) {
    case STRATA_OK: return "success";
    case STRATA_INPROGRESS: return "operation in progress";
    case STRATA_ERR_INVALID_ARG: return "invalid argument";
    case STRATA_ERR_NO_MEMORY: return "out of memory";
    case STRATA_ERR_SYSTEM: return "system call failed";
    case STRATA_ERR_IO: return "input/output error";
    case STRATA_ERR_PARSE: return "malformed input";
    case STRATA_ERR_TIMEOUT: return "operation timed out";
    case STRATA_ERR_PEER_FAILED: return "peer failed";
    case STRATA_ERR_REMOTE: return "remote error";
    case STRATA_ERR_UNSUPPORTED: return "unsupported";
    case STRATA_ERR_INTERNAL: return "internal error";
    case STRATA_ERR_ABORTED: return "communicator aborted";
    }
    return "unknown status";
}

const char *strata_last_error(void)
{
    return last_error;
}

void st_error_set(const char *msg)
{
    if (msg != last_error)
        snprintf(last_error, sizeof last_error, "%s", msg);
}

strata_status_t st_error(strata_status_t status, const char *fmt, ...)
{
    // Format into a scratch buffer first: fmt arguments may point into last_error itself.
    char tmp[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    memcpy(last_error, tmp, sizeof tmp);
    ST_LOG_DEBUG(ST_SUB_BASE, "%s: %s", strata_status_name(status), last_error);
    return status;
}

strata_status_t st_error_errno(strata_status_t status, int err, const char *fmt, ...)
{
    char tmp[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n < sizeof tmp)
        snprintf(tmp + n, sizeof tmp - (size_t)n, ": %s", strerror(err));
    memcpy(last_error, tmp, sizeof tmp);
    ST_LOG_DEBUG(ST_SUB_BASE, "%s: %s", strata_status_name(status), last_error);
    return status;
}
