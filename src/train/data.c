/* The byte-level data loader: a file's bytes are its tokens. A batch row is a window of T + 1 bytes
 * whose start is a hash of (seed, split, step, row), so every batch is a pure function of the step:
 * no loader state to checkpoint, identical rows whichever rank asks for them, and a resumed run sees
 * exactly the batches of the uninterrupted one.
 *
 * The file is never loaded: open keeps a descriptor and the size, and each row's window is read with
 * pread when a batch asks for it, so a corpus larger than memory trains, and a rank reads only the
 * rows it is given (its data-parallel slice) and only what its pipeline stage needs (tokens, targets
 * or both). pread rather than mmap: a read error or a file truncated under the run comes back as an
 * errno we turn into a message naming the file, where a mapping would raise SIGBUS in whichever
 * thread touched the page; and pread is safe from several threads on one descriptor (the loader
 * thread of train/prefetch.c reads while the step's thread reads validation rows). A window is one
 * system call per row, small beside a row's forward and backward. */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "train/data_hook.h"

struct strata_data {
    int fd;
    size_t n, ntrain;
    atomic_uint_fast64_t bytes_read;
    unsigned read_delay_us; /* test hook (train/data_hook.h): each row's read sleeps this long */
    char path[1024];
};

strata_status_t strata_data_open(const char *path, double val_fraction, strata_data_t **out)
{
    *out = NULL;
    if (!(val_fraction >= 0.0 && val_fraction <= 0.5))
        return st_error(STRATA_ERR_INVALID_ARG, "data: val_fraction must be in [0, 0.5], got %g",
                        val_fraction);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return st_error_errno(STRATA_ERR_IO, errno, "data: cannot open %s", path);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        return st_error_errno(STRATA_ERR_IO, err, "data: cannot stat %s", path);
    }
    if (!S_ISREG(sb.st_mode)) { // a pipe or a device has no size to draw windows from
        close(fd);
        return st_error(STRATA_ERR_IO, "data: %s is not a regular file", path);
    }
    size_t n = (size_t)sb.st_size, ntrain = n - (size_t)((double)n * val_fraction);
    if (ntrain < 2 || (val_fraction > 0 && n - ntrain < 2)) {
        close(fd);
        return st_error(STRATA_ERR_INVALID_ARG, "data: %s has too few bytes (%zu) to train on",
                        path, n);
    }
    strata_data_t *d = calloc(1, sizeof *d);
    if (!d) {
        close(fd);
        return st_error(STRATA_ERR_NO_MEMORY, "data: out of memory");
    }
    d->fd = fd;
    d->n = n;
    d->ntrain = ntrain;
    atomic_init(&d->bytes_read, 0);
    snprintf(d->path, sizeof d->path, "%s", path);
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM); // windows at hashed offsets: no read-ahead
    *out = d;
    return STRATA_OK;
}

void strata_data_close(strata_data_t *d)
{
    if (!d)
        return;
    close(d->fd);
    free(d);
}

size_t strata_data_ntokens(const strata_data_t *d, int split)
{
    return split == 0 ? d->ntrain : d->n - d->ntrain;
}

uint64_t strata_data_bytes_read(const strata_data_t *d)
{
    return atomic_load(&d->bytes_read);
}

void st_data_set_read_delay(strata_data_t *d, unsigned us)
{
    d->read_delay_us = us;
}

/* len bytes at offset off of the file; a short file (truncated since open) is an error. */
static strata_status_t read_at(strata_data_t *d, size_t off, uint8_t *buf, size_t len)
{
    if (d->read_delay_us) {
        struct timespec ts = {d->read_delay_us / 1000000, (long)(d->read_delay_us % 1000000) * 1000};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    for (size_t got = 0; got < len;) {
        ssize_t r = pread(d->fd, buf + got, len - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return st_error_errno(STRATA_ERR_IO, errno, "data: cannot read %s at byte %zu",
                                  d->path, off + got);
        if (r == 0)
            return st_error(STRATA_ERR_IO, "data: cannot read %s at byte %zu: the file ends there "
                            "(it had %zu bytes when opened: was it truncated or replaced?)",
                            d->path, off + got, d->n);
        got += (size_t)r;
    }
    atomic_fetch_add(&d->bytes_read, len);
    return STRATA_OK;
}

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

strata_status_t strata_data_batch(const strata_data_t *d, int split, uint64_t seed, int64_t step,
                                  int row_begin, int rows, int T, int32_t *tokens,
                                  int32_t *targets)
{
    strata_data_t *rd = (strata_data_t *)d; // reading moves only the atomic byte count
    size_t base = split == 0 ? 0 : d->ntrain, n = strata_data_ntokens(d, split);
    if (T < 1 || n < (size_t)T + 1)
        return st_error(STRATA_ERR_INVALID_ARG, "data: the %s split of %s has %zu tokens, fewer "
                        "than seq + 1 = %d", split == 0 ? "training" : "validation", d->path, n,
                        T + 1);
    // Window byte i of a row is token i (i < T) and target i - 1 (i >= 1): read only those asked.
    size_t first = tokens ? 0 : 1, end = targets ? (size_t)T + 1 : (size_t)T;
    size_t span = n - (size_t)T; // starts in [0, n - T - 1]
    uint8_t buf[4096];
    for (int r = 0; r < rows; r++) {
        uint64_t row = (uint64_t)(row_begin + r);
        uint64_t h = mix(mix(mix(seed + 0x9E3779B97F4A7C15ull * (uint64_t)(split + 1)) ^
                             (uint64_t)step) ^ (row * 0xD1B54A32D192ED03ull));
        size_t start = base + (size_t)(h % span);
        int32_t *tk = tokens ? tokens + (size_t)r * T : NULL;
        int32_t *tg = targets ? targets + (size_t)r * T : NULL;
        for (size_t at = first; at < end; at += sizeof buf) {
            size_t len = ST_MIN(sizeof buf, end - at);
            ST_TRY(read_at(rd, start + at, buf, len));
            for (size_t i = 0; i < len; i++) {
                size_t w = at + i;
                if (tk && w < (size_t)T)
                    tk[w] = buf[i];
                if (tg && w >= 1)
                    tg[w - 1] = buf[i];
            }
        }
    }
    return STRATA_OK;
}
