/* Windows: reaching another rank's memory on the same host, for the direct algorithms (algo/direct.c).
 *
 * A rank describes a buffer of its own with st_win_describe(); a peer on the same host that holds
 * the description reaches the buffer in one of two ways:
 * - mapped: the buffer lies in memory from strata_mem_alloc(), or in user memory the window has
 *   adopted (below): a memfd the peer duplicates with pidfd_getfd and maps once, cached, so the peer
 *   reads and writes it with loads and stores;
 * - CMA: any other buffer (and the partial pages at an adopted buffer's ends) is copied with
 *   process_vm_readv / process_vm_writev, one kernel copy (cross-memory attach: same user and ptrace
 *   permission, which a self-test checks at start-up). CMA pins the peer's pages on every call.
 *
 * Adoption brings the user's own buffers (malloc, new, numpy) to the mapped path, as NCCL's
 * user-buffer registration and Open MPI's xpmem do. The whole pages inside the buffer are copied
 * once into a memfd, which is then mapped over them at the same address (MAP_FIXED): the user's
 * pointer and data are unchanged, but the pages are now shareable. A later call on the same buffer
 * finds the region again; one whose pages were unmapped or replaced since (free, munmap, a new
 * allocation at the same address) is detected, by asking the kernel which mapping covers the
 * address (the PROCMAP_QUERY ioctl, else /proc/self/maps), and adopted afresh. Adopted pages stay
 * shared after a fork (parent and child see each other's writes there): STRATA_SHM_ADOPT=0 turns
 * adoption off.
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

/* A buffer as its owner publishes it: its address in the owner (for CMA) and, when (part of) it lies
 * in a shareable region (region != 0), that region's id, the memfd's number in the owner, and which
 * bytes of the buffer the region holds: [lo, hi), byte lo at `offset` in the memfd. `epoch` counts
 * the owner's adopted regions found stale so far: a peer seeing it move unmaps what it had mapped
 * of them, so memory the user freed is not kept alive by peers. */
typedef struct st_buf_desc {
    int32_t pid;
    int32_t fd;
    uint64_t region;
    uint64_t offset;
    uint64_t lo, hi;
    uint64_t addr;
    uint32_t epoch;
    uint32_t adopted;
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

/* The smallest buffer adopted (STRATA_SHM_ADOPT bytes; 0: adoption is off or impossible here). The
 * same on every rank that sets the knob alike, so callers may choose an algorithm by it. */
size_t st_win_adopt_min(const st_win_t *w);

/* Makes the window read /proc/self/maps as text, as it does on kernels before 6.11 without the
 * PROCMAP_QUERY ioctl (tests of that path). */
void st_win_use_maps_text(st_win_t *w);

/* Describes [p, p + bytes) of this process for peers. A buffer outside strata_mem_alloc memory of
 * at least st_win_adopt_min() bytes is adopted first (see above); where that cannot be done (a
 * stack or file-backed buffer, no whole page inside, a failing memfd) it is described for CMA only.
 * Drops adopted regions whose pages have gone. */
void st_win_describe(st_win_t *w, const void *p, size_t bytes, st_buf_desc_t *d);

/* Describes two buffers that one operation uses together (a collective's send and receive
 * buffers), both at the same epoch, so that a peer mapping one never takes the other's region for
 * a dropped one. */
void st_win_describe_pair(st_win_t *w, const void *p, size_t bytes, st_buf_desc_t *d,
                          const void *q, size_t qbytes, st_buf_desc_t *e);

/* Where bytes [at, at + len) of a peer's buffer can be touched directly: sets *out to the local
 * address of byte `at` (a mapped region, mapped now if need be), or to NULL when they must go
 * through st_win_copy (no region, or the range reaches outside it). `peer` (the owner's world
 * rank) keys the cache. Returns 0, or the errno when the region cannot be reached (ESRCH: the owner
 * has exited; EBADF: it freed the region; ERANGE: the region is shorter than described). The
 * address stays valid while fewer than 64 other regions are used after it (the cache unmaps the
 * least recently used first), so a step may hold the addresses of several regions at once. */
int st_win_map(st_win_t *w, int peer, const st_buf_desc_t *d, size_t at, size_t len, void **out);

/* Maps the whole region of a peer's buffer `d` for the caller, outside the cache (the caller keeps
 * it as long as it likes and unmaps *out, *size itself). Returns 0 or the errno. */
int st_win_map_own(const st_buf_desc_t *d, void **out, size_t *size);

/* Copies `len` bytes between this process and byte `off` of a peer's buffer `d` through CMA:
 * into `local` when `to_peer` is false, out of it otherwise. Returns the errno on failure (ESRCH:
 * the owner has exited), 0 on success. */
int st_win_copy(const st_buf_desc_t *d, size_t off, void *local, size_t len, bool to_peer);

#endif
