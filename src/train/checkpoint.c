/* safetensors checkpoints: written atomically (temporary file beside the target, fsync, rename,
 * fsync of the directory) with a crc32 of the data in __metadata__, and read back only after the
 * header, every tensor's extent and the checksum have been validated, so a partial or corrupt file
 * is refused with a message naming it. What goes into a checkpoint (which tensors, which shard) is
 * the caller's choice: the trainer, or a ZeRO engine writing one shard per rank. */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "base/base.h"
#include "strata/train.h"

/* ---- crc32 (zlib polynomial, reflected) --------------------------------------------------------- */

static uint32_t crc_table[8][256];

static void crc_init(void)
{
    if (crc_table[0][1])
        return;
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int s = 1; s < 8; s++)
            crc_table[s][i] = (crc_table[s - 1][i] >> 8) ^ crc_table[0][crc_table[s - 1][i] & 0xff];
}

/* Slicing-by-8; call with crc = 0 to start. */
static uint32_t crc32_update(uint32_t crc, const void *buf, size_t n)
{
    crc_init();
    const uint8_t *p = buf;
    crc = ~crc;
    while (n >= 8) {
        uint32_t a = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                            (uint32_t)p[3] << 24);
        crc = crc_table[7][a & 0xff] ^ crc_table[6][(a >> 8) & 0xff] ^
              crc_table[5][(a >> 16) & 0xff] ^ crc_table[4][a >> 24] ^ crc_table[3][p[4]] ^
              crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* ---- writing ------------------------------------------------------------------------------------- */

static size_t tensor_bytes(const strata_ckpt_tensor_t *t)
{
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    return n * sizeof(float);
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

strata_status_t strata_ckpt_write(const char *path, const strata_ckpt_tensor_t *t, int n,
                                  const strata_ckpt_meta_t *meta)
{
    uint32_t crc = 0;
    size_t off = 0;
    json_object *root = json_object_new_object();
    if (!root)
        return st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
    for (int i = 0; i < n; i++) {
        if (t[i].ndim < 1 || t[i].ndim > 4 || !t[i].name || !t[i].data) {
            json_object_put(root);
            return st_error(STRATA_ERR_INVALID_ARG, "checkpoint: tensor %d is malformed", i);
        }
        size_t bytes = tensor_bytes(&t[i]);
        crc = crc32_update(crc, t[i].data, bytes);
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
    char num[32];
    json_object *md = json_object_new_object();
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
    json_object_object_add(md, "config", json_object_new_string(meta->config));
    json_object_object_add(root, "__metadata__", md);
    const char *hdr = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
    size_t hlen = strlen(hdr), padded = (hlen + 7) & ~(size_t)7;
    char *hbuf = malloc(8 + padded);
    if (!hbuf) {
        json_object_put(root);
        return st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
    }
    for (int i = 0; i < 8; i++)
        hbuf[i] = (char)((uint64_t)padded >> (8 * i));
    memcpy(hbuf + 8, hdr, hlen);
    memset(hbuf + 8 + hlen, ' ', padded - hlen);
    json_object_put(root);

    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    strata_status_t rc = STRATA_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(hbuf);
        return st_error_errno(STRATA_ERR_IO, errno, "checkpoint: cannot create %s", tmp);
    }
    ST_TRY_GOTO(write_all(fd, hbuf, 8 + padded, tmp), rc, fail);
    for (int i = 0; i < n; i++)
        ST_TRY_GOTO(write_all(fd, t[i].data, tensor_bytes(&t[i]), tmp), rc, fail);
    if (fsync(fd) != 0) {
        rc = st_error_errno(STRATA_ERR_IO, errno, "checkpoint: fsync %s", tmp);
        goto fail;
    }
    if (close(fd) != 0) {
        fd = -1;
        rc = st_error_errno(STRATA_ERR_IO, errno, "checkpoint: close %s", tmp);
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        rc = st_error_errno(STRATA_ERR_IO, errno, "checkpoint: rename %s to %s", tmp, path);
        goto fail;
    }
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
    free(hbuf);
    return STRATA_OK;
fail:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
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
    float *data; /* the data section, aligned */
    size_t data_bytes;
    ck_entry_t *e;
    int n;
};

void strata_ckpt_close(strata_ckpt_t *ck)
{
    if (!ck)
        return;
    for (int i = 0; i < ck->n; i++)
        free(ck->e[i].name);
    free(ck->e);
    free(ck->data);
    free(ck);
}

static bool meta_int(json_object *md, const char *key, int64_t *out)
{
    json_object *v;
    if (!json_object_object_get_ex(md, key, &v) || !json_object_is_type(v, json_type_string))
        return false;
    char *end;
    const char *s = json_object_get_string(v);
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return false;
    *out = x;
    return true;
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
    root = json_tokener_parse(hdr);
    json_object *md = NULL;
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
    json_object *crcv;
    if (!json_object_object_get_ex(md, "crc32", &crcv)) {
        rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: no crc32 in __metadata__", path);
        goto out;
    }
    uint32_t want = (uint32_t)strtoul(json_object_get_string(crcv), NULL, 16);
    uint32_t got = crc32_update(0, ck->data, ck->data_bytes);
    if (want != got) {
        rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: checksum mismatch (crc32 %08" PRIx32
                      " stored, %08" PRIx32 " computed over %zu data bytes): the file is corrupt "
                      "or partial", path, want, got, ck->data_bytes);
        goto out;
    }
    strata_ckpt_meta_t *m = &ck->meta;
    m->nranks = 1;
    int64_t v;
    if (meta_int(md, "step", &v))
        m->step = v;
    if (meta_int(md, "seed", &v))
        m->seed = (uint64_t)v;
    if (meta_int(md, "data_pos", &v))
        m->data_pos = v;
    if (meta_int(md, "rank", &v))
        m->rank = (int)v;
    if (meta_int(md, "nranks", &v))
        m->nranks = (int)v;
    if (meta_int(md, "shard_offset", &v))
        m->shard_offset = v;
    if (meta_int(md, "shard_count", &v))
        m->shard_count = v;
    json_object *cfg;
    if (json_object_object_get_ex(md, "config", &cfg))
        snprintf(m->config, sizeof m->config, "%s", json_object_get_string(cfg));
    int cap = json_object_object_length(root);
    ck->e = calloc((size_t)cap, sizeof *ck->e);
    if (!ck->e) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "checkpoint %s: out of memory", path);
        goto out;
    }
    json_object_object_foreach(root, key, val)
    {
        if (!strcmp(key, "__metadata__"))
            continue;
        json_object *dt, *shape, *offs;
        if (!json_object_object_get_ex(val, "dtype", &dt) ||
            !json_object_object_get_ex(val, "shape", &shape) ||
            !json_object_object_get_ex(val, "data_offsets", &offs) ||
            !json_object_is_type(shape, json_type_array) ||
            !json_object_is_type(offs, json_type_array) || json_object_array_length(offs) != 2 ||
            json_object_array_length(shape) > 4) {
            rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: tensor '%s' has a malformed entry",
                          path, key);
            goto out;
        }
        if (strcmp(json_object_get_string(dt), "F32") != 0) {
            rc = st_error(STRATA_ERR_UNSUPPORTED, "checkpoint %s: tensor '%s' is %s; only F32 is "
                          "read", path, key, json_object_get_string(dt));
            goto out;
        }
        ck_entry_t *e = &ck->e[ck->n];
        e->ndim = (int)json_object_array_length(shape);
        size_t count = 1;
        for (int d = 0; d < e->ndim; d++) {
            e->shape[d] = json_object_get_int64(json_object_array_get_idx(shape, (size_t)d));
            if (e->shape[d] < 0) {
                rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: tensor '%s' has a negative "
                              "dimension", path, key);
                goto out;
            }
            // A product that wraps could match the byte count ([2^62, 4] over 0 bytes).
            if (__builtin_mul_overflow(count, (size_t)e->shape[d], &count) || count > SIZE_MAX / 4) {
                rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: tensor '%s' has a shape too large "
                              "for any file", path, key);
                goto out;
            }
        }
        int64_t b = json_object_get_int64(json_object_array_get_idx(offs, 0));
        int64_t en = json_object_get_int64(json_object_array_get_idx(offs, 1));
        if (b < 0 || en < b || (size_t)en > ck->data_bytes || (size_t)(en - b) != count * 4 ||
            b % 4 != 0) {
            rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: tensor '%s' has data_offsets [%" PRId64
                          ", %" PRId64 ") that do not fit its shape or the %zu data bytes "
                          "(truncated?)", path, key, b, en, ck->data_bytes);
            goto out;
        }
        e->begin = (size_t)b;
        e->end = (size_t)en;
        e->name = strdup(key);
        if (!e->name) {
            rc = st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
            goto out;
        }
        ck->n++;
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
        memcpy(t[i].data, src, tensor_bytes(&t[i]));
    }
    return STRATA_OK;
}

/* ---- files of a run ---------------------------------------------------------------------------- */

void strata_ckpt_path(const char *dir, int64_t step, int rank, int nranks, char *out, size_t size)
{
    if (nranks <= 1)
        snprintf(out, size, "%s/ckpt_%08" PRId64 ".safetensors", dir, step);
    else
        snprintf(out, size, "%s/ckpt_%08" PRId64 ".rank%d.safetensors", dir, step, rank);
}

static int cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

int strata_ckpt_list(const char *dir, int rank, int nranks, int64_t *steps, int max)
{
    int64_t found[4096];
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        long long s;
        int r = 0, used = 0;
        if (nranks <= 1) {
            if (sscanf(de->d_name, "ckpt_%lld.safetensors%n", &s, &used) != 1 ||
                de->d_name[used] != 0)
                continue;
        } else if (sscanf(de->d_name, "ckpt_%lld.rank%d.safetensors%n", &s, &r, &used) != 2 ||
                   de->d_name[used] != 0 || r != rank) {
            continue;
        }
        if (n < (int)(sizeof found / sizeof found[0]))
            found[n++] = s;
    }
    closedir(d);
    qsort(found, (size_t)n, sizeof found[0], cmp_desc);
    for (int i = 0; i < n && i < max; i++)
        steps[i] = found[i];
    return n < max ? n : max;
}

/* ---- sharded checkpoints ------------------------------------------------------------------------- */

int strata_ckpt_ntensors(const strata_ckpt_t *ck)
{
    return ck ? ck->n : 0;
}

const char *strata_ckpt_tensor_name(const strata_ckpt_t *ck, int i)
{
    return ck && i >= 0 && i < ck->n ? ck->e[i].name : NULL;
}

int strata_ckpt_steps(const char *dir, int64_t *steps, int max)
{
    int64_t a[4096], b[4096];
    int na = strata_ckpt_list(dir, 0, 1, a, 4096), nb = strata_ckpt_list(dir, 0, 2, b, 4096);
    int i = 0, j = 0, n = 0;
    while ((i < na || j < nb) && n < max) { // merge two descending lists, dropping duplicates
        int64_t x = i < na && (j >= nb || a[i] >= b[j]) ? a[i] : b[j];
        if (i < na && a[i] == x)
            i++;
        if (j < nb && b[j] == x)
            j++;
        steps[n++] = x;
    }
    return n;
}

void strata_ckpt_full_free(strata_ckpt_full_t *f)
{
    if (!f)
        return;
    free(f->params);
    free(f->m);
    free(f->v);
    f->params = f->m = f->v = NULL;
}

static strata_status_t assemble_unsharded(const strata_gpt_t *m, strata_ckpt_t *ck, bool with_state,
                                          strata_ckpt_full_t *out)
{
    int nt = strata_model_ntensors(m);
    for (int i = 0; i < nt; i++) {
        const strata_tensor_info_t *ti = strata_model_tensor(m, i);
        strata_ckpt_tensor_t ct = {ti->name, ti->ndim, {ti->shape[0], ti->shape[1]},
                                   out->params + ti->offset};
        ST_TRY(strata_ckpt_load(ck, &ct, 1));
    }
    if (with_state) {
        strata_ckpt_tensor_t st[2] = {{"optim.m", 1, {(int64_t)out->nparams}, out->m},
                                      {"optim.v", 1, {(int64_t)out->nparams}, out->v}};
        ST_TRY(strata_ckpt_load(ck, st, 2));
    }
    return STRATA_OK;
}

/* Copies one shard file's ranges into the arena-indexed arrays, marking coverage. */
static strata_status_t assemble_shard(strata_ckpt_t *ck, bool with_state, strata_ckpt_full_t *out,
                                      unsigned char *seen)
{
    size_t P = out->nparams;
    for (int i = 0; i < ck->n; i++) {
        const char *name = ck->e[i].name;
        unsigned long long off;
        int used = 0;
        if (sscanf(name, "params@%llu%n", &off, &used) != 1 || name[used])
            continue;
        size_t cnt = (ck->e[i].end - ck->e[i].begin) / 4;
        if (ck->e[i].ndim != 1 || off > P || cnt > P - off)
            return st_error(STRATA_ERR_PARSE, "checkpoint %s: range '%s' of %zu floats outside "
                            "the model's %zu parameters", ck->path, name, cnt, P);
        for (size_t k = off; k < off + cnt; k++) {
            if (seen[k])
                return st_error(STRATA_ERR_PARSE, "checkpoint %s: range '%s' overlaps another "
                                "shard", ck->path, name);
            seen[k] = 1;
        }
        memcpy(out->params + off, ck->data + ck->e[i].begin / 4, cnt * sizeof(float));
        if (with_state) {
            char nm[64];
            float *dst[2] = {out->m, out->v};
            const char *pre[2] = {"optim.m", "optim.v"};
            for (int k = 0; k < 2; k++) {
                snprintf(nm, sizeof nm, "%s@%llu", pre[k], off);
                strata_ckpt_tensor_t ct = {nm, 1, {(int64_t)cnt}, dst[k] + off};
                ST_TRY(strata_ckpt_load(ck, &ct, 1));
            }
        }
    }
    return STRATA_OK;
}

strata_status_t strata_ckpt_assemble(const strata_gpt_t *m, const char *dir, int64_t step,
                                     bool with_state, strata_ckpt_full_t *out)
{
    memset(out, 0, sizeof *out);
    size_t P = strata_model_nparams(m);
    out->nparams = P;
    out->params = malloc(P * sizeof(float));
    if (with_state) {
        out->m = malloc(P * sizeof(float));
        out->v = malloc(P * sizeof(float));
    }
    unsigned char *seen = calloc(P, 1);
    strata_status_t rc = STRATA_OK;
    strata_ckpt_t *ck = NULL;
    char path[2048];
    if (!out->params || !seen || (with_state && (!out->m || !out->v))) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory assembling step %" PRId64,
                      step);
        goto out;
    }
    strata_ckpt_path(dir, step, 0, 1, path, sizeof path);
    if (access(path, F_OK) == 0) {
        ST_TRY_GOTO(strata_ckpt_open(path, &ck), rc, out);
        out->meta = ck->meta;
        ST_TRY_GOTO(assemble_unsharded(m, ck, with_state, out), rc, out);
        goto out;
    }
    int nranks = 0;
    for (int r = 0; r == 0 || r < nranks; r++) {
        strata_ckpt_path(dir, step, r, 2, path, sizeof path);
        if (access(path, F_OK) != 0) {
            rc = st_error(STRATA_ERR_IO, "checkpoint step %" PRId64 " in %s is incomplete: %s is "
                          "missing", step, dir, path);
            goto out;
        }
        ST_TRY_GOTO(strata_ckpt_open(path, &ck), rc, out);
        if (r == 0) {
            out->meta = ck->meta;
            nranks = ck->meta.nranks;
            if (nranks < 1) {
                rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: nranks %d", path, nranks);
                goto out;
            }
        } else if (ck->meta.nranks != nranks || ck->meta.step != step || ck->meta.rank != r) {
            rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: metadata (rank %d of %d, step %" PRId64
                          ") does not match rank 0's (%d ranks, step %" PRId64 ")", path,
                          ck->meta.rank, ck->meta.nranks, ck->meta.step, nranks, step);
            goto out;
        }
        ST_TRY_GOTO(assemble_shard(ck, with_state, out, seen), rc, out);
        strata_ckpt_close(ck);
        ck = NULL;
    }
    for (size_t k = 0; k < P; k++)
        if (!seen[k]) {
            rc = st_error(STRATA_ERR_PARSE, "checkpoint step %" PRId64 " in %s: the %d shard "
                          "files leave parameter %zu uncovered (written by a different model?)",
                          step, dir, nranks, k);
            goto out;
        }
out:
    strata_ckpt_close(ck);
    free(seen);
    if (rc < 0)
        strata_ckpt_full_free(out);
    return rc;
}
