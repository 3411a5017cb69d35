/* One safetensors checkpoint file: written atomically (temporary file beside the target, fsync,
 * rename, fsync of the directory) with a crc32 of the data and a sealed crc32 of the header in
 * __metadata__, and read back only after the header checksum, the data checksum, every metadata
 * field's type and range, every tensor's extent and every value's finiteness have been checked, so
 * a partial, corrupt, edited or poisoned file is refused with a message naming it. What goes into a
 * file (which tensors, which shard) is the caller's; how the files of a step make one checkpoint
 * (manifest, assembly, pruning) is ckpt_step.c. */
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "base/base.h"
#include "strata/train.h"
#include "train/ckpt_internal.h"

/* ---- sealed fields ------------------------------------------------------------------------------- */

bool st_ckpt_sealed_crc(const void *prefix, size_t np, const char *text, size_t n, const char *key,
                        uint32_t *crc, size_t *at)
{
    char pat[64];
    int pl = snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *hit = memmem(text, n, pat, (size_t)pl);
    if (!hit || (size_t)(hit - text) + (size_t)pl + 8 > n ||
        memmem(hit + 1, n - (size_t)(hit + 1 - text), pat, (size_t)pl))
        return false;
    *at = (size_t)(hit - text) + (size_t)pl;
    uint32_t c = st_crc32(0, prefix, np);
    c = st_crc32(c, text, *at);
    c = st_crc32(c, "00000000", 8);
    *crc = st_crc32(c, text + *at + 8, n - *at - 8);
    return true;
}

void st_ckpt_put_crc(char *text, size_t at, uint32_t crc)
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 8; i++)
        text[at + (size_t)i] = hex[(crc >> (28 - 4 * i)) & 0xf];
}

bool st_ckpt_parse_crc(const char *s, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return false;
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return s[8] == 0 || s[8] == '"';
}

/* ---- the atomic write ---------------------------------------------------------------------------- */

void st_ckpt_tmp_name(const char *path, char *out, size_t size)
{
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0])
        snprintf(host, sizeof host, "localhost");
    for (char *h = host; *h; h++) // a host name is one path component
        if (*h == '/')
            *h = '_';
    snprintf(out, size, "%s.tmp.%d.%s", path, (int)getpid(), host);
}

static strata_status_t write_all(int fd, const void *buf, size_t n, const char *path)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w;
        ST_RETRY_EINTR(w, write(fd, p, ST_MIN(n, (size_t)1 << 30)));
        if (w < 0)
            return st_error_errno(STRATA_ERR_IO, errno, "checkpoint: writing %s", path);
        p += w;
        n -= (size_t)w;
    }
    return STRATA_OK;
}

strata_status_t st_ckpt_write_atomic(const char *path, const void *const *bufs, const size_t *lens,
                                     int n, bool durable)
{
    char tmp[4400];
    st_ckpt_tmp_name(path, tmp, sizeof tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return st_error_errno(STRATA_ERR_IO, errno, "checkpoint: cannot create %s", tmp);
    strata_status_t rc = STRATA_OK;
    for (int i = 0; i < n; i++)
        ST_TRY_GOTO(write_all(fd, bufs[i], lens[i], tmp), rc, fail);
    if (durable && fsync(fd) != 0) {
        rc = st_error_errno(STRATA_ERR_IO, errno, "checkpoint: fsync %s", tmp);
        goto fail;
    }
    int cr = close(fd);
    fd = -1;
    if (cr != 0) {
        rc = st_error_errno(STRATA_ERR_IO, errno, "checkpoint: close %s", tmp);
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        rc = st_error_errno(STRATA_ERR_IO, errno, "checkpoint: rename %s to %s", tmp, path);
        goto fail;
    }
    if (!durable)
        return STRATA_OK;
    // Make the rename itself durable.
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    return STRATA_OK;
fail:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    return rc;
}

/* ---- writing ------------------------------------------------------------------------------------- */

static size_t tensor_count(const strata_ckpt_tensor_t *t)
{
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    return n;
}

/* Index of the first NaN or infinity in x[0..n), or n. Blocks are tested without a branch (the
 * exponent bits all ones), which the compiler vectorises; only a block holding one is searched. */
static size_t first_nonfinite(const float *x, size_t n)
{
    enum { BLOCK = 4096 };
    for (size_t b = 0; b < n; b += BLOCK) {
        size_t e = n - b < BLOCK ? n : b + BLOCK;
        uint32_t bad = 0;
        for (size_t i = b; i < e; i++) {
            uint32_t u;
            memcpy(&u, &x[i], sizeof u);
            bad |= (u & 0x7f800000u) == 0x7f800000u;
        }
        for (size_t i = b; bad && i < e; i++)
            if (!isfinite(x[i]))
                return i;
    }
    return n;
}

static bool hex16(const char *s)
{
    for (int i = 0; i < 16; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return s[16] == 0;
}

/* The metadata a file may carry; `what` names the file in the message. */
static strata_status_t check_meta(const strata_ckpt_meta_t *m, const char *what)
{
#define RANGE(cond, field, fmt, v)                                                                 \
    if (!(cond))                                                                                   \
    return st_error(STRATA_ERR_PARSE, "checkpoint %s: __metadata__ \"" field "\" is " fmt          \
                    ", outside its range", what, v)
    RANGE(m->step >= 0 && m->step <= ST_CKPT_INT_MAX, "step", "%" PRId64, m->step);
    RANGE(m->data_pos >= 0 && m->data_pos <= ST_CKPT_INT_MAX, "data_pos", "%" PRId64, m->data_pos);
    RANGE(m->nranks >= 1 && m->nranks <= ST_CKPT_RANKS_MAX, "nranks", "%d", m->nranks);
    RANGE(m->rank >= 0 && m->rank < m->nranks, "rank", "%d", m->rank);
    RANGE(m->shard_offset >= 0 && m->shard_offset <= ST_CKPT_INT_MAX, "shard_offset", "%" PRId64,
          m->shard_offset);
    RANGE(m->shard_count >= 0 && m->shard_count <= ST_CKPT_INT_MAX, "shard_count", "%" PRId64,
          m->shard_count);
#undef RANGE
    if (m->run_id[0] && !hex16(m->run_id))
        return st_error(STRATA_ERR_PARSE, "checkpoint %s: __metadata__ \"run_id\" is \"%s\", "
                        "expected 16 lowercase hex digits", what, m->run_id);
    return STRATA_OK;
}

strata_status_t strata_ckpt_write(const char *path, const strata_ckpt_tensor_t *t, int n,
                                  const strata_ckpt_meta_t *meta, strata_ckpt_digest_t *digest)
{
    return st_ckpt_write(path, t, n, meta, NULL, 0, digest, true);
}

/* Checks every tensor's shape and values (a non-finite value is never written) and returns in *crc
 * the crc32 of their data, in order. */
static strata_status_t check_tensors(const char *path, const strata_ckpt_tensor_t *t, int n,
                                     uint32_t *crc)
{
    for (int i = 0; i < n; i++) {
        bool ok = t[i].ndim >= 1 && t[i].ndim <= 4 && t[i].name && t[i].data;
        for (int d = 0; ok && d < t[i].ndim; d++)
            ok = t[i].shape[d] >= 0 && t[i].shape[d] <= ST_CKPT_INT_MAX;
        if (!ok)
            return st_error(STRATA_ERR_INVALID_ARG, "checkpoint %s: tensor %d is malformed", path,
                            i);
    }
    // One pass over the data: each chunk checked finite, then checksummed while still in cache.
    enum { CHUNK = 1 << 15 };
    *crc = 0;
    for (int i = 0; i < n; i++) {
        size_t cnt = tensor_count(&t[i]);
        for (size_t b = 0; b < cnt; b += CHUNK) {
            size_t m = cnt - b < CHUNK ? cnt - b : CHUNK, bad = first_nonfinite(t[i].data + b, m);
            if (bad < m)
                return st_error(STRATA_ERR_INVALID_ARG, "checkpoint %s: tensor '%s' element %zu "
                                "is %g: a non-finite state is never checkpointed (not written)",
                                path, t[i].name, b + bad, (double)t[i].data[b + bad]);
            *crc = st_crc32(*crc, t[i].data + b, m * sizeof(float));
        }
    }
    return STRATA_OK;
}

/* The 8 length bytes and the JSON header (padded with spaces to a multiple of 8) of n tensors laid
 * one after another, with `md` (taken over) as __metadata__; *len its size. NULL when out of
 * memory. */
static char *build_header(const strata_ckpt_tensor_t *t, int n, json_object *md, size_t *len)
{
    size_t off = 0;
    json_object *root = json_object_new_object();
    if (!root) {
        json_object_put(md);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        size_t bytes = tensor_count(&t[i]) * sizeof(float);
        json_object *o = json_object_new_object(), *shape = json_object_new_array(),
                    *offs = json_object_new_array();
        for (int d = 0; d < t[i].ndim; d++)
            json_object_array_add(shape, json_object_new_int64(t[i].shape[d]));
        json_object_array_add(offs, json_object_new_int64((int64_t)off));
        json_object_array_add(offs, json_object_new_int64((int64_t)(off + bytes)));
        json_object_object_add(o, "dtype", json_object_new_string("F32"));
        json_object_object_add(o, "shape", shape);
        json_object_object_add(o, "data_offsets", offs);
        json_object_object_add(root, t[i].name, o);
        off += bytes;
    }
    json_object_object_add(root, "__metadata__", md);
    const char *hdr = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
    size_t hlen = strlen(hdr), padded = (hlen + 7) & ~(size_t)7;
    char *hbuf = malloc(8 + padded);
    if (hbuf) {
        for (int i = 0; i < 8; i++)
            hbuf[i] = (char)((uint64_t)padded >> (8 * i));
        memcpy(hbuf + 8, hdr, hlen);
        memset(hbuf + 8 + hlen, ' ', padded - hlen);
        *len = 8 + padded;
    }
    json_object_put(root);
    return hbuf;
}

/* The header, then every tensor's data, written atomically. */
static strata_status_t write_file(const char *path, const strata_ckpt_tensor_t *t, int n,
                                  const char *hbuf, size_t hlen, bool durable)
{
    const void **bufs = malloc(((size_t)n + 1) * sizeof *bufs);
    size_t *lens = malloc(((size_t)n + 1) * sizeof *lens);
    strata_status_t rc;
    if (!bufs || !lens) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
    } else {
        bufs[0] = hbuf;
        lens[0] = hlen;
        for (int i = 0; i < n; i++) {
            bufs[i + 1] = t[i].data;
            lens[i + 1] = tensor_count(&t[i]) * sizeof(float);
        }
        rc = st_ckpt_write_atomic(path, bufs, lens, n + 1, durable);
    }
    free(bufs);
    free(lens);
    return rc;
}

strata_status_t st_ckpt_write(const char *path, const strata_ckpt_tensor_t *t, int n,
                              const strata_ckpt_meta_t *meta, const strata_ckpt_piece_t *pieces,
                              int npieces, strata_ckpt_digest_t *digest, bool durable)
{
    if (check_meta(meta, path) < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "%s (not written)", strata_last_error());
    uint32_t crc;
    ST_TRY(check_tensors(path, t, n, &crc));
    char num[32], *pieces_text = NULL;
    if (npieces > 0 && !(pieces_text = st_ckpt_pieces_json(pieces, npieces)))
        return st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
    json_object *md = json_object_new_object();
    if (!md) {
        free(pieces_text);
        return st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
    }
    json_object_object_add(md, "format", json_object_new_string("strata"));
#define META_I(key, fmt, v)                                                                        \
    snprintf(num, sizeof num, fmt, v);                                                             \
    json_object_object_add(md, key, json_object_new_string(num))
    META_I("crc32", "%08" PRIx32, crc);
    META_I("step", "%" PRId64, meta->step);
    META_I("seed", "%" PRIu64, meta->seed);
    META_I("data_pos", "%" PRId64, meta->data_pos);
    META_I("rank", "%d", meta->rank);
    META_I("nranks", "%d", meta->nranks);
    META_I("shard_offset", "%" PRId64, meta->shard_offset);
    META_I("shard_count", "%" PRId64, meta->shard_count);
#undef META_I
    json_object_object_add(md, "run_id", json_object_new_string(meta->run_id));
    json_object_object_add(md, "config", json_object_new_string(meta->config));
    if (pieces_text)
        json_object_object_add(md, "tensors", json_object_new_string(pieces_text));
    free(pieces_text);
    json_object_object_add(md, "header_crc32", json_object_new_string("00000000"));
    size_t hlen;
    char *hbuf = build_header(t, n, md, &hlen);
    if (!hbuf)
        return st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
    uint32_t hcrc;
    size_t at;
    if (!st_ckpt_sealed_crc(hbuf, 8, hbuf + 8, hlen - 8, "header_crc32", &hcrc, &at)) {
        free(hbuf); // a tensor named "header_crc32" with a string value cannot exist: a bug
        return st_error(STRATA_ERR_INTERNAL, "checkpoint %s: cannot seal the header", path);
    }
    st_ckpt_put_crc(hbuf + 8, at, hcrc);
    strata_status_t rc = write_file(path, t, n, hbuf, hlen, durable);
    free(hbuf);
    if (rc == STRATA_OK && digest) {
        uint64_t bytes = hlen;
        for (int i = 0; i < n; i++)
            bytes += tensor_count(&t[i]) * sizeof(float);
        *digest = (strata_ckpt_digest_t){hcrc, bytes};
    }
    return rc;
}

strata_status_t st_safetensors_write(const char *path, const strata_ckpt_tensor_t *t, int n,
                                     const char *const *meta)
{
    uint32_t crc;
    ST_TRY(check_tensors(path, t, n, &crc));
    json_object *md = json_object_new_object();
    if (!md)
        return st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
    for (int i = 0; meta && meta[i]; i += 2)
        json_object_object_add(md, meta[i], json_object_new_string(meta[i + 1]));
    size_t hlen;
    char *hbuf = build_header(t, n, md, &hlen);
    if (!hbuf)
        return st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
    strata_status_t rc = write_file(path, t, n, hbuf, hlen, true);
    free(hbuf);
    return rc;
}

/* ---- reading ------------------------------------------------------------------------------------- */

typedef struct ck_entry {
    char *name;
    int ndim;
    int64_t shape[4];
    size_t begin, end;
} ck_entry_t;

struct strata_ckpt {
    char path[1024];
    strata_ckpt_meta_t meta;
    strata_ckpt_digest_t digest;
    float *data; /* the data section, aligned */
    size_t data_bytes;
    ck_entry_t *e;
    int n;
    strata_ckpt_piece_t *pieces; /* the "tensors" record (ckpt_pieces.c) */
    int npieces;
};

void strata_ckpt_close(strata_ckpt_t *ck)
{
    if (!ck)
        return;
    for (int i = 0; i < ck->n; i++)
        free(ck->e[i].name);
    free(ck->e);
    st_ckpt_pieces_free(ck->pieces, ck->npieces);
    free(ck->data);
    free(ck);
}

/* A metadata field (safetensors: every value a string). *s NULL when absent. */
static strata_status_t meta_str(json_object *md, const char *key, const char *path, const char **s)
{
    json_object *v;
    *s = NULL;
    if (!json_object_object_get_ex(md, key, &v))
        return STRATA_OK;
    if (!json_object_is_type(v, json_type_string))
        return st_error(STRATA_ERR_PARSE, "checkpoint %s: __metadata__ \"%s\" is not a string",
                        path, key);
    *s = json_object_get_string(v);
    return STRATA_OK;
}

/* An integer field in [lo, hi], written as decimal digits (a '-' allowed only when lo < 0). A
 * missing optional one leaves *out. */
static strata_status_t meta_int(json_object *md, const char *key, bool required, int64_t lo,
                                int64_t hi, const char *path, int64_t *out)
{
    const char *s;
    ST_TRY(meta_str(md, key, path, &s));
    if (!s) {
        if (required)
            return st_error(STRATA_ERR_PARSE, "checkpoint %s: __metadata__ has no \"%s\"", path,
                            key);
        return STRATA_OK;
    }
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    bool digits = (s[0] >= '0' && s[0] <= '9') || (s[0] == '-' && s[1] >= '0' && s[1] <= '9');
    if (!digits || errno || *end || x < lo || x > hi)
        return st_error(STRATA_ERR_PARSE, "checkpoint %s: __metadata__ \"%s\" is \"%.40s\", "
                        "expected an integer in [%" PRId64 ", %" PRId64 "]", path, key, s, lo, hi);
    *out = x;
    return STRATA_OK;
}

/* Reads and checks the metadata into ck->meta. */
static strata_status_t read_meta(json_object *md, strata_ckpt_t *ck)
{
    const char *path = ck->path, *s;
    strata_ckpt_meta_t *m = &ck->meta;
    ST_TRY(meta_str(md, "format", path, &s));
    if (!s || strcmp(s, "strata") != 0)
        return st_error(STRATA_ERR_PARSE, "checkpoint %s: __metadata__ \"format\" is not "
                        "\"strata\" (not a strata checkpoint)", path);
    int64_t v = 0, nranks = 1, rank = 0;
    ST_TRY(meta_int(md, "step", true, 0, ST_CKPT_INT_MAX, path, &v));
    m->step = v;
    v = 0;
    ST_TRY(meta_str(md, "seed", path, &s));
    if (s) { // the one unsigned 64-bit field
        char *end;
        errno = 0;
        unsigned long long u = strtoull(s, &end, 10);
        if (!(s[0] >= '0' && s[0] <= '9') || errno || *end)
            return st_error(STRATA_ERR_PARSE, "checkpoint %s: __metadata__ \"seed\" is \"%.40s\","
                            " expected an unsigned integer", path, s);
        m->seed = u;
    }
    ST_TRY(meta_int(md, "data_pos", false, 0, ST_CKPT_INT_MAX, path, &v));
    m->data_pos = v;
    ST_TRY(meta_int(md, "nranks", false, 1, ST_CKPT_RANKS_MAX, path, &nranks));
    ST_TRY(meta_int(md, "rank", false, 0, nranks - 1, path, &rank));
    m->nranks = (int)nranks;
    m->rank = (int)rank;
    v = 0;
    ST_TRY(meta_int(md, "shard_offset", false, 0, ST_CKPT_INT_MAX, path, &v));
    m->shard_offset = v;
    v = 0;
    ST_TRY(meta_int(md, "shard_count", false, 0, ST_CKPT_INT_MAX, path, &v));
    m->shard_count = v;
    ST_TRY(meta_str(md, "run_id", path, &s));
    if (s && strlen(s) >= sizeof m->run_id)
        return st_error(STRATA_ERR_PARSE, "checkpoint %s: __metadata__ \"run_id\" is too long",
                        path);
    snprintf(m->run_id, sizeof m->run_id, "%s", s ? s : "");
    ST_TRY(meta_str(md, "config", path, &s));
    if (s && strlen(s) >= sizeof m->config)
        return st_error(STRATA_ERR_PARSE, "checkpoint %s: __metadata__ \"config\" is longer than "
                        "%zu bytes", path, sizeof m->config - 1);
    snprintf(m->config, sizeof m->config, "%s", s ? s : "");
    return check_meta(m, path);
}

bool st_ckpt_json_int(json_object *v, int64_t lo, int64_t hi, int64_t *out)
{
    if (!v || !json_object_is_type(v, json_type_int))
        return false;
    errno = 0;
    int64_t x = json_object_get_int64(v);
    if (errno || x < lo || x > hi)
        return false;
    *out = x;
    return true;
}

static int cmp_begin(const void *a, const void *b)
{
    size_t x = ((const ck_entry_t *)a)->begin, y = ((const ck_entry_t *)b)->begin;
    return (x > y) - (x < y);
}

/* Reads every tensor entry of the header into ck->e, checking dtype, shape and extent. */
static strata_status_t read_entries(json_object *root, strata_ckpt_t *ck)
{
    const char *path = ck->path;
    int cap = json_object_object_length(root);
    ck->e = calloc((size_t)cap + 1, sizeof *ck->e);
    if (!ck->e)
        return st_error(STRATA_ERR_NO_MEMORY, "checkpoint %s: out of memory", path);
    json_object_object_foreach(root, key, val)
    {
        if (!strcmp(key, "__metadata__"))
            continue;
        json_object *dt, *shape, *offs;
        if (!json_object_is_type(val, json_type_object) ||
            !json_object_object_get_ex(val, "dtype", &dt) ||
            !json_object_object_get_ex(val, "shape", &shape) ||
            !json_object_object_get_ex(val, "data_offsets", &offs) ||
            !json_object_is_type(dt, json_type_string) ||
            !json_object_is_type(shape, json_type_array) ||
            !json_object_is_type(offs, json_type_array) || json_object_array_length(offs) != 2 ||
            json_object_array_length(shape) > 4)
            return st_error(STRATA_ERR_PARSE, "checkpoint %s: tensor '%s' has a malformed entry",
                            path, key);
        if (strcmp(json_object_get_string(dt), "F32") != 0)
            return st_error(STRATA_ERR_UNSUPPORTED, "checkpoint %s: tensor '%s' is %s; only F32 "
                            "is read", path, key, json_object_get_string(dt));
        ck_entry_t *e = &ck->e[ck->n];
        e->ndim = (int)json_object_array_length(shape);
        size_t count = 1;
        for (int d = 0; d < e->ndim; d++) {
            if (!st_ckpt_json_int(json_object_array_get_idx(shape, (size_t)d), 0, ST_CKPT_INT_MAX,
                             &e->shape[d]) ||
                (e->shape[d] > 0 && count > (size_t)ST_CKPT_INT_MAX / (size_t)e->shape[d]))
                return st_error(STRATA_ERR_PARSE, "checkpoint %s: tensor '%s' has a shape that "
                                "is not a list of integers in [0, 2^53]", path, key);
            count *= (size_t)e->shape[d];
        }
        int64_t b, en;
        if (!st_ckpt_json_int(json_object_array_get_idx(offs, 0), 0, ST_CKPT_INT_MAX, &b) ||
            !st_ckpt_json_int(json_object_array_get_idx(offs, 1), 0, ST_CKPT_INT_MAX, &en) || en < b ||
            (size_t)en > ck->data_bytes || (size_t)(en - b) != count * 4 || b % 4 != 0)
            return st_error(STRATA_ERR_PARSE, "checkpoint %s: tensor '%s' has data_offsets that "
                            "do not fit its shape or the %zu data bytes (truncated?)", path, key,
                            ck->data_bytes);
        e->begin = (size_t)b;
        e->end = (size_t)en;
        e->name = strdup(key);
        if (!e->name)
            return st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
        ck->n++;
    }
    // The extents tile the data section exactly (safetensors' rule): no gap, no overlap.
    ck_entry_t *sorted = malloc(((size_t)ck->n + 1) * sizeof *sorted);
    if (!sorted)
        return st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
    memcpy(sorted, ck->e, (size_t)ck->n * sizeof *sorted);
    qsort(sorted, (size_t)ck->n, sizeof *sorted, cmp_begin);
    size_t pos = 0;
    const char *gap = NULL;
    for (int i = 0; i < ck->n && !gap; i++) {
        if (sorted[i].begin != pos)
            gap = sorted[i].name;
        pos = sorted[i].end;
    }
    free(sorted);
    if (gap || pos != ck->data_bytes)
        return st_error(STRATA_ERR_PARSE, "checkpoint %s: the tensors' data_offsets do not tile "
                        "the %zu data bytes (at '%s')", path, ck->data_bytes, gap ? gap : "end");
    return STRATA_OK;
}

/* The "tensors" record, when there is one: every piece held by the three tensors of its range. */
static strata_status_t read_pieces(json_object *md, strata_ckpt_t *ck)
{
    const char *text;
    ST_TRY(meta_str(md, "tensors", ck->path, &text));
    if (!text)
        return STRATA_OK;
    ST_TRY(st_ckpt_pieces_parse(text, ck->path, &ck->pieces, &ck->npieces));
    for (int i = 0; i < ck->npieces; i++) {
        const strata_ckpt_piece_t *p = &ck->pieces[i];
        for (int k = 0; k < 3; k++) {
            static const char *const pre[3] = {"params", "optim.m", "optim.v"};
            char name[64];
            snprintf(name, sizeof name, "%s@%" PRId64, pre[k], p->range);
            int nd;
            int64_t sh[4];
            if (!strata_ckpt_find(ck, name, &nd, sh) || nd != 1 ||
                p->at + (p->end - p->begin) > sh[0])
                return st_error(STRATA_ERR_PARSE, "checkpoint %s: __metadata__ \"tensors\" puts "
                                "'%s' elements [%" PRId64 ", %" PRId64 ") in '%s' from %" PRId64
                                ", which does not hold them", ck->path, p->name, p->begin, p->end,
                                name, p->at);
        }
    }
    return STRATA_OK;
}

strata_status_t strata_ckpt_open(const char *path, strata_ckpt_t **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return st_error_errno(STRATA_ERR_IO, errno, "checkpoint %s: cannot open", path);
    strata_status_t rc = STRATA_OK;
    json_object *root = NULL;
    char *hdr = NULL;
    strata_ckpt_t *ck = calloc(1, sizeof *ck);
    if (!ck) {
        fclose(f);
        return st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
    }
    snprintf(ck->path, sizeof ck->path, "%s", path);
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        rc = st_error_errno(STRATA_ERR_IO, errno, "checkpoint %s: stat", path);
        goto out;
    }
    size_t size = (size_t)st.st_size;
    uint8_t len8[8];
    if (size < 8 || fread(len8, 1, 8, f) != 8) {
        rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: truncated (%zu bytes, no header)", path,
                      size);
        goto out;
    }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)len8[i] << (8 * i);
    if (hlen > size - 8 || hlen > (1u << 30)) {
        rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: truncated or corrupt (header of %" PRIu64
                      " bytes in a %zu-byte file)", path, hlen, size);
        goto out;
    }
    hdr = malloc(hlen + 1);
    ck->data_bytes = size - 8 - hlen;
    ck->data = malloc(ck->data_bytes ? ck->data_bytes : 1);
    if (!hdr || !ck->data) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "checkpoint %s: out of memory", path);
        goto out;
    }
    if (fread(hdr, 1, hlen, f) != hlen || fread(ck->data, 1, ck->data_bytes, f) != ck->data_bytes) {
        rc = st_error(STRATA_ERR_IO, "checkpoint %s: read failed", path);
        goto out;
    }
    hdr[hlen] = 0;
    // The header's own checksum first: nothing it says is believed before.
    uint32_t want, got;
    size_t at;
    if (!st_ckpt_sealed_crc(len8, 8, hdr, hlen, "header_crc32", &got, &at) ||
        !st_ckpt_parse_crc(hdr + at, &want)) {
        rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: no header_crc32 in __metadata__ (not a "
                      "strata checkpoint, corrupt, or written by a strata whose header was not "
                      "checksummed)", path);
        goto out;
    }
    if (want != got) {
        rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: header checksum mismatch (header_crc32 "
                      "%08" PRIx32 " stored, %08" PRIx32 " computed): the header or its metadata "
                      "was altered or is corrupt", path, want, got);
        goto out;
    }
    ck->digest = (strata_ckpt_digest_t){want, size};
    root = json_tokener_parse(hdr);
    json_object *md = NULL, *crcv;
    if (!root || !json_object_is_type(root, json_type_object)) {
        rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: corrupt header (not a JSON object)", path);
        goto out;
    }
    if (!json_object_object_get_ex(root, "__metadata__", &md) ||
        !json_object_is_type(md, json_type_object)) {
        rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: no __metadata__ (not a strata checkpoint)",
                      path);
        goto out;
    }
    if (!json_object_object_get_ex(md, "crc32", &crcv) ||
        !json_object_is_type(crcv, json_type_string) ||
        !st_ckpt_parse_crc(json_object_get_string(crcv), &want)) {
        rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: no valid crc32 in __metadata__", path);
        goto out;
    }
    got = st_crc32(0, ck->data, ck->data_bytes);
    if (want != got) {
        rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: checksum mismatch (crc32 %08" PRIx32
                      " stored, %08" PRIx32 " computed over %zu data bytes): the file is corrupt "
                      "or partial", path, want, got, ck->data_bytes);
        goto out;
    }
    ST_TRY_GOTO(read_meta(md, ck), rc, out);
    ST_TRY_GOTO(read_entries(root, ck), rc, out);
    ST_TRY_GOTO(read_pieces(md, ck), rc, out);
    // A checksum proves the bytes are the ones written, not that they are numbers to train from.
    for (int i = 0; i < ck->n; i++) {
        const ck_entry_t *e = &ck->e[i];
        size_t cnt = (e->end - e->begin) / 4, bad = first_nonfinite(ck->data + e->begin / 4, cnt);
        if (bad < cnt) {
            rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: tensor '%s' element %zu is %g: a "
                          "non-finite value is not loaded", path, e->name, bad,
                          (double)ck->data[e->begin / 4 + bad]);
            goto out;
        }
    }
out:
    fclose(f);
    free(hdr);
    if (root)
        json_object_put(root);
    if (rc < 0) {
        strata_ckpt_close(ck);
        return rc;
    }
    *out = ck;
    return STRATA_OK;
}

const strata_ckpt_meta_t *strata_ckpt_meta(const strata_ckpt_t *ck)
{
    return &ck->meta;
}

strata_ckpt_digest_t strata_ckpt_digest(const strata_ckpt_t *ck)
{
    return ck->digest;
}

const float *strata_ckpt_find(const strata_ckpt_t *ck, const char *name, int *ndim,
                              int64_t shape[4])
{
    for (int i = 0; i < ck->n; i++)
        if (!strcmp(ck->e[i].name, name)) {
            if (ndim)
                *ndim = ck->e[i].ndim;
            if (shape)
                memcpy(shape, ck->e[i].shape, sizeof ck->e[i].shape);
            return ck->data + ck->e[i].begin / 4;
        }
    return NULL;
}

strata_status_t strata_ckpt_load(const strata_ckpt_t *ck, const strata_ckpt_tensor_t *t, int n)
{
    for (int i = 0; i < n; i++) {
        int nd = 0;
        int64_t sh[4] = {0};
        const float *src = strata_ckpt_find(ck, t[i].name, &nd, sh);
        if (!src)
            return st_error(STRATA_ERR_PARSE, "checkpoint %s: no tensor '%s'", ck->path,
                            t[i].name);
        bool same = nd == t[i].ndim;
        for (int d = 0; same && d < nd; d++)
            same = sh[d] == t[i].shape[d];
        if (!same)
            return st_error(STRATA_ERR_PARSE, "checkpoint %s: tensor '%s' has shape [%" PRId64
                            ", %" PRId64 "] (%d dims), expected [%" PRId64 ", %" PRId64 "] (%d "
                            "dims)", ck->path, t[i].name, sh[0], sh[1], nd, t[i].shape[0],
                            t[i].ndim > 1 ? t[i].shape[1] : 0, t[i].ndim);
        memcpy(t[i].data, src, tensor_count(&t[i]) * sizeof(float));
    }
    return STRATA_OK;
}

int strata_ckpt_ntensors(const strata_ckpt_t *ck)
{
    return ck ? ck->n : 0;
}

const char *strata_ckpt_tensor_name(const strata_ckpt_t *ck, int i)
{
    return ck && i >= 0 && i < ck->n ? ck->e[i].name : NULL;
}

int strata_ckpt_npieces(const strata_ckpt_t *ck)
{
    return ck ? ck->npieces : 0;
}

const strata_ckpt_piece_t *strata_ckpt_piece(const strata_ckpt_t *ck, int i)
{
    return ck && i >= 0 && i < ck->npieces ? &ck->pieces[i] : NULL;
}
