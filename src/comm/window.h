/* Windows: reaching another rank's memory on the same host, for the direct algorithms (algo/direct.c).
 *
 * A rank describes a buffer of its own with st_win_describe(); a peer on the same host that holds
 * the description reaches the buffer in one of two ways:
 * - mapped: the buffer lies in memory from strata_mem_alloc() (a memfd the peer duplicates with
 *   pidfd_getfd and maps once, cached), so the peer reads and writes it with loads and stores;
 * - CMA: any other buffer is copied with process_vm_readv / process_vm_writev, one kernel copy
 *   (cross-memory attach: same user and ptrace permission, which a self-test checks at start-up).
 * Either way a byte crosses between processes once, where a message through the shared-memory rings
 * is copied twice (into a slot, out of it). Windows are used only inside one host.
 */
#ifndef ST_WINDOW_H
#define ST_WINDOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

typedef struct st_win st_win_t;

/* A buffer as its owner publishes it: its address in the owner (for CMA) and, when it lies in a
 * strata_mem_alloc() region (region != 0), that region's id, the memfd's number in the owner and the
 * offset in it. */
typedef struct st_buf_desc {
    int32_t pid;
    int32_t fd;
    uint64_t region;
    uint64_t offset;
    uint64_t addr;
} st_buf_desc_t;

strata_status_t st_win_create(st_win_t **out);
/* Unmaps every peer region and frees every region still allocated here. */
void st_win_destroy(st_win_t *w);

/* True when peers on this host can reach buffers of this process that are not from
 * strata_mem_alloc() (CMA works here and STRATA_SHM_CMA is not 0). The direct algorithms need it. */
bool st_win_cma_ok(const st_win_t *w);

/* strata_mem_alloc / strata_mem_free on this process's window. */
strata_status_t st_win_alloc(st_win_t *w, size_t bytes, void **out);
strata_status_t st_win_free(st_win_t *w, void *p);

/* True when p lies in memory from strata_mem_alloc(). */
bool st_win_owns(const st_win_t *w, const void *p);

/* Describes [p, p + bytes) of this process for peers. */
void st_win_describe(const st_win_t *w, const void *p, size_t bytes, st_buf_desc_t *d);

/* Where a peer's buffer can be touched directly: sets *out to the local address of byte 0 of `d` (a
 * mapped region, mapped now if need be), or to NULL when it must go through st_win_copy. `peer`
 * (the owner's world rank) keys the cache. Returns 0, or the errno when the region cannot be
 * reached (ESRCH: the owner has exited; EBADF: it freed the region; ERANGE: `bytes` run past it). */
int st_win_map(st_win_t *w, int peer, const st_buf_desc_t *d, size_t bytes, void **out);

/* Copies `len` bytes between this process and byte `off` of a peer's buffer `d` through CMA:
 * into `local` when `to_peer` is false, out of it otherwise. Returns the errno on failure (ESRCH:
 * the owner has exited), 0 on success. */
int st_win_copy(const st_buf_desc_t *d, size_t off, void *local, size_t len, bool to_peer);

#endif
