/* Windows: this process's shareable regions and its mappings of peers' regions (see window.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/base.h"
#include "comm/window.h"

#define MAX_MAPPED 64 /* peer regions kept mapped; the least recently used is unmapped beyond this */
#define ADOPT_MIN_DEFAULT (1u << 20)

typedef struct region {
    uint64_t id;
    int fd;
    char *base;
    size_t size;
    bool adopted; /* user pages remapped onto fd; base/size are theirs and stay the user's */
    uint64_t ino; /* the memfd's inode and device, to recognise the mapping */
    uint32_t dev_major, dev_minor;
} region_t;

typedef struct mapped {
    int peer;
    uint64_t region;
    char *base;
    size_t size;
    bool adopted;
    uint32_t epoch; /* the owner's epoch when mapped (adopted regions) */
    uint64_t used;  /* the window's clock at the last use: the least recent is unmapped first */
} mapped_t;

struct st_win {
    bool cma_ok;
    bool can_map; /* pidfd_getfd works: peers' regions can be mapped */
    pid_t pid;
    size_t adopt_min; /* 0: no adoption */
    int maps_fd;      /* /proc/self/maps, for PROCMAP_QUERY; -1: parse the text instead */
    uint32_t epoch;   /* adopted regions found stale so far */
    region_t *regions;
    int nregions, cap;
    uint64_t next_id;
    mapped_t mapped[MAX_MAPPED];
    int nmapped;
    uint64_t clock; /* counts st_win_map calls */
};

/* The kernel's PROCMAP_QUERY ioctl on /proc/self/maps (Linux 6.11; older headers lack it): the
 * mapping that covers an address, without formatting the whole maps file. */
struct st_procmap_query {
    uint64_t size, query_flags, query_addr;
    uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
    uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
    uint64_t vma_name_addr, build_id_addr;
};
#define ST_PROCMAP_QUERY _IOWR('f', 17, struct st_procmap_query)
#define ST_PROCMAP_WRITE 0x2 /* vma_flags: writable */
#define ST_PROCMAP_SHARED 0x8

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
    w->maps_fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    struct st_procmap_query q = {.size = sizeof q, .query_addr = (uint64_t)(uintptr_t)&w->pid};
    if (w->maps_fd >= 0 && ioctl(w->maps_fd, ST_PROCMAP_QUERY, &q) != 0) {
        close(w->maps_fd);
        w->maps_fd = -1;
    }
    long long min = st_knob_int("STRATA_SHM_ADOPT", ADOPT_MIN_DEFAULT);
    w->adopt_min = min > 0 && w->can_map && w->cma_ok ? (size_t)min : 0;
    ST_LOG_DEBUG(ST_SUB_COMM, "window: cross-memory attach %s, region mapping %s, adoption %s%s",
                 w->cma_ok ? "works" : "unavailable", w->can_map ? "works" : "unavailable",
                 w->adopt_min ? "on" : "off", w->maps_fd >= 0 ? " (PROCMAP_QUERY)" : "");
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
        if (!w->regions[i].adopted) // adopted pages are the user's memory: they stay mapped
            munmap(w->regions[i].base, w->regions[i].size);
        close(w->regions[i].fd);
    }
    if (w->maps_fd >= 0)
        close(w->maps_fd);
    free(w->regions);
    free(w);
}

bool st_win_cma_ok(const st_win_t *w)
{
    return w->cma_ok;
}

size_t st_win_adopt_min(const st_win_t *w)
{
    return w->adopt_min;
}

void st_win_use_maps_text(st_win_t *w)
{
    if (w->maps_fd >= 0)
        close(w->maps_fd);
    w->maps_fd = -1;
}

static bool room_for_region(st_win_t *w)
{
    if (w->nregions == w->cap) {
        int ncap = w->cap ? 2 * w->cap : 8;
        region_t *r = realloc(w->regions, (size_t)ncap * sizeof *r);
        if (!r)
            return false;
        w->regions = r;
        w->cap = ncap;
    }
    return true;
}

strata_status_t st_win_alloc(st_win_t *w, size_t bytes, void **out)
{
    *out = NULL;
    if (bytes == 0)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_mem_alloc: size is 0");
    if (!room_for_region(w))
        return st_error(STRATA_ERR_NO_MEMORY, "out of memory");
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
        if (w->regions[i].base != p || w->regions[i].adopted)
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
    const region_t *r = region_of(w, p, 1);
    return r && !r->adopted;
}

/* The mapping that covers `addr` as the kernel sees it (/proc/self/maps): its bounds, whether it is
 * writable and shared, its file offset and inode, and its name ("[stack]", a path, or ""). */
typedef struct vma {
    uint64_t start, end, offset, inode;
    uint32_t dev_major, dev_minor;
    bool writable, shared;
    char name[64];
} vma_t;

static bool vma_query(const st_win_t *w, const void *addr, vma_t *v)
{
    memset(v, 0, sizeof *v);
    uint64_t a = (uint64_t)(uintptr_t)addr;
    if (w->maps_fd >= 0) {
        char name[sizeof v->name] = "";
        struct st_procmap_query q = {.size = sizeof q, .query_addr = a, .vma_name_size = sizeof name,
                                     .vma_name_addr = (uint64_t)(uintptr_t)name};
        if (ioctl(w->maps_fd, ST_PROCMAP_QUERY, &q) != 0)
            return false;
        *v = (vma_t){.start = q.vma_start, .end = q.vma_end, .offset = q.vma_offset,
                     .inode = q.inode, .dev_major = q.dev_major, .dev_minor = q.dev_minor,
                     .writable = q.vma_flags & ST_PROCMAP_WRITE,
                     .shared = q.vma_flags & ST_PROCMAP_SHARED};
        if (q.vma_name_size) // the kernel wrote a name (with its terminating zero)
            memcpy(v->name, name, sizeof name);
        return true;
    }
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return false;
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long long s, e, off, ino;
        unsigned maj, min;
        char perms[8];
        int name_at = 0;
        if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &s, &e, perms, &off, &maj, &min, &ino,
                   &name_at) < 7 || a < s || a >= e)
            continue;
        found = true;
        *v = (vma_t){.start = s, .end = e, .offset = off, .inode = ino, .dev_major = maj,
                     .dev_minor = min,
                     .writable = perms[1] == 'w', .shared = perms[3] == 's'};
        if (name_at > 0)
            snprintf(v->name, sizeof v->name, "%.*s", (int)strcspn(line + name_at, "\n"),
                     line + name_at);
    }
    fclose(f);
    return found;
}

/* True while the adopted region's pages are still its memfd, mapped whole where it put them. */
static bool adopted_live(const st_win_t *w, const region_t *r)
{
    vma_t v;
    const uint64_t base = (uint64_t)(uintptr_t)r->base;
    return vma_query(w, r->base, &v) && v.shared && v.inode == r->ino &&
           v.dev_major == r->dev_major && v.dev_minor == r->dev_minor &&
           v.end >= base + r->size && v.offset + (base - v.start) == 0;
}

static void drop_region(st_win_t *w, int i)
{
    if (w->regions[i].adopted)
        w->epoch++;
    close(w->regions[i].fd);
    w->regions[i] = w->regions[--w->nregions];
}

#define ADOPTED_NAME "strata-adopted" /* the memfd's name; maps show "/memfd:strata-adopted (deleted)" */

/* The whole pages of [p, p + bytes): [*a, *b), empty when there is none. */
static void whole_pages(const void *p, size_t bytes, uintptr_t *a, uintptr_t *b)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    *a = ((uintptr_t)p + page - 1) & ~(page - 1);
    *b = ((uintptr_t)p + bytes) & ~(page - 1);
}

/* True when every mapping over [a, b) may be adopted: private anonymous writable memory that is not
 * the stack, or pages adopted before (a buffer reallocated over an older, smaller one). */
static bool adoptable(const st_win_t *w, uintptr_t a, uintptr_t b)
{
    for (uintptr_t at = a; at < b;) {
        vma_t v;
        if (!vma_query(w, (void *)at, &v) || !v.writable)
            return false;
        bool anonymous = !v.shared && !v.inode && strcmp(v.name, "[stack]") != 0;
        if (!anonymous && !strstr(v.name, "/memfd:" ADOPTED_NAME))
            return false;
        at = (uintptr_t)v.end;
    }
    return true;
}

/* Adopts the whole pages [a, b) (window.h). Returns the region, or NULL where they cannot be
 * adopted (see adoptable) or there is no memory for the memfd; the user's pages are then untouched.
 * Adopted regions the new one covers are dropped. */
static const region_t *adopt(st_win_t *w, uintptr_t a, uintptr_t b)
{
    if (b <= a || !adoptable(w, a, b) || !room_for_region(w))
        return NULL;
    size_t size = b - a;
    int fd = memfd_create(ADOPTED_NAME, MFD_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    void *q = MAP_FAILED;
    // The memfd gets the pages' contents, then replaces them at the same address.
    if (ftruncate(fd, (off_t)size) == 0 && fstat(fd, &st) == 0) {
        size_t done = 0;
        while (done < size) {
            ssize_t n = pwrite(fd, (const char *)a + done, size - done, (off_t)done);
            if (n <= 0 && errno != EINTR)
                break;
            done += n > 0 ? (size_t)n : 0;
        }
        if (done == size)
            q = mmap((void *)a, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE,
                     fd, 0);
    }
    if (q == MAP_FAILED) {
        close(fd);
        return NULL;
    }
    for (int i = 0; i < w->nregions; i++)
        if (w->regions[i].adopted && (uintptr_t)w->regions[i].base < b &&
            a < (uintptr_t)w->regions[i].base + w->regions[i].size)
            drop_region(w, i--);
    region_t *r = &w->regions[w->nregions++];
    *r = (region_t){.id = w->next_id++, .fd = fd, .base = (char *)a, .size = size, .adopted = true,
                    .ino = (uint64_t)st.st_ino, .dev_major = major(st.st_dev),
                    .dev_minor = minor(st.st_dev)};
    ST_LOG_DEBUG(ST_SUB_COMM, "window: adopted %zu bytes at %p", size, (void *)a);
    return r;
}

/* The region for a buffer to describe: strata_mem_alloc memory that holds it whole, a live adopted
 * region that holds its whole pages, one adopted now, or else whichever region holds part of it
 * (the rest goes through CMA). Stale adopted regions met on the way are dropped. */
static const region_t *share(st_win_t *w, const void *p, size_t bytes)
{
    const char *c = p;
    uintptr_t a, b;
    whole_pages(p, bytes, &a, &b);
    int part = -1;
    for (int i = 0; i < w->nregions; i++) {
        region_t *r = &w->regions[i];
        if (c >= r->base + r->size || r->base >= c + bytes)
            continue;
        if (r->adopted && !adopted_live(w, r)) {
            drop_region(w, i--);
            continue;
        }
        uintptr_t lo = (uintptr_t)r->base, hi = lo + r->size;
        if ((!r->adopted && c >= r->base && c + bytes <= r->base + r->size) ||
            (r->adopted && lo <= a && hi >= b))
            return r;
        part = i;
    }
    const region_t *r = w->adopt_min && bytes >= w->adopt_min ? adopt(w, a, b) : NULL;
    return r ? r : part >= 0 ? &w->regions[part] : NULL; // adopt() keeps the regions when it fails
}

void st_win_describe(st_win_t *w, const void *p, size_t bytes, st_buf_desc_t *d)
{
    memset(d, 0, sizeof *d);
    d->pid = w->pid;
    d->fd = -1;
    d->addr = (uint64_t)(uintptr_t)p;
    d->epoch = w->epoch;
    const region_t *r = p && bytes ? share(w, p, bytes) : NULL;
    if (!r)
        return;
    d->region = r->id;
    d->fd = r->fd;
    d->adopted = r->adopted;
    d->epoch = w->epoch; // share() may have moved it
    // The bytes of the buffer the region holds: all of them, or (adopted) its whole pages.
    const char *c = p, *from = ST_MAX(c, r->base), *to = ST_MIN(c + bytes, r->base + r->size);
    d->offset = (uint64_t)(from - r->base);
    d->lo = (uint64_t)(from - c);
    d->hi = (uint64_t)(to - c);
}

int st_win_map_own(const st_buf_desc_t *d, void **out, size_t *size)
{
    *out = NULL;
    *size = 0;
    if (!d->region)
        return EINVAL;
    int pidfd = (int)syscall(SYS_pidfd_open, d->pid, 0);
    int fd = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, d->fd, 0);
    int e = errno;
    if (pidfd >= 0)
        close(pidfd);
    if (fd < 0)
        return e;
    off_t len = lseek(fd, 0, SEEK_END);
    void *p = len > 0 ? mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                             fd, 0)
                      : MAP_FAILED;
    e = len > 0 ? errno : EBADF;
    close(fd);
    if (p == MAP_FAILED)
        return e;
    *out = p;
    *size = (size_t)len;
    return 0;
}

/* Maps region `d` of `peer` whole (the owner's memfd, duplicated through a pidfd) into the cache.
 * Returns the cache entry, or NULL with errno set. */
void st_win_describe_pair(st_win_t *w, const void *p, size_t bytes, st_buf_desc_t *d,
                          const void *q, size_t qbytes, st_buf_desc_t *e)
{
    // Describing one may drop or merge regions the other's description names (two buffers in the
    // pages of one allocation are adopted as one region): describe both again until neither moved
    // the epoch. Each pass can only drop regions, so this ends.
    do {
        st_win_describe(w, p, bytes, d);
        st_win_describe(w, q, qbytes, e);
    } while (d->epoch != e->epoch);
}

static mapped_t *map_region(st_win_t *w, int peer, const st_buf_desc_t *d)
{
    void *p;
    size_t size;
    int e = st_win_map_own(d, &p, &size);
    if (e) {
        errno = e;
        return NULL;
    }
    if (w->nmapped == MAX_MAPPED) {
        // The least recently used goes: never one that the caller obtained in its current step
        // (a step touches at most a few mappings per peer) and may still hold.
        int lru = 0;
        for (int i = 1; i < w->nmapped; i++)
            lru = w->mapped[i].used < w->mapped[lru].used ? i : lru;
        munmap(w->mapped[lru].base, w->mapped[lru].size);
        w->mapped[lru] = w->mapped[--w->nmapped];
    }
    mapped_t *m = &w->mapped[w->nmapped++];
    *m = (mapped_t){.peer = peer, .region = d->region, .base = p, .size = (size_t)size,
                    .adopted = d->adopted, .epoch = d->epoch, .used = w->clock};
    return m;
}

int st_win_map(st_win_t *w, int peer, const st_buf_desc_t *d, size_t at, size_t len, void **out)
{
    *out = NULL;
    if (!d->region || !w->can_map || at < d->lo || at + len > d->hi)
        return 0;
    mapped_t *m = NULL;
    w->clock++;
    for (int i = 0; i < w->nmapped; i++) {
        mapped_t *x = &w->mapped[i];
        if (x->peer != peer)
            continue;
        if (x->adopted && x->epoch != d->epoch && x->region != d->region) {
            // The owner has dropped adopted regions since this was mapped: let go of its memory.
            munmap(x->base, x->size);
            *x = w->mapped[--w->nmapped];
            i--;
        } else if (x->region == d->region) {
            m = x;
            m->epoch = d->epoch;
            m->used = w->clock;
        }
    }
    if (!m && !(m = map_region(w, peer, d)))
        return errno ? errno : EIO;
    if (d->offset + (d->hi - d->lo) > m->size)
        return ERANGE;
    *out = m->base + d->offset + (at - d->lo);
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
