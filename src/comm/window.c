/* Windows: this process's shareable regions and its mappings of peers' regions (see window.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/base.h"
#include "comm/window.h"

#define MAX_MAPPED 64 /* peer regions kept mapped; the oldest is unmapped beyond this */

typedef struct region {
    uint64_t id;
    int fd;
    char *base;
    size_t size;
} region_t;

typedef struct mapped {
    int peer;
    uint64_t region;
    char *base;
    size_t size;
} mapped_t;

struct st_win {
    bool cma_ok;
    bool can_map; /* pidfd_getfd works: peers' regions can be mapped */
    pid_t pid;
    region_t *regions;
    int nregions, cap;
    uint64_t next_id;
    mapped_t mapped[MAX_MAPPED];
    int nmapped, evict;
};

static int read_int_file(const char *path, int fallback)
{
    FILE *f = fopen(path, "r");
    int v = fallback;
    if (f) {
        if (fscanf(f, "%d", &v) != 1)
            v = fallback;
        fclose(f);
    }
    return v;
}

/* CMA to sibling processes needs ptrace permission. With Yama's "restricted" mode (1) a process
 * may name who can attach to it: any process of this user, here (as Open MPI's vader does). */
static bool cma_probe(void)
{
    if (st_knob_int("STRATA_SHM_CMA", 1) == 0)
        return false;
    int yama = read_int_file("/proc/sys/kernel/yama/ptrace_scope", 0);
    if (yama >= 2)
        return false;
    if (yama == 1)
        prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    // A seccomp filter (container default profiles) refuses the call whatever the target.
    static const uint64_t probe = 0x5354524154414bull;
    uint64_t got = 0;
    struct iovec l = {&got, sizeof got}, r = {(void *)&probe, sizeof probe};
    return process_vm_readv(getpid(), &l, 1, &r, 1, 0) == (ssize_t)sizeof got && got == probe;
}

static bool getfd_probe(void)
{
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (pidfd < 0)
        return false;
    int fd = (int)syscall(SYS_pidfd_getfd, pidfd, pidfd, 0);
    close(pidfd);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

strata_status_t st_win_create(st_win_t **out)
{
    st_win_t *w = calloc(1, sizeof *w);
    if (!w)
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
    w->pid = getpid();
    w->cma_ok = cma_probe();
    w->can_map = getfd_probe();
    w->next_id = 1;
    ST_LOG_DEBUG(ST_SUB_COMM, "window: cross-memory attach %s, region mapping %s",
                 w->cma_ok ? "works" : "unavailable", w->can_map ? "works" : "unavailable");
    *out = w;
    return STRATA_OK;
}

void st_win_destroy(st_win_t *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->nmapped; i++)
        munmap(w->mapped[i].base, w->mapped[i].size);
    for (int i = 0; i < w->nregions; i++) {
        munmap(w->regions[i].base, w->regions[i].size);
        close(w->regions[i].fd);
    }
    free(w->regions);
    free(w);
}

bool st_win_cma_ok(const st_win_t *w)
{
    return w->cma_ok;
}

strata_status_t st_win_alloc(st_win_t *w, size_t bytes, void **out)
{
    *out = NULL;
    if (bytes == 0)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_mem_alloc: size is 0");
    if (w->nregions == w->cap) {
        int ncap = w->cap ? 2 * w->cap : 8;
        region_t *r = realloc(w->regions, (size_t)ncap * sizeof *r);
        if (!r)
            return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
        w->regions = r;
        w->cap = ncap;
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE), size = (bytes + page - 1) / page * page;
    int fd = memfd_create("strata-mem", MFD_CLOEXEC);
    if (fd < 0)
        return st_error_errno(STRATA_ERR_SYSTEM, errno, "strata_mem_alloc: memfd_create");
    if (ftruncate(fd, (off_t)size) != 0) {
        int e = errno;
        close(fd);
        return st_error_errno(STRATA_ERR_NO_MEMORY, e, "strata_mem_alloc: %zu bytes", bytes);
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return st_error_errno(STRATA_ERR_NO_MEMORY, e, "strata_mem_alloc: mapping %zu bytes", bytes);
    }
    w->regions[w->nregions++] = (region_t){.id = w->next_id++, .fd = fd, .base = p, .size = size};
    *out = p;
    return STRATA_OK;
}

strata_status_t st_win_free(st_win_t *w, void *p)
{
    for (int i = 0; i < w->nregions; i++) {
        if (w->regions[i].base != p)
            continue;
        munmap(w->regions[i].base, w->regions[i].size);
        close(w->regions[i].fd);
        w->regions[i] = w->regions[--w->nregions];
        return STRATA_OK;
    }
    return st_error(STRATA_ERR_INVALID_ARG, "strata_mem_free: %p was not returned by strata_mem_alloc",
                    p);
}

/* The region holding [p, p + bytes), or NULL. */
static const region_t *region_of(const st_win_t *w, const void *p, size_t bytes)
{
    const char *c = p;
    for (int i = 0; i < w->nregions; i++)
        if (c >= w->regions[i].base && c + bytes <= w->regions[i].base + w->regions[i].size)
            return &w->regions[i];
    return NULL;
}

bool st_win_owns(const st_win_t *w, const void *p)
{
    return region_of(w, p, 1) != NULL;
}

void st_win_describe(const st_win_t *w, const void *p, size_t bytes, st_buf_desc_t *d)
{
    memset(d, 0, sizeof *d);
    d->pid = w->pid;
    d->fd = -1;
    d->addr = (uint64_t)(uintptr_t)p;
    const region_t *r = region_of(w, p, bytes);
    if (r) {
        d->region = r->id;
        d->fd = r->fd;
        d->offset = (uint64_t)((const char *)p - r->base);
    }
}

/* Maps region `d` of `peer`: the owner's memfd, duplicated through a pidfd, mapped whole. Returns
 * the cache entry, or NULL with errno set. */
static mapped_t *map_region(st_win_t *w, int peer, const st_buf_desc_t *d)
{
    int pidfd = (int)syscall(SYS_pidfd_open, d->pid, 0);
    int fd = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, d->fd, 0);
    int e = errno;
    if (pidfd >= 0)
        close(pidfd);
    if (fd < 0) {
        errno = e;
        return NULL;
    }
    off_t size = lseek(fd, 0, SEEK_END);
    void *p = size > 0 ? mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                              fd, 0)
                       : MAP_FAILED;
    e = size > 0 ? errno : EBADF;
    close(fd);
    if (p == MAP_FAILED) {
        errno = e;
        return NULL;
    }
    if (w->nmapped == MAX_MAPPED) { // the oldest mappings go first, round robin
        mapped_t *old = &w->mapped[w->evict];
        munmap(old->base, old->size);
        *old = w->mapped[--w->nmapped];
        w->evict = (w->evict + 1) % MAX_MAPPED;
    }
    mapped_t *m = &w->mapped[w->nmapped++];
    *m = (mapped_t){.peer = peer, .region = d->region, .base = p, .size = (size_t)size};
    return m;
}

int st_win_map(st_win_t *w, int peer, const st_buf_desc_t *d, size_t bytes, void **out)
{
    *out = NULL;
    if (!d->region || !w->can_map)
        return 0;
    mapped_t *m = NULL;
    for (int i = 0; i < w->nmapped && !m; i++)
        if (w->mapped[i].peer == peer && w->mapped[i].region == d->region)
            m = &w->mapped[i];
    if (!m && !(m = map_region(w, peer, d)))
        return errno ? errno : EIO;
    if (d->offset + bytes > m->size)
        return ERANGE;
    *out = m->base + d->offset;
    return 0;
}

int st_win_copy(const st_buf_desc_t *d, size_t off, void *local, size_t len, bool to_peer)
{
    while (len) {
        struct iovec l = {local, len}, r = {(void *)(uintptr_t)(d->addr + off), len};
        ssize_t n = to_peer ? process_vm_writev(d->pid, &l, 1, &r, 1, 0)
                            : process_vm_readv(d->pid, &l, 1, &r, 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : EFAULT;
        local = (char *)local + n;
        off += (size_t)n;
        len -= (size_t)n;
    }
    return 0;
}
