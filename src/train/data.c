/* The byte-level data loader: a file's bytes are its tokens. A batch row is a window of T + 1 bytes
 * whose start is a hash of (seed, split, step, row), so every batch is a pure function of the step:
 * no loader state to checkpoint, identical rows whichever rank asks for them, and a resumed run sees
 * exactly the batches of the uninterrupted one. */
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "strata/train.h"

struct strata_data {
    uint8_t *bytes;
    size_t n, ntrain;
};

strata_status_t strata_data_open(const char *path, double val_fraction, strata_data_t **out)
{
    *out = NULL;
    if (!(val_fraction >= 0.0 && val_fraction <= 0.5))
        return st_error(STRATA_ERR_INVALID_ARG, "data: val_fraction must be in [0, 0.5], got %g",
                        val_fraction);
    FILE *f = fopen(path, "rb");
    if (!f)
        return st_error_errno(STRATA_ERR_IO, errno, "data: cannot open %s", path);
    strata_data_t *d = calloc(1, sizeof *d);
    if (!d) {
        fclose(f);
        return st_error(STRATA_ERR_NO_MEMORY, "data: out of memory");
    }
    size_t cap = 1 << 16;
    d->bytes = malloc(cap);
    size_t r;
    while (d->bytes && (r = fread(d->bytes + d->n, 1, cap - d->n, f)) > 0) {
        d->n += r;
        if (d->n == cap) {
            uint8_t *b = realloc(d->bytes, cap * 2);
            if (!b) {
                free(d->bytes);
                d->bytes = NULL;
                break;
            }
            d->bytes = b;
            cap *= 2;
        }
    }
    bool err = ferror(f);
    fclose(f);
    if (!d->bytes || err) {
        strata_data_close(d);
        return st_error(err ? STRATA_ERR_IO : STRATA_ERR_NO_MEMORY, "data: cannot read %s", path);
    }
    d->ntrain = d->n - (size_t)((double)d->n * val_fraction);
    if (d->ntrain < 2 || (val_fraction > 0 && d->n - d->ntrain < 2)) {
        size_t n = d->n;
        strata_data_close(d);
        return st_error(STRATA_ERR_INVALID_ARG, "data: %s has too few bytes (%zu) to train on",
                        path, n);
    }
    *out = d;
    return STRATA_OK;
}

void strata_data_close(strata_data_t *d)
{
    if (!d)
        return;
    free(d->bytes);
    free(d);
}

size_t strata_data_ntokens(const strata_data_t *d, int split)
{
    return split == 0 ? d->ntrain : d->n - d->ntrain;
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
    const uint8_t *base = d->bytes + (split == 0 ? 0 : d->ntrain);
    size_t n = strata_data_ntokens(d, split);
    if (T < 1 || n < (size_t)T + 1)
        return st_error(STRATA_ERR_INVALID_ARG, "data: the %s split has %zu tokens, fewer than "
                        "seq + 1 = %d", split == 0 ? "training" : "validation", n, T + 1);
    size_t span = n - (size_t)T; // starts in [0, n - T - 1]
    for (int r = 0; r < rows; r++) {
        uint64_t row = (uint64_t)(row_begin + r);
        uint64_t h = mix(mix(mix(seed + 0x9E3779B97F4A7C15ull * (uint64_t)(split + 1)) ^
                             (uint64_t)step) ^ (row * 0xD1B54A32D192ED03ull));
        size_t start = (size_t)(h % span);
        for (int t = 0; t < T; t++) {
            tokens[(size_t)r * T + t] = base[start + t];
            targets[(size_t)r * T + t] = base[start + t + 1];
        }
    }
    return STRATA_OK;
}
