/* Unit tests of windows (src/comm/window.c): adoption of the user's own buffers. One process plays
 * both owner and peer (a pidfd of itself reaches its own memfds), so every check is exact: the
 * user's data survives adoption, a peer's mapping and the user's pointer see the same bytes, a
 * buffer is adopted once, a freed or replaced one is detected and adopted afresh, a buffer grown
 * over an older adoption is adopted whole, and what must not be adopted (the stack, a file, read-only
 * memory, small buffers, STRATA_SHM_ADOPT=0) is left alone. Each test runs with the PROCMAP_QUERY
 * ioctl where the kernel has it, and again reading /proc/self/maps as text. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness/st_test.h"
// st_test.h must come first: it includes cmocka with its prerequisites.
#include "comm/window.h"

#define MIB (1u << 20)

static bool maps_text; /* the second pass: no PROCMAP_QUERY */

static st_win_t *window(void)
{
    st_win_t *w = NULL;
    assert_int_equal(st_win_create(&w), STRATA_OK);
    if (maps_text)
        st_win_use_maps_text(w);
    if (!st_win_adopt_min(w))
        fprintf(stderr, "adoption is impossible here (no pidfd_getfd or CMA)\n");
    assert_true(st_win_adopt_min(w) > 0);
    return w;
}

static void fill(void *p, size_t n, uint32_t seed)
{
    uint32_t *u = p;
    for (size_t i = 0; i < n / 4; i++)
        u[i] = seed * 2654435761u + (uint32_t)i;
}

static bool holds(const void *p, size_t n, uint32_t seed)
{
    const uint32_t *u = p;
    for (size_t i = 0; i < n / 4; i++)
        if (u[i] != seed * 2654435761u + (uint32_t)i)
            return false;
    return true;
}

/* A fresh anonymous mapping at `hint` (or anywhere), as malloc makes for large blocks. */
static void *anon(void *hint, size_t n)
{
    void *p = mmap(hint, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
                   (hint ? MAP_FIXED_NOREPLACE : 0), -1, 0);
    assert_true(p != MAP_FAILED);
    return p;
}

static void adopts_and_shares(void **state)
{
    (void)state;
    st_win_t *w = window();
    const size_t n = 4 * MIB + 100;
    char *buf = malloc(n);
    assert_non_null(buf);
    fill(buf, n - 100, 7);
    st_buf_desc_t d;
    st_win_describe(w, buf, n, &d);
    assert_true(d.region != 0 && d.adopted);
    assert_true(d.lo < 4096 && d.hi > n - 4096 && d.hi <= n); // the whole pages
    assert_true(holds(buf, n - 100, 7));                      // the data survived the remap
    void *peer = NULL;
    assert_int_equal(st_win_map(w, 0, &d, d.lo, d.hi - d.lo, &peer), 0);
    assert_non_null(peer);
    assert_ptr_not_equal(peer, buf + d.lo); // a second mapping of the same pages
    assert_int_equal(memcmp(peer, buf + d.lo, d.hi - d.lo), 0);
    ((char *)peer)[10] = 42; // the peer writes, the user sees it, and back
    assert_int_equal(buf[d.lo + 10], 42);
    buf[d.lo + 11] = 43;
    assert_int_equal(((char *)peer)[11], 43);
    // The partial pages at the ends are not mapped: the caller uses CMA there.
    void *none = (void *)1;
    assert_int_equal(st_win_map(w, 0, &d, 0, 8, &none), 0);
    if (d.lo)
        assert_null(none);
    // Described again: the same region, not a second adoption.
    st_buf_desc_t again;
    st_win_describe(w, buf, n, &again);
    assert_int_equal(again.region, d.region);
    assert_int_equal(again.epoch, d.epoch);
    // A slice of it is described from the same region.
    st_win_describe(w, buf + 2 * MIB, MIB, &again);
    assert_int_equal(again.region, d.region);
    assert_int_equal(again.lo, 0);
    assert_int_equal(again.hi, MIB);
    assert_int_equal(again.offset, (uint64_t)(buf + 2 * MIB - (buf + d.lo)) + 0);
    free(buf);
    st_win_destroy(w);
}

static void replaced_pages_are_adopted_afresh(void **state)
{
    (void)state;
    st_win_t *w = window();
    const size_t n = 2 * MIB;
    char *p = anon(NULL, n);
    fill(p, n, 1);
    st_buf_desc_t d1, d2;
    st_win_describe(w, p, n, &d1);
    assert_true(d1.adopted);
    void *m1 = NULL;
    assert_int_equal(st_win_map(w, 0, &d1, 0, n, &m1), 0);
    // free() and a new allocation at the same address: the old pages are gone.
    assert_int_equal(munmap(p, n), 0);
    assert_ptr_equal(anon(p, n), p);
    fill(p, n, 2);
    st_win_describe(w, p, n, &d2);
    assert_true(d2.adopted);
    assert_true(d2.region != d1.region);
    assert_true(d2.epoch != d1.epoch); // peers learn that a region was dropped
    assert_true(holds(p, n, 2));
    void *m2 = NULL;
    assert_int_equal(st_win_map(w, 0, &d2, 0, n, &m2), 0);
    assert_true(holds(m2, n, 2)); // the new pages, not the stale ones
    munmap(p, n);
    st_win_destroy(w);
}

static void grown_buffer_is_adopted_whole(void **state)
{
    (void)state;
    st_win_t *w = window();
    const size_t n = 8 * MIB;
    char *p = anon(NULL, n);
    fill(p, n, 3);
    st_buf_desc_t small, big;
    st_win_describe(w, p, 2 * MIB, &small); // a first call on a prefix
    assert_true(small.adopted);
    assert_int_equal(small.hi - small.lo, 2 * MIB);
    st_win_describe(w, p, n, &big); // then the whole buffer, over the older adoption
    assert_true(big.adopted);
    assert_int_equal(big.lo, 0);
    assert_int_equal(big.hi, n);
    assert_true(big.region != small.region);
    assert_true(holds(p, n, 3));
    void *m = NULL;
    assert_int_equal(st_win_map(w, 0, &big, 0, n, &m), 0);
    assert_true(holds(m, n, 3));
    munmap(p, n);
    st_win_destroy(w);
}

static void leaves_alone_what_it_must(void **state)
{
    (void)state;
    st_win_t *w = window();
    st_buf_desc_t d;
    // Below the threshold.
    size_t min = st_win_adopt_min(w);
    char *small = malloc(min / 2);
    st_win_describe(w, small, min / 2, &d);
    assert_int_equal(d.region, 0);
    free(small);
    // Read-only memory.
    char *ro = mmap(NULL, 2 * MIB, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(ro != MAP_FAILED);
    st_win_describe(w, ro, 2 * MIB, &d);
    assert_int_equal(d.region, 0);
    munmap(ro, 2 * MIB);
    // A file mapping.
    char path[] = "/tmp/strata-test-window-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    assert_int_equal(ftruncate(fd, 2 * MIB), 0);
    char *file = mmap(NULL, 2 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    assert_true(file != MAP_FAILED);
    st_win_describe(w, file, 2 * MIB, &d);
    assert_int_equal(d.region, 0);
    munmap(file, 2 * MIB);
    close(fd);
    // The stack.
    char onstack[64 << 10];
    memset(onstack, 1, sizeof onstack);
    setenv("STRATA_SHM_ADOPT", "16K", 1);
    st_win_t *w16 = window();
    st_win_describe(w16, onstack, sizeof onstack, &d);
    assert_int_equal(d.region, 0);
    st_win_destroy(w16);
    // Adoption off.
    setenv("STRATA_SHM_ADOPT", "0", 1);
    st_win_t *off = NULL;
    assert_int_equal(st_win_create(&off), STRATA_OK);
    assert_int_equal(st_win_adopt_min(off), 0);
    char *big = malloc(4 * MIB);
    st_win_describe(off, big, 4 * MIB, &d);
    assert_int_equal(d.region, 0);
    free(big);
    st_win_destroy(off);
    unsetenv("STRATA_SHM_ADOPT");
    st_win_destroy(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(adopts_and_shares),
        cmocka_unit_test(replaced_pages_are_adopted_afresh),
        cmocka_unit_test(grown_buffer_is_adopted_whole),
        cmocka_unit_test(leaves_alone_what_it_must),
    };
    int failed = cmocka_run_group_tests_name("window (PROCMAP_QUERY where the kernel has it)", tests,
                                             NULL, NULL);
    maps_text = true;
    failed += cmocka_run_group_tests_name("window (/proc/self/maps as text)", tests, NULL, NULL);
    return failed;
}
